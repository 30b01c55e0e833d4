//! JSON written as upstream's API server writes it: Go's `encoding/json` over the Go types.
//! Clients see the difference, and some compare bodies byte for byte (the official Python
//! client's own tests compare error bodies), so everything the API server sends is written here.
//!
//! What the Go types decide, read from the schema table that the protobuf decoder walks
//! ([`crate::protobuf`]):
//! - members in the order the Go struct declares its fields, `kind` and `apiVersion` first
//!   (the embedded `TypeMeta`), embedded `json:",inline"` structs in place;
//! - what Go writes for a field the object does not hold: nothing for a nil pointer or an
//!   `omitempty` field, the zero object of a value struct (`"status":{"loadBalancer":{}}` of a
//!   Service), `null` for a nil slice or map without `omitempty` and for a zero `Time`;
//! - `omitempty` fields holding a zero value (`""`, `0`, `false`, an empty list or map) left out;
//! - map keys in byte order, strings escaped as Go escapes them (`<`, `>` and `&` as `\u003c`,
//!   `\u003e`, `\u0026`, and U+2028/U+2029).
//!
//! Objects of kinds the table does not know (custom resources), and the embedded JSON of
//! `RawExtension`s, are written as Go writes a `map[string]interface{}`: keys in byte order.
//! A member the table does not know is kept, after the known ones, rather than dropped.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::protobuf::model::{self, Card, Field, INLINE, OMITEMPTY, POINTER, Special, Ty};

/// `object` as upstream writes it; its type is named by its own `apiVersion` and `kind`.
pub fn to_vec(object: &Value) -> Vec<u8> {
    to_vec_split(object).0
}

/// `object` in the form upstream holds it: what Go's types keep of it, as [`to_vec`] writes it
/// (zero value structs present, `omitempty` zeros gone). Objects are stored in this form, so that
/// what a client reads and sends back compares equal to what is stored.
pub fn normalize(object: &Value) -> Value {
    serde_json::from_slice(&to_vec(object)).unwrap_or_else(|_| object.clone())
}

/// [`to_vec`], and where the members after `kind` and `apiVersion` start in it (so that `{`
/// followed by the rest is the object as a list item, which typed lists write without them).
pub fn to_vec_split(object: &Value) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(256);
    if object.get("kind").and_then(Value::as_str) == Some("Table") {
        write_table(object, &mut out);
        return (out, 1);
    }
    write_typed(type_of(object), object, true, &mut out);
    let after_type = ["kind", "apiVersion"]
        .iter()
        .filter_map(|key| object.get(*key))
        .map(|value| {
            // `"kind":` (or `"apiVersion":`), the value, and the comma before the next.
            let mut member = Vec::new();
            write_value(value, &mut member);
            member.len() + 4
        })
        .sum::<usize>();
    let key_lengths = ["kind", "apiVersion"]
        .iter()
        .filter(|key| object.get(**key).is_some())
        .map(|key| key.len())
        .sum::<usize>();
    let at = (1 + after_type + key_lengths).min(out.len().saturating_sub(1));
    // Past the comma before the first other member, or at the closing brace.
    let at = match out.get(at) {
        Some(b',') => at + 1,
        _ => at,
    };
    (out, at)
}

/// Whether objects of `api_version` `kind` are written by their Go type (else as a map: keys in
/// byte order at every level, as upstream writes custom resources).
pub fn is_typed(api_version: &str, kind: &str) -> bool {
    type_named(api_version, kind).is_some()
}

/// The message of an object named by its `apiVersion` and `kind`: a served kind, or one of the
/// `meta.k8s.io` types the API writes (`Status`, `APIResourceList`, ...).
fn type_of(object: &Value) -> Option<u16> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    type_named(api_version, object.get("kind").and_then(Value::as_str)?)
}

fn type_named(api_version: &str, kind: &str) -> Option<u16> {
    model::message_for_kind(api_version, kind).or_else(|| {
        matches!(
            api_version,
            "" | "v1" | "meta.k8s.io/v1" | "meta.k8s.io/v1beta1"
        )
        .then(|| model::message_by_name(&format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}")))
        .flatten()
    })
}

/// A `meta.k8s.io` Table, which has no protobuf form: its members and those of its columns
/// and rows in Go's order; each row's object by its own kind.
fn write_table(table: &Value, out: &mut Vec<u8>) {
    const TABLE: &[&str] = &[
        "kind",
        "apiVersion",
        "metadata",
        "columnDefinitions",
        "rows",
    ];
    const COLUMN: &[&str] = &["name", "type", "format", "description", "priority"];
    const ROW: &[&str] = &["cells", "conditions", "object"];
    let ordered = |value: &Value,
                   order: &[&str],
                   out: &mut Vec<u8>,
                   nested: &dyn Fn(&str, &Value, &mut Vec<u8>)| {
        let Some(map) = value.as_object() else {
            write_value(value, out);
            return;
        };
        out.push(b'{');
        let mut first = true;
        for key in order {
            if let Some(item) = map.get(*key) {
                key_of(key, &mut first, out);
                nested(key, item, out);
            }
        }
        for (key, item) in map {
            if !order.contains(&key.as_str()) {
                member(key, item, &mut first, out);
            }
        }
        out.push(b'}');
    };
    let list = |items: &Value, out: &mut Vec<u8>, each: &dyn Fn(&Value, &mut Vec<u8>)| {
        let Some(items) = items.as_array() else {
            write_value(items, out);
            return;
        };
        out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            each(item, out);
        }
        out.push(b']');
    };
    ordered(table, TABLE, out, &|key, value, out| match key {
        "metadata" => write_typed(
            model::message_by_name("k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta"),
            value,
            false,
            out,
        ),
        "columnDefinitions" => list(value, out, &|column, out| {
            ordered(column, COLUMN, out, &|_, v, out| write_value(v, out));
        }),
        "rows" => list(value, out, &|row, out| {
            ordered(row, ROW, out, &|key, v, out| match key {
                "object" => write_typed(type_of(v), v, true, out),
                _ => write_value(v, out),
            });
        }),
        _ => write_value(value, out),
    });
}

/// An object of `api_version` `kind` (which need not carry them, as a list's items) as upstream
/// writes it.
pub fn to_vec_as(api_version: &str, kind: &str, object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_typed(
        model::message_for_kind(api_version, kind),
        object,
        true,
        &mut out,
    );
    out
}

/// An object of the `meta.k8s.io/v1` type `name` (`Status`, `APIResourceList`, ...), which the
/// table knows by its Go name only.
pub fn to_vec_meta(name: &str, object: &Value) -> Vec<u8> {
    if name == "Table" {
        let mut out = Vec::new();
        write_table(object, &mut out);
        return out;
    }
    let index = model::message_by_name(&format!("k8s.io.apimachinery.pkg.apis.meta.v1.{name}"));
    let mut out = Vec::with_capacity(256);
    write_typed(index, object, true, &mut out);
    out
}

/// Writes `value`, of message `index` when known, else as untyped JSON; `type_meta` puts
/// `kind` and `apiVersion` first.
fn write_typed(index: Option<u16>, value: &Value, type_meta: bool, out: &mut Vec<u8>) {
    match (index, value) {
        (Some(index), Value::Object(map)) => write_object(index, map, type_meta, out),
        (_, Value::Object(map)) if type_meta => {
            out.push(b'{');
            let mut first = true;
            for key in ["kind", "apiVersion"] {
                if let Some(v) = map.get(key) {
                    member(key, v, &mut first, out);
                }
            }
            for (key, v) in map {
                if key != "kind" && key != "apiVersion" {
                    member(key, v, &mut first, out);
                }
            }
            out.push(b'}');
        }
        _ => write_value(value, out),
    }
}

fn member(key: &str, value: &Value, first: &mut bool, out: &mut Vec<u8>) {
    key_of(key, first, out);
    write_value(value, out);
}

fn key_of(key: &str, first: &mut bool, out: &mut Vec<u8>) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    write_string(key, out);
    out.push(b':');
}

/// How a message's object is written, worked out once per message: its fields in declaration
/// order with those of embedded (`inline`) structs in place, their JSON names for look-up, and
/// what Go writes for each when the object does not hold it.
struct Layout {
    /// The fields in the order they are written.
    fields: Vec<&'static Field>,
    /// (JSON name, position in `fields`), sorted by name.
    by_name: Vec<(&'static str, usize)>,
    /// What Go writes for each field the object does not hold (`None`: nothing).
    zeros: Vec<Option<Box<[u8]>>>,
}

impl Layout {
    fn new(index: u16) -> Layout {
        let mut fields = Vec::new();
        let mut zeros = Vec::new();
        Self::flatten(index, &mut fields, &mut zeros);
        let mut by_name: Vec<(&'static str, usize)> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.json, i))
            .collect();
        // Go gives a struct's own field precedence over an embedded one of the same name.
        by_name.sort_by_key(|(name, _)| *name);
        by_name.dedup_by_key(|(name, _)| *name);
        Layout {
            fields,
            by_name,
            zeros,
        }
    }

    fn flatten(index: u16, fields: &mut Vec<&'static Field>, zeros: &mut Vec<Option<Box<[u8]>>>) {
        let Some(message) = model::message(index) else {
            return;
        };
        for field in model::declared_fields(index) {
            if field.has(INLINE) {
                if let Ty::M(inner) = field.ty {
                    Self::flatten(inner, fields, zeros);
                }
                continue;
            }
            fields.push(field);
            zeros.push(crate::protobuf::zero_field(message, field).map(|zero| {
                let mut bytes = Vec::new();
                write_field(field, &zero, &mut bytes);
                bytes.into_boxed_slice()
            }));
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.by_name
            .binary_search_by(|(n, _)| (*n).cmp(name))
            .ok()
            .and_then(|i| self.by_name.get(i))
            .map(|(_, position)| *position)
    }
}

static LAYOUTS: OnceLock<Box<[OnceLock<Layout>]>> = OnceLock::new();

fn layout(index: u16) -> Option<&'static Layout> {
    let table = LAYOUTS.get_or_init(|| {
        (0..model::messages().len())
            .map(|_| OnceLock::new())
            .collect()
    });
    Some(
        table
            .get(usize::from(index))?
            .get_or_init(|| Layout::new(index)),
    )
}

/// A message's object: its fields in declaration order.
fn write_object(index: u16, map: &Map<String, Value>, type_meta: bool, out: &mut Vec<u8>) {
    let (Some(message), Some(layout)) = (model::message(index), layout(index)) else {
        write_value(&Value::Object(map.clone()), out);
        return;
    };
    if message.special != Special::None {
        write_special(index, &Value::Object(map.clone()), out);
        return;
    }
    out.push(b'{');
    let mut first = true;
    if type_meta {
        for key in ["kind", "apiVersion"] {
            if let Some(v) = map.get(key) {
                member(key, v, &mut first, out);
            }
        }
    }
    // The value the object holds for each field, by position (on the stack for the usual sizes).
    let mut stack: [Option<&Value>; 64] = [None; 64];
    let mut heap: Vec<Option<&Value>>;
    let held: &mut [Option<&Value>] = if layout.fields.len() <= stack.len() {
        &mut stack[..layout.fields.len()]
    } else {
        heap = vec![None; layout.fields.len()];
        &mut heap
    };
    let mut unknown = Vec::new();
    for (key, value) in map {
        match layout.position(key) {
            Some(position) => {
                if let Some(slot) = held.get_mut(position) {
                    *slot = Some(value);
                }
            }
            None if type_meta && (key == "kind" || key == "apiVersion") => {}
            None => unknown.push((key, value)),
        }
    }
    for ((field, value), zero) in layout.fields.iter().zip(held.iter()).zip(&layout.zeros) {
        match value.filter(|v| !v.is_null()) {
            Some(value) if !omitted(field, value) => {
                key_of(field.json, &mut first, out);
                write_field(field, value, out);
            }
            Some(_) => {}
            None => {
                if let Some(zero) = zero {
                    key_of(field.json, &mut first, out);
                    out.extend_from_slice(zero);
                }
            }
        }
    }
    for (key, value) in unknown {
        member(key, value, &mut first, out);
    }
    out.push(b'}');
}

/// Whether Go leaves out a field holding `value`: an `omitempty` value field holding its zero
/// value, or an empty slice or map.
fn omitted(field: &Field, value: &Value) -> bool {
    if !field.has(OMITEMPTY) {
        return false;
    }
    match (field.card, value) {
        (Card::Repeated, Value::Array(items)) => items.is_empty(),
        (Card::Map, Value::Object(members)) => members.is_empty(),
        (Card::One, _) if field.has(POINTER) => false,
        (Card::One, value) => match field.ty {
            Ty::M(target) => {
                // Structs are never empty to Go, but named slice types are.
                model::message(target).is_some_and(|m| m.special == Special::ListWrapper)
                    && value.as_array().is_some_and(Vec::is_empty)
            }
            _ => match value {
                Value::String(s) => s.is_empty(),
                Value::Bool(b) => !b,
                Value::Number(n) => n.as_f64() == Some(0.0),
                _ => false,
            },
        },
        _ => false,
    }
}

fn write_field(field: &Field, value: &Value, out: &mut Vec<u8>) {
    let target = match field.ty {
        Ty::M(target) => Some(target),
        _ => None,
    };
    match (field.card, value) {
        (Card::One, value) => write_typed(target, value, false, out),
        (Card::Repeated, Value::Array(items)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_typed(target, item, false, out);
            }
            out.push(b']');
        }
        (Card::Map, Value::Object(members)) => {
            out.push(b'{');
            let mut first = true;
            for (key, item) in members {
                key_of(key, &mut first, out);
                write_typed(target, item, false, out);
            }
            out.push(b'}');
        }
        (_, other) => write_value(other, out),
    }
}

/// Messages with a JSON form of their own: scalars as they are; the schema-or-something types
/// of CRD schemas as their schema when they hold one.
fn write_special(index: u16, value: &Value, out: &mut Vec<u8>) {
    let special = model::message(index).map_or(Special::None, |m| m.special);
    let schema = || {
        model::message(index)?
            .fields
            .iter()
            .find_map(|f| match f.ty {
                Ty::M(target) => Some(target),
                _ => None,
            })
    };
    match (special, value) {
        (
            Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStringArray,
            Value::Object(map),
        ) => match schema() {
            Some(target) => write_object(target, map, false, out),
            None => write_value(value, out),
        },
        (Special::SchemaOrArray, Value::Array(items)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_typed(schema(), item, false, out);
            }
            out.push(b']');
        }
        _ => write_value(value, out),
    }
}

/// Untyped JSON, as Go writes an `interface{}`: object keys in byte order.
fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            let mut first = true;
            for (key, item) in map {
                member(key, item, &mut first, out);
            }
            out.push(b'}');
        }
    }
}

/// A string as Go's `encoding/json` escapes it (HTML-safe).
pub fn write_string(text: &str, out: &mut Vec<u8>) {
    // serde_json escapes as Go does, but for the HTML-safe escapes (`<`, `>`, `&`) and the
    // line and paragraph separators (E2 80 A8/A9): strings without them take its fast path.
    if !text.bytes().any(|b| matches!(b, b'<' | b'>' | b'&' | 0xe2)) {
        let _ = serde_json::to_writer(&mut *out, text);
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // U+2028 and U+2029 (E2 80 A8/A9) are the only escapes outside ASCII.
        let separator = b == 0xe2
            && bytes.get(i + 1) == Some(&0x80)
            && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9));
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f | b'<' | b'>' | b'&' => b"",
            _ if separator => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            let (code, width) = if separator {
                (0x2028 + u32::from(bytes[i + 2] - 0xa8), 3)
            } else {
                (u32::from(b), 1)
            };
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[((code >> shift) & 0xf) as usize]);
            }
            i += width;
        } else {
            out.extend_from_slice(escape);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn a_status_reads_as_upstreams() {
        let status = json!({"apiVersion": "v1", "code": 409, "details": {"kind": "services",
            "name": "mock-2"}, "kind": "Status", "message": "services \"mock-2\" already exists",
            "metadata": {}, "reason": "AlreadyExists", "status": "Failure"});
        assert_eq!(
            text(to_vec_meta("Status", &status)),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"services \"mock-2\" already exists","reason":"AlreadyExists","details":{"name":"mock-2","kind":"services"},"code":409}"#
        );
    }

    #[test]
    fn objects_follow_the_go_types() {
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "uid": "u",
                         "resourceVersion": "5", "creationTimestamp": "2026-11-27T08:00:00Z",
                         "labels": {"b": "2", "a": "1"}},
            "spec": {"type": "ClusterIP", "ports": [{"protocol": "TCP", "port": 80,
                     "targetPort": 8080, "name": "", "nodePort": 0}],
                     "clusterIP": "10.0.0.1", "selector": {"app": "web"}}});
        assert_eq!(
            text(to_vec(&service)),
            concat!(
                r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","#,
                r#""uid":"u","resourceVersion":"5","creationTimestamp":"2026-11-27T08:00:00Z","#,
                r#""labels":{"a":"1","b":"2"}},"spec":{"ports":[{"protocol":"TCP","port":80,"#,
                r#""targetPort":8080}],"selector":{"app":"web"},"clusterIP":"10.0.0.1","#,
                r#""type":"ClusterIP"},"status":{"loadBalancer":{}}}"#
            )
        );
        // A pod template's metadata without a creation time: Go's zero Time is null.
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let written = text(to_vec(&deployment));
        assert!(
            written.contains(r#""template":{"metadata":{"creationTimestamp":null,"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"i","resources":{}}]}}"#),
            "{written}"
        );
        assert!(written.contains(r#""strategy":{}"#), "{written}");
        assert!(written.ends_with(r#""status":{}}"#), "{written}");
    }

    #[test]
    fn unknown_kinds_and_members_are_kept_in_key_order() {
        let custom = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"z": 1,
            "a": "<&>"}, "metadata": {"name": "w"}});
        assert_eq!(
            text(to_vec(&custom)),
            r#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"},"spec":{"a":"\u003c\u0026\u003e","z":1}}"#
        );
        let extra = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "zzz": true});
        assert_eq!(
            text(to_vec(&extra)),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","creationTimestamp":null},"zzz":true}"#
        );
    }

    #[test]
    fn list_items_start_after_the_type() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "creationTimestamp": null}, "data": {"a": "<"}});
        let (json, at) = to_vec_split(&config_map);
        let item = format!("{{{}", String::from_utf8_lossy(&json[at..]));
        assert_eq!(
            item,
            r#"{"metadata":{"name":"c","creationTimestamp":null},"data":{"a":"\u003c"}}"#
        );
        let (json, at) = to_vec_split(&json!({"kind": "Custom", "apiVersion": "x/v1"}));
        assert_eq!(&json[at..], b"}");
        let (json, at) = to_vec_split(&json!({"a": 1}));
        assert_eq!((text(json), at), (r#"{"a":1}"#.to_owned(), 1));
    }

    #[test]
    fn tables_and_statuses_are_meta_types() {
        let table = json!({"apiVersion": "meta.k8s.io/v1", "kind": "Table",
            "rows": [{"object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": {"name": "p"}}, "cells": ["p"]}],
            "metadata": {"resourceVersion": "1"},
            "columnDefinitions": [{"type": "string", "name": "Name", "priority": 0,
                                   "format": "name", "description": "d"}]});
        assert_eq!(
            text(to_vec(&table)),
            concat!(
                r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"#,
                r#""columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"d","priority":0}],"#,
                r#""rows":[{"cells":["p"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","creationTimestamp":null}}}]}"#
            )
        );
        let status = json!({"kind": "Status", "apiVersion": "v1", "code": 200,
            "status": "Success", "metadata": {}});
        assert_eq!(
            text(to_vec(&status)),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":200}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = Vec::new();
        write_string("a\"b\\c\nd\u{1}\u{2028}é\u{8}", &mut out);
        assert_eq!(text(out), r#""a\"b\\c\nd\u0001\u2028é\b""#);
    }
}
