//! The kubelet API: HTTPS on the node's port (`--kubelet-port`, 10250 by default), for the API
//! server. Clients present a certificate from the cluster CA. Requests are authorized with
//! upstream's attributes (the method's verb on a subresource of `nodes` named by the path, tried
//! in upstream 1.33's order, e.g. `pods` then `proxy` for `/pods`), and only the API server's
//! identity (`kube-apiserver-kubelet-client`) and `system:masters` members are granted them,
//! where upstream asks the API server (a SubjectAccessReview) and its bootstrap roles grant
//! exactly those by default.
//!
//! - `GET /containerLogs/{namespace}/{pod}/{container}`: a container's log (`follow`,
//!   `previous`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`, `limitBytes`,
//!   `stream`), read from the CRI log files;
//! - `/exec/{namespace}/{pod}[/{uid}]/{container}` (`command`, `input`, `output`, `error`,
//!   `tty`), `/attach/...`, `/portForward/{namespace}/{pod}[/{uid}]`: the runtime's streaming
//!   server is asked for a session (CRI `Exec`, `Attach`, `PortForward`) and the client's
//!   upgrade request (SPDY) is proxied to it byte for byte, as upstream's kubelet does;
//! - `GET /pods`: the pods bound to the node as the agent knows them, a `PodList`;
//! - `GET /logs/...`: the node's log files (`/var/log`), as Go's file server serves a directory
//!   ([`crate::server::logfiles`]);
//! - `GET`/`POST /stats/summary` (`only_cpu_and_memory=true`): upstream's Summary API
//!   ([`crate::stats::summary`]), the node's, pods' and containers' CPU, memory, network and
//!   filesystems;
//! - `GET /metrics/resource`: upstream's resource metrics, what metrics-server and the built-in
//!   Metrics API scrape; `GET /metrics/cadvisor`: container metrics under cAdvisor's names and
//!   labels; `GET /metrics`: the kubelet's own metrics ([`crate::stats::metrics`]) — all in
//!   Prometheus text format 0.0.4, or OpenMetrics when the `Accept` header prefers it;
//! - `/debug/pprof/…`: the process's CPU and heap profiles ([`capstan_pprof`]), authorized as
//!   `nodes/proxy` (upstream's debugging handlers), unless profiling is off;
//! - `GET /healthz`.

mod logfiles;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use capstan_api::query::{self, Values, first};
use capstan_stream::upgrade;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Api;
use tokio::net::TcpListener;

use crate::runtime::cri::Cri;
use crate::runtime::logs::{LogOptions, LogStream};
use crate::spec::{CONTAINER_NAME, POD_UID};

/// The kubelet's serving certificate (replaced while serving when it is renewed) and the CA its
/// clients' certificates come from.
#[derive(Clone)]
pub struct ServingTls {
    /// The serving certificate and key.
    pub cert: Arc<capstan_client::tls::LiveCert>,
    /// The CA that signs client certificates (PEM).
    pub client_ca_pem: String,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

/// The users served: the API server's client identity, and cluster administrators.
const API_SERVER_USER: &str = "kube-apiserver-kubelet-client";
const MASTERS: &str = "system:masters";

pub(crate) type Body = BoxBody<Bytes, std::io::Error>;

/// The directory `/logs/` serves.
pub(crate) const NODE_LOG_DIR: &str = "/var/log";

/// What the handlers reach.
pub(crate) struct State {
    pub(crate) client: kube::Client,
    pub(crate) cri: Cri,
    pub(crate) node_name: String,
    /// The pods bound to the node, for `/pods`.
    pub(crate) pods: crate::pod::manager::KnownPods,
    /// The directory `/logs/` serves.
    pub(crate) log_dir: std::path::PathBuf,
    /// Whether `/debug/pprof/` is served.
    pub(crate) profiling: bool,
    /// The node's resource statistics.
    pub(crate) stats: crate::stats::Collector,
    /// `kubelet_pod_start_duration_seconds`.
    pub(crate) pod_starts: Arc<crate::observed::Histogram>,
    /// What identifies the machine in `/metrics/cadvisor` (read once at start).
    pub(crate) machine: crate::stats::metrics::MachineIds,
}

/// TLS with the kubelet's serving certificate, client certificates from the cluster CA
/// (optional: without one only `/healthz` is answered), HTTP/1.1 only (upgrades).
fn tls_config(tls: &ServingTls) -> Result<rustls::ServerConfig, capstan_client::tls::TlsError> {
    capstan_client::tls::server_config(
        &tls.client_ca_pem,
        &[b"http/1.1"],
        &capstan_client::tls::TlsPolicy::default(),
        tls.cert.clone(),
    )
}

/// Opens the kubelet API's port (`0.0.0.0:<port>`; port 0 picks a free one).
pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await
}

/// Serves the kubelet API on `listener` until dropped.
pub(crate) async fn serve(listener: TcpListener, tls: ServingTls, state: Arc<State>) {
    let config = match tls_config(&tls) {
        Ok(config) => Arc::new(config),
        Err(e) => {
            tracing::error!(error = %e, "the kubelet API cannot serve TLS");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet API accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "kubelet API TLS handshake failed");
                    return;
                }
            };
            let user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|der| identity(der));
            let service = hyper::service::service_fn(move |request| {
                let (state, user) = (state.clone(), user.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(&state, user, request).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet API connection ended");
            }
        });
    }
}

/// The user name and groups of a client certificate.
fn identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some((name, groups))
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(message.into()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The verb upstream's kubelet authorizes a request with: its method's (`HEAD`, `OPTIONS` and
/// others have none).
fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// The subresources of `nodes` upstream's kubelet (1.33, with `KubeletFineGrainedAuthz` on by
/// default) authorizes a path with, in the order it tries them.
fn subresources(path: &str) -> &'static [&'static str] {
    let under = |prefix: &str| {
        path == prefix
            || path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    if under("/stats") {
        &["stats"]
    } else if under("/metrics") {
        &["metrics"]
    } else if under("/logs") {
        &["log"]
    } else if under("/checkpoint") {
        &["checkpoint"]
    } else if under("/pods") || under("/runningpods") {
        &["pods", "proxy"]
    } else if under("/healthz") {
        &["healthz", "proxy"]
    } else if under("/configz") {
        &["configz", "proxy"]
    } else {
        &["proxy"]
    }
}

/// Whether `user` may have `subresource` of this node: the API server's client identity and
/// `system:masters` are granted every one, as upstream's default roles grant them.
fn granted(user: &(String, Vec<String>), _verb: &str, _subresource: &str) -> bool {
    user.0 == API_SERVER_USER || user.1.iter().any(|g| g == MASTERS)
}

/// Authorizes the request as upstream's kubelet: its attributes are tried in order and the
/// first grant admits it; the refusal names them all.
fn authorize(user: &(String, Vec<String>), method: &Method, path: &str) -> Result<(), String> {
    let verb = verb(method);
    let tried = subresources(path);
    if tried.iter().any(|sub| granted(user, verb, sub)) {
        return Ok(());
    }
    Err(format!(
        "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
        user.0,
        tried.join(" ")
    ))
}

async fn handle(
    state: &State,
    user: Option<(String, Vec<String>)>,
    request: Request<Incoming>,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segments == ["healthz"] {
        return text(StatusCode::OK, "ok");
    }
    let Some(user) = user else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    if let Err(refusal) = authorize(&user, request.method(), &path) {
        return text(StatusCode::FORBIDDEN, refusal);
    }
    let query = query::parse(request.uri().query());
    if path == "/pods" || path == "/pods/" {
        return pods(state, request.method());
    }
    if let Some(response) = stats(state, &path, &request, &query).await {
        return response;
    }
    if state.profiling && path.starts_with("/debug/pprof/") {
        return capstan_pprof::serve_request(request).await.map(|body| {
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed()
        });
    }
    if let Some(file) = path.strip_prefix("/logs/") {
        if request.method() != Method::GET {
            return method_not_allowed();
        }
        return crate::server::logfiles::serve(&state.log_dir, &path, file, &request).await;
    }
    let result = match segments.as_slice() {
        ["containerLogs", ns, pod, container] if request.method() == Method::GET => {
            container_logs(state, ns, pod, container, &query).await
        }
        [kind @ ("exec" | "attach"), ns, pod, container]
        | [kind @ ("exec" | "attach"), ns, pod, _, container] => {
            let uid = (segments.len() == 5).then(|| segments[3]);
            stream_command(state, kind, ns, pod, uid, container, &query, request).await
        }
        ["portForward", ns, pod] | ["portForward", ns, pod, _] => {
            let uid = (segments.len() == 4).then(|| segments[3]);
            port_forward(state, ns, pod, uid, request).await
        }
        _ => Err(text(StatusCode::NOT_FOUND, "404 page not found")),
    };
    result.unwrap_or_else(|response| response)
}

/// `/stats/summary`, `/metrics`, `/metrics/resource`, `/metrics/cadvisor`; `None` for other
/// paths.
async fn stats(
    state: &State,
    path: &str,
    request: &Request<Incoming>,
    query: &Values,
) -> Option<Response<Body>> {
    use crate::stats::{Detail, metrics};
    use capstan_client::prometheus;
    let path = path.trim_end_matches('/');
    if !matches!(
        path,
        "/stats/summary" | "/metrics" | "/metrics/resource" | "/metrics/cadvisor"
    ) {
        return None;
    }
    if path == "/stats/summary" {
        // Upstream routes GET and POST, and takes only a single `true` as the flag.
        if request.method() != Method::GET && request.method() != Method::POST {
            return Some(method_not_allowed());
        }
        let only = query
            .get("only_cpu_and_memory")
            .is_some_and(|values| values.len() == 1 && values[0] == "true");
        let summary = state.stats.summary(only).await;
        return Some(match serde_json::to_vec(&summary) {
            Ok(body) => content(StatusCode::OK, "application/json", body),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        });
    }
    if request.method() != Method::GET {
        return Some(method_not_allowed());
    }
    let format = prometheus::negotiate(
        request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    let families = match path {
        "/metrics/resource" => metrics::resource(&state.stats.collect(Detail::CpuAndMemory).await),
        "/metrics/cadvisor" => {
            let snapshot = state.stats.collect(Detail::Full).await;
            metrics::cadvisor(&snapshot, &state.machine, &|cgroup| {
                state.stats.count_procs(cgroup)
            })
        }
        _ => {
            let figures = kubelet_figures(state).await;
            let operations = state.cri.operations.snapshot();
            metrics::kubelet(
                &figures,
                &operations,
                &state.pod_starts,
                process_figures().as_ref(),
            )
        }
    };
    let body = prometheus::encode_families(&families, format, true);
    Some(content(
        StatusCode::OK,
        format.content_type(),
        body.into_bytes(),
    ))
}

fn content(status: StatusCode, kind: &'static str, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    response
}

/// What `/metrics` counts: ready sandboxes, containers by state, the pods the API binds here.
async fn kubelet_figures(state: &State) -> crate::stats::metrics::KubeletFigures {
    let mut runtime = state.cri.runtime.clone();
    let sandboxes = runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .map(|r| r.into_inner().items)
        .unwrap_or_default();
    let running_pods = sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .filter_map(|s| s.metadata.as_ref().map(|m| m.uid.as_str()))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let containers = runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .map(|r| r.into_inner().containers)
        .unwrap_or_default();
    let mut by_state: Vec<(&'static str, u64)> = Vec::new();
    for container in &containers {
        let name = match cri::ContainerState::try_from(container.state) {
            Ok(cri::ContainerState::ContainerCreated) => "created",
            Ok(cri::ContainerState::ContainerRunning) => "running",
            Ok(cri::ContainerState::ContainerExited) => "exited",
            _ => "unknown",
        };
        match by_state.iter_mut().find(|(s, _)| *s == name) {
            Some((_, count)) => *count += 1,
            None => by_state.push((name, 1)),
        }
    }
    crate::stats::metrics::KubeletFigures {
        node_name: state.node_name.clone(),
        running_pods,
        containers: by_state,
        desired_pods: state.pods.list().len() as u64,
    }
}

/// The process collector's figures of this process.
fn process_figures() -> Option<crate::stats::metrics::ProcessFigures> {
    use crate::stats::{metrics, procfs};
    let boot_time = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| procfs::parse_stat(&t))?
        .boot_time?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut figures = metrics::parse_self_stat(
        &std::fs::read_to_string("/proc/self/stat").ok()?,
        boot_time,
        &status,
    )?;
    figures.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64);
    figures.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| metrics::parse_max_fds(&t));
    Some(figures)
}

fn method_not_allowed() -> Response<Body> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
    response
}

/// `pods` as upstream's kubelet encodes a `v1.PodList` (`runtime.Encode` of the legacy codec).
fn encode_pods(pods: &[Arc<Pod>]) -> serde_json::Result<String> {
    let items = if pods.is_empty() {
        "null".to_owned()
    } else {
        let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
        serde_json::to_string(&pods)?
    };
    Ok(format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{}},"items":{items}}}"#) + "\n")
}

/// `/pods`: the pods bound to the node as the agent knows them, as upstream's kubelet encodes
/// its `v1.PodList` (compact JSON and a newline, no list metadata, `items: null` when empty).
fn pods(state: &State, method: &Method) -> Response<Body> {
    if *method != Method::GET {
        return method_not_allowed();
    }
    let body = match encode_pods(&state.pods.list()) {
        Ok(body) => body,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn flag(query: &Values, key: &str) -> bool {
    matches!(first(query, key), Some("1" | "true" | "True" | "TRUE"))
}

/// The pod `namespace/name` bound to this node (and with `uid`, when given).
async fn pod(
    state: &State,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Pod, Response<Body>> {
    let pods: Api<Pod> = Api::namespaced(state.client.clone(), namespace);
    let pod = match pods.get_opt(name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => return Err(not_found(name)),
        // The Node authorizer lets a node read only the pods bound to it.
        Err(kube::Error::Api(status)) if status.code == 403 => return Err(not_found(name)),
        Err(e) => {
            return Err(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read pod {name:?}: {e}"),
            ));
        }
    };
    let here = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&state.node_name);
    let same = uid.is_none_or(|uid| pod.metadata.uid.as_deref() == Some(uid));
    if !here || !same {
        return Err(not_found(name));
    }
    Ok(pod)
}

fn not_found(name: &str) -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        format!("pod {name:?} cannot be found - no logs available"),
    )
}

/// The container status of `container` among the pod's containers, init containers and
/// ephemeral containers.
fn container_status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    [
        status.container_statuses.as_deref(),
        status.init_container_statuses.as_deref(),
        status.ephemeral_container_statuses.as_deref(),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|s| s.name == container)
}

/// The runtime's ID of the container whose log is asked for, as upstream's
/// `validateContainerLogStatus` picks it from the pod's status.
fn log_container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some(status) = container_status(pod, container) else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.container_id.as_deref().is_some_and(|id| !id.is_empty()));
    let state = status.state.clone().unwrap_or_default();
    let id = if previous {
        last.and_then(|t| t.container_id.clone()).ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        })?
    } else if state.running.is_some() {
        status.container_id.clone().unwrap_or_default()
    } else if let Some(terminated) = &state.terminated {
        match terminated.container_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => last.and_then(|t| t.container_id.clone()).ok_or_else(|| {
                format!("container {container:?} in pod {pod_name:?} is terminated")
            })?,
        }
    } else if let Some(last) = last {
        last.container_id.clone().unwrap_or_default()
    } else if let Some(waiting) = &state.waiting {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        return Err(match reason {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            _ => {
                format!("container {container:?} in pod {pod_name:?} is waiting to start: {reason}")
            }
        });
    } else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        ));
    };
    Ok(id
        .split_once("://")
        .map_or(id.clone(), |(_, id)| id.to_owned()))
}

/// The log options of a `containerLogs` request.
fn log_options(query: &Values) -> Result<LogOptions, String> {
    let number = |key: &str| -> Result<Option<i64>, String> {
        first(query, key)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("invalid value {v:?} for {key}"))
            })
            .transpose()
    };
    let since = match (number("sinceSeconds")?, first(query, "sinceTime")) {
        (Some(seconds), _) => Some(
            k8s_openapi::jiff::Timestamp::now()
                - k8s_openapi::jiff::SignedDuration::from_secs(seconds),
        ),
        (None, Some(time)) => Some(
            time.parse::<k8s_openapi::jiff::Timestamp>()
                .map_err(|e| format!("invalid sinceTime {time:?}: {e}"))?,
        ),
        (None, None) => None,
    };
    let stream = match first(query, "stream") {
        None | Some("" | "All") => LogStream::All,
        Some("Stdout") => LogStream::Stdout,
        Some("Stderr") => LogStream::Stderr,
        Some(other) => return Err(format!("invalid value {other:?} for stream")),
    };
    Ok(LogOptions {
        follow: flag(query, "follow"),
        tail_lines: number("tailLines")?,
        since,
        timestamps: flag(query, "timestamps"),
        limit_bytes: number("limitBytes")?,
        stream,
    })
}

async fn container_logs(
    state: &State,
    namespace: &str,
    name: &str,
    container: &str,
    query: &Values,
) -> Result<Response<Body>, Response<Body>> {
    let options = log_options(query).map_err(|e| text(StatusCode::BAD_REQUEST, e))?;
    let pod = pod(state, namespace, name, None).await?;
    let id = log_container_id(&pod, container, flag(query, "previous"))
        .map_err(|e| text(StatusCode::BAD_REQUEST, e))?;
    let status = state
        .cri
        .runtime
        .clone()
        .container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .map_err(|e| {
            text(
                StatusCode::BAD_REQUEST,
                format!("failed to get container status {id:?}: {}", e.message()),
            )
        })?
        .into_inner()
        .status
        .unwrap_or_default();
    let cri = state.cri.clone();
    let running = move || {
        let (mut runtime, id) = (cri.runtime.clone(), id.clone());
        Box::pin(async move {
            runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: id,
                    verbose: false,
                })
                .await
                .ok()
                .and_then(|s| s.into_inner().status)
                .is_some_and(|s| s.state == cri::ContainerState::ContainerRunning as i32)
        }) as futures::future::BoxFuture<'static, bool>
    };
    let lines = crate::runtime::logs::read(status.log_path.into(), options, running);
    let body = StreamBody::new(lines.map(|chunk| chunk.map(Frame::data)));
    let mut response = Response::new(BodyExt::boxed(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    Ok(response)
}

/// The running container `container` of the pod with `uid`.
async fn running_container(state: &State, uid: &str, container: &str) -> Option<String> {
    let containers = state
        .cri
        .runtime
        .clone()
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                label_selector: HashMap::from([
                    (POD_UID.to_owned(), uid.to_owned()),
                    (CONTAINER_NAME.to_owned(), container.to_owned()),
                ]),
                ..cri::ContainerFilter::default()
            }),
        })
        .await
        .ok()?
        .into_inner()
        .containers;
    containers
        .into_iter()
        .max_by_key(|c| c.created_at)
        .map(|c| c.id)
}

#[allow(clippy::too_many_arguments)]
async fn stream_command(
    state: &State,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    container: &str,
    query: &Values,
    request: Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    let pod = pod(state, namespace, name, uid).await?;
    let (stdin, stdout, stderr, tty) = (
        flag(query, "input"),
        flag(query, "output"),
        flag(query, "error"),
        flag(query, "tty"),
    );
    if !stdin && !stdout && !stderr {
        return Err(text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(id) = running_container(state, &pod_uid, container).await else {
        return Err(text(
            StatusCode::NOT_FOUND,
            format!("container not found ({container:?})"),
        ));
    };
    let mut runtime = state.cri.runtime.clone();
    let url = if kind == "exec" {
        let command = query.get("command").cloned().unwrap_or_default();
        if command.is_empty() {
            return Err(text(
                StatusCode::BAD_REQUEST,
                "you must specify at least one command for the container",
            ));
        }
        runtime
            .exec(cri::ExecRequest {
                container_id: id,
                cmd: command,
                tty,
                stdin,
                stdout,
                stderr: stderr && !tty,
            })
            .await
            .map(|r| r.into_inner().url)
    } else {
        runtime
            .attach(cri::AttachRequest {
                container_id: id,
                stdin,
                tty,
                stdout,
                stderr: stderr && !tty,
            })
            .await
            .map(|r| r.into_inner().url)
    }
    .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_owned()))?;
    proxy(&url, request).await
}

async fn port_forward(
    state: &State,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    let pod = pod(state, namespace, name, uid).await?;
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    let sandboxes = state
        .cri
        .runtime
        .clone()
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                state: Some(cri::PodSandboxStateValue {
                    state: cri::PodSandboxState::SandboxReady as i32,
                }),
                label_selector: HashMap::from([(POD_UID.to_owned(), pod_uid)]),
                ..cri::PodSandboxFilter::default()
            }),
        })
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_owned()))?
        .into_inner()
        .items;
    let Some(sandbox) = sandboxes.into_iter().max_by_key(|s| s.created_at) else {
        return Err(text(
            StatusCode::NOT_FOUND,
            format!("pod not found ({name:?})"),
        ));
    };
    let url = state
        .cri
        .runtime
        .clone()
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id,
            port: Vec::new(),
        })
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_owned()))?
        .into_inner()
        .url;
    proxy(&url, request).await
}

/// Passes the client's upgrade request on to the runtime's streaming server at `url` and, once
/// it has switched protocols, joins the two connections.
async fn proxy(
    url: &str,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    if !upgrade::is_upgrade(request.headers()) {
        return Err(text(StatusCode::BAD_REQUEST, "Upgrade request required"));
    }
    let target: http::Uri = url.parse().map_err(|_| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("bad streaming URL {url:?}"),
        )
    })?;
    let authority = target
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| {
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing the runtime's streaming server: {e}"),
            )
        })?;
    let mut upstream = Request::builder()
        .method(request.method().clone())
        .uri(target.path_and_query().map_or("/", |p| p.as_str()));
    for (name, value) in request.headers() {
        if name != header::HOST && name != header::CONTENT_LENGTH && name != header::AUTHORIZATION {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream
        .header(header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut answer = upgrade::send(tcp, upstream).await.map_err(|e| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error talking to the runtime's streaming server: {e}"),
        )
    })?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (head, body) = answer.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut response = text(head.status, String::from_utf8_lossy(&body).into_owned());
        if let Some(kind) = head.headers.get(header::CONTENT_TYPE) {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, kind.clone());
        }
        return Ok(response);
    }
    let client_side = hyper::upgrade::on(&mut request);
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (name, value) in answer.headers() {
        response.headers_mut().append(name, value.clone());
    }
    tokio::spawn(async move {
        let runtime_side = match upgrade::switched(&mut answer).await {
            Ok(io) => io,
            Err(e) => {
                tracing::debug!(error = %e, "runtime stream upgrade failed");
                return;
            }
        };
        match client_side.await {
            Ok(client) => upgrade::splice(TokioIo::new(client), runtime_side).await,
            Err(e) => tracing::debug!(error = %e, "client stream upgrade failed"),
        }
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };

    fn pod_with(status: ContainerStatus) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![status]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn terminated(id: &str) -> ContainerStateTerminated {
        ContainerStateTerminated {
            container_id: Some(id.into()),
            exit_code: 1,
            ..Default::default()
        }
    }

    #[test]
    fn logs_come_from_the_container_the_status_names() {
        let running = pod_with(ContainerStatus {
            name: "c".into(),
            container_id: Some("containerd://abc".into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(terminated("containerd://old")),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(log_container_id(&running, "c", false).unwrap(), "abc");
        assert_eq!(log_container_id(&running, "c", true).unwrap(), "old");
        assert_eq!(
            log_container_id(&running, "d", false).unwrap_err(),
            "container \"d\" in pod \"web\" is not available"
        );
    }

    #[test]
    fn waiting_containers_say_why_they_have_no_logs() {
        let waiting = pod_with(ContainerStatus {
            name: "c".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            log_container_id(&waiting, "c", false).unwrap_err(),
            "container \"c\" in pod \"web\" is waiting to start: ContainerCreating"
        );
        assert_eq!(
            log_container_id(&waiting, "c", true).unwrap_err(),
            "previous terminated container \"c\" in pod \"web\" not found"
        );
    }

    #[test]
    fn requests_are_authorized_with_upstreams_attributes() {
        assert_eq!(subresources("/pods"), ["pods", "proxy"]);
        assert_eq!(subresources("/pods/"), ["pods", "proxy"]);
        assert_eq!(subresources("/podsx"), ["proxy"]);
        assert_eq!(subresources("/runningpods/"), ["pods", "proxy"]);
        assert_eq!(subresources("/logs/syslog"), ["log"]);
        assert_eq!(subresources("/metrics/cadvisor"), ["metrics"]);
        assert_eq!(subresources("/stats/summary"), ["stats"]);
        assert_eq!(subresources("/containerLogs/ns/p/c"), ["proxy"]);
        assert_eq!(subresources("/exec/ns/p/c"), ["proxy"]);
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::HEAD), "");
        let api_server = (API_SERVER_USER.to_owned(), Vec::new());
        assert!(authorize(&api_server, &Method::GET, "/pods").is_ok());
        let admin = ("admin".to_owned(), vec![MASTERS.to_owned()]);
        assert!(authorize(&admin, &Method::POST, "/exec/ns/p/c").is_ok());
        let node = ("system:node:n1".to_owned(), vec!["system:nodes".to_owned()]);
        assert_eq!(
            authorize(&node, &Method::GET, "/pods").unwrap_err(),
            "Forbidden (user=system:node:n1, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
        assert_eq!(
            authorize(&node, &Method::GET, "/logs/").unwrap_err(),
            "Forbidden (user=system:node:n1, verb=get, resource=nodes, subresource(s)=[log])\n"
        );
    }

    #[test]
    fn pods_are_listed_as_upstreams_kubelet_encodes_them() {
        assert_eq!(
            encode_pods(&[]).unwrap(),
            "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":null}\n"
        );
        let pod = Arc::new(Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let body = encode_pods(&[pod]).unwrap();
        assert!(
            body.ends_with("]}\n") && !body[..body.len() - 1].contains('\n'),
            "{body}"
        );
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["items"][0]["metadata"]["name"], "web");
        assert!(body.starts_with("{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},"));
    }

    #[test]
    fn log_options_follow_the_query() {
        let query = query::parse(Some(
            "follow=true&tailLines=5&timestamps=1&limitBytes=100&stream=Stderr",
        ));
        let options = log_options(&query).unwrap();
        assert!(options.follow && options.timestamps);
        assert_eq!(options.tail_lines, Some(5));
        assert_eq!(options.limit_bytes, Some(100));
        assert!(matches!(options.stream, LogStream::Stderr));
        assert!(log_options(&query::parse(Some("tailLines=x"))).is_err());
        let since = log_options(&query::parse(Some("sinceTime=2024-01-02T03:04:05Z")))
            .unwrap()
            .since
            .unwrap();
        assert_eq!(since.to_string(), "2024-01-02T03:04:05Z");
    }
}
