//! `capstan-bench pods`: a real node, measured: how long a pod takes from its create request to
//! `Running`, and what the node agent costs in CPU and memory.
//!
//! The run, on one temporary directory:
//! 1. **Baseline**: `capstan server --disable-agent` on a fresh data dir with the node's other
//!    flags; its CPU over a measured idle interval and its RSS. The agent's cost is the
//!    difference between this server and the one with the agent (the agent runs inside the
//!    server process).
//! 2. **Node**: Debian's busybox packed by `capstan image busybox` into the node's preload
//!    directory, then `capstan server` with its agent (its own containerd, bridge `capbench0`,
//!    pod range `10.209.0.0/16`, kubelet port 10259); timed from spawning until the node is
//!    `Ready`, then measured idle (server, and containerd with its shims, apart).
//! 3. **`ctr run`**: the same image run directly on the agent's containerd, N times each:
//!    `ctr run -d … sleep 3600` timed until ctr returns (the task has started; it is removed
//!    afterwards, untimed), and `ctr run --rm … true` timed whole (start, exit, removal). Neither
//!    gets CNI networking (a network namespace with only loopback), which every pod gets.
//! 4. **Pods**: for each scenario `COUNT@RATE`, COUNT pods (busybox, `sleep 3600`) created
//!    through the API at RATE pods/s, open loop, each stamped just before its create request; a
//!    watch on the namespace records when each is first seen bound to the node, `Running`, and
//!    `Ready`. After the last scenario's pods are all running, the node is measured again; then
//!    the pods are deleted and the driver waits until they are gone from the API and from the
//!    runtime (between scenarios too). A last measurement after the deletion shows what stays.
//! 5. **StatefulSets with claims** ([`crate::claims`]): a StatefulSet of N replicas (default
//!    10), each with a claim of the default `local-path` class, timed until every replica runs,
//!    then until every provisioned volume is gone after its deletion; `Parallel`, then
//!    `OrderedReady`.
//!
//! Everything the node made is removed at the end, also after a failure: sandboxes still in
//! containerd (through CRI), the server, its containerd and shims (by process id, matched on
//! the data dir in their command lines), mounts left under the temporary directory, and the
//! bridge. `--keep` keeps the directory (the server's and containerd's logs).
//!
//! Needs root, `containerd`, `runc`, `ctr`, the CNI plugins in `/usr/lib/cni` and
//! `busybox-static`, as the node end-to-end test does.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::task::JoinSet;

use crate::api::ServerProcess;
use crate::{command_line, cpu_ticks, filesystem_of, machine, status_kib, ticks_to_secs, utc_now};

/// The bridge of the benchmark's node: its own, so it can run beside other nodes.
const BRIDGE: &str = "capbench0";
/// The benchmark node's pod range.
const CLUSTER_CIDR: &str = "10.209.0.0/16";
/// The benchmark node's kubelet API port.
const KUBELET_PORT: u16 = 10259;
pub(crate) const NODE: &str = "capbench";
const NAMESPACE: &str = "pods-bench";
/// The image as imported (containerd's name) and as pods name it.
pub(crate) const IMAGE_REF: &str = "docker.io/library/busybox:bench";
pub(crate) const IMAGE: &str = "busybox:bench";
/// containerd's namespace of the CRI plugin, where the agent imports images.
const CTR_NAMESPACE: &str = "k8s.io";
/// Names of the containers the `ctr run`s make.
const CTR_PREFIX: &str = "capbench-ctr-";

/// Flags of `capstan-bench pods`.
#[derive(Args, Debug)]
pub struct PodsArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Pod scenarios, each `COUNT@RATE` (pods, created per second), run in order on one node;
    /// default `30@1,20@5` (`5@1,5@5` with --quick).
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario)]
    scenarios: Vec<Scenario>,
    /// Timed `ctr run`s of each kind; default 20 (3 with --quick).
    #[arg(long)]
    ctr_runs: Option<usize>,
    /// Seconds over which CPU is measured at each point; default 10 (3 with --quick).
    #[arg(long)]
    measure_secs: Option<u64>,
    /// A small run (5 pods at 1/s, 5 at 5/s, 3 ctr runs, 3 s measurements) to check the driver.
    #[arg(long)]
    quick: bool,
    /// Where the temporary directory is made.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Keep the temporary directory (server and containerd logs) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Replicas of the StatefulSets with a claim each (default 10; 3 with --quick); 0 skips
    /// them.
    #[arg(long)]
    statefulset_replicas: Option<usize>,
}

/// COUNT pods created at RATE per second.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    count: usize,
    rate: f64,
}

fn parse_scenario(text: &str) -> Result<Scenario, String> {
    let (count, rate) = text
        .split_once('@')
        .ok_or_else(|| format!("expected COUNT@RATE, e.g. 30@1: {text:?}"))?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| format!("not a pod count: {count:?}"))?;
    let rate: f64 = rate
        .trim()
        .parse()
        .map_err(|_| format!("not a rate: {rate:?}"))?;
    if count == 0 || !rate.is_finite() || rate <= 0.0 {
        return Err(format!("count and rate must be positive: {text:?}"));
    }
    Ok(Scenario { count, rate })
}

// ---------------------------------------------------------------------------------------------
// Processes: CPU and memory
// ---------------------------------------------------------------------------------------------

/// The command line of a process, its arguments split.
fn cmdline(pid: &str) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The node's runtime processes: its containerd (`containerd --config <data>/…/config.toml`)
/// and the shims serving it (`containerd-shim-runc-v2 … -address <data>/…/containerd.sock`).
/// Returns (containerd, shims).
fn runtime_pids(data: &Path) -> (Vec<String>, Vec<String>) {
    let config = data
        .join("agent/containerd/config.toml")
        .display()
        .to_string();
    let socket = data
        .join("agent/containerd/containerd.sock")
        .display()
        .to_string();
    let mut containerd = Vec::new();
    let mut shims = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (containerd, shims);
    };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let args = cmdline(&pid);
        let Some(program) = args.first() else {
            continue;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        if program == "containerd" && args.contains(&config) {
            containerd.push(pid);
        } else if program.starts_with("containerd-shim") && args.contains(&socket) {
            shims.push(pid);
        }
    }
    (containerd, shims)
}

/// CPU (share of one core) and RSS (KiB, summed) of a set of processes over an interval.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) cpu: f64,
    pub(crate) rss: u64,
    /// `RssAnon`: the heap and stacks, without the mapped binary.
    anon: u64,
    /// `Pss` (`/proc/<pid>/smaps_rollup`): pages shared between the processes (the shims' one
    /// binary) counted once over all of them.
    pss: u64,
    processes: usize,
}

/// Measures `pids` for `interval`: CPU from `/proc/<pid>/stat` (user + system) at both ends,
/// RSS (`VmRSS`) at the end. Processes gone by the end count for nothing.
pub(crate) async fn measure(pids: &[String], interval: Duration) -> Usage {
    let before: Vec<Option<u64>> = pids.iter().map(|p| cpu_ticks(p)).collect();
    let began = Instant::now();
    tokio::time::sleep(interval).await;
    let wall = began.elapsed().as_secs_f64().max(1e-9);
    let mut ticks = 0;
    let mut rss = 0;
    let mut anon = 0;
    let mut pss = 0;
    let mut processes = 0;
    for (pid, before) in pids.iter().zip(before) {
        if let (Some(before), Some(after)) = (before, cpu_ticks(pid)) {
            ticks += after.saturating_sub(before);
            rss += status_kib(pid, "VmRSS").unwrap_or(0);
            anon += status_kib(pid, "RssAnon").unwrap_or(0);
            pss += crate::status_like(&format!("/proc/{pid}/smaps_rollup"), "Pss").unwrap_or(0);
            processes += 1;
        }
    }
    Usage {
        cpu: ticks_to_secs(ticks) / wall,
        rss,
        anon,
        pss,
        processes,
    }
}

/// The server and the node's runtime measured over the same interval.
#[derive(Clone, Copy, Debug, Default)]
struct Point {
    server: Usage,
    containerd: Usage,
    shims: Usage,
}

async fn measure_node(server_pid: &str, data: &Path, interval: Duration) -> Point {
    let (containerd, shims) = runtime_pids(data);
    let server = [server_pid.to_owned()];
    let (server, containerd, shims) = tokio::join!(
        measure(&server, interval),
        measure(&containerd, interval),
        measure(&shims, interval)
    );
    Point {
        server,
        containerd,
        shims,
    }
}

pub(crate) fn mib_of(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// The node
// ---------------------------------------------------------------------------------------------

/// A node's network: its bridge, pod range, service range (the server's default when `None`)
/// and kubelet port. Every cluster with a node on this machine needs its own, so that it can
/// run beside the others (the proxy's table is named after the bridge).
#[derive(Clone, Debug)]
pub(crate) struct NodeNet {
    pub(crate) bridge: String,
    pub(crate) cluster_cidr: String,
    pub(crate) service_cidr: Option<String>,
    pub(crate) kubelet_port: u16,
}

impl NodeNet {
    /// The node of the pods and metrics benchmarks.
    pub(crate) fn bench() -> NodeNet {
        NodeNet {
            bridge: BRIDGE.to_owned(),
            cluster_cidr: CLUSTER_CIDR.to_owned(),
            service_cidr: None,
            kubelet_port: KUBELET_PORT,
        }
    }

    /// The flags the node's server gets besides its data dir, port and bind address (the
    /// baseline server gets them too, with `--disable-agent`).
    fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--node-name".to_owned(),
            NODE.to_owned(),
            "--cni-bridge".to_owned(),
            self.bridge.clone(),
            "--cluster-cidr".to_owned(),
            self.cluster_cidr.clone(),
            "--kubelet-port".to_owned(),
            self.kubelet_port.to_string(),
        ];
        if let Some(range) = &self.service_cidr {
            flags.extend(["--service-cidr".to_owned(), range.clone()]);
        }
        flags
    }
}

/// `capstan server` with its agent; killed when dropped.
pub(crate) struct NodeServer {
    child: tokio::process::Child,
    pub(crate) pid: String,
}

impl NodeServer {
    fn spawn(binary: &Path, data: &Path, log: &Path) -> Result<NodeServer> {
        Self::spawn_with(binary, data, log, &[])
    }

    /// [`NodeServer::spawn`] with `extra` flags.
    pub(crate) fn spawn_with(
        binary: &Path,
        data: &Path,
        log: &Path,
        extra: &[&str],
    ) -> Result<NodeServer> {
        Self::spawn_on(binary, data, log, &NodeNet::bench(), extra)
    }

    /// [`NodeServer::spawn_with`] on the network `net`.
    pub(crate) fn spawn_on(
        binary: &Path,
        data: &Path,
        log: &Path,
        net: &NodeNet,
        extra: &[&str],
    ) -> Result<NodeServer> {
        let port = capstan_testkit::free_port().to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = tokio::process::Command::new(binary)
            .arg("server")
            .arg("--data-dir")
            .arg(data)
            .args(["--https-listen-port", &port])
            .args(["--dns-port", "0"])
            .args(net.flags())
            .args(["--bind-address", "127.0.0.1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("the server exited at once"))?
            .to_string();
        Ok(NodeServer { child, pid })
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(error) => Some(error.to_string()),
        }
    }

    /// SIGTERM (the agent stops its containerd), then waits; SIGKILL after 60 s.
    pub(crate) async fn stop(&mut self) -> Result<()> {
        if self.exited().is_some() {
            return Ok(());
        }
        signal(&self.pid, "TERM");
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                ensure!(
                    status.success(),
                    "the server exited with {status} on SIGTERM"
                );
                Ok(())
            }
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("the server did not stop within 60 s of SIGTERM")
            }
        }
    }
}

fn signal(pid: &str, name: &str) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{name}"), pid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The admin client of the server on `data` (its kubeconfig), once the file is there.
pub(crate) async fn client(data: &Path) -> Result<kube::Client> {
    let path = data.join("kubeconfig.yaml");
    let file = kube::config::Kubeconfig::read_from(&path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("{}", path.display()))?;
    kube::Client::try_from(config).context("building the API client")
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the node has registered and is `Ready`; returns the client.
pub(crate) async fn wait_node_ready(
    server: &mut NodeServer,
    data: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<kube::Client> {
    let began = Instant::now();
    let mut client_ = None;
    loop {
        if let Some(status) = server.exited() {
            bail!(
                "the server exited ({status}) before its node was Ready; its log ends with: {}",
                log_tail(log)
            );
        }
        if began.elapsed() > timeout {
            bail!(
                "the node was not Ready after {} s; the server's log ends with: {}",
                timeout.as_secs(),
                log_tail(log)
            );
        }
        if client_.is_none() {
            client_ = client(data).await.ok();
        }
        if let Some(c) = &client_ {
            let nodes: Api<Node> = Api::all(c.clone());
            if let Ok(Some(node)) = nodes.get_opt(NODE).await
                && node_ready(&node)
            {
                return Ok(c.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" / ")
}

/// Packs Debian's busybox (`capstan image busybox`) as [`IMAGE_REF`] into the preload
/// directory of the node on `data`, which imports it when it starts.
pub(crate) async fn pack_busybox(binary: &Path, data: &Path) -> Result<()> {
    let archive = data.join("agent/images/busybox.tar");
    let packed = tokio::process::Command::new(binary)
        .args(["image", "busybox", "--name", IMAGE_REF, "--output"])
        .arg(&archive)
        .output()
        .await?;
    ensure!(
        packed.status.success(),
        "capstan image busybox: {}",
        String::from_utf8_lossy(&packed.stderr)
    );
    Ok(())
}

/// Removes what the node leaves behind, in order: sandboxes in containerd (through CRI, while
/// it runs), the server, containerd and its shims, mounts under the directory, the bridge.
/// Every step is harmless when there is nothing to do.
pub(crate) struct Cleanup {
    pub(crate) dir: PathBuf,
    pub(crate) data: PathBuf,
    /// The node's bridge.
    pub(crate) bridge: String,
}

impl Cleanup {
    /// Stops and removes every pod sandbox containerd still has, and the `ctr run` containers.
    pub(crate) async fn runtime(&self) {
        remove_runtime_leftovers(&self.data).await;
    }

    /// Kills what is left by process id (containerd, then shims), unmounts what is still
    /// mounted under the directory and deletes the bridge.
    fn processes_mounts_bridge(&self) {
        let (containerd, _) = runtime_pids(&self.data);
        for pid in &containerd {
            signal(pid, "TERM");
        }
        for _ in 0..100 {
            if runtime_pids(&self.data).0.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (containerd, shims) = runtime_pids(&self.data);
        for pid in containerd.iter().chain(&shims) {
            signal(pid, "KILL");
        }
        let dir = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<String> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .map(unescape_mount)
            .filter(|point| point.starts_with(&format!("{dir}/")))
            .collect();
        // Deepest first.
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            let _ = std::process::Command::new("umount")
                .args(["-l", &point])
                .stderr(Stdio::null())
                .status();
        }
        let exists = std::process::Command::new("ip")
            .args(["link", "show", &self.bridge])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if exists {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &self.bridge])
                .status();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.processes_mounts_bridge();
    }
}

/// Stops and removes every pod sandbox the node's containerd still has (the pods' containers
/// with them, through CRI, so CNI releases their addresses), and the `ctr run` containers.
pub(crate) async fn remove_runtime_leftovers(data: &Path) {
    let socket = data.join("agent/containerd/containerd.sock");
    if !socket.exists() {
        return;
    }
    let attempt = async {
        let Ok(cri) = capstan_kubelet::cri::Cri::connect(&socket).await else {
            return;
        };
        let mut service = cri.runtime.clone();
        let Ok(list) = service
            .list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
            .await
        else {
            return;
        };
        for sandbox in list.into_inner().items {
            let _ = service
                .stop_pod_sandbox(k8s_cri::v1::StopPodSandboxRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                })
                .await;
            let _ = service
                .remove_pod_sandbox(k8s_cri::v1::RemovePodSandboxRequest {
                    pod_sandbox_id: sandbox.id,
                })
                .await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(60), attempt).await;
    if let Ok(names) = ctr(&socket, &["containers", "list", "-q"]).await {
        for name in names.lines().filter(|n| n.starts_with(CTR_PREFIX)) {
            let _ = remove_ctr_container(&socket, name).await;
        }
    }
}

/// `/proc/self/mountinfo` escapes spaces and a few other bytes as `\ooo`.
fn unescape_mount(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------------
// ctr
// ---------------------------------------------------------------------------------------------

/// Runs `ctr --address <socket> --namespace k8s.io <args>`; its stdout on success.
async fn ctr(socket: &Path, args: &[&str]) -> Result<String> {
    let output = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", CTR_NAMESPACE])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running ctr")?;
    ensure!(
        output.status.success(),
        "ctr {}: {}: {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Kills and removes a container `ctr run -d` made (and its snapshot).
async fn remove_ctr_container(socket: &Path, name: &str) -> Result<()> {
    let _ = ctr(socket, &["tasks", "kill", "--signal", "SIGKILL", name]).await;
    for _ in 0..50 {
        if ctr(socket, &["tasks", "delete", name]).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ctr(socket, &["containers", "delete", name]).await?;
    Ok(())
}

/// The `ctr run` baseline: `runs` detached starts and `runs` whole runs of `true`, after one
/// untimed warm-up of each (which unpacks the image for ctr's snapshotter if needed).
async fn ctr_runs(socket: &Path, runs: usize) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut detached = Vec::new();
    let mut whole = Vec::new();
    for i in 0..=runs {
        let name = format!("{CTR_PREFIX}d-{i}");
        let began = Instant::now();
        ctr(socket, &["run", "-d", IMAGE_REF, &name, "sleep", "3600"]).await?;
        let took = began.elapsed();
        remove_ctr_container(socket, &name).await?;
        if i > 0 {
            detached.push(took);
        }
        let name = format!("{CTR_PREFIX}rm-{i}");
        let began = Instant::now();
        ctr(socket, &["run", "--rm", IMAGE_REF, &name, "true"]).await?;
        if i > 0 {
            whole.push(began.elapsed());
        }
    }
    Ok((detached, whole))
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// When the watch first saw each pod in each state.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    bound: Option<Instant>,
    running: Option<Instant>,
    ready: Option<Instant>,
}

type SeenMap = Arc<Mutex<HashMap<String, Seen>>>;

fn pod_body(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "pods-bench"}},
        "spec": {
            "restartPolicy": "Always",
            // busybox's sleep as PID 1 ignores SIGTERM: without this every deletion would
            // wait the default 30 s.
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "sleep", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    }))?)
}

/// Watches the namespace's pods, recording first sightings; `synced` fires once the initial
/// list is done.
async fn watch_pods(
    client: kube::Client,
    seen: SeenMap,
    synced: tokio::sync::oneshot::Sender<()>,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
    let mut synced = Some(synced);
    while let Some(event) = stream.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
            Ok(watcher::Event::InitDone) => {
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
                continue;
            }
            Ok(_) => continue,
            Err(error) => {
                eprintln!("pods bench: watch error (the watcher retries): {error}");
                continue;
            }
        };
        let now = Instant::now();
        let Some(name) = pod.metadata.name.clone() else {
            continue;
        };
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let status = pod.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let mut map = seen.lock().map_err(|_| anyhow!("poisoned"))?;
        let entry = map.entry(name).or_default();
        if bound && entry.bound.is_none() {
            entry.bound = Some(now);
        }
        if running && entry.running.is_none() {
            entry.running = Some(now);
        }
        if ready && entry.ready.is_none() {
            entry.ready = Some(now);
        }
    }
    Ok(())
}

/// Appends lines to the timeline file, with its header when new.
fn append_timeline(path: &Path, lines: &str) -> Result<()> {
    use std::io::Write as _;
    let new = !path.exists();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    if new {
        writeln!(
            file,
            "scenario,pod,created_unix_s,bound_ms,running_ms,ready_ms"
        )?;
    }
    file.write_all(lines.as_bytes())?;
    Ok(())
}

/// One scenario's figures.
#[derive(Debug)]
struct ScenarioResult {
    scenario: Scenario,
    created: usize,
    /// Create request to response.
    create: Vec<Duration>,
    /// Create (stamp) to first seen bound / Running / Ready.
    bound: Vec<Duration>,
    running: Vec<Duration>,
    ready: Vec<Duration>,
    /// Bound to Running (the node's part).
    node_part: Vec<Duration>,
    /// From the first create to the last pod Running.
    span: Duration,
    /// Per pod: the wall-clock create stamp and first sighting `Running` (Unix seconds), to
    /// lay beside containerd's log.
    walls: Vec<(String, f64, Option<f64>)>,
    /// Where the time went, from containerd's log (filled in after the run).
    phases: Option<Phases>,
    /// Deleting every pod until none is left in the API, then in the runtime.
    deleted_api: Duration,
    deleted_runtime: Duration,
}

/// The running node, as the scenarios use it.
#[derive(Clone, Copy)]
struct NodeCtx<'a> {
    client: &'a kube::Client,
    seen: &'a SeenMap,
    socket: &'a Path,
    server_pid: &'a str,
    data: &'a Path,
    /// Where each pod's timeline is appended (`pods.csv`, for reading beside the logs).
    timeline: &'a Path,
}

async fn run_scenario(
    node: &NodeCtx<'_>,
    index: usize,
    scenario: Scenario,
    measure_at_end: Option<Duration>,
) -> Result<(ScenarioResult, Option<Point>)> {
    let NodeCtx {
        client,
        seen,
        socket,
        server_pid,
        data,
        timeline,
    } = *node;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let names: Vec<String> = (0..scenario.count)
        .map(|i| format!("s{index}-pod-{i}"))
        .collect();
    eprintln!("pods bench: {} pods at {}/s", scenario.count, scenario.rate);
    let mut stamps: HashMap<String, (Instant, SystemTime)> = HashMap::new();
    let mut creates = JoinSet::new();
    let began = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let at = began + Duration::from_secs_f64(i as f64 / scenario.rate);
        tokio::time::sleep_until(at.into()).await;
        let pod = pod_body(name)?;
        let api = api.clone();
        let stamp = Instant::now();
        stamps.insert(name.clone(), (stamp, SystemTime::now()));
        creates.spawn(async move {
            api.create(&PostParams::default(), &pod)
                .await
                .map(|_| stamp.elapsed())
        });
    }
    let mut create = Vec::new();
    while let Some(done) = creates.join_next().await {
        create.push(done?.context("creating a pod")?);
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let running = {
            let map = seen.lock().map_err(|_| anyhow!("poisoned"))?;
            names
                .iter()
                .filter(|n| map.get(*n).is_some_and(|s| s.running.is_some()))
                .count()
        };
        if running == names.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {running} of {} pods were Running 180 s after the last create",
                names.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Ready follows Running closely (no probes); give it a moment.
    let ready_deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < ready_deadline {
        let all = {
            let map = seen.lock().map_err(|_| anyhow!("poisoned"))?;
            names
                .iter()
                .all(|n| map.get(n).is_some_and(|s| s.ready.is_some()))
        };
        if all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen_now = seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    let mut result = ScenarioResult {
        scenario,
        created: names.len(),
        create,
        bound: Vec::new(),
        running: Vec::new(),
        ready: Vec::new(),
        node_part: Vec::new(),
        span: Duration::ZERO,
        walls: Vec::new(),
        phases: None,
        deleted_api: Duration::ZERO,
        deleted_runtime: Duration::ZERO,
    };
    let mut last = began;
    let mut lines = String::new();
    for name in &names {
        let (Some((stamp, wall)), Some(s)) = (stamps.get(name), seen_now.get(name)) else {
            continue;
        };
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(*stamp));
        let ms = |t: Option<Instant>| {
            since(t).map_or_else(String::new, |d| format!("{:.1}", d.as_secs_f64() * 1e3))
        };
        let unix = wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        result.walls.push((
            name.clone(),
            unix,
            since(s.running).map(|d| unix + d.as_secs_f64()),
        ));
        let _ = writeln!(
            lines,
            "{index},{name},{unix:.6},{},{},{}",
            ms(s.bound),
            ms(s.running),
            ms(s.ready)
        );
        result.bound.extend(since(s.bound));
        result.running.extend(since(s.running));
        result.ready.extend(since(s.ready));
        if let (Some(b), Some(r)) = (s.bound, s.running) {
            result.node_part.push(r.saturating_duration_since(b));
        }
        if let Some(r) = s.running {
            last = last.max(r);
        }
    }
    result.span = last.saturating_duration_since(began);
    append_timeline(timeline, &lines)?;

    let point = match measure_at_end {
        Some(interval) => {
            eprintln!("pods bench: measuring with {} pods running", names.len());
            Some(measure_node(server_pid, data, interval).await)
        }
        None => None,
    };

    eprintln!("pods bench: deleting the pods");
    let began = Instant::now();
    for name in &names {
        api.delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {name}"))?;
    }
    let deadline = began + Duration::from_secs(180);
    loop {
        let left = api.list(&ListParams::default()).await?.items.len();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{left} pods were still there 180 s after their deletion");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    result.deleted_api = began.elapsed();
    loop {
        let left = ctr(socket, &["containers", "list", "-q"]).await?;
        if left.trim().is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "containerd still had containers 180 s after the pods' deletion: {}",
                left.split_whitespace().count()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    result.deleted_runtime = began.elapsed();
    if let Ok(mut map) = seen.lock() {
        for name in &names {
            map.remove(name);
        }
    }
    Ok((result, point))
}

// ---------------------------------------------------------------------------------------------
// Where the time goes: containerd's log
// ---------------------------------------------------------------------------------------------

/// The CRI calls of one pod as containerd logged them (its log at `info` names every call when
/// it arrives and when it returns), in Unix seconds.
#[derive(Clone, Debug, Default)]
struct CriCalls {
    sandbox_called: Option<f64>,
    sandbox_returned: Option<f64>,
    create_called: Option<f64>,
    create_returned: Option<f64>,
    start_called: Option<f64>,
    start_returned: Option<f64>,
}

/// Unix seconds of an RFC 3339 UTC time as containerd logs it (`2026-11-25T00:46:32.548074914Z`).
fn parse_utc(text: &str) -> Option<f64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let mut time = time.split(':');
    let hour: i64 = time.next()?.parse().ok()?;
    let minute: i64 = time.next()?.parse().ok()?;
    let second: f64 = time.next()?.parse().ok()?;
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hour * 3600 + minute * 60) as f64 + second)
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text.get(from..)?.find(end)?;
    text.get(from..from + len)
}

/// The CRI calls in containerd's log, by pod name.
fn cri_calls(log: &str) -> HashMap<String, CriCalls> {
    let mut by_pod: HashMap<String, CriCalls> = HashMap::new();
    // Sandbox id -> pod, container id -> pod.
    let mut sandboxes: HashMap<String, String> = HashMap::new();
    let mut containers: HashMap<String, String> = HashMap::new();
    for line in log.lines() {
        let Some(at) = between(line, "time=\"", "\"").and_then(parse_utc) else {
            continue;
        };
        let Some(msg) = line
            .split_once(" msg=\"")
            .map(|(_, m)| m.replace("\\\"", "\""))
        else {
            continue;
        };
        if let Some(rest) = msg.strip_prefix("RunPodSandbox for &PodSandboxMetadata{Name:") {
            let Some(pod) = rest.split(',').next() else {
                continue;
            };
            let calls = by_pod.entry(pod.to_owned()).or_default();
            if let Some(id) = between(rest, "returns sandbox id \"", "\"") {
                calls.sandbox_returned.get_or_insert(at);
                sandboxes.insert(id.to_owned(), pod.to_owned());
            } else {
                calls.sandbox_called.get_or_insert(at);
            }
        } else if let Some(rest) = msg.strip_prefix("CreateContainer within sandbox \"") {
            let Some(pod) = rest.split('"').next().and_then(|id| sandboxes.get(id)) else {
                continue;
            };
            let calls = by_pod.entry(pod.clone()).or_default();
            if let Some(id) = between(rest, "returns container id \"", "\"") {
                calls.create_returned.get_or_insert(at);
                containers.insert(id.to_owned(), pod.clone());
            } else {
                calls.create_called.get_or_insert(at);
            }
        } else if let Some(rest) = msg.strip_prefix("StartContainer for \"") {
            let Some(pod) = rest.split('"').next().and_then(|id| containers.get(id)) else {
                continue;
            };
            let calls = by_pod.entry(pod.clone()).or_default();
            if rest.contains("returns successfully") {
                calls.start_returned.get_or_insert(at);
            } else {
                calls.start_called.get_or_insert(at);
            }
        }
    }
    by_pod
}

/// A scenario's start-ups cut at the CRI calls, each part's p50 and p99.
#[derive(Debug, Default)]
struct Phases {
    /// Pods whose every call was found in the log.
    pods: usize,
    /// Create request to `RunPodSandbox` called: API, scheduler, the agent's watch, admission,
    /// volumes (the service account token).
    to_sandbox: Vec<Duration>,
    /// `RunPodSandbox`: the pause container, its network namespace, CNI.
    sandbox: Vec<Duration>,
    /// Sandbox returned to `CreateContainer` called, plus `CreateContainer` returned to
    /// `StartContainer` called: the agent.
    between: Vec<Duration>,
    /// `CreateContainer` plus `StartContainer`.
    container: Vec<Duration>,
    /// `StartContainer` returned to `Running` seen on the watch: the status write and its
    /// delivery.
    to_running: Vec<Duration>,
    /// Ours (the first, third and last parts) and the runtime's (the second and fourth).
    ours: Vec<Duration>,
    runtime: Vec<Duration>,
}

fn phases(walls: &[(String, f64, Option<f64>)], calls: &HashMap<String, CriCalls>) -> Phases {
    let mut out = Phases::default();
    let span = |a: f64, b: f64| Duration::from_secs_f64((b - a).max(0.0));
    for (name, created, running) in walls {
        let Some(c) = calls.get(name) else {
            continue;
        };
        let (
            Some(running),
            Some(sandbox_called),
            Some(sandbox_returned),
            Some(create_called),
            Some(create_returned),
            Some(start_called),
            Some(start_returned),
        ) = (
            *running,
            c.sandbox_called,
            c.sandbox_returned,
            c.create_called,
            c.create_returned,
            c.start_called,
            c.start_returned,
        )
        else {
            continue;
        };
        let to_sandbox = span(*created, sandbox_called);
        let sandbox = span(sandbox_called, sandbox_returned);
        let between = span(sandbox_returned, create_called) + span(create_returned, start_called);
        let container = span(create_called, create_returned) + span(start_called, start_returned);
        let to_running = span(start_returned, running);
        out.pods += 1;
        out.to_sandbox.push(to_sandbox);
        out.sandbox.push(sandbox);
        out.between.push(between);
        out.container.push(container);
        out.to_running.push(to_running);
        out.ours.push(to_sandbox + between + to_running);
        out.runtime.push(sandbox + container);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// Everything the report needs.
#[derive(Debug, Default)]
struct Report {
    baseline: Usage,
    start_to_ready: Duration,
    idle: Point,
    running: Option<(usize, Point)>,
    after: Point,
    ctr_detached: Vec<Duration>,
    ctr_whole: Vec<Duration>,
    scenarios: Vec<ScenarioResult>,
    claims: Vec<crate::claims::Run>,
}

/// Runs the benchmark and prints the report.
pub async fn run(args: PodsArgs) -> Result<()> {
    let binary = crate::server_binary(args.server.clone())?;
    let scenarios = if !args.scenarios.is_empty() {
        args.scenarios.clone()
    } else if args.quick {
        vec![
            Scenario {
                count: 5,
                rate: 1.0,
            },
            Scenario {
                count: 5,
                rate: 5.0,
            },
        ]
    } else {
        vec![
            Scenario {
                count: 30,
                rate: 1.0,
            },
            Scenario {
                count: 20,
                rate: 5.0,
            },
        ]
    };
    let runs = args.ctr_runs.unwrap_or(if args.quick { 3 } else { 20 });
    let interval =
        Duration::from_secs(args.measure_secs.unwrap_or(if args.quick { 3 } else { 10 }));
    let statefulset_replicas = args
        .statefulset_replicas
        .unwrap_or(if args.quick { 3 } else { 10 });
    preflight(BRIDGE)?;

    let tmp = temp_dir(&args.dir, "capstan-pods-bench-")?;
    let dir = tmp.path().to_owned();
    let load_before = loadavg();
    let date = utc_now();

    let mut report = Report::default();
    let data = dir.join("node");
    let cleanup = Cleanup {
        dir: dir.clone(),
        data: data.clone(),
        bridge: BRIDGE.to_owned(),
    };
    let result = run_node(
        &binary,
        &dir,
        &data,
        Plan {
            scenarios: &scenarios,
            runs,
            interval,
            statefulset_replicas,
        },
        &mut report,
    )
    .await;
    cleanup.runtime().await;
    drop(cleanup);
    let load_after = loadavg();
    if args.keep {
        let kept = tmp.keep();
        eprintln!("pods bench: kept {}", kept.display());
    }
    result?;

    print!(
        "{}",
        render(
            &report,
            &Header {
                date,
                dir: &dir,
                interval,
                load_before,
                load_after,
                quick: args.quick,
            }
        )
    );
    Ok(())
}

/// A fresh temporary directory `<prefix>…` in `dir` (made first if missing), removed when
/// dropped.
pub(crate) fn temp_dir(dir: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(dir)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .with_context(|| format!("creating a directory in {}", dir.display()))
}

/// Checks what a node needs: root, the runtime's programs, and `bridge` free.
pub(crate) fn preflight(bridge: &str) -> Result<()> {
    ensure!(
        status_kib("self", "VmRSS").is_some(),
        "/proc is not readable"
    );
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned());
    ensure!(
        uid.as_deref() == Some("0"),
        "the node needs root (containers, mounts, the bridge)"
    );
    for program in ["containerd", "ctr", "runc", "ip"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ensure!(found, "`{program}` is not installed");
    }
    let taken = std::process::Command::new("ip")
        .args(["link", "show", bridge])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ensure!(
        !taken,
        "the bridge {bridge} exists: another benchmark on it is running (or one left it; \
         `ip link del {bridge}` when none runs)"
    );
    Ok(())
}

/// What one run measures: the pod scenarios, the `ctr run`s of each kind, the measuring
/// interval, and the replicas of the StatefulSets with claims.
struct Plan<'a> {
    scenarios: &'a [Scenario],
    runs: usize,
    interval: Duration,
    statefulset_replicas: usize,
}

async fn run_node(
    binary: &Path,
    dir: &Path,
    data: &Path,
    plan: Plan<'_>,
    report: &mut Report,
) -> Result<()> {
    let Plan {
        scenarios,
        runs,
        interval,
        statefulset_replicas,
    } = plan;
    // 1. The server alone.
    eprintln!("pods bench: baseline server (--disable-agent)");
    let flags = NodeNet::bench().flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // `ServerProcess` adds --disable-agent and its own --bind-address.
    let (baseline, _) = ServerProcess::start_with(
        binary,
        &dir.join("baseline"),
        None,
        &flags,
        &dir.join("baseline.log"),
    )
    .await?;
    // Let the controllers' start-up work (namespaces, service accounts, leases) settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    report.baseline = measure(std::slice::from_ref(&baseline.pid), interval).await;
    baseline
        .stop()
        .await
        .context("stopping the baseline server")?;

    // 2. The node.
    eprintln!("pods bench: packing the image, starting the node");
    pack_busybox(binary, data).await?;
    let log = dir.join("server.log");
    let began = Instant::now();
    let mut server = NodeServer::spawn(binary, data, &log)?;
    let client = wait_node_ready(&mut server, data, &log, Duration::from_secs(120)).await?;
    report.start_to_ready = began.elapsed();
    let socket = data.join("agent/containerd/containerd.sock");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE},
            }))?,
        )
        .await
        .context("creating the namespace")?;
    // Pods are refused until the namespace's default service account exists.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await?.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!("pods bench: measuring the idle node");
    report.idle = measure_node(&server.pid, data, interval).await;

    // 3. ctr.
    eprintln!("pods bench: {runs} ctr runs of each kind");
    let (detached, whole) = ctr_runs(&socket, runs).await?;
    report.ctr_detached = detached;
    report.ctr_whole = whole;

    // 4. Pods.
    let seen: SeenMap = Arc::default();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_pods(client.clone(), seen.clone(), synced_tx));
    tokio::time::timeout(Duration::from_secs(30), synced_rx)
        .await
        .context("the pod watch did not start")??;
    let last = scenarios.len().saturating_sub(1);
    let node = NodeCtx {
        client: &client,
        seen: &seen,
        socket: &socket,
        server_pid: &server.pid,
        data,
        timeline: &dir.join("pods.csv"),
    };
    for (i, &scenario) in scenarios.iter().enumerate() {
        let measure_at = (i == last).then_some(interval);
        let (result, point) = run_scenario(&node, i, scenario, measure_at).await?;
        if let Some(point) = point {
            report.running = Some((scenario.count, point));
        }
        report.scenarios.push(result);
    }
    watch.abort();
    // 5. StatefulSets with a claim per replica.
    for policy in ["Parallel", "OrderedReady"] {
        if statefulset_replicas == 0 {
            break;
        }
        eprintln!("pods bench: a {policy} StatefulSet of {statefulset_replicas} with claims");
        let run =
            crate::claims::run(&client, NAMESPACE, statefulset_replicas, policy, IMAGE).await?;
        report.claims.push(run);
    }
    let log =
        std::fs::read_to_string(data.join("agent/containerd/containerd.log")).unwrap_or_default();
    let calls = cri_calls(&log);
    for result in &mut report.scenarios {
        result.phases = Some(phases(&result.walls, &calls));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!("pods bench: measuring the node after the pods are gone");
    report.after = measure_node(&server.pid, data, interval).await;

    remove_runtime_leftovers(data).await;
    server.stop().await
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn git_commit() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
    };
    match run(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit} (with uncommitted changes)")
            } else {
                commit
            }
        }
        None => "unknown (not run in a git checkout)".to_owned(),
    }
}

/// p50, p99 and max of a sample, in ms.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
    n: usize,
}

fn stats(sample: &[Duration]) -> Stats {
    let Ok(mut h) = Histogram::<u64>::new(3) else {
        return Stats::default();
    };
    for d in sample {
        let _ = h.record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1));
    }
    if sample.is_empty() {
        return Stats::default();
    }
    let ms = |v: u64| v as f64 / 1000.0;
    Stats {
        p50: ms(h.value_at_quantile(0.5)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
        n: sample.len(),
    }
}

fn cells(s: Stats) -> String {
    format!("{:.0} ms | {:.0} ms | {:.0} ms", s.p50, s.p99, s.max)
}

struct Header<'a> {
    date: String,
    dir: &'a Path,
    interval: Duration,
    load_before: String,
    load_after: String,
    quick: bool,
}

fn usage_cells(u: Usage) -> String {
    format!(
        "{:.1}% | {:.1} MiB ({:.1} anon, PSS {:.1})",
        u.cpu * 100.0,
        mib_of(u.rss),
        mib_of(u.anon),
        mib_of(u.pss)
    )
}

fn render(r: &Report, h: &Header) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Node: pod start-up and agent cost (`capstan-bench pods`)\n"
    );
    let _ = writeln!(out, "- date: {}", h.date);
    let _ = writeln!(out, "- command: `{}`", command_line());
    let _ = writeln!(out, "- commit: {}", git_commit());
    let _ = writeln!(out, "- machine: {}", machine());
    let _ = writeln!(
        out,
        "- load average: {} at the start, {} at the end",
        h.load_before, h.load_after
    );
    let _ = writeln!(
        out,
        "- data dirs in `{}` ({}); {}",
        h.dir.display(),
        filesystem_of(h.dir),
        containerd_version()
    );
    let _ = writeln!(
        out,
        "- {}\n",
        if h.quick {
            "**--quick**: scaled down, numbers are a smoke test only"
        } else {
            "full run"
        }
    );

    let _ = writeln!(out, "### Pod start-up\n");
    let _ = writeln!(
        out,
        "From just before each create request to the pod first seen on a watch bound, \
         `Running` and `Ready` (busybox `sleep 3600`, image preloaded, one container, the \
         default service account token volume). Pods are created open loop at the given rate; \
         the node part is bound to `Running`. p99 of fewer than 100 pods is their maximum.\n"
    );
    let _ = writeln!(
        out,
        "| pods | rate | create→Running p50 | p99 | max | create→Ready p50 | p99 | create→bound p50 | \
         bound→Running p50 | p99 | create request p50 | first create to last Running | delete until gone (API / runtime) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in &r.scenarios {
        let running = stats(&s.running);
        let ready = stats(&s.ready);
        let bound = stats(&s.bound);
        let node = stats(&s.node_part);
        let create = stats(&s.create);
        let missing = s.created - running.n;
        let _ = writeln!(
            out,
            "| {}{} | {}/s | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} s | {:.1} s / {:.1} s |",
            s.created,
            if missing > 0 {
                format!(" ({missing} never Running)")
            } else {
                String::new()
            },
            s.scenario.rate,
            cells(running),
            ready.p50,
            ready.p99,
            bound.p50,
            node.p50,
            node.p99,
            create.p50,
            s.span.as_secs_f64(),
            s.deleted_api.as_secs_f64(),
            s.deleted_runtime.as_secs_f64(),
        );
    }
    let detached = stats(&r.ctr_detached);
    let whole = stats(&r.ctr_whole);
    let _ = writeln!(
        out,
        "\n`ctr run` of the same image on the node's containerd (namespace `k8s.io`), one at a \
         time, after one untimed warm-up each. No CNI: the container gets a network namespace \
         with loopback only, where a pod's sandbox is networked by the bridge plugin.\n"
    );
    let _ = writeln!(out, "| ctr run | runs | p50 | p99 | max |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| `run -d … sleep 3600`, until ctr returns (task started) | {} | {} |",
        detached.n,
        cells(detached)
    );
    let _ = writeln!(
        out,
        "| `run --rm … true` (start, exit, removal) | {} | {} |",
        whole.n,
        cells(whole)
    );
    let _ = writeln!(out);
    for s in &r.scenarios {
        let running = stats(&s.running);
        let _ = writeln!(
            out,
            "- {} pods at {}/s: pod p50 minus `ctr run -d` p50 = {:.0} ms (minus `ctr run --rm` \
             p50: {:.0} ms)",
            s.created,
            s.scenario.rate,
            running.p50 - detached.p50,
            running.p50 - whole.p50
        );
    }

    let _ = writeln!(
        out,
        "\nWhere the time goes, from containerd's log (it logs each CRI call when it arrives and \
         when it returns; same clock as the driver's stamps): ours is create to `RunPodSandbox` \
         (API, scheduler, the agent's watch, admission, volumes), the agent between the calls, \
         and `StartContainer` returned to `Running` seen on the watch (status write, delivery); \
         the runtime's is `RunPodSandbox` (pause container, network namespace, CNI bridge) and \
         `CreateContainer` + `StartContainer`. p50 / p99 of each part over the pods; the sums \
         are per pod.\n"
    );
    let _ = writeln!(
        out,
        "| pods | rate | create→RunPodSandbox | RunPodSandbox | agent between calls | Create+StartContainer | started→Running seen | ours | runtime's |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for s in &r.scenarios {
        let Some(p) = &s.phases else {
            continue;
        };
        let pair = |sample: &[Duration]| {
            let st = stats(sample);
            format!("{:.0} / {:.0} ms", st.p50, st.p99)
        };
        let _ = writeln!(
            out,
            "| {}{} | {}/s | {} | {} | {} | {} | {} | {} | {} |",
            s.created,
            if p.pods < s.created {
                format!(" ({} in the log)", p.pods)
            } else {
                String::new()
            },
            s.scenario.rate,
            pair(&p.to_sandbox),
            pair(&p.sandbox),
            pair(&p.between),
            pair(&p.container),
            pair(&p.to_running),
            pair(&p.ours),
            pair(&p.runtime),
        );
    }

    let _ = writeln!(out, "\n### Agent cost\n");
    let _ = writeln!(
        out,
        "CPU is user + system time over {} s as a share of one core (`/proc/<pid>/stat`), RSS is \
         `VmRSS` at the end of that interval (in brackets `RssAnon`: heap and stacks, without the \
         mapped binary and libraries; and `Pss` from `smaps_rollup`, which counts pages shared \
         between processes once over all of them: the shims' sum of `VmRSS` counts their one \
         binary once per shim). The agent runs inside `capstan server`: its cost \
         is the server with the agent minus a server started with `--disable-agent` on a fresh \
         data dir (same flags). containerd and its shims (`containerd-shim-runc-v2`, one per pod) \
         are separate processes, listed apart; the pods' own processes are not counted. \
         Node start: spawning the server until its node is `Ready`: {:.1} s.\n",
        h.interval.as_secs(),
        r.start_to_ready.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| point | server CPU | server RSS | agent (server minus baseline) | containerd CPU | containerd RSS | shims | shims CPU | shims RSS |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| server without agent (baseline) | {} | | | | | | |",
        usage_cells(r.baseline)
    );
    let mut points = vec![("node idle, no pods".to_owned(), r.idle)];
    if let Some((count, point)) = r.running {
        points.push((format!("{count} pods Running"), point));
    }
    points.push((
        "idle again, after the pods were deleted".to_owned(),
        r.after,
    ));
    for (label, p) in points {
        let agent_rss = p.server.rss as f64 - r.baseline.rss as f64;
        let agent_anon = p.server.anon as f64 - r.baseline.anon as f64;
        let agent_cpu = (p.server.cpu - r.baseline.cpu) * 100.0;
        let _ = writeln!(
            out,
            "| {label} | {} | {:+.1} MiB ({:+.1} anon), CPU {:+.1}% | {} | {} | {} | {} |",
            usage_cells(p.server),
            agent_rss / 1024.0,
            agent_anon / 1024.0,
            agent_cpu,
            format_args!("{:.1}%", p.containerd.cpu * 100.0),
            format_args!(
                "{:.1} MiB ({:.1} anon, PSS {:.1})",
                mib_of(p.containerd.rss),
                mib_of(p.containerd.anon),
                mib_of(p.containerd.pss)
            ),
            p.shims.processes,
            usage_cells(p.shims),
        );
    }
    out.push('\n');
    if !r.claims.is_empty() {
        let _ = writeln!(
            out,
            "StatefulSets with a `local-path` claim (1Gi) per replica, on the same node:\n"
        );
        let _ = writeln!(
            out,
            "| policy | replicas | create until all Running | deletion until every volume is gone |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for run in &r.claims {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} s | {:.2} s |",
                run.policy,
                run.replicas,
                run.running.as_secs_f64(),
                run.reclaimed.as_secs_f64()
            );
        }
        out.push('\n');
    }
    out
}

fn containerd_version() -> String {
    std::process::Command::new("containerd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| "containerd version unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_times_are_unix_seconds() {
        let at = parse_utc("2026-11-25T00:46:32.548074914Z");
        assert!(
            at.is_some_and(|t| (t - 1_795_567_592.548_075).abs() < 1e-5),
            "{at:?}"
        );
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_utc("2000-03-01T00:00:01.5Z"), Some(951_868_801.5));
        assert_eq!(parse_utc("yesterday"), None);
    }

    #[test]
    fn cri_calls_follow_a_pod_through_its_ids() {
        let log = r#"time="2026-11-25T00:46:32.548074914Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:s0-pod-0,Uid:c964,Namespace:pods-bench,Attempt:0,}"
time="2026-11-25T00:46:32.659682900Z" level=info msg="starting signal loop" namespace=k8s.io
time="2026-11-25T00:46:32.710051318Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:s0-pod-0,Uid:c964,Namespace:pods-bench,Attempt:0,} returns sandbox id \"1664\""
time="2026-11-25T00:46:32.714824552Z" level=info msg="CreateContainer within sandbox \"1664\" for container &ContainerMetadata{Name:sleep,Attempt:0,}"
time="2026-11-25T00:46:32.740740024Z" level=info msg="CreateContainer within sandbox \"1664\" for &ContainerMetadata{Name:sleep,Attempt:0,} returns container id \"58ca\""
time="2026-11-25T00:46:32.743185678Z" level=info msg="StartContainer for \"58ca\""
time="2026-11-25T00:46:32.805330746Z" level=info msg="StartContainer for \"58ca\" returns successfully"
"#;
        let calls = cri_calls(log);
        let pod = calls.get("s0-pod-0");
        assert!(pod.is_some(), "{calls:?}");
        let pod = pod.cloned().unwrap_or_default();
        let all = [
            pod.sandbox_called,
            pod.sandbox_returned,
            pod.create_called,
            pod.create_returned,
            pod.start_called,
            pod.start_returned,
        ];
        assert!(all.iter().all(Option::is_some), "{pod:?}");
        let created = 1_795_567_592.539;
        let walls = vec![("s0-pod-0".to_owned(), created, Some(created + 0.2714))];
        let p = phases(&walls, &calls);
        assert_eq!(p.pods, 1);
        let ms = |d: &[Duration]| (d[0].as_secs_f64() * 1e3).round();
        assert_eq!(ms(&p.to_sandbox), 9.0);
        assert_eq!(ms(&p.sandbox), 162.0);
        assert_eq!(ms(&p.container), 88.0);
        assert_eq!(ms(&p.to_running), 5.0);
    }
}
