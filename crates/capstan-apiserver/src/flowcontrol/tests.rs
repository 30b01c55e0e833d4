//! The classifier over the bootstrap configuration, and the seats and queues of a level.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfigurationSpec;
use serde_json::json;

use super::*;

fn bootstrap() -> Flowcontrol {
    let (mandatory, suggested) = bootstrap_objects();
    let mut levels = Vec::new();
    let mut schemas = Vec::new();
    for (i, mut object) in mandatory.into_iter().chain(suggested).enumerate() {
        object["metadata"]["uid"] = json!(format!("uid-{i}"));
        if object["kind"] == "FlowSchema" {
            schemas.push(serde_json::from_value(object).unwrap());
        } else {
            levels.push(serde_json::from_value(object).unwrap());
        }
    }
    let flowcontrol = Flowcontrol::default();
    flowcontrol.rebuild(&levels, &schemas);
    flowcontrol
}

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        ..User::default()
    }
}

/// The name of the level a request lands in.
fn level_of(fc: &Flowcontrol, who: &User, method: &str, path: &str) -> String {
    let info = RequestInfo::new(method, path, "");
    let classified = fc.classify(who, &info).expect("classified");
    fc.levels_read()
        .iter()
        .find(|(_, l)| Arc::ptr_eq(l, &classified.level))
        .map(|(name, _)| name.clone())
        .unwrap()
}

#[test]
fn requests_land_in_upstreams_levels() {
    let fc = bootstrap();
    let admin = user("admin", &["system:masters", "system:authenticated"]);
    assert_eq!(level_of(&fc, &admin, "GET", "/api/v1/pods"), "exempt");
    let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
    assert_eq!(
        level_of(&fc, &node, "PUT", "/api/v1/nodes/n1/status"),
        "node-high"
    );
    assert_eq!(level_of(&fc, &node, "GET", "/api/v1/pods"), "system");
    let scheduler = user("system:kube-scheduler", &["system:authenticated"]);
    assert_eq!(
        level_of(
            &fc,
            &scheduler,
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"
        ),
        "leader-election"
    );
    assert_eq!(
        level_of(
            &fc,
            &scheduler,
            "POST",
            "/api/v1/namespaces/default/pods/p/binding"
        ),
        "workload-high"
    );
    let sa = user(
        "system:serviceaccount:apps:builder",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:apps",
            "system:authenticated",
        ],
    );
    assert_eq!(
        level_of(&fc, &sa, "GET", "/api/v1/namespaces/apps/pods"),
        "workload-low"
    );
    let kube_system_sa = user(
        "system:serviceaccount:kube-system:coredns",
        &["system:serviceaccounts", "system:authenticated"],
    );
    assert_eq!(
        level_of(&fc, &kube_system_sa, "GET", "/api/v1/services"),
        "workload-high"
    );
    let jane = user("jane", &["system:authenticated"]);
    assert_eq!(
        level_of(&fc, &jane, "GET", "/api/v1/namespaces/default/pods"),
        "global-default"
    );
    assert_eq!(level_of(&fc, &jane, "GET", "/healthz"), "exempt");
    let anonymous = user("system:anonymous", &["system:unauthenticated"]);
    assert_eq!(
        level_of(&fc, &anonymous, "GET", "/version"),
        "global-default"
    );
}

#[test]
fn limited_levels_share_the_server_by_their_shares() {
    let fc = bootstrap();
    let levels = fc.levels_read();
    // 600 seats over 245 shares: global-default has 20 of them.
    let global = &levels["global-default"];
    assert!(
        global.same_as(&Level::new(
            "global-default",
            global.uid(),
            serde_json::from_value::<PriorityLevelConfigurationSpec>(json!({
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 20, "limitResponse": {"type": "Queue",
                            "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}
            }))
            .ok()
            .as_ref(),
            49,
        ))
    );
}

fn level(spec: serde_json::Value, seats: usize) -> Arc<Level> {
    let spec: PriorityLevelConfigurationSpec = serde_json::from_value(spec).unwrap();
    Arc::new(Level::new("test", "uid", Some(&spec), seats))
}

#[tokio::test]
async fn a_rejecting_level_answers_at_once_when_full() {
    let level = level(
        json!({"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}),
        1,
    );
    let seat = level.admit(1, Duration::from_secs(1)).await.unwrap();
    assert!(seat.is_some());
    assert_eq!(
        level.admit(2, Duration::from_secs(1)).await.unwrap_err(),
        Rejected::Full
    );
    drop(seat);
    assert!(
        level
            .admit(2, Duration::from_secs(1))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn queued_flows_take_turns_and_full_queues_reject() {
    let level = level(
        json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
               "queuing": {"queues": 8, "handSize": 1, "queueLengthLimit": 2}}}}),
        1,
    );
    let held = level.admit(0, Duration::from_secs(5)).await.unwrap();
    // Flow A queues two requests and the third is rejected: its one queue is full.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiting = Vec::new();
    for (flow, tag) in [(11_u64, "a1"), (11, "a2")] {
        let (level, tx) = (level.clone(), tx.clone());
        waiting.push(tokio::spawn(async move {
            let seat = level.admit(flow, Duration::from_secs(5)).await.unwrap();
            tx.send(tag).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(seat);
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        level.admit(11, Duration::from_secs(5)).await.unwrap_err(),
        Rejected::Full
    );
    // Flow B, in another queue, waits too, and gets its turn before A's second request.
    let flow_b = (0..u64::MAX)
        .find(|f| hand_queue(*f) != hand_queue(11))
        .unwrap();
    {
        let (level, tx) = (level.clone(), tx.clone());
        waiting.push(tokio::spawn(async move {
            let seat = level.admit(flow_b, Duration::from_secs(5)).await.unwrap();
            tx.send("b1").unwrap();
            drop(seat);
        }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(level.load(), (1, 3));
    drop(held);
    for task in waiting {
        task.await.unwrap();
    }
    let mut order = Vec::new();
    while let Ok(tag) = rx.try_recv() {
        order.push(tag);
    }
    assert_eq!(order.len(), 3);
    assert!(
        order.iter().position(|t| *t == "b1") < order.iter().position(|t| *t == "a2"),
        "{order:?}"
    );
    assert_eq!(level.load(), (0, 0));
}

fn hand_queue(flow: u64) -> usize {
    super::levels::tests_support::hand(flow, 8, 1)[0]
}

#[tokio::test]
async fn a_request_that_waits_too_long_is_rejected_and_frees_its_place() {
    let level = level(
        json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
               "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}}),
        1,
    );
    let held = level.admit(0, Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        level.admit(1, Duration::from_millis(50)).await.unwrap_err(),
        Rejected::TimedOut
    );
    // Its place in the queue is free again.
    let waiter = {
        let level = level.clone();
        tokio::spawn(async move {
            level
                .admit(2, Duration::from_secs(5))
                .await
                .map(|s| s.is_some())
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(held);
    assert_eq!(waiter.await.unwrap(), Ok(true));
    assert_eq!(level.load(), (0, 0));
}

#[tokio::test]
async fn exempt_levels_never_wait() {
    let level = level(json!({"type": "Exempt"}), 0);
    for _ in 0..1000 {
        assert!(
            level
                .admit(1, Duration::from_millis(1))
                .await
                .unwrap()
                .is_none()
        );
    }
}
