//! The scheduler's picture of the cluster: every node with the pods placed on it and their
//! summed requests, ports and images (upstream's `NodeInfo`), kept current from the watches and
//! from the scheduler's own assumptions, and read by the plugins during a scheduling cycle.
//!
//! Upstream keeps a cache that event handlers mutate and takes a snapshot of it per cycle. Here
//! the scheduling loop is the only writer and applies events between cycles, so the cache is
//! the snapshot: a cycle borrows it immutably.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use capstan_api::selector::{LabelOperator, LabelRequirement, LabelSelector};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodAffinityTerm, Taint, Toleration,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::resource::{self, Resource};

/// Labels, as the API holds them.
pub type Labels = BTreeMap<String, String>;

static NO_LABELS: Labels = BTreeMap::new();

/// The snapshot's hash maps: looked up per node on every cycle, with keys the API chose
/// (names), so a fast hash rather than a DoS-resistant one.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One pod affinity or anti-affinity term, parsed once (upstream's `framework.AffinityTerm`).
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    /// Which pods the term is about.
    pub selector: LabelSelector,
    /// The namespaces it looks in (the pod's own when neither these nor a selector are given).
    pub namespaces: BTreeSet<String>,
    /// Namespaces whose labels match this are looked in too.
    pub namespace_selector: Option<LabelSelector>,
    /// The node label that defines "the same place".
    pub topology_key: String,
    /// The weight of a preferred term (0 for a required one).
    pub weight: i32,
}

impl AffinityTerm {
    fn parse(term: &PodAffinityTerm, pod_namespace: &str, weight: i32) -> Option<AffinityTerm> {
        let selector = LabelSelector::from_api(term.label_selector.as_ref()).ok()?;
        let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        let namespace_selector = match term.namespace_selector.as_ref() {
            Some(s) => Some(LabelSelector::from_api(Some(s)).ok()?),
            None => None,
        };
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.insert(pod_namespace.to_owned());
        }
        Some(AffinityTerm {
            selector,
            namespaces,
            namespace_selector,
            topology_key: term.topology_key.clone(),
            weight,
        })
    }

    /// Whether `pod` (in a namespace with `namespace_labels`) is one this term is about.
    pub fn matches(&self, pod: &PodInfo, namespace_labels: Option<&Labels>) -> bool {
        let in_namespace = self.namespaces.contains(pod.namespace())
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.matches(namespace_labels.unwrap_or(&NO_LABELS)));
        in_namespace && self.selector.matches(pod.labels())
    }
}

/// A pod with what the scheduler derives from it once: its requests and its affinity terms.
#[derive(Debug)]
pub struct PodInfo {
    /// The pod as last seen.
    pub pod: Arc<Pod>,
    /// What it requests (for fit).
    pub requests: Resource,
    /// What it counts as for scoring (non-zero CPU and memory defaults).
    pub non_zero_requests: Resource,
    /// Required pod affinity terms.
    pub required_affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity terms.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity terms, with weights.
    pub preferred_affinity: Vec<AffinityTerm>,
    /// Preferred pod anti-affinity terms, with weights.
    pub preferred_anti_affinity: Vec<AffinityTerm>,
}

impl PodInfo {
    /// Derives the scheduler's view of `pod`.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .filter_map(|t| AffinityTerm::parse(t, &namespace, 0))
                .collect()
        };
        let required_affinity = required(pod_affinity.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let required_anti_affinity = required(anti.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let preferred_affinity = pod_affinity
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .filter_map(|w| AffinityTerm::parse(&w.pod_affinity_term, &namespace, w.weight))
            .collect();
        let preferred_anti_affinity = anti
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .filter_map(|w| AffinityTerm::parse(&w.pod_affinity_term, &namespace, w.weight))
            .collect();
        PodInfo {
            requests: resource::pod_requests(&pod),
            non_zero_requests: resource::pod_non_zero_requests(&pod),
            pod,
            required_affinity,
            required_anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
        }
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The pod's uid.
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// The pod's labels.
    pub fn labels(&self) -> &Labels {
        self.pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
    }

    /// The pod's priority (`spec.priority`, 0 when unset).
    pub fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }

    /// The node preemption nominated the pod to (`status.nominatedNodeName`), if any.
    pub fn nominated_node(&self) -> Option<&str> {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// The pod's tolerations.
    pub fn tolerations(&self) -> &[Toleration] {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default()
    }

    /// Whether the pod has any pod affinity or anti-affinity terms.
    pub fn has_affinity(&self) -> bool {
        !self.required_affinity.is_empty()
            || !self.required_anti_affinity.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
    }

    /// The host ports the pod's containers ask for ([`capstan_api::fit::host_ports`]).
    pub fn host_ports(&self) -> Vec<HostPort> {
        self.pod
            .spec
            .as_ref()
            .map(capstan_api::fit::host_ports)
            .unwrap_or_default()
    }
}

pub use capstan_api::fit::HostPort;

/// A node and what is placed on it (upstream's `framework.NodeInfo`).
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// The node object; `None` while pods are known to be bound to a node not seen yet.
    pub node: Option<Arc<Node>>,
    /// `spec.unschedulable` (kept here, beside the sums, so that filtering a node reads one
    /// place in memory).
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// The pods placed on the node, assumed ones included.
    pub pods: Vec<Arc<PodInfo>>,
    /// The sum of the pods' requests.
    pub requested: Resource,
    /// The sum of the pods' scoring requests (non-zero defaults).
    pub non_zero_requested: Resource,
    /// What the node offers (`status.allocatable`).
    pub allocatable: Resource,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// Image names on the node (every name of every image) with their sizes.
    pub images: FastMap<String, i64>,
    /// How many of its pods have pod affinity or anti-affinity terms of any kind.
    pub pods_with_affinity: usize,
    /// How many of its pods have required pod anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
    /// Bumped on every change.
    pub generation: u64,
}

impl NodeInfo {
    fn empty(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.to_owned(),
            node: None,
            unschedulable: false,
            taints: Vec::new(),
            pods: Vec::new(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            allocatable: Resource::default(),
            used_ports: Vec::new(),
            images: FastMap::default(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            generation: 0,
        }
    }

    /// A node info for `node` holding `pods` (tests and the preemption dry run build these).
    pub fn new(node: Arc<Node>, pods: impl IntoIterator<Item = Arc<PodInfo>>) -> NodeInfo {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut info = NodeInfo::empty(&name);
        info.set_node(node);
        for pod in pods {
            info.add_pod(pod);
        }
        info
    }

    /// The node's labels.
    pub fn labels(&self) -> &Labels {
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&NO_LABELS)
    }

    /// The node's taints.
    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = resource::node_allocatable(&node);
        let spec = node.spec.as_ref();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.images.clear();
        for image in node
            .status
            .as_ref()
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
        {
            for name in image.names.iter().flatten() {
                self.images
                    .insert(normalize_image_name(name), image.size_bytes.unwrap_or(0));
            }
        }
        self.node = Some(node);
        self.generation += 1;
    }

    /// Places a pod on the node.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(pod.host_ports());
        self.pods_with_affinity += usize::from(pod.has_affinity());
        self.pods_with_required_anti_affinity +=
            usize::from(!pod.required_anti_affinity.is_empty());
        self.pods.push(pod);
        self.generation += 1;
    }

    /// Removes the pod with this uid; whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(at) = self.pods.iter().position(|p| p.uid() == uid) else {
            return false;
        };
        let pod = self.pods.swap_remove(at);
        self.pods_with_affinity -= usize::from(pod.has_affinity());
        self.pods_with_required_anti_affinity -=
            usize::from(!pod.required_anti_affinity.is_empty());
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        for port in pod.host_ports() {
            if let Some(i) = self.used_ports.iter().position(|p| *p == port) {
                self.used_ports.swap_remove(i);
            }
        }
        self.generation += 1;
        true
    }
}

/// Upstream's image name normalisation for locality: a name without a tag or digest means
/// `:latest`.
pub fn normalize_image_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

/// An object's (namespace, name).
fn namespaced_key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The kinds whose selectors give a pod without spread constraints of its own its default
/// spread selector (upstream's `helper.DefaultSelector`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// A Service: every Service whose selector matches the pod contributes.
    Service,
    /// A ReplicationController controlling the pod.
    ReplicationController,
    /// A ReplicaSet (`apps/v1`) controlling the pod.
    ReplicaSet,
    /// A StatefulSet (`apps/v1`) controlling the pod.
    StatefulSet,
}

/// A workload's selector as the default spread selector reads it.
#[derive(Clone, Debug)]
pub enum WorkloadSelector {
    /// A Service's or ReplicationController's label map.
    Labels(Labels),
    /// A ReplicaSet's or StatefulSet's selector (`None` when absent or unparsable: it adds
    /// nothing, as upstream's).
    Selector(Option<LabelSelector>),
}

/// Objects by key as the API last showed them, except where the scheduler assumed a change
/// it is about to make (upstream's assume cache): a volume it binds, a claim it provisions
/// for. An assumption lasts until the API shows a newer version of the object or it is
/// restored (the binding failed).
#[derive(Debug)]
pub struct AssumeCache<K, V> {
    /// What lookups see: the API's object, or the assumed copy.
    current: BTreeMap<K, Arc<V>>,
    /// The API's objects where a copy is assumed, by key.
    api: BTreeMap<K, Arc<V>>,
}

impl<K, V> Default for AssumeCache<K, V> {
    fn default() -> Self {
        AssumeCache {
            current: BTreeMap::new(),
            api: BTreeMap::new(),
        }
    }
}

impl<K: Ord, V: k8s_openapi::Metadata<Ty = ObjectMeta>> AssumeCache<K, V> {
    /// The current object under `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.current.get(key)
    }

    /// The current objects, in key order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<V>> {
        self.current.values()
    }

    /// Records the API's object. An assumption on it stays while the API's version is the one
    /// it was assumed over; a newer version replaces it (upstream compares versions too).
    pub fn upsert(&mut self, key: K, object: Arc<V>) {
        if let Some(api) = self.api.get_mut(&key) {
            if api.metadata().resource_version == object.metadata().resource_version {
                *api = object;
                return;
            }
            self.api.remove(&key);
        }
        self.current.insert(key, object);
    }

    /// Forgets the object and any assumption on it.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
    {
        self.current.remove(key);
        self.api.remove(key);
    }

    /// Makes `object` current in place of the known object under `key` (nothing when none is
    /// known: there is nothing to assume a change of).
    pub fn assume(&mut self, key: K, object: Arc<V>) {
        let Some(current) = self.current.get_mut(&key) else {
            return;
        };
        let previous = std::mem::replace(current, object);
        self.api.entry(key).or_insert(previous);
    }

    /// Makes the API's object current again under `key`, if a copy was assumed.
    pub fn restore<Q: Ord + ?Sized>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
    {
        let Some((key, api)) = self.api.remove_entry(key) else {
            return;
        };
        self.current.insert(key, api);
    }
}

/// Where a pod the scheduler knows of is.
#[derive(Debug)]
struct PlacedPod {
    node: String,
    assumed: bool,
}

/// Every node with its pods, the namespaces' labels, and where each placed pod is.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every node info, the placeholders of nodes not seen yet included, in no particular
    /// order: a cycle walks hundreds of them, so they lie side by side rather than behind a
    /// hash map's pointers.
    slots: Vec<NodeInfo>,
    /// The slot of each node info by node name.
    index: FastMap<String, usize>,
    /// The slots of the nodes that exist, in a stable order (the order nodes are searched in).
    order: Vec<usize>,
    placed: FastMap<String, PlacedPod>,
    namespaces: FastMap<String, Labels>,
    /// How many nodes have each image (normalised name).
    image_nodes: FastMap<String, usize>,
    /// PodDisruptionBudgets by namespace/name (preemption respects them).
    pdbs: BTreeMap<(String, String), Arc<PodDisruptionBudget>>,
    /// PersistentVolumeClaims by namespace/name (volume restrictions read their access modes;
    /// volume binding assumes the node it chose for claims to provision).
    pvcs: AssumeCache<(String, String), PersistentVolumeClaim>,
    /// PersistentVolumes by name (volume binding assumes the claims it binds them to).
    pvs: AssumeCache<String, PersistentVolume>,
    /// StorageClasses by name.
    storage_classes: FastMap<String, Arc<StorageClass>>,
    /// Nodes holding pods with pod affinity or anti-affinity terms (upstream's
    /// `HavePodsWithAffinityList`), so plugins need not scan every pod for them.
    with_affinity: BTreeSet<String>,
    /// Nodes holding pods with required anti-affinity terms.
    with_required_anti_affinity: BTreeSet<String>,
    /// Pending pods nominated to a node by preemption, by node (upstream's PodNominator):
    /// filters count them on their node for pods of no higher priority.
    nominated: FastMap<String, Vec<Arc<PodInfo>>>,
    /// The node each nominated pod is nominated to, by uid.
    nominated_to: FastMap<String, String>,
    /// Services' selectors by (namespace, name).
    services: BTreeMap<(String, String), Labels>,
    /// ReplicationControllers', ReplicaSets' and StatefulSets' selectors.
    controllers: FastMap<(WorkloadKind, String, String), WorkloadSelector>,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// A snapshot of these nodes and the pods on them (tests).
    pub fn from_nodes(nodes: impl IntoIterator<Item = NodeInfo>) -> Snapshot {
        let mut snapshot = Snapshot::new();
        for info in nodes {
            for pod in &info.pods {
                snapshot.placed.insert(
                    pod.uid().to_owned(),
                    PlacedPod {
                        node: info.name.clone(),
                        assumed: false,
                    },
                );
            }
            snapshot.count_images(&info, 1);
            let name = info.name.clone();
            let slot = snapshot.insert_slot(info);
            snapshot.order.push(slot);
            snapshot.refresh_affinity(&name);
        }
        snapshot
    }

    fn info(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|slot| &self.slots[*slot])
    }

    fn info_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        self.index.get(name).map(|slot| &mut self.slots[*slot])
    }

    fn insert_slot(&mut self, info: NodeInfo) -> usize {
        let slot = self.slots.len();
        self.index.insert(info.name.clone(), slot);
        self.slots.push(info);
        slot
    }

    /// Drops a node info that is not in the search order; the last slot moves into its place.
    fn remove_slot(&mut self, name: &str) {
        let Some(slot) = self.index.remove(name) else {
            return;
        };
        self.slots.swap_remove(slot);
        let moved_from = self.slots.len();
        if slot < moved_from {
            self.index.insert(self.slots[slot].name.clone(), slot);
            if let Some(at) = self.order.iter().position(|s| *s == moved_from) {
                self.order[at] = slot;
            }
        }
    }

    fn count_images(&mut self, info: &NodeInfo, delta: isize) {
        for name in info.images.keys() {
            let count = self.image_nodes.entry(name.clone()).or_default();
            *count = count.saturating_add_signed(delta);
        }
    }

    /// The number of nodes that exist.
    pub fn num_nodes(&self) -> usize {
        self.order.len()
    }

    /// The nodes that exist, in search order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> + Clone {
        self.order.iter().map(|slot| &self.slots[*slot])
    }

    /// The `i`-th node in search order.
    pub fn node_at(&self, i: usize) -> Option<&NodeInfo> {
        self.order.get(i).map(|slot| &self.slots[*slot])
    }

    /// A node by name, if it exists.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.info(name).filter(|n| n.node.is_some())
    }

    /// A namespace's labels, if the namespace is known.
    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespaces.get(namespace)
    }

    /// The existing nodes that hold pods with pod affinity or anti-affinity terms.
    pub fn nodes_with_affinity_pods(&self) -> impl Iterator<Item = &NodeInfo> {
        self.with_affinity.iter().filter_map(|name| self.node(name))
    }

    /// The existing nodes that hold pods with required pod anti-affinity terms.
    pub fn nodes_with_required_anti_affinity_pods(&self) -> impl Iterator<Item = &NodeInfo> {
        self.with_required_anti_affinity
            .iter()
            .filter_map(|name| self.node(name))
    }

    fn refresh_affinity(&mut self, node: &str) {
        let (affinity, anti) = self
            .info(node)
            .map(|n| {
                (
                    n.pods_with_affinity > 0,
                    n.pods_with_required_anti_affinity > 0,
                )
            })
            .unwrap_or((false, false));
        for (set, present) in [
            (&mut self.with_affinity, affinity),
            (&mut self.with_required_anti_affinity, anti),
        ] {
            if present {
                if !set.contains(node) {
                    set.insert(node.to_owned());
                }
            } else {
                set.remove(node);
            }
        }
    }

    /// How many nodes hold an image (normalised name).
    pub fn nodes_with_image(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    /// Whether a pod is placed on a node (assumed or bound).
    pub fn is_placed(&self, uid: &str) -> bool {
        self.placed.contains_key(uid)
    }

    /// The node a pod is placed on, if any.
    pub fn placed_on(&self, uid: &str) -> Option<&str> {
        self.placed.get(uid).map(|p| p.node.as_str())
    }

    /// Adds or replaces a node.
    pub fn upsert_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let slot = match self.index.get(&name) {
            Some(slot) => *slot,
            None => self.insert_slot(NodeInfo::empty(&name)),
        };
        let mut info = std::mem::replace(&mut self.slots[slot], NodeInfo::empty(""));
        if info.node.is_none() {
            self.order.push(slot);
        } else {
            self.count_images(&info, -1);
        }
        info.set_node(node);
        self.count_images(&info, 1);
        self.slots[slot] = info;
    }

    /// Removes a node; its pods stay accounted for until they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(&slot) = self.index.get(name) else {
            return;
        };
        let info = &mut self.slots[slot];
        if info.node.take().is_some() {
            info.generation += 1;
            let images: Vec<String> = info.images.drain().map(|(k, _)| k).collect();
            for image in images {
                if let Some(count) = self.image_nodes.get_mut(&image) {
                    *count = count.saturating_sub(1);
                }
            }
            self.order.retain(|s| *s != slot);
        }
        if self.slots[slot].pods.is_empty() {
            self.remove_slot(name);
        }
    }

    /// The PodDisruptionBudgets.
    pub fn pdbs(&self) -> impl Iterator<Item = &Arc<PodDisruptionBudget>> {
        self.pdbs.values()
    }

    /// Adds or replaces a PodDisruptionBudget.
    pub fn upsert_pdb(&mut self, pdb: Arc<PodDisruptionBudget>) {
        self.pdbs.insert(namespaced_key(&pdb.metadata), pdb);
    }

    /// Forgets a PodDisruptionBudget.
    pub fn remove_pdb(&mut self, namespace: &str, name: &str) {
        self.pdbs.remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// A PersistentVolumeClaim by namespace and name (as assumed, if it is).
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.pvcs.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Adds or replaces a PersistentVolumeClaim seen in the API (see [`AssumeCache::upsert`]).
    pub fn upsert_pvc(&mut self, pvc: Arc<PersistentVolumeClaim>) {
        self.pvcs.upsert(namespaced_key(&pvc.metadata), pvc);
    }

    /// Forgets a PersistentVolumeClaim.
    pub fn remove_pvc(&mut self, namespace: &str, name: &str) {
        self.pvcs.remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Takes a changed copy of a known claim as current until the API says otherwise or
    /// [`Snapshot::restore_pvc`] undoes it.
    pub fn assume_pvc(&mut self, pvc: Arc<PersistentVolumeClaim>) {
        self.pvcs.assume(namespaced_key(&pvc.metadata), pvc);
    }

    /// Undoes an assumed claim: the API's object is current again.
    pub fn restore_pvc(&mut self, namespace: &str, name: &str) {
        self.pvcs.restore(&(namespace.to_owned(), name.to_owned()));
    }

    /// A PersistentVolume by name (as assumed, if it is).
    pub fn pv(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.pvs.get(name)
    }

    /// Every PersistentVolume, by name.
    pub fn pvs(&self) -> impl Iterator<Item = &Arc<PersistentVolume>> {
        self.pvs.values()
    }

    /// Adds or replaces a PersistentVolume seen in the API (see [`AssumeCache::upsert`]).
    pub fn upsert_pv(&mut self, pv: Arc<PersistentVolume>) {
        self.pvs
            .upsert(pv.metadata.name.clone().unwrap_or_default(), pv);
    }

    /// Forgets a PersistentVolume.
    pub fn remove_pv(&mut self, name: &str) {
        self.pvs.remove(name);
    }

    /// Takes a changed copy of a known volume as current until the API says otherwise or
    /// [`Snapshot::restore_pv`] undoes it.
    pub fn assume_pv(&mut self, pv: Arc<PersistentVolume>) {
        self.pvs
            .assume(pv.metadata.name.clone().unwrap_or_default(), pv);
    }

    /// Undoes an assumed volume: the API's object is current again.
    pub fn restore_pv(&mut self, name: &str) {
        self.pvs.restore(name);
    }

    /// A StorageClass by name.
    pub fn storage_class(&self, name: &str) -> Option<&Arc<StorageClass>> {
        self.storage_classes.get(name)
    }

    /// Adds or replaces a StorageClass.
    pub fn upsert_storage_class(&mut self, class: Arc<StorageClass>) {
        let name = class.metadata.name.clone().unwrap_or_default();
        self.storage_classes.insert(name, class);
    }

    /// Forgets a StorageClass.
    pub fn remove_storage_class(&mut self, name: &str) {
        self.storage_classes.remove(name);
    }

    /// Records a namespace's labels.
    pub fn upsert_namespace(&mut self, name: &str, labels: Labels) {
        self.namespaces.insert(name.to_owned(), labels);
    }

    /// Forgets a namespace.
    pub fn remove_namespace(&mut self, name: &str) {
        self.namespaces.remove(name);
    }

    /// Records a pod bound to `node` (from the watch); replaces what was known of it, and
    /// confirms it if the scheduler had assumed it.
    pub fn upsert_bound_pod(&mut self, pod: Arc<Pod>, node: &str) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.remove_pod(&uid);
        let slot = match self.index.get(node) {
            Some(slot) => *slot,
            None => self.insert_slot(NodeInfo::empty(node)),
        };
        self.slots[slot].add_pod(Arc::new(PodInfo::new(pod)));
        self.placed.insert(
            uid,
            PlacedPod {
                node: node.to_owned(),
                assumed: false,
            },
        );
        self.refresh_affinity(node);
    }

    /// Places a pod on a node before its binding is confirmed, so the next pods see it.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        let uid = pod.uid().to_owned();
        self.remove_pod(&uid);
        if let Some(info) = self.info_mut(node) {
            info.add_pod(pod);
            self.placed.insert(
                uid,
                PlacedPod {
                    node: node.to_owned(),
                    assumed: true,
                },
            );
            self.refresh_affinity(node);
        }
    }

    /// Records a workload's selector (`None`: the workload is gone).
    pub fn set_workload(
        &mut self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        selector: Option<WorkloadSelector>,
    ) {
        let key = (namespace.to_owned(), name.to_owned());
        match (kind, selector) {
            (WorkloadKind::Service, Some(WorkloadSelector::Labels(labels))) => {
                self.services.insert(key, labels);
            }
            (WorkloadKind::Service, _) => {
                self.services.remove(&key);
            }
            (kind, Some(selector)) => {
                self.controllers.insert((kind, key.0, key.1), selector);
            }
            (kind, None) => {
                self.controllers.remove(&(kind, key.0, key.1));
            }
        }
    }

    /// The selector upstream's `DefaultSelector` gives a pod: the union of the selectors of the
    /// Services in its namespace that select it, then of the ReplicationController,
    /// ReplicaSet or StatefulSet controlling it (found by the owner reference's name). Empty
    /// when nothing selects it.
    pub fn default_spread_selector(&self, pod: &PodInfo) -> LabelSelector {
        let namespace = pod.namespace();
        let labels = pod.labels();
        let mut set = Labels::new();
        let start = (namespace.to_owned(), String::new());
        for ((ns, _), selector) in self.services.range(start..) {
            if ns != namespace {
                break;
            }
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let owner = pod
            .pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let kind = owner.and_then(|o| match (o.api_version.as_str(), o.kind.as_str()) {
            ("v1", "ReplicationController") => Some(WorkloadKind::ReplicationController),
            ("apps/v1", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("apps/v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            _ => None,
        });
        let controller = owner.zip(kind).and_then(|(o, kind)| {
            self.controllers
                .get(&(kind, namespace.to_owned(), o.name.clone()))
        });
        let mut extra: &[LabelRequirement] = &[];
        match controller {
            Some(WorkloadSelector::Labels(map)) => {
                set.extend(map.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(WorkloadSelector::Selector(Some(selector))) => extra = selector.requirements(),
            _ => {}
        }
        let mut selector = LabelSelector::everything();
        for (key, value) in set {
            if let Ok(r) = LabelRequirement::new(&key, LabelOperator::Equals, vec![value]) {
                selector = selector.with_requirement(r);
            }
        }
        for r in extra {
            selector = selector.with_requirement(r.clone());
        }
        selector
    }

    /// Records that a pending pod is nominated to `node` (replacing an earlier nomination).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        let uid = pod.uid().to_owned();
        self.unnominate(&uid);
        self.nominated.entry(node.to_owned()).or_default().push(pod);
        self.nominated_to.insert(uid, node.to_owned());
    }

    /// Forgets a pod's nomination, if it has one.
    pub fn unnominate(&mut self, uid: &str) {
        let Some(node) = self.nominated_to.remove(uid) else {
            return;
        };
        if let Some(pods) = self.nominated.get_mut(&node) {
            pods.retain(|p| p.uid() != uid);
            if pods.is_empty() {
                self.nominated.remove(&node);
            }
        }
    }

    /// The pods nominated to `node` that a pod of `priority` (uid `uid`) must leave room
    /// for: the others of at least its priority (upstream's `addGENominatedPods`).
    pub fn nominated_for<'a>(
        &'a self,
        node: &str,
        uid: &'a str,
        priority: i32,
    ) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        self.nominated
            .get(node)
            .into_iter()
            .flatten()
            .filter(move |p| p.uid() != uid && p.priority() >= priority)
    }

    /// Whether any pod is nominated anywhere (the common case is none, and filtering then
    /// skips looking).
    pub fn has_nominations(&self) -> bool {
        !self.nominated.is_empty()
    }

    /// Whether the pod is assumed (placed by the scheduler, not yet seen bound).
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.placed.get(uid).is_some_and(|p| p.assumed)
    }

    /// Removes a pod from wherever it is placed.
    pub fn remove_pod(&mut self, uid: &str) {
        let Some(placed) = self.placed.remove(uid) else {
            return;
        };
        let empty = match self.info_mut(&placed.node) {
            Some(info) => {
                info.remove_pod(uid);
                info.node.is_none() && info.pods.is_empty()
            }
            None => false,
        };
        if empty {
            self.remove_slot(&placed.node);
        }
        self.refresh_affinity(&placed.node);
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Builders for plugin tests.
    use super::*;
    use serde_json::{Value, json};

    /// A pod from the JSON of its spec, with name, namespace `default`, uid = name, labels.
    pub fn pod(name: &str, labels: Value, spec: Value) -> Arc<PodInfo> {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("bad test pod: {e}"));
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    /// A node from its name, labels, spec and status JSON.
    pub fn node(name: &str, labels: Value, spec: Value, status: Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": status,
            }))
            .unwrap_or_else(|e| panic!("bad test node: {e}")),
        )
    }

    /// A node with `cpu` cores and `memory` of allocatable and room for 110 pods.
    pub fn sized_node(name: &str, cpu: &str, memory: &str) -> Arc<Node> {
        node(
            name,
            json!({"kubernetes.io/hostname": name}),
            json!({}),
            json!({"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_are_counted_and_uncounted() {
        let mut snapshot = Snapshot::new();
        snapshot.upsert_node(sized_node("n1", "4", "8Gi"));
        let p = pod(
            "a",
            json!({}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}},
                                   "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
        );
        snapshot.assume(p.clone(), "n1");
        assert!(snapshot.is_assumed("a"));
        let n1 = snapshot
            .node("n1")
            .map(|n| (n.requested.milli_cpu, n.used_ports.len()));
        assert_eq!(n1, Some((1000, 1)));
        snapshot.upsert_bound_pod(p.pod.clone(), "n1");
        assert!(!snapshot.is_assumed("a"));
        assert_eq!(snapshot.node("n1").map(|n| n.pods.len()), Some(1));
        snapshot.remove_pod("a");
        let n1 = snapshot
            .node("n1")
            .map(|n| (n.requested.milli_cpu, n.used_ports.len()));
        assert_eq!(n1, Some((0, 0)));
    }

    #[test]
    fn pods_on_unknown_nodes_wait_for_them() {
        let mut snapshot = Snapshot::new();
        let p = pod("a", json!({}), json!({}));
        snapshot.upsert_bound_pod(p.pod.clone(), "later");
        assert_eq!(snapshot.num_nodes(), 0);
        assert!(snapshot.node("later").is_none());
        snapshot.upsert_node(sized_node("later", "1", "1Gi"));
        assert_eq!(snapshot.node("later").map(|n| n.pods.len()), Some(1));
        snapshot.remove_node("later");
        assert_eq!(snapshot.num_nodes(), 0);
        assert!(snapshot.is_placed("a"));
    }

    #[test]
    fn nodes_keep_their_search_order_through_removals() {
        let mut snapshot = Snapshot::new();
        for name in ["a", "b", "c", "d"] {
            snapshot.upsert_node(sized_node(name, "1", "1Gi"));
        }
        // A placeholder for a node not seen yet sits among the slots, outside the order.
        let p = pod("p", json!({}), json!({}));
        snapshot.upsert_bound_pod(p.pod.clone(), "later");
        let names = |s: &Snapshot| s.nodes().map(|n| n.name.clone()).collect::<Vec<_>>();
        // Removing "a" moves the last slot (the placeholder) into its place.
        snapshot.remove_node("a");
        assert_eq!(names(&snapshot), ["b", "c", "d"]);
        assert_eq!(snapshot.node_at(2).map(|n| n.name.as_str()), Some("d"));
        // Removing "b" moves "d", which must stay last in the search order.
        snapshot.remove_node("b");
        assert_eq!(names(&snapshot), ["c", "d"]);
        assert!(snapshot.node("b").is_none());
        // The placeholder still holds its pod and becomes a node when the node shows up.
        snapshot.upsert_node(sized_node("later", "1", "1Gi"));
        assert_eq!(names(&snapshot), ["c", "d", "later"]);
        assert_eq!(snapshot.node("later").map(|n| n.pods.len()), Some(1));
        // A node with pods stays a placeholder when removed, and goes with its last pod.
        snapshot.remove_node("later");
        assert_eq!(snapshot.placed_on("p"), Some("later"));
        snapshot.remove_pod("p");
        assert_eq!(names(&snapshot), ["c", "d"]);
        assert_eq!(snapshot.node("d").map(|n| n.name.as_str()), Some("d"));
        snapshot.upsert_node(sized_node("e", "1", "1Gi"));
        assert_eq!(names(&snapshot), ["c", "d", "e"]);
    }

    #[test]
    fn host_ports_conflict_as_upstream() {
        let any = |port| HostPort {
            ip: "0.0.0.0".into(),
            protocol: "TCP".into(),
            port,
        };
        let on = |ip: &str, port| HostPort {
            ip: ip.into(),
            protocol: "TCP".into(),
            port,
        };
        assert!(any(80).conflicts(&on("10.0.0.1", 80)));
        assert!(!on("10.0.0.2", 80).conflicts(&on("10.0.0.1", 80)));
        assert!(!any(80).conflicts(&any(81)));
        let udp = HostPort {
            protocol: "UDP".into(),
            ..any(80)
        };
        assert!(!udp.conflicts(&any(80)));
    }

    #[test]
    fn image_names_default_to_latest() {
        assert_eq!(normalize_image_name("nginx"), "nginx:latest");
        assert_eq!(
            normalize_image_name("registry:5000/nginx"),
            "registry:5000/nginx:latest"
        );
        assert_eq!(normalize_image_name("nginx:1.27"), "nginx:1.27");
        assert_eq!(normalize_image_name("nginx@sha256:abc"), "nginx@sha256:abc");
    }
}
