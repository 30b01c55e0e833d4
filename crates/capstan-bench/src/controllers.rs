//! `capstan-bench controllers`: how fast the controllers converge a cluster, and what they cost.
//!
//! Starts `capstan server` (SQLite, scheduler in-process, controllers off), the controllers as
//! their own process (`capstan controller-manager`, so their CPU and memory can be read apart)
//! and `capstan sim` nodes; then creates D Deployments of R replicas at once and times until
//! every one reports all R replicas updated and available (pods created by the ReplicaSet
//! controller, scheduled, run by the simulated kubelets), then changes every template at once
//! and times the rolling update of all of them to the same state with no old pods left.
//! Reported per phase: wall time, the controller manager's and the server's CPU (share of one
//! core), and the controller manager's peak RSS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Conn, CpuMeter, Memory, ServerProcess, kib};

/// Flags of `capstan-bench controllers`.
#[derive(Args, Debug)]
pub struct ControllersArgs {
    /// The `capstan` binary (default: `target/release/capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 500)]
    nodes: usize,
    /// Deployments.
    #[arg(long, default_value_t = 100)]
    deployments: usize,
    /// Replicas per Deployment.
    #[arg(long, default_value_t = 30)]
    replicas: usize,
    /// A small run (20 nodes, 5 Deployments of 4) to check the driver.
    #[arg(long)]
    quick: bool,
}

const NAMESPACE: &str = "ctl-bench";

/// A child process killed when dropped.
pub(crate) struct Child(tokio::process::Child);

impl Child {
    pub(crate) fn spawn(binary: &Path, args: &[&str], log: &Path) -> Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = tokio::process::Command::new(binary)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", binary.display(), args.join(" ")))?;
        Ok(Child(child))
    }

    /// `capstan sim` with `nodes` nodes of 32 CPUs and 110 pods, through `kubeconfig`.
    pub(crate) fn spawn_sim(
        binary: &Path,
        kubeconfig: &Path,
        nodes: usize,
        log: &Path,
    ) -> Result<Child> {
        let (kubeconfig, nodes) = (kubeconfig.to_string_lossy(), nodes.to_string());
        let args = ["sim", "--kubeconfig", &kubeconfig, "--nodes", &nodes];
        let sizes = ["--cpu", "32", "--pods", "110"];
        Child::spawn(binary, &[&args[..], &sizes[..]].concat(), log)
    }

    pub(crate) fn pid(&self) -> Result<String> {
        self.0
            .id()
            .map(|p| p.to_string())
            .context("the process exited")
    }
}

fn deployment(name: &str, replicas: usize) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1",
                                              "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
                },
            },
        })
        .to_string(),
    )
}

/// How many Deployments are done: every replica updated and available, none old, the latest
/// generation observed.
async fn converged(conn: &Conn, replicas: usize) -> Result<usize> {
    let body = conn
        .call(
            Method::GET,
            &format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments"),
            None,
            StatusCode::OK,
        )
        .await?;
    let list: Value = serde_json::from_slice(&body)?;
    let done = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|d| {
                    let status = &d["status"];
                    let n = |f: &str| status[f].as_u64().unwrap_or(0) as usize;
                    status["observedGeneration"].as_i64() >= d["metadata"]["generation"].as_i64()
                        && n("updatedReplicas") == replicas
                        && n("availableReplicas") == replicas
                        && n("replicas") == replicas
                })
                .count()
        })
        .unwrap_or(0);
    Ok(done)
}

async fn wait_converged(
    conn: &Conn,
    count: usize,
    replicas: usize,
    timeout: Duration,
) -> Result<Duration> {
    let began = Instant::now();
    loop {
        let done = converged(conn, replicas).await?;
        if done == count {
            return Ok(began.elapsed());
        }
        if began.elapsed() > timeout {
            bail!(
                "{done} of {count} Deployments converged after {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One measured phase.
struct Phase {
    wall: Duration,
    controllers_cpu: String,
    server_cpu: String,
}

async fn measure<F: std::future::Future<Output = Result<Duration>>>(
    cm_pid: &str,
    server_pid: &str,
    work: F,
) -> Result<Phase> {
    let cm = CpuMeter::start(cm_pid);
    let server = CpuMeter::start(server_pid);
    let wall = work.await?;
    Ok(Phase {
        wall,
        controllers_cpu: cm.finish().0,
        server_cpu: server.finish().0,
    })
}

/// Runs the benchmark and prints the report.
pub async fn run(args: ControllersArgs) -> Result<()> {
    let binary = crate::server_binary(args.server)?;
    let (nodes, count, replicas) = if args.quick {
        (20, 5, 4)
    } else {
        (args.nodes, args.deployments, args.replicas)
    };
    let dir = tempfile::Builder::new()
        .prefix("capstan-ctl-bench")
        .tempdir_in("/var/tmp")?;
    let log = dir.path().join("server.log");
    let data = dir.path().join("data");
    let (server, _) = ServerProcess::start_with(
        &binary,
        &data,
        None,
        &["--disable-controller-manager"],
        &log,
    )
    .await?;
    let kubeconfig = data.join("kubeconfig.yaml");
    let kc = kubeconfig.to_string_lossy().into_owned();
    // A /16 holds 256 node ranges (kube-controller-manager runs out there too): give the node
    // IPAM controller room for every simulated node.
    let manager = Child::spawn(
        &binary,
        &[
            "controller-manager",
            "--kubeconfig",
            &kc,
            "--leader-elect=false",
            "--cluster-cidr",
            "10.64.0.0/12",
        ],
        &dir.path().join("controllers.log"),
    )?;
    let _sim = Child::spawn_sim(&binary, &kubeconfig, nodes, &dir.path().join("sim.log"))?;
    let conn = server.connect().await?;
    let began = Instant::now();
    loop {
        let body = conn
            .call(
                Method::GET,
                "/api/v1/nodes?limit=1000000",
                None,
                StatusCode::OK,
            )
            .await?;
        let list: Value = serde_json::from_slice(&body)?;
        if list["items"].as_array().map_or(0, Vec::len) >= nodes {
            break;
        }
        if began.elapsed() > Duration::from_secs(300) {
            bail!("the simulated nodes did not register");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    conn.call(
        Method::POST,
        "/api/v1/namespaces",
        Some(Bytes::from(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
                .to_string(),
        )),
        StatusCode::CREATED,
    )
    .await?;
    // Let the controllers' and scheduler's caches take in the nodes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cm_pid = manager.pid()?;
    let conns = server.connect_many(8).await?;
    let names: Vec<String> = (0..count).map(|i| format!("dep-{i}")).collect();
    let path = format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments");
    let create = measure(&cm_pid, &server.pid, async {
        let began = Instant::now();
        let results: Vec<Result<Bytes>> = futures::stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                conns[i % conns.len()].call(
                    Method::POST,
                    &path,
                    Some(deployment(name, replicas)),
                    StatusCode::CREATED,
                )
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<_>>>()?;
        wait_converged(&conn, count, replicas, Duration::from_secs(1200)).await?;
        Ok(began.elapsed())
    })
    .await?;
    let update = measure(&cm_pid, &server.pid, async {
        let began = Instant::now();
        let patch = Bytes::from(json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:2", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}).to_string());
        let results: Vec<Result<()>> = futures::stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let conn = conns[i % conns.len()].clone();
                let (path, patch) = (format!("{path}/{name}"), patch.clone());
                async move {
                    let response = conn.send_typed(Method::PATCH, &path, Some(patch), "application/merge-patch+json").await?;
                    let status = response.status();
                    let body = response.into_body().collect().await?.to_bytes();
                    if status != StatusCode::OK {
                        bail!("PATCH {path}: {status}: {}", String::from_utf8_lossy(&body));
                    }
                    Ok(())
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<_>>>()?;
        wait_converged(&conn, count, replicas, Duration::from_secs(1200)).await?;
        Ok(began.elapsed())
    })
    .await?;
    let peak = kib(Memory::of(&cm_pid).hwm);
    let idle = kib(Memory::of(&cm_pid).rss);
    server.stop().await?;
    let command: Vec<String> = std::env::args().collect();
    println!("## Controllers (`{}`)\n", command.join(" "));
    println!(
        "{count} Deployments x {replicas} replicas on {nodes} simulated nodes; the controllers in \
         their own process (`capstan controller-manager`), the scheduler in the server.\n"
    );
    println!("| phase | wall time | controller-manager CPU | server CPU |");
    println!("|---|---|---|---|");
    for (name, phase) in [
        ("create, until all available", &create),
        ("rolling update of all, until done", &update),
    ] {
        println!(
            "| {name} | {:.1} s | {} | {} |",
            phase.wall.as_secs_f64(),
            phase.controllers_cpu,
            phase.server_cpu
        );
    }
    println!("\ncontroller-manager RSS: {idle} at the end, {peak} peak.");
    Ok(())
}
