//! The `apiextensions.k8s.io/v1` kinds: CustomResourceDefinitions. The custom resources a CRD
//! defines are declared at run time from it ([`crate::custom`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionCondition,
};

use super::{Resource, of, status, typed};
use crate::defaults as d;
use crate::strategy::{Hooks, StatusPolicy};
use crate::validation as v;

/// The finalizer with which a deleted CRD waits until its custom objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["crd", "crds"],
    categories: &["api-extensions"],
    subresources: &[status("CustomResourceDefinition")],
    strategy: || {
        typed::<CustomResourceDefinition>(Hooks {
            default: d::misc::default_crd,
            validate: v::crd::validate_crd,
            validate_update: v::crd::validate_crd_update,
            validate_status_update: v::crd::validate_crd_status_update,
            status: StatusPolicy::Subresource,
            generation: true,
            prepare_create: |crd| {
                // Upstream's strategy: the storage version is recorded as stored.
                crd.status.get_or_insert_default().stored_versions =
                    storage_version(crd).map(|v| vec![v]);
            },
            prepare_update: |crd, _, _| {
                if let Some(version) = storage_version(crd) {
                    let stored = crd
                        .status
                        .get_or_insert_default()
                        .stored_versions
                        .get_or_insert_default();
                    if !stored.contains(&version) {
                        stored.push(version);
                    }
                }
            },
            // The first delete only marks the CRD: its objects are removed before it goes.
            deletion_held: |crd| crd.metadata.deletion_timestamp.is_none(),
            mark_terminating: |crd| {
                let finalizers = crd.metadata.finalizers.get_or_insert_default();
                if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
                    finalizers.push(CLEANUP_FINALIZER.to_owned());
                }
                set_condition(
                    crd,
                    "Terminating",
                    "InstanceDeletionPending",
                    "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
                );
            },
            ..Hooks::plain()
        })
    },
    ..of::<CustomResourceDefinition>("customresourcedefinition")
}];

/// The name of the version marked as the storage version.
fn storage_version(crd: &CustomResourceDefinition) -> Option<String> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
}

/// Sets a true condition of `type_` (its transition time is the server's to fill in).
fn set_condition(crd: &mut CustomResourceDefinition, type_: &str, reason: &str, message: &str) {
    let conditions = crd
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != type_);
    conditions.push(CustomResourceDefinitionCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(crate::defaults::now()),
    });
}
