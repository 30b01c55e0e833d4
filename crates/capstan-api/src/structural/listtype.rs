//! The uniqueness a custom resource's `x-kubernetes-list-type` promises, checked on its objects
//! as upstream's `structurallisttype.ValidateListSetsAndMaps`: a `set` list holds no element
//! twice, a `map` list holds objects (or nulls) and no two with the same values of its
//! `x-kubernetes-list-map-keys` (a missing key counts as one value of its own). Each value seen
//! again is reported once, at its second place, as `Duplicate value: ...` in Go's notation of
//! the element (sets) or of its keys (maps).

use std::collections::HashMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{Map, Value};

use super::{additional, bad};
use crate::field::{BadValue, FieldError, Path};

/// The list-type errors of `object` (a custom object) under `schema`, from its root.
pub fn list_set_and_map_errors(object: &Value, schema: &JSONSchemaProps) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(members) = object {
        walk_object(members, schema, None, &mut errs);
    }
    errs
}

/// The path of member `key` under `at` (the root's members start a path).
fn child(at: Option<&Path>, key: &str) -> Path {
    at.map_or_else(|| Path::new(key), |p| p.child(key))
}

fn walk_object(
    members: &Map<String, Value>,
    schema: &JSONSchemaProps,
    at: Option<&Path>,
    errs: &mut Vec<FieldError>,
) {
    if let Some(values) = additional(schema) {
        for (key, value) in members {
            let path = at.map_or_else(|| Path::new("").key(key), |p| p.key(key));
            walk(value, values, &path, errs);
        }
    }
    if let Some(properties) = &schema.properties {
        for (key, value) in members {
            if let Some(property) = properties.get(key) {
                walk(value, property, &child(at, key), errs);
            }
        }
    }
}

fn walk(value: &Value, schema: &JSONSchemaProps, path: &Path, errs: &mut Vec<FieldError>) {
    match value {
        Value::Array(items) => walk_list(items, schema, path, errs),
        Value::Object(members) => walk_object(members, schema, Some(path), errs),
        _ => {}
    }
}

fn walk_list(items: &[Value], schema: &JSONSchemaProps, path: &Path, errs: &mut Vec<FieldError>) {
    match schema.x_kubernetes_list_type.as_deref() {
        Some("set") => {
            for i in repeated(items.iter()) {
                errs.push(FieldError::duplicate(&path.index(i), bad_value(&items[i])));
            }
        }
        Some("map") => map_errors(items, schema, path, errs),
        _ => {}
    }
    if let Some(element) = super::items(schema) {
        for (i, item) in items.iter().enumerate() {
            walk(item, element, &path.index(i), errs);
        }
    }
}

/// The places where a value is seen for the second time.
fn repeated<'a>(values: impl Iterator<Item = &'a Value>) -> Vec<usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut again = Vec::new();
    for (i, value) in values.enumerate() {
        let times = seen.entry(identity(value)).or_default();
        *times += 1;
        if *times == 2 {
            again.push(i);
        }
    }
    again
}

/// What tells values apart as Go compares decoded JSON: integers and other numbers differ
/// (`1` is not `1.0`), objects by their members whatever the order.
fn identity(value: &Value) -> String {
    let kind = match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => "i",
        Value::Number(_) => "f",
        _ => "",
    };
    format!(
        "{kind}{}",
        String::from_utf8_lossy(&crate::gojson::to_vec(value))
    )
}

fn map_errors(items: &[Value], schema: &JSONSchemaProps, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(i) = items
        .iter()
        .position(|item| !matches!(item, Value::Object(_) | Value::Null))
    {
        errs.push(FieldError::invalid(
            &path.index(i),
            bad(&items[i]),
            "must be an object for an array of list-type map",
        ));
        return;
    }
    let names = schema
        .x_kubernetes_list_map_keys
        .as_deref()
        .unwrap_or_default();
    // Each element's keys: the values it has of the key fields (a missing one left out).
    let keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut key = Map::new();
            if let Value::Object(members) = item {
                for name in names {
                    if let Some(value) = members.get(name) {
                        key.insert(name.clone(), value.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in repeated(keys.iter()) {
        errs.push(FieldError::duplicate(
            &path.index(i),
            BadValue::Other(go_syntax(&keys[i])),
        ));
    }
}

/// A list element as a field error shows it: scalars as themselves, the rest in Go's `%#v`.
fn bad_value(value: &Value) -> BadValue {
    match value {
        Value::Array(_) | Value::Object(_) => BadValue::Other(go_syntax(value)),
        Value::Number(n) if !(n.is_i64() || n.is_u64()) => BadValue::Other(n.to_string()),
        other => bad(other),
    }
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"a":1}`, keys sorted;
/// `[]interface {}{"x", true}`; `interface {}(nil)` for null).
fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            keys.sort();
            let entries: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        go_syntax(&members[k])
                    )
                })
                .collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(object: Value, schema: Value) -> Vec<String> {
        let schema: JSONSchemaProps = serde_json::from_value(schema).unwrap();
        list_set_and_map_errors(&object, &schema)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn spec_list(list: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": list}}}})
    }

    #[test]
    fn a_set_reports_each_value_seen_again_once() {
        let set = spec_list(json!({"type": "array", "x-kubernetes-list-type": "set",
            "items": {"x-kubernetes-int-or-string": true}}));
        assert_eq!(
            messages(
                json!({"spec": {"items": ["a", "b", "a", "a", 1, 1, 1.0]}}),
                set.clone()
            ),
            [
                "spec.items[2]: Duplicate value: \"a\"",
                "spec.items[5]: Duplicate value: 1",
            ]
        );
        assert!(messages(json!({"spec": {"items": ["a", "b"]}}), set).is_empty());
        let objects = spec_list(json!({"type": "array", "x-kubernetes-list-type": "set",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}));
        assert_eq!(
            messages(
                json!({"spec": {"items": [{"b": [1, "x"], "a": null}, {"a": null, "b": [1, "x"]}]}}),
                objects
            ),
            [
                "spec.items[1]: Duplicate value: map[string]interface {}{\"a\":interface {}(nil), \"b\":[]interface {}{1, \"x\"}}"
            ]
        );
    }

    #[test]
    fn a_map_reports_elements_with_the_same_keys() {
        let one_key = spec_list(json!({"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"},
                "port": {"type": "integer"}}}}));
        assert_eq!(
            messages(
                json!({"spec": {"items": [{"name": "a", "port": 1}, {"name": "a", "port": 2},
                    {"port": 3}, null, {"name": "b"}]}}),
                one_key.clone()
            ),
            [
                "spec.items[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}",
                "spec.items[3]: Duplicate value: map[string]interface {}{}",
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"items": [{"name": "a"}, "x"]}}), one_key),
            [
                "spec.items[1]: Invalid value: \"x\": must be an object for an array of list-type map"
            ]
        );
        let two_keys = spec_list(json!({"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": {"type": "object", "properties": {"port": {"type": "integer"},
                "protocol": {"type": "string"}}}}));
        assert_eq!(
            messages(
                json!({"spec": {"items": [{"port": 80, "protocol": "TCP"},
                    {"port": 80, "protocol": "UDP"}, {"protocol": "TCP", "port": 80}]}}),
                two_keys
            ),
            [
                "spec.items[2]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}"
            ]
        );
    }

    #[test]
    fn lists_are_found_under_maps_and_lists() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "array",
                "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}}});
        assert_eq!(
            messages(json!({"spec": {"k": [["x", "x"], ["y"]]}}), schema),
            ["spec[k][0][1]: Duplicate value: \"x\""]
        );
    }
}
