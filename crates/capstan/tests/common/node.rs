//! What the node tests share: waiting, jsonpath reads, and the cleanup of a node (its pod
//! sandboxes, its containerd, the tmpfs volumes it mounted, its bridge) even when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `capstan agent` joining `server` with `token`, its state in `data_dir`, as node
/// `node` (at `node_ip` when given) on bridge `bridge`, with a free kubelet port, proxy metrics
/// port and load balancer port; its log goes to the test's stderr. Returns it and where its
/// service proxy serves metrics.
pub fn spawn_agent(
    server: &str,
    token: &str,
    data_dir: &Path,
    node: &str,
    node_ip: Option<&str>,
    bridge: &str,
) -> (Child, String) {
    let command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    start_agent(command, server, token, data_dir, node, node_ip, bridge)
}

/// [`spawn_agent`] in the network namespace `netns` (a name `ip netns` lists; entered with
/// `nsenter`, which runs the agent itself, so the child is the agent): the agent, its
/// containerd, pod bridge and service rules live there, as on a machine of its own.
pub fn spawn_agent_in(
    netns: &str,
    server: &str,
    token: &str,
    data_dir: &Path,
    node: &str,
    node_ip: &str,
    bridge: &str,
) -> (Child, String) {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net=/run/netns/{netns}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_capstan"));
    start_agent(
        command,
        server,
        token,
        data_dir,
        node,
        Some(node_ip),
        bridge,
    )
}

/// Runs `command` (the capstan binary, or what runs it) with `agent` and its flags.
fn start_agent(
    mut command: Command,
    server: &str,
    token: &str,
    data_dir: &Path,
    node: &str,
    node_ip: Option<&str>,
    bridge: &str,
) -> (Child, String) {
    let proxy_metrics = format!("127.0.0.1:{}", super::free_port());
    command
        .args(["agent", "--server", server, "--token", token])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--node-name", node, "--cni-bridge", bridge])
        .args(["--kubelet-port", &super::free_port().to_string()])
        .args(["--lb-server-port", "0"])
        .args(["--proxy-metrics-bind-address", &proxy_metrics]);
    if let Some(ip) = node_ip {
        command.args(["--node-ip", ip]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    (child, proxy_metrics)
}

/// The image the node tests run: Debian's static busybox, packed by `capstan image busybox`.
pub const IMAGE: &str = "busybox:e2e";

/// Packs [`IMAGE`] into the node's preload directory under `data_dir` (imported when the node
/// starts); returns the archive.
pub fn pack_busybox(data_dir: &Path) -> PathBuf {
    let archive = data_dir.join("agent/images/busybox.tar");
    let packed = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "image",
            "busybox",
            "--name",
            "docker.io/library/busybox:e2e",
            "--output",
        ])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    archive
}

/// The flags of a node called `node` on its own bridge and cluster range, with a free kubelet
/// port, so that node tests can run beside each other and beside a developer's cluster.
pub fn node_flags(node: &str, bridge: &str, cluster_cidr: &str) -> Vec<String> {
    [
        "--node-name",
        node,
        "--cni-bridge",
        bridge,
        "--cluster-cidr",
        cluster_cidr,
        "--kubelet-port",
        &super::free_port().to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Waits for node `node` to register and turn Ready (its pod network configured).
pub fn wait_ready(kubeconfig: &Path, node: &str) {
    wait_for("the node to register", Duration::from_secs(60), || {
        super::kubectl_any("default", kubeconfig, &["get", "node", node])
            .status
            .success()
            .then_some(())
    });
    super::kubectl_ok(
        "default",
        kubeconfig,
        &[
            "wait",
            &format!("node/{node}"),
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
}

/// Polls `probe` until it gives a value, failing the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `kubectl <args> -o jsonpath=<path>`'s output (empty on failure).
pub fn jsonpath(kubeconfig: &Path, args: &[&str], path: &str) -> String {
    let mut all = args.to_vec();
    let expr = format!("jsonpath={path}");
    all.extend(["-o", expr.as_str()]);
    let output = super::kubectl_any("default", kubeconfig, &all);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One event as `kubectl get events` shows it.
#[derive(Debug, Clone)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: String,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
    /// The involved object's field path (a container's, for container events).
    pub field_path: String,
    /// `source.component` and `source.host`.
    pub source: (String, String),
    /// How many times it happened.
    pub count: i64,
}

/// The events in the default namespace about the object called `name` (read with
/// `kubectl get events --field-selector involvedObject.name=<name>`).
pub fn events(kubeconfig: &Path, name: &str) -> Vec<Event> {
    let selector = format!("involvedObject.name={name}");
    let output = super::kubectl_any(
        "default",
        kubeconfig,
        &["get", "events", "--field-selector", &selector, "-o", "json"],
    );
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Event {
            type_: text(&e["type"]),
            reason: text(&e["reason"]),
            message: text(&e["message"]),
            field_path: text(&e["involvedObject"]["fieldPath"]),
            source: (text(&e["source"]["component"]), text(&e["source"]["host"])),
            count: e["count"].as_i64().unwrap_or_default(),
        })
        .collect()
}

/// Waits for an event about `name` with `reason` that `accept` takes, and returns it.
pub fn wait_event(
    kubeconfig: &Path,
    name: &str,
    reason: &str,
    accept: impl Fn(&Event) -> bool,
) -> Event {
    wait_for(
        &format!("a {reason} event about {name}"),
        Duration::from_secs(60),
        || {
            events(kubeconfig, name)
                .into_iter()
                .find(|e| e.reason == reason && accept(e))
        },
    )
}

/// A node test's data directory (`data` in a temporary directory removed at the end) with
/// [`IMAGE`] packed for the node to import; the node's [`Cleanup`] runs when it drops, before
/// the directory goes.
pub struct NodeDir {
    /// The server's data directory.
    pub data_dir: PathBuf,
    /// The packed busybox archive (in the node's preload directory).
    pub archive: PathBuf,
    _cleanup: Cleanup,
    dir: tempfile::TempDir,
}

impl NodeDir {
    /// A fresh data directory for a node on `bridge`, the image packed.
    pub fn new(bridge: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let cleanup = Cleanup {
            data_dir: data_dir.clone(),
            bridge,
        };
        let archive = pack_busybox(&data_dir);
        NodeDir {
            data_dir,
            archive,
            _cleanup: cleanup,
            dir,
        }
    }

    /// The temporary directory holding the data directory, for the test's own files.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The value following `name` in a list of command-line flags (as [`node_flags`] makes).
pub fn flag_value<'a>(flags: &'a [String], name: &str) -> &'a str {
    let at = flags.iter().position(|flag| flag == name);
    at.and_then(|at| flags.get(at + 1))
        .unwrap_or_else(|| panic!("no {name} in {flags:?}"))
}

/// Removes what the test's node leaves behind even when the test fails: every pod sandbox
/// (through CRI, while containerd still runs), its containerd (by the PID it recorded), and
/// the bridge.
pub struct Cleanup {
    /// The server's (or agent's) data directory.
    pub data_dir: PathBuf,
    /// The node's pod bridge.
    pub bridge: &'static str,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let containerd = self.data_dir.join("agent/containerd");
        let socket = containerd.join("containerd.sock");
        if let Ok(runtime) = tokio::runtime::Runtime::new() {
            runtime.block_on(async {
                let Ok(cri) = capstan_kubelet::cri::Cri::connect(&socket).await else {
                    return;
                };
                let mut service = cri.runtime.clone();
                let Ok(list) = service
                    .list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
                    .await
                else {
                    return;
                };
                for sandbox in list.into_inner().items {
                    let _ = service
                        .stop_pod_sandbox(k8s_cri::v1::StopPodSandboxRequest {
                            pod_sandbox_id: sandbox.id.clone(),
                        })
                        .await;
                    let _ = service
                        .remove_pod_sandbox(k8s_cri::v1::RemovePodSandboxRequest {
                            pod_sandbox_id: sandbox.id,
                        })
                        .await;
                }
            });
        }
        // The agent's containerd, if the server did not stop it: the PID it recorded, if
        // that process still runs with this test's configuration.
        let config = containerd.join("config.toml").display().to_string();
        if let Some(pid) = std::fs::read_to_string(containerd.join("containerd.pid"))
            .ok()
            .map(|p| p.trim().to_owned())
            && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == config.as_bytes())
            })
        {
            let _ = Command::new("kill").arg(&pid).status();
        }
        // Shims of this node's containerd and the containers they run: when the server (and
        // with it containerd) stopped before the sandboxes could be stopped through CRI, they
        // outlive it. Their command line names the containerd's socket under the data dir.
        let marker = containerd.display().to_string();
        for shim in processes()
            .filter(|(_, cmdline)| cmdline.contains("containerd-shim") && cmdline.contains(&marker))
        {
            for (child, _) in processes().filter(|(pid, _)| parent_of(*pid) == Some(shim.0)) {
                let _ = Command::new("kill")
                    .args(["-9", &child.to_string()])
                    .status();
            }
            let _ = Command::new("kill")
                .args(["-9", &shim.0.to_string()])
                .status();
        }
        // Whatever is still mounted under the data dir (volumes the agent mounted, container
        // root filesystems), deepest first, so that the directory can be removed.
        let prefix = format!("{}/", self.data_dir.display());
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
            let mut targets: Vec<&str> = mounts
                .lines()
                .filter_map(|line| line.split(' ').nth(4))
                .filter(|target| target.starts_with(&prefix))
                .collect();
            targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
            for target in targets {
                let _ = Command::new("umount").args(["-l", target]).status();
            }
        }
        // Absent when the node never got a pod range, or lived in a network namespace of its
        // own (which takes its bridge with it).
        let _ = Command::new("ip")
            .args(["link", "del", self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

/// Every process: its pid and command line (arguments joined by spaces).
fn processes() -> impl Iterator<Item = (u32, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((pid, text))
        })
}

/// The parent of process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the fields after it count.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
