//! HorizontalPodAutoscaler defaults. `autoscaling/v2`: one replica at least, the 80% CPU target
//! when no metric is named, and, once a behavior is given, every rule it leaves out (scale up:
//! no stabilization, the larger of 4 pods or 100% per 15 seconds; scale down: a 300-second
//! window, 100% per 15 seconds; both select the largest change). `autoscaling/v1`: one replica
//! at least (its CPU default comes with conversion).

use k8s_openapi::api::autoscaling::{v1, v2};

/// The CPU utilization an autoscaler without metrics targets.
const DEFAULT_CPU_UTILIZATION: i32 = 80;

fn policy(type_: &str, value: i32) -> v2::HPAScalingPolicy {
    v2::HPAScalingPolicy {
        type_: type_.to_owned(),
        value,
        period_seconds: 15,
    }
}

/// Fills in what `rules` leaves out from `defaults`.
fn fill_rules(rules: &mut Option<v2::HPAScalingRules>, defaults: v2::HPAScalingRules) {
    let rules = rules.get_or_insert_with(Default::default);
    if rules.stabilization_window_seconds.is_none() {
        rules.stabilization_window_seconds = defaults.stabilization_window_seconds;
    }
    if rules.select_policy.is_none() {
        rules.select_policy = defaults.select_policy;
    }
    if rules.policies.is_none() {
        rules.policies = defaults.policies;
    }
}

/// `autoscaling/v2` defaults.
pub fn default_hpa_v2(hpa: &mut v2::HorizontalPodAutoscaler) {
    let spec = hpa.spec.get_or_insert_with(Default::default);
    spec.min_replicas.get_or_insert(1);
    if spec.metrics.as_ref().is_none_or(Vec::is_empty) {
        spec.metrics = Some(vec![v2::MetricSpec {
            type_: "Resource".into(),
            resource: Some(v2::ResourceMetricSource {
                name: "cpu".into(),
                target: v2::MetricTarget {
                    type_: "Utilization".into(),
                    average_utilization: Some(DEFAULT_CPU_UTILIZATION),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }]);
    }
    if let Some(behavior) = spec.behavior.as_mut() {
        fill_rules(
            &mut behavior.scale_up,
            v2::HPAScalingRules {
                stabilization_window_seconds: Some(0),
                select_policy: Some("Max".into()),
                policies: Some(vec![policy("Pods", 4), policy("Percent", 100)]),
                tolerance: None,
            },
        );
        fill_rules(
            &mut behavior.scale_down,
            v2::HPAScalingRules {
                stabilization_window_seconds: Some(300),
                select_policy: Some("Max".into()),
                policies: Some(vec![policy("Percent", 100)]),
                tolerance: None,
            },
        );
    }
}

/// `autoscaling/v1` defaults.
pub fn default_hpa_v1(hpa: &mut v1::HorizontalPodAutoscaler) {
    hpa.spec
        .get_or_insert_with(Default::default)
        .min_replicas
        .get_or_insert(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_given_behavior_is_completed() {
        let mut hpa: v2::HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "a"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "a"}, "maxReplicas": 3,
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
        }))
        .unwrap();
        default_hpa_v2(&mut hpa);
        let v = serde_json::to_value(&hpa).unwrap();
        assert_eq!(v["spec"]["minReplicas"], 1);
        assert_eq!(
            v["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert_eq!(
            v["spec"]["behavior"],
            json!({
                "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                              "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                         {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            })
        );
    }
}
