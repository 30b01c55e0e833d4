//! The Prometheus families of the kubelet API's metrics endpoints, built from a
//! `Snapshot` (or, for `/metrics`, what the runtime and the pod manager
//! know) at scrape time and written by [`capstan_client::prometheus`]:
//!
//! - `resource`: `/metrics/resource`, upstream's resource metrics collector exactly (names,
//!   `[STABLE]` help prefixes, labels, millisecond timestamps), what metrics-server and the
//!   built-in Metrics API scrape. `scrape_error` is left out as upstream 1.33 leaves it out
//!   (deprecated in 1.29, so hidden); `resource_scrape_error` carries the same figure.
//! - `cadvisor`: `/metrics/cadvisor`, a subset of cAdvisor's container metrics with its
//!   names, help and labels (`container`, `id`, `image`, `name`, `namespace`, `pod`) for the
//!   root cgroup `/`, `/kubepods`, each pod's cgroup and each running container: CPU (total,
//!   user, system), memory (usage, working set, RSS, cache, limit), network of the root and pod
//!   cgroups (which own the network namespaces), the writable layer's filesystem use,
//!   processes and threads, start and last-seen times; and the machine's cores and memory.
//!   Not exported: per-CPU usage (the kubelet turns it off), CFS throttling, block I/O, memory
//!   failure counters, pressure, hugetlb, accelerators, the sandbox (pause) containers.
//! - `kubelet`: `/metrics`, the kubelet metrics Capstan measures (running pods and
//!   containers by state, desired pods, the node's name, runtime operations counted, failed and
//!   timed by operation type, the time from a pod's first sight to its running) and the process collector's figures of the process the agent
//!   runs in (inside `capstan server`, the whole server's process).

use capstan_client::prometheus::{MetricFamily, MetricType, Sample};

use super::Snapshot;
use crate::observed::{Histogram, histogram_samples};

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// `/metrics/resource` from a CPU-and-memory snapshot.
pub(crate) fn resource(snapshot: &Snapshot) -> Vec<MetricFamily> {
    let stable =
        |name: &str, help: &str, kind| MetricFamily::new(name, &format!("[STABLE] {help}"), kind);
    let mut node_cpu = stable(
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        MetricType::Counter,
    );
    let mut node_memory = stable(
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        MetricType::Gauge,
    );
    let mut container_cpu = stable(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        MetricType::Counter,
    );
    let mut container_memory = stable(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        MetricType::Gauge,
    );
    let mut container_start = stable(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        MetricType::Gauge,
    );
    let mut pod_cpu = stable(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        MetricType::Counter,
    );
    let mut pod_memory = stable(
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        MetricType::Gauge,
    );
    let mut scrape_error = stable(
        "resource_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        MetricType::Gauge,
    );
    let at = snapshot.now.millis();
    if let Some(cpu) = snapshot.node.cpu_ns {
        node_cpu.samples.push(Sample::new(&[], seconds(cpu)).at(at));
    }
    if let Some(memory) = &snapshot.node.memory {
        node_memory
            .samples
            .push(Sample::new(&[], memory.working_set() as f64).at(at));
    }
    for pod in &snapshot.pods {
        let pod_labels = [
            ("pod", pod.name.as_str()),
            ("namespace", pod.namespace.as_str()),
        ];
        for c in &pod.containers {
            let labels = [
                ("container", c.name.as_str()),
                ("pod", pod.name.as_str()),
                ("namespace", pod.namespace.as_str()),
            ];
            if c.start.nanos > 0 {
                container_start
                    .samples
                    .push(Sample::new(&labels, c.start.nanos as f64 / 1e9));
            }
            let Some(stats) = &c.stats else { continue };
            if let Some(cpu) = stats.cpu_usage_ns {
                container_cpu
                    .samples
                    .push(Sample::new(&labels, seconds(cpu)).at(at));
            }
            if let Some(ws) = stats.working_set {
                container_memory
                    .samples
                    .push(Sample::new(&labels, ws as f64).at(at));
            }
        }
        let Some(stats) = &pod.stats else { continue };
        if let Some(cpu) = stats.cpu_usage_ns {
            pod_cpu
                .samples
                .push(Sample::new(&pod_labels, seconds(cpu)).at(at));
        }
        if let Some(ws) = stats.working_set {
            pod_memory
                .samples
                .push(Sample::new(&pod_labels, ws as f64).at(at));
        }
    }
    let failed = if snapshot.error.is_some() { 1.0 } else { 0.0 };
    scrape_error.samples.push(Sample::new(&[], failed));
    vec![
        node_cpu,
        node_memory,
        container_start,
        container_cpu,
        container_memory,
        pod_cpu,
        pod_memory,
        scrape_error,
    ]
}

/// The identity labels cAdvisor gives a cgroup in the kubelet.
struct Identity<'a> {
    container: &'a str,
    id: &'a str,
    image: &'a str,
    name: &'a str,
    namespace: &'a str,
    pod: &'a str,
}

impl Identity<'_> {
    fn labels<'l>(&'l self, extra: &[(&'l str, &'l str)]) -> Vec<(&'l str, &'l str)> {
        let mut labels = vec![
            ("container", self.container),
            ("id", self.id),
            ("image", self.image),
            ("name", self.name),
            ("namespace", self.namespace),
            ("pod", self.pod),
        ];
        labels.extend_from_slice(extra);
        labels
    }
}

/// The families of `/metrics/cadvisor`.
struct Cadvisor {
    cpu: MetricFamily,
    cpu_user: MetricFamily,
    cpu_system: MetricFamily,
    memory_usage: MetricFamily,
    working_set: MetricFamily,
    rss: MetricFamily,
    cache: MetricFamily,
    memory_limit: MetricFamily,
    rx_bytes: MetricFamily,
    rx_packets: MetricFamily,
    rx_errors: MetricFamily,
    rx_dropped: MetricFamily,
    tx_bytes: MetricFamily,
    tx_packets: MetricFamily,
    tx_errors: MetricFamily,
    tx_dropped: MetricFamily,
    fs_usage: MetricFamily,
    fs_limit: MetricFamily,
    processes: MetricFamily,
    threads: MetricFamily,
    start: MetricFamily,
    last_seen: MetricFamily,
}

impl Cadvisor {
    fn new() -> Cadvisor {
        let counter = |name: &str, help: &str| MetricFamily::new(name, help, MetricType::Counter);
        let gauge = |name: &str, help: &str| MetricFamily::new(name, help, MetricType::Gauge);
        Cadvisor {
            cpu: counter(
                "container_cpu_usage_seconds_total",
                "Cumulative cpu time consumed in seconds.",
            ),
            cpu_user: counter(
                "container_cpu_user_seconds_total",
                "Cumulative user cpu time consumed in seconds.",
            ),
            cpu_system: counter(
                "container_cpu_system_seconds_total",
                "Cumulative system cpu time consumed in seconds.",
            ),
            memory_usage: gauge(
                "container_memory_usage_bytes",
                "Current memory usage in bytes, including all memory regardless of when it was accessed",
            ),
            working_set: gauge(
                "container_memory_working_set_bytes",
                "Current working set in bytes.",
            ),
            rss: gauge("container_memory_rss", "Size of RSS in bytes."),
            cache: gauge(
                "container_memory_cache",
                "Number of bytes of page cache memory.",
            ),
            memory_limit: gauge(
                "container_spec_memory_limit_bytes",
                "Memory limit for the container.",
            ),
            rx_bytes: counter(
                "container_network_receive_bytes_total",
                "Cumulative count of bytes received",
            ),
            rx_packets: counter(
                "container_network_receive_packets_total",
                "Cumulative count of packets received",
            ),
            rx_errors: counter(
                "container_network_receive_errors_total",
                "Cumulative count of errors encountered while receiving",
            ),
            rx_dropped: counter(
                "container_network_receive_packets_dropped_total",
                "Cumulative count of packets dropped while receiving",
            ),
            tx_bytes: counter(
                "container_network_transmit_bytes_total",
                "Cumulative count of bytes transmitted",
            ),
            tx_packets: counter(
                "container_network_transmit_packets_total",
                "Cumulative count of packets transmitted",
            ),
            tx_errors: counter(
                "container_network_transmit_errors_total",
                "Cumulative count of errors encountered while transmitting",
            ),
            tx_dropped: counter(
                "container_network_transmit_packets_dropped_total",
                "Cumulative count of packets dropped while transmitting",
            ),
            fs_usage: gauge(
                "container_fs_usage_bytes",
                "Number of bytes that are consumed by the container on this filesystem.",
            ),
            fs_limit: gauge(
                "container_fs_limit_bytes",
                "Number of bytes that can be consumed by the container on this filesystem.",
            ),
            processes: gauge(
                "container_processes",
                "Number of processes running inside the container.",
            ),
            threads: gauge(
                "container_threads",
                "Number of threads running inside the container",
            ),
            start: gauge(
                "container_start_time_seconds",
                "Start time of the container since unix epoch in seconds.",
            ),
            last_seen: gauge(
                "container_last_seen",
                "Last time a container was seen by the exporter",
            ),
        }
    }

    fn cgroup(
        &mut self,
        who: &Identity<'_>,
        stats: &super::CgroupStats,
        processes: Option<u64>,
        at: i64,
    ) {
        let put = |family: &mut MetricFamily, value: Option<u64>, scale: f64| {
            if let Some(value) = value {
                family
                    .samples
                    .push(Sample::new(&who.labels(&[]), value as f64 * scale).at(at));
            }
        };
        put(&mut self.cpu_user, stats.cpu_user_ns, 1e-9);
        put(&mut self.cpu_system, stats.cpu_system_ns, 1e-9);
        put(&mut self.memory_usage, stats.memory_usage, 1.0);
        put(&mut self.working_set, stats.working_set, 1.0);
        put(&mut self.rss, stats.rss, 1.0);
        put(&mut self.cache, stats.cache, 1.0);
        put(&mut self.threads, stats.processes, 1.0);
        put(&mut self.processes, processes, 1.0);
        if let Some(cpu) = stats.cpu_usage_ns.filter(|c| *c > 0) {
            self.cpu
                .samples
                .push(Sample::new(&who.labels(&[("cpu", "total")]), seconds(cpu)).at(at));
        }
        // cAdvisor reports an unlimited cgroup's limit as 0.
        self.memory_limit.samples.push(Sample::new(
            &who.labels(&[]),
            stats.memory_limit.unwrap_or(0) as f64,
        ));
    }

    fn network(&mut self, who: &Identity<'_>, interfaces: &[super::Interface], at: i64) {
        for i in interfaces {
            let labels = who.labels(&[("interface", i.name.as_str())]);
            for (family, value) in [
                (&mut self.rx_bytes, i.rx_bytes),
                (&mut self.rx_packets, i.rx_packets),
                (&mut self.rx_errors, i.rx_errors),
                (&mut self.rx_dropped, i.rx_dropped),
                (&mut self.tx_bytes, i.tx_bytes),
                (&mut self.tx_packets, i.tx_packets),
                (&mut self.tx_errors, i.tx_errors),
                (&mut self.tx_dropped, i.tx_dropped),
            ] {
                family
                    .samples
                    .push(Sample::new(&labels, value as f64).at(at));
            }
        }
    }

    fn seen(&mut self, who: &Identity<'_>, start_seconds: i64, now_ms: i64) {
        self.start
            .samples
            .push(Sample::new(&who.labels(&[]), start_seconds as f64));
        self.last_seen
            .samples
            .push(Sample::new(&who.labels(&[]), now_ms.div_euclid(1000) as f64).at(now_ms));
    }

    fn families(self) -> Vec<MetricFamily> {
        vec![
            self.cpu,
            self.cpu_user,
            self.cpu_system,
            self.memory_usage,
            self.working_set,
            self.rss,
            self.cache,
            self.memory_limit,
            self.rx_bytes,
            self.rx_packets,
            self.rx_errors,
            self.rx_dropped,
            self.tx_bytes,
            self.tx_packets,
            self.tx_errors,
            self.tx_dropped,
            self.fs_usage,
            self.fs_limit,
            self.processes,
            self.threads,
            self.start,
            self.last_seen,
        ]
    }
}

/// What identifies the machine in cAdvisor's machine metrics.
#[derive(Debug, Clone, Default)]
pub(crate) struct MachineIds {
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

/// `/metrics/cadvisor` from a full snapshot; `processes` counts a cgroup's processes.
pub(crate) fn cadvisor(
    snapshot: &Snapshot,
    machine: &MachineIds,
    processes: &dyn Fn(&str) -> Option<u64>,
) -> Vec<MetricFamily> {
    let at = snapshot.now.millis();
    let mut out = Cadvisor::new();
    let node = &snapshot.node;
    // The root cgroup: the node's figures, as cAdvisor's `/` container.
    let root = Identity {
        container: "",
        id: "/",
        image: "",
        name: "",
        namespace: "",
        pod: "",
    };
    let root_stats = super::CgroupStats {
        cpu_usage_ns: node.cpu_ns,
        memory_usage: node.memory.as_ref().map(super::MemInfo::usage),
        working_set: node.memory.as_ref().map(super::MemInfo::working_set),
        rss: node.memory.as_ref().map(|m| m.anon),
        cache: node.memory.as_ref().map(|m| m.cached),
        page_faults: node.faults.0,
        major_page_faults: node.faults.1,
        ..Default::default()
    };
    out.cgroup(&root, &root_stats, None, at);
    out.network(&root, &node.interfaces, at);
    if let Some(boot) = &node.boot {
        out.seen(&root, boot.nanos.div_euclid(1_000_000_000), at);
    }
    if let Some((created, stats, _)) = &node.pods_cgroup {
        let pods = Identity {
            id: super::PODS_CGROUP,
            ..root
        };
        out.cgroup(&pods, stats, processes(super::PODS_CGROUP), at);
        out.seen(&pods, created.nanos.div_euclid(1_000_000_000), at);
    }
    let image_fs = node.image_fs.as_ref().map(|(fs, _, _)| *fs);
    for pod in &snapshot.pods {
        if let (Some(path), Some(stats)) = (&pod.cgroup, &pod.stats) {
            let who = Identity { id: path, ..root };
            out.cgroup(&who, stats, processes(path), at);
            out.network(&who, &pod.interfaces, at);
            out.seen(&who, pod.start.nanos.div_euclid(1_000_000_000), at);
        }
        for c in &pod.containers {
            let who = Identity {
                container: &c.name,
                id: &c.cgroup,
                image: &c.image,
                name: &c.id,
                namespace: &pod.namespace,
                pod: &pod.name,
            };
            if let Some(stats) = &c.stats {
                out.cgroup(&who, stats, processes(&c.cgroup), at);
            }
            if let (Some((Some(used), _)), Some(fs)) = (c.writable, &image_fs) {
                let device = node.image_fs_device.as_deref().unwrap_or_default();
                let labels = who.labels(&[("device", device)]);
                out.fs_usage
                    .samples
                    .push(Sample::new(&labels, used as f64).at(at));
                out.fs_limit
                    .samples
                    .push(Sample::new(&labels, fs.capacity as f64).at(at));
            }
            out.seen(&who, c.start.nanos.div_euclid(1_000_000_000), at);
        }
    }
    let mut families = out.families();
    let machine_labels = [
        ("boot_id", machine.boot_id.as_str()),
        ("machine_id", machine.machine_id.as_str()),
        ("system_uuid", machine.system_uuid.as_str()),
    ];
    let mut cores = MetricFamily::new(
        "machine_cpu_cores",
        "Number of logical CPU cores.",
        MetricType::Gauge,
    );
    cores
        .samples
        .push(Sample::new(&machine_labels, node.cores as f64));
    families.push(cores);
    if let Some(memory) = &node.memory {
        let mut bytes = MetricFamily::new(
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            MetricType::Gauge,
        );
        bytes
            .samples
            .push(Sample::new(&machine_labels, memory.total as f64));
        families.push(bytes);
    }
    let mut scrape_error = MetricFamily::new(
        "container_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        MetricType::Gauge,
    );
    let failed = if snapshot.error.is_some() { 1.0 } else { 0.0 };
    scrape_error.samples.push(Sample::new(&[], failed));
    families.push(scrape_error);
    families
}

/// Upstream's buckets for `kubelet_pod_start_duration_seconds`, in seconds.
pub const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// What `/metrics` reports of the kubelet: counted by the caller from the runtime and the
/// pod manager.
#[derive(Debug, Clone, Default)]
pub(crate) struct KubeletFigures {
    pub node_name: String,
    /// Pods with a ready sandbox.
    pub running_pods: u64,
    /// Containers by CRI state (`created`, `running`, `exited`, `unknown`).
    pub containers: Vec<(&'static str, u64)>,
    /// Pods bound to the node as the API has them.
    pub desired_pods: u64,
}

/// The process collector's figures of this process (`/proc/self`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcessFigures {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub start_time_seconds: f64,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// Parses `/proc/self/stat` (after the command's closing parenthesis: utime is field 14,
/// stime 15, starttime 22, vsize 23) with the boot time, and the resident set (`VmRSS`) of
/// `/proc/self/status`.
pub(crate) fn parse_self_stat(text: &str, boot_time: i64, status: &str) -> Option<ProcessFigures> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (state).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let ticks = 100.0;
    Some(ProcessFigures {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib.saturating_mul(1024)),
        open_fds: None,
        max_fds: None,
    })
}

/// `Max open files` of `/proc/self/limits` (its soft limit).
pub(crate) fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The runtime operation families: counts, errors and the duration histogram by operation.
fn runtime_operations(
    operations: &std::collections::BTreeMap<String, crate::runtime::cri::OperationStats>,
) -> Vec<MetricFamily> {
    let alpha =
        |name: &str, help: &str, kind| MetricFamily::new(name, &format!("[ALPHA] {help}"), kind);
    let mut counts = alpha(
        "kubelet_runtime_operations_total",
        "Cumulative number of runtime operations by operation type.",
        MetricType::Counter,
    );
    let mut errors = alpha(
        "kubelet_runtime_operations_errors_total",
        "Cumulative number of runtime operation errors by operation type.",
        MetricType::Counter,
    );
    let mut durations = alpha(
        "kubelet_runtime_operations_duration_seconds",
        "Duration in seconds of runtime operations. Broken down by operation type.",
        MetricType::Histogram,
    );
    let bounds = crate::runtime::cri::duration_buckets();
    for (operation, stats) in operations {
        let labels = [("operation_type", operation.as_str())];
        counts
            .samples
            .push(Sample::new(&labels, stats.count as f64));
        if stats.errors > 0 {
            errors
                .samples
                .push(Sample::new(&labels, stats.errors as f64));
        }
        durations.samples.extend(histogram_samples(
            &labels,
            &bounds,
            &stats.buckets,
            stats.count,
            stats.seconds,
        ));
    }
    vec![counts, errors, durations]
}

/// `/metrics`.
pub(crate) fn kubelet(
    figures: &KubeletFigures,
    operations: &std::collections::BTreeMap<String, crate::runtime::cri::OperationStats>,
    pod_starts: &Histogram,
    process: Option<&ProcessFigures>,
) -> Vec<MetricFamily> {
    let alpha = |name: &str, help: &str| {
        MetricFamily::new(name, &format!("[ALPHA] {help}"), MetricType::Gauge)
    };
    let mut node_name = alpha(
        "kubelet_node_name",
        "The node's name. The count is always 1.",
    );
    node_name
        .samples
        .push(Sample::new(&[("node", figures.node_name.as_str())], 1.0));
    let mut running_pods = alpha(
        "kubelet_running_pods",
        "Number of pods that have a running pod sandbox",
    );
    running_pods
        .samples
        .push(Sample::new(&[], figures.running_pods as f64));
    let mut containers = alpha(
        "kubelet_running_containers",
        "Number of containers currently running",
    );
    for (state, count) in &figures.containers {
        containers
            .samples
            .push(Sample::new(&[("container_state", state)], *count as f64));
    }
    let mut desired = alpha(
        "kubelet_desired_pods",
        "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
    );
    desired
        .samples
        .push(Sample::new(&[("static", "")], figures.desired_pods as f64));
    desired
        .samples
        .push(Sample::new(&[("static", "true")], 0.0));
    let mut families = vec![node_name, running_pods, containers, desired];
    families.extend(runtime_operations(operations));
    families.push(MetricFamily {
        samples: pod_starts.samples(&[]),
        ..MetricFamily::new(
            "kubelet_pod_start_duration_seconds",
            "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            MetricType::Histogram,
        )
    });
    if let Some(p) = process {
        let gauge = |name: &str, help: &str, value: f64| MetricFamily {
            samples: vec![Sample::new(&[], value)],
            ..MetricFamily::new(name, help, MetricType::Gauge)
        };
        families.push(MetricFamily {
            samples: vec![Sample::new(&[], p.cpu_seconds)],
            ..MetricFamily::new(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                MetricType::Counter,
            )
        });
        families.push(gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_bytes as f64,
        ));
        families.push(gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            p.virtual_bytes as f64,
        ));
        families.push(gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds,
        ));
        if let Some(fds) = p.open_fds {
            families.push(gauge(
                "process_open_fds",
                "Number of open file descriptors.",
                fds as f64,
            ));
        }
        if let Some(fds) = p.max_fds {
            families.push(gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                fds as f64,
            ));
        }
    }
    families
}

#[cfg(test)]
mod tests {
    use super::super::summary::Instant;
    use super::super::*;
    use super::*;
    use capstan_client::prometheus::{Format, encode_families};

    fn snapshot() -> Snapshot {
        let now = Instant::from_nanos(1_700_000_000_250_000_000);
        let stats = CgroupStats {
            cpu_usage_ns: Some(2_500_000_000),
            cpu_user_ns: Some(2_000_000_000),
            cpu_system_ns: Some(500_000_000),
            memory_usage: Some(8_000_000),
            working_set: Some(6_000_000),
            rss: Some(4_000_000),
            cache: Some(2_000_000),
            processes: Some(3),
            ..Default::default()
        };
        Snapshot {
            now: now.clone(),
            detail: Detail::Full,
            node: NodeSample {
                boot: Some(Instant::from_nanos(1_600_000_000_000_000_000)),
                cpu_ns: Some(123_500_000_000),
                memory: Some(MemInfo {
                    total: 4 << 30,
                    free: 1 << 30,
                    inactive_file: 1 << 29,
                    anon: 1 << 28,
                    cached: 1 << 29,
                }),
                cores: 2,
                interfaces: vec![Interface {
                    name: "eth0".into(),
                    rx_bytes: 10,
                    ..Default::default()
                }],
                ..Default::default()
            },
            pods: vec![PodSample {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                start: Instant::from_nanos(1_699_999_000_000_000_000),
                cgroup: Some("/kubepods/besteffort/podu1".into()),
                stats: Some(stats.clone()),
                cpu_previous: None,
                interfaces: vec![Interface {
                    name: "eth0".into(),
                    rx_bytes: 99,
                    ..Default::default()
                }],
                containers: vec![ContainerSample {
                    id: "abc".into(),
                    name: "burn".into(),
                    image: "docker.io/library/busybox:latest".into(),
                    start: Instant::from_nanos(1_699_999_001_500_000_000),
                    cgroup: "/kubepods/besteffort/podu1/abc".into(),
                    stats: Some(stats),
                    cpu_previous: None,
                    writable: Some((Some(4096), Some(3))),
                    logs: None,
                }],
                volumes: Vec::new(),
            }],
            error: None,
        }
    }

    #[test]
    fn resource_metrics_are_upstreams() {
        let text = encode_families(&resource(&snapshot()), Format::Text, true);
        assert_eq!(
            text,
            "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n\
             # TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{container=\"burn\",namespace=\"default\",pod=\"web\"} 2.5 1700000000250\n\
             # HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n\
             # TYPE container_memory_working_set_bytes gauge\n\
             container_memory_working_set_bytes{container=\"burn\",namespace=\"default\",pod=\"web\"} 6e+06 1700000000250\n\
             # HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds\n\
             # TYPE container_start_time_seconds gauge\n\
             container_start_time_seconds{container=\"burn\",namespace=\"default\",pod=\"web\"} 1.6999990015e+09\n\
             # HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n\
             # TYPE node_cpu_usage_seconds_total counter\n\
             node_cpu_usage_seconds_total 123.5 1700000000250\n\
             # HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes\n\
             # TYPE node_memory_working_set_bytes gauge\n\
             node_memory_working_set_bytes 2.68435456e+09 1700000000250\n\
             # HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds\n\
             # TYPE pod_cpu_usage_seconds_total counter\n\
             pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2.5 1700000000250\n\
             # HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes\n\
             # TYPE pod_memory_working_set_bytes gauge\n\
             pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 6e+06 1700000000250\n\
             # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE resource_scrape_error gauge\n\
             resource_scrape_error 0\n"
        );
        let mut failed = snapshot();
        failed.error = Some("runtime down".into());
        failed.pods.clear();
        let text = encode_families(&resource(&failed), Format::Text, true);
        assert!(text.ends_with("resource_scrape_error 1\n"), "{text}");
        assert!(!text.contains("container_"), "{text}");
    }

    #[test]
    fn cadvisor_metrics_carry_cadvisors_labels() {
        let machine = MachineIds {
            boot_id: "b".into(),
            machine_id: "m".into(),
            system_uuid: "s".into(),
        };
        let snapshot = Snapshot {
            node: NodeSample {
                image_fs: Some((
                    FsCapacity {
                        capacity: 1 << 30,
                        ..Default::default()
                    },
                    None,
                    None,
                )),
                image_fs_device: Some("/dev/vda1".to_owned()),
                ..snapshot().node
            },
            ..snapshot()
        };
        let families = cadvisor(&snapshot, &machine, &|_| Some(1));
        let text = encode_families(&families, Format::Text, true);
        for line in [
            "container_cpu_usage_seconds_total{container=\"burn\",cpu=\"total\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 2.5 1700000000250",
            "container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 123.5 1700000000250",
            "container_memory_working_set_bytes{container=\"burn\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 6e+06 1700000000250",
            "container_network_receive_bytes_total{container=\"\",id=\"/kubepods/besteffort/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"} 99 1700000000250",
            "container_fs_usage_bytes{container=\"burn\",device=\"/dev/vda1\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 4096 1700000000250",
            "container_start_time_seconds{container=\"burn\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 1.699999001e+09",
            "container_last_seen{container=\"burn\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 1.7e+09 1700000000250",
            "container_threads{container=\"burn\",id=\"/kubepods/besteffort/podu1/abc\",image=\"docker.io/library/busybox:latest\",name=\"abc\",namespace=\"default\",pod=\"web\"} 3 1700000000250",
            "machine_cpu_cores{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"} 2",
            "machine_memory_bytes{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"} 4.294967296e+09",
            "container_scrape_error 0",
            "# HELP container_memory_rss Size of RSS in bytes.",
            "# TYPE container_network_receive_bytes_total counter",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn kubelet_metrics_count_what_runs() {
        let figures = KubeletFigures {
            node_name: "n1".into(),
            running_pods: 2,
            containers: vec![("exited", 1), ("running", 3)],
            desired_pods: 4,
        };
        let process = ProcessFigures {
            cpu_seconds: 1.5,
            resident_bytes: 4096,
            virtual_bytes: 8192,
            start_time_seconds: 1.7e9,
            open_fds: Some(10),
            max_fds: Some(1024),
        };
        let mut operations = std::collections::BTreeMap::new();
        operations.insert(
            "list_podsandbox".to_owned(),
            crate::runtime::cri::OperationStats {
                count: 3,
                errors: 1,
                buckets: [2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                seconds: 0.05,
            },
        );
        let starts = Histogram::new(&POD_START_BUCKETS);
        starts.observe(1.5);
        starts.observe(7000.0);
        let text = encode_families(
            &kubelet(&figures, &operations, &starts, Some(&process)),
            Format::Text,
            true,
        );
        for line in [
            "# HELP kubelet_node_name [ALPHA] The node's name. The count is always 1.",
            "kubelet_node_name{node=\"n1\"} 1",
            "kubelet_running_pods 2",
            "kubelet_running_containers{container_state=\"exited\"} 1",
            "kubelet_running_containers{container_state=\"running\"} 3",
            "kubelet_desired_pods{static=\"\"} 4",
            "kubelet_desired_pods{static=\"true\"} 0",
            "# TYPE process_cpu_seconds_total counter",
            "process_cpu_seconds_total 1.5",
            "process_open_fds 10",
            "process_max_fds 1024",
            "process_start_time_seconds 1.7e+09",
            "# TYPE kubelet_runtime_operations_total counter",
            "kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 3",
            "kubelet_runtime_operations_errors_total{operation_type=\"list_podsandbox\"} 1",
            "# TYPE kubelet_runtime_operations_duration_seconds histogram",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"0.005\"} 2",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"0.0125\"} 2",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"0.03125\"} 3",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"+Inf\"} 3",
            "kubelet_runtime_operations_duration_seconds_sum{operation_type=\"list_podsandbox\"} 0.05",
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"list_podsandbox\"} 3",
            "kubelet_pod_start_duration_seconds_bucket{le=\"1\"} 0",
            "kubelet_pod_start_duration_seconds_bucket{le=\"2\"} 1",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 1",
            "kubelet_pod_start_duration_seconds_bucket{le=\"+Inf\"} 2",
            "kubelet_pod_start_duration_seconds_sum 7001.5",
            "kubelet_pod_start_duration_seconds_count 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn the_process_is_read_from_proc_self() {
        let stat = "1234 (capstan (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 8 0 500 104857600 2560 18446744073709551615";
        let status = "Name:\tcapstan\nVmSize:\t  102400 kB\nVmRSS:\t   10240 kB\n";
        let figures = parse_self_stat(stat, 1_700_000_000, status).unwrap();
        assert_eq!(figures.cpu_seconds, 3.0);
        assert_eq!(figures.start_time_seconds, 1_700_000_005.0);
        assert_eq!(figures.virtual_bytes, 104_857_600);
        assert_eq!(figures.resident_bytes, 10240 * 1024);
        assert_eq!(parse_self_stat("garbage", 0, status), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1048576              1048576              files     \n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576));
        assert_eq!(parse_max_fds(""), None);
    }
}
