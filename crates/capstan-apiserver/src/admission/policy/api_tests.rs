//! ValidatingAdmissionPolicies exercised in process through [`Api::serve`]: what they see of
//! writes through subresources, and what they decide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};

use super::tests::Harness;

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    })
}

/// Creates policy `name` with `spec` and a binding of it (same name) that denies.
async fn policy(h: &Harness, name: &str, spec: Value) {
    let (code, body) = h
        .post(
            POLICIES,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h
        .post(
            BINDINGS,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
}

/// Sends a request until its answer has `code` (the policies are read from the watch cache,
/// which catches up with a write a moment later); the last answer.
async fn until_code(
    h: &Harness,
    code: u16,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Value,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        let (got, answer) = h.call(method, uri, content_type, Some(body.clone())).await;
        if got == code {
            return answer;
        }
        last = answer;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never answered {code}: {last}");
}

#[tokio::test]
async fn scale_writes_are_judged_on_the_scale() {
    let h = Harness::new().await;
    let (code, body) = h.post(DEPLOYMENTS, deployment("d", 3)).await;
    assert_eq!(code, 201, "{body}");
    policy(
        &h,
        "scale-limit",
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["deployments/scale"]}]},
            "validations": [{
                "expression": "object.spec.replicas <= 5",
                "messageExpression": "request.resource.resource + '/' + request.subResource + ' of ' + object.metadata.name + ': ' + object.apiVersion + ' ' + request.kind.kind + ' to ' + string(object.spec.replicas) + ' from ' + string(oldObject.spec.replicas) + ' is over 5'",
            }],
        }),
    )
    .await;
    let scale = format!("{DEPLOYMENTS}/d/scale");
    // Probed with dry runs until the policy is in force.
    until_code(
        &h,
        422,
        "PATCH",
        &format!("{scale}?dryRun=All"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 9}}),
    )
    .await;
    let (code, refused) = h
        .patch(
            &scale,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 9}}),
        )
        .await;
    assert_eq!(code, 422, "{refused}");
    let message = "deployments.apps \"d\" is forbidden: ValidatingAdmissionPolicy 'scale-limit' with binding 'scale-limit' denied request: deployments/scale of d: autoscaling/v1 Scale to 9 from 3 is over 5";
    assert_eq!(refused["message"], message, "{refused}");
    // A PUT of the whole Scale too.
    let (code, current) = h.get(&scale).await;
    assert_eq!(code, 200, "{current}");
    let mut bigger = current.clone();
    bigger["spec"]["replicas"] = 7.into();
    let (code, body) = h.put(&scale, bigger).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("to 7 from 3 is over 5"),
        "{body}"
    );
    let (_, parent) = h.get(&format!("{DEPLOYMENTS}/d")).await;
    assert_eq!(parent["spec"]["replicas"], 3);
    // Within the limit, the scale is written.
    let (code, body) = h
        .patch(
            &scale,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["spec"]["replicas"], 5);
    // The rule names the subresource only: the Deployment itself is not judged.
    let (code, body) = h
        .patch(
            &format!("{DEPLOYMENTS}/d"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 9}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    // A negative count is still refused as an invalid Scale.
    let (code, body) = h
        .patch(
            &scale,
            "application/merge-patch+json",
            json!({"spec": {"replicas": -1}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["kind"], "Scale", "{body}");
}

/// A policy whose rules name `autoscaling/v2` HorizontalPodAutoscalers judges one created
/// through `autoscaling/v1` (`matchPolicy: Equivalent`, the default), on the object converted
/// to `v2`; under `Exact` it does not.
#[tokio::test]
async fn equivalent_versions_are_judged_converted() {
    let h = Harness::new().await;
    let spec = |match_policy: &str| {
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"matchPolicy": match_policy, "resourceRules": [{
                "apiGroups": ["autoscaling"], "apiVersions": ["v2"],
                "operations": ["CREATE"], "resources": ["horizontalpodautoscalers"]}]},
            "validations": [{
                "expression": "object.spec.metrics.all(m, m.resource.target.averageUtilization <= 50)",
                "messageExpression": "'utilization ' + string(object.spec.metrics[0].resource.target.averageUtilization) + ' of ' + object.apiVersion + ' through ' + request.kind.version + ' ' + request.resource.version + ', requested ' + request.requestKind.version + ' ' + request.requestResource.version",
            }],
        })
    };
    policy(&h, "utilization", spec("Equivalent")).await;
    let hpa = |name: &str| {
        json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                     "maxReplicas": 3, "targetCPUUtilizationPercentage": 80}})
    };
    let v1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
    let refused = until_code(
        &h,
        422,
        "POST",
        &format!("{v1}?dryRun=All"),
        "application/json",
        hpa("probe"),
    )
    .await;
    assert_eq!(
        refused["message"],
        "horizontalpodautoscalers.autoscaling \"probe\" is forbidden: ValidatingAdmissionPolicy 'utilization' with binding 'utilization' denied request: utilization 80 of autoscaling/v2 through v2 v2, requested v1 v1",
        "{refused}"
    );
    // Exact: the policy no longer sees writes through v1.
    let (code, mut stored) = h
        .get("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/utilization")
        .await;
    assert_eq!(code, 200, "{stored}");
    stored["spec"] = spec("Exact");
    let (code, body) = h
        .put(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/utilization",
            stored,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let created = until_code(&h, 201, "POST", v1, "application/json", hpa("h")).await;
    assert_eq!(created["spec"]["targetCPUUtilizationPercentage"], 80);
}
