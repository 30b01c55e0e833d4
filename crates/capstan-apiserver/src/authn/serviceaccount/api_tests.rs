//! The `serviceaccounts/token` subresource (TokenRequest) and ServiceAccount admission,
//! exercised in process through [`Api::serve`]: defaults, bounds, bound objects and their
//! checks, the claims of the tokens issued, and what new pods get.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use serde_json::{Value, json};

use super::tests::Harness;
use crate::authn::serviceaccount::ISSUER;

const NS: &str = "/api/v1/namespaces/default";

fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn seconds(timestamp: &Value) -> i64 {
    timestamp
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

fn token_request(spec: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
}

async fn request_token(h: &Harness, account: &str, spec: Value) -> (u16, Value) {
    h.post(
        &format!("{NS}/serviceaccounts/{account}/token"),
        token_request(spec),
    )
    .await
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

async fn create(h: &Harness, plural: &str, body: Value) -> Value {
    let (code, created) = h.post(&format!("{NS}/{plural}"), body).await;
    assert_eq!(code, 201, "{created}");
    created
}

async fn account(h: &Harness, name: &str, extra: Value) -> Value {
    let mut body =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    create(h, "serviceaccounts", body).await
}

#[tokio::test]
async fn a_token_request_gets_upstreams_defaults_and_claims() {
    let h = Harness::new().await;
    let (code, sa) = h.get(&format!("{NS}/serviceaccounts/default")).await;
    assert_eq!(code, 200);
    let before = crate::authn::serviceaccount::now_seconds();
    let (code, answer) = request_token(&h, "default", json!({})).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "TokenRequest");
    assert_eq!(answer["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(answer["metadata"]["name"], "default");
    assert_eq!(answer["metadata"]["namespace"], "default");
    assert_eq!(
        answer["spec"],
        json!({"audiences": [ISSUER], "expirationSeconds": 3600, "boundObjectRef": null})
    );
    let expires = seconds(&answer["status"]["expirationTimestamp"]);
    assert!(
        (before + 3600..=before + 3602).contains(&expires),
        "{answer}"
    );
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["aud"], json!([ISSUER]));
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");
    assert_eq!(claims["exp"].as_i64().unwrap(), expires);
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );
    assert_eq!(claims["nbf"], claims["iat"]);
    assert_eq!(claims["jti"].as_str().unwrap().len(), 36);
    assert_eq!(
        claims["kubernetes.io"],
        json!({"namespace": "default",
               "serviceaccount": {"name": "default", "uid": sa["metadata"]["uid"]}})
    );
    // Two tokens are two credentials.
    let (_, again) = request_token(&h, "default", json!({})).await;
    assert_ne!(
        claims_of(again["status"]["token"].as_str().unwrap())["jti"],
        claims["jti"]
    );
    // Audiences and a validity of one's own.
    let (code, answer) = request_token(
        &h,
        "default",
        json!({"audiences": ["vault", "other"], "expirationSeconds": 600}),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(claims["aud"], json!(["vault", "other"]));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        600
    );
}

#[tokio::test]
async fn token_requests_are_validated_as_upstream_validates_them() {
    let h = Harness::new().await;
    let (code, status) = request_token(&h, "default", json!({"expirationSeconds": 599})).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid \
         value: 599: may not specify a duration less than 10 minutes"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.expirationSeconds"
    );
    let (code, status) = request_token(
        &h,
        "default",
        json!({"expirationSeconds": (1_i64 << 32) + 1}),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid \
         value: 4294967297: may not specify a duration larger than 2^32 seconds"
    );
    let (code, answer) =
        request_token(&h, "default", json!({"expirationSeconds": 1_i64 << 32})).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["spec"]["expirationSeconds"], 1_i64 << 32);
    // The service account must exist.
    let (code, status) = request_token(&h, "nope", json!({})).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["message"], "serviceaccounts \"nope\" not found");
    // A name in the body must be the account's.
    let mut body = token_request(json!({}));
    body["metadata"] = json!({"name": "other"});
    let (code, status) = h
        .post(&format!("{NS}/serviceaccounts/default/token"), body)
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "TokenRequest.authentication.k8s.io \"default\" is invalid: metadata.name: Invalid \
         value: \"other\": must match the service account name if specified"
    );
    // Only create is served.
    let (code, _) = h.get(&format!("{NS}/serviceaccounts/default/token")).await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn tokens_bind_to_pods_secrets_and_nodes_that_exist() {
    let h = Harness::new().await;
    let node = {
        let (code, node) = h
            .post(
                "/api/v1/nodes",
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
            )
            .await;
        assert_eq!(code, 201, "{node}");
        node
    };
    let created = create(&h, "pods", pod("p", json!({"nodeName": "n1"}))).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let bound = |kind: &str, name: &str, uid: &str| json!({"boundObjectRef": {"kind": kind, "apiVersion": "v1", "name": name, "uid": uid}});
    let (code, answer) = request_token(&h, "default", bound("Pod", "p", &uid)).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["spec"]["boundObjectRef"],
        json!({"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": uid})
    );
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(
        claims["kubernetes.io"]["pod"],
        json!({"name": "p", "uid": uid})
    );
    assert_eq!(
        claims["kubernetes.io"]["node"],
        json!({"name": "n1", "uid": node["metadata"]["uid"]}),
        "a pod's token names the pod's node"
    );
    // The uid is optional, but must match when given.
    let (code, _) = request_token(&h, "default", bound("Pod", "p", "")).await;
    assert_eq!(code, 201);
    let (code, status) = request_token(&h, "default", bound("Pod", "p", "stale")).await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on Pod \"p\": the UID in the bound object reference \
         (stale) does not match the UID in record. The object might have been deleted and then \
         recreated"
    );
    let (code, status) = request_token(&h, "default", bound("Pod", "gone", "")).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["message"], "pods \"gone\" not found");
    // A pod runs as one service account only.
    account(&h, "other", json!({})).await;
    let (code, status) = request_token(&h, "other", bound("Pod", "p", "")).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "cannot bind token for serviceaccount \"other\" to pod running with different \
         serviceaccount name."
    );
    // Secrets and nodes.
    let secret = create(
        &h,
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
    )
    .await;
    let (code, answer) = request_token(&h, "default", bound("Secret", "s", "")).await;
    assert_eq!(code, 201, "{answer}");
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(
        claims["kubernetes.io"]["secret"],
        json!({"name": "s", "uid": secret["metadata"]["uid"]})
    );
    let (code, answer) = request_token(&h, "default", bound("Node", "n1", "")).await;
    assert_eq!(code, 201, "{answer}");
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(claims["kubernetes.io"]["node"]["name"], "n1");
    assert!(claims["kubernetes.io"].get("pod").is_none());
    // Nothing else.
    let (code, status) = request_token(&h, "default", bound("ConfigMap", "c", "")).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "cannot bind token for serviceaccount \"default\" to object of type /v1, Kind=ConfigMap."
    );
}

#[tokio::test]
async fn pod_bound_tokens_for_projected_volumes_are_extended() {
    let h = Harness::new().await;
    create(&h, "pods", pod("p", json!({}))).await;
    let spec = json!({"expirationSeconds": 3607,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}});
    let before = crate::authn::serviceaccount::now_seconds();
    let (code, answer) = request_token(&h, "default", spec.clone()).await;
    assert_eq!(code, 201, "{answer}");
    // The holder is told to refresh after 3607 s; the token itself lasts a year, with a
    // `warnafter` marking the time it should have been replaced.
    assert_eq!(answer["spec"]["expirationSeconds"], 3607);
    let expires = seconds(&answer["status"]["expirationTimestamp"]);
    assert!(
        (before + 3607..=before + 3609).contains(&expires),
        "{answer}"
    );
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 365 * 24 * 3600);
    assert_eq!(
        claims["kubernetes.io"]["warnafter"].as_i64().unwrap(),
        iat + 3607
    );
    assert!(
        claims["kubernetes.io"].get("node").is_none(),
        "not scheduled"
    );
    // Not for other audiences, nor for tokens bound to nothing.
    let mut other = spec;
    other["audiences"] = json!(["vault"]);
    let (_, answer) = request_token(&h, "default", other).await;
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3607
    );
    let (_, answer) = request_token(&h, "default", json!({"expirationSeconds": 3607})).await;
    let claims = claims_of(answer["status"]["token"].as_str().unwrap());
    assert!(claims["kubernetes.io"].get("warnafter").is_none());
}

#[tokio::test]
async fn new_pods_mount_a_projected_token_volume() {
    let h = Harness::new().await;
    let created = create(
        &h,
        "pods",
        pod(
            "web",
            json!({"initContainers": [{"name": "init", "image": "busybox"}],
                   "containers": [{"name": "a", "image": "busybox"},
                                  {"name": "b", "image": "busybox"}]}),
        ),
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(spec["serviceAccount"], "default");
    let volumes = spec["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 1, "{spec}");
    let name = volumes[0]["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    assert_eq!(
        volumes[0]["projected"],
        json!({"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]})
    );
    let mount = json!([{"name": name, "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    assert_eq!(spec["initContainers"][0]["volumeMounts"], mount);
    assert_eq!(spec["containers"][0]["volumeMounts"], mount);
    assert_eq!(spec["containers"][1]["volumeMounts"], mount);
    // What was stored is what was answered.
    let (_, stored) = h.get(&format!("{NS}/pods/web")).await;
    assert_eq!(stored["spec"]["volumes"], spec["volumes"]);
    // Updates leave the volume alone.
    let mut changed = stored.clone();
    changed["metadata"]["labels"] = json!({"x": "y"});
    let (code, updated) = h.put(&format!("{NS}/pods/web"), changed).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["volumes"], spec["volumes"]);
    // Server-side apply that creates a pod is admitted the same way.
    let (code, applied) = h
        .patch(
            &format!("{NS}/pods/applied?fieldManager=test"),
            "application/apply-patch+yaml",
            pod("applied", json!({})),
        )
        .await;
    assert_eq!(code, 201, "{applied}");
    assert!(
        applied["spec"]["volumes"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("kube-api-access-")
    );
}

#[tokio::test]
async fn automount_opt_outs_accounts_and_pull_secrets() {
    let h = Harness::new().await;
    // The pod opts out.
    let created = create(
        &h,
        "pods",
        pod("off", json!({"automountServiceAccountToken": false})),
    )
    .await;
    assert!(created["spec"].get("volumes").is_none(), "{created}");
    assert!(
        created["spec"]["containers"][0]
            .get("volumeMounts")
            .is_none()
    );
    // The account opts out, and the pod may opt back in.
    account(
        &h,
        "quiet",
        json!({"automountServiceAccountToken": false,
               "imagePullSecrets": [{"name": "registry"}]}),
    )
    .await;
    let created = create(
        &h,
        "pods",
        pod("quiet", json!({"serviceAccountName": "quiet"})),
    )
    .await;
    assert!(created["spec"].get("volumes").is_none(), "{created}");
    assert_eq!(
        created["spec"]["imagePullSecrets"],
        json!([{"name": "registry"}])
    );
    let created = create(
        &h,
        "pods",
        pod(
            "loud",
            json!({"serviceAccount": "quiet", "automountServiceAccountToken": true,
                   "imagePullSecrets": [{"name": "mine"}]}),
        ),
    )
    .await;
    assert_eq!(created["spec"]["serviceAccountName"], "quiet");
    assert_eq!(created["spec"]["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(
        created["spec"]["imagePullSecrets"],
        json!([{"name": "mine"}])
    );
    // A container that mounts the path itself keeps its own mount.
    let created = create(
        &h,
        "pods",
        pod(
            "own",
            json!({"containers": [{"name": "c", "image": "busybox", "volumeMounts":
                    [{"name": "mine", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                   "volumes": [{"name": "mine", "emptyDir": {}}]}),
        ),
    )
    .await;
    assert_eq!(created["spec"]["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(created["spec"]["volumes"][0]["name"], "mine");
}

#[tokio::test]
async fn pods_need_their_service_account() {
    let h = Harness::new().await;
    let (code, status) = h
        .post(
            &format!("{NS}/pods"),
            pod("lost", json!({"serviceAccountName": "missing"})),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"lost\" is forbidden: error looking up service account default/missing: \
         serviceaccount \"missing\" not found"
    );
    // `default` is waited for a little (the controller makes it in new namespaces), then
    // refused the same way.
    let (code, _) = h
        .post(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}),
        )
        .await;
    assert_eq!(code, 201);
    let started = std::time::Instant::now();
    let (code, status) = h
        .post("/api/v1/namespaces/fresh/pods", pod("early", json!({})))
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"early\" is forbidden: error looking up service account fresh/default: \
         serviceaccount \"default\" not found"
    );
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    // An account that enforces its mountable secrets.
    account(
        &h,
        "strict",
        json!({"metadata": {"name": "strict",
                "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"}},
               "secrets": [{"name": "allowed"}]}),
    )
    .await;
    let (code, status) = h
        .post(
            &format!("{NS}/pods"),
            pod(
                "sneaky",
                json!({"serviceAccountName": "strict",
                       "volumes": [{"name": "s", "secret": {"secretName": "other"}}]}),
            ),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"sneaky\" is forbidden: volume with secret.secretName=\"other\" is not allowed \
         because service account strict does not reference that secret"
    );
    create(
        &h,
        "pods",
        pod(
            "fine",
            json!({"serviceAccountName": "strict",
                   "volumes": [{"name": "s", "secret": {"secretName": "allowed"}}]}),
        ),
    )
    .await;
}

#[tokio::test]
async fn mirror_pods_are_left_alone_but_may_not_use_accounts() {
    let h = Harness::new().await;
    let mirror = |name: &str, spec: Value| {
        let mut body = pod(name, spec);
        body["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        body
    };
    let created = create(&h, "pods", mirror("static", json!({"nodeName": "n1"}))).await;
    assert!(created["spec"].get("volumes").is_none(), "{created}");
    assert!(created["spec"].get("serviceAccountName").is_none());
    for (spec, message) in [
        (
            json!({"serviceAccountName": "default"}),
            "a mirror pod may not reference service accounts",
        ),
        (
            json!({"volumes": [{"name": "s", "secret": {"secretName": "x"}}]}),
            "a mirror pod may not reference secrets",
        ),
    ] {
        let (code, status) = h.post(&format!("{NS}/pods"), mirror("m", spec)).await;
        assert_eq!(code, 403, "{status}");
        assert_eq!(
            status["message"],
            format!("pods \"m\" is forbidden: {message}")
        );
    }
}
