//! What the DNS server knows of the cluster: each Service, EndpointSlice and Namespace reduced
//! to the few fields DNS answers from ([`ServiceInfo`], [`SliceInfo`]), and the immutable
//! [`Snapshot`] built from them, indexed by name and by address, that every query reads.
//!
//! The reductions follow CoreDNS's `object` package: a Service's type, cluster IPs (or `None`),
//! external name and ports (a port `-1` stands for "no ports", as CoreDNS's sentinel); an
//! EndpointSlice's ports and its ready addresses (a missing `ready` counts as ready, as the
//! API documents), each with the name CoreDNS gives it (its `hostname`, else the address with
//! dashes).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A port of a Service or an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The port's name (empty when unnamed).
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port number; `-1` when the object declares no port at all.
    pub port: i32,
}

/// The sentinel port CoreDNS gives an object without ports: it answers address queries and
/// no SRV record.
fn no_ports() -> Vec<PortInfo> {
    vec![PortInfo {
        name: String::new(),
        protocol: String::new(),
        port: -1,
    }]
}

/// How a Service is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// Its cluster IPs (ClusterIP, NodePort and LoadBalancer services).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the addresses of its endpoints.
    Headless,
    /// A CNAME to `spec.externalName`.
    ExternalName(String),
}

/// The part of a Service DNS answers from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// How it is answered.
    pub kind: ServiceKind,
    /// Its ports (the sentinel `-1` when it has none).
    pub ports: Vec<PortInfo>,
    /// `spec.publishNotReadyAddresses`: every endpoint is answered, ready or not.
    pub publish_not_ready: bool,
}

impl ServiceInfo {
    /// The DNS view of `service`; `None` for one without a name or namespace.
    pub fn from_service(service: &Service) -> Option<ServiceInfo> {
        let namespace = service.metadata.namespace.clone()?;
        let name = service.metadata.name.clone()?;
        let spec = service.spec.clone().unwrap_or_default();
        let kind = if spec.type_.as_deref() == Some("ExternalName") {
            ServiceKind::ExternalName(spec.external_name.unwrap_or_default())
        } else {
            let ips: Vec<String> = match spec.cluster_ips {
                Some(ips) if !ips.is_empty() => ips,
                _ => spec.cluster_ip.into_iter().collect(),
            };
            if ips.first().map(String::as_str) == Some("None") {
                ServiceKind::Headless
            } else {
                ServiceKind::ClusterIp(ips.iter().filter_map(|ip| parse_ip(ip)).collect())
            }
        };
        let ports = match spec.ports {
            Some(ports) if !ports.is_empty() => ports
                .into_iter()
                .map(|p| PortInfo {
                    name: p.name.unwrap_or_default(),
                    protocol: p.protocol.unwrap_or_else(|| "TCP".to_owned()),
                    port: p.port,
                })
                .collect(),
            _ => no_ports(),
        };
        Some(ServiceInfo {
            namespace,
            name,
            kind,
            ports,
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
        })
    }
}

/// An address of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressInfo {
    /// The address.
    pub ip: IpAddr,
    /// The first label of its name under the Service: `hostname`, else the address written
    /// with dashes (`10-42-0-5`, `fd00--5`), as CoreDNS names endpoints.
    pub hostname: String,
    /// `conditions.ready` (a missing condition counts as ready).
    pub ready: bool,
}

/// The part of an EndpointSlice DNS answers from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    /// The slice's namespace.
    pub namespace: String,
    /// The Service it belongs to (its `kubernetes.io/service-name` label).
    pub service: String,
    /// Its ports (the sentinel `-1` when it has none).
    pub ports: Vec<PortInfo>,
    /// Its addresses, ready or not.
    pub addresses: Vec<AddressInfo>,
}

impl SliceInfo {
    /// The DNS view of `slice`; `None` for one that belongs to no Service or holds no IP
    /// addresses (`addressType: FQDN`).
    pub fn from_slice(slice: &EndpointSlice) -> Option<SliceInfo> {
        let namespace = slice.metadata.namespace.clone()?;
        let service = slice
            .metadata
            .labels
            .as_ref()?
            .get(SERVICE_NAME_LABEL)?
            .clone();
        if slice.address_type == "FQDN" {
            return None;
        }
        let ports = match &slice.ports {
            Some(ports) if !ports.is_empty() => ports
                .iter()
                .map(|p| PortInfo {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_default(),
                    port: p.port.unwrap_or(-1),
                })
                .collect(),
            _ => no_ports(),
        };
        let mut addresses = Vec::new();
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            for text in &endpoint.addresses {
                let Some(ip) = parse_ip(text) else { continue };
                let hostname = match &endpoint.hostname {
                    Some(hostname) if !hostname.is_empty() => hostname.to_ascii_lowercase(),
                    _ => dashed(text),
                };
                addresses.push(AddressInfo {
                    ip,
                    hostname,
                    ready,
                });
            }
        }
        Some(SliceInfo {
            namespace,
            service,
            ports,
            addresses,
        })
    }
}

/// An address written as one DNS label, as CoreDNS writes it: dots (IPv4) or colons (IPv6)
/// become dashes, and an IPv6 address ending in `::` gets a final `0`.
pub fn dashed(address: &str) -> String {
    if address.contains('.') {
        return address.replace('.', "-");
    }
    let mut label = address.replace(':', "-");
    if label.ends_with('-') {
        label.push('0');
    }
    label.to_ascii_lowercase()
}

/// Parses an address as Go's `net.ParseIP` followed by `To4` does: IPv4-mapped IPv6
/// addresses are IPv4 addresses.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    let ip: IpAddr = text.parse().ok()?;
    Some(canonical(ip))
}

/// `ip`, with an IPv4-mapped IPv6 address as the IPv4 address it maps.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The endpoints of one Service: the slices' ports and their answered addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// One entry per slice: its ports and the addresses answered (ready ones, or all when the
    /// Service publishes addresses that are not ready).
    pub slices: Vec<(Vec<PortInfo>, Vec<AddressInfo>)>,
}

/// Everything one query reads, immutable once built; a new one replaces it on every change.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Whether the first lists of every watched kind have arrived. Until then a name that is
    /// not found is answered SERVFAIL, not NXDOMAIN (CoreDNS's `HasSynced` check).
    pub synced: bool,
    /// The SOA serial: when the snapshot was built, in seconds since the epoch (CoreDNS uses
    /// the time of the last change it saw).
    pub serial: u32,
    /// The namespaces that exist.
    pub namespaces: HashSet<String>,
    /// Services by (namespace, name).
    pub services: HashMap<(String, String), Arc<ServiceInfo>>,
    /// The endpoints of each Service by (namespace, service name).
    pub endpoints: HashMap<(String, String), Arc<Endpoints>>,
    /// The Service whose cluster IP an address is, as (namespace, name).
    pub service_ips: HashMap<IpAddr, (String, String)>,
    /// The endpoints an address is, as (namespace, service, endpoint hostname).
    pub endpoint_ips: HashMap<IpAddr, Vec<(String, String, String)>>,
}

impl Snapshot {
    /// Builds the indexes from the reduced objects.
    pub fn build<'a>(
        namespaces: impl IntoIterator<Item = &'a str>,
        services: impl IntoIterator<Item = &'a ServiceInfo>,
        slices: impl IntoIterator<Item = &'a SliceInfo>,
        synced: bool,
        serial: u32,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            synced,
            serial,
            namespaces: namespaces.into_iter().map(str::to_owned).collect(),
            ..Snapshot::default()
        };
        let mut sorted: Vec<&ServiceInfo> = services.into_iter().collect();
        sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for service in sorted {
            let key = (service.namespace.clone(), service.name.clone());
            if let ServiceKind::ClusterIp(ips) = &service.kind {
                for ip in ips {
                    snapshot
                        .service_ips
                        .entry(*ip)
                        .or_insert_with(|| key.clone());
                }
            }
            snapshot.services.insert(key, Arc::new(service.clone()));
        }
        let mut endpoints: HashMap<(String, String), Endpoints> = HashMap::new();
        for slice in slices {
            let key = (slice.namespace.clone(), slice.service.clone());
            let publish_all = snapshot
                .services
                .get(&key)
                .is_some_and(|s| s.publish_not_ready);
            let addresses: Vec<AddressInfo> = slice
                .addresses
                .iter()
                .filter(|a| a.ready || publish_all)
                .cloned()
                .collect();
            for address in &addresses {
                let entry = snapshot.endpoint_ips.entry(address.ip).or_default();
                let named = (key.0.clone(), key.1.clone(), address.hostname.clone());
                if !entry.contains(&named) {
                    entry.push(named);
                }
            }
            endpoints
                .entry(key)
                .or_default()
                .slices
                .push((slice.ports.clone(), addresses));
        }
        snapshot.endpoints = endpoints
            .into_iter()
            .map(|(k, v)| (k, Arc::new(v)))
            .collect();
        snapshot
    }

    /// The Service `namespace/name`.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceInfo> {
        self.services
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(Arc::as_ref)
    }

    /// The endpoints of the Service `namespace/name`.
    pub fn endpoints_of(&self, namespace: &str, name: &str) -> Option<&Endpoints> {
        self.endpoints
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(Arc::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_named_as_coredns_names_them() {
        assert_eq!(dashed("10.42.0.5"), "10-42-0-5");
        assert_eq!(dashed("fd00::5"), "fd00--5");
        assert_eq!(dashed("fd00::"), "fd00--0");
        assert_eq!(
            parse_ip("::ffff:10.0.0.1"),
            Some(IpAddr::from([10, 0, 0, 1]))
        );
        assert_eq!(parse_ip("None"), None);
    }
}
