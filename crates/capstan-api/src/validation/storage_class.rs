//! `storage.k8s.io/v1` StorageClasses, as upstream 1.33 validates them: a qualified provisioner
//! name, parameters within their limits, a supported reclaim policy and binding mode, topology
//! terms without repeated keys or values; provisioner, parameters, reclaim policy and binding
//! mode never change.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::TopologySelectorTerm;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::field::{FieldError, Path};
use crate::validation::meta::{
    FIELD_IMMUTABLE, validate_label_name, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::{NameValidator, validate_qualified_name};

const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETERS_SIZE: usize = 256 * 1024;

/// A new StorageClass.
pub fn validate_storage_class(class: &StorageClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &class.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let provisioner = Path::new("provisioner");
    if class.provisioner.is_empty() {
        errs.push(FieldError::required(&provisioner, ""));
    } else {
        errs.extend(validate_qualified_name(
            &class.provisioner.to_lowercase(),
            &provisioner,
        ));
    }
    let parameters = Path::new("parameters");
    let params = class.parameters.as_ref();
    if params.is_some_and(|p| p.len() > MAX_PARAMETERS) {
        errs.push(FieldError::too_long(&parameters, MAX_PARAMETERS));
    } else {
        let mut size = 0;
        for (k, v) in params.into_iter().flatten() {
            if k.is_empty() {
                errs.push(FieldError::invalid(
                    &parameters,
                    "",
                    "field can not be empty.",
                ));
            }
            size += k.len() + v.len();
        }
        if size > MAX_PARAMETERS_SIZE {
            errs.push(FieldError::too_long(&parameters, MAX_PARAMETERS_SIZE));
        }
    }
    if let Some(policy) = class.reclaim_policy.as_deref()
        && !policy.is_empty()
        && policy != "Delete"
        && policy != "Retain"
    {
        errs.push(FieldError::not_supported(
            &Path::new("reclaimPolicy"),
            policy,
            &["Delete", "Retain"],
        ));
    }
    let mode = Path::new("volumeBindingMode");
    match class.volume_binding_mode.as_deref() {
        None => errs.push(FieldError::required(&mode, "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => errs.push(FieldError::not_supported(
            &mode,
            other,
            &["Immediate", "WaitForFirstConsumer"],
        )),
    }
    errs.extend(validate_allowed_topologies(
        class.allowed_topologies.as_deref().unwrap_or_default(),
        &Path::new("allowedTopologies"),
    ));
    errs
}

fn validate_allowed_topologies(terms: &[TopologySelectorTerm], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: Vec<Vec<(String, BTreeSet<String>)>> = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let exprs_path = path.index(i).child("matchLabelExpressions");
        let mut exprs: Vec<(String, BTreeSet<String>)> = Vec::new();
        for (j, req) in term.match_label_expressions.iter().flatten().enumerate() {
            let at = exprs_path.index(j);
            let mut values = BTreeSet::new();
            if req.values.is_empty() {
                errs.push(FieldError::required(&at.child("values"), ""));
            }
            for (k, value) in req.values.iter().enumerate() {
                if !values.insert(value.clone()) {
                    errs.push(FieldError::duplicate(
                        &at.child("values").index(k),
                        value.as_str(),
                    ));
                }
            }
            errs.extend(validate_label_name(&req.key, &at.child("key")));
            if exprs.iter().any(|(key, _)| *key == req.key) {
                errs.push(FieldError::duplicate(&at.child("key"), req.key.as_str()));
            } else {
                exprs.push((req.key.clone(), values));
            }
        }
        exprs.sort();
        if seen.contains(&exprs) {
            errs.push(FieldError::duplicate(&exprs_path, ""));
        }
        seen.push(exprs);
    }
    errs
}

/// An update of a StorageClass: everything but metadata, expansion and topologies is fixed.
pub fn validate_storage_class_update(new: &StorageClass, old: &StorageClass) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    if new.parameters.clone().unwrap_or_default() != old.parameters.clone().unwrap_or_default() {
        errs.push(FieldError::forbidden(
            &Path::new("parameters"),
            "updates to parameters are forbidden.",
        ));
    }
    if new.provisioner != old.provisioner {
        errs.push(FieldError::forbidden(
            &Path::new("provisioner"),
            "updates to provisioner are forbidden.",
        ));
    }
    if new.reclaim_policy != old.reclaim_policy {
        errs.push(FieldError::forbidden(
            &Path::new("reclaimPolicy"),
            "updates to reclaimPolicy are forbidden.",
        ));
    }
    if new.volume_binding_mode != old.volume_binding_mode {
        errs.push(FieldError::invalid(
            &Path::new("volumeBindingMode"),
            new.volume_binding_mode.clone().unwrap_or_default(),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::validation::test_support::messages;

    #[test]
    fn storage_classes_are_defaulted_checked_and_fixed() {
        let mut class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "fast", "resourceVersion": "1"},
            "provisioner": "example.com/fast",
            "reclaimPolicy": "Recycle",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "zone", "values": ["a", "a"]},
                {"key": "zone", "values": []}
            ]}]
        }))
        .unwrap();
        crate::defaults::misc::default_storage_class(&mut class);
        assert_eq!(class.volume_binding_mode.as_deref(), Some("Immediate"));
        assert_eq!(
            messages(&validate_storage_class(&class)),
            [
                "reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
                "allowedTopologies[0].matchLabelExpressions[0].values[1]: Duplicate value: \"a\"",
                "allowedTopologies[0].matchLabelExpressions[1].values: Required value",
                "allowedTopologies[0].matchLabelExpressions[1].key: Duplicate value: \"zone\"",
            ]
        );
        let mut changed = class.clone();
        changed.provisioner = "other.io/x".into();
        changed.volume_binding_mode = Some("WaitForFirstConsumer".into());
        assert_eq!(
            messages(&validate_storage_class_update(&changed, &class)),
            [
                "provisioner: Forbidden: updates to provisioner are forbidden.",
                "volumeBindingMode: Invalid value: \"WaitForFirstConsumer\": field is immutable",
            ]
        );
    }
}
