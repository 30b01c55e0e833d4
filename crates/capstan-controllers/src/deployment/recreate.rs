//! The `Recreate` strategy (upstream's `recreate.go`): scale every old replica set to zero,
//! wait until no old pod runs, then create and scale up the new replica set.

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::Writes;
use super::sync::{PodMap, Syncer};
use super::util::*;
use crate::runtime::Error;

/// Whether old pods may still run: an old replica set reports pods, or a pod of an old replica
/// set is not in a terminal phase (`Unknown` counts as running).
pub fn old_pods_running(new: Option<&ReplicaSet>, old: &[ReplicaSet], pods: &PodMap) -> bool {
    if actual_replica_count(old) > 0 {
        return true;
    }
    let new_uid = new.and_then(|rs| rs.metadata.uid.as_deref());
    pods.iter()
        .filter(|(uid, _)| Some(uid.as_str()) != new_uid)
        .flat_map(|(_, pods)| pods)
        .any(|pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Failed" | "Succeeded"))
        })
}

impl<W: Writes> Syncer<'_, W> {
    /// One step of a `Recreate` rollout.
    pub(super) async fn rollout_recreate(
        &mut self,
        mut rs_list: Vec<ReplicaSet>,
        pods: &PodMap,
    ) -> Result<(), Error> {
        // Not created yet, so that nothing scales up before the old pods are gone.
        let (mut new, mut old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, false)
            .await?;

        // The status below is computed from the replica sets as they were (as upstream).
        let mut scaled_down = false;
        for rs in old.iter().filter(|rs| is_active(rs)) {
            let (scaled, _) = self.scale_replica_set_and_record_event(rs, 0).await?;
            scaled_down |= scaled;
        }
        if scaled_down {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        if old_pods_running(new.as_ref(), &old, pods) {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        if new.is_none() {
            (new, old) = self
                .get_all_replica_sets_and_sync_revision(&mut rs_list, true)
                .await?;
        }
        if let Some(rs) = new.as_ref() {
            let replicas = d_replicas(&self.d);
            self.scale_replica_set_and_record_event(rs, replicas)
                .await?;
        }
        if deployment_complete(&self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup_deployment(&old).await?;
        }
        self.sync_rollout_status(&old, new.as_ref()).await
    }
}
