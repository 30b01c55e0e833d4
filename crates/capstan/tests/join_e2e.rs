//! End to end: what a join token buys (issue 25's join hole), against the real `capstan
//! server` binary: certificates only for the node's own names, never the API server's; a node
//! name held by its first joiner's password; bootstrap tokens (`capstan token create`) that
//! join and authenticate with upstream's user and groups until they expire; `capstan token
//! rotate` taking effect without a restart; kubelet certificates from a CA of their own; and
//! TLS below 1.2 refused.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use capstan_kubelet::join::{Credentials, JoinError, join};
use common::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Joins as `node` reachable at `addresses` with `password`.
fn try_join(
    server: &Server,
    token: &str,
    node: &str,
    addresses: &[&str],
    password: &str,
) -> Result<Credentials, JoinError> {
    let addresses: Vec<String> = addresses.iter().map(|a| (*a).to_owned()).collect();
    runtime().block_on(join(
        &server.url(""),
        token,
        node,
        &addresses,
        password,
        false,
    ))
}

fn refusal(result: Result<Credentials, JoinError>) -> String {
    match result {
        Ok(_) => panic!("the join was not refused"),
        Err(error) => error.to_string(),
    }
}

/// The issuer of a PEM certificate, as openssl prints it.
fn issuer(cert_pem: &str, dir: &Path) -> String {
    let file = dir.join("issued.crt");
    std::fs::write(&file, cert_pem).unwrap();
    let output = Command::new("openssl")
        .args(["x509", "-noout", "-issuer", "-in"])
        .arg(&file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Whether openssl completes a handshake with `server` offering only `version` (`-tls1_2`...).
fn handshake(server: &Server, version: &str) -> bool {
    Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(server.url("").trim_start_matches("https://"))
        .arg(version)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
        .status
        .success()
}

fn capstan(args: &[&str], data_dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn a_join_token_buys_only_a_nodes_own_identity() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let token = token.trim();

    // A first join claims the name; the kubelet's serving certificate is not the cluster CA's.
    let first = try_join(&server, token, "worker-1", &["10.99.0.5"], "pw-one").unwrap();
    assert!(
        issuer(&first.serving.cert, dir.path()).contains("capstan-kubelet-serving-ca"),
        "{}",
        issuer(&first.serving.cert, dir.path())
    );
    assert!(issuer(&first.client.cert, dir.path()).contains("capstan-ca"));
    let password = kubectl_ok(
        "1.33",
        &kc,
        &[
            "get",
            "secret",
            "-n",
            "kube-system",
            "worker-1.node-password.capstan",
            "-o",
            "jsonpath={.type}",
        ],
    );
    assert_eq!(password, "capstan.io/node-password");
    // The same machine joins again; another machine with the name does not.
    try_join(&server, token, "worker-1", &["10.99.0.5"], "pw-one").unwrap();
    let stolen = refusal(try_join(
        &server,
        token,
        "worker-1",
        &["10.99.0.6"],
        "pw-two",
    ));
    assert!(
        stolen.contains("403") && stolen.contains("node password rejected"),
        "{stolen}"
    );

    // Nobody gets a certificate naming the API server.
    for name in [
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "kubernetes",
        "10.43.0.1",
    ] {
        let refused = refusal(try_join(&server, token, "worker-2", &[name], "pw"));
        assert!(
            refused.contains("403") && refused.contains("it names the API server"),
            "{name}: {refused}"
        );
    }

    // A Node that exists without a password on record (the server's own, say) cannot be
    // joined as.
    let node = |name: &str| {
        let output = kubectl_stdin(
            "1.33",
            &kc,
            &["apply", "-f", "-"],
            &format!(r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}"}}}}"#),
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    node("existing");
    let taken = refusal(try_join(&server, token, "existing", &[], "pw"));
    assert!(taken.contains("already exists"), "{taken}");

    // Deleting the Node releases its name (the node-password controller removes the Secret).
    node("worker-1");
    // The controller releases a young password only for a Node it saw: let a pass see it.
    std::thread::sleep(std::time::Duration::from_secs(6));
    kubectl_ok("1.33", &kc, &["delete", "node", "worker-1"]);
    eventually("worker-1's password to be released", || {
        try_join(&server, token, "worker-1", &[], "pw-new").ok()
    });

    // A bootstrap token joins, and authenticates as upstream's bootstrap user.
    let bootstrap = capstan(&["token", "create", "--ttl", "1h"], dir.path());
    let (_, credentials) = bootstrap.split_once("::").unwrap();
    let (id, _) = credentials.split_once('.').unwrap();
    assert!(
        bootstrap.starts_with("K10") && credentials.len() == 23,
        "{bootstrap}"
    );
    try_join(&server, &bootstrap, "worker-3", &[], "pw-three").unwrap();
    let whoami = Command::new("curl")
        .args(["-sk", "-X", "POST", "-H"])
        .arg(format!("Authorization: Bearer {credentials}"))
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#)
        .arg(server.url("/apis/authentication.k8s.io/v1/selfsubjectreviews"))
        .output()
        .unwrap();
    let review: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"],
        format!("system:bootstrap:{id}"),
        "{review}"
    );
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        serde_json::json!([
            "system:bootstrappers",
            "system:bootstrappers:capstan:default-node-token",
            "system:authenticated"
        ])
    );
    // Once expired it neither authenticates nor joins, and the token cleaner deletes it.
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "patch",
            "secret",
            "-n",
            "kube-system",
            &format!("bootstrap-token-{id}"),
            "-p",
            r#"{"stringData":{"expiration":"2020-01-01T00:00:00Z"}}"#,
        ],
    );
    let expired = refusal(try_join(&server, &bootstrap, "worker-4", &[], "pw"));
    assert!(expired.contains("401"), "{expired}");
    // A token that authenticated is taken at its word for 10 s, as upstream's token cache.
    eventually("the expired bootstrap token refused", || {
        let status = Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {credentials}"))
            .arg(server.url("/api"))
            .output()
            .unwrap();
        (String::from_utf8_lossy(&status.stdout) == "401").then_some(())
    });
    eventually("the expired bootstrap token to be deleted", || {
        let output = kubectl(
            "1.33",
            &kc,
            &[
                "get",
                "secret",
                "-n",
                "kube-system",
                &format!("bootstrap-token-{id}"),
            ],
        );
        (!output.status.success()).then_some(())
    });

    // A rotated token works at once; the old one no longer does.
    let rotated = capstan(&["token", "rotate"], dir.path());
    assert_ne!(rotated, token);
    let old = refusal(try_join(&server, token, "worker-5", &[], "pw"));
    assert!(old.contains("401"), "{old}");
    try_join(&server, &rotated, "worker-5", &[], "pw").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("token"))
            .unwrap()
            .trim(),
        rotated
    );

    // TLS 1.1 is refused, TLS 1.2 served.
    assert!(handshake(&server, "-tls1_2"));
    assert!(!handshake(&server, "-tls1_1"));
    server.stop();
}

#[test]
fn tls_13_only_refuses_tls_12() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        free_port(),
        &["--tls-min-version", "VersionTLS13"],
    );
    assert!(!handshake(&server, "-tls1_2"));
    assert!(handshake(&server, "-tls1_3"));
    // Bad settings stop the server with upstream's message.
    let output = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "server",
            "--disable-agent",
            "--tls-min-version",
            "VersionTLS13",
        ])
        .args([
            "--tls-cipher-suites",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("bad"))
        .output()
        .unwrap();
    assert_refused(
        &output,
        &["cipher suites may not be specified when --tls-min-version is 'VersionTLS13'"],
    );
    server.stop();
}
