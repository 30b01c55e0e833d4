//! `capstan-bench`: benchmark drivers for Capstan, whose results go into `BENCHMARKS.md`.
//!
//! `capstan-bench store` measures the storage layer ([`capstan_store::Store`]) on each backend:
//! - `sqlite`: the embedded SQLite backend, on a file in a temporary directory on a real disk
//!   (under `/var/tmp` unless `--dir` says otherwise);
//! - `etcd`: the etcd backend against a fresh etcd 3.4 started on loopback by
//!   [`capstan_testkit::EtcdServer`];
//! - `etcd-raw`: a fresh etcd of its own driven directly by `etcd-client` (plain `put` for
//!   creates, a `txn` comparing the mod revision for updates, ranged `get` for lists, etcd
//!   watches), with no Capstan code in the path: the baseline for the `etcd` backend.
//!
//! The scenarios:
//! 1. writes: for each concurrency, N writers create distinct keys for a fixed time, then update
//!    their own keys with compare-and-swap on the mod revision the previous write returned;
//! 2. lists: full (unpaginated) and paginated lists of prefixes holding many keys;
//! 3. watch: many watchers on one prefix, one writer; latency from just before the write to each
//!    watcher receiving the event, and a check that every watcher saw every event;
//! 4. db size: sustained updates over a fixed key set with periodic compaction, then the size of
//!    the data on disk against the size of the live data (on a fresh store of its own).
//!
//! The report is a header describing the machine and the exact command line, then one markdown
//! table per scenario with rows per backend, ready to paste into `BENCHMARKS.md`. A failure in
//! one backend's scenario is printed in its row and the run goes on. Progress goes to stderr.
//! `--quick` scales everything down for a smoke run.
//!
//! `capstan-bench api` measures the API server end to end: the real `capstan server` binary on
//! SQLite and on etcd, driven over HTTPS/HTTP2 (creates, gets, paginated lists, watch fan-out,
//! memory and start-up; see the `api` module).
//!
//! `capstan-bench scheduler` runs upstream's scheduler_perf `SchedulingBasic` against the real
//! server (see the `scheduler` module).
//!
//! `capstan-bench controllers` times Deployments converging on simulated nodes (see the
//! `controllers` module).
//!
//! `capstan-bench pods` runs a real node (the agent and its containerd): pod start-up latency
//! beside plain `ctr run`s, and the agent's CPU and memory (see the `pods` module).
//!
//! `capstan-bench proxy` times the service proxy's syncs into a real nftables table (see the
//! `proxy` module).
//!
//! `capstan-bench dns` measures the cluster DNS server: queries per second and latency for
//! cluster names over UDP, and the memory DNS adds to an idle server; `--from-pod` sends the
//! load from inside a pod on a real node, where this program runs as the hidden `dns-client`
//! (see the `dns` module).
//!
//! `capstan-bench nodewatch` measures one server's kubelet traffic at scale: pod lists by
//! `spec.nodeName` and pod creates under one watch per node, with the watch cache's index and
//! without (see the `nodewatch` module).
//!
//! `capstan-bench crash-writer` is the child process of the SQLite crash test
//! (`tests/sqlite_crash.rs`; see the `crash` module).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use bytes::Bytes;
use capstan_store::etcd::EtcdConfig;
use capstan_store::sqlite::SqliteConfig;
use capstan_store::{ListOptions, Store};
use capstan_testkit::EtcdServer;
use clap::{Args, Parser, Subcommand, ValueEnum};
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, WatchClient, WatchOptions,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;

mod api;
mod claims;
mod controllers;
mod crash;
mod dns;
mod extend;
mod goload;
mod nodewatch;
mod observe;
mod pods;
mod proxy;
mod scale;
mod scheduler;
mod security;
mod storage;

/// The `capstan` binary: `--server`, else the one beside this program.
pub(crate) fn server_binary(server: Option<PathBuf>) -> Result<PathBuf> {
    match server {
        Some(path) => Ok(path),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("capstan"))
            .context("no capstan binary beside capstan-bench"),
    }
}

/// Command-line interface.
#[derive(Parser, Debug)]
#[command(
    name = "capstan-bench",
    version,
    about = "Benchmark drivers for Capstan"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Benchmark the storage backends (writes, lists, watch latency, size on disk).
    Store(Box<StoreArgs>),
    /// Benchmark the API server through HTTPS (creates, gets, lists, watch fan-out, memory,
    /// start-up), on SQLite and on etcd.
    Api(Box<api::ApiArgs>),
    /// Write to a SQLite store until killed, printing each acknowledged write (the process the
    /// SQLite crash test kills).
    CrashWriter(crash::CrashWriterArgs),
    /// Benchmark the scheduler (upstream's scheduler_perf SchedulingBasic through the API).
    Scheduler(scheduler::SchedulerArgs),
    /// Benchmark the controllers (Deployments created and rolled out on simulated nodes).
    Controllers(controllers::ControllersArgs),
    /// Benchmark the cluster DNS server: queries per second and latency for cluster names,
    /// and the memory it adds to an idle server.
    Dns(dns::DnsArgs),
    /// The load of `dns --from-pod`, run inside its pod: queries to one server, results as
    /// one JSON line on stdout.
    #[command(hide = true)]
    DnsClient(dns::DnsClientArgs),
    /// Benchmark extending the API: CRD create to served, custom objects against ConfigMaps,
    /// and what a validating webhook adds to a request.
    Extend(extend::ExtendArgs),
    /// Benchmark a real node: pod start-up latency (beside `ctr run`) and the agent's CPU and
    /// memory. Needs root, containerd, runc and the CNI plugins.
    Pods(pods::PodsArgs),
    /// Benchmark seeing the cluster on a real node: what metrics collection costs with idle
    /// pods (the built-in Metrics API against `--disable-metrics-server`) and how soon a
    /// HorizontalPodAutoscaler scales out under load. Needs root, as `pods`.
    Metrics(observe::MetricsArgs),
    /// Benchmark the service proxy: syncs of many Services into nftables, one endpoint change
    /// at a time, incremental against full replacement. Needs root and nft.
    Proxy(proxy::ProxyArgs),
    /// Benchmark the PersistentVolume binder: many claims bound to as many volumes, and
    /// released.
    Storage(storage::StorageArgs),
    /// Benchmark what security costs: GETs authenticated by service-account token against
    /// client certificates, and Secret creates with and without encryption at rest.
    Security(Box<security::SecurityArgs>),
    /// Benchmark one server's kubelet traffic at scale: pod lists by node and pod creates
    /// under one watch per node, with the watch cache's node index and without.
    Nodewatch(nodewatch::NodewatchArgs),
    /// Benchmark a cluster at scale (issue 27): thousands of simulated nodes and 100,000s of
    /// pods on one server (SQLite) and on several servers (etcd): API latency against
    /// upstream's SLOs, memory per 10,000 pods, scheduling with the pods running, recovery
    /// after a server is killed.
    Scale(scale::ScaleArgs),
}

#[derive(Args, Debug)]
struct StoreArgs {
    /// Backends to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd,etcd-raw")]
    backends: Vec<BackendKind>,
    /// Scenarios to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "writes,list,watch,db-size"
    )]
    scenarios: Vec<ScenarioKind>,
    /// Scale everything down for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Directory for the SQLite files (a temporary directory is made inside it).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// How long each write phase runs ("10", "10s", "500ms"); default 10 s, 500 ms with --quick.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Writer counts for the write scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    concurrency: Vec<usize>,
    /// Key counts for the list scenario; default 10000,100000 (1000,10000 with --quick).
    #[arg(long, value_delimiter = ',')]
    list_sizes: Vec<usize>,
    /// Timed iterations per list size; default 10 (5 above 10k keys, 3 with --quick).
    #[arg(long)]
    list_iterations: Option<usize>,
    /// Watchers in the watch scenario.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Updates the watch scenario's writer makes; default 200 (20 with --quick).
    #[arg(long)]
    watch_events: Option<usize>,
    /// Updates in the db-size scenario; default 1000000 (20000 with --quick).
    #[arg(long)]
    updates: Option<u64>,
    /// Keys the db-size scenario updates.
    #[arg(long, default_value_t = 10_000)]
    db_keys: usize,
    /// Compact every this many revisions in the db-size scenario; default 100000 (5000 with
    /// --quick).
    #[arg(long)]
    compact_every: Option<i64>,
    /// Revisions of history each compaction keeps; default 10000 (1000 with --quick).
    #[arg(long)]
    compact_retain: Option<i64>,
    /// Size of every value written, in bytes.
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    Sqlite,
    Etcd,
    EtcdRaw,
}

impl BackendKind {
    fn name(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Etcd => "etcd",
            BackendKind::EtcdRaw => "etcd-raw",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ScenarioKind {
    Writes,
    List,
    Watch,
    DbSize,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {text:?} (try 10, 10s or 500ms)"))?;
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("duration must be positive: {text:?}"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// Everything a run does, with `--quick` and the defaults resolved.
#[derive(Debug)]
struct Settings {
    backends: Vec<BackendKind>,
    scenarios: Vec<ScenarioKind>,
    quick: bool,
    duration: Duration,
    concurrency: Vec<usize>,
    populate_concurrency: usize,
    list_sizes: Vec<usize>,
    list_iterations: Option<usize>,
    page_size: usize,
    watchers: usize,
    watch_events: usize,
    watch_spacing: Duration,
    updates: u64,
    db_keys: usize,
    db_writers: usize,
    compact_every: i64,
    compact_retain: i64,
    value_size: usize,
}

impl Settings {
    fn from_args(args: &StoreArgs) -> Result<Settings> {
        let quick = args.quick;
        fn pick<T>(quick: bool, full: T, small: T) -> T {
            if quick { small } else { full }
        }
        let settings = Settings {
            backends: dedup(&args.backends),
            scenarios: dedup(&args.scenarios),
            quick,
            duration: args.duration.unwrap_or(pick(
                quick,
                Duration::from_secs(10),
                Duration::from_millis(500),
            )),
            concurrency: args.concurrency.clone(),
            populate_concurrency: 64,
            list_sizes: if args.list_sizes.is_empty() {
                pick(quick, vec![10_000, 100_000], vec![1_000, 10_000])
            } else {
                args.list_sizes.clone()
            },
            list_iterations: args.list_iterations,
            page_size: 500,
            watchers: args.watchers,
            watch_events: args.watch_events.unwrap_or(pick(quick, 200, 20)),
            watch_spacing: Duration::from_millis(5),
            updates: args.updates.unwrap_or(pick(quick, 1_000_000, 20_000)),
            db_keys: args.db_keys,
            db_writers: 64,
            compact_every: args.compact_every.unwrap_or(pick(quick, 100_000, 5_000)),
            compact_retain: args.compact_retain.unwrap_or(pick(quick, 10_000, 1_000)),
            value_size: args.value_size,
        };
        ensure!(
            settings.value_size >= SEQ_LEN,
            "--value-size must be at least {SEQ_LEN} bytes"
        );
        ensure!(
            settings.concurrency.iter().all(|&c| c > 0),
            "--concurrency values must be positive"
        );
        ensure!(
            settings.list_sizes.iter().all(|&n| n > 0),
            "--list-sizes values must be positive"
        );
        ensure!(
            settings.watchers > 0 && settings.watch_events > 0,
            "--watchers and --watch-events must be positive"
        );
        ensure!(
            settings.db_keys > 0 && settings.compact_every > 0 && settings.compact_retain >= 0,
            "--db-keys and --compact-every must be positive, --compact-retain not negative"
        );
        Ok(settings)
    }

    fn runs(&self, scenario: ScenarioKind) -> bool {
        self.scenarios.contains(&scenario)
    }

    fn list_iterations_for(&self, keys: usize) -> usize {
        match self.list_iterations {
            Some(n) => n.max(1),
            None if self.quick => 3,
            None if keys > 10_000 => 5,
            None => 10,
        }
    }

    /// How long a scenario may take before it is abandoned (a hung backend must not stop the
    /// whole run).
    fn timeout(&self, scenario: ScenarioKind) -> Duration {
        let secs = match scenario {
            ScenarioKind::Writes => {
                self.duration.as_secs_f64() * 2.0 * self.concurrency.len() as f64 + 300.0
            }
            ScenarioKind::List => 600.0 + self.list_sizes.iter().sum::<usize>() as f64 / 100.0,
            ScenarioKind::Watch => {
                300.0 + self.watch_events as f64 * self.watch_spacing.as_secs_f64() * 2.0
            }
            ScenarioKind::DbSize => 600.0 + self.updates as f64 / 200.0,
        };
        Duration::from_secs_f64(secs)
    }
}

fn dedup<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Store(args) => run_store(*args).await,
        Command::Api(args) => api::run(*args).await,
        Command::CrashWriter(args) => crash::run(args).await,
        Command::Scheduler(args) => scheduler::run(args).await,
        Command::Controllers(args) => controllers::run(args).await,
        Command::Pods(args) => pods::run(args).await,
        Command::Metrics(args) => observe::run(args).await,
        Command::Proxy(args) => proxy::run(args).await,
        Command::Dns(args) => dns::run(args).await,
        Command::DnsClient(args) => dns::run_client(args).await,
        Command::Extend(args) => extend::run(args).await,
        Command::Storage(args) => storage::run(args).await,
        Command::Security(args) => security::run(*args).await,
        Command::Nodewatch(args) => nodewatch::run(args).await,
        Command::Scale(args) => scale::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("capstan-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_store(args: StoreArgs) -> Result<()> {
    let settings = Settings::from_args(&args)?;
    fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-bench-")
        .tempdir_in(&args.dir)
        .with_context(|| format!("creating a temporary directory in {}", args.dir.display()))?;
    print!("{}", header(&settings, tmp.path()));

    let mut reports = Vec::new();
    for &kind in &settings.backends {
        reports.push(run_backend(kind, &settings, tmp.path()).await);
    }
    print!("{}", tables(&settings, &reports));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Backends under test
// ---------------------------------------------------------------------------------------------

/// One page of a list, backend-neutral.
#[derive(Debug)]
struct Page {
    count: usize,
    revision: i64,
    more: bool,
    continue_key: Option<String>,
}

/// Watch deliveries, backend-neutral: each item carries the sequence numbers (see
/// [`make_value`]) of the events one message delivered.
type SeqStream = BoxStream<'static, Result<Vec<u64>>>;

/// What the scenarios drive: Capstan's [`Store`] (either backend) or etcd through `etcd-client`.
#[derive(Clone)]
enum Target {
    Store(Store),
    Raw(Box<RawEtcd>),
}

/// Plain `etcd-client` calls, no Capstan code involved.
#[derive(Clone)]
struct RawEtcd {
    kv: KvClient,
    watch: WatchClient,
}

/// Large full lists exceed tonic's default 4 MiB limit on decoded messages.
const MAX_MESSAGE: usize = i32::MAX as usize;

impl RawEtcd {
    fn new(client: &Client) -> RawEtcd {
        RawEtcd {
            kv: client.kv_client().max_decoding_message_size(MAX_MESSAGE),
            watch: client.watch_client().max_decoding_message_size(MAX_MESSAGE),
        }
    }
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<i64> {
    header
        .map(|h| h.revision())
        .ok_or_else(|| anyhow!("etcd response without a header"))
}

/// The first key after every key that starts with `prefix` (prefixes here are never empty nor
/// all 0xff).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            break;
        }
    }
    end
}

impl Target {
    /// Creates `key`; returns its mod revision.
    async fn create(&mut self, key: &str, value: Vec<u8>) -> Result<i64> {
        match self {
            Target::Store(store) => Ok(store.create(key, value).await?.mod_revision),
            Target::Raw(raw) => {
                let response = raw.kv.put(key, value, None).await?;
                header_revision(response.header())
            }
        }
    }

    /// Replaces the value of `key` if its mod revision is still `expected`; returns the new mod
    /// revision.
    async fn update(&mut self, key: &str, value: Vec<u8>, expected: i64) -> Result<i64> {
        match self {
            Target::Store(store) => Ok(store
                .update(key, Bytes::from(value), Some(expected))
                .await?
                .mod_revision),
            Target::Raw(raw) => {
                let txn = Txn::new()
                    .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
                    .and_then([TxnOp::put(key, value, None)]);
                let response = raw.kv.txn(txn).await?;
                if !response.succeeded() {
                    bail!("conflict: {key:?} no longer has mod revision {expected}");
                }
                header_revision(response.header())
            }
        }
    }

    async fn list(
        &mut self,
        prefix: &str,
        start: Option<String>,
        revision: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page> {
        match self {
            Target::Store(store) => {
                let response = store
                    .list(&ListOptions {
                        prefix: prefix.to_owned(),
                        start,
                        revision,
                        limit,
                    })
                    .await?;
                Ok(Page {
                    count: response.kvs.len(),
                    revision: response.revision,
                    more: response.more,
                    continue_key: response.continue_key(),
                })
            }
            Target::Raw(raw) => {
                let mut options = GetOptions::new().with_range(prefix_end(prefix));
                if let Some(revision) = revision {
                    options = options.with_revision(revision);
                }
                if let Some(limit) = limit {
                    options = options.with_limit(i64::try_from(limit)?);
                }
                let key = start.unwrap_or_else(|| prefix.to_owned());
                let response = raw.kv.get(key, Some(options)).await?;
                let continue_key = match (response.more(), response.kvs().last()) {
                    (true, Some(last)) => {
                        Some(format!("{}\0", String::from_utf8_lossy(last.key())))
                    }
                    _ => None,
                };
                Ok(Page {
                    count: response.kvs().len(),
                    revision: header_revision(response.header())?,
                    more: response.more(),
                    continue_key,
                })
            }
        }
    }

    async fn current_revision(&mut self) -> Result<i64> {
        match self {
            Target::Store(store) => Ok(store.current_revision().await?),
            Target::Raw(raw) => {
                let options = GetOptions::new().with_count_only();
                let response = raw.kv.get("/", Some(options)).await?;
                header_revision(response.header())
            }
        }
    }

    async fn compact(&mut self, revision: i64) -> Result<()> {
        match self {
            Target::Store(store) => Ok(store.compact(revision).await?),
            Target::Raw(raw) => {
                raw.kv.compact(revision, None).await?;
                Ok(())
            }
        }
    }

    /// Watches `prefix` for changes after revision `after`; returns once the watch is
    /// established.
    async fn watch(&mut self, prefix: &str, after: i64) -> Result<SeqStream> {
        match self {
            Target::Store(store) => {
                let stream = store.watch(prefix, after).await?;
                Ok(stream
                    .map(|item| match item {
                        Ok(event) => Ok(parse_seq(&event.kv.value).into_iter().collect()),
                        Err(error) => Err(anyhow::Error::from(error)),
                    })
                    .boxed())
            }
            Target::Raw(raw) => {
                // Like Kubernetes: prefix watch with previous values, from the next revision.
                let options = WatchOptions::new()
                    .with_prefix()
                    .with_prev_key()
                    .with_start_revision(after + 1);
                let mut stream = raw.watch.watch(prefix, Some(options)).await?;
                match stream.message().await? {
                    Some(response) if response.created() && !response.canceled() => {}
                    Some(response) => bail!(
                        "watch not created (canceled: {}, reason: {:?})",
                        response.canceled(),
                        response.cancel_reason()
                    ),
                    None => bail!("watch stream closed before the watch was created"),
                }
                Ok(stream
                    .map(|item| match item {
                        Ok(response) if response.canceled() => Err(anyhow!(
                            "watch canceled: {:?} (compact revision {})",
                            response.cancel_reason(),
                            response.compact_revision()
                        )),
                        Ok(response) => Ok(response
                            .events()
                            .iter()
                            .filter_map(|event| event.kv().and_then(|kv| parse_seq(kv.value())))
                            .collect()),
                        Err(error) => Err(anyhow::Error::from(error)),
                    })
                    .boxed())
            }
        }
    }
}

/// A store under test, with what is needed to measure it and tear it down.
struct Instance {
    // Fields drop in order: clients before the etcd server they talk to.
    target: Target,
    /// A plain client on the etcd server, for status and defragmentation.
    admin: Option<Client>,
    sqlite_path: Option<PathBuf>,
    /// etcd's `--data-dir`.
    etcd_data: Option<PathBuf>,
    etcd_pid: Option<u32>,
    _etcd: Option<EtcdServer>,
}

impl Instance {
    async fn open(kind: BackendKind, dir: &Path, label: &str) -> Result<Instance> {
        match kind {
            BackendKind::Sqlite => {
                let path = dir.join(format!("sqlite-{label}.db"));
                let store = Store::sqlite(SqliteConfig::new(path.clone()))
                    .await
                    .with_context(|| format!("opening SQLite at {}", path.display()))?;
                Ok(Instance {
                    target: Target::Store(store),
                    admin: None,
                    sqlite_path: Some(path),
                    etcd_data: None,
                    etcd_pid: None,
                    _etcd: None,
                })
            }
            BackendKind::Etcd | BackendKind::EtcdRaw => {
                // etcd's data goes on the same file system as SQLite's, so fsyncs cost the same.
                let parent = dir.to_path_buf();
                let server = tokio::task::spawn_blocking(move || EtcdServer::start_in(&parent))
                    .await
                    .context("starting etcd")?
                    .context("starting etcd")?;
                let endpoint = server.endpoint();
                let etcd_pid = server.pid();
                let admin = Client::connect([endpoint.clone()], None)
                    .await
                    .with_context(|| format!("connecting to etcd at {endpoint}"))?;
                let target = if kind == BackendKind::Etcd {
                    let store = Store::etcd(EtcdConfig {
                        endpoints: vec![endpoint.clone()],
                        prefix: "/capstan-bench".to_owned(),
                        ..EtcdConfig::default()
                    })
                    .await
                    .with_context(|| format!("opening the etcd store at {endpoint}"))?;
                    Target::Store(store)
                } else {
                    Target::Raw(Box::new(RawEtcd::new(&admin)))
                };
                Ok(Instance {
                    target,
                    admin: Some(admin),
                    sqlite_path: None,
                    etcd_data: Some(server.data_dir().join("etcd")),
                    etcd_pid,
                    _etcd: Some(server),
                })
            }
        }
    }

    /// CPU ticks and peak RSS (KiB) of the etcd process, while it still runs.
    fn etcd_usage(&self) -> Option<(u64, u64)> {
        let pid = self.etcd_pid?.to_string();
        Some((cpu_ticks(&pid)?, status_kib(&pid, "VmHWM").unwrap_or(0)))
    }

    /// Shuts down and deletes the instance's files.
    fn close(self) {
        let path = self.sqlite_path.clone();
        drop(self);
        if let Some(path) = path {
            for suffix in ["", "-wal", "-shm"] {
                let _ = fs::remove_file(sidecar(&path, suffix));
            }
        }
    }
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

// ---------------------------------------------------------------------------------------------
// Per-backend runs
// ---------------------------------------------------------------------------------------------

/// Table cells after the backend column.
type Row = Vec<String>;

#[derive(Debug)]
struct BackendReport {
    name: &'static str,
    writes: Vec<Row>,
    list: Vec<Row>,
    watch: Vec<Row>,
    db_size: Vec<Row>,
    resources: Row,
    /// Facts to print under the tables (where etcd kept its data, ...).
    notes: Vec<String>,
}

impl BackendReport {
    fn note_instance(&mut self, instance: &Instance) {
        let note = if let Some(data) = &instance.etcd_data {
            let fs = filesystem_of(data);
            let pid = match instance.etcd_pid {
                Some(_) => "",
                None => "; etcd's pid not found, so no etcd CPU or RSS",
            };
            format!("`{}`: etcd data dir on {fs}{pid}", self.name)
        } else if let Some(path) = &instance.sqlite_path {
            let dir = path.parent().unwrap_or(path);
            format!("`{}`: database file on {}", self.name, filesystem_of(dir))
        } else {
            return;
        };
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

#[derive(Debug, Default)]
struct EtcdUsage {
    found: bool,
    ticks: u64,
    peak_kib: u64,
}

impl EtcdUsage {
    fn add(&mut self, instance: &Instance) {
        if let Some((ticks, peak)) = instance.etcd_usage() {
            self.found = true;
            self.ticks += ticks;
            self.peak_kib = self.peak_kib.max(peak);
        }
    }
}

async fn run_backend(kind: BackendKind, s: &Settings, dir: &Path) -> BackendReport {
    let name = kind.name();
    let rss_reset = fs::write("/proc/self/clear_refs", "5").is_ok();
    let cpu_before = cpu_ticks("self");
    let wall = Instant::now();
    let mut etcd = EtcdUsage::default();
    let mut report = BackendReport {
        name,
        writes: Vec::new(),
        list: Vec::new(),
        watch: Vec::new(),
        db_size: Vec::new(),
        resources: Vec::new(),
        notes: Vec::new(),
    };

    let main_scenarios = [
        ScenarioKind::Writes,
        ScenarioKind::List,
        ScenarioKind::Watch,
    ];
    if main_scenarios.iter().any(|&k| s.runs(k)) {
        eprintln!("[{name}] opening the store");
        match Instance::open(kind, dir, "main").await {
            Ok(mut instance) => {
                report.note_instance(&instance);
                if s.runs(ScenarioKind::Writes) {
                    report.writes = guarded(
                        name,
                        "writes",
                        s.timeout(ScenarioKind::Writes),
                        scenario_writes(&instance.target, s, name),
                    )
                    .await;
                }
                if s.runs(ScenarioKind::List) {
                    report.list = guarded(
                        name,
                        "list",
                        s.timeout(ScenarioKind::List),
                        scenario_list(&instance.target, s, name),
                    )
                    .await;
                }
                if s.runs(ScenarioKind::Watch) {
                    report.watch = guarded(
                        name,
                        "watch",
                        s.timeout(ScenarioKind::Watch),
                        scenario_watch(&mut instance.target, s, name),
                    )
                    .await;
                }
                etcd.add(&instance);
                instance.close();
            }
            Err(error) => {
                eprintln!("[{name}] cannot open the store: {error:#}");
                let row = vec![error_cell(&error)];
                report.writes = vec![row.clone()];
                report.list = vec![row.clone()];
                report.watch = vec![row];
            }
        }
    }

    if s.runs(ScenarioKind::DbSize) {
        eprintln!("[{name}] opening a fresh store for the db-size scenario");
        match Instance::open(kind, dir, "dbsize").await {
            Ok(mut instance) => {
                report.note_instance(&instance);
                report.db_size = guarded(
                    name,
                    "db-size",
                    s.timeout(ScenarioKind::DbSize),
                    scenario_db_size(&mut instance, s, name),
                )
                .await;
                etcd.add(&instance);
                instance.close();
            }
            Err(error) => {
                eprintln!("[{name}] cannot open the store: {error:#}");
                report.db_size = vec![vec![error_cell(&error)]];
            }
        }
    }

    let cpu = match (cpu_before, cpu_ticks("self")) {
        (Some(a), Some(b)) => format!("{:.1}", ticks_to_secs(b.saturating_sub(a))),
        _ => "n/a".to_owned(),
    };
    let rss = match status_kib("self", "VmHWM") {
        Some(kib) if rss_reset => mib(kib * 1024),
        Some(kib) => format!("{} (since start)", mib(kib * 1024)),
        None => "n/a".to_owned(),
    };
    let (etcd_cpu, etcd_rss) = match (kind, etcd.found) {
        (BackendKind::Sqlite, _) => ("-".to_owned(), "-".to_owned()),
        (_, true) => (
            format!("{:.1}", ticks_to_secs(etcd.ticks)),
            mib(etcd.peak_kib * 1024),
        ),
        (_, false) => ("n/a".to_owned(), "n/a".to_owned()),
    };
    report.resources = vec![
        format!("{:.1}", wall.elapsed().as_secs_f64()),
        cpu,
        rss,
        etcd_cpu,
        etcd_rss,
    ];
    eprintln!("[{name}] done in {:.1} s", wall.elapsed().as_secs_f64());
    report
}

/// Runs one scenario with a time limit, turning any failure into an error row.
async fn guarded(
    backend: &str,
    scenario: &str,
    limit: Duration,
    run: impl Future<Output = Result<Vec<Row>>>,
) -> Vec<Row> {
    eprintln!("[{backend}] {scenario}");
    let result = match tokio::time::timeout(limit, run).await {
        Ok(result) => result,
        Err(_) => Err(anyhow!("timed out after {:.0} s", limit.as_secs_f64())),
    };
    match result {
        Ok(rows) => rows,
        Err(error) => {
            eprintln!("[{backend}] {scenario} failed: {error:#}");
            vec![vec![error_cell(&error)]]
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement helpers
// ---------------------------------------------------------------------------------------------

/// A latency histogram in nanoseconds, up to an hour.
fn histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).context("creating a histogram")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Milliseconds, with precision that suits the magnitude.
fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 100.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.0}")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn rate(ops: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return "n/a".to_owned();
    }
    format!("{:.0}", ops as f64 / secs)
}

/// Sequence numbers lead each value: `SEQ_LEN` bytes, 16 decimal digits and a `|`.
const SEQ_LEN: usize = 17;

/// A value of `size` bytes starting with `seq`, the rest a fixed JSON-ish filler.
fn make_value(size: usize, seq: u64) -> Vec<u8> {
    const FILLER: &[u8] = b"{\"metadata\":{\"name\":\"bench\",\"labels\":{\"app\":\"capstan\"}},\"spec\":0123456789abcdefghijklmnopqrstuvwxyz}";
    let mut value = Vec::with_capacity(size.max(SEQ_LEN));
    value.extend_from_slice(format!("{seq:016}|").as_bytes());
    while value.len() < size {
        let take = (size - value.len()).min(FILLER.len());
        value.extend_from_slice(&FILLER[..take]);
    }
    value
}

fn parse_seq(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value.get(..16)?).ok()?.parse().ok()
}

/// What one writer task did.
struct WorkerOut {
    hist: Histogram<u64>,
    ok: u64,
    errors: u64,
    consecutive_errors: u64,
    first_error: Option<String>,
    keys: Vec<(String, i64)>,
}

impl WorkerOut {
    fn new() -> Result<WorkerOut> {
        Ok(WorkerOut {
            hist: histogram()?,
            ok: 0,
            errors: 0,
            consecutive_errors: 0,
            first_error: None,
            keys: Vec::new(),
        })
    }

    fn success(&mut self, latency: Duration) {
        self.hist.saturating_record(nanos(latency));
        self.ok += 1;
        self.consecutive_errors = 0;
    }

    /// Records a failed operation; true when the writer should give up (a run of failures).
    /// One compare-and-swap update, timed; moves `revision` on. False when the worker should
    /// stop (too many errors in a row).
    async fn timed_update(
        &mut self,
        target: &mut Target,
        key: &str,
        revision: &mut i64,
        value: Vec<u8>,
    ) -> bool {
        let began = Instant::now();
        match target.update(key, value, *revision).await {
            Ok(new_revision) => {
                self.success(began.elapsed());
                *revision = new_revision;
                true
            }
            Err(error) => !self.failure(error),
        }
    }

    fn failure(&mut self, error: anyhow::Error) -> bool {
        self.errors += 1;
        self.consecutive_errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{error:#}"));
        }
        self.consecutive_errors >= 100
    }
}

/// The merged outcome of a timed phase.
struct Phase {
    hist: Histogram<u64>,
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
}

impl Phase {
    fn merge(outs: &[WorkerOut], elapsed: Duration) -> Result<Phase> {
        let mut phase = Phase {
            hist: histogram()?,
            ok: 0,
            errors: 0,
            first_error: None,
            elapsed,
        };
        for out in outs {
            phase.hist.add(&out.hist).context("merging histograms")?;
            phase.ok += out.ok;
            phase.errors += out.errors;
            if phase.first_error.is_none() {
                phase.first_error.clone_from(&out.first_error);
            }
        }
        Ok(phase)
    }

    fn cells(&self) -> Vec<String> {
        if self.ok == 0 {
            return vec!["0".to_owned(), "-".to_owned(), "-".to_owned()];
        }
        vec![
            rate(self.ok, self.elapsed),
            ms(self.hist.value_at_quantile(0.5)),
            ms(self.hist.value_at_quantile(0.99)),
        ]
    }

    fn errors_cell(&self) -> String {
        errors_cell(self.errors, self.first_error.as_deref())
    }
}

fn errors_cell(count: u64, first: Option<&str>) -> String {
    match first {
        Some(first) if count > 0 => format!("{count} (first: {})", md_escape(first, 160)),
        _ => count.to_string(),
    }
}

async fn join_all<T: 'static>(mut set: JoinSet<T>) -> Result<Vec<T>> {
    let mut outs = Vec::with_capacity(set.len());
    while let Some(joined) = set.join_next().await {
        outs.push(joined.context("a worker task failed")?);
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// Scenario 1: writes
// ---------------------------------------------------------------------------------------------

async fn scenario_writes(target: &Target, s: &Settings, name: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &concurrency in &s.concurrency {
        eprintln!("[{name}] writes: {concurrency} writers");
        match write_round(target, s, concurrency).await {
            Ok((create, update)) => {
                let mut row = vec![concurrency.to_string()];
                row.extend(create.cells());
                row.extend(update.cells());
                let errors = create.errors + update.errors;
                let first = create
                    .first_error
                    .as_deref()
                    .or(update.first_error.as_deref());
                row.push(errors_cell(errors, first));
                eprintln!(
                    "[{name}]   create {} ops/s, update {} ops/s",
                    create.cells()[0],
                    update.cells()[0]
                );
                rows.push(row);
            }
            Err(error) => {
                eprintln!("[{name}]   failed: {error:#}");
                rows.push(vec![concurrency.to_string(), error_cell(&error)]);
            }
        }
    }
    Ok(rows)
}

/// Creates for `s.duration` with `concurrency` writers, then CAS-updates their keys for as long.
async fn write_round(target: &Target, s: &Settings, concurrency: usize) -> Result<(Phase, Phase)> {
    let prefix = format!("/bench/writes/c{concurrency}/");
    let value_size = s.value_size;

    let start = Instant::now();
    let deadline = start + s.duration;
    let mut set = JoinSet::new();
    for writer in 0..concurrency {
        let mut target = target.clone();
        let prefix = prefix.clone();
        set.spawn(async move {
            let mut out = WorkerOut::new()?;
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = format!("{prefix}{writer:03}/{i:09}");
                let value = make_value(value_size, i);
                i += 1;
                let began = Instant::now();
                match target.create(&key, value).await {
                    Ok(revision) => {
                        out.success(began.elapsed());
                        out.keys.push((key, revision));
                    }
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
    let creators = join_all(set)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let create = Phase::merge(&creators, start.elapsed())?;

    let start = Instant::now();
    let deadline = start + s.duration;
    let mut set = JoinSet::new();
    for creator in creators {
        let mut keys = creator.keys;
        if keys.is_empty() {
            continue;
        }
        let mut target = target.clone();
        set.spawn(async move {
            let mut out = WorkerOut::new()?;
            let mut next = 0;
            // Above every sequence number a create used, so each update changes the value.
            let mut seq = 1u64 << 40;
            while Instant::now() < deadline {
                let len = keys.len();
                let (key, revision) = &mut keys[next];
                next = (next + 1) % len;
                let value = make_value(value_size, seq);
                seq += 1;
                if !out.timed_update(&mut target, key, revision, value).await {
                    break;
                }
            }
            anyhow::Ok(out)
        });
    }
    let updaters = join_all(set)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let update = Phase::merge(&updaters, start.elapsed())?;
    Ok((create, update))
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: lists
// ---------------------------------------------------------------------------------------------

/// Creates keys `{prefix}{i:09}` for `i` in `0..count` with `concurrency` writers; returns the
/// time taken and each key's mod revision.
async fn populate(
    target: &Target,
    prefix: &str,
    count: usize,
    concurrency: usize,
    value_size: usize,
) -> Result<(Duration, Vec<i64>)> {
    let start = Instant::now();
    let concurrency = concurrency.clamp(1, count.max(1));
    let mut set = JoinSet::new();
    for writer in 0..concurrency {
        let mut target = target.clone();
        let prefix = prefix.to_owned();
        set.spawn(async move {
            let mut revisions = Vec::new();
            for i in (writer..count).step_by(concurrency) {
                let key = format!("{prefix}{i:09}");
                let revision = target
                    .create(&key, make_value(value_size, i as u64))
                    .await
                    .with_context(|| format!("populating: creating {key}"))?;
                revisions.push((i, revision));
            }
            anyhow::Ok(revisions)
        });
    }
    let mut revisions = vec![0; count];
    for worker in join_all(set).await? {
        for (i, revision) in worker? {
            revisions[i] = revision;
        }
    }
    Ok((start.elapsed(), revisions))
}

async fn scenario_list(target: &Target, s: &Settings, name: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &keys in &s.list_sizes {
        eprintln!("[{name}] list: {keys} keys");
        match list_round(target, s, keys).await {
            Ok(row) => rows.push(row),
            Err(error) => {
                eprintln!("[{name}]   failed: {error:#}");
                rows.push(vec![keys.to_string(), error_cell(&error)]);
            }
        }
    }
    Ok(rows)
}

async fn list_round(target: &Target, s: &Settings, keys: usize) -> Result<Row> {
    let prefix = format!("/bench/list/{keys}/");
    let (populated, _) =
        populate(target, &prefix, keys, s.populate_concurrency, s.value_size).await?;
    let mut target = target.clone();
    let iterations = s.list_iterations_for(keys);
    let mut full = histogram()?;
    let mut paged = histogram()?;
    let mut pages = 0;
    for _ in 0..iterations {
        let began = Instant::now();
        let page = target.list(&prefix, None, None, None).await?;
        full.saturating_record(nanos(began.elapsed()));
        ensure!(
            page.count == keys && !page.more,
            "full list of {prefix} returned {} keys (more: {}), expected {keys}",
            page.count,
            page.more
        );

        let began = Instant::now();
        let first = target.list(&prefix, None, None, Some(s.page_size)).await?;
        let revision = first.revision;
        let mut total = first.count;
        let mut count = 1;
        let mut next = first.continue_key;
        while let Some(start) = next {
            ensure!(
                count <= keys / s.page_size + 1,
                "paged list of {prefix} does not end after {count} pages"
            );
            let page = target
                .list(&prefix, Some(start), Some(revision), Some(s.page_size))
                .await?;
            ensure!(
                page.revision == revision,
                "page {count} served at revision {}, asked for {revision}",
                page.revision
            );
            total += page.count;
            count += 1;
            next = page.continue_key;
        }
        paged.saturating_record(nanos(began.elapsed()));
        ensure!(
            total == keys,
            "paged list of {prefix} returned {total} keys in {count} pages, expected {keys}"
        );
        pages = count;
    }
    Ok(vec![
        keys.to_string(),
        rate(keys as u64, populated),
        ms(full.value_at_quantile(0.5)),
        ms(full.value_at_quantile(0.99)),
        ms(paged.value_at_quantile(0.5)),
        ms(paged.value_at_quantile(0.99)),
        pages.to_string(),
        iterations.to_string(),
    ])
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: watch latency
// ---------------------------------------------------------------------------------------------

async fn scenario_watch(target: &mut Target, s: &Settings, name: &str) -> Result<Vec<Row>> {
    let prefix = "/bench/watch/";
    let key = format!("{prefix}object");
    let events = s.watch_events;
    let mut revision = target
        .create(&key, make_value(s.value_size, u64::MAX / 2))
        .await
        .context("creating the watched key")?;
    let after = target.current_revision().await?;

    eprintln!("[{name}] watch: starting {} watchers", s.watchers);
    let setup = Instant::now();
    let streams: Vec<Result<SeqStream>> = futures::stream::iter(0..s.watchers)
        .map(|_| {
            let mut target = target.clone();
            async move { target.watch(prefix, after).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let streams = streams
        .into_iter()
        .collect::<Result<Vec<_>>>()
        .context("starting watchers")?;
    let setup = setup.elapsed();

    let base = Instant::now();
    let last = events as u64 - 1;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut set = JoinSet::new();
    for mut stream in streams {
        let mut stop = stop_rx.clone();
        set.spawn(async move {
            let mut got: Vec<(u64, u64)> = Vec::with_capacity(events);
            let mut error = None;
            'receive: loop {
                tokio::select! {
                    biased;
                    item = stream.next() => match item {
                        Some(Ok(seqs)) => {
                            let at = nanos(base.elapsed());
                            for seq in seqs {
                                got.push((seq, at));
                                if seq >= last {
                                    break 'receive;
                                }
                            }
                        }
                        Some(Err(e)) => {
                            error = Some(format!("{e:#}"));
                            break;
                        }
                        None => {
                            error = Some("watch stream ended".to_owned());
                            break;
                        }
                    },
                    _ = stop.changed() => break,
                }
            }
            (got, error)
        });
    }

    // Let every watcher task reach its first poll before writing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut sent = vec![0u64; events];
    let mut tick = tokio::time::interval(s.watch_spacing);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for (seq, sent_at) in sent.iter_mut().enumerate() {
        tick.tick().await;
        let value = make_value(s.value_size, seq as u64);
        *sent_at = nanos(base.elapsed());
        revision = target
            .update(&key, value, revision)
            .await
            .with_context(|| format!("watch writer: update {seq}"))?;
    }

    let grace = Duration::from_secs(10);
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        let _ = stop_tx.send(true);
    });
    let results = join_all(set).await;
    stopper.abort();
    let results = results?;

    let mut latency = histogram()?;
    let mut delivered = 0u64;
    let mut duplicates = 0u64;
    let mut failed = 0u64;
    let mut first_error = None;
    for (got, error) in results {
        let mut seen = HashSet::new();
        for (seq, at) in got {
            let Some(&sent_at) = usize::try_from(seq).ok().and_then(|i| sent.get(i)) else {
                continue;
            };
            if !seen.insert(seq) {
                duplicates += 1;
                continue;
            }
            delivered += 1;
            latency.saturating_record(at.saturating_sub(sent_at).max(1));
        }
        if let Some(error) = error {
            failed += 1;
            first_error.get_or_insert(error);
        }
    }
    let expected = (s.watchers * events) as u64;
    let missing = expected.saturating_sub(delivered);
    let mut notes = errors_cell(failed, first_error.as_deref());
    if duplicates > 0 {
        notes.push_str(&format!("; {duplicates} duplicate deliveries"));
    }
    eprintln!(
        "[{name}]   {delivered}/{expected} delivered, p99 {} ms, {missing} missing",
        ms(latency.value_at_quantile(0.99))
    );
    let (p50, p99, max) = if delivered == 0 {
        ("-".to_owned(), "-".to_owned(), "-".to_owned())
    } else {
        (
            ms(latency.value_at_quantile(0.5)),
            ms(latency.value_at_quantile(0.99)),
            ms(latency.max()),
        )
    };
    Ok(vec![vec![
        s.watchers.to_string(),
        events.to_string(),
        format!("{:.2}", setup.as_secs_f64()),
        delivered.to_string(),
        p50,
        p99,
        max,
        missing.to_string(),
        notes,
    ]])
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: size on disk
// ---------------------------------------------------------------------------------------------

async fn scenario_db_size(instance: &mut Instance, s: &Settings, name: &str) -> Result<Vec<Row>> {
    let prefix = "/bench/db/";
    let keys = s.db_keys;
    let (_, revisions) = populate(
        &instance.target,
        prefix,
        keys,
        s.populate_concurrency,
        s.value_size,
    )
    .await?;

    // The compactor: every `compact_every` revisions, discard history older than the last
    // `compact_retain` revisions.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let compactor = {
        let mut target = instance.target.clone();
        let (every, retain) = (s.compact_every, s.compact_retain);
        let name = name.to_owned();
        tokio::spawn(async move {
            let mut last_at = target.current_revision().await?;
            let mut compactions = 0u64;
            let mut last_target = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop_rx.changed() => break,
                }
                let current = target.current_revision().await?;
                if current - last_at >= every && current - retain > last_target {
                    last_target = current - retain;
                    let began = Instant::now();
                    target
                        .compact(last_target)
                        .await
                        .with_context(|| format!("compacting to {last_target}"))?;
                    compactions += 1;
                    last_at = current;
                    eprintln!(
                        "[{name}]   compacted to {last_target} in {:.0} ms",
                        began.elapsed().as_secs_f64() * 1000.0
                    );
                }
            }
            anyhow::Ok((compactions, last_target))
        })
    };

    eprintln!(
        "[{name}] db-size: {} updates over {keys} keys, {} writers",
        s.updates, s.db_writers
    );
    let remaining = Arc::new(AtomicU64::new(0));
    let writers = s.db_writers.clamp(1, keys);
    let start = Instant::now();
    let mut set = JoinSet::new();
    for writer in 0..writers {
        let mut owned: Vec<(String, i64)> = (writer..keys)
            .step_by(writers)
            .map(|i| (format!("{prefix}{i:09}"), revisions[i]))
            .collect();
        let mut target = instance.target.clone();
        let counter = remaining.clone();
        let (total, value_size) = (s.updates, s.value_size);
        set.spawn(async move {
            let mut out = WorkerOut::new()?;
            let mut next = 0;
            loop {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let len = owned.len();
                let (key, revision) = &mut owned[next];
                next = (next + 1) % len;
                let value = make_value(value_size, (1u64 << 40) + n);
                if !out.timed_update(&mut target, key, revision, value).await {
                    break;
                }
            }
            anyhow::Ok(out)
        });
    }
    let outs = join_all(set)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let phase = Phase::merge(&outs, start.elapsed())?;
    let _ = stop_tx.send(true);
    let (mut compactions, last_target) = compactor.await.context("the compactor task failed")??;

    let at_end = disk_usage(instance);

    // One last compaction, so every backend ends with the same retained window.
    let target = &mut instance.target;
    let current = target.current_revision().await?;
    if current - s.compact_retain > last_target {
        target.compact(current - s.compact_retain).await?;
        compactions += 1;
    }
    // Both backends finish compacting in the background (SQLite's writer purges history and
    // returns pages to the file system when idle, etcd compacts asynchronously): wait until the
    // size on disk stops changing.
    let settle = Instant::now();
    let limit = if s.quick { 10 } else { 60 };
    let (mut last, mut stable) = (disk_usage(instance), 0);
    while stable < 4 && settle.elapsed() < Duration::from_secs(limit) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = disk_usage(instance);
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
    }
    let settled = if stable >= 4 {
        format!(
            "{:.1} s",
            settle
                .elapsed()
                .saturating_sub(Duration::from_millis(2000))
                .as_secs_f64()
        )
    } else {
        format!("still changing after {limit} s")
    };

    let live = (keys * s.value_size) as u64;
    let (on_disk, detail) = if let Some(path) = instance.sqlite_path.clone() {
        sqlite_size(&path)?
    } else if let (Some(admin), Some(data)) = (instance.admin.as_mut(), &instance.etcd_data) {
        etcd_size(admin, data).await?
    } else {
        bail!("nothing to measure the size of");
    };
    eprintln!(
        "[{name}]   {} updates/s; {} on disk at the end, {} settled, for {} live",
        rate(phase.ok, phase.elapsed),
        mib(at_end),
        mib(on_disk),
        mib(live)
    );
    let mut row = vec![keys.to_string(), phase.ok.to_string()];
    row.extend(phase.cells());
    row.extend([
        compactions.to_string(),
        current.to_string(),
        mib(at_end),
        format!("{} ({settled})", mib(on_disk)),
        mib(live),
        format!("{:.1}×", on_disk as f64 / live.max(1) as f64),
        detail,
        phase.errors_cell(),
    ]);
    Ok(vec![row])
}

/// What the store occupies on disk: SQLite's database file and WAL, etcd's database file.
fn disk_usage(instance: &Instance) -> u64 {
    if let Some(path) = &instance.sqlite_path {
        file_size(path) + file_size(&sidecar(path, "-wal"))
    } else if let Some(data) = &instance.etcd_data {
        file_size(&data.join("member/snap/db"))
    } else {
        0
    }
}

fn file_size(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Size of the database file plus its WAL, and how much of the file is free pages.
fn sqlite_size(path: &Path) -> Result<(u64, String)> {
    let db = file_size(path);
    let wal = file_size(&sidecar(path, "-wal"));
    let free = sqlite_free_bytes(path)
        .map(|b| format!("{} free pages", mib(b)))
        .unwrap_or_else(|e| format!("free pages unknown: {e:#}"));
    Ok((
        db + wal,
        format!("db {} + wal {}; {free}", mib(db), mib(wal)),
    ))
}

fn sqlite_free_bytes(path: &Path) -> Result<u64> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(u64::try_from(free * page)?)
}

/// The size of etcd's database file (`member/snap/db` in its data directory) after compaction,
/// then after a defragmentation; the detail also gives the size etcd reports in use and the size
/// of its write-ahead log.
async fn etcd_size(admin: &mut Client, data_dir: &Path) -> Result<(u64, String)> {
    let db_path = data_dir.join("member/snap/db");
    let wal = dir_size(&data_dir.join("member/wal"));
    let status = admin.status().await.context("etcd status")?;
    let size = match fs::metadata(&db_path) {
        Ok(meta) => meta.len(),
        Err(_) => u64::try_from(status.db_size()).unwrap_or(0),
    };
    let in_use = u64::try_from(status.raft_used_db_size()).unwrap_or(0);
    let began = Instant::now();
    let defrag = match admin.defragment().await {
        Ok(_) => {
            let took = began.elapsed();
            let after = match fs::metadata(&db_path) {
                Ok(meta) => meta.len(),
                Err(_) => {
                    let status = admin.status().await.context("etcd status")?;
                    u64::try_from(status.db_size()).unwrap_or(0)
                }
            };
            format!("after defrag ({:.1} s): {}", took.as_secs_f64(), mib(after))
        }
        Err(error) => format!("defrag failed: {error}"),
    };
    Ok((
        size,
        format!(
            "db file without defrag ({} in use); {defrag}; wal dir {}",
            mib(in_use),
            mib(wal)
        ),
    ))
}

/// The total size of the files under `dir` (0 when it cannot be read).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_size(&entry.path()),
            Ok(_) => entry.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------------

/// The fields of `/proc/<pid>/stat` after the command name (the first is the state).
fn stat_fields(pid: &str) -> Option<(String, Vec<String>)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let rest = stat.get(close + 1..)?;
    Some((comm, rest.split_whitespace().map(str::to_owned).collect()))
}

/// User plus system CPU time in clock ticks.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let (_, fields) = stat_fields(pid)?;
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

fn ticks_to_secs(ticks: u64) -> f64 {
    static CLK_TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let hz = *CLK_TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    });
    ticks as f64 / hz
}

/// A `kB` line of `/proc/<pid>/status`.
fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn md_escape(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let mut cut: String = one_line.chars().take(max).collect();
    if one_line.chars().count() > max {
        cut.push('…');
    }
    cut.replace('|', "\\|")
}

fn error_cell(error: &anyhow::Error) -> String {
    format!("**error**: {}", md_escape(&format!("{error:#}"), 300))
}

/// The machine, as `N CPUs (model), X GiB RAM, Linux version`.
fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown");
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let memory = status_like("/proc/meminfo", "MemTotal")
        .map(|kib| format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0)))
        .unwrap_or_else(|| "?".to_owned());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned());
    format!("{cpus} CPUs ({model}), {memory} RAM, Linux {kernel}")
}

/// The first line of `etcd --version`.
fn etcd_version() -> String {
    std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "etcd not found".to_owned())
}

/// This process's command line, quoted for a shell.
fn command_line() -> String {
    std::env::args()
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn header(s: &Settings, dir: &Path) -> String {
    let machine = machine();
    let etcd = etcd_version();
    let command = command_line();

    let mut out = String::new();
    let _ = writeln!(out, "## Storage benchmark (`capstan-bench store`)\n");
    let _ = writeln!(out, "- date: {}", utc_now());
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(out, "- machine: {machine}");
    let _ = writeln!(
        out,
        "- SQLite files in `{}` ({}); {etcd} started by `capstan_testkit::EtcdServer`",
        dir.display(),
        filesystem_of(dir)
    );
    let _ = writeln!(
        out,
        "- values of {} bytes; {}",
        s.value_size,
        if s.quick {
            "**--quick**: scaled down, numbers are a smoke test only"
        } else {
            "full run"
        }
    );
    let _ = writeln!(
        out,
        "- the bench process, etcd and the writers share the machine's CPUs\n"
    );
    out
}

fn status_like(path: &str, field: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The type and device of the mount holding `path`, from `/proc/mounts`.
fn filesystem_of(path: &Path) -> String {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (device, point, kind) = (parts.next()?, parts.next()?, parts.next()?);
            path.starts_with(point)
                .then(|| (point.len(), format!("{kind} ({device})")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
        .unwrap_or_else(|| "filesystem unknown".to_owned())
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn table(out: &mut String, headers: &[&str], rows: &[(&str, &Vec<Row>)]) {
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        headers.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for (backend, backend_rows) in rows {
        for row in backend_rows.iter() {
            let mut cells = vec![(*backend).to_owned()];
            cells.extend(row.iter().cloned());
            while cells.len() < headers.len() {
                cells.push(String::new());
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out.push('\n');
}

fn tables(s: &Settings, reports: &[BackendReport]) -> String {
    let mut out = String::new();
    let pick = |f: fn(&BackendReport) -> &Vec<Row>| {
        reports
            .iter()
            .map(|r| (r.name, f(r)))
            .collect::<Vec<(&str, &Vec<Row>)>>()
    };
    if s.runs(ScenarioKind::Writes) {
        let _ = writeln!(
            out,
            "### Writes\n\nEach writer creates distinct keys for {:.1} s, then updates its own keys \
             for {:.1} s with compare-and-swap on the mod revision its previous write returned \
             (no reads). Latencies in ms.\n",
            s.duration.as_secs_f64(),
            s.duration.as_secs_f64()
        );
        table(
            &mut out,
            &[
                "backend",
                "writers",
                "create ops/s",
                "create p50",
                "create p99",
                "update ops/s",
                "update p50",
                "update p99",
                "errors",
            ],
            &pick(|r| &r.writes),
        );
    }
    if s.runs(ScenarioKind::List) {
        let _ = writeln!(
            out,
            "### Lists\n\nA prefix holding N keys (created by {} writers; the populate rate is in \
             keys/s). A full list returns every key in one response; a paged list asks for {} \
             keys at a time, following the continue key at the first page's revision. Latencies \
             in ms for the whole list.\n",
            s.populate_concurrency, s.page_size
        );
        table(
            &mut out,
            &[
                "backend",
                "keys",
                "populate keys/s",
                "full p50",
                "full p99",
                "paged p50",
                "paged p99",
                "pages",
                "iterations",
            ],
            &pick(|r| &r.list),
        );
    }
    if s.runs(ScenarioKind::Watch) {
        let _ = writeln!(
            out,
            "### Watch latency\n\nWatchers on one prefix; one writer updates a key every {} ms. \
             Latency is from just before the write is issued to a watcher receiving the event \
             (ms). Missing = deliveries expected (watchers × events) but not received. \
             `etcd-raw` opens one etcd watch stream per watcher.\n",
            s.watch_spacing.as_millis()
        );
        table(
            &mut out,
            &[
                "backend",
                "watchers",
                "events",
                "setup s",
                "delivered",
                "p50",
                "p99",
                "max",
                "missing",
                "watcher errors",
            ],
            &pick(|r| &r.watch),
        );
    }
    if s.runs(ScenarioKind::DbSize) {
        let _ = writeln!(
            out,
            "### Size on disk\n\nOn a fresh store: {} keys, then updates by {} writers \
             (compare-and-swap), compacting to `current - {}` every {} revisions and once at the \
             end. On disk: SQLite's database file plus WAL, etcd's database file (`member/snap/db` \
             in its data directory), when the updates end and once the size has stopped changing \
             after the last compaction (time taken in brackets; etcd is not defragmented, the \
             detail gives its size after a defragmentation). Ratio: settled size over live data. \
             Latencies in ms.\n",
            s.db_keys, s.db_writers, s.compact_retain, s.compact_every
        );
        table(
            &mut out,
            &[
                "backend",
                "keys",
                "updates",
                "updates/s",
                "p50",
                "p99",
                "compactions",
                "final revision",
                "on disk at end",
                "on disk settled",
                "live data",
                "ratio",
                "detail",
                "errors",
            ],
            &pick(|r| &r.db_size),
        );
    }
    let _ = writeln!(
        out,
        "### Resources\n\nPer backend run (all scenarios). CPU is user + system seconds; the bench \
         process's peak RSS is reset before each backend (`/proc/self/clear_refs`). etcd columns \
         sum or max over the etcd servers the run started.\n"
    );
    let resources: Vec<(&str, Vec<Row>)> = reports
        .iter()
        .map(|r| (r.name, vec![r.resources.clone()]))
        .collect();
    let refs: Vec<(&str, &Vec<Row>)> = resources.iter().map(|(n, r)| (*n, r)).collect();
    table(
        &mut out,
        &[
            "backend",
            "wall s",
            "bench CPU s",
            "bench peak RSS",
            "etcd CPU s",
            "etcd peak RSS",
        ],
        &refs,
    );
    let notes: Vec<&String> = reports.iter().flat_map(|r| &r.notes).collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "Notes:\n");
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
        out.push('\n');
    }
    out
}
