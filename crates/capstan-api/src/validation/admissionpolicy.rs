//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and their bindings, as
//! upstream 1.33 validates them: a failure policy, the resources matched (at least one resource
//! rule, each rule as a webhook's, with resource names), the kind of the parameters, match
//! conditions, variables (CEL identifiers), validations (an expression, a one-line message or
//! a message expression, a reason upstream knows) and audit annotations; a binding names its
//! policy, where its parameters are (a name or a selector, and what to do when none is found)
//! and the actions a failed validation takes (Deny, Warn, Audit; not Deny with Warn).
//!
//! Every CEL expression is compiled ([`crate::cel::Expression`]); upstream's type checking
//! against the matched kinds' schemas is not done (its compiler checks types, `cel` parses).

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    AuditAnnotation, MatchResources, NamedRuleWithOperations, ParamKind, ParamRef,
    RuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::admissionregistration::{
    FAILURE_POLICIES, MATCH_POLICIES, validate_match_conditions, validate_rule,
};
use crate::field::{BadValue, FieldError, Path};
use crate::names::{
    NameValidator, is_dns1035_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_path_segment_name,
};
use crate::validation::meta::{
    validate_label_selector, validate_object_meta, validate_object_meta_update,
};

/// The reasons a validation may give.
const REASONS: &[&str] = &[
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
    "Unauthorized",
];
/// What a binding does with a failed validation.
const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
/// What a binding does when its parameters are not found.
const NOT_FOUND_ACTIONS: &[&str] = &["Deny", "Allow"];
/// Upstream's limits on audit annotations.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_VALUE_EXPRESSION_BYTES: usize = 5 * 1024;

/// A ValidatingAdmissionPolicy to be created.
pub fn validate_policy(policy: &ValidatingAdmissionPolicy) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &policy.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let spec = policy.spec.clone().unwrap_or_default();
    errs.extend(validate_policy_spec(&policy.metadata, &spec, true));
    errs
}

/// A change of a ValidatingAdmissionPolicy: the create rules, except that unchanged match
/// conditions are not checked again (upstream's ratcheting).
pub fn validate_policy_update(
    new: &ValidatingAdmissionPolicy,
    old: &ValidatingAdmissionPolicy,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let spec = new.spec.clone().unwrap_or_default();
    let old_conditions = old.spec.as_ref().and_then(|s| s.match_conditions.as_ref());
    let changed = spec.match_conditions.as_ref() != old_conditions;
    errs.extend(validate_policy_spec(&new.metadata, &spec, changed));
    errs
}

/// A change of a ValidatingAdmissionPolicy's status: its conditions and type checking.
pub fn validate_policy_status_update(
    new: &ValidatingAdmissionPolicy,
    old: &ValidatingAdmissionPolicy,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let status = new.status.clone().unwrap_or_default();
    let path = Path::new("status");
    for (i, warning) in status
        .type_checking
        .iter()
        .flat_map(|t| t.expression_warnings.iter().flatten())
        .enumerate()
    {
        let at = path
            .child("typeChecking")
            .child("expressionWarnings")
            .index(i);
        if warning.warning.is_empty() {
            errs.push(FieldError::required(&at.child("warning"), ""));
        }
        if warning.field_ref.trim().is_empty() {
            errs.push(FieldError::required(&at.child("fieldRef"), ""));
        }
    }
    errs.extend(super::misc::validate_conditions(
        status.conditions.as_deref().unwrap_or_default(),
        &path.child("conditions"),
    ));
    errs
}

fn validate_policy_spec(
    meta: &ObjectMeta,
    spec: &ValidatingAdmissionPolicySpec,
    check_conditions: bool,
) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = Vec::new();
    match spec.failure_policy.as_deref() {
        None => errs.push(FieldError::required(&path.child("failurePolicy"), "")),
        Some(policy) if !FAILURE_POLICIES.contains(&policy) => errs.push(
            FieldError::not_supported(&path.child("failurePolicy"), policy, FAILURE_POLICIES),
        ),
        Some(_) => {}
    }
    if let Some(kind) = &spec.param_kind {
        errs.extend(validate_param_kind(kind, &path.child("paramKind")));
    }
    match &spec.match_constraints {
        None => errs.push(FieldError::required(&path.child("matchConstraints"), "")),
        Some(constraints) => {
            let at = path.child("matchConstraints");
            errs.extend(validate_match_resources(constraints, &at));
            if constraints
                .resource_rules
                .as_deref()
                .unwrap_or_default()
                .is_empty()
            {
                errs.push(FieldError::required(&at.child("resourceRules"), ""));
            }
        }
    }
    if check_conditions {
        errs.extend(validate_match_conditions(
            spec.match_conditions.as_deref().unwrap_or_default(),
            &path.child("matchConditions"),
        ));
    }
    for (i, variable) in spec.variables.iter().flatten().enumerate() {
        errs.extend(validate_variable(
            variable,
            &path.child("variables").index(i),
        ));
    }
    let validations = spec.validations.as_deref().unwrap_or_default();
    let annotations = spec.audit_annotations.as_deref().unwrap_or_default();
    if validations.is_empty() && annotations.is_empty() {
        let why = "validations or auditAnnotations must contain at least one item";
        errs.push(FieldError::required(&path.child("validations"), why));
        errs.push(FieldError::required(&path.child("auditAnnotations"), why));
        return errs;
    }
    for (i, validation) in validations.iter().enumerate() {
        errs.extend(validate_validation(
            validation,
            &path.child("validations").index(i),
        ));
    }
    if annotations.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::invalid(
            &path.child("auditAnnotations"),
            BadValue::Other(format!("{annotations:?}")),
            &format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let mut keys = BTreeSet::new();
    for (i, annotation) in annotations.iter().enumerate() {
        let at = path.child("auditAnnotations").index(i);
        errs.extend(validate_audit_annotation(meta, annotation, &at));
        if !keys.insert(annotation.key.as_str()) {
            errs.push(FieldError::duplicate(
                &at.child("key"),
                annotation.key.as_str(),
            ));
        }
    }
    errs
}

/// A CEL expression's compile error, as upstream reports it at `path`.
fn compile(expression: &str, path: &Path) -> Option<FieldError> {
    crate::cel::Expression::compile(expression)
        .err()
        .map(|why| FieldError::invalid(path, expression, &format!("compilation failed: {why}")))
}

fn validate_param_kind(kind: &ParamKind, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let api_version = kind.api_version.as_deref().unwrap_or_default();
    let at = path.child("apiVersion");
    if api_version.is_empty() {
        errs.push(FieldError::required(&at, ""));
    } else {
        let parsed = match api_version.matches('/').count() {
            0 => Some(("", api_version)),
            1 => api_version.split_once('/'),
            _ => None,
        };
        match parsed {
            None => errs.push(FieldError::invalid(
                &at,
                api_version,
                &format!("unexpected GroupVersion string: {api_version}"),
            )),
            Some((group, version)) => {
                let problems = is_dns1123_subdomain(group);
                if !group.is_empty() && !problems.is_empty() {
                    errs.push(FieldError::invalid(&at, group, &problems.join(",")));
                }
                if version.is_empty() {
                    errs.push(FieldError::invalid(
                        &at,
                        api_version,
                        "version must be specified",
                    ));
                } else {
                    let problems = is_dns1035_label(version);
                    if !problems.is_empty() {
                        errs.push(FieldError::invalid(&at, version, &problems.join(",")));
                    }
                }
            }
        }
    }
    let kind_name = kind.kind.as_deref().unwrap_or_default();
    if kind_name.is_empty() {
        errs.push(FieldError::required(&path.child("kind"), ""));
    } else {
        let problems = is_dns1035_label(&kind_name.to_lowercase());
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("kind"),
                kind_name,
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
    errs
}

/// The resources a policy or binding matches (its selectors and match policy defaulted).
fn validate_match_resources(resources: &MatchResources, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match resources.match_policy.as_deref() {
        None => errs.push(FieldError::required(&path.child("matchPolicy"), "")),
        Some(policy) if !MATCH_POLICIES.contains(&policy) => errs.push(FieldError::not_supported(
            &path.child("matchPolicy"),
            policy,
            MATCH_POLICIES,
        )),
        Some(_) => {}
    }
    for (field, selector) in [
        ("namespaceSelector", &resources.namespace_selector),
        ("objectSelector", &resources.object_selector),
    ] {
        match selector {
            None => errs.push(FieldError::required(&path.child(field), "")),
            Some(selector) => errs.extend(validate_label_selector(
                Some(selector),
                false,
                &path.child(field),
            )),
        }
    }
    for (field, rules) in [
        ("resourceRules", &resources.resource_rules),
        ("excludeResourceRules", &resources.exclude_resource_rules),
    ] {
        for (i, rule) in rules.iter().flatten().enumerate() {
            errs.extend(validate_named_rule(rule, &path.child(field).index(i)));
        }
    }
    errs
}

fn validate_named_rule(rule: &NamedRuleWithOperations, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, name) in rule.resource_names.iter().flatten().enumerate() {
        let at = path.child("resourceNames").index(i);
        for problem in is_valid_path_segment_name(name) {
            errs.push(FieldError::invalid(&at, name.as_str(), &problem));
        }
        if !names.insert(name.as_str()) {
            errs.push(FieldError::duplicate(&at, name.as_str()));
        }
    }
    errs.extend(validate_rule(&unnamed(rule), path));
    errs
}

/// A named rule without its names: the rule a webhook would have.
pub fn unnamed(rule: &NamedRuleWithOperations) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        operations: rule.operations.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.clone(),
    }
}

/// Whether `name` is a CEL identifier (and not a reserved word).
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !crate::cel::RESERVED.contains(&name)
}

fn validate_variable(variable: &Variable, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if variable.name.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name is not specified",
        ));
    } else if !is_cel_identifier(&variable.name) {
        errs.push(FieldError::invalid(
            &path.child("name"),
            variable.name.as_str(),
            "name is not a valid CEL identifier",
        ));
    }
    if variable.expression.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    } else {
        errs.extend(compile(&variable.expression, &path.child("expression")));
    }
    errs
}

fn validate_validation(validation: &Validation, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if validation.expression.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    } else {
        errs.extend(compile(&validation.expression, &path.child("expression")));
    }
    let message_expression = validation.message_expression.as_deref().unwrap_or_default();
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::invalid(
            &path.child("messageExpression"),
            message_expression,
            "must be non-empty if specified",
        ));
    } else if !message_expression.is_empty() {
        errs.extend(compile(
            message_expression,
            &path.child("messageExpression"),
        ));
    }
    let message = validation.message.as_deref().unwrap_or_default();
    if !message.is_empty() && message.trim().is_empty() {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must be non-empty if specified",
        ));
    } else if message.trim().contains(['\n', '\r']) {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must not contain line breaks",
        ));
    }
    if let Some(reason) = validation
        .reason
        .as_deref()
        .filter(|r| !REASONS.contains(r))
    {
        errs.push(FieldError::not_supported(
            &path.child("reason"),
            reason,
            REASONS,
        ));
    }
    errs
}

fn validate_audit_annotation(
    meta: &ObjectMeta,
    annotation: &AuditAnnotation,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = path.child("key");
    match meta.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => {
            let qualified = format!("{name}/{}", annotation.key);
            for problem in is_qualified_name(&qualified) {
                errs.push(FieldError::invalid(&at, qualified.as_str(), &problem));
            }
        }
        None => errs.push(FieldError::invalid(
            &at,
            annotation.key.as_str(),
            "requires metadata.name be non-empty",
        )),
    }
    let value = annotation.value_expression.trim();
    let at = path.child("valueExpression");
    if value.is_empty() {
        errs.push(FieldError::required(
            &at,
            "valueExpression is not specified",
        ));
    } else if value.len() > MAX_VALUE_EXPRESSION_BYTES {
        errs.push(FieldError::required(
            &at,
            &format!("must not exceed {MAX_VALUE_EXPRESSION_BYTES} bytes in length"),
        ));
    } else {
        errs.extend(compile(value, &at));
    }
    errs
}

/// A ValidatingAdmissionPolicyBinding to be created.
pub fn validate_binding(binding: &ValidatingAdmissionPolicyBinding) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &binding.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let spec = binding.spec.clone().unwrap_or_default();
    let path = Path::new("spec");
    match spec.policy_name.as_deref().unwrap_or_default() {
        "" => errs.push(FieldError::required(&path.child("policyName"), "")),
        name => {
            for problem in is_dns1123_subdomain(name) {
                errs.push(FieldError::invalid(
                    &path.child("policyName"),
                    name,
                    &problem,
                ));
            }
        }
    }
    if let Some(reference) = &spec.param_ref {
        errs.extend(validate_param_ref(reference, &path.child("paramRef")));
    }
    if let Some(resources) = &spec.match_resources {
        // Upstream's path, misspelt as upstream spells it.
        errs.extend(validate_match_resources(
            resources,
            &path.child("matchResouces"),
        ));
    }
    errs.extend(validate_actions(
        spec.validation_actions.as_deref().unwrap_or_default(),
        &path.child("validationActions"),
    ));
    errs
}

/// A change of a ValidatingAdmissionPolicyBinding: the create rules.
pub fn validate_binding_update(
    new: &ValidatingAdmissionPolicyBinding,
    old: &ValidatingAdmissionPolicyBinding,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let created = validate_binding(new);
    // The metadata rules of a create (a name) hold already: keep the spec's.
    errs.extend(
        created
            .into_iter()
            .filter(|e| !e.field.starts_with("metadata")),
    );
    errs
}

fn validate_param_ref(reference: &ParamRef, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = reference.name.as_deref().unwrap_or_default();
    let exclusive = "name and selector are mutually exclusive";
    if !name.is_empty() {
        for problem in is_valid_path_segment_name(name) {
            errs.push(FieldError::invalid(&path.child("name"), name, &problem));
        }
        if reference.selector.is_some() {
            errs.push(FieldError::forbidden(&path.child("name"), exclusive));
        }
    }
    if let Some(selector) = &reference.selector {
        errs.extend(validate_label_selector(
            Some(selector),
            false,
            &path.child("selector"),
        ));
        if !name.is_empty() {
            errs.push(FieldError::forbidden(&path.child("selector"), exclusive));
        }
    }
    if name.is_empty() && reference.selector.is_none() {
        errs.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    let at = path.child("parameterNotFoundAction");
    match reference
        .parameter_not_found_action
        .as_deref()
        .unwrap_or_default()
    {
        "" => errs.push(FieldError::required(&at, "")),
        action if !NOT_FOUND_ACTIONS.contains(&action) => {
            errs.push(FieldError::not_supported(&at, action, NOT_FOUND_ACTIONS))
        }
        _ => {}
    }
    errs
}

fn validate_actions(actions: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, action) in actions.iter().enumerate() {
        if !ACTIONS.contains(&action.as_str()) {
            errs.push(FieldError::not_supported(
                &path.index(i),
                action.as_str(),
                ACTIONS,
            ));
        }
        if !seen.insert(action.as_str()) {
            errs.push(FieldError::duplicate(&path.index(i), action.as_str()));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(super::gofmt::go_typed_slice(
                "admissionregistration.ValidationAction",
                actions,
            )),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one validation action is required",
        ));
    }
    errs
}

#[cfg(test)]
mod tests;
