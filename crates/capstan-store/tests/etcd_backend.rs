//! Behaviour specific to the etcd backend, against a real etcd: key prefixes, watches that
//! survive an etcd restart, and the mapping of etcd's answers onto the store's.
#![allow(clippy::expect_used)] // a failed step fails the test

mod common;
use common::next_events;
use std::time::Duration;

use capstan_store::etcd::EtcdConfig;
use capstan_store::{EventKind, ListOptions, Revision, Store, StoreError, WatchEvent};
use capstan_testkit::EtcdServer;
use futures::StreamExt;

const TIMEOUT: Duration = Duration::from_secs(30);

async fn connect(server: &EtcdServer, prefix: &str) -> Store {
    let config = EtcdConfig {
        endpoints: vec![server.endpoint()],
        prefix: prefix.into(),
        watch_buffer: 1024,
    };
    Store::etcd(config).await.expect("connect to etcd")
}

fn keys(kvs: &[capstan_store::KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_different_prefixes_do_not_see_each_other() {
    let server = EtcdServer::start().expect("start etcd");
    let a = connect(&server, "/store-a").await;
    let b = connect(&server, "/store-b").await;
    let mut watch_a = a.watch("", 0).await.expect("watch a");
    let mut watch_b = b.watch("/pods/", 0).await.expect("watch b");

    a.create("/pods/x", "a-x").await.expect("create in a");
    b.create("/pods/x", "b-x").await.expect("same key in b");
    b.create("/pods/y", "b-y").await.expect("create in b");
    a.create("/nodes/n", "a-n").await.expect("create in a");

    let got = a
        .get("/pods/x", None)
        .await
        .expect("get a")
        .kv
        .expect("a has /pods/x");
    assert_eq!(got.key, "/pods/x", "the prefix is stripped");
    assert_eq!(got.value, "a-x");
    assert!(a.get("/pods/y", None).await.expect("get").kv.is_none());

    let all_a = a.list(&ListOptions::prefix("")).await.expect("list a");
    assert_eq!(keys(&all_a.kvs), ["/nodes/n", "/pods/x"]);
    let all_b = b.list(&ListOptions::prefix("")).await.expect("list b");
    assert_eq!(keys(&all_b.kvs), ["/pods/x", "/pods/y"]);
    assert_eq!(a.count("").await.expect("count a"), 2);
    assert_eq!(b.count("/pods/").await.expect("count b"), 2);

    // Deleting in one store leaves the other's key alone.
    b.delete("/pods/x", None).await.expect("delete in b");
    assert!(a.get("/pods/x", None).await.expect("get").kv.is_some());

    let events_a = next_events(&mut watch_a, 2, TIMEOUT).await;
    let seen_a: Vec<_> = events_a
        .iter()
        .map(|e| (e.kv.key.as_str(), &e.kv.value[..]))
        .collect();
    assert_eq!(
        seen_a,
        [("/pods/x", &b"a-x"[..]), ("/nodes/n", &b"a-n"[..])]
    );
    let events_b = next_events(&mut watch_b, 3, TIMEOUT).await;
    let seen_b: Vec<_> = events_b
        .iter()
        .map(|e| (e.kind, e.kv.key.as_str()))
        .collect();
    assert_eq!(
        seen_b,
        [
            (EventKind::Put, "/pods/x"),
            (EventKind::Put, "/pods/y"),
            (EventKind::Delete, "/pods/x")
        ]
    );
    // Nothing more arrives for either watcher (in particular not the other store's writes).
    let quiet = tokio::time::timeout(Duration::from_millis(300), watch_a.next()).await;
    assert!(quiet.is_err(), "unexpected event for store a: {quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_survives_an_etcd_restart() {
    let mut server = EtcdServer::start().expect("start etcd");
    let store = connect(&server, "/capstan").await;
    let writer = connect(&server, "/capstan").await;
    let mut watch = store.watch("/pods/", 0).await.expect("watch");

    let mut written: Vec<Revision> = Vec::new();
    for i in 0..5 {
        let kv = writer
            .create(&format!("/pods/before-{i}"), "v")
            .await
            .expect("create");
        written.push(kv.mod_revision);
    }
    let mut seen = next_events(&mut watch, 5, TIMEOUT).await;

    server.stop();
    // While etcd is down, writes fail as unavailable.
    match writer.create("/pods/while-down", "v").await {
        Err(StoreError::Unavailable { .. }) => {}
        other => panic!("expected Unavailable while etcd is down, got {other:?}"),
    }
    server.restart().expect("restart etcd");

    // Writes after the restart; the client reconnects on its own (retry while it does).
    for i in 0..5 {
        let key = format!("/pods/after-{i}");
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let kv = loop {
            match writer.create(&key, "v").await {
                Ok(kv) => break kv,
                Err(StoreError::Unavailable { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("create {key} after restart: {error}"),
            }
        };
        written.push(kv.mod_revision);
    }
    let updated = writer
        .update("/pods/before-0", "changed", None)
        .await
        .expect("update after restart");
    written.push(updated.mod_revision);

    seen.extend(next_events(&mut watch, 6, TIMEOUT).await);
    let revisions: Vec<Revision> = seen.iter().map(WatchEvent::revision).collect();
    assert_eq!(
        revisions, written,
        "no gap, no duplicate across the restart"
    );
    let last = seen.last().expect("events");
    assert_eq!(last.kv.value, "changed");
    assert_eq!(
        last.prev.as_ref().map(|p| p.value.clone()),
        Some("v".into())
    );
    let quiet = tokio::time::timeout(Duration::from_millis(300), watch.next()).await;
    assert!(quiet.is_err(), "unexpected extra event: {quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reads_and_errors_map_onto_etcd() {
    let server = EtcdServer::start().expect("start etcd");
    let store = connect(&server, "/smoke").await;
    assert_eq!(store.backend_name(), "etcd");

    let created = store.create("/k", "one").await.expect("create");
    assert_eq!(created.create_revision, created.mod_revision);
    assert!(matches!(
        store.create("/k", "again").await,
        Err(StoreError::AlreadyExists { .. })
    ));

    // Updating to the same value writes nothing.
    let same = store
        .update("/k", "one", Some(created.mod_revision))
        .await
        .expect("no-op update");
    assert_eq!(same, created);
    assert_eq!(
        store.current_revision().await.expect("revision"),
        created.mod_revision
    );

    let updated = store
        .update("/k", "two", Some(created.mod_revision))
        .await
        .expect("update");
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(updated.mod_revision, created.mod_revision + 1);
    match store
        .update("/k", "three", Some(created.mod_revision))
        .await
    {
        Err(StoreError::Conflict {
            expected, current, ..
        }) => {
            assert_eq!(expected, created.mod_revision);
            assert_eq!(*current, updated);
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert!(matches!(
        store.update("/missing", "x", None).await,
        Err(StoreError::NotFound { .. })
    ));

    // A value of the maximum size fits, and updating it (too large to send twice in one
    // transaction) still honours the precondition and the no-op rule.
    let big = vec![b'x'; capstan_store::MAX_VALUE_BYTES];
    let big_kv = store.create("/big", big.clone()).await.expect("create big");
    let same_big = store
        .update("/big", big.clone(), Some(big_kv.mod_revision))
        .await
        .expect("no-op big update");
    assert_eq!(same_big.mod_revision, big_kv.mod_revision);
    let mut big2 = big.clone();
    big2[0] = b'y';
    let big_updated = store
        .update("/big", big2.clone(), Some(big_kv.mod_revision))
        .await
        .expect("big update");
    assert_eq!(big_updated.mod_revision, big_kv.mod_revision + 1);
    assert!(matches!(
        store
            .update("/big", big.clone(), Some(big_kv.mod_revision))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let deleted_big = store.delete("/big", None).await.expect("delete big");
    assert_eq!(deleted_big.prev.value, big2);

    // Delete with and without preconditions.
    match store.delete("/k", Some(created.mod_revision)).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(*current, updated),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let deleted = store
        .delete("/k", Some(updated.mod_revision))
        .await
        .expect("delete");
    assert_eq!(deleted.prev, updated);
    assert!(matches!(
        store.delete("/k", None).await,
        Err(StoreError::NotFound { .. })
    ));

    // Paging through one snapshot while writes go on.
    for i in 0..7 {
        store
            .create(&format!("/pages/{i}"), format!("v{i}"))
            .await
            .expect("create page key");
    }
    store.create("/pagesX", "outside").await.expect("create");
    let mut options = ListOptions {
        limit: Some(3),
        ..ListOptions::prefix("/pages/")
    };
    let mut listed = Vec::new();
    let mut snapshot = None;
    loop {
        let page = store.list(&options).await.expect("list page");
        if let Some(revision) = snapshot {
            assert_eq!(
                page.revision, revision,
                "every page is read at the first one's revision"
            );
        }
        snapshot = Some(page.revision);
        listed.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        store
            .create(&format!("/pages/late-{}", listed.len()), "late")
            .await
            .expect("write");
        let Some(next) = page.continue_key() else {
            break;
        };
        options.start = Some(next);
        options.revision = Some(page.revision);
    }
    assert_eq!(
        listed,
        (0..7).map(|i| format!("/pages/{i}")).collect::<Vec<_>>()
    );

    // Compaction: old revisions become unreadable, compacting again is a no-op, the future is
    // refused.
    let current = store.current_revision().await.expect("revision");
    store.compact(current).await.expect("compact");
    store
        .compact(current - 1)
        .await
        .expect("compacting again is a no-op");
    assert!(matches!(
        store.get("/pages/0", Some(created.mod_revision)).await,
        Err(StoreError::Compacted { requested, .. }) if requested == created.mod_revision
    ));
    assert!(matches!(
        store
            .list(&ListOptions {
                revision: Some(2),
                ..ListOptions::prefix("/")
            })
            .await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        store.watch("/", created.mod_revision).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(
        store
            .get("/pages/0", Some(current))
            .await
            .expect("read at compaction")
            .kv
            .is_some()
    );
    match store.compact(current + 100).await {
        Err(StoreError::FutureRevision {
            requested,
            current: now,
        }) => {
            assert_eq!(requested, current + 100);
            assert_eq!(now, current);
        }
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    assert!(matches!(
        store.get("/pages/0", Some(current + 100)).await,
        Err(StoreError::FutureRevision { .. })
    ));
    assert!(matches!(
        store.watch("/", current + 100).await,
        Err(StoreError::FutureRevision { .. })
    ));
}

/// The compaction key's version and value, read straight from etcd.
async fn compact_key(server: &EtcdServer) -> Option<(i64, String)> {
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .expect("connect a plain client");
    let response = client
        .get(capstan_store::etcd::COMPACT_REV_KEY, None)
        .await
        .expect("read the compaction key");
    response.kvs().first().map(|kv| {
        (
            kv.version(),
            kv.value_str().expect("a text value").to_owned(),
        )
    })
}

/// Upstream's compaction transaction: of two servers that saw the same version, the first takes
/// the turn and the second learns the new version and the revision the first recorded; the key
/// lives outside every prefix, so servers with different prefixes share one schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_one_etcd_take_turns_compacting() {
    use capstan_store::CompactOutcome;
    let server = EtcdServer::start().expect("start etcd");
    let a = connect(&server, "/registry").await;
    let b = connect(&server, "/other").await;
    let old = a.create("/k", "v1").await.expect("create");

    // First turns: a takes it (no compaction on a first turn), b finds it taken.
    let a1 = a.compact_turn(0, 0).await.expect("a's first turn");
    assert!(matches!(a1.outcome, CompactOutcome::Skipped), "{a1:?}");
    assert_eq!(a1.version, 1);
    assert_eq!(compact_key(&server).await, Some((1, "0".to_owned())));
    let b1 = b.compact_turn(0, 0).await.expect("b's first turn");
    assert!(
        matches!(b1.outcome, CompactOutcome::TakenElsewhere(None)),
        "{b1:?}"
    );
    assert_eq!(b1.version, 1, "b learns the version");

    // Next interval: a compacts to what it saw at its first turn; b, a little later, finds the
    // turn taken again and learns what a compacted to, and compacts nothing.
    let newer = a.update("/k", "v2", None).await.expect("update");
    let a2 = a.compact_turn(a1.version, a1.revision).await.expect("a");
    assert!(
        matches!(a2.outcome, CompactOutcome::Compacted(r) if r == a1.revision),
        "{a2:?}"
    );
    let b2 = b.compact_turn(b1.version, b1.revision).await.expect("b");
    assert!(
        matches!(b2.outcome, CompactOutcome::TakenElsewhere(Some(r)) if r == a1.revision),
        "{b2:?}"
    );
    assert_eq!(b2.version, 2);
    assert_eq!(
        compact_key(&server).await,
        Some((2, a1.revision.to_string()))
    );
    assert!(matches!(
        a.get("/k", Some(old.mod_revision)).await,
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(
        a.get("/k", Some(newer.mod_revision))
            .await
            .expect("kept")
            .kv
            .expect("the key")
            .value,
        "v2"
    );

    // When a stops, b takes the next turn: it expects the version it learnt.
    let b3 = b.compact_turn(b2.version, b2.revision).await.expect("b");
    assert!(
        matches!(b3.outcome, CompactOutcome::Compacted(r) if r == b2.revision),
        "{b3:?}"
    );
    assert_eq!(b3.version, 3);
    assert_eq!(
        compact_key(&server).await,
        Some((3, b2.revision.to_string()))
    );
}

/// Two compactors on one etcd compact once per interval between them (the key's version counts
/// the turns taken: about one per interval, not one per server and interval), and history one
/// interval old is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactors_compact_once_per_interval() {
    let server = EtcdServer::start().expect("start etcd");
    let a = connect(&server, "/registry").await;
    let b = connect(&server, "/registry").await;
    let old = a.create("/k", "0").await.expect("create");
    let interval = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let compactors = (a.spawn_compactor(interval), b.spawn_compactor(interval));
    // Writes keep the revision moving, so each turn has something new to compact to.
    let mut last = old.clone();
    while started.elapsed() < Duration::from_millis(4500) {
        last = a
            .update("/k", last.mod_revision.to_string(), None)
            .await
            .expect("update");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(compactors);
    let elapsed = started.elapsed();
    let (version, value) = compact_key(&server).await.expect("the key exists");
    let intervals = (elapsed.as_millis() / interval.as_millis()) as i64;
    // Each compactor ticked up to `intervals` times; taking turns, they advanced the version
    // about once per interval (one more if both ticked in the first interval before either saw
    // the key), where two uncoordinated compactors would count twice as many.
    assert!(
        (2..=intervals + 1).contains(&version),
        "version {version} after {elapsed:?} ({intervals} intervals)"
    );
    let recorded: Revision = value.parse().expect("a revision");
    assert!(recorded > old.mod_revision, "recorded {recorded}");
    assert!(matches!(
        a.get("/k", Some(old.mod_revision)).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(
        a.get("/k", Some(recorded)).await.is_ok(),
        "the compacted revision itself is kept"
    );
}

/// A compactor alone on its etcd still compacts, from its second turn on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_compactor_compacts() {
    let server = EtcdServer::start().expect("start etcd");
    let store = connect(&server, "/registry").await;
    let old = store.create("/k", "0").await.expect("create");
    let _compactor = store.spawn_compactor(Duration::from_millis(300));
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut n = 0;
    loop {
        n += 1;
        store
            .update("/k", n.to_string(), None)
            .await
            .expect("update");
        if matches!(
            store.get("/k", Some(old.mod_revision)).await,
            Err(StoreError::Compacted { .. })
        ) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never compacted past {}",
            old.mod_revision
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (version, _) = compact_key(&server).await.expect("the key exists");
    assert!(version >= 2, "version {version}");
}
