//! The Endpoints controller (upstream's `endpoints-controller`): the legacy `Endpoints` object of
//! every Service with a selector, named after it, for the clients that still read it. Ready
//! pods are `addresses`, the others `notReadyAddresses` (terminating pods only with
//! `publishNotReadyAddresses`, which also makes every address ready); subsets group addresses
//! by the ports they resolve. Past 1000 addresses the object is truncated and annotated
//! `endpoints.kubernetes.io/over-capacity: truncated`, as upstream. Endpoints of Services
//! without a selector belong to their users and are left alone; a Service's deletion deletes
//! its Endpoints.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};

use super::{
    PodEndpoint, Port, has_selector, labels_for, pod_endpoint, selected_pods,
    should_be_in_endpoints,
};
use crate::runtime::{self, Change, Error, Queue, Setup, Task};

/// The most addresses an Endpoints object holds.
pub const MAX_ADDRESSES: usize = 1000;
/// The annotation of a truncated Endpoints object.
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    endpoints: Store<Endpoints>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let services = setup.watch::<Service>();
    let pod_informer = setup.watch::<Pod>();
    let nodes = setup.watch::<Node>();
    let endpoints = setup.watch::<Endpoints>();
    let client = setup.client();
    let (queue, rx) = Queue::<Service>::new();
    {
        let (queue, client) = (queue.clone(), client.clone());
        services.on_change(move |change| match change {
            Change::Applied { new, .. } => queue.add(ObjectRef::from_obj(*new)),
            Change::Deleted(service) if has_selector(service) => {
                // The Service went: so do its Endpoints (they have no owner reference).
                let api: Api<Endpoints> = Api::namespaced(
                    client.clone(),
                    service.metadata.namespace.as_deref().unwrap_or_default(),
                );
                let name = service.metadata.name.clone().unwrap_or_default();
                tokio::spawn(async move {
                    if let Err(error) = api.delete(&name, &DeleteParams::default()).await
                        && !runtime::is_not_found(&error)
                    {
                        tracing::warn!(%name, %error, "cannot delete the endpoints of a deleted service");
                    }
                });
            }
            Change::Deleted(_) => {}
        });
    }
    super::follow_pods(&pod_informer, services.store(), queue.clone());
    queue.follow_namesakes(&endpoints);
    let ctx = Arc::new(Context {
        client,
        pods: pod_informer.store(),
        nodes: nodes.store(),
        endpoints: endpoints.store(),
    });
    setup.run("endpoint", &services, rx, ctx, reconcile)
}

fn address_json(namespace: &str, endpoint: &PodEndpoint) -> Value {
    let mut address = json!({"ip": endpoint.ip});
    if let Some(hostname) = &endpoint.hostname {
        address["hostname"] = json!(hostname);
    }
    if let Some(node) = &endpoint.node {
        address["nodeName"] = json!(node);
    }
    address["targetRef"] = json!({"kind": "Pod", "namespace": namespace, "name": endpoint.name,
                                  "uid": endpoint.uid});
    address
}

/// The subsets of `endpoints` (ready and not ready addresses by port set, addresses in IP
/// order), and whether they had to be cut to [`MAX_ADDRESSES`].
pub(super) fn subsets(namespace: &str, endpoints: &[PodEndpoint]) -> (Vec<Value>, bool) {
    let mut groups: BTreeMap<Vec<Port>, (Vec<&PodEndpoint>, Vec<&PodEndpoint>)> = BTreeMap::new();
    for endpoint in endpoints {
        let group = groups.entry(endpoint.ports.clone()).or_default();
        if endpoint.ready {
            group.0.push(endpoint);
        } else {
            group.1.push(endpoint);
        }
    }
    let total: usize = endpoints.len();
    let truncated = total > MAX_ADDRESSES;
    let mut budget = MAX_ADDRESSES;
    let mut out = Vec::new();
    // Ready addresses are kept first when the object must be cut.
    let mut cut = |list: &mut Vec<&PodEndpoint>| {
        list.sort_by(|a, b| (&a.ip, &a.uid).cmp(&(&b.ip, &b.uid)));
        list.truncate(budget);
        budget -= list.len();
    };
    let mut groups: Vec<_> = groups.into_iter().collect();
    for (_, (ready, _)) in &mut groups {
        cut(ready);
    }
    for (_, (_, not_ready)) in &mut groups {
        cut(not_ready);
    }
    for (ports, (ready, not_ready)) in groups {
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        let mut subset = json!({});
        if !ready.is_empty() {
            subset["addresses"] =
                Value::Array(ready.iter().map(|e| address_json(namespace, e)).collect());
        }
        if !not_ready.is_empty() {
            subset["notReadyAddresses"] = Value::Array(
                not_ready
                    .iter()
                    .map(|e| address_json(namespace, e))
                    .collect(),
            );
        }
        if !ports.is_empty() {
            subset["ports"] = super::slices::ports_json(&ports);
        }
        out.push(subset);
    }
    (out, truncated)
}

/// Brings the Service's Endpoints in line with the pods it selects.
pub(crate) async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !has_selector(&service) || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let publish = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let endpoints: Vec<PodEndpoint> = selected_pods(&service, &ctx.pods)
        .iter()
        .filter(|pod| should_be_in_endpoints(pod, publish))
        .filter_map(|pod| pod_endpoint(&service, pod, &ctx.nodes))
        .collect();
    let (subsets, truncated) = subsets(&namespace, &endpoints);
    let labels = labels_for(&service, &[]);
    let current = ctx.endpoints.get(&ObjectRef::new(&name).within(&namespace));
    let mut annotations: BTreeMap<String, String> = current
        .as_ref()
        .and_then(|e| e.metadata.annotations.clone())
        .unwrap_or_default();
    if truncated {
        annotations.insert(OVER_CAPACITY.to_owned(), "truncated".to_owned());
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    let wanted_subsets = (!subsets.is_empty()).then_some(Value::Array(subsets));
    if let Some(current) = &current {
        let current_subsets = serde_json::to_value(&current.subsets)
            .ok()
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
        if current_subsets == wanted_subsets
            && current.metadata.labels.clone().unwrap_or_default() == labels
            && current.metadata.annotations.clone().unwrap_or_default() == annotations
        {
            return Ok(Action::await_change());
        }
    }
    let mut object = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    });
    if !annotations.is_empty() {
        object["metadata"]["annotations"] = json!(annotations);
    }
    if let Some(subsets) = wanted_subsets {
        object["subsets"] = subsets;
    }
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &namespace);
    match current {
        Some(current) => {
            object["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
            let object: Endpoints = serde_json::from_value(object)
                .map_err(|e| Error::Invalid(format!("endpoints: {e}")))?;
            api.replace(&name, &PostParams::default(), &object).await?;
        }
        None => {
            let object: Endpoints = serde_json::from_value(object)
                .map_err(|e| Error::Invalid(format!("endpoints: {e}")))?;
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                // Created meanwhile (the cache had not seen it): the next event brings it.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(Action::await_change())
}
