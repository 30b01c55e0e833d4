//! End to end: service account tokens with stock kubectl against the real `capstan server`.
//! `kubectl create token` (with a duration, an audience, a bound pod) issues them through the
//! `serviceaccounts/token` subresource; a kubeconfig holding only such a token authenticates as
//! the service account (`kubectl auth whoami`, and RBAC's Forbidden naming it until a binding
//! lets it read); tokens for another audience, or bound to a pod that is gone, are refused; new
//! pods get the projected `kube-api-access-*` volume.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A kubeconfig that authenticates with `token` alone (no client certificate).
fn token_kubeconfig(dir: &Path, server: &Server, name: &str, token: &str) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    let ca = dir.join("data").join("tls").join("ca.crt");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
         contexts:\n- name: {name}\n  context: {{cluster: capstan, user: {name}}}\n\
         current-context: {name}\n",
        server.url(""),
        ca.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn service_account_tokens_with_stock_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), free_port());
    let admin = server.kubeconfig();
    // The service account controller makes `default` in every namespace.
    eventually("the default service account", || {
        kubectl_any("1.33", &admin, &["get", "serviceaccount", "default"])
            .status
            .success()
            .then_some(())
    });
    let sa_uid = kubectl_ok(
        "1.33",
        &admin,
        &[
            "get",
            "serviceaccount",
            "default",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );

    for version in KUBECTL_VERSIONS {
        let tag = version.replace('.', "-");
        let token = kubectl_ok(version, &admin, &["create", "token", "default"])
            .trim()
            .to_owned();
        assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
        let as_sa = token_kubeconfig(dir.path(), &server, &format!("sa-{tag}"), &token);

        // Authenticated as the service account, which may not list pods (yet).
        let denied = kubectl_any(version, &as_sa, &["get", "pods"]);
        assert!(!denied.status.success());
        assert!(
            stderr(&denied).contains(
                "pods is forbidden: User \"system:serviceaccount:default:default\" cannot list \
                 resource \"pods\" in API group \"\" in the namespace \"default\""
            ),
            "kubectl {version}: {}",
            stderr(&denied)
        );
        if version != "1.27" {
            let me: Value = serde_json::from_str(&kubectl_ok(
                version,
                &as_sa,
                &["auth", "whoami", "-o", "json"],
            ))
            .unwrap();
            let info = &me["status"]["userInfo"];
            assert_eq!(info["username"], "system:serviceaccount:default:default");
            assert_eq!(info["uid"], sa_uid.as_str());
            assert_eq!(
                info["groups"],
                serde_json::json!([
                    "system:serviceaccounts",
                    "system:serviceaccounts:default",
                    "system:authenticated"
                ]),
                "{me}"
            );
        }

        // Too short a duration is refused as upstream refuses it.
        let short = kubectl_any(
            version,
            &admin,
            &["create", "token", "default", "--duration", "5m"],
        );
        assert!(!short.status.success());
        assert!(
            stderr(&short).contains(
                "spec.expirationSeconds: Invalid value: 300: may not specify a duration less \
                 than 10 minutes"
            ),
            "kubectl {version}: {}",
            stderr(&short)
        );

        // A token for another audience does not open the API.
        let vault = kubectl_ok(
            version,
            &admin,
            &[
                "create",
                "token",
                "default",
                "--audience",
                "vault",
                "--duration",
                "10m",
            ],
        );
        let as_vault = token_kubeconfig(dir.path(), &server, &format!("vault-{tag}"), vault.trim());
        let refused = kubectl_any(version, &as_vault, &["get", "pods"]);
        assert!(!refused.status.success());
        assert!(
            stderr(&refused).contains("Unauthorized"),
            "kubectl {version}: {}",
            stderr(&refused)
        );

        // New pods mount the projected token volume; a token bound to one dies with it.
        let pod = format!("web-{tag}");
        kubectl_ok(
            version,
            &admin,
            &[
                "run",
                &pod,
                "--image",
                "registry.invalid/web:1",
                "--restart",
                "Never",
            ],
        );
        let volume: Value = serde_json::from_str(&kubectl_ok(
            version,
            &admin,
            &["get", "pod", &pod, "-o", "jsonpath={.spec.volumes[0]}"],
        ))
        .unwrap();
        assert!(
            volume["name"]
                .as_str()
                .unwrap()
                .starts_with("kube-api-access-"),
            "{volume}"
        );
        assert_eq!(
            volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        let mount_path = kubectl_ok(
            version,
            &admin,
            &[
                "get",
                "pod",
                &pod,
                "-o",
                "jsonpath={.spec.containers[0].volumeMounts[0].mountPath}",
            ],
        );
        assert_eq!(mount_path, "/var/run/secrets/kubernetes.io/serviceaccount");
        let bound = kubectl_ok(
            version,
            &admin,
            &[
                "create",
                "token",
                "default",
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                &pod,
            ],
        );
        let as_pod = token_kubeconfig(dir.path(), &server, &format!("pod-{tag}"), bound.trim());
        let denied = kubectl_any(version, &as_pod, &["get", "pods"]);
        assert!(
            stderr(&denied).contains("forbidden"),
            "kubectl {version}: {}",
            stderr(&denied)
        );
        kubectl_ok(version, &admin, &["delete", "pod", &pod, "--wait"]);
        eventually("the bound token refused", || {
            let output = kubectl_any(version, &as_pod, &["get", "pods"]);
            stderr(&output).contains("Unauthorized").then_some(())
        });
    }

    // A binding lets the service account read pods with the token it already holds.
    let token = kubectl_ok("1.33", &admin, &["create", "token", "default"]);
    let as_sa = token_kubeconfig(dir.path(), &server, "reader", token.trim());
    kubectl_ok(
        "1.33",
        &admin,
        &[
            "create",
            "rolebinding",
            "sa-view",
            "--clusterrole",
            "view",
            "--serviceaccount",
            "default:default",
        ],
    );
    eventually("the service account reading pods", || {
        kubectl_any("1.33", &as_sa, &["get", "pods"])
            .status
            .success()
            .then_some(())
    });
    // Deleting the account invalidates its tokens.
    kubectl_ok("1.33", &admin, &["delete", "serviceaccount", "default"]);
    eventually("the deleted account's token refused", || {
        let output = kubectl_any("1.33", &as_sa, &["get", "pods"]);
        stderr(&output).contains("Unauthorized").then_some(())
    });
    server.stop();
}

/// Issuer discovery: a service account reads the issuer's OpenID metadata and key set (an
/// anonymous client does not), and the published key is the one tokens name.
#[test]
fn service_accounts_discover_the_issuer_and_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), free_port());
    let admin = server.kubeconfig();
    eventually("the default service account", || {
        kubectl_any("1.33", &admin, &["get", "serviceaccount", "default"])
            .status
            .success()
            .then_some(())
    });
    let token = kubectl_ok("1.33", &admin, &["create", "token", "default"])
        .trim()
        .to_owned();
    let sa = token_kubeconfig(dir.path(), &server, "sa", &token);
    let config: Value = serde_json::from_str(&kubectl_ok(
        "1.33",
        &sa,
        &["get", "--raw", "/.well-known/openid-configuration"],
    ))
    .unwrap();
    // The keys' address is the server's advertised one (made up in tests), at its port.
    let port = server.url("").rsplit(':').next().unwrap().to_owned();
    let jwks_uri = config["jwks_uri"].as_str().unwrap_or_default().to_owned();
    assert!(
        jwks_uri.starts_with("https://") && jwks_uri.ends_with(&format!(":{port}/openid/v1/jwks")),
        "{jwks_uri}"
    );
    assert_eq!(
        config,
        serde_json::json!({
            "issuer": "https://kubernetes.default.svc.cluster.local",
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    );
    let keys: Value = serde_json::from_str(&kubectl_ok(
        "1.33",
        &sa,
        &["get", "--raw", "/openid/v1/jwks"],
    ))
    .unwrap();
    use base64::Engine as _;
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(keys["keys"][0]["kid"], header["kid"]);
    assert_eq!(keys["keys"][0]["kty"], "EC");
    assert_eq!(keys["keys"][0]["crv"], "P-256");
    // Anonymous clients are told to authenticate.
    let anonymous = std::process::Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(server.url("/openid/v1/jwks"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&anonymous.stdout), "401");
}
