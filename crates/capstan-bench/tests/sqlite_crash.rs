//! Crash durability of the SQLite backend: a child process writes through the store and prints
//! each acknowledged write; it is killed with SIGKILL at a random point; the database is reopened
//! and every acknowledged write must be there, with revisions that never go backwards. Ten
//! cycles on one database, so later cycles also recover from earlier kills.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_store::sqlite::SqliteConfig;
use capstan_store::{ListOptions, Store};

const CYCLES: usize = 10;

/// What the child acknowledged last for a key.
#[derive(Clone, Debug, PartialEq)]
enum Ack {
    Put { revision: i64, value: String },
    Deleted { revision: i64 },
}

impl Ack {
    fn revision(&self) -> i64 {
        match self {
            Ack::Put { revision, .. } | Ack::Deleted { revision } => *revision,
        }
    }
}

/// Runs the writer until it has acknowledged `kill_after` writes, kills it, and returns the
/// acknowledgements it printed.
fn run_and_kill(db: &std::path::Path, kill_after: usize) -> Vec<(String, Ack)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan-bench"))
        .args(["crash-writer", "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the crash writer");
    let stdout = child.stdout.take().expect("child stdout");
    let mut acks = Vec::new();
    let started = Instant::now();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child output");
        let parts: Vec<&str> = line.split(' ').collect();
        let ack = match parts.as_slice() {
            ["put", key, revision, value] => (
                key.to_string(),
                Ack::Put {
                    revision: revision.parse().expect("revision"),
                    value: value.to_string(),
                },
            ),
            ["del", key, revision] => (
                key.to_string(),
                Ack::Deleted {
                    revision: revision.parse().expect("revision"),
                },
            ),
            _ => panic!("unexpected line from the crash writer: {line:?}"),
        };
        acks.push(ack);
        if acks.len() >= kill_after || started.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    // SIGKILL while the writers are mid-flight (the pipe is not drained any more, but the
    // child only blocks on stdout after many lines, and it is being killed now anyway).
    child.kill().expect("kill the crash writer");
    let status = child.wait().expect("reap the crash writer");
    assert!(!status.success(), "the writer was killed, not finished");
    assert!(
        !acks.is_empty(),
        "the writer acknowledged nothing: {status}"
    );
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("state.db");
    let mut latest: HashMap<String, Ack> = HashMap::new();
    let mut last_revision = 0;
    for cycle in 0..CYCLES {
        // Kill points spread from very early (during start-up and the first commits) to
        // thousands of writes in.
        let kill_after = 1 + rand::random_range(0..(200 * (cycle + 1)));
        for (key, ack) in run_and_kill(&db, kill_after) {
            let newer = latest
                .get(&key)
                .is_none_or(|seen| ack.revision() > seen.revision());
            if newer {
                latest.insert(key, ack);
            }
        }

        let store = Store::sqlite(SqliteConfig::new(&db))
            .await
            .expect("reopen after SIGKILL");
        let revision = store.current_revision().await.expect("current revision");
        let max_acked = latest.values().map(Ack::revision).max().unwrap_or(0);
        assert!(
            revision >= max_acked,
            "cycle {cycle}: revision {revision} is older than acknowledged {max_acked}"
        );
        assert!(
            revision >= last_revision,
            "cycle {cycle}: revision went back from {last_revision} to {revision}"
        );

        for (key, ack) in &latest {
            let kv = store.get(key, None).await.expect("get").kv;
            match (ack, kv) {
                (Ack::Put { revision, value }, Some(kv)) if kv.mod_revision == *revision => {
                    assert_eq!(&String::from_utf8_lossy(&kv.value), value, "{key}");
                }
                (ack, Some(kv)) => assert!(
                    kv.mod_revision > ack.revision(),
                    "cycle {cycle}: {key} is at {} but {ack:?} was acknowledged",
                    kv.mod_revision
                ),
                (Ack::Deleted { .. }, None) => {}
                (Ack::Put { revision, .. }, None) => {
                    // Deleted later by a write that was committed but not yet acknowledged:
                    // the history must show that delete.
                    let history = store.get(key, Some(*revision)).await;
                    if let Ok(at) = history {
                        assert!(
                            at.kv.is_some(),
                            "cycle {cycle}: {key} lost its write at {revision}"
                        );
                    }
                }
            }
        }
        // The reopened store is fully usable: lists agree with gets, writes go on.
        let listed = store
            .list(&ListOptions::prefix("/crash/"))
            .await
            .expect("list");
        for kv in &listed.kvs {
            let got = store.get(&kv.key, None).await.expect("get").kv;
            assert_eq!(got.as_ref(), Some(kv));
        }
        let next = store
            .create(&format!("/check/{cycle}"), "ok")
            .await
            .expect("write after recovery");
        assert_eq!(next.mod_revision, revision + 1);
        last_revision = next.mod_revision;
        drop(store);
        // The store's lock is released when its writer thread has let go of the file.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
