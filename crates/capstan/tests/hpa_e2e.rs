//! End to end: the HorizontalPodAutoscaler controller inside `capstan server`, with a simulated
//! node (`capstan sim`) running the pods and a test metrics server registered through API
//! aggregation as `v1beta1.metrics.k8s.io` (PodMetrics for the Deployment's pods, a total CPU
//! load shared among them). Without the Metrics API the autoscaler reports upstream's
//! `FailedGetResourceMetric`; with it, a Deployment at 50% CPU scales out under load and back
//! in once the load drops and the scale-down stabilization window has passed, with upstream's
//! status, conditions and events (read through `autoscaling/v2` and `autoscaling/v1`), counted
//! in the controller's own metrics; a custom resource with a scale subresource is scaled too.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::{Server, Sim, eventually, free_port, kubectl_any, kubectl_ok, kubectl_stdin_ok};
use serde_json::{Value, json};

const KUBECTL: &str = "default";

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok(KUBECTL, kc, &["apply", "-f", "-"], manifest);
}

fn get_json(kc: &Path, args: &[&str]) -> Value {
    let out = kubectl_any(KUBECTL, kc, args);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// What the test metrics server knows: the running pods of the Deployment and the total CPU
/// they use, shared evenly (millicores).
#[derive(Default)]
struct Load {
    pods: Mutex<Vec<String>>,
    total_millis: AtomicI64,
}

/// The metrics server's answer to `request`.
fn answer(path: &str, load: &Load) -> (u16, Value) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["apis", "metrics.k8s.io", "v1beta1"] => (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
                   "resources": [
                       {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                       {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}]}),
        ),
        [
            "apis",
            "metrics.k8s.io",
            "v1beta1",
            "namespaces",
            namespace,
            "pods",
        ] => {
            let pods = load.pods.lock().unwrap().clone();
            let each = load.total_millis.load(Ordering::SeqCst) / (pods.len().max(1) as i64);
            let now = k8s_openapi::jiff::Timestamp::now();
            let stamp = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap();
            let items: Vec<Value> = pods
                .iter()
                .map(|name| {
                    json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
                           "timestamp": stamp.to_string(), "window": "1s",
                           "containers": [{"name": "app", "usage": {"cpu": format!("{each}m"), "memory": "10Mi"}}]})
                })
                .collect();
            (
                200,
                json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
                       "metadata": {}, "items": items}),
            )
        }
        _ => (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "not found", "reason": "NotFound", "code": 404}),
        ),
    }
}

/// The HPA as `autoscaling/v2` shows it.
fn hpa(kc: &Path) -> Value {
    get_json(
        kc,
        &[
            "get",
            "horizontalpodautoscalers.v2.autoscaling",
            "web",
            "-o",
            "json",
        ],
    )
}

fn condition(hpa: &Value, type_: &str) -> (String, String, String) {
    hpa["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .unwrap_or_default()
}

/// The messages of the events of HPA `web` with `reason`.
fn events(kc: &Path, reason: &str) -> Vec<String> {
    events_of(kc, "web", reason)
}

/// The messages of the events of HPA `name` with `reason`.
fn events_of(kc: &Path, name: &str, reason: &str) -> Vec<String> {
    let list = get_json(
        kc,
        &[
            "get",
            "events",
            "--field-selector",
            &format!(
                "involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name={name},reason={reason}"
            ),
            "-o",
            "json",
        ],
    );
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            assert_eq!(e["source"]["component"], "horizontal-pod-autoscaler");
            e["message"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

fn deployment_replicas(kc: &Path) -> i64 {
    get_json(kc, &["get", "deployment", "web", "-o", "json"])["spec"]["replicas"]
        .as_i64()
        .unwrap_or(-1)
}

#[test]
fn a_deployment_scales_out_under_load_and_back_in_after_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        free_port(),
        &[
            // The Metrics API comes from the test's server, registered through aggregation.
            "--disable-metrics-server",
            "--horizontal-pod-autoscaler-sync-period=1s",
            "--horizontal-pod-autoscaler-downscale-stabilization=5s",
        ],
    );
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "1", "--lease-interval", "2s"]);
    eventually("a node", || {
        (kubectl_ok(KUBECTL, &kc, &["get", "nodes", "-o", "name"])
            .lines()
            .count()
            == 1)
            .then_some(())
    });

    apply(
        &kc,
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: busybox
        resources: {requests: {cpu: 200m}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 5}
"#,
    );

    // No Metrics API yet: upstream's condition and events, and the Deployment left alone.
    let inactive = eventually("the autoscaler to report the missing metric", || {
        let hpa = hpa(&kc);
        let active = condition(&hpa, "ScalingActive");
        (active.1 == "FailedGetResourceMetric").then_some((hpa, active))
    });
    let (hpa_now, active) = inactive;
    assert_eq!(active.0, "False");
    assert!(
        active.2.starts_with("the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: "),
        "{active:?}"
    );
    assert_eq!(
        condition(&hpa_now, "AbleToScale"),
        (
            "True".into(),
            "SucceededGetScale".into(),
            "the HPA controller was able to get the target's current scale".into()
        )
    );
    assert_eq!(hpa_now["status"]["currentReplicas"], 2);
    eventually(
        "FailedGetResourceMetric and FailedComputeMetricsReplicas events",
        || {
            let failed = events(&kc, "FailedGetResourceMetric");
            let compute = events(&kc, "FailedComputeMetricsReplicas");
            (!failed.is_empty() && !compute.is_empty()).then_some(())
        },
    );
    assert!(
        events(&kc, "FailedComputeMetricsReplicas")[0]
            .starts_with("invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: failed to get cpu utilization: ")
    );
    assert_eq!(deployment_replicas(&kc), 2);

    // Any kind with a scale subresource is a target, custom resources too: one above the
    // maximum is brought down to it through its scale subresource.
    apply(
        &kc,
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.count, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#,
    );
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/widgets.example.com",
        ],
    );
    apply(
        &kc,
        r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 8}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: widget, namespace: default}
spec:
  scaleTargetRef: {apiVersion: example.com/v1, kind: Widget, name: w}
  minReplicas: 1
  maxReplicas: 3
"#,
    );
    eventually("the Widget to be scaled down to the maximum", || {
        let widget = get_json(&kc, &["get", "widgets.example.com", "w", "-o", "json"]);
        (widget["spec"]["size"] == 3).then_some(())
    });
    let rescaled = eventually("the Widget's SuccessfulRescale event", || {
        Some(events_of(&kc, "widget", "SuccessfulRescale")).filter(|e| !e.is_empty())
    });
    assert_eq!(
        rescaled,
        ["New size: 3; reason: Current number of replicas above Spec.MaxReplicas"]
    );

    // A kind that is not served: upstream's FailedGetScale.
    apply(
        &kc,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: nothing, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Nothing, name: x}\n  maxReplicas: 3\n",
    );
    let unable = eventually("FailedGetScale for a kind not served", || {
        let hpa = get_json(
            &kc,
            &[
                "get",
                "horizontalpodautoscalers.v2.autoscaling",
                "nothing",
                "-o",
                "json",
            ],
        );
        Some(condition(&hpa, "AbleToScale")).filter(|c| !c.0.is_empty())
    });
    assert_eq!(
        unable,
        (
            "False".into(),
            "FailedGetScale".into(),
            "the HPA controller was unable to get the target's current scale: no matches for kind \"Nothing\" in group \"apps\"".into()
        )
    );

    // The test metrics server, registered through API aggregation.
    let load = Arc::new(Load::default());
    load.total_millis.store(400, Ordering::SeqCst);
    let served = load.clone();
    let https = common::https::serve(&["metrics.default.svc"], None, move |request| {
        let (code, body) = answer(request.uri().path(), &served);
        async move {
            hyper::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(
                    serde_json::to_vec(&body).unwrap().into(),
                ))
                .unwrap()
        }
    });
    // Which pods are running, as a metrics server would know from the nodes.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (kc, load, stop) = (kc.clone(), load.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let pods = get_json(&kc, &["get", "pods", "-l", "app=web", "-o", "json"]);
                let running: Vec<String> = pods["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| {
                        p["status"]["phase"] == "Running"
                            && p["metadata"]["deletionTimestamp"].is_null()
                    })
                    .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                    .collect();
                *load.pods.lock().unwrap() = running;
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    apply(
        &kc,
        "apiVersion: v1\nkind: Service\nmetadata: {name: metrics, namespace: default}\nspec: {type: ExternalName, externalName: localhost}\n",
    );
    let bundle = base64::engine::general_purpose::STANDARD.encode(&https.ca_pem);
    apply(
        &kc,
        &format!(
            "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1beta1.metrics.k8s.io}}\nspec:\n  group: metrics.k8s.io\n  version: v1beta1\n  service: {{namespace: default, name: metrics, port: {}}}\n  caBundle: {bundle}\n  groupPriorityMinimum: 100\n  versionPriority: 100\n",
            https.port
        ),
    );
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "wait",
            "--for=condition=Available",
            "--timeout=60s",
            "apiservice/v1beta1.metrics.k8s.io",
        ],
    );

    // 400m over two pods requesting 200m: 100% of a 50% target, so four pods (then 50% each).
    let scaled = eventually("the Deployment to be scaled out to 4", || {
        (deployment_replicas(&kc) == 4).then(|| hpa(&kc))
    });
    assert_eq!(scaled["status"]["desiredReplicas"], 4);
    assert!(scaled["status"]["lastScaleTime"].is_string(), "{scaled}");
    let rescaled = eventually("the scale-out's SuccessfulRescale event", || {
        Some(events(&kc, "SuccessfulRescale")).filter(|e| !e.is_empty())
    });
    assert_eq!(
        rescaled,
        ["New size: 4; reason: cpu resource utilization (percentage of request) above target"]
    );
    let settled = eventually("the autoscaler to see the four pods at 50%", || {
        let hpa = hpa(&kc);
        (hpa["status"]["currentReplicas"] == 4
            && hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"]
                == 50)
            .then_some(hpa)
    });
    assert_eq!(
        settled["status"]["currentMetrics"][0],
        json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 50, "averageValue": "100m"}}})
    );
    assert_eq!(
        condition(&settled, "ScalingActive"),
        (
            "True".into(),
            "ValidMetricFound".into(),
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)".into()
        )
    );
    assert_eq!(
        condition(&settled, "ScalingLimited").1,
        "DesiredWithinRange"
    );
    // autoscaling/v1 reads the same through conversion.
    let v1 = get_json(
        &kc,
        &[
            "get",
            "horizontalpodautoscalers.v1.autoscaling",
            "web",
            "-o",
            "json",
        ],
    );
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50, "{v1}");
    assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 50);
    assert_eq!(v1["status"]["currentReplicas"], 4);
    assert_eq!(deployment_replicas(&kc), 4);

    // The load drops to 5%: after the 5 s window, one replica.
    load.total_millis.store(40, Ordering::SeqCst);
    let stabilized = eventually("the scale-down to be held by the window", || {
        let hpa = hpa(&kc);
        (condition(&hpa, "AbleToScale").1 == "ScaleDownStabilized").then_some(hpa)
    });
    assert_eq!(
        condition(&stabilized, "AbleToScale").2,
        "recent recommendations were higher than current one, applying the highest recent recommendation"
    );
    eventually("the Deployment to be scaled back in to 1", || {
        (deployment_replicas(&kc) == 1).then_some(())
    });
    let mut rescales = eventually("the scale-in's SuccessfulRescale event", || {
        Some(events(&kc, "SuccessfulRescale")).filter(|e| e.len() == 2)
    });
    rescales.sort();
    assert_eq!(
        rescales,
        [
            "New size: 1; reason: All metrics below target",
            "New size: 4; reason: cpu resource utilization (percentage of request) above target",
        ]
    );
    let done = hpa(&kc);
    assert_eq!(done["status"]["desiredReplicas"], 1);

    // The controller's own metrics (upstream's names and labels) count what it did: scaling
    // out and in, metrics computed by type, and the failures of the autoscaler of a kind not
    // served.
    let metrics = kubectl_ok(KUBECTL, &kc, &["get", "--raw", "/metrics"]);
    let count = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    for labels in [
        r#"{action="scale_up",error="none"} "#,
        r#"{action="scale_down",error="none"} "#,
        r#"{action="none",error="internal"} "#,
    ] {
        let name = format!("horizontal_pod_autoscaler_controller_reconciliations_total{labels}");
        assert!(count(&name) >= 1.0, "no {name} in:\n{metrics}");
    }
    assert!(
        count(
            r#"horizontal_pod_autoscaler_controller_metric_computation_total{action="scale_up",error="none",metric_type="Resource"} "#
        ) >= 1.0,
        "{metrics}"
    );

    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    drop(https);
    server.stop();
}
