//! The simulator at work: registration, one task per node for its lease and heartbeat, and one
//! pod loop that starts and finishes deleting the pods bound to simulated nodes. Every write
//! waits for a slot of one semaphore, so thousands of nodes never flood the API server.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::addresses::{self, PodIps};
use crate::objects::{self, node_name};
use crate::timing::{next_slot, spread_offset};
use crate::{SimConfig, SimError};

/// The field manager of every write.
const FIELD_MANAGER: &str = "capstan-sim";
/// How many times a registration write is tried while the API server answers with a transient
/// error.
const REGISTER_ATTEMPTS: u32 = 8;
/// The first and the longest wait between attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often the pod loop reports its counts when they changed.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The shared state of a running simulator.
pub(crate) struct Sim {
    config: SimConfig,
    client: kube::Client,
    nodes: Api<Node>,
    leases: Api<Lease>,
    writes: Semaphore,
    start: Instant,
    post: PostParams,
    patch: PatchParams,
}

/// A node that has registered.
#[derive(Debug)]
struct Registered {
    index: usize,
    name: String,
    uid: String,
    /// When its Ready condition became True.
    ready_since: Timestamp,
}

/// The API's HTTP status for an error, if the server answered.
fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether a write may succeed if tried again: the server was overloaded or unavailable, or
/// the connection failed.
fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempt.min(10))
        .min(MAX_BACKOFF)
}

/// Calls `call` until it succeeds, fails for good, or has failed transiently
/// [`REGISTER_ATTEMPTS`] times.
async fn retry<T, F, Fut>(what: &str, node: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(error) if is_transient(&error) && attempt + 1 < REGISTER_ATTEMPTS => {
                tracing::warn!(%node, %error, attempt, "{what} failed; retrying");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

impl Sim {
    pub(crate) fn new(client: kube::Client, config: SimConfig) -> Arc<Sim> {
        Arc::new(Sim {
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client.clone(), objects::LEASE_NAMESPACE),
            writes: Semaphore::new(config.concurrency),
            start: Instant::now(),
            post: post_params(),
            patch: patch_params(),
            client,
            config,
        })
    }

    /// Runs one API write in a slot of the write semaphore.
    async fn write<F: Future>(&self, write: F) -> F::Output {
        // The semaphore is never closed; were it, the write would just go unbounded.
        let _permit = self.writes.acquire().await.ok();
        write.await
    }

    /// Registers the nodes while the pod loop runs, then runs until an error.
    pub(crate) async fn run(self: Arc<Self>) -> Result<(), SimError> {
        // Dropping this future (on shutdown) aborts every node task.
        let mut node_tasks = JoinSet::new();
        let pods = self.clone().run_pods();
        tokio::pin!(pods);
        tokio::select! {
            result = &mut pods => return result,
            result = self.register_all(&mut node_tasks) => result?,
        }
        pods.await
    }

    async fn register_all(self: &Arc<Self>, node_tasks: &mut JoinSet<()>) -> Result<(), SimError> {
        let total = self.config.nodes;
        let began = Instant::now();
        let step = (total / 10).max(1);
        let mut registrations = stream::iter(0..total)
            .map(|index| {
                let sim = self.clone();
                async move { sim.register(index).await }
            })
            .buffer_unordered(self.config.concurrency);
        let mut done = 0;
        while let Some(registered) = registrations.try_next().await? {
            node_tasks.spawn(self.clone().keep_alive(registered));
            done += 1;
            if done % step == 0 || done == total {
                let seconds = began.elapsed().as_secs_f64();
                tracing::info!(
                    registered = done,
                    total,
                    seconds = format!("{seconds:.1}"),
                    per_second = format!("{:.0}", done as f64 / seconds.max(1e-3)),
                    "simulated nodes registered"
                );
            }
        }
        Ok(())
    }

    /// Registers node `index`: its Node (created, or taken over), its status, its Lease.
    #[tracing::instrument(level = "debug", skip(self), fields(node))]
    async fn register(self: Arc<Self>, index: usize) -> Result<Registered, SimError> {
        let name = node_name(&self.config.name_prefix, index);
        tracing::Span::current().record("node", name.as_str());
        let failed = |source| SimError::Register {
            node: name.clone(),
            source,
        };
        let now = objects::now();
        let desired = objects::node(&self.config, index, now);
        let created = retry("creating the node", &name, || {
            self.write(self.nodes.create(&self.post, &desired))
        })
        .await;
        let (node, status_kept) = match created {
            // Upstream keeps the status a node is created with; a server that drops it gets the
            // status through nodes/status below.
            Ok(node) => {
                let kept = objects::ready_since(&node).is_some();
                (node, kept)
            }
            Err(error) if code(&error) == Some(409) => {
                let patch = Patch::Merge(objects::node_takeover_patch(&self.config, &name));
                let node = retry("taking over the node", &name, || {
                    self.write(self.nodes.patch(&name, &self.patch, &patch))
                })
                .await
                .map_err(failed)?;
                tracing::debug!(node = %name, "took over an existing node");
                (node, false)
            }
            Err(error) => return Err(failed(error)),
        };
        let ready_since = objects::ready_since(&node).unwrap_or(now);
        if !status_kept {
            let status = Patch::Strategic(serde_json::json!({
                "status": objects::node_status(&self.config, index, now, ready_since),
            }));
            retry("writing the node status", &name, || {
                self.write(self.nodes.patch_status(&name, &self.patch, &status))
            })
            .await
            .map_err(failed)?;
        }
        let uid = node.metadata.uid.clone().unwrap_or_default();
        self.ensure_lease(&name, &uid).await.map_err(failed)?;
        tracing::debug!(
            node = %name,
            address = %addresses::node_ip(index),
            pod_cidr = %addresses::pod_cidr(self.config.pod_cidr_base, index),
            status_kept,
            "node registered"
        );
        Ok(Registered {
            index,
            name,
            uid,
            ready_since,
        })
    }

    /// Creates node `name`'s lease, or takes over the existing one.
    async fn ensure_lease(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let duration = self.config.lease_duration_seconds;
        let lease = objects::lease(name, uid, duration, objects::now());
        let created = retry("creating the lease", name, || {
            self.write(self.leases.create(&self.post, &lease))
        })
        .await;
        match created {
            Err(error) if code(&error) == Some(409) => {
                let patch = Patch::Merge(objects::lease_takeover_patch(
                    name,
                    uid,
                    duration,
                    objects::now(),
                ));
                retry("taking over the lease", name, || {
                    self.write(self.leases.patch(name, &self.patch, &patch))
                })
                .await
                .map(drop)
            }
            other => other.map(drop),
        }
    }

    /// Renews the node's lease and posts its conditions, each in the node's slot of its period,
    /// for as long as the simulator runs.
    async fn keep_alive(self: Arc<Self>, node: Registered) {
        let count = self.config.nodes;
        let lease_every = self.config.lease_interval;
        let status_every = self.config.status_report_interval;
        let lease_offset = spread_offset(node.index, count, lease_every);
        let status_offset = spread_offset(node.index, count, status_every);
        let next = |offset, every| self.start + next_slot(self.start.elapsed(), offset, every);
        let mut next_lease = next(lease_offset, lease_every);
        let mut next_status = next(status_offset, status_every);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_lease) => {
                    self.renew_lease(&node).await;
                    next_lease = next(lease_offset, lease_every);
                }
                () = tokio::time::sleep_until(next_status) => {
                    self.post_heartbeat(&node).await;
                    next_status = next(status_offset, status_every);
                }
            }
        }
    }

    async fn renew_lease(&self, node: &Registered) {
        let duration = self.config.lease_duration_seconds;
        let patch = objects::lease_renewal_patch(&node.name, duration, objects::now());
        let renewed = self
            .write(
                self.leases
                    .patch(&node.name, &self.patch, &Patch::Merge(&patch)),
            )
            .await;
        let result = match renewed {
            // Someone deleted the lease: make it again, as the kubelet's lease controller does.
            Err(error) if code(&error) == Some(404) => {
                self.ensure_lease(&node.name, &node.uid).await
            }
            other => other.map(drop),
        };
        if let Err(error) = result {
            tracing::warn!(node = %node.name, %error, "cannot renew the node lease");
        }
    }

    async fn post_heartbeat(&self, node: &Registered) {
        let patch = objects::node_heartbeat_patch(objects::now(), node.ready_since);
        let posted = self
            .write(
                self.nodes
                    .patch_status(&node.name, &self.patch, &Patch::Strategic(&patch)),
            )
            .await;
        if let Err(error) = posted {
            tracing::warn!(node = %node.name, %error, "cannot post the node status");
        }
    }

    /// Watches the pods bound to any node and acts on those of simulated nodes.
    async fn run_pods(self: Arc<Self>) -> Result<(), SimError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config = capstan_client::watcher_config().fields("spec.nodeName!=");
        let events = watcher(pods, config).default_backoff();
        tokio::pin!(events);
        let mut tracker = PodTracker::new(&self.config);
        let mut writes: JoinSet<Done> = JoinSet::new();
        let mut report = tokio::time::interval(REPORT_EVERY);
        let mut reported = (0, 0);
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else {
                        return Err(SimError::WatchEnded);
                    };
                    match event {
                        Ok(event) => {
                            for uid in tracker.observe(event) {
                                self.act(&mut tracker, &mut writes, &uid);
                            }
                        }
                        Err(error) => tracing::warn!(%error, "watching pods failed; retrying"),
                    }
                }
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    // A write task only ends by returning: it is never aborted while this loop runs.
                    if let Ok(done) = done {
                        let uid = done.uid.clone();
                        tracker.finish(done);
                        self.act(&mut tracker, &mut writes, &uid);
                    }
                }
                _ = report.tick() => {
                    if (tracker.started, tracker.deleted) != reported {
                        reported = (tracker.started, tracker.deleted);
                        tracing::info!(
                            pods = tracker.pods.len(),
                            addresses = tracker.ips.len(),
                            started = tracker.started,
                            deleted = tracker.deleted,
                            "simulated pods"
                        );
                    }
                }
            }
        }
    }

    /// Starts the write pod `uid` needs, if any.
    fn act(self: &Arc<Self>, tracker: &mut PodTracker, writes: &mut JoinSet<Done>, uid: &str) {
        let Some(action) = tracker.next_action(uid) else {
            return;
        };
        let sim = self.clone();
        writes.spawn(async move { sim.perform(action).await });
    }

    async fn perform(&self, action: Action) -> Done {
        let (namespace, name, uid, resource_version, attempt) = (
            action.namespace,
            action.name,
            action.uid,
            action.resource_version,
            action.attempt,
        );
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let started = action.start.is_some();
        let result = match &action.start {
            Some(patch) => self
                .write(pods.patch_status(&name, &self.patch, &Patch::Strategic(patch)))
                .await
                .map(drop),
            None => {
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                self.write(pods.delete(&name, &params)).await.map(drop)
            }
        };
        let outcome = match result {
            Ok(()) => {
                tracing::debug!(pod = %name, %namespace, %uid, started, "pod updated");
                Outcome::Done { started }
            }
            // The pod is gone, or was replaced by another of the same name.
            Err(error) if matches!(code(&error), Some(404 | 409)) => {
                tracing::debug!(pod = %name, %namespace, %uid, %error, "pod gone");
                Outcome::Settled
            }
            Err(error) if is_transient(&error) => {
                tracing::warn!(pod = %name, %namespace, %uid, %error, attempt, "pod update failed; retrying");
                tokio::time::sleep(backoff(attempt)).await;
                Outcome::Retry
            }
            Err(error) => {
                tracing::warn!(pod = %name, %namespace, %uid, %error, "pod update refused");
                Outcome::Settled
            }
        };
        Done {
            uid,
            resource_version,
            outcome,
        }
    }
}

/// A write one pod needs.
#[derive(Debug)]
struct Action {
    namespace: String,
    name: String,
    uid: String,
    /// The version of the pod the write was decided on.
    resource_version: String,
    /// How many times this write failed transiently before.
    attempt: u32,
    /// The status patch that starts the pod, or `None` to finish its deletion.
    start: Option<Value>,
}

/// How a pod write ended.
#[derive(Debug)]
enum Outcome {
    /// The write succeeded; `started` if it started the pod.
    Done { started: bool },
    /// Nothing more to do for this version of the pod (it is gone, or the write was refused).
    Settled,
    /// The write failed transiently; try again.
    Retry,
}

#[derive(Debug)]
struct Done {
    uid: String,
    resource_version: String,
    outcome: Outcome,
}

/// What the pod loop knows: the pods bound to simulated nodes, their addresses, and which
/// writes are under way or done. Level-triggered: whatever woke it, the pod's latest version
/// decides what to write.
#[derive(Debug)]
struct PodTracker {
    prefix: String,
    nodes: usize,
    /// By UID: the node index and the latest version of the pod.
    pods: HashMap<String, (usize, Pod)>,
    ips: PodIps,
    in_flight: HashSet<String>,
    /// By UID: the resourceVersion of the pod the last write that needs no repeat was decided on.
    settled: HashMap<String, String>,
    /// By UID: transient failures of the current write.
    attempts: HashMap<String, u32>,
    /// During a re-list, the UIDs listed so far.
    listing: Option<HashSet<String>>,
    started: u64,
    deleted: u64,
}

impl PodTracker {
    fn new(config: &SimConfig) -> Self {
        PodTracker {
            prefix: config.name_prefix.clone(),
            nodes: config.nodes,
            pods: HashMap::new(),
            ips: PodIps::new(config.pod_cidr_base),
            in_flight: HashSet::new(),
            settled: HashMap::new(),
            attempts: HashMap::new(),
            listing: None,
            started: 0,
            deleted: 0,
        }
    }

    /// Takes in a watch event; returns the UIDs of the pods to look at.
    fn observe(&mut self, event: watcher::Event<Pod>) -> Vec<String> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                Vec::new()
            }
            // While listing, only take note: the addresses of running pods must all be known
            // before any is handed out.
            watcher::Event::InitApply(pod) => {
                self.apply(pod);
                Vec::new()
            }
            watcher::Event::Apply(pod) => self.apply(pod).into_iter().collect(),
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.forget(uid);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                // Pods deleted while the watch was down are not listed again.
                if let Some(listed) = self.listing.take() {
                    let gone: Vec<String> = self
                        .pods
                        .keys()
                        .filter(|uid| !listed.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.forget(&uid);
                    }
                }
                self.pods.keys().cloned().collect()
            }
        }
    }

    fn apply(&mut self, pod: Pod) -> Option<String> {
        let uid = pod.metadata.uid.clone()?;
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let Some(index) = node.and_then(|n| objects::node_index(&self.prefix, self.nodes, n))
        else {
            // Not on a simulated node (a pod never moves, but be exact).
            self.forget(&uid);
            return None;
        };
        if let Some(listed) = &mut self.listing {
            listed.insert(uid.clone());
        }
        if objects::is_terminal(&pod) {
            self.ips.release(&uid);
        } else if !objects::host_network(&pod)
            && let Some(ip) = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        {
            // Running from before a restart of the simulator: keep its address taken.
            self.ips.record(&uid, index, ip);
        }
        self.pods.insert(uid.clone(), (index, pod));
        Some(uid)
    }

    fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.ips.release(uid);
        self.settled.remove(uid);
        self.attempts.remove(uid);
    }

    /// The write pod `uid` needs now, if any and if none is under way; marks it under way.
    fn next_action(&mut self, uid: &str) -> Option<Action> {
        if self.in_flight.contains(uid) {
            // Looked at again when the write in flight ends.
            return None;
        }
        let (index, pod) = self.pods.get(uid)?;
        let index = *index;
        let resource_version = pod.metadata.resource_version.clone().unwrap_or_default();
        if self.settled.get(uid) == Some(&resource_version) {
            return None;
        }
        let start = if pod.metadata.deletion_timestamp.is_some() {
            None
        } else if objects::needs_start(pod) {
            let host_ip = addresses::node_ip(index);
            let pod_ip = if objects::host_network(pod) {
                host_ip
            } else if let Some(ip) = self.ips.assign(uid, index) {
                ip
            } else {
                tracing::warn!(
                    pod = pod.metadata.name.as_deref().unwrap_or_default(),
                    node = index,
                    "no pod address left on the node"
                );
                self.settled.insert(uid.to_owned(), resource_version);
                return None;
            };
            Some(objects::pod_status_patch(
                pod,
                host_ip,
                pod_ip,
                objects::now(),
            ))
        } else {
            return None;
        };
        self.in_flight.insert(uid.to_owned());
        Some(Action {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_owned(),
            resource_version,
            attempt: self.attempts.get(uid).copied().unwrap_or(0),
            start,
        })
    }

    /// Records how a write ended.
    fn finish(&mut self, done: Done) {
        self.in_flight.remove(&done.uid);
        if !self.pods.contains_key(&done.uid) {
            return;
        }
        match done.outcome {
            Outcome::Retry => {
                *self.attempts.entry(done.uid).or_default() += 1;
            }
            outcome => {
                match outcome {
                    Outcome::Done { started: true } => self.started += 1,
                    Outcome::Done { started: false } => self.deleted += 1,
                    _ => {}
                }
                self.attempts.remove(&done.uid);
                self.settled.insert(done.uid, done.resource_version);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn tracker() -> PodTracker {
        PodTracker::new(&SimConfig {
            nodes: 3,
            ..SimConfig::default()
        })
    }

    fn pod(uid: &str, node: &str, rv: &str, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{uid}"), "namespace": "default", "uid": uid,
                         "resourceVersion": rv},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": status,
        }))
        .unwrap()
    }

    fn done(uid: &str, rv: &str, outcome: Outcome) -> Done {
        Done {
            uid: uid.to_owned(),
            resource_version: rv.to_owned(),
            outcome,
        }
    }

    #[test]
    fn a_pending_pod_is_started_once() {
        let mut t = tracker();
        let uids = t.observe(watcher::Event::Apply(pod(
            "a",
            "sim-node-1",
            "5",
            json!({"phase": "Pending"}),
        )));
        assert_eq!(uids, ["a"]);
        let action = t.next_action("a").unwrap();
        let patch = action.start.as_ref().unwrap();
        assert_eq!(patch["status"]["podIP"], "10.100.1.1");
        assert_eq!(patch["status"]["hostIP"], "10.0.0.2");
        assert_eq!(action.namespace, "default");
        // Under way: nothing more.
        assert!(t.next_action("a").is_none());
        t.finish(done("a", "5", Outcome::Done { started: true }));
        assert_eq!(t.started, 1);
        // The same version again (the watch has not caught up): nothing.
        assert!(t.next_action("a").is_none());
        // The version the patch made: running, nothing to do.
        t.observe(watcher::Event::Apply(pod(
            "a",
            "sim-node-1",
            "6",
            json!({"phase": "Running", "podIP": "10.100.1.1"}),
        )));
        assert!(t.next_action("a").is_none());
    }

    #[test]
    fn pods_elsewhere_are_ignored() {
        let mut t = tracker();
        for node in ["real-node", "sim-node-3", "sim-node-01"] {
            let uids = t.observe(watcher::Event::Apply(pod("x", node, "1", json!({}))));
            assert!(uids.is_empty(), "{node}");
        }
        assert!(t.pods.is_empty());
    }

    #[test]
    fn a_pod_being_deleted_is_deleted_and_its_address_freed() {
        let mut t = tracker();
        t.observe(watcher::Event::Apply(pod(
            "a",
            "sim-node-0",
            "1",
            json!({}),
        )));
        t.next_action("a").unwrap();
        t.finish(done("a", "1", Outcome::Done { started: true }));
        let mut deleting = pod(
            "a",
            "sim-node-0",
            "3",
            json!({"phase": "Running", "podIP": "10.100.0.1"}),
        );
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        t.observe(watcher::Event::Apply(deleting.clone()));
        let action = t.next_action("a").unwrap();
        assert!(action.start.is_none());
        assert_eq!(action.uid, "a");
        t.finish(done("a", "3", Outcome::Done { started: false }));
        assert_eq!(t.deleted, 1);
        t.observe(watcher::Event::Delete(deleting));
        assert!(t.pods.is_empty());
        assert_eq!(t.ips.len(), 0);
        // The address goes to the next pod.
        t.observe(watcher::Event::Apply(pod(
            "b",
            "sim-node-0",
            "4",
            json!({}),
        )));
        let action = t.next_action("b").unwrap();
        assert_eq!(action.start.unwrap()["status"]["podIP"], "10.100.0.1");
    }

    #[test]
    fn a_transient_failure_is_retried_and_counted() {
        let mut t = tracker();
        t.observe(watcher::Event::Apply(pod(
            "a",
            "sim-node-2",
            "1",
            json!({}),
        )));
        assert_eq!(t.next_action("a").unwrap().attempt, 0);
        t.finish(done("a", "1", Outcome::Retry));
        let again = t.next_action("a").unwrap();
        assert_eq!(again.attempt, 1);
        // Same address on the second try.
        assert_eq!(again.start.unwrap()["status"]["podIP"], "10.100.2.1");
        t.finish(done("a", "1", Outcome::Settled));
        assert!(t.next_action("a").is_none());
        assert_eq!(t.started, 0);
    }

    #[test]
    fn running_pods_keep_their_addresses_and_a_relist_forgets_the_missing() {
        let mut t = tracker();
        t.observe(watcher::Event::Init);
        t.observe(watcher::Event::InitApply(pod(
            "old",
            "sim-node-0",
            "1",
            json!({"phase": "Running", "podIP": "10.100.0.1"}),
        )));
        t.observe(watcher::Event::InitApply(pod(
            "gone",
            "sim-node-0",
            "2",
            json!({}),
        )));
        t.observe(watcher::Event::InitDone);
        assert!(t.next_action("old").is_none());
        assert_eq!(
            t.next_action("gone").unwrap().start.unwrap()["status"]["podIP"],
            "10.100.0.2"
        );
        // A re-list without "gone": it is forgotten with its address.
        t.observe(watcher::Event::Init);
        t.observe(watcher::Event::InitApply(pod(
            "old",
            "sim-node-0",
            "1",
            json!({"phase": "Running", "podIP": "10.100.0.1"}),
        )));
        t.observe(watcher::Event::InitDone);
        assert_eq!(t.pods.len(), 1);
        assert_eq!(t.ips.len(), 1);
        t.finish(done("gone", "2", Outcome::Done { started: true }));
        assert_eq!(t.started, 0);
        assert!(t.settled.is_empty());
    }

    #[test]
    fn a_listed_pending_pod_does_not_take_a_running_pods_address() {
        let mut t = tracker();
        t.observe(watcher::Event::Init);
        let listed = [
            pod("new", "sim-node-0", "3", json!({"phase": "Pending"})),
            pod(
                "old",
                "sim-node-0",
                "2",
                json!({"phase": "Running", "podIP": "10.100.0.1"}),
            ),
        ];
        for p in listed {
            assert!(t.observe(watcher::Event::InitApply(p)).is_empty());
        }
        let mut uids = t.observe(watcher::Event::InitDone);
        uids.sort();
        assert_eq!(uids, ["new", "old"]);
        let action = t.next_action("new").unwrap();
        assert_eq!(action.start.unwrap()["status"]["podIP"], "10.100.0.2");
        assert!(t.next_action("old").is_none());
    }

    #[test]
    fn host_network_pods_take_the_node_address() {
        let mut t = tracker();
        let mut p = pod("h", "sim-node-1", "1", json!({}));
        if let Some(spec) = p.spec.as_mut() {
            spec.host_network = Some(true);
        }
        t.observe(watcher::Event::Apply(p));
        let patch = t.next_action("h").unwrap().start.unwrap();
        assert_eq!(patch["status"]["podIP"], "10.0.0.2");
        assert_eq!(t.ips.len(), 0);
    }

    #[test]
    fn transient_errors_are_told_apart() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(is_transient(&api(429)));
        assert!(is_transient(&api(503)));
        assert!(!is_transient(&api(422)));
        assert!(!is_transient(&api(409)));
        assert_eq!(code(&api(404)), Some(404));
        assert_eq!(backoff(0), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(800));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
