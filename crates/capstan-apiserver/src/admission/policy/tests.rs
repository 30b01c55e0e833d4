use capstan_api::cel::Activation;
use serde_json::json;

use super::compiled::{Binding, Decision, Policy};

fn policy(spec: serde_json::Value) -> Policy {
    let policy = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec}))
        .unwrap_or_else(|e| panic!("{e}"));
    let binding = serde_json::from_value(json!({"metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"]}}))
    .unwrap_or_else(|e| panic!("{e}"));
    Policy::new(&policy, vec![Binding::new(&binding)])
}

fn activation(replicas: i64) -> Activation {
    let mut activation = Activation::default();
    activation.json(
        "object",
        &json!({"metadata": {"name": "web"}, "spec": {"replicas": replicas}}),
    );
    activation.json("oldObject", &serde_json::Value::Null);
    activation.json("params", &json!({"data": {"max": "5"}}));
    activation
}

fn messages(decisions: &[Decision]) -> Vec<String> {
    decisions
        .iter()
        .map(|d| match d {
            Decision::Deny {
                message, reason, ..
            } => format!("deny {reason}: {message}"),
            Decision::Error { message, .. } => format!("error: {message}"),
            Decision::Annotate { key, value } => format!("annotate {key}: {value}"),
        })
        .collect()
}

#[test]
fn validations_decide_with_their_messages_and_reasons() {
    let p = policy(json!({
        "failurePolicy": "Fail",
        "variables": [{"name": "max", "expression": "int(params.data.max)"}],
        "validations": [
            {"expression": "object.spec.replicas <= variables.max",
             "messageExpression": "'replicas ' + string(object.spec.replicas) + ' > ' + string(variables.max)"},
            {"expression": "object.spec.replicas < 100", "message": "  far too many  ", "reason": "Forbidden"},
            {"expression": "object.spec.replicas < 50"},
        ],
    }));
    assert!(p.evaluate(&mut activation(3)).is_empty());
    assert_eq!(
        messages(&p.evaluate(&mut activation(200))),
        [
            "deny Invalid: replicas 200 > 5",
            "deny Forbidden: far too many",
            "deny Invalid: failed expression: object.spec.replicas < 50",
        ]
    );
}

#[test]
fn match_conditions_skip_and_failures_follow_the_failure_policy() {
    let spec = |failure: &str| {
        json!({
            "failurePolicy": failure,
            "matchConditions": [{"name": "big", "expression": "object.spec.replicas > 10"}],
            "validations": [{"expression": "object.spec.missing == 1"}],
        })
    };
    let fail = policy(spec("Fail"));
    assert!(fail.evaluate(&mut activation(3)).is_empty());
    let decisions = messages(&fail.evaluate(&mut activation(30)));
    assert_eq!(decisions.len(), 1);
    assert!(
        decisions[0].starts_with("error: expression 'object.spec.missing == 1' resulted in error:"),
        "{decisions:?}"
    );
    assert!(
        policy(spec("Ignore"))
            .evaluate(&mut activation(30))
            .is_empty()
    );
}

#[test]
fn evaluations_stop_at_upstreams_cost_limits() {
    let mut activation = Activation::default();
    // Comparing two strings of 9,000,000 characters costs 900,000, within the per-call limit.
    activation.json("object", &json!({"s": "a".repeat(9_000_000)}));
    let compare = json!({"expression": "object.s == object.s"});
    let p = policy(json!({"failurePolicy": "Fail", "validations": vec![compare; 11]}));
    assert!(p.evaluate(&mut activation.clone()).is_empty());
    // Twelve of them spend more than the budget of 10,000,000: one decision says so.
    let compare = json!({"expression": "object.s == object.s"});
    let p = policy(json!({"failurePolicy": "Fail", "validations": vec![compare; 12]}));
    assert_eq!(
        messages(&p.evaluate(&mut activation.clone())),
        [
            "error: validation failed due to running out of cost budget, no further validation rules will be run"
        ]
    );
    // Concatenating them costs 1,800,000, over the per-call limit; ignored under `Ignore`.
    let concatenate = json!([{"expression": "object.s + object.s != ''"}]);
    let p = policy(json!({"failurePolicy": "Fail", "validations": concatenate}));
    assert_eq!(
        messages(&p.evaluate(&mut activation.clone())),
        [
            "error: expression 'object.s + object.s != ''' resulted in error: operation cancelled: actual cost limit exceeded"
        ]
    );
    let p = policy(json!({"failurePolicy": "Ignore", "validations": concatenate}));
    assert!(p.evaluate(&mut activation).is_empty());
}

#[test]
fn audit_annotations_give_their_values_and_failing_validations_their_place() {
    let p = policy(json!({
        "failurePolicy": "Fail",
        "validations": [
            {"expression": "true"},
            {"expression": "object.spec.replicas < 3", "message": "too many"},
        ],
        "auditAnnotations": [
            {"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
            {"key": "none", "valueExpression": "null"},
            {"key": "long", "valueExpression": "object.metadata.name"},
        ],
    }));
    let mut long = activation(5);
    long.json(
        "object",
        &json!({"metadata": {"name": "x".repeat(20000)}, "spec": {"replicas": 5}}),
    );
    let decisions = p.evaluate(&mut long);
    let summary: Vec<String> = decisions
        .iter()
        .map(|d| match d {
            Decision::Deny { message, index, .. } => format!("deny {index}: {message}"),
            Decision::Error { message, index } => format!("error {index}: {message}"),
            Decision::Annotate { key, value } => format!("{key}={}", value.len()),
        })
        .collect();
    // The second validation fails; `null` publishes nothing; values are cut at 10 KiB.
    assert_eq!(summary, ["deny 1: too many", "replicas=1", "long=10240"]);
    assert!(matches!(&decisions[1], Decision::Annotate { value, .. } if value == "5"));
}
