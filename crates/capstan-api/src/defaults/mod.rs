//! Defaulting of the built-in kinds (core/v1, apps/v1, batch/v1 and the smaller groups), as
//! upstream's versioned defaulters (generated and hand-written) apply them when a request body is
//! decoded.

pub mod core;
pub mod pod;

pub use pod::{
    default_pod, default_pod_spec, default_pod_template_spec, default_resource_list,
    prepare_pod_for_create, prepare_pod_status_update,
};
pub mod apps;
pub mod batch;
pub mod misc;
