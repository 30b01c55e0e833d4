//! The ReplicaSet and ReplicationController controllers (upstream's `pkg/controller/replicaset`,
//! which serves ReplicationControllers through the same code): keep `replicas` active pods
//! matching the selector, adopting matching orphans and releasing pods that stop matching;
//! create and delete in slow-start batches under expectations; delete the pods that matter
//! least first; and keep the status current.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::expectations::Expectations;
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};
use capstan_client::events::EventRecorder;
use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The most pods created or deleted in one sync (upstream's `BurstReplicas`).
const BURST_REPLICAS: usize = 500;

/// What the controller needs of a ReplicaSet or a ReplicationController.
#[derive(Debug, Clone)]
pub struct Spec {
    replicas: i32,
    selector: Option<Selector>,
    template: Option<PodTemplateSpec>,
    min_ready_seconds: i32,
    status: ReplicaSetStatus,
}

/// A kind this controller serves.
pub trait Replicated:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The controller's name (`--disable-controllers` and logs).
    const CONTROLLER: &'static str;
    /// The component its events are reported as.
    const COMPONENT: &'static str;
    /// The owner reference's apiVersion.
    const API_VERSION: &'static str;
    /// The spec and status as a ReplicaSet's.
    fn spec(&self) -> Spec;
}

impl Replicated for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset";
    const COMPONENT: &'static str = "replicaset-controller";
    const API_VERSION: &'static str = "apps/v1";
    fn spec(&self) -> Spec {
        let spec = self.spec.clone().unwrap_or_default();
        Spec {
            replicas: spec.replicas.unwrap_or(1),
            selector: Selector::try_from(spec.selector).ok(),
            template: spec.template,
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            status: self.status.clone().unwrap_or_default(),
        }
    }
}

impl Replicated for ReplicationController {
    const CONTROLLER: &'static str = "replicationcontroller";
    const COMPONENT: &'static str = "replication-controller";
    const API_VERSION: &'static str = "v1";
    fn spec(&self) -> Spec {
        let spec = self.spec.clone().unwrap_or_default();
        let selector = LabelSelector {
            match_labels: spec.selector.filter(|s| !s.is_empty()),
            match_expressions: None,
        };
        // The two statuses have the same fields and JSON.
        let status = self
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        Spec {
            replicas: spec.replicas.unwrap_or(1),
            // An RC without a selector selects nothing (the API defaults it from the labels).
            selector: selector
                .match_labels
                .is_some()
                .then(|| Selector::try_from(selector).ok())
                .flatten(),
            template: spec.template,
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            status,
        }
    }
}

/// The controller's shared state.
pub struct Context<K: Replicated> {
    client: Client,
    owners: Store<K>,
    pods: Store<Pod>,
    expectations: Arc<Expectations>,
    recorder: EventRecorder,
}

impl<K: Replicated> Debug for Context<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("controller", &K::CONTROLLER)
            .finish()
    }
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start<K: Replicated>(mut setup: Setup<'_>) -> Task {
    let owners = setup.watch::<K>();
    let pod_informer = setup.watch::<Pod>();
    let (queue, rx) = Queue::<K>::new();
    let expectations = Arc::new(Expectations::default());
    {
        let queue = queue.clone();
        let expectations = expectations.clone();
        owners.on_change(move |change| {
            let meta = change.object().meta();
            match change {
                Change::Applied { .. } => queue.add(ObjectRef::from_obj(change.object())),
                Change::Deleted(_) => expectations.forget(&pods::key(meta)),
            }
        });
    }
    {
        let store = owners.store();
        let expectations = expectations.clone();
        pod_informer
            .on_change(move |change| on_pod_change::<K>(change, &store, &queue, &expectations));
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        owners: owners.store(),
        pods: pod_informer.store(),
        expectations,
        recorder: setup.recorder(K::COMPONENT),
    });
    setup.run(K::CONTROLLER, &owners, rx, ctx, reconcile::<K>)
}

/// The owner of kind `K` that `pod`'s controller reference names, if it is in the cache.
fn owner_of<K: Replicated>(pod: &Pod, store: &Store<K>) -> Option<Arc<K>> {
    let reference = pods::controller_of(&pod.metadata)?;
    if reference.kind != K::kind(&()) || group(&reference.api_version) != K::group(&()) {
        return None;
    }
    let namespace = pod.metadata.namespace.as_deref()?;
    let owner = store.get(&ObjectRef::new(&reference.name).within(namespace))?;
    (owner.meta().uid.as_deref() == Some(reference.uid.as_str())).then_some(owner)
}

fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The owners of kind `K` whose selector matches the orphan `pod`.
fn matching_owners<K: Replicated>(pod: &Pod, store: &Store<K>) -> Vec<Arc<K>> {
    let labels = pods::labels_of(&pod.metadata);
    let namespace = pod.metadata.namespace.as_deref();
    store.state_filter(|owner| {
        owner.meta().namespace.as_deref() == namespace
            && owner.spec().selector.is_some_and(|s| s.matches(labels))
    })
}

/// Upstream's pod event handlers: creations and deletions observed for expectations, the
/// owner (old and new) queued, orphans offered to every owner that selects them.
fn on_pod_change<K: Replicated>(
    change: &Change<'_, Pod>,
    store: &Store<K>,
    queue: &Queue<K>,
    expectations: &Expectations,
) {
    let deleted = |pod: &Pod| {
        if let Some(owner) = owner_of(pod, store) {
            expectations.deletion_observed(&pods::key(owner.meta()), &pods::key(&pod.metadata));
            queue.add(ObjectRef::from_obj(&*owner));
        }
    };
    let orphan = |pod: &Pod| {
        for owner in matching_owners(pod, store) {
            queue.add(ObjectRef::from_obj(&*owner));
        }
    };
    match change {
        Change::Deleted(pod) => deleted(pod),
        Change::Applied { old: None, new } => {
            if new.metadata.deletion_timestamp.is_some() {
                return deleted(new);
            }
            match owner_of(new, store) {
                Some(owner) => {
                    expectations.creation_observed(&pods::key(owner.meta()));
                    queue.add(ObjectRef::from_obj(&*owner));
                }
                None if pods::controller_of(&new.metadata).is_none() => orphan(new),
                None => {}
            }
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            let labels_changed = old.metadata.labels != new.metadata.labels;
            if new.metadata.deletion_timestamp.is_some() {
                deleted(new);
                if labels_changed {
                    deleted(old);
                }
                return;
            }
            let old_ref = pods::controller_of(&old.metadata);
            let new_ref = pods::controller_of(&new.metadata);
            if old_ref != new_ref
                && let Some(owner) = owner_of(old, store)
            {
                queue.add(ObjectRef::from_obj(&*owner));
            }
            match owner_of(new, store) {
                Some(owner) => queue.add(ObjectRef::from_obj(&*owner)),
                None if new_ref.is_none() && (labels_changed || old_ref.is_some()) => orphan(new),
                None => {}
            }
        }
    }
}

/// The new status (upstream's `calculateStatus`).
fn calculate_status(
    spec: &Spec,
    generation: Option<i64>,
    owned: &[&Pod],
    failure: Option<(&str, String)>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let mut status = spec.status.clone();
    status.replicas = owned.len() as i32;
    status.fully_labeled_replicas = Some(
        owned
            .iter()
            .filter(|p| pods::has_labels(p.metadata.labels.as_ref(), template_labels))
            .count() as i32,
    );
    status.ready_replicas = Some(owned.iter().filter(|p| pods::is_ready(p)).count() as i32);
    status.available_replicas = Some(
        owned
            .iter()
            .filter(|p| pods::is_available(p, spec.min_ready_seconds, now))
            .count() as i32,
    );
    if let Some(generation) = generation {
        status.observed_generation = Some(generation);
    }
    let mut conditions = status.conditions.take().unwrap_or_default();
    match failure {
        Some((reason, message)) => {
            if !conditions.iter().any(|c| c.type_ == "ReplicaFailure") {
                conditions.push(ReplicaSetCondition {
                    type_: "ReplicaFailure".into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some(message),
                    last_transition_time: Some(Time(
                        Timestamp::from_second(now.as_second()).unwrap_or(now),
                    )),
                });
            }
        }
        None => conditions.retain(|c| c.type_ != "ReplicaFailure"),
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    // The API omits zero counts; compare like with like.
    pods::zero_counts_absent([
        &mut status.fully_labeled_replicas,
        &mut status.ready_replicas,
        &mut status.available_replicas,
    ]);
    status
}

/// When the earliest ready-but-not-yet-available pod becomes available.
fn next_available(owned: &[&Pod], min_ready_seconds: i32, now: Timestamp) -> Option<Duration> {
    if min_ready_seconds <= 0 {
        return None;
    }
    owned
        .iter()
        .filter(|p| !pods::is_available(p, min_ready_seconds, now))
        .filter_map(|p| pods::ready_since(p).flatten())
        .map(|since| since.as_second() + i64::from(min_ready_seconds) + 1 - now.as_second())
        .min()
        .map(|secs| Duration::from_secs(secs.max(1) as u64))
}

/// One sync of a ReplicaSet or ReplicationController (upstream's `syncReplicaSet`).
pub async fn reconcile<K: Replicated>(
    owner: Arc<K>,
    ctx: Arc<Context<K>>,
) -> Result<Action, Error> {
    let meta = owner.meta();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let key = pods::key(meta);
    let spec = owner.spec();
    let needs_sync = ctx.expectations.satisfied(&key);
    let candidates = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let candidates: Vec<&Pod> = candidates.iter().map(|p| &**p).collect();
    let active: Vec<&Pod> = candidates
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let claims = match &spec.selector {
        Some(selector) => pods::claim(meta, selector, &active),
        // An invalid selector selects nothing.
        None => pods::Claims {
            owned: Vec::new(),
            adopt: Vec::new(),
            release: Vec::new(),
        },
    };
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let reference = pods::controller_ref(K::API_VERSION, &K::kind(&()), meta);
    let owned = pods::settle_claims(&ctx.client, &*owner, &reference, claims, &pod_api).await?;

    let mut failure = None;
    if needs_sync && meta.deletion_timestamp.is_none() {
        let diff = owned.len() as i64 - i64::from(spec.replicas);
        if let Err(error) = manage_replicas(&ctx, &owner, &spec, &owned, diff).await {
            let reason = if diff < 0 {
                "FailedCreate"
            } else {
                "FailedDelete"
            };
            failure = Some((reason, error.message()));
        }
    }

    let now = pods::now();
    let status = calculate_status(&spec, meta.generation, &owned, failure.clone(), now);
    if status != spec.status {
        let mut object =
            serde_json::to_value(&*owner).map_err(|e| Error::Invalid(e.to_string()))?;
        object["status"] =
            serde_json::to_value(&status).map_err(|e| Error::Invalid(e.to_string()))?;
        let object: K =
            serde_json::from_value(object).map_err(|e| Error::Invalid(e.to_string()))?;
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
        if runtime::replace_status_unless_gone(&api, &name, &object)
            .await?
            .is_none()
        {
            return Ok(Action::await_change());
        }
    }
    if let Some((_, message)) = failure {
        return Err(Error::Invalid(message));
    }
    Ok(match next_available(&owned, spec.min_ready_seconds, now) {
        Some(delay) => Action::requeue(delay),
        None => Action::await_change(),
    })
}

/// Creates or deletes pods to close `diff` (upstream's `manageReplicas`).
async fn manage_replicas<K: Replicated>(
    ctx: &Context<K>,
    owner: &K,
    spec: &Spec,
    owned: &[&Pod],
    diff: i64,
) -> Result<(), Error> {
    let meta = owner.meta();
    let key = pods::key(meta);
    let namespace = meta.namespace.clone().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    if diff < 0 {
        let wanted = (diff.unsigned_abs() as usize).min(BURST_REPLICAS);
        let Some(template) = &spec.template else {
            return Err(Error::Invalid("the pod template is missing".into()));
        };
        ctx.expectations.expect_creations(&key, wanted);
        let controller = pods::controller_ref(K::API_VERSION, &K::kind(&()), meta);
        let pod = pods::pod_from_template(
            template,
            &namespace,
            meta.name.as_deref().unwrap_or_default(),
            controller,
        );
        let owner_ref = pods::object_reference(owner);
        let (created, result) = pods::slow_start(wanted, |_| async {
            pods::create_pod(&pod_api, &pod, &ctx.recorder, &owner_ref)
                .await
                .map(|_| ())
        })
        .await;
        // Creations that failed or were never tried will not be observed.
        for _ in created..wanted {
            ctx.expectations.creation_observed(&key);
        }
        return result.map_err(Error::from);
    }
    if diff > 0 {
        let count = (diff as usize).min(BURST_REPLICAS);
        let related = related_pods(ctx, owner, owned);
        let related: Vec<&Pod> = related.iter().map(|p| &**p).collect();
        let victims = pods::pods_to_delete(owned, &related, count, pods::now());
        ctx.expectations
            .expect_deletions(&key, victims.iter().map(|p| pods::key(&p.metadata)));
        let owner_ref = pods::object_reference(owner);
        let results = join_all(victims.iter().map(|pod| {
            let (pod_api, owner_ref, key) = (&pod_api, &owner_ref, &key);
            async move {
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let result = pods::delete_pod(pod_api, name, &ctx.recorder, owner_ref).await;
                if let Err(error) = result {
                    ctx.expectations
                        .deletion_observed(key, &pods::key(&pod.metadata));
                    if !runtime::is_not_found(&error) {
                        return Err(error);
                    }
                }
                Ok(())
            }
        }))
        .await;
        return results
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(|_| ())
            .map_err(Error::from);
    }
    Ok(())
}

/// The active pods of the owner and of its siblings under the same controller (upstream's
/// `getIndirectlyRelatedPods`), for ranking pods by how crowded their node is.
fn related_pods<K: Replicated>(ctx: &Context<K>, owner: &K, owned: &[&Pod]) -> Vec<Arc<Pod>> {
    let meta = owner.meta();
    let Some(parent) = pods::controller_of(meta) else {
        return owned.iter().map(|p| Arc::new((*p).clone())).collect();
    };
    let siblings: BTreeMap<String, ()> = ctx
        .owners
        .state_filter(|o| {
            o.meta().namespace == meta.namespace
                && pods::controller_of(o.meta()).is_some_and(|r| r.uid == parent.uid)
        })
        .iter()
        .filter_map(|o| o.meta().uid.clone())
        .map(|uid| (uid, ()))
        .collect();
    ctx.pods.state_filter(|p| {
        p.metadata.namespace == meta.namespace
            && pods::is_active(p)
            && pods::controller_of(&p.metadata).is_some_and(|r| siblings.contains_key(&r.uid))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("bad pod: {e}"))
    }

    #[test]
    fn status_counts_and_failure_condition() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap_or_default();
        let spec = ReplicaSet {
            spec: Some(
                serde_json::from_value(json!({
                    "replicas": 3, "minReadySeconds": 10,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}},
                }))
                .unwrap_or_else(|e| panic!("{e}")),
            ),
            ..ReplicaSet::default()
        }
        .spec();
        let ready_at = |name: &str, at: &str, labels: serde_json::Value| {
            pod(json!({"metadata": {"name": name, "labels": labels},
                "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": at}]}}))
        };
        let a = ready_at(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"app": "web", "tier": "front"}),
        );
        let b = ready_at("b", "2026-01-01T00:00:55Z", json!({"app": "web"}));
        let c = pod(json!({"metadata": {"name": "c", "labels": {"app": "web", "tier": "front"}}}));
        let owned = [&a, &b, &c];
        let status = calculate_status(&spec, Some(4), &owned, None, now);
        assert_eq!(status.replicas, 3);
        assert_eq!(status.fully_labeled_replicas, Some(2));
        assert_eq!(status.ready_replicas, Some(2));
        assert_eq!(status.available_replicas, Some(1));
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(status.conditions, None);
        // b becomes available 11 s after it turned ready: in 6 s.
        assert_eq!(
            next_available(&owned, 10, now),
            Some(Duration::from_secs(6))
        );

        let failed = calculate_status(
            &spec,
            Some(4),
            &owned,
            Some(("FailedCreate", "quota".into())),
            now,
        );
        let condition = &failed.conditions.as_deref().unwrap_or_default()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        let mut again = spec.clone();
        again.status = failed;
        assert_eq!(
            calculate_status(&again, Some(4), &owned, None, now).conditions,
            None,
            "cleared once it works"
        );
    }

    #[test]
    fn a_replication_controller_reads_as_a_replica_set() {
        let rc: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "rc", "namespace": "ns"},
            "spec": {"replicas": 2, "selector": {"app": "web"},
                     "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 1, "readyReplicas": 1},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = rc.spec();
        assert_eq!(spec.replicas, 2);
        assert_eq!(spec.status.ready_replicas, Some(1));
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        assert!(spec.selector.is_some_and(|s| s.matches(&labels)));
    }
}
