//! Shared informers: one watch and cache per resource type for every component of a process.
//!
//! Upstream's components share one informer per resource type and get add, update and delete
//! notifications, which they turn into keys on their own work queues. Here an [`Informer`] is one
//! [`watcher`] and reflector [`Store`] of a type, and change handlers that each user registers
//! ([`Change`]). The informers live in a process-wide [`SharedInformers`]: the controller manager
//! and the scheduler of one server each take a view of it ([`Informers`]), so that the pods and
//! nodes they both read are watched, decoded and kept once. A view that starts keeps the
//! informers it used running; when the last view of an informer is dropped (its component lost
//! its Lease) the watch stops and the cache is emptied. As upstream's `AddEventHandler`, a handler
//! registered while an informer runs is first handed every cached object as an addition.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// A notification from an informer.
#[derive(Debug)]
pub enum Change<'a, K> {
    /// An object was added (`old` is `None`) or updated, or seen again by a relist.
    Applied {
        /// The cached object before this event.
        old: Option<Arc<K>>,
        /// The object now.
        new: &'a K,
    },
    /// An object was deleted (or found gone by a relist): its last known state.
    Deleted(&'a K),
}

impl<K> Change<'_, K> {
    /// The object as it is now (or was last, for a deletion).
    pub fn object(&self) -> &K {
        match self {
            Change::Applied { new, .. } => new,
            Change::Deleted(object) => object,
        }
    }
}

type Handler<K> = Box<dyn Fn(&Change<'_, K>) + Send + Sync>;

/// A boxed future that runs until dropped or done.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A spawned task that stops when this handle is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Done once every one of `informers` is synced.
pub async fn all_synced(informers: Vec<Task>) {
    futures::future::join_all(informers).await;
}

/// What the watch task and the users of one informer share.
struct Shared<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// A field selector narrowing the watch (`None`: every object of the type).
    fields: Option<&'static str>,
    // kube-runtime's `Store::wait_until_ready` wakes only one of several waiters.
    synced: tokio::sync::watch::Sender<bool>,
    state: Mutex<State<K>>,
}

/// The cache's writer and the handlers, under one lock: a handler registered while the watch
/// runs is replayed the cache and then sees every later event, none twice and none missed.
struct State<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Writer<K>,
    /// The registered handlers, each with the view ([`Informers`]) that registered it.
    handlers: Vec<(u64, Handler<K>)>,
    /// How many started views use the informer, and its watch while any does.
    users: usize,
    watch: Option<AbortOnDrop>,
    /// The objects seen by the relist in progress, announced once the cache holds them all.
    /// References, not copies: a copy of every object doubled the cache while relisting.
    relisted: Vec<ObjectRef<K>>,
}

/// One shared watch of a resource type: a cache ([`Store`]) and the change handlers its users
/// registered. A handle knows the view it came from, which owns the handlers it registers.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    shared: Arc<Shared<K>>,
    owner: u64,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            shared: self.shared.clone(),
            owner: self.owner,
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("kind", &K::kind(&()))
            .field("objects", &self.shared.store.len())
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// The cache (complete once [`Informer::synced`] is done).
    pub fn store(&self) -> Store<K> {
        self.shared.store.clone()
    }

    /// Done once the cache holds a complete list (upstream's `HasSynced`).
    pub fn synced(&self) -> Task {
        let mut rx = self.synced_receiver();
        Box::pin(async move {
            let _ = rx.wait_for(|synced| *synced).await;
        })
    }

    /// Whether the cache holds a complete list, as a value to wait on.
    pub fn synced_receiver(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.synced.subscribe()
    }

    /// Calls `handler` for every change from now on, after handing it every cached object as
    /// an addition; it stays registered until this informer's view ([`Informers`]) is dropped.
    pub fn on_change(&self, handler: impl Fn(&Change<'_, K>) + Send + Sync + 'static) {
        let mut state = self.shared.lock();
        for object in self.shared.store.state() {
            handler(&Change::Applied {
                old: None,
                new: &object,
            });
        }
        state.handlers.push((self.owner, Box::new(handler)));
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn new(fields: Option<&'static str>) -> Self {
        let writer = Writer::<K>::default();
        Shared {
            store: writer.as_reader(),
            fields,
            synced: tokio::sync::watch::Sender::new(false),
            state: Mutex::new(State {
                writer,
                handlers: Vec::new(),
                users: 0,
                watch: None,
                relisted: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more started view uses the informer: the first starts its watch with `client`.
    fn acquire(self: &Arc<Self>, client: &Client) {
        let mut state = self.lock();
        state.users += 1;
        if state.watch.is_none() {
            let shared = self.clone();
            let client = client.clone();
            state.watch = Some(AbortOnDrop(tokio::spawn(async move {
                shared.watch(client).await
            })));
        }
    }

    /// The view `owner` is gone: its handlers are dropped and, if it had started, it no longer
    /// uses the informer. With no user left the watch stops and the cache is emptied, so that a
    /// later user starts from a fresh list.
    fn release(&self, owner: u64, started: bool) {
        let mut state = self.lock();
        state.handlers.retain(|(o, _)| *o != owner);
        if !started {
            return;
        }
        state.users = state.users.saturating_sub(1);
        if state.users == 0 {
            state.watch = None;
            state.relisted = Vec::new();
            state.writer.apply_watcher_event(&Event::Init);
            state.writer.apply_watcher_event(&Event::InitDone);
            self.synced.send_replace(false);
        }
    }

    /// Watches the objects until the task is aborted, applying each event.
    async fn watch(&self, client: Client) {
        let api: Api<K> = Api::all(client);
        let mut config = crate::watcher_config();
        if let Some(fields) = self.fields {
            config = config.fields(fields);
        }
        let stream = watcher::watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => self.apply(event),
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                }
            }
        }
    }

    /// Applies one watch event to the cache and tells the handlers.
    fn apply(&self, event: Event<K>) {
        // No component reads managedFields, and an update that leaves them out keeps the
        // stored ones, so the cache drops them as upstream's informers do: they were two fifths
        // of every cached pod.
        let event = event.modify(|object| object.meta_mut().managed_fields = None);
        let mut state = self.lock();
        let state = &mut *state;
        match &event {
            Event::Apply(object) => {
                let old = self.store.get(&ObjectRef::from_obj(object));
                state.writer.apply_watcher_event(&event);
                let change = Change::Applied { old, new: object };
                state.handlers.iter().for_each(|(_, h)| h(&change));
            }
            Event::Delete(object) => {
                state.writer.apply_watcher_event(&event);
                let change = Change::Deleted(object);
                state.handlers.iter().for_each(|(_, h)| h(&change));
            }
            Event::Init => {
                state.relisted.clear();
                state.writer.apply_watcher_event(&event);
            }
            Event::InitApply(object) => {
                state.relisted.push(ObjectRef::from_obj(object));
                state.writer.apply_watcher_event(&event);
            }
            Event::InitDone => {
                tracing::debug!(kind = %K::kind(&()), objects = state.relisted.len(), "listed");
                let mut gone: HashMap<ObjectRef<K>, Arc<K>> = self
                    .store
                    .state()
                    .into_iter()
                    .map(|o| (ObjectRef::from_obj(&*o), o))
                    .collect();
                state.writer.apply_watcher_event(&event);
                for reference in std::mem::take(&mut state.relisted) {
                    // The cache holds every listed object now: only this task writes it.
                    let Some(object) = self.store.get(&reference) else {
                        continue;
                    };
                    let old = gone.remove(&reference);
                    let change = Change::Applied { old, new: &*object };
                    state.handlers.iter().for_each(|(_, h)| h(&change));
                }
                // Deleted while the watch was down: upstream's DeletedFinalStateUnknown.
                for object in gone.into_values() {
                    let change = Change::Deleted(&*object);
                    state.handlers.iter().for_each(|(_, h)| h(&change));
                }
                self.synced.send_replace(true);
            }
        }
    }
}

/// What a view needs of an informer without knowing its type.
trait Used: Send + Sync {
    fn acquire(&self, client: &Client);
    fn release(&self, owner: u64, started: bool);
}

impl<K> Used for Arc<Shared<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn acquire(&self, client: &Client) {
        Shared::acquire(self, client)
    }

    fn release(&self, owner: u64, started: bool) {
        Shared::release(self, owner, started)
    }
}

type Key = (TypeId, Option<&'static str>);

/// The informers of one process, one per resource type (and field selector), created on first
/// use and shared by every component that takes a view of them ([`SharedInformers::view`]).
#[derive(Clone, Default)]
pub struct SharedInformers {
    by_type: Arc<Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>>,
    next_owner: Arc<AtomicU64>,
}

impl Debug for SharedInformers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types = self.by_type.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("SharedInformers")
            .field("types", &types)
            .finish()
    }
}

impl SharedInformers {
    /// A component's view of the process's informers.
    pub fn view(&self) -> Informers {
        Informers {
            shared: self.clone(),
            owner: self.next_owner.fetch_add(1, Ordering::Relaxed),
            used: HashMap::new(),
            started: false,
        }
    }

    fn get<K>(&self, fields: Option<&'static str>) -> Arc<Shared<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let mut by_type = self.by_type.lock().unwrap_or_else(|e| e.into_inner());
        let entry = by_type
            .entry((TypeId::of::<K>(), fields))
            .or_insert_with(|| Box::new(Arc::new(Shared::<K>::new(fields))));
        match (**entry).downcast_ref::<Arc<Shared<K>>>() {
            Some(shared) => shared.clone(),
            None => unreachable!("the informer of a type is kept under the type's id"),
        }
    }
}

/// A component's view of the process's informers ([`SharedInformers`]): the informers it asked
/// for, with the handlers it registered. [`Informers::start`] runs them (those already running
/// for another component are joined); dropping the view removes its handlers and stops the
/// informers no other view uses.
pub struct Informers {
    shared: SharedInformers,
    owner: u64,
    used: HashMap<Key, Box<dyn Used>>,
    started: bool,
}

impl Default for Informers {
    /// A view of informers of its own, shared with no other component.
    fn default() -> Self {
        SharedInformers::default().view()
    }
}

impl Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("types", &self.used.len())
            .field("started", &self.started)
            .finish()
    }
}

impl Informers {
    /// The shared informer for every object of type `K`.
    pub fn get<K>(&mut self) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.get_selected(None)
    }

    /// The shared informer for the objects of type `K` that a field selector picks (as
    /// upstream's filtered informers, e.g. one ConfigMap name in every namespace).
    pub fn get_by_fields<K>(&mut self, fields: &'static str) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.get_selected(Some(fields))
    }

    fn get_selected<K>(&mut self, fields: Option<&'static str>) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let shared = self.shared.get::<K>(fields);
        if !self.started {
            self.used
                .entry((TypeId::of::<K>(), fields))
                .or_insert_with(|| Box::new(shared.clone()));
        } else {
            tracing::error!(kind = %K::kind(&()), "informer asked for after its view started");
        }
        Informer {
            shared,
            owner: self.owner,
        }
    }

    /// Runs every informer this view asked for, until the view is dropped.
    pub fn start(&mut self, client: &Client) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        for used in self.used.values() {
            used.acquire(client);
        }
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        for used in self.used.values() {
            used.release(self.owner, self.started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn config_map(name: &str, value: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.data = Some([("v".to_owned(), value.to_owned())].into());
        cm
    }

    /// What a handler saw, as text: `+name=value (was old)` or `-name`.
    fn recorder(informer: &Informer<ConfigMap>) -> Arc<Mutex<Vec<String>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        informer.on_change(move |change| {
            let value = |cm: &ConfigMap| cm.data.as_ref().map(|d| d["v"].clone());
            let name = change.object().metadata.name.clone().unwrap_or_default();
            let line = match change {
                Change::Applied { old, new } => format!(
                    "+{name}={} (was {:?})",
                    value(new).unwrap_or_default(),
                    old.as_deref().and_then(value)
                ),
                Change::Deleted(_) => format!("-{name}"),
            };
            sink.lock().unwrap().push(line);
        });
        seen
    }

    fn take(seen: &Mutex<Vec<String>>) -> Vec<String> {
        std::mem::take(&mut *seen.lock().unwrap())
    }

    #[test]
    fn handlers_see_relists_events_and_a_late_handler_the_cache_first() {
        let shared = SharedInformers::default();
        let mut first = shared.view();
        let informer = first.get::<ConfigMap>();
        let early = recorder(&informer);
        let apply = |e| informer.shared.apply(e);
        apply(Event::Init);
        apply(Event::InitApply(config_map("a", "1")));
        apply(Event::InitApply(config_map("b", "1")));
        assert!(
            take(&early).is_empty(),
            "announced before the list is complete"
        );
        apply(Event::InitDone);
        let mut listed = take(&early);
        listed.sort();
        assert_eq!(listed, ["+a=1 (was None)", "+b=1 (was None)"]);
        assert!(*informer.synced_receiver().borrow());

        // Another component's view of the same type shares the informer, and its handler is
        // first handed what the cache holds.
        let mut second = shared.view();
        let same = second.get::<ConfigMap>();
        assert!(Arc::ptr_eq(&same.shared, &informer.shared));
        let late = recorder(&same);
        let mut replayed = take(&late);
        replayed.sort();
        assert_eq!(replayed, ["+a=1 (was None)", "+b=1 (was None)"]);

        apply(Event::Apply(config_map("a", "2")));
        apply(Event::Delete(config_map("b", "1")));
        for seen in [&early, &late] {
            assert_eq!(take(seen), ["+a=2 (was Some(\"1\"))", "-b"]);
        }

        // A relist that misses an object reports it deleted, and updates the others.
        apply(Event::Init);
        apply(Event::InitApply(config_map("c", "1")));
        apply(Event::InitDone);
        for seen in [&early, &late] {
            assert_eq!(take(seen), ["+c=1 (was None)", "-a"]);
        }

        // A dropped view's handlers are gone; the other's stay.
        drop(second);
        apply(Event::Apply(config_map("c", "2")));
        assert_eq!(take(&late), Vec::<String>::new());
        assert_eq!(take(&early), ["+c=2 (was Some(\"1\"))"]);
    }

    #[tokio::test]
    async fn the_last_started_view_to_go_stops_the_watch_and_empties_the_cache() {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .expect("a client");
        let shared = SharedInformers::default();
        let mut first = shared.view();
        let informer = first.get::<ConfigMap>();
        let mut second = shared.view();
        second.get::<ConfigMap>();
        first.start(&client);
        second.start(&client);
        informer.shared.apply(Event::Init);
        informer
            .shared
            .apply(Event::InitApply(config_map("a", "1")));
        informer.shared.apply(Event::InitDone);
        assert_eq!(informer.shared.lock().users, 2);

        drop(first);
        assert!(
            informer.shared.lock().watch.is_some(),
            "still used by the second view"
        );
        assert_eq!(informer.store().len(), 1);

        drop(second);
        let state = informer.shared.lock();
        assert!(state.watch.is_none());
        assert_eq!(state.users, 0);
        drop(state);
        assert_eq!(informer.store().len(), 0);
        assert!(!*informer.synced_receiver().borrow());
    }
}
