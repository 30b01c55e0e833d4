//! Passing a request for an aggregated group-version on to its extension API server, as
//! upstream's aggregator proxy handler does: over TLS to a ready endpoint of the APIService's
//! Service, verified as `<service>.<namespace>.svc` against its `caBundle` (or not at all with
//! `insecureSkipTLSVerify`), presenting the front proxy's client certificate, with the user
//! this server authenticated in the `X-Remote-User`, `X-Remote-Uid` (when the user has one, as
//! upstream 1.33's default-on `RemoteRequestHeaderUID`), `X-Remote-Group` and `X-Remote-Extra-*`
//! headers (and the client's credentials and any such headers it sent removed). The path,
//! query, method and body go along unchanged; the answer, watches included, streams back.
//!
//! An APIService that is not available answers `503 service unavailable`, as upstream's.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::StatusError;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{Aggregator, Remote};
use crate::authn::User;
use crate::handlers::proxy::forward::{
    ClientAddr, append_forwarded_for, remove_credentials, remove_hop_by_hop, send,
};
use crate::handlers::proxy::location::escape_segment;
use crate::status::ApiError;

/// How long reaching an extension API server may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Upstream's plain answer when the extension API server cannot be used.
fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "service unavailable\n",
    )
        .into_response()
}

/// Replaces the identity headers with `user`'s (escaping extra keys as upstream's
/// `X-Remote-Extra-` headers do: percent-encoded, lower case).
fn identify(headers: &mut HeaderMap, user: Option<&User>) {
    let stale: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-remote-"))
        .cloned()
        .collect();
    for name in stale {
        headers.remove(name);
    }
    let Some(user) = user else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&user.name) {
        headers.insert("x-remote-user", value);
    }
    if !user.uid.is_empty()
        && let Ok(value) = HeaderValue::from_str(&user.uid)
    {
        headers.insert("x-remote-uid", value);
    }
    for group in &user.groups {
        if let Ok(value) = HeaderValue::from_str(group) {
            headers.append("x-remote-group", value);
        }
    }
    for (key, values) in &user.extra {
        let escaped = escape_segment(&key.to_lowercase());
        let Ok(name) = HeaderName::from_bytes(format!("x-remote-extra-{escaped}").as_bytes())
        else {
            continue;
        };
        for value in values {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(name.clone(), value);
            }
        }
    }
}

/// Opens a TLS connection to an endpoint of `remote`'s Service.
pub(crate) async fn connect(
    aggregator: &Aggregator,
    remote: &Remote,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, String), String> {
    let tls = remote.tls.clone()?;
    let address = crate::admission::webhook::client::resolve_service(
        aggregator.registries(),
        &remote.namespace,
        &remote.service,
        remote.port,
    )
    .await?;
    let tcp = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&address)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Err(crate::status::dial_error(&address, &e)),
        Err(_) => return Err(format!("dial tcp {address}: i/o timeout")),
    };
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(remote.server_name()).map_err(|e| e.to_string())?;
    match tokio::time::timeout(DIAL_TIMEOUT, TlsConnector::from(tls).connect(name, tcp)).await {
        Ok(Ok(stream)) => Ok((stream, address)),
        Ok(Err(e)) => Err(format!("tls: {e}")),
        Err(_) => Err("net/http: TLS handshake timeout".to_owned()),
    }
}

/// Passes `request` on to `remote`.
pub(crate) async fn serve(
    aggregator: &Aggregator,
    remote: &Remote,
    request: Request<Body>,
) -> Response {
    if !remote.available {
        return unavailable();
    }
    if capstan_stream::upgrade::is_upgrade(request.headers()) {
        return ApiError::from(StatusError::bad_request(
            "upgrading connections through an aggregated API is not supported by this server",
        ))
        .into_response();
    }
    let user = request.extensions().get::<User>().cloned();
    let client = request.extensions().get::<ClientAddr>().copied();
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers;
    remove_hop_by_hop(&mut headers);
    remove_credentials(&mut headers);
    append_forwarded_for(&mut headers, client);
    identify(&mut headers, user.as_ref());
    if let Ok(host) = HeaderValue::from_str(&format!("{}:{}", remote.server_name(), remote.port)) {
        headers.insert(header::HOST, host);
    }
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let Ok(mut outgoing) = Request::builder().method(parts.method).uri(uri).body(body) else {
        return unavailable();
    };
    *outgoing.headers_mut() = headers;
    let (stream, _) = match connect(aggregator, remote).await {
        Ok(connected) => connected,
        Err(why) => {
            tracing::debug!(apiservice = %remote.name, %why, "cannot reach the extension API server");
            return unavailable();
        }
    };
    match send(Box::new(stream), outgoing).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(why) => ApiError::from(StatusError::service_unavailable(&format!(
            "error trying to reach service: {why}"
        )))
        .into_response(),
    }
}
