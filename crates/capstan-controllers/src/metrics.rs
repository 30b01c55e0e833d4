//! The controllers' work queue metrics under client-go's names (`workqueue_*`, labelled with
//! the controller's queue `name`), in the process registry (`capstan_client::metrics`): keys
//! added, keys waiting (each once, however often added), how long a key waited before its
//! reconcile began and how long the reconcile took, and retries after failures. Not measured:
//! `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use capstan_client::metrics::{buckets, help, registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Name {
    name: &'static str,
}

struct Families {
    adds: Family<Name, Counter>,
    depth: Family<Name, Gauge>,
    queue_duration: Family<Name, Histogram, fn() -> Histogram>,
    work_duration: Family<Name, Histogram, fn() -> Histogram>,
    retries: Family<Name, Counter>,
}

/// client-go's buckets for both durations: 1 ns to 10 s.
fn duration_histogram() -> Histogram {
    Histogram::new(buckets(10e-9, 10.0, 10))
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let families = Families {
        adds: Family::default(),
        depth: Family::default(),
        queue_duration: Family::new_with_constructor(duration_histogram),
        work_duration: Family::new_with_constructor(duration_histogram),
        retries: Family::default(),
    };
    let mut registry = registry();
    registry.register(
        "workqueue_adds",
        help("ALPHA", "Total number of adds handled by workqueue"),
        families.adds.clone(),
    );
    registry.register(
        "workqueue_depth",
        help("ALPHA", "Current depth of workqueue"),
        families.depth.clone(),
    );
    registry.register(
        "workqueue_queue_duration_seconds",
        help(
            "ALPHA",
            "How long in seconds an item stays in workqueue before being requested.",
        ),
        families.queue_duration.clone(),
    );
    registry.register(
        "workqueue_work_duration_seconds",
        help(
            "ALPHA",
            "How long in seconds processing an item from workqueue takes.",
        ),
        families.work_duration.clone(),
    );
    registry.register(
        "workqueue_retries",
        help("ALPHA", "Total number of retries handled by workqueue"),
        families.retries.clone(),
    );
    families
});

/// One controller's queue metrics, with the keys waiting and since when.
pub(crate) struct QueueMetrics<Key> {
    adds: Counter,
    depth: Gauge,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    waiting: Mutex<HashMap<Key, Instant>>,
}

impl<Key: Hash + Eq> QueueMetrics<Key> {
    /// The metrics of the queue `name`.
    pub(crate) fn new(name: &'static str) -> Self {
        let label = Name { name };
        QueueMetrics {
            adds: FAMILIES.adds.get_or_create(&label).clone(),
            depth: FAMILIES.depth.get_or_create(&label).clone(),
            queue_duration: FAMILIES.queue_duration.get_or_create(&label).clone(),
            work_duration: FAMILIES.work_duration.get_or_create(&label).clone(),
            retries: FAMILIES.retries.get_or_create(&label).clone(),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// `key` was added (`waits`: it will be reconciled, its object being known).
    pub(crate) fn added(&self, key: Key, waits: bool) {
        self.adds.inc();
        if waits {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            waiting.entry(key).or_insert_with(Instant::now);
            self.depth
                .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        }
    }

    /// `key`'s reconcile begins.
    pub(crate) fn started(&self, key: &Key) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = waiting.remove(key) {
            self.queue_duration.observe(since.elapsed().as_secs_f64());
        }
        self.depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
    }

    /// A reconcile took `seconds`.
    pub(crate) fn worked(&self, seconds: f64) {
        self.work_duration.observe(seconds);
    }

    /// A failed reconcile is retried.
    pub(crate) fn retried(&self) {
        self.retries.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_added_twice_waits_once() {
        let metrics = QueueMetrics::<&str>::new("metrics-test");
        metrics.added("a", true);
        metrics.added("a", true);
        metrics.added("gone", false);
        assert_eq!(metrics.depth.get(), 1);
        assert_eq!(metrics.adds.get(), 3);
        metrics.started(&"a");
        metrics.worked(0.01);
        metrics.retried();
        assert_eq!(metrics.depth.get(), 0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry()).unwrap();
        assert!(
            text.contains(r#"workqueue_adds_total{name="metrics-test"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_queue_duration_seconds_count{name="metrics-test"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_retries_total{name="metrics-test"} 1"#),
            "{text}"
        );
    }
}
