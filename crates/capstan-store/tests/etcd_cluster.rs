//! Failover of the etcd backend across the members of a real 3-member etcd cluster: a member the
//! store uses is killed with SIGKILL, and reads, writes and an open watch carry on with the other
//! two; once the member is restarted the store uses it again.
#![allow(clippy::expect_used)] // a failed step fails the test

mod common;
use common::next_events;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capstan_store::etcd::{EtcdBackend, EtcdConfig};
use capstan_store::{EventKind, ListOptions, Revision, Store, StoreError, WatchEvent};
use capstan_testkit::EtcdCluster;
use futures::StreamExt;

const TIMEOUT: Duration = Duration::from_secs(20);

async fn connect(endpoints: Vec<String>) -> EtcdBackend {
    EtcdBackend::connect(EtcdConfig {
        endpoints,
        prefix: "/failover".into(),
        watch_buffer: 1024,
    })
    .await
    .expect("connect to the etcd cluster")
}

/// Waits until `condition` holds for the backend's view of its members.
async fn wait_for_states(
    backend: &EtcdBackend,
    what: &str,
    condition: impl Fn(&[capstan_store::etcd::EndpointState]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let states = backend.endpoint_states();
        if condition(&states) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The raft member id of each endpoint and the id of the leader.
async fn raft_ids(endpoints: &[String]) -> (Vec<u64>, u64) {
    let mut ids = Vec::new();
    let mut leader = 0;
    for endpoint in endpoints {
        let mut client = etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .expect("connect to a member");
        let status = client.status().await.expect("member status");
        ids.push(status.header().expect("status header").member_id());
        leader = status.leader();
    }
    (ids, leader)
}

/// Makes sure the member at `index` does not lead: the test is about the client moving to
/// another member, not about the wait for a new raft leader, during which etcd itself holds up
/// writes whichever member they reach.
async fn move_leadership_away_from(endpoints: &[String], index: usize) {
    let (ids, leader) = raft_ids(endpoints).await;
    if ids[index] != leader {
        return;
    }
    let target = ids[(index + 1) % ids.len()];
    let mut client = etcd_client::Client::connect([endpoints[index].as_str()], None)
        .await
        .expect("connect to the leader");
    client.move_leader(target).await.expect("move the leader");
    let (_, leader) = raft_ids(endpoints).await;
    assert_eq!(leader, target, "leadership moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_fails_over_when_a_member_dies_and_uses_it_again_after_restart() {
    let mut cluster = EtcdCluster::start(3).expect("start a 3-member etcd cluster");
    let endpoints = cluster.endpoints();
    let backend = connect(endpoints.clone()).await;
    let store = Store::new(backend.clone());
    let writer = Store::new(connect(endpoints.clone()).await);

    // Requests go round-robin: after a few, every member has answered.
    for i in 0..6 {
        writer
            .create(&format!("/pods/before-{i}"), "v")
            .await
            .expect("create before the kill");
        store
            .list(&ListOptions::prefix("/pods/"))
            .await
            .expect("list");
    }
    assert!(
        backend
            .endpoint_states()
            .iter()
            .all(|s| s.healthy && s.answered > 0),
        "every member in use: {:?}",
        backend.endpoint_states()
    );

    let start = store.current_revision().await.expect("revision");
    let mut watch = store.watch("/pods/", start).await.expect("watch");
    wait_for_states(&backend, "the watch is open", |states| {
        states.iter().map(|s| s.watches).sum::<u64>() == 1
    })
    .await;
    // The member the watch streams from: killing it breaks the watch as well as the
    // connection the requests use.
    let victim = backend
        .endpoint_states()
        .iter()
        .position(|s| s.watches == 1)
        .expect("the watch's member");
    move_leadership_away_from(&endpoints, victim).await;

    let mut written: Vec<Revision> = Vec::new();
    for i in 0..3 {
        let kv = writer
            .create(&format!("/pods/watched-{i}"), "v")
            .await
            .expect("create");
        written.push(kv.mod_revision);
    }
    let mut seen = next_events(&mut watch, 3, TIMEOUT).await;

    // A writer keeps writing while the member dies: at most the one write in flight may fail.
    let loading = Arc::new(AtomicBool::new(true));
    let load = tokio::spawn({
        let writer = writer.clone();
        let loading = loading.clone();
        async move {
            let (mut ok, mut failed) = (Vec::new(), Vec::new());
            let mut n = 0;
            while loading.load(Ordering::Relaxed) {
                let key = format!("/load/{n}");
                match writer.create(&key, "v").await {
                    Ok(_) => ok.push(key),
                    Err(StoreError::Unavailable { message, .. }) => failed.push(message),
                    Err(error) => panic!("create {key}: {error}"),
                }
                n += 1;
            }
            (ok, failed)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed_at = tokio::time::Instant::now();
    cluster.kill(victim);
    tokio::time::sleep(Duration::from_millis(500)).await;
    loading.store(false, Ordering::Relaxed);
    let (loaded, load_failures) = load.await.expect("load task");
    eprintln!(
        "killed member {victim}; the writer wrote {} keys around the kill, failures: \
         {load_failures:?}",
        loaded.len()
    );
    assert!(
        load_failures.len() <= 1,
        "only the write in flight may fail: {load_failures:?}"
    );
    let listed = store
        .list(&ListOptions::prefix("/load/"))
        .await
        .expect("list the load");
    for key in &loaded {
        assert!(
            listed.kvs.iter().any(|kv| &kv.key == key),
            "{key} was acknowledged but is missing"
        );
    }

    // The killed member is out of use by now: reads and writes do not fail at all.
    for i in 0..3 {
        let key = format!("/pods/after-{i}");
        let kv = writer
            .create(&key, "v")
            .await
            .expect("create after the kill");
        written.push(kv.mod_revision);
    }
    let got = store
        .get("/pods/after-0", None)
        .await
        .expect("get after the kill")
        .kv
        .expect("/pods/after-0 exists");
    assert_eq!(got.value, "v");
    let updated = writer
        .update("/pods/after-0", "changed", Some(got.mod_revision))
        .await
        .expect("update after the kill");
    written.push(updated.mod_revision);
    let deleted = writer
        .delete("/pods/before-0", None)
        .await
        .expect("delete after the kill");
    written.push(deleted.revision);
    let pods = store
        .list(&ListOptions::prefix("/pods/"))
        .await
        .expect("list after the kill");
    assert_eq!(pods.kvs.len(), 6 + 3 + 3 - 1);
    assert_eq!(store.count("/pods/").await.expect("count"), 11);
    let recovered_in = killed_at.elapsed();

    // The watch moved to another member with neither a gap nor a duplicate.
    seen.extend(next_events(&mut watch, 5, TIMEOUT).await);
    let revisions: Vec<Revision> = seen.iter().map(WatchEvent::revision).collect();
    assert_eq!(revisions, written, "no gap, no duplicate across the kill");
    let last = seen.last().expect("events");
    assert_eq!(last.kind, EventKind::Delete);
    assert_eq!(last.kv.key, "/pods/before-0");
    let quiet = tokio::time::timeout(Duration::from_millis(300), watch.next()).await;
    assert!(quiet.is_err(), "unexpected extra event: {quiet:?}");

    let states = backend.endpoint_states();
    assert!(
        !states[victim].healthy,
        "the killed member is out: {states:?}"
    );
    assert_eq!(states[victim].watches, 0);
    assert_eq!(states.iter().map(|s| s.watches).sum::<u64>(), 1);
    eprintln!("served by the other members within {recovered_in:?} of the kill");

    // Restarted, the member is probed back into use.
    cluster.restart(victim).expect("restart the member");
    wait_for_states(&backend, "the restarted member is healthy", |states| {
        states[victim].healthy
    })
    .await;
    let before = backend.endpoint_states()[victim].answered;
    for i in 0..6 {
        store.get("/pods/after-0", None).await.expect("get");
        let kv = writer
            .create(&format!("/pods/restarted-{i}"), "v")
            .await
            .expect("create after the restart");
        written.push(kv.mod_revision);
    }
    let after = backend.endpoint_states()[victim].answered;
    assert!(
        after >= before + 2,
        "the restarted member answers its share again ({before} -> {after})"
    );
    seen.extend(next_events(&mut watch, 6, TIMEOUT).await);
    let revisions: Vec<Revision> = seen.iter().map(WatchEvent::revision).collect();
    assert_eq!(revisions, written, "the watch still follows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_first_endpoint_is_dead_connects_to_the_next() {
    let cluster = EtcdCluster::start(1).expect("start etcd");
    // Nothing listens on a freshly handed out port.
    let dead = format!("http://127.0.0.1:{}", capstan_testkit::free_port());
    let live = cluster.member(0).endpoint();
    let backend = connect(vec![dead.clone(), live.clone()]).await;
    let store = Store::new(backend.clone());

    for i in 0..4 {
        store
            .create(&format!("/k{i}"), "v")
            .await
            .expect("create through the live endpoint");
    }
    let listed = store.list(&ListOptions::prefix("/")).await.expect("list");
    assert_eq!(listed.kvs.len(), 4);
    let states = backend.endpoint_states();
    assert_eq!(states[0].endpoint, dead);
    assert!(!states[0].healthy, "the dead endpoint is out: {states:?}");
    assert_eq!(states[0].answered, 0);
    assert!(states[1].healthy);
    assert!(states[1].answered >= 6, "{states:?}");

    // With no member reachable at all, connecting fails with an error naming the endpoints.
    let nowhere = format!("http://127.0.0.1:{}", capstan_testkit::free_port());
    let started = std::time::Instant::now();
    match EtcdBackend::connect(EtcdConfig {
        endpoints: vec![dead.clone(), nowhere.clone()],
        ..EtcdConfig::default()
    })
    .await
    {
        Err(StoreError::Unavailable { message, .. }) => {
            assert!(
                message.contains(&dead) && message.contains(&nowhere),
                "{message}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "gave up within the retry budget: {:?}",
        started.elapsed()
    );
}
