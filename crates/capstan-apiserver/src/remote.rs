//! The API server as an HTTP client of remote services: the connections kept to them
//! ([`Pool`], shared with the admission and conversion webhooks and their `caBundle` TLS), and
//! the services a kubeconfig file names ([`Service`]), as upstream's generic webhook
//! (`k8s.io/apiserver/pkg/util/webhook`) reaches the token review webhook, the authorization
//! webhook and the audit webhook: the file's URL posted to as it is, its CA (or none checked
//! under `insecure-skip-tls-verify`) and client credentials, a 30 s limit on each call, and
//! retries with exponential backoff on the errors upstream deems transient.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_api::field::go_quote;
use capstan_client::credentials::ServiceKubeconfig;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// An HTTP/1.1 connection to a remote service.
type Sender = hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>;

/// How many idle connections a pool keeps.
const IDLE_CONNECTIONS: usize = 32;

/// What a remote service answered: the status, headers and whole body.
pub(crate) struct Answer {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
}

/// A service's idle connections, by address, reused by later calls (as Go's transport keeps
/// them), so that a call does not pay a TCP and TLS handshake each time.
#[derive(Default)]
pub(crate) struct Pool(Mutex<Vec<(String, Sender)>>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

impl Pool {
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

    /// A new connection to `address`: TLS checked for the server name with `tls`, or plain.
    async fn connect(
        address: &str,
        tls: Option<(&Arc<rustls::ClientConfig>, &str)>,
    ) -> Result<Sender, String> {
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| crate::status::dial_error(address, &e))?;
        let _ = tcp.set_nodelay(true);
        let handshake = match tls {
            Some((config, server_name)) => {
                let name =
                    ServerName::try_from(server_name.to_owned()).map_err(|e| e.to_string())?;
                let stream = TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("tls: {e}"))?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| e.to_string())?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                sender
            }
            None => {
                let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                sender
            }
        };
        Ok(handshake)
    }

    /// Sends `request` to `address` over a kept connection or a new one (once more on a new
    /// one when a kept connection turns out closed), and reads the answer up to `limit` bytes.
    pub(crate) async fn exchange(
        &self,
        address: &str,
        tls: Option<(&Arc<rustls::ClientConfig>, &str)>,
        request: http::Request<Full<bytes::Bytes>>,
        limit: usize,
    ) -> Result<Answer, String> {
        let idle = self.take(address);
        let reused = idle.is_some();
        let mut sender = match idle {
            Some(sender) => sender,
            None => Self::connect(address, tls).await?,
        };
        let response = match sender.send_request(request.clone()).await {
            Ok(response) => response,
            Err(_) if reused => {
                sender = Self::connect(address, tls).await?;
                sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, limit)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        self.keep(address.to_owned(), sender);
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// `host:port`, an IPv6 literal in brackets.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What client-go makes of an answer that is not a success: its Status's message if it is
/// one, else upstream's generic words.
pub(crate) fn answer_error(code: u16, body: &[u8]) -> String {
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

/// The largest answer read from a kubeconfig-configured service.
const MAX_ANSWER: usize = 3 * 1024 * 1024;

/// How long one call may take, reading the answer included (upstream's generic webhook's
/// `defaultRequestTimeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed, and whether upstream's `DefaultShouldRetry` would try again (a reset
/// connection, 500, 504, 429, or an answer with `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallError {
    pub message: String,
    pub retry: bool,
}

/// Upstream's `wait.Backoff` for webhook retries: `steps` attempts at most, waiting
/// `initial`, then 1.5 times longer each time, each wait stretched by up to 20 %.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub steps: u32,
}

impl Backoff {
    /// The default of the token and authorization webhooks (500 ms, 5 steps).
    pub(crate) const WEBHOOK: Backoff = Backoff {
        initial: Duration::from_millis(500),
        steps: 5,
    };
}

/// A remote service named by a kubeconfig file, reached with its credentials.
pub(crate) struct Service {
    /// The URL posted to, as the file gives it.
    url: String,
    /// `host:port` to connect to.
    address: String,
    /// The `Host` header.
    host: String,
    /// The path (and query) posted to.
    path: String,
    /// TLS (with the name the certificate must carry) for `https`, none for `http`.
    tls: Option<(Arc<rustls::ClientConfig>, String)>,
    token: Option<String>,
    timeout: Duration,
    pool: Pool,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// The service the kubeconfig file at `path` names; `flag` names it in errors.
    pub(crate) fn load(flag: &str, path: &Path) -> Result<Service, String> {
        capstan_client::credentials::read_service_kubeconfig(path)
            .and_then(Service::new)
            .map_err(|e| format!("{flag} {}: {e}", path.display()))
    }

    /// The service `config` names.
    pub(crate) fn new(config: ServiceKubeconfig) -> Result<Service, String> {
        let (secure, rest) = if let Some(rest) = config.server.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = config.server.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!(
                "server {:?}: only https:// and http:// URLs are supported",
                config.server
            ));
        };
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if authority.is_empty() {
            return Err(format!("server {:?}: no host", config.server));
        }
        let default_port = if secure { 443 } else { 80 };
        let (hostname, port) = match authority.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| format!("server {:?}: bad IPv6 host", config.server))?;
                let port = match after.strip_prefix(':') {
                    Some(p) => p
                        .parse()
                        .map_err(|_| format!("server {:?}: bad port", config.server))?,
                    None => default_port,
                };
                (host.to_owned(), port)
            }
            None => match authority.rsplit_once(':') {
                Some((host, p)) => (
                    host.to_owned(),
                    p.parse()
                        .map_err(|_| format!("server {:?}: bad port", config.server))?,
                ),
                None => (authority.to_owned(), default_port),
            },
        };
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        let tls = if secure {
            let config_tls = match (&config.client_certificate, config.insecure_skip_tls_verify) {
                (Some((cert, key)), insecure) => {
                    let bundle = (!insecure).then(|| config.ca_pem.clone().unwrap_or_default());
                    capstan_client::tls::client_config_presenting(bundle.as_deref(), cert, key)?
                }
                (None, true) => {
                    capstan_client::tls::insecure_client_config().map_err(|e| e.to_string())?
                }
                (None, false) => capstan_client::tls::client_config_trusting(
                    config.ca_pem.as_deref().unwrap_or_default(),
                )?,
            };
            let server_name = config
                .tls_server_name
                .clone()
                .unwrap_or_else(|| hostname.clone());
            Some((Arc::new(config_tls), server_name))
        } else {
            None
        };
        Ok(Service {
            url: config.server.clone(),
            address: join_host_port(&hostname, port),
            host: authority.to_owned(),
            path,
            tls,
            token: config.token,
            timeout: REQUEST_TIMEOUT,
            pool: Pool::default(),
        })
    }

    /// The same service with another limit on each call (tests).
    #[cfg(test)]
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Service {
        self.timeout = timeout;
        self
    }

    /// Posts `body` (JSON) once; the answer's JSON, or why there is none, in client-go's
    /// words (`Post "<url>": ...` for the transport).
    pub(crate) async fn post(&self, body: &[u8]) -> Result<Value, CallError> {
        let transport = |why: String| CallError {
            retry: why.contains("reset by peer") || why.contains("connection reset"),
            message: format!("Post {}: {why}", go_quote(&self.url)),
        };
        let mut request = http::Request::post(self.path.as_str())
            .header(http::header::HOST, self.host.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::USER_AGENT, "capstan-apiserver");
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(bytes::Bytes::copy_from_slice(body)))
            .map_err(|e| transport(e.to_string()))?;
        let tls = self.tls.as_ref().map(|(c, n)| (c, n.as_str()));
        let answer = tokio::time::timeout(
            self.timeout,
            self.pool.exchange(&self.address, tls, request, MAX_ANSWER),
        )
        .await
        .map_err(|_| {
            transport(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                    .to_owned(),
            )
        })?
        .map_err(transport)?;
        let code = answer.status.as_u16();
        if !answer.status.is_success() {
            return Err(CallError {
                message: answer_error(code, &answer.body),
                retry: matches!(code, 500 | 504 | 429)
                    || answer.headers.contains_key(http::header::RETRY_AFTER),
            });
        }
        serde_json::from_slice(&answer.body).map_err(|e| CallError {
            message: format!("json parse error: {e}"),
            retry: false,
        })
    }

    /// [`Service::post`], tried again after the waits of `backoff` while the failure is
    /// transient, as upstream's `WithExponentialBackoff`; the last failure otherwise.
    pub(crate) async fn post_retrying(
        &self,
        body: &[u8],
        backoff: Backoff,
    ) -> Result<Value, String> {
        let mut wait = backoff.initial;
        let mut attempt = 1;
        loop {
            match self.post(body).await {
                Ok(answer) => return Ok(answer),
                Err(error) if error.retry && attempt < backoff.steps => {
                    let jitter = wait.mul_f64(0.2 * rand::random::<f64>());
                    tokio::time::sleep(wait + jitter).await;
                    wait = wait.mul_f64(1.5);
                    attempt += 1;
                }
                Err(error) => return Err(error.message),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: &str) -> ServiceKubeconfig {
        ServiceKubeconfig {
            server: server.to_owned(),
            ..ServiceKubeconfig::default()
        }
    }

    #[test]
    fn urls_give_the_address_host_and_path_posted_to() {
        let service = Service::new(config("https://authn.example:8443/authenticate?x=1")).unwrap();
        assert_eq!(service.address, "authn.example:8443");
        assert_eq!(service.host, "authn.example:8443");
        assert_eq!(service.path, "/authenticate?x=1");
        assert_eq!(service.tls.as_ref().unwrap().1, "authn.example");
        let service = Service::new(config("http://[::1]")).unwrap();
        assert_eq!(service.address, "[::1]:80");
        assert_eq!(service.path, "/");
        assert!(service.tls.is_none());
        let named = Service::new(ServiceKubeconfig {
            tls_server_name: Some("webhook.svc".into()),
            ..config("https://10.0.0.1")
        })
        .unwrap();
        assert_eq!(named.address, "10.0.0.1:443");
        assert_eq!(named.tls.as_ref().unwrap().1, "webhook.svc");
        assert!(Service::new(config("ftp://x")).is_err());
        assert!(Service::new(config("https://x:notaport/")).is_err());
        assert!(Service::new(config("https:///path")).is_err());
    }

    /// A plain HTTP server on loopback answering each request with the next of `answers`.
    async fn serve(answers: Vec<(u16, &'static str)>) -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (answers, kept) = (answers.clone(), kept.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let (answers, kept) = (answers.clone(), kept.clone());
                            async move {
                                let auth = request
                                    .headers()
                                    .get("authorization")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_owned();
                                let path = request.uri().to_string();
                                let body = request.into_body().collect().await.unwrap().to_bytes();
                                kept.lock().unwrap().push(format!(
                                    "{path} {auth} {}",
                                    String::from_utf8_lossy(&body)
                                ));
                                let (code, text) =
                                    answers.lock().unwrap().next().unwrap_or((200, "{}"));
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .status(code)
                                        .body(Full::new(bytes::Bytes::from(text)))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn posts_carry_the_token_and_transient_failures_are_retried() {
        let (port, seen) = serve(vec![
            (500, "boom"),
            (429, r#"{"kind":"Status","message":"slow down"}"#),
            (200, r#"{"ok":true}"#),
        ])
        .await;
        let service = Service::new(ServiceKubeconfig {
            token: Some("t0k".into()),
            ..config(&format!("http://127.0.0.1:{port}/review"))
        })
        .unwrap();
        let quick = Backoff {
            initial: Duration::from_millis(1),
            steps: 5,
        };
        assert_eq!(
            service.post_retrying(b"{\"a\":1}", quick).await.unwrap(),
            serde_json::json!({"ok": true})
        );
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], "/review Bearer t0k {\"a\":1}");
    }

    #[tokio::test]
    async fn permanent_failures_are_not_retried_and_are_worded_as_client_go() {
        let (port, seen) = serve(vec![(403, "no"), (200, "not json")]).await;
        let service = Service::new(config(&format!("http://127.0.0.1:{port}"))).unwrap();
        let error = service.post(b"{}").await.unwrap_err();
        assert_eq!(
            error.message,
            "an error on the server (\"no\") has prevented the request from succeeding"
        );
        assert!(!error.retry);
        let error = service
            .post_retrying(b"{}", Backoff::WEBHOOK)
            .await
            .unwrap_err();
        assert!(error.starts_with("json parse error"), "{error}");
        assert_eq!(seen.lock().unwrap().len(), 2);
        // Nobody listening: the dial error, as Go words it.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let service = Service::new(config(&format!("https://127.0.0.1:{port}/x"))).unwrap();
        let error = service.post(b"{}").await.unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "Post \"https://127.0.0.1:{port}/x\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
    }

    #[tokio::test]
    async fn calls_are_limited_in_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts and never answers.
        let _hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let service = Service::new(config(&format!("http://127.0.0.1:{port}")))
            .unwrap()
            .with_timeout(Duration::from_millis(200));
        let error = service.post(b"{}").await.unwrap_err();
        assert!(
            error.message.contains("Client.Timeout exceeded"),
            "{error:?}"
        );
    }
}
