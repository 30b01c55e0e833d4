//! The controllers' bootstrap policy, as upstream's `controller_policy.go` and `policy.go` lay it
//! out: one ClusterRole `system:controller:<account>` per controller service account, bound by a
//! ClusterRoleBinding of the same name to the service account `kube-system/<account>` that the
//! controller manager runs that controller as (`--use-service-account-credentials`); the
//! token cleaner's Role and RoleBinding in `kube-system` (upstream's `namespace_policy.go`); the
//! controller manager's own `system:kube-controller-manager` role (leader election, the shared
//! informers, and making its controllers' service accounts and their tokens) bound to its user.
//!
//! Only the controllers Capstan runs are here. Where Capstan's controllers write with a JSON
//! merge patch (carrying the resourceVersion they read, so no less guarded) what upstream's
//! write with an update, their roles also grant `patch` on that resource ([`patch_too`]): the
//! volume binder's volumes and claims and their status, the protection controllers' finalizers,
//! the StatefulSet controller's claims. The node password cleaner has no upstream
//! counterpart (k3s runs it in its supervisor): its `capstan:controller:node-password-controller`
//! roles are ours, and the smallest that let it work (read a Node, delete the Secrets in
//! `kube-system`).

use serde_json::{Value, json};

/// The namespace the controllers' service accounts live in.
pub const ACCOUNT_NAMESPACE: &str = "kube-system";

/// The prefix of upstream's controller roles and their bindings.
const ROLE_PREFIX: &str = "system:controller:";

/// The controller manager's user when it authenticates with its own credential.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

const GROUP: &str = "rbac.authorization.k8s.io";

/// A rule granting `verbs` on `resources` of `groups`.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// A rule limited to the objects named `names`.
fn named(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "resourceNames": names, "verbs": verbs})
}

/// Capstan's additions to upstream's rules: `patch` where upstream's controller updates.
fn patch_too(resources: &[&str]) -> Value {
    rule(&["patch"], &[""], resources)
}

/// Upstream's `eventsRule`: writing Events in both groups that serve them.
fn events() -> Value {
    rule(
        &["create", "update", "patch"],
        &["", "events.k8s.io"],
        &["events"],
    )
}

/// Every controller service account upstream's bootstrap policy binds a cluster role to (the
/// ones Capstan's controllers run as), with that role's rules in upstream's order.
pub fn controller_roles() -> Vec<(&'static str, Vec<Value>)> {
    let apps = &["extensions", "apps"][..];
    vec![
        (
            "cronjob-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &["batch"],
                    &["cronjobs"],
                ),
                rule(
                    &[
                        "get", "list", "watch", "create", "update", "delete", "patch",
                    ],
                    &["batch"],
                    &["jobs"],
                ),
                rule(&["update"], &["batch"], &["cronjobs/status"]),
                rule(&["update"], &["batch"], &["cronjobs/finalizers"]),
                rule(&["list", "watch", "delete"], &[""], &["pods"]),
                events(),
            ],
        ),
        (
            "daemon-set-controller",
            vec![
                rule(&["get", "list", "watch"], apps, &["daemonsets"]),
                rule(&["update"], apps, &["daemonsets/status"]),
                rule(&["update"], apps, &["daemonsets/finalizers"]),
                rule(&["list", "watch"], &[""], &["nodes"]),
                rule(
                    &["list", "watch", "create", "delete", "patch"],
                    &[""],
                    &["pods"],
                ),
                rule(&["create"], &[""], &["pods/binding"]),
                rule(
                    &[
                        "get", "list", "watch", "create", "delete", "update", "patch",
                    ],
                    &["apps"],
                    &["controllerrevisions"],
                ),
                events(),
            ],
        ),
        (
            "deployment-controller",
            vec![
                rule(&["get", "list", "watch", "update"], apps, &["deployments"]),
                rule(&["update"], apps, &["deployments/status"]),
                rule(&["update"], apps, &["deployments/finalizers"]),
                rule(
                    &[
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                rule(&["get", "list", "watch", "update"], &[""], &["pods"]),
                events(),
            ],
        ),
        (
            "disruption-controller",
            vec![
                rule(&["get", "list", "watch"], apps, &["deployments"]),
                rule(
                    &["get", "list", "watch"],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                rule(
                    &["get", "list", "watch"],
                    &[""],
                    &["replicationcontrollers"],
                ),
                rule(
                    &["get", "list", "watch"],
                    &["policy"],
                    &["poddisruptionbudgets"],
                ),
                rule(&["get", "list", "watch"], &["apps"], &["statefulsets"]),
                rule(&["update"], &["policy"], &["poddisruptionbudgets/status"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&["get"], &["*"], &["*/scale"]),
                events(),
            ],
        ),
        (
            "endpoint-controller",
            vec![
                rule(&["get", "list", "watch"], &[""], &["services", "pods"]),
                rule(
                    &["get", "list", "watch", "create", "update", "delete"],
                    &[""],
                    &["endpoints"],
                ),
                rule(&["create"], &[""], &["endpoints/restricted"]),
                events(),
            ],
        ),
        (
            "endpointslice-controller",
            vec![
                rule(
                    &["get", "list", "watch"],
                    &[""],
                    &["services", "pods", "nodes"],
                ),
                rule(&["update"], &[""], &["services/finalizers"]),
                rule(
                    &["get", "list", "watch", "create", "update", "delete"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
                events(),
            ],
        ),
        (
            "endpointslicemirroring-controller",
            vec![
                rule(&["get", "list", "watch"], &[""], &["services", "endpoints"]),
                rule(&["update"], &[""], &["services/finalizers"]),
                rule(&["update"], &[""], &["endpoints/finalizers"]),
                rule(
                    &["get", "list", "watch", "create", "update", "delete"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
                events(),
            ],
        ),
        (
            "ephemeral-volume-controller",
            vec![
                rule(&["get", "list", "watch"], &[""], &["pods"]),
                rule(&["update"], &[""], &["pods/finalizers"]),
                rule(
                    &["get", "list", "watch", "create"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
                events(),
            ],
        ),
        (
            "generic-garbage-collector",
            vec![
                rule(
                    &["get", "list", "watch", "patch", "update", "delete"],
                    &["*"],
                    &["*"],
                ),
                events(),
            ],
        ),
        (
            "horizontal-pod-autoscaler",
            vec![
                rule(
                    &["get", "list", "watch"],
                    &["autoscaling"],
                    &["horizontalpodautoscalers"],
                ),
                rule(
                    &["update"],
                    &["autoscaling"],
                    &["horizontalpodautoscalers/status"],
                ),
                rule(&["get", "update"], &["*"], &["*/scale"]),
                rule(&["list"], &[""], &["pods"]),
                rule(&["list"], &["metrics.k8s.io"], &["pods"]),
                rule(&["get", "list"], &["custom.metrics.k8s.io"], &["*"]),
                rule(&["get", "list"], &["external.metrics.k8s.io"], &["*"]),
                events(),
            ],
        ),
        (
            "job-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update", "patch"],
                    &["batch"],
                    &["jobs"],
                ),
                rule(&["update"], &["batch"], &["jobs/status"]),
                rule(&["update"], &["batch"], &["jobs/finalizers"]),
                rule(
                    &["list", "watch", "create", "delete", "patch"],
                    &[""],
                    &["pods"],
                ),
                events(),
            ],
        ),
        (
            "namespace-controller",
            vec![
                rule(&["get", "list", "watch", "delete"], &[""], &["namespaces"]),
                rule(
                    &["update"],
                    &[""],
                    &["namespaces/finalize", "namespaces/status"],
                ),
                rule(
                    &["get", "list", "watch", "delete", "deletecollection"],
                    &["*"],
                    &["*"],
                ),
            ],
        ),
        (
            "node-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update", "delete", "patch"],
                    &[""],
                    &["nodes"],
                ),
                rule(&["patch", "update"], &[""], &["nodes/status"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&["list", "watch", "get", "delete"], &[""], &["pods"]),
                events(),
            ],
        ),
        (
            "persistent-volume-binder",
            vec![
                rule(
                    &["get", "list", "watch", "update", "create", "delete"],
                    &[""],
                    &["persistentvolumes"],
                ),
                rule(&["update"], &[""], &["persistentvolumes/status"]),
                rule(
                    &["get", "list", "watch", "update"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
                rule(&["update"], &[""], &["persistentvolumeclaims/status"]),
                rule(
                    &["list", "watch", "get", "create", "delete"],
                    &[""],
                    &["pods"],
                ),
                rule(
                    &["get", "list", "watch"],
                    &["storage.k8s.io"],
                    &["storageclasses"],
                ),
                rule(&["list", "watch"], &[""], &["nodes"]),
                events(),
                rule(&["watch"], &[""], &["events"]),
                rule(&["get"], &[""], &["services"]),
                patch_too(&[
                    "persistentvolumes",
                    "persistentvolumes/status",
                    "persistentvolumeclaims",
                    "persistentvolumeclaims/status",
                ]),
            ],
        ),
        (
            "pod-garbage-collector",
            vec![
                rule(&["list", "watch", "delete"], &[""], &["pods"]),
                rule(&["get", "list", "watch"], &[""], &["nodes"]),
                rule(&["patch"], &[""], &["pods/status"]),
            ],
        ),
        (
            "replicaset-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                rule(
                    &["update"],
                    &["apps", "extensions"],
                    &["replicasets/status"],
                ),
                rule(
                    &["update"],
                    &["apps", "extensions"],
                    &["replicasets/finalizers"],
                ),
                rule(
                    &["list", "watch", "patch", "create", "delete"],
                    &[""],
                    &["pods"],
                ),
                events(),
            ],
        ),
        (
            "replication-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &[""],
                    &["replicationcontrollers"],
                ),
                rule(&["update"], &[""], &["replicationcontrollers/status"]),
                rule(&["update"], &[""], &["replicationcontrollers/finalizers"]),
                rule(
                    &["list", "watch", "patch", "create", "delete"],
                    &[""],
                    &["pods"],
                ),
                events(),
            ],
        ),
        (
            "resourcequota-controller",
            vec![
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["update"], &[""], &["resourcequotas/status"]),
                events(),
            ],
        ),
        (
            "service-account-controller",
            vec![rule(&["create"], &[""], &["serviceaccounts"]), events()],
        ),
        (
            "statefulset-controller",
            vec![
                rule(&["list", "watch"], &[""], &["pods"]),
                rule(&["get", "list", "watch"], &["apps"], &["statefulsets"]),
                rule(&["update"], &["apps"], &["statefulsets/status"]),
                rule(&["update"], &["apps"], &["statefulsets/finalizers"]),
                rule(
                    &["get", "create", "delete", "update", "patch"],
                    &[""],
                    &["pods"],
                ),
                rule(
                    &[
                        "get", "create", "delete", "update", "patch", "list", "watch",
                    ],
                    &["apps"],
                    &["controllerrevisions"],
                ),
                rule(
                    &["get", "create", "list", "watch"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
                rule(&["update", "delete"], &[""], &["persistentvolumeclaims"]),
                rule(&["update"], &[""], &["pods/finalizers"]),
                events(),
                patch_too(&["persistentvolumeclaims"]),
            ],
        ),
        (
            "certificate-controller",
            vec![
                rule(
                    &["get", "list", "watch", "delete"],
                    &["certificates.k8s.io"],
                    &["certificatesigningrequests"],
                ),
                rule(
                    &["update"],
                    &["certificates.k8s.io"],
                    &[
                        "certificatesigningrequests/status",
                        "certificatesigningrequests/approval",
                    ],
                ),
                // Capstan's approver also grants a node's own kubelet-serving requests after
                // reading its Node's addresses (upstream leaves those to a human).
                named(
                    &["approve"],
                    &["certificates.k8s.io"],
                    &["signers"],
                    &[
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                    ],
                ),
                rule(&["get"], &[""], &["nodes"]),
                named(
                    &["sign"],
                    &["certificates.k8s.io"],
                    &["signers"],
                    &[
                        "kubernetes.io/legacy-unknown",
                        "kubernetes.io/kube-apiserver-client",
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                    ],
                ),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                events(),
            ],
        ),
        (
            "pvc-protection-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
                rule(&["list", "watch", "get"], &[""], &["pods"]),
                events(),
                patch_too(&["persistentvolumeclaims"]),
            ],
        ),
        (
            "pv-protection-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &[""],
                    &["persistentvolumes"],
                ),
                events(),
                patch_too(&["persistentvolumes"]),
            ],
        ),
        (
            "ttl-after-finished-controller",
            vec![
                rule(&["get", "list", "watch", "delete"], &["batch"], &["jobs"]),
                events(),
            ],
        ),
        (
            "root-ca-cert-publisher",
            vec![
                rule(&["create", "update"], &[""], &["configmaps"]),
                events(),
            ],
        ),
    ]
}

/// The service account of upstream's token cleaner, whose role is a Role in `kube-system`.
pub const TOKEN_CLEANER: &str = "token-cleaner";

/// The service account of Capstan's node password cleaner.
pub const NODE_PASSWORD_CONTROLLER: &str = "node-password-controller";

/// Every service account a controller of Capstan's runs as, whatever kind of role it has.
pub fn controller_accounts() -> Vec<&'static str> {
    let mut accounts: Vec<&'static str> = controller_roles().iter().map(|(a, _)| *a).collect();
    accounts.extend([TOKEN_CLEANER, NODE_PASSWORD_CONTROLLER]);
    accounts.sort_unstable();
    accounts
}

/// Upstream's `system:kube-controller-manager` role: what the controller manager does with its
/// own credential (leader election, the shared informers' lists and watches, making its
/// controllers' service accounts and their tokens).
fn controller_manager_rules() -> Vec<Value> {
    vec![
        events(),
        rule(&["create"], &["coordination.k8s.io"], &["leases"]),
        named(
            &["get", "update"],
            &["coordination.k8s.io"],
            &["leases"],
            &["kube-controller-manager"],
        ),
        rule(&["create"], &[""], &["endpoints"]),
        named(
            &["get", "update"],
            &[""],
            &["endpoints"],
            &["kube-controller-manager"],
        ),
        rule(&["create"], &[""], &["secrets", "serviceaccounts"]),
        rule(&["delete"], &[""], &["secrets"]),
        rule(
            &["get"],
            &[""],
            &["namespaces", "secrets", "serviceaccounts", "configmaps"],
        ),
        rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
        ),
        rule(&["list", "watch"], &["*"], &["*"]),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
    ]
}

/// The controllers' bootstrap objects as `(plural, object)`, each object's metadata made by
/// `meta` (the bootstrap labels and annotations).
pub(crate) fn bootstrap_objects(meta: &dyn Fn(&str) -> Value) -> Vec<(&'static str, Value)> {
    let cluster_role = |name: &str, rules: Vec<Value>| {
        (
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": meta(name), "rules": rules}),
        )
    };
    let account = |name: &str| json!([{"kind": "ServiceAccount", "name": name, "namespace": ACCOUNT_NAMESPACE}]);
    let cluster_binding = |name: &str, subjects: Value| {
        (
            "clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": meta(name),
                   "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
                   "subjects": subjects}),
        )
    };
    let in_namespace = |name: &str| {
        let mut metadata = meta(name);
        metadata["namespace"] = json!(ACCOUNT_NAMESPACE);
        metadata
    };
    let role = |name: &str, rules: Vec<Value>| {
        (
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": in_namespace(name), "rules": rules}),
        )
    };
    let role_binding = |name: &str, subjects: Value| {
        (
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": in_namespace(name),
                   "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": name},
                   "subjects": subjects}),
        )
    };
    let mut objects = Vec::new();
    for (name, rules) in controller_roles() {
        let role_name = format!("{ROLE_PREFIX}{name}");
        objects.push(cluster_role(&role_name, rules));
        objects.push(cluster_binding(&role_name, account(name)));
    }
    // Upstream's token cleaner removes expired bootstrap token Secrets, in kube-system only.
    let cleaner = format!("{ROLE_PREFIX}{TOKEN_CLEANER}");
    objects.push(role(
        &cleaner,
        vec![
            rule(&["get", "list", "watch", "delete"], &[""], &["secrets"]),
            events(),
        ],
    ));
    objects.push(role_binding(&cleaner, account(TOKEN_CLEANER)));
    // Capstan's node password cleaner: it confirms a Node is gone with a live read, then
    // deletes that node's password Secret in kube-system (it reads Secrets from the shared
    // informers, under the controller manager's credential).
    let passwords = format!("capstan:controller:{NODE_PASSWORD_CONTROLLER}");
    objects.push(cluster_role(
        &passwords,
        vec![rule(&["get"], &[""], &["nodes"])],
    ));
    objects.push(cluster_binding(
        &passwords,
        account(NODE_PASSWORD_CONTROLLER),
    ));
    objects.push(role(
        &passwords,
        vec![rule(&["get", "delete"], &[""], &["secrets"])],
    ));
    objects.push(role_binding(&passwords, account(NODE_PASSWORD_CONTROLLER)));
    objects.push(cluster_role(
        CONTROLLER_MANAGER_USER,
        controller_manager_rules(),
    ));
    objects.push(cluster_binding(
        CONTROLLER_MANAGER_USER,
        json!([{"apiGroup": GROUP, "kind": "User", "name": CONTROLLER_MANAGER_USER}]),
    ));
    objects
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::authn::User;
    use crate::authz::Attributes;
    use crate::authz::tests_support::{bootstrapped, bootstrapped_with};

    fn account(name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{ACCOUNT_NAMESPACE}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ACCOUNT_NAMESPACE}"),
                "system:authenticated".into(),
            ],
            ..User::default()
        }
    }

    fn manager() -> User {
        User {
            name: CONTROLLER_MANAGER_USER.into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        }
    }

    /// `verb` on `group`/`resource` (`resource/sub` for a subresource) in `namespace`.
    fn at(verb: &str, group: &str, resource: &str, namespace: &str) -> Attributes {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: namespace.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn every_account_has_one_role_and_a_binding_to_its_service_account() {
        let objects = bootstrap_objects(&|name| json!({"name": name}));
        let accounts = controller_accounts();
        let mut unique = accounts.clone();
        unique.dedup();
        assert_eq!(unique, accounts, "an account is listed twice");
        for account in &accounts {
            let bound: Vec<&Value> = objects
                .iter()
                .filter(|(plural, _)| plural.ends_with("bindings"))
                .map(|(_, binding)| binding)
                .filter(|binding| {
                    binding["subjects"].as_array().unwrap().iter().any(|s| {
                        s["kind"] == "ServiceAccount"
                            && s["name"] == *account
                            && s["namespace"] == ACCOUNT_NAMESPACE
                    })
                })
                .collect();
            assert!(!bound.is_empty(), "{account} is bound to nothing");
            for binding in bound {
                // Each binding's role exists, named as its binding.
                let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
                let role_name = &binding["roleRef"]["name"];
                assert_eq!(&binding["metadata"]["name"], role_name);
                let plural = if role_kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                };
                assert!(
                    objects.iter().any(|(p, role)| *p == plural
                        && &role["metadata"]["name"] == role_name
                        && !role["rules"].as_array().unwrap().is_empty()),
                    "{account}: no {role_kind} {role_name}"
                );
            }
        }
        // Upstream's roles carry upstream's names.
        for (name, _) in controller_roles() {
            assert!(objects.iter().any(|(p, role)| *p == "clusterroles"
                && role["metadata"]["name"] == format!("system:controller:{name}")));
        }
    }

    #[tokio::test]
    async fn controllers_may_do_their_work_and_little_else() {
        let authorizer = bootstrapped();
        for (name, attributes) in [
            (
                "deployment-controller",
                at("create", "apps", "replicasets", "default"),
            ),
            (
                "deployment-controller",
                at("update", "apps", "deployments/status", "default"),
            ),
            (
                "deployment-controller",
                at("create", "", "events", "default"),
            ),
            (
                "deployment-controller",
                at("patch", "events.k8s.io", "events", "default"),
            ),
            ("replicaset-controller", at("create", "", "pods", "default")),
            (
                "daemon-set-controller",
                at("create", "", "pods/binding", "default"),
            ),
            (
                "job-controller",
                at("update", "batch", "jobs/finalizers", "default"),
            ),
            ("node-controller", at("delete", "", "pods", "default")),
            ("node-controller", at("patch", "", "nodes/status", "")),
            (
                "certificate-controller",
                at("create", "authorization.k8s.io", "subjectaccessreviews", ""),
            ),
            ("token-cleaner", at("delete", "", "secrets", "kube-system")),
            (
                "node-password-controller",
                at("delete", "", "secrets", "kube-system"),
            ),
            ("node-password-controller", at("get", "", "nodes", "")),
            ("certificate-controller", at("get", "", "nodes", "")),
            (
                "service-account-controller",
                at("create", "", "serviceaccounts", "team"),
            ),
            (
                "root-ca-cert-publisher",
                at("update", "", "configmaps", "team"),
            ),
            (
                "disruption-controller",
                at("get", "apps", "statefulsets/scale", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("update", "apps", "deployments/scale", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("get", "example.com", "widgets/scale", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at(
                    "update",
                    "autoscaling",
                    "horizontalpodautoscalers/status",
                    "default",
                ),
            ),
            (
                "horizontal-pod-autoscaler",
                at("list", "metrics.k8s.io", "pods", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("get", "custom.metrics.k8s.io", "pods", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("list", "external.metrics.k8s.io", "queue", "default"),
            ),
            // The garbage collector and the namespace controller reach every kind, custom
            // resources too.
            (
                "generic-garbage-collector",
                at("delete", "example.com", "widgets", "default"),
            ),
            (
                "generic-garbage-collector",
                at("patch", "example.com", "widgets", "default"),
            ),
            (
                "namespace-controller",
                at("deletecollection", "example.com", "widgets", "team"),
            ),
            (
                "namespace-controller",
                at("update", "", "namespaces/finalize", ""),
            ),
            (
                "resourcequota-controller",
                at("list", "example.com", "widgets", "team"),
            ),
        ] {
            assert!(
                authorizer
                    .authorize(&account(name), &attributes)
                    .await
                    .allowed,
                "{name} refused {attributes:?}"
            );
        }
        let mut sign = at("sign", "certificates.k8s.io", "signers", "");
        sign.name = "kubernetes.io/kubelet-serving".into();
        assert!(
            authorizer
                .authorize(&account("certificate-controller"), &sign)
                .await
                .allowed
        );
        sign.name = "example.com/other".into();
        assert!(
            !authorizer
                .authorize(&account("certificate-controller"), &sign)
                .await
                .allowed
        );
        for (name, attributes) in [
            (
                "deployment-controller",
                at("create", "", "secrets", "default"),
            ),
            ("deployment-controller", at("delete", "", "pods", "default")),
            (
                "replicaset-controller",
                at("create", "apps", "deployments", "default"),
            ),
            ("token-cleaner", at("delete", "", "secrets", "default")),
            (
                "node-password-controller",
                at("delete", "", "secrets", "default"),
            ),
            (
                "generic-garbage-collector",
                at("create", "", "pods", "default"),
            ),
            (
                "namespace-controller",
                at("create", "", "configmaps", "team"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("update", "apps", "deployments", "default"),
            ),
            (
                "horizontal-pod-autoscaler",
                at("get", "metrics.k8s.io", "pods", "default"),
            ),
            ("no-such-controller", at("get", "", "pods", "default")),
        ] {
            assert!(
                !authorizer
                    .authorize(&account(name), &attributes)
                    .await
                    .allowed,
                "{name} allowed {attributes:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_controller_manager_is_a_cluster_admin_only_when_its_controllers_share_it() {
        let own = bootstrapped();
        for allowed in [
            at("list", "example.com", "widgets", ""),
            at("watch", "", "secrets", ""),
            at("create", "", "serviceaccounts/token", "kube-system"),
            at("create", "", "serviceaccounts", "kube-system"),
            at("get", "", "serviceaccounts", "kube-system"),
            at("create", "coordination.k8s.io", "leases", "kube-system"),
        ] {
            assert!(
                own.authorize(&manager(), &allowed).await.allowed,
                "{allowed:?}"
            );
        }
        let mut lease = at("update", "coordination.k8s.io", "leases", "kube-system");
        lease.name = "kube-controller-manager".into();
        assert!(own.authorize(&manager(), &lease).await.allowed);
        lease.name = "kube-scheduler".into();
        assert!(!own.authorize(&manager(), &lease).await.allowed);
        let delete_pods = at("delete", "", "pods", "default");
        assert!(!own.authorize(&manager(), &delete_pods).await.allowed);
        let shared = bootstrapped_with(true);
        assert!(shared.authorize(&manager(), &delete_pods).await.allowed);
    }
}
