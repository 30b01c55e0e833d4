//! One sync of a deployment (upstream's `syncDeployment` and `sync.go`): finding or creating the
//! new replica set and keeping revisions in step, scaling (proportionally when several replica
//! sets are active), cleaning up old revisions, and writing the status. The decisions are the
//! pure functions here and in [`super::util`]; [`Syncer`] only carries them out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use capstan_client::events::EventType;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::core::SelectorExt;

use super::util::{self, *};
use super::{Writes, claim, rollback, selector_of, selects_all};
use crate::runtime::Error;

/// Pods of the deployment by the UID of the replica set controlling them.
pub type PodMap = HashMap<String, Vec<Arc<Pod>>>;

/// Carries out one sync of one deployment: holds the working copy of the deployment, which
/// status writes refresh, and the requeue the progress check asks for.
#[derive(Debug)]
pub struct Syncer<'a, W> {
    /// Where writes go.
    pub w: &'a W,
    /// The deployment as last written (or read).
    pub d: Deployment,
    /// The time of this sync (whole seconds).
    pub now: Timestamp,
    /// When to look again if nothing else happens.
    pub requeue: Option<Duration>,
}

/// The message of an API error (as Go's `err.Error()` of a status error), else the error.
pub use crate::pods::error_message;

fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.is_already_exists())
}

fn is_namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// Go's `%q` for a name.
pub fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// Syncs one deployment from the replica sets and pods of its namespace; returns when to look
/// again (the progress deadline), if at all.
pub async fn sync_deployment<W: Writes>(
    w: &W,
    d: Deployment,
    replica_sets: Vec<ReplicaSet>,
    pods: Vec<Arc<Pod>>,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let mut s = Syncer {
        w,
        d,
        now,
        requeue: None,
    };
    s.sync_deployment(replica_sets, pods).await?;
    Ok(s.requeue)
}

/// Groups the pods the deployment selects by their controlling replica set, for those in
/// `rs_list` (every replica set gets an entry).
pub fn pod_map(d: &Deployment, rs_list: &[ReplicaSet], pods: &[Arc<Pod>]) -> PodMap {
    let mut map: PodMap = rs_list
        .iter()
        .filter_map(|rs| rs.metadata.uid.clone())
        .map(|uid| (uid, Vec::new()))
        .collect();
    let Ok(selector) = selector_of(d) else {
        return map;
    };
    for pod in pods {
        if !selector.matches(crate::pods::labels_of(&pod.metadata)) {
            continue;
        }
        if let Some(owner) = util::controller_of(&pod.metadata)
            && let Some(list) = map.get_mut(&owner.uid)
        {
            list.push(pod.clone());
        }
    }
    map
}

/// The controller reference a deployment puts on its replica sets.
pub fn controller_ref(d: &Deployment) -> OwnerReference {
    crate::pods::controller_ref("apps/v1", "Deployment", &d.metadata)
}

/// The replica set a deployment creates for its current template (before sizing and
/// annotations): named `<deployment>-<hash>`, the hash label on its labels, selector and
/// template.
pub fn new_replica_set(d: &Deployment) -> ReplicaSet {
    let spec = util::spec(d);
    let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
    let mut template = spec.template.clone();
    let hash = compute_hash(&template, collision_count);
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = with_label(meta.labels.as_ref(), HASH_LABEL, &hash);
    meta.labels = Some(labels.clone());
    let mut selector = spec.selector.clone();
    selector.match_labels = Some(with_label(
        selector.match_labels.as_ref(),
        HASH_LABEL,
        &hash,
    ));
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-{hash}",
                d.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: d.metadata.namespace.clone(),
            owner_references: Some(vec![controller_ref(d)]),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    }
}

/// The sizes of a proportional scaling (upstream's `scale` for several active replica sets of
/// a rolling deployment): `(name, new size)` in the order to apply them, the largest first.
pub fn proportional_sizes(d: &Deployment, active: &[&ReplicaSet]) -> Vec<(String, i32)> {
    let mut rss: Vec<&ReplicaSet> = active.to_vec();
    let total = replica_count(rss.iter().copied());
    let replicas = d_replicas(d);
    let allowed = if replicas > 0 {
        replicas + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - total;
    if to_add > 0 {
        rss.sort_by(|a, b| by_size_newer(a, b));
    } else if to_add < 0 {
        rss.sort_by(|a, b| by_size_older(a, b));
    }
    let mut added = 0;
    let mut sizes: Vec<(String, i32)> = rss
        .iter()
        .map(|rs| {
            let name = rs.metadata.name.clone().unwrap_or_default();
            if to_add == 0 {
                return (name, rs_replicas(rs));
            }
            let proportion = get_proportion(rs, d, to_add, added);
            added += proportion;
            (name, rs_replicas(rs) + proportion)
        })
        .collect();
    // Leftovers go to the largest.
    if to_add != 0
        && let Some(first) = sizes.first_mut()
    {
        first.1 = (first.1 + to_add - added).max(0);
    }
    sizes
}

/// The old replica sets to delete beyond the revision history limit: the oldest revisions
/// first, only those fully scaled down, observed and not already being deleted.
pub fn cleanup_candidates(old: &[ReplicaSet], limit: i32) -> Vec<(String, String)> {
    let mut alive: Vec<&ReplicaSet> = old
        .iter()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .collect();
    let diff = alive.len() as i64 - i64::from(limit);
    if diff <= 0 {
        return Vec::new();
    }
    alive.sort_by(|a, b| by_revision(a, b));
    alive
        .into_iter()
        .take(diff as usize)
        .filter(|rs| {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            rs_status_replicas(rs) == 0
                && rs_replicas(rs) == 0
                && generation(&rs.metadata) <= observed
        })
        .map(|rs| {
            (
                rs.metadata.namespace.clone().unwrap_or_default(),
                rs.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Whether the deployment was resized: an active replica set records another desired size.
pub fn is_scaling_event(d: &Deployment, all: &[&ReplicaSet]) -> bool {
    all.iter()
        .filter(|rs| is_active(rs))
        .filter_map(|rs| int_annotation(rs, DESIRED_REPLICAS_ANNOTATION))
        .any(|desired| desired != d_replicas(d))
}

/// The paused/resumed `Progressing` condition to set, if any (upstream's
/// `checkPausedConditions`).
pub fn paused_condition(
    d: &Deployment,
    now: Timestamp,
) -> Option<k8s_openapi::api::apps::v1::DeploymentCondition> {
    if !has_progress_deadline(d) {
        return None;
    }
    let cond = get_condition(d.status.as_ref(), PROGRESSING);
    let reason = cond.and_then(|c| c.reason.as_deref());
    if reason == Some(TIMED_OUT_REASON) {
        return None;
    }
    let paused_exists = reason == Some(PAUSED_DEPLOY_REASON);
    if is_paused(d) && !paused_exists {
        Some(new_condition(
            PROGRESSING,
            "Unknown",
            PAUSED_DEPLOY_REASON,
            "Deployment is paused".to_owned(),
            now,
        ))
    } else if !is_paused(d) && paused_exists {
        Some(new_condition(
            PROGRESSING,
            "Unknown",
            RESUMED_DEPLOY_REASON,
            "Deployment is resumed".to_owned(),
            now,
        ))
    } else {
        None
    }
}

/// Old and new replica sets as one list (upstream's `append(oldRSs, newRS)`).
pub fn all_of<'a>(old: &'a [ReplicaSet], new: Option<&'a ReplicaSet>) -> Vec<&'a ReplicaSet> {
    old.iter().chain(new).collect()
}

impl<W: Writes> Syncer<'_, W> {
    fn name(&self) -> &str {
        self.d.metadata.name.as_deref().unwrap_or_default()
    }

    fn status_mut(&mut self) -> &mut DeploymentStatus {
        self.d.status.get_or_insert_with(Default::default)
    }

    pub(super) fn event(&self, kind: EventType, reason: &str, message: String) {
        self.w.event(&self.d, kind, reason, message);
    }

    /// Writes the working copy's status and annotations.
    pub(super) async fn update_status(&mut self) -> Result<(), Error> {
        let updated = self.w.update_status(&self.d).await?;
        self.d = updated;
        Ok(())
    }

    async fn sync_deployment(
        &mut self,
        replica_sets: Vec<ReplicaSet>,
        pods: Vec<Arc<Pod>>,
    ) -> Result<(), Error> {
        if selects_all(&self.d) {
            self.event(
                EventType::Warning,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required."
                    .to_owned(),
            );
            let observed = self
                .d
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            let generation = generation(&self.d.metadata);
            if observed < generation {
                self.status_mut().observed_generation = Some(generation);
                if let Err(error) = self.update_status().await {
                    tracing::debug!(%error, "could not record the observed generation");
                }
            }
            return Ok(());
        }
        let mut rs_list = claim::claim_replica_sets(self.w, &self.d, replica_sets).await?;
        let pod_map = pod_map(&self.d, &rs_list, &pods);

        if self.d.metadata.deletion_timestamp.is_some() {
            return self.sync_status_only(rs_list).await;
        }
        if let Some(condition) = paused_condition(&self.d, self.now) {
            set_condition(self.status_mut(), condition);
            self.update_status().await?;
        }
        if is_paused(&self.d) {
            return self.sync(rs_list).await;
        }
        if rollback::rollback_to(&self.d).is_some() {
            return self.rollback(rs_list).await;
        }
        let (new, old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, false)
            .await?;
        if is_scaling_event(&self.d, &all_of(&old, new.as_ref())) {
            return self.sync(rs_list).await;
        }
        match strategy_type(&self.d) {
            RECREATE => self.rollout_recreate(rs_list, &pod_map).await,
            ROLLING_UPDATE => self.rollout_rolling(rs_list).await,
            other => Err(Error::Invalid(format!(
                "unexpected deployment strategy type: {other}"
            ))),
        }
    }

    /// Only the status, for a deployment being deleted.
    async fn sync_status_only(&mut self, mut rs_list: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, false)
            .await?;
        self.sync_deployment_status(&old, new.as_ref()).await
    }

    /// Scaling events and paused deployments: scale, clean up (paused only), status.
    pub(super) async fn sync(&mut self, mut rs_list: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, false)
            .await?;
        self.scale(new.as_ref(), &old).await?;
        if is_paused(&self.d) && rollback::rollback_to(&self.d).is_none() {
            self.cleanup_deployment(&old).await?;
        }
        self.sync_deployment_status(&old, new.as_ref()).await
    }

    /// The new replica set (created when asked and missing) and all the old ones, with the
    /// new one's revision raised above the old ones and copied to the deployment.
    pub(super) async fn get_all_replica_sets_and_sync_revision(
        &mut self,
        rs_list: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        rs_list.sort_by(by_creation);
        let (existing, old) = split_new_and_old(&self.d, rs_list);
        let new = self.get_new_replica_set(existing, &old, create).await?;
        // Later steps of this sync see what was written (upstream rereads its stale list and
        // conflicts with itself).
        if let Some(new) = &new {
            match rs_list
                .iter_mut()
                .find(|rs| rs.metadata.uid == new.metadata.uid)
            {
                Some(slot) => *slot = new.clone(),
                None => rs_list.push(new.clone()),
            }
        }
        Ok((new, old))
    }

    async fn get_new_replica_set(
        &mut self,
        existing: Option<ReplicaSet>,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, Error> {
        let new_revision = (max_revision(old) + 1).to_string();
        if let Some(existing) = existing {
            let mut rs = existing;
            let annotations_updated = set_new_rs_annotations(
                &self.d,
                &mut rs,
                &new_revision,
                true,
                MAX_REV_HISTORY_CHARS,
            );
            let min_ready = min_ready_seconds(&self.d);
            let rs_min_ready = rs
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0);
            if annotations_updated || rs_min_ready != min_ready {
                rs.spec
                    .get_or_insert_with(Default::default)
                    .min_ready_seconds = Some(min_ready);
                return Ok(Some(self.w.update_rs(&rs).await?));
            }
            let rs_revision = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let mut needs_update = set_deployment_revision(&mut self.d, &rs_revision);
            if has_progress_deadline(&self.d)
                && get_condition(self.d.status.as_ref(), PROGRESSING).is_none()
            {
                let message = format!(
                    "Found new replica set {}",
                    quote(rs.metadata.name.as_deref().unwrap_or_default())
                );
                let condition =
                    new_condition(PROGRESSING, "True", FOUND_NEW_RS_REASON, message, self.now);
                set_condition(self.status_mut(), condition);
                needs_update = true;
            }
            if needs_update {
                self.update_status().await?;
            }
            return Ok(Some(rs));
        }
        if !create {
            return Ok(None);
        }

        let mut new_rs = new_replica_set(&self.d);
        let new_replicas = {
            let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
            new_rs_new_replicas(&self.d, &all, &new_rs).map_err(Error::Invalid)?
        };
        set_rs_replicas(&mut new_rs, new_replicas);
        set_new_rs_annotations(
            &self.d,
            &mut new_rs,
            &new_revision,
            false,
            MAX_REV_HISTORY_CHARS,
        );
        let name = new_rs.metadata.name.clone().unwrap_or_default();
        let mut already_exists = false;
        let created = match self.w.create_rs(&new_rs).await {
            Ok(created) => created,
            Err(error) if is_already_exists(&error) => {
                already_exists = true;
                let namespace = new_rs.metadata.namespace.clone().unwrap_or_default();
                let Some(found) = self.w.cached_rs(&namespace, &name) else {
                    return Err(Error::Invalid(format!(
                        "replicaset {namespace}/{name} exists but is not in the cache yet"
                    )));
                };
                let ours = util::controller_of(&found.metadata)
                    .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref());
                if ours && equal_ignore_hash(&util::spec(&self.d).template, &rs_template(&found)) {
                    found
                } else {
                    // A hash collision: bump the count so the next sync hashes differently.
                    let status = self.status_mut();
                    let count = status.collision_count.unwrap_or(0);
                    status.collision_count = Some(count + 1);
                    match self.update_status().await {
                        Ok(()) => tracing::info!(
                            deployment = self.name(),
                            old = count,
                            new = count + 1,
                            "hash collision; bumped collisionCount"
                        ),
                        Err(e) => tracing::debug!(error = %e, "could not bump collisionCount"),
                    }
                    return Err(error.into());
                }
            }
            Err(error) if is_namespace_terminating(&error) => return Err(error.into()),
            Err(error) => {
                let message = format!(
                    "Failed to create new replica set {}: {}",
                    quote(&name),
                    error_message(&error)
                );
                if has_progress_deadline(&self.d) {
                    let condition = new_condition(
                        PROGRESSING,
                        "False",
                        FAILED_RS_CREATE_REASON,
                        message.clone(),
                        self.now,
                    );
                    set_condition(self.status_mut(), condition);
                    let _ = self.update_status().await;
                }
                self.event(EventType::Warning, FAILED_RS_CREATE_REASON, message);
                return Err(error.into());
            }
        };
        let created_name = created.metadata.name.clone().unwrap_or_default();
        if !already_exists && new_replicas > 0 {
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set {created_name} from 0 to {new_replicas}"),
            );
        }
        let mut needs_update = set_deployment_revision(&mut self.d, &new_revision);
        if !already_exists && has_progress_deadline(&self.d) {
            let message = format!("Created new replica set {}", quote(&created_name));
            let condition = new_condition(
                PROGRESSING,
                "True",
                NEW_REPLICA_SET_REASON,
                message,
                self.now,
            );
            set_condition(self.status_mut(), condition);
            needs_update = true;
        }
        if needs_update {
            self.update_status().await?;
        }
        Ok(Some(created))
    }

    /// Scales proportionally (upstream's `scale`), for resizes and paused deployments.
    async fn scale(&mut self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> Result<(), Error> {
        let replicas = d_replicas(&self.d);
        if let Some(only) = find_active_or_latest(new, old) {
            if rs_replicas(only) == replicas {
                return Ok(());
            }
            let only = only.clone();
            self.scale_replica_set_and_record_event(&only, replicas)
                .await?;
            return Ok(());
        }
        if is_saturated(&self.d, new) {
            for rs in old.iter().filter(|rs| is_active(rs)) {
                self.scale_replica_set_and_record_event(rs, 0).await?;
            }
            return Ok(());
        }
        if is_rolling_update(&self.d) {
            let active: Vec<&ReplicaSet> =
                old.iter().chain(new).filter(|rs| is_active(rs)).collect();
            let sizes = proportional_sizes(&self.d, &active);
            for (name, size) in sizes {
                let Some(rs) = active
                    .iter()
                    .find(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
                else {
                    continue;
                };
                let rs = (*rs).clone();
                self.scale_replica_set(&rs, size).await?;
            }
        }
        Ok(())
    }

    /// Scales a replica set if its size differs; whether it was scaled and the replica set.
    pub(super) async fn scale_replica_set_and_record_event(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
    ) -> Result<(bool, ReplicaSet), Error> {
        if rs_replicas(rs) == new_scale {
            return Ok((false, rs.clone()));
        }
        self.scale_replica_set(rs, new_scale).await
    }

    /// Sets a replica set's size and replica annotations when either differs, with a
    /// `ScalingReplicaSet` event for a new size.
    pub(super) async fn scale_replica_set(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
    ) -> Result<(bool, ReplicaSet), Error> {
        let old_scale = rs_replicas(rs);
        let size_needs_update = old_scale != new_scale;
        let desired = d_replicas(&self.d);
        let max = desired + max_surge(&self.d);
        if !size_needs_update && !replicas_annotations_need_update(rs, desired, max) {
            return Ok((false, rs.clone()));
        }
        let mut copy = rs.clone();
        set_rs_replicas(&mut copy, new_scale);
        set_replicas_annotations(&mut copy, desired, max);
        let updated = self.w.update_rs(&copy).await?;
        if size_needs_update {
            let direction = if old_scale < new_scale { "up" } else { "down" };
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!(
                    "Scaled {direction} replica set {} from {old_scale} to {new_scale}",
                    updated.metadata.name.as_deref().unwrap_or_default()
                ),
            );
        }
        Ok((size_needs_update, updated))
    }

    /// Deletes old replica sets beyond the revision history limit.
    pub(super) async fn cleanup_deployment(&mut self, old: &[ReplicaSet]) -> Result<(), Error> {
        let Some(limit) = revision_history_limit(&self.d) else {
            return Ok(());
        };
        for (namespace, name) in cleanup_candidates(old, limit) {
            tracing::debug!(deployment = self.name(), replica_set = %name, "cleaning up old replica set");
            match self.w.delete_rs(&namespace, &name).await {
                Ok(()) => {}
                Err(e) if crate::runtime::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Writes the computed status if it differs.
    async fn sync_deployment_status(
        &mut self,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<(), Error> {
        let status = calculate_status(&all_of(old, new), new, &self.d, self.now);
        if normalize_status(&status) == normalize_status(&self.d.status.clone().unwrap_or_default())
        {
            return Ok(());
        }
        self.d.status = Some(status);
        self.update_status().await
    }
}
