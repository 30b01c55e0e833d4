//! The autoscaler against a fake of the API: the replica calculator's situations (ready,
//! unready, pending, missing, deleted and failed pods; CPU initialization; tolerance; requests),
//! normalization with and without a behavior, and whole syncs with their conditions, events and
//! status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use capstan_client::events::EventType;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, HorizontalPodAutoscalerBehavior};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::behavior::{Bounds, History};
use super::calculator::{Calculator, pod_requests};
use super::metrics::{self, CustomValue, ExternalValue, PodMetric, PodMetricsInfo, RawPodMetrics};
use super::sync::{Access, Autoscaler, Outcome, Settings, Target, go_selector};

/// The tests' "now".
fn now() -> Timestamp {
    "2026-03-01T12:00:00Z"
        .parse()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn at(seconds_from_now: i64) -> Timestamp {
    now()
        .checked_add(SignedDuration::from_secs(seconds_from_now))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn rfc(t: Timestamp) -> String {
    t.to_string()
}

/// How a test pod stands.
struct PodSpec {
    name: &'static str,
    phase: &'static str,
    ready: Option<bool>,
    /// Seconds before now the pod started.
    started: i64,
    /// Seconds before now its readiness last changed.
    transition: i64,
    deleting: bool,
    /// CPU requests of its containers (millicores as text), `None` for a container without.
    requests: Vec<Option<&'static str>>,
}

fn running(name: &'static str) -> PodSpec {
    PodSpec {
        name,
        phase: "Running",
        ready: Some(true),
        started: 600,
        transition: 590,
        deleting: false,
        requests: vec![Some("1")],
    }
}

fn pod(spec: &PodSpec) -> Pod {
    let containers: Vec<Value> = spec
        .requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let name = if i == 0 {
                "app".to_owned()
            } else {
                format!("c{i}")
            };
            match r {
                Some(cpu) => {
                    json!({"name": name, "image": "x", "resources": {"requests": {"cpu": cpu}}})
                }
                None => json!({"name": name, "image": "x"}),
            }
        })
        .collect();
    let mut status = json!({"phase": spec.phase, "startTime": rfc(at(-spec.started))});
    if let Some(ready) = spec.ready {
        status["conditions"] = json!([{"type": "Ready", "status": if ready { "True" } else { "False" },
                                       "lastTransitionTime": rfc(at(-spec.transition))}]);
    }
    let mut object = json!({
        "metadata": {"name": spec.name, "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"containers": containers},
        "status": status,
    });
    if spec.deleting {
        object["metadata"]["deletionTimestamp"] = json!(rfc(at(-1)));
    }
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
}

fn samples(values: &[(&str, i64)]) -> PodMetricsInfo {
    values
        .iter()
        .map(|(name, value)| {
            (
                (*name).to_owned(),
                PodMetric {
                    timestamp: at(-10),
                    window: SignedDuration::from_secs(30),
                    value: *value,
                },
            )
        })
        .collect()
}

fn calculator() -> Calculator {
    Calculator {
        tolerance: 0.1,
        cpu_initialization_period: SignedDuration::from_secs(300),
        initial_readiness_delay: SignedDuration::from_secs(30),
    }
}

fn cpu(
    current: i32,
    target: i32,
    specs: &[PodSpec],
    values: &[(&str, i64)],
) -> Result<(i32, i32, i64), String> {
    let pods: Vec<Pod> = specs.iter().map(pod).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    calculator().resource_replicas(current, target, "cpu", "", samples(values), &refs, now())
}

#[test]
fn busy_ready_pods_scale_up_in_proportion() {
    let pods = [running("a"), running("b"), running("c")];
    // 1500m used of 3000m requested: 50% against a 30% target.
    assert_eq!(
        cpu(3, 30, &pods, &[("a", 300), ("b", 500), ("c", 700)]),
        Ok((5, 50, 500))
    );
}

#[test]
fn a_change_within_the_tolerance_keeps_the_count() {
    let pods = [running("a"), running("b"), running("c")];
    assert_eq!(
        cpu(3, 50, &pods, &[("a", 540), ("b", 540), ("c", 540)]),
        Ok((3, 54, 540))
    );
}

#[test]
fn unready_pods_count_as_idle_on_a_scale_up() {
    // `a` has never been ready (its readiness changed right after it started).
    let mut a = running("a");
    a.ready = Some(false);
    let pods = [a, running("b"), running("c")];
    // The ready pods: 60% of 30%; with `a` counted at zero, 40% over three pods.
    assert_eq!(
        cpu(3, 30, &pods, &[("a", 300), ("b", 500), ("c", 700)]),
        Ok((4, 60, 600))
    );
}

#[test]
fn a_pod_that_went_unready_later_still_counts() {
    let mut a = running("a");
    a.ready = Some(false);
    a.transition = 100;
    let pods = [a, running("b"), running("c")];
    assert_eq!(
        cpu(3, 50, &pods, &[("a", 1000), ("b", 1000), ("c", 1000)]),
        Ok((6, 100, 1000))
    );
}

#[test]
fn pending_pods_count_as_idle_on_a_scale_up() {
    let mut a = running("a");
    a.phase = "Pending";
    a.ready = None;
    let pods = [a, running("b"), running("c")];
    // 100% of 50% over the two running pods; with the pending one at zero, 66%.
    assert_eq!(
        cpu(3, 50, &pods, &[("b", 1000), ("c", 1000)]),
        Ok((4, 100, 1000))
    );
}

#[test]
fn deleted_and_failed_pods_are_ignored() {
    let mut a = running("a");
    a.deleting = true;
    let mut b = running("b");
    b.phase = "Failed";
    let pods = [a, b, running("c")];
    assert_eq!(
        cpu(3, 50, &pods, &[("a", 900), ("b", 900), ("c", 1000)]),
        Ok((2, 100, 1000))
    );
}

#[test]
fn samples_taken_while_a_pod_initializes_are_not_trusted() {
    // `a` started a minute ago.
    for (transition, ready, replicas) in [
        // Ready for 20 s: its sample (10 s old, over 30 s) predates a full window of readiness.
        (20, true, 4),
        // Ready for 50 s: the sample covers readiness only, and counts.
        (50, true, 6),
        // Not ready while initializing: not trusted.
        (50, false, 4),
    ] {
        let mut a = running("a");
        a.started = 60;
        a.transition = transition;
        a.ready = Some(ready);
        let pods = [a, running("b"), running("c")];
        assert_eq!(
            cpu(3, 50, &pods, &[("a", 1000), ("b", 1000), ("c", 1000)]),
            Ok((replicas, 100, 1000))
        );
    }
}

#[test]
fn missing_pods_count_as_fully_used_on_a_scale_down() {
    let pods = [running("a"), running("b"), running("c"), running("d")];
    // 10% of 50%: `d` counted at its request gives 32%, so three pods.
    assert_eq!(
        cpu(4, 50, &pods, &[("a", 100), ("b", 100), ("c", 100)]),
        Ok((3, 10, 100))
    );
    // With a target above 100%, a missing pod counts at the target.
    assert_eq!(
        cpu(4, 150, &pods, &[("a", 100), ("b", 100), ("c", 100)]),
        Ok((2, 10, 100))
    );
}

#[test]
fn missing_pods_count_as_idle_on_a_scale_up_and_may_cancel_it() {
    let pods = [running("a"), running("b"), running("c"), running("d")];
    // 60% of 50% among three; with `d` at zero 45%: the direction would reverse, so no change.
    assert_eq!(
        cpu(4, 50, &pods, &[("a", 600), ("b", 600), ("c", 600)]),
        Ok((4, 60, 600))
    );
    // 100% of 50%: with `d` at zero 75%, six pods.
    assert_eq!(
        cpu(4, 50, &pods, &[("a", 1000), ("b", 1000), ("c", 1000)]),
        Ok((6, 100, 1000))
    );
}

#[test]
fn nothing_to_go_on_is_an_error() {
    assert_eq!(
        cpu(3, 50, &[], &[("a", 1)]),
        Err("no pods returned by selector while calculating replica count".into())
    );
    let mut a = running("a");
    a.phase = "Pending";
    assert_eq!(
        cpu(3, 50, &[a], &[("a", 1000)]),
        Err("did not receive metrics for targeted pods (pods might be unready)".into())
    );
    let mut a = running("a");
    a.requests = vec![Some("1"), None];
    assert_eq!(
        cpu(3, 50, &[a], &[("a", 1000)]),
        Err("missing request for cpu in container c1 of Pod a".into())
    );
}

#[test]
fn requests_sum_containers_and_sidecars_or_take_one_container() {
    let mut object = serde_json::to_value(pod(&running("a"))).unwrap_or_default();
    object["spec"]["containers"] = json!([
        {"name": "app", "image": "x", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "log", "image": "x", "resources": {"requests": {"cpu": "250m"}}},
    ]);
    object["spec"]["initContainers"] = json!([
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "setup", "image": "x"},
    ]);
    let p: Pod = serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"));
    let pods = [&p];
    assert_eq!(
        pod_requests(&pods, "", "cpu"),
        Ok(BTreeMap::from([("a".to_owned(), 850)]))
    );
    assert_eq!(
        pod_requests(&pods, "app", "cpu"),
        Ok(BTreeMap::from([("a".to_owned(), 500)]))
    );
    // A container's utilization: 500m of its 500m at a 50% target doubles the pods.
    let got =
        calculator().resource_replicas(1, 50, "cpu", "app", samples(&[("a", 500)]), &pods, now());
    assert_eq!(got, Ok((2, 100, 500)));
}

#[test]
fn average_values_ratios_and_per_pod_totals() {
    let pods: Vec<Pod> = [running("a"), running("b")].iter().map(pod).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let calc = calculator();
    assert_eq!(
        calc.plain_replicas(
            2,
            1000,
            "",
            samples(&[("a", 2000), ("b", 2000)]),
            &refs,
            now()
        ),
        Ok((4, 2000))
    );
    assert_eq!(
        calc.plain_replicas(
            2,
            1000,
            "",
            samples(&[("a", 1050), ("b", 1000)]),
            &refs,
            now()
        ),
        Ok((2, 1025))
    );
    // From zero replicas the ratio alone decides; otherwise the ready pods are scaled.
    assert_eq!(calc.ratio_replicas(0, 2.5, &refs), Ok(3));
    assert_eq!(calc.ratio_replicas(2, 1.05, &refs), Ok(2));
    assert_eq!(calc.ratio_replicas(4, 1.5, &refs), Ok(3));
    assert_eq!(
        calc.ratio_replicas(4, 1.5, &[]),
        Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into())
    );
    assert_eq!(calc.per_pod_replicas(3, 1000, 6000), (6, 2000));
    assert_eq!(calc.per_pod_replicas(3, 1000, 3100), (3, 1034));
}

fn raw(name: &str, containers: &[(&str, &[(&str, &str)])]) -> RawPodMetrics {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, usage)| {
            let usage: serde_json::Map<String, Value> = usage
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            json!({"name": c, "usage": usage})
        })
        .collect();
    RawPodMetrics::from_json(&json!({
        "metadata": {"name": name, "namespace": "ns"},
        "timestamp": rfc(at(-10)), "window": "30s", "containers": containers,
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn pod_metrics_are_summed_per_pod_or_read_per_container() {
    let listed = vec![
        raw(
            "a",
            &[
                ("app", &[("cpu", "250m"), ("memory", "10Mi")]),
                ("log", &[("cpu", "50000000n")]),
            ],
        ),
        raw(
            "b",
            &[("app", &[("cpu", "1")]), ("log", &[("memory", "1Mi")])],
        ),
    ];
    let (all, at_) = metrics::resource_samples(Ok(listed.clone()), "cpu", "").unwrap_or_default();
    assert_eq!(at_, at(-10));
    // `b` lacks a CPU figure for one container: left out.
    assert_eq!(all.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(all["a"].value, 300);
    assert_eq!(all["a"].window, SignedDuration::from_secs(30));
    let (app, _) = metrics::resource_samples(Ok(listed.clone()), "cpu", "app").unwrap_or_default();
    assert_eq!((app["a"].value, app["b"].value), (250, 1000));
    assert_eq!(
        metrics::resource_samples(Ok(listed), "cpu", "proxy").map(|_| ()),
        Err(
            "failed to get container metrics: container proxy not present in metrics for pod ns/a"
                .into()
        )
    );
    assert_eq!(
        metrics::resource_samples(Ok(vec![]), "cpu", "").map(|_| ()),
        Err("no metrics returned from resource metrics API".into())
    );
    assert_eq!(
        metrics::resource_samples(Err("boom".into()), "cpu", "").map(|_| ()),
        Err("unable to fetch metrics from resource metrics API: boom".into())
    );
    assert!(
        RawPodMetrics::from_json(&json!({"metadata": {"name": "x"}, "window": "soon"})).is_err()
    );
}

#[test]
fn label_selectors_print_as_go_does() {
    assert_eq!(go_selector(None), "nil");
    let selector = serde_json::from_value(json!({
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]}],
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        go_selector(Some(&selector)),
        "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],},},}"
    );
}

// Normalization.

#[test]
fn without_a_behavior_scale_downs_are_stabilized_and_scale_ups_limited() {
    let window = SignedDuration::from_secs(300);
    let mut history = History::default();
    history.record_initial(5, at(-20));
    let bounds = Bounds {
        current: 5,
        min: 1,
        max: 10,
    };
    let n = history.normalize(bounds, 2, window, at(-10));
    assert_eq!(
        (n.replicas, n.able.reason, n.limited),
        (5, "ScaleDownStabilized", false)
    );
    assert_eq!(n.limit.reason, "DesiredWithinRange");
    // Once the higher recommendations are older than the window, the scale-down goes through.
    let n = history.normalize(bounds, 2, window, at(400));
    assert_eq!((n.replicas, n.able.reason), (2, "ReadyForNewScale"));

    let mut history = History::default();
    let n = history.normalize(
        Bounds {
            current: 2,
            min: 1,
            max: 20,
        },
        10,
        window,
        now(),
    );
    assert_eq!(
        (n.replicas, n.limited, n.limit.reason),
        (4, true, "ScaleUpLimit")
    );
    assert_eq!(
        n.limit.message,
        "the desired replica count is increasing faster than the maximum scale rate"
    );
    let n = history.normalize(
        Bounds {
            current: 3,
            min: 1,
            max: 5,
        },
        10,
        window,
        now(),
    );
    assert_eq!((n.replicas, n.limit.reason), (5, "TooManyReplicas"));
    let mut history = History::default();
    let n = history.normalize(
        Bounds {
            current: 3,
            min: 2,
            max: 5,
        },
        1,
        window,
        now(),
    );
    assert_eq!(
        (n.replicas, n.limited, n.limit.reason),
        (2, true, "TooFewReplicas")
    );
}

fn behavior(value: Value) -> HorizontalPodAutoscalerBehavior {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn scale_up_policies_pick_the_largest_change_and_count_recent_changes() {
    let b = behavior(json!({
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60},
                                 {"type": "Percent", "value": 100, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}]},
    }));
    let window = SignedDuration::from_secs(300);
    let mut history = History::default();
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        30,
        window,
        now(),
    );
    assert_eq!(
        (n.replicas, n.limited, n.limit.reason),
        (20, true, "ScaleUpLimit")
    );
    history.record_scale(Some(&b), 10, 20, now());
    // Within the period the ten added count against the allowance.
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 20,
            min: 1,
            max: 100,
        },
        50,
        window,
        at(10),
    );
    assert_eq!(n.replicas, 20);
    // After it, the allowance is counted from 20.
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 20,
            min: 1,
            max: 100,
        },
        50,
        window,
        at(61),
    );
    assert_eq!(n.replicas, 40);
    // Scale-down: at most half per minute.
    let mut history = History::default();
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        1,
        window,
        now(),
    );
    assert_eq!((n.replicas, n.limit.reason), (5, "ScaleDownLimit"));
    // The maximum wins over the rate.
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 10,
            min: 1,
            max: 12,
        },
        30,
        window,
        at(100),
    );
    assert_eq!((n.replicas, n.limit.reason), (12, "TooManyReplicas"));
}

#[test]
fn select_policy_min_and_disabled() {
    let window = SignedDuration::from_secs(300);
    let b = behavior(json!({
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60},
                                 {"type": "Percent", "value": 100, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Min",
                      "policies": [{"type": "Pods", "value": 3, "periodSeconds": 60},
                                   {"type": "Percent", "value": 50, "periodSeconds": 60}]},
    }));
    let mut history = History::default();
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        30,
        window,
        now(),
    );
    assert_eq!(n.replicas, 14);
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        1,
        window,
        now(),
    );
    assert_eq!(n.replicas, 7);
    let disabled = behavior(json!({
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled",
                      "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]},
    }));
    let mut history = History::default();
    let n = history.normalize_with_behavior(
        &disabled,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        30,
        window,
        now(),
    );
    assert_eq!((n.replicas, n.limit.reason), (10, "ScaleUpLimit"));
    let n = history.normalize_with_behavior(
        &disabled,
        Bounds {
            current: 10,
            min: 1,
            max: 100,
        },
        2,
        window,
        now(),
    );
    assert_eq!((n.replicas, n.limit.reason), (10, "ScaleDownLimit"));
}

#[test]
fn stabilization_windows_hold_recommendations() {
    let window = SignedDuration::from_secs(300);
    let b = behavior(json!({
        "scaleUp": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 200, "periodSeconds": 15}]},
        // No window of its own: the flag's.
        "scaleDown": {"selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    }));
    let mut history = History::default();
    history.record_initial(3, now());
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 3,
            min: 1,
            max: 10,
        },
        8,
        window,
        at(10),
    );
    assert_eq!((n.replicas, n.able.reason), (3, "ScaleUpStabilized"));
    assert_eq!(
        n.able.message,
        "recent recommendations were lower than current one, applying the lowest recent recommendation"
    );
    // A minute of recommendations of 8 or more: up it goes.
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 3,
            min: 1,
            max: 10,
        },
        8,
        window,
        at(71),
    );
    assert_eq!((n.replicas, n.able.reason), (8, "ReadyForNewScale"));
    // Down again: held at the highest recommendation of the flag's five minutes.
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 8,
            min: 1,
            max: 10,
        },
        2,
        window,
        at(100),
    );
    assert_eq!((n.replicas, n.able.reason), (8, "ScaleDownStabilized"));
    let n = history.normalize_with_behavior(
        &b,
        Bounds {
            current: 8,
            min: 1,
            max: 10,
        },
        2,
        window,
        at(500),
    );
    assert_eq!((n.replicas, n.able.reason), (2, "ReadyForNewScale"));
}

// Whole syncs against a fake API.

/// A fake of what a sync reads and writes.
struct Fake {
    targets: Result<Vec<Target>, String>,
    scale: Result<Scale, String>,
    update_error: Option<String>,
    updates: Mutex<Vec<i32>>,
    pod_metrics: Result<Vec<RawPodMetrics>, String>,
    custom: Result<Vec<CustomValue>, String>,
    external: Result<Vec<ExternalValue>, String>,
    asked: Mutex<Vec<String>>,
}

fn deployments() -> Target {
    Target {
        group: "apps".into(),
        version: "v1".into(),
        plural: "deployments".into(),
    }
}

fn scale(spec: i32, status: i32, selector: &str) -> Scale {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": spec},
        "status": {"replicas": status, "selector": selector},
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

impl Fake {
    fn new(replicas: i32, usage: &[(&str, &str)]) -> Fake {
        Fake {
            targets: Ok(vec![deployments()]),
            scale: Ok(scale(replicas, replicas, "app=web")),
            update_error: None,
            updates: Mutex::new(Vec::new()),
            pod_metrics: Ok(usage
                .iter()
                .map(|(name, cpu)| raw(name, &[("app", &[("cpu", cpu)])]))
                .collect()),
            custom: Ok(Vec::new()),
            external: Ok(Vec::new()),
            asked: Mutex::new(Vec::new()),
        }
    }

    fn updates(&self) -> Vec<i32> {
        self.updates.lock().map(|u| u.clone()).unwrap_or_default()
    }

    fn ask(&self, what: String) {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(what);
        }
    }
}

impl Access for Fake {
    async fn resources(&self, group: &str, kind: &str) -> Result<Vec<Target>, String> {
        self.ask(format!("resources {group} {kind}"));
        self.targets.clone()
    }
    async fn get_scale(
        &self,
        target: &Target,
        namespace: &str,
        name: &str,
    ) -> Result<Scale, String> {
        self.ask(format!(
            "scale {} {namespace}/{name}",
            target.group_resource()
        ));
        self.scale.clone()
    }
    async fn update_scale(&self, _: &Target, _: &str, scale: &Scale) -> Result<(), String> {
        if let Some(e) = &self.update_error {
            return Err(e.clone());
        }
        if let Ok(mut updates) = self.updates.lock() {
            updates.push(scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1));
        }
        Ok(())
    }
    async fn pod_metrics(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<RawPodMetrics>, String> {
        self.ask(format!("podmetrics {namespace} {selector}"));
        self.pod_metrics.clone()
    }
    async fn pods_custom_metric(
        &self,
        namespace: &str,
        metric: &str,
        selector: &str,
        metric_selector: &str,
    ) -> Result<Vec<CustomValue>, String> {
        self.ask(format!(
            "custom pods {namespace} {metric} {selector} {metric_selector}"
        ));
        self.custom.clone()
    }
    async fn object_custom_metric(
        &self,
        namespace: &str,
        resource: Option<&str>,
        name: &str,
        metric: &str,
        _: &str,
    ) -> Result<Vec<CustomValue>, String> {
        self.ask(format!(
            "custom object {namespace} {resource:?} {name} {metric}"
        ));
        self.custom.clone()
    }
    async fn external_metric(
        &self,
        namespace: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<ExternalValue>, String> {
        self.ask(format!("external {namespace} {metric} {metric_selector}"));
        self.external.clone()
    }
}

fn hpa(spec: Value) -> HorizontalPodAutoscaler {
    let mut object = json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 50}}}]},
    });
    if let (Some(base), Some(extra)) = (object["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
}

fn three_pods() -> Vec<Arc<Pod>> {
    ["a", "b", "c"]
        .iter()
        .map(|n| Arc::new(pod(&running(n))))
        .collect()
}

fn autoscaler() -> Autoscaler {
    Autoscaler::new(Settings::default())
}

async fn sync(
    autoscaler: &Autoscaler,
    fake: &Fake,
    hpa: &HorizontalPodAutoscaler,
    when: Timestamp,
) -> Outcome {
    autoscaler.sync(fake, hpa, &three_pods(), when).await
}

/// A condition's (status, reason, message).
fn condition(outcome: &Outcome, type_: &str) -> (String, String, String) {
    outcome
        .status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
        .unwrap_or_default()
}

fn events(outcome: &Outcome) -> Vec<(EventType, &'static str, String)> {
    outcome
        .events
        .iter()
        .map(|e| (e.kind, e.reason, e.message.clone()))
        .collect()
}

fn owned(status: &str, reason: &str, message: &str) -> (String, String, String) {
    (status.into(), reason.into(), message.into())
}

#[tokio::test]
async fn high_usage_scales_out_with_upstreams_status_and_event() {
    let fake = Fake::new(3, &[("a", "900m"), ("b", "900m"), ("c", "900m")]);
    let target = hpa(json!({}));
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(outcome.error, None);
    assert_eq!(fake.updates(), [6]);
    assert_eq!(
        events(&outcome),
        [(
            EventType::Normal,
            "SuccessfulRescale",
            "New size: 6; reason: cpu resource utilization (percentage of request) above target"
                .to_owned()
        )]
    );
    assert_eq!(
        condition(&outcome, "AbleToScale"),
        owned(
            "True",
            "SucceededRescale",
            "the HPA controller was able to update the target scale to 6"
        )
    );
    assert_eq!(
        condition(&outcome, "ScalingActive"),
        owned(
            "True",
            "ValidMetricFound",
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
        )
    );
    assert_eq!(
        condition(&outcome, "ScalingLimited"),
        owned(
            "False",
            "DesiredWithinRange",
            "the desired count is within the acceptable range"
        )
    );
    let status = serde_json::to_value(&outcome.status).unwrap_or_default();
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(status["desiredReplicas"], 6);
    assert_eq!(
        status["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 90, "averageValue": "900m"}}}])
    );
    assert_eq!(status["lastScaleTime"], json!(rfc(now())));
    let asked = fake.asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(
        asked,
        [
            "resources apps Deployment",
            "scale deployments.apps ns/web",
            "podmetrics ns app=web"
        ]
    );
}

#[tokio::test]
async fn usage_at_target_keeps_the_count_and_the_status_stable() {
    let fake = Fake::new(3, &[("a", "500m"), ("b", "520m"), ("c", "480m")]);
    let autoscaler = autoscaler();
    let target = hpa(json!({}));
    let first = sync(&autoscaler, &fake, &target, now()).await;
    assert!(fake.updates().is_empty());
    assert!(first.events.is_empty());
    assert_eq!(
        condition(&first, "AbleToScale"),
        owned(
            "True",
            "ReadyForNewScale",
            "recommended size matches current size"
        )
    );
    assert_eq!(first.status.desired_replicas, 3);
    // Synced again later with the status written, nothing changes (no write needed).
    let mut written = target.clone();
    written.status = Some(first.status.clone());
    let second = sync(&autoscaler, &fake, &written, at(15)).await;
    assert_eq!(
        serde_json::to_value(&second.status).unwrap_or_default(),
        serde_json::to_value(&first.status).unwrap_or_default()
    );
}

#[tokio::test]
async fn low_usage_scales_in_only_after_the_stabilization_window() {
    let autoscaler = autoscaler();
    let target = hpa(json!({}));
    let busy = Fake::new(3, &[("a", "900m"), ("b", "900m"), ("c", "900m")]);
    sync(&autoscaler, &busy, &target, now()).await;
    assert_eq!(busy.updates(), [6]);
    let idle = Fake::new(6, &[("a", "100m"), ("b", "100m"), ("c", "100m")]);
    let held = sync(&autoscaler, &idle, &target, at(60)).await;
    assert!(idle.updates().is_empty());
    assert_eq!(
        condition(&held, "AbleToScale"),
        owned(
            "True",
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation"
        )
    );
    let released = sync(&autoscaler, &idle, &target, at(400)).await;
    // 10% of 50% over three measured pods: one replica.
    assert_eq!(idle.updates(), [1]);
    assert_eq!(
        events(&released),
        [(
            EventType::Normal,
            "SuccessfulRescale",
            "New size: 1; reason: All metrics below target".to_owned()
        )]
    );
}

#[tokio::test]
async fn a_missing_metric_leaves_the_scale_alone_with_upstreams_condition() {
    let mut fake = Fake::new(3, &[]);
    fake.pod_metrics =
        Err("the server could not find the requested resource (get pods.metrics.k8s.io)".into());
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert!(fake.updates().is_empty());
    let inner = "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)";
    assert_eq!(
        events(&outcome),
        [
            (
                EventType::Warning,
                "FailedGetResourceMetric",
                inner.to_owned()
            ),
            (
                EventType::Warning,
                "FailedComputeMetricsReplicas",
                format!(
                    "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {inner}"
                )
            ),
        ]
    );
    assert_eq!(
        condition(&outcome, "ScalingActive"),
        owned(
            "False",
            "FailedGetResourceMetric",
            &format!("the HPA was unable to compute the replica count: {inner}")
        )
    );
    assert_eq!(
        condition(&outcome, "AbleToScale"),
        owned(
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale"
        )
    );
    // Upstream's "<unknown>": an empty entry for the metric that failed.
    let status = serde_json::to_value(&outcome.status).unwrap_or_default();
    assert_eq!(status["currentMetrics"], json!([{"type": ""}]));
    assert_eq!(status["currentReplicas"], 3);
    assert!(outcome.error.is_some());

    // No PodMetrics at all for the pods.
    let fake = Fake::new(3, &[]);
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(
        condition(&outcome, "ScalingActive").2,
        "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"
    );
}

#[tokio::test]
async fn an_unreadable_target_reports_failed_get_scale() {
    let mut fake = Fake::new(3, &[]);
    fake.scale = Err("deployments.apps \"web\" not found".into());
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(
        events(&outcome),
        [(
            EventType::Warning,
            "FailedGetScale",
            "deployments.apps \"web\" not found".to_owned()
        )]
    );
    assert_eq!(
        condition(&outcome, "AbleToScale"),
        owned(
            "False",
            "FailedGetScale",
            "the HPA controller was unable to get the target's current scale: deployments.apps \"web\" not found"
        )
    );
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "failed to query scale subresource for Deployment/ns/web: deployments.apps \"web\" not found"
        )
    );
    let mut fake = Fake::new(3, &[]);
    fake.targets = Err("no matches for kind \"Widget\" in group \"example.com\"".into());
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(condition(&outcome, "AbleToScale").1, "FailedGetScale");
    let bad = hpa(
        json!({"scaleTargetRef": {"apiVersion": "a/b/c", "kind": "Deployment", "name": "web"}}),
    );
    let outcome = sync(&autoscaler(), &Fake::new(3, &[]), &bad, now()).await;
    assert_eq!(
        condition(&outcome, "AbleToScale").2,
        "the HPA controller was unable to get the target's current scale: unexpected GroupVersion string: a/b/c"
    );
}

#[tokio::test]
async fn bounds_zero_replicas_and_failed_rescales() {
    // Scaled to zero by hand: autoscaling is off.
    let fake = Fake::new(0, &[]);
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert!(fake.updates().is_empty());
    assert_eq!(
        condition(&outcome, "ScalingActive"),
        owned(
            "False",
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero"
        )
    );
    assert_eq!(outcome.status.desired_replicas, 0);
    // Above the maximum: brought down to it whatever the metrics say.
    let fake = Fake::new(12, &[]);
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(fake.updates(), [10]);
    assert_eq!(
        events(&outcome),
        [(
            EventType::Normal,
            "SuccessfulRescale",
            "New size: 10; reason: Current number of replicas above Spec.MaxReplicas".to_owned()
        )]
    );
    // Below the minimum.
    let fake = Fake::new(1, &[]);
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({"minReplicas": 2})), now()).await;
    assert_eq!(fake.updates(), [2]);
    assert_eq!(
        events(&outcome)[0].2,
        "New size: 2; reason: Current number of replicas below Spec.MinReplicas"
    );
    // The scale cannot be written.
    let mut fake = Fake::new(3, &[("a", "900m"), ("b", "900m"), ("c", "900m")]);
    fake.update_error = Some("denied".into());
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(
        events(&outcome),
        [(EventType::Warning, "FailedRescale", "New size: 6; reason: cpu resource utilization (percentage of request) above target; error: denied".to_owned())]
    );
    assert_eq!(
        condition(&outcome, "AbleToScale"),
        owned(
            "False",
            "FailedUpdateScale",
            "the HPA controller was unable to update the target scale: denied"
        )
    );
    assert_eq!(outcome.status.last_scale_time, None);
    // Limited by the maximum.
    let fake = Fake::new(3, &[("a", "900m"), ("b", "900m"), ("c", "900m")]);
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({"maxReplicas": 4})), now()).await;
    assert_eq!(fake.updates(), [4]);
    assert_eq!(
        condition(&outcome, "ScalingLimited"),
        owned(
            "True",
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count"
        )
    );
}

#[tokio::test]
async fn selectors_must_be_present_and_unshared() {
    let mut fake = Fake::new(3, &[]);
    fake.scale = Ok(scale(3, 3, ""));
    let outcome = sync(&autoscaler(), &fake, &hpa(json!({})), now()).await;
    assert_eq!(
        events(&outcome)[0],
        (
            EventType::Warning,
            "SelectorRequired",
            "selector is required".to_owned()
        )
    );
    assert_eq!(
        condition(&outcome, "ScalingActive"),
        owned(
            "False",
            "InvalidSelector",
            "the HPA target's scale is missing a selector"
        )
    );
    // Two autoscalers over the same pods.
    let autoscaler = autoscaler();
    let fake = Fake::new(3, &[("a", "500m"), ("b", "500m"), ("c", "500m")]);
    let first = sync(&autoscaler, &fake, &hpa(json!({})), now()).await;
    assert_eq!(condition(&first, "ScalingActive").0, "True");
    let mut other = hpa(json!({}));
    other.metadata.name = Some("web-2".into());
    let second = sync(&autoscaler, &fake, &other, now()).await;
    let message = "pods by selector app=web are controlled by multiple HPAs: [ns/web ns/web-2]";
    assert_eq!(
        events(&second)[0],
        (EventType::Warning, "AmbiguousSelector", message.to_owned())
    );
    assert_eq!(
        condition(&second, "ScalingActive"),
        owned("False", "AmbiguousSelector", message)
    );
    // Once the first is deleted, the second is alone.
    autoscaler.forget("ns", "web");
    let third = sync(&autoscaler, &fake, &other, now()).await;
    assert_eq!(condition(&third, "ScalingActive").1, "ValidMetricFound");
}

#[tokio::test]
async fn the_largest_proposal_wins_and_a_failed_metric_does_not_block_a_scale_up() {
    let mut fake = Fake::new(3, &[("a", "900m"), ("b", "900m"), ("c", "900m")]);
    fake.external = Err("no adapter".into());
    let target = hpa(json!({"metrics": [
        {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}},
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
    ]}));
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(fake.updates(), [6]);
    assert_eq!(
        events(&outcome)[0],
        (
            EventType::Warning,
            "FailedGetExternalMetric",
            "unable to get external metric ns/queue/nil: unable to fetch metrics from external metrics API: no adapter".to_owned()
        )
    );
    assert_eq!(events(&outcome)[1].1, "SuccessfulRescale");
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "invalid metrics (1 invalid out of 2), first error is: failed to get queue external metric value: failed to get external metric queue: unable to get external metric ns/queue/nil: unable to fetch metrics from external metrics API: no adapter"
        )
    );
    // A failed metric while the others would scale down: nothing is done.
    let mut fake = Fake::new(3, &[("a", "100m"), ("b", "100m"), ("c", "100m")]);
    fake.external = Err("no adapter".into());
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert!(fake.updates().is_empty());
    assert_eq!(
        condition(&outcome, "ScalingActive").1,
        "FailedGetExternalMetric"
    );
}

fn custom(object: &str, value: &str) -> CustomValue {
    CustomValue::from_json(&json!({"describedObject": {"kind": "Pod", "name": object},
                                   "timestamp": rfc(at(-5)), "value": value}))
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn pods_object_and_external_metrics() {
    // Pods: an average of 2 against 1 per pod.
    let mut fake = Fake::new(3, &[]);
    fake.custom = Ok(vec![custom("a", "2"), custom("b", "2"), custom("c", "2")]);
    let target = hpa(
        json!({"metrics": [{"type": "Pods", "pods": {"metric": {"name": "rps", "selector": {"matchLabels": {"verb": "GET"}}},
                                                                   "target": {"type": "AverageValue", "averageValue": "1"}}}]}),
    );
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(fake.updates(), [6]);
    assert_eq!(
        events(&outcome)[0].2,
        "New size: 6; reason: pods metric rps above target"
    );
    let status = serde_json::to_value(&outcome.status).unwrap_or_default();
    assert_eq!(
        status["currentMetrics"][0]["pods"]["current"]["averageValue"],
        "2"
    );
    assert!(
        fake.asked
            .lock()
            .map(|a| a.contains(&"custom pods ns rps app=web verb=GET".to_owned()))
            .unwrap_or_default()
    );

    // Object: a value of 40 against 20, three ready pods.
    let mut fake = Fake::new(3, &[]);
    fake.custom = Ok(vec![custom("main", "40")]);
    fake.targets = Ok(vec![Target {
        group: "networking.k8s.io".into(),
        version: "v1".into(),
        plural: "ingresses".into(),
    }]);
    let target = hpa(json!({"metrics": [{"type": "Object", "object": {
        "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
        "metric": {"name": "hits"}, "target": {"type": "Value", "value": "20"}}}]}));
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(fake.updates(), [6]);
    assert_eq!(
        condition(&outcome, "ScalingActive").2,
        "the HPA was able to successfully calculate a replica count from Ingress metric hits"
    );
    assert!(
        fake.asked
            .lock()
            .map(|a| a.contains(
                &"custom object ns Some(\"ingresses.networking.k8s.io\") main hits".to_owned()
            ))
            .unwrap_or_default()
    );
    // The custom metrics API must answer one value.
    fake.custom = Ok(vec![]);
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(
        events(&outcome)[0].2,
        "unable to get metric hits: Ingress on ns main/unable to fetch metrics from custom metrics API: the custom metrics API server returned 0 results when we asked for exactly one"
    );

    // External, per pod: a total of 12 against 2 per pod.
    let mut fake = Fake::new(3, &[]);
    fake.external = Ok(vec![
        ExternalValue::from_json(&json!({"timestamp": rfc(now()), "value": "5"}))
            .unwrap_or_else(|e| panic!("{e}")),
        ExternalValue::from_json(&json!({"timestamp": rfc(now()), "value": "7"}))
            .unwrap_or_else(|e| panic!("{e}")),
    ]);
    let target = hpa(
        json!({"metrics": [{"type": "External", "external": {"metric": {"name": "queue"},
                                          "target": {"type": "AverageValue", "averageValue": "2"}}}]}),
    );
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(fake.updates(), [6]);
    let status = serde_json::to_value(&outcome.status).unwrap_or_default();
    assert_eq!(
        status["currentMetrics"][0]["external"]["current"]["averageValue"],
        "4"
    );
}

#[tokio::test]
async fn a_behavior_limits_the_rate_of_a_scale_out() {
    let fake = Fake::new(2, &[("a", "1"), ("b", "1"), ("c", "1")]);
    let target = hpa(json!({"maxReplicas": 50, "behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}}));
    let outcome = sync(&autoscaler(), &fake, &target, now()).await;
    assert_eq!(fake.updates(), [3]);
    assert_eq!(
        condition(&outcome, "ScalingLimited"),
        owned(
            "True",
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate"
        )
    );
}
