//! The EndpointSlice controller (upstream's `endpointslice-controller`): the pods a Service
//! selects, as EndpointSlices of at most 100 endpoints, one group of slices per set of ports
//! (named target ports resolve per pod), each endpoint with its ready, serving and terminating
//! conditions, node, zone, hostname and pod reference; terminating pods stay listed (not
//! ready) until they are gone. A Service that selects no pod keeps one empty slice, as
//! upstream's placeholder. Slices carry the Service's labels, `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by`, and are owned by the Service (the garbage
//! collector removes them with it). Existing slices are updated in place where they fit, so a
//! change touches as few slices as it can.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use serde_json::{Value, json};

use super::{
    MANAGED_BY_LABEL, PodEndpoint, Port, SERVICE_NAME_LABEL, has_selector, labels_for,
    pod_endpoint, selected_pods, should_be_in_endpoints,
};
use crate::pods;
use crate::runtime::{self, Error, Queue, Setup, Task};

/// The value of the managed-by label on the slices this controller writes.
pub const CONTROLLER: &str = "endpointslice-controller.k8s.io";
/// The most endpoints in one slice (upstream's `--max-endpoints-per-slice` default).
pub const MAX_ENDPOINTS: usize = 100;

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let services = setup.watch::<Service>();
    let pod_informer = setup.watch::<Pod>();
    let nodes = setup.watch::<Node>();
    let slices = setup.watch::<EndpointSlice>();
    let (queue, rx) = Queue::<Service>::new();
    queue.follow(&services);
    super::follow_pods(&pod_informer, services.store(), queue.clone());
    super::follow_managed_slices(&slices, CONTROLLER, queue);
    let ctx = Arc::new(Context {
        client: setup.client(),
        pods: pod_informer.store(),
        nodes: nodes.store(),
        slices: slices.store(),
    });
    setup.run("endpointslice", &services, rx, ctx, reconcile)
}

/// The JSON of one endpoint.
fn endpoint_json(namespace: &str, endpoint: &PodEndpoint) -> Value {
    let mut value = json!({
        "addresses": [endpoint.ip],
        "conditions": {
            "ready": endpoint.ready,
            "serving": endpoint.serving,
            "terminating": endpoint.terminating,
        },
        "targetRef": {"kind": "Pod", "namespace": namespace, "name": endpoint.name,
                      "uid": endpoint.uid},
    });
    if let Some(hostname) = &endpoint.hostname {
        value["hostname"] = json!(hostname);
    }
    if let Some(node) = &endpoint.node {
        value["nodeName"] = json!(node);
    }
    if let Some(zone) = &endpoint.zone {
        value["zone"] = json!(zone);
    }
    value
}

/// The JSON of a slice's ports.
pub(super) fn ports_json(ports: &[Port]) -> Value {
    Value::Array(
        ports
            .iter()
            .map(|p| {
                let mut port = json!({"name": p.name, "protocol": p.protocol, "port": p.port});
                if let Some(app) = &p.app_protocol {
                    port["appProtocol"] = json!(app);
                }
                port
            })
            .collect(),
    )
}

/// One slice as it should be: its ports, endpoints and labels.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Wanted {
    /// The ports, as JSON.
    pub ports: Value,
    /// The endpoints, as JSON.
    pub endpoints: Vec<Value>,
}

/// The slices `service` should have: its selected pods grouped by the ports they resolve,
/// chunked to [`MAX_ENDPOINTS`]; one empty slice when it selects none.
pub(super) fn wanted_slices(service: &Service, endpoints: &[PodEndpoint]) -> Vec<Wanted> {
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let mut groups: BTreeMap<Vec<Port>, Vec<Value>> = BTreeMap::new();
    for endpoint in endpoints {
        groups
            .entry(endpoint.ports.clone())
            .or_default()
            .push(endpoint_json(namespace, endpoint));
    }
    let mut wanted = Vec::new();
    for (ports, members) in groups {
        for chunk in members.chunks(MAX_ENDPOINTS) {
            wanted.push(Wanted {
                ports: ports_json(&ports),
                endpoints: chunk.to_vec(),
            });
        }
    }
    if wanted.is_empty() {
        wanted.push(Wanted {
            ports: json!([]),
            endpoints: Vec::new(),
        });
    }
    wanted
}

/// Matches the wanted slices to the existing ones (by ports, in name order): which existing
/// slice each wanted one updates (`None`: a new one), and the existing ones left over.
pub(super) fn plan<'a>(
    wanted: &'a [Wanted],
    existing: &'a [(String, Value)],
) -> (Vec<(&'a Wanted, Option<&'a String>)>, Vec<&'a String>) {
    let mut free: Vec<&(String, Value)> = existing.iter().collect();
    free.sort_by(|a, b| a.0.cmp(&b.0));
    let mut pairs = Vec::new();
    for want in wanted {
        let same_ports = free.iter().position(|(_, ports)| *ports == want.ports);
        let taken = same_ports.map(|i| free.remove(i));
        pairs.push((want, taken.map(|(name, _)| name)));
    }
    // Slices of other ports are reused before new ones are made.
    for pair in pairs.iter_mut().filter(|(_, name)| name.is_none()) {
        if !free.is_empty() {
            pair.1 = Some(&free.remove(0).0);
        }
    }
    (pairs, free.into_iter().map(|(name, _)| name).collect())
}

/// Brings the Service's EndpointSlices in line with the pods it selects.
pub(crate) async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !has_selector(&service) || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let endpoints: Vec<PodEndpoint> = selected_pods(&service, &ctx.pods)
        .iter()
        .filter(|pod| should_be_in_endpoints(pod, true))
        .filter_map(|pod| pod_endpoint(&service, pod, &ctx.nodes))
        .collect();
    let address_type = if super::is_ipv6_service(&service) {
        "IPv6"
    } else {
        "IPv4"
    };
    let ours: Vec<Arc<EndpointSlice>> = ctx
        .slices
        .state()
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(|s| {
            let labels = pods::labels_of(&s.metadata);
            labels.get(SERVICE_NAME_LABEL) == Some(&name)
                && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(CONTROLLER)
        })
        .collect();
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &namespace);
    // Slices of another address type (the Service's family changed) go.
    let (ours, stale): (Vec<_>, Vec<_>) = ours
        .into_iter()
        .partition(|s| s.address_type == address_type);
    let by_name: BTreeMap<String, Arc<EndpointSlice>> = ours
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), s.clone()))
        .collect();
    let existing: Vec<(String, Value)> = by_name
        .iter()
        .map(|(n, s)| {
            (
                n.clone(),
                serde_json::to_value(&s.ports).unwrap_or_default(),
            )
        })
        .map(|(n, ports)| (n, if ports.is_null() { json!([]) } else { ports }))
        .collect();
    let wanted = wanted_slices(&service, &endpoints);
    let labels = labels_for(
        &service,
        &[
            (SERVICE_NAME_LABEL, name.as_str()),
            (MANAGED_BY_LABEL, CONTROLLER),
        ],
    );
    let owner = json!([{"apiVersion": "v1", "kind": "Service", "name": name,
        "uid": service.metadata.uid.clone().unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true}]);
    let (pairs, leftover) = plan(&wanted, &existing);
    for (want, reuse) in pairs {
        let mut slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": namespace, "labels": labels,
                         "ownerReferences": owner},
            "addressType": address_type,
            "endpoints": want.endpoints,
            "ports": want.ports,
        });
        match reuse.and_then(|n| by_name.get(n)) {
            Some(current) => {
                let current_json = serde_json::to_value(&**current).unwrap_or_default();
                let same = current_json["endpoints"] == slice["endpoints"]
                    || (current_json["endpoints"].is_null() && want.endpoints.is_empty());
                let same = same
                    && (current_json["ports"] == slice["ports"]
                        || (current_json["ports"].is_null() && want.ports == json!([])))
                    && pods::labels_of(&current.metadata) == &labels
                    && current.metadata.owner_references.is_some();
                if same {
                    continue;
                }
                slice["metadata"]["name"] = json!(current.metadata.name);
                slice["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
                let slice: EndpointSlice = serde_json::from_value(slice)
                    .map_err(|e| Error::Invalid(format!("endpoint slice: {e}")))?;
                api.replace(
                    current.metadata.name.as_deref().unwrap_or_default(),
                    &PostParams::default(),
                    &slice,
                )
                .await?;
            }
            None => {
                slice["metadata"]["generateName"] = json!(slice_prefix(&name));
                let slice: EndpointSlice = serde_json::from_value(slice)
                    .map_err(|e| Error::Invalid(format!("endpoint slice: {e}")))?;
                api.create(&PostParams::default(), &slice).await?;
            }
        }
    }
    for name in leftover
        .into_iter()
        .cloned()
        .chain(stale.iter().filter_map(|s| s.metadata.name.clone()))
    {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Action::await_change())
}

/// The `generateName` of a Service's slices: `<service>-` (the name alone when too long).
fn slice_prefix(service: &str) -> String {
    if service.len() < 253 {
        format!("{service}-")
    } else {
        service.to_owned()
    }
}
