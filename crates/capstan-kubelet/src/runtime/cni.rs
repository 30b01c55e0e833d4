//! The pod network: once the node has a pod range (`spec.podCIDR`, from the node IPAM
//! controller), the agent writes a CNI configuration list that containerd's CRI plugin uses
//! for every sandbox: a Linux bridge with the node's range handed out by `host-local`, masquerade
//! for traffic leaving the range, and `portmap` for `hostPort`s. containerd adds the loopback
//! interface itself (with the `loopback` plugin). The plugins are Debian's
//! `containernetworking-plugins`.

use std::path::{Path, PathBuf};

use serde_json::json;

/// The file name of the configuration list: CRI takes the first file by name.
pub const CONFLIST: &str = "10-capstan.conflist";

/// The pod network's settings.
#[derive(Debug, Clone)]
pub struct Network {
    /// The bridge's name (`cni0` by default; tests running several nodes on one machine give
    /// each its own).
    pub bridge: String,
    /// Where `host-local` records the addresses it handed out.
    pub ipam_dir: PathBuf,
    /// The interface MTU, when not the bridge's default.
    pub mtu: Option<u32>,
}

/// The configuration list for a node whose pods take addresses from `pod_cidr`.
pub fn conflist(network: &Network, pod_cidr: &str) -> serde_json::Value {
    let mut bridge = json!({
        "type": "bridge",
        "bridge": network.bridge,
        "isGateway": true,
        "ipMasq": true,
        "hairpinMode": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": pod_cidr}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": network.ipam_dir.display().to_string(),
        },
    });
    if let Some(mtu) = network.mtu {
        bridge["mtu"] = json!(mtu);
    }
    json!({
        "cniVersion": "1.0.0",
        "name": "capstan",
        "plugins": [
            bridge,
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
        ],
    })
}

/// Writes the configuration list into `conf_dir` (atomically, so containerd never reads half a
/// file), unless it already says the same. Returns whether it changed.
pub fn write(conf_dir: &Path, network: &Network, pod_cidr: &str) -> std::io::Result<bool> {
    let text = serde_json::to_string_pretty(&conflist(network, pod_cidr))
        .map_err(std::io::Error::other)?;
    let path = conf_dir.join(CONFLIST);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    std::fs::create_dir_all(conf_dir)?;
    std::fs::create_dir_all(&network.ipam_dir)?;
    let temporary = conf_dir.join(format!(".{CONFLIST}.tmp"));
    std::fs::write(&temporary, &text)?;
    std::fs::rename(&temporary, &path)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network() -> Network {
        Network {
            bridge: "cni0".to_owned(),
            ipam_dir: PathBuf::from("/var/lib/capstan/agent/cni/networks"),
            mtu: None,
        }
    }

    #[test]
    fn the_bridge_hands_out_the_node_range() {
        let list = conflist(&network(), "10.42.3.0/24");
        assert_eq!(list["plugins"][0]["type"], "bridge");
        assert_eq!(list["plugins"][0]["bridge"], "cni0");
        assert_eq!(
            list["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.42.3.0/24"
        );
        assert_eq!(list["plugins"][1]["type"], "portmap");
        assert_eq!(list["plugins"][1]["capabilities"]["portMappings"], true);
    }

    #[test]
    fn writing_twice_changes_nothing_the_second_time() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut network = network();
        network.ipam_dir = dir.path().join("ipam");
        assert!(write(dir.path(), &network, "10.42.0.0/24")?);
        assert!(!write(dir.path(), &network, "10.42.0.0/24")?);
        assert!(write(dir.path(), &network, "10.42.1.0/24")?);
        let text = std::fs::read_to_string(dir.path().join(CONFLIST))?;
        assert!(text.contains("10.42.1.0/24"));
        Ok(())
    }
}
