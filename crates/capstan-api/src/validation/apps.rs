//! apps/v1 kinds: Deployments, ReplicaSets, StatefulSets, DaemonSets and ControllerRevisions,
//! as upstream's `pkg/apis/apps/validation` checks them and as the registry strategies combine
//! those checks (an update of a Deployment, ReplicaSet or DaemonSet also may not change
//! `spec.selector`). Run the matching [`crate::defaults::apps`] function first.
//!
//! k8s-openapi decodes an absent `spec.selector` of these kinds as an empty selector; a selector
//! with neither `matchLabels` nor `matchExpressions` is therefore treated as absent (upstream's
//! nil), and one with empty lists as upstream's empty selector.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, DaemonSetSpec, DaemonSetStatus, DaemonSetUpdateStrategy,
    Deployment, DeploymentSpec, DeploymentStatus, DeploymentStrategy, ReplicaSet, ReplicaSetSpec,
    ReplicaSetStatus, RollingUpdateDaemonSet, RollingUpdateDeployment, StatefulSet,
    StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{BadValue, FieldError, Path};
use crate::selector::LabelSelector as Selector;
use crate::validation::gofmt::{
    go_int_or_string, go_opt_string_map, go_pointer, int_or_string_value, selector_value,
};
use crate::validation::meta::{
    ABOVE_READY, FIELD_IMMUTABLE, ReplicaCounts, validate_annotations, validate_label_selector,
    validate_labels, validate_nonnegative, validate_object_meta, validate_object_meta_update,
    validate_replica_counts, within_replicas,
};
use crate::validation::names::{NameValidator, regex_error};
use crate::validation::pod::{PodValidationOptions, validate_pod_template_spec};

const SELECTOR_MISMATCH: &str = "`selector` does not match template `labels`";
const PERCENT_FMT: &str = "[0-9]+%";
const PERCENT_ERR_MSG: &str =
    "a valid percent string must be a numeric string followed by an ending '%'";

fn meta_path() -> Path {
    Path::new("metadata")
}

fn spec_path() -> Path {
    Path::new("spec")
}

/// Whether `value` is a percentage such as `25%` (digits followed by `%`).
pub fn is_valid_percent(value: &str) -> Vec<String> {
    let digits = value.strip_suffix('%').unwrap_or("");
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        Vec::new()
    } else {
        vec![regex_error(PERCENT_ERR_MSG, PERCENT_FMT, &["1%", "93%"])]
    }
}

fn go_atoi(digits: &str) -> i64 {
    // Go's strconv.Atoi saturates on overflow (and the error is ignored upstream).
    digits.bytes().fold(0i64, |acc, b| {
        acc.saturating_mul(10).saturating_add(i64::from(b - b'0'))
    })
}

fn percent_value(value: &IntOrString) -> Option<i64> {
    match value {
        IntOrString::String(s) if is_valid_percent(s).is_empty() => {
            Some(go_atoi(&s[..s.len() - 1]))
        }
        _ => None,
    }
}

/// The number an int-or-percent value stands for: the integer, the percentage's number, or 0
/// for a string that is neither (upstream's `getIntOrPercentValue`).
pub fn int_or_percent_value(value: &IntOrString) -> i64 {
    if let Some(percent) = percent_value(value) {
        return percent;
    }
    match value {
        IntOrString::Int(i) => i64::from(*i),
        IntOrString::String(s) => {
            let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                0
            } else if s.starts_with('-') {
                -go_atoi(digits)
            } else {
                go_atoi(digits)
            }
        }
    }
}

/// A non-negative integer or a percentage.
pub fn validate_positive_int_or_percent(value: &IntOrString, path: &Path) -> Vec<FieldError> {
    match value {
        IntOrString::String(s) => is_valid_percent(s)
            .into_iter()
            .map(|msg| FieldError::invalid(path, int_or_string_value(value), &msg))
            .collect(),
        IntOrString::Int(i) => validate_nonnegative(i64::from(*i), path),
    }
}

/// A percentage may not exceed 100%.
pub fn is_not_more_than_100_percent(value: &IntOrString, path: &Path) -> Vec<FieldError> {
    match percent_value(value) {
        Some(percent) if percent > 100 => vec![FieldError::invalid(
            path,
            int_or_string_value(value),
            "must not be greater than 100%",
        )],
        _ => Vec::new(),
    }
}

/// A required selector field as upstream sees it: absent when neither list is set.
fn present(selector: &LabelSelector) -> Option<&LabelSelector> {
    (selector.match_labels.is_some() || selector.match_expressions.is_some()).then_some(selector)
}

fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// The checks every required workload selector gets: present, valid (values strictly), and not
/// empty (`empty selector is invalid for <kind>`).
fn validate_required_selector(
    selector: Option<&LabelSelector>,
    kind: &str,
    path: &Path,
) -> Vec<FieldError> {
    let Some(selector) = selector else {
        return vec![FieldError::required(path, "")];
    };
    let mut errs = validate_label_selector(Some(selector), false, path);
    if is_empty_selector(selector) {
        errs.push(FieldError::invalid(
            path,
            selector_value(Some(selector)),
            &format!("empty selector is invalid for {kind}"),
        ));
    }
    errs
}

fn template_labels(template: &PodTemplateSpec) -> Option<&BTreeMap<String, String>> {
    template.metadata.as_ref().and_then(|m| m.labels.as_ref())
}

fn selector_mismatch(
    selector: &Selector,
    template: &PodTemplateSpec,
    path: &Path,
) -> Vec<FieldError> {
    let labels = template_labels(template);
    let empty = BTreeMap::new();
    if !selector.is_empty() && !selector.matches(labels.unwrap_or(&empty)) {
        vec![FieldError::invalid(
            &path.child("metadata").child("labels"),
            BadValue::Other(go_opt_string_map(labels)),
            SELECTOR_MISMATCH,
        )]
    } else {
        Vec::new()
    }
}

fn restart_always_and_no_deadline(
    template: &PodTemplateSpec,
    kind: &str,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = template.spec.clone().unwrap_or_default();
    let restart = spec.restart_policy.unwrap_or_default();
    if restart != "Always" {
        errs.push(FieldError::not_supported(
            &path.child("spec").child("restartPolicy"),
            restart,
            &["Always"],
        ));
    }
    if spec.active_deadline_seconds.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("spec").child("activeDeadlineSeconds"),
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
    errs
}

/// The pod template of a ReplicaSet or Deployment at `path` (`spec.template`): it matches the
/// selector, is a valid template, always restarts, and has no active deadline.
fn validate_template_for_replica_set(
    template: &PodTemplateSpec,
    selector: &Selector,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = selector_mismatch(selector, template, path);
    errs.extend(validate_pod_template_spec(
        template,
        path,
        &PodValidationOptions::default(),
    ));
    errs.extend(restart_always_and_no_deadline(template, "ReplicaSet", path));
    errs
}

/// The selector and template of a Deployment or ReplicaSet: the template is checked only when
/// the selector converts (upstream reports `invalid label selector` otherwise).
fn validate_selector_and_template(
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    kind: &str,
    path: &Path,
) -> Vec<FieldError> {
    let selector_path = path.child("selector");
    let mut errs = validate_required_selector(selector, kind, &selector_path);
    match Selector::from_api(selector) {
        Err(_) => errs.push(FieldError::invalid(
            &selector_path,
            selector_value(selector),
            "invalid label selector",
        )),
        Ok(converted) => errs.extend(validate_template_for_replica_set(
            template,
            &converted,
            &path.child("template"),
        )),
    }
    errs
}

fn immutable_selector(new: Option<&LabelSelector>, old: Option<&LabelSelector>) -> Vec<FieldError> {
    // Semantic equality: nil and empty maps or lists are the same.
    let normalize = |s: Option<&LabelSelector>| {
        s.map(|s| {
            (
                s.match_labels.clone().unwrap_or_default(),
                s.match_expressions.clone().unwrap_or_default(),
            )
        })
    };
    if normalize(new) != normalize(old) {
        vec![FieldError::invalid(
            &spec_path().child("selector"),
            selector_value(new),
            FIELD_IMMUTABLE,
        )]
    } else {
        Vec::new()
    }
}

/// A new namespaced workload: its metadata (named by `name`) and its spec, absent read as empty.
fn validate_new_workload<S: Clone + Default>(
    meta: &ObjectMeta,
    name: NameValidator,
    spec: &Option<S>,
    validate_spec: fn(&S, &Path) -> Vec<FieldError>,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta(meta, true, name, &meta_path());
    errs.extend(validate_spec(
        &spec.clone().unwrap_or_default(),
        &spec_path(),
    ));
    errs
}

/// The update rules Deployments, ReplicaSets and DaemonSets share: the metadata update, the new
/// spec, and an unchanged `spec.selector` (each side given as its metadata and spec).
fn validate_update_keeping_selector<S: Clone + Default>(
    (new_meta, new_spec): (&ObjectMeta, &Option<S>),
    (old_meta, old_spec): (&ObjectMeta, &Option<S>),
    validate_spec: fn(&S, &Path) -> Vec<FieldError>,
    selector: fn(&S) -> &LabelSelector,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(new_meta, old_meta, &meta_path());
    let spec = new_spec.clone().unwrap_or_default();
    let old_spec = old_spec.clone().unwrap_or_default();
    errs.extend(validate_spec(&spec, &spec_path()));
    errs.extend(immutable_selector(
        present(selector(&spec)),
        present(selector(&old_spec)),
    ));
    errs
}

fn nonnegative_opt(value: Option<i32>, path: &Path) -> Vec<FieldError> {
    value.map_or_else(Vec::new, |v| validate_nonnegative(i64::from(v), path))
}

fn nonnegative(value: Option<i32>, path: &Path) -> Vec<FieldError> {
    validate_nonnegative(i64::from(value.unwrap_or(0)), path)
}

fn collision_decremented(new: Option<i32>, old: Option<i32>) -> Vec<FieldError> {
    let decremented = match (new, old) {
        (None, Some(_)) => true,
        (Some(new), Some(old)) => new < old,
        _ => false,
    };
    if decremented {
        vec![FieldError::invalid(
            &Path::new("status").child("collisionCount"),
            new.unwrap_or(0),
            "cannot be decremented",
        )]
    } else {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------------------------
// Deployments

fn go_deployment_strategy(strategy: &DeploymentStrategy) -> String {
    format!(
        "apps.DeploymentStrategy{{Type:{}, RollingUpdate:{}}}",
        crate::field::go_quote(strategy.type_.as_deref().unwrap_or("")),
        go_pointer(
            "apps.RollingUpdateDeployment",
            strategy.rolling_update.as_ref()
        )
    )
}

fn validate_rolling_update_deployment(
    rolling: &RollingUpdateDeployment,
    path: &Path,
) -> Vec<FieldError> {
    let zero = IntOrString::Int(0);
    let unavailable = rolling.max_unavailable.as_ref().unwrap_or(&zero);
    let surge = rolling.max_surge.as_ref().unwrap_or(&zero);
    let mut errs = validate_positive_int_or_percent(unavailable, &path.child("maxUnavailable"));
    errs.extend(validate_positive_int_or_percent(
        surge,
        &path.child("maxSurge"),
    ));
    if int_or_percent_value(unavailable) == 0 && int_or_percent_value(surge) == 0 {
        errs.push(FieldError::invalid(
            &path.child("maxUnavailable"),
            int_or_string_value(unavailable),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    errs.extend(is_not_more_than_100_percent(
        unavailable,
        &path.child("maxUnavailable"),
    ));
    errs
}

fn validate_deployment_strategy(strategy: &DeploymentStrategy, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match strategy.type_.as_deref().unwrap_or("") {
        "Recreate" => {
            if strategy.rolling_update.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("rollingUpdate"),
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match &strategy.rolling_update {
            None => errs.push(FieldError::required(
                &path.child("rollingUpdate"),
                "this should be defaulted and never be nil",
            )),
            Some(rolling) => errs.extend(validate_rolling_update_deployment(
                rolling,
                &path.child("rollingUpdate"),
            )),
        },
        _ => errs.push(FieldError::not_supported(
            path,
            BadValue::Other(go_deployment_strategy(strategy)),
            &["Recreate", "RollingUpdate"],
        )),
    }
    errs
}

/// A Deployment spec at `path`: replicas, selector, template, strategy, and the counts and
/// deadlines (`progressDeadlineSeconds` must exceed `minReadySeconds`).
pub fn validate_deployment_spec(spec: &DeploymentSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = nonnegative(spec.replicas, &path.child("replicas"));
    errs.extend(validate_selector_and_template(
        present(&spec.selector),
        &spec.template,
        "deployment",
        path,
    ));
    errs.extend(validate_deployment_strategy(
        &spec.strategy.clone().unwrap_or_default(),
        &path.child("strategy"),
    ));
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    errs.extend(validate_nonnegative(
        i64::from(min_ready),
        &path.child("minReadySeconds"),
    ));
    errs.extend(nonnegative_opt(
        spec.revision_history_limit,
        &path.child("revisionHistoryLimit"),
    ));
    if let Some(deadline) = spec.progress_deadline_seconds {
        let p = path.child("progressDeadlineSeconds");
        errs.extend(validate_nonnegative(i64::from(deadline), &p));
        if deadline <= min_ready {
            errs.push(FieldError::invalid(
                &p,
                deadline,
                "must be greater than minReadySeconds",
            ));
        }
    }
    errs
}

/// A new Deployment (namespaced, DNS-subdomain name).
pub fn validate_deployment(d: &Deployment) -> Vec<FieldError> {
    validate_new_workload(
        &d.metadata,
        NameValidator::DnsSubdomain,
        &d.spec,
        validate_deployment_spec,
    )
}

/// An update of a Deployment: metadata rules, the new spec, and an unchanged selector.
pub fn validate_deployment_update(new: &Deployment, old: &Deployment) -> Vec<FieldError> {
    validate_update_keeping_selector(
        (&new.metadata, &new.spec),
        (&old.metadata, &old.spec),
        validate_deployment_spec,
        |spec| &spec.selector,
    )
}

fn validate_deployment_status(status: &DeploymentStatus, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_nonnegative(
        status.observed_generation.unwrap_or(0),
        &path.child("observedGeneration"),
    );
    let replicas = status.replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    errs.extend(nonnegative(status.replicas, &path.child("replicas")));
    errs.extend(nonnegative(
        status.updated_replicas,
        &path.child("updatedReplicas"),
    ));
    errs.extend(nonnegative(
        status.ready_replicas,
        &path.child("readyReplicas"),
    ));
    errs.extend(nonnegative(
        status.available_replicas,
        &path.child("availableReplicas"),
    ));
    errs.extend(nonnegative(
        status.unavailable_replicas,
        &path.child("unavailableReplicas"),
    ));
    errs.extend(nonnegative_opt(
        status.collision_count,
        &path.child("collisionCount"),
    ));
    errs.extend(within_replicas(
        replicas,
        &[
            (updated, "updatedReplicas"),
            (ready, "readyReplicas"),
            (available, "availableReplicas"),
        ],
        (ready, available, ABOVE_READY),
        path,
    ));
    errs
}

/// An update of a Deployment's status subresource.
pub fn validate_deployment_status_update(new: &Deployment, old: &Deployment) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    errs.extend(validate_deployment_status(&status, &Path::new("status")));
    errs.extend(collision_decremented(
        status.collision_count,
        old_status.collision_count,
    ));
    errs
}

// ---------------------------------------------------------------------------------------------
// ReplicaSets

/// A ReplicaSet spec at `path`: replicas, minReadySeconds, selector and template.
pub fn validate_replica_set_spec(spec: &ReplicaSetSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = nonnegative(spec.replicas, &path.child("replicas"));
    errs.extend(nonnegative(
        spec.min_ready_seconds,
        &path.child("minReadySeconds"),
    ));
    // Upstream's ReplicaSet message names deployments too.
    errs.extend(validate_selector_and_template(
        present(&spec.selector),
        &spec.template.clone().unwrap_or_default(),
        "deployment",
        path,
    ));
    errs
}

/// A new ReplicaSet (namespaced, DNS-subdomain name).
pub fn validate_replica_set(rs: &ReplicaSet) -> Vec<FieldError> {
    validate_new_workload(
        &rs.metadata,
        NameValidator::DnsSubdomain,
        &rs.spec,
        validate_replica_set_spec,
    )
}

/// An update of a ReplicaSet. Upstream's strategy validates the new object as if created, then
/// the update, then the selector's immutability, so spec errors appear twice (the aggregate
/// message drops the repeats).
pub fn validate_replica_set_update(new: &ReplicaSet, old: &ReplicaSet) -> Vec<FieldError> {
    let mut errs = validate_replica_set(new);
    errs.extend(validate_update_keeping_selector(
        (&new.metadata, &new.spec),
        (&old.metadata, &old.spec),
        validate_replica_set_spec,
        |spec| &spec.selector,
    ));
    errs
}

fn validate_replica_set_status(status: &ReplicaSetStatus, path: &Path) -> Vec<FieldError> {
    validate_replica_counts(
        ReplicaCounts {
            replicas: status.replicas,
            labeled: status.fully_labeled_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
        },
        path,
    )
}

/// An update of a ReplicaSet's status subresource.
pub fn validate_replica_set_status_update(new: &ReplicaSet, old: &ReplicaSet) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    errs.extend(validate_replica_set_status(
        &new.status.clone().unwrap_or_default(),
        &Path::new("status"),
    ));
    errs
}

// ---------------------------------------------------------------------------------------------
// StatefulSets

fn go_stateful_set_strategy(strategy: &StatefulSetUpdateStrategy) -> String {
    format!(
        "apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:{}}}",
        crate::field::go_quote(strategy.type_.as_deref().unwrap_or("")),
        go_pointer(
            "apps.RollingUpdateStatefulSetStrategy",
            strategy.rolling_update.as_ref()
        )
    )
}

fn validate_retention_policy_type(value: Option<&str>, path: &Path) -> Vec<FieldError> {
    match value.unwrap_or("") {
        "Retain" | "Delete" => Vec::new(),
        other => vec![FieldError::not_supported(
            path,
            other,
            &["Retain", "Delete"],
        )],
    }
}

/// A StatefulSet spec at `path`. The pod template is checked only for its labels, annotations
/// and policies, as upstream does (its pod spec is not validated for StatefulSets).
/// `updateStrategy.rollingUpdate.maxUnavailable` is not checked: upstream 1.33 drops it (the
/// `MaxUnavailableStatefulSet` gate is off).
pub fn validate_stateful_set_spec(spec: &StatefulSetSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let policy_path = path.child("podManagementPolicy");
    match spec.pod_management_policy.as_deref().unwrap_or("") {
        "" => errs.push(FieldError::required(&policy_path, "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(FieldError::invalid(
            &policy_path,
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let strategy_path = path.child("updateStrategy");
    match strategy.type_.as_deref().unwrap_or("") {
        "" => errs.push(FieldError::required(&strategy_path, "")),
        "OnDelete" => {
            if let Some(rolling) = &strategy.rolling_update {
                errs.push(FieldError::invalid(
                    &strategy_path.child("rollingUpdate"),
                    BadValue::Other(format!(
                        "apps.RollingUpdateStatefulSetStrategy{{Partition:{}, MaxUnavailable:{}}}",
                        rolling.partition.unwrap_or(0),
                        go_pointer("intstr.IntOrString", rolling.max_unavailable.as_ref())
                    )),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(rolling) = &strategy.rolling_update {
                errs.extend(nonnegative(
                    rolling.partition,
                    &strategy_path.child("rollingUpdate").child("partition"),
                ));
            }
        }
        _ => errs.push(FieldError::invalid(
            &strategy_path,
            BadValue::Other(go_stateful_set_strategy(&strategy)),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(retention) = &spec.persistent_volume_claim_retention_policy {
        let p = path.child("persistentVolumeClaimRetentionPolicy");
        errs.extend(validate_retention_policy_type(
            retention.when_deleted.as_deref(),
            &p.child("whenDeleted"),
        ));
        errs.extend(validate_retention_policy_type(
            retention.when_scaled.as_deref(),
            &p.child("whenScaled"),
        ));
    }
    errs.extend(nonnegative(spec.replicas, &path.child("replicas")));
    errs.extend(nonnegative(
        spec.min_ready_seconds,
        &path.child("minReadySeconds"),
    ));
    if let Some(ordinals) = &spec.ordinals {
        errs.extend(nonnegative(ordinals.start, &path.child("ordinals.start")));
    }
    let selector = present(&spec.selector);
    let selector_path = path.child("selector");
    errs.extend(validate_required_selector(
        selector,
        "statefulset",
        &selector_path,
    ));
    let template_path = path.child("template");
    match Selector::from_api(selector) {
        Err(_) => errs.push(FieldError::invalid(
            &selector_path,
            selector_value(selector),
            "",
        )),
        Ok(converted) => {
            let template = &spec.template;
            errs.extend(selector_mismatch(&converted, template, &template_path));
            let meta = template.metadata.clone().unwrap_or_default();
            errs.extend(validate_labels(
                meta.labels.as_ref(),
                &template_path.child("labels"),
            ));
            errs.extend(validate_annotations(
                meta.annotations.as_ref(),
                &template_path.child("annotations"),
            ));
            errs.extend(crate::validation::pod::validate_pod_specific_annotations(
                meta.annotations.as_ref(),
                &template.spec.clone().unwrap_or_default(),
                &template_path.child("annotations"),
            ));
        }
    }
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let restart = pod_spec.restart_policy.unwrap_or_default();
    if restart != "Always" {
        errs.push(FieldError::not_supported(
            &template_path.child("spec").child("restartPolicy"),
            restart,
            &["Always"],
        ));
    }
    if pod_spec.active_deadline_seconds.is_some() {
        errs.push(FieldError::forbidden(
            &template_path.child("spec").child("activeDeadlineSeconds"),
            "activeDeadlineSeconds in StatefulSet is not Supported",
        ));
    }
    errs
}

/// A new StatefulSet (namespaced, DNS-label name: pods are named after it).
pub fn validate_stateful_set(ss: &StatefulSet) -> Vec<FieldError> {
    validate_new_workload(
        &ss.metadata,
        NameValidator::DnsLabel,
        &ss.spec,
        validate_stateful_set_spec,
    )
}

/// An update of a StatefulSet: metadata rules (the name is not re-checked), the new spec, and
/// no change outside replicas, ordinals, template, updateStrategy, the claim retention policy
/// and minReadySeconds.
pub fn validate_stateful_set_update(new: &StatefulSet, old: &StatefulSet) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    errs.extend(validate_stateful_set_spec(&spec, &spec_path()));
    let mut masked = spec;
    masked.replicas = old_spec.replicas;
    masked.template = old_spec.template.clone();
    masked.update_strategy = old_spec.update_strategy.clone();
    masked.min_ready_seconds = old_spec.min_ready_seconds;
    masked.ordinals = old_spec.ordinals.clone();
    masked.persistent_volume_claim_retention_policy =
        old_spec.persistent_volume_claim_retention_policy.clone();
    if !semantic_eq(&masked, &old_spec) {
        errs.push(FieldError::forbidden(
            &spec_path(),
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
    errs
}

/// Upstream's semantic equality for API values, approximated on JSON: absent, empty strings,
/// empty maps and empty lists are all the same (as Go's zero values and nil-or-empty
/// collections are).
pub(crate) fn semantic_eq<T: k8s_openapi::serde::Serialize>(a: &T, b: &T) -> bool {
    let a = serde_json::to_value(a)
        .ok()
        .and_then(|v| prune_unset(v, true));
    let b = serde_json::to_value(b)
        .ok()
        .and_then(|v| prune_unset(v, true));
    a == b
}

/// A JSON value without what reads as unset: nulls, empty lists, maps left empty once pruned,
/// and (with `empty_strings`) empty strings; `None` if nothing is left. A pruned list element
/// stays in place as a null.
pub(crate) fn prune_unset(
    value: serde_json::Value,
    empty_strings: bool,
) -> Option<serde_json::Value> {
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) if empty_strings && s.is_empty() => None,
        serde_json::Value::Array(items) if items.is_empty() => None,
        serde_json::Value::Array(items) => Some(serde_json::Value::Array(
            items
                .into_iter()
                .map(|v| prune_unset(v, empty_strings).unwrap_or(serde_json::Value::Null))
                .collect(),
        )),
        serde_json::Value::Object(map) => {
            let pruned: serde_json::Map<String, serde_json::Value> = map
                .into_iter()
                .filter_map(|(k, v)| prune_unset(v, empty_strings).map(|v| (k, v)))
                .collect();
            (!pruned.is_empty()).then_some(serde_json::Value::Object(pruned))
        }
        other => Some(other),
    }
}

fn validate_stateful_set_status(status: &StatefulSetStatus, path: &Path) -> Vec<FieldError> {
    let replicas = status.replicas;
    let ready = status.ready_replicas.unwrap_or(0);
    let current = status.current_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let mut errs = validate_nonnegative(i64::from(replicas), &path.child("replicas"));
    errs.extend(validate_nonnegative(
        i64::from(ready),
        &path.child("readyReplicas"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(current),
        &path.child("currentReplicas"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(updated),
        &path.child("updatedReplicas"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(available),
        &path.child("availableReplicas"),
    ));
    if let Some(generation) = status.observed_generation {
        errs.extend(validate_nonnegative(
            generation,
            &path.child("observedGeneration"),
        ));
    }
    errs.extend(nonnegative_opt(
        status.collision_count,
        &path.child("collisionCount"),
    ));
    errs.extend(within_replicas(
        replicas,
        &[
            (ready, "readyReplicas"),
            (current, "currentReplicas"),
            (updated, "updatedReplicas"),
            (available, "availableReplicas"),
        ],
        (
            ready,
            available,
            "cannot be greater than status.readyReplicas",
        ),
        path,
    ));
    errs
}

/// An update of a StatefulSet's status subresource.
pub fn validate_stateful_set_status_update(
    new: &StatefulSet,
    old: &StatefulSet,
) -> Vec<FieldError> {
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    let mut errs = validate_stateful_set_status(&status, &Path::new("status"));
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &meta_path(),
    ));
    errs.extend(collision_decremented(
        status.collision_count,
        old_status.collision_count,
    ));
    errs
}

// ---------------------------------------------------------------------------------------------
// DaemonSets

fn go_daemon_set_strategy(strategy: &DaemonSetUpdateStrategy) -> String {
    format!(
        "apps.DaemonSetUpdateStrategy{{Type:{}, RollingUpdate:{}}}",
        crate::field::go_quote(strategy.type_.as_deref().unwrap_or("")),
        go_pointer(
            "apps.RollingUpdateDaemonSet",
            strategy.rolling_update.as_ref()
        )
    )
}

fn validate_rolling_update_daemon_set(
    rolling: &RollingUpdateDaemonSet,
    path: &Path,
) -> Vec<FieldError> {
    let zero = IntOrString::Int(0);
    let unavailable = rolling.max_unavailable.as_ref().unwrap_or(&zero);
    let surge = rolling.max_surge.as_ref().unwrap_or(&zero);
    let unavailable_path = path.child("maxUnavailable");
    let surge_path = path.child("maxSurge");
    let mut errs = validate_positive_int_or_percent(unavailable, &unavailable_path);
    errs.extend(validate_positive_int_or_percent(surge, &surge_path));
    errs.extend(is_not_more_than_100_percent(unavailable, &unavailable_path));
    errs.extend(is_not_more_than_100_percent(surge, &surge_path));
    let has_unavailable = int_or_percent_value(unavailable) != 0;
    let has_surge = int_or_percent_value(surge) != 0;
    if has_unavailable && has_surge {
        errs.push(FieldError::invalid(
            &surge_path,
            BadValue::Other(go_int_or_string(surge)),
            "may not be set when maxUnavailable is non-zero",
        ));
    } else if !has_unavailable && !has_surge {
        errs.push(FieldError::required(
            &unavailable_path,
            "cannot be 0 when maxSurge is 0",
        ));
    }
    errs
}

fn validate_daemon_set_update_strategy(
    strategy: &DaemonSetUpdateStrategy,
    path: &Path,
) -> Vec<FieldError> {
    match strategy.type_.as_deref().unwrap_or("") {
        "OnDelete" => Vec::new(),
        "RollingUpdate" => match &strategy.rolling_update {
            None => vec![FieldError::required(&path.child("rollingUpdate"), "")],
            Some(rolling) => {
                validate_rolling_update_daemon_set(rolling, &path.child("rollingUpdate"))
            }
        },
        _ => vec![FieldError::not_supported(
            path,
            BadValue::Other(go_daemon_set_strategy(strategy)),
            &["RollingUpdate", "OnDelete"],
        )],
    }
}

/// A DaemonSet spec at `path`: selector (not required, but it must match the template and not
/// be empty), template, counts and update strategy.
pub fn validate_daemon_set_spec(spec: &DaemonSetSpec, path: &Path) -> Vec<FieldError> {
    let selector = present(&spec.selector);
    let selector_path = path.child("selector");
    let template_path = path.child("template");
    let mut errs = validate_label_selector(selector, false, &selector_path);
    if let Ok(converted) = Selector::from_api(selector)
        && !converted
            .matches_with(|key| template_labels(&spec.template).and_then(|labels| labels.get(key)))
    {
        errs.push(FieldError::invalid(
            &template_path.child("metadata").child("labels"),
            BadValue::Other(go_opt_string_map(template_labels(&spec.template))),
            SELECTOR_MISMATCH,
        ));
    }
    if let Some(selector) = selector
        && is_empty_selector(selector)
    {
        errs.push(FieldError::invalid(
            &selector_path,
            selector_value(Some(selector)),
            "empty selector is invalid for daemonset",
        ));
    }
    errs.extend(validate_pod_template_spec(
        &spec.template,
        &template_path,
        &PodValidationOptions::default(),
    ));
    errs.extend(restart_always_and_no_deadline(
        &spec.template,
        "DaemonSet",
        &template_path,
    ));
    errs.extend(nonnegative(
        spec.min_ready_seconds,
        &path.child("minReadySeconds"),
    ));
    errs.extend(validate_daemon_set_update_strategy(
        &spec.update_strategy.clone().unwrap_or_default(),
        &path.child("updateStrategy"),
    ));
    errs.extend(nonnegative_opt(
        spec.revision_history_limit,
        &path.child("revisionHistoryLimit"),
    ));
    errs
}

/// A new DaemonSet (namespaced, DNS-subdomain name).
pub fn validate_daemon_set(ds: &DaemonSet) -> Vec<FieldError> {
    validate_new_workload(
        &ds.metadata,
        NameValidator::DnsSubdomain,
        &ds.spec,
        validate_daemon_set_spec,
    )
}

/// An update of a DaemonSet. As upstream's strategy: the new object as if created, the update
/// (metadata rules and the spec again), then the selector's immutability. The
/// `templateGeneration` bookkeeping (kept in an annotation in apps/v1) is left to the registry.
pub fn validate_daemon_set_update(new: &DaemonSet, old: &DaemonSet) -> Vec<FieldError> {
    let mut errs = validate_daemon_set(new);
    errs.extend(validate_update_keeping_selector(
        (&new.metadata, &new.spec),
        (&old.metadata, &old.spec),
        validate_daemon_set_spec,
        |spec| &spec.selector,
    ));
    errs
}

fn validate_daemon_set_status(status: &DaemonSetStatus, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (value, field) in [
        (status.current_number_scheduled, "currentNumberScheduled"),
        (status.number_misscheduled, "numberMisscheduled"),
        (status.desired_number_scheduled, "desiredNumberScheduled"),
        (status.number_ready, "numberReady"),
    ] {
        errs.extend(validate_nonnegative(i64::from(value), &path.child(field)));
    }
    errs.extend(validate_nonnegative(
        status.observed_generation.unwrap_or(0),
        &path.child("observedGeneration"),
    ));
    errs.extend(nonnegative(
        status.updated_number_scheduled,
        &path.child("updatedNumberScheduled"),
    ));
    errs.extend(nonnegative(
        status.number_available,
        &path.child("numberAvailable"),
    ));
    errs.extend(nonnegative(
        status.number_unavailable,
        &path.child("numberUnavailable"),
    ));
    errs.extend(nonnegative_opt(
        status.collision_count,
        &path.child("collisionCount"),
    ));
    errs
}

/// An update of a DaemonSet's status subresource.
pub fn validate_daemon_set_status_update(new: &DaemonSet, old: &DaemonSet) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    errs.extend(validate_daemon_set_status(&status, &Path::new("status")));
    errs.extend(collision_decremented(
        status.collision_count,
        old_status.collision_count,
    ));
    errs
}

// ---------------------------------------------------------------------------------------------
// ControllerRevisions

/// A new ControllerRevision: data is mandatory and the revision is not negative.
pub fn validate_controller_revision(revision: &ControllerRevision) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &revision.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    if revision.data.is_none() {
        errs.push(FieldError::required(
            &Path::new("data"),
            "data is mandatory",
        ));
    }
    errs.extend(validate_nonnegative(
        revision.revision,
        &Path::new("revision"),
    ));
    errs
}

/// An update of a ControllerRevision: the data may not change.
pub fn validate_controller_revision_update(
    new: &ControllerRevision,
    old: &ControllerRevision,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    errs.extend(validate_controller_revision(new));
    if !semantic_eq(&new.data, &old.data) {
        errs.push(FieldError::invalid(
            &Path::new("data"),
            BadValue::Omitted,
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::apps::{
        default_daemon_set, default_deployment, default_replica_set, default_stateful_set,
    };
    use crate::validation::test_support::check;
    use serde_json::{Value, json};

    fn decode<T: serde::de::DeserializeOwned>(value: Value, default: fn(&mut T)) -> T {
        let mut object: T = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        default(&mut object);
        object
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }

    fn workload(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}, "spec": spec})
    }

    fn deployment(spec: Value) -> Deployment {
        decode(workload("web", spec), default_deployment)
    }

    #[test]
    fn valid_workloads() {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()});
        check(validate_deployment(&deployment(spec.clone())), &[]);
        check(
            validate_replica_set(&decode(workload("web", spec.clone()), default_replica_set)),
            &[],
        );
        check(
            validate_stateful_set(&decode(workload("web", spec.clone()), default_stateful_set)),
            &[],
        );
        check(
            validate_daemon_set(&decode(workload("web", spec), default_daemon_set)),
            &[],
        );
    }

    #[test]
    fn deployment_selectors() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"template": template()}),
                vec![
                    "spec.selector: Required value",
                    "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                json!({"selector": {"matchLabels": {}}, "template": template()}),
                vec![
                    "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment",
                ],
            ),
            (
                json!({"selector": {"matchLabels": {"app": "db"}}, "template": template()}),
                vec![
                    "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, "template": template()}),
                vec![
                    "spec.selector.matchExpressions[0].operator: Invalid value: \"Gt\": not a valid selector operator",
                    "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Gt\", Values:[]string{\"1\"}}}}: invalid label selector",
                ],
            ),
        ];
        for (spec, expected) in cases {
            check(validate_deployment(&deployment(spec)), &expected);
        }
    }

    #[test]
    fn deployment_spec_rules() {
        let base = |extra: Value| {
            let mut spec =
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()});
            if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                for (k, v) in extra {
                    spec.insert(k.clone(), v.clone());
                }
            }
            deployment(spec)
        };
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"replicas": -1, "minReadySeconds": 700, "revisionHistoryLimit": -2}),
                vec![
                    "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                    "spec.revisionHistoryLimit: Invalid value: -2: must be greater than or equal to 0",
                    "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds",
                ],
            ),
            (
                json!({"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}),
                vec![
                    "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
                ],
            ),
            (
                json!({"strategy": {"type": "Blue"}}),
                vec![
                    "spec.strategy: Unsupported value: apps.DeploymentStrategy{Type:\"Blue\", RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}: supported values: \"Recreate\", \"RollingUpdate\"",
                ],
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}}),
                vec![
                    "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
                ],
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": "150%", "maxSurge": "x"}}}),
                vec![
                    "spec.strategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"x\"}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%",
                ],
            ),
            (
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "i"}]}}}),
                vec![
                    "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
                    "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
                ],
            ),
        ];
        for (extra, expected) in cases {
            check(validate_deployment(&base(extra)), &expected);
        }
    }

    #[test]
    fn deployment_updates_and_status() {
        let old = deployment(
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        );
        let mut new = old.clone();
        if let Some(spec) = &mut new.spec {
            spec.selector = LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "app".into(),
                        operator: "Exists".into(),
                        values: None,
                    },
                ]),
            };
            spec.replicas = Some(3);
        }
        check(
            validate_deployment_update(&new, &old),
            &[
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Exists\", Values:[]string(nil)}}}: field is immutable",
            ],
        );
        let mut scaled = old.clone();
        if let Some(spec) = &mut scaled.spec {
            spec.replicas = Some(5);
        }
        check(validate_deployment_update(&scaled, &old), &[]);

        let mut old_status = old.clone();
        old_status.status = Some(DeploymentStatus {
            collision_count: Some(2),
            ..Default::default()
        });
        let mut new_status = old.clone();
        new_status.status = Some(DeploymentStatus {
            replicas: Some(1),
            ready_replicas: Some(2),
            available_replicas: Some(3),
            collision_count: Some(1),
            ..Default::default()
        });
        check(
            validate_deployment_status_update(&new_status, &old_status),
            &[
                "status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas",
                "status.collisionCount: Invalid value: 1: cannot be decremented",
            ],
        );
    }

    #[test]
    fn replica_sets() {
        let rs: ReplicaSet = decode(
            workload(
                "web",
                json!({"replicas": -1, "selector": {"matchLabels": {}}, "template": template()}),
            ),
            default_replica_set,
        );
        check(
            validate_replica_set(&rs),
            &[
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment",
            ],
        );
        let mut status = ReplicaSet {
            status: Some(ReplicaSetStatus {
                replicas: 1,
                fully_labeled_replicas: Some(2),
                observed_generation: Some(-1),
                ..Default::default()
            }),
            ..rs.clone()
        };
        status.metadata.resource_version = Some("2".into());
        check(
            validate_replica_set_status_update(&status, &rs),
            &[
                "status.observedGeneration: Invalid value: -1: must be greater than or equal to 0",
                "status.fullyLabeledReplicas: Invalid value: 2: cannot be greater than status.replicas",
            ],
        );
    }

    #[test]
    fn stateful_sets() {
        let ss: StatefulSet = decode(
            workload(
                "web.v1",
                json!({
                    "podManagementPolicy": "Random",
                    "updateStrategy": {"type": "OnDelete", "rollingUpdate": {"partition": 2}},
                    "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep"},
                    "ordinals": {"start": -1},
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"restartPolicy": "OnFailure", "containers": []}}
                }),
            ),
            default_stateful_set,
        );
        check(
            validate_stateful_set(&ss),
            &[
                "metadata.name: Invalid value: \"web.v1\": must not contain dots",
                "spec.podManagementPolicy: Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'",
                "spec.updateStrategy.rollingUpdate: Invalid value: apps.RollingUpdateStatefulSetStrategy{Partition:2, MaxUnavailable:(*intstr.IntOrString)(nil)}: only allowed for updateStrategy 'RollingUpdate'",
                "spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\"",
                "spec.ordinals.start: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"",
            ],
        );

        let old: StatefulSet = decode(
            workload(
                "db",
                json!({"serviceName": "db", "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
            ),
            default_stateful_set,
        );
        let mut new = old.clone();
        if let Some(spec) = &mut new.spec {
            spec.replicas = Some(4);
            spec.service_name = Some("other".into());
        }
        check(
            validate_stateful_set_update(&new, &old),
            &[
                "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ],
        );
        let mut scaled = old.clone();
        if let Some(spec) = &mut scaled.spec {
            spec.replicas = Some(4);
            spec.min_ready_seconds = Some(3);
        }
        check(validate_stateful_set_update(&scaled, &old), &[]);
    }

    #[test]
    fn daemon_sets() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"template": template()}),
                vec![
                    "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": template(),
                       "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "10%"}}}),
                vec![
                    "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"10%\"}: may not be set when maxUnavailable is non-zero",
                ],
            ),
            (
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": template(),
                       "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}),
                vec![
                    "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0",
                ],
            ),
            (
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": template(),
                       "updateStrategy": {"type": "Surge"}}),
                vec![
                    "spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:\"Surge\", RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported values: \"RollingUpdate\", \"OnDelete\"",
                ],
            ),
        ];
        for (spec, expected) in cases {
            let ds: DaemonSet = decode(workload("agent", spec), default_daemon_set);
            check(validate_daemon_set(&ds), &expected);
        }
    }

    #[test]
    fn controller_revisions() {
        let revision: ControllerRevision = serde_json::from_value(
            json!({"metadata": {"name": "r", "namespace": "d", "resourceVersion": "1"}, "revision": -1}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        check(
            validate_controller_revision(&revision),
            &[
                "data: Required value: data is mandatory",
                "revision: Invalid value: -1: must be greater than or equal to 0",
            ],
        );
        let old: ControllerRevision = serde_json::from_value(
            json!({"metadata": {"name": "r", "namespace": "d", "resourceVersion": "1"}, "revision": 1, "data": {"a": 1}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut new = old.clone();
        new.data = serde_json::from_value(json!({"a": 2})).ok();
        check(
            validate_controller_revision_update(&new, &old),
            &["data: Invalid value: field is immutable"],
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(int_or_percent_value(&IntOrString::String("25%".into())), 25);
        assert_eq!(int_or_percent_value(&IntOrString::String("7".into())), 7);
        assert_eq!(int_or_percent_value(&IntOrString::String("x".into())), 0);
        assert!(is_valid_percent("100%").is_empty());
        assert!(!is_valid_percent("%").is_empty());
        assert!(!is_valid_percent("-1%").is_empty());
    }
}
