//! HorizontalPodAutoscalers between `autoscaling/v1` and the hub, `autoscaling/v2`, following
//! upstream's hand-written conversion (`pkg/apis/autoscaling/v1/conversion.go`):
//!
//! - v1 holds one metric, a CPU utilization target (`targetCPUUtilizationPercentage`); every
//!   other metric travels in the `autoscaling.alpha.kubernetes.io/metrics` annotation, written in
//!   v1's own (v2beta1-shaped) metric types;
//! - current metrics and conditions travel in `.../current-metrics` and `.../conditions`;
//! - scaling behavior travels in `.../behavior`, written as upstream writes it: its internal type
//!   with Go's field names (no JSON tags), read back case-insensitively as `encoding/json` does;
//! - reading a v1 object drops those annotations, and a v1 object without any metric gets the
//!   80% CPU default v1 always implied.
//!
//! Annotations are written with Go's member order, so they read the same as upstream's.

use serde_json::{Map, Value, json};

use super::go_json;

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const ROUND_TRIP: [&str; 4] = [METRICS, BEHAVIOR, CURRENT_METRICS, CONDITIONS];

/// The CPU utilization v1 implies when an autoscaler names no metric.
const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// The member order of every struct written into the annotations (see [`go_json`]).
const GO_ORDER: &[&str] = &[
    // v1 MetricSpec / MetricStatus, conditions
    "type",
    "status",
    "lastTransitionTime",
    "reason",
    "message",
    "object",
    "pods",
    "resource",
    "containerResource",
    "external",
    // metric sources and statuses, object references
    "target",
    "kind",
    "name",
    "apiVersion",
    "metricName",
    "metricSelector",
    "targetValue",
    "currentValue",
    "targetAverageUtilization",
    "currentAverageUtilization",
    "targetAverageValue",
    "currentAverageValue",
    "selector",
    "averageValue",
    "container",
    // label selectors
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    // the internal behavior type
    "ScaleUp",
    "ScaleDown",
    "StabilizationWindowSeconds",
    "SelectPolicy",
    "Policies",
    "Tolerance",
    "Type",
    "Value",
    "PeriodSeconds",
];

fn is_cpu_resource(metric: &Value) -> bool {
    metric["type"] == "Resource" && metric["resource"]["name"] == "cpu"
}

/// Copies `from[name]` into `to` when present and not null.
fn copy(to: &mut Map<String, Value>, name: &str, from: &Value, from_name: &str) {
    if let Some(v) = from.get(from_name).filter(|v| !v.is_null()) {
        to.insert(name.to_owned(), v.clone());
    }
}

/// A quantity that Go writes even when unset: its zero, `"0"`.
fn quantity_or_zero(value: &Value) -> Value {
    if value.is_null() {
        Value::String("0".into())
    } else {
        value.clone()
    }
}

fn object_reference(reference: &Value) -> Value {
    let mut out = Map::new();
    out.insert(
        "kind".into(),
        reference["kind"].as_str().unwrap_or("").into(),
    );
    out.insert(
        "name".into(),
        reference["name"].as_str().unwrap_or("").into(),
    );
    if let Some(v) = reference["apiVersion"].as_str().filter(|v| !v.is_empty()) {
        out.insert("apiVersion".into(), v.into());
    }
    Value::Object(out)
}

/// Which half of an autoscaler a metric comes from: its spec (targets) or its status (current
/// values). The two convert alike, under other names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Spec,
    Status,
}

impl Side {
    /// The v2 member holding the values, and the prefix of v1's names for them.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Side::Spec => ("target", "target"),
            Side::Status => ("current", "current"),
        }
    }
}

/// Puts a quantity under `name`: always when v1 holds it in a Go value (zero when unset),
/// otherwise only when set.
fn put_quantity(out: &mut Map<String, Value>, name: &str, value: &Value, always: bool) {
    if always {
        out.insert(name.to_owned(), quantity_or_zero(value));
    } else if !value.is_null() {
        out.insert(name.to_owned(), value.clone());
    }
}

fn identifier(name: &Value, selector: &Value) -> Value {
    let mut id = Map::new();
    id.insert("name".into(), name.clone());
    if !selector.is_null() {
        id.insert("selector".into(), selector.clone());
    }
    Value::Object(id)
}

/// A v2 metric (spec or status) as v1's annotation holds it.
fn metric_to_v1(metric: &Value, side: Side) -> Value {
    let (values, prefix) = side.names();
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let status = side == Side::Status;
    let mut out = Map::new();
    out.insert("type".into(), metric["type"].clone());
    if let Some(src) = metric.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("target".into(), object_reference(&src["describedObject"]));
        o.insert("metricName".into(), src["metric"]["name"].clone());
        put_quantity(&mut o, &name("Value"), &src[values]["value"], true);
        copy(&mut o, "selector", &src["metric"], "selector");
        copy(&mut o, "averageValue", &src[values], "averageValue");
        out.insert("object".into(), Value::Object(o));
    }
    if let Some(src) = metric.get("pods").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), src["metric"]["name"].clone());
        put_quantity(
            &mut o,
            &name("AverageValue"),
            &src[values]["averageValue"],
            true,
        );
        copy(&mut o, "selector", &src["metric"], "selector");
        out.insert("pods".into(), Value::Object(o));
    }
    for field in ["resource", "containerResource"] {
        if let Some(src) = metric.get(field).filter(|v| v.is_object()) {
            let mut o = Map::new();
            o.insert("name".into(), src["name"].clone());
            copy(
                &mut o,
                &name("AverageUtilization"),
                &src[values],
                "averageUtilization",
            );
            put_quantity(
                &mut o,
                &name("AverageValue"),
                &src[values]["averageValue"],
                status,
            );
            if field == "containerResource" {
                o.insert("container".into(), src["container"].clone());
            }
            out.insert(field.into(), Value::Object(o));
        }
    }
    if let Some(src) = metric.get("external").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), src["metric"]["name"].clone());
        copy(&mut o, "metricSelector", &src["metric"], "selector");
        put_quantity(&mut o, &name("Value"), &src[values]["value"], status);
        put_quantity(
            &mut o,
            &name("AverageValue"),
            &src[values]["averageValue"],
            false,
        );
        out.insert("external".into(), Value::Object(o));
    }
    Value::Object(out)
}

/// A v1 annotation's metric (spec or status) as v2 has it; spec targets get their type, as
/// upstream infers it from which values are set.
fn metric_to_v2(metric: &Value, side: Side) -> Value {
    let (values, prefix) = side.names();
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let status = side == Side::Status;
    let typed = |mut vals: Map<String, Value>, kind: &str| {
        if !status {
            vals.insert("type".into(), kind.into());
        }
        Value::Object(vals)
    };
    let mut out = Map::new();
    out.insert("type".into(), metric["type"].clone());
    if let Some(src) = metric.get("object").filter(|v| v.is_object()) {
        let mut vals = Map::new();
        put_quantity(&mut vals, "value", &src[name("Value")], true);
        copy(&mut vals, "averageValue", src, "averageValue");
        let kind = if src["averageValue"].is_null() {
            "Value"
        } else {
            "AverageValue"
        };
        let mut o = Map::new();
        o.insert("describedObject".into(), object_reference(&src["target"]));
        o.insert(
            "metric".into(),
            identifier(&src["metricName"], &src["selector"]),
        );
        o.insert(values.into(), typed(vals, kind));
        out.insert("object".into(), Value::Object(o));
    }
    if let Some(src) = metric.get("pods").filter(|v| v.is_object()) {
        let mut vals = Map::new();
        put_quantity(&mut vals, "averageValue", &src[name("AverageValue")], true);
        let mut o = Map::new();
        o.insert(
            "metric".into(),
            identifier(&src["metricName"], &src["selector"]),
        );
        o.insert(values.into(), typed(vals, "AverageValue"));
        out.insert("pods".into(), Value::Object(o));
    }
    for field in ["resource", "containerResource"] {
        if let Some(src) = metric.get(field).filter(|v| v.is_object()) {
            let mut vals = Map::new();
            put_quantity(
                &mut vals,
                "averageValue",
                &src[name("AverageValue")],
                status,
            );
            copy(
                &mut vals,
                "averageUtilization",
                src,
                &name("AverageUtilization"),
            );
            let kind = if src[name("AverageUtilization")].is_null() {
                "AverageValue"
            } else {
                "Utilization"
            };
            let mut o = Map::new();
            o.insert("name".into(), src["name"].clone());
            o.insert(values.into(), typed(vals, kind));
            if field == "containerResource" {
                o.insert("container".into(), src["container"].clone());
            }
            out.insert(field.into(), Value::Object(o));
        }
    }
    if let Some(src) = metric.get("external").filter(|v| v.is_object()) {
        let mut vals = Map::new();
        put_quantity(&mut vals, "value", &src[name("Value")], status);
        put_quantity(&mut vals, "averageValue", &src[name("AverageValue")], false);
        let kind = if src[name("Value")].is_null() {
            "AverageValue"
        } else {
            "Value"
        };
        let mut o = Map::new();
        o.insert(
            "metric".into(),
            identifier(&src["metricName"], &src["metricSelector"]),
        );
        o.insert(values.into(), typed(vals, kind));
        out.insert("external".into(), Value::Object(o));
    }
    Value::Object(out)
}

/// A condition as v1's annotation holds it (Go writes an unset time as `null`).
fn condition_to_v1(condition: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), condition["type"].clone());
    out.insert("status".into(), condition["status"].clone());
    out.insert(
        "lastTransitionTime".into(),
        condition["lastTransitionTime"].clone(),
    );
    for field in ["reason", "message"] {
        if condition[field].as_str().is_some_and(|s| !s.is_empty()) {
            out.insert(field.into(), condition[field].clone());
        }
    }
    Value::Object(out)
}

fn condition_to_v2(condition: &Value) -> Value {
    let mut out = Map::new();
    for field in ["type", "status", "lastTransitionTime", "reason", "message"] {
        copy(&mut out, field, condition, field);
    }
    Value::Object(out)
}

/// Scaling behavior as upstream's internal type marshals: Go field names, nil as `null`.
fn behavior_to_internal(behavior: &Value) -> Value {
    let rules = |rules: &Value| {
        if !rules.is_object() {
            return Value::Null;
        }
        let policies = match rules["policies"].as_array() {
            Some(list) => Value::Array(
                list.iter()
                    .map(|p| {
                        json!({
                            "Type": p["type"].as_str().unwrap_or(""),
                            "Value": p["value"].as_i64().unwrap_or(0),
                            "PeriodSeconds": p["periodSeconds"].as_i64().unwrap_or(0),
                        })
                    })
                    .collect(),
            ),
            None => Value::Null,
        };
        json!({
            "StabilizationWindowSeconds": rules["stabilizationWindowSeconds"],
            "SelectPolicy": rules["selectPolicy"],
            "Policies": policies,
            "Tolerance": rules["tolerance"],
        })
    };
    json!({
        "ScaleUp": rules(&behavior["scaleUp"]),
        "ScaleDown": rules(&behavior["scaleDown"]),
    })
}

/// A member of a Go struct as `encoding/json` finds it: the exact name, else any case.
fn member<'a>(object: &'a Map<String, Value>, name: &str) -> &'a Value {
    object
        .get(name)
        .or_else(|| {
            object
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .unwrap_or(&Value::Null)
}

fn optional_int(value: &Value) -> Result<Value, ()> {
    match value {
        Value::Null => Ok(Value::Null),
        Value::Number(n) if n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => {
            Ok(value.clone())
        }
        _ => Err(()),
    }
}

fn optional_str(value: &Value) -> Result<Value, ()> {
    match value {
        Value::Null | Value::String(_) => Ok(value.clone()),
        _ => Err(()),
    }
}

/// Reads the behavior annotation as upstream does: only a well-formed value with some rule
/// becomes the autoscaler's behavior.
fn behavior_from_internal(text: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text).ok()?;
    let object = value.as_object()?;
    let rules = |value: &Value| -> Result<Option<Value>, ()> {
        let rules = match value {
            Value::Null => return Ok(None),
            Value::Object(rules) => rules,
            _ => return Err(()),
        };
        let mut out = Map::new();
        let window = optional_int(member(rules, "StabilizationWindowSeconds"))?;
        let select = optional_str(member(rules, "SelectPolicy"))?;
        let tolerance = match member(rules, "Tolerance") {
            Value::Null => Value::Null,
            Value::String(s) => Value::String(s.clone()),
            Value::Number(n) => Value::String(n.to_string()),
            _ => return Err(()),
        };
        let policies = match member(rules, "Policies") {
            Value::Null => Value::Null,
            Value::Array(list) => {
                let mut policies = Vec::new();
                for p in list {
                    let p = p.as_object().ok_or(())?;
                    let kind = optional_str(member(p, "Type"))?;
                    let value = optional_int(member(p, "Value"))?;
                    let period = optional_int(member(p, "PeriodSeconds"))?;
                    policies.push(json!({
                        "type": if kind.is_null() { "".into() } else { kind },
                        "value": if value.is_null() { 0.into() } else { value },
                        "periodSeconds": if period.is_null() { 0.into() } else { period },
                    }));
                }
                Value::Array(policies)
            }
            _ => return Err(()),
        };
        for (name, v) in [
            ("stabilizationWindowSeconds", window),
            ("selectPolicy", select),
            ("policies", policies),
            ("tolerance", tolerance),
        ] {
            if !v.is_null() {
                out.insert(name.into(), v);
            }
        }
        Ok(Some(Value::Object(out)))
    };
    let up = rules(member(object, "ScaleUp")).ok()?;
    let down = rules(member(object, "ScaleDown")).ok()?;
    if up.is_none() && down.is_none() {
        return None;
    }
    let mut out = Map::new();
    if let Some(up) = up {
        out.insert("scaleUp".into(), up);
    }
    if let Some(down) = down {
        out.insert("scaleDown".into(), down);
    }
    Some(Value::Object(out))
}

/// The metadata of `object` with the round-trip annotations dropped, and its annotations.
fn metadata_without_round_trip(object: &Value) -> (Map<String, Value>, Map<String, Value>) {
    let mut metadata = object
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut annotations = match metadata.remove("annotations") {
        Some(Value::Object(a)) => a,
        _ => Map::new(),
    };
    for key in ROUND_TRIP {
        annotations.remove(key);
    }
    (metadata, annotations)
}

fn finish(
    mut metadata: Map<String, Value>,
    annotations: Map<String, Value>,
    api_version: &str,
    spec: Map<String, Value>,
    status: Option<Map<String, Value>>,
) -> Value {
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), "HorizontalPodAutoscaler".into());
    out.insert("metadata".into(), Value::Object(metadata));
    out.insert("spec".into(), Value::Object(spec));
    if let Some(status) = status {
        out.insert("status".into(), Value::Object(status));
    }
    Value::Object(out)
}

/// What the spec of both versions holds alike: the target and the replica bounds.
fn shared_spec(spec: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert(
        "scaleTargetRef".into(),
        object_reference(&spec["scaleTargetRef"]),
    );
    copy(&mut out, "minReplicas", spec, "minReplicas");
    out.insert(
        "maxReplicas".into(),
        spec["maxReplicas"].as_i64().unwrap_or(0).into(),
    );
    out
}

/// An `autoscaling/v2` HorizontalPodAutoscaler as `autoscaling/v1`.
pub(super) fn v2_to_v1(hub: &Value) -> Value {
    let (metadata, mut annotations) = metadata_without_round_trip(hub);
    let spec = &hub["spec"];
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();

    let mut out_spec = shared_spec(spec);
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_resource(m)) {
        copy(
            &mut out_spec,
            "targetCPUUtilizationPercentage",
            &cpu["resource"]["target"],
            "averageUtilization",
        );
    }
    let others: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_resource(m) || m["resource"]["target"]["averageUtilization"].is_null())
        .map(|m| metric_to_v1(m, Side::Spec))
        .collect();
    if !others.is_empty() {
        annotations.insert(
            METRICS.into(),
            go_json(&Value::Array(others), GO_ORDER).into(),
        );
    }
    if let Some(behavior) = spec.get("behavior").filter(|b| b.is_object()) {
        annotations.insert(
            BEHAVIOR.into(),
            go_json(&behavior_to_internal(behavior), GO_ORDER).into(),
        );
    }

    let status = hub.get("status").filter(|s| s.is_object()).map(|status| {
        let mut out = Map::new();
        copy(&mut out, "observedGeneration", status, "observedGeneration");
        copy(&mut out, "lastScaleTime", status, "lastScaleTime");
        out.insert(
            "currentReplicas".into(),
            status["currentReplicas"].as_i64().unwrap_or(0).into(),
        );
        out.insert(
            "desiredReplicas".into(),
            status["desiredReplicas"].as_i64().unwrap_or(0).into(),
        );
        let current = status["currentMetrics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for metric in current.iter().filter(|m| is_cpu_resource(m)) {
            copy(
                &mut out,
                "currentCPUUtilizationPercentage",
                &metric["resource"]["current"],
                "averageUtilization",
            );
        }
        if !current.is_empty() {
            let v1: Vec<Value> = current
                .iter()
                .map(|m| metric_to_v1(m, Side::Status))
                .collect();
            annotations.insert(
                CURRENT_METRICS.into(),
                go_json(&Value::Array(v1), GO_ORDER).into(),
            );
        }
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        if !conditions.is_empty() {
            let v1: Vec<Value> = conditions.iter().map(condition_to_v1).collect();
            annotations.insert(
                CONDITIONS.into(),
                go_json(&Value::Array(v1), GO_ORDER).into(),
            );
        }
        out
    });
    finish(metadata, annotations, "autoscaling/v1", out_spec, status)
}

fn parse_list(annotations: &Map<String, Value>, key: &str) -> Result<Option<Vec<Value>>, String> {
    let Some(text) = annotations.get(key) else {
        return Ok(None);
    };
    let text = text.as_str().unwrap_or_default();
    match serde_json::from_str::<Value>(text).map_err(|e| e.to_string())? {
        Value::Array(items) => Ok(Some(items)),
        Value::Null => Ok(Some(Vec::new())),
        _ => Err(format!(
            "json: cannot unmarshal the {key} annotation into a list"
        )),
    }
}

/// An `autoscaling/v1` HorizontalPodAutoscaler as `autoscaling/v2`.
pub(super) fn v1_to_v2(v1: &Value) -> Result<Value, String> {
    let annotations = v1["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (metadata, kept) = metadata_without_round_trip(v1);
    let spec = &v1["spec"];

    let mut out_spec = shared_spec(spec);
    let cpu = |utilization: &Value| {
        json!({
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": utilization},
            },
        })
    };
    let mut metrics: Vec<Value> = Vec::new();
    if let Some(others) = parse_list(&annotations, METRICS)? {
        metrics.extend(others.iter().map(|m| metric_to_v2(m, Side::Spec)));
    }
    if let Some(target) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|v| !v.is_null())
    {
        metrics.push(cpu(target));
    }
    if metrics.is_empty() {
        metrics.push(cpu(&DEFAULT_CPU_UTILIZATION.into()));
    }
    out_spec.insert("metrics".into(), Value::Array(metrics));
    if let Some(behavior) = annotations
        .get(BEHAVIOR)
        .and_then(Value::as_str)
        .and_then(behavior_from_internal)
    {
        out_spec.insert("behavior".into(), behavior);
    }

    let current = parse_list(&annotations, CURRENT_METRICS)?;
    let conditions = parse_list(&annotations, CONDITIONS)?;
    let status = v1.get("status").filter(|s| s.is_object()).map(|status| {
        let mut out = Map::new();
        copy(&mut out, "observedGeneration", status, "observedGeneration");
        copy(&mut out, "lastScaleTime", status, "lastScaleTime");
        let replicas = status["currentReplicas"].as_i64().unwrap_or(0);
        if replicas != 0 {
            out.insert("currentReplicas".into(), replicas.into());
        }
        out.insert(
            "desiredReplicas".into(),
            status["desiredReplicas"].as_i64().unwrap_or(0).into(),
        );
        match &current {
            Some(list) => {
                let v2: Vec<Value> = list.iter().map(|m| metric_to_v2(m, Side::Status)).collect();
                out.insert("currentMetrics".into(), Value::Array(v2));
            }
            None => {
                if let Some(n) = status
                    .get("currentCPUUtilizationPercentage")
                    .filter(|v| !v.is_null())
                {
                    out.insert(
                        "currentMetrics".into(),
                        json!([{
                            "type": "Resource",
                            "resource": {"name": "cpu", "current": {"averageUtilization": n}},
                        }]),
                    );
                }
            }
        }
        if let Some(list) = &conditions {
            let v2: Vec<Value> = list.iter().map(condition_to_v2).collect();
            out.insert("conditions".into(), Value::Array(v2));
        }
        out
    });
    Ok(finish(metadata, kept, "autoscaling/v2", out_spec, status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 2,
                "maxReplicas": 10,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}},
            },
            "status": {
                "currentReplicas": 3,
                "desiredReplicas": 4,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 70, "averageValue": "350m"}}},
                ],
                "conditions": [
                    {"type": "AbleToScale", "status": "True", "lastTransitionTime": "2026-11-22T10:00:00Z", "reason": "ReadyForNewScale"},
                ],
            },
        })
    }

    #[test]
    fn v1_holds_cpu_in_fields_and_the_rest_in_annotations() {
        let v1 = v2_to_v1(&v2());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert_eq!(v1["spec"]["minReplicas"], 2);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 70);
        assert_eq!(v1["status"]["currentReplicas"], 3);
        let annotations = &v1["metadata"]["annotations"];
        assert_eq!(annotations["team"], "a");
        assert_eq!(
            annotations[METRICS],
            r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"500Mi"}},{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"1k"}}]"#
        );
        assert_eq!(
            annotations[BEHAVIOR],
            r#"{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":10,"PeriodSeconds":60}],"Tolerance":null}}"#
        );
        assert_eq!(
            annotations[CURRENT_METRICS],
            r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":70,"currentAverageValue":"350m"}}]"#
        );
        assert_eq!(
            annotations[CONDITIONS],
            r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-11-22T10:00:00Z","reason":"ReadyForNewScale"}]"#
        );
    }

    #[test]
    fn v2_survives_a_round_trip_through_v1_with_the_cpu_metric_last() {
        let back = v1_to_v2(&v2_to_v1(&v2())).unwrap();
        let original = v2();
        assert_eq!(back["metadata"]["annotations"], json!({"team": "a"}));
        assert_eq!(back["spec"]["behavior"], original["spec"]["behavior"]);
        let metrics = back["spec"]["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), 3);
        // Upstream appends the v1 CPU target after the annotation's metrics.
        assert_eq!(metrics[2], original["spec"]["metrics"][0]);
        assert_eq!(metrics[0], original["spec"]["metrics"][1]);
        assert_eq!(metrics[1], original["spec"]["metrics"][2]);
        assert_eq!(
            back["status"]["currentMetrics"],
            original["status"]["currentMetrics"]
        );
        assert_eq!(
            back["status"]["conditions"],
            original["status"]["conditions"]
        );
        assert_eq!(back["status"]["currentReplicas"], 3);
    }

    #[test]
    fn every_metric_source_survives_a_round_trip() {
        let selector = json!({"matchLabels": {"app": "web"}});
        let spec_metrics = json!([
            {"type": "Object", "object": {"describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
             "metric": {"name": "hits", "selector": selector}, "target": {"type": "Value", "value": "10k"}}},
            {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
            {"type": "ContainerResource", "containerResource": {"name": "memory", "container": "app",
             "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
            {"type": "External", "external": {"metric": {"name": "queue", "selector": selector},
             "target": {"type": "AverageValue", "averageValue": "30"}}},
        ]);
        let status_metrics = json!([
            {"type": "Object", "object": {"describedObject": {"kind": "Ingress", "name": "main"},
             "metric": {"name": "hits"}, "current": {"value": "9k"}}},
            {"type": "Pods", "pods": {"metric": {"name": "qps"}, "current": {"averageValue": "900"}}},
            {"type": "ContainerResource", "containerResource": {"name": "memory", "container": "app",
             "current": {"averageValue": "800Mi", "averageUtilization": 40}}},
            {"type": "External", "external": {"metric": {"name": "queue"}, "current": {"value": "12", "averageValue": "4"}}},
        ]);
        let hub = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4,
                     "metrics": spec_metrics},
            "status": {"desiredReplicas": 2, "currentMetrics": status_metrics},
        });
        let v1 = v2_to_v1(&hub);
        assert_eq!(
            v1["metadata"]["annotations"][METRICS].as_str().unwrap(),
            r#"[{"type":"Object","object":{"target":{"kind":"Ingress","name":"main","apiVersion":"networking.k8s.io/v1"},"metricName":"hits","targetValue":"10k","selector":{"matchLabels":{"app":"web"}}}},{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"1k"}},{"type":"ContainerResource","containerResource":{"name":"memory","targetAverageValue":"1Gi","container":"app"}},{"type":"External","external":{"metricName":"queue","metricSelector":{"matchLabels":{"app":"web"}},"targetAverageValue":"30"}}]"#
        );
        let back = v1_to_v2(&v1).unwrap();
        assert_eq!(back["spec"]["metrics"], hub["spec"]["metrics"]);
        assert_eq!(
            back["status"]["currentMetrics"],
            hub["status"]["currentMetrics"]
        );
    }

    #[test]
    fn a_v1_autoscaler_without_a_target_gets_the_cpu_default() {
        let v1 = json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
        });
        let hub = v1_to_v2(&v1).unwrap();
        assert_eq!(
            hub["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}])
        );
        assert!(hub["metadata"].get("annotations").is_none());
        assert!(hub.get("status").is_none());
    }

    #[test]
    fn a_broken_metrics_annotation_is_an_error_and_a_broken_behavior_is_ignored() {
        let mut v1 = json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {METRICS: "not json"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
        });
        assert!(v1_to_v2(&v1).is_err());
        v1["metadata"]["annotations"] = json!({BEHAVIOR: "{\"ScaleUp\": 3}"});
        let hub = v1_to_v2(&v1).unwrap();
        assert!(hub["spec"].get("behavior").is_none());
        assert!(hub["metadata"].get("annotations").is_none());
        // Go reads member names in any case.
        v1["metadata"]["annotations"] =
            json!({BEHAVIOR: "{\"scaleup\": {\"selectpolicy\": \"Min\"}}"});
        let hub = v1_to_v2(&v1).unwrap();
        assert_eq!(
            hub["spec"]["behavior"],
            json!({"scaleUp": {"selectPolicy": "Min"}})
        );
    }
}
