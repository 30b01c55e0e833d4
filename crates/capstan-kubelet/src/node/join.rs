//! Joining a cluster from another machine (`capstan agent --server URL --token TOKEN`), as k3s
//! agents do: the CA bundle is fetched from the server's `/cacerts` before the server is
//! trusted and checked against the hash a `K10<sha256>::<user>:<secret>` token carries (a bare
//! secret pins nothing, which is refused unless allowed); then the token's secret buys the
//! node's credentials from `/v1-capstan/node`, showing the node password kept in the agent's
//! data directory: a client certificate for `system:node:<name>` from the cluster CA and a
//! serving certificate for the kubelet API from the kubelet serving CA. A joining server
//! (`capstan server --server URL --token TOKEN`) fetches the secrets servers share the same
//! way ([`server_bootstrap`]), with a pinned token only.

use std::sync::Arc;

use bytes::Bytes;
use capstan_api::sha256_hex;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The server URL is not usable.
    #[error("invalid server URL {0:?}: expected https://host:port")]
    Url(String),
    /// The token has no CA hash.
    #[error(
        "the token does not pin the server's CA (expected K10<sha256>::<user>:<secret>, as the \
         server writes to <data-dir>/token)"
    )]
    Unpinned,
    /// The server's CA is not the one the token names.
    #[error("the server's CA bundle has hash {actual}, the token expects {expected}")]
    CaMismatch {
        /// The token's hash.
        expected: String,
        /// The served bundle's.
        actual: String,
    },
    /// The server could not be reached or answered badly.
    #[error("{what}: {message}")]
    Request {
        /// The request.
        what: &'static str,
        /// Why.
        message: String,
    },
}

/// The credentials a joined node runs with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    /// The cluster CA bundle.
    pub ca: String,
    /// The node's client certificate and key.
    pub client: Pair,
    /// The kubelet API's serving certificate and key.
    pub serving: Pair,
    /// The service proxy's client certificate and key (`system:kube-proxy`); absent from a
    /// server that predates the proxy.
    #[serde(default)]
    pub proxy: Option<Pair>,
    /// The local-path provisioner's client certificate and key; absent from a server that
    /// predates it.
    #[serde(default)]
    pub storage: Option<Pair>,
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// The key.
    pub key: String,
}

/// A parsed join token: the CA hash (if pinned) and the secret.
#[derive(Debug, PartialEq, Eq)]
pub struct Token {
    /// The SHA-256 of the CA bundle, lowercase hex.
    pub ca_hash: Option<String>,
    /// The user name of the credentials part.
    pub user: String,
    /// The secret.
    pub secret: String,
}

impl Token {
    /// Parses `K10<hash>::<user>:<secret>` or a bare secret.
    pub fn parse(text: &str) -> Token {
        let text = text.trim();
        if let Some((hash, credentials)) = text.strip_prefix("K10").and_then(|r| r.split_once("::"))
        {
            let (user, secret) = credentials.split_once(':').unwrap_or(("node", credentials));
            return Token {
                ca_hash: Some(hash.to_ascii_lowercase()),
                user: user.to_owned(),
                secret: secret.to_owned(),
            };
        }
        Token {
            ca_hash: None,
            user: "node".to_owned(),
            secret: text.to_owned(),
        }
    }
}

/// The host and port of an `https://host:port` URL.
fn host_port(server: &str) -> Result<(String, u16), JoinError> {
    let rest = server
        .strip_prefix("https://")
        .ok_or_else(|| JoinError::Url(server.to_owned()))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => (
            host,
            port.parse::<u16>()
                .map_err(|_| JoinError::Url(server.to_owned()))?,
        ),
        _ => (authority, 6443),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(JoinError::Url(server.to_owned()));
    }
    Ok((host.to_owned(), port))
}

fn tls_config(ca: Option<&str>) -> Result<rustls::ClientConfig, String> {
    // Without a CA: only for fetching the CA bundle, whose hash is checked against the token
    // before anything from the server is trusted.
    let Some(ca) = ca else {
        return capstan_client::tls::insecure_client_config().map_err(|e| e.to_string());
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// One HTTPS request to the server: (status, body).
async fn request(
    server: &str,
    ca: Option<&str>,
    request: http::Request<Full<Bytes>>,
    what: &'static str,
) -> Result<(u16, Bytes), JoinError> {
    let fail = |message: String| JoinError::Request { what, message };
    let (host, port) = host_port(server)?;
    let config = tls_config(ca).map_err(fail)?;
    let name = ServerName::try_from(host.clone()).map_err(|e| fail(e.to_string()))?;
    let exchange = async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| fail(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), exchange)
        .await
        .map_err(|_| fail("timed out".to_owned()))?
}

/// This machine's node password, kept at `path` (mode 0600) and made on first use: the server
/// records it at the node's first join and asks for it at every later one, so that nobody
/// else joins as this node.
pub fn node_password(path: &std::path::Path) -> std::io::Result<String> {
    if let Ok(saved) = std::fs::read_to_string(path) {
        let saved = saved.trim();
        if !saved.is_empty() {
            return Ok(saved.to_owned());
        }
    }
    use capstan_client::credentials::{HEX, random_secret};
    let password = random_secret(32, HEX);
    capstan_client::credentials::write_file(path, &format!("{password}\n"), 0o600)?;
    Ok(password)
}

/// Joins the cluster at `server` with `token` as node `node` reachable at `addresses`, proving
/// the name is this machine's with `password` ([`node_password`]). `allow_unpinned` accepts a
/// token without a CA hash (trusting whatever CA the server sends).
pub async fn join(
    server: &str,
    token: &str,
    node: &str,
    addresses: &[String],
    password: &str,
    allow_unpinned: bool,
) -> Result<Credentials, JoinError> {
    let token = Token::parse(token);
    let ca = pinned_ca(server, &token, allow_unpinned).await?;
    let host = host_port(server)?.0;
    let body =
        serde_json::json!({"name": node, "addresses": addresses, "password": password}).to_string();
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", token.user, token.secret));
    let post = http::Request::post("/v1-capstan/node")
        .header(http::header::HOST, host.as_str())
        .header(http::header::AUTHORIZATION, format!("Basic {basic}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| JoinError::Request {
            what: "POST /v1-capstan/node",
            message: e.to_string(),
        })?;
    let (status, answer) = request(server, Some(&ca), post, "POST /v1-capstan/node").await?;
    if status != 200 {
        return Err(JoinError::Request {
            what: "POST /v1-capstan/node",
            message: format!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&answer).trim()
            ),
        });
    }
    serde_json::from_slice(&answer).map_err(|e| JoinError::Request {
        what: "POST /v1-capstan/node",
        message: format!("unreadable credentials: {e}"),
    })
}

/// The server's CA bundle from `GET /cacerts`, fetched before the server is trusted and
/// checked against the hash `token` pins; a token that pins none is refused unless
/// `allow_unpinned`.
async fn pinned_ca(server: &str, token: &Token, allow_unpinned: bool) -> Result<String, JoinError> {
    if token.ca_hash.is_none() && !allow_unpinned {
        return Err(JoinError::Unpinned);
    }
    let host = host_port(server)?.0;
    let get = http::Request::get("/cacerts")
        .header(http::header::HOST, host.as_str())
        .body(Full::new(Bytes::new()))
        .map_err(|e| JoinError::Request {
            what: "GET /cacerts",
            message: e.to_string(),
        })?;
    let (status, ca) = request(server, None, get, "GET /cacerts").await?;
    if status != 200 {
        return Err(JoinError::Request {
            what: "GET /cacerts",
            message: format!("the server answered {status}"),
        });
    }
    let actual = sha256_hex(&ca);
    if let Some(expected) = &token.ca_hash
        && *expected != actual
    {
        return Err(JoinError::CaMismatch {
            expected: expected.clone(),
            actual,
        });
    }
    Ok(String::from_utf8_lossy(&ca).into_owned())
}

/// The path a joining server fetches the cluster's shared secrets from (the server's
/// `capstan_apiserver::server_join::SERVER_BOOTSTRAP`).
pub const SERVER_BOOTSTRAP: &str = "/v1-capstan/server-bootstrap";

/// Fetches the secrets a joining server shares with the server at `server` (`capstan server
/// --server URL --token TOKEN`), as k3s servers fetch `/v1-k3s/server-bootstrap`: the CA bundle
/// from `/cacerts`, pinned by `token`'s hash (a token that pins no CA is refused: the answer
/// holds the CA keys), then `GET /v1-capstan/server-bootstrap` authenticated with the token's
/// secret as user `server`. Returns the pinned CA bundle and the answer's body (JSON).
pub async fn server_bootstrap(server: &str, token: &str) -> Result<(String, Bytes), JoinError> {
    let token = Token::parse(token);
    let ca = pinned_ca(server, &token, false).await?;
    let host = host_port(server)?.0;
    use base64::Engine as _;
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("server:{}", token.secret));
    let what = "GET /v1-capstan/server-bootstrap";
    let get = http::Request::get(SERVER_BOOTSTRAP)
        .header(http::header::HOST, host.as_str())
        .header(http::header::AUTHORIZATION, format!("Basic {basic}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| JoinError::Request {
            what,
            message: e.to_string(),
        })?;
    let (status, answer) = request(server, Some(&ca), get, what).await?;
    if status != 200 {
        return Err(JoinError::Request {
            what,
            message: format!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&answer).trim()
            ),
        });
    }
    Ok((ca, answer))
}

/// Writes the node's kubeconfig (mode 0600): `server`, the cluster CA and the node's client
/// certificate.
pub fn write_kubeconfig(
    path: &std::path::Path,
    server: &str,
    credentials: &Credentials,
) -> std::io::Result<()> {
    capstan_client::credentials::Kubeconfig {
        server,
        ca_pem: &credentials.ca,
        cert_pem: &credentials.client.cert,
        key_pem: &credentials.client.key,
    }
    .write(path, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_password_is_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent").join("node-password");
        let first = node_password(&path).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(node_password(&path).unwrap(), first);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }

    #[test]
    fn tokens_parse_as_k3s_writes_them() {
        let token = Token::parse("K10ABCdef::server:s3cret\n");
        assert_eq!(
            token,
            Token {
                ca_hash: Some("abcdef".into()),
                user: "server".into(),
                secret: "s3cret".into()
            }
        );
        assert_eq!(Token::parse("plain").ca_hash, None);
        assert_eq!(Token::parse("plain").secret, "plain");
    }

    #[test]
    fn server_urls_need_https_and_default_to_6443() {
        assert_eq!(
            host_port("https://10.0.0.1:7443").unwrap(),
            ("10.0.0.1".into(), 7443)
        );
        assert_eq!(
            host_port("https://server.example").unwrap(),
            ("server.example".into(), 6443)
        );
        assert_eq!(
            host_port("https://[::1]:6443/").unwrap(),
            ("::1".into(), 6443)
        );
        assert!(host_port("http://10.0.0.1:6443").is_err());
    }

    #[tokio::test]
    async fn an_unpinned_token_is_refused_unless_allowed() {
        let refused = join("https://127.0.0.1:1", "secret", "n", &[], "pw", false).await;
        assert!(matches!(refused, Err(JoinError::Unpinned)));
    }
}
