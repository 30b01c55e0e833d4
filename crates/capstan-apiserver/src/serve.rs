//! HTTPS serving: TLS with optional client certificates, HTTP/1.1 and HTTP/2 (ALPN), and the
//! identity of each connection's user attached to its requests.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capstan_store::Store;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use std::time::{Duration, Instant};

use capstan_api::RequestInfo;

use crate::aggregator::Aggregator;
use crate::authn::{Authenticated, Authenticator, TokenFile, User};
use crate::authz::{Attributes, Authorizer};
use crate::flowcontrol::{Classification, Flowcontrol};
use crate::handlers::resource::Api;
use crate::handlers::{discovery, health};
use crate::metrics::Metrics;
use crate::pki::Pki;
use crate::status::ApiError;
use crate::{Config, StartError};

/// A running API server.
#[derive(Debug)]
pub struct RunningServer {
    local_addr: SocketAddr,
    accept_loop: JoinHandle<()>,
    /// Tasks that live as long as the server (the `kubernetes` endpoints' reconciler).
    pub(crate) background: Vec<JoinHandle<()>>,
    /// The `kubernetes` Service's endpoint reconciler, when the server has an address to
    /// advertise; [`RunningServer::leave`] stops it.
    pub(crate) endpoints: Option<crate::endpoint_reconciler::Reconciler>,
    /// Where the certificates live (component credentials are issued there).
    pub(crate) tls_dir: std::path::PathBuf,
    /// How long the certificates of this machine's node last (`--cluster-signing-duration`).
    pub(crate) node_lifetime: std::time::Duration,
}

/// What a node agent on the server's machine starts with: where the server is, the CA that
/// signs its certificate, and the node's client certificate.
#[derive(Clone, Debug)]
pub struct NodeCredentials {
    /// The server's URL (`https://127.0.0.1:<port>`).
    pub server: String,
    /// The cluster CA (PEM).
    pub ca_pem: String,
    /// The node's client certificate.
    pub client: crate::pki::CertAndKey,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections.
    pub fn shutdown(self) {}

    /// Takes this server out of the `kubernetes` Service's endpoints at once, as upstream's
    /// API server does when it begins to shut down: its master lease is deleted (rather than
    /// left to expire) and the endpoints are written from the other servers' leases. It keeps
    /// serving meanwhile.
    pub async fn leave(&mut self) {
        if let Some(reconciler) = self.endpoints.take() {
            reconciler.leave().await;
        }
    }

    /// Writes a kubeconfig at `path` for a control-plane component that authenticates as
    /// `user` with a client certificate of its own (`<tls>/<file>.crt`, issued once), to reach
    /// this server over loopback. The component is authorized as upstream authorizes that user
    /// (bootstrap RBAC roles).
    pub fn write_component_kubeconfig(
        &self,
        file: &str,
        user: &str,
        path: &std::path::Path,
    ) -> Result<(), crate::pki::PkiError> {
        self.write_client_kubeconfig(file, user, None, path)
    }

    /// A serving certificate for the kubelet of node `node`, valid for `names`, and the
    /// cluster CA (which signs the API server's kubelet client certificate): what a kubelet
    /// on this machine serves its API with.
    pub fn kubelet_serving(
        &self,
        node: &str,
        names: &[String],
    ) -> Result<(crate::pki::CertAndKey, String), crate::pki::PkiError> {
        let cert = crate::pki::kubelet_serving(&self.tls_dir, node, names, self.node_lifetime)?;
        let ca = std::fs::read_to_string(self.tls_dir.join("ca.crt")).map_err(|source| {
            crate::pki::PkiError::Io {
                path: self.tls_dir.join("ca.crt"),
                source,
            }
        })?;
        Ok((cert, ca))
    }

    /// Like [`RunningServer::write_component_kubeconfig`], for a user in `group` (the
    /// certificate's organization), e.g. a node agent as `system:node:<name>` in
    /// `system:nodes`.
    pub fn write_client_kubeconfig(
        &self,
        file: &str,
        user: &str,
        group: Option<&str>,
        path: &std::path::Path,
    ) -> Result<(), crate::pki::PkiError> {
        let cert = crate::pki::component_client(&self.tls_dir, file, user, group)?;
        let ca = self.ca_pem()?;
        crate::kubeconfig::write(path, 0o600, &self.url(), &ca, &cert)
    }

    /// The cluster CA's certificate.
    fn ca_pem(&self) -> Result<String, crate::pki::PkiError> {
        std::fs::read_to_string(self.tls_dir.join("ca.crt")).map_err(|source| {
            crate::pki::PkiError::Io {
                path: self.tls_dir.join("ca.crt"),
                source,
            }
        })
    }

    /// The URL components on this machine reach the server at.
    fn url(&self) -> String {
        match self.local_addr.ip() {
            ip if ip.is_unspecified() => format!("https://127.0.0.1:{}", self.local_addr.port()),
            _ => format!("https://{}", self.local_addr),
        }
    }

    /// Writes a kubeconfig at `path` for the node agent of node `node` on this machine, with
    /// a client certificate issued afresh (`system:node:<node>` in `system:nodes`, lasting
    /// `--cluster-signing-duration` as a joining node's), which the kubelet then renews
    /// through CertificateSigningRequests; returns what it holds.
    pub fn write_node_kubeconfig(
        &self,
        node: &str,
        path: &std::path::Path,
    ) -> Result<NodeCredentials, crate::pki::PkiError> {
        let client = crate::pki::node_client(&self.tls_dir, node, self.node_lifetime)?;
        let ca_pem = self.ca_pem()?;
        let server = self.url();
        crate::kubeconfig::write(path, 0o600, &server, &ca_pem, &client)?;
        Ok(NodeCredentials {
            server,
            ca_pem,
            client,
        })
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
        for task in &self.background {
            task.abort();
        }
    }
}

/// TLS with the serving certificate of `<tls_dir>/serving.{crt,key}`, re-read when those files
/// change (a renewed certificate is served without a restart), client certificates from the
/// cluster CA (optional), and HTTP/2 preferred to HTTP/1.1.
fn tls_config(
    pki: &Pki,
    tls_dir: &std::path::Path,
    policy: &capstan_client::tls::TlsPolicy,
) -> Result<rustls::ServerConfig, capstan_client::tls::TlsError> {
    let serving = capstan_client::tls::LiveCert::from_files(
        &tls_dir.join("serving.crt"),
        &tls_dir.join("serving.key"),
    )?;
    capstan_client::tls::server_config(
        &pki.ca_cert_pem,
        &[b"h2", b"http/1.1"],
        policy,
        Arc::new(serving),
    )
}

/// The routes of the API server without aggregation (the tests' servers).
#[cfg(test)]
fn router(store: Store, metrics: Arc<Metrics>, api: Arc<Api>, server_address: String) -> Router {
    router_with(store, metrics, api, server_address, None, true)
}

/// The routes of the API server: health, metrics, profiles (with `profiling`), then every API
/// request, those for aggregated group-versions passed on through `aggregator`.
fn router_with(
    store: Store,
    metrics: Arc<Metrics>,
    api: Arc<Api>,
    server_address: String,
    aggregator: Option<Arc<Aggregator>>,
    profiling: bool,
) -> Router {
    let issuer = api.tokens().issuer_discovery(&server_address).map(Arc::new);
    let keys = issuer.clone();
    let router = if profiling {
        Router::new()
            .route("/debug/pprof/", axum::routing::any(profile))
            .route("/debug/pprof/{*name}", axum::routing::any(profile))
    } else {
        Router::new()
    };
    router
        .route(
            crate::authn::serviceaccount::discovery::CONFIG_PATH,
            get(move || async move {
                issuer.map_or_else(|| ApiError::not_found().into_response(), |d| d.config())
            }),
        )
        .route(
            crate::authn::serviceaccount::discovery::JWKS_PATH,
            get(move || async move {
                keys.map_or_else(|| ApiError::not_found().into_response(), |d| d.keyset())
            }),
        )
        .route("/healthz", get(health::healthz))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/version", get(health::version))
        .route("/version/", get(health::version))
        .route("/metrics", {
            let registries = api.registries().clone();
            get(move |headers: axum::http::HeaderMap| async move {
                let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
                metrics.render(accept, &registries.object_counts())
            })
        })
        .fallback(move |request: Request<Body>| {
            let (api, server_address) = (api.clone(), server_address.clone());
            let aggregator = aggregator.clone();
            async move { serve_api(&api, aggregator.as_deref(), &server_address, request).await }
        })
        .with_state(store)
}

/// `/debug/pprof/…`: the process's CPU and heap profiles ([`capstan_pprof`]), reached only
/// through the chain's authorization of the non-resource path.
async fn profile(request: Request<Body>) -> Response {
    capstan_pprof::serve_request(request)
        .await
        .map(Body::from)
        .into_response()
}

/// The OpenAPI documents: `/openapi/v2` (JSON, or the protobuf client-go asks for) and
/// `/openapi/v3` with one document per group-version, each with its hash as ETag.
fn openapi(api: &Api, path: &str, headers: &axum::http::HeaderMap) -> Option<Response> {
    use axum::http::{StatusCode, header};
    use capstan_api::openapi as docs;
    if path != "/openapi/v2" && path != "/openapi/v3" && !path.starts_with("/openapi/v3/") {
        return None;
    }
    let published = api.registries().openapi();
    if path == "/openapi/v2" {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if docs::V2_PROTOBUF_ACCEPT.iter().any(|m| accept.contains(m)) {
            let body = published.v2_protobuf();
            return Some(
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, docs::V2_PROTOBUF_CONTENT_TYPE)],
                    body.as_ref().clone(),
                )
                    .into_response(),
            );
        }
    }
    let doc = if path == "/openapi/v2" {
        published.v2_document()
    } else if path == "/openapi/v3" {
        return Some(axum::Json(published.v3_root()).into_response());
    } else {
        let rest = path.strip_prefix("/openapi/v3/")?;
        let Some(doc) = published.v3_document_at(rest) else {
            return Some(ApiError::not_found().into_response());
        };
        doc
    };
    // A v3 document's URL names its hash; the v2 document changes with the custom resources.
    let cache = if path == "/openapi/v2" {
        "no-cache, private"
    } else {
        "public, immutable"
    };
    let etag = format!("\"{}\"", doc.hash);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        return Some((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    Some(
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (header::ETAG, etag),
                (header::CACHE_CONTROL, cache.to_owned()),
            ],
            doc.json.clone(),
        )
            .into_response(),
    )
}

/// Discovery documents and resource requests.
async fn serve_api(
    api: &Api,
    aggregator: Option<&Aggregator>,
    server_address: &str,
    request: Request<Body>,
) -> Response {
    let Some(info) = request.extensions().get::<RequestInfo>().cloned() else {
        return ApiError::not_found().into_response();
    };
    // A group-version an extension API server serves: its requests, resources or not, are
    // passed on (authenticated and authorized here first).
    if let Some(aggregator) = aggregator
        && let Some(remote) = aggregator.remote_for(request.uri().path()).await
    {
        return crate::aggregator::proxy::serve(aggregator, &remote, request).await;
    }
    if let Some(metrics) = api.metrics_api()
        && info.is_resource_request
        && info.api_group == capstan_api::resourcemetrics::GROUP
        && info.api_version == capstan_api::resourcemetrics::VERSION
    {
        return metrics.serve(&info, request).await;
    }
    if info.is_resource_request {
        return api.serve(&info, request).await;
    }
    if request.method() != axum::http::Method::GET {
        return ApiError::not_found().into_response();
    }
    let path = request.uri().path().trim_end_matches('/');
    if let Some(response) = openapi(api, path, request.headers()) {
        return response;
    }
    let mut remote = match aggregator {
        Some(aggregator) => aggregator.discovery().await,
        None => Vec::new(),
    };
    if api.metrics_api().is_some() {
        remote.push(crate::handlers::resourcemetrics::MetricsApi::discovery());
    }
    let served = discovery::Served {
        custom: api.registries().custom_resources(),
        remote,
    };
    discovery::respond(
        path.trim_start_matches('/'),
        request.headers(),
        server_address,
        &served,
    )
    .unwrap_or_else(|| ApiError::not_found().into_response())
}

/// Asks `authorizer` whether `user` may make the request (whose raw query is `query`):
/// anonymous users who may not are told to authenticate (401), others are forbidden (403, with
/// the authorizers' reasons); when an authorizer could not decide (a webhook that could not be
/// asked) and none allowed, the answer is upstream's plain-text 500.
async fn authorize(
    user: &User,
    info: &RequestInfo,
    query: &str,
    authorizer: &Authorizer,
    annotations: Option<&crate::audit::Annotations>,
) -> Result<(), Response> {
    let decision = authorizer
        .authorize(user, &Attributes::of_request(info, query))
        .await;
    // Upstream's audit annotations of the decision.
    const DECISION: &str = "authorization.k8s.io/decision";
    const REASON: &str = "authorization.k8s.io/reason";
    if decision.allowed {
        if let Some(annotations) = annotations {
            annotations.add(DECISION, "allow");
            annotations.add(REASON, decision.reason.as_str());
        }
        return Ok(());
    }
    if let Some(annotations) = annotations {
        if decision.error.is_empty() {
            annotations.add(DECISION, "forbid");
            annotations.add(REASON, decision.reason.as_str());
        } else {
            annotations.add(REASON, "internal error");
        }
    }
    if !decision.error.is_empty() {
        let uri = if query.is_empty() {
            info.path.clone()
        } else {
            format!("{}?{query}", info.path)
        };
        return Err(internal_error(&uri, &decision.error));
    }
    if user.is_anonymous() {
        return Err(ApiError::unauthorized().into_response());
    }
    Err(ApiError::forbidden_because(info, &user.name, &decision.reason).into_response())
}

/// Upstream's `responsewriters.InternalError`: a plain-text 500 naming the request URI (as Go
/// quotes it) and the error, with `&`, `<` and `>` escaped.
fn internal_error(uri: &str, error: &str) -> Response {
    let text = format!(
        "Internal Server Error: {}: {error}",
        capstan_api::field::go_quote(uri)
    )
    .replace('&', "&amp;")
    .replace('<', "&lt;")
    .replace('>', "&gt;");
    (
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        [
            (header::CONTENT_TYPE, "text/plain"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}

/// How long a request (other than a watch) may take unless it asks for less, as upstream's
/// default `--request-timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Watches, and the pod subresources that stream from the node (logs, exec, attach,
/// port-forward), last as long as they last; they are neither counted nor timed out here, as
/// upstream's long-running request check.
fn is_long_running(info: &RequestInfo) -> bool {
    info.verb == "watch"
        || info.verb == "proxy"
        || matches!(
            info.subresource.as_str(),
            "log" | "exec" | "attach" | "portforward" | "proxy"
        )
}

/// The answer to a request that API Priority and Fairness turned away.
fn too_many_requests() -> Response {
    let mut response = ApiError::from(capstan_api::StatusError::too_many_requests(
        "please try again later",
        1,
    ))
    .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

/// Serves a short request under the request timeout (`?timeout=`, at most the default).
async fn timed(info: &RequestInfo, query: &str, request: Request<Body>, app: Router) -> Response {
    let asked = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "timeout")
        .and_then(|(_, v)| capstan_api::parse_go_duration(&v));
    let limit = asked.map_or(REQUEST_TIMEOUT, |t| t.min(REQUEST_TIMEOUT));
    match tokio::time::timeout(limit, app.oneshot(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(infallible)) => match infallible {},
        Err(_) => {
            tracing::warn!(verb = %info.verb, resource = %info.resource, name = %info.name, "request timed out");
            ApiError::from(capstan_api::StatusError::timeout(
                &format!("request did not complete within requested timeout - context deadline exceeded ({limit:?})"),
                0,
            ))
            .into_response()
        }
    }
}

/// What follows authentication: a seat of the request's priority level (API Priority and
/// Fairness, which upstream runs before authorization too), authorization, then the handler.
async fn dispatch(
    mut request: Request<Body>,
    user: User,
    info: &RequestInfo,
    query: &str,
    app: Router,
    control: &Control,
) -> Response {
    let classification = control.flowcontrol.classify(&user, info);
    let seat = match &classification {
        Some(classification) if !is_long_running(info) => match classification.admit().await {
            Ok(seat) => seat,
            Err(rejected) => {
                tracing::debug!(user = %user.name, ?rejected, "request rejected by flow control");
                let mut response = too_many_requests();
                pf_headers(&mut response, classification);
                return response;
            }
        },
        _ => None,
    };
    let annotations = request
        .extensions()
        .get::<crate::audit::Annotations>()
        .cloned();
    let mut response = match authorize(
        &user,
        info,
        query,
        &control.authorizer,
        annotations.as_ref(),
    )
    .await
    {
        Err(refusal) => refusal,
        Ok(()) => {
            request.extensions_mut().insert(control.authorizer.clone());
            request
                .extensions_mut()
                .insert(control.authenticator.clone());
            request.extensions_mut().insert(user);
            request.extensions_mut().insert(info.clone());
            if is_long_running(info) {
                match app.oneshot(request).await {
                    Ok(response) => response,
                    Err(infallible) => match infallible {},
                }
            } else {
                timed(info, query, request, app).await
            }
        }
    };
    if let Some(classification) = &classification {
        pf_headers(&mut response, classification);
    }
    match seat {
        // The seat is held until the answer has been written, as upstream's handlers write
        // theirs before they return: a large or slowly read answer keeps its seat.
        Some(seat) => response.map(|body| Body::new(Guarded { body, _guard: seat })),
        None => response,
    }
}

/// A response body that holds `guard` until it is dropped (sent, or abandoned): a request's
/// seat, or the audit event written when a long-running answer ends.
struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G: Send + Unpin + 'static> hyper::body::Body for Guarded<G> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// What decides whether a request runs: API Priority and Fairness, then authorization.
#[derive(Clone, Debug)]
pub(crate) struct Control {
    /// The classifier and priority levels.
    pub flowcontrol: Arc<Flowcontrol>,
    /// The authorizer.
    pub authorizer: Arc<Authorizer>,
    /// The authenticator, for the reviews that ask it about a token (TokenReview).
    pub authenticator: Arc<Authenticator>,
    /// Node joins (`/cacerts`, `/v1-capstan/node`), served before authentication.
    pub join: Arc<crate::join::Join>,
    /// The audit policy and log (`--audit-policy-file`, `--audit-log-path`).
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// The web dashboard's static assets (`/dashboard/`), served before authentication; none
    /// with `--disable-dashboard`.
    pub dashboard: Option<Router>,
}

/// The `X-Kubernetes-PF-*` headers naming the FlowSchema and priority level of a request.
fn pf_headers(response: &mut Response, classification: &Classification) {
    for (name, value) in [
        ("x-kubernetes-pf-flowschema-uid", &classification.schema_uid),
        (
            "x-kubernetes-pf-prioritylevel-uid",
            &classification.level_uid,
        ),
    ] {
        if let Ok(value) = axum::http::HeaderValue::from_str(value) {
            response.headers_mut().insert(name, value);
        }
    }
}

/// The chain every request goes through, as upstream's handler chain: authentication, request
/// info, impersonation, priority and fairness, authorization, then the handler; metrics record
/// the outcome of all of it.
async fn handle(
    mut request: Request<Body>,
    certificate_user: Option<&User>,
    authenticator: &Authenticator,
    app: Router,
    metrics: &Metrics,
    control: &Control,
) -> Response {
    if crate::join::Join::serves(request.uri().path()) {
        return control.join.serve(request).await;
    }
    // The dashboard's page and scripts hold no cluster data and must load before the user has
    // logged in; what the page then reads goes through this chain with the user's credentials.
    if let Some(dashboard) = &control.dashboard
        && capstan_dashboard::serves(request.uri().path())
    {
        return match dashboard.clone().oneshot(request).await {
            Ok(response) => response,
            Err(infallible) => match infallible {},
        };
    }
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let info = RequestInfo::new(&method, request.uri().path(), &query);
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let dry_run = query.split('&').any(|kv| kv.starts_with("dryRun="));
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let audit_id = crate::registry::object::new_uid();
    let connection = request
        .extensions()
        .get::<Arc<crate::authn::ConnectionToken>>()
        .cloned();
    let mut response = match authenticator
        .authenticate(
            certificate_user,
            authorization,
            request.uri().path(),
            connection.as_deref(),
        )
        .await
    {
        Authenticated::Rejected => {
            if let Some(auditor) = control.audit.as_deref() {
                let (uri, headers) = (request.uri(), request.headers());
                let source = request
                    .extensions()
                    .get::<crate::handlers::proxy::forward::ClientAddr>()
                    .map(|addr| addr.0.ip());
                audit_failed_authentication(auditor, &audit_id, uri, headers, source, &info).await;
            }
            ApiError::unauthorized().into_response()
        }
        Authenticated::User(user) => match control.audit.as_deref() {
            Some(auditor) => {
                audited(
                    auditor, &audit_id, request, user, &info, &query, app, control,
                )
                .await
            }
            None => {
                match crate::impersonate::acting_user(
                    user,
                    request.headers_mut(),
                    &control.authorizer,
                )
                .await
                {
                    Ok(user) => dispatch(request, user, &info, &query, app, control).await,
                    Err(error) => error.into_response(),
                }
            }
        },
    };
    if let Ok(value) = axum::http::HeaderValue::from_str(&audit_id) {
        response.headers_mut().insert("audit-id", value);
    }
    metrics.observe(
        &info,
        &method,
        content_type.as_deref(),
        dry_run,
        response.status(),
        started.elapsed(),
    );
    response
}

/// The audit event of a request whose credentials were refused, as upstream's failed
/// authentication filter writes it: one event at `ResponseStarted` with no user, the 401 and
/// which kinds of credentials were tried; the level is the policy's for a request without a
/// user (rules naming users or groups do not match it).
async fn audit_failed_authentication(
    auditor: &crate::audit::Auditor,
    audit_id: &str,
    uri: &axum::http::Uri,
    headers: &axum::http::HeaderMap,
    source: Option<std::net::IpAddr>,
    info: &RequestInfo,
) {
    use crate::audit::{self, Event, EventUser, Level};
    let nobody = User::default();
    let (level, omit) = auditor.evaluate(&nobody, info);
    if level == Level::None || omit.iter().any(|s| s == "ResponseStarted") {
        return;
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim();
    let scheme = authorization.split(' ').next().unwrap_or_default();
    let mut attempted = Vec::new();
    if scheme.eq_ignore_ascii_case("basic") {
        attempted.push("basic");
    }
    if scheme.eq_ignore_ascii_case("bearer") && authorization.contains(' ') {
        attempted.push("bearer");
    }
    let access_token = uri.query().unwrap_or_default().split('&').any(|kv| {
        kv.strip_prefix("access_token=")
            .is_some_and(|t| !t.is_empty())
    });
    if access_token {
        attempted.push("access_token");
    }
    let message = if attempted.is_empty() {
        "Authentication failed, no credentials provided".to_owned()
    } else {
        format!("Authentication failed, attempted: {}", attempted.join(", "))
    };
    let request_uri = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), ToString::to_string);
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let source_ips: Vec<String> = source.iter().map(ToString::to_string).collect();
    let received = audit::micro_time();
    auditor
        .write(&Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id,
            stage: "ResponseStarted",
            request_uri: &request_uri,
            verb: &info.verb,
            user: EventUser::of(&nobody),
            impersonated_user: None,
            source_ips: &source_ips,
            user_agent,
            object_ref: audit::object_ref(info),
            response_status: Some(audit::ResponseStatus::with_message(401, message)),
            request_object: None,
            response_object: None,
            request_received_timestamp: &received,
            stage_timestamp: audit::micro_time(),
            annotations: Default::default(),
        })
        .await;
}

/// The largest request or response body an audit event carries.
const AUDIT_BODY_LIMIT: usize = 3 * 1024 * 1024;

/// [`handle`]'s impersonation and dispatch, audited as the policy says: the event at
/// `RequestReceived`, then at `ResponseComplete` (a long-running request's at
/// `ResponseStarted`, and at `ResponseComplete` once its answer has been sent).
#[allow(clippy::too_many_arguments)]
async fn audited(
    auditor: &crate::audit::Auditor,
    audit_id: &str,
    mut request: Request<Body>,
    user: User,
    info: &RequestInfo,
    query: &str,
    app: Router,
    control: &Control,
) -> Response {
    use crate::audit::{self, Event, EventUser, Level};
    let (level, omit) = auditor.evaluate(&user, info);
    if level == Level::None {
        return match crate::impersonate::acting_user(
            user,
            request.headers_mut(),
            &control.authorizer,
        )
        .await
        {
            Ok(user) => dispatch(request, user, info, query, app, control).await,
            Err(error) => error.into_response(),
        };
    }
    let received = audit::micro_time();
    let request_uri = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_owned(), ToString::to_string);
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let source_ips: Vec<String> = request
        .extensions()
        .get::<crate::handlers::proxy::forward::ClientAddr>()
        .map(|addr| vec![addr.0.ip().to_string()])
        .unwrap_or_default();
    // The request's object, at Request level and above, for writes.
    let mut request_object = None;
    if level >= Level::Request && matches!(info.verb.as_str(), "create" | "update" | "patch") {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, AUDIT_BODY_LIMIT)
            .await
            .unwrap_or_default();
        request_object = audit::object_of(&bytes);
        request = Request::from_parts(parts, Body::from(bytes));
    }
    let original = user.clone();
    // The first event comes before the handler: the path's reference only, and no object (as
    // upstream's, whose handler logs the request's object).
    let event = |stage: &'static str, status: Option<audit::ResponseStatus>| Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level,
        audit_id,
        stage,
        request_uri: &request_uri,
        verb: &info.verb,
        user: EventUser::of(&original),
        impersonated_user: None,
        source_ips: &source_ips,
        user_agent: &user_agent,
        object_ref: audit::object_ref(info),
        response_status: status,
        request_object: None,
        response_object: None,
        request_received_timestamp: &received,
        stage_timestamp: audit::micro_time(),
        annotations: Default::default(),
    };
    let omitted = |stage: &str| omit.iter().any(|s| s == stage);
    // What the authorizer and admission note for the events written once it is handled.
    let annotations = audit::Annotations::new(level);
    request.extensions_mut().insert(annotations.clone());
    let noted = audit::RequestObject::default();
    request.extensions_mut().insert(noted.clone());
    // Under a `blocking-strict` audit webhook, a request whose first event cannot be
    // delivered goes no further (upstream's audit filter).
    if !omitted("RequestReceived") && !auditor.write(&event("RequestReceived", None)).await {
        return internal_error(&request_uri, "failed to store audit event");
    }
    let (response, acting) =
        match crate::impersonate::acting_user(user, request.headers_mut(), &control.authorizer)
            .await
        {
            Ok(acting) => {
                let impersonated = (acting != original).then(|| acting.clone());
                (
                    dispatch(request, acting, info, query, app, control).await,
                    impersonated,
                )
            }
            Err(error) => (error.into_response(), None),
        };
    // Later stages name the user the request was made as, and the object the handler saw.
    let seen = noted.seen();
    let event = |stage: &'static str, status: Option<audit::ResponseStatus>| {
        let mut event = event(stage, status);
        event.impersonated_user = acting.as_ref().map(EventUser::of);
        event.object_ref = event.object_ref.map(|r| r.completed(&seen));
        event.request_object = request_object.as_deref();
        event.annotations = annotations.snapshot();
        event
    };
    let code = response.status().as_u16();
    if is_long_running(info) {
        if !omitted("ResponseStarted") {
            auditor
                .write(&event(
                    "ResponseStarted",
                    Some(audit::response_status(code, b"")),
                ))
                .await;
        }
        // Written when the answer ends (the watch closes, the stream is done).
        let complete = (!omitted("ResponseComplete"))
            .then(|| {
                serde_json::to_vec(&event(
                    "ResponseComplete",
                    Some(audit::response_status(code, b"")),
                ))
                .ok()
            })
            .flatten();
        return match complete {
            Some(line) => response.map(|body| {
                Body::new(Guarded {
                    body,
                    _guard: AuditOnEnd {
                        line: Some(line),
                        auditor: control.audit.clone(),
                    },
                })
            }),
            None => response,
        };
    }
    if omitted("ResponseComplete") {
        return response;
    }
    // Short answers are read here when the event needs them: failures for their Status,
    // RequestResponse for the object.
    if code < 300 && level < Level::RequestResponse {
        auditor
            .write(&event(
                "ResponseComplete",
                Some(audit::response_status(code, b"")),
            ))
            .await;
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let object = (level == Level::RequestResponse)
        .then(|| audit::object_of(&bytes))
        .flatten();
    let mut complete = event(
        "ResponseComplete",
        Some(audit::response_status(code, &bytes)),
    );
    complete.response_object = object.as_deref();
    auditor.write(&complete).await;
    Response::from_parts(parts, Body::from(bytes))
}

/// A long-running answer's `ResponseComplete` event, written when its body is dropped.
struct AuditOnEnd {
    line: Option<Vec<u8>>,
    auditor: Option<Arc<crate::audit::Auditor>>,
}

impl Drop for AuditOnEnd {
    fn drop(&mut self) {
        if let (Some(line), Some(auditor)) = (self.line.take(), &self.auditor) {
            auditor.write_line(line);
        }
    }
}

/// The authorizers of `--authorization-mode`, with the webhook when it is one of them,
/// checked as upstream's options are.
fn authorization_modes(
    settings: &crate::AuthorizationConfig,
) -> Result<crate::authz::Modes, StartError> {
    use crate::authz::Mode;
    let webhook_mode = settings.modes.contains(&Mode::Webhook);
    let webhook = match (&settings.webhook, webhook_mode) {
        (None, true) => {
            return Err(StartError::Config(
                "authorization-mode Webhook's authorization config file not passed".to_owned(),
            ));
        }
        (Some(_), false) => {
            return Err(StartError::Config(
                "cannot specify --authorization-webhook-config-file without mode Webhook"
                    .to_owned(),
            ));
        }
        (None, false) => None,
        (Some(settings), true) => Some(Arc::new(crate::authz::webhook::AuthorizationWebhook::new(
            crate::remote::Service::load(
                "--authorization-webhook-config-file",
                &settings.config_file,
            )
            .map_err(StartError::Config)?,
            crate::authz::webhook::Version::parse(&settings.version).map_err(StartError::Config)?,
            settings.authorized_ttl,
            settings.unauthorized_ttl,
        ))),
    };
    Ok(crate::authz::Modes {
        order: settings.modes.clone(),
        webhook,
    })
}

// What the server is made of, each built by `crate::start_with`: bundling them would only
// move the list.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn listen(
    config: &Config,
    pki: &Pki,
    tokens: TokenFile,
    store: Store,
    api: Arc<Api>,
    aggregator: Arc<Aggregator>,
    join: crate::join::Join,
    on_bound: impl FnOnce(u16) -> Result<(), StartError>,
) -> Result<RunningServer, StartError> {
    let (issuers, anonymous) = config
        .authentication
        .build(&[crate::authn::serviceaccount::ISSUER])
        .map_err(StartError::Config)?;
    let token_webhook = match &config.authentication_token_webhook {
        Some(settings) => Some(Arc::new(crate::authn::webhook::TokenWebhook::new(
            crate::remote::Service::load(
                "--authentication-token-webhook-config-file",
                &settings.config_file,
            )
            .map_err(StartError::Config)?,
            crate::authn::webhook::Version::parse(&settings.version).map_err(StartError::Config)?,
            vec![crate::authn::serviceaccount::ISSUER.to_owned()],
            settings.cache_ttl,
        ))),
        None => None,
    };
    let authenticator = Arc::new(Authenticator {
        tokens,
        service_accounts: Some(api.tokens().clone()),
        bootstrap_secrets: api.registries().core("secrets"),
        jwt: std::sync::RwLock::new(Arc::new(issuers)),
        anonymous,
        cache: Default::default(),
        webhook: token_webhook,
    });
    authenticator.watch_config(config.authentication.clone());
    let tls_dir = config.data_dir.join("tls");
    let acceptor = TlsAcceptor::from(Arc::new(tls_config(pki, &tls_dir, &config.tls)?));
    let modes = authorization_modes(&config.authorization)?;
    let audit_webhook = match config.audit.as_ref().and_then(|a| a.webhook.as_ref()) {
        Some(settings) => Some(crate::audit::webhook::AuditWebhook::new(
            crate::remote::Service::load("--audit-webhook-config-file", &settings.config_file)
                .map_err(StartError::Config)?,
            settings.mode,
            settings.batching,
            settings.initial_backoff,
        )),
        None => None,
    };
    let addr = SocketAddr::new(config.bind_address, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| StartError::Listen { addr, source })?;
    on_bound(local_addr.port())?;
    // The default objects exist before the first request is answered (so before /readyz says
    // ok); connections wait in the listen backlog meanwhile.
    crate::bootstrap::ensure_defaults(
        api.registries(),
        api.service_cidr(),
        local_addr.port(),
        config.default_storage_class,
    )
    .await
    .map_err(|e| StartError::Defaults(e.status().to_json().to_string()))?;
    // Services stored before allocation moved to IPAddresses and the bitmap (or whose
    // allocations were lost) are accounted for before any new Service is answered, as
    // upstream's server waits for its repair controllers' first pass.
    crate::registry::services::repair::first_pass(
        api.registries().clone(),
        api.allocators().clone(),
        config.allocation_repair,
    )
    .await;
    let registries = api.registries();
    crate::flowcontrol::ensure_bootstrap(registries)
        .await
        .map_err(|e| StartError::Defaults(e.status().to_json().to_string()))?;
    crate::authz::ensure_bootstrap(registries, !config.controller_credentials)
        .await
        .map_err(|e| StartError::Defaults(e.status().to_json().to_string()))?;
    let flowcontrol = Flowcontrol::start(registries.clone());
    let authorizer = Authorizer::start(registries.clone(), modes);
    let loaded = match flowcontrol.refresh(registries).await {
        Ok(()) => authorizer.refresh(registries).await,
        Err(error) => Err(error),
    };
    loaded.map_err(|e| StartError::Defaults(e.status().to_json().to_string()))?;
    let audit = match &config.audit {
        Some(settings) => Some(Arc::new(
            crate::audit::Auditor::new(
                &settings.policy_file,
                settings
                    .log_path
                    .as_ref()
                    .map(|path| crate::audit::LogSettings {
                        path: path.clone(),
                        max_size_mb: settings.max_size_mb,
                        max_backups: settings.max_backups,
                        max_age_days: settings.max_age_days,
                    }),
                audit_webhook,
            )
            .map_err(StartError::Config)?,
        )),
        None => None,
    };
    let control = Control {
        flowcontrol,
        authorizer,
        authenticator: authenticator.clone(),
        join: Arc::new(join),
        audit,
        dashboard: config.dashboard.then(capstan_dashboard::router),
    };
    let metrics = Metrics::new();
    // Where clients reach this server (upstream's external address): the advertised one.
    let external = match config.advertise_address {
        Some(ip) => SocketAddr::new(ip, local_addr.port()).to_string(),
        None => local_addr.to_string(),
    };
    let app = router_with(
        store,
        metrics.clone(),
        api,
        external,
        Some(aggregator),
        config.profiling,
    );
    let accept_loop = tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Small API answers must not wait for Nagle's algorithm (40 ms stalls otherwise).
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%peer, %error, "cannot set TCP_NODELAY");
            }
            let (acceptor, app, authenticator, metrics, control) = (
                acceptor.clone(),
                app.clone(),
                authenticator.clone(),
                metrics.clone(),
                control.clone(),
            );
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                };
                let certificate_user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|cert| User::from_certificate(cert));
                let connection_token = Arc::new(crate::authn::ConnectionToken::default());
                let service =
                    hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let (app, authenticator, metrics, control) = (
                            app.clone(),
                            authenticator.clone(),
                            metrics.clone(),
                            control.clone(),
                        );
                        let certificate_user = certificate_user.clone();
                        let mut request = request.map(Body::new);
                        request
                            .extensions_mut()
                            .insert(crate::handlers::proxy::forward::ClientAddr(peer));
                        request.extensions_mut().insert(connection_token.clone());
                        async move {
                            let response = handle(
                                request,
                                certificate_user.as_ref(),
                                &authenticator,
                                app,
                                &metrics,
                                &control,
                            )
                            .await;
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                if let Err(error) = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
            });
        }
    });
    Ok(RunningServer {
        local_addr,
        accept_loop,
        background: Vec::new(),
        endpoints: None,
        tls_dir,
        node_lifetime: config.node_cert_lifetime,
    })
}

#[cfg(test)]
#[path = "authn/serviceaccount/serve_tests.rs"]
mod serviceaccount_tests;

#[cfg(test)]
#[path = "authz/node_tests.rs"]
mod nodeauthz_tests;

#[cfg(test)]
#[path = "authz/escalation_tests.rs"]
mod escalation_tests;

#[cfg(test)]
#[path = "admission/cel_authz_tests.rs"]
mod cel_authz_tests;

#[cfg(test)]
#[path = "handlers/proxy/chain_tests.rs"]
mod proxy_chain_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    async fn call(user: Option<User>, path: &str) -> (StatusCode, serde_json::Value) {
        send(user, path).await
    }

    /// A server's API with its default objects and flow control configuration.
    pub(super) async fn started() -> (tempfile::TempDir, Store, Arc<Api>, Control) {
        let dir = tempfile::tempdir().unwrap();
        let (api, store) = crate::test_support::bootstrapped(dir.path(), false).await;
        let api = Arc::new(api);
        crate::flowcontrol::ensure_bootstrap(api.registries())
            .await
            .unwrap();
        crate::authz::ensure_bootstrap(api.registries(), true)
            .await
            .unwrap();
        let tls = dir.path().join("tls");
        let pki = crate::pki::load_or_create(&tls, &["localhost".to_owned()]).unwrap();
        let join =
            crate::join::Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, None).unwrap();
        let control = Control {
            flowcontrol: Arc::new(Flowcontrol::default()),
            authorizer: Arc::new(Authorizer::over(api.registries())),
            authenticator: Arc::new(Authenticator::default()),
            join: Arc::new(join),
            audit: None,
            dashboard: Some(capstan_dashboard::router()),
        };
        control.flowcontrol.refresh(api.registries()).await.unwrap();
        control.authorizer.refresh(api.registries()).await.unwrap();
        (dir, store, api, control)
    }

    async fn send_to(
        store: &Store,
        api: &Arc<Api>,
        control: &Control,
        user: Option<&User>,
        path: &str,
    ) -> Response {
        let metrics = Metrics::new();
        let request = Request::get(path).body(Body::empty()).unwrap();
        let app = router(
            store.clone(),
            metrics.clone(),
            api.clone(),
            "127.0.0.1:6443".into(),
        );
        handle(
            request,
            user,
            &Authenticator::default(),
            app,
            &metrics,
            control,
        )
        .await
    }

    async fn send(user: Option<User>, path: &str) -> (StatusCode, serde_json::Value) {
        let (_dir, store, api, control) = started().await;
        let response = send_to(&store, &api, &control, user.as_ref(), path).await;
        let code = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test]
    async fn users_outside_system_masters_are_forbidden_with_a_status() {
        let user = User {
            name: "jane".into(),
            groups: vec!["developers".into(), "system:authenticated".into()],
            ..User::default()
        };
        let (code, body) = call(Some(user.clone()), "/api/v1/namespaces/default/pods/web").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(body["reason"], "Forbidden");
        assert_eq!(body["code"], 403);
        assert_eq!(
            body["message"],
            "pods \"web\" is forbidden: User \"jane\" cannot get resource \"pods\" in API \
             group \"\" in the namespace \"default\""
        );
        assert_eq!(
            body["details"],
            serde_json::json!({"name": "web", "kind": "pods"})
        );
        let (code, body) = call(Some(user), "/metrics").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(
            body["message"],
            "forbidden: User \"jane\" cannot get path \"/metrics\""
        );
        assert_eq!(body["details"], serde_json::json!({}));
    }

    /// `/debug/pprof/` is a non-resource path like any other: cluster admins read the
    /// profiles, other users are refused before anything is profiled.
    #[tokio::test]
    async fn profiles_are_served_to_users_authorized_for_their_path() {
        let jane = User {
            name: "jane".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        let (code, body) = call(Some(jane), "/debug/pprof/heap").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(
            body["message"],
            "forbidden: User \"jane\" cannot get path \"/debug/pprof/heap\""
        );
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..User::default()
        };
        let (_dir, store, api, control) = started().await;
        let response = send_to(&store, &api, &control, Some(&admin), "/debug/pprof/heap").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/octet-stream"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .unwrap();
        let profile = capstan_pprof::profile::Profile::from_gzip(&body).unwrap();
        assert_eq!(profile.sample_type.len(), 4, "Go's four heap sample types");
        let response = send_to(&store, &api, &control, Some(&admin), "/debug/pprof/").await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn admins_get_not_found_for_what_is_not_served_yet() {
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..User::default()
        };
        let (code, body) = call(Some(admin), "/apis/nope.example.com/v1").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(body["reason"], "NotFound");
    }

    #[tokio::test]
    async fn priority_levels_admit_name_themselves_and_reject_with_429() {
        let (_dir, store, api, control) = started().await;
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        let response = send_to(&store, &api, &control, Some(&admin), "/api/v1/namespaces").await;
        assert_eq!(response.status(), StatusCode::OK);
        let exempt = api
            .registry("flowcontrol.apiserver.k8s.io", "v1", "flowschemas")
            .unwrap()
            .get(None, "exempt")
            .await
            .unwrap();
        assert_eq!(
            response.headers()["x-kubernetes-pf-flowschema-uid"],
            exempt["metadata"]["uid"].as_str().unwrap()
        );
        // A level without seats that rejects, and a schema sending one user there.
        let levels = api
            .registry(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                "prioritylevelconfigurations",
            )
            .unwrap();
        let level = serde_json::json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "jail"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0,
                     "limitResponse": {"type": "Reject"}}},
        });
        let level = levels
            .create(None, level, &Default::default())
            .await
            .unwrap()
            .object;
        let schema = serde_json::json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "jailed"},
            "spec": {"priorityLevelConfiguration": {"name": "jail"}, "matchingPrecedence": 100,
                     "rules": [{"subjects": [{"kind": "User", "user": {"name": "mallory"}}],
                                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                                   "resources": ["*"], "namespaces": ["*"],
                                                   "clusterScope": true}]}]},
        });
        api.registry("flowcontrol.apiserver.k8s.io", "v1", "flowschemas")
            .unwrap()
            .create(None, schema, &Default::default())
            .await
            .unwrap();
        control.flowcontrol.refresh(api.registries()).await.unwrap();
        let mallory = User {
            name: "mallory".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        let response = send_to(&store, &api, &control, Some(&mallory), "/api/v1/pods").await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            response.headers()["x-kubernetes-pf-prioritylevel-uid"],
            level["metadata"]["uid"].as_str().unwrap()
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["reason"], "TooManyRequests");
        assert_eq!(body["details"]["retryAfterSeconds"], 1);
        // The schema records that its level exists.
        let jailed = api
            .registry("flowcontrol.apiserver.k8s.io", "v1", "flowschemas")
            .unwrap()
            .get(None, "jailed")
            .await
            .unwrap();
        assert_eq!(jailed["status"]["conditions"][0]["type"], "Dangling");
        assert_eq!(jailed["status"]["conditions"][0]["status"], "False");
        // Everyone else is unaffected.
        let response = send_to(&store, &api, &control, Some(&admin), "/api/v1/pods").await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn role_bindings_grant_what_their_roles_allow() {
        let (_dir, store, api, control) = started().await;
        let jane = User {
            name: "jane".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        let get = async |path: &str| {
            send_to(&store, &api, &control, Some(&jane), path)
                .await
                .status()
        };
        assert_eq!(
            get("/api/v1/namespaces/default/configmaps").await,
            StatusCode::FORBIDDEN
        );
        // Discovery and version come with the bootstrap roles.
        assert_eq!(get("/apis").await, StatusCode::OK);
        assert_eq!(get("/version").await, StatusCode::OK);
        let rbac = |plural: &str| {
            api.registry("rbac.authorization.k8s.io", "v1", plural)
                .unwrap()
        };
        rbac("roles")
            .create(
                Some("default"),
                serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "cm-reader"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
                &Default::default(),
            )
            .await
            .unwrap();
        rbac("rolebindings")
            .create(
                Some("default"),
                serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "jane-reads"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}]}),
                &Default::default(),
            )
            .await
            .unwrap();
        control.authorizer.refresh(api.registries()).await.unwrap();
        assert_eq!(
            get("/api/v1/namespaces/default/configmaps").await,
            StatusCode::OK
        );
        assert_eq!(
            get("/api/v1/namespaces/kube-system/configmaps").await,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            get("/api/v1/namespaces/default/secrets").await,
            StatusCode::FORBIDDEN
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_server_names_its_cluster_ip_and_writes_the_kubeconfig_before_answering() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::test_support::sqlite(dir.path()).await;
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            bind_address: "127.0.0.1".parse().unwrap(),
            port: 0,
            tls_sans: Vec::new(),
            tls: Default::default(),
            encryption_provider_config: None,
            secrets_encryption: false,
            audit: None,
            kubeconfig_path: kubeconfig.clone(),
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
        // A client that connects as soon as the port is bound gets its answer only after the
        // kubeconfig is written: connections wait in the backlog until then.
        let (tx, rx) = std::sync::mpsc::channel();
        let watched = kubeconfig.clone();
        let server = crate::start_with(config, store, move |port| {
            let client = std::thread::spawn(move || {
                let out = std::process::Command::new("curl")
                    .args(["-sk", "--max-time", "20"])
                    .arg(format!("https://127.0.0.1:{port}/healthz"))
                    .output()
                    .unwrap();
                (
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    watched.exists(),
                )
            });
            tx.send(client).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        })
        .await
        .unwrap();
        let (answer, kubeconfig_there) = rx.recv().unwrap().join().unwrap();
        assert_eq!(answer, "ok");
        assert!(
            kubeconfig_there,
            "answered before the kubeconfig was written"
        );
        // The serving certificate names the `kubernetes` Service's address.
        let pem = std::fs::read(dir.path().join("tls/serving.crt")).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let cert = pem.parse_x509().unwrap();
        let names = cert.subject_alternative_name().unwrap().unwrap();
        assert!(
            names.value.general_names.iter().any(|n| matches!(
                n,
                x509_parser::extensions::GeneralName::IPAddress(ip) if *ip == [10, 96, 0, 1]
            )),
            "{:?}",
            names.value.general_names
        );
        drop(server);
    }

    #[tokio::test]
    async fn anonymous_users_see_only_the_public_paths() {
        assert_eq!(call(None, "/healthz").await.0, StatusCode::OK);
        assert_eq!(call(None, "/version").await.0, StatusCode::OK);
        let (code, body) = call(None, "/metrics").await;
        assert_eq!(
            (code, body["reason"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("Unauthorized"))
        );
        assert_eq!(call(None, "/healthzz").await.0, StatusCode::UNAUTHORIZED);
    }

    /// The dashboard's assets are served to anyone, before authentication; its prefix is the
    /// only one that skips the chain, and without the dashboard it is an unserved path.
    #[tokio::test]
    async fn the_dashboard_skips_authentication_and_nothing_else_does() {
        let (_dir, store, api, mut control) = started().await;
        let response = send_to(&store, &api, &control, None, "/dashboard/").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert!(
            response
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY)
        );
        let asset = format!("/dashboard/v/{}/app.mjs", capstan_dashboard::version());
        let response = send_to(&store, &api, &control, None, &asset).await;
        assert_eq!(response.status(), StatusCode::OK);
        let response = send_to(&store, &api, &control, None, "/dashboard/v/0/app.mjs").await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        for path in ["/dashboardx", "/dashboards/", "/api/v1/namespaces"] {
            let response = send_to(&store, &api, &control, None, path).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
        }

        // `--disable-dashboard`: the path goes through the chain like any other.
        control.dashboard = None;
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..User::default()
        };
        for path in ["/dashboard/", asset.as_str()] {
            let response = send_to(&store, &api, &control, Some(&admin), path).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            let response = send_to(&store, &api, &control, None, path).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
        }
    }

    #[test]
    fn identity_comes_from_the_certificate_subject() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::OrganizationName, "system:masters");
        dn.push(rcgen::DnType::CommonName, "system:admin");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        let user = User::from_certificate(cert.der()).unwrap();
        assert_eq!(user.name, "system:admin");
        assert_eq!(user.groups, ["system:masters", "system:authenticated"]);
    }
}
