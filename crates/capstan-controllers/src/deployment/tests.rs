//! Tests of the controller's decisions (plans, conditions, claims) and of whole syncs against a
//! recording fake of the API.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::claim::{Claim, claim_decision};
use super::fixtures::*;
use super::progress::{requeue_after, rollout_status};
use super::recreate::old_pods_running;
use super::rolling::{cleanup_unhealthy_plan, max_scaled_down, scale_down_old_plan};
use super::sync::{cleanup_candidates, pod_map, proportional_sizes, sync_deployment};
use super::util::*;
use super::{selector_of, selects_all};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map(|rt| rt.block_on(f))
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

fn name(rs: &ReplicaSet) -> String {
    rs.metadata.name.clone().unwrap_or_default()
}

/// Runs one sync at time `now` and returns the fake and the requeue.
fn sync(
    fake: &Fake,
    d: &Deployment,
    rss: &[ReplicaSet],
    pods: &[Arc<Pod>],
    now: i64,
) -> Result<Option<Duration>, String> {
    block_on(sync_deployment(
        fake,
        d.clone(),
        rss.to_vec(),
        pods.to_vec(),
        at(now),
    ))
    .map_err(|e| e.to_string())
}

fn condition(d: &Deployment, type_: &str) -> (String, String, String) {
    let c = get_condition(d.status.as_ref(), type_)
        .cloned()
        .unwrap_or_default();
    (
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    )
}

// ---------------------------------------------------------------------------------------------
// Plans.

#[test]
fn proportional_scaling_matches_upstream_cases() {
    #[track_caller]
    fn check(new_size: i32, old_size: i32, sets: &[(i32, i32)], expected: &[i32]) {
        // sets: (replicas, created), the first is the newest; annotated with the old size.
        let d = with_fenceposts(deployment(new_size, "a"), "0", "1");
        let rss: Vec<ReplicaSet> = sets
            .iter()
            .enumerate()
            .map(|(i, &(replicas, created))| {
                sized(
                    &format!("rs{i}"),
                    replicas,
                    Some(old_size),
                    i64::from(created),
                )
            })
            .collect();
        let refs: Vec<&ReplicaSet> = rss.iter().collect();
        let sizes = proportional_sizes(&d, &refs);
        let got: Vec<i32> = (0..rss.len())
            .map(|i| {
                sizes
                    .iter()
                    .find(|(n, _)| *n == format!("rs{i}"))
                    .map_or(-1, |(_, s)| *s)
            })
            .collect();
        assert_eq!(got, expected, "{old_size} -> {new_size}");
    }
    check(10, 5, &[(2, 3), (3, 2)], &[4, 6]);
    check(3, 5, &[(2, 3), (3, 2)], &[1, 2]);
    check(4, 9, &[(8, 3), (1, 2)], &[4, 0]);
    check(10, 7, &[(2, 3), (3, 2), (2, 1)], &[3, 4, 3]);
    check(8, 13, &[(2, 3), (8, 2), (3, 1)], &[1, 5, 2]);
    check(0, 5, &[(2, 3), (3, 2)], &[0, 0]);
    // Unchanged total: sizes as they are.
    check(5, 5, &[(2, 3), (3, 2)], &[2, 3]);
}

#[test]
fn proportional_scaling_counts_the_surge() {
    // 10 replicas, surge 3 (25% up): 13 allowed; the replica sets hold 10 at max 13.
    let d = deployment(20, "a"); // now 20 (+5 surge) = 25
    let rss = [sized("new", 6, Some(13), 2), sized("old", 4, Some(13), 1)];
    let refs: Vec<&ReplicaSet> = rss.iter().collect();
    let sizes = proportional_sizes(&d, &refs);
    // 6*25/13 = 11.5 -> 12; 4*25/13 = 7.7 -> 8; leftover 25 - 10 - (6 + 4) = 5 to the largest.
    assert_eq!(sizes, [("new".to_owned(), 17), ("old".to_owned(), 8)]);
}

#[test]
fn rolling_update_plans() {
    let d = with_fenceposts(deployment(10, "b"), "3", "2"); // min available 8
    // 13 pods, new 5 all unavailable: nothing may go.
    let old = [rs(&d, "a", 8, 8, 1, 1)];
    let new = rs(&d, "b", 5, 0, 2, 2);
    let all: Vec<&ReplicaSet> = old.iter().chain([&new]).collect();
    assert_eq!(max_scaled_down(&d, &all, &new), 0);
    // Rolled back to the good replica set: the crash-looping one can lose 4.
    let bad = rs(&d, "a", 5, 0, 1, 1);
    let good = rs(&d, "b", 8, 7, 2, 3);
    let all: Vec<&ReplicaSet> = [&bad, &good].into();
    assert_eq!(max_scaled_down(&d, &all, &good), 4);
    assert_eq!(
        cleanup_unhealthy_plan(std::slice::from_ref(&bad), 4),
        Ok(vec![(name(&bad), 1)])
    );

    // Unhealthy replicas of the oldest first, bounded.
    let old = [
        rs(&d, "x", 3, 1, 1, 1),
        rs(&d, "y", 4, 2, 2, 2),
        rs(&d, "z", 2, 2, 3, 3),
    ];
    assert_eq!(
        cleanup_unhealthy_plan(&old, 3),
        Ok(vec![(name(&old[0]), 1), (name(&old[1]), 3)])
    );
    assert_eq!(
        cleanup_unhealthy_plan(&old, 10),
        Ok(vec![(name(&old[0]), 1), (name(&old[1]), 2)])
    );
    let mut odd = rs(&d, "x", 1, 2, 1, 1);
    odd.metadata.namespace = Some("ns".into());
    assert!(cleanup_unhealthy_plan(&[odd], 3).is_err());

    // Scale down while 8 stay available: 11 available -> 3 may go, oldest first.
    let old = [rs(&d, "x", 2, 2, 1, 1), rs(&d, "y", 4, 4, 2, 2)];
    let new = rs(&d, "b", 5, 5, 3, 3);
    let all: Vec<&ReplicaSet> = old.iter().chain([&new]).collect();
    assert_eq!(
        scale_down_old_plan(&d, &all, &old),
        vec![(name(&old[0]), 0), (name(&old[1]), 3)]
    );
    let new = rs(&d, "b", 5, 2, 3, 3);
    let all: Vec<&ReplicaSet> = old.iter().chain([&new]).collect();
    assert_eq!(scale_down_old_plan(&d, &all, &old), vec![]);
}

#[test]
fn history_cleanup_keeps_the_limit_and_live_replica_sets() {
    let d = deployment(1, "z");
    #[track_caller]
    fn check(old: &[ReplicaSet], limit: i32, expected: &[&str]) {
        let got: Vec<String> = cleanup_candidates(old, limit)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, expected);
    }
    let a = rs(&d, "a", 0, 0, 1, 1);
    let b = rs(&d, "b", 0, 0, 2, 2);
    let c = rs(&d, "c", 0, 0, 3, 3);
    check(
        &[c.clone(), a.clone(), b.clone()],
        1,
        &[&name(&a), &name(&b)],
    );
    check(&[a.clone(), b.clone(), c.clone()], 3, &[]);
    check(
        &[a.clone(), b.clone(), c.clone()],
        0,
        &[&name(&a), &name(&b), &name(&c)],
    );
    // Still running, still reporting pods, not yet observed, being deleted: kept.
    let running = rs(&d, "a", 1, 1, 1, 1);
    let mut reporting = rs(&d, "b", 0, 0, 2, 2);
    if let Some(s) = reporting.status.as_mut() {
        s.replicas = 1;
    }
    let mut unobserved = rs(&d, "c", 0, 0, 3, 3);
    unobserved.metadata.generation = Some(2);
    check(&[running, reporting, unobserved], 0, &[]);
    let mut deleting = rs(&d, "a", 0, 0, 1, 1);
    deleting.metadata.deletion_timestamp = Some(Time(at(5)));
    check(&[deleting, b.clone(), c.clone()], 1, &[&name(&b)]);
}

#[test]
fn rollout_conditions() {
    let mut d = deployment(3, "b");
    let started = new_condition(
        PROGRESSING,
        "True",
        NEW_REPLICA_SET_REASON,
        "Created new replica set".into(),
        at(100),
    );
    d.status = Some(DeploymentStatus {
        replicas: Some(4),
        updated_replicas: Some(1),
        available_replicas: Some(3),
        ready_replicas: Some(3),
        observed_generation: Some(1),
        conditions: Some(vec![started]),
        ..Default::default()
    });
    let old = rs(&d, "a", 3, 3, 1, 1);
    #[track_caller]
    fn check(
        d: &Deployment,
        sets: &[&ReplicaSet],
        now: i64,
        expected: (&str, &str, &str),
        times: (i64, i64),
    ) {
        let new = sets.last().copied();
        let status = rollout_status(d, sets, new, at(now));
        let c = get_condition(Some(&status), PROGRESSING)
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            ),
            expected
        );
        assert_eq!(
            (
                c.last_update_time.map(|t| t.0),
                c.last_transition_time.map(|t| t.0)
            ),
            (Some(at(times.0)), Some(at(times.1)))
        );
    }
    let new_name = name(&rs(&d, "b", 0, 0, 2, 2));
    // More replicas updated: progressing, update time moves, transition time stays.
    let new = rs(&d, "b", 2, 1, 2, 2);
    check(
        &d,
        &[&old, &new],
        200,
        (
            "True",
            REPLICA_SET_UPDATED_REASON,
            &format!("ReplicaSet \"{new_name}\" is progressing."),
        ),
        (200, 100),
    );
    // No change in counts: the condition stays as it was.
    let same = rs(&d, "b", 1, 0, 2, 2);
    check(
        &d,
        &[&old, &same],
        650,
        ("True", NEW_REPLICA_SET_REASON, "Created new replica set"),
        (100, 100),
    );
    // Past the deadline without progress: timed out.
    check(
        &d,
        &[&old, &same],
        701,
        (
            "False",
            TIMED_OUT_REASON,
            &format!("ReplicaSet \"{new_name}\" has timed out progressing."),
        ),
        (701, 701),
    );
    // Complete.
    let done = rs(&d, "b", 3, 3, 2, 2);
    check(
        &d,
        &[&done],
        300,
        (
            "True",
            NEW_RS_AVAILABLE_REASON,
            &format!("ReplicaSet \"{new_name}\" has successfully progressed."),
        ),
        (300, 100),
    );
    // Without a new replica set the messages name the deployment.
    let status = rollout_status(&d, &[&old], None, at(701));
    let c = get_condition(Some(&status), PROGRESSING)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        c.message.as_deref(),
        Some("Deployment \"foo\" has timed out progressing.")
    );
    // No deadline: no Progressing condition at all.
    let mut no_deadline = d.clone();
    if let Some(s) = no_deadline.spec.as_mut() {
        s.progress_deadline_seconds = None;
    }
    let status = rollout_status(&no_deadline, &[&old, &new], None, at(200));
    assert_eq!(get_condition(Some(&status), PROGRESSING), None);
    // Replica failures are promoted.
    let mut failing = rs(&d, "b", 2, 1, 2, 2);
    if let Some(s) = failing.status.as_mut() {
        s.conditions = Some(vec![k8s_openapi::api::apps::v1::ReplicaSetCondition {
            type_: REPLICA_FAILURE.into(),
            status: "True".into(),
            reason: Some("FailedCreate".into()),
            message: Some("quota".into()),
            last_transition_time: Some(Time(at(150))),
        }]);
    }
    let status = rollout_status(&d, &[&old, &failing], Some(&failing), at(200));
    let c = get_condition(Some(&status), REPLICA_FAILURE)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (c.reason.as_deref(), c.last_update_time.map(|t| t.0)),
        (Some("FailedCreate"), Some(at(150)))
    );
}

#[test]
fn requeue_waits_for_the_deadline() {
    let mut d = deployment(3, "b");
    let progressing = |reason: &str| DeploymentStatus {
        conditions: Some(vec![new_condition(
            PROGRESSING,
            "True",
            reason,
            String::new(),
            at(1000),
        )]),
        ..Default::default()
    };
    d.status = Some(progressing(REPLICA_SET_UPDATED_REASON));
    let status = DeploymentStatus::default();
    assert_eq!(
        requeue_after(&d, &status, at(1180)),
        Some(Duration::from_secs(421))
    );
    assert_eq!(
        requeue_after(&d, &status, at(1600)),
        Some(Duration::from_secs(1))
    );
    d.status = Some(progressing(TIMED_OUT_REASON));
    assert_eq!(requeue_after(&d, &status, at(1180)), None);
    d.status = None;
    assert_eq!(requeue_after(&d, &status, at(1180)), None);
    d.status = Some(progressing(REPLICA_SET_UPDATED_REASON));
    let complete = DeploymentStatus {
        replicas: Some(3),
        updated_replicas: Some(3),
        available_replicas: Some(3),
        observed_generation: Some(1),
        ..Default::default()
    };
    assert_eq!(requeue_after(&d, &complete, at(1180)), None);
}

#[test]
fn claims() {
    let d = deployment(1, "a");
    let selector = selector_of(&d).unwrap_or_default();
    #[track_caller]
    fn check(d: &Deployment, selector: &kube::core::Selector, rs: ReplicaSet, expected: Claim) {
        assert_eq!(claim_decision(d, selector, &rs), expected);
    }
    let owned = rs(&d, "a", 1, 1, 1, 1);
    check(&d, &selector, owned.clone(), Claim::Owned);
    let mut orphan = owned.clone();
    orphan.metadata.owner_references = None;
    check(&d, &selector, orphan.clone(), Claim::Adopt);
    let mut deleting_orphan = orphan.clone();
    deleting_orphan.metadata.deletion_timestamp = Some(Time(at(1)));
    check(&d, &selector, deleting_orphan, Claim::Ignore);
    let mut other = owned.clone();
    if let Some(r) = other.metadata.owner_references.as_mut() {
        r[0].uid = "someone".into();
    }
    check(&d, &selector, other, Claim::Ignore);
    let mut relabelled = owned.clone();
    relabelled.metadata.labels = Some([("app".to_owned(), "bar".to_owned())].into());
    check(&d, &selector, relabelled.clone(), Claim::Release);
    let mut unlabelled_orphan = relabelled.clone();
    unlabelled_orphan.metadata.owner_references = None;
    check(&d, &selector, unlabelled_orphan, Claim::Ignore);
    let mut deleting = d.clone();
    deleting.metadata.deletion_timestamp = Some(Time(at(1)));
    check(&deleting, &selector, relabelled, Claim::Ignore);
    check(&deleting, &selector, orphan, Claim::Ignore);
    check(&deleting, &selector, owned, Claim::Owned);

    let mut everything = d.clone();
    if let Some(s) = everything.spec.as_mut() {
        s.selector = Default::default();
    }
    assert!(selects_all(&everything));
    assert!(!selects_all(&d));
}

#[test]
fn old_pods_block_recreate() {
    let d = recreate(deployment(2, "b"));
    let old = rs(&d, "a", 0, 0, 1, 1);
    let mut old_reporting = old.clone();
    if let Some(s) = old_reporting.status.as_mut() {
        s.replicas = 1;
    }
    let new = rs(&d, "b", 0, 0, 2, 2);
    let sets = [old.clone(), new.clone()];
    #[track_caller]
    fn check(
        d: &Deployment,
        sets: &[ReplicaSet],
        old: &[ReplicaSet],
        pods: &[Arc<Pod>],
        expected: bool,
    ) {
        let map = pod_map(d, sets, pods);
        assert_eq!(old_pods_running(sets.last(), old, &map), expected);
    }
    check(&d, &sets, std::slice::from_ref(&old), &[], false);
    check(&d, &sets, &[old_reporting], &[], true);
    for (phase, running) in [
        ("Running", true),
        ("Pending", true),
        ("Unknown", true),
        ("Succeeded", false),
        ("Failed", false),
    ] {
        check(
            &d,
            &sets,
            std::slice::from_ref(&old),
            &[pod(&old, "p", phase)],
            running,
        );
    }
    // Pods of the new replica set do not count.
    check(
        &d,
        &sets,
        std::slice::from_ref(&old),
        &[pod(&new, "p", "Running")],
        false,
    );
}

// ---------------------------------------------------------------------------------------------
// Whole syncs.

#[test]
fn a_new_deployment_creates_its_replica_set() {
    let fake = Fake::default();
    let d = deployment(3, "nginx");
    let requeue = sync(&fake, &d, &[], &[], 1000);
    assert_eq!(requeue, Ok(None));
    let hash = compute_hash(&template("nginx"), None);
    let rs_name = format!("foo-{hash}");
    let calls = fake.calls();
    let Some(Call::Create(created)) = calls.first() else {
        panic!("expected a create first: {calls:?}");
    };
    assert_eq!(name(created), rs_name);
    assert_eq!(rs_replicas(created), 3);
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(HASH_LABEL), Some(&hash));
    let spec = created.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.selector
            .match_labels
            .unwrap_or_default()
            .get(HASH_LABEL),
        Some(&hash)
    );
    let template_labels = spec
        .template
        .and_then(|t| t.metadata)
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert_eq!(template_labels.get(HASH_LABEL), Some(&hash));
    let owner = created
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    assert_eq!(owner.len(), 1);
    assert_eq!(
        (
            owner[0].api_version.as_str(),
            owner[0].kind.as_str(),
            owner[0].controller,
            owner[0].block_owner_deletion
        ),
        ("apps/v1", "Deployment", Some(true), Some(true))
    );
    let annotations = created.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(REVISION_ANNOTATION).map(String::as_str),
        Some("1")
    );
    assert_eq!(
        annotations
            .get(DESIRED_REPLICAS_ANNOTATION)
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        annotations.get(MAX_REPLICAS_ANNOTATION).map(String::as_str),
        Some("4")
    );
    assert_eq!(
        fake.events(),
        [format!(
            "Normal ScalingReplicaSet: Scaled up replica set {rs_name} from 0 to 3"
        )]
    );

    let status = fake.last_status().unwrap_or_default();
    let revision = status
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .get(REVISION_ANNOTATION)
        .cloned();
    assert_eq!(revision.as_deref(), Some("1"));
    assert_eq!(
        condition(&status, PROGRESSING),
        (
            "True".into(),
            NEW_REPLICA_SET_REASON.into(),
            format!("Created new replica set \"{rs_name}\"")
        )
    );
    assert_eq!(
        condition(&status, AVAILABLE),
        (
            "False".into(),
            MINIMUM_REPLICAS_UNAVAILABLE.into(),
            "Deployment does not have minimum availability.".into()
        )
    );
    assert_eq!(status.status.and_then(|s| s.observed_generation), Some(1));
}

#[test]
fn a_rolling_update_surges_then_scales_old_down() {
    let d = with_fenceposts(deployment(3, "v2"), "1", "0");
    let mut old = rs(&d, "v1", 3, 3, 1, 1);
    old.metadata
        .annotations
        .as_mut()
        .map(|a| a.insert(MAX_REPLICAS_ANNOTATION.into(), "4".into()));

    // Step 1: the new replica set takes the one surge pod.
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, std::slice::from_ref(&old), &[], 1000),
        Ok(None)
    );
    let new_name = name(&rs(&d, "v2", 0, 0, 2, 2));
    assert_eq!(fake.scaled(), [(new_name.clone(), 1)]);
    assert_eq!(
        fake.events(),
        [format!(
            "Normal ScalingReplicaSet: Scaled up replica set {new_name} from 0 to 1"
        )]
    );
    let created = match fake.calls().first() {
        Some(Call::Create(rs)) => rs.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(revision(&created), Ok(2));

    // Step 2: the new pod is available; one old one may go.
    let mut d2 = fake.last_status().unwrap_or_default();
    d2.metadata.resource_version = Some("5".into());
    let new = rs(&d, "v2", 1, 1, 2, 2);
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d2, &[old.clone(), new.clone()], &[], 1010),
        Ok(None)
    );
    assert_eq!(fake.scaled(), [(name(&old), 2)]);
    assert_eq!(
        fake.events(),
        [format!(
            "Normal ScalingReplicaSet: Scaled down replica set {} from 3 to 2",
            name(&old)
        )]
    );
    let status = fake.last_status().unwrap_or_default();
    assert_eq!(
        condition(&status, PROGRESSING),
        (
            "True".into(),
            REPLICA_SET_UPDATED_REASON.into(),
            format!("ReplicaSet \"{new_name}\" is progressing.")
        )
    );

    // Step 3: old at 2, new can grow by one.
    let old2 = rs(&d, "v1", 2, 2, 1, 1);
    let fake = Fake::default();
    assert_eq!(sync(&fake, &status, &[old2, new], &[], 1020), Ok(None));
    assert_eq!(fake.scaled(), [(new_name, 2)]);
}

#[test]
fn a_finished_rollout_reports_complete_and_cleans_up() {
    let mut d = deployment(2, "v3");
    if let Some(s) = d.spec.as_mut() {
        s.revision_history_limit = Some(1);
    }
    let v1 = rs(&d, "v1", 0, 0, 1, 1);
    let v2 = rs(&d, "v2", 0, 0, 2, 2);
    let v3 = rs(&d, "v3", 2, 2, 3, 3);
    d.metadata.annotations = Some([(REVISION_ANNOTATION.to_owned(), "3".to_owned())].into());
    d.status = Some(DeploymentStatus {
        replicas: Some(2),
        updated_replicas: Some(2),
        ready_replicas: Some(2),
        available_replicas: Some(2),
        observed_generation: Some(1),
        conditions: Some(available_and_progressing(REPLICA_SET_UPDATED_REASON, 10)),
        ..Default::default()
    });
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, &[v1.clone(), v2, v3.clone()], &[], 100),
        Ok(None)
    );
    let deleted: Vec<String> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Delete(n) => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [name(&v1)]);
    let status = fake.last_status().unwrap_or_default();
    assert_eq!(
        condition(&status, PROGRESSING),
        (
            "True".into(),
            NEW_RS_AVAILABLE_REASON.into(),
            format!("ReplicaSet \"{}\" has successfully progressed.", name(&v3))
        )
    );
    // Next sync: nothing to write, nothing to requeue.
    let fake = Fake::default();
    assert_eq!(sync(&fake, &status, &[v3], &[], 200), Ok(None));
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

/// An available Deployment's conditions, progressing for `reason` since `progressed`.
fn available_and_progressing(reason: &str, progressed: i64) -> Vec<DeploymentCondition> {
    vec![
        new_condition(
            AVAILABLE,
            "True",
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            at(10),
        ),
        new_condition(PROGRESSING, "True", reason, "x".into(), at(progressed)),
    ]
}

#[test]
fn a_stuck_rollout_requeues_then_times_out() {
    let d0 = deployment(1, "v2");
    let old = rs(&d0, "v1", 1, 1, 1, 1);
    let new = rs(&d0, "v2", 1, 0, 2, 2);
    let mut d = d0.clone();
    d.metadata.annotations = Some([(REVISION_ANNOTATION.to_owned(), "2".to_owned())].into());
    d.status = Some(DeploymentStatus {
        replicas: Some(1),
        updated_replicas: Some(0),
        available_replicas: Some(1),
        ready_replicas: Some(1),
        observed_generation: Some(1),
        unavailable_replicas: Some(1),
        conditions: Some(available_and_progressing(NEW_REPLICA_SET_REASON, 1000)),
        ..Default::default()
    });
    // The new pod was created (progress at 1100), then nothing happens.
    let fake = Fake::default();
    let first = sync(&fake, &d, &[old.clone(), new.clone()], &[], 1100);
    let d = fake.last_status().unwrap_or(d);
    assert!(matches!(first, Ok(None)), "{first:?}");
    assert_eq!(condition(&d, PROGRESSING).1, REPLICA_SET_UPDATED_REASON);
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, &[old.clone(), new.clone()], &[], 1300),
        Ok(Some(Duration::from_secs(401)))
    );
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, &[old.clone(), new.clone()], &[], 1700),
        Ok(Some(Duration::from_secs(1)))
    );
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[old, new.clone()], &[], 1701), Ok(None));
    let status = fake.last_status().unwrap_or_default();
    assert_eq!(
        condition(&status, PROGRESSING),
        (
            "False".into(),
            TIMED_OUT_REASON.into(),
            format!("ReplicaSet \"{}\" has timed out progressing.", name(&new))
        )
    );
}

#[test]
fn recreate_scales_old_down_waits_for_pods_then_creates_new() {
    let d = recreate(deployment(3, "v2"));
    let old = rs(&d, "v1", 3, 3, 1, 1);
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, std::slice::from_ref(&old), &[], 100),
        Ok(None)
    );
    assert_eq!(fake.scaled(), [(name(&old), 0)]);
    assert!(!fake.calls().iter().any(|c| matches!(c, Call::Create(_))));

    // Scaled down but a pod still runs: wait.
    let old0 = rs(&d, "v1", 0, 0, 1, 1);
    let fake = Fake::default();
    assert_eq!(
        sync(
            &fake,
            &d,
            std::slice::from_ref(&old0),
            &[pod(&old0, "p", "Running")],
            110
        ),
        Ok(None)
    );
    assert_eq!(fake.scaled(), []);

    // Gone: the new replica set at full size.
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, &[old0], &[pod(&old, "p", "Succeeded")], 120),
        Ok(None)
    );
    let new_name = name(&rs(&d, "v2", 0, 0, 2, 2));
    assert_eq!(fake.scaled(), [(new_name.clone(), 3)]);
    assert_eq!(
        fake.events(),
        [format!(
            "Normal ScalingReplicaSet: Scaled up replica set {new_name} from 0 to 3"
        )]
    );
}

#[test]
fn a_resize_mid_rollout_scales_proportionally() {
    // Was 10 (max 13 with 25% surge); now 20 (max 25).
    let d = deployment(20, "v2");
    let mut old = rs(&d, "v1", 4, 4, 1, 1);
    let mut new = rs(&d, "v2", 6, 3, 2, 2);
    for rs in [&mut old, &mut new] {
        if let Some(a) = rs.metadata.annotations.as_mut() {
            a.insert(DESIRED_REPLICAS_ANNOTATION.into(), "10".into());
            a.insert(MAX_REPLICAS_ANNOTATION.into(), "13".into());
        }
    }
    let mut d = d;
    d.metadata.annotations = Some([(REVISION_ANNOTATION.to_owned(), "2".to_owned())].into());
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, &[old.clone(), new.clone()], &[], 100),
        Ok(None)
    );
    assert_eq!(fake.scaled(), [(name(&new), 17), (name(&old), 8)]);
    for call in fake.calls() {
        if let Call::Update(rs) = call {
            assert_eq!(int_annotation(&rs, DESIRED_REPLICAS_ANNOTATION), Some(20));
            assert_eq!(int_annotation(&rs, MAX_REPLICAS_ANNOTATION), Some(25));
        }
    }
    assert_eq!(
        fake.events(),
        [
            format!(
                "Normal ScalingReplicaSet: Scaled up replica set {} from 6 to 17",
                name(&new)
            ),
            format!(
                "Normal ScalingReplicaSet: Scaled up replica set {} from 4 to 8",
                name(&old)
            ),
        ]
    );
}

#[test]
fn a_plain_resize_scales_the_only_replica_set() {
    let d = deployment(5, "v1");
    let mut only = rs(&d, "v1", 3, 3, 1, 1);
    only.metadata
        .annotations
        .as_mut()
        .map(|a| a.insert(DESIRED_REPLICAS_ANNOTATION.into(), "3".into()));
    let mut d = d;
    d.metadata.annotations = Some([(REVISION_ANNOTATION.to_owned(), "1".to_owned())].into());
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[only.clone()], &[], 100), Ok(None));
    assert_eq!(fake.scaled(), [(name(&only), 5)]);
    assert_eq!(
        fake.events(),
        [format!(
            "Normal ScalingReplicaSet: Scaled up replica set {} from 3 to 5",
            name(&only)
        )]
    );
}

#[test]
fn paused_deployments_get_a_condition_and_no_rollout() {
    let mut d = deployment(3, "v2");
    if let Some(s) = d.spec.as_mut() {
        s.paused = Some(true);
    }
    let old = rs(&d, "v1", 3, 3, 1, 1);
    let fake = Fake::default();
    assert_eq!(
        sync(&fake, &d, std::slice::from_ref(&old), &[], 100),
        Ok(None)
    );
    assert!(
        !fake
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Create(_) | Call::Update(_))),
        "{:?}",
        fake.calls()
    );
    let status = fake.last_status().unwrap_or_default();
    assert_eq!(
        condition(&status, PROGRESSING),
        (
            "Unknown".into(),
            PAUSED_DEPLOY_REASON.into(),
            "Deployment is paused".into()
        )
    );

    // Resumed.
    let mut resumed = status.clone();
    if let Some(s) = resumed.spec.as_mut() {
        s.paused = Some(false);
    }
    let fake = Fake::default();
    let _ = sync(&fake, &resumed, &[old], &[], 200);
    let first = fake
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::Status(d) => Some(d),
            _ => None,
        })
        .unwrap_or_default();
    assert_eq!(
        condition(&first, PROGRESSING),
        (
            "Unknown".into(),
            RESUMED_DEPLOY_REASON.into(),
            "Deployment is resumed".into()
        )
    );
    assert!(fake.calls().iter().any(|c| matches!(c, Call::Create(_))));
}

#[test]
fn a_hash_collision_bumps_the_collision_count() {
    let d = deployment(1, "v1");
    // Someone else's replica set holds the name.
    let mut squatter = rs(&d, "v1", 1, 1, 1, 1);
    squatter.metadata.owner_references = None;
    squatter.metadata.labels = Some([("other".to_owned(), "x".to_owned())].into());
    let fake = Fake {
        existing: vec![squatter],
        ..Fake::default()
    };
    let result = sync(&fake, &d, &[], &[], 100);
    assert!(result.is_err(), "{result:?}");
    let status = fake.last_status().unwrap_or_default();
    assert_eq!(status.status.and_then(|s| s.collision_count), Some(1));
    // With the count the name differs.
    let mut bumped = d.clone();
    bumped.status = Some(DeploymentStatus {
        collision_count: Some(1),
        ..Default::default()
    });
    let fake = Fake::default();
    assert_eq!(sync(&fake, &bumped, &[], &[], 100), Ok(None));
    let expected = format!("foo-{}", compute_hash(&template("v1"), Some(1)));
    assert_eq!(fake.scaled(), [(expected, 1)]);
}

#[test]
fn an_existing_replica_set_of_ours_is_taken_after_already_exists() {
    let d = deployment(1, "v1");
    let ours = rs(&d, "v1", 1, 1, 1, 1);
    let fake = Fake {
        existing: vec![ours],
        ..Fake::default()
    };
    // The cache has not seen it yet: the create fails but it is ours.
    assert_eq!(sync(&fake, &d, &[], &[], 100), Ok(None));
    assert!(
        fake.last_status()
            .is_some_and(|d| d.status.and_then(|s| s.collision_count).is_none())
    );
}

#[test]
fn undo_to_an_old_template_reuses_its_replica_set_with_a_new_revision() {
    // kubectl rollout undo put v1's template back.
    let mut d = deployment(2, "v1");
    d.metadata.annotations = Some([(REVISION_ANNOTATION.to_owned(), "2".to_owned())].into());
    let v1 = rs(&d, "v1", 0, 0, 1, 1);
    let v2 = rs(&d, "v2", 2, 2, 2, 2);
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[v1.clone(), v2], &[], 100), Ok(None));
    let updated: Vec<ReplicaSet> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Update(rs) => Some(rs),
            _ => None,
        })
        .collect();
    let first = updated.first().cloned().unwrap_or_default();
    assert_eq!(name(&first), name(&v1));
    assert_eq!(revision(&first), Ok(3));
    let history = first
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .get(REVISION_HISTORY_ANNOTATION)
        .cloned();
    assert_eq!(history.as_deref(), Some("1"));
    // Then the rollout proceeds: v1 grows within the surge (2 + 1 allowed).
    assert_eq!(fake.scaled().last(), Some(&(name(&v1), 1)));
    let status = fake.last_status().unwrap_or_default();
    let revision = status
        .metadata
        .annotations
        .unwrap_or_default()
        .get(REVISION_ANNOTATION)
        .cloned();
    assert_eq!(revision.as_deref(), Some("3"));
}

#[test]
fn the_deprecated_rollback_annotation_rolls_back() {
    let mut d = deployment(2, "v2");
    d.metadata.annotations = Some(
        [(REVISION_ANNOTATION, "2"), (ROLLBACK_TO_ANNOTATION, "0")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
    );
    let v1 = rs(&d, "v1", 0, 0, 1, 1);
    let v2 = rs(&d, "v2", 2, 2, 2, 2);
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[v1, v2], &[], 100), Ok(None));
    let updated = fake
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::UpdateDeployment(d) => Some(d),
            _ => None,
        })
        .unwrap_or_default();
    assert_eq!(updated.spec.map(|s| s.template), Some(template("v1")));
    assert!(
        !updated
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(ROLLBACK_TO_ANNOTATION)
    );
    assert_eq!(
        fake.events(),
        ["Normal DeploymentRollback: Rolled back deployment \"foo\" to revision 1"]
    );

    // A revision that does not exist.
    d.metadata
        .annotations
        .as_mut()
        .map(|a| a.insert(ROLLBACK_TO_ANNOTATION.into(), "7".into()));
    let fake = Fake::default();
    let _ = sync(&fake, &d, &[], &[], 100);
    assert_eq!(
        fake.events().last().map(String::as_str),
        Some(
            "Warning DeploymentRollbackRevisionNotFound: Unable to find the revision to rollback to."
        )
    );
}

#[test]
fn adoption_and_release() {
    let d = deployment(1, "v1");
    let mut orphan = rs(&d, "v1", 1, 1, 1, 1);
    orphan.metadata.owner_references = None;
    let mut stray = rs(&d, "v0", 0, 0, 0, 1);
    stray.metadata.labels = Some([("app".to_owned(), "bar".to_owned())].into());
    // The deployment is gone from the API: no adoption.
    let fake = Fake::default();
    let result = sync(&fake, &d, &[orphan.clone(), stray.clone()], &[], 100);
    assert!(result.is_err_and(|e| e.contains("can't adopt ReplicaSet")));
    let patches: Vec<(String, serde_json::Value)> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Patch(n, p) => Some((n, p)),
            _ => None,
        })
        .collect();
    assert_eq!(
        patches,
        [(
            name(&stray),
            serde_json::json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "d-uid"}], "uid": stray.metadata.uid}})
        )]
    );
    // It is there: adopted with a controller reference.
    let fake = Fake {
        fresh: Some(d.clone()),
        ..Fake::default()
    };
    assert_eq!(
        sync(&fake, &d, std::slice::from_ref(&orphan), &[], 100),
        Ok(None)
    );
    let adopt = fake
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::Patch(_, p) => Some(p),
            _ => None,
        })
        .unwrap_or_default();
    assert_eq!(
        adopt,
        serde_json::json!({"metadata": {"ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "foo", "uid": "d-uid",
            "controller": true, "blockOwnerDeletion": true,
        }], "uid": orphan.metadata.uid}})
    );
    assert!(
        !fake.calls().iter().any(|c| matches!(c, Call::Create(_))),
        "the adopted one is the new one"
    );
}

#[test]
fn an_empty_selector_is_refused() {
    let mut d = deployment(1, "v1");
    if let Some(s) = d.spec.as_mut() {
        s.selector = Default::default();
    }
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[], &[], 100), Ok(None));
    assert_eq!(
        fake.events(),
        [
            "Warning SelectingAll: This deployment is selecting all pods. A non-empty selector is required."
        ]
    );
    assert_eq!(
        fake.last_status()
            .and_then(|d| d.status)
            .and_then(|s| s.observed_generation),
        Some(1)
    );
    assert_eq!(fake.scaled(), []);
}

#[test]
fn a_deleted_deployment_only_syncs_status() {
    let mut d = deployment(3, "v2");
    d.metadata.deletion_timestamp = Some(Time(at(50)));
    let old = rs(&d, "v1", 3, 3, 1, 1);
    let fake = Fake::default();
    assert_eq!(sync(&fake, &d, &[old], &[], 100), Ok(None));
    assert_eq!(fake.scaled(), []);
    let status = fake
        .last_status()
        .unwrap_or_default()
        .status
        .unwrap_or_default();
    assert_eq!((status.replicas, status.updated_replicas), (Some(3), None));
}

// ---------------------------------------------------------------------------------------------
// Informer handlers.

fn store_of<K>(objects: &[K]) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut writer = kube::runtime::reflector::store::Writer::<K>::default();
    for object in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(object.clone()));
    }
    writer.as_reader()
}

fn names(ds: &[Arc<Deployment>]) -> Vec<String> {
    ds.iter().filter_map(|d| d.metadata.name.clone()).collect()
}

#[test]
fn replica_set_changes_wake_their_deployments() {
    use super::deployments_for_rs_change;
    use crate::runtime::Change;
    let foo = deployment(1, "a");
    let mut bar = deployment(1, "a");
    bar.metadata.name = Some("bar".into());
    bar.metadata.uid = Some("bar-uid".into());
    let deployments = store_of(&[foo.clone(), bar.clone()]);
    let owned = rs(&foo, "a", 1, 1, 1, 1);
    let mut orphan = owned.clone();
    orphan.metadata.owner_references = None;
    let mut stranger = owned.clone();
    stranger
        .metadata
        .owner_references
        .iter_mut()
        .flatten()
        .for_each(|r| r.uid = "gone".into());

    #[track_caller]
    fn check(
        deployments: &kube::runtime::reflector::Store<Deployment>,
        change: Change<'_, ReplicaSet>,
        expected: &[&str],
    ) {
        let mut got = names(&deployments_for_rs_change(deployments, &change));
        got.sort();
        assert_eq!(got, expected);
    }
    check(
        &deployments,
        Change::Applied {
            old: None,
            new: &owned,
        },
        &["foo"],
    );
    // An orphan wakes every deployment selecting it.
    check(
        &deployments,
        Change::Applied {
            old: None,
            new: &orphan,
        },
        &["bar", "foo"],
    );
    check(
        &deployments,
        Change::Applied {
            old: None,
            new: &stranger,
        },
        &[],
    );
    check(&deployments, Change::Deleted(&owned), &["foo"]);
    check(&deployments, Change::Deleted(&orphan), &[]);
    // A relist's unchanged copy: nothing.
    check(
        &deployments,
        Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &owned,
        },
        &[],
    );
    let mut newer = owned.clone();
    newer.metadata.resource_version = Some("2".into());
    check(
        &deployments,
        Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &newer,
        },
        &["foo"],
    );
    // Moved from foo to bar: both.
    let mut moved = newer.clone();
    moved
        .metadata
        .owner_references
        .iter_mut()
        .flatten()
        .for_each(|r| {
            r.uid = "bar-uid".into();
            r.name = "bar".into();
        });
    check(
        &deployments,
        Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &moved,
        },
        &["bar", "foo"],
    );
    // Released and relabelled: the old owner and nobody else.
    let mut released = newer.clone();
    released.metadata.owner_references = None;
    released.metadata.labels = Some([("app".to_owned(), "other".to_owned())].into());
    check(
        &deployments,
        Change::Applied {
            old: Some(Arc::new(owned.clone())),
            new: &released,
        },
        &["foo"],
    );
    // Being deleted when first seen: as a deletion.
    let mut deleting = owned.clone();
    deleting.metadata.deletion_timestamp = Some(Time(at(1)));
    check(
        &deployments,
        Change::Applied {
            old: None,
            new: &deleting,
        },
        &["foo"],
    );
}

#[test]
fn the_last_pod_gone_wakes_a_recreate_deployment() {
    use super::deployment_for_pod_deletion;
    let d = recreate(deployment(1, "b"));
    let old = rs(&d, "a", 0, 0, 1, 1);
    let gone = pod(&old, "p1", "Running");
    let other = pod(&old, "p2", "Running");
    let deployments = store_of(std::slice::from_ref(&d));
    let replica_sets = store_of(std::slice::from_ref(&old));
    let wake = |pods: &[Arc<Pod>]| {
        let pods: Vec<Pod> = pods.iter().map(|p| (**p).clone()).collect();
        names(
            &deployment_for_pod_deletion(&deployments, &replica_sets, &store_of(&pods), &gone)
                .into_iter()
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(wake(std::slice::from_ref(&other)), Vec::<String>::new());
    assert_eq!(wake(&[]), ["foo"]);
    // Rolling deployments do not wait for pods.
    let rolling = deployment(1, "b");
    let deployments = store_of(std::slice::from_ref(&rolling));
    let found =
        deployment_for_pod_deletion(&deployments, &replica_sets, &store_of::<Pod>(&[]), &gone);
    assert!(found.is_none());
}
