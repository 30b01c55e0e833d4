//! The HorizontalPodAutoscaler controller's own metrics under upstream's names (its `monitor`
//! package, subsystem `horizontal_pod_autoscaler_controller`), in the process registry:
//! reconciliations and metric computations counted and timed, labelled with what they did
//! (`action`: `scale_up`, `scale_down`, `none`) and how they failed (`error`: `spec` for a
//! metric the autoscaler's spec gets wrong, `internal` for anything else, `none`), metric
//! computations also with the metric's `metric_type`.

use std::sync::LazyLock;
use std::time::Duration;

use capstan_client::metrics::{buckets, help, registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// What a reconciliation or a metric's proposal does to the target's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleAction {
    Up,
    Down,
    None,
}

impl ScaleAction {
    /// The action of going from `current` replicas to `proposed`.
    pub fn between(current: i32, proposed: i32) -> ScaleAction {
        match proposed.cmp(&current) {
            std::cmp::Ordering::Greater => ScaleAction::Up,
            std::cmp::Ordering::Less => ScaleAction::Down,
            std::cmp::Ordering::Equal => ScaleAction::None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            ScaleAction::Up => "scale_up",
            ScaleAction::Down => "scale_down",
            ScaleAction::None => "none",
        }
    }
}

/// How a reconciliation or metric computation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// It did not.
    No,
    /// Because of the autoscaler's spec (a metric of an unknown type or without its source).
    Spec,
    /// For any other reason.
    Internal,
}

impl Failed {
    fn label(self) -> &'static str {
        match self {
            Failed::No => "none",
            Failed::Spec => "spec",
            Failed::Internal => "internal",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reconciliation {
    action: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Computation {
    action: &'static str,
    error: &'static str,
    metric_type: String,
}

struct Families {
    reconciliations: Family<Reconciliation, Counter>,
    reconciliation_durations: Family<Reconciliation, Histogram, fn() -> Histogram>,
    computations: Family<Computation, Counter>,
    computation_durations: Family<Computation, Histogram, fn() -> Histogram>,
}

/// Upstream's buckets for both durations: 1 ms doubling 15 times.
fn duration_histogram() -> Histogram {
    Histogram::new(buckets(0.001, 2.0, 15))
}

const LABELS: &str = "The label 'action' should be either 'scale_down', 'scale_up', or 'none'.";

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let families = Families {
        reconciliations: Family::default(),
        reconciliation_durations: Family::new_with_constructor(duration_histogram),
        computations: Family::default(),
        computation_durations: Family::new_with_constructor(duration_histogram),
    };
    let first = "Note that if both spec and internal errors happen during a reconciliation, the \
                 first one to occur is reported in `error` label.";
    let mut registry = registry();
    registry.register(
        "horizontal_pod_autoscaler_controller_reconciliations",
        help(
            "ALPHA",
            &format!(
                "Number of reconciliations of HPA controller. {LABELS} Also, the label 'error' \
                 should be either 'spec', 'internal', or 'none'. {first}"
            ),
        ),
        families.reconciliations.clone(),
    );
    registry.register(
        "horizontal_pod_autoscaler_controller_reconciliation_duration_seconds",
        help(
            "ALPHA",
            &format!(
                "The time(seconds) that the HPA controller takes to reconcile once. {LABELS} \
                 Also, the label 'error' should be either 'spec', 'internal', or 'none'. {first}"
            ),
        ),
        families.reconciliation_durations.clone(),
    );
    let metric_type = "The label 'metric_type' corresponds to HPA.spec.metrics[*].type";
    registry.register(
        "horizontal_pod_autoscaler_controller_metric_computation",
        help(
            "ALPHA",
            &format!(
                "Number of metric computations. {LABELS} Also, the label 'error' should be \
                 either 'spec', 'internal', or 'none'. {metric_type}"
            ),
        ),
        families.computations.clone(),
    );
    registry.register(
        "horizontal_pod_autoscaler_controller_metric_computation_duration_seconds",
        help(
            "ALPHA",
            &format!(
                "The time(seconds) that the HPA controller takes to calculate one metric. \
                 {LABELS} The label 'error' should be either 'spec', 'internal', or 'none'. \
                 {metric_type}"
            ),
        ),
        families.computation_durations.clone(),
    );
    families
});

/// A reconciliation that did `action`, failed as `failed`, and took `took`.
pub fn reconciliation(action: ScaleAction, failed: Failed, took: Duration) {
    let labels = Reconciliation {
        action: action.label(),
        error: failed.label(),
    };
    FAMILIES.reconciliations.get_or_create(&labels).inc();
    FAMILIES
        .reconciliation_durations
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// A metric of type `metric_type` computed (a failed one proposes no action).
pub fn metric_computation(action: ScaleAction, failed: Failed, took: Duration, metric_type: &str) {
    let action = if failed == Failed::No {
        action
    } else {
        ScaleAction::None
    };
    let labels = Computation {
        action: action.label(),
        error: failed.label(),
        metric_type: metric_type.to_owned(),
    };
    FAMILIES.computations.get_or_create(&labels).inc();
    FAMILIES
        .computation_durations
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciliations_and_computations_are_labelled_as_upstream() {
        assert_eq!(ScaleAction::between(2, 5), ScaleAction::Up);
        assert_eq!(ScaleAction::between(5, 2), ScaleAction::Down);
        assert_eq!(ScaleAction::between(3, 3), ScaleAction::None);
        reconciliation(ScaleAction::Up, Failed::No, Duration::from_millis(2));
        metric_computation(
            ScaleAction::Up,
            Failed::Spec,
            Duration::from_millis(1),
            "CheddarCheese",
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry()).unwrap();
        assert!(
            text.contains(
                r#"horizontal_pod_autoscaler_controller_reconciliations_total{action="scale_up",error="none"} "#
            ),
            "{text}"
        );
        // A failed computation proposes nothing.
        assert!(
            text.contains(
                r#"horizontal_pod_autoscaler_controller_metric_computation_total{action="none",error="spec",metric_type="CheddarCheese"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(
            "horizontal_pod_autoscaler_controller_metric_computation_duration_seconds_bucket"
        ));
    }
}
