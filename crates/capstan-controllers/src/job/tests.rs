//! Table tests of the Job controller's decisions against fixed Jobs, pods and a fixed `now`.

use super::*;
use serde_json::{Value, json};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap_or_default()
}

fn job(spec: Value, status: Value) -> Job {
    let mut spec_full = json!({
        "parallelism": 2, "completions": 4, "backoffLimit": 6, "completionMode": "NonIndexed",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "j1"}},
        "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "j1"}},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
    });
    if let (Some(base), Some(extra)) = (spec_full.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": "pi", "namespace": "ns", "uid": "j1"},
        "spec": spec_full, "status": status,
    }))
    .unwrap_or_else(|e| panic!("bad job: {e}"))
}

/// A pod of job `pi`: `phase`, with the tracking finalizer, optional index, finished at `end`.
fn pod(name: &str, phase: &str, index: Option<usize>, end: i64) -> Pod {
    let annotations = index.map(|i| json!({COMPLETION_INDEX: i.to_string()}));
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name, "finalizers": [TRACKING_FINALIZER],
                     "annotations": annotations, "creationTimestamp": at(-1000).to_string(),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "j1", "controller": true}]},
        "spec": {"containers": [], "nodeName": "n1"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if phase == "Running" { "True" } else { "False" },
                   "lastTransitionTime": at(end).to_string()}]},
    }))
    .unwrap_or_else(|e| panic!("bad pod: {e}"))
}

fn names(pods: &[&Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn wanted_active_pods() {
    let check = |spec: Value, active: i32, succeeded: i32, want: i32| {
        assert_eq!(
            want_active(&job(spec.clone(), json!({})), active, succeeded),
            want,
            "{spec} active {active} succeeded {succeeded}"
        );
    };
    check(json!({}), 0, 0, 2);
    check(json!({}), 0, 3, 1);
    check(json!({}), 0, 5, 0);
    check(json!({"completions": null, "parallelism": 3}), 0, 0, 3);
    // Work queue: after one success, whatever runs finishes and nothing new starts.
    check(json!({"completions": null, "parallelism": 3}), 2, 1, 2);
    check(json!({"completions": null, "parallelism": 3}), 0, 1, 0);
    check(json!({"parallelism": 0}), 0, 0, 0);
}

#[test]
fn manage_creates_deletes_and_waits() {
    let now = at(0);
    let none = HashSet::new();
    let plan = |j: &Job, pods: &[&Pod], backoff: backoff::Record| -> (String, Vec<String>) {
        let obs = observe(j, pods, &none, backoff, now);
        match plan_manage(j, &obs, now) {
            Manage::Create(v) => (
                "create".into(),
                v.iter().map(|i| format!("{i:?}")).collect(),
            ),
            Manage::Delete(v) => ("delete".into(), names(&v)),
            Manage::Wait(d) => ("wait".into(), vec![d.as_secs().to_string()]),
            Manage::Nothing => ("nothing".into(), vec![]),
        }
    };
    let j = job(json!({}), json!({}));
    assert_eq!(
        plan(&j, &[], Default::default()),
        ("create".into(), vec!["None".into(), "None".into()])
    );
    let (a, b, c) = (
        pod("a", "Running", None, 0),
        pod("b", "Pending", None, 0),
        pod("c", "Running", None, 0),
    );
    assert_eq!(plan(&j, &[&a, &b, &c], Default::default()).0, "delete");
    assert_eq!(
        plan(&j, &[&a, &b, &c], Default::default()).1,
        ["b"],
        "the pending pod goes first"
    );
    assert_eq!(plan(&j, &[&a, &b], Default::default()).0, "nothing");

    // One new failure 4 s ago: wait 6 s more; failures before it double the delay.
    let f = pod("f", "Failed", None, -4);
    assert_eq!(
        plan(&j, &[&a, &f], Default::default()),
        ("wait".into(), vec!["6".into()])
    );
    let earlier = backoff::Record {
        failures_after_last_success: 1,
        last_failure: Some(at(-100)),
    };
    assert_eq!(
        plan(&j, &[&a, &f], earlier),
        ("wait".into(), vec!["16".into()])
    );
    let old = pod("old", "Failed", None, -30);
    assert_eq!(plan(&j, &[&a, &old], Default::default()).0, "create");

    // Two of four completions left with parallelism 2 and one running: one more.
    let done = json!({"succeeded": 2});
    assert_eq!(
        plan(&job(json!({}), done), &[&a], Default::default())
            .1
            .len(),
        1
    );

    // Suspended: every active pod goes.
    let suspended = job(json!({"suspend": true}), json!({}));
    assert_eq!(
        plan(&suspended, &[&a, &b], Default::default()),
        ("delete".into(), vec!["a".into(), "b".into()])
    );
}

#[test]
fn indexed_jobs_fill_pending_indexes_and_drop_duplicates() {
    let now = at(0);
    let none = HashSet::new();
    let j = job(
        json!({"completionMode": "Indexed", "completions": 5, "parallelism": 3}),
        json!({"completedIndexes": "0,1"}),
    );
    let running = pod("r2", "Running", Some(2), 0);
    let obs = observe(&j, &[&running], &none, Default::default(), now);
    assert_eq!(
        plan_manage(&j, &obs, now),
        Manage::Create(vec![Some(3), Some(4)])
    );

    let twin = pod("twin", "Pending", Some(2), 0);
    let stray = pod("stray", "Running", Some(9), 0);
    let obs = observe(
        &j,
        &[&running, &twin, &stray],
        &none,
        Default::default(),
        now,
    );
    match plan_manage(&j, &obs, now) {
        Manage::Delete(v) => assert_eq!(names(&v), ["stray", "twin"]),
        other => panic!("expected deletions, got {other:?}"),
    }

    // A pod that succeeded for index 3 joins completedIndexes.
    let succeeded = pod("s3", "Succeeded", Some(3), -5);
    let obs = observe(&j, &[&running, &succeeded], &none, Default::default(), now);
    assert_eq!(obs.succeeded_indexes.to_string(), "0,1,3");
    assert_eq!(obs.succeeded, 3);
    let mut status = j.status.clone().unwrap_or_default();
    let mut finished = None;
    let tracking = track(&j, &mut status, &obs, &mut finished, &none, now);
    assert_eq!(names(&tracking.remove_finalizer), ["s3"]);
    assert!(tracking.needs_flush);
    assert_eq!(status.completed_indexes.as_deref(), Some("0,1,3"));
    assert_eq!(status.succeeded, Some(3));
}

#[test]
fn indexed_pods_carry_their_index() {
    let j = job(json!({"completionMode": "Indexed"}), json!({}));
    let p = pod_for(&j, Some(3));
    let meta = &p.metadata;
    assert_eq!(meta.generate_name.as_deref(), Some("pi-3-"));
    assert_eq!(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(COMPLETION_INDEX))
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        meta.labels
            .as_ref()
            .and_then(|a| a.get(COMPLETION_INDEX))
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        meta.finalizers.as_deref(),
        Some(&[TRACKING_FINALIZER.to_owned()][..])
    );
    assert_eq!(
        meta.owner_references.as_ref().map(|o| o[0].kind.as_str()),
        Some("Job")
    );
    let spec = p.spec.unwrap_or_default();
    assert_eq!(spec.hostname.as_deref(), Some("pi-3"));
    let env = spec.containers[0].env.clone().unwrap_or_default();
    assert_eq!(env[0].name, COMPLETION_INDEX_ENV);
    let path = env[0]
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(
        path.as_deref(),
        Some("metadata.labels['batch.kubernetes.io/job-completion-index']")
    );

    let plain = pod_for(&job(json!({}), json!({})), None);
    assert_eq!(plain.metadata.generate_name.as_deref(), Some("pi-"));
    assert!(plain.spec.unwrap_or_default().hostname.is_none());
    assert_eq!(
        indexed_prefix(&"x".repeat(70), 12),
        format!("{}-12", "x".repeat(54))
    );
}

#[test]
fn failure_conditions_and_deadline() {
    let none = HashSet::new();
    let check = |j: &Job,
                 pods: &[&Pod],
                 now: Timestamp,
                 want: Option<(&str, &str)>,
                 deadline_in: Option<u64>| {
        let obs = observe(j, pods, &none, Default::default(), now);
        let got = obs
            .finished
            .as_ref()
            .map(|c| (c.type_.as_str(), c.reason.as_deref().unwrap_or_default()));
        assert_eq!(got, want);
        assert_eq!(obs.deadline_in.map(|d| d.as_secs()), deadline_in);
    };
    let (f1, f2) = (
        pod("f1", "Failed", None, -50),
        pod("f2", "Failed", None, -40),
    );
    let limited = job(json!({"backoffLimit": 1}), json!({}));
    check(&limited, &[&f1], at(0), None, None);
    check(
        &limited,
        &[&f1, &f2],
        at(0),
        Some((FAILURE_TARGET, "BackoffLimitExceeded")),
        None,
    );
    let counted = job(
        json!({"backoffLimit": 1}),
        json!({"failed": 1, "uncountedTerminatedPods": {"failed": ["x"]}}),
    );
    check(
        &counted,
        &[],
        at(0),
        Some((FAILURE_TARGET, "BackoffLimitExceeded")),
        None,
    );

    let started = json!({"startTime": at(-100).to_string()});
    let deadline = job(json!({"activeDeadlineSeconds": 100}), started.clone());
    check(
        &deadline,
        &[],
        at(0),
        Some((FAILURE_TARGET, "DeadlineExceeded")),
        None,
    );
    check(&deadline, &[], at(-30), None, Some(30));
    let suspended = job(
        json!({"activeDeadlineSeconds": 100, "suspend": true}),
        started,
    );
    check(&suspended, &[], at(0), None, None);

    // OnFailure pods: container restarts count against the limit.
    let on_failure = job(
        json!({"backoffLimit": 2, "template": {"spec": {"restartPolicy": "OnFailure", "containers": []}}}),
        json!({}),
    );
    let mut restarting = pod("r", "Running", None, 0);
    if let Some(s) = restarting.status.as_mut() {
        s.container_statuses = serde_json::from_value(
            json!([{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 2}]),
        )
        .ok();
    }
    check(
        &on_failure,
        &[&restarting],
        at(0),
        Some((FAILURE_TARGET, "BackoffLimitExceeded")),
        None,
    );

    // An interim FailureTarget becomes Failed with its reason.
    let target = job(
        json!({}),
        json!({"conditions": [{"type": "FailureTarget", "status": "True",
        "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}]}),
    );
    check(
        &target,
        &[],
        at(0),
        Some((FAILED, "DeadlineExceeded")),
        None,
    );
}

#[test]
fn finished_pods_are_counted_through_uncounted_then_finalizers() {
    let now = at(0);
    let none = HashSet::new();
    let j = job(
        json!({"completions": 2, "parallelism": 2}),
        json!({"succeeded": 1}),
    );
    let s = pod("s", "Succeeded", None, -10);
    let obs = observe(&j, &[&s], &none, Default::default(), now);
    assert_eq!(obs.succeeded, 2);
    assert!(is_complete(&j, obs.succeeded, 0));
    let mut finished = Some(new_condition(
        SUCCESS_CRITERIA_MET,
        "True",
        COMPLETIONS_REACHED.0,
        COMPLETIONS_REACHED.1,
        now,
    ));
    let mut status = j.status.clone().unwrap_or_default();
    let tracking = track(&j, &mut status, &obs, &mut finished, &none, now);
    assert_eq!(names(&tracking.remove_finalizer), ["s"]);
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    assert_eq!(uncounted.succeeded, Some(vec!["s".to_owned()]));
    let types: Vec<&str> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, [SUCCESS_CRITERIA_MET]);
    assert_eq!(finished.as_ref().map(|c| c.type_.as_str()), Some(COMPLETE));
    // Not finished while a pod is uncounted.
    assert!(!enact_finished(
        &mut status.clone(),
        finished.as_ref(),
        0,
        now
    ));

    // The finalizer is gone: the pod moves to the counter and the Job completes.
    assert!(clean_uncounted(&mut status, &HashSet::new()));
    assert_eq!(status.succeeded, Some(2));
    assert!(
        status
            .uncounted_terminated_pods
            .clone()
            .unwrap_or_default()
            .succeeded
            .is_none()
    );
    assert!(
        !enact_finished(&mut status.clone(), finished.as_ref(), 1, now),
        "terminating pods delay it"
    );
    assert!(enact_finished(&mut status, finished.as_ref(), 0, now));
    let complete = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == COMPLETE)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (complete.reason.as_deref(), complete.message.as_deref()),
        (
            Some("CompletionsReached"),
            Some("Reached expected number of succeeded pods")
        )
    );
    assert_eq!(status.completion_time, Some(time(now)));
}

#[test]
fn a_failing_job_counts_its_running_pods_as_failed() {
    let now = at(0);
    let none = HashSet::new();
    let j = job(json!({"backoffLimit": 0}), json!({}));
    let (f, r) = (pod("f", "Failed", None, -10), pod("r", "Running", None, 0));
    let obs = observe(&j, &[&f, &r], &none, Default::default(), now);
    let mut finished = obs.finished.clone();
    assert_eq!(
        finished
            .as_ref()
            .map(|c| c.message.clone().unwrap_or_default()),
        Some(BACKOFF_LIMIT_EXCEEDED.1.to_owned())
    );
    let mut status = JobStatus::default();
    let tracking = track(&j, &mut status, &obs, &mut finished, &none, now);
    assert_eq!(names(&tracking.remove_finalizer), ["f", "r"]);
    let failed = status
        .uncounted_terminated_pods
        .clone()
        .unwrap_or_default()
        .failed
        .unwrap_or_default();
    assert_eq!(failed, ["f", "r"]);
    let types: Vec<&str> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, [FAILURE_TARGET]);
    assert_eq!(
        finished
            .as_ref()
            .map(|c| (c.type_.as_str(), c.reason.as_deref())),
        Some((FAILED, Some("BackoffLimitExceeded")))
    );
    clean_uncounted(&mut status, &HashSet::new());
    assert_eq!(status.failed, Some(2));
    assert!(enact_finished(&mut status, finished.as_ref(), 0, now));
    assert!(status.completion_time.is_none());
}

#[test]
fn conditions_are_added_updated_never_added_false() {
    let mut conditions = Vec::new();
    assert!(!ensure_condition(
        &mut conditions,
        SUSPENDED,
        "False",
        "JobResumed",
        "Job resumed",
        at(0)
    ));
    assert!(conditions.is_empty());
    assert!(ensure_condition(
        &mut conditions,
        SUSPENDED,
        "True",
        "JobSuspended",
        "Job suspended",
        at(0)
    ));
    assert!(!ensure_condition(
        &mut conditions,
        SUSPENDED,
        "True",
        "JobSuspended",
        "Job suspended",
        at(5)
    ));
    assert!(ensure_condition(
        &mut conditions,
        SUSPENDED,
        "False",
        "JobResumed",
        "Job resumed",
        at(9)
    ));
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].last_transition_time, Some(time(at(9))));
}

#[test]
fn work_queue_completion() {
    let wq = job(json!({"completions": null, "parallelism": 3}), json!({}));
    assert!(!is_complete(&wq, 0, 0));
    assert!(!is_complete(&wq, 1, 2), "waits for the others to finish");
    assert!(is_complete(&wq, 1, 0));
    let fixed = job(json!({}), json!({}));
    assert!(!is_complete(&fixed, 3, 0));
    assert!(is_complete(&fixed, 4, 0));
}

#[test]
fn claims_cover_finished_pods_and_orphans() {
    let j = job(json!({}), json!({}));
    let selector = selector_of(&j);
    let mut orphan = pod("orphan", "Running", None, 0);
    orphan.metadata.owner_references = None;
    orphan.metadata.labels = Some(
        [(
            "batch.kubernetes.io/controller-uid".to_owned(),
            "j1".to_owned(),
        )]
        .into(),
    );
    let mut mine = pod("mine", "Succeeded", None, 0);
    mine.metadata.labels = orphan.metadata.labels.clone();
    let strayed = pod("strayed", "Running", None, 0);
    let claims = claim(&j, selector.as_ref(), &[&orphan, &mine, &strayed]);
    assert_eq!(names(&claims.owned), ["mine"]);
    assert_eq!(names(&claims.adopt), ["orphan"]);
    assert_eq!(names(&claims.release), ["strayed"]);
}
