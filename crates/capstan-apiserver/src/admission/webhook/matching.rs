//! Which webhooks a request goes to, as upstream's `rules.Matcher`, namespace matcher and
//! object matcher decide.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_api::catalog::Resource;
use capstan_api::selector::LabelSelector;
use serde_json::Value;

use super::super::{Attributes, Operation};
use super::call::Hook;
use crate::registry::Registries;
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

    /// Whether `hook` is called for this request.
    pub(crate) async fn matches(
        &self,
        hook: &Hook,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        if !hook.rules.iter().any(|rule| rule.matches(attrs)) {
            return Ok(false);
        }
        if !self
            .selected(
                &hook.namespace_selector,
                &hook.object_selector,
                attrs,
                object,
                old,
            )
            .await?
        {
            return Ok(false);
        }
        conditions_match(hook, attrs, object, old).await
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
async fn conditions_match(
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
            subresource,
            operation: Operation::Create,
            namespace,
            name: "x",
            user: None,
            dry_run: false,
            warnings: None,
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
