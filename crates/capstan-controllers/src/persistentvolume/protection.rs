//! Storage object in-use protection (upstream's `pvcprotection` and `pvprotection`
//! controllers): every claim carries the `kubernetes.io/pvc-protection` finalizer and every
//! volume `kubernetes.io/pv-protection` (added here when the admission plugin did not, e.g. to
//! objects made before it). A claim being deleted keeps its finalizer while a scheduled pod
//! that has not finished uses it (a `persistentVolumeClaim` volume naming it, or the claim of
//! an ephemeral volume); a volume being deleted keeps its finalizer while it is Bound.

use std::sync::Arc;

use capstan_api::fit::volume::{self as fit, PV_PROTECTION_FINALIZER, PVC_PROTECTION_FINALIZER};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::runtime::{Change, Error, Queue, Setup, Task};

/// Whether a pod holds the claim `name` in its namespace: it is scheduled, has not finished,
/// and one of its volumes names the claim (upstream's `podUsesPVC`).
pub fn pod_uses_claim(pod: &Pod, name: &str) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    scheduled && !finished && fit::pod_claims(pod).iter().any(|c| c == name)
}

/// Whether a volume is in use: Bound (upstream's `isBeingUsed`).
pub fn volume_in_use(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn has_finalizer<K: Resource>(object: &K, finalizer: &str) -> bool {
    object
        .meta()
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Adds or removes `finalizer` with a merge patch guarded by the object's resourceVersion.
async fn set_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    present: bool,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = object.meta().finalizers.clone().unwrap_or_default();
    finalizers.retain(|f| f != finalizer);
    if present {
        finalizers.push(finalizer.to_owned());
    }
    let patch = json!({"metadata": {
        "resourceVersion": object.meta().resource_version,
        "finalizers": finalizers,
    }});
    let name = object.meta().name.as_deref().unwrap_or("");
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::runtime::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

struct ClaimContext {
    client: Client,
    pods: Store<Pod>,
}

/// The claim protection controller.
pub fn start_claims(mut setup: Setup<'_>) -> Task {
    let claims = setup.watch::<PersistentVolumeClaim>();
    let pods = setup.watch::<Pod>();
    let (queue, rx) = Queue::<PersistentVolumeClaim>::new();
    queue.follow_applied(&claims);
    {
        let queue = queue.clone();
        pods.on_change(move |change| {
            let pod = change.object();
            // Only a pod that stops holding a claim (gone, finished) can free it.
            let gone = matches!(change, Change::Deleted(_))
                || matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
            if gone {
                for claim in fit::pod_claims(pod) {
                    queue.add_name(pod.metadata.namespace.as_deref(), &claim);
                }
            }
        });
    }
    let ctx = Arc::new(ClaimContext {
        client: setup.client(),
        pods: pods.store(),
    });
    setup.run("pvc-protection", &claims, rx, ctx, sync_claim)
}

async fn sync_claim(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<ClaimContext>,
) -> Result<Action, Error> {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let protected = has_finalizer(claim.as_ref(), PVC_PROTECTION_FINALIZER);
    if claim.metadata.deletion_timestamp.is_none() {
        if !protected {
            set_finalizer(&api, claim.as_ref(), PVC_PROTECTION_FINALIZER, true).await?;
        }
        return Ok(Action::await_change());
    }
    if !protected {
        return Ok(Action::await_change());
    }
    let cached_use = ctx.pods.state().iter().any(|p| {
        p.metadata.namespace.as_deref() == Some(namespace.as_str()) && pod_uses_claim(p, &name)
    });
    if cached_use {
        return Ok(Action::await_change());
    }
    // The cache may miss a pod just scheduled: ask the API before letting the claim go.
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let live = pods.list(&ListParams::default()).await?;
    if live.items.iter().any(|p| pod_uses_claim(p, &name)) {
        return Ok(Action::await_change());
    }
    set_finalizer(&api, claim.as_ref(), PVC_PROTECTION_FINALIZER, false).await?;
    Ok(Action::await_change())
}

struct VolumeContext {
    client: Client,
}

/// The volume protection controller.
pub fn start_volumes(mut setup: Setup<'_>) -> Task {
    let volumes = setup.watch::<PersistentVolume>();
    let (queue, rx) = Queue::<PersistentVolume>::new();
    queue.follow_applied(&volumes);
    let ctx = Arc::new(VolumeContext {
        client: setup.client(),
    });
    setup.run("pv-protection", &volumes, rx, ctx, sync_volume)
}

async fn sync_volume(
    volume: Arc<PersistentVolume>,
    ctx: Arc<VolumeContext>,
) -> Result<Action, Error> {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let protected = has_finalizer(volume.as_ref(), PV_PROTECTION_FINALIZER);
    if volume.metadata.deletion_timestamp.is_none() {
        if !protected {
            set_finalizer(&api, volume.as_ref(), PV_PROTECTION_FINALIZER, true).await?;
        }
    } else if protected && !volume_in_use(&volume) {
        set_finalizer(&api, volume.as_ref(), PV_PROTECTION_FINALIZER, false).await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(node: Option<&str>, phase: &str, volumes: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "nodeName": node, "volumes": volumes},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn only_scheduled_running_pods_hold_claims() {
        let uses = json!([{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]);
        assert!(pod_uses_claim(
            &pod(Some("n1"), "Running", uses.clone()),
            "data"
        ));
        assert!(pod_uses_claim(
            &pod(Some("n1"), "Pending", uses.clone()),
            "data"
        ));
        assert!(!pod_uses_claim(&pod(None, "Pending", uses.clone()), "data"));
        assert!(!pod_uses_claim(
            &pod(Some("n1"), "Succeeded", uses.clone()),
            "data"
        ));
        assert!(!pod_uses_claim(&pod(Some("n1"), "Running", uses), "other"));
        let ephemeral =
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        assert!(pod_uses_claim(
            &pod(Some("n1"), "Running", ephemeral),
            "p-scratch"
        ));
    }

    #[test]
    fn bound_volumes_are_in_use() {
        let volume = |phase: &str| -> PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": "v"}, "status": {"phase": phase}}))
                .unwrap()
        };
        assert!(volume_in_use(&volume("Bound")));
        assert!(!volume_in_use(&volume("Released")));
        assert!(!volume_in_use(&volume("Available")));
    }
}
