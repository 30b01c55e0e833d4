//! The PersistentVolume controllers (upstream's `pkg/controller/volume`):
//!
//! - **binder** (`persistentvolume-binder`): binds claims to volumes and keeps the phases of
//!   both, as upstream's `PersistentVolumeController`. [`binder`] decides (pure); this module
//!   writes. Binding sets the volume's `spec.claimRef` (with the claim's uid) first, then the
//!   claim's `spec.volumeName` and its `pv.kubernetes.io/bind-completed` annotation, then the
//!   phases, each write guarded by the resourceVersion read, so two binders (several servers)
//!   cannot give one volume to two claims: the loser's write conflicts and its next sync sees
//!   the volume taken. A claim no volume serves is handed to its class's provisioner by the
//!   `volume.kubernetes.io/storage-provisioner` annotation (with delayed binding, only once
//!   the scheduler has chosen a node); a volume whose claim is gone is Released and then
//!   reclaimed by its policy (`Retain` keeps it, `Delete` is the provisioner's, `Recycle` fails
//!   as upstream's without a recycler). A claim naming no class at all gets the default class
//!   once there is one (upstream's retroactive assignment). Pending claims are looked at again
//!   every 15 s (upstream's resync), so a class or volume made later is found. Concurrent
//!   syncs never pick the same free volume: the choice and a note of it in `binding` (until
//!   the cache shows the volume taken) happen under one lock, as upstream's assume cache.
//! - **protection** ([`protection`]): the `kubernetes.io/pvc-protection` and
//!   `kubernetes.io/pv-protection` finalizers.
//! - **ephemeral volumes** ([`ephemeral`]): a claim per pod for `ephemeral` volumes.

pub mod binder;
pub mod ephemeral;
pub mod protection;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_api::fit::volume::{
    self as fit, ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
    ANN_STORAGE_PROVISIONER,
};
use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::pods;
use crate::runtime::{Change, Error, Queue, Setup, Task};

use binder::{ClaimStep, Note, VolumeStep};

/// How often an unbound claim is looked at again (upstream's `--pvclaimbinder-sync-period`).
const RESYNC: Duration = Duration::from_secs(15);

struct Context {
    client: Client,
    /// Volumes this binder is binding (name → claim uid) that the cache may not show bound
    /// yet (upstream's assume cache): no other claim is given them meanwhile.
    binding: Mutex<HashMap<String, String>>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    recorder: EventRecorder,
}

/// Registers the binder's handlers and returns its run future (claims and volumes are
/// reconciled by two queues of one controller).
pub fn start(mut setup: Setup<'_>) -> Task {
    let claims = setup.watch::<PersistentVolumeClaim>();
    let volumes = setup.watch::<PersistentVolume>();
    let classes = setup.watch::<StorageClass>();
    let (claim_queue, claim_rx) = Queue::<PersistentVolumeClaim>::new();
    let (volume_queue, volume_rx) = Queue::<PersistentVolume>::new();
    claim_queue.follow(&claims);
    volume_queue.follow(&volumes);
    // A volume's change concerns the claim it names; a claim's, the volume it names and any
    // volume naming it.
    {
        let claim_queue = claim_queue.clone();
        volumes.on_change(move |change| {
            if let Some(reference) = change
                .object()
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                && let (Some(ns), Some(name)) = (&reference.namespace, &reference.name)
            {
                claim_queue.add_name(Some(ns), name);
            }
        });
    }
    {
        let volume_queue = volume_queue.clone();
        let volume_store = volumes.store();
        claims.on_change(move |change| {
            let claim = change.object();
            if let Some(name) = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref())
                && !name.is_empty()
            {
                volume_queue.add_name(None, name);
            }
            if let Change::Deleted(claim) = change {
                for volume in volume_store.state() {
                    if names_claim(&volume, claim) {
                        volume_queue.add(ObjectRef::from_obj(volume.as_ref()));
                    }
                }
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        binding: Mutex::new(HashMap::new()),
        claims: claims.store(),
        volumes: volumes.store(),
        classes: classes.store(),
        recorder: setup.recorder("persistentvolume-controller"),
    });
    let claims_task = setup.run(
        "persistentvolume-binder",
        &claims,
        claim_rx,
        ctx.clone(),
        sync_claim,
    );
    let volumes_task = setup.run(
        "persistentvolume-binder",
        &volumes,
        volume_rx,
        ctx,
        sync_volume,
    );
    Box::pin(async move {
        futures::join!(claims_task, volumes_task);
    })
}

fn names_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| r.namespace == claim.metadata.namespace && r.name == claim.metadata.name)
}

fn by_name<K: kube::Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
) -> BTreeMap<String, Arc<K>> {
    store
        .state()
        .into_iter()
        .map(|o| (o.meta().name.clone().unwrap_or_default(), o))
        .collect()
}

impl Context {
    fn record<K: kube::Resource<DynamicType = ()>>(&self, object: &K, note: Note) {
        let kind = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder.record(
            pods::object_reference(object),
            kind,
            note.reason,
            note.message,
        );
    }
}

async fn sync_claim(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    if claim.metadata.deletion_timestamp.is_some() && binder::bind_completed(&claim) {
        // Being deleted: its volume's sync releases the volume once it is gone.
        return Ok(Action::await_change());
    }
    let volumes = by_name(&ctx.volumes);
    let classes = by_name(&ctx.classes);
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(class) = binder::retroactive_class(&claim, &classes) {
        let patch = json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "spec": {"storageClassName": class},
        });
        merge(&claims, name_of(claim.as_ref()), &patch, false).await?;
        return Ok(Action::await_change());
    }
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let step = {
        // Choosing and marking a volume happen under one lock, so two claims synced at once
        // never pick the same one.
        let mut binding = ctx.binding.lock().unwrap_or_else(|e| e.into_inner());
        // A volume the cache shows with a claimRef (or gone) needs no marking any more.
        binding.retain(|name, _| volumes.get(name).is_some_and(|v| fit::is_available(v)));
        let step = binder::claim_step_excluding(&claim, &volumes, &classes, |v| {
            let name = v.metadata.name.as_deref().unwrap_or("");
            binding.get(name).is_some_and(|owner| *owner != uid)
        });
        if let ClaimStep::Bind(name) = &step
            && volumes.get(name).is_some_and(|v| fit::is_available(v))
        {
            binding.insert(name.clone(), uid.clone());
        }
        step
    };
    match step {
        ClaimStep::Bind(name) => {
            let Some(volume) = volumes.get(&name) else {
                return Ok(Action::requeue(RESYNC));
            };
            let bound = bind(&ctx, &claims, &claim, volume).await;
            if bound.is_err() {
                let mut binding = ctx.binding.lock().unwrap_or_else(|e| e.into_inner());
                if binding.get(&name) == Some(&uid) {
                    binding.remove(&name);
                }
            }
            bound?;
            Ok(Action::await_change())
        }
        ClaimStep::Pending(note) => {
            if let Some(note) = note {
                ctx.record(claim.as_ref(), note);
            }
            set_claim_phase(&claims, &claim, "Pending").await?;
            Ok(Action::requeue(RESYNC))
        }
        ClaimStep::Provision { provisioner, note } => {
            if binder::needs_provisioner_annotation(&claim, &provisioner) {
                let patch = json!({"metadata": {
                    "resourceVersion": claim.metadata.resource_version,
                    "annotations": {
                        ANN_STORAGE_PROVISIONER: provisioner,
                        ANN_BETA_STORAGE_PROVISIONER: provisioner,
                    },
                }});
                merge(&claims, name_of(claim.as_ref()), &patch, false).await?;
            }
            ctx.record(claim.as_ref(), note);
            set_claim_phase(&claims, &claim, "Pending").await?;
            Ok(Action::requeue(RESYNC))
        }
        ClaimStep::Lost(note) => {
            ctx.record(claim.as_ref(), note);
            set_claim_phase(&claims, &claim, "Lost").await?;
            Ok(Action::await_change())
        }
    }
}

/// A JSON merge patch of object `name` (of its status with `status`).
async fn merge<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
    status: bool,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::default();
    if status {
        api.patch_status(name, &params, &Patch::Merge(patch))
            .await?;
    } else {
        api.patch(name, &params, &Patch::Merge(patch)).await?;
    }
    Ok(())
}

fn name_of<K: kube::Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or("")
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

async fn set_claim_phase(
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    phase: &str,
) -> Result<(), Error> {
    if claim_phase(claim) == phase {
        return Ok(());
    }
    let patch = json!({"status": {"phase": phase}});
    merge(claims, name_of(claim), &patch, true).await?;
    Ok(())
}

/// Binds `claim` to `volume`: the volume's claimRef, then the claim's volumeName and
/// annotations, then both phases (each step skipped when already done).
async fn bind(
    ctx: &Context,
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Result<(), Error> {
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let volume_name = name_of(volume).to_owned();
    let mut volume = volume.clone();
    if let Some(updated) = fit::bind_volume_to_claim(&volume, claim) {
        volume = volumes
            .replace(&volume_name, &PostParams::default(), &updated)
            .await?;
    }
    if volume.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        set_volume_phase(ctx, &volume, "Bound", None).await?;
    }
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if named != volume_name || !binder::bind_completed(claim) {
        let mut annotations = json!({ANN_BIND_COMPLETED: "yes"});
        if named.is_empty() {
            annotations[ANN_BOUND_BY_CONTROLLER] = json!("yes");
        }
        let patch = json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version, "annotations": annotations},
            "spec": {"volumeName": volume_name},
        });
        merge(claims, name_of(claim), &patch, false).await?;
    }
    let spec = volume.spec.as_ref();
    let status = claim.status.as_ref();
    let wanted_modes = spec.and_then(|s| s.access_modes.clone());
    let wanted_capacity = spec.and_then(|s| s.capacity.clone());
    let current_capacity = status.and_then(|s| s.capacity.clone());
    // A claim's recorded capacity is the volume's unless a resize already recorded more.
    if claim_phase(claim) != "Bound"
        || status.and_then(|s| s.access_modes.clone()) != wanted_modes
        || current_capacity.is_none()
    {
        let patch = json!({"status": {
            "phase": "Bound",
            "accessModes": wanted_modes,
            "capacity": current_capacity.or(wanted_capacity),
        }});
        merge(claims, name_of(claim), &patch, true).await?;
    }
    Ok(())
}

async fn set_volume_phase(
    ctx: &Context,
    volume: &PersistentVolume,
    phase: &str,
    note: Option<Note>,
) -> Result<(), Error> {
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let message = note.as_ref().map(|n| n.message.clone());
    let patch = json!({"status": {
        "phase": phase,
        "message": message,
        "lastPhaseTransitionTime": capstan_client::events::now(),
    }});
    merge(&volumes, name_of(volume), &patch, true).await?;
    if let Some(note) = note {
        ctx.record(volume, note);
    }
    Ok(())
}

async fn sync_volume(volume: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action, Error> {
    let claim = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| {
            let key = ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?);
            ctx.claims.get(&key)
        });
    let mut step = binder::volume_step(&volume, claim.as_deref());
    if claim.is_none() && matches!(step, VolumeStep::Phase("Released", _)) {
        // The cache may lag behind a claim just made: ask the API before releasing.
        if let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(
                ctx.client.clone(),
                reference.namespace.as_deref().unwrap_or(""),
            );
            if let Some(fresh) = api.get_opt(reference.name.as_deref().unwrap_or("")).await? {
                step = binder::volume_step(&volume, Some(&fresh));
            }
        }
    }
    match step {
        VolumeStep::Nothing | VolumeStep::AwaitProvisionerDelete => Ok(Action::await_change()),
        VolumeStep::Phase(phase, note) => {
            set_volume_phase(&ctx, &volume, phase, note).await?;
            Ok(Action::await_change())
        }
        VolumeStep::Unbind => {
            let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
            let patch = json!({
                "metadata": {
                    "resourceVersion": volume.metadata.resource_version,
                    "annotations": {ANN_BOUND_BY_CONTROLLER: null},
                },
                "spec": {"claimRef": null},
            });
            merge(&volumes, name_of(volume.as_ref()), &patch, false).await?;
            set_volume_phase(&ctx, &volume, "Available", None).await?;
            Ok(Action::await_change())
        }
    }
}
