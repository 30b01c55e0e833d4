//! Which nodes a DaemonSet's pod belongs on (upstream's `NodeShouldRunDaemonPod` and the
//! daemon pod template helpers of `pkg/controller/daemon/util`): the node name, the node
//! selector and required node affinity, and the node's taints against the pod's tolerations
//! plus the tolerations every daemon pod gets. The matching rules are `capstan_api::fit`'s,
//! the scheduler's own.

use std::collections::BTreeMap;

use capstan_api::fit;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    Toleration,
};

/// Upstream's taint keys.
pub mod taints {
    /// The node is not ready.
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    /// The node controller cannot reach the node.
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    /// The node is short of disk.
    pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
    /// The node is short of memory.
    pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
    /// The node is short of process ids.
    pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
    /// The node is cordoned.
    pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    /// The node's network is not configured.
    pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
}

fn exists(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Toleration::default()
    }
}

/// Same key, operator, value and effect (upstream's `Toleration.MatchToleration`).
fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    a.key == b.key && a.operator == b.operator && a.value == b.value && a.effect == b.effect
}

/// Adds (or replaces) `toleration` among `spec`'s (upstream's `AddOrUpdateTolerationInPodSpec`).
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let list = spec.tolerations.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|t| same_toleration(t, &toleration)) {
        Some(existing) => *existing = toleration,
        None => list.push(toleration),
    }
}

/// The tolerations upstream adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`).
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    for (key, effect) in [
        (taints::NOT_READY, "NoExecute"),
        (taints::UNREACHABLE, "NoExecute"),
        (taints::DISK_PRESSURE, "NoSchedule"),
        (taints::MEMORY_PRESSURE, "NoSchedule"),
        (taints::PID_PRESSURE, "NoSchedule"),
        (taints::UNSCHEDULABLE, "NoSchedule"),
    ] {
        add_or_update_toleration(spec, exists(key, effect));
    }
    if spec.host_network == Some(true) {
        add_or_update_toleration(spec, exists(taints::NETWORK_UNAVAILABLE, "NoSchedule"));
    }
}

/// Pins a pod to `node` with a required `metadata.name In [node]` node affinity term, replacing
/// any required terms (upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`).
pub fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let selector = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.into()]),
            }]),
            match_expressions: None,
        }],
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(selector);
    affinity
}

/// The node a daemon pod is bound or pinned to (upstream's `GetTargetNodeName`).
pub fn target_node(spec: &PodSpec) -> Option<&str> {
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(node);
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.as_deref().unwrap_or_default())
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| match r.values.as_deref() {
            Some([one]) => Some(one.as_str()),
            _ => None,
        })
}

/// Whether the daemon pod should run on the node, and whether one already there may keep
/// running (upstream's `NodeShouldRunDaemonPod`): the template's node name, node selector and
/// affinity must fit; untolerated NoSchedule or NoExecute taints keep new pods off, and only
/// untolerated NoExecute taints evict running ones.
pub fn should_run(template: Option<&PodSpec>, node: &Node) -> (bool, bool) {
    let mut spec = template.cloned().unwrap_or_default();
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    if spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != node_name)
    {
        return (false, false);
    }
    add_daemon_tolerations(&mut spec);
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if !fit::pod_matches_node(&spec, node_name, labels) {
        return (false, false);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    if fit::first_untolerated(taints, tolerations, &["NoSchedule", "NoExecute"]).is_some() {
        return (
            false,
            fit::first_untolerated(taints, tolerations, &["NoExecute"]).is_none(),
        );
    }
    (true, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("bad node: {e}"))
    }

    fn spec(value: serde_json::Value) -> PodSpec {
        let mut value = value;
        value["containers"] = json!([]);
        serde_json::from_value(value).unwrap_or_else(|e| panic!("bad spec: {e}"))
    }

    #[test]
    fn should_run_follows_selector_affinity_taints_and_node_name() {
        let n = node(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a", "cpus": "8"}},
            "spec": {},
        }));
        let tainted = |key: &str, effect: &str| {
            let mut n = n.clone();
            n.spec = Some(
                serde_json::from_value(
                    json!({"taints": [{"key": key, "value": "x", "effect": effect}]}),
                )
                .unwrap_or_else(|e| panic!("{e}")),
            );
            n
        };
        let check = |spec: PodSpec, node: &Node, expected: (bool, bool)| {
            assert_eq!(
                should_run(Some(&spec), node),
                expected,
                "{spec:?} on {:?}",
                node.spec
            );
        };
        check(spec(json!({})), &n, (true, true));
        check(spec(json!({"nodeName": "n1"})), &n, (true, true));
        check(spec(json!({"nodeName": "n2"})), &n, (false, false));
        check(
            spec(json!({"nodeSelector": {"zone": "a"}})),
            &n,
            (true, true),
        );
        check(
            spec(json!({"nodeSelector": {"zone": "b"}})),
            &n,
            (false, false),
        );
        let affinity = |terms: serde_json::Value| {
            spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": terms}}}}),
            )
        };
        check(
            affinity(
                json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
            ),
            &n,
            (true, true),
        );
        check(
            affinity(
                json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]),
            ),
            &n,
            (false, false),
        );
        check(
            affinity(json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])),
            &n,
            (true, true),
        );
        check(
            affinity(
                json!([{"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["4"]}]}]),
            ),
            &n,
            (true, true),
        );
        check(
            affinity(
                json!([{"matchExpressions": [{"key": "cpus", "operator": "Lt", "values": ["4"]}]}]),
            ),
            &n,
            (false, false),
        );
        check(
            affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
            ),
            &n,
            (true, true),
        );
        check(
            affinity(json!([{}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}])),
            &n,
            (true, true),
        );
        check(
            affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}])),
            &n,
            (false, false),
        );
        // Taints: NoSchedule keeps new pods off but lets running ones stay; NoExecute evicts.
        check(
            spec(json!({})),
            &tainted("dedicated", "NoSchedule"),
            (false, true),
        );
        check(
            spec(json!({})),
            &tainted("dedicated", "NoExecute"),
            (false, false),
        );
        check(
            spec(json!({})),
            &tainted("dedicated", "PreferNoSchedule"),
            (true, true),
        );
        let tolerating =
            spec(json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "x"}]}));
        check(
            tolerating.clone(),
            &tainted("dedicated", "NoExecute"),
            (true, true),
        );
        let wrong_value = spec(json!({"tolerations": [{"key": "dedicated", "value": "y"}]}));
        check(
            wrong_value,
            &tainted("dedicated", "NoSchedule"),
            (false, true),
        );
        // The daemon tolerations: not-ready nodes and cordoned nodes still run daemons.
        check(
            spec(json!({})),
            &tainted(taints::NOT_READY, "NoExecute"),
            (true, true),
        );
        check(
            spec(json!({})),
            &tainted(taints::UNSCHEDULABLE, "NoSchedule"),
            (true, true),
        );
        check(
            spec(json!({})),
            &tainted(taints::NETWORK_UNAVAILABLE, "NoSchedule"),
            (false, true),
        );
        check(
            spec(json!({"hostNetwork": true})),
            &tainted(taints::NETWORK_UNAVAILABLE, "NoSchedule"),
            (true, true),
        );
    }

    #[test]
    fn daemon_tolerations_are_added_once() {
        let mut s = spec(json!({"tolerations": [
            {"key": taints::NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
            {"key": "mine", "operator": "Exists"}]}));
        add_daemon_tolerations(&mut s);
        add_daemon_tolerations(&mut s);
        let list = s.tolerations.unwrap_or_default();
        assert_eq!(list.len(), 7, "{list:?}");
        assert_eq!(
            list[0].toleration_seconds, None,
            "replaced by the daemon default"
        );
        assert_eq!(list[1].key.as_deref(), Some("mine"));
    }

    #[test]
    fn pods_are_pinned_and_found_by_node() {
        let affinity: Affinity = serde_json::from_value(json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}]},
            "podAntiAffinity": {},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let pinned = pin_to_node(Some(affinity), "n7");
        let node_affinity = pinned.node_affinity.clone().unwrap_or_default();
        let terms = node_affinity
            .required_during_scheduling_ignored_during_execution
            .unwrap_or_default()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert!(
            node_affinity
                .preferred_during_scheduling_ignored_during_execution
                .is_some()
        );
        assert!(pinned.pod_anti_affinity.is_some());
        let mut s = spec(json!({}));
        s.affinity = Some(pinned);
        assert_eq!(target_node(&s), Some("n7"));
        s.node_name = Some("n8".into());
        assert_eq!(target_node(&s), Some("n8"));
        assert_eq!(target_node(&spec(json!({}))), None);
        assert!(pin_to_node(None, "n1").node_affinity.is_some());
    }
}
