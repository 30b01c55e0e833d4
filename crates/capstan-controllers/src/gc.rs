//! The garbage collector (upstream's `pkg/controller/garbagecollector`): a graph of owner
//! references across every kind the API serves (metadata-only watches, kinds found by
//! discovery and re-discovered every 30 s so custom resources join, and within a second when
//! an owner's kind is not known yet: that dependent is retried meanwhile, never deleted on a
//! guess), and two work queues:
//!
//! - *attempt to delete*: an object whose owners may be gone. Owners are classified as solid
//!   (present), dangling (absent, confirmed by a live read) or waiting for their dependents
//!   (being deleted in the foreground). With no solid owner the object is deleted (in the
//!   foreground when an owner waits for it); otherwise dangling and waiting references are
//!   removed. An owner being deleted in the foreground has its blocking dependents deleted and
//!   loses the `foregroundDeletion` finalizer once none is left.
//! - *attempt to orphan*: an owner deleted with the `orphan` finalizer has its reference removed
//!   from every dependent, then loses the finalizer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::runtime::{self, AbortOnDrop, Setup, Task, backoff};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
/// How often the served kinds are discovered again.
const REDISCOVERY: Duration = Duration::from_secs(30);
/// How soon the kinds are discovered again when an owner of an unknown kind asks for it.
const REDISCOVERY_ASKED: Duration = Duration::from_secs(1);
/// Workers per queue (upstream runs 20 for deletions).
const WORKERS: usize = 8;

/// A kind the collector knows: how to reach its objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

/// One object in the graph.
#[derive(Debug, Clone)]
struct Node {
    uid: String,
    kind: Arc<Kind>,
    namespace: Option<String>,
    name: String,
    resource_version: Option<String>,
    owners: Vec<OwnerReference>,
    finalizers: Vec<String>,
    deleting: bool,
}

impl Node {
    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Being deleted in the foreground: waiting for its blocking dependents.
    fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
    }
}

/// The owner-reference graph: objects by uid, and dependents by owner uid (owners that were
/// never observed have dependents but no node).
#[derive(Debug, Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
    /// Kinds by (group, kind), to reach an owner named only by a reference.
    kinds: HashMap<(String, String), Arc<Kind>>,
}

/// Work produced by a graph change.
#[derive(Debug, Default, PartialEq)]
struct Work {
    delete: Vec<String>,
    orphan: Vec<String>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl Graph {
    /// Records an added or updated object (upstream's `processGraphChanges`).
    fn upsert(&mut self, kind: &Arc<Kind>, meta: &ObjectMeta) -> Work {
        let mut work = Work::default();
        let Some(uid) = meta.uid.clone() else {
            return work;
        };
        let node = Node {
            uid: uid.clone(),
            kind: kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone(),
            owners: meta.owner_references.clone().unwrap_or_default(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
        };
        let old = self.nodes.insert(uid.clone(), node.clone());
        let old_owners: HashSet<&str> = old
            .as_ref()
            .map(|o| o.owners.iter().map(|r| r.uid.as_str()).collect())
            .unwrap_or_default();
        let new_owners: HashSet<&str> = node.owners.iter().map(|r| r.uid.as_str()).collect();
        for removed in old_owners.difference(&new_owners) {
            if let Some(set) = self.dependents.get_mut(*removed) {
                set.remove(&uid);
            }
            // An owner waiting for its dependents may be done now.
            if self
                .nodes
                .get(*removed)
                .is_some_and(Node::deleting_dependents)
            {
                work.delete.push((*removed).to_owned());
            }
        }
        for added in new_owners.difference(&old_owners) {
            self.dependents
                .entry((*added).to_owned())
                .or_default()
                .insert(uid.clone());
        }
        // An owner this graph has never seen may be gone: check the dependent.
        if new_owners.iter().any(|o| !self.nodes.contains_key(*o)) {
            work.delete.push(uid.clone());
        }
        // An owner reference lost its blocking flag: the owner may be done waiting.
        if let Some(old) = &old {
            for owner in &old.owners {
                let still_blocking = node
                    .owners
                    .iter()
                    .any(|r| r.uid == owner.uid && r.block_owner_deletion == Some(true));
                if owner.block_owner_deletion == Some(true)
                    && !still_blocking
                    && self
                        .nodes
                        .get(&owner.uid)
                        .is_some_and(Node::deleting_dependents)
                {
                    work.delete.push(owner.uid.clone());
                }
            }
        }
        if node.deleting && node.has_finalizer(ORPHAN) {
            work.orphan.push(uid.clone());
        }
        if node.deleting_dependents() {
            work.delete.extend(self.dependents_of(&uid));
            work.delete.push(uid.clone());
        }
        // A dependent that turned to deletion may unblock a foreground owner later; one being
        // deleted whose owners wait for it is watched through its own deletion event.
        work.delete.dedup();
        work
    }

    /// Records a deleted object.
    fn remove(&mut self, meta: &ObjectMeta) -> Work {
        let mut work = Work::default();
        let Some(uid) = meta.uid.as_deref() else {
            return work;
        };
        let Some(node) = self.nodes.remove(uid) else {
            return work;
        };
        for owner in &node.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() && !self.nodes.contains_key(&owner.uid) {
                    self.dependents.remove(&owner.uid);
                }
            }
            if self
                .nodes
                .get(&owner.uid)
                .is_some_and(Node::deleting_dependents)
            {
                work.delete.push(owner.uid.clone());
            }
        }
        // Its dependents' owner is gone.
        work.delete.extend(self.dependents_of(uid));
        work
    }

    fn dependents_of(&self, uid: &str) -> Vec<String> {
        let mut dependents: Vec<String> = self
            .dependents
            .get(uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        dependents.sort();
        dependents
    }

    fn kind_of(&self, reference: &OwnerReference) -> Option<Arc<Kind>> {
        self.kinds
            .get(&(
                group_of(&reference.api_version).to_owned(),
                reference.kind.clone(),
            ))
            .cloned()
    }
}

/// A deduplicating work queue of uids with per-item backoff on failure.
#[derive(Debug, Clone)]
struct WorkQueue {
    tx: mpsc::UnboundedSender<String>,
    pending: Arc<Mutex<HashSet<String>>>,
    failures: Arc<Mutex<HashMap<String, u32>>>,
}

impl WorkQueue {
    fn new() -> (WorkQueue, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded();
        let queue = WorkQueue {
            tx,
            pending: Arc::default(),
            failures: Arc::default(),
        };
        (queue, rx)
    }

    fn add(&self, uid: String) {
        if lock(&self.pending).insert(uid.clone()) {
            let _ = self.tx.unbounded_send(uid);
        }
    }

    /// Takes `uid` off the pending set as its processing begins.
    fn started(&self, uid: &str) {
        lock(&self.pending).remove(uid);
    }

    fn succeeded(&self, uid: &str) {
        lock(&self.failures).remove(uid);
    }

    fn retry(&self, uid: String) {
        let delay = {
            let mut failures = lock(&self.failures);
            let count = failures.entry(uid.clone()).or_default();
            *count += 1;
            backoff(*count - 1).max(Duration::from_millis(50))
        };
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(uid);
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The collector's state shared by its tasks.
#[derive(Clone)]
struct Collector {
    client: Client,
    graph: Arc<Mutex<Graph>>,
    deletes: WorkQueue,
    orphans: WorkQueue,
    /// Asks for the served kinds to be discovered again before the next round is due (an
    /// owner of a kind not known yet: a custom resource whose CRD is new).
    rediscover: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").finish_non_exhaustive()
    }
}

impl Collector {
    fn enqueue(&self, work: Work) {
        work.delete
            .into_iter()
            .for_each(|uid| self.deletes.add(uid));
        work.orphan
            .into_iter()
            .for_each(|uid| self.orphans.add(uid));
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace.filter(|_| kind.namespaced) {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            None => Api::all_with(self.client.clone(), &kind.resource),
        }
    }
}

/// The owner's state as far as a dependent is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    /// Present and not waiting.
    Solid,
    /// Absent (or replaced by another object of the same name).
    Dangling,
    /// Present, being deleted in the foreground.
    Waiting,
}

/// What to do with a dependent given its owners' states (upstream's `attemptToDeleteItem`).
#[derive(Debug, PartialEq)]
enum Decision {
    /// Nothing: its owners are all present.
    Keep,
    /// Remove the references to these owners; other owners keep it.
    Unlink(Vec<String>),
    /// Delete it with this propagation policy.
    Delete(PropagationPolicy),
    /// Make its references to its owners non-blocking, then delete it in the foreground: an
    /// owner waits for it while one of its own dependents is already waiting for its
    /// dependents, which may be a ring of owners that would otherwise wait on each other.
    UnblockAndDelete,
}

/// What a dependent's own dependents say about deleting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Dependents {
    /// It has dependents.
    any: bool,
    /// One of them is being deleted in the foreground (waiting for its own dependents).
    deleting_dependents: bool,
}

fn decide(node: &Node, states: &[(String, OwnerState)], dependents: Dependents) -> Decision {
    let solid = states
        .iter()
        .filter(|(_, s)| *s == OwnerState::Solid)
        .count();
    let waiting = states.iter().any(|(_, s)| *s == OwnerState::Waiting);
    if solid > 0 {
        let unlink: Vec<String> = states
            .iter()
            .filter(|(_, s)| *s != OwnerState::Solid)
            .map(|(uid, _)| uid.clone())
            .collect();
        return if unlink.is_empty() {
            Decision::Keep
        } else {
            Decision::Unlink(unlink)
        };
    }
    // Upstream deletes in the foreground only what an owner waits for and that has dependents
    // of its own; a leaf goes by its own finalizers.
    if waiting && dependents.any {
        return if dependents.deleting_dependents {
            Decision::UnblockAndDelete
        } else {
            Decision::Delete(PropagationPolicy::Foreground)
        };
    }
    Decision::Delete(if node.has_finalizer(ORPHAN) {
        PropagationPolicy::Orphan
    } else if node.has_finalizer(FOREGROUND) {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    })
}

/// Errors the workers retry.
type Failure = kube::Error;

impl Collector {
    /// Decides an owner's state, reading it live when the graph has not seen it.
    async fn owner_state(
        &self,
        dependent: &Node,
        reference: &OwnerReference,
    ) -> Result<OwnerState, Failure> {
        let (known, kind) = {
            let graph = lock(&self.graph);
            (
                graph.nodes.get(&reference.uid).cloned(),
                graph.kind_of(reference),
            )
        };
        if let Some(owner) = known {
            return Ok(if owner.deleting_dependents() {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            });
        }
        let Some(kind) = kind else {
            // A kind not discovered (yet): never delete on a guess; try again once the kinds
            // are discovered anew, as upstream's collector retries until its REST mapper
            // knows the kind.
            self.rediscover.notify_one();
            return Err(kube::Error::Discovery(
                kube::error::DiscoveryError::MissingKind(format!(
                    "{}, Kind={}",
                    reference.api_version, reference.kind
                )),
            ));
        };
        if kind.namespaced && dependent.namespace.is_none() {
            // A cluster-scoped object cannot be owned by a namespaced one.
            return Ok(OwnerState::Dangling);
        }
        match self
            .api(&kind, dependent.namespace.as_deref())
            .get_metadata_opt(&reference.name)
            .await?
        {
            None => Ok(OwnerState::Dangling),
            Some(owner) if owner.metadata.uid.as_deref() != Some(reference.uid.as_str()) => {
                Ok(OwnerState::Dangling)
            }
            Some(owner) => {
                let foreground = owner.metadata.deletion_timestamp.is_some()
                    && owner
                        .metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == FOREGROUND);
                Ok(if foreground {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                })
            }
        }
    }

    async fn attempt_to_delete(&self, uid: &str) -> Result<(), Failure> {
        let Some(node) = lock(&self.graph).nodes.get(uid).cloned() else {
            return Ok(());
        };
        if node.deleting_dependents() {
            return self.process_deleting_dependents(uid, &node).await;
        }
        if node.deleting || node.owners.is_empty() {
            return Ok(());
        }
        let mut states = Vec::new();
        for reference in &node.owners {
            states.push((
                reference.uid.clone(),
                self.owner_state(&node, reference).await?,
            ));
        }
        let dependents = {
            let graph = lock(&self.graph);
            let list = graph.dependents_of(uid);
            Dependents {
                any: !list.is_empty(),
                deleting_dependents: list
                    .iter()
                    .filter_map(|d| graph.nodes.get(d))
                    .any(Node::deleting_dependents),
            }
        };
        let api = self.api(&node.kind, node.namespace.as_deref());
        match decide(&node, &states, dependents) {
            Decision::Keep => Ok(()),
            Decision::UnblockAndDelete => {
                tracing::debug!(kind = %node.kind.resource.kind, name = %node.name, "an owner and a dependent both wait for dependents: unblocking its owner references to break a possible cycle");
                let unblocked: Vec<OwnerReference> = node
                    .owners
                    .iter()
                    .map(|r| OwnerReference {
                        block_owner_deletion: r.block_owner_deletion.map(|_| false),
                        ..r.clone()
                    })
                    .collect();
                let patch = json!({"metadata": {
                    "ownerReferences": unblocked,
                    "uid": uid,
                }});
                ignore_gone(
                    api.patch(&node.name, &PatchParams::default(), &Patch::Merge(patch))
                        .await,
                )?;
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Foreground),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.to_owned()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                ignore_gone(api.delete(&node.name, &params).await.map(|_| ()))
            }
            Decision::Unlink(owners) => {
                let kept: Vec<&OwnerReference> = node
                    .owners
                    .iter()
                    .filter(|r| !owners.contains(&r.uid))
                    .collect();
                let patch = json!({"metadata": {
                    "ownerReferences": kept,
                    "resourceVersion": node.resource_version,
                    "uid": uid,
                }});
                ignore_gone(
                    api.patch(&node.name, &PatchParams::default(), &Patch::Merge(patch))
                        .await,
                )
            }
            Decision::Delete(policy) => {
                tracing::debug!(kind = %node.kind.resource.kind, name = %node.name, ?policy, "deleting a dependent whose owners are gone");
                let params = DeleteParams {
                    propagation_policy: Some(policy),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.to_owned()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                ignore_gone(api.delete(&node.name, &params).await.map(|_| ()))
            }
        }
    }

    /// An owner deleted in the foreground: delete its blocking dependents, and drop the
    /// finalizer once none is left.
    async fn process_deleting_dependents(&self, uid: &str, owner: &Node) -> Result<(), Failure> {
        let blocking: Vec<(String, bool)> = {
            let graph = lock(&self.graph);
            graph
                .dependents_of(uid)
                .into_iter()
                .filter_map(|dependent| {
                    let node = graph.nodes.get(&dependent)?;
                    let blocks = node
                        .owners
                        .iter()
                        .any(|r| r.uid == uid && r.block_owner_deletion == Some(true));
                    blocks.then_some((dependent, node.deleting))
                })
                .collect()
        };
        if blocking.is_empty() {
            let finalizers: Vec<&String> = owner
                .finalizers
                .iter()
                .filter(|f| *f != FOREGROUND)
                .collect();
            let patch = json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": owner.resource_version,
                "uid": uid,
            }});
            let api = self.api(&owner.kind, owner.namespace.as_deref());
            return ignore_gone(
                api.patch(&owner.name, &PatchParams::default(), &Patch::Merge(patch))
                    .await,
            );
        }
        for (dependent, deleting) in blocking {
            if !deleting {
                self.deletes.add(dependent);
            }
        }
        Ok(())
    }

    async fn attempt_to_orphan(&self, uid: &str) -> Result<(), Failure> {
        let (owner, dependents) = {
            let graph = lock(&self.graph);
            let Some(owner) = graph.nodes.get(uid).cloned() else {
                return Ok(());
            };
            let dependents: Vec<Node> = graph
                .dependents_of(uid)
                .iter()
                .filter_map(|d| graph.nodes.get(d).cloned())
                .collect();
            (owner, dependents)
        };
        if !owner.deleting || !owner.has_finalizer(ORPHAN) {
            return Ok(());
        }
        for dependent in dependents {
            let kept: Vec<&OwnerReference> =
                dependent.owners.iter().filter(|r| r.uid != uid).collect();
            let patch = json!({"metadata": {
                "ownerReferences": kept,
                "resourceVersion": dependent.resource_version,
                "uid": dependent.uid,
            }});
            let api = self.api(&dependent.kind, dependent.namespace.as_deref());
            ignore_gone(
                api.patch(
                    &dependent.name,
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await,
            )?;
        }
        let finalizers: Vec<&String> = owner.finalizers.iter().filter(|f| *f != ORPHAN).collect();
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": owner.resource_version,
            "uid": uid,
        }});
        let api = self.api(&owner.kind, owner.namespace.as_deref());
        ignore_gone(
            api.patch(&owner.name, &PatchParams::default(), &Patch::Merge(patch))
                .await,
        )
    }
}

/// Treats an object already gone (or replaced: the uid precondition fails) as done.
fn ignore_gone<T>(result: Result<T, kube::Error>) -> Result<(), Failure> {
    match result {
        Ok(_) => Ok(()),
        Err(error) if runtime::is_not_found(&error) => Ok(()),
        Err(kube::Error::Api(status))
            if status.code == 409 && status.message.contains("Precondition failed: UID") =>
        {
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// The kinds to watch: every kind served with list, watch and delete, except events (as
/// upstream's collector ignores them).
async fn discover(client: &Client) -> Result<Vec<Kind>, kube::Error> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut kinds = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let wanted = [verbs::LIST, verbs::WATCH, verbs::DELETE]
                .iter()
                .all(|v| caps.supports_operation(v));
            if !wanted || resource.plural == "events" {
                continue;
            }
            kinds.push(Kind {
                namespaced: caps.scope == Scope::Namespaced,
                resource,
            });
        }
    }
    Ok(kinds)
}

/// Watches one kind's metadata into the graph; reports its first complete list on `synced`.
async fn watch_kind(collector: Collector, kind: Arc<Kind>, synced: mpsc::UnboundedSender<()>) {
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::all_with(collector.client.clone(), &kind.resource);
    let stream = watcher::watcher(api, capstan_client::watcher_config()).default_backoff();
    futures::pin_mut!(stream);
    let mut listed: Vec<ObjectMeta> = Vec::new();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::debug!(kind = %kind.resource.kind, %error, "metadata watch failed; retrying");
                continue;
            }
        };
        match event {
            Event::Apply(object) => {
                let work = lock(&collector.graph).upsert(&kind, &object.metadata);
                collector.enqueue(work);
            }
            Event::Delete(object) => {
                let work = lock(&collector.graph).remove(&object.metadata);
                collector.enqueue(work);
            }
            Event::Init => listed.clear(),
            Event::InitApply(object) => listed.push(object.metadata),
            Event::InitDone => {
                let mut work = Work::default();
                {
                    let mut graph = lock(&collector.graph);
                    let present: HashSet<&str> =
                        listed.iter().filter_map(|m| m.uid.as_deref()).collect();
                    let gone: Vec<ObjectMeta> = graph
                        .nodes
                        .iter()
                        .filter(|(uid, n)| n.kind == kind && !present.contains(uid.as_str()))
                        .map(|(uid, _)| ObjectMeta {
                            uid: Some(uid.clone()),
                            ..ObjectMeta::default()
                        })
                        .collect();
                    for meta in gone {
                        let w = graph.remove(&meta);
                        work.delete.extend(w.delete);
                    }
                    for meta in listed.drain(..) {
                        let w = graph.upsert(&kind, &meta);
                        work.delete.extend(w.delete);
                        work.orphan.extend(w.orphan);
                    }
                }
                collector.enqueue(work);
                let _ = synced.unbounded_send(());
            }
        }
    }
}

/// Runs a queue's workers until dropped.
async fn run_workers<F, Fut>(queue: WorkQueue, rx: mpsc::UnboundedReceiver<String>, work: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    rx.for_each_concurrent(WORKERS, |uid| {
        queue.started(&uid);
        let queue = queue.clone();
        let fut = work(uid.clone());
        async move {
            match fut.await {
                Ok(()) => queue.succeeded(&uid),
                Err(error) => {
                    // Conflicts and owners of kinds not discovered yet are retried quietly.
                    if !matches!(&error, kube::Error::Api(s) if s.code == 409)
                        && !matches!(&error, kube::Error::Discovery(_))
                    {
                        tracing::warn!(uid = %uid, %error, "garbage collection failed; retrying");
                    }
                    queue.retry(uid);
                }
            }
        }
    })
    .await
}

/// Returns the garbage collector's run future (it discovers and watches every kind itself).
pub fn start(setup: Setup<'_>) -> Task {
    Box::pin(run(setup.client()))
}

/// Runs the garbage collector until the returned future is dropped.
pub async fn run(client: Client) {
    let (deletes, delete_rx) = WorkQueue::new();
    let (orphans, orphan_rx) = WorkQueue::new();
    let collector = Collector {
        client: client.clone(),
        graph: Arc::default(),
        deletes,
        orphans,
        rediscover: Arc::default(),
    };
    let mut watches: BTreeMap<String, AbortOnDrop> = BTreeMap::new();
    let (synced_tx, mut synced_rx) = mpsc::unbounded();
    let mut workers: Option<(AbortOnDrop, AbortOnDrop)> = None;
    let mut delete_rx = Some(delete_rx);
    let mut orphan_rx = Some(orphan_rx);
    loop {
        match discover(&client).await {
            Ok(kinds) => {
                let mut graph_kinds = HashMap::new();
                for kind in kinds {
                    let key = format!(
                        "{}/{}/{}",
                        kind.resource.group, kind.resource.version, kind.resource.plural
                    );
                    let kind = Arc::new(kind);
                    graph_kinds.insert(
                        (kind.resource.group.clone(), kind.resource.kind.clone()),
                        kind.clone(),
                    );
                    if let std::collections::btree_map::Entry::Vacant(entry) = watches.entry(key) {
                        let task =
                            tokio::spawn(watch_kind(collector.clone(), kind, synced_tx.clone()));
                        entry.insert(AbortOnDrop(task));
                    }
                }
                lock(&collector.graph).kinds = graph_kinds;
            }
            Err(error) => tracing::warn!(%error, "garbage collector: discovery failed"),
        }
        // Start the workers once every kind found first has been listed (upstream waits for
        // the graph to sync too), so owners listed later are not taken for gone.
        if workers.is_none() && !watches.is_empty() {
            for _ in 0..watches.len() {
                if synced_rx.next().await.is_none() {
                    return;
                }
            }
            tracing::info!(
                kinds = watches.len(),
                "garbage collector: graph synced; starting"
            );
            let (c1, c2) = (collector.clone(), collector.clone());
            let deletes = tokio::spawn(run_workers(
                collector.deletes.clone(),
                delete_rx.take().unwrap_or_else(|| mpsc::unbounded().1),
                move |uid| {
                    let c = c1.clone();
                    async move { c.attempt_to_delete(&uid).await }
                },
            ));
            let orphaned = tokio::spawn(run_workers(
                collector.orphans.clone(),
                orphan_rx.take().unwrap_or_else(|| mpsc::unbounded().1),
                move |uid| {
                    let c = c2.clone();
                    async move { c.attempt_to_orphan(&uid).await }
                },
            ));
            workers = Some((AbortOnDrop(deletes), AbortOnDrop(orphaned)));
        }
        tokio::select! {
            () = tokio::time::sleep(REDISCOVERY) => {}
            () = collector.rediscover.notified() => {
                // Asked for: at most once a second.
                tokio::time::sleep(REDISCOVERY_ASKED).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(kind: &str, plural: &str) -> Arc<Kind> {
        Arc::new(Kind {
            resource: ApiResource {
                group: "apps".into(),
                version: "v1".into(),
                api_version: "apps/v1".into(),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
        })
    }

    fn meta(value: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    fn owned(uid: &str, owner: &str, block: bool) -> ObjectMeta {
        meta(json!({"name": uid, "namespace": "ns", "uid": uid,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                 "uid": owner, "controller": true, "blockOwnerDeletion": block}]}))
    }

    #[test]
    fn the_graph_queues_what_may_need_collecting() {
        let rs = kind("ReplicaSet", "replicasets");
        let mut graph = Graph::default();
        // A dependent whose owner the graph has not seen is checked.
        assert_eq!(graph.upsert(&rs, &owned("p1", "rs1", true)).delete, ["p1"]);
        assert_eq!(
            graph.upsert(
                &rs,
                &meta(json!({"name": "rs1", "namespace": "ns", "uid": "rs1"}))
            ),
            Work::default()
        );
        assert_eq!(
            graph.upsert(&rs, &owned("p2", "rs1", false)),
            Work::default()
        );
        assert_eq!(graph.dependents_of("rs1"), ["p1", "p2"]);

        // Foreground deletion of the owner: its dependents and itself are queued.
        let deleting = meta(json!({"name": "rs1", "namespace": "ns", "uid": "rs1",
            "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"]}));
        assert_eq!(graph.upsert(&rs, &deleting).delete, ["p1", "p2", "rs1"]);
        // A dependent gone: the waiting owner is looked at again.
        assert_eq!(graph.remove(&owned("p1", "rs1", true)).delete, ["rs1"]);

        // Orphan deletion queues the owner for orphaning.
        let orphaning = meta(json!({"name": "rs1", "namespace": "ns", "uid": "rs1",
            "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["orphan"]}));
        assert_eq!(graph.upsert(&rs, &orphaning).orphan, ["rs1"]);

        // The owner gone: its dependents are queued.
        assert_eq!(graph.remove(&orphaning).delete, ["p2"]);
    }

    #[test]
    fn decisions_follow_upstream() {
        let node = |finalizers: &[&str]| Node {
            uid: "p".into(),
            kind: kind("Pod", "pods"),
            namespace: Some("ns".into()),
            name: "p".into(),
            resource_version: None,
            owners: Vec::new(),
            finalizers: finalizers.iter().map(|f| (*f).to_owned()).collect(),
            deleting: false,
        };
        use OwnerState::*;
        let states = |s: &[(&str, OwnerState)]| {
            s.iter()
                .map(|(u, s)| ((*u).to_owned(), *s))
                .collect::<Vec<_>>()
        };
        let none = Dependents::default();
        let some = Dependents {
            any: true,
            deleting_dependents: false,
        };
        let ring = Dependents {
            any: true,
            deleting_dependents: true,
        };
        assert_eq!(
            decide(&node(&[]), &states(&[("a", Solid)]), none),
            Decision::Keep
        );
        assert_eq!(
            decide(
                &node(&[]),
                &states(&[("a", Solid), ("b", Dangling), ("c", Waiting)]),
                some
            ),
            Decision::Unlink(vec!["b".into(), "c".into()])
        );
        assert_eq!(
            decide(&node(&[]), &states(&[("a", Dangling)]), some),
            Decision::Delete(PropagationPolicy::Background)
        );
        // An owner waits: foreground when it has dependents, by its finalizers otherwise.
        assert_eq!(
            decide(
                &node(&[]),
                &states(&[("a", Dangling), ("b", Waiting)]),
                some
            ),
            Decision::Delete(PropagationPolicy::Foreground)
        );
        assert_eq!(
            decide(&node(&[]), &states(&[("b", Waiting)]), none),
            Decision::Delete(PropagationPolicy::Background)
        );
        // ... and when one of its dependents waits too (a ring), its references stop blocking.
        assert_eq!(
            decide(&node(&[]), &states(&[("b", Waiting)]), ring),
            Decision::UnblockAndDelete
        );
        assert_eq!(
            decide(&node(&["orphan"]), &states(&[("a", Dangling)]), none),
            Decision::Delete(PropagationPolicy::Orphan)
        );
    }
}
