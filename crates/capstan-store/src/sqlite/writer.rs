//! The single writer of a SQLite store.
//!
//! One thread owns the read-write connection. It takes every write request waiting in its queue
//! (up to `max_batch`), applies them in one transaction with consecutive revisions, commits (a
//! single fsync for the whole batch: group commit), hands the batch's events to the watch hub,
//! and only then answers the callers. A caller that got an answer therefore knows its write is
//! durable, and any watcher registered before the answer will see it.
//!
//! Between batches, and whenever it is idle, the writer also purges compacted history in small
//! transactions and returns freed pages to the file system, so compaction never holds the write
//! lock for long.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot};

use super::{key_bytes, read_kv};
use crate::watch::Hub;
use crate::{DeleteResponse, EventKind, KeyValue, Result, Revision, StoreError, WatchEvent};

/// Log rows examined per purge transaction.
const PURGE_CHUNK: i64 = 4096;
/// Free pages returned to the file system per vacuum step.
const VACUUM_CHUNK: i64 = 1024;

/// A write the writer thread performs.
#[derive(Debug)]
pub(super) enum WriteOp {
    Create {
        key: String,
        value: Bytes,
        /// When the key expires, in milliseconds since the Unix epoch.
        expires_at: Option<i64>,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Option<Revision>,
        expires_at: Option<i64>,
    },
    /// Deletes every key whose expiry is at or before `now` (milliseconds since the epoch).
    Expire {
        now: i64,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
    Compact {
        revision: Revision,
    },
}

/// The result of a write.
#[derive(Debug)]
pub(super) enum WriteOutcome {
    Put(KeyValue),
    Deleted(DeleteResponse),
    Compacted,
    Expired(usize),
}

/// A write and where to send its result.
#[derive(Debug)]
pub(super) struct WriteRequest {
    pub(super) op: WriteOp,
    pub(super) reply: oneshot::Sender<Result<WriteOutcome>>,
}

pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) requests: mpsc::Receiver<WriteRequest>,
    pub(super) hub: Arc<Hub>,
    /// The last committed revision, readable without a query.
    pub(super) committed: Arc<AtomicI64>,
    pub(super) revision: Revision,
    pub(super) compacted: Revision,
    /// The lowest revision that may still have a log row.
    pub(super) purged_below: Revision,
    pub(super) vacuum_pending: bool,
    pub(super) max_batch: usize,
    /// The exclusive lock on the database, released when the writer stops.
    pub(super) _lock: std::fs::File,
}

impl Writer {
    /// Serves requests until every sender is gone.
    pub(super) fn run(mut self) {
        loop {
            let first = if self.maintenance_pending() {
                match self.requests.try_recv() {
                    Ok(request) => request,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        self.maintenance_step();
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                match self.requests.blocking_recv() {
                    Some(request) => request,
                    None => break,
                }
            };
            let mut batch = vec![first];
            while batch.len() < self.max_batch {
                match self.requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            self.commit_batch(batch);
            if self.maintenance_pending() {
                self.maintenance_step();
            }
        }
        tracing::debug!("sqlite writer stopped");
    }

    fn commit_batch(&mut self, batch: Vec<WriteRequest>) {
        let (revision_before, compacted_before) = (self.revision, self.compacted);
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(batch.len());
        let outcome = (|| -> rusqlite::Result<()> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut state = BatchState {
                revision: self.revision,
                compacted: self.compacted,
            };
            for request in &batch {
                results.push(apply(&tx, &mut state, &request.op, &mut events)?);
            }
            if state.revision != self.revision || state.compacted != self.compacted {
                tx.prepare_cached("UPDATE meta SET revision = ?1, compacted = ?2 WHERE id = 1")?
                    .execute(params![state.revision, state.compacted])?;
            }
            tx.commit()?;
            self.revision = state.revision;
            self.compacted = state.compacted;
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.committed.store(self.revision, Ordering::Release);
                self.hub.publish(events);
                for (request, result) in batch.into_iter().zip(results) {
                    let _ = request.reply.send(result);
                }
            }
            Err(error) => {
                tracing::error!(%error, "sqlite write transaction failed");
                self.revision = revision_before;
                self.compacted = compacted_before;
                let message = error.to_string();
                for request in batch {
                    let _ = request.reply.send(Err(StoreError::Unavailable {
                        message: format!("sqlite write failed: {message}"),
                        source: None,
                    }));
                }
            }
        }
    }

    fn maintenance_pending(&self) -> bool {
        self.purged_below < self.compacted || self.vacuum_pending
    }

    /// One small step of compaction work: purge a chunk of history, or vacuum a chunk of pages.
    fn maintenance_step(&mut self) {
        let result = if self.purged_below < self.compacted {
            self.purge_step().map(|()| {
                if self.purged_below >= self.compacted {
                    self.vacuum_pending = true;
                }
            })
        } else {
            self.vacuum_step()
        };
        if let Err(error) = result {
            tracing::warn!(%error, "sqlite compaction step failed; will retry after the next write");
            // Give up on this round; the next compaction or write starts maintenance again.
            self.purged_below = self.compacted;
            self.vacuum_pending = false;
        }
    }

    /// Deletes the log rows of up to [`PURGE_CHUNK`] revisions from `purged_below` on, short of
    /// the compacted revision, except those holding a live key's current value.
    fn purge_step(&mut self) -> rusqlite::Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rows: Vec<(Revision, bool)> = tx
            .prepare_cached(
                "SELECT rev, EXISTS (SELECT 1 FROM kv WHERE kv.key = log.key AND kv.mod_rev = log.rev)
                 FROM log WHERE rev >= ?1 AND rev < ?2 ORDER BY rev LIMIT ?3",
            )?
            .query_map(
                params![self.purged_below, self.compacted, PURGE_CHUNK],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        {
            let mut delete = tx.prepare_cached("DELETE FROM log WHERE rev = ?1")?;
            for (rev, _) in rows.iter().filter(|(_, live)| !live) {
                delete.execute(params![rev])?;
            }
        }
        tx.commit()?;
        self.purged_below = match rows.last() {
            Some((last, _)) if rows.len() as i64 == PURGE_CHUNK => last + 1,
            _ => self.compacted,
        };
        Ok(())
    }

    fn vacuum_step(&mut self) -> rusqlite::Result<()> {
        self.conn
            .execute_batch(&format!("PRAGMA incremental_vacuum({VACUUM_CHUNK})"))?;
        // Moving pages goes through the write-ahead log; without an explicit truncating
        // checkpoint the log would keep growing for as long as the vacuum runs.
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        let free: i64 = self
            .conn
            .query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
        if free == 0 {
            self.vacuum_pending = false;
        }
        Ok(())
    }
}

struct BatchState {
    revision: Revision,
    compacted: Revision,
}

/// Applies one write inside the batch transaction. SQLite errors abort the whole batch; errors
/// of the request itself (a failed precondition, say) are its result and the batch goes on.
fn apply(
    tx: &Transaction<'_>,
    state: &mut BatchState,
    op: &WriteOp,
    events: &mut Vec<WatchEvent>,
) -> rusqlite::Result<Result<WriteOutcome>> {
    match op {
        WriteOp::Create {
            key,
            value,
            expires_at,
        } => {
            if tx
                .prepare_cached("SELECT 1 FROM kv WHERE key = ?1")?
                .exists(params![key_bytes(key)])?
            {
                return Ok(Err(StoreError::AlreadyExists { key: key.clone() }));
            }
            let revision = state.revision + 1;
            tx.prepare_cached(
                "INSERT INTO kv (key, create_rev, mod_rev, expires_at) VALUES (?1, ?2, ?2, ?3)",
            )?
            .execute(params![key_bytes(key), revision, expires_at])?;
            append_log(tx, revision, key, Some(value), revision, None)?;
            state.revision = revision;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: revision,
                mod_revision: revision,
            };
            events.push(WatchEvent {
                kind: EventKind::Put,
                kv: kv.clone(),
                prev: None,
            });
            Ok(Ok(WriteOutcome::Put(kv)))
        }
        WriteOp::Update {
            key,
            value,
            expected,
            expires_at,
        } => {
            let prev = match checked_current(tx, key, *expected)? {
                Ok(prev) => prev,
                Err(error) => return Ok(Err(error)),
            };
            if prev.value == *value {
                return Ok(Ok(WriteOutcome::Put(prev)));
            }
            let revision = state.revision + 1;
            tx.prepare_cached("UPDATE kv SET mod_rev = ?2, expires_at = ?3 WHERE key = ?1")?
                .execute(params![key_bytes(key), revision, expires_at])?;
            superseded(tx, state, &prev)?;
            append_log(
                tx,
                revision,
                key,
                Some(value),
                prev.create_revision,
                Some(&prev),
            )?;
            state.revision = revision;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: prev.create_revision,
                mod_revision: revision,
            };
            events.push(WatchEvent {
                kind: EventKind::Put,
                kv: kv.clone(),
                prev: Some(prev),
            });
            Ok(Ok(WriteOutcome::Put(kv)))
        }
        WriteOp::Delete { key, expected } => {
            let prev = match checked_current(tx, key, *expected)? {
                Ok(prev) => prev,
                Err(error) => return Ok(Err(error)),
            };
            let deleted = delete(tx, state, prev, events)?;
            Ok(Ok(WriteOutcome::Deleted(deleted)))
        }
        WriteOp::Expire { now } => {
            let expired: Vec<KeyValue> = tx
                .prepare_cached(live!(
                    "WHERE kv.expires_at <= ?1 ORDER BY kv.expires_at LIMIT 1024"
                ))?
                .query_map(params![now], read_kv)?
                .collect::<rusqlite::Result<_>>()?;
            let count = expired.len();
            for prev in expired {
                delete(tx, state, prev, events)?;
            }
            Ok(Ok(WriteOutcome::Expired(count)))
        }
        WriteOp::Compact { revision } => {
            if *revision > state.revision {
                return Ok(Err(StoreError::FutureRevision {
                    requested: *revision,
                    current: state.revision,
                }));
            }
            state.compacted = state.compacted.max(*revision);
            Ok(Ok(WriteOutcome::Compacted))
        }
    }
}

/// Deletes a key known to exist in state `prev`.
fn delete(
    tx: &Transaction<'_>,
    state: &mut BatchState,
    prev: KeyValue,
    events: &mut Vec<WatchEvent>,
) -> rusqlite::Result<DeleteResponse> {
    let revision = state.revision + 1;
    tx.prepare_cached("DELETE FROM kv WHERE key = ?1")?
        .execute(params![key_bytes(&prev.key)])?;
    superseded(tx, state, &prev)?;
    append_log(tx, revision, &prev.key, None, 0, Some(&prev))?;
    state.revision = revision;
    events.push(WatchEvent {
        kind: EventKind::Delete,
        kv: KeyValue {
            key: prev.key.clone(),
            value: Bytes::new(),
            create_revision: 0,
            mod_revision: revision,
        },
        prev: Some(prev.clone()),
    });
    Ok(DeleteResponse { prev, revision })
}

/// Drops the log row of a value that was current until now if compaction has passed it: the
/// purge kept it for as long as it was current, and nothing at or after the compacted revision
/// reads it (the new row holds it as the previous value).
fn superseded(tx: &Transaction<'_>, state: &BatchState, prev: &KeyValue) -> rusqlite::Result<()> {
    if prev.mod_revision < state.compacted {
        tx.prepare_cached("DELETE FROM log WHERE rev = ?1")?
            .execute(params![prev.mod_revision])?;
    }
    Ok(())
}

fn current(tx: &Transaction<'_>, key: &str) -> rusqlite::Result<Option<KeyValue>> {
    tx.prepare_cached(live!("WHERE kv.key = ?1"))?
        .query_row(params![key_bytes(key)], read_kv)
        .optional()
}

/// The key's current state, if it exists and (when `expected` is given) was last modified at
/// `expected`.
fn checked_current(
    tx: &Transaction<'_>,
    key: &str,
    expected: Option<Revision>,
) -> rusqlite::Result<Result<KeyValue>> {
    Ok(match current(tx, key)? {
        None => Err(StoreError::NotFound { key: key.into() }),
        Some(kv) => match expected {
            Some(expected) if expected != kv.mod_revision => Err(StoreError::Conflict {
                key: key.into(),
                expected,
                current: Box::new(kv),
            }),
            _ => Ok(kv),
        },
    })
}

fn append_log(
    tx: &Transaction<'_>,
    revision: Revision,
    key: &str,
    value: Option<&Bytes>,
    create_revision: Revision,
    prev: Option<&KeyValue>,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO log (rev, key, value, create_rev, prev_value, prev_create_rev, prev_mod_rev)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        revision,
        key_bytes(key),
        value.map(|v| v.as_ref()),
        create_revision,
        prev.map(|p| p.value.as_ref()),
        prev.map(|p| p.create_revision),
        prev.map(|p| p.mod_revision),
    ])?;
    Ok(())
}

/// The lowest revision that still has a log row, or `fallback` when the log is empty.
pub(super) fn oldest_logged(conn: &Connection, fallback: Revision) -> rusqlite::Result<Revision> {
    let oldest: Option<Revision> =
        conn.query_row("SELECT MIN(rev) FROM log", [], |row| row.get(0))?;
    Ok(oldest.unwrap_or(fallback))
}
