//! `autoscaling` HorizontalPodAutoscalers, as upstream 1.33 validates its internal type (here the
//! `autoscaling/v2` hub, which has the same shape; `autoscaling/v1` objects are converted to it
//! first, so their errors name v2 paths, as upstream's do): replica bounds, the scale target,
//! each metric's source and target, and the scaling behavior. Gates off by default
//! (`HPAScaleToZero`) stay off, except that an autoscaler already at `minReplicas: 0` may stay.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerSpec, MetricIdentifier, MetricSpec, MetricTarget,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::field::{BadValue, FieldError, Path};
use crate::quantity::Quantity as Parsed;
use crate::validation::meta::{
    validate_nonnegative, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::{NameValidator, is_valid_path_segment_name, validate_dns1123_label};
use crate::validation::resources::validate_container_resource_name;

/// The longest scaling policy period, in seconds.
const MAX_PERIOD_SECONDS: i32 = 1800;
/// The longest stabilization window, in seconds.
const MAX_STABILIZATION_WINDOW_SECONDS: i32 = 3600;

/// A new autoscaler.
pub fn validate_horizontal_pod_autoscaler(hpa: &HorizontalPodAutoscaler) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &hpa.metadata,
        true,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    errs.extend(validate_spec(hpa.spec.as_ref(), &Path::new("spec"), 1));
    errs
}

/// An update of an autoscaler's spec.
pub fn validate_horizontal_pod_autoscaler_update(
    new: &HorizontalPodAutoscaler,
    old: &HorizontalPodAutoscaler,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let old_min = old.spec.as_ref().and_then(|s| s.min_replicas);
    let lower_bound = if old_min == Some(0) { 0 } else { 1 };
    errs.extend(validate_spec(
        new.spec.as_ref(),
        &Path::new("spec"),
        lower_bound,
    ));
    errs
}

/// An update through `/status`.
pub fn validate_horizontal_pod_autoscaler_status_update(
    new: &HorizontalPodAutoscaler,
    old: &HorizontalPodAutoscaler,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let status = new.status.clone().unwrap_or_default();
    let path = Path::new("status");
    errs.extend(validate_nonnegative(
        i64::from(status.current_replicas.unwrap_or(0)),
        &path.child("currentReplicas"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(status.desired_replicas),
        &path.child("desiredReplicas"),
    ));
    errs
}

fn validate_spec(
    spec: Option<&HorizontalPodAutoscalerSpec>,
    path: &Path,
    min_replicas_lower_bound: i32,
) -> Vec<FieldError> {
    let spec = spec.cloned().unwrap_or_default();
    let mut errs = Vec::new();
    if let Some(min) = spec.min_replicas
        && min < min_replicas_lower_bound
    {
        errs.push(FieldError::invalid(
            &path.child("minReplicas"),
            min,
            &format!("must be greater than or equal to {min_replicas_lower_bound}"),
        ));
    }
    if spec.max_replicas < 1 {
        errs.push(FieldError::invalid(
            &path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than 0",
        ));
    }
    if let Some(min) = spec.min_replicas
        && spec.max_replicas < min
    {
        errs.push(FieldError::invalid(
            &path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    errs.extend(validate_object_reference(
        &spec.scale_target_ref,
        &path.child("scaleTargetRef"),
    ));
    let metrics = spec.metrics.unwrap_or_default();
    let metrics_path = path.child("metrics");
    for (i, metric) in metrics.iter().enumerate() {
        errs.extend(validate_metric(metric, &metrics_path.index(i)));
    }
    if spec.min_replicas == Some(0)
        && !metrics
            .iter()
            .any(|m| m.type_ == "Object" || m.type_ == "External")
    {
        errs.push(FieldError::forbidden(
            &metrics_path,
            "must specify at least one Object or External metric to support scaling to zero replicas",
        ));
    }
    if let Some(behavior) = &spec.behavior {
        let path = path.child("behavior");
        for (rules, name) in [
            (&behavior.scale_up, "scaleUp"),
            (&behavior.scale_down, "scaleDown"),
        ] {
            if let Some(rules) = rules {
                errs.extend(validate_rules(rules, &path.child(name)));
            }
        }
    }
    errs
}

fn validate_object_reference(
    reference: &CrossVersionObjectReference,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (value, name) in [(&reference.kind, "kind"), (&reference.name, "name")] {
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(name), ""));
        } else {
            for msg in is_valid_path_segment_name(value) {
                errs.push(FieldError::invalid(&path.child(name), value.as_str(), &msg));
            }
        }
    }
    errs
}

fn validate_rules(rules: &HPAScalingRules, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(window) = rules.stabilization_window_seconds {
        if window < 0 {
            errs.push(FieldError::invalid(
                &path.child("stabilizationWindowSeconds"),
                window,
                "must be greater than or equal to zero",
            ));
        }
        if window > MAX_STABILIZATION_WINDOW_SECONDS {
            errs.push(FieldError::invalid(
                &path.child("stabilizationWindowSeconds"),
                window,
                &format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            ));
        }
    }
    if let Some(select) = &rules.select_policy
        && !["Disabled", "Max", "Min"].contains(&select.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("selectPolicy"),
            select.as_str(),
            &["Disabled", "Max", "Min"],
        ));
    }
    let policies = rules.policies.as_deref().unwrap_or_default();
    let policies_path = path.child("policies");
    if policies.is_empty() {
        errs.push(FieldError::required(
            &policies_path,
            "must specify at least one Policy",
        ));
    }
    for (i, policy) in policies.iter().enumerate() {
        errs.extend(validate_policy(policy, &policies_path.index(i)));
    }
    errs
}

fn validate_policy(policy: &HPAScalingPolicy, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if policy.type_ != "Pods" && policy.type_ != "Percent" {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            policy.type_.as_str(),
            &["Percent", "Pods"],
        ));
    }
    if policy.value <= 0 {
        errs.push(FieldError::invalid(
            &path.child("value"),
            policy.value,
            "must be greater than zero",
        ));
    }
    if policy.period_seconds <= 0 {
        errs.push(FieldError::invalid(
            &path.child("periodSeconds"),
            policy.period_seconds,
            "must be greater than zero",
        ));
    }
    if policy.period_seconds > MAX_PERIOD_SECONDS {
        errs.push(FieldError::invalid(
            &path.child("periodSeconds"),
            policy.period_seconds,
            &format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
        ));
    }
    errs
}

const SOURCE_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];

fn validate_metric(metric: &MetricSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if metric.type_.is_empty() {
        errs.push(FieldError::required(
            &path.child("type"),
            "must specify a metric source type",
        ));
    }
    if !SOURCE_TYPES.contains(&metric.type_.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            metric.type_.as_str(),
            SOURCE_TYPES,
        ));
    }
    // Only the first source given is checked; the others are reported as extra below.
    let mut present: Vec<&str> = Vec::new();
    if let Some(src) = &metric.object {
        present.push("object");
        let p = path.child("object");
        errs.extend(validate_object_reference(
            &src.described_object,
            &p.child("describedObject"),
        ));
        errs.extend(validate_identifier(&src.metric, &p.child("metric")));
        errs.extend(validate_target(&src.target, &p.child("target")));
        if src.target.value.is_none() && src.target.average_value.is_none() {
            errs.push(FieldError::required(
                &p.child("target").child("averageValue"),
                "must set either a target value or averageValue",
            ));
        }
    }
    if let Some(src) = &metric.external {
        present.push("external");
        if present.len() == 1 {
            let p = path.child("external");
            errs.extend(validate_identifier(&src.metric, &p.child("metric")));
            errs.extend(validate_target(&src.target, &p.child("target")));
            let target = &src.target;
            if target.value.is_none() && target.average_value.is_none() {
                errs.push(FieldError::required(
                    &p.child("target").child("averageValue"),
                    "must set either a target value for metric or a per-pod target",
                ));
            }
            if target.value.is_some() && target.average_value.is_some() {
                errs.push(FieldError::forbidden(
                    &p.child("target").child("value"),
                    "may not set both a target value for metric and a per-pod target",
                ));
            }
        }
    }
    if let Some(src) = &metric.pods {
        present.push("pods");
        if present.len() == 1 {
            let p = path.child("pods");
            errs.extend(validate_identifier(&src.metric, &p.child("metric")));
            errs.extend(validate_target(&src.target, &p.child("target")));
            if src.target.average_value.is_none() {
                errs.push(FieldError::required(
                    &p.child("target").child("averageValue"),
                    "must specify a positive target averageValue",
                ));
            }
        }
    }
    if let Some(src) = &metric.resource {
        present.push("resource");
        if present.len() == 1 {
            let p = path.child("resource");
            if src.name.is_empty() {
                errs.push(FieldError::required(
                    &p.child("name"),
                    "must specify a resource name",
                ));
            }
            errs.extend(validate_utilization_target(&src.target, &p.child("target")));
        }
    }
    if let Some(src) = &metric.container_resource {
        present.push("containerResource");
        if present.len() == 1 {
            let p = path.child("containerResource");
            if src.name.is_empty() {
                errs.push(FieldError::required(
                    &p.child("name"),
                    "must specify a resource name",
                ));
            } else {
                errs.extend(validate_container_resource_name(
                    &src.name,
                    &p.child("name"),
                ));
            }
            if src.container.is_empty() {
                errs.push(FieldError::required(
                    &p.child("container"),
                    "must specify a container",
                ));
            } else {
                errs.extend(validate_dns1123_label(
                    &src.container,
                    &p.child("container"),
                ));
            }
            errs.extend(validate_utilization_target(&src.target, &p.child("target")));
        }
    }
    let expected = match metric.type_.as_str() {
        "Object" => Some(("object", metric.object.is_some())),
        "Pods" => Some(("pods", metric.pods.is_some())),
        "Resource" => Some(("resource", metric.resource.is_some())),
        "External" => Some(("external", metric.external.is_some())),
        "ContainerResource" => Some(("containerResource", metric.container_resource.is_some())),
        _ => None,
    };
    match expected {
        Some((field, false)) => errs.push(FieldError::required(
            &path.child(field),
            "must populate information for the given metric source",
        )),
        Some(_) => {}
        None => errs.push(FieldError::not_supported(
            &path.child("type"),
            metric.type_.as_str(),
            SOURCE_TYPES,
        )),
    }
    if present.len() != 1 {
        let expected = expected.map(|(f, _)| f);
        let mut extra: Vec<&str> = present
            .into_iter()
            .filter(|f| Some(*f) != expected)
            .collect();
        extra.sort_unstable();
        for field in extra {
            errs.push(FieldError::forbidden(
                &path.child(field),
                "must populate the given metric source only",
            ));
        }
    }
    errs
}

/// The target of a (container) resource metric: a utilization or an average value, not both.
fn validate_utilization_target(target: &MetricTarget, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_target(target, path);
    if target.average_utilization.is_none() && target.average_value.is_none() {
        errs.push(FieldError::required(
            &path.child("averageUtilization"),
            "must set either a target raw value or a target utilization",
        ));
    }
    if target.average_utilization.is_some() && target.average_value.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("averageValue"),
            "may not set both a target raw value and a target utilization",
        ));
    }
    errs
}

fn is_positive(q: &Quantity) -> bool {
    Parsed::parse(&q.0).is_ok_and(|q| !q.is_zero() && !q.is_negative())
}

fn validate_target(target: &MetricTarget, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if target.type_.is_empty() {
        errs.push(FieldError::required(
            &path.child("type"),
            "must specify a metric target type",
        ));
    }
    if !["Utilization", "Value", "AverageValue"].contains(&target.type_.as_str()) {
        errs.push(FieldError::invalid(
            &path.child("type"),
            target.type_.as_str(),
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    for (value, name) in [
        (&target.value, "value"),
        (&target.average_value, "averageValue"),
    ] {
        if let Some(q) = value
            && !is_positive(q)
        {
            errs.push(FieldError::invalid(
                &path.child(name),
                BadValue::Other(q.0.clone()),
                "must be positive",
            ));
        }
    }
    if let Some(u) = target.average_utilization
        && u < 1
    {
        errs.push(FieldError::invalid(
            &path.child("averageUtilization"),
            u,
            "must be greater than 0",
        ));
    }
    errs
}

fn validate_identifier(id: &MetricIdentifier, path: &Path) -> Vec<FieldError> {
    if id.name.is_empty() {
        return vec![FieldError::required(
            &path.child("name"),
            "must specify a metric name",
        )];
    }
    is_valid_path_segment_name(&id.name)
        .into_iter()
        .map(|msg| FieldError::invalid(&path.child("name"), id.name.as_str(), &msg))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hpa(spec: serde_json::Value) -> HorizontalPodAutoscaler {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn fields(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.detail))
            .collect()
    }

    #[test]
    fn a_complete_autoscaler_is_valid() {
        let h = hpa(json!({
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
            "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]}},
        }));
        assert!(validate_horizontal_pod_autoscaler(&h).is_empty());
    }

    #[test]
    fn bounds_targets_and_sources_are_checked() {
        let h = hpa(json!({
            "scaleTargetRef": {"kind": "", "name": "a/b"},
            "minReplicas": 0, "maxReplicas": 0,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}},
                {"type": "Pods", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 10}}},
            ],
            "behavior": {"scaleDown": {"selectPolicy": "Sometimes", "policies": []}},
        }));
        let errs = fields(&validate_horizontal_pod_autoscaler(&h));
        assert!(
            errs.contains(&"spec.minReplicas: must be greater than or equal to 1".to_owned()),
            "{errs:?}"
        );
        assert!(errs.contains(&"spec.maxReplicas: must be greater than 0".to_owned()));
        assert!(errs.contains(&"spec.scaleTargetRef.kind: ".to_owned()));
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.scaleTargetRef.name: may not contain '/'"))
        );
        assert!(
            errs.contains(
                &"spec.metrics[0].resource.target.averageUtilization: must be greater than 0"
                    .to_owned()
            )
        );
        assert!(
            errs.contains(
                &"spec.metrics[1].pods: must populate information for the given metric source"
                    .to_owned()
            )
        );
        assert!(errs.contains(
            &"spec.behavior.scaleDown.policies: must specify at least one Policy".to_owned()
        ));
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.behavior.scaleDown.selectPolicy"))
        );
    }
}
