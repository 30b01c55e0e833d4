//! The watch cache of one resource: a single storage watch feeds the current state of every
//! object and a window of recent events, which serve watches and `resourceVersion=0` lists
//! without touching the store. Each object is decoded and serialised once, when its event
//! arrives, and the bytes are shared by every watcher that receives it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use capstan_store::{EventKind, KeyValue, ListOptions, Revision, Store, StoreError};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::object::set_meta;

/// How many recent events the window keeps.
const WINDOW: usize = 4096;
/// How many events a watcher may fall behind the live feed before it is cut off (it then
/// resumes from the window, or is told to start again).
const FEED: usize = 4096;

/// An object as cached: decoded (with its `resourceVersion`), and serialised once.
#[derive(Debug)]
pub(crate) struct Cached {
    /// The object.
    pub object: Value,
    /// Its JSON, with `kind` and `apiVersion`.
    pub json: Bytes,
}

impl Cached {
    pub(crate) fn new(
        mut object: Value,
        revision: Revision,
        kind: &str,
        api_version: &str,
    ) -> Arc<Cached> {
        set_meta(
            &mut object,
            "resourceVersion",
            Some(revision.to_string().into()),
        );
        if object.get("kind").is_none() {
            object["kind"] = kind.into();
            object["apiVersion"] = api_version.into();
        }
        let json = Bytes::from(serde_json::to_vec(&object).unwrap_or_default());
        Arc::new(Cached { object, json })
    }
}

/// One change, as the cache saw it.
#[derive(Debug)]
pub(crate) struct CachedEvent {
    /// The revision of the change.
    pub revision: Revision,
    /// The storage key.
    pub key: String,
    /// The object after the change; for a delete, its last state at the delete's revision.
    pub object: Arc<Cached>,
    /// The object before the change, if it existed.
    pub prev: Option<Arc<Cached>>,
    /// Whether the change deleted the object.
    pub deleted: bool,
}

struct State {
    objects: BTreeMap<String, Arc<Cached>>,
    events: VecDeque<Arc<CachedEvent>>,
    /// The last revision applied.
    revision: Revision,
    /// Events after this revision are all in the window.
    window_start: Revision,
    /// Whether the initial list has been loaded.
    ready: bool,
    /// The live feed; replaced on every reload, which ends the watches of the old one.
    feed: broadcast::Sender<Arc<CachedEvent>>,
}

impl State {
    /// The objects whose keys start with `prefix`, in key order.
    fn objects_under(&self, prefix: &str) -> Vec<Arc<Cached>> {
        self.objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// The cache of one resource.
pub(crate) struct WatchCache {
    state: Mutex<State>,
    progress: watch::Sender<Revision>,
    kind: &'static str,
    api_version: String,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("kind", &self.kind)
            .finish()
    }
}

/// The live feed of a cache.
pub(crate) type Feed = broadcast::Receiver<Arc<CachedEvent>>;

/// Where a watcher starts, as the cache can serve it.
pub(crate) enum Subscription {
    /// The events after the asked revision, then the live feed.
    Events {
        /// Events already in the window.
        backlog: Vec<Arc<CachedEvent>>,
        /// The live feed (events with revisions up to the last backlog one are skipped).
        feed: broadcast::Receiver<Arc<CachedEvent>>,
    },
    /// The revision is older than the window: the caller must read the store instead.
    TooOld,
}

impl WatchCache {
    /// Starts a cache fed from `prefix` of `store`.
    pub(crate) fn start(
        store: Store,
        prefix: String,
        kind: &'static str,
        api_version: String,
    ) -> Arc<WatchCache> {
        let (progress, _) = watch::channel(0);
        let cache = Arc::new(WatchCache {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                events: VecDeque::new(),
                revision: 0,
                window_start: 0,
                ready: false,
                feed: broadcast::channel(FEED).0,
            }),
            progress,
            kind,
            api_version,
        });
        let weak = Arc::downgrade(&cache);
        tokio::spawn(async move {
            loop {
                let Some(cache) = weak.upgrade() else { return };
                match cache.run(&store, &prefix).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(kind = cache.kind, %error, "watch cache feed failed; reloading");
                    }
                }
                drop(cache);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        cache
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, kv: &KeyValue, revision: Revision) -> Option<Arc<Cached>> {
        let object: Value = serde_json::from_slice(&kv.value).ok()?;
        Some(Cached::new(object, revision, self.kind, &self.api_version))
    }

    /// Loads the current state, then applies the storage watch until it fails.
    async fn run(&self, store: &Store, prefix: &str) -> Result<(), StoreError> {
        let mut objects = BTreeMap::new();
        let mut start = None;
        let mut revision = None;
        loop {
            let page = store
                .list(&ListOptions {
                    prefix: prefix.to_owned(),
                    start: start.clone(),
                    revision,
                    limit: Some(1000),
                })
                .await?;
            revision = Some(page.revision);
            for kv in &page.kvs {
                if let Some(cached) = self.cached(kv, kv.mod_revision) {
                    objects.insert(kv.key.clone(), cached);
                }
            }
            if !page.more {
                break;
            }
            start = page.continue_key();
        }
        let mut after = revision.unwrap_or_default();
        {
            let mut state = self.lock();
            state.objects = objects;
            state.events.clear();
            state.revision = after;
            state.window_start = after;
            state.ready = true;
            state.feed = broadcast::channel(FEED).0;
        }
        self.progress.send_replace(after);
        loop {
            let mut stream = match store.watch(prefix, after).await {
                Ok(stream) => stream,
                Err(error) => {
                    self.lock().ready = false;
                    return Err(error);
                }
            };
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(StoreError::WatchLagged { last_revision }) => {
                        after = last_revision;
                        break;
                    }
                    Err(error) => {
                        self.lock().ready = false;
                        return Err(error);
                    }
                };
                let revision = event.revision();
                after = revision;
                let prev = event
                    .prev
                    .as_ref()
                    .and_then(|kv| self.cached(kv, kv.mod_revision));
                let (object, deleted) = match event.kind {
                    EventKind::Delete => match &prev {
                        Some(prev) => (
                            Cached::new(
                                prev.object.clone(),
                                revision,
                                self.kind,
                                &self.api_version,
                            ),
                            true,
                        ),
                        None => continue,
                    },
                    EventKind::Put => match self.cached(&event.kv, revision) {
                        Some(object) => (object, false),
                        None => continue,
                    },
                };
                let event = Arc::new(CachedEvent {
                    revision,
                    key: event.kv.key.clone(),
                    object,
                    prev,
                    deleted,
                });
                {
                    let mut state = self.lock();
                    if deleted {
                        state.objects.remove(&event.key);
                    } else {
                        state
                            .objects
                            .insert(event.key.clone(), event.object.clone());
                    }
                    state.revision = revision;
                    state.events.push_back(event.clone());
                    while state.events.len() > WINDOW {
                        if let Some(old) = state.events.pop_front() {
                            state.window_start = old.revision;
                        }
                    }
                    // Sent under the lock, so a subscriber sees each event either in the
                    // backlog or on the feed, never both and never neither.
                    let _ = state.feed.send(event);
                }
                self.progress.send_replace(revision);
            }
        }
    }

    /// Waits until the cache has applied `revision` (or a bit later), up to `timeout`.
    pub(crate) async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        let mut progress = self.progress.subscribe();
        let ready = tokio::time::timeout(timeout, progress.wait_for(|r| *r >= revision)).await;
        matches!(ready, Ok(Ok(_))) && self.lock().ready
    }

    /// The current objects under `prefix` and the revision they are at, if the cache is
    /// loaded.
    pub(crate) fn snapshot(&self, prefix: &str) -> Option<(Vec<Arc<Cached>>, Revision)> {
        let state = self.lock();
        if !state.ready {
            return None;
        }
        Some((state.objects_under(prefix), state.revision))
    }

    /// Subscribes to the events after `after`.
    pub(crate) fn subscribe(&self, after: Revision) -> Subscription {
        let state = self.lock();
        if !state.ready || after < state.window_start {
            return Subscription::TooOld;
        }
        let backlog = state
            .events
            .iter()
            .filter(|e| e.revision > after)
            .cloned()
            .collect();
        Subscription::Events {
            backlog,
            feed: state.feed.subscribe(),
        }
    }

    /// The current state and a subscription to everything after it, taken atomically.
    pub(crate) fn snapshot_and_subscribe(
        &self,
        prefix: &str,
    ) -> Option<(Vec<Arc<Cached>>, Revision, Feed)> {
        let state = self.lock();
        if !state.ready {
            return None;
        }
        Some((
            state.objects_under(prefix),
            state.revision,
            state.feed.subscribe(),
        ))
    }
}
