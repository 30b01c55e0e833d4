//! A custom resource's structural schema applied to its objects, as upstream's apiextensions
//! server does on every write: unknown fields pruned ([`prune`], their paths returned for
//! `fieldValidation`), defaults filled in ([`default`]) and the value validated ([`validate`],
//! on update [`validate_update`], which lets unchanged values keep their errors as upstream's
//! ratcheting does) with kube-openapi's messages as upstream turns them into field errors. One
//! walk per job over the same schema type (`k8s-openapi`'s `JSONSchemaProps`).
//!
//! Covered: `type` (with `nullable` and `x-kubernetes-int-or-string`), `enum`, `required`,
//! `properties`/`additionalProperties`/`items`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource` (its `apiVersion`, `kind` and `metadata` kept), `default`,
//! string length and `pattern`, number bounds and `multipleOf`, item and property counts,
//! `uniqueItems`, the string formats upstream keeps (`format.rs`), the `anyOf`/`oneOf`/`allOf`/
//! `not` alternatives; the uniqueness of `x-kubernetes-list-type` `set` and `map` lists
//! ([`list_set_and_map_errors`]). CEL rules (`x-kubernetes-validations`) are [`crate::cel`]'s.
//! [`structural_errors`] refuses non-structural schemas when a CRD is written.

mod format;
mod listtype;

pub use listtype::list_set_and_map_errors;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Map, Value};

use crate::field::{BadValue, FieldError, Path, go_quote};

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
/// that specifies no more than `name` and `generateName`; `anyOf`/`allOf`/`oneOf`/`not`
/// alternatives that only validate values, and (at the root) only fields the structure
/// specifies; patterns that compile. Sorted by their text, as upstream sorts them.
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
    completeness(schema, schema, path, path, &mut errs);
    // Upstream sorts them by their text (its walk goes through maps in random order).
    errs.sort_by_cached_key(ToString::to_string);
    errs
}

/// The `anyOf` alternatives of an int-or-string field as generators write them (`type:
/// integer` or `type: string`), which may carry a type although nothing else in a junctor may.
fn int_or_string_pair(any_of: Option<&[JSONSchemaProps]>) -> bool {
    let only = |kind: &str| JSONSchemaProps {
        type_: Some(kind.to_owned()),
        ..Default::default()
    };
    any_of.is_some_and(|pair| pair == [only("integer"), only("string")])
}

/// The value validations of one node (at `path`): what its `anyOf`, `allOf`, `oneOf` and `not`
/// alternatives specify (below), and that its `pattern` compiles.
fn value_validation_errors(
    schema: &JSONSchemaProps,
    path: &Path,
    skip_any_of: bool,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of && !int_or_string_pair(schema.any_of.as_deref()) {
        for (i, each) in schema.any_of.iter().flatten().enumerate() {
            nested_errors(each, &path.child("anyOf").index(i), false, errs);
        }
    }
    let pair_first = schema
        .all_of
        .as_ref()
        .and_then(|all| all.first())
        .is_some_and(|first| int_or_string_pair(first.any_of.as_deref()));
    for (i, each) in schema.all_of.iter().flatten().enumerate() {
        nested_errors(
            each,
            &path.child("allOf").index(i),
            pair_first && i == 0,
            errs,
        );
    }
    for (i, each) in schema.one_of.iter().flatten().enumerate() {
        nested_errors(each, &path.child("oneOf").index(i), false, errs);
    }
    if let Some(not) = &schema.not {
        nested_errors(not, &path.child("not"), false, errs);
    }
    if let Some(pattern) = schema.pattern.as_deref().filter(|p| !p.is_empty())
        && let Err(error) = compiled(pattern)
    {
        errs.push(FieldError::invalid(
            &path.child("pattern"),
            pattern,
            &format!("must be a valid regular expression, but isn't: {error}"),
        ));
    }
}

/// A junctor's alternative (at `path`) may only validate values: no type, defaults,
/// descriptions, nullability or structural extensions, and no `metadata` property.
fn nested_errors(
    schema: &JSONSchemaProps,
    path: &Path,
    skip_any_of: bool,
    errs: &mut Vec<FieldError>,
) {
    value_validation_errors(schema, path, skip_any_of, errs);
    if let Some(items) = items(schema) {
        nested_errors(items, &path.child("items"), false, errs);
    }
    for (key, child) in schema.properties.iter().flatten() {
        nested_errors(child, &path.child("properties").key(key), false, errs);
    }
    let set = |field: Option<&str>| field.is_some_and(|f| !f.is_empty());
    let mut forbid = |field: &str, condition: bool, detail: &str| {
        if condition {
            errs.push(FieldError::forbidden(&path.child(field), detail));
        }
    };
    let empty = "must be empty to be structural";
    let undefined = "must be undefined to be structural";
    let not_true = "must be false to be structural";
    forbid("type", set(schema.type_.as_deref()), empty);
    forbid(
        "additionalProperties",
        schema.additional_properties.is_some(),
        undefined,
    );
    forbid("default", schema.default.is_some(), undefined);
    forbid("title", set(schema.title.as_deref()), empty);
    forbid("description", set(schema.description.as_deref()), empty);
    forbid("nullable", schema.nullable == Some(true), not_true);
    forbid(
        "x-kubernetes-preserve-unknown-fields",
        schema.x_kubernetes_preserve_unknown_fields == Some(true),
        not_true,
    );
    forbid(
        "x-kubernetes-embedded-resource",
        schema.x_kubernetes_embedded_resource == Some(true),
        not_true,
    );
    forbid(
        "x-kubernetes-int-or-string",
        schema.x_kubernetes_int_or_string == Some(true),
        not_true,
    );
    forbid(
        "x-kubernetes-list-map-keys",
        schema
            .x_kubernetes_list_map_keys
            .as_ref()
            .is_some_and(|k| !k.is_empty()),
        empty,
    );
    forbid(
        "x-kubernetes-list-type",
        schema.x_kubernetes_list_type.is_some(),
        undefined,
    );
    forbid(
        "x-kubernetes-map-type",
        schema.x_kubernetes_map_type.is_some(),
        undefined,
    );
    forbid(
        "x-kubernetes-validations",
        schema
            .x_kubernetes_validations
            .as_ref()
            .is_some_and(|v| !v.is_empty()),
        empty,
    );
    if schema
        .properties
        .as_ref()
        .is_some_and(|p| p.contains_key("metadata"))
    {
        errs.push(FieldError::forbidden(
            &path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Every field and item the root's alternatives (`holder`, at `v_path`) speak of is specified
/// in the structure too (`structure`, at `s_path`). Upstream checks the root's alternatives
/// only, and so does this.
fn completeness(
    holder: &JSONSchemaProps,
    structure: &JSONSchemaProps,
    s_path: &Path,
    v_path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let alternatives = holder
        .not
        .iter()
        .map(|not| (&**not, v_path.child("not")))
        .chain(junctor(&holder.all_of, v_path, "allOf"))
        .chain(junctor(&holder.any_of, v_path, "anyOf"))
        .chain(junctor(&holder.one_of, v_path, "oneOf"));
    for (alternative, at) in alternatives {
        nested_completeness(alternative, Some(structure), s_path, &at, errs);
    }
}

fn junctor<'a>(
    list: &'a Option<Vec<JSONSchemaProps>>,
    path: &'a Path,
    name: &'a str,
) -> impl Iterator<Item = (&'a JSONSchemaProps, Path)> + 'a {
    list.iter()
        .flatten()
        .enumerate()
        .map(move |(i, each)| (each, path.child(name).index(i)))
}

fn nested_completeness(
    alternative: &JSONSchemaProps,
    structure: Option<&JSONSchemaProps>,
    s_path: &Path,
    v_path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let Some(structure) = structure else {
        errs.push(FieldError::required(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness(alternative, structure, s_path, v_path, errs);
    if let Some(items_alternative) = items(alternative) {
        nested_completeness(
            items_alternative,
            items(structure),
            &s_path.child("items"),
            &v_path.child("items"),
            errs,
        );
    }
    for (key, child) in alternative.properties.iter().flatten() {
        let s_child = s_path.child("properties").key(key);
        let v_child = v_path.child("properties").key(key);
        match structure.properties.as_ref().and_then(|p| p.get(key)) {
            Some(specified) => {
                nested_completeness(child, Some(specified), &s_child, &v_child, errs)
            }
            None => errs.push(FieldError::required(
                &s_child,
                &format!("because it is defined in {v_child}"),
            )),
        }
    }
}

/// Every specified field and array item below `schema` has a type, and every node's value
/// validations are as a structural schema allows.
fn typed_below(schema: &JSONSchemaProps, path: &Path, errs: &mut Vec<FieldError>) {
    value_validation_errors(schema, path, false, errs);
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
    validate_update(value, None, schema)
}

/// Every way `value` breaks `schema`, except where an update leaves the value as `old` had
/// it: a node equal to its counterpart in `old` is not held to the schema (upstream's
/// validation ratcheting, on by default since 1.30). Counterparts are found as upstream
/// correlates them: object fields by name, `map` list elements by their keys, other lists'
/// elements by index except `set` and `atomic` lists, whose elements have none.
pub fn validate_update(
    value: &Value,
    old: Option<&Value>,
    schema: &JSONSchemaProps,
) -> Vec<FieldError> {
    let mut outcome = Outcome::default();
    validate_at(value, old, schema, &mut Vec::new(), &mut outcome);
    outcome.errs
}

/// The element of `old` (a list) that the element `index` of `new` is the same entry as.
pub(crate) fn counterpart<'a>(
    old: Option<&'a Value>,
    new: &[Value],
    index: usize,
    schema: &JSONSchemaProps,
) -> Option<&'a Value> {
    let old = old?.as_array()?;
    match schema.x_kubernetes_list_type.as_deref() {
        Some("map") => {
            let keys = schema
                .x_kubernetes_list_map_keys
                .as_deref()
                .unwrap_or_default();
            let element = new.get(index)?.as_object()?;
            old.iter().find(|candidate| {
                candidate.as_object().is_some_and(|candidate| {
                    keys.iter().all(|k| candidate.get(k) == element.get(k))
                })
            })
        }
        Some("set" | "atomic") => None,
        _ => old.get(index),
    }
}

/// What validating one value against one schema found: its errors, and how many checks ran
/// (kube-openapi's match count, by which an `anyOf` or `oneOf` that no alternative satisfies
/// reports the errors of the alternative that went furthest).
#[derive(Default)]
struct Outcome {
    errs: Vec<FieldError>,
    checks: usize,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.errs.extend(other.errs);
        self.checks += other.checks;
    }
}

/// A path's field-error form and kube-openapi's name for it (`spec.replicas`; `body` at the
/// root).
fn paths(segments: &[String]) -> (Path, String) {
    let (path, name) = raw_paths(segments);
    (
        path,
        if name.is_empty() {
            "body".to_owned()
        } else {
            name
        },
    )
}

/// A path's field-error form and kube-openapi's own path (empty at the root).
fn raw_paths(segments: &[String]) -> (Path, String) {
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

/// How `value`'s type breaks `schema`'s, as kube-openapi's type check words it: the type (or
/// format) expected and the one found. A node with a format takes any string or list unless
/// it is numeric, and names its format, not its type, for other values (Go's `int64` or
/// `float64` for numbers, nothing for the rest).
fn type_mismatch(value: &Value, schema: &JSONSchemaProps) -> Option<(String, String)> {
    let typed = schema.x_kubernetes_int_or_string == Some(true)
        || schema.type_.as_deref().is_some_and(|t| !t.is_empty());
    if let Some(format) = format::effective(schema) {
        let numeric = matches!(schema.type_.as_deref(), Some("integer" | "number"))
            || schema.x_kubernetes_int_or_string == Some(true);
        if matches!(value, Value::String(_) | Value::Array(_)) {
            if !numeric {
                return None;
            }
        } else if !(typed && type_fits(value, schema)) {
            let found = match value {
                Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
                Value::Number(_) => "float64",
                _ => "",
            };
            return Some((format.to_owned(), found.to_owned()));
        }
    }
    (!type_fits(value, schema)).then(|| (expected_type(schema), type_name(value).to_owned()))
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

/// Validates one value, in kube-openapi's order: type, the `anyOf`/`oneOf`/`allOf`/`not`
/// alternatives, string bounds and pattern, format, number bounds, list bounds and items,
/// `enum`, then the object's own checks and properties.
fn validate_at(
    value: &Value,
    old: Option<&Value>,
    schema: &JSONSchemaProps,
    segments: &mut Vec<String>,
    out: &mut Outcome,
) {
    if old == Some(value) {
        return;
    }
    out.checks += 1;
    let (path, name) = paths(segments);
    if value.is_null() {
        if schema.nullable == Some(true) || schema.type_.is_none() && !preserves(schema) {
            return;
        }
        if schema.type_.is_some() || schema.x_kubernetes_int_or_string == Some(true) {
            let expected = expected_type(schema);
            out.errs.push(FieldError::type_invalid(
                &path,
                BadValue::from("null"),
                &format!("{name} in body must be of type {expected}: \"null\""),
            ));
        }
        return;
    }
    let mismatch = type_mismatch(value, schema);
    if let Some((expected, actual)) = &mismatch {
        out.errs.push(FieldError::type_invalid(
            &path,
            BadValue::from(actual.as_str()),
            &format!("{name} in body must be of type {expected}: \"{actual}\""),
        ));
    }
    junctors(value, old, schema, segments, out);
    if mismatch.is_some() {
        enum_check(value, schema, &path, out);
        return;
    }
    let errs = &mut out.errs;
    match value {
        Value::String(s) => {
            validate_string(s, schema, &path, &name, errs);
            if let Some(format) = format::effective(schema)
                && !format::valid(format, s)
            {
                errs.push(FieldError::type_invalid(
                    &path,
                    s.as_str(),
                    &format!("{name} in body must be of type {format}: {}", go_quote(s)),
                ));
            }
        }
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
                    let before = counterpart(old, list, i, schema);
                    validate_at(item, before, items, segments, out);
                    segments.pop();
                }
            }
        }
        _ => {}
    }
    enum_check(value, schema, &path, out);
    if let Value::Object(map) = value {
        validate_object(value, old, map, schema, segments, out);
    }
}

fn enum_check(value: &Value, schema: &JSONSchemaProps, path: &Path, out: &mut Outcome) {
    let Some(allowed) = &schema.enum_ else {
        return;
    };
    out.checks += 1;
    if allowed.iter().any(|a| a.0 == *value) {
        return;
    }
    let shown: Vec<String> = allowed
        .iter()
        .map(|a| match &a.0 {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let shown: Vec<&str> = shown.iter().map(String::as_str).collect();
    out.errs
        .push(FieldError::not_supported(path, bad(value), &shown));
}

/// `value` against the alternatives of `schema`'s `anyOf`, `oneOf`, `allOf` and `not`, as
/// kube-openapi judges them. Their own errors carry no field (`<nil>` in upstream's causes)
/// and name the value by its quoted path (`""` at the root); with them come the errors of the
/// alternative that went furthest (`anyOf`, `oneOf` with none valid) or of every failing one
/// (`allOf`).
fn junctors(
    value: &Value,
    old: Option<&Value>,
    schema: &JSONSchemaProps,
    segments: &mut Vec<String>,
    out: &mut Outcome,
) {
    if schema.any_of.is_none()
        && schema.one_of.is_none()
        && schema.all_of.is_none()
        && schema.not.is_none()
    {
        return;
    }
    let quoted = go_quote(&raw_paths(segments).1);
    let composite = |message: String| FieldError::invalid(&Path::new("<nil>"), "", &message);
    let alternative = |alternative: &JSONSchemaProps, segments: &mut Vec<String>| {
        let mut outcome = Outcome::default();
        validate_at(value, old, alternative, segments, &mut outcome);
        outcome
    };
    if let Some(any) = schema.any_of.as_deref().filter(|a| !a.is_empty()) {
        let mut best: Option<Outcome> = None;
        let mut satisfied = None;
        for each in any {
            let outcome = alternative(each, segments);
            if outcome.errs.is_empty() {
                satisfied = Some(outcome);
                break;
            }
            if best.as_ref().is_none_or(|b| outcome.checks > b.checks) {
                best = Some(outcome);
            }
        }
        match satisfied {
            Some(outcome) => out.merge(outcome),
            None => {
                out.errs.push(composite(format!(
                    "{quoted} must validate at least one schema (anyOf)"
                )));
                out.merge(best.unwrap_or_default());
            }
        }
    }
    if let Some(one) = schema.one_of.as_deref().filter(|a| !a.is_empty()) {
        let mut best: Option<Outcome> = None;
        let mut first_valid = None;
        let mut valid = 0;
        for each in one {
            let outcome = alternative(each, segments);
            if outcome.errs.is_empty() {
                valid += 1;
                best = None;
                first_valid.get_or_insert(outcome);
            } else if valid == 0 && best.as_ref().is_none_or(|b| outcome.checks > b.checks) {
                best = Some(outcome);
            }
        }
        if valid == 1 {
            out.merge(first_valid.unwrap_or_default());
        } else {
            let found = if valid == 0 {
                "Found none valid".to_owned()
            } else {
                format!("Found {valid} valid alternatives")
            };
            out.errs.push(composite(format!(
                "{quoted} must validate one and only one schema (oneOf). {found}"
            )));
            out.merge(best.unwrap_or_default());
        }
    }
    if let Some(all) = schema.all_of.as_deref().filter(|a| !a.is_empty()) {
        let mut valid = 0;
        for each in all {
            let outcome = alternative(each, segments);
            valid += usize::from(outcome.errs.is_empty());
            out.merge(outcome);
        }
        if valid != all.len() {
            let none = if valid == 0 { ". None validated" } else { "" };
            out.errs.push(composite(format!(
                "{quoted} must validate all the schemas (allOf){none}"
            )));
        }
    }
    if let Some(not) = schema.not.as_deref()
        && alternative(not, segments).errs.is_empty()
    {
        out.errs.push(composite(format!(
            "{quoted} must not validate the schema (not)"
        )));
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
    let made = regex::Regex::new(pattern).map_err(|e| {
        // Go's words (`error parsing regexp: <what>: `<pattern>``) around the regex crate's
        // account of what is wrong, the last line of its report.
        let text = e.to_string();
        let what = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(text.as_str())
            .to_owned();
        format!("error parsing regexp: {what}: `{pattern}`")
    });
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
    old: Option<&Value>,
    map: &Map<String, Value>,
    schema: &JSONSchemaProps,
    segments: &mut Vec<String>,
    out: &mut Outcome,
) {
    out.checks += 1;
    let errs = &mut out.errs;
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
            let before = old.and_then(|o| o.get(key));
            validate_at(child, before, child_schema, segments, out);
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
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items.type: Required value: must not be empty for specified array items",
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
                "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
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
    fn junctors_may_only_validate_values_of_specified_fields() {
        let path = Path::new("spec")
            .child("validation")
            .child("openAPIV3Schema");
        let fine = schema(json!({"type": "object",
            "properties": {
                "spec": {"type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                "port": {"x-kubernetes-int-or-string": true,
                    "anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
            "anyOf": [{"properties": {"spec": {"properties": {"a": {"pattern": "^x"}}}}}],
        }));
        assert!(structural_errors(&fine, &path).is_empty());
        let bad = schema(json!({"type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"a": {"type": "string"}},
                    "allOf": [{"type": "object", "nullable": true, "default": {},
                               "properties": {"metadata": {}}}]},
                "name": {"type": "string", "pattern": "(", "not": {"x-kubernetes-list-type": "set"}},
            },
            "oneOf": [{"properties": {"spec": {"properties": {"missing": {"maxLength": 1}}}}},
                      {"properties": {"other": {}}}],
        }));
        assert_eq!(
            messages(&structural_errors(&bad, &path)),
            [
                "spec.validation.openAPIV3Schema.properties[name].not.x-kubernetes-list-type: Forbidden: must be undefined to be structural",
                "spec.validation.openAPIV3Schema.properties[name].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: error parsing regexp: unclosed group: `(`",
                "spec.validation.openAPIV3Schema.properties[other]: Required value: because it is defined in spec.validation.openAPIV3Schema.oneOf[1].properties[other]",
                "spec.validation.openAPIV3Schema.properties[spec].allOf[0].default: Forbidden: must be undefined to be structural",
                "spec.validation.openAPIV3Schema.properties[spec].allOf[0].nullable: Forbidden: must be false to be structural",
                "spec.validation.openAPIV3Schema.properties[spec].allOf[0].properties[metadata]: Forbidden: must not be specified in a nested context",
                "spec.validation.openAPIV3Schema.properties[spec].allOf[0].type: Forbidden: must be empty to be structural",
                "spec.validation.openAPIV3Schema.properties[spec].properties[missing]: Required value: because it is defined in spec.validation.openAPIV3Schema.oneOf[0].properties[spec].properties[missing]",
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
    fn formats_as_upstream_checks_them() {
        let dates = schema(json!({"type": "object", "properties": {
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "ip": {"type": "string", "format": "ipv4"},
            "custom": {"type": "string", "format": "my-own"},
            "count": {"type": "integer", "format": "int32"},
        }}));
        assert!(
            validate(
                &json!({"day": "2024-02-29", "at": "2024-02-29T23:59:59.5+01:00",
                        "ip": "10.0.0.1", "custom": "anything", "count": 7}),
                &dates
            )
            .is_empty()
        );
        assert_eq!(
            messages(&validate(
                &json!({"day": "2023-02-29", "at": "2024-01-01 10:00", "ip": "10.0.0.01",
                        "count": true}),
                &dates
            )),
            [
                "at: Invalid value: \"2024-01-01 10:00\": at in body must be of type date-time: \"2024-01-01 10:00\"",
                "count: Invalid value: \"\": count in body must be of type int32: \"\"",
                "day: Invalid value: \"2023-02-29\": day in body must be of type date: \"2023-02-29\"",
                "ip: Invalid value: \"10.0.0.01\": ip in body must be of type ipv4: \"10.0.0.01\"",
            ]
        );
        // A formatted string node names its format for numbers and takes lists, as
        // kube-openapi's type check does.
        assert_eq!(
            messages(&validate(&json!({"day": 5}), &dates)),
            ["day: Invalid value: \"int64\": day in body must be of type date: \"int64\""]
        );
        assert!(validate(&json!({"day": []}), &dates).is_empty());

        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "bsonobjectid",
                &["507f1f77bcf86cd799439011"],
                &["507f1f77bcf86cd79943901z", "1"],
            ),
            (
                "uri",
                &[
                    "https://example.com:8443/a%20b?x=1",
                    "/relative/path",
                    "mailto:a@b.c",
                    "*",
                ],
                &["example.com/path", "http://a b/", "/bad%zz", ""],
            ),
            (
                "email",
                &["a.b@example.com", "Jane Doe <jane@example.com>"],
                &["a@", "@b.c", "a b@c.d", "plain"],
            ),
            (
                "hostname",
                &["example.com", "localhost", "a-b.example.io"],
                &["-a.com", "a_b.com", "a..b"],
            ),
            (
                "ipv6",
                &["::1", "fe80::1", "::ffff:1.2.3.4"],
                &["1.2.3.4", "::g", "fe80::1%eth0"],
            ),
            (
                "ipv4",
                &["1.2.3.4", "::ffff:1.2.3.4"],
                &["1.2.3", "256.1.1.1", "::1"],
            ),
            (
                "cidr",
                &["10.0.0.0/8", "fd00::/64"],
                &["10.0.0.0/33", "10.0.0.0", "10.0.0.0/"],
            ),
            (
                "mac",
                &["00:1a:2b:3c:4d:5e", "00-1A-2B-3C-4D-5E", "001a.2b3c.4d5e"],
                &["00:1a:2b:3c:4d", "0:1a:2b:3c:4d:5e"],
            ),
            (
                "uuid",
                &[
                    "123e4567-e89b-12d3-a456-426614174000",
                    "123E4567E89B12D3A456426614174000",
                ],
                &["123e4567-e89b-12d3-a456"],
            ),
            (
                "uuid4",
                &["123e4567-e89b-42d3-a456-426614174000"],
                &["123e4567-e89b-12d3-a456-426614174000"],
            ),
            ("isbn10", &["0-321-75104-3", "080442957X"], &["0321751044"]),
            ("isbn13", &["978-0321751041"], &["9780321751042"]),
            ("isbn", &["0321751043", "9780321751041"], &["12345"]),
            (
                "creditcard",
                &["4111 1111 1111 1111"],
                &["4111 1111 1111 1112", "1234"],
            ),
            ("ssn", &["123-45-6789"], &["123456789", "12-345-6789"]),
            ("hexcolor", &["#fff", "A0B1C2"], &["#ffff", "ggg"]),
            (
                "rgbcolor",
                &["rgb(255, 0, 10)"],
                &["rgb(256,0,0)", "rgb(1,2)"],
            ),
            ("byte", &["aGVsbG8=", "aGVsbA=="], &["aGVsbG8", "", "a$=="]),
            ("password", &["", "anything"], &[]),
            (
                "duration",
                &["1h30m", "5 sec", "3 days", "2 weeks"],
                &["5 x", "forever", ""],
            ),
            (
                "datetime",
                &["2024-01-01t10:00:00z", "2024-01-01T10:00:00.123-05:00"],
                &["2024-01-01T24:00:00Z", "2024-01-01", "2024-01-01T10:00:00"],
            ),
        ];
        for (format_name, good, bad) in cases {
            let node = schema(json!({"type": "string", "format": format_name}));
            for value in *good {
                assert!(
                    validate(&json!(value), &node).is_empty(),
                    "{format_name} {value:?}"
                );
            }
            for value in *bad {
                assert_eq!(
                    validate(&json!(value), &node).len(),
                    1,
                    "{format_name} {value:?}"
                );
            }
        }
    }

    #[test]
    fn alternatives_as_kube_openapi_reports_them() {
        let either = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "name": {"type": "string", "anyOf": [{"pattern": "^x"}, {"maxLength": 2}]},
            "size": {"type": "integer", "allOf": [{"minimum": 1}, {"multipleOf": 2}]},
            "mode": {"type": "string", "not": {"enum": ["off"]}},
        }}));
        assert!(
            validate(
                &json!({"spec": {"a": "x"}, "name": "xyz", "size": 4, "mode": "on"}),
                &either
            )
            .is_empty()
        );
        assert_eq!(
            messages(&validate(&json!({"spec": {}}), &either)),
            [
                "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found none valid",
                "spec.a: Required value",
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"spec": {"a": "x", "b": 1}}), &either)),
            [
                "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found 2 valid alternatives"
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"name": "abc"}), &either)),
            [
                "<nil>: Invalid value: \"\": \"name\" must validate at least one schema (anyOf)",
                "name: Invalid value: \"abc\": name in body should match '^x'",
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"size": 3}), &either)),
            [
                "size: Invalid value: 3: size in body should be a multiple of 2",
                "<nil>: Invalid value: \"\": \"size\" must validate all the schemas (allOf)",
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"size": -1}), &either)),
            [
                "size: Invalid value: -1: size in body should be greater than or equal to 1",
                "size: Invalid value: -1: size in body should be a multiple of 2",
                "<nil>: Invalid value: \"\": \"size\" must validate all the schemas (allOf). None validated",
            ]
        );
        assert_eq!(
            messages(&validate(&json!({"mode": "off"}), &either)),
            ["<nil>: Invalid value: \"\": \"mode\" must not validate the schema (not)"]
        );
        // At the root the path is empty.
        let root = schema(json!({"type": "object", "anyOf": [{"required": ["spec"]}]}));
        assert_eq!(
            messages(&validate(&json!({}), &root)),
            [
                "<nil>: Invalid value: \"\": \"\" must validate at least one schema (anyOf)",
                "spec: Required value",
            ]
        );
    }

    #[test]
    fn updates_keep_what_the_old_object_had() {
        let tightened = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 3},
                "size": {"type": "integer", "minimum": 5},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port"],
                    "items": {"type": "object", "properties": {
                        "port": {"type": "integer"}, "note": {"type": "string", "maxLength": 1}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                    "items": {"type": "string", "maxLength": 1}},
                "steps": {"type": "array", "items": {"type": "string", "maxLength": 1}},
            }},
        }}));
        let old = json!({"spec": {"name": "long", "size": 1,
            "ports": [{"port": 1, "note": "old"}, {"port": 2, "note": "x"}],
            "tags": ["aa"], "steps": ["aa", "b"]}});
        // Unchanged, the old object's errors stay allowed.
        assert!(validate_update(&old, Some(&old), &tightened).is_empty());
        assert_eq!(validate(&old, &tightened).len(), 5);
        // Reordered map-list entries keep their counterparts; a changed field is checked;
        // set elements and appended list items have no counterpart.
        let new = json!({"spec": {"name": "long", "size": 2,
            "ports": [{"port": 2, "note": "x"}, {"port": 1, "note": "old"}],
            "tags": ["aa", "b"], "steps": ["aa", "b", "cc"]}});
        assert_eq!(
            messages(&validate_update(&new, Some(&old), &tightened)),
            [
                "spec.size: Invalid value: 2: spec.size in body should be greater than or equal to 5",
                "spec.steps[2]: Too long: may not be more than 1 bytes",
                "spec.tags[0]: Too long: may not be more than 1 bytes",
            ]
        );
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
