//! The scheduling framework: the extension points a plugin may implement (upstream's
//! PreFilter, Filter, PostFilter, PreScore, Score, NormalizeScore), the status they answer
//! with, the per-cycle state they share, and the cycle itself — filter the nodes (stopping at
//! upstream's `percentageOfNodesToScore`), score the feasible ones, pick the best — with the
//! diagnosis that becomes a `FailedScheduling` message.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// The highest score a plugin may give a node after normalisation (upstream's `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// How an extension point answered (upstream's `framework.Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// The pod may go on.
    Success,
    /// Something went wrong that is not the pod's fault; the attempt is retried.
    Error,
    /// The pod does not fit, but preemption might make room.
    Unschedulable,
    /// The pod does not fit and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// The plugin has nothing to do for this pod (PreFilter, PreScore): its later extension
    /// points are skipped for the cycle.
    Skip,
}

/// An extension point's answer: a code, the reasons shown to users, and who said it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The outcome.
    pub code: Code,
    /// Reasons, in upstream's words (`Insufficient cpu`).
    pub reasons: Vec<String>,
    /// The plugin that answered (set by the framework).
    pub plugin: &'static str,
}

impl Status {
    /// Success.
    pub fn success() -> Status {
        Status::new(Code::Success, Vec::new())
    }

    /// Skip (see [`Code::Skip`]).
    pub fn skip() -> Status {
        Status::new(Code::Skip, Vec::new())
    }

    /// A status with a code and reasons.
    pub fn new(code: Code, reasons: Vec<String>) -> Status {
        Status {
            code,
            reasons,
            plugin: "",
        }
    }

    /// Unschedulable for one reason.
    pub fn unschedulable(reason: impl Into<String>) -> Status {
        Status::new(Code::Unschedulable, vec![reason.into()])
    }

    /// Unschedulable and unresolvable for one reason.
    pub fn unresolvable(reason: impl Into<String>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, vec![reason.into()])
    }

    /// An internal error.
    pub fn error(message: impl Into<String>) -> Status {
        Status::new(Code::Error, vec![message.into()])
    }

    /// Whether the code is success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Whether the pod was found not to fit (either unschedulable code).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The reasons joined as upstream's `Status.Message`.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message())
    }
}

/// State plugins keep for one scheduling cycle (upstream's `CycleState`), each under its own
/// key; a plugin's PreFilter writes what its Filter reads.
#[derive(Default)]
pub struct CycleState {
    /// A handful of entries at most, read once per node per plugin: a short list searched
    /// by key beats hashing the key every time.
    data: Vec<(&'static str, Box<dyn StateData>)>,
    /// Plugins whose PreFilter said Skip: their Filter is not run.
    pub(crate) skip_filter: Vec<&'static str>,
    /// Plugins whose PreScore said Skip: their Score is not run.
    pub(crate) skip_score: Vec<&'static str>,
}

/// A value kept in a [`CycleState`]: any cloneable type, so that preemption's dry runs and
/// nominated pods can work on a copy of the state (upstream's `StateData.Clone`).
trait StateData: Any + Send + Sync {
    fn clone_data(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Clone for CycleState {
    fn clone(&self) -> CycleState {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_data()))
                .collect(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
        }
    }
}

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CycleState")
            .field(
                "keys",
                &self.data.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl CycleState {
    /// An empty state.
    pub fn new() -> CycleState {
        CycleState::default()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.data.iter().position(|(k, _)| *k == key)
    }

    /// Stores a value under `key`.
    pub fn write<T: Any + Clone + Send + Sync>(&mut self, key: &'static str, value: T) {
        match self.position(key) {
            Some(i) => self.data[i].1 = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    /// Reads the value under `key`, if it has that type.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.position(key)
            .and_then(|i| self.data[i].1.as_any().downcast_ref())
    }

    /// Changes the value under `key` with `change`; an error status when there is none (a
    /// PreFilter extension run without its PreFilter's state).
    pub fn update<T: Any + Send + Sync>(
        &mut self,
        key: &'static str,
        change: impl FnOnce(&mut T),
    ) -> Status {
        match self.read_mut::<T>(key) {
            Some(value) => {
                change(value);
                Status::success()
            }
            None => Status::error(format!("reading {key:?} from cycleState: not found")),
        }
    }

    /// Reads the value under `key` for changing it.
    pub fn read_mut<T: Any + Send + Sync>(&mut self, key: &'static str) -> Option<&mut T> {
        self.position(key)
            .and_then(|i| self.data[i].1.as_any_mut().downcast_mut())
    }
}

/// What PreFilter may say besides its status: the only nodes worth filtering (upstream's
/// `PreFilterResult.NodeNames`), e.g. when node affinity names nodes by `metadata.name`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// `None`: every node.
    pub node_names: Option<std::collections::BTreeSet<String>>,
}

/// A node's score from one plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeScore<'a> {
    /// The node.
    pub name: &'a str,
    /// The score.
    pub score: i64,
}

/// Cluster events a plugin cares about: when one happens, pods it rejected are tried again
/// (upstream's `EventsToRegister`, without the finer queueing hints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    /// A node was added.
    NodeAdd,
    /// A node's labels, taints, allocatable, conditions or schedulability changed.
    NodeUpdate,
    /// A pod bound to a node was deleted (or finished).
    AssignedPodDelete,
    /// A pod was bound to a node, or an assigned pod's labels changed.
    AssignedPodAdd,
    /// A namespace appeared or its labels changed.
    NamespaceChange,
    /// Anything else of interest (volumes, claims, ...).
    Other,
}

/// What the framework asks of PostFilter (preemption): to free a node for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostFilterResult {
    /// The node the pod is nominated to once victims are gone.
    pub nominated_node: Option<String>,
    /// The pods to evict from it.
    pub victims: Vec<Arc<PodInfo>>,
}

impl PartialEq for PodInfo {
    fn eq(&self, other: &PodInfo) -> bool {
        self.uid() == other.uid()
    }
}
impl Eq for PodInfo {}

/// A scheduling plugin. Each extension point has a default that does nothing, so a plugin
/// implements only its own; which points a profile calls it at is said by [`Plugin::points`].
pub trait Plugin: Send + Sync + fmt::Debug {
    /// The upstream name the plugin is registered and configured under.
    fn name(&self) -> &'static str;

    /// The extension points the plugin implements.
    fn points(&self) -> &'static [Point];

    /// The cluster events that may make a pod it rejected schedulable.
    fn events(&self) -> &'static [ClusterEvent] {
        &[]
    }

    /// Computes what Filter will need for this pod, or rejects it for every node.
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Status, PreFilterResult) {
        (Status::success(), PreFilterResult::default())
    }

    /// PreFilter extension: updates what PreFilter computed as if `other` were placed on
    /// `node` (`delta` 1, upstream's `AddPod`) or gone from it (`delta` -1, `RemovePod`), for
    /// preemption's dry runs and nominated pods.
    fn update_for_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _other: &PodInfo,
        _node: &NodeInfo,
        _snapshot: &Snapshot,
        _delta: i64,
    ) -> Status {
        Status::success()
    }

    /// Whether the pod fits on the node.
    fn filter(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Status {
        Status::success()
    }

    /// Frees room for a pod that fits nowhere (preemption): the nominated node and victims,
    /// or a status saying why not. `statuses` has each node's filter status; `framework` is
    /// the profile, whose filters tell whether the pod would fit once victims are gone.
    fn post_filter(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        _statuses: &BTreeMap<String, Status>,
        _framework: &Framework,
    ) -> (Status, Option<PostFilterResult>) {
        (Status::unschedulable(""), None)
    }

    /// Computes what Score will need for this pod, given the feasible nodes.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[&NodeInfo],
        _snapshot: &Snapshot,
    ) -> Status {
        Status::success()
    }

    /// The node's raw score for the pod.
    fn score(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }

    /// Brings raw scores into `0..=MAX_NODE_SCORE`.
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore<'_>]) {}
}

/// An extension point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// PreFilter.
    PreFilter,
    /// Filter.
    Filter,
    /// PostFilter.
    PostFilter,
    /// PreScore.
    PreScore,
    /// Score (and NormalizeScore).
    Score,
}

/// Divides raw scores so the best is [`MAX_NODE_SCORE`] (and, `reverse`, so that the lowest
/// raw score is best), as upstream's `helper.DefaultNormalizeScore`.
pub fn default_normalize(scores: &mut [NodeScore<'_>], reverse: bool) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = MAX_NODE_SCORE;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut score = MAX_NODE_SCORE * s.score / max;
        if reverse {
            score = MAX_NODE_SCORE - score;
        }
        s.score = score;
    }
}

/// A plugin with its weight in one profile.
#[derive(Clone, Debug)]
pub struct Weighted {
    /// The plugin.
    pub plugin: Arc<dyn Plugin>,
    /// Its score weight (1 when not configured).
    pub weight: i64,
}

/// A scheduling profile: a scheduler name and the plugins at each extension point, in order
/// (upstream's `frameworkImpl`).
#[derive(Clone, Debug)]
pub struct Framework {
    /// The `spec.schedulerName` pods must have for this profile to schedule them.
    pub scheduler_name: String,
    /// PreFilter plugins.
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    /// Filter plugins.
    pub filter: Vec<Arc<dyn Plugin>>,
    /// PostFilter plugins.
    pub post_filter: Vec<Arc<dyn Plugin>>,
    /// PreScore plugins.
    pub pre_score: Vec<Arc<dyn Plugin>>,
    /// Score plugins with weights.
    pub score: Vec<Weighted>,
    /// `percentageOfNodesToScore`: 0 means upstream's adaptive default.
    pub percentage_of_nodes_to_score: u32,
    /// When the profile filters with VolumeBinding: how long its PreBind waits for claims to
    /// be bound (`bindTimeoutSeconds`). The scheduler asks the plugin what to bind once a node
    /// is chosen (its Reserve and PreBind); the plugin itself is not named here, as plugins
    /// build on this module.
    pub volume_bind_timeout: Option<std::time::Duration>,
}

/// Why a pod fits on no node (upstream's `FitError` with its `Diagnosis`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FitError {
    /// The number of nodes considered.
    pub num_all_nodes: usize,
    /// Each rejected node's status.
    pub node_statuses: BTreeMap<String, Status>,
    /// A PreFilter rejection's message (then the node statuses are not listed).
    pub pre_filter_msg: String,
    /// What PostFilter (preemption) said.
    pub post_filter_msg: String,
}

impl fmt::Display for FitError {
    /// Upstream's message: `0/N nodes are available: <count> <reason>, ....` with the reasons
    /// counted across nodes and sorted as strings, then PostFilter's message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        if !self.pre_filter_msg.is_empty() {
            write!(f, " {}.", self.pre_filter_msg)?;
        } else {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for status in self.node_statuses.values() {
                for reason in &status.reasons {
                    *counts.entry(reason.as_str()).or_default() += 1;
                }
            }
            let mut reasons: Vec<String> = counts
                .into_iter()
                .map(|(reason, count)| format!("{count} {reason}"))
                .collect();
            reasons.sort();
            if !reasons.is_empty() {
                write!(f, " {}.", reasons.join(", "))?;
            }
        }
        if !self.post_filter_msg.is_empty() {
            write!(f, " {}.", self.post_filter_msg)?;
        }
        Ok(())
    }
}

/// How a scheduling attempt ended.
#[derive(Debug)]
pub enum Outcome {
    /// The pod goes to this node.
    Suggested {
        /// The chosen node.
        node: String,
        /// How many nodes were evaluated (filtered).
        evaluated: usize,
        /// How many of them fit.
        feasible: usize,
    },
    /// It fits nowhere; preemption may have nominated a node and chosen victims.
    Unschedulable {
        /// Why.
        error: FitError,
        /// Whether any rejection was resolvable (preemption or a cluster change could help),
        /// and the plugins that rejected it.
        rejected_by: Vec<&'static str>,
        /// What preemption decided.
        preemption: Option<PostFilterResult>,
    },
    /// Something failed that is not about fit.
    Error(String),
}

/// Upstream's `numFeasibleNodesToFind`: every node in small clusters, else a share that falls
/// with size (50% − nodes/125, at least 5%) unless configured, and never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: u32, num_all: usize) -> usize {
    const MIN_FEASIBLE: usize = 100;
    const MIN_PERCENTAGE: i64 = 5;
    if num_all < MIN_FEASIBLE || percentage >= 100 {
        return num_all;
    }
    let mut pct = i64::from(percentage);
    if pct == 0 {
        pct = (50 - (num_all as i64) / 125).max(MIN_PERCENTAGE);
    }
    let found = (num_all as i64 * pct / 100) as usize;
    found.max(MIN_FEASIBLE)
}

/// Runs `filters` on one node, stopping at the first rejection.
fn run_filter_list(
    filters: &[&dyn Plugin],
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    for plugin in filters {
        let status = plugin.filter(state, pod, node);
        if !status.is_success() {
            let mut status = status.with_plugin(plugin.name());
            if status.code == Code::Error {
                status.reasons = vec![format!(
                    "running {:?} filter plugin: {}",
                    plugin.name(),
                    status.message()
                )];
            }
            return status;
        }
    }
    Status::success()
}

impl Framework {
    /// Runs the filter plugins on one node, stopping at the first rejection, as upstream's
    /// `RunFilterPlugins`.
    pub fn run_filters(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        run_filter_list(&self.active_filters(state), state, pod, node)
    }

    /// Runs the PreFilter extensions for `other` placed on (`delta` 1) or gone from (`delta`
    /// -1) `node` (upstream's `RunPreFilterExtensionAddPod` / `RemovePod`), skipping the
    /// plugins whose PreFilter said Skip.
    pub fn run_pre_filter_extension(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
        delta: i64,
    ) -> Status {
        for plugin in &self.pre_filter {
            if state.skip_filter.contains(&plugin.name()) {
                continue;
            }
            let status = plugin.update_for_pod(state, pod, other, node, snapshot, delta);
            if !status.is_success() {
                return Status::error(format!(
                    "running {} on PreFilter plugin {:?}: {}",
                    if delta > 0 { "AddPod" } else { "RemovePod" },
                    plugin.name(),
                    status.message()
                ));
            }
        }
        Status::success()
    }

    /// Runs `filters` on one node as upstream's `RunFilterPluginsWithNominatedPods`: where
    /// pods of at least the pod's priority are nominated to the node, the pod must fit beside
    /// them (with the PreFilter state updated for them), and also without them (they may
    /// never come).
    fn filter_node(
        &self,
        filters: &[&dyn Plugin],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.has_nominations() {
            let mut nominated = snapshot
                .nominated_for(&node.name, pod.uid(), pod.priority())
                .peekable();
            if nominated.peek().is_some() {
                let mut with = node.clone();
                let mut with_state = state.clone();
                for other in nominated {
                    with.add_pod(other.clone());
                    let status = self.run_pre_filter_extension(
                        &mut with_state,
                        pod,
                        other,
                        &with,
                        snapshot,
                        1,
                    );
                    if !status.is_success() {
                        return status;
                    }
                }
                let status = run_filter_list(filters, &with_state, pod, &with);
                if !status.is_success() {
                    return status;
                }
            }
        }
        run_filter_list(filters, state, pod, node)
    }

    /// The filter plugins to run this cycle: those whose PreFilter did not say Skip.
    fn active_filters(&self, state: &CycleState) -> Vec<&dyn Plugin> {
        self.filter
            .iter()
            .filter(|p| !state.skip_filter.contains(&p.name()))
            .map(|p| &**p)
            .collect()
    }

    /// One scheduling cycle for `pod` over `snapshot`: PreFilter, Filter from
    /// `*next_start` (round robin across cycles), PostFilter when nothing fits, then PreScore,
    /// Score and host selection. `pick` chooses among equally best nodes (upstream picks at
    /// random).
    pub fn schedule(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        next_start: &mut usize,
        pick: &mut dyn FnMut(usize) -> usize,
    ) -> Outcome {
        let num_all = snapshot.num_nodes();
        let mut state = CycleState::new();
        if num_all == 0 {
            return Outcome::Unschedulable {
                error: FitError {
                    num_all_nodes: 0,
                    ..FitError::default()
                },
                rejected_by: Vec::new(),
                preemption: None,
            };
        }
        // PreFilter.
        let mut allowed: Option<std::collections::BTreeSet<String>> = None;
        // The plugins whose results restricted the nodes (named in the others' status).
        let mut restricted_by: Vec<&'static str> = Vec::new();
        for plugin in &self.pre_filter {
            let (status, result) = plugin.pre_filter(&mut state, pod, snapshot);
            match status.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_filter.push(plugin.name());
                    continue;
                }
                Code::Error => {
                    return Outcome::Error(format!(
                        "running PreFilter plugin {:?}: {}",
                        plugin.name(),
                        status.message()
                    ));
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    let status = status.with_plugin(plugin.name());
                    let node_statuses = snapshot
                        .nodes()
                        .map(|n| (n.name.clone(), status.clone()))
                        .collect();
                    let mut error = FitError {
                        num_all_nodes: num_all,
                        node_statuses,
                        pre_filter_msg: status.message(),
                        post_filter_msg: String::new(),
                    };
                    let preemption = self.run_post_filter(&state, pod, snapshot, &mut error);
                    return Outcome::Unschedulable {
                        error,
                        rejected_by: vec![plugin.name()],
                        preemption,
                    };
                }
            }
            if let Some(names) = result.node_names {
                restricted_by.push(plugin.name());
                allowed = Some(match allowed {
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                    None => names,
                });
            }
        }
        // Filter.
        let filters = self.active_filters(&state);
        let mut statuses: BTreeMap<String, Status> = BTreeMap::new();
        // A node preemption nominated the pod to is tried first, on its own: it is likely the
        // only one with room, and when the pod fits there it goes there (upstream's
        // evaluateNominatedNode).
        if let Some(node) = pod.nominated_node().and_then(|name| snapshot.node(name)) {
            let status = self.filter_node(&filters, &state, pod, node, snapshot);
            if status.is_success() {
                return Outcome::Suggested {
                    node: node.name.clone(),
                    evaluated: 1,
                    feasible: 1,
                };
            }
            if status.code == Code::Error {
                return Outcome::Error(status.message());
            }
        }
        // The nodes to search: the PreFilter result's when it named some (the others are
        // rejected with upstream's reason naming the plugins that narrowed the search), else
        // every node. Either way one search, as upstream's findNodesThatPassFilters: from a
        // rotating start until enough nodes fit.
        let restricted: Option<Vec<&NodeInfo>> = allowed.as_ref().map(|names| {
            let mut plugins = restricted_by.clone();
            plugins.sort_unstable();
            let excluded = Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                plugins.join(" ")
            ))
            .with_plugin(restricted_by.first().copied().unwrap_or_default());
            let mut nodes = Vec::new();
            for node in snapshot.nodes() {
                if names.contains(&node.name) {
                    nodes.push(node);
                } else {
                    statuses.insert(node.name.clone(), excluded.clone());
                }
            }
            nodes
        });
        let num_searched = restricted.as_ref().map_or(num_all, Vec::len);
        let node_at = |i: usize| match &restricted {
            Some(nodes) => nodes.get(i).copied(),
            None => snapshot.node_at(i),
        };
        let wanted = if self.score.is_empty() {
            1
        } else {
            num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, num_searched)
        };
        let mut feasible: Vec<&NodeInfo> = Vec::new();
        let start = if num_searched == 0 {
            0
        } else {
            *next_start % num_searched
        };
        let mut evaluated = 0;
        for i in 0..num_searched {
            if feasible.len() >= wanted {
                break;
            }
            let Some(node) = node_at((start + i) % num_searched) else {
                continue;
            };
            evaluated += 1;
            let status = self.filter_node(&filters, &state, pod, node, snapshot);
            if status.is_success() {
                feasible.push(node);
            } else if status.code == Code::Error {
                return Outcome::Error(status.message());
            } else {
                statuses.insert(node.name.clone(), status);
            }
        }
        *next_start = (*next_start + evaluated) % num_all;
        if feasible.is_empty() {
            let mut rejected_by: Vec<&'static str> = statuses.values().map(|s| s.plugin).collect();
            rejected_by.sort_unstable();
            rejected_by.dedup();
            let mut error = FitError {
                num_all_nodes: num_all,
                node_statuses: statuses,
                pre_filter_msg: String::new(),
                post_filter_msg: String::new(),
            };
            let preemption = self.run_post_filter(&state, pod, snapshot, &mut error);
            return Outcome::Unschedulable {
                error,
                rejected_by,
                preemption,
            };
        }
        if feasible.len() == 1 || self.score.is_empty() {
            return Outcome::Suggested {
                node: feasible[0].name.clone(),
                evaluated,
                feasible: feasible.len(),
            };
        }
        // PreScore and Score.
        for plugin in &self.pre_score {
            let status = plugin.pre_score(&mut state, pod, &feasible, snapshot);
            match status.code {
                Code::Skip => state.skip_score.push(plugin.name()),
                Code::Success => {}
                _ => {
                    return Outcome::Error(format!(
                        "running PreScore plugin {:?}: {}",
                        plugin.name(),
                        status.message()
                    ));
                }
            }
        }
        let mut totals = vec![0i64; feasible.len()];
        let mut scores: Vec<NodeScore> = feasible
            .iter()
            .map(|node| NodeScore {
                name: &node.name,
                score: 0,
            })
            .collect();
        for weighted in &self.score {
            let plugin = &weighted.plugin;
            if state.skip_score.contains(&plugin.name()) {
                continue;
            }
            for (slot, node) in scores.iter_mut().zip(&feasible) {
                match plugin.score(&state, pod, node) {
                    Ok(score) => slot.score = score,
                    Err(status) => {
                        return Outcome::Error(format!(
                            "running Score plugin {:?}: {}",
                            plugin.name(),
                            status.message()
                        ));
                    }
                }
            }
            plugin.normalize(&state, pod, &mut scores);
            for (total, score) in totals.iter_mut().zip(&scores) {
                *total += score.score * weighted.weight;
            }
        }
        let best = totals.iter().copied().max().unwrap_or(0);
        let top: Vec<usize> = (0..totals.len()).filter(|i| totals[*i] == best).collect();
        let chosen = top[pick(top.len()).min(top.len() - 1)];
        Outcome::Suggested {
            node: feasible[chosen].name.clone(),
            evaluated,
            feasible: feasible.len(),
        }
    }

    fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        error: &mut FitError,
    ) -> Option<PostFilterResult> {
        let mut messages = Vec::new();
        for plugin in &self.post_filter {
            let (status, result) =
                plugin.post_filter(state, pod, snapshot, &error.node_statuses, self);
            if status.is_success() {
                return result;
            }
            if !status.message().is_empty() {
                messages.push(status.message());
            }
        }
        error.post_filter_msg = messages.join(", ");
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reasons: &[&str]) -> Status {
        Status::new(
            Code::Unschedulable,
            reasons.iter().map(|r| r.to_string()).collect(),
        )
    }

    #[test]
    fn fit_error_message_is_upstreams() {
        let error = FitError {
            num_all_nodes: 3,
            node_statuses: [
                (
                    "a",
                    status(&["node(s) didn't match Pod's node affinity/selector"]),
                ),
                ("b", status(&["Insufficient cpu"])),
                ("c", status(&["Insufficient cpu", "Insufficient memory"])),
            ]
            .into_iter()
            .map(|(n, s)| (n.to_owned(), s))
            .collect(),
            pre_filter_msg: String::new(),
            post_filter_msg:
                "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling"
                    .to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node \
             affinity/selector, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 \
             Preemption is not helpful for scheduling."
        );
        let none = FitError {
            num_all_nodes: 0,
            ..FitError::default()
        };
        assert_eq!(none.to_string(), "0/0 nodes are available:");
    }

    /// A pod of `priority` asking for `cpu`, nominated to `nominated` if given.
    fn wanting(name: &str, priority: i32, cpu: &str, nominated: Option<&str>) -> Arc<PodInfo> {
        use crate::snapshot::test_util::pod;
        let p = pod(
            name,
            serde_json::json!({}),
            serde_json::json!({"priority": priority,
                   "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}),
        );
        let mut raw = (*p.pod).clone();
        raw.status = Some(k8s_openapi::api::core::v1::PodStatus {
            nominated_node_name: nominated.map(str::to_owned),
            ..Default::default()
        });
        Arc::new(PodInfo::new(Arc::new(raw)))
    }

    fn chosen(outcome: Outcome) -> String {
        match outcome {
            Outcome::Suggested { node, .. } => node,
            other => panic!("not scheduled: {other:?}"),
        }
    }

    #[test]
    fn nominated_pods_keep_their_room_from_lower_priorities() {
        use crate::snapshot::test_util::sized_node;
        let config = crate::config::Config::default_config();
        let Some(fw) = config.profile(crate::config::DEFAULT_SCHEDULER_NAME) else {
            panic!("no default profile");
        };
        let mut snapshot = Snapshot::new();
        snapshot.upsert_node(sized_node("small", "2", "4Gi"));
        snapshot.upsert_node(sized_node("big", "4", "4Gi"));
        // A preemptor of priority 100 is nominated to "big" and needs 3 of its 4 CPUs.
        snapshot.nominate(wanting("preemptor", 100, "3", Some("big")), "big");
        let mut start = 0;
        // Alone, "big" would score best for a 1.5-CPU pod; with the room kept it goes to
        // "small".
        let low = wanting("low", 10, "1500m", None);
        assert_eq!(
            chosen(fw.schedule(&low, &snapshot, &mut start, &mut |_| 0)),
            "small"
        );
        // A pod of higher priority than the nominated one does not leave it room.
        let high = wanting("high", 1000, "1500m", None);
        assert_eq!(
            chosen(fw.schedule(&high, &snapshot, &mut start, &mut |_| 0)),
            "big"
        );
        // When nothing else fits, the low pod is rejected with the nominated pod counted.
        let too_big = wanting("too-big", 10, "2", None);
        snapshot.nominate(wanting("other", 100, "1", Some("small")), "small");
        match fw.schedule(&too_big, &snapshot, &mut start, &mut |_| 0) {
            Outcome::Unschedulable { error, .. } => assert!(
                error
                    .to_string()
                    .starts_with("0/2 nodes are available: 2 Insufficient cpu. preemption:"),
                "{error}"
            ),
            other => panic!("scheduled: {other:?}"),
        }
        // The preemptor itself goes to its nominated node first, though "small" is free now.
        snapshot.unnominate("other");
        let preemptor = wanting("preemptor", 100, "1", Some("big"));
        assert_eq!(
            chosen(fw.schedule(&preemptor, &snapshot, &mut start, &mut |_| 0)),
            "big"
        );
    }

    #[test]
    fn preemption_sees_anti_affinity_go_with_its_victims() {
        use crate::snapshot::test_util::{pod, sized_node};
        use serde_json::json;
        let config = crate::config::Config::default_config();
        let Some(fw) = config.profile(crate::config::DEFAULT_SCHEDULER_NAME) else {
            panic!("no default profile");
        };
        let anti = |labels: serde_json::Value| {
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels},
                 "topologyKey": "kubernetes.io/hostname"}]}})
        };
        for (blocker_spec, incoming_spec) in [
            // The incoming pod's own anti-affinity rules out the node while the victim is there.
            (
                json!({"priority": 1}),
                json!({"priority": 100, "affinity": anti(json!({"app": "db"}))}),
            ),
            // The victim's anti-affinity rules out the incoming pod.
            (
                json!({"priority": 1, "affinity": anti(json!({"app": "web"}))}),
                json!({"priority": 100}),
            ),
        ] {
            let blocker = pod("blocker", json!({"app": "db"}), blocker_spec);
            let snapshot =
                Snapshot::from_nodes([NodeInfo::new(sized_node("n", "4", "8Gi"), [blocker])]);
            let incoming = pod("incoming", json!({"app": "web"}), incoming_spec);
            let mut start = 0;
            match fw.schedule(&incoming, &snapshot, &mut start, &mut |_| 0) {
                Outcome::Unschedulable {
                    preemption: Some(result),
                    ..
                } => {
                    assert_eq!(result.nominated_node.as_deref(), Some("n"));
                    let victims: Vec<&str> = result.victims.iter().map(|v| v.name()).collect();
                    assert_eq!(victims, ["blocker"]);
                }
                other => panic!("no preemption: {other:?}"),
            }
        }
    }

    #[test]
    fn feasible_nodes_to_find_follows_upstream() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 500), 230); // 46%
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500); // 10%
        assert_eq!(num_feasible_nodes_to_find(0, 10000), 500); // 5% floor
        assert_eq!(num_feasible_nodes_to_find(0, 150), 100); // never under 100
        assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
        assert_eq!(num_feasible_nodes_to_find(20, 5000), 1000);
    }

    #[test]
    fn normalisation_scales_to_the_best() {
        let mut scores = vec![
            NodeScore {
                name: "a",
                score: 5,
            },
            NodeScore {
                name: "b",
                score: 10,
            },
            NodeScore {
                name: "c",
                score: 0,
            },
        ];
        default_normalize(&mut scores, false);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [50, 100, 0]
        );
        default_normalize(&mut scores, true);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [50, 0, 100]
        );
    }

    #[test]
    fn volume_binding_rejections_read_as_upstreams() {
        use crate::snapshot::test_util::{pod, sized_node};
        use serde_json::json;
        let config = crate::config::Config::default_config();
        let Some(profile) = config.profile(crate::config::DEFAULT_SCHEDULER_NAME) else {
            panic!("no default profile");
        };
        let mut snapshot = Snapshot::new();
        snapshot.upsert_node(sized_node("n1", "4", "8Gi"));
        snapshot.upsert_node(sized_node("n2", "4", "8Gi"));
        let claim = |name: &str, spec: serde_json::Value| {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
                .unwrap_or_else(|e| panic!("bad claim: {e}")),
            )
        };
        snapshot.upsert_pvc(claim("unbound", json!({"storageClassName": ""})));
        snapshot.upsert_storage_class(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "local"},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}))
            .unwrap_or_else(|e| panic!("bad class: {e}")),
        ));
        snapshot.upsert_pvc(claim("local", json!({"storageClassName": "local"})));
        let using = |name: &str| {
            pod(
                "p",
                json!({}),
                json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": name}}]}),
            )
        };
        for (name, message) in [
            (
                "unbound",
                "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            ),
            (
                "local",
                "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to \
                 bind.",
            ),
        ] {
            let outcome = profile.schedule(&using(name), &snapshot, &mut 0, &mut |_| 0);
            let Outcome::Unschedulable {
                error, rejected_by, ..
            } = outcome
            else {
                panic!("scheduled: {outcome:?}");
            };
            // (PostFilter's preemption message follows.)
            assert!(error.to_string().starts_with(message), "{error}");
            assert_eq!(rejected_by, ["VolumeBinding"]);
        }
    }

    #[test]
    fn nodes_left_out_by_prefilter_name_the_plugin() {
        use crate::snapshot::test_util::{pod, sized_node};
        use serde_json::json;
        let config = crate::config::Config::default_config();
        let Some(profile) = config.profile(crate::config::DEFAULT_SCHEDULER_NAME) else {
            panic!("no default profile");
        };
        let snapshot = Snapshot::from_nodes([
            NodeInfo::new(sized_node("n1", "1", "1Gi"), []),
            NodeInfo::new(sized_node("n2", "4", "4Gi"), []),
        ]);
        let p = pod(
            "p",
            json!({}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
                   "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}),
        );
        let outcome = profile.schedule(&p, &snapshot, &mut 0, &mut |_| 0);
        let Outcome::Unschedulable { error, .. } = outcome else {
            panic!("scheduled: {outcome:?}");
        };
        assert!(
            error.to_string().starts_with(
                "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy \
                 plugin(s) [NodeAffinity]."
            ),
            "{error}"
        );
    }
}
