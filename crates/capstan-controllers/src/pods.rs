//! What upstream's `controller_utils` and pod helpers decide about pods, shared by the
//! controllers that own pods: activity, readiness and availability, controller references,
//! pods made from a template, the order in which surplus pods are deleted, the owners an
//! orphan or owned object belongs to, and the claim (adopt/release), slow-start and event
//! helpers every owner of pods or revisions uses.

use std::collections::BTreeMap;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::runtime::{self, Error};

/// The controller reference among an object's owners.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// The object's labels, without copying them (an empty map when it has none).
pub fn labels_of(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&NONE)
}

/// The owners of kind `K` an object (a pod or a revision) belongs to, as upstream's DaemonSet and
/// StatefulSet controllers find them: the one its controller reference names, if cached with
/// that uid; none if a controller of another kind owns it; for an orphan, those of its
/// namespace whose `selector` matches its labels.
pub fn owners_of<K>(
    meta: &ObjectMeta,
    store: &Store<K>,
    selector: impl Fn(&K) -> Option<Selector>,
) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    match controller_of(meta) {
        Some(r)
            if r.kind == K::kind(&())
                && r.api_version.split_once('/').map(|(group, _)| group)
                    == Some(&*K::group(&())) =>
        {
            store
                .get(&ObjectRef::new(&r.name).within(namespace))
                .filter(|owner| owner.meta().uid.as_deref() == Some(r.uid.as_str()))
                .into_iter()
                .collect()
        }
        Some(_) => Vec::new(),
        None => {
            let labels = labels_of(meta);
            store.state_filter(|owner| {
                owner.meta().namespace.as_deref() == Some(namespace)
                    && selector(owner).is_some_and(|s| s.matches(labels))
            })
        }
    }
}

/// `namespace/name`, upstream's cache key.
pub fn key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// A pod that has not terminated and is not being deleted (upstream's `IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// When the pod became ready, if it is ready.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (condition.status == "True").then(|| condition.last_transition_time.as_ref().map(|t| t.0))
}

/// The pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (upstream's `IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since.as_second() + i64::from(min_ready_seconds) < now.as_second(),
    }
}

/// Zero status counts made absent, as the API omits them (so that a computed status compares
/// equal to the stored one).
pub fn zero_counts_absent<const N: usize>(counts: [&mut Option<i32>; N]) {
    for count in counts {
        if *count == Some(0) {
            *count = None;
        }
    }
}

/// The current time.
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// A controller reference to the owner `meta` of kind `kind` in `api_version`.
pub fn controller_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod for `owner` made from `template` (upstream's `GetPodFromTemplate`): the template's
/// labels, annotations, finalizers and spec, named after the owner's `prefix`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    prefix: &str,
    owner: OwnerReference,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            namespace: Some(namespace.to_owned()),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Whether `labels` hold every label of `wanted` (upstream's fully-labeled check).
pub fn has_labels(
    labels: Option<&BTreeMap<String, String>>,
    wanted: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(wanted) = wanted else { return true };
    wanted
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

fn creation(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t: &Time| t.0)
}

/// Upstream's logarithmic age bucket of `t` at `now` (the power of two of its age in
/// nanoseconds; -1 for a time not in the past).
fn log_rank(t: Timestamp, now: Timestamp) -> i64 {
    let age = now.as_nanosecond() - t.as_nanosecond();
    if age > 0 {
        (age as f64).log2() as i64
    } else {
        -1
    }
}

/// How a time ranks for deletion: zero (unknown) first, then younger buckets, and within a
/// bucket by UID (upstream's randomisation under LogarithmicScaleDown).
fn time_key(t: Option<Timestamp>, uid: &str, now: Timestamp) -> (u8, i64, &str) {
    match t {
        None => (0, 0, ""),
        Some(t) => (1, log_rank(t, now), uid),
    }
}

/// The rank of a pod in deletion order, smallest first: upstream's `ActivePodsWithRanks.Less`
/// with PodDeletionCost and LogarithmicScaleDown (both on in 1.33), as a sort key. `rank` is
/// the number of related active pods on the pod's node. Upstream's pairwise rule is not a total
/// order (two pods with the same ready time fall through to later criteria, two in the same
/// age bucket are ordered by UID); as a key, pods in one bucket are ordered by UID even when
/// their times are equal, which keeps the order total (Rust's sort requires it).
pub fn deletion_key(pod: &Pod, rank: usize, now: Timestamp) -> impl Ord + '_ {
    let assigned = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let ready = ready_since(pod);
    (
        assigned,
        phase_ordinal(pod),
        ready.is_some(),
        deletion_cost(pod),
        std::cmp::Reverse(rank),
        ready.map(|since| time_key(since, uid, now)),
        std::cmp::Reverse(max_restarts(pod)),
        time_key(creation(pod), uid, now),
    )
}

/// Whether `a` should be deleted before `b` (see [`deletion_key`]).
pub fn delete_first(a: (&Pod, usize), b: (&Pod, usize), now: Timestamp) -> bool {
    deletion_key(a.0, a.1, now) < deletion_key(b.0, b.1, now)
}

/// The `count` pods of `pods` to delete first, ranked by how many of `related` (active pods of
/// the same owner and its siblings) share their node.
pub fn pods_to_delete<'a>(
    pods: &[&'a Pod],
    related: &[&Pod],
    count: usize,
    now: Timestamp,
) -> Vec<&'a Pod> {
    if count >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in related.iter().filter(|p| is_active(p)) {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        *on_node.entry(node).or_default() += 1;
    }
    let mut ranked: Vec<(&Pod, usize)> = pods
        .iter()
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            (*p, on_node.get(&node).copied().unwrap_or(0))
        })
        .collect();
    ranked.sort_by(|x, y| deletion_key(x.0, x.1, now).cmp(&deletion_key(y.0, y.1, now)));
    ranked.into_iter().take(count).map(|(p, _)| p).collect()
}

/// What an owner keeps, adopts and releases among the objects of its namespace (upstream's
/// `ControllerRefManager.ClaimObject`, for pods and ControllerRevisions alike).
#[derive(Debug)]
pub struct Claims<'a, T> {
    /// Owned and selected.
    pub owned: Vec<&'a T>,
    /// Orphans the selector matches, to adopt.
    pub adopt: Vec<&'a T>,
    /// Owned but no longer selected, to release.
    pub release: Vec<&'a T>,
}

/// Upstream's claim rules: an object controlled by someone else is ignored; an owned one is
/// kept while selected and released otherwise; a selected orphan that is not being deleted is
/// adopted. An owner being deleted neither adopts nor releases.
pub fn claim<'a, T: Resource>(
    owner: &ObjectMeta,
    selector: &Selector,
    candidates: &[&'a T],
) -> Claims<'a, T> {
    let mut claims = Claims {
        owned: Vec::new(),
        adopt: Vec::new(),
        release: Vec::new(),
    };
    let uid = owner.uid.as_deref().unwrap_or_default();
    let deleting = owner.deletion_timestamp.is_some();
    for object in candidates.iter().copied() {
        let meta = object.meta();
        let matches = selector.matches(labels_of(meta));
        match controller_of(meta) {
            Some(r) if r.uid != uid => {}
            Some(_) if matches => claims.owned.push(object),
            Some(_) if deleting => {}
            Some(_) => claims.release.push(object),
            None if matches && !deleting && meta.deletion_timestamp.is_none() => {
                claims.adopt.push(object)
            }
            None => {}
        }
    }
    claims
}

/// The strategic merge patch that makes `reference` the controller of the object `uid`.
pub fn adopt_patch(reference: &OwnerReference, uid: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"ownerReferences": [reference], "uid": uid}})
}

/// The strategic merge patch that drops the owner `owner_uid` from the object `uid`.
pub fn release_patch(owner_uid: Option<&str>, uid: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": uid}})
}

/// Applies a strategic merge patch (an ownership patch, a finalizer's removal); `false` when
/// the object is gone or was replaced.
pub async fn patch_ownership<K>(
    api: &Api<K>,
    name: &str,
    patch: serde_json::Value,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if runtime::is_not_found(&error) => Ok(false),
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 409 => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Carries out `claims` for `owner` through `api`, as upstream's `ClaimObject` does: the orphans
/// are adopted (with `reference` as their controller) if the owner, read afresh, still may
/// adopt, and the strays are released. Returns the owned objects, then the adopted ones.
pub async fn settle_claims<'a, O, K>(
    client: &Client,
    owner: &O,
    reference: &OwnerReference,
    claims: Claims<'a, K>,
    api: &Api<K>,
) -> Result<Vec<&'a K>, Error>
where
    O: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut owned = claims.owned;
    if !claims.adopt.is_empty() && can_adopt(client, owner).await? {
        for object in claims.adopt {
            let meta = object.meta();
            let patch = adopt_patch(reference, meta.uid.as_deref());
            if patch_ownership(api, meta.name.as_deref().unwrap_or_default(), patch).await? {
                owned.push(object);
            }
        }
    }
    for object in claims.release {
        let meta = object.meta();
        let patch = release_patch(owner.meta().uid.as_deref(), meta.uid.as_deref());
        patch_ownership(api, meta.name.as_deref().unwrap_or_default(), patch).await?;
    }
    Ok(owned)
}

/// Upstream's `RecheckDeletionTimestamp`: before adopting, the owner read afresh must still be
/// the same object and not being deleted.
pub async fn can_adopt<K>(client: &Client, owner: &K) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let meta = owner.meta();
    let api: Api<K> = Api::namespaced(
        client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
    );
    match api.get(meta.name.as_deref().unwrap_or_default()).await {
        Ok(fresh) => Ok(fresh.meta().uid == meta.uid && fresh.meta().deletion_timestamp.is_none()),
        Err(error) if runtime::is_not_found(&error) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

pub use capstan_client::events::object_reference;

pub use crate::runtime::error_message;

/// Whether the API refused a write because the namespace is being deleted (controllers stay
/// quiet about it, as upstream's do).
pub fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated"))
}

/// Creates `pod` for `owner` as upstream's pod control does: a `SuccessfulCreate` event once it
/// is made, a `FailedCreate` warning when it is refused (unless its namespace is going).
pub async fn create_pod(
    api: &Api<Pod>,
    pod: &Pod,
    recorder: &EventRecorder,
    owner: &ObjectReference,
) -> Result<Pod, kube::Error> {
    match api.create(&PostParams::default(), pod).await {
        Ok(made) => {
            let name = made.metadata.name.as_deref().unwrap_or_default();
            let message = format!("Created pod: {name}");
            recorder.record(
                owner.clone(),
                EventType::Normal,
                "SuccessfulCreate",
                message,
            );
            Ok(made)
        }
        Err(error) => {
            if !namespace_terminating(&error) {
                let message = format!("Error creating: {}", error_message(&error));
                recorder.record(owner.clone(), EventType::Warning, "FailedCreate", message);
            }
            Err(error)
        }
    }
}

/// Deletes the pod `name` of `owner` as upstream's pod control does: a `SuccessfulDelete`
/// event, or a `FailedDelete` warning unless the pod was already gone (a 404 is still returned,
/// for the caller's expectations).
pub async fn delete_pod(
    api: &Api<Pod>,
    name: &str,
    recorder: &EventRecorder,
    owner: &ObjectReference,
) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            let message = format!("Deleted pod: {name}");
            recorder.record(
                owner.clone(),
                EventType::Normal,
                "SuccessfulDelete",
                message,
            );
            Ok(())
        }
        Err(error) => {
            if !runtime::is_not_found(&error) {
                let message = format!("Error deleting: {}", error_message(&error));
                recorder.record(owner.clone(), EventType::Warning, "FailedDelete", message);
            }
            Err(error)
        }
    }
}

/// Runs `total` calls of `call` in batches of 1, 2, 4, ... (upstream's `slowStartBatch`),
/// stopping after the first batch with a failure; returns how many succeeded and the first
/// error.
pub async fn slow_start<F, Fut, E>(total: usize, call: F) -> (usize, Result<(), E>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut done = 0;
    let mut batch = 1;
    while done < total {
        let size = batch.min(total - done);
        let results = futures::future::join_all((0..size).map(|i| call(done + i))).await;
        let succeeded = results.iter().filter(|r| r.is_ok()).count();
        let first_error = results.into_iter().find_map(Result::err);
        done += size;
        if let Some(error) = first_error {
            return (done - size + succeeded, Err(error));
        }
        batch *= 2;
    }
    (done, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("bad pod: {e}"))
    }

    fn ready(name: &str, node: &str, since: &str) -> Pod {
        pod(
            json!({"metadata": {"name": name, "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "spec": {"nodeName": node, "containers": []},
                   "status": {"phase": "Running", "conditions": [
                       {"type": "Ready", "status": "True", "lastTransitionTime": since}]}}),
        )
    }

    #[test]
    fn activity_readiness_availability() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap_or_default();
        let p = ready("a", "n1", "2026-01-01T00:00:30Z");
        assert!(is_active(&p) && is_ready(&p));
        assert!(is_available(&p, 0, now));
        assert!(is_available(&p, 29, now));
        assert!(
            !is_available(&p, 30, now),
            "upstream needs strictly more than minReadySeconds"
        );
        let done = pod(json!({"metadata": {"name": "d"}, "status": {"phase": "Succeeded"}}));
        assert!(!is_active(&done) && !is_ready(&done));
        let deleting =
            pod(json!({"metadata": {"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(!is_active(&deleting));
    }

    #[test]
    fn surplus_pods_are_chosen_as_upstream() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap_or_default();
        let unscheduled = pod(json!({"metadata": {"name": "unscheduled", "uid": "u1"},
                                      "spec": {"containers": []}, "status": {"phase": "Pending"}}));
        let pending = pod(json!({"metadata": {"name": "pending", "uid": "u2"},
                                  "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Pending"}}));
        let not_ready = pod(json!({"metadata": {"name": "not-ready", "uid": "u3"},
                                    "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}));
        let old = ready("old", "n2", "2026-01-01T00:00:00Z");
        let young = ready("young", "n3", "2026-01-01T23:59:00Z");
        let mut cheap = ready("cheap", "n4", "2026-01-01T00:00:00Z");
        cheap.metadata.annotations = Some(
            [(
                "controller.kubernetes.io/pod-deletion-cost".to_owned(),
                "-5".to_owned(),
            )]
            .into(),
        );
        let all = [&old, &young, &cheap, &not_ready, &pending, &unscheduled];
        let names = |count| {
            pods_to_delete(&all, &all, count, now)
                .iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(6).len(), 6);
        assert_eq!(
            names(5),
            ["unscheduled", "pending", "not-ready", "cheap", "young"]
        );

        // Doubled-up pods go first; among equals the one ready for less time.
        let a = ready("a", "n1", "2026-01-01T00:00:00Z");
        let b = ready("b", "n1", "2026-01-01T00:00:00Z");
        let c = ready("c", "n2", "2026-01-01T00:00:00Z");
        let chosen = pods_to_delete(&[&c, &a, &b], &[&a, &b, &c], 1, now);
        let name = chosen[0].metadata.name.as_deref();
        assert!(
            matches!(name, Some("a" | "b")),
            "a pod on the doubled-up node: {name:?}"
        );
    }

    #[test]
    fn deletion_order_is_total_over_many_similar_pods() {
        // Pods ready in the same second, in the same and in neighbouring age buckets, with and
        // without restarts: upstream's pairwise rule is inconsistent on such a set (the sort
        // panicked on it with 38 pods of one Deployment); the key must order it.
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap_or_default();
        let mut pods = Vec::new();
        for i in 0..60u32 {
            let since = format!("2026-01-01T23:5{}:0{}Z", i % 3, i % 2);
            let mut p = ready(
                &format!("p{:02}", (i * 37) % 60),
                &format!("n{}", i % 7),
                &since,
            );
            if i % 5 == 0 {
                p.status
                    .as_mut()
                    .unwrap_or_else(|| unreachable!())
                    .container_statuses = Some(vec![
                    serde_json::from_value(
                        json!({"name": "c", "image": "i", "imageID": "", "ready": true,
                        "restartCount": i % 3}),
                    )
                    .unwrap_or_else(|e| panic!("{e}")),
                ]);
            }
            pods.push(p);
        }
        let all: Vec<&Pod> = pods.iter().collect();
        let chosen = pods_to_delete(&all, &all, 20, now);
        assert_eq!(chosen.len(), 20);
        // The chosen ones rank no later than any pod left.
        let rank_of = |p: &Pod| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            all.iter()
                .filter(|q| q.spec.as_ref().and_then(|s| s.node_name.clone()) == node)
                .count()
        };
        let kept: Vec<&&Pod> = all
            .iter()
            .filter(|p| !chosen.iter().any(|c| std::ptr::eq(*c, **p)))
            .collect();
        for c in &chosen {
            for k in &kept {
                assert!(!delete_first((k, rank_of(k)), (c, rank_of(c)), now));
            }
        }
    }

    #[test]
    fn fully_labeled() {
        let labels: BTreeMap<String, String> =
            [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        let wanted: BTreeMap<String, String> = [("a".into(), "1".into())].into();
        assert!(has_labels(Some(&labels), Some(&wanted)));
        assert!(!has_labels(Some(&wanted), Some(&labels)));
        assert!(has_labels(None, None));
    }

    #[test]
    fn claims_keep_adopt_release_and_ignore() {
        let selector: Selector = [("app", "web")].into_iter().collect();
        let owner = |uid: &str, deleting: bool| -> ObjectMeta {
            serde_json::from_value(json!({"name": "rs", "namespace": "ns", "uid": uid,
                "deletionTimestamp": deleting.then_some("2026-01-01T00:00:00Z")}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let owned = |name: &str, app: &str, uid: &str| {
            pod(json!({"metadata": {"name": name, "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                     "uid": uid, "controller": true}]}}))
        };
        let mine = owned("mine", "web", "u1");
        let strayed = owned("strayed", "db", "u1");
        let others = owned("others", "web", "u2");
        let orphan = pod(json!({"metadata": {"name": "orphan", "labels": {"app": "web"}}}));
        let stranger = pod(json!({"metadata": {"name": "stranger", "labels": {"app": "db"}}}));
        let all = [&mine, &strayed, &others, &orphan, &stranger];
        let names = |v: &[&Pod]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        let claims = claim(&owner("u1", false), &selector, &all);
        assert_eq!(names(&claims.owned), ["mine"]);
        assert_eq!(names(&claims.adopt), ["orphan"]);
        assert_eq!(names(&claims.release), ["strayed"]);
        // An owner being deleted neither adopts nor releases.
        let claims = claim(&owner("u1", true), &selector, &all);
        assert_eq!(names(&claims.owned), ["mine"]);
        assert!(claims.adopt.is_empty() && claims.release.is_empty());
    }

    #[tokio::test]
    async fn slow_start_batches_double_and_stop_at_a_failure() {
        let calls = std::sync::Mutex::new(Vec::new());
        let (done, result) = slow_start(10, |i| {
            calls.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            async move { if i == 4 { Err("boom") } else { Ok(()) } }
        })
        .await;
        // Batches 1, 2, 4: the third batch (3..7) holds the failure; 7 and later never run.
        assert_eq!(calls.lock().unwrap_or_else(|e| e.into_inner()).len(), 7);
        assert_eq!(done, 6);
        assert!(result.is_err());
        let (done, result) = slow_start(5, |_| async { Ok::<(), ()>(()) }).await;
        assert_eq!((done, result.is_ok()), (5, true));
    }
}
