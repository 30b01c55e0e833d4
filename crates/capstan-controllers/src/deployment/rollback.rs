//! Rollback through the deprecated `deprecated.deployment.rollback.to` annotation (what the
//! old `extensions/v1beta1` and `apps/v1beta1` `spec.rollbackTo` round-trips to). kubectl's
//! `rollout undo` patches the template client-side instead, which needs nothing here beyond
//! the revision logic of [`super::sync`]: the old replica set whose template matches becomes
//! the new one and its revision is raised above the others.

use capstan_client::events::EventType;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::Writes;
use super::sync::{Syncer, quote};
use super::util::*;
use crate::runtime::Error;

/// The revision asked for by the rollback annotation (0: the previous one), if any.
pub fn rollback_to(d: &Deployment) -> Option<i64> {
    d.metadata
        .annotations
        .as_ref()?
        .get(ROLLBACK_TO_ANNOTATION)
        .filter(|v| !v.is_empty())?
        .parse()
        .ok()
}

/// Replaces the deployment's template (without the hash label) and copyable annotations with
/// the replica set's; whether anything changed (upstream's `rollbackToTemplate` decision).
pub fn roll_back_template(d: &mut Deployment, rs: &ReplicaSet) -> bool {
    let template = rs_template(rs).into_owned();
    if equal_ignore_hash(&spec(d).template, &template) {
        return false;
    }
    let mut template = template;
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
    }
    d.spec.get_or_insert_with(Default::default).template = template;
    set_deployment_annotations_to(d, rs);
    true
}

impl<W: Writes> Syncer<'_, W> {
    /// Rolls back to the annotated revision and clears the annotation in any case.
    pub(super) async fn rollback(&mut self, mut rs_list: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, old) = self
            .get_all_replica_sets_and_sync_revision(&mut rs_list, true)
            .await?;
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let mut target = rollback_to(&self.d).unwrap_or(0);
        if target == 0 {
            target = last_revision(all.iter().copied());
            if target == 0 {
                self.event(
                    EventType::Warning,
                    ROLLBACK_REVISION_NOT_FOUND,
                    "Unable to find last revision.".to_owned(),
                );
                return self.update_and_clear_rollback_to().await;
            }
        }
        let found = all
            .iter()
            .find(|rs| revision(rs).is_ok_and(|v| v == target))
            .map(|rs| (*rs).clone());
        let Some(rs) = found else {
            self.event(
                EventType::Warning,
                ROLLBACK_REVISION_NOT_FOUND,
                "Unable to find the revision to rollback to.".to_owned(),
            );
            return self.update_and_clear_rollback_to().await;
        };
        let name = self.d.metadata.name.clone().unwrap_or_default();
        let performed = roll_back_template(&mut self.d, &rs);
        if !performed {
            self.event(
                EventType::Warning,
                ROLLBACK_TEMPLATE_UNCHANGED,
                format!(
                    "The rollback revision contains the same template as current deployment {}",
                    quote(&name)
                ),
            );
        }
        self.update_and_clear_rollback_to().await?;
        if performed {
            self.event(
                EventType::Normal,
                ROLLBACK_DONE,
                format!(
                    "Rolled back deployment {} to revision {target}",
                    quote(&name)
                ),
            );
        }
        Ok(())
    }

    async fn update_and_clear_rollback_to(&mut self) -> Result<(), Error> {
        if let Some(annotations) = self.d.metadata.annotations.as_mut() {
            annotations.remove(ROLLBACK_TO_ANNOTATION);
        }
        self.d = self.w.update(&self.d).await?;
        Ok(())
    }
}
