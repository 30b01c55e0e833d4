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
