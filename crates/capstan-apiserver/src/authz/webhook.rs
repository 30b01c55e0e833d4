//! Webhook authorization, as upstream's (`--authorization-mode=...,Webhook`,
//! `--authorization-webhook-config-file`, `k8s.io/apiserver/plugin/pkg/authorizer/webhook`):
//! a request the authorizers before it in the mode list had no opinion on is described to the
//! service the kubeconfig file names as a SubjectAccessReview (`authorization.k8s.io/v1`, or
//! `v1beta1` with `--authorization-webhook-version`): resource attributes (namespace, verb,
//! group, version, resource, subresource, name, the field selector's requirements) or
//! non-resource ones (path, verb), and the user, groups, extra and uid. The answer's `status`
//! decides: `allowed` allows, `denied` refuses and stops the union (upstream's
//! `DecisionDeny`), neither is no opinion; `reason` is kept for the 403, `evaluationError` is
//! logged.
//!
//! Answers are remembered by the review's spec, allowed ones for
//! `--authorization-webhook-cache-authorized-ttl` (5 m), others for
//! `--authorization-webhook-cache-unauthorized-ttl` (30 s), unless the requester-controlled
//! attributes are too long to be worth keeping. A webhook that cannot be asked has no opinion
//! and the error is returned beside it (upstream's failure policy `NoOpinion`; the chain then
//! answers 500 when nobody else allowed the request).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capstan_api::selector::{FieldOperator, FieldSelector};
use serde::Serialize;
use serde_json::Value;

use crate::authn::User;
use crate::authz::Attributes;
use crate::remote::{Backoff, Service};

/// The SubjectAccessReview version spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V1beta1,
}

impl Version {
    /// `--authorization-webhook-version`, in upstream's words when it is neither.
    pub(crate) fn parse(text: &str) -> Result<Version, String> {
        match text {
            "v1" => Ok(Version::V1),
            "v1beta1" => Ok(Version::V1beta1),
            other => Err(format!(
                "unsupported webhook authorizer version {other:?}, supported versions are \
                 \"v1\", \"v1beta1\""
            )),
        }
    }
}

/// What the webhook decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Allowed, with the webhook's reason.
    Allow(String),
    /// Refused outright: no later authorizer is asked. The error when the answer was both
    /// allowed and denied.
    Deny(String, Option<String>),
    /// No opinion, with the reason, and the error when the webhook could not be asked.
    NoOpinion(String, Option<String>),
}

/// An answer's status, as remembered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Status {
    allowed: bool,
    denied: bool,
    reason: String,
}

/// The review sent, in Go's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata,
    spec: &'a Value,
    status: EmptyStatus,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    creation_timestamp: Option<()>,
}

#[derive(Serialize)]
struct EmptyStatus {
    allowed: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceAttributes<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    verb: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field_selector: Option<Selector>,
}

#[derive(Serialize)]
struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Serialize)]
struct Requirement {
    key: String,
    operator: &'static str,
    values: Vec<String>,
}

#[derive(Serialize)]
struct NonResourceAttributes<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    path: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    verb: &'a str,
}

/// The spec, in Go's field order (`groups` is `group` in `v1beta1`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_attributes: Option<ResourceAttributes<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    non_resource_attributes: Option<NonResourceAttributes<'a>>,
    #[serde(skip_serializing_if = "str::is_empty")]
    user: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extra: &'a BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
}

/// The field selector's requirements, as upstream's webhook describes them (`=`/`==` as
/// `In`, `!=` as `NotIn`); none for an empty or unparsable selector.
fn field_selector(selector: &str) -> Option<Selector> {
    let parsed = FieldSelector::parse(selector).ok()?;
    let requirements: Vec<Requirement> = parsed
        .requirements()
        .iter()
        .map(|r| Requirement {
            key: r.field.clone(),
            operator: match r.operator {
                FieldOperator::Equals => "In",
                FieldOperator::NotEquals => "NotIn",
            },
            values: vec![r.value.clone()],
        })
        .collect();
    (!requirements.is_empty()).then_some(Selector { requirements })
}

/// Requests whose requester-controlled attributes are longer than this are not cached
/// (upstream's `maxControlledAttrCacheSize`).
const MAX_CACHED_ATTRIBUTES: usize = 10_000;
/// The most answers remembered (upstream's LRU holds 8192).
const CACHE_ENTRIES: usize = 8192;

/// The webhook authorizer with its cache.
#[derive(Debug)]
pub(crate) struct AuthorizationWebhook {
    service: Service,
    version: Version,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    backoff: Backoff,
    cache: Mutex<HashMap<String, (Status, Instant)>>,
}

impl AuthorizationWebhook {
    /// Asks `service` with `version`, remembering allowed answers for `authorized_ttl` and
    /// others for `unauthorized_ttl` (zero: not at all).
    pub(crate) fn new(
        service: Service,
        version: Version,
        authorized_ttl: Duration,
        unauthorized_ttl: Duration,
    ) -> AuthorizationWebhook {
        AuthorizationWebhook {
            service,
            version,
            authorized_ttl,
            unauthorized_ttl,
            backoff: Backoff::WEBHOOK,
            cache: Mutex::default(),
        }
    }

    /// The review's spec (as JSON; its text is the cache key).
    fn spec(&self, user: &User, attrs: &Attributes) -> Value {
        let spec = Spec {
            resource_attributes: attrs.resource_request.then(|| ResourceAttributes {
                namespace: &attrs.namespace,
                verb: &attrs.verb,
                group: &attrs.group,
                version: &attrs.version,
                resource: &attrs.resource,
                subresource: &attrs.subresource,
                name: &attrs.name,
                field_selector: field_selector(&attrs.field_selector),
            }),
            non_resource_attributes: (!attrs.resource_request).then(|| NonResourceAttributes {
                path: &attrs.path,
                verb: &attrs.verb,
            }),
            user: &user.name,
            groups: &user.groups,
            extra: &user.extra,
            uid: &user.uid,
        };
        let mut value = serde_json::to_value(&spec).unwrap_or_default();
        if self.version == Version::V1beta1
            && let Some(groups) = value.as_object_mut().and_then(|o| o.remove("groups"))
        {
            value["group"] = groups;
        }
        value
    }

    /// What the webhook decides about `user` doing what `attrs` describe.
    pub(crate) async fn authorize(&self, user: &User, attrs: &Attributes) -> Verdict {
        let spec = self.spec(user, attrs);
        let key = spec.to_string();
        let now = Instant::now();
        let cached = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .get(&key)
                .filter(|(_, until)| *until > now)
                .map(|(status, _)| status.clone())
        };
        let status = match cached {
            Some(status) => status,
            None => {
                let status = match self.review(&spec).await {
                    Ok(status) => status,
                    Err(error) => {
                        tracing::error!(%error, "Failed to make webhook authorizer request");
                        return Verdict::NoOpinion(String::new(), Some(error));
                    }
                };
                let ttl = if status.allowed {
                    self.authorized_ttl
                } else {
                    self.unauthorized_ttl
                };
                if controlled_length(attrs) < MAX_CACHED_ATTRIBUTES && !ttl.is_zero() {
                    let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                    if cache.len() >= CACHE_ENTRIES {
                        cache.retain(|_, (_, until)| *until > now);
                        if cache.len() >= CACHE_ENTRIES {
                            cache.clear();
                        }
                    }
                    cache.insert(key, (status.clone(), Instant::now() + ttl));
                }
                status
            }
        };
        match (status.allowed, status.denied) {
            (true, true) => Verdict::Deny(
                status.reason,
                Some("webhook subject access review returned both allow and deny response".into()),
            ),
            (_, true) => Verdict::Deny(status.reason, None),
            (true, false) => Verdict::Allow(status.reason),
            (false, false) => Verdict::NoOpinion(status.reason, None),
        }
    }

    /// Posts the review; the answer's status.
    async fn review(&self, spec: &Value) -> Result<Status, String> {
        let review = Review {
            kind: "SubjectAccessReview",
            api_version: match self.version {
                Version::V1 => "authorization.k8s.io/v1",
                Version::V1beta1 => "authorization.k8s.io/v1beta1",
            },
            metadata: Metadata {
                creation_timestamp: None,
            },
            spec,
            status: EmptyStatus { allowed: false },
        };
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let answer = self.service.post_retrying(&body, self.backoff).await?;
        let status = &answer["status"];
        if let Some(error) = status["evaluationError"].as_str().filter(|e| !e.is_empty()) {
            tracing::warn!(%error, "authorization webhook evaluation error");
        }
        Ok(Status {
            allowed: status["allowed"] == true,
            denied: status["denied"] == true,
            reason: status["reason"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// The length of what the requester controls in the attributes.
fn controlled_length(attrs: &Attributes) -> usize {
    [
        &attrs.namespace,
        &attrs.verb,
        &attrs.group,
        &attrs.version,
        &attrs.resource,
        &attrs.subresource,
        &attrs.name,
        &attrs.path,
    ]
    .iter()
    .map(|s| s.len())
    .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    /// A webhook on loopback (plain HTTP: the transport is `remote`'s) answering SubjectAccessReviews
    /// by `answer`, keeping the reviews it was sent.
    async fn webhook(
        answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<Value>>>) {
        crate::test_support::review_webhook("/authorize", answer).await
    }

    fn authorizer(url: &str, version: Version) -> AuthorizationWebhook {
        let service = Service::new(capstan_client::credentials::ServiceKubeconfig {
            server: url.to_owned(),
            ..Default::default()
        })
        .unwrap();
        let mut webhook = AuthorizationWebhook::new(
            service,
            version,
            Duration::from_secs(300),
            Duration::from_secs(30),
        );
        webhook.backoff = Backoff {
            initial: Duration::from_millis(1),
            steps: 2,
        };
        webhook
    }

    /// Allows `get` of pods, denies secrets, no opinion otherwise, both for `both`.
    fn reply(review: &Value) -> (u16, Value) {
        let attrs = &review["spec"]["resourceAttributes"];
        let status = match attrs["resource"].as_str() {
            Some("pods") => json!({"allowed": true, "reason": "pods are fine"}),
            Some("secrets") => json!({"allowed": false, "denied": true, "reason": "no secrets"}),
            Some("both") => json!({"allowed": true, "denied": true}),
            Some("broken") => return (500, json!({})),
            _ => json!({"allowed": false, "reason": "not mine", "evaluationError": "meh"}),
        };
        (
            200,
            json!({"apiVersion": review["apiVersion"], "kind": "SubjectAccessReview", "status": status}),
        )
    }

    fn jane() -> User {
        User {
            name: "jane".into(),
            uid: "u-1".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            extra: [("scopes".to_owned(), vec!["x".to_owned()])].into(),
        }
    }

    fn resource(resource: &str) -> Attributes {
        Attributes {
            resource_request: true,
            verb: "list".into(),
            group: "".into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: "ns".into(),
            field_selector: "spec.nodeName=n1,metadata.name!=x".into(),
            ..Attributes::default()
        }
    }

    #[tokio::test]
    async fn reviews_describe_the_request_and_user_as_upstream_does() {
        let (url, seen) = webhook(reply).await;
        let webhook = authorizer(&url, Version::V1);
        assert_eq!(
            webhook.authorize(&jane(), &resource("pods")).await,
            Verdict::Allow("pods are fine".into())
        );
        assert_eq!(
            seen.lock().unwrap()[0],
            json!({
                "kind": "SubjectAccessReview",
                "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": null},
                "spec": {
                    "resourceAttributes": {
                        "namespace": "ns", "verb": "list", "version": "v1", "resource": "pods",
                        "fieldSelector": {"requirements": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["x"]},
                            {"key": "spec.nodeName", "operator": "In", "values": ["n1"]},
                        ]},
                    },
                    "user": "jane",
                    "groups": ["devs", "system:authenticated"],
                    "extra": {"scopes": ["x"]},
                    "uid": "u-1",
                },
                "status": {"allowed": false},
            })
        );
        let path = Attributes {
            verb: "get".into(),
            path: "/healthz".into(),
            ..Attributes::default()
        };
        let beta = authorizer(&url, Version::V1beta1);
        assert_eq!(
            beta.authorize(&jane(), &path).await,
            Verdict::NoOpinion("not mine".into(), None)
        );
        let sent = seen.lock().unwrap()[1].clone();
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1beta1");
        assert_eq!(
            sent["spec"]["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
        // v1beta1 calls the groups `group`.
        assert_eq!(
            sent["spec"]["group"],
            json!(["devs", "system:authenticated"])
        );
        assert!(sent["spec"].get("groups").is_none());
    }

    #[tokio::test]
    async fn denied_refuses_and_neither_is_no_opinion() {
        let (url, _) = webhook(reply).await;
        let webhook = authorizer(&url, Version::V1);
        assert_eq!(
            webhook.authorize(&jane(), &resource("secrets")).await,
            Verdict::Deny("no secrets".into(), None)
        );
        assert_eq!(
            webhook.authorize(&jane(), &resource("configmaps")).await,
            Verdict::NoOpinion("not mine".into(), None)
        );
        assert_eq!(
            webhook.authorize(&jane(), &resource("both")).await,
            Verdict::Deny(
                String::new(),
                Some("webhook subject access review returned both allow and deny response".into())
            )
        );
    }

    #[tokio::test]
    async fn answers_are_cached_by_spec_with_their_ttls_and_errors_are_not() {
        let (url, seen) = webhook(reply).await;
        let mut webhook = authorizer(&url, Version::V1);
        let count = || seen.lock().unwrap().len();
        for _ in 0..3 {
            webhook.authorize(&jane(), &resource("pods")).await;
            webhook.authorize(&jane(), &resource("configmaps")).await;
        }
        assert_eq!(count(), 2);
        // Another user is another question.
        let bob = User {
            name: "bob".into(),
            ..User::default()
        };
        webhook.authorize(&bob, &resource("pods")).await;
        assert_eq!(count(), 3);
        // A failing webhook: no opinion with the error, asked again next time (retried once
        // here, as a 500 is transient).
        let Verdict::NoOpinion(_, Some(error)) =
            webhook.authorize(&jane(), &resource("broken")).await
        else {
            panic!("expected no opinion with an error");
        };
        assert!(error.contains("has prevented the request"), "{error}");
        webhook.authorize(&jane(), &resource("broken")).await;
        assert_eq!(count(), 7);
        // Refusals expire after the unauthorized TTL, allowances live on.
        webhook.unauthorized_ttl = Duration::ZERO;
        webhook.cache.lock().unwrap().clear();
        webhook.authorize(&jane(), &resource("configmaps")).await;
        webhook.authorize(&jane(), &resource("configmaps")).await;
        assert_eq!(count(), 9);
        webhook.authorize(&jane(), &resource("pods")).await;
        webhook.authorize(&jane(), &resource("pods")).await;
        assert_eq!(count(), 10);
        // Overlong attributes are never cached.
        let long = Attributes {
            name: "n".repeat(MAX_CACHED_ATTRIBUTES),
            ..resource("pods")
        };
        webhook.authorize(&jane(), &long).await;
        webhook.authorize(&jane(), &long).await;
        assert_eq!(count(), 12);
    }

    #[tokio::test]
    async fn the_union_asks_the_modes_in_order_and_a_denial_ends_it() {
        use crate::authz::{Decision, Mode, Modes};
        let (url, _) = webhook(reply).await;
        let mut union = crate::authz::tests_support::bootstrapped();
        union.modes = Modes {
            order: vec![Mode::Node, Mode::Webhook, Mode::Rbac],
            webhook: Some(Arc::new(authorizer(&url, Version::V1))),
        };
        let get = |plural: &str| Attributes {
            verb: "get".into(),
            ..resource_named(plural)
        };
        assert_eq!(
            union.authorize(&jane(), &get("pods")).await,
            Decision {
                allowed: true,
                reason: "pods are fine".into(),
                ..Decision::default()
            }
        );
        assert_eq!(
            union.authorize(&jane(), &get("secrets")).await,
            Decision {
                reason: "no secrets".into(),
                denied: true,
                ..Decision::default()
            }
        );
        // No opinion: RBAC (nothing for jane) decides; the webhook's reason is kept.
        assert_eq!(
            union.authorize(&jane(), &get("configmaps")).await,
            Decision {
                reason: "not mine".into(),
                ..Decision::default()
            }
        );
        // RBAC's discovery grant stands behind the webhook's no opinion.
        let discovery = Attributes {
            verb: "get".into(),
            path: "/api".into(),
            ..Attributes::default()
        };
        assert!(union.authorize(&jane(), &discovery).await.allowed);
        // system:masters is never asked about.
        let root = User {
            name: "root".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        assert!(union.authorize(&root, &get("secrets")).await.allowed);
        // An unreachable webhook: no opinion, with its error.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        union.modes.webhook = Some(Arc::new(authorizer(
            &format!("http://127.0.0.1:{port}/"),
            Version::V1,
        )));
        let decision = union.authorize(&jane(), &get("configmaps")).await;
        assert!(!decision.allowed && !decision.denied);
        assert!(
            decision.error.contains("connection refused"),
            "{decision:?}"
        );
        // The webhook cannot list rules: a rules review is incomplete, as upstream's.
        let (_, incomplete, errors) = union.rules_review(&jane(), "ns").await;
        assert!(incomplete);
        assert_eq!(
            errors,
            ["webhook authorizer does not support user rule resolution"]
        );
        // AlwaysDeny has no opinion, with upstream's reason; AlwaysAllow allows.
        union.modes.order = vec![Mode::AlwaysDeny, Mode::AlwaysAllow];
        assert!(union.authorize(&jane(), &get("secrets")).await.allowed);
        union.modes.order = vec![Mode::AlwaysDeny];
        assert_eq!(
            union.authorize(&jane(), &get("secrets")).await.reason,
            "Everything is forbidden."
        );
    }

    fn resource_named(plural: &str) -> Attributes {
        Attributes {
            field_selector: String::new(),
            ..resource(plural)
        }
    }

    #[test]
    fn modes_are_parsed_as_upstream_checks_them() {
        use crate::authz::Mode;
        assert_eq!(
            Mode::parse_list("Node,RBAC,Webhook"),
            Ok(vec![Mode::Node, Mode::Rbac, Mode::Webhook])
        );
        assert_eq!(
            Mode::parse_list("RBAC,RBAC").unwrap_err(),
            "authorization-mode \"RBAC\" has mode specified more than once"
        );
        assert_eq!(
            Mode::parse_list("Magic").unwrap_err(),
            "authorization-mode \"Magic\" is not a valid mode"
        );
        assert_eq!(
            Mode::parse_list("").unwrap_err(),
            "at least one authorization-mode must be passed"
        );
    }

    #[test]
    fn versions_are_v1_and_v1beta1() {
        assert_eq!(Version::parse("v1beta1"), Ok(Version::V1beta1));
        assert_eq!(
            Version::parse("v2").unwrap_err(),
            "unsupported webhook authorizer version \"v2\", supported versions are \"v1\", \"v1beta1\""
        );
    }
}
