//! `admissionregistration.k8s.io/v1` webhook configurations, as upstream 1.33 validates them:
//! fully qualified and unique webhook names, rules (operations, groups, versions, resources
//! with their wildcard forms, scope), failure and match policies, side effects, timeouts,
//! selectors, the client configuration (a URL or a Service) and the AdmissionReview versions.
//!
//! An update is held to the create rules only where the stored configuration already met them
//! (upstream's ratcheting): a configuration stored with side effects `Some` may still be
//! updated, for instance.
//!
//! `matchConditions` are checked for their shape (names, at most 64) and their CEL expressions
//! compiled ([`crate::cel::Expression`]).

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::field::{BadValue, FieldError, Path};
use crate::names::NameValidator;
use crate::names::{is_dns1035_label, is_dns1123_subdomain, is_qualified_name, is_valid_port_num};
use crate::validation::meta::{
    go_string_slice, validate_label_selector, validate_object_meta, validate_object_meta_update,
};

/// The AdmissionReview versions the server speaks.
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
pub(super) const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
pub(super) const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun", "Some", "Unknown"];
const NO_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
/// Upstream's limit on a webhook's match conditions.
const MAX_MATCH_CONDITIONS: usize = 64;

/// What the rules are relaxed to on update, from what the stored configuration already had.
#[derive(Clone, Copy)]
struct Options {
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
}

const CREATE: Options = Options {
    require_no_side_effects: true,
    require_recognized_review_version: true,
    require_unique_names: true,
};

/// The fields mutating and validating webhooks share, seen alike.
struct Hook<'a> {
    name: &'a str,
    rules: &'a [RuleWithOperations],
    failure_policy: Option<&'a str>,
    match_policy: Option<&'a str>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    reinvocation_policy: Option<&'a str>,
    client_config: &'a WebhookClientConfig,
    review_versions: &'a [String],
    match_conditions: &'a [MatchCondition],
}

impl<'a> From<&'a ValidatingWebhook> for Hook<'a> {
    fn from(hook: &'a ValidatingWebhook) -> Self {
        Hook {
            name: &hook.name,
            rules: hook.rules.as_deref().unwrap_or_default(),
            failure_policy: hook.failure_policy.as_deref(),
            match_policy: hook.match_policy.as_deref(),
            side_effects: &hook.side_effects,
            timeout_seconds: hook.timeout_seconds,
            namespace_selector: hook.namespace_selector.as_ref(),
            object_selector: hook.object_selector.as_ref(),
            reinvocation_policy: None,
            client_config: &hook.client_config,
            review_versions: &hook.admission_review_versions,
            match_conditions: hook.match_conditions.as_deref().unwrap_or_default(),
        }
    }
}

impl<'a> From<&'a MutatingWebhook> for Hook<'a> {
    fn from(hook: &'a MutatingWebhook) -> Self {
        Hook {
            name: &hook.name,
            rules: hook.rules.as_deref().unwrap_or_default(),
            failure_policy: hook.failure_policy.as_deref(),
            match_policy: hook.match_policy.as_deref(),
            side_effects: &hook.side_effects,
            timeout_seconds: hook.timeout_seconds,
            namespace_selector: hook.namespace_selector.as_ref(),
            object_selector: hook.object_selector.as_ref(),
            reinvocation_policy: hook.reinvocation_policy.as_deref(),
            client_config: &hook.client_config,
            review_versions: &hook.admission_review_versions,
            match_conditions: hook.match_conditions.as_deref().unwrap_or_default(),
        }
    }
}

/// A configuration to be created: its metadata and webhooks.
fn validate_new(meta: &ObjectMeta, hooks: &[Hook]) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        meta,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    errs.extend(validate_hooks(hooks, CREATE));
    errs
}

/// A change of a configuration, held to what the stored one already met.
fn validate_changed(
    (new_meta, new): (&ObjectMeta, &[Hook]),
    (old_meta, old): (&ObjectMeta, &[Hook]),
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(new_meta, old_meta, &Path::new("metadata"));
    errs.extend(validate_hooks(new, ratchet(old)));
    errs
}

/// A configuration's webhooks, seen alike.
fn hooks<'a, W>(webhooks: Option<&'a Vec<W>>) -> Vec<Hook<'a>>
where
    Hook<'a>: From<&'a W>,
{
    webhooks.into_iter().flatten().map(Hook::from).collect()
}

/// A ValidatingWebhookConfiguration to be created.
pub fn validate_validating_configuration(
    config: &ValidatingWebhookConfiguration,
) -> Vec<FieldError> {
    validate_new(&config.metadata, &hooks(config.webhooks.as_ref()))
}

/// A change of a ValidatingWebhookConfiguration.
pub fn validate_validating_configuration_update(
    new: &ValidatingWebhookConfiguration,
    old: &ValidatingWebhookConfiguration,
) -> Vec<FieldError> {
    validate_changed(
        (&new.metadata, &hooks(new.webhooks.as_ref())),
        (&old.metadata, &hooks(old.webhooks.as_ref())),
    )
}

/// A MutatingWebhookConfiguration to be created.
pub fn validate_mutating_configuration(config: &MutatingWebhookConfiguration) -> Vec<FieldError> {
    validate_new(&config.metadata, &hooks(config.webhooks.as_ref()))
}

/// A change of a MutatingWebhookConfiguration.
pub fn validate_mutating_configuration_update(
    new: &MutatingWebhookConfiguration,
    old: &MutatingWebhookConfiguration,
) -> Vec<FieldError> {
    validate_changed(
        (&new.metadata, &hooks(new.webhooks.as_ref())),
        (&old.metadata, &hooks(old.webhooks.as_ref())),
    )
}

/// The rules an update is held to: each create rule only where every stored webhook met it.
fn ratchet(stored: &[Hook]) -> Options {
    let mut names = BTreeSet::new();
    Options {
        require_no_side_effects: stored
            .iter()
            .all(|h| NO_SIDE_EFFECTS.contains(&h.side_effects)),
        require_recognized_review_version: stored.iter().all(|h| {
            h.review_versions.is_empty()
                || h.review_versions
                    .iter()
                    .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
        }),
        require_unique_names: stored.iter().all(|h| names.insert(h.name)),
    }
}

fn validate_hooks(hooks: &[Hook], options: Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let path = Path::new("webhooks").index(i);
        errs.extend(validate_hook(hook, options, &path));
        errs.extend(validate_review_versions(
            hook.review_versions,
            options.require_recognized_review_version,
            &path.child("admissionReviewVersions"),
        ));
        if options.require_unique_names && !hook.name.is_empty() && !names.insert(hook.name) {
            errs.push(FieldError::duplicate(&path.child("name"), hook.name));
        }
    }
    errs
}

/// Upstream's `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
fn validate_fully_qualified_name(name: &str, path: &Path) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let problems = is_dns1123_subdomain(name);
    if !problems.is_empty() {
        return vec![FieldError::invalid(path, name, &problems.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            path,
            name,
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

fn validate_hook(hook: &Hook, options: Options, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_fully_qualified_name(hook.name, &path.child("name"));
    for (i, rule) in hook.rules.iter().enumerate() {
        errs.extend(validate_rule(rule, &path.child("rules").index(i)));
    }
    let one_of =
        |errs: &mut Vec<FieldError>, field: &str, value: Option<&str>, allowed: &[&str]| {
            if let Some(value) = value.filter(|v| !allowed.contains(v)) {
                errs.push(FieldError::not_supported(
                    &path.child(field),
                    value,
                    allowed,
                ));
            }
        };
    one_of(
        &mut errs,
        "failurePolicy",
        hook.failure_policy,
        FAILURE_POLICIES,
    );
    one_of(&mut errs, "matchPolicy", hook.match_policy, MATCH_POLICIES);
    let side_effects = if options.require_no_side_effects {
        NO_SIDE_EFFECTS
    } else {
        SIDE_EFFECTS
    };
    if hook.side_effects.is_empty() {
        errs.push(FieldError::required(
            &path.child("sideEffects"),
            &format!("must specify one of {}", side_effects.join(", ")),
        ));
    } else {
        one_of(
            &mut errs,
            "sideEffects",
            Some(hook.side_effects),
            side_effects,
        );
    }
    if let Some(timeout) = hook.timeout_seconds.filter(|t| !(1..=30).contains(t)) {
        errs.push(FieldError::invalid(
            &path.child("timeoutSeconds"),
            timeout,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    errs.extend(validate_label_selector(
        hook.namespace_selector,
        false,
        &path.child("namespaceSelector"),
    ));
    errs.extend(validate_label_selector(
        hook.object_selector,
        false,
        &path.child("objectSelector"),
    ));
    one_of(
        &mut errs,
        "reinvocationPolicy",
        hook.reinvocation_policy,
        REINVOCATION_POLICIES,
    );
    errs.extend(validate_client_config(
        hook.client_config,
        &path.child("clientConfig"),
    ));
    errs.extend(validate_match_conditions(
        hook.match_conditions,
        &path.child("matchConditions"),
    ));
    errs
}

fn validate_client_config(config: &WebhookClientConfig, path: &Path) -> Vec<FieldError> {
    match (&config.url, &config.service) {
        (Some(url), None) => validate_url(url, &path.child("url")),
        (None, Some(service)) => {
            let path = path.child("service");
            let mut errs = Vec::new();
            if service.name.is_empty() {
                errs.push(FieldError::required(
                    &path.child("name"),
                    "service name is required",
                ));
            }
            if service.namespace.is_empty() {
                errs.push(FieldError::required(
                    &path.child("namespace"),
                    "service namespace is required",
                ));
            }
            let port = service.port.unwrap_or(443);
            let problems = is_valid_port_num(port.into());
            if !problems.is_empty() {
                errs.push(FieldError::invalid(
                    &path.child("port"),
                    port,
                    &format!("port is not valid: {}", problems.join(", ")),
                ));
            }
            if let Some(url_path) = &service.path {
                errs.extend(validate_service_path(url_path, &path.child("path")));
            }
            errs
        }
        _ => vec![FieldError::required(
            path,
            "exactly one of url or service is required",
        )],
    }
}

/// Upstream's `ValidateWebhookURL` with HTTPS required.
fn validate_url(url: &str, path: &Path) -> Vec<FieldError> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut errs = Vec::new();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            scheme,
            &format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = if scheme.is_empty() {
        ""
    } else {
        rest.split('/').next().unwrap_or_default()
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    if host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            host,
            &format!("host must be provided{FORM}"),
        ));
    }
    if let Some(user) = user {
        errs.push(FieldError::invalid(
            path,
            user,
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            query,
            "query parameters are not permitted in the URL",
        ));
    }
    errs
}

/// Upstream's check of a service path: `/`-led segments, each a DNS subdomain.
fn validate_service_path(url_path: &str, path: &Path) -> Vec<FieldError> {
    if url_path.is_empty() || url_path == "/" {
        return Vec::new();
    }
    if url_path == "//" {
        return vec![FieldError::invalid(
            path,
            url_path,
            "segment[0] may not be empty",
        )];
    }
    let mut errs = Vec::new();
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(path, url_path, "must start with a '/'"));
    }
    let trimmed = url_path.get(1..).unwrap_or_default();
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    for (i, step) in trimmed.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                path,
                url_path,
                &format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for problem in is_dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                path,
                url_path,
                &format!("segment[{i}]: {problem}"),
            ));
        }
    }
    errs
}

fn validate_review_versions(
    versions: &[String],
    require_recognized: bool,
    path: &Path,
) -> Vec<FieldError> {
    if versions.is_empty() {
        return vec![FieldError::required(
            path,
            &format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        )];
    }
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, version) in versions.iter().enumerate() {
        if !seen.insert(version.as_str()) {
            errs.push(FieldError::invalid(
                &path.index(i),
                version.as_str(),
                "duplicate version",
            ));
            continue;
        }
        for problem in is_dns1035_label(version) {
            errs.push(FieldError::invalid(
                &path.index(i),
                version.as_str(),
                &problem,
            ));
        }
    }
    if require_recognized
        && !versions
            .iter()
            .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
    {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_string_slice(versions)),
            &format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
    errs
}

pub(super) fn validate_match_conditions(
    conditions: &[MatchCondition],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::too_many(
            path,
            conditions.len(),
            MAX_MATCH_CONDITIONS,
        ));
    }
    let mut names = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let path = path.index(i);
        if condition.name.is_empty() {
            errs.push(FieldError::required(&path.child("name"), ""));
        } else {
            for problem in is_qualified_name(&condition.name) {
                errs.push(FieldError::invalid(
                    &path.child("name"),
                    condition.name.as_str(),
                    &problem,
                ));
            }
            if !names.insert(condition.name.as_str()) {
                errs.push(FieldError::duplicate(
                    &path.child("name"),
                    condition.name.as_str(),
                ));
            }
        }
        if condition.expression.is_empty() {
            errs.push(FieldError::required(&path.child("expression"), ""));
        } else if let Err(why) = crate::cel::Expression::compile(&condition.expression) {
            errs.push(FieldError::invalid(
                &path.child("expression"),
                condition.expression.as_str(),
                &format!("compilation failed: {why}"),
            ));
        }
    }
    errs
}

pub(super) fn validate_rule(rule: &RuleWithOperations, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let operations = rule.operations.as_deref().unwrap_or_default();
    if operations.is_empty() {
        errs.push(FieldError::required(&path.child("operations"), ""));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        errs.push(FieldError::invalid(
            &path.child("operations"),
            BadValue::Other(crate::validation::gofmt::go_typed_slice(
                "admissionregistration.OperationType",
                operations,
            )),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, operation) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&operation.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("operations").index(i),
                operation.as_str(),
                OPERATIONS,
            ));
        }
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    if groups.is_empty() {
        errs.push(FieldError::required(&path.child("apiGroups"), ""));
    }
    if groups.len() > 1 && groups.iter().any(|g| g == "*") {
        errs.push(FieldError::invalid(
            &path.child("apiGroups"),
            BadValue::Other(go_string_slice(groups)),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = rule.api_versions.as_deref().unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::required(&path.child("apiVersions"), ""));
    }
    if versions.len() > 1 && versions.iter().any(|v| v == "*") {
        errs.push(FieldError::invalid(
            &path.child("apiVersions"),
            BadValue::Other(go_string_slice(versions)),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, version) in versions.iter().enumerate() {
        if version.is_empty() {
            errs.push(FieldError::required(
                &path.child("apiVersions").index(i),
                "",
            ));
        }
    }
    errs.extend(validate_resources(
        rule.resources.as_deref().unwrap_or_default(),
        &path.child("resources"),
    ));
    if let Some(scope) = rule.scope.as_deref().filter(|s| !SCOPES.contains(s)) {
        errs.push(FieldError::not_supported(
            &path.child("scope"),
            scope,
            SCOPES,
        ));
    }
    errs
}

/// Resources with their wildcard forms: `*` (every resource), `*/*` (and every subresource),
/// `r/*` (every subresource of `r`), `*/s` (subresource `s` of every resource).
fn validate_resources(resources: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut with_any_subresource = BTreeSet::new();
    let mut of_any_resource = BTreeSet::new();
    let (mut double_wildcard, mut single_wildcard, mut plain) = (false, false, false);
    for (i, entry) in resources.iter().enumerate() {
        if entry.is_empty() {
            errs.push(FieldError::required(&path.index(i), ""));
            continue;
        }
        double_wildcard |= entry == "*/*";
        single_wildcard |= entry == "*";
        let Some((resource, subresource)) = entry.split_once('/') else {
            plain = entry != "*";
            continue;
        };
        if with_any_subresource.contains(resource) {
            errs.push(FieldError::invalid(
                &path.index(i),
                entry.as_str(),
                &format!("if '{resource}/*' is present, must not specify {entry}"),
            ));
        }
        if of_any_resource.contains(subresource) {
            errs.push(FieldError::invalid(
                &path.index(i),
                entry.as_str(),
                &format!("if '*/{subresource}' is present, must not specify {entry}"),
            ));
        }
        if subresource == "*" {
            with_any_subresource.insert(resource);
        }
        if resource == "*" {
            of_any_resource.insert(subresource);
        }
    }
    if resources.len() > 1 && double_wildcard {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_string_slice(resources)),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && plain {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_string_slice(resources)),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hook: serde_json::Value) -> ValidatingWebhookConfiguration {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "webhooks": [hook],
        }))
        .unwrap()
    }

    fn errors(hook: serde_json::Value) -> Vec<String> {
        let mut config = config(hook);
        crate::defaults::misc::default_validating_webhook_configuration(&mut config);
        validate_validating_configuration(&config)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn good() -> serde_json::Value {
        serde_json::json!({
            "name": "deny.example.com",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/status"]}],
        })
    }

    #[test]
    fn a_complete_webhook_is_accepted() {
        assert_eq!(errors(good()), Vec::<String>::new());
    }

    #[test]
    fn names_side_effects_and_client_configs_get_upstreams_messages() {
        let mut hook = good();
        hook["name"] = "deny".into();
        hook["sideEffects"] = "Some".into();
        hook["timeoutSeconds"] = 31.into();
        hook["clientConfig"] = serde_json::json!({"url": "http://u@host/p?q=1"});
        assert_eq!(
            errors(hook),
            [
                "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "webhooks[0].clientConfig.url: Invalid value: \"u\": user information is not permitted in the URL",
                "webhooks[0].clientConfig.url: Invalid value: \"q=1\": query parameters are not permitted in the URL",
            ]
        );
        let mut hook = good();
        hook["clientConfig"] = serde_json::json!({});
        hook["admissionReviewVersions"] = serde_json::json!(["v2"]);
        assert_eq!(
            errors(hook),
            [
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
            ]
        );
    }

    #[test]
    fn rules_refuse_mixed_wildcards() {
        let mut hook = good();
        hook["rules"] = serde_json::json!([{
            "operations": ["*", "CREATE"], "apiGroups": ["*"], "apiVersions": ["*"],
            "resources": ["*", "pods", "pods/*", "pods/status"], "scope": "Everywhere"
        }]);
        assert_eq!(
            errors(hook),
            [
                "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
                "webhooks[0].rules[0].resources[3]: Invalid value: \"pods/status\": if 'pods/*' is present, must not specify pods/status",
                "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\", \"pods/*\", \"pods/status\"}: if '*' is present, must not specify other resources without subresources",
                "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
            ]
        );
    }

    #[test]
    fn updates_keep_what_the_stored_configuration_already_had() {
        let mut stored = config({
            let mut hook = good();
            hook["sideEffects"] = "Unknown".into();
            hook
        });
        stored.metadata.resource_version = Some("1".into());
        let mut changed = stored.clone();
        changed.webhooks.as_mut().unwrap()[0].timeout_seconds = Some(5);
        assert!(validate_validating_configuration_update(&changed, &stored).is_empty());
        assert_eq!(validate_validating_configuration(&changed).len(), 1);
    }
}
