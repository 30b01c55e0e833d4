//! End to end: the node agent inside `capstan server` runs pods as real containers on the
//! containerd it starts itself (apt `containerd` and `runc`, CNI plugins from
//! `containernetworking-plugins`), driven with stock kubectl. The image is Debian's static
//! busybox packed by `capstan image busybox` into the node's preload directory; nothing is
//! pulled. One test walks through a node's life so the suite starts containerd once:
//! a Deployment reaching Running with pod addresses reachable from the host, environment and
//! volumes seen from inside a container, init containers, a crash loop with growing restart
//! counts, graceful deletion, and an agent restart that restarts no container.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::node::{
    Cleanup, IMAGE, NodeDir, jsonpath, node_flags, wait_event, wait_for, wait_ready,
};
use common::{
    Server, assert_refused, free_port, kubectl_any, kubectl_binary, kubectl_ok, kubectl_stdin,
};

/// The pod network of this test's node: its own bridge and range, so it can run beside a
/// developer's cluster on the same machine.
const BRIDGE: &str = "capnode0";
const CLUSTER_CIDR: &str = "10.201.0.0/16";

/// Debian's `docker-registry` serving on a free loopback port until dropped.
struct Registry {
    child: std::process::Child,
    address: String,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let address = format!("127.0.0.1:{}", free_port());
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker-registry (apt docker-registry; scripts/install-deps installs it)");
        let registry = Registry { child, address };
        wait_for("the registry", Duration::from_secs(20), || {
            common::curl(&format!("http://{}/v2/", registry.address)).map(|_| ())
        });
        registry
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn pods_run_as_containers_on_the_node() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let archive = node.archive.clone();
    let image = IMAGE;
    // A registry on loopback (Debian's docker-registry) holds a copy under another tag; the
    // node's registries.yaml mirrors docker.io to it.
    let registry = Registry::start(&data_dir.join("registry"));
    let pushed = Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false"])
        .arg(format!("oci-archive:{}", archive.display()))
        .arg(format!(
            "docker://{}/library/busybox:mirrored",
            registry.address
        ))
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    std::fs::write(
        data_dir.join("agent/registries.yaml"),
        format!(
            "mirrors:\n  docker.io:\n    endpoint: [\"http://{}\"]\n",
            registry.address
        ),
    )
    .unwrap();
    let port = free_port();
    let flags = node_flags("e2e-node", BRIDGE, CLUSTER_CIDR);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, port, &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();

    // The node registers and turns Ready once its pod network is configured.
    wait_ready(kc, "e2e-node");
    let node = kubectl_ok("default", kc, &["get", "node", "e2e-node", "-o", "json"]);
    let node: serde_json::Value = serde_json::from_str(&node).unwrap();
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );
    // The node lists its images, the preloaded one among them.
    wait_for("the node's images", Duration::from_secs(30), || {
        let names = jsonpath(
            kc,
            &["get", "node", "e2e-node"],
            "{.status.images[*].names}",
        );
        names
            .contains("docker.io/library/busybox:e2e")
            .then_some(())
    });
    let pod_cidr = node["spec"]["podCIDR"].as_str().unwrap().to_owned();
    let prefix = pod_cidr.trim_end_matches("0/24").to_owned();

    // A Deployment reaches 3/3 Running; every pod has an address of the node's range that
    // answers from the host.
    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "deployment",
            "web",
            "--image",
            image,
            "--replicas=3",
            "--",
            "httpd",
            "-f",
            "-p",
            "8080",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &["rollout", "status", "deployment/web", "--timeout=90s"],
    );
    let ips = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.podIP}",
    );
    let ips: Vec<&str> = ips.split_whitespace().collect();
    assert_eq!(ips.len(), 3, "{ips:?}");
    for ip in &ips {
        assert!(ip.starts_with(&prefix), "{ip} outside {pod_cidr}");
        let code = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
            ])
            .arg(format!("http://{ip}:8080/"))
            .output()
            .unwrap();
        // busybox httpd serves an empty directory: an HTTP answer proves the route.
        assert_eq!(String::from_utf8_lossy(&code.stdout), "404", "pod {ip}");
    }
    let ready = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.conditions[?(@.type==\"Ready\")].status}",
    );
    assert_eq!(ready.split_whitespace().collect::<Vec<_>>(), ["True"; 3]);

    // An image pulled (policy Always) through the mirror.
    kubectl_ok(
        "default",
        kc,
        &[
            "run",
            "mirrored",
            "--image=busybox:mirrored",
            "--image-pull-policy=Always",
            "--",
            "sleep",
            "3600",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/mirrored",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    let image_id = jsonpath(
        kc,
        &["get", "pod", "mirrored"],
        "{.status.containerStatuses[0].imageID}",
    );
    assert!(
        image_id.starts_with("docker.io/library/busybox@sha256:"),
        "{image_id}"
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "mirrored", "--wait=false"],
    );

    // Environment and volumes as the container sees them; init containers run first, in order.
    // The pod succeeds only if every check inside it holds.
    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=greeting=hello",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=key=s3cret",
        ],
    );
    let checks = r#"
apiVersion: v1
kind: Pod
metadata:
  name: checks
  labels: {tier: test}
spec:
  restartPolicy: Never
  volumes:
  - name: scratch
    emptyDir: {}
  - name: settings
    configMap: {name: settings}
  - name: token
    secret: {secretName: token, defaultMode: 0400}
  initContainers:
  - name: first
    image: busybox:e2e
    command: ["sh", "-c", "echo one > /scratch/order"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  - name: second
    image: busybox:e2e
    command: ["sh", "-c", "echo two >> /scratch/order"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  containers:
  - name: check
    image: busybox:e2e
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: TIER, valueFrom: {fieldRef: {fieldPath: "metadata.labels['tier']"}}}
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: settings, key: greeting}}}
    - {name: KEY, valueFrom: {secretKeyRef: {name: token, key: key}}}
    - {name: MESSAGE, value: "$(GREETING) from $(POD_NAME)"}
    - {name: MEMORY, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    resources:
      limits: {memory: 64Mi, cpu: 250m}
    command:
    - sh
    - -c
    - |
      set -e
      test "$(cat /scratch/order | tr '\n' ' ')" = "one two "
      test "$POD_NAME" = checks
      test "$TIER" = test
      test "$MESSAGE" = "hello from checks"
      test "$KEY" = s3cret
      test "$MEMORY" = 64
      test "$(cat /settings/greeting)" = hello
      test "$(cat /token/key)" = s3cret
      test -n "$KUBERNETES_SERVICE_HOST"
      test "$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)" = 67108864
      ! touch /settings/new 2>/dev/null
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: settings, mountPath: /settings}
    - {name: token, mountPath: /token}
"#;
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], checks);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let phase = wait_for("the checks pod to finish", Duration::from_secs(60), || {
        let phase = jsonpath(kc, &["get", "pod", "checks"], "{.status.phase}");
        (phase == "Succeeded" || phase == "Failed").then_some(phase)
    });
    let status = jsonpath(
        kc,
        &["get", "pod", "checks"],
        "{.status.containerStatuses[0].state}",
    );
    assert_eq!(
        phase, "Succeeded",
        "the checks inside the container failed: {status}"
    );
    let init = jsonpath(
        kc,
        &["get", "pod", "checks"],
        "{.status.initContainerStatuses[*].state.terminated.reason}",
    );
    assert_eq!(init, "Completed Completed");

    // A crashing container restarts with back-off: CrashLoopBackOff, growing restart counts,
    // the last exit kept.
    kubectl_ok(
        "default",
        kc,
        &[
            "run",
            "crash",
            "--image",
            image,
            "--restart=Always",
            "--",
            "sh",
            "-c",
            "echo crashing; exit 3",
        ],
    );
    wait_for("a crash loop", Duration::from_secs(60), || {
        let waiting = jsonpath(
            kc,
            &["get", "pod", "crash"],
            "{.status.containerStatuses[0].state.waiting.reason}",
        );
        let restarts: u32 = jsonpath(
            kc,
            &["get", "pod", "crash"],
            "{.status.containerStatuses[0].restartCount}",
        )
        .parse()
        .unwrap_or(0);
        (waiting == "CrashLoopBackOff" && restarts >= 2).then_some(())
    });
    let last = jsonpath(
        kc,
        &["get", "pod", "crash"],
        "{.status.containerStatuses[0].lastState.terminated.exitCode}",
    );
    assert_eq!(last, "3");
    let phase = jsonpath(kc, &["get", "pod", "crash"], "{.status.phase}");
    assert_eq!(phase, "Running");
    kubelet_events(kc, image);

    streams(kc, image, &node);
    debug_containers(kc, image);
    kubelet_fidelity(kc, image);

    // Restarting the agent (the whole server) restarts no container.
    let before = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.containerStatuses[0].containerID}",
    );
    server.stop();
    let server = Server::start_node(&data_dir, port, &flags);
    let kc = &server.kubeconfig();
    std::thread::sleep(Duration::from_secs(5));
    kubectl_ok(
        "default",
        kc,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    let after = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.containerStatuses[0].containerID}",
    );
    assert_eq!(before, after, "containers were restarted");
    let restarts = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[*].status.containerStatuses[0].restartCount}",
    );
    assert_eq!(restarts, "0 0 0");

    // Graceful deletion: the pods go once their containers have stopped, and nothing of them
    // is left in the runtime.
    kubectl_ok("default", kc, &["delete", "deployment", "web"]);
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "--all",
            "--grace-period=2",
            "--wait=true",
            "--timeout=90s",
        ],
    );
    wait_for("the pods to go", Duration::from_secs(60), || {
        let names = jsonpath(kc, &["get", "pods"], "{.items[*].metadata.name}");
        names.trim().is_empty().then_some(())
    });
    let socket = data_dir.join("agent/containerd/containerd.sock");
    wait_for(
        "the runtime to drop the sandboxes",
        Duration::from_secs(30),
        || {
            let out = Command::new("ctr")
                .arg("--address")
                .arg(&socket)
                .args(["--namespace", "k8s.io", "containers", "list", "-q"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .is_empty()
                .then_some(())
        },
    );

    join_second_node(kc, &data_dir, &archive);
    server.stop();
}

/// What upstream's kubelet does that the conformance specs check: the managed `/etc/hosts`,
/// downward API resource values in their units (with the zero divisor Go clients send), init
/// containers ready once done, `subPathExpr` (and its refusal of an absolute path), a second
/// delete with a shorter grace period, and a lowered `activeDeadlineSeconds`.
fn kubelet_fidelity(kc: &Path, image: &str) {
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: fidelity}}
spec:
  terminationGracePeriodSeconds: 0
  hostname: h
  subdomain: sub
  hostAliases: [{{ip: 1.2.3.4, hostnames: [foo, bar]}}]
  volumes: [{{name: work, emptyDir: {{}}}}]
  initContainers:
  - {{name: init, image: {image}, command: ["true"]}}
  containers:
  - name: app
    image: {image}
    command: ["sh", "-c", "cat /etc/hosts; echo CPU=$CPU MEM=$MEM; touch /work/made; sleep 3600"]
    resources: {{limits: {{cpu: 250m, memory: 64Mi}}}}
    env:
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: CPU, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: "0"}}}}}}
    - {{name: MEM, valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: "0"}}}}}}
    volumeMounts: [{{name: work, mountPath: /work, subPathExpr: "$(POD_NAME)"}}]
"#
    );
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &pod);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    kubectl_ok(
        "1.33",
        kc,
        &[
            "wait",
            "pod/fidelity",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    let logs = wait_for("the pod's output", Duration::from_secs(30), || {
        let logs = kubectl_ok("default", kc, &["logs", "fidelity", "-c", "app"]);
        logs.contains("CPU=").then_some(logs)
    });
    let ip = jsonpath(kc, &["get", "pod", "fidelity"], "{.status.podIP}");
    assert!(
        logs.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
        "{logs}"
    );
    assert!(
        logs.contains(&format!("\n{ip}\th.sub.default.svc.cluster.local\th\n")),
        "{logs}"
    );
    assert!(
        logs.contains("# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"),
        "{logs}"
    );
    assert!(logs.contains("CPU=1 MEM=67108864"), "{logs}");
    assert_eq!(
        jsonpath(
            kc,
            &["get", "pod", "fidelity"],
            "{.status.initContainerStatuses[0].ready}"
        ),
        "true"
    );
    // The subPathExpr directory, named after the pod, holds what the container wrote.
    let made = kubectl_any(
        "default",
        kc,
        &["exec", "fidelity", "-c", "app", "--", "ls", "/work"],
    );
    assert_eq!(String::from_utf8_lossy(&made.stdout).trim(), "made");

    // A subPathExpr that expands to an absolute path: the container is never created.
    let bad = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: bad-subpath}}
spec:
  terminationGracePeriodSeconds: 0
  volumes: [{{name: work, emptyDir: {{}}}}]
  containers:
  - name: app
    image: {image}
    command: ["sleep", "3600"]
    env: [{{name: WHERE, value: /tmp}}]
    volumeMounts: [{{name: work, mountPath: /work, subPathExpr: "$(WHERE)"}}]
"#
    );
    assert!(
        kubectl_stdin("default", kc, &["apply", "-f", "-"], &bad)
            .status
            .success()
    );
    wait_for(
        "CreateContainerConfigError",
        Duration::from_secs(60),
        || {
            let reason = jsonpath(
                kc,
                &["get", "pod", "bad-subpath"],
                "{.status.containerStatuses[0].state.waiting.reason}",
            );
            (reason == "CreateContainerConfigError").then_some(())
        },
    );
    assert_eq!(
        jsonpath(kc, &["get", "pod", "bad-subpath"], "{.status.phase}"),
        "Pending"
    );

    // A pod that ignores SIGTERM, deleted with 60 s of grace, then again with 1 s: it goes in
    // seconds, not a minute.
    let stubborn = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: stubborn}}
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - name: app
    image: {image}
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
"#
    );
    assert!(
        kubectl_stdin("default", kc, &["apply", "-f", "-"], &stubborn)
            .status
            .success()
    );
    kubectl_ok(
        "1.33",
        kc,
        &[
            "wait",
            "pod/stubborn",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "stubborn", "--wait=false"],
    );
    std::thread::sleep(Duration::from_secs(2));
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "stubborn",
            "--grace-period=1",
            "--wait=false",
        ],
    );
    wait_for("the shortened deletion", Duration::from_secs(30), || {
        let out = kubectl_any("default", kc, &["get", "pod", "stubborn"]);
        (!out.status.success()).then_some(())
    });

    // activeDeadlineSeconds lowered on a running pod fails it.
    kubectl_ok(
        "default",
        kc,
        &[
            "patch",
            "pod",
            "fidelity",
            "-p",
            r#"{"spec":{"activeDeadlineSeconds":5}}"#,
        ],
    );
    wait_for("DeadlineExceeded", Duration::from_secs(60), || {
        let state = jsonpath(
            kc,
            &["get", "pod", "fidelity"],
            "{.status.phase} {.status.reason}",
        );
        (state == "Failed DeadlineExceeded").then_some(())
    });
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "fidelity",
            "bad-subpath",
            "--grace-period=0",
            "--force",
        ],
    );
}

/// `kubectl debug`: an ephemeral container added through the pod's `ephemeralcontainers`
/// subresource runs in the pod, in the process namespace of its target, and can be attached to.
fn debug_containers(kc: &Path, image: &str) {
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: debugged}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: {image}
    command: ["sleep", "3600"]
"#
    );
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &pod);
    assert!(created.status.success());
    kubectl_ok(
        "1.33",
        kc,
        &[
            "wait",
            "pod/debugged",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    kubectl_ok(
        "1.33",
        kc,
        &[
            "debug",
            "debugged",
            "--image",
            image,
            "--target=app",
            "-c",
            "dbg",
            "--",
            "sh",
            "-c",
            "ps; exec sleep 1000",
        ],
    );
    let state = |name: &str| {
        jsonpath(
            kc,
            &["get", "pod", "debugged"],
            &format!("{{.status.ephemeralContainerStatuses[?(@.name==\"{name}\")].state}}"),
        )
    };
    wait_for(
        "the debug container to run",
        Duration::from_secs(60),
        || state("dbg").contains("running").then_some(()),
    );
    // It sees the target's processes.
    let seen = wait_for("the debug container's ps", Duration::from_secs(30), || {
        let logs = kubectl_ok("1.33", kc, &["logs", "debugged", "-c", "dbg"]);
        logs.contains("sleep 3600").then_some(logs)
    });
    assert!(seen.contains("ps"), "{seen}");
    // kubectl 1.27 (SPDY) attaches to the one it adds, with stdin. Stdin stays open until
    // the answer is back: containerd ends an attach when its stdin closes (stdinOnce unset).
    let mut debugging = Command::new(kubectl_binary("1.27"))
        .arg("--kubeconfig")
        .arg(kc)
        .args([
            "debug", "-i", "debugged", "--image", image, "-c", "dbg2", "--", "sh",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = debugging.stdin.take().unwrap();
    input.write_all(b"echo from-debug\n").unwrap();
    let (lines, answers) = std::sync::mpsc::channel();
    let output = debugging.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(output)).map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let answer = answers.recv_timeout(Duration::from_secs(60));
    input.write_all(b"exit 0\n").unwrap();
    drop(input);
    let _ = debugging.wait();
    assert_eq!(answer.as_deref(), Ok("from-debug"));
    wait_for(
        "the attached debug container to end",
        Duration::from_secs(30),
        || state("dbg2").contains("terminated").then_some(()),
    );
    // Ephemeral containers are never restarted; the pod runs on, ready.
    std::thread::sleep(Duration::from_secs(2));
    assert!(state("dbg2").contains("terminated"));
    let ready = jsonpath(
        kc,
        &["get", "pod", "debugged"],
        "{.status.conditions[?(@.type==\"Ready\")].status}",
    );
    assert_eq!(ready, "True");
    kubectl_ok("default", kc, &["delete", "pod", "debugged", "--wait=true"]);
}

/// The kubelet's events, as upstream's read: about the crashing pod's container (its image
/// already present, created, started, backing off), and about the node (started, ready);
/// `kubectl describe` lists them beside the scheduler's.
fn kubelet_events(kc: &Path, image: &str) {
    let kubelet = ("kubelet".to_owned(), "e2e-node".to_owned());
    let container = "spec.containers{crash}";
    let pulled = wait_event(kc, "crash", "Pulled", |_| true);
    assert_eq!(
        pulled.message,
        format!("Container image \"{image}\" already present on machine")
    );
    assert_eq!(
        (pulled.type_.as_str(), pulled.field_path.as_str()),
        ("Normal", container)
    );
    assert_eq!(pulled.source, kubelet);
    let created = wait_event(kc, "crash", "Created", |_| true);
    assert_eq!(created.message, "Created container: crash");
    assert_eq!(created.field_path, container);
    // Each start of the same container counts on one event.
    let started = wait_event(kc, "crash", "Started", |e| e.count >= 2);
    assert_eq!(started.message, "Started container crash");
    let uid = jsonpath(kc, &["get", "pod", "crash"], "{.metadata.uid}");
    let back_off = wait_event(kc, "crash", "BackOff", |_| true);
    assert_eq!(
        back_off.message,
        format!("Back-off restarting failed container crash in pod crash_default({uid})")
    );
    assert_eq!(back_off.type_, "Warning");
    let scheduled = wait_event(kc, "crash", "Scheduled", |_| true);
    assert_eq!(scheduled.source.0, "default-scheduler");
    let described = kubectl_ok("default", kc, &["describe", "pod", "crash"]);
    assert!(
        described.contains("Back-off restarting failed container crash in pod"),
        "{described}"
    );
    assert!(
        described.contains("Created container: crash"),
        "{described}"
    );
    let starting = wait_event(kc, "e2e-node", "Starting", |_| true);
    assert_eq!(starting.message, "Starting kubelet.");
    let ready = wait_event(kc, "e2e-node", "NodeReady", |_| true);
    assert_eq!(ready.message, "Node e2e-node status is now: NodeReady");
}

/// `capstan agent` on the same machine joins as a second node with the server's token (its
/// CA pinned), runs a pod, and serves its logs and exec.
fn join_second_node(kc: &Path, data_dir: &Path, archive: &Path) {
    let joined = data_dir.join("joined");
    let _cleanup = Cleanup {
        data_dir: joined.clone(),
        bridge: "capjoin0",
    };
    std::fs::create_dir_all(joined.join("agent/images")).unwrap();
    std::fs::copy(archive, joined.join("agent/images/busybox.tar")).unwrap();
    let token = std::fs::read_to_string(data_dir.join("token")).unwrap();
    assert!(token.starts_with("K10"), "{token}");
    let server_url = {
        let config = std::fs::read_to_string(kc).unwrap();
        config
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap()
            .to_owned()
    };
    // A token whose CA hash is wrong is refused before anything is trusted.
    let forged = format!("K10{}::server:x", "0".repeat(64));
    let refused = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["agent", "--server", &server_url, "--token", &forged])
        .arg("--data-dir")
        .arg(&joined)
        .args(["--node-name", "joined-node", "--lb-server-port", "0"])
        .output()
        .unwrap();
    assert_refused(&refused, &["the token expects"]);
    let (mut agent, proxy_metrics) = common::node::spawn_agent(
        &server_url,
        token.trim(),
        &joined,
        "joined-node",
        None,
        "capjoin0",
    );
    wait_for(
        "the joined node to register",
        Duration::from_secs(60),
        || {
            kubectl_any("default", kc, &["get", "node", "joined-node"])
                .status
                .success()
                .then_some(())
        },
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "node/joined-node",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    // The agent's service proxy serves its metrics as kube-proxy does, over plain HTTP.
    wait_for(
        "the joined node's proxy metrics",
        Duration::from_secs(30),
        || {
            let output = Command::new("curl")
                .args(["-s", "--max-time", "5"])
                .arg(format!("http://{proxy_metrics}/metrics"))
                .output()
                .ok()?;
            let body = String::from_utf8_lossy(&output.stdout).into_owned();
            body.contains("kubeproxy_sync_proxy_rules_duration_seconds_count")
                .then_some(())
        },
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "run",
            "elsewhere",
            "--image=busybox:e2e",
            "--overrides",
            r#"{"spec":{"nodeName":"joined-node"}}"#,
            "--",
            "sh",
            "-c",
            "echo from the joined node; sleep 3600",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/elsewhere",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    assert_eq!(
        kubectl_ok("default", kc, &["logs", "elsewhere"]),
        "from the joined node\n"
    );
    assert_eq!(
        kubectl_ok("default", kc, &["exec", "elsewhere", "--", "echo", "exec"]),
        "exec\n"
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "elsewhere",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
    let _ = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status();
    let _ = agent.wait();
}

/// Logs, exec and port-forward through the API server to the node's kubelet, with an old
/// kubectl (SPDY) and a new one (WebSocket, and SPDY tunnelled through it), and a hostPort.
fn streams(kc: &Path, image: &str, node: &serde_json::Value) {
    let web = jsonpath(
        kc,
        &["get", "pods", "-l", "app=web"],
        "{.items[0].metadata.name}",
    );
    // A container's log, both streams, with the kubelet's options.
    let talker = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: talker}}
spec:
  restartPolicy: Never
  containers:
  - name: talk
    image: {image}
    command: ["sh", "-c", "echo out-1; sleep 0.2; echo err-1 >&2; sleep 0.2; echo out-2; sleep 2; echo out-3"]
"#
    );
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &talker);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    wait_for("talker to start", Duration::from_secs(60), || {
        let phase = jsonpath(kc, &["get", "pod", "talker"], "{.status.phase}");
        (phase == "Running" || phase == "Succeeded").then_some(())
    });
    for version in ["1.27", "1.33"] {
        // Follow ends when the container does.
        let followed = kubectl_ok(version, kc, &["logs", "-f", "talker"]);
        assert_eq!(
            followed, "out-1\nerr-1\nout-2\nout-3\n",
            "kubectl {version}"
        );
        assert_eq!(
            kubectl_ok(version, kc, &["logs", "talker", "--tail=1"]),
            "out-3\n"
        );
        let stamped = kubectl_ok(version, kc, &["logs", "talker", "--timestamps", "--tail=1"]);
        let (stamp, line) = stamped.split_once(' ').unwrap();
        assert!(stamp.ends_with('Z') && stamp.contains('T'), "{stamped}");
        assert_eq!(line, "out-3\n");
        // The crashed container's previous log.
        assert_eq!(
            kubectl_ok(version, kc, &["logs", "crash", "--previous"]),
            "crashing\n"
        );
        // Options are checked as upstream checks them.
        let refused = kubectl_any(
            version,
            kc,
            &["logs", "talker", "--tail=-2", "--limit-bytes=0"],
        );
        assert!(!refused.status.success());
        // Exec: output, exit codes, input.
        assert_eq!(
            kubectl_ok(
                version,
                kc,
                &["exec", &web, "--", "sh", "-c", "echo hi; echo there >&2"]
            ),
            "hi\n"
        );
        let failed = kubectl_any(version, kc, &["exec", &web, "--", "sh", "-c", "exit 7"]);
        assert_eq!(failed.status.code(), Some(7), "kubectl {version}");
        let echoed = kubectl_stdin(
            version,
            kc,
            &["exec", "-i", &web, "--", "cat"],
            "from stdin\n",
        );
        assert!(
            echoed.status.success(),
            "{}",
            String::from_utf8_lossy(&echoed.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&echoed.stdout), "from stdin\n");
        let missing = kubectl_any(version, kc, &["exec", &web, "-c", "nope", "--", "true"]);
        assert!(
            String::from_utf8_lossy(&missing.stderr)
                .contains("container nope is not valid for pod"),
            "{}",
            String::from_utf8_lossy(&missing.stderr)
        );
        // Port-forward to the pod's httpd.
        let local = free_port();
        let mut forward = Command::new(common::kubectl_binary(version))
            .arg("--kubeconfig")
            .arg(kc)
            .args([
                "port-forward",
                &format!("pod/{web}"),
                &format!("{local}:8080"),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = forward.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("Forwarding from"), "{first}");
        for _ in 0..2 {
            let code = Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "5",
                ])
                .arg(format!("http://127.0.0.1:{local}/"))
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&code.stdout),
                "404",
                "kubectl {version}"
            );
        }
        let _ = forward.kill();
        let _ = forward.wait();
    }
    // Attach: `kubectl run -i` attaches to the new container's stdin and stdout.
    for version in ["1.27", "1.33"] {
        let name = format!("attach-{}", version.replace('.', "-"));
        let attached = kubectl_stdin(
            version,
            kc,
            &[
                "run",
                &name,
                "-i",
                "--rm",
                "--restart=Never",
                &format!("--image={image}"),
                "--",
                "sh",
                "-c",
                "read line; echo got:$line",
            ],
            "typed\n",
        );
        assert!(
            String::from_utf8_lossy(&attached.stdout).contains("got:typed"),
            "kubectl {version}: {}{}",
            String::from_utf8_lossy(&attached.stdout),
            String::from_utf8_lossy(&attached.stderr)
        );
    }
    // The Python client's WebSocket channel protocols (v4) for exec and port-forward.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/streams_e2e.py");
    let python = Command::new("python3")
        .arg(script)
        .arg(kc)
        .arg(&web)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 (scripts/install-deps installs the kubernetes client)");
    let said = String::from_utf8_lossy(&python.stdout);
    assert!(
        python.status.success() && said.contains("ALL CHECKS PASSED"),
        "{said}{}",
        String::from_utf8_lossy(&python.stderr)
    );
    // A hostPort answers on the node's address.
    let host_port = free_port();
    let ip = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .to_owned();
    kubectl_ok(
        "default",
        kc,
        &[
            "run",
            "hostport",
            "--image",
            image,
            "--port=8080",
            "--overrides",
            &format!(
                r#"{{"spec":{{"containers":[{{"name":"hostport","image":"{image}","command":["httpd","-f","-p","8080"],"ports":[{{"containerPort":8080,"hostPort":{host_port}}}]}}]}}}}"#
            ),
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/hostport",
            "--for=condition=Ready",
            "--timeout=60s",
        ],
    );
    let code = wait_for("the hostPort to answer", Duration::from_secs(20), || {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "3",
            ])
            .arg(format!("http://{ip}:{host_port}/"))
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&out.stdout).into_owned();
        (code == "404").then_some(code)
    });
    assert_eq!(code, "404");
}
