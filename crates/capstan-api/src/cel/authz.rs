//! Upstream's CEL authorization library (`kubernetes.authz`, with `fieldSelector` and
//! `labelSelector`): the `authorizer` variable of admission webhooks' `matchConditions` and of
//! ValidatingAdmissionPolicies' expressions.
//!
//! `authorizer.group(g).resource(r)` (then `.subresource(s)`, `.namespace(ns)`, `.name(n)`,
//! `.fieldSelector(f)`, `.labelSelector(l)`) and `authorizer.path(p)` build a check, which
//! `.check(verb)` decides for the request's user, or for the service account
//! `authorizer.serviceAccount(ns, name)` names; the decision answers `.allowed()`,
//! `.reason()`, `.errored()` and `.error()`. `authorizer.requestResource` is the check of the
//! request's own resource, subresource, namespace and name.
//!
//! Expressions are evaluated synchronously, and the server's authorizer is asked
//! asynchronously (a webhook authorizer is a call): the checks an evaluation needs are
//! collected in a [`Checks`] ledger. A check not decided yet fails its `check` call and is
//! left pending; the caller has the pending checks decided ([`Checks::take_pending`],
//! [`Checks::decide`]) and evaluates again, until an evaluation leaves nothing pending. CEL
//! has no side effects, so the last evaluation is what one evaluation with every decision at
//! hand would have given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::Opaque;
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value};

/// Who a check is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// The user who sent the request.
    Requester,
    /// A service account (`authorizer.serviceAccount(namespace, name)`).
    ServiceAccount { namespace: String, name: String },
}

/// A check of an API resource: what `group(…).resource(…)` and the calls after it set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceQuery {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub field_selector: String,
    pub label_selector: String,
}

/// One authorization check an expression asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    pub principal: Principal,
    /// The API verb of a resource check, the HTTP verb of a path check.
    pub verb: String,
    /// What a resource check is about; `None` for a path check.
    pub resource: Option<ResourceQuery>,
    /// The path of a path check.
    pub path: String,
}

/// The authorizer's answer to a check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decided {
    /// Whether it allowed (no opinion is not allowed).
    pub allowed: bool,
    /// Why.
    pub reason: String,
    /// The error of an authorizer that could not decide (empty when none).
    pub error: String,
}

#[derive(Debug, Default)]
struct Ledger {
    decided: HashMap<Query, Decided>,
    pending: Vec<Query>,
}

/// The checks of one request's expressions: those decided, and those asked for and not yet
/// decided.
#[derive(Clone, Debug, Default)]
pub struct Checks(Arc<Mutex<Ledger>>);

impl Checks {
    /// A ledger with nothing decided.
    pub fn new() -> Self {
        Checks::default()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `authorizer` variable, for the request's user, whose `requestResource` is
    /// `request`.
    pub fn variable(&self, request: ResourceQuery) -> Value {
        let authorizer = AuthorizerVal {
            checks: self.clone(),
            principal: Principal::Requester,
        };
        let request = ResourceCheck {
            authorizer,
            query: request,
        };
        super::map(vec![(
            "requestResource".to_owned(),
            Value::Opaque(Arc::new(request)),
        )])
    }

    /// The checks asked for since the last call and not decided, each once.
    pub fn take_pending(&self) -> Vec<Query> {
        std::mem::take(&mut self.ledger().pending)
    }

    /// Records the authorizer's answer to `query`.
    pub fn decide(&self, query: Query, decided: Decided) {
        self.ledger().decided.insert(query, decided);
    }

    /// The answer to `query`, or (noting it as pending) an error for now.
    fn answer(&self, query: Query) -> ResolveResult {
        let mut ledger = self.ledger();
        if let Some(decided) = ledger.decided.get(&query) {
            return Ok(Value::Opaque(Arc::new(DecisionVal(decided.clone()))));
        }
        if !ledger.pending.contains(&query) {
            ledger.pending.push(query);
        }
        Err(ExecutionError::function_error(
            "check",
            "authorization check not decided yet",
        ))
    }
}

/// `kubernetes.authorization.Authorizer`: who checks are for.
#[derive(Clone, Debug)]
struct AuthorizerVal {
    checks: Checks,
    principal: Principal,
}

impl PartialEq for AuthorizerVal {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.checks.0, &other.checks.0) && self.principal == other.principal
    }
}
impl Eq for AuthorizerVal {}

/// `kubernetes.authorization.PathCheck`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PathCheck {
    authorizer: AuthorizerVal,
    path: String,
}

/// `kubernetes.authorization.GroupCheck`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GroupCheck {
    authorizer: AuthorizerVal,
    group: String,
}

/// `kubernetes.authorization.ResourceCheck`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ResourceCheck {
    authorizer: AuthorizerVal,
    query: ResourceQuery,
}

/// `kubernetes.authorization.Decision`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DecisionVal(Decided);

impl Opaque for AuthorizerVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Authorizer"
    }
}
impl Opaque for PathCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.PathCheck"
    }
}
impl Opaque for GroupCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.GroupCheck"
    }
}
impl Opaque for ResourceCheck {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.ResourceCheck"
    }
}
impl Opaque for DecisionVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Decision"
    }
}

/// Registers the library's functions.
pub(super) fn register(context: &mut Context<'_>) {
    context.add_function("path", path);
    context.add_function("group", group);
    context.add_function("serviceAccount", service_account);
    context.add_function("resource", resource);
    context.add_function("subresource", subresource);
    context.add_function("namespace", namespace);
    context.add_function("name", name);
    context.add_function("fieldSelector", field_selector);
    context.add_function("labelSelector", label_selector);
    context.add_function("check", check);
    context.add_function("allowed", allowed);
    context.add_function("reason", reason);
    context.add_function("errored", errored);
    context.add_function("error", error);
}

fn no_overload() -> ExecutionError {
    ExecutionError::NoSuchOverload
}

/// The value of `this` as one of the library's types.
fn opaque<T: 'static>(value: &Value) -> Result<&T, ExecutionError> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<T>().ok_or_else(no_overload),
        _ => Err(no_overload()),
    }
}

/// The authorizer `this` is: an `Authorizer`, or the `authorizer` variable itself (a map
/// whose `requestResource` carries it).
fn authorizer_of(this: &Value) -> Result<AuthorizerVal, ExecutionError> {
    if let Value::Map(map) = this {
        let key = kube_cel::cel::objects::Key::from("requestResource");
        return match map.map.get(&key) {
            Some(request) => Ok(opaque::<ResourceCheck>(request)?.authorizer.clone()),
            None => Err(no_overload()),
        };
    }
    opaque::<AuthorizerVal>(this).cloned()
}

/// The one string argument of a function.
fn string_arg(args: &[Value], index: usize) -> Result<String, ExecutionError> {
    match args.get(index) {
        Some(Value::String(s)) => Ok(s.to_string()),
        _ => Err(no_overload()),
    }
}

fn path(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let authorizer = authorizer_of(&this)?;
    let path = string_arg(&args, 0)?;
    if path.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "path",
            "path must not be empty",
        ));
    }
    Ok(Value::Opaque(Arc::new(PathCheck { authorizer, path })))
}

fn group(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let authorizer = authorizer_of(&this)?;
    let group = string_arg(&args, 0)?;
    Ok(Value::Opaque(Arc::new(GroupCheck { authorizer, group })))
}

fn service_account(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let authorizer = authorizer_of(&this)?;
    let (namespace, name) = (string_arg(&args, 0)?, string_arg(&args, 1)?);
    if args.len() != 2 {
        return Err(no_overload());
    }
    if !crate::names::is_dns1123_subdomain(&name).is_empty() {
        return Err(ExecutionError::function_error(
            "serviceAccount",
            "Invalid service account name",
        ));
    }
    if !crate::names::is_dns1123_label(&namespace).is_empty() {
        return Err(ExecutionError::function_error(
            "serviceAccount",
            "Invalid service account namespace",
        ));
    }
    Ok(Value::Opaque(Arc::new(AuthorizerVal {
        checks: authorizer.checks,
        principal: Principal::ServiceAccount { namespace, name },
    })))
}

fn resource(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let group = opaque::<GroupCheck>(&this)?;
    let resource = string_arg(&args, 0)?;
    if resource.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "resource",
            "resource must not be empty",
        ));
    }
    Ok(Value::Opaque(Arc::new(ResourceCheck {
        authorizer: group.authorizer.clone(),
        query: ResourceQuery {
            group: group.group.clone(),
            resource,
            ..ResourceQuery::default()
        },
    })))
}

/// A resource check with one of its fields set from the one string argument.
fn narrowed(this: &Value, args: &[Value], set: fn(&mut ResourceQuery, String)) -> ResolveResult {
    let mut check = opaque::<ResourceCheck>(this)?.clone();
    set(&mut check.query, string_arg(args, 0)?);
    Ok(Value::Opaque(Arc::new(check)))
}

fn subresource(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    narrowed(&this, &args, |q, v| q.subresource = v)
}

fn namespace(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    narrowed(&this, &args, |q, v| q.namespace = v)
}

fn name(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    narrowed(&this, &args, |q, v| q.name = v)
}

fn field_selector(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    narrowed(&this, &args, |q, v| q.field_selector = v)
}

fn label_selector(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    narrowed(&this, &args, |q, v| q.label_selector = v)
}

fn check(This(this): This<Value>, Arguments(args): Arguments) -> ResolveResult {
    let verb = string_arg(&args, 0)?;
    if let Ok(path) = opaque::<PathCheck>(&this) {
        return path.authorizer.checks.answer(Query {
            principal: path.authorizer.principal.clone(),
            verb,
            resource: None,
            path: path.path.clone(),
        });
    }
    let resource = opaque::<ResourceCheck>(&this)?;
    resource.authorizer.checks.answer(Query {
        principal: resource.authorizer.principal.clone(),
        verb,
        resource: Some(resource.query.clone()),
        path: String::new(),
    })
}

fn allowed(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(opaque::<DecisionVal>(&this)?.0.allowed))
}

fn reason(This(this): This<Value>) -> ResolveResult {
    Ok(Value::String(Arc::new(
        opaque::<DecisionVal>(&this)?.0.reason.clone(),
    )))
}

fn errored(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(
        !opaque::<DecisionVal>(&this)?.0.error.is_empty(),
    ))
}

fn error(This(this): This<Value>) -> ResolveResult {
    Ok(Value::String(Arc::new(
        opaque::<DecisionVal>(&this)?.0.error.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{Activation, Expression};

    fn activation(checks: &Checks) -> Activation {
        let mut activation = Activation::default();
        activation.set(
            "authorizer",
            checks.variable(ResourceQuery {
                group: "apps".to_owned(),
                resource: "deployments".to_owned(),
                subresource: "scale".to_owned(),
                namespace: "ns".to_owned(),
                name: "web".to_owned(),
                ..ResourceQuery::default()
            }),
        );
        activation
    }

    /// Evaluates `source`, deciding its checks with `decide` until none is pending.
    fn settle(
        source: &str,
        decide: impl Fn(&Query) -> Decided,
    ) -> (Result<Value, String>, Vec<Query>) {
        let checks = Checks::new();
        let activation = activation(&checks);
        let expression = Expression::compile(source).unwrap();
        let mut asked = Vec::new();
        for _ in 0..10 {
            let value = expression.value(&activation);
            let pending = checks.take_pending();
            if pending.is_empty() {
                return (value, asked);
            }
            for query in pending {
                checks.decide(query.clone(), decide(&query));
                asked.push(query);
            }
        }
        panic!("never settled")
    }

    fn allow_creates(query: &Query) -> Decided {
        Decided {
            allowed: query.verb == "create",
            reason: format!("asked {}", query.verb),
            error: if query.verb == "explode" {
                "webhook unreachable".to_owned()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn resource_checks_carry_every_attribute() {
        let (value, asked) = settle(
            "authorizer.group('').resource('pods').subresource('exec').namespace('ns').name('p').check('create').allowed()",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(true)));
        assert_eq!(
            asked,
            [Query {
                principal: Principal::Requester,
                verb: "create".to_owned(),
                resource: Some(ResourceQuery {
                    resource: "pods".to_owned(),
                    subresource: "exec".to_owned(),
                    namespace: "ns".to_owned(),
                    name: "p".to_owned(),
                    ..ResourceQuery::default()
                }),
                path: String::new(),
            }]
        );
        let (value, _) = settle(
            "authorizer.group('apps').resource('deployments').check('delete').reason()",
            allow_creates,
        );
        assert_eq!(
            value,
            Ok(Value::String(Arc::new("asked delete".to_owned())))
        );
        let (value, _) = settle(
            "authorizer.group('apps').resource('deployments').check('explode').errored() && authorizer.group('apps').resource('deployments').check('explode').error() == 'webhook unreachable'",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(true)));
    }

    #[test]
    fn the_request_resource_path_checks_and_service_accounts() {
        let (value, asked) = settle(
            "authorizer.requestResource.check('update').allowed()",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(false)));
        let resource = asked[0].resource.clone().unwrap();
        assert_eq!(
            (
                resource.group.as_str(),
                resource.resource.as_str(),
                resource.subresource.as_str()
            ),
            ("apps", "deployments", "scale")
        );
        assert_eq!(
            (resource.namespace.as_str(), resource.name.as_str()),
            ("ns", "web")
        );
        let (value, asked) = settle(
            "authorizer.path('/healthz').check('get').allowed()",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(false)));
        assert_eq!(
            (asked[0].path.as_str(), asked[0].resource.is_none()),
            ("/healthz", true)
        );
        let (value, asked) = settle(
            "authorizer.serviceAccount('kube-system', 'builder').group('').resource('secrets').check('create').allowed()",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(true)));
        assert_eq!(
            asked[0].principal,
            Principal::ServiceAccount {
                namespace: "kube-system".to_owned(),
                name: "builder".to_owned()
            }
        );
        // Checks that depend on earlier decisions are asked in later rounds, each once.
        let (value, asked) = settle(
            "authorizer.group('').resource('pods').check('create').allowed() && !authorizer.group('').resource('pods').check('get').allowed()",
            allow_creates,
        );
        assert_eq!(value, Ok(Value::Bool(true)));
        assert_eq!(asked.len(), 2, "{asked:?}");
        // A check costs 350,000, as upstream's: a third one in one evaluation is over the
        // per-call limit.
        let (value, _) = settle(
            "authorizer.group('').resource('pods').check('create').allowed() && authorizer.group('').resource('pods').check('get').allowed() || authorizer.group('').resource('pods').check('create').allowed()",
            allow_creates,
        );
        assert_eq!(
            value,
            Err("operation cancelled: actual cost limit exceeded".to_owned())
        );
    }

    #[test]
    fn bad_arguments_are_upstreams_errors() {
        for (source, message) in [
            (
                "authorizer.path('  ').check('get')",
                "path must not be empty",
            ),
            (
                "authorizer.group('apps').resource('').check('get')",
                "resource must not be empty",
            ),
            (
                "authorizer.serviceAccount('ns', 'Not_Valid').group('').resource('pods').check('get')",
                "Invalid service account name",
            ),
            (
                "authorizer.serviceAccount('a.b', 'sa').group('').resource('pods').check('get')",
                "Invalid service account namespace",
            ),
        ] {
            let (value, asked) = settle(source, allow_creates);
            let why = value.unwrap_err();
            assert!(why.contains(message), "{source}: {why}");
            assert!(asked.is_empty());
        }
    }
}
