//! Adoption and release of replica sets (upstream's `ClaimReplicaSets` in
//! `controller_ref_manager.go`): a deployment owns the replica sets its selector matches and
//! that carry its controller reference, adopts matching orphans (after checking with the API
//! that it is not being deleted) and releases owned ones whose labels stopped matching.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::core::Selector;

use super::sync::controller_ref;
use super::{Writes, selector_of};
use crate::pods;
use crate::runtime::Error;

/// What to do with one replica set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Ours already.
    Owned,
    /// Not ours and not to be taken.
    Ignore,
    /// An orphan to adopt.
    Adopt,
    /// Ours but no longer matching: let it go.
    Release,
}

/// Upstream's `ClaimObject` decision for one replica set (the shared claim rules).
pub fn claim_decision(d: &Deployment, selector: &Selector, rs: &ReplicaSet) -> Claim {
    if rs.metadata.namespace != d.metadata.namespace {
        return Claim::Ignore;
    }
    let claims = pods::claim(&d.metadata, selector, &[rs]);
    if !claims.owned.is_empty() {
        Claim::Owned
    } else if !claims.adopt.is_empty() {
        Claim::Adopt
    } else if !claims.release.is_empty() {
        Claim::Release
    } else {
        Claim::Ignore
    }
}

fn adopt_patch(d: &Deployment, rs: &ReplicaSet) -> serde_json::Value {
    pods::adopt_patch(&controller_ref(d), rs.metadata.uid.as_deref())
}

fn release_patch(d: &Deployment, rs: &ReplicaSet) -> serde_json::Value {
    pods::release_patch(d.metadata.uid.as_deref(), rs.metadata.uid.as_deref())
}

fn api_error_is(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code)
}

/// The replica sets of the namespace the deployment manages, adopting and releasing as needed.
/// Failures are collected; the first is returned after every replica set was tried.
pub async fn claim_replica_sets<W: Writes>(
    w: &W,
    d: &Deployment,
    replica_sets: Vec<ReplicaSet>,
) -> Result<Vec<ReplicaSet>, Error> {
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let selector = selector_of(d).map_err(|e| {
        Error::Invalid(format!(
            "deployment {namespace}/{name} has invalid label selector: {e}"
        ))
    })?;
    let mut claimed = Vec::new();
    let mut errors: Vec<Error> = Vec::new();
    // Whether the deployment may adopt, asked of the API once (upstream's
    // RecheckDeletionTimestamp).
    let mut can_adopt: Option<Result<(), String>> = None;
    for rs in replica_sets {
        let rs_name = rs.metadata.name.clone().unwrap_or_default();
        match claim_decision(d, &selector, &rs) {
            Claim::Owned => claimed.push(rs),
            Claim::Ignore => {}
            Claim::Release => {
                tracing::debug!(deployment = %name, replica_set = %rs_name, "releasing replica set");
                match w
                    .patch_rs(&namespace, &rs_name, release_patch(d, &rs))
                    .await
                {
                    Ok(()) => {}
                    Err(e) if api_error_is(&e, 404) || api_error_is(&e, 422) => {}
                    Err(e) => errors.push(e.into()),
                }
            }
            Claim::Adopt => {
                if can_adopt.is_none() {
                    can_adopt = Some(match w.get_deployment(&namespace, &name).await {
                        Ok(fresh) if fresh.metadata.uid != d.metadata.uid => Err(format!(
                            "original Deployment {namespace}/{name} is gone: got uid {}, wanted {}",
                            fresh.metadata.uid.unwrap_or_default(),
                            d.metadata.uid.clone().unwrap_or_default()
                        )),
                        Ok(fresh) => match fresh.metadata.deletion_timestamp {
                            Some(at) => Err(format!(
                                "{namespace}/{name} has just been deleted at {}",
                                at.0
                            )),
                            None => Ok(()),
                        },
                        Err(e) => Err(super::sync::error_message(&e)),
                    });
                }
                if let Some(Err(reason)) = &can_adopt {
                    errors.push(Error::Invalid(format!(
                        "can't adopt ReplicaSet {namespace}/{rs_name} ({}): {reason}",
                        rs.metadata.uid.clone().unwrap_or_default()
                    )));
                    continue;
                }
                tracing::debug!(deployment = %name, replica_set = %rs_name, "adopting replica set");
                match w.patch_rs(&namespace, &rs_name, adopt_patch(d, &rs)).await {
                    Ok(()) => claimed.push(rs),
                    Err(e) if api_error_is(&e, 404) => {}
                    Err(e) => errors.push(e.into()),
                }
            }
        }
    }
    match errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(claimed),
    }
}
