//! End to end: server-side apply, `kubectl diff` and `kubectl edit` with stock kubectl 1.27 and
//! 1.33 against the real `capstan server` (SQLite): applies with and without conflicts and with
//! `--force-conflicts`, two managers sharing a field, a field that disappears only when its last
//! manager stops applying it, server dry-run diffs that change nothing, and an edit through a
//! scripted editor; HorizontalPodAutoscalers read and written in autoscaling/v1 and v2; and
//! `kubectl auth can-i` and `whoami`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::*;

const VERSIONS: [&str; 2] = ["1.27", "1.33"];

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn deployment(ns: &str, replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        ports:\n        - containerPort: 80\n"
    )
}

fn config_map(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
    let mut text =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n");
    if !data.is_empty() {
        text.push_str("data:\n");
        for (k, v) in data {
            text.push_str(&format!("  {k}: \"{v}\"\n"));
        }
    }
    text
}

fn json_of(version: &str, kubeconfig: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&kubectl_ok(version, kubeconfig, &all)).unwrap()
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_owned(),
                e["operation"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn server_side_apply(version: &str, kubeconfig: &Path, dir: &Path, ns: &str) {
    let k = |args: &[&str]| kubectl_ok(version, kubeconfig, args);
    let applied = write(dir, "web.yaml", &deployment(ns, 2, "web:1"));
    let out = k(&["apply", "--server-side", "-f", &applied]);
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );
    let live = json_of(version, kubeconfig, &["-n", ns, "get", "deployment", "web"]);
    assert_eq!(managers(&live), [("kubectl".into(), "Apply".into())]);
    assert_eq!(
        live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            ["k:{\"name\":\"web\"}"]["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"],
        serde_json::json!({".": {}, "f:containerPort": {}})
    );

    // Another manager takes the replicas; applying a different count conflicts.
    k(&["-n", ns, "scale", "deployment", "web", "--replicas=3"]);
    let five = write(dir, "web5.yaml", &deployment(ns, 5, "web:1"));
    assert_refused(
        &kubectl_any(
            version,
            kubeconfig,
            &["apply", "--server-side", "-f", &five],
        ),
        &[
            "Apply failed with 1 conflict: conflict with",
            ".spec.replicas",
        ],
    );
    assert_eq!(
        k(&[
            "-n",
            ns,
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
    k(&["apply", "--server-side", "--force-conflicts", "-f", &five]);
    assert_eq!(
        k(&[
            "-n",
            ns,
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "5"
    );

    // Two managers share a field; it goes only when the last of them stops applying it.
    let both = write(
        dir,
        "both.yaml",
        &config_map(ns, "shared", &[("x", "1"), ("z", "1")]),
    );
    let only_x = write(dir, "x.yaml", &config_map(ns, "shared", &[("x", "1")]));
    let only_z = write(dir, "z.yaml", &config_map(ns, "shared", &[("z", "1")]));
    let none = write(dir, "none.yaml", &config_map(ns, "shared", &[]));
    k(&[
        "apply",
        "--server-side",
        "--field-manager=team-a",
        "-f",
        &both,
    ]);
    k(&[
        "apply",
        "--server-side",
        "--field-manager=team-b",
        "-f",
        &only_x,
    ]);
    let shared = json_of(version, kubeconfig, &["-n", ns, "get", "cm", "shared"]);
    let mut names: Vec<String> = managers(&shared).into_iter().map(|(m, _)| m).collect();
    names.sort();
    assert_eq!(names, ["team-a", "team-b"]);
    k(&[
        "apply",
        "--server-side",
        "--field-manager=team-a",
        "-f",
        &only_z,
    ]);
    let data = k(&["-n", ns, "get", "cm", "shared", "-o", "jsonpath={.data}"]);
    assert!(
        data.contains("\"x\":\"1\"") && data.contains("\"z\":\"1\""),
        "{data}"
    );
    k(&[
        "apply",
        "--server-side",
        "--field-manager=team-b",
        "-f",
        &none,
    ]);
    let data = k(&["-n", ns, "get", "cm", "shared", "-o", "jsonpath={.data}"]);
    assert!(
        !data.contains("\"x\"") && data.contains("\"z\":\"1\""),
        "{data}"
    );
}

fn diff(version: &str, kubeconfig: &Path, dir: &Path, ns: &str) {
    let k = |args: &[&str]| kubectl_ok(version, kubeconfig, args);
    let original = write(
        dir,
        "settings.yaml",
        &config_map(ns, "settings", &[("color", "blue")]),
    );
    k(&["apply", "-f", &original]);
    let before = k(&[
        "-n",
        ns,
        "get",
        "cm",
        "settings",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    // Nothing to change: exit 0, no output.
    let same = kubectl_any(version, kubeconfig, &["diff", "-f", &original]);
    assert!(
        same.status.success(),
        "{}{}",
        String::from_utf8_lossy(&same.stdout),
        String::from_utf8_lossy(&same.stderr)
    );
    // A change: exit 1 and a unified diff, computed by a server dry run that writes nothing.
    let changed = write(
        dir,
        "settings2.yaml",
        &config_map(ns, "settings", &[("color", "green")]),
    );
    for extra in [&[][..], &["--server-side", "--force-conflicts"][..]] {
        let mut args = vec!["diff", "-f", changed.as_str()];
        args.extend_from_slice(extra);
        let output = kubectl_any(version, kubeconfig, &args);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("-  color: blue") && text.contains("+  color: green"),
            "{text}"
        );
    }
    let after = k(&[
        "-n",
        ns,
        "get",
        "cm",
        "settings",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    assert_eq!(before, after, "a diff must not write");
}

fn edit(version: &str, kubeconfig: &Path, ns: &str) {
    let output = Command::new(kubectl_binary(version))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns, "edit", "configmap", "settings"])
        .env("EDITOR", "sed -i s/color:\\ blue/color:\\ purple/")
        .env("KUBE_EDITOR", "sed -i s/color:\\ blue/color:\\ purple/")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("configmap/settings edited"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let live = json_of(version, kubeconfig, &["-n", ns, "get", "cm", "settings"]);
    assert_eq!(live["data"]["color"], "purple");
    assert!(
        managers(&live).contains(&("kubectl-edit".into(), "Update".into())),
        "{live}"
    );
}

/// HorizontalPodAutoscalers, one object in autoscaling/v1 and autoscaling/v2: `kubectl
/// autoscale`, a v2 manifest whose extra metrics v1 keeps in annotations, a v1 replace that
/// keeps them, and the table.
fn autoscalers(version: &str, kubeconfig: &Path, dir: &Path, ns: &str) {
    let file = write(dir, "web-deploy.yaml", &deployment(ns, 1, "nginx"));
    kubectl_ok(version, kubeconfig, &["apply", "-f", &file]);
    kubectl_ok(
        version,
        kubeconfig,
        &[
            "-n",
            ns,
            "autoscale",
            "deployment",
            "web",
            "--min=2",
            "--max=5",
            "--cpu-percent=60",
        ],
    );
    let get = |resource: &str, name: &str| -> Value {
        let text = kubectl_ok(
            version,
            kubeconfig,
            &["-n", ns, "get", resource, name, "-o", "json"],
        );
        serde_json::from_str(&text).unwrap()
    };
    // Full resource names: kubectl 1.30+ drops the version of a short name (`hpa.v1.autoscaling`
    // reads the preferred version), against any API server.
    let v1 = get("horizontalpodautoscalers.v1.autoscaling", "web");
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60, "{v1}");
    assert_eq!(v1["spec"]["minReplicas"], 2);
    let v2 = get("horizontalpodautoscalers.v2.autoscaling", "web");
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 60,
        "{v2}"
    );

    let manifest = format!(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: mem\n  namespace: {ns}\nspec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  maxReplicas: 4\n  metrics:\n  - type: Resource\n    resource: {{name: memory, target: {{type: AverageValue, averageValue: 512Mi}}}}\n  behavior:\n    scaleDown: {{stabilizationWindowSeconds: 60}}\n"
    );
    let file = write(dir, "mem-hpa.yaml", &manifest);
    kubectl_ok(version, kubeconfig, &["apply", "-f", &file]);
    let mut v1 = get("horizontalpodautoscalers.v1.autoscaling", "mem");
    let annotations = &v1["metadata"]["annotations"];
    assert_eq!(
        annotations["autoscaling.alpha.kubernetes.io/metrics"],
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"512Mi"}}]"#,
        "{v1}"
    );
    assert!(
        annotations["autoscaling.alpha.kubernetes.io/behavior"]
            .as_str()
            .unwrap()
            .starts_with(r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max""#),
        "{v1}"
    );
    assert!(v1["spec"].get("targetCPUUtilizationPercentage").is_none());
    // Replaced as v1 with another maximum, the v2 object keeps its metric and behavior.
    v1["spec"]["maxReplicas"] = 6.into();
    let file = write(dir, "mem-v1.json", &v1.to_string());
    kubectl_ok(version, kubeconfig, &["replace", "-f", &file]);
    let v2 = get("horizontalpodautoscalers.v2.autoscaling", "mem");
    assert_eq!(v2["spec"]["maxReplicas"], 6);
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["name"], "memory",
        "{v2}"
    );
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert!(
        v2["metadata"]["annotations"]
            .get("autoscaling.alpha.kubernetes.io/metrics")
            .is_none()
    );

    let table = kubectl_ok(version, kubeconfig, &["-n", ns, "get", "hpa"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ],
        "{table}"
    );
    let web = lines.iter().find(|l| l[0] == "web").expect("web row");
    assert_eq!(
        &web[1..6],
        ["Deployment/web", "cpu:", "<unknown>/60%", "2", "5"],
        "{table}"
    );
    let mem = lines.iter().find(|l| l[0] == "mem").expect("mem row");
    assert_eq!(
        &mem[1..6],
        ["Deployment/web", "memory:", "<unknown>/512Mi", "1", "6"],
        "{table}"
    );

    let resources = kubectl_ok(
        version,
        kubeconfig,
        &["api-resources", "--api-group=autoscaling"],
    );
    assert!(resources.contains("autoscaling/v2"), "{resources}");
}

/// A Secret written with `stringData` (client-side and server-side apply) keeps it as `data`.
fn secrets(version: &str, kubeconfig: &Path, dir: &Path, ns: &str) {
    let file = write(
        dir,
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {ns}\n\
             stringData:\n  user: admin\n"
        ),
    );
    kubectl_ok(version, kubeconfig, &["apply", "-f", &file]);
    kubectl_ok(
        version,
        kubeconfig,
        &["apply", "--server-side", "-f", &file],
    );
    let user = kubectl_ok(
        version,
        kubeconfig,
        &[
            "-n",
            ns,
            "get",
            "secret",
            "creds",
            "-o",
            "jsonpath={.data.user}",
        ],
    );
    assert_eq!(user, "YWRtaW4=");
    let secret = kubectl_ok(
        version,
        kubeconfig,
        &["-n", ns, "get", "secret", "creds", "-o", "json"],
    );
    let secret: Value = serde_json::from_str(&secret).unwrap();
    assert_eq!(secret.get("stringData"), None, "{secret}");
}

/// `kubectl auth can-i` and `auth whoami` through the review APIs.
fn reviews(version: &str, kubeconfig: &Path) {
    let can = kubectl_any(version, kubeconfig, &["auth", "can-i", "create", "pods"]);
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "yes");
    // The rules RBAC gives the admin (cluster-admin through system:masters), listed.
    let list = kubectl_ok(version, kubeconfig, &["auth", "can-i", "--list"]);
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["*.*", "[]", "[]", "[*]"]),
        "{list}"
    );
    if version != "1.27" {
        let me = kubectl_ok(version, kubeconfig, &["auth", "whoami", "-o", "json"]);
        let me: Value = serde_json::from_str(&me).unwrap();
        assert_eq!(me["kind"], "SelfSubjectReview");
        let groups = me["status"]["userInfo"]["groups"].as_array().unwrap();
        assert!(groups.iter().any(|g| g == "system:masters"), "{me}");
    }
}

#[test]
fn apply_diff_and_edit_with_stock_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    // Deployments serve here as objects to apply; with their controller running, its status
    // writes would add managers and change resourceVersions under the checks' feet.
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--disable-controllers=deployment"],
    );
    let kubeconfig = server.kubeconfig();
    for version in VERSIONS {
        let ns = format!("apply-{}", version.replace('.', "-"));
        kubectl_ok(version, &kubeconfig, &["create", "namespace", &ns]);
        server_side_apply(version, &kubeconfig, dir.path(), &ns);
        diff(version, &kubeconfig, dir.path(), &ns);
        edit(version, &kubeconfig, &ns);
        autoscalers(version, &kubeconfig, dir.path(), &ns);
        secrets(version, &kubeconfig, dir.path(), &ns);
        reviews(version, &kubeconfig);
    }
    server.stop();
}
