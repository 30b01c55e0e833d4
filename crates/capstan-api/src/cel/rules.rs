//! The CEL validation rules of a custom resource's schema (`x-kubernetes-validations`),
//! evaluated as upstream's apiextensions validator evaluates them, over our own
//! [`Expression`]s (so rules have CEL's optional types and upstream's runtime cost limits):
//!
//! - one walk over the object and its schema: every node whose schema has rules binds `self`
//!   (the node's value as CEL sees it through its schema: property names escaped, `date-time`
//!   and `date` strings as timestamps, `duration` as durations, `byte` as bytes, only
//!   `apiVersion`, `kind`, `metadata.name` and `metadata.generateName` at a resource root,
//!   preserved unknown fields hidden) and, on an update, `oldSelf`: the node's counterpart in
//!   the stored object (object fields and map values by name, `map` lists' items by their
//!   keys; other lists' items have none). A transition rule (one reading `oldSelf`) runs only
//!   where there is a counterpart, unless `optionalOldSelf`, when `oldSelf` is an optional;
//! - a failed rule reports `message`, else its `messageExpression`'s string, else `failed
//!   rule: <rule>`, at the node's path (plus the rule's `fieldPath`), with its `reason`;
//! - cost: each evaluation stops at upstream's per-call limit, and all of one object's
//!   evaluations share upstream's runtime budget; either running out ends the validation with
//!   upstream's error;
//! - ratcheting (upstream's `CRDValidationRatcheting`, on since 1.30): on an update, a failed
//!   rule that does not read `oldSelf` is not an error where the node, or its nearest
//!   ancestor that has a counterpart, is unchanged.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, ValidationRule,
};
use serde_json::Value;

use super::cost::{self, CALL_LIMIT_EXCEEDED};
use super::{Activation, Budget, CelValue, Expression, Failure, from_json, map};
use crate::field::{BadValue, FieldError, Path, go_quote};
use crate::structural::{additional, counterpart, embedded, items};

/// The longest message a `messageExpression` may give (upstream's
/// `MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE: usize = 5 * 1024;

/// One rule, compiled.
struct Rule {
    /// Its text, for the default message.
    source: String,
    /// The compiled rule, or why it does not compile (a CRD stored before it was checked).
    expression: Result<Expression, String>,
    /// Whether it reads `oldSelf` (a transition rule).
    reads_old: bool,
    optional_old: bool,
    message: Option<String>,
    /// The compiled `messageExpression`, and its text.
    message_expression: Option<(Expression, String)>,
    reason: Option<String>,
    /// The rule's `fieldPath`, as a path below the node (`spec.x[key]`).
    field_path: Option<String>,
}

impl Rule {
    fn compile(rule: &ValidationRule, schema: &JSONSchemaProps) -> Rule {
        let expression = Expression::compile(&rule.rule);
        Rule {
            source: rule.rule.clone(),
            reads_old: expression.as_ref().is_ok_and(|e| e.reads("oldSelf")),
            expression,
            optional_old: rule.optional_old_self == Some(true),
            message: rule.message.clone().filter(|m| !m.trim().is_empty()),
            message_expression: rule
                .message_expression
                .as_deref()
                .filter(|m| !m.trim().is_empty())
                .and_then(|m| Some((Expression::compile(m).ok()?, m.to_owned()))),
            reason: rule.reason.clone(),
            field_path: rule
                .field_path
                .as_deref()
                .filter(|p| !p.trim().is_empty())
                .and_then(|p| field_path(p, schema).ok()),
        }
    }

    /// How upstream names the rule in its errors: the message if there is one, else the rule.
    fn named(&self) -> &str {
        self.message
            .as_deref()
            .map_or(self.source.trim(), str::trim)
    }
}

/// The rules of one schema node, and the nodes below it that have rules.
#[derive(Default)]
struct Node {
    rules: Vec<Rule>,
    properties: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
}

impl Node {
    /// The rules of `schema` and below; `None` when there are none.
    fn compile(schema: &JSONSchemaProps) -> Option<Node> {
        let node = Node {
            rules: schema
                .x_kubernetes_validations
                .iter()
                .flatten()
                .map(|rule| Rule::compile(rule, schema))
                .collect(),
            properties: schema
                .properties
                .iter()
                .flatten()
                .filter_map(|(name, child)| Some((name.clone(), Node::compile(child)?)))
                .collect(),
            items: items(schema).and_then(Node::compile).map(Box::new),
            additional: additional(schema).and_then(Node::compile).map(Box::new),
        };
        let empty = node.rules.is_empty()
            && node.properties.is_empty()
            && node.items.is_none()
            && node.additional.is_none();
        (!empty).then_some(node)
    }
}

/// The compiled rules of one version's schema.
pub struct Rules {
    root: Node,
    schema: Arc<JSONSchemaProps>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").finish_non_exhaustive()
    }
}

/// Where a walk is: the node's path, and the nearest node at or above it that has a
/// counterpart in the stored object (the new and the old value and their schema), whose
/// being unchanged ratchets the node's errors.
#[derive(Clone, Copy)]
struct Correlated<'a> {
    new: &'a Value,
    old: &'a Value,
    schema: &'a JSONSchemaProps,
}

/// A node of the object under validation: its value and schema, whether it is a resource's
/// root, its counterpart in the stored object, the nearest node at or above it that has one,
/// and its path.
#[derive(Clone, Copy)]
struct Site<'a> {
    schema: &'a JSONSchemaProps,
    root: bool,
    value: &'a Value,
    old: Option<&'a Value>,
    correlated: Option<Correlated<'a>>,
    path: &'a Path,
}

impl<'a> Site<'a> {
    /// The site of a child of this one: `value` (with its counterpart `old`) under `schema`.
    fn child(
        self,
        schema: &'a JSONSchemaProps,
        value: &'a Value,
        old: Option<&'a Value>,
        path: &'a Path,
    ) -> Site<'a> {
        let correlated = match old {
            Some(old) => Some(Correlated {
                new: value,
                old,
                schema,
            }),
            None => self.correlated,
        };
        Site {
            schema,
            root: embedded(schema),
            value,
            old,
            correlated,
            path,
        }
    }
}

/// One validation's running state: the errors so far, the ratcheted ones (warnings), and the
/// budget left.
struct Walk {
    errs: Vec<FieldError>,
    warnings: Vec<String>,
    budget: Budget,
    /// Set when the budget or a per-call limit ran out: nothing more is evaluated.
    stopped: bool,
}

impl Rules {
    /// The rules of `schema`, compiled; `None` when it has none.
    pub fn compile(schema: &Arc<JSONSchemaProps>) -> Option<Rules> {
        Some(Rules {
            root: Node::compile(schema)?,
            schema: schema.clone(),
        })
    }

    /// The rules `object` breaks (`old`: the stored object of an update).
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        self.check(object, old).0
    }

    /// The rules `object` breaks (`old`: the stored object of an update), and the warnings
    /// for those an update breaks where it left the value as stored (upstream's ratcheting
    /// lets them pass and warns with the error's text).
    pub fn check(&self, object: &Value, old: Option<&Value>) -> (Vec<FieldError>, Vec<String>) {
        let mut walk = Walk {
            errs: Vec::new(),
            warnings: Vec::new(),
            budget: Budget::default(),
            stopped: false,
        };
        let correlated = old.map(|old| Correlated {
            new: object,
            old,
            schema: &self.schema,
        });
        let path = Path::default();
        let root = Site {
            schema: &self.schema,
            root: true,
            value: object,
            old,
            correlated,
            path: &path,
        };
        walk.node(&self.root, root);
        (walk.errs, walk.warnings)
    }
}

impl Walk {
    fn node(&mut self, node: &Node, at: Site<'_>) {
        if at.value.is_null() || self.stopped {
            return;
        }
        if !node.rules.is_empty() {
            self.rules(node, at);
        }
        let (schema, old) = (at.schema, at.old);
        match at.value {
            Value::Object(members) => {
                for (name, child) in &node.properties {
                    let Some(property) = schema.properties.as_ref().and_then(|p| p.get(name))
                    else {
                        continue;
                    };
                    if let Some(field) = members.get(name) {
                        let path = at.path.child(name);
                        let old = old.and_then(|o| o.get(name));
                        self.node(child, at.child(property, field, old, &path));
                    }
                }
                if let (Some(child), Some(values)) = (&node.additional, additional(schema)) {
                    let declared = schema.properties.as_ref();
                    for (key, field) in members {
                        if declared.is_some_and(|d| d.contains_key(key)) {
                            continue;
                        }
                        let path = at.path.key(key);
                        let old = old.and_then(|o| o.get(key));
                        self.node(child, at.child(values, field, old, &path));
                    }
                }
            }
            Value::Array(list) => {
                if let (Some(child), Some(item)) = (&node.items, items(schema)) {
                    let map_list = schema.x_kubernetes_list_type.as_deref() == Some("map");
                    for (i, element) in list.iter().enumerate() {
                        let path = at.path.index(i);
                        let old = map_list
                            .then(|| counterpart(old, list, i, schema))
                            .flatten();
                        self.node(child, at.child(item, element, old, &path));
                    }
                }
            }
            _ => {}
        }
    }

    /// Evaluates the rules of one node.
    fn rules(&mut self, node: &Node, site: Site<'_>) {
        let Site {
            schema,
            root,
            value,
            old,
            correlated,
            path,
        } = site;
        let type_ = schema.type_.clone().unwrap_or_default();
        let at = if path.to_string().is_empty() {
            Path::new("<nil>")
        } else {
            path.clone()
        };
        let invalid = |detail: &str| FieldError::invalid(&at, BadValue::Str(type_.clone()), detail);
        if self.budget.0 == 0 {
            self.errs.push(invalid(cost::OUT_OF_BUDGET));
            self.stopped = true;
            return;
        }
        let this = view(value, schema, root);
        let previous = old.map(|old| view(old, schema, root));
        let mut activation = Activation::default();
        activation.set("self", this);
        let mut optional = activation.clone();
        optional.set("oldSelf", optional_of(previous.clone()));
        if let Some(previous) = previous {
            activation.set("oldSelf", previous);
        }
        // Whether an error here is only a warning: the nearest correlated node is unchanged.
        let unchanged = || correlated.is_some_and(|c| same(c.new, c.old, c.schema));
        for rule in &node.rules {
            let expression = match &rule.expression {
                Ok(expression) => expression,
                Err(e) => {
                    self.errs.push(invalid(&format!("rule compile error: {e}")));
                    continue;
                }
            };
            if rule.reads_old && old.is_none() && !rule.optional_old {
                continue;
            }
            let scope = if rule.optional_old {
                &optional
            } else {
                &activation
            };
            match expression.value_within(scope, &mut self.budget) {
                Ok(CelValue::Bool(true)) => continue,
                Ok(_) => {}
                Err(Failure::OutOfBudget) => {
                    self.errs.push(invalid(cost::OUT_OF_BUDGET));
                    self.stopped = true;
                    return;
                }
                Err(Failure::Error(e)) if e == CALL_LIMIT_EXCEEDED => {
                    self.errs.push(invalid(&format!(
                        "'{e}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                        rule.named()
                    )));
                    self.stopped = true;
                    return;
                }
                Err(Failure::Error(e)) if e.starts_with("no such overload") => {
                    self.errs.push(invalid(&format!(
                        "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                        rule.named()
                    )));
                    continue;
                }
                Err(Failure::Error(e)) => {
                    // cel-go's words for a missing key, which the `cel` crate capitalises.
                    let e = match e.strip_prefix("No such key: ") {
                        Some(key) => format!("no such key: {key}"),
                        None => e,
                    };
                    self.errs
                        .push(invalid(&format!("{e} evaluating rule: {}", rule.named())));
                    continue;
                }
            }
            // The rule failed: say so at its path, with its message.
            let at = match &rule.field_path {
                Some(below) => path.child(below),
                None => at.clone(),
            };
            let ratcheted = !rule.reads_old && unchanged();
            let detail = match self.message(rule, &activation) {
                Ok(Some(detail)) => detail,
                Ok(None) => rule
                    .message
                    .as_deref()
                    .map(|m| m.trim().to_owned())
                    .unwrap_or_else(|| format!("failed rule: {}", rule.named())),
                Err(detail) => {
                    let error = FieldError::invalid(&at, BadValue::Str(type_.clone()), &detail);
                    self.report(error, ratcheted);
                    self.stopped = true;
                    return;
                }
            };
            let error = match rule.reason.as_deref() {
                Some("FieldValueForbidden") => FieldError::forbidden(&at, &detail),
                Some("FieldValueRequired") => FieldError::required(&at, &detail),
                Some("FieldValueDuplicate") => {
                    FieldError::duplicate(&at, BadValue::Str(type_.clone()))
                }
                _ => FieldError::invalid(&at, BadValue::Str(type_.clone()), &detail),
            };
            self.report(error, ratcheted);
        }
    }

    /// A broken rule's error, or its warning when ratcheting lets it pass.
    fn report(&mut self, error: FieldError, ratcheted: bool) {
        if ratcheted {
            self.warnings.push(error.to_string());
        } else {
            self.errs.push(error);
        }
    }

    /// A failed rule's `messageExpression`, evaluated: its message (`None`: there is none, or
    /// it gave no usable message, and the rule's own is used), or the error that ends the
    /// validation (the budget or the per-call limit ran out).
    fn message(&mut self, rule: &Rule, activation: &Activation) -> Result<Option<String>, String> {
        let Some((expression, source)) = &rule.message_expression else {
            return Ok(None);
        };
        match expression.value_within(activation, &mut self.budget) {
            Ok(CelValue::String(text)) => {
                let text = text.trim();
                let usable = !text.is_empty() && text.len() <= MAX_MESSAGE && !text.contains('\n');
                Ok(usable.then(|| text.to_owned()))
            }
            Ok(_) => Ok(None),
            Err(Failure::OutOfBudget) => Err(
                "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
                    .to_owned(),
            ),
            Err(Failure::Error(e)) if e == CALL_LIMIT_EXCEEDED => Err(format!(
                "no further validation rules will be run due to call cost exceeds limit for messageExpression: {}",
                go_quote(source)
            )),
            Err(Failure::Error(_)) => Ok(None),
        }
    }
}

/// `optional.of(value)`, or `optional.none()` without one.
fn optional_of(value: Option<CelValue>) -> CelValue {
    use kube_cel::cel::objects::OptionalValue;
    CelValue::Opaque(Arc::new(match value {
        Some(value) => OptionalValue::of(value),
        None => OptionalValue::none(),
    }))
}

/// `value` as a rule on a node of `schema` sees it (upstream's `UnstructuredToVal`): object
/// properties by their escaped names (those CEL cannot spell, and unknown fields an object
/// preserves, are not there), a map's keys as they are, strings of the time and byte formats
/// as timestamps, durations and bytes, and at a resource's root only `apiVersion`, `kind` and
/// `metadata.name`/`generateName` of its metadata.
fn view(value: &Value, schema: &JSONSchemaProps, root: bool) -> CelValue {
    match value {
        Value::String(text) if schema.x_kubernetes_int_or_string != Some(true) => {
            formatted(text, schema.format.as_deref())
                .unwrap_or_else(|| CelValue::String(Arc::new(text.clone())))
        }
        Value::Array(list) => match items(schema) {
            Some(item) => CelValue::List(Arc::new(
                list.iter().map(|v| view(v, item, embedded(item))).collect(),
            )),
            None => from_json(value),
        },
        Value::Object(members) => {
            let declared = schema.properties.as_ref().filter(|p| !p.is_empty());
            if let (None, Some(values)) = (declared, additional(schema)) {
                return map(members
                    .iter()
                    .map(|(k, v)| (k.clone(), view(v, values, embedded(values))))
                    .collect());
            }
            if declared.is_none() && !root {
                // An object of unknown shape (it preserves unknown fields): read as it is.
                return from_json(value);
            }
            let mut fields = Vec::with_capacity(members.len());
            for (name, field) in members {
                if let Some(property) = declared.and_then(|p| p.get(name)) {
                    if let Some(escaped) = cost::escape(name) {
                        fields.push((escaped, view(field, property, embedded(property))));
                    }
                } else if root && matches!(name.as_str(), "apiVersion" | "kind") {
                    fields.push((name.clone(), from_json(field)));
                } else if root && name == "metadata" {
                    let kept = ["name", "generateName"]
                        .into_iter()
                        .filter_map(|k| Some((k.to_owned(), from_json(field.get(k)?))))
                        .collect();
                    fields.push((name.clone(), map(kept)));
                }
            }
            map(fields)
        }
        _ => from_json(value),
    }
}

/// A string of a format CEL reads as another type; `None` when it is not one, or does not
/// parse (schema validation reports that).
fn formatted(text: &str, format: Option<&str>) -> Option<CelValue> {
    match format? {
        "date-time" => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(CelValue::Timestamp),
        "date" => {
            let day = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
            let midnight = day.and_hms_opt(0, 0, 0)?.and_utc().fixed_offset();
            Some(CelValue::Timestamp(midnight))
        }
        "duration" => crate::duration::go_duration_nanos(text)
            .ok()
            .map(|n| CelValue::Duration(chrono::Duration::nanoseconds(n))),
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()
                .map(|b| CelValue::Bytes(Arc::new(b)))
        }
        _ => None,
    }
}

/// Whether `new` is `old` unchanged, as upstream's ratcheting compares them: `map` lists'
/// items by their keys, in any order; everything else as JSON.
fn same(new: &Value, old: &Value, schema: &JSONSchemaProps) -> bool {
    match (new, old) {
        (Value::Array(list), Value::Array(previous)) => {
            if list.len() != previous.len() {
                return false;
            }
            let Some(item) = items(schema) else {
                return new == old;
            };
            if schema.x_kubernetes_list_type.as_deref() != Some("map") {
                return new == old;
            }
            (0..list.len()).all(|i| {
                counterpart(Some(old), list, i, schema).is_some_and(|o| same(&list[i], o, item))
            })
        }
        (Value::Object(members), Value::Object(previous)) => {
            members.len() == previous.len()
                && members.iter().all(|(name, field)| {
                    let Some(before) = previous.get(name) else {
                        return false;
                    };
                    match schema
                        .properties
                        .as_ref()
                        .and_then(|p| p.get(name))
                        .or_else(|| additional(schema))
                    {
                        Some(child) => same(field, before, child),
                        None => field == before,
                    }
                })
        }
        _ => new == old,
    }
}

/// A rule's `fieldPath` (`.spec.x`, `.spec.map['a.b']`) as a path below its node
/// (`spec.x`, `spec.map[a.b]`), checked against `schema` as upstream's `ValidFieldPath`: its
/// error otherwise.
pub fn field_path(json_path: &str, schema: &JSONSchemaProps) -> Result<String, String> {
    let mut path = Path::default();
    let mut node = schema;
    let mut rest = json_path;
    while !rest.is_empty() {
        let name = if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[', ']']).unwrap_or(after.len());
            if end == 0 {
                return Err("unexpected end of JSON path".to_owned());
            }
            rest = &after[end..];
            after[..end].to_owned()
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(quoted) = after.strip_prefix('\'') else {
                let token = after.split(['.', '[', ']']).next().unwrap_or(after);
                return Err(format!("expected single quoted string but got {token}"));
            };
            let (text, tail) = quoted_string(quoted)?;
            rest = tail
                .strip_prefix(']')
                .ok_or_else(|| "expected ] but got more".to_owned())?;
            text
        } else {
            let token = rest.split(['.', '[', ']']).next().unwrap_or(rest);
            return Err(format!("expected [ or . but got: {token}"));
        };
        if let Some(properties) = &node.properties {
            node = properties
                .get(&name)
                .ok_or_else(|| "does not refer to a valid field".to_owned())?;
            path = path.child(&name);
        } else if let Some(values) = additional(node) {
            node = values;
            path = path.key(&name);
        } else {
            return Err("does not refer to a valid field".to_owned());
        }
    }
    Ok(path.to_string())
}

/// A single-quoted string's text (after the opening quote) with its escapes undone, and what
/// follows its closing quote.
fn quoted_string(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => return Ok((out, &text[i + 1..])),
            '\\' => {
                let Some((_, escaped)) = chars.next() else {
                    break;
                };
                out.push(match escaped {
                    'a' => '\x07',
                    'b' => '\x08',
                    'f' => '\x0c',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'v' => '\x0b',
                    '\'' => '\'',
                    '\\' => '\\',
                    other => {
                        return Err(format!(
                            "invalid string literal: invalid escape char \\{other}"
                        ));
                    }
                });
            }
            c => out.push(c),
        }
    }
    Err("unexpected end of JSON path".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Arc<JSONSchemaProps> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    /// The errors of `object` (and `old`) against a schema whose `spec` is `spec`.
    fn check(spec: Value, object: Value, old: Option<Value>) -> Vec<String> {
        let schema = schema(json!({"type": "object", "properties": {"spec": spec}}));
        let rules = Rules::compile(&schema).expect("the schema has rules");
        messages(&rules.validate(&object, old.as_ref()))
    }

    #[test]
    fn rules_read_optional_fields_escaped_names_and_only_the_roots_names() {
        let schema = schema(json!({
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.metadata.name.startsWith('w') && !has(self.metadata.labels)"},
                {"rule": "self.kind == 'Widget' && self.apiVersion == 'example.com/v1'"}
            ],
            "properties": {"spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "replicas": {"type": "integer"},
                    "x-prop": {"type": "string"},
                    "namespace": {"type": "string"},
                    "a__b": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                },
                "x-kubernetes-validations": [
                    {"rule": "self.?replicas.orValue(1) > 0", "message": "replicas must be positive"},
                    {"rule": "!has(self.x__dash__prop) || self.x__dash__prop == self.__namespace__"},
                    {"rule": "!has(self.a__underscores__b) || self.a__underscores__b.size() < 3"},
                    {"rule": "self.?labels[?'app-name'].orValue('') != 'bad'"},
                    {"rule": "!has(self.unknown)", "message": "preserved unknown fields are hidden"}
                ]
            }}
        }));
        let rules = Rules::compile(&schema).unwrap();
        let object = |spec: Value| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w1", "labels": {"a": "b"}}, "spec": spec})
        };
        let good = object(json!({"x-prop": "n", "namespace": "n", "a__b": "ab",
                                 "labels": {"app-name": "ok"}, "unknown": 1}));
        assert_eq!(messages(&rules.validate(&good, None)), Vec::<String>::new());
        let bad = object(json!({"replicas": 0, "x-prop": "n", "namespace": "m",
                                "a__b": "abc", "labels": {"app-name": "bad"}}));
        assert_eq!(
            messages(&rules.validate(&bad, None)),
            [
                "spec: Invalid value: \"object\": replicas must be positive",
                "spec: Invalid value: \"object\": failed rule: !has(self.x__dash__prop) || self.x__dash__prop == self.__namespace__",
                "spec: Invalid value: \"object\": failed rule: !has(self.a__underscores__b) || self.a__underscores__b.size() < 3",
                "spec: Invalid value: \"object\": failed rule: self.?labels[?'app-name'].orValue('') != 'bad'",
            ]
        );
        let mut renamed = good.clone();
        renamed["metadata"]["name"] = json!("x1");
        assert_eq!(
            messages(&rules.validate(&renamed, None)),
            [
                "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.startsWith('w') && !has(self.metadata.labels)"
            ]
        );
    }

    #[test]
    fn formatted_strings_are_timestamps_durations_and_bytes() {
        let spec = json!({
            "type": "object",
            "properties": {
                "start": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "timeout": {"type": "string", "format": "duration"},
                "data": {"type": "string", "format": "byte"}
            },
            "x-kubernetes-validations": [
                {"rule": "self.timeout < duration('1h')", "message": "timeout"},
                {"rule": "self.start < timestamp('2030-01-01T00:00:00Z')", "message": "start"},
                {"rule": "self.day.getFullYear() == 2026", "message": "day"},
                {"rule": "self.data == b'hi'", "message": "data"}
            ]
        });
        let object = |timeout: &str| {
            json!({"spec": {"start": "2026-12-08T02:00:00Z", "day": "2026-12-08",
                            "timeout": timeout, "data": "aGk="}})
        };
        assert!(check(spec.clone(), object("30m"), None).is_empty());
        assert_eq!(
            check(spec, object("1h30m"), None),
            ["spec: Invalid value: \"object\": timeout"]
        );
    }

    /// A `map` list of `{name, value}` items whose values may only grow, and an atomic list
    /// whose items have the same rule.
    fn growing() -> Value {
        let item = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "value": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.value >= oldSelf.value", "message": "may only grow"}]
        });
        json!({"type": "object", "properties": {
            "keyed": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"], "items": item},
            "plain": {"type": "array", "items": item}
        }})
    }

    #[test]
    fn transition_rules_see_counterparts_by_key_and_only_on_updates() {
        let old = json!({"spec": {"keyed": [{"name": "a", "value": 1}, {"name": "b", "value": 5}],
                                  "plain": [{"name": "a", "value": 1}]}});
        let new = json!({"spec": {"keyed": [{"name": "b", "value": 6}, {"name": "a", "value": 0},
                                            {"name": "c", "value": 0}],
                                  "plain": [{"name": "a", "value": 0}]}});
        // Item 1 is `a`, shrunk; `c` is new and the atomic list's items have no counterpart.
        assert_eq!(
            check(growing(), new.clone(), Some(old)),
            ["spec.keyed[1]: Invalid value: \"object\": may only grow"]
        );
        assert!(check(growing(), new, None).is_empty());
    }

    #[test]
    fn an_optional_old_self_runs_on_creates_too() {
        let spec = json!({"type": "object", "properties": {"mode": {
            "type": "string",
            "x-kubernetes-validations": [{
                "rule": "oldSelf.hasValue() ? self == oldSelf.value() : self == 'initial'",
                "optionalOldSelf": true, "message": "starts initial and never changes"
            }]
        }}});
        let object = |mode: &str| json!({"spec": {"mode": mode}});
        assert!(check(spec.clone(), object("initial"), None).is_empty());
        assert_eq!(
            check(spec.clone(), object("other"), None),
            ["spec.mode: Invalid value: \"string\": starts initial and never changes"]
        );
        assert!(check(spec.clone(), object("other"), Some(object("other"))).is_empty());
        assert_eq!(
            check(spec, object("initial"), Some(object("other"))).len(),
            1
        );
    }

    #[test]
    fn unchanged_values_keep_their_errors_on_updates() {
        let spec = json!({"type": "object", "properties": {
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 3"}]},
            "tags": {"type": "array", "items": {"type": "string",
                     "x-kubernetes-validations": [{"rule": "self.size() < 3"}]}},
            "count": {"type": "integer"}
        }});
        let object = |name: &str, tag: &str, count: i64| json!({"spec": {"name": name, "tags": [tag], "count": count}});
        let stored = object("long", "long", 1);
        // Only the count changes: the name and the tags list (the tags' nearest node with a
        // counterpart) are as stored, so their rules do not hold the update back.
        assert!(
            check(
                spec.clone(),
                object("long", "long", 2),
                Some(stored.clone())
            )
            .is_empty()
        );
        assert_eq!(
            check(
                spec.clone(),
                object("longer", "longer", 2),
                Some(stored.clone())
            ),
            [
                "spec.name: Invalid value: \"string\": failed rule: self.size() < 3",
                "spec.tags[0]: Invalid value: \"string\": failed rule: self.size() < 3",
            ]
        );
        // A create has nothing to compare with.
        assert_eq!(check(spec, stored, None).len(), 2);
    }

    #[test]
    fn field_paths_reasons_and_message_expressions() {
        let spec = json!({
            "type": "object",
            "properties": {
                "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
                "name": {"type": "string"}
            },
            "x-kubernetes-validations": [
                {"rule": "self.limits.all(k, self.limits[k] >= 0)", "fieldPath": ".limits['a.b']",
                 "messageExpression": "'limit ' + self.limits.filter(k, self.limits[k] < 0)[0] + ' is negative'"},
                {"rule": "has(self.name)", "reason": "FieldValueRequired", "fieldPath": ".name",
                 "messageExpression": "42", "message": "name is required"},
                {"rule": "self.name != 'dup'", "reason": "FieldValueDuplicate"}
            ]
        });
        assert_eq!(
            check(spec.clone(), json!({"spec": {"limits": {"a.b": -1}}}), None),
            [
                "spec.limits[a.b]: Invalid value: \"object\": limit a.b is negative",
                "spec.name: Required value: name is required",
                "spec: Invalid value: \"object\": no such key: name evaluating rule: self.name != 'dup'",
            ]
        );
        assert_eq!(
            check(spec, json!({"spec": {"limits": {}, "name": "dup"}}), None),
            ["spec: Duplicate value: \"object\""]
        );
    }

    #[test]
    fn evaluations_stop_at_the_per_call_limit_and_the_budget() {
        // 2,000 × 2,000 comparisons in one evaluation: over the per-call limit.
        let spec = json!({"type": "object", "properties": {"items": {
            "type": "array", "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(a, self.all(b, a == b || a != b))"}]
        }}});
        let items: Vec<i64> = (0..2000).collect();
        assert_eq!(
            check(spec, json!({"spec": {"items": items}}), None),
            [
                "spec.items: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.all(a, self.all(b, a == b || a != b))"
            ]
        );
        // Each list's rule is within the per-call limit, but 80 of them spend the budget.
        let spec = json!({"type": "object", "properties": {"lists": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "integer"},
                      "x-kubernetes-validations": [{"rule": "self.all(a, self.exists(b, b == a))"}]}
        }}});
        let list: Vec<i64> = (0..300).collect();
        let lists = vec![list; 80];
        let errs = check(spec, json!({"spec": {"lists": lists}}), None);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].ends_with("Invalid value: \"array\": validation failed due to running out of cost budget, no further validation rules will be run"),
            "{errs:?}"
        );
    }

    #[test]
    fn field_paths_are_checked_against_the_schema() {
        let schema = schema(json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"type": "object"}}
        }}));
        assert_eq!(field_path(".a['b.c']", &schema).as_deref(), Ok("a.b.c"));
        assert_eq!(field_path(".m.key", &schema).as_deref(), Ok("m[key]"));
        assert_eq!(
            field_path(".m['it\\'s']", &schema).as_deref(),
            Ok("m[it's]")
        );
        assert_eq!(
            field_path(".a.c", &schema),
            Err("does not refer to a valid field".to_owned())
        );
        assert_eq!(
            field_path(".list[0]", &schema),
            Err("expected single quoted string but got 0".to_owned())
        );
        assert_eq!(
            field_path("a", &schema),
            Err("expected [ or . but got: a".to_owned())
        );
    }
}
