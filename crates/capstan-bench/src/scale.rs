//! `capstan-bench scale`: one cluster at upstream's scale limits on this machine (issue 27):
//! thousands of simulated nodes (`capstan sim`) and a hundred thousand and more pods, on one
//! server over SQLite and on several servers sharing one etcd.
//!
//! For each datastore it starts the server(s) (the second and later ones joining the first with
//! its token, as a user adds servers), an etcd of its own for the etcd run (quota raised to
//! 8 GiB: the default 2 GiB does not hold this many pods with their history), and `capstan sim`
//! with N nodes talking to the last server started, then:
//! 1. **fill**: creates P pods over a hundred namespaces, spread across the servers, and waits
//!    until every one is bound and Running on a simulated node (create latency, rate);
//! 2. **steady state**, with every pod running and every node renewing its Lease: a few clients
//!    in a closed loop of ConfigMap create, update and delete (the mutating-call latency
//!    upstream's API call SLO bounds at p99 1 s), while others list a namespace's pods, all nodes,
//!    and walk all pods in pages of 500 as kubectl does (upstream's LIST SLO: p99 5 s in a
//!    namespace, 30 s cluster-wide), with a pause between lists;
//! 3. **memory**: each server's RSS after the nodes registered and after the pods ran (per
//!    10,000 pods), and etcd's;
//! 4. **scheduling**: S more pods created at 32 clients with P already running, pods bound per
//!    second and create-to-binding latency;
//! 5. **recovery**: the first server (the one that started first, so the leader of the scheduler
//!    and the controllers) is killed with SIGKILL. On SQLite it is started again at once on the
//!    same port and data; on etcd the others carry on. Reported: how long until the API answers
//!    a write (through the restarted server, or another), until the scheduler's and the
//!    controller manager's Leases have a live holder, and until a new ReplicaSet's pod is
//!    Running and ready (controllers, scheduler and nodes all back at work).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{ApiBackend, Conn, CpuMeter, Memory, ServerProcess, create_namespace, kib};
use crate::controllers::Child;
use crate::scheduler::{Bindings, create_all, wait_bound, watch_bindings};

/// Flags of `capstan-bench scale`.
#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Datastores to run on, each with a fresh cluster.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sqlite,etcd")]
    backends: Vec<ApiBackend>,
    /// Servers sharing the etcd in the etcd run (SQLite runs one).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Simulated nodes.
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    /// Pods created and run before the measurements.
    #[arg(long, default_value_t = 150_000)]
    pods: usize,
    /// Namespaces the pods are spread over.
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// Clients creating pods at once.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// How long the steady-state measurement runs, in seconds.
    #[arg(long, default_value_t = 60)]
    measure_seconds: u64,
    /// Pods created in the scheduling measurement.
    #[arg(long, default_value_t = 5_000)]
    sched_pods: usize,
    /// A small run (30 nodes, 600 pods, 3 s steady state, 100 scheduled) to check the driver.
    #[arg(long)]
    quick: bool,
}

/// The namespace of the scheduling measurement and the recovery's ReplicaSet.
const SCHED_NAMESPACE: &str = "scale-sched";
/// The namespace of the mutating calls.
const PROBE_NAMESPACE: &str = "scale-probe";
/// Pod CIDRs for every node: a /24 each out of a /11 (8,192 of them).
const CLUSTER_CIDR: &str = "10.64.0.0/11";
/// The Leases of the elected components.
const LEADER_LEASES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

fn pod(namespace: &str, name: &str) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "scale"}},
            "spec": {"containers": [{
                "name": "pause", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }]},
        })
        .to_string(),
    )
}

fn namespace_of(i: usize, namespaces: usize) -> String {
    format!("scale-{}", i % namespaces)
}

/// Latencies in microseconds.
#[derive(Clone)]
struct Latencies(Arc<Mutex<Histogram<u64>>>);

impl Latencies {
    fn new() -> Result<Latencies> {
        Ok(Latencies(Arc::new(Mutex::new(Histogram::new(3)?))))
    }

    fn record(&self, took: Duration) {
        if let Ok(mut h) = self.0.lock() {
            let _ = h.record(took.as_micros().max(1) as u64);
        }
    }

    /// `count, p50, p99, max` as table text.
    fn summary(&self) -> String {
        let Ok(h) = self.0.lock() else {
            return "poisoned".to_owned();
        };
        if h.is_empty() {
            return "no calls".to_owned();
        }
        let ms = |v: u64| format!("{:.0} ms", v as f64 / 1000.0);
        format!(
            "{} calls: p50 {}, p99 {}, max {}",
            h.len(),
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max())
        )
    }
}

/// The servers, the etcd, the simulator and their work directory.
struct Cluster {
    binary: PathBuf,
    dir: tempfile::TempDir,
    etcd: Option<(Child, String)>,
    servers: Vec<Option<ServerProcess>>,
    flags: Vec<Vec<String>>,
    /// The server the simulator and the probes talk to (the last one).
    main: usize,
    _sim: Child,
}

impl Cluster {
    async fn start(
        binary: &Path,
        backend: ApiBackend,
        servers: usize,
        nodes: usize,
    ) -> Result<Cluster> {
        let dir = tempfile::Builder::new()
            .prefix("capstan-scale-bench")
            .tempdir_in("/var/tmp")?;
        let etcd = match backend {
            ApiBackend::Sqlite => None,
            ApiBackend::Etcd => Some(start_etcd(dir.path()).await?),
        };
        let count = if etcd.is_some() { servers.max(1) } else { 1 };
        let endpoint = etcd.as_ref().map(|(_, e)| e.clone());
        let base: Vec<String> = ["--disable-metrics-server", "--cluster-cidr", CLUSTER_CIDR]
            .map(str::to_owned)
            .to_vec();
        let data = |i: usize| dir.path().join(format!("server-{i}"));
        let log = |i: usize| dir.path().join(format!("server-{i}.log"));
        let first_flags: Vec<&str> = base.iter().map(String::as_str).collect();
        eprintln!("[{}] starting server 1 of {count}", backend.name());
        let (first, _) =
            ServerProcess::start_with(binary, &data(0), endpoint.as_deref(), &first_flags, &log(0))
                .await?;
        let token = std::fs::read_to_string(data(0).join("token"))
            .context("reading the first server's token")?
            .trim()
            .to_owned();
        let url = first.base_url();
        let tls = first.tls();
        let mut flags = vec![base.clone()];
        let mut started = vec![Some(first)];
        for i in 1..count {
            eprintln!("[{}] starting server {} of {count}", backend.name(), i + 1);
            let mut joined = base.clone();
            joined.extend([
                "--server".to_owned(),
                url.clone(),
                "--token".to_owned(),
                token.clone(),
            ]);
            let args: Vec<&str> = joined.iter().map(String::as_str).collect();
            let (server, _) = ServerProcess::try_start(
                binary,
                &data(i),
                endpoint.as_deref(),
                &args,
                &[],
                &log(i),
                capstan_testkit::free_port(),
                Some(tls.clone()),
            )
            .await?;
            flags.push(joined);
            started.push(Some(server));
        }
        let main = count - 1;
        // The simulator reaches the last server, with the first one's admin credentials.
        let kubeconfig = std::fs::read_to_string(data(0).join("kubeconfig.yaml"))?;
        let main_port = started[main]
            .as_ref()
            .map(ServerProcess::port)
            .unwrap_or_default();
        let first_url = format!(
            "https://127.0.0.1:{}",
            started[0]
                .as_ref()
                .map(ServerProcess::port)
                .unwrap_or_default()
        );
        if !kubeconfig.contains(&first_url) {
            bail!("the kubeconfig does not name {first_url}");
        }
        let sim_config = dir.path().join("sim.kubeconfig");
        std::fs::write(
            &sim_config,
            kubeconfig.replace(&first_url, &format!("https://127.0.0.1:{main_port}")),
        )?;
        let sim = Child::spawn_sim(binary, &sim_config, nodes, &dir.path().join("sim.log"))?;
        Ok(Cluster {
            binary: binary.to_owned(),
            dir,
            etcd,
            servers: started,
            flags,
            main,
            _sim: sim,
        })
    }

    fn server(&self, i: usize) -> Result<&ServerProcess> {
        self.servers
            .get(i)
            .and_then(Option::as_ref)
            .context("that server is not running")
    }

    /// Connections spread over the running servers.
    async fn connections(&self, count: usize) -> Result<Vec<Conn>> {
        let live: Vec<&ServerProcess> = self.servers.iter().flatten().collect();
        let mut conns = Vec::new();
        for (i, server) in live.iter().enumerate() {
            let share = count / live.len() + usize::from(i < count % live.len());
            conns.extend(server.connect_many(share.max(1)).await?);
        }
        Ok(conns)
    }

    /// Each running server's memory, then etcd's.
    fn memory(&self) -> (Vec<Memory>, Option<Memory>) {
        let servers = self
            .servers
            .iter()
            .flatten()
            .map(ServerProcess::memory)
            .collect();
        let etcd = self
            .etcd
            .as_ref()
            .and_then(|(child, _)| child.pid().ok())
            .map(|pid| Memory::of(&pid));
        (servers, etcd)
    }

    async fn stop(mut self) -> Result<()> {
        for server in self.servers.iter_mut() {
            if let Some(server) = server.take() {
                server.stop().await?;
            }
        }
        drop(self.etcd.take());
        Ok(())
    }
}

/// Starts an etcd member of its own under `dir` with a quota for this many objects; returns it
/// with its client URL once it answers.
async fn start_etcd(dir: &Path) -> Result<(Child, String)> {
    let client = format!("http://127.0.0.1:{}", capstan_testkit::free_port());
    let peer = format!("http://127.0.0.1:{}", capstan_testkit::free_port());
    let data = dir.join("etcd");
    let child = Child::spawn(
        Path::new("etcd"),
        &[
            "--name",
            "scale",
            "--data-dir",
            &data.to_string_lossy(),
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &format!("scale={peer}"),
            "--quota-backend-bytes",
            "8589934592",
            "--max-request-bytes",
            "2097152",
        ],
        &dir.join("etcd.log"),
    )?;
    let began = Instant::now();
    loop {
        let health = tokio::process::Command::new("etcdctl")
            .args(["--endpoints", &client, "endpoint", "health"])
            .env("ETCDCTL_API", "3")
            .output()
            .await
            .context("running etcdctl")?;
        if health.status.success() {
            return Ok((child, client));
        }
        if began.elapsed() > Duration::from_secs(30) {
            bail!(
                "etcd did not become healthy: {}",
                String::from_utf8_lossy(&health.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get_json(conn: &Conn, path: &str) -> Result<Value> {
    let body = conn.call(Method::GET, path, None, StatusCode::OK).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// Waits until `nodes` nodes are Ready.
async fn wait_nodes_ready(conn: &Conn, nodes: usize) -> Result<Duration> {
    let began = Instant::now();
    loop {
        let list = get_json(conn, "/api/v1/nodes").await?;
        let ready = list["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count()
        });
        if ready >= nodes {
            return Ok(began.elapsed());
        }
        if began.elapsed() > Duration::from_secs(900) {
            bail!("only {ready} of {nodes} simulated nodes became Ready");
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Creates `pods` pods spread over the namespaces with `clients` requests in flight (each
/// retried up to three times); returns the create latencies and how many calls failed.
async fn fill(
    conns: &[Conn],
    pods: usize,
    namespaces: usize,
    clients: usize,
) -> Result<(Latencies, usize)> {
    let latencies = Latencies::new()?;
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let results = futures::stream::iter(0..pods)
        .map(|i| {
            let conn = conns[i % conns.len()].clone();
            let latencies = latencies.clone();
            let failures = failures.clone();
            async move {
                let namespace = namespace_of(i, namespaces);
                let path = format!("/api/v1/namespaces/{namespace}/pods");
                let body = pod(&namespace, &format!("p-{i}"));
                let mut last = None;
                for _ in 0..3 {
                    let began = Instant::now();
                    match conn
                        .call(Method::POST, &path, Some(body.clone()), StatusCode::CREATED)
                        .await
                    {
                        Ok(_) => {
                            latencies.record(began.elapsed());
                            return Ok(());
                        }
                        Err(error) => {
                            failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            last = Some(error);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
                Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt")))
            }
        })
        .buffer_unordered(clients)
        .collect::<Vec<Result<()>>>()
        .await;
    if let Some(error) = results.into_iter().find_map(Result::err) {
        return Err(error.context("a pod create failed three times"));
    }
    Ok((
        latencies,
        failures.load(std::sync::atomic::Ordering::Relaxed),
    ))
}

/// Waits until no pod in the cluster is other than Running.
async fn wait_all_running(conn: &Conn, timeout: Duration) -> Result<()> {
    let began = Instant::now();
    loop {
        let list = get_json(
            conn,
            "/api/v1/pods?fieldSelector=status.phase!%3DRunning&limit=100",
        )
        .await?;
        let left = list["items"].as_array().map_or(0, Vec::len);
        if left == 0 {
            return Ok(());
        }
        if began.elapsed() > timeout {
            bail!(
                "pods still not Running after {timeout:?}, e.g. {}",
                list["items"][0]["metadata"]["name"]
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The steady-state latencies.
struct Steady {
    mutating: Latencies,
    list_namespace: Latencies,
    list_nodes: Latencies,
    list_pages: Latencies,
    walks: Vec<Duration>,
    cpu: String,
}

/// Runs the steady-state calls for `duration`: `writers` clients creating, updating and deleting
/// ConfigMaps in a closed loop, and one client for each kind of list with `pause` between lists.
async fn steady(
    conns: &[Conn],
    writers: usize,
    namespaces: usize,
    duration: Duration,
    cpu_pid: &str,
) -> Result<Steady> {
    let pause = Duration::from_millis(500);
    let result = Steady {
        mutating: Latencies::new()?,
        list_namespace: Latencies::new()?,
        list_nodes: Latencies::new()?,
        list_pages: Latencies::new()?,
        walks: Vec::new(),
        cpu: String::new(),
    };
    let deadline = Instant::now() + duration;
    let cpu = CpuMeter::start(cpu_pid);
    let conn = |i: usize| conns[i % conns.len()].clone();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let (conn, latencies) = (conn(w), result.mutating.clone());
        tasks.spawn(async move {
            let path = format!("/api/v1/namespaces/{PROBE_NAMESPACE}/configmaps");
            let mut i = 0u64;
            while Instant::now() < deadline {
                let name = format!("w{w}-{i}");
                let body = |seq: u64| {
                    Bytes::from(
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": name, "namespace": PROBE_NAMESPACE},
                               "data": {"seq": seq.to_string()}})
                        .to_string(),
                    )
                };
                let item = format!("{path}/{name}");
                for (method, at, body, expect) in [
                    (
                        Method::POST,
                        path.as_str(),
                        Some(body(0)),
                        StatusCode::CREATED,
                    ),
                    (Method::PUT, item.as_str(), Some(body(1)), StatusCode::OK),
                    (Method::DELETE, item.as_str(), None, StatusCode::OK),
                ] {
                    let began = Instant::now();
                    conn.call(method, at, body, expect).await?;
                    latencies.record(began.elapsed());
                }
                i += 1;
            }
            anyhow::Ok(Vec::new())
        });
    }
    let lister = |conn: Conn, latencies: Latencies, path: fn(u64, usize) -> String| async move {
        let mut i = 0u64;
        while Instant::now() < deadline {
            let began = Instant::now();
            conn.call(Method::GET, &path(i, namespaces), None, StatusCode::OK)
                .await?;
            latencies.record(began.elapsed());
            i += 1;
            tokio::time::sleep(pause).await;
        }
        anyhow::Ok(Vec::new())
    };
    tasks.spawn(lister(
        conn(writers),
        result.list_namespace.clone(),
        |i, n| format!("/api/v1/namespaces/scale-{}/pods", i as usize % n),
    ));
    tasks.spawn(lister(
        conn(writers + 1),
        result.list_nodes.clone(),
        |_, _| "/api/v1/nodes".to_owned(),
    ));
    let (pages_conn, pages) = (conn(writers + 2), result.list_pages.clone());
    tasks.spawn(async move {
        let mut walks = Vec::new();
        while Instant::now() < deadline {
            let walk = Instant::now();
            let mut token = String::new();
            loop {
                let path = if token.is_empty() {
                    "/api/v1/pods?limit=500".to_owned()
                } else {
                    format!("/api/v1/pods?limit=500&continue={token}")
                };
                let began = Instant::now();
                let page = get_json(&pages_conn, &path).await?;
                pages.record(began.elapsed());
                token = page["metadata"]["continue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if token.is_empty() {
                    break;
                }
            }
            walks.push(walk.elapsed());
            tokio::time::sleep(pause).await;
        }
        anyhow::Ok(walks)
    });
    let mut walks = Vec::new();
    while let Some(done) = tasks.join_next().await {
        walks.extend(done??);
    }
    Ok(Steady {
        walks,
        cpu: cpu.finish().0,
        ..result
    })
}

/// Pods bound per second and create-to-binding latency for `count` pods created at `clients`.
async fn schedule(cluster: &Cluster, count: usize, clients: usize) -> Result<(f64, String)> {
    let server = cluster.server(cluster.main)?;
    let bindings: Bindings = Arc::default();
    let watch = tokio::spawn(watch_bindings(
        server.connect().await?,
        SCHED_NAMESPACE,
        bindings.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let conns = cluster.connections(clients.min(16)).await?;
    let bodies: Vec<(String, Bytes)> = (0..count)
        .map(|i| {
            let name = format!("s-{i}");
            let body = pod(SCHED_NAMESPACE, &name);
            (name, body)
        })
        .collect();
    let names: Vec<String> = bodies.iter().map(|(n, _)| n.clone()).collect();
    let began = Instant::now();
    let created = create_all(
        &conns,
        &format!("/api/v1/namespaces/{SCHED_NAMESPACE}/pods"),
        bodies,
        clients,
    )
    .await?;
    wait_bound(&bindings, &names, Duration::from_secs(900)).await?;
    watch.abort();
    let bound = bindings
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let latencies = Latencies::new()?;
    let mut last = began;
    for name in &names {
        if let (Some(at), Some(start)) = (bound.get(name), created.get(name)) {
            latencies.record(at.saturating_duration_since(*start));
            last = last.max(*at);
        }
    }
    let rate = count as f64 / last.duration_since(began).as_secs_f64().max(1e-9);
    Ok((rate, latencies.summary()))
}

/// The holder of each elected component's Lease.
async fn lease_holders(conn: &Conn) -> Result<Vec<String>> {
    let mut holders = Vec::new();
    for lease in LEADER_LEASES {
        let l = get_json(
            conn,
            &format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}"),
        )
        .await?;
        holders.push(
            l["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    Ok(holders)
}

fn replica_set(name: &str) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": SCHED_NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"rs": name}},
                "template": {
                    "metadata": {"labels": {"rs": name}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
                },
            },
        })
        .to_string(),
    )
}

/// Recovery after the first server is killed: rows of (what, time since the kill).
async fn recover(cluster: &mut Cluster) -> Result<Vec<(String, String)>> {
    let mut rows = Vec::new();
    let first = cluster.servers[0]
        .take()
        .context("the first server is not running")?;
    let (port, tls) = (first.port(), first.tls());
    let survivor = match cluster.servers.iter().skip(1).flatten().next() {
        Some(server) => Some(server.connect().await?),
        None => None,
    };
    let before = match &survivor {
        Some(_) => lease_holders(&first.connect().await?).await?,
        None => Vec::new(),
    };
    let killed = Instant::now();
    first.kill().await?;
    let since = |at: Instant| format!("{:.2} s", at.duration_since(killed).as_secs_f64());
    let conn = match survivor {
        None => {
            let flags: Vec<&str> = cluster.flags[0].iter().map(String::as_str).collect();
            let data = cluster.dir.path().join("server-0");
            let log = cluster.dir.path().join("server-0.log");
            let (server, _) = ServerProcess::try_start(
                &cluster.binary,
                &data,
                None,
                &flags,
                &[],
                &log,
                port,
                Some(tls),
            )
            .await?;
            rows.push((
                "the server started again and ready (`/readyz`)".to_owned(),
                since(Instant::now()),
            ));
            let conn = server.connect().await?;
            cluster.servers[0] = Some(server);
            conn
        }
        Some(conn) => conn,
    };
    // A write answered.
    loop {
        let body = Bytes::from(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "after-kill", "namespace": PROBE_NAMESPACE}})
            .to_string(),
        );
        if conn
            .call(
                Method::POST,
                &format!("/api/v1/namespaces/{PROBE_NAMESPACE}/configmaps"),
                Some(body),
                StatusCode::CREATED,
            )
            .await
            .is_ok()
        {
            rows.push(("a write answered".to_owned(), since(Instant::now())));
            break;
        }
        if killed.elapsed() > Duration::from_secs(120) {
            bail!("no write succeeded within 120 s of the kill");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    conn.call(
        Method::POST,
        &format!("/apis/apps/v1/namespaces/{SCHED_NAMESPACE}/replicasets"),
        Some(replica_set("after-kill")),
        StatusCode::CREATED,
    )
    .await?;
    let mut leases_moved = before.is_empty();
    let mut pod_ready = false;
    while !(leases_moved && pod_ready) {
        if !leases_moved {
            let now = lease_holders(&conn).await?;
            if now
                .iter()
                .zip(&before)
                .all(|(n, b)| !n.is_empty() && n != b)
            {
                leases_moved = true;
                rows.push((
                    format!("both Leases held by another server ({})", now.join(", ")),
                    since(Instant::now()),
                ));
            }
        }
        if !pod_ready {
            let rs = get_json(
                &conn,
                &format!("/apis/apps/v1/namespaces/{SCHED_NAMESPACE}/replicasets/after-kill"),
            )
            .await?;
            if rs["status"]["readyReplicas"].as_u64() == Some(1) {
                pod_ready = true;
                rows.push((
                    "a new ReplicaSet's pod Running and ready".to_owned(),
                    since(Instant::now()),
                ));
            }
        }
        if killed.elapsed() > Duration::from_secs(300) {
            bail!("not recovered within 300 s of the kill: {rows:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(rows)
}

/// Runs one datastore's cluster through every phase; the report's lines.
async fn run_backend(binary: &Path, backend: ApiBackend, args: &Settings) -> Result<Vec<String>> {
    let name = backend.name();
    let mut cluster = Cluster::start(binary, backend, args.servers, args.nodes).await?;
    let mut out = Vec::new();
    let row = |out: &mut Vec<String>, what: &str, value: String| {
        out.push(format!("| {what} | {value} |"))
    };
    let main = cluster.server(cluster.main)?.connect().await?;
    eprintln!("[{name}] waiting for {} simulated nodes", args.nodes);
    let took = wait_nodes_ready(&main, args.nodes).await?;
    row(
        &mut out,
        &format!("{} simulated nodes Ready", args.nodes),
        format!("{:.0} s", took.as_secs_f64()),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (nodes_only, _) = cluster.memory();
    for ns in (0..args.namespaces)
        .map(|i| format!("scale-{i}"))
        .chain([SCHED_NAMESPACE.to_owned(), PROBE_NAMESPACE.to_owned()])
    {
        create_namespace(&main, &ns).await?;
    }
    eprintln!("[{name}] creating {} pods", args.pods);
    let conns = cluster.connections(args.clients.min(16)).await?;
    let began = Instant::now();
    let (creates, retried) = fill(&conns, args.pods, args.namespaces, args.clients).await?;
    let created = began.elapsed();
    row(
        &mut out,
        &format!("{} pod creates at {} clients", args.pods, args.clients),
        format!(
            "{:.0}/s; {}; {retried} retried",
            args.pods as f64 / created.as_secs_f64(),
            creates.summary()
        ),
    );
    eprintln!("[{name}] waiting for every pod to run");
    wait_all_running(&main, Duration::from_secs(1800)).await?;
    row(
        &mut out,
        "first create to every pod Running",
        format!(
            "{:.0} s ({:.0} pods/s)",
            began.elapsed().as_secs_f64(),
            args.pods as f64 / began.elapsed().as_secs_f64()
        ),
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (with_pods, etcd) = cluster.memory();
    for (i, (before, after)) in nodes_only.iter().zip(&with_pods).enumerate() {
        let per = |kib: u64| kib as f64 / 1024.0 / (args.pods as f64 / 10_000.0);
        row(
            &mut out,
            &format!("server {} RSS: nodes only, with the pods", i + 1),
            format!(
                "{} → {}; {:.0} MiB per 10,000 pods (whole RSS), {:.0} MiB added per 10,000",
                kib(before.rss),
                kib(after.rss),
                per(after.rss),
                per(after.rss.saturating_sub(before.rss))
            ),
        );
    }
    if let Some(etcd) = etcd {
        row(&mut out, "etcd RSS with the pods", kib(etcd.rss));
    }
    eprintln!("[{name}] steady state for {} s", args.measure.as_secs());
    let probes = cluster.connections(8).await?;
    let pid = cluster.server(cluster.main)?.pid.clone();
    let s = steady(&probes, 4, args.namespaces, args.measure, &pid).await?;
    row(
        &mut out,
        "mutating calls (ConfigMap create/update/delete, 4 clients; SLO p99 ≤ 1 s)",
        s.mutating.summary(),
    );
    row(
        &mut out,
        &format!(
            "LIST a namespace's {} pods (SLO p99 ≤ 5 s)",
            args.pods / args.namespaces
        ),
        s.list_namespace.summary(),
    );
    row(
        &mut out,
        &format!("LIST all {} nodes (SLO p99 ≤ 30 s)", args.nodes),
        s.list_nodes.summary(),
    );
    let walks: Vec<String> = s
        .walks
        .iter()
        .map(|w| format!("{:.1} s", w.as_secs_f64()))
        .collect();
    row(
        &mut out,
        "LIST all pods in pages of 500 (SLO p99 ≤ 30 s per call)",
        format!(
            "{}; whole walks: {}",
            s.list_pages.summary(),
            walks.join(", ")
        ),
    );
    row(
        &mut out,
        "server CPU in the steady state (the probed server)",
        s.cpu,
    );
    eprintln!("[{name}] scheduling {} more pods", args.sched_pods);
    let (rate, latency) = schedule(&cluster, args.sched_pods, args.clients).await?;
    row(
        &mut out,
        &format!(
            "scheduler: {} pods with {} running",
            args.sched_pods, args.pods
        ),
        format!("{rate:.0} pods bound/s; create to binding {latency}"),
    );
    let (peak, _) = cluster.memory();
    let peaks: Vec<String> = peak.iter().map(|m| kib(m.hwm)).collect();
    row(&mut out, "server peak RSS", peaks.join(", "));
    eprintln!("[{name}] killing the first server");
    for (what, when) in recover(&mut cluster).await? {
        row(
            &mut out,
            &format!("after SIGKILL of server 1: {what}"),
            when,
        );
    }
    cluster.stop().await?;
    Ok(out)
}

/// The run's sizes.
struct Settings {
    servers: usize,
    nodes: usize,
    pods: usize,
    namespaces: usize,
    clients: usize,
    measure: Duration,
    sched_pods: usize,
}

/// Runs the benchmark and prints the report.
pub async fn run(args: ScaleArgs) -> Result<()> {
    let binary = crate::server_binary(args.server.clone())?;
    let settings = if args.quick {
        Settings {
            servers: args.servers,
            nodes: 30,
            pods: 600,
            namespaces: 4,
            clients: 16,
            measure: Duration::from_secs(3),
            sched_pods: 100,
        }
    } else {
        Settings {
            servers: args.servers,
            nodes: args.nodes,
            pods: args.pods,
            namespaces: args.namespaces.max(1),
            clients: args.clients.max(1),
            measure: Duration::from_secs(args.measure_seconds),
            sched_pods: args.sched_pods,
        }
    };
    let command: Vec<String> = std::env::args().collect();
    println!(
        "## Scale (`{}`, commit {})\n",
        command.join(" "),
        crate::api::git_commit()
    );
    for backend in &args.backends {
        let servers = match backend {
            ApiBackend::Sqlite => 1,
            ApiBackend::Etcd => settings.servers,
        };
        println!("### {} server(s) on {}\n", servers, backend.name());
        println!("| measure | result |\n|---|---|");
        match run_backend(&binary, *backend, &settings).await {
            Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
            Err(error) => println!("| failed | {error:#} |"),
        }
        println!();
    }
    Ok(())
}
