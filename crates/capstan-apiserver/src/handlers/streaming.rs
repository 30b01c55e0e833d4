//! The pod subresources served by the pod's node: `log`, `exec`, `attach` and `portforward`.
//! The API server checks the request (the pod, its node, the container, the options) as
//! upstream's connecters do, then proxies it to the node's kubelet API ([`crate::handlers::kubelets`]):
//!
//! - `log` streams the kubelet's `containerLogs` answer back, as it comes or, to a WebSocket
//!   client (`binary.k8s.io`, `base64.binary.k8s.io` or no protocol), in WebSocket messages as
//!   upstream's `wsstream.Reader` sends them;
//! - SPDY upgrades (older kubectl, client-go's SPDY executor) pass through to the kubelet byte
//!   for byte;
//! - WebSocket clients of `exec` and `attach` (`v5.channel.k8s.io` of kubectl 1.30 and later,
//!   `v4.channel.k8s.io` of the other client libraries) are translated into SPDY towards the
//!   kubelet ([`capstan_stream::remotecommand`]), as upstream's stream translator does;
//! - WebSocket port-forwarding is either SPDY tunnelled through the WebSocket (kubectl 1.31 and
//!   later) or the channel protocol of other clients ([`capstan_stream::portforward`]).

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use capstan_api::StatusError;
use capstan_api::field::{FieldError, Path};
use capstan_api::query::{self, Values, first};
use capstan_stream::{portforward, remotecommand, spdy, upgrade, websocket};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::handlers::kubelets::{Kubelets, refusal};
use crate::registry::Registry;
use crate::status::ApiError;

/// The header naming the stream protocols a SPDY client speaks and the server chose.
const STREAM_PROTOCOL: &str = "x-stream-protocol-version";

/// Everything a streaming subresource needs.
pub(crate) struct Context<'a> {
    /// The pods.
    pub pods: &'a Registry,
    /// The nodes, for the kubelet's address.
    pub nodes: &'a Registry,
    /// Connections to kubelets.
    pub kubelets: &'a Kubelets,
}

/// Serves `pods/<subresource>` of pod `namespace/name`.
pub(crate) async fn serve(
    context: &Context<'_>,
    subresource: &str,
    namespace: &str,
    name: &str,
    request: Request<Body>,
) -> Result<Response, ApiError> {
    let query = query::parse(request.uri().query());
    let pod = context.pods.get(Some(namespace), name).await?;
    match subresource {
        "log" => log(context, &pod, name, &query, request).await,
        "exec" | "attach" => {
            let options = command_options(&query, subresource == "exec")?;
            let container = container(&pod, name, first(&query, "container"))?;
            let node = node_of(context, &pod, name).await?;
            let mut pairs: Vec<(&str, &str)> = [
                ("input", options.stdin),
                ("output", options.stdout),
                ("error", options.stderr),
                ("tty", options.tty),
            ]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(flag, _)| (flag, "1"))
            .collect();
            for command in query.get("command").into_iter().flatten() {
                pairs.push(("command", command));
            }
            let target = format!(
                "/{subresource}/{namespace}/{name}/{container}?{}",
                encode(&pairs)
            );
            stream(
                context,
                &node,
                &target,
                Protocol::RemoteCommand(options),
                request,
            )
            .await
        }
        "portforward" => {
            let node = node_of(context, &pod, name).await?;
            let ports = query
                .get("ports")
                .map(|p| portforward::parse_ports(p))
                .transpose()
                .map_err(|e| StatusError::bad_request(&e))?
                .unwrap_or_default();
            let ports_text: Vec<String> = ports.iter().map(u16::to_string).collect();
            let pairs: Vec<(&str, &str)> =
                ports_text.iter().map(|p| ("port", p.as_str())).collect();
            let target = format!("/portForward/{namespace}/{name}?{}", encode(&pairs));
            stream(
                context,
                &node,
                &target,
                Protocol::PortForward(ports),
                request,
            )
            .await
        }
        _ => Err(ApiError::not_found()),
    }
}

/// `pairs` as a URL query.
fn encode(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A boolean query parameter, as Go's `strconv.ParseBool` reads it.
pub(crate) fn boolean(query: &Values, key: &str) -> Result<bool, ApiError> {
    match first(query, key) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(StatusError::bad_request(&format!(
            "strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))
        .into()),
    }
}

/// An integer query parameter.
fn integer(query: &Values, key: &str) -> Result<Option<i64>, ApiError> {
    first(query, key)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                StatusError::bad_request(&format!(
                    "strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
                .into()
            })
        })
        .transpose()
}

/// The streams of an exec or attach request; exec needs a command.
fn command_options(query: &Values, exec: bool) -> Result<remotecommand::Options, ApiError> {
    let options = remotecommand::Options {
        stdin: boolean(query, "stdin")?,
        stdout: boolean(query, "stdout")?,
        stderr: boolean(query, "stderr")?,
        tty: boolean(query, "tty")?,
    };
    if !options.stdin && !options.stdout && !options.stderr {
        return Err(StatusError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        )
        .into());
    }
    if exec && query.get("command").is_none_or(Vec::is_empty) {
        return Err(StatusError::bad_request(
            "you must specify at least one command for the container",
        )
        .into());
    }
    Ok(options)
}

fn container_names(pod: &Value) -> Vec<&str> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod["spec"][list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// The container a request is about: the one named, which must exist, or the pod's only
/// container, as upstream's `validateContainer`.
fn container<'a>(pod: &'a Value, name: &str, asked: Option<&'a str>) -> Result<&'a str, ApiError> {
    let names = container_names(pod);
    match asked.filter(|c| !c.is_empty()) {
        Some(asked) if names.contains(&asked) => Ok(asked),
        Some(asked) => Err(StatusError::bad_request(&format!(
            "container {asked} is not valid for pod {name}"
        ))
        .into()),
        None => {
            let containers = pod["spec"]["containers"].as_array();
            match containers.map_or(0, Vec::len) {
                1 => Ok(containers
                    .and_then(|c| c[0]["name"].as_str())
                    .unwrap_or_default()),
                0 => Err(StatusError::bad_request(&format!(
                    "a container name must be specified for pod {name}"
                ))
                .into()),
                _ => Err(StatusError::bad_request(&format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                ))
                .into()),
            }
        }
    }
}

/// The Node the pod runs on.
async fn node_of(context: &Context<'_>, pod: &Value, name: &str) -> Result<Value, ApiError> {
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node.is_empty() {
        return Err(
            StatusError::bad_request(&format!("pod {name} does not have a host assigned")).into(),
        );
    }
    context.nodes.get(None, node).await
}

/// `pods/log`: the options checked as upstream's `ValidatePodLogOptions`, then the kubelet's
/// `containerLogs` streamed back (over a WebSocket when the request asks for one).
async fn log(
    context: &Context<'_>,
    pod: &Value,
    name: &str,
    query: &Values,
    request: Request<Body>,
) -> Result<Response, ApiError> {
    let tail_lines = integer(query, "tailLines")?;
    let limit_bytes = integer(query, "limitBytes")?;
    let since_seconds = integer(query, "sinceSeconds")?;
    let since_time = first(query, "sinceTime").filter(|t| !t.is_empty());
    let stream = first(query, "stream").filter(|s| !s.is_empty());
    let mut errors = Vec::new();
    if let Some(tail) = tail_lines.filter(|t| *t < 0) {
        errors.push(FieldError::invalid(
            &Path::new("tailLines"),
            tail,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(limit) = limit_bytes.filter(|l| *l < 1) {
        errors.push(FieldError::invalid(
            &Path::new("limitBytes"),
            limit,
            "must be greater than 0",
        ));
    }
    if since_seconds.is_some() && since_time.is_some() {
        errors.push(FieldError::forbidden(
            &Path::new(""),
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    if let Some(seconds) = since_seconds.filter(|s| *s < 1) {
        errors.push(FieldError::invalid(
            &Path::new("sinceSeconds"),
            seconds,
            "must be greater than 0",
        ));
    }
    if let Some(stream) = stream {
        if !matches!(stream, "All" | "Stdout" | "Stderr") {
            errors.push(FieldError::not_supported(
                &Path::new("stream"),
                stream,
                &["All", "Stderr", "Stdout"],
            ));
        } else if stream != "All" && tail_lines.is_some() {
            errors.push(FieldError::forbidden(
                &Path::new(""),
                "`tailLines` and specific `stream` are mutually exclusive for now",
            ));
        }
    }
    if let Some(time) = since_time
        && time::OffsetDateTime::parse(time, &time::format_description::well_known::Rfc3339)
            .is_err()
    {
        return Err(StatusError::bad_request(&format!(
            "parsing time {time:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
        ))
        .into());
    }
    if !errors.is_empty() {
        return Err(StatusError::invalid("", "PodLogOptions", name, &errors).into());
    }
    let container = container(pod, name, first(query, "container"))?;
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node_name.is_empty() {
        // Upstream answers an unscheduled pod's log with nothing: 204, WebSocket or not.
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        return Ok(response);
    }
    let node = context.nodes.get(None, node_name).await?;
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut pairs: Vec<(&str, String)> = Vec::new();
    for key in [
        "follow",
        "previous",
        "timestamps",
        "insecureSkipTLSVerifyBackend",
    ] {
        if boolean(query, key)? {
            pairs.push((key, "true".to_owned()));
        }
    }
    for (key, value) in [
        ("sinceSeconds", since_seconds),
        ("tailLines", tail_lines),
        ("limitBytes", limit_bytes),
    ] {
        if let Some(value) = value {
            pairs.push((key, value.to_string()));
        }
    }
    if let Some(time) = since_time {
        pairs.push(("sinceTime", time.to_owned()));
    }
    if let Some(stream) = stream {
        pairs.push(("stream", stream.to_owned()));
    }
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let target = format!(
        "/containerLogs/{namespace}/{}/{container}?{}",
        pod["metadata"]["name"].as_str().unwrap_or(name),
        encode(&pairs)
    );
    let (io, authority) = context.kubelets.connect(&node).await?;
    let to_kubelet = http::Request::get(target)
        .header(header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| StatusError::internal(&e.to_string()))?;
    let response = upgrade::send(io, to_kubelet)
        .await
        .map_err(|e| StatusError::internal(&format!("error talking to the kubelet: {e}")))?;
    if !response.status().is_success() {
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(refusal(status, &String::from_utf8_lossy(&body)));
    }
    if upgrade::is_websocket(request.headers()) {
        return websocket_log(response.into_body(), request);
    }
    Ok(text_response(Body::new(response.into_body())))
}

/// A log sent to a WebSocket client, once the kubelet has answered (its refusals are plain
/// HTTP answers, as upstream's): a client that offers none of the reader protocols gets a bare
/// 403, as Go's `x/net/websocket` answers it.
fn websocket_log(
    log: hyper::body::Incoming,
    mut request: Request<Body>,
) -> Result<Response, ApiError> {
    let accepted = match websocket::accept(request.headers(), websocket::READER_PROTOCOLS) {
        Ok(accepted) => accepted,
        Err(websocket::HandshakeError::Protocol { .. }) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::FORBIDDEN;
            return Ok(response);
        }
        Err(invalid) => return Err(StatusError::bad_request(&invalid.to_string()).into()),
    };
    let base64 = accepted.protocol.starts_with("base64.");
    let client = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(client) = client.await else {
            return;
        };
        let ws = websocket::server(TokioIo::new(client)).await;
        websocket::copy_reader(ws, log, base64).await;
    });
    Ok(switching(accepted.response))
}

fn text_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// What an upgraded session carries.
enum Protocol {
    RemoteCommand(remotecommand::Options),
    /// The ports a WebSocket channel client forwards (from `?ports=`).
    PortForward(Vec<u16>),
}

/// Opens an upgrade to the kubelet at `target` asking for `upgrade` and the stream protocols
/// `protocols`; the kubelet's refusal is the request's error.
async fn kubelet_upgrade(
    context: &Context<'_>,
    node: &Value,
    target: &str,
    upgrade_to: &HeaderValue,
    protocols: &[&str],
) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
    let (io, authority) = context.kubelets.connect(node).await?;
    let mut request = http::Request::post(target)
        .header(header::HOST, authority)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, upgrade_to);
    for protocol in protocols {
        request = request.header(STREAM_PROTOCOL, *protocol);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| StatusError::internal(&e.to_string()))?;
    let response = upgrade::send(io, request)
        .await
        .map_err(|e| StatusError::internal(&format!("error talking to the kubelet: {e}")))?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(refusal(status, &String::from_utf8_lossy(&body)));
    }
    Ok(response)
}

/// Serves an upgrade request for an exec, attach or port-forward session.
async fn stream(
    context: &Context<'_>,
    node: &Value,
    target: &str,
    protocol: Protocol,
    mut request: Request<Body>,
) -> Result<Response, ApiError> {
    let headers = request.headers().clone();
    let spdy = HeaderValue::from_static("SPDY/3.1");
    if upgrade::is_websocket(&headers) {
        let offered = websocket::offered_protocols(&headers);
        let tunnelled = portforward::tunnelled_protocols(&offered);
        if matches!(protocol, Protocol::PortForward(_)) && !tunnelled.is_empty() {
            // SPDY inside the WebSocket: the kubelet chooses the protocol, the client hears it
            // back with the tunnelling prefix.
            let wanted: Vec<&str> = tunnelled.iter().map(String::as_str).collect();
            let mut backend = kubelet_upgrade(context, node, target, &spdy, &wanted).await?;
            let chosen = backend
                .headers()
                .get(STREAM_PROTOCOL)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let protocol = format!("{}{chosen}", portforward::TUNNEL_PREFIX);
            let accepted = websocket::accept(&headers, &[protocol.as_str()])
                .map_err(|e| StatusError::bad_request(&e.to_string()))?;
            let client = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                let (Ok(kubelet), Ok(client)) =
                    (upgrade::switched(&mut backend).await, client.await)
                else {
                    return;
                };
                let ws = websocket::server(TokioIo::new(client)).await;
                portforward::tunnel(ws, kubelet).await;
            });
            return Ok(switching(accepted.response));
        }
        let supported = match protocol {
            Protocol::RemoteCommand(_) => remotecommand::WEBSOCKET_PROTOCOLS,
            Protocol::PortForward(_) => portforward::WEBSOCKET_PROTOCOLS,
        };
        let accepted = websocket::accept(&headers, supported)
            .map_err(|e| StatusError::bad_request(&e.to_string()))?;
        let ws_protocol = accepted.protocol.clone();
        let backend_protocol = match &protocol {
            Protocol::RemoteCommand(_) => remotecommand::spdy_protocol_for(&ws_protocol),
            Protocol::PortForward(ports) => {
                if ports.is_empty() {
                    return Err(
                        StatusError::bad_request("query parameter \"port\" is required").into(),
                    );
                }
                portforward::SPDY_PROTOCOL
            }
        };
        let mut backend =
            kubelet_upgrade(context, node, target, &spdy, &[backend_protocol]).await?;
        let client = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            let (Ok(kubelet), Ok(client)) = (upgrade::switched(&mut backend).await, client.await)
            else {
                return;
            };
            let ws = websocket::server(TokioIo::new(client)).await;
            let session = spdy::Session::client(kubelet);
            match protocol {
                Protocol::RemoteCommand(options) => {
                    remotecommand::bridge(ws, &ws_protocol, session, options).await;
                }
                Protocol::PortForward(ports) => {
                    portforward::bridge(ws, &ws_protocol, session, &ports).await;
                }
            }
        });
        return Ok(switching(accepted.response));
    }
    if upgrade::is_upgrade(&headers) {
        // SPDY: the client's own session goes through to the kubelet.
        let upgrade_to = headers.get(header::UPGRADE).cloned().unwrap_or(spdy);
        let protocols: Vec<&str> = headers
            .get_all(STREAM_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        let mut backend = kubelet_upgrade(context, node, target, &upgrade_to, &protocols).await?;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        for (name, value) in backend.headers() {
            if name == header::CONNECTION || name == header::UPGRADE || name == STREAM_PROTOCOL {
                response.headers_mut().append(name, value.clone());
            }
        }
        let client = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            let (Ok(kubelet), Ok(client)) = (upgrade::switched(&mut backend).await, client.await)
            else {
                return;
            };
            upgrade::splice(TokioIo::new(client), kubelet).await;
        });
        return Ok(response);
    }
    Err(StatusError::bad_request("Upgrade request required").into())
}

fn switching(response: http::Response<()>) -> Response {
    let (parts, ()) = response.into_parts();
    Response::from_parts(parts, Body::empty()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str], init: &[&str]) -> Value {
        let list = |names: &[&str]| names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
        json!({"metadata": {"name": "web", "namespace": "default"},
               "spec": {"containers": list(containers), "initContainers": list(init)}})
    }

    fn message(error: ApiError) -> String {
        error.status().to_json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn the_only_container_is_the_default() {
        let single = pod(&["app"], &["setup"]);
        assert_eq!(container(&single, "web", None).unwrap(), "app");
        assert_eq!(container(&single, "web", Some("setup")).unwrap(), "setup");
        assert_eq!(
            message(container(&single, "web", Some("nope")).unwrap_err()),
            "container nope is not valid for pod web"
        );
        let two = pod(&["a", "b"], &["setup"]);
        assert_eq!(
            message(container(&two, "web", None).unwrap_err()),
            "a container name must be specified for pod web, choose one of: [setup a b]"
        );
    }

    #[test]
    fn exec_needs_a_stream_and_a_command() {
        let query = query::parse(Some("command=ls&stdout=true&tty=1"));
        let options = command_options(&query, true).unwrap();
        assert!(options.stdout && options.tty && !options.stdin);
        assert_eq!(
            message(command_options(&query::parse(Some("command=ls")), true).unwrap_err()),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert_eq!(
            message(command_options(&query::parse(Some("stdout=1")), true).unwrap_err()),
            "you must specify at least one command for the container"
        );
        assert!(command_options(&query::parse(Some("stdout=1")), false).is_ok());
        assert!(command_options(&query::parse(Some("stdout=maybe")), false).is_err());
    }
}
