//! The `authorizer` variable of admission's CEL expressions through the whole request chain:
//! ValidatingAdmissionPolicies and webhook match conditions ask the server's RBAC about the
//! requesting user (`authorizer.group(…).resource(…)…check(…)`, `requestResource`, `path`) and
//! about a service account (`serviceAccount`), and change their answer when the user's or the
//! account's bindings change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::nodeauthz_tests::{Cluster, user};
use crate::authn::User;

const JSON: &str = "application/json";
const CONFIGMAPS: &str = "/api/v1/namespaces/team/configmaps";

fn alice() -> User {
    user("alice", &["dev", "system:authenticated"])
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

/// Binds `subject` (a `User` or `ServiceAccount` subject) to ClusterRole `role` in `team`.
async fn bind(cluster: &Cluster, name: &str, role: &str, subject: Value) {
    cluster
        .create(
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some("team"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": "team"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": role},
                   "subjects": [subject]}),
        )
        .await;
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
}

fn alice_subject() -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"})
}

/// A cluster with namespace `team`, where alice may edit.
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
    bind(&cluster, "alice-edit", "edit", alice_subject()).await;
    cluster
}

/// Creates a policy on config map creates with `spec`'s other fields, bound with Deny.
async fn policy(cluster: &Cluster, name: &str, mut spec: Value) {
    spec["matchConstraints"] = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["configmaps"]}]});
    let group = "admissionregistration.k8s.io";
    cluster
        .create(
            group,
            "validatingadmissionpolicies",
            None,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
                   "spec": spec}),
        )
        .await;
    cluster
        .create(
            group,
            "validatingadmissionpolicybindings",
            None,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                   "spec": {"policyName": name, "validationActions": ["Deny"]}}),
        )
        .await;
}

/// Alice's create of config map `name`.
async fn create(cluster: &Cluster, name: &str) -> (StatusCode, Value) {
    cluster
        .send(&alice(), "POST", CONFIGMAPS, JSON, Some(configmap(name)))
        .await
}

/// Alice's dry-run create of `name`, sent until it answers `code` (the admission
/// configurations are read from the watch cache, which catches up a moment after a write).
async fn until(cluster: &Cluster, name: &str, code: StatusCode) -> Value {
    let uri = format!("{CONFIGMAPS}?dryRun=All");
    let mut last = Value::Null;
    for _ in 0..100 {
        let (got, answer) = cluster
            .send(&alice(), "POST", &uri, JSON, Some(configmap(name)))
            .await;
        if got == code {
            return answer;
        }
        last = answer;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never {code}: {last}");
}

#[tokio::test]
async fn policies_ask_the_authorizer_about_the_requester() {
    let cluster = cluster().await;
    policy(
        &cluster,
        "role-admins",
        json!({
            "failurePolicy": "Fail",
            "validations": [
                {"expression": "authorizer.group('rbac.authorization.k8s.io').resource('roles').namespace(object.metadata.namespace).check('create').allowed() || object.metadata.name.startsWith('open-')",
                 "messageExpression": "'only role admins may create config maps in ' + object.metadata.namespace + ' (' + authorizer.group('rbac.authorization.k8s.io').resource('roles').namespace(object.metadata.namespace).check('create').reason() + ')'"},
                // The request's own resource, and a path every user may get.
                {"expression": "authorizer.requestResource.check('create').allowed()",
                 "message": "requestResource refused"},
                {"expression": "authorizer.path('/healthz').check('get').allowed() && !authorizer.path('/metrics').check('get').allowed()",
                 "message": "path checks wrong"},
                {"expression": "!authorizer.group('').resource('nodes').check('delete').errored() && authorizer.group('').resource('nodes').check('delete').error() == ''",
                 "message": "errored"},
            ],
        }),
    )
    .await;
    let refused = until(&cluster, "c1", StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(
        refused["message"],
        "configmaps \"c1\" is forbidden: ValidatingAdmissionPolicy 'role-admins' with binding 'role-admins' denied request: only role admins may create config maps in team ()",
        "{refused}"
    );
    // Only the first validation failed: the others' checks were decided as expected.
    assert_eq!(refused["details"]["causes"].as_array().unwrap().len(), 1);
    let (code, body) = create(&cluster, "open-1").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // Once alice is an admin of the namespace, the check allows.
    bind(&cluster, "alice-admin", "admin", alice_subject()).await;
    let (code, body) = create(&cluster, "c1").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn policies_ask_about_a_service_account() {
    let cluster = cluster().await;
    policy(
        &cluster,
        "robot",
        json!({
            "failurePolicy": "Fail",
            "matchConditions": [{"name": "robots", "expression": "object.metadata.name.startsWith('robot-')"}],
            "validations": [
                {"expression": "authorizer.serviceAccount('team', 'robot').group('').resource('configmaps').namespace('team').check('create').allowed()",
                 "message": "the robot may not create config maps"},
            ],
        }),
    )
    .await;
    let refused = until(&cluster, "robot-1", StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: the robot may not create config maps"),
        "{refused}"
    );
    let sa = json!({"kind": "ServiceAccount", "name": "robot", "namespace": "team"});
    bind(&cluster, "robot-edit", "edit", sa).await;
    let (code, body) = create(&cluster, "robot-1").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn webhook_match_conditions_ask_the_authorizer() {
    let cluster = cluster().await;
    // A webhook nobody answers, called (and failing closed) only for users who may not
    // create roles in the namespace.
    cluster
        .create(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            None,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "gate"},
                "webhooks": [{"name": "gate.capstan.test", "sideEffects": "None",
                    "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "timeoutSeconds": 1,
                    "clientConfig": {"url": "https://127.0.0.1:1/gate"},
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["configmaps"]}],
                    "matchConditions": [{"name": "not-admin",
                        "expression": "!authorizer.group('rbac.authorization.k8s.io').resource('roles').namespace(request.namespace).check('create').allowed()"}]}]}),
        )
        .await;
    let refused = until(&cluster, "c1", StatusCode::INTERNAL_SERVER_ERROR).await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("Internal error occurred: failed calling webhook \"gate.capstan.test\""),
        "{refused}"
    );
    bind(&cluster, "alice-admin", "admin", alice_subject()).await;
    let (code, body) = create(&cluster, "c1").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}
