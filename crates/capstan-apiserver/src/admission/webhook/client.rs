//! The transport of webhooks, shared by admission and conversion webhooks: where a webhook is
//! (a URL, or a Service resolved through its endpoints), its TLS client trusting its
//! `caBundle`, and the connections kept between calls.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::field::go_quote;
use http_body_util::Full;
use serde_json::Value;

use crate::registry::Registries;
use crate::remote::{Pool, answer_error, join_host_port as join};

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
    pool: Pool,
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
            pool: Pool::default(),
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
        let tls = self.tls.clone()?;
        let answer = self
            .pool
            .exchange(&address, Some((&tls, &server_name)), request, MAX_ANSWER)
            .await?;
        if !answer.status.is_success() {
            return Ok(Err(answer_error(answer.status.as_u16(), &answer.body)));
        }
        Ok(serde_json::from_slice(&answer.body).map_err(|e| format!("json parse error: {e}")))
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
