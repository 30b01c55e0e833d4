//! Admission webhooks: upstream's MutatingAdmissionWebhook and ValidatingAdmissionWebhook
//! plugins, over the `admissionregistration.k8s.io/v1` configurations.
//!
//! - [`Webhooks`] holds both kinds of configuration; [`MutatingWebhooks`] and
//!   [`ValidatingWebhooks`] are the two plugins over it. The mutating one calls the mutating webhooks one after
//!   another (configurations by name, webhooks in order), applying each JSON patch and
//!   decoding the result through the resource's registry (so a webhook's patch is defaulted
//!   and, for custom resources, pruned, as upstream decodes it into the versioned type);
//!   webhooks with `reinvocationPolicy: IfNeeded` are called once more when a later webhook
//!   changed the object. The validating one calls the validating webhooks concurrently and
//!   reports the first refusal in configuration order. Deletes, which have no validating phase
//!   in the chain, are judged from its mutating phase; both send the stored object as
//!   `oldObject`.
//! - [`matching`] decides which webhooks a request goes to: rules (operations, groups,
//!   versions, resources with their wildcards, scope), namespace and object selectors, match
//!   conditions, and the exemption of the admission configurations themselves. Under
//!   `matchPolicy: Equivalent` (the default) a request through one version or group of a
//!   resource matches a rule naming an equivalent one (another version of a custom resource,
//!   `autoscaling/v1` and `v2` HorizontalPodAutoscalers, core and `events.k8s.io` Events): the
//!   webhook is then sent the objects converted to that version (its match conditions judge
//!   them so), with that resource as `kind` and `resource` and the request's own as
//!   `requestKind` and `requestResource`; a mutating webhook's patch is applied in that
//!   version and converted back. `Exact` matches the request's own version only.
//! - [`call`] sends one AdmissionReview (`admission.k8s.io/v1`, or `v1beta1` when the webhook
//!   only takes that) over TLS to a URL or a Service (resolved to a ready endpoint of the
//!   Service, or an ExternalName's host, and verified as `<service>.<namespace>.svc`), within
//!   the webhook's timeout, and checks the answer as upstream does.
//!
//! Failures to call a webhook are refused as upstream's `failed calling webhook` internal
//! errors under `failurePolicy: Fail` and skipped under `Ignore`; a webhook's refusal is passed
//! on as the Status it gave, `admission webhook "…" denied the request`. A dry-run request is
//! refused by a matching webhook that may have side effects.
//!
//! Opening a session through `exec`, `attach`, `portforward` or `proxy` is admitted as
//! CONNECT with the request's options (`PodAttachOptions`, …) as the object; the warnings a
//! webhook gives reach the response's `Warning` headers. A write through `scale` is admitted
//! with the `autoscaling/v1` `Scale` objects as kind, object and old object
//! ([`crate::handlers::scale`]); a mutating webhook's patch of it is decoded as a `Scale`.
//!
//! `matchConditions` are CEL ([`capstan_api::cel::Expression`]) over `object`, `oldObject`,
//! `request` and `authorizer` (upstream's authorization library, decided by the server's
//! authorizer for the request's user: [`super::cel_authz`]).
//!
//! A webhook's `auditAnnotations` go to the request's audit events as `<webhook>/<key>`;
//! each mutating webhook called adds upstream's `mutation.webhook.admission.k8s.io/…`
//! annotation and, when it patched the object, `patch.webhook.admission.k8s.io/…` (only at
//! audit level `Request` and above), or `failed-open.mutation.webhook.admission.k8s.io/…`
//! when calling it failed under `Ignore`, as a validating webhook does
//! `failed-open.validating.webhook.admission.k8s.io/…` ([`annotations`]).
//!
//! The configurations are read from the watch cache at every request and compiled once per
//! version of the set (their stored bytes, compared without decoding), so a request with no
//! webhook configured costs two cache reads.

pub(crate) mod annotations;
pub(crate) mod call;
pub(crate) mod client;
pub(crate) mod matching;

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use capstan_api::StatusError;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, ValidatingWebhook};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde_json::Value;

use super::{Attributes, Mutation, Operation, Plugin, Review, Validation, Verdict};
use crate::registry::{ListOptions, Registries, Registry};
use crate::status::ApiError;
use annotations::Invocation;
use call::{Called, Failure, Hook};

/// A `Scale` as a mutating webhook's patch left it, decoded as upstream decodes it into the
/// versioned type: fields a `Scale` does not have are dropped, a field of the wrong type is
/// an error.
pub(crate) fn decode_scale(patched: Value) -> Result<Value, ApiError> {
    serde_json::from_value::<k8s_openapi::api::autoscaling::v1::Scale>(patched)
        .and_then(serde_json::to_value)
        .map_err(|e| StatusError::internal(&e.to_string()).into())
}

/// The compiled webhooks of one kind of configuration, and the set they were compiled from.
#[derive(Debug, Default)]
struct Compiled {
    /// Each configuration's stored JSON.
    fingerprint: Vec<bytes::Bytes>,
    hooks: Arc<Vec<Arc<Hook>>>,
}

/// One kind of webhook configuration: its registry and its compiled webhooks.
#[derive(Debug)]
struct Configurations {
    registry: Arc<Registry>,
    mutating: bool,
    compiled: Mutex<Compiled>,
}

impl Configurations {
    fn new(registry: Arc<Registry>, mutating: bool) -> Self {
        Configurations {
            registry,
            mutating,
            compiled: Mutex::new(Compiled::default()),
        }
    }

    /// The webhooks configured now, in upstream's order: configurations by name, each one's
    /// webhooks as listed.
    async fn hooks(&self) -> Result<Arc<Vec<Arc<Hook>>>, ApiError> {
        let cached = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let list = self.registry.list(None, &cached).await?;
        // The stored JSON of each configuration, in key (so name) order: compared as bytes,
        // so a write with nothing changed costs no decoding.
        let fingerprint: Vec<bytes::Bytes> =
            list.items.iter().map(|item| item.json.clone()).collect();
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.fingerprint != fingerprint {
            let hooks = list
                .items
                .iter()
                .flat_map(|item| self.compile(&item.object()))
                .map(Arc::new)
                .collect();
            *compiled = Compiled {
                fingerprint,
                hooks: Arc::new(hooks),
            };
        }
        Ok(compiled.hooks.clone())
    }

    /// The webhooks of one stored configuration.
    fn compile(&self, configuration: &Value) -> Vec<Hook> {
        let name = name_of(configuration);
        let hooks = configuration["webhooks"].clone();
        if self.mutating {
            serde_json::from_value::<Option<Vec<MutatingWebhook>>>(hooks)
                .ok()
                .flatten()
                .unwrap_or_default()
                .iter()
                .map(|hook| Hook::mutating(name, hook))
                .collect()
        } else {
            serde_json::from_value::<Option<Vec<ValidatingWebhook>>>(hooks)
                .ok()
                .flatten()
                .unwrap_or_default()
                .iter()
                .map(|hook| Hook::validating(name, hook))
                .collect()
        }
    }
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// A webhook's view of a request it matched through an equivalent resource: that resource's
/// registry, and the objects converted to its version.
#[derive(Debug)]
struct Equivalent {
    registry: Arc<Registry>,
    object: Option<Value>,
    old: Option<Value>,
}

/// The webhook configurations, mutating and validating, which the two plugins call.
#[derive(Debug)]
pub(crate) struct Webhooks {
    table: Arc<Registries>,
    mutating: Configurations,
    validating: Configurations,
}

impl Webhooks {
    /// The webhooks configured in `table`'s admissionregistration registries (`None` when the
    /// table serves none).
    pub(crate) fn new(table: &Arc<Registries>) -> Option<Self> {
        let group = "admissionregistration.k8s.io";
        Some(Webhooks {
            mutating: Configurations::new(
                table.get(group, "v1", "mutatingwebhookconfigurations")?,
                true,
            ),
            validating: Configurations::new(
                table.get(group, "v1", "validatingwebhookconfigurations")?,
                false,
            ),
            table: table.clone(),
        })
    }

    /// Whether `hook` is called for this request, and how: `Some(None)` as the request was
    /// made, `Some(Some(_))` through an equivalent resource, with the objects converted to it;
    /// `None` when its rules, selectors or match conditions leave it out.
    async fn invocation(
        &self,
        context: &matching::Context<'_>,
        hook: &Hook,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Option<Option<Equivalent>>, ApiError> {
        let Some(through) = context.matches(hook, attrs, object, old).await? else {
            return Ok(None);
        };
        let Some(registry) = through else {
            let called = matching::conditions_match(hook, attrs, object, old).await?;
            return Ok(called.then_some(None));
        };
        let (object, old) = matching::converted(&self.table, attrs, &registry, object, old).await?;
        let seen = attrs.through(registry.resource);
        if !matching::conditions_match(hook, &seen, object.as_ref(), old.as_ref()).await? {
            return Ok(None);
        }
        Ok(Some(Some(Equivalent {
            registry,
            object,
            old,
        })))
    }

    /// Calls one mutating webhook if it matches (`None` when it does not); whether its patch
    /// changed the object. A webhook that matched through an equivalent resource patches the
    /// object converted to that version, which is converted back.
    async fn invoke_mutating(
        &self,
        context: &matching::Context<'_>,
        hook: &Hook,
        at: Invocation,
        attrs: &Attributes<'_>,
        object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<Option<bool>, ApiError> {
        let Some(through) = self
            .invocation(context, hook, attrs, object.as_deref(), old)
            .await?
        else {
            return Ok(None);
        };
        let Some(mut equivalent) = through else {
            return self
                .call_mutating(hook, at, attrs, object, old)
                .await
                .map(Some);
        };
        let seen = attrs.through(equivalent.registry.resource);
        let changed = self
            .call_mutating(
                hook,
                at,
                &seen,
                equivalent.object.as_mut(),
                equivalent.old.as_ref(),
            )
            .await?;
        if changed && let (Some(object), Some(patched)) = (object, equivalent.object) {
            *object =
                matching::converted_back(&self.table, attrs, &equivalent.registry, patched).await?;
        }
        Ok(Some(changed))
    }

    /// Calls the mutating webhooks that match, in order, changing `object` with their patches.
    async fn mutate(
        &self,
        attrs: &Attributes<'_>,
        mut object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self.mutating.hooks().await?;
        if hooks.is_empty() {
            return Ok(());
        }
        let context = matching::Context::new(&self.table);
        // The webhooks called that asked to be called again if a later one changes the
        // object, their index, and whether one did since each was called.
        let mut reinvocable: Vec<(Arc<Hook>, usize, bool)> = Vec::new();
        for (index, hook) in hooks.iter().enumerate() {
            let at = Invocation { round: 0, index };
            let Some(changed) = self
                .invoke_mutating(&context, hook, at, attrs, object.as_deref_mut(), old)
                .await?
            else {
                continue;
            };
            if changed {
                for (_, _, since) in &mut reinvocable {
                    *since = true;
                }
            }
            if hook.reinvoke {
                reinvocable.push((hook.clone(), index, false));
            }
        }
        for (hook, index, _) in reinvocable.iter().filter(|(_, _, since)| *since) {
            let at = Invocation {
                round: 1,
                index: *index,
            };
            self.invoke_mutating(&context, hook, at, attrs, object.as_deref_mut(), old)
                .await?;
        }
        Ok(())
    }

    /// Calls one mutating webhook; whether its patch changed the object. The call is noted in
    /// the request's audit annotations, however it ended, as upstream's (`annotations`).
    async fn call_mutating(
        &self,
        hook: &Hook,
        at: Invocation,
        attrs: &Attributes<'_>,
        object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        let changed = self.patch_with(hook, at, attrs, object, old).await;
        at.mutated(attrs.audit, hook, matches!(changed, Ok(true)));
        changed
    }

    /// [`Webhooks::call_mutating`]'s call, and the patch applied.
    async fn patch_with(
        &self,
        hook: &Hook,
        at: Invocation,
        attrs: &Attributes<'_>,
        object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        let answer = match hook
            .call(&self.table, attrs, object.as_deref(), old, true)
            .await
        {
            Ok(answer) => answer,
            Err(failure) => {
                let calling = matches!(failure, Failure::Calling(_));
                hook.failed(failure)?;
                if calling {
                    at.failed_open(attrs.audit, hook);
                }
                return Ok(false);
            }
        };
        let Called::Allowed { patch } = answer else {
            return Err(answer.refusal(&hook.name));
        };
        let (Some(patch), Some(object)) = (patch, object) else {
            return Ok(false);
        };
        let patched = apply_patch(object, &patch).map_err(|e| StatusError::internal(&e))?;
        let mut patched = patched;
        let decoded = match self.registry_of(attrs) {
            // A write of the scale admits the `Scale`, not the parent.
            _ if attrs.subresource == "scale" => decode_scale(patched)?,
            Some(registry) => registry.decode_patched(&mut patched)?.0,
            None => patched,
        };
        at.patched(attrs.audit, hook, &patch);
        let changed = decoded != *object;
        *object = decoded;
        Ok(changed)
    }

    /// Calls the validating webhooks that match, all at once; the first refusal in order.
    async fn check(
        &self,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self.validating.hooks().await?;
        if hooks.is_empty() {
            return Ok(());
        }
        let context = matching::Context::new(&self.table);
        let mut matched = Vec::new();
        for hook in hooks.iter() {
            if let Some(through) = self.invocation(&context, hook, attrs, object, old).await? {
                matched.push((hook.clone(), through));
            }
        }
        // What each webhook is sent: the request as made, or through an equivalent resource.
        let seen: Vec<_> = matched
            .iter()
            .map(|(_, through)| match through {
                None => (*attrs, object, old),
                Some(equivalent) => (
                    attrs.through(equivalent.registry.resource),
                    equivalent.object.as_ref(),
                    equivalent.old.as_ref(),
                ),
            })
            .collect();
        let answers = futures::future::join_all(matched.iter().zip(&seen).map(
            |((hook, _), (attrs, object, old))| hook.call(&self.table, attrs, *object, *old, false),
        ))
        .await;
        // Every answer is looked at (upstream's calls each note their failing open), then
        // the first refusal in order answers.
        let mut refusal = None;
        for (index, ((hook, _), answer)) in matched.iter().zip(answers).enumerate() {
            let outcome = match answer {
                Ok(Called::Allowed { .. }) => Ok(()),
                Ok(refused) => Err(refused.refusal(&hook.name)),
                Err(failure) => {
                    let calling = matches!(failure, Failure::Calling(_));
                    let outcome = hook.failed(failure);
                    if outcome.is_ok() && calling {
                        annotations::validating_failed_open(attrs.audit, hook, index);
                    }
                    outcome
                }
            };
            if let Err(error) = outcome {
                refusal.get_or_insert(error);
            }
        }
        refusal.map_or(Ok(()), Err)
    }

    /// The registry of the resource written, for decoding a patched object.
    fn registry_of(&self, attrs: &Attributes<'_>) -> Option<Arc<Registry>> {
        let resource = attrs.resource;
        self.table
            .get(resource.group, resource.version, resource.plural)
    }
}

/// Applies a webhook's JSON patch to `object`.
fn apply_patch(object: &Value, patch: &[u8]) -> Result<Value, String> {
    let patch: json_patch::Patch =
        serde_json::from_slice(patch).map_err(|e| format!("unable to decode patch: {e}"))?;
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).map_err(|e| e.to_string())?;
    Ok(patched)
}

/// Upstream's MutatingAdmissionWebhook: the mutating webhooks, in the mutating phase.
#[derive(Debug)]
pub(crate) struct MutatingWebhooks(pub Arc<Webhooks>);

impl Plugin for MutatingWebhooks {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            if matching::exempt(attrs.resource) {
                return Ok(());
            }
            if attrs.operation != Operation::Delete {
                return self.0.mutate(attrs, object, old).await;
            }
            if self.0.mutating.hooks().await?.is_empty() {
                return Ok(());
            }
            let stored = super::stored_for_delete(&self.0.table, attrs, old).await;
            self.0.mutate(attrs, None, stored.as_ref()).await
        })
    }
}

/// Upstream's ValidatingAdmissionWebhook: the validating webhooks, in the validating phase
/// (and for deletes, which the chain admits in its mutating phase only, there).
#[derive(Debug)]
pub(crate) struct ValidatingWebhooks(pub Arc<Webhooks>);

impl Plugin for ValidatingWebhooks {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, old, .. } = review;
            if attrs.operation != Operation::Delete
                || matching::exempt(attrs.resource)
                || self.0.validating.hooks().await?.is_empty()
            {
                return Ok(());
            }
            let stored = super::stored_for_delete(&self.0.table, attrs, old).await;
            self.0.check(attrs, None, stored.as_ref()).await
        })
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            if matching::exempt(attrs.resource) {
                return Ok(());
            }
            self.0.check(attrs, Some(object), old).await
        })
    }
}

/// A webhook's refusal as upstream's `ToStatusErr` shapes it: at least 400, status Failure,
/// the message led by `admission webhook "<name>" denied the request`.
pub(crate) fn refusal(webhook: &str, result: Option<Value>) -> ApiError {
    let mut status: Status = result
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default();
    if status.code.unwrap_or_default() < 400 {
        status.code = Some(400);
    }
    if matches!(status.status.as_deref(), None | Some("") | Some("Success")) {
        status.status = Some("Failure".to_owned());
    }
    let denied = format!(
        "admission webhook {} denied the request",
        capstan_api::field::go_quote(webhook)
    );
    let message = match (status.message.as_deref(), status.reason.as_deref()) {
        (Some(message), _) if !message.is_empty() => format!("{denied}: {message}"),
        (_, Some(reason)) if !reason.is_empty() => format!("{denied}: {reason}"),
        _ => format!("{denied} without explanation"),
    };
    status.message = Some(message);
    ApiError::from(StatusError { status })
}

/// Decodes a base64 patch from a review's response.
pub(crate) fn decode_patch(patch: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| format!("illegal base64 data in response.patch: {e}"))
}
