//! The process's own metrics registry: what the components running in one process (the
//! scheduler's queue and attempts, the controllers' work queues) register once, under
//! upstream's names, and every `/metrics` of the process (the API server's in `capstan
//! server`) encodes after its own. Upstream's components share client-go's legacy registry the
//! same way.

use std::sync::{LazyLock, Mutex, MutexGuard};

use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

/// The process's registry, locked: register a component's metrics once (in a `LazyLock`), or
/// encode them.
pub fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Upstream's help text with its stability level in front (`[STABLE] ...`), as
/// component-base writes `# HELP`.
pub fn help(stability: &str, text: &str) -> String {
    format!("[{stability}] {text}")
}

/// Prometheus' `ExponentialBuckets(start, factor, count)`.
pub fn buckets(start: f64, factor: f64, count: u16) -> Vec<f64> {
    exponential_buckets(start, factor, count).collect()
}
