//! Which PersistentVolume may serve which PersistentVolumeClaim, in one place: the
//! PersistentVolume controller's binder, the scheduler's VolumeBinding plugin and the local-path
//! provisioner all decide by these rules (upstream's `pkg/volume/util` claim/volume matching,
//! `FindMatchingVolume` and the binding annotations).
//!
//! A volume matches a claim when it is not being deleted, is free or pre-bound to that claim
//! (`spec.claimRef` naming it, with no uid or the claim's), has the claim's storage class and
//! volume mode, offers every access mode the claim asks for, holds at least the requested
//! capacity and carries the labels of the claim's selector. Of the volumes that match, a volume
//! pre-bound to the claim wins, then the smallest. With delayed binding
//! (`WaitForFirstConsumer`) and no node chosen yet, only pre-bound volumes are considered;
//! with a node, the volume's required node affinity must admit it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::quantity::Quantity;
use crate::selector::LabelSelector;

/// Set on a claim once the binder has finished binding it (upstream's `AnnBindCompleted`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume the controller bound (not the user) (`AnnBoundByController`).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node the scheduler chose for a claim of a delayed-binding class (`AnnSelectedNode`).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner asked to create a claim's volume (`AnnStorageProvisioner`).
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The same, under its beta name, still set and read by upstream (`AnnBetaStorageProvisioner`).
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The provisioner that created a volume (`AnnDynamicallyProvisioned`).
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// A claim's storage class under its beta annotation, read before `spec.storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Marks the default StorageClass.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta name of the same mark, still honoured upstream.
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The provisioner name of classes whose volumes are created by hand (`local` volumes).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// Capstan's own provisioner: a directory per volume on the node that first uses it.
pub const LOCAL_PATH_PROVISIONER: &str = "capstan.io/local-path";
/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while a claim is bound to it.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// A claim's storage class: the beta annotation when present, else `spec.storageClassName`,
/// else "" (upstream's `GetPersistentVolumeClaimClass`).
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(class) = annotation(&claim.metadata.annotations, ANN_BETA_STORAGE_CLASS) {
        return class;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// A volume's storage class, read the same way (`GetPersistentVolumeClass`).
pub fn volume_class(volume: &PersistentVolume) -> &str {
    if let Some(class) = annotation(&volume.metadata.annotations, ANN_BETA_STORAGE_CLASS) {
        return class;
    }
    volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// The volume a claim names (`spec.volumeName`), "" when none.
pub fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Whether the binder finished binding the claim: it names its volume and has the
/// bind-completed annotation (upstream's `isPVCFullyBound`).
pub fn is_fully_bound(claim: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(claim).is_empty()
        && annotation(&claim.metadata.annotations, ANN_BIND_COMPLETED).is_some()
}

/// The reference a volume bound to `claim` holds in `spec.claimRef` (upstream's
/// `reference.GetReference`).
pub fn claim_reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("PersistentVolumeClaim".to_owned()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// The volume bound to the claim (upstream's `GetBindVolumeToClaim`): `spec.claimRef` names
/// it with its uid, and a volume that was not already bound to it is marked bound by the
/// controller. `None` when there is nothing to change.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let mut bound = volume.clone();
    let mut dirty = false;
    let reference = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let same = reference.is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid == claim.metadata.uid
    });
    if !same {
        bound.spec.get_or_insert_default().claim_ref = Some(claim_reference(claim));
        dirty = true;
    }
    let annotations = bound.metadata.annotations.get_or_insert_default();
    if !is_bound_to(volume, claim) && !annotations.contains_key(ANN_BOUND_BY_CONTROLLER) {
        annotations.insert(ANN_BOUND_BY_CONTROLLER.to_owned(), "yes".to_owned());
        dirty = true;
    }
    dirty.then_some(bound)
}

/// Whether a class's `allowedTopologies` admit a node with these labels (upstream's
/// `MatchTopologySelectorTerms`): no terms admit every node; a term admits it when it has
/// expressions and the node's label is among each expression's values.
pub fn topology_admits(class: &StorageClass, labels: &BTreeMap<String, String>) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
    terms.is_empty()
        || terms.iter().any(|term| {
            let expressions = term.match_label_expressions.as_deref().unwrap_or_default();
            !expressions.is_empty()
                && expressions.iter().all(|e| {
                    !e.values.is_empty() && labels.get(&e.key).is_some_and(|v| e.values.contains(v))
                })
        })
}

/// One annotation's value.
pub fn annotation<'a>(
    annotations: &'a Option<BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}

/// Whether a StorageClass is marked default (either annotation, value `true`).
pub fn is_default_class(class: &StorageClass) -> bool {
    [ANN_DEFAULT_CLASS, ANN_BETA_DEFAULT_CLASS]
        .iter()
        .any(|key| annotation(&class.metadata.annotations, key) == Some("true"))
}

/// The default StorageClass among `classes`: of several marked default, the newest (then the
/// first by name), as upstream's `GetDefaultClass`.
pub fn default_class<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes
        .into_iter()
        .filter(|c| is_default_class(c))
        .max_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
}

/// Whether a class binds only once a pod using the claim is scheduled.
pub fn is_delayed_binding(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

/// The storage the claim asks for (`spec.resources.requests.storage`), zero when unset or
/// unreadable (validation refuses both).
pub fn requested_storage(claim: &PersistentVolumeClaim) -> Quantity {
    storage_request(claim).unwrap_or_else(|| Quantity::from_i64(0))
}

/// The claim's `spec.resources.requests.storage`, when set and readable.
pub fn storage_request(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
}

/// The storage a volume holds (`spec.capacity.storage`), zero when unset.
pub fn volume_capacity(volume: &PersistentVolume) -> Quantity {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .unwrap_or_else(|| Quantity::from_i64(0))
}

fn claim_volume_mode(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

fn volume_mode(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

/// Whether the volume offers every access mode the claim asks for.
pub fn access_modes_contained(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
        .iter()
        .all(|mode| offered.contains(mode))
}

/// Whether the volume's `spec.claimRef` names this claim (namespace and name, and the uid
/// when the reference has one).
pub fn is_bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    reference.namespace == claim.metadata.namespace
        && reference.name == claim.metadata.name
        && match reference.uid.as_deref() {
            None | Some("") => true,
            Some(uid) => claim.metadata.uid.as_deref() == Some(uid),
        }
}

/// Whether the volume is free: no `spec.claimRef` at all.
pub fn is_available(volume: &PersistentVolume) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_none()
}

/// Whether the volume's required node affinity admits the node (a volume without one admits
/// every node).
pub fn volume_fits_node(
    volume: &PersistentVolume,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    match volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        None => true,
        Some(required) => super::selector_matches(required, name, labels),
    }
}

/// [`volume_fits_node`] for a Node object.
pub fn volume_fits(volume: &PersistentVolume, node: &Node) -> bool {
    let empty = BTreeMap::new();
    volume_fits_node(
        volume,
        node.metadata.name.as_deref().unwrap_or(""),
        node.metadata.labels.as_ref().unwrap_or(&empty),
    )
}

/// Whether the volume could serve the claim, apart from who it is bound to and where it
/// lives: class, volume mode, access modes, capacity and the claim's selector.
pub fn satisfies(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    if volume.metadata.deletion_timestamp.is_some() || mismatch(claim, volume).is_some() {
        return false;
    }
    match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        None => true,
        Some(selector) => match LabelSelector::from_api(Some(selector)) {
            Ok(selector) => {
                let empty = BTreeMap::new();
                selector.matches(volume.metadata.labels.as_ref().unwrap_or(&empty))
            }
            Err(_) => false,
        },
    }
}

/// Why a volume cannot serve the claim for its size, class, volume mode or access modes
/// (upstream's `checkVolumeSatisfyClaim` reasons, in its order); `None` when it can.
pub fn mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> Option<&'static str> {
    if volume_capacity(volume) < requested_storage(claim) {
        return Some("requested PV is too small");
    }
    if claim_class(claim) != volume_class(volume) {
        return Some("storageClassName does not match");
    }
    if claim_volume_mode(claim) != volume_mode(volume) {
        return Some("incompatible volumeMode");
    }
    if !access_modes_contained(claim, volume) {
        return Some("incompatible accessMode");
    }
    None
}

/// Whether an ephemeral volume's claim was made for `pod` (its controller is the pod), with
/// upstream's error when it was not.
pub fn check_ephemeral_owner(claim: &PersistentVolumeClaim, pod: &Pod) -> Result<(), String> {
    let owned = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref());
    if owned {
        return Ok(());
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    Err(format!(
        "PVC {namespace}/{} was not created for pod {namespace}/{} (pod is not owner)",
        claim.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or(""),
    ))
}

/// The node a delayed-binding match must fit on: its name and labels.
pub type NodeView<'a> = (&'a str, &'a BTreeMap<String, String>);

/// The best volume for a claim among `volumes` (upstream's `FindMatchingVolume`): a matching
/// volume pre-bound to the claim first; otherwise, unless binding waits for a node that is not
/// chosen yet (`delayed` without `node`), the smallest free matching volume; with a node, only
/// volumes whose node affinity admits it.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    delayed: bool,
    node: Option<NodeView<'_>>,
    mut excluded: impl FnMut(&PersistentVolume) -> bool,
) -> Option<&'a PersistentVolume> {
    let mut best: Option<(&PersistentVolume, Quantity)> = None;
    for volume in volumes {
        if excluded(volume) || !satisfies(claim, volume) {
            continue;
        }
        if let Some((name, labels)) = node
            && !volume_fits_node(volume, name, labels)
        {
            continue;
        }
        if is_bound_to(volume, claim) {
            return Some(volume);
        }
        if !is_available(volume) || (delayed && node.is_none()) {
            continue;
        }
        let capacity = volume_capacity(volume);
        if best
            .as_ref()
            .is_none_or(|(_, smallest)| capacity < *smallest)
        {
            best = Some((volume, capacity));
        }
    }
    best.map(|(volume, _)| volume)
}

/// The claims a pod's volumes name, in order: `persistentVolumeClaim` volumes, and for an
/// ephemeral volume the claim made for it (`<pod>-<volume>`).
pub fn pod_claims(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| volume_claim(pod_name, v))
        .collect()
}

/// The claim one pod volume names, if any (see [`pod_claims`]).
pub fn volume_claim(pod_name: &str, volume: &Volume) -> Option<String> {
    if let Some(source) = &volume.persistent_volume_claim {
        return Some(source.claim_name.clone());
    }
    volume
        .ephemeral
        .as_ref()
        .map(|_| format!("{pod_name}-{}", volume.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(spec: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn volume(name: &str, spec: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"tier": "fast"}}, "spec": spec}),
        )
        .unwrap()
    }

    fn basic_claim() -> PersistentVolumeClaim {
        claim(json!({
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        }))
    }

    fn basic_volume(name: &str, size: &str) -> PersistentVolume {
        volume(
            name,
            json!({"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}),
        )
    }

    #[test]
    fn the_smallest_matching_volume_wins() {
        let volumes = [
            basic_volume("big", "10Gi"),
            basic_volume("small", "2Gi"),
            basic_volume("tiny", "500Mi"),
        ];
        let best = best_match(&basic_claim(), &volumes, false, None, |_| false).unwrap();
        assert_eq!(best.metadata.name.as_deref(), Some("small"));
        let best = best_match(&basic_claim(), &volumes, false, None, |v| {
            v.metadata.name.as_deref() == Some("small")
        });
        assert_eq!(best.unwrap().metadata.name.as_deref(), Some("big"));
    }

    #[test]
    fn class_mode_access_and_selector_must_agree() {
        let claim_with = |extra: serde_json::Value| {
            let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            claim(spec)
        };
        let pv = basic_volume("pv", "1Gi");
        assert!(satisfies(&claim_with(json!({})), &pv));
        assert!(!satisfies(
            &claim_with(json!({"storageClassName": "gold"})),
            &pv
        ));
        assert!(!satisfies(&claim_with(json!({"volumeMode": "Block"})), &pv));
        assert!(!satisfies(
            &claim_with(json!({"accessModes": ["ReadWriteMany"]})),
            &pv
        ));
        assert!(!satisfies(
            &claim_with(json!({"resources": {"requests": {"storage": "2Gi"}}})),
            &pv
        ));
        assert!(satisfies(
            &claim_with(json!({"selector": {"matchLabels": {"tier": "fast"}}})),
            &pv
        ));
        assert!(!satisfies(
            &claim_with(json!({"selector": {"matchLabels": {"tier": "slow"}}})),
            &pv
        ));
    }

    #[test]
    fn pre_bound_volumes_come_first_and_others_are_skipped() {
        let mut mine = basic_volume("mine", "5Gi");
        mine.spec.as_mut().unwrap().claim_ref =
            Some(serde_json::from_value(json!({"namespace": "ns", "name": "data"})).unwrap());
        let mut theirs = basic_volume("theirs", "1Gi");
        theirs.spec.as_mut().unwrap().claim_ref =
            Some(serde_json::from_value(json!({"namespace": "ns", "name": "other"})).unwrap());
        let free = basic_volume("free", "2Gi");
        let volumes = [theirs, free, mine];
        let best = best_match(&basic_claim(), &volumes, false, None, |_| false).unwrap();
        assert_eq!(best.metadata.name.as_deref(), Some("mine"));
        // Delayed binding without a node: only the pre-bound volume.
        let best = best_match(&basic_claim(), &volumes[..2], true, None, |_| false);
        assert!(best.is_none());
    }

    #[test]
    fn node_affinity_limits_delayed_matches() {
        let local = volume(
            "local",
            json!({
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]}]}},
            }),
        );
        let volumes = [local];
        let a = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "a".to_owned())]);
        let b = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "b".to_owned())]);
        assert!(best_match(&basic_claim(), &volumes, true, Some(("a", &a)), |_| false).is_some());
        assert!(best_match(&basic_claim(), &volumes, true, Some(("b", &b)), |_| false).is_none());
    }

    #[test]
    fn the_beta_class_annotation_wins_and_defaults_pick_the_newest() {
        let mut c = basic_claim();
        c.metadata.annotations = Some(BTreeMap::from([(
            ANN_BETA_STORAGE_CLASS.to_owned(),
            "slow".to_owned(),
        )]));
        assert_eq!(claim_class(&c), "slow");
        let class = |name: &str, at: &str, default: bool| -> StorageClass {
            let mut meta = json!({"name": name, "creationTimestamp": at});
            if default {
                meta["annotations"] = json!({ANN_DEFAULT_CLASS: "true"});
            }
            serde_json::from_value(json!({"metadata": meta, "provisioner": "p"})).unwrap()
        };
        let classes = [
            class("old", "2024-01-01T00:00:00Z", true),
            class("new", "2025-01-01T00:00:00Z", true),
            class("newest", "2026-01-01T00:00:00Z", false),
        ];
        assert_eq!(
            default_class(&classes).unwrap().metadata.name.as_deref(),
            Some("new")
        );
    }

    #[test]
    fn pod_claims_include_ephemeral_volumes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}},
            ]},
        }))
        .unwrap();
        assert_eq!(pod_claims(&pod), ["data-web-0", "web-0-scratch"]);
    }
}
