//! The admin kubeconfig the server writes at start, as k3s does, and its components'
//! kubeconfigs; the document and the writing are `capstan_client::credentials`'.

use std::path::Path;

use capstan_client::credentials::Kubeconfig;

use crate::pki::{Pki, PkiError};

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
    Kubeconfig {
        server: server_url,
        ca_pem: ca_cert_pem,
        cert_pem: &client.cert_pem,
        key_pem: &client.key_pem,
    }
    .write(path, mode)
    .map_err(|source| PkiError::Io {
        path: path.to_owned(),
        source,
    })
}
