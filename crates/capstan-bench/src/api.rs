//! `capstan-bench api`: the API server measured end to end, through HTTPS.
//!
//! For each backend (`sqlite`: the embedded datastore under the data dir; `etcd`: a fresh etcd
//! started by [`capstan_testkit::EtcdServer`] and passed with `--datastore-endpoint`) the driver
//! starts the real `capstan server` binary on a temporary data dir and a free loopback port, and
//! talks to it as the admin user: the client certificate `<data-dir>/tls/admin.crt` and
//! `admin.key`, the server verified against `ca.crt`. Every client is its own TLS connection
//! speaking HTTP/2 (ALPN `h2`), with one request in flight at a time; the watchers share
//! connections, a bounded number of streams on each (hyper's server allows 200 per connection).
//!
//! The scenarios, in the order they run on one server:
//! 1. start-up: spawning the server until `/readyz` answers `ok`, on a fresh data dir (and fresh
//!    etcd) and again on the same data dir (restart), several times; each of these servers is
//!    stopped with SIGTERM. At the end of the run, one more restart with everything the run wrote;
//! 2. memory: the server's `VmRSS`, `RssAnon`, `RssFile` and `VmHWM` idle after start, after the
//!    list namespaces are populated (N ConfigMaps and N Pods), and at the end of the run;
//! 3. lists: `limit=500` pages through a namespace of N ConfigMaps, then one of N Pods,
//!    following `continue`; latency per page (request sent to body fully received);
//! 4. gets: closed-loop GETs of the populated objects at 1, 8 and 32 clients;
//! 5. creates: closed-loop creates of ConfigMaps, then Pods (one container with image, ports and
//!    resources) at 1, 8 and 32 clients, each round in a namespace of its own;
//! 6. watch: many watchers (`?watch=1&resourceVersion=<rv>`) on one namespace's ConfigMaps, one
//!    writer updating a ConfigMap at a fixed interval; latency from just before each write to each
//!    watcher receiving the event, and a check that every watcher got every event once, in order.
//!
//! CPU columns are the share of one CPU used during the measured phase (user + system; 200% is
//! both CPUs of a 2-CPU machine), for the server and for this driver, which runs on the same
//! machine and competes with the server for it.

use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use bytes::Bytes;
use capstan_testkit::EtcdServer;
use clap::{Args, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use crate::{
    Phase, Row, WorkerOut, command_line, cpu_ticks, error_cell, errors_cell, etcd_version,
    filesystem_of, guarded, histogram, join_all, machine, mib, ms, nanos, parse_duration, rate,
    status_kib, table, ticks_to_secs, utc_now,
};

/// Flags of `capstan-bench api`.
#[derive(Args, Debug)]
pub struct ApiArgs {
    /// Backends to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd")]
    backends: Vec<ApiBackend>,
    /// Scenarios to run (gets, lists and memory share the populated namespaces).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "startup,memory,lists,gets,creates,watch"
    )]
    scenarios: Vec<ApiScenario>,
    /// Scale everything down for a smoke run (well under a minute).
    #[arg(long)]
    quick: bool,
    /// The `capstan` binary to benchmark; default: `capstan` next to this binary.
    #[arg(long)]
    server: Option<PathBuf>,
    /// Directory for the servers' data dirs and etcd's (a temporary directory is made inside it).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// How long each create and get round runs ("10", "10s", "500ms"); default 10 s, 300 ms
    /// with --quick.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Client counts for creates and gets.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    concurrency: Vec<usize>,
    /// Objects of each kind in the populated namespaces; default 10000 (1000 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// Clients that populate the namespaces.
    #[arg(long, default_value_t = 32)]
    populate_clients: usize,
    /// `limit` of each list request.
    #[arg(long, default_value_t = 500)]
    page_size: usize,
    /// Times each populated namespace is listed page by page; default 5 (2 with --quick).
    #[arg(long)]
    list_walks: Option<usize>,
    /// Watchers in the watch scenario; default 1000 (50 with --quick).
    #[arg(long)]
    watchers: Option<usize>,
    /// Watch streams per HTTP/2 connection.
    #[arg(long, default_value_t = 100)]
    watchers_per_connection: usize,
    /// Updates the watch scenario's writer makes; default 200 (20 with --quick).
    #[arg(long)]
    watch_events: Option<usize>,
    /// Time between two updates of the watch scenario's writer.
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    watch_interval: Duration,
    /// Fresh starts (each followed by a restart) in the start-up scenario; default 5 (1 with
    /// --quick).
    #[arg(long)]
    startup_runs: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApiBackend {
    Sqlite,
    Etcd,
}

impl ApiBackend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ApiBackend::Sqlite => "sqlite",
            ApiBackend::Etcd => "etcd",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ApiScenario {
    Startup,
    Memory,
    Lists,
    Gets,
    Creates,
    Watch,
}

/// Everything a run does, with `--quick` and the defaults resolved.
#[derive(Debug)]
struct Settings {
    backends: Vec<ApiBackend>,
    scenarios: Vec<ApiScenario>,
    quick: bool,
    server: PathBuf,
    duration: Duration,
    concurrency: Vec<usize>,
    objects: usize,
    populate_clients: usize,
    page_size: usize,
    list_walks: usize,
    watchers: usize,
    watchers_per_connection: usize,
    watch_events: usize,
    watch_interval: Duration,
    startup_runs: usize,
    /// How long the server is left alone before its memory is read.
    settle: Duration,
}

impl Settings {
    fn from_args(args: &ApiArgs) -> Result<Settings> {
        let quick = args.quick;
        fn pick<T>(quick: bool, full: T, small: T) -> T {
            if quick { small } else { full }
        }
        let server = match &args.server {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .context("finding this binary")?
                .with_file_name("capstan"),
        };
        ensure!(
            server.is_file(),
            "no server binary at {} (build it with `cargo build --release -p capstan`, or pass \
             --server)",
            server.display()
        );
        let settings = Settings {
            backends: crate::dedup(&args.backends),
            scenarios: crate::dedup(&args.scenarios),
            quick,
            server,
            duration: args.duration.unwrap_or(pick(
                quick,
                Duration::from_secs(10),
                Duration::from_millis(300),
            )),
            concurrency: args.concurrency.clone(),
            objects: args.objects.unwrap_or(pick(quick, 10_000, 1_000)),
            populate_clients: args.populate_clients,
            page_size: args.page_size,
            list_walks: args.list_walks.unwrap_or(pick(quick, 5, 2)),
            watchers: args.watchers.unwrap_or(pick(quick, 1_000, 50)),
            watchers_per_connection: args.watchers_per_connection,
            watch_events: args.watch_events.unwrap_or(pick(quick, 200, 20)),
            watch_interval: args.watch_interval,
            startup_runs: args.startup_runs.unwrap_or(pick(quick, 5, 1)),
            settle: pick(quick, Duration::from_secs(2), Duration::from_millis(200)),
        };
        ensure!(
            settings.concurrency.iter().all(|&c| c > 0),
            "--concurrency values must be positive"
        );
        ensure!(
            settings.objects > 0
                && settings.populate_clients > 0
                && settings.page_size > 0
                && settings.list_walks > 0,
            "--objects, --populate-clients, --page-size and --list-walks must be positive"
        );
        ensure!(
            settings.watchers > 0
                && settings.watchers_per_connection > 0
                && settings.watch_events > 0,
            "--watchers, --watchers-per-connection and --watch-events must be positive"
        );
        ensure!(settings.startup_runs > 0, "--startup-runs must be positive");
        Ok(settings)
    }

    fn runs(&self, scenario: ApiScenario) -> bool {
        self.scenarios.contains(&scenario)
    }

    /// Whether the namespaces of N ConfigMaps and N Pods are needed.
    fn populates(&self) -> bool {
        [ApiScenario::Memory, ApiScenario::Lists, ApiScenario::Gets]
            .iter()
            .any(|&s| self.runs(s))
    }

    /// How long a scenario may take before it is abandoned.
    fn timeout(&self, scenario: ApiScenario) -> Duration {
        let rounds = (KINDS.len() * self.concurrency.len()) as f64;
        let secs = match scenario {
            ApiScenario::Startup => 120.0 + 60.0 * self.startup_runs as f64,
            ApiScenario::Memory => 1200.0 + self.objects as f64 / 10.0,
            ApiScenario::Lists => 600.0 + (self.objects * self.list_walks) as f64 / 100.0,
            ApiScenario::Gets | ApiScenario::Creates => {
                120.0 + rounds * (self.duration.as_secs_f64() + 30.0)
            }
            ApiScenario::Watch => {
                300.0 + self.watch_events as f64 * self.watch_interval.as_secs_f64() * 2.0
            }
        };
        Duration::from_secs_f64(secs)
    }
}

/// Runs `capstan-bench api` and prints its report.
pub async fn run(args: ApiArgs) -> Result<()> {
    let settings = Settings::from_args(&args)?;
    fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-apibench-")
        .tempdir_in(&args.dir)
        .with_context(|| format!("creating a temporary directory in {}", args.dir.display()))?;
    print!("{}", header(&settings, tmp.path()));
    let mut reports = Vec::new();
    for &backend in &settings.backends {
        reports.push(run_backend(backend, &settings, tmp.path()).await);
    }
    print!("{}", tables(&settings, &reports));
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "Load average at the end: {}\n",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The HTTPS client
// ---------------------------------------------------------------------------------------------

/// The admin client's TLS settings, from the server's `tls` directory.
fn client_tls(tls_dir: &Path) -> Result<Arc<rustls::ClientConfig>> {
    let read = |file: &str| fs::read(tls_dir.join(file)).with_context(|| format!("reading {file}"));
    tls_config(tls_dir, Some((&read("admin.crt")?, &read("admin.key")?)))
}

/// TLS settings trusting the server's CA (`<tls_dir>/ca.crt`) that present `identity` (a
/// certificate chain and its key, PEM) as the client certificate, or none.
pub(crate) fn tls_config(
    tls_dir: &Path,
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<rustls::ClientConfig>> {
    let ca = fs::read(tls_dir.join("ca.crt")).context("reading ca.crt")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        roots
            .add(cert.map_err(|e| anyhow!("ca.crt: {e}"))?)
            .context("ca.crt")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow!("client certificate: {e}"))?;
            ensure!(!chain.is_empty(), "the client certificate file holds none");
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| anyhow!("client key: {e}"))?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The HTTP version a connection speaks, chosen by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Protocol {
    /// HTTP/2 (hyper's h2: like nghttp2 it never indexes `Authorization` in HPACK, so a bearer
    /// token travels as a Huffman-coded literal on every request).
    H2,
    /// HTTP/1.1 with keep-alive (headers sent as they are on every request).
    Http1,
    /// HTTP/2 from Go's net/http, the transport of client-go (the `go/getload` program, run by
    /// the security benchmark): its HPACK encoder indexes `Authorization`, so a token crosses a
    /// connection once and is then sent as a table index.
    GoH2,
}

impl Protocol {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::H2 => "HTTP/2",
            Protocol::Http1 => "HTTP/1.1",
            Protocol::GoH2 => "HTTP/2 (Go)",
        }
    }

    fn alpn(self) -> &'static [u8] {
        match self {
            Protocol::H2 | Protocol::GoH2 => b"h2",
            Protocol::Http1 => b"http/1.1",
        }
    }

    /// `config`, offering only this protocol.
    pub(crate) fn offered_by(
        self,
        config: &Arc<rustls::ClientConfig>,
    ) -> Arc<rustls::ClientConfig> {
        let mut config = rustls::ClientConfig::clone(config);
        config.alpn_protocols = vec![self.alpn().to_vec()];
        Arc::new(config)
    }
}

/// A connection's request sender.
#[derive(Clone)]
enum Sender {
    H2(SendRequest<Full<Bytes>>),
    /// HTTP/1.1 carries one request at a time: clones take turns.
    H1(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>),
}

/// One connection to the server, HTTP/2 unless the TLS configuration offers only HTTP/1.1
/// (cheap to clone: clones share the connection).
#[derive(Clone)]
pub(crate) struct Conn {
    send: Sender,
    base: Arc<str>,
    /// `Authorization` header value sent with every request (`Bearer <token>`), if any.
    authorization: Option<HeaderValue>,
}

impl Conn {
    async fn open(tls: &Arc<rustls::ClientConfig>, port: u16) -> Result<Conn> {
        Conn::open_as(tls, port, None).await
    }

    /// Opens a connection that sends `Authorization: Bearer <bearer>` with every request.
    async fn open_as(
        tls: &Arc<rustls::ClientConfig>,
        port: u16,
        bearer: Option<&str>,
    ) -> Result<Conn> {
        let authorization = bearer
            .map(|token| HeaderValue::from_str(&format!("Bearer {token}")))
            .transpose()
            .context("the token is not a valid header value")?;
        let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
        let stream = TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .context("TLS handshake")?;
        let send = match stream.get_ref().1.alpn_protocol() {
            Some(b"h2") => {
                let (send, connection) =
                    hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                        .handshake(TokioIo::new(stream))
                        .await
                        .context("HTTP/2 handshake")?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Sender::H2(send)
            }
            Some(b"http/1.1") => {
                let (send, connection) = hyper::client::conn::http1::Builder::new()
                    .handshake(TokioIo::new(stream))
                    .await
                    .context("HTTP/1.1 handshake")?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Sender::H1(Arc::new(tokio::sync::Mutex::new(send)))
            }
            other => bail!(
                "the server negotiated {:?}, not what was offered",
                other.map(String::from_utf8_lossy)
            ),
        };
        Ok(Conn {
            send,
            base: format!("https://127.0.0.1:{port}").into(),
            authorization,
        })
    }

    /// Opens `count` connections, a few at a time.
    async fn open_many(
        tls: &Arc<rustls::ClientConfig>,
        port: u16,
        count: usize,
        bearer: Option<&str>,
    ) -> Result<Vec<Conn>> {
        use futures::StreamExt;
        futures::stream::iter(0..count)
            .map(|_| Conn::open_as(tls, port, bearer))
            .buffered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    /// Sends a request; the response's body is left to the caller.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Response<Incoming>> {
        self.send_typed(method, path, body, "application/json")
            .await
    }

    /// Sends a request whose body has the content type `content_type`.
    pub(crate) async fn send_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        content_type: &str,
    ) -> Result<Response<Incoming>> {
        let mut request = Request::builder()
            .method(method)
            .header(ACCEPT, "application/json");
        request = match &self.send {
            Sender::H2(_) => request.uri(format!("{}{path}", self.base)),
            // HTTP/1.1 sends the path with a Host header.
            Sender::H1(_) => request.uri(path).header(
                hyper::header::HOST,
                self.base.trim_start_matches("https://"),
            ),
        };
        if body.is_some() {
            request = request.header(CONTENT_TYPE, content_type);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request.body(Full::new(body.unwrap_or_default()))?;
        match &self.send {
            Sender::H2(send) => {
                let mut send = send.clone();
                send.ready().await.context("connection closed")?;
                Ok(send.send_request(request).await?)
            }
            Sender::H1(send) => {
                let mut send = send.lock().await;
                send.ready().await.context("connection closed")?;
                Ok(send.send_request(request).await?)
            }
        }
    }

    /// Sends a request and reads the whole body, which must come with status `expect`.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        expect: StatusCode,
    ) -> Result<Bytes> {
        let response = self.send(method.clone(), path, body).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if status != expect {
            bail!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(bytes.get(..300).unwrap_or(&bytes))
            );
        }
        Ok(bytes)
    }
}

// ---------------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------------

/// How long a server may take to become ready before the start counts as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often `/readyz` is polled during a start.
const READY_POLL: Duration = Duration::from_millis(2);

/// A running `capstan server`; dropping it kills the process.
pub(crate) struct ServerProcess {
    child: tokio::process::Child,
    pub(crate) pid: String,
    port: u16,
    log: PathBuf,
    tls: Arc<rustls::ClientConfig>,
}

impl ServerProcess {
    /// Spawns the server on `data_dir` and waits until `/readyz` answers `ok`; returns it with
    /// the time from spawning to that answer.
    async fn start(
        s: &Settings,
        data_dir: &Path,
        datastore: Option<&str>,
        log: &Path,
    ) -> Result<(ServerProcess, Duration)> {
        Self::start_with(&s.server, data_dir, datastore, &[], log).await
    }

    /// Spawns `server` with extra flags; see [`ServerProcess::start`].
    pub(crate) async fn start_with(
        server: &Path,
        data_dir: &Path,
        datastore: Option<&str>,
        extra: &[&str],
        log: &Path,
    ) -> Result<(ServerProcess, Duration)> {
        Self::start_with_env(server, data_dir, datastore, extra, &[], log).await
    }

    /// Spawns `server` with extra flags and environment variables; see
    /// [`ServerProcess::start`].
    pub(crate) async fn start_with_env(
        server: &Path,
        data_dir: &Path,
        datastore: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<(ServerProcess, Duration)> {
        let mut last_error = None;
        // A port handed out by `free_port` may be taken by someone else meanwhile: retry.
        for _ in 0..3 {
            let port = capstan_testkit::free_port();
            match Self::try_start(server, data_dir, datastore, extra, env, log, port, None).await {
                Ok(started) => return Ok(started),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("the server did not start")))
    }

    /// Spawns `server` on `port` and waits until `/readyz` answers `ok` to a client with
    /// `tls` (default: the admin certificate the server writes to its data dir; a server that
    /// joined another has none of its own).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn try_start(
        server: &Path,
        data_dir: &Path,
        datastore: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &Path,
        port: u16,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<(ServerProcess, Duration)> {
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut command = tokio::process::Command::new(server);
        command
            .arg("server")
            .arg("--disable-agent")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(port.to_string())
            // The cluster DNS on a free port, so a host resolver on 53 is no obstacle.
            .args(["--dns-port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true);
        if let Some(endpoint) = datastore {
            command.args(["--datastore-endpoint", endpoint]);
        }
        let began = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", server.display()))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("the server exited at once"))?
            .to_string();
        let tls_dir = data_dir.join("tls");
        let mut tls = tls;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the server exited ({status}) before it was ready; its log ends with: {}",
                    log_tail(log)
                );
            }
            if began.elapsed() > READY_TIMEOUT {
                bail!(
                    "the server was not ready after {} s; its log ends with: {}",
                    READY_TIMEOUT.as_secs(),
                    log_tail(log)
                );
            }
            if tls.is_none() {
                // The certificates appear (on a first start) before the server listens.
                tls = client_tls(&tls_dir).ok();
            }
            if let Some(config) = &tls
                && ready_once(config, port).await
            {
                let took = began.elapsed();
                let server = ServerProcess {
                    child,
                    pid,
                    port,
                    log: log.to_owned(),
                    tls: config.clone(),
                };
                return Ok((server, took));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Stops the server with SIGTERM (as a service manager would) and waits for it.
    pub(crate) async fn stop(mut self) -> Result<()> {
        let status = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid])
            .status()
            .await
            .context("running kill")?;
        ensure!(status.success(), "kill -TERM {} failed", self.pid);
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                ensure!(
                    status.success(),
                    "the server exited with {status} on SIGTERM; its log ends with: {}",
                    log_tail(&self.log)
                );
                Ok(())
            }
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("the server did not stop within 30 s of SIGTERM")
            }
        }
    }

    pub(crate) async fn connect(&self) -> Result<Conn> {
        Conn::open(&self.tls, self.port).await
    }

    /// Kills the server with SIGKILL (a crash, no shutdown) and waits until it is gone.
    pub(crate) async fn kill(mut self) -> Result<()> {
        self.child.kill().await.context("killing the server")
    }

    /// The port the server listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The TLS settings its clients use (admin client certificate).
    pub(crate) fn tls(&self) -> Arc<rustls::ClientConfig> {
        self.tls.clone()
    }

    pub(crate) async fn connect_many(&self, count: usize) -> Result<Vec<Conn>> {
        Conn::open_many(&self.tls, self.port, count, None).await
    }

    /// Opens `count` connections with TLS settings of the caller's (another client
    /// certificate, or none), each sending `Authorization: Bearer <bearer>` if given.
    pub(crate) async fn connect_many_as(
        &self,
        tls: &Arc<rustls::ClientConfig>,
        bearer: Option<&str>,
        count: usize,
    ) -> Result<Vec<Conn>> {
        Conn::open_many(tls, self.port, count, bearer).await
    }

    pub(crate) fn memory(&self) -> Memory {
        Memory::of(&self.pid)
    }

    /// The server's base URL (`https://127.0.0.1:<port>`), for clients other than [`Conn`].
    pub(crate) fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

/// One attempt at `GET /readyz`; true on `200 ok`.
async fn ready_once(tls: &Arc<rustls::ClientConfig>, port: u16) -> bool {
    let attempt = async {
        let conn = Conn::open(tls, port).await?;
        let body = conn
            .call(Method::GET, "/readyz", None, StatusCode::OK)
            .await?;
        anyhow::Ok(body.as_ref() == b"ok")
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), attempt).await,
        Ok(Ok(true))
    )
}

/// The last lines of a log file, on one line.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" / ")
}

/// A process's memory, in KiB, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Memory {
    pub(crate) rss: u64,
    pub(crate) anon: u64,
    file: u64,
    pub(crate) hwm: u64,
}

impl Memory {
    pub(crate) fn of(pid: &str) -> Memory {
        let field = |name| status_kib(pid, name).unwrap_or(0);
        Memory {
            rss: field("VmRSS"),
            anon: field("RssAnon"),
            file: field("RssFile"),
            hwm: field("VmHWM"),
        }
    }
}

pub(crate) fn kib(value: u64) -> String {
    mib(value * 1024)
}

/// CPU used by the server and by this process over a phase.
pub(crate) struct CpuMeter {
    pid: String,
    server: Option<u64>,
    bench: Option<u64>,
    began: Instant,
}

impl CpuMeter {
    pub(crate) fn start(pid: &str) -> CpuMeter {
        CpuMeter {
            pid: pid.to_owned(),
            server: cpu_ticks(pid),
            bench: cpu_ticks("self"),
            began: Instant::now(),
        }
    }

    /// Server and bench CPU as a percentage of one CPU over the phase.
    pub(crate) fn finish(&self) -> (String, String) {
        let wall = self.began.elapsed().as_secs_f64().max(1e-9);
        let share = |before: Option<u64>, now: Option<u64>| match (before, now) {
            (Some(a), Some(b)) => {
                format!("{:.0}%", ticks_to_secs(b.saturating_sub(a)) / wall * 100.0)
            }
            _ => "n/a".to_owned(),
        };
        (
            share(self.server, cpu_ticks(&self.pid)),
            share(self.bench, cpu_ticks("self")),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

/// The kinds the create, get and list scenarios use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    ConfigMap,
    Pod,
}

const KINDS: [Kind; 2] = [Kind::ConfigMap, Kind::Pod];

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Pod => "pods",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Kind::ConfigMap => "cm",
            Kind::Pod => "pod",
        }
    }

    pub(crate) fn collection(self, namespace: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/{}", self.plural())
    }

    /// The namespace the populated objects of this kind live in.
    pub(crate) fn populated_namespace(self) -> &'static str {
        match self {
            Kind::ConfigMap => "list-configmaps",
            Kind::Pod => "list-pods",
        }
    }

    /// The JSON body creating object `name`.
    fn body(self, name: &str) -> Bytes {
        let object = match self {
            Kind::ConfigMap => configmap(name, "0"),
            Kind::Pod => json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": {"app": "web", "tier": "frontend", "bench": "capstan"},
                },
                "spec": {
                    "containers": [{
                        "name": "web",
                        "image": "registry.k8s.io/nginx-slim:0.27",
                        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "500m", "memory": "128Mi"},
                        },
                    }],
                },
            }),
        };
        Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
    }
}

/// A ConfigMap of about 400 bytes of data, `seq` among it.
fn configmap(name: &str, seq: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "bench": "capstan"},
        },
        "data": {
            "seq": seq,
            "app.properties": "server.port=8080\nserver.threads=16\nlog.level=info\n\
                cache.size=256MiB\ncache.ttl=300s\nfeature.alpha=false\nfeature.beta=true\n\
                upstream.url=http://backend.default.svc.cluster.local:8080/api\n\
                retry.max=5\nretry.backoff=250ms\n",
            "nginx.conf": "worker_processes 2;\nevents { worker_connections 1024; }\n\
                http { server { listen 80; location / { proxy_pass http://backend; } } }\n",
        },
    })
}

/// Creates namespace `name`.
pub(crate) async fn create_namespace(conn: &Conn, name: &str) -> Result<()> {
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    conn.call(
        Method::POST,
        "/api/v1/namespaces",
        Some(Bytes::from(serde_json::to_vec(&body)?)),
        StatusCode::CREATED,
    )
    .await?;
    Ok(())
}

/// The name of populated object `i`.
pub(crate) fn populated_name(kind: Kind, i: usize) -> String {
    format!("{}-{i:06}", kind.short())
}

// ---------------------------------------------------------------------------------------------
// Per-backend runs
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct BackendReport {
    name: &'static str,
    startup: Vec<Row>,
    memory: Vec<Row>,
    lists: Vec<Row>,
    gets: Vec<Row>,
    creates: Vec<Row>,
    watch: Vec<Row>,
    notes: Vec<String>,
}

/// A datastore for one server: nothing (SQLite under the data dir) or a fresh etcd.
pub(crate) struct Datastore {
    etcd: Option<EtcdServer>,
}

impl Datastore {
    pub(crate) async fn new(backend: ApiBackend, dir: &Path) -> Result<Datastore> {
        let etcd = match backend {
            ApiBackend::Sqlite => None,
            ApiBackend::Etcd => {
                let parent = dir.to_path_buf();
                Some(
                    tokio::task::spawn_blocking(move || EtcdServer::start_in(&parent))
                        .await
                        .context("starting etcd")?
                        .context("starting etcd")?,
                )
            }
        };
        Ok(Datastore { etcd })
    }

    /// etcd's data dir, when the datastore is an etcd.
    pub(crate) fn etcd_data_dir(&self) -> Option<&Path> {
        self.etcd.as_ref().map(EtcdServer::data_dir)
    }

    pub(crate) fn endpoint(&self) -> Option<String> {
        self.etcd.as_ref().map(EtcdServer::endpoint)
    }

    fn memory(&self) -> Option<Memory> {
        let pid = self.etcd.as_ref()?.pid()?;
        Some(Memory::of(&pid.to_string()))
    }
}

async fn run_backend(backend: ApiBackend, s: &Settings, dir: &Path) -> BackendReport {
    let name = backend.name();
    let mut report = BackendReport {
        name,
        ..BackendReport::default()
    };
    let began = Instant::now();
    if s.runs(ApiScenario::Startup) {
        report.startup = guarded(
            name,
            "startup",
            s.timeout(ApiScenario::Startup),
            scenario_startup(backend, s, dir),
        )
        .await;
    }
    // Every scenario but the start-up runs on this server; the start-up scenario restarts it
    // with the data the others wrote.
    if let Err(error) = main_server(backend, s, dir, &mut report).await {
        eprintln!("[{name}] failed: {error:#}");
        report.memory.push(vec![error_cell(&error)]);
    }
    eprintln!("[{name}] done in {:.1} s", began.elapsed().as_secs_f64());
    report
}

/// Start-up times: fresh data dir (and etcd), then a restart on it, `startup_runs` times; rows
/// of start, runs, min, median, max and the highest peak RSS.
async fn scenario_startup(backend: ApiBackend, s: &Settings, dir: &Path) -> Result<Vec<Row>> {
    let mut first = (Vec::new(), 0);
    let mut restart = (Vec::new(), 0);
    for run in 0..s.startup_runs {
        let datastore = Datastore::new(backend, dir).await?;
        let data_dir = dir.join(format!("{}-startup-{run}", backend.name()));
        let log = dir.join(format!("{}-startup-{run}.log", backend.name()));
        let endpoint = datastore.endpoint();
        for (times, peak) in [&mut first, &mut restart] {
            let (server, took) =
                ServerProcess::start(s, &data_dir, endpoint.as_deref(), &log).await?;
            *peak = server.memory().hwm.max(*peak);
            times.push(took);
            server.stop().await?;
        }
        let _ = fs::remove_dir_all(&data_dir);
    }
    Ok(vec![
        startup_row("first (new CA, certificates, database)", first),
        startup_row("restart (empty datastore)", restart),
    ])
}

fn startup_row(label: &str, (mut times, peak): (Vec<Duration>, u64)) -> Row {
    times.sort();
    let at = |i: usize| {
        times
            .get(i)
            .map_or_else(String::new, |d| format!("{:.0}", d.as_secs_f64() * 1000.0))
    };
    vec![
        label.to_owned(),
        times.len().to_string(),
        at(0),
        at(times.len() / 2),
        at(times.len().saturating_sub(1)),
        kib(peak),
    ]
}

/// The server every other scenario runs against, from its start to its restart with data.
async fn main_server(
    backend: ApiBackend,
    s: &Settings,
    dir: &Path,
    report: &mut BackendReport,
) -> Result<()> {
    let name = backend.name();
    eprintln!("[{name}] starting the server");
    let datastore = Datastore::new(backend, dir).await?;
    let data_dir = dir.join(format!("{name}-main"));
    let log = dir.join(format!("{name}-main.log"));
    let endpoint = datastore.endpoint();
    // The API server, without the scheduler: with no node, it would answer every Pod created
    // with a status patch and an event (upstream's FailedScheduling), tripling the writes a Pod
    // create measures. The start-up scenario runs the whole server.
    let (server, _) = ServerProcess::start_with(
        &s.server,
        &data_dir,
        endpoint.as_deref(),
        &["--disable-scheduler"],
        &log,
    )
    .await?;
    report.notes.push(match &datastore.etcd {
        Some(etcd) => format!(
            "`{name}`: data dir on {}, etcd data dir on {}",
            filesystem_of(&data_dir),
            filesystem_of(etcd.data_dir())
        ),
        None => format!(
            "`{name}`: data dir (and SQLite file) on {}",
            filesystem_of(&data_dir)
        ),
    });
    let admin = server.connect().await?;
    let mut objects = 0usize;
    let memory_row =
        |point: &str, objects: usize, datastore: &Datastore, server: &ServerProcess| {
            let memory = server.memory();
            let etcd = datastore
                .memory()
                .map_or_else(|| "-".to_owned(), |m| kib(m.rss));
            vec![
                point.to_owned(),
                objects.to_string(),
                kib(memory.rss),
                kib(memory.anon),
                kib(memory.file),
                kib(memory.hwm),
                etcd,
            ]
        };

    if s.runs(ApiScenario::Memory) {
        tokio::time::sleep(s.settle).await;
        report
            .memory
            .push(memory_row("idle after start", objects, &datastore, &server));
    }

    let mut populate_rates = Vec::new();
    if s.populates() {
        for kind in KINDS {
            eprintln!("[{name}] populating {} {}", s.objects, kind.plural());
            let namespace = kind.populated_namespace();
            create_namespace(&admin, namespace).await?;
            let rate = guarded(
                name,
                "populate",
                s.timeout(ApiScenario::Memory),
                populate(&server, s, kind),
            )
            .await;
            objects += s.objects;
            populate_rates.push(rate);
        }
        if s.runs(ApiScenario::Memory) {
            tokio::time::sleep(s.settle).await;
            report.memory.push(memory_row(
                &format!(
                    "after creating {} ConfigMaps and {} Pods",
                    s.objects, s.objects
                ),
                objects,
                &datastore,
                &server,
            ));
        }
    }

    if s.runs(ApiScenario::Lists) {
        let mut rows = Vec::new();
        for (kind, populated) in KINDS.into_iter().zip(&populate_rates) {
            let mut kind_rows = guarded(
                name,
                &format!("lists of {}", kind.plural()),
                s.timeout(ApiScenario::Lists),
                scenario_list(&server, &admin, s, kind),
            )
            .await;
            // A failed scenario's row is shorter (its error); it gets no rate column.
            for row in kind_rows.iter_mut().filter(|row| row.len() >= 2) {
                let rate = populated
                    .first()
                    .and_then(|r| r.first())
                    .cloned()
                    .unwrap_or_default();
                row.insert(2, rate);
            }
            rows.extend(kind_rows);
        }
        report.lists = rows;
    }

    if s.runs(ApiScenario::Gets) {
        report.gets = guarded(
            name,
            "gets",
            s.timeout(ApiScenario::Gets),
            scenario_gets(&server, s),
        )
        .await;
    }

    if s.runs(ApiScenario::Creates) {
        let (rows, created) = match tokio::time::timeout(
            s.timeout(ApiScenario::Creates),
            scenario_creates(&server, &admin, s, name),
        )
        .await
        {
            Ok(Ok(done)) => done,
            Ok(Err(error)) => (vec![vec![error_cell(&error)]], 0),
            Err(_) => (vec![vec!["**error**: timed out".to_owned()]], 0),
        };
        report.creates = rows;
        objects += created;
    }

    if s.runs(ApiScenario::Watch) {
        report.watch = guarded(
            name,
            "watch",
            s.timeout(ApiScenario::Watch),
            scenario_watch(&server, &admin, s, name),
        )
        .await;
        objects += 1;
    }

    if s.runs(ApiScenario::Memory) && s.runs(ApiScenario::Creates) {
        tokio::time::sleep(s.settle).await;
        report.memory.push(memory_row(
            "end of the run (after the creates)",
            objects,
            &datastore,
            &server,
        ));
    }

    drop(admin);
    server.stop().await?;
    if s.runs(ApiScenario::Startup) {
        let (server, took) = ServerProcess::start(s, &data_dir, endpoint.as_deref(), &log).await?;
        report.startup.push(startup_row(
            &format!("restart with {objects} objects"),
            (vec![took], server.memory().hwm),
        ));
        if s.runs(ApiScenario::Memory) {
            tokio::time::sleep(s.settle).await;
            report.memory.push(memory_row(
                "idle after that restart",
                objects,
                &datastore,
                &server,
            ));
        }
        server.stop().await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Closed-loop rounds
// ---------------------------------------------------------------------------------------------

/// Runs `op` in a loop on each connection until `duration` has passed; `op` gets the client's
/// index and its request counter.
pub(crate) async fn closed_loop<F, Fut>(
    conns: Vec<Conn>,
    duration: Duration,
    op: F,
) -> Result<Phase>
where
    F: Fn(Conn, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let start = Instant::now();
    let deadline = start + duration;
    let mut set = JoinSet::new();
    for (client, conn) in conns.into_iter().enumerate() {
        let op = op.clone();
        set.spawn(async move {
            let mut out = WorkerOut::new()?;
            let mut i = 0u64;
            while Instant::now() < deadline {
                let began = Instant::now();
                match op(conn.clone(), client, i).await {
                    Ok(()) => out.success(began.elapsed()),
                    Err(error) => {
                        if out.failure(error) {
                            break;
                        }
                    }
                }
                i += 1;
            }
            anyhow::Ok(out)
        });
    }
    let outs = join_all(set)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Phase::merge(&outs, start.elapsed())
}

/// Table cells for a closed-loop round: ops/s, p50, p99, max, server CPU, bench CPU, errors.
pub(crate) fn round_cells(phase: &Phase, cpu: (String, String)) -> Vec<String> {
    let mut cells = phase.cells();
    cells.push(if phase.ok == 0 {
        "-".to_owned()
    } else {
        ms(phase.hist.max())
    });
    cells.extend([cpu.0, cpu.1, phase.errors_cell()]);
    cells
}

/// Creates the populated namespace's objects with `populate_clients` clients; one row with the
/// rate.
async fn populate(server: &ServerProcess, s: &Settings, kind: Kind) -> Result<Vec<Row>> {
    populate_namespace(server, kind, s.objects, s.populate_clients).await
}

/// Creates `total` objects of `kind` (named by [`populated_name`]) in its populated namespace,
/// which must exist, with `clients` clients; one row with the rate.
pub(crate) async fn populate_namespace(
    server: &ServerProcess,
    kind: Kind,
    total: usize,
    clients: usize,
) -> Result<Vec<Row>> {
    let clients = clients.min(total).max(1);
    let conns = server.connect_many(clients).await?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    let path: Arc<str> = kind.collection(kind.populated_namespace()).into();
    for (client, conn) in conns.into_iter().enumerate() {
        let path = path.clone();
        set.spawn(async move {
            for i in (client..total).step_by(clients) {
                let body = kind.body(&populated_name(kind, i));
                conn.call(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .with_context(|| format!("populating {path}"))?;
            }
            anyhow::Ok(())
        });
    }
    for worker in join_all(set).await? {
        worker?;
    }
    Ok(vec![vec![rate(total as u64, start.elapsed())]])
}

async fn scenario_gets(server: &ServerProcess, s: &Settings) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for kind in KINDS {
        for &clients in &s.concurrency {
            let conns = server.connect_many(clients).await?;
            let objects = s.objects;
            let base: Arc<str> = kind.collection(kind.populated_namespace()).into();
            let cpu = CpuMeter::start(&server.pid);
            let phase = closed_loop(conns, s.duration, move |conn, client, i| {
                let base = base.clone();
                async move {
                    // Each client walks the objects with a stride of its own.
                    let stride = 7919 * (client + 1);
                    let index = (client * 104_729 + i as usize * stride) % objects;
                    let path = format!("{base}/{}", populated_name(kind, index));
                    conn.call(Method::GET, &path, None, StatusCode::OK).await?;
                    Ok(())
                }
            })
            .await?;
            let cpu = cpu.finish();
            eprintln!(
                "[gets] {} x{clients}: {} ops/s",
                kind.plural(),
                rate(phase.ok, phase.elapsed)
            );
            let mut row = vec![kind.plural().to_owned(), clients.to_string()];
            row.extend(round_cells(&phase, cpu));
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Creates for `duration` at each concurrency, in a namespace per round; returns the rows and
/// how many objects were created.
async fn scenario_creates(
    server: &ServerProcess,
    admin: &Conn,
    s: &Settings,
    name: &str,
) -> Result<(Vec<Row>, usize)> {
    let mut rows = Vec::new();
    let mut created = 0;
    for kind in KINDS {
        for &clients in &s.concurrency {
            eprintln!("[{name}] creates: {} with {clients} clients", kind.plural());
            let namespace = format!("create-{}-c{clients}", kind.short());
            let round = async {
                create_namespace(admin, &namespace).await?;
                let conns = server.connect_many(clients).await?;
                let path: Arc<str> = kind.collection(&namespace).into();
                let cpu = CpuMeter::start(&server.pid);
                let phase = closed_loop(conns, s.duration, move |conn, client, i| {
                    let path = path.clone();
                    async move {
                        let body = kind.body(&format!("{}-c{client:02}-{i:09}", kind.short()));
                        conn.call(Method::POST, &path, Some(body), StatusCode::CREATED)
                            .await?;
                        Ok(())
                    }
                })
                .await?;
                anyhow::Ok((phase, cpu.finish()))
            };
            let mut row = vec![kind.plural().to_owned(), clients.to_string()];
            match round.await {
                Ok((phase, cpu)) => {
                    eprintln!("[{name}]   {} creates/s", rate(phase.ok, phase.elapsed));
                    created += usize::try_from(phase.ok).unwrap_or(0);
                    row.extend(round_cells(&phase, cpu));
                }
                Err(error) => row.push(error_cell(&error)),
            }
            rows.push(row);
        }
    }
    Ok((rows, created))
}

// ---------------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------------

async fn scenario_list(
    server: &ServerProcess,
    conn: &Conn,
    s: &Settings,
    kind: Kind,
) -> Result<Vec<Row>> {
    let base = kind.collection(kind.populated_namespace());
    let mut pages = histogram()?;
    let mut walks = histogram()?;
    let mut bytes = 0usize;
    let mut page_count = 0usize;
    let cpu = CpuMeter::start(&server.pid);
    for _ in 0..s.list_walks {
        let mut total = 0;
        let mut walk = Duration::ZERO;
        let mut next: Option<String> = None;
        let mut count = 0;
        loop {
            let path = match &next {
                None => format!("{base}?limit={}", s.page_size),
                Some(token) => format!(
                    "{base}?limit={}&continue={}",
                    s.page_size,
                    form_encode(token)
                ),
            };
            let began = Instant::now();
            let body = conn.call(Method::GET, &path, None, StatusCode::OK).await?;
            let took = began.elapsed();
            pages.saturating_record(nanos(took));
            walk += took;
            bytes += body.len();
            count += 1;
            let list: Value = serde_json::from_slice(&body).context("parsing a list page")?;
            // Every namespace also holds the cluster's CA bundle (`kube-root-ca.crt`), which
            // the benchmark did not create.
            total += list["items"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| i["metadata"]["name"] != "kube-root-ca.crt")
                    .count()
            });
            next = list["metadata"]["continue"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if next.is_none() {
                break;
            }
            ensure!(
                count <= s.objects / s.page_size + 1,
                "the list of {base} does not end after {count} pages"
            );
        }
        ensure!(
            total == s.objects,
            "listing {base} returned {total} objects in {count} pages, expected {}",
            s.objects
        );
        walks.saturating_record(nanos(walk));
        page_count = count;
    }
    let (server_cpu, bench_cpu) = cpu.finish();
    let requests = s.list_walks * page_count;
    Ok(vec![vec![
        kind.plural().to_owned(),
        s.objects.to_string(),
        page_count.to_string(),
        ms(pages.value_at_quantile(0.5)),
        ms(pages.value_at_quantile(0.99)),
        ms(pages.max()),
        ms(walks.value_at_quantile(0.5)),
        format!("{:.0}", bytes as f64 / requests.max(1) as f64 / 1024.0),
        server_cpu,
        bench_cpu,
    ]])
}

/// Percent-encodes a query value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Watch fan-out
// ---------------------------------------------------------------------------------------------

/// What one watcher received: (sequence number, nanoseconds since the base instant).
struct Received {
    got: Vec<(u64, u64)>,
    error: Option<String>,
}

async fn scenario_watch(
    server: &ServerProcess,
    admin: &Conn,
    s: &Settings,
    name: &str,
) -> Result<Vec<Row>> {
    let namespace = "watch";
    create_namespace(admin, namespace).await?;
    let collection = Kind::ConfigMap.collection(namespace);
    let object = format!("{collection}/watched");
    let body = configmap("watched", &format!("{:010}", u64::MAX / 2));
    let created = admin
        .call(
            Method::POST,
            &collection,
            Some(Bytes::from(serde_json::to_vec(&body)?)),
            StatusCode::CREATED,
        )
        .await?;
    let created: Value = serde_json::from_slice(&created)?;
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("the created ConfigMap has no resourceVersion"))?
        .to_owned();

    let connections = s.watchers.div_ceil(s.watchers_per_connection);
    eprintln!(
        "[{name}] watch: {} watchers on {connections} connections",
        s.watchers
    );
    let conns = server.connect_many(connections).await?;
    let setup = Instant::now();
    let path: Arc<str> = format!("{collection}?watch=1&resourceVersion={rv}").into();
    let responses: Vec<Result<Response<Incoming>>> = {
        use futures::StreamExt;
        futures::stream::iter(0..s.watchers)
            .map(|w| {
                let conn = conns[w % connections].clone();
                let path = path.clone();
                async move {
                    let response = conn.send(Method::GET, &path, None).await?;
                    ensure!(
                        response.status() == StatusCode::OK,
                        "watch answered {}",
                        response.status()
                    );
                    Ok(response)
                }
            })
            .buffer_unordered(256)
            .collect()
            .await
    };
    let responses = responses
        .into_iter()
        .collect::<Result<Vec<_>>>()
        .context("starting watchers")?;
    let setup = setup.elapsed();

    let base = Instant::now();
    let events = s.watch_events;
    let last = events as u64 - 1;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut set = JoinSet::new();
    for response in responses {
        let mut stop = stop_rx.clone();
        set.spawn(async move {
            let mut body = response.into_body();
            let mut buffer = Vec::new();
            let mut received = Received {
                got: Vec::with_capacity(events),
                error: None,
            };
            'receive: loop {
                tokio::select! {
                    biased;
                    frame = body.frame() => match frame {
                        Some(Ok(frame)) => {
                            let Ok(data) = frame.into_data() else { continue };
                            let at = nanos(base.elapsed());
                            buffer.extend_from_slice(&data);
                            while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                                let line: Vec<u8> = buffer.drain(..=end).collect();
                                if contains(&line, b"\"type\":\"ERROR\"") {
                                    received.error = Some(String::from_utf8_lossy(&line).into_owned());
                                    break 'receive;
                                }
                                if let Some(seq) = watched_seq(&line) {
                                    received.got.push((seq, at));
                                    if seq >= last {
                                        break 'receive;
                                    }
                                }
                            }
                        }
                        Some(Err(error)) => {
                            received.error = Some(error.to_string());
                            break;
                        }
                        None => {
                            received.error = Some("watch ended".to_owned());
                            break;
                        }
                    },
                    _ = stop.changed() => break,
                }
            }
            received
        });
    }

    // Let every watch reach the server's event loop before writing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writer = server.connect().await?;
    let mut sent = vec![0u64; events];
    let mut writes = histogram()?;
    let mut tick = tokio::time::interval(s.watch_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let cpu = CpuMeter::start(&server.pid);
    for (seq, sent_at) in sent.iter_mut().enumerate() {
        tick.tick().await;
        let body = Bytes::from(serde_json::to_vec(&configmap(
            "watched",
            &format!("{seq:010}"),
        ))?);
        *sent_at = nanos(base.elapsed());
        let began = Instant::now();
        writer
            .call(Method::PUT, &object, Some(body), StatusCode::OK)
            .await
            .with_context(|| format!("watch writer: update {seq}"))?;
        writes.saturating_record(nanos(began.elapsed()));
    }

    let grace = if s.quick { 5 } else { 30 };
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(grace)).await;
        let _ = stop_tx.send(true);
    });
    let results = join_all(set).await;
    let (server_cpu, _) = cpu.finish();
    stopper.abort();
    let results = results?;

    let mut latency = histogram()?;
    let (mut delivered, mut duplicates, mut out_of_order, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut complete = 0usize;
    let mut first_error = None;
    for received in results {
        let mut seen = vec![false; events];
        let mut previous = None;
        for (seq, at) in received.got {
            let Some(index) = usize::try_from(seq).ok().filter(|&i| i < events) else {
                continue;
            };
            if seen[index] {
                duplicates += 1;
                continue;
            }
            seen[index] = true;
            if previous.is_some_and(|p| seq < p) {
                out_of_order += 1;
            }
            previous = Some(seq);
            delivered += 1;
            latency.saturating_record(at.saturating_sub(sent[index]).max(1));
        }
        if seen.iter().all(|&s| s) {
            complete += 1;
        }
        if let Some(error) = received.error {
            failed += 1;
            first_error.get_or_insert(error);
        }
    }
    let expected = (s.watchers * events) as u64;
    eprintln!(
        "[{name}]   {delivered}/{expected} delivered, p99 {} ms",
        ms(latency.value_at_quantile(0.99))
    );
    let quantile = |q: f64| {
        if delivered == 0 {
            "-".to_owned()
        } else {
            ms(latency.value_at_quantile(q))
        }
    };
    Ok(vec![vec![
        s.watchers.to_string(),
        connections.to_string(),
        events.to_string(),
        format!("{}", s.watch_interval.as_millis()),
        format!("{:.2}", setup.as_secs_f64()),
        format!("{delivered} / {expected}"),
        format!("{complete} / {}", s.watchers),
        quantile(0.5),
        quantile(0.99),
        if delivered == 0 {
            "-".to_owned()
        } else {
            ms(latency.max())
        },
        format!("{duplicates} / {out_of_order}"),
        ms(writes.value_at_quantile(0.5)),
        server_cpu,
        errors_cell(failed, first_error.as_deref()),
    ]])
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `seq` of the watched ConfigMap in one watch event line.
fn watched_seq(line: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"seq\":\"";
    let start = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = line.get(start..start + 10)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

pub(crate) fn git_commit() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
    };
    match run(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit} (with uncommitted changes)")
            } else {
                commit
            }
        }
        None => "unknown (not run in a git checkout)".to_owned(),
    }
}

fn header(s: &Settings, dir: &Path) -> String {
    let mut out = String::new();
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(out, "## API server benchmark (`capstan-bench api`)\n");
    let _ = writeln!(out, "- date: {}", utc_now());
    let _ = writeln!(out, "- command: `{}`", command_line());
    let _ = writeln!(out, "- commit: {}", git_commit());
    let _ = writeln!(
        out,
        "- server: `{}` (release build expected)",
        s.server.display()
    );
    let _ = writeln!(out, "- machine: {}", machine());
    let _ = writeln!(
        out,
        "- load average at the start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        out,
        "- data dirs in `{}` ({}); {} started by `capstan_testkit::EtcdServer` for the etcd backend",
        dir.display(),
        filesystem_of(dir),
        etcd_version()
    );
    let _ = writeln!(
        out,
        "- {}",
        if s.quick {
            "**--quick**: scaled down, numbers are a smoke test only"
        } else {
            "full run"
        }
    );
    let _ = writeln!(
        out,
        "- the driver, the server (and etcd) share the machine's CPUs\n"
    );
    out
}

fn tables(s: &Settings, reports: &[BackendReport]) -> String {
    let mut out = String::new();
    let pick = |f: fn(&BackendReport) -> &Vec<Row>| {
        reports
            .iter()
            .map(|r| (r.name, f(r)))
            .collect::<Vec<(&str, &Vec<Row>)>>()
    };
    if s.runs(ApiScenario::Startup) {
        let _ = writeln!(
            out,
            "### Start-up\n\nFrom spawning `capstan server` to the first `ok` from `/readyz` \
             (polled every {} ms over HTTPS), in ms. Each run starts on a fresh data dir (and, on \
             etcd, a fresh etcd), is stopped with SIGTERM and restarted on the same data dir. The \
             last row restarts the server of the other scenarios on everything they wrote.\n",
            READY_POLL.as_millis()
        );
        table(
            &mut out,
            &[
                "backend",
                "start",
                "runs",
                "min",
                "median",
                "max",
                "peak RSS at ready",
            ],
            &pick(|r| &r.startup),
        );
    }
    if s.runs(ApiScenario::Memory) {
        let _ = writeln!(
            out,
            "### Memory\n\nThe server's `/proc/<pid>/status` after {:.1} s idle at each point: \
             `VmRSS` = `RssAnon` (heap) + `RssFile` (mapped files: the binary and SQLite's \
             memory-mapped reads) + shared; `VmHWM` is the peak RSS since the start. Objects: \
             those the run created (the populated namespaces, then the creates).\n",
            s.settle.as_secs_f64()
        );
        table(
            &mut out,
            &[
                "backend",
                "point",
                "objects",
                "VmRSS",
                "RssAnon",
                "RssFile",
                "VmHWM",
                "etcd VmRSS",
            ],
            &pick(|r| &r.memory),
        );
    }
    let round_headers = |what: &'static str| {
        vec![
            "backend",
            "kind",
            "clients",
            what,
            "p50 ms",
            "p99 ms",
            "max ms",
            "server CPU",
            "bench CPU",
            "errors",
        ]
    };
    if s.runs(ApiScenario::Creates) {
        let _ = writeln!(
            out,
            "### Creates\n\nEach client is its own HTTP/2 connection with one request in flight, \
             creating objects (`POST`, JSON) for {:.1} s; a namespace per round. ConfigMaps carry \
             about 400 bytes of data; Pods have one container with an image, a port and resource \
             requests and limits. The server runs without its scheduler (no node would take the \
             Pods; it would patch each one's status and record an event).\n",
            s.duration.as_secs_f64()
        );
        table(&mut out, &round_headers("creates/s"), &pick(|r| &r.creates));
    }
    if s.runs(ApiScenario::Gets) {
        let _ = writeln!(
            out,
            "### Gets\n\nEach client is its own HTTP/2 connection with one request in flight, \
             getting objects of a namespace holding {} of them, for {:.1} s.\n",
            s.objects,
            s.duration.as_secs_f64()
        );
        table(&mut out, &round_headers("gets/s"), &pick(|r| &r.gets));
    }
    if s.runs(ApiScenario::Lists) {
        let _ = writeln!(
            out,
            "### Lists\n\nOne client lists a namespace holding N objects with `limit={}`, \
             following `continue`, {} times. Page latency: request sent to body fully received \
             (parsing excluded); a walk is the sum of its pages. The populate rate: creates/s \
             with {} clients while filling the namespace.\n",
            s.page_size, s.list_walks, s.populate_clients
        );
        table(
            &mut out,
            &[
                "backend",
                "kind",
                "objects",
                "populate creates/s",
                "pages",
                "page p50 ms",
                "page p99 ms",
                "page max ms",
                "walk p50 ms",
                "KiB/page",
                "server CPU",
                "bench CPU",
            ],
            &pick(|r| &r.lists),
        );
    }
    if s.runs(ApiScenario::Watch) {
        let _ = writeln!(
            out,
            "### Watch fan-out\n\nWatchers (`?watch=1&resourceVersion=<rv>`) on one namespace's \
             ConfigMaps, {} streams per HTTP/2 connection; one writer (its own connection) \
             updates a ConfigMap (`PUT`) every interval. Latency: from just before the write is \
             sent to a watcher receiving the event, over every delivery (ms). Complete: watchers \
             that got every event; dup / ooo: duplicate and out-of-order deliveries. Server CPU \
             over the writes and deliveries.\n",
            s.watchers_per_connection
        );
        table(
            &mut out,
            &[
                "backend",
                "watchers",
                "connections",
                "events",
                "interval ms",
                "setup s",
                "delivered",
                "complete",
                "p50",
                "p99",
                "max",
                "dup / ooo",
                "write p50",
                "server CPU",
                "watcher errors",
            ],
            &pick(|r| &r.watch),
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_give_their_sequence_number() {
        let line = br#"{"object":{"data":{"app.properties":"x","seq":"0000000042"},"kind":"ConfigMap"},"type":"MODIFIED"}"#;
        assert_eq!(watched_seq(line), Some(42));
        assert_eq!(watched_seq(br#"{"type":"BOOKMARK"}"#), None);
    }

    #[test]
    fn continue_tokens_are_percent_encoded() {
        assert_eq!(form_encode("ab+/=c"), "ab%2B%2F%3Dc");
    }
}
