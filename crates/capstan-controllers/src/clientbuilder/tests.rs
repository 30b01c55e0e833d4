#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

/// One request the fake API server answered: method, path and body.
type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A fake API server for the controller manager's client: the service account is missing
/// until created, and every TokenRequest gets token `t<n>` valid for `life_seconds`.
fn root_client(life_seconds: i64) -> (Client, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let log = log.clone();
        async move {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, answer) = {
                let mut log = log.lock().unwrap();
                let created = log
                    .iter()
                    .any(|(m, p, _)| m == "POST" && p.ends_with("/serviceaccounts"));
                let issued = log.iter().filter(|(_, p, _)| p.ends_with("/token")).count();
                log.push((method.clone(), path.clone(), body.clone()));
                let account =
                    "/api/v1/namespaces/kube-system/serviceaccounts/deployment-controller";
                match (method.as_str(), path.as_str()) {
                    ("GET", p) if p == account && !created => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                    ("GET", p) if p == account => (
                        200,
                        json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "deployment-controller", "namespace": "kube-system"}}),
                    ),
                    ("POST", "/api/v1/namespaces/kube-system/serviceaccounts") => {
                        let mut account = body.clone();
                        account["metadata"]["uid"] = json!("u1");
                        (201, account)
                    }
                    ("POST", p) if p == format!("{account}/token") => {
                        let expires =
                            jiff::Timestamp::now() + jiff::SignedDuration::from_secs(life_seconds);
                        (
                            201,
                            json!({
                                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                "spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS},
                                "status": {"token": format!("t{issued}"),
                                           "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
                            }),
                        )
                    }
                    _ => (500, json!({})),
                }
            };
            Ok::<_, Infallible>(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            )
        }
    });
    (Client::new(service, "default"), seen)
}

/// A fake API server for a controller's client: it records each request's Authorization
/// header and answers 401 to the first `refuse` requests.
fn controller_client(
    source: &Arc<TokenSource>,
    refuse: usize,
) -> (Client, Arc<Mutex<Vec<String>>>) {
    let headers: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = headers.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let log = log.clone();
        async move {
            let header = request
                .headers()
                .get(AUTHORIZATION)
                .map(|h| h.to_str().unwrap().to_owned())
                .unwrap_or_default();
            let count = {
                let mut log = log.lock().unwrap();
                log.push(header);
                log.len()
            };
            let (code, answer) = if count <= refuse {
                (
                    401,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "Unauthorized", "code": 401, "message": "Unauthorized"}),
                )
            } else {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
                )
            };
            Ok::<_, Infallible>(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            )
        }
    });
    let client = kube::client::ClientBuilder::new(service, "default")
        .with_layer(&BearerLayer(source.clone()))
        .build();
    (client, headers)
}

fn source(root: Client, min_reissue: Duration) -> Arc<TokenSource> {
    Arc::new(TokenSource {
        account: "deployment-controller".to_owned(),
        root,
        header: watch::Sender::new(None),
        rejected: Notify::new(),
        min_reissue,
    })
}

fn token(source: &TokenSource) -> Option<String> {
    source.header().map(|h| h.to_str().unwrap().to_owned())
}

#[test]
fn tokens_are_renewed_at_four_fifths_of_their_life_and_failures_back_off() {
    assert_eq!(
        refresh_after(Duration::from_secs(3600)),
        Duration::from_secs(2880)
    );
    assert_eq!(
        refresh_after(Duration::from_secs(600)),
        Duration::from_secs(480)
    );
    let waits: Vec<u64> = (1..=9).map(|n| retry_after(n).as_millis() as u64).collect();
    assert_eq!(
        waits,
        [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]
    );
    assert_eq!(retry_after(u32::MAX), Duration::from_secs(30));
}

#[test]
fn a_controllers_settings_keep_the_server_and_trust_but_not_the_managers_credential() {
    let mut base = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    base.root_cert = Some(vec![vec![1, 2, 3]]);
    base.auth_info.client_certificate_data = Some("cert".to_owned());
    base.auth_info.client_key_data = Some("key".to_owned().into());
    base.auth_info.token = Some("manager-token".to_owned().into());
    base.headers.push((
        USER_AGENT,
        HeaderValue::from_static("kube-controller-manager/v1.33.0 (linux/amd64) capstan/0.1.0"),
    ));
    let config = account_config(&base, "deployment-controller");
    assert_eq!(config.cluster_url, base.cluster_url);
    assert_eq!(config.root_cert, base.root_cert);
    assert!(config.auth_info.client_certificate_data.is_none());
    assert!(config.auth_info.client_key_data.is_none());
    assert!(config.auth_info.token.is_none());
    assert_eq!(
        config.headers,
        [(
            USER_AGENT,
            HeaderValue::from_static(
                "kube-controller-manager/v1.33.0 (linux/amd64) capstan/0.1.0/deployment-controller"
            )
        )]
    );
}

#[tokio::test]
async fn the_account_is_made_and_its_token_renewed_before_it_expires() {
    // A token that lasts about two seconds is renewed after about 80% of that.
    let (root, seen) = root_client(2);
    let source = source(root, Duration::from_secs(3600));
    let _run = AbortOnDrop(tokio::spawn(source.clone().run()));
    tokio::time::timeout(Duration::from_secs(5), source.ready())
        .await
        .unwrap();
    assert_eq!(token(&source).as_deref(), Some("Bearer t0"));
    assert!(source.header().unwrap().is_sensitive());
    {
        let seen = seen.lock().unwrap();
        let steps: Vec<(&str, &str)> = seen
            .iter()
            .map(|(m, p, _)| (m.as_str(), p.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                (
                    "GET",
                    "/api/v1/namespaces/kube-system/serviceaccounts/deployment-controller"
                ),
                ("POST", "/api/v1/namespaces/kube-system/serviceaccounts"),
                (
                    "POST",
                    "/api/v1/namespaces/kube-system/serviceaccounts/deployment-controller/token"
                ),
            ]
        );
        assert_eq!(seen[1].2["metadata"]["name"], "deployment-controller");
        assert_eq!(seen[1].2["metadata"]["namespace"], "kube-system");
        // An hour, bound to nothing, for the API server's own audiences.
        assert_eq!(seen[2].2["spec"]["expirationSeconds"], 3600);
        assert!(seen[2].2["spec"]["boundObjectRef"].is_null());
        assert_eq!(seen[2].2["spec"]["audiences"], json!([]));
    }
    let mut watch = source.header.subscribe();
    let started = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(5),
        watch.wait_for(|h| h.as_ref().is_some_and(|h| h == "Bearer t1")),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The account exists now: the renewal only checks it.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.iter().filter(|(m, _, _)| m == "POST").count(), 3);
    assert_eq!(seen.len(), 5);
}

#[tokio::test]
async fn requests_carry_the_token_and_a_refusal_renews_it() {
    let (root, _) = root_client(3600);
    let source = source(root, Duration::from_millis(50));
    let _run = AbortOnDrop(tokio::spawn(source.clone().run()));
    tokio::time::timeout(Duration::from_secs(5), source.ready())
        .await
        .unwrap();
    let (client, headers) = controller_client(&source, 1);
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    // The first request is refused as unauthenticated: the source asks for a new token.
    let refused = maps.get("x").await.unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 401),
        "{refused:?}"
    );
    let mut watch = source.header.subscribe();
    tokio::time::timeout(
        Duration::from_secs(5),
        watch.wait_for(|h| h.as_ref().is_some_and(|h| h == "Bearer t1")),
    )
    .await
    .unwrap()
    .unwrap();
    maps.get("x").await.unwrap();
    assert_eq!(*headers.lock().unwrap(), ["Bearer t0", "Bearer t1"]);
}

#[tokio::test]
async fn shared_credentials_hand_every_controller_the_managers_client() {
    let (root, seen) = root_client(3600);
    let mut clients = Clients::new(&root, &Credentials::Shared);
    let (_, source) = clients.client("deployment-controller");
    assert!(source.is_none());
    assert!(clients.start().is_empty());
    // A controller task without a token source starts at once.
    let (done, finished) = tokio::sync::oneshot::channel();
    let task: Task = Box::pin(async move {
        let _ = done.send(());
    });
    tokio::spawn(after_token(task, None));
    finished.await.unwrap();
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn controllers_of_one_account_share_its_client_and_wait_for_its_token() {
    let (root, seen) = root_client(3600);
    let base = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    let mut clients = Clients::new(&root, &Credentials::ServiceAccounts(Box::new(base)));
    let (_, first) = clients.client("deployment-controller");
    let (_, second) = clients.client("deployment-controller");
    let (_, other) = clients.client("job-controller");
    let (first, second, other) = (first.unwrap(), second.unwrap(), other.unwrap());
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(other.account(), "job-controller");
    // The controller waits for its account's first token.
    let (done, mut finished) = tokio::sync::oneshot::channel();
    let task: Task = Box::pin(async move {
        let _ = done.send(());
    });
    let _task = AbortOnDrop(tokio::spawn(after_token(task, Some(first.clone()))));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(finished.try_recv().is_err());
    assert!(seen.lock().unwrap().is_empty());
    // Starting the sources (one per account) lets it run.
    let sources = clients.start();
    assert_eq!(sources.len(), 2);
    tokio::time::timeout(Duration::from_secs(5), finished)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token(&first).as_deref(), Some("Bearer t0"));
}
