//! The ephemeral volume controller (upstream's `pkg/controller/volume/ephemeral`): for every
//! `ephemeral` volume of a pod not being deleted, the claim `<pod>-<volume>` made from the
//! volume's `volumeClaimTemplate` (its labels, annotations and spec), owned by the pod as
//! controller so that the garbage collector removes it with the pod. A claim of that name the
//! pod does not own is left alone and the pod cannot start (the scheduler and the kubelet say
//! so).

use std::sync::Arc;

use capstan_api::fit::volume as fit;
use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::pods;
use crate::runtime::{Error, Queue, Setup, Task};

/// The claim for the pod's ephemeral volume `index` (upstream's `handleVolume` object).
pub fn claim_for(
    pod: &Pod,
    volume: &k8s_openapi::api::core::v1::Volume,
) -> Option<PersistentVolumeClaim> {
    let template = volume.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
    let pod_name = pod.metadata.name.as_deref()?;
    let meta = template.metadata.clone().unwrap_or_default();
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: fit::volume_claim(pod_name, volume),
            namespace: pod.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: Some(vec![pods::controller_ref("v1", "Pod", &pod.metadata)]),
            ..ObjectMeta::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    })
}

struct Context {
    client: Client,
    claims: Store<PersistentVolumeClaim>,
    recorder: EventRecorder,
}

/// Registers the handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let pods_informer = setup.watch::<Pod>();
    let claims = setup.watch::<PersistentVolumeClaim>();
    let (queue, rx) = Queue::<Pod>::new();
    {
        let queue = queue.clone();
        pods_informer.on_change(move |change| {
            let pod = change.object();
            let ephemeral = pod
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .is_some_and(|v| v.iter().any(|v| v.ephemeral.is_some()));
            if ephemeral {
                queue.add(ObjectRef::from_obj(pod));
            }
        });
    }
    {
        // A claim made for a pod that was deleted by hand is made again.
        let queue = queue.clone();
        claims.on_change(move |change| {
            if let crate::runtime::Change::Deleted(claim) = change
                && let Some(owner) = pods::controller_of(&claim.metadata)
                && owner.kind == "Pod"
            {
                queue.add_name(claim.metadata.namespace.as_deref(), &owner.name);
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        claims: claims.store(),
        recorder: setup.recorder("ephemeral_volume"),
    });
    setup.run("ephemeral-volume", &pods_informer, rx, ctx, sync)
}

async fn sync(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Error> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    for volume in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
    {
        let Some(claim) = claim_for(&pod, volume) else {
            continue;
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        if ctx
            .claims
            .get(&ObjectRef::new(&name).within(&namespace))
            .is_some()
        {
            continue;
        }
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                let message = format!("PVC creation failed: {}", pods::error_message(&error));
                ctx.recorder.record(
                    pods::object_reference(pod.as_ref()),
                    EventType::Warning,
                    "FailedBinding",
                    message,
                );
                return Err(error.into());
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_are_named_after_pod_and_volume_and_owned_by_the_pod() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"type": "scratch"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }}},
                {"name": "tmp", "emptyDir": {}},
            ]},
        }))
        .unwrap();
        let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        let claim = claim_for(&pod, &volumes[0]).unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("web-scratch"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["type"], "scratch");
        assert!(fit::check_ephemeral_owner(&claim, &pod).is_ok());
        assert!(claim_for(&pod, &volumes[1]).is_none());
        let mut other = pod.clone();
        other.metadata.uid = Some("p2".into());
        assert!(fit::check_ephemeral_owner(&claim, &other).is_err());
    }
}
