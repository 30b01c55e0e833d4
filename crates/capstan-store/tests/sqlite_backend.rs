//! Behaviour specific to the SQLite backend: exclusive ownership of the file, persistence across
//! restarts, and compaction that really bounds the file.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_store::sqlite::SqliteConfig;
use capstan_store::{ListOptions, Store, StoreError};

async fn open(path: &Path) -> Store {
    Store::sqlite(SqliteConfig::new(path)).await.expect("open")
}

/// Reopens once the previous store's writer thread has released the file.
async fn reopen(path: &Path) -> Store {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Store::sqlite(SqliteConfig::new(path)).await {
            Ok(store) => return store,
            Err(error) if Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("reopen: {error}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_owner_of_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await;
    match Store::sqlite(SqliteConfig::new(&path)).await {
        Err(StoreError::Unavailable { message, .. }) => {
            assert!(message.contains("in use by another process"), "{message}");
        }
        other => panic!("second open: expected Unavailable, got {other:?}"),
    }
    store.create("/still/works", "yes").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_history_and_compaction_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("state.db");
    let store = open(&path).await;
    for i in 0..10 {
        store
            .update_or_create_for_test("/r/a", &i.to_string())
            .await;
    }
    store.create("/r/b", "b").await.unwrap();
    let before = store.current_revision().await.unwrap();
    store.compact(5).await.unwrap();
    drop(store);

    let store = reopen(&path).await;
    assert_eq!(store.current_revision().await.unwrap(), before);
    let listed = store.list(&ListOptions::prefix("/r/")).await.unwrap();
    assert_eq!(listed.kvs.len(), 2);
    let at_six = store.get("/r/a", Some(6)).await.unwrap().kv.unwrap();
    assert_eq!(&at_six.value[..], b"5");
    assert!(matches!(
        store.get("/r/a", Some(4)).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        store.watch("/r/", 3).await.map(drop),
        Err(StoreError::Compacted { .. })
    ));
    let next = store.create("/r/c", "c").await.unwrap();
    assert_eq!(
        next.mod_revision,
        before + 1,
        "revisions continue after a restart"
    );
}

fn file_sizes(path: &Path) -> (u64, u64) {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let wal = Path::new(&format!("{}-wal", path.display())).to_path_buf();
    (size(path), size(&wal))
}

fn log_rows(path: &Path) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("SELECT COUNT(*) FROM log", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_purges_history_and_shrinks_the_file() {
    const KEYS: usize = 50;
    const UPDATES: usize = 12_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await;
    let value = "x".repeat(1024);
    let mut writers = Vec::new();
    for w in 0..8 {
        let (store, value) = (store.clone(), value.clone());
        writers.push(tokio::spawn(async move {
            for i in (w..UPDATES).step_by(8) {
                store
                    .update_or_create_for_test(
                        &format!("/churn/{}", i % KEYS),
                        &format!("{i}{value}"),
                    )
                    .await;
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let grown = file_sizes(&path).0;
    assert!(
        log_rows(&path) as usize >= UPDATES,
        "history is kept until compaction"
    );

    let current = store.current_revision().await.unwrap();
    store.compact(current).await.unwrap();
    // The purge runs in the writer's idle time; one more write wakes the writer up.
    store.create("/after", "compaction").await.unwrap();
    // What stays: the row of each live key's current value (the churned keys and `/after`).
    let deadline = Instant::now() + Duration::from_secs(60);
    while log_rows(&path) > KEYS as i64 + 1 {
        assert!(Instant::now() < deadline, "history was not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Free pages go back to the file system once they are checkpointed into the main file.
    let live = (KEYS * 1100) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (db, wal) = file_sizes(&path);
        // The write-ahead log is truncated as the vacuum goes, not left at its peak.
        if db < grown / 4 && db < 40 * live && wal < 16 << 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "file did not shrink: {db} bytes (+{wal} in the WAL) now, {grown} before compaction, {live} live"
        );
        // Writes trigger checkpoints of the write-ahead log into the main file.
        store
            .update_or_create_for_test("/tick", &format!("{db}"))
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = store.list(&ListOptions::prefix("/churn/")).await.unwrap();
    assert_eq!(listed.kvs.len(), KEYS);
    for kv in &listed.kvs {
        assert!(
            kv.value.ends_with(value.as_bytes()),
            "{} lost its value",
            kv.key
        );
    }
    // A kept row goes once its key changes again.
    let rows = log_rows(&path);
    store.update_or_create_for_test("/churn/0", "changed").await;
    assert_eq!(
        log_rows(&path),
        rows,
        "the superseded value's row was not dropped"
    );
    assert_eq!(
        &store.get("/churn/0", None).await.unwrap().kv.unwrap().value[..],
        b"changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await;
    store
        .create_with_ttl("/events/e1", "x", Duration::from_secs(1))
        .await
        .unwrap();
    drop(store);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let store = reopen(&path).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get("/events/e1", None).await.unwrap().kv.is_some() {
        assert!(
            Instant::now() < deadline,
            "the key outlived its TTL across a restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_without_expiry_are_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        // The first schema: before keys could expire, and with each live value in `kv` as
        // well as in `log`. `/purged` was last written before the compacted revision, so its
        // log row is gone.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 1), revision INTEGER NOT NULL,
                                compacted INTEGER NOT NULL);
             INSERT INTO meta VALUES (1, 3, 2);
             CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
                              mod_rev INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO kv VALUES (CAST('/purged' AS BLOB), CAST('compacted' AS BLOB), 1, 1);
             INSERT INTO kv VALUES (CAST('/old' AS BLOB), CAST('kept' AS BLOB), 2, 3);
             CREATE TABLE log (rev INTEGER PRIMARY KEY, key BLOB NOT NULL, value BLOB,
                               create_rev INTEGER NOT NULL, prev_value BLOB,
                               prev_create_rev INTEGER, prev_mod_rev INTEGER);
             INSERT INTO log VALUES (3, CAST('/old' AS BLOB), CAST('kept' AS BLOB), 2,
                                     CAST('first' AS BLOB), 2, 2);",
        )
        .unwrap();
    }
    let store = open(&path).await;
    let old = store.get("/old", None).await.unwrap().kv.unwrap();
    assert_eq!(
        (&old.value[..], old.create_revision, old.mod_revision),
        (&b"kept"[..], 2, 3)
    );
    let purged = store.get("/purged", None).await.unwrap().kv.unwrap();
    assert_eq!(
        (&purged.value[..], purged.mod_revision),
        (&b"compacted"[..], 1)
    );
    let at_2 = store.get("/old", Some(2)).await.unwrap().kv.unwrap();
    assert_eq!(&at_2.value[..], b"first", "history survives the migration");
    let listed = store.list(&ListOptions::prefix("/")).await.unwrap();
    assert_eq!(listed.kvs.len(), 2);
    let short = store
        .create_with_ttl("/new", "v", Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(short.mod_revision, 4);
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get("/new", None).await.unwrap().kv.is_some() {
        assert!(
            Instant::now() < deadline,
            "TTL did not work after migration"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(store.get("/old", None).await.unwrap().kv.is_some());
}

/// A SQLite store is one server's: each compaction turn is its own, the first compacts nothing
/// and the next compacts to the revision the previous one saw.
#[tokio::test]
async fn compaction_turns_are_always_taken() {
    use capstan_store::CompactOutcome;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir.path().join("state.db")).await;
    let old = store.create("/k", "v1").await.expect("create");
    let first = store.compact_turn(0, 0).await.expect("first turn");
    assert!(
        matches!(first.outcome, CompactOutcome::Skipped),
        "{first:?}"
    );
    assert_eq!((first.version, first.revision), (1, old.mod_revision));
    let newer = store.update("/k", "v2", None).await.expect("update");
    let second = store
        .compact_turn(first.version, first.revision)
        .await
        .expect("second turn");
    assert!(
        matches!(second.outcome, CompactOutcome::Compacted(r) if r == old.mod_revision),
        "{second:?}"
    );
    assert_eq!((second.version, second.revision), (2, newer.mod_revision));
    // Reads at the compacted revision still work; the history before it is gone.
    store
        .update("/k", "v3", None)
        .await
        .expect("another update");
    let third = store
        .compact_turn(2, newer.mod_revision)
        .await
        .expect("turn");
    assert!(matches!(third.outcome, CompactOutcome::Compacted(_)));
    assert!(matches!(
        store.get("/k", Some(old.mod_revision)).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(store.get("/k", Some(newer.mod_revision)).await.is_ok());
}
