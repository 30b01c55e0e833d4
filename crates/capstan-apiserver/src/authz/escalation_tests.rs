//! RBAC escalation prevention through the whole request chain: a user bound to `admin` in one
//! namespace writes Roles and RoleBindings there only within what `admin` grants, cannot bind
//! `cluster-admin` or write ClusterRoles, and can once granted `escalate` or `bind`; refusals
//! are upstream's 403 with the missing rules listed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::nodeauthz_tests::{Cluster, user};
use crate::authn::User;

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const JSON: &str = "application/json";

fn alice() -> User {
    user("alice", &["dev", "system:authenticated"])
}

/// A cluster where alice is bound to `admin` in namespace `team`.
async fn cluster() -> Cluster {
    let cluster = Cluster::new().await;
    cluster
        .create(
            "",
            "namespaces",
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        )
        .await;
    bind(
        &cluster,
        "team",
        "alice-admin",
        "ClusterRole",
        "admin",
        "alice",
    )
    .await;
    cluster
}

async fn bind(cluster: &Cluster, ns: &str, name: &str, kind: &str, role: &str, who: &str) {
    cluster
        .create(
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some(ns),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                 "name": who}]}),
        )
        .await;
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
}

async fn post(cluster: &Cluster, path: &str, body: Value) -> (StatusCode, Value) {
    cluster
        .send(&alice(), "POST", &format!("{RBAC}{path}"), JSON, Some(body))
        .await
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": name}, "rules": rules})
}

fn binding(name: &str, kind: &str, role: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]})
}

fn refused(answer: &(StatusCode, Value), resource: &str, name: &str, missing: &str) {
    let (code, status) = answer;
    assert_eq!(*code, StatusCode::FORBIDDEN, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["details"],
        json!({"name": name, "group": "rbac.authorization.k8s.io", "kind": resource})
    );
    assert_eq!(
        status["message"],
        format!(
            "{resource}.rbac.authorization.k8s.io \"{name}\" is forbidden: user \"alice\" \
             (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC \
             permissions not currently held:\n{missing}"
        ),
        "{status}"
    );
}

#[tokio::test]
async fn a_namespace_admin_cannot_grant_more_than_admin() {
    let cluster = cluster().await;
    // Within admin's rules: allowed.
    let (code, body) = post(
        &cluster,
        "/namespaces/team/roles",
        role(
            "reader",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, body) = post(
        &cluster,
        "/namespaces/team/rolebindings",
        binding("bob-edit", "ClusterRole", "edit"),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // `*` on `*`: admin holds many verbs, never `*`.
    let answer = post(
        &cluster,
        "/namespaces/team/roles",
        role(
            "all",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        ),
    )
    .await;
    refused(
        &answer,
        "roles",
        "all",
        "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}",
    );
    // cluster-admin bound in the namespace.
    let answer = post(
        &cluster,
        "/namespaces/team/rolebindings",
        binding("bob-root", "ClusterRole", "cluster-admin"),
    )
    .await;
    refused(
        &answer,
        "rolebindings",
        "bob-root",
        "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n\
         {NonResourceURLs:[\"*\"], Verbs:[\"*\"]}",
    );
    // Nodes are not admin's to grant; a dry run is refused the same way.
    let answer = post(
        &cluster,
        "/namespaces/team/roles?dryRun=All",
        role(
            "nodes",
            json!([{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get"]}]),
        ),
    )
    .await;
    refused(
        &answer,
        "roles",
        "nodes",
        "{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}",
    );
    // Another namespace's admin rules do not count here (and creating there is not allowed).
    let (code, _) = post(
        &cluster,
        "/namespaces/default/roles",
        role(
            "reader",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    // A binding to a role that does not exist is NotFound, as upstream's.
    let (code, body) = post(
        &cluster,
        "/namespaces/team/rolebindings",
        binding("ghost", "Role", "ghost"),
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        body["message"],
        "roles.rbac.authorization.k8s.io \"ghost\" not found"
    );
}

#[tokio::test]
async fn updates_are_checked_too_but_not_owner_reference_changes() {
    let cluster = cluster().await;
    let (code, created) = post(
        &cluster,
        "/namespaces/team/roles",
        role(
            "reader",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let path = format!("{RBAC}/namespaces/team/roles/reader");
    let widen = json!({"rules": [{"apiGroups": [""], "resources": ["pods", "secrets/status"],
                                  "verbs": ["get"]}]});
    let answer = cluster
        .send(
            &alice(),
            "PATCH",
            &path,
            "application/merge-patch+json",
            Some(widen),
        )
        .await;
    refused(
        &answer,
        "roles",
        "reader",
        "{APIGroups:[\"\"], Resources:[\"secrets/status\"], Verbs:[\"get\"]}",
    );
    let finalizer = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    let (code, body) = cluster
        .send(
            &alice(),
            "PATCH",
            &path,
            "application/merge-patch+json",
            Some(finalizer),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn escalate_and_bind_let_a_user_grant_what_they_do_not_hold() {
    let cluster = cluster().await;
    // ClusterRoles need rules held through ClusterRoleBindings: alice has none.
    let (code, body) = cluster
        .send(
            &alice(),
            "POST",
            &format!("{RBAC}/clusterroles"),
            JSON,
            Some(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": "wide"},
                        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
        )
        .await;
    // She may not even create ClusterRoles (the ordinary authorization, before the check).
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    // With `escalate` on roles, any Role; with `bind` on cluster-admin, that binding.
    cluster
        .create(
            "rbac.authorization.k8s.io",
            "roles",
            Some("team"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "escalator", "namespace": "team"},
                   "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                              "verbs": ["escalate"]},
                             {"apiGroups": ["rbac.authorization.k8s.io"],
                              "resources": ["clusterroles"], "verbs": ["bind"],
                              "resourceNames": ["cluster-admin"]}]}),
        )
        .await;
    bind(
        &cluster,
        "team",
        "alice-escalates",
        "Role",
        "escalator",
        "alice",
    )
    .await;
    let (code, body) = post(
        &cluster,
        "/namespaces/team/roles",
        role(
            "all",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, body) = post(
        &cluster,
        "/namespaces/team/rolebindings",
        binding("bob-root", "ClusterRole", "cluster-admin"),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // `bind` was granted for cluster-admin only.
    let answer = post(
        &cluster,
        "/namespaces/team/rolebindings",
        binding("bob-nodes", "ClusterRole", "system:node"),
    )
    .await;
    assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);
}

#[tokio::test]
async fn aggregated_cluster_roles_need_full_authority() {
    let cluster = Cluster::new().await;
    cluster
        .create(
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "role-writer"},
                   "rules": [{"apiGroups": ["rbac.authorization.k8s.io"],
                              "resources": ["clusterroles"], "verbs": ["create"]},
                             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        )
        .await;
    cluster
        .create(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "carol"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "role-writer"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                 "name": "carol"}]}),
        )
        .await;
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
    let carol = user("carol", &["system:authenticated"]);
    let cluster_role = |name: &str, aggregated: bool| {
        let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        if aggregated {
            role["aggregationRule"] =
                json!({"clusterRoleSelectors": [{"matchLabels": {"team": "x"}}]});
        }
        role
    };
    let path = format!("{RBAC}/clusterroles");
    let (code, body) = cluster
        .send(
            &carol,
            "POST",
            &path,
            JSON,
            Some(cluster_role("pod-getter", false)),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, body) = cluster
        .send(
            &carol,
            "POST",
            &path,
            JSON,
            Some(cluster_role("gathering", true)),
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "clusterroles.rbac.authorization.k8s.io \"gathering\" is forbidden: must have \
         cluster-admin privileges to use the aggregationRule"
    );
}

#[tokio::test]
async fn self_subject_rules_reviews_list_the_rules_of_each_binding() {
    let cluster = cluster().await;
    let path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let review = |namespace: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
               "spec": {"namespace": namespace}})
    };
    let (code, body) = cluster
        .send(&alice(), "POST", path, JSON, Some(review("team")))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(body["kind"], "SelfSubjectRulesReview");
    assert_eq!(body["status"]["incomplete"], false);
    let rules = body["status"]["resourceRules"].as_array().unwrap();
    // admin's (aggregated) rules in `team`, and the self reviews every user has.
    assert!(
        rules.iter().any(
            |r| r["resources"].as_array().unwrap().contains(&json!("pods"))
                && r["verbs"].as_array().unwrap().contains(&json!("delete"))
        ),
        "{body}"
    );
    assert!(
        rules
            .iter()
            .any(|r| r["resources"]
                == json!(["selfsubjectaccessreviews", "selfsubjectrulesreviews"]))
    );
    let urls = body["status"]["nonResourceRules"].as_array().unwrap();
    assert!(urls.iter().any(|r| {
        r["nonResourceURLs"]
            .as_array()
            .unwrap()
            .contains(&json!("/healthz"))
    }));
    // Elsewhere she holds only the defaults.
    let (_, other) = cluster
        .send(&alice(), "POST", path, JSON, Some(review("default")))
        .await;
    assert!(other["status"]["resourceRules"].as_array().unwrap().len() < rules.len());
    // A namespace is required.
    let (code, body) = cluster
        .send(&alice(), "POST", path, JSON, Some(review("")))
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["message"], "no namespace on request");
}
