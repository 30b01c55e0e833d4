//! The binder's decisions, as pure functions of a claim or a volume and the cached objects
//! (upstream's `syncClaim` and `syncVolume`). [`claim_step`] says what a claim needs and
//! [`volume_step`] what a volume needs; `mod.rs` carries them out through the API. The
//! matching itself is `capstan_api::fit::volume`, shared with the scheduler.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_api::fit::volume::{
    self as fit, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, NO_PROVISIONER,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

/// An event to record on the object being synced: type (`Normal`/`Warning`), reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `true` for a Warning.
    pub warning: bool,
    /// Upstream's reason.
    pub reason: &'static str,
    /// Upstream's message.
    pub message: String,
}

fn normal(reason: &'static str, message: impl Into<String>) -> Note {
    Note {
        warning: false,
        reason,
        message: message.into(),
    }
}

fn warning(reason: &'static str, message: impl Into<String>) -> Note {
    Note {
        warning: true,
        reason,
        message: message.into(),
    }
}

/// What a claim needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimStep {
    /// Bind it to this volume (or finish a binding half done), then mark both Bound.
    Bind(String),
    /// Leave it Pending, with an event to say why (or none).
    Pending(Option<Note>),
    /// Ask the class's provisioner for a volume (annotate the claim), leaving it Pending.
    Provision {
        /// The provisioner's name.
        provisioner: String,
        /// Upstream's `ExternalProvisioning` event.
        note: Note,
    },
    /// The claim was bound but its volume is gone or taken: phase Lost, with the event.
    Lost(Note),
}

/// The message upstream's controller repeats while an external provisioner has not created
/// a claim's volume.
pub fn external_provisioning_message(provisioner: &str) -> String {
    format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    )
}

/// Whether the claim's binding is complete (the annotation the binder sets last).
pub fn bind_completed(claim: &PersistentVolumeClaim) -> bool {
    fit::annotation(&claim.metadata.annotations, ANN_BIND_COMPLETED).is_some()
}

/// The default class to give an unbound claim that names none at all (upstream's retroactive
/// default StorageClass assignment: a claim made before any class was marked default gets
/// it once one is; `""` is a choice and is kept).
pub fn retroactive_class(
    claim: &PersistentVolumeClaim,
    classes: &BTreeMap<String, Arc<StorageClass>>,
) -> Option<String> {
    let names_none = claim
        .spec
        .as_ref()
        .is_none_or(|s| s.storage_class_name.is_none())
        && fit::annotation(&claim.metadata.annotations, fit::ANN_BETA_STORAGE_CLASS).is_none();
    if !names_none || !fit::claim_volume_name(claim).is_empty() || bind_completed(claim) {
        return None;
    }
    fit::default_class(classes.values().map(Arc::as_ref)).and_then(|c| c.metadata.name.clone())
}

/// What an unbound or bound claim needs, given every cached volume and class.
pub fn claim_step(
    claim: &PersistentVolumeClaim,
    volumes: &BTreeMap<String, Arc<PersistentVolume>>,
    classes: &BTreeMap<String, Arc<StorageClass>>,
) -> ClaimStep {
    claim_step_excluding(claim, volumes, classes, |_| false)
}

/// [`claim_step`], never choosing a free volume that `taken` says another claim is being
/// bound to (the binder's own writes the cache has not shown yet).
pub fn claim_step_excluding(
    claim: &PersistentVolumeClaim,
    volumes: &BTreeMap<String, Arc<PersistentVolume>>,
    classes: &BTreeMap<String, Arc<StorageClass>>,
    taken: impl FnMut(&PersistentVolume) -> bool,
) -> ClaimStep {
    let named = fit::claim_volume_name(claim);
    if bind_completed(claim) {
        if named.is_empty() {
            return ClaimStep::Lost(warning(
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            ));
        }
        let Some(volume) = volumes.get(named) else {
            return ClaimStep::Lost(warning(
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            ));
        };
        if fit::is_available(volume) || fit::is_bound_to(volume, claim) {
            return ClaimStep::Bind(named.to_owned());
        }
        return ClaimStep::Lost(warning(
            "ClaimMisbound",
            "Two claims are bound to the same volume, this one is bound incorrectly",
        ));
    }
    if !named.is_empty() {
        // The user named the volume.
        let Some(volume) = volumes.get(named) else {
            return ClaimStep::Pending(None);
        };
        if fit::is_bound_to(volume, claim) {
            return ClaimStep::Bind(named.to_owned());
        }
        if !fit::is_available(volume) {
            return ClaimStep::Pending(None);
        }
        return match fit::mismatch(claim, volume) {
            Some(why) => ClaimStep::Pending(Some(warning(
                "VolumeMismatch",
                format!("Cannot bind to requested volume \"{named}\": {why}"),
            ))),
            None => ClaimStep::Bind(named.to_owned()),
        };
    }
    let class_name = fit::claim_class(claim);
    let class = classes.get(class_name).map(Arc::as_ref);
    let delayed = fit::is_delayed_binding(class);
    if let Some(volume) = fit::best_match(
        claim,
        volumes.values().map(Arc::as_ref),
        delayed,
        None,
        taken,
    ) {
        return ClaimStep::Bind(volume.metadata.name.clone().unwrap_or_default());
    }
    let selected = fit::annotation(&claim.metadata.annotations, ANN_SELECTED_NODE).is_some();
    if delayed && !selected {
        return ClaimStep::Pending(Some(normal(
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        )));
    }
    if class_name.is_empty() {
        return ClaimStep::Pending(Some(normal(
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set",
        )));
    }
    let Some(class) = class else {
        return ClaimStep::Pending(Some(warning(
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
        )));
    };
    let provisioner = class.provisioner.as_str();
    if provisioner == NO_PROVISIONER || provisioner.starts_with("kubernetes.io/") {
        // The in-tree provisioners are gone upstream; none is built in here.
        return ClaimStep::Pending(Some(warning(
            "ProvisioningFailed",
            format!("no volume plugin matched name: {provisioner}"),
        )));
    }
    ClaimStep::Provision {
        provisioner: provisioner.to_owned(),
        note: normal(
            "ExternalProvisioning",
            external_provisioning_message(provisioner),
        ),
    }
}

/// Whether a claim still has to be annotated for its provisioner.
pub fn needs_provisioner_annotation(claim: &PersistentVolumeClaim, provisioner: &str) -> bool {
    fit::annotation(&claim.metadata.annotations, ANN_STORAGE_PROVISIONER) != Some(provisioner)
}

/// What a volume needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeStep {
    /// Nothing (or only its phase, see [`VolumeStep::Phase`]).
    Nothing,
    /// Set this phase (with an event when given).
    Phase(&'static str, Option<Note>),
    /// The claim it names is bound elsewhere and the controller bound it: free it.
    Unbind,
    /// Its claim is gone and its reclaim policy is Delete and its provisioner deletes it.
    AwaitProvisionerDelete,
}

fn phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn set_phase(volume: &PersistentVolume, wanted: &'static str) -> VolumeStep {
    if phase(volume) == wanted {
        VolumeStep::Nothing
    } else {
        VolumeStep::Phase(wanted, None)
    }
}

/// What a volume needs, given the cached claim its `claimRef` names (if any).
pub fn volume_step(volume: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumeStep {
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return set_phase(volume, "Available");
    };
    let uid = reference.uid.as_deref().unwrap_or("");
    if uid.is_empty() {
        // Pre-bound by its user to a claim by name; the claim's sync binds it.
        return set_phase(volume, "Available");
    }
    let claim = claim.filter(|c| c.metadata.uid.as_deref() == Some(uid));
    let Some(claim) = claim else {
        return released(volume);
    };
    let name = volume.metadata.name.as_deref().unwrap_or("");
    match fit::claim_volume_name(claim) {
        "" => VolumeStep::Nothing,
        bound if bound == name => set_phase(volume, "Bound"),
        _ if fit::annotation(&volume.metadata.annotations, ANN_BOUND_BY_CONTROLLER).is_some() => {
            VolumeStep::Unbind
        }
        _ => VolumeStep::Nothing,
    }
}

/// A volume whose claim is gone: Released, then its reclaim policy.
fn released(volume: &PersistentVolume) -> VolumeStep {
    let current = phase(volume);
    if current != "Released" && current != "Failed" {
        return VolumeStep::Phase("Released", None);
    }
    if current == "Failed" {
        return VolumeStep::Nothing;
    }
    let policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain");
    let name = volume.metadata.name.as_deref().unwrap_or("");
    match policy {
        "Recycle" => VolumeStep::Phase(
            "Failed",
            Some(warning(
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )),
        ),
        "Delete" => match fit::annotation(&volume.metadata.annotations, ANN_PROVISIONED_BY) {
            Some(provisioner) if !provisioner.starts_with("kubernetes.io/") => {
                VolumeStep::AwaitProvisionerDelete
            }
            _ => VolumeStep::Phase(
                "Failed",
                Some(warning(
                    "VolumeFailedDelete",
                    format!(
                        "error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched"
                    ),
                )),
            ),
        },
        _ => VolumeStep::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn claim(spec: Value, annotations: Value) -> PersistentVolumeClaim {
        let mut spec_full = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        for (k, v) in spec.as_object().unwrap() {
            spec_full[k] = v.clone();
        }
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "c1", "annotations": annotations},
            "spec": spec_full,
        }))
        .unwrap()
    }

    fn volume(name: &str, spec: Value, phase: &str, annotations: Value) -> Arc<PersistentVolume> {
        let mut spec_full =
            json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}});
        for (k, v) in spec.as_object().unwrap() {
            spec_full[k] = v.clone();
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": annotations},
                "spec": spec_full,
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    fn volumes(list: Vec<Arc<PersistentVolume>>) -> BTreeMap<String, Arc<PersistentVolume>> {
        list.into_iter()
            .map(|v| (v.metadata.name.clone().unwrap(), v))
            .collect()
    }

    fn classes(list: Value) -> BTreeMap<String, Arc<StorageClass>> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let class: StorageClass = serde_json::from_value(c.clone()).unwrap();
                (class.metadata.name.clone().unwrap(), Arc::new(class))
            })
            .collect()
    }

    const MINE: &str = "{\"namespace\": \"ns\", \"name\": \"data\", \"uid\": \"c1\"}";

    #[test]
    fn unbound_claims_bind_wait_or_provision() {
        let no_classes = classes(json!([]));
        let free = volumes(vec![volume("pv", json!({}), "Available", json!({}))]);
        let c = claim(json!({"storageClassName": ""}), json!({}));
        assert_eq!(
            claim_step(&c, &free, &no_classes),
            ClaimStep::Bind("pv".into())
        );
        // No volume and no class.
        match claim_step(&c, &BTreeMap::new(), &no_classes) {
            ClaimStep::Pending(Some(note)) => assert_eq!(note.reason, "FailedBinding"),
            other => panic!("{other:?}"),
        }
        let wait = classes(json!([
            {"metadata": {"name": "local-path"}, "provisioner": "capstan.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"},
            {"metadata": {"name": "manual"}, "provisioner": "kubernetes.io/no-provisioner"},
            {"metadata": {"name": "ext"}, "provisioner": "example.com/x"},
        ]));
        let c = claim(json!({"storageClassName": "local-path"}), json!({}));
        match claim_step(&c, &BTreeMap::new(), &wait) {
            ClaimStep::Pending(Some(note)) => assert_eq!(note.reason, "WaitForFirstConsumer"),
            other => panic!("{other:?}"),
        }
        let c = claim(
            json!({"storageClassName": "local-path"}),
            json!({ANN_SELECTED_NODE: "n1"}),
        );
        match claim_step(&c, &BTreeMap::new(), &wait) {
            ClaimStep::Provision { provisioner, note } => {
                assert_eq!(provisioner, "capstan.io/local-path");
                assert_eq!(
                    note.message,
                    external_provisioning_message("capstan.io/local-path")
                );
            }
            other => panic!("{other:?}"),
        }
        let c = claim(json!({"storageClassName": "manual"}), json!({}));
        match claim_step(&c, &BTreeMap::new(), &wait) {
            ClaimStep::Pending(Some(note)) => {
                assert_eq!(
                    note.message,
                    "no volume plugin matched name: kubernetes.io/no-provisioner"
                )
            }
            other => panic!("{other:?}"),
        }
        let c = claim(json!({"storageClassName": "gone"}), json!({}));
        match claim_step(&c, &BTreeMap::new(), &wait) {
            ClaimStep::Pending(Some(note)) => {
                assert_eq!(
                    note.message,
                    "storageclass.storage.k8s.io \"gone\" not found"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claim_naming_its_volume() {
        let none = classes(json!([]));
        let c = claim(
            json!({"volumeName": "pv", "storageClassName": ""}),
            json!({}),
        );
        assert_eq!(
            claim_step(&c, &BTreeMap::new(), &none),
            ClaimStep::Pending(None)
        );
        let small = volumes(vec![volume(
            "pv",
            json!({"capacity": {"storage": "1Mi"}}),
            "Available",
            json!({}),
        )]);
        match claim_step(&c, &small, &none) {
            ClaimStep::Pending(Some(note)) => assert_eq!(
                note.message,
                "Cannot bind to requested volume \"pv\": requested PV is too small"
            ),
            other => panic!("{other:?}"),
        }
        let other = volumes(vec![volume(
            "pv",
            json!({"claimRef": {"namespace": "ns", "name": "else", "uid": "x"}}),
            "Bound",
            json!({}),
        )]);
        assert_eq!(claim_step(&c, &other, &none), ClaimStep::Pending(None));
        let ok = volumes(vec![volume("pv", json!({}), "Available", json!({}))]);
        assert_eq!(claim_step(&c, &ok, &none), ClaimStep::Bind("pv".into()));
    }

    #[test]
    fn bound_claims_stay_bound_or_are_lost() {
        let none = classes(json!([]));
        let done = json!({ANN_BIND_COMPLETED: "yes"});
        let c = claim(
            json!({"volumeName": "pv", "storageClassName": ""}),
            done.clone(),
        );
        let mine = volumes(vec![volume(
            "pv",
            json!({"claimRef": serde_json::from_str::<Value>(MINE).unwrap()}),
            "Bound",
            json!({}),
        )]);
        assert_eq!(claim_step(&c, &mine, &none), ClaimStep::Bind("pv".into()));
        match claim_step(&c, &BTreeMap::new(), &none) {
            ClaimStep::Lost(note) => assert_eq!(note.reason, "ClaimLost"),
            other => panic!("{other:?}"),
        }
        let theirs = volumes(vec![volume(
            "pv",
            json!({"claimRef": {"namespace": "ns", "name": "data", "uid": "older"}}),
            "Bound",
            json!({}),
        )]);
        match claim_step(&c, &theirs, &none) {
            ClaimStep::Lost(note) => assert_eq!(note.reason, "ClaimMisbound"),
            other => panic!("{other:?}"),
        }
        let c = claim(json!({"storageClassName": ""}), done);
        match claim_step(&c, &mine, &none) {
            ClaimStep::Lost(note) => assert!(note.message.contains("lost reference")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn volumes_follow_their_claims() {
        let reference: Value = serde_json::from_str(MINE).unwrap();
        let free = volume("pv", json!({}), "Pending", json!({}));
        assert_eq!(
            volume_step(&free, None),
            VolumeStep::Phase("Available", None)
        );
        let bound = volume("pv", json!({"claimRef": reference}), "Available", json!({}));
        let c = claim(json!({"volumeName": "pv"}), json!({}));
        assert_eq!(
            volume_step(&bound, Some(&c)),
            VolumeStep::Phase("Bound", None)
        );
        // The claim is gone: Released first, then the policy.
        assert_eq!(
            volume_step(&bound, None),
            VolumeStep::Phase("Released", None)
        );
        let retain = volume(
            "pv",
            json!({"claimRef": reference, "persistentVolumeReclaimPolicy": "Retain"}),
            "Released",
            json!({}),
        );
        assert_eq!(volume_step(&retain, None), VolumeStep::Nothing);
        let recycle = volume(
            "pv",
            json!({"claimRef": reference, "persistentVolumeReclaimPolicy": "Recycle"}),
            "Released",
            json!({}),
        );
        match volume_step(&recycle, None) {
            VolumeStep::Phase("Failed", Some(note)) => {
                assert_eq!(note.reason, "VolumeFailedRecycle")
            }
            other => panic!("{other:?}"),
        }
        let delete = volume(
            "pv",
            json!({"claimRef": reference, "persistentVolumeReclaimPolicy": "Delete"}),
            "Released",
            json!({}),
        );
        match volume_step(&delete, None) {
            VolumeStep::Phase("Failed", Some(note)) => {
                assert_eq!(note.reason, "VolumeFailedDelete")
            }
            other => panic!("{other:?}"),
        }
        let provisioned = volume(
            "pv",
            json!({"claimRef": reference, "persistentVolumeReclaimPolicy": "Delete"}),
            "Released",
            json!({ANN_PROVISIONED_BY: "capstan.io/local-path"}),
        );
        assert_eq!(
            volume_step(&provisioned, None),
            VolumeStep::AwaitProvisionerDelete
        );
        // A claim of the same name but another uid is another claim.
        let mut newer = c.clone();
        newer.metadata.uid = Some("c2".into());
        assert_eq!(
            volume_step(&bound, Some(&newer)),
            VolumeStep::Phase("Released", None)
        );
        // Bound by the controller to a claim now bound elsewhere: freed.
        let by_us = volume(
            "pv",
            json!({"claimRef": reference}),
            "Bound",
            json!({ANN_BOUND_BY_CONTROLLER: "yes"}),
        );
        let elsewhere = claim(json!({"volumeName": "other"}), json!({}));
        assert_eq!(volume_step(&by_us, Some(&elsewhere)), VolumeStep::Unbind);
    }

    #[test]
    fn a_volume_taken_by_an_inflight_binding_is_skipped() {
        let none = classes(json!([]));
        let free = volumes(vec![
            volume("a", json!({}), "Available", json!({})),
            volume(
                "b",
                json!({"capacity": {"storage": "2Gi"}}),
                "Available",
                json!({}),
            ),
        ]);
        let c = claim(json!({"storageClassName": ""}), json!({}));
        assert_eq!(claim_step(&c, &free, &none), ClaimStep::Bind("a".into()));
        let step = claim_step_excluding(&c, &free, &none, |v| {
            v.metadata.name.as_deref() == Some("a")
        });
        assert_eq!(step, ClaimStep::Bind("b".into()));
    }

    #[test]
    fn a_claim_naming_no_class_gets_the_default_later() {
        let defaults = classes(json!([
            {"metadata": {"name": "fast", "annotations": {fit::ANN_DEFAULT_CLASS: "true"}}, "provisioner": "p"},
        ]));
        let unset = claim(json!({}), json!({}));
        assert_eq!(
            retroactive_class(&unset, &defaults),
            Some("fast".to_owned())
        );
        assert_eq!(retroactive_class(&unset, &classes(json!([]))), None);
        let empty = claim(json!({"storageClassName": ""}), json!({}));
        assert_eq!(retroactive_class(&empty, &defaults), None);
        let named = claim(json!({"volumeName": "pv"}), json!({}));
        assert_eq!(retroactive_class(&named, &defaults), None);
    }
}
