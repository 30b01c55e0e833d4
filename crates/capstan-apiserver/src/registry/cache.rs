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
//!
//! A resource may have an *index*: a field whose value the cache keeps objects by, which its
//! kind's strategy declares (`Strategy::indexed_field`), as upstream's pod storage declares
//! `spec.nodeName` (its `IndexerFuncs` and `TriggerPublisherFunc`). A list or watch whose field selector requires one non-empty value of
//! that field (`spec.nodeName=<node>`, a node's kubelet) is served from that value's objects, and
//! its watcher is fed only the events whose object, before or after, has that value, on a feed
//! of the value's own; other watchers get every event of the resource. The selectors still
//! decide what is sent, so the index only spares the walk, never changes the answer. Namespaces
//! need no index: objects are kept in key order and a namespace's keys share a prefix, so a
//! namespaced read walks only its namespace. `CAPSTAN_WATCH_CACHE_INDEXES=false` in the
//! server's environment turns the indexes off, for benchmarks that compare.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use capstan_store::{EventKind, KeyValue, ListOptions, Revision, Store, StoreError, WatchEvent};
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{Notify, broadcast, watch};

use capstan_api::catalog::Resource;

use super::object::set_meta;
use super::selectors::Selectors;

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

/// The field a resource's cache keeps its objects by ([`capstan_api::strategy::Strategy::indexed_field`]):
/// its selector name, whose dots separate the members that hold its value in the object's JSON.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Index {
    field: &'static str,
}

impl Index {
    /// The index of the field its kind's strategy declares, if any.
    fn declared(strategy: &dyn capstan_api::strategy::Strategy) -> Option<Index> {
        strategy.indexed_field().map(|field| Index { field })
    }

    /// The object's value of the field when it is a non-empty string, read from its JSON
    /// without building the object (an object whose keys are escaped is decoded instead).
    /// Selectors read an empty value for a missing field or one of another type, and for an
    /// object that is not a valid instance of its kind, so `None` covers all of those: the
    /// index answers only for non-empty values, and an object whose value it records either
    /// has that value for the selectors too or (invalid) has none.
    fn value(&self, json: &[u8]) -> Option<String> {
        fn member<'a>(raw: &'a str, name: &str) -> Result<Option<&'a RawValue>, ()> {
            if raw.trim_start().starts_with("null") {
                return Ok(None);
            }
            let members: Members<'a> = serde_json::from_str(raw).map_err(|_| ())?;
            Ok(members
                .0
                .into_iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v))
        }
        let borrowed = || -> Result<Option<String>, ()> {
            let text = std::str::from_utf8(json).map_err(|_| ())?;
            let mut raw = text;
            for name in self.field.split('.') {
                match member(raw, name)? {
                    Some(value) => raw = value.get(),
                    None => return Ok(None),
                }
            }
            Ok(serde_json::from_str::<String>(raw).ok())
        };
        let value = borrowed().unwrap_or_else(|()| {
            let object: Value = serde_json::from_slice(json).ok()?;
            let pointer: String = self.field.split('.').map(|p| format!("/{p}")).collect();
            object.pointer(&pointer)?.as_str().map(str::to_owned)
        });
        value.filter(|v| !v.is_empty())
    }
}

/// The labels and fields of an object that selectors match against (upstream's cache keeps the
/// same beside each object).
#[derive(Debug, Default)]
pub(crate) struct Attrs {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The selectable fields (their names are the strategy's) and their values.
    pub fields: Vec<(&'static str, String)>,
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
    /// Counts the reloads, so that a watcher can tell whether its feed is still the live one.
    generation: u64,
    /// With an index: the objects by their (non-empty) value of the indexed field, in key
    /// order.
    indexed: HashMap<String, BTreeMap<String, Arc<Cached>>>,
    /// With an index: the live feeds of the watchers that select one value of the indexed
    /// field, by that value (dropped, like the main feed, on every reload).
    triggered: HashMap<String, broadcast::Sender<Arc<CachedEvent>>>,
    /// How many triggered feeds there may be before those without watchers are swept.
    sweep_at: usize,
}

impl State {
    /// The objects whose keys start with `prefix` (and, narrowed, that have that value of the
    /// indexed field), in key order.
    fn objects_under(&self, prefix: &str, narrow: Option<&str>) -> Vec<Arc<Cached>> {
        self.objects_from(prefix, prefix, narrow)
    }

    /// The objects whose keys start with `prefix`, from the key `start` on (and, narrowed, that
    /// have that value of the indexed field), in key order.
    fn objects_from(&self, prefix: &str, start: &str, narrow: Option<&str>) -> Vec<Arc<Cached>> {
        let objects = match narrow {
            None => &self.objects,
            Some(value) => match self.indexed.get(value) {
                Some(objects) => objects,
                None => return Vec::new(),
            },
        };
        objects
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Files `object` under `value` in the index.
    fn index(&mut self, value: Option<String>, key: &str, object: &Arc<Cached>) {
        if let Some(value) = value {
            self.indexed
                .entry(value)
                .or_default()
                .insert(key.to_owned(), object.clone());
        }
    }

    /// Takes the object at `key` out of the index, from under `value`.
    fn unindex(&mut self, value: Option<String>, key: &str) {
        if let Some(value) = value
            && let Some(objects) = self.indexed.get_mut(&value)
        {
            objects.remove(key);
            if objects.is_empty() {
                self.indexed.remove(&value);
            }
        }
    }

    /// A subscription to the live feed, or, narrowed, to the feed of that value of the
    /// indexed field.
    fn subscribe(&mut self, narrow: Option<&str>) -> Feed {
        let events = match narrow {
            None => self.feed.subscribe(),
            Some(value) => {
                if self.triggered.len() >= self.sweep_at {
                    self.triggered.retain(|_, feed| feed.receiver_count() > 0);
                    self.sweep_at = (self.triggered.len() * 2).max(64);
                }
                self.triggered
                    .entry(value.to_owned())
                    .or_insert_with(|| broadcast::channel(FEED).0)
                    .subscribe()
            }
        };
        Feed {
            events,
            generation: self.generation,
        }
    }
}

/// The cache of one resource.
pub(crate) struct WatchCache {
    state: Mutex<State>,
    /// How far every cache has caught up with the store.
    progress: watch::Receiver<Revision>,
    kind: &'static str,
    api_version: String,
    /// The field the objects are also kept by, if any.
    index: Option<Index>,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("kind", &self.kind)
            .finish()
    }
}

/// A watcher's live feed from a cache: every event of the resource, or those of one value of
/// its indexed field.
pub(crate) struct Feed {
    events: broadcast::Receiver<Arc<CachedEvent>>,
    /// The cache's generation when subscribed.
    generation: u64,
}

impl Feed {
    /// The next event; an error when the watcher fell too far behind or the cache reloaded.
    pub(crate) async fn recv(&mut self) -> Result<Arc<CachedEvent>, broadcast::error::RecvError> {
        self.events.recv().await
    }
}

/// Where a watcher starts, as the cache can serve it.
pub(crate) enum Subscription {
    /// The events after the asked revision, then the live feed.
    Events {
        /// Events already in the window.
        backlog: Vec<Arc<CachedEvent>>,
        /// The live feed (events with revisions up to the last backlog one are skipped).
        feed: Feed,
    },
    /// The revision is older than the window: the caller must read the store instead.
    TooOld,
}

impl WatchCache {
    fn new(
        kind: &'static str,
        api_version: String,
        progress: watch::Receiver<Revision>,
        index: Option<Index>,
    ) -> Self {
        WatchCache {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                events: VecDeque::new(),
                revision: 0,
                window_start: 0,
                changed: 0,
                ready: false,
                feed: broadcast::channel(FEED).0,
                generation: 0,
                indexed: HashMap::new(),
                triggered: HashMap::new(),
                sweep_at: 64,
            }),
            progress,
            kind,
            index,
            api_version,
        }
    }

    /// The value of the indexed field a read or watch with `selectors` can be narrowed to: the
    /// one its field selector requires, if not empty (the objects an empty value selects are
    /// not indexed).
    pub(crate) fn narrowing<'a>(&self, selectors: &'a Selectors) -> Option<&'a str> {
        let index = self.index?;
        selectors
            .exact_field(index.field)
            .filter(|value| !value.is_empty())
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
        let mut indexed: HashMap<String, BTreeMap<String, Arc<Cached>>> = HashMap::new();
        if let Some(index) = self.index {
            for (key, object) in &objects {
                if let Some(value) = index.value(&object.json) {
                    indexed
                        .entry(value)
                        .or_default()
                        .insert(key.clone(), object.clone());
                }
            }
        }
        let mut state = self.lock();
        state.objects = objects;
        state.indexed = indexed;
        state.triggered.clear();
        state.generation += 1;
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
        // The values of the indexed field before and after: the watchers of either see it.
        let value = self.index.and_then(|i| i.value(&object.json));
        let prev_value = self
            .index
            .zip(prev.as_ref())
            .and_then(|(i, prev)| i.value(&prev.json));
        let event = Arc::new(CachedEvent {
            revision,
            key: event.kv.key.clone(),
            object,
            prev,
            deleted,
        });
        let mut state = self.lock();
        let replaced = if deleted {
            state.objects.remove(&event.key)
        } else {
            state
                .objects
                .insert(event.key.clone(), event.object.clone())
        };
        if let Some(index) = self.index {
            // The index follows the cached object (the event's previous one is the store's).
            let replaced_value = replaced.and_then(|r| index.value(&r.json));
            state.unindex(replaced_value, &event.key);
            if !deleted {
                state.index(value.clone(), &event.key, &event.object);
            }
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
        let _ = state.feed.send(event.clone());
        let other = prev_value.filter(|p| value.as_ref() != Some(p));
        for value in value.into_iter().chain(other) {
            if let Some(feed) = state.triggered.get(&value)
                && feed.send(event.clone()).is_err()
            {
                // Nobody watches that value any more.
                state.triggered.remove(&value);
            }
        }
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

    /// The current objects under `prefix` (narrowed: with that value of the indexed field,
    /// see [`WatchCache::narrowing`]) and the revision they are at, if the cache is loaded.
    pub(crate) fn snapshot(
        &self,
        prefix: &str,
        narrow: Option<&str>,
    ) -> Option<(Vec<Arc<Cached>>, Revision)> {
        let state = self.lock();
        if !state.ready {
            return None;
        }
        Some((state.objects_under(prefix, narrow), state.revision))
    }

    /// The objects under `prefix` from the key `start` on as they were at `revision`, if the
    /// cache can tell: it has applied `revision`, and nothing of the resource changed after it.
    /// Pages after the first of a list read at `revision` are served from here when they can.
    pub(crate) fn unchanged_since(
        &self,
        revision: Revision,
        prefix: &str,
        start: &str,
        narrow: Option<&str>,
    ) -> Option<Vec<Arc<Cached>>> {
        let state = self.lock();
        (state.ready && state.changed <= revision && revision <= state.revision)
            .then(|| state.objects_from(prefix, start, narrow))
    }

    /// Subscribes to the events after `after` (narrowed: the live feed carries only the events
    /// of that value of the indexed field; the backlog is not narrowed).
    pub(crate) fn subscribe(&self, after: Revision, narrow: Option<&str>) -> Subscription {
        let mut state = self.lock();
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
            feed: state.subscribe(narrow),
        }
    }

    /// The current state and a subscription to everything after it, taken atomically (both
    /// narrowed as [`WatchCache::snapshot`] and [`WatchCache::subscribe`] narrow).
    pub(crate) fn snapshot_and_subscribe(
        &self,
        prefix: &str,
        narrow: Option<&str>,
    ) -> Option<(Vec<Arc<Cached>>, Revision, Feed)> {
        let mut state = self.lock();
        if !state.ready {
            return None;
        }
        let objects = state.objects_under(prefix, narrow);
        let feed = state.subscribe(narrow);
        Some((objects, state.revision, feed))
    }

    /// The revision a bookmark for a watcher of `feed` carries, `last` being the revision of
    /// the last event it took from its feed (or where it started): once the watcher has taken
    /// every event sent to it, the last change of the resource, whether its feed carried it or
    /// not; as a watcher of the whole resource has then taken that change, this is `last` for
    /// it, and a narrowed watcher's bookmarks move as far.
    pub(crate) fn bookmark_revision(&self, feed: &Feed, last: Revision) -> Revision {
        let state = self.lock();
        // Sends happen under the lock: an empty feed of the live generation has nothing older
        // than the last change still to deliver.
        if state.ready && feed.generation == state.generation && feed.events.is_empty() {
            last.max(state.changed)
        } else {
            last
        }
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
    /// Starts the caches of the stored `resources`, fed from `store`. Each keeps the index its
    /// kind's strategy declares, unless `CAPSTAN_WATCH_CACHE_INDEXES=false` is in the
    /// environment.
    pub(crate) fn start(
        store: Store,
        resources: impl IntoIterator<Item = &'static Resource>,
    ) -> Arc<Caches> {
        let indexes = std::env::var("CAPSTAN_WATCH_CACHE_INDEXES").map_or(true, |v| v != "false");
        Caches::start_with(store, resources, indexes)
    }

    /// [`Caches::start`], with or without indexes.
    pub(crate) fn start_with(
        store: Store,
        resources: impl IntoIterator<Item = &'static Resource>,
        indexes: bool,
    ) -> Arc<Caches> {
        let (progress, receiver) = watch::channel(0);
        let by_prefix = resources
            .into_iter()
            .map(|resource| {
                let index = indexes
                    .then(|| Index::declared((resource.strategy)().as_ref()))
                    .flatten();
                let cache = WatchCache::new(
                    resource.kind,
                    resource.api_version(),
                    receiver.clone(),
                    index,
                );
                (resource.storage_key_prefix(), Arc::new(cache))
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
            None,
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
        let store = crate::test_support::sqlite(dir.path()).await;
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
        let loaded = eventually(|| cache.snapshot(prefix, None)).await;
        assert_eq!(names(&loaded.0), ["a"]);
        store
            .create(&format!("{prefix}b"), object("b"))
            .await
            .unwrap();
        let deleted = store.delete(&format!("{prefix}a"), None).await.unwrap();
        eventually(|| {
            let (objects, revision) = cache.snapshot(prefix, None)?;
            (names(&objects) == ["b"] && revision >= deleted.revision).then_some(())
        })
        .await;
        // A watcher of the cache sees the changes after it subscribed.
        let Subscription::Events { mut feed, .. } = cache.subscribe(deleted.revision, None) else {
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
            cache.snapshot(prefix, None).is_none(),
            "a removed cache no longer serves"
        );
        assert!(caches.cache(prefix).is_none());
    }

    /// The index reads the node as the selectors would, from the bytes, and records nothing
    /// for what selectors read as empty.
    #[test]
    fn the_index_reads_the_field_from_the_json() {
        let declared = |group, version, plural| {
            let resource = capstan_api::catalog::lookup(group, version, plural).unwrap();
            Index::declared((resource.strategy)().as_ref())
        };
        let index = declared("", "v1", "pods").unwrap();
        assert_eq!(index.field, "spec.nodeName");
        assert!(declared("", "v1", "nodes").is_none());
        let value = |json: &str| index.value(json.as_bytes());
        assert_eq!(
            value(r#"{"kind":"Pod","spec":{"containers":[],"nodeName":"n1"},"status":{}}"#),
            Some("n1".to_owned())
        );
        // Escaped values are read as their text; escaped keys through a decode.
        assert_eq!(
            value(r#"{"spec":{"nodeName":"n\u0031"}}"#),
            Some("n1".to_owned())
        );
        assert_eq!(
            value(r#"{"spec":{"node\u004eame":"n2"}}"#),
            Some("n2".to_owned())
        );
        for empty in [
            r#"{"spec":{"nodeName":""}}"#,
            r#"{"spec":{"nodeName":null}}"#,
            r#"{"spec":{"nodeName":7}}"#,
            r#"{"spec":{}}"#,
            r#"{"spec":null}"#,
            r#"{"spec":"x"}"#,
            r#"{"metadata":{}}"#,
            "not json",
        ] {
            assert_eq!(value(empty), None, "{empty}");
        }
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
