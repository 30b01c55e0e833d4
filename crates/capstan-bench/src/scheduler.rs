//! `capstan-bench scheduler`: a port of upstream's scheduler_perf `SchedulingBasic` test,
//! through the real API server and datastore.
//!
//! For each node count: start `capstan server` (SQLite, its scheduler running in-process), create
//! the nodes as scheduler_perf does (no kubelet: `node-default.yaml`'s 4 CPUs, 32 GiB, 110
//! pods, Ready), create the initial pods and wait until they are bound, then create the
//! measured pods from many clients at once and watch them being bound. Pods are
//! `pod-default.yaml`'s: one container requesting 100m CPU and 500 MiB.
//!
//! Reported: pods bound per second over the measured phase (first create to last binding) and
//! the best one-second rate; per-pod latency from the create request to the binding seen on a
//! watch (p50, p99, max); the server's CPU share and peak RSS.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::api::{Conn, CpuMeter, ServerProcess, kib};

/// Flags of `capstan-bench scheduler`.
#[derive(Args, Debug)]
pub struct SchedulerArgs {
    /// The `capstan` binary (default: `target/release/capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Node counts to run, each on a fresh server.
    #[arg(long, value_delimiter = ',', default_value = "500,5000")]
    nodes: Vec<usize>,
    /// Pods placed before the measured phase.
    #[arg(long, default_value_t = 1000)]
    init_pods: usize,
    /// Pods created and measured.
    #[arg(long, default_value_t = 10000)]
    pods: usize,
    /// Clients creating pods at once.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// A small run (100 nodes, 100 + 1,000 pods) to check the driver.
    #[arg(long)]
    quick: bool,
}

const NAMESPACE: &str = "sched-bench";

fn node(name: &str) -> Bytes {
    let allocatable = json!({"cpu": "4", "memory": "32Gi", "pods": "110"});
    Bytes::from(
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": allocatable,
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
            },
        })
        .to_string(),
    )
}

fn pod(name: &str) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{
                "name": "pause", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
            }]},
        })
        .to_string(),
    )
}

/// `count` objects named `<prefix>-<i>` with their bodies.
fn named(prefix: &str, count: usize, body: fn(&str) -> Bytes) -> Vec<(String, Bytes)> {
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            let b = body(&name);
            (name, b)
        })
        .collect()
}

/// The part of a pod watch event the benchmark reads.
#[derive(serde::Deserialize)]
struct WatchedPod {
    object: PodFields,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PodFields {
    metadata: PodMeta,
    spec: PodSpecFields,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PodMeta {
    name: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpecFields {
    node_name: Option<String>,
}

/// When each pod was seen bound, by name.
pub(crate) type Bindings = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches `namespace`'s pods and records when each one is first seen with a node.
pub(crate) async fn watch_bindings(conn: Conn, namespace: &str, bindings: Bindings) -> Result<()> {
    let path = format!("/api/v1/namespaces/{namespace}/pods?watch=1&allowWatchBookmarks=false");
    let response = conn.send(Method::GET, &path, None).await?;
    if response.status() != StatusCode::OK {
        bail!("watch: {}", response.status());
    }
    let mut body = response.into_body().into_data_stream();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = body.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            // Only the two fields looked at are decoded: the load generator shares the cores
            // with the server it measures.
            let Ok(event) = serde_json::from_slice::<WatchedPod>(&line) else {
                continue;
            };
            let object = event.object;
            if object.spec.node_name.is_some_and(|n| !n.is_empty()) {
                let now = Instant::now();
                if let Ok(mut b) = bindings.lock() {
                    b.entry(object.metadata.name).or_insert(now);
                }
            }
        }
    }
    Ok(())
}

/// Creates every `(name, body)` at `path` with `clients` requests in flight over `conns`;
/// returns when each create was sent, by name.
pub(crate) async fn create_all(
    conns: &[Conn],
    path: &str,
    bodies: Vec<(String, Bytes)>,
    clients: usize,
) -> Result<HashMap<String, Instant>> {
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let results = futures::stream::iter(bodies.into_iter().enumerate())
        .map(|(i, (name, body))| {
            let conn = conns[i % conns.len()].clone();
            let started = started.clone();
            let path = path.to_owned();
            async move {
                if let Ok(mut s) = started.lock() {
                    s.insert(name, Instant::now());
                }
                conn.call(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(clients)
        .collect::<Vec<_>>()
        .await;
    for result in results {
        result?;
    }
    let started = std::mem::take(&mut *started.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    Ok(started)
}

/// Waits until every pod of `names` is in `bindings`.
pub(crate) async fn wait_bound(
    bindings: &Bindings,
    names: &[String],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let bound = {
            let b = bindings.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            names.iter().filter(|n| b.contains_key(*n)).count()
        };
        if bound == names.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {bound} of {} pods were bound in {timeout:?}",
                names.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One row of the report.
struct Row {
    nodes: usize,
    throughput: f64,
    peak: usize,
    p50: f64,
    p99: f64,
    max: f64,
    cpu: String,
    rss: String,
}

async fn run_one(
    server_bin: &std::path::Path,
    nodes: usize,
    init: usize,
    pods: usize,
    clients: usize,
) -> Result<Row> {
    let dir = tempfile::Builder::new()
        .prefix("capstan-sched-bench")
        .tempdir_in("/var/tmp")?;
    let log = dir.path().join("server.log");
    let (server, _) =
        ServerProcess::start_with(server_bin, &dir.path().join("data"), None, &[], &log).await?;
    let conns = server.connect_many(clients.clamp(1, 16)).await?;
    conns[0]
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(Bytes::from(
                json!({"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": NAMESPACE}})
                .to_string(),
            )),
            StatusCode::CREATED,
        )
        .await?;
    eprintln!("scheduler bench: creating {nodes} nodes");
    create_all(&conns, "/api/v1/nodes", named("node", nodes, node), clients).await?;
    // Let the scheduler's node watch catch up before pods arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bindings: Bindings = Arc::default();
    let watch = tokio::spawn(watch_bindings(
        server.connect().await?,
        NAMESPACE,
        bindings.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pods_path = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    eprintln!("scheduler bench: {init} initial pods");
    let init_bodies = named("init", init, pod);
    let init_names: Vec<String> = init_bodies.iter().map(|(n, _)| n.clone()).collect();
    create_all(&conns, &pods_path, init_bodies, clients).await?;
    wait_bound(&bindings, &init_names, Duration::from_secs(120)).await?;
    eprintln!("scheduler bench: {pods} measured pods at {clients} clients");
    let bodies = named("pod", pods, pod);
    let names: Vec<String> = bodies.iter().map(|(n, _)| n.clone()).collect();
    let cpu = CpuMeter::start(&server.pid);
    let began = Instant::now();
    let created = create_all(&conns, &pods_path, bodies, clients).await?;
    wait_bound(&bindings, &names, Duration::from_secs(600)).await?;
    let (server_cpu, _) = cpu.finish();
    let bound = bindings
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    watch.abort();
    let mut latency = Histogram::<u64>::new(3)?;
    let mut last = began;
    let mut per_second: HashMap<u64, usize> = HashMap::new();
    for name in &names {
        let (Some(at), Some(start)) = (bound.get(name), created.get(name)) else {
            continue;
        };
        latency.record(at.saturating_duration_since(*start).as_micros() as u64)?;
        last = last.max(*at);
        *per_second
            .entry(at.saturating_duration_since(began).as_secs())
            .or_default() += 1;
    }
    let elapsed = last.duration_since(began).as_secs_f64().max(1e-9);
    let rss = kib(server.memory().hwm);
    server.stop().await.context("stopping the server")?;
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    Ok(Row {
        nodes,
        throughput: names.len() as f64 / elapsed,
        peak: per_second.values().copied().max().unwrap_or(0),
        p50: ms(0.5),
        p99: ms(0.99),
        max: latency.max() as f64 / 1000.0,
        cpu: server_cpu,
        rss,
    })
}

/// Runs the benchmark and prints the report.
pub async fn run(args: SchedulerArgs) -> Result<()> {
    let server = crate::server_binary(args.server)?;
    let (nodes, init, pods) = if args.quick {
        (vec![100], 100, 1000)
    } else {
        (args.nodes.clone(), args.init_pods, args.pods)
    };
    let command: Vec<String> = std::env::args().collect();
    println!("## Scheduler (`{}`)\n", command.join(" "));
    println!(
        "SchedulingBasic: {init} pods placed first, then {pods} created by {} clients; nodes \
         of 4 CPUs, 32 GiB, 110 pods; pods request 100m and 500Mi.\n",
        args.clients
    );
    println!(
        "| nodes | pods bound/s | best second | latency p50 | p99 | max | server CPU | server peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for n in nodes {
        match run_one(&server, n, init, pods, args.clients).await {
            Ok(row) => println!(
                "| {} | {:.0} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} |",
                row.nodes, row.throughput, row.peak, row.p50, row.p99, row.max, row.cpu, row.rss
            ),
            Err(e) => println!("| {n} | failed: {e:#} | | | | | | |"),
        }
    }
    Ok(())
}
