//! PersistentVolumes and PersistentVolumeClaims: access modes, capacity and requests, reclaim
//! policy, volume mode, class names, data sources, node affinity, and the update rules (immutable
//! source, claims immutable but for growing requests once bound).

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeNodeAffinity,
};

use crate::field::{BadValue, FieldError, Path};
use crate::quantity::Quantity;
use crate::validation::meta::{
    FIELD_IMMUTABLE, require_resource_version, validate_label_selector, validate_object_meta,
    validate_object_meta_update,
};
use crate::validation::names::{NameValidator, is_dns1123_subdomain, is_qualified_name};
use crate::validation::node::validate_node_selector;
use crate::validation::resources::{
    is_native_resource, parse_quantity, validate_resource_quantity_value,
};
use crate::validation::volumes::validate_persistent_volume_source;

/// Access modes upstream supports (sorted).
pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
/// Reclaim policies upstream supports (sorted).
pub const RECLAIM_POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];
/// Volume modes upstream supports (sorted).
pub const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

fn validate_access_modes(modes: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (mut rwop, mut other) = (false, false);
    for mode in modes {
        if !ACCESS_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(path, mode.as_str(), ACCESS_MODES));
        }
        if mode == "ReadWriteOncePod" {
            rwop = true;
        } else if ACCESS_MODES.contains(&mode.as_str()) {
            other = true;
        }
    }
    if rwop && other {
        errs.push(FieldError::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
    errs
}

fn positive(q: &Quantity, path: &Path) -> Option<FieldError> {
    (q.is_negative() || q.is_zero())
        .then(|| FieldError::invalid(path, q.canonical(), "must be greater than zero"))
}

fn validate_class_name(name: &str, path: &Path) -> Vec<FieldError> {
    NameValidator::DnsSubdomain
        .validate(name, false)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, &msg))
        .collect()
}

/// The `storageClassName` (when not empty) and `volumeMode` of a volume's or a claim's spec at
/// `path`.
fn validate_class_and_volume_mode(
    class: Option<&str>,
    mode: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(class) = class.filter(|c| !c.is_empty()) {
        errs.extend(validate_class_name(class, &path.child("storageClassName")));
    }
    if let Some(mode) = mode
        && !VOLUME_MODES.contains(&mode)
    {
        errs.push(FieldError::not_supported(
            &path.child("volumeMode"),
            mode,
            VOLUME_MODES,
        ));
    }
    errs
}

fn validate_volume_node_affinity(
    affinity: &VolumeNodeAffinity,
    path: &Path,
) -> (bool, Vec<FieldError>) {
    match &affinity.required {
        None => (
            false,
            vec![FieldError::required(
                &path.child("required"),
                "must specify required node constraints",
            )],
        ),
        Some(required) => (
            true,
            validate_node_selector(required, false, &path.child("required")),
        ),
    }
}

/// A PersistentVolume (cluster-scoped, DNS-subdomain name).
pub fn validate_persistent_volume(pv: &PersistentVolume) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &pv.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let path = Path::new("spec");
    let default_spec = Default::default();
    let spec = pv.spec.as_ref().unwrap_or(&default_spec);
    let modes = spec.access_modes.as_deref().unwrap_or(&[]);
    if modes.is_empty() {
        errs.push(FieldError::required(&path.child("accessModes"), ""));
    }
    errs.extend(validate_access_modes(modes, &path.child("accessModes")));
    let capacity = spec.capacity.as_ref();
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(FieldError::required(&path.child("capacity"), ""));
    }
    let cap = capacity.cloned().unwrap_or_default();
    if !cap.contains_key("storage") || cap.len() > 1 {
        let shown = format!(
            "core.ResourceList{{{}}}",
            cap.iter()
                .map(|(k, v)| format!("{}:{}", crate::field::go_quote(k), v.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        errs.push(FieldError::not_supported(
            &path.child("capacity"),
            BadValue::Other(shown),
            &["storage"],
        ));
    }
    for (name, q) in &cap {
        let p = path.child("capacity").key(name);
        match parse_quantity(q, &p) {
            Ok(q) => {
                if q.value() < 0 {
                    errs.push(FieldError::invalid(
                        &p,
                        q.value(),
                        "must be a valid resource quantity",
                    ));
                }
                errs.extend(positive(&q, &p));
            }
            Err(e) => errs.push(e),
        }
    }
    if let Some(policy) = spec
        .persistent_volume_reclaim_policy
        .as_deref()
        .filter(|p| !p.is_empty())
        && !RECLAIM_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            &path.child("persistentVolumeReclaimPolicy"),
            policy,
            RECLAIM_POLICIES,
        ));
    }
    let mut affinity_specified = false;
    if let Some(affinity) = &spec.node_affinity {
        let (specified, e) = validate_volume_node_affinity(affinity, &path.child("nodeAffinity"));
        affinity_specified = specified;
        errs.extend(e);
    }
    let name = pv.metadata.name.as_deref().unwrap_or("");
    errs.extend(validate_persistent_volume_source(
        spec,
        name,
        affinity_specified,
        &path,
    ));
    if let Some(hp) = &spec.host_path {
        let cleaned = hp.path.trim_end_matches('/');
        if (cleaned.is_empty() && hp.path.starts_with('/'))
            && spec.persistent_volume_reclaim_policy.as_deref() == Some("Recycle")
        {
            errs.push(FieldError::forbidden(
                &path.child("persistentVolumeReclaimPolicy"),
                "may not be 'recycle' for a hostPath mount of '/'",
            ));
        }
    }
    errs.extend(validate_class_and_volume_mode(
        spec.storage_class_name.as_deref(),
        spec.volume_mode.as_deref(),
        &path,
    ));
    errs
}

/// An update of a PersistentVolume: the source is immutable (a CSI controller-expand secret may
/// be added), as are the volume mode and a set node affinity.
pub fn validate_persistent_volume_update(
    new: &PersistentVolume,
    old: &PersistentVolume,
) -> Vec<FieldError> {
    let mut errs = validate_persistent_volume(new);
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &Path::new("metadata"),
    ));
    let default_spec = Default::default();
    let new_spec = new.spec.as_ref().unwrap_or(&default_spec);
    let old_spec = old.spec.as_ref().unwrap_or(&default_spec);
    let source_of = |s: &k8s_openapi::api::core::v1::PersistentVolumeSpec| {
        let mut s = s.clone();
        s.access_modes = None;
        s.capacity = None;
        s.claim_ref = None;
        s.mount_options = None;
        s.node_affinity = None;
        s.persistent_volume_reclaim_policy = None;
        s.storage_class_name = None;
        s.volume_attributes_class_name = None;
        s.volume_mode = None;
        s
    };
    let mut new_source = source_of(new_spec);
    let old_source = source_of(old_spec);
    if let (Some(old_csi), Some(new_csi)) = (&old_source.csi, &mut new_source.csi)
        && old_csi.controller_expand_secret_ref.is_none()
    {
        new_csi.controller_expand_secret_ref = None;
    }
    if new_source != old_source {
        errs.push(FieldError::forbidden(
            &Path::new("spec").child("persistentvolumesource"),
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    if new_spec.volume_mode != old_spec.volume_mode {
        errs.push(FieldError::invalid(
            &Path::new("volumeMode"),
            new_spec
                .volume_mode
                .clone()
                .map_or(BadValue::Null, BadValue::Str),
            FIELD_IMMUTABLE,
        ));
    }
    if old_spec.node_affinity.is_some() && new_spec.node_affinity != old_spec.node_affinity {
        errs.push(FieldError::forbidden(
            &Path::new("nodeAffinity"),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// A claim spec (also the spec of a generic ephemeral volume's claim template).
pub fn validate_persistent_volume_claim_spec(
    spec: &PersistentVolumeClaimSpec,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let modes = spec.access_modes.as_deref().unwrap_or(&[]);
    if modes.is_empty() {
        errs.push(FieldError::required(
            &path.child("accessModes"),
            "at least 1 access mode is required",
        ));
    }
    if spec.selector.is_some() {
        errs.extend(validate_label_selector(
            spec.selector.as_ref(),
            false,
            &path.child("selector"),
        ));
    }
    errs.extend(validate_access_modes(modes, &path.child("accessModes")));
    let storage_path = path.child("resources").key("storage");
    match spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    {
        None => errs.push(FieldError::required(&storage_path, "")),
        Some(q) => match parse_quantity(q, &storage_path) {
            Ok(q) => match positive(&q, &storage_path) {
                Some(e) => errs.push(e),
                None => errs.extend(validate_resource_quantity_value(
                    "storage",
                    &q,
                    &storage_path,
                )),
            },
            Err(e) => errs.push(e),
        },
    }
    errs.extend(validate_class_and_volume_mode(
        spec.storage_class_name.as_deref(),
        spec.volume_mode.as_deref(),
        path,
    ));
    let check_source =
        |name: &str, kind: &str, group: Option<&String>, p: &Path, errs: &mut Vec<FieldError>| {
            if name.is_empty() {
                errs.push(FieldError::required(&p.child("name"), ""));
            }
            if kind.is_empty() {
                errs.push(FieldError::required(&p.child("kind"), ""));
            }
            let group = group.map_or("", String::as_str);
            if group.is_empty() && kind != "PersistentVolumeClaim" {
                errs.push(FieldError::invalid(
                    p,
                    kind,
                    "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
                ));
            }
            if !group.is_empty() {
                for msg in is_dns1123_subdomain(group) {
                    errs.push(FieldError::invalid(&p.child("apiGroup"), group, &msg));
                }
            }
        };
    if let Some(ds) = &spec.data_source {
        check_source(
            &ds.name,
            &ds.kind,
            ds.api_group.as_ref(),
            &path.child("dataSource"),
            &mut errs,
        );
    }
    if let Some(dsr) = &spec.data_source_ref {
        let p = path.child("dataSourceRef");
        check_source(&dsr.name, &dsr.kind, dsr.api_group.as_ref(), &p, &mut errs);
        if let Some(ns) = dsr.namespace.as_deref().filter(|ns| !ns.is_empty()) {
            for msg in NameValidator::DnsLabel.validate(ns, false) {
                errs.push(FieldError::invalid(&p.child("namespace"), ns, &msg));
            }
        }
    }
    let data_source_path = BadValue::Other(path.child("dataSource").to_string());
    match (&spec.data_source, &spec.data_source_ref) {
        (Some(_), Some(dsr)) if dsr.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) => {
            errs.push(FieldError::invalid(
                path,
                data_source_path,
                "may not be specified when dataSourceRef.namespace is specified",
            ));
        }
        (Some(ds), Some(dsr))
            if (ds.api_group != dsr.api_group || ds.kind != dsr.kind || ds.name != dsr.name) =>
        {
            errs.push(FieldError::invalid(
                path,
                data_source_path,
                "must match dataSourceRef",
            ));
        }
        _ => {}
    }
    errs
}

/// A PersistentVolumeClaim (namespaced, DNS-subdomain name).
pub fn validate_persistent_volume_claim(pvc: &PersistentVolumeClaim) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &pvc.metadata,
        true,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let default_spec = Default::default();
    errs.extend(validate_persistent_volume_claim_spec(
        pvc.spec.as_ref().unwrap_or(&default_spec),
        &Path::new("spec"),
    ));
    errs
}

const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// An update of a claim: the spec is immutable except that volumeName may be set once, the
/// storage class may move from the beta annotation or from unset, and a bound claim's storage
/// request may change (not below its recorded capacity).
pub fn validate_persistent_volume_claim_update(
    new: &PersistentVolumeClaim,
    old: &PersistentVolumeClaim,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    errs.extend(validate_persistent_volume_claim(new));
    let default_spec = PersistentVolumeClaimSpec::default();
    let mut new_spec = new.spec.clone().unwrap_or_default();
    let mut old_spec = old.spec.clone().unwrap_or_default();
    if old_spec.volume_name.as_deref().unwrap_or("").is_empty() {
        old_spec.volume_name = new_spec.volume_name.clone();
    }
    let old_annotations = old.metadata.annotations.clone().unwrap_or_default();
    let new_annotations = new.metadata.annotations.clone().unwrap_or_default();
    let old_sc = old_annotations.get(BETA_STORAGE_CLASS);
    let new_sc_annotation = new_annotations.get(BETA_STORAGE_CLASS);
    let upgrade_from_annotation = old_sc.is_some()
        && old_spec.storage_class_name.is_none()
        && new_spec
            .storage_class_name
            .as_ref()
            .is_some_and(|n| Some(n) == old_sc)
        && (new_sc_annotation.is_none() || new_sc_annotation == old_sc);
    if upgrade_from_annotation {
        new_spec.storage_class_name = None;
    } else {
        let new_value = new_sc_annotation.cloned().unwrap_or_default();
        if old_sc.cloned().unwrap_or_default() != new_value {
            errs.push(FieldError::invalid(
                &Path::new("metadata")
                    .child("annotations")
                    .child(BETA_STORAGE_CLASS),
                new_value.as_str(),
                FIELD_IMMUTABLE,
            ));
        }
        let from_nil = new_spec.storage_class_name.is_some()
            && old_spec.storage_class_name.is_none()
            && old_sc.is_none_or(|sc| Some(sc) == new_spec.storage_class_name.as_ref());
        if from_nil {
            new_spec.storage_class_name = old_spec.storage_class_name.clone();
        }
    }
    let bound = new.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if bound
        && let Some(requests) = new_spec
            .resources
            .as_mut()
            .and_then(|r| r.requests.as_mut())
    {
        match old_spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
        {
            Some(old_storage) => {
                requests.insert("storage".into(), old_storage.clone());
            }
            None => {
                requests.remove("storage");
            }
        }
    }
    if new_spec != old_spec {
        errs.push(FieldError::forbidden(
            &Path::new("spec"),
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        ));
    }
    let storage = |spec: Option<&PersistentVolumeClaimSpec>| {
        spec.unwrap_or(&default_spec)
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| Quantity::parse(&q.0).ok())
            .unwrap_or_else(|| Quantity::from_i64(0))
    };
    let new_size = storage(new.spec.as_ref());
    let old_size = storage(old.spec.as_ref());
    if new_size < old_size {
        let status_size = old
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| Quantity::parse(&q.0).ok())
            .unwrap_or_else(|| Quantity::from_i64(0));
        // RecoverVolumeExpansionFailure is on in 1.33: shrinking is allowed down to above the
        // recorded capacity.
        if new_size <= status_size {
            errs.push(FieldError::forbidden(
                &Path::new("spec")
                    .child("resources")
                    .child("requests")
                    .child("storage"),
                "field can not be less than status.capacity",
            ));
        }
    }
    let new_mode = new.spec.as_ref().and_then(|s| s.volume_mode.clone());
    let old_mode = old.spec.as_ref().and_then(|s| s.volume_mode.clone());
    if new_mode != old_mode {
        errs.push(FieldError::invalid(
            &Path::new("volumeMode"),
            new_mode.map_or(BadValue::Null, BadValue::Str),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// The states a claim's resize may be in (sorted).
pub const RESIZE_STATUSES: &[&str] = &[
    "ControllerResizeInProgress",
    "ControllerResizeInfeasible",
    "NodeResizeInProgress",
    "NodeResizeInfeasible",
    "NodeResizePending",
];

/// A resource key in a claim's allocation status: a qualified name, and `storage` when native.
fn validate_claim_resource_key(key: &str, path: &Path) -> Vec<FieldError> {
    let errs: Vec<FieldError> = is_qualified_name(key)
        .into_iter()
        .map(|msg| FieldError::invalid(path, key, &msg))
        .collect();
    if errs.is_empty() && is_native_resource(key) && key != "storage" {
        return vec![FieldError::not_supported(path, key, &["storage"])];
    }
    errs
}

/// Upstream's `validateBasicResource`: a quantity whose integer value is not negative.
fn validate_basic_resource(q: &Quantity, path: &Path) -> Option<FieldError> {
    (q.value() < 0)
        .then(|| FieldError::invalid(path, q.value(), "must be a valid resource quantity"))
}

/// An update of a PersistentVolumeClaim's status subresource: the claim has access modes (at
/// upstream's `Spec.accessModes`), capacities are not negative, and the allocation status names
/// only `storage` (or domain-prefixed resources) with known resize states (1.33 enables
/// `RecoverVolumeExpansionFailure`). Upstream names the resize-status field
/// `status.allocatedResourceStatus`, without a key.
pub fn validate_persistent_volume_claim_status_update(
    new: &PersistentVolumeClaim,
    old: &PersistentVolumeClaim,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    errs.extend(require_resource_version(&new.metadata));
    let modes = new.spec.as_ref().and_then(|s| s.access_modes.as_ref());
    if modes.is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(
            &Path::new("Spec").child("accessModes"),
            "",
        ));
    }
    let status = new.status.clone().unwrap_or_default();
    let capacity_path = Path::new("status").child("capacity");
    for (name, q) in status.capacity.iter().flatten() {
        let p = capacity_path.key(name);
        match parse_quantity(q, &p) {
            Ok(q) => errs.extend(validate_basic_resource(&q, &p)),
            Err(e) => errs.push(e),
        }
    }
    let resize_path = Path::new("status").child("allocatedResourceStatus");
    for (key, state) in status.allocated_resource_statuses.iter().flatten() {
        errs.extend(validate_claim_resource_key(key, &resize_path));
        if !RESIZE_STATUSES.contains(&state.as_str()) {
            errs.push(FieldError::not_supported(
                &resize_path,
                key.as_str(),
                RESIZE_STATUSES,
            ));
        }
    }
    let allocated_path = Path::new("status").child("allocatedResources");
    for (key, q) in status.allocated_resources.iter().flatten() {
        let key_errs = validate_claim_resource_key(key, &allocated_path);
        if !key_errs.is_empty() {
            errs.extend(key_errs);
            continue;
        }
        let p = allocated_path.key(key);
        match parse_quantity(q, &p) {
            Ok(q) => match validate_basic_resource(&q, &p) {
                Some(e) => errs.push(e),
                None => errs.extend(validate_resource_quantity_value("storage", &q, &p)),
            },
            Err(e) => errs.push(e),
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_support::check;
    use k8s_openapi::api::core::v1::{PersistentVolumeSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn claim(size: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("d".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".into(),
                        ApiQuantity(size.into()),
                    )])),
                    limits: None,
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn claims() {
        check(validate_persistent_volume_claim(&claim("1Gi")), &[]);
        let mut bad = claim("0");
        if let Some(spec) = bad.spec.as_mut() {
            spec.access_modes = Some(vec![
                "ReadWriteOncePod".into(),
                "ReadWriteOnce".into(),
                "Sometimes".into(),
            ]);
            spec.volume_mode = Some("Raw".into());
        }
        check(
            validate_persistent_volume_claim(&bad),
            &[
                "spec.accessModes: Unsupported value: \"Sometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.resources[storage]: Invalid value: \"0\": must be greater than zero",
                "spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
            ],
        );
    }

    #[test]
    fn claim_updates() {
        let old = claim("1Gi");
        check(
            validate_persistent_volume_claim_update(&claim("1Gi"), &old),
            &[],
        );
        check(
            validate_persistent_volume_claim_update(&claim("2Gi"), &old),
            &[
                "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ],
        );
        let mut bound = claim("2Gi");
        bound.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        check(validate_persistent_volume_claim_update(&bound, &old), &[]);
    }

    #[test]
    fn volumes() {
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                capacity: Some(BTreeMap::from([(
                    "storage".into(),
                    ApiQuantity("1Gi".into()),
                )])),
                host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                    path: "/data".into(),
                    type_: None,
                }),
                ..Default::default()
            }),
            status: None,
        };
        check(validate_persistent_volume(&pv), &[]);
        let empty = PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        check(
            validate_persistent_volume(&empty),
            &[
                "spec.accessModes: Required value",
                "spec.capacity: Required value",
                "spec.capacity: Unsupported value: core.ResourceList{}: supported values: \"storage\"",
                "spec: Required value: must specify a volume type",
            ],
        );
        let mut changed = pv.clone();
        if let Some(spec) = changed.spec.as_mut() {
            spec.host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: "/other".into(),
                type_: None,
            });
        }
        changed.metadata.resource_version = Some("2".into());
        check(
            validate_persistent_volume_update(&changed, &pv),
            &[
                "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation",
            ],
        );
    }

    #[test]
    fn claim_status_updates() {
        let with_status = |status: serde_json::Value| {
            let mut pvc = claim("1Gi");
            pvc.status = Some(serde_json::from_value(status).unwrap_or_else(|e| panic!("{e}")));
            pvc
        };
        let old = claim("1Gi");
        check(
            validate_persistent_volume_claim_status_update(
                &with_status(serde_json::json!({
                    "phase": "Bound", "capacity": {"storage": "1Gi"},
                    "allocatedResources": {"storage": "2Gi"},
                    "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"}
                })),
                &old,
            ),
            &[],
        );
        let mut no_modes = with_status(serde_json::json!({
            "capacity": {"storage": "-1Gi"},
            "allocatedResources": {"cpu": "1", "example.com/thing": "-1"},
            "allocatedResourceStatuses": {"storage": "Resizing"}
        }));
        if let Some(spec) = &mut no_modes.spec {
            spec.access_modes = None;
        }
        check(
            validate_persistent_volume_claim_status_update(&no_modes, &old),
            &[
                "Spec.accessModes: Required value",
                "status.capacity[storage]: Invalid value: -1073741824: must be a valid resource quantity",
                "status.allocatedResourceStatus: Unsupported value: \"storage\": supported values: \"ControllerResizeInProgress\", \"ControllerResizeInfeasible\", \"NodeResizeInProgress\", \"NodeResizeInfeasible\", \"NodeResizePending\"",
                "status.allocatedResources: Unsupported value: \"cpu\": supported values: \"storage\"",
                "status.allocatedResources[example.com/thing]: Invalid value: -1: must be a valid resource quantity",
            ],
        );
    }
}
