//! Object metadata: create-time checks (name or generateName, namespace by scope, generation,
//! labels, annotations and their total size, owner references, finalizers, managed fields) and
//! update-time immutability, as upstream's `ValidateObjectMeta` / `ValidateObjectMetaUpdate` and
//! core's finalizer rule. Also label selectors, which many specs embed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ManagedFieldsEntry, ObjectMeta, OwnerReference,
};

use crate::field::{BadValue, FieldError, Path};
use crate::validation::names::{NameValidator, is_qualified_name, is_valid_label_value};

/// Upstream's message for a changed immutable field.
pub const FIELD_IMMUTABLE: &str = "field is immutable";
/// Upstream's message for a negative number.
pub const IS_NEGATIVE: &str = "must be greater than or equal to 0";
/// The most bytes annotations (keys plus values) may hold.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// The longest field manager name.
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;
/// The longest subresource name in managed fields.
pub const MAX_SUBRESOURCE_NAME_LENGTH: usize = 256;

/// Finalizer names core accepts without a `/` prefix.
pub const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// Go's `%#v` of a string slice, which upstream prints for list values.
pub fn go_string_slice(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| crate::field::go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Go's `%#v` of a `map[string]string` (keys sorted, as Go prints maps).
pub fn go_string_map(values: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = values
        .iter()
        .map(|(k, v)| {
            format!(
                "{}:{}",
                crate::field::go_quote(k),
                crate::field::go_quote(v)
            )
        })
        .collect();
    format!("map[string]string{{{}}}", pairs.join(", "))
}

/// A negative number is invalid.
pub fn validate_nonnegative(value: i64, path: &Path) -> Vec<FieldError> {
    if value < 0 {
        vec![FieldError::invalid(path, value, IS_NEGATIVE)]
    } else {
        Vec::new()
    }
}

/// What a count above a workload status's `replicas` is told.
const ABOVE_REPLICAS: &str = "cannot be greater than status.replicas";
/// What `availableReplicas` above `readyReplicas` is told (StatefulSets say
/// `status.readyReplicas`).
pub const ABOVE_READY: &str = "cannot be greater than readyReplicas";

/// A workload status's counts under `path`: each of `counts` not above `replicas`, in the order
/// given (upstream's per kind), then `available` not above `ready`, told `above_ready`.
pub fn within_replicas(
    replicas: i32,
    counts: &[(i32, &str)],
    (ready, available, above_ready): (i32, i32, &str),
    path: &Path,
) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> = counts
        .iter()
        .filter(|(value, _)| *value > replicas)
        .map(|&(value, field)| FieldError::invalid(&path.child(field), value, ABOVE_REPLICAS))
        .collect();
    if available > ready {
        errs.push(FieldError::invalid(
            &path.child("availableReplicas"),
            available,
            above_ready,
        ));
    }
    errs
}

/// The counts of a ReplicaSet's or a ReplicationController's status (the same fields).
#[derive(Clone, Copy, Debug)]
pub struct ReplicaCounts {
    pub replicas: i32,
    pub labeled: i32,
    pub ready: i32,
    pub available: i32,
    pub observed_generation: i64,
}

/// A ReplicaSet's or ReplicationController's status counts: none negative, none above
/// `replicas`, and no more available than ready.
pub fn validate_replica_counts(counts: ReplicaCounts, path: &Path) -> Vec<FieldError> {
    let ReplicaCounts {
        replicas,
        labeled,
        ready,
        available,
        observed_generation,
    } = counts;
    let mut errs = Vec::new();
    for (value, field) in [
        (i64::from(replicas), "replicas"),
        (i64::from(labeled), "fullyLabeledReplicas"),
        (i64::from(ready), "readyReplicas"),
        (i64::from(available), "availableReplicas"),
        (observed_generation, "observedGeneration"),
    ] {
        errs.extend(validate_nonnegative(value, &path.child(field)));
    }
    errs.extend(within_replicas(
        replicas,
        &[
            (labeled, "fullyLabeledReplicas"),
            (ready, "readyReplicas"),
            (available, "availableReplicas"),
        ],
        (ready, available, ABOVE_READY),
        path,
    ));
    errs
}

/// A label key.
pub fn validate_label_name(name: &str, path: &Path) -> Vec<FieldError> {
    is_qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, &msg))
        .collect()
}

/// A label map: keys are qualified names and values label values. Errors are reported at the map
/// path, as upstream does.
pub fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in labels.into_iter().flatten() {
        errs.extend(validate_label_name(key, path));
        for msg in is_valid_label_value(value) {
            errs.push(FieldError::invalid(path, value.as_str(), &msg));
        }
    }
    errs
}

/// Annotation keys are qualified names (case-insensitively) and all annotations together hold at
/// most 256 KiB.
pub fn validate_annotations(
    annotations: Option<&BTreeMap<String, String>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (key, value) in annotations.into_iter().flatten() {
        for msg in is_qualified_name(&key.to_lowercase()) {
            errs.push(FieldError::invalid(path, key.as_str(), &msg));
        }
        total += key.len() + value.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// Go's `%#v` of an owner reference, for the "disallowed owner" error.
fn go_owner_reference(r: &OwnerReference) -> String {
    let opt_bool = |b: Option<bool>| match b {
        None => "(*bool)(nil)".to_owned(),
        Some(v) => format!("(*bool)({v})"),
    };
    format!(
        "v1.OwnerReference{{APIVersion:{}, Kind:{}, Name:{}, UID:{}, Controller:{}, BlockOwnerDeletion:{}}}",
        crate::field::go_quote(&r.api_version),
        crate::field::go_quote(&r.kind),
        crate::field::go_quote(&r.name),
        crate::field::go_quote(&r.uid),
        opt_bool(r.controller),
        opt_bool(r.block_owner_deletion),
    )
}

fn validate_owner_reference(r: &OwnerReference, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    // Split apiVersion into group and version as upstream's schema helpers do.
    let (group, version) = match r.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", r.api_version.as_str()),
    };
    // Upstream treats an apiVersion with more than one '/' as unparseable: empty GVK.
    let (group, version) = if version.contains('/') {
        ("", "")
    } else {
        (group, version)
    };
    if version.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("apiVersion"),
            r.api_version.as_str(),
            "version must not be empty",
        ));
    }
    if r.kind.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("kind"),
            r.kind.as_str(),
            "must not be empty",
        ));
    }
    if r.name.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("name"),
            r.name.as_str(),
            "must not be empty",
        ));
    }
    if r.uid.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("uid"),
            r.uid.as_str(),
            "must not be empty",
        ));
    }
    if group.is_empty() && version == "v1" && r.kind == "Event" {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_owner_reference(r)),
            "/v1, Kind=Event is disallowed from being an owner",
        ));
    }
    errs
}

/// Owner references are complete, Events are no owners, and at most one is the controller.
pub fn validate_owner_references(refs: &[OwnerReference], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs {
        errs.extend(validate_owner_reference(r, path));
        if r.controller == Some(true) {
            let current = format!("{}/{}", r.kind, r.name);
            match &first_controller {
                Some(first) => {
                    let value = format!(
                        "[]v1.OwnerReference{{{}}}",
                        refs.iter()
                            .map(go_owner_reference)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    errs.push(FieldError::invalid(
                        path,
                        BadValue::Other(value),
                        &format!(
                            "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                        ),
                    ));
                }
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// A finalizer name is a qualified name.
pub fn validate_finalizer_name(name: &str, path: &Path) -> Vec<FieldError> {
    is_qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, &msg))
        .collect()
}

/// Core's extra rule: an unprefixed finalizer must be a standard one.
pub fn validate_kube_finalizer_name(name: &str, path: &Path) -> Vec<FieldError> {
    if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
        vec![FieldError::invalid(
            path,
            name,
            "name is neither a standard finalizer name nor is it fully qualified",
        )]
    } else {
        Vec::new()
    }
}

/// Finalizers are qualified names and do not ask both to orphan and to delete dependents.
pub fn validate_finalizers(finalizers: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for finalizer in finalizers {
        errs.extend(validate_finalizer_name(finalizer, path));
    }
    let orphan = finalizers.iter().any(|f| f == "orphan");
    let delete = finalizers.iter().any(|f| f == "foregroundDeletion");
    if orphan && delete {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_string_slice(finalizers)),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

fn validate_field_manager(manager: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(path, FIELD_MANAGER_MAX_LENGTH));
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            errs.push(FieldError::invalid(
                path,
                manager,
                &format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

/// Managed-field entries name a known operation and field type.
pub fn validate_managed_fields(entries: &[ManagedFieldsEntry], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = path.index(i);
        let operation = entry.operation.as_deref().unwrap_or("");
        if operation != "Apply" && operation != "Update" {
            errs.push(FieldError::invalid(
                &entry_path.child("operation"),
                operation,
                "must be `Apply` or `Update`",
            ));
        }
        let fields_type = entry.fields_type.as_deref().unwrap_or("");
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            errs.push(FieldError::invalid(
                &entry_path.child("fieldsType"),
                fields_type,
                "must be `FieldsV1`",
            ));
        }
        errs.extend(validate_field_manager(
            entry.manager.as_deref().unwrap_or(""),
            &entry_path.child("manager"),
        ));
        if entry.subresource.as_deref().unwrap_or("").len() > MAX_SUBRESOURCE_NAME_LENGTH {
            errs.push(FieldError::too_long(
                &entry_path.child("subresource"),
                MAX_SUBRESOURCE_NAME_LENGTH,
            ));
        }
    }
    errs
}

fn common_checks(meta: &ObjectMeta, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = meta.namespace.as_deref().unwrap_or("");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(&path.child("namespace"), ""));
        } else {
            for msg in NameValidator::DnsLabel.validate(namespace, false) {
                errs.push(FieldError::invalid(
                    &path.child("namespace"),
                    namespace,
                    &msg,
                ));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type",
        ));
    }
    errs.extend(validate_nonnegative(
        meta.generation.unwrap_or(0),
        &path.child("generation"),
    ));
    errs.extend(validate_labels(meta.labels.as_ref(), &path.child("labels")));
    errs.extend(validate_annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        meta.owner_references.as_deref().unwrap_or(&[]),
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_finalizers(
        meta.finalizers.as_deref().unwrap_or(&[]),
        &path.child("finalizers"),
    ));
    errs.extend(validate_managed_fields(
        meta.managed_fields.as_deref().unwrap_or(&[]),
        &path.child("managedFields"),
    ));
    errs
}

/// Metadata of a new object (after name generation), with upstream's generic checks only.
pub fn validate_object_meta_generic(
    meta: &ObjectMeta,
    namespaced: bool,
    names: NameValidator,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate_name = meta.generate_name.as_deref().unwrap_or("");
    if !generate_name.is_empty() {
        for msg in names.validate(generate_name, true) {
            errs.push(FieldError::invalid(
                &path.child("generateName"),
                generate_name,
                &msg,
            ));
        }
    }
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for msg in names.validate(name, false) {
            errs.push(FieldError::invalid(&path.child("name"), name, &msg));
        }
    }
    errs.extend(common_checks(meta, namespaced, path));
    errs
}

/// Metadata of a new core/v1 object: the generic checks plus core's finalizer-name rule.
pub fn validate_object_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    names: NameValidator,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_generic(meta, namespaced, names, path);
    for (i, finalizer) in meta.finalizers.iter().flatten().enumerate() {
        errs.extend(validate_kube_finalizer_name(
            finalizer,
            &path.child("finalizers").index(i),
        ));
    }
    errs
}

/// Go's `%#v`-free rendering of an immutable value: strings quoted, absent values `null`.
fn immutable_error<T: PartialEq>(
    new: &T,
    old: &T,
    shown: BadValue,
    path: &Path,
) -> Option<FieldError> {
    (new != old).then(|| FieldError::invalid(path, shown, FIELD_IMMUTABLE))
}

fn time_value(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> BadValue {
    match t {
        None => BadValue::Null,
        Some(t) => BadValue::Other(t.0.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string()),
    }
}

/// Metadata of an update (generic upstream checks): resourceVersion present, generation not
/// decremented, identity and deletion fields unchanged, no finalizers added while deleting, and
/// the label, annotation, owner and managed-field rules on the new metadata.
pub fn validate_object_meta_update_generic(
    new: &ObjectMeta,
    old: &ObjectMeta,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.deletion_timestamp.is_some() {
        let old_finalizers = old.finalizers.as_deref().unwrap_or(&[]);
        let mut extra: Vec<String> = new
            .finalizers
            .iter()
            .flatten()
            .filter(|f| !old_finalizers.contains(f))
            .cloned()
            .collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("finalizers"),
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    go_string_slice(&extra)
                ),
            ));
        }
    }
    let rv = new.resource_version.as_deref().unwrap_or("");
    if rv.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("resourceVersion"),
            rv,
            "must be specified for an update",
        ));
    }
    let (new_gen, old_gen) = (new.generation.unwrap_or(0), old.generation.unwrap_or(0));
    if new_gen < old_gen {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            new_gen,
            "must not be decremented",
        ));
    }
    let str_of = |s: &Option<String>| s.clone().unwrap_or_default();
    errs.extend(immutable_error(
        &str_of(&new.name),
        &str_of(&old.name),
        BadValue::Str(str_of(&new.name)),
        &path.child("name"),
    ));
    errs.extend(immutable_error(
        &str_of(&new.namespace),
        &str_of(&old.namespace),
        BadValue::Str(str_of(&new.namespace)),
        &path.child("namespace"),
    ));
    errs.extend(immutable_error(
        &str_of(&new.uid),
        &str_of(&old.uid),
        BadValue::Str(str_of(&new.uid)),
        &path.child("uid"),
    ));
    errs.extend(immutable_error(
        &new.creation_timestamp,
        &old.creation_timestamp,
        // A zero creationTimestamp prints as Go's zero time.
        match &new.creation_timestamp {
            None => BadValue::Other("0001-01-01 00:00:00 +0000 UTC".to_owned()),
            some => time_value(some.as_ref()),
        },
        &path.child("creationTimestamp"),
    ));
    errs.extend(immutable_error(
        &new.deletion_timestamp,
        &old.deletion_timestamp,
        time_value(new.deletion_timestamp.as_ref()),
        &path.child("deletionTimestamp"),
    ));
    errs.extend(immutable_error(
        &new.deletion_grace_period_seconds,
        &old.deletion_grace_period_seconds,
        new.deletion_grace_period_seconds
            .map_or(BadValue::Null, BadValue::Int),
        &path.child("deletionGracePeriodSeconds"),
    ));
    errs.extend(validate_labels(new.labels.as_ref(), &path.child("labels")));
    errs.extend(validate_annotations(
        new.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        new.owner_references.as_deref().unwrap_or(&[]),
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_managed_fields(
        new.managed_fields.as_deref().unwrap_or(&[]),
        &path.child("managedFields"),
    ));
    errs
}

/// A status update must name the version it replaces (upstream's status strategies of
/// resource quotas and claims ask for it).
pub fn require_resource_version(meta: &ObjectMeta) -> Option<FieldError> {
    meta.resource_version
        .as_deref()
        .is_none_or(str::is_empty)
        .then(|| FieldError::required(&Path::new("resourceVersion"), ""))
}

/// Metadata of an update of a core/v1 object: the generic checks plus core's finalizer-name rule.
pub fn validate_object_meta_update(
    new: &ObjectMeta,
    old: &ObjectMeta,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update_generic(new, old, path);
    for (i, finalizer) in new.finalizers.iter().flatten().enumerate() {
        errs.extend(validate_kube_finalizer_name(
            finalizer,
            &path.child("finalizers").index(i),
        ));
    }
    errs
}

/// Metadata embedded in a template (only labels and annotations may be set).
pub fn validate_template_object_meta(meta: &ObjectMeta, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_annotations(meta.annotations.as_ref(), &path.child("annotations"));
    errs.extend(validate_labels(meta.labels.as_ref(), &path.child("labels")));
    let set = [
        ("creationTimestamp", meta.creation_timestamp.is_some()),
        (
            "deletionGracePeriodSeconds",
            meta.deletion_grace_period_seconds.is_some(),
        ),
        ("deletionTimestamp", meta.deletion_timestamp.is_some()),
        (
            "finalizers",
            meta.finalizers.as_ref().is_some_and(|f| !f.is_empty()),
        ),
        (
            "generateName",
            meta.generate_name.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        ("generation", meta.generation.is_some_and(|g| g != 0)),
        (
            "managedFields",
            meta.managed_fields.as_ref().is_some_and(|f| !f.is_empty()),
        ),
        ("name", meta.name.as_ref().is_some_and(|s| !s.is_empty())),
        (
            "namespace",
            meta.namespace.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        (
            "ownerReferences",
            meta.owner_references
                .as_ref()
                .is_some_and(|f| !f.is_empty()),
        ),
        (
            "resourceVersion",
            meta.resource_version
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
        ),
        (
            "selfLink",
            meta.self_link.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        ("uid", meta.uid.as_ref().is_some_and(|s| !s.is_empty())),
    ];
    // Upstream walks ObjectMeta's Go fields in declaration order.
    let order = [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    for field in order {
        if set.iter().any(|(name, is_set)| *name == field && *is_set) {
            errs.push(FieldError::forbidden(&path.child(field), "cannot be set"));
        }
    }
    errs
}

/// One selector requirement, as upstream checks label selector requirements and node selector
/// requirements alike: `In`/`NotIn` need values, `Exists`/`DoesNotExist` take none, and with
/// `gt_lt` (node selectors) `Gt`/`Lt` take exactly one; then the key, a label name; then, with
/// `allow_invalid_label_value` false, each value as a label value.
pub(crate) fn validate_selector_requirement(
    key: &str,
    operator: &str,
    values: &[String],
    gt_lt: bool,
    allow_invalid_label_value: bool,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match operator {
        "In" | "NotIn" => {
            if values.is_empty() {
                errs.push(FieldError::required(
                    &path.child("values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                errs.push(FieldError::forbidden(
                    &path.child("values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
        }
        "Gt" | "Lt" if gt_lt => {
            if values.len() != 1 {
                errs.push(FieldError::required(
                    &path.child("values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ));
            }
        }
        other => errs.push(FieldError::invalid(
            &path.child("operator"),
            other,
            "not a valid selector operator",
        )),
    }
    errs.extend(validate_label_name(key, &path.child("key")));
    if !allow_invalid_label_value {
        for (i, value) in values.iter().enumerate() {
            for msg in is_valid_label_value(value) {
                errs.push(FieldError::invalid(
                    &path.child("values").index(i),
                    value.as_str(),
                    &msg,
                ));
            }
        }
    }
    errs
}

/// A label selector; with `allow_invalid_label_value` false, `In`/`NotIn` values must be label
/// values.
pub fn validate_label_selector(
    selector: Option<&LabelSelector>,
    allow_invalid_label_value: bool,
    path: &Path,
) -> Vec<FieldError> {
    let Some(selector) = selector else {
        return Vec::new();
    };
    let mut errs = validate_labels(selector.match_labels.as_ref(), &path.child("matchLabels"));
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        errs.extend(validate_selector_requirement(
            &req.key,
            &req.operator,
            req.values.as_deref().unwrap_or(&[]),
            false,
            allow_invalid_label_value,
            &path.child("matchExpressions").index(i),
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_support::check;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};

    #[test]
    fn replica_counts_are_not_negative_nor_above_replicas_nor_available_above_ready() {
        let counts = ReplicaCounts {
            replicas: 3,
            labeled: 2,
            ready: 4,
            available: 5,
            observed_generation: -1,
        };
        let errs: Vec<String> = validate_replica_counts(counts, &Path::new("status"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            [
                "status.observedGeneration: Invalid value: -1: must be greater than or equal to 0",
                "status.readyReplicas: Invalid value: 4: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 5: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 5: cannot be greater than readyReplicas",
            ]
        );
        let fine = ReplicaCounts {
            replicas: 3,
            labeled: 3,
            ready: 2,
            available: 2,
            observed_generation: 1,
        };
        assert!(validate_replica_counts(fine, &Path::new("status")).is_empty());
    }

    fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            ..Default::default()
        }
    }

    fn path() -> Path {
        Path::new("metadata")
    }

    #[test]
    fn names_and_namespaces() {
        check(
            validate_object_meta(
                &meta("web", Some("default")),
                true,
                NameValidator::DnsSubdomain,
                &path(),
            ),
            &[],
        );
        check(
            validate_object_meta(
                &ObjectMeta::default(),
                true,
                NameValidator::DnsSubdomain,
                &path(),
            ),
            &[
                "metadata.name: Required value: name or generateName is required",
                "metadata.namespace: Required value",
            ],
        );
        check(
            validate_object_meta(
                &meta("Web", None),
                false,
                NameValidator::DnsSubdomain,
                &path(),
            ),
            &[
                "metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        );
        check(
            validate_object_meta(
                &meta("n", Some("x")),
                false,
                NameValidator::DnsLabel,
                &path(),
            ),
            &["metadata.namespace: Forbidden: not allowed on this type"],
        );
        check(
            validate_object_meta(
                &meta("n", Some("a.b")),
                true,
                NameValidator::DnsLabel,
                &path(),
            ),
            &["metadata.namespace: Invalid value: \"a.b\": must not contain dots"],
        );
        let mut generated = meta("web-x1", Some("d"));
        generated.generate_name = Some("Web-".into());
        let errs = validate_object_meta(&generated, true, NameValidator::DnsSubdomain, &path());
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.generateName");
    }

    #[test]
    fn labels_annotations_generation() {
        let mut m = meta("a", Some("d"));
        m.labels = Some(BTreeMap::from([("app".into(), "-bad".into())]));
        m.annotations = Some(BTreeMap::from([(
            "Example.com/Key".into(),
            "x".repeat(300 * 1024),
        )]));
        m.generation = Some(-1);
        check(
            validate_object_meta(&m, true, NameValidator::DnsSubdomain, &path()),
            &[
                "metadata.generation: Invalid value: -1: must be greater than or equal to 0",
                "metadata.labels: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ],
        );
        let mut bad_key = meta("a", Some("d"));
        bad_key.labels = Some(BTreeMap::from([("a/b/c".into(), "v".into())]));
        let errs = validate_object_meta(&bad_key, true, NameValidator::DnsSubdomain, &path());
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.labels");
    }

    #[test]
    fn finalizers_and_owners() {
        let mut m = meta("a", Some("d"));
        m.finalizers = Some(vec![
            "orphan".into(),
            "foregroundDeletion".into(),
            "custom".into(),
        ]);
        check(
            validate_object_meta(&m, true, NameValidator::DnsSubdomain, &path()),
            &[
                "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\", \"custom\"}: finalizer orphan and foregroundDeletion cannot be both set",
                "metadata.finalizers[2]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
            ],
        );
        let owner = |kind: &str, controller: bool| OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: "o".into(),
            uid: "u".into(),
            controller: Some(controller),
            block_owner_deletion: None,
        };
        let mut m = meta("a", Some("d"));
        m.owner_references = Some(vec![
            owner("Event", false),
            OwnerReference {
                api_version: "".into(),
                ..owner("Pod", true)
            },
            owner("Node", true),
        ]);
        let errs = validate_object_meta(&m, true, NameValidator::DnsSubdomain, &path());
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[0],
            "metadata.ownerReferences: Invalid value: v1.OwnerReference{APIVersion:\"v1\", Kind:\"Event\", Name:\"o\", UID:\"u\", Controller:(*bool)(false), BlockOwnerDeletion:(*bool)(nil)}: /v1, Kind=Event is disallowed from being an owner"
        );
        assert_eq!(
            got[1],
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        assert!(got[2].ends_with("Only one reference can have Controller set to true. Found \"true\" in references for Pod/o and Node/o"));
    }

    #[test]
    fn updates() {
        let mut old = meta("a", Some("d"));
        old.uid = Some("1".into());
        old.generation = Some(3);
        old.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        old.finalizers = Some(vec!["a.io/x".into()]);
        let mut new = old.clone();
        new.name = Some("b".into());
        new.uid = Some("2".into());
        new.generation = Some(2);
        new.finalizers = Some(vec!["a.io/x".into(), "b.io/y".into()]);
        check(
            validate_object_meta_update(&new, &old, &path()),
            &[
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b.io/y\"}",
                "metadata.resourceVersion: Invalid value: \"\": must be specified for an update",
                "metadata.generation: Invalid value: 2: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.uid: Invalid value: \"2\": field is immutable",
            ],
        );
        let mut same = old.clone();
        same.resource_version = Some("5".into());
        check(validate_object_meta_update(&same, &old, &path()), &[]);
    }

    #[test]
    fn selectors() {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "In".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "b".into(),
                    operator: "Exists".into(),
                    values: Some(vec!["x".into()]),
                },
                LabelSelectorRequirement {
                    key: "c".into(),
                    operator: "Gt".into(),
                    values: Some(vec!["-".into()]),
                },
            ]),
        };
        check(
            validate_label_selector(Some(&selector), true, &Path::new("spec").child("selector")),
            &[
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "spec.selector.matchExpressions[2].operator: Invalid value: \"Gt\": not a valid selector operator",
            ],
        );
    }

    #[test]
    fn template_meta_allows_only_labels_and_annotations() {
        let mut m = meta("x", Some("y"));
        m.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        check(
            validate_template_object_meta(
                &m,
                &Path::new("spec").child("template").child("metadata"),
            ),
            &[
                "spec.template.metadata.name: Forbidden: cannot be set",
                "spec.template.metadata.namespace: Forbidden: cannot be set",
            ],
        );
    }
}
