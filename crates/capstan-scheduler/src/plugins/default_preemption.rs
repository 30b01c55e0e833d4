//! DefaultPreemption: when a pod fits nowhere, find a node where evicting lower-priority pods
//! would make it fit, and the fewest, least important pods to evict there (upstream's
//! PostFilter `DefaultPreemption`).
//!
//! The rules are upstream's:
//! - A pod with `preemptionPolicy: Never` does not preempt; nor does a pod already nominated
//!   to a node where a lower-priority pod is still terminating because the scheduler preempted
//!   it (unless the filters now find that node unresolvable).
//! - Only nodes whose filter status is Unschedulable are tried (never
//!   UnschedulableAndUnresolvable ones).
//! - On each, every pod of lower priority is removed; if the pod then passes the profile's
//!   filters, the removed pods are added back one by one, most important first (priority, then
//!   earliest start), those whose eviction would violate a PodDisruptionBudget before the
//!   others; each one that makes the pod no longer fit stays a victim.
//! - Among the nodes that work, the one chosen has the fewest PDB violations, then the lowest
//!   highest victim priority, then the smallest sum of victim priorities, then the fewest
//!   victims, then the latest earliest start among its highest-priority victims, then the first.
//! - When nothing works the status is upstream's message, e.g. `preemption: 0/3 nodes are
//!   available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for
//!   scheduling.` (the final period is upstream's own: the FitError then prints `..`).
//!
//! Simplified:
//! - Nodes are dry-run in snapshot order from the first (upstream starts at a random offset and
//!   runs in parallel); `minCandidateNodesPercentage`/`minCandidateNodesAbsolute` bound how many
//!   workable nodes are collected before the search stops, as upstream's.
//! - The dry run removes and adds victims in a copy of the node only: this framework has no
//!   PreFilter extensions (AddPod/RemovePod), so a filter whose PreFilter state counts pods
//!   across the cluster (inter-pod affinity, topology spread) still sees the victims, unless
//!   it recounts from the node info it is given (VolumeRestrictions does).
//! - Nominated pods are not considered, there are no extenders, and the plugin only decides:
//!   evicting the victims and clearing other nominations is the caller's work.
//! - A pod without `status.startTime` counts as started after every pod that has one
//!   (upstream takes "now").

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capstan_api::selector::LabelSelector;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::framework::{
    ClusterEvent, Code, CycleState, FitError, Framework, Plugin, Point, PostFilterResult, Status,
};
use crate::snapshot::{Labels, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "DefaultPreemption";
/// Upstream's reason for a node with no pod of lower priority.
pub const REASON_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Upstream's reason for the nodes preemption was not tried on.
pub const REASON_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Upstream's message for a pod that may not preempt.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Upstream's message for a pod whose earlier victims are still terminating.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// What every message of the plugin starts with.
pub const MESSAGE_PREFIX: &str = "preemption: ";
/// Upstream's default `minCandidateNodesPercentage`.
pub const DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE: i32 = 10;
/// Upstream's default `minCandidateNodesAbsolute`.
pub const DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE: i32 = 100;

/// The plugin, with its `DefaultPreemptionArgs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultPreemption {
    /// The share of candidate-able nodes to find workable before stopping (0..=100).
    pub min_candidate_nodes_percentage: i32,
    /// The number of workable nodes to find before stopping, at least.
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemption {
    fn default() -> DefaultPreemption {
        DefaultPreemption {
            min_candidate_nodes_percentage: DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
            min_candidate_nodes_absolute: DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE,
        }
    }
}

fn int_arg(args: Option<&serde_json::Value>, key: &str, default: i32) -> Result<i32, String> {
    match args.and_then(|a| a.get(key)) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(value) => value
            .as_i64()
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| format!("DefaultPreemptionArgs.{key}: expected an int32, got {value}")),
    }
}

/// Joins errors as upstream's aggregate does: one message alone, several (distinct) in
/// brackets.
fn aggregate(errors: &[String]) -> String {
    let mut seen = BTreeSet::new();
    let distinct: Vec<&str> = errors
        .iter()
        .filter(|e| seen.insert(e.as_str()))
        .map(String::as_str)
        .collect();
    match distinct.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl DefaultPreemption {
    /// Reads and validates `DefaultPreemptionArgs` (`minCandidateNodesPercentage`,
    /// `minCandidateNodesAbsolute`), with upstream's defaults and error messages.
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<DefaultPreemption, String> {
        let percentage = int_arg(
            args,
            "minCandidateNodesPercentage",
            DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
        )?;
        let absolute = int_arg(
            args,
            "minCandidateNodesAbsolute",
            DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE,
        )?;
        let mut errors = Vec::new();
        if !(0..=100).contains(&percentage) {
            errors.push(format!(
                "minCandidateNodesPercentage: Invalid value: {percentage}: not in valid range \
                 [0, 100]"
            ));
        }
        if absolute < 0 {
            errors.push(format!(
                "minCandidateNodesAbsolute: Invalid value: {absolute}: not in valid range [0, inf)"
            ));
        }
        if percentage == 0 && absolute == 0 {
            errors.push(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time \
                 as minCandidateNodesAbsolute"
                    .to_owned(),
            );
            errors.push(
                "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time \
                 as minCandidateNodesPercentage"
                    .to_owned(),
            );
        }
        if !errors.is_empty() {
            return Err(aggregate(&errors));
        }
        Ok(DefaultPreemption {
            min_candidate_nodes_percentage: percentage,
            min_candidate_nodes_absolute: absolute,
        })
    }

    /// How many workable nodes to collect out of `nodes` candidate-able ones (upstream's
    /// `calculateNumCandidates`): the configured share, at least the absolute number, at most
    /// all of them.
    pub fn num_candidates(&self, nodes: usize) -> usize {
        let share = nodes * self.min_candidate_nodes_percentage.max(0) as usize / 100;
        share
            .max(self.min_candidate_nodes_absolute.max(0) as usize)
            .min(nodes)
    }

    /// Upstream's `Preempt`, its messages without the `preemption: ` prefix.
    fn preempt(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &BTreeMap<String, Status>,
        framework: &Framework,
    ) -> (Status, Option<PostFilterResult>) {
        if let Err(message) = eligible_to_preempt(pod, snapshot, statuses) {
            return (Status::unschedulable(message), None);
        }
        if snapshot.num_nodes() == 0 {
            return (Status::error("no nodes available"), None);
        }
        let potential: Vec<&NodeInfo> = snapshot
            .nodes()
            .filter(|n| {
                statuses
                    .get(&n.name)
                    .is_some_and(|s| s.code == Code::Unschedulable)
            })
            .collect();
        let run = if potential.is_empty() {
            DryRun::default()
        } else {
            let pdbs: Vec<&PodDisruptionBudget> = snapshot.pdbs().map(Arc::as_ref).collect();
            let wanted = self.num_candidates(potential.len());
            dry_run(framework, state, pod, &potential, &pdbs, wanted, snapshot)
        };
        let Some(best) = pick_one_node(&run.candidates) else {
            if !run.errors.is_empty() {
                return (Status::error(aggregate(&run.errors)), None);
            }
            let message = no_candidate_message(snapshot, run.statuses);
            let clear = PostFilterResult {
                nominated_node: None,
                victims: Vec::new(),
            };
            return (Status::unschedulable(message), Some(clear));
        };
        let chosen = &run.candidates[best];
        let result = PostFilterResult {
            nominated_node: Some(chosen.node.clone()),
            victims: chosen.victims.clone(),
        };
        (Status::success(), Some(result))
    }
}

/// Whether the pod was deleted by the scheduler's preemption and is still terminating: it has
/// a deletion timestamp and its `DisruptionTarget` condition is true for `PreemptionByScheduler`.
pub fn terminating_by_preemption(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

/// Whether the pod may preempt others (upstream's `PodEligibleToPreemptOthers`), or the
/// message saying why not.
pub fn eligible_to_preempt(
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &BTreeMap<String, Status>,
) -> Result<(), &'static str> {
    let spec = pod.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err(NOT_ELIGIBLE_NEVER);
    }
    let Some(nominated) = pod.nominated_node() else {
        return Ok(());
    };
    // A node the filters now find unresolvable (or that no longer exists) frees the pod to
    // preempt elsewhere.
    let unresolvable = statuses
        .get(nominated)
        .is_none_or(|s| s.code == Code::UnschedulableAndUnresolvable);
    if unresolvable {
        return Ok(());
    }
    let priority = pod.priority();
    let waiting = snapshot.node(nominated).is_some_and(|node| {
        node.pods
            .iter()
            .any(|p| p.priority() < priority && terminating_by_preemption(&p.pod))
    });
    if waiting {
        return Err(NOT_ELIGIBLE_TERMINATING);
    }
    Ok(())
}

/// When a pod started, for ordering: pods not started yet come after every started one.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Started<'a> {
    At(&'a Time),
    NotYet,
}

fn started(pod: &PodInfo) -> Started<'_> {
    match pod.pod.status.as_ref().and_then(|s| s.start_time.as_ref()) {
        Some(time) => Started::At(time),
        None => Started::NotYet,
    }
}

/// Orders pods most important first (upstream's `MoreImportantPod`): higher priority, then
/// earlier start.
pub fn more_important_first(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| started(a).cmp(&started(b)))
}

/// A PDB as the violation count needs it.
struct Budget<'a> {
    namespace: &'a str,
    selector: LabelSelector,
    disrupted: Option<&'a BTreeMap<String, Time>>,
    allowed: i64,
}

/// Splits pods (in their order) into those whose eviction would violate a
/// PodDisruptionBudget and the others (upstream's `filterPodsWithPDBViolation`): each pod
/// takes one from the `disruptionsAllowed` of every PDB of its namespace whose selector matches
/// it (a missing or empty selector matches nothing, a pod without labels matches no PDB, and a
/// pod the PDB already lists in `disruptedPods` takes nothing); a budget below zero violates.
pub fn split_by_pdb_violation(
    pods: &[Arc<PodInfo>],
    pdbs: &[&PodDisruptionBudget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut budgets: Vec<Budget<'_>> = pdbs
        .iter()
        .filter_map(|pdb| {
            let selector =
                LabelSelector::from_api(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                    .ok()?;
            if selector.is_empty() || selector.matches_nothing() {
                return None;
            }
            Some(Budget {
                namespace: pdb.metadata.namespace.as_deref().unwrap_or_default(),
                selector,
                disrupted: pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()),
                allowed: pdb
                    .status
                    .as_ref()
                    .map_or(0, |s| i64::from(s.disruptions_allowed)),
            })
        })
        .collect();
    let mut violating = Vec::new();
    let mut non_violating = Vec::new();
    for pod in pods {
        let labels: &Labels = pod.labels();
        let mut violated = false;
        if !labels.is_empty() {
            for budget in budgets.iter_mut() {
                if budget.namespace != pod.namespace() || !budget.selector.matches(labels) {
                    continue;
                }
                if budget.disrupted.is_some_and(|d| d.contains_key(pod.name())) {
                    continue;
                }
                budget.allowed -= 1;
                if budget.allowed < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pod.clone());
        } else {
            non_violating.push(pod.clone());
        }
    }
    (violating, non_violating)
}

/// The fewest pods to evict from `node` for `pod` to pass the profile's filters (upstream's
/// `SelectVictimsOnNode`), most important first, with how many of them violate a PDB; or the
/// status saying why no eviction helps there.
pub fn select_victims_on_node(
    framework: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    pdbs: &[&PodDisruptionBudget],
    snapshot: &Snapshot,
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let priority = pod.priority();
    let (mut potential, kept): (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) = node
        .pods
        .iter()
        .cloned()
        .partition(|p| p.priority() < priority);
    if potential.is_empty() {
        return Err(Status::unresolvable(REASON_NO_VICTIMS));
    }
    let Some(object) = node.node.clone() else {
        return Err(Status::error(format!("node {:?} not found", node.name)));
    };
    let mut info = NodeInfo::new(object, kept);
    // The PreFilter state follows every pod taken away or put back (on a copy: each node's
    // dry run starts from the cycle's state).
    let mut state = state.clone();
    for victim in &potential {
        let status =
            framework.run_pre_filter_extension(&mut state, pod, victim, &info, snapshot, -1);
        if !status.is_success() {
            return Err(status);
        }
    }
    let status = framework.run_filters(&state, pod, &info);
    if !status.is_success() {
        return Err(status);
    }
    potential.sort_by(|a, b| more_important_first(a, b));
    let (violating, non_violating) = split_by_pdb_violation(&potential, pdbs);
    let mut victims = Vec::new();
    let mut reprieve = |candidate: &Arc<PodInfo>, info: &mut NodeInfo| -> bool {
        info.add_pod(candidate.clone());
        let added =
            framework.run_pre_filter_extension(&mut state, pod, candidate, info, snapshot, 1);
        if added.is_success() && framework.run_filters(&state, pod, info).is_success() {
            return true;
        }
        info.remove_pod(candidate.uid());
        if added.is_success() {
            framework.run_pre_filter_extension(&mut state, pod, candidate, info, snapshot, -1);
        }
        victims.push(candidate.clone());
        false
    };
    let mut violations = 0;
    for candidate in &violating {
        if !reprieve(candidate, &mut info) {
            violations += 1;
        }
    }
    for candidate in &non_violating {
        reprieve(candidate, &mut info);
    }
    if !violating.is_empty() && !non_violating.is_empty() {
        victims.sort_by(|a, b| more_important_first(a, b));
    }
    Ok((victims, violations))
}

/// A node preemption would work on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// The pods to evict, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of them violate a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// What the dry run found.
#[derive(Debug, Default)]
pub struct DryRun {
    /// Workable nodes, those without PDB violations first.
    pub candidates: Vec<Candidate>,
    /// Why each other node tried does not work.
    pub statuses: BTreeMap<String, Status>,
    /// Internal errors met.
    pub errors: Vec<String>,
}

/// Tries `nodes` in order (upstream's `DryRunPreemption`), stopping once `wanted` workable
/// nodes are found, one of them without PDB violations.
pub fn dry_run(
    framework: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[&NodeInfo],
    pdbs: &[&PodDisruptionBudget],
    wanted: usize,
    snapshot: &Snapshot,
) -> DryRun {
    let mut non_violating = Vec::new();
    let mut violating = Vec::new();
    let mut statuses = BTreeMap::new();
    let mut errors = Vec::new();
    for node in nodes {
        let status = match select_victims_on_node(framework, state, pod, node, pdbs, snapshot) {
            Ok((victims, pdb_violations)) if !victims.is_empty() => {
                let list = if pdb_violations == 0 {
                    &mut non_violating
                } else {
                    &mut violating
                };
                if list.len() < wanted {
                    list.push(Candidate {
                        node: node.name.clone(),
                        victims,
                        pdb_violations,
                    });
                }
                if !non_violating.is_empty() && non_violating.len() + violating.len() >= wanted {
                    break;
                }
                continue;
            }
            Ok(_) => Status::error(format!(
                "expected at least one victim pod on node {:?}",
                node.name
            )),
            Err(status) => status,
        };
        if status.code == Code::Error {
            errors.push(status.message());
        }
        statuses.insert(node.name.clone(), status);
    }
    non_violating.append(&mut violating);
    DryRun {
        candidates: non_violating,
        statuses,
        errors,
    }
}

/// The best candidate's index (upstream's `pickOneNodeForPreemption`): fewest PDB violations,
/// lowest highest victim priority, smallest sum of victim priorities (each offset by 2^31 so
/// that fewer negative-priority victims still sum lower), fewest victims, latest earliest start
/// among the highest-priority victims, then the first.
pub fn pick_one_node(candidates: &[Candidate]) -> Option<usize> {
    fn keep_best<K: Ord>(remaining: &mut Vec<usize>, key: impl Fn(usize) -> K) {
        let Some(best) = remaining.iter().map(|&i| key(i)).max() else {
            return;
        };
        remaining.retain(|&i| key(i) == best);
    }
    if candidates.is_empty() {
        return None;
    }
    let highest = |c: &Candidate| c.victims.iter().map(|v| v.priority()).max().unwrap_or(0);
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    keep_best(&mut remaining, |i| Reverse(candidates[i].pdb_violations));
    keep_best(&mut remaining, |i| Reverse(highest(&candidates[i])));
    keep_best(&mut remaining, |i| {
        let sum: i64 = candidates[i]
            .victims
            .iter()
            .map(|v| i64::from(v.priority()) + i64::from(i32::MAX) + 1)
            .sum();
        Reverse(sum)
    });
    keep_best(&mut remaining, |i| Reverse(candidates[i].victims.len()));
    keep_best(&mut remaining, |i| {
        let top = highest(&candidates[i]);
        candidates[i]
            .victims
            .iter()
            .filter(|v| v.priority() == top)
            .map(|v| started(v))
            .min()
    });
    remaining.first().copied()
}

/// Upstream's message when no node works: a FitError over every node, those not tried saying
/// preemption is not helpful.
pub fn no_candidate_message(snapshot: &Snapshot, tried: BTreeMap<String, Status>) -> String {
    let mut node_statuses = tried;
    for node in snapshot.nodes() {
        node_statuses
            .entry(node.name.clone())
            .or_insert_with(|| Status::unresolvable(REASON_NOT_HELPFUL));
    }
    FitError {
        num_all_nodes: snapshot.num_nodes(),
        node_statuses,
        pre_filter_msg: String::new(),
        post_filter_msg: String::new(),
    }
    .to_string()
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PostFilter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[]
    }
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &BTreeMap<String, Status>,
        framework: &Framework,
    ) -> (Status, Option<PostFilterResult>) {
        let (mut status, result) = self.preempt(state, pod, snapshot, statuses, framework);
        if !status.message().is_empty() {
            status.reasons = vec![format!("{MESSAGE_PREFIX}{}", status.message())];
        }
        (status, result)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::framework::{Outcome, Weighted};
    use crate::snapshot::test_util::*;

    /// A filter that counts CPU only, as NodeResourcesFit would.
    #[derive(Debug)]
    struct CpuFit;
    impl Plugin for CpuFit {
        fn name(&self) -> &'static str {
            "CpuFit"
        }
        fn points(&self) -> &'static [Point] {
            &[Point::Filter]
        }
        fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
            if node.requested.milli_cpu + pod.requests.milli_cpu > node.allocatable.milli_cpu {
                Status::unschedulable("Insufficient cpu")
            } else {
                Status::success()
            }
        }
    }

    /// A filter that rejects nodes labelled `bad`, unresolvably.
    #[derive(Debug)]
    struct NoBad;
    impl Plugin for NoBad {
        fn name(&self) -> &'static str {
            "NoBad"
        }
        fn points(&self) -> &'static [Point] {
            &[Point::Filter]
        }
        fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
            if node.labels().contains_key("bad") {
                Status::unresolvable("node(s) were bad")
            } else {
                Status::success()
            }
        }
    }

    fn framework(preemption: DefaultPreemption) -> Framework {
        let filter: Vec<Arc<dyn Plugin>> = vec![Arc::new(NoBad), Arc::new(CpuFit)];
        Framework {
            scheduler_name: "default-scheduler".into(),
            pre_filter: Vec::new(),
            filter,
            post_filter: vec![Arc::new(preemption)],
            pre_score: Vec::new(),
            score: Vec::<Weighted>::new(),
            percentage_of_nodes_to_score: 0,
            volume_bind_timeout: None,
        }
    }

    /// A pod of `priority` asking for `cpu`, with labels, started at `start` (seconds).
    fn prio(
        name: &str,
        priority: i32,
        cpu: &str,
        labels: Value,
        start: Option<i64>,
    ) -> Arc<PodInfo> {
        let p = pod(
            name,
            labels,
            json!({"priority": priority,
                   "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}),
        );
        let mut object = (*p.pod).clone();
        if let Some(seconds) = start {
            let status: k8s_openapi::api::core::v1::PodStatus = serde_json::from_value(
                json!({"startTime": format!("2024-01-01T00:{:02}:{:02}Z", seconds / 60, seconds % 60)}),
            )
            .unwrap_or_else(|e| panic!("bad status: {e}"));
            object.status = Some(status);
        }
        Arc::new(PodInfo::new(Arc::new(object)))
    }

    fn low(name: &str, priority: i32, cpu: &str) -> Arc<PodInfo> {
        prio(name, priority, cpu, json!({"app": name}), None)
    }

    fn pdb(name: &str, selector: Value, allowed: i32, disrupted: &[&str]) -> PodDisruptionBudget {
        let disrupted: serde_json::Map<String, Value> = disrupted
            .iter()
            .map(|p| ((*p).to_owned(), json!("2024-01-01T00:00:00Z")))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                       "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
        }))
        .unwrap_or_else(|e| panic!("bad pdb: {e}"))
    }

    fn statuses(fw: &Framework, p: &PodInfo, snapshot: &Snapshot) -> BTreeMap<String, Status> {
        let state = CycleState::new();
        snapshot
            .nodes()
            .map(|n| (n.name.clone(), fw.run_filters(&state, p, n)))
            .filter(|(_, s)| !s.is_success())
            .collect()
    }

    fn names(pods: &[Arc<PodInfo>]) -> Vec<&str> {
        pods.iter().map(|p| p.name()).collect()
    }

    #[test]
    fn args_follow_upstream_defaults_and_validation() {
        type Case = (Option<Value>, Result<(i32, i32), &'static str>);
        let cases: Vec<Case> = vec![
            (None, Ok((10, 100))),
            (Some(json!({})), Ok((10, 100))),
            (
                Some(json!({"minCandidateNodesPercentage": 50})),
                Ok((50, 100)),
            ),
            (
                Some(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 3})),
                Ok((0, 3)),
            ),
            (
                Some(json!({"minCandidateNodesPercentage": 101})),
                Err("minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]"),
            ),
            (
                Some(json!({"minCandidateNodesAbsolute": -1})),
                Err("minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
            ),
            (
                Some(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0})),
                Err(
                    "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same \
                     time as minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: \
                     0: cannot be zero at the same time as minCandidateNodesPercentage]",
                ),
            ),
            (
                Some(json!({"minCandidateNodesPercentage": "ten"})),
                Err(
                    "DefaultPreemptionArgs.minCandidateNodesPercentage: expected an int32, got \"ten\"",
                ),
            ),
        ];
        for (args, want) in cases {
            let got = DefaultPreemption::from_args(args.as_ref()).map(|p| {
                (
                    p.min_candidate_nodes_percentage,
                    p.min_candidate_nodes_absolute,
                )
            });
            assert_eq!(got, want.map_err(str::to_owned), "{args:?}");
        }
    }

    #[test]
    fn candidate_numbers_follow_upstream() {
        let args = |pct, abs| DefaultPreemption {
            min_candidate_nodes_percentage: pct,
            min_candidate_nodes_absolute: abs,
        };
        for (pct, abs, nodes, want) in [
            (10, 100, 50, 50),
            (10, 100, 5000, 500),
            (10, 100, 500, 100),
            (0, 3, 10, 3),
            (50, 0, 10, 5),
            (100, 0, 7, 7),
        ] {
            assert_eq!(
                args(pct, abs).num_candidates(nodes),
                want,
                "{pct} {abs} {nodes}"
            );
        }
    }

    #[test]
    fn eligibility_follows_upstream() {
        let terminating = |name: &str, priority: i32, reason: &str| {
            let p = low(name, priority, "1");
            let mut object = (*p.pod).clone();
            object.metadata.deletion_timestamp =
                serde_json::from_value(json!("2024-01-01T00:00:00Z"))
                    .unwrap_or_else(|e| panic!("{e}"));
            object.status = serde_json::from_value(json!({"conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": reason}]}))
            .unwrap_or_else(|e| panic!("{e}"));
            Arc::new(PodInfo::new(Arc::new(object)))
        };
        let preemptor = |policy: Option<&str>, nominated: Option<&str>| {
            let mut spec = json!({"priority": 10});
            if let Some(policy) = policy {
                spec["preemptionPolicy"] = json!(policy);
            }
            let p = pod("p", json!({}), spec);
            let mut object = (*p.pod).clone();
            if let Some(node) = nominated {
                object.status = serde_json::from_value(json!({"nominatedNodeName": node}))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            PodInfo::new(Arc::new(object))
        };
        let unschedulable = Status::unschedulable("Insufficient cpu");
        let unresolvable = Status::unresolvable("node(s) were bad");
        type Case<'a> = (
            &'a str,
            PodInfo,
            Vec<Arc<PodInfo>>,
            Status,
            Result<(), &'a str>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "plain",
                preemptor(None, None),
                vec![],
                unschedulable.clone(),
                Ok(()),
            ),
            (
                "lower priority only",
                preemptor(Some("PreemptLowerPriority"), None),
                vec![],
                unschedulable.clone(),
                Ok(()),
            ),
            (
                "never",
                preemptor(Some("Never"), None),
                vec![],
                unschedulable.clone(),
                Err(NOT_ELIGIBLE_NEVER),
            ),
            (
                "victim still terminating",
                preemptor(None, Some("n")),
                vec![terminating("v", 1, "PreemptionByScheduler")],
                unschedulable.clone(),
                Err(NOT_ELIGIBLE_TERMINATING),
            ),
            (
                "nominated node now unresolvable",
                preemptor(None, Some("n")),
                vec![terminating("v", 1, "PreemptionByScheduler")],
                unresolvable,
                Ok(()),
            ),
            (
                "terminating for another reason",
                preemptor(None, Some("n")),
                vec![terminating("v", 1, "DeletionByTaintManager")],
                unschedulable.clone(),
                Ok(()),
            ),
            (
                "terminating pod of higher priority",
                preemptor(None, Some("n")),
                vec![terminating("v", 10, "PreemptionByScheduler")],
                unschedulable.clone(),
                Ok(()),
            ),
            (
                "nominated elsewhere",
                preemptor(None, Some("m")),
                vec![terminating("v", 1, "PreemptionByScheduler")],
                unschedulable,
                Ok(()),
            ),
        ];
        for (name, p, pods, status, want) in cases {
            let snapshot = Snapshot::from_nodes([NodeInfo::new(sized_node("n", "4", "8Gi"), pods)]);
            let statuses = [("n".to_owned(), status)].into_iter().collect();
            assert_eq!(
                eligible_to_preempt(&p, &snapshot, &statuses),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn pdb_violations_are_counted_as_upstream() {
        let labelled = |name: &str, app: &str| prio(name, 1, "1", json!({"app": app}), None);
        let web = json!({"matchLabels": {"app": "web"}});
        let pods = vec![
            labelled("a", "web"),
            labelled("b", "web"),
            labelled("c", "db"),
        ];
        let other_ns = {
            let mut p = pdb("x", web.clone(), 0, &[]);
            p.metadata.namespace = Some("other".into());
            p
        };
        let no_selector = {
            let mut p = pdb("x", web.clone(), 0, &[]);
            if let Some(spec) = p.spec.as_mut() {
                spec.selector = None;
            }
            p
        };
        let cases: Vec<(&str, Vec<PodDisruptionBudget>, Vec<&str>)> = vec![
            ("no pdbs", vec![], vec![]),
            (
                "none allowed",
                vec![pdb("x", web.clone(), 0, &[])],
                vec!["a", "b"],
            ),
            (
                "one allowed",
                vec![pdb("x", web.clone(), 1, &[])],
                vec!["b"],
            ),
            ("two allowed", vec![pdb("x", web.clone(), 2, &[])], vec![]),
            (
                "already disrupted",
                vec![pdb("x", web.clone(), 0, &["a"])],
                vec!["b"],
            ),
            ("other namespace", vec![other_ns], vec![]),
            ("empty selector", vec![pdb("x", json!({}), 0, &[])], vec![]),
            ("no selector", vec![no_selector], vec![]),
            (
                "two budgets",
                vec![
                    pdb("x", web.clone(), 5, &[]),
                    pdb(
                        "y",
                        json!({"matchExpressions": [
                        {"key": "app", "operator": "In", "values": ["web", "db"]}]}),
                        1,
                        &[],
                    ),
                ],
                vec!["b", "c"],
            ),
        ];
        for (name, budgets, want) in cases {
            let refs: Vec<&PodDisruptionBudget> = budgets.iter().collect();
            let (violating, non_violating) = split_by_pdb_violation(&pods, &refs);
            assert_eq!(names(&violating), want, "{name}");
            assert_eq!(violating.len() + non_violating.len(), 3, "{name}");
        }
        let unlabelled = vec![prio("u", 1, "1", json!({}), None)];
        let everything = pdb(
            "x",
            json!({"matchExpressions": [
            {"key": "app", "operator": "DoesNotExist"}]}),
            0,
            &[],
        );
        let (violating, _) = split_by_pdb_violation(&unlabelled, &[&everything]);
        assert!(violating.is_empty(), "a pod without labels matches no PDB");
    }

    #[test]
    fn victims_are_the_fewest_least_important_pods() {
        // 4 CPUs: `high` (priority 100) holds 2; `a` (1) and `b` (2) one each; the preemptor
        // (priority 10) needs 1 or 2.
        let node = sized_node("n", "4", "8Gi");
        let pods = || vec![low("high", 100, "2"), low("a", 1, "1"), low("b", 2, "1")];
        let web_a = pdb("x", json!({"matchLabels": {"app": "a"}}), 0, &[]);
        let web_b = pdb("x", json!({"matchLabels": {"app": "b"}}), 0, &[]);
        type Want = Result<(Vec<&'static str>, usize), Status>;
        let cases: Vec<(&str, &str, Vec<&PodDisruptionBudget>, Want)> = vec![
            ("least important goes", "1", vec![], Ok((vec!["a"], 0))),
            ("both go", "2", vec![], Ok((vec!["b", "a"], 0))),
            (
                "pdb-protected pod is reprieved first",
                "1",
                vec![&web_a],
                Ok((vec!["b"], 0)),
            ),
            (
                "protected pod goes when it must",
                "2",
                vec![&web_b],
                Ok((vec!["b", "a"], 1)),
            ),
            (
                "too big even when empty",
                "3",
                vec![],
                Err(Status::unschedulable("Insufficient cpu")),
            ),
        ];
        let fw = framework(DefaultPreemption::default());
        for (name, cpu, budgets, want) in cases {
            let info = NodeInfo::new(node.clone(), pods());
            let preemptor = prio("p", 10, cpu, json!({}), None);
            let got = select_victims_on_node(
                &fw,
                &CycleState::new(),
                &preemptor,
                &info,
                &budgets,
                &Snapshot::new(),
            )
            .map(|(victims, n)| (names(&victims).join(","), n));
            let want = want.map(|(v, n)| (v.join(","), n));
            match (&got, &want) {
                (Err(g), Err(w)) => {
                    assert_eq!((g.code, g.message()), (w.code, w.message()), "{name}");
                }
                _ => assert_eq!(got, want, "{name}"),
            }
        }
        let only_higher = NodeInfo::new(node, [low("high", 100, "4")]);
        let preemptor = prio("p", 10, "1", json!({}), None);
        let status = select_victims_on_node(
            &fw,
            &CycleState::new(),
            &preemptor,
            &only_higher,
            &[],
            &Snapshot::new(),
        );
        assert_eq!(status, Err(Status::unresolvable(REASON_NO_VICTIMS)));
    }

    #[test]
    fn victims_of_equal_priority_go_youngest_first() {
        let info = NodeInfo::new(
            sized_node("n", "2", "8Gi"),
            [
                prio("old", 1, "1", json!({}), Some(10)),
                prio("young", 1, "1", json!({}), Some(20)),
            ],
        );
        let fw = framework(DefaultPreemption::default());
        let preemptor = prio("p", 10, "1", json!({}), None);
        let got = select_victims_on_node(
            &fw,
            &CycleState::new(),
            &preemptor,
            &info,
            &[],
            &Snapshot::new(),
        );
        assert_eq!(
            got.map(|(v, _)| names(&v).join(",")),
            Ok("young".to_owned())
        );
    }

    #[test]
    fn node_choice_follows_upstream_order() {
        let candidate = |node: &str, victims: Vec<Arc<PodInfo>>, pdb_violations: usize| Candidate {
            node: node.into(),
            victims,
            pdb_violations,
        };
        let v = |name: &str, priority: i32, start: Option<i64>| {
            prio(name, priority, "1", json!({}), start)
        };
        let cases: Vec<(&str, Vec<Candidate>, Option<&str>)> = vec![
            ("none", vec![], None),
            (
                "fewest pdb violations",
                vec![
                    candidate("a", vec![v("x", 1, None)], 1),
                    candidate("b", vec![v("y", 5, None)], 0),
                ],
                Some("b"),
            ),
            (
                "lowest highest priority",
                vec![
                    candidate("a", vec![v("x", 5, None)], 0),
                    candidate("b", vec![v("y", 3, None), v("z", 3, None)], 0),
                ],
                Some("b"),
            ),
            (
                "smallest sum",
                vec![
                    candidate("a", vec![v("x", 5, None), v("y", 4, None)], 0),
                    candidate("b", vec![v("z", 5, None), v("w", 1, None)], 0),
                ],
                Some("b"),
            ),
            (
                "negative priorities count by number",
                vec![
                    candidate("a", vec![v("x", -5, None), v("y", -5, None)], 0),
                    candidate("b", vec![v("z", -5, None)], 0),
                ],
                Some("b"),
            ),
            (
                // The lowest priority counts 0 towards the sum, so only the count differs.
                "fewest victims",
                vec![
                    candidate("a", vec![v("x", 2, None), v("y", i32::MIN, None)], 0),
                    candidate("b", vec![v("z", 2, None)], 0),
                ],
                Some("b"),
            ),
            (
                "latest start of the highest-priority victims",
                vec![
                    candidate("a", vec![v("x", 2, Some(50)), v("y", 2, Some(5))], 0),
                    candidate("b", vec![v("z", 2, Some(30)), v("w", 2, Some(40))], 0),
                ],
                Some("b"),
            ),
            (
                "not started counts as latest",
                vec![
                    candidate("a", vec![v("x", 2, Some(50))], 0),
                    candidate("b", vec![v("z", 2, None)], 0),
                ],
                Some("b"),
            ),
            (
                "then the first",
                vec![
                    candidate("a", vec![v("x", 2, Some(5))], 0),
                    candidate("b", vec![v("z", 2, Some(5))], 0),
                ],
                Some("a"),
            ),
        ];
        for (name, candidates, want) in cases {
            let got = pick_one_node(&candidates).map(|i| candidates[i].node.as_str());
            assert_eq!(got, want, "{name}");
        }
    }

    /// Runs the plugin as the framework would after filtering.
    fn run(
        preemption: DefaultPreemption,
        nodes: Vec<NodeInfo>,
        budgets: Vec<PodDisruptionBudget>,
        preemptor: &PodInfo,
    ) -> (Status, Option<PostFilterResult>) {
        let mut snapshot = Snapshot::from_nodes(nodes);
        for budget in budgets {
            snapshot.upsert_pdb(Arc::new(budget));
        }
        let fw = framework(preemption.clone());
        let statuses = statuses(&fw, preemptor, &snapshot);
        preemption.post_filter(&CycleState::new(), preemptor, &snapshot, &statuses, &fw)
    }

    #[test]
    fn post_filter_nominates_the_best_node() {
        let bad = |name: &str, pods: Vec<Arc<PodInfo>>| {
            NodeInfo::new(
                node(
                    name,
                    json!({"bad": "yes"}),
                    json!({}),
                    json!({"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}),
                ),
                pods,
            )
        };
        let preemptor = prio("p", 10, "2", json!({}), None);
        let nodes = vec![
            // Would need its priority-5 pod evicted.
            NodeInfo::new(sized_node("n1", "2", "8Gi"), [low("m1", 5, "2")]),
            // Unresolvable: never tried, even with a cheap victim.
            bad("n2", vec![low("m2", 0, "2")]),
            // The cheapest victims.
            NodeInfo::new(
                sized_node("n3", "2", "8Gi"),
                [low("m3", 1, "1"), low("m4", 1, "1")],
            ),
            // The cheapest victim, but protected by a PDB.
            NodeInfo::new(sized_node("n4", "2", "8Gi"), [low("m5", 0, "2")]),
        ];
        let protect = pdb("x", json!({"matchLabels": {"app": "m5"}}), 0, &[]);
        let (status, result) = run(
            DefaultPreemption::default(),
            nodes,
            vec![protect],
            &preemptor,
        );
        assert!(status.is_success(), "{status}");
        let result = result.unwrap_or_else(|| panic!("no result"));
        assert_eq!(result.nominated_node.as_deref(), Some("n3"));
        assert_eq!(names(&result.victims), ["m3", "m4"]);
    }

    #[test]
    fn post_filter_stops_at_the_wanted_number_of_candidates() {
        let preemptor = prio("p", 10, "1", json!({}), None);
        let nodes = || {
            vec![
                NodeInfo::new(sized_node("n1", "1", "8Gi"), [low("m1", 5, "1")]),
                NodeInfo::new(sized_node("n2", "1", "8Gi"), [low("m2", 1, "1")]),
            ]
        };
        let all = DefaultPreemption::default();
        let one = DefaultPreemption::from_args(Some(
            &json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1}),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        for (name, preemption, want) in [("all", all, "n2"), ("first found", one, "n1")] {
            let (status, result) = run(preemption, nodes(), vec![], &preemptor);
            assert!(status.is_success(), "{name}: {status}");
            let node = result.and_then(|r| r.nominated_node);
            assert_eq!(node.as_deref(), Some(want), "{name}");
        }
    }

    #[test]
    fn post_filter_messages_are_upstreams() {
        let bad = NodeInfo::new(
            node(
                "bad",
                json!({"bad": "yes"}),
                json!({}),
                json!({"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}),
            ),
            [],
        );
        let never = pod(
            "p",
            json!({}),
            json!({"priority": 10, "preemptionPolicy": "Never",
                   "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}),
        );
        let preemptor = prio("p", 10, "2", json!({}), None);
        let full = |name: &str, priority: i32| {
            NodeInfo::new(
                sized_node(name, "2", "8Gi"),
                [low(&format!("{name}-pod"), priority, "2")],
            )
        };
        let too_small = NodeInfo::new(sized_node("small", "1", "8Gi"), [low("s", 1, "1")]);
        type Case = (
            &'static str,
            Vec<NodeInfo>,
            Arc<PodInfo>,
            Code,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "no victims and unresolvable nodes",
                vec![full("n1", 100), bad, full("n3", 100)],
                preemptor.clone(),
                Code::Unschedulable,
                "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, \
                 2 No preemption victims found for incoming pod.",
            ),
            (
                "victims not enough",
                vec![too_small, full("n2", 100)],
                preemptor.clone(),
                Code::Unschedulable,
                "preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 No preemption victims \
                 found for incoming pod.",
            ),
            (
                "never",
                vec![full("n1", 1)],
                never,
                Code::Unschedulable,
                "preemption: not eligible due to preemptionPolicy=Never.",
            ),
        ];
        for (name, nodes, p, code, message) in cases {
            let (status, _) = run(DefaultPreemption::default(), nodes, vec![], &p);
            assert_eq!(
                (status.code, status.message().as_str()),
                (code, message),
                "{name}"
            );
        }
    }

    #[test]
    fn fit_error_prints_upstreams_text() {
        let preemptor = prio("p", 10, "2", json!({}), None);
        let snapshot = Snapshot::from_nodes([
            NodeInfo::new(sized_node("n1", "2", "8Gi"), [low("h1", 100, "2")]),
            NodeInfo::new(sized_node("n2", "2", "8Gi"), [low("h2", 100, "2")]),
        ]);
        let fw = framework(DefaultPreemption::default());
        let outcome = fw.schedule(&preemptor, &snapshot, &mut 0, &mut |_| 0);
        let Outcome::Unschedulable {
            error, preemption, ..
        } = outcome
        else {
            panic!("expected unschedulable, got {outcome:?}");
        };
        assert_eq!(preemption, None);
        assert_eq!(
            error.to_string(),
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: \
             2 No preemption victims found for incoming pod.."
        );
        let snapshot = Snapshot::from_nodes([
            NodeInfo::new(sized_node("n1", "2", "8Gi"), [low("h1", 100, "2")]),
            NodeInfo::new(sized_node("n2", "2", "8Gi"), [low("l2", 1, "2")]),
        ]);
        let outcome = fw.schedule(&preemptor, &snapshot, &mut 0, &mut |_| 0);
        let Outcome::Unschedulable { preemption, .. } = outcome else {
            panic!("expected unschedulable, got {outcome:?}");
        };
        let preemption = preemption.unwrap_or_else(|| panic!("no preemption"));
        assert_eq!(preemption.nominated_node.as_deref(), Some("n2"));
        assert_eq!(names(&preemption.victims), ["l2"]);
    }
}
