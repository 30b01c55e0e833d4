//! End to end: the scheduler inside `capstan server`, with simulated nodes (`capstan sim`),
//! driven by stock kubectl. Pods are placed by node selector and affinity, taints, resources,
//! host ports, pod anti-affinity and topology spread; pods that fit nowhere get upstream's
//! `FailedScheduling` message and `PodScheduled=False`, and are placed once a node that fits
//! appears; a high-priority pod preempts; pods for another scheduler are left alone; a pod
//! with scheduling gates waits, counted as `gated` in `scheduler_pending_pods`, until its gates
//! are removed. On etcd the scheduler first takes its Lease.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{
    Datastore, Server, Sim, eventually, free_port, kubectl_any, kubectl_ok, kubectl_stdin_ok,
};

const KUBECTL: &str = "default";

fn jsonpath(kc: &Path, ns: &str, object: &str, path: &str) -> String {
    let out = kubectl_any(
        KUBECTL,
        kc,
        &["-n", ns, "get", object, "-o", &format!("jsonpath={path}")],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn node_of(kc: &Path, ns: &str, pod: &str) -> String {
    eventually(&format!("{ns}/{pod} to be bound"), || {
        let node = jsonpath(kc, ns, &format!("pod/{pod}"), "{.spec.nodeName}");
        (!node.is_empty()).then_some(node)
    })
}

/// The PodScheduled=False message once the scheduler has written one.
fn unschedulable_message(kc: &Path, ns: &str, pod: &str) -> String {
    eventually(&format!("{ns}/{pod} to be reported unschedulable"), || {
        let message = jsonpath(
            kc,
            ns,
            &format!("pod/{pod}"),
            "{.status.conditions[?(@.type==\"PodScheduled\")].message}",
        );
        (!message.is_empty()).then_some(message)
    })
}

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok(KUBECTL, kc, &["apply", "-f", "-"], manifest);
}

fn pod(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: {name}\nspec:\n{spec}\n"
    )
}

const BUSYBOX: &str = "  containers:\n  - name: c\n    image: busybox\n";

fn requesting(cpu: &str) -> String {
    format!(
        "  containers:\n  - name: c\n    image: busybox\n    resources:\n      requests:\n        cpu: \"{cpu}\"\n"
    )
}

fn placement(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "place"]);
    kubectl_ok(KUBECTL, kc, &["label", "node", "sim-node-1", "disk=ssd"]);
    // nodeSelector, the classic fit predicate.
    apply(
        kc,
        &pod(
            "place",
            "ssd",
            &format!("  nodeSelector:\n    disk: ssd\n{BUSYBOX}"),
        ),
    );
    assert_eq!(node_of(kc, "place", "ssd"), "sim-node-1");
    // Required node affinity.
    apply(
        kc,
        &pod(
            "place",
            "affine",
            &format!(
                "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - key: kubernetes.io/hostname\n            operator: NotIn\n            values: [sim-node-1, sim-node-2]\n{BUSYBOX}"
            ),
        ),
    );
    assert_eq!(node_of(kc, "place", "affine"), "sim-node-0");
    // Taints: only the untainted node takes a pod that tolerates nothing; a toleration opens
    // a tainted one.
    for node in ["sim-node-0", "sim-node-2"] {
        kubectl_ok(
            KUBECTL,
            kc,
            &["taint", "node", node, "dedicated=infra:NoSchedule"],
        );
    }
    apply(kc, &pod("place", "plain", BUSYBOX));
    assert_eq!(node_of(kc, "place", "plain"), "sim-node-1");
    apply(
        kc,
        &pod(
            "place",
            "tolerant",
            &format!(
                "  nodeSelector:\n    kubernetes.io/hostname: sim-node-2\n  tolerations:\n  - key: dedicated\n    operator: Equal\n    value: infra\n    effect: NoSchedule\n{BUSYBOX}"
            ),
        ),
    );
    assert_eq!(node_of(kc, "place", "tolerant"), "sim-node-2");
    apply(
        kc,
        &pod(
            "place",
            "intolerant",
            &format!("  nodeSelector:\n    kubernetes.io/hostname: sim-node-2\n{BUSYBOX}"),
        ),
    );
    assert_eq!(
        unschedulable_message(kc, "place", "intolerant"),
        // Taints are checked before affinity, so the tainted nodes report their taint.
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) \
         had untolerated taint {dedicated: infra}. preemption: 0/3 nodes are available: 3 \
         Preemption is not helpful for scheduling.."
    );
    // The same message as a FailedScheduling event, as kubectl describe shows it.
    let describe = kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "place", "describe", "pod", "intolerant"],
    );
    assert!(describe.contains("FailedScheduling"), "{describe}");
    assert!(describe.contains("default-scheduler"), "{describe}");
    // Removing the taint is a node update that retries the pod.
    kubectl_ok(
        KUBECTL,
        kc,
        &["taint", "node", "sim-node-2", "dedicated=infra:NoSchedule-"],
    );
    assert_eq!(node_of(kc, "place", "intolerant"), "sim-node-2");
    kubectl_ok(
        KUBECTL,
        kc,
        &["taint", "node", "sim-node-0", "dedicated=infra:NoSchedule-"],
    );
    let events = kubectl_ok(KUBECTL, kc, &["-n", "place", "get", "events"]);
    assert!(
        events.contains("Successfully assigned place/ssd to sim-node-1"),
        "{events}"
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &["delete", "namespace", "place", "--wait=false"],
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "place",
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
        ],
    );
}

fn resources_and_ports(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "fit"]);
    // Each node has 4 CPUs: 3.5 fills one, a second 3.5 goes elsewhere, 5 fits nowhere.
    apply(kc, &pod("fit", "big", &requesting("5")));
    assert_eq!(
        unschedulable_message(kc, "fit", "big"),
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 \
         Preemption is not helpful for scheduling.."
    );
    apply(kc, &pod("fit", "a", &requesting("3500m")));
    apply(kc, &pod("fit", "b", &requesting("3500m")));
    assert_ne!(node_of(kc, "fit", "a"), node_of(kc, "fit", "b"));
    // Host ports: a second pod asking for the same port on the same node waits.
    let port_pod = |name: &str| {
        pod(
            "fit",
            name,
            "  nodeSelector:\n    kubernetes.io/hostname: sim-node-0\n  containers:\n  - name: c\n    image: busybox\n    ports:\n    - containerPort: 80\n      hostPort: 8080\n",
        )
    };
    apply(kc, &port_pod("port1"));
    assert_eq!(node_of(kc, "fit", "port1"), "sim-node-0");
    apply(kc, &port_pod("port2"));
    let message = unschedulable_message(kc, "fit", "port2");
    assert!(
        message.contains("1 node(s) didn't have free ports for the requested pod ports"),
        "{message}"
    );
    // Deleting the first frees the port.
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "fit",
            "delete",
            "pod",
            "port1",
            "--grace-period=0",
            "--force",
        ],
    );
    assert_eq!(node_of(kc, "fit", "port2"), "sim-node-0");
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "fit",
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
        ],
    );
}

fn spreading(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "spread"]);
    // Required anti-affinity by host: one per node, the fourth waits.
    for i in 0..4 {
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: solo{i}\n  namespace: spread\n  labels:\n    app: solo\nspec:\n  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector:\n          matchLabels:\n            app: solo\n        topologyKey: kubernetes.io/hostname\n{BUSYBOX}"
        );
        apply(kc, &manifest);
        if i < 3 {
            node_of(kc, "spread", &format!("solo{i}"));
        }
    }
    let mut nodes: Vec<String> = (0..3)
        .map(|i| node_of(kc, "spread", &format!("solo{i}")))
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    let message = unschedulable_message(kc, "spread", "solo3");
    assert!(
        message.contains("3 node(s) didn't match pod anti-affinity rules"),
        "{message}"
    );
    // Topology spread: six pods with maxSkew 1 over hosts land two per node.
    for i in 0..6 {
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: even{i}\n  namespace: spread\n  labels:\n    app: even\nspec:\n  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: kubernetes.io/hostname\n    whenUnsatisfiable: DoNotSchedule\n    labelSelector:\n      matchLabels:\n        app: even\n{BUSYBOX}"
        );
        apply(kc, &manifest);
        // One at a time, so each placement sees the previous ones through the watch.
        node_of(kc, "spread", &format!("even{i}"));
    }
    let mut per_node = std::collections::BTreeMap::new();
    for i in 0..6 {
        *per_node
            .entry(node_of(kc, "spread", &format!("even{i}")))
            .or_insert(0) += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{per_node:?}"
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "spread",
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
        ],
    );
}

fn arrival_and_preemption(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "late"]);
    // No node has the label yet: the pod waits, and is placed once a node that has it joins.
    apply(
        kc,
        &pod(
            "late",
            "waiting",
            &format!("  nodeSelector:\n    arrival: late\n{BUSYBOX}"),
        ),
    );
    let message = unschedulable_message(kc, "late", "waiting");
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    let _late = Sim::start(
        kc,
        &[
            "--nodes",
            "1",
            "--name-prefix",
            "late-",
            "--cpu",
            "1",
            "--memory",
            "2Gi",
            "--label",
            "arrival=late",
        ],
    );
    assert_eq!(node_of(kc, "late", "waiting"), "late-0");
    // Preemption: fill the late node with a low-priority pod, then a high-priority one that
    // needs its room evicts it and takes its place.
    apply(
        kc,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: e2e-high\nvalue: 1000\n",
    );
    let on_late = |name: &str, extra: &str| {
        pod(
            "late",
            name,
            &format!(
                "  nodeSelector:\n    arrival: late\n{extra}  containers:\n  - name: c\n    image: busybox\n    resources:\n      requests:\n        cpu: 800m\n"
            ),
        )
    };
    apply(kc, &on_late("victim", ""));
    assert_eq!(node_of(kc, "late", "victim"), "late-0");
    apply(kc, &on_late("preemptor", "  priorityClassName: e2e-high\n"));
    assert_eq!(
        jsonpath(kc, "late", "pod/preemptor", "{.spec.priority}"),
        "1000"
    );
    assert_eq!(node_of(kc, "late", "preemptor"), "late-0");
    eventually("the victim to be gone", || {
        let out = kubectl_any(KUBECTL, kc, &["-n", "late", "get", "pod", "victim"]);
        (!out.status.success()).then_some(())
    });
    let events = kubectl_ok(KUBECTL, kc, &["-n", "late", "get", "events"]);
    assert!(events.contains("Preempted"), "{events}");
    // A pod for another scheduler is left alone: no node, no condition.
    apply(
        kc,
        &pod(
            "late",
            "other",
            &format!("  schedulerName: someone-else\n{BUSYBOX}"),
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(jsonpath(kc, "late", "pod/other", "{.spec.nodeName}"), "");
    assert_eq!(
        jsonpath(kc, "late", "pod/other", "{.status.conditions}"),
        ""
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "late",
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
        ],
    );
}

/// The scheduler's `scheduler_pending_pods{queue="gated"}` on the API server's `/metrics`.
fn gated_pending(kc: &Path) -> String {
    let metrics = kubectl_ok(KUBECTL, kc, &["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("scheduler_pending_pods{queue=\"gated\"} "))
        .unwrap_or_default()
        .to_owned()
}

fn gates(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "gates"]);
    let spec = format!("  schedulingGates:\n  - name: example.com/wait\n{BUSYBOX}");
    apply(kc, &pod("gates", "held", &spec));
    eventually("the gated pod to be counted", || {
        (gated_pending(kc) == "1").then_some(())
    });
    // Held: no node, and upstream's SchedulingGated condition is the API server's to write.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(jsonpath(kc, "gates", "pod/held", "{.spec.nodeName}"), "");
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "gates",
            "patch",
            "pod",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
        ],
    );
    assert!(!node_of(kc, "gates", "held").is_empty());
    eventually("the gated count to drop", || {
        (gated_pending(kc) == "0").then_some(())
    });
}

#[test]
fn scheduler_places_pods_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "3", "--cpu", "4", "--memory", "8Gi"]);
    eventually("three ready nodes", || {
        let out = kubectl_ok(KUBECTL, &kc, &["get", "nodes", "--no-headers"]);
        (out.lines().filter(|l| l.contains(" Ready ")).count() == 3).then_some(())
    });
    placement(&kc);
    resources_and_ports(&kc);
    spreading(&kc);
    arrival_and_preemption(&kc);
    gates(&kc);
    // The scheduler's own identity is RBAC-limited: it is not the admin.
    let can = kubectl_any(
        KUBECTL,
        &kc,
        &[
            "auth",
            "can-i",
            "delete",
            "nodes",
            "--as",
            "system:kube-scheduler",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");
    server.stop();
}

#[test]
fn scheduler_takes_its_lease_on_etcd() {
    let datastore = Datastore::start("etcd");
    let dir = tempfile::tempdir().unwrap();
    let flags = datastore.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_with(dir.path(), free_port(), &flags);
    let kc = server.kubeconfig();
    let holder = eventually("the scheduler's lease", || {
        let holder = jsonpath(
            &kc,
            "kube-system",
            "lease/kube-scheduler",
            "{.spec.holderIdentity}",
        );
        (!holder.is_empty()).then_some(holder)
    });
    let _sim = Sim::start(&kc, &["--nodes", "1"]);
    kubectl_ok(KUBECTL, &kc, &["run", "one", "--image=busybox"]);
    assert_eq!(node_of(&kc, "default", "one"), "sim-node-0");
    // The leader keeps renewing; the holder does not change.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        jsonpath(
            &kc,
            "kube-system",
            "lease/kube-scheduler",
            "{.spec.holderIdentity}"
        ),
        holder
    );
    server.stop();
}
