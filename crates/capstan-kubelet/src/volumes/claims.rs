//! `persistentVolumeClaim` volumes, resolved as the kubelet's volume manager resolves them:
//! the claim must exist, not be being deleted, and be bound to a PersistentVolume whose
//! `claimRef` points back at it; the volume is then mounted as its PersistentVolume's source
//! says. Supported sources: `hostPath` (its path, with the hostPath volume's type checks) and
//! `local` (its path, on a node its required node affinity selects; a local volume without
//! one is refused). A PersistentVolume with a node affinity this node does not match is
//! refused whatever its source.
//!
//! A claim still `Pending` is accepted when it is bound both ways: its `spec.volumeName`
//! names a volume whose `claimRef` names the claim (and its UID, if the reference has one),
//! which the PersistentVolume binder (`capstan-controllers`) marks `Bound` moments later (and
//! which is all a cluster run without the binder has).

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource,
};
use kube::Api;

/// The name of the volume `claim` is bound to, or why it cannot be used yet.
pub fn volume_name(
    claim_name: &str,
    claim: Option<&PersistentVolumeClaim>,
) -> Result<String, String> {
    let Some(claim) = claim else {
        return Err(format!("persistentvolumeclaim {claim_name:?} not found"));
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "persistentvolumeclaim {claim_name:?} is being deleted"
        ));
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("persistentvolumeclaim {claim_name:?} is not bound"))
}

fn phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Checks that `volume` (the one the claim names) is bound to `claim`: a `Bound` claim whose
/// volume is missing or points elsewhere is an error; a claim not yet `Bound` is accepted only
/// if the volume's `claimRef` already names it.
pub fn check_binding<'a>(
    claim: &PersistentVolumeClaim,
    volume_name: &str,
    volume: Option<&'a PersistentVolume>,
) -> Result<&'a PersistentVolume, String> {
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let bound = phase(claim) == "Bound";
    let not_bound = || format!("persistentvolumeclaim {claim_name:?} is not bound");
    let Some(volume) = volume else {
        return Err(if bound {
            format!("persistentvolume {volume_name:?} not found")
        } else {
            not_bound()
        });
    };
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(if bound {
            format!(
                "found PV object {volume_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
            )
        } else {
            not_bound()
        });
    };
    let same_claim = reference.name.as_deref() == Some(claim_name)
        && reference.namespace.as_deref().unwrap_or("default")
            == claim.metadata.namespace.as_deref().unwrap_or("default");
    let uid = reference.uid.as_deref().unwrap_or_default();
    let same_uid = uid.is_empty() || Some(uid) == claim.metadata.uid.as_deref();
    if same_claim && same_uid {
        return Ok(volume);
    }
    Err(if bound {
        format!(
            "found PV object {volume_name} but its pv.Spec.ClaimRef does not point to claim {}/{claim_name}",
            claim.metadata.namespace.as_deref().unwrap_or("default")
        )
    } else {
        not_bound()
    })
}

/// The required node selector of a volume's node affinity, if it has one.
fn required_affinity(volume: &PersistentVolume) -> Option<&NodeSelector> {
    volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()
}

/// The host path a bound volume is mounted from on the node called `node` (with `labels`).
pub fn host_path(
    volume: &PersistentVolume,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PathBuf, String> {
    let name = volume.metadata.name.as_deref().unwrap_or_default();
    let spec = volume.spec.clone().unwrap_or_default();
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!(
            "persistentvolume {name:?}: block volumes are not supported by this node"
        ));
    }
    let affinity = required_affinity(volume);
    if let Some(selector) = affinity
        && !capstan_api::fit::selector_matches(selector, node, labels)
    {
        return Err(format!(
            "volume node affinity conflict: persistentvolume {name:?} does not allow node {node:?}"
        ));
    }
    if let Some(source) = &spec.host_path {
        return crate::volumes::host_path(source);
    }
    if let Some(local) = &spec.local {
        if affinity.is_none() {
            return Err(format!(
                "persistentvolume {name:?}: a local volume requires a node affinity"
            ));
        }
        let path = PathBuf::from(&local.path);
        if !path.exists() {
            return Err(format!(
                "persistentvolume {name:?}: local path {} does not exist",
                path.display()
            ));
        }
        return Ok(path);
    }
    Err(format!(
        "persistentvolume {name:?}: its volume source is not supported by this node (hostPath and local are)"
    ))
}

/// Resolves a claim volume of a pod in `namespace` on the node called `node`: the host path
/// to mount, and whether the claim's volume source makes it read-only. With `owner` (an
/// ephemeral volume's pod), the claim must be that pod's.
pub async fn resolve(
    client: &kube::Client,
    node: &str,
    namespace: &str,
    source: &PersistentVolumeClaimVolumeSource,
    owner: Option<&k8s_openapi::api::core::v1::Pod>,
) -> Result<Resolved, String> {
    let claim_name = source.claim_name.as_str();
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get_opt(claim_name)
        .await
        .map_err(|e| format!("cannot read persistentvolumeclaim {claim_name:?}: {e}"))?;
    let volume_name = volume_name(claim_name, claim.as_ref())?;
    let Some(claim) = claim else {
        return Err(format!("persistentvolumeclaim {claim_name:?} not found"));
    };
    if let Some(pod) = owner {
        capstan_api::fit::volume::check_ephemeral_owner(&claim, pod)?;
    }
    let volume = Api::<PersistentVolume>::all(client.clone())
        .get_opt(&volume_name)
        .await
        .map_err(|e| format!("cannot read persistentvolume {volume_name:?}: {e}"))?;
    let volume = check_binding(&claim, &volume_name, volume.as_ref())?;
    let labels = if required_affinity(volume).is_some() {
        Api::<Node>::all(client.clone())
            .get_opt(node)
            .await
            .map_err(|e| format!("cannot read node {node:?}: {e}"))?
            .and_then(|n| n.metadata.labels)
            .unwrap_or_default()
    } else {
        BTreeMap::new()
    };
    let path = host_path(volume, node, &labels)?;
    Ok(Resolved {
        path,
        read_only: source.read_only == Some(true),
        in_use: in_use_name(volume),
    })
}

/// A claim volume resolved to what the node mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The host path.
    pub path: PathBuf,
    /// Whether the claim's volume source makes it read-only.
    pub read_only: bool,
    /// The name the node reports it under in `status.volumesInUse`, if it reports it.
    pub in_use: Option<String>,
}

/// The unique name upstream's kubelet reports a mounted volume under in the node's
/// `status.volumesInUse`: only for volumes of plugins that attach or mount devices, which of
/// the sources this node mounts is `local` (`kubernetes.io/local-volume/<volume>`); hostPath
/// volumes are not reported.
pub fn in_use_name(volume: &PersistentVolume) -> Option<String> {
    volume.spec.as_ref()?.local.as_ref()?;
    Some(format!(
        "kubernetes.io/local-volume/{}",
        volume.metadata.name.as_deref().unwrap_or("")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        HostPathVolumeSource, LocalVolumeSource, NodeSelectorRequirement, NodeSelectorTerm,
        ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        PersistentVolumeSpec, VolumeNodeAffinity,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn claim(volume: Option<&str>, phase: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".to_owned()),
                namespace: Some("ns".to_owned()),
                uid: Some("claim-uid".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: volume.map(str::to_owned),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(phase.to_owned()),
                ..PersistentVolumeClaimStatus::default()
            }),
        }
    }

    fn volume(reference: Option<(&str, &str, Option<&str>)>) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                claim_ref: reference.map(|(namespace, name, uid)| ObjectReference {
                    namespace: Some(namespace.to_owned()),
                    name: Some(name.to_owned()),
                    uid: uid.map(str::to_owned),
                    ..ObjectReference::default()
                }),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn claims_must_exist_and_be_bound() {
        assert_eq!(
            volume_name("data", None),
            Err("persistentvolumeclaim \"data\" not found".to_owned())
        );
        assert_eq!(
            volume_name("data", Some(&claim(None, "Pending"))),
            Err("persistentvolumeclaim \"data\" is not bound".to_owned())
        );
        let mut deleted = claim(Some("pv"), "Bound");
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::now()),
        );
        assert_eq!(
            volume_name("data", Some(&deleted)),
            Err("persistentvolumeclaim \"data\" is being deleted".to_owned())
        );
        assert_eq!(
            volume_name("data", Some(&claim(Some("pv"), "Bound"))).as_deref(),
            Ok("pv")
        );
    }

    #[test]
    fn volumes_must_point_back_at_the_claim() {
        let bound = claim(Some("pv"), "Bound");
        let pending = claim(Some("pv"), "Pending");
        let back = volume(Some(("ns", "data", Some("claim-uid"))));
        let back_without_uid = volume(Some(("ns", "data", None)));
        let elsewhere = volume(Some(("ns", "other", None)));
        let stale_uid = volume(Some(("ns", "data", Some("old-uid"))));
        let free = volume(None);
        assert!(check_binding(&bound, "pv", Some(&back)).is_ok());
        // Pre-bound both ways: accepted though no binder marked the claim Bound.
        assert!(check_binding(&pending, "pv", Some(&back)).is_ok());
        assert!(check_binding(&pending, "pv", Some(&back_without_uid)).is_ok());
        let not_bound = Err("persistentvolumeclaim \"data\" is not bound".to_owned());
        for volume in [&elsewhere, &stale_uid, &free] {
            assert_eq!(
                check_binding(&pending, "pv", Some(volume)).map(|_| ()),
                not_bound
            );
        }
        assert_eq!(check_binding(&pending, "pv", None).map(|_| ()), not_bound);
        assert_eq!(
            check_binding(&bound, "pv", None).map(|_| ()),
            Err("persistentvolume \"pv\" not found".to_owned())
        );
        assert!(
            check_binding(&bound, "pv", Some(&free))
                .err()
                .is_some_and(|e| e.contains("nil pv.Spec.ClaimRef"))
        );
        assert!(
            check_binding(&bound, "pv", Some(&elsewhere))
                .err()
                .is_some_and(|e| e.contains("does not point to claim ns/data"))
        );
    }

    #[test]
    fn sources_and_node_affinity() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().display().to_string();
        let affinity = |operator: &str, values: &[&str]| VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".to_owned(),
                        operator: operator.to_owned(),
                        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                    }]),
                    match_fields: None,
                }],
            }),
        };
        let labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n1".to_owned())]);
        let with = |source: fn(&str) -> PersistentVolumeSpec,
                    affinity: Option<VolumeNodeAffinity>| {
            let mut pv = volume(None);
            let mut spec = source(&path);
            spec.node_affinity = affinity;
            pv.spec = Some(spec);
            pv
        };
        let host = |path: &str| PersistentVolumeSpec {
            host_path: Some(HostPathVolumeSource {
                path: path.to_owned(),
                type_: Some("Directory".to_owned()),
            }),
            ..PersistentVolumeSpec::default()
        };
        let local = |path: &str| PersistentVolumeSpec {
            local: Some(LocalVolumeSource {
                path: path.to_owned(),
                fs_type: None,
            }),
            ..PersistentVolumeSpec::default()
        };
        let nfs = |_: &str| PersistentVolumeSpec::default();
        assert_eq!(
            host_path(&with(host, None), "n1", &labels).ok(),
            Some(dir.path().to_path_buf())
        );
        assert_eq!(
            host_path(&with(local, Some(affinity("In", &["n1"]))), "n1", &labels).ok(),
            Some(dir.path().to_path_buf())
        );
        let conflict = host_path(&with(local, Some(affinity("In", &["n2"]))), "n1", &labels);
        assert!(
            conflict
                .as_ref()
                .err()
                .is_some_and(|e| e.starts_with("volume node affinity conflict")),
            "{conflict:?}"
        );
        assert!(host_path(&with(host, Some(affinity("NotIn", &["n1"]))), "n1", &labels).is_err());
        let no_affinity = host_path(&with(local, None), "n1", &labels);
        assert!(
            no_affinity
                .as_ref()
                .err()
                .is_some_and(|e| e.contains("requires a node affinity")),
            "{no_affinity:?}"
        );
        assert!(
            host_path(&with(nfs, None), "n1", &labels)
                .err()
                .is_some_and(|e| e.contains("not supported"))
        );
        let mut block = with(host, None);
        if let Some(spec) = block.spec.as_mut() {
            spec.volume_mode = Some("Block".to_owned());
        }
        assert!(host_path(&block, "n1", &labels).is_err());
        Ok(())
    }

    #[test]
    fn an_ephemeral_claim_must_be_its_pods() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
        }))
        .unwrap();
        let owned_by = |uid: &str| -> PersistentVolumeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-scratch", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid, "controller": true}]},
            }))
            .unwrap()
        };
        assert_eq!(
            capstan_api::fit::volume::check_ephemeral_owner(&owned_by("p1"), &pod),
            Ok(())
        );
        assert_eq!(
            capstan_api::fit::volume::check_ephemeral_owner(&owned_by("other"), &pod),
            Err("PVC ns/web-scratch was not created for pod ns/web (pod is not owner)".to_owned())
        );
    }

    #[test]
    fn only_local_volumes_are_reported_in_use() {
        let local: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"}, "spec": {"local": {"path": "/x"}},
        }))
        .unwrap();
        assert_eq!(
            in_use_name(&local).as_deref(),
            Some("kubernetes.io/local-volume/pvc-1")
        );
        let host: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"}, "spec": {"hostPath": {"path": "/x"}},
        }))
        .unwrap();
        assert_eq!(in_use_name(&host), None);
    }
}
