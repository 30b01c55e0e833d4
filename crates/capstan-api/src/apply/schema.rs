//! The merge structure of the built-in types (custom resources' are [`super::custom`]'s), as
//! server-side apply sees it: which fields a type
//! has, which lists merge item by item (and how items are identified), and which objects and
//! maps are replaced whole. Field names, types and Go's pointer/`omitempty` facts come from the
//! protobuf schema table (`protobuf/schema.rs`); the merge markers from [`super::markers`], both
//! generated from upstream's definitions.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::markers::{ATOMIC_MAPS, ATOMIC_STRUCTS, KEY_DEFAULTS, LISTS};
use crate::protobuf::model::{
    self, Card, Field as ProtoField, Message, OMITEMPTY, POINTER, Special, Ty,
};

/// How the items of a list that is not atomic are identified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Scalars identified by their value (`x-kubernetes-list-type: set`).
    Set,
    /// Objects identified by the values of these fields (`x-kubernetes-list-type: map`).
    Map(&'static [&'static str]),
}

/// The type of a value, as far as merging cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A struct: index of its message in the schema table.
    Struct(u16),
    /// A map from strings to values of one type; `atomic` maps are replaced whole.
    Map {
        /// The message of the values, or `None` for scalars and untyped values.
        value: Elem,
        /// Replaced whole instead of merged key by key.
        atomic: bool,
    },
    /// A list; `kind` is `None` for atomic lists.
    List {
        /// The type of the items.
        elem: Elem,
        /// How items are identified, or `None` when the list is replaced whole.
        kind: Option<ListKind>,
    },
    /// A scalar (including `Quantity`, `Time`, `IntOrString`...).
    Scalar,
    /// Anything (`RawExtension`, `FieldsV1`, CRD `JSON`): scalars and lists are atomic, objects
    /// merge key by key.
    Untyped,
}

/// The type of the items of a list or the values of a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// A struct message.
    Struct(u16),
    /// A scalar.
    Scalar,
    /// Untyped.
    Untyped,
}

impl Elem {
    /// The item type as a [`Type`].
    pub fn ty(self) -> Type {
        match self {
            Elem::Struct(m) => Type::Struct(m),
            Elem::Scalar => Type::Scalar,
            Elem::Untyped => Type::Untyped,
        }
    }
}

/// A struct's fields by JSON name (embedded inline structs flattened), and whether the struct
/// is replaced whole.
#[derive(Debug, Default)]
pub(crate) struct StructInfo {
    pub atomic: bool,
    pub fields: HashMap<&'static str, Type>,
    /// Defaults of fields that key a list (a custom struct's schema defaults; the built-in
    /// ones are upstream's markers, in [`Tables`]).
    pub defaults: HashMap<&'static str, Value>,
}

struct Tables {
    structs: Vec<StructInfo>,
    defaults: Vec<(u16, &'static str, Value)>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(build)
}

fn build() -> Tables {
    let lists: HashMap<(&str, u32), ListKind> = LISTS
        .iter()
        .map(|(m, tag, _, kind)| ((*m, *tag), *kind))
        .collect();
    let atomic_maps: std::collections::HashSet<(&str, u32)> =
        ATOMIC_MAPS.iter().map(|(m, tag, _)| (*m, *tag)).collect();
    let messages = model::messages();
    let mut structs = Vec::with_capacity(messages.len());
    for message in messages {
        let mut info = StructInfo {
            atomic: ATOMIC_STRUCTS.binary_search(&message.name).is_ok(),
            ..StructInfo::default()
        };
        collect_fields(message, &lists, &atomic_maps, &mut info.fields, 0);
        structs.push(info);
    }
    // Top-level kinds carry `apiVersion` and `kind` (Go's inline TypeMeta, which protobuf
    // leaves to its envelope).
    for (_, _, index) in model::kinds() {
        if let Some(info) = structs.get_mut(usize::from(*index)) {
            info.fields.insert("apiVersion", Type::Scalar);
            info.fields.insert("kind", Type::Scalar);
        }
    }
    let defaults = KEY_DEFAULTS
        .iter()
        .filter_map(|(m, _, json, value)| {
            let index = model::message_by_name(m)?;
            Some((index, *json, serde_json::from_str(value).ok()?))
        })
        .collect();
    Tables { structs, defaults }
}

fn collect_fields(
    message: &'static Message,
    lists: &HashMap<(&str, u32), ListKind>,
    atomic_maps: &std::collections::HashSet<(&str, u32)>,
    out: &mut HashMap<&'static str, Type>,
    depth: usize,
) {
    for field in message.fields {
        if field.has(model::INLINE) {
            if let Ty::M(index) = field.ty
                && let Some(inner) = model::message(index)
                && depth < 8
            {
                collect_fields(inner, lists, atomic_maps, out, depth + 1);
            }
            continue;
        }
        let elem = elem_of(field.ty);
        let ty = match field.card {
            Card::One => match elem {
                Elem::Struct(m) => Type::Struct(m),
                Elem::Scalar => Type::Scalar,
                Elem::Untyped => Type::Untyped,
            },
            Card::Repeated if field.ty == Ty::BY => Type::Scalar,
            Card::Repeated => Type::List {
                elem,
                kind: lists.get(&(message.name, field.tag)).copied(),
            },
            Card::Map => Type::Map {
                value: elem,
                atomic: atomic_maps.contains(&(message.name, field.tag)),
            },
        };
        out.insert(field.json, ty);
    }
}

/// What a field of proto type `ty` holds.
fn elem_of(ty: Ty) -> Elem {
    match ty {
        Ty::M(index) => match model::message(index).map(|m| m.special) {
            Some(Special::None) => Elem::Struct(index),
            Some(
                Special::Time
                | Special::MicroTime
                | Special::Duration
                | Special::Quantity
                | Special::IntOrString,
            ) => Elem::Scalar,
            _ => Elem::Untyped,
        },
        _ => Elem::Scalar,
    }
}

/// The struct information of message `index`.
pub(crate) fn struct_info(index: u16) -> Option<&'static StructInfo> {
    tables()
        .structs
        .get(usize::from(index))
        .or_else(|| super::custom::struct_info(index))
}

/// The type of field `name` of a value of type `ty`: a struct's declared field, a map's value
/// type, or untyped for anything else (fields a struct does not declare).
pub fn child(ty: Type, name: &str) -> Type {
    match ty {
        Type::Struct(m) => struct_info(m)
            .and_then(|s| s.fields.get(name).copied())
            .unwrap_or(Type::Untyped),
        Type::Map { value, .. } => value.ty(),
        _ => Type::Untyped,
    }
}

/// Whether `name` is a field a struct of type `ty` declares (as opposed to a map key).
pub fn is_declared(ty: Type, name: &str) -> bool {
    match ty {
        Type::Struct(m) => struct_info(m).is_some_and(|s| s.fields.contains_key(name)),
        _ => false,
    }
}

/// Whether objects of type `ty` are replaced whole.
pub fn is_atomic_object(ty: Type) -> bool {
    match ty {
        Type::Struct(m) => struct_info(m).is_some_and(|s| s.atomic),
        Type::Map { atomic, .. } => atomic,
        _ => false,
    }
}

/// The default of key field `name` of list items of type `elem`, if upstream (or a custom
/// resource's schema) declares one.
pub fn key_default(elem: Elem, name: &str) -> Option<&'static Value> {
    match elem {
        Elem::Struct(m) => tables()
            .defaults
            .iter()
            .find(|(i, n, _)| *i == m && *n == name)
            .map(|(_, _, v)| v)
            .or_else(|| struct_info(m)?.defaults.get(name)),
        _ => None,
    }
}

/// Whether `ty` is `ObjectMeta`, whose `managedFields` the field manager itself writes (and
/// never compares or owns).
pub fn is_object_meta(ty: Type) -> bool {
    static OBJECT_META: OnceLock<Option<u16>> = OnceLock::new();
    let meta = *OBJECT_META
        .get_or_init(|| model::message_by_name("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
    matches!((ty, meta), (Type::Struct(m), Some(meta)) if m == meta)
}

/// The root type of objects of `api_version` and `kind`, if the kind is built in.
pub fn for_kind(api_version: &str, kind: &str) -> Option<Type> {
    model::message_for_kind(api_version, kind).map(Type::Struct)
}

/// The JSON form of an empty object of type `ty` as Go writes it: struct fields that are
/// values (not pointers) are present even when empty, lists and maps without `omitempty` are
/// `null`, scalars without `omitempty` are their zero value. Server-side apply compares a new
/// object with this when it is created, so what counts as added matches upstream's.
pub fn zero(ty: Type) -> &'static Value {
    static NULL: Value = Value::Null;
    static ZEROS: OnceLock<Vec<OnceLock<Value>>> = OnceLock::new();
    let Type::Struct(m) = ty else {
        return &NULL;
    };
    let zeros = ZEROS.get_or_init(|| model::messages().iter().map(|_| OnceLock::new()).collect());
    match (zeros.get(usize::from(m)), model::message(m)) {
        (Some(slot), Some(msg)) => slot.get_or_init(|| {
            let mut out = Map::new();
            zero_fields(msg, &mut out, 0);
            Value::Object(out)
        }),
        _ => &NULL,
    }
}

fn zero_fields(message: &'static Message, out: &mut Map<String, Value>, depth: usize) {
    if depth > 16 {
        return;
    }
    for field in message.fields {
        if field.has(model::INLINE) {
            if let Ty::M(index) = field.ty
                && let Some(inner) = model::message(index)
            {
                zero_fields(inner, out, depth + 1);
            }
            continue;
        }
        if let Some(value) = zero_field(field, depth) {
            out.insert(field.json.to_owned(), value);
        }
    }
}

fn zero_field(field: &ProtoField, depth: usize) -> Option<Value> {
    if field.has(POINTER) {
        return None;
    }
    let omitempty = field.has(OMITEMPTY);
    match field.card {
        Card::Repeated | Card::Map => (!omitempty).then_some(Value::Null),
        Card::One => match field.ty {
            Ty::M(index) => {
                let msg = model::message(index)?;
                match msg.special {
                    Special::None => {
                        let mut inner = Map::new();
                        zero_fields(msg, &mut inner, depth + 1);
                        Some(Value::Object(inner))
                    }
                    Special::Time | Special::MicroTime | Special::RawExtension => Some(Value::Null),
                    Special::Quantity if !omitempty => Some("0".into()),
                    Special::Duration if !omitempty => Some("0s".into()),
                    Special::IntOrString if !omitempty => Some(0.into()),
                    _ => None,
                }
            }
            _ if omitempty => None,
            Ty::S | Ty::BY => Some("".into()),
            Ty::B => Some(false.into()),
            Ty::I32 | Ty::I64 => Some(0.into()),
            Ty::F64 => Some(0.0.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_spec_lists_follow_upstream_markers() {
        let pod = for_kind("v1", "Pod").unwrap();
        let spec = child(pod, "spec");
        assert!(matches!(spec, Type::Struct(_)));
        assert_eq!(
            child(spec, "containers"),
            Type::List {
                elem: match child(spec, "containers") {
                    Type::List { elem, .. } => elem,
                    _ => unreachable!(),
                },
                kind: Some(ListKind::Map(&["name"])),
            }
        );
        let Type::List { elem, .. } = child(spec, "containers") else {
            unreachable!()
        };
        let Type::List {
            elem: port,
            kind: ports,
        } = child(elem.ty(), "ports")
        else {
            panic!("ports is a list")
        };
        assert_eq!(ports, Some(ListKind::Map(&["containerPort", "protocol"])));
        assert_eq!(key_default(port, "protocol"), Some(&Value::from("TCP")));
        // A list without markers is atomic.
        assert!(matches!(
            child(elem.ty(), "args"),
            Type::List { kind: None, .. }
        ));
        // Inline ObjectMeta fields and map types.
        let meta = child(pod, "metadata");
        assert!(matches!(
            child(meta, "labels"),
            Type::Map { atomic: false, .. }
        ));
        assert!(matches!(
            child(meta, "finalizers"),
            Type::List {
                kind: Some(ListKind::Set),
                ..
            }
        ));
        assert!(is_declared(meta, "labels"));
        assert!(!is_declared(child(meta, "labels"), "app"));
        assert!(
            is_atomic_object(child(
                child(
                    child(for_kind("apps/v1", "Deployment").unwrap(), "spec"),
                    "selector"
                ),
                "x"
            )) || is_atomic_object(child(
                child(for_kind("apps/v1", "Deployment").unwrap(), "spec"),
                "selector"
            ))
        );
    }

    #[test]
    fn the_zero_object_is_what_go_prints_for_an_empty_struct() {
        let zero = zero(for_kind("apps/v1", "Deployment").unwrap());
        assert_eq!(zero["metadata"]["creationTimestamp"], Value::Null);
        assert!(zero["metadata"].get("labels").is_none());
        assert_eq!(zero["spec"]["strategy"], serde_json::json!({}));
        assert!(zero["spec"].get("replicas").is_none());
        assert_eq!(zero["spec"]["template"]["spec"]["containers"], Value::Null);
        assert!(zero["status"].is_object());
    }
}
