//! The embedded backend: one SQLite file (bundled SQLite, WAL mode, `synchronous=FULL`).
//!
//! Layout:
//! - `log` holds one row per revision (the row id *is* the revision) with the new value and the
//!   value it replaced;
//! - `kv` holds the live keys only (clustered by key), each with the revision of its current
//!   value, which is read from that revision's `log` row: a list at the current revision is a
//!   range scan of live keys, never a scan of history, and each value is stored once. Inserts
//!   land all over the key-ordered `kv`, each dirtying a page that the commit has to write;
//!   with rows of a few dozen bytes instead of whole objects, a commit writes about half the
//!   pages it would with the value in `kv` too;
//! - `meta` holds the current and the compacted revision.
//!
//! The `log` row a live key's revision points at is kept through compactions; it goes once the
//! key changes again (then the new row holds its value as the previous one).
//!
//! Keys written with a TTL carry an expiry time in `kv`; a ticker thread asks the writer twice a
//! second to delete the keys whose time has come, through the same path as any delete.
//!
//! The state at an older revision `R` is the live state with the changes after `R` undone: for
//! every key changed after `R`, the `prev_*` columns of its first change after `R` say what it
//! was at `R`. Reads at `R` therefore touch only live rows and the log rows after `R`; they are
//! valid for every `R` at or after the compacted revision, because compaction only removes log
//! rows before it.
//!
//! Writes go through one writer thread (see [`writer`]) that group-commits whatever is queued;
//! reads run on a small pool of read-only connections, each in its own read transaction so that
//! the revision reported and the rows returned come from one snapshot. Watchers are fed by the
//! writer right after each commit; a watch from an older revision first replays the log.
//!
//! The file is locked until the writer thread has finished its last commit: a second process
//! opening the same file gets an error instead of corrupting the revision sequence.

/// A query of `(key, value, create_rev, mod_rev)` of live keys, the rest of the statement (a
/// `WHERE` on `kv`) appended: each value comes from the log row of the key's current revision.
macro_rules! live {
    ($rest:literal) => {
        concat!(
            "SELECT kv.key, log.value, kv.create_rev, kv.mod_rev FROM kv ",
            "JOIN log ON log.rev = kv.mod_rev ",
            $rest
        )
    };
}

mod writer;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use self::writer::{WriteOp, WriteOutcome, WriteRequest, Writer};
use crate::watch::{self, Hub, Replay};
use crate::{
    Backend, DeleteResponse, EventKind, GetResponse, KeyValue, ListOptions, ListResponse, Result,
    Revision, Store, StoreError, WatchEvent, WatchStream, prefix_end,
};

/// Settings of the SQLite backend.
#[derive(Clone, Debug)]
pub struct SqliteConfig {
    /// The database file; created with its parent directories if missing.
    pub path: PathBuf,
    /// Batches a watcher may have waiting before it is cut off as too slow.
    pub watch_buffer: usize,
    /// The most writes committed in one transaction.
    pub max_batch: usize,
    /// Reads that run at once, each on a connection kept open for reuse.
    pub read_connections: usize,
}

impl SqliteConfig {
    /// Defaults for a database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            watch_buffer: 1024,
            max_batch: 1024,
            read_connections: 4,
        }
    }
}

/// The SQLite backend; see the module documentation.
#[derive(Debug)]
pub struct SqliteBackend {
    writes: mpsc::Sender<WriteRequest>,
    hub: Arc<Hub>,
    committed: Arc<AtomicI64>,
    readers: Arc<ReadPool>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL,
    compacted INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (id, revision, compacted) VALUES (1, 0, 0);
CREATE TABLE IF NOT EXISTS kv (
    key BLOB PRIMARY KEY,
    create_rev INTEGER NOT NULL,
    mod_rev INTEGER NOT NULL,
    expires_at INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    rev INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    value BLOB,
    create_rev INTEGER NOT NULL,
    prev_value BLOB,
    prev_create_rev INTEGER,
    prev_mod_rev INTEGER
);
";

/// Whether table `kv` has `column`.
fn kv_has(conn: &Connection, column: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('kv') WHERE name = ?1",
        [column],
        |row| row.get(0),
    )
}

/// Brings a database written by an earlier version up to the current schema.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    if !kv_has(conn, "expires_at")? {
        conn.execute_batch("ALTER TABLE kv ADD COLUMN expires_at INTEGER")?;
    }
    if kv_has(conn, "value")? {
        // Values lived in `kv` as well as in `log`: make sure each live key's current
        // revision has its row in the log (compaction may have purged it), then drop the copy.
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             INSERT OR IGNORE INTO log (rev, key, value, create_rev)
                 SELECT mod_rev, key, value, create_rev FROM kv;
             CREATE TABLE kv_keys (
                 key BLOB PRIMARY KEY,
                 create_rev INTEGER NOT NULL,
                 mod_rev INTEGER NOT NULL,
                 expires_at INTEGER
             ) WITHOUT ROWID;
             INSERT INTO kv_keys SELECT key, create_rev, mod_rev, expires_at FROM kv;
             DROP TABLE kv;
             ALTER TABLE kv_keys RENAME TO kv;
             COMMIT;",
        )?;
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL",
    )
}

/// How often expired keys are looked for.
const EXPIRY_INTERVAL: Duration = Duration::from_millis(500);

/// Milliseconds since the Unix epoch.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn expiry(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|ttl| now_millis().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)))
}

/// Asks the writer to delete expired keys every [`EXPIRY_INTERVAL`] until the store is gone.
fn spawn_expiry_ticker(writes: mpsc::WeakSender<WriteRequest>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("sqlite-expiry".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EXPIRY_INTERVAL);
                let Some(writes) = writes.upgrade() else {
                    return;
                };
                let (reply, answer) = oneshot::channel();
                let request = WriteRequest {
                    op: WriteOp::Expire { now: now_millis() },
                    reply,
                };
                if writes.blocking_send(request).is_err() {
                    return;
                }
                drop(writes);
                match answer.blocking_recv() {
                    Ok(Ok(WriteOutcome::Expired(n))) if n > 0 => {
                        tracing::debug!(keys = n, "expired keys deleted");
                    }
                    Ok(Err(error)) => tracing::warn!(%error, "deleting expired keys failed"),
                    _ => {}
                }
            }
        })
        .map(drop)
}

fn sqlite_error(context: &str, path: &Path, error: rusqlite::Error) -> StoreError {
    StoreError::unavailable(format!("{context} {}", path.display()), error)
}

impl SqliteBackend {
    /// Opens (creating if needed) the database and starts its writer thread. Blocking.
    pub fn open(config: SqliteConfig) -> Result<Self> {
        let path = config.path.clone();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The database holds every Secret: a directory it creates is the owner's alone, as
            // etcd keeps its data directory (CIS 1.1.11). An existing one is left as it is.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    StoreError::unavailable(format!("cannot create {}", dir.display()), e)
                })?;
        }
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let lock = File::create(&lock_path).map_err(|e| {
            StoreError::unavailable(format!("cannot create {}", lock_path.display()), e)
        })?;
        lock.try_lock().map_err(|e| {
            StoreError::unavailable(
                format!(
                    "datastore {} is in use by another process (lock {})",
                    path.display(),
                    lock_path.display()
                ),
                e,
            )
        })?;

        let conn = Connection::open(&path).map_err(|e| sqlite_error("cannot open", &path, e))?;
        // The writer checkpoints the WAL every 4,000 pages (32 MiB) rather than SQLite's usual
        // 1,000: a checkpoint holds every write while it runs, and at 1,000 pages about one
        // create in ten waited behind one (API creates at 32 clients, p99: 16-17 ms at 1,000
        // pages, 13-14 ms at 4,000). The price is a rarer and longer wait, up to ~0.2 s.
        conn.execute_batch(
            "PRAGMA page_size = 8192;
             PRAGMA auto_vacuum = INCREMENTAL;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA busy_timeout = 10000;
             PRAGMA journal_size_limit = 67108864;
             PRAGMA wal_autocheckpoint = 4000;
             PRAGMA cache_size = -65536;",
        )
        .and_then(|()| conn.execute_batch(SCHEMA))
        .and_then(|()| migrate(&conn))
        .map_err(|e| sqlite_error("cannot initialise", &path, e))?;
        let (meta_revision, compacted): (Revision, Revision) = conn
            .query_row(
                "SELECT revision, compacted FROM meta WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(|e| sqlite_error("cannot read", &path, e))?;
        let logged: Option<Revision> = conn
            .query_row("SELECT MAX(rev) FROM log", [], |row| row.get(0))
            .map_err(|e| sqlite_error("cannot read", &path, e))?;
        let revision = meta_revision.max(logged.unwrap_or(0));
        let purged_below = writer::oldest_logged(&conn, compacted)
            .map_err(|e| sqlite_error("cannot read", &path, e))?;

        let hub = Arc::new(Hub::new(revision, config.watch_buffer));
        let committed = Arc::new(AtomicI64::new(revision));
        let (writes, requests) = mpsc::channel(config.max_batch.max(1) * 4);
        let writer = Writer {
            conn,
            requests,
            hub: hub.clone(),
            committed: committed.clone(),
            revision,
            compacted,
            purged_below: purged_below.min(compacted),
            vacuum_pending: false,
            max_batch: config.max_batch.max(1),
            _lock: lock,
        };
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::unavailable("cannot start the sqlite writer thread", e))?;
        spawn_expiry_ticker(writes.downgrade())
            .map_err(|e| StoreError::unavailable("cannot start the sqlite expiry thread", e))?;
        tracing::info!(path = %path.display(), revision, compacted, "opened sqlite datastore");
        Ok(SqliteBackend {
            writes,
            hub,
            committed,
            readers: Arc::new(ReadPool {
                path,
                idle: Mutex::new(Vec::new()),
                keep: config.read_connections.max(1),
                permits: Arc::new(tokio::sync::Semaphore::new(config.read_connections.max(1))),
            }),
        })
    }

    async fn write(&self, op: WriteOp) -> Result<WriteOutcome> {
        let (reply, answer) = oneshot::channel();
        self.writes
            .send(WriteRequest { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// A create or update, whose outcome is the key as written.
    async fn put(&self, op: WriteOp) -> Result<KeyValue> {
        match self.write(op).await? {
            WriteOutcome::Put(kv) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }
}

impl Store {
    /// Opens a SQLite store.
    pub async fn sqlite(config: SqliteConfig) -> Result<Store> {
        let backend = tokio::task::spawn_blocking(move || SqliteBackend::open(config))
            .await
            .map_err(|e| StoreError::unavailable("sqlite open task failed", e))??;
        Ok(Store::new(backend))
    }
}

pub(super) fn key_bytes(key: &str) -> &[u8] {
    key.as_bytes()
}

fn key_string(bytes: Vec<u8>) -> rusqlite::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Blob, Box::new(e))
    })
}

/// Reads a `(key, value, create_rev, mod_rev)` row.
pub(super) fn read_kv(row: &rusqlite::Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue {
        key: key_string(row.get(0)?)?,
        value: Bytes::from(row.get::<_, Vec<u8>>(1)?),
        create_revision: row.get(2)?,
        mod_revision: row.get(3)?,
    })
}

/// Reads `(value, create_rev, mod_rev)` columns starting at `at` that may all be NULL.
fn read_optional_kv(
    key: &str,
    row: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<Option<KeyValue>> {
    let value: Option<Vec<u8>> = row.get(at)?;
    Ok(match value {
        None => None,
        Some(value) => Some(KeyValue {
            key: key.to_owned(),
            value: Bytes::from(value),
            create_revision: row.get(at + 1)?,
            mod_revision: row.get(at + 2)?,
        }),
    })
}

/// Read-only connections, reused across reads. Each read runs on a blocking thread, and at most
/// `keep` run at once: a burst of reads queues for a connection instead of opening one (and
/// taking a blocking thread and a page cache) per read.
#[derive(Debug)]
struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    keep: usize,
    permits: Arc<tokio::sync::Semaphore>,
}

/// A read transaction's view of the store.
struct Snapshot<'a> {
    conn: &'a Connection,
    revision: Revision,
    compacted: Revision,
}

impl Snapshot<'_> {
    /// Checks that the state at `revision` can be read from this snapshot.
    fn check_readable(&self, revision: Revision) -> Result<()> {
        if revision > self.revision {
            Err(StoreError::FutureRevision {
                requested: revision,
                current: self.revision,
            })
        } else if revision < self.compacted {
            Err(StoreError::Compacted {
                requested: revision,
                compacted: Some(self.compacted),
            })
        } else {
            Ok(())
        }
    }
}

impl ReadPool {
    fn connect(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch(
            "PRAGMA busy_timeout = 10000; PRAGMA cache_size = -16384; PRAGMA mmap_size = 268435456;",
        )?;
        Ok(conn)
    }

    /// Runs `read` in a read transaction on a pooled connection, on a blocking thread.
    async fn read<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>) -> Result<T> + Send + 'static,
    {
        // Held by the blocking task, so a read whose caller went away still counts until done.
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let conn = match idle {
                Some(conn) => conn,
                None => pool
                    .connect()
                    .map_err(|e| sqlite_error("cannot open", &pool.path, e))?,
            };
            let result = (|| {
                let tx = conn
                    .unchecked_transaction()
                    .map_err(|e| sqlite_error("cannot read", &pool.path, e))?;
                let (revision, compacted) = tx
                    .query_row(
                        "SELECT revision, compacted FROM meta WHERE id = 1",
                        [],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                    .map_err(|e| sqlite_error("cannot read", &pool.path, e))?;
                let snapshot = Snapshot {
                    conn: &tx,
                    revision,
                    compacted,
                };
                let value = read(&snapshot);
                drop(tx);
                value
            })();
            let mut idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < pool.keep {
                idle.push(conn);
            }
            result
        })
        .await
        .map_err(|e| StoreError::unavailable("sqlite read task failed", e))?
    }
}

fn read_error(error: rusqlite::Error) -> StoreError {
    StoreError::unavailable("sqlite read failed", error)
}

/// The key range `[start, end)` of a prefix, where a missing end means "to the end".
fn range(prefix: &str, start: Option<&str>) -> (Vec<u8>, Option<Vec<u8>>) {
    let start = start.unwrap_or(prefix).as_bytes().to_vec();
    (start, prefix_end(prefix.as_bytes()))
}

/// For every key in range changed after `revision`, its state at `revision` (`None`: absent).
fn changes_after(
    snapshot: &Snapshot<'_>,
    revision: Revision,
    start: &[u8],
    end: Option<&[u8]>,
) -> Result<BTreeMap<String, Option<KeyValue>>> {
    let mut changed = BTreeMap::new();
    let mut stmt = snapshot
        .conn
        .prepare_cached(
            "SELECT key, prev_value, prev_create_rev, prev_mod_rev FROM log
             WHERE rev > ?1 AND key >= ?2 AND (?3 IS NULL OR key < ?3) ORDER BY rev",
        )
        .map_err(read_error)?;
    let mut rows = stmt
        .query(params![revision, start, end])
        .map_err(read_error)?;
    while let Some(row) = rows.next().map_err(read_error)? {
        let key = key_string(row.get(0).map_err(read_error)?).map_err(read_error)?;
        if let std::collections::btree_map::Entry::Vacant(entry) = changed.entry(key) {
            let at_revision = read_optional_kv(entry.key(), row, 1).map_err(read_error)?;
            entry.insert(at_revision);
        }
    }
    Ok(changed)
}

fn list_snapshot(snapshot: &Snapshot<'_>, options: &ListOptions) -> Result<ListResponse> {
    let revision = options.revision.unwrap_or(snapshot.revision);
    snapshot.check_readable(revision)?;
    let (start, end) = range(&options.prefix, options.start.as_deref());
    let limit = options.limit.filter(|l| *l > 0);
    // Undo the changes made after the revision asked for (none at the current revision).
    let changed = if revision < snapshot.revision {
        changes_after(snapshot, revision, &start, end.as_deref())?
    } else {
        BTreeMap::new()
    };
    // Two statements, because SQLite bounds an index search only by plain comparisons: with
    // `(?2 IS NULL OR key < ?2)` it would walk every key after the range, filtering each out.
    let mut stmt = snapshot
        .conn
        .prepare_cached(match end {
            Some(_) => LIST_RANGE,
            None => LIST_FROM,
        })
        .map_err(read_error)?;
    let mut rows = match &end {
        Some(end) => stmt.query(params![start, end]),
        None => stmt.query(params![start]),
    }
    .map_err(read_error)?;
    let wanted = limit.map_or(usize::MAX, |l| l + 1);
    let mut kvs = Vec::with_capacity(limit.unwrap_or(0).min(4096) + 1);
    let mut earlier = changed.values().filter_map(Option::as_ref).peekable();
    while kvs.len() < wanted {
        let Some(row) = rows.next().map_err(read_error)? else {
            break;
        };
        let live = read_kv(row).map_err(read_error)?;
        while kvs.len() < wanted && earlier.peek().is_some_and(|kv| kv.key < live.key) {
            kvs.extend(earlier.next().cloned());
        }
        if kvs.len() < wanted && !changed.contains_key(&live.key) {
            kvs.push(live);
        }
    }
    while kvs.len() < wanted {
        match earlier.next() {
            Some(kv) => kvs.push(kv.clone()),
            None => break,
        }
    }
    let more = kvs.len() > limit.unwrap_or(usize::MAX);
    kvs.truncate(limit.unwrap_or(usize::MAX));
    // Without more keys the page holds them all; otherwise count the range as it was.
    let count = if more {
        count_at(snapshot, &changed, &start, end.as_deref())?
    } else {
        kvs.len() as u64
    };
    Ok(ListResponse {
        kvs,
        revision,
        more,
        count,
    })
}

/// Live keys (with values) in `[?1, ?2)`, in key order.
const LIST_RANGE: &str = live!("WHERE kv.key >= ?1 AND kv.key < ?2 ORDER BY kv.key");
/// Live keys (with values) from `?1` on, in key order.
const LIST_FROM: &str = live!("WHERE kv.key >= ?1 ORDER BY kv.key");
/// The number of live keys in `[?1, ?2)`.
const COUNT_RANGE: &str = "SELECT COUNT(*) FROM kv WHERE key >= ?1 AND key < ?2";
/// The number of live keys from `?1` on.
const COUNT_FROM: &str = "SELECT COUNT(*) FROM kv WHERE key >= ?1";

/// The number of live keys in `[start, end)` (to the last key without `end`).
fn count_range(conn: &Connection, start: &[u8], end: Option<&[u8]>) -> rusqlite::Result<i64> {
    match end {
        Some(end) => conn
            .prepare_cached(COUNT_RANGE)?
            .query_row(params![start, end], |row| row.get(0)),
        None => conn
            .prepare_cached(COUNT_FROM)?
            .query_row(params![start], |row| row.get(0)),
    }
}

/// The number of keys in `[start, end)` at the revision `changed` was computed for: the live
/// keys, less those changed since that did not exist then, plus those that existed then and are
/// gone now.
fn count_at(
    snapshot: &Snapshot<'_>,
    changed: &BTreeMap<String, Option<KeyValue>>,
    start: &[u8],
    end: Option<&[u8]>,
) -> Result<u64> {
    let mut count = count_range(snapshot.conn, start, end).map_err(read_error)?;
    if !changed.is_empty() {
        let mut exists = snapshot
            .conn
            .prepare_cached("SELECT 1 FROM kv WHERE key = ?1")
            .map_err(read_error)?;
        for (key, then) in changed {
            let now = exists.exists(params![key_bytes(key)]).map_err(read_error)?;
            count += i64::from(then.is_some()) - i64::from(now);
        }
    }
    Ok(count.max(0) as u64)
}

fn get_snapshot(
    snapshot: &Snapshot<'_>,
    key: &str,
    revision: Option<Revision>,
) -> Result<GetResponse> {
    let revision = revision.unwrap_or(snapshot.revision);
    snapshot.check_readable(revision)?;
    if revision < snapshot.revision {
        let earlier = snapshot
            .conn
            .prepare_cached(
                "SELECT prev_value, prev_create_rev, prev_mod_rev FROM log
                 WHERE rev > ?1 AND key = ?2 ORDER BY rev LIMIT 1",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![revision, key_bytes(key)], |row| {
                    read_optional_kv(key, row, 0)
                })
                .optional()
            })
            .map_err(read_error)?;
        if let Some(kv) = earlier {
            return Ok(GetResponse { kv, revision });
        }
    }
    let kv = snapshot
        .conn
        .prepare_cached(live!("WHERE kv.key = ?1"))
        .and_then(|mut stmt| stmt.query_row(params![key_bytes(key)], read_kv).optional())
        .map_err(read_error)?;
    Ok(GetResponse { kv, revision })
}

/// Replays the log of a SQLite store up to the revision where live delivery took over.
struct LogReplay {
    readers: Arc<ReadPool>,
    prefix: String,
    until: Revision,
}

const REPLAY_CHUNK: i64 = 1024;

#[async_trait::async_trait]
impl Replay for LogReplay {
    async fn next_chunk(&mut self, after: Revision) -> Result<Vec<WatchEvent>> {
        if after >= self.until {
            return Ok(Vec::new());
        }
        let (prefix, until) = (self.prefix.clone(), self.until);
        self.readers
            .read(move |snapshot| {
                if after < snapshot.compacted {
                    return Err(StoreError::Compacted {
                        requested: after,
                        compacted: Some(snapshot.compacted),
                    });
                }
                let (start, end) = range(&prefix, None);
                let mut stmt = snapshot
                    .conn
                    .prepare_cached(
                        "SELECT rev, key, value, create_rev, prev_value, prev_create_rev, prev_mod_rev
                         FROM log WHERE rev > ?1 AND rev <= ?2 AND key >= ?3 AND (?4 IS NULL OR key < ?4)
                         ORDER BY rev LIMIT ?5",
                    )
                    .map_err(read_error)?;
                let mut rows = stmt
                    .query(params![after, until, start, end, REPLAY_CHUNK])
                    .map_err(read_error)?;
                let mut events = Vec::new();
                while let Some(row) = rows.next().map_err(read_error)? {
                    events.push(log_event(row).map_err(read_error)?);
                }
                Ok(events)
            })
            .await
    }
}

/// A watch event from a `(rev, key, value, create_rev, prev_value, prev_create_rev,
/// prev_mod_rev)` log row.
fn log_event(row: &rusqlite::Row<'_>) -> rusqlite::Result<WatchEvent> {
    let revision: Revision = row.get(0)?;
    let key = key_string(row.get(1)?)?;
    let value: Option<Vec<u8>> = row.get(2)?;
    let prev = read_optional_kv(&key, row, 4)?;
    let (kind, kv) = match value {
        Some(value) => (
            EventKind::Put,
            KeyValue {
                key,
                value: Bytes::from(value),
                create_revision: row.get(3)?,
                mod_revision: revision,
            },
        ),
        None => (
            EventKind::Delete,
            KeyValue {
                key,
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
            },
        ),
    };
    Ok(WatchEvent { kind, kv, prev })
}

fn unexpected(outcome: WriteOutcome) -> StoreError {
    StoreError::Unavailable {
        message: format!("sqlite writer answered with an unexpected outcome: {outcome:?}"),
        source: None,
    }
}

#[async_trait::async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<GetResponse> {
        let key = key.to_owned();
        self.readers
            .read(move |snapshot| get_snapshot(snapshot, &key, revision))
            .await
    }

    async fn list(&self, options: &ListOptions) -> Result<ListResponse> {
        let options = options.clone();
        self.readers
            .read(move |snapshot| list_snapshot(snapshot, &options))
            .await
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        let (start, end) = range(prefix, None);
        self.readers
            .read(move |snapshot| {
                count_range(snapshot.conn, &start, end.as_deref())
                    .map(|n| n.max(0) as u64)
                    .map_err(read_error)
            })
            .await
    }

    async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue> {
        self.put(WriteOp::Create {
            key: key.to_owned(),
            value,
            expires_at: expiry(ttl),
        })
        .await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        self.put(WriteOp::Update {
            key: key.to_owned(),
            value,
            expected,
            expires_at: expiry(ttl),
        })
        .await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse> {
        match self
            .write(WriteOp::Delete {
                key: key.to_owned(),
                expected,
            })
            .await?
        {
            WriteOutcome::Deleted(response) => Ok(response),
            other => Err(unexpected(other)),
        }
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        // Register first: from here on every committed batch reaches this watcher, so the
        // replay below only needs to cover the history up to `published`.
        let (published, subscription) = self.hub.subscribe(prefix);
        let (current, compacted) = self
            .readers
            .read(|snapshot| Ok((snapshot.revision, snapshot.compacted)))
            .await?;
        if after > current {
            return Err(StoreError::FutureRevision {
                requested: after,
                current,
            });
        }
        if after < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: Some(compacted),
            });
        }
        let replay: Option<Box<dyn Replay>> = (after < published).then(|| {
            Box::new(LogReplay {
                readers: self.readers.clone(),
                prefix: prefix.to_owned(),
                until: published,
            }) as Box<dyn Replay>
        });
        Ok(watch::stream(
            prefix.to_owned(),
            after,
            replay,
            subscription,
        ))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        match self.write(WriteOp::Compact { revision }).await? {
            WriteOutcome::Compacted => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.committed.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range read must be a search bounded at both ends: a bound SQLite cannot use (such as
    /// `(?2 IS NULL OR key < ?2)`) makes it walk every key after the range, and a list of one
    /// namespace then costs as much as the whole store.
    #[test]
    fn range_reads_search_between_both_bounds() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        migrate(&conn).unwrap();
        let plan = |sql: &str| -> String {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut stmt = conn.prepare(&explain).unwrap();
            let key: Vec<u8> = b"/k".to_vec();
            let params: Vec<&dyn rusqlite::ToSql> = (0..stmt.parameter_count())
                .map(|_| &key as &dyn rusqlite::ToSql)
                .collect();
            let rows: Vec<String> = stmt
                .query_map(params.as_slice(), |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            rows.join("; ")
        };
        for sql in [LIST_RANGE, COUNT_RANGE] {
            let plan = plan(sql);
            assert!(plan.contains("key>? AND key<?"), "{sql}: {plan}");
        }
        for sql in [LIST_FROM, COUNT_FROM] {
            let plan = plan(sql);
            assert!(plan.contains("key>?"), "{sql}: {plan}");
        }
        assert!(plan(LIST_RANGE).contains("log USING INTEGER PRIMARY KEY"));
    }

    /// CIS 1.1.11: the directory the database creates is the owner's alone.
    #[test]
    fn a_created_database_directory_is_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("data").join("db");
        let backend = SqliteBackend::open(SqliteConfig::new(db.join("state.db"))).unwrap();
        for created in [dir.path().join("data"), db] {
            let mode = std::fs::metadata(&created).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", created.display());
        }
        drop(backend);
    }
}
