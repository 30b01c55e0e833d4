//! The merge structure of a custom resource, read from its version's structural schema as
//! upstream turns a CRD schema into structured-merge-diff types: objects with `properties` are
//! structs (replaced whole with `x-kubernetes-map-type: atomic`), objects with
//! `additionalProperties` are maps, arrays are atomic unless `x-kubernetes-list-type` makes
//! them a `set` or a `map` keyed by `x-kubernetes-list-map-keys` (whose schema defaults fill
//! absent keys), int-or-string fields are scalars, and nodes that keep unknown fields without
//! declaring any are untyped. The root's `metadata` is `ObjectMeta`.
//!
//! Struct nodes live in an append-only arena after the built-in messages, so a custom struct is
//! a [`Type::Struct`] like any other and every merge rule serves both. A schema is converted
//! once per distinct content (strategies are remade at every CRD resync): the arena holds each
//! CRD version's nodes for the process's life, as the declared resources themselves are kept.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

use super::schema::{Elem, ListKind, StructInfo, Type};
use crate::protobuf::model;
use crate::structural;

/// The custom struct nodes, indexed from the first index after the built-in messages.
static ARENA: RwLock<Vec<&'static StructInfo>> = RwLock::new(Vec::new());

/// The root type of each schema converted so far, by its JSON text.
static CONVERTED: Mutex<Option<HashMap<String, Type>>> = Mutex::new(None);

/// The struct node at `index`, when it is a custom one.
pub(crate) fn struct_info(index: u16) -> Option<&'static StructInfo> {
    let first = model::messages().len();
    let at = usize::from(index).checked_sub(first)?;
    ARENA
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(at)
        .copied()
}

/// The root type of objects of a custom resource whose version has `schema`.
pub fn for_schema(schema: &JSONSchemaProps) -> Type {
    let Ok(key) = serde_json::to_string(schema) else {
        return Type::Untyped;
    };
    let mut converted = CONVERTED.lock().unwrap_or_else(|e| e.into_inner());
    let converted = converted.get_or_insert_with(HashMap::new);
    if let Some(ty) = converted.get(&key) {
        return *ty;
    }
    let ty = convert(schema, true);
    converted.insert(key, ty);
    ty
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

/// Adds `info` to the arena; `None` once the indexes a [`Type::Struct`] can hold are used up
/// (the node is then untyped, merged as upstream merges values it knows nothing about).
fn add(info: StructInfo) -> Option<u16> {
    let mut arena = ARENA.write().unwrap_or_else(|e| e.into_inner());
    let index = u16::try_from(model::messages().len() + arena.len()).ok()?;
    arena.push(Box::leak(Box::new(info)));
    Some(index)
}

fn convert(schema: &JSONSchemaProps, root: bool) -> Type {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return Type::Scalar;
    }
    let keeps_unknown = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    match schema.type_.as_deref() {
        Some("object") => {
            let properties = schema.properties.as_ref().filter(|p| !p.is_empty());
            if let Some(properties) = properties {
                let mut info = StructInfo {
                    atomic: schema.x_kubernetes_map_type.as_deref() == Some("atomic"),
                    ..StructInfo::default()
                };
                for (name, child) in properties {
                    info.fields.insert(leak(name), convert(child, false));
                    if let Some(default) = &child.default {
                        info.defaults.insert(leak(name), default.0.clone());
                    }
                }
                if root || structural::embedded(schema) {
                    info.fields.insert("apiVersion", Type::Scalar);
                    info.fields.insert("kind", Type::Scalar);
                    if let Some(meta) =
                        model::message_by_name("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta")
                    {
                        info.fields.insert("metadata", Type::Struct(meta));
                    }
                }
                return add(info).map_or(Type::Untyped, Type::Struct);
            }
            match structural::additional(schema) {
                Some(values) if !keeps_unknown => Type::Map {
                    value: elem(convert(values, false)),
                    atomic: schema.x_kubernetes_map_type.as_deref() == Some("atomic"),
                },
                _ => Type::Untyped,
            }
        }
        Some("array") => {
            let Some(items) = structural::items(schema) else {
                return Type::List {
                    elem: Elem::Untyped,
                    kind: None,
                };
            };
            let kind = match schema.x_kubernetes_list_type.as_deref() {
                Some("set") => Some(ListKind::Set),
                Some("map") => {
                    let keys: Vec<&'static str> = schema
                        .x_kubernetes_list_map_keys
                        .iter()
                        .flatten()
                        .map(|k| leak(k))
                        .collect();
                    Some(ListKind::Map(Box::leak(keys.into_boxed_slice())))
                }
                _ => None,
            };
            Type::List {
                elem: elem(convert(items, false)),
                kind,
            }
        }
        Some(_) => Type::Scalar,
        None if keeps_unknown => Type::Untyped,
        None => Type::Untyped,
    }
}

/// The item or value form of a type: lists and maps inside lists or maps are untyped, as the
/// built-in structure never nests them directly.
fn elem(ty: Type) -> Elem {
    match ty {
        Type::Struct(m) => Elem::Struct(m),
        Type::Scalar => Elem::Scalar,
        _ => Elem::Untyped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::schema::{child, is_atomic_object, is_declared, key_default};
    use serde_json::json;

    #[test]
    fn a_crd_schema_gives_keyed_lists_sets_maps_and_atomic_structs() {
        let schema: JSONSchemaProps = serde_json::from_value(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                        "items": {"type": "object", "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "ref": {"type": "object", "x-kubernetes-map-type": "atomic",
                        "properties": {"name": {"type": "string"}}},
                    "port": {"x-kubernetes-int-or-string": true},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }},
            },
        }))
        .unwrap();
        let root = for_schema(&schema);
        assert_eq!(
            for_schema(&schema.clone()),
            root,
            "converted once per content"
        );
        assert!(is_declared(root, "spec") && is_declared(root, "apiVersion"));
        let meta = child(root, "metadata");
        assert!(crate::apply::schema::is_object_meta(meta));
        let spec = child(root, "spec");
        let Type::List {
            elem,
            kind: Some(ListKind::Map(keys)),
        } = child(spec, "ports")
        else {
            panic!("ports: {:?}", child(spec, "ports"));
        };
        assert_eq!(keys, ["port", "protocol"]);
        assert_eq!(key_default(elem, "protocol"), Some(&json!("TCP")));
        assert!(matches!(
            child(spec, "tags"),
            Type::List {
                elem: Elem::Scalar,
                kind: Some(ListKind::Set)
            }
        ));
        assert!(matches!(child(spec, "args"), Type::List { kind: None, .. }));
        assert!(matches!(
            child(spec, "labels"),
            Type::Map {
                value: Elem::Scalar,
                atomic: false
            }
        ));
        assert!(is_atomic_object(child(spec, "ref")));
        assert_eq!(child(spec, "port"), Type::Scalar);
        assert_eq!(child(spec, "free"), Type::Untyped);
        assert_eq!(child(spec, "undeclared"), Type::Untyped);
    }
}
