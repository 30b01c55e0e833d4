use super::*;

/// A kubelet's `/metrics/resource` as upstream's kubelet writes it (two containers of one pod,
/// one of another, the node).
const SCRAPE: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-1"} 12.5 1700000010000
container_cpu_usage_seconds_total{container="sidecar",namespace="default",pod="web-1"} 0.25 1700000010000
container_cpu_usage_seconds_total{container="c",namespace="kube-system",pod="dns"} 3 1700000010000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web-1"} 1.2582912e+07 1700000010000
container_memory_working_set_bytes{container="sidecar",namespace="default",pod="web-1"} 4096 1700000010000
container_memory_working_set_bytes{container="c",namespace="kube-system",pod="dns"} 0 1700000010000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web-1"} 1.6999e+09 1699900000000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1000.5 1700000010000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1700000010000
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"#;

const AT: i64 = 1_700_000_010_000_000_000;

#[test]
fn a_scrape_gives_the_node_and_the_complete_pods() {
    let batch = parse(SCRAPE, "n1", 0).unwrap();
    assert_eq!(
        batch.nodes["n1"],
        Point {
            start: 0,
            timestamp: AT,
            cpu: 1_000_500_000_000,
            memory: 2_147_483_648,
        }
    );
    let web = &batch.pods[&("default".to_owned(), "web-1".to_owned())];
    assert_eq!(
        web["app"],
        Point {
            start: 1_699_900_000_000_000_000,
            timestamp: AT,
            cpu: 12_500_000_000,
            memory: 12_582_912,
        }
    );
    assert_eq!(web["sidecar"].cpu, 250_000_000);
    // A container without memory leaves its pod out, as metrics-server does.
    assert!(
        !batch
            .pods
            .contains_key(&("kube-system".to_owned(), "dns".to_owned()))
    );
}

#[test]
fn samples_without_timestamps_take_the_scrape_time() {
    let batch = parse(
        "node_cpu_usage_seconds_total 2\nnode_memory_working_set_bytes 100\n",
        "n",
        5_000,
    )
    .unwrap();
    assert_eq!(batch.nodes["n"].timestamp, 5_000_000_000);
    // No CPU figure: no node point.
    let batch = parse("node_memory_working_set_bytes 100\n", "n", 5_000).unwrap();
    assert!(batch.nodes.is_empty());
}

#[test]
fn label_values_are_unescaped_and_bad_lines_refused() {
    let line =
        r#"container_cpu_usage_seconds_total{container="a\"b\\c\nd", namespace="ns",pod="p",} 1 2"#;
    let read = sample(line).unwrap();
    assert_eq!(read.labels[0], ("container", "a\"b\\c\nd".to_owned()));
    assert_eq!(read.labels.len(), 3);
    assert_eq!(read.timestamp_ms, Some(2));
    assert!(sample("x 1 2 3").is_err());
    assert!(sample("x{a=\"1\" 1").is_err());
    assert!(sample("x{a=1} 1").is_err());
    assert!(sample("x one").is_err());
    assert!(sample("{a=\"1\"} 1").is_err());
    assert!(sample("x NaN").unwrap().value.is_nan());
    assert!(parse("node_cpu_usage_seconds_total{", "n", 0).is_err());
}

fn node_batch(seconds: i64, cpu_seconds: f64, memory: u64) -> Batch {
    let text = format!(
        "node_cpu_usage_seconds_total {cpu_seconds} {ms}\nnode_memory_working_set_bytes {memory} {ms}\n",
        ms = seconds * 1000
    );
    parse(&text, "n", 0).unwrap()
}

#[test]
fn usage_is_the_rate_between_the_last_two_scrapes() {
    let mut storage = Storage::new(15_000_000_000);
    storage.store(node_batch(100, 10.0, 1024));
    assert_eq!(storage.node("n"), None, "one scrape is not enough");
    storage.store(node_batch(115, 13.0, 2048));
    let usage = storage.node("n").unwrap();
    assert_eq!(usage.cpu, 200_000_000, "3 s of CPU in 15 s is 200m");
    assert_eq!(usage.memory, 2048);
    assert_eq!(usage.window, 15_000_000_000);
    // The same scrape again keeps the previous point.
    storage.store(node_batch(115, 13.0, 2048));
    assert_eq!(storage.node("n").unwrap().cpu, 200_000_000);
    // A counter that went back has no usage.
    storage.store(node_batch(130, 1.0, 2048));
    assert_eq!(storage.node("n"), None);
    // A node that is no longer scraped is forgotten.
    storage.store(Batch::default());
    assert_eq!(storage.node("n"), None);
    assert!(storage.is_empty());
}

fn pod_batch(at_s: i64, start_s: i64, cpu: &[(&str, f64)]) -> Batch {
    let mut text = String::new();
    for (container, seconds) in cpu {
        let labels = format!(r#"container="{container}",namespace="ns",pod="p""#);
        let ms = at_s * 1000;
        text.push_str(&format!(
            "container_cpu_usage_seconds_total{{{labels}}} {seconds} {ms}\n\
             container_memory_working_set_bytes{{{labels}}} 1048576 {ms}\n\
             container_start_time_seconds{{{labels}}} {start_s} {ms}\n"
        ));
    }
    parse(&text, "n", 0).unwrap()
}

#[test]
fn a_pod_is_reported_once_every_container_has_two_points() {
    let mut storage = Storage::new(15_000_000_000);
    storage.store(pod_batch(1000, 100, &[("a", 1.0)]));
    assert_eq!(storage.pod("ns", "p"), None);
    storage.store(pod_batch(1015, 100, &[("a", 2.5)]));
    let usage = storage.pod("ns", "p").unwrap();
    assert_eq!(usage.containers.len(), 1);
    assert_eq!(usage.containers[0].1.cpu, 100_000_000);
    assert_eq!(usage.timestamp, 1_015_000_000_000);
    // A new container has no previous point yet: the pod waits.
    storage.store(pod_batch(1030, 100, &[("a", 4.0), ("b", 1.0)]));
    assert_eq!(storage.pod("ns", "p"), None);
    assert_eq!(storage.pod("ns", "other"), None);
}

#[test]
fn a_container_restarted_since_the_last_scrape_starts_over() {
    let mut storage = Storage::new(15_000_000_000);
    storage.store(pod_batch(1000, 100, &[("a", 50.0)]));
    storage.store(pod_batch(1015, 1010, &[("a", 1.0)]));
    assert_eq!(storage.pod("ns", "p"), None);
}

#[test]
fn a_fresh_container_is_measured_from_its_start() {
    // Started 12 s before its first scrape: usage right away, from zero at its start.
    let mut storage = Storage::new(15_000_000_000);
    storage.store(pod_batch(1012, 1000, &[("a", 0.6)]));
    let usage = storage.pod("ns", "p").unwrap();
    assert_eq!(usage.containers[0].1.cpu, 50_000_000);
    assert_eq!(usage.window, 12_000_000_000);
    // Started 5 s before: too fresh to say.
    let mut storage = Storage::new(15_000_000_000);
    storage.store(pod_batch(1005, 1000, &[("a", 0.6)]));
    assert_eq!(storage.pod("ns", "p"), None);
}

#[test]
fn quantities_are_written_as_metrics_server_writes_them() {
    let of = |cpu, memory| {
        ResourceUsage::of(&Usage {
            cpu,
            memory,
            timestamp: 0,
            window: 1,
        })
    };
    let cases = [
        (123_000_000, 12_582_912, "123m", "12Mi"),
        (1_000_000_000, 12_000_000, "1", "12000000"),
        (123_456_789, 512, "123456789n", "512"),
        (0, 0, "0", "0"),
        (2_500_000_000, 1_073_741_824, "2500m", "1Gi"),
        (7_000, 3 * 1024, "7u", "3Ki"),
    ];
    for (cpu, memory, cpu_text, memory_text) in cases {
        let usage = of(cpu, memory);
        assert_eq!(
            (usage.cpu.as_str(), usage.memory.as_str()),
            (cpu_text, memory_text)
        );
    }
}

#[test]
fn objects_serialise_in_upstream_field_order() {
    let usage = Usage {
        cpu: 250_000_000,
        memory: 1_048_576,
        timestamp: AT,
        window: 15_002_000_000,
    };
    let labels = BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]);
    let node = node_metrics("n1", labels, &usage, AT + 3_000_000_000);
    assert_eq!(
        serde_json::to_string(&node).unwrap(),
        r#"{"kind":"NodeMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"n1","creationTimestamp":"2023-11-14T22:13:33Z","labels":{"kubernetes.io/os":"linux"}},"timestamp":"2023-11-14T22:13:30Z","window":"15.002s","usage":{"cpu":"250m","memory":"1Mi"}}"#
    );
    let pod = pod_metrics(
        "ns",
        "p",
        BTreeMap::new(),
        &PodUsage {
            containers: vec![("a".to_owned(), usage)],
            timestamp: AT,
            window: 15_002_000_000,
        },
        AT,
    );
    assert_eq!(
        serde_json::to_string(&List::new("PodMetricsList", vec![pod])).unwrap(),
        r#"{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{},"items":[{"kind":"PodMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"p","namespace":"ns","creationTimestamp":"2023-11-14T22:13:30Z"},"timestamp":"2023-11-14T22:13:30Z","window":"15.002s","containers":[{"name":"a","usage":{"cpu":"250m","memory":"1Mi"}}]}]}"#
    );
}

#[test]
fn a_pod_row_sums_its_containers() {
    let pod = serde_json::json!({
        "kind": "PodMetrics",
        "metadata": {"name": "p"},
        "window": "15s",
        "containers": [
            {"name": "a", "usage": {"cpu": "250m", "memory": "1Mi"}},
            {"name": "b", "usage": {"cpu": "500m", "memory": "1Mi"}},
        ],
    });
    let row = print(&pod, Timestamp::UNIX_EPOCH);
    assert_eq!(row.cells, ["p", "750m", "2Mi", "15s"]);
    let node = serde_json::json!({
        "kind": "NodeMetrics",
        "metadata": {"name": "n"},
        "window": "10s",
        "usage": {"cpu": "1", "memory": "3Gi"},
    });
    assert_eq!(
        print(&node, Timestamp::UNIX_EPOCH).cells,
        ["n", "1", "3Gi", "10s"]
    );
}
