//! VolumeRestrictions: volumes that two pods may not share.
//!
//! - Disk conflicts, node by node: a GCE persistent disk (same `pdName`) unless both pods
//!   mount it read-only, an AWS EBS volume (same `volumeID`) always, a Ceph RBD image (a
//!   monitor in common, same pool and image) unless both mount it read-only, an iSCSI target
//!   (same IQN) unless both mount it read-only. The node is rejected with upstream's
//!   `node(s) had no available disk` (Unschedulable).
//! - ReadWriteOncePod, cluster-wide: a claim whose access modes include `ReadWriteOncePod` may
//!   be used by one pod only; while another pod anywhere uses it (a volume naming the claim in
//!   the same namespace), every node is rejected with upstream's reason (Unschedulable, so
//!   preempting that pod can help). A claim the pod names that does not exist rejects the pod
//!   at PreFilter (`persistentvolumeclaim "<name>" not found`, unresolvable).
//!
//! PreFilter says Skip when the pod has neither kind of volume that matters.
//!
//! Simplified: upstream keeps a per-cycle count that preemption's dry run adjusts as victims
//! are removed and added back (PreFilter extensions). This framework has no such hooks, so
//! PreFilter records how many references each node's pods hold, and Filter counts the
//! references in the node info it is given: a dry run on a node without its victims sees the
//! same count upstream's adjusted state would. Those references are counted within the pod's
//! namespace (upstream's adjustment matches the claim name alone).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::framework::{ClusterEvent, CycleState, Plugin, Point, PreFilterResult, Status};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream's reason for a disk another pod on the node holds.
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream's reason for a ReadWriteOncePod claim another pod uses.
pub const REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";
/// The access mode that allows a single pod.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// Where PreFilter leaves its state (upstream's key).
const STATE_KEY: &str = "PreFilterVolumeRestrictions";

/// The plugin.
#[derive(Debug, Default)]
pub struct VolumeRestrictions;

/// What PreFilter computes for Filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterState {
    /// The pod's claims (names, in its namespace) with the ReadWriteOncePod access mode.
    pub read_write_once_pod_claims: BTreeSet<String>,
    /// How many of those claims some placed pod already uses (upstream's initial count).
    pub claims_in_use: usize,
    /// Per node, how many volumes of its pods name one of those claims.
    pub references_by_node: BTreeMap<String, usize>,
}

impl PreFilterState {
    /// Whether the claims conflict on this node: upstream's count, with the references held
    /// by pods the node info no longer (or newly) has taken off (or added).
    pub fn conflicts_on(&self, namespace: &str, node: &NodeInfo) -> bool {
        if self.read_write_once_pod_claims.is_empty() {
            return false;
        }
        let recorded = self
            .references_by_node
            .get(&node.name)
            .copied()
            .unwrap_or(0);
        let present: usize = node
            .pods
            .iter()
            .map(|p| claim_references(&p.pod, namespace, &self.read_write_once_pod_claims))
            .sum();
        let count = self.claims_in_use as i64 - recorded as i64 + present as i64;
        count > 0
    }
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// Whether a volume is of a kind disk conflicts are checked for (upstream's
/// `needsRestrictionsCheck`).
pub fn needs_conflict_check(volume: &Volume) -> bool {
    volume.gce_persistent_disk.is_some()
        || volume.aws_elastic_block_store.is_some()
        || volume.rbd.is_some()
        || volume.iscsi.is_some()
}

/// Whether `volume` (of the incoming pod) and `existing` (of a pod on the node) are the same
/// disk mounted in a way that cannot be shared.
pub fn volumes_conflict(volume: &Volume, existing: &Volume) -> bool {
    if let (Some(a), Some(b)) = (&volume.gce_persistent_disk, &existing.gce_persistent_disk)
        && a.pd_name == b.pd_name
        && !(a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false))
    {
        return true;
    }
    if let (Some(a), Some(b)) = (
        &volume.aws_elastic_block_store,
        &existing.aws_elastic_block_store,
    ) && a.volume_id == b.volume_id
    {
        return true;
    }
    if let (Some(a), Some(b)) = (&volume.iscsi, &existing.iscsi)
        && a.iqn == b.iqn
        && !(a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false))
    {
        return true;
    }
    if let (Some(a), Some(b)) = (&volume.rbd, &existing.rbd) {
        // The API defaults the pool to `rbd`.
        let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".to_owned());
        let shared_monitor = a.monitors.iter().any(|m| b.monitors.contains(m));
        if shared_monitor
            && pool(&a.pool) == pool(&b.pool)
            && a.image == b.image
            && !(a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false))
        {
            return true;
        }
    }
    false
}

/// Whether one of the pod's disks is already held on the node in a way that cannot be shared.
pub fn has_disk_conflict(pod: &Pod, node: &NodeInfo) -> bool {
    volumes(pod)
        .iter()
        .filter(|v| needs_conflict_check(v))
        .any(|v| {
            node.pods
                .iter()
                .any(|other| volumes(&other.pod).iter().any(|e| volumes_conflict(v, e)))
        })
}

/// How many of `pod`'s volumes name one of `claims` in `namespace`.
pub fn claim_references(pod: &Pod, namespace: &str, claims: &BTreeSet<String>) -> usize {
    if pod.metadata.namespace.as_deref().unwrap_or_default() != namespace {
        return 0;
    }
    volumes(pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .filter(|c| claims.contains(&c.claim_name))
        .count()
}

/// The pod's claims with the ReadWriteOncePod access mode; a claim that does not exist is
/// upstream's unresolvable `persistentvolumeclaim "<name>" not found`.
pub fn read_write_once_pod_claims(
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Result<BTreeSet<String>, Status> {
    let mut claims = BTreeSet::new();
    for source in volumes(&pod.pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
    {
        let Some(pvc) = snapshot.pvc(pod.namespace(), &source.claim_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim {:?} not found",
                source.claim_name
            )));
        };
        let read_write_once_pod = pvc
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.as_ref())
            .is_some_and(|modes| modes.iter().any(|m| m == READ_WRITE_ONCE_POD));
        if read_write_once_pod {
            claims.insert(source.claim_name.clone());
        }
    }
    Ok(claims)
}

/// PreFilter's state for the pod: its ReadWriteOncePod claims, how many are in use by placed
/// pods, and which nodes' pods reference them.
pub fn compute_state(pod: &PodInfo, snapshot: &Snapshot) -> Result<PreFilterState, Status> {
    let claims = read_write_once_pod_claims(pod, snapshot)?;
    let mut state = PreFilterState {
        read_write_once_pod_claims: claims,
        ..PreFilterState::default()
    };
    if state.read_write_once_pod_claims.is_empty() {
        return Ok(state);
    }
    let namespace = pod.namespace();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for node in snapshot.nodes() {
        let mut references = 0;
        for placed in &node.pods {
            if placed.namespace() != namespace {
                continue;
            }
            for claim in volumes(&placed.pod)
                .iter()
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .filter_map(|c| state.read_write_once_pod_claims.get(&c.claim_name))
            {
                used.insert(claim.as_str());
                references += 1;
            }
        }
        if references > 0 {
            state
                .references_by_node
                .insert(node.name.clone(), references);
        }
    }
    state.claims_in_use = used.len();
    Ok(state)
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::AssignedPodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            // A claim the pod names was created.
            ClusterEvent::Other,
        ]
    }
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, PreFilterResult) {
        let needs_check = volumes(&pod.pod).iter().any(needs_conflict_check);
        let computed = match compute_state(pod, snapshot) {
            Ok(computed) => computed,
            Err(status) => return (status, PreFilterResult::default()),
        };
        if !needs_check && computed.claims_in_use == 0 {
            return (Status::skip(), PreFilterResult::default());
        }
        state.write(STATE_KEY, computed);
        (Status::success(), PreFilterResult::default())
    }
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if has_disk_conflict(&pod.pod, node) {
            return Status::unschedulable(REASON_DISK_CONFLICT);
        }
        let Some(computed) = state.read::<PreFilterState>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        if computed.conflicts_on(pod.namespace(), node) {
            return Status::unschedulable(REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::{Value, json};

    use super::*;
    use crate::framework::Code;
    use crate::snapshot::test_util::*;

    fn volume(source: Value) -> Volume {
        let mut v = source;
        v["name"] = json!("v");
        serde_json::from_value(v).unwrap_or_else(|e| panic!("bad volume: {e}"))
    }

    fn pod_with(name: &str, volumes: Value) -> Arc<PodInfo> {
        pod(name, json!({}), json!({"volumes": volumes}))
    }

    fn pvc(name: &str, modes: &[&str]) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"accessModes": modes},
            }))
            .unwrap_or_else(|e| panic!("bad pvc: {e}")),
        )
    }

    fn claim(name: &str) -> Value {
        json!({"name": name, "persistentVolumeClaim": {"claimName": name}})
    }

    #[test]
    fn volume_conflicts_follow_upstream() {
        let gce = |pd: &str, ro: bool| json!({"gcePersistentDisk": {"pdName": pd, "readOnly": ro}});
        let ebs = |id: &str| json!({"awsElasticBlockStore": {"volumeID": id}});
        let iscsi = |iqn: &str, ro: bool| {
            json!({"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0,
                             "readOnly": ro}})
        };
        let rbd = |mons: &[&str], pool: Option<&str>, image: &str, ro: bool| {
            let mut r = json!({"monitors": mons, "image": image, "readOnly": ro});
            if let Some(pool) = pool {
                r["pool"] = json!(pool);
            }
            json!({ "rbd": r })
        };
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            ("gce same disk", gce("foo", false), gce("foo", false), true),
            (
                "gce one read-only",
                gce("foo", true),
                gce("foo", false),
                true,
            ),
            (
                "gce both read-only",
                gce("foo", true),
                gce("foo", true),
                false,
            ),
            (
                "gce other disk",
                gce("foo", false),
                gce("bar", false),
                false,
            ),
            ("ebs same volume", ebs("foo"), ebs("foo"), true),
            (
                "ebs same volume read-only",
                json!({"awsElasticBlockStore": {"volumeID": "foo", "readOnly": true}}),
                json!({"awsElasticBlockStore": {"volumeID": "foo", "readOnly": true}}),
                true,
            ),
            ("ebs other volume", ebs("foo"), ebs("bar"), false),
            (
                "iscsi same iqn",
                iscsi("iqn.a", false),
                iscsi("iqn.a", true),
                true,
            ),
            (
                "iscsi both read-only",
                iscsi("iqn.a", true),
                iscsi("iqn.a", true),
                false,
            ),
            (
                "iscsi other iqn",
                iscsi("iqn.a", false),
                iscsi("iqn.b", false),
                false,
            ),
            (
                "rbd shared monitor",
                rbd(&["a", "b"], Some("p"), "img", false),
                rbd(&["b", "c"], Some("p"), "img", false),
                true,
            ),
            (
                "rbd default pool",
                rbd(&["a"], None, "img", false),
                rbd(&["a"], Some("rbd"), "img", false),
                true,
            ),
            (
                "rbd no shared monitor",
                rbd(&["a"], Some("p"), "img", false),
                rbd(&["c"], Some("p"), "img", false),
                false,
            ),
            (
                "rbd other pool",
                rbd(&["a"], Some("p"), "img", false),
                rbd(&["a"], Some("q"), "img", false),
                false,
            ),
            (
                "rbd other image",
                rbd(&["a"], Some("p"), "img", false),
                rbd(&["a"], Some("p"), "img2", false),
                false,
            ),
            (
                "rbd both read-only",
                rbd(&["a"], Some("p"), "img", true),
                rbd(&["a"], Some("p"), "img", true),
                false,
            ),
            ("different kinds", gce("foo", false), ebs("foo"), false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(volumes_conflict(&volume(a), &volume(b)), want, "{name}");
        }
    }

    #[test]
    fn filter_rejects_nodes_holding_the_disk() {
        let disk = json!([{"name": "d", "gcePersistentDisk": {"pdName": "foo"}}]);
        let other = json!([{"name": "d", "gcePersistentDisk": {"pdName": "bar"}}]);
        let node_with = |volumes: Value| {
            NodeInfo::new(sized_node("n", "4", "8Gi"), [pod_with("existing", volumes)])
        };
        let incoming = pod_with("incoming", disk.clone());
        let snapshot = Snapshot::from_nodes([node_with(disk.clone())]);
        let mut state = CycleState::new();
        let (status, _) = VolumeRestrictions.pre_filter(&mut state, &incoming, &snapshot);
        assert_eq!(status.code, Code::Success);
        let cases = [
            (
                "same disk",
                node_with(disk.clone()),
                Some(REASON_DISK_CONFLICT),
            ),
            ("other disk", node_with(other), None),
            ("no volumes", node_with(json!([])), None),
        ];
        for (name, node, want) in cases {
            let status = VolumeRestrictions.filter(&state, &incoming, &node);
            match want {
                Some(reason) => {
                    assert_eq!(status, Status::unschedulable(reason), "{name}");
                }
                None => assert!(status.is_success(), "{name}: {status}"),
            }
        }
    }

    #[test]
    fn pre_filter_skips_pods_without_volumes_that_matter() {
        let snapshot = {
            let mut s = Snapshot::from_nodes([NodeInfo::new(
                sized_node("n", "4", "8Gi"),
                [pod_with("holder", json!([claim("rwop")]))],
            )]);
            s.upsert_pvc(pvc("rwop", &[READ_WRITE_ONCE_POD]));
            s.upsert_pvc(pvc("free", &[READ_WRITE_ONCE_POD]));
            s.upsert_pvc(pvc("rwo", &["ReadWriteOnce"]));
            s
        };
        let cases = [
            ("no volumes", json!([]), Code::Skip),
            (
                "empty dir",
                json!([{"name": "e", "emptyDir": {}}]),
                Code::Skip,
            ),
            ("rwo claim", json!([claim("rwo")]), Code::Skip),
            ("unused rwop claim", json!([claim("free")]), Code::Skip),
            ("used rwop claim", json!([claim("rwop")]), Code::Success),
            (
                "disk",
                json!([{"name": "d", "awsElasticBlockStore": {"volumeID": "x"}}]),
                Code::Success,
            ),
            (
                "missing claim",
                json!([claim("nope")]),
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, volumes, want) in cases {
            let mut state = CycleState::new();
            let (status, result) =
                VolumeRestrictions.pre_filter(&mut state, &pod_with("p", volumes), &snapshot);
            assert_eq!(status.code, want, "{name}");
            assert_eq!(result, PreFilterResult::default(), "{name}");
            if want == Code::UnschedulableAndUnresolvable {
                assert_eq!(status.message(), "persistentvolumeclaim \"nope\" not found");
            }
        }
    }

    #[test]
    fn read_write_once_pod_claims_are_exclusive_cluster_wide() {
        let holder = pod_with("holder", json!([claim("rwop")]));
        let other_ns = {
            let mut p = (*holder.pod).clone();
            p.metadata.namespace = Some("other".into());
            p.metadata.uid = Some("other".into());
            Arc::new(PodInfo::new(Arc::new(p)))
        };
        let cases: Vec<(&str, Vec<Arc<PodInfo>>, bool)> = vec![
            ("used on another node", vec![holder.clone()], true),
            ("same name in another namespace", vec![other_ns], false),
            ("unused", vec![], false),
        ];
        for (name, held, conflict) in cases {
            let mut snapshot = Snapshot::from_nodes([
                NodeInfo::new(sized_node("a", "4", "8Gi"), held),
                NodeInfo::new(sized_node("b", "4", "8Gi"), []),
            ]);
            snapshot.upsert_pvc(pvc("rwop", &[READ_WRITE_ONCE_POD, "ReadWriteOnce"]));
            let incoming = pod_with("incoming", json!([claim("rwop")]));
            let mut state = CycleState::new();
            let (status, _) = VolumeRestrictions.pre_filter(&mut state, &incoming, &snapshot);
            if !conflict {
                assert_eq!(status.code, Code::Skip, "{name}");
                continue;
            }
            assert!(status.is_success(), "{name}");
            for node in snapshot.nodes() {
                let status = VolumeRestrictions.filter(&state, &incoming, node);
                assert_eq!(
                    status,
                    Status::unschedulable(REASON_READ_WRITE_ONCE_POD_CONFLICT),
                    "{name} on {}",
                    node.name
                );
            }
        }
    }

    #[test]
    fn removing_the_holder_in_a_dry_run_clears_the_conflict() {
        let holder = pod_with("holder", json!([claim("rwop")]));
        let bystander = pod_with("bystander", json!([]));
        let mut snapshot = Snapshot::from_nodes([NodeInfo::new(
            sized_node("a", "4", "8Gi"),
            [holder.clone(), bystander.clone()],
        )]);
        snapshot.upsert_pvc(pvc("rwop", &[READ_WRITE_ONCE_POD]));
        let incoming = pod_with("incoming", json!([claim("rwop")]));
        let mut state = CycleState::new();
        let (status, _) = VolumeRestrictions.pre_filter(&mut state, &incoming, &snapshot);
        assert!(status.is_success());
        let node = sized_node("a", "4", "8Gi");
        let without = NodeInfo::new(node.clone(), [bystander.clone()]);
        assert!(
            VolumeRestrictions
                .filter(&state, &incoming, &without)
                .is_success()
        );
        let with = NodeInfo::new(node, [bystander, holder]);
        assert_eq!(
            VolumeRestrictions.filter(&state, &incoming, &with).code,
            Code::Unschedulable
        );
    }

    #[test]
    fn filter_without_pre_filter_state_is_an_error() {
        let node = NodeInfo::new(sized_node("a", "4", "8Gi"), []);
        let status =
            VolumeRestrictions.filter(&CycleState::new(), &pod_with("p", json!([])), &node);
        assert_eq!(status.code, Code::Error);
    }
}
