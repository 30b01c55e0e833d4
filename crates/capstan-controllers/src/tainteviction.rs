//! The taint eviction controller (upstream's `taint-eviction-controller`, the old taint
//! manager): a pod on a node with `NoExecute` taints is deleted at once when it does not
//! tolerate one of them, after the shortest `tolerationSeconds` of the tolerations it uses
//! when they are bounded, and never when they are not. The clock starts when this controller
//! first sees the pod must go, and the pending eviction is cancelled when the taints go away.
//! Before deleting, the pod is marked with the `DisruptionTarget` condition, as upstream does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use capstan_api::fit::tolerates;
use capstan_client::events::{EventRecorder, EventType};

use crate::runtime::{self, Change, Error, Queue, Setup, Task};

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    nodes: Store<Node>,
    recorder: EventRecorder,
    /// When each pod's eviction was first found due (pod key -> first seen).
    pending: Mutex<HashMap<String, Instant>>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let nodes = setup.watch::<Node>();
    let pods = setup.watch::<Pod>();
    let (queue, rx) = Queue::<Pod>::new();
    {
        let queue = queue.clone();
        pods.on_change(move |change| {
            if let Change::Applied { new, .. } = change
                && new
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some()
                && new.metadata.deletion_timestamp.is_none()
            {
                queue.add(ObjectRef::from_obj(*new));
            }
        });
    }
    {
        // A node whose NoExecute taints change: every pod on it is looked at again.
        let pod_store = pods.store();
        nodes.on_change(move |change| {
            let (old, new) = match change {
                Change::Applied { old, new } => (old.as_deref().map(no_execute), no_execute(new)),
                Change::Deleted(_) => return,
            };
            if old.as_ref() == Some(&new) {
                return;
            }
            let name = change.object().metadata.name.clone().unwrap_or_default();
            for pod in pod_store.state_filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
            }) {
                queue.add(ObjectRef::from_obj(&*pod));
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        nodes: nodes.store(),
        recorder: setup.recorder("taint-eviction-controller"),
        pending: Mutex::new(HashMap::new()),
    });
    setup.run("taint-eviction-controller", &pods, rx, ctx, reconcile)
}

/// The node's NoExecute taints.
fn no_execute(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .cloned()
        .collect()
}

/// What to do with a pod under `taints`.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// No NoExecute taint, or tolerated forever.
    Stay,
    /// Delete once this long has passed.
    After(Duration),
    /// An untolerated taint: delete now.
    Now,
}

/// Upstream's `processPodOnNode`: every taint must be tolerated; the shortest bounded
/// `tolerationSeconds` among the tolerations used decides.
fn verdict(tolerations: &[Toleration], taints: &[Taint]) -> Verdict {
    if taints.is_empty() {
        return Verdict::Stay;
    }
    let mut shortest: Option<i64> = None;
    for taint in taints {
        let used: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if used.is_empty() {
            return Verdict::Now;
        }
        for toleration in used {
            if let Some(seconds) = toleration.toleration_seconds {
                shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
            }
        }
    }
    match shortest {
        None => Verdict::Stay,
        Some(s) if s <= 0 => Verdict::Now,
        Some(s) => Verdict::After(Duration::from_secs(s as u64)),
    }
}

/// One look at a pod on a tainted (or untainted) node.
pub(crate) async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = crate::pods::key(&pod.metadata);
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let taints = ctx
        .nodes
        .get(&ObjectRef::new(&node_name))
        .map(|n| no_execute(&n))
        .unwrap_or_default();
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let wait = match verdict(&tolerations, &taints) {
        Verdict::Stay => {
            ctx.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            return Ok(Action::await_change());
        }
        Verdict::Now => Duration::ZERO,
        Verdict::After(wait) => wait,
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let first_seen = *ctx
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_insert_with(Instant::now);
    let elapsed = first_seen.elapsed();
    if elapsed < wait {
        return Ok(Action::requeue(wait - elapsed));
    }
    evict(&ctx, &pod).await?;
    ctx.pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
    Ok(Action::await_change())
}

/// Marks the pod with `DisruptionTarget` and deletes it.
async fn evict(ctx: &Context, pod: &Pod) -> Result<(), Error> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": capstan_client::events::now(),
    }]}});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
        .await
    {
        Ok(_) => {}
        Err(error) if runtime::is_not_found(&error) => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.clone()),
        namespace: Some(namespace.clone()),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    };
    ctx.recorder.record(
        reference,
        EventType::Normal,
        "TaintManagerEviction",
        format!("Marking for deletion Pod {namespace}/{name}"),
    );
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(error) if runtime::is_not_found(&error) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            time_added: None,
            value: None,
        }
    }

    fn toleration(value: serde_json::Value) -> Toleration {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn verdicts_follow_upstream() {
        let unreachable = taint("node.kubernetes.io/unreachable");
        let default = toleration(
            json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                        "effect": "NoExecute", "tolerationSeconds": 300}),
        );
        let short = toleration(json!({"operator": "Exists", "tolerationSeconds": 5}));
        let forever =
            toleration(json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists"}));
        assert_eq!(verdict(&[], &[]), Verdict::Stay);
        assert_eq!(
            verdict(&[], std::slice::from_ref(&unreachable)),
            Verdict::Now
        );
        assert_eq!(
            verdict(
                std::slice::from_ref(&default),
                std::slice::from_ref(&unreachable)
            ),
            Verdict::After(Duration::from_secs(300))
        );
        assert_eq!(
            verdict(
                &[default.clone(), short],
                std::slice::from_ref(&unreachable)
            ),
            Verdict::After(Duration::from_secs(5))
        );
        assert_eq!(
            verdict(&[forever], std::slice::from_ref(&unreachable)),
            Verdict::Stay
        );
        // Every taint must be tolerated.
        assert_eq!(
            verdict(&[default], &[unreachable, taint("other")]),
            Verdict::Now
        );
        let wrong_value = toleration(json!({"key": "k", "value": "a", "effect": "NoExecute"}));
        let mut valued = taint("k");
        valued.value = Some("b".into());
        assert_eq!(verdict(&[wrong_value], &[valued]), Verdict::Now);
    }
}
