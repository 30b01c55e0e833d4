//! Keeps the [`Snapshot`] current: one kube-rs watcher each for Namespaces, Services and
//! EndpointSlices (through the API, as any client), each object reduced on arrival to what DNS
//! needs. A change rebuilds the snapshot from the reduced objects and swaps it in atomically;
//! queries in flight keep the one they loaded. Changes that arrive while a rebuild runs are
//! folded into the next one, and the objects of a (re)list count only once it is complete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::records::{ServiceInfo, SliceInfo, Snapshot};

/// The reduced objects of one kind, by (namespace, name).
#[derive(Debug)]
struct Kind<V> {
    objects: HashMap<(String, String), V>,
    synced: bool,
}

impl<V> Default for Kind<V> {
    fn default() -> Self {
        Kind {
            objects: HashMap::new(),
            synced: false,
        }
    }
}

/// Everything the watchers have seen.
#[derive(Debug, Default)]
struct State {
    namespaces: Kind<()>,
    services: Kind<ServiceInfo>,
    slices: Kind<SliceInfo>,
}

/// The running watchers and the task that rebuilds the snapshot.
#[derive(Debug)]
pub struct Watchers {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts watching through `client`, publishing snapshots into `snapshot`.
pub fn start(client: Client, snapshot: Arc<ArcSwap<Snapshot>>) -> Watchers {
    let state = Arc::new(Mutex::new(State::default()));
    let changed = Arc::new(Notify::new());
    let tasks = vec![
        follow::<Namespace, ()>(
            Api::all(client.clone()),
            state.clone(),
            changed.clone(),
            |s| &mut s.namespaces,
            |_| Some(()),
        ),
        follow::<Service, ServiceInfo>(
            Api::all(client.clone()),
            state.clone(),
            changed.clone(),
            |s| &mut s.services,
            ServiceInfo::from_service,
        ),
        follow::<EndpointSlice, SliceInfo>(
            Api::all(client),
            state.clone(),
            changed.clone(),
            |s| &mut s.slices,
            SliceInfo::from_slice,
        ),
        tokio::spawn(rebuild(state, changed, snapshot)),
    ];
    Watchers { tasks }
}

/// Rebuilds the snapshot whenever something changed.
async fn rebuild(state: Arc<Mutex<State>>, changed: Arc<Notify>, snapshot: Arc<ArcSwap<Snapshot>>) {
    loop {
        changed.notified().await;
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or_default();
        let next = {
            let Ok(state) = state.lock() else { return };
            Snapshot::build(
                state
                    .namespaces
                    .objects
                    .keys()
                    .map(|(_, name)| name.as_str()),
                state.services.objects.values(),
                state.slices.objects.values(),
                state.namespaces.synced && state.services.synced && state.slices.synced,
                serial,
            )
        };
        tracing::debug!(
            services = next.services.len(),
            synced = next.synced,
            "DNS records rebuilt"
        );
        snapshot.store(Arc::new(next));
    }
}

/// The (namespace, name) key of an object.
fn key<K: Resource>(object: &K) -> (String, String) {
    (
        object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.clone().unwrap_or_default(),
    )
}

/// Follows one kind, keeping its reduced objects in `state`.
fn follow<K, V>(
    api: Api<K>,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    select: fn(&mut State) -> &mut Kind<V>,
    reduce: fn(&K) -> Option<V>,
) -> JoinHandle<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default,
    V: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, capstan_client::watcher_config())
            .default_backoff()
            .boxed();
        let mut relisted: Option<HashMap<(String, String), V>> = None;
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&Default::default()), %error, "DNS watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let Ok(mut state) = state.lock() else { return };
            let kind = select(&mut state);
            let notify = match event {
                Event::Init => {
                    relisted = Some(HashMap::new());
                    false
                }
                Event::InitApply(object) => {
                    if let (Some(seen), Some(value)) = (relisted.as_mut(), reduce(&object)) {
                        seen.insert(key(&object), value);
                    }
                    false
                }
                Event::InitDone => {
                    if let Some(seen) = relisted.take() {
                        kind.objects = seen;
                    }
                    kind.synced = true;
                    true
                }
                Event::Apply(object) => {
                    match reduce(&object) {
                        Some(value) => kind.objects.insert(key(&object), value),
                        None => kind.objects.remove(&key(&object)),
                    };
                    true
                }
                Event::Delete(object) => {
                    kind.objects.remove(&key(&object));
                    true
                }
            };
            drop(state);
            if notify {
                changed.notify_one();
            }
        }
    })
}
