//! One ValidatingAdmissionPolicy with its bindings, compiled, and its evaluation for one
//! request and one parameter object: match conditions, variables, then validations, as
//! upstream's validator turns them into decisions.

use std::sync::Arc;

use capstan_api::cel::{Activation, Budget, CelValue, Expression, Failure};
use capstan_api::selector::LabelSelector;
use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ParamRef, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use serde_json::Value;

use super::super::Attributes;
use super::super::webhook::call::selector;
use super::super::webhook::matching::{self, Context, Rule};
use crate::registry::Registry;
use crate::status::ApiError;

/// Upstream's limit on a message a `messageExpression` gives.
const MAX_MESSAGE_BYTES: usize = 5000;

/// An expression as written, and compiled (or why it does not compile).
#[derive(Debug)]
pub(super) struct Compiled {
    pub source: String,
    pub program: Result<Expression, String>,
}

impl Compiled {
    fn new(source: &str) -> Self {
        Compiled {
            source: source.to_owned(),
            program: Expression::compile(source),
        }
    }

    /// What the expression gives, its cost charged to `budget`, or upstream's words for why it
    /// gives nothing.
    fn value(&self, activation: &Activation, budget: &mut Budget) -> Result<CelValue, Failure> {
        match &self.program {
            Err(why) => Err(Failure::Error(format!("compilation error: {why}"))),
            Ok(program) => {
                program
                    .value_within(activation, budget)
                    .map_err(|failure| match failure {
                        Failure::Error(why) => Failure::Error(format!(
                            "expression '{}' resulted in error: {why}",
                            self.source
                        )),
                        Failure::OutOfBudget => Failure::OutOfBudget,
                    })
            }
        }
    }
}

/// A rule with the names of the objects it is limited to (none: every object).
#[derive(Debug)]
struct NamedRule {
    rule: Rule,
    names: Vec<String>,
}

impl NamedRule {
    fn new(rule: &NamedRuleWithOperations) -> Self {
        NamedRule {
            rule: Rule {
                operations: rule.operations.clone().unwrap_or_default(),
                groups: rule.api_groups.clone().unwrap_or_default(),
                versions: rule.api_versions.clone().unwrap_or_default(),
                resources: rule.resources.clone().unwrap_or_default(),
                scope: rule.scope.clone().unwrap_or_else(|| "*".to_owned()),
            },
            names: rule.resource_names.clone().unwrap_or_default(),
        }
    }

    fn matches(&self, attrs: &Attributes<'_>) -> bool {
        self.rule.matches(attrs)
            && (self.names.is_empty() || self.names.iter().any(|n| n == attrs.name))
    }
}

/// What a policy's `matchConstraints` or a binding's `matchResources` select.
#[derive(Debug)]
pub(super) struct Resources {
    rules: Vec<NamedRule>,
    excluded: Vec<NamedRule>,
    /// `matchPolicy: Equivalent`.
    equivalent: bool,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
}

impl Resources {
    fn new(resources: &MatchResources) -> Self {
        let rules = |rules: &Option<Vec<NamedRuleWithOperations>>| {
            rules.iter().flatten().map(NamedRule::new).collect()
        };
        Resources {
            rules: rules(&resources.resource_rules),
            excluded: rules(&resources.exclude_resource_rules),
            equivalent: resources.match_policy.as_deref() == Some("Equivalent"),
            namespace_selector: selector(resources.namespace_selector.as_ref()),
            object_selector: selector(resources.object_selector.as_ref()),
        }
    }

    /// Upstream's policy matcher: selected, not excluded, and covered by a rule (no rules, as
    /// a binding may give, cover everything); through which resource
    /// ([`matching::matched_through`]: an equivalent one under `matchPolicy: Equivalent`,
    /// whose rules are then judged without their resource names, as upstream's are).
    pub(super) async fn matches(
        &self,
        context: &Context<'_>,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Option<Option<Arc<Registry>>>, ApiError> {
        let covered = |rules: &[NamedRule]| {
            matching::matched_through(
                rules,
                NamedRule::matches,
                |rule, attrs| rule.rule.matches(attrs),
                self.equivalent,
                attrs,
                context.table(),
            )
        };
        if !context
            .selected(
                &self.namespace_selector,
                &self.object_selector,
                attrs,
                object,
                old,
            )
            .await?
            || covered(&self.excluded).is_some()
        {
            return Ok(None);
        }
        if self.rules.is_empty() {
            return Ok(Some(None));
        }
        Ok(covered(&self.rules))
    }
}

/// One validation.
#[derive(Debug)]
struct Check {
    expression: Compiled,
    message: Option<String>,
    message_expression: Option<Compiled>,
    reason: Option<String>,
}

/// The actions a binding takes on a failed validation.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Actions {
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
}

/// One binding of a policy.
#[derive(Debug)]
pub(super) struct Binding {
    pub name: String,
    pub actions: Actions,
    /// Its `validationActions` as written, for the audit annotation of a failure.
    pub action_names: Vec<String>,
    /// What it narrows the policy to (`None`: everything the policy matches).
    pub resources: Option<Resources>,
    pub param_ref: Option<ParamRef>,
}

impl Binding {
    pub(super) fn new(binding: &ValidatingAdmissionPolicyBinding) -> Self {
        let spec = binding.spec.clone().unwrap_or_default();
        let mut actions = Actions::default();
        for action in spec.validation_actions.iter().flatten() {
            match action.as_str() {
                "Deny" => actions.deny = true,
                "Warn" => actions.warn = true,
                "Audit" => actions.audit = true,
                _ => {}
            }
        }
        Binding {
            name: binding.metadata.name.clone().unwrap_or_default(),
            actions,
            action_names: spec.validation_actions.clone().unwrap_or_default(),
            resources: spec.match_resources.as_ref().map(Resources::new),
            param_ref: spec.param_ref,
        }
    }
}

/// A compiled policy and the bindings that name it.
#[derive(Debug)]
pub(super) struct Policy {
    pub name: String,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
    /// `None` when the policy matches nothing (it has no `matchConstraints`).
    pub resources: Option<Resources>,
    /// The `apiVersion` and kind of its parameters.
    pub param_kind: Option<(String, String)>,
    conditions: Vec<(String, Compiled)>,
    variables: Vec<(String, Compiled)>,
    checks: Vec<Check>,
    /// The `auditAnnotations`: each key and its value's expression.
    annotations: Vec<(String, Compiled)>,
    pub bindings: Vec<Binding>,
}

/// What one validation decided (`index`: the validation's place in the policy, for the
/// audit annotation of a failure), or an audit annotation's value.
#[derive(Debug)]
pub(super) enum Decision {
    /// Refused, with its message and reason (`Invalid` by default).
    Deny {
        message: String,
        reason: String,
        index: usize,
    },
    /// An expression failed to evaluate under `failurePolicy: Fail`.
    Error { message: String, index: usize },
    /// An audit annotation's key and value (cut to upstream's 10 KiB).
    Annotate { key: String, value: String },
}

/// The longest audit annotation value a policy gives.
const MAX_ANNOTATION_BYTES: usize = 10 * 1024;

impl Policy {
    pub(super) fn new(policy: &ValidatingAdmissionPolicy, bindings: Vec<Binding>) -> Self {
        let spec = policy.spec.clone().unwrap_or_default();
        Policy {
            name: policy.metadata.name.clone().unwrap_or_default(),
            ignore_failures: spec.failure_policy.as_deref() == Some("Ignore"),
            resources: spec.match_constraints.as_ref().map(Resources::new),
            param_kind: spec.param_kind.map(|k| {
                (
                    k.api_version.unwrap_or_default(),
                    k.kind.unwrap_or_default(),
                )
            }),
            conditions: spec
                .match_conditions
                .iter()
                .flatten()
                .map(|c| (c.name.clone(), Compiled::new(&c.expression)))
                .collect(),
            variables: spec
                .variables
                .iter()
                .flatten()
                .map(|v| (v.name.clone(), Compiled::new(&v.expression)))
                .collect(),
            checks: spec
                .validations
                .iter()
                .flatten()
                .map(|v| Check {
                    expression: Compiled::new(&v.expression),
                    message: v.message.clone(),
                    message_expression: v
                        .message_expression
                        .as_deref()
                        .filter(|m| !m.trim().is_empty())
                        .map(Compiled::new),
                    reason: v.reason.clone(),
                })
                .collect(),
            annotations: spec
                .audit_annotations
                .iter()
                .flatten()
                .map(|a| (a.key.clone(), Compiled::new(&a.value_expression)))
                .collect(),
            bindings,
        }
    }

    /// An evaluation error: a refusal under `Fail`, nothing under `Ignore`.
    fn error(&self, message: String) -> Option<Decision> {
        self.error_at(0, message)
    }

    /// An evaluation error of validation `index`.
    fn error_at(&self, index: usize, message: String) -> Option<Decision> {
        (!self.ignore_failures).then_some(Decision::Error { message, index })
    }

    /// Evaluates the policy with `activation` (`object`, `oldObject`, `request`, `params`,
    /// `namespaceObject`): its match conditions (any false: nothing to say), its variables,
    /// then each validation.
    ///
    /// All of them share upstream's runtime cost budget: once it is spent, the evaluation
    /// stops with upstream's error as its one decision (by the failure policy).
    pub(super) fn evaluate(&self, activation: &mut Activation) -> Vec<Decision> {
        let mut budget = Budget::default();
        match self.evaluate_within(activation, &mut budget) {
            Ok(decisions) => decisions,
            Err(OutOfBudget) => self
                .error(Failure::OutOfBudget.to_string())
                .into_iter()
                .collect(),
        }
    }

    fn evaluate_within(
        &self,
        activation: &mut Activation,
        budget: &mut Budget,
    ) -> Result<Vec<Decision>, OutOfBudget> {
        let mut failed = None;
        for (name, condition) in &self.conditions {
            match condition.value(activation, budget) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => return Ok(Vec::new()),
                Ok(other) => {
                    failed.get_or_insert(format!(
                        "failed to evaluate match condition {}: expected a bool, got {other:?}",
                        capstan_api::field::go_quote(name)
                    ));
                }
                Err(Failure::OutOfBudget) => return Err(OutOfBudget),
                Err(Failure::Error(why)) => {
                    failed.get_or_insert(format!(
                        "failed to evaluate match condition {}: {why}",
                        capstan_api::field::go_quote(name)
                    ));
                }
            }
        }
        if let Some(why) = failed {
            return Ok(self.error(why).into_iter().collect());
        }
        // Each variable may read those before it; one that fails to evaluate is left out,
        // and an expression reading it fails then.
        let mut variables = Vec::new();
        for (name, variable) in &self.variables {
            match variable.value(activation, budget) {
                Ok(value) => {
                    variables.push((name.clone(), value));
                    activation.set("variables", capstan_api::cel::map(variables.clone()));
                }
                Err(Failure::OutOfBudget) => return Err(OutOfBudget),
                Err(Failure::Error(_)) => {}
            }
        }
        if self.variables.is_empty() {
            activation.set("variables", capstan_api::cel::map(Vec::new()));
        }
        let mut decisions = Vec::new();
        for (index, check) in self.checks.iter().enumerate() {
            let decision = match check.expression.value(activation, budget) {
                Err(Failure::OutOfBudget) => return Err(OutOfBudget),
                Err(Failure::Error(why)) => self.error_at(index, why),
                Ok(CelValue::Bool(true)) => None,
                Ok(_) => Some(Decision::Deny {
                    message: check.message(activation, budget)?,
                    reason: check.reason.clone().unwrap_or_else(|| "Invalid".to_owned()),
                    index,
                }),
            };
            decisions.extend(decision);
        }
        // Audit annotations: a string is published (null: nothing), a failing one refuses
        // under `Fail`, and one giving neither a string nor null is an error, as upstream's.
        for (key, annotation) in &self.annotations {
            let decision = match annotation.value(activation, budget) {
                Err(Failure::OutOfBudget) => return Err(OutOfBudget),
                Err(Failure::Error(why)) => self.error(why),
                Ok(CelValue::String(value)) => {
                    let mut value = value.to_string();
                    if value.len() > MAX_ANNOTATION_BYTES {
                        let mut end = MAX_ANNOTATION_BYTES;
                        while !value.is_char_boundary(end) {
                            end -= 1;
                        }
                        value.truncate(end);
                    }
                    Some(Decision::Annotate {
                        key: key.clone(),
                        value,
                    })
                }
                Ok(CelValue::Null) => None,
                Ok(other) => self.error(format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    annotation.source,
                    type_name(&other)
                )),
            };
            decisions.extend(decision);
        }
        Ok(decisions)
    }
}

/// The runtime cost budget ran out.
struct OutOfBudget;

impl Check {
    /// The message of a failed validation: its `messageExpression`'s (a non-blank string of
    /// one line within the limit), else its `message`, else the expression.
    fn message(&self, activation: &Activation, budget: &mut Budget) -> Result<String, OutOfBudget> {
        let evaluated = match self
            .message_expression
            .as_ref()
            .map(|m| m.value(activation, budget))
        {
            Some(Err(Failure::OutOfBudget)) => return Err(OutOfBudget),
            Some(Ok(CelValue::String(text))) => Some(text.trim().to_owned()),
            _ => None,
        };
        let evaluated = evaluated
            .filter(|m| !m.is_empty() && m.len() <= MAX_MESSAGE_BYTES && !m.contains('\n'));
        Ok(evaluated
            .or_else(|| {
                self.message
                    .as_deref()
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| format!("failed expression: {}", self.expression.source.trim())))
    }
}

/// CEL's name of a value's type.
fn type_name(value: &CelValue) -> &'static str {
    match value {
        CelValue::List(_) => "list",
        CelValue::Map(_) => "map",
        CelValue::Function(..) => "function",
        CelValue::Int(_) => "int",
        CelValue::UInt(_) => "uint",
        CelValue::Float(_) => "double",
        CelValue::String(_) => "string",
        CelValue::Bytes(_) => "bytes",
        CelValue::Bool(_) => "bool",
        CelValue::Duration(_) => "google.protobuf.Duration",
        CelValue::Timestamp(_) => "google.protobuf.Timestamp",
        CelValue::Opaque(_) => "opaque",
        CelValue::Null => "null_type",
    }
}
