//! The container runtime and what it needs: containerd and its CRI services, images, image
//! pulls and registries, the CNI configuration, containers' log files.

pub mod cni;
pub mod containerd;
pub mod cri;
pub mod images;
pub mod logs;
pub mod pull;
pub mod registries;
