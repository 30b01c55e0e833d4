//! Rollout progress (upstream's `progress.go`): the `Progressing` condition during a rollout
//! (`ReplicaSetUpdated`, `NewReplicaSetAvailable`, `ProgressDeadlineExceeded`), replica
//! failures promoted from the replica sets, and the requeue that checks the deadline again when
//! nothing else would wake the deployment.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::Timestamp;

use super::Writes;
use super::sync::{Syncer, all_of, quote};
use super::util::*;

/// The status to write during a rollout (upstream's `syncRolloutStatus` computation).
pub fn rollout_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = calculate_status(all, new, d, now);
    if !has_progress_deadline(d) {
        remove_condition(&mut status, PROGRESSING);
    }
    let current = get_condition(d.status.as_ref(), PROGRESSING);
    let counts = st(&status);
    let complete_before = counts.replicas == counts.updated
        && current.is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let subject = |what: &str| match new {
        Some(rs) => format!(
            "ReplicaSet {} {what}",
            quote(rs.metadata.name.as_deref().unwrap_or_default())
        ),
        None => format!("Deployment {} {what}", quote(name)),
    };
    if has_progress_deadline(d) && !complete_before {
        if deployment_complete(d, &status) {
            let condition = new_condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE_REASON,
                subject("has successfully progressed."),
                now,
            );
            set_condition(&mut status, condition);
        } else if deployment_progressing(d, &status) {
            // Progress refreshes lastUpdateTime even with the same reason; the transition
            // time stays while the status stays True.
            let mut condition = new_condition(
                PROGRESSING,
                "True",
                REPLICA_SET_UPDATED_REASON,
                subject("is progressing."),
                now,
            );
            if let Some(current) = current {
                if current.status == "True" {
                    condition.last_transition_time = current.last_transition_time.clone();
                }
                remove_condition(&mut status, PROGRESSING);
            }
            set_condition(&mut status, condition);
        } else if deployment_timed_out(d, &status, now) {
            let condition = new_condition(
                PROGRESSING,
                "False",
                TIMED_OUT_REASON,
                subject("has timed out progressing."),
                now,
            );
            set_condition(&mut status, condition);
        }
    }
    match replica_failures(all, new).into_iter().next() {
        Some(failure) => set_condition(&mut status, failure),
        None => remove_condition(&mut status, REPLICA_FAILURE),
    }
    status
}

/// `ReplicaFailure` conditions of the new replica set, else of any replica set, as deployment
/// conditions.
pub fn replica_failures(all: &[&ReplicaSet], new: Option<&ReplicaSet>) -> Vec<DeploymentCondition> {
    let of = |rs: &ReplicaSet| -> Vec<DeploymentCondition> {
        rs.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == REPLICA_FAILURE)
            .map(|c| DeploymentCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                last_transition_time: c.last_transition_time.clone(),
                last_update_time: c.last_transition_time.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect()
    };
    let from_new = new.map(of).unwrap_or_default();
    if !from_new.is_empty() {
        return from_new;
    }
    all.iter().flat_map(|rs| of(rs)).collect()
}

/// When to sync a stuck deployment again to check its deadline (upstream's
/// `requeueStuckDeployment`): `None` when there is no deadline to watch, otherwise the time left
/// plus a second (upstream's margin against skew), and a second when it is (nearly) due.
pub fn requeue_after(
    d: &Deployment,
    new_status: &DeploymentStatus,
    now: Timestamp,
) -> Option<Duration> {
    let current = get_condition(d.status.as_ref(), PROGRESSING)?;
    if !has_progress_deadline(d) {
        return None;
    }
    if deployment_complete(d, new_status) || current.reason.as_deref() == Some(TIMED_OUT_REASON) {
        return None;
    }
    let deadline = i128::from(d.spec.as_ref()?.progress_deadline_seconds?) * 1_000_000_000;
    let from = current
        .last_update_time
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let left = from.as_nanosecond() + deadline - now.as_nanosecond();
    let second: i128 = 1_000_000_000;
    if left < second {
        // Upstream requeues at once, rate-limited; a second keeps it from spinning.
        return Some(Duration::from_secs(1));
    }
    let left = u64::try_from(left + second).unwrap_or(u64::MAX);
    Some(Duration::from_nanos(left))
}

impl<W: Writes> Syncer<'_, W> {
    /// Writes the rollout status if it changed, else schedules the deadline check.
    pub(super) async fn sync_rollout_status(
        &mut self,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<(), crate::runtime::Error> {
        let all = all_of(old, new);
        let status = rollout_status(&self.d, &all, new, self.now);
        if normalize_status(&status) == normalize_status(&self.d.status.clone().unwrap_or_default())
        {
            self.requeue = requeue_after(&self.d, &status, self.now);
            return Ok(());
        }
        self.d.status = Some(status);
        self.update_status().await
    }
}
