//! The controllers' work queue metrics under client-go's names (`workqueue_*`, labelled with
//! the controller's queue `name`), in the process registry (`capstan_client::metrics`): keys
//! added, keys waiting (each once, however often added), how long a key waited before its
//! reconcile began and how long the reconcile took, retries after failures, and the work in
//! progress (`workqueue_unfinished_work_seconds`, the seconds all running reconciles have
//! taken so far, and `workqueue_longest_running_processor_seconds`), which the controller
//! runtime refreshes every 500 ms as client-go's queue does.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
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
    unfinished: Family<Name, Gauge<f64, AtomicU64>>,
    longest: Family<Name, Gauge<f64, AtomicU64>>,
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
        unfinished: Family::default(),
        longest: Family::default(),
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
    registry.register(
        "workqueue_unfinished_work_seconds",
        help(
            "ALPHA",
            "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
        ),
        families.unfinished.clone(),
    );
    registry.register(
        "workqueue_longest_running_processor_seconds",
        help(
            "ALPHA",
            "How many seconds has the longest running processor for workqueue been running.",
        ),
        families.longest.clone(),
    );
    families
});

/// A reconcile in progress, from [`QueueMetrics::started`] to [`QueueMetrics::worked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Processing(u64);

/// One controller's queue metrics, with the keys waiting and since when.
pub(crate) struct QueueMetrics<Key> {
    adds: Counter,
    depth: Gauge,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished: Gauge<f64, AtomicU64>,
    longest: Gauge<f64, AtomicU64>,
    waiting: Mutex<HashMap<Key, Instant>>,
    /// The reconciles running, since when.
    processing: Mutex<HashMap<Processing, Instant>>,
    next: AtomicU64,
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
            unfinished: FAMILIES.unfinished.get_or_create(&label).clone(),
            longest: FAMILIES.longest.get_or_create(&label).clone(),
            waiting: Mutex::new(HashMap::new()),
            processing: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
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

    /// `key`'s reconcile begins; give what this returns to [`worked`](Self::worked).
    pub(crate) fn started(&self, key: &Key) -> Processing {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = waiting.remove(key) {
            self.queue_duration.observe(since.elapsed().as_secs_f64());
        }
        self.depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        let processing = Processing(self.next.fetch_add(1, Ordering::Relaxed));
        self.processing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(processing, Instant::now());
        processing
    }

    /// The reconcile `processing` ended, after `seconds`.
    pub(crate) fn worked(&self, processing: Processing, seconds: f64) {
        self.processing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&processing);
        self.work_duration.observe(seconds);
    }

    /// Refreshes the work-in-progress gauges (client-go does every 500 ms): the seconds the
    /// running reconciles have taken so far, summed, and the longest one's.
    pub(crate) fn update_unfinished(&self) {
        let now = Instant::now();
        let processing = self.processing.lock().unwrap_or_else(|e| e.into_inner());
        let (mut total, mut longest) = (0.0_f64, 0.0_f64);
        for since in processing.values() {
            let seconds = now.saturating_duration_since(*since).as_secs_f64();
            total += seconds;
            longest = longest.max(seconds);
        }
        self.unfinished.set(total);
        self.longest.set(longest);
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
        let processing = metrics.started(&"a");
        metrics.worked(processing, 0.01);
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

    #[test]
    fn work_in_progress_is_summed_and_its_longest_reported() {
        let metrics = QueueMetrics::<&str>::new("metrics-progress-test");
        let first = metrics.started(&"a");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let second = metrics.started(&"b");
        metrics.update_unfinished();
        let (total, longest) = (metrics.unfinished.get(), metrics.longest.get());
        assert!(longest >= 0.03, "{longest}");
        assert!(
            total >= longest && total <= 2.0 * longest,
            "{total} {longest}"
        );
        metrics.worked(first, 0.03);
        metrics.worked(second, 0.0);
        metrics.update_unfinished();
        assert_eq!(metrics.unfinished.get(), 0.0);
        assert_eq!(metrics.longest.get(), 0.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry()).unwrap();
        assert!(
            text.contains(
                r#"workqueue_longest_running_processor_seconds{name="metrics-progress-test"} 0.0"#
            ),
            "{text}"
        );
    }
}
