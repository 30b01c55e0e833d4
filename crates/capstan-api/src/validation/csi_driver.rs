//! `storage.k8s.io/v1` CSIDrivers, as upstream 1.33 validates them: a DNS-subdomain name, the
//! flags the defaults fill in present, a supported group policy and lifecycle modes, token
//! requests with distinct audiences and expirations between ten minutes and 2^32 seconds, an
//! update period of at least ten seconds; `attachRequired` and the lifecycle modes never change.
//!
//! Upstream names `spec.attachRequired` `spec.attachedRequired` in its errors; so does Capstan.

use std::collections::BTreeSet;

use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{FIELD_IMMUTABLE, validate_object_meta, validate_object_meta_update};
use crate::validation::names::NameValidator;

/// The group policies upstream supports, sorted as its error lists them.
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];

/// The lifecycle modes upstream supports, in its order.
const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];

/// The shortest and longest token expirations a driver may ask for, in seconds.
const MIN_EXPIRATION: i64 = 10 * 60;
const MAX_EXPIRATION: i64 = 1 << 32;

/// A new CSIDriver.
pub fn validate_csi_driver(driver: &CSIDriver) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &driver.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    errs.extend(validate_spec(&driver.spec, &Path::new("spec")));
    errs
}

/// An update of a CSIDriver.
pub fn validate_csi_driver_update(new: &CSIDriver, old: &CSIDriver) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let spec = Path::new("spec");
    errs.extend(validate_spec(&new.spec, &spec));
    if new.spec.attach_required != old.spec.attach_required {
        let shown = new
            .spec
            .attach_required
            .map_or(BadValue::Null, BadValue::Bool);
        errs.push(FieldError::invalid(
            &spec.child("attachedRequired"),
            shown,
            FIELD_IMMUTABLE,
        ));
    }
    if new.spec.volume_lifecycle_modes != old.spec.volume_lifecycle_modes {
        errs.push(FieldError::invalid(
            &spec.child("volumeLifecycleModes"),
            modes_value(new.spec.volume_lifecycle_modes.as_deref()),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// Go's `%#v` of the internal type's list of modes.
fn modes_value(modes: Option<&[String]>) -> BadValue {
    match modes {
        None => BadValue::Other("[]storage.VolumeLifecycleMode(nil)".to_owned()),
        Some(modes) => {
            let quoted: Vec<String> = modes.iter().map(|m| format!("{m:?}")).collect();
            BadValue::Other(format!(
                "[]storage.VolumeLifecycleMode{{{}}}",
                quoted.join(", ")
            ))
        }
    }
}

fn validate_spec(spec: &CSIDriverSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (value, field) in [
        (spec.attach_required, "attachedRequired"),
        (spec.pod_info_on_mount, "podInfoOnMount"),
        (spec.storage_capacity, "storageCapacity"),
    ] {
        if value.is_none() {
            errs.push(FieldError::required(&path.child(field), ""));
        }
    }
    if let Some(policy) = spec.fs_group_policy.as_deref()
        && !FS_GROUP_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            &path.child("fsGroupPolicy"),
            policy,
            FS_GROUP_POLICIES,
        ));
    }
    let requests = path.child("tokenRequests");
    let mut audiences = BTreeSet::new();
    for (i, request) in spec.token_requests.iter().flatten().enumerate() {
        let at = requests.index(i);
        if !audiences.insert(request.audience.as_str()) {
            errs.push(FieldError::duplicate(
                &at.child("audience"),
                request.audience.as_str(),
            ));
            continue;
        }
        match request.expiration_seconds {
            Some(s) if s < MIN_EXPIRATION => errs.push(FieldError::invalid(
                &at.child("expirationSeconds"),
                s,
                "may not specify a duration less than 10 minutes",
            )),
            Some(s) if s > MAX_EXPIRATION => errs.push(FieldError::invalid(
                &at.child("expirationSeconds"),
                s,
                "may not specify a duration larger than 2^32 seconds",
            )),
            _ => {}
        }
    }
    for mode in spec.volume_lifecycle_modes.iter().flatten() {
        if !LIFECYCLE_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("volumeLifecycleModes"),
                mode.as_str(),
                LIFECYCLE_MODES,
            ));
        }
    }
    // The `SELinuxMountReadWriteOncePod` gate is on in 1.33: the flag is required.
    if spec.se_linux_mount.is_none() {
        errs.push(FieldError::required(&path.child("seLinuxMount"), ""));
    }
    if let Some(period) = spec.node_allocatable_update_period_seconds
        && period < 10
    {
        errs.push(FieldError::invalid(
            &path.child("nodeAllocatableUpdatePeriodSeconds"),
            period,
            "must be greater than or equal to 10 seconds",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::misc::default_csi_driver;
    use k8s_openapi::api::storage::v1::TokenRequest;

    fn driver(name: &str) -> CSIDriver {
        let mut driver = CSIDriver {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        default_csi_driver(&mut driver);
        driver
    }

    fn bodies(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_defaulted_driver_is_valid_and_flags_are_required_without_defaults() {
        let d = driver("csi.example.com");
        assert_eq!(
            d.spec.volume_lifecycle_modes,
            Some(vec!["Persistent".into()])
        );
        assert_eq!(
            d.spec.fs_group_policy.as_deref(),
            Some("ReadWriteOnceWithFSType")
        );
        assert!(validate_csi_driver(&d).is_empty());
        let bare = CSIDriver {
            metadata: d.metadata.clone(),
            ..Default::default()
        };
        assert_eq!(
            bodies(&validate_csi_driver(&bare)),
            [
                "spec.attachedRequired: Required value",
                "spec.podInfoOnMount: Required value",
                "spec.storageCapacity: Required value",
                "spec.seLinuxMount: Required value",
            ]
        );
        let mut bad = driver("Not_A_Name");
        bad.spec.fs_group_policy = Some("Sometimes".into());
        bad.spec.volume_lifecycle_modes = Some(vec!["Forever".into()]);
        bad.spec.node_allocatable_update_period_seconds = Some(5);
        bad.spec.token_requests = Some(vec![
            TokenRequest {
                audience: "vault".into(),
                expiration_seconds: Some(60),
            },
            TokenRequest {
                audience: "vault".into(),
                expiration_seconds: None,
            },
            TokenRequest {
                audience: "".into(),
                expiration_seconds: Some(1 << 33),
            },
        ]);
        let errs = bodies(&validate_csi_driver(&bad));
        assert!(
            errs[0].starts_with("metadata.name: Invalid value: \"Not_A_Name\""),
            "{errs:?}"
        );
        assert_eq!(
            &errs[1..],
            [
                "spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
                "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
                "spec.tokenRequests[1].audience: Duplicate value: \"vault\"",
                "spec.tokenRequests[2].expirationSeconds: Invalid value: 8589934592: may not specify a duration larger than 2^32 seconds",
                "spec.volumeLifecycleModes: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
                "spec.nodeAllocatableUpdatePeriodSeconds: Invalid value: 5: must be greater than or equal to 10 seconds",
            ]
        );
    }

    #[test]
    fn attach_required_and_modes_are_immutable() {
        let old = driver("csi.example.com");
        let mut new = old.clone();
        new.spec.pod_info_on_mount = Some(true);
        new.spec.requires_republish = Some(true);
        assert!(validate_csi_driver_update(&new, &old).is_empty());
        new.spec.attach_required = Some(false);
        new.spec.volume_lifecycle_modes = Some(vec!["Persistent".into(), "Ephemeral".into()]);
        assert_eq!(
            bodies(&validate_csi_driver_update(&new, &old)),
            [
                "spec.attachedRequired: Invalid value: false: field is immutable",
                "spec.volumeLifecycleModes: Invalid value: []storage.VolumeLifecycleMode{\"Persistent\", \"Ephemeral\"}: field is immutable",
            ]
        );
    }
}
