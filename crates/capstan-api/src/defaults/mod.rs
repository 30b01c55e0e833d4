//! Defaulting of the built-in kinds (core/v1, apps/v1, batch/v1 and the smaller groups), as
//! upstream's versioned defaulters (generated and hand-written) apply them when a request body is
//! decoded.

pub mod core;
pub mod pod;

pub use pod::{
    default_pod, default_pod_spec, default_pod_template_spec, default_resource_list,
    prepare_pod_ephemeral_containers_update, prepare_pod_for_create, prepare_pod_status_update,
};
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod flowcontrol;
pub mod misc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The current time, as the strategies stamp it on conditions and phases.
pub(crate) fn now() -> Time {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Time(
        jiff::Timestamp::from_second(i64::try_from(since_epoch.as_secs()).unwrap_or(0))
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    )
}
