//! `rbac.authorization.k8s.io/v1` Roles, ClusterRoles, RoleBindings and ClusterRoleBindings, as
//! upstream 1.33 validates them: names need only be usable as path segments, rules must name
//! verbs and either resources (with API groups) or non-resource URLs (cluster roles only),
//! bindings must reference a role of the RBAC group, and their `roleRef` never changes.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::defaults::misc::RBAC_GROUP;
use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{go_string_slice, validate_object_meta, validate_object_meta_update};
use crate::validation::names::{NameValidator, is_dns1123_subdomain, is_valid_path_segment_name};

fn meta_path() -> Path {
    Path::new("metadata")
}

fn validate_rules(rules: Option<&Vec<PolicyRule>>, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        errs.extend(validate_policy_rule(
            rule,
            namespaced,
            &Path::new("rules").index(i),
        ));
    }
    errs
}

fn validate_policy_rule(rule: &PolicyRule, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let len = |v: &Option<Vec<String>>| v.as_ref().map_or(0, Vec::len);
    if rule.verbs.is_empty() {
        errs.push(FieldError::required(
            &path.child("verbs"),
            "verbs must contain at least one value",
        ));
    }
    if len(&rule.non_resource_urls) > 0 {
        let urls = BadValue::Other(go_string_slice(
            rule.non_resource_urls.as_deref().unwrap_or_default(),
        ));
        if namespaced {
            errs.push(FieldError::invalid(
                &path.child("nonResourceURLs"),
                urls.clone(),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if len(&rule.api_groups) > 0 || len(&rule.resources) > 0 || len(&rule.resource_names) > 0 {
            errs.push(FieldError::invalid(
                &path.child("nonResourceURLs"),
                urls,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return errs;
    }
    if len(&rule.api_groups) == 0 {
        errs.push(FieldError::required(
            &path.child("apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if len(&rule.resources) == 0 {
        errs.push(FieldError::required(
            &path.child("resources"),
            "resource rules must supply at least one resource",
        ));
    }
    if len(&rule.resource_names) > 0 && len(&rule.resources) > 1 {
        errs.push(FieldError::required(
            &path.child("resourceNames"),
            "resource names cannot apply to multiple resources",
        ));
    }
    errs
}

/// A new Role (`namespaced`) or ClusterRole: its metadata and its rules.
fn validate_role_like(
    meta: &ObjectMeta,
    rules: Option<&Vec<PolicyRule>>,
    namespaced: bool,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta(meta, namespaced, NameValidator::PathSegment, &meta_path());
    errs.extend(validate_rules(rules, namespaced));
    errs
}

/// An update of any RBAC object: the new object's errors, then the metadata update rules.
fn with_meta_update(
    mut errs: Vec<FieldError>,
    new: &ObjectMeta,
    old: &ObjectMeta,
) -> Vec<FieldError> {
    errs.extend(validate_object_meta_update(new, old, &meta_path()));
    errs
}

/// A new Role.
pub fn validate_role(role: &Role) -> Vec<FieldError> {
    validate_role_like(&role.metadata, role.rules.as_ref(), true)
}

/// An update of a Role.
pub fn validate_role_update(new: &Role, old: &Role) -> Vec<FieldError> {
    with_meta_update(validate_role(new), &new.metadata, &old.metadata)
}

/// A new ClusterRole.
pub fn validate_cluster_role(role: &ClusterRole) -> Vec<FieldError> {
    validate_role_like(&role.metadata, role.rules.as_ref(), false)
}

/// An update of a ClusterRole.
pub fn validate_cluster_role_update(new: &ClusterRole, old: &ClusterRole) -> Vec<FieldError> {
    with_meta_update(validate_cluster_role(new), &new.metadata, &old.metadata)
}

fn validate_role_ref(role_ref: &RoleRef, kinds: &[&str]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("roleRef");
    if role_ref.api_group != RBAC_GROUP {
        errs.push(FieldError::not_supported(
            &path.child("apiGroup"),
            role_ref.api_group.as_str(),
            &[RBAC_GROUP],
        ));
    }
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("kind"),
            role_ref.kind.as_str(),
            kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else {
        for msg in is_valid_path_segment_name(&role_ref.name) {
            errs.push(FieldError::invalid(
                &path.child("name"),
                role_ref.name.as_str(),
                &msg,
            ));
        }
    }
    errs
}

fn validate_subject(subject: &Subject, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let api_group = subject.api_group.as_deref().unwrap_or_default();
    if subject.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    match subject.kind.as_str() {
        "ServiceAccount" => {
            if !subject.name.is_empty() {
                for msg in is_dns1123_subdomain(&subject.name) {
                    errs.push(FieldError::invalid(
                        &path.child("name"),
                        subject.name.as_str(),
                        &msg,
                    ));
                }
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &[""],
                ));
            }
            if !namespaced && subject.namespace.as_deref().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(&path.child("namespace"), ""));
            }
        }
        kind @ ("User" | "Group") => {
            if subject.name.is_empty() {
                let what = if kind == "User" { "user" } else { "group" };
                errs.push(FieldError::invalid(
                    &path.child("name"),
                    "",
                    &format!("{what} name cannot be empty"),
                ));
            }
            if api_group != RBAC_GROUP {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &[RBAC_GROUP],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

fn validate_subjects(subjects: Option<&Vec<Subject>>, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, subject) in subjects.into_iter().flatten().enumerate() {
        errs.extend(validate_subject(
            subject,
            namespaced,
            &Path::new("subjects").index(i),
        ));
    }
    errs
}

/// Go's `%#v` of an `rbac.RoleRef`, as upstream shows it in "cannot change roleRef".
fn go_role_ref(role_ref: &RoleRef) -> String {
    format!(
        "rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}",
        role_ref.api_group, role_ref.kind, role_ref.name
    )
}

fn role_ref_unchanged(new: &RoleRef, old: &RoleRef) -> Option<FieldError> {
    (new != old).then(|| {
        FieldError::invalid(
            &Path::new("roleRef"),
            BadValue::Other(go_role_ref(new)),
            "cannot change roleRef",
        )
    })
}

/// A new RoleBinding (`namespaced`) or ClusterRoleBinding: its metadata, its `roleRef` (one of
/// `kinds`) and its subjects.
fn validate_binding(
    meta: &ObjectMeta,
    role_ref: &RoleRef,
    subjects: Option<&Vec<Subject>>,
    namespaced: bool,
    kinds: &[&str],
) -> Vec<FieldError> {
    let mut errs = validate_object_meta(meta, namespaced, NameValidator::PathSegment, &meta_path());
    errs.extend(validate_role_ref(role_ref, kinds));
    errs.extend(validate_subjects(subjects, namespaced));
    errs
}

/// An update of a binding: the new binding's errors, the metadata update rules, and a fixed
/// `roleRef`.
fn validate_binding_update(
    new_errs: Vec<FieldError>,
    (new_meta, new_ref): (&ObjectMeta, &RoleRef),
    (old_meta, old_ref): (&ObjectMeta, &RoleRef),
) -> Vec<FieldError> {
    let mut errs = with_meta_update(new_errs, new_meta, old_meta);
    errs.extend(role_ref_unchanged(new_ref, old_ref));
    errs
}

/// A new RoleBinding.
pub fn validate_role_binding(binding: &RoleBinding) -> Vec<FieldError> {
    validate_binding(
        &binding.metadata,
        &binding.role_ref,
        binding.subjects.as_ref(),
        true,
        &["Role", "ClusterRole"],
    )
}

/// An update of a RoleBinding: its `roleRef` is fixed.
pub fn validate_role_binding_update(new: &RoleBinding, old: &RoleBinding) -> Vec<FieldError> {
    validate_binding_update(
        validate_role_binding(new),
        (&new.metadata, &new.role_ref),
        (&old.metadata, &old.role_ref),
    )
}

/// A new ClusterRoleBinding: service account subjects need a namespace.
pub fn validate_cluster_role_binding(binding: &ClusterRoleBinding) -> Vec<FieldError> {
    validate_binding(
        &binding.metadata,
        &binding.role_ref,
        binding.subjects.as_ref(),
        false,
        &["ClusterRole"],
    )
}

/// An update of a ClusterRoleBinding: its `roleRef` is fixed.
pub fn validate_cluster_role_binding_update(
    new: &ClusterRoleBinding,
    old: &ClusterRoleBinding,
) -> Vec<FieldError> {
    validate_binding_update(
        validate_cluster_role_binding(new),
        (&new.metadata, &new.role_ref),
        (&old.metadata, &old.role_ref),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::misc::{default_cluster_role_binding, default_role_binding};
    use serde_json::json;

    use crate::validation::test_support::messages;

    use crate::validation::test_support::decode;

    #[test]
    fn rules_need_verbs_and_resources_or_urls() {
        let role: Role = decode(json!({
            "metadata": {"name": "r", "namespace": "ns"},
            "rules": [
                {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
                {"verbs": [], "resources": ["pods", "secrets"], "resourceNames": ["x"]},
                {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}
            ]
        }));
        assert_eq!(
            messages(&validate_role(&role)),
            [
                "rules[1].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resourceNames: Required value: resource names cannot apply to multiple resources",
                "rules[2].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
            ]
        );
        let cluster: ClusterRole = decode(json!({
            "metadata": {"name": "system:thing"},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]
        }));
        assert!(validate_cluster_role(&cluster).is_empty());
    }

    #[test]
    fn bindings_are_defaulted_checked_and_keep_their_role() {
        let mut binding: RoleBinding = decode(json!({
            "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "1"},
            "roleRef": {"apiGroup": "", "kind": "ClusterRole", "name": "edit"},
            "subjects": [
                {"kind": "User", "name": "alice"},
                {"kind": "ServiceAccount", "name": "default"},
                {"kind": "Robot", "name": "r2"}
            ]
        }));
        default_role_binding(&mut binding);
        assert_eq!(binding.role_ref.api_group, RBAC_GROUP);
        let subjects = binding.subjects.as_ref().unwrap();
        assert_eq!(subjects[0].api_group.as_deref(), Some(RBAC_GROUP));
        assert_eq!(subjects[1].api_group.as_deref(), Some(""));
        assert_eq!(
            messages(&validate_role_binding(&binding)),
            [
                "subjects[2].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""
            ]
        );
        let mut changed = binding.clone();
        changed.role_ref.name = "admin".into();
        changed.subjects.as_mut().unwrap().pop();
        binding.subjects.as_mut().unwrap().pop();
        assert_eq!(
            messages(&validate_role_binding_update(&changed, &binding)),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"admin\"}: cannot change roleRef"
            ]
        );
        let mut cluster: ClusterRoleBinding = decode(json!({
            "metadata": {"name": "c"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}]
        }));
        default_cluster_role_binding(&mut cluster);
        assert_eq!(
            messages(&validate_cluster_role_binding(&cluster)),
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
            ]
        );
    }
}
