//! What Capstan's components share as clients of the Kubernetes API: the scheduler, the
//! controllers and the node agent reach the API server only through `kube` clients, and this
//! crate holds the pieces they all need on top — recording `core/v1` Events ([`events`]) and
//! Lease-based leader election ([`leader`]) with upstream's semantics, the process's metrics
//! registry ([`metrics`]) — and, as client-go's
//! `clientcmd` does upstream, the kubeconfigs clients read ([`credentials`]), written by the
//! API server for its users and components and by a joining agent for its node.
//!
//! It also builds the TLS configuration of the two HTTPS servers, the API server's and the
//! kubelet API's ([`tls`]): both present a certificate from the cluster CA and check client
//! certificates against it, the credentials the kubeconfigs carry. It lives here because both
//! servers depend on this crate and it is the one about those credentials; `capstan-stream`
//! speaks its protocols over whatever connection it is given and never sees TLS, and
//! `capstan-api` is the API without I/O.
//!
//! [`prometheus`] writes the Prometheus exposition formats (text 0.0.4 and OpenMetrics) and
//! picks one from a request's `Accept` header, for the API server's and the kubelet's
//! `/metrics` endpoints alike.
//!
//! [`informer`] holds the shared informers (one watch and cache per resource type) that the
//! controller manager and the scheduler of one process both read.
//!
//! [`loadbalancer`] is a joined node agent's way to the API servers: a local TCP proxy that
//! follows the live servers (the `default/kubernetes` Endpoints) and fails over among them.

pub mod credentials;
pub mod events;
pub mod informer;
pub mod leader;
pub mod loadbalancer;
pub mod metrics;
pub mod prometheus;
pub mod tls;

/// How Capstan's components list and then watch a resource: the objects that exist arrive as
/// the first events of the watch (`sendInitialEvents=true`, upstream's streaming list), then a
/// bookmark marks the end of them, with bookmarks on. The API server serves them from its watch
/// cache one object at a time, so a component that starts against 150,000 pods neither waits for
/// hundreds of pages read back from storage at one revision (kube's default, a consistent list
/// in pages of 500) nor holds the whole list as one body while it decodes it (a list at
/// `resourceVersion=0`, client-go's reflector).
pub fn watcher_config() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().streaming_lists()
}
