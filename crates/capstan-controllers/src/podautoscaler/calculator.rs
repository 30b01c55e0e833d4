//! The replica calculator (upstream's `replica_calculator.go`): from the samples of a metric
//! and the pods the target's selector picks, how many replicas would bring the metric to its
//! target.
//!
//! Pods are sorted first: deleted and failed pods are ignored; pending pods count as unready;
//! a pod without a sample is missing; for CPU, a pod still in its initialization period
//! (`--horizontal-pod-autoscaler-cpu-initialization-period`) is unready while it is not ready or
//! its sample predates one window after it became ready, and a pod past that period is unready
//! only while it has never been ready (its readiness changed within
//! `--horizontal-pod-autoscaler-initial-readiness-delay` of its start). The ratio is computed over
//! the ready pods with samples; if it is within the tolerance nothing changes. Otherwise, when
//! pods were left out, the ratio is computed again the conservative way — on a scale-up,
//! missing and unready pods count as using nothing; on a scale-down, missing pods count as using
//! exactly their request (or the target, when it is above 100%) — and the change is dropped if
//! it then falls within the tolerance or would reverse direction.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::metrics::{self, PodMetric, PodMetricsInfo};

/// The calculator's settings.
#[derive(Clone, Copy, Debug)]
pub struct Calculator {
    /// How far the usage ratio may be from 1 before the replica count changes.
    pub tolerance: f64,
    /// How long after its start a pod's CPU samples are treated with suspicion.
    pub cpu_initialization_period: SignedDuration,
    /// How long after its start a pod's readiness may change without it counting as having
    /// been ready.
    pub initial_readiness_delay: SignedDuration,
}

/// How the selected pods were sorted (upstream's `groupPods`).
#[derive(Debug, Default, PartialEq)]
struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn phase_of(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Whether the pod is running and ready (upstream's count of ready pods).
fn running_and_ready(pod: &Pod) -> bool {
    phase_of(pod) == "Running" && crate::pods::is_ready(pod)
}

impl Calculator {
    fn group(
        &self,
        pods: &[&Pod],
        samples: &PodMetricsInfo,
        resource: &str,
        now: Timestamp,
    ) -> Groups {
        let mut groups = Groups::default();
        for pod in pods {
            let name = name_of(pod);
            if pod.metadata.deletion_timestamp.is_some() || phase_of(pod) == "Failed" {
                groups.ignored.insert(name);
                continue;
            }
            if phase_of(pod) == "Pending" {
                groups.unready.insert(name);
                continue;
            }
            let Some(sample) = samples.get(&name) else {
                groups.missing.insert(name);
                continue;
            };
            if resource == "cpu" && self.cpu_unready(pod, sample, now) {
                groups.unready.insert(name);
                continue;
            }
            groups.ready += 1;
        }
        groups
    }

    /// Whether a running pod's CPU sample is not to be trusted yet.
    fn cpu_unready(&self, pod: &Pod, sample: &PodMetric, now: Timestamp) -> bool {
        let status = pod.status.as_ref();
        let condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let start = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        let (Some(condition), Some(start)) = (condition, start) else {
            return true;
        };
        let transition = condition
            .last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
        let not_ready = condition.status == "False";
        if add(start, self.cpu_initialization_period) > now {
            // Still initializing: unready, or sampled before one full window after becoming ready.
            not_ready || sample.timestamp < add(transition, sample.window)
        } else {
            // Never ready since its start.
            not_ready && add(start, self.initial_readiness_delay) > transition
        }
    }

    /// Replicas for a utilization target (percent of the requests) of `resource`, over the
    /// whole pod or `container` only (upstream's `GetResourceReplicas` after the metrics are
    /// fetched): the replica count, the utilization and the average raw value.
    #[allow(clippy::too_many_arguments)]
    pub fn resource_replicas(
        &self,
        current: i32,
        target_utilization: i32,
        resource: &str,
        container: &str,
        mut samples: PodMetricsInfo,
        pods: &[&Pod],
        now: Timestamp,
    ) -> Result<(i32, i32, i64), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let groups = self.group(pods, &samples, resource, now);
        for name in groups.ignored.iter().chain(&groups.unready) {
            samples.remove(name);
        }
        if samples.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let requests = pod_requests(pods, container, resource)?;
        let (ratio, utilization, raw) =
            metrics::utilization_ratio(&samples, &requests, target_utilization)?;

        let scale_up_with_unready = !groups.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && groups.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok((current, utilization, raw));
            }
            return Ok((ceil_i32(ratio * groups.ready as f64), utilization, raw));
        }
        if !groups.missing.is_empty() {
            let fallback = i64::from(target_utilization.max(100));
            for name in &groups.missing {
                let value = if ratio < 1.0 {
                    requests.get(name).copied().unwrap_or_default() * fallback / 100
                } else if ratio > 1.0 {
                    0
                } else {
                    continue;
                };
                samples.insert(name.clone(), assumed(value));
            }
        }
        if scale_up_with_unready {
            for name in &groups.unready {
                samples.insert(name.clone(), assumed(0));
            }
        }
        let (new_ratio, _, _) =
            metrics::utilization_ratio(&samples, &requests, target_utilization)?;
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok((current, utilization, raw));
        }
        let replicas = ceil_i32(new_ratio * samples.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok((current, utilization, raw));
        }
        Ok((replicas, utilization, raw))
    }

    /// Replicas for an average value target of per-pod samples (upstream's
    /// `calcPlainMetricReplicas`, used for resource average values and pods metrics): the
    /// replica count and the average sample.
    pub fn plain_replicas(
        &self,
        current: i32,
        target: i64,
        resource: &str,
        mut samples: PodMetricsInfo,
        pods: &[&Pod],
        now: Timestamp,
    ) -> Result<(i32, i64), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let groups = self.group(pods, &samples, resource, now);
        for name in groups.ignored.iter().chain(&groups.unready) {
            samples.remove(name);
        }
        if samples.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let (ratio, usage) = metrics::usage_ratio(&samples, target);
        let scale_up_with_unready = !groups.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && groups.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok((current, usage));
            }
            return Ok((ceil_i32(ratio * groups.ready as f64), usage));
        }
        if !groups.missing.is_empty() {
            for name in &groups.missing {
                let value = if ratio < 1.0 {
                    target
                } else if ratio > 1.0 {
                    0
                } else {
                    continue;
                };
                samples.insert(name.clone(), assumed(value));
            }
        }
        if scale_up_with_unready {
            for name in &groups.unready {
                samples.insert(name.clone(), assumed(0));
            }
        }
        let (new_ratio, _) = metrics::usage_ratio(&samples, target);
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok((current, usage));
        }
        let replicas = ceil_i32(new_ratio * samples.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok((current, usage));
        }
        Ok((replicas, usage))
    }

    /// Replicas for a usage ratio of one value against its target (upstream's
    /// `getUsageRatioReplicaCount`, for object and external value targets): scaled by the
    /// ready pods; from zero replicas, by the ratio alone.
    pub fn ratio_replicas(&self, current: i32, ratio: f64, pods: &[&Pod]) -> Result<i32, String> {
        if current == 0 {
            return Ok(ceil_i32(ratio));
        }
        if (1.0 - ratio).abs() <= self.tolerance {
            return Ok(current);
        }
        if pods.is_empty() {
            return Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into());
        }
        let ready = pods.iter().filter(|p| running_and_ready(p)).count();
        Ok(ceil_i32(ratio * ready as f64))
    }

    /// Replicas for an average value target of one total (upstream's
    /// `GetObjectPerPodMetricReplicas` and `GetExternalPerPodMetricReplicas`): the total divided
    /// by the target per pod, unless within the tolerance of the current count; and the total
    /// per current replica.
    pub fn per_pod_replicas(
        &self,
        status_replicas: i32,
        target_per_pod: i64,
        total: i64,
    ) -> (i32, i64) {
        let mut replicas = status_replicas;
        let ratio = total as f64 / (target_per_pod as f64 * f64::from(status_replicas));
        if (1.0 - ratio).abs() > self.tolerance {
            replicas = ceil_i32(total as f64 / target_per_pod as f64);
        }
        let per_replica = (total as f64 / f64::from(status_replicas)).ceil() as i64;
        (replicas, per_replica)
    }
}

/// A sample assumed for a pod that has none (or one not trusted).
fn assumed(value: i64) -> PodMetric {
    PodMetric {
        timestamp: Timestamp::UNIX_EPOCH,
        window: SignedDuration::ZERO,
        value,
    }
}

fn add(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap_or(at)
}

/// `int32(math.Ceil(x))`, saturating.
fn ceil_i32(x: f64) -> i32 {
    x.ceil() as i32
}

/// Each pod's request of `resource` in milli-units: its containers' and restartable init
/// containers' (sidecars') requests summed, or only `container`'s (upstream's
/// `calculatePodRequests`); a container without the request is an error.
pub fn pod_requests(
    pods: &[&Pod],
    container: &str,
    resource: &str,
) -> Result<BTreeMap<String, i64>, String> {
    let mut requests = BTreeMap::new();
    for pod in pods {
        let Some(spec) = pod.spec.as_ref() else {
            requests.insert(name_of(pod), 0);
            continue;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum: i64 = 0;
        for c in spec.containers.iter().chain(sidecars) {
            if !container.is_empty() && container != c.name {
                continue;
            }
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource));
            match request {
                Some(quantity) => {
                    let milli = capstan_api::quantity::Quantity::parse(&quantity.0)
                        .map_err(|e| {
                            format!(
                                "bad request for {resource} in container {} of Pod {}: {e}",
                                c.name,
                                name_of(pod)
                            )
                        })?
                        .milli_value();
                    sum = sum.saturating_add(milli);
                }
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {}",
                        c.name,
                        name_of(pod)
                    ));
                }
            }
        }
        requests.insert(name_of(pod), sum);
    }
    Ok(requests)
}
