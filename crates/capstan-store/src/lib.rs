//! Revisioned key-value storage for the Capstan API server, shaped like etcd v3 as Kubernetes
//! uses it.
//!
//! The crate knows bytes, keys and revisions, never resource types. Every write gets the next
//! value of one global, strictly increasing revision; every stored value remembers the revision
//! that created its key and the one that last modified it (`resourceVersion` upstream is the
//! latter). Reads may ask for the state at an older revision; watches replay every change after a
//! revision, in order, with the previous value, and then follow live changes.
//!
//! Two backends implement [`Backend`]:
//! - [`sqlite::SqliteBackend`], the embedded default: one SQLite file in WAL mode, one writer
//!   thread that group-commits concurrent writes, watchers fed in-process as batches commit;
//! - [`etcd::EtcdBackend`], for clusters of several servers: etcd v3 through `etcd-client`, keys
//!   under a configurable prefix, requests spread over every member and failing over to the
//!   members that answer.
//!
//! Callers use [`Store`], a cheap-to-clone handle that checks input once for every backend
//! (empty keys, oversized values, nonsensical revisions) and then delegates. Both backends pass one
//! conformance suite (the `conformance` module, behind the feature of that name).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;

mod compactor;
#[cfg(feature = "conformance")]
pub mod conformance;
mod endpoint;
pub mod etcd;
pub mod sqlite;
pub mod transform;
mod watch;

pub use compactor::Compactor;
pub use endpoint::Endpoint;

/// A point in the store's history. Revisions start at 1 and grow by one per write; 0 means
/// "nothing written yet".
pub type Revision = i64;

/// The largest value the store accepts: 1.5 MiB, the request limit etcd applies by default and
/// that upstream Kubernetes therefore imposes on every object.
pub const MAX_VALUE_BYTES: usize = 1536 * 1024;

/// The longest key the store accepts. Kubernetes keys are
/// `/registry/<group>/<resource>/<namespace>/<name>`, well under this.
pub const MAX_KEY_BYTES: usize = 4096;

/// A key with its value and the revisions that created and last modified it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, as given by the caller (without any backend prefix).
    pub key: String,
    /// The stored bytes; empty for the key of a delete event.
    pub value: Bytes,
    /// The revision of the write that created the key (0 in a delete event's `kv`).
    pub create_revision: Revision,
    /// The revision of the write that last changed the key.
    pub mod_revision: Revision,
}

impl fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyValue")
            .field("key", &self.key)
            .field("value", &String::from_utf8_lossy(&self.value))
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .finish()
    }
}

/// What a watch event did to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or its value replaced.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as a watch delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// For a put, the new key-value. For a delete, the key with an empty value,
    /// `create_revision` 0 and `mod_revision` set to the revision of the delete.
    pub kv: KeyValue,
    /// The key-value before this change; `None` when the change created the key.
    pub prev: Option<KeyValue>,
}

impl WatchEvent {
    /// The revision of the write that produced this event.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }

    /// Whether this event created its key (Kubernetes' `ADDED`).
    pub fn is_create(&self) -> bool {
        self.kind == EventKind::Put && self.prev.is_none()
    }
}

/// The answer to [`Store::get`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetResponse {
    /// The key's state at the revision read, if it existed then.
    pub kv: Option<KeyValue>,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// What to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Every key that starts with this prefix is in range; the empty prefix means all keys.
    pub prefix: String,
    /// Start at this key (inclusive) instead of at the prefix; it must start with `prefix`.
    /// A continuation passes [`ListResponse::continue_key`] of the previous page.
    pub start: Option<String>,
    /// Read the state at this revision instead of the current one.
    pub revision: Option<Revision>,
    /// Return at most this many keys (`None` or 0: no limit).
    pub limit: Option<usize>,
}

impl ListOptions {
    /// Everything under `prefix`, at the current revision.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        ListOptions {
            prefix: prefix.into(),
            ..ListOptions::default()
        }
    }
}

/// The answer to [`Store::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListResponse {
    /// The keys in range, in byte order.
    pub kvs: Vec<KeyValue>,
    /// The revision the list was served at. Later pages must be read at this revision to
    /// see one consistent snapshot.
    pub revision: Revision,
    /// Whether keys in range remain after the last one returned.
    pub more: bool,
    /// How many keys the range holds at the revision, from `start` on, the limit
    /// notwithstanding (etcd's `count`): the API server's `remainingItemCount` comes from it.
    pub count: u64,
}

impl ListResponse {
    /// Where the next page starts (the last key plus a NUL byte), when there is one.
    pub fn continue_key(&self) -> Option<String> {
        match (self.more, self.kvs.last()) {
            (true, Some(last)) => Some(format!("{}\0", last.key)),
            _ => None,
        }
    }
}

/// The answer to [`Store::delete`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteResponse {
    /// The key-value that was deleted.
    pub prev: KeyValue,
    /// The revision of the delete.
    pub revision: Revision,
}

/// A stream of watch events, in revision order. It ends with an error when the watch cannot go
/// on (for example [`StoreError::WatchLagged`]); the caller may then watch again from the last
/// revision it saw.
pub type WatchStream = BoxStream<'static, Result<WatchEvent>>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The key asked for.
        key: String,
    },
    /// A create found the key already present.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key asked for.
        key: String,
    },
    /// An update or delete expected another mod revision than the key has.
    #[error("key {key:?} was modified: expected revision {expected}, found {}", current.mod_revision)]
    Conflict {
        /// The key asked for.
        key: String,
        /// The mod revision the caller expected.
        expected: Revision,
        /// The key's current state, so the caller can retry without another read.
        current: Box<KeyValue>,
    },
    /// The revision asked for is older than the oldest one the store still keeps.
    #[error("revision {requested} has been compacted{}", compacted.map(|c| format!(" (oldest kept: {c})")).unwrap_or_default())]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The compacted revision, when the backend reports it.
        compacted: Option<Revision>,
    },
    /// The revision asked for is newer than the store's current revision.
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The current revision.
        current: Revision,
    },
    /// The request itself is malformed (empty key, a start key outside the prefix, ...).
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// A value over [`MAX_VALUE_BYTES`].
    #[error("value of {size} bytes exceeds the limit of {limit} bytes")]
    ValueTooLarge {
        /// The size of the value offered.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A watcher did not keep up with the changes and was cut off. Watching again after
    /// `last_revision` continues without a gap.
    #[error("watcher fell too far behind; resume after revision {last_revision}")]
    WatchLagged {
        /// The revision of the last event the watcher received.
        last_revision: Revision,
    },
    /// The backend could not be reached or failed; the operation may be retried.
    #[error("datastore unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store was shut down.
    #[error("datastore is closed")]
    Closed,
    /// A value could not be sealed for storage or opened from it (encryption at rest).
    #[error("{message} (key {key:?})")]
    Transform {
        /// The key.
        key: String,
        /// What went wrong.
        message: String,
    },
}

impl StoreError {
    pub(crate) fn unavailable(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Unavailable {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A storage backend. Implementations receive input that [`Store`] has already checked.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// A short name for logs and metrics ("sqlite", "etcd").
    fn name(&self) -> &'static str;
    /// The key at the current revision, or at `revision`.
    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<GetResponse>;
    /// Keys in range, in byte order, at one revision.
    async fn list(&self, options: &ListOptions) -> Result<ListResponse>;
    /// The number of live keys under `prefix`.
    async fn count(&self, prefix: &str) -> Result<u64>;
    /// Creates `key`; fails with [`StoreError::AlreadyExists`] if it exists. With a `ttl`, the
    /// key is deleted (a delete event, a new revision) once the TTL has passed.
    async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue>;
    /// Replaces the value of an existing key, if its mod revision is `expected` (when given),
    /// and sets its TTL (`None`: the key no longer expires). Writing the value the key already
    /// has changes nothing, its expiry included, and returns the key as it is.
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue>;
    /// Deletes an existing key, if its mod revision is `expected` (when given).
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse>;
    /// Every change under `prefix` with a revision greater than `after`, then live changes.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;
    /// Discards history older than `revision`; reads at `revision` and later keep working.
    async fn compact(&self, revision: Revision) -> Result<()>;
    /// The current revision.
    async fn current_revision(&self) -> Result<Revision>;
    /// One turn of the compaction schedule (see [`CompactTurn`]): when the schedule's version is
    /// still `expected_version`, take the turn (advance the version, record `revision`) and
    /// compact to `revision` unless it is 0; otherwise learn the version and what the server
    /// that took the turn recorded. A datastore of one server (the default) always takes the
    /// turn; a shared one coordinates its servers so that one of them compacts per interval.
    async fn compact_turn(&self, expected_version: i64, revision: Revision) -> Result<CompactTurn> {
        let current = self.current_revision().await?;
        Ok(CompactTurn {
            version: expected_version + 1,
            revision: current,
            outcome: CompactOutcome::of_turn_taken(self, revision).await,
        })
    }
}

/// Where the compaction schedule stands after one server's turn (upstream's `compact` in
/// `etcd3/compact.go`). The schedule's version is a logical clock shared through the
/// datastore (on etcd, the version of the key `compact_rev_key`): a server takes a turn only if
/// the version is still the one it saw at its previous turn, so servers that tick in the same
/// interval compact once between them.
#[derive(Debug)]
pub struct CompactTurn {
    /// The schedule's version now; the server's next turn expects it.
    pub version: i64,
    /// The store's revision at this turn; the server's next turn compacts to it.
    pub revision: Revision,
    /// What became of the compaction.
    pub outcome: CompactOutcome,
}

/// What a compaction turn did.
#[derive(Debug)]
pub enum CompactOutcome {
    /// This server took the turn and compacted to the revision.
    Compacted(Revision),
    /// This server took the turn but had no revision yet to compact to (its first turn).
    Skipped,
    /// Another server took the turn first; the revision it recorded, when it compacted.
    TakenElsewhere(Option<Revision>),
    /// This server took the turn and the compaction failed.
    Failed(StoreError),
}

impl CompactOutcome {
    /// A turn this server took: compacts `backend` to `revision`, unless it is 0 (the first
    /// turn, on which upstream compacts nothing).
    pub(crate) async fn of_turn_taken<B: Backend + ?Sized>(
        backend: &B,
        revision: Revision,
    ) -> Self {
        if revision == 0 {
            return CompactOutcome::Skipped;
        }
        match backend.compact(revision).await {
            Ok(()) => CompactOutcome::Compacted(revision),
            Err(error) => CompactOutcome::Failed(error),
        }
    }
}

/// A handle on the datastore: cheap to clone, usable from many tasks at once.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// With a transformer: the backend below it and the transformer, to tell stale values.
    sealed: Option<(Arc<dyn Backend>, Arc<dyn transform::Transformer>)>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend.name())
            .finish()
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument("key must not be empty".into()));
    }
    check_prefix(key)
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_KEY_BYTES {
        return Err(StoreError::InvalidArgument(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_BYTES} bytes",
            prefix.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_value(value: &Bytes) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::ValueTooLarge {
            size: value.len(),
            limit: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(StoreError::InvalidArgument("a TTL must be positive".into()));
    }
    Ok(())
}

fn check_revision(revision: Option<Revision>) -> Result<()> {
    match revision {
        Some(r) if r <= 0 => Err(StoreError::InvalidArgument(format!(
            "revision must be positive, got {r}"
        ))),
        _ => Ok(()),
    }
}

impl Store {
    /// Wraps a backend.
    pub fn new(backend: impl Backend) -> Self {
        Store {
            backend: Arc::new(backend),
            sealed: None,
        }
    }

    /// The same store with every value sealed by `transformer` on its way to the backend and
    /// opened on its way back (encryption at rest). Values written before keep what they
    /// were, and are read if the transformer opens them.
    pub fn with_transformer(self, transformer: Arc<dyn transform::Transformer>) -> Store {
        let inner = self.backend.clone();
        Store {
            backend: Arc::new(transform::Transforming {
                inner: inner.clone(),
                transformer: transformer.clone(),
            }),
            sealed: Some((inner, transformer)),
        }
    }

    /// Whether the value stored under `key` must be written again even if unchanged: its
    /// transformer would seal it otherwise now (as upstream's "stale" reads force the write
    /// of an unchanged object, which is how keys are rotated). Never without a transformer.
    pub async fn rewrite_needed(&self, key: &str) -> bool {
        let Some((raw, transformer)) = &self.sealed else {
            return false;
        };
        match raw.get(key, None).await {
            Ok(GetResponse { kv: Some(kv), .. }) => transformer.stale(key, &kv.value),
            _ => false,
        }
    }

    /// The backend's short name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The key at the current revision, or at `revision`.
    pub async fn get(&self, key: &str, revision: Option<Revision>) -> Result<GetResponse> {
        check_key(key)?;
        check_revision(revision)?;
        self.backend.get(key, revision).await
    }

    /// Keys in range, in byte order, at one revision.
    pub async fn list(&self, options: &ListOptions) -> Result<ListResponse> {
        check_prefix(&options.prefix)?;
        check_revision(options.revision)?;
        if let Some(start) = &options.start {
            check_prefix(start)?;
            if !start.starts_with(&options.prefix) {
                return Err(StoreError::InvalidArgument(format!(
                    "start key {start:?} is outside prefix {:?}",
                    options.prefix
                )));
            }
        }
        self.backend.list(options).await
    }

    /// The number of live keys under `prefix`.
    pub async fn count(&self, prefix: &str) -> Result<u64> {
        check_prefix(prefix)?;
        self.backend.count(prefix).await
    }

    /// Creates `key` with `value`; fails with [`StoreError::AlreadyExists`] if it exists.
    pub async fn create(&self, key: &str, value: impl Into<Bytes>) -> Result<KeyValue> {
        let value = value.into();
        check_key(key)?;
        check_value(&value)?;
        self.backend.create(key, value, None).await
    }

    /// Creates `key` with `value`, to be deleted automatically once `ttl` has passed (upstream
    /// stores Events this way). Expiry is a delete like any other: it takes a revision and
    /// watchers see it. Expiry is checked about once a second.
    pub async fn create_with_ttl(
        &self,
        key: &str,
        value: impl Into<Bytes>,
        ttl: Duration,
    ) -> Result<KeyValue> {
        let value = value.into();
        check_key(key)?;
        check_value(&value)?;
        check_ttl(ttl)?;
        self.backend.create(key, value, Some(ttl)).await
    }

    /// Replaces the value of an existing key; with `expected`, only if the key's mod revision is
    /// still that ([`StoreError::Conflict`] otherwise, carrying the current state). A value equal
    /// to the current one changes nothing: no new revision, the key is returned as it is. A key
    /// that had a TTL no longer expires after an update (use [`Store::update_with_ttl`]).
    pub async fn update(
        &self,
        key: &str,
        value: impl Into<Bytes>,
        expected: Option<Revision>,
    ) -> Result<KeyValue> {
        let value = value.into();
        check_key(key)?;
        check_value(&value)?;
        check_revision(expected)?;
        self.backend.update(key, value, expected, None).await
    }

    /// Like [`Store::update`], and the key expires once `ttl` has passed from this write.
    pub async fn update_with_ttl(
        &self,
        key: &str,
        value: impl Into<Bytes>,
        expected: Option<Revision>,
        ttl: Duration,
    ) -> Result<KeyValue> {
        let value = value.into();
        check_key(key)?;
        check_value(&value)?;
        check_revision(expected)?;
        check_ttl(ttl)?;
        self.backend.update(key, value, expected, Some(ttl)).await
    }

    /// Deletes an existing key; with `expected`, only if its mod revision is still that.
    pub async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse> {
        check_key(key)?;
        check_revision(expected)?;
        self.backend.delete(key, expected).await
    }

    /// Watches every key under `prefix`: first each change with a revision greater than
    /// `after` (which must not be compacted nor lie in the future), then live changes.
    pub async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        check_prefix(prefix)?;
        if after < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "revision must not be negative, got {after}"
            )));
        }
        self.backend.watch(prefix, after).await
    }

    /// Discards history older than `revision`. Compacting to a revision that is already
    /// compacted is a no-op; compacting beyond the current revision fails.
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        check_revision(Some(revision))?;
        self.backend.compact(revision).await
    }

    /// The current revision.
    pub async fn current_revision(&self) -> Result<Revision> {
        self.backend.current_revision().await
    }

    /// One turn of the compaction schedule: see [`CompactTurn`]. `revision` must not be
    /// negative; 0 takes the turn without compacting.
    pub async fn compact_turn(
        &self,
        expected_version: i64,
        revision: Revision,
    ) -> Result<CompactTurn> {
        if revision < 0 || expected_version < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "a compaction turn needs a version and revision that are not negative, got \
                 {expected_version} and {revision}"
            )));
        }
        self.backend.compact_turn(expected_version, revision).await
    }

    /// Starts compacting on a schedule, as upstream's API server does: at every tick, history
    /// older than the revision seen at the previous tick is discarded, so at least one interval
    /// of history is always kept. Several servers on one etcd take turns through the datastore,
    /// so that one of them compacts per interval.
    pub fn spawn_compactor(&self, interval: Duration) -> Compactor {
        Compactor::spawn(self.clone(), interval)
    }
}

/// The first key after every key that starts with `prefix`, or `None` when no such key exists
/// (an empty prefix, or one made only of 0xff bytes).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_that_can_grow() {
        let check = |input: &[u8], expected: Option<&[u8]>| {
            assert_eq!(prefix_end(input).as_deref(), expected, "prefix {input:?}");
        };
        check(b"/registry/pods/", Some(b"/registry/pods0"));
        check(b"a", Some(b"b"));
        check(b"a\xff", Some(b"b"));
        check(b"\xff\xff", None);
        check(b"", None);
    }

    #[test]
    fn continue_key_follows_the_last_key_only_when_more_remain() {
        let kv = |key: &str| KeyValue {
            key: key.into(),
            value: Bytes::new(),
            create_revision: 1,
            mod_revision: 1,
        };
        let page = ListResponse {
            kvs: vec![kv("/a"), kv("/b")],
            revision: 3,
            more: true,
            count: 5,
        };
        assert_eq!(page.continue_key().as_deref(), Some("/b\0"));
        let last = ListResponse {
            more: false,
            ..page
        };
        assert_eq!(last.continue_key(), None);
    }
}
