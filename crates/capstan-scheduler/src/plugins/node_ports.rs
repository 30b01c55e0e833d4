//! NodePorts: a pod asking for host ports goes only where none of them is taken.

use crate::framework::{ClusterEvent, CycleState, Plugin, Point, PreFilterResult, Status};
use crate::snapshot::{HostPort, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = capstan_api::fit::predicates::NODE_PORTS;
/// Upstream's reason.
pub const REASON: &str = capstan_api::fit::predicates::NODE_PORTS_REASON;
const STATE: &str = "PreFilterNodePorts";

/// The plugin.
#[derive(Debug)]
pub struct NodePorts;

/// Whether none of `wanted` conflicts with the node's ports in use.
pub fn fits(wanted: &[HostPort], node: &NodeInfo) -> bool {
    capstan_api::fit::ports_fit(wanted, &node.used_ports)
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdd, ClusterEvent::AssignedPodDelete]
    }
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Status, PreFilterResult) {
        let wanted = pod.host_ports();
        if wanted.is_empty() {
            return (Status::skip(), PreFilterResult::default());
        }
        state.write(STATE, wanted);
        (Status::success(), PreFilterResult::default())
    }
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let computed;
        let wanted = match state.read::<Vec<HostPort>>(STATE) {
            Some(wanted) => wanted,
            None => {
                computed = pod.host_ports();
                &computed
            }
        };
        if fits(wanted, node) {
            Status::success()
        } else {
            Status::unschedulable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::*;
    use serde_json::json;

    fn with_port(
        name: &str,
        port: i32,
        ip: Option<&str>,
        protocol: &str,
    ) -> std::sync::Arc<PodInfo> {
        let mut p = json!({"containerPort": 80, "hostPort": port, "protocol": protocol});
        if let Some(ip) = ip {
            p["hostIP"] = json!(ip);
        }
        pod(
            name,
            json!({}),
            json!({"containers": [{"name": "c", "ports": [p]}]}),
        )
    }

    #[test]
    fn ports_conflict_on_the_same_node() {
        let node = NodeInfo::new(
            sized_node("n", "1", "1Gi"),
            [with_port("a", 8080, None, "TCP")],
        );
        assert!(!fits(
            &with_port("p", 8080, None, "TCP").host_ports(),
            &node
        ));
        assert!(!fits(
            &with_port("p", 8080, Some("127.0.0.1"), "TCP").host_ports(),
            &node
        ));
        assert!(fits(&with_port("p", 8080, None, "UDP").host_ports(), &node));
        assert!(fits(&with_port("p", 8081, None, "TCP").host_ports(), &node));
        let plain = pod("q", json!({}), json!({}));
        let mut state = CycleState::new();
        let (status, _) = NodePorts.pre_filter(&mut state, &plain, &Snapshot::new());
        assert_eq!(status.code, crate::framework::Code::Skip);
    }
}
