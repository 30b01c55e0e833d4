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

/// Test support: `input` decoded as `T`, defaulted by `default`, and encoded again equals
/// `expected` (without the apiVersion, kind and empty metadata serialisation adds).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn check_defaults<T: serde::de::DeserializeOwned + serde::Serialize>(
    input: serde_json::Value,
    default: fn(&mut T),
    expected: serde_json::Value,
) {
    let mut value: T = serde_json::from_value(input).unwrap_or_else(|e| panic!("{e}"));
    default(&mut value);
    let mut got = serde_json::to_value(&value).unwrap_or_else(|e| panic!("{e}"));
    // Serialisation adds the type's apiVersion and kind, and an empty metadata.
    if let Some(map) = got.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        if map
            .get("metadata")
            .is_some_and(|m| m.as_object().is_some_and(|o| o.is_empty()))
        {
            map.remove("metadata");
        }
    }
    assert_eq!(got, expected);
}
