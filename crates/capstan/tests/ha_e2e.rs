//! End to end: three servers on a 3-member etcd, as a user runs them (issue 27). Each test
//! builds the cluster of `common::cluster` in a network namespace of its own: the servers on
//! their own addresses, the second and third joined to the first with its server token.
//!
//! - Services created concurrently through all three servers get distinct cluster IPs and
//!   NodePorts, and every server lists all of them; with an etcd member killed (a follower,
//!   then the leader), writes through every server keep succeeding and watches through every
//!   server see them.
//! - The server leading the scheduler and controllers is killed: the others serve, the
//!   Leases move, the node stays Ready and no pod restarts; nor in a rolling restart. A server
//!   stopped gracefully leaves the `kubernetes` endpoints as it goes.
//! - One of two agents is cut off from the servers by a network partition: its node goes
//!   Unknown and is tainted unreachable, its pod is evicted once its toleration ran out and
//!   replaced on the other node; healed, the node is Ready again and the kubelet removes the
//!   evicted pod.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::cluster::{AgentLayout, HaCluster, Layout};
use common::node::wait_for;
use common::*;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};

/// How many Services the allocation test creates.
const SERVICES: usize = 200;

/// Each Service's (cluster IP, NodePort) as listed through `kubeconfig`, by name, for the
/// Services labelled `ha=alloc`.
fn listed_services(kubeconfig: &Path) -> BTreeMap<String, (String, i64)> {
    let output = kubectl_any(
        "default",
        kubeconfig,
        &["get", "services", "-l", "ha=alloc", "-o", "json"],
    );
    let list: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|service| {
            (
                service["metadata"]["name"].as_str().unwrap().to_owned(),
                (
                    service["spec"]["clusterIP"].as_str().unwrap().to_owned(),
                    service["spec"]["ports"][0]["nodePort"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

/// Creates the Services `alloc-<n>` (NodePort) through the three servers at once, each server
/// taking every third, several requests in flight on each; their allocations as the creates
/// answered, by name.
fn create_services_concurrently(cluster: &HaCluster) -> BTreeMap<String, (String, i64)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for i in 0..3 {
            clients.push(kube_client(&cluster.kubeconfig(i)).await);
        }
        let creates = (0..SERVICES).map(|n| {
            let api: kube::Api<Service> = kube::Api::namespaced(clients[n % 3].clone(), "default");
            async move {
                let service: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("alloc-{n}"), "labels": {"ha": "alloc"}},
                    "spec": {
                        "type": "NodePort",
                        "selector": {"app": format!("alloc-{n}")},
                        "ports": [{"port": 80, "targetPort": 8080}],
                    },
                }))
                .unwrap();
                let created = api
                    .create(&kube::api::PostParams::default(), &service)
                    .await
                    .unwrap_or_else(|e| panic!("create alloc-{n} through server {}: {e}", n % 3));
                let spec = created.spec.unwrap();
                let node_port = spec.ports.unwrap()[0].node_port.unwrap();
                (
                    format!("alloc-{n}"),
                    (spec.cluster_ip.unwrap(), i64::from(node_port)),
                )
            }
        });
        futures::stream::iter(creates)
            .buffer_unordered(24)
            .collect::<BTreeMap<_, _>>()
            .await
    })
}

/// Creates the ConfigMap `name` labelled `ha=etcd` with `server` in its data through
/// `kubeconfig`.
fn create_config_map(kubeconfig: &Path, name: &str, server: &str) {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{ha: etcd}}\n\
         data:\n  server: \"{server}\"\n"
    );
    let output = kubectl_stdin("default", kubeconfig, &["create", "-f", "-"], &manifest);
    assert!(
        output.status.success(),
        "create {name} through {}: {}",
        kubeconfig.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Creates the ConfigMap `<prefix>-<n>` through server `n` for each server, each read back at
/// once through every server; the names as a watch prints them.
fn writes_through_every_server(cluster: &HaCluster, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for i in 0..3 {
        let name = format!("{prefix}-{}", i + 1);
        create_config_map(&cluster.kubeconfig(i), &name, &(i + 1).to_string());
        for j in 0..3 {
            let read = kubectl_ok(
                "default",
                &cluster.kubeconfig(j),
                &["get", "configmap", &name, "-o", "jsonpath={.data.server}"],
            );
            assert_eq!(read, (i + 1).to_string(), "{name} through server {}", j + 1);
        }
        names.insert(format!("configmap/{name}"));
    }
    names
}

/// The etcd member (of `members`, those running) that is the Raft leader, as the members
/// report (`etcdctl endpoint status`); `None` while they name none of them or disagree.
fn etcd_leader(cluster: &HaCluster, members: &[usize]) -> Option<usize> {
    let endpoints: Vec<String> = members
        .iter()
        .map(|m| cluster.etcd.member(*m).endpoint())
        .collect();
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoints.join(","), "--command-timeout=2s"])
        .args(["endpoint", "status", "-w", "json"])
        .output()
        .unwrap();
    let statuses: Vec<Value> = serde_json::from_slice(&output.stdout).ok()?;
    let leaders: BTreeSet<usize> = statuses
        .iter()
        .filter(|status| {
            let status = &status["Status"];
            status["leader"].as_u64().is_some() && status["leader"] == status["header"]["member_id"]
        })
        .map(|status| {
            let endpoint = status["Endpoint"].as_str().unwrap();
            members[endpoints.iter().position(|e| e == endpoint).unwrap()]
        })
        .collect();
    (statuses.len() == members.len() && leaders.len() == 1)
        .then(|| leaders.into_iter().next())
        .flatten()
}

/// A `kubectl get configmaps -l ha=etcd --watch -o name` through `kubeconfig`: the names it
/// prints arrive on the receiver. Killed when dropped.
struct Watch {
    child: std::process::Child,
    names: mpsc::Receiver<String>,
}

impl Watch {
    fn start(kubeconfig: &Path) -> Watch {
        let mut child = Command::new(kubectl_binary("default"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "get",
                "configmaps",
                "-l",
                "ha=etcd",
                "--watch",
                "-o",
                "name",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, names) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line.trim().to_owned()).is_err() {
                    break;
                }
            }
        });
        Watch { child, names }
    }

    /// Waits until the watch has printed every name of `expected`.
    fn sees(&self, expected: &BTreeSet<String>, what: &str) {
        let mut seen = BTreeSet::new();
        while !expected.is_subset(&seen) {
            match self.names.recv_timeout(Duration::from_secs(60)) {
                Ok(name) => {
                    seen.insert(name);
                }
                Err(_) => panic!("{what}: saw {seen:?}, waiting for {expected:?}"),
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 200 NodePort Services created at once through three servers get 200 distinct cluster IPs
/// and 200 distinct NodePorts, each server lists all 200 with the allocation its create
/// answered. Then an etcd follower is killed: a ConfigMap created through each server at once
/// reads back through every server, and watches opened through each server before the kill see
/// all three; the follower restarted, the etcd leader is killed: once the others have elected
/// a new one, the same holds.
#[test]
fn three_servers_allocate_distinct_addresses_and_survive_an_etcd_member() {
    let mut cluster = HaCluster::start(&Layout {
        netns: "ha-alloc",
        servers: ["10.223.0.1", "10.223.0.2", "10.223.0.3"],
        agents: &[],
        cluster_cidr: "10.224.0.0/16",
        server_flags: &[],
    });

    let created = create_services_concurrently(&cluster);
    assert_eq!(created.len(), SERVICES);
    let ips: BTreeSet<&String> = created.values().map(|(ip, _)| ip).collect();
    let ports: BTreeSet<i64> = created.values().map(|(_, port)| *port).collect();
    assert_eq!(ips.len(), SERVICES, "distinct cluster IPs: {created:?}");
    assert_eq!(ports.len(), SERVICES, "distinct NodePorts: {created:?}");
    for i in 0..3 {
        let kubeconfig = cluster.kubeconfig(i);
        wait_for(
            &format!("every Service listed through server {}", i + 1),
            Duration::from_secs(30),
            || (listed_services(&kubeconfig) == created).then_some(()),
        );
    }

    // Watches through every server, opened before the member goes.
    let watches: Vec<Watch> = (0..3)
        .map(|i| Watch::start(&cluster.kubeconfig(i)))
        .collect();
    // The watch has started once a ConfigMap created now shows up in it.
    create_config_map(&cluster.kubeconfig(0), "before-kill", "1");
    let before = BTreeSet::from(["configmap/before-kill".to_owned()]);
    for (i, watch) in watches.iter().enumerate() {
        watch.sees(&before, &format!("the watch through server {}", i + 1));
    }

    // A follower goes: there is no election, so writes through every server succeed at once.
    let leader = etcd_leader(&cluster, &[0, 1, 2]).expect("an etcd leader");
    let follower = (leader + 1) % 3;
    cluster.etcd.kill(follower);
    let names = writes_through_every_server(&cluster, "follower-gone");
    for (i, watch) in watches.iter().enumerate() {
        watch.sees(
            &names,
            &format!("the watch through server {} without a follower", i + 1),
        );
    }
    cluster.etcd.restart(follower).unwrap();

    // Then the leader: the two others elect a new one (a write sent meanwhile fails with
    // etcd's "request timed out, possibly due to previous leader failure", which clientv3 does
    // not retry and upstream's API server returns as it comes); from then on writes through
    // every server succeed, and the watches opened before see them.
    cluster.etcd.kill(leader);
    let live: Vec<usize> = (0..3).filter(|m| *m != leader).collect();
    wait_for("a new etcd leader", Duration::from_secs(30), || {
        etcd_leader(&cluster, &live)
    });
    let names = writes_through_every_server(&cluster, "leader-gone");
    for (i, watch) in watches.iter().enumerate() {
        watch.sees(
            &names,
            &format!("the watch through server {} without the leader", i + 1),
        );
    }
    drop(watches);
    for i in 0..3 {
        cluster.stop_server(i);
    }
}

/// A Lease's holder, renew time and acquire time, and its duration.
struct LeaseState {
    holder: String,
    renewed: String,
    acquired: String,
    seconds: i64,
    transitions: i64,
}

fn lease_state(kubeconfig: &Path, lease: &str) -> Option<LeaseState> {
    let output = kubectl_any(
        "default",
        kubeconfig,
        &["get", "lease", "-n", "kube-system", lease, "-o", "json"],
    );
    let lease: Value = serde_json::from_slice(&output.stdout).ok()?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Some(LeaseState {
        holder: text(&lease["spec"]["holderIdentity"]),
        renewed: text(&lease["spec"]["renewTime"]),
        acquired: text(&lease["spec"]["acquireTime"]),
        seconds: lease["spec"]["leaseDurationSeconds"].as_i64()?,
        transitions: lease["spec"]["leaseTransitions"]
            .as_i64()
            .unwrap_or_default(),
    })
}

/// Microseconds since the epoch of a Lease's MicroTime (`2006-01-02T15:04:05.000000Z`).
fn micros(time: &str) -> i64 {
    let stamp: k8s_openapi::jiff::Timestamp = time
        .parse()
        .unwrap_or_else(|e| panic!("a MicroTime, {time:?}: {e}"));
    stamp.as_microsecond()
}

/// A pod of the `web` Deployment as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WebPod {
    uid: String,
    node: String,
    phase: String,
    /// Its containers' restarts, summed.
    restarts: i64,
    /// Its Ready condition is True.
    ready: bool,
    /// It carries a deletion timestamp.
    deleting: bool,
}

/// The pods of the `web` Deployment, by name.
fn web_pods(kubeconfig: &Path) -> BTreeMap<String, WebPod> {
    let output = kubectl_ok(
        "default",
        kubeconfig,
        &["get", "pods", "-l", "app=web", "-o", "json"],
    );
    let list: Value = serde_json::from_str(&output).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pod| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let restarts = pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|status| status["restartCount"].as_i64().unwrap_or_default())
                .sum();
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (
                text(&pod["metadata"]["name"]),
                WebPod {
                    uid: text(&pod["metadata"]["uid"]),
                    node: text(&pod["spec"]["nodeName"]),
                    phase: text(&pod["status"]["phase"]),
                    restarts,
                    ready,
                    deleting: !pod["metadata"]["deletionTimestamp"].is_null(),
                },
            )
        })
        .collect()
}

/// Asserts that `kubeconfig` reaches a working server: nodes and namespaces list.
fn answers(kubeconfig: &Path) {
    let nodes = kubectl_ok("default", kubeconfig, &["get", "nodes", "-o", "name"]);
    assert!(nodes.contains("node/"), "{nodes}");
    kubectl_ok("default", kubeconfig, &["get", "namespaces"]);
}

/// Waits for the rollout of the `web` Deployment through `kubeconfig`.
fn rolled_out(kubeconfig: &Path) {
    kubectl_ok(
        "default",
        kubeconfig,
        &["rollout", "status", "deployment/web", "--timeout=180s"],
    );
}

/// The server holding the scheduler's and controller manager's Leases is killed (SIGKILL):
/// kubectl through the two others keeps working at once, both Leases move to a live server
/// once their duration has run out (never before), a Deployment scaled afterwards gets its
/// new pods scheduled and running on the node, whose agent fails over and which stays Ready,
/// and the pod that ran before runs on untouched (same UID, no restart). Then every server is
/// restarted in turn, each waited for (`/readyz`), the killed one first: no pod restarts, the
/// node stays Ready and all three servers are the `kubernetes` endpoints again.
#[test]
fn a_killed_leader_and_a_rolling_restart_restart_no_pod() {
    const NODE: &str = "ha-node";
    let mut cluster = HaCluster::start(&Layout {
        netns: "ha-kill",
        servers: ["10.225.0.1", "10.225.0.2", "10.225.0.3"],
        agents: &[AgentLayout {
            node: NODE,
            ip: "10.225.0.4",
            bridge: "capha0",
        }],
        cluster_cidr: "10.226.0.0/16",
        server_flags: &[],
    });
    let (kc1, kc2, kc3) = (
        cluster.kubeconfig(0),
        cluster.kubeconfig(1),
        cluster.kubeconfig(2),
    );
    eventually("three servers in default/kubernetes", || {
        (common::cluster::endpoint_addresses(&kc1) == cluster.ips).then_some(())
    });

    // A Deployment with one pod, running on the node.
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
         spec:\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: main\n        \
         image: {}\n        command: [sh, -c, 'sleep 3600']\n",
        common::node::IMAGE
    );
    let created = kubectl_stdin("default", &kc1, &["apply", "-f", "-"], &deployment);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    rolled_out(&kc1);
    let before = web_pods(&kc1);
    assert_eq!(before.len(), 1, "{before:?}");
    let (first_pod, first) = before.into_iter().next().unwrap();
    assert_eq!(
        (first.node.as_str(), first.phase.as_str(), first.restarts),
        (NODE, "Running", 0)
    );

    // The first server holds both Leases (it took them before the others started).
    let leases: Vec<(String, LeaseState)> = common::cluster::LEADER_LEASES
        .iter()
        .map(|name| ((*name).to_owned(), lease_state(&kc1, name).unwrap()))
        .collect();

    cluster.kill_server(0);
    // kubectl through the other two works at once.
    answers(&kc2);
    answers(&kc3);

    // The Leases move to a live server: not before their duration has run out since the last
    // renewal seen, and soon after.
    for (name, old) in &leases {
        let new = wait_for(
            &format!("{name} to move to a live server"),
            Duration::from_secs(u64::try_from(old.seconds).unwrap() * 3),
            || lease_state(&kc2, name).filter(|new| new.holder != old.holder),
        );
        assert!(!new.holder.is_empty(), "{name} held");
        assert_eq!(new.transitions, old.transitions + 1, "{name} transitions");
        let waited = micros(&new.acquired) - micros(&old.renewed);
        assert!(
            waited >= old.seconds * 1_000_000,
            "{name} taken {waited} µs after its last renewal, before its {} s ran out",
            old.seconds
        );
        eprintln!(
            "{name}: taken over {:.1} s after the dead leader's last renewal seen",
            waited as f64 / 1e6
        );
    }

    // A scale through the second server: the new pods are scheduled and run on the node.
    kubectl_ok(
        "default",
        &kc2,
        &["scale", "deployment", "web", "--replicas=3"],
    );
    rolled_out(&kc2);
    let scaled = web_pods(&kc3);
    assert_eq!(scaled.len(), 3, "{scaled:?}");
    for (name, pod) in &scaled {
        assert_eq!(
            (pod.node.as_str(), pod.phase.as_str(), pod.restarts),
            (NODE, "Running", 0),
            "{name}"
        );
    }
    assert_eq!(
        scaled[&first_pod].uid, first.uid,
        "the first pod is the same"
    );
    assert_eq!(common::cluster::node_ready(&kc2, NODE), "True");

    // A rolling restart, the killed server first: nothing restarts.
    cluster.start_server(0);
    for i in [1, 2, 0] {
        cluster.stop_server(i);
        let other = cluster.kubeconfig((i + 1) % 3);
        answers(&other);
        cluster.start_server(i);
        answers(&cluster.kubeconfig(i));
    }
    eventually("three servers in default/kubernetes again", || {
        (common::cluster::endpoint_addresses(&kc2) == cluster.ips).then_some(())
    });
    let after = web_pods(&kc1);
    assert_eq!(
        after.iter().map(|(n, p)| (n, &p.uid)).collect::<Vec<_>>(),
        scaled.iter().map(|(n, p)| (n, &p.uid)).collect::<Vec<_>>(),
        "the same pods"
    );
    for (name, pod) in &after {
        assert_eq!((pod.phase.as_str(), pod.restarts), ("Running", 0), "{name}");
    }
    assert_eq!(common::cluster::node_ready(&kc3, NODE), "True");

    // A server stopped gracefully (SIGTERM) takes itself out of the endpoints as it goes: by
    // the time it has exited its master lease is gone and the endpoints name the others, with
    // nothing left to expire.
    cluster.stop_server(2);
    let lease = etcdctl_get(
        &cluster,
        &format!("/registry/masterleases/{}", cluster.ips[2]),
    );
    assert!(
        lease.is_empty(),
        "the stopped server's master lease: {lease}"
    );
    assert_eq!(
        common::cluster::endpoint_addresses(&kc1),
        cluster.ips[..2],
        "the endpoints once the third server stopped"
    );

    cluster.stop_agents(0);
    cluster.stop_server(0);
    cluster.stop_server(1);
}

/// Node `node`'s taints as (key, effect), read through `kubeconfig`.
fn taints(kubeconfig: &Path, node: &str) -> Vec<(String, String)> {
    let output = kubectl_ok("default", kubeconfig, &["get", "node", node, "-o", "json"]);
    let node: Value = serde_json::from_str(&output).unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|taint| (text(&taint["key"]), text(&taint["effect"])))
        .collect()
}

/// The `web` Deployment's available replicas, read through `kubeconfig`.
fn available_replicas(kubeconfig: &Path) -> i64 {
    common::node::jsonpath(
        kubeconfig,
        &["get", "deployment", "web"],
        "{.status.availableReplicas}",
    )
    .parse()
    .unwrap_or_default()
}

/// Two pods spread one per node (a spread constraint that leaves out nodes with taints the
/// pods do not tolerate, so a replacement may go where its peer runs), tolerating the
/// `unreachable` and `not-ready` taints for 5 s only (rather than the 300 s admission gives),
/// ready once busybox's httpd answers the kubelet's TCP probe through the pod network.
const PARTITION_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: web}}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers:
      - name: main
        image: IMAGE
        command: [httpd, -f, -p, "8080"]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
"#;

/// Two agents, each in a network namespace of its own, run a Deployment of two pods, one per
/// node, which tolerate the `unreachable` and `not-ready` taints for 5 s. The first agent's
/// link to the servers is cut: its node goes Ready=Unknown and is tainted
/// `unreachable:NoExecute` once the grace period (30 s here) has passed, its pod is marked not
/// ready, and for deletion once its toleration ran out (and stays, Terminating, while its kubelet cannot act
/// on it), a replacement runs on the other node, and the Deployment has its two replicas
/// available again, the pod already there untouched. The link restored, the node is Ready
/// again and untainted, and its kubelet stops the evicted pod and removes it.
#[test]
fn a_partitioned_node_has_its_pods_evicted_and_replaced_elsewhere() {
    const CUT: &str = "part-a";
    const KEPT: &str = "part-b";
    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    const NOT_READY: &str = "node.kubernetes.io/not-ready";
    // Generous: every step waits on periodic work (heartbeats, the node monitor, retries of
    // connections the partition left hanging).
    const PATIENCE: Duration = Duration::from_secs(180);
    let mut cluster = HaCluster::start(&Layout {
        netns: "ha-part",
        servers: ["10.227.0.1", "10.227.0.2", "10.227.0.3"],
        agents: &[
            AgentLayout {
                node: CUT,
                ip: "10.227.0.4",
                bridge: "capha1",
            },
            AgentLayout {
                node: KEPT,
                ip: "10.227.0.5",
                bridge: "capha2",
            },
        ],
        cluster_cidr: "10.228.0.0/16",
        // Short, but thrice the kubelet's 10 s Lease renewal: a healthy node never misses it.
        server_flags: &["--node-monitor-grace-period", "30s"],
    });
    assert_eq!((cluster.node(0), cluster.node(1)), (CUT, KEPT));
    let kc = cluster.kubeconfig(0);

    let deployment = PARTITION_DEPLOYMENT.replace("IMAGE", common::node::IMAGE);
    let created = kubectl_stdin("default", &kc, &["apply", "-f", "-"], &deployment);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    rolled_out(&kc);
    let before = web_pods(&kc);
    assert_eq!(before.len(), 2, "{before:?}");
    let on = |node: &str| {
        before
            .iter()
            .find(|(_, pod)| pod.node == node)
            .map(|(name, pod)| (name.clone(), pod.clone()))
            .unwrap_or_else(|| panic!("a web pod on {node}: {before:?}"))
    };
    let (evicted, evicted_pod) = on(CUT);
    let (kept, kept_pod) = on(KEPT);
    for pod in [&evicted_pod, &kept_pod] {
        assert_eq!(
            (pod.phase.as_str(), pod.ready),
            ("Running", true),
            "{pod:?}"
        );
    }

    cluster.partition(0);
    wait_for("the cut-off node to go Unknown", PATIENCE, || {
        (common::cluster::node_ready(&kc, CUT) == "Unknown").then_some(())
    });
    wait_for(
        "the cut-off node to be tainted unreachable",
        PATIENCE,
        || {
            let taints = taints(&kc, CUT);
            let has = |effect: &str| taints.iter().any(|t| t.0 == UNREACHABLE && t.1 == effect);
            (has("NoExecute") && has("NoSchedule")).then_some(())
        },
    );
    assert_eq!(common::cluster::node_ready(&kc, KEPT), "True");
    // Marked not ready as its node went silent, then deleted once its toleration ran out.
    wait_for("the cut-off node's pod to be evicted", PATIENCE, || {
        web_pods(&kc)
            .get(&evicted)
            .filter(|pod| pod.deleting && !pod.ready)
            .map(drop)
    });
    let (replacement, replacement_pod) = wait_for(
        "a replacement pod ready on the other node",
        PATIENCE,
        || {
            web_pods(&kc).into_iter().find(|(name, pod)| {
                *name != evicted && *name != kept && pod.phase == "Running" && pod.ready
            })
        },
    );
    assert_eq!(
        replacement_pod.node, KEPT,
        "{replacement}: {replacement_pod:?}"
    );
    wait_for("two available replicas again", PATIENCE, || {
        (available_replicas(&kc) == 2).then_some(())
    });
    let during = web_pods(&kc);
    assert_eq!(
        during[&kept], kept_pod,
        "the pod on the other node is untouched"
    );
    assert!(
        during[&evicted].deleting,
        "the evicted pod stays while its node is cut off: {during:?}"
    );

    cluster.heal(0);
    wait_for("the node to be Ready again", PATIENCE, || {
        (common::cluster::node_ready(&kc, CUT) == "True").then_some(())
    });
    wait_for(
        "the node's unreachable and not-ready taints to go",
        PATIENCE,
        || {
            taints(&kc, CUT)
                .iter()
                .all(|(key, _)| key != UNREACHABLE && key != NOT_READY)
                .then_some(())
        },
    );
    wait_for("the evicted pod to be removed", PATIENCE, || {
        (!web_pods(&kc).contains_key(&evicted)).then_some(())
    });
    let after = web_pods(&kc);
    assert_eq!(
        after.keys().collect::<BTreeSet<_>>(),
        BTreeSet::from([&kept, &replacement]),
        "{after:?}"
    );
    for pod in after.values() {
        assert_eq!(
            (
                pod.node.as_str(),
                pod.phase.as_str(),
                pod.ready,
                pod.restarts
            ),
            (KEPT, "Running", true, 0),
            "{pod:?}"
        );
    }

    cluster.stop_agents(0);
    for i in 0..3 {
        cluster.stop_server(i);
    }
}

/// The value of `key` in the cluster's etcd (empty when there is none), read through its
/// members.
fn etcdctl_get(cluster: &HaCluster, key: &str) -> String {
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &cluster.etcd.endpoints().join(",")])
        .args(["get", key, "--print-value-only"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
