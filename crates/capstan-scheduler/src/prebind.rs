//! VolumeBinding's PreBind, run in the bind task before the pod's Binding is posted
//! (upstream's `BindPodVolumes`): write the decisions, then wait for them to take effect.
//!
//! Each volume chosen for a claim gets `spec.claimRef` naming the claim (and
//! `pv.kubernetes.io/bound-by-controller`), written over the version just read so that a
//! volume someone else changed meanwhile is read again (once) rather than overwritten; a
//! volume bound to another claim by then fails the attempt. Each claim to provision gets
//! `volume.kubernetes.io/selected-node`. The PersistentVolume controller then completes the
//! bindings and the provisioner creates the volumes; the claims are read (after 20 ms, then
//! ever less often, at most a second apart) until each names its volume and carries
//! `pv.kubernetes.io/bind-completed`. A provisioner that
//! gives up takes the selected node away, a volume whose affinity no longer admits the node or
//! whose claim reference was reset, or the bind timeout, fails the attempt with upstream's
//! message: the pod is retried. Other scheduling cycles go on meanwhile.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::plugins::volume_binding::{self as binding, Decisions};
use crate::snapshot::PodInfo;
use capstan_api::fit::volume::{is_available, is_bound_to};

/// How soon the claims are read again at first while waiting; the interval doubles up to
/// [`MAX_POLL`]. Upstream polls every second, which puts up to a second into every pod whose
/// claim is provisioned (ten of them in a row for an `OrderedReady` StatefulSet); a claim
/// bound in tens of milliseconds is noticed in tens of milliseconds here, and a long wait
/// still costs at most one read per claim a second.
const FIRST_POLL: Duration = Duration::from_millis(20);
/// The longest interval between reads.
const MAX_POLL: Duration = Duration::from_secs(1);

/// Why PreBind did not complete.
#[derive(Debug, PartialEq, Eq)]
pub enum PreBindError {
    /// The pod is gone: nothing to bind or retry.
    PodGone,
    /// The attempt failed (upstream's error text); the pod is worth retrying.
    Failed(String),
}

/// Writes the decisions and waits until every claim is bound (or the timeout passes).
pub async fn bind_volumes(
    client: &Client,
    pod: &PodInfo,
    decisions: &Decisions,
) -> Result<(), PreBindError> {
    write_decisions(client, decisions)
        .await
        .map_err(PreBindError::Failed)?;
    let deadline = Instant::now() + decisions.bind_timeout;
    let mut poll = FIRST_POLL;
    loop {
        if bindings_done(client, pod, decisions).await? {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(PreBindError::Failed(
                "binding volumes: context deadline exceeded".to_owned(),
            ));
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
        poll = (poll * 2).min(MAX_POLL);
    }
}

/// Binds each chosen volume to its claim and selects the node on each claim to provision.
async fn write_decisions(client: &Client, decisions: &Decisions) -> Result<(), String> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for chosen in &decisions.volumes.static_bindings {
        update(&volumes, &chosen.volume, |volume: &PersistentVolume| {
            if !is_available(volume) && !is_bound_to(volume, &chosen.claim) {
                return Err(format!(
                    "persistentvolume {:?} is bound to another claim",
                    chosen.volume
                ));
            }
            Ok(binding::bind_volume_to_claim(volume, &chosen.claim))
        })
        .await?;
    }
    for claim in &decisions.volumes.provisions {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(
            client.clone(),
            claim.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        update(&claims, name, |current: &PersistentVolumeClaim| {
            Ok(binding::select_node(current, &decisions.node))
        })
        .await?;
    }
    Ok(())
}

/// Reads the object, changes it with `change` (`None`: nothing to change) and writes it over
/// the version read; when someone else wrote it meanwhile, reads it again once.
async fn update<K>(
    api: &Api<K>,
    name: &str,
    change: impl Fn(&K) -> Result<Option<K>, String>,
) -> Result<(), String>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut retried = false;
    loop {
        let current = api.get(name).await.map_err(|e| e.to_string())?;
        let Some(changed) = change(&current)? else {
            return Ok(());
        };
        match api.replace(name, &PostParams::default(), &changed).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && !retried => retried = true,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One look at the API (upstream's `checkBindings`): whether every claim is bound; an error
/// when binding has failed or the pod is gone.
async fn bindings_done(
    client: &Client,
    pod: &PodInfo,
    decisions: &Decisions,
) -> Result<bool, PreBindError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), pod.namespace());
    match pods.get_opt(pod.name()).await {
        Ok(Some(current)) if current.metadata.uid.as_deref() == Some(pod.uid()) => {}
        Ok(_) => return Err(PreBindError::PodGone),
        Err(e) => {
            tracing::debug!(pod = %pod.name(), error = %e, "could not read the pod while binding its volumes")
        }
    }
    let failed = |message: String| PreBindError::Failed(format!("binding volumes: {message}"));
    let (node, labels) = (decisions.node.as_str(), &decisions.node_labels);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for chosen in &decisions.volumes.static_bindings {
        let volume = read(&volumes, &chosen.volume, "failed to check binding")
            .await
            .map_err(failed)?
            .ok_or_else(|| {
                failed(format!(
                    "failed to check binding: persistentvolume {:?} not found",
                    chosen.volume
                ))
            })?;
        let claim = read_claim(client, &chosen.claim, "failed to check binding")
            .await
            .map_err(failed)?;
        if !binding::static_binding_done(&volume, &claim, node, labels).map_err(failed)? {
            return Ok(false);
        }
    }
    for claim in &decisions.volumes.provisions {
        let claim = read_claim(client, claim, "failed to check provisioning pvc")
            .await
            .map_err(failed)?;
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or_default();
        // A volume not seen yet is waited for (it may be on its way).
        let volume = match volume_name {
            "" => None,
            name => read(&volumes, name, "failed to check provisioning pvc")
                .await
                .map_err(failed)?,
        };
        if !binding::provisioning_done(&claim, volume.as_ref(), node, labels).map_err(failed)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The object named `name`, `None` when it does not exist; errors start with `context`.
async fn read<K>(api: &Api<K>, name: &str, context: &str) -> Result<Option<K>, String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| format!("{context}: {e}"))
}

/// The claim as the API has it now; an error when it is gone.
async fn read_claim(
    client: &Client,
    claim: &PersistentVolumeClaim,
    context: &str,
) -> Result<PersistentVolumeClaim, String> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    read(&claims, name, context)
        .await?
        .ok_or_else(|| format!("{context}: persistentvolumeclaim {name:?} not found"))
}
