//! Credential files: kubeconfigs as Capstan writes them (one cluster, one user and one context,
//! all named `default`, with the CA bundle and the client certificate embedded, as k3s writes
//! its own), for the API server's administrator and its own components and for a joined
//! agent's node; and how every credential file (kubeconfigs, certificates, keys, the join
//! token) is written.
//!
//! Credential files are written whole or not at all: to a temporary file beside the target,
//! created with the file's permission bits (the process umask still applies) and synced, then
//! renamed over it, so a reader never sees half a key and a key is never readable by others,
//! not even for a moment.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use base64::Engine as _;

/// What a kubeconfig holds: where the API server is, the CA that signs its certificate, and the
/// client certificate to authenticate with.
#[derive(Clone, Copy)]
pub struct Kubeconfig<'a> {
    /// The API server's URL (`https://host:port`).
    pub server: &'a str,
    /// The CA bundle (PEM) the server's certificate is checked against.
    pub ca_pem: &'a str,
    /// The client certificate (PEM).
    pub cert_pem: &'a str,
    /// Its private key (PEM).
    pub key_pem: &'a str,
}

impl std::fmt::Debug for Kubeconfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Kubeconfig<'_> {
    /// The kubeconfig document (YAML).
    pub fn to_yaml(&self) -> String {
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        format!(
            "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
preferences: {{}}
users:
- name: default
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
            ca = b64(self.ca_pem),
            server = self.server,
            cert = b64(self.cert_pem),
            key = b64(self.key_pem),
        )
    }

    /// Writes the document to `path` with permission bits `mode` (see [`write_file`]).
    pub fn write(&self, path: &Path, mode: u32) -> std::io::Result<()> {
        write_file(path, &self.to_yaml(), mode)
    }
}

/// Writes `contents` to `path` atomically, the file created with permission bits `mode` (less
/// the umask): through `<path>.tmp` (any stale one removed first), synced before it is renamed
/// over `path`. Missing parent directories are created.
pub fn write_file(path: &Path, contents: &str, mode: u32) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The hexadecimal digits (join secrets, node passwords, salts).
pub const HEX: &[u8] = b"0123456789abcdef";
/// Lower-case letters and digits (bootstrap token ids and secrets, `[a-z0-9]`).
pub const LOWER_ALPHANUMERIC: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// A secret of `len` characters drawn uniformly from `alphabet` by the thread's
/// cryptographically secure generator.
pub fn random_secret(len: usize, alphabet: &[u8]) -> String {
    use rand::Rng as _;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// A remote service as a kubeconfig file names it, as upstream's webhook configuration files
/// (`--authentication-token-webhook-config-file`, `--authorization-webhook-config-file`,
/// `--audit-webhook-config-file`) do: the current context's cluster is the service (its URL,
/// which the requests are posted to as it is, path included, and how to trust it), its user
/// the credentials the API server presents (a client certificate, or a bearer token). Files
/// the document names are read once, relative to the document's folder (as clientcmd resolves
/// them; kube-rs's reader makes them absolute).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ServiceKubeconfig {
    /// The service's URL (`https://host:port/path`).
    pub server: String,
    /// The CA bundle (PEM) the service's certificate is checked against; none: the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// `insecure-skip-tls-verify`: the service's certificate is not checked.
    pub insecure_skip_tls_verify: bool,
    /// The name the service's certificate must carry, when not the URL's host.
    pub tls_server_name: Option<String>,
    /// The client certificate (PEM) and its key.
    pub client_certificate: Option<(String, String)>,
    /// The bearer token (`token`, or the contents of `tokenFile`).
    pub token: Option<String>,
}

impl std::fmt::Debug for ServiceKubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceKubeconfig")
            .field("server", &self.server)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .finish_non_exhaustive()
    }
}

/// Reads the kubeconfig file at `path` naming a remote service (see [`ServiceKubeconfig`]),
/// or says why it cannot be used, in clientcmd's words where it has them.
pub fn read_service_kubeconfig(path: &Path) -> Result<ServiceKubeconfig, String> {
    use secrecy::ExposeSecret as _;
    let file = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let context_name = file
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or("invalid configuration: no configuration has been provided")?;
    let context = file
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| {
            format!(
                "invalid configuration: context was not found for specified context: {context_name}"
            )
        })?;
    let cluster = file
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| {
            format!(
                "invalid configuration: cluster {:?} was not found for context {context_name:?}",
                context.cluster
            )
        })?;
    let user = match &context.user {
        Some(name) if !name.is_empty() => file
            .auth_infos
            .iter()
            .find(|u| &u.name == name)
            .and_then(|u| u.auth_info.clone())
            .ok_or_else(|| {
                format!(
                    "invalid configuration: user {name:?} was not found for context {context_name:?}"
                )
            })?,
        _ => kube::config::AuthInfo::default(),
    };
    let server = cluster
        .server
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or("invalid configuration: cluster has no server defined")?;
    let read = |what: &str, file: &str| {
        std::fs::read(file).map_err(|e| format!("unable to read {what} {file:?}: {e}"))
    };
    let b64 = |what: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("{what}: illegal base64 data: {e}"))
    };
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) if !data.is_empty() => Some(b64("certificate-authority-data", data)?),
        (_, Some(file)) if !file.is_empty() => Some(read("certificate-authority", file)?),
        _ => None,
    };
    let insecure_skip_tls_verify = cluster.insecure_skip_tls_verify.unwrap_or(false);
    if insecure_skip_tls_verify && ca_pem.is_some() {
        return Err(
            "invalid configuration: specifying a root certificates file with the \
                    insecure flag is not allowed"
                .to_owned(),
        );
    }
    let certificate = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) if !data.is_empty() => Some(b64("client-certificate-data", data)?),
        (_, Some(file)) if !file.is_empty() => Some(read("client-certificate", file)?),
        _ => None,
    };
    let key = match (&user.client_key_data, &user.client_key) {
        (Some(data), _) if !data.expose_secret().is_empty() => {
            Some(b64("client-key-data", data.expose_secret())?)
        }
        (_, Some(file)) if !file.is_empty() => Some(read("client-key", file)?),
        _ => None,
    };
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).map_err(|e| e.to_string());
    let client_certificate = match (certificate, key) {
        (Some(cert), Some(key)) => Some((text(cert)?, text(key)?)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(
                "invalid configuration: client-key-data or client-key must be \
                        specified to use the clientCert authentication method"
                    .to_owned(),
            );
        }
        (None, Some(_)) => {
            return Err(
                "invalid configuration: client-cert-data or client-cert must be \
                        specified to use the clientCert authentication method"
                    .to_owned(),
            );
        }
    };
    let token = match (&user.token, &user.token_file) {
        (Some(token), _) if !token.expose_secret().is_empty() => {
            Some(token.expose_secret().to_owned())
        }
        (_, Some(file)) if !file.is_empty() => {
            Some(text(read("tokenFile", file)?)?.trim().to_owned())
        }
        _ => None,
    };
    Ok(ServiceKubeconfig {
        server,
        ca_pem,
        insecure_skip_tls_verify,
        tls_server_name: cluster.tls_server_name.clone().filter(|n| !n.is_empty()),
        client_certificate,
        token,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const CONFIG: Kubeconfig<'static> = Kubeconfig {
        server: "https://127.0.0.1:6443",
        ca_pem: "ca",
        cert_pem: "cert",
        key_pem: "key",
    };

    #[test]
    fn the_document_embeds_the_ca_and_the_client_certificate() {
        assert_eq!(
            CONFIG.to_yaml(),
            "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: Y2E=
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
preferences: {}
users:
- name: default
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
"
        );
    }

    #[test]
    fn service_kubeconfigs_name_the_current_contexts_cluster_and_user() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "CA").unwrap();
        std::fs::write(dir.path().join("token"), "secret-token\n").unwrap();
        let path = dir.path().join("webhook.kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://other.example
- name: authn
  cluster:
    server: https://authn.example:8443/authenticate
    certificate-authority: ca.pem
users:
- name: apiserver
  user:
    tokenFile: token
contexts:
- name: webhook
  context:
    cluster: authn
    user: apiserver
current-context: webhook
",
        )
        .unwrap();
        let service = read_service_kubeconfig(&path).unwrap();
        assert_eq!(
            service,
            ServiceKubeconfig {
                server: "https://authn.example:8443/authenticate".into(),
                ca_pem: Some(b"CA".to_vec()),
                token: Some("secret-token".into()),
                ..ServiceKubeconfig::default()
            }
        );
        // Embedded client certificates; the token is not shown in debug output.
        std::fs::write(&path, CONFIG.to_yaml()).unwrap();
        let service = read_service_kubeconfig(&path).unwrap();
        assert_eq!(
            service.client_certificate,
            Some(("cert".to_owned(), "key".to_owned()))
        );
        assert_eq!(service.ca_pem.as_deref(), Some(&b"ca"[..]));
        assert!(!format!("{service:?}").contains("key"));
    }

    #[test]
    fn unusable_service_kubeconfigs_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhook.kubeconfig");
        let error = |text: &str| {
            std::fs::write(&path, text).unwrap();
            read_service_kubeconfig(&path).unwrap_err()
        };
        assert_eq!(
            error("clusters: []\n"),
            "invalid configuration: no configuration has been provided"
        );
        assert!(
            error("current-context: x\n")
                .contains("context was not found for specified context: x")
        );
        assert!(
            error(
                "clusters:\n- name: c\n  cluster:\n    server: https://s\n    insecure-skip-tls-verify: true\n    certificate-authority-data: Q0E=\ncontexts:\n- name: x\n  context:\n    cluster: c\ncurrent-context: x\n"
            )
            .contains("insecure flag is not allowed")
        );
        assert!(
            error(
                "clusters:\n- name: c\n  cluster:\n    server: https://s\nusers:\n- name: u\n  user:\n    client-certificate: missing.pem\n    client-key: missing.key\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
            )
            .starts_with("unable to read client-certificate")
        );
        assert!(read_service_kubeconfig(&dir.path().join("absent")).is_err());
    }

    #[test]
    fn files_are_replaced_whole_with_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred").join("node.kubeconfig");
        CONFIG.write(&path, 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG.to_yaml());
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        // A stale temporary file from an interrupted write is no obstacle.
        std::fs::write(path.with_extension("tmp"), "stale").unwrap();
        write_file(&path, "again", 0o400).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "again");
        assert_eq!(mode(&path), 0o400);
        assert!(!path.with_extension("tmp").exists());
    }
}
