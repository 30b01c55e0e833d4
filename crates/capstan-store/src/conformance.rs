//! The storage conformance suite, written once and run against every backend.
//!
//! Each case is a public async function taking a factory that makes a fresh, empty store; the
//! [`conformance_tests!`](crate::conformance_tests) macro turns every case into a test of its own
//! in a backend's test crate. The cases port the behaviours (not the code) of upstream's
//! apiserver storage tests and of etcd's watch guarantees: preconditions, reads at old
//! revisions, consistent paging, compaction and future revisions, ordered gap-free watches with
//! previous values, lost-update freedom under contention, and cut-off of slow watchers.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;

use crate::{
    EventKind, KeyValue, ListOptions, MAX_VALUE_BYTES, Revision, Store, StoreError, WatchEvent,
    WatchStream,
};

/// How the factory should configure the store it makes.
#[derive(Clone, Debug)]
pub struct Options {
    /// Batches a watcher may have waiting before it is cut off.
    pub watch_buffer: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { watch_buffer: 4096 }
    }
}

/// A store made for one test, with whatever must live as long as it (a temporary directory, an
/// etcd process).
pub struct TestStore {
    pub store: Store,
    _guard: Box<dyn Any + Send>,
}

impl std::fmt::Debug for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.store.fmt(f)
    }
}

impl TestStore {
    /// Keeps `guard` alive as long as the store.
    pub fn new(store: Store, guard: impl Any + Send) -> Self {
        TestStore {
            store,
            _guard: Box::new(guard),
        }
    }
}

/// Makes a fresh, empty store for one case: any `Fn(Options) -> impl Future<Output = TestStore>`.
pub trait Factory {
    /// A new store configured by `options`.
    fn make(&self, options: Options) -> impl Future<Output = TestStore>;
}

impl<F, Fut> Factory for F
where
    F: Fn(Options) -> Fut,
    Fut: Future<Output = TestStore>,
{
    fn make(&self, options: Options) -> impl Future<Output = TestStore> {
        self(options)
    }
}

/// Expands to one `#[tokio::test]` per conformance case, each calling `$factory(options)` for a
/// fresh store.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@cases $factory:
            create_and_get,
            update_with_and_without_precondition,
            update_to_the_same_value_writes_nothing,
            delete_with_and_without_precondition,
            bad_input_is_a_typed_error,
            list_honours_prefix_boundaries,
            read_at_an_older_revision,
            paging_reads_one_snapshot_across_concurrent_writes,
            compacted_revisions_are_refused,
            future_revisions_are_refused,
            compaction_keeps_the_current_state,
            every_write_takes_the_next_revision,
            watch_replays_history_in_order_with_previous_values,
            watch_sees_only_its_prefix,
            concurrent_compare_and_swap_loses_no_update,
            watchers_see_identical_gap_free_sequences,
            resumed_watch_continues_without_gap_or_duplicate,
            slow_watcher_is_cut_off_without_blocking_others,
            keys_with_a_ttl_expire_with_a_delete_event,
        );
    };
    (@cases $factory:path: $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::conformance::$case(|options| $factory(options)).await;
            }
        )*
    };
}

const TIMEOUT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(TIMEOUT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// Reads `n` events from a watch.
async fn take(stream: &mut WatchStream, n: usize) -> Vec<WatchEvent> {
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        match within("waiting for watch events", stream.next()).await {
            Some(Ok(event)) => events.push(event),
            Some(Err(error)) => panic!("watch failed after {} events: {error}", events.len()),
            None => panic!("watch ended after {} events", events.len()),
        }
    }
    events
}

/// Reads events until one at or after `revision`.
async fn take_until(stream: &mut WatchStream, revision: Revision) -> Vec<WatchEvent> {
    let mut events: Vec<WatchEvent> = Vec::new();
    while events.last().is_none_or(|e| e.revision() < revision) {
        events.extend(take(stream, 1).await);
    }
    events
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// (kind, key, value, previous value) of each event.
fn summary(events: &[WatchEvent]) -> Vec<(EventKind, String, String, Option<String>)> {
    events
        .iter()
        .map(|e| {
            (
                e.kind,
                e.kv.key.clone(),
                text(&e.kv.value),
                e.prev.as_ref().map(|p| text(&p.value)),
            )
        })
        .collect()
}

fn revisions(events: &[WatchEvent]) -> Vec<Revision> {
    events.iter().map(WatchEvent::revision).collect()
}

fn keys_and_values(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts that a watch cannot start at `after` because it was compacted, whether the backend
/// refuses the call or ends the stream at once.
async fn assert_watch_compacted(store: &Store, prefix: &str, after: Revision) {
    match store.watch(prefix, after).await {
        Err(StoreError::Compacted { .. }) => {}
        Err(other) => panic!("watch after {after}: expected Compacted, got {other}"),
        Ok(mut stream) => match within("compacted watch", stream.next()).await {
            Some(Err(StoreError::Compacted { .. })) => {}
            other => panic!("watch after {after}: expected Compacted, got {other:?}"),
        },
    }
}

pub async fn create_and_get(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let before = s.current_revision().await.unwrap();

    let kv = s.create("/c/a", "one").await.unwrap();
    assert_eq!(kv.key, "/c/a");
    assert_eq!(text(&kv.value), "one");
    assert!(kv.mod_revision > before);
    assert_eq!(kv.create_revision, kv.mod_revision);
    assert_eq!(s.current_revision().await.unwrap(), kv.mod_revision);

    let got = s.get("/c/a", None).await.unwrap();
    assert_eq!(got.kv.as_ref(), Some(&kv));
    assert_eq!(got.revision, kv.mod_revision);

    match s.create("/c/a", "two").await {
        Err(StoreError::AlreadyExists { key }) => assert_eq!(key, "/c/a"),
        other => panic!("second create: expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(
        s.current_revision().await.unwrap(),
        kv.mod_revision,
        "a failed create takes no revision"
    );
    assert_eq!(s.get("/c/a", None).await.unwrap().kv, Some(kv));
    assert_eq!(s.get("/c/missing", None).await.unwrap().kv, None);
}

pub async fn update_with_and_without_precondition(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let created = s.create("/u/a", "1").await.unwrap();

    let updated = s
        .update("/u/a", "2", Some(created.mod_revision))
        .await
        .unwrap();
    assert!(updated.mod_revision > created.mod_revision);
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(text(&updated.value), "2");

    match s.update("/u/a", "3", Some(created.mod_revision)).await {
        Err(StoreError::Conflict {
            key,
            expected,
            current,
        }) => {
            assert_eq!(key, "/u/a");
            assert_eq!(expected, created.mod_revision);
            assert_eq!(*current, updated, "a conflict reports the current state");
        }
        other => panic!("stale update: expected Conflict, got {other:?}"),
    }

    let unconditional = s.update("/u/a", "4", None).await.unwrap();
    assert!(unconditional.mod_revision > updated.mod_revision);
    assert_eq!(
        s.get("/u/a", None).await.unwrap().kv,
        Some(unconditional.clone())
    );

    for expected in [None, Some(unconditional.mod_revision)] {
        match s.update("/u/missing", "x", expected).await {
            Err(StoreError::NotFound { key }) => assert_eq!(key, "/u/missing"),
            other => panic!("update of a missing key: expected NotFound, got {other:?}"),
        }
    }
    assert_eq!(s.get("/u/missing", None).await.unwrap().kv, None);
}

pub async fn update_to_the_same_value_writes_nothing(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let created = s.create("/n/a", "same").await.unwrap();
    let mut watch = s.watch("/n/", created.mod_revision).await.unwrap();

    let again = s
        .update("/n/a", "same", Some(created.mod_revision))
        .await
        .unwrap();
    assert_eq!(again, created, "an unchanged value keeps its revision");
    let again = s.update("/n/a", "same", None).await.unwrap();
    assert_eq!(again, created);
    assert_eq!(s.current_revision().await.unwrap(), created.mod_revision);

    let changed = s.update("/n/a", "different", None).await.unwrap();
    let events = take(&mut watch, 1).await;
    assert_eq!(
        revisions(&events),
        vec![changed.mod_revision],
        "no event for the no-op updates"
    );
}

pub async fn delete_with_and_without_precondition(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let a = s.create("/d/a", "1").await.unwrap();
    let a2 = s.update("/d/a", "2", None).await.unwrap();

    match s.delete("/d/a", Some(a.mod_revision)).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(*current, a2),
        other => panic!("stale delete: expected Conflict, got {other:?}"),
    }
    let deleted = s.delete("/d/a", Some(a2.mod_revision)).await.unwrap();
    assert_eq!(deleted.prev, a2);
    assert!(deleted.revision > a2.mod_revision);
    assert_eq!(s.get("/d/a", None).await.unwrap().kv, None);
    assert_eq!(s.current_revision().await.unwrap(), deleted.revision);

    match s.delete("/d/a", None).await {
        Err(StoreError::NotFound { key }) => assert_eq!(key, "/d/a"),
        other => panic!("delete of a missing key: expected NotFound, got {other:?}"),
    }

    let b = s.create("/d/b", "1").await.unwrap();
    let gone = s.delete("/d/b", None).await.unwrap();
    assert_eq!(gone.prev, b);

    let recreated = s.create("/d/a", "again").await.unwrap();
    assert!(recreated.create_revision > deleted.revision);
    assert_eq!(recreated.create_revision, recreated.mod_revision);
}

pub async fn bad_input_is_a_typed_error(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let invalid = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::InvalidArgument(_)) => {}
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    invalid(
        s.create("", "v").await.map(drop),
        "create with an empty key",
    );
    invalid(
        s.update("", "v", None).await.map(drop),
        "update with an empty key",
    );
    invalid(
        s.delete("", None).await.map(drop),
        "delete with an empty key",
    );
    invalid(s.get("", None).await.map(drop), "get with an empty key");
    invalid(
        s.create(&"k".repeat(crate::MAX_KEY_BYTES + 1), "v")
            .await
            .map(drop),
        "create with an overlong key",
    );
    invalid(s.get("/b/a", Some(0)).await.map(drop), "get at revision 0");
    invalid(
        s.list(&ListOptions {
            prefix: "/b/".into(),
            start: Some("/a/".into()),
            ..ListOptions::default()
        })
        .await
        .map(drop),
        "list starting outside its prefix",
    );
    invalid(s.compact(-1).await, "compact to a negative revision");

    let too_large = vec![b'x'; MAX_VALUE_BYTES + 1];
    match s.create("/b/big", too_large.clone()).await {
        Err(StoreError::ValueTooLarge { size, limit }) => {
            assert_eq!((size, limit), (MAX_VALUE_BYTES + 1, MAX_VALUE_BYTES));
        }
        other => panic!("oversized create: expected ValueTooLarge, got {other:?}"),
    }
    let largest = vec![b'y'; MAX_VALUE_BYTES];
    let kv = s.create("/b/big", largest.clone()).await.unwrap();
    match s.update("/b/big", too_large, None).await {
        Err(StoreError::ValueTooLarge { .. }) => {}
        other => panic!("oversized update: expected ValueTooLarge, got {other:?}"),
    }
    let got = s.get("/b/big", None).await.unwrap().kv.unwrap();
    assert_eq!(got.value.len(), MAX_VALUE_BYTES);
    assert_eq!(got, kv, "the value at the limit is stored whole");
}

pub async fn list_honours_prefix_boundaries(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    for key in ["/p/b", "/q", "/p/a", "/pa", "/p/b/c", "/p"] {
        s.create(key, key).await.unwrap();
    }
    let current = s.current_revision().await.unwrap();
    let listed = s.list(&ListOptions::prefix("/p/")).await.unwrap();
    assert_eq!(
        keys_and_values(&listed.kvs),
        pairs(&[("/p/a", "/p/a"), ("/p/b", "/p/b"), ("/p/b/c", "/p/b/c")])
    );
    assert_eq!(listed.revision, current);
    assert!(!listed.more);
    assert_eq!(s.count("/p/").await.unwrap(), 3);
    assert_eq!(s.count("/p").await.unwrap(), 5);
    assert_eq!(s.count("/nothing/").await.unwrap(), 0);

    let everything = s.list(&ListOptions::prefix("")).await.unwrap();
    let keys: Vec<_> = everything.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/p", "/p/a", "/p/b", "/p/b/c", "/pa", "/q"]);

    let limited = s
        .list(&ListOptions {
            limit: Some(2),
            ..ListOptions::prefix("/p/")
        })
        .await
        .unwrap();
    assert_eq!(limited.kvs.len(), 2);
    assert!(limited.more);
    let exact = s
        .list(&ListOptions {
            limit: Some(3),
            ..ListOptions::prefix("/p/")
        })
        .await
        .unwrap();
    assert_eq!(exact.kvs.len(), 3);
    assert!(
        !exact.more,
        "a limit equal to the count leaves nothing more"
    );
}

pub async fn read_at_an_older_revision(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    s.create("/o/a", "a1").await.unwrap();
    s.create("/o/b", "b1").await.unwrap();
    s.create("/o/d", "d1").await.unwrap();
    let then = s.current_revision().await.unwrap();
    s.update("/o/a", "a2", None).await.unwrap();
    s.delete("/o/b", None).await.unwrap();
    s.create("/o/c", "c1").await.unwrap();
    s.update("/o/a", "a3", None).await.unwrap();
    s.delete("/o/d", None).await.unwrap();
    s.create("/o/d", "d2").await.unwrap();

    let old = s
        .list(&ListOptions {
            revision: Some(then),
            ..ListOptions::prefix("/o/")
        })
        .await
        .unwrap();
    assert_eq!(old.revision, then);
    assert_eq!(
        keys_and_values(&old.kvs),
        pairs(&[("/o/a", "a1"), ("/o/b", "b1"), ("/o/d", "d1")])
    );
    let now = s.list(&ListOptions::prefix("/o/")).await.unwrap();
    assert_eq!(
        keys_and_values(&now.kvs),
        pairs(&[("/o/a", "a3"), ("/o/c", "c1"), ("/o/d", "d2")])
    );

    let a_then = s.get("/o/a", Some(then)).await.unwrap();
    assert_eq!(a_then.revision, then);
    let a_then = a_then.kv.unwrap();
    assert_eq!(text(&a_then.value), "a1");
    assert!(a_then.mod_revision <= then);
    assert_eq!(
        text(&s.get("/o/b", Some(then)).await.unwrap().kv.unwrap().value),
        "b1"
    );
    assert_eq!(s.get("/o/c", Some(then)).await.unwrap().kv, None);

    // Paging at an old revision merges live and undone keys in key order; each page counts
    // the keys from its start at that revision.
    let mut seen = Vec::new();
    let mut counts = Vec::new();
    let mut start = None;
    loop {
        let page = s
            .list(&ListOptions {
                prefix: "/o/".into(),
                start: start.clone(),
                revision: Some(then),
                limit: Some(1),
            })
            .await
            .unwrap();
        seen.extend(keys_and_values(&page.kvs));
        counts.push(page.count);
        match page.continue_key() {
            Some(next) => start = Some(next),
            None => break,
        }
    }
    assert_eq!(
        seen,
        pairs(&[("/o/a", "a1"), ("/o/b", "b1"), ("/o/d", "d1")])
    );
    assert_eq!(counts, [3, 2, 1]);
    let now = s
        .list(&ListOptions {
            limit: Some(1),
            ..ListOptions::prefix("/o/")
        })
        .await
        .unwrap();
    assert_eq!((now.kvs.len(), now.more, now.count), (1, true, 3));
}

pub async fn paging_reads_one_snapshot_across_concurrent_writes(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let mut expected = Vec::new();
    for i in 0..25 {
        let key = format!("/pg/{i:02}");
        s.create(&key, format!("v{i}")).await.unwrap();
        expected.push((key, format!("v{i}")));
    }
    let first = s
        .list(&ListOptions {
            limit: Some(7),
            ..ListOptions::prefix("/pg/")
        })
        .await
        .unwrap();
    assert!(first.more);
    assert_eq!(first.count, 25, "the count ignores the limit");
    let snapshot = first.revision;

    // Writers change the range while the pages are read.
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            s.delete("/pg/03", None).await.unwrap();
            s.delete("/pg/20", None).await.unwrap();
            s.update("/pg/10", "changed", None).await.unwrap();
            s.create("/pg/05x", "new").await.unwrap();
            s.create("/pg/30", "new").await.unwrap();
            s.create("/pg/00a", "new").await.unwrap();
        })
    };
    let mut seen = keys_and_values(&first.kvs);
    let mut next = first.continue_key();
    let mut pages = 1;
    while let Some(start) = next {
        let page = s
            .list(&ListOptions {
                prefix: "/pg/".into(),
                start: Some(start),
                revision: Some(snapshot),
                limit: Some(7),
            })
            .await
            .unwrap();
        assert_eq!(page.revision, snapshot);
        assert_eq!(
            page.count,
            25 - seen.len() as u64,
            "a page counts the snapshot's keys from its start"
        );
        seen.extend(keys_and_values(&page.kvs));
        next = page.continue_key();
        pages += 1;
        if pages == 2 {
            // Let the writers finish between the second and the third page.
            within("writer", writer_done(&writer)).await;
        }
    }
    writer.await.unwrap();
    assert_eq!(pages, 4);
    assert_eq!(
        seen, expected,
        "the pages form the snapshot of the first page"
    );

    let now = s.list(&ListOptions::prefix("/pg/")).await.unwrap();
    assert_eq!(now.kvs.len(), 25 - 2 + 3);
    assert!(now.revision > snapshot);
}

async fn writer_done(writer: &tokio::task::JoinHandle<()>) {
    while !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn compacted_revisions_are_refused(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let mut revs = Vec::new();
    for i in 0..10 {
        revs.push(s.update_or_create_for_test("/k/a", &format!("{i}")).await);
    }
    let compact_at = revs[4];
    s.compact(compact_at).await.unwrap();

    let old = revs[3];
    match s
        .list(&ListOptions {
            revision: Some(old),
            ..ListOptions::prefix("/k/")
        })
        .await
    {
        Err(StoreError::Compacted { requested, .. }) => assert_eq!(requested, old),
        other => panic!("list at a compacted revision: expected Compacted, got {other:?}"),
    }
    match s.get("/k/a", Some(old)).await {
        Err(StoreError::Compacted { .. }) => {}
        other => panic!("get at a compacted revision: expected Compacted, got {other:?}"),
    }
    assert_watch_compacted(s, "/k/", old).await;

    let at = s
        .list(&ListOptions {
            revision: Some(compact_at),
            ..ListOptions::prefix("/k/")
        })
        .await
        .unwrap();
    assert_eq!(keys_and_values(&at.kvs), pairs(&[("/k/a", "4")]));
    let mut watch = s.watch("/k/", compact_at).await.unwrap();
    let events = take(&mut watch, 5).await;
    assert_eq!(revisions(&events), revs[5..].to_vec());
    assert_eq!(
        events
            .iter()
            .map(|e| e.prev.as_ref().map(|p| text(&p.value)))
            .collect::<Vec<_>>(),
        ["4", "5", "6", "7", "8"].map(|v| Some(v.to_string())),
        "previous values survive compaction of the revisions they were written at"
    );

    s.compact(revs[2])
        .await
        .expect("compacting to an older revision is a no-op");
    s.compact(compact_at)
        .await
        .expect("compacting again is a no-op");
    let current = s.current_revision().await.unwrap();
    match s.compact(current + 5).await {
        Err(StoreError::FutureRevision { .. }) => {}
        other => {
            panic!("compaction beyond the current revision: expected FutureRevision, got {other:?}")
        }
    }
}

pub async fn future_revisions_are_refused(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    s.create("/f/a", "1").await.unwrap();
    let future = s.current_revision().await.unwrap() + 10;
    match s
        .list(&ListOptions {
            revision: Some(future),
            ..ListOptions::prefix("/f/")
        })
        .await
    {
        Err(StoreError::FutureRevision { requested, current }) => {
            assert_eq!(requested, future);
            assert!(current < future);
        }
        other => panic!("list in the future: expected FutureRevision, got {other:?}"),
    }
    match s.get("/f/a", Some(future)).await {
        Err(StoreError::FutureRevision { .. }) => {}
        other => panic!("get in the future: expected FutureRevision, got {other:?}"),
    }
    match s.watch("/f/", future).await {
        Err(StoreError::FutureRevision { .. }) => {}
        Err(other) => panic!("watch in the future: expected FutureRevision, got {other}"),
        Ok(_) => panic!("watch in the future: expected FutureRevision, got a stream"),
    }
}

pub async fn compaction_keeps_the_current_state(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    for i in 0..20 {
        s.update_or_create_for_test(&format!("/cc/{}", i % 5), &format!("{i}"))
            .await;
    }
    s.delete("/cc/4", None).await.unwrap();
    let current = s.current_revision().await.unwrap();
    s.compact(current).await.unwrap();

    let listed = s.list(&ListOptions::prefix("/cc/")).await.unwrap();
    assert_eq!(
        keys_and_values(&listed.kvs),
        pairs(&[
            ("/cc/0", "15"),
            ("/cc/1", "16"),
            ("/cc/2", "17"),
            ("/cc/3", "18")
        ])
    );
    let at = s
        .list(&ListOptions {
            revision: Some(current),
            ..ListOptions::prefix("/cc/")
        })
        .await
        .unwrap();
    assert_eq!(at.kvs, listed.kvs);
    assert_eq!(
        text(&s.get("/cc/3", None).await.unwrap().kv.unwrap().value),
        "18"
    );
    let mut watch = s.watch("/cc/", current).await.unwrap();
    let next = s.update("/cc/0", "after", None).await.unwrap();
    let events = take(&mut watch, 1).await;
    assert_eq!(revisions(&events), vec![next.mod_revision]);
    assert_eq!(next.mod_revision, current + 1);
}

pub async fn every_write_takes_the_next_revision(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    let a = s.create("/r/a", "1").await.unwrap().mod_revision;
    let _ = s.create("/r/a", "1").await.unwrap_err();
    let b = s.create("/r/b", "1").await.unwrap().mod_revision;
    let _ = s.update("/r/b", "2", Some(a)).await.unwrap_err();
    let c = s.update("/r/b", "2", Some(b)).await.unwrap().mod_revision;
    let d = s.delete("/r/a", None).await.unwrap().revision;
    assert_eq!(
        vec![a, b, c, d],
        vec![start + 1, start + 2, start + 3, start + 4],
        "failed writes take no revision"
    );
}

pub async fn watch_replays_history_in_order_with_previous_values(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    let a1 = s.create("/w/a", "a1").await.unwrap();
    s.update("/w/a", "a2", None).await.unwrap();
    s.create("/w/b", "b1").await.unwrap();
    let deleted = s.delete("/w/a", None).await.unwrap();
    s.create("/w/a", "a3").await.unwrap();
    let b2 = s.update("/w/b", "b2", None).await.unwrap();

    let mut watch = s.watch("/w/", start).await.unwrap();
    let events = take(&mut watch, 6).await;
    use EventKind::{Delete, Put};
    let o = |s: &str| Some(s.to_string());
    assert_eq!(
        summary(&events),
        vec![
            (Put, "/w/a".into(), "a1".into(), None),
            (Put, "/w/a".into(), "a2".into(), o("a1")),
            (Put, "/w/b".into(), "b1".into(), None),
            (Delete, "/w/a".into(), "".into(), o("a2")),
            (Put, "/w/a".into(), "a3".into(), None),
            (Put, "/w/b".into(), "b2".into(), o("b1")),
        ]
    );
    assert_eq!(
        revisions(&events),
        (start + 1..=start + 6).collect::<Vec<_>>()
    );
    assert!(events[0].is_create() && !events[1].is_create());
    assert_eq!(events[0].kv, a1);
    assert_eq!(events[1].prev.as_ref(), Some(&a1));
    assert_eq!(events[3].kv.mod_revision, deleted.revision);
    assert_eq!(events[3].kv.create_revision, 0);
    assert_eq!(events[3].prev.as_ref(), Some(&deleted.prev));
    assert_eq!(events[5].kv, b2);

    // The replay hands over to live events without a gap.
    let live = s.update("/w/a", "a4", None).await.unwrap();
    let events = take(&mut watch, 1).await;
    assert_eq!(events[0].kv, live);
    assert_eq!(text(&events[0].prev.as_ref().unwrap().value), "a3");

    // A watch from the current revision sees only what comes next.
    let mut fresh = s.watch("/w/", live.mod_revision).await.unwrap();
    let next = s.delete("/w/b", None).await.unwrap();
    let events = take(&mut fresh, 1).await;
    assert_eq!(revisions(&events), vec![next.revision]);
}

pub async fn watch_sees_only_its_prefix(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    let mut watch = s.watch("/x/", start).await.unwrap();
    s.create("/xy", "no").await.unwrap();
    s.create("/x/1", "yes").await.unwrap();
    s.create("/y/1", "no").await.unwrap();
    s.create("/x", "no").await.unwrap();
    s.create("/x/2", "yes").await.unwrap();
    let events = take(&mut watch, 2).await;
    let keys: Vec<_> = events.iter().map(|e| e.kv.key.as_str()).collect();
    assert_eq!(keys, ["/x/1", "/x/2"]);
}

pub async fn concurrent_compare_and_swap_loses_no_update(new_store: impl Factory) {
    const TASKS: usize = 8;
    const INCREMENTS: usize = 25;
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let created = s.create("/cas/counter", "0").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            let mut seen = s.get("/cas/counter", None).await.unwrap().kv.unwrap();
            while wins.len() < INCREMENTS {
                let n: u64 = text(&seen.value).parse().unwrap();
                match s
                    .update("/cas/counter", (n + 1).to_string(), Some(seen.mod_revision))
                    .await
                {
                    Ok(kv) => {
                        wins.push(kv.mod_revision);
                        seen = kv;
                    }
                    Err(StoreError::Conflict { current, .. }) => seen = *current,
                    Err(other) => panic!("update failed: {other}"),
                }
            }
            wins
        }));
    }
    let mut wins = Vec::new();
    for task in tasks {
        wins.extend(within("cas tasks", task).await.unwrap());
    }
    let total = TASKS * INCREMENTS;
    wins.sort_unstable();
    wins.dedup();
    assert_eq!(wins.len(), total, "each revision has exactly one winner");
    let end = s.get("/cas/counter", None).await.unwrap().kv.unwrap();
    assert_eq!(text(&end.value), total.to_string(), "no update was lost");

    let mut watch = s.watch("/cas/", created.mod_revision).await.unwrap();
    let events = take(&mut watch, total).await;
    let values: Vec<String> = events.iter().map(|e| text(&e.kv.value)).collect();
    let expected: Vec<String> = (1..=total).map(|n| n.to_string()).collect();
    assert_eq!(
        values, expected,
        "history shows every increment once, in order"
    );
}

pub async fn watchers_see_identical_gap_free_sequences(new_store: impl Factory) {
    const WATCHERS: usize = 12;
    const WRITERS: usize = 4;
    const OPS: usize = 60;
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        streams.push(s.watch("/m/", start).await.unwrap());
    }
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let s = s.clone();
        writers.push(tokio::spawn(async move {
            let mut last = 0;
            for i in 0..OPS {
                let key = format!("/m/{w}/{}", i % 7);
                last = if i % 5 == 4 {
                    match s.delete(&key, None).await {
                        Ok(deleted) => deleted.revision,
                        Err(StoreError::NotFound { .. }) => {
                            s.create(&key, format!("{w}-{i}"))
                                .await
                                .unwrap()
                                .mod_revision
                        }
                        Err(other) => panic!("{other}"),
                    }
                } else {
                    s.update_or_create_for_test(&key, &format!("{w}-{i}")).await
                };
            }
            last
        }));
    }
    // Watchers registered mid-way must agree too: one starts while the writers run.
    tokio::time::sleep(Duration::from_millis(5)).await;
    streams.push(s.watch("/m/", start).await.unwrap());
    let mut end = 0;
    for writer in writers {
        end = end.max(within("writers", writer).await.unwrap());
    }
    let expected_count = WRITERS * OPS;
    let mut sequences = Vec::new();
    for mut stream in streams {
        sequences.push(take_until(&mut stream, end).await);
    }
    let first = &sequences[0];
    assert_eq!(first.len(), expected_count);
    let revs = revisions(first);
    assert!(
        revs.windows(2).all(|w| w[1] == w[0] + 1),
        "one event per revision, no gap: {revs:?}"
    );
    assert_eq!(revs[0], start + 1);
    for (i, sequence) in sequences.iter().enumerate() {
        assert_eq!(sequence, first, "watcher {i} saw a different sequence");
    }
}

pub async fn resumed_watch_continues_without_gap_or_duplicate(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    for i in 0..20 {
        s.update_or_create_for_test(&format!("/rs/{}", i % 3), &format!("{i}"))
            .await;
    }
    let mut watch = s.watch("/rs/", start).await.unwrap();
    let mut seen = take(&mut watch, 7).await;
    drop(watch);
    let last = seen.last().unwrap().revision();
    let mut resumed = s.watch("/rs/", last).await.unwrap();
    // Writes after the resumption arrive after the rest of the replay.
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for i in 20..30 {
                s.update_or_create_for_test(&format!("/rs/{}", i % 3), &format!("{i}"))
                    .await;
            }
        })
    };
    seen.extend(take(&mut resumed, 23).await);
    writer.await.unwrap();
    assert_eq!(
        revisions(&seen),
        (start + 1..=start + 30).collect::<Vec<_>>()
    );
    let values: Vec<String> = seen.iter().map(|e| text(&e.kv.value)).collect();
    assert_eq!(values, (0..30).map(|i| i.to_string()).collect::<Vec<_>>());
}

pub async fn slow_watcher_is_cut_off_without_blocking_others(new_store: impl Factory) {
    const WRITES: usize = 300;
    let t = new_store.make(Options { watch_buffer: 8 }).await;
    let s = &t.store;
    let start = s.current_revision().await.unwrap();
    let mut stalled = s.watch("/slow/", start).await.unwrap();
    let active = s.watch("/slow/", start).await.unwrap();
    // The active watcher keeps reading. With so small a buffer it may itself fall behind when
    // the machine is busy; then it does what the contract asks of a client: watch again from
    // the last revision it saw. Either way it must end up with every event, once, in order.
    let reader = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut stream = active;
            let mut seen: Vec<Revision> = Vec::new();
            while seen.len() < WRITES {
                match within("active watcher", stream.next()).await {
                    Some(Ok(event)) => seen.push(event.revision()),
                    Some(Err(StoreError::WatchLagged { last_revision })) => {
                        assert_eq!(last_revision, seen.last().copied().unwrap_or(start));
                        stream = s.watch("/slow/", last_revision).await.unwrap();
                    }
                    Some(Err(other)) => panic!("active watcher failed: {other}"),
                    None => panic!("active watcher ended after {} events", seen.len()),
                }
            }
            seen
        })
    };
    let mut end = start;
    within("writes while a watcher stalls", async {
        for i in 0..WRITES {
            end = s
                .update_or_create_for_test("/slow/key", &format!("{i}"))
                .await;
        }
    })
    .await;
    let all: Vec<Revision> = (start + 1..=end).collect();
    assert_eq!(all.len(), WRITES);
    assert_eq!(
        within("active watcher", reader).await.unwrap(),
        all,
        "the active watcher saw everything"
    );

    let mut received = Vec::new();
    let last_revision = loop {
        match within("stalled watcher", stalled.next()).await {
            Some(Ok(event)) => received.push(event.revision()),
            Some(Err(StoreError::WatchLagged { last_revision })) => break last_revision,
            Some(Err(other)) => panic!("stalled watcher: expected WatchLagged, got {other}"),
            None => panic!("stalled watcher ended without an error"),
        }
    };
    assert!(
        received.len() < WRITES,
        "the stalled watcher was cut off before the end"
    );
    assert_eq!(last_revision, received.last().copied().unwrap_or(start));
    let mut resumed = s.watch("/slow/", last_revision).await.unwrap();
    let rest = take(&mut resumed, WRITES - received.len()).await;
    received.extend(revisions(&rest));
    assert_eq!(received, all, "resuming after the cut-off leaves no gap");
}

pub async fn keys_with_a_ttl_expire_with_a_delete_event(new_store: impl Factory) {
    let t = new_store.make(Options::default()).await;
    let s = &t.store;
    match s.create_with_ttl("/ttl/zero", "x", Duration::ZERO).await {
        Err(StoreError::InvalidArgument(_)) => {}
        other => panic!("zero TTL: expected InvalidArgument, got {other:?}"),
    }
    let start = s.current_revision().await.unwrap();
    let mut watch = s.watch("/ttl/", start).await.unwrap();
    let second = Duration::from_secs(1);
    let short = s
        .create_with_ttl("/ttl/short", "gone soon", second)
        .await
        .unwrap();
    s.create("/ttl/forever", "stays").await.unwrap();
    let renewed = s
        .create_with_ttl("/ttl/renewed", "a", second)
        .await
        .unwrap();
    s.update_with_ttl(
        "/ttl/renewed",
        "b",
        Some(renewed.mod_revision),
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    s.create_with_ttl("/ttl/cleared", "a", second)
        .await
        .unwrap();
    let last_write = s.update("/ttl/cleared", "b", None).await.unwrap();
    let writes = take(&mut watch, 6).await;
    assert_eq!(
        writes.last().map(WatchEvent::revision),
        Some(last_write.mod_revision)
    );

    // Expiry is a delete like any other: a new revision, an event with the previous value.
    let expired = take(&mut watch, 1).await;
    assert_eq!(expired[0].kind, EventKind::Delete);
    assert_eq!(expired[0].kv.key, "/ttl/short");
    assert_eq!(expired[0].prev.as_ref(), Some(&short));
    assert!(expired[0].revision() > last_write.mod_revision);
    assert_eq!(s.get("/ttl/short", None).await.unwrap().kv, None);

    // Keys renewed with a longer TTL, updated without one, or written without one stay.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for key in ["/ttl/forever", "/ttl/renewed", "/ttl/cleared"] {
        assert!(
            s.get(key, None).await.unwrap().kv.is_some(),
            "{key} must not have expired"
        );
    }
}

impl Store {
    /// Test helper: update `key` to `value`, creating it if missing; returns the revision.
    #[doc(hidden)]
    pub async fn update_or_create_for_test(&self, key: &str, value: &str) -> Revision {
        match self.update(key, value.to_owned(), None).await {
            Ok(kv) => kv.mod_revision,
            Err(StoreError::NotFound { .. }) => {
                self.create(key, value.to_owned())
                    .await
                    .unwrap()
                    .mod_revision
            }
            Err(other) => panic!("update of {key}: {other}"),
        }
    }
}
