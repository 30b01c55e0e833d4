//! The pods bound to this node: followed by the [`manager`], one [`worker`] each, admitted by
//! [`admission`], probed by [`probes`], their status computed by [`status`] from what
//! [`inspect`] reads of the runtime, and the kubelet's [`events`].

pub mod admission;
pub mod events;
pub mod inspect;
pub mod manager;
pub mod probes;
pub mod status;
pub mod worker;
