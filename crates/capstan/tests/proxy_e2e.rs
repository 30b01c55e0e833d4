//! End to end: the proxy subresources (`pods/proxy`, `services/proxy`, `nodes/proxy`), the
//! kubelet API's `/pods` and `/logs/` behind `nodes/proxy`, and `pods/log` over WebSocket, on
//! a real node with stock kubectl (`get --raw`, `kubectl proxy`) and Python (raw HTTPS for
//! redirects, methods and upgrades; `websocket-client` for the log). The node has its own
//! bridge and pod range so the suite runs beside the other node suites; the API server reaches
//! the pods' addresses over that bridge, as upstream's reaches them over the node's network.
//! There is no Endpoints controller yet, so the service's Endpoints are written by the test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::node::{IMAGE, NodeDir, flag_value, jsonpath, node_flags, wait_for, wait_ready};
use common::{Server, free_port, kubectl_any, kubectl_binary, kubectl_ok, kubectl_stdin_ok};

/// The pod network of this test's node.
const BRIDGE: &str = "capprox0";
const CLUSTER_CIDR: &str = "10.205.0.0/16";
const NODE: &str = "proxy-node";
const NS: &str = "/api/v1/namespaces/default";

/// The web pod's program: busybox httpd on 8080 serving an HTML page with a link, a text file
/// and a CGI script that echoes the method, URI and `X-Forwarded-Uri`; and on 8081 a server that
/// answers any request with `101` and then echoes everything it receives (the request too).
const WEB_SCRIPT: &str = r#"mkdir -p /www/cgi-bin
printf '<a href="/rewriteme">test</a>' > /www/index.html
printf 'plain text' > /www/plain.txt
printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nprintf "%%s %%s fwd=%%s" "$REQUEST_METHOD" "$REQUEST_URI" "$HTTP_X_FORWARDED_URI"\n' > /www/cgi-bin/echo
chmod +x /www/cgi-bin/echo
mkfifo /tmp/echo
(while true; do (printf 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n'; cat /tmp/echo) | nc -l -p 8081 > /tmp/echo; done) &
exec httpd -f -p 8080 -h /www"#;

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok("default", kc, &["apply", "-f", "-"], manifest);
}

/// `kubectl get --raw path` with kubectl `version`.
fn raw(version: &str, kc: &Path, path: &str) -> String {
    kubectl_ok(version, kc, &["get", "--raw", path])
}

#[test]
fn proxy_subresources_reach_pods_services_and_the_node() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let kubelet_port = flag_value(&flags, "--kubelet-port").to_string();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, free_port(), &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, NODE);

    let script = WEB_SCRIPT.replace('\n', "\n        ");
    apply(
        kc,
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {IMAGE}
    command:
    - sh
    - -c
    - |
        {script}
    ports:
    - {{containerPort: 8080, name: http}}
    - {{containerPort: 8081, name: echo}}
    readinessProbe:
      httpGet: {{path: /plain.txt, port: 8080}}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: talker}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["/bin/sh", "-c", "echo container is alive; sleep 10000"]
"#
        ),
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "wait",
            "pod/web",
            "pod/talker",
            "--for=condition=Ready",
            "--timeout=90s",
        ],
    );
    let ip = jsonpath(kc, &["get", "pod", "web"], "{.status.podIP}");
    assert!(!ip.is_empty());

    let link = |prefix: &str| format!(r#"<a href="{prefix}/rewriteme">test</a>"#);
    for version in ["1.27", "1.33"] {
        // pods/proxy: the first declared port by default, or the one named; the page's link
        // leads back through the proxy, byte for byte as the conformance spec expects.
        for name in ["web", "web:8080", "http:web:8080"] {
            let prefix = format!("{NS}/pods/{name}/proxy");
            assert_eq!(
                raw(version, kc, &format!("{prefix}/")),
                link(&prefix),
                "kubectl {version} {name}"
            );
        }
        // Without the slash, kubectl follows the redirect to it.
        assert_eq!(
            raw(version, kc, &format!("{NS}/pods/web/proxy")),
            link(&format!("{NS}/pods/web/proxy"))
        );
        // Paths, queries and the forwarded URI.
        assert_eq!(
            raw(version, kc, &format!("{NS}/pods/web/proxy/plain.txt?x=1")),
            "plain text"
        );
        assert_eq!(
            raw(
                version,
                kc,
                &format!("{NS}/pods/web/proxy/cgi-bin/echo/a/b?q=1&r=2")
            ),
            format!("GET /cgi-bin/echo/a/b?q=1&r=2 fwd={NS}/pods/web/proxy/cgi-bin/echo/a/b")
        );
        // A pod that answers nothing on a port: the service is unavailable.
        let refused = kubectl_any(
            version,
            kc,
            &["get", "--raw", &format!("{NS}/pods/web:9/proxy/")],
        );
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("ServiceUnavailable") || stderr.contains("503"),
            "{stderr}"
        );
    }

    // services/proxy through the Endpoints the endpoints controller keeps for the Service.
    apply(
        kc,
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
"#,
    );
    wait_for(
        "the web pod in its Service's endpoints",
        Duration::from_secs(60),
        || {
            let listed = jsonpath(
                kc,
                &["get", "endpoints", "web"],
                "{.subsets[*].addresses[*].ip}",
            );
            (listed.split_whitespace().any(|a| a == ip)).then_some(())
        },
    );
    for name in ["web:http", "http:web:http", "web:80"] {
        let prefix = format!("{NS}/services/{name}/proxy");
        assert_eq!(
            raw("1.33", kc, &format!("{prefix}/")),
            link(&prefix),
            "{name}"
        );
        assert_eq!(
            raw("1.27", kc, &format!("{prefix}/cgi-bin/echo?s=1")),
            format!("GET /cgi-bin/echo?s=1 fwd={prefix}/cgi-bin/echo")
        );
    }
    let unnamed = kubectl_any(
        "1.33",
        kc,
        &["get", "--raw", &format!("{NS}/services/web/proxy/")],
    );
    assert!(
        String::from_utf8_lossy(&unnamed.stderr).contains("no endpoints available for service"),
        "{}",
        String::from_utf8_lossy(&unnamed.stderr)
    );

    // nodes/proxy: the kubelet's /pods (by default and by its port) and /logs/.
    for name in [NODE.to_owned(), format!("{NODE}:{kubelet_port}")] {
        let listed = raw("1.33", kc, &format!("/api/v1/nodes/{name}/proxy/pods"));
        assert!(
            listed.ends_with("}\n") && listed.matches('\n').count() == 1,
            "{listed}"
        );
        let list: serde_json::Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["metadata"], serde_json::json!({}));
        let mut names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["talker", "web"], "{name}");
    }
    let logs = raw("1.27", kc, &format!("/api/v1/nodes/{NODE}/proxy/logs/"));
    assert!(
        logs.starts_with(
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n"
        ) && logs.ends_with("</pre>\n"),
        "{logs}"
    );

    // kubectl proxy in front of the API server: the links lead back through it too.
    let port = free_port();
    let mut proxy = Command::new(kubectl_binary("1.33"))
        .arg("--kubeconfig")
        .arg(kc)
        .args(["proxy", &format!("--port={port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(proxy.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("Starting to serve on"), "{first}");
    let page = wait_for("kubectl proxy", Duration::from_secs(20), || {
        common::curl_with(&format!("http://127.0.0.1:{port}{NS}/pods/web/proxy/"), &[])
            .filter(|body| !body.is_empty())
    });
    assert_eq!(page, link(&format!("{NS}/pods/web/proxy")));
    let _ = proxy.kill();
    let _ = proxy.wait();

    // Redirects, every method, HEAD, the log over WebSocket and an upgrade, from Python.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/proxy_e2e.py");
    let python = Command::new("python3")
        .arg(script)
        .arg(kc)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 (scripts/install-deps installs the kubernetes client)");
    let said = String::from_utf8_lossy(&python.stdout);
    assert!(
        python.status.success() && said.contains("ALL CHECKS PASSED"),
        "{said}{}",
        String::from_utf8_lossy(&python.stderr)
    );

    // The pods go before the server does (containers outlive it).
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "--all",
            "--grace-period=1",
            "--wait=true",
            "--timeout=90s",
        ],
    );
    wait_for("the pods to go", Duration::from_secs(60), || {
        let names = jsonpath(kc, &["get", "pods"], "{.items[*].metadata.name}");
        names.trim().is_empty().then_some(())
    });
    server.stop();
}
