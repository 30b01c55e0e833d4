//! TaintToleration: a pod goes only where it tolerates every `NoSchedule` and `NoExecute`
//! taint; among those nodes, fewer untolerated `PreferNoSchedule` taints score higher.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::framework::{
    ClusterEvent, CycleState, NodeScore, Plugin, Point, Status, default_normalize,
};
use crate::snapshot::{NodeInfo, PodInfo};

/// The plugin's registered name.
pub const NAME: &str = capstan_api::fit::predicates::TAINT_TOLERATION;

/// The plugin.
#[derive(Debug)]
pub struct TaintToleration;

pub use capstan_api::fit::{first_untolerated, tolerates};

/// Upstream's reason for an untolerated taint.
pub fn reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or_default()
    )
}

/// How many `PreferNoSchedule` taints of the node the pod does not tolerate (only tolerations
/// without an effect or with `PreferNoSchedule` count).
pub fn intolerable_prefer_no_schedule(taints: &[Taint], tolerations: &[Toleration]) -> i64 {
    let relevant: Vec<&Toleration> = tolerations
        .iter()
        .filter(|t| {
            matches!(
                t.effect.as_deref(),
                None | Some("") | Some("PreferNoSchedule")
            )
        })
        .collect();
    taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|taint| !relevant.iter().any(|t| tolerates(t, taint)))
        .count() as i64
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::Score]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
    }
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match first_untolerated(
            node.taints(),
            pod.tolerations(),
            &["NoSchedule", "NoExecute"],
        ) {
            None => Status::success(),
            Some(taint) => Status::unresolvable(reason(taint)),
        }
    }
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(intolerable_prefer_no_schedule(
            node.taints(),
            pod.tolerations(),
        ))
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn toleration(v: Value) -> Toleration {
        serde_json::from_value(v).unwrap_or_default()
    }
    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn toleration_rules() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        let cases = [
            (
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                true,
            ),
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "gpu"}),
                true,
            ),
            (json!({"key": "dedicated", "value": "cpu"}), false),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (json!({"key": "dedicated", "operator": "Bogus"}), false),
        ];
        for (tol, want) in cases {
            assert_eq!(tolerates(&toleration(tol.clone()), &t), want, "{tol}");
        }
    }

    #[test]
    fn filter_names_the_first_untolerated_taint() {
        let taints = [
            taint("soft", "", "PreferNoSchedule"),
            taint("a", "1", "NoSchedule"),
            taint("b", "", "NoExecute"),
        ];
        let untolerated = first_untolerated(&taints, &[], &["NoSchedule", "NoExecute"]);
        assert_eq!(
            untolerated.map(reason).as_deref(),
            Some("node(s) had untolerated taint {a: 1}")
        );
        let tolerations = [toleration(json!({"key": "a", "operator": "Exists"}))];
        let untolerated = first_untolerated(&taints, &tolerations, &["NoSchedule", "NoExecute"]);
        assert_eq!(
            untolerated.map(reason).as_deref(),
            Some("node(s) had untolerated taint {b: }")
        );
    }

    #[test]
    fn score_counts_prefer_no_schedule() {
        let taints = [
            taint("x", "", "PreferNoSchedule"),
            taint("y", "", "PreferNoSchedule"),
            taint("z", "", "NoSchedule"),
        ];
        assert_eq!(intolerable_prefer_no_schedule(&taints, &[]), 2);
        let tolerations = [
            toleration(json!({"key": "x", "operator": "Exists"})),
            // A NoSchedule toleration does not count for PreferNoSchedule taints.
            toleration(json!({"key": "y", "operator": "Exists", "effect": "NoSchedule"})),
        ];
        assert_eq!(intolerable_prefer_no_schedule(&taints, &tolerations), 1);
        let mut scores = vec![
            NodeScore {
                name: "a",
                score: 2,
            },
            NodeScore {
                name: "b",
                score: 0,
            },
            NodeScore {
                name: "c",
                score: 1,
            },
        ];
        default_normalize(&mut scores, true);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [0, 100, 50]
        );
    }
}
