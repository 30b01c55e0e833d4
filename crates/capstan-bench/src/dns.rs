//! `capstan-bench dns`: the cluster DNS server's throughput and latency for cluster names, and
//! the memory it adds to an idle server.
//!
//! Starts `capstan server` (SQLite, no node agent, the DNS on a free port), creates S Services
//! with cluster IPs in one namespace, finds the DNS server's port in the `kube-system/kube-dns`
//! EndpointSlice and waits until it answers the last Service. Then C clients, each with its own
//! UDP socket and one query outstanding at a time, ask `A <service>.<ns>.svc.cluster.local` for
//! services picked in turn, for D seconds, over loopback; every answer is checked (its ID,
//! NOERROR and one record). Reported: queries per second, latency p50/p99/max, failures, and the
//! server's and this process's CPU (share of one core). Memory: the idle RSS of a server with
//! DNS and of one started with `--disable-dns`, each read after the same idle time.
//!
//! `--from-pod` measures the path a pod's resolver takes instead: `capstan server` with its
//! node agent (its own containerd, bridge, pod and service ranges and kubelet port; Debian's
//! busybox packed by `capstan image busybox`), the same Services, then one round from the host
//! to the DNS server's endpoint (for comparison on the same server) and one from inside a pod:
//! a busybox pod whose container runs this program, mounted read-only from the host with the
//! directories of the libraries `ldd` lists, as the hidden `capstan-bench dns-client`. That
//! client sends the same load to the `kube-dns` Service's cluster IP on port 53 (through the
//! node's nftables proxy) and prints its results as one JSON line, which the driver reads from
//! the pod's log (`/log`); the server's CPU is sampled through the run and taken over the
//! client's own load interval. The pod is deleted, and the node's leftovers removed, before the
//! server stops. Needs root, as `capstan-bench pods`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::{CpuMeter, ServerProcess, kib};
use crate::pods::{
    Cleanup, IMAGE, NodeNet, NodeServer, git_commit, loadavg, pack_busybox, preflight,
    remove_runtime_leftovers, temp_dir, wait_node_ready,
};
use crate::{cpu_ticks, machine, ticks_to_secs, utc_now};

/// Flags of `capstan-bench dns`.
#[derive(Args, Debug)]
pub struct DnsArgs {
    /// The `capstan` binary (default: `target/release/capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Services created (each answered with its cluster IP).
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Concurrent clients, one UDP socket and one outstanding query each.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// How long each server idles before its memory is read, in seconds.
    #[arg(long, default_value_t = 20)]
    idle: u64,
    /// A small run (100 Services, 8 clients, 2 s, 3 s idle) to check the driver.
    #[arg(long)]
    quick: bool,
    /// Query from inside a pod on a real node, through the `kube-dns` cluster IP and the
    /// node's proxy (needs root, containerd and the CNI plugins); no memory rounds.
    #[arg(long)]
    from_pod: bool,
    /// With --from-pod: the node's bridge (each cluster with a node needs its own).
    #[arg(long, default_value = "capdns0")]
    bridge: String,
    /// With --from-pod: the node's pod range.
    #[arg(long, default_value = "10.215.0.0/16")]
    cluster_cidr: String,
    /// With --from-pod: the cluster's service range (the `kube-dns` IP is its 10th address).
    #[arg(long, default_value = "10.216.0.0/16")]
    service_cidr: String,
    /// With --from-pod: where the temporary directory is made.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
}

/// Flags of the hidden `capstan-bench dns-client`, the load `dns --from-pod` runs in a pod.
#[derive(Args, Debug)]
pub struct DnsClientArgs {
    /// The DNS server (the `kube-dns` cluster IP and port 53).
    #[arg(long)]
    server: SocketAddr,
    /// The Services `svc-0` .. `svc-<N-1>` of the benchmark's namespace asked for in turn.
    #[arg(long)]
    services: usize,
    /// Concurrent clients.
    #[arg(long)]
    clients: usize,
    /// How long the load runs, in seconds.
    #[arg(long)]
    seconds: u64,
}

const NAMESPACE: &str = "dns-bench";
/// The pod that runs the client.
const CLIENT_POD: &str = "dns-client";
/// Where the pod sees this program.
const CLIENT_PATH: &str = "/capstan-bench";

/// The DNS server's address, from the `kube-dns` EndpointSlice (the reconciler writes it
/// within its 10 s interval).
async fn dns_endpoint(client: &kube::Client) -> Result<SocketAddr> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let slice = slices.get_opt("kube-dns").await?;
        let address = slice.as_ref().and_then(|s| {
            let port = s
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some("dns"))?
                .port?;
            let ip: IpAddr = s.endpoints.first()?.addresses.first()?.parse().ok()?;
            Some(SocketAddr::new(ip, u16::try_from(port).ok()?))
        });
        if let Some(address) = address {
            return Ok(address);
        }
        ensure!(
            Instant::now() < deadline,
            "the kube-dns EndpointSlice lists no server"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A query for `name` (A), encoded; its ID is bytes 0..2.
fn encoded_query(name: &str) -> Result<Vec<u8>> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name)?, RecordType::A));
    Ok(message.to_vec()?)
}

/// Sends `query` (with `id`) and waits for its answer; true when it is NOERROR with one record.
async fn exchange(
    socket: &tokio::net::UdpSocket,
    query: &mut [u8],
    id: u16,
    buf: &mut [u8],
) -> Result<bool> {
    query[..2].copy_from_slice(&id.to_be_bytes());
    socket.send(query).await?;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(2), socket.recv(buf))
            .await
            .context("no answer within 2 s")??;
        if n < 12 || buf[..2] != id.to_be_bytes() {
            continue;
        }
        let rcode = buf[3] & 0x0f;
        let answers = u16::from_be_bytes([buf[6], buf[7]]);
        return Ok(rcode == 0 && answers == 1);
    }
}

/// The queries, one per Service `svc-<i>` of the benchmark's namespace.
fn queries(services: usize) -> Result<Vec<Vec<u8>>> {
    (0..services)
        .map(|i| encoded_query(&format!("svc-{i}.{NAMESPACE}.svc.cluster.local.")))
        .collect()
}

/// A UDP socket connected to `server`, bound to any address of its family (loopback on the
/// host, the pod's address in a pod).
async fn connected(server: SocketAddr) -> Result<tokio::net::UdpSocket> {
    let any: IpAddr = if server.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = tokio::net::UdpSocket::bind((any, 0)).await?;
    socket.connect(server).await?;
    Ok(socket)
}

/// Waits until `server` answers the last query (the last Service created).
async fn wait_answered(server: SocketAddr, queries: &[Vec<u8>]) -> Result<()> {
    let probe = connected(server).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 1500];
    let mut last = queries.last().context("no Services")?.clone();
    while !exchange(&probe, &mut last, 1, &mut buf)
        .await
        .unwrap_or(false)
    {
        ensure!(
            Instant::now() < deadline,
            "the DNS server at {server} never answered the last Service"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

struct LoadResult {
    histogram: Histogram<u64>,
    failures: u64,
}

/// One client: asks in turn for the names starting at `offset`, until `until`.
async fn client(
    server: SocketAddr,
    queries: Arc<Vec<Vec<u8>>>,
    offset: usize,
    until: Instant,
) -> Result<LoadResult> {
    let socket = connected(server).await?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    let mut failures = 0;
    let mut buf = vec![0u8; 1500];
    let mut i = offset;
    let mut id: u16 = (offset as u16).wrapping_mul(7919);
    while Instant::now() < until {
        let mut query = queries[i % queries.len()].clone();
        i += 1;
        id = id.wrapping_add(1);
        let began = Instant::now();
        match exchange(&socket, &mut query, id, &mut buf).await {
            Ok(true) => {
                histogram.record(began.elapsed().as_micros().max(1) as u64)?;
            }
            Ok(false) | Err(_) => failures += 1,
        }
    }
    Ok(LoadResult {
        histogram,
        failures,
    })
}

/// Seconds since the Unix epoch (the host and its pods share the clock).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What one load round measured, as the pod's client prints it (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
struct Outcome {
    answered: u64,
    failed: u64,
    /// The load's wall time, in seconds.
    seconds: f64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
    /// When the load began and ended, seconds since the Unix epoch.
    began_unix: f64,
    ended_unix: f64,
    /// The client process's CPU over the load (user + system), in seconds.
    client_cpu_secs: f64,
}

impl Outcome {
    fn queries_per_second(&self) -> f64 {
        self.answered as f64 / self.seconds.max(1e-9)
    }
}

/// `clients` clients against `server` for `seconds`, once it answers the last Service: the
/// load of both the host's round and the pod's.
async fn load(
    server: SocketAddr,
    services: usize,
    clients: usize,
    seconds: u64,
) -> Result<Outcome> {
    let queries = queries(services)?;
    wait_answered(server, &queries).await?;
    let queries = Arc::new(queries);
    let cpu_before = cpu_ticks("self");
    let began_unix = unix_now();
    let began = Instant::now();
    let until = began + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(client(server, queries.clone(), c * 31, until)))
        .collect();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    let mut failed = 0;
    for task in tasks {
        let result = task.await??;
        histogram.add(&result.histogram)?;
        failed += result.failures;
    }
    let wall = began.elapsed().as_secs_f64();
    let client_cpu_secs = match (cpu_before, cpu_ticks("self")) {
        (Some(a), Some(b)) => ticks_to_secs(b.saturating_sub(a)),
        _ => 0.0,
    };
    Ok(Outcome {
        answered: histogram.len(),
        failed,
        seconds: wall,
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
        began_unix,
        ended_unix: unix_now(),
        client_cpu_secs,
    })
}

/// `capstan-bench dns-client`: the load, its outcome printed as one JSON line.
pub async fn run_client(args: DnsClientArgs) -> Result<()> {
    let outcome = load(args.server, args.services, args.clients, args.seconds).await?;
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(())
}

/// Creates the benchmark's namespace and its Services, 16 at a time.
async fn create_services(client: &kube::Client, count: usize) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let api: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let results: Vec<kube::Result<Service>> = futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let service: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("svc-{i}")},
                    "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                }))
                .map_err(kube::Error::SerdeError)?;
                api.create(&PostParams::default(), &service).await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(())
}

/// Starts a server without a node on a fresh data directory under `dir`, and its client.
async fn start(
    binary: &Path,
    dir: &Path,
    label: &str,
    extra: &[&str],
) -> Result<(ServerProcess, PathBuf)> {
    let data = dir.join(label);
    let log = dir.join(format!("{label}.log"));
    let (server, _) = ServerProcess::start_with(binary, &data, None, extra, &log).await?;
    Ok((server, data))
}

/// A results row's cells from queries/s on: queries/s, p50, p99, max, failed, server CPU,
/// client CPU.
fn cells(outcome: &Outcome, server_cpu: &str, client_cpu: &str) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "{:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {} | {server_cpu} | {client_cpu} |",
        outcome.queries_per_second(),
        ms(outcome.p50_us),
        ms(outcome.p99_us),
        ms(outcome.max_us),
        outcome.failed,
    )
}

pub async fn run(args: DnsArgs) -> Result<()> {
    if args.from_pod {
        return run_from_pod(args).await;
    }
    let binary = crate::server_binary(args.server)?;
    let (services, clients, seconds, idle) = if args.quick {
        (100, 8, 2, 3)
    } else {
        (args.services, args.clients, args.seconds, args.idle)
    };
    let dir = tempfile::Builder::new()
        .prefix("capstan-dns-bench")
        .tempdir_in("/var/tmp")?;

    // Memory first, on idle servers with and without DNS.
    let (with, _) = start(&binary, dir.path(), "with-dns", &[]).await?;
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let with_memory = with.memory();
    with.stop().await?;
    let (without, _) = start(&binary, dir.path(), "without-dns", &["--disable-dns"]).await?;
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let without_memory = without.memory();
    without.stop().await?;

    // Throughput and latency.
    let (server, data) = start(&binary, dir.path(), "load", &[]).await?;
    let client = crate::pods::client(&data).await?;
    create_services(&client, services).await?;
    let port = dns_endpoint(&client).await?.port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let queries = queries(services)?;
    wait_answered(address, &queries).await?;
    let cpu = CpuMeter::start(&server.pid);
    let outcome = load(address, services, clients, seconds).await?;
    let (server_cpu, bench_cpu) = cpu.finish();
    server.stop().await?;
    if outcome.answered == 0 {
        bail!("no query was answered");
    }

    println!(
        "## DNS: {services} Services, {clients} UDP clients, {seconds} s (`capstan-bench dns`)\n"
    );
    println!("| queries/s | p50 | p99 | max | failed | server CPU | bench CPU |");
    println!("|---|---|---|---|---|---|---|");
    println!("| {}", cells(&outcome, &server_cpu, &bench_cpu));
    println!();
    println!("| idle server after {idle} s | VmRSS | VmHWM |");
    println!("|---|---|---|");
    println!(
        "| with DNS | {} | {} |",
        kib(with_memory.rss),
        kib(with_memory.hwm)
    );
    println!(
        "| `--disable-dns` | {} | {} |",
        kib(without_memory.rss),
        kib(without_memory.hwm)
    );
    println!(
        "| difference | {} | |",
        kib(with_memory.rss.saturating_sub(without_memory.rss))
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// From a pod
// ---------------------------------------------------------------------------------------------

/// A process's CPU time sampled every 50 ms, so that its share can be taken over an interval
/// another process reports in wall-clock time.
struct CpuSampler {
    samples: Arc<Mutex<Vec<(f64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CpuSampler {
    fn start(pid: &str) -> CpuSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let pid = pid.to_owned();
        let task = tokio::spawn({
            let samples = samples.clone();
            async move {
                loop {
                    if let Some(ticks) = cpu_ticks(&pid)
                        && let Ok(mut samples) = samples.lock()
                    {
                        samples.push((unix_now(), ticks));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        CpuSampler { samples, task }
    }

    /// The share of one core used from the last sample before `from` to the first after `to`.
    fn share(&self, from: f64, to: f64) -> String {
        let Ok(samples) = self.samples.lock() else {
            return "n/a".to_owned();
        };
        let first = samples.iter().rev().find(|(t, _)| *t <= from);
        let last = samples.iter().find(|(t, _)| *t >= to);
        match (first, last) {
            (Some(a), Some(b)) if b.0 > a.0 => format!(
                "{:.0}%",
                ticks_to_secs(b.1.saturating_sub(a.1)) / (b.0 - a.0) * 100.0
            ),
            _ => "n/a".to_owned(),
        }
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The directories of the shared libraries `ldd` lists for `program` (none for a static one).
fn library_dirs(program: &Path) -> Result<Vec<String>> {
    let output = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut dirs: Vec<String> = text
        .lines()
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, `/lib64/ld-linux-x86-64.so.2 (0x…)`
        .filter_map(|line| line.rsplit("=>").next()?.split_whitespace().next())
        .filter(|path| path.starts_with('/'))
        .filter_map(|path| Some(Path::new(path).parent()?.display().to_string()))
        .collect();
    dirs.sort();
    dirs.dedup();
    Ok(dirs)
}

/// The client's pod: busybox running this program (and the libraries it links, all mounted
/// read-only from the host) as `dns-client` against `server`.
fn client_pod(server: SocketAddr, services: usize, clients: usize, seconds: u64) -> Result<Pod> {
    let program = std::env::current_exe()?;
    let mut volumes = vec![json!({"name": "bench",
        "hostPath": {"path": program.display().to_string(), "type": "File"}})];
    let mut mounts = vec![json!({"name": "bench", "mountPath": CLIENT_PATH, "readOnly": true})];
    for (i, dir) in library_dirs(&program)?.into_iter().enumerate() {
        let name = format!("lib-{i}");
        volumes.push(json!({"name": name, "hostPath": {"path": dir, "type": "Directory"}}));
        mounts.push(json!({"name": name, "mountPath": dir, "readOnly": true}));
    }
    let command = [
        CLIENT_PATH.to_owned(),
        "dns-client".to_owned(),
        "--server".to_owned(),
        server.to_string(),
        "--services".to_owned(),
        services.to_string(),
        "--clients".to_owned(),
        clients.to_string(),
        "--seconds".to_owned(),
        seconds.to_string(),
    ];
    Ok(serde_json::from_value(json!({
        "metadata": {"name": CLIENT_POD},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "client", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": command, "volumeMounts": mounts}],
            "volumes": volumes,
        },
    }))?)
}

/// The two rounds of `--from-pod` on one node: the host to the DNS server's endpoint, then
/// the pod to the `kube-dns` cluster IP.
struct PodRounds {
    endpoint: SocketAddr,
    host: Outcome,
    host_cpu: (String, String),
    cluster_ip: SocketAddr,
    pod: Outcome,
    pod_server_cpu: String,
}

async fn pod_rounds(
    client: &kube::Client,
    server_pid: &str,
    services: usize,
    clients: usize,
    seconds: u64,
) -> Result<PodRounds> {
    create_services(client, services).await?;
    let endpoint = dns_endpoint(client).await?;
    let cluster_ip: IpAddr = Api::<Service>::namespaced(client.clone(), "kube-system")
        .get("kube-dns")
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the kube-dns Service has no cluster IP")?
        .parse()?;
    let cluster_ip = SocketAddr::new(cluster_ip, 53);

    eprintln!("dns bench: {clients} clients on the host against {endpoint} for {seconds} s");
    // Answered before the server's CPU is measured (the records are built once synced).
    wait_answered(endpoint, &queries(services)?).await?;
    let cpu = CpuMeter::start(server_pid);
    let host = load(endpoint, services, clients, seconds).await?;
    let host_cpu = cpu.finish();

    eprintln!("dns bench: {clients} clients in a pod against {cluster_ip} for {seconds} s");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await?.is_none() {
        ensure!(
            Instant::now() < deadline,
            "no default service account in {NAMESPACE} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let sampler = CpuSampler::start(server_pid);
    pods.create(
        &PostParams::default(),
        &client_pod(cluster_ip, services, clients, seconds)?,
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(seconds + 120);
    loop {
        let pod = pods.get(CLIENT_POD).await?;
        match pod.status.and_then(|s| s.phase).as_deref() {
            Some("Succeeded") => break,
            Some("Failed") => {
                let logs = pods
                    .logs(CLIENT_POD, &LogParams::default())
                    .await
                    .unwrap_or_default();
                bail!("the client pod failed; its log: {logs}");
            }
            _ => {}
        }
        ensure!(
            Instant::now() < deadline,
            "the client pod had not finished {} s after its creation",
            seconds + 120
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logs = pods.logs(CLIENT_POD, &LogParams::default()).await?;
    let line = logs
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no results in the client pod's log: {logs}"))?;
    let pod: Outcome =
        serde_json::from_str(line).with_context(|| format!("the client pod's results: {line}"))?;
    let pod_server_cpu = sampler.share(pod.began_unix, pod.ended_unix);
    Ok(PodRounds {
        endpoint,
        host,
        host_cpu,
        cluster_ip,
        pod,
        pod_server_cpu,
    })
}

/// Deletes the benchmark's namespace and waits until its pods are gone, so that the node
/// stops their containers before the server stops.
async fn remove_pods(client: &kube::Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await?.is_none() {
        return Ok(());
    }
    namespaces
        .delete(NAMESPACE, &DeleteParams::default())
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pods.list(&ListParams::default()).await?.items.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "the benchmark's pods were not gone 120 s after their namespace's deletion"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

/// The node: the image packed, the server started, the rounds, then the pods removed through
/// the API and the server stopped (also after a failed round).
async fn node_rounds(
    binary: &Path,
    dir: &Path,
    data: &Path,
    net: &NodeNet,
    (services, clients, seconds): (usize, usize, u64),
) -> Result<PodRounds> {
    pack_busybox(binary, data).await?;
    let log = dir.join("server.log");
    let mut server = NodeServer::spawn_on(binary, data, &log, net, &[])?;
    let client = wait_node_ready(&mut server, data, &log, Duration::from_secs(120)).await?;
    let rounds = pod_rounds(&client, &server.pid, services, clients, seconds).await;
    let removed = remove_pods(&client).await;
    remove_runtime_leftovers(data).await;
    server.stop().await?;
    removed?;
    rounds
}

async fn run_from_pod(args: DnsArgs) -> Result<()> {
    let binary = crate::server_binary(args.server)?;
    let (services, clients, seconds) = if args.quick {
        (100, 8, 2)
    } else {
        (args.services, args.clients, args.seconds)
    };
    preflight(&args.bridge)?;
    let net = NodeNet {
        bridge: args.bridge,
        cluster_cidr: args.cluster_cidr,
        service_cidr: Some(args.service_cidr),
        kubelet_port: capstan_testkit::free_port(),
    };
    let tmp = temp_dir(&args.dir, "capstan-dns-pod-bench-")?;
    let dir = tmp.path().to_owned();
    let data = dir.join("node");
    let cleanup = Cleanup {
        dir: dir.clone(),
        data: data.clone(),
        bridge: net.bridge.clone(),
    };
    let date = utc_now();
    let load_before = loadavg();
    let result = node_rounds(&binary, &dir, &data, &net, (services, clients, seconds)).await;
    cleanup.runtime().await;
    drop(cleanup);
    let load_after = loadavg();
    let r = result?;
    if r.pod.answered == 0 {
        bail!("no query from the pod was answered");
    }
    println!(
        "## DNS from a pod: {services} Services, {clients} UDP clients, {seconds} s \
         (`capstan-bench dns --from-pod`)\n"
    );
    println!(
        "{date}, commit {}, {}; load average {load_before} before, {load_after} after. The \
         client and the server share the machine's CPUs.\n",
        git_commit(),
        machine(),
    );
    println!("| client | queries/s | p50 | p99 | max | failed | server CPU | client CPU |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| host, to the DNS server's endpoint {} | {}",
        r.endpoint,
        cells(&r.host, &r.host_cpu.0, &r.host_cpu.1)
    );
    let pod_cpu = format!(
        "{:.0}%",
        r.pod.client_cpu_secs / r.pod.seconds.max(1e-9) * 100.0
    );
    println!(
        "| pod, to the kube-dns cluster IP {} | {}",
        r.cluster_ip,
        cells(&r.pod, &r.pod_server_cpu, &pod_cpu)
    );
    Ok(())
}
