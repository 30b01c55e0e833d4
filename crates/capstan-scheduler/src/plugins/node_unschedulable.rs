//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take no pods, unless the pod
//! tolerates upstream's `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use super::taint_toleration::tolerates;
use crate::framework::{ClusterEvent, CycleState, Plugin, Point, Status};
use crate::snapshot::{NodeInfo, PodInfo};

/// The plugin's registered name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream's reason.
pub const REASON: &str = "node(s) were unschedulable";

/// The plugin.
#[derive(Debug)]
pub struct NodeUnschedulable;

/// Whether the pod may go on the node.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    if !node.unschedulable {
        return true;
    }
    let taint = Taint {
        key: "node.kubernetes.io/unschedulable".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    };
    pod.tolerations().iter().any(|t| tolerates(t, &taint))
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
    }
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::*;
    use serde_json::json;

    #[test]
    fn cordoned_nodes_need_the_toleration() {
        let cordoned = NodeInfo::new(
            node("n", json!({}), json!({"unschedulable": true}), json!({})),
            [],
        );
        let open = NodeInfo::new(sized_node("m", "1", "1Gi"), []);
        let plain = pod("a", json!({}), json!({}));
        assert!(!fits(&plain, &cordoned));
        assert!(fits(&plain, &open));
        let tolerant = pod(
            "b",
            json!({}),
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable",
                                    "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        assert!(fits(&tolerant, &cordoned));
    }
}
