//! End to end: the built-in Metrics API (`metrics.k8s.io/v1beta1`) with stock kubectl. On a real
//! node (containerd, busybox), `kubectl top nodes` and `kubectl top pods --containers` show
//! figures scraped from the kubelet's `/metrics/resource`, a pod burning CPU shows a core's
//! worth and its figures move between scrapes, Tables print as metrics-server prints them, and
//! RBAC's `view` (through metrics-server's aggregated reader role) reads pod metrics but not
//! node metrics, and a HorizontalPodAutoscaler at 50 % scales a burning Deployment out from
//! the same figures. Without a node: `--disable-metrics-server` removes the group and its
//! APIService, so that a real metrics-server can be registered.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::node::{IMAGE, NodeDir, node_flags, wait_for, wait_ready};
use common::{Server, free_port, kubectl_any, kubectl_ok, kubectl_stdin};

/// This test's node network: its own bridge and range.
const BRIDGE: &str = "capmtr0";
const CLUSTER_CIDR: &str = "10.212.0.0/16";

/// Millicores from a `kubectl top` CPU cell (`250m`, `1`).
fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cell.parse::<u64>().unwrap() * 1000,
    }
}

/// The rows of `kubectl top ... --no-headers`, split into cells.
fn top(kc: &Path, args: &[&str]) -> Option<Vec<Vec<String>>> {
    let mut all = vec!["top"];
    all.extend_from_slice(args);
    all.push("--no-headers");
    let out = kubectl_any("default", kc, &all);
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    })
}

#[test]
fn kubectl_top_shows_what_the_node_measures() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let mut flags = node_flags("metrics-node", BRIDGE, CLUSTER_CIDR);
    flags.extend(["--metric-resolution".to_owned(), "10s".to_owned()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, free_port(), &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, "metrics-node");

    kubectl_ok("default", kc, &["create", "namespace", "top"]);
    let pods = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: burner, namespace: top, labels: {{load: busy}}}}
spec:
  containers:
  - name: spin
    image: {IMAGE}
    command: ["sh", "-c", "while :; do :; done"]
  - name: rest
    image: {IMAGE}
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Pod
metadata: {{name: idle, namespace: top, labels: {{load: none}}}}
spec:
  containers:
  - name: rest
    image: {IMAGE}
    command: ["sleep", "3600"]
"#
    );
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &pods);
    assert!(created.status.success(), "{created:?}");
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "-n",
            "top",
            "--for=condition=Ready",
            "pod/burner",
            "pod/idle",
            "--timeout=90s",
        ],
    );

    // The node's figures: its name, CPU and memory used and their share of its capacity.
    let nodes = wait_for("node metrics", Duration::from_secs(60), || {
        top(kc, &["nodes"]).filter(|rows| !rows.is_empty())
    });
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0][0], "metrics-node");
    assert!(millicores(&nodes[0][1]) > 0, "{nodes:?}");
    assert!(
        nodes[0][2].ends_with('%') && nodes[0][3].ends_with("Mi"),
        "{nodes:?}"
    );

    // The burner uses most of a core; the idle pod next to nothing.
    let rows = wait_for("the burner's metrics", Duration::from_secs(60), || {
        top(kc, &["pods", "-n", "top"]).filter(|rows| {
            rows.iter()
                .any(|r| r[0] == "burner" && millicores(&r[1]) >= 300)
        })
    });
    let idle = rows.iter().find(|r| r[0] == "idle").expect("the idle pod");
    assert!(millicores(&idle[1]) < 100, "{rows:?}");

    // Per container: the spinning one holds the CPU; the pod's figure is their sum.
    let containers = top(kc, &["pods", "burner", "-n", "top", "--containers"]).unwrap();
    let spin = containers.iter().find(|r| r[1] == "spin").unwrap();
    let rest = containers.iter().find(|r| r[1] == "rest").unwrap();
    assert!(
        millicores(&spin[2]) >= 300 && millicores(&rest[2]) < 100,
        "{containers:?}"
    );

    // A label selector picks pods; the API answers as metrics-server does.
    let selected = top(kc, &["pods", "-n", "top", "-l", "load=none"]).unwrap();
    assert_eq!(selected.len(), 1, "{selected:?}");
    assert_eq!(selected[0][0], "idle");
    let raw = kubectl_ok(
        "default",
        kc,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/top/pods/burner",
        ],
    );
    let first: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(first["kind"], "PodMetrics");
    assert_eq!(first["metadata"]["labels"]["load"], "busy");
    assert!(raw.starts_with(r#"{"kind":"PodMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"burner","namespace":"top","#), "{raw}");
    // The figures move: the next scrape gives a later timestamp and more CPU time behind it.
    let later = wait_for("a later scrape", Duration::from_secs(40), || {
        let raw = kubectl_ok(
            "default",
            kc,
            &[
                "get",
                "--raw",
                "/apis/metrics.k8s.io/v1beta1/namespaces/top/pods/burner",
            ],
        );
        let now: serde_json::Value = serde_json::from_str(&raw).unwrap();
        (now["timestamp"] != first["timestamp"]).then_some(now)
    });
    assert_ne!(later["containers"], first["containers"]);

    // Tables as metrics-server prints them.
    let table = kubectl_ok("default", kc, &["get", "podmetrics", "-n", "top"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CPU", "MEMORY", "WINDOW"], "{table}");
    assert!(
        table.contains("burner") && table.contains("idle"),
        "{table}"
    );
    let missing = kubectl_any("default", kc, &["top", "pod", "nothing", "-n", "top"]);
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains(r#"pods "nothing" not found"#),
        "{missing:?}"
    );

    // `view` in a namespace reads its pods' metrics, not the nodes'.
    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "rolebinding",
            "jane-view",
            "-n",
            "top",
            "--clusterrole=view",
            "--user=jane",
        ],
    );
    let as_jane = top(kc, &["pods", "-n", "top", "--as=jane"]).expect("jane reads pod metrics");
    assert_eq!(as_jane.len(), 2, "{as_jane:?}");
    let refused = kubectl_any("default", kc, &["top", "nodes", "--as=jane"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forbidden"),
        "{refused:?}"
    );

    // An autoscaler reads the same API: a Deployment whose pod burns a core against a request
    // of 100m is scaled out at 50 %. The other burner goes first, to leave it the CPU.
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "burner", "-n", "top", "--wait=false"],
    );
    let spin = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: spin, namespace: top}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: spin}}}}
  template:
    metadata: {{labels: {{app: spin}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: spin
        image: {IMAGE}
        command: ["sh", "-c", "while :; do :; done"]
        resources: {{requests: {{cpu: 100m}}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: spin, namespace: top}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: spin}}
  minReplicas: 1
  maxReplicas: 2
  metrics:
  - type: Resource
    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}
"#
    );
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &spin);
    assert!(created.status.success(), "{created:?}");
    wait_for(
        "the autoscaler to scale out",
        Duration::from_secs(120),
        || {
            let replicas = kubectl_ok(
                "default",
                kc,
                &[
                    "get",
                    "deployment",
                    "spin",
                    "-n",
                    "top",
                    "-o",
                    "jsonpath={.spec.replicas}",
                ],
            );
            (replicas.trim() == "2").then_some(())
        },
    );
    let events = kubectl_ok(
        "default",
        kc,
        &[
            "get",
            "events",
            "-n",
            "top",
            "--field-selector",
            "reason=SuccessfulRescale",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(
        events.contains(
            "New size: 2; reason: cpu resource utilization (percentage of request) above target"
        ),
        "{events}"
    );

    kubectl_ok(
        "default",
        kc,
        &["delete", "namespace", "top", "--wait=true", "--timeout=90s"],
    );
    server.stop();
}

#[test]
fn the_group_can_be_left_to_an_extension_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path();
    let port = free_port();
    let server = Server::start(data_dir, port);
    let kc = server.kubeconfig();
    let service = kubectl_ok(
        "default",
        &kc,
        &["get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json"],
    );
    let service: serde_json::Value = serde_json::from_str(&service).unwrap();
    assert_eq!(service["spec"]["groupPriorityMinimum"], 100);
    assert!(service["spec"]["service"].is_null());
    let resources = kubectl_ok(
        "default",
        &kc,
        &["api-resources", "--api-group=metrics.k8s.io"],
    );
    assert!(
        resources.contains("NodeMetrics") && resources.contains("PodMetrics"),
        "{resources}"
    );
    // No node scraped yet: kubectl says so.
    let top = kubectl_any("default", &kc, &["top", "nodes"]);
    assert!(
        String::from_utf8_lossy(&top.stderr).contains("metrics not available yet"),
        "{top:?}"
    );
    // Only get and list.
    let watch = kubectl_any(
        "default",
        &kc,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods?watch=1"],
    );
    assert!(
        String::from_utf8_lossy(&watch.stderr).contains("(MethodNotAllowed)"),
        "{watch:?}"
    );
    server.stop();

    let server = Server::start_with(data_dir, port, &["--disable-metrics-server"]);
    let kc = server.kubeconfig();
    let gone = kubectl_any(
        "default",
        &kc,
        &["get", "apiservice", "v1beta1.metrics.k8s.io"],
    );
    assert!(!gone.status.success(), "{gone:?}");
    let groups = kubectl_ok("default", &kc, &["api-versions"]);
    assert!(!groups.contains("metrics.k8s.io"), "{groups}");
    let top = kubectl_any("default", &kc, &["top", "nodes"]);
    assert!(
        String::from_utf8_lossy(&top.stderr).contains("Metrics API not available"),
        "{top:?}"
    );
    server.stop();
}

/// The families Prometheus' own Python client finds in `text` (OpenMetrics when
/// `openmetrics`).
fn parse_with_prometheus(text: &str, openmetrics: bool) -> Vec<String> {
    let format = if openmetrics { "openmetrics" } else { "text" };
    let mut families: Vec<String> = common::prometheus::parse_metrics(text, format)
        .into_iter()
        .map(|sample| sample.family)
        .collect();
    families.dedup();
    families
}

#[test]
fn the_api_server_metrics_parse_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    kubectl_ok(
        "default",
        &kc,
        &["create", "deployment", "web", "--image=busybox"],
    );
    let tls = dir.path().join("tls");
    let scrape = |accept: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-D", "-", "--cacert"])
            .arg(tls.join("ca.crt"))
            .arg("--cert")
            .arg(tls.join("admin.crt"))
            .arg("--key")
            .arg(tls.join("admin.key"))
            .args(["-H", &format!("Accept: {accept}")])
            .arg(server.url("/metrics"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.to_ascii_lowercase(), body.to_owned())
    };
    // Once the deployment controller has seen the Deployment and the scheduler its pod.
    let (head, text) = wait_for("the components' metrics", Duration::from_secs(30), || {
        let (head, text) = scrape("*/*");
        (text.contains(r#"workqueue_adds_total{name="deployment"}"#)
            && text.contains(r#"apiserver_storage_objects{resource="deployments.apps"} 1"#)
            && text.contains("scheduler_schedule_attempts_total{")
            && text.contains("scheduler_pending_pods{"))
        .then_some((head, text))
    });
    assert!(
        head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let families = parse_with_prometheus(&text, false);
    for family in [
        "apiserver_request",
        "apiserver_request_duration_seconds",
        "apiserver_storage_objects",
        "scheduler_schedule_attempts",
        "scheduler_pending_pods",
        "scheduler_scheduling_attempt_duration_seconds",
        "workqueue_adds",
        "workqueue_depth",
        "workqueue_work_duration_seconds",
    ] {
        assert!(
            families.iter().any(|f| f == family),
            "{family} in {families:?}"
        );
    }
    assert!(
        text.contains("# HELP workqueue_depth [ALPHA] Current depth of workqueue\n"),
        "{text}"
    );
    let (head, text) = scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    let families = parse_with_prometheus(&text, true);
    assert!(
        families.iter().any(|f| f == "workqueue_adds"),
        "{families:?}"
    );
    server.stop();
}
