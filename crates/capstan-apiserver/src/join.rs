//! Joining machines as nodes, as k3s does. The server keeps a join token
//! (`<data-dir>/token`, `K10<sha256 of the CA bundle>::server:<secret>`) and serves, outside
//! the Kubernetes API's authentication:
//!
//! - `GET /cacerts`: the cluster CA bundle, which a joining agent fetches without trusting the
//!   server yet and checks against the hash in its token (the token pins the CA);
//! - `POST /v1-capstan/node` with `Authorization: Basic node:<secret>` and a JSON body
//!   `{"name": "<node>", "addresses": ["<ip or name>", ...]}`: the node's credentials, a client
//!   certificate for `system:node:<node>` in `system:nodes`, a kubelet serving certificate
//!   for its addresses and the service proxy's client certificate (`system:kube-proxy`), all
//!   from the cluster CA.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use capstan_api::sha256_hex;
use serde::{Deserialize, Serialize};

use crate::pki::{self, PkiError};

/// The path of the CA bundle.
pub const CACERTS: &str = "/cacerts";
/// The path that issues a node's credentials.
pub const NODE: &str = "/v1-capstan/node";

/// The service proxy's user, which upstream's bootstrap policy binds to `system:node-proxier`.
pub const PROXY_USER: &str = "system:kube-proxy";

/// The local-path provisioner's user (bound to `capstan:local-path-provisioner`).
pub const STORAGE_USER: &str = "system:capstan:local-path-provisioner";

/// The largest credentials request read.
const MAX_BODY: usize = 64 * 1024;

/// The join secret and what it unlocks.
#[derive(Debug)]
pub(crate) struct Join {
    ca_pem: String,
    tls_dir: PathBuf,
    secret: String,
}

/// A node's credentials request.
#[derive(Debug, Deserialize)]
struct NodeRequest {
    name: String,
    #[serde(default)]
    addresses: Vec<String>,
}

/// A certificate and key, PEM.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its key.
    pub key: String,
}

/// A node's credentials.
#[derive(Debug, Serialize, Deserialize)]
pub struct NodeCredentials {
    /// The cluster CA bundle.
    pub ca: String,
    /// The node's client certificate (`system:node:<name>`).
    pub client: Pair,
    /// The kubelet's serving certificate.
    pub serving: Pair,
    /// The service proxy's client certificate (`system:kube-proxy`, shared by every node).
    pub proxy: Pair,
    /// The local-path provisioner's client certificate ([`STORAGE_USER`], shared by every
    /// node).
    pub storage: Pair,
}

/// The full token for the CA bundle `ca_pem` and `secret`.
pub fn token(ca_pem: &str, secret: &str) -> String {
    format!("K10{}::server:{secret}", sha256_hex(ca_pem.as_bytes()))
}

/// The secret of a token: the part after `K10<hash>::<user>:`, or a bare token as given.
pub fn secret_of(token: &str) -> &str {
    match token
        .strip_prefix("K10")
        .and_then(|rest| rest.split_once("::"))
    {
        Some((_, credentials)) => credentials
            .split_once(':')
            .map_or(credentials, |(_, password)| password),
        None => token,
    }
}

fn random_secret() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

impl Join {
    /// The join settings of the server whose data dir is `data_dir`: the secret given
    /// (`--token`, a bare secret or a full token), else the one saved by an earlier start, else
    /// a new one; the full token is (re)written to `<data-dir>/token`.
    pub(crate) fn load_or_create(
        data_dir: &Path,
        tls_dir: &Path,
        ca_pem: &str,
        given: Option<&str>,
    ) -> Result<Join, PkiError> {
        let file = data_dir.join("token");
        let saved = std::fs::read_to_string(&file)
            .ok()
            .map(|t| secret_of(t.trim()).to_owned())
            .filter(|s| !s.is_empty());
        let secret = match given.map(str::trim).filter(|t| !t.is_empty()) {
            Some(given) if secret_of(given).is_empty() => {
                return Err(PkiError::Invalid(
                    "--token: the join token's secret is empty".to_owned(),
                ));
            }
            Some(given) => secret_of(given).to_owned(),
            None => saved.unwrap_or_else(random_secret),
        };
        pki::write_file(&file, &format!("{}\n", token(ca_pem, &secret)), 0o600)?;
        Ok(Join {
            ca_pem: ca_pem.to_owned(),
            tls_dir: tls_dir.to_owned(),
            secret,
        })
    }

    /// Whether `path` is served here rather than by the API.
    pub(crate) fn serves(path: &str) -> bool {
        path == CACERTS || path == NODE
    }

    /// Serves a join request (a path [`Join::serves`]).
    pub(crate) async fn serve(&self, request: Request<Body>) -> Response {
        match (request.method(), request.uri().path()) {
            (&Method::GET, CACERTS) => (
                [(header::CONTENT_TYPE, "application/x-pem-file")],
                self.ca_pem.clone(),
            )
                .into_response(),
            (&Method::POST, NODE) => self.node(request).await,
            _ => (StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n").into_response(),
        }
    }

    /// Whether the `Authorization` header carries the join secret (any user name).
    fn authorized(&self, request: &Request<Body>) -> bool {
        let Some(encoded) = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
        else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let text = String::from_utf8_lossy(&decoded);
        let password = text.split_once(':').map_or("", |(_, p)| p);
        constant_time_eq(password.as_bytes(), self.secret.as_bytes())
    }

    async fn node(&self, request: Request<Body>) -> Response {
        if !self.authorized(&request) {
            return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
        }
        let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_BODY).await else {
            return (StatusCode::BAD_REQUEST, "request body too large\n").into_response();
        };
        let node: NodeRequest = match serde_json::from_slice(&body) {
            Ok(node) => node,
            Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
        };
        let name = node.name.trim();
        let valid = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid node name {name:?}: a lowercase RFC 1123 subdomain is required\n"),
            )
                .into_response();
        }
        let mut names = node.addresses.clone();
        names.push(name.to_owned());
        names.retain(|n| !n.trim().is_empty());
        names.sort();
        names.dedup();
        let issued = pki::node_client(&self.tls_dir, name).and_then(|client| {
            let serving = pki::kubelet_serving(&self.tls_dir, name, &names)?;
            let proxy = pki::component_client(&self.tls_dir, "proxy", PROXY_USER, None)?;
            let storage = pki::component_client(&self.tls_dir, "storage", STORAGE_USER, None)?;
            Ok((client, serving, proxy, storage))
        });
        match issued {
            Ok((client, serving, proxy, storage)) => {
                tracing::info!(node = %name, "issued credentials to a joining node");
                axum::Json(NodeCredentials {
                    ca: self.ca_pem.clone(),
                    client: Pair {
                        cert: client.cert_pem,
                        key: client.key_pem,
                    },
                    serving: Pair {
                        cert: serving.cert_pem,
                        key: serving.key_pem,
                    },
                    proxy: Pair {
                        cert: proxy.cert_pem,
                        key: proxy.key_pem,
                    },
                    storage: Pair {
                        cert: storage.cert_pem,
                        key: storage.key_pem,
                    },
                })
                .into_response()
            }
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_pin_the_ca_and_carry_the_secret() {
        let token = token("ca bundle", "s3cret");
        assert!(token.starts_with("K10"));
        assert!(token.ends_with("::server:s3cret"));
        assert_eq!(&token[3..67], sha256_hex(b"ca bundle"));
        assert_eq!(secret_of(&token), "s3cret");
        assert_eq!(secret_of("bare"), "bare");
        assert_eq!(secret_of("K10abc::only"), "only");
    }

    #[tokio::test]
    async fn credentials_need_the_secret_and_a_valid_name() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let pki = pki::load_or_create(&tls, &["localhost".to_owned()]).unwrap();
        let join =
            Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, Some("s3cret")).unwrap();
        let saved = std::fs::read_to_string(dir.path().join("token")).unwrap();
        assert_eq!(saved.trim(), token(&pki.ca_cert_pem, "s3cret"));
        // A restart without --token keeps the secret.
        let again = Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, None).unwrap();
        assert_eq!(again.secret, "s3cret");
        // A token with an empty secret would let `Basic :` in: refused.
        let empty =
            Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, Some("K10abc::server:"));
        assert!(empty.is_err());
        let request = |auth: &str, body: &str| {
            Request::post(NODE)
                .header(
                    header::AUTHORIZATION,
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(auth)
                    ),
                )
                .body(Body::from(body.to_owned()))
                .unwrap()
        };
        let denied = join.serve(request("node:wrong", r#"{"name":"n1"}"#)).await;
        assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
        let bad = join
            .serve(request("node:s3cret", r#"{"name":"N_1"}"#))
            .await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let issued = join
            .serve(request(
                "node:s3cret",
                r#"{"name":"n1","addresses":["10.0.0.9"]}"#,
            ))
            .await;
        assert_eq!(issued.status(), StatusCode::OK);
        let body = axum::body::to_bytes(issued.into_body(), MAX_BODY)
            .await
            .unwrap();
        let credentials: NodeCredentials = serde_json::from_slice(&body).unwrap();
        assert_eq!(credentials.ca, pki.ca_cert_pem);
        let user = crate::authn::User::from_certificate(
            &rustls::pki_types::pem::PemObject::from_pem_slice(credentials.client.cert.as_bytes())
                .map(|c: rustls::pki_types::CertificateDer<'_>| c.to_vec())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert!(user.groups.contains(&"system:nodes".to_owned()));
        let cacerts = join
            .serve(Request::get(CACERTS).body(Body::empty()).unwrap())
            .await;
        let body = axum::body::to_bytes(cacerts.into_body(), MAX_BODY)
            .await
            .unwrap();
        assert_eq!(sha256_hex(&body), sha256_hex(pki.ca_cert_pem.as_bytes()));
    }
}
