//! The patch strategy of every field of the built-in types that is not merged the default way,
//! keyed by OpenAPI definition name and JSON field name. Upstream declares these as Go struct
//! tags (`patchStrategy`, `patchMergeKey`) and publishes them in its OpenAPI documents as the
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` extensions; this table is
//! Capstan's single source for both uses: [`annotate_definitions`] writes it into schema
//! definitions, which is what the strategic merge patch walker reads and what an OpenAPI
//! document needs.
//!
//! Every field absent from the table has no strategy: maps merge key by key, lists are replaced.

use serde_json::{Map, Value};

/// The OpenAPI extension naming a field's patch strategy.
pub const PATCH_STRATEGY_EXTENSION: &str = "x-kubernetes-patch-strategy";

/// The OpenAPI extension naming the key that identifies the items of a merged list.
pub const PATCH_MERGE_KEY_EXTENSION: &str = "x-kubernetes-patch-merge-key";

/// How a strategic merge patch treats one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchStrategy {
    /// A list merged item by item (by the merge key for lists of objects, by value for lists of
    /// scalars) instead of replaced.
    Merge,
    /// An object replaced whole instead of merged key by key.
    Replace,
    /// An object whose patch may carry a `$retainKeys` list (clients send one when the object is
    /// a union of which only one member may be set).
    RetainKeys,
    /// Both [`PatchStrategy::Merge`] and [`PatchStrategy::RetainKeys`]: a merged list of unions.
    MergeRetainKeys,
}

impl PatchStrategy {
    /// The value of `x-kubernetes-patch-strategy`, as upstream writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchStrategy::Merge => "merge",
            PatchStrategy::Replace => "replace",
            PatchStrategy::RetainKeys => "retainKeys",
            PatchStrategy::MergeRetainKeys => "merge,retainKeys",
        }
    }
}

/// The patch metadata of one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldPatch {
    /// The OpenAPI definition name of the type holding the field, e.g.
    /// `io.k8s.api.core.v1.PodSpec`.
    pub definition: &'static str,
    /// The field's JSON name, e.g. `containers`.
    pub field: &'static str,
    /// How the field is patched.
    pub strategy: PatchStrategy,
    /// For a merged list of objects, the field that identifies an item.
    pub merge_key: Option<&'static str>,
}

impl FieldPatch {
    /// The OpenAPI extensions that publish this metadata, as (name, value) pairs.
    pub fn openapi_extensions(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        std::iter::once((PATCH_STRATEGY_EXTENSION, self.strategy.as_str()))
            .chain(self.merge_key.map(|key| (PATCH_MERGE_KEY_EXTENSION, key)))
    }
}

const fn merge(definition: &'static str, field: &'static str, key: &'static str) -> FieldPatch {
    FieldPatch {
        definition,
        field,
        strategy: PatchStrategy::Merge,
        merge_key: Some(key),
    }
}

const fn merge_retain_keys(
    definition: &'static str,
    field: &'static str,
    key: &'static str,
) -> FieldPatch {
    FieldPatch {
        definition,
        field,
        strategy: PatchStrategy::MergeRetainKeys,
        merge_key: Some(key),
    }
}

const fn merge_scalars(definition: &'static str, field: &'static str) -> FieldPatch {
    FieldPatch {
        definition,
        field,
        strategy: PatchStrategy::Merge,
        merge_key: None,
    }
}

const fn plain(
    definition: &'static str,
    field: &'static str,
    strategy: PatchStrategy,
) -> FieldPatch {
    FieldPatch {
        definition,
        field,
        strategy,
        merge_key: None,
    }
}

/// Every field of the generally available (v1 and autoscaling/v2) built-in types that carries a
/// patch strategy at Kubernetes 1.33, in definition order.
pub static FIELD_PATCHES: &[FieldPatch] = &[
    // admissionregistration.k8s.io/v1
    merge(
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "matchConditions",
        "name",
    ),
    merge(
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        "webhooks",
        "name",
    ),
    merge(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "matchConditions",
        "name",
    ),
    merge(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "variables",
        "name",
    ),
    merge(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "matchConditions",
        "name",
    ),
    merge(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        "name",
    ),
    // apps/v1
    merge("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "type"),
    plain(
        "io.k8s.api.apps.v1.DeploymentSpec",
        "strategy",
        PatchStrategy::RetainKeys,
    ),
    merge("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "type"),
    merge("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "type"),
    merge("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "type"),
    // autoscaling/v2
    merge(
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "conditions",
        "type",
    ),
    // batch/v1
    merge("io.k8s.api.batch.v1.JobStatus", "conditions", "type"),
    // core/v1
    merge("io.k8s.api.core.v1.ComponentStatus", "conditions", "type"),
    merge("io.k8s.api.core.v1.Container", "env", "name"),
    merge("io.k8s.api.core.v1.Container", "ports", "containerPort"),
    merge(
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        "devicePath",
    ),
    merge("io.k8s.api.core.v1.Container", "volumeMounts", "mountPath"),
    merge(
        "io.k8s.api.core.v1.ContainerStatus",
        "allocatedResourcesStatus",
        "name",
    ),
    merge(
        "io.k8s.api.core.v1.ContainerStatus",
        "volumeMounts",
        "mountPath",
    ),
    merge("io.k8s.api.core.v1.EphemeralContainer", "env", "name"),
    merge(
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        "containerPort",
    ),
    merge(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        "devicePath",
    ),
    merge(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        "mountPath",
    ),
    merge("io.k8s.api.core.v1.NamespaceStatus", "conditions", "type"),
    merge_scalars("io.k8s.api.core.v1.NodeSpec", "podCIDRs"),
    merge("io.k8s.api.core.v1.NodeStatus", "addresses", "type"),
    merge("io.k8s.api.core.v1.NodeStatus", "conditions", "type"),
    merge(
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "conditions",
        "type",
    ),
    merge("io.k8s.api.core.v1.PodSpec", "containers", "name"),
    merge("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "name"),
    merge("io.k8s.api.core.v1.PodSpec", "hostAliases", "ip"),
    merge("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "name"),
    merge("io.k8s.api.core.v1.PodSpec", "initContainers", "name"),
    merge_retain_keys("io.k8s.api.core.v1.PodSpec", "resourceClaims", "name"),
    merge("io.k8s.api.core.v1.PodSpec", "schedulingGates", "name"),
    merge(
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        "topologyKey",
    ),
    merge_retain_keys("io.k8s.api.core.v1.PodSpec", "volumes", "name"),
    merge("io.k8s.api.core.v1.PodStatus", "conditions", "type"),
    merge("io.k8s.api.core.v1.PodStatus", "hostIPs", "ip"),
    merge("io.k8s.api.core.v1.PodStatus", "podIPs", "ip"),
    merge_retain_keys(
        "io.k8s.api.core.v1.PodStatus",
        "resourceClaimStatuses",
        "name",
    ),
    merge(
        "io.k8s.api.core.v1.ReplicationControllerStatus",
        "conditions",
        "type",
    ),
    merge("io.k8s.api.core.v1.ServiceAccount", "secrets", "name"),
    merge("io.k8s.api.core.v1.ServiceSpec", "ports", "port"),
    merge("io.k8s.api.core.v1.ServiceStatus", "conditions", "type"),
    // flowcontrol.apiserver.k8s.io/v1
    merge(
        "io.k8s.api.flowcontrol.v1.FlowSchemaStatus",
        "conditions",
        "type",
    ),
    merge(
        "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus",
        "conditions",
        "type",
    ),
    // networking.k8s.io/v1
    merge(
        "io.k8s.api.networking.v1.ServiceCIDRStatus",
        "conditions",
        "type",
    ),
    // policy/v1
    plain(
        "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
        "selector",
        PatchStrategy::Replace,
    ),
    merge(
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        "type",
    ),
    // storage.k8s.io/v1
    merge("io.k8s.api.storage.v1.CSINodeSpec", "drivers", "name"),
    // meta/v1: every object's metadata
    merge_scalars(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
    ),
    merge(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        "uid",
    ),
];

/// The patch metadata of `field` of the type named `definition`, if it has any.
pub fn field_patch(definition: &str, field: &str) -> Option<&'static FieldPatch> {
    FIELD_PATCHES
        .iter()
        .find(|entry| entry.definition == definition && entry.field == field)
}

/// Writes the `x-kubernetes-patch-*` extensions of [`FIELD_PATCHES`] into the property schemas
/// of `definitions` (a map from definition name to schema, as in an OpenAPI document's
/// `components.schemas` or a JSON Schema's `$defs`). Definitions and properties the table does
/// not name are left alone, so are table entries whose type is absent.
pub fn annotate_definitions(definitions: &mut Map<String, Value>) {
    for entry in FIELD_PATCHES {
        let property = definitions
            .get_mut(entry.definition)
            .and_then(|schema| schema.get_mut("properties"))
            .and_then(|properties| properties.get_mut(entry.field))
            .and_then(Value::as_object_mut);
        if let Some(property) = property {
            for (name, value) in entry.openapi_extensions() {
                property.insert(name.to_owned(), Value::String(value.to_owned()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_field_once_with_well_formed_metadata() {
        for (index, entry) in FIELD_PATCHES.iter().enumerate() {
            assert!(
                FIELD_PATCHES[..index]
                    .iter()
                    .all(|other| (other.definition, other.field) != (entry.definition, entry.field)),
                "{} {} listed twice",
                entry.definition,
                entry.field
            );
            assert!(entry.definition.starts_with("io.k8s."), "{entry:?}");
            // Only merged lists have merge keys.
            if entry.merge_key.is_some() {
                assert!(
                    matches!(
                        entry.strategy,
                        PatchStrategy::Merge | PatchStrategy::MergeRetainKeys
                    ),
                    "{entry:?}"
                );
            }
        }
        assert_eq!(
            field_patch("io.k8s.api.core.v1.PodSpec", "containers").map(|entry| entry.merge_key),
            Some(Some("name"))
        );
        assert_eq!(field_patch("io.k8s.api.core.v1.PodSpec", "args"), None);
        let extensions: Vec<_> = field_patch("io.k8s.api.core.v1.PodSpec", "volumes")
            .into_iter()
            .flat_map(FieldPatch::openapi_extensions)
            .collect();
        assert_eq!(
            extensions,
            [
                (PATCH_STRATEGY_EXTENSION, "merge,retainKeys"),
                (PATCH_MERGE_KEY_EXTENSION, "name")
            ]
        );
        let strategy: Vec<_> = field_patch("io.k8s.api.apps.v1.DeploymentSpec", "strategy")
            .into_iter()
            .flat_map(FieldPatch::openapi_extensions)
            .collect();
        assert_eq!(strategy, [(PATCH_STRATEGY_EXTENSION, "retainKeys")]);
    }

    #[test]
    fn annotating_definitions_adds_the_extensions_to_named_properties_only() {
        let mut definitions: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/$defs/io.k8s.api.core.v1.Container"}},
                "nodeName": {"type": "string"}}},
            "io.k8s.api.core.v1.Other": {"type": "object"}
        }))
        .unwrap();
        annotate_definitions(&mut definitions);
        assert_eq!(
            serde_json::Value::Object(definitions),
            serde_json::json!({
                "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                    "containers": {"type": "array", "items": {"$ref": "#/$defs/io.k8s.api.core.v1.Container"},
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "nodeName": {"type": "string"}}},
                "io.k8s.api.core.v1.Other": {"type": "object"}
            })
        );
    }
}
