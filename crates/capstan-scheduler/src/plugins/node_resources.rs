//! NodeResourcesFit and NodeResourcesBalancedAllocation: whether a pod's requests fit in what
//! a node has left (pods, CPU, memory, ephemeral storage, extended resources), and how to rank
//! the nodes that fit — least allocated (upstream's default), most allocated or a requested-
//! to-capacity curve; and balanced use of CPU and memory.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::framework::{ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, Point, Status};
use crate::resource::{self, CPU, EPHEMERAL_STORAGE, MEMORY, Resource};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// NodeResourcesFit's registered name.
pub const FIT: &str = "NodeResourcesFit";
/// NodeResourcesBalancedAllocation's registered name.
pub const BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
/// Upstream's reason for a node at its pod limit.
pub const TOO_MANY_PODS: &str = "Too many pods";

/// A resource and its weight in a score.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct ResourceSpec {
    /// The resource name.
    pub name: String,
    /// Its weight (1 when unset).
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: CPU.to_owned(),
            weight: 1,
        },
        ResourceSpec {
            name: MEMORY.to_owned(),
            weight: 1,
        },
    ]
}

/// A point of the requested-to-capacity curve: utilisation percent to score (0–10).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub struct ShapePoint {
    /// Utilisation, 0–100.
    pub utilization: i64,
    /// Score, 0–10.
    pub score: i64,
}

/// How NodeResourcesFit scores nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// More free room scores higher (upstream's default).
    LeastAllocated,
    /// Less free room scores higher (bin packing).
    MostAllocated,
    /// A piecewise-linear function of utilisation.
    RequestedToCapacityRatio(Vec<ShapePoint>),
}

/// One resource a pod lacks on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insufficient {
    /// The reason shown (`Insufficient cpu`, `Too many pods`).
    pub reason: String,
    /// Whether even an empty node could not hold the pod (preemption cannot help).
    pub unresolvable: bool,
}

/// What a pod lacks on a node, in upstream's order: pod count, CPU, memory, ephemeral
/// storage, then scalar resources by name (extended resources in `ignored` or in an ignored
/// group are not checked).
pub fn insufficient(
    request: &Resource,
    node: &NodeInfo,
    ignored: &BTreeSet<String>,
    ignored_groups: &BTreeSet<String>,
) -> Vec<Insufficient> {
    let mut out = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
        out.push(Insufficient {
            reason: TOO_MANY_PODS.to_owned(),
            unresolvable: false,
        });
    }
    if request.is_zero() {
        return out;
    }
    let (alloc, used) = (&node.allocatable, &node.requested);
    let mut check = |name: &str, want: i64, have: i64, taken: i64| {
        if want > 0 && want > have - taken {
            out.push(Insufficient {
                reason: format!("Insufficient {name}"),
                unresolvable: want > have,
            });
        }
    };
    check(CPU, request.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check(MEMORY, request.memory, alloc.memory, used.memory);
    check(
        EPHEMERAL_STORAGE,
        request.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, want) in &request.scalar {
        if resource::is_extended(name) {
            let group = name.split_once('/').map(|(g, _)| g).unwrap_or_default();
            if ignored.contains(name) || ignored_groups.contains(group) {
                continue;
            }
        }
        check(name, *want, alloc.get(name), used.get(name));
    }
    out
}

/// The (allocatable, requested) pair a score looks at for one resource, with the pod's
/// request added: scoring requests (non-zero defaults) unless `actual`; a scalar resource the
/// pod does not request is left out, as (0, 0).
fn allocatable_and_requested(
    node: &NodeInfo,
    pod: &PodInfo,
    name: &str,
    actual: bool,
) -> (i64, i64) {
    let pod_request = if actual {
        pod.requests.get(name)
    } else {
        pod.non_zero_requests.get(name)
    };
    if pod_request == 0 && resource::is_scalar(name) {
        return (0, 0);
    }
    let node_requested = if actual {
        node.requested.get(name)
    } else {
        node.non_zero_requested.get(name)
    };
    (node.allocatable.get(name), node_requested + pod_request)
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// Upstream's broken linear function over `shape` (scores already scaled to 0–100).
fn broken_linear(shape: &[ShapePoint], p: i64) -> i64 {
    for (i, point) in shape.iter().enumerate() {
        if p <= point.utilization {
            if i == 0 {
                return point.score;
            }
            let prev = shape[i - 1];
            return prev.score
                + (point.score - prev.score) * (p - prev.utilization)
                    / (point.utilization - prev.utilization);
        }
    }
    shape.last().map(|p| p.score).unwrap_or(0)
}

/// The node's score under `strategy` for `resources`.
pub fn fit_score(
    strategy: &Strategy,
    resources: &[ResourceSpec],
    node: &NodeInfo,
    pod: &PodInfo,
) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    let scaled: Vec<ShapePoint>;
    let shape = match strategy {
        Strategy::RequestedToCapacityRatio(shape) => {
            scaled = shape
                .iter()
                .map(|p| ShapePoint {
                    utilization: p.utilization,
                    score: p.score * (MAX_NODE_SCORE / 10),
                })
                .collect();
            Some(scaled.as_slice())
        }
        _ => None,
    };
    for spec in resources {
        let (allocatable, requested) = allocatable_and_requested(node, pod, &spec.name, false);
        if allocatable == 0 {
            continue;
        }
        let score = match (strategy, shape) {
            (Strategy::LeastAllocated, _) => least_requested(requested, allocatable),
            (Strategy::MostAllocated, _) => most_requested(requested, allocatable),
            (Strategy::RequestedToCapacityRatio(_), Some(shape)) => {
                let utilization = if requested > allocatable {
                    100
                } else {
                    requested * 100 / allocatable
                };
                let score = broken_linear(shape, utilization);
                if score <= 0 {
                    continue;
                }
                score
            }
            (Strategy::RequestedToCapacityRatio(_), None) => 0,
        };
        total += score * spec.weight;
        weights += spec.weight;
    }
    if weights == 0 {
        return 0;
    }
    match strategy {
        Strategy::RequestedToCapacityRatio(_) => (total as f64 / weights as f64).round() as i64,
        _ => total / weights,
    }
}

/// The balanced-allocation score: 100 × (1 − the standard deviation of the requested
/// fractions), over the resources the node has.
pub fn balanced_score(resources: &[ResourceSpec], node: &NodeInfo, pod: &PodInfo) -> i64 {
    let mut fractions = Vec::with_capacity(resources.len());
    for spec in resources {
        let (allocatable, requested) = allocatable_and_requested(node, pod, &spec.name, true);
        if allocatable == 0 {
            continue;
        }
        fractions.push((requested as f64 / allocatable as f64).min(1.0));
    }
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStrategy {
    #[serde(rename = "type")]
    kind: Option<String>,
    resources: Option<Vec<ResourceSpec>>,
    requested_to_capacity_ratio: Option<RawRatio>,
}

#[derive(Deserialize, Default)]
struct RawRatio {
    shape: Vec<ShapePoint>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawFitArgs {
    #[serde(default)]
    ignored_resources: Vec<String>,
    #[serde(default)]
    ignored_resource_groups: Vec<String>,
    scoring_strategy: Option<RawStrategy>,
}

fn check_resources(resources: &[ResourceSpec], what: &str) -> Result<(), String> {
    for (i, spec) in resources.iter().enumerate() {
        if !(1..=100).contains(&spec.weight) {
            return Err(format!(
                "{what}.resources[{i}].weight: Invalid value: {}: resource weight of {} should be \
                 in a range 1-100",
                spec.weight, spec.name
            ));
        }
    }
    Ok(())
}

/// NodeResourcesFit.
#[derive(Debug)]
pub struct Fit {
    ignored: BTreeSet<String>,
    ignored_groups: BTreeSet<String>,
    strategy: Strategy,
    resources: Vec<ResourceSpec>,
}

impl Default for Fit {
    fn default() -> Fit {
        Fit {
            ignored: BTreeSet::new(),
            ignored_groups: BTreeSet::new(),
            strategy: Strategy::LeastAllocated,
            resources: default_resources(),
        }
    }
}

impl Fit {
    /// Reads `NodeResourcesFitArgs` (ignored resources and groups, scoring strategy).
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<Fit, String> {
        let raw: RawFitArgs = match args {
            Some(value) => serde_json::from_value(value.clone())
                .map_err(|e| format!("NodeResourcesFitArgs: {e}"))?,
            None => RawFitArgs::default(),
        };
        let strategy = raw.scoring_strategy.unwrap_or_default();
        let resources = strategy.resources.unwrap_or_else(default_resources);
        check_resources(&resources, "scoringStrategy")?;
        let strategy = match strategy.kind.as_deref().unwrap_or("LeastAllocated") {
            "LeastAllocated" => Strategy::LeastAllocated,
            "MostAllocated" => Strategy::MostAllocated,
            "RequestedToCapacityRatio" => {
                let shape = strategy
                    .requested_to_capacity_ratio
                    .map(|r| r.shape)
                    .unwrap_or_default();
                if shape.is_empty() {
                    return Err(
                        "scoringStrategy.shape: Required value: at least one point must \
                                be specified"
                            .to_owned(),
                    );
                }
                for pair in shape.windows(2) {
                    if pair[1].utilization <= pair[0].utilization {
                        return Err("scoringStrategy.shape: Invalid value: utilization values \
                                    must be sorted in increasing order"
                            .to_owned());
                    }
                }
                if shape
                    .iter()
                    .any(|p| !(0..=100).contains(&p.utilization) || !(0..=10).contains(&p.score))
                {
                    return Err(
                        "scoringStrategy.shape: Invalid value: utilization must be in \
                                0-100 and score in 0-10"
                            .to_owned(),
                    );
                }
                Strategy::RequestedToCapacityRatio(shape)
            }
            other => {
                return Err(format!(
                    "scoringStrategy.type: Unsupported value: \"{other}\": supported values: \
                     \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
                ));
            }
        };
        Ok(Fit {
            ignored: raw.ignored_resources.into_iter().collect(),
            ignored_groups: raw.ignored_resource_groups.into_iter().collect(),
            strategy,
            resources,
        })
    }
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        FIT
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::Score]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::AssignedPodDelete,
        ]
    }
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let lacking = insufficient(&pod.requests, node, &self.ignored, &self.ignored_groups);
        if lacking.is_empty() {
            return Status::success();
        }
        let unresolvable = lacking.iter().any(|i| i.unresolvable);
        let reasons = lacking.into_iter().map(|i| i.reason).collect();
        if unresolvable {
            Status::new(
                crate::framework::Code::UnschedulableAndUnresolvable,
                reasons,
            )
        } else {
            Status::new(crate::framework::Code::Unschedulable, reasons)
        }
    }
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(fit_score(&self.strategy, &self.resources, node, pod))
    }
}

/// NodeResourcesBalancedAllocation.
#[derive(Debug)]
pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
}

impl BalancedAllocation {
    /// Reads `NodeResourcesBalancedAllocationArgs` (`resources`).
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<BalancedAllocation, String> {
        let resources = match args.and_then(|a| a.get("resources")) {
            None | Some(serde_json::Value::Null) => default_resources(),
            Some(value) => serde_json::from_value(value.clone())
                .map_err(|e| format!("NodeResourcesBalancedAllocationArgs.resources: {e}"))?,
        };
        check_resources(&resources, "")?;
        Ok(BalancedAllocation { resources })
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        BALANCED_ALLOCATION
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreScore, Point::Score]
    }
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        // A pod that requests none of the resources is not ranked, so best-effort pods do not
        // all pile onto one node (upstream since 1.33).
        if self
            .resources
            .iter()
            .all(|r| pod.requests.get(&r.name) == 0)
        {
            Status::skip()
        } else {
            Status::success()
        }
    }
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(balanced_score(&self.resources, node, pod))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::*;
    use serde_json::json;

    fn requesting(name: &str, cpu: &str, memory: &str) -> std::sync::Arc<PodInfo> {
        pod(
            name,
            json!({}),
            json!({"containers": [{"name": "c", "resources": {"requests":
                {"cpu": cpu, "memory": memory}}}]}),
        )
    }

    fn reasons(request: &PodInfo, node: &NodeInfo) -> Vec<(String, bool)> {
        insufficient(&request.requests, node, &BTreeSet::new(), &BTreeSet::new())
            .into_iter()
            .map(|i| (i.reason, i.unresolvable))
            .collect()
    }

    #[test]
    fn fit_reports_every_lacking_resource() {
        let node = NodeInfo::new(
            sized_node("n", "2", "4Gi"),
            [requesting("a", "1500m", "1Gi")],
        );
        assert!(reasons(&requesting("p", "500m", "1Gi"), &node).is_empty());
        assert_eq!(
            reasons(&requesting("p", "600m", "4Gi"), &node),
            [
                ("Insufficient cpu".to_owned(), false),
                ("Insufficient memory".to_owned(), false)
            ]
        );
        // More than the whole node: preemption cannot help.
        assert_eq!(
            reasons(&requesting("p", "3", "1Gi"), &node),
            [("Insufficient cpu".to_owned(), true)]
        );
        let gpu = pod(
            "g",
            json!({}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}]}),
        );
        assert_eq!(
            reasons(&gpu, &node),
            [("Insufficient example.com/gpu".to_owned(), true)]
        );
        let ignored: BTreeSet<String> = ["example.com".to_owned()].into();
        assert!(insufficient(&gpu.requests, &node, &BTreeSet::new(), &ignored).is_empty());
    }

    #[test]
    fn pod_count_is_checked_first_even_for_empty_requests() {
        let full = NodeInfo::new(
            node(
                "n",
                json!({}),
                json!({}),
                json!({"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "1"}}),
            ),
            [pod("a", json!({}), json!({}))],
        );
        assert_eq!(
            reasons(&requesting("p", "2", "1Gi"), &full),
            [
                ("Too many pods".to_owned(), false),
                ("Insufficient cpu".to_owned(), true)
            ]
        );
        assert_eq!(
            reasons(&pod("q", json!({}), json!({})), &full),
            [(TOO_MANY_PODS.to_owned(), false)]
        );
    }

    #[test]
    fn scoring_strategies() {
        let node = NodeInfo::new(sized_node("n", "4", "8Gi"), [requesting("a", "1", "2Gi")]);
        let p = requesting("p", "1", "2Gi");
        let resources = default_resources();
        // Half of CPU and memory used with the pod: 50 each.
        assert_eq!(
            fit_score(&Strategy::LeastAllocated, &resources, &node, &p),
            50
        );
        assert_eq!(
            fit_score(&Strategy::MostAllocated, &resources, &node, &p),
            50
        );
        let shape = Strategy::RequestedToCapacityRatio(vec![
            ShapePoint {
                utilization: 0,
                score: 10,
            },
            ShapePoint {
                utilization: 100,
                score: 0,
            },
        ]);
        assert_eq!(fit_score(&shape, &resources, &node, &p), 50);
        // A best-effort pod counts 100m and 200Mi when scoring.
        let empty = NodeInfo::new(sized_node("m", "1", "1000Mi"), []);
        let best_effort = pod("b", json!({}), json!({}));
        // cpu (1000-100)*100/1000 = 90; memory (1000-200)*100/1000 = 80.
        assert_eq!(
            fit_score(&Strategy::LeastAllocated, &resources, &empty, &best_effort),
            85
        );
    }

    #[test]
    fn balance_prefers_even_use() {
        let node = NodeInfo::new(sized_node("n", "4", "4Gi"), []);
        assert_eq!(
            balanced_score(&default_resources(), &node, &requesting("p", "2", "2Gi")),
            100
        );
        // cpu 1/4, memory 3/4: std 0.25.
        assert_eq!(
            balanced_score(&default_resources(), &node, &requesting("p", "1", "3Gi")),
            75
        );
    }

    #[test]
    fn args_are_validated() {
        assert!(
            Fit::from_args(Some(&json!({"scoringStrategy": {"type": "MostAllocated"}}))).is_ok()
        );
        assert!(Fit::from_args(Some(&json!({"scoringStrategy": {"type": "Nope"}}))).is_err());
        assert!(
            Fit::from_args(Some(&json!({"scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1},
                                                   {"utilization": 10, "score": 2}]}}})))
            .is_err()
        );
        assert!(
            Fit::from_args(Some(&json!({"scoringStrategy": {
            "resources": [{"name": "cpu", "weight": 0}]}})))
            .is_err()
        );
    }
}
