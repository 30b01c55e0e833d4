//! Upstream's ValidatingAdmissionPolicy admission plugin: CEL policies
//! (`admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy) applied through their
//! bindings (ValidatingAdmissionPolicyBinding), in the validating phase, before the validating
//! webhooks.
//!
//! For each policy whose `matchConstraints` cover the request (rules with resource names,
//! excluded rules, namespace and object selectors, as the webhooks' matcher decides, with its
//! `matchPolicy`: under `Equivalent` a rule naming an equivalent resource matches, and the
//! policy's expressions then see the objects converted to that version, and `request` with
//! that resource as `kind`/`resource` and the request's own as `requestKind`/
//! `requestResource`), each
//! binding naming it whose `matchResources` (if any) cover it too is evaluated once per
//! parameter object it refers to (`paramRef`: one by name, or every one its selector picks, in
//! the request's namespace unless it names one; none found is a refusal under
//! `parameterNotFoundAction: Deny`). The expressions read `object`, `oldObject`, `request`,
//! `params`, `namespaceObject`, `variables` ([`compiled`]) and `authorizer` (upstream's
//! authorization library, decided by the server's authorizer for the request's user:
//! [`super::cel_authz`]).
//!
//! A failed validation is a refusal under the binding's `Deny`, a `Warning` header under
//! `Warn`; `Audit` puts the failure in the request's audit events
//! (`validation.policy.admission.k8s.io/validation_failure`), beside the policy's
//! `auditAnnotations` (`<policy>/<key>`). The first refusal answers the request as
//! upstream's does: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>'
//! with binding '<binding>' denied request: <message>`, with the validation's reason (422
//! `Invalid` by default) and the message as the one cause, so kubectl prints
//! `The <kind> "<name>" is invalid: : ValidatingAdmissionPolicy …`. Expressions that fail to
//! evaluate, and bindings that cannot be configured (parameters of an unknown kind, or none
//! found), refuse under the policy's `failurePolicy: Fail` and are skipped under `Ignore`.
//!
//! Deletes are judged from the chain's mutating phase, as the validating webhooks are, with
//! the stored object as `oldObject`. The policies themselves and the other admission
//! configurations are exempt, as upstream's are.
//!
//! The policies and bindings are read from the watch cache at every request and compiled once
//! per version of the set (their stored bytes compared without decoding).
//!
//! Not yet: the runtime cost budget, the policy's status (upstream's type checking of
//! expressions against the matched kinds' schemas), and audit annotations.

mod compiled;

use std::sync::{Arc, Mutex};

use capstan_api::StatusError;
use capstan_api::cel::Activation;
use capstan_api::selector::LabelSelector;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde_json::Value;

use super::webhook::matching::{self, Context};
use super::{Attributes, Mutation, Operation, Plugin, Review, Validation, Verdict};
use crate::registry::{ListOptions, Registries, Registry};
use crate::status::ApiError;
use compiled::{Binding, Decision, Policy};

/// The compiled policies, and the stored policies and bindings they were compiled from.
#[derive(Debug, Default)]
struct Set {
    fingerprint: (Vec<bytes::Bytes>, Vec<bytes::Bytes>),
    policies: Arc<Vec<Policy>>,
}

/// Upstream's ValidatingAdmissionPolicy plugin.
#[derive(Debug)]
pub(crate) struct Policies {
    table: Arc<Registries>,
    policies: Arc<Registry>,
    bindings: Arc<Registry>,
    compiled: Mutex<Set>,
}

/// The first refusal a request met, to answer it with.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: String,
}

impl Policies {
    /// The policies served by `table` (`None` when it serves none).
    pub(crate) fn new(table: &Arc<Registries>) -> Option<Self> {
        let group = "admissionregistration.k8s.io";
        Some(Policies {
            policies: table.get(group, "v1", "validatingadmissionpolicies")?,
            bindings: table.get(group, "v1", "validatingadmissionpolicybindings")?,
            table: table.clone(),
            compiled: Mutex::new(Set::default()),
        })
    }

    /// The policies with bindings now, compiled, in name order.
    async fn policies(&self) -> Result<Arc<Vec<Policy>>, ApiError> {
        let cached = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let bindings = self.bindings.list(None, &cached).await?;
        if bindings.items.is_empty() {
            return Ok(Arc::default());
        }
        let policies = self.policies.list(None, &cached).await?;
        let bytes = |items: &[Arc<crate::registry::cache::Cached>]| -> Vec<bytes::Bytes> {
            items.iter().map(|item| item.json.clone()).collect()
        };
        let fingerprint = (bytes(&policies.items), bytes(&bindings.items));
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.fingerprint != fingerprint {
            let bindings: Vec<ValidatingAdmissionPolicyBinding> = bindings
                .items
                .iter()
                .filter_map(|item| serde_json::from_value(item.object()).ok())
                .collect();
            let set = policies
                .items
                .iter()
                .filter_map(|item| {
                    serde_json::from_value::<ValidatingAdmissionPolicy>(item.object()).ok()
                })
                .filter_map(|policy| {
                    let name = policy.metadata.name.as_deref().unwrap_or_default();
                    let bound: Vec<Binding> = bindings
                        .iter()
                        .filter(|b| {
                            b.spec.as_ref().and_then(|s| s.policy_name.as_deref()) == Some(name)
                        })
                        .map(Binding::new)
                        .collect();
                    (!bound.is_empty()).then(|| Policy::new(&policy, bound))
                })
                .collect();
            *compiled = Set {
                fingerprint,
                policies: Arc::new(set),
            };
        }
        Ok(compiled.policies.clone())
    }

    /// Evaluates every policy and binding that matches; the first refusal.
    async fn check(
        &self,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let policies = self.policies().await?;
        if policies.is_empty() {
            return Ok(());
        }
        let context = Context::new(&self.table);
        let checks = capstan_api::cel::authz::Checks::new();
        let mut base: Option<Activation> = None;
        let mut namespace: Option<Value> = None;
        let mut denial: Option<Denial> = None;
        for policy in policies.iter() {
            let Some(resources) = &policy.resources else {
                continue;
            };
            let Some(through) = resources.matches(&context, attrs, object, old).await? else {
                continue;
            };
            // Matched through an equivalent resource, the policy sees the request through it,
            // its objects converted to that version.
            let equivalent = match &through {
                Some(registry) => Some((
                    attrs.through(registry.resource),
                    matching::converted(&self.table, attrs, registry, object, old).await?,
                )),
                None => None,
            };
            let mut own_base: Option<Activation> = None;
            // The policy's audit annotations: every distinct value of each key.
            let mut annotations: Vec<(String, Vec<String>)> = Vec::new();
            for binding in &policy.bindings {
                if let Some(narrowed) = &binding.resources
                    && narrowed
                        .matches(&context, attrs, object, old)
                        .await?
                        .is_none()
                {
                    continue;
                }
                let params = match self.params(policy, binding, attrs).await {
                    Ok(params) => params,
                    Err(why) => {
                        if !policy.ignore_failures && denial.is_none() {
                            denial = Some(Denial {
                                policy: policy.name.clone(),
                                binding: Some(binding.name.clone()),
                                message: format!("failed to configure binding: {why}"),
                                reason: "Invalid".to_owned(),
                            });
                        }
                        continue;
                    }
                };
                let base = match (&equivalent, &mut base, &mut own_base) {
                    (None, Some(base), _) | (Some(_), _, Some(base)) => base,
                    (None, base, _) => base.insert(
                        self.activation(attrs, object, old, &mut namespace, &checks)
                            .await?,
                    ),
                    (Some((seen, (object, old))), _, own_base) => own_base.insert(
                        self.activation(
                            seen,
                            object.as_ref(),
                            old.as_ref(),
                            &mut namespace,
                            &checks,
                        )
                        .await?,
                    ),
                };
                for param in params {
                    let mut activation = base.clone();
                    activation.json("params", &param);
                    let decisions = super::cel_authz::settle(&checks, attrs, || {
                        policy.evaluate(&mut activation)
                    })
                    .await;
                    for decision in decisions {
                        let (message, reason, index) = match decision {
                            Decision::Deny {
                                message,
                                reason,
                                index,
                            } => (message, reason, index),
                            Decision::Error { message, index } => {
                                (message, "Invalid".to_owned(), index)
                            }
                            Decision::Annotate { key, value } => {
                                match annotations.iter_mut().find(|(k, _)| *k == key) {
                                    Some((_, values)) if values.contains(&value) => {}
                                    Some((_, values)) => values.push(value),
                                    None => annotations.push((key, vec![value])),
                                }
                                continue;
                            }
                        };
                        if binding.actions.audit
                            && let Some(audit) = attrs.audit
                        {
                            audit.add(
                                "validation.policy.admission.k8s.io/validation_failure",
                                validation_failure(policy, binding, index, &message),
                            );
                        }
                        if binding.actions.warn
                            && let Some(warnings) = attrs.warnings
                        {
                            warnings.add(&format!(
                                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                                policy.name, binding.name
                            ));
                        }
                        if binding.actions.deny && denial.is_none() {
                            denial = Some(Denial {
                                policy: policy.name.clone(),
                                binding: Some(binding.name.clone()),
                                message,
                                reason,
                            });
                        }
                    }
                }
            }
            // Published under the policy's name; values that differ between bindings
            // (through their parameters) are listed together, as upstream's.
            if let Some(audit) = attrs.audit {
                for (key, values) in annotations {
                    audit.add(format!("{}/{key}", policy.name), values.join(", "));
                }
            }
        }
        match denial {
            None => Ok(()),
            Some(denial) => Err(refusal(attrs, object.or(old), denial)),
        }
    }

    /// The values every expression of the request reads: `object`, `oldObject`, `request`,
    /// `namespaceObject` (read once per request) and `authorizer` (whose checks go to
    /// `checks`).
    async fn activation(
        &self,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace: &mut Option<Value>,
        checks: &capstan_api::cel::authz::Checks,
    ) -> Result<Activation, ApiError> {
        let mut activation = Activation::default();
        activation.set(
            "authorizer",
            checks.variable(super::cel_authz::request_resource(attrs)),
        );
        activation.json("object", object.unwrap_or(&Value::Null));
        activation.json("oldObject", old.unwrap_or(&Value::Null));
        let request = super::webhook::call::review("v1", "", attrs, None, None)["request"].take();
        activation.json("request", &request);
        // A namespace's own namespace is none, as upstream special-cases it.
        let is_namespace = attrs.resource.group.is_empty() && attrs.resource.plural == "namespaces";
        if namespace.is_none()
            && !attrs.namespace.is_empty()
            && !is_namespace
            && let Some(registry) = self.table.core("namespaces")
        {
            *namespace = Some(namespace_object(registry.get(None, attrs.namespace).await?));
        }
        activation.json(
            "namespaceObject",
            namespace.as_ref().unwrap_or(&Value::Null),
        );
        Ok(activation)
    }

    /// The parameter objects a binding evaluates its policy with: `[null]` when the policy
    /// takes none or the binding gives none; why the binding cannot be used otherwise.
    async fn params(
        &self,
        policy: &Policy,
        binding: &Binding,
        attrs: &Attributes<'_>,
    ) -> Result<Vec<Value>, String> {
        let (Some((api_version, kind)), Some(reference)) = (&policy.param_kind, &binding.param_ref)
        else {
            return Ok(vec![Value::Null]);
        };
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(registry) = self.table.by_kind(group, version, kind) else {
            return Err(format!(
                "paramKind kind `&ParamKind{{APIVersion:{api_version},Kind:{kind},}}` not known"
            ));
        };
        let ref_namespace = reference.namespace.as_deref().unwrap_or_default();
        let namespace = if registry.resource.namespaced {
            match (ref_namespace, attrs.namespace) {
                ("", "") => {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".to_owned());
                }
                ("", namespace) | (namespace, _) => Some(namespace),
            }
        } else if !ref_namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                    .to_owned(),
            );
        } else {
            None
        };
        let name = reference.name.as_deref().unwrap_or_default();
        let found: Vec<Value> = if !name.is_empty() {
            match registry.get(namespace, name).await {
                Ok(param) => vec![param],
                Err(e) if e.status().code() == 404 => Vec::new(),
                Err(e) => return Err(status_message(&e)),
            }
        } else {
            let selector =
                LabelSelector::from_api(reference.selector.as_ref()).map_err(|e| e.to_string())?;
            let cached = ListOptions {
                resource_version: Some("0".to_owned()),
                ..ListOptions::default()
            };
            registry
                .list(namespace, &cached)
                .await
                .map_err(|e| status_message(&e))?
                .items
                .iter()
                .map(|item| item.object())
                .filter(|object| selector.matches(&matching::labels(object)))
                .collect()
        };
        if found.is_empty() && reference.parameter_not_found_action.as_deref() == Some("Deny") {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".to_owned(),
            );
        }
        Ok(found)
    }
}

/// The message of an error, for a configuration error's words.
fn status_message(error: &ApiError) -> String {
    error.status().status.message.clone().unwrap_or_default()
}

/// The namespace as policies see it (upstream's `CreateNamespaceObject`): its name, labels,
/// annotations and the rest of its identity, spec and status, without managed fields or
/// owners.
fn namespace_object(mut namespace: Value) -> Value {
    if let Some(meta) = namespace["metadata"].as_object_mut() {
        meta.retain(|key, _| {
            matches!(
                key.as_str(),
                "name"
                    | "generateName"
                    | "namespace"
                    | "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "labels"
                    | "annotations"
                    | "finalizers"
            )
        });
    }
    if let Some(fields) = namespace.as_object_mut() {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    namespace
}

/// The `validation.policy.admission.k8s.io/validation_failure` audit annotation of a failed
/// validation under a binding with the `Audit` action, in upstream's JSON.
fn validation_failure(policy: &Policy, binding: &Binding, index: usize, message: &str) -> String {
    serde_json::json!([{
        "message": message,
        "policy": policy.name,
        "binding": binding.name,
        "expressionIndex": index,
        "validationActions": binding.action_names,
    }])
    .to_string()
}

/// A refusal as upstream words and codes it (see the module's documentation).
fn refusal(attrs: &Attributes<'_>, object: Option<&Value>, denial: Denial) -> ApiError {
    let message = match &denial.binding {
        Some(binding) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
            denial.policy, denial.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            denial.policy, denial.message
        ),
    };
    // The object's name, or while it is to be generated its prefix, as upstream names it.
    let generated = object
        .and_then(|o| o.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty());
    let name = match (attrs.name, generated) {
        ("", Some(prefix)) => prefix,
        ("", None) => "Unknown",
        (name, _) => name,
    };
    let resource = capstan_api::GroupResource::new(attrs.resource.group, attrs.resource.plural);
    let mut error = StatusError::forbidden(resource, name, &message);
    let code = match denial.reason.as_str() {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    };
    error.status.code = Some(code);
    error.status.reason = Some(denial.reason);
    if let Some(details) = error.status.details.as_mut() {
        details.causes.get_or_insert_default().push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
                message: Some(message),
                ..Default::default()
            },
        );
    }
    error.into()
}

impl Plugin for Policies {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, old, .. } = review;
            if attrs.operation != Operation::Delete
                || matching::exempt(attrs.resource)
                || self.policies().await?.is_empty()
            {
                return Ok(());
            }
            let stored = super::stored_for_delete(&self.table, attrs, old).await;
            self.check(attrs, None, stored.as_ref()).await
        })
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            if matching::exempt(attrs.resource) {
                return Ok(());
            }
            self.check(attrs, Some(object), old).await
        })
    }
}

#[cfg(test)]
mod tests;
