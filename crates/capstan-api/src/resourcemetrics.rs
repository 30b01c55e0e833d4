//! The resource Metrics API (`metrics.k8s.io/v1beta1`, the API metrics-server serves and
//! `kubectl top` and the HorizontalPodAutoscaler read), without I/O: what a kubelet's
//! `/metrics/resource` says ([`parse`], Prometheus text format), the last two scrapes of every
//! node and container and the usage between them ([`Storage`], as metrics-server's storage: a
//! CPU rate from two cumulative samples, the memory working set of the last), and the
//! `NodeMetrics` / `PodMetrics` objects and their Table ([`NodeMetrics`], [`PodMetrics`],
//! [`PRINTER`]) in upstream's JSON field order.
//!
//! The API server's `resourcemetrics.rs` scrapes the nodes and serves the objects.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use crate::printers::{Column, Print, Printer, Row};
use crate::quantity::{Format, Quantity};

/// The API group.
pub const GROUP: &str = "metrics.k8s.io";
/// The only version served.
pub const VERSION: &str = "v1beta1";
/// `metrics.k8s.io/v1beta1`.
pub const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// A container that started less than this before a scrape is measured from its start (CPU
/// zero then) rather than waiting for a second scrape, as metrics-server does once it has run
/// at least 10 s.
const FRESH_CONTAINER_MIN_NANOS: i64 = 10_000_000_000;

/// One node's or container's figures at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When the container started (Unix nanoseconds; 0 when unknown).
    pub start: i64,
    /// When it was measured (Unix nanoseconds).
    pub timestamp: i64,
    /// CPU used since the start, in nanoseconds of one core.
    pub cpu: u64,
    /// The memory working set, in bytes.
    pub memory: u64,
}

/// A pod: its namespace and name.
pub type PodKey = (String, String);

/// What one scrape (of one node, or merged over all) measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Nodes by name.
    pub nodes: HashMap<String, Point>,
    /// Pods' containers by name.
    pub pods: HashMap<PodKey, BTreeMap<String, Point>>,
}

impl Batch {
    /// Adds `other`'s nodes and pods (another node's scrape).
    pub fn merge(&mut self, other: Batch) {
        self.nodes.extend(other.nodes);
        for (pod, containers) in other.pods {
            self.pods.entry(pod).or_default().extend(containers);
        }
    }
}

/// One sample line of the Prometheus text format: its name, labels, value and timestamp (ms).
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
    timestamp_ms: Option<i64>,
}

/// Reads one sample line (`name{label="value",...} value [timestamp]`).
fn sample(line: &str) -> Result<Sample<'_>, String> {
    let bad = |why: &str| format!("{why} in line {line:?}");
    let name_end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(bad("invalid metric name"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            rest = rest.trim_start();
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or_else(|| bad("label without a value"))?;
            let label = rest[..eq].trim();
            if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad("invalid label name"));
            }
            rest = rest[eq + 1..]
                .trim_start()
                .strip_prefix('"')
                .ok_or_else(|| bad("label value not quoted"))?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        Some((_, c)) => {
                            value.push('\\');
                            value.push(c);
                        }
                        None => return Err(bad("unterminated label value")),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err(bad("unterminated label value")),
                }
            };
            labels.push((label, value));
            rest = rest[end + 1..].trim_start();
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if !rest.starts_with('}') {
                return Err(bad("expected ',' or '}'"));
            }
        }
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or_else(|| bad("no value"))?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| bad("invalid value"))?,
    };
    let timestamp_ms = match fields.next() {
        Some(t) => Some(t.parse().map_err(|_| bad("invalid timestamp"))?),
        None => None,
    };
    if fields.next().is_some() {
        return Err(bad("unexpected text after the timestamp"));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// Nanoseconds from a floating number of seconds, saturating (negative and NaN give 0).
fn nanos(seconds: f64) -> u64 {
    let nanos = seconds * 1e9;
    if nanos.is_nan() || nanos <= 0.0 {
        0
    } else if nanos >= u64::MAX as f64 {
        u64::MAX
    } else {
        nanos as u64
    }
}

/// Whole bytes from a sample's value (negative and NaN give 0).
fn bytes(value: f64) -> u64 {
    if value.is_nan() || value <= 0.0 {
        0
    } else {
        value as u64
    }
}

/// Reads a kubelet's `/metrics/resource` (`node` is the node scraped; `now_ms` the time of
/// samples without a timestamp): the node's CPU and memory, and every container's with its
/// start time, as metrics-server decodes them. A node or pod missing a figure (zero CPU or
/// memory) is left out, as metrics-server leaves it out.
pub fn parse(text: &str, node: &str, now_ms: i64) -> Result<Batch, String> {
    let mut node_point = Point::default();
    let mut pods: HashMap<PodKey, BTreeMap<String, Point>> = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = sample(line)?;
        let at = sample
            .timestamp_ms
            .unwrap_or(now_ms)
            .saturating_mul(1_000_000);
        match sample.name {
            "node_cpu_usage_seconds_total" => {
                node_point.cpu = nanos(sample.value);
                node_point.timestamp = at;
            }
            "node_memory_working_set_bytes" => {
                node_point.memory = bytes(sample.value);
                node_point.timestamp = at;
            }
            name @ ("container_cpu_usage_seconds_total"
            | "container_memory_working_set_bytes"
            | "container_start_time_seconds") => {
                let label = |key: &str| {
                    sample
                        .labels
                        .iter()
                        .find(|(k, _)| *k == key)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                let key = (label("namespace"), label("pod"));
                let point = pods
                    .entry(key)
                    .or_default()
                    .entry(label("container"))
                    .or_default();
                match name {
                    "container_cpu_usage_seconds_total" => {
                        point.cpu = nanos(sample.value);
                        point.timestamp = at;
                    }
                    "container_memory_working_set_bytes" => {
                        point.memory = bytes(sample.value);
                        point.timestamp = at;
                    }
                    _ => point.start = i64::try_from(nanos(sample.value)).unwrap_or(i64::MAX),
                }
            }
            _ => {}
        }
    }
    let mut batch = Batch::default();
    if node_point.timestamp != 0 && node_point.cpu != 0 && node_point.memory != 0 {
        batch.nodes.insert(node.to_owned(), node_point);
    }
    for (pod, containers) in pods {
        let measured: BTreeMap<String, Point> = containers
            .into_iter()
            .filter(|(_, p)| *p != Point::default())
            .collect();
        if !measured.is_empty() && measured.values().all(|p| p.cpu != 0 && p.memory != 0) {
            batch.pods.insert(pod, measured);
        }
    }
    Ok(batch)
}

/// Usage between two points: CPU in nanocores over the window, the last memory working set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// CPU, in billionths of a core.
    pub cpu: u64,
    /// Memory working set, in bytes.
    pub memory: u64,
    /// When the last point was measured (Unix nanoseconds).
    pub timestamp: i64,
    /// The time between the two points, in nanoseconds.
    pub window: i64,
}

/// The usage from `prev` to `last`; `None` when the container restarted, the counter went
/// back or no time passed.
fn usage(last: &Point, prev: &Point) -> Option<Usage> {
    if last.start < prev.start || last.cpu < prev.cpu {
        return None;
    }
    let window = last.timestamp - prev.timestamp;
    if window <= 0 {
        return None;
    }
    let cpu = (last.cpu - prev.cpu) as f64 / (window as f64 / 1e9);
    Some(Usage {
        cpu: cpu as u64,
        memory: last.memory,
        timestamp: last.timestamp,
        window,
    })
}

/// The last two scrapes of every node and container (metrics-server's storage).
#[derive(Debug)]
pub struct Storage {
    /// The scrape period, in nanoseconds.
    resolution: i64,
    nodes_last: HashMap<String, Point>,
    nodes_prev: HashMap<String, Point>,
    pods_last: HashMap<PodKey, BTreeMap<String, Point>>,
    pods_prev: HashMap<PodKey, BTreeMap<String, Point>>,
}

/// One pod's usage: each container's, and the timestamp and window of the earliest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    /// Containers by name.
    pub containers: Vec<(String, Usage)>,
    /// When measured (Unix nanoseconds).
    pub timestamp: i64,
    /// Over how long (nanoseconds).
    pub window: i64,
}

impl Storage {
    /// Empty storage for scrapes every `resolution_nanos`.
    pub fn new(resolution_nanos: i64) -> Self {
        Storage {
            resolution: resolution_nanos,
            nodes_last: HashMap::new(),
            nodes_prev: HashMap::new(),
            pods_last: HashMap::new(),
            pods_prev: HashMap::new(),
        }
    }

    /// Takes in a scrape of every node: each point becomes the last, the one it follows the
    /// previous (kept when the new one is no newer); a container that started recently enough
    /// is measured from its start.
    pub fn store(&mut self, batch: Batch) {
        let mut nodes_prev = HashMap::new();
        for (name, point) in &batch.nodes {
            if let Some(last) = self.nodes_last.get(name) {
                if point.timestamp > last.timestamp {
                    nodes_prev.insert(name.clone(), *last);
                } else if let Some(prev) = self.nodes_prev.get(name)
                    && prev.timestamp < point.timestamp
                {
                    nodes_prev.insert(name.clone(), *prev);
                }
            }
        }
        let mut pods_prev = HashMap::new();
        for (pod, containers) in &batch.pods {
            let mut prev_containers = BTreeMap::new();
            for (name, point) in containers {
                let age = point.timestamp - point.start;
                if point.start != 0
                    && point.start < point.timestamp
                    && age < self.resolution
                    && age >= FRESH_CONTAINER_MIN_NANOS
                {
                    let from_start = Point {
                        timestamp: point.start,
                        cpu: 0,
                        ..*point
                    };
                    prev_containers.insert(name.clone(), from_start);
                    continue;
                }
                let Some(last) = self.pods_last.get(pod).and_then(|c| c.get(name)) else {
                    continue;
                };
                if point.start >= last.timestamp {
                    // Restarted since: no previous point.
                    continue;
                }
                if point.timestamp > last.timestamp {
                    prev_containers.insert(name.clone(), *last);
                } else if let Some(prev) = self.pods_prev.get(pod).and_then(|c| c.get(name))
                    && prev.timestamp < point.timestamp
                {
                    prev_containers.insert(name.clone(), *prev);
                }
            }
            if !prev_containers.is_empty() {
                pods_prev.insert(pod.clone(), prev_containers);
            }
        }
        self.nodes_last = batch.nodes;
        self.nodes_prev = nodes_prev;
        self.pods_last = batch.pods;
        self.pods_prev = pods_prev;
    }

    /// A node's usage, once it has been scraped twice.
    pub fn node(&self, name: &str) -> Option<Usage> {
        usage(self.nodes_last.get(name)?, self.nodes_prev.get(name)?)
    }

    /// A pod's usage, once every container of its last scrape has a previous point.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodUsage> {
        let key = (namespace.to_owned(), name.to_owned());
        let last = self.pods_last.get(&key)?;
        let prev = self.pods_prev.get(&key)?;
        let mut containers = Vec::with_capacity(last.len());
        let mut earliest: Option<Usage> = None;
        for (container, point) in last {
            let previous = prev.get(container)?;
            let Some(used) = usage(point, previous) else {
                continue;
            };
            if earliest.is_none_or(|e| e.timestamp > used.timestamp) {
                earliest = Some(used);
            }
            containers.push((container.clone(), used));
        }
        let (timestamp, window) = earliest.map_or((0, 0), |e| (e.timestamp, e.window));
        Some(PodUsage {
            containers,
            timestamp,
            window,
        })
    }

    /// How many nodes and containers have usage to report.
    pub fn len(&self) -> (usize, usize) {
        (
            self.nodes_prev.len(),
            self.pods_prev.values().map(BTreeMap::len).sum(),
        )
    }

    /// Whether nothing has usage to report.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

/// RFC 3339 in whole seconds, as `metav1.Time` serialises.
fn time(nanos: i64) -> String {
    Timestamp::from_nanosecond(i128::from(nanos))
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `cpu` and `memory` as the Metrics API writes them: nanocores in `DecimalSI` (`250m`,
/// `1234567n`), bytes in `BinarySI` (`12Mi`, `12345678`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceUsage {
    /// CPU.
    pub cpu: String,
    /// Memory.
    pub memory: String,
}

impl ResourceUsage {
    fn of(usage: &Usage) -> Self {
        ResourceUsage {
            cpu: Quantity::scaled(i128::from(usage.cpu), -9, Format::DecimalSI).canonical(),
            memory: Quantity::scaled(i128::from(usage.memory), 0, Format::BinarySI).canonical(),
        }
    }
}

/// The metadata metrics-server gives its objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The node's or pod's name.
    pub name: String,
    /// The pod's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// When the object was made: now.
    pub creation_timestamp: String,
    /// The node's or pod's labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A node's usage (`NodeMetrics`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetrics {
    /// `NodeMetrics`.
    pub kind: &'static str,
    /// `metrics.k8s.io/v1beta1`.
    pub api_version: &'static str,
    /// Name and labels.
    pub metadata: Meta,
    /// When measured.
    pub timestamp: String,
    /// Over how long (a Go duration).
    pub window: String,
    /// CPU and memory.
    pub usage: ResourceUsage,
}

/// One container's usage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerMetrics {
    /// The container's name.
    pub name: String,
    /// CPU and memory.
    pub usage: ResourceUsage,
}

/// A pod's usage (`PodMetrics`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetrics {
    /// `PodMetrics`.
    pub kind: &'static str,
    /// `metrics.k8s.io/v1beta1`.
    pub api_version: &'static str,
    /// Namespace, name and labels.
    pub metadata: Meta,
    /// When measured.
    pub timestamp: String,
    /// Over how long (a Go duration).
    pub window: String,
    /// Each container's usage.
    pub containers: Vec<ContainerMetrics>,
}

/// A list of metrics objects (`NodeMetricsList`, `PodMetricsList`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct List<T> {
    /// The list kind.
    pub kind: &'static str,
    /// `metrics.k8s.io/v1beta1`.
    pub api_version: &'static str,
    /// Empty: these lists have no resource version.
    pub metadata: BTreeMap<String, String>,
    /// The objects.
    pub items: Vec<T>,
}

impl<T> List<T> {
    /// A list of `kind` holding `items`.
    pub fn new(kind: &'static str, items: Vec<T>) -> Self {
        List {
            kind,
            api_version: API_VERSION,
            metadata: BTreeMap::new(),
            items,
        }
    }
}

/// A Go duration of `nanos` (whole milliseconds; kubelets time their samples in milliseconds).
fn window(nanos: i64) -> String {
    crate::duration::format_go_duration(std::time::Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(0),
    ))
}

/// The `NodeMetrics` of node `name` (its `labels`), made at `now` (Unix nanoseconds).
pub fn node_metrics(
    name: &str,
    labels: BTreeMap<String, String>,
    usage: &Usage,
    now: i64,
) -> NodeMetrics {
    NodeMetrics {
        kind: "NodeMetrics",
        api_version: API_VERSION,
        metadata: Meta {
            name: name.to_owned(),
            namespace: None,
            creation_timestamp: time(now),
            labels,
        },
        timestamp: time(usage.timestamp),
        window: window(usage.window),
        usage: ResourceUsage::of(usage),
    }
}

/// The `PodMetrics` of pod `namespace`/`name` (its `labels`), made at `now`.
pub fn pod_metrics(
    namespace: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    usage: &PodUsage,
    now: i64,
) -> PodMetrics {
    PodMetrics {
        kind: "PodMetrics",
        api_version: API_VERSION,
        metadata: Meta {
            name: name.to_owned(),
            namespace: Some(namespace.to_owned()),
            creation_timestamp: time(now),
            labels,
        },
        timestamp: time(usage.timestamp),
        window: window(usage.window),
        containers: usage
            .containers
            .iter()
            .map(|(name, usage)| ContainerMetrics {
                name: name.clone(),
                usage: ResourceUsage::of(usage),
            })
            .collect(),
    }
}

/// The columns of metrics-server's Tables: the name, each resource, the window.
const COLUMNS: &[Column] = &[
    Column {
        name: "Name",
        type_: "string",
        format: "name",
        description: "Name of the resource",
        priority: 0,
    },
    Column {
        name: "cpu",
        type_: "string",
        format: "quantity",
        description: "",
        priority: 0,
    },
    Column {
        name: "memory",
        type_: "string",
        format: "quantity",
        description: "",
        priority: 0,
    },
    Column {
        name: "Window",
        type_: "string",
        format: "duration",
        description: "",
        priority: 0,
    },
];

/// A Table row of a `NodeMetrics` or `PodMetrics` (the pod's containers summed).
fn print(object: &Value, _now: Timestamp) -> Row {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (cpu, memory) = if object["kind"] == "PodMetrics" {
        let sum = |resource: &str| {
            let mut total = Quantity::scaled(0, 0, Format::DecimalSI);
            for container in object["containers"].as_array().into_iter().flatten() {
                if let Some(q) = container["usage"][resource]
                    .as_str()
                    .and_then(|s| Quantity::parse(s).ok())
                {
                    total = if total.is_zero() { q } else { total.add(&q) };
                }
            }
            total.canonical()
        };
        (sum("cpu"), sum("memory"))
    } else {
        (
            text(&object["usage"]["cpu"]),
            text(&object["usage"]["memory"]),
        )
    };
    Row {
        cells: vec![
            object["metadata"]["name"].clone(),
            Value::from(cpu),
            Value::from(memory),
            Value::from(text(&object["window"])),
        ],
        conditions: Vec::new(),
    }
}

/// The Table printer of both kinds (`kubectl get nodemetrics`/`podmetrics`).
pub const PRINTER: Printer = Printer {
    columns: COLUMNS,
    print: Print::Fn(print),
};

#[cfg(test)]
mod tests;
