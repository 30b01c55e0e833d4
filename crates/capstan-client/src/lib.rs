//! What Capstan's components share as clients of the Kubernetes API: the scheduler, the
//! controllers and the node agent reach the API server only through `kube` clients, and this
//! crate holds the pieces they all need on top — recording `core/v1` Events ([`events`]) and
//! Lease-based leader election ([`leader`]) with upstream's semantics.

pub mod events;
pub mod leader;
