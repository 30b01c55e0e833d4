//! A custom resource's structural schema applied to its objects, as upstream's apiextensions
//! server does on every write: unknown fields pruned ([`prune`], their paths returned for
//! `fieldValidation`), defaults filled in ([`default`]) and the value validated ([`validate`])
//! with kube-openapi's messages as upstream turns them into field errors. One walk per job over
//! the same schema type (`k8s-openapi`'s `JSONSchemaProps`).
//!
//! Covered: `type` (with `nullable` and `x-kubernetes-int-or-string`), `enum`, `required`,
//! `properties`/`additionalProperties`/`items`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource` (its `apiVersion`, `kind` and `metadata` kept), `default`,
//! string length and `pattern`, number bounds and `multipleOf`, item and property counts,
//! `uniqueItems`; the uniqueness of `x-kubernetes-list-type` `set` and `map` lists
//! ([`list_set_and_map_errors`]). Not yet: `allOf`/`anyOf`/`oneOf`/`not`, `format`. CEL rules
//! (`x-kubernetes-validations`) are [`crate::cel`]'s. [`structural_errors`] refuses the common
//! non-structural schemas when a CRD is written.

mod listtype;

pub use listtype::list_set_and_map_errors;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Map, Value};

use crate::field::{BadValue, FieldError, Path};

/// The fields every object (and every embedded resource) keeps whatever its schema says.
const OBJECT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Whether unknown fields of an object node are kept.
fn preserves(schema: &JSONSchemaProps) -> bool {
    schema.x_kubernetes_preserve_unknown_fields == Some(true)
}

/// Whether any node of `schema` declares a default.
pub fn has_defaults(schema: &JSONSchemaProps) -> bool {
    schema.default.is_some()
        || schema
            .properties
            .iter()
            .flatten()
            .any(|(_, c)| has_defaults(c))
        || items(schema).is_some_and(has_defaults)
        || additional(schema).is_some_and(has_defaults)
}

/// Where a schema's defaults are, when they are all at fixed object paths (none under an
/// array's items or a map's values): enough to tell from an object's JSON, without decoding
/// it, that [`default`] would change nothing.
#[derive(Debug)]
pub struct DefaultPaths {
    root: DefaultNode,
}

/// The properties of one object that hold defaults or lead to some.
#[derive(Debug, Default)]
struct DefaultNode {
    /// Each such property: its name, whether it has a default, and the defaults below it.
    children: Vec<(String, bool, Option<DefaultNode>)>,
}

impl DefaultPaths {
    /// The default paths of `schema`, or `None` when a default sits under an array or a map.
    pub fn of(schema: &JSONSchemaProps) -> Option<DefaultPaths> {
        Some(DefaultPaths {
            root: default_node(schema)?,
        })
    }

    /// Whether [`default`] would change nothing in the object written as `json`: every
    /// defaulted property is present (under parents that are). `false` also when the JSON
    /// cannot be read without decoding (an escaped key).
    pub fn all_present(&self, json: &[u8]) -> bool {
        all_present(&self.root, json)
    }
}

fn default_node(schema: &JSONSchemaProps) -> Option<DefaultNode> {
    if items(schema).is_some_and(has_defaults) || additional(schema).is_some_and(has_defaults) {
        return None;
    }
    let mut node = DefaultNode::default();
    for (name, child) in schema.properties.iter().flatten() {
        if !has_defaults(child) {
            continue;
        }
        let below = child
            .properties
            .iter()
            .flatten()
            .any(|(_, c)| has_defaults(c))
            || items(child).is_some_and(has_defaults)
            || additional(child).is_some_and(has_defaults);
        let sub = if below {
            Some(default_node(child)?)
        } else {
            None
        };
        node.children
            .push((name.clone(), child.default.is_some(), sub));
    }
    Some(node)
}

fn all_present(node: &DefaultNode, json: &[u8]) -> bool {
    use serde_json::value::RawValue;
    let Ok(members) = serde_json::from_slice::<std::collections::HashMap<&str, &RawValue>>(json)
    else {
        return false;
    };
    node.children.iter().all(|(name, has_default, sub)| {
        match (members.get(name.as_str()), sub) {
            // Missing: defaulted if it has a default; nothing below it is.
            (None, _) => !has_default,
            (Some(value), Some(sub)) if value.get().starts_with('{') => {
                all_present(sub, value.get().as_bytes())
            }
            (Some(_), _) => true,
        }
    })
}

/// Whether `schema` is an embedded resource (`x-kubernetes-embedded-resource`: its
/// `apiVersion`, `kind` and `metadata` are kept, and rules see them).
pub(crate) fn embedded(schema: &JSONSchemaProps) -> bool {
    schema.x_kubernetes_embedded_resource == Some(true)
}

/// The schema of an array's items.
pub(crate) fn items(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match schema.items.as_ref()? {
        JSONSchemaPropsOrArray::Schema(items) => Some(items),
        JSONSchemaPropsOrArray::Schemas(list) => list.first(),
    }
}

/// The schema of an object's other properties (a map's values).
pub(crate) fn additional(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match schema.additional_properties.as_ref()? {
        JSONSchemaPropsOrBool::Schema(values) => Some(values),
        JSONSchemaPropsOrBool::Bool(_) => None,
    }
}

/// Why `schema` is not structural, as upstream's `ValidateStructural` words the common cases:
/// an object at the root, a type on every specified field and array items (unless unknown
/// fields are kept there, it is int-or-string or an embedded resource), and a root `metadata`
/// that specifies no more than `name` and `generateName`.
pub fn structural_errors(schema: &JSONSchemaProps, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match schema.type_.as_deref() {
        None | Some("") => errs.push(FieldError::required(
            &path.child("type"),
            "must not be empty at the root",
        )),
        Some("object") => {}
        Some(other) => errs.push(FieldError::invalid(
            &path.child("type"),
            other,
            "must be object at the root",
        )),
    }
    if let Some(metadata) = schema.properties.as_ref().and_then(|p| p.get("metadata")) {
        let allowed = ["name", "generateName"];
        let extra = metadata
            .properties
            .iter()
            .flatten()
            .any(|(k, _)| !allowed.contains(&k.as_str()));
        if extra || metadata.type_.as_deref().is_some_and(|t| t != "object") {
            errs.push(FieldError::forbidden(
                &path.child("properties").key("metadata"),
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    typed_below(schema, path, &mut errs);
    errs
}

/// Every specified field and array item below `schema` has a type.
fn typed_below(schema: &JSONSchemaProps, path: &Path, errs: &mut Vec<FieldError>) {
    let untyped = |s: &JSONSchemaProps| {
        s.type_.as_deref().is_none_or(str::is_empty)
            && !preserves(s)
            && s.x_kubernetes_int_or_string != Some(true)
            && s.x_kubernetes_embedded_resource != Some(true)
    };
    for (key, child) in schema.properties.iter().flatten() {
        let at = path.child("properties").key(key);
        if untyped(child) {
            errs.push(FieldError::required(
                &at.child("type"),
                "must not be empty for specified object fields",
            ));
        }
        typed_below(child, &at, errs);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        let at = path.child("items");
        if untyped(items) {
            errs.push(FieldError::required(
                &at.child("type"),
                "must not be empty for specified array items",
            ));
        }
        typed_below(items, &at, errs);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &schema.additional_properties {
        let at = path.child("additionalProperties");
        if untyped(values) {
            errs.push(FieldError::required(
                &at.child("type"),
                "must not be empty for specified object fields",
            ));
        }
        typed_below(values, &at, errs);
    }
}

/// Removes the fields `schema` does not specify from `value` (the root object: `apiVersion`,
/// `kind` and `metadata` stay); returns their paths (`spec.foo`), as upstream reports them for
/// `fieldValidation`.
pub fn prune(value: &mut Value, schema: &JSONSchemaProps) -> Vec<String> {
    let mut unknown = Vec::new();
    prune_at(value, schema, "", true, &mut unknown);
    unknown
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn prune_at(
    value: &mut Value,
    schema: &JSONSchemaProps,
    path: &str,
    resource: bool,
    unknown: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let resource = resource || embedded(schema);
            let properties = schema.properties.as_ref();
            let values = additional(schema);
            let keep_all = preserves(schema)
                || matches!(
                    schema.additional_properties,
                    Some(JSONSchemaPropsOrBool::Bool(true))
                );
            let mut gone = Vec::new();
            for (key, child) in map.iter_mut() {
                let at = join(path, key);
                if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
                    prune_at(child, child_schema, &at, false, unknown);
                } else if let Some(values) = values {
                    prune_at(child, values, &at, false, unknown);
                } else if resource && OBJECT_FIELDS.contains(&key.as_str()) {
                } else if !keep_all {
                    gone.push(key.clone());
                    unknown.push(at);
                }
            }
            for key in gone {
                map.remove(&key);
            }
        }
        Value::Array(list) => {
            if let Some(items) = items(schema) {
                for (i, child) in list.iter_mut().enumerate() {
                    prune_at(child, items, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Fills in the defaults `schema` gives for absent properties, outside in, as upstream's
/// structural defaulting does (a default is itself defaulted below it).
pub fn default(value: &mut Value, schema: &JSONSchemaProps) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = &schema.properties {
                for (key, child) in properties {
                    if let Some(default) = &child.default
                        && !map.contains_key(key)
                    {
                        map.insert(key.clone(), default.0.clone());
                    }
                }
                for (key, child) in properties {
                    if let Some(field) = map.get_mut(key) {
                        default(field, child);
                    }
                }
            }
            if let Some(values) = additional(schema) {
                let known = schema.properties.as_ref();
                for (key, field) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(key)) {
                        default(field, values);
                    }
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = items(schema) {
                for item in list {
                    default(item, items);
                }
            }
        }
        _ => {}
    }
}

/// Every way `value` breaks `schema`, with upstream's paths and messages.
pub fn validate(value: &Value, schema: &JSONSchemaProps) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_at(value, schema, &mut Vec::new(), &mut errs);
    errs
}

/// A path's field-error form and kube-openapi's name for it (`spec.replicas`; `body` at the
/// root).
fn paths(segments: &[String]) -> (Path, String) {
    let mut path = Path::new(segments.first().map_or("", String::as_str));
    let mut name = segments.first().cloned().unwrap_or_default();
    for segment in segments.iter().skip(1) {
        if let Some(index) = segment
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse::<usize>().ok())
        {
            path = path.index(index);
            name.push_str(segment);
        } else {
            path = path.child(segment);
            name.push('.');
            name.push_str(segment);
        }
    }
    if name.is_empty() {
        name = "body".to_owned();
    }
    (path, name)
}

/// kube-openapi's name for a JSON value's type.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(value: &Value, schema: &JSONSchemaProps) -> bool {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return matches!(type_name(value), "integer" | "string");
    }
    match schema.type_.as_deref() {
        None | Some("") => true,
        Some("number") => matches!(type_name(value), "integer" | "number"),
        Some("integer") => {
            type_name(value) == "integer"
                || value
                    .as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        }
        Some(expected) => type_name(value) == expected,
    }
}

/// A schema's count bound as a length.
fn count(bound: i64) -> usize {
    usize::try_from(bound).unwrap_or(0)
}

/// A number as kube-openapi prints bounds (`1`, `1.5`).
fn number(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

fn bad(value: &Value) -> BadValue {
    match value {
        Value::String(s) => BadValue::from(s.as_str()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => BadValue::Int(i),
            None => BadValue::Other(n.to_string()),
        },
        Value::Bool(b) => BadValue::Bool(*b),
        Value::Null => BadValue::Null,
        other => BadValue::Other(other.to_string()),
    }
}

fn validate_at(
    value: &Value,
    schema: &JSONSchemaProps,
    segments: &mut Vec<String>,
    errs: &mut Vec<FieldError>,
) {
    let (path, name) = paths(segments);
    if value.is_null() {
        if schema.nullable == Some(true) || schema.type_.is_none() && !preserves(schema) {
            return;
        }
        if schema.type_.is_some() || schema.x_kubernetes_int_or_string == Some(true) {
            let expected = expected_type(schema);
            errs.push(FieldError::type_invalid(
                &path,
                BadValue::from("null"),
                &format!("{name} in body must be of type {expected}: \"null\""),
            ));
        }
        return;
    }
    if !type_fits(value, schema) {
        let expected = expected_type(schema);
        let actual = type_name(value);
        errs.push(FieldError::type_invalid(
            &path,
            BadValue::from(actual),
            &format!("{name} in body must be of type {expected}: \"{actual}\""),
        ));
        return;
    }
    if let Some(allowed) = &schema.enum_
        && !allowed.iter().any(|a| a.0 == *value)
    {
        let shown: Vec<String> = allowed
            .iter()
            .map(|a| match &a.0 {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let shown: Vec<&str> = shown.iter().map(String::as_str).collect();
        errs.push(FieldError::not_supported(&path, bad(value), &shown));
    }
    match value {
        Value::String(s) => validate_string(s, schema, &path, &name, errs),
        Value::Number(n) => {
            if let Some(f) = n.as_f64() {
                validate_number(value, f, schema, &path, &name, errs);
            }
        }
        Value::Array(list) => {
            let len = list.len() as i64;
            if let Some(max) = schema.max_items
                && len > max
            {
                errs.push(FieldError::too_many(&path, list.len(), count(max)));
            }
            if let Some(min) = schema.min_items
                && len < min
            {
                errs.push(FieldError::invalid(
                    &path,
                    bad(value),
                    &format!("{name} in body should have at least {min} items"),
                ));
            }
            if schema.unique_items == Some(true)
                && list.iter().enumerate().any(|(i, a)| list[..i].contains(a))
            {
                errs.push(FieldError::invalid(
                    &path,
                    bad(value),
                    &format!("{name} in body shouldn't contain duplicates"),
                ));
            }
            if let Some(items) = items(schema) {
                for (i, item) in list.iter().enumerate() {
                    segments.push(format!("[{i}]"));
                    validate_at(item, items, segments, errs);
                    segments.pop();
                }
            }
        }
        Value::Object(map) => validate_object(value, map, schema, segments, errs),
        _ => {}
    }
}

fn expected_type(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        "integer,string".to_owned()
    } else {
        schema.type_.clone().unwrap_or_default()
    }
}

fn validate_string(
    s: &str,
    schema: &JSONSchemaProps,
    path: &Path,
    name: &str,
    errs: &mut Vec<FieldError>,
) {
    let chars = s.chars().count() as i64;
    if let Some(max) = schema.max_length
        && chars > max
    {
        errs.push(FieldError::too_long(path, count(max)));
    }
    if let Some(min) = schema.min_length
        && chars < min
    {
        errs.push(FieldError::invalid(
            path,
            s,
            &format!("{name} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = &schema.pattern {
        match compiled(pattern) {
            Ok(re) if !re.is_match(s) => errs.push(FieldError::invalid(
                path,
                s,
                &format!("{name} in body should match '{pattern}'"),
            )),
            Ok(_) => {}
            Err(error) => errs.push(FieldError::invalid(
                path,
                s,
                &format!("{name} in body has an invalid pattern '{pattern}': {error}"),
            )),
        }
    }
}

/// `pattern` compiled, once per process (schemas are validated against many objects); the
/// cache is emptied when it grows past what any set of schemas plausibly holds.
fn compiled(pattern: &str) -> Result<regex::Regex, String> {
    const MAX_PATTERNS: usize = 4096;
    static PATTERNS: std::sync::Mutex<
        Option<std::collections::HashMap<String, Result<regex::Regex, String>>>,
    > = std::sync::Mutex::new(None);
    let mut patterns = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    let patterns = patterns.get_or_insert_with(Default::default);
    if let Some(found) = patterns.get(pattern) {
        return found.clone();
    }
    if patterns.len() >= MAX_PATTERNS {
        patterns.clear();
    }
    let made = regex::Regex::new(pattern).map_err(|e| e.to_string());
    patterns.insert(pattern.to_owned(), made.clone());
    made
}

fn validate_number(
    value: &Value,
    f: f64,
    schema: &JSONSchemaProps,
    path: &Path,
    name: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(max) = schema.maximum {
        let exclusive = schema.exclusive_maximum == Some(true);
        if f > max || exclusive && f == max {
            let relation = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                bad(value),
                &format!("{name} in body should be {relation} {}", number(max)),
            ));
        }
    }
    if let Some(min) = schema.minimum {
        let exclusive = schema.exclusive_minimum == Some(true);
        if f < min || exclusive && f == min {
            let relation = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                bad(value),
                &format!("{name} in body should be {relation} {}", number(min)),
            ));
        }
    }
    if let Some(factor) = schema.multiple_of
        && factor > 0.0
        && (f / factor).fract() != 0.0
    {
        errs.push(FieldError::invalid(
            path,
            bad(value),
            &format!("{name} in body should be a multiple of {}", number(factor)),
        ));
    }
}

fn validate_object(
    value: &Value,
    map: &Map<String, Value>,
    schema: &JSONSchemaProps,
    segments: &mut Vec<String>,
    errs: &mut Vec<FieldError>,
) {
    let (path, name) = paths(segments);
    let count = map.len() as i64;
    if let Some(max) = schema.max_properties
        && count > max
    {
        errs.push(FieldError::too_many(&path, map.len(), self::count(max)));
    }
    if let Some(min) = schema.min_properties
        && count < min
    {
        errs.push(FieldError::invalid(
            &path,
            bad(value),
            &format!("{name} in body should have at least {min} properties"),
        ));
    }
    for required in schema.required.iter().flatten() {
        if !map.contains_key(required) {
            segments.push(required.clone());
            errs.push(FieldError::required(&paths(segments).0, ""));
            segments.pop();
        }
    }
    let properties = schema.properties.as_ref();
    for (key, child) in map {
        let child_schema = properties
            .and_then(|p| p.get(key))
            .or_else(|| additional(schema));
        if let Some(child_schema) = child_schema {
            segments.push(key.clone());
            validate_at(child, child_schema, segments, errs);
            segments.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> JSONSchemaProps {
        serde_json::from_value(value).unwrap()
    }

    fn widget() -> JSONSchemaProps {
        schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                        "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
            },
        }))
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn non_structural_schemas_as_upstream_words_them() {
        let path = Path::new("spec")
            .child("versions")
            .index(0)
            .child("schema")
            .child("openAPIV3Schema");
        assert!(structural_errors(&widget(), &path).is_empty());
        let bad = schema(json!({
            "properties": {
                "spec": {"properties": {"list": {"type": "array", "items": {}}}},
                "free": {"x-kubernetes-preserve-unknown-fields": true},
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            },
        }));
        assert_eq!(
            messages(&structural_errors(&bad, &path)),
            [
                "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items.type: Required value: must not be empty for specified array items",
            ]
        );
        let string = schema(json!({"type": "string"}));
        assert_eq!(
            messages(&structural_errors(&string, &path)),
            [
                "spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"
            ]
        );
    }

    #[test]
    fn unknown_fields_are_pruned_where_the_schema_does_not_keep_them() {
        let mut object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
            "spec": {"size": 1, "extra": 1, "free": {"any": {"thing": 1}},
                     "labels": {"a": "b"}, "tags": ["x"]},
            "other": true,
        });
        let unknown = prune(&mut object, &widget());
        assert_eq!(unknown, ["other", "spec.extra"]);
        assert_eq!(
            object,
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
                "spec": {"size": 1, "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                         "tags": ["x"]},
            })
        );
    }

    #[test]
    fn defaults_fill_absent_fields_only() {
        let mut object = json!({"spec": {"size": 2}});
        default(&mut object, &widget());
        assert_eq!(object, json!({"spec": {"size": 2, "mode": "fast"}}));
        let mut set = json!({"spec": {"size": 2, "mode": "slow"}});
        default(&mut set, &widget());
        assert_eq!(set["spec"]["mode"], "slow");
    }

    #[test]
    fn validation_errors_as_upstream() {
        let object = json!({"spec": {"size": "3", "mode": "medium", "name": "Abcdefg",
                                     "tags": ["a", "b", "c"], "port": true,
                                     "labels": {"a": 1}}});
        assert_eq!(
            messages(&validate(&object, &widget())),
            [
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
                "spec.name: Too long: may not be more than 5 bytes",
                "spec.name: Invalid value: \"Abcdefg\": spec.name in body should match '^[a-z]+$'",
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
                "spec.tags: Too many: 3: must have at most 2 items",
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"spec": {"size": 11}}), &widget())),
            ["spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"]
        );
        assert_eq!(
            messages(&validate(&json!({"spec": {}}), &widget())),
            ["spec.size: Required value"]
        );
        assert!(validate(&json!({"spec": {"size": 3, "port": "http"}}), &widget()).is_empty());
    }

    #[test]
    fn default_paths_tell_without_decoding_that_nothing_is_missing() {
        let spec_defaults = schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "mode": {"type": "string", "default": "fast"},
                    "inner": {"type": "object", "properties": {"on": {"type": "boolean", "default": false}}},
                    "plain": {"type": "string"},
                }},
            },
        }));
        let paths = DefaultPaths::of(&spec_defaults).unwrap();
        let check = |object: Value| {
            let present = paths.all_present(&serde_json::to_vec(&object).unwrap());
            let mut defaulted = object.clone();
            default(&mut defaulted, &spec_defaults);
            // The cheap answer agrees with defaulting itself.
            assert_eq!(present, defaulted == object, "{object}");
            present
        };
        assert!(check(
            json!({"spec": {"mode": "slow", "inner": {"on": true}}})
        ));
        assert!(
            check(json!({"spec": {"mode": "slow"}})),
            "no inner object: nothing below it"
        );
        assert!(
            check(json!({"metadata": {"name": "a"}})),
            "no spec: nothing below it"
        );
        assert!(!check(json!({"spec": {"inner": {"on": true}}})));
        assert!(!check(json!({"spec": {"mode": "x", "inner": {}}})));
        assert!(
            check(json!({"spec": {"mode": null, "inner": {"on": true}}})),
            "null is kept"
        );
        // A default under an array's items or a map's values: always decoded.
        let listed = schema(json!({"type": "object", "properties": {"items": {
            "type": "array", "items": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}},
        }}}));
        assert!(DefaultPaths::of(&listed).is_none());
    }
}
