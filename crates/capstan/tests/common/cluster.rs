//! A highly available cluster on one machine (issue 27): a 3-member etcd, 3 `capstan server`s
//! (the second and third joining the first with its server token), each on its own address in
//! a network namespace the test creates, and agents, each in a network namespace of its own
//! joined to the servers' by a veth pair (its own address, bridge, pod range and kubelet port).
//! Servers can be killed, stopped and started again; etcd members killed; an agent cut off
//! from the servers (its link dropping every packet) and joined again.

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
    /// Creates the namespace `name` (replacing one an earlier run of this process id left),
    /// its loopback up.
    fn add(name: String) -> Netns {
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns(name)
    }

    /// Creates `capstan-<prefix>-<pid>` and moves the calling thread into it.
    pub fn enter(prefix: &str, addresses: &[&str]) -> Netns {
        let netns = Netns::add(format!("capstan-{prefix}-{}", std::process::id()));
        let file = std::fs::File::open(format!("/run/netns/{}", netns.0)).unwrap();
        use std::os::fd::AsFd as _;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
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

/// Runs `commands` as one nftables transaction (`nft -f -`): all of them apply, or none.
fn nft(commands: &[String]) {
    use std::io::Write as _;
    let script = commands.join("\n");
    let mut nft = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = nft.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    assert!(nft.wait().unwrap().success(), "nft -f -:\n{script}");
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

/// An agent's own network namespace, joined to the servers' by a veth pair: `link` on the
/// servers' side (a route to the agent's address through it), `eth0` on the agent's (the
/// agent's address on it, the default route through it). Its pod bridge, pods and service
/// rules live there, as on a machine of its own. Dropping it removes the pair and the
/// namespace (which lives on until its last process ends).
struct AgentNet {
    link: String,
    netns: Netns,
}

impl AgentNet {
    fn create(netns: String, link: String, address: &str) -> AgentNet {
        let netns = Netns::add(netns);
        let name = netns.0.as_str();
        ip(&[
            "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", name,
        ]);
        ip(&["link", "set", &link, "up"]);
        ip(&["route", "add", &format!("{address}/32"), "dev", &link]);
        ip(&[
            "-n",
            name,
            "addr",
            "add",
            &format!("{address}/32"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", name, "link", "set", "eth0", "up"]);
        ip(&["-n", name, "route", "add", "default", "dev", "eth0"]);
        AgentNet { link, netns }
    }

    /// The nftables table that cuts this agent off while it exists.
    fn partition_table(&self) -> String {
        format!("capstan_partition_{}", self.link)
    }
}

impl Drop for AgentNet {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .stderr(Stdio::null())
            .status();
    }
}

/// One agent of a [`Layout`].
#[derive(Debug, Clone, Copy)]
pub struct AgentLayout {
    /// Its node's name.
    pub node: &'static str,
    /// Its address (on its own link, not the servers' loopback).
    pub ip: &'static str,
    /// Its pod bridge; also names its link in the servers' namespace (`v<bridge>`).
    pub bridge: &'static str,
}

/// What a cluster is built from: its addresses, pod range and nodes.
pub struct Layout {
    /// The network namespace's name prefix.
    pub netns: &'static str,
    /// The servers' addresses, the first the one the others join.
    pub servers: [&'static str; 3],
    /// The agents, none for a cluster without nodes.
    pub agents: &'static [AgentLayout],
    /// The cluster's pod range.
    pub cluster_cidr: &'static str,
    /// Flags every server gets besides the harness's own.
    pub server_flags: &'static [&'static str],
}

/// A running agent: its process and its data directory, cleaned (pod sandboxes, containerd,
/// mounts, bridge) when dropped, then its network namespace removed.
struct Agent {
    child: Child,
    // Run after the process is killed, in this order.
    _cleanup: Cleanup,
    net: AgentNet,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cluster. Dropping it kills the agents (and cleans their nodes), the servers, then etcd.
pub struct HaCluster {
    agents: Vec<Agent>,
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
    nodes: &'static [AgentLayout],
    work: tempfile::TempDir,
    // Last: the namespace goes once everything in it has stopped.
    netns: Netns,
}

/// The kube-system Leases the elected components hold.
pub const LEADER_LEASES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

impl HaCluster {
    /// Enters a new network namespace holding the servers' addresses, starts the etcd
    /// cluster, the first server (waiting until it holds the scheduler's and controller
    /// manager's Leases, so that the first server is the leader), the two others joining it
    /// with its server token, and each agent in its own namespace joining through the first
    /// server (waiting until every node is Ready).
    pub fn start(layout: &Layout) -> HaCluster {
        let netns = Netns::enter(layout.netns, &layout.servers);
        let etcd = EtcdCluster::start(3).expect("start a 3-member etcd cluster");
        let work = tempfile::tempdir().unwrap();
        let port = free_port();
        let endpoints = etcd.endpoints().join(",");
        let base = |ip: &str| -> Vec<String> {
            let mut flags: Vec<String> = [
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
            .to_vec();
            flags.extend(layout.server_flags.iter().map(|flag| (*flag).to_owned()));
            flags
        };
        let mut cluster = HaCluster {
            agents: Vec::new(),
            servers: vec![None, None, None],
            etcd,
            flags: vec![base(layout.servers[0])],
            port,
            token: String::new(),
            ips: layout.servers,
            nodes: layout.agents,
            work,
            netns,
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
        for agent in layout.agents {
            let net = AgentNet::create(
                format!("{}-{}", cluster.netns.0, agent.node),
                format!("v{}", agent.bridge),
                agent.ip,
            );
            let dir = cluster.work.path().join(agent.node);
            std::fs::create_dir_all(dir.join("agent/images")).unwrap();
            super::node::pack_busybox(&dir);
            let cleanup = Cleanup {
                data_dir: dir.clone(),
                bridge: agent.bridge,
            };
            let (child, _) = super::node::spawn_agent_in(
                &net.netns.0,
                &cluster.url(0),
                &cluster.token,
                &dir,
                agent.node,
                agent.ip,
                agent.bridge,
            );
            cluster.agents.push(Agent {
                child,
                _cleanup: cleanup,
                net,
            });
        }
        for agent in layout.agents {
            super::node::wait_ready(&first, agent.node);
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

    /// Agent `i`'s node name.
    pub fn node(&self, i: usize) -> &'static str {
        self.nodes[i].node
    }

    /// Cuts agent `i` off from the servers: the servers' namespace drops every packet coming in
    /// or going out through the agent's link (an nftables table of its own), so neither side
    /// hears from the other and connections between them hang, as across a network partition.
    pub fn partition(&self, i: usize) {
        let net = &self.agents[i].net;
        let (table, link) = (net.partition_table(), &net.link);
        nft(&[
            format!("add table inet {table}"),
            format!("add chain inet {table} input {{ type filter hook input priority -400; }}"),
            format!("add chain inet {table} output {{ type filter hook output priority -400; }}"),
            format!("add rule inet {table} input iifname {link} drop"),
            format!("add rule inet {table} output oifname {link} drop"),
        ]);
    }

    /// Ends agent `i`'s partition: its link carries packets again.
    pub fn heal(&self, i: usize) {
        let table = self.agents[i].net.partition_table();
        nft(&[format!("delete table inet {table}")]);
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
    /// waits until they are gone, then stops the agents with SIGTERM.
    pub fn stop_agents(&mut self, i: usize) {
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
        for mut agent in self.agents.drain(..) {
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
