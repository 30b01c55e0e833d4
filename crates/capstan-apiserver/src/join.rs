//! Joining machines as nodes, as k3s does. The server keeps a join token
//! (`<data-dir>/token`, `K10<sha256 of the CA bundle>::server:<secret>`) and serves, outside
//! the Kubernetes API's authentication:
//!
//! - `GET /cacerts`: the cluster CA bundle, which a joining agent fetches without trusting the
//!   server yet and checks against the hash in its token (the token pins the CA);
//! - `POST /v1-capstan/node` with `Authorization: Basic node:<secret>` and a JSON body
//!   `{"name": "<node>", "addresses": ["<ip or name>", ...], "password": "<node password>"}`:
//!   the node's credentials, a client certificate for `system:node:<node>` in `system:nodes`
//!   (cluster CA), a kubelet serving certificate for its name and addresses (from the kubelet
//!   serving CA, which no client of the API server trusts), the service proxy's and the
//!   local-path provisioner's client certificates;
//! - `GET /v1-capstan/server-bootstrap` with the join secret only: the secrets a joining
//!   server shares ([`crate::server_join`]).
//!
//! What a join token buys is bounded, as k3s bounds it:
//! - the secret is the server's (re-read from `<data-dir>/token` at each join, so
//!   `capstan token rotate` takes effect without a restart) or a bootstrap token
//!   ([`crate::authn::bootstrap`]) valid for authentication;
//! - no certificate names the API server (its Service's names and cluster IP, `--tls-san`);
//! - a node name is claimed by the first join's node password (kept hashed in the Secret
//!   `kube-system/<node>.node-password.capstan`); joining again as that node needs the same
//!   password, and a name whose Node exists without a password on record (the server's own
//!   node, or one that joined before passwords) cannot be joined. The `node-password`
//!   controller removes the Secret once its Node is deleted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use capstan_api::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::authn::constant_time_eq;
use crate::pki::{self, PkiError};
use crate::registry::{Registry, WriteOptions};
use crate::server_join::SERVER_BOOTSTRAP;

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

/// The Secret type of node passwords.
pub const NODE_PASSWORD_TYPE: &str = "capstan.io/node-password";
/// The namespace node password Secrets live in.
pub const NODE_PASSWORD_NAMESPACE: &str = "kube-system";
/// The suffix of a node password Secret's name (`<node>.node-password.capstan`).
pub const NODE_PASSWORD_SUFFIX: &str = ".node-password.capstan";

/// The join secret and what it unlocks.
#[derive(Debug)]
pub(crate) struct Join {
    ca_pem: String,
    tls_dir: PathBuf,
    /// `<data-dir>/token`, re-read at each join.
    token_file: PathBuf,
    /// The secret last read from the token file.
    secret: Mutex<String>,
    /// Names only the API server's certificate may carry.
    reserved: Vec<String>,
    /// Where node passwords and bootstrap tokens are kept; `None` in unit tests of the
    /// certificates alone.
    objects: Option<Objects>,
    /// How long a joining node's certificates last.
    node_lifetime: std::time::Duration,
    /// What a joining server gets (`GET /v1-capstan/server-bootstrap`); `None` in unit tests.
    server: Option<crate::server_join::Source>,
}

/// The registries a join reads and writes.
#[derive(Clone, Debug)]
pub(crate) struct Objects {
    /// Secrets (node passwords, bootstrap tokens).
    pub secrets: Arc<Registry>,
    /// Nodes.
    pub nodes: Arc<Registry>,
}

/// A node's credentials request.
#[derive(Debug, Deserialize)]
struct NodeRequest {
    name: String,
    #[serde(default)]
    addresses: Vec<String>,
    /// The node's password (absent from agents that predate node passwords).
    #[serde(default)]
    password: Option<String>,
}

/// A certificate and key, PEM (declared with the server join, which sends CAs as pairs).
pub use crate::server_join::Pair;

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

/// Rotates the join token of the server whose data directory is `data_dir` (`capstan token
/// rotate`): `new` (a bare secret or a full token), else a random secret, becomes the secret
/// the server accepts, from its next join on. Returns the full token.
pub fn rotate_token(data_dir: &Path, new: Option<&str>) -> Result<String, PkiError> {
    let ca_file = data_dir.join("tls").join("ca.crt");
    let ca_pem = std::fs::read_to_string(&ca_file).map_err(|source| PkiError::Io {
        path: ca_file,
        source,
    })?;
    let secret = match new.map(str::trim).filter(|t| !t.is_empty()) {
        Some(given) => secret_of(given).to_owned(),
        None => random_secret(),
    };
    Join::write_token(data_dir, &ca_pem, &secret)
}

fn random_secret() -> String {
    use capstan_client::credentials::{HEX, random_secret};
    random_secret(32, HEX)
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
        let secret = Self::load_or_create_secret(data_dir, ca_pem, given)?;
        Ok(Join {
            ca_pem: ca_pem.to_owned(),
            tls_dir: tls_dir.to_owned(),
            token_file: data_dir.join("token"),
            secret: Mutex::new(secret),
            reserved: Vec::new(),
            objects: None,
            node_lifetime: pki::DEFAULT_NODE_LIFETIME,
            server: None,
        })
    }

    /// The same join, issuing node certificates that last `lifetime`.
    pub(crate) fn with_node_lifetime(mut self, lifetime: std::time::Duration) -> Join {
        self.node_lifetime = lifetime;
        self
    }

    /// The same join, refusing certificates for `reserved` names (the API server's) and
    /// keeping node passwords and reading bootstrap tokens in `objects`.
    pub(crate) fn with_objects(mut self, reserved: Vec<String>, objects: Objects) -> Join {
        self.reserved = reserved;
        self.objects = Some(objects);
        self
    }

    /// The same join, answering joining servers from `source`.
    pub(crate) fn with_server_bootstrap(mut self, source: crate::server_join::Source) -> Join {
        self.server = Some(source);
        self
    }

    /// Writes `<data-dir>/token` for `secret` and the CA bundle `ca_pem` (what
    /// `capstan token rotate` does; a running server reads it at its next join).
    pub(crate) fn write_token(
        data_dir: &Path,
        ca_pem: &str,
        secret: &str,
    ) -> Result<String, PkiError> {
        if secret.trim().is_empty() || secret.contains(char::is_whitespace) {
            return Err(PkiError::Invalid(
                "the join token's secret must be non-empty and have no spaces".to_owned(),
            ));
        }
        let token = token(ca_pem, secret);
        pki::write_file(&data_dir.join("token"), &format!("{token}\n"), 0o600)?;
        Ok(token)
    }

    fn load_or_create_secret(
        data_dir: &Path,
        ca_pem: &str,
        given: Option<&str>,
    ) -> Result<String, PkiError> {
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
        Self::write_token(data_dir, ca_pem, &secret)?;
        Ok(secret)
    }

    /// The server's join secret: the token file's, as last read when it is unreadable.
    fn current_secret(&self) -> String {
        let mut secret = self.secret.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(read) = std::fs::read_to_string(&self.token_file)
            .ok()
            .map(|t| secret_of(t.trim()).to_owned())
            .filter(|s| !s.is_empty())
        {
            *secret = read;
        }
        secret.clone()
    }

    /// Whether `path` is served here rather than by the API.
    pub(crate) fn serves(path: &str) -> bool {
        path == CACERTS || path == NODE || path == SERVER_BOOTSTRAP
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
            (&Method::GET, SERVER_BOOTSTRAP) => self.server_bootstrap(request.headers()).await,
            _ => (StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n").into_response(),
        }
    }

    /// The password of the `Authorization` header's Basic credentials (any user name).
    fn basic_password(headers: &axum::http::HeaderMap) -> Option<String> {
        let encoded = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let text = String::from_utf8_lossy(&decoded);
        Some(text.split_once(':').map_or("", |(_, p)| p).to_owned())
    }

    /// Whether `password` is the server's join secret.
    fn is_join_secret(&self, password: &str) -> bool {
        constant_time_eq(password.as_bytes(), self.current_secret().as_bytes())
    }

    /// Whether the `Authorization` header carries the join secret or a usable bootstrap token
    /// (any user name).
    async fn authorized(&self, headers: &axum::http::HeaderMap) -> bool {
        let Some(password) = Self::basic_password(headers) else {
            return false;
        };
        if self.is_join_secret(&password) {
            return true;
        }
        match &self.objects {
            Some(objects) => crate::authn::bootstrap::authenticate(&objects.secrets, &password)
                .await
                .is_some(),
            None => false,
        }
    }

    /// Answers a joining server: the shared secrets for the join secret only, never for a
    /// bootstrap (agent) token, as k3s's `server-bootstrap` takes only the server token.
    async fn server_bootstrap(&self, headers: &axum::http::HeaderMap) -> Response {
        let unauthorized = |message: &str| {
            tracing::warn!(%message, "refused a server join");
            (
                StatusCode::UNAUTHORIZED,
                format!("Unauthorized: {message}\n"),
            )
                .into_response()
        };
        let Some(password) = Self::basic_password(headers) else {
            return unauthorized(
                "a joining server presents the server token (Basic credentials server:<secret>)",
            );
        };
        if !self.is_join_secret(&password) {
            if crate::authn::bootstrap::parse(&password).is_some() {
                return unauthorized(
                    "an agent (bootstrap) token cannot join a server: use the server token, \
                     <data-dir>/token of a running server",
                );
            }
            return unauthorized(
                "the token is not this server's join token (<data-dir>/token of a running server)",
            );
        }
        match &self.server {
            Some(source) => source.serve().await,
            None => (StatusCode::NOT_FOUND, "server join is not served here\n").into_response(),
        }
    }

    /// The first of `names` only the API server may have a certificate for.
    fn reserved_name<'a>(&self, names: &'a [String]) -> Option<&'a String> {
        names.iter().find(|n| {
            let n = n.trim_end_matches('.').to_ascii_lowercase();
            n == "kubernetes"
                || n == "kubernetes.default"
                || n == "kubernetes.default.svc"
                || n.starts_with("kubernetes.default.svc.")
                || self.reserved.iter().any(|r| r.eq_ignore_ascii_case(&n))
        })
    }

    /// Checks `password` for node `name`: the one on record, or, for a name nobody holds yet,
    /// records it. `Err` is the status and message refusing the join.
    async fn claim(&self, name: &str, password: Option<&str>) -> Result<(), (StatusCode, String)> {
        let Some(objects) = &self.objects else {
            return Ok(());
        };
        let refuse = |status: StatusCode, message: String| {
            tracing::warn!(node = %name, %message, "refused a join");
            Err((status, format!("{message}\n")))
        };
        let Some(password) = password.filter(|p| !p.is_empty()) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "the join request has no node password (an agent older than the server?)"
                    .to_owned(),
            );
        };
        let secret_name = format!("{name}{NODE_PASSWORD_SUFFIX}");
        let ns = Some(NODE_PASSWORD_NAMESPACE);
        let mismatch = || {
            refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "node password rejected for node {name:?}: another machine joined with this \
                     name, or this agent's node-password file changed (delete the Node and the \
                     Secret {NODE_PASSWORD_NAMESPACE}/{secret_name} to give the name to a new \
                     machine)"
                ),
            )
        };
        // Read from the store, not the cache: a claim must see the latest one.
        if let Ok(secret) = objects.secrets.get(ns, &secret_name).await {
            return if password_matches(&secret, password) {
                Ok(())
            } else {
                mismatch()
            };
        }
        if objects.nodes.get(None, name).await.is_ok() {
            return refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "node {name:?} already exists and no node password is on record for it: \
                     delete the Node to join a machine with this name"
                ),
            );
        }
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name, "namespace": NODE_PASSWORD_NAMESPACE},
            "type": NODE_PASSWORD_TYPE,
            "immutable": true,
            "data": {"hash": base64::engine::general_purpose::STANDARD.encode(hash_password(password))},
        });
        match objects
            .secrets
            .create(ns, secret, &WriteOptions::default())
            .await
        {
            Ok(_) => Ok(()),
            // Another join of the same name won the race: its password decides.
            Err(_) => match objects.secrets.get(ns, &secret_name).await {
                Ok(secret) if password_matches(&secret, password) => Ok(()),
                Ok(_) => mismatch(),
                Err(e) => refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "cannot record the node password: {}",
                        e.status().status.message.clone().unwrap_or_default()
                    ),
                ),
            },
        }
    }

    async fn node(&self, request: Request<Body>) -> Response {
        if !self.authorized(request.headers()).await {
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
        if let Some(reserved) = self.reserved_name(&names) {
            tracing::warn!(node = %name, %reserved, "refused a join asking for the API server's name");
            return (
                StatusCode::FORBIDDEN,
                format!(
                    "a node may not have a certificate for {reserved:?}: it names the API server\n"
                ),
            )
                .into_response();
        }
        if let Err(refused) = self.claim(name, node.password.as_deref()).await {
            return refused.into_response();
        }
        let issued = pki::node_client(&self.tls_dir, name, self.node_lifetime).and_then(|client| {
            let serving = pki::kubelet_serving(&self.tls_dir, name, &names, self.node_lifetime)?;
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

/// A salted SHA-256 of a node password (`<salt>$<hex digest>`): node passwords are random
/// and long, so a fast hash suffices to keep them out of the Secret.
fn hash_password(password: &str) -> String {
    let salt = random_secret();
    format!(
        "{salt}${}",
        sha256_hex(format!("{salt}{password}").as_bytes())
    )
}

/// Whether node password Secret `secret` records `password`.
fn password_matches(secret: &Value, password: &str) -> bool {
    let Some(recorded) = secret["data"]["hash"]
        .as_str()
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
    else {
        return false;
    };
    let recorded = String::from_utf8_lossy(&recorded);
    let Some((salt, digest)) = recorded.split_once('$') else {
        return false;
    };
    constant_time_eq(
        digest.as_bytes(),
        sha256_hex(format!("{salt}{password}").as_bytes()).as_bytes(),
    )
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

    #[test]
    fn node_passwords_are_kept_salted_and_checked() {
        let hash = hash_password("p4ss");
        let (salt, digest) = hash.split_once('$').unwrap();
        assert_eq!(salt.len(), 32);
        assert_ne!(digest, sha256_hex(b"p4ss"));
        let secret =
            json!({"data": {"hash": base64::engine::general_purpose::STANDARD.encode(&hash)}});
        assert!(password_matches(&secret, "p4ss"));
        assert!(!password_matches(&secret, "p4sS"));
        assert!(!password_matches(&json!({"data": {}}), "p4ss"));
        // Two records of one password differ.
        assert_ne!(hash_password("p4ss"), hash);
    }

    #[tokio::test]
    async fn the_api_servers_names_are_reserved_and_rotation_is_read_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let pki = pki::load_or_create(&tls, &["localhost".to_owned()]).unwrap();
        let mut join =
            Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, Some("first")).unwrap();
        join.reserved = vec!["10.43.0.1".to_owned(), "api.example".to_owned()];
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for reserved in [
            "kubernetes",
            "kubernetes.default",
            "Kubernetes.Default.Svc",
            "kubernetes.default.svc.cluster.local.",
            "10.43.0.1",
            "API.example",
        ] {
            assert!(
                join.reserved_name(&names(&["n1", reserved])).is_some(),
                "{reserved}"
            );
        }
        assert_eq!(
            join.reserved_name(&names(&["n1", "10.0.0.9", "kubernetes-node"])),
            None
        );
        // `capstan token rotate` rewrites the file; the next join reads it.
        assert_eq!(join.current_secret(), "first");
        let rotated = rotate_token(dir.path(), Some("second")).unwrap();
        assert_eq!(rotated, token(&pki.ca_cert_pem, "second"));
        assert_eq!(join.current_secret(), "second");
        let random = rotate_token(dir.path(), None).unwrap();
        assert_eq!(join.current_secret(), secret_of(&random));
        assert_eq!(secret_of(&random).len(), 32);
    }

    #[tokio::test]
    async fn server_bootstrap_takes_the_join_secret_only() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let pki = pki::load_or_create(&tls, &["localhost".to_owned()]).unwrap();
        let join =
            Join::load_or_create(dir.path(), &tls, &pki.ca_cert_pem, Some("s3cret")).unwrap();
        let request = |auth: Option<&str>| {
            let mut request = Request::get(SERVER_BOOTSTRAP);
            if let Some(auth) = auth {
                request = request.header(
                    header::AUTHORIZATION,
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(auth)
                    ),
                );
            }
            request.body(Body::empty()).unwrap()
        };
        let answer = |response: Response| async move {
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), MAX_BODY)
                .await
                .unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        for (auth, says) in [
            (None, "presents the server token"),
            (Some("server:wrong"), "not this server's join token"),
            (
                Some("server:abcdef.0123456789abcdef"),
                "an agent (bootstrap) token cannot join a server",
            ),
        ] {
            let (status, body) = answer(join.serve(request(auth)).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
            assert!(body.contains(says), "{auth:?}: {body}");
        }
        // The secret passes; without a source (unit tests) nothing is handed out.
        let (status, _) = answer(join.serve(request(Some("server:s3cret"))).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let post = Request::post(SERVER_BOOTSTRAP).body(Body::empty()).unwrap();
        assert_eq!(
            join.serve(post).await.status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
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
        assert_eq!(again.current_secret(), "s3cret");
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
