//! The proxy subresources and `pods/log` over WebSocket through the whole request chain, with
//! backends on loopback: an HTTP (and an HTTPS) server playing a pod behind a service, and a
//! TLS server playing a kubelet. Pods themselves are never reached on loopback (upstream refuses
//! addresses that are not global unicast), so the backends are reached through a service whose
//! Endpoints are written to the store directly (validation keeps loopback out of Endpoints) and
//! whose target pod has the loopback address in its status. The real node's pods are reached in
//! `crates/capstan/tests/proxy_e2e.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Mutex;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use super::tests::started;
use super::*;

const NS: &str = "/api/v1/namespaces/default";

/// A request a backend received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: HeaderMap,
    body: String,
}

/// A loopback HTTP(S) server standing in for a pod: it records what it receives and answers
/// by path.
struct Backend {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap()
}

async fn answer(
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    mut request: Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let upgraded = hyper::upgrade::on(&mut request);
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let response = |status: u16, headers: &[(&str, &str)], body: Vec<u8>| {
        let mut builder = http::Response::builder().status(status);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(Full::new(Bytes::from(body))).unwrap()
    };
    if parts.headers.contains_key(header::UPGRADE) {
        if parts.uri.path() == "/refuse" {
            return response(
                403,
                &[("content-type", "text/plain")],
                b"no upgrade".to_vec(),
            );
        }
        tokio::spawn(async move {
            let mut io = hyper_util::rt::TokioIo::new(upgraded.await.unwrap());
            let mut buf = [0u8; 1024];
            loop {
                match io.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if io.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        return response(
            101,
            &[("connection", "Upgrade"), ("upgrade", "echo")],
            Vec::new(),
        );
    }
    let read = matches!(parts.method, Method::GET | Method::HEAD);
    match parts.uri.path() {
        "/" if read => response(
            200,
            &[("content-type", "text/html; charset=utf-8")],
            br#"<a href="/rewriteme">test</a>"#.to_vec(),
        ),
        "/gzip" => response(
            200,
            &[("content-type", "text/html"), ("content-encoding", "gzip")],
            gzip(r#"<img src="/a.png"><a href="http://example.com/x">x</a>"#),
        ),
        "/redirect" => response(
            302,
            &[("location", &format!("http://{addr}/moved?a=1"))],
            Vec::new(),
        ),
        "/cors" => response(
            200,
            &[
                ("access-control-allow-origin", "*"),
                ("access-control-allow-methods", "GET"),
                ("x-kept", "yes"),
            ],
            b"cors".to_vec(),
        ),
        _ => response(
            200,
            &[("content-type", "text/plain")],
            format!(
                "{} {} {}",
                parts.method,
                parts.uri,
                String::from_utf8_lossy(&body)
            )
            .into_bytes(),
        ),
    }
}

impl Backend {
    async fn start(tls: bool) -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let acceptor = tls.then(|| {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
            )
            .unwrap();
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let recorded = seen.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (seen, acceptor) = (recorded.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let seen = seen.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(answer(addr, seen, request).await)
                        }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(acceptor) => {
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let _ = builder
                                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                                .with_upgrades()
                                .await;
                        }
                        None => {
                            let _ = builder
                                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                                .with_upgrades()
                                .await;
                        }
                    }
                });
            }
        });
        Backend { addr, seen }
    }

    fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

/// A started API server's request chain, driven in process as an administrator.
struct Chain {
    _dir: tempfile::TempDir,
    store: Store,
    api: Arc<Api>,
    control: Control,
}

fn admin() -> User {
    User {
        name: "admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..User::default()
    }
}

/// An answer: status, headers, body.
type Answer = (StatusCode, HeaderMap, String);

impl Chain {
    async fn new() -> Chain {
        let (dir, store, api, control) = started().await;
        // The service account controller's work: pods need the `default` service account.
        let _ = api
            .registry("", "v1", "serviceaccounts")
            .unwrap()
            .create(
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default"}}),
                &crate::registry::WriteOptions::default(),
            )
            .await;
        Chain {
            _dir: dir,
            store,
            api,
            control,
        }
    }

    async fn send_as(
        &self,
        user: &User,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let metrics = Metrics::new();
        let mut request = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let mut request = request.body(Body::from(body.to_owned())).unwrap();
        request
            .extensions_mut()
            .insert(crate::handlers::proxy::forward::ClientAddr(
                "192.0.2.9:40000".parse().unwrap(),
            ));
        let app = router(
            self.store.clone(),
            metrics.clone(),
            self.api.clone(),
            "127.0.0.1:6443".into(),
        );
        let response = handle(
            request,
            Some(user),
            &Authenticator::default(),
            app,
            &metrics,
            &self.control,
        )
        .await;
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        self.send_as(&admin(), method, path, headers, body).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[("host", "127.0.0.1:6443")], "")
            .await
    }

    async fn post(&self, path: &str, object: Value) -> Value {
        let (status, _, body) = self
            .send(
                "POST",
                path,
                &[("content-type", "application/json")],
                &object.to_string(),
            )
            .await;
        assert!(status.is_success(), "{status} {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// A pod with `ports` on its container and `ip` in its status.
    async fn pod(&self, name: &str, ip: &str, ports: &[u16]) {
        let ports: Vec<Value> = ports.iter().map(|p| json!({"containerPort": p})).collect();
        self.post(
            &format!("{NS}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                   "spec": {"containers": [{"name": "c", "image": "busybox", "ports": ports}]}}),
        )
        .await;
        if ip.is_empty() {
            return;
        }
        let (status, _, body) = self
            .send(
                "PATCH",
                &format!("{NS}/pods/{name}/status"),
                &[("content-type", "application/merge-patch+json")],
                &json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}).to_string(),
            )
            .await;
        assert!(status.is_success(), "{status} {body}");
    }

    /// Endpoints written as a store-level write would hold them (validation refuses loopback).
    async fn endpoints(&self, name: &str, subsets: Value) {
        let object = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name, "namespace": "default",
                         "uid": format!("uid-{name}"),
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "subsets": subsets,
        });
        self.store
            .create(
                &format!("/registry/services/endpoints/default/{name}"),
                object.to_string(),
            )
            .await
            .unwrap();
        // The watch cache has it once a consistent read sees it.
        for _ in 0..100 {
            if self.get(&format!("{NS}/endpoints/{name}")).await.0 == StatusCode::OK {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("endpoints {name} never appeared");
    }
}

fn status_of(answer: &Answer) -> (u16, String, String) {
    let status: Value = serde_json::from_str(&answer.2).unwrap_or_default();
    (
        answer.0.as_u16(),
        status["reason"].as_str().unwrap_or_default().to_owned(),
        status["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// A cluster with a service `web` whose endpoint (port `http`, and `tls` for the HTTPS
/// backend) is pod `backend` at 127.0.0.1.
async fn cluster_with_backends() -> (Chain, Backend, Backend) {
    let chain = Chain::new().await;
    let (plain, secure) = (Backend::start(false).await, Backend::start(true).await);
    chain.pod("backend", "127.0.0.1", &[]).await;
    chain
        .post(
            &format!("{NS}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"ports": [
                       {"name": "http", "port": 80, "targetPort": plain.addr.port()},
                       {"name": "tls", "port": 443, "targetPort": secure.addr.port()}]}}),
        )
        .await;
    chain
        .endpoints(
            "web",
            json!([{
                "addresses": [{"ip": "127.0.0.1",
                               "targetRef": {"kind": "Pod", "namespace": "default", "name": "backend"}}],
                "ports": [{"name": "http", "port": plain.addr.port(), "protocol": "TCP"},
                          {"name": "tls", "port": secure.addr.port(), "protocol": "TCP"}]
            }]),
        )
        .await;
    (chain, plain, secure)
}

#[tokio::test]
async fn services_proxy_to_an_endpoint_with_path_query_and_headers() {
    let (chain, plain, _secure) = cluster_with_backends().await;
    let base = format!("{NS}/services/web:http/proxy");
    // Path and query pass through; the client's credentials do not.
    let answer = chain
        .send(
            "POST",
            &format!("{base}/some/path/with/POST?a=1&path=x"),
            &[
                ("host", "127.0.0.1:6443"),
                ("authorization", "Bearer secret"),
                ("x-custom", "kept"),
                ("content-type", "text/plain"),
            ],
            "the body",
        )
        .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.2);
    assert_eq!(answer.2, "POST /some/path/with/POST?a=1&path=x the body");
    let seen = plain.last();
    assert_eq!(seen.body, "the body");
    assert!(!seen.headers.contains_key("authorization"));
    assert_eq!(seen.headers["x-custom"], "kept");
    assert_eq!(seen.headers["host"], "127.0.0.1:6443");
    assert_eq!(seen.headers["x-forwarded-for"], "192.0.2.9");
    assert_eq!(
        seen.headers["x-forwarded-uri"],
        format!("{base}/some/path/with/POST")
    );
    // Every method goes through; HEAD and OPTIONS too.
    for method in ["PUT", "PATCH", "DELETE", "OPTIONS", "GET"] {
        let answer = chain
            .send(method, &format!("{base}/m"), &[("host", "h")], "")
            .await;
        assert_eq!(answer.0, StatusCode::OK, "{method} {}", answer.2);
        assert_eq!(plain.last().method, method);
    }
    let head = chain.send("HEAD", &format!("{base}/m"), &[], "").await;
    assert_eq!((head.0, head.2.as_str()), (StatusCode::OK, ""));
    assert_eq!(plain.last().method, "HEAD");
    // The service port by number is its name; no port picks the unnamed one, which is none.
    let answer = chain
        .get(&format!("{NS}/services/web:80/proxy/by-number"))
        .await;
    assert_eq!(answer.2, "GET /by-number ");
    assert_eq!(
        status_of(&chain.get(&format!("{NS}/services/web/proxy/")).await),
        (
            503,
            "ServiceUnavailable".into(),
            "no endpoints available for service \"web\"".into()
        )
    );
}

#[tokio::test]
async fn html_links_locations_and_cors_headers_are_rewritten_as_upstreams() {
    let (chain, plain, _secure) = cluster_with_backends().await;
    let base = format!("{NS}/services/http:web:http/proxy");
    // The conformance body, byte for byte.
    let answer = chain.get(&format!("{base}/")).await;
    assert_eq!(answer.0, StatusCode::OK);
    assert_eq!(answer.2, format!(r#"<a href="{base}/rewriteme">test</a>"#));
    // The backend's length no longer holds; any length sent is the rewritten body's.
    if let Some(length) = answer.1.get(header::CONTENT_LENGTH) {
        assert_eq!(length.to_str().unwrap(), answer.2.len().to_string());
    }
    assert_eq!(plain.last().headers["x-forwarded-uri"], format!("{base}/"));
    // gzip is decoded, rewritten and encoded again; other hosts' links stay.
    let answer = chain.send("GET", &format!("{base}/gzip"), &[], "").await;
    assert_eq!(answer.1[header::CONTENT_ENCODING], "gzip");
    let raw = {
        let metrics = Metrics::new();
        let request = Request::get(format!("{base}/gzip"))
            .body(Body::empty())
            .unwrap();
        let app = router(
            chain.store.clone(),
            metrics.clone(),
            chain.api.clone(),
            "127.0.0.1:6443".into(),
        );
        let response = handle(
            request,
            Some(&admin()),
            &Authenticator::default(),
            app,
            &metrics,
            &chain.control,
        )
        .await;
        axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap()
    };
    let mut html = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&raw[..]), &mut html).unwrap();
    assert_eq!(
        html,
        format!(r#"<img src="{base}/a.png"><a href="http://example.com/x">x</a>"#)
    );
    // A redirect to the backend's own address leads back through the proxy.
    let answer = chain.get(&format!("{base}/redirect")).await;
    assert_eq!(answer.0, StatusCode::FOUND);
    assert_eq!(answer.1[header::LOCATION], format!("{base}/moved?a=1"));
    // CORS headers of the backend are dropped, others kept.
    let answer = chain.get(&format!("{base}/cors")).await;
    assert_eq!(answer.2, "cors");
    assert!(!answer.1.contains_key("access-control-allow-origin"));
    assert!(!answer.1.contains_key("access-control-allow-methods"));
    assert_eq!(answer.1["x-kept"], "yes");
}

#[tokio::test]
async fn https_backends_are_reached_without_verifying_them() {
    let (chain, _plain, secure) = cluster_with_backends().await;
    let base = format!("{NS}/services/https:web:tls/proxy");
    let answer = chain.get(&format!("{base}/")).await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.2);
    assert_eq!(answer.2, format!(r#"<a href="{base}/rewriteme">test</a>"#));
    assert_eq!(secure.last().uri, "/");
    let answer = chain
        .get(&format!("{NS}/services/https:web:443/proxy/x?y=1"))
        .await;
    assert_eq!(answer.2, "GET /x?y=1 ");
}

#[tokio::test]
async fn empty_paths_are_redirected_for_reads_and_passed_on_otherwise() {
    let (chain, plain, _secure) = cluster_with_backends().await;
    let base = format!("{NS}/services/web:http/proxy");
    for method in ["GET", "HEAD"] {
        let answer = chain
            .send(method, &format!("{base}?method={method}"), &[], "")
            .await;
        assert_eq!(answer.0, StatusCode::MOVED_PERMANENTLY, "{method}");
        assert_eq!(
            answer.1[header::LOCATION],
            format!("{base}/?method={method}")
        );
    }
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let answer = chain
            .send(method, &format!("{base}?method={method}"), &[], "")
            .await;
        assert_eq!(answer.0, StatusCode::OK, "{method} {}", answer.2);
        assert_eq!(answer.2, format!("{method} /?method={method} "));
    }
    assert_eq!(plain.last().headers["x-forwarded-uri"], base);
}

#[tokio::test]
async fn unresolvable_backends_get_upstreams_errors() {
    let (chain, _plain, _secure) = cluster_with_backends().await;
    let cases: Vec<(String, (u16, &str, String))> = vec![
        (
            format!("{NS}/pods/a:b:c:d/proxy/"),
            (400, "BadRequest", "invalid pod request \"a:b:c:d\"".into()),
        ),
        (
            format!("{NS}/services/ftp:web:80/proxy/"),
            (
                400,
                "BadRequest",
                "invalid service request \"ftp:web:80\"".into(),
            ),
        ),
        (
            "/api/v1/nodes/:10250/proxy/".into(),
            (400, "BadRequest", "invalid node request \":10250\"".into()),
        ),
        (
            format!("{NS}/pods/missing/proxy/"),
            (404, "NotFound", "pods \"missing\" not found".into()),
        ),
        (
            format!("{NS}/services/web:81/proxy/"),
            (
                503,
                "ServiceUnavailable",
                "no service port 81 found for service \"web\"".into(),
            ),
        ),
        (
            format!("{NS}/services/web:nope/proxy/"),
            (
                503,
                "ServiceUnavailable",
                "no endpoints available for service \"web:nope\"".into(),
            ),
        ),
        (
            format!("{NS}/services/missing:80/proxy/"),
            (404, "NotFound", "services \"missing\" not found".into()),
        ),
        (
            format!("{NS}/services/missing:x/proxy/"),
            (404, "NotFound", "endpoints \"missing\" not found".into()),
        ),
        // The backend pod's loopback address is not a pod address the proxy reaches.
        (
            format!("{NS}/pods/backend/proxy/"),
            (400, "BadRequest", "address not allowed".into()),
        ),
        (
            format!("{NS}/pods/backend/proxy/?dryRun=All"),
            (400, "BadRequest", "dryRun is not supported".into()),
        ),
        (
            "/api/v1/nodes/missing/proxy/".into(),
            (404, "NotFound", "nodes \"missing\" not found".into()),
        ),
    ];
    for (path, (code, reason, message)) in cases {
        assert_eq!(
            status_of(&chain.get(&path).await),
            (code, reason.into(), message),
            "{path}"
        );
    }
    // A pending pod (no IP) is refused before anything is dialed.
    chain.pod("pending", "", &[80]).await;
    assert_eq!(
        status_of(&chain.get(&format!("{NS}/pods/pending/proxy/")).await).2,
        "address not allowed"
    );
    // A node whose address is loopback is refused as upstream 1.33 refuses it.
    chain
        .post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "local"}}),
        )
        .await;
    let (status, _, body) = chain
        .send(
            "PATCH",
            "/api/v1/nodes/local/status",
            &[("content-type", "application/merge-patch+json")],
            &json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
                .to_string(),
        )
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(
        status_of(&chain.get("/api/v1/nodes/local/proxy/pods").await),
        (400, "BadRequest".into(), "address not allowed".into())
    );
    // A refused connection is the service's unavailability.
    chain
        .endpoints(
            "closed",
            json!([{"addresses": [{"ip": "127.0.0.1",
                                   "targetRef": {"kind": "Pod", "namespace": "default", "name": "backend"}}],
                    "ports": [{"name": "", "port": 1, "protocol": "TCP"}]}]),
        )
        .await;
    assert_eq!(
        status_of(&chain.get(&format!("{NS}/services/closed/proxy/")).await),
        (
            503,
            "ServiceUnavailable".into(),
            "error trying to reach service: dial tcp 127.0.0.1:1: connect: connection refused"
                .into()
        )
    );
    // Methods without a proxy meaning are not allowed.
    let answer = chain
        .send("TRACE", &format!("{NS}/services/web:http/proxy/"), &[], "")
        .await;
    assert_eq!(status_of(&answer).0, 405);
}

#[tokio::test]
async fn rbac_maps_each_method_to_its_verb_on_the_proxy_subresource() {
    let (chain, _plain, _secure) = cluster_with_backends().await;
    chain
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "proxy-get"},
                   "rules": [{"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]}]}),
        )
        .await;
    chain
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "proxy-get"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "proxy-get"},
                   "subjects": [{"kind": "User", "name": "viewer"}]}),
        )
        .await;
    chain
        .control
        .authorizer
        .refresh(chain.api.registries())
        .await
        .unwrap();
    let viewer = User {
        name: "viewer".into(),
        groups: vec!["system:authenticated".into()],
        ..User::default()
    };
    let path = format!("{NS}/services/web:http/proxy/x");
    for method in ["GET", "HEAD"] {
        let answer = chain.send_as(&viewer, method, &path, &[], "").await;
        assert_eq!(answer.0, StatusCode::OK, "{method}");
    }
    for (method, verb) in [
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("OPTIONS", ""),
    ] {
        let answer = chain.send_as(&viewer, method, &path, &[], "").await;
        assert_eq!(
            status_of(&answer),
            (
                403,
                "Forbidden".into(),
                format!(
                    "services \"web:http\" is forbidden: User \"viewer\" cannot {verb} resource \"services/proxy\" in API group \"\" in the namespace \"default\""
                )
            ),
            "{method}"
        );
    }
}

/// A full server on loopback, reached over TLS as an administrator.
struct Served {
    _dir: tempfile::TempDir,
    server: crate::RunningServer,
    store: Store,
    tls: tokio_rustls::TlsConnector,
    tls_dir: std::path::PathBuf,
}

impl Served {
    async fn start() -> Served {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::test_support::sqlite(dir.path()).await;
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            bind_address: "127.0.0.1".parse().unwrap(),
            port: 0,
            tls_sans: Vec::new(),
            tls: Default::default(),
            encryption_provider_config: None,
            secrets_encryption: false,
            audit: None,
            kubeconfig_path: dir.path().join("kubeconfig.yaml"),
            kubeconfig_mode: 0o600,
            token_auth_file: None,
            authentication: Default::default(),
            service_cidr: "10.96.0.0/12".into(),
            allocation_repair: Default::default(),
            join_token: None,
            advertise_address: None,
            default_storage_class: false,
            metrics_server: None,
            admission_control_config_file: None,
            node_cert_lifetime: crate::pki::DEFAULT_NODE_LIFETIME,
            authentication_token_webhook: None,
            authorization: Default::default(),
            controller_credentials: true,
            dashboard: true,
            profiling: true,
        };
        let server = crate::start(config, store.clone()).await.unwrap();
        let tls_dir = dir.path().join("tls");
        let admin = crate::pki::component_client(
            &tls_dir,
            "proxy-test-admin",
            "proxy-test-admin",
            Some("system:masters"),
        )
        .unwrap();
        let ca = std::fs::read_to_string(tls_dir.join("ca.crt")).unwrap();
        let tls = tls_client(&ca, &admin);
        let served = Served {
            _dir: dir,
            server,
            store,
            tls,
            tls_dir,
        };
        served
            .create(
                &format!("{NS}/serviceaccounts"),
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default"}}),
            )
            .await;
        served
    }

    async fn connect(&self) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let tcp = tokio::net::TcpStream::connect(self.server.local_addr())
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        self.tls.connect(name, tcp).await.unwrap()
    }

    /// One HTTP/1.1 request on a fresh connection.
    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> http::Response<hyper::body::Incoming> {
        let io = hyper_util::rt::TokioIo::new(self.connect().await);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection.with_upgrades());
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.server.local_addr().to_string());
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let body = body.map_or_else(String::new, |b| b.to_string());
        sender
            .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .unwrap()
    }

    async fn create(&self, path: &str, object: Value) {
        let response = self.request("POST", path, Some(object)).await;
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            status.is_success(),
            "{status} {}",
            String::from_utf8_lossy(&body)
        );
    }

    async fn merge_patch(&self, path: &str, patch: Value) {
        let io = hyper_util::rt::TokioIo::new(self.connect().await);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection);
        let answer = sender
            .send_request(
                Request::patch(path)
                    .header(header::HOST, "127.0.0.1")
                    .header(header::CONTENT_TYPE, "application/merge-patch+json")
                    .body(Full::new(Bytes::from(patch.to_string())))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
    }
}

fn tls_client(ca: &str, client: &crate::pki::CertAndKey) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(client.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A kubelet on loopback that serves one container's log, in two chunks.
async fn fake_kubelet(tls_dir: &std::path::Path) -> u16 {
    let serving = crate::pki::kubelet_serving(
        tls_dir,
        "fake-node",
        &["127.0.0.1".to_owned()],
        crate::pki::DEFAULT_NODE_LIFETIME,
    )
    .unwrap();
    let ca = std::fs::read_to_string(tls_dir.join("ca.crt")).unwrap();
    let config = capstan_client::tls::ServerTls {
        cert_pem: &serving.cert_pem,
        key_pem: &serving.key_pem,
        client_ca_pem: &ca,
    }
    .config(&[b"http/1.1"])
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |request: Request<hyper::body::Incoming>| async move {
                        let path = request.uri().path().to_owned();
                        let response = if path == "/containerLogs/default/talker/main" {
                            let chunks = futures::stream::iter([
                                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                    Bytes::from_static(b"container is "),
                                )),
                                Ok(hyper::body::Frame::data(Bytes::from_static(b"alive\n"))),
                            ]);
                            http::Response::new(BodyExt::boxed(http_body_util::StreamBody::new(
                                chunks,
                            )))
                        } else {
                            let mut response = http::Response::new(
                                Full::new(Bytes::from_static(b"404 page not found"))
                                    .map_err(|never| match never {})
                                    .boxed(),
                            );
                            *response.status_mut() = StatusCode::NOT_FOUND;
                            response
                        };
                        Ok::<_, std::convert::Infallible>(response)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn pod_logs_stream_over_websockets_in_the_reader_protocols() {
    let served = Served::start().await;
    let port = fake_kubelet(&served.tls_dir).await;
    served
        .create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fake-node"}}),
        )
        .await;
    served
        .merge_patch(
            "/api/v1/nodes/fake-node/status",
            json!({"status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}),
        )
        .await;
    served
        .create(
            &format!("{NS}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
                   "spec": {"nodeName": "fake-node",
                            "containers": [{"name": "main", "image": "busybox"}]}}),
        )
        .await;
    let url = format!(
        "wss://{}{NS}/pods/talker/log?container=main",
        served.server.local_addr()
    );
    for (protocols, base64) in [
        (Some("binary.k8s.io"), false),
        (Some("base64.binary.k8s.io"), true),
        (None, false),
    ] {
        let mut request = url.as_str().into_client_request().unwrap();
        if let Some(protocols) = protocols {
            request
                .headers_mut()
                .insert("sec-websocket-protocol", protocols.parse().unwrap());
        }
        let (mut ws, response) = tokio_tungstenite::client_async(request, served.connect().await)
            .await
            .unwrap();
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap()),
            protocols
        );
        // An empty message first, then the log, then a normal close.
        let mut messages = Vec::new();
        let mut close = None;
        while let Some(message) = ws.next().await {
            match message.unwrap() {
                Message::Close(frame) => {
                    close = frame;
                    break;
                }
                message => {
                    assert_eq!(message.is_text(), base64, "{protocols:?}");
                    messages.push(message.into_data());
                }
            }
        }
        assert!(messages[0].is_empty(), "{protocols:?}");
        let log: Vec<u8> = messages[1..]
            .iter()
            .flat_map(|m| {
                if base64 {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(m).unwrap()
                } else {
                    m.to_vec()
                }
            })
            .collect();
        assert_eq!(String::from_utf8(log).unwrap(), "container is alive\n");
        assert_eq!(u16::from(close.expect("a close frame").code), 1000);
        let _ = ws.close(None).await;
    }
    // A client that speaks none of the reader protocols is refused.
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    let refused = tokio_tungstenite::client_async(request, served.connect().await).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
        }
        other => panic!("expected a 403, got {other:?}"),
    }
    // Plain clients still get the text.
    let response = served
        .request("GET", &format!("{NS}/pods/talker/log?container=main"), None)
        .await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"container is alive\n");
    // A pod without a node has no log: 204, for WebSocket clients too.
    served
        .create(
            &format!("{NS}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unbound"},
                   "spec": {"containers": [{"name": "main", "image": "busybox"}]}}),
        )
        .await;
    let response = served
        .request("GET", &format!("{NS}/pods/unbound/log"), None)
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn upgrades_through_the_proxy_are_spliced_to_the_backend() {
    let served = Served::start().await;
    let backend = Backend::start(false).await;
    served
        .create(
            &format!("{NS}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "backend"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    served
        .merge_patch(
            &format!("{NS}/pods/backend/status"),
            json!({"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}),
        )
        .await;
    // Endpoints as a store-level write holds them (validation refuses loopback).
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "echo", "namespace": "default", "uid": "uid-echo",
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1",
                                    "targetRef": {"kind": "Pod", "namespace": "default", "name": "backend"}}],
                     "ports": [{"name": "", "port": backend.addr.port(), "protocol": "TCP"}]}],
    });
    served
        .store
        .create(
            "/registry/services/endpoints/default/echo",
            endpoints.to_string(),
        )
        .await
        .unwrap();
    let upgrade = |path: String| {
        let served = &served;
        async move {
            let io = hyper_util::rt::TokioIo::new(served.connect().await);
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection.with_upgrades());
            sender
                .send_request(
                    Request::get(path)
                        .header(header::HOST, "127.0.0.1")
                        .header(header::CONNECTION, "Upgrade")
                        .header(header::UPGRADE, "echo")
                        .body(Full::new(Bytes::new()))
                        .unwrap(),
                )
                .await
                .unwrap()
        }
    };
    let mut response = upgrade(format!("{NS}/services/echo/proxy/stream?dropped=1")).await;
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(response.headers()[header::UPGRADE], "echo");
    let mut io = hyper_util::rt::TokioIo::new(hyper::upgrade::on(&mut response).await.unwrap());
    io.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    io.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping");
    // Upstream sends an upgrade to the location without the query.
    let seen = backend.last();
    assert_eq!(seen.uri, "/stream");
    assert_eq!(seen.headers[header::UPGRADE], "echo");
    // A refusal of the backend is passed back as it came.
    let response = upgrade(format!("{NS}/services/echo/proxy/refuse")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"no upgrade");
}
