//! What the proxy wants in the kernel, computed from Services, EndpointSlices and this node,
//! without I/O: the per-Service chains and the entries of the shared dispatch maps, as
//! upstream's nftables proxier lays them out.
//!
//! - `service-ips` maps `cluster IP . protocol . port` (and each external IP) to the Service
//!   port's chain; `service-nodeports` maps `protocol . node port` to its external chain.
//! - `service-<hash>-<ns>/<name>/<proto>/<port>` masquerades traffic to the cluster IP that does
//!   not come from this node's pods, keeps session affinity, and picks an endpoint at random
//!   (`numgen random`) among the ready ones, or the serving terminating ones when none is
//!   ready.
//! - `local-<hash>-...` does the same over this node's endpoints only, for
//!   `internalTrafficPolicy: Local` and `externalTrafficPolicy: Local`.
//! - `external-<hash>-...` handles NodePort and external-IP traffic: masqueraded and sent to
//!   the service chain under the `Cluster` policy; under `Local`, pods of this node and the
//!   node itself still reach every endpoint, other sources only this node's (or are dropped).
//! - `endpoint-<hash>-...__<ip>/<port>` masquerades hairpin traffic (an endpoint reaching
//!   itself), records session affinity, and rewrites the destination.
//! - A Service port without endpoints is in `no-endpoint-services` / `no-endpoint-nodeports`,
//!   whose verdict the filter chains apply to new connections: reject (connection refused),
//!   or drop when only a `Local` policy leaves it without endpoints.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The mark bit that asks `nat-postrouting` to masquerade, as upstream's (`0x4000`).
pub const MASQUERADE_MARK: u32 = 0x4000;
/// Session affinity's default timeout, as upstream's (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;
/// The label that hands a Service to another proxy (upstream's
/// `service.kubernetes.io/service-proxy-name`).
pub const SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";

/// A transport protocol a Service port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol of a Service or EndpointSlice port (`TCP` when unset, as defaulted).
    pub fn parse(text: Option<&str>) -> Option<Protocol> {
        match text.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name nftables knows it by (`meta l4proto tcp`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Where a dispatch map entry sends a packet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// To a chain of this table.
    Goto(String),
    /// Dropped.
    Drop,
    /// Rejected (`reject-chain`).
    Reject,
}

/// One rule of a chain, in the proxy's own terms (turned into nftables statements by
/// [`crate::nft`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Traffic to `ip:port` over `protocol` from outside `local` (this node's pod range) is
    /// marked for masquerade.
    MasqueradeUnlessFrom {
        /// The cluster IP.
        ip: Ipv4Addr,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
        /// This node's pod range, `addr/len`.
        local: (Ipv4Addr, u8),
    },
    /// Everything is marked for masquerade.
    Masquerade,
    /// Traffic from `source` (an endpoint's own address) is marked for masquerade.
    MasqueradeFrom(Ipv4Addr),
    /// Traffic from this node's pod range goes to `chain`.
    GotoFromRange {
        /// The pod range.
        range: (Ipv4Addr, u8),
        /// Where to.
        chain: String,
    },
    /// Traffic whose source address is the node's own is marked for masquerade.
    MasqueradeFromNode,
    /// Traffic whose source address is the node's own goes to `chain`.
    GotoFromNode(String),
    /// A client recorded in affinity set `set` goes to endpoint chain `chain`.
    Affinity {
        /// The set of recent clients.
        set: String,
        /// The endpoint's chain.
        chain: String,
    },
    /// The client's address is (re)recorded in affinity set `set`.
    RecordAffinity(String),
    /// One of `chains` at random.
    Random(Vec<String>),
    /// The destination becomes `ip:port`.
    Dnat {
        /// The protocol (nftables needs it to rewrite a port).
        protocol: Protocol,
        /// The endpoint's address.
        ip: Ipv4Addr,
        /// The endpoint's port.
        port: u16,
    },
    /// Go to `chain`.
    Goto(String),
    /// Drop.
    Drop,
}

/// Everything the proxy wants in its table beyond the fixed base chains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// The per-Service chains and their rules.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// `ip . protocol . port` → verdict, for cluster and external IPs.
    pub service_ips: BTreeMap<(Ipv4Addr, Protocol, u16), Target>,
    /// `protocol . node port` → verdict.
    pub service_nodeports: BTreeMap<(Protocol, u16), Target>,
    /// Service IP ports without endpoints.
    pub no_endpoint_services: BTreeMap<(Ipv4Addr, Protocol, u16), Target>,
    /// Node ports without endpoints.
    pub no_endpoint_nodeports: BTreeMap<(Protocol, u16), Target>,
    /// Every cluster IP served, so that traffic to one on a port it does not serve is rejected.
    pub cluster_ips: BTreeSet<Ipv4Addr>,
    /// The node's addresses, where node ports are served.
    pub nodeport_ips: BTreeSet<Ipv4Addr>,
    /// Session affinity sets and their timeouts (seconds).
    pub affinity_sets: BTreeMap<String, u32>,
}

impl Desired {
    /// How many objects (chains, rules, map and set elements) this holds: the size of a full
    /// sync's transaction, roughly.
    pub fn size(&self) -> usize {
        self.chains.len()
            + self.chains.values().map(Vec::len).sum::<usize>()
            + self.service_ips.len()
            + self.service_nodeports.len()
            + self.no_endpoint_services.len()
            + self.no_endpoint_nodeports.len()
            + self.cluster_ips.len()
            + self.nodeport_ips.len()
            + self.affinity_sets.len()
    }
}

/// What the proxy knows of its own node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's name (endpoints with this `nodeName` are local).
    pub name: String,
    /// The node's pod range (`spec.podCIDR`), IPv4.
    pub pod_cidr: Option<(Ipv4Addr, u8)>,
    /// The node's IPv4 addresses, where node ports are served.
    pub addresses: BTreeSet<Ipv4Addr>,
}

impl NodeInfo {
    /// This node as its Node object says (name `name` when the object is not known yet).
    pub fn from_node(name: &str, node: Option<&Node>) -> NodeInfo {
        let mut info = NodeInfo {
            name: name.to_owned(),
            ..NodeInfo::default()
        };
        let Some(node) = node else { return info };
        info.pod_cidr = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(parse_cidr);
        if let Some(addresses) = node.status.as_ref().and_then(|s| s.addresses.as_ref()) {
            info.addresses = addresses
                .iter()
                .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
                .filter_map(|a| a.address.parse().ok())
                .collect();
        }
        info
    }
}

/// `a.b.c.d/n`, IPv4.
pub fn parse_cidr(text: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, len) = text.split_once('/')?;
    let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((addr.parse().ok()?, len))
}

/// One endpoint of a Service port, from an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Endpoint {
    ip: Ipv4Addr,
    port: u16,
    ready: bool,
    serving: bool,
    terminating: bool,
    local: bool,
}

/// The first eight hex digits of the SHA-256 of `text`, upper case: what keeps chain names
/// unique whatever the readable part after it.
fn hash(text: &str) -> String {
    capstan_api::sha256_hex(text.as_bytes())[..8].to_ascii_uppercase()
}

/// Upstream's choice of endpoints: the ready ones, or when none is ready the serving ones
/// that are terminating (so that a rolling update drains rather than refuses).
fn usable(endpoints: &[&Endpoint]) -> Vec<Endpoint> {
    let ready: Vec<Endpoint> = endpoints
        .iter()
        .filter(|e| e.ready)
        .map(|e| (*e).clone())
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .iter()
        .filter(|e| e.serving && e.terminating)
        .map(|e| (*e).clone())
        .collect()
}

/// The endpoints of each Service port, by `(namespace, service)`, from the slices.
type SliceIndex<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>;

/// Groups EndpointSlices by the Service they name.
fn index_slices<E: Borrow<EndpointSlice>>(slices: &[E]) -> SliceIndex<'_> {
    let mut index: SliceIndex<'_> = BTreeMap::new();
    for slice in slices {
        let slice: &EndpointSlice = slice.borrow();
        if slice.address_type != "IPv4" {
            continue;
        }
        let (Some(namespace), Some(service)) = (
            slice.metadata.namespace.as_deref(),
            slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME))
                .map(String::as_str),
        ) else {
            continue;
        };
        index.entry((namespace, service)).or_default().push(slice);
    }
    index
}

/// The endpoints for Service port `name`/`protocol` in `slices`, deduplicated by address and
/// port (an address may appear in two slices while one is being replaced).
fn endpoints_for(
    slices: &[&EndpointSlice],
    name: &str,
    protocol: Protocol,
    node: &str,
) -> Vec<Endpoint> {
    let mut found: BTreeMap<(Ipv4Addr, u16), Endpoint> = BTreeMap::new();
    for slice in slices {
        let Some(port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == name
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        }) else {
            continue;
        };
        let Some(port) = port.port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            let local = endpoint.node_name.as_deref() == Some(node);
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<Ipv4Addr>() else {
                    continue;
                };
                let entry = found.entry((ip, port)).or_insert(Endpoint {
                    ip,
                    port,
                    ready,
                    serving,
                    terminating,
                    local,
                });
                // The most available view wins when two slices disagree.
                entry.ready |= ready;
                entry.serving |= serving;
                entry.terminating &= terminating;
            }
        }
    }
    found.into_values().collect()
}

/// Whether this proxy handles `service` at all: not headless, not ExternalName, not handed
/// to another proxy, with an IPv4 cluster IP.
fn cluster_ip(service: &Service) -> Option<Ipv4Addr> {
    if service
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME))
    {
        return None;
    }
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.cluster_ip.as_deref()?.parse().ok()
}

/// Builds what the table should hold for `services` and `slices` as seen from `node`.
pub fn desired<S, E>(services: &[S], slices: &[E], node: &NodeInfo) -> Desired
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
{
    let index = index_slices(slices);
    let mut desired = Desired {
        nodeport_ips: node.addresses.clone(),
        ..Desired::default()
    };
    for service in services {
        let service: &Service = service.borrow();
        let Some(ip) = cluster_ip(service) else {
            continue;
        };
        let (Some(namespace), Some(name), Some(spec)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
            service.spec.as_ref(),
        ) else {
            continue;
        };
        desired.cluster_ips.insert(ip);
        let slices = index
            .get(&(namespace, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
                .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
        });
        let internal_local = spec.internal_traffic_policy.as_deref() == Some("Local");
        let external_local = matches!(
            spec.external_traffic_policy.as_deref(),
            Some("Local") | Some("OnlyLocal")
        );
        let external_ips: Vec<Ipv4Addr> = spec
            .external_ips
            .iter()
            .flatten()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let node_ports = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
        for port in spec.ports.iter().flatten() {
            let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
                continue;
            };
            let Ok(service_port) = u16::try_from(port.port) else {
                continue;
            };
            let port_name = port.name.as_deref().unwrap_or("");
            let readable = format!("{namespace}/{name}/{}/{port_name}", protocol.name());
            let id = hash(&readable);
            let all = endpoints_for(slices, port_name, protocol, &node.name);
            let cluster = usable(&all.iter().collect::<Vec<_>>());
            let local = usable(&all.iter().filter(|e| e.local).collect::<Vec<_>>());
            let service_chain = format!("service-{id}-{readable}");
            let local_chain = format!("local-{id}-{readable}");
            let external_chain = format!("external-{id}-{readable}");
            let masquerade = node.pod_cidr.map(|local| Rule::MasqueradeUnlessFrom {
                ip,
                protocol,
                port: service_port,
                local,
            });
            let endpoint_chain = |endpoint: &Endpoint, desired: &mut Desired| {
                let suffix = format!("{readable}__{}/{}", endpoint.ip, endpoint.port);
                let chain = format!("endpoint-{id}-{suffix}");
                let mut rules = vec![Rule::MasqueradeFrom(endpoint.ip)];
                if let Some(timeout) = affinity {
                    let set = format!("affinity-{id}-{suffix}");
                    desired.affinity_sets.insert(set.clone(), timeout);
                    rules.push(Rule::RecordAffinity(set));
                }
                rules.push(Rule::Dnat {
                    protocol,
                    ip: endpoint.ip,
                    port: endpoint.port,
                });
                desired.chains.insert(chain.clone(), rules);
                chain
            };
            // The rules that pick one of `endpoints`, their chains created.
            let pick = |endpoints: &[Endpoint], desired: &mut Desired| -> Vec<Rule> {
                let chains: Vec<String> = endpoints
                    .iter()
                    .map(|e| endpoint_chain(e, desired))
                    .collect();
                let mut rules = Vec::new();
                if affinity.is_some() {
                    for (endpoint, chain) in endpoints.iter().zip(&chains) {
                        let set = format!(
                            "affinity-{id}-{readable}__{}/{}",
                            endpoint.ip, endpoint.port
                        );
                        rules.push(Rule::Affinity {
                            set,
                            chain: chain.clone(),
                        });
                    }
                }
                rules.push(Rule::Random(chains));
                rules
            };
            if !cluster.is_empty() {
                let mut rules: Vec<Rule> = masquerade.iter().cloned().collect();
                rules.extend(pick(&cluster, &mut desired));
                desired.chains.insert(service_chain.clone(), rules);
            }
            if (internal_local || external_local) && !local.is_empty() {
                let mut rules: Vec<Rule> = if internal_local {
                    masquerade.iter().cloned().collect()
                } else {
                    Vec::new()
                };
                rules.extend(pick(&local, &mut desired));
                desired.chains.insert(local_chain.clone(), rules);
            }
            // Traffic to the cluster IP.
            let key = (ip, protocol, service_port);
            if internal_local {
                if local.is_empty() {
                    let verdict = if cluster.is_empty() {
                        Target::Reject
                    } else {
                        Target::Drop
                    };
                    desired.no_endpoint_services.insert(key, verdict);
                } else {
                    desired
                        .service_ips
                        .insert(key, Target::Goto(local_chain.clone()));
                }
            } else if cluster.is_empty() {
                desired.no_endpoint_services.insert(key, Target::Reject);
            } else {
                desired
                    .service_ips
                    .insert(key, Target::Goto(service_chain.clone()));
            }
            // Traffic to node ports and external IPs.
            let node_port = port
                .node_port
                .filter(|_| node_ports)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0);
            if node_port.is_none() && external_ips.is_empty() {
                continue;
            }
            let external = if cluster.is_empty() {
                Err(Target::Reject)
            } else if external_local {
                let mut rules = Vec::new();
                if let Some(range) = node.pod_cidr {
                    rules.push(Rule::GotoFromRange {
                        range,
                        chain: service_chain.clone(),
                    });
                }
                rules.push(Rule::MasqueradeFromNode);
                rules.push(Rule::GotoFromNode(service_chain.clone()));
                rules.push(if local.is_empty() {
                    Rule::Drop
                } else {
                    Rule::Goto(local_chain.clone())
                });
                desired.chains.insert(external_chain.clone(), rules);
                Ok(Target::Goto(external_chain.clone()))
            } else {
                desired.chains.insert(
                    external_chain.clone(),
                    vec![Rule::Masquerade, Rule::Goto(service_chain.clone())],
                );
                Ok(Target::Goto(external_chain.clone()))
            };
            if let Some(node_port) = node_port {
                match &external {
                    Ok(target) => {
                        desired
                            .service_nodeports
                            .insert((protocol, node_port), target.clone());
                    }
                    Err(verdict) => {
                        desired
                            .no_endpoint_nodeports
                            .insert((protocol, node_port), verdict.clone());
                    }
                }
            }
            for external_ip in &external_ips {
                let key = (*external_ip, protocol, service_port);
                match &external {
                    Ok(target) => {
                        desired.service_ips.insert(key, target.clone());
                    }
                    Err(verdict) => {
                        desired.no_endpoint_services.insert(key, verdict.clone());
                    }
                }
            }
        }
    }
    desired
}

#[cfg(test)]
mod tests;
