//! `capstan-bench extend`: what extending the API costs (issue 23), measured on one server in
//! one run, each figure beside its built-in baseline:
//!
//! 1. CRD create to served: a CustomResourceDefinition is POSTed and its kind's collection is
//!    polled (every 2 ms) until it answers 200; the time from sending the CRD to that answer,
//!    for N CRDs one after another;
//! 2. custom objects against ConfigMaps: closed-loop creates, then GETs of what was created, at
//!    C clients (one HTTP/2 connection each), of ConfigMaps and of custom objects whose
//!    version's schema has 20 typed and constrained fields and 3 CEL rules (validated,
//!    defaulted and pruned on every create);
//! 3. a validating webhook's cost: closed-loop ConfigMap creates in a namespace no webhook
//!    matches and in one a validating webhook (an HTTPS server in this process, on loopback,
//!    that allows everything) is called for, at 1 and C clients; the difference of the p50s
//!    is what the webhook adds to a request.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use base64::Engine as _;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::api::{Conn, CpuMeter, ServerProcess, closed_loop};
use crate::{Phase, ms};

/// Flags of `capstan-bench extend`.
#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// The `capstan` binary (default: `capstan` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// CRDs created one after another in the create-to-served scenario.
    #[arg(long, default_value_t = 10)]
    crds: usize,
    /// Concurrent clients of the throughput rounds.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// How long each closed-loop round runs, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// A small run (2 CRDs, 8 clients, 2 s rounds) to check the driver.
    #[arg(long)]
    quick: bool,
}

const GROUP: &str = "bench.capstan.io";

/// A CRD of `plural` whose v1 schema has 20 constrained fields under `spec`.
fn crd(plural: &str, kind: &str) -> Value {
    let mut fields = serde_json::Map::new();
    for i in 0..5 {
        fields.insert(
            format!("name{i}"),
            json!({"type": "string", "maxLength": 63, "pattern": "^[a-z0-9-]+$"}),
        );
        fields.insert(
            format!("count{i}"),
            json!({"type": "integer", "minimum": 0, "maximum": 1000}),
        );
        fields.insert(
            format!("mode{i}"),
            json!({"type": "string", "enum": ["fast", "slow", "off"], "default": "fast"}),
        );
        fields.insert(
            format!("flag{i}"),
            json!({"type": "boolean", "default": false}),
        );
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["name0", "count0"],
                        "properties": fields,
                        "x-kubernetes-validations": [
                            {"rule": "self.count0 <= self.count1 + 1000", "message": "count0 too far above count1"},
                            {"rule": "self.name0.size() > 0"},
                            {"rule": "self.mode0 != 'off' || !self.flag0", "message": "an off mode cannot be flagged"},
                        ],
                    }},
                }},
            }],
        },
    })
}

/// A custom object of the benchmark's kind, about the size of the ConfigMaps.
fn widget(name: &str) -> Bytes {
    let mut spec = serde_json::Map::new();
    for i in 0..5 {
        spec.insert(format!("name{i}"), json!(format!("value-{i}-{name}")));
        spec.insert(format!("count{i}"), json!(i * 7));
        spec.insert(format!("mode{i}"), json!("slow"));
    }
    Bytes::from(
        json!({
            "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
            "metadata": {"name": name},
            "spec": spec,
        })
        .to_string(),
    )
}

fn configmap(name: &str) -> Bytes {
    let data: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("key{i}"), json!(format!("value-{i}-{name}"))))
        .collect();
    Bytes::from(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
            .to_string(),
    )
}

async fn post(conn: &Conn, path: &str, body: &Value) -> Result<()> {
    conn.call(
        Method::POST,
        path,
        Some(Bytes::from(body.to_string())),
        StatusCode::CREATED,
    )
    .await?;
    Ok(())
}

async fn namespace(conn: &Conn, name: &str, labels: Value) -> Result<()> {
    post(
        conn,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await
}

/// Sends a CRD and polls its collection until it is served; the time that took.
async fn crd_to_served(conn: &Conn, plural: &str, kind: &str) -> Result<Duration> {
    let began = Instant::now();
    post(
        conn,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(plural, kind),
    )
    .await?;
    let path = format!("/apis/{GROUP}/v1/namespaces/default/{plural}");
    loop {
        let response = conn.send(Method::GET, &path, None).await?;
        let status = response.status();
        let _ = response.into_body().collect().await?;
        if status == StatusCode::OK {
            return Ok(began.elapsed());
        }
        if began.elapsed() > Duration::from_secs(30) {
            bail!("{plural} not served after 30 s (last status {status})");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What a create round did: its phase, the server's and driver's CPU, and how many objects
/// each client created (client `c`'s are `<prefix>-c<c>-<i>` for `i` below its count).
struct Created {
    round: (Phase, (String, String)),
    per_client: Arc<Vec<AtomicU64>>,
}

/// One closed-loop round of creates of objects named `<prefix>-c<client>-<i>` into
/// `collection` with `clients` connections.
async fn creates(
    server: &ServerProcess,
    clients: usize,
    seconds: u64,
    collection: &str,
    prefix: &str,
    body: fn(&str) -> Bytes,
) -> Result<Created> {
    let conns = server.connect_many(clients).await?;
    let path: Arc<str> = collection.into();
    let prefix: Arc<str> = prefix.into();
    let per_client: Arc<Vec<AtomicU64>> =
        Arc::new((0..clients).map(|_| AtomicU64::new(0)).collect());
    let counts = per_client.clone();
    let cpu = CpuMeter::start(&server.pid);
    let phase = closed_loop(
        conns,
        Duration::from_secs(seconds),
        move |conn, client, _| {
            let (path, prefix, counts) = (path.clone(), prefix.clone(), counts.clone());
            async move {
                // Names are numbered by successful creates, so they are dense for the GETs.
                let i = counts[client].load(Ordering::Relaxed);
                conn.call(
                    Method::POST,
                    &path,
                    Some(body(&format!("{prefix}-c{client:02}-{i:09}"))),
                    StatusCode::CREATED,
                )
                .await?;
                counts[client].fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        },
    )
    .await?;
    Ok(Created {
        round: (phase, cpu.finish()),
        per_client,
    })
}

/// GETs of the objects a create round made (each client reads its own, in turn).
async fn gets(
    server: &ServerProcess,
    seconds: u64,
    collection: &str,
    prefix: &str,
    created: &Created,
) -> Result<(Phase, (String, String))> {
    let clients = created.per_client.len();
    let conns = server.connect_many(clients).await?;
    let path: Arc<str> = collection.into();
    let prefix: Arc<str> = prefix.into();
    let counts: Arc<Vec<u64>> = Arc::new(
        created
            .per_client
            .iter()
            .map(|c| c.load(Ordering::Relaxed).max(1))
            .collect(),
    );
    let cpu = CpuMeter::start(&server.pid);
    let phase = closed_loop(
        conns,
        Duration::from_secs(seconds),
        move |conn, client, i| {
            let (path, prefix, counts) = (path.clone(), prefix.clone(), counts.clone());
            async move {
                let name = format!("{prefix}-c{client:02}-{:09}", i % counts[client]);
                conn.call(Method::GET, &format!("{path}/{name}"), None, StatusCode::OK)
                    .await?;
                Ok(())
            }
        },
    )
    .await?;
    Ok((phase, cpu.finish()))
}

fn row(label: &str, clients: usize, (phase, cpu): &(Phase, (String, String))) -> String {
    let cells = phase.cells();
    format!(
        "| {label} | {clients} | {} | {} | {} | {} | {} | {} |",
        cells[0],
        cells[1],
        cells[2],
        cpu.0,
        cpu.1,
        phase.errors_cell()
    )
}

/// An HTTPS admission webhook on loopback that allows every request; its port and CA (PEM).
async fn allow_all_webhook() -> Result<(u16, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse()?));
    let cert_pem = params.signed_by(&key, &issuer)?.pem();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?,
        PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())?,
    )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |request: hyper::Request<hyper::body::Incoming>| async move {
                        let body = request.into_body().collect().await?.to_bytes();
                        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let answer = json!({
                            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "response": {"uid": review["request"]["uid"], "allowed": true},
                        });
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(
                            answer.to_string(),
                        ))))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok((port, ca_pem))
}

pub async fn run(args: ExtendArgs) -> Result<()> {
    let binary = crate::server_binary(args.server)?;
    let (crds, clients, seconds) = if args.quick {
        (2, 8, 2)
    } else {
        (args.crds, args.clients, args.seconds)
    };
    let dir = tempfile::Builder::new()
        .prefix("capstan-extend-bench")
        .tempdir_in("/var/tmp")?;
    let log = dir.path().join("server.log");
    let (server, _) =
        ServerProcess::start_with(&binary, &dir.path().join("data"), None, &[], &log).await?;
    let conn = server.connect().await?;

    // 1. CRD create to served.
    let mut served = Vec::new();
    for i in 0..crds {
        served.push(crd_to_served(&conn, &format!("things{i}"), &format!("Thing{i}")).await?);
        eprintln!(
            "[crd] things{i} served after {:?}",
            served.last().unwrap_or(&Duration::ZERO)
        );
    }
    served.sort();
    let nanos = |d: &Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);

    // 2. Custom objects against ConfigMaps.
    crd_to_served(&conn, "widgets", "Widget").await?;
    namespace(&conn, "objects", json!({})).await?;
    let configmaps = "/api/v1/namespaces/objects/configmaps";
    let widgets = format!("/apis/{GROUP}/v1/namespaces/objects/widgets");
    eprintln!("[objects] ConfigMap creates");
    let cm_created = creates(&server, clients, seconds, configmaps, "o", configmap).await?;
    eprintln!("[objects] Widget creates");
    let w_created = creates(&server, clients, seconds, &widgets, "o", widget).await?;
    eprintln!("[objects] GETs");
    let cm_gets = gets(&server, seconds, configmaps, "o", &cm_created).await?;
    let w_gets = gets(&server, seconds, &widgets, "o", &w_created).await?;
    let (cm_creates, w_creates) = (cm_created.round, w_created.round);

    // 3. A validating webhook's cost.
    let (port, ca) = allow_all_webhook().await?;
    namespace(&conn, "plain", json!({})).await?;
    namespace(&conn, "hooked", json!({"webhook": "on"})).await?;
    post(
        &conn,
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "allow.bench.capstan.io"},
            "webhooks": [{
                "name": "allow.bench.capstan.io",
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/allow"),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.as_bytes()),
                },
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"webhook": "on"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        }),
    )
    .await?;
    // The configuration is in effect once the server has it in its cache: a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut webhook_rows = Vec::new();
    for round_clients in [1, clients] {
        for ns in ["plain", "hooked"] {
            eprintln!("[webhook] {ns} x{round_clients}");
            let collection = format!("/api/v1/namespaces/{ns}/configmaps");
            let prefix = format!("w{round_clients}");
            let round = creates(
                &server,
                round_clients,
                seconds,
                &collection,
                &prefix,
                configmap,
            )
            .await?;
            webhook_rows.push((ns, round_clients, round.round));
        }
    }
    server.stop().await?;

    println!("## Extending the API (`capstan-bench extend`)\n");
    println!("### CRD create to served ({crds} CRDs, one after another)\n");
    println!("| p50 (ms) | max (ms) |");
    println!("|---|---|");
    println!(
        "| {} | {} |\n",
        ms(nanos(&served[served.len() / 2])),
        ms(nanos(served.last().unwrap_or(&Duration::ZERO)))
    );
    println!(
        "### Custom objects (20-field schema, 3 CEL rules) against ConfigMaps, {seconds} s rounds\n"
    );
    println!("| round | clients | ops/s | p50 (ms) | p99 (ms) | server CPU | bench CPU | errors |");
    println!("|---|---|---|---|---|---|---|---|");
    println!("{}", row("ConfigMap creates", clients, &cm_creates));
    println!("{}", row("Widget creates", clients, &w_creates));
    println!("{}", row("ConfigMap GETs", clients, &cm_gets));
    println!("{}", row("Widget GETs", clients, &w_gets));
    let share = |custom: &Phase, builtin: &Phase| {
        if builtin.ok == 0 {
            "-".to_owned()
        } else {
            format!("{:.0} %", 100.0 * custom.ok as f64 / builtin.ok as f64)
        }
    };
    println!(
        "\nCustom objects against ConfigMaps: creates {}, GETs {}.\n",
        share(&w_creates.0, &cm_creates.0),
        share(&w_gets.0, &cm_gets.0)
    );
    println!("### A validating webhook (HTTPS on loopback, allows all), ConfigMap creates\n");
    println!(
        "| namespace | clients | ops/s | p50 (ms) | p99 (ms) | server CPU | bench CPU | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (ns, round_clients, round) in &webhook_rows {
        let label = if *ns == "hooked" {
            "webhook called"
        } else {
            "no webhook"
        };
        println!("{}", row(label, *round_clients, round));
    }
    println!();
    for pair in webhook_rows.chunks(2) {
        if let [(_, c, plain), (_, _, hooked)] = pair {
            let p50 = |phase: &Phase| phase.hist.value_at_quantile(0.5);
            println!(
                "Added p50 at {c} client(s): {} ms.",
                ms(p50(&hooked.0).saturating_sub(p50(&plain.0)))
            );
        }
    }
    Ok(())
}
