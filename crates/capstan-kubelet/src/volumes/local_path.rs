//! The local-path provisioner (`capstan.io/local-path`), one beside every node agent, as
//! upstream's external provisioners and resizers run: it works through the API as its own
//! user (`system:capstan:local-path-provisioner`), and on this node's disk only.
//!
//! - **Provisioning**: a claim handed to this provisioner by the PersistentVolume controller
//!   (`volume.kubernetes.io/storage-provisioner: capstan.io/local-path`) whose selected node
//!   (`volume.kubernetes.io/selected-node`, set by the scheduler) is this node gets a directory
//!   `<storage-dir>/pvc-<claim uid>_<namespace>_<claim>` (mode 0777, so that containers of
//!   any user may write) and a `local` PersistentVolume `pvc-<claim uid>` of the requested size
//!   pinned to this node (`matchFields` on `metadata.name`), pre-bound to the claim, with the
//!   class's reclaim policy and mount options, annotated `pv.kubernetes.io/provisioned-by`.
//!   Events as upstream's external provisioner writes them: `Provisioning`,
//!   `ProvisioningSucceeded`, or `ProvisioningFailed` (block volumes and access modes beyond
//!   one node are refused).
//! - **Deleting**: a volume it made on this node that is `Released` with the `Delete` policy
//!   loses its directory, then its object.
//! - **Resizing**: a claim bound to such a volume whose request grew (the class allowing
//!   expansion, which admission checked) gets the new size recorded on the volume and then in
//!   the claim's `status.capacity` (a directory has no size to grow), with upstream's
//!   `Resizing` and `VolumeResizeSuccessful` events.
//!
//! The work is level-triggered: every change of a claim, volume or class (and a 30 s tick)
//! runs one pass over the cached objects.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capstan_api::fit::volume::{
    self as fit, ANN_PROVISIONED_BY, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    LOCAL_PATH_PROVISIONER,
};
use capstan_client::events::{EventRecorder, EventType, object_reference};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::Notify;

/// How often a pass runs without any change.
const TICK: Duration = Duration::from_secs(30);

/// The provisioner of one node.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's name.
    pub node_name: String,
    /// Where volumes' directories go (`--local-storage-dir`).
    pub dir: PathBuf,
}

/// What one pass found to do for a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Make its volume.
    Provision(Box<PersistentVolume>),
    /// Refuse it with this `ProvisioningFailed` message.
    Refuse(String),
}

/// The directory of the volume for `claim`.
pub fn volume_dir(dir: &Path, claim: &PersistentVolumeClaim) -> PathBuf {
    dir.join(format!(
        "pvc-{}_{}_{}",
        claim.metadata.uid.as_deref().unwrap_or(""),
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or(""),
    ))
}

/// The name of the volume made for `claim`.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or(""))
}

/// Whether the claim waits for this provisioner on this node.
pub fn wants_volume_here(claim: &PersistentVolumeClaim, node: &str) -> bool {
    let annotations = &claim.metadata.annotations;
    claim.metadata.deletion_timestamp.is_none()
        && fit::annotation(annotations, ANN_STORAGE_PROVISIONER) == Some(LOCAL_PATH_PROVISIONER)
        && fit::annotation(annotations, ANN_SELECTED_NODE) == Some(node)
        && claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_none_or(str::is_empty)
}

/// The volume for `claim` of `class` on this node, or why it cannot be made.
pub fn plan(config: &Config, claim: &PersistentVolumeClaim, class: Option<&StorageClass>) -> Work {
    let class_name = fit::claim_class(claim);
    let failed = |why: &str| {
        Work::Refuse(format!(
            "failed to provision volume with StorageClass \"{class_name}\": {why}"
        ))
    };
    let Some(class) = class else {
        return failed(&format!(
            "storageclass.storage.k8s.io \"{class_name}\" not found"
        ));
    };
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.volume_mode.as_deref() == Some("Block") {
        return failed("a local-path volume is a directory: block volume mode is not supported");
    }
    let modes = spec.access_modes.clone().unwrap_or_default();
    if let Some(mode) = modes
        .iter()
        .find(|m| !matches!(m.as_str(), "ReadWriteOnce" | "ReadWriteOncePod"))
    {
        return failed(&format!(
            "a local-path volume lives on one node: access mode {mode} is not supported"
        ));
    }
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage").cloned())
        .unwrap_or_else(|| ApiQuantity("0".to_owned()));
    let path = volume_dir(&config.dir, claim);
    let pinned = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![config.node_name.clone()]),
            }]),
            ..NodeSelectorTerm::default()
        }],
    };
    Work::Provision(Box::new(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(claim)),
            annotations: Some(BTreeMap::from([(
                ANN_PROVISIONED_BY.to_owned(),
                LOCAL_PATH_PROVISIONER.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_owned(), size)])),
            access_modes: Some(modes),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".to_owned()),
            ),
            storage_class_name: Some(class_name.to_owned()),
            mount_options: class.mount_options.clone(),
            volume_mode: Some("Filesystem".to_owned()),
            local: Some(LocalVolumeSource {
                path: path.to_string_lossy().into_owned(),
                fs_type: None,
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(pinned),
            }),
            claim_ref: Some(fit::claim_reference(claim)),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }))
}

/// Whether `volume` is one this provisioner made on this node: its annotation, and its
/// directory under this node's storage directory.
pub fn is_ours(config: &Config, volume: &PersistentVolume) -> bool {
    fit::annotation(&volume.metadata.annotations, ANN_PROVISIONED_BY)
        == Some(LOCAL_PATH_PROVISIONER)
        && local_path(volume).is_some_and(|p| owned_dir(config, p))
}

fn local_path(volume: &PersistentVolume) -> Option<&Path> {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.local.as_ref())
        .map(|l| Path::new(l.path.as_str()))
}

/// Whether `path` is a volume directory directly under the storage directory (never the
/// storage directory itself, never anything reached through `..`).
fn owned_dir(config: &Config, path: &Path) -> bool {
    path.parent() == Some(config.dir.as_path())
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("pvc-") && n != "." && n != "..")
}

/// Whether a volume of ours is to be deleted: Released under the Delete policy.
pub fn due_for_delete(volume: &PersistentVolume) -> bool {
    let released = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    released && delete && volume.metadata.deletion_timestamp.is_none()
}

/// The size a bound claim of ours should grow to, when its request exceeds its volume.
pub fn resize_to(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> Option<ApiQuantity> {
    if fit::requested_storage(claim) <= fit::volume_capacity(volume) {
        return None;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage").cloned())
}

/// Whether the claim's recorded capacity lags behind its volume's.
fn capacity_lags(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let recorded = claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| capstan_api::quantity::Quantity::parse(&q.0).ok());
    recorded.is_some_and(|r| r < fit::volume_capacity(volume))
}

struct Provisioner {
    client: Client,
    config: Config,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    recorder: EventRecorder,
}

/// Runs the provisioner of `config.node_name` as `client` until `shutdown` completes.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(&config.dir)?;
    let notify = Arc::new(Notify::new());
    let (claims, claims_watch) = watch::<PersistentVolumeClaim>(client.clone(), notify.clone());
    let (volumes, volumes_watch) = watch::<PersistentVolume>(client.clone(), notify.clone());
    let (classes, classes_watch) = watch::<StorageClass>(client.clone(), notify.clone());
    let recorder = EventRecorder::start(client.clone(), LOCAL_PATH_PROVISIONER, &config.node_name);
    let provisioner = Provisioner {
        client,
        config,
        claims,
        volumes,
        classes,
        recorder,
    };
    let work = async {
        let _ = provisioner.claims.wait_until_ready().await;
        let _ = provisioner.volumes.wait_until_ready().await;
        let _ = provisioner.classes.wait_until_ready().await;
        loop {
            provisioner.pass().await;
            let _ = tokio::time::timeout(TICK, notify.notified()).await;
            // Let a burst of changes settle into one pass.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = shutdown => {}
        _ = work => {}
        _ = claims_watch => {}
        _ = volumes_watch => {}
        _ = classes_watch => {}
    }
    Ok(())
}

/// A cache of every `K`, and the task keeping it (which wakes `notify` on every change).
fn watch<K>(client: Client, notify: Arc<Notify>) -> (Store<K>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let api: Api<K> = Api::all(client);
    let stream = reflector::reflector(writer, watcher(api, capstan_client::watcher_config()))
        .default_backoff()
        .touched_objects();
    let task = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(error) = event {
                tracing::debug!(%error, "local-path provisioner watch");
            }
            notify.notify_one();
        }
    };
    (reader, task)
}

impl Provisioner {
    async fn pass(&self) {
        let classes: BTreeMap<String, Arc<StorageClass>> = self
            .classes
            .state()
            .into_iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect();
        let volumes: BTreeMap<String, Arc<PersistentVolume>> = self
            .volumes
            .state()
            .into_iter()
            .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
            .collect();
        for claim in self.claims.state() {
            if wants_volume_here(&claim, &self.config.node_name)
                && !volumes.contains_key(&volume_name(&claim))
            {
                let class = classes.get(fit::claim_class(&claim)).map(Arc::as_ref);
                self.provision(&claim, class).await;
            }
        }
        for volume in volumes.values() {
            if !is_ours(&self.config, volume) {
                continue;
            }
            if due_for_delete(volume) {
                self.delete(volume).await;
                continue;
            }
            if let Some(claim) = self.bound_claim(volume) {
                self.resize(&claim, volume).await;
            }
        }
    }

    fn bound_claim(&self, volume: &PersistentVolume) -> Option<Arc<PersistentVolumeClaim>> {
        let reference = volume.spec.as_ref()?.claim_ref.as_ref()?;
        let key = reflector::ObjectRef::new(reference.name.as_deref()?)
            .within(reference.namespace.as_deref()?);
        let claim = self.claims.get(&key)?;
        let bound = claim.metadata.uid == reference.uid
            && claim.spec.as_ref().and_then(|s| s.volume_name.as_deref())
                == volume.metadata.name.as_deref();
        bound.then_some(claim)
    }

    fn record(&self, object: ObjectReference, warning: bool, reason: &str, message: String) {
        let kind = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder.record(object, kind, reason, message);
    }

    async fn provision(&self, claim: &PersistentVolumeClaim, class: Option<&StorageClass>) {
        let reference = object_reference(claim);
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        self.record(
            reference.clone(),
            false,
            "Provisioning",
            format!("External provisioner is provisioning volume for claim \"{key}\""),
        );
        let volume = match plan(&self.config, claim, class) {
            Work::Refuse(message) => {
                self.record(reference, true, "ProvisioningFailed", message);
                return;
            }
            Work::Provision(volume) => volume,
        };
        let path = volume_dir(&self.config.dir, claim);
        let made = std::fs::create_dir_all(&path)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)));
        if let Err(error) = made {
            self.record(
                reference,
                true,
                "ProvisioningFailed",
                format!(
                    "failed to provision volume: cannot create {}: {error}",
                    path.display()
                ),
            );
            return;
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &*volume).await {
            Ok(_) => self.record(
                reference,
                false,
                "ProvisioningSucceeded",
                format!("Successfully provisioned volume {}", volume_name(claim)),
            ),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => self.record(
                reference,
                true,
                "ProvisioningFailed",
                format!("failed to provision volume: {error}"),
            ),
        }
    }

    async fn delete(&self, volume: &PersistentVolume) {
        let name = volume.metadata.name.clone().unwrap_or_default();
        if let Some(path) = local_path(volume) {
            match std::fs::remove_dir_all(path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(volume = %name, path = %path.display(), %error, "cannot remove a local-path volume's directory");
                    self.record(
                        object_reference(volume),
                        true,
                        "VolumeFailedDelete",
                        format!("cannot remove {}: {error}", path.display()),
                    );
                    return;
                }
            }
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: volume.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(error) = api.delete(&name, &params).await {
            tracing::debug!(volume = %name, %error, "cannot delete a released local-path volume");
        }
    }

    async fn resize(&self, claim: &PersistentVolumeClaim, volume: &PersistentVolume) {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        if let Some(size) = resize_to(claim, volume) {
            let volume_name = volume.metadata.name.clone().unwrap_or_default();
            self.record(
                object_reference(claim),
                false,
                "Resizing",
                format!("External resizer is resizing volume {volume_name}"),
            );
            let api: Api<PersistentVolume> = Api::all(self.client.clone());
            let patch = json!({"spec": {"capacity": {"storage": size}}});
            if let Err(error) = api
                .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                self.record(
                    object_reference(claim),
                    true,
                    "VolumeResizeFailed",
                    format!("resize volume {volume_name} failed: {error}"),
                );
                return;
            }
            let patch = json!({"status": {"capacity": {"storage": size}}});
            if claims
                .patch_status(&claim_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                self.record(
                    object_reference(claim),
                    false,
                    "VolumeResizeSuccessful",
                    "Resize volume succeeded".to_owned(),
                );
            }
        } else if capacity_lags(claim, volume) {
            // The volume grew but the claim's record did not (a pass cut short).
            let capacity = volume.spec.as_ref().and_then(|s| s.capacity.clone());
            let patch = json!({"status": {"capacity": capacity}});
            let _ = claims
                .patch_status(&claim_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn config() -> Config {
        Config {
            node_name: "n1".to_owned(),
            dir: PathBuf::from("/var/lib/capstan/storage"),
        }
    }

    fn claim(spec: Value, annotations: Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "annotations": annotations},
            "spec": spec,
        }))
        .unwrap()
    }

    fn class() -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": "local-path"}, "provisioner": LOCAL_PATH_PROVISIONER,
            "reclaimPolicy": "Retain", "mountOptions": ["noatime"],
        }))
        .unwrap()
    }

    fn spec() -> Value {
        json!({"storageClassName": "local-path", "accessModes": ["ReadWriteOnce"],
               "resources": {"requests": {"storage": "2Gi"}}})
    }

    #[test]
    fn claims_for_this_node_only() {
        let ours =
            json!({ANN_STORAGE_PROVISIONER: LOCAL_PATH_PROVISIONER, ANN_SELECTED_NODE: "n1"});
        assert!(wants_volume_here(&claim(spec(), ours.clone()), "n1"));
        assert!(!wants_volume_here(&claim(spec(), ours), "n2"));
        let theirs = json!({ANN_STORAGE_PROVISIONER: "example.com/x", ANN_SELECTED_NODE: "n1"});
        assert!(!wants_volume_here(&claim(spec(), theirs), "n1"));
        let mut bound = spec();
        bound["volumeName"] = json!("pv");
        let ours =
            json!({ANN_STORAGE_PROVISIONER: LOCAL_PATH_PROVISIONER, ANN_SELECTED_NODE: "n1"});
        assert!(!wants_volume_here(&claim(bound, ours), "n1"));
    }

    #[test]
    fn the_volume_is_a_pinned_directory_pre_bound_to_its_claim() {
        let Work::Provision(volume) = plan(&config(), &claim(spec(), json!({})), Some(&class()))
        else {
            panic!("refused")
        };
        let v = serde_json::to_value(&volume).unwrap();
        assert_eq!(v["metadata"]["name"], "pvc-u1");
        assert_eq!(
            v["metadata"]["annotations"][ANN_PROVISIONED_BY],
            LOCAL_PATH_PROVISIONER
        );
        assert_eq!(
            v["spec"]["local"]["path"],
            "/var/lib/capstan/storage/pvc-u1_ns_data"
        );
        assert_eq!(v["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(v["spec"]["mountOptions"], json!(["noatime"]));
        assert_eq!(v["spec"]["claimRef"]["uid"], "u1");
        assert_eq!(
            v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchFields"][0]["values"],
            json!(["n1"])
        );
        assert!(is_ours(&config(), &volume));
        let elsewhere = Config {
            dir: PathBuf::from("/elsewhere"),
            ..config()
        };
        assert!(!is_ours(&elsewhere, &volume));
    }

    #[test]
    fn block_and_shared_access_are_refused() {
        let mut block = spec();
        block["volumeMode"] = json!("Block");
        assert!(
            matches!(plan(&config(), &claim(block, json!({})), Some(&class())), Work::Refuse(m) if m.contains("block volume mode"))
        );
        let mut shared = spec();
        shared["accessModes"] = json!(["ReadWriteMany"]);
        assert!(
            matches!(plan(&config(), &claim(shared, json!({})), Some(&class())), Work::Refuse(m) if m.contains("ReadWriteMany"))
        );
        assert!(
            matches!(plan(&config(), &claim(spec(), json!({})), None), Work::Refuse(m) if m.contains("not found"))
        );
    }

    #[test]
    fn only_volume_directories_under_the_storage_dir_are_ours() {
        let c = config();
        assert!(owned_dir(
            &c,
            Path::new("/var/lib/capstan/storage/pvc-u1_ns_data")
        ));
        assert!(!owned_dir(&c, Path::new("/var/lib/capstan/storage")));
        assert!(!owned_dir(&c, Path::new("/var/lib/capstan/storage/other")));
        assert!(!owned_dir(
            &c,
            Path::new("/var/lib/capstan/storage/x/pvc-1")
        ));
        assert!(!owned_dir(&c, Path::new("/etc/pvc-1")));
    }

    #[test]
    fn released_volumes_under_delete_go_and_grown_claims_resize() {
        let volume = |phase: &str, policy: &str| -> PersistentVolume {
            serde_json::from_value(json!({
                "metadata": {"name": "pvc-u1"},
                "spec": {"persistentVolumeReclaimPolicy": policy, "capacity": {"storage": "2Gi"}},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        assert!(due_for_delete(&volume("Released", "Delete")));
        assert!(!due_for_delete(&volume("Released", "Retain")));
        assert!(!due_for_delete(&volume("Bound", "Delete")));
        let grown = claim(
            json!({"resources": {"requests": {"storage": "3Gi"}}}),
            json!({}),
        );
        assert_eq!(
            resize_to(&grown, &volume("Bound", "Delete")).map(|q| q.0),
            Some("3Gi".to_owned())
        );
        assert_eq!(
            resize_to(&claim(spec(), json!({})), &volume("Bound", "Delete")),
            None
        );
    }
}
