//! Authorization: upstream's union of the privileged-group authorizer (`system:masters` may do
//! anything) and the RBAC authorizer. RBAC evaluates the `rbac.authorization.k8s.io/v1` objects:
//! a request is allowed when a ClusterRoleBinding, or a RoleBinding in the request's namespace,
//! binds one of the user's identities to a role with a rule that covers the request. Aggregated
//! ClusterRoles gather the rules of the ClusterRoles their selectors pick, as upstream's
//! aggregation controller would have written them.
//!
//! The policy is a snapshot of those objects, rebuilt when they change (as upstream's informers
//! keep its authorizer current); the bootstrap roles and bindings that let every user read
//! discovery, health and version and ask about themselves are created at start
//! ([`ensure_bootstrap`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use capstan_api::RequestInfo;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde_json::{Value, json};

use crate::api::Api;
use crate::auth::User;
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
}

impl From<&RequestInfo> for Attributes {
    fn from(info: &RequestInfo) -> Self {
        Attributes {
            resource_request: info.is_resource_request,
            verb: info.verb.clone(),
            group: info.api_group.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone(),
            name: info.name.clone(),
            namespace: info.namespace.clone(),
            path: info.path.clone(),
        }
    }
}

/// A binding: who, and to which role.
#[derive(Debug)]
struct Binding {
    subjects: Vec<Subject>,
    role_ref: RoleRef,
    /// The namespace of a RoleBinding (service account subjects default to it).
    namespace: Option<String>,
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
    policy: RwLock<Arc<Policy>>,
    built_from: RwLock<[u64; 4]>,
}

fn matches(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

/// Whether `rule` covers `attrs`, as upstream's `RuleAllows`.
fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
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
            user.name == format!("system:serviceaccount:{namespace}:{}", subject.name)
        }
        _ => false,
    }
}

impl Policy {
    fn rules_of(&self, role_ref: &RoleRef, namespace: Option<&str>) -> &[PolicyRule] {
        let rules = match (role_ref.kind.as_str(), namespace) {
            ("ClusterRole", _) => self.cluster_roles.get(&role_ref.name),
            ("Role", Some(ns)) => self.roles.get(&(ns.to_owned(), role_ref.name.clone())),
            _ => None,
        };
        rules.map_or(&[], Vec::as_slice)
    }

    fn allows(&self, user: &User, attrs: &Attributes) -> bool {
        let covered = |binding: &Binding| {
            binding
                .subjects
                .iter()
                .any(|s| subject_applies(s, user, binding.namespace.as_deref()))
                && self
                    .rules_of(&binding.role_ref, binding.namespace.as_deref())
                    .iter()
                    .any(|rule| rule_allows(rule, attrs))
        };
        if self.cluster_bindings.iter().any(covered) {
            return true;
        }
        !attrs.namespace.is_empty()
            && self
                .bindings
                .get(&attrs.namespace)
                .is_some_and(|b| b.iter().any(covered))
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
    /// An authorizer kept current from `api`'s RBAC objects in the background.
    pub(crate) fn start(api: Arc<Api>) -> Arc<Authorizer> {
        let authorizer = Arc::new(Authorizer::default());
        let weak = Arc::downgrade(&authorizer);
        let registries = [
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        ]
        .into_iter()
        .filter_map(|plural| api.registry(GROUP, "v1", plural).cloned())
        .collect();
        let mut changes = Changes::new(registries);
        tokio::spawn(async move {
            loop {
                changes.changed(REFRESH).await;
                let Some(authorizer) = weak.upgrade() else {
                    return;
                };
                if let Err(error) = authorizer.refresh(&api).await {
                    tracing::debug!(?error, "cannot read the RBAC policy");
                }
                drop(authorizer);
            }
        });
        authorizer
    }

    /// Rebuilds the policy when the RBAC objects changed.
    pub(crate) async fn refresh(&self, api: &Api) -> Result<(), ApiError> {
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
            let Some(registry) = api.registry(GROUP, "v1", plural) else {
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
                policy.cluster_bindings.push(Binding {
                    subjects: binding.subjects.unwrap_or_default(),
                    role_ref: binding.role_ref,
                    namespace: None,
                });
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
                let namespace = binding.metadata.namespace.unwrap_or_default();
                policy
                    .bindings
                    .entry(namespace.clone())
                    .or_default()
                    .push(Binding {
                        subjects: binding.subjects.unwrap_or_default(),
                        role_ref: binding.role_ref,
                        namespace: Some(namespace),
                    });
            }
        }
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        *self.built_from.write().unwrap_or_else(|e| e.into_inner()) = versions;
        Ok(())
    }

    /// Whether `user` may do what `attrs` describe.
    pub(crate) fn allows(&self, user: &User, attrs: &Attributes) -> bool {
        if user.groups.iter().any(|g| g == "system:masters") {
            return true;
        }
        let policy = self
            .policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        policy.allows(user, attrs)
    }
}

/// The bootstrap roles and bindings: cluster-admin for `system:masters`, discovery and the self
/// reviews for every authenticated user, health and version for everyone, as upstream's
/// bootstrap policy grants them; and the user-facing `admin`, `edit` and `view` roles, which
/// aggregate upstream's `system:aggregate-to-*` rules, and the scheduler's roles
/// (`system:kube-scheduler`, `system:volume-scheduler`) bound to its user
/// (`rbac_bootstrap.json`); and `cluster-admin` for the controller manager's user.
fn bootstrap_objects() -> Vec<(&'static str, Value)> {
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
        // The node agents, as upstream's `system:node` role grants them (upstream narrows it
        // further per node with the Node authorizer, which is not built yet).
        role(
            "system:node",
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["localsubjectaccessreviews", "subjectaccessreviews"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes"],
                 "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                 "verbs": ["create", "patch", "update"]},
                {"apiGroups": [""], "resources": ["pods"],
                 "verbs": ["get", "list", "watch", "create", "delete"]},
                {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                {"apiGroups": [""],
                 "resources": ["configmaps", "secrets", "persistentvolumeclaims", "persistentvolumes"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
                 "verbs": ["get", "patch", "update"]},
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
                {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                 "verbs": ["create", "get", "list", "watch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["create", "delete", "get", "patch", "update"]},
                {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments", "csidrivers"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"],
                 "verbs": ["get", "list", "watch"]},
            ]),
        ),
        binding("system:node", &["system:nodes"]),
        // The controllers read, write and delete every kind (the garbage collector and the
        // namespace controller reach custom resources too) under one identity; upstream
        // splits them into a service account per controller.
        user_binding(
            "capstan:controller-manager",
            "cluster-admin",
            "system:kube-controller-manager",
        ),
    ]);
    objects
}

/// Creates the bootstrap roles and bindings that are missing.
pub(crate) async fn ensure_bootstrap(api: &Api) -> Result<(), ApiError> {
    for (plural, object) in bootstrap_objects() {
        let Some(registry) = api.registry(GROUP, "v1", plural) else {
            continue;
        };
        match registry
            .create(None, object, &WriteOptions::default())
            .await
        {
            Ok(_) => {}
            Err(error) if error.status().code() == 409 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An authorizer holding the bootstrap policy.
    pub(crate) fn bootstrapped() -> Authorizer {
        let mut policy = Policy::default();
        let mut roles = Vec::new();
        for (plural, object) in bootstrap_objects() {
            if plural == "clusterroles" {
                roles.push(serde_json::from_value::<ClusterRole>(object).unwrap());
            } else {
                let binding: ClusterRoleBinding = serde_json::from_value(object).unwrap();
                policy.cluster_bindings.push(Binding {
                    subjects: binding.subjects.unwrap_or_default(),
                    role_ref: binding.role_ref,
                    namespace: None,
                });
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
            path: String::new(),
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
        let roles: Vec<ClusterRole> = bootstrap_objects()
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
        assert!(policy.allows(&reader, &resource("list", "apps", "deployments", "", "")));
        assert!(!policy.allows(&reader, &create));
        assert!(!policy.allows(&ci, &create), "bound in team, not default");
        create.namespace = "team".into();
        assert!(policy.allows(&ci, &create));
        assert!(!policy.allows(&ci, &resource("list", "", "pods", "", "")));
    }
}
