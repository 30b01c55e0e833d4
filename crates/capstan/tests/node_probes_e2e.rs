//! End to end: container probes, lifecycle hooks and termination messages on a real node (the
//! node agent inside `capstan server`, its own containerd, runc and CNI plugins, the preloaded
//! busybox image), driven with stock kubectl. One test so the node starts once; its pods run
//! side by side:
//!
//! - `ready`: an exec readiness probe keeps the pod unready until the container creates the
//!   file the probe tests;
//! - `live`: an HTTP liveness probe against a port nothing listens on has the container
//!   killed (with the probe's own grace period) and restarted, again and again;
//! - `web`: busybox httpd, ready by a TCP probe on a named port, alive by an HTTP probe;
//! - `startup`: a startup probe holds the liveness probe back (which would otherwise kill the
//!   container at once) and keeps the container not started and unready until it passes;
//! - `hooks`: a postStart hook writes a file the container waits for, a preStop hook writes
//!   to a hostPath volume when the pod is deleted;
//! - `bad-hook`: a failing postStart hook has its container killed and restarted;
//! - `stuck-hook`: a postStart hook that never ends does not hold up the pod's deletion;
//! - `messages`: termination messages from the file, a custom path, and the log's end;
//!
//! and, before them, the node's own admission of pods bound to it without the scheduler: too
//! much CPU, a node selector it does not match, and a host port already taken each fail the pod
//! (`Pod was rejected: ...`) with upstream's reason and an event, while a fitting pod runs.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::node::{IMAGE, NodeDir, jsonpath, node_flags, wait_event, wait_for, wait_ready};
use common::{Server, free_port, kubectl_ok, kubectl_stdin};

/// This test's node and pod network: its own bridge and range, beside node_e2e's.
const NODE: &str = "probe-node";
const BRIDGE: &str = "capnode1";
const CLUSTER_CIDR: &str = "10.202.0.0/16";

/// A field of a pod, by JSONPath.
fn field(kc: &Path, pod: &str, path: &str) -> String {
    jsonpath(kc, &["get", "pod", pod], path)
}

fn running(kc: &Path, pod: &str) -> bool {
    !field(
        kc,
        pod,
        "{.status.containerStatuses[0].state.running.startedAt}",
    )
    .is_empty()
}

fn ready_condition(kc: &Path, pod: &str) -> String {
    field(kc, pod, "{.status.conditions[?(@.type==\"Ready\")].status}")
}

fn restarts(kc: &Path, pod: &str) -> u32 {
    field(kc, pod, "{.status.containerStatuses[0].restartCount}")
        .parse()
        .unwrap_or(0)
}

fn pods(image: &str, out: &Path) -> String {
    let out = out.display();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: ready}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {image}
    command: ["sh", "-c", "sleep 8; touch /tmp/ready; exec sleep 3600"]
    readinessProbe:
      exec: {{command: ["test", "-f", "/tmp/ready"]}}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: startup}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {image}
    command: ["sh", "-c", "sleep 8; touch /tmp/started; exec sleep 3600"]
    startupProbe:
      exec: {{command: ["test", "-f", "/tmp/started"]}}
      periodSeconds: 1
      failureThreshold: 60
    livenessProbe:
      exec: {{command: ["test", "-f", "/tmp/started"]}}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: live}}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: app
    image: {image}
    command: ["sleep", "3600"]
    livenessProbe:
      httpGet: {{path: /healthz, port: 9999}}
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: {image}
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{{name: http, containerPort: 8080}}]
    readinessProbe:
      tcpSocket: {{port: http}}
      periodSeconds: 1
    livenessProbe:
      httpGet: {{path: /index.html, port: http}}
      # httpd needs a moment to listen after the container starts.
      initialDelaySeconds: 2
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: hooks}}
spec:
  terminationGracePeriodSeconds: 10
  volumes:
  - name: out
    hostPath: {{path: "{out}", type: DirectoryOrCreate}}
  containers:
  - name: app
    image: {image}
    command:
    - sh
    - -c
    - trap 'exit 0' TERM; while [ ! -f /tmp/poststart ]; do sleep 1; done; cp /tmp/poststart /out/seen; while true; do sleep 1; done
    volumeMounts: [{{name: out, mountPath: /out}}]
    lifecycle:
      postStart:
        exec: {{command: ["sh", "-c", "echo hello > /tmp/poststart"]}}
      preStop:
        exec: {{command: ["sh", "-c", "echo bye > /out/prestop"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: bad-hook}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {image}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      postStart:
        exec: {{command: ["sh", "-c", "exit 7"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: stuck-hook}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {image}
    command: ["sleep", "3600"]
    lifecycle:
      postStart:
        exec: {{command: ["sleep", "3600"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: messages}}
spec:
  restartPolicy: Never
  containers:
  - name: file
    image: {image}
    command: ["sh", "-c", "printf done > /dev/termination-log"]
  - name: custom
    image: {image}
    command: ["sh", "-c", "printf custom > /tmp/message"]
    terminationMessagePath: /tmp/message
  - name: logs
    image: {image}
    command: ["sh", "-c", "echo first; echo oops; exit 2"]
    terminationMessagePolicy: FallbackToLogsOnError
"#
    )
}

/// Pods bound straight to the node (no scheduler) that it cannot run.
fn node_admission(kc: &Path, image: &str) {
    let pod = |name: &str, extra: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 0{extra}
  containers:
  - name: app
    image: {image}
    command: ["sleep", "3600"]
    ports: [{{containerPort: 80, hostPort: 18080}}]
    resources: {{requests: {{cpu: {cpu}}}}}
---"#,
            cpu = if name == "greedy" { "1000" } else { "10m" }
        )
    };
    let manifests = [
        pod("port-holder", ""),
        pod("greedy", ""),
        pod("elsewhere", "\n  nodeSelector: {disk: none}"),
    ]
    .concat();
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &manifests);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let rejected = |name: &str| {
        wait_for(
            &format!("{name} to be rejected"),
            Duration::from_secs(30),
            || {
                let phase = field(kc, name, "{.status.phase}");
                (phase == "Failed").then(|| {
                    (
                        field(kc, name, "{.status.reason}"),
                        field(kc, name, "{.status.message}"),
                    )
                })
            },
        )
    };
    let (reason, message) = rejected("greedy");
    assert_eq!(reason, "OutOfcpu");
    assert!(
        message.starts_with(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, used: "
        ),
        "{message}"
    );
    let event = wait_event(kc, "greedy", "OutOfcpu", |_| true);
    assert_eq!(event.type_, "Warning");
    assert_eq!(
        format!("Pod was rejected: {}", event.message),
        message,
        "the event says what the status says"
    );
    let (reason, message) = rejected("elsewhere");
    assert_eq!(reason, "NodeAffinity");
    assert_eq!(
        message,
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    // The first pod holds the host port; another pod wanting it is turned away.
    wait_for("the port holder to run", Duration::from_secs(60), || {
        running(kc, "port-holder").then_some(())
    });
    let taken = kubectl_stdin("default", kc, &["apply", "-f", "-"], &pod("port-taker", ""));
    assert!(taken.status.success());
    let (reason, _) = rejected("port-taker");
    assert_eq!(reason, "NodePorts");
    // Nothing of the rejected pods reached the runtime: they never got a start time.
    for name in ["greedy", "elsewhere", "port-taker"] {
        assert_eq!(field(kc, name, "{.status.startTime}"), "", "{name}");
    }
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "port-holder",
            "greedy",
            "elsewhere",
            "port-taker",
            "--wait=true",
            "--timeout=60s",
        ],
    );
}

#[test]
fn probes_hooks_and_termination_messages() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let image = IMAGE;
    let out = data_dir.join("hooks-out");
    let port = free_port();
    let flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, port, &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, NODE);
    node_admission(kc, image);
    let created = kubectl_stdin("default", kc, &["apply", "-f", "-"], &pods(image, &out));
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );

    // Readiness: running but not ready until the probe's file exists.
    wait_for("the ready pod to run", Duration::from_secs(60), || {
        running(kc, "ready").then_some(())
    });
    assert_eq!(
        field(kc, "ready", "{.status.containerStatuses[0].ready}"),
        "false"
    );
    assert_eq!(
        field(kc, "ready", "{.status.containerStatuses[0].started}"),
        "true"
    );
    assert_eq!(ready_condition(kc, "ready"), "False");
    // Startup: not started (so not ready) while the startup probe fails; the liveness probe,
    // which would fail too, waits for it.
    wait_for("the startup pod to run", Duration::from_secs(30), || {
        running(kc, "startup").then_some(())
    });
    assert_eq!(
        field(kc, "startup", "{.status.containerStatuses[0].started}"),
        "false"
    );
    assert_eq!(ready_condition(kc, "startup"), "False");

    wait_for(
        "the ready pod to turn ready",
        Duration::from_secs(30),
        || (ready_condition(kc, "ready") == "True").then_some(()),
    );
    assert_eq!(
        field(kc, "ready", "{.status.containerStatuses[0].ready}"),
        "true"
    );
    wait_for("the startup pod to start", Duration::from_secs(30), || {
        let started = field(kc, "startup", "{.status.containerStatuses[0].started}");
        (started == "true" && ready_condition(kc, "startup") == "True").then_some(())
    });
    assert_eq!(restarts(kc, "startup"), 0, "liveness ran before startup");

    // TCP readiness on a named port, HTTP liveness that holds.
    wait_for("the web pod to turn ready", Duration::from_secs(30), || {
        (ready_condition(kc, "web") == "True").then_some(())
    });
    assert_eq!(restarts(kc, "web"), 0);

    // Liveness: the container is killed and restarted, again and again; the last exit shows.
    wait_for("liveness restarts", Duration::from_secs(60), || {
        (restarts(kc, "live") >= 2).then_some(())
    });
    let exit = field(
        kc,
        "live",
        "{.status.containerStatuses[0].lastState.terminated.exitCode}",
    );
    assert!(exit == "137" || exit == "143", "last exit {exit}");
    // Each failure is an Unhealthy event about the container, each kill a Killing one.
    let unhealthy = wait_event(kc, "live", "Unhealthy", |_| true);
    assert!(
        unhealthy
            .message
            .starts_with("Liveness probe failed: Get \"http://"),
        "{}",
        unhealthy.message
    );
    assert_eq!(
        (unhealthy.type_.as_str(), unhealthy.field_path.as_str()),
        ("Warning", "spec.containers{app}")
    );
    let killing = wait_event(kc, "live", "Killing", |_| true);
    assert_eq!(
        killing.message,
        "Container app failed liveness probe, will be restarted"
    );
    let unready = wait_event(kc, "ready", "Unhealthy", |_| true);
    assert_eq!(unready.message, "Readiness probe failed: ");

    // A failing postStart hook kills its container, which is restarted.
    wait_for("the bad hook's restart", Duration::from_secs(60), || {
        let exited = field(
            kc,
            "bad-hook",
            "{.status.containerStatuses[0].lastState.terminated.exitCode}",
        );
        (restarts(kc, "bad-hook") >= 1 && !exited.is_empty()).then_some(())
    });
    let hook = wait_event(kc, "bad-hook", "FailedPostStartHook", |_| true);
    assert!(
        hook.message
            .starts_with("Exec lifecycle hook ([sh -c exit 7])"),
        "{}",
        hook.message
    );
    wait_event(kc, "bad-hook", "Killing", |e| {
        e.message == "FailedPostStartHook"
    });
    // A postStart hook that never ends does not hold the pod's deletion up.
    wait_event(kc, "stuck-hook", "Started", |_| true);
    std::thread::sleep(Duration::from_secs(1));
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "stuck-hook",
            "--wait=true",
            "--timeout=30s",
        ],
    );

    // Termination messages.
    wait_for(
        "the messages pod to finish",
        Duration::from_secs(60),
        || (field(kc, "messages", "{.status.phase}") == "Failed").then_some(()),
    );
    let message = |container: &str| {
        field(
            kc,
            "messages",
            &format!(
                "{{.status.containerStatuses[?(@.name==\"{container}\")].state.terminated.message}}"
            ),
        )
    };
    assert_eq!(message("file"), "done");
    assert_eq!(message("custom"), "custom");
    assert_eq!(message("logs"), "first\noops\n");

    // Hooks: the container saw what postStart wrote; preStop runs on deletion.
    let seen = wait_for("the postStart file", Duration::from_secs(30), || {
        std::fs::read_to_string(out.join("seen")).ok()
    });
    assert_eq!(seen, "hello\n");
    assert!(!out.join("prestop").exists());
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "hooks", "--wait=true", "--timeout=60s"],
    );
    let bye = std::fs::read_to_string(out.join("prestop")).expect("the preStop hook ran");
    assert_eq!(bye, "bye\n");
    wait_event(kc, "hooks", "Killing", |e| {
        e.message == "Stopping container app"
    });

    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "--all",
            "--grace-period=1",
            "--wait=true",
            "--timeout=60s",
        ],
    );
    server.stop();
}
