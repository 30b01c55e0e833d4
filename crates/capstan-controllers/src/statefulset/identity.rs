//! A StatefulSet pod's identity and storage (upstream's `stateful_set_utils.go`): ordinals from
//! names, the ordinal range `spec.ordinals.start ..= start + replicas - 1`, pods made for an
//! ordinal with their hostname, subdomain, labels and claim volumes, the claims named
//! `<template>-<set>-<ordinal>`, and the claims' owner references that carry
//! `persistentVolumeClaimRetentionPolicy` (the set for whenDeleted, the pod for whenScaled).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::history::HASH_LABEL;
use crate::pods;

/// The label holding a pod's name.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The parent name and ordinal in a pod's name `<parent>-<ordinal>`.
pub fn parent_and_ordinal(name: &str) -> Option<(&str, i32)> {
    let (parent, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, digits.parse().ok()?))
}

/// The pod's ordinal, if its name has one.
pub fn ordinal(pod: &Pod) -> Option<i32> {
    parent_and_ordinal(pod.metadata.name.as_deref()?).map(|(_, o)| o)
}

/// Whether the pod's name makes it one of `set`'s (upstream's `isMemberOf`).
pub fn is_member(set: &StatefulSet, pod: &Pod) -> bool {
    pod.metadata
        .name
        .as_deref()
        .and_then(parent_and_ordinal)
        .is_some_and(|(parent, _)| Some(parent) == set.metadata.name.as_deref())
}

/// The first ordinal.
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

/// The desired number of replicas.
pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Whether the pod's ordinal is within the set's range.
pub fn in_range(set: &StatefulSet, pod: &Pod) -> bool {
    let start = start_ordinal(set);
    ordinal(pod).is_some_and(|o| o >= start && o < start + replicas(set))
}

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

/// `<set>-<ordinal>`.
pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set_name(set))
}

/// `<claim template>-<set>-<ordinal>`.
pub fn claim_name(set: &StatefulSet, template: &str, ordinal: i32) -> String {
    format!("{template}-{}-{ordinal}", set_name(set))
}

fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or_default()
}

/// The claims of the pod with `ordinal` (upstream's `getPersistentVolumeClaims`), in template
/// order: each template named for the pod, with the selector's labels.
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<(String, PersistentVolumeClaim)> {
    let selector_labels = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone());
    claim_templates(set)
        .iter()
        .map(|template| {
            let template_name = template.metadata.name.clone().unwrap_or_default();
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(set, &template_name, ordinal));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let mut labels = claim.metadata.labels.take().unwrap_or_default();
            labels.extend(selector_labels.clone().unwrap_or_default());
            claim.metadata.labels = (!labels.is_empty()).then_some(labels);
            claim.status = None;
            (template_name, claim)
        })
        .collect()
}

/// Sets the name, namespace and identity labels (upstream's `updateIdentity`).
pub fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let Some(ordinal) = ordinal(pod) else { return };
    let name = pod_name(set, ordinal);
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    pod.metadata.name = Some(name);
}

/// Points the pod's volumes at its claims, replacing same-named volumes (upstream's
/// `updateStorage`).
pub fn update_storage(set: &StatefulSet, pod: &mut Pod) {
    let Some(ordinal) = ordinal(pod) else { return };
    let claims = claims_for(set, ordinal);
    let spec = pod.spec.get_or_insert_with(Default::default);
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(template, claim)| Volume {
            name: template.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    for volume in spec.volumes.take().unwrap_or_default() {
        if !claims.iter().any(|(template, _)| *template == volume.name) {
            volumes.push(volume);
        }
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
}

/// Whether the pod's name, namespace and name label fit the set (upstream's `identityMatches`).
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let Some(name) = pod.metadata.name.as_deref() else {
        return false;
    };
    let Some((parent, ordinal)) = parent_and_ordinal(name) else {
        return false;
    };
    Some(parent) == set.metadata.name.as_deref()
        && name == pod_name(set, ordinal)
        && pod.metadata.namespace == set.metadata.namespace
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_NAME_LABEL))
            .map(String::as_str)
            == Some(name)
}

/// Whether the pod mounts every claim of the set (upstream's `storageMatches`).
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let Some(ordinal) = ordinal(pod) else {
        return false;
    };
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    claim_templates(set).iter().all(|template| {
        let template_name = template.metadata.name.as_deref().unwrap_or_default();
        volumes.iter().any(|v| {
            v.name == template_name
                && v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.as_str())
                    == Some(claim_name(set, template_name, ordinal).as_str())
        })
    })
}

/// A new pod for `ordinal` from `template` at `revision` (upstream's `newStatefulSetPod` and
/// `setPodRevision`).
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, ordinal: i32, revision: &str) -> Pod {
    let name = set_name(set);
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let reference = pods::controller_ref("apps/v1", "StatefulSet", &set.metadata);
    let mut pod = pods::pod_from_template(template, &namespace, name, reference);
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(pod_name(set, ordinal));
    update_identity(set, &mut pod);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.hostname = Some(pod_name(set, ordinal));
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    update_storage(set, &mut pod);
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_LABEL.into(), revision.into());
    pod
}

/// The pod's revision label.
pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .map_or("", String::as_str)
}

// ---------------------------------------------------------------------------------------------
// Claim retention (StatefulSetAutoDeletePVC, on since 1.27 and GA in 1.32).

/// (whenScaled deletes, whenDeleted deletes).
fn policy(set: &StatefulSet) -> (bool, bool) {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let deletes = |v: Option<&String>| v.is_some_and(|v| v == "Delete");
    match policy {
        None => (false, false),
        Some(p) => (
            deletes(p.when_scaled.as_ref()),
            deletes(p.when_deleted.as_ref()),
        ),
    }
}

/// Whether claims need retention owner references at all.
pub fn retains_all(set: &StatefulSet) -> bool {
    policy(set) == (false, false)
}

fn matches_ref(r: &OwnerReference, api_version: &str, kind: &str, meta: &ObjectMeta) -> bool {
    r.api_version == api_version && r.kind == kind && Some(&r.name) == meta.name.as_ref()
}

fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

fn has_owner(claim: &PersistentVolumeClaim, owner: &ObjectMeta) -> bool {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|r| r.uid == uid(owner))
}

fn has_stale_owner(
    claim: &PersistentVolumeClaim,
    owner: &ObjectMeta,
    api_version: &str,
    kind: &str,
) -> bool {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| matches_ref(r, api_version, kind, owner))
        .is_some_and(|r| r.uid != uid(owner))
}

/// Whether a ref to a pod of this name with another uid holds the claim (upstream's
/// `PodClaimIsStale` for one claim): the claim belongs to a deleted pod and will be collected.
pub fn claim_is_stale(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    has_stale_owner(claim, &pod.metadata, "v1", "Pod")
}

fn unexpected_controller(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if retains_all(set) {
        return false;
    }
    for r in claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
    {
        if matches_ref(r, "apps/v1", "StatefulSet", &set.metadata) {
            if r.uid != uid(&set.metadata) {
                return true;
            }
            continue;
        }
        if matches_ref(r, "v1", "Pod", &pod.metadata) {
            if r.uid != uid(&pod.metadata) {
                return true;
            }
            continue;
        }
        if r.controller == Some(true) {
            return true;
        }
    }
    false
}

/// Whether the claim's owner references fit the retention policy (upstream's
/// `isClaimOwnerUpToDate`).
pub fn claim_owners_up_to_date(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> bool {
    if has_stale_owner(claim, &set.metadata, "apps/v1", "StatefulSet") || claim_is_stale(claim, pod)
    {
        return true;
    }
    let (on_set, on_pod) = (
        has_owner(claim, &set.metadata),
        has_owner(claim, &pod.metadata),
    );
    if unexpected_controller(claim, set, pod) {
        return !(on_set || on_pod);
    }
    let non_controller = claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|r| {
            (r.uid == uid(&set.metadata) || r.uid == uid(&pod.metadata))
                && r.controller != Some(true)
        });
    if non_controller {
        return false;
    }
    let scaled_down = !in_range(set, pod);
    match policy(set) {
        (false, false) => !on_set && !on_pod,
        (false, true) => on_set && !on_pod,
        (true, false) => !on_set && scaled_down == on_pod,
        (true, true) => scaled_down != on_set && scaled_down == on_pod,
    }
}

/// The claim's owner references as the retention policy wants them (upstream's
/// `updateClaimOwnerRefForSetAndPod`): the set as controller while whenDeleted is Delete and the
/// pod is in range, the pod as controller once scaled down when whenScaled is Delete.
pub fn claim_owners(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> Vec<OwnerReference> {
    let unexpected = unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = claim
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            !matches_ref(r, "apps/v1", "StatefulSet", &set.metadata)
                && !matches_ref(r, "v1", "Pod", &pod.metadata)
        })
        .collect();
    if unexpected {
        return refs;
    }
    let scaled_down = !in_range(set, pod);
    let (when_scaled, when_deleted) = policy(set);
    if when_scaled && scaled_down {
        refs.push(pods::controller_ref("v1", "Pod", &pod.metadata));
    }
    if when_deleted && !(when_scaled && scaled_down) {
        refs.push(pods::controller_ref(
            "apps/v1",
            "StatefulSet",
            &set.metadata,
        ));
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn set(extra: serde_json::Value) -> StatefulSet {
        let mut value = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {"replicas": 3, "serviceName": "nginx",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}],
                                           "volumes": [{"name": "data", "emptyDir": {}},
                                                       {"name": "cache", "emptyDir": {}}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "db"}},
                                               "spec": {"accessModes": ["ReadWriteOnce"]}}]},
        });
        if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_and_ordinals() {
        fn check(name: &str, expected: Option<(&str, i32)>) {
            assert_eq!(parent_and_ordinal(name), expected, "{name}");
        }
        check("web-0", Some(("web", 0)));
        check("my-web-12", Some(("my-web", 12)));
        check("web", None);
        check("web-", None);
        check("web-x1", None);
        check("web-99999999999", None);
        let s = set(json!({"ordinals": {"start": 5}}));
        let pod = |name: &str| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        assert_eq!(start_ordinal(&s), 5);
        assert!(!in_range(&s, &pod("web-4")));
        assert!(in_range(&s, &pod("web-5")) && in_range(&s, &pod("web-7")));
        assert!(!in_range(&s, &pod("web-8")));
        assert!(
            is_member(&s, &pod("web-4"))
                && !is_member(&s, &pod("webs-4"))
                && !is_member(&s, &pod("web"))
        );
        assert_eq!(claim_name(&s, "data", 5), "data-web-5");
    }

    #[test]
    fn new_pods_have_identity_storage_and_revision() {
        let s = set(json!({}));
        let template = s
            .spec
            .as_ref()
            .map(|x| x.template.clone())
            .unwrap_or_default();
        let pod = new_pod(&s, &template, 2, "web-abc");
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(pod.metadata.generate_name, None);
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(POD_NAME_LABEL).map(String::as_str),
            Some("web-2")
        );
        assert_eq!(labels.get(POD_INDEX_LABEL).map(String::as_str), Some("2"));
        assert_eq!(labels.get(HASH_LABEL).map(String::as_str), Some("web-abc"));
        let spec = pod.spec.clone().unwrap_or_default();
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some("web-2"), Some("nginx"))
        );
        let volumes = spec.volumes.unwrap_or_default();
        assert_eq!(
            volumes.len(),
            2,
            "the claim replaces the template's volume of the same name"
        );
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("data-web-2")
        );
        assert_eq!(volumes[1].name, "cache");
        assert!(identity_matches(&s, &pod) && storage_matches(&s, &pod));
        let mut moved = pod.clone();
        moved.metadata.labels = None;
        assert!(!identity_matches(&s, &moved));
        update_identity(&s, &mut moved);
        assert!(identity_matches(&s, &moved));
        let claims = claims_for(&s, 2);
        let labels = claims[0].1.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.len(),
            2,
            "template labels plus the selector's: {labels:?}"
        );
    }

    fn claim(refs: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data-web-1", "ownerReferences": refs}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "uid": format!("{name}-uid")}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn retention_owner_refs() {
        let set_ref = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid", "controller": true});
        let pod_ref = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": format!("{name}-uid"), "controller": true});
        let policy = |scaled: &str, deleted: &str| {
            set(
                json!({"persistentVolumeClaimRetentionPolicy": {"whenScaled": scaled, "whenDeleted": deleted}}),
            )
        };
        // (policy, pod, claim refs) -> (up to date, owner uids wanted)
        let check = |s: &StatefulSet,
                     p: &Pod,
                     refs: serde_json::Value,
                     up_to_date: bool,
                     wanted: &[&str]| {
            let c = claim(refs);
            assert_eq!(claim_owners_up_to_date(&c, s, p), up_to_date, "{c:?}");
            let owners: Vec<String> = claim_owners(&c, s, p).into_iter().map(|r| r.uid).collect();
            assert_eq!(owners, wanted, "{c:?}");
        };
        let (inside, outside) = (pod("web-1"), pod("web-5"));
        let retain = set(json!({}));
        check(&retain, &inside, json!([]), true, &[]);
        check(&retain, &inside, json!([set_ref]), false, &[]);
        let when_deleted = policy("Retain", "Delete");
        check(&when_deleted, &inside, json!([]), false, &["set-uid"]);
        check(&when_deleted, &inside, json!([set_ref]), true, &["set-uid"]);
        check(
            &when_deleted,
            &outside,
            json!([set_ref]),
            true,
            &["set-uid"],
        );
        let when_scaled = policy("Delete", "Retain");
        check(&when_scaled, &inside, json!([]), true, &[]);
        check(&when_scaled, &outside, json!([]), false, &["web-5-uid"]);
        let both = policy("Delete", "Delete");
        check(&both, &inside, json!([set_ref]), true, &["set-uid"]);
        check(&both, &outside, json!([set_ref]), false, &["web-5-uid"]);
        check(
            &both,
            &outside,
            json!([pod_ref("web-5")]),
            true,
            &["web-5-uid"],
        );
        // A non-controller ref of ours needs fixing; another controller is left alone.
        let mut loose = set_ref.clone();
        loose["controller"] = json!(false);
        check(&when_deleted, &inside, json!([loose]), false, &["set-uid"]);
        let other = json!({"apiVersion": "v1", "kind": "Foo", "name": "x", "uid": "foo", "controller": true});
        check(&when_deleted, &inside, json!([other]), true, &["foo"]);
        // A claim of a deleted pod of the same name is stale: untouched, and blocks recreation.
        let old_pod = json!({"apiVersion": "v1", "kind": "Pod", "name": "web-5", "uid": "gone", "controller": true});
        check(&both, &outside, json!([old_pod]), true, &[]);
        assert!(claim_is_stale(&claim(json!([old_pod])), &outside));
        assert!(!claim_is_stale(&claim(json!([pod_ref("web-5")])), &outside));
    }
}
