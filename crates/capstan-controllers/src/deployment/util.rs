//! Pure helpers of the Deployment controller, as upstream's `deployment/util/deployment_util.go`
//! and the ReplicaSet helpers of `controller_utils.go`: accessors with API defaults, the
//! pod-template hash, revision and replica annotations, rolling-update fenceposts, the new
//! replica set's size, proportions for proportional scaling, conditions and the status
//! calculation. Nothing here talks to the API.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, ReplicaSet,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

/// The label added to a replica set's selector, template and labels (`pod-template-hash`).
pub const HASH_LABEL: &str = "pod-template-hash";
/// The rollout sequence number of a replica set (and of its deployment).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// The older revisions a replica set served (it was rolled back to).
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// The deployment's `spec.replicas` when the replica set was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// The deployment's `spec.replicas + maxSurge` when the replica set was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// The deprecated rollback request (round-trips `extensions/v1beta1` `spec.rollbackTo`).
pub const ROLLBACK_TO_ANNOTATION: &str = "deprecated.deployment.rollback.to";
/// kubectl's client-side apply record.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// How long the revision-history annotation may grow.
pub const MAX_REV_HISTORY_CHARS: usize = 2000;

/// The rolling update strategy type.
pub const ROLLING_UPDATE: &str = "RollingUpdate";
/// The recreate strategy type.
pub const RECREATE: &str = "Recreate";

/// The `Available` condition type.
pub const AVAILABLE: &str = "Available";
/// The `Progressing` condition type.
pub const PROGRESSING: &str = "Progressing";
/// The `ReplicaFailure` condition type.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Progressing: one of the replica sets was scaled as part of the rollout.
pub const REPLICA_SET_UPDATED_REASON: &str = "ReplicaSetUpdated";
/// Progressing: the new replica set could not be created.
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
/// Progressing: the new replica set was created.
pub const NEW_REPLICA_SET_REASON: &str = "NewReplicaSetCreated";
/// Progressing: an existing replica set was found to be the new one.
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
/// Progressing: the new replica set is complete and available.
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
/// Progressing: no progress within `progressDeadlineSeconds`.
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
/// Progressing: the deployment is paused.
pub const PAUSED_DEPLOY_REASON: &str = "DeploymentPaused";
/// Progressing: the deployment was resumed.
pub const RESUMED_DEPLOY_REASON: &str = "DeploymentResumed";
/// Available: enough replicas are available.
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available: too few replicas are available.
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// Event reason: the rollback revision does not exist.
pub const ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
/// Event reason: the rollback revision has the current template.
pub const ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
/// Event reason: rolled back.
pub const ROLLBACK_DONE: &str = "DeploymentRollback";

// ---------------------------------------------------------------------------------------------
// Accessors, with the values API defaulting would have filled in.

/// The deployment's spec (empty if absent).
pub fn spec(d: &Deployment) -> std::borrow::Cow<'_, DeploymentSpec> {
    match &d.spec {
        Some(spec) => std::borrow::Cow::Borrowed(spec),
        None => std::borrow::Cow::Owned(DeploymentSpec::default()),
    }
}

/// `spec.replicas` of a deployment (defaulted to 1).
pub fn d_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `spec.replicas` of a replica set (defaulted to 1).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Sets `spec.replicas` of a replica set.
pub fn set_rs_replicas(rs: &mut ReplicaSet, replicas: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
}

/// `status.replicas` of a replica set.
pub fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// `status.availableReplicas` of a replica set.
pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// `status.readyReplicas` of a replica set.
pub fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// The strategy type (defaulted to `RollingUpdate`).
pub fn strategy_type(d: &Deployment) -> &str {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or(ROLLING_UPDATE)
}

/// Whether the deployment rolls out with `RollingUpdate`.
pub fn is_rolling_update(d: &Deployment) -> bool {
    strategy_type(d) == ROLLING_UPDATE
}

/// `spec.paused`.
pub fn is_paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

/// `spec.minReadySeconds`.
pub fn min_ready_seconds(d: &Deployment) -> i32 {
    d.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// `metadata.generation`.
pub fn generation(meta: &ObjectMeta) -> i64 {
    meta.generation.unwrap_or(0)
}

/// The controller owner reference of an object, if any.
pub use crate::pods::controller_of;

/// Whether the deployment is expected to report `ProgressDeadlineExceeded` (a deadline is set
/// and is not MaxInt32).
pub fn has_progress_deadline(d: &Deployment) -> bool {
    matches!(d.spec.as_ref().and_then(|s| s.progress_deadline_seconds), Some(s) if s != i32::MAX)
}

/// The revision history limit, unless unset or MaxInt32 (keep everything).
pub fn revision_history_limit(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .filter(|&l| l != i32::MAX)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

// ---------------------------------------------------------------------------------------------
// Sorting and filtering replica sets (controller_utils.go).

/// Oldest first by creation timestamp, then by name.
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ta.cmp(&tb)
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Larger first; among equal sizes, older first (scaling down).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(a, b))
}

/// Larger first; among equal sizes, newer first (scaling up).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(b, a))
}

/// By revision, then creation order. Upstream falls back to creation order when either
/// revision is unparsable; comparing such a revision as 0 instead keeps the order total (a sort
/// needs that), and is the same for every well-formed annotation.
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let rev = |rs: &ReplicaSet| revision(rs).unwrap_or(0);
    rev(a).cmp(&rev(b)).then_with(|| by_creation(a, b))
}

/// Whether a replica set asks for pods.
pub fn is_active(rs: &ReplicaSet) -> bool {
    rs_replicas(rs) > 0
}

/// Sum of `spec.replicas`.
pub fn replica_count<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(rs_replicas).sum()
}

/// Sum of `status.replicas`.
pub fn actual_replica_count<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(rs_status_replicas).sum()
}

/// Sum of `status.readyReplicas`.
pub fn ready_replica_count<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(rs_ready).sum()
}

/// Sum of `status.availableReplicas`.
pub fn available_replica_count<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(rs_available).sum()
}

// ---------------------------------------------------------------------------------------------
// The pod-template hash (controller.ComputeHash).

const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Upstream's `rand.SafeEncodeString`: every byte mapped into an alphabet without vowels
/// (no accidental words) and without characters easily confused (0/o, 1/l, 3/e).
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// FNV-1a, 32 bits.
fn fnv32a(h: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// The hash naming a template's replica set: FNV-32a over the template's canonical JSON (upstream
/// hashes Go's spew dump of the struct, which cannot be reproduced), then the collision count as
/// 8 little-endian bytes when set, printed in decimal and safe-encoded.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    // Serialising a k8s-openapi struct is deterministic: fixed field order, sorted maps.
    let json = serde_json::to_vec(template).unwrap_or_default();
    let mut h = fnv32a(2_166_136_261, &json);
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        h = fnv32a(h, &bytes);
    }
    safe_encode(&h.to_string())
}

/// Drops nulls and empty arrays, as Go's semantic equality treats nil and empty slices alike.
fn prune(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| {
                prune(v);
                !(v.is_null() || v.as_array().is_some_and(Vec::is_empty))
            });
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

fn template_without_hash(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    let meta = t.metadata.get_or_insert_with(Default::default);
    if let Some(labels) = meta.labels.as_mut() {
        labels.remove(HASH_LABEL);
        if labels.is_empty() {
            meta.labels = None;
        }
    }
    let mut value = serde_json::to_value(&t).unwrap_or_default();
    prune(&mut value);
    if value
        .get("metadata")
        .is_some_and(|m| m.as_object().is_some_and(|m| m.is_empty()))
        && let Some(map) = value.as_object_mut()
    {
        map.remove("metadata");
    }
    value
}

/// Whether two templates are equal ignoring the `pod-template-hash` label (upstream's
/// `EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    template_without_hash(a) == template_without_hash(b)
}

/// Labels with one more entry.
pub fn with_label(
    labels: Option<&BTreeMap<String, String>>,
    key: &str,
    value: &str,
) -> BTreeMap<String, String> {
    let mut labels = labels.cloned().unwrap_or_default();
    labels.insert(key.to_owned(), value.to_owned());
    labels
}

// ---------------------------------------------------------------------------------------------
// Finding the new and old replica sets.

/// Index of the new replica set (the oldest one whose template matches the deployment's) in a
/// list sorted by creation.
pub fn find_new_replica_set(d: &Deployment, sorted: &[ReplicaSet]) -> Option<usize> {
    let template = &spec(d).template;
    sorted
        .iter()
        .position(|rs| equal_ignore_hash(&rs_template(rs), template))
}

/// The pod template of a replica set (empty if absent).
pub fn rs_template(rs: &ReplicaSet) -> std::borrow::Cow<'_, PodTemplateSpec> {
    match rs.spec.as_ref().and_then(|s| s.template.as_ref()) {
        Some(t) => std::borrow::Cow::Borrowed(t),
        None => std::borrow::Cow::Owned(PodTemplateSpec::default()),
    }
}

/// Splits a creation-sorted list into the new replica set and all the old ones.
pub fn split_new_and_old(
    d: &Deployment,
    sorted: &[ReplicaSet],
) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    let new = find_new_replica_set(d, sorted);
    let old = sorted
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new)
        .map(|(_, rs)| rs.clone())
        .collect();
    (new.map(|i| sorted[i].clone()), old)
}

/// The single active replica set, or the newest when none is active; `None` when several are
/// active (then they are scaled proportionally).
pub fn find_active_or_latest<'a>(
    new: Option<&'a ReplicaSet>,
    old: &'a [ReplicaSet],
) -> Option<&'a ReplicaSet> {
    if new.is_none() && old.is_empty() {
        return None;
    }
    let mut newest_first: Vec<&ReplicaSet> = old.iter().collect();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&ReplicaSet> = newest_first
        .iter()
        .copied()
        .chain(new)
        .filter(|rs| is_active(rs))
        .collect();
    match active.len() {
        0 => new.or(newest_first.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}

/// Whether the new replica set runs all the deployment's replicas and both agree on it.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let Some(desired) =
        annotation(&rs.metadata, DESIRED_REPLICAS_ANNOTATION).and_then(|s| s.parse::<i32>().ok())
    else {
        return false;
    };
    let replicas = d_replicas(d);
    rs_replicas(rs) == replicas && desired == replicas && rs_available(rs) == replicas
}

// ---------------------------------------------------------------------------------------------
// Revisions and annotations.

/// The revision of a replica set (0 when unannotated).
pub fn revision(rs: &ReplicaSet) -> Result<i64, std::num::ParseIntError> {
    match annotation(&rs.metadata, REVISION_ANNOTATION) {
        Some(v) => v.parse(),
        None => Ok(0),
    }
}

/// The highest revision (unparsable ones skipped).
pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter()
        .filter_map(|rs| revision(rs).ok())
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The second-highest revision (the one before the current).
pub fn last_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    let (mut max, mut second) = (0i64, 0i64);
    for v in rss.into_iter().filter_map(|rs| revision(rs).ok()) {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

/// Sets the deployment's revision annotation; whether it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_with(Default::default);
    if annotations.get(REVISION_ANNOTATION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION_ANNOTATION.to_owned(), revision.to_owned());
    true
}

/// Annotations never copied between a deployment and its replica sets.
pub fn skip_copy_annotation(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED_ANNOTATION
            | REVISION_ANNOTATION
            | REVISION_HISTORY_ANNOTATION
            | DESIRED_REPLICAS_ANNOTATION
            | MAX_REPLICAS_ANNOTATION
            | ROLLBACK_TO_ANNOTATION
    )
}

/// Copies the deployment's annotations (but the skipped ones) onto the replica set; whether
/// any changed.
pub fn copy_deployment_annotations_to_rs(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let target = rs.metadata.annotations.get_or_insert_with(Default::default);
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy_annotation(k) || target.get(k) == Some(v) {
            continue;
        }
        target.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Replaces the deployment's annotations (but the skipped ones) with the replica set's, when
/// rolling back to it.
pub fn set_deployment_annotations_to(d: &mut Deployment, rs: &ReplicaSet) {
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in rs.metadata.annotations.iter().flatten() {
        if !skip_copy_annotation(k) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    d.metadata.annotations = Some(annotations);
}

/// Sets the desired and max replicas annotations; whether either changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(Default::default);
    let mut changed = false;
    for (key, value) in [
        (DESIRED_REPLICAS_ANNOTATION, desired),
        (MAX_REPLICAS_ANNOTATION, max),
    ] {
        let value = value.to_string();
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_owned(), value);
            changed = true;
        }
    }
    changed
}

/// Whether the desired or max replicas annotations differ from these.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(&rs.metadata, DESIRED_REPLICAS_ANNOTATION) != Some(desired.to_string().as_str())
        || annotation(&rs.metadata, MAX_REPLICAS_ANNOTATION) != Some(max.to_string().as_str())
}

/// An integer annotation of a replica set.
pub fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    annotation(&rs.metadata, key).and_then(|v| v.parse().ok())
}

/// Updates the new replica set's annotations: copies the deployment's, raises the revision to
/// `new_revision` (remembering the old one in the revision history, bounded to `limit`
/// characters), and for a replica set about to be created the replica annotations. Returns
/// whether anything changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: &str,
    exists: bool,
    limit: usize,
) -> bool {
    let mut changed = copy_deployment_annotations_to_rs(d, rs);
    let annotations = rs.metadata.annotations.get_or_insert_with(Default::default);
    let old_revision = annotations.get(REVISION_ANNOTATION).cloned();
    let old_value = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(v) => match v.parse::<i64>() {
            Ok(v) => v,
            Err(_) => return false,
        },
    };
    let Ok(new_value) = new_revision.parse::<i64>() else {
        return false;
    };
    if old_value < new_value {
        annotations.insert(REVISION_ANNOTATION.to_owned(), new_revision.to_owned());
        changed = true;
        // A replica set that had a revision and gets a newer one is being rolled back to.
        if let Some(old) = old_revision {
            let history = annotations
                .get(REVISION_HISTORY_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            if history.is_empty() {
                annotations.insert(REVISION_HISTORY_ANNOTATION.to_owned(), old);
            } else {
                let entries: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > limit && start < entries.len() {
                    total -= entries[start].len() + 1;
                    start += 1;
                }
                if total <= limit {
                    let mut kept: Vec<&str> = entries[start..].to_vec();
                    kept.push(&old);
                    annotations.insert(REVISION_HISTORY_ANNOTATION.to_owned(), kept.join(","));
                }
            }
        }
    }
    if !exists && set_replicas_annotations(rs, d_replicas(d), d_replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

// ---------------------------------------------------------------------------------------------
// Rolling update arithmetic.

/// An int-or-percent scaled against `total`: percentages round up or down as asked.
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(percent) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .to_owned(),
                );
            };
            let percent: i64 = percent
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let product = percent * i64::from(total);
            let scaled = if round_up {
                product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
            } else {
                product.div_euclid(100)
            };
            Ok(scaled.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
        }
    }
}

/// maxSurge (rounded up) and maxUnavailable (rounded down) for `desired` replicas; when both
/// come out zero, maxUnavailable is 1 (upstream's `ResolveFenceposts`).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), String> {
    let zero = IntOrString::Int(0);
    let surge = scaled_value(max_surge.unwrap_or(&zero), desired, true)?;
    let mut unavailable = scaled_value(max_unavailable.unwrap_or(&zero), desired, false)?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

fn fenceposts(d: &Deployment) -> (i32, i32) {
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    resolve_fenceposts(
        rolling.and_then(|r| r.max_surge.as_ref()),
        rolling.and_then(|r| r.max_unavailable.as_ref()),
        d_replicas(d),
    )
    .unwrap_or((0, 0))
}

/// The surge a rolling deployment may take (0 otherwise).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

/// How many pods a rolling deployment may have unavailable (0 otherwise), at most its size.
pub fn max_unavailable(d: &Deployment) -> i32 {
    let replicas = d_replicas(d);
    if !is_rolling_update(d) || replicas == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas)
}

/// The size the new replica set should have now (upstream's `NewRSNewReplicas`).
pub fn new_rs_new_replicas(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: &ReplicaSet,
) -> Result<i32, String> {
    let replicas = d_replicas(d);
    match strategy_type(d) {
        ROLLING_UPDATE => {
            let surge = d
                .spec
                .as_ref()
                .and_then(|s| s.strategy.as_ref())
                .and_then(|s| s.rolling_update.as_ref())
                .and_then(|r| r.max_surge.clone())
                .unwrap_or(IntOrString::Int(0));
            let surge = scaled_value(&surge, replicas, true)?;
            let current = replica_count(all.iter().copied());
            let max_total = replicas + surge;
            if current >= max_total {
                return Ok(rs_replicas(new_rs));
            }
            let up = (max_total - current).min(replicas - rs_replicas(new_rs));
            Ok(rs_replicas(new_rs) + up)
        }
        RECREATE => Ok(replicas),
        other => Err(format!("deployment type {other} isn't supported")),
    }
}

/// How many replicas a replica set gains (or loses, negative) in a proportional scaling of
/// `to_add` replicas of which `added` were already handed out.
pub fn get_proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

fn replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let replicas = rs_replicas(rs);
    if d_replicas(d) == 0 {
        return -replicas;
    }
    let deployment_replicas = d_replicas(d) + max_surge(d);
    let annotated = int_annotation(rs, MAX_REPLICAS_ANNOTATION)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        // Go divides by zero here; there is no sensible proportion, so none.
        return 0;
    }
    let size = f64::from(replicas) * f64::from(deployment_replicas) / f64::from(annotated);
    size.round() as i32 - replicas
}

// ---------------------------------------------------------------------------------------------
// Conditions and status.

/// A condition stamped `now`.
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The condition of a type.
pub fn get_condition<'a>(
    status: Option<&'a DeploymentStatus>,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Sets a condition unless one with the same status and reason is there; keeps the transition
/// time when only the reason changes. The condition goes last.
pub fn set_condition(status: &mut DeploymentStatus, mut condition: DeploymentCondition) {
    if let Some(current) = get_condition(Some(status), &condition.type_)
        && current.status == condition.status
    {
        if current.reason == condition.reason {
            return;
        }
        condition.last_transition_time = current.last_transition_time.clone();
    }
    remove_condition(status, &condition.type_);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(condition);
}

/// Removes the condition of a type.
pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

fn nonzero<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}

/// The status as the API returns it: zero counters and empty lists omitted.
pub fn normalize_status(status: &DeploymentStatus) -> DeploymentStatus {
    DeploymentStatus {
        available_replicas: status.available_replicas.filter(|&v| v != 0),
        collision_count: status.collision_count,
        conditions: status.conditions.clone().filter(|c| !c.is_empty()),
        observed_generation: status.observed_generation.filter(|&v| v != 0),
        ready_replicas: status.ready_replicas.filter(|&v| v != 0),
        replicas: status.replicas.filter(|&v| v != 0),
        terminating_replicas: status.terminating_replicas,
        unavailable_replicas: status.unavailable_replicas.filter(|&v| v != 0),
        updated_replicas: status.updated_replicas.filter(|&v| v != 0),
    }
}

/// Status counter accessors.
pub fn st(status: &DeploymentStatus) -> StatusCounts {
    StatusCounts {
        replicas: status.replicas.unwrap_or(0),
        updated: status.updated_replicas.unwrap_or(0),
        ready: status.ready_replicas.unwrap_or(0),
        available: status.available_replicas.unwrap_or(0),
        observed_generation: status.observed_generation.unwrap_or(0),
    }
}

/// The counters of a deployment status, zero when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCounts {
    /// `replicas`.
    pub replicas: i32,
    /// `updatedReplicas`.
    pub updated: i32,
    /// `readyReplicas`.
    pub ready: i32,
    /// `availableReplicas`.
    pub available: i32,
    /// `observedGeneration`.
    pub observed_generation: i64,
}

/// The status computed from the replica sets, with the `Available` condition set (upstream's
/// `calculateStatus`).
pub fn calculate_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let available = available_replica_count(all.iter().copied());
    let total = replica_count(all.iter().copied());
    let unavailable = (total - available).max(0);
    let current = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: nonzero(generation(&d.metadata)),
        replicas: nonzero(actual_replica_count(all.iter().copied())),
        updated_replicas: nonzero(actual_replica_count(new_rs)),
        ready_replicas: nonzero(ready_replica_count(all.iter().copied())),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero(unavailable),
        collision_count: current.collision_count,
        conditions: current.conditions.clone().filter(|c| !c.is_empty()),
        terminating_replicas: None,
    };
    if available >= d_replicas(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "True",
                MINIMUM_REPLICAS_AVAILABLE,
                "Deployment has minimum availability.".to_owned(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "False",
                MINIMUM_REPLICAS_UNAVAILABLE,
                "Deployment does not have minimum availability.".to_owned(),
                now,
            ),
        );
    }
    status
}

/// All desired replicas are updated and available, no old ones run, and the generation was
/// observed.
pub fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let s = st(status);
    let replicas = d_replicas(d);
    s.updated == replicas
        && s.replicas == replicas
        && s.available == replicas
        && s.observed_generation >= generation(&d.metadata)
}

/// Whether the new status shows progress over the deployment's current one.
pub fn deployment_progressing(d: &Deployment, new_status: &DeploymentStatus) -> bool {
    let old = st(&d.status.clone().unwrap_or_default());
    let new = st(new_status);
    new.updated > old.updated
        || (new.replicas - new.updated) < (old.replicas - old.updated)
        || new.ready > old.ready
        || new.available > old.available
}

/// Whether the deployment has made no progress within its deadline.
pub fn deployment_timed_out(d: &Deployment, new_status: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(condition) = get_condition(Some(new_status), PROGRESSING) else {
        return false;
    };
    match condition.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => return false,
        Some(TIMED_OUT_REASON) => return true,
        _ => {}
    }
    let deadline = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(0);
    let from = condition
        .last_update_time
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    // from + deadline is before now.
    from.as_nanosecond() + i128::from(deadline) * 1_000_000_000 < now.as_nanosecond()
}

#[cfg(test)]
mod tests;
