//! Reconciling the bootstrap RBAC objects a cluster already holds, as upstream's API server does
//! at every start (`pkg/registry/rbac/reconciliation`, run by the RBAC post-start hook without
//! removing anything): a newer Capstan that grants a bootstrap role more (a new resource for the
//! scheduler, a new aggregated role) hands it to clusters made by an older one.
//!
//! - A role (ClusterRole or Role) gains the expected rules that its rules do not cover (broken
//!   down into single-verb rules, as upstream appends them), the aggregation selectors it lacks,
//!   and the expected labels and annotations it has no value for (its own values win).
//! - A binding gains the expected subjects it lacks and the labels and annotations likewise; one
//!   whose `roleRef` differs is deleted and made again with the expected `roleRef` (a `roleRef`
//!   cannot be updated), keeping its subjects.
//! - Nothing is ever removed (extra rules, selectors and subjects stay), and an object annotated
//!   `rbac.authorization.kubernetes.io/autoupdate: "false"` is left exactly as it is.
//!
//! Writes carry the read object's `resourceVersion`; a conflicting write by someone else is
//! read again and reconciled again, a few times.

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Map, Value};

use crate::registry::{DeleteOptions, Registry, WriteOptions};
use crate::status::ApiError;

/// The annotation that protects a bootstrap object from reconciliation when `"false"`.
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// How often a reconciliation that met a concurrent write starts over.
const ATTEMPTS: usize = 5;

/// What reconciling one existing object asks for.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// It already holds everything expected, or it is protected.
    Unchanged,
    /// Write this object over it.
    Update(Value),
    /// Delete it and create this one (a binding whose `roleRef` changed).
    Recreate(Value),
}

/// Brings the existing object of `expected`'s name in `registry` (a ClusterRole, Role,
/// ClusterRoleBinding or RoleBinding) up to what `expected` grants.
pub(crate) async fn reconcile(
    registry: &Registry,
    plural: &str,
    namespace: Option<&str>,
    expected: &Value,
) -> Result<(), ApiError> {
    let name = expected["metadata"]["name"].as_str().unwrap_or_default();
    let binding = plural.ends_with("bindings");
    for _ in 0..ATTEMPTS {
        let existing = match registry.get(namespace, name).await {
            Ok(existing) => existing,
            // Deleted meanwhile: make it as expected.
            Err(error) if error.status().code() == 404 => {
                match registry
                    .create(namespace, expected.clone(), &WriteOptions::default())
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(error) if error.status().code() == 409 => continue,
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        let outcome = if binding {
            reconciled_binding(&existing, expected)
        } else {
            reconciled_role(&existing, expected)
        };
        let written = match outcome {
            Outcome::Unchanged => return Ok(()),
            Outcome::Update(object) => registry
                .update(namespace, name, object, None, &WriteOptions::default())
                .await
                .map(drop),
            Outcome::Recreate(mut object) => {
                let options = DeleteOptions {
                    precondition_uid: existing["metadata"]["uid"].as_str().map(str::to_owned),
                    ..DeleteOptions::default()
                };
                match registry.delete(namespace, name, &options).await {
                    Ok(_) => {}
                    Err(error) if matches!(error.status().code(), 404 | 409) => continue,
                    Err(error) => return Err(error),
                }
                if let Some(meta) = object["metadata"].as_object_mut() {
                    for field in [
                        "resourceVersion",
                        "uid",
                        "creationTimestamp",
                        "managedFields",
                    ] {
                        meta.remove(field);
                    }
                }
                registry
                    .create(namespace, object, &WriteOptions::default())
                    .await
                    .map(drop)
            }
        };
        match written {
            Ok(()) => {
                tracing::info!(plural, name, "reconciled a bootstrap RBAC object");
                return Ok(());
            }
            Err(error) if error.status().code() == 409 => continue,
            Err(error) => return Err(error),
        }
    }
    tracing::warn!(
        plural,
        name,
        "gave up reconciling a bootstrap RBAC object written concurrently"
    );
    Ok(())
}

fn protected(existing: &Value) -> bool {
    existing["metadata"]["annotations"][AUTOUPDATE] == "false"
}

/// Adds to `existing`'s `metadata.<field>` the keys of `expected`'s it lacks; whether any was.
fn merge_map(existing: &mut Value, expected: &Value, field: &str) -> bool {
    let Some(wanted) = expected["metadata"][field].as_object() else {
        return false;
    };
    let Some(meta) = existing["metadata"].as_object_mut() else {
        return false;
    };
    let have = meta
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !have.is_object() {
        *have = Value::Object(Map::new());
    }
    let Some(have) = have.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (key, value) in wanted {
        if !have.contains_key(key) {
            have.insert(key.clone(), value.clone());
            changed = true;
        }
    }
    changed
}

fn merge_metadata(existing: &mut Value, expected: &Value) -> bool {
    let labels = merge_map(existing, expected, "labels");
    let annotations = merge_map(existing, expected, "annotations");
    labels || annotations
}

fn rules(object: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(object["rules"].clone()).unwrap_or_default()
}

/// Upstream's `computeReconciledRole` without removing extra permissions.
fn reconciled_role(existing: &Value, expected: &Value) -> Outcome {
    if protected(existing) {
        return Outcome::Unchanged;
    }
    let mut result = existing.clone();
    let mut changed = merge_metadata(&mut result, expected);
    let missing = capstan_api::rbac::uncovered(&rules(existing), &rules(expected));
    if !missing.is_empty() {
        let mut all = rules(existing);
        all.extend(missing);
        result["rules"] = serde_json::to_value(all).unwrap_or_default();
        changed = true;
    }
    if let Some(wanted) = expected["aggregationRule"]["clusterRoleSelectors"].as_array() {
        let mut selectors = existing["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let lacking: Vec<Value> = wanted
            .iter()
            .filter(|w| !selectors.contains(w))
            .cloned()
            .collect();
        if !lacking.is_empty() {
            selectors.extend(lacking);
            result["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": selectors});
            changed = true;
        }
    }
    if changed {
        Outcome::Update(result)
    } else {
        Outcome::Unchanged
    }
}

/// Upstream's `computeReconciledRoleBinding` without removing extra subjects.
fn reconciled_binding(existing: &Value, expected: &Value) -> Outcome {
    if protected(existing) {
        return Outcome::Unchanged;
    }
    let mut result = existing.clone();
    let mut changed = merge_metadata(&mut result, expected);
    let recreate = existing["roleRef"] != expected["roleRef"];
    if recreate {
        result["roleRef"] = expected["roleRef"].clone();
    }
    let mut subjects = existing["subjects"].as_array().cloned().unwrap_or_default();
    let lacking: Vec<Value> = expected["subjects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|s| !subjects.iter().any(|have| same_subject(have, s)))
        .cloned()
        .collect();
    if !lacking.is_empty() {
        subjects.extend(lacking);
        result["subjects"] = Value::Array(subjects);
        changed = true;
    }
    match (recreate, changed) {
        (true, _) => Outcome::Recreate(result),
        (false, true) => Outcome::Update(result),
        (false, false) => Outcome::Unchanged,
    }
}

/// Whether two subjects are the same (kind, API group, name and namespace; an absent API group
/// or namespace is the empty one).
fn same_subject(a: &Value, b: &Value) -> bool {
    let field = |s: &Value, f: &str| s[f].as_str().unwrap_or_default().to_owned();
    ["kind", "apiGroup", "name", "namespace"]
        .iter()
        .all(|f| field(a, f) == field(b, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "r", "resourceVersion": "7",
                            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                            "annotations": {AUTOUPDATE: "true"}},
               "rules": rules})
    }

    #[test]
    fn a_role_gains_the_rules_it_lacks_broken_down_and_keeps_its_own() {
        let existing = role(json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ]));
        let expected = role(json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch"]},
        ]));
        let Outcome::Update(result) = reconciled_role(&existing, &expected) else {
            panic!("expected an update");
        };
        assert_eq!(
            result["rules"],
            json!([
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]},
            ])
        );
        assert_eq!(
            result["metadata"]["resourceVersion"], "7",
            "written over what was read"
        );
        // Covered already: nothing to write.
        assert_eq!(reconciled_role(&result, &expected), Outcome::Unchanged);
    }

    #[test]
    fn a_protected_role_is_left_alone() {
        let mut existing = role(json!([]));
        existing["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        let expected = role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]));
        assert_eq!(reconciled_role(&existing, &expected), Outcome::Unchanged);
    }

    #[test]
    fn labels_annotations_and_selectors_are_added_never_replaced() {
        let mut existing = role(json!([]));
        existing["metadata"]["labels"] = json!({"mine": "yes", "shared": "theirs"});
        existing["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {"custom": "true"}}]});
        let mut expected = role(json!([]));
        expected["metadata"]["labels"] = json!({"shared": "ours", "new": "1"});
        expected["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]});
        let Outcome::Update(result) = reconciled_role(&existing, &expected) else {
            panic!("expected an update");
        };
        assert_eq!(
            result["metadata"]["labels"],
            json!({"mine": "yes", "shared": "theirs", "new": "1"})
        );
        assert_eq!(
            result["aggregationRule"]["clusterRoleSelectors"],
            json!([{"matchLabels": {"custom": "true"}},
                   {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}])
        );
    }

    fn binding(role: &str, subjects: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "b", "annotations": {AUTOUPDATE: "true"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": role},
               "subjects": subjects})
    }

    #[test]
    fn a_binding_gains_missing_subjects_and_is_remade_for_another_role() {
        let alice =
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"});
        let group = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"});
        let existing = binding("r", json!([alice]));
        let expected = binding("r", json!([group]));
        let Outcome::Update(result) = reconciled_binding(&existing, &expected) else {
            panic!("expected an update");
        };
        assert_eq!(result["subjects"], json!([alice, group]));
        assert_eq!(reconciled_binding(&result, &expected), Outcome::Unchanged);

        let moved = binding("other", json!([group]));
        let Outcome::Recreate(result) = reconciled_binding(&existing, &moved) else {
            panic!("expected a recreate");
        };
        assert_eq!(result["roleRef"]["name"], "other");
        assert_eq!(result["subjects"], json!([alice, group]));

        let mut kept = existing.clone();
        kept["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        assert_eq!(reconciled_binding(&kept, &moved), Outcome::Unchanged);
    }

    #[test]
    fn a_service_account_subject_without_api_group_is_the_same_subject() {
        let a = json!({"kind": "ServiceAccount", "name": "x", "namespace": "kube-system"});
        let b = json!({"kind": "ServiceAccount", "apiGroup": "", "name": "x",
                       "namespace": "kube-system"});
        assert!(same_subject(&a, &b));
        assert!(!same_subject(
            &a,
            &json!({"kind": "ServiceAccount", "name": "x"})
        ));
    }
}
