use serde_json::json;

use super::*;
use crate::defaults::misc::{
    default_validating_admission_policy, default_validating_admission_policy_binding,
};

fn policy(spec: serde_json::Value) -> ValidatingAdmissionPolicy {
    let mut policy: ValidatingAdmissionPolicy =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap_or_else(|e| panic!("{e}"));
    default_validating_admission_policy(&mut policy);
    policy
}

fn binding(spec: serde_json::Value) -> ValidatingAdmissionPolicyBinding {
    let mut binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": spec}))
            .unwrap_or_else(|e| panic!("{e}"));
    default_validating_admission_policy_binding(&mut binding);
    binding
}

fn bodies(errs: &[FieldError]) -> Vec<String> {
    errs.iter()
        .map(|e| format!("{}: {}", e.field, e.body()))
        .collect()
}

fn rules() -> serde_json::Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

#[test]
fn a_defaulted_policy_with_a_validation_is_valid() {
    let p = policy(json!({
        "matchConstraints": rules(),
        "validations": [{"expression": "object.spec.replicas <= 5", "message": "too many"}],
    }));
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let constraints = spec.match_constraints.as_ref().unwrap();
    assert_eq!(constraints.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(
        constraints.resource_rules.as_ref().unwrap()[0]
            .scope
            .as_deref(),
        Some("*")
    );
    assert_eq!(bodies(&validate_policy(&p)), Vec::<String>::new());
}

#[test]
fn policies_are_refused_with_upstreams_errors() {
    let p = policy(json!({"matchConstraints": {}}));
    assert_eq!(
        bodies(&validate_policy(&p)),
        [
            "spec.matchConstraints.resourceRules: Required value",
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
        ]
    );
    let p = policy(json!({
        "paramKind": {"apiVersion": "v1"},
        "matchConstraints": rules(),
        "variables": [{"name": "in", "expression": "1"}],
        "validations": [
            {"expression": "object.spec.replicas <=", "reason": "Teapot"},
            {"expression": "true", "message": "two\nlines"},
        ],
    }));
    assert_eq!(
        bodies(&validate_policy(&p)),
        [
            "spec.paramKind.kind: Required value",
            "spec.variables[0].name: Invalid value: \"in\": name is not a valid CEL identifier",
            format!(
                "spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: {}",
                crate::cel::Expression::compile("object.spec.replicas <=").unwrap_err()
            )
            .as_str(),
            "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\"",
            "spec.validations[1].message: Invalid value: \"two\\nlines\": message must not contain line breaks",
        ]
    );
}

#[test]
fn bindings_are_refused_with_upstreams_errors() {
    let ok = binding(json!({"policyName": "p", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}));
    assert_eq!(bodies(&validate_binding(&ok)), Vec::<String>::new());
    let bad = binding(
        json!({"validationActions": ["Deny", "Warn", "Deny", "Block"],
        "paramRef": {"name": "x", "selector": {}}}),
    );
    assert_eq!(
        bodies(&validate_binding(&bad)),
        [
            "spec.policyName: Required value",
            "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.parameterNotFoundAction: Required value",
            "spec.validationActions[2]: Duplicate value: \"Deny\"",
            "spec.validationActions[3]: Unsupported value: \"Block\": supported values: \"Audit\", \"Deny\", \"Warn\"",
            "spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\", \"Deny\", \"Block\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ]
    );
    let none = binding(json!({"policyName": "p"}));
    assert_eq!(
        bodies(&validate_binding(&none)),
        ["spec.validationActions: Required value: at least one validation action is required"]
    );
}
