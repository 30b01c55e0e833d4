//! The controller runtime: shared informers and work queues on top of kube-runtime.
//!
//! Upstream's controllers share one informer per resource type and get add, update and
//! delete notifications, which they turn into keys on their own work queue. kube-runtime's
//! `Controller` owns its watches and cannot hand deletions of shared objects to several
//! controllers, so the pieces are put together here: one [`watcher`] and reflector [`Store`] per
//! type ([`Informer`]), change handlers that map an event to keys ([`Change`]), and per
//! controller a [`Queue`] driven by kube-runtime's [`applier`] (deduplicated keys, one
//! reconcile per key at a time, delayed requeue), with client-go's per-key exponential
//! backoff on errors.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_client::events::EventRecorder;
use futures::channel::mpsc;
use futures::{FutureExt, StreamExt, TryFutureExt};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Config as ApplierConfig, applier};
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

/// An informer's cache writer and handlers until it starts.
type Unstarted<K> = Option<(Writer<K>, Vec<Handler<K>>)>;

/// One watch of a resource type shared by every controller: a cache ([`Store`]) and the change
/// handlers the controllers registered before the informer started.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// A field selector narrowing the watch (`None`: every object of the type).
    fields: Option<&'static str>,
    state: Arc<Mutex<Unstarted<K>>>,
    // kube-runtime's `Store::wait_until_ready` wakes only one of several waiters.
    synced: tokio::sync::watch::Sender<bool>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            fields: self.fields,
            state: self.state.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("kind", &K::kind(&()))
            .field("objects", &self.store.len())
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn new(fields: Option<&'static str>) -> Self {
        let writer = Writer::<K>::default();
        Informer {
            store: writer.as_reader(),
            fields,
            state: Arc::new(Mutex::new(Some((writer, Vec::new())))),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }

    /// The cache (complete once [`Informer::synced`] is done).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Done once the cache holds a complete list (upstream's `HasSynced`).
    pub fn synced(&self) -> Task {
        let mut rx = self.synced.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|synced| *synced).await;
        })
    }

    /// Calls `handler` for every change from now on; only before the informer starts.
    pub fn on_change(&self, handler: impl Fn(&Change<'_, K>) + Send + Sync + 'static) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.as_mut() {
            Some((_, handlers)) => handlers.push(Box::new(handler)),
            None => {
                tracing::error!(kind = %K::kind(&()), "handler added after the informer started")
            }
        }
    }

    /// Watches all objects of the type until the returned future is dropped.
    fn run(&self, client: Client) -> Task {
        let taken = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some((mut writer, handlers)) = taken else {
            return Box::pin(async {});
        };
        let store = self.store.clone();
        let synced = self.synced.clone();
        let fields = self.fields;
        Box::pin(async move {
            let api: Api<K> = Api::all(client);
            let mut config = capstan_client::watcher_config();
            if let Some(fields) = fields {
                config = config.fields(fields);
            }
            let stream = watcher::watcher(api, config).default_backoff();
            futures::pin_mut!(stream);
            // The objects seen by the relist in progress, announced from the cache once it holds
            // them all. References, not copies: a copy of every object doubled the cache while
            // relisting, and the vector's buffer stayed (34 MiB after a start with 10,000 pods).
            let mut relisted: Vec<ObjectRef<K>> = Vec::new();
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                        continue;
                    }
                };
                // No controller reads managedFields, and an update that leaves them out keeps
                // the stored ones, so the cache drops them as kube-controller-manager's
                // informers do: they were two fifths of every cached pod.
                let event = event.modify(|object| object.meta_mut().managed_fields = None);
                match &event {
                    Event::Apply(object) => {
                        let old = store.get(&ObjectRef::from_obj(object));
                        writer.apply_watcher_event(&event);
                        let change = Change::Applied { old, new: object };
                        handlers.iter().for_each(|h| h(&change));
                    }
                    Event::Delete(object) => {
                        writer.apply_watcher_event(&event);
                        handlers.iter().for_each(|h| h(&Change::Deleted(object)));
                    }
                    Event::Init => {
                        relisted.clear();
                        writer.apply_watcher_event(&event);
                    }
                    Event::InitApply(object) => {
                        relisted.push(ObjectRef::from_obj(object));
                        writer.apply_watcher_event(&event);
                    }
                    Event::InitDone => {
                        tracing::debug!(kind = %K::kind(&()), objects = relisted.len(), "listed");
                        let before: HashMap<ObjectRef<K>, Arc<K>> = store
                            .state()
                            .into_iter()
                            .map(|o| (ObjectRef::from_obj(&*o), o))
                            .collect();
                        writer.apply_watcher_event(&event);
                        let mut gone = before;
                        for reference in std::mem::take(&mut relisted) {
                            // The cache holds every listed object now: this task alone writes it.
                            let Some(object) = store.get(&reference) else {
                                continue;
                            };
                            let old = gone.remove(&reference);
                            let change = Change::Applied { old, new: &*object };
                            handlers.iter().for_each(|h| h(&change));
                        }
                        // Deleted while the watch was down: upstream's DeletedFinalStateUnknown.
                        for object in gone.into_values() {
                            handlers.iter().for_each(|h| h(&Change::Deleted(&object)));
                        }
                        synced.send_replace(true);
                    }
                }
            }
        })
    }
}

/// Done once every one of `informers` is synced.
pub async fn all_synced(informers: Vec<Task>) {
    futures::future::join_all(informers).await;
}

/// The informers of one controller manager, one per resource type, created on first use.
#[derive(Default)]
pub struct Informers {
    by_type: HashMap<(TypeId, Option<&'static str>), Box<dyn Any + Send + Sync>>,
    starters: Vec<Box<dyn Fn(Client) -> Task + Send + Sync>>,
}

impl Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("types", &self.by_type.len())
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
        let key = (TypeId::of::<K>(), fields);
        if let Some(existing) = self
            .by_type
            .get(&key)
            .and_then(|any| (**any).downcast_ref::<Informer<K>>())
        {
            return existing.clone();
        }
        let informer = Informer::<K>::new(fields);
        self.by_type.insert(key, Box::new(informer.clone()));
        let starter = informer.clone();
        self.starters
            .push(Box::new(move |client| starter.run(client)));
        informer
    }

    /// Starts every informer; they run until the returned handles are dropped.
    pub fn start(&self, client: &Client) -> Vec<AbortOnDrop> {
        self.starters
            .iter()
            .map(|start| AbortOnDrop(tokio::spawn(start(client.clone()))))
            .collect()
    }
}

/// What a controller's `start` is handed: the manager's shared informers, API client and
/// configuration, and how many keys it reconciles at once. It notes each informer the controller
/// reads ([`Setup::watch`]), so that [`Setup::run`] reconciles only once all of them are synced.
pub struct Setup<'a> {
    informers: &'a mut Informers,
    synced: Vec<tokio::sync::watch::Receiver<bool>>,
    client: Client,
    config: &'a crate::Config,
    identity: &'a str,
    /// Keys reconciled at once (upstream's `--concurrent-*-syncs` default for the controller).
    pub concurrency: u16,
}

impl Debug for Setup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("informers", &self.synced.len())
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl<'a> Setup<'a> {
    /// A controller's setup over the manager's informers, reporting events as `identity`.
    pub(crate) fn new(
        informers: &'a mut Informers,
        client: Client,
        config: &'a crate::Config,
        identity: &'a str,
        concurrency: u16,
    ) -> Self {
        Setup {
            informers,
            synced: Vec::new(),
            client,
            config,
            identity,
            concurrency,
        }
    }

    /// The API client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The controller manager's configuration.
    pub fn config(&self) -> &crate::Config {
        self.config
    }

    /// An event recorder reporting as upstream's `component` (e.g. `job-controller`).
    pub fn recorder(&self, component: &str) -> EventRecorder {
        EventRecorder::start(self.client.clone(), component, self.identity)
    }

    /// The shared informer of every object of type `K`, which the controller reads.
    pub fn watch<K>(&mut self) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let informer = self.informers.get::<K>();
        self.synced.push(informer.synced.subscribe());
        informer
    }

    /// The shared informer of the objects of type `K` that a field selector picks.
    pub fn watch_by_fields<K>(&mut self, fields: &'static str) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let informer = self.informers.get_by_fields::<K>(fields);
        self.synced.push(informer.synced.subscribe());
        informer
    }

    /// Done once every informer the controller watches is synced.
    pub fn synced(&self) -> Task {
        let waits: Vec<Task> = self
            .synced
            .iter()
            .map(|rx| {
                let mut rx = rx.clone();
                Box::pin(async move {
                    let _ = rx.wait_for(|synced| *synced).await;
                }) as Task
            })
            .collect();
        Box::pin(all_synced(waits))
    }

    /// The controller `name` ([`run_controller`]): once every watched informer is synced, it
    /// reconciles the objects of `primary` whose keys come through `queue`.
    pub fn run<K, Ctx, F, Fut>(
        &self,
        name: &'static str,
        primary: &Informer<K>,
        queue: QueueReceiver<K>,
        ctx: Arc<Ctx>,
        reconcile: F,
    ) -> Task
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        Ctx: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, Error>> + Send + 'static,
    {
        Box::pin(run_controller(
            name,
            primary.store(),
            self.synced(),
            queue,
            self.concurrency,
            ctx,
            reconcile,
        ))
    }
}

/// A spawned task that stops when this handle is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A controller's work queue: keys of objects to reconcile, deduplicated.
#[derive(Debug)]
pub struct Queue<K: Resource<DynamicType = ()> + 'static> {
    tx: mpsc::UnboundedSender<ObjectRef<K>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Queue {
            tx: self.tx.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Queue<K> {
    /// A queue and the receiving end the runner drains.
    pub fn new() -> (Queue<K>, QueueReceiver<K>) {
        let (tx, rx) = mpsc::unbounded();
        (Queue { tx }, QueueReceiver(rx))
    }

    /// Asks for `key` to be reconciled.
    pub fn add(&self, key: ObjectRef<K>) {
        let _ = self.tx.unbounded_send(key);
    }

    /// Asks for every object of `informer` that is added, updated or deleted to be reconciled.
    pub fn follow(&self, informer: &Informer<K>)
    where
        K: Clone + DeserializeOwned + Debug + Send + Sync,
    {
        let queue = self.clone();
        informer.on_change(move |change| queue.add(ObjectRef::from_obj(change.object())));
    }

    /// Asks for every object of `informer` that is added or updated (not deleted) to be
    /// reconciled.
    pub fn follow_applied(&self, informer: &Informer<K>)
    where
        K: Clone + DeserializeOwned + Debug + Send + Sync,
    {
        let queue = self.clone();
        informer.on_change(move |change| {
            if let Change::Applied { new, .. } = change {
                queue.add(ObjectRef::from_obj(*new));
            }
        });
    }

    /// Asks for the object of the same namespace and name as any changed object of `informer`
    /// (e.g. a Service when its Endpoints change) to be reconciled.
    pub fn follow_namesakes<T>(&self, informer: &Informer<T>)
    where
        T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let queue = self.clone();
        informer.on_change(move |change| {
            let meta = change.object().meta();
            if let Some(name) = meta.name.as_deref() {
                queue.add_name(meta.namespace.as_deref(), name);
            }
        });
    }

    /// Asks for the object `name` in `namespace` to be reconciled.
    pub fn add_name(&self, namespace: Option<&str>, name: &str) {
        let key = ObjectRef::new(name);
        self.add(match namespace {
            Some(ns) => key.within(ns),
            None => key,
        });
    }
}

/// The receiving end of a [`Queue`].
#[derive(Debug)]
pub struct QueueReceiver<K: Resource<DynamicType = ()> + 'static>(
    mpsc::UnboundedReceiver<ObjectRef<K>>,
);

/// client-go's default per-item rate limiter: 5 ms doubling to 1000 s.
pub fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(5);
    let cap = Duration::from_secs(1000);
    base.checked_mul(1u32 << failures.min(20))
        .map_or(cap, |d| d.min(cap))
}

/// What a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("API call failed: {0}")]
    Api(#[from] kube::Error),
    /// The object cannot be handled as it is.
    #[error("{0}")]
    Invalid(String),
    /// The reconcile panicked: a bug. The controller goes on (the key is retried with backoff)
    /// rather than stop every key it owns.
    #[error("reconcile panicked: {0}")]
    Panicked(String),
}

impl Error {
    /// The error as upstream's controllers word it in conditions and events: an API error's
    /// own message (e.g. `pods "x" is forbidden: exceeded quota: ...`), else the error.
    pub fn message(&self) -> String {
        match self {
            Error::Api(error) => error_message(error),
            other => other.to_string(),
        }
    }

    /// Whether the error is an optimistic-concurrency conflict (expected; retried quietly).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Api(kube::Error::Api(s)) if s.code == 409)
    }
}

/// Whether an API error is a 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// Replaces an object's status through `api`: the stored object, or `None` when the object is
/// gone (its reconcile then just waits for the next change).
pub async fn replace_status_unless_gone<K>(
    api: &Api<K>,
    name: &str,
    object: &K,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + DeserializeOwned + serde::Serialize + Debug,
{
    match api
        .replace_status(name, &kube::api::PostParams::default(), object)
        .await
    {
        Ok(updated) => Ok(Some(updated)),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

/// A reconcile's outcome, with a panic turned into [`Error::Panicked`] with its text.
fn panic_as_error(outcome: std::thread::Result<Result<Action, Error>>) -> Result<Action, Error> {
    outcome.unwrap_or_else(|panic| {
        let text = match panic.downcast::<String>() {
            Ok(text) => *text,
            Err(panic) => panic
                .downcast_ref::<&str>()
                .map_or_else(|| "(no message)".to_owned(), |s| (*s).to_owned()),
        };
        Err(Error::Panicked(text))
    })
}

struct Shared<K: Resource + 'static, Ctx> {
    ctx: Arc<Ctx>,
    failures: Mutex<HashMap<ObjectRef<K>, u32>>,
    name: &'static str,
    metrics: crate::metrics::QueueMetrics<ObjectRef<K>>,
}

/// Runs a controller until the returned future is dropped: waits for `ready` (every informer
/// the reconciler reads synced), then reconciles every key that
/// comes through `queue`, `concurrency` at a time, one at a time per key. A failed reconcile is
/// retried after a per-key exponential backoff; a successful one resets it and may ask for a
/// delayed requeue.
pub async fn run_controller<K, Ctx, F, Fut>(
    name: &'static str,
    store: Store<K>,
    ready: impl Future<Output = ()>,
    queue: QueueReceiver<K>,
    concurrency: u16,
    ctx: Arc<Ctx>,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    K::DynamicType: Debug + Eq + Hash + Clone + Unpin,
    Ctx: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    ready.await;
    tracing::info!(controller = name, "caches synced; starting");
    let shared = Arc::new(Shared {
        ctx,
        failures: Mutex::new(HashMap::new()),
        name,
        metrics: crate::metrics::QueueMetrics::new(name),
    });
    // The work-in-progress gauges, refreshed as client-go's queue refreshes them.
    let progress = Arc::downgrade(&shared);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        loop {
            tick.tick().await;
            match progress.upgrade() {
                Some(shared) => shared.metrics.update_unfinished(),
                None => break,
            }
        }
    });
    let counted = shared.clone();
    let known = store.clone();
    let reconcile = Arc::new(reconcile);
    let stream = applier(
        move |object: Arc<K>, shared: Arc<Shared<K, Ctx>>| {
            let key = ObjectRef::from_obj(&*object);
            let processing = shared.metrics.started(&key);
            let began = std::time::Instant::now();
            let timed = shared.clone();
            let fut = AssertUnwindSafe(reconcile(object, shared.ctx.clone()))
                .catch_unwind()
                .map(panic_as_error)
                .inspect(move |_| {
                    timed
                        .metrics
                        .worked(processing, began.elapsed().as_secs_f64())
                });
            Box::pin(fut.map_ok(move |action| {
                shared
                    .failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
                action
            }))
        },
        |object: Arc<K>, error: &Error, shared: Arc<Shared<K, Ctx>>| {
            let key = ObjectRef::from_obj(&*object);
            let mut failures = shared.failures.lock().unwrap_or_else(|e| e.into_inner());
            let count = failures.entry(key.clone()).or_default();
            let delay = backoff(*count);
            *count += 1;
            shared.metrics.retried();
            if let Error::Panicked(_) = error {
                tracing::error!(controller = shared.name, object = %key, %error, ?delay, "reconcile panicked; retrying");
            } else if error.is_conflict() {
                tracing::debug!(controller = shared.name, object = %key, %error, "conflict; retrying");
            } else {
                tracing::warn!(controller = shared.name, object = %key, %error, ?delay, "reconcile failed; retrying");
            }
            Action::requeue(delay)
        },
        shared,
        store,
        queue.0.map(move |key| {
            counted
                .metrics
                .added(key.clone(), known.get(&key).is_some());
            Ok::<_, Infallible>(key)
        }),
        ApplierConfig::default().concurrency(concurrency),
    );
    futures::pin_mut!(stream);
    while stream.next().await.is_some() {}
}

/// The message of an API error as upstream prints it in events.
pub fn error_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_reconcile_is_retried_and_the_controller_goes_on() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use std::sync::atomic::{AtomicU32, Ordering};
        let mut writer = Writer::<ConfigMap>::default();
        writer.apply_watcher_event(&Event::Init);
        for name in ["bad", "good"] {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(name.into());
            cm.metadata.namespace = Some("ns".into());
            writer.apply_watcher_event(&Event::InitApply(cm));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let (queue, rx) = Queue::<ConfigMap>::new();
        let calls = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
        let run = run_controller(
            "test",
            writer.as_reader(),
            async {},
            rx,
            1,
            calls.clone(),
            |cm: Arc<ConfigMap>, calls: Arc<(AtomicU32, AtomicU32)>| async move {
                if cm.metadata.name.as_deref() == Some("bad") {
                    // Panics the first time only.
                    if calls.0.fetch_add(1, Ordering::SeqCst) == 0 {
                        panic!("a bug");
                    }
                } else {
                    calls.1.fetch_add(1, Ordering::SeqCst);
                }
                Ok(Action::await_change())
            },
        );
        let task = tokio::spawn(run);
        queue.add_name(Some("ns"), "bad");
        queue.add_name(Some("ns"), "good");
        for _ in 0..200 {
            if calls.0.load(Ordering::SeqCst) >= 2 && calls.1.load(Ordering::SeqCst) >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            calls.0.load(Ordering::SeqCst),
            2,
            "the panicking key is retried"
        );
        assert_eq!(
            calls.1.load(Ordering::SeqCst),
            1,
            "other keys are still served"
        );
        assert!(!task.is_finished(), "the controller keeps running");
        task.abort();
    }

    #[test]
    fn errors_read_as_upstream_words_them() {
        let status =
            kube::core::Status::failure(r#"pods "p" is forbidden: exceeded quota: q"#, "Forbidden")
                .with_code(403);
        let error = Error::Api(kube::Error::Api(status.boxed()));
        assert_eq!(
            error.message(),
            r#"pods "p" is forbidden: exceeded quota: q"#
        );
        assert_eq!(
            Error::Invalid("bad selector".into()).message(),
            "bad selector"
        );
    }

    #[test]
    fn backoff_doubles_from_5ms_to_1000s() {
        assert_eq!(backoff(0), Duration::from_millis(5));
        assert_eq!(backoff(1), Duration::from_millis(10));
        assert_eq!(backoff(10), Duration::from_millis(5120));
        assert_eq!(backoff(18), Duration::from_secs(1000));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(1000));
    }
}
