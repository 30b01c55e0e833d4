//! Each pod's `/etc/resolv.conf`, as upstream's kubelet forms it (`pkg/kubelet/network/dns`):
//! the runtime writes the file from the sandbox's DNS configuration, which follows the pod's
//! `dnsPolicy`:
//!
//! - `ClusterFirst` (the default): the cluster DNS servers, searching
//!   `<namespace>.svc.<domain>`, `svc.<domain>` and `<domain>` before the host's search list,
//!   with `ndots:5`. A pod on the host network gets `Default` instead, and so does every pod
//!   while no cluster DNS is known (with a `MissingClusterDNS` warning event).
//! - `ClusterFirstWithHostNet`: `ClusterFirst` even on the host network.
//! - `Default`: the host's resolver configuration (`--resolv-conf`).
//! - `None`: nothing but the pod's `dnsConfig`.
//!
//! The pod's `dnsConfig` is then appended (nameservers and searches without duplicates,
//! options merged by name, the pod's winning), and the result trimmed to the resolver's
//! limits: 3 nameservers, 32 search domains, 2048 characters of search list.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use k8s_cri::v1 as cri;

/// Upstream's limits (`validation.MaxDNSNameservers`, `MaxDNSSearchPaths`,
/// `MaxDNSSearchListChars`).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;

/// The event reason when `ClusterFirst` falls back to the host's configuration.
pub const MISSING_CLUSTER_DNS: &str = "MissingClusterDNS";
/// The event reason when the configuration exceeds the resolver's limits.
pub const DNS_CONFIG_FORMING: &str = "DNSConfigForming";

/// A resolver configuration: nameservers, search domains and options (`ndots:5`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    /// `nameserver` lines.
    pub nameservers: Vec<String>,
    /// The `search` list (or `domain` when there is no `search`).
    pub searches: Vec<String>,
    /// `options`.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses resolv.conf text as the kubelet does: the last `search` (or `domain`) wins,
    /// `nameserver` and `options` lines accumulate, comments (`#`, `;`) are ignored.
    pub fn parse(text: &str) -> ResolvConf {
        let mut conf = ResolvConf::default();
        let mut domain = None;
        let mut search = None;
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => conf.nameservers.extend(fields.next().map(str::to_owned)),
                Some("search") => {
                    search = Some(
                        fields
                            .map(|d| d.trim_end_matches('.').to_owned())
                            .filter(|d| !d.is_empty())
                            .collect::<Vec<_>>(),
                    )
                }
                Some("domain") => {
                    domain = fields.next().map(|d| d.trim_end_matches('.').to_owned())
                }
                Some("options") => conf.options.extend(fields.map(str::to_owned)),
                _ => {}
            }
        }
        conf.searches = search.unwrap_or_else(|| domain.into_iter().collect());
        conf
    }

    /// The host's configuration from `path`; empty when it cannot be read.
    pub fn read(path: &Path) -> ResolvConf {
        match std::fs::read_to_string(path) {
            Ok(text) => ResolvConf::parse(&text),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the host's resolv.conf");
                ResolvConf::default()
            }
        }
    }

    /// The runtime's form of it.
    pub fn to_cri(&self) -> cri::DnsConfig {
        cri::DnsConfig {
            servers: self.nameservers.clone(),
            searches: self.searches.clone(),
            options: self.options.clone(),
        }
    }
}

/// The DNS configuration of `pod`, and warnings (event reason and message) to record on it.
pub fn pod_dns(
    pod: &Pod,
    cluster_dns: &[IpAddr],
    cluster_domain: &str,
    host: &ResolvConf,
) -> (ResolvConf, Vec<(&'static str, String)>) {
    let mut warnings = Vec::new();
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let mut cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    if cluster && cluster_dns.is_empty() {
        warnings.push((
            MISSING_CLUSTER_DNS,
            format!(
                "kubelet does not have ClusterDNS IP configured and cannot create Pod using \
                 {policy:?} policy. Falling back to \"Default\" policy."
            ),
        ));
        cluster = false;
    }
    let mut conf = if policy == "None" {
        ResolvConf::default()
    } else if cluster {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut searches = Vec::new();
        if !cluster_domain.is_empty() {
            searches.push(format!("{namespace}.svc.{cluster_domain}"));
            searches.push(format!("svc.{cluster_domain}"));
            searches.push(cluster_domain.to_owned());
        }
        searches.extend(host.searches.iter().cloned());
        ResolvConf {
            nameservers: cluster_dns.iter().map(IpAddr::to_string).collect(),
            searches: dedup(searches),
            options: vec!["ndots:5".to_owned()],
        }
    } else {
        host.clone()
    };
    if let Some(extra) = &spec.dns_config {
        conf.nameservers
            .extend(extra.nameservers.iter().flatten().cloned());
        conf.nameservers = dedup(std::mem::take(&mut conf.nameservers));
        conf.searches
            .extend(extra.searches.iter().flatten().cloned());
        conf.searches = dedup(std::mem::take(&mut conf.searches));
        let mut options: Vec<(String, Option<String>)> = Vec::new();
        let mut set = |name: String, value: Option<String>| match options
            .iter_mut()
            .find(|(n, _)| *n == name)
        {
            Some(existing) => existing.1 = value,
            None => options.push((name, value)),
        };
        for option in &conf.options {
            match option.split_once(':') {
                Some((name, value)) => set(name.to_owned(), Some(value.to_owned())),
                None => set(option.clone(), None),
            }
        }
        for option in extra.options.iter().flatten() {
            let Some(name) = option.name.clone().filter(|n| !n.is_empty()) else {
                continue;
            };
            set(name, option.value.clone());
        }
        conf.options = options
            .into_iter()
            .map(|(name, value)| match value {
                Some(value) => format!("{name}:{value}"),
                None => name,
            })
            .collect();
    }
    if conf.nameservers.len() > MAX_NAMESERVERS {
        conf.nameservers.truncate(MAX_NAMESERVERS);
        warnings.push((
            DNS_CONFIG_FORMING,
            format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the \
                 applied nameserver line is: {}",
                conf.nameservers.join(" ")
            ),
        ));
    }
    let before = conf.searches.len();
    let mut chars = 0;
    conf.searches = conf
        .searches
        .iter()
        .take(MAX_SEARCHES)
        .take_while(|d| {
            chars += d.len() + usize::from(chars > 0);
            chars <= MAX_SEARCH_CHARS
        })
        .cloned()
        .collect();
    if conf.searches.len() < before {
        warnings.push((
            DNS_CONFIG_FORMING,
            format!(
                "Search Line limits were exceeded, some search paths have been omitted, the \
                 applied search line is: {}",
                conf.searches.join(" ")
            ),
        ));
    }
    (conf, warnings)
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|item| seen.insert(item.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn host() -> ResolvConf {
        ResolvConf::parse(
            "# generated\nnameserver 192.0.2.53\nnameserver 192.0.2.54 ; second\n\
             domain ignored.example\nsearch corp.example. lab.example\noptions edns0 timeout:2\n",
        )
    }

    const DNS: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(10, 43, 0, 10))];

    #[test]
    fn host_resolv_conf_parses_as_the_kubelet_reads_it() {
        let host = host();
        assert_eq!(host.nameservers, ["192.0.2.53", "192.0.2.54"]);
        assert_eq!(host.searches, ["corp.example", "lab.example"]);
        assert_eq!(host.options, ["edns0", "timeout:2"]);
        assert_eq!(
            ResolvConf::parse("domain only.example\n").searches,
            ["only.example"]
        );
    }

    #[test]
    fn cluster_first_searches_the_namespace_first() {
        let (conf, warnings) = pod_dns(&pod(json!({})), &DNS, "cluster.local", &host());
        assert!(warnings.is_empty());
        assert_eq!(conf.nameservers, ["10.43.0.10"]);
        assert_eq!(
            conf.searches,
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab.example"
            ]
        );
        assert_eq!(conf.options, ["ndots:5"]);
    }

    #[test]
    fn host_network_pods_use_the_hosts_unless_they_ask_for_the_cluster() {
        let (conf, _) = pod_dns(
            &pod(json!({"hostNetwork": true})),
            &DNS,
            "cluster.local",
            &host(),
        );
        assert_eq!(conf, host());
        let (conf, _) = pod_dns(
            &pod(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})),
            &DNS,
            "cluster.local",
            &host(),
        );
        assert_eq!(conf.nameservers, ["10.43.0.10"]);
        let (conf, _) = pod_dns(
            &pod(json!({"dnsPolicy": "Default"})),
            &DNS,
            "cluster.local",
            &host(),
        );
        assert_eq!(conf, host());
    }

    #[test]
    fn without_cluster_dns_cluster_first_falls_back_with_a_warning() {
        let (conf, warnings) = pod_dns(&pod(json!({})), &[], "cluster.local", &host());
        assert_eq!(conf, host());
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].0, MISSING_CLUSTER_DNS);
        assert!(warnings[0].1.contains("Falling back to \"Default\" policy"));
    }

    #[test]
    fn none_takes_only_the_pods_config_and_options_merge_by_name() {
        let spec = json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.2.3.4", "1.2.3.4"],
            "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        }});
        let (conf, _) = pod_dns(&pod(spec), &DNS, "cluster.local", &host());
        assert_eq!(conf.nameservers, ["1.2.3.4"]);
        assert_eq!(
            conf.searches,
            ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"]
        );
        assert_eq!(conf.options, ["ndots:2", "edns0"]);
        // Appended to ClusterFirst's: the pod's ndots wins, in place.
        let spec = json!({"dnsConfig": {"nameservers": ["1.2.3.4"], "searches": ["x.example"],
                                        "options": [{"name": "ndots", "value": "1"},
                                                    {"name": "single-request"}]}});
        let (conf, _) = pod_dns(&pod(spec), &DNS, "cluster.local", &host());
        assert_eq!(conf.nameservers, ["10.43.0.10", "1.2.3.4"]);
        assert_eq!(conf.searches.last().map(String::as_str), Some("x.example"));
        assert_eq!(conf.options, ["ndots:1", "single-request"]);
    }

    #[test]
    fn limits_trim_nameservers_and_searches_with_a_warning() {
        let spec = json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"],
            "searches": (0..40).map(|i| format!("s{i}.example")).collect::<Vec<_>>(),
        }});
        let (conf, warnings) = pod_dns(&pod(spec), &DNS, "cluster.local", &host());
        assert_eq!(conf.nameservers.len(), 3);
        assert_eq!(conf.searches.len(), 32);
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings
                .iter()
                .all(|(reason, _)| *reason == DNS_CONFIG_FORMING)
        );
    }
}
