//! End to end: auditing as upstream's (issue 25): a policy file and a log file given to the
//! real `capstan server`; stock kubectl's requests land in the log as `audit.k8s.io/v1` events
//! at the levels and stages the policy says, creates with their objects at RequestResponse,
//! impersonated requests naming both users, refused credentials as upstream's failed
//! authentication event, each answer's `Audit-Id` naming its events, the authorizer's decision
//! and a ValidatingAdmissionPolicy's audit annotations in them, and mutating webhooks' calls
//! and patches as upstream's annotations (the patch at Request level and above only), and a
//! validating webhook failing open.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::webhook::WebhookServer;
use common::*;
use serde_json::Value;

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: None
  users: ["system:kube-scheduler", "system:kube-controller-manager"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#;

const AUDITING_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: small-maps}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - {expression: "!has(object.data) || size(object.data) < 2", message: too many keys}
  auditAnnotations:
  - {key: keys, valueExpression: "has(object.data) ? string(size(object.data)) : null"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: small-maps-audit}
spec:
  policyName: small-maps
  validationActions: [Audit]
"#;

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Creates the Secret `name` (one key) with kubectl; its create's audit event.
fn create_secret(kc: &Path, log: &Path, name: &str) -> Value {
    kubectl_ok(
        "1.33",
        kc,
        &["create", "secret", "generic", name, "--from-literal=k=v"],
    );
    eventually("the secret create's event", || {
        events(log).into_iter().find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "secrets"
                && e["objectRef"]["name"] == name
        })
    })
}

#[test]
fn requests_are_audited_as_the_policy_says() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.path().join("audit").join("audit.log");
    let (policy_arg, log_arg) = (policy.display().to_string(), log.display().to_string());
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &[
            "--audit-policy-file",
            &policy_arg,
            "--audit-log-path",
            &log_arg,
        ],
    );
    let kc = server.kubeconfig();
    kubectl_ok(
        "1.33",
        &kc,
        &["create", "configmap", "audited", "--from-literal=k=v"],
    );
    let create = eventually("the create's event", || {
        events(&log)
            .into_iter()
            .find(|e| e["verb"] == "create" && e["objectRef"]["name"] == "audited")
    });
    assert_eq!(create["kind"], "Event");
    assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(create["level"], "RequestResponse");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["user"]["username"], "system:admin");
    assert_eq!(create["objectRef"]["namespace"], "default");
    assert_eq!(create["objectRef"]["apiVersion"], "v1");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert!(
        create["requestURI"]
            .as_str()
            .unwrap()
            .starts_with("/api/v1/namespaces/default/configmaps?"),
        "{create}"
    );
    assert_eq!(create["requestObject"]["data"]["k"], "v");
    assert_eq!(create["responseObject"]["metadata"]["name"], "audited");
    assert!(create["sourceIPs"][0] == "127.0.0.1", "{create}");
    assert!(
        create["userAgent"].as_str().unwrap().starts_with("kubectl"),
        "{create}"
    );
    let received = create["requestReceivedTimestamp"].as_str().unwrap();
    assert_eq!(
        received.len(),
        "2026-12-06T17:00:00.000000Z".len(),
        "{received}"
    );
    // The RequestReceived stage is omitted by the policy; health checks are not audited.
    let all = events(&log);
    assert!(all.iter().all(|e| e["stage"] != "RequestReceived"));
    assert!(all.iter().all(|e| e["requestURI"] != "/readyz"));

    // Other requests at Metadata: no objects; an impersonated one names both users.
    kubectl("1.33", &kc, &["get", "pods", "--as", "alice"]);
    let impersonated = eventually("the impersonated list's event", || {
        events(&log).into_iter().find(|e| {
            e["impersonatedUser"]["username"] == "alice" && e["objectRef"]["resource"] == "pods"
        })
    });
    assert_eq!(impersonated["level"], "Metadata");
    assert_eq!(impersonated["user"]["username"], "system:admin");
    assert_eq!(impersonated["verb"], "list");
    assert_eq!(impersonated["responseStatus"]["code"], 403);
    assert_eq!(impersonated["responseStatus"]["reason"], "Forbidden");
    assert!(impersonated.get("responseObject").is_none());
    // The authorizer's decision is in the events, as upstream's annotations.
    assert_eq!(
        create["annotations"]["authorization.k8s.io/decision"], "allow",
        "{create}"
    );
    assert_eq!(
        impersonated["annotations"]["authorization.k8s.io/decision"], "forbid",
        "{impersonated}"
    );
    assert!(impersonated["annotations"]["authorization.k8s.io/reason"].is_string());

    // At Metadata level too, a create's event names the object its body carries, and an
    // update's the uid and resourceVersion it was sent with (upstream's LogRequestObject).
    let secret_create = create_secret(&kc, &log, "audited-secret");
    assert_eq!(secret_create["level"], "Metadata", "{secret_create}");
    assert!(
        secret_create.get("requestObject").is_none(),
        "{secret_create}"
    );
    let secret = kubectl_ok(
        "1.33",
        &kc,
        &["get", "secret", "audited-secret", "-o", "json"],
    );
    let secret: Value = serde_json::from_str(&secret).unwrap();
    let replaced = kubectl_stdin("1.33", &kc, &["replace", "-f", "-"], &secret.to_string());
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    let secret_update = eventually("the secret update's event", || {
        events(&log).into_iter().find(|e| {
            e["verb"] == "update"
                && e["objectRef"]["resource"] == "secrets"
                && e["objectRef"]["name"] == "audited-secret"
        })
    });
    assert_eq!(
        secret_update["objectRef"]["uid"], secret["metadata"]["uid"],
        "{secret_update}"
    );
    assert_eq!(
        secret_update["objectRef"]["resourceVersion"], secret["metadata"]["resourceVersion"],
        "{secret_update}"
    );

    // A ValidatingAdmissionPolicy bound with the Audit action lets a failing create through
    // and notes the failure and its audit annotation in the create's events.
    let applied = kubectl_stdin("1.33", &kc, &["apply", "-f", "-"], AUDITING_POLICY);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let mut attempt = 0;
    let noted = eventually("a policy's audit annotations", || {
        attempt += 1;
        let name = format!("wide-{attempt}");
        kubectl_ok(
            "1.33",
            &kc,
            &[
                "create",
                "configmap",
                &name,
                "--from-literal=a=1",
                "--from-literal=b=2",
            ],
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        events(&log).into_iter().find(|e| {
            e["objectRef"]["name"] == name.as_str()
                && e["annotations"]["small-maps/keys"].is_string()
        })
    });
    assert_eq!(noted["annotations"]["small-maps/keys"], "2");
    let failure: Value = serde_json::from_str(
        noted["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or_else(|| panic!("{noted}")),
    )
    .unwrap();
    assert_eq!(
        failure,
        serde_json::json!([{"message": "too many keys", "policy": "small-maps",
            "binding": "small-maps-audit", "expressionIndex": 0, "validationActions": ["Audit"]}])
    );

    // The Audit-Id of an answer names its events.
    let output = kubectl("1.33", &kc, &["get", "configmap", "audited", "-v=8"]);
    let trace = String::from_utf8_lossy(&output.stderr).into_owned();
    let id = trace
        .lines()
        .find_map(|l| l.split("Audit-Id: ").nth(1))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no Audit-Id in {trace}"))
        .to_owned();
    let get = eventually("the get's event", || {
        events(&log)
            .into_iter()
            .find(|e| e["auditID"] == id.as_str())
    });
    assert_eq!(get["verb"], "get");
    assert_eq!(get["level"], "RequestResponse");

    // A refused token is audited as upstream's failed authentication filter does: one event
    // at ResponseStarted, no user, the 401 and what was tried.
    let refused = curl_with(
        &server.url("/api/v1/namespaces/default/secrets?limit=1"),
        &[
            "-H",
            "Authorization: Bearer not-a-token",
            "-A",
            "refused-agent",
        ],
    )
    .expect("an answer to the refused request");
    assert!(refused.contains("Unauthorized"), "{refused}");
    let failed = eventually("the refused request's event", || {
        events(&log)
            .into_iter()
            .find(|e| e["userAgent"] == "refused-agent")
    });
    assert_eq!(failed["stage"], "ResponseStarted", "{failed}");
    assert_eq!(failed["level"], "Metadata", "{failed}");
    assert_eq!(failed["verb"], "list", "{failed}");
    assert_eq!(failed["user"], serde_json::json!({}), "{failed}");
    assert_eq!(failed["objectRef"]["resource"], "secrets", "{failed}");
    assert_eq!(
        failed["responseStatus"],
        serde_json::json!({"metadata": {}, "message": "Authentication failed, attempted: bearer", "code": 401}),
    );
    assert_eq!(
        events(&log)
            .iter()
            .filter(|e| e["userAgent"] == "refused-agent")
            .count(),
        1,
        "a refused request has exactly one event"
    );

    // A watch is long-running: it is audited when it starts and when it ends.
    kubectl(
        "1.33",
        &kc,
        &["get", "pods", "--watch", "--request-timeout=2s"],
    );
    eventually("the watch's two events", || {
        let all = events(&log);
        let started = all
            .iter()
            .any(|e| e["verb"] == "watch" && e["stage"] == "ResponseStarted");
        let completed = all
            .iter()
            .any(|e| e["verb"] == "watch" && e["stage"] == "ResponseComplete");
        (started && completed).then_some(())
    });

    // Mutating webhooks (a test server over TLS) are noted as upstream notes them: each call,
    // by round and index, with whether it changed the object, and the patch of the one that
    // did, but only in events at Request level and above (configmaps are audited at
    // RequestResponse, secrets at Metadata).
    let hooks = WebhookServer::start(&[]);
    let bundle = hooks.ca_bundle();
    // A validating webhook that answers garbage fails open under Ignore, and says so.
    for (kind, name, path) in [
        ("Mutating", "a.mutate.capstan.test", "/mutate"),
        ("Mutating", "b.allow.capstan.test", "/allow"),
        ("Validating", "c.garbage.capstan.test", "/garbage"),
    ] {
        let configuration = format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}WebhookConfiguration
metadata: {{name: {name}}}
webhooks:
- name: {name}
  clientConfig: {{url: "{url}", caBundle: {bundle}}}
  rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps, secrets]}}]
  sideEffects: None
  failurePolicy: Ignore
  admissionReviewVersions: [v1]
"#,
            url = hooks.url(path)
        );
        kubectl_stdin_ok("1.33", &kc, &["apply", "-f", "-"], &configuration);
    }
    let mut attempt = 0;
    let mutated = eventually("mutating webhooks' audit annotations", || {
        attempt += 1;
        let name = format!("mutated-{attempt}");
        kubectl_ok("1.33", &kc, &["create", "configmap", &name]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        events(&log).into_iter().find(|e| {
            e["objectRef"]["name"] == name.as_str()
                && e["annotations"]["mutation.webhook.admission.k8s.io/round_0_index_1"].is_string()
                && e["annotations"]["failed-open.validating.webhook.admission.k8s.io/round_0_index_0"]
                    .is_string()
        })
    });
    let annotations = &mutated["annotations"];
    assert_eq!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_0"],
        r#"{"configuration":"a.mutate.capstan.test","webhook":"a.mutate.capstan.test","mutated":true}"#,
        "{mutated}"
    );
    assert_eq!(
        annotations["patch.webhook.admission.k8s.io/round_0_index_0"],
        r#"{"configuration":"a.mutate.capstan.test","webhook":"a.mutate.capstan.test","patch":[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}],"patchType":"JSONPatch"}"#,
        "{mutated}"
    );
    assert_eq!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_1"],
        r#"{"configuration":"b.allow.capstan.test","webhook":"b.allow.capstan.test","mutated":false}"#,
        "{mutated}"
    );
    assert!(
        annotations
            .get("patch.webhook.admission.k8s.io/round_0_index_1")
            .is_none(),
        "{mutated}"
    );
    assert_eq!(
        annotations["failed-open.validating.webhook.admission.k8s.io/round_0_index_0"],
        "c.garbage.capstan.test",
        "{mutated}"
    );
    assert_eq!(
        mutated["responseObject"]["metadata"]["labels"]["mutated"],
        "yes"
    );
    // At Metadata level the calls are noted, the patch is not.
    let secret = create_secret(&kc, &log, "mutated");
    assert_eq!(secret["user"]["username"], "system:admin", "{secret}");
    assert_eq!(secret["responseStatus"]["code"], 201, "{secret}");
    assert_eq!(secret["level"], "Metadata", "{secret}");
    let annotations = &secret["annotations"];
    assert!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_0"]
            .as_str()
            .is_some_and(|v| v.ends_with(r#""mutated":true}"#)),
        "{secret}"
    );
    assert!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_1"].is_string(),
        "{secret}"
    );
    assert!(
        annotations
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("patch.webhook.admission.k8s.io/")),
        "{secret}"
    );

    // PodSecurity notes the enforced policy of every pod it judges, and the violations of a
    // namespace's audit level, which lets the pod in.
    kubectl_ok("1.33", &kc, &["create", "namespace", "audited-pods"]);
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "label",
            "namespace",
            "audited-pods",
            "pod-security.kubernetes.io/audit=restricted",
        ],
    );
    for namespace in ["default", "audited-pods"] {
        kubectl_ok(
            "1.33",
            &kc,
            &[
                "run",
                "psa",
                "-n",
                namespace,
                "--image=busybox",
                "--restart=Never",
            ],
        );
    }
    let pod_event = |namespace: &'static str| {
        eventually("a pod create's event", || {
            events(&log).into_iter().find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["namespace"] == namespace
                    && e["objectRef"]["subresource"].is_null()
            })
        })
    };
    let privileged = pod_event("default");
    assert_eq!(
        privileged["annotations"]["pod-security.kubernetes.io/enforce-policy"], "privileged:latest",
        "{privileged}"
    );
    assert!(
        privileged["annotations"]["pod-security.kubernetes.io/audit-violations"].is_null(),
        "{privileged}"
    );
    let audited = pod_event("audited-pods");
    assert_eq!(audited["responseStatus"]["code"], 201, "{audited}");
    assert_eq!(
        audited["annotations"]["pod-security.kubernetes.io/enforce-policy"], "privileged:latest",
        "{audited}"
    );
    let violations = audited["annotations"]["pod-security.kubernetes.io/audit-violations"]
        .as_str()
        .unwrap_or_default();
    assert!(
        violations.starts_with(
            "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{audited}"
    );
    server.stop();
}
