//! Capstan's scheduler: upstream kube-scheduler's shape over the Kubernetes API.
//!
//! It watches pods, nodes, namespaces and storage objects through the API, keeps a
//! [`snapshot::Snapshot`] of every node with the pods placed on it, and schedules each pending
//! pod whose `spec.schedulerName` is one of its profiles' in one cycle of the [`framework`]:
//! PreFilter, Filter (stopping once upstream's `percentageOfNodesToScore` of nodes fit),
//! PostFilter (preemption) when nothing fits, then PreScore, Score and host selection. The pod
//! is assumed on its node at once, so the next cycle sees it, and bound through the `pods/binding`
//! subresource in the background — once its PersistentVolumeClaims are bound, when VolumeBinding
//! chose volumes or provisioning for them (the `prebind` step). Pods that fit nowhere wait in
//! the [`queue`] until a cluster event that may help (a node added or changed, a pod gone, a
//! claim, volume or class changed) or their backoff ends; they get a `FailedScheduling` event
//! and a `PodScheduled=False` condition with upstream's message.
//!
//! The plugins in [`plugins`] carry upstream's names and rules; [`config`] reads the
//! `KubeSchedulerConfiguration` profiles that enable, disable and weight them.

pub mod config;
pub mod framework;
mod metrics;
pub mod plugins;
mod prebind;
pub mod queue;
mod scheduler;
pub mod snapshot;

pub use capstan_api::fit::resource;
pub use config::Config;
pub use scheduler::Scheduler;
