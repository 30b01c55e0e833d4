//! The Deployment controller, as upstream kube-controller-manager's `pkg/controller/deployment`
//! (apps/v1, Kubernetes 1.33): one replica set per pod template (named after the template's
//! hash), rolled out with `RollingUpdate` or `Recreate`, scaled proportionally when resized
//! mid-rollout, paused and resumed, rolled back, old revisions cleaned up, and the status with
//! its `Available` and `Progressing` conditions kept as `kubectl rollout status` expects.
//!
//! The shape follows upstream: informer handlers map changes of deployments, replica sets and
//! pods to deployment keys ([`start`]); [`reconcile`] reads the caches, adopts and releases
//! replica sets ([`claim`]), and drives one sync ([`sync`]) whose decisions are pure functions
//! ([`util`], [`rolling`], [`progress`], [`recreate`], [`rollback`]) over thin API calls
//! ([`Writes`], implemented by the API client here and by a recording fake in the tests).

pub mod claim;
pub mod progress;
pub mod recreate;
pub mod rollback;
pub mod rolling;
pub mod sync;
pub mod util;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use tracing::Instrument;

use crate::runtime::{Change, Error, Queue, Setup, Task};

/// What the reconciler reads and writes with.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The replica set cache.
    pub replica_sets: Store<ReplicaSet>,
    /// The pod cache.
    pub pods: Store<Pod>,
    /// Where events go.
    pub recorder: EventRecorder,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("replica_sets", &self.replica_sets.len())
            .field("pods", &self.pods.len())
            .finish()
    }
}

/// The writes a sync makes, and the one cache read that follows a failed create. The API
/// client implements it; the tests implement it with a recording fake.
pub trait Writes: Send + Sync {
    /// Creates a replica set.
    fn create_rs(
        &self,
        rs: &ReplicaSet,
    ) -> impl Future<Output = Result<ReplicaSet, kube::Error>> + Send;
    /// Replaces a replica set (optimistic concurrency on its resourceVersion).
    fn update_rs(
        &self,
        rs: &ReplicaSet,
    ) -> impl Future<Output = Result<ReplicaSet, kube::Error>> + Send;
    /// Applies a strategic merge patch to a replica set.
    fn patch_rs(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Deletes a replica set.
    fn delete_rs(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Writes a deployment's status (and annotations) through `/status`.
    fn update_status(
        &self,
        d: &Deployment,
    ) -> impl Future<Output = Result<Deployment, kube::Error>> + Send;
    /// Replaces a deployment (rollback only).
    fn update(
        &self,
        d: &Deployment,
    ) -> impl Future<Output = Result<Deployment, kube::Error>> + Send;
    /// Reads a deployment from the API (not the cache), before adopting.
    fn get_deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Deployment, kube::Error>> + Send;
    /// A replica set from the cache.
    fn cached_rs(&self, namespace: &str, name: &str) -> Option<ReplicaSet>;
    /// Records an event about the deployment.
    fn event(&self, d: &Deployment, kind: EventType, reason: &str, message: String);
}

/// [`Writes`] through the API.
#[derive(Debug)]
struct ApiWrites<'a>(&'a Context);

fn ns(rs: &ReplicaSet) -> &str {
    rs.metadata.namespace.as_deref().unwrap_or_default()
}

impl Writes for ApiWrites<'_> {
    async fn create_rs(&self, rs: &ReplicaSet) -> Result<ReplicaSet, kube::Error> {
        let api: Api<ReplicaSet> = Api::namespaced(self.0.client.clone(), ns(rs));
        api.create(&PostParams::default(), rs).await
    }

    async fn update_rs(&self, rs: &ReplicaSet) -> Result<ReplicaSet, kube::Error> {
        let api: Api<ReplicaSet> = Api::namespaced(self.0.client.clone(), ns(rs));
        let name = rs.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &PostParams::default(), rs).await
    }

    async fn patch_rs(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        let api: Api<ReplicaSet> = Api::namespaced(self.0.client.clone(), namespace);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn delete_rs(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api: Api<ReplicaSet> = Api::namespaced(self.0.client.clone(), namespace);
        api.delete(name, &DeleteParams::default()).await.map(|_| ())
    }

    async fn update_status(&self, d: &Deployment) -> Result<Deployment, kube::Error> {
        let namespace = d.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(self.0.client.clone(), namespace);
        let name = d.metadata.name.clone().unwrap_or_default();
        api.replace_status(&name, &PostParams::default(), d).await
    }

    async fn update(&self, d: &Deployment) -> Result<Deployment, kube::Error> {
        let namespace = d.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(self.0.client.clone(), namespace);
        let name = d.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &PostParams::default(), d).await
    }

    async fn get_deployment(&self, namespace: &str, name: &str) -> Result<Deployment, kube::Error> {
        let api: Api<Deployment> = Api::namespaced(self.0.client.clone(), namespace);
        api.get(name).await
    }

    fn cached_rs(&self, namespace: &str, name: &str) -> Option<ReplicaSet> {
        self.0
            .replica_sets
            .get(&ObjectRef::new(name).within(namespace))
            .map(|rs| (*rs).clone())
    }

    fn event(&self, d: &Deployment, kind: EventType, reason: &str, message: String) {
        self.0
            .recorder
            .record(d.object_ref(&()), kind, reason, message);
    }
}

/// The deployment's selector, unless it is invalid.
pub(crate) fn selector_of(d: &Deployment) -> Result<Selector, String> {
    let selector = d
        .spec
        .as_ref()
        .map(|s| s.selector.clone())
        .unwrap_or_default();
    Selector::try_from(selector).map_err(|e| e.to_string())
}

/// Whether the selector is empty (selects everything); a deployment with one is refused.
pub(crate) fn selects_all(d: &Deployment) -> bool {
    let Some(spec) = d.spec.as_ref() else {
        return true;
    };
    spec.selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && spec
            .selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

fn labels(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> &BTreeMap<String, String> {
    crate::pods::labels_of(meta)
}

/// The current time in whole seconds, as the API writes condition timestamps.
fn now() -> Timestamp {
    capstan_client::events::now().0
}

/// Syncs one deployment (upstream's `syncDeployment`).
pub async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let replica_sets: Vec<ReplicaSet> = ctx
        .replica_sets
        .state()
        .into_iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .map(|rs| (*rs).clone())
        .collect();
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .collect();
    let writes = ApiWrites(&ctx);
    let span = tracing::debug_span!("deployment", %namespace, name = ?d.metadata.name);
    let requeue = sync::sync_deployment(&writes, (*d).clone(), replica_sets, pods, now())
        .instrument(span)
        .await?;
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The deployment a controller reference names, if it is in the cache with that UID.
fn resolve_controller_ref(
    deployments: &Store<Deployment>,
    namespace: Option<&str>,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Option<Arc<Deployment>> {
    if owner.kind != "Deployment" {
        return None;
    }
    let d = deployments.get(&ObjectRef::new(&owner.name).within(namespace.unwrap_or_default()))?;
    (d.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(d)
}

/// Deployments whose (non-empty) selector matches an orphan replica set's labels.
fn deployments_for_replica_set(
    deployments: &Store<Deployment>,
    rs: &ReplicaSet,
) -> Vec<Arc<Deployment>> {
    let rs_labels = labels(&rs.metadata);
    if rs_labels.is_empty() {
        return Vec::new();
    }
    deployments
        .state()
        .into_iter()
        .filter(|d| d.metadata.namespace == rs.metadata.namespace)
        .filter(|d| !selects_all(d))
        .filter(|d| selector_of(d).is_ok_and(|s| s.matches(rs_labels)))
        .collect()
}

fn enqueue(queue: &Queue<Deployment>, d: &Deployment) {
    queue.add(ObjectRef::from_obj(d));
}

/// Upstream's replica set handlers: the deployments to wake for a replica set change. A
/// controlled replica set wakes its deployment (and the previous controller when that
/// changed); an orphan wakes every deployment that may adopt it.
fn deployments_for_rs_change(
    deployments: &Store<Deployment>,
    change: &Change<'_, ReplicaSet>,
) -> Vec<Arc<Deployment>> {
    let resolve = |rs: &ReplicaSet| {
        util::controller_of(&rs.metadata)
            .and_then(|r| resolve_controller_ref(deployments, rs.metadata.namespace.as_deref(), r))
    };
    match change {
        Change::Applied { old: None, new } => {
            let rs = *new;
            if rs.metadata.deletion_timestamp.is_some() {
                return deployments_for_rs_change(deployments, &Change::Deleted(rs));
            }
            if util::controller_of(&rs.metadata).is_some() {
                return resolve(rs).into_iter().collect();
            }
            deployments_for_replica_set(deployments, rs)
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            let (old, cur) = (&**old, *new);
            if old.metadata.resource_version == cur.metadata.resource_version {
                return Vec::new();
            }
            let mut wake = Vec::new();
            let ref_changed =
                util::controller_of(&cur.metadata) != util::controller_of(&old.metadata);
            if ref_changed {
                wake.extend(resolve(old));
            }
            if util::controller_of(&cur.metadata).is_some() {
                wake.extend(resolve(cur));
                return wake;
            }
            if ref_changed || old.metadata.labels != cur.metadata.labels {
                wake.extend(deployments_for_replica_set(deployments, cur));
            }
            wake
        }
        Change::Deleted(rs) => resolve(rs).into_iter().collect(),
    }
}

/// Upstream's pod deletion handler: a `Recreate` deployment waits for its old pods to be gone,
/// so it is woken when it has none left. `pods` no longer holds the deleted pod.
fn deployment_for_pod_deletion(
    deployments: &Store<Deployment>,
    replica_sets: &Store<ReplicaSet>,
    pods: &Store<Pod>,
    pod: &Pod,
) -> Option<Arc<Deployment>> {
    let owner = util::controller_of(&pod.metadata)?;
    if owner.kind != "ReplicaSet" {
        return None;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let rs = replica_sets.get(&ObjectRef::new(&owner.name).within(namespace))?;
    if rs.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return None;
    }
    let d = util::controller_of(&rs.metadata)
        .and_then(|r| resolve_controller_ref(deployments, rs.metadata.namespace.as_deref(), r))?;
    if util::strategy_type(&d) != util::RECREATE {
        return None;
    }
    let selector = selector_of(&d).ok()?;
    // The deployment's replica sets: selected by it and controlled by it.
    let owned: Vec<String> = replica_sets
        .state()
        .into_iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(namespace))
        .filter(|rs| selector.matches(labels(&rs.metadata)))
        .filter(|rs| util::controller_of(&rs.metadata).map(|r| &r.uid) == d.metadata.uid.as_ref())
        .filter_map(|rs| rs.metadata.uid.clone())
        .collect();
    let remaining = pods
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter(|p| selector.matches(labels(&p.metadata)))
        .filter(|p| util::controller_of(&p.metadata).is_some_and(|r| owned.contains(&r.uid)))
        .count();
    (remaining == 0).then_some(d)
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let deployments = setup.watch::<Deployment>();
    let replica_sets = setup.watch::<ReplicaSet>();
    let pods = setup.watch::<Pod>();
    let (queue, rx) = Queue::<Deployment>::new();

    {
        let queue = queue.clone();
        deployments.on_change(move |change| enqueue(&queue, change.object()));
    }
    {
        let queue = queue.clone();
        let store = deployments.store();
        replica_sets.on_change(move |change| {
            for d in deployments_for_rs_change(&store, change) {
                enqueue(&queue, &d);
            }
        });
    }
    {
        let (d_store, rs_store, pod_store) =
            (deployments.store(), replica_sets.store(), pods.store());
        pods.on_change(move |change| {
            if let Change::Deleted(pod) = change
                && let Some(d) = deployment_for_pod_deletion(&d_store, &rs_store, &pod_store, pod)
            {
                enqueue(&queue, &d);
            }
        });
    }

    let ctx = Arc::new(Context {
        client: setup.client(),
        replica_sets: replica_sets.store(),
        pods: pods.store(),
        recorder: setup.recorder("deployment-controller"),
    });
    setup.run("deployment", &deployments, rx, ctx, reconcile)
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
