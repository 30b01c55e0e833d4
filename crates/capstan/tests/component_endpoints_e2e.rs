//! End to end: the HTTPS endpoints of `capstan scheduler` and `capstan controller-manager` run
//! on their own against a real server, as kube-scheduler's and kube-controller-manager's secure
//! ports. `/healthz` answers anyone; `/metrics` answers a client certificate of the cluster's
//! client CA (the admin's) and a ServiceAccount token the API server's RBAC lets `get` the path,
//! in Prometheus' text format (checked with Prometheus' own parser) with the component's metric
//! families; it refuses an anonymous caller and a token without that permission with 403 and a
//! token the API server does not know with 401, in upstream's `Status` shape. `/debug/pprof/`
//! (`--profiling`) answers the admin and refuses the token allowed `/metrics` only.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::prometheus::parse_metrics;
use common::{Server, curl_with, eventually, free_port, kubectl_ok, kubectl_stdin};
use serde_json::Value;

/// A standalone component; killed when dropped.
struct Component(Child);

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(command: &str, kubeconfig: &Path, port: u16) -> Component {
    Component(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg(command)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--leader-elect=false", "--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the component"),
    )
}

/// `curl` of `https://127.0.0.1:<port><path>` with `extra` flags: (status code, body).
fn get(port: u16, path: &str, extra: &[&str]) -> (u16, String) {
    let url = format!("https://127.0.0.1:{port}{path}");
    let mut args = vec!["-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    let out = curl_with(&url, &args).expect("an answer");
    let (body, code) = out.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_owned())
}

fn token(kubeconfig: &Path, account: &str) -> String {
    kubectl_ok(
        "1.33",
        kubeconfig,
        &["create", "token", account, "-n", "default"],
    )
    .trim()
    .to_owned()
}

#[test]
fn standalone_components_serve_metrics_to_whom_the_api_server_allows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), free_port(), &["--disable-scheduler"]);
    let kc = server.kubeconfig();
    let tls = dir.path().join("tls");
    let (cert, key) = (tls.join("admin.crt"), tls.join("admin.key"));
    let admin = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];

    // A scraper allowed /metrics by RBAC, and an account with no such grant.
    let applied = kubectl_stdin(
        "1.33",
        &kc,
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: stranger, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: metrics-scraper}
rules:
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: metrics-scraper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: metrics-scraper}
subjects:
- {kind: ServiceAccount, name: scraper, namespace: default}
"#,
    );
    assert!(applied.status.success(), "{applied:?}");
    let scraper = format!("Authorization: Bearer {}", token(&kc, "scraper"));
    let stranger = format!("Authorization: Bearer {}", token(&kc, "stranger"));

    for (command, family) in [
        ("scheduler", "scheduler_pending_pods"),
        ("controller-manager", "workqueue_adds_total"),
    ] {
        let port = free_port();
        let _component = start(command, &kc, port);
        eventually(&format!("{command} serving /healthz"), || {
            let url = format!("https://127.0.0.1:{port}/healthz");
            curl_with(&url, &[]).filter(|body| body == "ok")
        });

        // The admin's client certificate and the scraper's token get the metrics, in the text
        // format by default, with the component's own families.
        for credentials in [&admin[..], &["-H", &scraper][..]] {
            let (code, body) = get(port, "/metrics", credentials);
            assert_eq!(code, 200, "{command} /metrics with {credentials:?}: {body}");
            let samples = parse_metrics(&body, "text");
            assert!(
                samples
                    .iter()
                    .any(|s| s.family == family || s.name == family),
                "{command} exports no {family}:\n{body}"
            );
        }
        // OpenMetrics when asked for.
        let (code, body) = get(
            port,
            "/metrics",
            &[&admin[..], &["-H", "Accept: application/openmetrics-text"]].concat(),
        );
        assert_eq!(code, 200);
        assert!(body.ends_with("# EOF\n"), "{body}");

        // Anonymous and unauthorized callers are refused as upstream refuses them.
        for (credentials, user) in [
            (&[][..], "system:anonymous"),
            (
                &["-H", &stranger][..],
                "system:serviceaccount:default:stranger",
            ),
        ] {
            let (code, body) = get(port, "/metrics", credentials);
            assert_eq!(code, 403, "{command}: {body}");
            let status: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["reason"], "Forbidden");
            assert_eq!(
                status["message"],
                format!("forbidden: User \"{user}\" cannot get path \"/metrics\"")
            );
        }
        let (code, body) = get(
            port,
            "/metrics",
            &["-H", "Authorization: Bearer not-a-token"],
        );
        assert_eq!(code, 401, "{command}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["reason"],
            "Unauthorized"
        );
        // Health checks need no credentials at all.
        assert_eq!(get(port, "/readyz", &[]), (200, "ok".to_owned()));

        // Profiles (`--profiling`, on by default): the admin reads the index; the scraper,
        // allowed /metrics only, is refused the path.
        let (code, body) = get(port, "/debug/pprof/", &admin);
        assert_eq!(code, 200, "{command}: {body}");
        assert!(body.contains("href='heap?debug=1'"), "{command}: {body}");
        let (code, body) = get(port, "/debug/pprof/heap?debug=1", &admin);
        assert_eq!(code, 200, "{command}: {body}");
        assert!(body.starts_with("heap profile: "), "{command}: {body}");
        let (code, body) = get(port, "/debug/pprof/heap", &["-H", &scraper]);
        assert_eq!(code, 403, "{command}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["message"],
            "forbidden: User \"system:serviceaccount:default:scraper\" cannot get \
             path \"/debug/pprof/heap\""
        );
    }
    server.stop();
}
