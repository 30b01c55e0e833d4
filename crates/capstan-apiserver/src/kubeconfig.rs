//! The admin kubeconfig the server writes at start, as k3s does.

use std::path::Path;

use base64::Engine;

use crate::pki::{Pki, PkiError, write_file};

/// Writes a kubeconfig for the admin user (client certificate in `system:masters`) that trusts
/// the cluster CA and points at `server_url`.
pub(crate) fn write_admin(
    path: &Path,
    mode: u32,
    server_url: &str,
    pki: &Pki,
) -> Result<(), PkiError> {
    write(path, mode, server_url, &pki.ca_cert_pem, &pki.admin)
}

/// Writes a kubeconfig that authenticates with `client` and trusts the CA `ca_cert_pem`.
pub(crate) fn write(
    path: &Path,
    mode: u32,
    server_url: &str,
    ca_cert_pem: &str,
    client: &crate::pki::CertAndKey,
) -> Result<(), PkiError> {
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server_url}
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
        ca = b64(ca_cert_pem),
        cert = b64(&client.cert_pem),
        key = b64(&client.key_pem),
    );
    write_file(path, &text, mode)
}
