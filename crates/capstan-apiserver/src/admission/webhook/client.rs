//! The transport of webhooks, shared by admission and conversion webhooks: where a webhook is
//! (a URL, or a Service resolved through its endpoints), its TLS client trusting its
//! `caBundle`, and the connections kept between calls.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::field::go_quote;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::registry::Registries;

/// The largest answer read from a webhook.
const MAX_ANSWER: usize = 3 * 1024 * 1024;

/// Where a webhook is reached.
#[derive(Debug)]
pub(crate) enum Target {
    /// `https://host[:port][/path]`: the URL, and the host and port it names.
    Url {
        url: String,
        host: String,
        port: u16,
    },
    /// A port of a Service.
    Service {
        namespace: String,
        name: String,
        port: i32,
        path: String,
    },
}

impl Target {
    /// A Service's port (`namespace`, `name`, `port`, `path`), else the URL.
    pub(crate) fn new(
        url: Option<&str>,
        service: Option<(&str, &str, Option<i32>, Option<&str>)>,
    ) -> Target {
        if let Some((namespace, name, port, path)) = service {
            return Target::Service {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                port: port.unwrap_or(443),
                path: path.unwrap_or_default().to_owned(),
            };
        }
        let url = url.unwrap_or_default().to_owned();
        let rest = url.strip_prefix("https://").unwrap_or(&url);
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = split_host_port(authority);
        Target::Url {
            url: url.clone(),
            host,
            port,
        }
    }
}

/// `host[:port]`, IPv6 literals in brackets; 443 by default.
fn split_host_port(authority: &str) -> (String, u16) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host.to_owned(), port.unwrap_or(443));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(443)),
        None => (authority.to_owned(), 443),
    }
}

/// A webhook's address and TLS client, with the connections kept between its calls.
#[derive(Debug)]
pub(crate) struct Client {
    pub target: Target,
    /// Its TLS client, trusting its `caBundle`.
    tls: Result<Arc<rustls::ClientConfig>, String>,
    /// Connections kept between calls.
    idle: Idle,
}

/// Why a review went unanswered: the transport failed, or what came back is no answer.
pub(crate) enum Why {
    Transport(String),
    Answer(String),
}

impl Client {
    /// A client of the webhook at `target` whose certificate `ca_bundle` (PEM) signs; the
    /// system's roots without one.
    pub(crate) fn new(target: Target, ca_bundle: &[u8]) -> Client {
        Client {
            target,
            tls: capstan_client::tls::client_config_trusting(ca_bundle).map(Arc::new),
            idle: Idle::default(),
        }
    }

    /// The URL the webhook is called at, with the timeout it is told of.
    pub(crate) fn url(&self, timeout: Duration) -> String {
        let timeout = format!("?timeout={}s", timeout.as_secs());
        match &self.target {
            Target::Url { url, .. } => format!("{url}{timeout}"),
            Target::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}{timeout}"),
        }
    }

    /// Where to connect, and the name the webhook's certificate must carry.
    async fn resolve(&self, table: &Arc<Registries>) -> Result<(String, String), String> {
        match &self.target {
            Target::Url { host, port, .. } => Ok((join(host, *port), host.clone())),
            Target::Service {
                namespace,
                name,
                port,
                ..
            } => {
                let server_name = format!("{name}.{namespace}.svc");
                let address = resolve_service(table, namespace, name, *port).await?;
                Ok((address, server_name))
            }
        }
    }

    pub(crate) async fn post(
        &self,
        table: &Arc<Registries>,
        url: &str,
        review: &Value,
    ) -> Result<Value, Why> {
        self.exchange(table, url, review)
            .await
            .map_err(Why::Transport)?
            .map_err(Why::Answer)
    }

    /// Sends the review; the transport's failure, or the answer (its body, or why it is not
    /// an answer).
    async fn exchange(
        &self,
        table: &Arc<Registries>,
        url: &str,
        review: &Value,
    ) -> Result<Result<Value, String>, String> {
        let (address, server_name) = self.resolve(table).await?;
        let idle = self.idle.take(&address);
        let reused = idle.is_some();
        let mut sender = match idle {
            Some(sender) => sender,
            None => self.connect(&address, server_name.clone()).await?,
        };
        // What follows the authority: the path (at least `/`) and the timeout query.
        let rest = url.strip_prefix("https://").unwrap_or(url);
        let (host, path_and_query) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let path_and_query = if path_and_query.starts_with('/') {
            path_and_query.to_owned()
        } else {
            format!("/{path_and_query}")
        };
        let host = host.to_owned();
        let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
        let request = http::Request::post(path_and_query)
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::USER_AGENT, "capstan-apiserver")
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = match sender.send_request(request.clone()).await {
            Ok(response) => response,
            // A kept connection the webhook closed meanwhile: once more on a new one.
            Err(_) if reused => {
                sender = self.connect(&address, server_name).await?;
                sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        self.idle.keep(address, sender);
        if !status.is_success() {
            return Ok(Err(answer_error(status.as_u16(), &bytes)));
        }
        Ok(serde_json::from_slice(&bytes).map_err(|e| format!("json parse error: {e}")))
    }
}

impl Client {
    /// A new connection to the webhook at `address`, its certificate checked for `server_name`.
    async fn connect(&self, address: &str, server_name: String) -> Result<Sender, String> {
        let tls = TlsConnector::from(self.tls.clone()?);
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| crate::status::dial_error(address, &e))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(server_name).map_err(|e| e.to_string())?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// An HTTP/1.1 connection to a webhook.
type Sender = hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>;

/// How many idle connections to one webhook are kept.
const IDLE_CONNECTIONS: usize = 32;

/// A webhook's idle connections, by address, reused by later calls (as Go's transport keeps
/// them), so that a call does not pay a TLS handshake each time.
#[derive(Default)]
struct Idle(std::sync::Mutex<Vec<(String, Sender)>>);

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").finish_non_exhaustive()
    }
}

impl Idle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Sender)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection to `address` that is still open.
    fn take(&self, address: &str) -> Option<Sender> {
        let mut idle = self.lock();
        idle.retain(|(_, sender)| !sender.is_closed());
        let at = idle.iter().rposition(|(a, _)| a == address)?;
        Some(idle.swap_remove(at).1)
    }

    /// Keeps a connection whose exchange is over, while there is room.
    fn keep(&self, address: String, sender: Sender) {
        let mut idle = self.lock();
        if idle.len() < IDLE_CONNECTIONS && sender.is_ready() {
            idle.push((address, sender));
        }
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What client-go makes of an answer that is not a success: its Status's message if it is
/// one, else upstream's generic words.
fn answer_error(code: u16, body: &[u8]) -> String {
    if let Ok(status) = serde_json::from_slice::<Value>(body)
        && status["kind"] == "Status"
        && let Some(message) = status["message"].as_str()
    {
        return message.to_owned();
    }
    match code {
        404 => "the server could not find the requested resource".to_owned(),
        _ => format!(
            "an error on the server ({}) has prevented the request from succeeding",
            go_quote(String::from_utf8_lossy(body).trim())
        ),
    }
}

/// An address of a ready endpoint behind `port` of a Service (an ExternalName's host and that
/// port), as upstream's endpoint service resolver finds one.
pub(crate) async fn resolve_service(
    table: &Arc<Registries>,
    namespace: &str,
    name: &str,
    port: i32,
) -> Result<String, String> {
    let not_found = || format!("service {} not found", go_quote(name));
    let services = table.core("services").ok_or_else(not_found)?;
    let service = services
        .get(Some(namespace), name)
        .await
        .map_err(|_| not_found())?;
    let spec = &service["spec"];
    if spec["type"] == "ExternalName" {
        let host = spec["externalName"].as_str().unwrap_or_default();
        return Ok(join(host, port as u16));
    }
    let declared = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(port.into()))
        .ok_or_else(|| {
            format!(
                "no service port {port} found for service {}",
                go_quote(name)
            )
        })?;
    let port_name = declared["name"].as_str().unwrap_or_default();
    let no_endpoints = || format!("no endpoints available for service {}", go_quote(name));
    let endpoints = table
        .core("endpoints")
        .ok_or_else(no_endpoints)?
        .get(Some(namespace), name)
        .await
        .map_err(|_| no_endpoints())?;
    let mut candidates = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let Some(number) = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for address in subset["addresses"].as_array().into_iter().flatten() {
            if let Some(ip) = address["ip"].as_str() {
                candidates.push(join(ip, number as u16));
            }
        }
    }
    if candidates.is_empty() {
        return Err(no_endpoints());
    }
    Ok(candidates.swap_remove(rand::random_range(0..candidates.len())))
}
