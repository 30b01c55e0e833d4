//! The cost of CEL expressions, as upstream limits it (`k8s.io/apiserver/pkg/apis/cel` and
//! cel-go's cost model, which Kubernetes' limits are stated in).
//!
//! - [`estimate`]: the static worst-case cost of an expression over a [`Decl`] (the CEL view
//!   of a structural schema: each string's, list's and map's largest size from
//!   `maxLength`/`maxItems`/`maxProperties`, or else from how many of them fit into the
//!   largest request, 3 MiB, as upstream estimates). It follows cel-go's estimator node for
//!   node: identifiers and field selections cost 1, literals 0, a call 1 plus its arguments
//!   unless its cost depends on sizes (string comparison, concatenation, `contains`,
//!   `matches`, `in` on a list, and the Kubernetes library's string, list, regex, IP and
//!   quantity functions, with the same factors), list and map literals 10 and 30, and a
//!   comprehension (the macros `all`, `exists`, `exists_one`, `map`, `filter`) its range's
//!   largest size times the cost of one step. CRD validation ([`super::rule_errors`]) refuses
//!   rules, `messageExpression`s and whole schemas over the static limits with upstream's
//!   messages ([`exceeds_message`]).
//! - [`instrument`] and [`metered`]: the runtime meter. An expression is evaluated through a
//!   rewritten tree whose nodes charge cel-go's runtime cost as they run (identifiers and
//!   selections 1, list and map literals 10 and 30, a call what cel-go's tracker and the
//!   Kubernetes library's `CallCost` charge for it, from its operands' and result's actual
//!   sizes: the operands are evaluated first, then the call over placeholders bound to them);
//!   past [`PER_CALL_LIMIT`] every further charge fails, which stops the evaluation with
//!   cel-go's error ([`CALL_LIMIT_EXCEEDED`]). Callers charge each evaluation's cost to
//!   [`RUNTIME_BUDGET`] ([`super::Budget`]), and stop with [`OUT_OF_BUDGET`] when it is spent.
//!
//! Without a type checker, an expression's types come from the schema (for `self`) and from
//! the operations themselves; an operand of unknown type is costed as cel-go costs a
//! scalar's, which can be lower than upstream's estimate only for values declared without
//! a schema (`x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use kube_cel::cel::IdedExpr;
use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

use crate::structural::{additional, embedded, items};

/// The largest cost one evaluation of an expression may reach (`celconfig.PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// The cost all the rules of one custom object, or all the expressions of one policy binding
/// for one request, may reach together (`celconfig.RuntimeCELCostBudget`).
pub const RUNTIME_BUDGET: u64 = 10_000_000;
/// The largest estimated cost of one rule (`StaticEstimatedCostLimit`).
pub const STATIC_RULE_LIMIT: u64 = 10_000_000;
/// The largest estimated cost of all the rules of one schema (`StaticEstimatedCRDCostLimit`).
pub const STATIC_SCHEMA_LIMIT: u64 = 100_000_000;
/// The largest request, which bounds what a schema leaves unbounded.
const MAX_REQUEST_SIZE: u64 = 3 * 1024 * 1024;
/// cel-go's cost of traversing one character.
const STRING_TRAVERSAL: f64 = 0.1;
/// cel-go's guess of a regular expression's cost per character.
const REGEX_LENGTH: f64 = 0.25;
/// The serialized sizes of durations and times (`k8s.io/apiserver/pkg/cel/limits.go`).
const MAX_DURATION_JSON: u64 = 32;
const DATE_JSON: u64 = 12;
const MIN_DURATION_JSON: u64 = 3;
const MIN_DATETIME_JSON: u64 = 21;
const MAX_DATETIME_JSON: u64 = 32;

/// Upstream's message for a cost over its limit: how many times over, with the advice.
pub fn exceeds_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The kind of a CEL value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    Null,
    List,
    Map,
    Object,
    Dyn,
}

/// A schema node as CEL sees it (upstream's `DeclType`): its kind, the largest number of
/// elements (characters, items, properties) it can hold, the smallest size it serializes to,
/// and its fields, items or values.
#[derive(Clone, Debug)]
pub struct Decl {
    kind: Kind,
    max_elements: u64,
    min_size: u64,
    fields: BTreeMap<String, Decl>,
    elem: Option<Box<Decl>>,
}

impl Decl {
    fn scalar(kind: Kind, min_size: u64, max_elements: u64) -> Decl {
        Decl {
            kind,
            max_elements,
            min_size,
            fields: BTreeMap::new(),
            elem: None,
        }
    }

    /// The declaration of `schema` (`root`: the root of a resource or an embedded resource,
    /// which always has `apiVersion`, `kind` and `metadata.name`/`generateName`); `None` for
    /// a node CEL cannot see.
    pub fn of(schema: &JSONSchemaProps, root: bool) -> Option<Decl> {
        let max_length = schema.max_length.map(|m| m.max(0) as u64);
        if schema.x_kubernetes_int_or_string == Some(true) {
            let max = max_length.map_or(MAX_REQUEST_SIZE - 2, |m| m * 4);
            return Some(Decl::scalar(Kind::Dyn, 1, max));
        }
        let kind = schema.type_.as_deref().unwrap_or_default();
        match kind {
            "array" => {
                let item = items(schema)?;
                let elem = Decl::of(item, embedded(item))?;
                let max = match schema.max_items {
                    Some(m) => m.max(0) as u64,
                    None => (MAX_REQUEST_SIZE - 2) / (elem.min_size + 1),
                };
                Some(Decl {
                    kind: Kind::List,
                    max_elements: max,
                    min_size: 2,
                    fields: BTreeMap::new(),
                    elem: Some(Box::new(elem)),
                })
            }
            "object" if additional(schema).is_some() => {
                let value = additional(schema)?;
                let elem = Decl::of(value, embedded(value));
                let max = match (&elem, schema.max_properties) {
                    (None, _) => i64::MAX as u64,
                    (Some(_), Some(m)) => m.max(0) as u64,
                    (Some(e), None) => (MAX_REQUEST_SIZE - 2) / (e.min_size + 6),
                };
                Some(Decl {
                    kind: Kind::Map,
                    max_elements: max,
                    min_size: 2,
                    fields: BTreeMap::new(),
                    elem: Some(Box::new(elem.unwrap_or(Decl::scalar(Kind::Dyn, 1, 0)))),
                })
            }
            "object" => {
                let required = schema.required.as_deref().unwrap_or_default();
                let mut fields = BTreeMap::new();
                let mut min_size = 2;
                for (name, property) in schema.properties.iter().flatten() {
                    let Some(field) = Decl::of(property, embedded(property)) else {
                        continue;
                    };
                    if required.contains(name) && property.default.is_none() {
                        min_size += name.len() as u64 + field.min_size + 4;
                    }
                    if let Some(escaped) = escape(name) {
                        fields.insert(escaped, field);
                    }
                }
                if root {
                    let string = Decl::scalar(Kind::String, 2, MAX_REQUEST_SIZE - 2);
                    fields.insert("apiVersion".into(), string.clone());
                    fields.insert("kind".into(), string.clone());
                    let mut metadata = Decl::scalar(Kind::Object, 2, 0);
                    metadata.fields.insert("name".into(), string.clone());
                    metadata.fields.insert("generateName".into(), string);
                    fields.insert("metadata".into(), metadata);
                }
                Some(Decl {
                    kind: Kind::Object,
                    max_elements: 0,
                    min_size,
                    fields,
                    elem: None,
                })
            }
            "string" => Some(match schema.format.as_deref() {
                Some("byte") => {
                    Decl::scalar(Kind::Bytes, 2, max_length.unwrap_or(MAX_REQUEST_SIZE - 2))
                }
                Some("duration") => {
                    Decl::scalar(Kind::Duration, MIN_DURATION_JSON, MAX_DURATION_JSON)
                }
                Some("date") => Decl::scalar(Kind::Timestamp, DATE_JSON, DATE_JSON),
                Some("date-time") => {
                    Decl::scalar(Kind::Timestamp, MIN_DATETIME_JSON, MAX_DATETIME_JSON)
                }
                _ => {
                    let enum_max = schema.enum_.as_ref().filter(|e| !e.is_empty()).map(|e| {
                        e.iter()
                            .filter_map(|v| v.0.as_str())
                            .map(|s| s.len() as u64)
                            .max()
                            .unwrap_or(0)
                    });
                    let max = match (max_length, enum_max) {
                        (Some(m), _) => m * 4,
                        (None, Some(e)) => e,
                        (None, None) => MAX_REQUEST_SIZE - 2,
                    };
                    Decl::scalar(Kind::String, 2, max)
                }
            }),
            "boolean" => Some(Decl::scalar(Kind::Bool, 4, 0)),
            "number" => Some(Decl::scalar(Kind::Double, 1, 0)),
            "integer" => Some(Decl::scalar(Kind::Int, 1, 0)),
            _ => None,
        }
    }

    /// The number of times a value of this declaration could occur in one request
    /// (upstream's `maxCardinality`): what a rule's cost is multiplied by when the node sits
    /// under a list or map without a bound.
    pub fn max_cardinality(&self) -> u64 {
        MAX_REQUEST_SIZE / (self.min_size + 1)
    }
}

/// A property name as CEL reads it (upstream's `cel.Escape`); `None` for a name CEL cannot
/// spell, which rules then do not see.
pub(crate) fn escape(name: &str) -> Option<String> {
    if super::RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first = chars.next()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    if !(first.is_ascii_alphabetic() || matches!(first, '_' | '.' | '-' | '/'))
        || !chars.all(allowed)
    {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = tail;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// A range of sizes (characters, items, entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Size {
    min: u64,
    max: u64,
}

const UNKNOWN: Size = Size {
    min: 0,
    max: u64::MAX,
};

impl Size {
    fn fixed(n: u64) -> Size {
        Size { min: n, max: n }
    }
    fn add(self, o: Size) -> Size {
        Size {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }
    fn mul(self, o: Size) -> Size {
        Size {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }
    fn union(self, o: Size) -> Size {
        Size {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
    /// The cost of `factor` per element, rounded up (cel-go's `MultiplyByCostFactor`).
    fn times(self, factor: f64) -> u64 {
        by_factor(self.max, factor)
    }
}

fn by_factor(x: u64, factor: f64) -> u64 {
    let product = (x as f64 * factor).ceil();
    if product >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        product as u64
    }
}

/// The sizes of a literal list's or map's keys and values, carried to what iterates it.
#[derive(Clone, Copy, Debug)]
struct Entry {
    list: bool,
    key: Size,
    val: Size,
}

impl Entry {
    fn union(a: Option<Entry>, b: Option<Entry>) -> Option<Entry> {
        let (a, b) = (a?, b?);
        Some(Entry {
            list: a.list,
            key: a.key.union(b.key),
            val: a.val.union(b.val),
        })
    }
}

/// The type of an expression, as far as the estimate needs it.
#[derive(Clone, Debug)]
enum Ty<'a> {
    Decl(&'a Decl),
    Kind(Kind),
    List(Box<Ty<'a>>),
    Map(Box<Ty<'a>>),
}

impl<'a> Ty<'a> {
    fn kind(&self) -> Kind {
        match self {
            Ty::Decl(d) => d.kind,
            Ty::Kind(k) => *k,
            Ty::List(_) => Kind::List,
            Ty::Map(_) => Kind::Map,
        }
    }
    /// A list's items or a map's values.
    fn elem(&self) -> Ty<'a> {
        match self {
            Ty::Decl(d) => d.elem.as_deref().map_or(Ty::Kind(Kind::Dyn), Ty::Decl),
            Ty::List(e) | Ty::Map(e) => (**e).clone(),
            Ty::Kind(_) => Ty::Kind(Kind::Dyn),
        }
    }
    /// What iterating over it gives: a list's items, a map's keys.
    fn iterated(&self) -> Ty<'a> {
        match self.kind() {
            Kind::Map => Ty::Kind(Kind::String),
            _ => self.elem(),
        }
    }
    fn field(&self, name: &str) -> Ty<'a> {
        match self {
            Ty::Decl(d) if d.kind == Kind::Object => {
                d.fields.get(name).map_or(Ty::Kind(Kind::Dyn), Ty::Decl)
            }
            Ty::Decl(d) if d.kind == Kind::Map => self.elem(),
            Ty::Map(e) => (**e).clone(),
            _ => Ty::Kind(Kind::Dyn),
        }
    }
    fn is_scalar(&self) -> bool {
        matches!(
            self.kind(),
            Kind::Bool | Kind::Double | Kind::Duration | Kind::Int | Kind::Timestamp | Kind::Uint
        )
    }
    fn is_text(&self) -> bool {
        matches!(self.kind(), Kind::String | Kind::Bytes)
    }
}

/// A variable bound inside the expression (a comprehension's iteration variable or
/// accumulator).
#[derive(Clone, Debug)]
struct Local<'a> {
    path: Vec<String>,
    size: Option<Size>,
    entry: Option<Entry>,
    ty: Ty<'a>,
}

/// cel-go's static estimator over one parsed expression.
struct Coster<'a> {
    root: &'a Decl,
    variables: &'a [&'a str],
    locals: HashMap<String, Vec<Local<'a>>>,
    sizes: HashMap<u64, Size>,
    entries: HashMap<u64, Entry>,
    paths: HashMap<u64, Vec<String>>,
    types: HashMap<u64, Ty<'a>>,
}

/// The estimated worst-case cost of `expression` when `variables` (`self`, `oldSelf`) are
/// values of `decl`; `None` when it does not parse.
pub fn estimate(expression: &str, decl: &Decl, variables: &[&str]) -> Option<u64> {
    let parsed = super::parse(expression).ok()?;
    let mut coster = Coster {
        root: decl,
        variables,
        locals: HashMap::new(),
        sizes: HashMap::new(),
        entries: HashMap::new(),
        paths: HashMap::new(),
        types: HashMap::new(),
    };
    Some(coster.cost(&parsed))
}

impl<'a> Coster<'a> {
    fn peek(&self, name: &str) -> Option<&Local<'a>> {
        self.locals.get(name).and_then(|stack| stack.last())
    }

    fn push(&mut self, name: &str, local: Local<'a>) {
        self.locals.entry(name.to_owned()).or_default().push(local);
    }

    fn pop(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    fn ty(&self, e: &IdedExpr) -> Ty<'a> {
        self.types
            .get(&e.id)
            .cloned()
            .unwrap_or(Ty::Kind(Kind::Dyn))
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(local) = self.peek(name)
        {
            return local.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    /// The size of the schema node a path from `self` leads to (the CRD's size estimator).
    fn path_size(&self, path: &[String]) -> Option<Size> {
        let (_, rest) = path.split_first()?;
        let mut node = self.root;
        for segment in rest {
            node = match segment.as_str() {
                "@items" | "@values" => node.elem.as_deref()?,
                "@keys" => {
                    return (node.kind == Kind::Map).then_some(Size::fixed(0));
                }
                name => node.fields.get(name)?,
            };
        }
        Some(Size {
            min: 0,
            max: node.max_elements,
        })
    }

    /// cel-go's `computeSize`.
    fn size(&mut self, e: &IdedExpr) -> Option<Size> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = literal_size(e) {
            return Some(size);
        }
        if let Some(size) = self.path_size(&self.path(e)) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.ty(e).is_scalar() {
            return Some(Size::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr {
            return self.peek(name).and_then(|l| l.size);
        }
        None
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Size {
        self.size(e).unwrap_or(UNKNOWN)
    }

    fn entry(&self, e: &IdedExpr) -> Option<Entry> {
        if let Some(entry) = self.entries.get(&e.id) {
            return Some(*entry);
        }
        if let Expr::Ident(name) = &e.expr {
            return self.peek(name).and_then(|l| l.entry);
        }
        None
    }

    fn cost(&mut self, e: &IdedExpr) -> u64 {
        match &e.expr {
            Expr::Literal(literal) => {
                let kind = match literal {
                    LiteralValue::Boolean(_) => Kind::Bool,
                    LiteralValue::Bytes(_) => Kind::Bytes,
                    LiteralValue::Double(_) => Kind::Double,
                    LiteralValue::Int(_) => Kind::Int,
                    LiteralValue::Null => Kind::Null,
                    LiteralValue::String(_) => Kind::String,
                    LiteralValue::UInt(_) => Kind::Uint,
                };
                self.types.insert(e.id, Ty::Kind(kind));
                0
            }
            Expr::Ident(name) => {
                let ty = match self.peek(name) {
                    Some(local) => local.ty.clone(),
                    None if self.variables.contains(&name.as_str()) => Ty::Decl(self.root),
                    None => Ty::Kind(Kind::Dyn),
                };
                if self.peek(name).is_none() {
                    self.paths.insert(e.id, vec![name.clone()]);
                }
                self.types.insert(e.id, ty);
                1
            }
            Expr::Select(select) => {
                let operand = self.cost(&select.operand);
                if select.test {
                    self.types.insert(e.id, Ty::Kind(Kind::Bool));
                    return operand + 1;
                }
                let operand_ty = self.ty(&select.operand);
                let ty = operand_ty.field(&select.field);
                self.types.insert(e.id, ty);
                let mut path = self.path(&select.operand);
                path.push(select.field.clone());
                self.paths.insert(e.id, path);
                match operand_ty.kind() {
                    Kind::Map | Kind::Object => operand + 1,
                    _ => operand,
                }
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(list) => {
                let mut sum: u64 = 0;
                let mut val = if list.elements.is_empty() {
                    Size::fixed(0)
                } else {
                    Size {
                        min: u64::MAX,
                        max: 0,
                    }
                };
                for element in &list.elements {
                    sum = sum.saturating_add(self.cost(element));
                    val = val.union(self.size_or_unknown(element));
                }
                let elem = list
                    .elements
                    .first()
                    .map_or(Ty::Kind(Kind::Dyn), |first| self.ty(first));
                self.types.insert(e.id, Ty::List(Box::new(elem)));
                self.entries.insert(
                    e.id,
                    Entry {
                        list: true,
                        key: Size::fixed(1),
                        val,
                    },
                );
                sum.saturating_add(10)
            }
            Expr::Map(map) => {
                let mut sum: u64 = 0;
                let empty = if map.entries.is_empty() {
                    Size::fixed(0)
                } else {
                    Size {
                        min: u64::MAX,
                        max: 0,
                    }
                };
                let (mut key, mut val) = (empty, empty);
                let mut value_ty = Ty::Kind(Kind::Dyn);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        sum = sum.saturating_add(self.cost(&entry.key));
                        sum = sum.saturating_add(self.cost(&entry.value));
                        key = key.union(self.size_or_unknown(&entry.key));
                        val = val.union(self.size_or_unknown(&entry.value));
                        value_ty = self.ty(&entry.value);
                    }
                }
                self.types.insert(e.id, Ty::Map(Box::new(value_ty)));
                self.entries.insert(
                    e.id,
                    Entry {
                        list: false,
                        key,
                        val,
                    },
                );
                sum.saturating_add(30)
            }
            Expr::Struct(object) => {
                let mut sum: u64 = 0;
                for entry in &object.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        sum = sum.saturating_add(self.cost(&field.value));
                    }
                }
                self.types.insert(e.id, Ty::Kind(Kind::Object));
                sum.saturating_add(40)
            }
            Expr::Comprehension(comprehension) => self.comprehension(e, comprehension),
            Expr::Unspecified => 0,
        }
    }

    fn comprehension(
        &mut self,
        e: &IdedExpr,
        c: &kube_cel::cel::common::ast::ComprehensionExpr,
    ) -> u64 {
        let mut sum = self.cost(&c.iter_range);
        sum = sum.saturating_add(self.cost(&c.accu_init));
        let accu = Local {
            path: self.path(&c.accu_init),
            size: self.size(&c.accu_init),
            entry: self.entry(&c.accu_init),
            ty: self.ty(&c.accu_init),
        };
        self.push(&c.accu_var, accu);
        let range_entry = self.entry(&c.iter_range);
        let range_ty = self.ty(&c.iter_range);
        let list = match range_entry {
            Some(entry) => entry.list,
            None => range_ty.kind() != Kind::Map,
        };
        let mut path = self.path(&c.iter_range);
        path.push(if list { "@items" } else { "@keys" }.to_owned());
        let iter = Local {
            path,
            size: range_entry.map(|entry| if list { entry.val } else { entry.key }),
            entry: None,
            ty: range_ty.iterated(),
        };
        self.push(&c.iter_var, iter);
        let condition = self.cost(&c.loop_cond);
        let step = self.cost(&c.loop_step);
        self.pop(&c.iter_var);
        sum = sum.saturating_add(self.cost(&c.result));
        self.pop(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.saturating_add(range.max.saturating_mul(step.saturating_add(condition)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = literal_size(&c.accu_init) {
                    self.sizes.insert(e.id, size);
                }
                let ty = self.ty(&c.result);
                self.types.insert(e.id, ty);
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range);
                if let Some(entry) = self.entry(&c.loop_step) {
                    self.entries.insert(e.id, entry);
                }
                let ty = self.ty(&c.loop_step);
                self.types.insert(e.id, ty);
            }
            _ => {
                let ty = self.ty(&c.result);
                self.types.insert(e.id, ty);
            }
        }
        sum
    }

    fn call(&mut self, e: &IdedExpr, call: &kube_cel::cel::common::ast::CallExpr) -> u64 {
        let name = call.func_name.as_str();
        let args = &call.args;
        if name == "dyn" && args.len() == 1 && call.target.is_none() {
            let cost = self.cost(&args[0]);
            if let Some(size) = self.size(&args[0]) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.entry(&args[0]) {
                self.entries.insert(e.id, entry);
            }
            self.types.insert(e.id, Ty::Kind(Kind::Dyn));
            return cost.saturating_add(1);
        }
        let arg_costs: Vec<u64> = args.iter().map(|a| self.cost(a)).collect();
        let args_sum = arg_costs.iter().fold(0u64, |s, c| s.saturating_add(*c));
        let target_cost = call.target.as_deref().map_or(0, |t| self.cost(t));
        let target = call.target.as_deref();
        let (cost, size) = self.function(e, name, target, args, &arg_costs, args_sum);
        self.types
            .insert(e.id, self.result_type(name, target, args));
        let mut size = size;
        if name == operators::INDEX && args.len() == 2 {
            let container = self.ty(&args[0]).kind();
            if matches!(container, Kind::List | Kind::Map) {
                size = self.entry(&args[0]).map(|entry| entry.val).or(size);
                let mut path = self.path(&args[0]);
                path.push(
                    if container == Kind::List {
                        "@items"
                    } else {
                        "@values"
                    }
                    .to_owned(),
                );
                self.paths.insert(e.id, path);
            }
        }
        if let Some(size) = size.or_else(|| self.size(e)) {
            self.sizes.insert(e.id, size);
        }
        target_cost.saturating_add(cost)
    }

    /// The cost of calling `name` (without its target's cost) and the size of its result.
    fn function(
        &mut self,
        e: &IdedExpr,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
        arg_costs: &[u64],
        args_sum: u64,
    ) -> (u64, Option<Size>) {
        let plus = |c: u64| c.saturating_add(args_sum);
        if let Some((cost, size)) = self.library(name, target, args) {
            return (plus(cost), size);
        }
        match (name, target, args) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, None, [_, _]) => (args_sum, None),
            (operators::CONDITIONAL, None, [_, yes, no]) => {
                let size = self.size_or_unknown(yes).union(self.size_or_unknown(no));
                if let Some(entry) = Entry::union(self.entry(yes), self.entry(no)) {
                    self.entries.insert(e.id, entry);
                }
                let cost = arg_costs[0].saturating_add(arg_costs[1].max(arg_costs[2]));
                (cost, Some(size))
            }
            (operators::ADD, None, [lhs, rhs]) => {
                let (l, r) = (self.ty(lhs).kind(), self.ty(rhs).kind());
                if l == Kind::List || r == Kind::List {
                    let size = self.size_or_unknown(lhs).add(self.size_or_unknown(rhs));
                    if let Some(entry) = Entry::union(self.entry(lhs), self.entry(rhs)) {
                        self.entries.insert(e.id, entry);
                    }
                    (plus(1), Some(size))
                } else if matches!(l, Kind::String | Kind::Bytes)
                    || matches!(r, Kind::String | Kind::Bytes)
                {
                    let size = self.size_or_unknown(lhs).add(self.size_or_unknown(rhs));
                    (plus(size.times(STRING_TRAVERSAL)), Some(size))
                } else {
                    (plus(1), None)
                }
            }
            (operators::EQUALS | operators::NOT_EQUALS, None, [lhs, rhs]) => {
                (plus(self.smallest(lhs, rhs)), None)
            }
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                None,
                [lhs, rhs],
            ) if self.ty(lhs).is_text() => (plus(self.smallest(lhs, rhs)), None),
            (operators::IN, None, [_, container]) if self.ty(container).kind() != Kind::Map => {
                (plus(self.size_or_unknown(container).max), None)
            }
            ("matches", Some(t), [pattern]) => {
                let text = self.size_or_unknown(t).add(Size::fixed(1));
                let regex = self.size_or_unknown(pattern).times(REGEX_LENGTH);
                let cost = text.times(STRING_TRAVERSAL).saturating_mul(regex);
                (plus(cost), None)
            }
            ("contains", Some(t), [needle]) => {
                let text = self.size_or_unknown(t).times(STRING_TRAVERSAL);
                let needle = self.size_or_unknown(needle).times(STRING_TRAVERSAL);
                (plus(text.saturating_mul(needle)), None)
            }
            ("startsWith" | "endsWith", Some(_), [prefix]) => (
                plus(self.size_or_unknown(prefix).times(STRING_TRAVERSAL)),
                None,
            ),
            ("format", Some(t), [_]) => {
                (plus(self.size_or_unknown(t).times(STRING_TRAVERSAL)), None)
            }
            ("bytes", None, [arg]) if self.ty(arg).kind() == Kind::String => {
                let size = self.size_or_unknown(arg);
                let result = Size {
                    min: size.min,
                    max: size.max.saturating_mul(4),
                };
                (plus(size.times(STRING_TRAVERSAL)), Some(result))
            }
            ("string", None, [arg]) if self.ty(arg).kind() == Kind::Bytes => {
                let size = self.size_or_unknown(arg);
                let result = Size {
                    min: size.min / 4,
                    max: size.max,
                };
                (plus(size.times(STRING_TRAVERSAL)), Some(result))
            }
            ("strings.quote", None, [arg]) => {
                let size = self.size_or_unknown(arg);
                let result = Size {
                    min: size.min + 2,
                    max: size.max.saturating_mul(2).saturating_add(2),
                };
                (plus(size.times(STRING_TRAVERSAL)), Some(result))
            }
            _ => (plus(1), None),
        }
    }

    /// The smallest of two operands' largest sizes, at a character's cost each: the cost of
    /// comparing them.
    fn smallest(&mut self, lhs: &IdedExpr, rhs: &IdedExpr) -> u64 {
        let max = self
            .size_or_unknown(lhs)
            .max
            .min(self.size_or_unknown(rhs).max);
        by_factor(max, STRING_TRAVERSAL)
    }

    /// The Kubernetes library's estimates (`k8s.io/apiserver/pkg/cel/library/cost.go`),
    /// which come before cel-go's own; the arguments' costs are added by the caller.
    fn library(
        &mut self,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Option<(u64, Option<Size>)> {
        let first = |c: &mut Self| args.first().map(|a| c.size_or_unknown(a));
        Some(match name {
            "check" => (350_000, None),
            "serviceAccount" | "path" | "group" | "resource" | "subresource" | "namespace"
            | "name" | "allowed" | "reason" | "error" | "errored" => (1, None),
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let t = target?;
                let ty = self.ty(t);
                if ty.kind() == Kind::List {
                    let elem = ty.elem();
                    let mut per = 1u64;
                    if elem.is_text() {
                        let mut path = self.path(t);
                        path.push("@items".into());
                        let size = self.path_size(&path).unwrap_or(UNKNOWN);
                        per = per.saturating_add(size.times(STRING_TRAVERSAL));
                    }
                    (self.size_or_unknown(t).max.saturating_mul(per), None)
                } else {
                    (self.size_or_unknown(t).times(STRING_TRAVERSAL), None)
                }
            }
            "url" if args.len() == 1 => (first(self)?.times(STRING_TRAVERSAL), None),
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let size = self.size_or_unknown(target?);
                (size.times(STRING_TRAVERSAL), Some(size))
            }
            "replace" if args.len() >= 2 => {
                let size = self.size_or_unknown(target?);
                let from = self.size_or_unknown(&args[0]);
                let to = self.size_or_unknown(&args[1]);
                let mut count = Size::fixed(0);
                let mut kept = Size::fixed(0);
                if from.min == 0 {
                    count.max = size.max.saturating_add(1);
                    kept.max = size.max;
                } else if to.max <= from.min {
                    kept.max = size.max;
                } else {
                    count.max = (size.max as f64 / from.min as f64).ceil() as u64;
                }
                if from.max == 0 {
                    count.min = size.min.saturating_add(1);
                    kept.min = size.min;
                } else if from.max <= to.min {
                    kept.min = size.min;
                } else {
                    count.min = (size.min as f64 / from.max as f64).ceil() as u64;
                }
                let result = count.mul(to).add(kept);
                (size.times(2.0 * STRING_TRAVERSAL), Some(result))
            }
            "split" => {
                let size = self.size_or_unknown(target?);
                let max = match args.get(1).map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::Int(n))) => (*n.inner()).max(0) as u64,
                    Some(Expr::Literal(LiteralValue::UInt(n))) => *n.inner(),
                    _ => size.max,
                };
                (
                    size.times(2.0 * STRING_TRAVERSAL),
                    Some(Size { min: 0, max }),
                )
            }
            "join" => {
                let t = target?;
                let list = self.size_or_unknown(t);
                let mut size = Size::fixed(0);
                if self.ty(t).kind() == Kind::List {
                    let mut path = self.path(t);
                    path.push("@items".into());
                    let elem = self.path_size(&path).unwrap_or(UNKNOWN);
                    size = list.mul(elem);
                }
                if let Some(separator) = args.first() {
                    let separator = self.size_or_unknown(separator);
                    let count = Size {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    size = size.add(separator.mul(count));
                }
                (size.times(STRING_TRAVERSAL), Some(size))
            }
            "find" | "findAll" => {
                let size = self.size_or_unknown(target?);
                let text = size.add(Size::fixed(1)).times(STRING_TRAVERSAL);
                let regex = first(self)?.times(REGEX_LENGTH);
                (
                    text.saturating_mul(regex),
                    Some(Size {
                        min: 0,
                        max: size.max,
                    }),
                )
            }
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" => {
                (first(self)?.times(STRING_TRAVERSAL), None)
            }
            "ip" => match first(self) {
                Some(size) => (size.times(STRING_TRAVERSAL), None),
                None => (1, None),
            },
            "ip.isCanonical" => (first(self)?.times(2.0 * STRING_TRAVERSAL), None),
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "sign"
            | "asInteger"
            | "isInteger"
            | "asApproximateFloat"
            | "isGreaterThan"
            | "isLessThan"
            | "compareTo"
            | "add"
            | "sub" => (1, None),
            "containsIP" | "containsCIDR" if target.is_some() && !args.is_empty() => {
                let ip = Size { min: 4, max: 16 };
                let mut cost = ip.add(ip).times(STRING_TRAVERSAL);
                if name == "containsCIDR" {
                    cost = cost + ip.times(STRING_TRAVERSAL) + 1;
                }
                if self.ty(&args[0]).kind() == Kind::String {
                    cost = cost.saturating_add(first(self)?.times(STRING_TRAVERSAL));
                }
                (cost, None)
            }
            _ => return None,
        })
    }

    /// The type of a call's result, from what it is and what it is called on.
    fn result_type(&self, name: &str, target: Option<&IdedExpr>, args: &[IdedExpr]) -> Ty<'a> {
        let arg = |i: usize| args.get(i).map_or(Ty::Kind(Kind::Dyn), |a| self.ty(a));
        let kind = match name {
            operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::IN
            | operators::NOT_STRICTLY_FALSE
            | "matches"
            | "contains"
            | "startsWith"
            | "endsWith"
            | "isSorted"
            | "isURL"
            | "isIP"
            | "isCIDR"
            | "isQuantity"
            | "isInteger"
            | "isGreaterThan"
            | "isLessThan"
            | "containsIP"
            | "containsCIDR"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "ip.isCanonical"
            | "allowed"
            | "errored" => Kind::Bool,
            "size" | "int" | "indexOf" | "lastIndexOf" | "sign" | "asInteger" | "compareTo"
            | "prefixLength" | "family" => Kind::Int,
            "uint" => Kind::Uint,
            "double" | "asApproximateFloat" => Kind::Double,
            "string" | "lowerAscii" | "upperAscii" | "substring" | "trim" | "replace" | "join"
            | "find" | "format" | "charAt" | "strings.quote" | "reason" | "error" => Kind::String,
            "bytes" => Kind::Bytes,
            "duration" => Kind::Duration,
            "timestamp" => Kind::Timestamp,
            "split" | "findAll" => return Ty::List(Box::new(Ty::Kind(Kind::String))),
            operators::CONDITIONAL => return arg(1),
            operators::INDEX => return arg(0).elem(),
            operators::ADD => {
                let (l, r) = (arg(0), arg(1));
                return match (&l, &r) {
                    (Ty::List(e), _) if matches!(**e, Ty::Kind(Kind::Dyn)) => r,
                    _ if l.kind() == Kind::Dyn => r,
                    _ => l,
                };
            }
            operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE => return arg(0),
            "sum" | "max" | "min" => {
                return target.map_or(Ty::Kind(Kind::Dyn), |t| self.ty(t).elem());
            }
            _ => Kind::Dyn,
        };
        Ty::Kind(kind)
    }
}

/// The size of a literal (cel-go's `computeExprSize`).
fn literal_size(e: &IdedExpr) -> Option<Size> {
    Some(Size::fixed(match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        _ => return None,
    }))
}

// ---------------------------------------------------------------------------------------
// The runtime meter.

/// cel-go's error when an evaluation spends more than its limit.
pub const CALL_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
/// Upstream's error when the expressions of one object or binding spend the whole budget.
pub const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// The name of the function every metered call goes through, and of the one that charges a
/// fixed cost for a node; neither can be written in CEL.
pub(crate) const CALL: &str = "@cost.call";
pub(crate) const CHARGE: &str = "@cost.charge";
/// What `a.?f` (`_?._`) is evaluated with: the `cel` crate's own gives an error for a map
/// without the key (where CEL gives `optional.none()`) and wraps a missing key of an optional
/// operand in a second optional, so `.orValue(d)` and `.hasValue()` after it were wrong.
const OPTIONAL_SELECT: &str = "@optional.select";

thread_local! {
    /// The cost spent by the evaluation running on this thread, and its limit.
    static METER: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, u64::MAX)) };
}

/// Runs `evaluate` with a meter of `limit`; what it gives, and what it cost (`None`: over
/// the limit).
pub(crate) fn metered<T>(limit: u64, evaluate: impl FnOnce() -> T) -> (T, Option<u64>) {
    let outer = METER.with(|m| m.replace((0, limit)));
    let result = evaluate();
    let (spent, _) = METER.with(|m| m.replace(outer));
    (result, (spent <= limit).then_some(spent))
}

/// Adds `cost` to the running evaluation; an error once it is over its limit, which stops
/// the evaluation (every later charge fails too).
fn charge(cost: u64) -> Result<(), kube_cel::cel::ExecutionError> {
    METER.with(|m| {
        let (spent, limit) = m.get();
        let spent = spent.saturating_add(cost);
        m.set((spent, limit));
        if spent > limit {
            Err(kube_cel::cel::ExecutionError::function_error(
                CHARGE,
                CALL_LIMIT_EXCEEDED,
            ))
        } else {
            Ok(())
        }
    })
}

/// The tree `e` evaluates through the meter: identifiers and selections charge 1, list and
/// map literals 10 and 30, each call what cel-go's runtime tracker charges for it (from the
/// actual sizes of its operands and result); `&&`, `||` and `?:` charge nothing of their own,
/// as upstream's.
pub(crate) fn instrument(e: &IdedExpr) -> IdedExpr {
    use kube_cel::cel::common::ast::{CallExpr, ListExpr, MapExpr, SelectExpr};
    let wrap = |cost: u64, inner: Expr| -> IdedExpr {
        node(Expr::Call(CallExpr {
            func_name: CHARGE.to_owned(),
            target: None,
            args: vec![
                node(Expr::Literal(LiteralValue::UInt(cost.into()))),
                node(inner),
            ],
        }))
    };
    match &e.expr {
        Expr::Literal(_) | Expr::Unspecified | Expr::Struct(_) => e.clone(),
        Expr::Ident(_) => wrap(1, e.expr.clone()),
        Expr::Select(select) => wrap(
            1,
            Expr::Select(SelectExpr {
                operand: Box::new(instrument(&select.operand)),
                field: select.field.clone(),
                test: select.test,
            }),
        ),
        Expr::List(list) => wrap(
            10,
            Expr::List(ListExpr::new_with_optionals(
                list.elements.iter().map(instrument).collect(),
                list.optional_indices.clone(),
            )),
        ),
        Expr::Map(map) => wrap(
            30,
            Expr::Map(MapExpr {
                entries: map
                    .entries
                    .iter()
                    .map(|entry| {
                        let mut entry = entry.clone();
                        if let EntryExpr::MapEntry(m) = &mut entry.expr {
                            m.key = instrument(&m.key);
                            m.value = instrument(&m.value);
                        }
                        entry
                    })
                    .collect(),
            }),
        ),
        Expr::Comprehension(c) => {
            let mut c = (**c).clone();
            c.iter_range = instrument(&c.iter_range);
            c.accu_init = instrument(&c.accu_init);
            c.loop_cond = instrument(&c.loop_cond);
            c.loop_step = instrument(&c.loop_step);
            c.result = instrument(&c.result);
            node(Expr::Comprehension(Box::new(c)))
        }
        Expr::Call(call) => {
            let name = call.func_name.as_str();
            let args = || call.args.iter().map(instrument).collect::<Vec<_>>();
            if matches!(
                name,
                operators::LOGICAL_AND | operators::LOGICAL_OR | operators::CONDITIONAL
            ) {
                return node(Expr::Call(CallExpr {
                    func_name: call.func_name.clone(),
                    target: None,
                    args: args(),
                }));
            }
            if name == operators::NOT_STRICTLY_FALSE {
                // It turns its operand's error into true: its operand is not evaluated first.
                return wrap(
                    1,
                    Expr::Call(CallExpr {
                        func_name: call.func_name.clone(),
                        target: None,
                        args: args(),
                    }),
                );
            }
            // `@cost.call(name, member, template, target?, args...)`: the operands are
            // evaluated (and metered) first, then the call itself over placeholders bound to
            // them, so that its cost can be taken from their sizes. A target that is a bare
            // identifier stays in the template: it may name a namespace (`math.ceil(x)`).
            let placeholder = |name: String| node(Expr::Ident(name));
            let mut operands = Vec::new();
            let target = call.target.as_deref().map(|t| match &t.expr {
                Expr::Ident(_) => Box::new(t.clone()),
                _ => {
                    operands.push(instrument(t));
                    Box::new(placeholder("@t".to_owned()))
                }
            });
            let template = CallExpr {
                func_name: if name == operators::OPT_SELECT {
                    OPTIONAL_SELECT.to_owned()
                } else {
                    call.func_name.clone()
                },
                target,
                args: (0..call.args.len())
                    .map(|i| placeholder(format!("@a{i}")))
                    .collect(),
            };
            let mut all = vec![
                node(Expr::Literal(LiteralValue::String(name.to_owned().into()))),
                node(Expr::Literal(LiteralValue::Boolean(
                    call.target.is_some().into(),
                ))),
                node(Expr::Call(template)),
            ];
            all.extend(operands);
            all.extend(args());
            node(Expr::Call(CallExpr {
                func_name: CALL.to_owned(),
                target: None,
                args: all,
            }))
        }
    }
}

fn node(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

/// Registers the meter's functions, and [`OPTIONAL_SELECT`].
pub(crate) fn register(context: &mut kube_cel::cel::Context<'_>) {
    use kube_cel::cel::{ExecutionError, FunctionContext, Value};
    context.add_function(OPTIONAL_SELECT, optional_select);
    context.add_function(
        CHARGE,
        |ftx: &FunctionContext| -> Result<Value, ExecutionError> {
            let cost = match &ftx.args[0].expr {
                Expr::Literal(LiteralValue::UInt(n)) => *n.inner(),
                _ => 1,
            };
            let value = Value::resolve(&ftx.args[1], ftx.ptx)?;
            charge(cost)?;
            Ok(value)
        },
    );
    context.add_function(
        CALL,
        |ftx: &FunctionContext| -> Result<Value, ExecutionError> {
            let name = match &ftx.args[0].expr {
                Expr::Literal(LiteralValue::String(s)) => s.inner().to_owned(),
                _ => String::new(),
            };
            let member =
                matches!(&ftx.args[1].expr, Expr::Literal(LiteralValue::Boolean(b)) if *b.inner());
            let Expr::Call(template) = &ftx.args[2].expr else {
                return Err(ftx.error("malformed metered call"));
            };
            let mut scope = ftx.ptx.new_inner_scope();
            let mut values = Vec::new();
            let mut rest = ftx.args[3..].iter();
            match template.target.as_deref().map(|t| &t.expr) {
                Some(Expr::Ident(name)) if name == "@t" => {
                    let Some(target) = rest.next() else {
                        return Err(ftx.error("malformed metered call"));
                    };
                    let value = Value::resolve(target, ftx.ptx)?;
                    scope.add_variable_from_value("@t", value.clone());
                    values.push(value);
                }
                Some(Expr::Ident(name)) => {
                    if let Some(value) = ftx.ptx.get_variable(name) {
                        charge(1)?;
                        values.push(value.as_ref().try_into()?);
                    }
                }
                _ => {}
            }
            for (i, operand) in rest.enumerate() {
                let value = Value::resolve(operand, ftx.ptx)?;
                scope.add_variable_from_value(format!("@a{i}"), value.clone());
                values.push(value);
            }
            let result = Value::resolve(&ftx.args[2], &scope)?;
            charge(call_cost(&name, member, &values, &result))?;
            Ok(result)
        },
    );
}

/// `operand.?field` as CEL defines it: `optional.of` the map's value under `field`, or
/// `optional.none()` without one; an optional operand is looked into, and stays none if none.
fn optional_select(
    ftx: &kube_cel::cel::FunctionContext,
) -> Result<kube_cel::cel::Value, kube_cel::cel::ExecutionError> {
    use kube_cel::cel::Value;
    use kube_cel::cel::objects::{Key, OptionalValue};
    let optional = |value: Option<&Value>| {
        Value::Opaque(std::sync::Arc::new(match value {
            Some(value) => OptionalValue::of(value.clone()),
            None => OptionalValue::none(),
        }))
    };
    let operand = Value::resolve(&ftx.args[0], ftx.ptx)?;
    let Value::String(field) = Value::resolve(&ftx.args[1], ftx.ptx)? else {
        return Err(ftx.error("field must be string"));
    };
    let operand = match &operand {
        Value::Opaque(_) => match <&OptionalValue>::try_from(&operand)?.value() {
            Some(inner) => inner.clone(),
            None => return Ok(optional(None)),
        },
        _ => operand,
    };
    match operand {
        Value::Map(map) => Ok(optional(map.map.get(&Key::from(field)))),
        other => Err(ftx.error(format!("no such key: {field} on {}", other.type_of()))),
    }
}

/// The size of a value as cel-go's tracker measures it: characters, bytes, items, entries;
/// 1 for anything else.
fn actual_size(value: &kube_cel::cel::Value) -> u64 {
    use kube_cel::cel::Value;
    match value {
        Value::String(s) => s.chars().count() as u64,
        Value::Bytes(b) => b.len() as u64,
        Value::List(l) => l.len() as u64,
        Value::Map(m) => m.map.len() as u64,
        _ => 1,
    }
}

/// The cost of traversing a value (the Kubernetes library's `traversalCost`).
fn traversal(value: &kube_cel::cel::Value) -> u64 {
    use kube_cel::cel::Value;
    match value {
        Value::String(s) => (s.len() as f64 * STRING_TRAVERSAL) as u64,
        Value::Bytes(b) => (b.len() as f64 * STRING_TRAVERSAL) as u64,
        Value::List(l) => l.iter().map(traversal).sum(),
        Value::Map(m) => m
            .map
            .iter()
            .map(|(k, v)| traversal(&kube_cel::cel::Value::from(k.clone())) + traversal(v))
            .sum(),
        _ => 1,
    }
}

/// What cel-go's runtime tracker charges for a call (with the Kubernetes library's
/// `CallCost` first); `values` are the receiver (of a member call) then the arguments.
fn call_cost(
    name: &str,
    member: bool,
    values: &[kube_cel::cel::Value],
    result: &kube_cel::cel::Value,
) -> u64 {
    use kube_cel::cel::Value;
    let size = |i: usize| values.get(i).map_or(0, actual_size);
    let text = |i: usize| matches!(values.get(i), Some(Value::String(_) | Value::Bytes(_)));
    let scaled = |n: u64, factor: f64| by_factor(n, factor);
    match name {
        "check" => 350_000,
        "serviceAccount" | "path" | "group" | "resource" | "subresource" | "namespace" | "name"
        | "allowed" | "reason" | "error" | "errored" => 1,
        "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
            values.first().map_or(0, traversal)
        }
        "url" | "lowerAscii" | "upperAscii" | "substring" | "trim" | "cidr" | "isIP" | "isCIDR"
        | "quantity" | "isQuantity" => scaled(size(0), STRING_TRAVERSAL),
        "replace" | "split" | "ip.isCanonical" => scaled(size(0), 2.0 * STRING_TRAVERSAL),
        "join" => scaled(actual_size(result), 2.0 * STRING_TRAVERSAL),
        "find" | "findAll" => {
            scaled(size(0) + 1, STRING_TRAVERSAL).saturating_mul(scaled(size(1), REGEX_LENGTH))
        }
        "ip" if text(0) => scaled(size(0), STRING_TRAVERSAL),
        "containsIP" | "containsCIDR" => {
            let cidr = size(0);
            let mut cost = scaled(cidr + cidr, STRING_TRAVERSAL);
            if name == "containsCIDR" {
                cost += scaled(cidr, STRING_TRAVERSAL) + 1;
            }
            if text(1) {
                cost += scaled(size(1), STRING_TRAVERSAL);
            }
            cost
        }
        "format" | "startsWith" | "endsWith" | "strings.quote" if text(0) => {
            scaled(size(0), STRING_TRAVERSAL)
        }
        "bytes" | "string" if text(0) => scaled(size(0), STRING_TRAVERSAL),
        operators::IN if matches!(values.get(1), Some(Value::List(_))) => size(1),
        operators::EQUALS | operators::NOT_EQUALS => scaled(size(0).min(size(1)), STRING_TRAVERSAL),
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
            if text(0) =>
        {
            scaled(size(0).min(size(1)), STRING_TRAVERSAL)
        }
        operators::ADD if text(0) => scaled(size(0) + size(1), STRING_TRAVERSAL),
        "matches" if member && text(0) => {
            scaled(size(0) + 1, STRING_TRAVERSAL).saturating_mul(scaled(size(1), REGEX_LENGTH))
        }
        "contains" if text(0) => {
            scaled(size(0), STRING_TRAVERSAL).saturating_mul(scaled(size(1), STRING_TRAVERSAL))
        }
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The estimated cost of `rule` on a schema node, as upstream's compiler reports it
    /// (before the cardinality of the node is applied).
    fn cost(schema: serde_json::Value, rule: &str) -> u64 {
        let schema: JSONSchemaProps = serde_json::from_value(schema).unwrap();
        let decl = Decl::of(&schema, false).unwrap();
        estimate(rule, &decl, &["self", "oldSelf"]).unwrap()
    }

    fn list(items: serde_json::Value, max: Option<u64>) -> serde_json::Value {
        let mut list = json!({"type": "array", "items": items});
        if let Some(max) = max {
            list["maxItems"] = json!(max);
        }
        list
    }

    fn string(max: Option<u64>) -> serde_json::Value {
        match max {
            Some(max) => json!({"type": "string", "maxLength": max}),
            None => json!({"type": "string"}),
        }
    }

    // The figures are those of upstream's compilation tests (`TestCostEstimation`), for the
    // same schemas and rules, each without and with the bound.
    #[test]
    fn comprehensions_cost_their_range_times_their_step() {
        let numbers = |max| list(json!({"type": "number"}), max);
        assert_eq!(cost(numbers(None), "self.all(x, x == 0.0)"), 6_291_454);
        assert_eq!(
            cost(numbers(Some(3 * 1024 * 2048)), "self.all(x, x == 0.0)"),
            25_165_826
        );
        let int_or_string = |max| list(json!({"x-kubernetes-int-or-string": true}), max);
        assert_eq!(cost(int_or_string(None), "self.all(x, true)"), 4_718_591);
        assert_eq!(cost(int_or_string(Some(10)), "self.all(x, true)"), 32);
        assert_eq!(cost(int_or_string(None), "self[0] == 5"), 3);
        let formatted = |format: &str| list(json!({"type": "string", "format": format}), None);
        assert_eq!(cost(formatted("duration"), "self.all(x, true)"), 2_359_295);
        assert_eq!(cost(formatted("date"), "self.all(x, true)"), 725_936);
        assert_eq!(cost(formatted("date-time"), "self.all(x, true)"), 428_963);
        let map =
            |values: serde_json::Value| json!({"type": "object", "additionalProperties": values});
        let durations = map(json!({"type": "string", "format": "duration"}));
        assert_eq!(cost(durations.clone(), "self.all(x, true)"), 1_048_577);
        assert_eq!(cost(durations, r#"self["c"] == self["d"]"#), 8);
        assert_eq!(
            cost(
                map(json!({"type": "integer"})),
                "oldSelf.size() == self.size()"
            ),
            5
        );
    }

    #[test]
    fn string_functions_cost_by_their_lengths() {
        assert_eq!(cost(string(None), r#"self == "x""#), 2);
        assert_eq!(cost(string(Some(0)), r#"self == "x""#), 1);
        assert_eq!(cost(string(None), "self.find('[0-9]+') == ''"), 629_147);
        assert_eq!(cost(string(Some(10)), "self.find('[0-9]+') == ''"), 11);
        assert_eq!(cost(string(None), "self.lowerAscii() == 'lower!'"), 314_575);
        assert_eq!(cost(string(Some(10)), "self.lowerAscii() == 'lower!'"), 6);
        let enumerated = json!({"type": "string", "enum": ["A", "B", "C", "LongValue"]});
        assert_eq!(cost(enumerated, "self.contains('A')"), 2);
        let bounded = json!({"type": "string", "enum": ["A"], "maxLength": 1000});
        assert_eq!(cost(bounded, "self.contains('A')"), 401);
        let object = |max| {
            json!({"type": "object", "properties": {
                "str": string(max),
                "separator": string(max),
                "before": string(Some(2)),
                "after": string(Some(4)),
            }})
        };
        let replace = "self.str.replace(self.before, self.after) == 'does not matter'";
        assert_eq!(cost(object(None), replace), 629_154);
        assert_eq!(cost(object(Some(4)), replace), 12);
        let split = "self.str.split(self.separator) == []";
        assert_eq!(cost(object(None), split), 629_160);
        assert_eq!(cost(object(Some(10)), split), 22);
    }

    #[test]
    fn list_functions_cost_by_their_items() {
        let strings = |max| list(string(max), max);
        assert_eq!(
            cost(strings(None), "self.isSorted() == true"),
            329_854_432_052
        );
        assert_eq!(cost(strings(Some(10)), "self.isSorted() == true"), 52);
        assert_eq!(
            cost(strings(None), "self.join(' ') == 'aa bb'"),
            329_853_068_905
        );
        assert_eq!(cost(strings(Some(10)), "self.join(' ') == 'aa bb'"), 43);
    }

    #[test]
    fn factors_are_worded_as_upstreams() {
        assert_eq!(
            exceeds_message("estimated rule cost", 12_000_000, STATIC_RULE_LIMIT),
            "estimated rule cost exceeds budget by factor of 1.200000x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(exceeds_message("c", 25_000_000, STATIC_RULE_LIMIT).contains("factor of 2.5x "));
        assert!(
            exceeds_message("c", u64::MAX, STATIC_RULE_LIMIT).contains("factor of more than 100x ")
        );
    }

    #[test]
    fn property_names_are_escaped_as_upstream() {
        assert_eq!(
            escape("a-b.c/d__e").as_deref(),
            Some("a__dash__b__dot__c__slash__d__underscores__e")
        );
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1a"), None);
        assert_eq!(escape("a b"), None);
    }
}
