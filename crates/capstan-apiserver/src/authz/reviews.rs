//! The review APIs, which answer a question instead of storing an object:
//! `authentication.k8s.io/v1` SelfSubjectReview (who am I: `kubectl auth whoami`),
//! TokenReview (whose is this token: what components that delegate authentication to the API
//! server ask, e.g. a metrics endpoint's proxy or `capstan scheduler`'s secure port) and
//! `authorization.k8s.io/v1` SelfSubjectAccessReview (may I: `kubectl auth can-i`),
//! SubjectAccessReview (may they: the same question about the user in its spec, which the CSR
//! approver asks about requesters) and
//! SelfSubjectRulesReview (what may I: `kubectl auth can-i --list`). The
//! answers come from the same authenticator and authorizer ([`Authorizer`]) every request goes
//! through.

use capstan_api::StatusError;
use capstan_api::field::{FieldError, Path};
use serde_json::{Value, json};

use crate::authn::{Authenticator, User};
use crate::authz::{Attributes, Authorizer};
use crate::status::ApiError;

/// The attributes a SelfSubjectAccessReview asks about.
fn attributes(resource: Option<&Value>, non_resource: Option<&Value>) -> Attributes {
    let text = |v: Option<&Value>, key: &str| {
        v.and_then(|v| v.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match resource {
        Some(_) => Attributes {
            resource_request: true,
            verb: text(resource, "verb"),
            group: text(resource, "group"),
            version: text(resource, "version"),
            resource: text(resource, "resource"),
            subresource: text(resource, "subresource"),
            name: text(resource, "name"),
            namespace: text(resource, "namespace"),
            ..Attributes::default()
        },
        None => Attributes {
            verb: text(non_resource, "verb"),
            path: text(non_resource, "path"),
            ..Attributes::default()
        },
    }
}

/// Answers a review of `kind` for `user`, asking `authorizer` (or, for a TokenReview,
/// `authenticator`).
pub(crate) async fn answer(
    kind: &str,
    body: &Value,
    user: &User,
    authorizer: &Authorizer,
    authenticator: &Authenticator,
) -> Result<Value, ApiError> {
    match kind {
        "TokenReview" => token_review(body, authenticator).await,
        "SelfSubjectReview" => {
            let info = user_info(user);
            Ok(json!({
                "kind": "SelfSubjectReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null},
                "status": {"userInfo": info},
            }))
        }
        "SelfSubjectAccessReview" => access_review(kind, body, user, authorizer).await,
        "SubjectAccessReview" => {
            // The user asked about is the spec's (the controllers ask for requesters).
            let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
            let strings = |key: &str| -> Vec<String> {
                spec.get(key)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let subject = User {
                name: spec
                    .get("user")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                uid: spec
                    .get("uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                groups: strings("groups"),
                extra: spec
                    .get("extra")
                    .and_then(|e| serde_json::from_value(e.clone()).ok())
                    .unwrap_or_default(),
            };
            if subject.name.is_empty() && subject.groups.is_empty() {
                return Err(invalid_spec(
                    kind,
                    "user",
                    capstan_api::field::BadValue::Str(String::new()),
                    "at least one of user or group must be specified",
                ));
            }
            access_review(kind, body, &subject, authorizer).await
        }
        "SelfSubjectRulesReview" => {
            let namespace = body
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if namespace.is_empty() {
                return Err(StatusError::bad_request("no namespace on request").into());
            }
            let (rules, incomplete, errors) = authorizer.rules_review(user, namespace).await;
            Ok(rules_review(&rules, incomplete, &errors))
        }
        other => Err(StatusError::internal(&format!("no review for {other}")).into()),
    }
}

/// A user as the reviews' `UserInfo` (uid and extra left out when empty, as Go omits them).
fn user_info(user: &User) -> Value {
    let mut info = json!({"username": user.name});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    info["groups"] = json!(user.groups);
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

/// The audiences this server's own tokens are for (upstream's `--api-audiences`, which
/// defaults to the service account issuer).
fn api_audiences() -> Vec<String> {
    vec![crate::authn::serviceaccount::ISSUER.to_owned()]
}

/// Answers a TokenReview as upstream's registry does: the token is authenticated by the token
/// authenticators alone; the status carries the user, or the refusal as `error`, and the
/// audiences of the review (its own, else the API's) the token is good for. A token good for
/// none of the requested audiences is not authenticated.
async fn token_review(body: &Value, authenticator: &Authenticator) -> Result<Value, ApiError> {
    let token = body
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if token.is_empty() {
        return Err(StatusError::bad_request(
            "token is required for TokenReview in authentication",
        )
        .into());
    }
    let requested: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let audiences = if requested.is_empty() {
        api_audiences()
    } else {
        // This server's authenticators accept tokens for the API's audiences only.
        let api = api_audiences();
        requested.into_iter().filter(|a| api.contains(a)).collect()
    };
    // The spec comes back as sent, token included, as upstream echoes the object.
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match authenticator.authenticate_token(token).await {
        Some(user) if !audiences.is_empty() => {
            json!({"authenticated": true, "user": user_info(&user), "audiences": audiences})
        }
        Some(_) => json!({
            "user": {},
            "error": "token audiences are invalid for the requested audiences",
        }),
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    }))
}

/// Answers an access review of `kind` about `user`: the spec echoed, the decision in the status.
async fn access_review(
    kind: &str,
    body: &Value,
    user: &User,
    authorizer: &Authorizer,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let decision = match (resource, non_resource) {
        (Some(_), None) | (None, Some(_)) => {
            authorizer
                .authorize(user, &attributes(resource, non_resource))
                .await
        }
        (Some(_), Some(_)) => {
            return Err(invalid_spec(
                kind,
                "nonResourceAttributes",
                capstan_api::field::BadValue::Other("{...}".into()),
                "cannot be specified in combination with resourceAttributes",
            ));
        }
        (None, None) => {
            return Err(invalid_spec(
                kind,
                "resourceAttributes",
                capstan_api::field::BadValue::Null,
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
    };
    // Upstream writes the reason an authorizer gave (the Node authorizer's refusals, a
    // webhook's answer), whether one denied outright, and the errors of those that could not
    // decide.
    let mut status = json!({"allowed": decision.allowed});
    if decision.denied {
        status["denied"] = json!(true);
    }
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    if !decision.error.is_empty() {
        status["evaluationError"] = json!(decision.error);
    }
    let mut metadata = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if metadata.get("creationTimestamp").is_none() {
        metadata["creationTimestamp"] = Value::Null;
    }
    Ok(json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

/// A SelfSubjectRulesReview's answer: each rule as a resource rule (when it names resources)
/// and as a non-resource rule (when it names URLs), in order; the evaluation errors joined as
/// Go prints an aggregate error. The spec is not echoed, as upstream's.
fn rules_review(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
    incomplete: bool,
    errors: &[String],
) -> Value {
    let present = |v: &Option<Vec<String>>| v.as_ref().filter(|v| !v.is_empty()).cloned();
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        if let Some(resources) = present(&rule.resources) {
            let mut entry = json!({"verbs": rule.verbs});
            if let Some(groups) = present(&rule.api_groups) {
                entry["apiGroups"] = json!(groups);
            }
            entry["resources"] = json!(resources);
            if let Some(names) = present(&rule.resource_names) {
                entry["resourceNames"] = json!(names);
            }
            resource_rules.push(entry);
        }
        if let Some(urls) = present(&rule.non_resource_urls) {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    });
    match errors {
        [] => {}
        [one] => status["evaluationError"] = json!(one),
        many => status["evaluationError"] = json!(format!("[{}]", many.join(", "))),
    }
    json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": status,
    })
}

/// Upstream's 422 for an access review of `kind` whose spec breaks a rule (`field` is `value`).
fn invalid_spec(
    kind: &str,
    field: &str,
    value: capstan_api::field::BadValue,
    detail: &str,
) -> ApiError {
    StatusError::invalid(
        "authorization.k8s.io",
        kind,
        "",
        &[FieldError::invalid(
            &Path::new("spec").child(field),
            value,
            detail,
        )],
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(groups: &[&str]) -> User {
        User {
            name: "alice".into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::default()
        }
    }

    #[tokio::test]
    async fn access_reviews_follow_the_authorizer() {
        let authorizer = crate::authz::tests_support::bootstrapped();
        let ask = async |user: &User, spec: Value| {
            answer(
                "SelfSubjectAccessReview",
                &json!({"spec": spec}),
                user,
                &authorizer,
                &Authenticator::default(),
            )
            .await
        };
        let pods = json!({"resourceAttributes": {"verb": "create", "resource": "pods"}});
        let admin = user(&["system:masters", "system:authenticated"]);
        let plain = user(&["devs", "system:authenticated"]);
        assert_eq!(
            ask(&admin, pods.clone()).await.unwrap()["status"]["allowed"],
            true
        );
        assert_eq!(ask(&plain, pods).await.unwrap()["status"]["allowed"], false);
        let own = json!({"resourceAttributes": {"verb": "create",
            "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"}});
        assert_eq!(ask(&plain, own).await.unwrap()["status"]["allowed"], true);
        let health = json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}});
        assert_eq!(
            ask(&plain, health).await.unwrap()["status"]["allowed"],
            true
        );
        let error = ask(&plain, json!({})).await.unwrap_err();
        assert_eq!(error.status().code(), 422);
        let who = answer(
            "SelfSubjectReview",
            &json!({}),
            &plain,
            &authorizer,
            &Authenticator::default(),
        )
        .await
        .unwrap();
        assert_eq!(who["status"]["userInfo"]["username"], "alice");
    }

    #[tokio::test]
    async fn subject_access_reviews_ask_about_the_user_in_the_spec() {
        let authorizer = crate::authz::tests_support::bootstrapped();
        let asker = user(&["devs", "system:authenticated"]);
        let review = |spec: Value| json!({"spec": spec});
        let pods = json!({"verb": "create", "resource": "pods"});
        let allowed = answer(
            "SubjectAccessReview",
            &review(json!({"user": "root", "groups": ["system:masters"],
                           "resourceAttributes": pods})),
            &asker,
            &authorizer,
            &Authenticator::default(),
        )
        .await
        .unwrap();
        assert_eq!(allowed["kind"], "SubjectAccessReview");
        assert_eq!(allowed["status"]["allowed"], true);
        let denied = answer(
            "SubjectAccessReview",
            &review(json!({"user": "bob", "resourceAttributes": pods})),
            &asker,
            &authorizer,
            &Authenticator::default(),
        )
        .await
        .unwrap();
        assert_eq!(denied["status"]["allowed"], false);
        let nobody = answer(
            "SubjectAccessReview",
            &review(json!({"resourceAttributes": pods})),
            &asker,
            &authorizer,
            &Authenticator::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(nobody.status().code(), 422);
        assert!(
            nobody
                .status()
                .status
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("spec.user: Invalid value: \"\": at least one of user or group must be specified"),
            "{:?}",
            nobody.status().status.message
        );
    }
}
