//! The EndpointSlice mirroring controller (upstream's `endpointslice-mirroring-controller`):
//! the Endpoints a user writes for a Service without a selector are mirrored into
//! EndpointSlices (managed by `endpointslicemirroring-controller.k8s.io`, owned by the
//! Endpoints), so that what reads slices (the service proxy, DNS) sees them too. Endpoints
//! labelled `endpointslice.kubernetes.io/skip-mirror: "true"` (the API server's own) and
//! leader-election records are not mirrored; mirrored slices go when mirroring stops applying.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};

use super::slices::{MAX_ENDPOINTS, Wanted, plan, ports_json};
use super::{MANAGED_BY_LABEL, Port, SERVICE_NAME_LABEL, SKIP_MIRROR_LABEL};
use crate::pods;
use crate::runtime::{self, Error, Queue, Setup, Task};

/// The value of the managed-by label on the slices this controller writes.
pub const CONTROLLER: &str = "endpointslicemirroring-controller.k8s.io";
/// The most addresses of one Endpoints object mirrored (upstream's default).
const MAX_MIRRORED: usize = 1000;
/// Annotations not copied to the slices.
const NOT_COPIED: [&str; 2] = [
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];
/// The annotation of the Endpoints that old leader elections used as a lock.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let endpoints = setup.watch::<Endpoints>();
    let services = setup.watch::<Service>();
    let slices = setup.watch::<EndpointSlice>();
    let (queue, rx) = Queue::<Endpoints>::new();
    queue.follow(&endpoints);
    queue.follow_namesakes(&services);
    super::follow_managed_slices(&slices, CONTROLLER, queue);
    let ctx = Arc::new(Context {
        client: setup.client(),
        services: services.store(),
        slices: slices.store(),
    });
    setup.run("endpointslice-mirroring", &endpoints, rx, ctx, reconcile)
}

/// Whether `endpoints` are to be mirrored, given their Service.
fn mirrored(endpoints: &Endpoints, service: Option<&Service>) -> bool {
    let labels = pods::labels_of(&endpoints.metadata);
    let annotations = endpoints.metadata.annotations.as_ref();
    let Some(service) = service else {
        return false;
    };
    let selects = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty());
    !selects
        && labels.get(SKIP_MIRROR_LABEL).map(String::as_str) != Some("true")
        && !annotations.is_some_and(|a| a.contains_key(LEADER_ANNOTATION))
        && endpoints.metadata.deletion_timestamp.is_none()
}

fn endpoint_json(address: &EndpointAddress, ready: bool) -> Value {
    let mut value = json!({"addresses": [address.ip], "conditions": {"ready": ready}});
    if let Some(hostname) = address.hostname.as_ref().filter(|h| !h.is_empty()) {
        value["hostname"] = json!(hostname);
    }
    if let Some(node) = address.node_name.as_ref().filter(|n| !n.is_empty()) {
        value["nodeName"] = json!(node);
    }
    if let Some(target) = &address.target_ref {
        value["targetRef"] = serde_json::to_value(target).unwrap_or_default();
    }
    value
}

/// The slices the Endpoints are mirrored into, by address type: one group per subset's ports
/// and address type, chunked, at most [`MAX_MIRRORED`] addresses in all.
fn wanted_slices(endpoints: &Endpoints) -> BTreeMap<&'static str, Vec<Wanted>> {
    let mut groups: BTreeMap<(&'static str, Vec<Port>), Vec<Value>> = BTreeMap::new();
    let mut budget = MAX_MIRRORED;
    for subset in endpoints.subsets.iter().flatten() {
        let ports: Vec<Port> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| Port {
                name: p.name.clone().unwrap_or_default(),
                port: p.port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let addresses = subset.addresses.iter().flatten().map(|a| (a, true)).chain(
            subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false)),
        );
        for (address, ready) in addresses {
            let family = match address.ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => "IPv4",
                Ok(std::net::IpAddr::V6(_)) => "IPv6",
                Err(_) => continue,
            };
            if budget == 0 {
                break;
            }
            budget -= 1;
            groups
                .entry((family, ports.clone()))
                .or_default()
                .push(endpoint_json(address, ready));
        }
    }
    let mut wanted: BTreeMap<&'static str, Vec<Wanted>> = BTreeMap::new();
    for ((family, ports), members) in groups {
        for chunk in members.chunks(MAX_ENDPOINTS) {
            wanted.entry(family).or_default().push(Wanted {
                ports: ports_json(&ports),
                endpoints: chunk.to_vec(),
            });
        }
    }
    wanted
}

/// Brings the slices mirroring the Endpoints in line with them.
pub(crate) async fn reconcile(
    endpoints: Arc<Endpoints>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = endpoints.metadata.namespace.clone().unwrap_or_default();
    let name = endpoints.metadata.name.clone().unwrap_or_default();
    let service = ctx.services.get(&ObjectRef::new(&name).within(&namespace));
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
    let wanted = if mirrored(&endpoints, service.as_deref()) {
        wanted_slices(&endpoints)
    } else {
        BTreeMap::new()
    };
    let mut labels: BTreeMap<String, String> = pods::labels_of(&endpoints.metadata).clone();
    labels.insert(SERVICE_NAME_LABEL.to_owned(), name.clone());
    labels.insert(MANAGED_BY_LABEL.to_owned(), CONTROLLER.to_owned());
    let annotations: BTreeMap<String, String> = endpoints
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let owner = json!([{"apiVersion": "v1", "kind": "Endpoints", "name": name,
        "uid": endpoints.metadata.uid.clone().unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true}]);
    let mut leftover_all: Vec<String> = Vec::new();
    for family in ["IPv4", "IPv6"] {
        let of_family: BTreeMap<String, Arc<EndpointSlice>> = ours
            .iter()
            .filter(|s| s.address_type == family)
            .map(|s| (s.metadata.name.clone().unwrap_or_default(), s.clone()))
            .collect();
        let existing: Vec<(String, Value)> = of_family
            .iter()
            .map(|(n, s)| {
                let ports = serde_json::to_value(&s.ports).unwrap_or_default();
                (n.clone(), if ports.is_null() { json!([]) } else { ports })
            })
            .collect();
        let wanted = wanted.get(family).cloned().unwrap_or_default();
        let (pairs, leftover) = plan(&wanted, &existing);
        leftover_all.extend(leftover.into_iter().cloned());
        for (want, reuse) in pairs {
            let mut slice = json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"namespace": namespace, "labels": labels,
                             "ownerReferences": owner},
                "addressType": family,
                "endpoints": want.endpoints,
                "ports": want.ports,
            });
            if !annotations.is_empty() {
                slice["metadata"]["annotations"] = json!(annotations);
            }
            match reuse.and_then(|n| of_family.get(n)) {
                Some(current) => {
                    let current_json = serde_json::to_value(&**current).unwrap_or_default();
                    if current_json["endpoints"] == slice["endpoints"]
                        && current_json["ports"] == slice["ports"]
                        && pods::labels_of(&current.metadata) == &labels
                        && current.metadata.annotations.clone().unwrap_or_default() == annotations
                    {
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
                    slice["metadata"]["generateName"] = json!(format!("{name}-"));
                    let slice: EndpointSlice = serde_json::from_value(slice)
                        .map_err(|e| Error::Invalid(format!("endpoint slice: {e}")))?;
                    api.create(&PostParams::default(), &slice).await?;
                }
            }
        }
    }
    for slice in leftover_all {
        match api.delete(&slice, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Action::await_change())
}
