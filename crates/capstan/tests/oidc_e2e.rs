//! End to end: external identities (issue 25). A test OpenID Connect issuer (an HTTPS server
//! in this process serving its discovery document and JWKS, signing ES256 ID tokens) is
//! trusted by the real `capstan server`, through the structured `AuthenticationConfiguration`
//! file (`--authentication-config`: claim mappings, CEL rules, anonymous limited to one path)
//! and through upstream's `--oidc-*` flags; stock kubectl with the tokens is the user the
//! claims map to, with the mapped groups RBAC grants to, and refused tokens are 401.
//! `--anonymous-auth=false` makes requests without credentials 401 everywhere.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

/// A test issuer: its URL, CA and signing key.
struct Issuer {
    https: common::https::Https,
    url: String,
    key: EcdsaKeyPair,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl Issuer {
    fn start() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .unwrap();
        let point = key.public_key().as_ref().to_vec();
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "test-key",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]});
        let url: Arc<OnceLock<String>> = Arc::new(OnceLock::new());
        let served_url = url.clone();
        let https = common::https::serve(&[], None, move |request| {
            let url = served_url.get().cloned().unwrap_or_default();
            let body = match request.uri().path() {
                "/.well-known/openid-configuration" => json!({
                    "issuer": url,
                    "jwks_uri": format!("{url}/keys"),
                    "id_token_signing_alg_values_supported": ["ES256"],
                })
                .to_string(),
                "/keys" => jwks.to_string(),
                _ => String::new(),
            };
            async move {
                let mut response =
                    hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                response
            }
        });
        let issuer_url = format!("https://127.0.0.1:{}", https.port);
        url.set(issuer_url.clone()).unwrap();
        Issuer {
            https,
            url: issuer_url,
            key,
        }
    }

    /// An ID token with `claims` over the defaults (issuer, audience `capstan`, an hour).
    fn token(&self, claims: Value) -> String {
        let mut all = json!({
            "iss": self.url, "aud": "capstan", "sub": "alice",
            "iat": now(), "exp": now() + 3600,
        });
        for (k, v) in claims.as_object().unwrap() {
            all[k] = v.clone();
        }
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": "test-key"});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(all.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

/// stock kubectl against `server` with a bearer token and nothing else.
fn kubectl_token(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(kubectl_binary("1.33"))
        .args(["--server", &server.url(""), "--insecure-skip-tls-verify"])
        .args(["--token", token])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap()
}

fn whoami(server: &Server, token: &str) -> Value {
    let output = kubectl_token(server, token, &["auth", "whoami", "-o", "json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout).unwrap()["status"]["userInfo"].clone()
}

fn unauthorized(server: &Server, token: &str) {
    let output = kubectl_token(server, token, &["get", "pods"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("You must be logged in to the server (Unauthorized)")
            || stderr.contains("Unauthorized"),
        "{stderr}"
    );
}

fn bind_group_to_view(kubeconfig: &Path, group: &str) {
    kubectl_ok(
        "1.33",
        kubeconfig,
        &[
            "create",
            "clusterrolebinding",
            "oidc-viewers",
            "--clusterrole=view",
            &format!("--group={group}"),
        ],
    );
}

#[test]
fn tokens_of_a_configured_issuer_authenticate_with_mapped_claims() {
    let issuer = Issuer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("authn.json");
    let document = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {
                "url": issuer.url,
                "certificateAuthority": issuer.https.ca_pem,
                "audiences": ["capstan", "other"],
                "audienceMatchPolicy": "MatchAny",
            },
            "claimValidationRules": [
                {"claim": "hd", "requiredValue": "example.com"},
                {"expression": "claims.exp - claims.iat <= 86400", "message": "at most a day"},
            ],
            "claimMappings": {
                "username": {"expression": "claims.email_verified ? 'oidc:' + claims.email : ''"},
                "groups": {"claim": "groups", "prefix": "oidc:"},
                "uid": {"claim": "sub"},
                "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}],
            },
            "userValidationRules": [{
                "expression": "!user.username.startsWith('oidc:system')",
                "message": "no system accounts",
            }],
        }],
        "anonymous": {"enabled": true, "conditions": [{"path": "/livez"}]},
    });
    std::fs::write(&config, document.to_string()).unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--authentication-config", config.to_str().unwrap()],
    );
    let kc = server.kubeconfig();
    bind_group_to_view(&kc, "oidc:viewers");

    let claims = json!({
        "email": "alice@example.com", "email_verified": true, "hd": "example.com",
        "groups": ["viewers", "dev"], "tenant": "blue",
    });
    let token = issuer.token(claims.clone());
    let user = whoami(&server, &token);
    assert_eq!(user["username"], "oidc:alice@example.com");
    assert_eq!(user["uid"], "alice");
    assert_eq!(
        user["groups"],
        json!(["oidc:viewers", "oidc:dev", "system:authenticated"])
    );
    assert_eq!(user["extra"]["example.com/tenant"], json!(["blue"]));

    // RBAC sees the mapped group: the view role reads, and nothing writes.
    let read = kubectl_token(&server, &token, &["get", "configmaps", "-n", "default"]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let write = kubectl_token(
        &server,
        &token,
        &["create", "configmap", "nope", "-n", "default"],
    );
    assert!(!write.status.success());
    let stderr = String::from_utf8_lossy(&write.stderr);
    assert!(
        stderr.contains(
            "User \"oidc:alice@example.com\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        "{stderr}"
    );

    // The second audience is as good as the first.
    let other = issuer.token(json!({
        "aud": "other", "email": "bob@example.com", "email_verified": true,
        "hd": "example.com", "tenant": "red",
    }));
    assert_eq!(whoami(&server, &other)["username"], "oidc:bob@example.com");

    // Refused: expired, wrong audience, a failed claim rule, a failed user rule, a wrong
    // required claim, a forged signature.
    let mut expired = claims.clone();
    expired["exp"] = json!(now() - 60);
    expired["iat"] = json!(now() - 120);
    unauthorized(&server, &issuer.token(expired));
    let mut stranger = claims.clone();
    stranger["aud"] = json!("someone-else");
    unauthorized(&server, &issuer.token(stranger));
    let mut long = claims.clone();
    long["exp"] = json!(now() + 200_000);
    unauthorized(&server, &issuer.token(long));
    let mut system = claims.clone();
    system["email"] = json!("system@example.com");
    unauthorized(&server, &issuer.token(system));
    let mut elsewhere = claims.clone();
    elsewhere["hd"] = json!("evil.com");
    unauthorized(&server, &issuer.token(elsewhere));
    let forged = Issuer::start().token(json!({"iss": issuer.url}));
    unauthorized(&server, &forged);

    // Anonymous requests reach only the configured path.
    assert_eq!(curl(&server.url("/livez")).as_deref(), Some("ok"));
    let readyz: Value = serde_json::from_str(&curl(&server.url("/readyz")).unwrap()).unwrap();
    assert_eq!(readyz["code"], 401, "{readyz}");
    server.stop();
}

#[test]
fn oidc_flags_configure_one_issuer_and_anonymous_auth_can_be_off() {
    let issuer = Issuer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("issuer-ca.pem");
    std::fs::write(&ca, &issuer.https.ca_pem).unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &[
            "--oidc-issuer-url",
            &issuer.url,
            "--oidc-client-id",
            "capstan",
            "--oidc-ca-file",
            ca.to_str().unwrap(),
            "--oidc-groups-claim",
            "groups",
            "--oidc-signing-algs",
            "ES256",
            "--oidc-required-claim",
            "hd=example.com",
            "--anonymous-auth=false",
        ],
    );
    let kc = server.kubeconfig();
    bind_group_to_view(&kc, "viewers");
    let token = issuer.token(json!({"groups": "viewers", "hd": "example.com"}));
    let user = whoami(&server, &token);
    // Without --oidc-username-prefix, a claim other than email is prefixed by the issuer.
    assert_eq!(user["username"], format!("{}#alice", issuer.url));
    assert_eq!(user["groups"], json!(["viewers", "system:authenticated"]));
    let read = kubectl_token(&server, &token, &["get", "pods", "-n", "default"]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    unauthorized(
        &server,
        &issuer.token(json!({"groups": "viewers", "hd": "other.com"})),
    );

    // No anonymous requests at all, health included; credentials still work.
    for path in ["/healthz", "/readyz", "/version", "/api"] {
        let answer: Value = serde_json::from_str(&curl(&server.url(path)).unwrap()).unwrap();
        assert_eq!(answer["code"], 401, "{path}: {answer}");
    }
    kubectl_ok("1.33", &kc, &["get", "--raw", "/readyz"]);
    server.stop();
}
