//! The etcd v3 backend: the store's contract mapped onto etcd through `etcd-client`.
//!
//! Every key lives under a configurable prefix (upstream's `--etcd-prefix`), which is added on
//! the way in and stripped on the way out, so several stores can share one etcd as long as no
//! prefix is a prefix of another. etcd's own revisions are the store's revisions.
//!
//! Conditional writes are single etcd transactions: `create` compares the key's create revision
//! with 0; `update` and `delete` compare its mod revision with the expected one and, when the
//! comparison fails, read the key in the same transaction to report `NotFound` or `Conflict`
//! without another round trip. `update` nests a second transaction that compares the value, so
//! writing the value a key already has changes nothing, as the contract requires. (When the value
//! is so large that sending it twice could exceed etcd's request limit, `update` reads first and
//! then writes with a compare-and-swap instead.)
//!
//! Every endpoint is used: [`members`] keeps one connection per etcd member, spreads requests
//! round-robin over the members that answer, and fails over when a member cannot be reached,
//! retrying what upstream's clientv3 retries (reads on Unavailable, mutations only when they were
//! certainly never sent); its module documentation says why `etcd-client`'s own multi-endpoint
//! balancing is not used.
//!
//! A watch is one etcd watch per caller, fed into the shared bounded delivery of
//! [`crate::watch`]: a pump task converts each etcd response into one batch. When the connection
//! to its member breaks, the pump re-opens the watch on the next member that answers, right after
//! the last revision it delivered, so the caller sees neither a gap nor a duplicate; when etcd
//! has compacted that history meanwhile, the watch ends with [`StoreError::Compacted`].
//!
//! Scheduled compaction takes turns through the key [`COMPACT_REV_KEY`], outside every prefix,
//! with upstream's transaction (compare its version with the one last seen, put the revision to
//! compact to, else read it), so the servers sharing an etcd compact once per interval.

mod members;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{
    CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
};
use futures::StreamExt;

pub use self::members::EndpointState;
use self::members::{Failed, Members, Policy};

use crate::watch::{self, Batch, Feed};
use crate::{
    Backend, CompactOutcome, CompactTurn, DeleteResponse, EventKind, GetResponse, KeyValue,
    ListOptions, ListResponse, MAX_VALUE_BYTES, Result, Revision, Store, StoreError, WatchEvent,
    WatchStream, prefix_end,
};

/// The largest gRPC message the client accepts: lists and watch batches of several values of the
/// largest size must fit (tonic's default is 4 MiB).
const MAX_DECODING_MESSAGE_BYTES: usize = 1 << 30;

/// etcd's default `--max-request-bytes`. An update whose transaction would carry the value twice
/// (compare and put) beyond this falls back to read-then-compare-and-swap.
const ETCD_DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Room for the transaction's framing besides keys and values.
const TXN_OVERHEAD_BYTES: usize = 1024;

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 keep-alive, so a watch notices a silently dead connection (etcd refuses pings more
/// often than every 5 s by default).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The etcd key (outside every prefix, as upstream's) through which the servers on one etcd
/// take turns compacting: its value is the revision compacted at the last turn, its version the
/// schedule's logical clock.
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// The first and the longest wait before a broken watch is re-opened.
const WATCH_RETRY_INITIAL: Duration = Duration::from_millis(50);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(2);

/// How to reach etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members, such as `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Prepended to every key (upstream's `--etcd-prefix`, e.g. `/registry`). Stores sharing an
    /// etcd must use prefixes none of which is a prefix of another.
    pub prefix: String,
    /// How many batches (one per etcd watch response) a watcher may have pending before it is
    /// cut off with [`StoreError::WatchLagged`].
    pub watch_buffer: usize,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: String::new(),
            watch_buffer: 1024,
        }
    }
}

/// The etcd v3 backend. Cheap to clone: all clones share one connection per endpoint.
#[derive(Clone)]
pub struct EtcdBackend {
    members: Arc<Members>,
    prefix: Arc<str>,
    watch_buffer: usize,
    endpoints: Vec<String>,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("watch_buffer", &self.watch_buffer)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to etcd and wraps the backend in a [`Store`].
    pub async fn etcd(config: EtcdConfig) -> Result<Store> {
        Ok(Store::new(EtcdBackend::connect(config).await?))
    }
}

impl EtcdBackend {
    /// Connects to etcd and checks that it answers.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(StoreError::InvalidArgument(
                "at least one etcd endpoint is required".into(),
            ));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT);
        let backend = EtcdBackend {
            members: Members::new(&config.endpoints, &options).await?,
            prefix: config.prefix.into(),
            watch_buffer: config.watch_buffer,
            endpoints: config.endpoints,
        };
        // The clients connect lazily; fail now rather than at the first request. (This reaches
        // the first member that answers.)
        backend
            .current_revision()
            .await
            .map_err(|error| match error {
                StoreError::Unavailable { message, source } => StoreError::Unavailable {
                    message: format!(
                        "cannot connect to etcd at {}: {message}",
                        backend.endpoints.join(",")
                    ),
                    source,
                },
                other => other,
            })?;
        Ok(backend)
    }

    /// What the client knows about each member: whether it is in use and how much it served.
    pub fn endpoint_states(&self) -> Vec<EndpointState> {
        self.members.states()
    }

    /// A range (get, list, count), retried on another member when one is unavailable.
    async fn range(
        &self,
        key: Vec<u8>,
        options: GetOptions,
    ) -> Result<etcd_client::GetResponse, Failed> {
        self.members
            .call(Policy::Repeatable, |member| {
                let mut kv = member.kv.clone();
                let (key, options) = (key.clone(), options.clone());
                async move { kv.get(key, Some(options)).await }
            })
            .await
    }

    /// A transaction, retried on another member only when it was certainly not sent.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, Failed> {
        self.members
            .call(Policy::NonRepeatable, |member| {
                let mut kv = member.kv.clone();
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await
    }

    /// Put options for a write: with a `ttl`, a fresh lease of that many seconds (rounded up),
    /// so that etcd deletes the key when the lease expires.
    async fn put_options(&self, ttl: Option<Duration>) -> Result<PutOptions> {
        let Some(ttl) = ttl else {
            return Ok(PutOptions::new());
        };
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let seconds = i64::try_from(seconds).unwrap_or(i64::MAX).max(1);
        // Upstream retries lease grants like reads: an extra lease expires unused.
        let lease = self
            .members
            .call(Policy::Repeatable, |member| {
                let mut lease = member.lease.clone();
                async move { lease.grant(seconds, None).await }
            })
            .await
            .map_err(|failed| unavailable("grant a lease", failed))?;
        Ok(PutOptions::new().with_lease(lease.id()))
    }

    /// The etcd key of a store key.
    fn etcd_key(&self, key: &str) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(self.prefix.as_bytes());
        full.extend_from_slice(key.as_bytes());
        full
    }

    /// The etcd range `[start, end)` of every store key under `prefix`, starting at `start`
    /// (which lies under `prefix`) when given.
    fn etcd_range(&self, prefix: &str, start: Option<&str>) -> (Vec<u8>, Vec<u8>) {
        let full_prefix = self.etcd_key(prefix);
        // "\0" as the end means "to the end of the keyspace".
        let end = prefix_end(&full_prefix).unwrap_or_else(|| vec![0]);
        let mut begin = self.etcd_key(start.unwrap_or(prefix));
        if begin.is_empty() {
            // etcd rejects an empty key; "\0" is the smallest key there is.
            begin.push(0);
        }
        (begin, end)
    }

    fn convert(&self, kv: etcd_client::KeyValue) -> KeyValue {
        convert_kv(&self.prefix, kv)
    }

    /// A read failed: maps etcd's revision errors, asking for the current revision when needed.
    async fn read_error(&self, failed: Failed, requested: Revision) -> StoreError {
        match classify(&failed.error) {
            Failure::Compacted => StoreError::Compacted {
                requested,
                compacted: None,
            },
            Failure::FutureRevision => StoreError::FutureRevision {
                requested,
                current: self.current_revision().await.unwrap_or(0),
            },
            Failure::TooLarge | Failure::Other => unavailable("read", failed),
        }
    }

    /// The key's current state, from the response of a Range inside a transaction.
    fn kv_from_get(&self, response: Option<TxnOpResponse>) -> Result<Option<KeyValue>> {
        match response {
            Some(TxnOpResponse::Get(mut get)) => {
                Ok(get.take_kvs().into_iter().next().map(|kv| self.convert(kv)))
            }
            _ => Err(malformed("a transaction's range response is missing")),
        }
    }

    /// The reason a guarded write on `key` did not apply, from the key's current state.
    fn guard_failed(
        key: &str,
        expected: Option<Revision>,
        current: Option<KeyValue>,
    ) -> StoreError {
        match current {
            None => StoreError::NotFound { key: key.into() },
            Some(current) => StoreError::Conflict {
                key: key.into(),
                expected: expected.unwrap_or(0),
                current: Box::new(current),
            },
        }
    }

    /// Sends a transaction that carries `value_size` bytes of value.
    async fn write_txn(&self, txn: Txn, value_size: usize) -> Result<TxnResponse> {
        self.txn(txn)
            .await
            .map_err(|failed| match classify(&failed.error) {
                Failure::TooLarge => StoreError::ValueTooLarge {
                    size: value_size,
                    limit: MAX_VALUE_BYTES,
                },
                _ => unavailable("write", failed),
            })
    }

    /// `update` for values too large to send twice: reads the key, compares the value here, and
    /// writes with a compare-and-swap on the mod revision it read, retrying when another writer
    /// got in between and no revision was expected.
    async fn update_in_two_steps(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        let etcd_key = self.etcd_key(key);
        let mut current = self.get(key, None).await?.kv;
        loop {
            let Some(kv) = current.take() else {
                return Err(StoreError::NotFound { key: key.into() });
            };
            if expected.is_some_and(|e| e != kv.mod_revision) {
                return Err(Self::guard_failed(key, expected, Some(kv)));
            }
            if kv.value == value {
                return Ok(kv);
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    etcd_key.clone(),
                    CompareOp::Equal,
                    kv.mod_revision,
                )])
                .and_then([TxnOp::put(
                    etcd_key.clone(),
                    value.to_vec(),
                    Some(self.put_options(ttl).await?),
                )])
                .or_else([TxnOp::get(etcd_key.clone(), None)]);
            let response = self.write_txn(txn, value.len()).await?;
            if response.succeeded() {
                return Ok(KeyValue {
                    key: key.into(),
                    value,
                    create_revision: kv.create_revision,
                    mod_revision: header_revision(&response)?,
                });
            }
            current = self.kv_from_get(response.op_responses().into_iter().next())?;
            if expected.is_some() {
                return Err(Self::guard_failed(key, expected, current));
            }
        }
    }
}

#[async_trait::async_trait]
impl Backend for EtcdBackend {
    fn name(&self) -> &'static str {
        "etcd"
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<GetResponse> {
        let mut options = GetOptions::new();
        if let Some(revision) = revision {
            options = options.with_revision(revision);
        }
        let mut response = match self.range(self.etcd_key(key), options).await {
            Ok(response) => response,
            Err(failed) => return Err(self.read_error(failed, revision.unwrap_or(0)).await),
        };
        let current = header_revision(&response)?;
        Ok(GetResponse {
            kv: response
                .take_kvs()
                .into_iter()
                .next()
                .map(|kv| self.convert(kv)),
            revision: revision.unwrap_or(current),
        })
    }

    async fn list(&self, options: &ListOptions) -> Result<ListResponse> {
        let (begin, end) = self.etcd_range(&options.prefix, options.start.as_deref());
        let mut get = GetOptions::new().with_range(end);
        if let Some(limit) = options.limit.filter(|l| *l > 0) {
            get = get.with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        if let Some(revision) = options.revision {
            get = get.with_revision(revision);
        }
        let mut response = match self.range(begin, get).await {
            Ok(response) => response,
            Err(failed) => {
                return Err(self.read_error(failed, options.revision.unwrap_or(0)).await);
            }
        };
        let current = header_revision(&response)?;
        let more = response.more();
        let count = u64::try_from(response.count()).unwrap_or(0);
        Ok(ListResponse {
            kvs: response
                .take_kvs()
                .into_iter()
                .map(|kv| self.convert(kv))
                .collect(),
            // A page read at an older revision was served at that revision, not the header's
            // (which is always the current one); the following pages must use the same.
            revision: options.revision.unwrap_or(current),
            more,
            count,
        })
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        let (begin, end) = self.etcd_range(prefix, None);
        let options = GetOptions::new().with_range(end).with_count_only();
        let response = self
            .range(begin, options)
            .await
            .map_err(|failed| unavailable("count", failed))?;
        Ok(u64::try_from(response.count()).unwrap_or(0))
    }

    async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue> {
        let etcd_key = self.etcd_key(key);
        let options = self.put_options(ttl).await?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                etcd_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(etcd_key, value.to_vec(), Some(options))]);
        let response = self.write_txn(txn, value.len()).await?;
        if !response.succeeded() {
            return Err(StoreError::AlreadyExists { key: key.into() });
        }
        let revision = header_revision(&response)?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        let etcd_key = self.etcd_key(key);
        if 2 * value.len() + 4 * etcd_key.len() + TXN_OVERHEAD_BYTES
            > ETCD_DEFAULT_MAX_REQUEST_BYTES
        {
            return self.update_in_two_steps(key, value, expected, ttl).await;
        }
        let options = self.put_options(ttl).await?;
        let unchanged_or_put = Txn::new()
            .when([Compare::value(
                etcd_key.clone(),
                CompareOp::Equal,
                value.to_vec(),
            )])
            .and_then([TxnOp::get(etcd_key.clone(), None)])
            .or_else([TxnOp::put(
                etcd_key.clone(),
                value.to_vec(),
                Some(options.with_prev_key()),
            )]);
        let txn = Txn::new()
            .when([guard(&etcd_key, expected)])
            .and_then([TxnOp::txn(unchanged_or_put)])
            .or_else([TxnOp::get(etcd_key, None)]);
        let response = self.write_txn(txn, value.len()).await?;
        let mut responses = response.op_responses().into_iter();
        if !response.succeeded() {
            let current = self.kv_from_get(responses.next())?;
            return Err(Self::guard_failed(key, expected, current));
        }
        let Some(TxnOpResponse::Txn(inner)) = responses.next() else {
            return Err(malformed(
                "the update's inner transaction response is missing",
            ));
        };
        let mut inner_responses = inner.op_responses().into_iter();
        if inner.succeeded() {
            // The key already holds this value: nothing was written.
            return self
                .kv_from_get(inner_responses.next())?
                .ok_or_else(|| malformed("the key vanished inside its own transaction"));
        }
        let Some(TxnOpResponse::Put(put)) = inner_responses.next() else {
            return Err(malformed("the update's put response is missing"));
        };
        let create_revision = put
            .prev_key()
            .map(|prev| prev.create_revision())
            .ok_or_else(|| malformed("the update's put did not return the previous value"))?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision,
            mod_revision: header_revision(&response)?,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse> {
        let etcd_key = self.etcd_key(key);
        let txn = Txn::new()
            .when([guard(&etcd_key, expected)])
            .and_then([TxnOp::delete(
                etcd_key.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(etcd_key, None)]);
        let response = self.write_txn(txn, 0).await?;
        let mut responses = response.op_responses().into_iter();
        if !response.succeeded() {
            let current = self.kv_from_get(responses.next())?;
            return Err(Self::guard_failed(key, expected, current));
        }
        let Some(TxnOpResponse::Delete(mut deleted)) = responses.next() else {
            return Err(malformed("the delete response is missing"));
        };
        let prev = deleted
            .take_prev_kvs()
            .into_iter()
            .next()
            .map(|kv| self.convert(kv))
            .ok_or_else(|| malformed("the delete did not return the deleted value"))?;
        Ok(DeleteResponse {
            prev,
            revision: header_revision(&response)?,
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let (begin, end) = self.etcd_range(prefix, None);
        // Probe the history first, so that a compacted or future `after` fails here rather than
        // in the stream.
        if after > 0 {
            let probe = GetOptions::new()
                .with_range(end.clone())
                .with_count_only()
                .with_revision(after);
            if let Err(failed) = self.range(begin.clone(), probe).await {
                return Err(self.read_error(failed, after).await);
            }
        }
        let (feed, subscription) = watch::channel(self.watch_buffer);
        let pump = Pump {
            members: self.members.clone(),
            begin,
            end,
            prefix: self.prefix.clone(),
            feed,
            last: after,
        };
        tokio::spawn(pump.run());
        Ok(watch::stream(prefix.to_string(), after, None, subscription))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        // Logical compaction, as upstream's compactor asks for it: reads below the revision fail at
        // once, and etcd reclaims the space in the background without holding up the caller.
        // Not retried once sent, as upstream: a repeated compaction is harmless, but the answer
        // to the first one would be lost.
        let compacted = self
            .members
            .call(Policy::NonRepeatable, |member| {
                let mut kv = member.kv.clone();
                async move { kv.compact(revision, Some(CompactionOptions::new())).await }
            })
            .await;
        match compacted {
            Ok(_) => Ok(()),
            Err(failed) => match classify(&failed.error) {
                // Already compacted at or beyond `revision`: nothing left to do.
                Failure::Compacted => Ok(()),
                Failure::FutureRevision => Err(StoreError::FutureRevision {
                    requested: revision,
                    current: self.current_revision().await.unwrap_or(0),
                }),
                Failure::TooLarge | Failure::Other => Err(unavailable("compact", failed)),
            },
        }
    }

    async fn compact_turn(&self, expected_version: i64, revision: Revision) -> Result<CompactTurn> {
        // Upstream's transaction, on the same key outside every prefix (compaction is etcd-wide,
        // so every API server on this etcd, whatever its prefix, shares one schedule): if the
        // key's version is still the one this server saw, put the revision to compact to (which
        // bumps the version); otherwise read the key to learn its version.
        let key = COMPACT_REV_KEY.as_bytes().to_vec();
        let txn = Txn::new()
            .when([Compare::version(
                key.clone(),
                CompareOp::Equal,
                expected_version,
            )])
            .and_then([TxnOp::put(key.clone(), revision.to_string(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self
            .txn(txn)
            .await
            .map_err(|failed| unavailable("take a compaction turn", failed))?;
        let current = header_revision(&response)?;
        if !response.succeeded() {
            let Some(TxnOpResponse::Get(got)) = response.op_responses().into_iter().next() else {
                return Err(malformed("etcd answered a failed compare without the read"));
            };
            let Some(kv) = got.kvs().first() else {
                return Err(malformed(
                    "etcd failed a compare on the compaction key's version but has no such key",
                ));
            };
            // What the other server recorded; unreadable or 0 (its first turn) says nothing.
            let recorded = kv
                .value_str()
                .ok()
                .and_then(|v| v.parse::<Revision>().ok())
                .filter(|r| *r > 0);
            return Ok(CompactTurn {
                version: kv.version(),
                revision: current,
                outcome: CompactOutcome::TakenElsewhere(recorded),
            });
        }
        let outcome = CompactOutcome::of_turn_taken(self, revision).await;
        Ok(CompactTurn {
            version: expected_version + 1,
            revision: current,
            outcome,
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        // A count of one key is the cheapest read that carries the header.
        let mut key = self.prefix.as_bytes().to_vec();
        if key.is_empty() {
            key.push(0);
        }
        let response = self
            .range(key, GetOptions::new().with_count_only())
            .await
            .map_err(|failed| unavailable("read the current revision", failed))?;
        header_revision(&response)
    }
}

/// The compare that lets an update or delete go ahead: the key's mod revision is `expected`, or,
/// without one, the key exists.
fn guard(etcd_key: &[u8], expected: Option<Revision>) -> Compare {
    match expected {
        Some(revision) => Compare::mod_revision(etcd_key.to_vec(), CompareOp::Equal, revision),
        None => Compare::mod_revision(etcd_key.to_vec(), CompareOp::Greater, 0),
    }
}

/// The responses whose header carries the store revision.
trait HasHeader {
    fn header(&self) -> Option<&etcd_client::ResponseHeader>;
}

macro_rules! has_header {
    ($($t:ty),*) => {$(
        impl HasHeader for $t {
            fn header(&self) -> Option<&etcd_client::ResponseHeader> {
                <$t>::header(self)
            }
        }
    )*};
}

has_header!(etcd_client::GetResponse, etcd_client::TxnResponse);

fn header_revision(response: &impl HasHeader) -> Result<Revision> {
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| malformed("etcd sent a response without a header"))
}

/// A store key-value from an etcd one, without the backend prefix.
fn convert_kv(prefix: &str, kv: etcd_client::KeyValue) -> KeyValue {
    let (create_revision, mod_revision) = (kv.create_revision(), kv.mod_revision());
    let (key, value) = kv.into_key_value();
    KeyValue {
        key: strip_prefix(prefix, &key),
        value: Bytes::from(value),
        create_revision,
        mod_revision,
    }
}

/// `key` without the backend prefix. etcd only returns keys in the ranges asked for, which all
/// lie under the prefix.
fn strip_prefix(prefix: &str, key: &[u8]) -> String {
    let key = key.strip_prefix(prefix.as_bytes()).unwrap_or(key);
    String::from_utf8_lossy(key).into_owned()
}

/// The kinds of etcd failure the store reports distinctly.
enum Failure {
    Compacted,
    FutureRevision,
    TooLarge,
    Other,
}

fn classify(error: &etcd_client::Error) -> Failure {
    let etcd_client::Error::GRpcStatus(status) = error else {
        return Failure::Other;
    };
    let message = status.message();
    if message.contains("required revision has been compacted") {
        Failure::Compacted
    } else if message.contains("required revision is a future revision") {
        Failure::FutureRevision
    } else if message.contains("request is too large")
        || message.contains("received message larger than max")
    {
        Failure::TooLarge
    } else {
        Failure::Other
    }
}

fn unavailable(operation: &str, failed: Failed) -> StoreError {
    StoreError::unavailable(
        format!(
            "etcd {operation} failed at {}: {}",
            failed.endpoint, failed.error
        ),
        failed.error,
    )
}

/// etcd answered something the protocol does not allow.
fn malformed(what: &str) -> StoreError {
    StoreError::Unavailable {
        message: format!("unexpected etcd response: {what}"),
        source: None,
    }
}

/// Feeds one watcher from one etcd watch, re-opening it after the last delivered revision, on
/// the next member that answers, when the connection breaks.
struct Pump {
    members: Arc<Members>,
    begin: Vec<u8>,
    end: Vec<u8>,
    prefix: Arc<str>,
    feed: Feed,
    /// The revision of the last event delivered (or the `after` the watch started from).
    last: Revision,
}

/// Why a pump stopped following an etcd watch.
enum Stop {
    /// The watcher went away or was cut off for lagging.
    WatcherGone,
    /// The history after `last` is compacted away (to this revision).
    Compacted(Revision),
    /// etcd canceled the watch for another reason.
    Canceled(String),
    /// The stream broke or ended: re-open it.
    Broken(String),
}

impl Pump {
    async fn run(mut self) {
        let mut retry = WATCH_RETRY_INITIAL;
        loop {
            if self.feed.is_closed() {
                return;
            }
            let options = WatchOptions::new()
                .with_range(self.end.clone())
                .with_prev_key()
                .with_start_revision(self.last + 1);
            // The healthy members in turn; the one a broken watch was on is marked down below
            // and so comes last.
            let Some(member) = self.members.order().into_iter().next() else {
                return;
            };
            let mut client = member.watch.clone();
            let stop = match client.watch(self.begin.clone(), Some(options)).await {
                Ok(stream) => {
                    let _open = member.watching();
                    self.follow(stream, &mut retry).await
                }
                Err(error) => Stop::Broken(error.to_string()),
            };
            match stop {
                Stop::WatcherGone => return,
                Stop::Compacted(compacted) => {
                    let error = StoreError::Compacted {
                        requested: self.last,
                        compacted: Some(compacted),
                    };
                    self.feed.fail(error).await;
                    return;
                }
                Stop::Canceled(reason) => {
                    let error = StoreError::Unavailable {
                        message: format!("etcd canceled the watch: {reason}"),
                        source: None,
                    };
                    self.feed.fail(error).await;
                    return;
                }
                Stop::Broken(reason) => {
                    tracing::debug!(
                        %reason,
                        endpoint = %member.endpoint,
                        after = self.last,
                        "etcd watch broke; re-opening it in {retry:?}"
                    );
                    // Whatever broke the stream, other members are tried first until this one
                    // answers a probe again.
                    self.members.mark_down(&member, &reason);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(WATCH_RETRY_MAX);
                }
            }
        }
    }

    /// Delivers the responses of one etcd watch until it stops.
    async fn follow(&mut self, stream: etcd_client::WatchStream, retry: &mut Duration) -> Stop {
        let (mut requests, mut responses) = stream.split();
        let mut watch_id = None;
        let stop = loop {
            let response = tokio::select! {
                response = responses.next() => response,
                () = self.feed.closed() => break Stop::WatcherGone,
            };
            let response = match response {
                Some(Ok(response)) => response,
                Some(Err(error)) => break Stop::Broken(error.to_string()),
                None => break Stop::Broken("etcd ended the watch stream".into()),
            };
            *retry = WATCH_RETRY_INITIAL;
            watch_id = Some(response.watch_id());
            if response.compact_revision() != 0 {
                break Stop::Compacted(response.compact_revision());
            }
            if response.canceled() {
                break Stop::Canceled(response.cancel_reason().to_owned());
            }
            let events: Vec<WatchEvent> = response
                .events()
                .iter()
                .filter_map(|event| convert_event(&self.prefix, event))
                .filter(|event| event.revision() > self.last)
                .collect();
            let Some(last) = events.last().map(WatchEvent::revision) else {
                continue;
            };
            let batch: Batch = events.into();
            if !self.feed.offer(&batch) {
                break Stop::WatcherGone;
            }
            self.last = last;
        };
        if let (Stop::WatcherGone, Some(id)) = (&stop, watch_id) {
            // Best effort: dropping the stream ends the watch anyway.
            let _ = requests.cancel(id).await;
        }
        stop
    }
}

/// A store watch event from an etcd one.
fn convert_event(prefix: &str, event: &etcd_client::Event) -> Option<WatchEvent> {
    let kv = event.kv()?;
    let key = strip_prefix(prefix, kv.key());
    let prev = event.prev_kv().map(|prev| KeyValue {
        key: key.clone(),
        value: Bytes::copy_from_slice(prev.value()),
        create_revision: prev.create_revision(),
        mod_revision: prev.mod_revision(),
    });
    Some(match event.event_type() {
        EventType::Put => WatchEvent {
            kind: EventKind::Put,
            kv: KeyValue {
                key,
                value: Bytes::copy_from_slice(kv.value()),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
            },
            // Version 1 is the write that created the key.
            prev: if kv.version() == 1 { None } else { prev },
        },
        EventType::Delete => WatchEvent {
            kind: EventKind::Delete,
            kv: KeyValue {
                key,
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: kv.mod_revision(),
            },
            prev,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_stripped_from_returned_keys() {
        assert_eq!(strip_prefix("/capstan", b"/capstan/pods/a"), "/pods/a");
        assert_eq!(strip_prefix("", b"/pods/a"), "/pods/a");
    }

    #[test]
    fn default_config_points_at_a_local_etcd() {
        let config = EtcdConfig::default();
        assert_eq!(config.endpoints, vec!["http://127.0.0.1:2379".to_string()]);
        assert_eq!(config.prefix, "");
        assert_eq!(config.watch_buffer, 1024);
    }
}
