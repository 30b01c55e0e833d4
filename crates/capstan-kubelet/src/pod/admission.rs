//! Pod admission on the node, as upstream's kubelet admits a pod before it runs it (its
//! predicate admit handler): a pod bound here that the node cannot run is rejected, failed with
//! the first reason found, instead of being started.
//!
//! The checks, in upstream's order, and the reason each gives:
//! - the pod's `kubernetes.io/os` label, or its `spec.os`, names another system
//!   (`PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`);
//! - room: the pod count, then CPU, memory, ephemeral storage and other resources requested
//!   against the node's allocatable less what the pods already admitted request (`OutOfpods`,
//!   `OutOfcpu`, `OutOfmemory`, ...; extended resources the node does not offer are left out,
//!   as upstream leaves cluster-level resources to others);
//! - `spec.nodeSelector` and required node affinity (`NodeAffinity`), the node's name
//!   (`NodeName`), host ports already taken (`NodePorts`), an untolerated `NoExecute` taint
//!   (`TaintToleration`).
//!
//! The fit rules are the ones the scheduler's plugins call ([`capstan_api::fit`]), as upstream's
//! kubelet calls the scheduler's.

use std::sync::Arc;

use capstan_api::fit::resource::{self, Resource};
use capstan_api::fit::{self, predicates};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

/// The operating system this agent runs pods for.
const OS: &str = "linux";

/// Upstream's reason for an untolerated `NoExecute` taint at admission.
const TAINT_REASON: &str = "node(s) had taints that the pod didn't tolerate";

/// Why a pod was turned away: the pod's `status.reason`, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The reason (`OutOfcpu`, `NodeAffinity`, ...), also the event's.
    pub reason: String,
    /// The message (the pod's status message is `Pod was rejected: <message>`).
    pub message: String,
}

impl Rejection {
    fn predicate(name: &str, description: &str) -> Rejection {
        Rejection {
            reason: name.to_owned(),
            message: format!("Predicate {name} failed: {description}"),
        }
    }

    fn insufficient(resource: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
        Rejection {
            reason: format!("OutOf{resource}"),
            message: format!(
                "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        }
    }
}

/// Whether `node` can run `pod` beside `admitted` (the node's other active pods).
pub fn admit(node: &Arc<Node>, pod: &Arc<Pod>, admitted: &[Arc<Pod>]) -> Result<(), Rejection> {
    let os_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"));
    if os_label.is_some_and(|os| os != OS) {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".to_owned(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .to_owned(),
        });
    }
    let os_field = pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .map(|os| os.name.as_str());
    if os_field.is_some_and(|os| os != OS) {
        return Err(Rejection {
            reason: "PodOSNotSupported".to_owned(),
            message: "Failed to admit pod as the OS field doesn't match node OS".to_owned(),
        });
    }
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let allocatable = resource::node_allocatable(node);
    let mut requested = Resource::default();
    let mut used_ports = Vec::new();
    for other in admitted {
        requested.add(&resource::pod_requests(other));
        used_ports.extend(other.spec.as_ref().map(fit::host_ports).unwrap_or_default());
    }
    let mut wanted = resource::pod_requests(pod);
    // Extended resources the node does not offer are someone else's to account for.
    wanted
        .scalar
        .retain(|name, _| !resource::is_extended(name) || allocatable.scalar.contains_key(name));
    fits(&wanted, admitted.len() as i64, &allocatable, &requested)?;
    let empty = Default::default();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if !fit::pod_matches_node(spec, node_name, labels) {
        return Err(Rejection::predicate(
            predicates::NODE_AFFINITY,
            predicates::NODE_AFFINITY_REASON,
        ));
    }
    if !fit::node_name_fits(spec, node_name) {
        return Err(Rejection::predicate(
            predicates::NODE_NAME,
            predicates::NODE_NAME_REASON,
        ));
    }
    if !fit::ports_fit(&fit::host_ports(spec), &used_ports) {
        return Err(Rejection::predicate(
            predicates::NODE_PORTS,
            predicates::NODE_PORTS_REASON,
        ));
    }
    if untolerated_no_execute(node, spec) {
        return Err(Rejection::predicate(
            predicates::TAINT_TOLERATION,
            TAINT_REASON,
        ));
    }
    Ok(())
}

/// Whether the node has a `NoExecute` taint the pod does not tolerate.
fn untolerated_no_execute(node: &Node, spec: &PodSpec) -> bool {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    fit::first_untolerated(taints, tolerations, &["NoExecute"]).is_some()
}

/// The room check (upstream's `noderesources.Fits`): the first resource the pod lacks.
fn fits(want: &Resource, pods: i64, have: &Resource, used: &Resource) -> Result<(), Rejection> {
    let allowed = have.allowed_pod_number;
    if pods + 1 > allowed {
        return Err(Rejection::insufficient("pods", 1, pods, allowed));
    }
    let named = [
        ("cpu", want.milli_cpu, have.milli_cpu, used.milli_cpu),
        ("memory", want.memory, have.memory, used.memory),
        (
            "ephemeral-storage",
            want.ephemeral_storage,
            have.ephemeral_storage,
            used.ephemeral_storage,
        ),
    ];
    let scalar = want
        .scalar
        .iter()
        .map(|(name, want)| (name.as_str(), *want, have.get(name), used.get(name)));
    for (name, want, have, used) in named.into_iter().chain(scalar) {
        if want > 0 && want > have - used {
            return Err(Rejection::insufficient(name, want, used, have));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(extra: serde_json::Value) -> Arc<Node> {
        let mut node = json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "disk": "ssd"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "3",
                                       "ephemeral-storage": "10Gi"}}
        });
        merge(&mut node, extra);
        Arc::new(serde_json::from_value(node).unwrap())
    }

    fn merge(target: &mut serde_json::Value, extra: serde_json::Value) {
        match (target, extra) {
            (serde_json::Value::Object(t), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(t.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (t, e) => *t = e,
        }
    }

    fn pod(name: &str, extra: serde_json::Value) -> Arc<Pod> {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}
        });
        merge(&mut pod, extra);
        Arc::new(serde_json::from_value(pod).unwrap())
    }

    fn requesting(name: &str, cpu: &str, memory: &str) -> Arc<Pod> {
        pod(
            name,
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}),
        )
    }

    fn rejected(result: Result<(), Rejection>) -> (String, String) {
        let rejection = result.unwrap_err();
        (rejection.reason, rejection.message)
    }

    #[test]
    fn a_pod_that_fits_is_admitted() {
        let node = node(json!({}));
        let others = [requesting("a", "1", "512Mi")];
        assert_eq!(
            admit(&node, &requesting("b", "1", "512Mi"), &others),
            Ok(())
        );
        assert_eq!(admit(&node, &pod("plain", json!({})), &others), Ok(()));
    }

    #[test]
    fn room_is_checked_in_upstreams_order_with_its_numbers() {
        let node = node(json!({}));
        let others = [requesting("a", "1500m", "512Mi")];
        assert_eq!(
            rejected(admit(&node, &requesting("b", "1", "1Gi"), &others)),
            (
                "OutOfcpu".to_owned(),
                "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
                    .to_owned()
            )
        );
        assert_eq!(
            rejected(admit(&node, &requesting("b", "100m", "1Gi"), &others)),
            (
                "OutOfmemory".to_owned(),
                format!(
                    "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                    1 << 30,
                    512 << 20,
                    1 << 30
                )
            )
        );
        let full = [
            pod("a", json!({})),
            pod("b", json!({})),
            pod("c", json!({})),
        ];
        assert_eq!(
            rejected(admit(&node, &pod("d", json!({})), &full)),
            (
                "OutOfpods".to_owned(),
                "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
                    .to_owned()
            )
        );
    }

    #[test]
    fn extended_resources_count_only_when_the_node_offers_them() {
        let gpu = |name: &str, count: &str| {
            pod(
                name,
                json!({"spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"example.com/gpu": count},
                                  "limits": {"example.com/gpu": count}}}]}}),
            )
        };
        assert_eq!(admit(&node(json!({})), &gpu("a", "4"), &[]), Ok(()));
        let offering = node(json!({"status": {"allocatable": {"example.com/gpu": "2"}}}));
        assert_eq!(
            rejected(admit(&offering, &gpu("a", "4"), &[])).0,
            "OutOfexample.com/gpu"
        );
    }

    #[test]
    fn selectors_names_ports_and_taints_are_predicates() {
        let node = node(json!({}));
        let selecting = pod("a", json!({"spec": {"nodeSelector": {"disk": "hdd"}}}));
        assert_eq!(
            rejected(admit(&node, &selecting, &[])),
            (
                "NodeAffinity".to_owned(),
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                    .to_owned()
            )
        );
        let elsewhere = pod("a", json!({"spec": {"nodeName": "n2"}}));
        assert_eq!(rejected(admit(&node, &elsewhere, &[])).0, "NodeName");
        let port = |name: &str| {
            pod(
                name,
                json!({"spec": {"containers": [{"name": "c", "image": "i",
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}),
            )
        };
        assert_eq!(
            rejected(admit(&node, &port("b"), &[port("a")])),
            (
                "NodePorts".to_owned(),
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                    .to_owned()
            )
        );
        let tainted = self::node(json!({"spec": {"taints": [
            {"key": "k", "value": "v", "effect": "NoExecute"},
            {"key": "soft", "effect": "NoSchedule"}]}}));
        assert_eq!(
            rejected(admit(&tainted, &pod("a", json!({})), &[])).0,
            "TaintToleration"
        );
        let tolerating = pod(
            "a",
            json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}),
        );
        // NoSchedule taints are the scheduler's business, not the node's.
        assert_eq!(admit(&tainted, &tolerating, &[]), Ok(()));
    }

    #[test]
    fn another_operating_system_is_turned_away() {
        let node = node(json!({}));
        let labelled = pod(
            "a",
            json!({"metadata": {"labels": {"kubernetes.io/os": "windows"}}}),
        );
        assert_eq!(
            rejected(admit(&node, &labelled, &[])).0,
            "PodOSSelectorNodeLabelDoesNotMatch"
        );
        let windows = pod("a", json!({"spec": {"os": {"name": "windows"}}}));
        assert_eq!(rejected(admit(&node, &windows, &[])).0, "PodOSNotSupported");
    }
}
