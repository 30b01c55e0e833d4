//! The server's own CustomResourceDefinition controllers, as upstream's apiextensions server
//! runs them in process: naming (which names a CRD may have, `NamesAccepted`), establishing
//! (`Established`, and the custom resources then served through the registries table) and the
//! finalizer (a deleted CRD's objects are deleted, then the CRD goes and its API with it).
//!
//! Each pass looks at every CRD; a pass runs on every change of a CRD, and every few seconds
//! while one is being deleted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::catalog::{self, CLEANUP_FINALIZER};
use capstan_api::custom;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionCondition, CustomResourceDefinitionNames,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::task::JoinHandle;

use crate::registry::{DeleteOptions, ListOptions, Registries, Registry, WriteOptions};
use crate::status::ApiError;

/// How often the pass runs without a change (to retry deletions held by finalizers).
const RESYNC: Duration = Duration::from_secs(2);

/// Starts the controllers over the table's CRD registry; they stop when the handle is aborted.
pub(crate) fn start(registries: Arc<Registries>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some(crds) = registries.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        else {
            return;
        };
        let mut changes = crate::registry::Changes::new(vec![crds.clone()]);
        loop {
            changes.changed(RESYNC).await;
            if let Err(error) = reconcile(&registries, &crds).await {
                tracing::warn!(error = %error.status().to_json(), "cannot reconcile custom resource definitions");
            }
        }
    })
}

/// One pass over every CRD.
pub(crate) async fn reconcile(registries: &Registries, crds: &Registry) -> Result<(), ApiError> {
    let listed = crds.list(None, &ListOptions::default()).await?;
    let mut all: Vec<CustomResourceDefinition> = listed
        .items
        .iter()
        .filter_map(|item| serde_json::from_value(item.object()).ok())
        .collect();
    // The older definition keeps a contested name, as upstream's naming controller decides.
    all.sort_by(|a, b| {
        let key = |c: &CustomResourceDefinition| {
            (
                c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                c.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let mut taken: Vec<(String, BTreeSet<String>)> = Vec::new();
    for crd in &all {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if crd.metadata.deletion_timestamp.is_some() {
            registries.set_custom_terminating(&name, true);
            finalize(registries, crds, crd).await?;
            continue;
        }
        let names = names_of(&crd.spec.names);
        let conflict = conflict(crd, &names, &taken);
        if conflict.is_none() {
            taken.push((crd.spec.group.clone(), names));
        }
        let mut desired = crd.clone();
        accept(&mut desired, conflict);
        if desired.status != crd.status {
            let body = serde_json::to_value(&desired).unwrap_or_default();
            crds.update(None, &name, body, Some("status"), &WriteOptions::default())
                .await?;
        }
        let declared = custom::declare(&desired);
        registries.set_custom(&name, &declared, || {
            crate::conversion::webhook_for(&declared, &registries.weak())
        });
    }
    let live: BTreeSet<String> = all.iter().filter_map(|c| c.metadata.name.clone()).collect();
    for served in registries.custom_definitions() {
        if !live.contains(&served) {
            registries.set_custom(&served, &[], || None);
        }
    }
    // Each group-version served has its local APIService, as upstream registers them.
    let served: BTreeSet<(String, String)> = registries
        .custom_resources()
        .iter()
        .map(|r| (r.group.to_owned(), r.version.to_owned()))
        .collect();
    crate::aggregator::sync_custom(registries, &served).await
}

/// Every name a CRD's spec claims in its group: plural, singular, short names, kind, list kind.
fn names_of(names: &CustomResourceDefinitionNames) -> BTreeSet<String> {
    [
        names.plural.clone(),
        names.singular.clone().unwrap_or_default(),
        names.kind.clone(),
        names.list_kind.clone().unwrap_or_default(),
    ]
    .into_iter()
    .chain(names.short_names.iter().flatten().cloned())
    .filter(|n| !n.is_empty())
    .collect()
}

/// Why `crd` may not have its names: an older CRD of its group or a built-in resource already
/// has one of them.
fn conflict(
    crd: &CustomResourceDefinition,
    names: &BTreeSet<String>,
    taken: &[(String, BTreeSet<String>)],
) -> Option<(&'static str, String)> {
    let group = crd.spec.group.as_str();
    let plural = crd.spec.names.plural.as_str();
    let builtin = catalog::resources().any(|r| r.group == group && r.plural == plural);
    let older = taken
        .iter()
        .filter(|(g, _)| g == group)
        .find_map(|(_, used)| names.intersection(used).next().cloned());
    match (builtin, older) {
        (true, _) => Some(("PluralConflict", format!("{plural:?} is already in use"))),
        (false, Some(name)) if name == plural => {
            Some(("PluralConflict", format!("{name:?} is already in use")))
        }
        (false, Some(name)) => Some(("NameConflict", format!("{name:?} is already in use"))),
        (false, None) => None,
    }
}

/// The status upstream's naming and establishing controllers give `crd`: its names accepted
/// and the CRD established when they do not conflict, else `NamesAccepted` false with why.
fn accept(crd: &mut CustomResourceDefinition, conflict: Option<(&'static str, String)>) {
    let status = crd.status.get_or_insert_default();
    match conflict {
        None => {
            status.accepted_names = Some(crd.spec.names.clone());
            set(
                status,
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
            );
            set(
                status,
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            );
        }
        Some((reason, message)) => {
            set(status, "NamesAccepted", "False", reason, &message);
            if status.accepted_names.is_none() {
                set(
                    status,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
    }
}

/// Sets a condition, keeping its transition time when its status does not change.
fn set(
    status: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
) {
    let conditions = status.conditions.get_or_insert_default();
    let since = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == value)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    let condition = CustomResourceDefinitionCondition {
        type_: type_.to_owned(),
        status: value.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(since),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// Upstream's finalizer controller for a deleted CRD: deletes every object of it; once none is
/// left, records so and drops the cleanup finalizer, and the CRD and its API go.
async fn finalize(
    registries: &Registries,
    crds: &Registry,
    crd: &CustomResourceDefinition,
) -> Result<(), ApiError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let holds = crd
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CLEANUP_FINALIZER);
    if !holds {
        return Ok(());
    }
    let storage = crd.spec.versions.iter().find(|v| v.storage);
    let registry =
        storage.and_then(|v| registries.get(&crd.spec.group, &v.name, &crd.spec.names.plural));
    let mut left = 0;
    if let Some(registry) = registry {
        let listed = registry.list(None, &ListOptions::default()).await?;
        for item in &listed.items {
            let object = item.object();
            let meta = &object["metadata"];
            let namespace = meta["namespace"].as_str().filter(|ns| !ns.is_empty());
            let object_name = meta["name"].as_str().unwrap_or_default();
            left += 1;
            if meta.get("deletionTimestamp").is_none() {
                match registry
                    .delete(namespace, object_name, &DeleteOptions::default())
                    .await
                {
                    Ok(crate::registry::Deleted::Gone(_)) => left -= 1,
                    Ok(crate::registry::Deleted::Pending(_)) => {}
                    Err(error) if error.status().code() == 404 => left -= 1,
                    Err(error) => return Err(error),
                }
            }
        }
    }
    let mut desired = crd.clone();
    let status = desired.status.get_or_insert_default();
    if left > 0 {
        set(
            status,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
        if desired.status != crd.status {
            let body = serde_json::to_value(&desired).unwrap_or_default();
            crds.update(None, &name, body, Some("status"), &WriteOptions::default())
                .await?;
        }
        return Ok(());
    }
    set(
        status,
        "Terminating",
        "False",
        "InstanceDeletionCompleted",
        "removed all instances",
    );
    let body = serde_json::to_value(&desired).unwrap_or_default();
    let written = crds
        .update(None, &name, body, Some("status"), &WriteOptions::default())
        .await?;
    let mut last = written.object;
    if let Some(finalizers) = last["metadata"]["finalizers"].as_array_mut() {
        finalizers.retain(|f| f.as_str() != Some(CLEANUP_FINALIZER));
    }
    registries.set_custom(&name, &[], || None);
    crds.update(None, &name, last, None, &WriteOptions::default())
        .await?;
    Ok(())
}
