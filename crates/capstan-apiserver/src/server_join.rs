//! Server join, as k3s does it: `capstan server --server https://FIRST:6443 --token <token>
//! --datastore-endpoint <the first server's etcd>` fetches the secrets every server of a
//! cluster must share from the running server and starts with them, so that all servers
//! present the same CA, accept each other's client certificates and service account tokens,
//! and agents join any of them.
//!
//! k3s hands these over in two ways: over HTTPS from a running server for its embedded etcd,
//! and, for an external datastore, sealed with the token inside the datastore itself. Capstan
//! takes the first way for its etcd: the running server answers
//! `GET /v1-capstan/server-bootstrap` (k3s's `/v1-k3s/server-bootstrap`), outside the
//! Kubernetes API's authentication, with
//! [`ServerSecrets`]: the CAs with their keys (cluster CA, kubelet serving CA, front proxy
//! CA), the service account signing key, the generated encryption configuration when the
//! server runs with `--secrets-encryption` (or the digest of its `--encryption-provider-config`,
//! which the operator gives every server), and the uid of the `kube-system` namespace, which
//! names the cluster in the datastore. Nothing else: leaf certificates (serving, admin,
//! components) each server issues itself from the shared CAs, and the joining server already
//! holds the join token.
//!
//! What it refuses, each with a message saying why:
//! - credentials other than the server's join secret (`Authorization: Basic server:<secret>`,
//!   re-read from `<data-dir>/token` as node joins do): 401. A bootstrap token (`capstan token
//!   create`, an agent's token) is refused even when valid, as k3s refuses agent tokens there:
//!   a node's token must not buy the cluster's CA keys;
//! - a server whose datastore is SQLite: 409, since servers of one cluster share an etcd.
//!
//! The joining side ([`install`]) checks the answer against its own data directory before
//! writing anything: a data directory that holds another cluster's secrets is refused rather
//! than overwritten, and keys are written with mode 0600. A data directory that already holds
//! the cluster CA the token pins ([`joined`]) has joined before: it restarts from its own files
//! without asking the first server (which may be down).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use capstan_api::sha256_hex;
use capstan_store::Store;
use serde::{Deserialize, Serialize};

use crate::pki::{self, PkiError};
use crate::registry::Registry;

/// The path the running server serves the shared secrets at.
pub const SERVER_BOOTSTRAP: &str = "/v1-capstan/server-bootstrap";

/// The namespace whose uid names the cluster in its datastore.
const CLUSTER_NAMESPACE: &str = "kube-system";

/// What a joining server gets: the secrets every server of the cluster shares.
/// A certificate and key, PEM.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its key.
    pub key: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerSecrets {
    /// The cluster CA (`tls/ca.crt`, `tls/ca.key`): serving and client certificates.
    pub ca: Pair,
    /// The kubelet serving CA (`tls/kubelet-serving-ca.*`): kubelets' serving certificates.
    pub kubelet_serving_ca: Pair,
    /// The front proxy (request header) CA (`tls/front-proxy-ca.*`): extension API servers
    /// trust it for the front proxy's client certificate.
    pub front_proxy_ca: Pair,
    /// The key that signs service account tokens (`tls/service-account.key`).
    pub service_account_key: String,
    /// The generated encryption configuration (`cred/encryption-config.json`) of a server
    /// running with `--secrets-encryption`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_encryption_config: Option<String>,
    /// The SHA-256 of the server's `--encryption-provider-config` file, which every server must
    /// be given (it is the operator's file, not shared here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_provider_config_sha256: Option<String>,
    /// The uid of the `kube-system` namespace: the cluster the joining server's datastore must
    /// hold.
    pub cluster_id: String,
}

/// How a server encrypts resources at rest (what a joining server must match).
#[derive(Clone, Debug)]
pub(crate) enum Encryption {
    /// Not at all.
    None,
    /// `--secrets-encryption`: the generated configuration at this path.
    Generated(PathBuf),
    /// `--encryption-provider-config`: the operator's file at this path.
    File(PathBuf),
}

/// What the running server hands a joining one from.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// `<data-dir>/tls`.
    pub tls_dir: PathBuf,
    /// Encryption at rest.
    pub encryption: Encryption,
    /// Whether the datastore can be shared (etcd), not SQLite.
    pub shared_datastore: bool,
    /// The namespaces, for the cluster's uid.
    pub namespaces: Option<Arc<Registry>>,
}

/// A refusal: status and message.
type Refusal = (StatusCode, String);

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    let message = message.into();
    tracing::warn!(%message, "refused a server join");
    (status, format!("{message}\n"))
}

impl Source {
    /// The answer to a joining server that presented the join secret.
    pub(crate) async fn serve(&self) -> Response {
        match self.secrets().await {
            Ok(secrets) => {
                tracing::info!("handed the cluster's shared secrets to a joining server");
                axum::Json(secrets).into_response()
            }
            Err(refusal) => refusal.into_response(),
        }
    }

    async fn secrets(&self) -> Result<ServerSecrets, Refusal> {
        if !self.shared_datastore {
            return Err(refuse(
                StatusCode::CONFLICT,
                "this server keeps its state in SQLite: servers of one cluster share an etcd \
                 (start the first server with --datastore-endpoint http://...)",
            ));
        }
        let internal = |e: PkiError| refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        let read = |file: &str| -> Result<String, Refusal> {
            let path = self.tls_dir.join(file);
            std::fs::read_to_string(&path).map_err(|source| internal(PkiError::Io { path, source }))
        };
        let pair = |stem: &str| -> Result<Pair, Refusal> {
            Ok(Pair {
                cert: read(&format!("{stem}.crt"))?,
                key: read(&format!("{stem}.key"))?,
            })
        };
        let (secrets_encryption_config, encryption_provider_config_sha256) = match &self.encryption
        {
            Encryption::None => (None, None),
            Encryption::Generated(path) => (
                Some(std::fs::read_to_string(path).map_err(|source| {
                    internal(PkiError::Io {
                        path: path.clone(),
                        source,
                    })
                })?),
                None,
            ),
            Encryption::File(path) => (None, Some(file_sha256(path).map_err(internal)?)),
        };
        let cluster_id = match &self.namespaces {
            Some(namespaces) => namespaces
                .get(None, CLUSTER_NAMESPACE)
                .await
                .ok()
                .and_then(|ns| ns["metadata"]["uid"].as_str().map(str::to_owned))
                .ok_or_else(|| {
                    refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the kube-system namespace is not readable yet",
                    )
                })?,
            None => String::new(),
        };
        Ok(ServerSecrets {
            ca: pair("ca")?,
            kubelet_serving_ca: pair(pki::KUBELET_CA)?,
            front_proxy_ca: pair(pki::FRONT_PROXY_CA)?,
            service_account_key: read(pki::SERVICE_ACCOUNT_KEY)?,
            secrets_encryption_config,
            encryption_provider_config_sha256,
            cluster_id,
        })
    }
}

/// The SHA-256 of a file's content, lowercase hex.
fn file_sha256(path: &Path) -> Result<String, PkiError> {
    std::fs::read(path)
        .map(|bytes| sha256_hex(&bytes))
        .map_err(|source| PkiError::Io {
            path: path.to_owned(),
            source,
        })
}

/// One file a joining server writes: its path under the data directory, content and mode.
struct Shared {
    path: PathBuf,
    content: String,
    mode: u32,
}

impl ServerSecrets {
    /// The files these secrets are kept in under `data_dir`.
    fn files(&self, data_dir: &Path) -> Vec<Shared> {
        let tls = data_dir.join("tls");
        let mut files = Vec::new();
        for (stem, pair) in [
            ("ca", &self.ca),
            (pki::KUBELET_CA, &self.kubelet_serving_ca),
            (pki::FRONT_PROXY_CA, &self.front_proxy_ca),
        ] {
            files.push(Shared {
                path: tls.join(format!("{stem}.crt")),
                content: pair.cert.clone(),
                mode: 0o644,
            });
            files.push(Shared {
                path: tls.join(format!("{stem}.key")),
                content: pair.key.clone(),
                mode: 0o600,
            });
        }
        files.push(Shared {
            path: tls.join(pki::SERVICE_ACCOUNT_KEY),
            content: self.service_account_key.clone(),
            mode: 0o600,
        });
        if let Some(config) = &self.secrets_encryption_config {
            files.push(Shared {
                path: generated_encryption_config(data_dir),
                content: config.clone(),
                mode: 0o600,
            });
        }
        files
    }

    /// Checks that the secrets are whole and usable: every certificate and key parses, each
    /// CA's key is its certificate's, and the cluster CA is the bundle the token pinned
    /// (`pinned_ca`).
    fn check(&self, pinned_ca: &str) -> Result<(), PkiError> {
        if self.ca.cert != pinned_ca {
            return Err(PkiError::Invalid(
                "the server's bootstrap answer names another CA than its /cacerts".to_owned(),
            ));
        }
        for (what, pair) in [
            ("cluster CA", &self.ca),
            ("kubelet serving CA", &self.kubelet_serving_ca),
            ("front proxy CA", &self.front_proxy_ca),
        ] {
            pki::check_ca_pair(&pair.cert, &pair.key)
                .map_err(|e| PkiError::Invalid(format!("the server's {what} is unusable: {e}")))?;
        }
        rcgen::KeyPair::from_pem(&self.service_account_key).map_err(|e| {
            PkiError::Invalid(format!("the server's service account key is unusable: {e}"))
        })?;
        Ok(())
    }
}

/// Where `--secrets-encryption` keeps its generated configuration under `data_dir`.
pub fn generated_encryption_config(data_dir: &Path) -> PathBuf {
    data_dir.join("cred").join("encryption-config.json")
}

/// Whether the data directory `data_dir` has joined the cluster whose CA bundle has SHA-256
/// `ca_hash` before (its `tls/ca.crt` is that bundle, and its key is there): the server then
/// starts from its own files. A data directory holding another CA is refused.
pub fn joined(data_dir: &Path, ca_hash: &str) -> Result<bool, PkiError> {
    let cert = data_dir.join("tls").join("ca.crt");
    let held = match std::fs::read(&cert) {
        Ok(held) => held,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(PkiError::Io { path: cert, source }),
    };
    if !sha256_hex(&held).eq_ignore_ascii_case(ca_hash) {
        return Err(PkiError::Invalid(format!(
            "{} holds the CA of another cluster (SHA-256 {}; the token pins {ca_hash}): \
             refusing to overwrite it; join with a fresh --data-dir, or remove that data \
             directory's tls/ and cred/ if it is no longer used",
            data_dir.display(),
            sha256_hex(&held)
        )));
    }
    Ok(data_dir.join("tls").join("ca.key").exists())
}

/// Checks that a joining server encrypts as the running one does: `provider_config` and
/// `secrets_encryption` are its `--encryption-provider-config` and `--secrets-encryption`.
pub fn check_encryption(
    secrets: &ServerSecrets,
    provider_config: Option<&Path>,
    secrets_encryption: bool,
) -> Result<(), PkiError> {
    let invalid = |message: &str| Err(PkiError::Invalid(message.to_owned()));
    match (
        &secrets.encryption_provider_config_sha256,
        &secrets.secrets_encryption_config,
        provider_config,
    ) {
        (Some(expected), _, Some(path)) => {
            if file_sha256(path)? != *expected {
                return Err(PkiError::Invalid(format!(
                    "--encryption-provider-config {} differs from the running server's: every \
                     server must be given the same file",
                    path.display()
                )));
            }
            Ok(())
        }
        (Some(_), _, None) => invalid(
            "the running server encrypts resources with --encryption-provider-config: give this \
             server the same file",
        ),
        (None, _, Some(_)) => invalid(
            "the running server has no --encryption-provider-config: this server must not have \
             one either (it could not read what the other writes)",
        ),
        (None, Some(_), None) if !secrets_encryption => invalid(
            "the running server encrypts Secrets with --secrets-encryption: start this server \
             with --secrets-encryption too (its key comes with the join)",
        ),
        (None, None, None) if secrets_encryption => invalid(
            "the running server does not encrypt Secrets (no --secrets-encryption): start this \
             server without it, or the servers could not read each other's Secrets",
        ),
        _ => Ok(()),
    }
}

/// Writes `secrets` under `data_dir` (keys mode 0600) after checking them against the bundle
/// the token pinned (`pinned_ca`) and the data directory: a file that exists with other content
/// (another cluster's) is never overwritten, and then nothing is written.
pub fn install(data_dir: &Path, secrets: &ServerSecrets, pinned_ca: &str) -> Result<(), PkiError> {
    secrets.check(pinned_ca)?;
    let files = secrets.files(data_dir);
    let mut differing = Vec::new();
    for file in &files {
        match std::fs::read_to_string(&file.path) {
            Ok(held) if held == file.content => {}
            Ok(_) => differing.push(file.path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(PkiError::Io {
                    path: file.path.clone(),
                    source,
                });
            }
        }
    }
    if !differing.is_empty() {
        return Err(PkiError::Invalid(format!(
            "the data directory holds secrets of another cluster ({}): refusing to overwrite \
             them; join with a fresh --data-dir",
            differing.join(", ")
        )));
    }
    for file in &files {
        pki::write_file(&file.path, &file.content, file.mode)?;
    }
    Ok(())
}

/// Checks that the datastore `store` a joining server opened holds the cluster `secrets` come
/// from (its `kube-system` namespace has their `cluster_id`): a server pointed at another etcd
/// would otherwise start a second cluster under the same CA.
pub async fn check_datastore(secrets: &ServerSecrets, store: &Store) -> Result<(), PkiError> {
    let key = format!("/registry/namespaces/{CLUSTER_NAMESPACE}");
    let stored = store
        .get(&key, None)
        .await
        .map_err(|e| PkiError::Invalid(format!("cannot read {key} from the datastore: {e}")))?;
    let Some(kv) = stored.kv else {
        return Err(PkiError::Invalid(
            "the datastore holds no cluster: a joining server must use the running server's \
             --datastore-endpoint"
                .to_owned(),
        ));
    };
    let Ok(namespace) = serde_json::from_slice::<serde_json::Value>(&kv.value) else {
        // Namespaces encrypted at rest: the uid cannot be read before the server starts.
        tracing::warn!(
            "the kube-system namespace is encrypted at rest: not checking that the datastore holds the running server's cluster"
        );
        return Ok(());
    };
    match namespace["metadata"]["uid"].as_str() {
        Some(uid) if uid == secrets.cluster_id => Ok(()),
        held => Err(PkiError::Invalid(format!(
            "the datastore holds another cluster (kube-system uid {}, the running server's is \
             {}): a joining server must use the running server's --datastore-endpoint",
            held.unwrap_or("none"),
            secrets.cluster_id
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data directory of a server: its CAs and service account key, made as a first start
    /// makes them.
    fn first_server(dir: &Path) -> PathBuf {
        let tls = dir.join("tls");
        pki::load_or_create(&tls, &pki::serving_names(None, &[])).unwrap();
        pki::kubelet_ca(&tls).unwrap();
        pki::front_proxy(&tls).unwrap();
        pki::service_account_key(&tls).unwrap();
        tls
    }

    fn source(tls: PathBuf, encryption: Encryption, shared: bool) -> Source {
        Source {
            tls_dir: tls,
            encryption,
            shared_datastore: shared,
            namespaces: None,
        }
    }

    #[tokio::test]
    async fn secrets_are_served_only_from_a_shared_datastore() {
        let dir = tempfile::tempdir().unwrap();
        let tls = first_server(dir.path());
        let refused = source(tls.clone(), Encryption::None, false)
            .secrets()
            .await
            .unwrap_err();
        assert_eq!(refused.0, StatusCode::CONFLICT);
        assert!(refused.1.contains("SQLite"), "{}", refused.1);
        let secrets = source(tls.clone(), Encryption::None, true)
            .secrets()
            .await
            .unwrap();
        assert_eq!(
            secrets.ca.key,
            std::fs::read_to_string(tls.join("ca.key")).unwrap()
        );
        let json = serde_json::to_value(&secrets).unwrap();
        let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "ca",
                "clusterId",
                "frontProxyCa",
                "kubeletServingCa",
                "serviceAccountKey"
            ]
        );
    }

    #[tokio::test]
    async fn a_join_writes_the_secrets_once_and_refuses_another_clusters() {
        let first = tempfile::tempdir().unwrap();
        let tls = first_server(first.path());
        let secrets = source(tls.clone(), Encryption::None, true)
            .secrets()
            .await
            .unwrap();
        let ca = secrets.ca.cert.clone();
        let hash = sha256_hex(ca.as_bytes());

        // A bundle other than the pinned one is refused.
        let joiner = tempfile::tempdir().unwrap();
        assert!(install(joiner.path(), &secrets, "another bundle").is_err());
        assert!(!joiner.path().join("tls").exists());

        assert!(!joined(joiner.path(), &hash).unwrap());
        install(joiner.path(), &secrets, &ca).unwrap();
        assert!(joined(joiner.path(), &hash).unwrap());
        use std::os::unix::fs::PermissionsExt as _;
        for (file, mode) in [
            ("ca.key", 0o600),
            ("kubelet-serving-ca.key", 0o600),
            ("front-proxy-ca.key", 0o600),
            ("service-account.key", 0o600),
            ("ca.crt", 0o644),
        ] {
            let meta = std::fs::metadata(joiner.path().join("tls").join(file)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, mode, "{file}");
            assert_eq!(
                std::fs::read(joiner.path().join("tls").join(file)).unwrap(),
                std::fs::read(tls.join(file)).unwrap(),
                "{file}"
            );
        }
        // Joining again with the same secrets is harmless.
        install(joiner.path(), &secrets, &ca).unwrap();

        // Another cluster's data directory is neither overwritten nor taken as joined.
        let other = tempfile::tempdir().unwrap();
        let other_tls = first_server(other.path());
        let before = std::fs::read(other_tls.join("ca.key")).unwrap();
        let error = joined(other.path(), &hash).unwrap_err().to_string();
        assert!(error.contains("another cluster"), "{error}");
        let error = install(other.path(), &secrets, &ca)
            .unwrap_err()
            .to_string();
        assert!(error.contains("another cluster"), "{error}");
        assert_eq!(std::fs::read(other_tls.join("ca.key")).unwrap(), before);
        // Nothing at all is written when one file differs.
        let partial = tempfile::tempdir().unwrap();
        let key = partial.path().join("tls").join(pki::SERVICE_ACCOUNT_KEY);
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, "another key").unwrap();
        assert!(install(partial.path(), &secrets, &ca).is_err());
        assert!(!partial.path().join("tls").join("ca.key").exists());
    }

    #[tokio::test]
    async fn encryption_at_rest_must_match() {
        let dir = tempfile::tempdir().unwrap();
        let tls = first_server(dir.path());
        let plain = source(tls.clone(), Encryption::None, true)
            .secrets()
            .await
            .unwrap();
        check_encryption(&plain, None, false).unwrap();
        assert!(check_encryption(&plain, None, true).is_err());

        let generated = dir.path().join("cred").join("encryption-config.json");
        pki::write_file(&generated, "{\"generated\": true}", 0o600).unwrap();
        let secrets = source(tls.clone(), Encryption::Generated(generated.clone()), true)
            .secrets()
            .await
            .unwrap();
        assert!(check_encryption(&secrets, None, false).is_err());
        check_encryption(&secrets, None, true).unwrap();
        let joiner = tempfile::tempdir().unwrap();
        install(joiner.path(), &secrets, &secrets.ca.cert).unwrap();
        assert_eq!(
            std::fs::read_to_string(generated_encryption_config(joiner.path())).unwrap(),
            "{\"generated\": true}"
        );

        let file = dir.path().join("encryption.yaml");
        std::fs::write(&file, "kind: EncryptionConfiguration").unwrap();
        let secrets = source(tls, Encryption::File(file.clone()), true)
            .secrets()
            .await
            .unwrap();
        check_encryption(&secrets, Some(&file), false).unwrap();
        assert!(check_encryption(&secrets, None, false).is_err());
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, "kind: EncryptionConfiguration # other").unwrap();
        assert!(check_encryption(&secrets, Some(&other), false).is_err());
        assert!(check_encryption(&plain, Some(&file), false).is_err());
    }
}
