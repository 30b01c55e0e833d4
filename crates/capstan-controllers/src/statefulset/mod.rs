//! The StatefulSet controller (upstream's `pkg/controller/statefulset`): pods with stable names
//! `<set>-<ordinal>`, hostnames and claims `<template>-<set>-<ordinal>`, created in order and
//! each only once its predecessors are Running and Ready (OrderedReady) or all at once
//! (Parallel); scaled down from the highest ordinal; rolling updates from the highest ordinal
//! down to the partition, or OnDelete; ControllerRevision history with current and update
//! revisions; claim retention through owner references; the status.

pub mod identity;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde_json::json;

use crate::history;
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};
use plan::{Input, Step};

/// The controller's shared state.
pub struct Context {
    client: Client,
    pods: Store<Pod>,
    claims: Store<PersistentVolumeClaim>,
    revisions: Store<ControllerRevision>,
    recorder: EventRecorder,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("controller", &"statefulset")
            .finish()
    }
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let sets = setup.watch::<StatefulSet>();
    let pod_informer = setup.watch::<Pod>();
    let claim_informer = setup.watch::<PersistentVolumeClaim>();
    let revision_informer = setup.watch::<ControllerRevision>();
    let (queue, rx) = Queue::<StatefulSet>::new();
    queue.follow_applied(&sets);
    {
        let store = sets.store();
        pod_informer.on_change(move |change| {
            for set in sets_for_pod_change(change, &store) {
                queue.add(ObjectRef::from_obj(&*set));
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        pods: pod_informer.store(),
        claims: claim_informer.store(),
        revisions: revision_informer.store(),
        recorder: setup.recorder("statefulset-controller"),
    });
    setup.run("statefulset", &sets, rx, ctx, reconcile)
}

fn selector(set: &StatefulSet) -> Option<Selector> {
    Selector::try_from(set.spec.as_ref()?.selector.clone()).ok()
}

/// The set controlling the object (if cached), else the sets selecting the orphan.
fn owners_of(meta: &ObjectMeta, store: &Store<StatefulSet>) -> Vec<Arc<StatefulSet>> {
    pods::owners_of(meta, store, selector)
}

/// Upstream's pod handlers: the owner is queued on every change that matters (and the old
/// owner when ownership or labels change); orphans wake the sets that select them.
fn sets_for_pod_change(
    change: &Change<'_, Pod>,
    store: &Store<StatefulSet>,
) -> Vec<Arc<StatefulSet>> {
    match change {
        Change::Deleted(pod) => owners_of(&pod.metadata, store)
            .into_iter()
            .filter(|_| pods::controller_of(&pod.metadata).is_some())
            .collect(),
        Change::Applied { old: None, new } => owners_of(&new.metadata, store),
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return Vec::new();
            }
            let moved = old.metadata.labels != new.metadata.labels
                || pods::controller_of(&old.metadata) != pods::controller_of(&new.metadata);
            let mut sets = if moved {
                owners_of(&old.metadata, store)
            } else {
                Vec::new()
            };
            if pods::controller_of(&new.metadata).is_some() || moved {
                sets.extend(owners_of(&new.metadata, store));
            }
            sets
        }
    }
}

fn api<K>(ctx: &Context, namespace: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(ctx.client.clone(), namespace)
}

/// One sync of a StatefulSet (upstream's `sync` and `UpdateStatefulSet`).
pub async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(selector) = selector(&set) else {
        return Ok(Action::await_change());
    };
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let revisions = claim_revisions(&ctx, &set, &selector).await?;
    let owned = claim_pods(&ctx, &set, &selector).await?;
    let (current, update, collision_count) = set_revisions(&ctx, &set, revisions.clone()).await?;

    let claims: BTreeMap<String, PersistentVolumeClaim> = ctx
        .claims
        .state_filter(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, (**c).clone())))
        .collect();
    let pod_refs: Vec<&Pod> = owned.iter().collect();
    let input = Input {
        set: &set,
        pods: &pod_refs,
        claims: &claims,
        current: &current,
        update: &update,
        collision_count,
        now: pods::now(),
    };
    let mut planned = plan::plan(&input);
    let result = execute(&ctx, &set, &claims, &planned).await;
    plan::complete_rolling_update(&set, &mut planned.status);
    if plan::status_changed(&set, &planned.status) {
        let mut object = (*set).clone();
        object.status = Some(planned.status.clone());
        let set_api: Api<StatefulSet> = api(&ctx, &namespace);
        let written = runtime::replace_status_unless_gone(&set_api, set_name(&set), &object);
        if written.await?.is_none() {
            return Ok(Action::await_change());
        }
    }
    truncate_history(&ctx, &set, &owned, &revisions, &current, &update).await?;
    result?;
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    if min_ready > 0 && planned.status.available_replicas.unwrap_or(0) != identity::replicas(&set) {
        return Ok(Action::requeue(Duration::from_secs(
            min_ready.unsigned_abs().into(),
        )));
    }
    Ok(Action::await_change())
}

/// The set's revisions: those it controls and selected orphans, which it adopts (upstream's
/// `adoptOrphanRevisions` and `ListRevisions`), sorted by revision.
async fn claim_revisions(
    ctx: &Context,
    set: &StatefulSet,
    selector: &Selector,
) -> Result<Vec<ControllerRevision>, Error> {
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let mut revisions: Vec<ControllerRevision> = ctx
        .revisions
        .state_filter(|r| {
            r.metadata.namespace.as_deref() == Some(namespace.as_str())
                && selector.matches(pods::labels_of(&r.metadata))
                && pods::controller_of(&r.metadata).is_none_or(|c| c.uid == uid)
        })
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let orphans: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| pods::controller_of(&r.metadata).is_none())
        .collect();
    if !orphans.is_empty() {
        if !pods::can_adopt(&ctx.client, set).await? {
            return Err(Error::Invalid(
                "can't adopt ControllerRevisions: the StatefulSet is gone or being deleted".into(),
            ));
        }
        let revision_api: Api<ControllerRevision> = api(ctx, &namespace);
        let reference = pods::controller_ref("apps/v1", "StatefulSet", &set.metadata);
        for orphan in orphans {
            let patch = pods::adopt_patch(&reference, orphan.metadata.uid.as_deref());
            pods::patch_ownership(
                &revision_api,
                orphan.metadata.name.as_deref().unwrap_or_default(),
                patch,
            )
            .await?;
        }
    }
    revisions.sort_by(history::by_revision);
    Ok(revisions)
}

/// The set's member pods, after adopting and releasing (upstream's `getPodsForStatefulSet`:
/// a pod must match the selector and be named after the set).
async fn claim_pods(
    ctx: &Context,
    set: &StatefulSet,
    selector: &Selector,
) -> Result<Vec<Pod>, Error> {
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let candidates = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let candidates: Vec<&Pod> = candidates.iter().map(|p| &**p).collect();
    let claims = pods::claim(&set.metadata, selector, &candidates);
    let (mut owned, mut release): (Vec<&Pod>, Vec<&Pod>) = claims
        .owned
        .into_iter()
        .partition(|p| identity::is_member(set, p));
    if set.metadata.deletion_timestamp.is_some() {
        owned.append(&mut release);
    }
    release.extend(claims.release);
    let adopt: Vec<&Pod> = claims
        .adopt
        .into_iter()
        .filter(|p| identity::is_member(set, p))
        .collect();
    let mut result: Vec<Pod> = owned.into_iter().cloned().collect();
    let pod_api: Api<Pod> = api(ctx, &namespace);
    if !adopt.is_empty() && pods::can_adopt(&ctx.client, set).await? {
        let reference = pods::controller_ref("apps/v1", "StatefulSet", &set.metadata);
        for pod in adopt {
            let patch = pods::adopt_patch(&reference, pod.metadata.uid.as_deref());
            if pods::patch_ownership(
                &pod_api,
                pod.metadata.name.as_deref().unwrap_or_default(),
                patch,
            )
            .await?
            {
                result.push(pod.clone());
            }
        }
    }
    for pod in release {
        let patch = pods::release_patch(set.metadata.uid.as_deref(), pod.metadata.uid.as_deref());
        pods::patch_ownership(
            &pod_api,
            pod.metadata.name.as_deref().unwrap_or_default(),
            patch,
        )
        .await?;
    }
    Ok(result)
}

/// The current and update revisions and the collision count (upstream's
/// `getStatefulSetRevisions`): the update revision is the latest revision if it equals the
/// template, an older equal one renumbered as the latest (a rollback), or a new one.
async fn set_revisions(
    ctx: &Context,
    set: &StatefulSet,
    revisions: Vec<ControllerRevision>,
) -> Result<(ControllerRevision, ControllerRevision, i32), Error> {
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let revision_api: Api<ControllerRevision> = api(ctx, &namespace);
    let mut collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let refs: Vec<&ControllerRevision> = revisions.iter().collect();
    let next = history::next_revision(&refs);
    let template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let data = history::template_patch(&template);
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let reference = pods::controller_ref("apps/v1", "StatefulSet", &set.metadata);
    let candidate = |count: i32| {
        let hash = history::hash_revision(&data, Some(count));
        history::new_revision(
            &set.metadata,
            reference.clone(),
            labels,
            data.clone(),
            next,
            &hash,
        )
    };
    let wanted = candidate(collision_count);
    let equal = history::find_equal(&refs, &wanted);
    let update = match (equal.last(), refs.last()) {
        (Some(found), Some(latest)) if history::equal_revision(latest, found) => (*latest).clone(),
        (Some(found), _) => {
            let name = found.metadata.name.clone().unwrap_or_default();
            revision_api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"revision": next})),
                )
                .await?
        }
        (None, _) => loop {
            let revision = candidate(collision_count);
            let name = revision.metadata.name.clone().unwrap_or_default();
            match revision_api.create(&PostParams::default(), &revision).await {
                Ok(created) => break created,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let existing = revision_api.get(&name).await?;
                    if existing.data == revision.data {
                        break existing;
                    }
                    collision_count += 1;
                }
                Err(error) => return Err(error.into()),
            }
        },
    };
    let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current = revisions
        .iter()
        .find(|r| r.metadata.name.is_some() && r.metadata.name == current_name)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok((current, update, collision_count))
}

/// Deletes the oldest revisions no pod runs and that are neither current nor update, beyond
/// `revisionHistoryLimit` (upstream's `truncateHistory`).
async fn truncate_history(
    ctx: &Context,
    set: &StatefulSet,
    owned: &[Pod],
    revisions: &[ControllerRevision],
    current: &ControllerRevision,
    update: &ControllerRevision,
) -> Result<(), Error> {
    let mut live: BTreeSet<String> = owned
        .iter()
        .map(|p| identity::pod_revision(p).to_owned())
        .collect();
    live.extend(current.metadata.name.clone());
    live.extend(update.metadata.name.clone());
    let refs: Vec<&ControllerRevision> = revisions.iter().collect();
    let historic = refs
        .iter()
        .filter(|r| r.metadata.name.as_ref().is_none_or(|n| !live.contains(n)))
        .count();
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let revision_api: Api<ControllerRevision> =
        api(ctx, set.metadata.namespace.as_deref().unwrap_or_default());
    for name in history::to_prune(&refs, &live, historic, limit) {
        match revision_api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Carries out the plan phase by phase; a phase's steps run in slow-start batches for a
/// Parallel set and one by one otherwise; the first failure stops the sync.
async fn execute(
    ctx: &Context,
    set: &StatefulSet,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
    planned: &plan::Plan,
) -> Result<(), Error> {
    for steps in &planned.phases {
        if planned.parallel {
            let (_, result) =
                pods::slow_start(steps.len(), |i| run_step(ctx, set, claims, &steps[i])).await;
            result?;
        } else {
            for step in steps {
                run_step(ctx, set, claims, step).await?;
            }
        }
    }
    Ok(())
}

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

/// Upstream's `recordPodEvent` wording: (reason, type, message).
fn pod_event_text(
    verb: &str,
    pod: &str,
    set: &str,
    error: Option<&str>,
) -> (String, EventType, String) {
    let title = verb.get(..1).map(str::to_uppercase).unwrap_or_default()
        + verb.get(1..).unwrap_or_default();
    match error {
        None => (
            format!("Successful{title}"),
            EventType::Normal,
            format!("{verb} Pod {pod} in StatefulSet {set} successful"),
        ),
        Some(error) => (
            format!("Failed{title}"),
            EventType::Warning,
            format!("{verb} Pod {pod} in StatefulSet {set} failed error: {error}"),
        ),
    }
}

fn pod_event(ctx: &Context, set: &StatefulSet, verb: &str, pod: &str, error: Option<&str>) {
    let (reason, kind, message) = pod_event_text(verb, pod, set_name(set), error);
    ctx.recorder
        .record(pods::object_reference(set), kind, &reason, message);
}

async fn run_step(
    ctx: &Context,
    set: &StatefulSet,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
    step: &Step,
) -> Result<(), Error> {
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let pod_api: Api<Pod> = api(ctx, &namespace);
    match step {
        Step::Create(pod) => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Err(error) = create_claims(ctx, set, claims, pod).await {
                pod_event(ctx, set, "create", &name, Some(&error.message()));
                return Err(error);
            }
            match pod_api.create(&PostParams::default(), pod).await {
                Ok(_) => {
                    pod_event(ctx, set, "create", &name, None);
                    Ok(())
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Err(kube::Error::Api(status).into())
                }
                Err(error) => {
                    pod_event(
                        ctx,
                        set,
                        "create",
                        &name,
                        Some(&pods::error_message(&error)),
                    );
                    Err(error.into())
                }
            }
        }
        Step::Delete(name) => match pod_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                pod_event(ctx, set, "delete", name, None);
                Ok(())
            }
            Err(error) if runtime::is_not_found(&error) => Ok(()),
            Err(error) => {
                pod_event(ctx, set, "delete", name, Some(&pods::error_message(&error)));
                Err(error.into())
            }
        },
        Step::CreateClaims(pod) => create_claims(ctx, set, claims, pod).await,
        Step::FixClaims(pod) => fix_claims(ctx, set, claims, pod).await,
        Step::Update(pod) => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let result = async {
                create_claims(ctx, set, claims, pod).await?;
                fix_claims(ctx, set, claims, pod).await?;
                pod_api.replace(&name, &PostParams::default(), pod).await?;
                Ok::<(), Error>(())
            }
            .await;
            pod_event(
                ctx,
                set,
                "update",
                &name,
                result.as_ref().err().map(ToString::to_string).as_deref(),
            );
            result
        }
    }
}

/// Creates the pod's claims that do not exist (upstream's `createPersistentVolumeClaims`); a
/// claim being deleted is an error until it is gone.
async fn create_claims(
    ctx: &Context,
    set: &StatefulSet,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
    pod: &Pod,
) -> Result<(), Error> {
    let Some(ordinal) = identity::ordinal(pod) else {
        return Ok(());
    };
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let claim_api: Api<PersistentVolumeClaim> = api(ctx, &namespace);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let mut errors = Vec::new();
    for (_, claim) in identity::claims_for(set, ordinal) {
        let name = claim.metadata.name.clone().unwrap_or_default();
        match claims.get(&name) {
            Some(existing) if existing.metadata.deletion_timestamp.is_some() => {
                errors.push(format!("pvc {name} is being deleted"));
            }
            Some(_) => {}
            None => {
                let result = claim_api.create(&PostParams::default(), &claim).await;
                let (reason, kind, message) = match &result {
                    Ok(_) => (
                        "SuccessfulCreate",
                        EventType::Normal,
                        format!(
                            "create Claim {name} Pod {pod_name} in StatefulSet {} success",
                            set_name(set)
                        ),
                    ),
                    Err(kube::Error::Api(status)) if status.code == 409 => continue,
                    Err(error) => {
                        errors.push(format!(
                            "failed to create PVC {name}: {}",
                            pods::error_message(error)
                        ));
                        (
                            "FailedCreate",
                            EventType::Warning,
                            format!(
                                "create Claim {name} for Pod {pod_name} in StatefulSet {} failed error: {}",
                                set_name(set),
                                pods::error_message(error)
                            ),
                        )
                    }
                };
                ctx.recorder
                    .record(pods::object_reference(set), kind, reason, message);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(errors.join("; ")))
    }
}

/// Sets the owner references of the pod's existing claims as the retention policy wants
/// (upstream's `UpdatePodClaimForRetentionPolicy`).
async fn fix_claims(
    ctx: &Context,
    set: &StatefulSet,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
    pod: &Pod,
) -> Result<(), Error> {
    let Some(ordinal) = identity::ordinal(pod) else {
        return Ok(());
    };
    let claim_api: Api<PersistentVolumeClaim> =
        api(ctx, set.metadata.namespace.as_deref().unwrap_or_default());
    for (_, wanted) in identity::claims_for(set, ordinal) {
        let name = wanted.metadata.name.clone().unwrap_or_default();
        let Some(claim) = claims.get(&name) else {
            continue;
        };
        if identity::claim_owners_up_to_date(claim, set, pod) {
            continue;
        }
        let refs = identity::claim_owners(claim, set, pod);
        let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": claim.metadata.resource_version}});
        match claim_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    #[test]
    fn pod_events_use_upstream_wording() {
        assert_eq!(
            pod_event_text("create", "web-0", "web", None),
            (
                "SuccessfulCreate".into(),
                EventType::Normal,
                "create Pod web-0 in StatefulSet web successful".into()
            )
        );
        assert_eq!(
            pod_event_text("delete", "web-1", "web", Some("boom")),
            (
                "FailedDelete".into(),
                EventType::Warning,
                "delete Pod web-1 in StatefulSet web failed error: boom".into()
            )
        );
    }

    #[test]
    fn pod_changes_wake_owners_and_selecting_sets() {
        let mut writer = Writer::<StatefulSet>::default();
        for (name, app) in [("web", "web"), ("db", "db")] {
            let set: StatefulSet = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"selector": {"matchLabels": {"app": app}}, "serviceName": name,
                         "template": {"metadata": {"labels": {"app": app}}}},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            writer.apply_watcher_event(&Event::Apply(set));
        }
        let store = writer.as_reader();
        let pod = |labels: serde_json::Value, owner: Option<&str>, rv: &str| -> Pod {
            let refs = owner.map(|o| json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": o, "uid": o, "controller": true}]));
            serde_json::from_value(json!({"metadata": {"name": "web-0", "namespace": "ns", "labels": labels,
                                                       "ownerReferences": refs, "resourceVersion": rv}}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let names = |v: Vec<Arc<StatefulSet>>| {
            v.iter()
                .filter_map(|s| s.metadata.name.clone())
                .collect::<Vec<_>>()
        };
        let owned = pod(json!({"app": "web"}), Some("web"), "1");
        assert_eq!(
            names(sets_for_pod_change(
                &Change::Applied {
                    old: None,
                    new: &owned
                },
                &store
            )),
            ["web"]
        );
        let orphan = pod(json!({"app": "db"}), None, "1");
        assert_eq!(
            names(sets_for_pod_change(
                &Change::Applied {
                    old: None,
                    new: &orphan
                },
                &store
            )),
            ["db"]
        );
        assert!(sets_for_pod_change(&Change::Deleted(&orphan), &store).is_empty());
        assert_eq!(
            names(sets_for_pod_change(&Change::Deleted(&owned), &store)),
            ["web"]
        );
        let relabeled = pod(json!({"app": "db"}), Some("web"), "2");
        let change = Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &relabeled,
        };
        assert_eq!(names(sets_for_pod_change(&change, &store)), ["web", "web"]);
        let resync = Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &owned,
        };
        assert!(sets_for_pod_change(&resync, &store).is_empty());
    }
}
