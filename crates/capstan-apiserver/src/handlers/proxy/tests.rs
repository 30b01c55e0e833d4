//! The resolution of a proxy request's path and pod backends, without I/O; the whole chain is
//! driven in `chain_tests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

fn paths(path: &str) -> (String, String) {
    let info = RequestInfo::new("GET", path, "");
    subpath(&info, path)
}

#[test]
fn the_subpath_follows_upstreams_request_options() {
    let prefix = "/api/v1/namespaces/ns/pods/p/proxy";
    assert_eq!(paths(prefix).0, "");
    assert_eq!(paths(&format!("{prefix}/")).0, "/");
    assert_eq!(paths(&format!("{prefix}/a/b")).0, "/a/b");
    assert_eq!(paths(&format!("{prefix}/a/b/")).0, "/a/b/");
    assert_eq!(paths(&format!("{prefix}//a/./c/../b")).0, "/a/b");
    // Escapes are decoded before the path is split and joined, as Go's URL.Path is.
    assert_eq!(
        paths(&format!("{prefix}/results/wheezy_udp%40kubernetes.default")).0,
        "/results/wheezy_udp@kubernetes.default"
    );
    assert_eq!(paths(&format!("{prefix}/a%2Fb")).0, "/a/b");
    // Nodes have no namespace segments.
    assert_eq!(paths("/api/v1/nodes/n1:10250/proxy/logs/").0, "/logs/");
    assert_eq!(
        paths("/api/v1/nodes/n1/proxy/pods"),
        ("/pods".to_owned(), "/api/v1/nodes/n1/proxy/pods".to_owned())
    );
}

fn pod(ips: &[&str], ports: &[&[i64]]) -> Value {
    let containers: Vec<Value> = ports
        .iter()
        .enumerate()
        .map(|(i, ports)| {
            let ports: Vec<Value> = ports.iter().map(|p| json!({"containerPort": p})).collect();
            if ports.is_empty() {
                json!({"name": format!("c{i}")})
            } else {
                json!({"name": format!("c{i}"), "ports": ports})
            }
        })
        .collect();
    let ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": containers},
        "status": {"podIPs": ips}
    })
}

fn host(target: Result<Target, ApiError>) -> (String, String) {
    let target = target.unwrap();
    (target.scheme.to_owned(), target.host)
}

fn refusal(target: Result<Target, ApiError>) -> (u16, String) {
    let status = target.unwrap_err().status().to_json();
    (
        status["code"].as_u64().unwrap() as u16,
        status["message"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn pods_are_reached_at_their_first_ip_and_first_declared_port() {
    let web = pod(&["10.42.0.7", "fd00::7"], &[&[], &[80, 443], &[9376]]);
    assert_eq!(
        host(pod_target(&web, "", "")),
        ("http".into(), "10.42.0.7:80".into())
    );
    assert_eq!(
        host(pod_target(&web, "https", "443")),
        ("https".into(), "10.42.0.7:443".into())
    );
    // Port names are not resolved for pods: the name is the port, as upstream's.
    assert_eq!(host(pod_target(&web, "", "http")).1, "10.42.0.7:http");
    // No declared port: the scheme's.
    let bare = pod(&["fd00::9"], &[&[]]);
    assert_eq!(host(pod_target(&bare, "", "")).1, "[fd00::9]");
    assert_eq!(host(pod_target(&bare, "", "8080")).1, "[fd00::9]:8080");
}

#[test]
fn pods_without_a_reachable_address_are_refused() {
    let pending = pod(&[], &[&[80]]);
    let refused = (400, "address not allowed".to_owned());
    assert_eq!(refusal(pod_target(&pending, "", "")), refused);
    for ip in ["127.0.0.1", "169.254.169.254", "0.0.0.0", "::1"] {
        assert_eq!(
            refusal(pod_target(&pod(&[ip], &[&[80]]), "", "")),
            refused,
            "{ip}"
        );
    }
}
