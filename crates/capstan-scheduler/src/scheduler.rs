//! The scheduler itself: watches feed one loop, which keeps the snapshot and the queue and
//! runs one scheduling cycle at a time (as upstream's `scheduleOne`); bindings (with the pod's
//! volumes bound first), status updates, preemption deletes and events go to the API in the
//! background.
//!
//! The loop runs on its own thread: a cycle is pure computation over the snapshot, and the
//! loop is the snapshot's only writer, so no lock is taken.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
    ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use rand::Rng;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::framework::{ClusterEvent, Outcome, PostFilterResult};
use crate::plugins::volume_binding::{self, Decisions};
use crate::prebind::{self, PreBindError};
use crate::queue::{QueuedPod, SchedulingQueue};
use crate::snapshot::{Labels, PodInfo, Snapshot, WorkloadKind, WorkloadSelector};
use capstan_client::events::{EventRecorder, EventType};
use capstan_client::informer::{Change, Informer, Informers, SharedInformers};

/// How many bindings may be in flight at once.
const BIND_CONCURRENCY: usize = 64;
/// How often the loop wakes without input (to flush long-unschedulable pods).
const TICK: Duration = Duration::from_secs(1);

/// What the loop is told.
#[derive(Debug)]
enum Input {
    Pod(Arc<Pod>),
    PodGone(Arc<Pod>),
    Node(Arc<Node>),
    NodeGone(String),
    Namespace(String, Labels),
    NamespaceGone(String),
    Pdb(Arc<PodDisruptionBudget>),
    PdbGone(String, String),
    Pvc(Arc<PersistentVolumeClaim>),
    PvcGone(String, String),
    Pv(Arc<PersistentVolume>),
    PvGone(String),
    StorageClass(Arc<StorageClass>),
    StorageClassGone(String),
    /// A Service's, ReplicationController's, ReplicaSet's or StatefulSet's selector (`None`:
    /// gone), for the default spread constraints.
    Workload(WorkloadKind, String, String, Option<WorkloadSelector>),
    /// A binding finished.
    Bound {
        pod: Box<QueuedPod>,
        node: String,
        /// What VolumeBinding decided and assumed for the pod's volumes, if anything.
        volumes: Option<Box<Decisions>>,
        result: Result<(), BindFailure>,
    },
    Stop,
}

#[derive(Debug)]
enum BindFailure {
    /// The pod is gone or already bound: nothing to retry.
    Moot,
    /// Worth retrying, for this reason (the `FailedScheduling` event's message).
    Retry(String),
}

/// The running scheduler; dropping it stops it.
#[derive(Debug)]
pub struct Scheduler {
    tx: mpsc::Sender<Input>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The informers it reads, shared with the process's controllers.
    _informers: Informers,
}

impl Scheduler {
    /// Starts watching and scheduling with `client`; must be called within a Tokio runtime.
    /// Pods and nodes come from the process's shared informers (`informers`): the controller
    /// manager of the same process reads the same watches and caches, so each pod is decoded
    /// and kept once, and the scheduler's snapshot holds the cache's objects.
    pub fn start(
        client: Client,
        config: Config,
        instance: String,
        informers: &SharedInformers,
    ) -> Scheduler {
        let (tx, rx) = mpsc::channel();
        let mut informers = informers.view();
        follow_pods(informers.get::<Pod>(), tx.clone());
        follow(&mut informers, &tx, Input::Node, |n: &Node| {
            Input::NodeGone(name_of(&n.metadata))
        });
        follow(
            &mut informers,
            &tx,
            |ns: Arc<Namespace>| {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                Input::Namespace(name_of(&ns.metadata), labels)
            },
            |ns| Input::NamespaceGone(name_of(&ns.metadata)),
        );
        follow(
            &mut informers,
            &tx,
            Input::Pdb,
            |p: &PodDisruptionBudget| {
                Input::PdbGone(namespace_of(&p.metadata), name_of(&p.metadata))
            },
        );
        follow(
            &mut informers,
            &tx,
            Input::Pvc,
            |p: &PersistentVolumeClaim| {
                Input::PvcGone(namespace_of(&p.metadata), name_of(&p.metadata))
            },
        );
        follow(&mut informers, &tx, Input::Pv, |p: &PersistentVolume| {
            Input::PvGone(name_of(&p.metadata))
        });
        follow(
            &mut informers,
            &tx,
            Input::StorageClass,
            |c: &StorageClass| Input::StorageClassGone(name_of(&c.metadata)),
        );
        follow(
            &mut informers,
            &tx,
            |s: Arc<Service>| {
                let selector = s.spec.as_ref().and_then(|spec| spec.selector.clone());
                let selector = WorkloadSelector::Labels(selector.unwrap_or_default());
                workload(WorkloadKind::Service, &s.metadata, Some(selector))
            },
            |s| workload(WorkloadKind::Service, &s.metadata, None),
        );
        follow(
            &mut informers,
            &tx,
            |rc: Arc<ReplicationController>| {
                let selector = rc.spec.as_ref().and_then(|spec| spec.selector.clone());
                let selector = WorkloadSelector::Labels(selector.unwrap_or_default());
                workload(
                    WorkloadKind::ReplicationController,
                    &rc.metadata,
                    Some(selector),
                )
            },
            |rc| workload(WorkloadKind::ReplicationController, &rc.metadata, None),
        );
        follow(
            &mut informers,
            &tx,
            |rs: Arc<ReplicaSet>| {
                let selector = rs.spec.as_ref().map(|spec| parsed(&spec.selector));
                workload(WorkloadKind::ReplicaSet, &rs.metadata, selector)
            },
            |rs| workload(WorkloadKind::ReplicaSet, &rs.metadata, None),
        );
        follow(
            &mut informers,
            &tx,
            |ss: Arc<StatefulSet>| {
                let selector = ss.spec.as_ref().map(|spec| parsed(&spec.selector));
                workload(WorkloadKind::StatefulSet, &ss.metadata, selector)
            },
            |ss| workload(WorkloadKind::StatefulSet, &ss.metadata, None),
        );
        informers.start(&client);
        let runtime = tokio::runtime::Handle::current();
        let recorder = EventRecorder::start(client.clone(), "default-scheduler", &instance);
        let loop_tx = tx.clone();
        let thread = std::thread::Builder::new()
            .name("scheduler".to_owned())
            .spawn(move || {
                let mut state = Loop {
                    config,
                    snapshot: Snapshot::new(),
                    queue: SchedulingQueue::new(),
                    next_start: 0,
                    client,
                    runtime,
                    tx: loop_tx,
                    binds: Arc::new(Semaphore::new(BIND_CONCURRENCY)),
                    recorder,
                    conditions: HashMap::new(),
                    rng: rand::rng(),
                    binding_since: HashMap::new(),
                    gated: HashSet::new(),
                };
                state.run(rx);
            })
            .ok();
        Scheduler {
            tx,
            thread,
            _informers: informers,
        }
    }

    /// Stops watching and scheduling, and waits for the loop to end.
    pub fn stop(mut self) {
        self.halt();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn halt(&mut self) {
        let _ = self.tx.send(Input::Stop);
    }
}

impl Drop for Scheduler {
    /// Stops the scheduler without waiting for its loop to finish the cycle it is in.
    fn drop(&mut self) {
        self.halt();
    }
}

fn workload(kind: WorkloadKind, meta: &ObjectMeta, selector: Option<WorkloadSelector>) -> Input {
    Input::Workload(kind, namespace_of(meta), name_of(meta), selector)
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn namespace_of(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

fn parsed(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> WorkloadSelector {
    WorkloadSelector::Selector(capstan_api::selector::LabelSelector::from_api(Some(selector)).ok())
}

/// The object as the informer's cache holds it (shared with the cache, and with the controller
/// manager's reads of it), or a copy if it is no longer there.
fn cached<K>(store: &Store<K>, object: &K) -> Arc<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store
        .get(&ObjectRef::from_obj(object))
        .unwrap_or_else(|| Arc::new(object.clone()))
}

/// Feeds the loop what the shared informer of `K` sees: `applied` is given the cached object,
/// `gone` the last state of a deleted one (after a relist, also of one deleted meanwhile).
fn follow<K>(
    informers: &mut Informers,
    tx: &mpsc::Sender<Input>,
    applied: fn(Arc<K>) -> Input,
    gone: fn(&K) -> Input,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let informer = informers.get::<K>();
    let store = informer.store();
    let tx = tx.clone();
    informer.on_change(move |change| {
        let input = match change {
            Change::Applied { new, .. } => applied(cached(&store, new)),
            Change::Deleted(object) => gone(object),
        };
        let _ = tx.send(input);
    });
}

/// Feeds the loop the pods the shared informer sees, as the cache holds them (one object for
/// the cache and the snapshot). Pods that have finished are left out, as upstream's scheduler
/// leaves them out of its pod informer with a field selector: a pod that succeeds or fails is
/// reported once (so its resources are freed on its node), then never held or listed again.
fn follow_pods(informer: Informer<Pod>, tx: mpsc::Sender<Input>) {
    let store = informer.store();
    informer.on_change(move |change| {
        let input = match change {
            Change::Applied { old, new } => {
                let was_terminal = old.as_deref().is_none_or(is_terminal);
                if is_terminal(new) && was_terminal {
                    return;
                }
                Input::Pod(cached(&store, new))
            }
            Change::Deleted(pod) => Input::PodGone(Arc::new(identity_of(pod))),
        };
        let _ = tx.send(input);
    });
}

/// A pod reduced to its namespace, name and uid: what the loop reads of a pod that is gone.
fn identity_of(pod: &Pod) -> Pod {
    let mut gone = Pod::default();
    gone.metadata.name = pod.metadata.name.clone();
    gone.metadata.namespace = pod.metadata.namespace.clone();
    gone.metadata.uid = pod.metadata.uid.clone();
    gone
}

struct Loop {
    config: Config,
    snapshot: Snapshot,
    queue: SchedulingQueue,
    next_start: usize,
    client: Client,
    runtime: tokio::runtime::Handle,
    tx: mpsc::Sender<Input>,
    binds: Arc<Semaphore>,
    recorder: EventRecorder,
    /// The last PodScheduled=False message written per pod uid (not rewritten when the same).
    conditions: HashMap<String, String>,
    rng: rand::rngs::ThreadRng,
    /// When each pod's attempt whose binding is in flight began, and its profile (for the
    /// attempt metrics, which count binding as upstream's do).
    binding_since: HashMap<String, (Instant, String)>,
    /// The uids of pods this scheduler is responsible for that wait on scheduling gates (never
    /// queued; counted as upstream's `gated` pending pods).
    gated: HashSet<String>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether a node changed in a way that may make a pod fit (labels, taints, allocatable,
/// schedulability, conditions), as upstream's node update events distinguish.
fn node_changed(old: &Node, new: &Node) -> bool {
    let status = |n: &Node| {
        n.status.as_ref().map(|s| {
            (
                s.allocatable.clone(),
                s.conditions.as_ref().map(|c| {
                    c.iter()
                        .map(|c| (c.type_.clone(), c.status.clone()))
                        .collect::<Vec<_>>()
                }),
            )
        })
    };
    old.metadata.labels != new.metadata.labels
        || old.spec.as_ref().map(|s| (&s.taints, s.unschedulable))
            != new.spec.as_ref().map(|s| (&s.taints, s.unschedulable))
        || status(old) != status(new)
}

impl Loop {
    fn run(&mut self, rx: mpsc::Receiver<Input>) {
        let mut last_flush = Instant::now();
        crate::metrics::pending(0, 0, 0, 0);
        loop {
            // Apply everything that has arrived before the next cycle.
            loop {
                match rx.try_recv() {
                    Ok(Input::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                    Ok(input) => self.apply(input),
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let now = Instant::now();
            if now.duration_since(last_flush) >= TICK {
                self.queue.flush_unschedulable(now);
                last_flush = now;
                let (active, backoff, unschedulable) = self.queue.counts();
                crate::metrics::pending(active, backoff, unschedulable, self.gated.len());
            }
            if let Some(pod) = self.queue.pop(now) {
                self.schedule_one(pod);
                continue;
            }
            let wait = self
                .queue
                .next_backoff_expiry()
                .map(|at| at.saturating_duration_since(now))
                .unwrap_or(TICK)
                .min(TICK);
            match rx.recv_timeout(wait) {
                Ok(Input::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Ok(input) => self.apply(input),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn responsible_for(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME);
        self.config.profile(name).is_some()
    }

    fn event(&mut self, event: ClusterEvent) {
        let profiles = &self.config.profiles;
        let interested = |plugin: &'static str, event: ClusterEvent| {
            profiles.iter().any(|p| {
                p.filter
                    .iter()
                    .chain(p.pre_filter.iter())
                    .any(|f| f.name() == plugin && f.events().contains(&event))
            })
        };
        self.queue.on_event(event, interested, Instant::now());
    }

    fn apply(&mut self, input: Input) {
        match input {
            Input::Pod(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                self.gated.remove(&uid);
                if let Some(node) = node_name(&pod) {
                    self.queue.delete(&uid);
                    self.conditions.remove(&uid);
                    self.snapshot.unnominate(&uid);
                    if is_terminal(&pod) {
                        if self.snapshot.is_placed(&uid) {
                            self.snapshot.remove_pod(&uid);
                            self.event(ClusterEvent::AssignedPodDelete);
                        }
                        return;
                    }
                    let was_placed =
                        self.snapshot.is_placed(&uid) && !self.snapshot.is_assumed(&uid);
                    let node = node.to_owned();
                    self.snapshot.upsert_bound_pod(pod, &node);
                    if !was_placed {
                        self.event(ClusterEvent::AssignedPodAdd);
                    }
                    return;
                }
                if self.snapshot.is_assumed(&uid) {
                    // Our binding is in flight; this is an older view of the pod.
                    return;
                }
                let gated = pod
                    .spec
                    .as_ref()
                    .is_some_and(|s| s.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()));
                let waits = pod.metadata.deletion_timestamp.is_none() && !is_terminal(&pod);
                if gated && waits && self.responsible_for(&pod) {
                    self.gated.insert(uid.clone());
                }
                if !waits || gated || !self.responsible_for(&pod) {
                    self.queue.delete(&uid);
                    self.snapshot.unnominate(&uid);
                    return;
                }
                let info = Arc::new(PodInfo::new(pod));
                match info.nominated_node().map(str::to_owned) {
                    Some(node) => self.snapshot.nominate(info.clone(), &node),
                    None => self.snapshot.unnominate(&uid),
                }
                self.queue.add(info, Instant::now());
            }
            Input::PodGone(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                self.gated.remove(&uid);
                self.queue.delete(&uid);
                self.snapshot.unnominate(&uid);
                self.conditions.remove(&uid);
                if self.snapshot.is_placed(&uid) {
                    self.snapshot.remove_pod(&uid);
                    self.event(ClusterEvent::AssignedPodDelete);
                }
            }
            Input::Node(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let event = match self.snapshot.node(&name).and_then(|n| n.node.clone()) {
                    None => Some(ClusterEvent::NodeAdd),
                    Some(old) if node_changed(&old, &node) => Some(ClusterEvent::NodeUpdate),
                    Some(_) => None,
                };
                self.snapshot.upsert_node(node);
                if let Some(event) = event {
                    self.event(event);
                }
            }
            Input::NodeGone(name) => self.snapshot.remove_node(&name),
            Input::Namespace(name, labels) => {
                if self.snapshot.namespace_labels(&name) != Some(&labels) {
                    self.snapshot.upsert_namespace(&name, labels);
                    self.event(ClusterEvent::NamespaceChange);
                }
            }
            Input::NamespaceGone(name) => self.snapshot.remove_namespace(&name),
            Input::Pdb(pdb) => self.snapshot.upsert_pdb(pdb),
            Input::PdbGone(ns, name) => self.snapshot.remove_pdb(&ns, &name),
            Input::Pvc(pvc) => {
                self.snapshot.upsert_pvc(pvc);
                self.event(ClusterEvent::Other);
            }
            Input::PvcGone(ns, name) => self.snapshot.remove_pvc(&ns, &name),
            Input::Pv(pv) => {
                self.snapshot.upsert_pv(pv);
                self.event(ClusterEvent::Other);
            }
            Input::PvGone(name) => self.snapshot.remove_pv(&name),
            Input::StorageClass(class) => {
                self.snapshot.upsert_storage_class(class);
                self.event(ClusterEvent::Other);
            }
            Input::StorageClassGone(name) => self.snapshot.remove_storage_class(&name),
            Input::Workload(kind, ns, name, selector) => {
                self.snapshot.set_workload(kind, &ns, &name, selector);
            }
            Input::Bound {
                pod,
                node,
                volumes,
                result,
            } => {
                if let Some((started, profile)) = self.binding_since.remove(pod.uid()) {
                    let outcome = match &result {
                        Ok(()) => crate::metrics::Outcome::Scheduled,
                        Err(_) => crate::metrics::Outcome::Error,
                    };
                    crate::metrics::attempt(&profile, outcome, started.elapsed());
                }
                self.bound(*pod, node, volumes, result);
            }
            Input::Stop => {}
        }
    }

    /// A binding finished: the `Scheduled` event, or the pod back in the queue.
    fn bound(
        &mut self,
        pod: QueuedPod,
        node: String,
        volumes: Option<Box<Decisions>>,
        result: Result<(), BindFailure>,
    ) {
        match result {
            Ok(()) => {
                crate::metrics::scheduled_after(pod.attempts.max(1));
                let info = &pod.info;
                self.recorder.record(
                    pod_reference(&info.pod),
                    EventType::Normal,
                    "Scheduled",
                    format!(
                        "Successfully assigned {}/{} to {node}",
                        info.namespace(),
                        info.name()
                    ),
                );
            }
            Err(failure) => {
                let uid = pod.uid().to_owned();
                if self.snapshot.is_assumed(&uid) {
                    self.snapshot.remove_pod(&uid);
                }
                if let Some(decisions) = volumes {
                    // The volumes it held are free again for other pods.
                    volume_binding::revert(&mut self.snapshot, &decisions);
                    self.event(ClusterEvent::Other);
                }
                if let BindFailure::Retry(message) = failure {
                    tracing::warn!(pod = %pod.info.name(), namespace = %pod.info.namespace(), %node, error = %message, "binding failed; retrying");
                    self.recorder.record(
                        pod_reference(&pod.info.pod),
                        EventType::Warning,
                        "FailedScheduling",
                        message,
                    );
                    self.queue.readd_after_failure(pod, Instant::now());
                }
                self.event(ClusterEvent::AssignedPodDelete);
            }
        }
    }

    fn schedule_one(&mut self, queued: QueuedPod) {
        let started = Instant::now();
        let info = queued.info.clone();
        let scheduler_name = info
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| crate::config::DEFAULT_SCHEDULER_NAME.to_owned());
        let Some(profile) = self.config.profile(&scheduler_name) else {
            self.queue.delete(queued.uid());
            return;
        };
        let binder = profile
            .volume_bind_timeout
            .map(|bind_timeout| volume_binding::VolumeBinding { bind_timeout });
        let rng = &mut self.rng;
        let mut pick = |n: usize| if n <= 1 { 0 } else { rng.random_range(0..n) };
        let outcome = profile.schedule(&info, &self.snapshot, &mut self.next_start, &mut pick);
        let profile_name = scheduler_name;
        match outcome {
            Outcome::Suggested { node, .. } => {
                let volumes = match binder
                    .map(|plugin| plugin.reserve(&info, &mut self.snapshot, &node))
                    .transpose()
                {
                    Ok(volumes) => volumes.flatten(),
                    Err(message) => {
                        let message = format!(
                            "running Reserve plugin {:?}: {message}",
                            volume_binding::NAME
                        );
                        crate::metrics::attempt(
                            &profile_name,
                            crate::metrics::Outcome::Error,
                            started.elapsed(),
                        );
                        self.scheduling_error(&queued, &info, message);
                        return;
                    }
                };
                self.binding_since
                    .insert(queued.uid().to_owned(), (started, profile_name));
                self.snapshot.assume(info.clone(), &node);
                self.snapshot.unnominate(info.uid());
                self.queue.done(queued.uid());
                self.bind(queued, node, volumes);
            }
            Outcome::Unschedulable {
                error,
                rejected_by,
                preemption,
            } => {
                let message = error.to_string();
                tracing::debug!(pod = %info.name(), namespace = %info.namespace(), %message, "unschedulable");
                let nominated = preemption.as_ref().and_then(|p| p.nominated_node.clone());
                crate::metrics::attempt(
                    &profile_name,
                    crate::metrics::Outcome::Unschedulable,
                    started.elapsed(),
                );
                if let Some(result) = preemption {
                    crate::metrics::preemption_attempt();
                    self.preempt(&info, result);
                }
                self.queue
                    .requeue_unschedulable(queued.uid(), rejected_by, Instant::now());
                self.report_unschedulable(&info, message, nominated);
            }
            Outcome::Error(message) => {
                crate::metrics::attempt(
                    &profile_name,
                    crate::metrics::Outcome::Error,
                    started.elapsed(),
                );
                self.scheduling_error(&queued, &info, message);
            }
        }
    }

    /// A cycle failed for a reason other than fit: the pod is retried after a backoff.
    fn scheduling_error(&mut self, queued: &QueuedPod, info: &PodInfo, message: String) {
        tracing::warn!(pod = %info.name(), namespace = %info.namespace(), error = %message, "scheduling failed");
        self.queue.requeue_error(queued.uid(), Instant::now());
        self.report_unschedulable(info, message, None);
    }

    /// Binds the pod to the node in the background: first its volumes (VolumeBinding's
    /// PreBind, which may wait minutes for them and holds no bind slot meanwhile), then the pod.
    fn bind(&mut self, pod: QueuedPod, node: String, volumes: Option<Decisions>) {
        let client = self.client.clone();
        let tx = self.tx.clone();
        let binds = self.binds.clone();
        self.runtime.spawn(async move {
            let result = match &volumes {
                Some(decisions) => prebind::bind_volumes(&client, &pod.info, decisions).await,
                None => Ok(()),
            };
            let result = match result {
                Ok(()) => post_binding(&client, &binds, &pod.info, &node).await,
                Err(PreBindError::PodGone) => Err(BindFailure::Moot),
                Err(PreBindError::Failed(message)) => Err(BindFailure::Retry(format!(
                    "running PreBind plugin {:?}: {message}",
                    volume_binding::NAME
                ))),
            };
            let _ = tx.send(Input::Bound {
                pod: Box::new(pod),
                node,
                volumes: volumes.map(Box::new),
                result,
            });
        });
    }

    /// Writes the `FailedScheduling` event and, when it changed, the `PodScheduled=False`
    /// condition (with the nominated node, when preemption chose one).
    fn report_unschedulable(&mut self, info: &PodInfo, message: String, nominated: Option<String>) {
        self.recorder.record(
            pod_reference(&info.pod),
            EventType::Warning,
            "FailedScheduling",
            message.clone(),
        );
        let uid = info.uid().to_owned();
        let current = info.pod.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
                .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
        });
        let unchanged = self.conditions.get(&uid) == Some(&message)
            || current
                .as_ref()
                .is_some_and(|(s, m)| s == "False" && *m == message);
        if unchanged && nominated.is_none() {
            return;
        }
        self.conditions.insert(uid, message.clone());
        let transitioned = current.as_ref().is_none_or(|(s, _)| s != "False");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), info.namespace());
        let name = info.name().to_owned();
        let now = capstan_client::events::now();
        let mut condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
        });
        if transitioned {
            condition["lastTransitionTime"] = json!(now);
        }
        let mut status = json!({"conditions": [condition]});
        if let Some(node) = nominated {
            status["nominatedNodeName"] = json!(node);
        }
        let patch = json!({"status": status});
        self.runtime.spawn(async move {
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "could not update PodScheduled");
            }
        });
    }

    /// Evicts preemption victims (a delete each, as upstream does) with a `Preempted` event,
    /// nominates the preemptor to the node, and takes the node's nomination from pods of
    /// lower priority nominated there (they would not fit beside the preemptor; upstream's
    /// prepareCandidate does the same).
    fn preempt(&mut self, preemptor: &Arc<PodInfo>, result: PostFilterResult) {
        let Some(node) = result.nominated_node else {
            return;
        };
        let lower: Vec<Arc<PodInfo>> = self
            .snapshot
            .nominated_for(&node, preemptor.uid(), i32::MIN)
            .filter(|p| p.priority() < preemptor.priority())
            .cloned()
            .collect();
        for pod in lower {
            self.snapshot.unnominate(pod.uid());
            let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
            let name = pod.name().to_owned();
            let patch = json!({"status": {"nominatedNodeName": null}});
            self.runtime.spawn(async move {
                if let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    tracing::debug!(pod = %name, error = %e, "could not clear nominatedNodeName");
                }
            });
        }
        self.snapshot.nominate(preemptor.clone(), &node);
        for victim in result.victims {
            self.recorder.record(
                pod_reference(&victim.pod),
                EventType::Normal,
                "Preempted",
                format!("Preempted by pod {} on node {node}", preemptor.uid()),
            );
            let api: Api<Pod> = Api::namespaced(self.client.clone(), victim.namespace());
            let name = victim.name().to_owned();
            let uid = victim.uid().to_owned();
            self.runtime.spawn(async move {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                if let Err(e) = api.delete(&name, &params).await {
                    tracing::debug!(pod = %name, error = %e, "could not delete preemption victim");
                }
            });
        }
    }
}

/// Posts the pod's Binding to `node` (upstream's DefaultBinder), holding one of the bind
/// slots while the request is in flight.
async fn post_binding(
    client: &Client,
    binds: &Semaphore,
    info: &PodInfo,
    node: &str,
) -> Result<(), BindFailure> {
    let _permit = binds.acquire().await;
    let api: Api<Pod> = Api::namespaced(client.clone(), info.namespace());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(info.name().to_owned()),
            namespace: Some(info.namespace().to_owned()),
            uid: Some(info.uid().to_owned()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".to_owned()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        },
    };
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            info.name(),
            &PostParams::default(),
            &binding,
        )
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Err(BindFailure::Moot)
        }
        Err(e) => Err(BindFailure::Retry(format!("Binding rejected: {e}"))),
    }
}

fn pod_reference(pod: &Pod) -> ObjectReference {
    capstan_client::events::object_reference(pod)
}
