//! VolumeZone: a pod whose bound volumes carry zone or region labels goes only to nodes in
//! those zones and regions (upstream's `volumezone` plugin).
//!
//! PreFilter reads the PersistentVolumes bound to the pod's `persistentVolumeClaim` volumes and
//! keeps their topology labels (`topology.kubernetes.io/zone` and `/region`, and their
//! `failure-domain.beta.kubernetes.io/` forerunners), each value a set of zones joined by
//! `__`; it says Skip when there are none. An unbound claim of a `WaitForFirstConsumer` class
//! is left to VolumeBinding; any other unbound claim, a claim or volume that does not exist, or
//! a missing class rejects the pod everywhere with upstream's words. Filter admits a node with
//! no topology label at all (a single-zone cluster), and otherwise a node whose label (the GA
//! key for a beta one) is among each volume's values.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::framework::{ClusterEvent, CycleState, Plugin, Point, PreFilterResult, Status};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "VolumeZone";
/// Upstream's reason when a node is outside a volume's zone.
pub const REASON: &str = "node(s) had no available volume zone";

const STATE_KEY: &str = "PreFilterVolumeZone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
/// The labels looked at, in upstream's order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

/// One topology label of a volume: its key and the zones (or regions) it allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The label's key.
    pub key: &'static str,
    /// The values allowed.
    pub values: BTreeSet<String>,
}

/// The plugin.
#[derive(Debug, Default)]
pub struct VolumeZone;

/// The topology labels of a volume (a value with an empty part is ignored, as upstream's
/// parser refuses it).
pub fn topologies(volume: &PersistentVolume) -> Vec<Topology> {
    let Some(labels) = volume.metadata.labels.as_ref() else {
        return Vec::new();
    };
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|key| {
            let value = labels.get(*key)?;
            let values: BTreeSet<String> = value.split("__").map(|z| z.trim().to_owned()).collect();
            (!values.iter().any(String::is_empty)).then_some(Topology { key, values })
        })
        .collect()
}

/// The GA key of a beta topology key.
fn ga(key: &str) -> &str {
    match key {
        BETA_ZONE => ZONE,
        BETA_REGION => REGION,
        other => other,
    }
}

/// The topologies of the pod's bound volumes, or why the pod fits nowhere.
pub fn pod_topologies(pod: &PodInfo, snapshot: &Snapshot) -> Result<Vec<Topology>, Status> {
    let volumes = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut found = Vec::new();
    for source in volumes
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
    {
        let name = source.claim_name.as_str();
        if name.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(claim) = snapshot.pvc(pod.namespace(), name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim \"{name}\" not found"
            )));
        };
        let volume_name = capstan_api::fit::volume::claim_volume_name(claim);
        if volume_name.is_empty() {
            let class_name = capstan_api::fit::volume::claim_class(claim);
            if class_name.is_empty() {
                return Err(Status::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(class) = snapshot.storage_class(class_name) else {
                return Err(Status::unresolvable(format!(
                    "storageclass.storage.k8s.io \"{class_name}\" not found"
                )));
            };
            match class.volume_binding_mode.as_deref() {
                None => {
                    return Err(Status::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass \"{class_name}\""
                    )));
                }
                Some("WaitForFirstConsumer") => continue,
                Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
            }
        }
        let Some(volume) = snapshot.pv(volume_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolume \"{volume_name}\" not found"
            )));
        };
        found.extend(topologies(volume));
    }
    Ok(found)
}

/// Whether the node is in every volume's zones (a node without topology labels always is).
pub fn fits(topologies: &[Topology], node: &NodeInfo) -> bool {
    let labels = node.labels();
    if !TOPOLOGY_LABELS.iter().any(|key| labels.contains_key(*key)) {
        return true;
    }
    topologies.iter().all(|t| {
        labels
            .get(t.key)
            .or_else(|| labels.get(ga(t.key)))
            .is_some_and(|v| t.values.contains(v))
    })
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        // A node's labels, or a claim, volume or class added or changed.
        &[
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::Other,
        ]
    }
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, PreFilterResult) {
        match pod_topologies(pod, snapshot) {
            Err(status) => (status, PreFilterResult::default()),
            Ok(found) if found.is_empty() => (Status::skip(), PreFilterResult::default()),
            Ok(found) => {
                state.write(STATE_KEY, found);
                (Status::success(), PreFilterResult::default())
            }
        }
    }
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<Vec<Topology>>(STATE_KEY) else {
            return Status::error(format!("reading {STATE_KEY:?} from cycleState: not found"));
        };
        if fits(found, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::*;
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn snapshot_with(claims: Value, volumes: Value, classes: Value) -> Snapshot {
        let mut snapshot = Snapshot::new();
        for c in claims.as_array().unwrap() {
            snapshot.upsert_pvc(Arc::new(serde_json::from_value(c.clone()).unwrap()));
        }
        for v in volumes.as_array().unwrap() {
            snapshot.upsert_pv(Arc::new(serde_json::from_value(v.clone()).unwrap()));
        }
        for c in classes.as_array().unwrap() {
            snapshot.upsert_storage_class(Arc::new(serde_json::from_value(c.clone()).unwrap()));
        }
        snapshot
    }

    fn claim_pod(claim: &str) -> Arc<PodInfo> {
        pod(
            "p",
            json!({}),
            json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}),
        )
    }

    fn zoned(name: &str, labels: Value) -> NodeInfo {
        NodeInfo::new(node(name, labels, json!({}), json!({})), [])
    }

    #[test]
    fn bound_volumes_pin_pods_to_their_zones() {
        let snapshot = snapshot_with(
            json!([{"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv"}}]),
            json!([{"metadata": {"name": "pv", "labels": {ZONE: "a__b", BETA_REGION: "r1"}}}]),
            json!([]),
        );
        let found = pod_topologies(&claim_pod("data"), &snapshot).unwrap();
        assert_eq!(found.len(), 2);
        assert!(fits(
            &found,
            &zoned("in-a", json!({ZONE: "a", REGION: "r1"}))
        ));
        assert!(fits(
            &found,
            &zoned("in-b", json!({ZONE: "b", BETA_REGION: "r1"}))
        ));
        assert!(!fits(
            &found,
            &zoned("in-c", json!({ZONE: "c", REGION: "r1"}))
        ));
        assert!(!fits(
            &found,
            &zoned("other-region", json!({ZONE: "a", REGION: "r2"}))
        ));
        // A node without any topology label: a single-zone cluster.
        assert!(fits(
            &found,
            &zoned("plain", json!({"kubernetes.io/hostname": "plain"}))
        ));
    }

    #[test]
    fn unbound_claims_wait_for_a_consumer_or_reject() {
        let snapshot = snapshot_with(
            json!([
                {"metadata": {"name": "later", "namespace": "default"}, "spec": {"storageClassName": "wait"}},
                {"metadata": {"name": "now", "namespace": "default"}, "spec": {"storageClassName": "now"}},
                {"metadata": {"name": "classless", "namespace": "default"}, "spec": {"storageClassName": ""}},
                {"metadata": {"name": "lost", "namespace": "default"}, "spec": {"volumeName": "gone"}},
            ]),
            json!([]),
            json!([
                {"metadata": {"name": "wait"}, "provisioner": "p", "volumeBindingMode": "WaitForFirstConsumer"},
                {"metadata": {"name": "now"}, "provisioner": "p", "volumeBindingMode": "Immediate"},
            ]),
        );
        assert_eq!(
            pod_topologies(&claim_pod("later"), &snapshot),
            Ok(Vec::new())
        );
        let message = |claim: &str| {
            pod_topologies(&claim_pod(claim), &snapshot)
                .unwrap_err()
                .message()
        };
        assert_eq!(message("now"), "PersistentVolume had no name");
        assert_eq!(
            message("classless"),
            "PersistentVolumeClaim had no pv name and storageClass name"
        );
        assert_eq!(message("lost"), "persistentvolume \"gone\" not found");
        assert_eq!(
            message("missing"),
            "persistentvolumeclaim \"missing\" not found"
        );
    }

    #[test]
    fn a_value_with_an_empty_zone_is_ignored() {
        let volume: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "pv", "labels": {ZONE: "a__"}}}))
                .unwrap();
        assert!(topologies(&volume).is_empty());
    }
}
