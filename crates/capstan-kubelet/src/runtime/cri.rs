//! The CRI v1 clients: the runtime service (sandboxes, containers, exec streams) and the image
//! service, over one gRPC channel to the runtime's Unix socket. Every call is counted and timed
//! by operation ([`RuntimeOperations`]), as upstream's instrumented runtime service counts them
//! for `kubelet_runtime_operations_total` and its siblings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
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
    pub runtime: RuntimeServiceClient<Instrumented>,
    /// Image pulls, status and removal.
    pub images: ImageServiceClient<Instrumented>,
    /// The socket, for messages.
    pub path: PathBuf,
    /// The calls made so far.
    pub operations: Arc<RuntimeOperations>,
}

/// Upstream's buckets for `kubelet_runtime_operations_duration_seconds`:
/// `ExponentialBuckets(0.005, 2.5, 14)`.
pub fn duration_buckets() -> [f64; 14] {
    let mut buckets = [0.005; 14];
    for i in 1..buckets.len() {
        buckets[i] = buckets[i - 1] * 2.5;
    }
    buckets
}

/// The calls of one operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationStats {
    /// Calls made.
    pub count: u64,
    /// Calls the runtime failed (a gRPC status other than OK, or no answer).
    pub errors: u64,
    /// Calls that took at most each of [`duration_buckets`] (not cumulated).
    pub buckets: [u64; 14],
    /// Their durations' sum, in seconds.
    pub seconds: f64,
}

/// The runtime calls made, by upstream's operation name (`list_podsandbox`, `container_status`,
/// ...).
#[derive(Debug, Default)]
pub struct RuntimeOperations(Mutex<BTreeMap<String, OperationStats>>);

impl RuntimeOperations {
    fn record(&self, operation: String, took: Duration, failed: bool) {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = all.entry(operation).or_default();
        let seconds = took.as_secs_f64();
        stats.count += 1;
        stats.errors += u64::from(failed);
        stats.seconds += seconds;
        if let Some(bucket) = duration_buckets().iter().position(|b| seconds <= *b) {
            stats.buckets[bucket] += 1;
        }
    }

    /// Every operation's figures so far.
    pub fn snapshot(&self) -> BTreeMap<String, OperationStats> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Upstream's name of the operation of the gRPC method at `path`
/// (`/runtime.v1.RuntimeService/ListPodSandbox` is `list_podsandbox`): the method in snake
/// case, `PodSandbox` one word, `UpdateContainerResources` `update_container`.
pub fn operation_name(path: &str) -> String {
    let method = path.rsplit('/').next().unwrap_or(path);
    if method == "UpdateContainerResources" {
        return "update_container".to_owned();
    }
    let method = method.replace("PodSandbox", "Podsandbox");
    let mut name = String::with_capacity(method.len() + 4);
    for (i, c) in method.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        } else {
            name.push(c);
        }
    }
    name
}

/// The channel to the runtime, recording each call in [`RuntimeOperations`].
#[derive(Debug, Clone)]
pub struct Instrumented {
    channel: Channel,
    operations: Arc<RuntimeOperations>,
}

impl tower::Service<http::Request<tonic::body::Body>> for Instrumented {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.channel, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let operation = operation_name(request.uri().path());
        let operations = self.operations.clone();
        let started = std::time::Instant::now();
        let answer = tower::Service::call(&mut self.channel, request);
        Box::pin(async move {
            let answer = answer.await;
            // A failed call answers with its status in the headers (gRPC's trailers-only
            // response); a successful one sends it in the trailers.
            let failed = match &answer {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .is_some_and(|status| status != "0"),
                Err(_) => true,
            };
            operations.record(operation, started.elapsed(), failed);
            answer
        })
    }
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
        let operations = Arc::new(RuntimeOperations::default());
        let channel = Instrumented {
            channel,
            operations: operations.clone(),
        };
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            images: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            path,
            operations,
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
    fn operations_have_upstreams_names() {
        for (path, name) in [
            (
                "/runtime.v1.RuntimeService/ListPodSandbox",
                "list_podsandbox",
            ),
            (
                "/runtime.v1.RuntimeService/PodSandboxStatus",
                "podsandbox_status",
            ),
            ("/runtime.v1.RuntimeService/RunPodSandbox", "run_podsandbox"),
            (
                "/runtime.v1.RuntimeService/ListContainerStats",
                "list_container_stats",
            ),
            (
                "/runtime.v1.RuntimeService/ListPodSandboxStats",
                "list_podsandbox_stats",
            ),
            (
                "/runtime.v1.RuntimeService/UpdateContainerResources",
                "update_container",
            ),
            ("/runtime.v1.RuntimeService/ExecSync", "exec_sync"),
            ("/runtime.v1.RuntimeService/Status", "status"),
            ("/runtime.v1.ImageService/ImageFsInfo", "image_fs_info"),
            ("/runtime.v1.ImageService/PullImage", "pull_image"),
        ] {
            assert_eq!(operation_name(path), name);
        }
    }

    #[test]
    fn operations_are_counted_into_upstreams_buckets() {
        let buckets = duration_buckets();
        assert_eq!(buckets[0], 0.005);
        assert!(
            (buckets[1] - 0.0125).abs() < 1e-12
                && (buckets[13] - 0.005 * 2.5_f64.powi(13)).abs() < 1e-6
        );
        let operations = RuntimeOperations::default();
        operations.record("status".into(), Duration::from_millis(1), false);
        operations.record("status".into(), Duration::from_millis(20), true);
        operations.record("status".into(), Duration::from_secs(10_000), false);
        let status = &operations.snapshot()["status"];
        assert_eq!((status.count, status.errors), (3, 1));
        assert_eq!(status.buckets[0], 1);
        assert_eq!(status.buckets[2], 1, "20 ms is in the 31.25 ms bucket");
        assert_eq!(
            status.buckets.iter().sum::<u64>(),
            2,
            "10000 s is only in +Inf"
        );
        assert!((status.seconds - 10_000.021).abs() < 1e-9);
    }

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
