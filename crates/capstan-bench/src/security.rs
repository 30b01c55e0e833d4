//! `capstan-bench security`: what authentication and encryption at rest cost (issue 25).
//!
//! Two scenarios, each side by side in one run:
//! 1. `auth`: one `capstan server` (SQLite), a namespace of N ConfigMaps, and closed-loop GETs
//!    of them with the same number of clients under three identities, their rounds alternated
//!    (`--repeats` times) so that drift hits them alike:
//!    - `cert admin`: the admin client certificate (`system:masters`, which RBAC lets through
//!      without looking at any binding);
//!    - `cert reader`: a client certificate the driver signs with the cluster CA for user
//!      `bench-reader`, bound by a ClusterRoleBinding to a ClusterRole that may read ConfigMaps;
//!    - `token reader`: no client certificate, `Authorization: Bearer <token>` of ServiceAccount
//!      `bench-auth/bench-reader` (bound to the same ClusterRole), the token from the TokenRequest
//!      API. The server remembers a token that authenticated for 10 s (upstream's success cache),
//!      which is what a client sending the same token again and again meets.
//!
//!    Each round runs over each of `--auth-protocols`: HTTP/2 from hyper's h2 (which sends a
//!    token as an HPACK literal on every request), HTTP/1.1, and `go-h2`, HTTP/2 from Go's
//!    net/http (client-go's transport, which indexes the token; see the `goload` module).
//!
//!    `cert reader` against `token reader` isolates authentication: both go through the same
//!    RBAC rules. Before measuring, each identity is checked: it may get a ConfigMap, and the
//!    two readers may not list Secrets (so neither is taken for an admin).
//! 2. `writes`: Secret creates (about 400 bytes of data) at each `--secret-clients` count, on a
//!    plain server and on one server per `--variant` (by default `encrypted`:
//!    `--secrets-encryption`, an `aescbc` key for Secrets), all of the same backend and running
//!    at once, their rounds alternated. Each server has a datastore of its own (its own SQLite
//!    file; a fresh etcd each for `etcd`). At the end the datastore's files are searched for
//!    upstream's sealed-value prefix `k8s:enc:`, which must be found on the encrypted server
//!    only. A variant is any set of extra server flags, so another write-path cost (an audit
//!    log, say) is measured the same way: `--variant 'audit=--audit-log-path /var/tmp/a.log'`.
//!
//! CPU columns are the share of one CPU used during the round (user + system), for the server
//! measured and for this driver, which runs on the same machine.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use base64::Engine as _;
use bytes::Bytes;
use clap::Args;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{
    ApiBackend, Conn, CpuMeter, Datastore, Kind, Protocol, ServerProcess, closed_loop,
    create_namespace, git_commit, populate_namespace, populated_name, round_cells, tls_config,
};
use crate::goload::{GoIdentity, GoLoad};
use crate::{
    Row, command_line, error_cell, filesystem_of, machine, parse_duration, table, utc_now,
};

/// Flags of `capstan-bench security`.
#[derive(Args, Debug)]
pub struct SecurityArgs {
    /// Scenarios to run.
    #[arg(long, value_delimiter = ',', default_value = "auth,writes")]
    scenarios: Vec<SecurityScenario>,
    /// Backends of the writes scenario, in order (the auth scenario runs on SQLite).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd")]
    backends: Vec<ApiBackend>,
    /// Scale everything down for a smoke run (well under a minute).
    #[arg(long)]
    quick: bool,
    /// The `capstan` binary to benchmark; default: `capstan` next to this binary.
    #[arg(long)]
    server: Option<PathBuf>,
    /// Directory for the servers' data dirs and etcd's (a temporary directory is made inside it).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// How long each round runs ("10", "10s", "500ms"); default 10 s, 300 ms with --quick.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Times each round is run, alternating the identities (auth) or servers (writes); default
    /// 2 (1 with --quick).
    #[arg(long)]
    repeats: Option<usize>,
    /// Client counts of the auth scenario's GETs.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    auth_clients: Vec<usize>,
    /// HTTP versions of the auth scenario's connections, each round of identities run over
    /// each in turn; `go-h2` is HTTP/2 from Go's net/http (client-go's transport), which needs
    /// a Go toolchain.
    #[arg(long, value_delimiter = ',', default_value = "h2,http1")]
    auth_protocols: Vec<Protocol>,
    /// The `go` command that builds the Go driver of `go-h2` (default: `go` on PATH, else
    /// Debian's `/usr/lib/go-*/bin/go`).
    #[arg(long)]
    go: Option<PathBuf>,
    /// ConfigMaps the auth scenario gets; default 10000 (1000 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// Client counts of the writes scenario's Secret creates.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    secret_clients: Vec<usize>,
    /// A server compared with the plain one in the writes scenario: `NAME=FLAGS`, the flags
    /// split at whitespace and added to the plain server's. Repeatable.
    #[arg(
        long = "variant",
        value_parser = parse_variant,
        default_value = "encrypted=--secrets-encryption"
    )]
    variants: Vec<Variant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SecurityScenario {
    Auth,
    Writes,
}

/// A server of the writes scenario: its name and the flags it adds to the plain server's.
#[derive(Clone, Debug)]
struct Variant {
    name: String,
    flags: Vec<String>,
}

fn parse_variant(text: &str) -> Result<Variant, String> {
    let (name, flags) = text
        .split_once('=')
        .ok_or_else(|| format!("not NAME=FLAGS: {text:?}"))?;
    let name = name.trim();
    if name.is_empty() || name == "plain" {
        return Err(format!(
            "a variant needs a name other than `plain`: {text:?}"
        ));
    }
    Ok(Variant {
        name: name.to_owned(),
        flags: flags.split_whitespace().map(str::to_owned).collect(),
    })
}

/// Everything a run does, with `--quick` and the defaults resolved.
#[derive(Debug)]
struct Settings {
    scenarios: Vec<SecurityScenario>,
    backends: Vec<ApiBackend>,
    quick: bool,
    server: PathBuf,
    duration: Duration,
    repeats: usize,
    auth_clients: Vec<usize>,
    auth_protocols: Vec<Protocol>,
    go: Option<PathBuf>,
    objects: usize,
    secret_clients: Vec<usize>,
    variants: Vec<Variant>,
}

impl Settings {
    fn from_args(args: SecurityArgs) -> Result<Settings> {
        let quick = args.quick;
        let pick = |full, small| if quick { small } else { full };
        let server = match args.server {
            Some(path) => path,
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
        let mut variants: Vec<Variant> = Vec::new();
        for variant in args.variants {
            ensure!(
                !variants.iter().any(|v| v.name == variant.name),
                "two variants are named {}",
                variant.name
            );
            variants.push(variant);
        }
        let settings = Settings {
            scenarios: crate::dedup(&args.scenarios),
            backends: crate::dedup(&args.backends),
            quick,
            server,
            duration: args.duration.unwrap_or(if quick {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(10)
            }),
            repeats: args.repeats.unwrap_or(pick(2, 1)),
            auth_clients: args.auth_clients,
            auth_protocols: crate::dedup(&args.auth_protocols),
            go: args.go,
            objects: args.objects.unwrap_or(pick(10_000, 1_000)),
            secret_clients: args.secret_clients,
            variants,
        };
        ensure!(
            settings
                .auth_clients
                .iter()
                .chain(&settings.secret_clients)
                .all(|&c| c > 0),
            "client counts must be positive"
        );
        ensure!(
            settings.objects > 0 && settings.repeats > 0,
            "--objects and --repeats must be positive"
        );
        Ok(settings)
    }

    fn runs(&self, scenario: SecurityScenario) -> bool {
        self.scenarios.contains(&scenario)
    }

    /// How long a scenario may take before it is abandoned.
    fn timeout(&self, rounds: usize) -> Duration {
        Duration::from_secs_f64(300.0 + rounds as f64 * (self.duration.as_secs_f64() + 30.0))
    }
}

/// Runs `capstan-bench security` and prints its report.
pub async fn run(args: SecurityArgs) -> Result<()> {
    let dir = args.dir.clone();
    let s = Settings::from_args(args)?;
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-securitybench-")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a temporary directory in {}", dir.display()))?;
    let mut out = header(&s, tmp.path());
    if s.runs(SecurityScenario::Auth) {
        let rounds = 3 * s.repeats * s.auth_clients.len() * s.auth_protocols.len();
        let rows = guarded("auth", s.timeout(rounds), scenario_auth(&s, tmp.path())).await;
        auth_table(&mut out, &s, &rows);
    }
    if s.runs(SecurityScenario::Writes) {
        let mut reports = Vec::new();
        for &backend in &s.backends {
            let rounds = (1 + s.variants.len()) * s.repeats * s.secret_clients.len();
            let rows = guarded(
                backend.name(),
                s.timeout(rounds),
                scenario_writes(&s, backend, tmp.path()),
            )
            .await;
            reports.push((backend.name(), rows));
        }
        writes_table(&mut out, &s, &reports);
    }
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(
        out,
        "Load average at the end: {}\n",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    print!("{out}");
    Ok(())
}

/// Runs a scenario with a time limit; a failure becomes a row holding the error.
async fn guarded(
    label: &str,
    limit: Duration,
    run: impl Future<Output = Result<Vec<Row>>>,
) -> Vec<Row> {
    crate::guarded(label, "security", limit, run).await
}

// ---------------------------------------------------------------------------------------------
// Authentication: client certificates against service-account tokens
// ---------------------------------------------------------------------------------------------

const AUTH_NAMESPACE: &str = "bench-auth";
const READER: &str = "bench-reader";

/// The three identities of the auth scenario, in the order their rounds run.
const IDENTITIES: [&str; 3] = ["cert admin", "cert reader", "token reader"];
/// The identity the others are compared with.
const BASELINE: usize = 1;

async fn scenario_auth(s: &Settings, dir: &Path) -> Result<Vec<Row>> {
    let data_dir = dir.join("auth");
    let log = dir.join("auth.log");
    eprintln!("[auth] starting the server");
    let (server, _) =
        ServerProcess::start_with(&s.server, &data_dir, None, &["--disable-scheduler"], &log)
            .await?;
    let result = auth_rounds(s, &server, &data_dir).await;
    let stopped = server.stop().await;
    let _ = fs::remove_dir_all(&data_dir);
    let rows = result?;
    stopped?;
    Ok(rows)
}

async fn auth_rounds(s: &Settings, server: &ServerProcess, data_dir: &Path) -> Result<Vec<Row>> {
    let admin = server.connect().await?;
    let kind = Kind::ConfigMap;
    let namespace = kind.populated_namespace();
    create_namespace(&admin, namespace).await?;
    eprintln!("[auth] populating {} configmaps", s.objects);
    populate_namespace(server, kind, s.objects, 32).await?;
    let token = setup_reader(&admin).await?;

    let tls_dir = data_dir.join("tls");
    let (cert, key) = reader_certificate(&tls_dir)?;
    let reader_tls = tls_config(&tls_dir, Some((cert.as_bytes(), key.as_bytes())))?;
    let anonymous_tls = tls_config(&tls_dir, None)?;
    let admin_tls = {
        let read = |f: &str| fs::read(tls_dir.join(f)).with_context(|| format!("reading {f}"));
        tls_config(&tls_dir, Some((&read("admin.crt")?, &read("admin.key")?)))?
    };
    let identities: [(&Arc<rustls::ClientConfig>, Option<&str>); 3] = [
        (&admin_tls, None),
        (&reader_tls, None),
        (&anonymous_tls, Some(token.as_str())),
    ];

    // Each identity may read a ConfigMap; the readers may not list Secrets.
    let object = format!("{}/{}", kind.collection(namespace), populated_name(kind, 0));
    let secrets = format!("/api/v1/namespaces/{namespace}/secrets");
    for (name, (tls, bearer)) in IDENTITIES.iter().zip(&identities) {
        let conn = one(server.connect_many_as(tls, *bearer, 1).await?)?;
        conn.call(Method::GET, &object, None, StatusCode::OK)
            .await
            .with_context(|| format!("{name} getting a ConfigMap"))?;
        let expect = if *name == "cert admin" {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        conn.call(Method::GET, &secrets, None, expect)
            .await
            .with_context(|| format!("{name} listing Secrets"))?;
    }

    // The Go driver (go-h2) reads its identities and the paths it gets from files.
    let go = if s.auth_protocols.contains(&Protocol::GoH2) {
        let dir = data_dir.join("go");
        fs::create_dir_all(&dir)?;
        let write = |name: &str, text: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        let paths: String = (0..s.objects)
            .map(|i| {
                format!(
                    "{}/{}\n",
                    kind.collection(namespace),
                    populated_name(kind, i)
                )
            })
            .collect();
        let files = GoFiles {
            paths: write("paths", &paths)?,
            reader_cert: write("reader.crt", &cert)?,
            reader_key: write("reader.key", &key)?,
            token: write("token", &token)?,
        };
        Some((GoLoad::build(&dir, s.go.as_deref()).await?, files))
    } else {
        None
    };

    let mut rows = Vec::new();
    for &clients in &s.auth_clients {
        for repeat in 0..s.repeats {
            for &protocol in &s.auth_protocols {
                let mut round = Vec::new();
                for (index, (name, (tls, bearer))) in IDENTITIES.iter().zip(&identities).enumerate()
                {
                    let (phase, cpu) = match &go {
                        Some((driver, files)) if protocol == Protocol::GoH2 => {
                            let (admin_cert, admin_key) =
                                (tls_dir.join("admin.crt"), tls_dir.join("admin.key"));
                            let identity = match index {
                                0 => GoIdentity::Certificate {
                                    cert: &admin_cert,
                                    key: &admin_key,
                                },
                                1 => GoIdentity::Certificate {
                                    cert: &files.reader_cert,
                                    key: &files.reader_key,
                                },
                                _ => GoIdentity::Token(&files.token),
                            };
                            driver
                                .round(
                                    server,
                                    &tls_dir.join("ca.crt"),
                                    &identity,
                                    &files.paths,
                                    clients,
                                    s.duration,
                                )
                                .await?
                        }
                        _ => {
                            let tls = protocol.offered_by(tls);
                            let conns = server.connect_many_as(&tls, *bearer, clients).await?;
                            get_round(server, conns, s, kind).await?
                        }
                    };
                    eprintln!(
                        "[auth] {} {name} x{clients}: {} gets/s",
                        protocol.name(),
                        crate::rate(phase.ok, phase.elapsed)
                    );
                    round.push((name, phase, cpu));
                }
                let baseline = per_second(&round[BASELINE].1);
                for (name, phase, cpu) in round {
                    let mut row = vec![
                        protocol.name().to_owned(),
                        clients.to_string(),
                        (repeat + 1).to_string(),
                        (*name).to_owned(),
                    ];
                    let ratio = ratio_cell(per_second(&phase), baseline);
                    row.extend(round_cells(&phase, cpu));
                    row.push(ratio);
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}

/// The files the Go driver reads: the paths it gets and the readers' credentials.
struct GoFiles {
    paths: PathBuf,
    reader_cert: PathBuf,
    reader_key: PathBuf,
    token: PathBuf,
}

/// Closed-loop GETs of the populated ConfigMaps on `conns` for the round's duration.
async fn get_round(
    server: &ServerProcess,
    conns: Vec<Conn>,
    s: &Settings,
    kind: Kind,
) -> Result<(crate::Phase, (String, String))> {
    let objects = s.objects;
    let base: Arc<str> = kind.collection(kind.populated_namespace()).into();
    let cpu = CpuMeter::start(&server.pid);
    let phase = closed_loop(conns, s.duration, move |conn, client, i| {
        let base = base.clone();
        async move {
            // Each client walks the objects with a stride of its own (as `api`'s gets do).
            let stride = 7919 * (client + 1);
            let index = (client * 104_729 + i as usize * stride) % objects;
            let path = format!("{base}/{}", populated_name(kind, index));
            conn.call(Method::GET, &path, None, StatusCode::OK).await?;
            Ok(())
        }
    })
    .await?;
    Ok((phase, cpu.finish()))
}

/// Makes the reader's ClusterRole, ServiceAccount and binding (for the ServiceAccount and for
/// user `bench-reader`); returns a token of the ServiceAccount from the TokenRequest API.
async fn setup_reader(admin: &Conn) -> Result<String> {
    let post = |path: &'static str, body: Value| async move {
        admin
            .call(
                Method::POST,
                path,
                Some(Bytes::from(body.to_string())),
                StatusCode::CREATED,
            )
            .await
    };
    create_namespace(admin, AUTH_NAMESPACE).await?;
    post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": READER},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "verbs": ["get", "list", "watch"]}],
        }),
    )
    .await?;
    post(
        "/api/v1/namespaces/bench-auth/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": READER}}),
    )
    .await?;
    post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": READER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": READER},
            "subjects": [
                {"kind": "ServiceAccount", "name": READER, "namespace": AUTH_NAMESPACE},
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": READER},
            ],
        }),
    )
    .await?;
    // The authorizer reads bindings from a watch: wait until it grants the reader, so that the
    // first round does not meet a 403.
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": READER, "resourceAttributes": {"verb": "get", "resource": "configmaps"}},
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let response = admin
            .send(
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                Some(Bytes::from(review.to_string())),
            )
            .await?;
        let body = response.into_body().collect().await?.to_bytes();
        let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
        if answer["status"]["allowed"] == true {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{READER} was not allowed to read ConfigMaps 20 s after its binding"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let path = format!("/api/v1/namespaces/{AUTH_NAMESPACE}/serviceaccounts/{READER}/token");
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    });
    let response = admin
        .send(Method::POST, &path, Some(Bytes::from(request.to_string())))
        .await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    ensure!(
        status.is_success(),
        "POST {path}: {status}: {}",
        String::from_utf8_lossy(&body)
    );
    let answer: Value = serde_json::from_slice(&body).context("parsing the TokenRequest")?;
    answer["status"]["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("the TokenRequest answer has no status.token"))
}

/// A client certificate and key (PEM) for user `bench-reader`, signed by the cluster CA (its
/// key is `<tls_dir>/ca.key`, readable by root on the same machine).
fn reader_certificate(tls_dir: &Path) -> Result<(String, String)> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let ca_cert = fs::read_to_string(tls_dir.join("ca.crt")).context("reading ca.crt")?;
    let ca_key = fs::read_to_string(tls_dir.join("ca.key")).context("reading ca.key")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert, KeyPair::from_pem(&ca_key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, READER);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn one(mut conns: Vec<Conn>) -> Result<Conn> {
    conns.pop().ok_or_else(|| anyhow!("no connection opened"))
}

fn per_second(phase: &crate::Phase) -> f64 {
    phase.ok as f64 / phase.elapsed.as_secs_f64().max(1e-9)
}

/// `value` as a percentage of `baseline`.
fn ratio_cell(value: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("{:.0}%", value / baseline * 100.0)
    } else {
        "-".to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Writes: Secret creates on a plain server and on its variants
// ---------------------------------------------------------------------------------------------

/// A server of the writes scenario, with its datastore.
struct WriteServer {
    name: String,
    server: ServerProcess,
    datastore: Datastore,
    data_dir: PathBuf,
    admin: Conn,
}

async fn scenario_writes(s: &Settings, backend: ApiBackend, dir: &Path) -> Result<Vec<Row>> {
    let plain = Variant {
        name: "plain".to_owned(),
        flags: Vec::new(),
    };
    let mut servers = Vec::new();
    let mut result = async {
        for variant in std::iter::once(&plain).chain(&s.variants) {
            let label = format!("{}-{}", backend.name(), variant.name);
            eprintln!("[writes] starting the {label} server");
            let datastore = Datastore::new(backend, dir).await?;
            let data_dir = dir.join(&label);
            let mut flags = vec!["--disable-scheduler"];
            flags.extend(variant.flags.iter().map(String::as_str));
            let (server, _) = ServerProcess::start_with(
                &s.server,
                &data_dir,
                datastore.endpoint().as_deref(),
                &flags,
                &dir.join(format!("{label}.log")),
            )
            .await
            .with_context(|| format!("starting the {label} server"))?;
            let admin = server.connect().await?;
            servers.push(WriteServer {
                name: variant.name.clone(),
                server,
                datastore,
                data_dir,
                admin,
            });
        }
        write_rounds(s, backend, &servers).await
    }
    .await;
    for write in servers {
        let WriteServer {
            server,
            datastore,
            data_dir,
            admin,
            ..
        } = write;
        drop(admin);
        if let Err(error) = server.stop().await
            && result.is_ok()
        {
            result = Err(error);
        }
        let _ = fs::remove_dir_all(&data_dir);
        // Stops etcd and removes its data dir.
        drop(datastore);
    }
    result
}

async fn write_rounds(
    s: &Settings,
    backend: ApiBackend,
    servers: &[WriteServer],
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &clients in &s.secret_clients {
        for repeat in 0..s.repeats {
            let mut round = Vec::new();
            for write in servers {
                let namespace = format!("secrets-c{clients}-r{repeat}");
                create_namespace(&write.admin, &namespace).await?;
                let conns = write.server.connect_many(clients).await?;
                let path: Arc<str> = format!("/api/v1/namespaces/{namespace}/secrets").into();
                let cpu = CpuMeter::start(&write.server.pid);
                let phase = closed_loop(conns, s.duration, move |conn, client, i| {
                    let path = path.clone();
                    async move {
                        let body = secret(&format!("secret-c{client:02}-{i:09}"));
                        conn.call(Method::POST, &path, Some(body), StatusCode::CREATED)
                            .await?;
                        Ok(())
                    }
                })
                .await?;
                let cpu = cpu.finish();
                eprintln!(
                    "[writes] {} {} x{clients}: {} creates/s",
                    backend.name(),
                    write.name,
                    crate::rate(phase.ok, phase.elapsed)
                );
                round.push((write, phase, cpu));
            }
            let baseline = per_second(&round[0].1);
            for (write, phase, cpu) in round {
                let mut row = vec![
                    write.name.clone(),
                    clients.to_string(),
                    (repeat + 1).to_string(),
                ];
                let ratio = ratio_cell(per_second(&phase), baseline);
                row.extend(round_cells(&phase, cpu));
                row.push(ratio);
                rows.push(row);
            }
        }
    }
    // Where the Secrets went: sealed on the encrypting server only.
    for write in servers {
        let mut places = vec![write.data_dir.clone()];
        places.extend(write.datastore.etcd_data_dir().map(Path::to_path_buf));
        let sealed = match places
            .iter()
            .map(|p| holds(p, b"k8s:enc:"))
            .sum::<Result<usize>>()
        {
            Ok(0) => "no".to_owned(),
            Ok(files) => format!("yes ({files} files)"),
            Err(error) => error_cell(&error),
        };
        rows.push(vec![
            write.name.clone(),
            format!("sealed values (`k8s:enc:`) in the datastore's files: {sealed}"),
        ]);
    }
    Ok(rows)
}

/// An Opaque Secret of about 400 bytes of data (as much as `api`'s ConfigMaps hold).
fn secret(name: &str) -> Bytes {
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let body = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "labels": {"app": "web", "bench": "capstan"}},
        "data": {
            "username": encode("web-frontend"),
            "password": encode("c2VjcmV0LXBhc3N3b3JkLWZvci10aGUtYmVuY2htYXJr"),
            "tls.key": encode(
                "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\
                 benchmarkbenchmarkbenchmarkbenchmarkbenchmarkbenchmarkbenchmark\
                 benchmarkbenchmarkbenchmarkbenchmarkbenchmark\n-----END PRIVATE KEY-----\n"
            ),
        },
    });
    Bytes::from(body.to_string())
}

/// How many files under `dir` (recursively) contain `needle`.
fn holds(dir: &Path, needle: &[u8]) -> Result<usize> {
    let mut found = 0;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            found += holds(&path, needle)?;
        } else if kind.is_file() {
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found += 1;
            }
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn header(s: &Settings, dir: &Path) -> String {
    let mut out = String::new();
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(out, "## Security benchmark (`capstan-bench security`)\n");
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
        "- data dirs in `{}` ({})",
        dir.display(),
        filesystem_of(dir)
    );
    let _ = writeln!(
        out,
        "- {}\n",
        if s.quick {
            "**--quick**: scaled down, numbers are a smoke test only"
        } else {
            "full run"
        }
    );
    out
}

fn auth_table(out: &mut String, s: &Settings, rows: &[Row]) {
    let _ = writeln!(
        out,
        "### GETs by identity\n\nOne server (SQLite), a namespace of {} ConfigMaps; each client is \
         its own connection (HTTP/2 or HTTP/1.1 with keep-alive, by ALPN) with one GET in \
         flight, for {:.1} s a round, the three identities' rounds alternated. `HTTP/2`: \
         hyper's h2 client, which never indexes the `Authorization` header in HPACK, so the \
         server Huffman-decodes the whole token on every request; `HTTP/2 (Go)`: Go's \
         net/http, client-go's transport, which indexes it (the token crosses a connection \
         once); its bench CPU is the Go program's. `cert admin`: the admin client certificate \
         (`system:masters`); `cert reader`: a client certificate of user `bench-reader`; \
         `token reader`: a ServiceAccount token from the TokenRequest API, no client \
         certificate. Both readers are bound to the same ClusterRole (get, list, watch \
         ConfigMaps). vs cert reader: gets/s against the `cert reader` round next to it.\n",
        s.objects,
        s.duration.as_secs_f64()
    );
    table(
        out,
        &[
            "backend",
            "protocol",
            "clients",
            "repeat",
            "identity",
            "gets/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "server CPU",
            "bench CPU",
            "errors",
            "vs cert reader",
        ],
        &[("sqlite", &rows.to_vec())],
    );
    let totals = token_totals(rows);
    if !totals.is_empty() {
        let _ = writeln!(
            out,
            "\nToken reader against cert reader over all repeats (sum of gets/s, so that one \
             noisy round weighs no more than its share):\n"
        );
        for (protocol, clients, token, cert, repeats) in totals {
            let _ = writeln!(
                out,
                "- {protocol}, {clients} clients: {} ({repeats} rounds)",
                ratio_cell(token, cert)
            );
        }
    }
}

/// Per protocol and client count of the auth rows: the token reader's and the cert reader's
/// gets/s summed over the repeats, and the number of repeats.
fn token_totals(rows: &[Row]) -> Vec<(String, String, f64, f64, usize)> {
    let mut totals: Vec<(String, String, f64, f64, usize)> = Vec::new();
    for row in rows {
        let [protocol, clients, _repeat, identity, rate, ..] = row.as_slice() else {
            continue;
        };
        let rate: f64 = rate.parse().unwrap_or(0.0);
        let index = match totals
            .iter()
            .position(|t| &t.0 == protocol && &t.1 == clients)
        {
            Some(index) => index,
            None => {
                totals.push((protocol.clone(), clients.clone(), 0.0, 0.0, 0));
                totals.len() - 1
            }
        };
        let total = &mut totals[index];
        match identity.as_str() {
            "token reader" => {
                total.2 += rate;
                total.4 += 1;
            }
            "cert reader" => total.3 += rate,
            _ => {}
        }
    }
    totals
}

fn writes_table(out: &mut String, s: &Settings, reports: &[(&str, Vec<Row>)]) {
    let variants: Vec<String> = s
        .variants
        .iter()
        .map(|v| format!("`{}`: `{}`", v.name, v.flags.join(" ")))
        .collect();
    let _ = writeln!(
        out,
        "### Secret creates, plain against {}\n\nEach server has a datastore of its own and runs \
         all along; their rounds alternate. Each client is its own HTTP/2 connection with one \
         create (`POST`, an Opaque Secret of about 400 bytes) in flight, for {:.1} s a round, a \
         namespace per round. vs plain: creates/s against the plain server's round next to it.\n",
        variants.join(", "),
        s.duration.as_secs_f64()
    );
    let refs: Vec<(&str, &Vec<Row>)> = reports.iter().map(|(name, rows)| (*name, rows)).collect();
    table(
        out,
        &[
            "backend",
            "server",
            "clients",
            "repeat",
            "creates/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "server CPU",
            "bench CPU",
            "errors",
            "vs plain",
        ],
        &refs,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_are_a_name_and_flags() {
        let variant = parse_variant("audit=--audit-log-path /var/tmp/a.log").unwrap();
        assert_eq!(variant.name, "audit");
        assert_eq!(variant.flags, ["--audit-log-path", "/var/tmp/a.log"]);
        assert!(parse_variant("--secrets-encryption").is_err());
        assert!(parse_variant("plain=--x").is_err());
    }

    #[test]
    fn secrets_are_valid_json_with_base64_data() {
        let body: Value = serde_json::from_slice(&secret("s")).unwrap();
        assert_eq!(body["metadata"]["name"], "s");
        let data = body["data"]["username"].as_str().unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap(),
            b"web-frontend"
        );
    }

    #[test]
    fn files_holding_a_marker_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("a"), b"xxk8s:enc:aescbc").unwrap();
        fs::write(dir.path().join("sub/b"), b"k8s:enc:").unwrap();
        fs::write(dir.path().join("c"), b"plain").unwrap();
        assert_eq!(holds(dir.path(), b"k8s:enc:").unwrap(), 2);
    }

    #[test]
    fn token_totals_sum_each_protocol_over_repeats() {
        let row = |protocol: &str, repeat: &str, identity: &str, rate: &str| -> Row {
            [protocol, "32", repeat, identity, rate, "1.0"]
                .map(str::to_owned)
                .to_vec()
        };
        let rows = vec![
            row("HTTP/2", "1", "cert admin", "500"),
            row("HTTP/2", "1", "cert reader", "100"),
            row("HTTP/2", "1", "token reader", "90"),
            row("HTTP/1.1", "1", "cert reader", "200"),
            row("HTTP/1.1", "1", "token reader", "200"),
            row("HTTP/2", "2", "cert reader", "300"),
            row("HTTP/2", "2", "token reader", "310"),
        ];
        let totals = token_totals(&rows);
        assert_eq!(
            totals,
            vec![
                ("HTTP/2".to_owned(), "32".to_owned(), 400.0, 400.0, 2),
                ("HTTP/1.1".to_owned(), "32".to_owned(), 200.0, 200.0, 1),
            ]
        );
    }

    #[test]
    fn ratios_are_percentages() {
        assert_eq!(ratio_cell(90.0, 100.0), "90%");
        assert_eq!(ratio_cell(1.0, 0.0), "-");
    }
}
