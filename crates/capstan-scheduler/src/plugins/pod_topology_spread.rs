//! PodTopologySpread: spreads pods that match a selector evenly across topology domains (the
//! values of a node label), as `spec.topologySpreadConstraints` ask.
//!
//! - `DoNotSchedule` constraints are hard: PreFilter counts, per constraint, the matching pods
//!   in every eligible domain, and Filter rejects a node whose domain would then hold more than
//!   `maxSkew` pods over the least loaded domain (the least count is taken as 0 while there are
//!   fewer eligible domains than `minDomains`). A node without a constraint's topology label
//!   cannot be helped: it is rejected as unresolvable.
//! - `ScheduleAnyway` constraints are soft: PreScore counts the same way, Score sums each
//!   domain's count weighted by `ln(number of domains + 2)` plus `maxSkew - 1`, and
//!   NormalizeScore turns the fewest pods into the best score.
//!
//! A node is eligible for a constraint when it has every constraint's topology label, and, as
//! `nodeAffinityPolicy` (default `Honor`) and `nodeTaintsPolicy` (default `Ignore`) say, when
//! the pod's required node affinity and node selector match it and it has no `NoSchedule` or
//! `NoExecute` taint the pod does not tolerate. Only pods in the incoming pod's namespace that
//! are not terminating count; `matchLabelKeys` add `key=<the pod's value>` to the selector.
//!
//! A pod without constraints of its own gets the default constraints (`PodTopologySpreadArgs`:
//! `defaultingType: System`, the default, gives upstream's `kubernetes.io/hostname` with
//! `maxSkew` 3 and `topology.kubernetes.io/zone` with `maxSkew` 5, both `ScheduleAnyway`;
//! `List` gives `defaultConstraints`), selecting the pods the Services, ReplicationController,
//! ReplicaSet or StatefulSet that select it select (none: no defaults). With the system
//! defaults, scoring does not require a node to have every topology label.
//!
//! The PreFilter counts follow pods added or removed by preemption's dry runs and nominated
//! pods (upstream's `AddPod`/`RemovePod` extensions).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capstan_api::selector::{LabelOperator, LabelRequirement, LabelSelector};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::framework::{
    ClusterEvent, Code, CycleState, MAX_NODE_SCORE, NodeScore, Plugin, Point, PreFilterResult,
    Status,
};
use crate::plugins::{node_affinity, taint_toleration};
use crate::snapshot::{Labels, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "PodTopologySpread";
/// Upstream's reason for a node whose domain would be too skewed.
pub const REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Upstream's reason for a node without a constraint's topology label.
pub const REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The hostname label: domains of one node, counted per node at Score.
const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// The `whenUnsatisfiable` of hard constraints.
const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// The `whenUnsatisfiable` of soft constraints.
const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
/// The node taint effects a `nodeTaintsPolicy: Honor` constraint looks at.
const DO_NOT_SCHEDULE_EFFECTS: &[&str] = &["NoSchedule", "NoExecute"];

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";

/// One spread constraint with its selector parsed and its defaults applied.
#[derive(Clone, Debug)]
pub struct Constraint {
    /// The most the domains may differ by.
    pub max_skew: i32,
    /// The node label whose values are the domains.
    pub topology_key: String,
    /// Which pods count (with `matchLabelKeys` merged in).
    pub selector: LabelSelector,
    /// Below this many eligible domains the least count is taken as 0 (1 when unset).
    pub min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod's required node affinity
    /// and selector match are eligible.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default `Ignore`): only nodes whose `NoSchedule` and
    /// `NoExecute` taints the pod tolerates are eligible.
    pub honor_node_taints: bool,
}

impl Constraint {
    /// Whether the node passes the constraint's inclusion policies for `pod`.
    fn includes(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        if self.honor_node_affinity
            && !node_affinity::pod_matches_node(pod, &node.name, node.labels())
        {
            return false;
        }
        if self.honor_node_taints
            && taint_toleration::first_untolerated(
                node.taints(),
                pod.tolerations(),
                DO_NOT_SCHEDULE_EFFECTS,
            )
            .is_some()
        {
            return false;
        }
        true
    }
}

/// The pod's own constraints with `whenUnsatisfiable` equal to `action`, parsed; an
/// unparsable selector is an error.
pub fn constraints_of(pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, String> {
    let api = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default();
    api.iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| parse_constraint(c, pod.labels()))
        .collect()
}

fn parse_constraint(
    c: &TopologySpreadConstraint,
    pod_labels: &Labels,
) -> Result<Constraint, String> {
    let mut selector = LabelSelector::from_api(c.label_selector.as_ref())
        .map_err(|e| format!("obtaining pod's topology spread constraints: {e}"))?;
    let keys = c.match_label_keys.as_deref().unwrap_or_default();
    let pinned: Vec<(&String, &String)> = keys
        .iter()
        .filter_map(|k| pod_labels.get_key_value(k))
        .collect();
    if !pinned.is_empty() {
        selector = merge_pinned_labels(&pinned, &selector)?;
    }
    let policy = |p: &Option<String>, default: bool| match p.as_deref() {
        None => default,
        Some(value) => value == "Honor",
    };
    Ok(Constraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        selector,
        min_domains: c.min_domains.unwrap_or(1),
        honor_node_affinity: policy(&c.node_affinity_policy, true),
        honor_node_taints: policy(&c.node_taints_policy, false),
    })
}

/// Upstream's merge of `matchLabelKeys`: a selector of the pinned labels plus the
/// requirements of `selector` (none when it is the selector that matches nothing, so the
/// pinned labels alone remain).
fn merge_pinned_labels(
    pinned: &[(&String, &String)],
    selector: &LabelSelector,
) -> Result<LabelSelector, String> {
    let mut merged = LabelSelector::everything();
    for (key, value) in pinned {
        let requirement =
            LabelRequirement::new(key.as_str(), LabelOperator::Equals, vec![(*value).clone()])
                .map_err(|e| format!("merging matchLabelKeys: {e}"))?;
        merged = merged.with_requirement(requirement);
    }
    for requirement in selector.requirements() {
        merged = merged.with_requirement(requirement.clone());
    }
    Ok(merged)
}

/// How many of `pods` are in `namespace`, not terminating, and matched by `selector`.
pub fn count_matching(pods: &[Arc<PodInfo>], selector: &LabelSelector, namespace: &str) -> i64 {
    pods.iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && p.namespace() == namespace
                && selector.matches(p.labels())
        })
        .count() as i64
}

/// Whether the node has the topology label of every constraint.
fn has_all_keys(labels: &Labels, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// What PreFilter computes for the hard constraints: per constraint, the matching pods in
/// each eligible domain.
#[derive(Clone, Debug, Default)]
pub struct SpreadCounts {
    /// The `DoNotSchedule` constraints.
    pub constraints: Vec<Constraint>,
    /// Per constraint: domain (topology value) → matching pods.
    pub counts: Vec<BTreeMap<String, i64>>,
}

impl SpreadCounts {
    /// Counts the pods matching each of `constraints` over every node of the snapshot that has
    /// all their topology labels and passes the constraint's inclusion policies.
    pub fn compute(
        pod: &PodInfo,
        constraints: Vec<Constraint>,
        snapshot: &Snapshot,
    ) -> SpreadCounts {
        let mut counts = vec![BTreeMap::new(); constraints.len()];
        for node in snapshot.nodes() {
            let labels = node.labels();
            if !has_all_keys(labels, &constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !c.includes(pod, node) {
                    continue;
                }
                let Some(value) = labels.get(&c.topology_key) else {
                    continue;
                };
                *counts[i].entry(value.clone()).or_insert(0) +=
                    count_matching(&node.pods, &c.selector, pod.namespace());
            }
        }
        SpreadCounts {
            constraints,
            counts,
        }
    }

    /// Counts `other` on `node`, `delta` times, for the incoming `pod` (upstream's
    /// `updateWithPod`): only a pod of the same namespace, on a node with every topology
    /// label, for the constraints whose selector and inclusion policies it passes.
    pub fn update_with(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace() != pod.namespace() {
            return;
        }
        let labels = node.labels();
        if !has_all_keys(labels, &self.constraints) {
            return;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selector.matches(other.labels()) || !c.includes(pod, node) {
                continue;
            }
            if let (Some(value), Some(domains)) =
                (labels.get(&c.topology_key), self.counts.get_mut(i))
            {
                *domains.entry(value.clone()).or_insert(0) += delta;
            }
        }
    }

    /// The least count over the domains of constraint `i`, or 0 when there are fewer domains
    /// than its `minDomains`.
    fn min_match(&self, i: usize) -> i64 {
        let Some(domains) = self.counts.get(i) else {
            return 0;
        };
        let min_domains = self.constraints.get(i).map_or(1, |c| c.min_domains);
        if (domains.len() as i64) < i64::from(min_domains) {
            return 0;
        }
        domains
            .values()
            .copied()
            .min()
            .unwrap_or(i64::from(i32::MAX))
    }

    /// Whether `pod` may go on `node`: for each constraint, the node has its label and
    /// `count in the node's domain + (1 if the pod matches itself) - least count <= maxSkew`.
    pub fn check(&self, pod: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node.labels();
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                return Status::unresolvable(REASON_NODE_LABEL_NOT_MATCH);
            };
            let min = self.min_match(i);
            let self_match = i64::from(c.selector.matches(pod.labels()));
            let count = self
                .counts
                .get(i)
                .and_then(|d| d.get(value))
                .copied()
                .unwrap_or(0);
            if count + self_match - min > i64::from(c.max_skew) {
                return Status::unschedulable(REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

/// What PreScore computes for the soft constraints.
#[derive(Clone, Debug, Default)]
pub struct SpreadScores {
    /// The `ScheduleAnyway` constraints.
    pub constraints: Vec<Constraint>,
    /// Feasible nodes lacking some constraint's topology label: they score 0.
    pub ignored: BTreeSet<String>,
    /// Per constraint (other than hostname ones, counted per node at Score): domain → matching
    /// pods, for the domains of the feasible nodes.
    pub counts: Vec<BTreeMap<String, i64>>,
    /// Per constraint: `ln(number of domains among the feasible nodes + 2)`.
    pub weights: Vec<f64>,
}

impl SpreadScores {
    /// Upstream's PreScore: the domains come from the feasible `nodes`, the counts from every
    /// node of the snapshot that has all topology labels and passes the inclusion policies.
    pub fn compute(
        pod: &PodInfo,
        constraints: Vec<Constraint>,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
        require_all: bool,
    ) -> SpreadScores {
        let mut ignored = BTreeSet::new();
        let mut counts: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); constraints.len()];
        for node in nodes {
            let labels = node.labels();
            if require_all && !has_all_keys(labels, &constraints) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME_KEY {
                    continue;
                }
                if let Some(value) = labels.get(&c.topology_key) {
                    counts[i].entry(value.clone()).or_insert(0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, domains)| {
                let size = if c.topology_key == HOSTNAME_KEY {
                    nodes.len() - ignored.len()
                } else {
                    domains.len()
                };
                topology_normalizing_weight(size)
            })
            .collect();
        for node in snapshot.nodes() {
            let labels = node.labels();
            if require_all && !has_all_keys(labels, &constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !c.includes(pod, node) {
                    continue;
                }
                let Some(value) = labels.get(&c.topology_key) else {
                    continue;
                };
                if let Some(count) = counts[i].get_mut(value) {
                    *count += count_matching(&node.pods, &c.selector, pod.namespace());
                }
            }
        }
        SpreadScores {
            constraints,
            ignored,
            counts,
            weights,
        }
    }

    /// The node's raw score: per constraint whose label it has, the pods in its domain (on
    /// the node itself for hostname) times the constraint's weight, plus `maxSkew - 1`;
    /// summed and rounded. Ignored nodes score 0.
    pub fn raw_score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        if self.ignored.contains(&node.name) {
            return 0;
        }
        let labels = node.labels();
        let mut score = 0.0;
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == HOSTNAME_KEY {
                count_matching(&node.pods, &c.selector, pod.namespace())
            } else {
                self.counts
                    .get(i)
                    .and_then(|d| d.get(value))
                    .copied()
                    .unwrap_or(0)
            };
            let weight = self.weights.get(i).copied().unwrap_or(0.0);
            score += score_for_count(count, c.max_skew, weight);
        }
        score.round() as i64
    }
}

/// Upstream's weight for a topology with `size` domains: `ln(size + 2)`.
pub fn topology_normalizing_weight(size: usize) -> f64 {
    (size as f64 + 2.0).ln()
}

/// Upstream's per-constraint score: `count * weight + maxSkew - 1`.
pub fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    count as f64 * weight + f64::from(max_skew - 1)
}

/// Upstream's NormalizeScore: ignored nodes get 0; the others
/// `MAX_NODE_SCORE * (max + min - score) / max` over the others' raw scores (all
/// `MAX_NODE_SCORE` when the highest is 0).
pub fn normalize_scores(ignored: &BTreeSet<String>, scores: &mut [NodeScore<'_>]) {
    const INVALID: i64 = -1;
    let mut min = i64::MAX;
    let mut max = 0;
    for s in scores.iter_mut() {
        if ignored.contains(s.name) {
            s.score = INVALID;
            continue;
        }
        min = min.min(s.score);
        max = max.max(s.score);
    }
    for s in scores.iter_mut() {
        if s.score == INVALID {
            s.score = 0;
        } else if max == 0 {
            s.score = MAX_NODE_SCORE;
        } else {
            s.score = MAX_NODE_SCORE * (max + min - s.score) / max;
        }
    }
}

/// A default constraint (`PodTopologySpreadArgs.defaultConstraints`): no selector of its own.
#[derive(Clone, Debug, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DefaultConstraint {
    /// The most the domains may differ by.
    pub max_skew: i32,
    /// The node label whose values are the domains.
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
}

/// The plugin, with the default constraints for pods that have none.
#[derive(Debug)]
pub struct PodTopologySpread {
    defaults: Vec<DefaultConstraint>,
    /// Whether the defaults are the system's (`defaultingType: System`).
    system_defaulted: bool,
}

impl Default for PodTopologySpread {
    fn default() -> PodTopologySpread {
        PodTopologySpread {
            defaults: system_default_constraints(),
            system_defaulted: true,
        }
    }
}

/// Upstream's `systemDefaultConstraints`.
fn system_default_constraints() -> Vec<DefaultConstraint> {
    [(HOSTNAME_KEY, 3), ("topology.kubernetes.io/zone", 5)]
        .into_iter()
        .map(|(key, skew)| DefaultConstraint {
            max_skew: skew,
            topology_key: key.to_owned(),
            when_unsatisfiable: SCHEDULE_ANYWAY.to_owned(),
        })
        .collect()
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawArgs {
    defaulting_type: Option<String>,
    #[serde(default)]
    default_constraints: Vec<DefaultConstraint>,
}

impl PodTopologySpread {
    /// Reads `PodTopologySpreadArgs` (`defaultingType`, `defaultConstraints`), with upstream's
    /// validation of the constraints.
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<PodTopologySpread, String> {
        let raw: RawArgs = match args {
            Some(value) => serde_json::from_value(value.clone())
                .map_err(|e| format!("PodTopologySpreadArgs: {e}"))?,
            None => RawArgs::default(),
        };
        match raw.defaulting_type.as_deref().unwrap_or("System") {
            "System" => {
                if !raw.default_constraints.is_empty() {
                    return Err("defaultConstraints: Invalid value: \"array\": when \
                                .defaultingType is \"System\", .defaultConstraints must be empty"
                        .to_owned());
                }
                Ok(PodTopologySpread::default())
            }
            "List" => {
                for (i, c) in raw.default_constraints.iter().enumerate() {
                    if c.max_skew <= 0 {
                        return Err(format!(
                            "defaultConstraints[{i}].maxSkew: Invalid value: {}: must be \
                             greater than zero",
                            c.max_skew
                        ));
                    }
                    if c.topology_key.is_empty() {
                        return Err(format!(
                            "defaultConstraints[{i}].topologyKey: Required value: can not be empty"
                        ));
                    }
                    if ![DO_NOT_SCHEDULE, SCHEDULE_ANYWAY].contains(&c.when_unsatisfiable.as_str())
                    {
                        return Err(format!(
                            "defaultConstraints[{i}].whenUnsatisfiable: Unsupported value: \
                             \"{}\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                            c.when_unsatisfiable
                        ));
                    }
                }
                Ok(PodTopologySpread {
                    defaults: raw.default_constraints,
                    system_defaulted: false,
                })
            }
            other => Err(format!(
                "defaultingType: Unsupported value: \"{other}\": supported values: \"List\", \
                 \"System\""
            )),
        }
    }

    /// The constraints that apply to `pod` for `action`: its own when it has any, else the
    /// defaults with the selector of the workloads that select it (none when none do).
    fn constraints(
        &self,
        pod: &PodInfo,
        action: &str,
        snapshot: &Snapshot,
    ) -> Result<Vec<Constraint>, String> {
        if Self::has_own(pod) {
            return constraints_of(pod, action);
        }
        let defaults: Vec<&DefaultConstraint> = self
            .defaults
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
            .collect();
        if defaults.is_empty() {
            return Ok(Vec::new());
        }
        let selector = snapshot.default_spread_selector(pod);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        Ok(defaults
            .into_iter()
            .map(|c| Constraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key.clone(),
                selector: selector.clone(),
                min_domains: 1,
                honor_node_affinity: true,
                honor_node_taints: false,
            })
            .collect())
    }

    fn has_own(pod: &PodInfo) -> bool {
        pod.pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty())
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[
            Point::PreFilter,
            Point::Filter,
            Point::PreScore,
            Point::Score,
        ]
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::AssignedPodAdd,
            ClusterEvent::AssignedPodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
        ]
    }

    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, PreFilterResult) {
        let constraints = match self.constraints(pod, DO_NOT_SCHEDULE, snapshot) {
            Ok(c) => c,
            Err(e) => return (Status::error(e), PreFilterResult::default()),
        };
        if constraints.is_empty() {
            return (Status::skip(), PreFilterResult::default());
        }
        state.write(
            PRE_FILTER_KEY,
            SpreadCounts::compute(pod, constraints, snapshot),
        );
        (Status::success(), PreFilterResult::default())
    }

    fn update_for_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        _: &Snapshot,
        delta: i64,
    ) -> Status {
        state.update(PRE_FILTER_KEY, |c: &mut SpreadCounts| {
            c.update_with(pod, other, node, delta);
        })
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<SpreadCounts>(PRE_FILTER_KEY) {
            Some(counts) => counts.check(pod, node),
            None => Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            )),
        }
    }

    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.num_nodes() == 0 {
            return Status::skip();
        }
        let constraints = match self.constraints(pod, SCHEDULE_ANYWAY, snapshot) {
            Ok(c) => c,
            Err(e) => return Status::error(e),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        // Nodes lacking some topology label are left out of scoring, except under the system
        // defaults (upstream's requireAllTopologies).
        let require_all = Self::has_own(pod) || !self.system_defaulted;
        state.write(
            PRE_SCORE_KEY,
            SpreadScores::compute(pod, constraints, nodes, snapshot, require_all),
        );
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        state
            .read::<SpreadScores>(PRE_SCORE_KEY)
            .map(|s| s.raw_score(pod, node))
            .ok_or_else(|| {
                Status::new(
                    Code::Error,
                    vec![format!(
                        "reading {PRE_SCORE_KEY:?} from cycleState: not found"
                    )],
                )
            })
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) {
        if let Some(s) = state.read::<SpreadScores>(PRE_SCORE_KEY) {
            normalize_scores(&s.ignored, scores);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::{node, pod};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    /// A node with these labels (and taints).
    fn labelled(name: &str, labels: Value, taints: Value) -> Arc<k8s_openapi::api::core::v1::Node> {
        node(name, labels, json!({"taints": taints}), json!({}))
    }

    fn zoned(name: &str, zone: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
        labelled(
            name,
            json!({"zone": zone, "kubernetes.io/hostname": name}),
            json!([]),
        )
    }

    /// A pod in `namespace`, optionally terminating.
    fn pod_in(name: &str, namespace: &str, labels: Value, terminating: bool) -> Arc<PodInfo> {
        let mut metadata =
            json!({"name": name, "namespace": namespace, "uid": name, "labels": labels});
        if terminating {
            metadata["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    fn foo(name: &str) -> Arc<PodInfo> {
        pod(name, json!({"foo": ""}), json!({}))
    }

    fn constraint(skew: i32, key: &str, action: &str) -> Value {
        json!({
            "maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": action,
            "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]},
        })
    }

    fn incoming(constraints: Value, extra: Value) -> Arc<PodInfo> {
        let mut spec = extra;
        spec["topologySpreadConstraints"] = constraints;
        pod("p", json!({"foo": ""}), spec)
    }

    type Layout = Vec<(Arc<k8s_openapi::api::core::v1::Node>, Vec<Arc<PodInfo>>)>;

    fn snapshot(layout: Layout) -> Snapshot {
        Snapshot::from_nodes(layout.into_iter().map(|(n, pods)| NodeInfo::new(n, pods)))
    }

    /// Runs PreFilter and Filter on every node: the PreFilter code and, per node, the filter
    /// outcome ("" when it fits, else the reason).
    fn run_filter(pod: &PodInfo, snap: &Snapshot) -> (Code, Vec<(String, String)>) {
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::new();
        let (status, _) = plugin.pre_filter(&mut state, pod, snap);
        if status.code != Code::Success {
            return (status.code, Vec::new());
        }
        let results = snap
            .nodes()
            .map(|n| {
                let s = plugin.filter(&state, pod, n);
                (
                    n.name.clone(),
                    s.reasons.first().cloned().unwrap_or_default(),
                )
            })
            .collect();
        (status.code, results)
    }

    fn fits(results: &[(String, String)]) -> Vec<&str> {
        results
            .iter()
            .filter(|(_, r)| r.is_empty())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    #[test]
    fn pre_filter_skips_without_hard_constraints() {
        let snap = snapshot(vec![(zoned("n1", "z1"), vec![])]);
        let none = pod("p", json!({}), json!({}));
        assert_eq!(run_filter(&none, &snap).0, Code::Skip);
        let soft = incoming(json!([constraint(1, "zone", SCHEDULE_ANYWAY)]), json!({}));
        assert_eq!(run_filter(&soft, &snap).0, Code::Skip);
    }

    #[test]
    fn filter_cases() {
        struct Case {
            name: &'static str,
            pod: Arc<PodInfo>,
            layout: Layout,
            fits: Vec<&'static str>,
        }
        let cases = vec![
            Case {
                name: "zone skew: zone1 has 2, zone2 has 1",
                pod: incoming(json!([constraint(1, "zone", DO_NOT_SCHEDULE)]), json!({})),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z1"), vec![foo("b")]),
                    (zoned("n3", "z2"), vec![foo("c")]),
                ],
                fits: vec!["n3"],
            },
            Case {
                name: "maxSkew 2 tolerates it",
                pod: incoming(json!([constraint(2, "zone", DO_NOT_SCHEDULE)]), json!({})),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z1"), vec![foo("b")]),
                    (zoned("n3", "z2"), vec![foo("c")]),
                ],
                fits: vec!["n1", "n2", "n3"],
            },
            Case {
                name: "pod not matching its own selector does not count itself",
                pod: pod(
                    "p",
                    json!({}),
                    json!({"topologySpreadConstraints": [constraint(1, "zone", DO_NOT_SCHEDULE)]}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a"), foo("b")]),
                    (zoned("n2", "z2"), vec![foo("c")]),
                ],
                // 2 + 0 - 1 <= 1: with itself counted n1 would be 2 over.
                fits: vec!["n1", "n2"],
            },
            Case {
                name: "minDomains above the domain count makes the minimum 0",
                pod: incoming(
                    json!([{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "minDomains": 3,
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]),
                    json!({}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z2"), vec![foo("b")]),
                ],
                // 1 + 1 - 0 > 1 in both zones.
                fits: vec![],
            },
            Case {
                name: "minDomains reached: the minimum is the real one",
                pod: incoming(
                    json!([{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "minDomains": 2,
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]),
                    json!({}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z2"), vec![foo("b")]),
                ],
                fits: vec!["n1", "n2"],
            },
            Case {
                name: "other namespaces and terminating pods do not count",
                pod: incoming(json!([constraint(1, "zone", DO_NOT_SCHEDULE)]), json!({})),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![
                            pod_in("x", "other", json!({"foo": ""}), false),
                            pod_in("y", "default", json!({"foo": ""}), true),
                            pod_in("z", "other", json!({"foo": ""}), false),
                        ],
                    ),
                    (zoned("n2", "z2"), vec![foo("a")]),
                ],
                fits: vec!["n1"],
            },
            Case {
                name: "nodeAffinityPolicy Honor (default) leaves unselected nodes out",
                pod: incoming(
                    json!([constraint(1, "zone", DO_NOT_SCHEDULE)]),
                    json!({"nodeSelector": {"zone": "z1"}}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![]),
                ],
                // Only zone1 is a domain, holding 1: 1 + 1 - 1 <= 1 everywhere.
                fits: vec!["n1", "n2", "n3"],
            },
            Case {
                name: "nodeAffinityPolicy Ignore counts every node",
                pod: incoming(
                    json!([{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "nodeAffinityPolicy": "Ignore",
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]),
                    json!({"nodeSelector": {"zone": "z1"}}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![]),
                ],
                fits: vec!["n3"],
            },
            Case {
                name: "nodeTaintsPolicy Ignore (default) counts tainted nodes",
                pod: incoming(json!([constraint(1, "zone", DO_NOT_SCHEDULE)]), json!({})),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (
                        labelled(
                            "n2",
                            json!({"zone": "z2"}),
                            json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
                        ),
                        vec![],
                    ),
                ],
                fits: vec!["n2"],
            },
            Case {
                name: "nodeTaintsPolicy Honor leaves untolerated tainted nodes out",
                pod: incoming(
                    json!([{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "nodeTaintsPolicy": "Honor",
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]),
                    json!({}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (
                        labelled(
                            "n2",
                            json!({"zone": "z2"}),
                            json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
                        ),
                        vec![],
                    ),
                ],
                fits: vec!["n1", "n2"],
            },
            Case {
                name: "nodeTaintsPolicy Honor counts tolerated tainted nodes",
                pod: incoming(
                    json!([{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "nodeTaintsPolicy": "Honor",
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]),
                    json!({"tolerations": [{"key": "k", "operator": "Exists"}]}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (
                        labelled(
                            "n2",
                            json!({"zone": "z2"}),
                            json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
                        ),
                        vec![],
                    ),
                ],
                fits: vec!["n2"],
            },
            Case {
                name: "matchLabelKeys narrows the selector to the pod's own value",
                pod: pod(
                    "p",
                    json!({"foo": "", "hash": "new"}),
                    json!({"topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                        "matchLabelKeys": ["hash"],
                        "labelSelector": {"matchLabels": {"foo": ""}},
                    }]}),
                ),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![
                            pod("a", json!({"foo": "", "hash": "old"}), json!({})),
                            pod("b", json!({"foo": "", "hash": "old"}), json!({})),
                        ],
                    ),
                    (
                        zoned("n2", "z2"),
                        vec![pod("c", json!({"foo": "", "hash": "new"}), json!({}))],
                    ),
                ],
                fits: vec!["n1"],
            },
            Case {
                name: "nodes lacking a topology key are not domains",
                pod: incoming(
                    json!([
                        constraint(1, "zone", DO_NOT_SCHEDULE),
                        constraint(1, "kubernetes.io/hostname", DO_NOT_SCHEDULE),
                    ]),
                    json!({}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("a")]),
                    (zoned("n2", "z2"), vec![]),
                    (
                        labelled("n3", json!({"zone": "z3"}), json!([])),
                        vec![foo("b")],
                    ),
                ],
                fits: vec!["n2"],
            },
        ];
        for case in cases {
            let snap = snapshot(case.layout);
            let (code, results) = run_filter(&case.pod, &snap);
            assert_eq!(code, Code::Success, "{}", case.name);
            assert_eq!(fits(&results), case.fits, "{}", case.name);
            for (n, reason) in &results {
                if !reason.is_empty() && n != "n3" {
                    assert_eq!(reason, REASON_CONSTRAINTS_NOT_MATCH, "{}: {n}", case.name);
                }
            }
        }
    }

    #[test]
    fn missing_label_is_unresolvable_and_skew_unschedulable() {
        let p = incoming(json!([constraint(1, "zone", DO_NOT_SCHEDULE)]), json!({}));
        let snap = snapshot(vec![
            (zoned("n1", "z1"), vec![foo("a"), foo("b")]),
            (zoned("n2", "z2"), vec![]),
            (labelled("n3", json!({}), json!([])), vec![]),
        ]);
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::new();
        assert!(plugin.pre_filter(&mut state, &p, &snap).0.is_success());
        let status = |name: &str| {
            snap.node(name)
                .map(|n| plugin.filter(&state, &p, n))
                .unwrap_or_else(|| panic!("no node {name}"))
        };
        assert_eq!(
            status("n1"),
            Status::unschedulable(REASON_CONSTRAINTS_NOT_MATCH)
        );
        assert!(status("n2").is_success());
        assert_eq!(
            status("n3"),
            Status::unresolvable(REASON_NODE_LABEL_NOT_MATCH)
        );
    }

    #[test]
    fn nil_selector_with_match_label_keys_matches_the_pinned_labels() {
        let p = pod(
            "p",
            json!({"hash": "h"}),
            json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                "matchLabelKeys": ["hash"],
            }]}),
        );
        let cs = constraints_of(&p, DO_NOT_SCHEDULE).unwrap();
        assert!(cs[0].selector.matches(p.labels()));
        let nil = pod(
            "q",
            json!({"hash": "h"}),
            json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
            }]}),
        );
        let cs = constraints_of(&nil, DO_NOT_SCHEDULE).unwrap();
        assert!(!cs[0].selector.matches(nil.labels()));
    }

    /// Runs PreScore, Score and NormalizeScore over every node of the snapshot as feasible.
    fn run_score(pod: &PodInfo, snap: &Snapshot) -> Option<Vec<(String, i64, i64)>> {
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::new();
        let nodes: Vec<&NodeInfo> = snap.nodes().collect();
        let status = plugin.pre_score(&mut state, pod, &nodes, snap);
        if status.code == Code::Skip {
            return None;
        }
        assert!(status.is_success(), "{status}");
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: &n.name,
                score: plugin.score(&state, pod, n).unwrap(),
            })
            .collect();
        let raw: Vec<i64> = scores.iter().map(|s| s.score).collect();
        plugin.normalize(&state, pod, &mut scores);
        Some(
            scores
                .into_iter()
                .zip(raw)
                .map(|(s, r)| (s.name.to_owned(), r, s.score))
                .collect(),
        )
    }

    fn hosts(names: &[&str]) -> Vec<Arc<k8s_openapi::api::core::v1::Node>> {
        names
            .iter()
            .map(|n| labelled(n, json!({"kubernetes.io/hostname": n}), json!([])))
            .collect()
    }

    #[test]
    fn score_cases() {
        struct Case {
            name: &'static str,
            pod: Arc<PodInfo>,
            layout: Layout,
            /// (node, raw, normalised)
            want: Vec<(&'static str, i64, i64)>,
        }
        let h = hosts(&["a", "b", "c"]);
        let cases = vec![
            Case {
                name: "hostname, maxSkew 1: ln(5) per pod",
                pod: incoming(
                    json!([constraint(1, "kubernetes.io/hostname", SCHEDULE_ANYWAY)]),
                    json!({}),
                ),
                layout: vec![
                    (h[0].clone(), vec![foo("x"), foo("y")]),
                    (h[1].clone(), vec![foo("z")]),
                    (h[2].clone(), vec![]),
                ],
                // 2*1.609=3.22 -> 3, 1.609 -> 2, 0; normalised 100*(3+0-s)/3.
                want: vec![("a", 3, 0), ("b", 2, 33), ("c", 0, 100)],
            },
            Case {
                name: "hostname, maxSkew 2 adds 1",
                pod: incoming(
                    json!([constraint(2, "kubernetes.io/hostname", SCHEDULE_ANYWAY)]),
                    json!({}),
                ),
                layout: vec![
                    (h[0].clone(), vec![foo("x"), foo("y")]),
                    (h[1].clone(), vec![foo("z")]),
                    (h[2].clone(), vec![]),
                ],
                want: vec![("a", 4, 25), ("b", 3, 50), ("c", 1, 100)],
            },
            Case {
                name: "zone: nodes lacking the label are ignored and get 0",
                pod: incoming(json!([constraint(1, "zone", SCHEDULE_ANYWAY)]), json!({})),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("x"), foo("y")]),
                    (zoned("n2", "z1"), vec![foo("z")]),
                    (zoned("n3", "z2"), vec![]),
                    (labelled("n4", json!({}), json!([])), vec![foo("w")]),
                ],
                // Two zones: weight ln(4); zone1 holds 3: 3*1.386=4.16 -> 4.
                want: vec![("n1", 4, 0), ("n2", 4, 0), ("n3", 0, 100), ("n4", 0, 0)],
            },
            Case {
                name: "no matching pods anywhere: all best",
                pod: incoming(json!([constraint(1, "zone", SCHEDULE_ANYWAY)]), json!({})),
                layout: vec![(zoned("n1", "z1"), vec![]), (zoned("n2", "z2"), vec![])],
                want: vec![("n1", 0, 100), ("n2", 0, 100)],
            },
            Case {
                name: "two constraints add up",
                pod: incoming(
                    json!([
                        constraint(1, "zone", SCHEDULE_ANYWAY),
                        constraint(1, "kubernetes.io/hostname", SCHEDULE_ANYWAY),
                    ]),
                    json!({}),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![foo("x")]),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![]),
                ],
                // zone weight ln(4)=1.386, host weight ln(5)=1.609:
                // n1 1.386+1.609=3.0 -> 3; n2 1.386 -> 1; n3 0.
                want: vec![("n1", 3, 0), ("n2", 1, 66), ("n3", 0, 100)],
            },
            Case {
                name: "hard constraints do not score",
                pod: incoming(json!([constraint(1, "zone", DO_NOT_SCHEDULE)]), json!({})),
                layout: vec![(zoned("n1", "z1"), vec![])],
                want: vec![],
            },
        ];
        for case in cases {
            let snap = snapshot(case.layout);
            let got = run_score(&case.pod, &snap);
            let want: Vec<(String, i64, i64)> = case
                .want
                .iter()
                .map(|(n, r, s)| (n.to_string(), *r, *s))
                .collect();
            match got {
                None => assert!(want.is_empty(), "{}: skipped", case.name),
                Some(got) => assert_eq!(got, want, "{}", case.name),
            }
        }
    }

    /// A pod labelled `app=web` controlled by the ReplicaSet `web` (when `owned`).
    fn web_pod(name: &str, owned: bool, spec: Value) -> Arc<PodInfo> {
        let p = pod(name, json!({"app": "web", "pod-template-hash": "1"}), spec);
        let mut raw = (*p.pod).clone();
        if owned {
            raw.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                    "uid": "rs-uid", "controller": true,
                }))
                .unwrap(),
            ]);
        }
        Arc::new(PodInfo::new(Arc::new(raw)))
    }

    fn with_web_workloads(snap: &mut Snapshot) {
        use crate::snapshot::{WorkloadKind, WorkloadSelector};
        let rs = LabelSelector::from_api(Some(
            &serde_json::from_value(
                json!({"matchLabels": {"app": "web", "pod-template-hash": "1"}}),
            )
            .unwrap(),
        ))
        .ok();
        snap.set_workload(
            WorkloadKind::ReplicaSet,
            "default",
            "web",
            Some(WorkloadSelector::Selector(rs)),
        );
        let service = |selector: Value| {
            Some(WorkloadSelector::Labels(
                serde_json::from_value(selector).unwrap(),
            ))
        };
        // Selects the pod: its selector joins. Does not select it, or in another namespace:
        // left out.
        snap.set_workload(
            WorkloadKind::Service,
            "default",
            "web",
            service(json!({"app": "web"})),
        );
        snap.set_workload(
            WorkloadKind::Service,
            "default",
            "db",
            service(json!({"app": "db"})),
        );
        snap.set_workload(
            WorkloadKind::Service,
            "other",
            "web",
            service(json!({"tier": "x"})),
        );
    }

    #[test]
    fn default_selector_joins_services_and_the_controller() {
        let mut snap = Snapshot::new();
        let p = web_pod("p", true, json!({}));
        assert!(snap.default_spread_selector(&p).is_empty());
        with_web_workloads(&mut snap);
        assert_eq!(
            snap.default_spread_selector(&p).to_string(),
            "app=web,app=web,pod-template-hash=1"
        );
        // Without an owner only the Service counts.
        let orphan = web_pod("q", false, json!({}));
        assert_eq!(snap.default_spread_selector(&orphan).to_string(), "app=web");
    }

    #[test]
    fn system_defaults_spread_a_workloads_pods_over_hosts() {
        let h = hosts(&["a", "b", "c"]);
        let mut snap = snapshot(vec![
            (
                h[0].clone(),
                vec![
                    web_pod("w1", true, json!({})),
                    web_pod("w2", true, json!({})),
                ],
            ),
            (h[1].clone(), vec![web_pod("w3", true, json!({}))]),
            (h[2].clone(), vec![]),
        ]);
        let p = web_pod("p", true, json!({}));
        // Nothing selects the pod yet: no default constraints.
        assert_eq!(run_score(&p, &snap), None);
        with_web_workloads(&mut snap);
        // Hostname, maxSkew 3, weight ln(3 + 2); the nodes lack the zone label, which under
        // the system defaults leaves them scored rather than ignored: 2*1.609+2 -> 5,
        // 1.609+2 -> 4, 2; normalised 100*(5+2-s)/5.
        assert_eq!(
            run_score(&p, &snap),
            Some(vec![
                ("a".to_owned(), 5, 40),
                ("b".to_owned(), 4, 60),
                ("c".to_owned(), 2, 100)
            ])
        );
        // A pod with constraints of its own does not get the defaults.
        let own = web_pod(
            "own",
            true,
            json!({"topologySpreadConstraints": [constraint(1, "zone", DO_NOT_SCHEDULE)]}),
        );
        assert_eq!(run_score(&own, &snap), None);
    }

    #[test]
    fn listed_defaults_are_validated_and_used() {
        let system_with_list = PodTopologySpread::from_args(Some(&json!({
            "defaultingType": "System",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                    "whenUnsatisfiable": "DoNotSchedule"}],
        })));
        assert!(system_with_list.is_err());
        let bad = PodTopologySpread::from_args(Some(&json!({
            "defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                    "whenUnsatisfiable": "DoNotSchedule"}],
        })));
        assert!(bad.is_err());
        let Ok(plugin) = PodTopologySpread::from_args(Some(&json!({
            "defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                    "whenUnsatisfiable": "DoNotSchedule"}],
        }))) else {
            panic!("valid arguments refused");
        };
        let h = hosts(&["a", "b"]);
        let mut snap = snapshot(vec![
            (h[0].clone(), vec![web_pod("w1", true, json!({}))]),
            (h[1].clone(), vec![]),
        ]);
        with_web_workloads(&mut snap);
        let p = web_pod("p", true, json!({}));
        let mut state = CycleState::new();
        let (status, _) = plugin.pre_filter(&mut state, &p, &snap);
        assert!(status.is_success(), "{status}");
        let a = snap.node("a").map(|n| plugin.filter(&state, &p, n));
        assert_eq!(
            a.map(|s| s.message()),
            Some(REASON_CONSTRAINTS_NOT_MATCH.to_owned())
        );
        let b = snap.node("b").map(|n| plugin.filter(&state, &p, n));
        assert!(b.is_some_and(|s| s.is_success()));
    }

    #[test]
    fn score_counts_domains_of_feasible_nodes_only() {
        // n3 (zone z2) is not feasible: zone z2 is no domain, so its pods are not counted and
        // the weight is ln(1 + 2).
        let p = incoming(json!([constraint(1, "zone", SCHEDULE_ANYWAY)]), json!({}));
        let snap = snapshot(vec![
            (zoned("n1", "z1"), vec![foo("x"), foo("y")]),
            (zoned("n2", "z1"), vec![]),
            (zoned("n3", "z2"), vec![foo("z")]),
        ]);
        let feasible: Vec<&NodeInfo> = snap.nodes().filter(|n| n.name != "n3").collect();
        let constraints = constraints_of(&p, SCHEDULE_ANYWAY).unwrap();
        let scores = SpreadScores::compute(&p, constraints, &feasible, &snap, true);
        assert_eq!(scores.counts[0], BTreeMap::from([("z1".to_owned(), 2)]));
        assert!((scores.weights[0] - 3f64.ln()).abs() < 1e-9);
    }

    #[test]
    fn normalisation_follows_upstream() {
        let mut scores = vec![
            NodeScore {
                name: "a",
                score: 10,
            },
            NodeScore {
                name: "b",
                score: 4,
            },
            NodeScore {
                name: "c",
                score: 7,
            },
            NodeScore {
                name: "d",
                score: 99,
            },
        ];
        let ignored = BTreeSet::from(["d".to_owned()]);
        normalize_scores(&ignored, &mut scores);
        // 100*(10+4-s)/10
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [40, 100, 70, 0]
        );
    }
}
