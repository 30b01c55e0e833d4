//! The Job controller (upstream's `pkg/controller/job`, batch/v1 as of Kubernetes 1.33): runs
//! a Job's pods to completion. It keeps up to `parallelism` pods running until `completions`
//! of them succeed (or, with `completions` unset, until one succeeds and the rest finish),
//! creates them in slow-start batches under expectations, waits 10 s doubling to 6 min after
//! pod failures, and fails the Job past `backoffLimit` or `activeDeadlineSeconds`. Indexed
//! Jobs give each pod a completion index. Pods are counted through the
//! `batch.kubernetes.io/job-tracking` finalizer: a finished pod's UID goes to
//! `status.uncountedTerminatedPods`, its finalizer is removed, then it moves to the counters,
//! so no pod is counted twice or lost when it is deleted. Terminal conditions are preceded by
//! the interim `SuccessCriteriaMet` / `FailureTarget` ones, as upstream writes them.
//!
//! The decisions are pure functions of the Job, its pods and a fixed `now` ([`observe`],
//! [`plan_manage`], [`track`], [`enact_finished`]); [`reconcile`] only carries them out.

pub mod backoff;
pub mod indexes;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_client::events::{EventRecorder, EventType};
use futures::future::join_all;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::expectations::Expectations;
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};
use indexes::{COMPLETION_INDEX, COMPLETION_INDEX_ENV, Intervals};

/// The finalizer that keeps a finished pod until the Job has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The `spec.managedBy` value of Jobs this controller manages (also when unset).
pub const MANAGED_BY: &str = "kubernetes.io/job-controller";
/// At most this many pod UIDs wait in `uncountedTerminatedPods` (upstream's `MaxUncountedPods`).
const MAX_UNCOUNTED_PODS: usize = 500;
/// At most this many pods are created or deleted per sync.
const MAX_POD_CHANGES_PER_SYNC: usize = 500;
/// The shortest delay before a Job waiting for its backoff is synced again.
const SYNC_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// Upstream's `names.MaxGeneratedNameLength`.
const MAX_GENERATED_NAME: usize = 58;

/// Condition types.
pub const COMPLETE: &str = "Complete";
/// The Job failed.
pub const FAILED: &str = "Failed";
/// The Job is suspended.
pub const SUSPENDED: &str = "Suspended";
/// Interim: the Job will fail once its pods are gone.
pub const FAILURE_TARGET: &str = "FailureTarget";
/// Interim: the Job will complete once its pods are gone.
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";

/// The failure reasons and messages upstream writes.
pub const BACKOFF_LIMIT_EXCEEDED: (&str, &str) = (
    "BackoffLimitExceeded",
    "Job has reached the specified backoff limit",
);
/// The Job ran past `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: (&str, &str) = (
    "DeadlineExceeded",
    "Job was active longer than specified deadline",
);
/// The success reason and message (JobSuccessPolicy, GA in 1.33).
pub const COMPLETIONS_REACHED: (&str, &str) = (
    "CompletionsReached",
    "Reached expected number of succeeded pods",
);

// ----- Job and pod predicates -----

fn spec(job: &Job) -> k8s_openapi::api::batch::v1::JobSpec {
    job.spec.clone().unwrap_or_default()
}

fn condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn condition_true(job: &Job, type_: &str) -> bool {
    condition(job, type_).is_some_and(|c| c.status == "True")
}

/// A Job with a true `Complete` or `Failed` condition.
pub fn is_finished(job: &Job) -> bool {
    condition_true(job, COMPLETE) || condition_true(job, FAILED)
}

/// When the Job finished and how (`Complete` or `Failed`), if it did.
pub fn finished_at(job: &Job) -> Option<(&str, Option<Timestamp>)> {
    job.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find_map(|c| {
            ((c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True").then(|| {
                (
                    c.type_.as_str(),
                    c.last_transition_time.as_ref().map(|t| t.0),
                )
            })
        })
}

fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

fn is_suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

fn completions(job: &Job) -> Option<i32> {
    job.spec.as_ref().and_then(|s| s.completions)
}

fn completions_usize(job: &Job) -> usize {
    completions(job).unwrap_or(0).max(0) as usize
}

/// Whether a Job is left to another controller (`spec.managedBy`).
pub fn managed_elsewhere(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .is_some_and(|m| m != MANAGED_BY)
}

/// Terminating pods are not replaced until they are gone (podReplacementPolicy `Failed`,
/// implied by a pod failure policy).
fn only_replace_failed(job: &Job) -> bool {
    let spec = job.spec.as_ref();
    spec.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || spec.is_some_and(|s| s.pod_failure_policy.is_some())
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The pod carries the tracking finalizer.
pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_deref()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

/// Upstream's `isPodFailed`: failed, or deleted before it succeeded (unless only failed
/// pods count).
fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    !only_replace_failed(job)
        && pod.metadata.deletion_timestamp.is_some()
        && phase(pod) != "Succeeded"
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !matches!(phase(pod), "Failed" | "Succeeded")
}

/// A time as the API stores it (whole seconds).
fn time(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
        message: (!message.is_empty()).then(|| message.to_owned()),
        last_probe_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    }
}

/// Upstream's `ensureJobConditionStatus`: sets the condition of `type_` (a false one is
/// only updated, never added); whether anything changed.
pub fn ensure_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let same = existing.status == status
            && existing.reason.as_deref().unwrap_or_default() == reason
            && existing.message.as_deref().unwrap_or_default() == message;
        if same {
            return false;
        }
        *existing = new_condition(type_, status, reason, message, now);
        return true;
    }
    if status == "False" {
        return false;
    }
    conditions.push(new_condition(type_, status, reason, message, now));
    true
}

// ----- What one sync observes -----

/// What a sync reads from the Job and its pods before acting (upstream's `syncJobCtx`).
#[derive(Debug)]
pub struct Observed<'a> {
    /// Every pod of the Job, sorted by completion index for Indexed Jobs.
    pub pods: Vec<&'a Pod>,
    /// Its active pods.
    pub active: Vec<&'a Pod>,
    /// Active pods that are ready.
    pub ready: i32,
    /// Pods being deleted that have not finished.
    pub terminating: i32,
    /// Succeeded pods, counted and not yet counted.
    pub succeeded: i32,
    /// Failed pods, counted and not yet counted.
    pub failed: i32,
    /// `status.uncountedTerminatedPods` at the start of the sync.
    pub uncounted_succeeded: HashSet<String>,
    /// Likewise for failed pods.
    pub uncounted_failed: HashSet<String>,
    /// The backoff record with the newly finished pods counted.
    pub backoff: backoff::Record,
    /// The condition the Job finishes with, if it must (interim types included).
    pub finished: Option<JobCondition>,
    /// When the active deadline falls, if it is still ahead.
    pub deadline_in: Option<Duration>,
    /// Indexed Jobs: `status.completedIndexes` as it was.
    pub prev_succeeded_indexes: Intervals,
    /// Indexed Jobs: those plus indexes whose pods succeeded since.
    pub succeeded_indexes: Intervals,
    /// `status.startTime` (set now for a Job that starts).
    pub start_time: Option<Time>,
}

/// Reads the Job's state from `pods` (its pods) at `now` (the first half of upstream's
/// `syncJob`): counters, the backoff record, and whether the Job must fail (backoff limit,
/// restarts of `OnFailure` pods, deadline) or already met its success criteria.
pub fn observe<'a>(
    job: &Job,
    pods: &[&'a Pod],
    expected_rm: &HashSet<String>,
    old_backoff: backoff::Record,
    now: Timestamp,
) -> Observed<'a> {
    let spec = spec(job);
    let status = job.status.clone().unwrap_or_default();
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let uncounted_succeeded: HashSet<String> = uncounted
        .succeeded
        .unwrap_or_default()
        .into_iter()
        .collect();
    let uncounted_failed: HashSet<String> =
        uncounted.failed.unwrap_or_default().into_iter().collect();
    let indexed = is_indexed(job);
    let completions = completions_usize(job);
    let mut pods = pods.to_vec();
    if indexed {
        pods.sort_by_key(|p| indexes::completion_index(p).map_or(i64::MAX, |i| i as i64));
    }
    let active: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let ready = active.iter().filter(|p| pods::is_ready(p)).count() as i32;
    let terminating = pods.iter().filter(|p| is_terminating(p)).count() as i32;

    // Finished pods not counted yet (upstream's `getNewFinishedPods`).
    let countable = |p: &&Pod, uncounted: &HashSet<String>| {
        has_tracking_finalizer(p)
            && !uncounted.contains(uid(p))
            && !expected_rm.contains(uid(p))
            && (!indexed || indexes::completion_index(p).is_some_and(|i| i < completions))
    };
    let new_succeeded: Vec<&Pod> = pods
        .iter()
        .filter(|p| countable(p, &uncounted_succeeded) && phase(p) == "Succeeded")
        .copied()
        .collect();
    let new_failed: Vec<&Pod> = pods
        .iter()
        .filter(|p| countable(p, &uncounted_failed) && is_pod_failed(p, job))
        .copied()
        .collect();
    let mut succeeded =
        status.succeeded.unwrap_or(0) + (new_succeeded.len() + uncounted_succeeded.len()) as i32;
    let failed = status.failed.unwrap_or(0) + (new_failed.len() + uncounted_failed.len()) as i32;

    let mut start_time = status.start_time.clone();
    if start_time.is_none() && !is_suspended(job) {
        start_time = Some(time(now));
    }
    let backoff = old_backoff.next(&new_succeeded, &new_failed);

    let mut finished = condition(job, SUCCESS_CRITERIA_MET)
        .filter(|c| c.status == "True")
        .cloned();
    if finished.is_none()
        && let Some(target) = condition(job, FAILURE_TARGET).filter(|c| c.status == "True")
    {
        let (reason, message) = (
            target.reason.clone().unwrap_or_default(),
            target.message.clone().unwrap_or_default(),
        );
        finished = Some(new_condition(FAILED, "True", &reason, &message, now));
    }
    let mut deadline_in = None;
    if finished.is_none() {
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        if failed > backoff_limit || past_backoff_limit_on_failure(job, &pods, backoff_limit) {
            let (reason, message) = BACKOFF_LIMIT_EXCEEDED;
            finished = Some(new_condition(FAILURE_TARGET, "True", reason, message, now));
        } else if let (Some(deadline), Some(start), false) = (
            spec.active_deadline_seconds,
            start_time.as_ref(),
            is_suspended(job),
        ) {
            let elapsed = now.as_millisecond() - start.0.as_millisecond();
            let allowed = deadline.saturating_mul(1000);
            if elapsed >= allowed {
                let (reason, message) = DEADLINE_EXCEEDED;
                finished = Some(new_condition(FAILURE_TARGET, "True", reason, message, now));
            } else {
                deadline_in = Some(Duration::from_millis((allowed - elapsed) as u64));
            }
        }
    }

    let mut prev_succeeded_indexes = Intervals::default();
    let mut succeeded_indexes = Intervals::default();
    if indexed {
        prev_succeeded_indexes = Intervals::parse(
            status.completed_indexes.as_deref().unwrap_or_default(),
            completions,
        );
        let new = pods
            .iter()
            .filter(|p| phase(p) == "Succeeded" && has_tracking_finalizer(p));
        let new: Vec<usize> = indexes::indexes_of(new.copied())
            .into_iter()
            .filter(|i| *i < completions)
            .collect();
        succeeded_indexes = prev_succeeded_indexes.with_indexes(new);
        succeeded = succeeded_indexes.total() as i32;
    }
    Observed {
        pods,
        active,
        ready,
        terminating,
        succeeded,
        failed,
        uncounted_succeeded,
        uncounted_failed,
        backoff,
        finished,
        deadline_in,
        prev_succeeded_indexes,
        succeeded_indexes,
        start_time,
    }
}

/// Upstream's `pastBackoffLimitOnFailure`: with `restartPolicy: OnFailure`, container
/// restarts of running and pending pods count as failures.
fn past_backoff_limit_on_failure(job: &Job, pods: &[&Pod], limit: i32) -> bool {
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref());
    if policy != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            let init = s.init_container_statuses.iter().flatten();
            init.chain(s.container_statuses.iter().flatten())
                .map(|c| c.restart_count)
        })
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

// ----- Creating and deleting pods -----

/// What `manageJob` does in one sync.
#[derive(Debug, PartialEq)]
pub enum Manage<'a> {
    /// Delete these pods (too many, repeated indexes, or the Job is suspended).
    Delete(Vec<&'a Pod>),
    /// Create one pod per entry, with that completion index if any.
    Create(Vec<Option<usize>>),
    /// Pods are missing but failures ask to wait this long.
    Wait(Duration),
    /// Nothing to do.
    Nothing,
}

/// How many pods should be active (upstream's `wantActive`).
pub fn want_active(job: &Job, active: i32, succeeded: i32) -> i32 {
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    match completions(job) {
        // Work-queue Jobs: after one success, whatever runs is left to finish.
        None if succeeded > 0 => active,
        None => parallelism,
        Some(c) => (c - succeeded).min(parallelism).max(0),
    }
}

/// Which of `active` to delete to keep at least `count` off (upstream's
/// `activePodsForRemoval`): for Indexed Jobs every pod with a repeated, missing or
/// out-of-range index first; then the pods that matter least.
pub fn pods_for_removal<'a>(
    job: &Job,
    active: &[&'a Pod],
    count: usize,
    now: Timestamp,
) -> Vec<&'a Pod> {
    let (mut remove, left) = if is_indexed(job) {
        indexes::duplicates_for_removal(active, completions_usize(job), now)
    } else {
        (Vec::new(), active.to_vec())
    };
    if remove.len() < count {
        remove.extend(pods::pods_to_delete(
            &left,
            &left,
            count - remove.len(),
            now,
        ));
    }
    remove
}

/// Upstream's `manageJob` decision: delete surplus pods, or create missing ones unless the
/// failure backoff still runs.
pub fn plan_manage<'a>(job: &Job, obs: &Observed<'a>, now: Timestamp) -> Manage<'a> {
    let active = obs.active.len() as i32;
    if is_suspended(job) {
        return match pods_for_removal(job, &obs.active, obs.active.len(), now) {
            v if v.is_empty() => Manage::Nothing,
            v => Manage::Delete(v),
        };
    }
    let want = want_active(job, active, obs.succeeded);
    let surplus = (active - want).max(0) as usize;
    let mut victims = pods_for_removal(job, &obs.active, surplus, now);
    victims.truncate(MAX_POD_CHANGES_PER_SYNC);
    if !victims.is_empty() {
        return Manage::Delete(victims);
    }
    let terminating = if only_replace_failed(job) {
        obs.terminating
    } else {
        0
    };
    let missing = want - terminating - active;
    if missing <= 0 {
        return Manage::Nothing;
    }
    let wait = obs.backoff.remaining(now);
    if !wait.is_zero() {
        return Manage::Wait(wait.max(SYNC_BATCH_PERIOD));
    }
    let missing = (missing as usize).min(MAX_POD_CHANGES_PER_SYNC);
    if !is_indexed(job) {
        return Manage::Create(vec![None; missing]);
    }
    let mut taken = obs
        .succeeded_indexes
        .with_indexes(indexes::indexes_of(obs.active.iter().copied()));
    if only_replace_failed(job) {
        taken = taken.with_indexes(indexes::indexes_of(
            obs.pods.iter().copied().filter(|p| is_terminating(p)),
        ));
    }
    let pending = indexes::first_pending(&taken, missing, completions_usize(job));
    if pending.is_empty() {
        return Manage::Nothing;
    }
    Manage::Create(pending.into_iter().map(Some).collect())
}

/// Whether the Job has succeeded once `active` pods are left (upstream's completion check).
pub fn is_complete(job: &Job, succeeded: i32, active: i32) -> bool {
    match completions(job) {
        None => succeeded > 0 && active == 0,
        Some(c) => succeeded >= c && active == 0,
    }
}

/// The prefix of the names of an Indexed Job's pods for `index` (upstream's
/// `podGenerateNameWithIndex`, without the trailing dash).
fn indexed_prefix(job_name: &str, index: usize) -> String {
    let suffix = format!("-{index}-");
    let keep = MAX_GENERATED_NAME
        .saturating_sub(suffix.len())
        .min(job_name.len());
    let mut cut = keep;
    while !job_name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{index}", &job_name[..cut])
}

/// The pod the Job creates (for `index`, in an Indexed Job): the template with the tracking
/// finalizer and, when indexed, the completion index as annotation, label, hostname,
/// name prefix and `JOB_COMPLETION_INDEX` variable.
pub fn pod_for(job: &Job, index: Option<usize>) -> Pod {
    let meta = &job.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let mut template = spec(job).template;
    let tmeta = template.metadata.get_or_insert_with(Default::default);
    let finalizers = tmeta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.to_owned());
    }
    let mut prefix = name.clone();
    if let Some(index) = index {
        let value = index.to_string();
        tmeta
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(COMPLETION_INDEX.to_owned(), value.clone());
        tmeta
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(COMPLETION_INDEX.to_owned(), value);
        prefix = indexed_prefix(&name, index);
        if let Some(pod_spec) = template.spec.as_mut() {
            pod_spec.hostname = Some(format!("{name}-{index}"));
            let containers = pod_spec
                .init_containers
                .iter_mut()
                .flatten()
                .chain(pod_spec.containers.iter_mut());
            for container in containers {
                let env = container.env.get_or_insert_with(Vec::new);
                if !env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
                    env.push(EnvVar {
                        name: COMPLETION_INDEX_ENV.to_owned(),
                        value: None,
                        value_from: Some(EnvVarSource {
                            field_ref: Some(ObjectFieldSelector {
                                api_version: None,
                                field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                            }),
                            ..EnvVarSource::default()
                        }),
                    });
                }
            }
        }
    }
    let owner = pods::controller_ref("batch/v1", "Job", meta);
    pods::pod_from_template(
        &template,
        meta.namespace.as_deref().unwrap_or_default(),
        &prefix,
        owner,
    )
}

// ----- Counting finished pods -----

/// What [`track`] decided.
#[derive(Debug, Default)]
pub struct Tracking<'a> {
    /// Pods whose finalizer is removed now.
    pub remove_finalizer: Vec<&'a Pod>,
    /// The status changed and must be written before finalizers are removed.
    pub needs_flush: bool,
    /// `uncountedTerminatedPods` is full; the Job cannot finish in this sync.
    pub reached_max: bool,
}

/// Moves the UIDs of pods whose finalizer is gone (not in `with_finalizer`) from
/// `uncountedTerminatedPods` to the counters; whether anything moved.
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut changed = false;
    for (list, counter) in [
        (&mut uncounted.succeeded, &mut status.succeeded),
        (&mut uncounted.failed, &mut status.failed),
    ] {
        let before = list.as_ref().map_or(0, Vec::len);
        if let Some(l) = list.as_mut() {
            l.retain(|u| with_finalizer.contains(u));
        }
        let after = list.as_ref().map_or(0, Vec::len);
        if after != before {
            changed = true;
            *counter = Some(counter.unwrap_or(0) + (before - after) as i32);
        }
        if list.as_ref().is_some_and(Vec::is_empty) {
            *list = None;
        }
    }
    changed
}

/// UIDs of the pods that still carry a finalizer not being removed.
pub fn uids_with_finalizer(pods: &[&Pod], expected_rm: &HashSet<String>) -> HashSet<String> {
    pods.iter()
        .filter(|p| has_tracking_finalizer(p) && !expected_rm.contains(uid(p)))
        .map(|p| uid(p).to_owned())
        .collect()
}

/// The first half of upstream's `trackJobStatusAndRemoveFinalizers`: which finished pods to
/// record in `uncountedTerminatedPods` (and `completedIndexes`) and release from their
/// finalizer, and which interim condition to write; `finished` becomes the terminal
/// condition to add once every pod is counted.
pub fn track<'a>(
    job: &Job,
    status: &mut JobStatus,
    obs: &Observed<'a>,
    finished: &mut Option<JobCondition>,
    expected_rm: &HashSet<String>,
    now: Timestamp,
) -> Tracking<'a> {
    let indexed = is_indexed(job);
    let completions = completions_usize(job);
    let mut out = Tracking::default();
    let with_finalizer = uids_with_finalizer(&obs.pods, expected_rm);
    out.needs_flush |= clean_uncounted(status, &with_finalizer);
    let deleting = job.metadata.deletion_timestamp.is_some();
    let mut new_indexes = Vec::new();
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(UncountedTerminatedPods::default);
    let mut succeeded_list = uncounted.succeeded.take().unwrap_or_default();
    let mut failed_list = uncounted.failed.take().unwrap_or_default();
    for pod in &obs.pods {
        let id = uid(pod);
        if !has_tracking_finalizer(pod) || expected_rm.contains(id) {
            continue;
        }
        let failed = is_pod_failed(pod, job);
        if !(deleting || finished.is_some() || phase(pod) == "Succeeded" || failed) {
            continue;
        }
        out.remove_finalizer.push(pod);
        let index = indexes::completion_index(pod).filter(|i| *i < completions);
        if phase(pod) == "Succeeded" && !obs.uncounted_failed.contains(id) {
            if indexed {
                if let Some(i) = index.filter(|i| !obs.prev_succeeded_indexes.has(*i)) {
                    new_indexes.push(i);
                    out.needs_flush = true;
                }
            } else if !obs.uncounted_succeeded.contains(id) {
                succeeded_list.push(id.to_owned());
                out.needs_flush = true;
            }
        } else if (failed
            || finished
                .as_ref()
                .is_some_and(|c| c.type_ != SUCCESS_CRITERIA_MET))
            && !obs.uncounted_failed.contains(id)
            && (!indexed || index.is_some())
        {
            failed_list.push(id.to_owned());
            out.needs_flush = true;
        }
        if new_indexes.len() + succeeded_list.len() + failed_list.len() >= MAX_UNCOUNTED_PODS {
            out.reached_max = true;
            break;
        }
    }
    uncounted.succeeded = (!succeeded_list.is_empty()).then_some(succeeded_list);
    uncounted.failed = (!failed_list.is_empty()).then_some(failed_list);
    if indexed {
        let done = obs.succeeded_indexes.with_indexes(new_indexes);
        let text = done.to_string();
        if text != status.completed_indexes.clone().unwrap_or_default() {
            out.needs_flush = true;
        }
        status.succeeded = Some(done.total() as i32).filter(|n| *n > 0);
        status.completed_indexes = (!text.is_empty()).then_some(text);
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(target) = finished
        .as_ref()
        .filter(|c| c.type_ == FAILURE_TARGET)
        .cloned()
    {
        conditions.push(target.clone());
        out.needs_flush = true;
        let (reason, message) = (
            target.reason.unwrap_or_default(),
            target.message.unwrap_or_default(),
        );
        *finished = Some(new_condition(FAILED, "True", &reason, &message, now));
    }
    if let Some(met) = finished
        .as_ref()
        .filter(|c| c.type_ == SUCCESS_CRITERIA_MET)
        .cloned()
    {
        if !conditions
            .iter()
            .any(|c| c.type_ == SUCCESS_CRITERIA_MET && c.status == "True")
        {
            conditions.push(met.clone());
            out.needs_flush = true;
        }
        let (reason, message) = (
            met.reason.unwrap_or_default(),
            met.message.unwrap_or_default(),
        );
        *finished = Some(new_condition(COMPLETE, "True", &reason, &message, now));
    }
    if conditions.is_empty() {
        status.conditions = None;
    }
    out
}

/// Upstream's `enactJobFinished`: adds the terminal condition once no pod is uncounted or
/// terminating; whether the Job finished.
pub fn enact_finished(
    status: &mut JobStatus,
    finished: Option<&JobCondition>,
    terminating: i32,
    now: Timestamp,
) -> bool {
    let Some(finished) = finished else {
        return false;
    };
    let uncounted = status.uncounted_terminated_pods.as_ref();
    let pending = uncounted.map_or(0, |u| {
        u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
    });
    if pending > 0 || terminating > 0 {
        return false;
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    ensure_condition(
        conditions,
        &finished.type_,
        &finished.status,
        finished.reason.as_deref().unwrap_or_default(),
        finished.message.as_deref().unwrap_or_default(),
        now,
    );
    if finished.type_ == COMPLETE {
        status.completion_time = conditions
            .iter()
            .find(|c| c.type_ == COMPLETE)
            .and_then(|c| c.last_transition_time.clone());
    }
    true
}

// ----- The controller -----

/// Pod UIDs whose finalizer removal a Job waits to observe (upstream's
/// `uidTrackingExpectations`).
#[derive(Debug, Default)]
pub struct FinalizerExpectations {
    by_job: Mutex<HashMap<String, HashSet<String>>>,
}

impl FinalizerExpectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, HashSet<String>>) -> T) -> T {
        f(&mut self.by_job.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The UIDs still expected for `key`.
    pub fn expected(&self, key: &str) -> HashSet<String> {
        self.with(|m| m.get(key).cloned().unwrap_or_default())
    }

    /// Expects the removal of the finalizers of `uids`.
    pub fn expect(&self, key: &str, uids: impl IntoIterator<Item = String>) {
        self.with(|m| m.entry(key.to_owned()).or_default().extend(uids));
    }

    /// The finalizer of `uid` is gone (or will not go).
    pub fn observed(&self, key: &str, uid: &str) {
        self.with(|m| {
            if let Some(set) = m.get_mut(key) {
                set.remove(uid);
                if set.is_empty() {
                    m.remove(key);
                }
            }
        })
    }

    /// Forgets the Job `key`.
    pub fn forget(&self, key: &str) {
        self.with(|m| {
            m.remove(key);
        })
    }
}

/// The controller's shared state.
pub struct Context {
    client: Client,
    jobs: Store<Job>,
    pods: Store<Pod>,
    expectations: Arc<Expectations>,
    finalizers: Arc<FinalizerExpectations>,
    backoffs: Arc<Mutex<HashMap<String, backoff::Record>>>,
    recorder: EventRecorder,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("controller", &"job")
            .finish()
    }
}

/// Registers the informer handlers and returns the controller's run future (the Job queue
/// and the queue of orphaned pods whose tracking finalizer must go).
pub fn start(mut setup: Setup<'_>) -> Task {
    let job_informer = setup.watch::<Job>();
    let pod_informer = setup.watch::<Pod>();
    let (queue, rx) = Queue::<Job>::new();
    let (orphans, orphan_rx) = Queue::<Pod>::new();
    let expectations = Arc::new(Expectations::default());
    let finalizers = Arc::new(FinalizerExpectations::default());
    let backoffs: Arc<Mutex<HashMap<String, backoff::Record>>> = Arc::default();
    {
        let (queue, orphans, pods) = (queue.clone(), orphans.clone(), pod_informer.store());
        let (expectations, finalizers, backoffs) =
            (expectations.clone(), finalizers.clone(), backoffs.clone());
        job_informer.on_change(move |change| match change {
            Change::Applied { new, .. } => {
                queue.add(ObjectRef::from_obj(*new));
                if is_finished(new) {
                    release_finalizers_of(new, &pods, &orphans);
                }
            }
            Change::Deleted(job) => {
                let key = pods::key(&job.metadata);
                expectations.forget(&key);
                finalizers.forget(&key);
                backoffs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
                release_finalizers_of(job, &pods, &orphans);
            }
        });
    }
    {
        let (queue, orphans, jobs) = (queue.clone(), orphans.clone(), job_informer.store());
        let (expectations, finalizers) = (expectations.clone(), finalizers.clone());
        pod_informer.on_change(move |change| {
            on_pod_change(change, &jobs, &queue, &orphans, &expectations, &finalizers)
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        jobs: job_informer.store(),
        pods: pod_informer.store(),
        expectations,
        finalizers,
        backoffs,
        recorder: setup.recorder("job-controller"),
    });
    let jobs = setup.run("job", &job_informer, rx, ctx.clone(), reconcile);
    setup.concurrency = 1;
    let orphan_pods = setup.run(
        "job-orphan-pods",
        &pod_informer,
        orphan_rx,
        ctx,
        sync_orphan_pod,
    );
    Box::pin(async move {
        futures::join!(jobs, orphan_pods);
    })
}

/// Queues the pods of a finished or deleted Job that still carry the finalizer (upstream's
/// `cleanupPodFinalizers`).
fn release_finalizers_of(job: &Job, pods: &Store<Pod>, orphans: &Queue<Pod>) {
    let uid = job.metadata.uid.as_deref();
    for pod in pods.state_filter(|p| {
        p.metadata.namespace == job.metadata.namespace
            && has_tracking_finalizer(p)
            && pods::controller_of(&p.metadata).map(|r| r.uid.as_str()) == uid
    }) {
        orphans.add(ObjectRef::from_obj(&*pod));
    }
}

/// The Job a controller reference names, if it is in the cache with that UID.
fn job_of(
    pod: &Pod,
    reference: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    jobs: &Store<Job>,
) -> Option<Arc<Job>> {
    if reference.kind != "Job" || !reference.api_version.starts_with("batch/") {
        return None;
    }
    let namespace = pod.metadata.namespace.as_deref()?;
    let job = jobs.get(&ObjectRef::new(&reference.name).within(namespace))?;
    (job.metadata.uid.as_deref() == Some(reference.uid.as_str())).then_some(job)
}

fn selector_of(job: &Job) -> Option<Selector> {
    let selector = job.spec.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

/// Upstream's pod handlers: expectations observed, the owning Job queued (orphans offered to
/// every Job selecting them), finalizers of orphans queued for removal.
fn on_pod_change(
    change: &Change<'_, Pod>,
    jobs: &Store<Job>,
    queue: &Queue<Job>,
    orphans: &Queue<Pod>,
    expectations: &Expectations,
    finalizers: &FinalizerExpectations,
) {
    let enqueue_matching = |pod: &Pod| {
        let labels = pods::labels_of(&pod.metadata);
        for job in jobs.state_filter(|j| {
            j.metadata.namespace == pod.metadata.namespace
                && selector_of(j).is_some_and(|s| s.matches(labels))
        }) {
            queue.add(ObjectRef::from_obj(&*job));
        }
    };
    let deleted = |pod: &Pod, last: bool| {
        let Some(reference) = pods::controller_of(&pod.metadata) else {
            if has_tracking_finalizer(pod) {
                orphans.add(ObjectRef::from_obj(pod));
            }
            return;
        };
        let job = job_of(pod, reference, jobs);
        let Some(job) = job.filter(|j| !is_finished(j)) else {
            if has_tracking_finalizer(pod) {
                orphans.add(ObjectRef::from_obj(pod));
            }
            return;
        };
        let key = pods::key(&job.metadata);
        expectations.deletion_observed(&key, &pods::key(&pod.metadata));
        if last || !has_tracking_finalizer(pod) {
            finalizers.observed(&key, uid(pod));
        }
        queue.add(ObjectRef::from_obj(&*job));
    };
    match change {
        Change::Deleted(pod) => deleted(pod, true),
        Change::Applied { old: None, new } => {
            if new.metadata.deletion_timestamp.is_some() {
                return deleted(new, false);
            }
            if let Some(reference) = pods::controller_of(&new.metadata) {
                if let Some(job) = job_of(new, reference, jobs) {
                    expectations.creation_observed(&pods::key(&job.metadata));
                    queue.add(ObjectRef::from_obj(&*job));
                }
                return;
            }
            if has_tracking_finalizer(new) {
                orphans.add(ObjectRef::from_obj(*new));
            }
            enqueue_matching(new);
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            if new.metadata.deletion_timestamp.is_some() {
                return deleted(new, false);
            }
            let removed = !has_tracking_finalizer(new);
            let old_ref = pods::controller_of(&old.metadata);
            let new_ref = pods::controller_of(&new.metadata);
            let changed = old_ref != new_ref;
            if changed && let Some(job) = old_ref.and_then(|r| job_of(old, r, jobs)) {
                if removed {
                    finalizers.observed(&pods::key(&job.metadata), uid(new));
                }
                queue.add(ObjectRef::from_obj(&*job));
            }
            if let Some(reference) = new_ref {
                if let Some(job) = job_of(new, reference, jobs) {
                    if removed {
                        finalizers.observed(&pods::key(&job.metadata), uid(new));
                    }
                    queue.add(ObjectRef::from_obj(&*job));
                }
                return;
            }
            if has_tracking_finalizer(new) {
                orphans.add(ObjectRef::from_obj(*new));
            }
            if changed || old.metadata.labels != new.metadata.labels {
                enqueue_matching(new);
            }
        }
    }
}

/// Removes the tracking finalizer from a pod no unfinished Job owns (upstream's
/// `syncOrphanPod`).
async fn sync_orphan_pod(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Error> {
    if let Some(reference) = pods::controller_of(&pod.metadata) {
        if reference.kind != "Job" || reference.api_version != "batch/v1" {
            return Ok(Action::await_change());
        }
        if let Some(job) = job_of(&pod, reference, &ctx.jobs)
            && (managed_elsewhere(&job) || !is_finished(&job))
        {
            return Ok(Action::await_change());
        }
    }
    if has_tracking_finalizer(&pod) {
        let api: Api<Pod> = Api::namespaced(
            ctx.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        remove_finalizer(&api, &pod).await?;
    }
    Ok(Action::await_change())
}

fn remove_finalizer_patch() -> serde_json::Value {
    json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
}

async fn remove_finalizer(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    match api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(remove_finalizer_patch()),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if runtime::is_not_found(&error) => Ok(()),
        Err(error) => Err(error),
    }
}

/// What claiming decided about the pods in the Job's namespace (upstream's `ClaimPods`).
#[derive(Debug, Default)]
struct Claims<'a> {
    owned: Vec<&'a Pod>,
    adopt: Vec<&'a Pod>,
    release: Vec<&'a Pod>,
}

/// Every pod the Job controls and matches (whatever its phase), orphans to adopt and owned
/// pods that stopped matching.
fn claim<'a>(job: &Job, selector: Option<&Selector>, candidates: &[&'a Pod]) -> Claims<'a> {
    let mut claims = Claims::default();
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let deleting = job.metadata.deletion_timestamp.is_some();
    for pod in candidates.iter().copied() {
        let labels = pods::labels_of(&pod.metadata);
        let matches = selector.is_some_and(|s| s.matches(labels));
        match pods::controller_of(&pod.metadata) {
            Some(r) if r.uid != uid => {}
            Some(_) if matches => claims.owned.push(pod),
            Some(_) if deleting => {}
            Some(_) => claims.release.push(pod),
            None if matches && !deleting && pod.metadata.deletion_timestamp.is_none() => {
                claims.adopt.push(pod)
            }
            None => {}
        }
    }
    claims
}

/// Upstream's `getPodsForJob`: claims the pods, adopting orphans (with the tracking
/// finalizer) after checking afresh that the Job is still there and not being deleted.
async fn pods_for_job(ctx: &Context, job: &Job) -> Result<Vec<Arc<Pod>>, Error> {
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let candidates = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let candidates: Vec<&Pod> = candidates.iter().map(|p| &**p).collect();
    let selector = selector_of(job);
    let claims = claim(job, selector.as_ref(), &candidates);
    let mut owned: Vec<Arc<Pod>> = claims
        .owned
        .iter()
        .map(|p| Arc::new((*p).clone()))
        .collect();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if !claims.adopt.is_empty() && still_there(ctx, job).await? {
        let owner = pods::controller_ref("batch/v1", "Job", &job.metadata);
        for pod in claims.adopt {
            let patch = json!({"metadata": {
                "ownerReferences": [owner], "uid": pod.metadata.uid, "finalizers": [TRACKING_FINALIZER],
            }});
            if patch_pod(&api, pod, patch).await? {
                let mut adopted = pod.clone();
                adopted.metadata.owner_references = Some(vec![owner.clone()]);
                if !has_tracking_finalizer(&adopted) {
                    adopted
                        .metadata
                        .finalizers
                        .get_or_insert_with(Vec::new)
                        .push(TRACKING_FINALIZER.to_owned());
                }
                owned.push(Arc::new(adopted));
            }
        }
    }
    for pod in claims.release {
        let patch = json!({"metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": uid}],
            "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
            "uid": pod.metadata.uid,
        }});
        patch_pod(&api, pod, patch).await?;
    }
    Ok(owned)
}

async fn still_there(ctx: &Context, job: &Job) -> Result<bool, Error> {
    let api: Api<Job> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    match api
        .get(job.metadata.name.as_deref().unwrap_or_default())
        .await
    {
        Ok(fresh) => {
            Ok(fresh.metadata.uid == job.metadata.uid
                && fresh.metadata.deletion_timestamp.is_none())
        }
        Err(error) if runtime::is_not_found(&error) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

async fn patch_pod(api: &Api<Pod>, pod: &Pod, patch: serde_json::Value) -> Result<bool, Error> {
    pods::patch_ownership(api, pod.metadata.name.as_deref().unwrap_or_default(), patch).await
}

/// Deletes pods; returns how many of the deleted were ready, how many were deleted, and the
/// first error. With `key`, the deletions are expected and the finalizer goes first
/// (upstream's `deleteJobPods`); without, finalizers stay for counting (`deleteActivePods`).
async fn delete_pods(
    ctx: &Context,
    job: &Job,
    victims: &[&Pod],
    key: Option<&str>,
) -> (i32, i32, Option<kube::Error>) {
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    if let Some(key) = key {
        ctx.expectations
            .expect_deletions(key, victims.iter().map(|p| pods::key(&p.metadata)));
    }
    let results = join_all(victims.iter().map(|pod| {
        let api = api.clone();
        async move {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let result = async {
                if key.is_some() && has_tracking_finalizer(pod) {
                    remove_finalizer(&api, pod).await?;
                }
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
            .await;
            match result {
                Ok(()) => {
                    ctx.recorder.record(
                        pods::object_reference(job),
                        EventType::Normal,
                        "SuccessfulDelete",
                        format!("Deleted pod: {name}"),
                    );
                    (pods::is_ready(pod), Ok(()))
                }
                Err(error) => {
                    if let Some(key) = key {
                        ctx.expectations
                            .deletion_observed(key, &pods::key(&pod.metadata));
                    }
                    if runtime::is_not_found(&error) {
                        return (pods::is_ready(pod), Ok(()));
                    }
                    ctx.recorder.record(
                        pods::object_reference(job),
                        EventType::Warning,
                        "FailedDelete",
                        format!("Error deleting: {}", pods::error_message(&error)),
                    );
                    (false, Err(error))
                }
            }
        }
    }))
    .await;
    let mut ready = 0;
    let mut deleted = 0;
    let mut first_error = None;
    for (was_ready, result) in results {
        match result {
            Ok(()) => {
                deleted += 1;
                ready += i32::from(was_ready);
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    (ready, deleted, first_error)
}

/// Creates one pod per entry of `indexes` in slow-start batches under expectations; returns
/// how many were created and the first error.
async fn create_pods(
    ctx: &Context,
    job: &Job,
    key: &str,
    indexes: &[Option<usize>],
) -> (i32, Option<kube::Error>) {
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.expectations.expect_creations(key, indexes.len());
    let mut done = 0;
    let mut created = 0;
    let mut batch = 1;
    let mut first_error = None;
    let owner = pods::object_reference(job);
    while done < indexes.len() {
        let size = batch.min(indexes.len() - done);
        let results = join_all(indexes[done..done + size].iter().map(|index| {
            let pod = pod_for(job, *index);
            let (api, owner) = (&api, &owner);
            async move { pods::create_pod(api, &pod, &ctx.recorder, owner).await }
        }))
        .await;
        for result in results {
            match result {
                Ok(_) => created += 1,
                Err(error) => {
                    ctx.expectations.creation_observed(key);
                    if !pods::namespace_terminating(&error) {
                        first_error.get_or_insert(error);
                    }
                }
            }
        }
        done += size;
        if first_error.is_some() {
            // The rest are not tried now and will not be observed.
            for _ in done..indexes.len() {
                ctx.expectations.creation_observed(key);
            }
            break;
        }
        batch *= 2;
    }
    (created, first_error)
}

/// Writes the status; the Job as the API returned it.
async fn write_status(ctx: &Context, job: &Job) -> Result<Job, Error> {
    let api: Api<Job> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    Ok(api
        .replace_status(
            job.metadata.name.as_deref().unwrap_or_default(),
            &PostParams::default(),
            job,
        )
        .await?)
}

fn min_delay(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One sync of a Job (upstream's `syncJob`).
pub async fn reconcile(shared: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = pods::key(&shared.metadata);
    if is_finished(&shared) {
        ctx.backoffs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        return Ok(Action::await_change());
    }
    if managed_elsewhere(&shared) {
        return Ok(Action::await_change());
    }
    let mode = shared
        .spec
        .as_ref()
        .and_then(|s| s.completion_mode.as_deref());
    if !matches!(mode, None | Some("NonIndexed" | "Indexed")) {
        ctx.recorder.record(
            pods::object_reference(&*shared),
            EventType::Warning,
            "UnknownCompletionMode",
            "Skipped Job sync because completion mode is unknown".to_owned(),
        );
        return Ok(Action::await_change());
    }
    let mut job = (*shared).clone();
    let satisfied = ctx.expectations.satisfied(&key);
    let owned = pods_for_job(&ctx, &job).await?;
    let owned: Vec<&Pod> = owned.iter().map(|p| &**p).collect();
    let expected_rm = ctx.finalizers.expected(&key);
    let now = pods::now();
    let old_backoff = ctx
        .backoffs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .copied()
        .unwrap_or_default();
    let obs = observe(&job, &owned, &expected_rm, old_backoff, now);

    let mut status = job.status.clone().unwrap_or_default();
    status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    status.start_time = obs.start_time.clone();
    let mut active = obs.active.len() as i32;
    let mut ready = obs.ready;
    let mut terminating = obs.terminating;
    let mut finished = obs.finished.clone();
    let mut requeue = obs.deadline_in;
    let mut manage_error = None;
    let mut suspend_changed = false;
    if finished.is_some() {
        let (deleted_ready, deleted, error) = delete_pods(&ctx, &job, &obs.active, None).await;
        if deleted != active || !satisfied {
            // Pods may remain, or not be in the cache yet.
            finished = None;
        }
        active -= deleted;
        terminating += deleted;
        ready -= deleted_ready;
        manage_error = error;
    } else {
        let mut managed = false;
        if satisfied && job.metadata.deletion_timestamp.is_none() {
            managed = true;
            match plan_manage(&job, &obs, now) {
                Manage::Delete(victims) => {
                    let (deleted_ready, deleted, error) =
                        delete_pods(&ctx, &job, &victims, Some(&key)).await;
                    active -= deleted;
                    terminating += deleted;
                    ready -= deleted_ready;
                    manage_error = error;
                }
                Manage::Create(indexes) => {
                    let (created, error) = create_pods(&ctx, &job, &key, &indexes).await;
                    active += created;
                    manage_error = error;
                }
                Manage::Wait(delay) => requeue = min_delay(requeue, Some(delay)),
                Manage::Nothing => {}
            }
        }
        if is_complete(&job, obs.succeeded, active) {
            let (reason, message) = COMPLETIONS_REACHED;
            finished = Some(new_condition(
                SUCCESS_CRITERIA_MET,
                "True",
                reason,
                message,
                now,
            ));
        } else if managed {
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            if is_suspended(&job) {
                if ensure_condition(
                    conditions,
                    SUSPENDED,
                    "True",
                    "JobSuspended",
                    "Job suspended",
                    now,
                ) {
                    suspend_changed = true;
                    ctx.recorder.record(
                        pods::object_reference(&job),
                        EventType::Normal,
                        "Suspended",
                        "Job suspended".to_owned(),
                    );
                }
            } else if ensure_condition(
                conditions,
                SUSPENDED,
                "False",
                "JobResumed",
                "Job resumed",
                now,
            ) {
                suspend_changed = true;
                ctx.recorder.record(
                    pods::object_reference(&job),
                    EventType::Normal,
                    "Resumed",
                    "Job resumed".to_owned(),
                );
                // The deadline counts from the resumption.
                status.start_time = Some(time(now));
            }
            if conditions.is_empty() {
                status.conditions = None;
            }
        }
    }

    let old = job.status.clone().unwrap_or_default();
    let mut needs_flush = suspend_changed
        || Some(active).filter(|a| *a > 0) != old.active.filter(|a| *a > 0)
        || old.ready != Some(ready)
        || old.terminating != Some(terminating);
    status.active = Some(active).filter(|a| *a > 0);
    status.ready = Some(ready);
    status.terminating = Some(terminating);

    // Count finished pods through the finalizers (upstream's `trackJobStatusAndRemoveFinalizers`).
    let tracking = track(&job, &mut status, &obs, &mut finished, &expected_rm, now);
    needs_flush |= tracking.needs_flush;
    job.status = Some(status);
    if needs_flush {
        job = write_status(&ctx, &job).await?;
        ctx.backoffs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), obs.backoff);
        needs_flush = false;
    }
    let mut with_finalizer = uids_with_finalizer(&obs.pods, &expected_rm);
    let mut removal_error = None;
    if !tracking.remove_finalizer.is_empty() {
        let uids: Vec<String> = tracking
            .remove_finalizer
            .iter()
            .map(|p| uid(p).to_owned())
            .collect();
        ctx.finalizers.expect(&key, uids);
        let api: Api<Pod> = Api::namespaced(
            ctx.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let results = join_all(tracking.remove_finalizer.iter().map(|pod| {
            let api = api.clone();
            async move { (uid(pod).to_owned(), remove_finalizer(&api, pod).await) }
        }))
        .await;
        for (id, result) in results {
            match result {
                Ok(()) => {
                    with_finalizer.remove(&id);
                }
                Err(error) => {
                    ctx.finalizers.observed(&key, &id);
                    removal_error.get_or_insert(error);
                }
            }
        }
    }
    let mut status = job.status.clone().unwrap_or_default();
    if clean_uncounted(&mut status, &with_finalizer) {
        needs_flush = true;
    }
    if let Some(error) = removal_error {
        if needs_flush {
            job.status = Some(status);
            write_status(&ctx, &job).await?;
        }
        return Err(error.into());
    }
    let done =
        !tracking.reached_max && enact_finished(&mut status, finished.as_ref(), terminating, now);
    needs_flush |= done;
    if needs_flush {
        job.status = Some(status.clone());
        write_status(&ctx, &job).await?;
        if done && let Some(finished) = &finished {
            if finished.type_ == COMPLETE {
                if completions(&job).is_some_and(|c| status.succeeded.unwrap_or(0) > c) {
                    ctx.recorder.record(
                        pods::object_reference(&job),
                        EventType::Warning,
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached".to_owned(),
                    );
                }
                ctx.recorder.record(
                    pods::object_reference(&job),
                    EventType::Normal,
                    "Completed",
                    "Job completed".to_owned(),
                );
            } else {
                ctx.recorder.record(
                    pods::object_reference(&job),
                    EventType::Warning,
                    finished.reason.as_deref().unwrap_or_default(),
                    finished.message.clone().unwrap_or_default(),
                );
            }
        }
    }
    if let Some(error) = manage_error {
        return Err(error.into());
    }
    Ok(match requeue {
        Some(delay) => Action::requeue(delay),
        None => Action::await_change(),
    })
}

#[cfg(test)]
mod tests;
