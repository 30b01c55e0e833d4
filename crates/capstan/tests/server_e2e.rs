//! End to end: the real `capstan server` binary, driven with stock kubectl (an old and a new
//! version) and plain HTTPS as an anonymous client.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::*;

#[test]
fn kubectl_talks_to_the_server_and_credentials_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::start(dir.path(), port);

    for version in ["1.27", "1.33"] {
        let output = kubectl(version, &server.kubeconfig(), &["version", "-o", "json"]);
        assert!(
            output.status.success(),
            "kubectl {version} version: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            json["serverVersion"]["gitVersion"], "v1.33.0",
            "kubectl {version}"
        );
        assert_eq!(json["serverVersion"]["minor"], "33");
        // The commit the binary was built from, and when (the kubectl version spec parses them).
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        if let Some(head) = head {
            assert_eq!(json["serverVersion"]["gitCommit"], head.as_str());
        }
        let built = json["serverVersion"]["buildDate"]
            .as_str()
            .unwrap_or_default();
        assert!(
            built.len() == 20 && built.ends_with('Z') && built.as_bytes()[10] == b'T',
            "buildDate {built:?}"
        );

        let output = kubectl(
            version,
            &server.kubeconfig(),
            &["get", "--raw", "/readyz?verbose"],
        );
        let body = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "readyz: {body}");
        assert!(
            body.contains("[+]etcd ok") && body.contains("readyz check passed"),
            "{body}"
        );
    }

    // Admins read the request metrics, under upstream's names.
    let output = kubectl("1.33", &server.kubeconfig(), &["get", "--raw", "/metrics"]);
    let metrics = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "metrics: {metrics}");
    assert!(
        metrics.contains("apiserver_request_total{verb=\"GET\"")
            && metrics.contains("apiserver_request_duration_seconds_bucket"),
        "{metrics}"
    );

    // Anonymous clients reach health and version, and get upstream's 401 elsewhere.
    assert_eq!(curl(&server.url("/healthz")).as_deref(), Some("ok"));
    // `/version/` is `/version`, written as upstream writes it: indented, in `version.Info`'s
    // order, no closing newline.
    let version = curl(&server.url("/version/")).unwrap();
    assert_eq!(
        curl(&server.url("/version")).as_deref(),
        Some(version.as_str())
    );
    assert!(
        version.starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"33\",")
            && version.ends_with('}'),
        "{version}"
    );
    assert_eq!(curl(&server.url("/livez")).as_deref(), Some("ok"));
    let anonymous_metrics: serde_json::Value =
        serde_json::from_str(&curl(&server.url("/metrics")).unwrap()).unwrap();
    assert_eq!(anonymous_metrics["code"], 401);
    let version: serde_json::Value =
        serde_json::from_str(&curl(&server.url("/version")).unwrap()).unwrap();
    assert_eq!(version["gitVersion"], "v1.33.0");
    let status: serde_json::Value =
        serde_json::from_str(&curl(&server.url("/api/v1/pods")).unwrap()).unwrap();
    let admin_pods = kubectl_ok(
        "1.33",
        &server.kubeconfig(),
        &["get", "--raw", "/api/v1/pods"],
    );
    assert!(admin_pods.contains("\"kind\":\"PodList\""), "{admin_pods}");
    assert_eq!(
        status,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Unauthorized", "reason": "Unauthorized", "code": 401
        })
    );

    // The kubeconfig is private, and a restart keeps the CA and the admin credentials.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(server.kubeconfig())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let saved = dir.path().join("saved-kubeconfig.yaml");
    std::fs::copy(server.kubeconfig(), &saved).unwrap();
    server.stop();
    let server = Server::start(dir.path(), port);
    let output = kubectl("1.33", &saved, &["version", "-o", "json"]);
    assert!(
        output.status.success(),
        "the old kubeconfig still works: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    server.stop();
}

#[test]
fn static_tokens_authenticate_users_with_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admin-token,alice,1,\"system:masters\"\nplain-token,bob,2,\"devs\"\n",
    )
    .unwrap();
    let port = free_port();
    let server = Server::start_with(
        &dir.path().join("data"),
        port,
        &["--token-auth-file", tokens.to_str().unwrap()],
    );
    let reason = |token: &str, path: &str| -> serde_json::Value {
        let header = format!("Authorization: Bearer {token}");
        let body = curl_with(&server.url(path), &["-H", &header]).unwrap();
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["reason"].clone()
    };
    assert_eq!(reason("admin-token", "/api/v1/nothing"), "NotFound");
    assert_eq!(reason("plain-token", "/api/v1/pods"), "Forbidden");
    assert_eq!(reason("wrong-token", "/api/v1/pods"), "Unauthorized");
    assert_eq!(
        reason("wrong-token", "/healthz"),
        "Unauthorized",
        "bad credentials fail everywhere"
    );

    let output = Command::new(kubectl_dir().join("kubectl.1.33"))
        .args([
            "--server",
            &server.url(""),
            "--insecure-skip-tls-verify",
            "--token",
            "admin-token",
        ])
        .args(["version", "-o", "json"])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    server.stop();
}
