//! The autoscaler's view of the metrics APIs (upstream's `podautoscaler/metrics`): per-pod
//! samples from the resource metrics API (`metrics.k8s.io/v1beta1` PodMetrics, summed over a
//! pod's containers or taken from one container), from the custom metrics API
//! (`custom.metrics.k8s.io/v1beta2`, for pods and for one described object) and values from the
//! external metrics API (`external.metrics.k8s.io/v1beta1`), with upstream's error texts; and
//! the usage ratios the replica calculator works from.
//!
//! What is read is abstracted by [`Access`](super::Access): these functions only shape what it
//! returns, so they run the same against the API and against a test's fake.

use std::collections::BTreeMap;

use capstan_api::quantity::Quantity;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// The window a custom metric without `windowSeconds` is taken to cover (upstream's
/// `metricServerDefaultMetricWindow`).
const DEFAULT_WINDOW: SignedDuration = SignedDuration::from_secs(60);

/// One pod's sample: when it was taken, over which window, its value in milli-units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodMetric {
    /// When the sample was taken.
    pub timestamp: Timestamp,
    /// The window it was averaged over.
    pub window: SignedDuration,
    /// The value, in thousandths of the unit (millicores for CPU, milli-bytes for memory).
    pub value: i64,
}

/// Samples by pod name (upstream's `PodMetricsInfo`).
pub type PodMetricsInfo = BTreeMap<String, PodMetric>;

/// One `PodMetrics` object as the resource metrics API lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct RawPodMetrics {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// When the sample was taken.
    pub timestamp: Timestamp,
    /// The window it covers.
    pub window: SignedDuration,
    /// Each container's name and usage (resource name → quantity).
    pub containers: Vec<(String, BTreeMap<String, Quantity>)>,
}

impl RawPodMetrics {
    /// Reads a `PodMetrics` object (JSON) as the resource metrics API serves it.
    pub fn from_json(object: &Value) -> Result<RawPodMetrics, String> {
        let meta = &object["metadata"];
        let name = meta["name"]
            .as_str()
            .ok_or("a PodMetrics object has no metadata.name")?
            .to_owned();
        let namespace = meta["namespace"].as_str().unwrap_or_default().to_owned();
        let timestamp = match object["timestamp"].as_str() {
            Some(text) => text.parse::<Timestamp>().map_err(|e| {
                format!("PodMetrics {namespace}/{name}: bad timestamp {text:?}: {e}")
            })?,
            None => Timestamp::UNIX_EPOCH,
        };
        let window = match object["window"].as_str() {
            Some(text) => {
                let nanos = capstan_api::go_duration_nanos(text).map_err(|e| {
                    format!("PodMetrics {namespace}/{name}: bad window {text:?}: {e}")
                })?;
                SignedDuration::from_nanos(nanos)
            }
            None => SignedDuration::ZERO,
        };
        let mut containers = Vec::new();
        for container in object["containers"].as_array().into_iter().flatten() {
            let container_name = container["name"].as_str().unwrap_or_default().to_owned();
            let mut usage = BTreeMap::new();
            for (resource, quantity) in container["usage"].as_object().into_iter().flatten() {
                let text = quantity.as_str().unwrap_or_default();
                let quantity = Quantity::parse(text).map_err(|e| {
                    format!(
                        "PodMetrics {namespace}/{name}: container {container_name:?}: bad {resource} usage {text:?}: {e}"
                    )
                })?;
                usage.insert(resource.clone(), quantity);
            }
            containers.push((container_name, usage));
        }
        Ok(RawPodMetrics {
            namespace,
            name,
            timestamp,
            window,
            containers,
        })
    }
}

/// One value of the custom metrics API (`MetricValue`): the object it describes, when and
/// over which window it was taken, its value in milli-units.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomValue {
    /// The described object's name.
    pub object: String,
    /// When the value was taken.
    pub timestamp: Timestamp,
    /// `windowSeconds`, when given.
    pub window_seconds: Option<i64>,
    /// The value in thousandths.
    pub value: i64,
}

impl CustomValue {
    /// Reads one `MetricValue` (JSON).
    pub fn from_json(item: &Value) -> Result<CustomValue, String> {
        let value = milli_of(&item["value"], "value")?;
        Ok(CustomValue {
            object: item["describedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            timestamp: timestamp_of(&item["timestamp"])?,
            window_seconds: item["windowSeconds"].as_i64(),
            value,
        })
    }
}

/// One value of the external metrics API (`ExternalMetricValue`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalValue {
    /// When the value was taken.
    pub timestamp: Timestamp,
    /// The value in thousandths.
    pub value: i64,
}

impl ExternalValue {
    /// Reads one `ExternalMetricValue` (JSON).
    pub fn from_json(item: &Value) -> Result<ExternalValue, String> {
        Ok(ExternalValue {
            timestamp: timestamp_of(&item["timestamp"])?,
            value: milli_of(&item["value"], "value")?,
        })
    }
}

fn milli_of(value: &Value, what: &str) -> Result<i64, String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(format!("a metric value has no {what}")),
    };
    Quantity::parse(&text)
        .map(|q| q.milli_value())
        .map_err(|e| format!("bad metric {what} {text:?}: {e}"))
}

fn timestamp_of(value: &Value) -> Result<Timestamp, String> {
    match value.as_str() {
        Some(text) => text
            .parse::<Timestamp>()
            .map_err(|e| format!("bad metric timestamp {text:?}: {e}")),
        None => Ok(Timestamp::UNIX_EPOCH),
    }
}

/// The samples of `resource` from a PodMetrics list (upstream's `GetResourceMetric`): each
/// pod's containers summed, a pod missing the resource in any container (or with no
/// containers) left out; with `container` named, that container's usage only, and an error
/// when a pod's metrics lack that container. Returns the samples and the first item's time.
pub fn resource_samples(
    listed: Result<Vec<RawPodMetrics>, String>,
    resource: &str,
    container: &str,
) -> Result<(PodMetricsInfo, Timestamp), String> {
    let listed =
        listed.map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))?;
    let Some(first) = listed.first() else {
        return Err("no metrics returned from resource metrics API".into());
    };
    let timestamp = first.timestamp;
    let mut samples = PodMetricsInfo::new();
    for pod in &listed {
        let sample = |value| PodMetric {
            timestamp: pod.timestamp,
            window: pod.window,
            value,
        };
        if container.is_empty() {
            let mut sum = 0i64;
            let mut missing = pod.containers.is_empty();
            for (_, usage) in &pod.containers {
                match usage.get(resource) {
                    Some(q) => sum = sum.saturating_add(q.milli_value()),
                    None => {
                        missing = true;
                        break;
                    }
                }
            }
            if !missing {
                samples.insert(pod.name.clone(), sample(sum));
            }
        } else {
            let Some((_, usage)) = pod.containers.iter().find(|(name, _)| name == container) else {
                return Err(format!(
                    "failed to get container metrics: container {container} not present in metrics for pod {}/{}",
                    pod.namespace, pod.name
                ));
            };
            if let Some(q) = usage.get(resource) {
                samples.insert(pod.name.clone(), sample(q.milli_value()));
            }
        }
    }
    Ok((samples, timestamp))
}

/// The per-pod samples of a custom metric (upstream's `GetRawMetric`).
pub fn custom_pod_samples(
    listed: Result<Vec<CustomValue>, String>,
) -> Result<(PodMetricsInfo, Timestamp), String> {
    let listed =
        listed.map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
    let Some(first) = listed.first() else {
        return Err("no metrics returned from custom metrics API".into());
    };
    let timestamp = first.timestamp;
    let samples = listed
        .iter()
        .map(|v| {
            let window = v
                .window_seconds
                .map_or(DEFAULT_WINDOW, SignedDuration::from_secs);
            (
                v.object.clone(),
                PodMetric {
                    timestamp: v.timestamp,
                    window,
                    value: v.value,
                },
            )
        })
        .collect();
    Ok((samples, timestamp))
}

/// The value of a custom metric of one object (upstream's `GetObjectMetric`): the API must
/// answer exactly one value.
pub fn custom_object_value(
    listed: Result<Vec<CustomValue>, String>,
) -> Result<(i64, Timestamp), String> {
    let listed =
        listed.map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
    match listed.as_slice() {
        [one] => Ok((one.value, one.timestamp)),
        many => Err(format!(
            "unable to fetch metrics from custom metrics API: the custom metrics API server returned {} results when we asked for exactly one",
            many.len()
        )),
    }
}

/// The values of an external metric (upstream's `GetExternalMetric`).
pub fn external_values(
    listed: Result<Vec<ExternalValue>, String>,
) -> Result<(Vec<i64>, Timestamp), String> {
    let listed =
        listed.map_err(|e| format!("unable to fetch metrics from external metrics API: {e}"))?;
    let Some(first) = listed.first() else {
        return Err("no metrics returned from external metrics API".into());
    };
    Ok((listed.iter().map(|v| v.value).collect(), first.timestamp))
}

/// The ratio of the current to the target utilization over the pods that have both a sample
/// and a request (upstream's `GetResourceUtilizationRatio`): the ratio, the utilization (percent
/// of the requests, truncated) and the average raw value.
pub fn utilization_ratio(
    samples: &PodMetricsInfo,
    requests: &BTreeMap<String, i64>,
    target_utilization: i32,
) -> Result<(f64, i32, i64), String> {
    let mut metrics_total: i128 = 0;
    let mut requests_total: i128 = 0;
    let mut entries: i128 = 0;
    for (pod, sample) in samples {
        let Some(request) = requests.get(pod) else {
            continue;
        };
        metrics_total += i128::from(sample.value);
        requests_total += i128::from(*request);
        entries += 1;
    }
    if requests_total == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = (metrics_total * 100 / requests_total)
        .clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32;
    let average = (metrics_total / entries) as i64;
    Ok((
        f64::from(utilization) / f64::from(target_utilization),
        utilization,
        average,
    ))
}

/// The ratio of the average sample to the target (upstream's `GetMetricUsageRatio`), and
/// that average.
pub fn usage_ratio(samples: &PodMetricsInfo, target: i64) -> (f64, i64) {
    let total: i128 = samples.values().map(|s| i128::from(s.value)).sum();
    let count = samples.len().max(1) as i128;
    let average = (total / count) as i64;
    (average as f64 / target as f64, average)
}
