//! What Capstan's components share as clients of the Kubernetes API: the scheduler, the
//! controllers and the node agent reach the API server only through `kube` clients, and this
//! crate holds the pieces they all need on top — recording `core/v1` Events ([`events`]) and
//! Lease-based leader election ([`leader`]) with upstream's semantics — and, as client-go's
//! `clientcmd` does upstream, the kubeconfigs clients read ([`credentials`]), written by the
//! API server for its users and components and by a joining agent for its node.

pub mod credentials;
pub mod events;
pub mod leader;
