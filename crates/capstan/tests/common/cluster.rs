//! A highly available cluster on one machine (issue 27): a 3-member etcd, 3 `capstan server`s
//! (the second and third joining the first with its server token), each on its own address in
//! a network namespace the test creates, and optionally one agent, on its own bridge, pod
//! range and kubelet port. Servers can be killed, stopped and started again; etcd members
//! killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_testkit::EtcdCluster;
use serde_json::Value;

use super::node::{Cleanup, wait_for};
use super::{Server, free_port, kubectl_any, kubectl_ok};

/// A network namespace of the test's own, which the calling thread (and every thread and
/// process it starts from then on) lives in: loopback up, with `addresses` on it (any address
/// may sit on loopback there, and the `kubernetes` endpoints may not be loopback ones).
/// Deleted when dropped (it lives on until its last process and the thread end).
pub struct Netns(String);

impl Netns {
    /// Creates `capstan-<prefix>-<pid>` and moves the calling thread into it.
    pub fn enter(prefix: &str, addresses: &[&str]) -> Netns {
        let name = format!("capstan-{prefix}-{}", std::process::id());
        // One left by an earlier run of this process id.
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &name]);
        let netns = Netns(name);
        let file = std::fs::File::open(format!("/run/netns/{}", netns.0)).unwrap();
        use std::os::fd::AsFd as _;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        ip(&["link", "set", "lo", "up"]);
        for address in addresses {
            ip(&["addr", "add", &format!("{address}/32"), "dev", "lo"]);
        }
        netns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().unwrap();
    assert!(status.success(), "ip {args:?}");
}

/// `kubeconfig` with its server replaced by `url`, written to `to`.
pub fn pointed_at(kubeconfig: &Path, url: &str, to: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let rewritten: String = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("server: ") {
            Some(_) => format!(
                "{}server: {url}",
                &line[..line.len() - line.trim_start().len()]
            ),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(rewritten, text, "a server line in {}", kubeconfig.display());
    std::fs::write(to, rewritten).unwrap();
    to.to_owned()
}

/// The addresses of the `default/kubernetes` Endpoints, sorted.
pub fn endpoint_addresses(kubeconfig: &Path) -> Vec<String> {
    let endpoints: Value = serde_json::from_str(&kubectl_ok(
        "default",
        kubeconfig,
        &["get", "endpoints", "kubernetes", "-o", "json"],
    ))
    .unwrap();
    let mut addresses: Vec<String> = endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|subset| subset["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|address| address["ip"].as_str().map(str::to_owned))
        .collect();
    addresses.sort();
    addresses
}

/// The node's Ready condition status, read through `kubeconfig` (empty if it cannot be read).
pub fn node_ready(kubeconfig: &Path, node: &str) -> String {
    super::node::jsonpath(
        kubeconfig,
        &["get", "node", node],
        r#"{.status.conditions[?(@.type=="Ready")].status}"#,
    )
}

/// What a cluster is built from: its addresses, pod range and node.
pub struct Layout {
    /// The network namespace's name prefix.
    pub netns: &'static str,
    /// The servers' addresses, the first the one the others join.
    pub servers: [&'static str; 3],
    /// The agent's node name, address and bridge; `None` for a cluster without a node.
    pub agent: Option<(&'static str, &'static str, &'static str)>,
    /// The cluster's pod range.
    pub cluster_cidr: &'static str,
}

/// A running agent: its process and its data directory, cleaned (pod sandboxes, containerd,
/// mounts, bridge) when dropped.
struct Agent {
    child: Child,
    // Runs after the process is killed.
    _cleanup: Cleanup,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cluster. Dropping it kills the agent (and cleans its node), the servers, then etcd.
pub struct HaCluster {
    agent: Option<Agent>,
    servers: Vec<Option<Server>>,
    /// The etcd members.
    pub etcd: EtcdCluster,
    /// Each server's flags, to start it again with.
    flags: Vec<Vec<String>>,
    /// The servers' port (the same on every address).
    pub port: u16,
    /// The server token the second and third servers joined with.
    pub token: String,
    /// The servers' addresses.
    pub ips: [&'static str; 3],
    node: Option<(&'static str, &'static str, &'static str)>,
    work: tempfile::TempDir,
    // Last: the namespace goes once everything in it has stopped.
    _netns: Netns,
}

/// The kube-system Leases the elected components hold.
pub const LEADER_LEASES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

impl HaCluster {
    /// Enters a new network namespace holding `layout`'s addresses, starts the etcd cluster,
    /// the first server (waiting until it holds the scheduler's and controller manager's
    /// Leases, so that the first server is the leader), the two others joining it with its
    /// server token, and the agent joining through the first server (waiting until its node is
    /// Ready).
    pub fn start(layout: &Layout) -> HaCluster {
        let mut addresses = layout.servers.to_vec();
        addresses.extend(layout.agent.map(|(_, ip, _)| ip));
        let netns = Netns::enter(layout.netns, &addresses);
        let etcd = EtcdCluster::start(3).expect("start a 3-member etcd cluster");
        let work = tempfile::tempdir().unwrap();
        let port = free_port();
        let endpoints = etcd.endpoints().join(",");
        let base = |ip: &str| -> Vec<String> {
            [
                "--datastore-endpoint",
                &endpoints,
                "--bind-address",
                ip,
                "--advertise-address",
                ip,
                "--cluster-cidr",
                layout.cluster_cidr,
                "--disable-metrics-server",
                "--disable-dns",
            ]
            .map(str::to_owned)
            .to_vec()
        };
        let mut cluster = HaCluster {
            agent: None,
            servers: vec![None, None, None],
            etcd,
            flags: vec![base(layout.servers[0])],
            port,
            token: String::new(),
            ips: layout.servers,
            node: layout.agent,
            work,
            _netns: netns,
        };
        cluster.start_server(0);
        let token = std::fs::read_to_string(cluster.data_dir(0).join("token")).unwrap();
        cluster.token = token.trim().to_owned();
        let first = cluster.kubeconfig(0);
        for lease in LEADER_LEASES {
            wait_for(
                &format!("the first server to hold {lease}"),
                Duration::from_secs(60),
                || Some(()).filter(|()| !leader_holder(&first, lease).is_empty()),
            );
        }
        for i in 1..3 {
            let mut flags = base(layout.servers[i]);
            flags.extend([
                "--server".to_owned(),
                cluster.url(0),
                "--token".to_owned(),
                cluster.token.clone(),
            ]);
            cluster.flags.push(flags);
            cluster.start_server(i);
        }
        if let Some((node, node_ip, bridge)) = layout.agent {
            let dir = cluster.work.path().join("agent");
            std::fs::create_dir_all(dir.join("agent/images")).unwrap();
            super::node::pack_busybox(&dir);
            let cleanup = Cleanup {
                data_dir: dir.clone(),
                bridge,
            };
            let (child, _) = super::node::spawn_agent(
                &cluster.url(0),
                &cluster.token,
                &dir,
                node,
                Some(node_ip),
                bridge,
            );
            cluster.agent = Some(Agent {
                child,
                _cleanup: cleanup,
            });
            super::node::wait_ready(&first, node);
        }
        cluster
    }

    /// Server `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.work.path().join(format!("server-{}", i + 1))
    }

    /// Server `i`'s URL.
    pub fn url(&self, i: usize) -> String {
        format!("https://{}:{}", self.ips[i], self.port)
    }

    /// An admin kubeconfig for server `i` alone.
    pub fn kubeconfig(&self, i: usize) -> PathBuf {
        let to = self.work.path().join(format!("admin-{}.kubeconfig", i + 1));
        if !to.exists() {
            pointed_at(&self.data_dir(0).join("kubeconfig.yaml"), &self.url(i), &to);
        }
        to
    }

    /// The node's name (the cluster must have an agent).
    pub fn node(&self) -> &'static str {
        self.node.expect("a cluster with an agent").0
    }

    /// Starts server `i` (again) with its flags and waits until it is ready.
    pub fn start_server(&mut self, i: usize) {
        assert!(self.servers[i].is_none(), "server {} runs", i + 1);
        let flags: Vec<&str> = self.flags[i].iter().map(String::as_str).collect();
        let server = Server::start_with(&self.data_dir(i), self.port, &flags);
        self.servers[i] = Some(server);
    }

    /// Kills server `i` with SIGKILL, as a crash.
    pub fn kill_server(&mut self, i: usize) {
        self.servers[i].take().expect("a running server").kill();
    }

    /// Stops server `i` with SIGTERM, asserting that it exits cleanly.
    pub fn stop_server(&mut self, i: usize) {
        self.servers[i].take().expect("a running server").stop();
    }

    /// Deletes every pod of the default namespace (and what owns them) through server `i`,
    /// waits until they are gone, then stops the agent with SIGTERM.
    pub fn stop_agent(&mut self, i: usize) {
        let kubeconfig = self.kubeconfig(i);
        kubectl_ok(
            "default",
            &kubeconfig,
            &[
                "delete",
                "deployments,replicasets,pods",
                "--all",
                "--wait=false",
            ],
        );
        wait_for("the pods to be removed", Duration::from_secs(120), || {
            let output = kubectl_any("default", &kubeconfig, &["get", "pods", "-o", "name"]);
            (output.status.success() && output.stdout.is_empty()).then_some(())
        });
        if let Some(mut agent) = self.agent.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &agent.child.id().to_string()])
                .status();
            let _ = agent.child.wait();
        }
    }
}

/// The holder of the `kube-system/<lease>` Lease, read through `kubeconfig` (empty if none or
/// it cannot be read).
pub fn leader_holder(kubeconfig: &Path, lease: &str) -> String {
    super::node::jsonpath(
        kubeconfig,
        &["get", "lease", "-n", "kube-system", lease],
        "{.spec.holderIdentity}",
    )
}
