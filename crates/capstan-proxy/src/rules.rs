//! What the proxy wants in the kernel, computed from Services, EndpointSlices and this node,
//! without I/O: the per-Service chains and the entries of the shared dispatch maps, laid out as
//! upstream's nftables proxier does, with one difference that keeps the table small (see below).
//!
//! - `service-ips` maps `cluster IP . protocol . port` (and each external IP) to the Service
//!   port's chain; `service-nodeports` maps `protocol . node port` to its external chain.
//! - `service-<hash>-<ns>/<name>/<proto>/<port>` masquerades traffic to the cluster IP that does
//!   not come from this node's pods and picks an endpoint at random (`numgen random`) among the
//!   ready ones, or the serving terminating ones when none is ready.
//! - `local-<hash>-...` does the same over this node's endpoints only, for
//!   `internalTrafficPolicy: Local` and `externalTrafficPolicy: Local`.
//! - `external-<hash>-...` handles NodePort and external-IP traffic: masqueraded and sent to
//!   the service chain under the `Cluster` policy; under `Local`, pods of this node and the
//!   node itself still reach every endpoint, other sources only this node's (or are dropped).
//! - A Service port without endpoints is in `no-endpoint-services` / `no-endpoint-nodeports`,
//!   whose verdict the filter chains apply to new connections: reject (connection refused),
//!   or drop when only a `Local` policy leaves it without endpoints.
//!
//! Upstream gives every endpoint a chain of its own (`endpoint-<hash>-...`) that masquerades
//! hairpin traffic and rewrites the destination. Here a Service port without session affinity
//! rewrites the destination in one rule, `dnat to numgen random mod N map { i : ip . port }`,
//! and hairpin traffic (an endpoint of this node reaching itself through a Service) is
//! masqueraded in postrouting, where its source equals its new destination: the `hairpin` set
//! holds `ip . ip` for each such endpoint. Per-endpoint chains remain only where session
//! affinity needs a set per endpoint. Every `nft` run reads the whole table first, so eight
//! times fewer chains make every sync that much cheaper (see BENCHMARKS.md).
//!
//! [`Model`] keeps each Service's part between syncs and recomputes only the Services whose
//! object or slices changed (by resourceVersion) or all of them when the node changed.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

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
    /// The destination becomes one of `endpoints` (`ip:port`) at random.
    DnatRandom {
        /// The protocol (nftables needs it to rewrite a port).
        protocol: Protocol,
        /// The endpoints, at least two.
        endpoints: Vec<(Ipv4Addr, u16)>,
    },
    /// Go to `chain`.
    Goto(String),
    /// Drop.
    Drop,
}

/// A Service, by namespace and name.
pub type ServiceKey = (String, String);

/// A key of `service-ips` / `no-endpoint-services`: destination address, protocol, port.
pub type IpKey = (Ipv4Addr, Protocol, u16);
/// A key of `service-nodeports` / `no-endpoint-nodeports`: protocol, node port.
pub type NodePortKey = (Protocol, u16);

/// What one Service adds to the table: its chains and sets, and its entries in the shared maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceRules {
    /// The Service's chains and their rules.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// Session affinity sets and their timeouts (seconds).
    pub affinity_sets: BTreeMap<String, u32>,
    /// Entries of `service-ips`.
    pub service_ips: Vec<(IpKey, Target)>,
    /// Entries of `service-nodeports`.
    pub service_nodeports: Vec<(NodePortKey, Target)>,
    /// Entries of `no-endpoint-services`.
    pub no_endpoint_services: Vec<(IpKey, Target)>,
    /// Entries of `no-endpoint-nodeports`.
    pub no_endpoint_nodeports: Vec<(NodePortKey, Target)>,
    /// The cluster IP.
    pub cluster_ip: Option<Ipv4Addr>,
    /// This node's endpoints that may reach themselves through the Service.
    pub hairpin: BTreeSet<Ipv4Addr>,
    /// The UDP ports with serving endpoints, whose stale conntrack entries are cleared.
    pub udp: Vec<UdpPort>,
}

/// A UDP Service port with serving endpoints: a flow to one of its frontends whose reply comes
/// from another address is stale (its endpoint is gone) and is cleared from conntrack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPort {
    /// The cluster IP and the external IPs.
    pub ips: Vec<Ipv4Addr>,
    /// The Service port.
    pub port: u16,
    /// The node port, if any.
    pub node_port: Option<u16>,
    /// The serving endpoints' addresses (ready or not, terminating or not, as upstream).
    pub serving: BTreeSet<Ipv4Addr>,
}

/// Everything the proxy wants in its table beyond the fixed base chains: each Service's part,
/// and the shared maps and sets they make up together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// Each Service's part; a part that did not change between two models is the same `Arc`.
    pub services: BTreeMap<ServiceKey, Arc<ServiceRules>>,
    /// `ip . protocol . port` → verdict, for cluster and external IPs.
    pub service_ips: BTreeMap<IpKey, Target>,
    /// `protocol . node port` → verdict.
    pub service_nodeports: BTreeMap<NodePortKey, Target>,
    /// Service IP ports without endpoints.
    pub no_endpoint_services: BTreeMap<IpKey, Target>,
    /// Node ports without endpoints.
    pub no_endpoint_nodeports: BTreeMap<NodePortKey, Target>,
    /// Every cluster IP served, so that traffic to one on a port it does not serve is rejected.
    pub cluster_ips: BTreeSet<Ipv4Addr>,
    /// The node's addresses, where node ports are served.
    pub nodeport_ips: BTreeSet<Ipv4Addr>,
    /// Endpoints of this node, whose traffic to themselves through a Service is masqueraded.
    pub hairpin: BTreeSet<Ipv4Addr>,
}

impl Desired {
    /// The model made of `services`' parts on `node`.
    fn assemble(services: BTreeMap<ServiceKey, Arc<ServiceRules>>, node: &NodeInfo) -> Desired {
        let mut desired = Desired {
            nodeport_ips: node.addresses.clone(),
            ..Desired::default()
        };
        for part in services.values() {
            desired.service_ips.extend(part.service_ips.iter().cloned());
            desired
                .service_nodeports
                .extend(part.service_nodeports.iter().cloned());
            desired
                .no_endpoint_services
                .extend(part.no_endpoint_services.iter().cloned());
            desired
                .no_endpoint_nodeports
                .extend(part.no_endpoint_nodeports.iter().cloned());
            desired.cluster_ips.extend(part.cluster_ip);
            desired.hairpin.extend(part.hairpin.iter().copied());
        }
        desired.services = services;
        desired
    }

    /// Every Service chain and its rules.
    pub fn chains(&self) -> impl Iterator<Item = (&String, &Vec<Rule>)> {
        self.services.values().flat_map(|part| part.chains.iter())
    }

    /// The rules of chain `name`, if some Service has it.
    pub fn chain(&self, name: &str) -> Option<&Vec<Rule>> {
        self.services
            .values()
            .find_map(|part| part.chains.get(name))
    }

    /// Every session affinity set and its timeout.
    pub fn affinity_sets(&self) -> impl Iterator<Item = (&String, &u32)> {
        self.services
            .values()
            .flat_map(|part| part.affinity_sets.iter())
    }

    /// How many objects (chains, rules, map and set elements) this holds: the size of a full
    /// sync's transaction, roughly.
    pub fn size(&self) -> usize {
        self.services
            .values()
            .map(|part| {
                part.chains.len()
                    + part.chains.values().map(Vec::len).sum::<usize>()
                    + part.affinity_sets.len()
            })
            .sum::<usize>()
            + self.service_ips.len()
            + self.service_nodeports.len()
            + self.no_endpoint_services.len()
            + self.no_endpoint_nodeports.len()
            + self.cluster_ips.len()
            + self.nodeport_ips.len()
            + self.hairpin.len()
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

/// Builds what the table should hold for `services` and `slices` as seen from `node`, from
/// scratch.
pub fn desired<S, E>(services: &[S], slices: &[E], node: &NodeInfo) -> Desired
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
{
    Model::default().desired(services, slices, node)
}

/// What a Service's part was computed from: the Service's resourceVersion and its slices'
/// names and resourceVersions.
type Fingerprint = (String, Vec<(String, String)>);

/// Builds models one after another, recomputing only the Services whose object or slices
/// changed since the last one (all of them when the node changed).
#[derive(Debug, Default)]
pub struct Model {
    node: Option<NodeInfo>,
    parts: HashMap<ServiceKey, (Fingerprint, Arc<ServiceRules>)>,
}

impl Model {
    /// What the table should hold for `services` and `slices` as seen from `node`.
    pub fn desired<S, E>(&mut self, services: &[S], slices: &[E], node: &NodeInfo) -> Desired
    where
        S: Borrow<Service>,
        E: Borrow<EndpointSlice>,
    {
        if self.node.as_ref() != Some(node) {
            self.parts.clear();
            self.node = Some(node.clone());
        }
        let index = index_slices(slices);
        let mut parts = HashMap::with_capacity(services.len());
        let mut services_parts = BTreeMap::new();
        for service in services {
            let service: &Service = service.borrow();
            let (Some(namespace), Some(name)) = (
                service.metadata.namespace.as_deref(),
                service.metadata.name.as_deref(),
            ) else {
                continue;
            };
            let slices = index
                .get(&(namespace, name))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let key = (namespace.to_owned(), name.to_owned());
            let fingerprint = fingerprint(service, slices);
            let kept = self.parts.remove(&key).filter(|(previous, _)| {
                fingerprint
                    .as_ref()
                    .is_some_and(|fingerprint| previous == fingerprint)
            });
            let part = match kept {
                Some((_, part)) => part,
                None => match service_rules(service, slices, node) {
                    Some(part) => Arc::new(part),
                    None => continue,
                },
            };
            if let Some(fingerprint) = fingerprint {
                parts.insert(key.clone(), (fingerprint, Arc::clone(&part)));
            }
            services_parts.insert(key, part);
        }
        self.parts = parts;
        Desired::assemble(services_parts, node)
    }
}

/// What `service`'s part is computed from, or `None` when an object has no resourceVersion
/// (then it is always recomputed).
fn fingerprint(service: &Service, slices: &[&EndpointSlice]) -> Option<Fingerprint> {
    let version = service.metadata.resource_version.clone()?;
    let mut slice_versions = slices
        .iter()
        .map(|slice| {
            Some((
                slice.metadata.name.clone().unwrap_or_default(),
                slice.metadata.resource_version.clone()?,
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    slice_versions.sort();
    Some((version, slice_versions))
}

/// `service`'s part of the table, with its `slices` as seen from `node`; `None` when this
/// proxy does not handle the Service.
fn service_rules(
    service: &Service,
    slices: &[&EndpointSlice],
    node: &NodeInfo,
) -> Option<ServiceRules> {
    let ip = cluster_ip(service)?;
    let namespace = service.metadata.namespace.as_deref()?;
    let name = service.metadata.name.as_deref()?;
    let spec = service.spec.as_ref()?;
    let mut part = ServiceRules {
        cluster_ip: Some(ip),
        ..ServiceRules::default()
    };
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
        part.hairpin.extend(
            all.iter()
                .filter(|e| e.local || node.pod_cidr.is_some_and(|range| in_range(e.ip, range)))
                .map(|e| e.ip),
        );
        let service_chain = format!("service-{id}-{readable}");
        let local_chain = format!("local-{id}-{readable}");
        let external_chain = format!("external-{id}-{readable}");
        let masquerade = node.pod_cidr.map(|local| Rule::MasqueradeUnlessFrom {
            ip,
            protocol,
            port: service_port,
            local,
        });
        // The rules that send a connection to one of `endpoints`.
        let pick = |endpoints: &[Endpoint], part: &mut ServiceRules| -> Vec<Rule> {
            let Some(timeout) = affinity else {
                return vec![match endpoints {
                    [one] => Rule::Dnat {
                        protocol,
                        ip: one.ip,
                        port: one.port,
                    },
                    _ => Rule::DnatRandom {
                        protocol,
                        endpoints: endpoints.iter().map(|e| (e.ip, e.port)).collect(),
                    },
                }];
            };
            // Session affinity: a chain and a set of recent clients per endpoint.
            let mut rules = Vec::new();
            let mut chains = Vec::new();
            for endpoint in endpoints {
                let suffix = format!("{readable}__{}/{}", endpoint.ip, endpoint.port);
                let chain = format!("endpoint-{id}-{suffix}");
                let set = format!("affinity-{id}-{suffix}");
                part.affinity_sets.insert(set.clone(), timeout);
                part.chains.insert(
                    chain.clone(),
                    vec![
                        Rule::RecordAffinity(set.clone()),
                        Rule::Dnat {
                            protocol,
                            ip: endpoint.ip,
                            port: endpoint.port,
                        },
                    ],
                );
                rules.push(Rule::Affinity {
                    set,
                    chain: chain.clone(),
                });
                chains.push(chain);
            }
            rules.push(Rule::Random(chains));
            rules
        };
        if !cluster.is_empty() {
            let mut rules: Vec<Rule> = masquerade.iter().cloned().collect();
            rules.extend(pick(&cluster, &mut part));
            part.chains.insert(service_chain.clone(), rules);
        }
        if (internal_local || external_local) && !local.is_empty() {
            let mut rules: Vec<Rule> = if internal_local {
                masquerade.iter().cloned().collect()
            } else {
                Vec::new()
            };
            rules.extend(pick(&local, &mut part));
            part.chains.insert(local_chain.clone(), rules);
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
                part.no_endpoint_services.push((key, verdict));
            } else {
                part.service_ips
                    .push((key, Target::Goto(local_chain.clone())));
            }
        } else if cluster.is_empty() {
            part.no_endpoint_services.push((key, Target::Reject));
        } else {
            part.service_ips
                .push((key, Target::Goto(service_chain.clone())));
        }
        // Traffic to node ports and external IPs.
        let node_port = port
            .node_port
            .filter(|_| node_ports)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let serving: BTreeSet<Ipv4Addr> = all.iter().filter(|e| e.serving).map(|e| e.ip).collect();
        if protocol == Protocol::Udp && !serving.is_empty() {
            part.udp.push(UdpPort {
                ips: std::iter::once(ip)
                    .chain(external_ips.iter().copied())
                    .collect(),
                port: service_port,
                node_port,
                serving,
            });
        }
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
            part.chains.insert(external_chain.clone(), rules);
            Ok(Target::Goto(external_chain.clone()))
        } else {
            part.chains.insert(
                external_chain.clone(),
                vec![Rule::Masquerade, Rule::Goto(service_chain.clone())],
            );
            Ok(Target::Goto(external_chain.clone()))
        };
        if let Some(node_port) = node_port {
            match &external {
                Ok(target) => part
                    .service_nodeports
                    .push(((protocol, node_port), target.clone())),
                Err(verdict) => part
                    .no_endpoint_nodeports
                    .push(((protocol, node_port), verdict.clone())),
            }
        }
        for external_ip in &external_ips {
            let key = (*external_ip, protocol, service_port);
            match &external {
                Ok(target) => part.service_ips.push((key, target.clone())),
                Err(verdict) => part.no_endpoint_services.push((key, verdict.clone())),
            }
        }
    }
    Some(part)
}

/// Whether `ip` is in `range` (`addr/len`).
fn in_range(ip: Ipv4Addr, (addr, len): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(addr) & mask
}

#[cfg(test)]
mod tests;
