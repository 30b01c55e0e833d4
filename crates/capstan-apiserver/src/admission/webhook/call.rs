//! One webhook, compiled from its configuration, and calling it: the AdmissionReview it is
//! sent, where it is sent (a URL, or a Service resolved through its endpoints), and what its
//! answer means.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::StatusError;
use capstan_api::catalog::Resource;
use capstan_api::field::go_quote;
use capstan_api::selector::LabelSelector;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ValidatingWebhook, WebhookClientConfig,
};
use serde_json::{Value, json};

use super::super::{Attributes, Operation};
use super::client::{Client, Target, Why};
use super::matching::{Rule, operation_name};
use crate::registry::Registries;
use crate::status::ApiError;

/// One webhook, ready to match and call.
#[derive(Debug)]
pub(crate) struct Hook {
    /// The configuration it belongs to.
    pub configuration: String,
    pub name: String,
    pub rules: Vec<Rule>,
    /// `matchPolicy: Equivalent`: a request through another version or group of a resource
    /// its rules name is sent to it, converted.
    pub equivalent: bool,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
    pub timeout: Duration,
    /// `sideEffects`.
    pub side_effects: String,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// The AdmissionReview version it is sent (the first of its list the server speaks).
    pub review_version: Option<&'static str>,
    /// Where it is and how it is reached.
    pub client: Client,
    /// Its `matchConditions`: each one's name and compiled expression (or why it does not
    /// compile).
    pub conditions: Vec<(String, Result<capstan_api::cel::Expression, String>)>,
}

/// What a webhook answered.
#[derive(Debug)]
pub(crate) enum Called {
    /// Allowed, with a JSON patch for mutating webhooks.
    Allowed { patch: Option<Vec<u8>> },
    /// Refused, with the Status it gave.
    Refused { result: Option<Value> },
}

impl Called {
    /// The refusal, as upstream reports it.
    pub(crate) fn refusal(self, webhook: &str) -> ApiError {
        match self {
            Called::Refused { result } => super::refusal(webhook, result),
            Called::Allowed { .. } => super::refusal(webhook, None),
        }
    }
}

/// Why a webhook could not be called (upstream's `ErrCallingWebhook`, or a dry run it does
/// not support).
#[derive(Debug)]
pub(crate) enum Failure {
    Calling(String),
    DryRunUnsupported,
}

fn rules(rules: Option<&Vec<RuleWithOperations>>) -> Vec<Rule> {
    rules
        .into_iter()
        .flatten()
        .map(|rule| Rule {
            operations: rule.operations.clone().unwrap_or_default(),
            groups: rule.api_groups.clone().unwrap_or_default(),
            versions: rule.api_versions.clone().unwrap_or_default(),
            resources: rule.resources.clone().unwrap_or_default(),
            scope: rule.scope.clone().unwrap_or_else(|| "*".to_owned()),
        })
        .collect()
}

pub(crate) fn selector(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> LabelSelector {
    // Stored selectors were validated; one that no longer parses matches nothing.
    LabelSelector::from_api(selector).unwrap_or_else(|_| LabelSelector::nothing())
}

/// The client of a webhook configured by `config` (a conversion webhook's configuration has
/// the same shape).
pub(crate) fn client(config: &WebhookClientConfig) -> Client {
    let service = config.service.as_ref().map(|s| {
        (
            s.namespace.as_str(),
            s.name.as_str(),
            s.port,
            s.path.as_deref(),
        )
    });
    let bundle = config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    Client::new(Target::new(config.url.as_deref(), service), bundle)
}

fn conditions(
    conditions: Option<&[k8s_openapi::api::admissionregistration::v1::MatchCondition]>,
) -> Vec<(String, Result<capstan_api::cel::Expression, String>)> {
    conditions
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                capstan_api::cel::Expression::compile(&c.expression),
            )
        })
        .collect()
}

/// The first review version of `versions` the server speaks (`AdmissionReview` and
/// `ConversionReview` both have `v1` and `v1beta1`).
pub(crate) fn review_version(versions: &[String]) -> Option<&'static str> {
    versions.iter().find_map(|v| match v.as_str() {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    })
}

impl Hook {
    /// A validating webhook of `configuration`, compiled.
    pub(crate) fn validating(configuration: &str, hook: &ValidatingWebhook) -> Self {
        Hook {
            configuration: configuration.to_owned(),
            name: hook.name.clone(),
            rules: rules(hook.rules.as_ref()),
            equivalent: hook.match_policy.as_deref() == Some("Equivalent"),
            namespace_selector: selector(hook.namespace_selector.as_ref()),
            object_selector: selector(hook.object_selector.as_ref()),
            ignore_failures: hook.failure_policy.as_deref() == Some("Ignore"),
            timeout: Duration::from_secs(hook.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64),
            side_effects: hook.side_effects.clone(),
            reinvoke: false,
            review_version: review_version(&hook.admission_review_versions),
            client: client(&hook.client_config),
            conditions: conditions(hook.match_conditions.as_deref()),
        }
    }

    /// A mutating webhook: its fields are a validating webhook's and the reinvocation policy.
    pub(crate) fn mutating(configuration: &str, hook: &MutatingWebhook) -> Self {
        let shared = serde_json::to_value(hook)
            .and_then(serde_json::from_value::<ValidatingWebhook>)
            .unwrap_or_default();
        Hook {
            reinvoke: hook.reinvocation_policy.as_deref() == Some("IfNeeded"),
            ..Hook::validating(configuration, &shared)
        }
    }

    /// What a failure to call this webhook means: a refusal under `Fail`, nothing under
    /// `Ignore` (but a dry run it does not support is refused either way).
    pub(crate) fn failed(&self, failure: Failure) -> Result<(), ApiError> {
        match failure {
            Failure::DryRunUnsupported => Err(StatusError::bad_request(&format!(
                "admission webhook {} does not support dry run",
                go_quote(&self.name)
            ))
            .into()),
            Failure::Calling(reason) => {
                let message = format!("failed calling webhook {}: {reason}", go_quote(&self.name));
                if self.ignore_failures {
                    tracing::warn!(configuration = %self.configuration, webhook = %self.name, %reason, "failed calling webhook, failing open");
                    Ok(())
                } else {
                    tracing::warn!(configuration = %self.configuration, webhook = %self.name, %reason, "failed calling webhook, failing closed");
                    Err(StatusError::internal(&message).into())
                }
            }
        }
    }

    /// Sends the AdmissionReview of this request; the webhook's answer, checked.
    pub(crate) async fn call(
        &self,
        table: &Arc<Registries>,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        mutating: bool,
    ) -> Result<Called, Failure> {
        if attrs.dry_run && !matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(Failure::DryRunUnsupported);
        }
        let Some(version) = self.review_version else {
            return Err(Failure::Calling(
                "webhook does not accept known AdmissionReview versions (v1, v1beta1)".to_owned(),
            ));
        };
        let uid = crate::registry::object::new_uid();
        let review = review(version, &uid, attrs, object, old);
        let url = self.client.url(self.timeout);
        let answer = tokio::time::timeout(self.timeout, self.client.post(table, &url, &review))
            .await
            .unwrap_or_else(|_| Err(Why::Transport("context deadline exceeded".to_owned())))
            .map_err(|why| {
                Failure::Calling(match why {
                    // Go's url.Error names the request.
                    Why::Transport(why) => {
                        format!("failed to call webhook: Post {}: {why}", go_quote(&url))
                    }
                    Why::Answer(why) => format!("failed to call webhook: {why}"),
                })
            })?;
        let called = verify(version, &uid, &answer, mutating).map_err(Failure::Calling)?;
        if let Some(sink) = attrs.warnings {
            for warning in answer["response"]["warnings"]
                .as_array()
                .into_iter()
                .flatten()
            {
                sink.add(warning.as_str().unwrap_or_default());
            }
        }
        // Its audit annotations, each key prefixed with the webhook's name as upstream's.
        if let (Some(audit), Some(annotations)) = (
            attrs.audit,
            answer["response"]["auditAnnotations"].as_object(),
        ) {
            for (key, value) in annotations {
                if let Some(value) = value.as_str() {
                    audit.add(format!("{}/{key}", self.name), value);
                }
            }
        }
        Ok(called)
    }
}

/// The user a request is admitted as; the server's own writes are the API server's.
fn user_info(attrs: &Attributes<'_>) -> Value {
    match attrs.user {
        Some(user) => {
            let mut info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                info["uid"] = user.uid.clone().into();
            }
            if !user.extra.is_empty() {
                info["extra"] = json!(user.extra);
            }
            info
        }
        None => {
            json!({"username": "system:apiserver", "groups": ["system:authenticated", "system:masters"]})
        }
    }
}

/// The AdmissionReview of a request, in `version`.
pub(crate) fn review(
    version: &str,
    uid: &str,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    // A subresource's body (a Scale, connect options) is its own kind; the scale's is
    // `autoscaling/v1` `Scale` even where no object is at hand (a policy's `request`).
    let own_kind = object
        .filter(|_| !attrs.subresource.is_empty())
        .and_then(|o| Some((o["apiVersion"].as_str()?, o["kind"].as_str()?)))
        .filter(|(_, kind)| *kind != attrs.resource.kind)
        .or_else(|| (attrs.subresource == "scale").then_some(("autoscaling/v1", "Scale")));
    let kind_of = |resource: &Resource| match own_kind {
        Some((api_version, kind)) => {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            json!({"group": group, "version": version, "kind": kind})
        }
        None => {
            json!({"group": resource.group, "version": resource.version, "kind": resource.kind})
        }
    };
    let resource_of = |resource: &Resource| json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    // A webhook matched through an equivalent resource is sent that one as `kind` and
    // `resource`, and the request's own as `requestKind` and `requestResource`.
    let (kind, gvr) = (kind_of(attrs.resource), resource_of(attrs.resource));
    let requested = attrs.requested();
    let (request_kind, request_gvr) = (kind_of(requested), resource_of(requested));
    let options = match attrs.operation {
        Operation::Create => Some("CreateOptions"),
        Operation::Update => Some("UpdateOptions"),
        Operation::Delete => Some("DeleteOptions"),
        // Upstream sends connect requests without options.
        Operation::Connect => None,
    }
    .map(|kind| {
        let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
        if attrs.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        options
    });
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": request_kind,
        "requestResource": request_gvr,
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": operation_name(attrs.operation),
        "userInfo": user_info(attrs),
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": options,
    });
    if options.is_none() {
        request.as_object_mut().map(|r| r.remove("options"));
    }
    if !attrs.subresource.is_empty() {
        request["subResource"] = attrs.subresource.into();
        request["requestSubResource"] = attrs.subresource.into();
    }
    if attrs.name.is_empty() {
        request.as_object_mut().map(|r| r.remove("name"));
    }
    if attrs.namespace.is_empty() {
        request.as_object_mut().map(|r| r.remove("namespace"));
    }
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": request,
    })
}

/// Upstream's `VerifyAdmissionResponse`: the answer of a `version` review with `uid`.
pub(crate) fn verify(
    version: &str,
    uid: &str,
    answer: &Value,
    mutating: bool,
) -> Result<Called, String> {
    let response = &answer["response"];
    if !response.is_object() {
        return Err("webhook response was absent".to_owned());
    }
    let patch = response["patch"].as_str().filter(|p| !p.is_empty());
    let patch_type = &response["patchType"];
    if version == "v1" {
        let got = response["uid"].as_str().unwrap_or_default();
        if got != uid {
            return Err(format!(
                "expected response.uid={}, got {}",
                go_quote(uid),
                go_quote(got)
            ));
        }
        let (api_version, kind) = (
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default(),
        );
        if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
            let (group, gv_version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{gv_version}, Kind={kind}"
            ));
        }
        if mutating {
            if patch.is_some() && patch_type.is_null() {
                return Err("webhook returned response.patch but not response.patchType".to_owned());
            }
            if patch.is_none() && !patch_type.is_null() {
                return Err("webhook returned response.patchType but not response.patch".to_owned());
            }
            if let Some(kind) = patch_type.as_str()
                && kind != "JSONPatch"
            {
                return Err(if kind.is_empty() {
                    format!(
                        "webhook returned invalid response.patchType of {}",
                        go_quote(kind)
                    )
                } else {
                    format!("unsupported patch type {}", go_quote(kind))
                });
            }
        } else {
            if patch.is_some() {
                return Err("validating webhook may not return response.patch".to_owned());
            }
            if !patch_type.is_null() {
                return Err("validating webhook may not return response.patchType".to_owned());
            }
        }
    }
    if response["allowed"].as_bool() != Some(true) {
        let result = response.get("status").filter(|s| s.is_object()).cloned();
        return Ok(Called::Refused { result });
    }
    let patch = match patch.filter(|_| mutating) {
        Some(patch) => Some(super::decode_patch(patch)?),
        None => None,
    };
    Ok(Called::Allowed { patch })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(response: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let ok = verify(
            "v1",
            "u",
            &answer(json!({"uid": "u", "allowed": true})),
            false,
        )
        .unwrap();
        assert!(matches!(ok, Called::Allowed { patch: None }));
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "x", "allowed": true})),
                false
            )
            .unwrap_err(),
            "expected response.uid=\"u\", got \"x\""
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &json!({"apiVersion": "v1", "kind": "Pod", "response": {"uid": "u"}}),
                false
            )
            .unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Pod"
        );
        assert_eq!(
            verify("v1", "u", &json!({}), false).unwrap_err(),
            "webhook response was absent"
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                false
            )
            .unwrap_err(),
            "validating webhook may not return response.patch"
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                true
            )
            .unwrap_err(),
            "webhook returned response.patch but not response.patchType"
        );
        let patched = verify(
            "v1",
            "u",
            &answer(
                json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"}),
            ),
            true,
        )
        .unwrap();
        assert!(matches!(patched, Called::Allowed { patch: Some(p) } if p == b"[]"));
        // v1beta1 answers are not checked for their uid or kind.
        let old = verify(
            "v1beta1",
            "u",
            &json!({"response": {"allowed": false}}),
            false,
        )
        .unwrap();
        assert!(matches!(old, Called::Refused { result: None }));
    }

    #[test]
    fn refusals_read_as_upstreams() {
        let status = |e: ApiError| e.status().to_json();
        let denied = status(super::super::refusal(
            "deny.example.com",
            Some(json!({"code": 403, "message": "no pods named bad"})),
        ));
        assert_eq!(denied["code"], 403);
        assert_eq!(
            denied["message"],
            "admission webhook \"deny.example.com\" denied the request: no pods named bad"
        );
        let bare = status(super::super::refusal("deny.example.com", None));
        assert_eq!(bare["code"], 400);
        assert_eq!(
            bare["message"],
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
    }

    #[test]
    fn mutating_webhooks_keep_every_field_and_their_reinvocation() {
        let hook: MutatingWebhook = serde_json::from_value(json!({
            "name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1beta1"],
            "failurePolicy": "Ignore", "timeoutSeconds": 3, "reinvocationPolicy": "IfNeeded",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "port": 8443, "path": "/m"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "objectSelector": {"matchLabels": {"a": "b"}},
            "matchConditions": [{"name": "c", "expression": "true"}],
        }))
        .unwrap();
        let hook = Hook::mutating("conf", &hook);
        assert!(hook.reinvoke && hook.ignore_failures);
        assert_eq!(hook.timeout, Duration::from_secs(3));
        assert_eq!(hook.review_version, Some("v1beta1"));
        assert_eq!(hook.rules.len(), 1);
        assert_eq!(hook.conditions.len(), 1);
        assert_eq!(
            hook.client.url(hook.timeout),
            "https://svc.ns.svc:8443/m?timeout=3s"
        );
        assert!(!hook.object_selector.is_empty());
    }

    #[test]
    fn urls_split_into_host_and_port() {
        let config = |url: &str| WebhookClientConfig {
            url: Some(url.to_owned()),
            ..WebhookClientConfig::default()
        };
        let Target::Url { host, port, .. } = client(&config("https://127.0.0.1:8443/v")).target
        else {
            panic!()
        };
        assert_eq!((host.as_str(), port), ("127.0.0.1", 8443));
        let Target::Url { host, port, .. } = client(&config("https://[::1]")).target else {
            panic!()
        };
        assert_eq!((host.as_str(), port), ("::1", 443));
    }
}
