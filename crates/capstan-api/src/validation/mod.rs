//! Upstream-exact validation of the built-in kinds: core/v1, apps/v1 ([`apps`]), batch/v1
//! ([`batch`]) and the smaller groups ([`misc`]). Each `validate_*` returns every field error it
//! finds (empty when the object is valid); the registry turns a non-empty list into one 422
//! `Invalid` Status. Run the matching [`crate::defaults`] function first, as upstream decodes
//! (and so defaults) before it validates.

pub mod meta;
pub use crate::names;
pub mod networking;

pub use meta::{validate_object_meta, validate_object_meta_update};
pub use names::NameValidator;
pub mod admissionpolicy;
pub mod admissionregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod core;
pub mod crd;
pub mod csi_driver;
pub mod flowcontrol;
pub(crate) mod gofmt;
pub mod misc;
pub mod node;
pub mod pod;
pub mod rbac;
pub mod resources;
pub mod runtime_class;
pub mod service;
pub mod storage;
pub mod storage_class;
pub mod volumes;

/// What the validation tests share.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod test_support {
    use crate::field::FieldError;

    /// The errors as their messages.
    pub(crate) fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    /// Asserts that `errs` are the `expected` messages, in order.
    pub(crate) fn check(errs: Vec<FieldError>, expected: &[&str]) {
        assert_eq!(messages(&errs), expected);
    }

    /// `value` decoded as a `T` (a test's fixture, so a failure panics).
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }
}
