//! End to end: the webhooks kube-apiserver configures by kubeconfig files (issue 25), against
//! the real `capstan server` and one HTTPS test service on loopback (its own CA; it demands
//! the API server's client certificate, named in the kubeconfig files with paths relative to
//! them) that answers TokenReviews at `/authenticate`, SubjectAccessReviews at `/authorize`
//! and receives audit EventLists at `/audit` (where the kubeconfig's user also carries a
//! token). Stock kubectl, as a webhook-authenticated user: whoami with the mapped groups,
//! the webhook allowing what RBAC does not, its `denied` winning over an RBAC grant behind it,
//! SubjectAccessReviews through `kubectl auth can-i`, one TokenReview per token while cached,
//! unknown tokens refused, audit events arriving in batches. A second server whose webhooks
//! are unreachable: tokens are unauthenticated (401), and a request only the webhook could
//! have allowed is upstream's 500.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::*;
use http_body_util::{BodyExt as _, Full};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::{Value, json};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: None
  users: ["system:kube-scheduler", "system:kube-controller-manager", "system:kube-dns"]
- level: Metadata
"#;

/// What the test service received: the path, the `Authorization` header, the body.
type Received = Arc<Mutex<Vec<(String, String, Value)>>>;

/// The test service's answer to one request.
fn answer(path: &str, body: &Value) -> Value {
    match path {
        "/authenticate" => {
            let status = match body["spec"]["token"].as_str().unwrap_or_default() {
                "alice-token" => json!({
                    "authenticated": true,
                    "user": {"username": "alice", "uid": "alice-uid",
                             "groups": ["webhook-devs"], "extra": {"team": ["blue"]}},
                }),
                _ => json!({"authenticated": false}),
            };
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "status": status})
        }
        "/authorize" => {
            let spec = &body["spec"];
            let attrs = &spec["resourceAttributes"];
            let devs = spec["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == "webhook-devs"));
            let status = match (devs, attrs["resource"].as_str(), attrs["verb"].as_str()) {
                (true, Some("configmaps"), Some("list" | "get" | "create")) => {
                    json!({"allowed": true, "reason": "devs may use configmaps"})
                }
                (true, Some("secrets"), _) => {
                    json!({"allowed": false, "denied": true, "reason": "secrets are off limits"})
                }
                _ => json!({"allowed": false}),
            };
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "status": status})
        }
        _ => json!({}),
    }
}

/// A CA and a client certificate it signed (CN `kube-apiserver`), PEM: (ca, cert, key).
fn client_certificate() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert_pem = params.signed_by(&key, &issuer).unwrap().pem();
    (ca_pem, cert_pem, key.serialize_pem())
}

/// A kubeconfig file naming `server`, trusting `ca.pem` and presenting `client.pem`, all
/// beside it (relative paths), with `token` too when given.
fn service_kubeconfig(dir: &Path, name: &str, server: &str, token: Option<&str>) -> String {
    let token = token
        .map(|t| format!("\n    token: {t}"))
        .unwrap_or_default();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: webhook
  cluster:
    server: {server}
    certificate-authority: ca.pem
users:
- name: apiserver
  user:
    client-certificate: client.pem
    client-key: client-key.pem{token}
contexts:
- name: webhook
  context:
    cluster: webhook
    user: apiserver
current-context: webhook
"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A kubeconfig for the API server at `admin`'s address, trusting its CA, with a bearer token.
fn token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let text = std::fs::read_to_string(admin).unwrap();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap()
            .trim()
            .to_owned()
    };
    std::fs::write(
        out,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {}
    certificate-authority-data: {}
users:
- name: u
  user:
    token: {token}
contexts:
- name: c
  context:
    cluster: c
    user: u
current-context: c
",
            field("server:"),
            field("certificate-authority-data:")
        ),
    )
    .unwrap();
}

#[test]
fn webhooks_authenticate_authorize_and_receive_audit_events() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("webhooks");
    std::fs::create_dir_all(&conf).unwrap();
    let (client_ca, client_cert, client_key) = client_certificate();
    std::fs::write(conf.join("client.pem"), &client_cert).unwrap();
    std::fs::write(conf.join("client-key.pem"), &client_key).unwrap();
    let received: Received = Arc::default();
    let kept = received.clone();
    let service = https::serve(&[], Some(&client_ca), move |request| {
        let kept = kept.clone();
        async move {
            let path = request.uri().path().to_owned();
            let authorization = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let reply = answer(&path, &body);
            kept.lock().unwrap().push((path, authorization, body));
            hyper::Response::new(Full::new(bytes::Bytes::from(reply.to_string())))
        }
    });
    std::fs::write(conf.join("ca.pem"), &service.ca_pem).unwrap();
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", service.port);
    let authn = service_kubeconfig(&conf, "authn.yaml", &url("/authenticate"), None);
    let authz = service_kubeconfig(&conf, "authz.yaml", &url("/authorize"), None);
    let audit = service_kubeconfig(&conf, "audit.yaml", &url("/audit"), Some("audit-secret"));
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.display().to_string();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &[
            "--authentication-token-webhook-config-file",
            &authn,
            // The webhook before RBAC: its `denied` ends the union before RBAC could allow.
            "--authorization-mode",
            "Node,Webhook,RBAC",
            "--authorization-webhook-config-file",
            &authz,
            "--audit-policy-file",
            &policy,
            "--audit-webhook-config-file",
            &audit,
            "--audit-webhook-batch-max-wait",
            "1s",
        ],
    );
    let admin = server.kubeconfig();
    let alice = dir.path().join("alice.kubeconfig");
    token_kubeconfig(&admin, "alice-token", &alice);
    let count = |path: &str, token: &str| {
        received
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, body)| p == path && body["spec"]["token"] == token)
            .count()
    };

    // The webhook's user, with its groups, `system:authenticated` added, uid and extra.
    let whoami: Value = serde_json::from_str(&kubectl_ok(
        "1.33",
        &alice,
        &["auth", "whoami", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(
        whoami["status"]["userInfo"],
        json!({"username": "alice", "uid": "alice-uid",
               "groups": ["webhook-devs", "system:authenticated"],
               "extra": {"team": ["blue"]}})
    );
    let review = received
        .lock()
        .unwrap()
        .iter()
        .find(|(p, _, _)| p == "/authenticate")
        .cloned()
        .unwrap();
    assert_eq!(review.2["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(
        review.2["spec"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );

    // RBAC grants alice nothing on config maps; the webhook allows them.
    kubectl_ok(
        "1.33",
        &alice,
        &["create", "configmap", "by-webhook", "--from-literal=k=v"],
    );
    let listed = kubectl_ok("1.27", &alice, &["get", "configmaps", "-o", "name"]);
    assert!(listed.contains("configmap/by-webhook"), "{listed}");
    let sar = received
        .lock()
        .unwrap()
        .iter()
        .find(|(p, _, body)| {
            p == "/authorize"
                && body["spec"]["user"] == "alice"
                && body["spec"]["resourceAttributes"]["verb"] == "create"
                && body["spec"]["resourceAttributes"]["resource"] == "configmaps"
        })
        .cloned()
        .unwrap();
    assert_eq!(
        sar.2["spec"]["resourceAttributes"],
        json!({"namespace": "default", "verb": "create", "version": "v1",
               "resource": "configmaps"})
    );
    assert_eq!(sar.2["spec"]["uid"], "alice-uid");
    assert_eq!(sar.2["spec"]["extra"], json!({"team": ["blue"]}));

    // What the webhook has no opinion on, RBAC decides: nothing for alice yet.
    assert_refused(
        &kubectl_any("1.33", &alice, &["get", "pods"]),
        &["User \"alice\" cannot list resource \"pods\""],
    );
    // RBAC grants alice secrets, but the webhook's `denied` comes first and wins.
    kubectl_ok(
        "1.33",
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "alice-reads",
            "--clusterrole=view",
            "--user=alice",
        ],
    );
    kubectl_ok(
        "1.33",
        &admin,
        &[
            "create",
            "clusterrole",
            "secret-reader",
            "--verb=get,list",
            "--resource=secrets",
        ],
    );
    kubectl_ok(
        "1.33",
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "alice-secrets",
            "--clusterrole=secret-reader",
            "--user=alice",
        ],
    );
    eventually("RBAC to grant alice pods", || {
        let output = kubectl_any("1.33", &alice, &["get", "pods", "-A", "-o", "name"]);
        output.status.success().then_some(())
    });
    assert_refused(
        &kubectl_any("1.33", &alice, &["get", "secrets"]),
        &[
            "User \"alice\" cannot list resource \"secrets\"",
            "secrets are off limits",
        ],
    );
    // SubjectAccessReviews go through the same union.
    assert_eq!(
        kubectl_any("1.33", &alice, &["auth", "can-i", "list", "configmaps"]).stdout,
        b"yes\n"
    );
    let can_i = kubectl_any("1.33", &alice, &["auth", "can-i", "get", "secrets"]);
    assert_eq!(
        String::from_utf8_lossy(&can_i.stdout),
        "no - secrets are off limits\n"
    );
    let review = kubectl_stdin(
        "1.33",
        &admin,
        &["create", "-f", "-", "-o", "json"],
        r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "alice", "groups": ["webhook-devs"],
                     "resourceAttributes": {"verb": "get", "resource": "secrets",
                                            "namespace": "default"}}}"#,
    );
    assert!(review.status.success(), "{review:?}");
    let review: Value = serde_json::from_slice(&review.stdout).unwrap();
    assert_eq!(
        review["status"],
        json!({"allowed": false, "denied": true, "reason": "secrets are off limits"})
    );

    // One TokenReview for alice's token however often she comes back, while it is cached.
    assert_eq!(count("/authenticate", "alice-token"), 1);
    // Unknown tokens are refused, and the refusal is cached too.
    let nobody = dir.path().join("nobody.kubeconfig");
    token_kubeconfig(&admin, "nobody-token", &nobody);
    for _ in 0..2 {
        assert_refused(
            &kubectl_any("1.33", &nobody, &["get", "configmaps"]),
            &["You must be logged in to the server"],
        );
    }
    assert_eq!(count("/authenticate", "nobody-token"), 1);

    // Audit events come in EventLists, with the token of the audit kubeconfig's user.
    let create = eventually("alice's create to be audited", || {
        let received = received.lock().unwrap();
        received
            .iter()
            .filter(|(p, _, _)| p == "/audit")
            .flat_map(|(_, auth, list)| {
                assert_eq!(auth, "Bearer audit-secret");
                assert_eq!(list["kind"], "EventList");
                assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
                list["items"].as_array().cloned().unwrap_or_default()
            })
            .find(|e| {
                e["user"]["username"] == "alice"
                    && e["verb"] == "create"
                    && e["objectRef"]["resource"] == "configmaps"
            })
    });
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["level"], "Metadata");
    assert_eq!(create["objectRef"]["namespace"], "default");
    assert_eq!(create["responseStatus"]["code"], 201);
}

#[test]
fn unreachable_webhooks_leave_tokens_unauthenticated_and_authorization_failing() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("https://127.0.0.1:{}/", closed.local_addr().unwrap().port());
    drop(closed);
    let kubeconfig = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {dead}
    insecure-skip-tls-verify: true
contexts:
- name: c
  context:
    cluster: c
current-context: c
"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let (authn, authz) = (kubeconfig("authn.yaml"), kubeconfig("authz.yaml"));
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-token,bob,bob-uid\n").unwrap();
    let tokens = tokens.display().to_string();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &[
            "--token-auth-file",
            &tokens,
            "--authentication-token-webhook-config-file",
            &authn,
            "--authorization-mode",
            "Node,RBAC,Webhook",
            "--authorization-webhook-config-file",
            &authz,
        ],
    );
    let admin = server.kubeconfig();
    // A token only the webhook could vouch for: 401, not 500.
    let stranger = dir.path().join("stranger.kubeconfig");
    token_kubeconfig(&admin, "stranger-token", &stranger);
    assert_refused(
        &kubectl_any("1.33", &stranger, &["get", "configmaps"]),
        &["You must be logged in to the server"],
    );
    // What RBAC allows needs no webhook (discovery, whoami); what only the webhook could
    // allow is upstream's 500, the error in plain text.
    let bob = dir.path().join("bob.kubeconfig");
    token_kubeconfig(&admin, "bob-token", &bob);
    let whoami = kubectl_ok("1.33", &bob, &["auth", "whoami"]);
    assert!(whoami.contains("bob"), "{whoami}");
    assert_refused(
        &kubectl_any("1.33", &bob, &["get", "configmaps"]),
        &[
            "Internal Server Error",
            "/api/v1/namespaces/default/configmaps",
            "connection refused",
        ],
    );
    // The review answers name the error.
    let review = kubectl_stdin(
        "1.33",
        &admin,
        &["create", "-f", "-", "-o", "json"],
        r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "bob",
                     "resourceAttributes": {"verb": "get", "resource": "configmaps"}}}"#,
    );
    assert!(review.status.success(), "{review:?}");
    let review: Value = serde_json::from_slice(&review.stdout).unwrap();
    assert_eq!(review["status"]["allowed"], false);
    assert!(
        review["status"]["evaluationError"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{review}"
    );
    // The server keeps serving the rest.
    kubectl_ok("1.33", &admin, &["get", "namespaces"]);
}
