//! Passing a request on to the backend a proxy subresource resolved, as upstream's
//! `UpgradeAwareHandler` with its rewriting transport does:
//!
//! - an upgrade request (`Connection: upgrade`) is sent to the backend's location without the
//!   query (upstream drops it there too), and after the backend's `101` the two connections are
//!   spliced; a refusal of 400 or more is passed back as it came;
//! - a `GET` or `HEAD` with an empty path is redirected to the same path with a slash (`301`);
//! - any other request goes to the backend with its method, body and raw query, without the
//!   hop-by-hop headers and the client's credentials, with `X-Forwarded-For` and
//!   `X-Forwarded-Uri`; the answer comes back without the backend's CORS headers, with its
//!   `Location` and, in `text/html`, its links rewritten to lead through the proxy.
//!
//! Backends are dialed afresh for every request: pods and services over TCP (TLS without
//! verification for `https`, as upstream's proxy transport, since they are reached by address),
//! nodes' kubelets with the API server's kubelet client credentials.

use std::io::{Read as _, Write as _};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::Response;
use capstan_api::StatusError;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::location::{Rewriter, escape_path, join};
use crate::handlers::kubelets::Kubelets;
use crate::status::ApiError;

/// How long dialing a backend may take, as upstream's proxy dialer.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// The address of the client that sent a request (its connection's peer), which the proxy
/// appends to `X-Forwarded-For`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddr(pub std::net::SocketAddr);

/// How the proxy reaches a backend.
#[derive(Debug, Clone)]
pub(crate) enum Dial {
    /// TCP to the target's host, with TLS that verifies nothing for `https`.
    Direct,
    /// The kubelet of this Node, over TLS with the API server's kubelet client certificate.
    Kubelet(Box<Value>),
}

/// Where a proxied request goes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `host:port`, or a bare host whose port follows from the scheme.
    pub host: String,
    pub dial: Dial,
}

/// A connection to a backend.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// TLS towards pods and services: any certificate is accepted, as upstream's proxy transport
/// (`InsecureSkipVerify`) accepts it, since backends are reached by address.
static INSECURE_TLS: LazyLock<Result<TlsConnector, String>> = LazyLock::new(|| {
    capstan_client::tls::insecure_client_config()
        .map(|config| TlsConnector::from(Arc::new(config)))
        .map_err(|e| e.to_string())
});

impl Target {
    /// `host:port`, with the scheme's port when the target names none.
    fn address(&self) -> String {
        let bracketed_or_plain_without_port = if self.host.starts_with('[') {
            self.host.ends_with(']')
        } else {
            !self.host.contains(':')
        };
        if bracketed_or_plain_without_port {
            let port = if self.scheme == "https" { 443 } else { 80 };
            format!("{}:{port}", self.host)
        } else {
            self.host.clone()
        }
    }

    /// A connection to the backend; the error is its text, as Go words it.
    async fn connect(&self, kubelets: Option<&Kubelets>) -> Result<Box<dyn Io>, String> {
        if let Dial::Kubelet(node) = &self.dial {
            let kubelets = kubelets.ok_or("this API server does not reach kubelets")?;
            let (tls, _) = kubelets.dial(node).await?;
            return Ok(Box::new(tls));
        }
        let address = self.address();
        let tcp = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&address)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(crate::status::dial_error(&address, &e)),
            Err(_) => return Err(format!("dial tcp {address}: i/o timeout")),
        };
        let _ = tcp.set_nodelay(true);
        if self.scheme != "https" {
            return Ok(Box::new(tcp));
        }
        let tls = INSECURE_TLS.as_ref().map_err(Clone::clone)?;
        let host = address
            .rsplit_once(':')
            .map_or(address.as_str(), |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
        match tokio::time::timeout(DIAL_TIMEOUT, tls.connect(name, tcp)).await {
            Ok(Ok(tls)) => Ok(Box::new(tls)),
            Ok(Err(e)) => Err(format!("tls: {e}")),
            Err(_) => Err("net/http: TLS handshake timeout".to_owned()),
        }
    }
}

/// Sends `request` over `io`, keeping the connection open for an upgrade (see
/// [`capstan_stream::upgrade::send`]).
pub(crate) async fn send(
    io: Box<dyn Io>,
    request: Request<Body>,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    capstan_stream::upgrade::send(io, request)
        .await
        .map_err(|e| e.to_string())
}

/// The hop-by-hop headers a proxy does not pass on (Go's `httputil.ReverseProxy` list), and
/// those the `Connection` header names.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

/// The client's credentials, which upstream's authentication and impersonation filters remove
/// before the request reaches the proxy.
pub(crate) fn remove_credentials(headers: &mut HeaderMap) {
    headers.remove(header::AUTHORIZATION);
    let impersonation: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for name in impersonation {
        headers.remove(name);
    }
}

/// Appends the client's address to `X-Forwarded-For`, as Go's reverse proxy does.
pub(crate) fn append_forwarded_for(headers: &mut HeaderMap, client: Option<ClientAddr>) {
    let Some(ClientAddr(addr)) = client else {
        return;
    };
    let ip = addr.ip().to_canonical().to_string();
    let previous: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let value = if previous.is_empty() {
        ip
    } else {
        format!("{}, {ip}", previous.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert("x-forwarded-for", value);
    }
}

/// The `Host` the client asked for (the `:authority` of an HTTP/2 request).
fn request_host(request: &Request<Body>) -> String {
    request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_default()
}

/// What the proxy handler needs besides the target.
pub(crate) struct Proxied<'a> {
    /// The backend's path (upstream's `location.Path`, unescaped): the subpath joined and
    /// cleaned, empty when the request named none.
    pub location_path: String,
    /// The request's path, unescaped (upstream's `req.URL.Path`).
    pub request_path: String,
    /// Connections to kubelets.
    pub kubelets: Option<&'a Kubelets>,
}

/// Passes `request` on to `target`.
pub(crate) async fn serve(
    target: Target,
    proxied: Proxied<'_>,
    request: Request<Body>,
) -> Result<Response, ApiError> {
    if capstan_stream::upgrade::is_upgrade(request.headers()) {
        return upgrade(target, proxied, request).await;
    }
    let mut path = proxied.location_path.clone();
    if !path.ends_with('/') && proxied.request_path.ends_with('/') {
        path.push('/');
    }
    let raw_query = request.uri().query().map(str::to_owned);
    if path.is_empty() && matches!(*request.method(), Method::GET | Method::HEAD) {
        // Upstream's redirect of an empty path (issue 4958), for reads only since 1.27.
        let mut location = format!("{}/", request.uri().path());
        if let Some(query) = raw_query.as_deref().filter(|q| !q.is_empty()) {
            location.push('?');
            location.push_str(query);
        }
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
        if let Ok(location) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, location);
        }
        return Ok(response);
    }
    // The proxy's own path in front of the backend's: what links are rewritten to start with.
    let mut suffix = proxied.location_path.clone();
    if proxied.request_path.ends_with('/') && !suffix.ends_with('/') {
        suffix.push('/');
    }
    let prepend = proxied
        .request_path
        .strip_suffix(suffix.as_str())
        .unwrap_or(&proxied.request_path)
        .to_owned();
    let escaped = escape_path(&path);
    let mut forwarded_uri = join(&[&prepend, &escaped]);
    if path.ends_with('/') {
        forwarded_uri.push('/');
    }
    let host = request_host(&request);
    let client = request.extensions().get::<ClientAddr>().copied();
    let (parts, body) = request.into_parts();
    let mut uri = if escaped.is_empty() {
        "/".to_owned()
    } else {
        escaped
    };
    if let Some(query) = &raw_query {
        uri.push('?');
        uri.push_str(query);
    }
    let mut headers = parts.headers;
    remove_hop_by_hop(&mut headers);
    remove_credentials(&mut headers);
    append_forwarded_for(&mut headers, client);
    if let Ok(value) = HeaderValue::from_str(&forwarded_uri) {
        headers.insert("x-forwarded-uri", value);
    }
    if let Ok(value) = HeaderValue::from_str(&host) {
        headers.insert(header::HOST, value);
    }
    let mut outgoing = Request::builder()
        .method(parts.method)
        .uri(uri)
        .body(body)
        .map_err(|e| StatusError::internal(&e.to_string()))?;
    *outgoing.headers_mut() = headers;
    let unreachable = |e: String| {
        StatusError::service_unavailable(&format!("error trying to reach service: {e}"))
    };
    let io = target
        .connect(proxied.kubelets)
        .await
        .map_err(unreachable)?;
    let response = send(io, outgoing).await.map_err(unreachable)?;
    let rewriter = Rewriter {
        backend_host: target.host.clone(),
        request_host: host,
        prepend,
    };
    answer(response, &rewriter).await
}

/// The backend's answer as the client gets it.
async fn answer(
    response: http::Response<hyper::body::Incoming>,
    rewriter: &Rewriter,
) -> Result<Response, ApiError> {
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    for cors in [
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
    ] {
        parts.headers.remove(cors);
    }
    if let Some(location) = parts.headers.get(header::LOCATION) {
        let text = String::from_utf8_lossy(location.as_bytes()).into_owned();
        if !Rewriter::parses(&text) {
            return Err(StatusError::internal(&format!(
                "error trying to parse Location header: parse {text:?}: invalid URL"
            ))
            .into());
        }
        if let Some(rewritten) = rewriter.rewrite(&text)
            && let Ok(value) = HeaderValue::from_str(&rewritten)
        {
            parts.headers.insert(header::LOCATION, value);
        }
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let media_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_owned())
        .unwrap_or_default();
    if media_type != "text/html" {
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let encoding = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !matches!(encoding.as_str(), "" | "gzip" | "deflate") {
        tracing::debug!(%encoding, "not rewriting the links of HTML in an unknown encoding");
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let bytes = body
        .collect()
        .await
        .map_err(|e| StatusError::not_a_status(&e.to_string()))?
        .to_bytes();
    let rewritten = rewrite_encoded(&bytes, &encoding, rewriter)
        .map_err(|e| StatusError::not_a_status(&e.to_string()))?;
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, Body::from(rewritten)))
}

/// The HTML document `bytes` (in `encoding`: none, `gzip` or `deflate`) with its links
/// rewritten, in the same encoding.
fn rewrite_encoded(bytes: &[u8], encoding: &str, rewriter: &Rewriter) -> std::io::Result<Vec<u8>> {
    let rewrite = |url: &str| rewriter.rewrite(url);
    match encoding {
        "gzip" => {
            let mut html = Vec::new();
            flate2::read::GzDecoder::new(bytes).read_to_end(&mut html)?;
            let html = super::html::rewrite(&html, &rewrite);
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(&html)?;
            encoder.finish()
        }
        "deflate" => {
            let mut html = Vec::new();
            flate2::read::DeflateDecoder::new(bytes).read_to_end(&mut html)?;
            let html = super::html::rewrite(&html, &rewrite);
            let mut encoder =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
            encoder.write_all(&html)?;
            encoder.finish()
        }
        _ => Ok(super::html::rewrite(bytes, &rewrite)),
    }
}

/// An upgrade request (WebSocket, SPDY) passed on to the backend; after its `101` the
/// connections are spliced.
async fn upgrade(
    target: Target,
    proxied: Proxied<'_>,
    mut request: Request<Body>,
) -> Result<Response, ApiError> {
    let host = request_host(&request);
    let client = request.extensions().get::<ClientAddr>().copied();
    let upgraded_client = hyper::upgrade::on(&mut request);
    let (parts, body) = request.into_parts();
    let escaped = escape_path(&proxied.location_path);
    let uri = if escaped.is_empty() {
        "/".to_owned()
    } else {
        escaped
    };
    let mut headers = parts.headers;
    remove_credentials(&mut headers);
    append_forwarded_for(&mut headers, client);
    if let Ok(value) = HeaderValue::from_str(&host) {
        headers.insert(header::HOST, value);
    }
    let mut outgoing = Request::builder()
        .method(parts.method)
        .uri(uri)
        .body(body)
        .map_err(|e| StatusError::internal(&e.to_string()))?;
    *outgoing.headers_mut() = headers;
    let io = target
        .connect(proxied.kubelets)
        .await
        .map_err(|e| StatusError::not_a_status(&e))?;
    let mut backend = send(io, outgoing)
        .await
        .map_err(|e| StatusError::not_a_status(&e))?;
    let status = backend.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        if status.as_u16() < 400 {
            return Err(StatusError::not_a_status(&format!(
                "invalid upgrade response: status code {}",
                status.as_u16()
            ))
            .into());
        }
        let (parts, body) = backend.into_parts();
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = backend.headers().clone();
    tokio::spawn(async move {
        let (Ok(backend), Ok(client)) = (
            capstan_stream::upgrade::switched(&mut backend).await,
            upgraded_client.await,
        ) else {
            return;
        };
        capstan_stream::upgrade::splice(TokioIo::new(client), backend).await;
    });
    Ok(response)
}
