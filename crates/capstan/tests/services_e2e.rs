//! End to end: Services on a real node. The server runs its node agent and service proxy
//! (nftables, in the table `kube-proxy-<bridge>`); pods are busybox containers serving their
//! own names over HTTP. A client pod reaches a Deployment through its cluster IP, the host
//! through a node port, and by name through the cluster DNS (a headless Service as each pod);
//! `kubectl port-forward svc/web` reaches a pod; a pod failing readiness
//! leaves the rotation and comes back; scaling updates the rules; session affinity holds; a
//! Service without endpoints refuses connections; a pod lists pods with its service account's
//! token through the `kubernetes` Service (kubectl and the Python client inside the pod,
//! in-cluster configuration), allowed or forbidden per RBAC. The proxy's table is gone after a
//! clean stop, survives a `kill -9` (traffic keeps flowing) and is rebuilt by the next start.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::node::{IMAGE, NodeDir, jsonpath, node_flags, wait_for, wait_ready};
use common::{Server, free_port, kubectl_any, kubectl_ok, kubectl_stdin};

const BRIDGE: &str = "capsvc0";
const CLUSTER_CIDR: &str = "10.203.0.0/16";
/// A service range of its own, so that no other test cluster's proxy rules match its IPs.
const SERVICE_CIDR: &str = "10.97.0.0/16";
const TABLE: &str = "kube-proxy-capsvc0";

/// Removes the proxy's table if the test fails before the server could.
struct TableCleanup;

impl Drop for TableCleanup {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", TABLE])
            .output();
    }
}

fn table_exists() -> bool {
    Command::new("nft")
        .args(["list", "table", "ip", TABLE])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn table_text() -> String {
    let output = Command::new("nft")
        .args(["list", "table", "ip", TABLE])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn exec(kc: &Path, pod: &str, command: &[&str]) -> Output {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(command);
    kubectl_any("default", kc, &args)
}

/// One HTTP GET of `url` from inside the client pod: the body, or `Err` with wget's message.
fn fetch(kc: &Path, url: &str) -> Result<String, String> {
    let output = exec(kc, "client", &["timeout", "5", "wget", "-qO-", url]);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The pod names `n` requests to `url` from the client pod were answered by.
fn answers(kc: &Path, url: &str, n: usize) -> BTreeSet<String> {
    (0..n).filter_map(|_| fetch(kc, url).ok()).collect()
}

/// One HTTP GET from the host to `address` (a node port): the body.
fn host_get(address: &str) -> Option<String> {
    let mut stream =
        std::net::TcpStream::connect_timeout(&address.parse().ok()?, Duration::from_secs(3))
            .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let body = response.split_once("\r\n\r\n")?.1.trim().to_owned();
    (!body.is_empty()).then_some(body)
}

fn web_pods(kc: &Path) -> BTreeSet<String> {
    jsonpath(
        kc,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "status.phase=Running",
        ],
        "{.items[*].metadata.name}",
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

fn kubectl_path() -> String {
    let path = common::kubectl_binary("default");
    std::fs::canonicalize(path).unwrap().display().to_string()
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: IMAGE
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && touch /tmp/ready && exec httpd -f -p 8080 -h /www"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          exec: {command: ["cat", "/tmp/ready"]}
          periodSeconds: 1
          failureThreshold: 1
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: nobody}
spec:
  selector: {app: nobody}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: IMAGE, command: ["sleep", "3600"]}
"#;

const READER: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-reads-pods}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: reader, namespace: default}
---
apiVersion: v1
kind: Pod
metadata: {name: incluster}
spec:
  serviceAccountName: reader
  terminationGracePeriodSeconds: 1
  containers:
  - name: kubectl
    image: IMAGE
    command: ["sleep", "3600"]
    volumeMounts: [{name: kubectl, mountPath: /usr/local/bin/kubectl}]
  - name: python
    image: IMAGE
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: usr, mountPath: /usr, readOnly: true}
    - {name: lib, mountPath: /lib, readOnly: true}
    - {name: lib64, mountPath: /lib64, readOnly: true}
PYTHON_MOUNT
  volumes:
  - name: kubectl
    hostPath: {path: KUBECTL, type: File}
  - name: usr
    hostPath: {path: /usr, type: Directory}
  - name: lib
    hostPath: {path: /usr/lib, type: Directory}
  - name: lib64
    hostPath: {path: /usr/lib64, type: Directory}
PYTHON_VOLUME
"#;

/// The Python client inside a pod: `load_incluster_config`, then a list that RBAC allows and
/// one it forbids.
const INCLUSTER_PY: &str = r#"
from kubernetes import client, config
config.load_incluster_config()
v1 = client.CoreV1Api()
print("pods:" + ",".join(p.metadata.name for p in v1.list_namespaced_pod("default").items))
try:
    v1.list_namespaced_secret("default")
    print("secrets: listed")
except client.ApiException as e:
    print("secrets: %d" % e.status)
"#;

/// The pod's mount of the host's Python prefix (its volume when `!mount`), unless `/usr` (which
/// the pod mounts anyway) holds it.
fn python_mount(prefix: &str, mount: bool) -> String {
    if prefix == "/usr" || prefix.starts_with("/usr/") {
        String::new()
    } else if mount {
        format!("    - {{name: python, mountPath: {prefix}, readOnly: true}}")
    } else {
        format!("  - name: python\n    hostPath: {{path: {prefix}, type: Directory}}")
    }
}

/// The host's Python (the one with the `kubernetes` package) and its prefix, which the pod
/// mounts with the host's `/usr` to run it.
fn host_python() -> (String, String) {
    let output = Command::new("python3")
        .args([
            "-c",
            "import sys, kubernetes; print(sys.executable); print(sys.prefix)",
        ])
        .output()
        .expect("python3 with the kubernetes package (scripts/install-deps installs it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut lines = text.lines();
    let executable = std::fs::canonicalize(lines.next().unwrap())
        .unwrap()
        .display()
        .to_string();
    (executable, lines.next().unwrap().to_owned())
}

#[test]
fn services_reach_pods_through_the_proxy() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let _table = TableCleanup;
    let port = free_port();
    let mut flags = node_flags("svc-node", BRIDGE, CLUSTER_CIDR);
    flags.extend(["--service-cidr".to_owned(), SERVICE_CIDR.to_owned()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // Listening beyond loopback: pods reach the API server at its advertised address.
    let server = Server::start_node_on(&data_dir, port, "0.0.0.0", &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, "svc-node");
    wait_for("the proxy's table", Duration::from_secs(30), || {
        table_exists().then_some(())
    });

    let applied = kubectl_stdin(
        "default",
        kc,
        &["apply", "-f", "-"],
        &WEB.replace("IMAGE", IMAGE),
    );
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/client",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
    );
    let cluster_ip = jsonpath(kc, &["get", "service", "web"], "{.spec.clusterIP}");
    assert!(cluster_ip.starts_with("10.97."), "{cluster_ip}");
    let node_port = jsonpath(kc, &["get", "service", "web"], "{.spec.ports[0].nodePort}");
    let node_ip = jsonpath(
        kc,
        &["get", "node", "svc-node"],
        "{.status.addresses[?(@.type==\"InternalIP\")].address}",
    );
    let url = format!("http://{cluster_ip}/");

    // The cluster IP balances over both pods.
    let pods = web_pods(kc);
    assert_eq!(pods.len(), 2);
    let seen = wait_for(
        "both pods behind the cluster IP",
        Duration::from_secs(60),
        || {
            let seen = answers(kc, &url, 12);
            (seen == pods).then_some(seen)
        },
    );
    assert_eq!(seen, pods);

    // Hairpin: a pod reaches itself through its own Service (masqueraded, so that its reply
    // comes back through the NAT), as well as the other pod.
    let first = pods.iter().next().unwrap().clone();
    let seen = wait_for(
        "a pod reaching itself through its Service",
        Duration::from_secs(60),
        || {
            let seen: BTreeSet<String> = (0..12)
                .filter_map(|_| {
                    let output = exec(kc, &first, &["timeout", "5", "wget", "-qO-", &url]);
                    output
                        .status
                        .success()
                        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
                })
                .collect();
            (seen == pods).then_some(seen)
        },
    );
    assert!(seen.contains(&first));

    // The host reaches them through the node port.
    let address = format!("{node_ip}:{node_port}");
    let body = wait_for("the node port", Duration::from_secs(30), || {
        host_get(&address)
    });
    assert!(pods.contains(&body), "{body} not one of {pods:?}");

    // kubectl port-forward svc/web: to one of its pods, on the target port.
    let mut forward = Command::new(common::kubectl_binary("default"))
        .arg("--kubeconfig")
        .arg(kc)
        .args(["port-forward", "svc/web", ":80"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // kubectl keeps writing to its output ("Handling connection for ..."): read it all, or
    // it dies of SIGPIPE.
    let mut reader = std::io::BufReader::new(forward.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    // "Forwarding from 127.0.0.1:40123 -> 8080"
    let local = line
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("unexpected port-forward output {line:?}"))
        .to_owned();
    assert!(line.trim_end().ends_with("-> 8080"), "{line}");
    let body = wait_for(
        "an answer through port-forward",
        Duration::from_secs(30),
        || host_get(&local),
    );
    let _ = forward.kill();
    let _ = forward.wait();
    assert!(pods.contains(&body), "{body:?} through port-forward");

    // The Service's endpoints, as kubectl shows them.
    let endpoints = kubectl_ok("default", kc, &["get", "endpoints", "web"]);
    assert!(endpoints.contains(":8080"), "{endpoints}");
    let described = kubectl_ok("default", kc, &["describe", "service", "web"]);
    assert!(described.contains("Endpoints:"), "{described}");

    // A pod failing readiness leaves the rotation, and comes back.
    let second = pods.iter().nth(1).unwrap().clone();
    let removed = exec(kc, &first, &["rm", "/tmp/ready"]);
    assert!(removed.status.success());
    wait_for("the unready pod to leave", Duration::from_secs(60), || {
        let seen = answers(kc, &url, 8);
        (seen.len() == 1 && seen.contains(&second)).then_some(())
    });
    assert!(exec(kc, &first, &["touch", "/tmp/ready"]).status.success());
    wait_for("the pod to come back", Duration::from_secs(60), || {
        (answers(kc, &url, 12) == pods).then_some(())
    });

    // Scaling updates the rules.
    kubectl_ok("default", kc, &["scale", "deployment/web", "--replicas=3"]);
    kubectl_ok(
        "default",
        kc,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
    );
    let three = web_pods(kc);
    assert_eq!(three.len(), 3);
    wait_for("the third pod in rotation", Duration::from_secs(60), || {
        (answers(kc, &url, 20) == three).then_some(())
    });

    // Cluster DNS through the proxy: the Service by its full name and by its short name (the
    // pod's resolv.conf searches its namespace), a headless Service as each of its pods.
    let resolv = exec(kc, "client", &["cat", "/etc/resolv.conf"]);
    let resolv = String::from_utf8_lossy(&resolv.stdout).into_owned();
    assert!(
        resolv.contains("nameserver 10.97.0.10")
            && resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local")
            && resolv.contains("options ndots:5"),
        "{resolv}"
    );
    for name in ["web.default.svc.cluster.local", "web"] {
        let body = wait_for(&format!("http://{name}/"), Duration::from_secs(30), || {
            fetch(kc, &format!("http://{name}/")).ok()
        });
        assert!(three.contains(&body), "{body} from http://{name}/");
    }
    let headless = kubectl_stdin(
        "default",
        kc,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: web-headless}\n\
         spec: {clusterIP: None, selector: {app: web}, ports: [{port: 8080}]}\n",
    );
    assert!(headless.status.success());
    let ips: BTreeSet<String> = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.podIP}",
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect();
    assert_eq!(ips.len(), 3);
    wait_for(
        "the headless Service's records",
        Duration::from_secs(30),
        || {
            let output = exec(
                kc,
                "client",
                &["nslookup", "web-headless.default.svc.cluster.local"],
            );
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            ips.iter()
                .all(|ip| text.contains(ip.as_str()))
                .then_some(())
        },
    );

    // Session affinity: one client, one pod.
    kubectl_ok(
        "default",
        kc,
        &[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
        ],
    );
    wait_for("the affinity rules", Duration::from_secs(30), || {
        table_text().contains("affinity-").then_some(())
    });
    let sticky = answers(kc, &url, 10);
    assert_eq!(sticky.len(), 1, "{sticky:?}");

    // A Service without endpoints refuses at once.
    let nobody = jsonpath(kc, &["get", "service", "nobody"], "{.spec.clusterIP}");
    let refused = fetch(kc, &format!("http://{nobody}/")).unwrap_err();
    assert!(
        refused.contains("refused"),
        "expected a refused connection: {refused}"
    );

    // In-cluster clients: kubectl inside a pod, with the pod's service account token, through
    // the kubernetes Service.
    let (python, prefix) = host_python();
    let reader = READER
        .replace("IMAGE", IMAGE)
        .replace("KUBECTL", &kubectl_path())
        .replace("PYTHON_MOUNT", &python_mount(&prefix, true))
        .replace("PYTHON_VOLUME", &python_mount(&prefix, false));
    let applied = kubectl_stdin("default", kc, &["apply", "-f", "-"], &reader);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/incluster",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
    );
    let env = exec(kc, "incluster", &["env"]);
    let env = String::from_utf8_lossy(&env.stdout);
    assert!(env.contains("KUBERNETES_SERVICE_HOST=10.97.0.1"), "{env}");
    let listed = exec(kc, "incluster", &["kubectl", "get", "pods", "-o", "name"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains("pod/incluster"));
    let forbidden = exec(kc, "incluster", &["kubectl", "get", "secrets"]);
    assert!(!forbidden.status.success());
    let message = String::from_utf8_lossy(&forbidden.stderr);
    assert!(
        message.contains("system:serviceaccount:default:reader")
            && message.contains("cannot list resource \"secrets\""),
        "{message}"
    );

    // The Python client's in-cluster configuration, the same way.
    let output = kubectl_any(
        "default",
        kc,
        &[
            "exec",
            "incluster",
            "-c",
            "python",
            "--",
            &python,
            "-c",
            INCLUSTER_PY,
        ],
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.contains("pods:") && printed.contains("incluster"),
        "{printed}"
    );
    assert!(printed.contains("secrets: 403"), "{printed}");

    // A clean stop removes the table.
    server.stop();
    assert!(!table_exists(), "the table outlived a clean stop");

    // After a crash the table stays (traffic keeps flowing) and the next start rebuilds it.
    let server = Server::start_node_on(&data_dir, port, "0.0.0.0", &flags);
    wait_for("the web Service's rules", Duration::from_secs(60), || {
        table_text().contains("default/web/tcp/http").then_some(())
    });
    server.kill();
    assert!(table_exists(), "the rules stay after a crash");
    let stale = Command::new("nft")
        .args(["add", "chain", "ip", TABLE, "stale-leftover"])
        .status()
        .unwrap();
    assert!(stale.success());
    let server = Server::start_node_on(&data_dir, port, "0.0.0.0", &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_for("the rebuilt table", Duration::from_secs(60), || {
        let text = table_text();
        (text.contains("default/web/tcp/http") && !text.contains("stale-leftover")).then_some(())
    });
    wait_for(
        "the cluster IP after the restart",
        Duration::from_secs(60),
        || fetch(kc, &url).ok().filter(|body| three.contains(body)),
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "deployment", "web", "--wait=true"],
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "client", "incluster", "--wait=true"],
    );
    server.stop();
    assert!(!table_exists());
}
