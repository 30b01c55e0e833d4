//! End to end: everyday kubectl workflows against the real `capstan server`, with kubectl 1.27,
//! 1.33 and the machine's default, on SQLite and on a real etcd.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const MANIFESTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {app: shop, tier: web}
data:
  color: blue
  size: large
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: extra
  labels: {app: shop, tier: db}
data:
  color: red
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  labels: {app: shop}
spec:
  replicas: 2
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers:
      - name: web
        image: registry.local/shop:1.0
        ports:
        - containerPort: 8080
"#;

const APPLIED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  kept: \"yes\"\n  dropped: soon\n";

/// Client-side validation as kubectl does it by default (strict, through the server's OpenAPI
/// documents and server-side field validation).
const VALIDATE: &str = "--validate=strict";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Applies `manifest` and returns the row `kubectl get <resource> <name> --no-headers` prints.
fn apply_and_get_row(
    version: &str,
    kubeconfig: &Path,
    manifest: &str,
    resource: &str,
    name: &str,
) -> String {
    let out = kubectl_stdin(version, kubeconfig, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl_ok(
        version,
        kubeconfig,
        &["get", resource, name, "--no-headers"],
    )
}

/// One kubectl version's pass through the everyday commands, in its own namespace.
fn everyday_commands(version: &str, kubeconfig: &Path, dir: &Path) {
    let ns = format!("e2e-{}", version.replace('.', "-"));
    let k = |args: &[&str]| {
        let mut full = vec!["-n", ns.as_str()];
        full.extend_from_slice(args);
        kubectl_ok(version, kubeconfig, &full)
    };
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
    let out = kubectl_stdin(
        version,
        kubeconfig,
        &["create", VALIDATE, "-f", "-"],
        &namespace,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // create -f of a multi-document file.
    let manifests = write(dir, &format!("{ns}.yaml"), MANIFESTS);
    let created = k(&["create", VALIDATE, "-f", &manifests]);
    assert_eq!(
        created.lines().collect::<Vec<_>>(),
        [
            "configmap/settings created",
            "configmap/extra created",
            "deployment.apps/shop created"
        ],
        "kubectl {version}"
    );
    let again = kubectl_any(
        version,
        kubeconfig,
        &["-n", &ns, "create", VALIDATE, "-f", &manifests],
    );
    assert_refused(&again, &["configmaps \"settings\" already exists"]);

    // apply twice, a field removed in between: the second apply removes it from the object.
    let applied = write(dir, &format!("{ns}-apply.yaml"), APPLIED);
    assert_eq!(
        k(&["apply", "-f", &applied]).trim(),
        "configmap/applied created"
    );
    let trimmed = write(
        dir,
        &format!("{ns}-apply2.yaml"),
        &APPLIED.replace("  dropped: soon\n", ""),
    );
    assert_eq!(
        k(&["apply", "-f", &trimmed]).trim(),
        "configmap/applied configured"
    );
    assert_eq!(
        k(&["get", "cm", "applied", "-o", "jsonpath={.data}"]),
        r#"{"kept":"yes"}"#
    );
    assert_eq!(
        k(&["apply", "-f", &trimmed]).trim(),
        "configmap/applied unchanged"
    );

    // explain reads the OpenAPI documents; describe and edit work on what is stored.
    let explained = k(&["explain", "deployment.spec.template.spec.containers.image"]);
    assert!(
        explained.contains("FIELD:") || explained.contains("FIELD :"),
        "{explained}"
    );
    assert!(explained.contains("image"), "{explained}");
    let described = k(&["describe", "deployment", "shop"]);
    assert!(
        described.contains("Name:")
            && described.contains("shop")
            && described.contains("registry.local/shop:1.0"),
        "{described}"
    );
    let script = write(dir, "edit.sed", "s/^  kept: .*/  kept: edited/\n");
    let edit = Command::new(kubectl_binary(version))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "-n",
            &ns,
            "edit",
            "cm",
            "applied",
        ])
        .env("KUBE_EDITOR", format!("sed -i -f {script}"))
        .output()
        .unwrap();
    assert!(
        edit.status.success(),
        "edit: {}",
        String::from_utf8_lossy(&edit.stderr)
    );
    assert_eq!(
        k(&["get", "cm", "applied", "-o", "jsonpath={.data.kept}"]),
        "edited"
    );

    // wait --for=condition sees a condition written through the status subresource.
    let waiter = Command::new(kubectl_binary(version))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "-n",
            &ns,
            "wait",
            "--for=condition=Available",
            "deployment/shop",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    k(&[
        "patch",
        "deployment",
        "shop",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"ok"}]}}"#,
    ]);
    let waited = waiter.wait_with_output().unwrap();
    assert!(
        waited.status.success(),
        "wait --for=condition: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    k(&["delete", "cm", "applied"]);

    // get, in every output format.
    let table = k(&["get", "configmaps"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "DATA", "AGE"],
        "kubectl {version}: {table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("settings ") && l.split_whitespace().nth(1) == Some("2")),
        "{table}"
    );
    let wide = k(&["get", "deployments", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert!(
        wide.contains("registry.local/shop:1.0") && wide.contains("app=shop"),
        "{wide}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&k(&["get", "cm", "settings", "-o", "json"])).unwrap();
    assert_eq!(json["data"]["color"], "blue");
    assert_eq!(json["metadata"]["namespace"], ns.as_str());
    assert!(
        json["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    let yaml = k(&["get", "cm", "settings", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: ConfigMap") && yaml.contains("color: blue"),
        "{yaml}"
    );
    assert_eq!(
        k(&["get", "cm", "settings", "-o", "jsonpath={.data.size}"]),
        "large"
    );
    let columns = k(&[
        "get",
        "cm",
        "-l",
        "app=shop",
        "-o",
        "custom-columns=NAME:.metadata.name,COLOR:.data.color",
    ]);
    assert_eq!(
        columns
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        [
            vec!["NAME", "COLOR"],
            vec!["extra", "red"],
            vec!["settings", "blue"]
        ]
    );
    assert_eq!(
        k(&["get", "cm", "-l", "tier in (db)", "-o", "name"]).trim(),
        "configmap/extra"
    );
    assert_eq!(
        k(&[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=settings",
            "-o",
            "name"
        ])
        .trim(),
        "configmap/settings"
    );
    let all = k(&["get", "all"]);
    assert!(all.contains("deployment.apps/shop"), "{all}");

    // label, annotate, patch (merge and JSON), replace.
    k(&["label", "cm", "settings", "release=stable"]);
    k(&["annotate", "cm", "settings", "owner=team-a"]);
    k(&[
        "patch",
        "cm",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"size":"small"}}"#,
    ]);
    k(&[
        "patch",
        "cm",
        "settings",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/shape","value":"round"}]"#,
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&k(&["get", "cm", "settings", "-o", "json"])).unwrap();
    assert_eq!(json["metadata"]["labels"]["release"], "stable");
    assert_eq!(json["metadata"]["annotations"]["owner"], "team-a");
    assert_eq!(
        json["data"],
        serde_json::json!({"color": "blue", "size": "small", "shape": "round"})
    );
    let mut replaced = json.clone();
    replaced["data"] = serde_json::json!({"color": "green"});
    let file = write(dir, &format!("{ns}-replace.json"), &replaced.to_string());
    k(&["replace", VALIDATE, "-f", &file]);
    assert_eq!(
        k(&["get", "cm", "settings", "-o", "jsonpath={.data}"]),
        r#"{"color":"green"}"#
    );
    // A replace with the resourceVersion read before the last write is a conflict.
    let stale = kubectl_any(
        version,
        kubeconfig,
        &["-n", &ns, "replace", VALIDATE, "-f", &file],
    );
    assert_refused(&stale, &["the object has been modified"]);

    // get -w sees a change as it happens; wait --for=delete returns once the object is gone.
    let mut watch = Command::new(kubectl_binary(version))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "-n",
            &ns,
            "get",
            "cm",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    k(&["label", "cm", "extra", "watched=yes"]);
    let waiter = Command::new(kubectl_binary(version))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "-n",
            &ns,
            "wait",
            "--for=delete",
            "cm/extra",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    k(&["delete", "cm", "-l", "tier=db"]);
    let waited = waiter.wait_with_output().unwrap();
    assert!(
        waited.status.success(),
        "wait --for=delete: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    std::thread::sleep(Duration::from_millis(500));
    let _ = watch.kill();
    let watched = String::from_utf8_lossy(&watch.wait_with_output().unwrap().stdout).into_owned();
    let events: Vec<Vec<&str>> = watched
        .lines()
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert!(
        events.contains(&vec!["ADDED", "extra"]),
        "kubectl {version} get -w: {watched}"
    );
    assert!(
        events.contains(&vec!["MODIFIED", "extra"]),
        "kubectl {version} get -w: {watched}"
    );
    assert!(
        events.contains(&vec!["DELETED", "extra"]),
        "kubectl {version} get -w: {watched}"
    );

    // Typed create commands (protobuf bodies from kubectl 1.32 on), scale and set image.
    k(&["create", "configmap", "typed", "--from-literal=k=v"]);
    k(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=password=s3cret",
    ]);
    k(&[
        "create",
        "deployment",
        "typed",
        "--image=registry.local/app:1",
        "--replicas=2",
    ]);
    k(&["create", "service", "clusterip", "typed", "--tcp=80:8080"]);
    assert_eq!(k(&["get", "cm", "typed", "-o", "jsonpath={.data.k}"]), "v");
    assert_eq!(
        k(&["get", "secret", "creds", "-o", "jsonpath={.data.password}"]),
        "czNjcmV0"
    );
    k(&["scale", "deployment", "typed", "--replicas=4"]);
    assert_eq!(
        k(&[
            "get",
            "deployment",
            "typed",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "4"
    );
    k(&[
        "set",
        "image",
        "deployment/typed",
        "app=registry.local/app:2",
    ]);
    assert_eq!(
        k(&[
            "get",
            "deployment",
            "typed",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ]),
        "registry.local/app:2"
    );
    k(&["rollout", "restart", "deployment/typed"]);
    let annotations = k(&[
        "get",
        "deployment",
        "typed",
        "-o",
        "jsonpath={.spec.template.metadata.annotations}",
    ]);
    assert!(
        annotations.contains("kubectl.kubernetes.io/restartedAt"),
        "{annotations}"
    );
    k(&[
        "patch",
        "deployment",
        "typed",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"MODE","value":"fast"}]}]}}}}"#,
    ]);
    let containers: serde_json::Value = serde_json::from_str(&k(&[
        "get",
        "deployment",
        "typed",
        "-o",
        "jsonpath={.spec.template.spec.containers}",
    ]))
    .unwrap();
    assert_eq!(
        containers.as_array().unwrap().len(),
        1,
        "containers merge by name: {containers}"
    );
    assert_eq!(containers[0]["env"][0]["value"], "fast");
    assert_eq!(containers[0]["image"], "registry.local/app:2");
    k(&["delete", "deployment", "typed"]);
    k(&["delete", "service", "typed"]);
    k(&["delete", "secret", "creds"]);
    k(&["delete", "cm", "typed"]);

    // RBAC objects, as operators' manifests create them.
    k(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    k(&[
        "create",
        "rolebinding",
        "read-pods",
        "--role=pod-reader",
        "--user=alice",
        &format!("--serviceaccount={ns}:robot"),
    ]);
    let wide = k(&["get", "rolebinding", "read-pods", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{wide}"
    );
    assert!(
        wide.contains("Role/pod-reader") && wide.contains(&format!("{ns}/robot")),
        "{wide}"
    );
    let changed = kubectl_any(
        version,
        kubeconfig,
        &[
            "-n",
            ns.as_str(),
            "patch",
            "rolebinding",
            "read-pods",
            "--type=merge",
            "-p",
            r#"{"roleRef":{"name":"other"}}"#,
        ],
    );
    assert_refused(&changed, &["cannot change roleRef"]);
    k(&["delete", "rolebinding", "read-pods"]);
    k(&["delete", "role", "pod-reader"]);

    // Ingresses and network policies.
    k(&[
        "create",
        "ingress",
        "web",
        "--class=nginx",
        "--rule=shop.example.com/*=web:80,tls=web-cert",
    ]);
    let row = k(&["get", "ingress", "web", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["web", "nginx", "shop.example.com", "80,", "443"],
        "{row}"
    );
    let path_type = k(&[
        "get",
        "ingress",
        "web",
        "-o",
        "jsonpath={.spec.rules[0].http.paths[0].pathType}",
    ]);
    assert_eq!(path_type, "Prefix");
    let bad = kubectl_any(
        version,
        kubeconfig,
        &[
            "-n",
            ns.as_str(),
            "create",
            "ingress",
            "bad",
            "--rule=10.0.0.1/=web:80",
        ],
    );
    assert_refused(&bad, &["must be a DNS name, not an IP address"]);
    let policy = format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: db\n  namespace: {ns}\nspec:\n  podSelector:\n    matchLabels: {{tier: db}}\n  ingress:\n  - ports:\n    - port: 5432\n"
    );
    let out = kubectl_stdin(version, kubeconfig, &["apply", "-f", "-"], &policy);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = k(&[
        "get",
        "netpol",
        "db",
        "-o",
        "jsonpath={.spec.policyTypes} {.spec.ingress[0].ports[0].protocol}",
    ]);
    assert_eq!(spec, r#"["Ingress"] TCP"#);
    k(&["delete", "ingress", "web"]);
    k(&["delete", "networkpolicy", "db"]);

    // A storage class (cluster-scoped), defaulted and printed as upstream.
    let class_name = format!("fast-{ns}");
    let class = format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {class_name}\n  annotations:\n    storageclass.kubernetes.io/is-default-class: \"true\"\nprovisioner: example.com/fast\n"
    );
    let row = apply_and_get_row(version, kubeconfig, &class, "sc", &class_name);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..6],
        [
            class_name.as_str(),
            "(default)",
            "example.com/fast",
            "Delete",
            "Immediate",
            "false"
        ],
        "{row}"
    );
    kubectl_ok(version, kubeconfig, &["delete", "sc", &class_name]);

    let runtime_name = format!("gvisor-{ns}");
    let runtime = format!(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {runtime_name}\nhandler: runsc\n"
    );
    let row = apply_and_get_row(version, kubeconfig, &runtime, "runtimeclass", &runtime_name);
    assert_eq!(row.split_whitespace().nth(1), Some("runsc"), "{row}");
    kubectl_ok(
        version,
        kubeconfig,
        &["delete", "runtimeclass", &runtime_name],
    );

    // A CSI driver: defaulted, printed, and `attachRequired` immutable, as upstream.
    let driver_name = format!("csi-{ns}.example.com");
    let driver = format!(
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: {driver_name}\nspec:\n  podInfoOnMount: true\n"
    );
    let row = apply_and_get_row(version, kubeconfig, &driver, "csidriver", &driver_name);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..7],
        [
            driver_name.as_str(),
            "true",
            "true",
            "false",
            "<unset>",
            "false",
            "Persistent"
        ],
        "{row}"
    );
    let out = kubectl_any(
        version,
        kubeconfig,
        &[
            "patch",
            "csidriver",
            &driver_name,
            "-p",
            r#"{"spec":{"attachRequired":false}}"#,
        ],
    );
    assert_refused(
        &out,
        &["spec.attachedRequired: Invalid value: false: field is immutable"],
    );
    kubectl_ok(version, kubeconfig, &["delete", "csidriver", &driver_name]);

    // Delete by file and by label.
    k(&["delete", "deployment", "shop"]);
    k(&["delete", "cm", "-l", "app=shop"]);
    // Only the CA bundle every namespace is given is left.
    assert_eq!(
        k(&["get", "cm", "-o", "name"]).trim(),
        "configmap/kube-root-ca.crt"
    );
}

/// Discovery-driven commands print as against upstream.
fn discovery_commands(version: &str, kubeconfig: &Path) {
    let resources = kubectl_ok(version, kubeconfig, &["api-resources"]);
    let rows: Vec<Vec<&str>> = resources
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for expected in [
        vec!["pods", "po", "v1", "true", "Pod"],
        vec!["deployments", "deploy", "apps/v1", "true", "Deployment"],
        vec!["namespaces", "ns", "v1", "false", "Namespace"],
        vec!["cronjobs", "cj", "batch/v1", "true", "CronJob"],
        vec!["leases", "coordination.k8s.io/v1", "true", "Lease"],
        vec!["csidrivers", "storage.k8s.io/v1", "false", "CSIDriver"],
    ] {
        assert!(
            rows.contains(&expected),
            "kubectl {version} api-resources lacks {expected:?}:\n{resources}"
        );
    }
    let versions = kubectl_ok(version, kubeconfig, &["api-versions"]);
    for expected in [
        "v1",
        "apps/v1",
        "batch/v1",
        "policy/v1",
        "discovery.k8s.io/v1",
    ] {
        assert!(versions.lines().any(|l| l == expected), "{versions}");
    }
    let info = kubectl_ok(version, kubeconfig, &["cluster-info"]);
    assert!(
        info.contains("Kubernetes control plane") && info.contains("https://127.0.0.1:"),
        "{info}"
    );
    let namespaces = kubectl_ok(version, kubeconfig, &["get", "namespaces", "-o", "name"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            namespaces.contains(&format!("namespace/{ns}")),
            "{namespaces}"
        );
    }
}

fn run_on(datastore: &str) {
    let store = Datastore::start(datastore);
    let dir = tempfile::tempdir().unwrap();
    let flags = store.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_with(&dir.path().join("data"), free_port(), &flags);
    for version in KUBECTL_VERSIONS {
        discovery_commands(version, &server.kubeconfig());
        everyday_commands(version, &server.kubeconfig(), dir.path());
    }
    server.stop();
}

#[test]
fn kubectl_workflows_on_sqlite() {
    run_on("sqlite");
}

#[test]
fn kubectl_workflows_on_etcd() {
    run_on("etcd");
}
