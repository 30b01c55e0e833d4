//! PodSecurity admission exercised in process through [`Api::serve`]: refusals with upstream's
//! 403 and message, warnings in `Warning` headers, workloads warned about and never refused,
//! namespace labels validated and checked against existing pods, updates that change nothing
//! the rules read, and the exemptions of the admission configuration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::Request;
use capstan_api::RequestInfo;
use serde_json::{Value, json};

use super::tests::Harness;
use crate::admission::config::AdmissionConfig;
use crate::admission::podsecurity::PodSecurityConfig;

const NAMESPACES: &str = "/api/v1/namespaces";

/// Creates namespace `name` with `labels` and its `default` service account.
async fn namespace(h: &Harness, name: &str, labels: Value) {
    let (code, body) = h
        .post(
            NAMESPACES,
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h
        .post(
            &format!("{NAMESPACES}/{name}/serviceaccounts"),
            json!({"metadata": {"name": "default"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
}

fn pod(name: &str, security: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": security}]}})
}

fn restricted() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
}

async fn send(h: &Harness, method: &str, uri: &str, body: &Value) -> (u16, Value, Vec<String>) {
    h.send(method, uri, "application/json", &body.to_string())
        .await
}

/// The warnings of a `Warning` header list, unquoted.
fn texts(headers: &[String]) -> Vec<String> {
    headers
        .iter()
        .map(|h| {
            h.strip_prefix("299 - \"")
                .and_then(|h| h.strip_suffix('"'))
                .unwrap_or(h)
                .replace("\\\"", "\"")
        })
        .collect()
}

const RESTRICTED_DETAIL: &str = "privileged (container \"c\" must not set securityContext.privileged=true), \
    allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
    unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
    runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
    seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

#[tokio::test]
async fn enforce_refuses_a_violating_pod_with_upstreams_status() {
    let h = Harness::new().await;
    namespace(
        &h,
        "strict",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    let pods = format!("{NAMESPACES}/strict/pods");
    let (code, body, warnings) =
        send(&h, "POST", &pods, &pod("x", json!({"privileged": true}))).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["details"], json!({"name": "x", "kind": "pods"}));
    assert_eq!(
        body["message"].as_str().unwrap(),
        format!(
            "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}"
        )
    );
    assert!(
        warnings.is_empty(),
        "a refusal carries no warning: {warnings:?}"
    );

    let (code, body, warnings) = send(&h, "POST", &pods, &pod("ok", restricted())).await;
    assert_eq!(code, 201, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");

    // A version label pins the rules: runAsUser=0 is refused only from v1.23.
    let mut root = pod("root", restricted());
    root["spec"]["securityContext"] = json!({"runAsUser": 0});
    let (code, body) = h
        .patch(
            &format!("{NAMESPACES}/strict"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce-version": "v1.22"}}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body, _) = send(&h, "POST", &pods, &root).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h
        .patch(
            &format!("{NAMESPACES}/strict"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce-version": "v1.23"}}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    root["metadata"]["name"] = json!("root2");
    let (code, body, _) = send(&h, "POST", &pods, &root).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods \"root2\" is forbidden: violates PodSecurity \"restricted:v1.23\": runAsUser=0 (pod must not set runAsUser=0)"
    );
}

#[tokio::test]
async fn warn_mode_warns_and_admits() {
    let h = Harness::new().await;
    namespace(
        &h,
        "warned",
        json!({"pod-security.kubernetes.io/warn": "baseline"}),
    )
    .await;
    let (code, body, warnings) = send(
        &h,
        "POST",
        &format!("{NAMESPACES}/warned/pods"),
        &pod("p", json!({"privileged": true})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        texts(&warnings),
        [
            "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
        ]
    );
}

#[tokio::test]
async fn workloads_are_warned_about_never_refused() {
    let h = Harness::new().await;
    namespace(
        &h,
        "strict",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    let template = pod("", json!({"privileged": true}));
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": template["spec"]}}});
    let (code, body, warnings) = send(
        &h,
        "POST",
        "/apis/apps/v1/namespaces/strict/deployments",
        &deployment,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // Without a warn label, the enforce level is warned about.
    assert_eq!(
        texts(&warnings),
        [format!(
            "would violate PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}"
        )]
    );
    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": template["spec"]["containers"]}}}}}});
    let (code, body, warnings) = send(
        &h,
        "POST",
        "/apis/batch/v1/namespaces/strict/cronjobs",
        &cronjob,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let podtemplate = json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
        "template": {"spec": template["spec"]}});
    let (code, body, warnings) = send(
        &h,
        "POST",
        &format!("{NAMESPACES}/strict/podtemplates"),
        &podtemplate,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[tokio::test]
async fn namespace_labels_are_validated_with_upstreams_errors() {
    let h = Harness::new().await;
    let (code, body) = h
        .post(
            NAMESPACES,
            json!({"metadata": {"name": "bad", "labels": {
                "pod-security.kubernetes.io/enforce": "strict",
                "pod-security.kubernetes.io/warn-version": "1.25"}}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "Namespace \"bad\" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted, metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\"]"
    );
    namespace(&h, "ok", json!({})).await;
    let (code, body) = h
        .patch(
            &format!("{NAMESPACES}/ok"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/audit": "everything"}}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "metadata.labels[pod-security.kubernetes.io/audit]"
    );
}

#[tokio::test]
async fn a_stricter_enforce_level_warns_of_existing_pods() {
    let h = Harness::new().await;
    namespace(&h, "busy", json!({})).await;
    let pods = format!("{NAMESPACES}/busy/pods");
    for (name, security) in [
        ("b", json!({})),
        ("a", json!({})),
        ("p", json!({"privileged": true})),
        ("ok", restricted()),
    ] {
        let (code, body) = h.post(&pods, pod(name, security)).await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, body, warnings) = h
        .send(
            "PATCH",
            &format!("{NAMESPACES}/busy"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
                .to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        texts(&warnings),
        [
            "existing pods in namespace \"busy\" violate the new PodSecurity enforce level \"restricted:latest\"",
            "a (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
            "p: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
        ]
    );
    // Relaxing, or setting the same level again, checks nothing.
    let (code, _, warnings) = h
        .send(
            "PATCH",
            &format!("{NAMESPACES}/busy"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
                .to_string(),
        )
        .await;
    assert_eq!(code, 200);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn only_updates_that_change_what_the_rules_read_are_judged() {
    let h = Harness::new().await;
    namespace(&h, "later", json!({})).await;
    let pods = format!("{NAMESPACES}/later/pods");
    let (code, created) = h.post(&pods, pod("old", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    let (code, body) = h
        .patch(
            &format!("{NAMESPACES}/later"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    // A label change is let through though the pod violates the new level.
    let (code, body) = h
        .patch(
            &format!("{pods}/old"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    // A new image is judged.
    let (code, body) = h
        .patch(
            &format!("{pods}/old"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}),
        )
        .await;
    assert_eq!(code, 403, "{body}");
    // So is an ephemeral container added through its subresource.
    let (code, body) = h
        .patch(
            &format!("{pods}/old/ephemeralcontainers"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(
            "containers \"c\", \"debug\" must set securityContext.allowPrivilegeEscalation=false"
        ),
        "{body}"
    );
    // Status writes are never judged.
    let (code, body) = h
        .patch(
            &format!("{pods}/old/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn exemptions_and_defaults_from_the_admission_configuration() {
    let mut h = Harness::new().await;
    let config = AdmissionConfig {
        pod_security: PodSecurityConfig {
            defaults: capstan_api::podsecurity::Policy {
                enforce: capstan_api::podsecurity::LevelVersion {
                    level: capstan_api::podsecurity::Level::Baseline,
                    version: capstan_api::podsecurity::Version::Latest,
                },
                ..Default::default()
            },
            exempt_usernames: vec!["trusted".to_owned()],
            exempt_runtime_classes: vec!["kata".to_owned()],
            exempt_namespaces: vec!["free".to_owned()],
        },
    };
    h.api = h.api.with_admission_config(&config);
    namespace(&h, "plain", json!({})).await;
    let privileged = pod("p", json!({"privileged": true}));
    // The default enforce level applies to a namespace without labels.
    let (code, body) = h
        .post(&format!("{NAMESPACES}/plain/pods"), privileged.clone())
        .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("violates PodSecurity \"baseline:latest\": privileged"),
        "{body}"
    );
    // An exempt runtime class.
    let mut kata = privileged.clone();
    kata["spec"]["runtimeClassName"] = json!("kata");
    let (code, body) = h.post(&format!("{NAMESPACES}/plain/pods"), kata).await;
    assert_eq!(code, 201, "{body}");
    // An exempt user.
    let uri = format!("{NAMESPACES}/plain/pods");
    let mut trusted = privileged.clone();
    trusted["metadata"]["name"] = json!("t");
    let mut request = Request::builder()
        .method("POST")
        .uri(&uri)
        .header("content-type", "application/json")
        .body(Body::from(trusted.to_string()))
        .unwrap();
    request.extensions_mut().insert(crate::authn::User {
        name: "trusted".to_owned(),
        uid: String::new(),
        groups: vec!["system:authenticated".to_owned()],
        extra: Default::default(),
    });
    let response = h
        .api
        .serve(&RequestInfo::new("POST", &uri, ""), request)
        .await;
    assert_eq!(response.status().as_u16(), 201);
    // An exempt namespace: labels asking for more are accepted with upstream's warning.
    let (code, body, warnings) = send(
        &h,
        "POST",
        NAMESPACES,
        &json!({"metadata": {"name": "free", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        texts(&warnings),
        [
            "namespace \"free\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"
        ]
    );
    let (code, body) = h
        .post(
            &format!("{NAMESPACES}/free/serviceaccounts"),
            json!({"metadata": {"name": "default"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h.post(&format!("{NAMESPACES}/free/pods"), privileged).await;
    assert_eq!(code, 201, "{body}");
}
