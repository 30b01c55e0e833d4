//! Service endpoints, as upstream's `endpointslice`, `endpoints` and `endpointslice-mirroring`
//! controllers keep them: for every Service with a selector, EndpointSlices (`slices.rs`) and
//! the legacy Endpoints object (`legacy.rs`) list the addresses of the pods it selects; the
//! Endpoints that users write for Services without a selector are mirrored into EndpointSlices
//! (`mirroring.rs`). What a pod contributes (its address, readiness, serving and terminating
//! conditions, node, zone, hostname, and its ports, named target ports resolved in its own
//! containers) is worked out here, once, for both.

pub mod legacy;
pub mod mirroring;
pub mod slices;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::pods;
use crate::runtime::{Change, Informer, Queue};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming what manages an EndpointSlice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The label of objects of headless Services.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The label that keeps an Endpoints object from being mirrored.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// The zone label of nodes.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One port of an endpoint: (name, port, protocol, appProtocol).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Port {
    /// The Service port's name.
    pub name: String,
    /// The port on the pod.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The Service port's `appProtocol`.
    pub app_protocol: Option<String>,
}

/// What one selected pod contributes to a Service's endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct PodEndpoint {
    /// The pod's name and UID.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Its address of the Service's family.
    pub ip: String,
    /// Its node.
    pub node: Option<String>,
    /// Its node's zone.
    pub zone: Option<String>,
    /// Its hostname, when it is a member of the Service's subdomain.
    pub hostname: Option<String>,
    /// Ready to receive traffic (always, with `publishNotReadyAddresses`; never while
    /// terminating otherwise).
    pub ready: bool,
    /// Its readiness, terminating or not.
    pub serving: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Its ports, in the Service's order (those it cannot resolve are left out).
    pub ports: Vec<Port>,
}

/// Whether a pod takes part in endpoints (upstream's `ShouldPodBeInEndpoints`): not finished,
/// with an address, and not being deleted unless terminating pods are wanted.
pub fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    let has_ip = status.is_some_and(|s| {
        s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
            || s.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty())
    });
    has_ip && (include_terminating || pod.metadata.deletion_timestamp.is_none())
}

/// The pods `service` selects (none without a selector), in name order.
pub fn selected_pods(service: &Service, pods: &Store<Pod>) -> Vec<std::sync::Arc<Pod>> {
    let Some(selector) = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
    else {
        return Vec::new();
    };
    let namespace = service.metadata.namespace.as_deref();
    let mut selected: Vec<_> = pods
        .state()
        .into_iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == namespace)
        .filter(|pod| {
            let labels = pods::labels_of(&pod.metadata);
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    selected
}

/// Whether the Service selects pods (has a non-empty selector) and is not an ExternalName one.
pub fn has_selector(service: &Service) -> bool {
    let spec = service.spec.as_ref();
    spec.and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty())
        && spec.and_then(|s| s.type_.as_deref()) != Some("ExternalName")
}

/// Whether the Service has no cluster IP.
pub fn is_headless(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| ip == "None")
}

/// Whether the Service's addresses are IPv6.
fn is_ipv6_service(service: &Service) -> bool {
    let spec = service.spec.as_ref();
    match spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
    {
        Some(family) => family == "IPv6",
        None => spec
            .and_then(|s| s.cluster_ip.as_deref())
            .is_some_and(|ip| ip.contains(':')),
    }
}

/// The pod's port for `port` of the Service (upstream's `FindPort`): its `targetPort` number,
/// or the number of the container (or sidecar) port of that name and protocol.
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(number)) => Some(*number),
        Some(IntOrString::String(name)) => {
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// What `pod` contributes to `service`'s endpoints, if it has an address of its family.
pub fn pod_endpoint(service: &Service, pod: &Pod, nodes: &Store<Node>) -> Option<PodEndpoint> {
    let status = pod.status.as_ref()?;
    let ipv6 = is_ipv6_service(service);
    let ip = status
        .pod_ips
        .iter()
        .flatten()
        .map(|ip| ip.ip.clone())
        .chain(status.pod_ip.clone())
        .find(|ip| !ip.is_empty() && ip.contains(':') == ipv6)?;
    let spec = pod.spec.as_ref();
    let node = spec
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let zone = node.as_ref().and_then(|name| {
        nodes
            .state()
            .into_iter()
            .find(|n| n.metadata.name.as_ref() == Some(name))
            .and_then(|n| pods::labels_of(&n.metadata).get(ZONE_LABEL).cloned())
    });
    let serving = pods::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let ports = service_ports
        .iter()
        .filter_map(|port| {
            Some(Port {
                name: port.name.clone().unwrap_or_default(),
                port: find_port(pod, port)?,
                protocol: port.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                app_protocol: port.app_protocol.clone(),
            })
        })
        .collect();
    Some(PodEndpoint {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        ip,
        node,
        zone,
        hostname: should_set_hostname(pod, service)
            .then(|| spec.and_then(|s| s.hostname.clone()).unwrap_or_default()),
        ready: publish || (serving && !terminating),
        serving,
        terminating,
        ports,
    })
}

/// Whether an endpoint names the pod's hostname: the pod has one and is in the subdomain the
/// Service is (upstream's `ShouldSetHostname`).
fn should_set_hostname(pod: &Pod, service: &Service) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.hostname.as_deref())
        .is_some_and(|h| !h.is_empty())
        && spec.and_then(|s| s.subdomain.as_deref()) == service.metadata.name.as_deref()
        && pod.metadata.namespace == service.metadata.namespace
}

/// The labels an object of `service`'s endpoints carries: the Service's (less the reserved
/// ones), the headless label for a headless Service, and `extra`.
pub fn labels_for(service: &Service, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = pods::labels_of(&service.metadata)
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                SERVICE_NAME_LABEL | MANAGED_BY_LABEL | HEADLESS_LABEL
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if is_headless(service) {
        labels.insert(HEADLESS_LABEL.to_owned(), String::new());
    }
    for (k, v) in extra {
        labels.insert((*k).to_owned(), (*v).to_owned());
    }
    labels
}

/// Queues every Service a pod's change may concern (see [`services_of`]): how the EndpointSlice
/// and Endpoints controllers follow pods.
pub fn follow_pods(pods: &Informer<Pod>, services: Store<Service>, queue: Queue<Service>) {
    pods.on_change(move |change| {
        let old = match change {
            Change::Applied { old, .. } => old.as_deref(),
            Change::Deleted(_) => None,
        };
        for service in services_of(&services, change.object(), old) {
            queue.add(ObjectRef::from_obj(&*service));
        }
    });
}

/// Asks for the object named by the `kubernetes.io/service-name` label of every changed slice
/// that `manager` manages to be reconciled: a slice of ours changed or went, so its Service (or
/// Endpoints) is brought back in line.
pub fn follow_managed_slices<K>(
    slices: &Informer<EndpointSlice>,
    manager: &'static str,
    queue: Queue<K>,
) where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    slices.on_change(move |change| {
        let slice = change.object();
        let labels = pods::labels_of(&slice.metadata);
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(manager)
            && let Some(name) = labels.get(SERVICE_NAME_LABEL)
        {
            queue.add_name(slice.metadata.namespace.as_deref(), name);
        }
    });
}

/// The Service a pod's change may concern: every Service of its namespace whose selector
/// matches its labels now or before.
pub fn services_of(
    services: &Store<Service>,
    pod: &Pod,
    old: Option<&Pod>,
) -> Vec<std::sync::Arc<Service>> {
    let namespace = pod.metadata.namespace.as_deref();
    let label_sets = std::iter::once(pods::labels_of(&pod.metadata))
        .chain(old.map(|o| pods::labels_of(&o.metadata)))
        .collect::<Vec<_>>();
    services
        .state()
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == namespace)
        .filter(|s| {
            s.spec
                .as_ref()
                .and_then(|spec| spec.selector.as_ref())
                .filter(|sel| !sel.is_empty())
                .is_some_and(|sel| {
                    label_sets
                        .iter()
                        .any(|labels| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests;
