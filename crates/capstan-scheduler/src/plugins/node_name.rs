//! NodeName: a pod that names its node (`spec.nodeName`) fits only there.

use crate::framework::{ClusterEvent, CycleState, Plugin, Point, Status};
use crate::snapshot::{NodeInfo, PodInfo};

/// The plugin's registered name.
pub const NAME: &str = capstan_api::fit::predicates::NODE_NAME;
/// Upstream's reason.
pub const REASON: &str = capstan_api::fit::predicates::NODE_NAME_REASON;

/// The plugin.
#[derive(Debug)]
pub struct NodeName;

/// Whether the pod may go on the node.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .is_none_or(|spec| capstan_api::fit::node_name_fits(spec, &node.name))
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdd]
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
    fn only_the_named_node_fits() {
        let n1 = NodeInfo::new(sized_node("n1", "1", "1Gi"), []);
        assert!(fits(&pod("a", json!({}), json!({})), &n1));
        assert!(fits(&pod("a", json!({}), json!({"nodeName": "n1"})), &n1));
        assert!(!fits(&pod("a", json!({}), json!({"nodeName": "n2"})), &n1));
    }
}
