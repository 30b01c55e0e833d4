//! The storage part of `capstan-bench pods`: a StatefulSet whose replicas each get a claim of
//! the default `local-path` class, on the benchmark's real node. Timed from the StatefulSet's
//! create request until every replica is `Running` (each claim provisioned by the node's
//! local-path provisioner after the scheduler chose the node, bound by the binder, the
//! directory mounted), with both pod management policies; then from the StatefulSet's and
//! the claims' deletion until every provisioned volume is gone (the reclaim path: protection
//! finalizers, Released, the directory and the object removed).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// One timed StatefulSet.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// `Parallel` or `OrderedReady`.
    pub(crate) policy: &'static str,
    /// Replicas (one claim each).
    pub(crate) replicas: usize,
    /// Create request until every replica runs.
    pub(crate) running: Duration,
    /// Deletion until every provisioned volume is gone.
    pub(crate) reclaimed: Duration,
}

fn stateful_set(name: &str, replicas: usize, policy: &str, image: &str) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": image, "command": ["sleep", "3600"],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))?)
}

async fn poll_until(
    what: &str,
    timeout: Duration,
    mut done: impl AsyncFnMut() -> Result<bool>,
) -> Result<()> {
    let began = Instant::now();
    while !done().await? {
        if began.elapsed() > timeout {
            bail!("{what}: not done after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Runs one StatefulSet of `replicas` with `policy` in `namespace` and removes it.
pub(crate) async fn run(
    client: &kube::Client,
    namespace: &str,
    replicas: usize,
    policy: &'static str,
    image: &str,
) -> Result<Run> {
    let name = format!("claims-{}", policy.to_lowercase());
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("app={name}"));

    let began = Instant::now();
    sets.create(
        &PostParams::default(),
        &stateful_set(&name, replicas, policy, image)?,
    )
    .await
    .context("creating the StatefulSet")?;
    poll_until(
        "every replica Running",
        Duration::from_secs(300),
        async || {
            let list = pods.list(&selector).await?;
            let running = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok(running == replicas)
        },
    )
    .await?;
    let running = began.elapsed();
    let provisioned: Vec<String> = claims
        .list(&selector)
        .await?
        .items
        .iter()
        .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
        .collect();
    if provisioned.len() != replicas {
        bail!("{} claims bound for {replicas} replicas", provisioned.len());
    }

    let began = Instant::now();
    sets.delete(&name, &DeleteParams::background()).await?;
    claims
        .delete_collection(&DeleteParams::default(), &selector)
        .await?;
    poll_until("the replicas gone", Duration::from_secs(300), async || {
        Ok(pods.list(&selector).await?.items.is_empty())
    })
    .await?;
    poll_until(
        "every provisioned volume gone",
        Duration::from_secs(300),
        async || {
            let left = volumes.list(&ListParams::default()).await?;
            Ok(!left.items.iter().any(|v| {
                v.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| provisioned.contains(n))
            }))
        },
    )
    .await?;
    Ok(Run {
        policy,
        replicas,
        running,
        reclaimed: began.elapsed(),
    })
}
