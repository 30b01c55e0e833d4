//! The schema definitions of the documents: every kind the catalogue serves (and the kinds its
//! subresources speak), their list kinds, and the `meta/v1` kinds the operations use, generated
//! once through `schemars` from `k8s-openapi`'s types under upstream's definition names
//! (`io.k8s.api.apps.v1.Deployment`), with the `x-kubernetes-group-version-kind` extension on the
//! top-level kinds and the per-field extensions of [`super::extensions::field_extensions`].
//!
//! References are kept in the OpenAPI v3 form (`#/components/schemas/<name>`); the v2 renderer
//! rewrites them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::version;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::extensions::field_extensions;
use crate::catalog;

/// The prefix of every reference between definitions.
pub(crate) const REF_PREFIX: &str = "#/components/schemas/";

/// The extension naming the group-version-kinds a definition (a list) or an operation (one)
/// reads and writes.
pub(crate) const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// A group, version and kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Gvk {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
}

impl Gvk {
    /// A group-version-kind from its parts.
    pub(crate) fn new(group: &str, version: &str, kind: &str) -> Self {
        Gvk {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// The extension value upstream writes: `{"group": .., "kind": .., "version": ..}`.
    pub(crate) fn to_value(&self) -> Value {
        json!({"group": self.group, "kind": self.kind, "version": self.version})
    }
}

/// The definition name `schemars` gives `T` (upstream's name, e.g.
/// `io.k8s.apimachinery.pkg.apis.meta.v1.Status`).
pub(crate) fn name_of<T: JsonSchema>() -> String {
    T::schema_name().into_owned()
}

/// The reference to definition `name`.
pub(crate) fn reference(name: &str) -> Value {
    json!({ "$ref": format!("{REF_PREFIX}{name}") })
}

/// Every definition the documents may reference, and which definition holds each kind.
#[derive(Debug)]
pub(crate) struct Definitions {
    schemas: BTreeMap<String, Value>,
    kinds: BTreeMap<Gvk, String>,
    /// The definitions these add to, looked up after their own (custom kinds add to the
    /// built-in ones, kept in the served v2 document).
    base: Option<&'static Base>,
}

/// The built-in definitions as the v2 document holds them (references in the v2 form), and
/// which definition holds each group-version-kind they declare.
#[derive(Debug)]
pub(crate) struct Base {
    schemas: &'static Map<String, Value>,
    kinds: BTreeMap<Gvk, String>,
}

impl Base {
    /// The definitions of a v2 document (`definitions`), indexed by their
    /// `x-kubernetes-group-version-kind`.
    pub(crate) fn new(schemas: &'static Map<String, Value>) -> Base {
        let mut kinds = BTreeMap::new();
        for (name, schema) in schemas {
            for gvk in schema[GVK_EXTENSION].as_array().into_iter().flatten() {
                let part = |key: &str| gvk[key].as_str().unwrap_or_default().to_owned();
                kinds
                    .entry(Gvk {
                        group: part("group"),
                        version: part("version"),
                        kind: part("kind"),
                    })
                    .or_insert_with(|| name.clone());
            }
        }
        Base { schemas, kinds }
    }
}

impl Definitions {
    /// Generates every definition: the kinds of the catalogue and of its subresources, their list
    /// kinds, and the `meta/v1` kinds of the operations and discovery documents.
    pub(crate) fn build() -> Definitions {
        let mut generator = SchemaGenerator::new(SchemaSettings::openapi3().with(|settings| {
            settings.meta_schema = None;
            settings.transforms = Vec::new();
        }));
        let mut kinds = BTreeMap::new();
        register_kinds(&mut generator, &mut kinds);
        generator.subschema_for::<meta::DeleteOptions>();
        generator.subschema_for::<meta::WatchEvent<Value>>();
        generator.subschema_for::<meta::Patch>();
        generator.subschema_for::<meta::ListMeta>();
        generator.subschema_for::<version::Info>();
        let mut schemas: BTreeMap<String, Value> =
            generator.take_definitions(false).into_iter().collect();

        for (gvk, name) in &kinds {
            add_gvk(&mut schemas, name, gvk);
        }

        // Every group-version served, for the kinds every group-version shares.
        let mut served: BTreeSet<(String, String)> = BTreeSet::new();
        served.insert((String::new(), "v1".to_owned()));
        for resource in catalog::resources() {
            served.insert((resource.group.to_owned(), resource.version.to_owned()));
            for sub in resource.subresources {
                if let Some((group, version)) = sub.group_version {
                    served.insert((group.to_owned(), version.to_owned()));
                }
            }
        }
        for (shared, kind) in [
            (name_of::<meta::DeleteOptions>(), "DeleteOptions"),
            (name_of::<meta::WatchEvent<Value>>(), "WatchEvent"),
        ] {
            for (group, version) in &served {
                add_gvk(&mut schemas, &shared, &Gvk::new(group, version, kind));
            }
        }

        // List kinds, which k8s-openapi models generically.
        let list_meta = name_of::<meta::ListMeta>();
        for resource in catalog::resources() {
            let gvk = Gvk::new(resource.group, resource.version, resource.kind);
            let Some(item) = kinds.get(&gvk).cloned() else {
                continue;
            };
            let list_name = format!("{item}List");
            if schemas.contains_key(&list_name) {
                continue;
            }
            let Some(item_schema) = schemas.get(&item) else {
                continue;
            };
            let list_gvk = Gvk::new(resource.group, resource.version, &resource.list_kind());
            let list = list_schema(&item, item_schema, resource.kind, &list_meta, &list_gvk);
            schemas.insert(list_name.clone(), list);
            kinds.insert(list_gvk, list_name);
        }

        for (name, schema) in schemas.iter_mut() {
            normalize(name, schema);
        }
        Definitions {
            schemas,
            kinds,
            base: None,
        }
    }

    /// Definitions of their own (`schemas`, holding `kinds`) over `base`.
    pub(crate) fn over(
        base: &'static Base,
        schemas: BTreeMap<String, Value>,
        kinds: BTreeMap<Gvk, String>,
    ) -> Definitions {
        Definitions {
            schemas,
            kinds,
            base: Some(base),
        }
    }

    /// The definitions of their own (not those of their base).
    pub(crate) fn own(&self) -> &BTreeMap<String, Value> {
        &self.schemas
    }

    /// The definition holding `group`/`version` `kind`, if one was generated.
    pub(crate) fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        let gvk = Gvk::new(group, version, kind);
        self.kinds
            .get(&gvk)
            .or_else(|| self.base.and_then(|base| base.kinds.get(&gvk)))
            .map(String::as_str)
    }

    /// Definition `name` with references in the v3 form, from these or their base.
    fn schema(&self, name: &str) -> Option<Value> {
        if let Some(schema) = self.schemas.get(name) {
            return Some(schema.clone());
        }
        let mut schema = self.base?.schemas.get(name)?.clone();
        v3_refs(&mut schema);
        Some(schema)
    }

    /// The definitions `roots` reference, directly or through other definitions.
    pub(crate) fn closure<'a>(
        &self,
        roots: impl IntoIterator<Item = &'a Value>,
    ) -> BTreeMap<String, Value> {
        let mut pending: Vec<String> = Vec::new();
        for root in roots {
            collect_refs(root, &mut pending);
        }
        let mut out: BTreeMap<String, Value> = BTreeMap::new();
        while let Some(name) = pending.pop() {
            if out.contains_key(&name) {
                continue;
            }
            if let Some(schema) = self.schema(&name) {
                collect_refs(&schema, &mut pending);
                out.insert(name, schema);
            }
        }
        out
    }
}

/// Registers a kind's schema and records which definition holds it.
fn kind(
    generator: &mut SchemaGenerator,
    kinds: &mut BTreeMap<Gvk, String>,
    gvk: Gvk,
    schema: &catalog::Schema,
) {
    (schema.generate)(generator);
    kinds.insert(gvk, (schema.name)().into_owned());
}

/// Registers the `meta/v1` kind `T`, as served under the core group.
fn meta_kind<T: JsonSchema + Resource>(
    generator: &mut SchemaGenerator,
    kinds: &mut BTreeMap<Gvk, String>,
) {
    let gvk = Gvk::new(T::GROUP, T::VERSION, T::KIND);
    kind(generator, kinds, gvk, &catalog::schema_of::<T>());
}

/// The `k8s-openapi` type of every kind the catalogue serves, of the kinds its subresources speak,
/// and of the discovery and status kinds.
fn register_kinds(g: &mut SchemaGenerator, k: &mut BTreeMap<Gvk, String>) {
    for resource in catalog::resources() {
        let gvk = Gvk::new(resource.group, resource.version, resource.kind);
        kind(g, k, gvk, &resource.schema);
        for sub in resource.subresources {
            if let Some(schema) = &sub.schema {
                let (group, version) = sub
                    .group_version
                    .unwrap_or((resource.group, resource.version));
                kind(g, k, Gvk::new(group, version, sub.kind), schema);
            }
        }
    }
    meta_kind::<meta::APIGroup>(g, k);
    meta_kind::<meta::APIGroupList>(g, k);
    meta_kind::<meta::APIResourceList>(g, k);
    meta_kind::<meta::APIVersions>(g, k);
    meta_kind::<meta::Status>(g, k);
}

/// Adds `gvk` to the `x-kubernetes-group-version-kind` list of definition `name`.
fn add_gvk(schemas: &mut BTreeMap<String, Value>, name: &str, gvk: &Gvk) {
    let Some(Value::Object(schema)) = schemas.get_mut(name) else {
        return;
    };
    let entry = schema
        .entry(GVK_EXTENSION)
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = entry {
        let value = gvk.to_value();
        if !list.contains(&value) {
            list.push(value);
        }
    }
}

/// The schema of `<Kind>List`: the item kind's `apiVersion` and `kind` properties, `items` and
/// list metadata.
fn list_schema(item: &str, item_schema: &Value, kind: &str, list_meta: &str, gvk: &Gvk) -> Value {
    let property = |name: &str| {
        item_schema
            .pointer(&format!("/properties/{name}"))
            .cloned()
            .unwrap_or_else(|| json!({"type": "string"}))
    };
    let mut metadata = reference(list_meta);
    if let Value::Object(m) = &mut metadata {
        m.insert(
            "description".into(),
            "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
        );
    }
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": property("apiVersion"),
            "items": {
                "description": format!("items is the list of {kind} objects."),
                "type": "array",
                "items": reference(item),
            },
            "kind": property("kind"),
            "metadata": metadata,
        },
        "required": ["items"],
        GVK_EXTENSION: [gvk.to_value()],
    })
}

/// Brings a generated definition to upstream's shape and attaches the per-field extensions:
/// `metadata` is never required (k8s-openapi requires it because the Rust field is not optional;
/// upstream lets clients omit it, e.g. with `generateName` in a list item).
fn normalize(name: &str, schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    let metadata_is_meta = object
        .get("properties")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("$ref"))
        .and_then(Value::as_str)
        .is_some_and(|r| r.ends_with(".ObjectMeta") || r.ends_with(".ListMeta"));
    if let (true, Some(Value::Array(required))) = (metadata_is_meta, object.get_mut("required")) {
        required.retain(|field| field != "metadata");
        if required.is_empty() {
            object.remove("required");
        }
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for (field, property) in properties.iter_mut() {
            let extensions = field_extensions(name, field);
            if let (false, Value::Object(property)) = (extensions.is_empty(), property) {
                property.extend(extensions);
            }
        }
    }
}

/// The prefix of references in the v2 document.
pub(crate) const V2_REF_PREFIX: &str = "#/definitions/";

/// Rewrites every reference of `value` from the v3 form (`#/components/schemas/`) to the v2 one
/// (`#/definitions/`).
pub(crate) fn v2_refs(value: &mut Value) {
    rewrite_refs(value, REF_PREFIX, V2_REF_PREFIX);
}

/// Rewrites every reference of `value` from the v2 form to the v3 one.
fn v3_refs(value: &mut Value) {
    rewrite_refs(value, V2_REF_PREFIX, REF_PREFIX);
}

fn rewrite_refs(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                match child {
                    Value::String(reference) if key == "$ref" => {
                        if let Some(name) = reference.strip_prefix(from) {
                            *reference = format!("{to}{name}");
                        }
                    }
                    _ => rewrite_refs(child, from, to),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rewrite_refs(item, from, to)),
        _ => {}
    }
}

/// Pushes the name of every definition `value` references.
pub(crate) fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                if key == "$ref" {
                    if let Some(name) = child.as_str().and_then(|r| r.strip_prefix(REF_PREFIX)) {
                        out.push(name.to_owned());
                    }
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
        _ => {}
    }
}

/// Rebuilds `value` with the keys of every object in sorted order, whatever map `serde_json` was
/// built with, so that documents (and their hashes) do not depend on insertion order.
pub(crate) fn sorted(value: Value) -> Value {
    match value {
        Value::Object(object) => {
            let entries: BTreeMap<String, Value> =
                object.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(entries.into_iter().collect::<Map<String, Value>>())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
