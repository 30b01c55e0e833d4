//! `capstan-bench nodewatch`: what one server pays for its kubelets' pod lists and watches at
//! scale (issue 27), with the watch cache's `spec.nodeName` index and without it
//! (`CAPSTAN_WATCH_CACHE_INDEXES=false` in the server's environment), side by side in one run.
//!
//! For each setting it starts `capstan server` (SQLite, no node agent, the pod garbage collector
//! off so that pods bound to nodes that do not exist stay), creates P pods spread evenly over N
//! node names (`spec.nodeName` set at create), then:
//! 1. lists one node's pods as a kubelet does (all namespaces, `fieldSelector=spec.nodeName=
//!    <node>`, a random node each time), 8 clients in a closed loop, consistent reads (no
//!    `resourceVersion`) and then reads from the cache as it stands (`resourceVersion=0`);
//! 2. creates C more pods bound to those nodes, 16 clients in a closed loop, with no watch open;
//! 3. opens W watches, one per node (`spec.nodeName=<node>`, from the current revision), and
//!    creates C more pods: the creates' rate and latency while the watches are open, the
//!    server's CPU, and how long after the last create every watch has had all its pods'
//!    ADDED events (each is counted: every pod reaches its node's watch and no other).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use clap::Args;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::api::{Conn, CpuMeter, ServerProcess, create_namespace, kib, round_cells};

/// Flags of `capstan-bench nodewatch`.
#[derive(Args, Debug)]
pub struct NodewatchArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Pods created before the measurements.
    #[arg(long, default_value_t = 50_000)]
    pods: usize,
    /// Node names the pods are spread over, and node watches opened.
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Pods created in each create round.
    #[arg(long, default_value_t = 5_000)]
    creates: usize,
    /// How long each list round runs, in seconds.
    #[arg(long, default_value_t = 10)]
    list_seconds: u64,
    /// A small run (2,000 pods over 100 nodes, 500 creates, 2 s lists) to check the driver.
    #[arg(long)]
    quick: bool,
}

const NAMESPACE: &str = "nodewatch";
/// Watch streams per HTTP/2 connection.
const WATCHES_PER_CONNECTION: usize = 100;

fn node(i: usize) -> String {
    format!("node-{i:05}")
}

fn pod(name: &str, node: &str) -> Bytes {
    let object = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web", "bench": "nodewatch"}},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "web",
                "image": "registry.k8s.io/nginx-slim:0.27",
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }],
        },
    });
    Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
}

/// Creates pods `from..to` (named `<prefix>-<i>`, pod `i` on node `i % nodes`) with `conns`
/// clients, each waiting for its create before the next: the rate, latency and CPU row.
async fn create_round(
    server: &ServerProcess,
    conns: &[Conn],
    prefix: &str,
    count: usize,
    nodes: usize,
) -> Result<Vec<String>> {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    let cpu = CpuMeter::start(&server.pid);
    let began = Instant::now();
    for conn in conns {
        let (conn, next, path, prefix) =
            (conn.clone(), next.clone(), path.clone(), prefix.to_owned());
        set.spawn(async move {
            let mut out = crate::WorkerOut::new()?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= count {
                    break;
                }
                let body = pod(&format!("{prefix}-{i:06}"), &node(i % nodes));
                let start = Instant::now();
                match conn
                    .call(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                {
                    Ok(_) => out.success(start.elapsed()),
                    Err(error) => {
                        if out.failure(error) {
                            break;
                        }
                    }
                }
            }
            anyhow::Ok(out)
        });
    }
    let outs = crate::join_all(set)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let phase = crate::Phase::merge(&outs, began.elapsed())?;
    ensure!(
        phase.errors == 0,
        "creates failed: {}",
        phase.first_error.as_deref().unwrap_or("?")
    );
    Ok(round_cells(&phase, cpu.finish()))
}

/// Lists a random node's pods with 8 clients for `duration`; `query` is appended to the path.
async fn list_round(
    server: &ServerProcess,
    nodes: usize,
    per_node: usize,
    query: &'static str,
    duration: Duration,
) -> Result<Vec<String>> {
    let conns = server.connect_many(8).await?;
    let cpu = CpuMeter::start(&server.pid);
    let phase = crate::api::closed_loop(conns, duration, move |conn, client, i| async move {
        // A spread of nodes without a shared generator.
        let n = (client as u64 * 7919 + i * 104_729) as usize % nodes;
        let path = format!(
            "/api/v1/pods?fieldSelector=spec.nodeName%3D{}{query}",
            node(n)
        );
        let body = conn.call(Method::GET, &path, None, StatusCode::OK).await?;
        if i == 0 {
            let list: Value = serde_json::from_slice(&body)?;
            let items = list["items"].as_array().map_or(0, Vec::len);
            ensure!(items == per_node, "{path}: {items} pods, not {per_node}");
        }
        Ok(())
    })
    .await?;
    Ok(round_cells(&phase, cpu.finish()))
}

/// Opens one watch per node from `rv`; each counts the ADDED events of its node's pods it
/// receives into `added`, and those of other nodes' pods into `strays`.
async fn open_watches(
    server: &ServerProcess,
    nodes: usize,
    rv: &str,
    added: Arc<AtomicU64>,
    strays: Arc<AtomicU64>,
) -> Result<JoinSet<()>> {
    let conns = server
        .connect_many(nodes.div_ceil(WATCHES_PER_CONNECTION))
        .await?;
    let mut set = JoinSet::new();
    for n in 0..nodes {
        let conn = &conns[n / WATCHES_PER_CONNECTION];
        let path = format!(
            "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}\
             &fieldSelector=spec.nodeName%3D{}",
            node(n)
        );
        let response = conn.send(Method::GET, &path, None).await?;
        ensure!(
            response.status() == StatusCode::OK,
            "watch answered {}",
            response.status()
        );
        let (added, strays) = (added.clone(), strays.clone());
        let mine = format!("\"nodeName\":\"{}\"", node(n));
        set.spawn(async move {
            let mut body = response.into_body();
            let mut buffer = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let line = String::from_utf8_lossy(&line);
                    if line.contains("\"type\":\"ADDED\"") {
                        let count = if line.contains(&mine) {
                            &added
                        } else {
                            &strays
                        };
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    Ok(set)
}

/// One server's measurements.
struct Report {
    populate: String,
    memory: String,
    lists: Vec<(&'static str, Vec<String>)>,
    creates: Vec<(String, Vec<String>)>,
    delivered: String,
}

async fn measure(
    binary: &std::path::Path,
    indexes: bool,
    pods: usize,
    nodes: usize,
    creates: usize,
    list_time: Duration,
) -> Result<Report> {
    let label = if indexes { "indexed" } else { "walked" };
    let dir = tempfile::Builder::new()
        .prefix("capstan-nodewatch-bench")
        .tempdir_in("/var/tmp")?;
    let env: &[(&str, &str)] = if indexes {
        &[]
    } else {
        &[("CAPSTAN_WATCH_CACHE_INDEXES", "false")]
    };
    let (server, _) = ServerProcess::start_with_env(
        binary,
        &dir.path().join("data"),
        None,
        &["--disable-controllers=podgc"],
        env,
        &dir.path().join("server.log"),
    )
    .await?;
    let admin = server.connect().await?;
    create_namespace(&admin, NAMESPACE).await?;
    // The namespace's default service account comes from a controller: wait for it.
    let began = Instant::now();
    while admin
        .call(
            Method::GET,
            &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
            None,
            StatusCode::OK,
        )
        .await
        .is_err()
    {
        if began.elapsed() > Duration::from_secs(60) {
            bail!("no default service account after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let conns = server.connect_many(16).await?;
    eprintln!("[{label}] creating {pods} pods over {nodes} nodes");
    let populate = create_round(&server, &conns, "pod", pods, nodes).await?;
    let memory = server.memory();
    let memory = format!("{} ({} anon)", kib(memory.rss), kib(memory.anon));
    let per_node = pods / nodes;
    let mut lists = Vec::new();
    for (name, query) in [
        ("consistent", ""),
        ("`resourceVersion=0`", "&resourceVersion=0"),
    ] {
        eprintln!("[{label}] lists by node, {name}");
        lists.push((
            name,
            list_round(&server, nodes, per_node, query, list_time).await?,
        ));
    }
    let mut rounds = Vec::new();
    eprintln!("[{label}] {creates} creates, no watches");
    rounds.push((
        "no watches".to_owned(),
        create_round(&server, &conns, "before", creates, nodes).await?,
    ));
    let list = admin
        .call(
            Method::GET,
            &format!("/api/v1/namespaces/{NAMESPACE}/pods?limit=1"),
            None,
            StatusCode::OK,
        )
        .await?;
    let list: Value = serde_json::from_slice(&list)?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .context("the list has no resourceVersion")?
        .to_owned();
    eprintln!("[{label}] {nodes} node watches, {creates} creates");
    let (added, strays) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut watches = open_watches(&server, nodes, &rv, added.clone(), strays.clone()).await?;
    // Let every watch reach the cache before writing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    rounds.push((
        format!("{nodes} node watches"),
        create_round(&server, &conns, "during", creates, nodes).await?,
    ));
    let after = Instant::now();
    while added.load(Ordering::Relaxed) < creates as u64 {
        if after.elapsed() > Duration::from_secs(120) {
            bail!(
                "the watches had {} of {creates} pods after 120 s",
                added.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let delivered = format!("{:.1} ms", after.elapsed().as_secs_f64() * 1000.0);
    ensure!(
        added.load(Ordering::Relaxed) == creates as u64 && strays.load(Ordering::Relaxed) == 0,
        "{} ADDED events for {creates} pods, {} of them to another node's watch",
        added.load(Ordering::Relaxed),
        strays.load(Ordering::Relaxed)
    );
    watches.abort_all();
    while watches.join_next().await.is_some() {}
    server.stop().await?;
    Ok(Report {
        populate: populate[0].clone(),
        memory,
        lists,
        creates: rounds,
        delivered,
    })
}

/// Runs the benchmark and prints the report.
pub async fn run(args: NodewatchArgs) -> Result<()> {
    let binary = crate::server_binary(args.server)?;
    let (pods, nodes, creates, list_time) = if args.quick {
        (2_000, 100, 500, Duration::from_secs(2))
    } else {
        (
            args.pods,
            args.nodes,
            args.creates,
            Duration::from_secs(args.list_seconds),
        )
    };
    ensure!(
        nodes > 0 && pods % nodes == 0,
        "--pods must be a multiple of --nodes"
    );
    ensure!(
        creates % nodes == 0,
        "--creates must be a multiple of --nodes"
    );
    let mut reports = Vec::new();
    for indexes in [false, true] {
        reports.push((
            indexes,
            measure(&binary, indexes, pods, nodes, creates, list_time).await?,
        ));
    }

    let command: Vec<String> = std::env::args().collect();
    println!("## Node lists and watches (`{}`)\n", command.join(" "));
    println!(
        "{pods} pods over {nodes} nodes ({} each) in one server; \"walked\" is the server with \
         `CAPSTAN_WATCH_CACHE_INDEXES=false`. Rounds: ops/s, p50, p99, max, server CPU, bench \
         CPU, errors.\n",
        pods / nodes
    );
    println!("| indexes | populate creates/s (16 clients) | server RSS after |");
    println!("|---|---|---|");
    for (indexes, report) in &reports {
        println!(
            "| {} | {} | {} |",
            if *indexes { "indexed" } else { "walked" },
            report.populate,
            report.memory
        );
    }
    println!(
        "\nOne node's pods, all namespaces (`fieldSelector=spec.nodeName=<node>`), 8 clients:\n"
    );
    println!("| indexes | read | lists/s | p50 | p99 | max | server CPU | bench CPU | errors |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (indexes, report) in &reports {
        for (read, cells) in &report.lists {
            println!(
                "| {} | {read} | {} |",
                if *indexes { "indexed" } else { "walked" },
                cells.join(" | ")
            );
        }
    }
    println!("\nPod creates (16 clients), each bound to a node:\n");
    println!(
        "| indexes | open watches | creates/s | p50 | p99 | max | server CPU | bench CPU | errors | every ADDED delivered after the last create |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (indexes, report) in &reports {
        for (i, (watches, cells)) in report.creates.iter().enumerate() {
            println!(
                "| {} | {watches} | {} | {} |",
                if *indexes { "indexed" } else { "walked" },
                cells.join(" | "),
                if i == 0 {
                    "-"
                } else {
                    report.delivered.as_str()
                }
            );
        }
    }
    Ok(())
}
