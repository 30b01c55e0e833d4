//! Table tests of the CronJob controller's decisions against fixed CronJobs, Jobs and a
//! fixed `now`.

use super::*;
use serde_json::{Value, json};

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A CronJob `nightly` created at 2026-01-01T00:00:00Z with `spec` over defaults and `status`.
fn cronjob(spec: Value, status: Value) -> CronJob {
    let mut full = json!({
        "schedule": "0 3 * * *", "concurrencyPolicy": "Allow", "suspend": false,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
        "jobTemplate": {"metadata": {"labels": {"app": "n"}, "annotations": {"a": "b"}},
                        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}},
    });
    if let (Some(base), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "cj1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": full, "status": status,
    }))
    .unwrap_or_else(|e| panic!("bad cronjob: {e}"))
}

fn child(
    name: &str,
    condition: Option<&str>,
    start: Option<&str>,
    completion: Option<&str>,
) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "cj1", "controller": true}]},
        "spec": {"template": {}},
        "status": {"startTime": start, "completionTime": completion,
                   "conditions": condition.map(|c| json!([{"type": c, "status": "True", "lastTransitionTime": "2026-01-02T03:01:00Z"}]))},
    }))
    .unwrap_or_else(|e| panic!("bad job: {e}"))
}

fn reasons(d: &Decision) -> Vec<&str> {
    d.events.iter().map(|e| e.1).collect()
}

#[test]
fn decisions() {
    struct Case {
        name: &'static str,
        spec: Value,
        status: Value,
        now: &'static str,
        start: Option<(&'static str, bool)>,
        events: &'static [&'static str],
        requeue_ms: Option<u64>,
    }
    let cases = [
        Case {
            name: "before the first time",
            spec: json!({}),
            status: json!({}),
            now: "2026-01-01T02:00:00Z",
            start: None,
            events: &[],
            requeue_ms: Some(3_600_100),
        },
        Case {
            name: "due",
            spec: json!({}),
            status: json!({}),
            now: "2026-01-01T03:00:05Z",
            start: Some(("2026-01-01T03:00:00Z", false)),
            events: &[],
            requeue_ms: Some(86_395_100),
        },
        Case {
            name: "already processed",
            spec: json!({}),
            status: json!({"lastScheduleTime": "2026-01-01T03:00:00Z"}),
            now: "2026-01-01T03:00:05Z",
            start: None,
            events: &[],
            requeue_ms: Some(86_395_100),
        },
        Case {
            name: "missed the starting deadline",
            spec: json!({"startingDeadlineSeconds": 10}),
            status: json!({"lastScheduleTime": "2026-01-01T03:00:00Z"}),
            now: "2026-01-02T03:00:30Z",
            start: None,
            events: &[],
            requeue_ms: Some(86_370_100),
        },
        Case {
            name: "within the starting deadline",
            spec: json!({"startingDeadlineSeconds": 60}),
            status: json!({}),
            now: "2026-01-01T03:00:30Z",
            start: Some(("2026-01-01T03:00:00Z", false)),
            events: &[],
            requeue_ms: Some(86_370_100),
        },
        Case {
            name: "forbid while one runs",
            spec: json!({"concurrencyPolicy": "Forbid"}),
            status: json!({"active": [{"name": "nightly-29450000", "uid": "x"}]}),
            now: "2026-01-01T03:00:05Z",
            start: None,
            events: &["JobAlreadyActive"],
            requeue_ms: Some(86_395_100),
        },
        Case {
            name: "replace",
            spec: json!({"concurrencyPolicy": "Replace"}),
            status: json!({"active": [{"name": "nightly-29450000", "uid": "x"}]}),
            now: "2026-01-01T03:00:05Z",
            start: Some(("2026-01-01T03:00:00Z", true)),
            events: &[],
            requeue_ms: Some(86_395_100),
        },
        Case {
            name: "suspended",
            spec: json!({"suspend": true}),
            status: json!({}),
            now: "2026-01-01T03:00:05Z",
            start: None,
            events: &[],
            requeue_ms: None,
        },
        Case {
            name: "too many missed",
            spec: json!({"schedule": "* * * * *"}),
            status: json!({}),
            now: "2026-01-01T05:00:30Z",
            start: Some(("2026-01-01T05:00:00Z", false)),
            events: &["TooManyMissedTimes"],
            requeue_ms: Some(30_100),
        },
        Case {
            name: "a few missed",
            spec: json!({"schedule": "0 * * * *"}),
            status: json!({}),
            now: "2026-01-01T05:00:30Z",
            start: Some(("2026-01-01T05:00:00Z", false)),
            events: &[],
            requeue_ms: Some(3_570_100),
        },
        Case {
            name: "unknown zone",
            spec: json!({"timeZone": "Mars/Olympus"}),
            status: json!({}),
            now: "2026-01-01T03:00:05Z",
            start: None,
            events: &["UnknownTimeZone"],
            requeue_ms: None,
        },
        Case {
            name: "unparseable",
            spec: json!({"schedule": "0 3 * *"}),
            status: json!({}),
            now: "2026-01-01T03:00:05Z",
            start: None,
            events: &["UnparseableSchedule"],
            requeue_ms: None,
        },
        Case {
            name: "zone in the schedule",
            spec: json!({"schedule": "CRON_TZ=Europe/Berlin 0 4 * * *"}),
            status: json!({}),
            now: "2026-01-01T03:00:05Z",
            start: Some(("2026-01-01T03:00:00Z", false)),
            events: &["UnsupportedSchedule"],
            requeue_ms: Some(86_395_100),
        },
        Case {
            name: "time zone",
            spec: json!({"timeZone": "Asia/Tokyo"}),
            status: json!({}),
            now: "2026-01-01T18:00:05Z",
            start: Some(("2026-01-01T18:00:00Z", false)),
            events: &[],
            requeue_ms: Some(86_395_100),
        },
    ];
    for case in cases {
        let cj = cronjob(case.spec, case.status);
        let d = decide(&cj, ts(case.now));
        let start = d.start.map(|(t, r)| (t.to_string(), r));
        assert_eq!(
            start,
            case.start.map(|(t, r)| (t.to_owned(), r)),
            "{}",
            case.name
        );
        assert_eq!(reasons(&d), case.events, "{}", case.name);
        assert_eq!(
            d.requeue.map(|r| r.as_millis() as u64),
            case.requeue_ms,
            "{}",
            case.name
        );
    }
}

#[test]
fn missed_schedule_event_names_the_time() {
    let cj = cronjob(json!({"startingDeadlineSeconds": 10}), json!({}));
    // With the deadline, only times after now-10s count: nothing is due, nothing is said.
    assert!(decide(&cj, ts("2026-01-01T03:00:30Z")).events.is_empty());
    assert_eq!(
        miss_schedule_message(ts("2026-01-01T03:00:00Z")),
        "Missed scheduled time to start a job: Thu, 01 Jan 2026 03:00:00 +0000"
    );
}

#[test]
fn missed_counts() {
    let sched = schedule::parse("*/10 * * * *").unwrap_or_else(|e| panic!("{e}"));
    let check = |status: Value, now: &str, latest: Option<&str>, missed: Missed| {
        let cj = cronjob(json!({}), status);
        let (_, got, m) =
            most_recent_schedule_time(&cj, ts(now), &sched, true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got.map(|t| t.to_string()),
            latest.map(str::to_owned),
            "{now}"
        );
        assert_eq!(m, missed, "{now}");
    };
    check(json!({}), "2026-01-01T00:05:00Z", None, Missed::None);
    check(
        json!({}),
        "2026-01-01T00:15:00Z",
        Some("2026-01-01T00:10:00Z"),
        Missed::None,
    );
    check(
        json!({}),
        "2026-01-01T00:35:00Z",
        Some("2026-01-01T00:30:00Z"),
        Missed::Few,
    );
    check(
        json!({"lastScheduleTime": "2026-01-01T00:30:00Z"}),
        "2026-01-01T00:35:00Z",
        None,
        Missed::None,
    );
    check(
        json!({}),
        "2026-01-02T00:05:00Z",
        Some("2026-01-02T00:00:00Z"),
        Missed::Many,
    );
    let impossible = schedule::parse("0 0 31 2 *").unwrap_or_else(|e| panic!("{e}"));
    let cj = cronjob(json!({}), json!({}));
    assert!(matches!(
        most_recent_schedule_time(&cj, ts("2026-06-01T00:00:00Z"), &impossible, true),
        Ok((_, None, Missed::None))
    ));
}

#[test]
fn jobs_from_the_template() {
    let scheduled = ts("2026-01-01T03:00:00Z");
    assert_eq!(job_name("nightly", scheduled), "nightly-29453940");
    let job = job_from_template(&cronjob(json!({}), json!({})), scheduled)
        .unwrap_or_else(|e| panic!("{e}"));
    let meta = &job.metadata;
    assert_eq!(meta.name.as_deref(), Some("nightly-29453940"));
    assert_eq!(
        meta.labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("n")
    );
    let annotations = meta.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("a").map(String::as_str), Some("b"));
    assert_eq!(
        annotations.get(SCHEDULED_TIMESTAMP).map(String::as_str),
        Some("2026-01-01T03:00:00Z")
    );
    let owner = meta.owner_references.clone().unwrap_or_default();
    assert_eq!(
        (
            owner[0].kind.as_str(),
            owner[0].uid.as_str(),
            owner[0].controller
        ),
        ("CronJob", "cj1", Some(true))
    );
    assert!(job.spec.is_some());
    let zoned = job_from_template(
        &cronjob(json!({"timeZone": "Europe/Berlin"}), json!({})),
        ts("2026-07-01T03:00:00Z"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let annotations = zoned.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(SCHEDULED_TIMESTAMP).map(String::as_str),
        Some("2026-07-01T05:00:00+02:00")
    );
}

#[test]
fn history_beyond_the_limits_goes_oldest_first() {
    let cj = cronjob(
        json!({"successfulJobsHistoryLimit": 2, "failedJobsHistoryLimit": 0}),
        json!({}),
    );
    let s1 = child("s1", Some("Complete"), Some("2026-01-01T03:00:00Z"), None);
    let s2 = child("s2", Some("Complete"), Some("2026-01-02T03:00:00Z"), None);
    let s3 = child("s3", Some("Complete"), Some("2026-01-03T03:00:00Z"), None);
    let s0 = child("s0", Some("Complete"), None, None);
    let f1 = child("f1", Some("Failed"), Some("2026-01-01T03:00:00Z"), None);
    let running = child("r", None, Some("2026-01-01T03:00:00Z"), None);
    let victims = history_to_delete(&cj, &[&s3, &s0, &s1, &running, &f1, &s2]);
    let names: Vec<&str> = victims
        .iter()
        .map(|j| j.metadata.name.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(names, ["s1", "s2", "f1"], "unstarted ones sort last");
    let unlimited = cronjob(
        json!({"successfulJobsHistoryLimit": null, "failedJobsHistoryLimit": null}),
        json!({}),
    );
    assert!(history_to_delete(&unlimited, &[&s1, &f1]).is_empty());
}

#[test]
fn children_update_the_status() {
    let done = child("done", Some("Complete"), None, Some("2026-01-02T03:01:00Z"));
    let older = child(
        "older",
        Some("Complete"),
        None,
        Some("2026-01-01T03:01:00Z"),
    );
    let failed = child("failed", Some("Failed"), None, None);
    let stray = child("stray", None, None, None);
    let running = child("running", None, None, None);
    let mut status: CronJobStatus = serde_json::from_value(json!({"active": [
        {"name": "done", "uid": "done"}, {"name": "failed", "uid": "failed"},
        {"name": "running", "uid": "running"}, {"name": "gone", "uid": "gone"}]}))
    .unwrap_or_else(|e| panic!("{e}"));
    let review = review_children(&mut status, &[&done, &older, &failed, &stray, &running]);
    let events: Vec<String> = review
        .events
        .iter()
        .map(|e| format!("{} {}", e.1, e.2))
        .collect();
    assert_eq!(
        events,
        [
            "SawCompletedJob Saw completed job: done, condition: Complete",
            "SawCompletedJob Saw completed job: failed, condition: Failed"
        ]
    );
    assert!(review.changed);
    let active: Vec<String> = status
        .active
        .iter()
        .flatten()
        .filter_map(|r| r.name.clone())
        .collect();
    assert_eq!(active, ["running", "gone"]);
    assert_eq!(
        status
            .last_successful_time
            .as_ref()
            .map(|t| t.0.to_string())
            .as_deref(),
        Some("2026-01-01T03:01:00Z"),
        "a completed Job still in the active list counts on the next sync"
    );
    assert_eq!(review.unexpected.len(), 1);
    assert_eq!(
        review
            .missing
            .iter()
            .filter_map(|r| r.name.clone())
            .collect::<Vec<_>>(),
        ["gone"]
    );

    // Next sync: the newer completion wins.
    let review = review_children(&mut status, &[&done, &older, &running]);
    assert!(review.changed);
    assert_eq!(
        status
            .last_successful_time
            .as_ref()
            .map(|t| t.0.to_string())
            .as_deref(),
        Some("2026-01-02T03:01:00Z")
    );
}
