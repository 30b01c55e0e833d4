//! `capstan-bench metrics`: what seeing the cluster costs and how fast it reacts, on a real
//! node (the pods benchmark's: its own containerd, bridge `capbench0`, Debian's busybox).
//!
//! 1. **Collection cost**: the same node twice, each time with N idle pods (`sleep`, default
//!    50) running: first with `--disable-metrics-server` (nothing scrapes the kubelet's
//!    resource metrics), then with the built-in Metrics API scraping every node each
//!    `--metric-resolution` (15 s) and a client reading `kubectl top`'s lists every 15 s. The
//!    server process (API server, controllers, kubelet, proxy, DNS) is measured over the same
//!    interval (default 60 s) after the pods have run for a settling time; the difference is
//!    the cost of metrics collection (goal: under 2 % of a core and 5 MiB).
//! 2. **HPA reaction**: on the second node, a Deployment of one pod that burns CPU (request
//!    100m) with a HorizontalPodAutoscaler at 50 % (1 to 4 replicas): the time from its pod
//!    running (the load) to the autoscaler asking for more replicas and to the Deployment
//!    having them (goal: within 30 s).
//!
//! Needs root and the node's prerequisites, as `capstan-bench pods`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::pods::{
    Cleanup, IMAGE, NodeNet, NodeServer, Usage, git_commit, loadavg, measure, mib_of, pack_busybox,
    preflight, remove_runtime_leftovers, temp_dir, wait_node_ready,
};
use crate::{machine, utc_now};

const NAMESPACE: &str = "metrics-bench";

/// Flags of `capstan-bench metrics`.
#[derive(Args, Debug)]
pub struct MetricsArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Idle pods on the node while measuring.
    #[arg(long, default_value_t = 50)]
    pods: usize,
    /// Seconds each node is measured.
    #[arg(long, default_value_t = 60)]
    measure_secs: u64,
    /// Seconds the pods run before measuring (the first scrapes, caches settling).
    #[arg(long, default_value_t = 40)]
    settle_secs: u64,
    /// Where the temporary directory is made.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
}

/// One node's measurement.
struct NodeRun {
    usage: Usage,
    /// The HPA reaction, on the node with metrics: (to the scale-out decision, to the new
    /// replicas existing).
    reaction: Option<(Duration, Duration)>,
}

pub async fn run(args: MetricsArgs) -> Result<()> {
    let binary = crate::server_binary(args.server.clone())?;
    preflight(&NodeNet::bench().bridge)?;
    let tmp = temp_dir(&args.dir, "capstan-metrics-bench-")?;
    let date = utc_now();
    let load_before = loadavg();
    let mut runs = Vec::new();
    for (name, flags) in [
        ("without", &["--disable-metrics-server"][..]),
        ("with", &[][..]),
    ] {
        let dir = tmp.path().join(name);
        let data = dir.join("node");
        let cleanup = Cleanup {
            dir: dir.clone(),
            data: data.clone(),
            bridge: NodeNet::bench().bridge,
        };
        eprintln!("metrics bench: node {name} the Metrics API");
        let result = run_node(&binary, &dir, &data, flags, &args, name == "with").await;
        cleanup.runtime().await;
        drop(cleanup);
        runs.push(result?);
    }
    let load_after = loadavg();
    let (without, with) = (&runs[0], &runs[1]);
    let interval = args.measure_secs;
    println!(
        "### Metrics: collection cost and HPA reaction ({date})\n\n\
         `capstan-bench metrics --pods {} --measure-secs {interval} --settle-secs {}` at commit {}, \
         {}; load average {load_before} before, {load_after} after.\n",
        args.pods,
        args.settle_secs,
        git_commit(),
        machine(),
    );
    println!(
        "| node with {} idle pods | server CPU (share of a core) | server RSS |",
        args.pods
    );
    println!("|---|---|---|");
    for (label, run) in [
        ("`--disable-metrics-server`", without),
        (
            "built-in Metrics API, scraped every 15 s, read every 15 s",
            with,
        ),
    ] {
        println!(
            "| {label} | {:.2} % | {:.1} MiB |",
            run.usage.cpu * 100.0,
            mib_of(run.usage.rss)
        );
    }
    println!(
        "| **cost of metrics** | **{:+.2} %** | **{:+.1} MiB** |\n",
        (with.usage.cpu - without.usage.cpu) * 100.0,
        mib_of(with.usage.rss) - mib_of(without.usage.rss),
    );
    if let Some((decided, scaled)) = with.reaction {
        println!(
            "HPA reaction (one pod burning a core, request 100m, target 50 %): scale-out decided \
             {:.1} s and new replicas created {:.1} s after the pod ran.\n",
            decided.as_secs_f64(),
            scaled.as_secs_f64()
        );
    }
    Ok(())
}

async fn run_node(
    binary: &Path,
    dir: &Path,
    data: &Path,
    flags: &[&str],
    args: &MetricsArgs,
    with_metrics: bool,
) -> Result<NodeRun> {
    pack_busybox(binary, data).await?;
    let log = dir.join("server.log");
    let mut server = NodeServer::spawn_with(binary, data, &log, flags)?;
    let client = wait_node_ready(&mut server, data, &log, Duration::from_secs(120)).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await?.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..args.pods {
        let pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("idle-{i}"), "labels": {"app": "idle"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "sleep", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"]}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    wait_running(&pods, "app=idle", args.pods, Duration::from_secs(300)).await?;
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    // A reader as `kubectl top pods` every 15 s, when the API is there.
    let reader = with_metrics.then(|| {
        let client = client.clone();
        tokio::spawn(async move {
            let request = http::Request::get(format!(
                "/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods"
            ))
            .body(Vec::new());
            let Ok(request) = request else { return };
            loop {
                let _ = client.request_text(request.clone()).await;
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
        })
    });
    eprintln!("metrics bench: measuring for {} s", args.measure_secs);
    let usage = measure(
        std::slice::from_ref(&server.pid),
        Duration::from_secs(args.measure_secs),
    )
    .await;
    if let Some(reader) = reader {
        reader.abort();
    }
    let reaction = if with_metrics {
        Some(hpa_reaction(&client).await?)
    } else {
        None
    };
    // The pods go through the API first, so that the node stops their containers: sandboxes
    // removed behind its back would be made again, and a container whose shim is killed
    // afterwards keeps running (the HPA phase's burners did, once).
    namespaces
        .delete(NAMESPACE, &kube::api::DeleteParams::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(180);
    while !pods.list(&ListParams::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the benchmark's pods were not gone 180 s after their namespace's deletion");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    remove_runtime_leftovers(data).await;
    server.stop().await?;
    Ok(NodeRun { usage, reaction })
}

/// Waits until `count` pods matching `selector` run.
async fn wait_running(
    pods: &Api<Pod>,
    selector: &str,
    count: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = pods.list(&ListParams::default().labels(selector)).await?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{running} of {count} pods running after {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A burning Deployment with an HPA at 50 %: from its pod running to the scale-out decision
/// and to the Deployment's new replica count.
async fn hpa_reaction(client: &kube::Client) -> Result<(Duration, Duration)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "load"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "load"}},
                    "template": {"metadata": {"labels": {"app": "load"}}, "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "burn", "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "while :; do :; done"],
                            "resources": {"requests": {"cpu": "100m"}}}]}}},
            }))?,
        )
        .await?;
    hpas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "load"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "load"},
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}}]},
        }))?,
    )
    .await?;
    wait_running(&pods, "app=load", 1, Duration::from_secs(60)).await?;
    let loaded = Instant::now();
    let mut decided = None;
    loop {
        let hpa = hpas.get("load").await?;
        let desired = hpa.status.as_ref().map_or(0, |s| s.desired_replicas);
        if decided.is_none() && desired > 1 {
            decided = Some(loaded.elapsed());
        }
        let replicas = deployments
            .get("load")
            .await?
            .spec
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        if let Some(decided) = decided
            && replicas > 1
        {
            return Ok((decided, loaded.elapsed()));
        }
        if loaded.elapsed() > Duration::from_secs(180) {
            bail!("the HPA did not scale out within 180 s of the load");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
