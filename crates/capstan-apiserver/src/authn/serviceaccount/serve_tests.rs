//! Service account tokens through the whole request chain: authentication as the service
//! account (RBAC sees its user and groups), and the 401s of tokens that are expired, forged,
//! for another audience, or whose service account or bound object is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::tests::started;
use super::*;
use crate::authn::serviceaccount::claims::{Bound, Grant, ObjectRef};
use crate::authn::serviceaccount::jws::SigningKey;
use crate::authn::serviceaccount::{ISSUER, TokenAuthority, now_seconds};
use crate::registry::{DeleteOptions, WriteOptions};

struct Cluster {
    _dir: tempfile::TempDir,
    store: Store,
    api: Arc<Api>,
    control: Control,
    authenticator: Arc<Authenticator>,
}

impl Cluster {
    async fn new() -> Cluster {
        let (dir, store, api, mut control) = started().await;
        let authenticator = Arc::new(Authenticator {
            tokens: TokenFile::default(),
            service_accounts: Some(api.tokens().clone()),
            bootstrap_secrets: api.registries().core("secrets"),
            ..Default::default()
        });
        // TokenReviews ask the same authenticator the requests go through.
        control.authenticator = authenticator.clone();
        Cluster {
            _dir: dir,
            store,
            api,
            control,
            authenticator,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let metrics = Metrics::new();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let app = router(
            self.store.clone(),
            metrics.clone(),
            self.api.clone(),
            "127.0.0.1:6443".into(),
        );
        let response = handle(
            request,
            None,
            &self.authenticator,
            app,
            &metrics,
            &self.control,
        )
        .await;
        let code = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap_or_default())
    }

    async fn get(&self, path: &str, token: &str) -> StatusCode {
        self.send("GET", path, token, None).await.0
    }

    async fn create(&self, plural: &str, namespace: Option<&str>, object: Value) -> Value {
        self.api
            .registry("", "v1", plural)
            .unwrap()
            .create(namespace, object, &WriteOptions::default())
            .await
            .unwrap()
            .object
    }

    async fn delete(&self, plural: &str, name: &str) {
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        self.api
            .registry("", "v1", plural)
            .unwrap()
            .delete(Some("default"), name, &options)
            .await
            .unwrap();
    }

    async fn token(&self, account: &str, spec: Value) -> String {
        let answer = self
            .api
            .tokens()
            .request("default", account, &json!({"spec": spec}))
            .await
            .unwrap();
        answer["status"]["token"].as_str().unwrap().to_owned()
    }

    /// Waits until a GET of `path` with `token` answers `code` (the authenticator reads the
    /// watch cache, which follows deletes within moments).
    async fn eventually(&self, path: &str, token: &str, code: StatusCode) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.get(path, token).await;
            if got == code {
                return;
            }
            assert!(Instant::now() < deadline, "still {got}, not {code}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn account(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
}

/// Lets service account `reader` in `default` read ConfigMaps there.
async fn grant_reader(cluster: &Cluster) {
    let rbac = |plural: &str| {
        cluster
            .api
            .registry("rbac.authorization.k8s.io", "v1", plural)
            .unwrap()
            .clone()
    };
    rbac("roles")
        .create(
            Some("default"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    rbac("rolebindings")
        .create(
            Some("default"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn a_service_account_token_authenticates_as_the_account() {
    let cluster = Cluster::new().await;
    let sa = cluster
        .create("serviceaccounts", Some("default"), account("reader"))
        .await;
    grant_reader(&cluster).await;
    let token = cluster.token("reader", json!({})).await;
    assert_eq!(cluster.get(CONFIGMAPS, &token).await, StatusCode::OK);
    // RBAC sees the service account: what its role does not grant is forbidden, not 401.
    let (code, status) = cluster
        .send("GET", "/api/v1/namespaces/default/secrets", &token, None)
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        status["message"],
        "secrets is forbidden: User \"system:serviceaccount:default:reader\" cannot list \
         resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    // Who am I: the account's user, uid, groups and credential id.
    let (code, review) = cluster
        .send(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &token,
            Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{review}");
    let info = &review["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:default:reader");
    assert_eq!(info["uid"], sa["metadata"]["uid"]);
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    let jti = crate::authn::serviceaccount::jws::unverified_payload(&token)
        .map(|p| serde_json::from_slice::<Value>(&p).unwrap()["jti"].clone())
        .unwrap();
    assert_eq!(
        info["extra"]["authentication.kubernetes.io/credential-id"],
        json!([format!("JTI={}", jti.as_str().unwrap())])
    );
    // Group subjects apply too.
    let other = cluster
        .create("serviceaccounts", Some("default"), account("other"))
        .await;
    assert!(other["metadata"]["uid"].is_string());
    let other_token = cluster.token("other", json!({})).await;
    assert_eq!(
        cluster.get(CONFIGMAPS, &other_token).await,
        StatusCode::FORBIDDEN
    );
    cluster
        .api
        .registry("rbac.authorization.k8s.io", "v1", "rolebindings")
        .unwrap()
        .create(
            Some("default"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "all-accounts"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                              "name": "system:serviceaccounts:default"}]}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
    assert_eq!(cluster.get(CONFIGMAPS, &other_token).await, StatusCode::OK);
}

#[tokio::test]
async fn a_token_review_names_the_tokens_user_to_a_delegating_component() {
    let cluster = Cluster::new().await;
    let sa = cluster
        .create("serviceaccounts", Some("default"), account("reader"))
        .await;
    cluster
        .create("serviceaccounts", Some("default"), account("delegator"))
        .await;
    cluster
        .api
        .registry("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        .unwrap()
        .create(
            None,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "delegator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "system:auth-delegator"},
                "subjects": [{"kind": "ServiceAccount", "name": "delegator",
                              "namespace": "default"}]}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    cluster
        .control
        .authorizer
        .refresh(cluster.api.registries())
        .await
        .unwrap();
    let reader = cluster.token("reader", json!({})).await;
    let delegator = cluster.token("delegator", json!({})).await;
    let review = |token: &str, audiences: Option<Vec<&str>>| {
        let mut spec = json!({"token": token});
        if let Some(audiences) = audiences {
            spec["audiences"] = json!(audiences);
        }
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    };
    const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

    // The delegator (bound to system:auth-delegator) learns whose the reader's token is.
    let (code, answer) = cluster
        .send("POST", PATH, &delegator, Some(review(&reader, None)))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["kind"], "TokenReview");
    assert_eq!(answer["spec"]["token"], reader.as_str());
    let status = &answer["status"];
    assert_eq!(status["authenticated"], true);
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:default:reader"
    );
    assert_eq!(status["user"]["uid"], sa["metadata"]["uid"]);
    assert_eq!(status["audiences"], json!([ISSUER]));
    assert!(status["user"]["extra"]["authentication.kubernetes.io/credential-id"].is_array());

    // A token that is no token, and one asked about for an audience it is not for.
    let (code, answer) = cluster
        .send("POST", PATH, &delegator, Some(review("not-a-token", None)))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(answer["status"]["authenticated"], Value::Null);
    assert_eq!(answer["status"]["user"], json!({}));
    assert_eq!(answer["status"]["error"], "invalid bearer token");
    let (_, answer) = cluster
        .send(
            "POST",
            PATH,
            &delegator,
            Some(review(&reader, Some(vec!["https://vault.example"]))),
        )
        .await;
    assert_eq!(answer["status"]["authenticated"], Value::Null, "{answer}");

    // No token at all: upstream's 400.
    let (code, answer) = cluster
        .send(
            "POST",
            PATH,
            &delegator,
            Some(
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {}}),
            ),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer["message"],
        "token is required for TokenReview in authentication"
    );

    // Without system:auth-delegator, no reviews.
    let (code, answer) = cluster
        .send("POST", PATH, &reader, Some(review(&delegator, None)))
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{answer}");
}

#[tokio::test]
async fn bad_tokens_are_unauthorized() {
    let cluster = Cluster::new().await;
    let sa = cluster
        .create("serviceaccounts", Some("default"), account("reader"))
        .await;
    grant_reader(&cluster).await;
    let good = cluster.token("reader", json!({})).await;
    assert_eq!(cluster.get(CONFIGMAPS, &good).await, StatusCode::OK);
    let grant = |audiences: &'static [String]| Grant {
        issuer: ISSUER,
        namespace: "default",
        account: ObjectRef::of(&sa),
        bound: Bound::Nothing,
        audiences,
        expiration_seconds: 3600,
        warn_after_seconds: None,
    };
    static OURS: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec![ISSUER.to_owned()]);
    // Expired an hour ago (well past the minute of leeway).
    let expired = cluster
        .api
        .tokens()
        .sign(&grant(&OURS), now_seconds() - 7200)
        .unwrap();
    let (code, status) = cluster.send("GET", CONFIGMAPS, &expired, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert_eq!(status["reason"], "Unauthorized");
    assert_eq!(status["message"], "Unauthorized");
    // Valid for a little longer thanks to the leeway.
    let just_expired = cluster
        .api
        .tokens()
        .sign(&grant(&OURS), now_seconds() - 3600 - 30)
        .unwrap();
    assert_eq!(cluster.get(CONFIGMAPS, &just_expired).await, StatusCode::OK);
    // Signed by another key, or changed after signing.
    let stranger = TokenAuthority::new(Some(SigningKey::generate().unwrap()), None);
    let forged = stranger.sign(&grant(&OURS), now_seconds()).unwrap();
    assert_eq!(
        cluster.get(CONFIGMAPS, &forged).await,
        StatusCode::UNAUTHORIZED
    );
    let parts: Vec<&str> = good.split('.').collect();
    let mut claims: Value = serde_json::from_slice(
        &crate::authn::serviceaccount::jws::unverified_payload(&good).unwrap(),
    )
    .unwrap();
    claims["sub"] = json!("system:serviceaccount:kube-system:admin");
    use base64::Engine as _;
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string()),
        parts[2]
    );
    assert_eq!(
        cluster.get(CONFIGMAPS, &tampered).await,
        StatusCode::UNAUTHORIZED
    );
    // For another audience.
    let vault = cluster
        .token("reader", json!({"audiences": ["vault"]}))
        .await;
    assert_eq!(
        cluster.get(CONFIGMAPS, &vault).await,
        StatusCode::UNAUTHORIZED
    );
    let both = cluster
        .token("reader", json!({"audiences": ["vault", ISSUER]}))
        .await;
    assert_eq!(cluster.get(CONFIGMAPS, &both).await, StatusCode::OK);
    // Not a token at all.
    assert_eq!(
        cluster.get(CONFIGMAPS, "nonsense").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        cluster.get(CONFIGMAPS, "a.b.c").await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn tokens_die_with_their_account_and_bound_objects() {
    let cluster = Cluster::new().await;
    cluster
        .create("serviceaccounts", Some("default"), account("reader"))
        .await;
    grant_reader(&cluster).await;
    let pod = cluster
        .create(
            "pods",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"serviceAccountName": "reader",
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    let secret = cluster
        .create(
            "secrets",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        )
        .await;
    let plain = cluster.token("reader", json!({})).await;
    let bound = |kind: &str, object: &Value| {
        json!({"boundObjectRef": {"kind": kind, "apiVersion": "v1",
            "name": object["metadata"]["name"], "uid": object["metadata"]["uid"]}})
    };
    let pod_token = cluster.token("reader", bound("Pod", &pod)).await;
    let secret_token = cluster.token("reader", bound("Secret", &secret)).await;
    for token in [&plain, &pod_token, &secret_token] {
        assert_eq!(cluster.get(CONFIGMAPS, token).await, StatusCode::OK);
    }
    // The pod goes: its tokens stop working, the others do not.
    cluster.delete("pods", "p").await;
    cluster
        .eventually(CONFIGMAPS, &pod_token, StatusCode::UNAUTHORIZED)
        .await;
    assert_eq!(cluster.get(CONFIGMAPS, &plain).await, StatusCode::OK);
    // A pod of the same name is another pod.
    cluster
        .create(
            "pods",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"serviceAccountName": "reader",
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        cluster.get(CONFIGMAPS, &pod_token).await,
        StatusCode::UNAUTHORIZED
    );
    cluster.delete("secrets", "s").await;
    cluster
        .eventually(CONFIGMAPS, &secret_token, StatusCode::UNAUTHORIZED)
        .await;
    // The account goes, and comes back with another uid: its old tokens stay dead.
    cluster.delete("serviceaccounts", "reader").await;
    cluster
        .eventually(CONFIGMAPS, &plain, StatusCode::UNAUTHORIZED)
        .await;
    cluster
        .create("serviceaccounts", Some("default"), account("reader"))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        cluster.get(CONFIGMAPS, &plain).await,
        StatusCode::UNAUTHORIZED
    );
    let fresh = cluster.token("reader", json!({})).await;
    assert_eq!(cluster.get(CONFIGMAPS, &fresh).await, StatusCode::OK);
}
