//! CEL as Kubernetes uses it, on the `cel` crate with `kube-cel`'s Kubernetes function
//! libraries (the kube-rs project's):
//!
//! - [`Expression`]: a CEL expression (parsed with optional types, as upstream's environment
//!   has them) over named values (an [`Activation`]): the admission webhooks'
//!   `matchConditions` (`object`, `oldObject`, `request`, `authorizer`), the expressions of
//!   ValidatingAdmissionPolicies (which add `params`, `namespaceObject` and `variables`), and
//!   CRD rules. Their functions are `kube-cel`'s and upstream's authorization library
//!   ([`authz`]: the `authorizer` variable's checks, decided by the caller). Every evaluation
//!   goes through [`cost`]'s runtime meter: upstream's per-call limit stops it, and callers
//!   share upstream's runtime budget ([`Budget`]) across the expressions of one evaluation (a
//!   policy binding's, or one custom object's rules).
//! - [`rule_errors`]: what a CRD's schema is refused for: a rule's fields as upstream checks
//!   them (empty, multi-line or over-long messages, unknown `reason`, a `fieldPath` that leads
//!   nowhere), a rule or `messageExpression` that does not compile, and estimated costs over
//!   upstream's limits ([`cost`]: upstream's cost model over the schema's sizes, a rule's cost
//!   multiplied by the number of times it can run, each rule and `messageExpression` and the
//!   whole schema limited, with upstream's messages).
//! - [`Rules`] (`rules.rs`): one version's rules, compiled once, evaluated on each write of a
//!   custom object as upstream's validator does: `self` and `oldSelf` per schema node,
//!   transition rules, `message`/`messageExpression`/`reason`/`fieldPath`, runtime cost
//!   limits, and ratcheting of unchanged values on updates.

pub mod authz;
pub mod cost;
mod rules;

pub use rules::{Rules, field_path};

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, ValidationRule,
};
use serde_json::Value;

use crate::field::{FieldError, Path};
use crate::structural::{additional, embedded, items};

/// The reasons a rule may give, as upstream lists them.
const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

thread_local! {
    /// A context with every Kubernetes CEL function registered, built once per thread; each
    /// evaluation of an [`Expression`] adds its variables in a scope of its own.
    static FUNCTIONS: kube_cel::cel::Context<'static> = {
        use kube_cel::KubeCelExt as _;
        let mut context = kube_cel::cel::Context::default().with_all();
        authz::register(&mut context);
        cost::register(&mut context);
        context
    };
}

/// A compiled CEL expression, evaluated through the cost meter ([`cost::instrument`]): an
/// evaluation spending more than upstream's per-call limit stops with upstream's error, and
/// one within it reports what it cost, which callers charge to their budget ([`Budget`]).
pub struct Expression(kube_cel::cel::IdedExpr);

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression").finish_non_exhaustive()
    }
}

/// What is left of upstream's runtime budget for the expressions of one object or one policy
/// binding's evaluation ([`cost::RUNTIME_BUDGET`] to start with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget(pub u64);

impl Default for Budget {
    fn default() -> Self {
        Budget(cost::RUNTIME_BUDGET)
    }
}

/// Why an evaluation gave no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The expression failed (including over its per-call cost limit): the error's text.
    Error(String),
    /// The budget ran out: upstream stops evaluating the remaining expressions.
    OutOfBudget,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(why) => f.write_str(why),
            Failure::OutOfBudget => f.write_str(cost::OUT_OF_BUDGET),
        }
    }
}

impl Expression {
    /// Compiles `expression`; the compiler's complaint, on one line, if it does not compile.
    /// Upstream's environment has CEL's optional types (`object.?spec.?replicas`,
    /// `optional.of(x)`, `.orValue(d)`, `[?a]`, `{?k: v}`), so these parse with them.
    pub fn compile(expression: &str) -> Result<Expression, String> {
        parse(expression).map(|expression| Expression(cost::instrument(&expression)))
    }

    /// Whether the expression reads the variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        use kube_cel::cel::common::ast::{EntryExpr, Expr};
        fn walk(e: &kube_cel::cel::IdedExpr, name: &str) -> bool {
            match &e.expr {
                Expr::Ident(ident) => ident == name,
                Expr::Call(call) => {
                    call.target.as_deref().is_some_and(|t| walk(t, name))
                        || call.args.iter().any(|a| walk(a, name))
                }
                Expr::Comprehension(c) => [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]
                .into_iter()
                .any(|e| walk(e, name)),
                Expr::List(list) => list.elements.iter().any(|e| walk(e, name)),
                Expr::Map(m) => m.entries.iter().any(|entry| match &entry.expr {
                    EntryExpr::MapEntry(entry) => {
                        walk(&entry.key, name) || walk(&entry.value, name)
                    }
                    EntryExpr::StructField(field) => walk(&field.value, name),
                }),
                Expr::Struct(s) => s.entries.iter().any(|entry| match &entry.expr {
                    EntryExpr::MapEntry(entry) => {
                        walk(&entry.key, name) || walk(&entry.value, name)
                    }
                    EntryExpr::StructField(field) => walk(&field.value, name),
                }),
                Expr::Select(select) => walk(&select.operand, name),
                Expr::Literal(_) | Expr::Unspecified => false,
            }
        }
        walk(&self.0, name)
    }

    /// Evaluates the expression with `scope`, metered; its value and cost.
    fn run(&self, scope: &kube_cel::cel::Context<'_>) -> Result<(CelValue, u64), String> {
        let (result, spent) = cost::metered(cost::PER_CALL_LIMIT, || {
            kube_cel::cel::Value::resolve(&self.0, scope)
        });
        let Some(spent) = spent else {
            return Err(cost::CALL_LIMIT_EXCEEDED.to_owned());
        };
        result.map(|v| (v, spent)).map_err(|e| e.to_string())
    }

    /// Evaluates the expression with the named values of `activation`, whatever it gives,
    /// charging its cost to `budget`.
    pub fn value_within(
        &self,
        activation: &Activation,
        budget: &mut Budget,
    ) -> Result<CelValue, Failure> {
        // As upstream, only spending past the budget fails: a budget spent to exactly nothing
        // still runs an expression that costs nothing.
        let (value, spent) = FUNCTIONS
            .with(|functions| {
                let mut scope = functions.new_inner_scope();
                for (name, value) in &activation.0 {
                    scope.add_variable_from_value(name.clone(), value.clone());
                }
                self.run(&scope)
            })
            .map_err(Failure::Error)?;
        if spent > budget.0 {
            budget.0 = 0;
            return Err(Failure::OutOfBudget);
        }
        budget.0 -= spent;
        Ok(value)
    }

    /// Evaluates the expression with the named values of `activation`, whatever it gives.
    pub fn value(&self, activation: &Activation) -> Result<CelValue, String> {
        self.value_within(activation, &mut Budget::default())
            .map_err(|f| f.to_string())
    }

    /// Evaluates the expression, which must give a boolean, with the values of `activation`.
    pub fn check(&self, activation: &Activation) -> Result<bool, String> {
        match self.value(activation)? {
            CelValue::Bool(answer) => Ok(answer),
            other => Err(format!("expression must evaluate to a bool, got {other:?}")),
        }
    }

    /// Evaluates the expression with `variables` (JSON, `null` for an absent object).
    pub fn evaluate(&self, variables: &[(&str, &Value)]) -> Result<bool, String> {
        FUNCTIONS.with(|functions| {
            let mut scope = functions.new_inner_scope();
            for (name, value) in variables {
                scope.add_variable_from_value(*name, from_json(value));
            }
            match self.run(&scope)?.0 {
                CelValue::Bool(answer) => Ok(answer),
                other => Err(format!("expression must evaluate to a bool, got {other:?}")),
            }
        })
    }
}

/// `expression` parsed as upstream's environment parses it, with CEL's optional types; the
/// parser's complaint, on one line, if it does not parse.
fn parse(expression: &str) -> Result<kube_cel::cel::IdedExpr, String> {
    kube_cel::cel::parser::Parser::new()
        .enable_optional_syntax(true)
        .parse(expression)
        .map_err(|e| one_line(&e.to_string()))
}

/// A value of CEL.
pub use kube_cel::cel::Value as CelValue;

/// The words CEL reserves: a variable may not be named one, and a schema property named one is
/// read in a rule as `__<word>__` (upstream's `cel.Escape`).
pub const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The named values expressions are evaluated with, each converted from JSON once however many
/// expressions read it.
#[derive(Clone, Default)]
pub struct Activation(Vec<(String, CelValue)>);

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Activation {
    /// Names `value` (JSON; `null` for an absent object) `name`, as [`from_json`] reads it.
    pub fn json(&mut self, name: &str, value: &Value) {
        self.set(name, from_json(value));
    }

    /// Names `value` `name`, in place of what had that name.
    pub fn set(&mut self, name: &str, value: CelValue) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }
}

/// JSON as Kubernetes' CEL sees it: a number written without a fraction or exponent that fits
/// 64 bits is an `int` (apimachinery's JSON decoding makes it an int64), any other a `double`.
/// (Through serde, a non-negative whole number would be a `uint`, which neither equals an
/// `int` nor adds to one in the `cel` crate: `object.spec.replicas == 3` was false.)
pub fn from_json(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(from_json).collect())),
        Value::Object(members) => map(members
            .iter()
            .map(|(k, v)| (k.clone(), from_json(v)))
            .collect()),
    }
}

/// A map of CEL values by name (a policy's `variables`).
pub fn map(entries: Vec<(String, CelValue)>) -> CelValue {
    CelValue::from(
        entries
            .into_iter()
            .collect::<std::collections::HashMap<String, CelValue>>(),
    )
}

/// Why the rules of `schema` (at `path` in the CRD) cannot be served: rules and
/// `messageExpression`s that do not compile, unknown reasons, and estimated costs over
/// upstream's limits ([`cost`]): a rule's cost times the number of times it can run (the
/// product of the `maxItems`/`maxProperties` above it, or, under a list or map without one,
/// as many as fit in a request) over [`cost::STATIC_RULE_LIMIT`], a `messageExpression`'s
/// over the same limit, and all of them together over [`cost::STATIC_SCHEMA_LIMIT`].
pub fn rule_errors(schema: &JSONSchemaProps, path: &Path) -> Vec<FieldError> {
    let mut errs = Errors::default();
    let mut total = TotalCost::default();
    walk(schema, path, Some(1), true, None, &mut total, &mut errs);
    let mut errs = [errs.schema, errs.cel].concat();
    if total.sum > cost::STATIC_SCHEMA_LIMIT {
        for (at, _) in &total.most_expensive {
            errs.push(FieldError::forbidden(
                at,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            path,
            &cost::exceeds_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total.sum,
                cost::STATIC_SCHEMA_LIMIT,
            ),
        ));
    }
    errs
}

/// The estimated cost of all the rules of a schema, and the (at most four) rules that
/// contribute at least 1% of the limit each, most expensive first, as upstream names them.
#[derive(Default)]
struct TotalCost {
    sum: u64,
    most_expensive: Vec<(Path, u64)>,
}

impl TotalCost {
    fn observe(&mut self, at: &Path, cost: u64) {
        self.sum = self.sum.saturating_add(cost);
        if cost < cost::STATIC_SCHEMA_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((at.clone(), cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

/// `cost` times `cardinality`, the largest number when it overflows.
fn times_cardinality(cost: u64, cardinality: u64) -> u64 {
    if cost == 0 {
        0
    } else {
        cost.saturating_mul(cardinality)
    }
}

/// How many times a child of `schema` can occur for each `schema`, from a count bound (a list's
/// `maxItems` for its items, a map's `maxProperties` for its values); `None` without one.
fn per_parent(bound: Option<i64>) -> Option<u64> {
    bound.map(|m| m.max(0) as u64)
}

/// A schema's errors as upstream lists them: those of the schema itself (here, unknown
/// reasons) before those of compiling and costing its rules.
#[derive(Default)]
struct Errors {
    schema: Vec<FieldError>,
    cel: Vec<FieldError>,
}

/// Checks the rules of `schema` and below (at `path` in the CRD). `uncorrelatable`: the list
/// above whose items have no counterpart in an update's old object (any list but a `map`
/// list), where a rule may not read `oldSelf`.
fn walk(
    schema: &JSONSchemaProps,
    path: &Path,
    cardinality: Option<u64>,
    root: bool,
    uncorrelatable: Option<&Path>,
    total: &mut TotalCost,
    errs: &mut Errors,
) {
    let schema_errors = errs.schema.len();
    // A property occurs as often as its object; list items and map values as often times the
    // list's or map's count bound, unbounded without one.
    let times = |bound: Option<i64>| {
        cardinality.and_then(|c| Some(times_cardinality(c, per_parent(bound)?)))
    };
    for (key, child) in schema.properties.iter().flatten() {
        let at = path.child("properties").key(key);
        walk(
            child,
            &at,
            cardinality,
            embedded(child),
            uncorrelatable,
            total,
            errs,
        );
    }
    if let Some(child) = items(schema) {
        let at = path.child("items");
        let keyed = schema.x_kubernetes_list_type.as_deref() == Some("map");
        walk(
            child,
            &at,
            times(schema.max_items),
            embedded(child),
            uncorrelatable.or((!keyed).then_some(path)),
            total,
            errs,
        );
    }
    if let Some(child) = additional(schema) {
        let at = path.child("additionalProperties");
        walk(
            child,
            &at,
            times(schema.max_properties),
            embedded(child),
            uncorrelatable,
            total,
            errs,
        );
    }
    let rules = schema
        .x_kubernetes_validations
        .as_deref()
        .unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = path.child("x-kubernetes-validations").index(i);
        rule_field_errors(rule, schema, &at, &mut errs.schema);
    }
    // As upstream's, rules are compiled only where the schema, here and below, is valid.
    if errs.schema.len() > schema_errors {
        return;
    }
    let decl = cost::Decl::of(schema, root);
    let errs = &mut errs.cel;
    for (i, rule) in rules.iter().enumerate() {
        let at = path.child("x-kubernetes-validations").index(i);
        let compiled = match Expression::compile(&rule.rule) {
            Ok(compiled) => compiled,
            Err(e) => {
                errs.push(FieldError::invalid(
                    &at.child("rule"),
                    rule.rule.as_str(),
                    &format!("compilation failed: {e}"),
                ));
                continue;
            }
        };
        if compiled.reads("oldSelf") {
            if let Some(list) = uncorrelatable {
                errs.push(FieldError::invalid(
                    &at.child("rule"),
                    rule.rule.as_str(),
                    &format!(
                        "oldSelf cannot be used on the uncorrelatable portion of the schema within {list}"
                    ),
                ));
            }
        } else if let Some(optional) = rule.optional_old_self {
            errs.push(FieldError::invalid(
                &at.child("optionalOldSelf"),
                optional,
                "may not be set if oldSelf is not used in rule",
            ));
        }
        let Some(decl) = &decl else { continue };
        let estimate = cost::estimate(&rule.rule, decl, SCOPED).unwrap_or(0);
        let rule_cost = times_cardinality(
            estimate,
            cardinality.unwrap_or_else(|| decl.max_cardinality()),
        );
        if rule_cost > cost::STATIC_RULE_LIMIT {
            errs.push(FieldError::forbidden(
                &at.child("rule"),
                &cost::exceeds_message("estimated rule cost", rule_cost, cost::STATIC_RULE_LIMIT),
            ));
        }
        total.observe(&at.child("rule"), rule_cost);
        let Some(expression) = rule.message_expression.as_deref().filter(|m| !m.is_empty()) else {
            continue;
        };
        if let Err(e) = Expression::compile(expression) {
            errs.push(FieldError::invalid(
                &at.child("messageExpression"),
                expression,
                &format!("messageExpression compilation failed: {e}"),
            ));
            continue;
        }
        let message_cost = cost::estimate(expression, decl, SCOPED).unwrap_or(0);
        if message_cost > cost::STATIC_RULE_LIMIT {
            errs.push(FieldError::forbidden(
                &at.child("messageExpression"),
                &cost::exceeds_message(
                    "estimated messageExpression cost",
                    message_cost,
                    cost::STATIC_RULE_LIMIT,
                ),
            ));
        }
        total.observe(&at.child("messageExpression"), message_cost);
    }
}

/// What upstream refuses in one rule's fields before compiling it (`at`: the rule's path):
/// an empty rule, an empty, over-long or multi-line message, a rule on several lines without
/// a message, an empty `messageExpression`, an unknown reason, and a `fieldPath` that is
/// empty, on several lines or leads nowhere in `schema`.
fn rule_field_errors(
    rule: &ValidationRule,
    schema: &JSONSchemaProps,
    at: &Path,
    errs: &mut Vec<FieldError>,
) {
    let lines = |text: &str| text.contains(['\n', '\r']);
    let trimmed = rule.rule.trim();
    let message = rule.message.as_deref().unwrap_or_default();
    if trimmed.is_empty() {
        errs.push(FieldError::required(
            &at.child("rule"),
            "rule is not specified",
        ));
    } else if !message.is_empty() && message.trim().is_empty() {
        errs.push(FieldError::invalid(
            &at.child("message"),
            message,
            "message must be non-empty if specified",
        ));
    } else if message.len() > 2048 {
        let start: String = message.chars().take(10).collect();
        errs.push(FieldError::invalid(
            &at.child("message"),
            format!("{start}...").as_str(),
            "message must have a maximum length of 2048 characters",
        ));
    } else if lines(message.trim()) {
        errs.push(FieldError::invalid(
            &at.child("message"),
            message,
            "message must not contain line breaks",
        ));
    } else if lines(trimmed) && message.trim().is_empty() {
        errs.push(FieldError::required(
            &at.child("message"),
            "message must be specified if rule contains line breaks",
        ));
    }
    if let Some(expression) = rule.message_expression.as_deref()
        && !expression.is_empty()
        && expression.trim().is_empty()
    {
        errs.push(FieldError::required(
            &at.child("messageExpression"),
            "messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = rule.reason.as_deref().filter(|r| !REASONS.contains(r)) {
        errs.push(FieldError::not_supported(
            &at.child("reason"),
            reason,
            REASONS,
        ));
    }
    let field_path = rule.field_path.as_deref().unwrap_or_default();
    let invalid = |detail: &str| FieldError::invalid(&at.child("fieldPath"), field_path, detail);
    if !field_path.is_empty() && field_path.trim().is_empty() {
        errs.push(invalid("fieldPath must be non-empty if specified"));
    }
    if lines(field_path) {
        errs.push(invalid("fieldPath must not contain line breaks"));
    }
    if !field_path.is_empty()
        && let Err(e) = rules::field_path(field_path, schema)
    {
        errs.push(invalid(&format!("fieldPath must be a valid path: {e}")));
    }
}

/// The variables of a validation rule.
const SCOPED: &[&str] = &["self", "oldSelf"];

/// A compiler's multi-line report on one line, as upstream's field errors carry it.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Arc<JSONSchemaProps> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn widget_schema() -> Arc<JSONSchemaProps> {
        schema(json!({
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.spec.min <= self.spec.max", "message": "min must not exceed max"}
            ],
            "properties": {"spec": {
                "type": "object",
                "properties": {
                    "min": {"type": "integer"},
                    "max": {"type": "integer"},
                    "name": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "name is immutable"},
                            {"rule": "self.startsWith('w-')", "messageExpression": "'name ' + self + ' must start with w-'", "reason": "FieldValueForbidden"}
                        ]
                    },
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10,
                             "x-kubernetes-validations": [{"rule": "self.size() > 0"}]}
                }
            }}
        }))
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_give_upstreams_messages_paths_and_reasons() {
        let rules = Rules::compile(&widget_schema()).unwrap();
        let good = json!({"spec": {"min": 1, "max": 2, "name": "w-a", "tags": ["x"]}});
        assert!(rules.validate(&good, None).is_empty());
        let bad = json!({"spec": {"min": 3, "max": 2, "name": "a", "tags": []}});
        let mut got = messages(&rules.validate(&bad, None));
        got.sort();
        assert_eq!(
            got,
            [
                "<nil>: Invalid value: \"object\": min must not exceed max",
                "spec.name: Forbidden: name a must start with w-",
                "spec.tags: Invalid value: \"array\": failed rule: self.size() > 0",
            ]
        );
        // The transition rule runs on updates only.
        let renamed = json!({"spec": {"min": 1, "max": 2, "name": "w-b", "tags": ["x"]}});
        assert_eq!(
            messages(&rules.validate(&renamed, Some(&good))),
            ["spec.name: Invalid value: \"string\": name is immutable"]
        );
    }

    #[test]
    fn expressions_read_their_variables() {
        let object = json!({"metadata": {"labels": {"app": "web"}}});
        let request = json!({"userInfo": {"username": "system:admin"}});
        let exclude = Expression::compile(
            "!request.userInfo.username.startsWith('system:') && object.metadata.labels.app == 'web'",
        )
        .unwrap();
        let vars = [
            ("object", &object),
            ("oldObject", &Value::Null),
            ("request", &request),
        ];
        assert_eq!(exclude.evaluate(&vars), Ok(false));
        let oldless = Expression::compile("oldObject == null").unwrap();
        assert_eq!(oldless.evaluate(&vars), Ok(true));
        assert!(Expression::compile("object.").is_err());
        assert!(
            Expression::compile("1 + 1")
                .unwrap()
                .evaluate(&vars)
                .is_err()
        );
    }

    #[test]
    fn expressions_have_optional_types() {
        let object = json!({"metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "ports": [{"port": 80}]}});
        let vars = [("object", &object)];
        for expression in [
            "object.?metadata.?labels.?app.orValue('none') == 'web'",
            "object.?metadata.?labels.?tier.orValue('none') == 'none'",
            "!object.?spec.?paused.hasValue()",
            "object.?spec.?replicas.hasValue() && object.?spec.?replicas.value() == 3",
            "object.metadata.?annotations.orValue({}).size() == 0",
            "object.?status.?ready.orValue(false) == false",
            "object.metadata.labels[?'app'].value() == 'web'",
            "!object.metadata.labels[?'tier'].hasValue()",
            "object.?metadata.?labels.?tier.?name.orValue('') == ''",
            "object.spec.ports[?5].orValue({'port': 0}).port == 0",
            "optional.none().or(optional.of(1)).value() == 1",
            "optional.ofNonZeroValue('').hasValue() == false",
            "[?optional.none(), ?optional.of(2)] == [2]",
            "{?'a': optional.none(), 'b': 1} == {'b': 1}",
        ] {
            let compiled = Expression::compile(expression)
                .unwrap_or_else(|e| panic!("{expression} does not compile: {e}"));
            assert_eq!(compiled.evaluate(&vars), Ok(true), "{expression}");
        }
        assert!(
            Expression::compile("optional.none().value() == 1")
                .unwrap()
                .evaluate(&vars)
                .is_err(),
            "the value of no value is an error"
        );
    }

    #[test]
    fn json_numbers_are_ints_or_doubles() {
        let object = json!({"spec": {"replicas": 3, "negative": -2, "ratio": 1.5, "whole": 2.0,
            "huge": 18446744073709551615u64, "list": [1], "map": {"k": 1}}});
        let vars = [("object", &object)];
        for expression in [
            "object.spec.replicas == 3",
            "object.spec.replicas + 1 == 4",
            "object.spec.negative == -2",
            "object.spec.ratio == 1.5",
            "object.spec.whole == 2.0",
            "object.spec.huge > 1.0e19",
            "object.spec.list[0] == 1",
            "object.spec.map.k == 1",
        ] {
            let compiled = Expression::compile(expression).unwrap();
            assert_eq!(compiled.evaluate(&vars), Ok(true), "{expression}");
            let mut activation = Activation::default();
            activation.json("object", &object);
            assert_eq!(compiled.check(&activation), Ok(true), "{expression}");
        }
    }

    #[test]
    fn schemas_without_rules_compile_to_nothing() {
        assert!(Rules::compile(&schema(json!({"type": "object"}))).is_none());
    }

    #[test]
    fn bad_rules_are_refused_where_they_are() {
        let bad = schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.a >"},
                        {"rule": "true", "messageExpression": "'a' +"}
                    ]
                },
                "status": {
                    "type": "object",
                    // A schema error here: as upstream's, this node's rules are not compiled.
                    "x-kubernetes-validations": [{"rule": "self.a >", "reason": "Because"}]
                }
            }
        }));
        let errs = messages(&rule_errors(&bad, &Path::new("schema")));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(
            errs[0],
            "schema.properties[status].x-kubernetes-validations[0].reason: Unsupported value: \"Because\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
        );
        assert!(errs[1].starts_with("schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.a >\": compilation failed: "), "{errs:?}");
        assert!(errs[2].starts_with("schema.properties[spec].x-kubernetes-validations[1].messageExpression: Invalid value: \"'a' +\": messageExpression compilation failed: "), "{errs:?}");
    }

    #[test]
    fn rule_fields_are_checked_as_upstreams() {
        let rules = schema(json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {"rule": " "},
                    {"rule": "true", "message": "  "},
                    {"rule": "true", "message": "two\nlines"},
                    {"rule": "true &&\ntrue"},
                    {"rule": "true", "messageExpression": " "},
                    {"rule": "true", "fieldPath": ".b"},
                    {"rule": "true", "fieldPath": ".a"},
                    {"rule": "self.?a.orValue(1) > 0", "messageExpression": "'a is ' + string(self.?a.orValue(0))"}
                ]
            }}
        }));
        let at = "schema.properties[spec].x-kubernetes-validations";
        assert_eq!(
            messages(&rule_errors(&rules, &Path::new("schema"))),
            [
                format!("{at}[0].rule: Required value: rule is not specified"),
                format!(
                    "{at}[1].message: Invalid value: \"  \": message must be non-empty if specified"
                ),
                format!(
                    "{at}[2].message: Invalid value: \"two\\nlines\": message must not contain line breaks"
                ),
                format!(
                    "{at}[3].message: Required value: message must be specified if rule contains line breaks"
                ),
                format!(
                    "{at}[4].messageExpression: Required value: messageExpression must be non-empty if specified"
                ),
                format!(
                    "{at}[5].fieldPath: Invalid value: \".b\": fieldPath must be a valid path: does not refer to a valid field"
                ),
            ]
        );
    }

    #[test]
    fn old_self_needs_a_counterpart_and_optional_old_self_needs_old_self() {
        let item = json!({"type": "object", "properties": {"k": {"type": "string", "maxLength": 10}},
            "x-kubernetes-validations": [{"rule": "self.k == oldSelf.k"}]});
        let schema = schema(json!({"type": "object", "properties": {
            "keyed": {"type": "array", "x-kubernetes-list-type": "map", "maxItems": 10,
                      "x-kubernetes-list-map-keys": ["k"], "items": item},
            "plain": {"type": "array", "maxItems": 10, "items": item},
            "flag": {"type": "string", "x-kubernetes-validations": [
                {"rule": "self != 'x'", "optionalOldSelf": false}
            ]}
        }}));
        assert_eq!(
            messages(&rule_errors(&schema, &Path::new("s"))),
            [
                "s.properties[flag].x-kubernetes-validations[0].optionalOldSelf: Invalid value: false: may not be set if oldSelf is not used in rule",
                "s.properties[plain].items.x-kubernetes-validations[0].rule: Invalid value: \"self.k == oldSelf.k\": oldSelf cannot be used on the uncorrelatable portion of the schema within s.properties[plain]",
            ]
        );
    }

    /// A CRD's schema whose `spec.items` list (of strings up to 10 characters, at most
    /// `max_items` of them if given) compares every pair of items.
    fn pairs(max_items: Option<u64>) -> Arc<JSONSchemaProps> {
        let mut list = json!({
            "type": "array",
            "items": {"type": "string", "maxLength": 10},
            "x-kubernetes-validations": [{"rule": "self.all(a, self.all(b, a != b))"}]
        });
        if let Some(max) = max_items {
            list["maxItems"] = json!(max);
        }
        schema(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {"items": list}}}
        }))
    }

    const ADVICE: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

    #[test]
    fn rules_over_unbounded_lists_exceed_the_budget() {
        let path = Path::new("spec.validation.openAPIV3Schema");
        let rule = "spec.validation.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule";
        // As many items as fit in a request: the rule and the schema are both over their limits.
        assert_eq!(
            messages(&rule_errors(&pairs(None), &path)),
            [
                format!(
                    "{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {ADVICE}"
                ),
                format!(
                    "{rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
                ),
                format!(
                    "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {ADVICE}"
                ),
            ]
        );
        // 2,000 items: 2,000 × (3 + 2 + 2,000 × 9) + 2 = 36,010,002, 3.6 times the limit.
        assert_eq!(
            messages(&rule_errors(&pairs(Some(2000)), &path)),
            [format!(
                "{rule}: Forbidden: estimated rule cost exceeds budget by factor of 3.6x {ADVICE}"
            )]
        );
        // 100 items: 90,502.
        assert!(rule_errors(&pairs(Some(100)), &path).is_empty());
        // A map's bound counts for its values only: the properties beside
        // `additionalProperties: true` occur once per object.
        let mut open = JSONSchemaProps::clone(&pairs(Some(100)));
        let spec = open.properties.as_mut().unwrap().get_mut("spec").unwrap();
        spec.additional_properties = Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Bool(true),
        );
        assert!(rule_errors(&open, &path).is_empty());
    }

    #[test]
    fn rules_under_unbounded_lists_cost_once_per_possible_item() {
        let people = |max_items: Option<u64>| {
            let mut list = json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 20}},
                    "x-kubernetes-validations": [{"rule": "self.name.lowerAscii() == self.name"}]
                }
            });
            if let Some(max) = max_items {
                list["maxItems"] = json!(max);
            }
            schema(json!({"type": "object", "properties": {"people": list}}))
        };
        // 20 per item, for each of the 3 MiB / 3 = 1,048,576 items a request can hold.
        assert_eq!(
            messages(&rule_errors(&people(None), &Path::new("schema"))),
            [format!(
                "schema.properties[people].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.1x {ADVICE}"
            )]
        );
        assert!(rule_errors(&people(Some(5)), &Path::new("schema")).is_empty());
    }

    #[test]
    fn evaluations_are_metered_as_upstreams_runtime_cost() {
        let mut activation = Activation::default();
        activation.json("object", &json!({"spec": {"items": [1, 2, 3]}}));
        // The list 10; three rounds of the loop condition (2) and step (3); the result 1.
        let literal = Expression::compile("[1, 2, 3].all(x, x > 0)").unwrap();
        let mut budget = Budget(100);
        assert_eq!(
            literal.value_within(&activation, &mut budget),
            Ok(CelValue::Bool(true))
        );
        assert_eq!(budget, Budget(74));
        // `object.spec.items` 3, then 3 × 5, the result 1; `&&` and `||` cost nothing of their own.
        let selected = Expression::compile("object.spec.items.all(x, x > 0) || false").unwrap();
        assert_eq!(
            selected.value_within(&activation, &mut budget),
            Ok(CelValue::Bool(true))
        );
        assert_eq!(budget, Budget(55));
        // Strings cost by their length: `==` a tenth of the shorter one's, rounded up.
        let long = "a".repeat(95);
        activation.json("name", &json!(long));
        let compare = Expression::compile("name == name").unwrap();
        assert_eq!(
            compare.value_within(&activation, &mut budget),
            Ok(CelValue::Bool(true))
        );
        assert_eq!(budget, Budget(55 - 2 - 10));
        // What the budget does not cover is not evaluated further.
        assert_eq!(
            literal.value_within(&activation, &mut Budget(20)),
            Err(Failure::OutOfBudget)
        );
        // A budget spent to exactly nothing still runs what costs nothing.
        let mut spent = Budget(0);
        assert_eq!(
            Expression::compile("true")
                .unwrap()
                .value_within(&activation, &mut spent),
            Ok(CelValue::Bool(true))
        );
        assert_eq!(spent, Budget(0));
        assert_eq!(
            Failure::OutOfBudget.to_string(),
            "validation failed due to running out of cost budget, no further validation rules will be run"
        );
    }

    #[test]
    fn an_evaluation_over_the_per_call_limit_stops_with_upstreams_error() {
        let mut activation = Activation::default();
        activation.json("items", &json!((0..2000).collect::<Vec<_>>()));
        // 2,000 × 2,000 comparisons: millions, over the limit of 1,000,000.
        let pairs = Expression::compile("items.all(a, items.all(b, a == b || a != b))").unwrap();
        assert_eq!(
            pairs.value(&activation),
            Err("operation cancelled: actual cost limit exceeded".to_owned())
        );
        // The same over 100 items costs about 60,000 and is answered.
        activation.json("items", &json!((0..100).collect::<Vec<_>>()));
        assert_eq!(pairs.value(&activation), Ok(CelValue::Bool(true)));
        // Namespaced functions and member calls on variables still resolve through the meter.
        let math = Expression::compile("math.greatest(1, 2) == 2 && items.size() == 100").unwrap();
        assert_eq!(math.value(&activation), Ok(CelValue::Bool(true)));
    }
}
