//! `capstan-bench proxy`: the service proxy's sync cost with many Services, against the real
//! kernel (in a network namespace of its own, so the host's rules are untouched).
//!
//! `--services` Services with two ports each (TCP 80 with a node port, UDP 53) and
//! `--endpoints` endpoints each are synced once in full; then `--changes` times one endpoint of
//! one Service (a different one each time) flips between ready and not ready, and the proxy
//! brings the table up to date. Each change is measured from the moment the proxy holds the
//! new objects to the moment `nft` has committed the transaction (model, difference,
//! encoding and `nft -j -f -`), with its size in commands; the same changes are then applied
//! as full replacements of the table, the way a proxy without incremental syncs would, side by
//! side. Needs root and `nft`.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use capstan_proxy::{NodeInfo, Proxier, rules};
use clap::Args;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

/// `capstan-bench proxy` options.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// How many Services.
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Endpoints per Service.
    #[arg(long, default_value_t = 10)]
    endpoints: usize,
    /// How many one-endpoint changes to time.
    #[arg(long, default_value_t = 200)]
    changes: usize,
}

/// A network namespace removed when dropped.
struct Netns(String);

impl Netns {
    fn new() -> Result<Netns> {
        let name = format!("capstan-bench-proxy-{}", std::process::id());
        let status = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .context("ip netns add (iproute2, run as root)")?;
        ensure!(status.success(), "ip netns add {name} failed");
        Ok(Netns(name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn objects(services: usize, endpoints: usize) -> Result<(Vec<Service>, Vec<EndpointSlice>)> {
    let mut all_services = Vec::with_capacity(services);
    let mut slices = Vec::with_capacity(services);
    for i in 0..services {
        all_services.push(serde_json::from_value(json!({
            "metadata": {"name": format!("svc{i}"), "namespace": "bench", "resourceVersion": "1"},
            "spec": {
                "type": "NodePort",
                "clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1),
                "ports": [{"name": "http", "port": 80, "nodePort": 30000 + i, "protocol": "TCP"},
                          {"name": "dns", "port": 53, "protocol": "UDP"}],
            },
        }))?);
        let addresses: Vec<serde_json::Value> = (0..endpoints)
            .map(|e| {
                json!({"addresses": [format!("10.42.{}.{}", e, i % 250 + 1)], "nodeName": "n1",
                       "conditions": {"ready": true}})
            })
            .collect();
        slices.push(serde_json::from_value(json!({
            "metadata": {"name": format!("svc{i}-x"), "namespace": "bench", "resourceVersion": "1",
                         "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
            "addressType": "IPv4",
            "endpoints": addresses,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"}],
        }))?);
    }
    Ok((all_services, slices))
}

/// Flips the readiness of one endpoint of Service `change % services`.
fn flip(slices: &mut [EndpointSlice], change: usize) {
    let count = slices.len();
    let slice = &mut slices[change % count];
    let endpoints = slice.endpoints.len();
    if endpoints == 0 {
        return;
    }
    let endpoint = &mut slice.endpoints[(change / count) % endpoints];
    let conditions = endpoint.conditions.get_or_insert_with(Default::default);
    conditions.ready = Some(!conditions.ready.unwrap_or(true));
    // A new version of the slice, as a watch delivers it.
    let version = slice.metadata.resource_version.as_deref().unwrap_or("1");
    slice.metadata.resource_version = Some((version.parse::<u64>().unwrap_or(1) + 1).to_string());
}

struct Run {
    latency: Histogram<u64>,
    /// The part of the latency spent bringing the model up to date.
    model: Histogram<u64>,
    commands: Histogram<u64>,
}

/// The proxy's state between syncs: its model and its proxier.
struct State {
    model: rules::Model,
    proxier: Proxier,
    table: &'static str,
    nft: Vec<String>,
}

impl State {
    fn new(table: &'static str, nft: Vec<String>) -> State {
        State {
            model: rules::Model::default(),
            proxier: Proxier::new(table, &nft),
            table,
            nft,
        }
    }

    /// Forgets everything, so that the next sync replaces the whole table.
    fn forget(&mut self) {
        *self = State::new(self.table, std::mem::take(&mut self.nft));
    }
}

async fn changes(
    state: &mut State,
    services: &[Service],
    slices: &mut [EndpointSlice],
    node: &NodeInfo,
    count: usize,
    full: bool,
) -> Result<Run> {
    let mut run = Run {
        latency: Histogram::new(3)?,
        model: Histogram::new(3)?,
        commands: Histogram::new(3)?,
    };
    for change in 0..count {
        flip(slices, change);
        if full {
            state.forget();
        }
        let started = Instant::now();
        let desired = state.model.desired(services, slices, node);
        run.model
            .record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))?;
        let stats = state.proxier.sync(desired).await?;
        run.latency
            .record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))?;
        run.commands.record(stats.commands as u64)?;
    }
    Ok(run)
}

fn ms(micros: u64) -> String {
    format!("{:.1}", micros as f64 / 1000.0)
}

/// Runs the benchmark and prints the report.
pub async fn run(args: ProxyArgs) -> Result<()> {
    let netns = Netns::new()?;
    let nft: Vec<String> = ["ip", "netns", "exec", &netns.0, "nft"]
        .map(String::from)
        .to_vec();
    let table = "kube-proxy";
    let node = NodeInfo {
        name: "n1".to_owned(),
        pod_cidr: Some(("10.42.0.0".parse()?, 24)),
        addresses: ["192.0.2.1".parse()?].into(),
    };
    let (services, mut slices) = objects(args.services, args.endpoints)?;
    eprintln!(
        "proxy: {} Services x {} endpoints, full sync",
        args.services, args.endpoints
    );
    let mut state = State::new(table, nft);
    let started = Instant::now();
    let desired = state.model.desired(&services, &slices, &node);
    let model_time = started.elapsed();
    let size = desired.size();
    let stats = state.proxier.sync(desired).await?;
    let first = started.elapsed();
    eprintln!("proxy: {} incremental changes", args.changes);
    let incremental = changes(
        &mut state,
        &services,
        &mut slices,
        &node,
        args.changes,
        false,
    )
    .await?;
    let full_changes = args.changes.min(20);
    eprintln!("proxy: {full_changes} changes as full replacements");
    let full = changes(
        &mut state,
        &services,
        &mut slices,
        &node,
        full_changes,
        true,
    )
    .await?;
    println!(
        "Services: {} (2 ports each, one a node port) x {} endpoints; table objects: {size}",
        args.services, args.endpoints
    );
    println!(
        "first full sync: {} ms ({} ms computing the model), {} commands",
        first.as_millis(),
        model_time.as_millis(),
        stats.commands
    );
    println!();
    println!(
        "| one endpoint's readiness flips, then | changes | p50 ms | p99 ms | max ms | of which the model, p50 / p99 ms | commands per transaction (p50 / max) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, run, count) in [
        ("incremental sync (Capstan)", &incremental, args.changes),
        ("full table replacement", &full, full_changes),
    ] {
        println!(
            "| {name} | {count} | {} | {} | {} | {} / {} | {} / {} |",
            ms(run.latency.value_at_quantile(0.5)),
            ms(run.latency.value_at_quantile(0.99)),
            ms(run.latency.max()),
            ms(run.model.value_at_quantile(0.5)),
            ms(run.model.value_at_quantile(0.99)),
            run.commands.value_at_quantile(0.5),
            run.commands.max(),
        );
    }
    state.proxier.remove().await?;
    Ok(())
}
