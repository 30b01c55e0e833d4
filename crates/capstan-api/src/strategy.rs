//! What each resource tells the generic registry: how to decode and default an object, what to
//! reset on create and update, how to validate, which fields selectors may use, and how deletion
//! behaves. Everything else (storage, concurrency, metadata, errors) is the registry's.
//!
//! Most strategies are a [`Typed`] strategy: the object is decoded once into its `k8s-openapi`
//! type (which drops fields the type does not know, as upstream's decoder prunes them, and lets
//! the registry report those fields under `fieldValidation`), defaulted and validated as that
//! type, and encoded back to JSON.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::convert::Conversion;
use crate::field::FieldError;
use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How the main endpoint and the `status` subresource share an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusPolicy {
    /// The kind has no status, or its status is written with the object (ConfigMap, Event).
    None,
    /// Writes to the object keep the stored status; writes to `/status` keep everything else.
    Subresource,
}

/// Why a body could not be decoded into its kind.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A field the type requires is absent (upstream reports this in validation, as 422).
    Missing {
        /// The path of the missing field, e.g. `spec.template.spec.containers[0].name`.
        path: String,
    },
    /// A field has the wrong type or shape (upstream answers 400).
    Invalid(String),
}

impl DecodeError {
    fn from_serde(error: serde_path_to_error::Error<serde_json::Error>) -> Self {
        let parent = error.path().to_string();
        let message = error.inner().to_string();
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            let path = if parent == "." || parent.is_empty() {
                field.to_owned()
            } else {
                format!("{parent}.{field}")
            };
            return DecodeError::Missing { path };
        }
        if parent == "." || parent.is_empty() {
            DecodeError::Invalid(message)
        } else {
            DecodeError::Invalid(format!("{parent}: {message}"))
        }
    }
}

/// A resource's strategy.
pub trait Strategy: Send + Sync + 'static {
    /// Decodes a request body into the canonical JSON of this kind: applies defaults and drops
    /// fields the kind does not have, returning their paths (`spec.foo`) for field validation.
    fn decode(&self, object: &Value) -> Result<(Value, Vec<String>), DecodeError>;

    /// Resets what clients may not set on create (status, generation), and sets what the
    /// kind sets on every new object.
    fn prepare_for_create(&self, object: &mut Value) {
        if self.status_policy() == StatusPolicy::Subresource
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if self.tracks_generation() {
            object["metadata"]["generation"] = 1.into();
        }
    }

    /// Kind-specific carry-over on update, after the registry has applied the status policy;
    /// `subresource` is the subresource written through (`None` for the object itself).
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value, _subresource: Option<&str>) {}

    /// Validates a new object; all errors at once.
    fn validate(&self, object: &Value) -> Vec<FieldError>;

    /// Validates an update of `old` into `new` through `subresource` (`None`: the object
    /// itself); all errors at once.
    fn validate_update(
        &self,
        new: &Value,
        old: &Value,
        subresource: Option<&str>,
    ) -> Vec<FieldError>;

    /// [`Strategy::validate_update`], and the warnings for a valid update (a custom
    /// resource's CEL rules that ratcheting let pass, which upstream reports as warnings).
    fn validate_update_warned(
        &self,
        new: &Value,
        old: &Value,
        subresource: Option<&str>,
    ) -> (Vec<FieldError>, Vec<String>) {
        (self.validate_update(new, old, subresource), Vec::new())
    }

    /// Whether the kind has a separately written status.
    fn status_policy(&self) -> StatusPolicy;

    /// Whether `metadata.generation` counts changes to the desired state.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// Whether a PUT of a missing object creates it.
    fn allow_create_on_update(&self) -> bool {
        false
    }

    /// Fields beyond `metadata.name` and `metadata.namespace` that field selectors may use,
    /// with their values for `object`, named as the hub version names them (every version of
    /// a resource shares one cache, which keeps these with each object).
    fn selectable_fields(&self, _object: &Value) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The hub's name for field selector label `label` of this version (upstream's field label
    /// conversion); `label` itself where the names agree.
    fn hub_field_label<'a>(&self, label: &'a str) -> &'a str {
        label
    }

    /// The names of the selectable fields (for errors on unsupported ones).
    fn selectable_field_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// The selectable field the watch cache indexes this kind's stored objects by (upstream's
    /// storage indexers and watch trigger: pods by `spec.nodeName`), named as stored; its
    /// value is read from the member path the dots separate.
    fn indexed_field(&self) -> Option<&'static str> {
        None
    }

    /// The grace period a delete without one uses, for kinds deleted gracefully (pods).
    fn default_grace_period(&self, _object: &Value) -> Option<i64> {
        None
    }

    /// Whether something other than `metadata.finalizers` still holds a deleted object (a
    /// namespace's `spec.finalizers`).
    fn deletion_held(&self, _object: &Value) -> bool {
        false
    }

    /// Marks an object whose deletion has begun (a namespace's `Terminating` phase).
    fn mark_terminating(&self, _object: &mut Value) {}

    /// Whether objects read from storage are defaulted again (custom resources whose schema
    /// has defaults: a default added to the schema later shows on objects stored before it,
    /// as upstream's storage decoding gives it).
    fn defaults_on_read(&self) -> bool {
        false
    }

    /// Fills in the defaults of an object read from storage (see
    /// [`Strategy::defaults_on_read`]).
    fn default_stored(&self, _object: &mut Value) {}

    /// Whether the stored object written as `json` may lack defaults
    /// [`Strategy::default_stored`] fills in; `false` lets a read skip decoding it.
    fn stored_needs_defaults(&self, _json: &[u8]) -> bool {
        true
    }

    /// The merge structure server-side apply and field management walk for this kind when it
    /// is not a built-in one (a custom resource's, from its schema); built-in kinds answer
    /// `None` and are found by kind.
    fn merge_type(&self) -> Option<crate::apply::schema::Type> {
        None
    }

    /// Whether a delete answers with the deleted object rather than a success `Status`
    /// (upstream's `ReturnDeletedObject`).
    fn returns_deleted_object(&self) -> bool {
        false
    }
}

/// Hooks a typed strategy runs on the `k8s-openapi` type of its kind.
pub struct Hooks<K> {
    /// Fills in defaults, as upstream's defaulting functions.
    pub default: fn(&mut K),
    /// What upstream's conversion from the served version to its internal form drops or folds
    /// (a Secret's `stringData` into `data`), run after defaulting and after unknown fields are
    /// found, so that a field the version has is never reported as unknown.
    pub internal: Option<fn(&mut K)>,
    /// Validates a new object.
    pub validate: fn(&K) -> Vec<FieldError>,
    /// Validates an update of the object itself (or its scale).
    pub validate_update: fn(&K, &K) -> Vec<FieldError>,
    /// Validates an update through `/status`, metadata rules included (upstream's status
    /// strategy); by default only the metadata rules.
    pub validate_status_update: fn(&K, &K) -> Vec<FieldError>,
    /// Validates an update through another subresource that writes the object (namespaces'
    /// `/finalize`, pods' `/ephemeralcontainers`, a pod's binding), named by the last argument;
    /// by default only the metadata rules.
    pub validate_subresource_update: fn(&K, &K, &str) -> Vec<FieldError>,
    /// The status policy.
    pub status: StatusPolicy,
    /// Whether a create may set the status although the kind has a status subresource (nodes:
    /// a kubelet registers with its status, as upstream's node strategy allows).
    pub status_on_create: bool,
    /// Whether generation is tracked.
    pub generation: bool,
    /// Whether PUT creates.
    pub create_on_update: bool,
    /// Selectable field names.
    pub field_names: &'static [&'static str],
    /// The selectable field the watch cache indexes objects by ([`Strategy::indexed_field`]).
    pub indexed_field: Option<&'static str>,
    /// Selectable field values.
    pub fields: fn(&K) -> Vec<(&'static str, String)>,
    /// The default grace period for a delete.
    pub grace_period: fn(&K) -> Option<i64>,
    /// Whether a delete answers with the object.
    pub return_deleted: bool,
    /// Whether the kind's own finalizers still hold a deleted object.
    pub deletion_held: fn(&K) -> bool,
    /// What the kind sets on every new object (after status and generation are reset).
    pub prepare_create: fn(&mut K),
    /// Kind-specific carry-over on update: new, old, subresource.
    pub prepare_update: fn(&mut K, &K, Option<&str>),
    /// What deletion marks on the object.
    pub mark_terminating: fn(&mut K),
}

/// The metadata rules every update obeys, whatever it writes through.
pub fn metadata_update<K: Metadata<Ty = ObjectMeta>>(new: &K, old: &K) -> Vec<FieldError> {
    crate::validation::validate_object_meta_update(
        new.metadata(),
        old.metadata(),
        &crate::field::Path::new("metadata"),
    )
}

impl<K: Metadata<Ty = ObjectMeta>> Hooks<K> {
    /// Hooks that default and validate nothing kind-specific.
    pub const fn plain() -> Self {
        Hooks {
            default: |_| {},
            internal: None,
            validate: |_| Vec::new(),
            validate_update: |_, _| Vec::new(),
            validate_status_update: metadata_update::<K>,
            validate_subresource_update: |new, old, _| metadata_update::<K>(new, old),
            status: StatusPolicy::None,
            status_on_create: false,
            generation: false,
            create_on_update: false,
            field_names: &[],
            indexed_field: None,
            fields: |_| Vec::new(),
            grace_period: |_| None,
            return_deleted: false,
            deletion_held: |_| false,
            prepare_create: |_| {},
            prepare_update: |_, _, _| {},
            mark_terminating: |_| {},
        }
    }

    /// Hooks of a kind a PUT may create (upstream's `AllowCreateOnUpdate`: endpoints, events,
    /// limit ranges, leases, endpoint slices, services, the RBAC kinds).
    pub const fn creatable_by_put() -> Self {
        Hooks {
            create_on_update: true,
            ..Hooks::plain()
        }
    }

    /// Hooks of a kind whose status is written through `/status` and whose generation counts
    /// spec changes (the workload kinds).
    pub const fn workload() -> Self {
        Hooks {
            status: StatusPolicy::Subresource,
            generation: true,
            ..Hooks::plain()
        }
    }

    /// Hooks of a kind with a status subresource but no generation.
    pub const fn with_status() -> Self {
        Hooks {
            status: StatusPolicy::Subresource,
            ..Hooks::plain()
        }
    }
}

/// A strategy over the `k8s-openapi` type `K`.
pub struct Typed<K> {
    hooks: Hooks<K>,
    kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for Hooks<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("status", &self.status)
            .field("generation", &self.generation)
            .field("create_on_update", &self.create_on_update)
            .field("field_names", &self.field_names)
            .field("return_deleted", &self.return_deleted)
            .finish_non_exhaustive()
    }
}

impl<K> std::fmt::Debug for Typed<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Typed")
            .field("kind", &std::any::type_name::<K>())
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl<K> Typed<K> {
    /// A strategy running `hooks`.
    pub fn new(hooks: Hooks<K>) -> Self {
        Typed {
            hooks,
            kind: PhantomData,
        }
    }
}

fn typed<K: DeserializeOwned>(object: &Value) -> Option<K> {
    K::deserialize(object).ok()
}

/// What a typed strategy needs of its `k8s-openapi` type (every resource type has it).
pub trait Kind:
    Serialize + DeserializeOwned + Clone + PartialEq + Metadata<Ty = ObjectMeta> + Send + Sync + 'static
{
}

impl<K> Kind for K where
    K: Serialize
        + DeserializeOwned
        + Clone
        + PartialEq
        + Metadata<Ty = ObjectMeta>
        + Send
        + Sync
        + 'static
{
}

impl<K: Kind> Strategy for Typed<K> {
    fn decode(&self, object: &Value) -> Result<(Value, Vec<String>), DecodeError> {
        let mut typed: K =
            serde_path_to_error::deserialize(object).map_err(DecodeError::from_serde)?;
        (self.hooks.default)(&mut typed);
        let encoded =
            serde_json::to_value(&typed).map_err(|e| DecodeError::Invalid(e.to_string()))?;
        let mut unknown = Vec::new();
        unknown_fields(object, &encoded, &mut String::new(), &mut unknown);
        let encoded = match self.hooks.internal {
            Some(internal) => {
                internal(&mut typed);
                serde_json::to_value(&typed).map_err(|e| DecodeError::Invalid(e.to_string()))?
            }
            None => encoded,
        };
        // In the form upstream's Go types give it (zero structs present, omitempty zeros
        // dropped), the form objects are stored, served and compared in; but the field
        // manager must still see an empty `managedFields` sent to clear them.
        let mut normalized = crate::gojson::normalize(&encoded);
        if let Some(managed) = encoded.pointer("/metadata/managedFields") {
            normalized["metadata"]["managedFields"] = managed.clone();
        }
        Ok((normalized, unknown))
    }

    fn validate(&self, object: &Value) -> Vec<FieldError> {
        typed::<K>(object).map_or_else(Vec::new, |k| (self.hooks.validate)(&k))
    }

    fn validate_update(
        &self,
        new: &Value,
        old: &Value,
        subresource: Option<&str>,
    ) -> Vec<FieldError> {
        let (Some(new), Some(old)) = (typed::<K>(new), typed::<K>(old)) else {
            return Vec::new();
        };
        match subresource {
            // Writes of the desired state (the object, its scale) get the kind's full rules.
            None | Some("scale") => (self.hooks.validate_update)(&new, &old),
            Some("status") => (self.hooks.validate_status_update)(&new, &old),
            Some(other) => (self.hooks.validate_subresource_update)(&new, &old, other),
        }
    }

    fn status_policy(&self) -> StatusPolicy {
        self.hooks.status
    }

    fn tracks_generation(&self) -> bool {
        self.hooks.generation
    }

    fn allow_create_on_update(&self) -> bool {
        self.hooks.create_on_update
    }

    fn selectable_fields(&self, object: &Value) -> Vec<(&'static str, String)> {
        typed::<K>(object).map_or_else(Vec::new, |k| (self.hooks.fields)(&k))
    }

    fn selectable_field_names(&self) -> &'static [&'static str] {
        self.hooks.field_names
    }

    fn indexed_field(&self) -> Option<&'static str> {
        self.hooks.indexed_field
    }

    fn default_grace_period(&self, object: &Value) -> Option<i64> {
        typed::<K>(object).and_then(|k| (self.hooks.grace_period)(&k))
    }

    fn returns_deleted_object(&self) -> bool {
        self.hooks.return_deleted
    }

    fn deletion_held(&self, object: &Value) -> bool {
        typed::<K>(object).is_some_and(|k| (self.hooks.deletion_held)(&k))
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if self.hooks.status == StatusPolicy::Subresource
            && !self.hooks.status_on_create
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if self.hooks.generation {
            object["metadata"]["generation"] = 1.into();
        }
        rewrite::<K>(object, |k| (self.hooks.prepare_create)(k));
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value, subresource: Option<&str>) {
        if let Some(old) = typed::<K>(old) {
            rewrite::<K>(new, |k| (self.hooks.prepare_update)(k, &old, subresource));
        }
    }

    fn mark_terminating(&self, object: &mut Value) {
        rewrite::<K>(object, |k| (self.hooks.mark_terminating)(k));
    }
}

/// The strategy of a version served by conversion: bodies are decoded and defaulted as the
/// served version, then every rule (preparation, validation, selectable fields, deletion) is the
/// hub's, run on the object converted to the hub and converted back, as upstream runs its
/// strategies on the internal version. Validation errors therefore name hub paths, as
/// upstream's name internal ones.
pub struct Converted {
    served: Arc<dyn Strategy>,
    hub: Arc<dyn Strategy>,
    conversion: &'static Conversion,
}

impl std::fmt::Debug for Converted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converted").finish_non_exhaustive()
    }
}

impl Converted {
    /// The strategy of the version `conversion` serves: `served` decodes it, `hub` rules.
    pub fn new(
        served: Arc<dyn Strategy>,
        hub: Arc<dyn Strategy>,
        conversion: &'static Conversion,
    ) -> Self {
        Converted {
            served,
            hub,
            conversion,
        }
    }

    /// `object` in the hub version (objects already there are taken as they are).
    fn to_hub(&self, object: &Value) -> Value {
        self.conversion
            .convert(object, self.conversion.hub)
            .unwrap_or_else(|_| object.clone())
    }

    fn served(&self, object: &Value) -> Value {
        crate::gojson::normalize(&(self.conversion.from_hub)(object))
    }

    /// Runs `change` on the hub form of `object` and converts the result back.
    fn in_hub(&self, object: &mut Value, change: impl FnOnce(&mut Value)) {
        let mut hub = self.to_hub(object);
        change(&mut hub);
        *object = self.served(&hub);
    }
}

impl Strategy for Converted {
    fn decode(&self, object: &Value) -> Result<(Value, Vec<String>), DecodeError> {
        let (served, unknown) = self.served.decode(object)?;
        let hub = (self.conversion.to_hub)(&served).map_err(DecodeError::Invalid)?;
        let (hub, _) = self.hub.decode(&hub)?;
        Ok((self.served(&hub), unknown))
    }

    fn prepare_for_create(&self, object: &mut Value) {
        self.in_hub(object, |hub| self.hub.prepare_for_create(hub));
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value, subresource: Option<&str>) {
        let old = self.to_hub(old);
        self.in_hub(new, |hub| {
            self.hub.prepare_for_update(hub, &old, subresource)
        });
    }

    fn validate(&self, object: &Value) -> Vec<FieldError> {
        if self.conversion.validated_as_served {
            return self.served.validate(&self.served(&self.to_hub(object)));
        }
        self.hub.validate(&self.to_hub(object))
    }

    fn validate_update(
        &self,
        new: &Value,
        old: &Value,
        subresource: Option<&str>,
    ) -> Vec<FieldError> {
        if self.conversion.validated_as_served {
            let served = |object: &Value| self.served(&self.to_hub(object));
            return self
                .served
                .validate_update(&served(new), &served(old), subresource);
        }
        self.hub
            .validate_update(&self.to_hub(new), &self.to_hub(old), subresource)
    }

    fn status_policy(&self) -> StatusPolicy {
        self.hub.status_policy()
    }

    fn tracks_generation(&self) -> bool {
        self.hub.tracks_generation()
    }

    fn allow_create_on_update(&self) -> bool {
        self.hub.allow_create_on_update()
    }

    fn selectable_fields(&self, object: &Value) -> Vec<(&'static str, String)> {
        self.hub.selectable_fields(&self.to_hub(object))
    }

    fn indexed_field(&self) -> Option<&'static str> {
        self.hub.indexed_field()
    }

    fn hub_field_label<'a>(&self, label: &'a str) -> &'a str {
        self.conversion
            .field_labels
            .iter()
            .find(|(served, _)| *served == label)
            .map_or(label, |(_, hub)| *hub)
    }

    fn selectable_field_names(&self) -> &'static [&'static str] {
        if self.conversion.field_labels.is_empty() {
            self.hub.selectable_field_names()
        } else {
            self.conversion.field_names
        }
    }

    fn default_grace_period(&self, object: &Value) -> Option<i64> {
        self.hub.default_grace_period(&self.to_hub(object))
    }

    fn deletion_held(&self, object: &Value) -> bool {
        self.hub.deletion_held(&self.to_hub(object))
    }

    fn mark_terminating(&self, object: &mut Value) {
        self.in_hub(object, |hub| self.hub.mark_terminating(hub));
    }

    fn returns_deleted_object(&self) -> bool {
        self.hub.returns_deleted_object()
    }
}

/// Runs `change` on the typed form of `object` and writes the result back; an object that is
/// not of the kind is left alone (the registry decoded it before, so this does not happen).
fn rewrite<K>(object: &mut Value, change: impl FnOnce(&mut K))
where
    K: Serialize + DeserializeOwned + Clone + PartialEq,
{
    if let Some(mut k) = typed::<K>(object) {
        let before = k.clone();
        change(&mut k);
        // Most hooks change nothing: the object stays as it was (already in upstream's form),
        // and is encoded again only when the hook changed it.
        if k != before
            && let Ok(encoded) = serde_json::to_value(&k)
        {
            *object = crate::gojson::normalize(&encoded);
        }
    }
}

/// Collects the paths of fields present (and not null) in `input` but absent from `decoded`:
/// the fields the kind does not know.
fn unknown_fields(input: &Value, decoded: &Value, path: &mut String, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(input), Value::Object(decoded)) => {
            for (key, value) in input {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match decoded.get(key) {
                    Some(inner) => unknown_fields(value, inner, path, out),
                    None if !value.is_null() && !is_free_form(path) => out.push(path.clone()),
                    None => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(input), Value::Array(decoded)) => {
            for (i, (value, inner)) in input.iter().zip(decoded).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                unknown_fields(value, inner, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Maps whose keys are data, where an absent key after decoding means an empty value was
/// dropped, not an unknown field.
fn is_free_form(path: &str) -> bool {
    path.starts_with("metadata.creationTimestamp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn type_errors_are_named_by_path() {
        let strategy = Typed::<k8s_openapi::api::core::v1::Pod>::new(Hooks::plain());
        let error = strategy
            .decode(&json!({"metadata": {"name": "a"}, "spec": {"containers": "x"}}))
            .unwrap_err();
        assert!(
            matches!(error, DecodeError::Invalid(m) if m.starts_with("spec.containers: invalid type"))
        );
    }

    #[test]
    fn decoding_reports_fields_the_kind_does_not_have() {
        let strategy = Typed::<ConfigMap>::new(Hooks::plain());
        let (decoded, unknown) = strategy
            .decode(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "labelz": {"x": "y"}, "labels": {"x": "y"}},
                "data": {"k": "v"},
                "spec": {"nope": 1},
                "immutable": null
            }))
            .unwrap();
        assert_eq!(unknown, ["metadata.labelz", "spec"]);
        assert_eq!(decoded["data"]["k"], "v");
        assert!(decoded.get("spec").is_none());
    }

    #[test]
    fn updates_are_validated_by_what_they_write_through() {
        fn marker(field: &str) -> Vec<FieldError> {
            vec![FieldError::forbidden(&crate::field::Path::new(field), "x")]
        }
        let strategy = Typed::<ConfigMap>::new(Hooks {
            validate_update: |_, _| marker("main"),
            validate_status_update: |_, _| marker("status"),
            ..Hooks::plain()
        });
        let old = json!({"metadata": {"name": "a", "resourceVersion": "1"}});
        let fields = |subresource: Option<&str>, new: &Value| -> Vec<String> {
            strategy
                .validate_update(new, &old, subresource)
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert_eq!(fields(None, &old), ["main"]);
        assert_eq!(fields(Some("scale"), &old), ["main"]);
        assert_eq!(fields(Some("status"), &old), ["status"]);
        // Without a hook of their own, finalize and binding writes get the metadata rules.
        let renamed = json!({"metadata": {"name": "b", "resourceVersion": "1"}});
        assert_eq!(fields(Some("finalize"), &renamed), ["metadata.name"]);
        assert_eq!(fields(Some("binding"), &renamed), ["metadata.name"]);
        assert!(fields(Some("binding"), &old).is_empty());
    }
}
