//! The watch caches: one storage watch over the whole registry feeds, for every resource, the
//! current state of each object and a window of recent events. They serve watches and reads
//! without touching the store. Each object's JSON is made once, when its event arrives (written
//! as upstream writes it, with its `resourceVersion`), and the bytes are shared by every reader
//! and watcher that receives it.
//!
//! Because one watch sees every revision of the registry in order, the caches know how far they
//! have caught up with the store as a whole (their *progress*), not only with their own kind. A
//! consistent read asks the store for its current revision and waits until the progress reaches
//! it: the cache then holds every write that completed before the read began, as a read from the
//! store would (upstream's consistent reads from the cache work the same way).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use capstan_store::{EventKind, KeyValue, ListOptions, Revision, Store, StoreError, WatchEvent};
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{Notify, broadcast, watch};

use super::object::set_meta;

/// The key prefix every resource is stored under.
const ROOT: &str = "/registry/";
/// How many recent events each window keeps.
const WINDOW: usize = 4096;
/// How many events a watcher may fall behind the live feed before it is cut off (it then
/// resumes from the window, or is told to start again).
const FEED: usize = 4096;

/// An object as cached: serialised once (with its `resourceVersion`), and decoded again only
/// where a reader needs more than the bytes: the JSON is several times smaller than the decoded
/// tree, and most reads and watch deliveries only copy bytes.
#[derive(Debug)]
pub(crate) struct Cached {
    /// Its JSON, `kind` and `apiVersion` first.
    pub json: Bytes,
    /// Where the fields after `kind` and `apiVersion` start in `json`: a list item (which
    /// upstream's typed lists write without them) is `{` followed by `json[item_at..]`.
    item_at: usize,
    /// What selectors look at, worked out the first time one does.
    attrs: OnceLock<Attrs>,
    /// The object as one registry serves it, when that takes work (defaults applied on read),
    /// worked out the first time that registry asks: the registry's id, and the served form
    /// (`None`: the same object).
    served: OnceLock<(u64, Option<Arc<Cached>>)>,
}

/// An object's members in the order written, borrowed from its JSON (a key with an escape
/// cannot be borrowed: the object is then decoded instead).
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<&'de str, &'de RawValue>()? {
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// Writes `"name":`; `name` was borrowed from JSON, so it has nothing to escape.
fn write_key(json: &mut Vec<u8>, name: &str) {
    json.push(b'"');
    json.extend_from_slice(name.as_bytes());
    json.extend_from_slice(b"\":");
}

/// The labels and fields of an object that selectors match against (upstream's cache keeps the
/// same beside each object).
#[derive(Debug, Default)]
pub(crate) struct Attrs {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The selectable fields and their values.
    pub fields: Vec<(String, String)>,
}

impl Cached {
    /// Serialises `object` as it stands, as upstream writes it ([`capstan_api::gojson`]).
    pub(crate) fn of(object: Value) -> Arc<Cached> {
        let (json, item_at) = capstan_api::gojson::to_vec_split(&object);
        Arc::new(Cached {
            json: Bytes::from(json),
            item_at,
            attrs: OnceLock::new(),
            served: OnceLock::new(),
        })
    }

    /// The object as the registry `id` serves it, `serve` (which gives `None` for the object
    /// as it is) worked out once for the first registry that asks and again for any other.
    pub(crate) fn served_by(
        self: &Arc<Self>,
        id: u64,
        serve: impl FnOnce(&Cached) -> Option<Value>,
    ) -> Arc<Cached> {
        let mut serve = Some(serve);
        let mut compute = || serve.take().and_then(|serve| serve(self)).map(Cached::of);
        let (owner, served) = self.served.get_or_init(|| (id, compute()));
        let served = if *owner == id {
            served.clone()
        } else {
            compute()
        };
        served.unwrap_or_else(|| self.clone())
    }

    /// The object, decoded from its JSON.
    pub(crate) fn object(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// The object's labels and fields, worked out by `compute` from the decoded object the
    /// first time they are asked for.
    pub(crate) fn attrs(&self, compute: impl FnOnce(&Value) -> Attrs) -> &Attrs {
        self.attrs.get_or_init(|| compute(&self.object()))
    }

    /// Stamps `revision` as the object's `resourceVersion` and fills in `kind` and
    /// `apiVersion` where missing, then serialises it.
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
        Cached::of(object)
    }

    /// The object stored as `stored` (written by the registry as upstream writes it, so `kind`
    /// and `apiVersion` first and no `resourceVersion`), served at `revision`: the stored bytes
    /// with the `resourceVersion` put where Go writes it in `metadata`, nothing decoded. `None`
    /// for what is not in that form (objects stored before Capstan stored it, a key with an
    /// escape); [`Cached::new`] then decodes and writes the object.
    pub(crate) fn from_stored(stored: &[u8], revision: Revision) -> Option<Arc<Cached>> {
        let top: Members<'_> = serde_json::from_slice(stored).ok()?;
        let [("kind", kind), ("apiVersion", api_version), ..] = top.0.as_slice() else {
            return None;
        };
        let typed = capstan_api::gojson::is_typed(
            serde_json::from_str(api_version.get()).ok()?,
            serde_json::from_str(kind.get()).ok()?,
        );
        let version = serde_json::to_string(&revision.to_string()).ok()?;
        let mut json = Vec::with_capacity(stored.len() + 32);
        let mut item_at = 0;
        json.push(b'{');
        for (i, (name, value)) in top.0.iter().enumerate() {
            if i > 0 {
                json.push(b',');
            }
            if i == 2 {
                item_at = json.len();
            }
            write_key(&mut json, name);
            if *name != "metadata" {
                json.extend_from_slice(value.get().as_bytes());
                continue;
            }
            let meta: Members<'_> = serde_json::from_str(value.get()).ok()?;
            // Go's ObjectMeta order (name, generateName, namespace, selfLink, uid, then
            // resourceVersion before everything else), or key order for a custom resource.
            let before = ["name", "generateName", "namespace", "selfLink", "uid"];
            let at = meta
                .0
                .iter()
                .position(|(k, _)| {
                    if typed {
                        !before.contains(k)
                    } else {
                        *k > "resourceVersion"
                    }
                })
                .unwrap_or(meta.0.len());
            json.push(b'{');
            let mut first = true;
            let mut put = |json: &mut Vec<u8>, name: &str, raw: &str| {
                if !first {
                    json.push(b',');
                }
                first = false;
                write_key(json, name);
                json.extend_from_slice(raw.as_bytes());
            };
            for (j, (name, raw)) in meta.0.iter().enumerate() {
                if j == at {
                    put(&mut json, "resourceVersion", &version);
                }
                if *name != "resourceVersion" {
                    put(&mut json, name, raw.get());
                }
            }
            if at == meta.0.len() {
                put(&mut json, "resourceVersion", &version);
            }
            json.push(b'}');
        }
        json.push(b'}');
        if item_at == 0 {
            item_at = json.len() - 1;
        }
        Some(Arc::new(Cached {
            json: Bytes::from(json),
            item_at,
            attrs: OnceLock::new(),
            served: OnceLock::new(),
        }))
    }

    /// Appends the object as a list item: without `kind` and `apiVersion`.
    pub(crate) fn write_item(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        if self.item_at < self.json.len() {
            out.extend_from_slice(&self.json[self.item_at..]);
        } else {
            out.push(b'}');
        }
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
    /// The revision the objects are at: the last revision of the registry applied, whichever
    /// resource it changed.
    revision: Revision,
    /// Events after this revision are all in the window.
    window_start: Revision,
    /// No object of the resource has changed after this revision (as far as the cache knows:
    /// the revision it was loaded at, or that of the last change applied since).
    changed: Revision,
    /// Whether the state is loaded and being kept up to date.
    ready: bool,
    /// The live feed; replaced on every reload, which ends the watches of the old one.
    feed: broadcast::Sender<Arc<CachedEvent>>,
}

impl State {
    /// The objects whose keys start with `prefix`, in key order.
    fn objects_under(&self, prefix: &str) -> Vec<Arc<Cached>> {
        self.objects_from(prefix, prefix)
    }

    /// The objects whose keys start with `prefix`, from the key `start` on, in key order.
    fn objects_from(&self, prefix: &str, start: &str) -> Vec<Arc<Cached>> {
        self.objects
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// The cache of one resource.
pub(crate) struct WatchCache {
    state: Mutex<State>,
    /// How far every cache has caught up with the store.
    progress: watch::Receiver<Revision>,
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
    fn new(kind: &'static str, api_version: String, progress: watch::Receiver<Revision>) -> Self {
        WatchCache {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                events: VecDeque::new(),
                revision: 0,
                window_start: 0,
                changed: 0,
                ready: false,
                feed: broadcast::channel(FEED).0,
            }),
            progress,
            kind,
            api_version,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, kv: &KeyValue, revision: Revision) -> Option<Arc<Cached>> {
        Cached::from_stored(&kv.value, revision).or_else(|| {
            let object: Value = serde_json::from_slice(&kv.value).ok()?;
            Some(Cached::new(object, revision, self.kind, &self.api_version))
        })
    }

    /// Replaces the state with `objects` as of `revision`, ending the watches of the old one.
    fn load(&self, objects: BTreeMap<String, Arc<Cached>>, revision: Revision) {
        let mut state = self.lock();
        state.objects = objects;
        state.events.clear();
        state.revision = revision;
        state.window_start = revision;
        state.changed = revision;
        state.ready = true;
        state.feed = broadcast::channel(FEED).0;
    }

    /// Applies one change of this resource.
    fn apply(&self, event: &WatchEvent) {
        let revision = event.revision();
        let prev = event
            .prev
            .as_ref()
            .and_then(|kv| self.cached(kv, kv.mod_revision));
        let (object, deleted) = match event.kind {
            EventKind::Delete => match &prev {
                Some(prev) => (
                    Cached::new(prev.object(), revision, self.kind, &self.api_version),
                    true,
                ),
                None => return,
            },
            EventKind::Put => match self.cached(&event.kv, revision) {
                Some(object) => (object, false),
                None => return,
            },
        };
        let event = Arc::new(CachedEvent {
            revision,
            key: event.kv.key.clone(),
            object,
            prev,
            deleted,
        });
        let mut state = self.lock();
        if deleted {
            state.objects.remove(&event.key);
        } else {
            state
                .objects
                .insert(event.key.clone(), event.object.clone());
        }
        state.revision = revision;
        state.changed = revision;
        state.events.push_back(event.clone());
        while state.events.len() > WINDOW {
            if let Some(old) = state.events.pop_front() {
                state.window_start = old.revision;
            }
        }
        // Sent under the lock, so a subscriber sees each event either in the backlog or on the
        // feed, never both and never neither.
        let _ = state.feed.send(event);
    }

    /// Records that the registry as a whole has been applied up to `revision`.
    fn advance(&self, revision: Revision) {
        let mut state = self.lock();
        state.revision = state.revision.max(revision);
    }

    fn unready(&self) {
        self.lock().ready = false;
    }

    /// Waits until the cache has applied `revision` (or a bit later), up to `timeout`. A cache
    /// still loading (or reloading) answers at once that it cannot serve: reading the store is
    /// quicker than waiting for the load.
    pub(crate) async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        if !self.lock().ready {
            return false;
        }
        if *self.progress.borrow() < revision {
            let mut progress = self.progress.clone();
            let caught_up =
                tokio::time::timeout(timeout, progress.wait_for(|r| *r >= revision)).await;
            if !matches!(caught_up, Ok(Ok(_))) {
                return false;
            }
        }
        self.lock().ready
    }

    /// How many objects the cache holds, once loaded.
    pub(crate) fn len(&self) -> Option<usize> {
        let state = self.lock();
        state.ready.then(|| state.objects.len())
    }

    /// One object, if the cache is loaded (`Some(None)`: there is no such object).
    pub(crate) fn get(&self, key: &str) -> Option<(Option<Arc<Cached>>, Revision)> {
        let state = self.lock();
        state
            .ready
            .then(|| (state.objects.get(key).cloned(), state.revision))
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

    /// The objects under `prefix` from the key `start` on as they were at `revision`, if the
    /// cache can tell: it has applied `revision`, and nothing of the resource changed after it.
    /// Pages after the first of a list read at `revision` are served from here when they can.
    pub(crate) fn unchanged_since(
        &self,
        revision: Revision,
        prefix: &str,
        start: &str,
    ) -> Option<Vec<Arc<Cached>>> {
        let state = self.lock();
        (state.ready && state.changed <= revision && revision <= state.revision)
            .then(|| state.objects_from(prefix, start))
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

/// The cache in `map` a storage key belongs to, with its prefix.
fn route(map: &BTreeMap<String, Arc<WatchCache>>, key: &str) -> Option<(String, Arc<WatchCache>)> {
    map.range::<str, _>((std::ops::Bound::Unbounded, std::ops::Bound::Included(key)))
        .next_back()
        .filter(|(prefix, _)| key.starts_with(prefix.as_str()))
        .map(|(prefix, cache)| (prefix.clone(), cache.clone()))
}

/// The caches of every resource, fed by one watch over the whole registry. Caches of custom
/// resources come and go at run time ([`Caches::add`], [`Caches::remove`]): the feed loads a new
/// one at the revision it has reached, then routes it the changes that follow.
pub(crate) struct Caches {
    /// Each resource's cache by its storage prefix.
    by_prefix: RwLock<BTreeMap<String, Arc<WatchCache>>>,
    /// The prefixes of caches added since the feed last loaded them.
    pending: Mutex<Vec<String>>,
    /// Wakes the feed to load the pending caches.
    added: Notify,
    progress: watch::Sender<Revision>,
}

impl Caches {
    /// Starts the caches of `resources` (storage prefix, kind, apiVersion), fed from `store`.
    pub(crate) fn start(
        store: Store,
        resources: impl IntoIterator<Item = (String, &'static str, String)>,
    ) -> Arc<Caches> {
        let (progress, receiver) = watch::channel(0);
        let by_prefix = resources
            .into_iter()
            .map(|(prefix, kind, api_version)| {
                let cache = WatchCache::new(kind, api_version, receiver.clone());
                (prefix, Arc::new(cache))
            })
            .collect();
        let caches = Arc::new(Caches {
            by_prefix: RwLock::new(by_prefix),
            pending: Mutex::default(),
            added: Notify::new(),
            progress,
        });
        let weak = Arc::downgrade(&caches);
        tokio::spawn(async move {
            loop {
                let Some(caches) = weak.upgrade() else { return };
                if let Err(error) = caches.run(&store).await {
                    tracing::warn!(%error, "watch cache feed failed; reloading");
                }
                for cache in caches.all() {
                    cache.unready();
                }
                drop(caches);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        caches
    }

    fn map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<WatchCache>>> {
        self.by_prefix
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every cache.
    fn all(&self) -> Vec<Arc<WatchCache>> {
        self.map().values().cloned().collect()
    }

    /// The cache of the resource stored under `prefix`.
    pub(crate) fn cache(&self, prefix: &str) -> Option<Arc<WatchCache>> {
        self.map().get(prefix).cloned()
    }

    /// The cache of the resource stored under `prefix`, added if there is none (a custom
    /// resource, whose objects are `kind` stored as `api_version`): it serves once the feed has
    /// loaded it, and until then readers go to the store.
    pub(crate) fn add(
        &self,
        prefix: &str,
        kind: &'static str,
        api_version: &str,
    ) -> Arc<WatchCache> {
        let mut map = self
            .by_prefix
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cache) = map.get(prefix) {
            return cache.clone();
        }
        let cache = Arc::new(WatchCache::new(
            kind,
            api_version.to_owned(),
            self.progress.subscribe(),
        ));
        map.insert(prefix.to_owned(), cache.clone());
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(prefix.to_owned());
        self.added.notify_one();
        cache
    }

    /// Drops the cache of `prefix` (a custom resource no longer served); registries still
    /// holding it read the store.
    pub(crate) fn remove(&self, prefix: &str) {
        let removed = self
            .by_prefix
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(prefix);
        if let Some(cache) = removed {
            cache.unready();
        }
    }

    /// The cache a storage key belongs to, with its prefix.
    fn route(&self, key: &str) -> Option<(String, Arc<WatchCache>)> {
        route(&self.map(), key)
    }

    /// Records that everything up to `revision` has been applied, and wakes the readers
    /// waiting for it.
    fn advance(&self, revision: Revision) {
        for cache in self.all() {
            cache.advance(revision);
        }
        self.progress.send_if_modified(|current| {
            let newer = revision > *current;
            if newer {
                *current = revision;
            }
            newer
        });
    }

    /// Loads the caches added since the feed last did, as of `revision` (the revision the
    /// feed has applied everything up to).
    async fn load_pending(&self, store: &Store, revision: Revision) -> Result<(), StoreError> {
        let pending = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for prefix in pending {
            let Some(cache) = self.cache(&prefix) else {
                continue;
            };
            let mut objects = BTreeMap::new();
            let mut start = None;
            loop {
                let page = store
                    .list(&ListOptions {
                        prefix: prefix.clone(),
                        start: start.clone(),
                        revision: Some(revision),
                        limit: Some(1000),
                    })
                    .await?;
                for kv in &page.kvs {
                    if let Some(cached) = cache.cached(kv, kv.mod_revision) {
                        objects.insert(kv.key.clone(), cached);
                    }
                }
                if !page.more {
                    break;
                }
                start = page.continue_key();
            }
            cache.load(objects, revision);
        }
        Ok(())
    }

    /// Loads every resource, then applies the registry's changes until the watch fails.
    async fn run(&self, store: &Store) -> Result<(), StoreError> {
        // The caches this load covers; one added meanwhile is loaded by the feed after it.
        let snapshot = {
            let map = self.map();
            self.pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
            map.clone()
        };
        let mut loaded: BTreeMap<String, BTreeMap<String, Arc<Cached>>> = BTreeMap::new();
        let mut start = None;
        let mut revision = None;
        loop {
            let page = store
                .list(&ListOptions {
                    prefix: ROOT.to_owned(),
                    start: start.clone(),
                    revision,
                    limit: Some(1000),
                })
                .await?;
            revision = Some(page.revision);
            for kv in &page.kvs {
                let Some((prefix, cache)) = route(&snapshot, &kv.key) else {
                    continue;
                };
                if let Some(cached) = cache.cached(kv, kv.mod_revision) {
                    loaded
                        .entry(prefix)
                        .or_default()
                        .insert(kv.key.clone(), cached);
                }
            }
            if !page.more {
                break;
            }
            start = page.continue_key();
        }
        let mut after = revision.unwrap_or_default();
        for (prefix, cache) in &snapshot {
            cache.load(loaded.remove(prefix.as_str()).unwrap_or_default(), after);
        }
        self.advance(after);
        loop {
            let mut stream = store.watch(ROOT, after).await?;
            'stream: loop {
                let first = tokio::select! {
                    first = stream.next() => first,
                    () = self.added.notified() => {
                        self.load_pending(store, after).await?;
                        continue 'stream;
                    }
                };
                let Some(first) = first else { break 'stream };
                // Apply whatever has arrived, then tell the readers once.
                let mut next = Some(first);
                while let Some(event) = next.take() {
                    match event {
                        Ok(event) => {
                            after = event.revision();
                            if let Some((_, cache)) = self.route(&event.kv.key) {
                                cache.apply(&event);
                            }
                        }
                        Err(StoreError::WatchLagged { last_revision }) => {
                            after = last_revision;
                            self.advance(after);
                            break 'stream;
                        }
                        Err(error) => return Err(error),
                    }
                    next = stream.next().now_or_never().flatten();
                }
                self.advance(after);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_puts_the_type_first_and_items_leave_it_out() {
        let cached = Cached::of(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a"},
            "data": {"k": "v"},
        }));
        let json = std::str::from_utf8(&cached.json).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","creationTimestamp":null},"data":{"k":"v"}}"#
        );
        assert_eq!(cached.object()["kind"], "ConfigMap");
        let mut item = Vec::new();
        cached.write_item(&mut item);
        assert_eq!(
            std::str::from_utf8(&item).unwrap(),
            r#"{"metadata":{"name":"a","creationTimestamp":null},"data":{"k":"v"}}"#
        );
    }

    /// Putting the `resourceVersion` into the stored bytes gives what decoding the object,
    /// setting it and writing it again would give.
    #[test]
    fn stored_objects_are_served_without_decoding() {
        let objects = [
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"x": "y"},
                             "creationTimestamp": "2026-11-27T08:00:00Z",
                             "annotations": {"quote\"d": "tab\tand é <&>"}},
                "data": {"k": "line\nbreak"}}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "generation": 3},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}),
            serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "finalizers": ["f"]}, "zz": 1, "a": 2}),
        ];
        for object in objects {
            let stored = capstan_api::gojson::to_vec(&object);
            let fast = Cached::from_stored(&stored, 42).unwrap();
            let slow = Cached::new(object.clone(), 42, "Secret", "v1");
            assert_eq!(
                std::str::from_utf8(&fast.json).unwrap(),
                std::str::from_utf8(&slow.json).unwrap()
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            fast.write_item(&mut a);
            slow.write_item(&mut b);
            assert_eq!(a, b);
        }
        // Objects stored before (keys in name order) and keys with escapes are decoded instead.
        assert!(
            Cached::from_stored(br#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#, 1).is_none()
        );
        assert!(
            Cached::from_stored(
                br#"{"kind":"Pod","apiVersion":"v1","metadata":{"na\u006de":"x"}}"#,
                1
            )
            .is_none()
        );
    }

    #[test]
    fn objects_with_only_a_type_or_no_type_stay_valid_json() {
        for object in [
            serde_json::json!({"kind": "Widget", "apiVersion": "example.com/v1"}),
            serde_json::json!({"kind": "Widget"}),
            serde_json::json!({}),
            serde_json::json!({"code": 1}),
        ] {
            let cached = Cached::of(object.clone());
            let back: Value = serde_json::from_slice(&cached.json).unwrap();
            assert_eq!(back, object);
            let mut item = Vec::new();
            cached.write_item(&mut item);
            let mut expected = object.clone();
            if let Some(map) = expected.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
            assert_eq!(serde_json::from_slice::<Value>(&item).unwrap(), expected);
        }
    }

    /// Polls `probe` until it gives a value (up to 10 s).
    async fn eventually<T>(mut probe: impl FnMut() -> Option<T>) -> T {
        for _ in 0..1000 {
            if let Some(value) = probe() {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out");
    }

    fn names(objects: &[Arc<Cached>]) -> Vec<String> {
        objects
            .iter()
            .map(|o| o.object()["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn caches_added_at_run_time_load_what_is_stored_then_follow_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::sqlite(capstan_store::sqlite::SqliteConfig::new(
            dir.path().join("state.db"),
        ))
        .await
        .unwrap();
        let object = |name: &str| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": name},
            }))
            .unwrap()
        };
        let prefix = "/registry/example.com/things/";
        store
            .create(&format!("{prefix}a"), object("a"))
            .await
            .unwrap();
        let caches = Caches::start(store.clone(), Vec::new());
        assert!(caches.cache(prefix).is_none());
        let cache = caches.add(prefix, "Thing", "example.com/v1");
        assert!(Arc::ptr_eq(
            &cache,
            &caches.add(prefix, "Thing", "example.com/v1")
        ));
        let loaded = eventually(|| cache.snapshot(prefix)).await;
        assert_eq!(names(&loaded.0), ["a"]);
        store
            .create(&format!("{prefix}b"), object("b"))
            .await
            .unwrap();
        let deleted = store.delete(&format!("{prefix}a"), None).await.unwrap();
        eventually(|| {
            let (objects, revision) = cache.snapshot(prefix)?;
            (names(&objects) == ["b"] && revision >= deleted.revision).then_some(())
        })
        .await;
        // A watcher of the cache sees the changes after it subscribed.
        let Subscription::Events { mut feed, .. } = cache.subscribe(deleted.revision) else {
            panic!("the cache serves watches");
        };
        store
            .create(&format!("{prefix}c"), object("c"))
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.key, format!("{prefix}c"));
        caches.remove(prefix);
        assert!(
            cache.snapshot(prefix).is_none(),
            "a removed cache no longer serves"
        );
        assert!(caches.cache(prefix).is_none());
    }

    #[test]
    fn the_served_form_is_worked_out_once_per_registry() {
        let cached = Cached::of(serde_json::json!({"kind": "K", "apiVersion": "v1", "spec": {}}));
        let calls = std::cell::Cell::new(0);
        let defaulted = |cached: &Cached| {
            calls.set(calls.get() + 1);
            let mut object = cached.object();
            object["spec"]["mode"] = "fast".into();
            Some(object)
        };
        let first = cached.served_by(1, defaulted);
        assert_eq!(first.object()["spec"]["mode"], "fast");
        let again = cached.served_by(1, defaulted);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(calls.get(), 1, "worked out once for registry 1");
        let other = cached.served_by(2, defaulted);
        assert_eq!(calls.get(), 2, "another registry works it out again");
        assert_eq!(other.object(), first.object());
        // Nothing to change: the cached object itself.
        let plain = Cached::of(serde_json::json!({"kind": "K", "apiVersion": "v1"}));
        assert!(Arc::ptr_eq(&plain.served_by(1, |_| None), &plain));
    }
}
