//! End to end: ResourceQuota and LimitRange with stock kubectl against `capstan server`. A quota
//! made with `kubectl create quota` shows its usage (`describe`, `get -o json`) as pods and
//! config maps are created, refuses the object past it with upstream's message, and is freed
//! again when a pod is deleted (the quota controller measures it anew); a LimitRange defaults
//! a pod's container resources (with the `kubernetes.io/limit-ranger` annotation) and refuses a
//! pod over its max. Pods stay Pending: no node is needed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{
    Server, assert_refused, eventually, free_port, kubectl_any, kubectl_ok, kubectl_stdin,
};

const KUBECTL: &str = "default";

fn get(kc: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&kubectl_any(KUBECTL, kc, args).stdout).into_owned()
}

/// `kubectl run` of a busybox pod requesting `cpu` (no requests when empty).
fn run(kc: &Path, ns: &str, name: &str, cpu: &str) -> std::process::Output {
    let overrides = if cpu.is_empty() {
        String::from("{}")
    } else {
        format!(
            r#"{{"spec":{{"containers":[{{"name":"{name}","image":"busybox","resources":{{"requests":{{"cpu":"{cpu}"}}}}}}]}}}}"#
        )
    };
    kubectl_any(
        KUBECTL,
        kc,
        &[
            "-n",
            ns,
            "run",
            name,
            "--image=busybox",
            "--overrides",
            &overrides,
        ],
    )
}

fn used(kc: &Path, ns: &str) -> serde_json::Value {
    used_of(kc, ns, "q")
}

fn used_of(kc: &Path, ns: &str, name: &str) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&get(kc, &["-n", ns, "get", "quota", name, "-o", "json"]))
            .unwrap_or_default();
    json["status"]["used"].clone()
}

fn quota(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "quota"]);
    // Every namespace holds the cluster's CA bundle (kube-root-ca.crt): one config map counted
    // from the start, as upstream.
    eventually("kube-root-ca.crt", || {
        kubectl_any(
            KUBECTL,
            kc,
            &["-n", "quota", "get", "configmap", "kube-root-ca.crt"],
        )
        .status
        .success()
        .then_some(())
    });
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "quota",
            "create",
            "quota",
            "q",
            "--hard=pods=2,requests.cpu=1,count/configmaps=4",
        ],
    );
    // The controller records the usage before anything is charged to it.
    eventually("the quota's first usage", || {
        (used(kc, "quota")
            == serde_json::json!({"count/configmaps": "1", "pods": "0", "requests.cpu": "0"}))
        .then_some(())
    });
    // A quota that counts quotas counts itself and the others from its first measurement
    // (the conformance spec "capture the life of a replica set" waits for that).
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "quota",
            "create",
            "quota",
            "quotas",
            "--hard=resourcequotas=5",
        ],
    );
    eventually("the quotas counted", || {
        (used_of(kc, "quota", "quotas") == serde_json::json!({"resourcequotas": "2"})).then_some(())
    });
    assert!(run(kc, "quota", "p1", "400m").status.success());
    assert!(run(kc, "quota", "p2", "400m").status.success());
    // Admission charged the quota as it admitted the pods (and the controller, measuring
    // afresh, agrees).
    let charged = serde_json::json!({"count/configmaps": "1", "pods": "2", "requests.cpu": "800m"});
    eventually("two pods charged", || {
        (used(kc, "quota") == charged).then_some(())
    });
    let described = get(kc, &["-n", "quota", "describe", "quota", "q"]);
    let rows: Vec<Vec<&str>> = described
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for row in [
        ["pods", "2", "2"],
        ["requests.cpu", "800m", "1"],
        ["count/configmaps", "1", "4"],
    ] {
        assert!(
            rows.iter().any(|r| r.as_slice() == row),
            "{row:?} in:\n{described}"
        );
    }
    assert_refused(
        &run(kc, "quota", "p3", "100m"),
        &[
            r#"Error from server (Forbidden): pods "p3" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"#,
        ],
    );
    assert_refused(
        &run(kc, "quota", "p4", ""),
        &[
            r#"Error from server (Forbidden): pods "p4" is forbidden: failed quota: q: must specify requests.cpu for: p4"#,
        ],
    );
    // A dry run is checked but not charged.
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "quota",
            "create",
            "configmap",
            "dry",
            "--dry-run=server",
        ],
    );
    for name in ["c1", "c2", "c3"] {
        kubectl_ok(KUBECTL, kc, &["-n", "quota", "create", "configmap", name]);
    }
    assert_refused(
        &kubectl_any(KUBECTL, kc, &["-n", "quota", "create", "configmap", "c4"]),
        &[
            r#"configmaps "c4" is forbidden: exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4"#,
        ],
    );
    // Deleting frees the quota: the controller measures it again.
    kubectl_ok(KUBECTL, kc, &["-n", "quota", "delete", "pod", "p1"]);
    kubectl_ok(KUBECTL, kc, &["-n", "quota", "delete", "configmap", "c1"]);
    eventually("the quota freed", || {
        (used(kc, "quota")
            == serde_json::json!({"count/configmaps": "3", "pods": "1", "requests.cpu": "400m"}))
        .then_some(())
    });
    assert!(run(kc, "quota", "p3", "100m").status.success());
    let charged = serde_json::json!({"count/configmaps": "3", "pods": "2", "requests.cpu": "500m"});
    eventually("p3 charged", || {
        (used(kc, "quota") == charged).then_some(())
    });
}

fn limit_range(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "limits"]);
    let out = kubectl_stdin(
        KUBECTL,
        kc,
        &["-n", "limits", "apply", "-f", "-"],
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: limits}\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 200m, memory: 128Mi}\n    defaultRequest: {cpu: 100m}\n    max: {cpu: \"1\"}\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The LimitRange is in the server's cache a moment after it is written.
    let pod: serde_json::Value = eventually("a defaulted pod", || {
        if !run(kc, "limits", "d", "").status.success() {
            return None;
        }
        serde_json::from_str(&get(kc, &["-n", "limits", "get", "pod", "d", "-o", "json"])).ok()
    });
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        serde_json::json!({"limits": {"cpu": "200m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}})
    );
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container d; cpu, memory limit for container d"
    );
    assert_eq!(pod["status"]["qosClass"], "Burstable");
    let big = kubectl_any(
        KUBECTL,
        kc,
        &[
            "-n",
            "limits",
            "run",
            "big",
            "--image=busybox",
            "--overrides",
            r#"{"spec":{"containers":[{"name":"big","image":"busybox","resources":{"limits":{"cpu":"2"}}}]}}"#,
        ],
    );
    assert_refused(
        &big,
        &[
            r#"Error from server (Forbidden): pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2"#,
        ],
    );
}

/// A replication controller held back by a quota reports it (upstream's conformance test
/// "should surface a failure condition on a common issue like exceeded quota").
fn replica_failure(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "held"]);
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "held",
            "create",
            "quota",
            "condition-test",
            "--hard=pods=2",
        ],
    );
    eventually("the quota's usage", || {
        (get(
            kc,
            &[
                "-n",
                "held",
                "get",
                "quota",
                "condition-test",
                "-o",
                "jsonpath={.status.used.pods}",
            ],
        ) == "0")
            .then_some(())
    });
    let out = kubectl_stdin(
        KUBECTL,
        kc,
        &["-n", "held", "apply", "-f", "-"],
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: condition-test}\nspec:\n  replicas: 3\n  selector: {name: condition-test}\n  template:\n    metadata: {labels: {name: condition-test}}\n    spec: {containers: [{name: httpd, image: httpd}]}\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let condition = |kc: &Path| {
        get(
            kc,
            &[
                "-n",
                "held",
                "get",
                "rc",
                "condition-test",
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="ReplicaFailure")].reason}|{.status.conditions[?(@.type=="ReplicaFailure")].message}"#,
            ],
        )
    };
    let failed = eventually("the ReplicaFailure condition", || {
        let c = condition(kc);
        c.starts_with("FailedCreate|").then_some(c)
    });
    let message = failed.trim_start_matches("FailedCreate|");
    assert!(
        message.starts_with(r#"pods "condition-test-"#)
            && message.ends_with(r#" is forbidden: exceeded quota: condition-test, requested: pods=1, used: pods=2, limited: pods=2"#),
        "{message}"
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "held",
            "scale",
            "rc",
            "condition-test",
            "--replicas=2",
        ],
    );
    eventually("the condition cleared", || {
        (condition(kc) == "|").then_some(())
    });
}

#[test]
fn quotas_count_refuse_and_free_and_limit_ranges_default_and_bound() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    quota(&kc);
    limit_range(&kc);
    replica_failure(&kc);
    server.stop();
}
