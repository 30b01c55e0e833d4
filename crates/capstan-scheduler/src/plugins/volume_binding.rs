//! VolumeBinding: the pod's PersistentVolumeClaims must be bound, or bindable, where it goes
//! (upstream's `volumebinding` plugin with its `SchedulerVolumeBinder`). Which volume may serve
//! which claim is decided by the shared rules of [`capstan_api::fit::volume`].
//!
//! - PreFilter says Skip when the pod names no claim (no `persistentVolumeClaim` or
//!   `ephemeral` volume). Otherwise it reads each claim in the pod's namespace; a claim that
//!   is missing, lost, being deleted or, for an ephemeral volume, not controlled by the pod
//!   rejects the pod on every node with upstream's message (unresolvable). A claim is *bound*
//!   once it names its volume and carries `pv.kubernetes.io/bind-completed`. An unbound claim
//!   whose class binds `WaitForFirstConsumer` (and that names no volume) is *to bind* here;
//!   any other unbound claim is the PersistentVolume controller's to bind first: `pod has
//!   unbound immediate PersistentVolumeClaims` (unresolvable; a class that does not exist
//!   counts as immediate, as upstream's `IsDelayBindingMode`).
//! - Filter, per node: the volume of each bound claim must exist and its node affinity admit
//!   the node. A claim to bind either has the node chosen for it earlier
//!   (`volume.kubernetes.io/selected-node`; other nodes are rejected at once), or takes the
//!   smallest free matching volume that admits the node and that no other claim of the pod
//!   took (claims asking for less choose first), or is provisioned: its class names a
//!   provisioner (not `kubernetes.io/no-provisioner`) and its `allowedTopologies`, if any,
//!   admit the node. The reasons are upstream's, in its order, all unresolvable.
//! - Once a node is chosen, [`VolumeBinding::reserve`] computes the same decisions for it
//!   ([`decide`]) and assumes them in the snapshot: each volume bound to its claim, each
//!   claim to provision with its selected node, so the next pod neither takes that volume nor
//!   goes elsewhere with that claim. The bind task's PreBind (`crate::prebind`) writes them
//!   and waits up to `bindTimeoutSeconds` (600 by default) for the PersistentVolume controller
//!   and the provisioner to finish; when it fails the assumptions are undone ([`revert`]) and
//!   the pod is retried.
//!
//! Not done: storage capacity (`CSIStorageCapacity`) checks and the alpha capacity score,
//! and CSI migration's translation of in-tree volumes; Capstan serves neither.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use capstan_api::fit::volume::bind_volume_to_claim;
use capstan_api::fit::volume::{self as rules, ANN_SELECTED_NODE, NO_PROVISIONER, is_fully_bound};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::Args;
use crate::framework::{ClusterEvent, Code, CycleState, Plugin, Point, PreFilterResult, Status};
use crate::snapshot::{Labels, NodeInfo, PodInfo, Snapshot};

/// The plugin's registered name.
pub const NAME: &str = "VolumeBinding";
/// Upstream's reason for a claim to bind that can be neither matched nor provisioned here.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream's reason for a bound volume whose node affinity rules the node out.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream's reason for a bound claim whose volume does not exist.
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Upstream's PreFilter reason for claims the PersistentVolume controller has yet to bind.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Upstream's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// Where PreFilter leaves its state (upstream's key).
const STATE_KEY: &str = NAME;

/// The plugin, with its configured arguments (`VolumeBindingArgs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeBinding {
    /// How long PreBind waits for the claims to be bound (`bindTimeoutSeconds`).
    pub bind_timeout: Duration,
}

impl Default for VolumeBinding {
    fn default() -> VolumeBinding {
        VolumeBinding {
            bind_timeout: DEFAULT_BIND_TIMEOUT,
        }
    }
}

impl VolumeBinding {
    /// The plugin from its `VolumeBindingArgs`, validated as upstream (a negative timeout is
    /// refused, and so is `shape` while the `StorageCapacityScoring` gate is off).
    pub fn from_args(args: Option<&Args>) -> Result<VolumeBinding, String> {
        let mut plugin = VolumeBinding::default();
        let Some(args) = args else {
            return Ok(plugin);
        };
        if let Some(value) = args.get("bindTimeoutSeconds").filter(|v| !v.is_null()) {
            let Some(seconds) = value.as_i64() else {
                return Err(format!(
                    "bindTimeoutSeconds: Invalid value: {value}: must be an integer"
                ));
            };
            let Ok(seconds) = u64::try_from(seconds) else {
                return Err(format!(
                    "bindTimeoutSeconds: Invalid value: {seconds}: invalid BindTimeoutSeconds, \
                     should not be a negative value"
                ));
            };
            plugin.bind_timeout = Duration::from_secs(seconds);
        }
        if args.get("shape").is_some_and(|s| !s.is_null()) {
            return Err(
                "shape: Invalid value: unexpected field `shape`, remove it or turn on the \
                        feature gate StorageCapacityScoring"
                    .to_owned(),
            );
        }
        Ok(plugin)
    }

    /// Upstream's Reserve: the decisions for the pod on the chosen node ([`decide`]), assumed
    /// in the snapshot. `None` when there is nothing to bind (every claim is bound already).
    pub fn reserve(
        &self,
        pod: &PodInfo,
        snapshot: &mut Snapshot,
        node: &str,
    ) -> Result<Option<Decisions>, String> {
        let Some(volumes) = decide(pod, snapshot, node)? else {
            return Ok(None);
        };
        Ok(Some(assume(snapshot, node, volumes, self.bind_timeout)))
    }
}

/// A claim to bind here, with its class (which binds `WaitForFirstConsumer`).
#[derive(Clone, Debug)]
pub struct ClaimToBind {
    /// The claim.
    pub claim: Arc<PersistentVolumeClaim>,
    /// Its class.
    pub class: Arc<StorageClass>,
}

/// What PreFilter finds of the pod's claims (upstream's `PodVolumeClaims`).
#[derive(Clone, Debug, Default)]
pub struct PodVolumeClaims {
    /// The volumes of the bound claims, in the pod's order (`None`: it does not exist).
    pub bound_volumes: Vec<Option<Arc<PersistentVolume>>>,
    /// The claims to bind, those asking for less storage first.
    pub to_bind: Vec<ClaimToBind>,
    /// The volumes of the classes of the claims to bind, by class.
    pub volumes_by_class: BTreeMap<String, Vec<Arc<PersistentVolume>>>,
}

/// A claim to bind to an existing volume.
#[derive(Clone, Debug)]
pub struct StaticBinding {
    /// The claim.
    pub claim: Arc<PersistentVolumeClaim>,
    /// The volume's name.
    pub volume: String,
}

/// How the pod's claims to bind are served on one node (upstream's `PodVolumes`).
#[derive(Clone, Debug, Default)]
pub struct PodVolumes {
    /// Claims bound to existing volumes.
    pub static_bindings: Vec<StaticBinding>,
    /// Claims whose volume a provisioner is to create for the node.
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

/// What the scheduler does about the pod's volumes before binding it, and what it assumed in
/// the snapshot meanwhile (to undo when binding fails).
#[derive(Clone, Debug)]
pub struct Decisions {
    /// The chosen node.
    pub node: String,
    /// Its labels (the volumes' node affinity is checked against them again while waiting).
    pub node_labels: Labels,
    /// The decisions.
    pub volumes: PodVolumes,
    /// The volumes assumed bound to their claim.
    pub assumed_volumes: Vec<String>,
    /// The claims (namespace, name) assumed to have the node selected.
    pub assumed_claims: Vec<(String, String)>,
    /// How long to wait for the claims to be bound.
    pub bind_timeout: Duration,
}

/// The claim `name` of the pod, if the pod may use it; otherwise upstream's unresolvable
/// PreFilter status (`podHasPVCs`). `ephemeral`: the claim is made for an ephemeral volume.
fn usable_claim<'a>(
    pod: &PodInfo,
    snapshot: &'a Snapshot,
    name: &str,
    ephemeral: bool,
) -> Result<&'a Arc<PersistentVolumeClaim>, Status> {
    let Some(claim) = snapshot.pvc(pod.namespace(), name) else {
        return Err(Status::unresolvable(if ephemeral {
            format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
            )
        } else {
            format!("persistentvolumeclaim {name:?} not found")
        }));
    };
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some("Lost") {
        return Err(Status::unresolvable(format!(
            "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
            rules::claim_volume_name(claim)
        )));
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(Status::unresolvable(format!(
            "persistentvolumeclaim {name:?} is being deleted"
        )));
    }
    if ephemeral {
        rules::check_ephemeral_owner(claim, &pod.pod).map_err(Status::unresolvable)?;
    }
    Ok(claim)
}

/// PreFilter's reading of the pod's claims (upstream's `podHasPVCs` and
/// `GetPodVolumeClaims`): `None` when the pod names no claim.
pub fn pod_volume_claims(
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Result<Option<PodVolumeClaims>, Status> {
    let volumes = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut claims = PodVolumeClaims::default();
    let mut any = false;
    let mut immediate = false;
    for volume in volumes {
        let Some(name) = rules::volume_claim(pod.name(), volume) else {
            continue;
        };
        any = true;
        let ephemeral = volume.persistent_volume_claim.is_none();
        let claim = usable_claim(pod, snapshot, &name, ephemeral)?;
        if is_fully_bound(claim) {
            claims
                .bound_volumes
                .push(snapshot.pv(rules::claim_volume_name(claim)).cloned());
            continue;
        }
        match snapshot.storage_class(rules::claim_class(claim)) {
            Some(class)
                if rules::claim_volume_name(claim).is_empty()
                    && rules::is_delayed_binding(Some(class)) =>
            {
                claims.to_bind.push(ClaimToBind {
                    claim: claim.clone(),
                    class: class.clone(),
                });
            }
            _ => immediate = true,
        }
    }
    if !any {
        return Ok(None);
    }
    if immediate {
        return Err(Status::unresolvable(REASON_UNBOUND_IMMEDIATE));
    }
    claims
        .to_bind
        .sort_by_key(|c| rules::requested_storage(&c.claim));
    for c in &claims.to_bind {
        let class = rules::claim_class(&c.claim);
        if !claims.volumes_by_class.contains_key(class) {
            let volumes = snapshot
                .pvs()
                .filter(|v| rules::volume_class(v) == class)
                .cloned()
                .collect();
            claims.volumes_by_class.insert(class.to_owned(), volumes);
        }
    }
    Ok(Some(claims))
}

/// Whether a volume of the class can be provisioned for the node (upstream's
/// `checkVolumeProvisions` without the capacity check).
pub fn can_provision(class: &StorageClass, labels: &Labels) -> bool {
    !class.provisioner.is_empty()
        && class.provisioner != NO_PROVISIONER
        && rules::topology_admits(class, labels)
}

/// Upstream's `checkBoundClaims`: whether the bound volumes admit the node, and whether they
/// all exist (the first missing or misplaced volume ends the check).
fn check_bound(
    volumes: &[Option<Arc<PersistentVolume>>],
    node: &str,
    labels: &Labels,
) -> (bool, bool) {
    for volume in volumes {
        match volume {
            None => return (true, false),
            Some(v) if !rules::volume_fits_node(v, node, labels) => return (false, true),
            Some(_) => {}
        }
    }
    (true, true)
}

/// How the claims to bind are served on the node, if they all can be: a claim with a
/// selected node is provisioned there (and nowhere else), the others take a matching volume
/// or are provisioned.
fn serve_claims_to_bind(
    claims: &PodVolumeClaims,
    node: &str,
    labels: &Labels,
) -> Option<PodVolumes> {
    let mut volumes = PodVolumes::default();
    let mut to_provision: Vec<&ClaimToBind> = Vec::new();
    let mut to_match: Vec<&ClaimToBind> = Vec::new();
    for c in &claims.to_bind {
        match rules::annotation(&c.claim.metadata.annotations, ANN_SELECTED_NODE) {
            Some(selected) if selected != node => return None,
            Some(_) => to_provision.push(c),
            None => to_match.push(c),
        }
    }
    for c in to_match {
        let candidates = claims
            .volumes_by_class
            .get(rules::claim_class(&c.claim))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let chosen = rules::best_match(
            &c.claim,
            candidates.iter().map(|v| &**v),
            true,
            Some((node, labels)),
            |v| {
                volumes
                    .static_bindings
                    .iter()
                    .any(|b| v.metadata.name.as_ref() == Some(&b.volume))
            },
        );
        match chosen {
            Some(volume) => volumes.static_bindings.push(StaticBinding {
                claim: c.claim.clone(),
                volume: volume.metadata.name.clone().unwrap_or_default(),
            }),
            None => to_provision.push(c),
        }
    }
    for c in to_provision {
        if !can_provision(&c.class, labels) {
            return None;
        }
        volumes.provisions.push(c.claim.clone());
    }
    Some(volumes)
}

/// Upstream's `FindPodVolumes`: how the pod's claims are served on the node, or why they
/// cannot be (an unresolvable status with upstream's reasons in its order).
pub fn find_pod_volumes(
    claims: &PodVolumeClaims,
    node: &str,
    labels: &Labels,
) -> Result<PodVolumes, Status> {
    let (bound_fit, bound_found) = check_bound(&claims.bound_volumes, node, labels);
    let served = serve_claims_to_bind(claims, node, labels);
    let mut reasons = Vec::new();
    if !bound_fit {
        reasons.push(REASON_NODE_CONFLICT.to_owned());
    }
    if served.is_none() {
        reasons.push(REASON_BIND_CONFLICT.to_owned());
    }
    if !bound_found {
        reasons.push(REASON_PV_NOT_EXIST.to_owned());
    }
    match served {
        Some(volumes) if reasons.is_empty() => Ok(volumes),
        _ => Err(Status::new(Code::UnschedulableAndUnresolvable, reasons)),
    }
}

/// The decisions for the pod's claims to bind on the chosen node, computed again from the
/// snapshot as Filter did; `None` when the pod has none (all its claims are bound).
pub fn decide(
    pod: &PodInfo,
    snapshot: &Snapshot,
    node: &str,
) -> Result<Option<PodVolumes>, String> {
    let claims = pod_volume_claims(pod, snapshot).map_err(|s| s.message())?;
    let Some(claims) = claims.filter(|c| !c.to_bind.is_empty()) else {
        return Ok(None);
    };
    let Some(info) = snapshot.node(node) else {
        return Err(format!("node {node:?} not found"));
    };
    find_pod_volumes(&claims, node, info.labels())
        .map(Some)
        .map_err(|s| s.message())
}

/// The claim with the node selected for provisioning; `None` when it has that node already.
pub fn select_node(claim: &PersistentVolumeClaim, node: &str) -> Option<PersistentVolumeClaim> {
    if rules::annotation(&claim.metadata.annotations, ANN_SELECTED_NODE) == Some(node) {
        return None;
    }
    let mut selected = claim.clone();
    selected
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANN_SELECTED_NODE.to_owned(), node.to_owned());
    Some(selected)
}

/// Assumes the decisions in the snapshot (upstream's `AssumePodVolumes`): each volume bound to
/// its claim, each claim to provision with the node selected.
pub fn assume(
    snapshot: &mut Snapshot,
    node: &str,
    volumes: PodVolumes,
    bind_timeout: Duration,
) -> Decisions {
    let mut assumed_volumes = Vec::new();
    for binding in &volumes.static_bindings {
        let bound = snapshot
            .pv(&binding.volume)
            .and_then(|v| bind_volume_to_claim(v, &binding.claim));
        if let Some(bound) = bound {
            snapshot.assume_pv(Arc::new(bound));
            assumed_volumes.push(binding.volume.clone());
        }
    }
    let mut assumed_claims = Vec::new();
    for claim in &volumes.provisions {
        if let Some(selected) = select_node(claim, node) {
            assumed_claims.push((
                selected.metadata.namespace.clone().unwrap_or_default(),
                selected.metadata.name.clone().unwrap_or_default(),
            ));
            snapshot.assume_pvc(Arc::new(selected));
        }
    }
    Decisions {
        node: node.to_owned(),
        node_labels: snapshot
            .node(node)
            .map(|n| n.labels().clone())
            .unwrap_or_default(),
        volumes,
        assumed_volumes,
        assumed_claims,
        bind_timeout,
    }
}

/// Undoes what [`assume`] assumed (upstream's `RevertAssumedPodVolumes`).
pub fn revert(snapshot: &mut Snapshot, decisions: &Decisions) {
    for name in &decisions.assumed_volumes {
        snapshot.restore_pv(name);
    }
    for (namespace, name) in &decisions.assumed_claims {
        snapshot.restore_pvc(namespace, name);
    }
}

/// PreBind's check of one static binding against the API's current objects (upstream's
/// `checkBindings`): the volume must still admit the node and still be bound to a claim;
/// done once the claim is fully bound.
pub fn static_binding_done(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
    node: &str,
    labels: &Labels,
) -> Result<bool, String> {
    check_affinity(volume, node, labels)?;
    let name = volume.metadata.name.as_deref().unwrap_or_default();
    let reference = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if reference.is_none_or(|r| r.uid.as_deref().unwrap_or_default().is_empty()) {
        return Err(format!("ClaimRef got reset for pv {name:?}"));
    }
    Ok(is_fully_bound(claim))
}

/// PreBind's check of one claim to provision: the provisioner must not have given up (it
/// takes the selected node away), the volume it made (`volume`, once the claim names one that
/// exists) must admit the node; done once the claim is fully bound.
pub fn provisioning_done(
    claim: &PersistentVolumeClaim,
    volume: Option<&PersistentVolume>,
    node: &str,
    labels: &Labels,
) -> Result<bool, String> {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let Some(annotations) = &claim.metadata.annotations else {
        return Err(format!("selectedNode annotation reset for PVC {name:?}"));
    };
    if annotations.get(ANN_SELECTED_NODE).map(String::as_str) != Some(node) {
        return Err(format!("provisioning failed for PVC {name:?}"));
    }
    if let Some(volume) = volume {
        check_affinity(volume, node, labels)?;
    }
    Ok(is_fully_bound(claim))
}

/// The volume's node affinity must admit the chosen node (a volume changed or provisioned
/// meanwhile may not).
fn check_affinity(volume: &PersistentVolume, node: &str, labels: &Labels) -> Result<(), String> {
    if rules::volume_fits_node(volume, node, labels) {
        return Ok(());
    }
    Err(format!(
        "pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms",
        volume.metadata.name.as_deref().unwrap_or_default()
    ))
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        // A node's labels may now match a volume's affinity or a class's topologies; a claim,
        // volume or class added or changed may now bind.
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
        match pod_volume_claims(pod, snapshot) {
            Err(status) => (status, PreFilterResult::default()),
            Ok(None) => (Status::skip(), PreFilterResult::default()),
            Ok(Some(claims)) => {
                state.write(STATE_KEY, claims);
                (Status::success(), PreFilterResult::default())
            }
        }
    }
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(claims) = state.read::<PodVolumeClaims>(STATE_KEY) else {
            return Status::error(format!("reading {STATE_KEY:?} from cycleState: not found"));
        };
        match find_pod_volumes(claims, &node.name, node.labels()) {
            Ok(_) => Status::success(),
            Err(status) => status,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::snapshot::test_util::{node, pod};
    use capstan_api::fit::volume::{ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, topology_admits};
    use k8s_openapi::api::core::v1::ObjectReference;

    const HOST: &str = "kubernetes.io/hostname";

    fn claim(name: &str, spec: Value, metadata: Value) -> Arc<PersistentVolumeClaim> {
        let mut meta = json!({"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                              "resourceVersion": "1"});
        for (k, v) in metadata.as_object().into_iter().flatten() {
            meta[k] = v.clone();
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": meta, "spec": spec}))
                .unwrap_or_else(|e| panic!("bad claim: {e}")),
        )
    }

    /// A claim of `class` asking for `size`.
    fn wants(name: &str, class: &str, size: &str) -> Arc<PersistentVolumeClaim> {
        claim(
            name,
            json!({"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                   "resources": {"requests": {"storage": size}}}),
            json!({}),
        )
    }

    /// A claim bound to `volume` by the PersistentVolume controller.
    fn bound(name: &str, volume: &str) -> Arc<PersistentVolumeClaim> {
        claim(
            name,
            json!({"storageClassName": "local", "volumeName": volume}),
            json!({"annotations": {ANN_BIND_COMPLETED: "yes"}}),
        )
    }

    /// A volume of `class` holding `size`, on `host` when given.
    fn volume(name: &str, class: &str, size: &str, host: Option<&str>) -> Arc<PersistentVolume> {
        let mut spec = json!({"storageClassName": class, "capacity": {"storage": size},
                              "accessModes": ["ReadWriteOnce"]});
        if let Some(host) = host {
            spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions":
                [{"key": HOST, "operator": "In", "values": [host]}]}]}});
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}))
            .unwrap_or_else(|e| panic!("bad volume: {e}")),
        )
    }

    fn class(name: &str, mode: &str, provisioner: &str, topologies: Value) -> Arc<StorageClass> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": provisioner,
                "volumeBindingMode": mode, "allowedTopologies": topologies,
            }))
            .unwrap_or_else(|e| panic!("bad class: {e}")),
        )
    }

    fn pod_with_claims(claims: &[&str]) -> Arc<PodInfo> {
        let volumes: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod("p", json!({}), json!({"volumes": volumes}))
    }

    /// Nodes "a" (zone one) and "b" (zone two); classes "local" (delayed, no provisioner),
    /// "dynamic" (delayed, provisioned in zone one only) and "immediate".
    fn cluster() -> Snapshot {
        let mut snapshot = Snapshot::new();
        for (name, zone) in [("a", "one"), ("b", "two")] {
            let labels = json!({HOST: name, "topology.kubernetes.io/zone": zone});
            snapshot.upsert_node(node(name, labels, json!({}), json!({})));
        }
        snapshot.upsert_storage_class(class(
            "local",
            "WaitForFirstConsumer",
            NO_PROVISIONER,
            json!(null),
        ));
        snapshot.upsert_storage_class(class(
            "dynamic",
            "WaitForFirstConsumer",
            "capstan.io/local-path",
            json!([{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["one"]}]}]),
        ));
        snapshot.upsert_storage_class(class(
            "immediate",
            "Immediate",
            "capstan.io/local-path",
            json!(null),
        ));
        snapshot
    }

    /// PreFilter then Filter on every node: each node's status.
    fn run(snapshot: &Snapshot, pod: &PodInfo) -> Result<Vec<(String, Status)>, Status> {
        let mut state = CycleState::new();
        let (status, _) = VolumeBinding::default().pre_filter(&mut state, pod, snapshot);
        if !status.is_success() {
            return Err(status);
        }
        Ok(snapshot
            .nodes()
            .map(|n| {
                (
                    n.name.clone(),
                    VolumeBinding::default().filter(&state, pod, n),
                )
            })
            .collect())
    }

    fn rejected_on(snapshot: &Snapshot, pod: &PodInfo) -> Vec<(String, Vec<String>)> {
        let statuses = run(snapshot, pod).unwrap_or_else(|s| panic!("PreFilter: {s}"));
        statuses
            .into_iter()
            .filter(|(_, s)| !s.is_success())
            .map(|(n, s)| {
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{n}");
                (n, s.reasons)
            })
            .collect()
    }

    fn reasons(node: &str, reasons: &[&str]) -> (String, Vec<String>) {
        (
            node.to_owned(),
            reasons.iter().map(|r| (*r).to_owned()).collect(),
        )
    }

    #[test]
    fn pods_without_claims_are_skipped() {
        let snapshot = cluster();
        let p = pod(
            "p",
            json!({}),
            json!({"volumes": [{"name": "e", "emptyDir": {}}]}),
        );
        let mut state = CycleState::new();
        let (status, _) = VolumeBinding::default().pre_filter(&mut state, &p, &snapshot);
        assert_eq!(status.code, Code::Skip);
    }

    #[test]
    fn unusable_claims_reject_the_pod_everywhere() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(claim(
            "deleting",
            json!({}),
            json!({"deletionTimestamp": "2025-01-01T00:00:00Z"}),
        ));
        let mut lost = (*wants("lost", "local", "1Gi")).clone();
        lost.spec.get_or_insert_default().volume_name = Some("gone".into());
        lost.status = Some(serde_json::from_value(json!({"phase": "Lost"})).unwrap_or_default());
        snapshot.upsert_pvc(Arc::new(lost));
        snapshot.upsert_pvc(wants("p-scratch", "local", "1Gi"));
        snapshot.upsert_pvc(wants("no-class", "", "1Gi"));
        snapshot.upsert_pvc(wants("unknown-class", "gold", "1Gi"));
        snapshot.upsert_pvc(wants("immediate", "immediate", "1Gi"));
        let mut pre_bound = (*wants("pre-bound", "local", "1Gi")).clone();
        pre_bound.spec.get_or_insert_default().volume_name = Some("pv".into());
        snapshot.upsert_pvc(Arc::new(pre_bound));
        let ephemeral = |name: &str| json!([{"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let cases = [
            (
                json!([{"name": "v", "persistentVolumeClaim": {"claimName": "nope"}}]),
                "persistentvolumeclaim \"nope\" not found",
            ),
            (
                ephemeral("missing"),
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-missing\"",
            ),
            (
                ephemeral("scratch"),
                "PVC default/p-scratch was not created for pod default/p (pod is not owner)",
            ),
            (
                json!([{"name": "v", "persistentVolumeClaim": {"claimName": "deleting"}}]),
                "persistentvolumeclaim \"deleting\" is being deleted",
            ),
            (
                json!([{"name": "v", "persistentVolumeClaim": {"claimName": "lost"}}]),
                "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"gone\"",
            ),
        ];
        for (volumes, message) in cases {
            let p = pod("p", json!({}), json!({"volumes": volumes}));
            let status = run(&snapshot, &p)
                .err()
                .unwrap_or_else(|| panic!("{message}: passed"));
            assert_eq!(status.code, Code::UnschedulableAndUnresolvable, "{message}");
            assert_eq!(status.message(), message);
        }
        // Claims the PersistentVolume controller binds (no class, a class that does not
        // exist, an immediate class, a volume named by the user) wait for it.
        for name in ["no-class", "unknown-class", "immediate", "pre-bound"] {
            let status = run(&snapshot, &pod_with_claims(&[name]))
                .err()
                .unwrap_or_else(|| panic!("{name}: passed"));
            assert_eq!(
                status,
                Status::unresolvable(REASON_UNBOUND_IMMEDIATE),
                "{name}"
            );
        }
    }

    #[test]
    fn ephemeral_claims_of_the_pod_are_used() {
        let mut snapshot = cluster();
        let mut scratch = (*wants("p-scratch", "dynamic", "1Gi")).clone();
        scratch.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "name": "p",
                                          "uid": "p", "controller": true}))
            .unwrap_or_else(|e| panic!("{e}")),
        ]);
        snapshot.upsert_pvc(Arc::new(scratch));
        let p = pod(
            "p",
            json!({}),
            json!({"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}),
        );
        assert_eq!(
            rejected_on(&snapshot, &p),
            [reasons("b", &[REASON_BIND_CONFLICT])]
        );
    }

    #[test]
    fn bound_volumes_must_exist_and_admit_the_node() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(bound("on-a", "pv-a"));
        snapshot.upsert_pv(volume("pv-a", "local", "1Gi", Some("a")));
        snapshot.upsert_pvc(bound("orphan", "missing"));
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["on-a"])),
            [reasons("b", &[REASON_NODE_CONFLICT])]
        );
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["orphan"])),
            [
                reasons("a", &[REASON_PV_NOT_EXIST]),
                reasons("b", &[REASON_PV_NOT_EXIST])
            ]
        );
        // Fully bound claims leave nothing to do once the node is chosen.
        assert!(matches!(
            decide(&pod_with_claims(&["on-a"]), &snapshot, "a"),
            Ok(None)
        ));
    }

    #[test]
    fn claims_to_bind_take_the_smallest_free_volumes_on_the_node() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(wants("big", "local", "3Gi"));
        snapshot.upsert_pvc(wants("small", "local", "1Gi"));
        for (name, size, host) in [
            ("a-2g", "2Gi", "a"),
            ("a-5g", "5Gi", "a"),
            ("a-9g", "9Gi", "a"),
            ("b-1g", "1Gi", "b"),
        ] {
            snapshot.upsert_pv(volume(name, "local", size, Some(host)));
        }
        // The smaller claim chooses first, whatever the pod's order: 2Gi for it, 5Gi for 3Gi.
        let p = pod_with_claims(&["big", "small"]);
        assert_eq!(
            rejected_on(&snapshot, &p),
            [reasons("b", &[REASON_BIND_CONFLICT])]
        );
        let chosen = decide(&p, &snapshot, "a")
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("nothing to bind"));
        let pairs: Vec<(&str, &str)> = chosen
            .static_bindings
            .iter()
            .map(|b| {
                (
                    b.claim.metadata.name.as_deref().unwrap_or_default(),
                    b.volume.as_str(),
                )
            })
            .collect();
        assert_eq!(pairs, [("small", "a-2g"), ("big", "a-5g")]);
        assert!(chosen.provisions.is_empty());
        // One claim alone fits on "b".
        assert!(rejected_on(&snapshot, &pod_with_claims(&["small"])).is_empty());
    }

    #[test]
    fn claims_without_volumes_are_provisioned_where_the_class_allows() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(wants("data", "dynamic", "1Gi"));
        snapshot.upsert_pvc(wants("local", "local", "1Gi"));
        let p = pod_with_claims(&["data"]);
        assert_eq!(
            rejected_on(&snapshot, &p),
            [reasons("b", &[REASON_BIND_CONFLICT])]
        );
        let decided = decide(&p, &snapshot, "a")
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("nothing to bind"));
        assert!(decided.static_bindings.is_empty());
        assert_eq!(decided.provisions.len(), 1);
        // Without a provisioner, no volume means no node.
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["local"])),
            [
                reasons("a", &[REASON_BIND_CONFLICT]),
                reasons("b", &[REASON_BIND_CONFLICT])
            ]
        );
    }

    #[test]
    fn a_selected_node_is_the_only_node() {
        let mut snapshot = cluster();
        let mut topology_free =
            (*class("anywhere", "WaitForFirstConsumer", "p", json!(null))).clone();
        topology_free.metadata.name = Some("anywhere".into());
        snapshot.upsert_storage_class(Arc::new(topology_free));
        snapshot.upsert_pvc(claim(
            "data",
            json!({"storageClassName": "anywhere"}),
            json!({"annotations": {ANN_SELECTED_NODE: "b"}}),
        ));
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["data"])),
            [reasons("a", &[REASON_BIND_CONFLICT])]
        );
    }

    #[test]
    fn every_reason_is_given_in_upstreams_order() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(bound("on-a", "pv-a"));
        snapshot.upsert_pv(volume("pv-a", "local", "1Gi", Some("a")));
        snapshot.upsert_pvc(wants("data", "dynamic", "1Gi"));
        let statuses =
            run(&snapshot, &pod_with_claims(&["on-a", "data"])).unwrap_or_else(|s| panic!("{s}"));
        let b = &statuses[1].1;
        assert_eq!(
            b.message(),
            format!("{REASON_NODE_CONFLICT}, {REASON_BIND_CONFLICT}")
        );
    }

    #[test]
    fn assumed_bindings_keep_volumes_from_other_pods_until_reverted() {
        let mut snapshot = cluster();
        snapshot.upsert_pvc(wants("first", "local", "1Gi"));
        snapshot.upsert_pvc(wants("second", "local", "1Gi"));
        snapshot.upsert_pvc(wants("dyn", "dynamic", "1Gi"));
        snapshot.upsert_pv(volume("only", "local", "1Gi", Some("a")));
        let plugin = VolumeBinding::default();
        let first = plugin
            .reserve(&pod_with_claims(&["first", "dyn"]), &mut snapshot, "a")
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("nothing to bind"));
        assert_eq!(first.assumed_volumes, ["only"]);
        assert_eq!(
            first.assumed_claims,
            [("default".to_owned(), "dyn".to_owned())]
        );
        assert_eq!(first.node_labels.get(HOST).map(String::as_str), Some("a"));
        let assumed = snapshot
            .pv("only")
            .cloned()
            .unwrap_or_else(|| panic!("no pv"));
        assert!(rules::is_bound_to(
            &assumed,
            &wants("first", "local", "1Gi")
        ));
        let selected = snapshot
            .pvc("default", "dyn")
            .cloned()
            .unwrap_or_else(|| panic!("no pvc"));
        assert_eq!(
            rules::annotation(&selected.metadata.annotations, ANN_SELECTED_NODE),
            Some("a")
        );
        // Another pod's claim finds the volume taken; the pod's own claim still finds it.
        let other = pod(
            "other",
            json!({}),
            json!({"volumes": [
            {"name": "v", "persistentVolumeClaim": {"claimName": "second"}}]}),
        );
        assert_eq!(
            rejected_on(&snapshot, &other),
            [
                reasons("a", &[REASON_BIND_CONFLICT]),
                reasons("b", &[REASON_BIND_CONFLICT])
            ]
        );
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["first"])),
            [reasons("b", &[REASON_BIND_CONFLICT])]
        );
        // The claim to provision now goes to "a" only.
        assert_eq!(
            rejected_on(&snapshot, &pod_with_claims(&["dyn"])),
            [reasons("b", &[REASON_BIND_CONFLICT])]
        );
        revert(&mut snapshot, &first);
        assert!(rejected_on(&snapshot, &other).iter().all(|(n, _)| n == "b"));
        let restored = snapshot
            .pvc("default", "dyn")
            .cloned()
            .unwrap_or_else(|| panic!("no pvc"));
        assert!(restored.metadata.annotations.is_none());
    }

    #[test]
    fn the_api_replaces_an_assumption_once_it_changes() {
        let mut snapshot = cluster();
        let pv = volume("pv", "local", "1Gi", None);
        snapshot.upsert_pv(pv.clone());
        let claim = wants("data", "local", "1Gi");
        let assumed = bind_volume_to_claim(&pv, &claim).unwrap_or_else(|| panic!("unchanged"));
        snapshot.assume_pv(Arc::new(assumed));
        // The same version again (a relist) keeps the assumption.
        snapshot.upsert_pv(pv.clone());
        assert!(
            snapshot
                .pv("pv")
                .is_some_and(|v| rules::is_bound_to(v, &claim))
        );
        // A newer version replaces it; restoring then changes nothing.
        let mut newer = (*pv).clone();
        newer.metadata.resource_version = Some("2".into());
        snapshot.upsert_pv(Arc::new(newer));
        snapshot.restore_pv("pv");
        let current = snapshot
            .pv("pv")
            .cloned()
            .unwrap_or_else(|| panic!("no pv"));
        assert_eq!(current.metadata.resource_version.as_deref(), Some("2"));
        assert!(rules::is_available(&current));
    }

    #[test]
    fn binding_a_volume_names_the_claim() {
        let data = wants("data", "local", "1Gi");
        let free = volume("pv", "local", "1Gi", None);
        let bound = bind_volume_to_claim(&free, &data).unwrap_or_else(|| panic!("unchanged"));
        let reference = bound
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.clone())
            .unwrap_or_default();
        assert_eq!(reference, rules::claim_reference(&data));
        assert_eq!(reference.kind.as_deref(), Some("PersistentVolumeClaim"));
        assert_eq!(reference.uid.as_deref(), Some("uid-data"));
        assert_eq!(reference.resource_version.as_deref(), Some("1"));
        assert_eq!(
            rules::annotation(&bound.metadata.annotations, ANN_BOUND_BY_CONTROLLER),
            Some("yes")
        );
        assert!(bind_volume_to_claim(&bound, &data).is_none());
        // A volume the user pre-bound gets the claim's uid, not the controller's mark.
        let mut pre_bound = (*free).clone();
        pre_bound.spec.get_or_insert_default().claim_ref = Some(ObjectReference {
            namespace: Some("default".into()),
            name: Some("data".into()),
            ..ObjectReference::default()
        });
        let bound = bind_volume_to_claim(&pre_bound, &data).unwrap_or_else(|| panic!("unchanged"));
        assert_eq!(
            bound
                .spec
                .and_then(|s| s.claim_ref)
                .and_then(|r| r.uid)
                .as_deref(),
            Some("uid-data")
        );
        assert!(rules::annotation(&bound.metadata.annotations, ANN_BOUND_BY_CONTROLLER).is_none());
    }

    #[test]
    fn prebind_waits_for_full_binding_and_fails_on_undone_work() {
        let labels_a = Labels::from([(HOST.to_owned(), "a".to_owned())]);
        let data = wants("data", "local", "1Gi");
        let pv = bind_volume_to_claim(&volume("pv", "local", "1Gi", Some("a")), &data)
            .unwrap_or_else(|| panic!("unchanged"));
        assert_eq!(static_binding_done(&pv, &data, "a", &labels_a), Ok(false));
        assert_eq!(
            static_binding_done(&pv, &bound("data", "pv"), "a", &labels_a),
            Ok(true)
        );
        let labels_b = Labels::from([(HOST.to_owned(), "b".to_owned())]);
        assert_eq!(
            static_binding_done(&pv, &data, "b", &labels_b),
            Err(
                "pv \"pv\" node affinity doesn't match node \"b\": no matching NodeSelectorTerms"
                    .into()
            )
        );
        let mut reset = pv.clone();
        reset.spec.get_or_insert_default().claim_ref = None;
        assert_eq!(
            static_binding_done(&reset, &data, "a", &labels_a),
            Err("ClaimRef got reset for pv \"pv\"".into())
        );
        // Provisioning: waiting while the selected node stays, failing once it goes.
        let selected = select_node(&data, "a").unwrap_or_else(|| panic!("unchanged"));
        assert!(select_node(&selected, "a").is_none());
        assert_eq!(
            provisioning_done(&selected, None, "a", &labels_a),
            Ok(false)
        );
        let mut given_up = selected.clone();
        given_up.metadata.annotations = Some(BTreeMap::from([("other".into(), "x".into())]));
        assert_eq!(
            provisioning_done(&given_up, None, "a", &labels_a),
            Err("provisioning failed for PVC \"data\"".into())
        );
        let mut done = selected.clone();
        done.spec.get_or_insert_default().volume_name = Some("pv".into());
        done.metadata
            .annotations
            .get_or_insert_default()
            .insert(ANN_BIND_COMPLETED.into(), "yes".into());
        assert_eq!(
            provisioning_done(&done, Some(&pv), "a", &labels_a),
            Ok(true)
        );
        assert!(provisioning_done(&done, Some(&pv), "b", &labels_b).is_err());
    }

    #[test]
    fn allowed_topologies_follow_upstream() {
        let zone = |values: Value| {
            class(
                "c",
                "WaitForFirstConsumer",
                "p",
                json!([{"matchLabelExpressions": [
                {"key": "zone", "values": values}]}]),
            )
        };
        let labels = Labels::from([("zone".to_owned(), "one".to_owned())]);
        assert!(topology_admits(
            &class("c", "Immediate", "p", json!(null)),
            &labels
        ));
        assert!(topology_admits(&zone(json!(["two", "one"])), &labels));
        assert!(!topology_admits(&zone(json!(["two"])), &labels));
        assert!(!topology_admits(&zone(json!([])), &labels));
        assert!(!topology_admits(&zone(json!(["one"])), &Labels::new()));
        let empty_term = class(
            "c",
            "Immediate",
            "p",
            json!([{"matchLabelExpressions": []}]),
        );
        assert!(!topology_admits(&empty_term, &labels));
        assert!(!can_provision(
            &class("c", "Immediate", NO_PROVISIONER, json!(null)),
            &labels
        ));
        assert!(!can_provision(
            &class("c", "Immediate", "", json!(null)),
            &labels
        ));
        assert!(can_provision(&zone(json!(["one"])), &labels));
    }

    #[test]
    fn args_follow_upstreams_validation() {
        assert_eq!(
            VolumeBinding::from_args(None).map(|p| p.bind_timeout),
            Ok(DEFAULT_BIND_TIMEOUT)
        );
        let args = json!({"bindTimeoutSeconds": 30});
        assert_eq!(
            VolumeBinding::from_args(Some(&args)).map(|p| p.bind_timeout),
            Ok(Duration::from_secs(30))
        );
        for bad in [
            json!({"bindTimeoutSeconds": -1}),
            json!({"bindTimeoutSeconds": "x"}),
            json!({"shape": [{"utilization": 0, "score": 0}]}),
        ] {
            assert!(VolumeBinding::from_args(Some(&bad)).is_err(), "{bad}");
        }
    }
}
