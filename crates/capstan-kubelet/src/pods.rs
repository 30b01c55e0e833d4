//! The pods of this node: a watch of the pods bound to it (`spec.nodeName` field selector)
//! feeds one [`Worker`] per pod, and a relist of the runtime every second (upstream's PLEG)
//! wakes the worker of each pod whose sandboxes or containers changed. After the first list,
//! what the runtime holds for pods the API no longer has is torn down, so pods deleted while
//! the agent was away do not linger.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::watch;

use crate::runtime::fingerprints;
use crate::worker::{Shared, Worker};

/// How often the runtime is relisted.
const RELIST: Duration = Duration::from_secs(1);

struct Handle {
    pod: watch::Sender<Option<Arc<Pod>>>,
    task: tokio::task::JoinHandle<()>,
}

/// The workers, by pod UID.
#[derive(Default)]
struct Workers {
    workers: HashMap<String, Handle>,
}

impl Workers {
    /// Hands `pod` (None: gone) to its worker, starting one if needed.
    fn send(&mut self, shared: &Arc<Shared>, uid: &str, pod: Option<Arc<Pod>>) {
        if let Some(handle) = self.workers.get(uid)
            && !handle.task.is_finished()
        {
            handle.pod.send_replace(pod);
            return;
        }
        let (sender, receiver) = watch::channel(pod);
        let worker = Worker::new(shared.clone(), uid.to_owned());
        let task = tokio::spawn(worker.run(receiver));
        self.workers
            .insert(uid.to_owned(), Handle { pod: sender, task });
    }

    /// Wakes the worker of `uid`, if there is one.
    fn poke(&self, uid: &str) -> bool {
        match self.workers.get(uid) {
            Some(handle) if !handle.task.is_finished() => {
                handle.pod.send_modify(|_| {});
                true
            }
            _ => false,
        }
    }

    /// Forgets workers that have finished.
    fn sweep(&mut self) {
        self.workers.retain(|_, handle| !handle.task.is_finished());
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for handle in self.workers.values() {
            handle.task.abort();
        }
    }
}

/// Runs the node's pods until dropped.
pub async fn run(shared: Arc<Shared>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.node_name));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut workers = Workers::default();
    // The pods the API has for this node (by UID), once the first list is complete.
    let mut known: HashSet<String> = HashSet::new();
    let mut listing: HashSet<String> = HashSet::new();
    let mut synced = false;
    let mut prints: HashMap<String, u64> = HashMap::new();
    let mut relist = tokio::time::interval(RELIST);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        listing.insert(uid.clone());
                        known.insert(uid.clone());
                        workers.send(&shared, &uid, Some(Arc::new(pod)));
                    }
                    Ok(watcher::Event::InitDone) => {
                        // Pods deleted while the watch was away.
                        for uid in known.difference(&listing).cloned().collect::<Vec<_>>() {
                            known.remove(&uid);
                            workers.send(&shared, &uid, None);
                        }
                        synced = true;
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        known.insert(uid.clone());
                        workers.send(&shared, &uid, Some(Arc::new(pod)));
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        known.remove(&uid);
                        workers.send(&shared, &uid, None);
                    }
                    Err(e) => tracing::warn!(error = %e, "watching this node's pods failed; retrying"),
                }
            }
            _ = relist.tick() => {
                workers.sweep();
                let current = match fingerprints(&shared.cri).await {
                    Ok(current) => current,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the runtime's pods");
                        continue;
                    }
                };
                for (uid, print) in &current {
                    if prints.get(uid) == Some(print) {
                        continue;
                    }
                    if !workers.poke(uid) && synced && !known.contains(uid) {
                        tracing::info!(uid = %uid, "removing the containers of a pod the API no longer has");
                        workers.send(&shared, uid, None);
                    }
                }
                prints = current;
            }
        }
    }
}
