//! Authorization: upstream's union of the privileged-group authorizer (`system:masters` may do
//! anything) and the authorizers `--authorization-mode` lists in its order (default
//! `Node,RBAC`): the Node authorizer ([`crate::authz::node`]: a kubelet reaches only its own
//! Node and Lease and the objects its pods use), the RBAC authorizer, the webhook
//! ([`crate::authz::webhook`]), `AlwaysAllow` and `AlwaysDeny`; the first to allow wins, one
//! that denies (the webhook's `denied`) ends the union, and a refusal carries the reasons the
//! authorizers gave (upstream's message after the colon of the 403).
//! RBAC evaluates the `rbac.authorization.k8s.io/v1` objects:
//! a request is allowed when a ClusterRoleBinding, or a RoleBinding in the request's namespace,
//! binds one of the user's identities to a role with a rule that covers the request. Aggregated
//! ClusterRoles gather the rules of the ClusterRoles their selectors pick, as upstream's
//! aggregation controller would have written them.
//!
//! The policy is a snapshot of those objects, rebuilt when they change (as upstream's informers
//! keep its authorizer current); the bootstrap roles and bindings that let every user read
//! discovery, health and version and ask about themselves are created at start
//! ([`ensure_bootstrap`]).

pub mod controllers;
pub(crate) mod escalation;
pub(crate) mod node;
pub(crate) mod reconcile;
pub(crate) mod reviews;
pub(crate) mod webhook;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use capstan_api::RequestInfo;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde_json::{Value, json};

use crate::authn::User;
use crate::registry::Registries;
use crate::registry::{Changes, ListOptions, WriteOptions};
use crate::status::ApiError;

const GROUP: &str = "rbac.authorization.k8s.io";
/// How often the policy is reread when no change was seen (a safety net: changes arrive by watch).
const REFRESH: Duration = Duration::from_secs(30);

/// What a request asks to do (upstream's authorizer attributes).
#[derive(Clone, Debug, Default)]
pub(crate) struct Attributes {
    /// Whether it is about an API resource (else a path).
    pub resource_request: bool,
    /// The verb.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// The API version.
    pub version: String,
    /// The resource.
    pub resource: String,
    /// The subresource.
    pub subresource: String,
    /// The object's name.
    pub name: String,
    /// The namespace.
    pub namespace: String,
    /// The path, for non-resource requests.
    pub path: String,
    /// The `fieldSelector` of a list or watch, decoded (empty when there is none), which
    /// upstream's authorizers may look at (`AuthorizeWithSelectors`).
    pub field_selector: String,
}

impl From<&RequestInfo> for Attributes {
    fn from(info: &RequestInfo) -> Self {
        Attributes {
            resource_request: info.is_resource_request,
            verb: info.verb.clone(),
            group: info.api_group.clone(),
            version: info.api_version.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone(),
            name: info.name.clone(),
            namespace: info.namespace.clone(),
            path: info.path.clone(),
            field_selector: String::new(),
        }
    }
}

impl Attributes {
    /// The attributes of a request described by `info` whose raw query string is `query`.
    pub(crate) fn of_request(info: &RequestInfo, query: &str) -> Self {
        let mut attributes = Attributes::from(info);
        if info.is_resource_request && matches!(info.verb.as_str(), "list" | "watch") {
            attributes.field_selector = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "fieldSelector")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
        }
        attributes
    }
}

/// An authorizer's answer: allowed or not, and why not (upstream's reason, shown after the
/// colon of a 403; empty when no authorizer gave one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Whether the request may run.
    pub allowed: bool,
    /// The reasons of the authorizers that had no opinion, one a line (or the reason of the
    /// one that denied).
    pub reason: String,
    /// Whether an authorizer denied outright (upstream's `DecisionDeny`), not merely found no
    /// reason to allow.
    pub denied: bool,
    /// The errors of authorizers that could not decide (a webhook that could not be asked),
    /// as Go prints an aggregate error; empty when there were none.
    pub error: String,
}

impl Decision {
    fn allow() -> Decision {
        Decision {
            allowed: true,
            ..Decision::default()
        }
    }
}

/// One authorizer of `--authorization-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `Node`.
    Node,
    /// `RBAC`.
    Rbac,
    /// `Webhook`.
    Webhook,
    /// `AlwaysAllow`.
    AlwaysAllow,
    /// `AlwaysDeny`.
    AlwaysDeny,
}

impl Mode {
    /// `--authorization-mode`'s list (comma-separated), checked as upstream's options are:
    /// known modes, none twice, at least one.
    pub fn parse_list(text: &str) -> Result<Vec<Mode>, String> {
        let mut modes = Vec::new();
        for name in text.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let mode = match name {
                "Node" => Mode::Node,
                "RBAC" => Mode::Rbac,
                "Webhook" => Mode::Webhook,
                "AlwaysAllow" => Mode::AlwaysAllow,
                "AlwaysDeny" => Mode::AlwaysDeny,
                "ABAC" => return Err("authorization-mode \"ABAC\" is not supported".to_owned()),
                other => {
                    return Err(format!("authorization-mode {other:?} is not a valid mode"));
                }
            };
            if modes.contains(&mode) {
                return Err(format!(
                    "authorization-mode {name:?} has mode specified more than once"
                ));
            }
            modes.push(mode);
        }
        if modes.is_empty() {
            return Err("at least one authorization-mode must be passed".to_owned());
        }
        Ok(modes)
    }
}

/// The authorizers asked after the privileged group, in order, and the webhook when one of
/// them is `Webhook`.
#[derive(Clone, Debug)]
pub(crate) struct Modes {
    pub order: Vec<Mode>,
    pub webhook: Option<Arc<crate::authz::webhook::AuthorizationWebhook>>,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            order: vec![Mode::Node, Mode::Rbac],
            webhook: None,
        }
    }
}

/// A binding: who, and to which role.
#[derive(Debug)]
struct Binding {
    /// Its name.
    name: String,
    subjects: Vec<Subject>,
    role_ref: RoleRef,
    /// The namespace of a RoleBinding (service account subjects default to it).
    namespace: Option<String>,
}

impl Binding {
    fn cluster(binding: ClusterRoleBinding) -> Binding {
        Binding {
            name: binding.metadata.name.unwrap_or_default(),
            subjects: binding.subjects.unwrap_or_default(),
            role_ref: binding.role_ref,
            namespace: None,
        }
    }

    fn namespaced(binding: k8s_openapi::api::rbac::v1::RoleBinding, namespace: String) -> Binding {
        Binding {
            name: binding.metadata.name.unwrap_or_default(),
            subjects: binding.subjects.unwrap_or_default(),
            role_ref: binding.role_ref,
            namespace: Some(namespace),
        }
    }

    /// The first of its subjects that is `user`.
    fn subject_for(&self, user: &User) -> Option<&Subject> {
        self.subjects
            .iter()
            .find(|s| subject_applies(s, user, self.namespace.as_deref()))
    }

    /// How upstream's RBAC names the grant of this binding to `subject` in its reasons
    /// (`ClusterRoleBinding "admins" of ClusterRole "admin" to User "alice"`).
    fn describe(&self, subject: &Subject) -> String {
        use capstan_api::field::go_quote;
        let to = match subject.kind.as_str() {
            "ServiceAccount" => {
                let namespace = subject
                    .namespace
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .or(self.namespace.as_deref())
                    .unwrap_or_default();
                format!(
                    "ServiceAccount {}",
                    go_quote(&format!("{}/{namespace}", subject.name))
                )
            }
            kind => format!("{kind} {}", go_quote(&subject.name)),
        };
        let (kind, name) = match &self.namespace {
            Some(namespace) => ("RoleBinding", format!("{}/{namespace}", self.name)),
            None => ("ClusterRoleBinding", self.name.clone()),
        };
        format!(
            "{kind} {} of {} {} to {to}",
            go_quote(&name),
            self.role_ref.kind,
            go_quote(&self.role_ref.name)
        )
    }
}

/// The RBAC objects, ready to evaluate.
#[derive(Debug, Default)]
struct Policy {
    cluster_bindings: Vec<Binding>,
    bindings: BTreeMap<String, Vec<Binding>>,
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
}

/// The authorizer.
#[derive(Debug, Default)]
pub(crate) struct Authorizer {
    /// The API whose RBAC objects make the policy (none for an authorizer fed by hand).
    registries: Option<std::sync::Weak<Registries>>,
    policy: RwLock<Arc<Policy>>,
    built_from: RwLock<[u64; 4]>,
    /// The Node authorizer, which looks up what pods use (none: every node is refused what
    /// needs a relationship).
    nodes: crate::authz::node::NodeAuthorizer,
    /// `--authorization-mode`.
    modes: Modes,
}

fn matches(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

/// Whether `rule` covers `attrs`, as upstream's `RuleAllows`.
pub(crate) fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !matches(&rule.verbs, &attrs.verb) {
        return false;
    }
    if attrs.resource_request {
        let combined = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let resources = rule.resources.as_deref().unwrap_or_default();
        let resource_ok = resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!attrs.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
        });
        let names = rule.resource_names.as_deref().unwrap_or_default();
        matches(rule.api_groups.as_deref().unwrap_or_default(), &attrs.group)
            && resource_ok
            && (names.is_empty() || names.contains(&attrs.name))
    } else {
        rule.non_resource_urls.iter().flatten().any(|url| {
            url == "*"
                || *url == attrs.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        })
    }
}

fn subject_applies(subject: &Subject, user: &User, binding_namespace: Option<&str>) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let namespace = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .or(binding_namespace)
                .unwrap_or_default();
            // `system:serviceaccount:<namespace>:<name>`, compared without building it (this
            // runs for every binding on every request).
            user.name
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(ns, name)| ns == namespace && name == subject.name)
        }
        _ => false,
    }
}

impl Policy {
    /// The rules of the role `role_ref` names (a Role in `namespace`), or upstream's error for a
    /// role that does not exist or a kind that is no role.
    fn referenced_rules(
        &self,
        role_ref: &RoleRef,
        namespace: Option<&str>,
    ) -> Result<&[PolicyRule], ApiError> {
        let missing = |plural: &str| {
            ApiError::from(capstan_api::StatusError::not_found(
                capstan_api::GroupResource::new(GROUP, plural),
                &role_ref.name,
            ))
        };
        match role_ref.kind.as_str() {
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(Vec::as_slice)
                .ok_or_else(|| missing("clusterroles")),
            "Role" => self
                .roles
                .get(&(
                    namespace.unwrap_or_default().to_owned(),
                    role_ref.name.clone(),
                ))
                .map(Vec::as_slice)
                .ok_or_else(|| missing("roles")),
            // A plain error upstream: a 500 without a reason.
            other => Err(ApiError::from(capstan_api::StatusError::new_with_reason(
                500,
                "",
                &format!(
                    "unsupported role reference kind: {}",
                    capstan_api::field::go_quote(other)
                ),
            ))),
        }
    }

    /// Every rule RBAC grants `user` through ClusterRoleBindings and, when `namespace` is not
    /// empty, that namespace's RoleBindings, with the messages of the roles that could not be
    /// resolved (upstream's `RulesFor`).
    fn rules_for(&self, user: &User, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        let namespaced = (!namespace.is_empty())
            .then(|| self.bindings.get(namespace))
            .flatten();
        for binding in self
            .cluster_bindings
            .iter()
            .chain(namespaced.into_iter().flatten())
        {
            if !binding
                .subjects
                .iter()
                .any(|s| subject_applies(s, user, binding.namespace.as_deref()))
            {
                continue;
            }
            match self.referenced_rules(&binding.role_ref, binding.namespace.as_deref()) {
                Ok(found) => rules.extend(found.iter().cloned()),
                Err(error) => {
                    errors.push(error.status().status.message.clone().unwrap_or_default())
                }
            }
        }
        (rules, errors)
    }

    fn rules_of(&self, role_ref: &RoleRef, namespace: Option<&str>) -> &[PolicyRule] {
        let rules = match (role_ref.kind.as_str(), namespace) {
            ("ClusterRole", _) => self.cluster_roles.get(&role_ref.name),
            ("Role", Some(ns)) => self.roles.get(&(ns.to_owned(), role_ref.name.clone())),
            _ => None,
        };
        rules.map_or(&[], Vec::as_slice)
    }

    /// Whether a binding grants `user` what `attrs` describe: upstream's reason naming the
    /// first that does (`RBAC: allowed by ClusterRoleBinding ...`).
    fn allowed_by(&self, user: &User, attrs: &Attributes) -> Option<String> {
        let grant = |binding: &Binding| {
            let subject = binding.subject_for(user)?;
            self.rules_of(&binding.role_ref, binding.namespace.as_deref())
                .iter()
                .any(|rule| rule_allows(rule, attrs))
                .then(|| format!("RBAC: allowed by {}", binding.describe(subject)))
        };
        let namespaced = (!attrs.namespace.is_empty())
            .then(|| self.bindings.get(&attrs.namespace))
            .flatten();
        self.cluster_bindings
            .iter()
            .chain(namespaced.into_iter().flatten())
            .find_map(grant)
    }
}

/// Whether `labels` satisfy the `matchLabels` and `matchExpressions` of `selector`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let by_expressions = selector["matchExpressions"].as_array().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let value = labels.get(key).map(String::as_str);
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => false,
            }
        })
    });
    by_labels && by_expressions
}

/// Each ClusterRole's rules, an aggregated one's gathered (transitively, as the aggregation
/// controller's writes would cascade) from the ClusterRoles its selectors pick.
fn aggregate(roles: &[ClusterRole]) -> BTreeMap<String, Vec<PolicyRule>> {
    fn gather(
        role: &ClusterRole,
        roles: &[ClusterRole],
        visiting: &mut Vec<String>,
        out: &mut Vec<PolicyRule>,
    ) {
        let name = role.metadata.name.clone().unwrap_or_default();
        if visiting.contains(&name) {
            return;
        }
        visiting.push(name);
        out.extend(role.rules.clone().unwrap_or_default());
        if let Some(aggregation) = &role.aggregation_rule {
            let selectors = serde_json::to_value(&aggregation.cluster_role_selectors)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            for other in roles {
                let labels = other.metadata.labels.clone().unwrap_or_default();
                if selectors.iter().any(|s| selects(s, &labels)) {
                    gather(other, roles, visiting, out);
                }
            }
        }
    }
    roles
        .iter()
        .map(|role| {
            let mut rules = Vec::new();
            gather(role, roles, &mut Vec::new(), &mut rules);
            (role.metadata.name.clone().unwrap_or_default(), rules)
        })
        .collect()
}

impl Authorizer {
    /// An authorizer whose Node authorizer looks relationships up in the registries (its RBAC policy is
    /// empty until [`Authorizer::refresh`]).
    pub(crate) fn over(registries: &Registries) -> Authorizer {
        Authorizer {
            nodes: crate::authz::node::NodeAuthorizer::new(registries),
            ..Authorizer::default()
        }
    }

    /// An authorizer of `modes` kept current from the registries's RBAC objects in the
    /// background.
    pub(crate) fn start(registries: Arc<Registries>, modes: Modes) -> Arc<Authorizer> {
        let authorizer = Arc::new(Authorizer {
            registries: Some(Arc::downgrade(&registries)),
            modes,
            ..Authorizer::over(&registries)
        });
        let weak = Arc::downgrade(&authorizer);
        let watched = [
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        ]
        .into_iter()
        .filter_map(|plural| registries.get(GROUP, "v1", plural))
        .collect();
        let mut changes = Changes::new(watched);
        tokio::spawn(async move {
            loop {
                changes.changed(REFRESH).await;
                let Some(authorizer) = weak.upgrade() else {
                    return;
                };
                if let Err(error) = authorizer.refresh(&registries).await {
                    tracing::debug!(?error, "cannot read the RBAC policy");
                }
                drop(authorizer);
            }
        });
        authorizer
    }

    /// Rebuilds the policy when the RBAC objects changed.
    pub(crate) async fn refresh(&self, registries: &Registries) -> Result<(), ApiError> {
        let mut lists = Vec::new();
        let mut versions = [0; 4];
        for (i, plural) in [
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        ]
        .into_iter()
        .enumerate()
        {
            let Some(registry) = registries.get(GROUP, "v1", plural) else {
                return Ok(());
            };
            let list = registry.list(None, &ListOptions::default()).await?;
            versions[i] = list.fingerprint();
            lists.push(list.items.iter().map(|c| c.object()).collect::<Vec<_>>());
        }
        if *self.built_from.read().unwrap_or_else(|e| e.into_inner()) == versions {
            return Ok(());
        }
        let cluster_roles: Vec<ClusterRole> = lists[0]
            .iter()
            .filter_map(|o| serde_json::from_value(o.clone()).ok())
            .collect();
        let mut policy = Policy {
            cluster_roles: aggregate(&cluster_roles),
            ..Policy::default()
        };
        for object in &lists[1] {
            if let Ok(binding) = serde_json::from_value::<ClusterRoleBinding>(object.clone()) {
                policy.cluster_bindings.push(Binding::cluster(binding));
            }
        }
        for object in &lists[2] {
            if let Ok(role) = serde_json::from_value::<Role>(object.clone()) {
                policy.roles.insert(
                    (
                        role.metadata.namespace.unwrap_or_default(),
                        role.metadata.name.unwrap_or_default(),
                    ),
                    role.rules.unwrap_or_default(),
                );
            }
        }
        for object in &lists[3] {
            if let Ok(binding) = serde_json::from_value::<RoleBinding>(object.clone()) {
                let namespace = binding.metadata.namespace.clone().unwrap_or_default();
                policy
                    .bindings
                    .entry(namespace.clone())
                    .or_default()
                    .push(Binding::namespaced(binding, namespace));
            }
        }
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        *self.built_from.write().unwrap_or_else(|e| e.into_inner()) = versions;
        Ok(())
    }

    /// The RBAC policy as the store holds it now (rebuilt first if the objects changed since
    /// the last build), for the escalation check, which must see a role or binding written a
    /// moment ago.
    async fn current_policy(&self) -> Arc<Policy> {
        if let Some(registries) = self.registries.as_ref().and_then(std::sync::Weak::upgrade)
            && let Err(error) = self.refresh(&registries).await
        {
            tracing::debug!(?error, "cannot read the RBAC policy");
        }
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The rules RBAC grants `user` (see [`Policy::rules_for`]), from the current policy.
    pub(crate) async fn rules_for(
        &self,
        user: &User,
        namespace: &str,
    ) -> (Vec<PolicyRule>, Vec<String>) {
        self.current_policy().await.rules_for(user, namespace)
    }

    /// What a SelfSubjectRulesReview lists for `user` in `namespace`: the rules of every
    /// binding that applies, as they are (ClusterRoleBindings first), and the union's verdict
    /// on completeness (the Node authorizer cannot list a node's rules; RBAC reports roles it
    /// could not resolve), as upstream's rule resolvers answer.
    pub(crate) async fn rules_review(
        &self,
        user: &User,
        namespace: &str,
    ) -> (Vec<PolicyRule>, bool, Vec<String>) {
        let mut errors = Vec::new();
        let mut incomplete = crate::authz::node::node_identity(user).is_some();
        if incomplete {
            errors.push("node authorizer does not support user rule resolution".to_owned());
        }
        if self.modes.order.contains(&Mode::Webhook) {
            incomplete = true;
            errors.push("webhook authorizer does not support user rule resolution".to_owned());
        }
        let (rules, unresolved) = self.current_policy().await.rules_for(user, namespace);
        errors.extend(unresolved);
        (rules, incomplete, errors)
    }

    /// The rules of the role a binding in `namespace` refers to, from the current policy (an
    /// aggregated ClusterRole's gathered ones); a missing role is NotFound, as upstream's.
    pub(crate) async fn referenced_rules(
        &self,
        role_ref: &RoleRef,
        namespace: Option<&str>,
    ) -> Result<Vec<PolicyRule>, ApiError> {
        self.current_policy()
            .await
            .referenced_rules(role_ref, namespace)
            .map(<[PolicyRule]>::to_vec)
    }

    /// Whether `user` may do what `attrs` describe, and why not: the privileged group, then
    /// the modes in order (RBAC names the binding that allows, as upstream's).
    pub(crate) async fn authorize(&self, user: &User, attrs: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Decision::allow();
        }
        let mut reasons = Vec::new();
        let mut errors = Vec::new();
        for mode in &self.modes.order {
            match mode {
                Mode::AlwaysAllow => return Decision::allow(),
                Mode::AlwaysDeny => reasons.push("Everything is forbidden.".to_owned()),
                Mode::Node => match self.nodes.authorize(user, attrs).await {
                    Some(decision) if decision.allowed => return decision,
                    Some(decision) if !decision.reason.is_empty() => reasons.push(decision.reason),
                    _ => {}
                },
                Mode::Rbac => {
                    let policy = self
                        .policy
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    if let Some(reason) = policy.allowed_by(user, attrs) {
                        return Decision {
                            allowed: true,
                            reason,
                            ..Decision::default()
                        };
                    }
                }
                Mode::Webhook => {
                    use crate::authz::webhook::Verdict;
                    let Some(webhook) = &self.modes.webhook else {
                        continue;
                    };
                    match webhook.authorize(user, attrs).await {
                        Verdict::Allow(reason) => {
                            return Decision {
                                allowed: true,
                                reason,
                                ..Decision::default()
                            };
                        }
                        Verdict::Deny(reason, error) => {
                            return Decision {
                                reason,
                                denied: true,
                                error: error.unwrap_or_default(),
                                ..Decision::default()
                            };
                        }
                        Verdict::NoOpinion(reason, error) => {
                            if !reason.is_empty() {
                                reasons.push(reason);
                            }
                            errors.extend(error);
                        }
                    }
                }
            }
        }
        Decision {
            reason: reasons.join("\n"),
            // Go's aggregate error: one error as itself, several in brackets.
            error: match errors.len() {
                0 | 1 => errors.concat(),
                _ => format!("[{}]", errors.join(", ")),
            },
            ..Decision::default()
        }
    }
}

/// The bootstrap roles and bindings: cluster-admin for `system:masters`, discovery and the self
/// reviews for every authenticated user, health and version for everyone, as upstream's
/// bootstrap policy grants them; and the user-facing `admin`, `edit` and `view` roles, which
/// aggregate upstream's `system:aggregate-to-*` rules, and the scheduler's roles
/// (`system:kube-scheduler`, `system:volume-scheduler`) bound to its user
/// (`rbac_bootstrap.json`); the service proxy's `system:node-proxier` bound to
/// `system:kube-proxy`; the nodes' `system:node` role with a binding that names nobody (the
/// Node authorizer applies its rules per node); `cluster-admin` for the controller
/// manager's user when its controllers do not run under service accounts of their own
/// (`controller_admin`), and upstream's controller roles and the controller manager's own
/// role always ([`controllers`]); upstream's certificate roles (`system:node-bootstrapper`, the CSR
/// approver's `...:certificatesigningrequests:nodeclient` and `selfnodeclient`, and one
/// `system:certificates.k8s.io:<signer>-approver` per in-tree signer), unbound as upstream's
/// except `selfnodeclient`, bound to `system:nodes` as kubeadm binds it (nodes renew their own
/// client certificates);
/// upstream's `system:kube-dns` role and binding, and the cluster DNS
/// server's own (`capstan:kube-dns`, cluster-wide reads and a Role in `kube-system`) for its
/// user `system:kube-dns`; the local-path provisioner's `capstan:local-path-provisioner`;
/// metrics-server's `system:aggregated-metrics-reader` (in view, edit and admin);
/// `system:auth-delegator` (token and access reviews) and `system:monitoring` (metrics and
/// health, bound to the group of that name).
fn bootstrap_objects(controller_admin: bool) -> Vec<(&'static str, Value)> {
    let meta = |name: &str| {
        json!({
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        })
    };
    let role = |name: &str, rules: Value| {
        (
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": meta(name), "rules": rules}),
        )
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": GROUP, "kind": "Group", "name": g}))
            .collect();
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta(name),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
                   "subjects": subjects}),
        )
    };
    let user_binding = |name: &str, role: &str, user: &str| {
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta(name),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
                   "subjects": [{"apiGroup": GROUP, "kind": "User", "name": user}]}),
        )
    };
    // The role approving requests to the in-tree signer `kubernetes.io/<signer>`.
    let signer_approver = |signer: &str| {
        role(
            &format!("system:certificates.k8s.io:{signer}-approver"),
            json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                    "resourceNames": [format!("kubernetes.io/{signer}")],
                    "verbs": ["approve"]}]),
        )
    };
    let aggregated: Vec<Value> =
        serde_json::from_str(include_str!("rbac_bootstrap.json")).unwrap_or_default();
    let mut objects: Vec<(&'static str, Value)> = aggregated
        .into_iter()
        .map(|role| ("clusterroles", role))
        .collect();
    objects.extend([
        role(
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        role(
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                                        "/livez", "/openapi", "/openapi/*", "/readyz",
                                        "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
        role(
            "system:basic-user",
            json!([{"apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"]},
                   {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                    "verbs": ["create"]}]),
        ),
        // Delegated authentication and authorization: what a component that asks the API
        // server about its own callers needs (metrics-server and other extension API servers
        // bind it).
        role(
            "system:auth-delegator",
            json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                    "verbs": ["create"]},
                   {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
                    "verbs": ["create"]}]),
        ),
        // Monitoring: metrics and health checks, for the group `system:monitoring`.
        role(
            "system:monitoring",
            json!([{"nonResourceURLs": ["/metrics", "/metrics/slis", "/livez", "/readyz",
                                        "/healthz", "/livez/*", "/readyz/*", "/healthz/*"],
                    "verbs": ["get"]}]),
        ),
        binding("system:monitoring", &["system:monitoring"]),
        // Service account issuer discovery, readable by every service account.
        role(
            "system:service-account-issuer-discovery",
            json!([{"nonResourceURLs": ["/.well-known/openid-configuration",
                                        "/.well-known/openid-configuration/",
                                        "/openid/v1/jwks", "/openid/v1/jwks/"],
                    "verbs": ["get"]}]),
        ),
        binding(
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
        role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version",
                                        "/version/"],
                    "verbs": ["get"]}]),
        ),
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        user_binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            "system:kube-scheduler",
        ),
        user_binding(
            "system:volume-scheduler",
            "system:volume-scheduler",
            "system:kube-scheduler",
        ),
        // Reading the Metrics API, aggregated into view, edit and admin as metrics-server's
        // manifest (and k3s) install it.
        (
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "system:aggregated-metrics-reader",
                                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults",
                                           "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                                           "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                                           "rbac.authorization.k8s.io/aggregate-to-view": "true"},
                                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                   "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"],
                              "verbs": ["get", "list", "watch"]}]}),
        ),
        // What extension API servers are bound to, as upstream's bootstrap policy has it:
        // delegating authentication and authorization to this server, and reading how its
        // front proxy identifies users (`extension-apiserver-authentication`).
        role(
            "system:auth-delegator",
            json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                    "verbs": ["create"]},
                   {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
                    "verbs": ["create"]}]),
        ),
        (
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": namespaced(meta("extension-apiserver-authentication-reader"), "kube-system"),
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["extension-apiserver-authentication"],
                              "verbs": ["get", "list", "watch"]}]}),
        ),
        // The service proxy's role and user, as upstream's bootstrap policy has them.
        role(
            "system:node-proxier",
            json!([{"apiGroups": [""], "resources": ["endpoints", "services"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": [""], "resources": ["nodes"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                    "verbs": ["create", "patch", "update"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]),
        ),
        user_binding(
            "system:node-proxier",
            "system:node-proxier",
            "system:kube-proxy",
        ),
        // Upstream's certificate roles: making a node's client CSR (what a bootstrapping node
        // holds), what the CSR approver checks a requester for (a node's client certificate,
        // asked for by anyone or by the node itself), and approving requests of each in-tree
        // signer. Upstream binds none of them by default.
        role(
            "system:node-bootstrapper",
            json!([{"apiGroups": ["certificates.k8s.io"],
                    "resources": ["certificatesigningrequests"],
                    "verbs": ["create", "get", "list", "watch"]}]),
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            json!([{"apiGroups": ["certificates.k8s.io"],
                    "resources": ["certificatesigningrequests/nodeclient"],
                    "verbs": ["create"]}]),
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            json!([{"apiGroups": ["certificates.k8s.io"],
                    "resources": ["certificatesigningrequests/selfnodeclient"],
                    "verbs": ["create"]}]),
        ),
        // Nodes renew their own client certificates through CSRs that the approver grants
        // when the node may create `selfnodeclient` (kubeadm's
        // `kubeadm:node-autoapprove-certificate-rotation`, which Capstan makes as k3s-like
        // clusters renew kubelet certificates without a human).
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta("capstan:node-autoapprove-certificate-rotation"),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole",
                               "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
                   "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": "system:nodes"}]}),
        ),
        signer_approver("kube-apiserver-client"),
        signer_approver("kube-apiserver-client-kubelet"),
        signer_approver("kubelet-serving"),
        signer_approver("legacy-unknown"),
        // The node agents' role, upstream's `NodeRules`. Its binding has no subjects, as
        // upstream's since the Node authorizer (which applies these rules, narrowed per node)
        // took over: see `unbind_nodes`.
        role("system:node", crate::authz::node::node_rules()),
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta("system:node"),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "system:node"}}),
        ),
        // Upstream's role of the kube-dns service account (the kube-dns add-on's identity).
        role(
            "system:kube-dns",
            json!([{"apiGroups": [""], "resources": ["endpoints", "services"],
                    "verbs": ["list", "watch"]}]),
        ),
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta("system:kube-dns"),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "system:kube-dns"},
                   "subjects": [{"kind": "ServiceAccount", "name": "kube-dns",
                                 "namespace": "kube-system"}]}),
        ),
        // The cluster DNS server (`capstan-dns`, user system:kube-dns): it reads what CoreDNS
        // reads (Services, EndpointSlices, Namespaces) and, in kube-system only, creates the
        // kube-dns Service and holds its Lease.
        role(
            "capstan:kube-dns",
            json!([{"apiGroups": [""], "resources": ["services", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]),
        ),
        user_binding("capstan:kube-dns", "capstan:kube-dns", "system:kube-dns"),
        // The local-path provisioner beside every node agent (user
        // system:capstan:local-path-provisioner): what upstream's external provisioners and
        // resizers are granted.
        role(
            "capstan:local-path-provisioner",
            json!([{"apiGroups": [""], "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "delete", "patch", "update"]},
                   {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                    "verbs": ["get", "list", "watch", "patch", "update"]},
                   {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
                    "verbs": ["patch", "update"]},
                   {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                   {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                    "verbs": ["create", "patch", "update"]}]),
        ),
        user_binding(
            "capstan:local-path-provisioner",
            "capstan:local-path-provisioner",
            crate::join::STORAGE_USER,
        ),
        (
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": namespaced(meta("capstan:kube-dns"), "kube-system"),
                   "rules": [{"apiGroups": [""], "resources": ["services"],
                              "resourceNames": ["kube-dns"], "verbs": ["get"]},
                             {"apiGroups": [""], "resources": ["services"],
                              "verbs": ["create"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update", "delete"]}]}),
        ),
        (
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": namespaced(meta("capstan:kube-dns"), "kube-system"),
                   "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "capstan:kube-dns"},
                   "subjects": [{"apiGroup": GROUP, "kind": "User", "name": "system:kube-dns"}]}),
        ),
    ]);
    objects.extend(controllers::bootstrap_objects(&meta));
    // Without `--use-service-account-credentials` every controller runs as the controller
    // manager's user, which then reads, writes and deletes every kind (the garbage collector
    // and the namespace controller reach custom resources too).
    if controller_admin {
        objects.push(user_binding(
            CONTROLLER_ADMIN_BINDING,
            "cluster-admin",
            controllers::CONTROLLER_MANAGER_USER,
        ));
    }
    objects
}

/// The binding that makes the controller manager's user a cluster admin when its controllers
/// share its credential.
const CONTROLLER_ADMIN_BINDING: &str = "capstan:controller-manager";

/// `metadata` placed in `namespace`.
fn namespaced(mut metadata: Value, namespace: &str) -> Value {
    metadata["namespace"] = json!(namespace);
    metadata
}

/// Creates the bootstrap roles and bindings that are missing, gives those that exist what they
/// lack ([`reconcile`]: rules, subjects, selectors; nothing removed, protected ones untouched),
/// and takes the node group out of
/// a `system:node` binding an earlier version created ([`unbind_nodes`]). `controller_admin`:
/// the controllers share the controller manager's credential, which is then bound to
/// `cluster-admin`; otherwise that binding, if an earlier start made it, goes
/// ([`unbind_controller_manager`]).
pub(crate) async fn ensure_bootstrap(
    registries: &Registries,
    controller_admin: bool,
) -> Result<(), ApiError> {
    for (plural, object) in bootstrap_objects(controller_admin) {
        let Some(registry) = registries.get(GROUP, "v1", plural) else {
            continue;
        };
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
        match registry
            .create(
                namespace.as_deref(),
                object.clone(),
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => {}
            Err(error) if error.status().code() == 409 => {
                reconcile::reconcile(&registry, plural, namespace.as_deref(), &object).await?;
            }
            Err(error) => return Err(error),
        }
    }
    if !controller_admin {
        unbind_controller_manager(registries).await?;
    }
    unbind_nodes(registries).await
}

/// Whether `binding` is the controller manager's `cluster-admin` binding as the bootstrap
/// writes it: still marked for automatic update, naming that user and nobody else.
fn is_controller_admin_binding(binding: &Value) -> bool {
    let annotation = binding
        .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
        .and_then(Value::as_str);
    let subjects = binding["subjects"].as_array().map(Vec::as_slice);
    annotation == Some("true")
        && binding["roleRef"]["name"] == "cluster-admin"
        && matches!(subjects, Some([subject])
            if subject["kind"] == "User"
                && subject["name"] == controllers::CONTROLLER_MANAGER_USER)
}

/// Deletes the controller manager's `cluster-admin` binding that a start with shared controller
/// credentials made, once its controllers run under their own service accounts (which
/// upstream's roles cover). One an administrator changed (or whose autoupdate annotation was
/// turned off) stays.
async fn unbind_controller_manager(registries: &Registries) -> Result<(), ApiError> {
    let Some(registry) = registries.get(GROUP, "v1", "clusterrolebindings") else {
        return Ok(());
    };
    let binding = match registry.get(None, CONTROLLER_ADMIN_BINDING).await {
        Ok(binding) => binding,
        Err(error) if error.status().code() == 404 => return Ok(()),
        Err(error) => return Err(error),
    };
    if !is_controller_admin_binding(&binding) {
        return Ok(());
    }
    let options = crate::registry::DeleteOptions {
        precondition_uid: binding["metadata"]["uid"].as_str().map(str::to_owned),
        ..crate::registry::DeleteOptions::default()
    };
    match registry
        .delete(None, CONTROLLER_ADMIN_BINDING, &options)
        .await
    {
        Ok(_) => {
            tracing::info!(
                "removed the controller manager's cluster-admin binding: its controllers run under their own service accounts"
            );
            Ok(())
        }
        Err(error) if matches!(error.status().code(), 404 | 409) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Whether `binding` is the `system:node` binding as versions before the Node authorizer
/// created it: still marked for automatic update, granting the role to the `system:nodes`
/// group and nobody else.
fn is_old_node_binding(binding: &Value) -> bool {
    let annotation = binding
        .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
        .and_then(Value::as_str);
    let subjects = binding["subjects"].as_array().map(Vec::as_slice);
    annotation == Some("true")
        && matches!(subjects, Some([subject])
            if subject["kind"] == "Group" && subject["name"] == "system:nodes")
}

/// Empties the subjects of a `system:node` binding left by an earlier version, which bound
/// the whole `system:nodes` group to the role and so let every node read every secret whatever
/// the Node authorizer says. Upstream keeps such a subject until an administrator reconciles
/// with `--remove-extra-subjects`; here the binding is emptied once at start, but only while it
/// is exactly what the bootstrap wrote (an administrator's binding, or one whose autoupdate
/// annotation was turned off, is left alone).
async fn unbind_nodes(registries: &Registries) -> Result<(), ApiError> {
    let Some(registry) = registries.get(GROUP, "v1", "clusterrolebindings") else {
        return Ok(());
    };
    let binding = match registry.get(None, "system:node").await {
        Ok(binding) => binding,
        Err(error) if error.status().code() == 404 => return Ok(()),
        Err(error) => return Err(error),
    };
    if !is_old_node_binding(&binding) {
        return Ok(());
    }
    let mut emptied = binding;
    if let Some(map) = emptied.as_object_mut() {
        map.remove("subjects");
    }
    match registry
        .update(None, "system:node", emptied, None, &WriteOptions::default())
        .await
    {
        Ok(_) => {
            tracing::info!(
                "removed the system:nodes group from the system:node ClusterRoleBinding: the Node authorizer grants nodes their access"
            );
            Ok(())
        }
        // Someone changed it meanwhile: theirs stands.
        Err(error) if error.status().code() == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An authorizer holding the bootstrap policy (controllers under their own accounts).
    pub(crate) fn bootstrapped() -> Authorizer {
        bootstrapped_with(false)
    }

    /// An authorizer holding the bootstrap policy, the controller manager's user a cluster
    /// admin or not.
    pub(crate) fn bootstrapped_with(controller_admin: bool) -> Authorizer {
        let mut policy = Policy::default();
        let mut roles = Vec::new();
        for (plural, object) in bootstrap_objects(controller_admin) {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if plural == "clusterroles" {
                roles.push(serde_json::from_value::<ClusterRole>(object).unwrap());
            } else if plural == "roles" {
                let role: k8s_openapi::api::rbac::v1::Role =
                    serde_json::from_value(object).unwrap();
                let name = role.metadata.name.unwrap_or_default();
                policy
                    .roles
                    .insert((namespace, name), role.rules.unwrap_or_default());
            } else if plural == "rolebindings" {
                let binding: k8s_openapi::api::rbac::v1::RoleBinding =
                    serde_json::from_value(object).unwrap();
                policy
                    .bindings
                    .entry(namespace.clone())
                    .or_default()
                    .push(Binding::namespaced(binding, namespace));
            } else {
                let binding: ClusterRoleBinding = serde_json::from_value(object).unwrap();
                policy.cluster_bindings.push(Binding::cluster(binding));
            }
        }
        policy.cluster_roles = aggregate(&roles);
        let authorizer = Authorizer::default();
        *authorizer.policy.write().unwrap() = Arc::new(policy);
        authorizer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
    }

    fn resource(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "default".into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_names_and_paths() {
        let pods = rule(
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}),
        );
        assert!(rule_allows(&pods, &resource("list", "", "pods", "", "")));
        assert!(rule_allows(
            &pods,
            &resource("get", "", "deployments", "status", "d")
        ));
        assert!(!rule_allows(
            &pods,
            &resource("delete", "", "pods", "", "p")
        ));
        assert!(!rule_allows(
            &pods,
            &resource("get", "apps", "pods", "", "p")
        ));
        assert!(!rule_allows(
            &pods,
            &resource("get", "", "pods", "log", "p")
        ));
        let named = rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["*"]}),
        );
        assert!(rule_allows(
            &named,
            &resource("update", "", "configmaps", "", "a")
        ));
        assert!(!rule_allows(
            &named,
            &resource("update", "", "configmaps", "", "b")
        ));
        assert!(!rule_allows(
            &named,
            &resource("list", "", "configmaps", "", "")
        ));
        let paths = rule(json!({"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}));
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: p.into(),
            ..Attributes::default()
        };
        assert!(rule_allows(&paths, &path("/apis/apps/v1")));
        assert!(rule_allows(&paths, &path("/version")));
        assert!(!rule_allows(&paths, &path("/api/v1")));
    }

    #[test]
    fn admin_edit_and_view_aggregate_upstreams_rules() {
        let roles: Vec<ClusterRole> = bootstrap_objects(false)
            .into_iter()
            .filter(|(plural, _)| *plural == "clusterroles")
            .map(|(_, o)| serde_json::from_value(o).unwrap())
            .collect();
        let rules = aggregate(&roles);
        let allows =
            |role: &str, attrs: &Attributes| rules[role].iter().any(|r| rule_allows(r, attrs));
        let list_pods = resource("list", "", "pods", "", "");
        let create_deploy = resource("create", "apps", "deployments", "", "");
        let create_role = resource("create", "rbac.authorization.k8s.io", "roles", "", "");
        let read_secret = resource("get", "", "secrets", "", "s");
        assert!(allows("view", &list_pods));
        assert!(!allows("view", &create_deploy));
        assert!(!allows("view", &read_secret));
        assert!(allows("edit", &list_pods) && allows("edit", &create_deploy));
        assert!(allows("edit", &read_secret));
        assert!(!allows("edit", &create_role));
        assert!(allows("admin", &list_pods) && allows("admin", &create_role));
    }

    #[tokio::test]
    async fn the_dns_server_may_read_what_it_answers_from_and_little_else() {
        let authorizer = tests_support::bootstrapped();
        let dns = User {
            name: "system:kube-dns".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        let at = |verb: &str, group: &str, plural: &str, name: &str, namespace: &str| {
            let mut attributes = resource(verb, group, plural, "", name);
            attributes.namespace = namespace.into();
            attributes
        };
        for allowed in [
            at("list", "", "services", "", ""),
            at("watch", "", "services", "", ""),
            at("watch", "", "namespaces", "", ""),
            at("list", "discovery.k8s.io", "endpointslices", "", ""),
            at("get", "", "services", "kube-dns", "kube-system"),
            at("create", "", "services", "", "kube-system"),
            at(
                "update",
                "coordination.k8s.io",
                "leases",
                "capstan-dns-x",
                "kube-system",
            ),
            at(
                "delete",
                "coordination.k8s.io",
                "leases",
                "capstan-dns-x",
                "kube-system",
            ),
        ] {
            assert!(
                authorizer.authorize(&dns, &allowed).await.allowed,
                "{allowed:?}"
            );
        }
        for refused in [
            at("get", "", "secrets", "s", "default"),
            at("get", "", "services", "web", "kube-system"),
            at("create", "", "services", "", "default"),
            at("update", "", "services", "kube-dns", "kube-system"),
            at(
                "update",
                "coordination.k8s.io",
                "leases",
                "n1",
                "kube-node-lease",
            ),
            at(
                "create",
                "discovery.k8s.io",
                "endpointslices",
                "",
                "kube-system",
            ),
        ] {
            assert!(
                !authorizer.authorize(&dns, &refused).await.allowed,
                "{refused:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_union_asks_the_node_authorizer_then_rbac() {
        // The bootstrap policy binds nobody to the node role: only the Node authorizer
        // (here without lookups, so relating nothing to any node) lets nodes in.
        let authorizer = tests_support::bootstrapped();
        let node = User {
            name: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..User::default()
        };
        let mut lease = resource("update", "coordination.k8s.io", "leases", "", "n1");
        lease.namespace = "kube-node-lease".into();
        assert!(authorizer.authorize(&node, &lease).await.allowed);
        let secret = resource("get", "", "secrets", "", "s");
        assert_eq!(
            authorizer.authorize(&node, &secret).await,
            Decision {
                reason: "no relationship found between node 'n1' and this object".into(),
                ..Decision::default()
            }
        );
        // RBAC still speaks after the Node authorizer: discovery for every authenticated user.
        let discovery = Attributes {
            verb: "get".into(),
            path: "/api".into(),
            ..Attributes::default()
        };
        assert!(authorizer.authorize(&node, &discovery).await.allowed);
        // Others get RBAC's answer, which gives no reason.
        let jane = User {
            name: "jane".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        assert_eq!(
            authorizer.authorize(&jane, &secret).await,
            Decision::default()
        );
        let admin = User {
            name: "root".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        assert!(authorizer.authorize(&admin, &secret).await.allowed);
    }

    #[test]
    fn bindings_grant_their_roles_to_their_subjects() {
        let mut policy = Policy::default();
        policy.cluster_roles.insert(
            "reader".into(),
            vec![rule(
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}),
            )],
        );
        policy.roles.insert(
            ("team".into(), "writer".into()),
            vec![rule(
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}),
            )],
        );
        policy.cluster_bindings.push(Binding {
            name: "readers".into(),
            subjects: vec![
                serde_json::from_value(json!({"kind": "Group", "name": "readers"})).unwrap(),
            ],
            role_ref: serde_json::from_value(
                json!({"apiGroup": GROUP, "kind": "ClusterRole", "name": "reader"}),
            )
            .unwrap(),
            namespace: None,
        });
        policy.bindings.insert(
            "team".into(),
            vec![Binding {
                name: "ci-writes".into(),
                subjects: vec![
                    serde_json::from_value(json!({"kind": "ServiceAccount", "name": "ci"}))
                        .unwrap(),
                ],
                role_ref: serde_json::from_value(
                    json!({"apiGroup": GROUP, "kind": "Role", "name": "writer"}),
                )
                .unwrap(),
                namespace: Some("team".into()),
            }],
        );
        let reader = User {
            name: "r".into(),
            groups: vec!["readers".into()],
            ..User::default()
        };
        let ci = User {
            name: "system:serviceaccount:team:ci".into(),
            groups: vec![],
            ..User::default()
        };
        let mut create = resource("create", "", "configmaps", "", "");
        // Each grant names its binding as upstream's reasons do.
        assert_eq!(
            policy
                .allowed_by(&reader, &resource("list", "apps", "deployments", "", ""))
                .as_deref(),
            Some(
                r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "reader" to Group "readers""#
            )
        );
        assert!(policy.allowed_by(&reader, &create).is_none());
        assert!(
            policy.allowed_by(&ci, &create).is_none(),
            "bound in team, not default"
        );
        create.namespace = "team".into();
        assert_eq!(
            policy.allowed_by(&ci, &create).as_deref(),
            Some(
                r#"RBAC: allowed by RoleBinding "ci-writes/team" of Role "writer" to ServiceAccount "ci/team""#
            )
        );
        assert!(
            policy
                .allowed_by(&ci, &resource("list", "", "pods", "", ""))
                .is_none()
        );
    }
}
