//! Defaulting of core/v1 objects, as upstream's `pkg/apis/core/v1` defaulters (generated and
//! hand-written) apply them when a request body is decoded.

pub mod core;
pub mod pod;

pub use pod::{default_pod, default_pod_spec, default_pod_template_spec, default_resource_list};
pub mod apps;
pub mod batch;
pub mod misc;
