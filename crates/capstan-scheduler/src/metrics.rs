//! The scheduler's metrics under upstream's names, in the process registry
//! (`capstan_client::metrics`): attempts by result and their latency, pending pods by queue,
//! preemption attempts and the attempts a pod took to be scheduled. Not measured:
//! per-plugin and per-extension-point durations.

use std::sync::LazyLock;
use std::time::Duration;

use capstan_client::metrics::{buckets, help, registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Attempt {
    result: &'static str,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    queue: &'static str,
}

/// The outcome of a scheduling attempt, as upstream labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Bound to a node.
    Scheduled,
    /// Fits no node.
    Unschedulable,
    /// Failed for another reason (a plugin's error, a failed binding).
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Scheduled => "scheduled",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Error => "error",
        }
    }
}

pub(crate) struct Metrics {
    attempts: Family<Attempt, Counter>,
    durations: Family<Attempt, Histogram, fn() -> Histogram>,
    pending: Family<Queue, Gauge>,
    preemption_attempts: Counter,
    pod_attempts: Histogram,
}

fn attempt_histogram() -> Histogram {
    Histogram::new(buckets(0.001, 2.0, 15))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics {
        attempts: Family::default(),
        durations: Family::new_with_constructor(attempt_histogram),
        pending: Family::default(),
        preemption_attempts: Counter::default(),
        pod_attempts: Histogram::new(buckets(1.0, 2.0, 5)),
    };
    let mut registry = registry();
    registry.register(
        "scheduler_schedule_attempts",
        help(
            "STABLE",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
        ),
        metrics.attempts.clone(),
    );
    registry.register(
        "scheduler_scheduling_attempt_duration_seconds",
        help(
            "STABLE",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
        ),
        metrics.durations.clone(),
    );
    registry.register(
        "scheduler_pending_pods",
        help(
            "STABLE",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
        ),
        metrics.pending.clone(),
    );
    registry.register(
        "scheduler_preemption_attempts",
        help(
            "STABLE",
            "Total preemption attempts in the cluster till now",
        ),
        metrics.preemption_attempts.clone(),
    );
    registry.register(
        "scheduler_pod_scheduling_attempts",
        help(
            "STABLE",
            "Number of attempts to successfully schedule a pod.",
        ),
        metrics.pod_attempts.clone(),
    );
    metrics
});

/// Counts an attempt of `profile` that ended as `outcome` after `took`.
pub(crate) fn attempt(profile: &str, outcome: Outcome, took: Duration) {
    let labels = Attempt {
        result: outcome.label(),
        profile: profile.to_owned(),
    };
    METRICS.attempts.get_or_create(&labels).inc();
    METRICS
        .durations
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// A pod bound after `attempts` attempts.
pub(crate) fn scheduled_after(attempts: u32) {
    METRICS.pod_attempts.observe(f64::from(attempts));
}

/// A preemption was tried.
pub(crate) fn preemption_attempt() {
    METRICS.preemption_attempts.inc();
}

/// The pods waiting in each queue, and those waiting on scheduling gates.
pub(crate) fn pending(active: usize, backoff: usize, unschedulable: usize, gated: usize) {
    for (queue, count) in [
        ("active", active),
        ("backoff", backoff),
        ("unschedulable", unschedulable),
        ("gated", gated),
    ] {
        METRICS
            .pending
            .get_or_create(&Queue { queue })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_counted_by_result_and_profile() {
        attempt(
            "metrics-test",
            Outcome::Unschedulable,
            Duration::from_millis(3),
        );
        attempt(
            "metrics-test",
            Outcome::Unschedulable,
            Duration::from_millis(3),
        );
        attempt("metrics-test", Outcome::Scheduled, Duration::from_millis(1));
        pending(2, 1, 0, 3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry()).unwrap();
        assert!(
            text.contains(r#"scheduler_schedule_attempts_total{result="unschedulable",profile="metrics-test"} 2"#),
            "{text}"
        );
        // Other tests of this binary may set the gauge too: only its presence is certain.
        assert!(
            text.contains(r#"scheduler_pending_pods{queue="active"} "#),
            "{text}"
        );
        assert!(
            text.contains(
                "# HELP scheduler_preemption_attempts [STABLE] Total preemption attempts"
            ),
            "{text}"
        );
    }
}
