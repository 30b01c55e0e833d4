//! Node-fit rules that several components decide by, in one place: whether a toleration
//! tolerates a taint (upstream's `ToleratesTaint`) and whether a node's name and labels satisfy
//! a node selector or a pod's required node affinity (upstream's `nodeaffinity` helpers). The
//! scheduler's plugins, the DaemonSet and taint-eviction controllers and the kubelet's
//! admission and volume checks all call these, so they cannot drift apart. Beside them: host
//! ports and their conflicts, the `spec.nodeName` test, the predicates' upstream names and
//! reasons ([`predicates`]), and [`resource`], the amounts pods request and nodes hold.

pub mod resource;
pub mod volume;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// The fit predicates' upstream names (the scheduler's plugin names, which the kubelet's
/// admission also gives as reasons) and the reasons they report.
pub mod predicates {
    /// Required node affinity and `spec.nodeSelector`.
    pub const NODE_AFFINITY: &str = "NodeAffinity";
    /// Upstream's reason when a pod's node affinity or selector does not match.
    pub const NODE_AFFINITY_REASON: &str = "node(s) didn't match Pod's node affinity/selector";
    /// `spec.nodeName`.
    pub const NODE_NAME: &str = "NodeName";
    /// Upstream's reason when the pod names another node.
    pub const NODE_NAME_REASON: &str = "node(s) didn't match the requested node name";
    /// Host ports.
    pub const NODE_PORTS: &str = "NodePorts";
    /// Upstream's reason when a wanted host port is taken.
    pub const NODE_PORTS_REASON: &str =
        "node(s) didn't have free ports for the requested pod ports";
    /// Taints and tolerations.
    pub const TAINT_TOLERATION: &str = "TaintToleration";
}

/// A host port in use or wanted on a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// The host IP (`0.0.0.0` for every address).
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be bound (upstream's `HostPortInfo.CheckConflict`):
    /// the same protocol and port, on the same IP or where either takes every address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// The host ports a pod's containers (and its sidecar init containers) ask for, with
/// upstream's defaults (`0.0.0.0`, `TCP`).
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    spec.containers
        .iter()
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always")),
        )
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|port| port > 0))
        .map(|p| HostPort {
            ip: p
                .host_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "0.0.0.0".to_owned()),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            port: p.host_port.unwrap_or_default(),
        })
        .collect()
}

/// Whether none of `wanted` conflicts with a port in `used`.
pub fn ports_fit(wanted: &[HostPort], used: &[HostPort]) -> bool {
    wanted
        .iter()
        .all(|w| !used.iter().any(|taken| taken.conflicts(w)))
}

/// Whether a pod may go on the node called `node`: it names no node, or this one.
pub fn node_name_fits(spec: &PodSpec, node: &str) -> bool {
    match spec.node_name.as_deref() {
        None | Some("") => true,
        Some(name) => name == node,
    }
}

/// Whether a toleration tolerates a taint: the effects agree (or the toleration names none),
/// the keys agree (or the toleration names none, which with `Exists` tolerates everything),
/// and the operator's value test holds (`Equal`, the default, compares values; `Exists` does
/// not look at them; any other operator tolerates nothing).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// The first taint with one of `effects` that no toleration tolerates.
pub fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// Whether one requirement holds for a value (a label's, or the node's name for a field
/// requirement; `None` when absent). `Gt`/`Lt` need exactly one integer value and an integer
/// label; a malformed requirement holds for nothing.
pub fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let ([bound], Some(have)) = (values, value.and_then(number)) else {
                return false;
            };
            let Some(bound) = number(bound) else {
                return false;
            };
            if req.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// Whether a node selector term matches a node: every label expression and every field
/// expression (`metadata.name` only) holds; an empty term matches nothing.
pub fn term_matches(
    term: &NodeSelectorTerm,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(name)))
}

/// Whether any of a node selector's terms matches (terms are ORed).
pub fn selector_matches(
    selector: &NodeSelector,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, name, labels))
}

/// The pod's required node affinity, if it has one.
pub fn required_node_affinity(spec: &PodSpec) -> Option<&NodeSelector> {
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// Upstream's `GetRequiredNodeAffinity(pod).Match(node)`: every `spec.nodeSelector` label is
/// the node's, and the required node affinity (if any) matches.
pub fn pod_matches_node(spec: &PodSpec, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    selector_ok
        && required_node_affinity(spec)
            .is_none_or(|required| selector_matches(required, name, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn toleration(value: serde_json::Value) -> Toleration {
        serde_json::from_value(value).unwrap()
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        serde_json::from_value(json!({"key": key, "value": value, "effect": effect})).unwrap()
    }

    #[test]
    fn tolerations_as_upstream() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        let cases = [
            (json!({"key": "dedicated", "value": "gpu"}), true),
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "cpu"}),
                false,
            ),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (
                json!({"key": "dedicated", "operator": "Lt", "value": "gpu"}),
                false,
            ),
            (
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                true,
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(
                tolerates(&toleration(value.clone()), &t),
                expected,
                "{value}"
            );
        }
        let taints = [taint("a", "", "PreferNoSchedule"), t.clone()];
        assert_eq!(
            first_untolerated(&taints, &[], &["NoSchedule", "NoExecute"]),
            Some(&t)
        );
        assert_eq!(
            first_untolerated(
                &taints,
                &[toleration(json!({"operator": "Exists"}))],
                &["NoSchedule"]
            ),
            None
        );
    }

    #[test]
    fn selectors_and_affinity() {
        let labels: BTreeMap<String, String> = [
            ("zone".to_owned(), "a".to_owned()),
            ("cores".to_owned(), "8".to_owned()),
        ]
        .into();
        let term = |value: serde_json::Value| -> NodeSelectorTerm {
            serde_json::from_value(value).unwrap()
        };
        let holds = |value: serde_json::Value| term_matches(&term(value), "n1", &labels);
        assert!(holds(
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]})
        ));
        assert!(!holds(
            json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
        ));
        assert!(holds(
            json!({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]})
        ));
        assert!(!holds(
            json!({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})
        ));
        assert!(!holds(
            json!({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["x"]}]})
        ));
        assert!(holds(
            json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]})
        ));
        assert!(holds(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
        ));
        assert!(!holds(
            json!({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]})
        ));
        assert!(!holds(json!({})), "an empty term matches nothing");

        let spec = |value: serde_json::Value| -> PodSpec { serde_json::from_value(value).unwrap() };
        let required = |terms: serde_json::Value| {
            json!({"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
        };
        assert!(pod_matches_node(
            &spec(json!({"containers": [], "nodeSelector": {"zone": "a"}})),
            "n1",
            &labels
        ));
        assert!(!pod_matches_node(
            &spec(json!({"containers": [], "nodeSelector": {"zone": "b"}})),
            "n1",
            &labels
        ));
        // Terms are ORed.
        assert!(pod_matches_node(
            &spec(required(json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
            ]))),
            "n1",
            &labels
        ));
        assert!(!pod_matches_node(
            &spec(required(json!([{}]))),
            "n1",
            &labels
        ));
    }
}
