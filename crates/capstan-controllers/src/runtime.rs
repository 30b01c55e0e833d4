//! The controller runtime: work queues on top of kube-runtime, fed by the process's shared
//! informers.
//!
//! Upstream's controllers share one informer per resource type and get add, update and
//! delete notifications, which they turn into keys on their own work queue. kube-runtime's
//! `Controller` owns its watches and cannot hand deletions of shared objects to several
//! controllers, so the pieces are put together here: the shared informers of
//! [`capstan_client::informer`] (one watch and cache per type, [`Informer`], with change
//! handlers that map an event to keys, [`Change`]), and per controller a [`Queue`] driven by
//! kube-runtime's [`applier`] (deduplicated keys, one reconcile per key at a time, delayed
//! requeue), with client-go's per-key exponential backoff on errors.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_client::events::EventRecorder;
pub use capstan_client::informer::{AbortOnDrop, Change, Informer, Informers, Task, all_synced};
use futures::channel::mpsc;
use futures::{FutureExt, StreamExt, TryFutureExt};
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ApplierConfig, applier};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

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
        self.synced.push(informer.synced_receiver());
        informer
    }

    /// The shared informer of the objects of type `K` that a field selector picks.
    pub fn watch_by_fields<K>(&mut self, fields: &'static str) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let informer = self.informers.get_by_fields::<K>(fields);
        self.synced.push(informer.synced_receiver());
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
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

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
