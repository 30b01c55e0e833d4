//! NodeAffinity: the classic fit predicate (`spec.nodeSelector`) and required node affinity
//! terms decide where a pod may go; preferred terms add their weights to a node's score.
//! `addedAffinity` in the plugin's arguments applies to every pod of the profile.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    NodeAffinity as ApiNodeAffinity, NodeSelector, PreferredSchedulingTerm,
};

use crate::framework::{
    ClusterEvent, CycleState, NodeScore, Plugin, Point, PreFilterResult, Status, default_normalize,
};
use crate::snapshot::{Labels, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = capstan_api::fit::predicates::NODE_AFFINITY;
/// Upstream's reason for a node the pod's selector or affinity does not match.
pub const REASON_POD: &str = capstan_api::fit::predicates::NODE_AFFINITY_REASON;
/// Upstream's reason for a node the profile's `addedAffinity` does not match.
pub const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Upstream's reason when the terms name disjoint sets of nodes.
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";

/// The plugin, with the profile's added affinity.
#[derive(Debug, Default)]
pub struct NodeAffinity {
    added: Option<ApiNodeAffinity>,
}

impl NodeAffinity {
    /// Reads `NodeAffinityArgs` (`addedAffinity`).
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<NodeAffinity, String> {
        let added = match args.and_then(|a| a.get("addedAffinity")) {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(
                serde_json::from_value(value.clone())
                    .map_err(|e| format!("NodeAffinityArgs.addedAffinity: {e}"))?,
            ),
        };
        Ok(NodeAffinity { added })
    }
}

pub use capstan_api::fit::{selector_matches, term_matches};

/// Upstream's `GetRequiredNodeAffinity(pod).Match(node)` for a pod of the snapshot.
pub fn pod_matches_node(pod: &PodInfo, name: &str, labels: &Labels) -> bool {
    pod.pod
        .spec
        .as_ref()
        .is_none_or(|spec| capstan_api::fit::pod_matches_node(spec, name, labels))
}

fn required(pod: &PodInfo) -> Option<&NodeSelector> {
    capstan_api::fit::required_node_affinity(pod.pod.spec.as_ref()?)
}

fn preferred(pod: &PodInfo) -> &[PreferredSchedulingTerm] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// The node names the required terms restrict the pod to through `metadata.name In`
/// requirements: `None` when some term does not restrict by name (terms are ORed); the empty
/// set when the terms cannot all hold.
pub fn named_nodes(selector: &NodeSelector) -> Option<BTreeSet<String>> {
    let mut union = BTreeSet::new();
    for term in &selector.node_selector_terms {
        let mut term_names: Option<BTreeSet<String>> = None;
        for r in term.match_fields.iter().flatten() {
            if r.key == "metadata.name" && r.operator == "In" {
                let names: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                term_names = Some(match term_names {
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                    None => names,
                });
            }
        }
        union.extend(term_names?);
    }
    Some(union)
}

/// The sum of the weights of the preferred terms that match the node.
pub fn preferred_score(terms: &[PreferredSchedulingTerm], name: &str, labels: &Labels) -> i64 {
    terms
        .iter()
        .filter(|t| t.weight != 0 && term_matches(&t.preference, name, labels))
        .map(|t| i64::from(t.weight))
        .sum()
}

impl Plugin for NodeAffinity {
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
        &[ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
    }
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Status, PreFilterResult) {
        let has_selector = pod
            .pod
            .spec
            .as_ref()
            .is_some_and(|s| s.node_selector.is_some());
        let required = required(pod);
        let added = self.added.as_ref().and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
        if required.is_none() && added.is_none() && !has_selector {
            return (Status::skip(), PreFilterResult::default());
        }
        match required.and_then(named_nodes) {
            Some(names) if names.is_empty() => (
                Status::unresolvable(REASON_CONFLICT),
                PreFilterResult::default(),
            ),
            Some(names) => (
                Status::success(),
                PreFilterResult {
                    node_names: Some(names),
                },
            ),
            None => (Status::success(), PreFilterResult::default()),
        }
    }
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node.labels();
        if let Some(added) = self.added.as_ref().and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }) && !selector_matches(added, &node.name, labels)
        {
            return Status::unresolvable(REASON_ENFORCED);
        }
        if pod_matches_node(pod, &node.name, labels) {
            Status::success()
        } else {
            Status::unresolvable(REASON_POD)
        }
    }
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        let added = self.added.as_ref().and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        });
        if preferred(pod).is_empty() && added.is_none_or(Vec::is_empty) {
            Status::skip()
        } else {
            Status::success()
        }
    }
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let labels = node.labels();
        let added = self
            .added
            .as_ref()
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or_default();
        Ok(preferred_score(added, &node.name, labels)
            + preferred_score(preferred(pod), &node.name, labels))
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) {
        default_normalize(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::pod;
    use serde_json::{Value, json};

    fn labels(v: Value) -> Labels {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn affinity(required: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": required}}}})
    }

    #[test]
    fn selectors_and_required_terms() {
        let node = labels(json!({"zone": "a", "disk": "ssd", "cores": "8"}));
        let cases = [
            (json!({}), true),
            (json!({"nodeSelector": {"zone": "a"}}), true),
            (json!({"nodeSelector": {"zone": "b"}}), false),
            (
                affinity(json!([{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]}]}])),
                true,
            ),
            (
                affinity(json!([{"matchExpressions": [
                {"key": "zone", "operator": "NotIn", "values": ["a"]}]}])),
                false,
            ),
            (
                affinity(json!([{"matchExpressions": [
                {"key": "gpu", "operator": "DoesNotExist"},
                {"key": "disk", "operator": "Exists"}]}])),
                true,
            ),
            (
                affinity(json!([{"matchExpressions": [
                {"key": "cores", "operator": "Gt", "values": ["4"]}]}])),
                true,
            ),
            (
                affinity(json!([{"matchExpressions": [
                {"key": "cores", "operator": "Lt", "values": ["4"]}]}])),
                false,
            ),
            // Terms are ORed; an empty term matches nothing.
            (
                affinity(json!([{}, {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]}]}])),
                true,
            ),
            (affinity(json!([{}])), false),
            (
                affinity(json!([{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])),
                true,
            ),
            (
                affinity(json!([{"matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}])),
                false,
            ),
        ];
        for (spec, want) in cases {
            let p = pod("p", json!({}), spec.clone());
            assert_eq!(pod_matches_node(&p, "n1", &node), want, "{spec}");
        }
    }

    #[test]
    fn named_nodes_narrow_the_search() {
        let selector = |terms: Value| -> NodeSelector {
            serde_json::from_value(json!({"nodeSelectorTerms": terms})).unwrap_or_default()
        };
        let by_name = |names: Value| json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": names}]});
        let set = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
        assert_eq!(
            named_nodes(&selector(json!([
                by_name(json!(["a", "b"])),
                by_name(json!(["c"]))
            ]))),
            set(&["a", "b", "c"])
        );
        assert_eq!(
            named_nodes(&selector(json!([by_name(json!(["a"])),
                {"matchExpressions": [{"key": "x", "operator": "Exists"}]}]))),
            None
        );
        let conflicting = json!([{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a"]},
            {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]);
        assert_eq!(named_nodes(&selector(conflicting)), set(&[]));
    }

    #[test]
    fn preferred_terms_add_weights() {
        let p = pod(
            "p",
            json!({}),
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]}]}},
                {"weight": 2, "preference": {"matchExpressions": [
                    {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}),
        );
        let score = |l: Value| preferred_score(preferred(&p), "n", &labels(l));
        assert_eq!(score(json!({"zone": "a", "disk": "ssd"})), 7);
        assert_eq!(score(json!({"disk": "ssd"})), 2);
        assert_eq!(score(json!({})), 0);
    }

    #[test]
    fn added_affinity_is_enforced() {
        let plugin = NodeAffinity::from_args(Some(&json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]}]}}})))
        .unwrap_or_default();
        let node = |l: Value| {
            NodeInfo::new(
                crate::snapshot::test_util::node("n", l, json!({}), json!({})),
                [],
            )
        };
        let p = pod("p", json!({}), json!({}));
        let state = CycleState::new();
        assert!(
            plugin
                .filter(&state, &p, &node(json!({"pool": "x"})))
                .is_success()
        );
        let status = plugin.filter(&state, &p, &node(json!({})));
        assert_eq!(status.reasons, [REASON_ENFORCED]);
    }
}
