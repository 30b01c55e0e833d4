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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Conn, CpuMeter, ServerProcess, kib};

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
}

const NAMESPACE: &str = "dns-bench";

/// The server's DNS port, from the `kube-dns` EndpointSlice (the reconciler writes it within
/// its 10 s interval).
async fn dns_port(conn: &Conn) -> Result<u16> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = conn
            .call(
                Method::GET,
                "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
                None,
                StatusCode::OK,
            )
            .await?;
        let list: Value = serde_json::from_slice(&body)?;
        let port = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["metadata"]["name"] == "kube-dns")
            .flat_map(|s| s["ports"].as_array().cloned().unwrap_or_default())
            .find(|p| p["name"] == "dns")
            .and_then(|p| p["port"].as_u64());
        if let Some(port) = port {
            return Ok(u16::try_from(port)?);
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
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    socket.connect(server).await?;
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

/// Creates the Services, 16 at a time.
async fn create_services(conn: &Conn, count: usize) -> Result<()> {
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
    let path = format!("/api/v1/namespaces/{NAMESPACE}/services");
    let results: Vec<Result<Bytes>> = futures::stream::iter(0..count)
        .map(|i| {
            let body = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("svc-{i}")},
                "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            });
            conn.call(
                Method::POST,
                &path,
                Some(Bytes::from(body.to_string())),
                StatusCode::CREATED,
            )
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(())
}

/// Starts a server on a fresh data directory under `dir`.
async fn start(binary: &Path, dir: &Path, label: &str, extra: &[&str]) -> Result<ServerProcess> {
    let data = dir.join(label);
    let log = dir.join(format!("{label}.log"));
    let (server, _) = ServerProcess::start_with(binary, &data, None, extra, &log).await?;
    Ok(server)
}

pub async fn run(args: DnsArgs) -> Result<()> {
    let binary = match args.server {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("capstan"))
            .context("no capstan binary beside capstan-bench")?,
    };
    let (services, clients, seconds, idle) = if args.quick {
        (100, 8, 2, 3)
    } else {
        (args.services, args.clients, args.seconds, args.idle)
    };
    let dir = tempfile::Builder::new()
        .prefix("capstan-dns-bench")
        .tempdir_in("/var/tmp")?;

    // Memory first, on idle servers with and without DNS.
    let with = start(&binary, dir.path(), "with-dns", &[]).await?;
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let with_memory = with.memory();
    with.stop().await?;
    let without = start(&binary, dir.path(), "without-dns", &["--disable-dns"]).await?;
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let without_memory = without.memory();
    without.stop().await?;

    // Throughput and latency.
    let server = start(&binary, dir.path(), "load", &[]).await?;
    let conn = server.connect().await?;
    create_services(&conn, services).await?;
    let port = dns_port(&conn).await?;
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let names: Vec<String> = (0..services)
        .map(|i| format!("svc-{i}.{NAMESPACE}.svc.cluster.local."))
        .collect();
    let queries: Vec<Vec<u8>> = names
        .iter()
        .map(|n| encoded_query(n))
        .collect::<Result<_>>()?;
    // Until the last Service is answered.
    let probe = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    probe.connect(address).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 1500];
    let mut last = queries[services - 1].clone();
    while !exchange(&probe, &mut last, 1, &mut buf)
        .await
        .unwrap_or(false)
    {
        ensure!(
            Instant::now() < deadline,
            "the DNS server never answered the last Service"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queries = Arc::new(queries);
    let cpu = CpuMeter::start(&server.pid);
    let began = Instant::now();
    let until = began + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(client(address, queries.clone(), c * 31, until)))
        .collect();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    let mut failures = 0;
    for task in tasks {
        let result = task.await??;
        histogram.add(&result.histogram)?;
        failures += result.failures;
    }
    let wall = began.elapsed().as_secs_f64();
    let (server_cpu, bench_cpu) = cpu.finish();
    let answered = histogram.len();
    server.stop().await?;
    if answered == 0 {
        bail!("no query was answered");
    }

    println!(
        "## DNS: {services} Services, {clients} UDP clients, {seconds} s (`capstan-bench dns`)\n"
    );
    println!("| queries/s | p50 | p99 | max | failed | server CPU | bench CPU |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {failures} | {server_cpu} | {bench_cpu} |",
        answered as f64 / wall,
        histogram.value_at_quantile(0.5) as f64 / 1000.0,
        histogram.value_at_quantile(0.99) as f64 / 1000.0,
        histogram.max() as f64 / 1000.0,
    );
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
