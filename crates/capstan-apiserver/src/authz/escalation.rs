//! RBAC escalation prevention, as upstream's storage of roles and bindings
//! (`pkg/registry/rbac/*/policybased`) enforces it: a user may write a Role or ClusterRole only
//! with rules they hold themselves, and a RoleBinding or ClusterRoleBinding only to a role whose
//! rules they hold, unless they are in `system:masters`, may `escalate` the role (roles) or
//! `bind` the referenced role (bindings). The rules held are RBAC's alone (ClusterRoleBindings,
//! and the RoleBindings of the object's namespace for namespaced objects), from the policy as
//! stored now. Writing a ClusterRole with an `aggregationRule` (or one that had one) also needs
//! full authority over everything. An update that only changes owner references or finalizers
//! is not checked, so the garbage collector and finalizer owners are never refused.
//!
//! The check runs inside the write, after mutating admission and before the strategy validates
//! the object (so a refusal wins over a validation error, as upstream's does), on creates,
//! updates, patches and server-side apply alike; dry runs included. The rule algebra and the
//! refusal's wording are [`capstan_api::rbac`]'s.

use std::sync::Arc;

use capstan_api::catalog::Resource;
use capstan_api::{GroupResource, StatusError};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::Value;

use crate::authn::User;
use crate::authz::{Attributes, Authorizer};
use crate::status::ApiError;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Whether writes of `resource` are checked.
pub(crate) fn applies_to(resource: &Resource) -> bool {
    resource.group == GROUP
        && matches!(
            resource.plural,
            "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
        )
}

/// The check of one request's write.
#[derive(Debug)]
pub(crate) struct EscalationCheck {
    /// Who writes.
    pub user: User,
    /// The server's authorizer (for `escalate` and `bind`, and the rules held).
    pub authorizer: Arc<Authorizer>,
    /// The object's name in the request's path (empty for a create by POST).
    pub request_name: String,
}

fn metadata_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

/// Whether two JSON values are equal as Go's semantic equality sees them: a missing member, a
/// null and an empty list or map are the same.
fn semantic_eq(a: &Value, b: &Value) -> bool {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => members.is_empty(),
        _ => false,
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().all(|k| {
                semantic_eq(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| semantic_eq(a, b))
        }
        (a, b) if empty(a) && empty(b) => true,
        (a, b) => a == b,
    }
}

/// Whether an update changes nothing but the fields the garbage collector and finalizer
/// owners write (upstream's `IsOnlyMutatingGCFields`).
fn only_gc_fields(new: &Value, old: &Value) -> bool {
    let mut copy = new.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["ownerReferences", "finalizers", "selfLink"] {
            match old["metadata"].get(field) {
                Some(value) => meta.insert(field.to_owned(), value.clone()),
                None => meta.remove(field),
            };
        }
    }
    semantic_eq(&copy, old)
}

fn rules_of(object: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(object["rules"].clone()).unwrap_or_default()
}

fn has_aggregation_rule(object: &Value) -> bool {
    object["aggregationRule"]["clusterRoleSelectors"]
        .as_array()
        .is_some_and(|s| !s.is_empty())
}

impl EscalationCheck {
    /// Refuses the write of `object` (a change of `old`) if it would grant what the user does
    /// not hold.
    pub(crate) async fn check(
        &self,
        resource: &Resource,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if !applies_to(resource) || self.user.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        if old.is_some_and(|old| only_gc_fields(object, old)) {
            return Ok(());
        }
        let namespace = if resource.namespaced {
            metadata_str(object, "namespace")
        } else {
            ""
        };
        let name = metadata_str(object, "name");
        let forbidden = |reason: &str| -> ApiError {
            StatusError::forbidden(GroupResource::new(GROUP, resource.plural), name, reason).into()
        };
        let refusal = |owner: &[PolicyRule], requested: &[PolicyRule], errors: &[String]| {
            capstan_api::rbac::escalation(
                &self.user.name,
                &self.user.groups,
                owner,
                requested,
                errors,
            )
        };
        match resource.plural {
            "roles" | "clusterroles" => {
                if self
                    .allowed("escalate", resource.plural, &self.request_name, namespace)
                    .await
                {
                    return Ok(());
                }
                let (owner, errors) = self.authorizer.rules_for(&self.user, namespace).await;
                if let Some(reason) = refusal(&owner, &rules_of(object), &errors) {
                    return Err(forbidden(&reason));
                }
                let aggregated =
                    has_aggregation_rule(object) || old.is_some_and(has_aggregation_rule);
                if resource.plural == "clusterroles"
                    && aggregated
                    && refusal(&owner, &capstan_api::rbac::full_authority(), &[]).is_some()
                {
                    return Err(forbidden(
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
                Ok(())
            }
            _ => {
                let role_ref: RoleRef =
                    serde_json::from_value(object["roleRef"].clone()).unwrap_or_default();
                let role_resource = match role_ref.kind.as_str() {
                    "ClusterRole" => Some("clusterroles"),
                    "Role" => Some("roles"),
                    _ => None,
                };
                if let Some(role_resource) = role_resource
                    && self
                        .allowed_in(
                            &role_ref.api_group,
                            "bind",
                            role_resource,
                            &role_ref.name,
                            namespace,
                        )
                        .await
                {
                    return Ok(());
                }
                let scope = (!namespace.is_empty()).then_some(namespace);
                let requested = self.authorizer.referenced_rules(&role_ref, scope).await?;
                let (owner, errors) = self.authorizer.rules_for(&self.user, namespace).await;
                match refusal(&owner, &requested, &errors) {
                    Some(reason) => Err(forbidden(&reason)),
                    None => Ok(()),
                }
            }
        }
    }

    async fn allowed(&self, verb: &str, resource: &str, name: &str, namespace: &str) -> bool {
        self.allowed_in(GROUP, verb, resource, name, namespace)
            .await
    }

    /// Whether the whole authorizer chain lets the user `verb` the named object.
    async fn allowed_in(
        &self,
        group: &str,
        verb: &str,
        resource: &str,
        name: &str,
        namespace: &str,
    ) -> bool {
        let attributes = Attributes {
            resource_request: true,
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            ..Attributes::default()
        };
        self.authorizer
            .authorize(&self.user, &attributes)
            .await
            .allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_owner_references_and_finalizers_changing_is_not_checked() {
        let old = json!({"metadata": {"name": "r", "labels": {}}, "rules": []});
        let gc = json!({"metadata": {"name": "r", "finalizers": ["x"],
                        "ownerReferences": [{"uid": "u"}]}, "rules": null});
        assert!(only_gc_fields(&gc, &old));
        let relabelled = json!({"metadata": {"name": "r", "labels": {"a": "b"}}, "rules": []});
        assert!(!only_gc_fields(&relabelled, &old));
    }
}
