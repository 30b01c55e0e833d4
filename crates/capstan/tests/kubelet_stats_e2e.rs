//! End to end: the kubelet's resource statistics on a real node (containerd, the busybox image
//! packed by the test kit). A pod burns CPU under a 200m limit; through the API server's node
//! proxy (`kubectl get --raw /api/v1/nodes/<node>/proxy/...`):
//! - `/stats/summary` shows the pod and its container with CPU and memory that agree with the
//!   container's own cgroup counters (read before and after, on cgroup v1 or v2), CPU that
//!   moves between two reads and a `usageNanoCores` rate within the limit;
//!   `only_cpu_and_memory=true` leaves the rest out;
//! - `/metrics/resource`, `/metrics/cadvisor` and `/metrics` parse with Prometheus' own Python
//!   parser (`prometheus_client.parser`), with upstream's names and labels; OpenMetrics is
//!   answered when asked for (and parses with `prometheus_client.openmetrics.parser`);
//! - `/debug/pprof/heap?debug=1` answers the node agent's heap profile;
//! - a user RBAC does not let proxy to nodes gets 403 from the API server, and a client the
//!   kubelet does not authorize (the node's own certificate) gets 403 from the kubelet;
//! - the API server's built-in Metrics API, scraping `/metrics/resource`, gives `kubectl top`
//!   the pod's CPU.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::node::{IMAGE, NodeDir, flag_value, jsonpath, node_flags, wait_for, wait_ready};
use common::prometheus::{Sample, parse_metrics};
use common::{Server, free_port, kubectl_any, kubectl_ok, kubectl_stdin};
use serde_json::Value;

const BRIDGE: &str = "capstat0";
const CLUSTER_CIDR: &str = "10.219.0.0/16";
const NODE: &str = "stats-node";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples.iter().find(|s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).and_then(Value::as_str) == Some(*v))
    })
}

fn raw(kc: &Path, path: &str) -> String {
    kubectl_ok("default", kc, &["get", "--raw", path])
}

fn summary(kc: &Path, query: &str) -> Value {
    serde_json::from_str(&raw(
        kc,
        &format!("/api/v1/nodes/{NODE}/proxy/stats/summary{query}"),
    ))
    .unwrap()
}

/// The container's cgroup counters, read directly: (CPU ns, memory usage bytes).
struct CgroupFiles {
    cpu: PathBuf,
    memory: PathBuf,
    v2: bool,
}

impl CgroupFiles {
    fn find(pod_uid: &str, container_id: &str) -> Option<CgroupFiles> {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        for qos in ["", "burstable/", "besteffort/"] {
            let relative = format!("kubepods/{qos}pod{pod_uid}/{container_id}");
            let (cpu, memory) = if v2 {
                let dir = Path::new("/sys/fs/cgroup").join(&relative);
                (dir.join("cpu.stat"), dir.join("memory.current"))
            } else {
                (
                    Path::new("/sys/fs/cgroup/cpuacct")
                        .join(&relative)
                        .join("cpuacct.usage"),
                    Path::new("/sys/fs/cgroup/memory")
                        .join(&relative)
                        .join("memory.usage_in_bytes"),
                )
            };
            if cpu.exists() {
                return Some(CgroupFiles { cpu, memory, v2 });
            }
        }
        None
    }

    fn cpu_ns(&self) -> u64 {
        let text = std::fs::read_to_string(&self.cpu).unwrap();
        if self.v2 {
            let usec: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            usec * 1000
        } else {
            text.trim().parse().unwrap()
        }
    }

    fn memory(&self) -> u64 {
        std::fs::read_to_string(&self.memory)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {pointer} in {value:#}"))
}

fn pod_stats<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name && p["podRef"]["namespace"] == "default")
}

/// A client certificate and key (PEM files) from the admin kubeconfig, for talking to the
/// kubelet directly.
fn admin_credentials(kubeconfig: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    use base64::Engine as _;
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let field = |key: &str| {
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key} in the kubeconfig"));
        base64::engine::general_purpose::STANDARD
            .decode(line.trim())
            .unwrap()
    };
    let (cert, key) = (dir.join("admin.crt"), dir.join("admin.key"));
    std::fs::write(&cert, field("client-certificate-data")).unwrap();
    std::fs::write(&key, field("client-key-data")).unwrap();
    (cert, key)
}

/// `curl` against the kubelet's port with a client certificate: (status, content type, body).
fn kubelet_get(
    port: &str,
    path: &str,
    cert: &Path,
    key: &Path,
    accept: &str,
) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "20", "-H"])
        .arg(format!("Accept: {accept}"))
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .args(["-w", "\n%{http_code}\n%{content_type}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines: Vec<&str> = text.rsplitn(3, '\n').collect();
    lines.reverse();
    let body = lines.first().copied().unwrap_or_default().to_owned();
    let status = lines.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let kind = lines.get(2).copied().unwrap_or_default().to_owned();
    (status, kind, body)
}

#[test]
fn node_stats_and_metrics_agree_with_the_cgroups() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let kubelet_port = flag_value(&flags, "--kubelet-port").to_string();
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // The built-in Metrics API scrapes /metrics/resource as often as it may.
    flags.extend(["--metric-resolution", "10s"]);
    let server = Server::start_node(&data_dir, free_port(), &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, NODE);

    // A pod that burns CPU, held to a fifth of a core.
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"burn"}},"spec":{{
            "terminationGracePeriodSeconds":0,
            "containers":[{{"name":"burn","image":"{IMAGE}",
              "command":["sh","-c","while true; do :; done"],
              "resources":{{"limits":{{"cpu":"200m","memory":"64Mi"}}}}}}]}}}}"#
    );
    let created = kubectl_stdin("default", kc, &["create", "-f", "-"], &manifest);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    kubectl_ok(
        "default",
        kc,
        &["wait", "pod/burn", "--for=condition=Ready", "--timeout=90s"],
    );
    let uid = jsonpath(kc, &["get", "pod", "burn"], "{.metadata.uid}");
    let container_id = jsonpath(
        kc,
        &["get", "pod", "burn"],
        "{.status.containerStatuses[0].containerID}",
    );
    let container_id = container_id.trim_start_matches("containerd://").to_owned();
    let cgroup = wait_for("the container's cgroup", Duration::from_secs(10), || {
        CgroupFiles::find(&uid, &container_id)
    });

    // The summary's container figures lie between the cgroup's counters read just before and
    // just after it.
    let before = (cgroup.cpu_ns(), cgroup.memory());
    let first = summary(kc, "");
    let after = (cgroup.cpu_ns(), cgroup.memory());
    assert_eq!(first["node"]["nodeName"], NODE);
    let pod = pod_stats(&first, "burn").unwrap_or_else(|| panic!("no pod burn in {first:#}"));
    assert_eq!(pod["podRef"]["uid"], uid.as_str());
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "burn");
    let cpu = u64_at(container, "/cpu/usageCoreNanoSeconds");
    assert!(
        cpu > 0 && before.0 <= cpu && cpu <= after.0,
        "{before:?} {cpu} {after:?}"
    );
    let usage = u64_at(container, "/memory/usageBytes");
    let working_set = u64_at(container, "/memory/workingSetBytes");
    let (low, high) = (before.1.min(after.1), before.1.max(after.1));
    assert!(
        usage >= low.saturating_sub(1 << 20) && usage <= high + (1 << 20),
        "memory {usage} outside the cgroup's {before:?}..{after:?}"
    );
    assert!(working_set > 0 && working_set <= usage, "{container:#}");
    // A 64 MiB limit: the available memory is what the working set leaves of it.
    assert_eq!(
        u64_at(container, "/memory/availableBytes"),
        (64 << 20) - working_set
    );
    // The pod's cgroup holds the container (and the sandbox).
    assert!(u64_at(pod, "/cpu/usageCoreNanoSeconds") >= cpu, "{pod:#}");
    assert!(
        u64_at(pod, "/memory/workingSetBytes") >= working_set,
        "{pod:#}"
    );
    // The rest of upstream's shape: the network of the pod's namespace, logs, processes.
    assert_eq!(pod["network"]["name"], "eth0", "{pod:#}");
    assert!(pod["network"]["rxBytes"].is_u64(), "{pod:#}");
    assert!(u64_at(pod, "/process_stats/process_count") >= 1);
    assert!(u64_at(pod, "/ephemeral-storage/capacityBytes") > 0);
    assert!(
        container["logs"]["capacityBytes"].as_u64().unwrap() > 0,
        "{container:#}"
    );
    assert!(container["startTime"].as_str().unwrap().ends_with('Z'));
    let node = &first["node"];
    assert!(u64_at(node, "/cpu/usageCoreNanoSeconds") > 0);
    assert!(u64_at(node, "/memory/workingSetBytes") > 0);
    assert!(u64_at(node, "/fs/capacityBytes") > 0);
    // containerd counts the images' bytes in the background: present, maybe 0 at first.
    assert!(
        u64_at(node, "/runtime/imageFs/capacityBytes") > 0,
        "{node:#}"
    );
    assert!(node["runtime"]["imageFs"]["usedBytes"].is_u64(), "{node:#}");
    assert!(u64_at(node, "/rlimit/maxpid") > 0);
    assert_eq!(node["systemContainers"][0]["name"], "pods", "{node:#}");

    // CPU moves between two reads, and the second has the rate between them: under the
    // 200m limit, above nothing.
    std::thread::sleep(Duration::from_secs(2));
    let second = summary(kc, "?only_cpu_and_memory=true");
    let pod = pod_stats(&second, "burn").unwrap();
    let container = &pod["containers"][0];
    let moved = u64_at(container, "/cpu/usageCoreNanoSeconds");
    assert!(moved > cpu, "CPU did not move: {cpu} then {moved}");
    let rate = u64_at(container, "/cpu/usageNanoCores");
    assert!(
        (5_000_000..=300_000_000).contains(&rate),
        "usageNanoCores {rate} for a pod limited to 200m"
    );
    // Only CPU and memory: no network, filesystems or volumes.
    assert!(
        pod.get("network").is_none() && pod.get("ephemeral-storage").is_none(),
        "{pod:#}"
    );
    assert!(container.get("logs").is_none() && container.get("rootfs").is_none());
    assert!(second["node"].get("fs").is_none() && second["node"]["cpu"].is_object());
    // As upstream, only a single `true` asks for less.
    let full = summary(kc, "?only_cpu_and_memory=yes");
    assert!(pod_stats(&full, "burn").unwrap()["network"].is_object());

    // /metrics/resource: upstream's families, labels and millisecond timestamps.
    let text = raw(kc, &format!("/api/v1/nodes/{NODE}/proxy/metrics/resource"));
    let samples = parse_metrics(&text, "text");
    let burn = [
        ("container", "burn"),
        ("namespace", "default"),
        ("pod", "burn"),
    ];
    let cpu_sample = find(&samples, "container_cpu_usage_seconds_total", &burn)
        .unwrap_or_else(|| panic!("no container CPU in\n{text}"));
    assert_eq!(
        (cpu_sample.family.as_str(), cpu_sample.kind.as_str()),
        ("container_cpu_usage_seconds", "counter")
    );
    assert!(cpu_sample.value * 1e9 >= moved as f64, "{cpu_sample:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let stamp = cpu_sample.timestamp.expect("a timestamp");
    assert!((now - stamp).abs() < 60.0, "timestamp {stamp} vs now {now}");
    assert!(text.contains(
        "container_cpu_usage_seconds_total{container=\"burn\",namespace=\"default\",pod=\"burn\"} "
    ));
    assert!(
        find(&samples, "container_memory_working_set_bytes", &burn).is_some_and(|s| s.value > 0.0)
    );
    assert!(find(&samples, "container_start_time_seconds", &burn).is_some_and(|s| s.value > 1e9));
    let pod_labels = [("namespace", "default"), ("pod", "burn")];
    assert!(find(&samples, "pod_cpu_usage_seconds_total", &pod_labels).is_some());
    assert!(find(&samples, "pod_memory_working_set_bytes", &pod_labels).is_some());
    assert!(find(&samples, "node_cpu_usage_seconds_total", &[]).is_some_and(|s| s.value > 0.0));
    assert!(find(&samples, "node_memory_working_set_bytes", &[]).is_some_and(|s| s.value > 0.0));
    assert_eq!(
        find(&samples, "resource_scrape_error", &[]).unwrap().value,
        0.0
    );
    assert!(text.contains("# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n"));

    // /metrics/cadvisor: cAdvisor's names and labels.
    let text = raw(kc, &format!("/api/v1/nodes/{NODE}/proxy/metrics/cadvisor"));
    let samples = parse_metrics(&text, "text");
    let cpu_sample = find(
        &samples,
        "container_cpu_usage_seconds_total",
        &[
            ("container", "burn"),
            ("pod", "burn"),
            ("cpu", "total"),
            ("name", &container_id),
        ],
    )
    .unwrap_or_else(|| panic!("no cAdvisor CPU for the container in\n{text}"));
    for label in ["id", "image", "namespace"] {
        assert!(cpu_sample.labels.contains_key(label), "{cpu_sample:?}");
    }
    assert!(
        cpu_sample.labels["id"]
            .as_str()
            .unwrap()
            .ends_with(&container_id)
    );
    let image = jsonpath(
        kc,
        &["get", "pod", "burn"],
        "{.status.containerStatuses[0].image}",
    );
    assert_eq!(
        cpu_sample.labels["image"],
        image.as_str(),
        "the image's name, not its ID"
    );
    for name in [
        "container_memory_working_set_bytes",
        "container_memory_usage_bytes",
        "container_memory_rss",
        "container_last_seen",
        "container_spec_memory_limit_bytes",
    ] {
        assert!(
            find(&samples, name, &[("container", "burn")]).is_some(),
            "no {name}\n{text}"
        );
    }
    assert_eq!(
        find(
            &samples,
            "container_spec_memory_limit_bytes",
            &[("container", "burn")]
        )
        .unwrap()
        .value,
        (64 << 20) as f64
    );
    assert!(
        find(
            &samples,
            "container_network_receive_bytes_total",
            &[("interface", "eth0")]
        )
        .is_some(),
        "no pod network in\n{text}"
    );
    assert!(find(&samples, "machine_cpu_cores", &[]).is_some_and(|s| s.value >= 1.0));
    assert!(find(&samples, "machine_memory_bytes", &[]).is_some_and(|s| s.value > 0.0));

    // /debug/pprof/: the node agent's profiles (the text form of the heap; the pprof form is
    // checked against the API server's in profiling_e2e).
    let text = raw(
        kc,
        &format!("/api/v1/nodes/{NODE}/proxy/debug/pprof/heap?debug=1"),
    );
    assert!(text.starts_with("heap profile: "), "{text}");

    // /metrics: the kubelet's own.
    let text = raw(kc, &format!("/api/v1/nodes/{NODE}/proxy/metrics"));
    let samples = parse_metrics(&text, "text");
    assert_eq!(
        find(&samples, "kubelet_node_name", &[("node", NODE)])
            .unwrap()
            .value,
        1.0
    );
    assert!(find(&samples, "kubelet_running_pods", &[]).unwrap().value >= 1.0);
    assert!(
        find(
            &samples,
            "kubelet_running_containers",
            &[("container_state", "running")]
        )
        .unwrap()
        .value
            >= 1.0
    );
    assert!(find(&samples, "process_resident_memory_bytes", &[]).is_some_and(|s| s.value > 0.0));
    // The burning pod's start was timed.
    let starts = find(&samples, "kubelet_pod_start_duration_seconds_count", &[]).unwrap();
    assert!(
        starts.value >= 1.0 && starts.kind == "histogram",
        "{starts:?}"
    );
    // Every runtime call is counted and timed, the stats' own listing among them.
    let listed = [("operation_type", "list_podsandbox")];
    let calls = find(&samples, "kubelet_runtime_operations_total", &listed).unwrap();
    assert!(calls.value >= 1.0, "{calls:?}");
    let timed = find(
        &samples,
        "kubelet_runtime_operations_duration_seconds_count",
        &listed,
    )
    .unwrap();
    assert_eq!(timed.kind, "histogram");
    assert!(timed.value >= 1.0);
    assert!(
        find(
            &samples,
            "kubelet_runtime_operations_duration_seconds_bucket",
            &[("operation_type", "create_container"), ("le", "+Inf")],
        )
        .is_some_and(|s| s.value >= 1.0),
        "the pod's container was created through the instrumented runtime"
    );

    // Straight to the kubelet: 0.0.4 by default, OpenMetrics when asked for.
    let (cert, key) = admin_credentials(kc, &data_dir);
    let (status, kind, body) = kubelet_get(&kubelet_port, "/metrics/resource", &cert, &key, "*/*");
    assert_eq!(status, 200, "{body}");
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    let (status, kind, body) = kubelet_get(
        &kubelet_port,
        "/metrics/resource",
        &cert,
        &key,
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        kind,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    let samples = parse_metrics(&body, "openmetrics");
    assert!(
        find(&samples, "container_cpu_usage_seconds_total", &burn).is_some(),
        "{body}"
    );
    // The other two parse as OpenMetrics too (histograms, counters, every label set).
    for (path, name) in [
        (
            "/metrics",
            "kubelet_runtime_operations_duration_seconds_bucket",
        ),
        ("/metrics/cadvisor", "container_network_receive_bytes_total"),
    ] {
        let (status, kind, body) = kubelet_get(
            &kubelet_port,
            path,
            &cert,
            &key,
            "application/openmetrics-text",
        );
        assert_eq!(
            (status, kind.as_str()),
            (200, OPENMETRICS),
            "{path}: {body}"
        );
        let samples = parse_metrics(&body, "openmetrics");
        assert!(find(&samples, name, &[]).is_some(), "no {name} in\n{body}");
    }

    // Refusals: RBAC for a user without nodes/proxy, the kubelet's own for the node's
    // identity.
    let denied = kubectl_any(
        "default",
        kc,
        &[
            "--as=alice",
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
        ],
    );
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains("Forbidden") || stderr.contains("forbidden"),
        "{stderr}"
    );
    let node_pem = data_dir.join("agent/pki/kubelet-client-current.pem");
    let (status, _, body) =
        kubelet_get(&kubelet_port, "/stats/summary", &node_pem, &node_pem, "*/*");
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        format!(
            "Forbidden (user=system:node:{NODE}, verb=get, resource=nodes, subresource(s)=[stats])\n"
        )
    );

    // The built-in Metrics API reads /metrics/resource: `kubectl top` shows the burn.
    let top = wait_for("kubectl top pod burn", Duration::from_secs(60), || {
        let out = kubectl_any("default", kc, &["top", "pod", "burn", "--no-headers"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let millicores: u64 = text
            .split_whitespace()
            .nth(1)?
            .strip_suffix('m')?
            .parse()
            .ok()?;
        (millicores > 0).then_some(millicores)
    });
    assert!(
        top <= 300,
        "kubectl top shows {top}m for a pod limited to 200m"
    );

    // The pod goes before the server.
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "burn", "--wait=true", "--timeout=60s"],
    );
    server.stop();
}
