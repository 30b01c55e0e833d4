//! The pod garbage collector (upstream's `pkg/controller/podgc`), every 20 s: terminated pods
//! beyond the threshold (`--terminated-pod-gc-threshold`, 12,500), oldest first; pods bound to
//! nodes that no longer exist (confirmed by a live read after a 40 s quarantine), marked
//! Failed with a `DisruptionTarget` condition and deleted at once; and unscheduled pods being
//! deleted, which no kubelet will ever confirm.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::runtime::{self, Setup, Task};

/// How often the collector runs (upstream's `gcCheckPeriod`).
const PERIOD: Duration = Duration::from_secs(20);
/// How long a node must be missing before its pods go (upstream's `quarantineTime`).
const QUARANTINE: Duration = Duration::from_secs(40);
/// Upstream's default `--terminated-pod-gc-threshold`.
pub const TERMINATED_THRESHOLD: usize = 12_500;

fn terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The terminated pods to delete: the oldest beyond `threshold` (upstream's `gcTerminated`).
fn excess_terminated(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    let mut done: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| terminated(p) && p.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    if done.len() <= threshold {
        return Vec::new();
    }
    done.sort_by(|a, b| {
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let excess = done.len() - threshold;
    done.truncate(excess);
    done
}

/// Returns the controller's run future: a sweep every period once the caches are synced.
pub fn start(mut setup: Setup<'_>) -> Task {
    let pods = setup.watch::<Pod>();
    let nodes = setup.watch::<Node>();
    let (pod_store, node_store) = (pods.store(), nodes.store());
    let synced = setup.synced();
    let (client, threshold) = (setup.client(), setup.config().terminated_pod_gc_threshold);
    Box::pin(async move {
        synced.await;
        tracing::info!(controller = "podgc", "caches synced; starting");
        let mut missing_since: HashMap<String, Instant> = HashMap::new();
        loop {
            tokio::time::sleep(PERIOD).await;
            collect(
                &client,
                &pod_store,
                &node_store,
                threshold,
                &mut missing_since,
            )
            .await;
        }
    })
}

async fn collect(
    client: &Client,
    pods: &Store<Pod>,
    nodes: &Store<Node>,
    threshold: usize,
    missing_since: &mut HashMap<String, Instant>,
) {
    let all = pods.state();
    for pod in excess_terminated(&all, threshold) {
        delete(client, &pod, false).await;
    }
    // Pods bound to nodes that are gone.
    let now = Instant::now();
    let mut still_missing = HashMap::new();
    for pod in &all {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            // Unscheduled and being deleted: nothing will ever confirm it.
            if pod.metadata.deletion_timestamp.is_some() {
                delete(client, pod, false).await;
            }
            continue;
        };
        if nodes.get(&ObjectRef::new(node)).is_some() {
            continue;
        }
        let since = *missing_since.get(node).unwrap_or(&now);
        still_missing.insert(node.to_owned(), since);
        if now.duration_since(since) < QUARANTINE {
            continue;
        }
        let api: Api<Node> = Api::all(client.clone());
        if matches!(api.get_metadata_opt(node).await, Ok(None)) {
            delete(client, pod, true).await;
        }
    }
    *missing_since = still_missing;
}

/// Deletes a pod at once (grace 0); an orphan is first marked Failed with `DisruptionTarget`.
async fn delete(client: &Client, pod: &Pod, orphaned: bool) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    if orphaned && !terminated(pod) {
        let status = json!({"status": {"phase": "Failed", "conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
            "lastTransitionTime": capstan_client::events::now(),
        }]}});
        if let Err(error) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
            .await
            && !runtime::is_not_found(&error)
        {
            tracing::warn!(pod = %name, %namespace, %error, "podgc: cannot mark the pod failed");
            return;
        }
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => tracing::info!(pod = %name, %namespace, orphaned, "podgc: deleted"),
        Err(error) if runtime::is_not_found(&error) => {}
        Err(error) => tracing::warn!(pod = %name, %namespace, %error, "podgc: cannot delete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str, created: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "creationTimestamp": created},
                                           "status": {"phase": phase}}),
            )
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    #[test]
    fn the_oldest_terminated_pods_beyond_the_threshold_go() {
        let pods = [
            pod("new-done", "Succeeded", "2026-01-03T00:00:00Z"),
            pod("running", "Running", "2026-01-01T00:00:00Z"),
            pod("old-failed", "Failed", "2026-01-01T00:00:00Z"),
            pod("mid-done", "Succeeded", "2026-01-02T00:00:00Z"),
        ];
        let names = |v: Vec<Arc<Pod>>| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(excess_terminated(&pods, 1)),
            ["old-failed", "mid-done"]
        );
        assert!(excess_terminated(&pods, 3).is_empty());
    }
}
