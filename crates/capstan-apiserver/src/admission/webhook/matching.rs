//! Which webhooks a request goes to, as upstream's `rules.Matcher`, namespace matcher and
//! object matcher decide, and through which resource: under `matchPolicy: Equivalent` a
//! request matches a rule that names an equivalent resource (another version or group serving
//! the same objects), and the webhook or policy then sees the request through that resource,
//! its objects converted to that version ([`matched_through`], [`converted`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_api::catalog::Resource;
use capstan_api::selector::LabelSelector;
use serde_json::Value;

use super::super::{Attributes, Operation};
use super::call::Hook;
use crate::registry::{Registries, Registry};
use crate::status::ApiError;

/// One rule of a webhook: what operations on which resources it is called for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// Upstream's name of an operation in rules and reviews.
pub(crate) fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Whether writes of `resource` are never sent to webhooks: the admission configurations
/// themselves, so that no webhook can lock them.
pub(crate) fn exempt(resource: &Resource) -> bool {
    resource.group == "admissionregistration.k8s.io"
        && matches!(
            resource.plural,
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

fn any_or(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

/// Whether a namespaced request: namespaces themselves count as cluster-scoped.
fn is_namespaces(resource: &Resource) -> bool {
    resource.group.is_empty() && resource.plural == "namespaces"
}

impl Rule {
    /// Whether this rule covers the request.
    pub(crate) fn matches(&self, attrs: &Attributes<'_>) -> bool {
        let resource = attrs.resource;
        let scope = match self.scope.as_str() {
            "Namespaced" => !is_namespaces(resource) && !attrs.namespace.is_empty(),
            "Cluster" => is_namespaces(resource) || attrs.namespace.is_empty(),
            _ => true,
        };
        scope
            && any_or(&self.operations, operation_name(attrs.operation))
            && any_or(&self.groups, resource.group)
            && any_or(&self.versions, resource.version)
            && self.resources.iter().any(|entry| {
                let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
                (res == "*" || res == resource.plural) && (sub == "*" || sub == attrs.subresource)
            })
    }
}

/// The resource a request matches `rules` through, as upstream's rule matching with its match
/// policy decides: `Some(None)` when a rule covers the request's own resource (`own` judges
/// a rule); else, with `equivalent`, `Some(Some(registry))` for the first resource equivalent
/// to it that a rule covers (`fuzzy` judges a rule then), rules in order, each tried on every
/// equivalent ([`Registries::equivalents`]); `None` when nothing matches.
pub(crate) fn matched_through<R>(
    rules: &[R],
    own: impl Fn(&R, &Attributes<'_>) -> bool,
    fuzzy: impl Fn(&R, &Attributes<'_>) -> bool,
    equivalent: bool,
    attrs: &Attributes<'_>,
    table: &Registries,
) -> Option<Option<Arc<Registry>>> {
    if rules.iter().any(|rule| own(rule, attrs)) {
        return Some(None);
    }
    if !equivalent {
        return None;
    }
    let equivalents = table.equivalents(attrs.resource, attrs.subresource);
    for rule in rules {
        for registry in &equivalents {
            if fuzzy(rule, &attrs.through(registry.resource)) {
                return Some(Some(registry.clone()));
            }
        }
    }
    None
}

/// The request's objects as a webhook or policy that matched it through `equivalent` sees
/// them: converted from the request's version to that one's (a subresource's own kind, a
/// `Scale` or options, is the same in every version and stays as it is).
pub(crate) async fn converted(
    table: &Registries,
    attrs: &Attributes<'_>,
    equivalent: &Registry,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(Option<Value>, Option<Value>), ApiError> {
    let requested = attrs.requested();
    let own = table.get(requested.group, requested.version, requested.plural);
    let convert = |value: Option<&Value>| {
        let own = own.clone();
        let value = value.cloned();
        async move {
            match (value, own) {
                (Some(value), Some(own)) if value["kind"] == requested.kind => {
                    own.convert_to(&value, equivalent).await.map(Some)
                }
                (value, _) => Ok(value),
            }
        }
    };
    Ok((convert(object).await?, convert(old).await?))
}

/// A patched object a mutating webhook that matched the request through `equivalent` gave
/// back, in the request's own version again.
pub(crate) async fn converted_back(
    table: &Registries,
    attrs: &Attributes<'_>,
    equivalent: &Registry,
    object: Value,
) -> Result<Value, ApiError> {
    let requested = attrs.requested();
    match table.get(requested.group, requested.version, requested.plural) {
        Some(own) if object["kind"] == equivalent.resource.kind => {
            equivalent.convert_to(&object, &own).await
        }
        _ => Ok(object),
    }
}

/// The labels of an object (none when it has none).
pub(crate) fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// What matching reads besides the request: the namespaces.
pub(crate) struct Context<'a> {
    table: &'a Arc<Registries>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(table: &'a Arc<Registries>) -> Self {
        Context { table }
    }

    /// The table of registries.
    pub(crate) fn table(&self) -> &Arc<Registries> {
        self.table
    }

    /// Whether `hook`'s rules and selectors take this request, and through which resource
    /// ([`matched_through`]); its match conditions are judged by the caller
    /// ([`conditions_match`]), on the objects as the webhook is to see them.
    pub(crate) async fn matches(
        &self,
        hook: &Hook,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Option<Option<Arc<Registry>>>, ApiError> {
        let Some(through) = matched_through(
            &hook.rules,
            Rule::matches,
            Rule::matches,
            hook.equivalent,
            attrs,
            self.table,
        ) else {
            return Ok(None);
        };
        let selected = self
            .selected(
                &hook.namespace_selector,
                &hook.object_selector,
                attrs,
                object,
                old,
            )
            .await?;
        Ok(selected.then_some(through))
    }

    /// Whether the request's object (new or old) and its namespace are selected (upstream's
    /// object and namespace matchers, which admission policies share).
    pub(crate) async fn selected(
        &self,
        namespace_selector: &LabelSelector,
        object_selector: &LabelSelector,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        Ok(object_matches(object_selector, object, old)
            && self
                .namespace_matches(namespace_selector, attrs, object)
                .await?)
    }

    /// Upstream's `MatchNamespaceSelector`: cluster-scoped objects other than namespaces
    /// always match; a namespace is judged by its own labels, anything else by its
    /// namespace's (a namespace that does not exist is a 404).
    async fn namespace_matches(
        &self,
        selector: &LabelSelector,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
    ) -> Result<bool, ApiError> {
        let namespaces = is_namespaces(attrs.resource);
        if (attrs.namespace.is_empty() && !namespaces) || selector.is_empty() {
            return Ok(true);
        }
        if namespaces
            && attrs.subresource.is_empty()
            && matches!(attrs.operation, Operation::Create | Operation::Update)
            && let Some(object) = object
        {
            return Ok(selector.matches(&labels(object)));
        }
        let name = if namespaces && attrs.namespace.is_empty() {
            attrs.name
        } else {
            attrs.namespace
        };
        let Some(registry) = self.table.core("namespaces") else {
            return Ok(true);
        };
        let namespace = registry.get(None, name).await?;
        Ok(selector.matches(&labels(&namespace)))
    }
}

/// Upstream's match conditions: every one true calls the webhook, any false skips it (even
/// when another fails to evaluate); an evaluation error skips it under `Ignore` and refuses
/// the request under `Fail`. They read `object`, `oldObject`, `request` and `authorizer`.
pub(crate) async fn conditions_match(
    hook: &Hook,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, ApiError> {
    if hook.conditions.is_empty() {
        return Ok(true);
    }
    let request = super::call::review("v1", "", attrs, None, None)["request"].take();
    let mut activation = capstan_api::cel::Activation::default();
    activation.json("object", object.unwrap_or(&Value::Null));
    activation.json("oldObject", old.unwrap_or(&Value::Null));
    activation.json("request", &request);
    let checks = capstan_api::cel::authz::Checks::new();
    activation.set(
        "authorizer",
        checks.variable(super::super::cel_authz::request_resource(attrs)),
    );
    let evaluate = || {
        let mut failure = None;
        for (name, expression) in &hook.conditions {
            let outcome = expression
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|e| e.check(&activation));
            match outcome {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(why) => {
                    failure.get_or_insert(format!(
                        "failed to evaluate match condition {}: {why}",
                        capstan_api::field::go_quote(name)
                    ));
                }
            }
        }
        failure.map_or(Ok(true), Err)
    };
    match super::super::cel_authz::settle(&checks, attrs, evaluate).await {
        Ok(matched) => Ok(matched),
        Err(_) if hook.ignore_failures => Ok(false),
        Err(why) => Err(capstan_api::StatusError::forbidden(
            capstan_api::GroupResource::new(attrs.resource.group, attrs.resource.plural),
            attrs.name,
            &why,
        )
        .into()),
    }
}

/// Upstream's `MatchObjectSelector`: the new or the old object's labels match.
fn object_matches(selector: &LabelSelector, object: Option<&Value>, old: Option<&Value>) -> bool {
    selector.is_empty()
        || object.is_some_and(|o| selector.matches(&labels(o)))
        || old.is_some_and(|o| selector.matches(&labels(o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(operations: &[&str], resources: &[&str], scope: &str) -> Rule {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Rule {
            operations: owned(operations),
            groups: owned(&["", "apps"]),
            versions: owned(&["v1"]),
            resources: owned(resources),
            scope: scope.to_owned(),
        }
    }

    fn attrs<'a>(plural: &str, subresource: &'a str, namespace: &'a str) -> Attributes<'a> {
        let group = if plural == "deployments" { "apps" } else { "" };
        Attributes {
            resource: capstan_api::catalog::lookup(group, "v1", plural).unwrap(),
            request_resource: None,
            subresource,
            operation: Operation::Create,
            namespace,
            name: "x",
            user: None,
            dry_run: false,
            warnings: None,
            audit: None,
            authorizer: None,
        }
    }

    #[test]
    fn resources_match_with_upstreams_wildcards() {
        let pods = attrs("pods", "", "ns");
        let status = attrs("pods", "status", "ns");
        assert!(rule(&["CREATE"], &["pods"], "*").matches(&pods));
        assert!(!rule(&["CREATE"], &["pods"], "*").matches(&status));
        assert!(!rule(&["UPDATE"], &["pods"], "*").matches(&pods));
        assert!(rule(&["*"], &["*"], "*").matches(&pods));
        assert!(!rule(&["*"], &["*"], "*").matches(&status));
        assert!(rule(&["*"], &["*/*"], "*").matches(&status));
        assert!(rule(&["*"], &["pods/*"], "*").matches(&status));
        assert!(rule(&["*"], &["*/status"], "*").matches(&status));
        assert!(rule(&["*"], &["deployments"], "*").matches(&attrs("deployments", "", "ns")));
    }

    #[test]
    fn scopes_count_namespaces_as_cluster_scoped() {
        let ns = attrs("namespaces", "", "");
        let nodes = attrs("nodes", "", "");
        let pods = attrs("pods", "", "ns");
        let namespaced = rule(&["*"], &["*"], "Namespaced");
        let cluster = rule(&["*"], &["*"], "Cluster");
        assert!(!namespaced.matches(&ns) && cluster.matches(&ns));
        assert!(!namespaced.matches(&nodes) && cluster.matches(&nodes));
        assert!(namespaced.matches(&pods) && !cluster.matches(&pods));
    }

    #[test]
    fn object_selectors_match_the_new_or_the_old_object() {
        let selector = LabelSelector::parse("app=web").unwrap();
        let web = serde_json::json!({"metadata": {"labels": {"app": "web"}}});
        let other = serde_json::json!({"metadata": {"labels": {"app": "db"}}});
        assert!(object_matches(&selector, Some(&web), None));
        assert!(object_matches(&selector, Some(&other), Some(&web)));
        assert!(!object_matches(&selector, Some(&other), None));
        assert!(!object_matches(&selector, None, None));
        assert!(object_matches(&LabelSelector::everything(), None, None));
    }

    #[test]
    fn the_admission_configurations_are_exempt() {
        let configs = capstan_api::catalog::lookup(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
        )
        .unwrap();
        assert!(exempt(configs));
        assert!(!exempt(
            capstan_api::catalog::lookup("", "v1", "pods").unwrap()
        ));
    }
}
