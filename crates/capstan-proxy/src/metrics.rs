//! The proxy's metrics under kube-proxy's names, in the process registry
//! (`capstan_client::metrics`): how long syncs take (every sync, full and partial ones
//! apart), when the last one succeeded, and how many failed.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use capstan_client::metrics::{buckets, help, registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

struct Metrics {
    sync: Histogram,
    full: Histogram,
    partial: Histogram,
    last: Gauge<f64, std::sync::atomic::AtomicU64>,
    failures: Counter,
}

fn sync_histogram() -> Histogram {
    Histogram::new(buckets(0.001, 2.0, 15))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics {
        sync: sync_histogram(),
        full: sync_histogram(),
        partial: sync_histogram(),
        last: Gauge::default(),
        failures: Counter::default(),
    };
    let mut registry = registry();
    registry.register(
        "kubeproxy_sync_proxy_rules_duration_seconds",
        help("ALPHA", "SyncProxyRules latency in seconds"),
        metrics.sync.clone(),
    );
    registry.register(
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        help(
            "ALPHA",
            "SyncProxyRules latency in seconds for full resyncs",
        ),
        metrics.full.clone(),
    );
    registry.register(
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        help(
            "ALPHA",
            "SyncProxyRules latency in seconds for partial resyncs",
        ),
        metrics.partial.clone(),
    );
    registry.register(
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        help(
            "ALPHA",
            "The last time proxy rules were successfully synced",
        ),
        metrics.last.clone(),
    );
    registry.register(
        "kubeproxy_sync_proxy_rules_nftables_sync_failures",
        help("ALPHA", "Cumulative proxy nftables sync failures"),
        metrics.failures.clone(),
    );
    metrics
});

/// A sync (`full` or partial) that took `took` and succeeded or not.
pub(crate) fn synced(full: bool, took: Duration, succeeded: bool) {
    let seconds = took.as_secs_f64();
    METRICS.sync.observe(seconds);
    if full {
        METRICS.full.observe(seconds);
    } else {
        METRICS.partial.observe(seconds);
    }
    if succeeded {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        METRICS.last.set(now);
    } else {
        METRICS.failures.inc();
    }
}
