//! Upstream's PodSecurity admission (`k8s.io/pod-security-admission`): pods and the pod
//! templates of workloads judged against the Pod Security Standards their namespace's
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` labels name, over the defaults
//! and exemptions of the server's admission configuration file ([`PodSecurityConfig`], read by
//! [`super::config`]). The rules themselves are shared: [`capstan_api::podsecurity`].
//!
//! As upstream's, in the validating phase:
//! - a pod create, or an update that changes something the rules read (an image, a container's
//!   seccomp annotation, the number of containers, an ephemeral container added through
//!   `ephemeralcontainers`), is refused with 403 `pods "x" is forbidden: violates PodSecurity
//!   "restricted:latest": …` when it violates the enforced level, else answered with a
//!   `would violate PodSecurity "baseline:latest": …` warning when it violates the warned one;
//!   the subresources that cannot change the spec (`status`, `binding`, `exec`, …) are left alone;
//! - Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, ReplicationControllers
//!   and PodTemplates only get the warning, never a refusal (their pods are judged when created);
//! - a namespace's labels must name a level and a version (422 with upstream's field errors on
//!   create, and on an update that changes them); an update that makes enforcement stricter
//!   warns with the existing pods that would violate it (`existing pods in namespace "x" violate
//!   the new PodSecurity enforce level "restricted:latest"`, then `<pod>: <reasons>`, pods with
//!   the same reasons counted together), at most 3000 pods and one second;
//! - exempt users, runtime classes and namespaces are never judged.
//!
//! Each judged request's audit event gets upstream's annotations: `pod-security.kubernetes.io/
//! exempt` (`namespace`, `user` or `runtimeClass`) when an exemption let it through,
//! `enforce-policy` (the enforced `level:version`) for a pod, and `audit-violations` (`would
//! violate PodSecurity "baseline:latest": …`) when it violates the namespace's audit level.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use capstan_api::podsecurity::{self, Level, LevelVersion, Policy};
use capstan_api::{GroupResource, StatusError};

use super::{Attributes, Operation, Plugin, Review, Validation, Verdict};
use crate::registry::{ListOptions, Registry};
use crate::status::ApiError;

/// The most existing pods a namespace's new enforce level is checked against (upstream's).
const MAX_PODS_TO_CHECK: usize = 3000;

/// How long the existing pods are checked for at most (upstream's).
const POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// The pod subresources whose writes cannot change what the rules read.
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// The plugin's configuration: upstream's `PodSecurityConfiguration`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PodSecurityConfig {
    /// The policy of a namespace without labels, and of each mode a namespace has no label for.
    pub defaults: Policy,
    /// Users whose writes are not judged.
    pub exempt_usernames: Vec<String>,
    /// Runtime classes whose pods are not judged.
    pub exempt_runtime_classes: Vec<String>,
    /// Namespaces whose pods are not judged.
    pub exempt_namespaces: Vec<String>,
}

/// The PodSecurity plugin.
#[derive(Debug)]
pub(crate) struct PodSecurity {
    config: Arc<PodSecurityConfig>,
    namespaces: Arc<Registry>,
    pods: Option<Arc<Registry>>,
}

/// What a write is, for this plugin.
enum Target {
    /// A pod (through its main endpoint or `ephemeralcontainers`).
    Pod,
    /// A workload with a pod template, at `template` (a JSON pointer).
    Template(&'static str),
    /// A namespace.
    Namespace,
}

/// Upstream's audit annotation keys (each under `pod-security.kubernetes.io/`).
const EXEMPT: &str = "exempt";
const ENFORCE_POLICY: &str = "enforce-policy";
const AUDIT_VIOLATIONS: &str = "audit-violations";

/// Adds the audit annotation `pod-security.kubernetes.io/<key>` to the request's event (at
/// every audit level, as upstream's).
fn annotate(attrs: &Attributes<'_>, key: &str, value: &str) {
    if let Some(audit) = attrs.audit {
        audit.add(format!("pod-security.kubernetes.io/{key}"), value);
    }
}

/// The kind of `attrs`' resource, if this plugin judges it.
fn target(attrs: &Attributes<'_>) -> Option<Target> {
    let resource = attrs.resource;
    let main = attrs.subresource.is_empty();
    match (resource.group, resource.plural) {
        ("", "pods") if !IGNORED_POD_SUBRESOURCES.contains(&attrs.subresource) => Some(Target::Pod),
        ("", "namespaces") if main => Some(Target::Namespace),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs")
            if main =>
        {
            Some(Target::Template("/spec/template"))
        }
        ("batch", "cronjobs") if main => Some(Target::Template("/spec/jobTemplate/spec/template")),
        ("", "podtemplates") if main => Some(Target::Template("/template")),
        _ => None,
    }
}

impl PodSecurity {
    /// The plugin with `config`, reading namespaces (their labels) and pods (the existing pods
    /// a stricter enforce level is checked against).
    pub(crate) fn new(
        config: Arc<PodSecurityConfig>,
        namespaces: Arc<Registry>,
        pods: Option<Arc<Registry>>,
    ) -> Self {
        PodSecurity {
            config,
            namespaces,
            pods,
        }
    }

    fn exempt_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty() && self.config.exempt_namespaces.iter().any(|n| n == namespace)
    }

    fn exempt_user(&self, attrs: &Attributes<'_>) -> bool {
        attrs.user.is_some_and(|user| {
            !user.name.is_empty() && self.config.exempt_usernames.contains(&user.name)
        })
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        spec.get("runtimeClassName")
            .and_then(Value::as_str)
            .is_some_and(|class| {
                self.config
                    .exempt_runtime_classes
                    .iter()
                    .any(|c| c == class)
            })
    }

    /// The policy of `namespace` (its labels over the defaults), and whether its labels were
    /// all valid. The namespace is read consistently, so that a label just written is obeyed by
    /// the next pod; one that cannot be read is upstream's 500.
    async fn namespace_policy(&self, namespace: &str) -> Result<(Policy, bool), ApiError> {
        let found = self.namespaces.read(None, namespace, None).await;
        let object = found
            .map_err(|_| {
                StatusError::internal(&format!(
                    "failed to lookup namespace {}",
                    capstan_api::field::go_quote(namespace)
                ))
            })?
            .object();
        let (policy, errors) = podsecurity::policy_from_labels(
            object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
            &self.config.defaults,
        );
        Ok((policy, errors.is_empty()))
    }

    /// Judges a pod, or a workload's template (`enforce` false: warnings only), in upstream's
    /// order, recording upstream's audit annotations on the way: `exempt` (`namespace`, `user`,
    /// `runtimeClass`), `enforce-policy` (pods only) and `audit-violations`. `unchanged` is a
    /// pod update that changes nothing the rules read, which is let through once the namespace
    /// is known not to be fully privileged.
    async fn judge(
        &self,
        attrs: &Attributes<'_>,
        metadata: &Value,
        spec: &Value,
        enforce: bool,
        unchanged: bool,
    ) -> Result<(), ApiError> {
        if self.exempt_namespace(attrs.namespace) {
            annotate(attrs, EXEMPT, "namespace");
            return Ok(());
        }
        if self.exempt_user(attrs) {
            annotate(attrs, EXEMPT, "user");
            return Ok(());
        }
        let (policy, valid) = match self.namespace_policy(attrs.namespace).await {
            Ok(found) => found,
            Err(error) if enforce => return Err(error),
            // A workload in a namespace that cannot be read is let through, as upstream's.
            Err(_) => return Ok(()),
        };
        if enforce {
            if valid && policy.fully_privileged() {
                annotate(attrs, ENFORCE_POLICY, &policy.enforce.to_string());
                return Ok(());
            }
        } else if valid
            && policy.warn.level == Level::Privileged
            && policy.audit.level == Level::Privileged
        {
            return Ok(());
        }
        if unchanged {
            return Ok(());
        }
        if self.exempt_runtime_class(spec) {
            annotate(attrs, EXEMPT, "runtimeClass");
            return Ok(());
        }
        let mut refusal = None;
        let mut judged: Vec<(LevelVersion, bool)> = Vec::new();
        if enforce {
            annotate(attrs, ENFORCE_POLICY, &policy.enforce.to_string());
            let violations = podsecurity::evaluate(metadata, spec, policy.enforce);
            judged.push((policy.enforce, violations.is_empty()));
            if !violations.is_empty() {
                let resource = attrs.resource;
                refusal = Some(StatusError::forbidden(
                    GroupResource::new(resource.group, resource.plural),
                    attrs.name,
                    &format!(
                        "violates PodSecurity {}: {}",
                        capstan_api::field::go_quote(&policy.enforce.to_string()),
                        podsecurity::forbidden_detail(&violations)
                    ),
                ));
            }
        }
        // The audit level is judged even for a pod refused above, as upstream's.
        let audit = policy.audit;
        if audit.level != Level::Privileged {
            let violations = podsecurity::evaluate(metadata, spec, audit);
            judged.push((audit, violations.is_empty()));
            if !violations.is_empty() {
                annotate(
                    attrs,
                    AUDIT_VIOLATIONS,
                    &format!(
                        "would violate PodSecurity {}: {}",
                        capstan_api::field::go_quote(&audit.to_string()),
                        podsecurity::forbidden_detail(&violations)
                    ),
                );
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal.into());
        }
        let warn = policy.warn;
        // A level already judged allowed needs no second look.
        if warn.level != Level::Privileged && !judged.contains(&(warn, true)) {
            let violations = podsecurity::evaluate(metadata, spec, warn);
            if !violations.is_empty()
                && let Some(warnings) = attrs.warnings
            {
                warnings.add(&format!(
                    "would violate PodSecurity {}: {}",
                    capstan_api::field::go_quote(&warn.to_string()),
                    podsecurity::forbidden_detail(&violations)
                ));
            }
        }
        Ok(())
    }

    /// A namespace's labels: valid on create, and on an update that changes them; an update
    /// that makes enforcement stricter warns of the existing pods that would violate it.
    async fn validate_namespace(
        &self,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let labels = |o: &Value| {
            o.pointer("/metadata/labels")
                .and_then(Value::as_object)
                .cloned()
        };
        let new_labels = labels(object);
        let (policy, errors) =
            podsecurity::policy_from_labels(new_labels.as_ref(), &self.config.defaults);
        let invalid = |errors: &[capstan_api::field::FieldError]| -> ApiError {
            StatusError::invalid("", "Namespace", attrs.name, errors).into()
        };
        match (attrs.operation, old) {
            (Operation::Create, _) => {
                if !errors.is_empty() {
                    return Err(invalid(&errors));
                }
                self.warn_exempt(attrs, &policy, new_labels.as_ref());
                Ok(())
            }
            (Operation::Update, Some(old)) => {
                let old_labels = labels(old);
                let (old_policy, old_errors) =
                    podsecurity::policy_from_labels(old_labels.as_ref(), &self.config.defaults);
                if !errors.is_empty() && (old_errors.is_empty() || old_errors != errors) {
                    return Err(invalid(&errors));
                }
                if policy.enforce == old_policy.enforce
                    || policy.enforce.level == Level::Privileged
                    || (policy.enforce.version == old_policy.enforce.version
                        && policy.enforce.level <= old_policy.enforce.level)
                {
                    return Ok(());
                }
                if self.exempt_namespace(attrs.name) {
                    self.warn_exempt(attrs, &policy, new_labels.as_ref());
                    return Ok(());
                }
                let warnings = self.existing_pods(attrs.name, policy.enforce).await;
                if let Some(sink) = attrs.warnings {
                    for warning in warnings {
                        sink.add(&warning);
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Upstream's warning that an exempt namespace's labels are ignored (when they ask for
    /// more than the defaults).
    fn warn_exempt(
        &self,
        attrs: &Attributes<'_>,
        policy: &Policy,
        labels: Option<&serde_json::Map<String, Value>>,
    ) {
        if !self.exempt_namespace(attrs.name)
            || policy.fully_privileged()
            || policy.equivalent(&self.config.defaults)
        {
            return;
        }
        if let Some(warnings) = attrs.warnings {
            warnings.add(&format!(
                "namespace {} is exempt from Pod Security, and the policy ({}) will be ignored",
                capstan_api::field::go_quote(attrs.name),
                policy.compact_string(labels)
            ));
        }
    }

    /// The pods to check, in upstream's order: pods of an exempt runtime class left out, then
    /// the first pod of each controller (and every pod without one) before the other pods of
    /// the same controllers, so that the cut at [`MAX_PODS_TO_CHECK`] sees every workload.
    fn prioritize(&self, pods: Vec<Value>) -> Vec<Value> {
        let mut first = Vec::with_capacity(pods.len());
        let mut duplicates = Vec::new();
        let mut controllers = std::collections::HashSet::new();
        for pod in pods {
            if self.exempt_runtime_class(pod.get("spec").unwrap_or(&Value::Null)) {
                continue;
            }
            let controller = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .and_then(|owners| {
                    owners
                        .iter()
                        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
                })
                .and_then(|owner| owner.get("uid"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let seen = controller.is_some_and(|uid| !controllers.insert(uid));
            if seen {
                duplicates.push(pod);
            } else {
                first.push(pod);
            }
        }
        first.extend(duplicates);
        first
    }

    /// The warnings of the existing pods of `namespace` that violate `enforce`.
    async fn existing_pods(&self, namespace: &str, enforce: LevelVersion) -> Vec<String> {
        let Some(pods) = &self.pods else {
            return Vec::new();
        };
        let started = Instant::now();
        let listed = pods.list(Some(namespace), &ListOptions::default()).await;
        let Ok(listed) = listed else {
            return vec![
                "failed to list pods while checking new PodSecurity enforce level".to_owned(),
            ];
        };
        let pods = self.prioritize(listed.items.iter().map(|item| item.object()).collect());
        let total = pods.len();
        let mut checked = total.min(MAX_PODS_TO_CHECK);
        // Each distinct set of reasons: the lexically first pod with it, and how many have it.
        let mut found: Vec<(String, String, usize)> = Vec::new();
        for (i, pod) in pods.iter().take(MAX_PODS_TO_CHECK).enumerate() {
            let null = Value::Null;
            let metadata = pod.get("metadata").unwrap_or(&null);
            let spec = pod.get("spec").unwrap_or(&null);
            let violations = podsecurity::evaluate(metadata, spec, enforce);
            if !violations.is_empty() {
                let reasons = podsecurity::forbidden_reason(&violations);
                let name = metadata
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                match found.iter_mut().find(|(r, _, _)| *r == reasons) {
                    Some((_, first, count)) => {
                        if name < *first {
                            *first = name;
                        }
                        *count += 1;
                    }
                    None => found.push((reasons, name, 1)),
                }
            }
            if started.elapsed() > POD_CHECK_TIMEOUT {
                checked = i + 1;
                break;
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !found.is_empty() {
            warnings.push(format!(
                "existing pods in namespace {} violate the new PodSecurity enforce level {}",
                capstan_api::field::go_quote(namespace),
                capstan_api::field::go_quote(&enforce.to_string())
            ));
        }
        let mut pods: Vec<String> = found
            .into_iter()
            .map(|(reasons, first, count)| match count {
                1 => format!("{first}: {reasons}"),
                2 => format!("{first} (and 1 other pod): {reasons}"),
                n => format!("{first} (and {} other pods): {reasons}", n - 1),
            })
            .collect();
        pods.sort();
        warnings.extend(pods);
        warnings
    }
}

/// Whether an update of a pod changes something the rules read (upstream's
/// `isSignificantPodUpdate`): the number of containers or init containers, an image or a
/// container's seccomp annotation, an ephemeral container added.
fn significant_pod_update(pod: &Value, old: &Value) -> bool {
    let annotation = |p: &Value, key: &str| -> String {
        p.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let list = |p: &Value, key: &str| -> Vec<Value> {
        p.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let container_changed = |c: &Value, o: &Value| {
        let image = |c: &Value| c.get("image").cloned().unwrap_or(Value::Null);
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{name}");
        image(c) != image(o) || annotation(pod, &key) != annotation(old, &key)
    };
    for key in ["containers", "initContainers"] {
        let (new, before) = (list(pod, key), list(old, key));
        if new.len() != before.len() {
            return true;
        }
        if new
            .iter()
            .zip(&before)
            .any(|(c, o)| container_changed(c, o))
        {
            return true;
        }
    }
    let before = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers").iter().any(|c| {
        let name = c.get("name");
        match before.iter().find(|o| o.get("name") == name) {
            None => true,
            Some(o) => container_changed(c, o),
        }
    })
}

impl Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            if !matches!(attrs.operation, Operation::Create | Operation::Update) {
                return Ok(());
            }
            let null = Value::Null;
            match target(attrs) {
                None => Ok(()),
                Some(Target::Namespace) => self.validate_namespace(attrs, object, old).await,
                Some(Target::Pod) => {
                    let unchanged = attrs.operation == Operation::Update
                        && old.is_some_and(|old| !significant_pod_update(object, old));
                    let metadata = object.get("metadata").unwrap_or(&null);
                    let spec = object.get("spec").unwrap_or(&null);
                    self.judge(attrs, metadata, spec, true, unchanged).await
                }
                Some(Target::Template(pointer)) => {
                    let Some(template) = object.pointer(pointer).filter(|t| !t.is_null()) else {
                        return Ok(());
                    };
                    let metadata = template.get("metadata").unwrap_or(&null);
                    let spec = template.get("spec").unwrap_or(&null);
                    self.judge(attrs, metadata, spec, false, false).await
                }
            }
        })
    }
}
