//! The DaemonSet controller (upstream's `pkg/controller/daemon`): one daemon pod on every node
//! the pod template fits (node name, node selector, required node affinity, taints against
//! tolerations), each pinned to its node by node affinity for the scheduler to bind; surplus
//! and misplaced pods deleted, failed ones replaced under a per-node backoff; rolling updates
//! within maxUnavailable and maxSurge, or OnDelete; ControllerRevision history; the status.
//! Node changes re-queue the DaemonSets whose placement they change.

pub mod eligibility;
pub mod plan;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_client::events::{EventRecorder, EventType};
use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde_json::json;

use crate::expectations::Expectations;
use crate::history::{self, HASH_LABEL};
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};
use plan::{GENERATION_LABEL, Plan, View};

/// The most pods created or deleted in one sync (upstream's `BurstReplicas`).
const BURST_REPLICAS: usize = 250;
/// The first and the longest wait before deleting another failed pod on a node.
const FAILED_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(15 * 60));

/// Upstream's `flowcontrol.Backoff` for failed daemon pods, per DaemonSet and node.
#[derive(Debug, Default)]
struct FailedBackoff {
    entries: Mutex<HashMap<String, (Duration, Instant)>>,
}

impl FailedBackoff {
    /// The current backoff when the last deletion on this node is more recent than it.
    fn in_backoff(&self, key: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let (backoff, last) = entries.get(key)?;
        (now.saturating_duration_since(*last) < *backoff).then_some(*backoff)
    }

    /// Records a deletion: the backoff doubles up to the maximum, and starts over after a long
    /// quiet spell.
    fn next(&self, key: &str, now: Instant) {
        let (initial, max) = FAILED_BACKOFF;
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries
            .entry(key.to_owned())
            .or_insert((Duration::ZERO, now));
        let expired = now.saturating_duration_since(entry.1) > 2 * max;
        entry.0 = if entry.0.is_zero() || expired {
            initial
        } else {
            (entry.0 * 2).min(max)
        };
        entry.1 = now;
    }
}

/// The controller's shared state.
pub struct Context {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    revisions: Store<ControllerRevision>,
    expectations: Arc<Expectations>,
    recorder: EventRecorder,
    backoff: FailedBackoff,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("controller", &"daemonset")
            .finish()
    }
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let sets = setup.watch::<DaemonSet>();
    let pod_informer = setup.watch::<Pod>();
    let node_informer = setup.watch::<Node>();
    let revision_informer = setup.watch::<ControllerRevision>();
    let (queue, rx) = Queue::<DaemonSet>::new();
    let expectations = Arc::new(Expectations::default());
    {
        let queue = queue.clone();
        let expectations = expectations.clone();
        sets.on_change(move |change| match change {
            Change::Applied { new, .. } => queue.add(ObjectRef::from_obj(*new)),
            Change::Deleted(ds) => expectations.forget(&pods::key(&ds.metadata)),
        });
    }
    {
        let (queue, store, expectations) = (queue.clone(), sets.store(), expectations.clone());
        pod_informer.on_change(move |change| on_pod_change(change, &store, &queue, &expectations));
    }
    {
        let (queue, store) = (queue.clone(), sets.store());
        node_informer.on_change(move |change| {
            for ds in sets_for_node_change(change, &store.state()) {
                queue.add(ObjectRef::from_obj(&*ds));
            }
        });
    }
    {
        let (queue, store) = (queue.clone(), sets.store());
        revision_informer.on_change(move |change| {
            let revision = change.object();
            for ds in owners_of(&revision.metadata, &store) {
                queue.add(ObjectRef::from_obj(&*ds));
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        revisions: revision_informer.store(),
        expectations,
        recorder: setup.recorder("daemonset-controller"),
        backoff: FailedBackoff::default(),
    });
    setup.run("daemonset", &sets, rx, ctx, reconcile)
}

fn selector(ds: &DaemonSet) -> Option<Selector> {
    let selector = ds.spec.as_ref()?.selector.clone();
    let empty = selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if empty {
        return None;
    }
    Selector::try_from(selector).ok()
}

/// The DaemonSet controlling `meta` (if cached), else the DaemonSets selecting the orphan.
fn owners_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    store: &Store<DaemonSet>,
) -> Vec<Arc<DaemonSet>> {
    pods::owners_of(meta, store, selector)
}

/// Upstream's pod handlers: creations and deletions observed for expectations, the owner (old
/// and new) queued, orphans offered to the DaemonSets that select them.
fn on_pod_change(
    change: &Change<'_, Pod>,
    store: &Store<DaemonSet>,
    queue: &Queue<DaemonSet>,
    expectations: &Expectations,
) {
    let deleted = |pod: &Pod| {
        if pods::controller_of(&pod.metadata).is_none() {
            return;
        }
        for ds in owners_of(&pod.metadata, store) {
            expectations.deletion_observed(&pods::key(&ds.metadata), &pods::key(&pod.metadata));
            queue.add(ObjectRef::from_obj(&*ds));
        }
    };
    match change {
        Change::Deleted(pod) => deleted(pod),
        Change::Applied { old: None, new } => {
            if new.metadata.deletion_timestamp.is_some() {
                return deleted(new);
            }
            let owners = owners_of(&new.metadata, store);
            for ds in owners {
                if pods::controller_of(&new.metadata).is_some() {
                    expectations.creation_observed(&pods::key(&ds.metadata));
                }
                queue.add(ObjectRef::from_obj(&*ds));
            }
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            if new.metadata.deletion_timestamp.is_some() {
                deleted(new);
            }
            let changed_owner =
                pods::controller_of(&old.metadata) != pods::controller_of(&new.metadata);
            if changed_owner || old.metadata.labels != new.metadata.labels {
                for ds in owners_of(&old.metadata, store) {
                    queue.add(ObjectRef::from_obj(&*ds));
                }
            }
            let orphan = pods::controller_of(&new.metadata).is_none();
            if !orphan || changed_owner || old.metadata.labels != new.metadata.labels {
                for ds in owners_of(&new.metadata, store) {
                    queue.add(ObjectRef::from_obj(&*ds));
                }
            }
        }
    }
}

/// The DaemonSets whose placement a node change affects (upstream's `addNode`/`updateNode`,
/// plus deletions so that a DaemonSet follows nodes leaving).
fn sets_for_node_change(change: &Change<'_, Node>, sets: &[Arc<DaemonSet>]) -> Vec<Arc<DaemonSet>> {
    let template = |ds: &DaemonSet| ds.spec.as_ref().and_then(|s| s.template.spec.clone());
    sets.iter()
        .filter(|ds| {
            let t = template(ds);
            match change {
                Change::Applied { old: None, new } => eligibility::should_run(t.as_ref(), new).0,
                Change::Applied {
                    old: Some(old),
                    new,
                } => {
                    eligibility::should_run(t.as_ref(), old)
                        != eligibility::should_run(t.as_ref(), new)
                }
                Change::Deleted(node) => eligibility::should_run(t.as_ref(), node).1,
            }
        })
        .cloned()
        .collect()
}

/// The template daemon pods are made from (upstream's `CreatePodTemplate`): the daemon
/// tolerations and the generation and hash labels.
fn daemon_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    eligibility::add_daemon_tolerations(template.spec.get_or_insert_with(Default::default));
    let labels = template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default);
    if let Some(generation) = plan::template_generation(ds) {
        labels.insert(GENERATION_LABEL.into(), generation.to_string());
    }
    if !hash.is_empty() {
        labels.insert(HASH_LABEL.into(), hash.into());
    }
    template
}

fn api<K>(ctx: &Context, namespace: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(ctx.client.clone(), namespace)
}

/// One sync of a DaemonSet (upstream's `syncDaemonSet`).
pub async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = pods::key(&ds.metadata);
    let Some(selector) = selector(&ds) else {
        ctx.recorder.record(
            pods::object_reference(&*ds),
            EventType::Warning,
            "SelectingAll",
            "This daemon set is selecting all pods. A non-empty selector is required.".into(),
        );
        return Ok(Action::await_change());
    };
    // The history may be mid-deletion by the garbage collector; leave everything alone.
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (current, old) = construct_history(&ctx, &ds, &selector).await?;
    let hash = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .cloned()
        .unwrap_or_default();
    let owned = claim_pods(&ctx, &ds, &selector).await?;
    let owned_refs: Vec<&Pod> = owned.iter().collect();
    let nodes = ctx.nodes.state();
    let node_refs: Vec<&Node> = nodes.iter().map(|n| &**n).collect();
    let view = View {
        ds: &ds,
        nodes: &node_refs,
        pods: &owned_refs,
        hash: &hash,
        now: pods::now(),
    };

    if !ctx.expectations.satisfied(&key) {
        update_status(&ctx, &ds, plan::status(&view, false)).await?;
        return Ok(Action::await_change());
    }
    let mut requeue = None;
    let mut result = sync_nodes(&ctx, &ds, plan::manage(&view), &hash, &mut requeue).await;
    let rolling = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if result.is_ok() && rolling && ctx.expectations.satisfied(&key) {
        result = match plan::rolling_update(&view) {
            Ok(update) => sync_nodes(&ctx, &ds, update, &hash, &mut requeue).await,
            Err(message) => Err(Error::Invalid(format!("invalid rolling update: {message}"))),
        };
    }
    if result.is_ok() {
        result = cleanup_history(&ctx, &ds, &old, &owned_refs).await;
    }
    let status = plan::status(&view, true);
    update_status(&ctx, &ds, status.clone()).await?;
    result?;
    let min_ready = plan::min_ready_seconds(&ds);
    if min_ready > 0 && status.number_ready != status.number_available.unwrap_or(0) {
        let wait = Duration::from_secs(min_ready.unsigned_abs().into());
        requeue = Some(requeue.map_or(wait, |r: Duration| r.min(wait)));
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The DaemonSet's pods, after adopting selected orphans and releasing owned pods that
/// stopped matching.
async fn claim_pods(ctx: &Context, ds: &DaemonSet, selector: &Selector) -> Result<Vec<Pod>, Error> {
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let candidates = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let candidates: Vec<&Pod> = candidates.iter().map(|p| &**p).collect();
    let claims = pods::claim(&ds.metadata, selector, &candidates);
    let pod_api: Api<Pod> = api(ctx, &namespace);
    let reference = pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    let owned = pods::settle_claims(&ctx.client, ds, &reference, claims, &pod_api).await?;
    Ok(owned.into_iter().cloned().collect())
}

/// The revision matching the current template (created, deduplicated or renumbered as
/// needed) and the older revisions (upstream's `constructHistory`).
async fn construct_history(
    ctx: &Context,
    ds: &DaemonSet,
    selector: &Selector,
) -> Result<(ControllerRevision, Vec<ControllerRevision>), Error> {
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let revision_api: Api<ControllerRevision> = api(ctx, &namespace);
    let candidates = ctx
        .revisions
        .state_filter(|r| r.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let candidates: Vec<&ControllerRevision> = candidates.iter().map(|r| &**r).collect();
    let claims = pods::claim(&ds.metadata, selector, &candidates);
    let reference = pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    let owned: Vec<ControllerRevision> =
        pods::settle_claims(&ctx.client, ds, &reference, claims, &revision_api)
            .await?
            .into_iter()
            .cloned()
            .collect();
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let data = history::template_patch(&template);
    let (current, old): (Vec<ControllerRevision>, Vec<ControllerRevision>) = owned
        .into_iter()
        .partition(|r| r.data.as_ref().map(|d| &d.0) == Some(&data));
    let old_refs: Vec<&ControllerRevision> = old.iter().collect();
    let next = history::next_revision(&old_refs);
    let current = if current.is_empty() {
        snapshot(ctx, ds, &template, data, next).await?
    } else {
        let mut keep = dedup(ctx, ds, current).await?;
        if keep.revision < next {
            let name = keep.metadata.name.clone().unwrap_or_default();
            keep = revision_api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"revision": next})),
                )
                .await?;
        }
        keep
    };
    Ok((current, old))
}

/// Keeps the newest of several revisions equal to the template, moving pods onto its hash and
/// deleting the others (upstream's `dedupCurHistories`).
async fn dedup(
    ctx: &Context,
    ds: &DaemonSet,
    mut current: Vec<ControllerRevision>,
) -> Result<ControllerRevision, Error> {
    current.sort_by(history::by_revision);
    let Some(keep) = current.pop() else {
        return Err(Error::Invalid("no current revision".into()));
    };
    if current.is_empty() {
        return Ok(keep);
    }
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let keep_hash = keep
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .cloned()
        .unwrap_or_default();
    let pod_api: Api<Pod> = api(ctx, &namespace);
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let daemon_pods = ctx.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == Some(namespace.as_str())
            && pods::controller_of(&p.metadata).is_some_and(|r| r.uid == uid)
    });
    for pod in daemon_pods
        .iter()
        .filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)) != Some(&keep_hash))
    {
        let patch = json!({"metadata": {"labels": {HASH_LABEL: keep_hash}}});
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match pod_api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let revision_api: Api<ControllerRevision> = api(ctx, &namespace);
    for duplicate in current {
        let name = duplicate.metadata.name.unwrap_or_default();
        match revision_api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(keep)
}

/// Creates the revision of the current template (upstream's `snapshot`); a different revision
/// under the same name is a hash collision, resolved by bumping `status.collisionCount`.
async fn snapshot(
    ctx: &Context,
    ds: &DaemonSet,
    template: &PodTemplateSpec,
    data: serde_json::Value,
    number: i64,
) -> Result<ControllerRevision, Error> {
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    let hash = crate::deployment::util::compute_hash(template, collision_count);
    let reference = pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let revision = history::new_revision(&ds.metadata, reference, labels, data, number, &hash);
    let revision_api: Api<ControllerRevision> = api(ctx, &namespace);
    let name = revision.metadata.name.clone().unwrap_or_default();
    match revision_api.create(&PostParams::default(), &revision).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = revision_api.get(&name).await?;
            if existing.data == revision.data {
                return Ok(existing);
            }
            let set_api: Api<DaemonSet> = api(ctx, &namespace);
            let mut fresh = set_api
                .get(ds.metadata.name.as_deref().unwrap_or_default())
                .await?;
            let status = fresh.status.get_or_insert_with(DaemonSetStatus::default);
            let count = status.collision_count.unwrap_or(0) + 1;
            status.collision_count = Some(count);
            set_api
                .replace_status(
                    fresh.metadata.name.as_deref().unwrap_or_default(),
                    &PostParams::default(),
                    &fresh,
                )
                .await?;
            tracing::info!(daemonset = %pods::key(&ds.metadata), count, "hash collision; bumped collisionCount");
            Err(Error::Invalid(format!(
                "hash collision for revision {name}"
            )))
        }
        Err(error) => Err(error.into()),
    }
}

/// Deletes the oldest revisions no pod runs beyond `revisionHistoryLimit` (upstream's
/// `cleanupHistory`).
async fn cleanup_history(
    ctx: &Context,
    ds: &DaemonSet,
    old: &[ControllerRevision],
    owned: &[&Pod],
) -> Result<(), Error> {
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let live_hashes: BTreeSet<&str> = owned
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get(HASH_LABEL)
                .map(String::as_str)
        })
        .collect();
    let live: BTreeSet<String> = old
        .iter()
        .filter(|r| {
            r.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HASH_LABEL))
                .is_some_and(|h| live_hashes.contains(h.as_str()))
        })
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let mut sorted: Vec<&ControllerRevision> = old.iter().collect();
    sorted.sort_by(|a, b| history::by_revision(a, b));
    let revision_api: Api<ControllerRevision> =
        api(ctx, ds.metadata.namespace.as_deref().unwrap_or_default());
    for name in history::to_prune(&sorted, &live, old.len(), limit) {
        match revision_api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Carries out a plan (upstream's `syncNodes`): failed pods are deleted unless their node is in
/// backoff; creations in slow-start batches, each pod pinned to its node; deletions at once;
/// all under expectations.
async fn sync_nodes(
    ctx: &Context,
    ds: &DaemonSet,
    plan: Plan,
    hash: &str,
    requeue: &mut Option<Duration>,
) -> Result<(), Error> {
    if plan.is_empty() {
        return Ok(());
    }
    let key = pods::key(&ds.metadata);
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let owner_ref = pods::object_reference(ds);
    let mut delete = plan.delete;
    let now = Instant::now();
    for (pod, node) in plan.failed {
        let backoff_key = format!("{uid}/{node}");
        if let Some(delay) = ctx.backoff.in_backoff(&backoff_key, now) {
            *requeue = Some(requeue.map_or(delay, |r| r.min(delay)));
            continue;
        }
        ctx.backoff.next(&backoff_key, now);
        ctx.recorder.record(
            owner_ref.clone(),
            EventType::Warning,
            "FailedDaemonPod",
            format!(
                "Found failed daemon pod {namespace}/{pod} on node {node}, will try to kill it"
            ),
        );
        delete.push(pod);
    }
    let create_on: Vec<String> = plan.create_on.into_iter().take(BURST_REPLICAS).collect();
    delete.truncate(BURST_REPLICAS);
    ctx.expectations.expect(
        &key,
        create_on.len(),
        delete.iter().map(|p| format!("{namespace}/{p}")),
    );
    let pod_api: Api<Pod> = api(ctx, &namespace);
    let template = daemon_template(ds, hash);
    let reference = pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    let name = ds.metadata.name.clone().unwrap_or_default();
    let (created, create_result) = pods::slow_start(create_on.len(), |i| {
        let mut pod = pods::pod_from_template(&template, &namespace, &name, reference.clone());
        if let Some(spec) = pod.spec.as_mut() {
            spec.affinity = Some(eligibility::pin_to_node(
                spec.affinity.take(),
                &create_on[i],
            ));
        }
        let (api, owner_ref) = (&pod_api, &owner_ref);
        async move {
            pods::create_pod(api, &pod, &ctx.recorder, owner_ref)
                .await
                .map(|_| ())
        }
    })
    .await;
    for _ in created..create_on.len() {
        ctx.expectations.creation_observed(&key);
    }
    let results = join_all(delete.iter().map(|pod| {
        let (api, owner_ref, key, namespace) = (&pod_api, &owner_ref, &key, &namespace);
        async move {
            let result = pods::delete_pod(api, pod, &ctx.recorder, owner_ref).await;
            if let Err(error) = result {
                ctx.expectations
                    .deletion_observed(key, &format!("{namespace}/{pod}"));
                if !runtime::is_not_found(&error) {
                    return Err(error);
                }
            }
            Ok(())
        }
    }))
    .await;
    create_result?;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

/// Zero counts read as absent, as the API omits them.
fn normalized(mut status: DaemonSetStatus) -> DaemonSetStatus {
    pods::zero_counts_absent([
        &mut status.number_available,
        &mut status.number_unavailable,
        &mut status.updated_number_scheduled,
    ]);
    status
}

/// Writes the status when it changed.
async fn update_status(
    ctx: &Context,
    ds: &DaemonSet,
    status: DaemonSetStatus,
) -> Result<(), Error> {
    let status = normalized(status);
    if Some(&status) == ds.status.clone().map(normalized).as_ref() {
        return Ok(());
    }
    let mut object = ds.clone();
    object.status = Some(status);
    let set_api: Api<DaemonSet> = api(ctx, ds.metadata.namespace.as_deref().unwrap_or_default());
    runtime::replace_status_unless_gone(
        &set_api,
        ds.metadata.name.as_deref().unwrap_or_default(),
        &object,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(name: &str, node_selector: serde_json::Value) -> Arc<DaemonSet> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 3},
                "spec": {"selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"nodeSelector": node_selector, "containers": []}}},
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn node(labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn names(v: Vec<Arc<DaemonSet>>) -> Vec<String> {
        v.iter().filter_map(|d| d.metadata.name.clone()).collect()
    }

    #[test]
    fn node_changes_wake_the_daemon_sets_they_concern() {
        let sets = [ds("gpu", json!({"gpu": "yes"})), ds("all", json!({}))];
        let plain = node(json!({}));
        let gpu = node(json!({"gpu": "yes"}));
        let added = Change::Applied {
            old: None,
            new: &plain,
        };
        assert_eq!(names(sets_for_node_change(&added, &sets)), ["all"]);
        let labeled = Change::Applied {
            old: Some(Arc::new(plain.clone())),
            new: &gpu,
        };
        assert_eq!(names(sets_for_node_change(&labeled, &sets)), ["gpu"]);
        let same = Change::Applied {
            old: Some(Arc::new(gpu.clone())),
            new: &gpu,
        };
        assert!(sets_for_node_change(&same, &sets).is_empty());
        assert_eq!(
            names(sets_for_node_change(&Change::Deleted(&gpu), &sets)),
            ["gpu", "all"]
        );
    }

    #[test]
    fn daemon_pods_carry_tolerations_and_labels() {
        let d = ds("web", json!({}));
        let t = daemon_template(&d, "abc");
        let labels = t.metadata.and_then(|m| m.labels).unwrap_or_default();
        assert_eq!(labels.get(HASH_LABEL).map(String::as_str), Some("abc"));
        assert_eq!(labels.get(GENERATION_LABEL).map(String::as_str), Some("3"));
        assert_eq!(t.spec.and_then(|s| s.tolerations).map(|t| t.len()), Some(6));
    }

    #[test]
    fn empty_selectors_select_nothing() {
        let mut d = (*ds("web", json!({}))).clone();
        assert!(selector(&d).is_some());
        if let Some(spec) = d.spec.as_mut() {
            spec.selector = Default::default();
        }
        assert!(selector(&d).is_none());
    }

    #[test]
    fn failed_pod_backoff_doubles() {
        let b = FailedBackoff::default();
        let t0 = Instant::now();
        assert_eq!(b.in_backoff("k", t0), None);
        b.next("k", t0);
        assert_eq!(b.in_backoff("k", t0), Some(Duration::from_secs(1)));
        assert_eq!(b.in_backoff("k", t0 + Duration::from_secs(2)), None);
        b.next("k", t0 + Duration::from_secs(2));
        assert_eq!(
            b.in_backoff("k", t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(2))
        );
        b.next("k", t0 + Duration::from_secs(3600));
        assert_eq!(
            b.in_backoff("k", t0 + Duration::from_secs(3600)),
            Some(Duration::from_secs(1)),
            "starts over"
        );
    }
}
