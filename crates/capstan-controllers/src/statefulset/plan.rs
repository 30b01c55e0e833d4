//! The StatefulSet controller's decisions as a pure function of the set, its pods, the claims,
//! the current and update revisions and the time (upstream's `updateStatefulSet`,
//! `processReplica`, `processCondemned` and the rolling update): the steps of one sync, in
//! upstream's order and stopping where upstream's OrderedReady policy would stop, and the
//! status they leave.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::identity::{self, ordinal, pod_revision};
use crate::deployment::util::scaled_value;
use crate::history;
use crate::pods;

/// What a sync looks at.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The StatefulSet.
    pub set: &'a StatefulSet,
    /// Its pods (claimed members).
    pub pods: &'a [&'a Pod],
    /// The claims in the set's namespace, by name.
    pub claims: &'a BTreeMap<String, PersistentVolumeClaim>,
    /// The revision the current pods run.
    pub current: &'a ControllerRevision,
    /// The revision pods are updated to.
    pub update: &'a ControllerRevision,
    /// The collision count the update revision was named with.
    pub collision_count: i32,
    /// The time of the sync.
    pub now: Timestamp,
}

/// One API action.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create the pod's missing claims, then the pod.
    Create(Pod),
    /// Delete the pod of this name.
    Delete(String),
    /// Create the missing claims of a pending pod.
    CreateClaims(Pod),
    /// Bring the pod's identity, storage and claims' owners in line; the pod as it should be.
    Update(Pod),
    /// Bring the owners of a condemned pod's claims in line with the retention policy.
    FixClaims(Pod),
}

/// The steps of one sync, phase by phase (replicas, condemned claims, condemned pods, update),
/// and the status to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Each phase's steps; a phase runs only once the previous one succeeded.
    pub phases: Vec<Vec<Step>>,
    /// Parallel: a phase's steps run in slow-start batches; otherwise one by one.
    pub parallel: bool,
    /// The new status.
    pub status: StatefulSetStatus,
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Exists in the API (upstream checks for a phase, which the API server sets on creation; a
/// cached pod without one counts as well).
pub fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty() || pod.metadata.uid.is_some()
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && pods::is_ready(pod)
}

fn healthy(pod: &Pod) -> bool {
    running_and_ready(pod) && !terminating(pod)
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

fn strategy_type(set: &StatefulSet) -> &str {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

fn rolling(
    set: &StatefulSet,
) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy> {
    set.spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()
}

fn partition(set: &StatefulSet) -> i32 {
    rolling(set).and_then(|r| r.partition).unwrap_or(0)
}

/// Counts pods into the status (upstream's `computeReplicaStatus`).
pub fn count(
    status: &mut StatefulSetStatus,
    pods: &[&Pod],
    min_ready: i32,
    current: &str,
    update: &str,
    now: Timestamp,
) {
    let (mut replicas, mut ready, mut available, mut at_current, mut updated) = (0, 0, 0, 0, 0);
    for pod in pods {
        if is_created(pod) {
            replicas += 1;
        }
        if running_and_ready(pod) {
            ready += 1;
            if pods::is_available(pod, min_ready, now) {
                available += 1;
            }
        }
        if is_created(pod) && !terminating(pod) {
            if pod_revision(pod) == current {
                at_current += 1;
            }
            if pod_revision(pod) == update {
                updated += 1;
            }
        }
    }
    status.replicas = replicas;
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    status.current_replicas = Some(at_current);
    status.updated_replicas = Some(updated);
}

/// Marks a finished rolling update: every replica updated and ready (upstream's
/// `completeRollingUpdate`).
pub fn complete_rolling_update(set: &StatefulSet, status: &mut StatefulSetStatus) {
    let wanted = identity::replicas(set);
    let updated = status.updated_replicas.unwrap_or(0);
    if strategy_type(set) == "RollingUpdate"
        && updated == wanted
        && status.ready_replicas.unwrap_or(0) == wanted
        && status.replicas == wanted
    {
        status.current_replicas = Some(updated);
        status.current_revision = status.update_revision.clone();
    }
}

/// Whether `new` differs from the set's status in what the controller writes (upstream's
/// `inconsistentStatus`, plus the collision count).
pub fn status_changed(set: &StatefulSet, new: &StatefulSetStatus) -> bool {
    let old = set.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    new.observed_generation.unwrap_or(0) > old.observed_generation.unwrap_or(0)
        || new.replicas != old.replicas
        || n(new.current_replicas) != n(old.current_replicas)
        || n(new.ready_replicas) != n(old.ready_replicas)
        || n(new.updated_replicas) != n(old.updated_replicas)
        || n(new.available_replicas) != n(old.available_replicas)
        || new.current_revision != old.current_revision
        || new.update_revision != old.update_revision
        || n(new.collision_count) != n(old.collision_count)
}

/// The pod for a missing ordinal, at the current revision below the partition and at the
/// update revision otherwise (upstream's `newVersionedStatefulSetPod`).
fn versioned_pod(
    input: &Input<'_>,
    current: &PodTemplateSpec,
    update: &PodTemplateSpec,
    ordinal: i32,
) -> Pod {
    let set = input.set;
    let start = identity::start_ordinal(set);
    let current_replicas = set
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .unwrap_or(0);
    let at_current = (strategy_type(set) == "RollingUpdate"
        && rolling(set).is_none()
        && ordinal < start + current_replicas)
        || (rolling(set).is_some() && ordinal < start + partition(set));
    let revision_name = |r: &ControllerRevision| r.metadata.name.clone().unwrap_or_default();
    if at_current {
        identity::new_pod(set, current, ordinal, &revision_name(input.current))
    } else {
        identity::new_pod(set, update, ordinal, &revision_name(input.update))
    }
}

fn claims_up_to_date(input: &Input<'_>, pod: &Pod) -> bool {
    let Some(ordinal) = ordinal(pod) else {
        return true;
    };
    identity::claims_for(input.set, ordinal)
        .iter()
        .all(|(_, wanted)| {
            let name = wanted.metadata.name.as_deref().unwrap_or_default();
            input
                .claims
                .get(name)
                .is_none_or(|claim| identity::claim_owners_up_to_date(claim, input.set, pod))
        })
}

fn missing_claims(input: &Input<'_>, pod: &Pod) -> bool {
    let Some(ordinal) = ordinal(pod) else {
        return false;
    };
    identity::claims_for(input.set, ordinal)
        .iter()
        .any(|(_, c)| {
            !input
                .claims
                .contains_key(c.metadata.name.as_deref().unwrap_or_default())
        })
}

fn stale_claims(input: &Input<'_>, pod: &Pod) -> bool {
    let deletes_when_scaled = input
        .set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
        .and_then(|p| p.when_scaled.as_deref())
        == Some("Delete");
    let Some(ordinal) = ordinal(pod) else {
        return false;
    };
    deletes_when_scaled
        && identity::claims_for(input.set, ordinal)
            .iter()
            .any(|(_, c)| {
                input
                    .claims
                    .get(c.metadata.name.as_deref().unwrap_or_default())
                    .is_some_and(|claim| identity::claim_is_stale(claim, pod))
            })
}

/// One replica (upstream's `processReplica`): the step, and whether an ordered set stops here.
fn process_replica(input: &Input<'_>, pod: &Pod, monotonic: bool) -> (Option<Step>, bool) {
    if matches!(phase(pod), "Failed" | "Succeeded") {
        let step = (!terminating(pod)).then(|| Step::Delete(name(pod)));
        return (step, true);
    }
    if !is_created(pod) {
        if stale_claims(input, pod) {
            return (None, true);
        }
        return (Some(Step::Create(pod.clone())), monotonic);
    }
    let mut step = None;
    if phase(pod) == "Pending" && missing_claims(input, pod) {
        step = Some(Step::CreateClaims(pod.clone()));
    }
    let min_ready = min_ready_seconds(input.set);
    if monotonic
        && (terminating(pod)
            || !running_and_ready(pod)
            || !pods::is_available(pod, min_ready, input.now))
    {
        return (step, true);
    }
    let set = input.set;
    if identity::identity_matches(set, pod)
        && identity::storage_matches(set, pod)
        && claims_up_to_date(input, pod)
    {
        return (step, false);
    }
    let mut fixed = pod.clone();
    if !identity::identity_matches(set, &fixed) {
        identity::update_identity(set, &mut fixed);
    }
    if !identity::storage_matches(set, &fixed) {
        identity::update_storage(set, &mut fixed);
    }
    (step.or(Some(Step::Update(fixed))), false)
}

/// The steps of one sync and the status (upstream's `updateStatefulSet`).
pub fn plan(input: &Input<'_>) -> Plan {
    let set = input.set;
    let start = identity::start_ordinal(set);
    let wanted = identity::replicas(set).max(0);
    let current_name = input.current.metadata.name.clone().unwrap_or_default();
    let update_name = input.update.metadata.name.clone().unwrap_or_default();
    let set_template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let current_template =
        history::template_of(input.current).unwrap_or_else(|| set_template.clone());
    let update_template = history::template_of(input.update).unwrap_or(set_template);
    let mut status = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        current_revision: Some(current_name.clone()),
        update_revision: Some(update_name.clone()),
        collision_count: Some(input.collision_count),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
        ..StatefulSetStatus::default()
    };

    let mut slots: Vec<Option<Pod>> = vec![None; wanted as usize];
    let mut condemned: Vec<&Pod> = Vec::new();
    for pod in input.pods.iter().copied() {
        match ordinal(pod) {
            Some(o) if o >= start && o - start < wanted => {
                slots[(o - start) as usize] = Some(pod.clone())
            }
            Some(_) => condemned.push(pod),
            None => {}
        }
    }
    let replicas: Vec<Pod> = slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            slot.unwrap_or_else(|| {
                versioned_pod(input, &current_template, &update_template, start + i as i32)
            })
        })
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
    let first_unhealthy = replicas
        .iter()
        .chain(condemned.iter().rev().copied())
        .find(|p| !healthy(p))
        .map(name);
    let min_ready = min_ready_seconds(set);
    let everything: Vec<&Pod> = replicas.iter().chain(condemned.iter().copied()).collect();
    count(
        &mut status,
        &everything,
        min_ready,
        &current_name,
        &update_name,
        input.now,
    );
    let parallel = set
        .spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel");
    let monotonic = !parallel;
    let mut result = Plan {
        phases: Vec::new(),
        parallel,
        status,
    };
    if set.metadata.deletion_timestamp.is_some() {
        return result;
    }

    let mut steps = Vec::new();
    for pod in &replicas {
        let (step, stop) = process_replica(input, pod, monotonic);
        steps.extend(step);
        if stop && monotonic {
            result.phases.push(steps);
            return result;
        }
    }
    result.phases.push(steps);

    let fixes = condemned
        .iter()
        .filter(|p| !claims_up_to_date(input, p))
        .map(|p| Step::FixClaims((*p).clone()))
        .collect();
    result.phases.push(fixes);

    let mut steps = Vec::new();
    for pod in condemned.iter().copied() {
        if terminating(pod) {
            if monotonic {
                result.phases.push(steps);
                return result;
            }
            continue;
        }
        let first = first_unhealthy.as_deref() == pod.metadata.name.as_deref();
        if monotonic
            && !first
            && (!running_and_ready(pod) || !pods::is_available(pod, min_ready, input.now))
        {
            result.phases.push(steps);
            return result;
        }
        steps.push(Step::Delete(name(pod)));
        if monotonic {
            result.phases.push(steps);
            return result;
        }
    }
    result.phases.push(steps);

    if strategy_type(set) == "OnDelete" {
        return result;
    }
    let update_min = partition(set).max(0) as usize;
    let mut steps = Vec::new();
    let outdated = |p: &Pod| is_created(p) && pod_revision(p) != update_name && !terminating(p);
    match rolling(set).and_then(|r| r.max_unavailable.clone()) {
        None => {
            for pod in replicas.iter().skip(update_min).rev() {
                if outdated(pod) {
                    steps.push(Step::Delete(name(pod)));
                    break;
                }
                if !healthy(pod) {
                    break;
                }
            }
        }
        Some(max_unavailable) => {
            let max_unavailable = max_unavailable_count(&max_unavailable, wanted);
            let unavailable = replicas.iter().filter(|p| !healthy(p)).count() as i32;
            let room = (max_unavailable - unavailable).max(0) as usize;
            steps.extend(
                replicas
                    .iter()
                    .skip(update_min)
                    .rev()
                    .filter(|p| outdated(p))
                    .take(room)
                    .map(|p| Step::Delete(name(p))),
            );
        }
    }
    let deleted = steps.len() as i32;
    if let Some(current) = result.status.current_replicas.as_mut() {
        *current -= deleted;
    }
    result.phases.push(steps);
    result
}

/// maxUnavailable against the replicas, rounded down but at least 1 (upstream's
/// `getStatefulSetMaxUnavailable`).
pub fn max_unavailable_count(value: &IntOrString, replicas: i32) -> i32 {
    scaled_value(value, replicas, false).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::HASH_LABEL;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).unwrap_or_default()
    }

    fn set(spec: serde_json::Value) -> StatefulSet {
        let mut value = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 4},
            "spec": {"replicas": 3, "serviceName": "nginx",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "v2"}]}}},
        });
        if let (Some(base), Some(extra)) = (value["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    fn revision(name: &str, image: &str) -> ControllerRevision {
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        ControllerRevision {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                history::template_patch(&template),
            )),
            revision: 1,
        }
    }

    /// `web-<ordinal>` at `revision` in `state`: ready (since 0), fresh (ready since 100),
    /// running (not ready), pending, failed, deleting (ready).
    fn pod(ordinal: i32, revision: &str, state: &str) -> Pod {
        let (phase, ready_at) = match state {
            "ready" | "deleting" => ("Running", Some(0)),
            "fresh" => ("Running", Some(100)),
            "running" => ("Running", None),
            "failed" => ("Failed", None),
            _ => ("Pending", None),
        };
        let conditions = ready_at.map(|t| json!([{"type": "Ready", "status": "True", "lastTransitionTime": at(t).to_string()}]));
        let name = format!("web-{ordinal}");
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                         "labels": {"app": "web", HASH_LABEL: revision,
                                    identity::POD_NAME_LABEL: name},
                         "deletionTimestamp": (state == "deleting").then(|| at(50).to_string())},
            "spec": {"containers": []},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The steps as short strings: `create web-0@rev`, `delete web-2`, ...
    fn describe(plan: &Plan) -> Vec<Vec<String>> {
        plan.phases
            .iter()
            .map(|steps| {
                steps
                    .iter()
                    .map(|s| match s {
                        Step::Create(p) => format!("create {}@{}", name(p), pod_revision(p)),
                        Step::Delete(n) => format!("delete {n}"),
                        Step::CreateClaims(p) => format!("claims {}", name(p)),
                        Step::Update(p) => format!("update {}", name(p)),
                        Step::FixClaims(p) => format!("fix {}", name(p)),
                    })
                    .collect()
            })
            .collect()
    }

    fn run(s: &StatefulSet, pods: &[Pod], now: i64) -> Plan {
        let claims = BTreeMap::new();
        let refs: Vec<&Pod> = pods.iter().collect();
        let (current, update) = (revision("web-v1", "v1"), revision("web-v2", "v2"));
        plan(&Input {
            set: s,
            pods: &refs,
            claims: &claims,
            current: &current,
            update: &update,
            collision_count: 0,
            now: at(now),
        })
    }

    fn check(s: &StatefulSet, pods: &[Pod], expected: &[&[&str]]) {
        let got = describe(&run(s, pods, 200));
        let expected: Vec<Vec<String>> = expected
            .iter()
            .map(|p| p.iter().map(|s| s.to_string()).collect())
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time_in_order() {
        let s = set(json!({}));
        check(&s, &[], &[&["create web-0@web-v2"]]);
        check(&s, &[pod(0, "web-v2", "pending")], &[&[]]);
        check(
            &s,
            &[pod(0, "web-v2", "ready")],
            &[&["create web-1@web-v2"]],
        );
        check(
            &s,
            &[pod(0, "web-v2", "ready"), pod(2, "web-v2", "ready")],
            &[&["create web-1@web-v2"]],
        );
        check(
            &s,
            &[pod(0, "web-v2", "failed"), pod(1, "web-v2", "ready")],
            &[&["delete web-0"]],
        );
        let started = set(json!({"ordinals": {"start": 3}}));
        check(
            &started,
            &[pod(3, "web-v2", "ready")],
            &[&["create web-4@web-v2"]],
        );
    }

    #[test]
    fn parallel_creates_and_deletes_at_once() {
        let s = set(json!({"podManagementPolicy": "Parallel", "replicas": 2}));
        check(
            &s,
            &[pod(3, "web-v2", "pending")],
            &[
                &["create web-0@web-v2", "create web-1@web-v2"],
                &[],
                &["delete web-3"],
                &[],
            ],
        );
    }

    #[test]
    fn ordered_scale_down_goes_from_the_top_when_all_are_healthy() {
        let s = set(json!({"replicas": 2}));
        let healthy = [
            pod(0, "web-v2", "ready"),
            pod(1, "web-v2", "ready"),
            pod(2, "web-v2", "ready"),
            pod(3, "web-v2", "ready"),
        ];
        check(&s, &healthy, &[&[], &[], &["delete web-3"]]);
        // A condemned pod that is not ready blocks unless it is the first unhealthy one.
        let mut sick = healthy.clone();
        sick[3] = pod(3, "web-v2", "running");
        check(&s, &sick, &[&[], &[], &["delete web-3"]]);
        sick[2] = pod(2, "web-v2", "running");
        check(&s, &sick, &[&[], &[], &[]]);
        // A terminating one is waited for.
        let mut going = healthy.clone();
        going[3] = pod(3, "web-v2", "deleting");
        check(&s, &going, &[&[], &[], &[]]);
        // An unready replica blocks everything.
        let mut blocked = healthy.clone();
        blocked[1] = pod(1, "web-v2", "running");
        check(&s, &blocked, &[&[]]);
    }

    #[test]
    fn rolling_updates_go_from_the_highest_ordinal_down_to_the_partition() {
        let s = set(json!({}));
        let old = [
            pod(0, "web-v1", "ready"),
            pod(1, "web-v1", "ready"),
            pod(2, "web-v1", "ready"),
        ];
        check(&s, &old, &[&[], &[], &[], &["delete web-2"]]);
        let midway = [
            pod(0, "web-v1", "ready"),
            pod(1, "web-v1", "ready"),
            pod(2, "web-v2", "running"),
        ];
        check(&s, &midway, &[&[]]);
        let partitioned = set(
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
        );
        let done = [
            pod(0, "web-v1", "ready"),
            pod(1, "web-v1", "ready"),
            pod(2, "web-v2", "ready"),
        ];
        check(&partitioned, &done, &[&[], &[], &[], &[]]);
        // Below the partition, a recreated pod keeps the current revision.
        check(
            &partitioned,
            &[pod(1, "web-v1", "ready"), pod(2, "web-v2", "ready")],
            &[&["create web-0@web-v1"]],
        );
        let on_delete = set(json!({"updateStrategy": {"type": "OnDelete"}}));
        check(&on_delete, &old, &[&[], &[], &[]]);
        let wide = set(json!({"podManagementPolicy": "Parallel",
                             "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}}));
        check(
            &wide,
            &old,
            &[&[], &[], &[], &["delete web-2", "delete web-1"]],
        );
        check(&wide, &midway, &[&[], &[], &[], &["delete web-1"]]);
    }

    #[test]
    fn status_counts_and_completion() {
        let mut s = set(json!({"minReadySeconds": 150}));
        s.status = Some(StatefulSetStatus {
            current_replicas: Some(3),
            ..Default::default()
        });
        let pods = [
            pod(0, "web-v1", "ready"),
            pod(1, "web-v1", "fresh"),
            pod(2, "web-v2", "pending"),
        ];
        let p = run(&s, &pods, 200);
        let st = &p.status;
        assert_eq!(st.replicas, 3);
        assert_eq!(
            (st.ready_replicas, st.available_replicas),
            (Some(2), Some(1))
        );
        assert_eq!(
            (st.current_replicas, st.updated_replicas),
            (Some(2), Some(1))
        );
        assert_eq!(st.observed_generation, Some(4));
        assert_eq!(
            (
                st.current_revision.as_deref(),
                st.update_revision.as_deref()
            ),
            (Some("web-v1"), Some("web-v2"))
        );
        assert!(status_changed(&s, st));

        let mut done = run(
            &s,
            &[
                pod(0, "web-v2", "ready"),
                pod(1, "web-v2", "ready"),
                pod(2, "web-v2", "ready"),
            ],
            200,
        )
        .status;
        complete_rolling_update(&s, &mut done);
        assert_eq!(
            (done.current_replicas, done.current_revision.as_deref()),
            (Some(3), Some("web-v2"))
        );
        let mut settled = s.clone();
        settled.status = Some(done.clone());
        assert!(!status_changed(&settled, &done));
    }

    #[test]
    fn claims_are_created_for_pending_pods_and_fixed_for_retention() {
        let s = set(json!({
            "podManagementPolicy": "Parallel", "replicas": 1,
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Retain"},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
        }));
        let mut p0 = pod(0, "web-v2", "pending");
        identity::update_storage(&s, &mut p0);
        let mut p1 = pod(1, "web-v2", "ready");
        identity::update_storage(&s, &mut p1);
        let claim = |name: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": name}}))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let claims: BTreeMap<String, PersistentVolumeClaim> =
            [("data-web-1".to_owned(), claim("data-web-1"))].into();
        let refs = [&p0, &p1];
        let (current, update) = (revision("web-v1", "v1"), revision("web-v2", "v2"));
        let plan = plan(&Input {
            set: &s,
            pods: &refs,
            claims: &claims,
            current: &current,
            update: &update,
            collision_count: 0,
            now: at(200),
        });
        assert_eq!(
            describe(&plan),
            [
                vec!["claims web-0"],
                vec!["fix web-1"],
                vec!["delete web-1"],
                vec![]
            ]
        );
        assert_eq!(
            max_unavailable_count(&IntOrString::String("10%".into()), 5),
            1
        );
        assert_eq!(
            max_unavailable_count(&IntOrString::String("50%".into()), 5),
            2
        );
    }
}
