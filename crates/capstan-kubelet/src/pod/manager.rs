//! The pods of this node: a watch of the pods bound to it (`spec.nodeName` field selector)
//! feeds one [`Worker`] per pod, and a relist of the runtime every second (upstream's PLEG)
//! wakes the worker of each pod whose sandboxes or containers changed. After the first list,
//! what the runtime holds for pods the API no longer has is torn down, so pods deleted while
//! the agent was away do not linger.
//!
//! A pod new to the node is first admitted ([`crate::pod::admission`]) against the node as a watch
//! of it last showed and the pods already admitted; one the node cannot run is failed
//! (`Pod was rejected: ...`, with an event) and never reaches a worker. The pods of the first
//! list are admitted oldest first, as upstream does on start; a pod the node already started
//! (it has a start time) is not questioned again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_client::events::EventType;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio::sync::watch;

use crate::pod::admission::{self, Rejection};
use crate::pod::inspect::fingerprints;
use crate::pod::worker::{Shared, Worker};

/// How often the runtime is relisted.
const RELIST: Duration = Duration::from_secs(1);

/// The pods bound to this node as the agent last received them from the API (upstream's pod
/// manager), admitted or not, until the API deletes them: what the kubelet API's `/pods`
/// lists.
#[derive(Clone, Debug, Default)]
pub struct KnownPods(Arc<std::sync::RwLock<HashMap<String, Arc<Pod>>>>);

impl KnownPods {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Pod>>> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `pod` as the API has it now.
    fn put(&self, pod: &Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.write().insert(uid, pod.clone());
    }

    /// Forgets the pod with `uid`.
    fn remove(&self, uid: &str) {
        self.write().remove(uid);
    }

    /// Forgets every pod whose UID is not in `uids`.
    fn retain(&self, uids: &HashSet<String>) {
        self.write().retain(|uid, _| uids.contains(uid));
    }

    /// The pods, by namespace and name.
    pub fn list(&self) -> Vec<Arc<Pod>> {
        let pods = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut list: Vec<Arc<Pod>> = pods.values().cloned().collect();
        list.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        list
    }
}

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

    /// Whether a worker runs for `uid`.
    fn running(&self, uid: &str) -> bool {
        self.workers
            .get(uid)
            .is_some_and(|handle| !handle.task.is_finished())
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

/// Whether `pod` has reached a terminal phase.
fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// What admission keeps: the node as last seen, the pods it let in, the ones it turned away.
#[derive(Default)]
struct Admission {
    node: Option<Arc<Node>>,
    admitted: HashMap<String, Arc<Pod>>,
    rejected: HashSet<String>,
}

/// What becomes of a pod the watch reported.
enum Decision {
    /// Its worker gets it.
    Run,
    /// It is turned away.
    Reject(Rejection),
    /// Nothing: it was turned away before, or it finished without ever running here.
    Ignore,
}

impl Admission {
    /// Whether a pod new to the node must pass admission (it never ran here and may still).
    fn needs_check(&self, uid: &str, pod: &Pod) -> bool {
        !self.admitted.contains_key(uid)
            && !finished(pod)
            && pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .is_none()
    }

    /// Decides about `pod` (with `uid`); `running` says whether a worker has it already.
    fn decide(&mut self, uid: &str, pod: &Arc<Pod>, running: bool) -> Decision {
        if self.rejected.contains(uid) {
            return Decision::Ignore;
        }
        if !running && !self.admitted.contains_key(uid) && finished(pod) {
            let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref());
            if started.is_none() {
                return Decision::Ignore;
            }
        }
        if !running && self.needs_check(uid, pod) {
            let others: Vec<Arc<Pod>> = self
                .admitted
                .values()
                .filter(|p| !finished(p))
                .cloned()
                .collect();
            if let Some(node) = &self.node
                && let Err(rejection) = admission::admit(node, pod, &others)
            {
                self.rejected.insert(uid.to_owned());
                return Decision::Reject(rejection);
            }
        }
        self.admitted.insert(uid.to_owned(), pod.clone());
        Decision::Run
    }

    /// Forgets a pod gone from the API.
    fn forget(&mut self, uid: &str) {
        self.admitted.remove(uid);
        self.rejected.remove(uid);
    }
}

/// Fails a pod the node turned away, as upstream's kubelet does: phase Failed with the
/// rejection's reason, and a warning event.
fn reject(shared: &Arc<Shared>, pod: Arc<Pod>, rejection: Rejection) {
    tracing::warn!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), reason = %rejection.reason, message = %rejection.message, "pod rejected");
    shared.events.pod(
        &pod,
        EventType::Warning,
        &rejection.reason,
        rejection.message.clone(),
    );
    let client = shared.client.clone();
    tokio::spawn(async move {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let patch = json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {
                "phase": "Failed",
                "reason": rejection.reason,
                "message": format!("Pod was rejected: {}", rejection.message),
            }
        });
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        for _ in 0..5 {
            match pods
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return,
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e, "cannot fail a rejected pod");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

/// Hands a pod the watch reported to its worker, once admission lets it in.
fn deliver(
    shared: &Arc<Shared>,
    workers: &mut Workers,
    admission: &mut Admission,
    known: &mut HashSet<String>,
    pod: Arc<Pod>,
) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    match admission.decide(&uid, &pod, workers.running(&uid)) {
        Decision::Run => {
            known.insert(uid.clone());
            workers.send(shared, &uid, Some(pod));
        }
        Decision::Reject(rejection) => reject(shared, pod, rejection),
        Decision::Ignore => {}
    }
}

/// Runs the node's pods until dropped; `node` follows this node's Node object; `known` is kept
/// to what the API has bound to the node.
pub async fn run(
    shared: Arc<Shared>,
    mut node: watch::Receiver<Option<Arc<Node>>>,
    known_pods: KnownPods,
) {
    // Admission needs the node: wait for it before looking at any pod.
    let mut admission = Admission::default();
    loop {
        admission.node = node.borrow_and_update().clone();
        if admission.node.is_some() {
            break;
        }
        if node.changed().await.is_err() {
            return;
        }
    }
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config =
        capstan_client::watcher_config().fields(&format!("spec.nodeName={}", shared.node_name));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut workers = Workers::default();
    // New pods of the first list wait for its end, to be admitted oldest first.
    let mut held: Vec<Arc<Pod>> = Vec::new();
    // The pods the API has for this node (by UID), once the first list is complete.
    let mut known: HashSet<String> = HashSet::new();
    let mut listing: HashSet<String> = HashSet::new();
    let mut synced = false;
    let mut prints: HashMap<String, u64> = HashMap::new();
    let mut relist = tokio::time::interval(RELIST);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = node.changed() => {
                if changed.is_ok() {
                    admission.node = node.borrow_and_update().clone();
                }
            }
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(watcher::Event::Init) => {
                        listing.clear();
                        held.clear();
                    }
                    Ok(watcher::Event::InitApply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        listing.insert(uid.clone());
                        let pod = Arc::new(pod);
                        known_pods.put(&pod);
                        if !workers.running(&uid) && admission.needs_check(&uid, &pod) {
                            held.push(pod);
                        } else {
                            deliver(&shared, &mut workers, &mut admission, &mut known, pod);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        known_pods.retain(&listing);
                        // Pods deleted while the watch was away.
                        for uid in known.difference(&listing).cloned().collect::<Vec<_>>() {
                            known.remove(&uid);
                            admission.forget(&uid);
                            workers.send(&shared, &uid, None);
                        }
                        // Rejected pods deleted meanwhile are forgotten too.
                        admission.rejected.retain(|uid| listing.contains(uid));
                        held.sort_by(|a, b| {
                            a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp)
                        });
                        for pod in held.drain(..) {
                            deliver(&shared, &mut workers, &mut admission, &mut known, pod);
                        }
                        synced = true;
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        let pod = Arc::new(pod);
                        known_pods.put(&pod);
                        deliver(&shared, &mut workers, &mut admission, &mut known, pod);
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        known_pods.remove(&uid);
                        known.remove(&uid);
                        admission.forget(&uid);
                        if workers.running(&uid) {
                            workers.send(&shared, &uid, None);
                        }
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
                    if prints.get(uid) != Some(print) && workers.poke(uid) {
                        continue;
                    }
                    // Whatever the runtime holds for a pod the API no longer has goes, changed
                    // or not: a pod deleted while the agent was down never changes again.
                    if synced && !known.contains(uid) && !workers.running(uid) {
                        tracing::info!(uid = %uid, "removing the containers of a pod the API no longer has");
                        workers.send(&shared, uid, None);
                    }
                }
                prints = current;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: &str, name: &str, uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn names(known: &KnownPods) -> Vec<String> {
        known
            .list()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn known_pods_follow_what_the_api_binds_to_the_node() {
        let known = KnownPods::default();
        known.put(&pod("b", "web", "1"));
        known.put(&pod("a", "db", "2"));
        known.put(&pod("a", "cache", "3"));
        assert_eq!(names(&known), ["cache", "db", "web"]);
        // A newer copy replaces the old one.
        let mut renamed = (*pod("a", "db", "2")).clone();
        renamed.metadata.labels = Some([("v".to_owned(), "2".to_owned())].into());
        known.put(&Arc::new(renamed));
        assert_eq!(known.list().len(), 3);
        known.remove("3");
        assert_eq!(names(&known), ["db", "web"]);
        known.retain(&HashSet::from(["1".to_owned()]));
        assert_eq!(names(&known), ["web"]);
    }
}
