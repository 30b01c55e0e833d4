//! The API server as a client of kubelets: TLS with the API server's own client certificate
//! (`kube-apiserver-kubelet-client` in `system:masters`, issued by the cluster CA), the
//! kubelet's serving certificate checked against the kubelet serving CA (`pki::kubelet_ca`),
//! and the node's address from
//! its status (InternalIP, then ExternalIP, then Hostname, as k3s prefers) and port from
//! `status.daemonEndpoints.kubeletEndpoint`.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::StatusError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::pki::CertAndKey;
use crate::status::ApiError;

/// How long reaching a kubelet may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The kubelet's port when the node does not report one.
const DEFAULT_PORT: u16 = 10250;

/// Connections to kubelets.
pub(crate) struct Kubelets {
    tls: TlsConnector,
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelets").finish_non_exhaustive()
    }
}

impl Kubelets {
    /// Kubelet connections that trust `ca_pem` and present `client`.
    pub(crate) fn new(ca_pem: &str, client: &CertAndKey) -> Result<Kubelets, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.map_err(|e| rustls::Error::General(format!("CA: {e}")))?)?;
        }
        let chain = CertificateDer::pem_slice_iter(client.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| rustls::Error::General(format!("kubelet client certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes())
            .map_err(|e| rustls::Error::General(format!("kubelet client key: {e}")))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Kubelets {
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// A TLS connection to the kubelet of `node` (a Node object) and the `host:port` it was
    /// made to.
    pub(crate) async fn connect(
        &self,
        node: &Value,
    ) -> Result<(TlsStream<TcpStream>, String), ApiError> {
        address(node)?;
        self.dial(node)
            .await
            .map_err(|why| StatusError::internal(&format!("error dialing backend: {why}")).into())
    }

    /// [`Kubelets::connect`] with the failure as Go words it (`dial tcp 10.0.0.5:10250:
    /// connect: connection refused`), for the callers that wrap it in their own error.
    pub(crate) async fn dial(
        &self,
        node: &Value,
    ) -> Result<(TlsStream<TcpStream>, String), String> {
        let (host, port) = address(node).map_err(|e| {
            e.status().to_json()["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })?;
        let authority = crate::handlers::proxy::location::join_host_port(&host, &port.to_string());
        let server_name = ServerName::try_from(host.clone())
            .map_err(|_| format!("invalid node address {host:?}"))?;
        let dial = async {
            let tcp = TcpStream::connect(&authority).await.map_err(|e| {
                let text = e.to_string();
                let why = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
                    _ => text
                        .split(" (os error")
                        .next()
                        .unwrap_or_default()
                        .to_lowercase(),
                };
                format!("dial tcp {authority}: {why}")
            })?;
            self.tls
                .connect(server_name, tcp)
                .await
                .map_err(|e| format!("tls: {e}"))
        };
        match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
            Ok(Ok(tls)) => Ok((tls, authority)),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(format!("dial tcp {authority}: i/o timeout")),
        }
    }
}

/// The address and kubelet port of a Node object.
pub(crate) fn address(node: &Value) -> Result<(String, u16), ApiError> {
    let addresses = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|kind| {
            addresses
                .iter()
                .find(|a| a["type"] == *kind)
                .and_then(|a| a["address"].as_str())
                .filter(|a| !a.is_empty())
        })
        .ok_or_else(|| {
            StatusError::service_unavailable(&format!(
                "no preferred addresses found; known addresses: {:?}",
                addresses
                    .iter()
                    .filter_map(|a| a["address"].as_str())
                    .collect::<Vec<_>>()
            ))
        })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_PORT);
    Ok((host.to_owned(), port))
}

/// The error a kubelet's refusal (a status outside 2xx and 101, with `body` as its text)
/// becomes, as upstream's generic server response: the kubelet's message for the statuses
/// that carry one to the user.
pub(crate) fn refusal(status: u16, body: &str) -> ApiError {
    let message = body.trim();
    let error = match status {
        400 => StatusError::bad_request(message),
        404 => StatusError::new_with_reason(404, "NotFound", message),
        403 => StatusError::new_with_reason(403, "Forbidden", message),
        401 => StatusError::new_with_reason(401, "Unauthorized", message),
        503 => StatusError::service_unavailable(message),
        _ => StatusError::new_with_reason(
            500,
            "InternalError",
            &format!(
                "an error on the server ({message:?}) has prevented the request from succeeding"
            ),
        ),
    };
    error.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_internal_address_and_reported_port_are_preferred() {
        let node = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "10.0.0.5"}
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}
        }});
        assert_eq!(address(&node).unwrap(), ("10.0.0.5".to_owned(), 10251));
        let bare = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(address(&bare).unwrap(), ("n1".to_owned(), 10250));
        let none = json!({"status": {}});
        assert_eq!(address(&none).unwrap_err().status().code(), 503);
    }

    #[test]
    fn kubelet_refusals_keep_the_kubelets_message() {
        let error = refusal(
            400,
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating\n",
        );
        let status = error.status().to_json();
        assert_eq!(status["reason"], "BadRequest");
        assert_eq!(
            status["message"],
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        assert_eq!(refusal(502, "boom").status().code(), 500);
    }
}
