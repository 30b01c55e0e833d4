//! `capstan-bench storage`: the PersistentVolume binder at scale.
//!
//! Starts `capstan server` (SQLite, no node agent, the controllers in the server), makes N
//! PersistentVolumes (hostPath, never mounted, 1Gi, no class, `Retain`) and then N claims of
//! 1Gi with no class, 16 creates in flight, and times from the first claim's create until the
//! API lists every claim `Bound` (each to a volume of its own: checked). Then deletes every
//! claim and times until every volume is `Released`. Reported per phase: wall time and the
//! server's CPU (share of one core).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Conn, CpuMeter, ServerProcess};

/// Flags of `capstan-bench storage`.
#[derive(Args, Debug)]
pub struct StorageArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Volumes, and claims.
    #[arg(long, default_value_t = 1000)]
    claims: usize,
    /// A small run (50 claims) to check the driver.
    #[arg(long)]
    quick: bool,
}

const NAMESPACE: &str = "storage-bench";

/// Creates every body at `path`, 16 at a time over the connections.
async fn create_all(conns: &[Conn], path: &str, bodies: Vec<Bytes>) -> Result<()> {
    let results: Vec<Result<Bytes>> = futures::stream::iter(bodies.into_iter().enumerate())
        .map(|(i, body)| {
            conns[i % conns.len()].call(Method::POST, path, Some(body), StatusCode::CREATED)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(())
}

async fn list(conn: &Conn, path: &str) -> Result<Vec<Value>> {
    let body = conn.call(Method::GET, path, None, StatusCode::OK).await?;
    let list: Value = serde_json::from_slice(&body)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn phase_of(object: &Value) -> &str {
    object["status"]["phase"].as_str().unwrap_or("")
}

/// Polls `path` until `done` holds of its items; the time it took.
async fn wait_until(
    conn: &Conn,
    path: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&[Value]) -> bool,
) -> Result<Duration> {
    let began = Instant::now();
    loop {
        if done(&list(conn, path).await?) {
            return Ok(began.elapsed());
        }
        if began.elapsed() > timeout {
            bail!("{what}: not done after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the benchmark and prints the report.
pub async fn run(args: StorageArgs) -> Result<()> {
    let binary = crate::server_binary(args.server)?;
    let count = if args.quick { 50 } else { args.claims };
    let dir = tempfile::Builder::new()
        .prefix("capstan-storage-bench")
        .tempdir_in("/var/tmp")?;
    let data = dir.path().join("data");
    let (server, _) =
        ServerProcess::start_with(&binary, &data, None, &[], &dir.path().join("server.log"))
            .await?;
    let conn = server.connect().await?;
    let conns = server.connect_many(8).await?;
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
    let volumes: Vec<Bytes> = (0..count)
        .map(|i| {
            Bytes::from(
                json!({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": format!("bench-pv-{i}")},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                             "hostPath": {"path": format!("/var/tmp/capstan-storage-bench-{i}")}},
                })
                .to_string(),
            )
        })
        .collect();
    create_all(&conns, "/api/v1/persistentvolumes", volumes).await?;
    wait_until(
        &conn,
        "/api/v1/persistentvolumes",
        "volumes Available",
        Duration::from_secs(120),
        |items| items.len() == count && items.iter().all(|v| phase_of(v) == "Available"),
    )
    .await?;
    let claims_path = format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims");
    let claims: Vec<Bytes> = (0..count)
        .map(|i| {
            Bytes::from(
                json!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": format!("bench-claim-{i}")},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                             "resources": {"requests": {"storage": "1Gi"}}},
                })
                .to_string(),
            )
        })
        .collect();

    let cpu = CpuMeter::start(&server.pid);
    let began = Instant::now();
    create_all(&conns, &claims_path, claims).await?;
    let created = began.elapsed();
    wait_until(
        &conn,
        &claims_path,
        "claims Bound",
        Duration::from_secs(600),
        |items| items.len() == count && items.iter().all(|c| phase_of(c) == "Bound"),
    )
    .await?;
    let bound = began.elapsed();
    let bind_cpu = cpu.finish().0;
    let items = list(&conn, &claims_path).await?;
    let distinct: HashSet<&str> = items
        .iter()
        .filter_map(|c| c["spec"]["volumeName"].as_str())
        .collect();
    ensure!(
        distinct.len() == count,
        "{} claims share {} volumes",
        count,
        distinct.len()
    );

    let cpu = CpuMeter::start(&server.pid);
    let began = Instant::now();
    conn.call(Method::DELETE, &claims_path, None, StatusCode::OK)
        .await?;
    wait_until(
        &conn,
        "/api/v1/persistentvolumes",
        "volumes Released",
        Duration::from_secs(600),
        |items| items.iter().all(|v| phase_of(v) == "Released"),
    )
    .await?;
    let released = began.elapsed();
    let release_cpu = cpu.finish().0;
    server.stop().await?;

    let command: Vec<String> = std::env::args().collect();
    println!("## Storage (`{}`)\n", command.join(" "));
    println!(
        "{count} PersistentVolumes (1Gi, no class) made first, then {count} claims of 1Gi created \
         16 at a time; the binder in the server (no node agent).\n"
    );
    println!("| phase | wall time | server CPU |");
    println!("|---|---|---|");
    println!(
        "| claims created, until every claim is Bound (creates done after {:.1} s) | {:.1} s | {bind_cpu} |",
        created.as_secs_f64(),
        bound.as_secs_f64()
    );
    println!(
        "| all claims deleted, until every volume is Released | {:.1} s | {release_cpu} |",
        released.as_secs_f64()
    );
    Ok(())
}
