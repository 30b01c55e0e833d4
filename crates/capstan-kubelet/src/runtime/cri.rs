//! The CRI v1 clients: the runtime service (sandboxes, containers, exec streams) and the image
//! service, over one gRPC channel to the runtime's Unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

/// The largest CRI message accepted, as the kubelet's (16 MiB): a node with thousands of
/// containers lists them in one response.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Failures to reach the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The socket could not be connected to.
    #[error("cannot connect to the container runtime at {path}")]
    Connect {
        /// The runtime's socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The runtime answered a call with an error.
    #[error("container runtime: {0}")]
    Call(#[from] tonic::Status),
}

/// The runtime and image services of one container runtime. Cloning is cheap: clones share
/// the connection.
#[derive(Debug, Clone)]
pub struct Cri {
    /// Sandboxes, containers, exec/attach/port-forward streams, status.
    pub runtime: RuntimeServiceClient<Channel>,
    /// Image pulls, status and removal.
    pub images: ImageServiceClient<Channel>,
    /// The socket, for messages.
    pub path: PathBuf,
}

impl Cri {
    /// Connects to the runtime listening on the Unix socket `path` (a `unix://` prefix is
    /// accepted, as in the kubelet's `--container-runtime-endpoint`).
    pub async fn connect(path: &Path) -> Result<Cri, CriError> {
        let path = strip_scheme(path);
        let socket = path.clone();
        // The URI is only a placeholder: every connection goes to the socket.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(socket).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|source| CriError::Connect {
                path: path.clone(),
                source,
            })?;
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            images: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            path,
        })
    }

    /// The runtime's name and version, e.g. `("containerd", "1.6.20")`.
    pub async fn version(&self) -> Result<(String, String), CriError> {
        let version = self
            .runtime
            .clone()
            .version(k8s_cri::v1::VersionRequest {
                version: "v1".to_owned(),
            })
            .await?
            .into_inner();
        Ok((version.runtime_name, version.runtime_version))
    }

    /// Whether the runtime reports its network ready, and if not, why.
    pub async fn network_ready(&self) -> Result<Result<(), String>, CriError> {
        let status = self
            .runtime
            .clone()
            .status(k8s_cri::v1::StatusRequest { verbose: false })
            .await?
            .into_inner();
        let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
        Ok(
            match conditions.iter().find(|c| c.r#type == "NetworkReady") {
                Some(c) if c.status => Ok(()),
                Some(c) => Err(format!(
                    "container runtime network not ready: NetworkReady=false reason:{} message:{}",
                    c.reason, c.message
                )),
                None => Err("container runtime network status unknown".to_owned()),
            },
        )
    }
}

/// `unix:///run/x.sock` and `/run/x.sock` name the same socket.
pub(crate) fn strip_scheme(path: &Path) -> PathBuf {
    match path.to_str().and_then(|p| p.strip_prefix("unix://")) {
        Some(rest) => PathBuf::from(rest),
        None => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_may_carry_the_unix_scheme() {
        assert_eq!(
            strip_scheme(Path::new("unix:///run/containerd/containerd.sock")),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            strip_scheme(Path::new("/run/c.sock")),
            PathBuf::from("/run/c.sock")
        );
    }
}
