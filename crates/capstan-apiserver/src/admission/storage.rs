//! Upstream's storage admission plugins:
//!
//! - **DefaultStorageClass**: a new claim that names no class (neither
//!   `spec.storageClassName`, not even `""`, nor the beta annotation) gets the default
//!   StorageClass (`storageclass.kubernetes.io/is-default-class: "true"`; the newest when
//!   several are marked), or stays without one when there is none.
//! - **StorageObjectInUseProtection**: new claims get the `kubernetes.io/pvc-protection`
//!   finalizer and new volumes `kubernetes.io/pv-protection` (the protection controllers
//!   remove them once nothing uses the object).
//! - **PersistentVolumeClaimResize**: a claim's storage request may grow only when it is bound
//!   and its class allows expansion (`allowVolumeExpansion: true`); otherwise upstream's 403.

use std::sync::Arc;

use capstan_api::fit::volume::{self as fit, PV_PROTECTION_FINALIZER, PVC_PROTECTION_FINALIZER};
use capstan_api::quantity::Quantity;
use capstan_api::{GroupResource, StatusError};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::{Mutation, Operation, Plugin, Review, Validation, Verdict};
use crate::registry::{ListOptions, Registry};
use crate::status::ApiError;

/// The StorageClass named `name`: from the watch cache, else (just made) from the store.
async fn class_named(classes: &Registry, name: &str) -> Option<StorageClass> {
    let cached = match classes.read(None, name, Some("0")).await {
        Ok(found) => found,
        Err(_) => classes.read(None, name, None).await.ok()?,
    };
    serde_json::from_value(cached.object()).ok()
}

/// DefaultStorageClass.
#[derive(Debug)]
pub(crate) struct DefaultStorageClass {
    classes: Arc<Registry>,
}

impl DefaultStorageClass {
    /// The plugin reading StorageClasses from `classes`.
    pub(crate) fn new(classes: Arc<Registry>) -> Self {
        DefaultStorageClass { classes }
    }

    async fn default_class_name(&self) -> Result<Option<String>, ApiError> {
        let options = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let list = self.classes.list(None, &options).await?;
        let classes: Vec<StorageClass> = list
            .items
            .iter()
            .filter_map(|item| serde_json::from_value(item.object()).ok())
            .collect();
        Ok(fit::default_class(&classes).and_then(|c| c.metadata.name.clone()))
    }
}

/// Whether a claim names a class, even the empty one.
fn names_class(claim: &Value) -> bool {
    claim
        .pointer("/spec/storageClassName")
        .is_some_and(|c| !c.is_null())
        || claim
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(fit::ANN_BETA_STORAGE_CLASS))
            .is_some()
}

impl Plugin for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            let Some(claim) = object else { return Ok(()) };
            if !attrs.creates_core("persistentvolumeclaims") || names_class(claim) {
                return Ok(());
            }
            if let Some(name) = self.default_class_name().await?
                && let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.insert("storageClassName".to_owned(), json!(name));
            }
            Ok(())
        })
    }
}

/// StorageObjectInUseProtection.
#[derive(Debug)]
pub(crate) struct InUseProtection;

/// Adds `finalizer` to the object's finalizers unless it is there.
fn add_finalizer(object: &mut Value, finalizer: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let finalizers = metadata.entry("finalizers").or_insert_with(|| json!([]));
    if finalizers.is_null() {
        *finalizers = json!([]);
    }
    if let Some(list) = finalizers.as_array_mut()
        && !list.iter().any(|f| f == finalizer)
    {
        list.push(json!(finalizer));
    }
}

impl Plugin for InUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            let Some(object) = object else { return Ok(()) };
            if attrs.creates_core("persistentvolumeclaims") {
                add_finalizer(object, PVC_PROTECTION_FINALIZER);
            } else if attrs.creates_core("persistentvolumes") {
                add_finalizer(object, PV_PROTECTION_FINALIZER);
            }
            Ok(())
        })
    }
}

/// PersistentVolumeClaimResize.
#[derive(Debug)]
pub(crate) struct ClaimResize {
    classes: Arc<Registry>,
}

impl ClaimResize {
    /// The plugin reading StorageClasses from `classes`.
    pub(crate) fn new(classes: Arc<Registry>) -> Self {
        ClaimResize { classes }
    }

    /// Whether the claim's class lets it grow (upstream's `allowResize`).
    async fn allows(&self, claim: &Value, old: &Value) -> bool {
        let class = |c: &Value| {
            serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(c.clone())
                .map(|c| fit::claim_class(&c).to_owned())
                .unwrap_or_default()
        };
        let name = class(claim);
        if name.is_empty() || name != class(old) {
            return false;
        }
        class_named(&self.classes, &name)
            .await
            .and_then(|c| c.allow_volume_expansion)
            .unwrap_or(false)
    }
}

fn requested(claim: &Value) -> Option<Quantity> {
    claim
        .pointer("/spec/resources/requests/storage")
        .and_then(Value::as_str)
        .and_then(|q| Quantity::parse(q).ok())
}

impl Plugin for ClaimResize {
    fn name(&self) -> &'static str {
        "PersistentVolumeClaimResize"
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            let claims = attrs.resource.group.is_empty()
                && attrs.resource.plural == "persistentvolumeclaims"
                && attrs.subresource.is_empty();
            let (true, Operation::Update, Some(old)) = (claims, attrs.operation, old) else {
                return Ok(());
            };
            let (Some(new_size), Some(old_size)) = (requested(object), requested(old)) else {
                return Ok(());
            };
            if new_size <= old_size {
                return Ok(());
            }
            let forbidden = |reason: &str| -> ApiError {
                StatusError::forbidden(
                    GroupResource::new("", "persistentvolumeclaims"),
                    attrs.name,
                    reason,
                )
                .into()
            };
            if old.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
                return Err(forbidden(
                    "Only bound persistent volume claims can be expanded",
                ));
            }
            if !self.allows(object, old).await {
                return Err(forbidden(
                    "only dynamically provisioned pvc can be resized and the storageclass that \
                     provisions the pvc must support resize",
                ));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_named_even_empty_is_kept() {
        assert!(names_class(&json!({"spec": {"storageClassName": ""}})));
        assert!(names_class(&json!({"spec": {"storageClassName": "gold"}})));
        assert!(names_class(
            &json!({"metadata": {"annotations": {fit::ANN_BETA_STORAGE_CLASS: "x"}}, "spec": {}})
        ));
        assert!(!names_class(&json!({"spec": {}})));
        assert!(!names_class(&json!({"spec": {"storageClassName": null}})));
    }

    #[test]
    fn finalizers_are_added_once() {
        let mut claim = json!({"metadata": {"name": "c"}});
        add_finalizer(&mut claim, PVC_PROTECTION_FINALIZER);
        add_finalizer(&mut claim, PVC_PROTECTION_FINALIZER);
        assert_eq!(
            claim["metadata"]["finalizers"],
            json!([PVC_PROTECTION_FINALIZER])
        );
        let mut volume = json!({"metadata": {"name": "v", "finalizers": ["mine"]}});
        add_finalizer(&mut volume, PV_PROTECTION_FINALIZER);
        assert_eq!(
            volume["metadata"]["finalizers"],
            json!(["mine", PV_PROTECTION_FINALIZER])
        );
    }
}
