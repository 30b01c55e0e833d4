//! The OpenAPI documents of custom resources, as upstream's apiextensions server publishes each
//! served version of a CustomResourceDefinition: the definitions
//! `<reversed group>.<version>.<Kind>` and `...<ListKind>` built from the version's structural
//! schema, the resource's paths, one v3 document per custom group-version, and the v2 document
//! with every custom path and definition merged into the built-in one.
//!
//! The kind's definition is its schema as upstream renders a structural schema (`example` and
//! other keys a structural schema cannot hold dropped, `false` flags omitted,
//! `x-kubernetes-int-or-string` unfolded into its `anyOf`) with `metadata`, `apiVersion` and
//! `kind` set (also in every `x-kubernetes-embedded-resource` object) and its
//! group-version-kind. The v2 form is cut to what kubectl's v2 validation copes with: no
//! `allOf`/`anyOf`/`oneOf`/`not`, nullable and unknown-preserving fields untyped and without
//! children, and a root that keeps unknown fields reduced to `type: object`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

use super::definitions::{Base, Definitions, GVK_EXTENSION, Gvk, reference, v2_refs};
use super::operations;
use super::{Document, documents, group_version_path, v2, v3};
use crate::catalog::Resource;

/// One served version of a custom resource, to publish.
#[derive(Clone, Debug)]
pub struct CustomKind {
    /// Its declaration (group, version, names, scope, subresources).
    pub resource: &'static Resource,
    /// The CRD's `listKind`.
    pub list_kind: String,
    /// The version's `openAPIV3Schema`, as JSON.
    pub schema: Option<Value>,
}

/// The documents served while custom resources are: the built-in ones, one v3 document per
/// custom group-version, and the v2 document with the custom paths and definitions (built at its
/// first use).
#[derive(Debug)]
pub struct Published {
    kinds: Vec<CustomKind>,
    v3: BTreeMap<String, Arc<Document>>,
    v2: OnceLock<Arc<Document>>,
    v2_protobuf: OnceLock<Arc<Vec<u8>>>,
}

/// The built-in definitions, as the served v2 document holds them.
fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        static EMPTY: OnceLock<Map<String, Value>> = OnceLock::new();
        let definitions = documents().v2.value["definitions"]
            .as_object()
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new));
        Base::new(definitions)
    })
}

/// Publishes `kinds` beside the built-in documents.
pub fn publish(kinds: Vec<CustomKind>) -> Published {
    let defs = definitions(&kinds, false);
    let mut by_group_version: BTreeMap<String, Vec<&'static Resource>> = BTreeMap::new();
    for kind in &kinds {
        let (group, version) = (kind.resource.group, kind.resource.version);
        // A group-version the catalogue serves keeps its built-in document.
        if !crate::catalog::versions(group).contains(&version) {
            by_group_version
                .entry(group_version_path(group, version))
                .or_default()
                .push(kind.resource);
        }
    }
    let v3 = by_group_version
        .into_iter()
        .map(|(path, resources)| {
            let items = operations::custom_items(&defs, &resources);
            (path, Arc::new(Document::new(v3::document(&defs, &items))))
        })
        .collect();
    Published {
        kinds,
        v3,
        v2: OnceLock::new(),
        v2_protobuf: OnceLock::new(),
    }
}

impl Published {
    /// `/openapi/v3`: every document, built-in and custom, with its server-relative URL.
    pub fn v3_root(&self) -> Value {
        let mut root = super::v3_root();
        if let Some(Value::Object(paths)) = root.get_mut("paths") {
            for (path, doc) in &self.v3 {
                paths.insert(
                    path.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
                );
            }
        }
        root
    }

    /// `/openapi/v3/<path>`: a custom group-version's document or a built-in one.
    pub fn v3_document_at(&self, path: &str) -> Option<Arc<Document>> {
        self.v3
            .get(path.trim_matches('/'))
            .cloned()
            .or_else(|| super::v3_document_at(path))
    }

    /// `/openapi/v2` in JSON, custom paths and definitions included.
    pub fn v2_document(&self) -> Arc<Document> {
        if self.kinds.is_empty() {
            return super::v2_document();
        }
        self.v2
            .get_or_init(|| Arc::new(v2_merged(&self.kinds)))
            .clone()
    }

    /// `/openapi/v2` in protobuf, custom paths and definitions included.
    pub fn v2_protobuf(&self) -> Arc<Vec<u8>> {
        if self.kinds.is_empty() {
            return super::v2_protobuf();
        }
        self.v2_protobuf
            .get_or_init(|| Arc::new(super::protobuf::encode_document(&self.v2_document().value)))
            .clone()
    }
}

/// The built-in v2 document with the paths and definitions of `kinds` added.
fn v2_merged(kinds: &[CustomKind]) -> Document {
    let defs = definitions(kinds, true);
    let mut document = documents().v2.value.clone();
    let mut resources: Vec<&'static Resource> = kinds.iter().map(|k| k.resource).collect();
    resources.sort_by_key(|r| (r.group, r.version, r.plural));
    let mut added_paths = Map::new();
    for resource in resources {
        for item in operations::custom_items(&defs, &[resource]) {
            added_paths.insert(item.path.clone(), v2::path_item(&item));
        }
    }
    let added_definitions: Map<String, Value> = defs.own().clone().into_iter().collect();
    let mut added = json!({"paths": added_paths, "definitions": added_definitions});
    v2_refs(&mut added);
    if let Value::Object(mut added) = added {
        for key in ["paths", "definitions"] {
            if let (Some(Value::Object(into)), Some(Value::Object(from))) =
                (document.get_mut(key), added.remove(key))
            {
                into.extend(from);
            }
        }
    }
    Document::new(document)
}

/// The definitions of `kinds` (in the v2 form when `v2`) over the built-in ones.
fn definitions(kinds: &[CustomKind], v2: bool) -> Definitions {
    let base = base();
    let mut schemas = BTreeMap::new();
    let mut names = BTreeMap::new();
    for kind in kinds {
        let r = kind.resource;
        let name = definition_name(r.group, r.version, r.kind);
        let list_name = definition_name(r.group, r.version, &kind.list_kind);
        let gvk = Gvk::new(r.group, r.version, r.kind);
        let list_gvk = Gvk::new(r.group, r.version, &kind.list_kind);
        schemas.insert(name.clone(), kind_schema(kind, &gvk, v2));
        schemas.insert(list_name.clone(), list_schema(kind, &name, &list_gvk));
        names.insert(gvk, name);
        names.insert(list_gvk, list_name);
    }
    Definitions::over(base, schemas, names)
}

/// Upstream's definition name of a custom kind: the group's labels reversed, then version and
/// kind (`stable.example.com`/`v1`/`CronTab` is `com.example.stable.v1.CronTab`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let group: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", group.join("."))
}

/// A property of a built-in definition (a ConfigMap's `apiVersion`, a ConfigMapList's
/// `metadata`), in the v3 form: the type meta and metadata every custom kind gets.
fn builtin_property(definition: &str, property: &str) -> Value {
    let mut value = documents().v2.value["definitions"][definition]["properties"][property].clone();
    if let Some(Value::String(reference)) = value.get_mut("$ref")
        && let Some(name) = reference.strip_prefix(super::definitions::V2_REF_PREFIX)
    {
        *reference = format!("{}{name}", super::definitions::REF_PREFIX);
    }
    value
}

/// Sets `apiVersion`, `kind` and `metadata` in `schema`'s properties.
fn add_type_and_object_meta(schema: &mut Map<String, Value>, metadata: Value) {
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            builtin_property("io.k8s.api.core.v1.ConfigMap", "apiVersion"),
        );
        properties.insert(
            "kind".into(),
            builtin_property("io.k8s.api.core.v1.ConfigMap", "kind"),
        );
        properties.insert("metadata".into(), metadata);
    }
}

/// The definition of a custom kind.
fn kind_schema(kind: &CustomKind, gvk: &Gvk, v2: bool) -> Value {
    let gvk_extension = json!([gvk.to_value()]);
    let schema = kind.schema.as_ref().map(|schema| {
        let mut schema = structural(schema);
        unfold(&mut schema);
        schema
    });
    let Some(mut schema) = schema.filter(|s| !(v2 && flag(s, PRESERVE))) else {
        // Without a schema (or in v2, keeping unknown fields at the root) only the type is
        // published: kubectl would refuse any field the definition does not list.
        return json!({"type": "object", GVK_EXTENSION: gvk_extension});
    };
    if v2 {
        to_v2(&mut schema);
    }
    if let Value::Object(object) = &mut schema {
        add_type_and_object_meta(
            object,
            builtin_property("io.k8s.api.core.v1.ConfigMap", "metadata"),
        );
    }
    add_embedded_meta(&mut schema, v2);
    schema[GVK_EXTENSION] = gvk_extension;
    schema
}

/// The definition of a custom kind's list.
fn list_schema(kind: &CustomKind, item: &str, gvk: &Gvk) -> Value {
    let (plural, kind_name) = (kind.resource.plural, kind.resource.kind);
    let items = json!({
        "type": "array",
        "items": reference(item),
        "description": format!(
            "List of {plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
        ),
    });
    let mut schema = json!({
        "description": format!("{} is a list of {kind_name}", kind.list_kind),
        "required": ["items"],
        "properties": {"items": items},
        GVK_EXTENSION: [gvk.to_value()],
    });
    if let Value::Object(object) = &mut schema {
        add_type_and_object_meta(
            object,
            builtin_property("io.k8s.api.core.v1.ConfigMapList", "metadata"),
        );
    }
    schema
}

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

/// Whether boolean `key` of a schema is set.
fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// The keys of a JSONSchemaProps a structural schema keeps.
const STRUCTURAL_KEYS: &[&str] = &[
    "additionalProperties",
    "allOf",
    "anyOf",
    "default",
    "description",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "externalDocs",
    "format",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "nullable",
    "oneOf",
    "pattern",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

/// `schema` as upstream renders a structural schema: only the keys it keeps, without `false`
/// flags and empty lists.
fn structural(schema: &Value) -> Value {
    let Value::Object(object) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        if !STRUCTURAL_KEYS.contains(&key.as_str()) {
            continue;
        }
        let kept = match (key.as_str(), value) {
            (_, Value::Null) | (_, Value::Bool(false))
                if key != "additionalProperties" && key != "default" =>
            {
                None
            }
            (
                "required" | "enum" | "allOf" | "anyOf" | "oneOf" | "x-kubernetes-list-map-keys",
                Value::Array(items),
            ) if items.is_empty() => None,
            ("properties", Value::Object(properties)) => Some(Value::Object(
                properties
                    .iter()
                    .map(|(name, child)| (name.clone(), structural(child)))
                    .collect(),
            )),
            ("allOf" | "anyOf" | "oneOf", Value::Array(items)) => {
                Some(Value::Array(items.iter().map(structural).collect()))
            }
            ("items" | "not" | "additionalProperties", Value::Object(_)) => Some(structural(value)),
            _ => Some(value.clone()),
        };
        if let Some(kept) = kept {
            out.insert(key.clone(), kept);
        }
    }
    Value::Object(out)
}

/// The children schemas of a schema node: its properties, items and additional properties.
fn children(schema: &mut Value) -> Vec<&mut Value> {
    let Value::Object(object) = schema else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(properties)) => out.extend(properties.values_mut()),
            ("items" | "additionalProperties", child @ Value::Object(_)) => out.push(child),
            _ => {}
        }
    }
    out
}

/// Upstream's unfolding of `x-kubernetes-int-or-string`: a node without the `anyOf` of an
/// integer and a string (directly or as its first `allOf`) gets it.
fn unfold(schema: &mut Value) {
    for child in children(schema) {
        unfold(child);
    }
    if !flag(schema, INT_OR_STRING) {
        return;
    }
    let pair = json!([{"type": "integer"}, {"type": "string"}]);
    let Value::Object(object) = schema else {
        return;
    };
    if object.get("anyOf") == Some(&pair)
        || object.get("allOf").and_then(|all| all.get(0)) == Some(&json!({"anyOf": pair}))
    {
        return;
    }
    if object.contains_key("anyOf") {
        let mut all_of = vec![json!({"anyOf": pair})];
        if let Some(Value::Array(rest)) = object.remove("allOf") {
            all_of.extend(rest);
        }
        object.insert("allOf".into(), Value::Array(all_of));
    } else {
        object.insert("anyOf".into(), pair);
    }
}

/// Upstream's cut of a structural schema to what kubectl's OpenAPI v2 handling copes with.
fn to_v2(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        object.remove(junctor);
    }
    if object.remove("nullable").is_some() {
        object.remove("type");
        object.remove("items");
        object.remove("properties");
    }
    if flag(schema, PRESERVE)
        && let Value::Object(object) = schema
    {
        object.remove("items");
        object.remove("properties");
    }
    let Value::Object(object) = schema else {
        return;
    };
    let ty = object
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if (ty == "array" && !object.contains_key("items"))
        || (ty == "object" && object.get(PRESERVE) == Some(&Value::Bool(true)))
    {
        object.remove("type");
    }
    // Nullable fields may be missing: they are no longer required.
    let nullable: Vec<String> = object
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter(|(_, p)| flag(p, "nullable"))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    let additional_nullable = object
        .get("additionalProperties")
        .is_some_and(|a| flag(a, "nullable"));
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
        if additional_nullable {
            required.clear();
        }
        if required.is_empty() {
            object.remove("required");
        }
    }
    for child in children(schema) {
        to_v2(child);
    }
}

/// Sets `apiVersion`, `kind` and `metadata` (required type meta) in every object of `schema`
/// that holds an embedded resource (in v2, not those that keep unknown fields).
fn add_embedded_meta(schema: &mut Value, v2: bool) {
    for child in children(schema) {
        add_embedded_meta(child, v2);
    }
    if (v2 && flag(schema, PRESERVE)) || !flag(schema, EMBEDDED) {
        return;
    }
    let Value::Object(object) = schema else {
        return;
    };
    add_type_and_object_meta(
        object,
        builtin_property("io.k8s.api.core.v1.ConfigMap", "metadata"),
    );
    let required = object
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(required) = required {
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == field) {
                required.push(field.into());
            }
        }
    }
}

#[cfg(test)]
mod tests;
