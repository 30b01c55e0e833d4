//! InterPodAffinity: places a pod relative to the pods already placed, by
//! `spec.affinity.podAffinity` and `podAntiAffinity`, where "the same place" is the set of
//! nodes sharing a value of a term's topology key.
//!
//! - Filter (hard terms): the node's domain must hold a pod matching all of the pod's required
//!   affinity terms (unless no pod anywhere matches them and the pod matches them itself: the
//!   first of a group that wants to be together may go anywhere with the topology labels); it
//!   must hold no pod matching one of the pod's required anti-affinity terms; and no pod
//!   already placed may have a required anti-affinity term that matches the incoming pod in
//!   the node's domain. PreFilter counts the matches per (topology key, value) once.
//! - Score (soft terms): every placed pod adds, for its node's domain, the weights of the
//!   incoming pod's preferred affinity terms it matches (anti-affinity ones subtract), and the
//!   weights of its own preferred terms the incoming pod matches, with `hardPodAffinityWeight`
//!   for its required affinity terms; scores are scaled between the lowest and highest.
//!
//! A term's namespaces are its `namespaces` and those whose labels its `namespaceSelector`
//! matches (the pod's own when neither is given). For the incoming pod's terms, upstream lists
//! the namespaces the selector matches, so a pod in a namespace the scheduler does not know
//! matches them only through an empty selector; for placed pods' terms the incoming pod's
//! namespace labels are used (none when the namespace is unknown).
//!
//! Not done here: upstream's `AddPod`/`RemovePod` PreFilter extensions, which adjust the counts
//! for pods preemption would evict.

use std::collections::BTreeMap;

use crate::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, NodeScore, Plugin, Point, PreFilterResult, Status,
};
use crate::snapshot::{AffinityTerm, Labels, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "InterPodAffinity";
/// Upstream's reason for a node where a placed pod's anti-affinity forbids the pod.
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Upstream's reason for a node the pod's affinity terms do not match.
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream's reason for a node the pod's anti-affinity terms rule out.
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// The default `hardPodAffinityWeight`.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// Counts per (topology key, topology value).
pub type TopologyCounts = BTreeMap<(String, String), i64>;

/// Scores per topology key, then per topology value.
pub type TopologyScores = BTreeMap<String, BTreeMap<String, i64>>;

/// The plugin, with its `InterPodAffinityArgs`.
#[derive(Clone, Debug)]
pub struct InterPodAffinity {
    /// The score weight of a placed pod's required affinity term the incoming pod matches
    /// (0..=100; 0 turns it off).
    pub hard_pod_affinity_weight: i32,
    /// When the incoming pod has no preferred terms, skip scoring (placed pods' preferred and
    /// required terms are then not considered).
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinity {
    fn default() -> InterPodAffinity {
        InterPodAffinity {
            hard_pod_affinity_weight: DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl InterPodAffinity {
    /// Reads `InterPodAffinityArgs` (`hardPodAffinityWeight`, default 1, within 0..=100;
    /// `ignorePreferredTermsOfExistingPods`, default false), with upstream's validation
    /// message.
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<InterPodAffinity, String> {
        let mut plugin = InterPodAffinity::default();
        let Some(args) = args.filter(|a| !a.is_null()) else {
            return Ok(plugin);
        };
        if !args.is_object() {
            return Err(format!(
                "InterPodAffinityArgs: expected an object, got {args}"
            ));
        }
        match args.get("hardPodAffinityWeight") {
            None | Some(serde_json::Value::Null) => {}
            Some(value) => {
                let weight = value
                    .as_i64()
                    .and_then(|w| i32::try_from(w).ok())
                    .ok_or_else(|| {
                        format!("InterPodAffinityArgs.hardPodAffinityWeight: not an int32: {value}")
                    })?;
                if !(0..=100).contains(&weight) {
                    return Err(format!(
                        "hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0, 100]"
                    ));
                }
                plugin.hard_pod_affinity_weight = weight;
            }
        }
        match args.get("ignorePreferredTermsOfExistingPods") {
            None | Some(serde_json::Value::Null) => {}
            Some(value) => {
                plugin.ignore_preferred_terms_of_existing_pods =
                    value.as_bool().ok_or_else(|| {
                        format!(
                            "InterPodAffinityArgs.ignorePreferredTermsOfExistingPods: not a bool: \
                             {value}"
                        )
                    })?;
            }
        }
        Ok(plugin)
    }
}

/// Whether one of the incoming pod's terms matches `pod`: upstream resolves the term's
/// namespace selector into the names of the known namespaces it matches (an empty selector
/// stays "every namespace").
pub fn incoming_term_matches(term: &AffinityTerm, pod: &PodInfo, snapshot: &Snapshot) -> bool {
    let namespace = pod.namespace();
    let in_namespace = term.namespaces.contains(namespace)
        || term.namespace_selector.as_ref().is_some_and(|s| {
            s.is_empty()
                || snapshot
                    .namespace_labels(namespace)
                    .is_some_and(|labels| s.matches(labels))
        });
    in_namespace && term.selector.matches(pod.labels())
}

/// Whether `pod` matches every one of the incoming pod's `terms` (never for no terms).
fn matches_all(terms: &[AffinityTerm], pod: &PodInfo, snapshot: &Snapshot) -> bool {
    !terms.is_empty()
        && terms
            .iter()
            .all(|t| incoming_term_matches(t, pod, snapshot))
}

/// Adds `value` to the node's pair for `key`, if it has the label; a pair that drops to 0 is
/// removed (an empty map means "no such pods anywhere").
fn bump(counts: &mut TopologyCounts, labels: &Labels, key: &str, value: i64) {
    if let Some(v) = labels.get(key) {
        let pair = (key.to_owned(), v.clone());
        let count = counts.entry(pair.clone()).or_insert(0);
        *count += value;
        if *count == 0 {
            counts.remove(&pair);
        }
    }
}

/// What PreFilter computes.
#[derive(Clone, Debug, Default)]
pub struct AffinityCounts {
    /// Pairs where placed pods have a required anti-affinity term matching the incoming pod.
    pub existing_anti_affinity: TopologyCounts,
    /// Pairs holding placed pods that match all the incoming pod's required affinity terms.
    pub affinity: TopologyCounts,
    /// Pairs holding placed pods that match one of the incoming pod's required anti-affinity
    /// terms (once per term matched).
    pub anti_affinity: TopologyCounts,
    /// Whether the incoming pod matches all its own required affinity terms.
    pub matches_own_affinity: bool,
}

impl AffinityCounts {
    /// Counts over every placed pod of the snapshot.
    pub fn compute(pod: &PodInfo, snapshot: &Snapshot) -> AffinityCounts {
        let mut counts = AffinityCounts {
            matches_own_affinity: matches_all(&pod.required_affinity, pod, snapshot),
            ..AffinityCounts::default()
        };
        let incoming_terms =
            !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
        // Without terms of its own, only existing pods' required anti-affinity matters, and
        // only nodes holding such pods are looked at (upstream's
        // `HavePodsWithRequiredAntiAffinityList`).
        let nodes: Box<dyn Iterator<Item = &NodeInfo>> = if incoming_terms {
            Box::new(snapshot.nodes())
        } else {
            Box::new(snapshot.nodes_with_required_anti_affinity_pods())
        };
        for node in nodes {
            for existing in &node.pods {
                counts.update_with(pod, existing, node.labels(), snapshot, 1);
            }
        }
        counts
    }

    /// Counts `existing` on a node with `labels` for the incoming `pod`, `delta` times (1 when
    /// placed, -1 when taken away: upstream's `updateWithPod`).
    pub fn update_with(
        &mut self,
        pod: &PodInfo,
        existing: &PodInfo,
        labels: &Labels,
        snapshot: &Snapshot,
        delta: i64,
    ) {
        let namespace_labels = snapshot.namespace_labels(pod.namespace());
        for term in &existing.required_anti_affinity {
            if term.matches(pod, namespace_labels) {
                bump(
                    &mut self.existing_anti_affinity,
                    labels,
                    &term.topology_key,
                    delta,
                );
            }
        }
        if !pod.required_affinity.is_empty()
            && matches_all(&pod.required_affinity, existing, snapshot)
        {
            for term in &pod.required_affinity {
                bump(&mut self.affinity, labels, &term.topology_key, delta);
            }
        }
        for term in &pod.required_anti_affinity {
            if incoming_term_matches(term, existing, snapshot) {
                bump(&mut self.anti_affinity, labels, &term.topology_key, delta);
            }
        }
    }

    /// Whether the node's domains hold what the pod's required affinity terms ask for.
    fn satisfies_affinity(&self, pod: &PodInfo, labels: &Labels) -> bool {
        let mut pods_exist = true;
        for term in &pod.required_affinity {
            let Some(value) = labels.get(&term.topology_key) else {
                return false;
            };
            let pair = (term.topology_key.clone(), value.clone());
            if self.affinity.get(&pair).copied().unwrap_or(0) <= 0 {
                pods_exist = false;
            }
        }
        // The first pod of a group with affinity to itself: nothing matches anywhere yet.
        pods_exist || (self.affinity.is_empty() && self.matches_own_affinity)
    }

    /// Whether the node's domains hold no pod the pod's required anti-affinity terms rule out.
    fn satisfies_anti_affinity(&self, pod: &PodInfo, labels: &Labels) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        pod.required_anti_affinity.iter().all(|term| {
            labels.get(&term.topology_key).is_none_or(|value| {
                let pair = (term.topology_key.clone(), value.clone());
                self.anti_affinity.get(&pair).copied().unwrap_or(0) <= 0
            })
        })
    }

    /// Whether no placed pod's required anti-affinity rules the pod out of the node's domains.
    fn satisfies_existing_anti_affinity(&self, labels: &Labels) -> bool {
        if self.existing_anti_affinity.is_empty() {
            return true;
        }
        labels.iter().all(|(k, v)| {
            self.existing_anti_affinity
                .get(&(k.clone(), v.clone()))
                .copied()
                .unwrap_or(0)
                <= 0
        })
    }

    /// The filter verdict, checked in upstream's order: the pod's affinity (unresolvable),
    /// its anti-affinity, then placed pods' anti-affinity (both unschedulable).
    pub fn check(&self, pod: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node.labels();
        if !self.satisfies_affinity(pod, labels) {
            return Status::unresolvable(REASON_AFFINITY);
        }
        if !self.satisfies_anti_affinity(pod, labels) {
            return Status::unschedulable(REASON_ANTI_AFFINITY);
        }
        if !self.satisfies_existing_anti_affinity(labels) {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

/// Adds `weight` to the domain of `key` on a node with `labels`, if it has the label.
fn add_score(scores: &mut TopologyScores, labels: &Labels, key: &str, weight: i64) {
    if let Some(value) = labels.get(key) {
        *scores
            .entry(key.to_owned())
            .or_default()
            .entry(value.clone())
            .or_insert(0) += weight;
    }
}

/// Upstream's PreScore: the weights each domain earns, or `None` when no term applies
/// anywhere (or when `ignore_preferred` and the pod has no preferred terms), so that
/// scoring is skipped.
pub fn topology_scores(
    pod: &PodInfo,
    snapshot: &Snapshot,
    hard_weight: i32,
    ignore_preferred: bool,
) -> Option<TopologyScores> {
    let has_preferred =
        !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
    if ignore_preferred && !has_preferred {
        return None;
    }
    let namespace_labels = snapshot.namespace_labels(pod.namespace());
    let mut scores = TopologyScores::new();
    // Without preferred terms of its own, only existing pods' terms score, and only nodes
    // holding pods with terms are looked at (upstream's `HavePodsWithAffinityList`).
    let nodes: Box<dyn Iterator<Item = &NodeInfo>> = if has_preferred {
        Box::new(snapshot.nodes())
    } else {
        Box::new(snapshot.nodes_with_affinity_pods())
    };
    for node in nodes {
        let labels = node.labels();
        if labels.is_empty() {
            continue;
        }
        for existing in &node.pods {
            for term in &pod.preferred_affinity {
                if incoming_term_matches(term, existing, snapshot) {
                    add_score(
                        &mut scores,
                        labels,
                        &term.topology_key,
                        i64::from(term.weight),
                    );
                }
            }
            for term in &pod.preferred_anti_affinity {
                if incoming_term_matches(term, existing, snapshot) {
                    add_score(
                        &mut scores,
                        labels,
                        &term.topology_key,
                        -i64::from(term.weight),
                    );
                }
            }
            if hard_weight > 0 {
                for term in &existing.required_affinity {
                    if term.matches(pod, namespace_labels) {
                        add_score(
                            &mut scores,
                            labels,
                            &term.topology_key,
                            i64::from(hard_weight),
                        );
                    }
                }
            }
            for term in &existing.preferred_affinity {
                if term.matches(pod, namespace_labels) {
                    add_score(
                        &mut scores,
                        labels,
                        &term.topology_key,
                        i64::from(term.weight),
                    );
                }
            }
            for term in &existing.preferred_anti_affinity {
                if term.matches(pod, namespace_labels) {
                    add_score(
                        &mut scores,
                        labels,
                        &term.topology_key,
                        -i64::from(term.weight),
                    );
                }
            }
        }
    }
    (!scores.is_empty()).then_some(scores)
}

/// A node's raw score: the sum, over the topology keys it has, of its domain's weight.
pub fn node_score(scores: &TopologyScores, labels: &Labels) -> i64 {
    scores
        .iter()
        .filter_map(|(key, values)| labels.get(key).map(|v| values.get(v).copied().unwrap_or(0)))
        .sum()
}

/// Upstream's NormalizeScore: `MAX_NODE_SCORE * (score - min) / (max - min)`, truncated;
/// all 0 when every node scores the same.
pub fn normalize_scores(scores: &mut [NodeScore<'_>]) {
    let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    let diff = max - min;
    for s in scores.iter_mut() {
        s.score = if diff > 0 {
            (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
        } else {
            0
        };
    }
}

impl Plugin for InterPodAffinity {
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
            ClusterEvent::NamespaceChange,
        ]
    }

    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, PreFilterResult) {
        let counts = AffinityCounts::compute(pod, snapshot);
        if counts.existing_anti_affinity.is_empty()
            && pod.required_affinity.is_empty()
            && pod.required_anti_affinity.is_empty()
        {
            return (Status::skip(), PreFilterResult::default());
        }
        state.write(PRE_FILTER_KEY, counts);
        (Status::success(), PreFilterResult::default())
    }

    fn update_for_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
        delta: i64,
    ) -> Status {
        state.update(PRE_FILTER_KEY, |c: &mut AffinityCounts| {
            c.update_with(pod, other, node.labels(), snapshot, delta);
        })
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<AffinityCounts>(PRE_FILTER_KEY) {
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
        _nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        match topology_scores(
            pod,
            snapshot,
            self.hard_pod_affinity_weight,
            self.ignore_preferred_terms_of_existing_pods,
        ) {
            Some(scores) => {
                state.write(PRE_SCORE_KEY, scores);
                Status::success()
            }
            None => Status::skip(),
        }
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        state
            .read::<TopologyScores>(PRE_SCORE_KEY)
            .map(|scores| node_score(scores, node.labels()))
            .ok_or_else(|| {
                Status::error(format!(
                    "reading {PRE_SCORE_KEY:?} from cycleState: not found"
                ))
            })
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) {
        if state
            .read::<TopologyScores>(PRE_SCORE_KEY)
            .is_some_and(|s| !s.is_empty())
        {
            normalize_scores(scores);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::test_util::{node, pod};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn zoned(name: &str, zone: &str) -> Arc<Node> {
        node(
            name,
            json!({"zone": zone, "kubernetes.io/hostname": name}),
            json!({}),
            json!({}),
        )
    }

    fn bare(name: &str) -> Arc<Node> {
        node(
            name,
            json!({"kubernetes.io/hostname": name}),
            json!({}),
            json!({}),
        )
    }

    fn pod_in(name: &str, namespace: &str, labels: Value, spec: Value) -> Arc<PodInfo> {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": name, "labels": labels},
            "spec": spec,
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    fn app(name: &str, value: &str) -> Arc<PodInfo> {
        pod(name, json!({"app": value}), json!({}))
    }

    fn term(app: &str, key: &str) -> Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key})
    }

    fn weighted(weight: i32, app: &str, key: &str) -> Value {
        json!({"weight": weight, "podAffinityTerm": term(app, key)})
    }

    /// A pod with `labels` and `affinity` (`{"podAffinity": ..., "podAntiAffinity": ...}`).
    fn with_affinity(name: &str, labels: Value, affinity: Value) -> Arc<PodInfo> {
        pod(name, labels, json!({"affinity": affinity}))
    }

    fn required(kind: &str, terms: Value) -> Value {
        json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    fn preferred(kind: &str, terms: Value) -> Value {
        json!({kind: {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    type Layout = Vec<(Arc<Node>, Vec<Arc<PodInfo>>)>;

    fn snapshot(layout: Layout) -> Snapshot {
        Snapshot::from_nodes(layout.into_iter().map(|(n, pods)| NodeInfo::new(n, pods)))
    }

    /// Per node: `None` when it fits, else the code and reason.
    type Verdicts = Vec<(String, Option<(Code, String)>)>;

    /// PreFilter's code, and each node's verdict.
    fn run_filter(pod: &PodInfo, snap: &Snapshot) -> (Code, Verdicts) {
        let plugin = InterPodAffinity::default();
        let mut state = CycleState::new();
        let (status, _) = plugin.pre_filter(&mut state, pod, snap);
        if status.code != Code::Success {
            return (status.code, Vec::new());
        }
        let results = snap
            .nodes()
            .map(|n| {
                let s = plugin.filter(&state, pod, n);
                let verdict = (!s.is_success()).then(|| (s.code, s.message()));
                (n.name.clone(), verdict)
            })
            .collect();
        (status.code, results)
    }

    #[test]
    fn pre_filter_skips_when_nothing_applies() {
        let snap = snapshot(vec![(zoned("n1", "z1"), vec![app("a", "web")])]);
        assert_eq!(run_filter(&app("p", "web"), &snap).0, Code::Skip);
        // Preferred terms alone do not filter.
        let soft = with_affinity(
            "p",
            json!({}),
            preferred("podAffinity", json!([weighted(5, "web", "zone")])),
        );
        assert_eq!(run_filter(&soft, &snap).0, Code::Skip);
        // A placed pod's anti-affinity that does not match the incoming pod.
        let other = with_affinity(
            "a",
            json!({}),
            required("podAntiAffinity", json!([term("db", "zone")])),
        );
        let snap = snapshot(vec![(zoned("n1", "z1"), vec![other])]);
        assert_eq!(run_filter(&app("p", "web"), &snap).0, Code::Skip);
    }

    #[test]
    fn filter_cases() {
        const AFF: Option<(Code, &str)> =
            Some((Code::UnschedulableAndUnresolvable, REASON_AFFINITY));
        const ANTI: Option<(Code, &str)> = Some((Code::Unschedulable, REASON_ANTI_AFFINITY));
        const EXISTING: Option<(Code, &str)> =
            Some((Code::Unschedulable, REASON_EXISTING_ANTI_AFFINITY));
        struct Case {
            name: &'static str,
            pod: Arc<PodInfo>,
            layout: Layout,
            want: Vec<Option<(Code, &'static str)>>,
        }
        let cases = vec![
            Case {
                name: "affinity: only the zone holding a matching pod",
                pod: with_affinity(
                    "p",
                    json!({}),
                    required("podAffinity", json!([term("db", "zone")])),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![app("d", "db")]),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![app("w", "web")]),
                    (bare("n4"), vec![app("e", "db")]),
                ],
                want: vec![None, None, AFF, AFF],
            },
            Case {
                name: "affinity: one pod must match all terms",
                pod: with_affinity(
                    "p",
                    json!({}),
                    required(
                        "podAffinity",
                        json!([
                            term("db", "zone"),
                            {"labelSelector": {"matchLabels": {"tier": "x"}},
                             "topologyKey": "zone"},
                        ]),
                    ),
                ),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![app("d", "db"), pod("t", json!({"tier": "x"}), json!({}))],
                    ),
                    (
                        zoned("n2", "z2"),
                        vec![pod("both", json!({"app": "db", "tier": "x"}), json!({}))],
                    ),
                ],
                want: vec![AFF, None],
            },
            Case {
                name: "affinity to itself: the first pod goes anywhere with the key",
                pod: with_affinity(
                    "p",
                    json!({"app": "web"}),
                    required("podAffinity", json!([term("web", "zone")])),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![]),
                    (zoned("n2", "z2"), vec![app("d", "db")]),
                    (bare("n3"), vec![]),
                ],
                want: vec![None, None, AFF],
            },
            Case {
                name: "affinity to itself once a match exists: only its zone",
                pod: with_affinity(
                    "p",
                    json!({"app": "web"}),
                    required("podAffinity", json!([term("web", "zone")])),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![]),
                    (zoned("n2", "z2"), vec![app("w", "web")]),
                ],
                want: vec![AFF, None],
            },
            Case {
                name: "affinity not to itself with no match: nowhere",
                pod: with_affinity(
                    "p",
                    json!({"app": "web"}),
                    required("podAffinity", json!([term("db", "zone")])),
                ),
                layout: vec![(zoned("n1", "z1"), vec![])],
                want: vec![AFF],
            },
            Case {
                name: "anti-affinity by hostname",
                pod: with_affinity(
                    "p",
                    json!({"app": "web"}),
                    required(
                        "podAntiAffinity",
                        json!([term("web", "kubernetes.io/hostname")]),
                    ),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![app("w", "web")]),
                    (zoned("n2", "z1"), vec![app("d", "db")]),
                    (node("n3", json!({}), json!({}), json!({})), vec![]),
                ],
                want: vec![ANTI, None, None],
            },
            Case {
                name: "placed pod's anti-affinity rules out its zone",
                pod: app("p", "web"),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![with_affinity(
                            "a",
                            json!({}),
                            required("podAntiAffinity", json!([term("web", "zone")])),
                        )],
                    ),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![]),
                ],
                want: vec![EXISTING, EXISTING, None],
            },
            Case {
                name: "affinity is checked before anti-affinity",
                pod: with_affinity(
                    "p",
                    json!({"app": "web"}),
                    json!({
                        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                            [term("db", "zone")]},
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                            [term("web", "zone")]},
                    }),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![app("d", "db"), app("w", "web")]),
                    (zoned("n2", "z2"), vec![app("w2", "web")]),
                    (zoned("n3", "z3"), vec![app("d2", "db")]),
                ],
                want: vec![ANTI, AFF, None],
            },
            Case {
                name: "terms look in the pod's namespace by default",
                pod: with_affinity(
                    "p",
                    json!({}),
                    required("podAffinity", json!([term("db", "zone")])),
                ),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![pod_in("d", "other", json!({"app": "db"}), json!({}))],
                    ),
                    (zoned("n2", "z2"), vec![app("d2", "db")]),
                ],
                want: vec![AFF, None],
            },
            Case {
                name: "explicit namespaces",
                pod: with_affinity(
                    "p",
                    json!({}),
                    required(
                        "podAffinity",
                        json!([{"labelSelector": {"matchLabels": {"app": "db"}},
                                "namespaces": ["other"], "topologyKey": "zone"}]),
                    ),
                ),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![pod_in("d", "other", json!({"app": "db"}), json!({}))],
                    ),
                    (zoned("n2", "z2"), vec![app("d2", "db")]),
                ],
                want: vec![None, AFF],
            },
            Case {
                name: "an empty namespace selector means every namespace",
                pod: with_affinity(
                    "p",
                    json!({}),
                    required(
                        "podAffinity",
                        json!([{"labelSelector": {"matchLabels": {"app": "db"}},
                                "namespaceSelector": {}, "topologyKey": "zone"}]),
                    ),
                ),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![pod_in("d", "other", json!({"app": "db"}), json!({}))],
                    ),
                    (zoned("n2", "z2"), vec![app("d2", "db")]),
                    (zoned("n3", "z3"), vec![]),
                ],
                want: vec![None, None, AFF],
            },
        ];
        for case in cases {
            let snap = snapshot(case.layout);
            let (code, results) = run_filter(&case.pod, &snap);
            assert_eq!(code, Code::Success, "{}", case.name);
            let got: Vec<Option<(Code, &str)>> = results
                .iter()
                .map(|(_, v)| v.as_ref().map(|(c, r)| (*c, r.as_str())))
                .collect();
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    #[test]
    fn namespace_selectors_use_known_namespaces() {
        // The incoming pod's anti-affinity selects namespaces labelled team=a.
        let p = with_affinity(
            "p",
            json!({}),
            required(
                "podAntiAffinity",
                json!([{"labelSelector": {"matchLabels": {"app": "db"}},
                        "namespaceSelector": {"matchExpressions":
                            [{"key": "team", "operator": "NotIn", "values": ["b"]}]},
                        "topologyKey": "zone"}]),
            ),
        );
        let mut snap = snapshot(vec![
            (
                zoned("n1", "z1"),
                vec![pod_in("d1", "ns-a", json!({"app": "db"}), json!({}))],
            ),
            (
                zoned("n2", "z2"),
                vec![pod_in("d2", "ns-b", json!({"app": "db"}), json!({}))],
            ),
            (
                zoned("n3", "z3"),
                vec![pod_in("d3", "unknown", json!({"app": "db"}), json!({}))],
            ),
        ]);
        snap.upsert_namespace("ns-a", Labels::from([("team".into(), "a".into())]));
        snap.upsert_namespace("ns-b", Labels::from([("team".into(), "b".into())]));
        let (_, results) = run_filter(&p, &snap);
        let fits: Vec<&str> = results
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        // ns-a matches; ns-b does not; the unknown namespace is not listed by upstream.
        assert_eq!(fits, ["n2", "n3"]);

        // A placed pod's term with a namespace selector is matched against the incoming pod's
        // namespace labels, which are empty when the namespace is unknown.
        let placed = pod_in(
            "a",
            "ns-a",
            json!({}),
            json!({"affinity": required(
                "podAntiAffinity",
                json!([{"labelSelector": {"matchLabels": {"app": "web"}},
                        "namespaceSelector": {"matchExpressions":
                            [{"key": "team", "operator": "NotIn", "values": ["b"]}]},
                        "topologyKey": "zone"}]),
            )}),
        );
        let mut snap = snapshot(vec![
            (zoned("n1", "z1"), vec![placed]),
            (zoned("n2", "z2"), vec![]),
        ]);
        snap.upsert_namespace("ns-b", Labels::from([("team".into(), "b".into())]));
        let in_b = pod_in("p", "ns-b", json!({"app": "web"}), json!({}));
        assert_eq!(run_filter(&in_b, &snap).0, Code::Skip);
        let in_unknown = pod_in("p", "elsewhere", json!({"app": "web"}), json!({}));
        let (code, results) = run_filter(&in_unknown, &snap);
        assert_eq!(code, Code::Success);
        assert_eq!(
            results[0].1,
            Some((
                Code::Unschedulable,
                REASON_EXISTING_ANTI_AFFINITY.to_owned()
            ))
        );
        assert_eq!(results[1].1, None);
    }

    /// PreScore, Score and NormalizeScore over every node: None when skipped, else per node
    /// (raw, normalised).
    fn run_score(
        plugin: &InterPodAffinity,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> Option<Vec<(i64, i64)>> {
        let mut state = CycleState::new();
        let nodes: Vec<&NodeInfo> = snap.nodes().collect();
        let status = plugin.pre_score(&mut state, pod, &nodes, snap);
        if status.code == Code::Skip {
            return None;
        }
        assert!(status.is_success());
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
            raw.into_iter()
                .zip(scores.iter().map(|s| s.score))
                .collect(),
        )
    }

    #[test]
    fn score_cases() {
        struct Case {
            name: &'static str,
            plugin: InterPodAffinity,
            pod: Arc<PodInfo>,
            layout: Layout,
            want: Option<Vec<(i64, i64)>>,
        }
        let default = InterPodAffinity::default;
        let cases = vec![
            Case {
                name: "nothing to score",
                plugin: default(),
                pod: app("p", "web"),
                layout: vec![(zoned("n1", "z1"), vec![app("a", "db")])],
                want: None,
            },
            Case {
                name: "preferred affinity and anti-affinity",
                plugin: default(),
                pod: with_affinity(
                    "p",
                    json!({}),
                    json!({
                        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                            [weighted(5, "db", "zone")]},
                        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                            [weighted(3, "web", "kubernetes.io/hostname")]},
                    }),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![app("d", "db"), app("w", "web")]),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![app("w2", "web")]),
                    (zoned("n4", "z2"), vec![]),
                ],
                // n1: 5 - 3; n2: 5; n3: -3; n4: 0. Scaled from -3..5.
                want: Some(vec![(2, 62), (5, 100), (-3, 0), (0, 37)]),
            },
            Case {
                name: "placed pods' terms toward the incoming pod",
                plugin: default(),
                pod: app("p", "web"),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![with_affinity(
                            "a",
                            json!({}),
                            required("podAffinity", json!([term("web", "zone")])),
                        )],
                    ),
                    (
                        zoned("n2", "z2"),
                        vec![with_affinity(
                            "b",
                            json!({}),
                            preferred("podAffinity", json!([weighted(4, "web", "zone")])),
                        )],
                    ),
                    (
                        zoned("n3", "z3"),
                        vec![with_affinity(
                            "c",
                            json!({}),
                            preferred("podAntiAffinity", json!([weighted(2, "web", "zone")])),
                        )],
                    ),
                ],
                // hardPodAffinityWeight 1, +4, -2: scaled from -2..4.
                want: Some(vec![(1, 50), (4, 100), (-2, 0)]),
            },
            Case {
                name: "hardPodAffinityWeight scales required terms; 0 turns them off",
                plugin: InterPodAffinity {
                    hard_pod_affinity_weight: 0,
                    ..default()
                },
                pod: app("p", "web"),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![with_affinity(
                            "a",
                            json!({}),
                            required("podAffinity", json!([term("web", "zone")])),
                        )],
                    ),
                    (zoned("n2", "z2"), vec![]),
                ],
                want: None,
            },
            Case {
                name: "hardPodAffinityWeight 10",
                plugin: InterPodAffinity {
                    hard_pod_affinity_weight: 10,
                    ..default()
                },
                pod: app("p", "web"),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![with_affinity(
                            "a",
                            json!({}),
                            required("podAffinity", json!([term("web", "zone")])),
                        )],
                    ),
                    (zoned("n2", "z1"), vec![]),
                    (zoned("n3", "z2"), vec![]),
                ],
                want: Some(vec![(10, 100), (10, 100), (0, 0)]),
            },
            Case {
                name: "ignorePreferredTermsOfExistingPods skips pods without preferred terms",
                plugin: InterPodAffinity {
                    ignore_preferred_terms_of_existing_pods: true,
                    ..default()
                },
                pod: app("p", "web"),
                layout: vec![
                    (
                        zoned("n1", "z1"),
                        vec![with_affinity(
                            "b",
                            json!({}),
                            preferred("podAffinity", json!([weighted(4, "web", "zone")])),
                        )],
                    ),
                    (zoned("n2", "z2"), vec![]),
                ],
                want: None,
            },
            Case {
                name: "equal scores normalise to 0",
                plugin: default(),
                pod: with_affinity(
                    "p",
                    json!({}),
                    preferred("podAffinity", json!([weighted(5, "db", "zone")])),
                ),
                layout: vec![
                    (zoned("n1", "z1"), vec![app("d", "db")]),
                    (zoned("n2", "z1"), vec![]),
                ],
                want: Some(vec![(5, 0), (5, 0)]),
            },
            Case {
                name: "nodes without labels contribute nothing",
                plugin: default(),
                pod: with_affinity(
                    "p",
                    json!({}),
                    preferred("podAffinity", json!([weighted(5, "db", "zone")])),
                ),
                layout: vec![
                    (
                        node("n1", json!({}), json!({}), json!({})),
                        vec![app("d", "db")],
                    ),
                    (zoned("n2", "z1"), vec![]),
                ],
                want: None,
            },
        ];
        for case in cases {
            let snap = snapshot(case.layout);
            assert_eq!(
                run_score(&case.plugin, &case.pod, &snap),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn normalisation_truncates() {
        let mut scores: Vec<NodeScore> = [("0", -1), ("1", 0), ("2", 2)]
            .into_iter()
            .map(|(name, score)| NodeScore { name, score })
            .collect();
        normalize_scores(&mut scores);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [0, 33, 100]
        );
    }

    #[test]
    fn args() {
        let defaults = InterPodAffinity::from_args(None).unwrap();
        assert_eq!(defaults.hard_pod_affinity_weight, 1);
        assert!(!defaults.ignore_preferred_terms_of_existing_pods);
        let set = InterPodAffinity::from_args(Some(&json!({
            "hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": true,
        })))
        .unwrap();
        assert_eq!(set.hard_pod_affinity_weight, 0);
        assert!(set.ignore_preferred_terms_of_existing_pods);
        assert_eq!(
            InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": 101}))).unwrap_err(),
            "hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"
        );
        assert!(InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": -1}))).is_err());
        assert!(InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": "x"}))).is_err());
        assert!(
            InterPodAffinity::from_args(Some(&json!({"ignorePreferredTermsOfExistingPods": 1})))
                .is_err()
        );
    }
}
