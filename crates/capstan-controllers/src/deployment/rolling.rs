//! The `RollingUpdate` strategy (upstream's `rolling.go`): scale the new replica set up as far
//! as maxSurge allows, then scale old ones down as far as maxUnavailable allows, unhealthy
//! replicas first. The plans are pure functions of the replica sets; [`Syncer`] applies them.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::Writes;
use super::sync::{Syncer, all_of};
use super::util::*;
use crate::runtime::Error;

/// What to do with the new replica set: `None` when it has the deployment's size, otherwise
/// its new size (which may equal the current one when the surge is used up).
pub fn new_replica_set_target(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: &ReplicaSet,
) -> Result<Option<i32>, String> {
    let replicas = d_replicas(d);
    let current = rs_replicas(new);
    if current == replicas {
        return Ok(None);
    }
    if current > replicas {
        return Ok(Some(replicas));
    }
    new_rs_new_replicas(d, all, new).map(Some)
}

/// How many old replicas may go: all pods, minus those that must stay available, minus the
/// new replica set's unavailable ones (upstream's `maxScaledDown`).
pub fn max_scaled_down(d: &Deployment, all: &[&ReplicaSet], new: &ReplicaSet) -> i32 {
    let all_pods = replica_count(all.iter().copied());
    let min_available = d_replicas(d) - max_unavailable(d);
    let new_unavailable = rs_replicas(new) - rs_available(new);
    all_pods - min_available - new_unavailable
}

/// Scale-downs of old replica sets' unhealthy replicas, at most `max_cleanup` in all, oldest
/// replica set first: `(name, new size)` (upstream's `cleanupUnhealthyReplicas`). An old replica
/// set reporting more available replicas than it asks for stops the cleanup (upstream errors
/// out and skips scaling down old replica sets in this sync).
pub fn cleanup_unhealthy_plan(
    old: &[ReplicaSet],
    max_cleanup: i32,
) -> Result<Vec<(String, i32)>, String> {
    let mut sorted: Vec<&ReplicaSet> = old.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    let mut total = 0;
    let mut plan = Vec::new();
    for rs in sorted {
        if total >= max_cleanup {
            break;
        }
        let replicas = rs_replicas(rs);
        if replicas == 0 || replicas == rs_available(rs) {
            continue;
        }
        let count = (max_cleanup - total).min(replicas - rs_available(rs));
        let name = rs.metadata.name.clone().unwrap_or_default();
        if count < 0 {
            return Err(format!(
                "when cleaning up unhealthy replicas, got invalid request to scale down {}/{name} {replicas} -> {}",
                rs.metadata.namespace.as_deref().unwrap_or_default(),
                replicas - count
            ));
        }
        plan.push((name, replicas - count));
        total += count;
    }
    Ok(plan)
}

/// Scale-downs of old replica sets while enough pods stay available, oldest first: `(name, new
/// size)` (upstream's `scaleDownOldReplicaSetsForRollingUpdate`).
pub fn scale_down_old_plan(
    d: &Deployment,
    all: &[&ReplicaSet],
    old: &[ReplicaSet],
) -> Vec<(String, i32)> {
    let min_available = d_replicas(d) - max_unavailable(d);
    let available = available_replica_count(all.iter().copied());
    if available <= min_available {
        return Vec::new();
    }
    let mut sorted: Vec<&ReplicaSet> = old.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    let total_to_scale = available - min_available;
    let mut total = 0;
    let mut plan = Vec::new();
    for rs in sorted {
        if total >= total_to_scale {
            break;
        }
        let replicas = rs_replicas(rs);
        if replicas == 0 {
            continue;
        }
        let count = replicas.min(total_to_scale - total);
        plan.push((
            rs.metadata.name.clone().unwrap_or_default(),
            replicas - count,
        ));
        total += count;
    }
    plan
}

impl<W: Writes> Syncer<'_, W> {
    /// One step of a rolling update.
    pub(super) async fn rollout_rolling(
        &mut self,
        mut rs_list: Vec<ReplicaSet>,
    ) -> Result<(), Error> {
        let (new, old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, true)
            .await?;
        let Some(new) = new else {
            return Err(Error::Invalid(
                "the new replica set was not created".to_owned(),
            ));
        };
        let all = all_of(&old, Some(&new));

        let target = new_replica_set_target(&self.d, &all, &new).map_err(Error::Invalid)?;
        if let Some(size) = target {
            let (scaled_up, _) = self.scale_replica_set_and_record_event(&new, size).await?;
            if scaled_up {
                return self.sync_rollout_status(&old, Some(&new)).await;
            }
        }

        let active_old: Vec<ReplicaSet> = old.iter().filter(|rs| is_active(rs)).cloned().collect();
        if self
            .reconcile_old_replica_sets(&all, active_old, &new)
            .await?
        {
            return self.sync_rollout_status(&old, Some(&new)).await;
        }

        if deployment_complete(&self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup_deployment(&old).await?;
        }
        self.sync_rollout_status(&old, Some(&new)).await
    }

    /// Scales old replica sets down; whether any was.
    async fn reconcile_old_replica_sets(
        &mut self,
        all: &[&ReplicaSet],
        mut old: Vec<ReplicaSet>,
        new: &ReplicaSet,
    ) -> Result<bool, Error> {
        if replica_count(&old) == 0 {
            return Ok(false);
        }
        let max = max_scaled_down(&self.d, all, new);
        if max <= 0 {
            return Ok(false);
        }
        let plan = match cleanup_unhealthy_plan(&old, max) {
            Ok(plan) => plan,
            Err(message) => {
                tracing::debug!(%message, "not scaling down old replica sets");
                return Ok(false);
            }
        };
        let mut scaled = 0;
        for (name, size) in plan {
            let Some(slot) = old
                .iter_mut()
                .find(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
            else {
                continue;
            };
            scaled += rs_replicas(slot) - size;
            let (_, updated) = self.scale_replica_set_and_record_event(slot, size).await?;
            *slot = updated;
        }
        let all_now: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(new)).collect();
        for (name, size) in scale_down_old_plan(&self.d, &all_now, &old) {
            let Some(rs) = old
                .iter()
                .find(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
            else {
                continue;
            };
            scaled += rs_replicas(rs) - size;
            let rs = rs.clone();
            self.scale_replica_set_and_record_event(&rs, size).await?;
        }
        Ok(scaled > 0)
    }
}
