//! End to end: aggregated discovery as stock clients use it. kubectl 1.33 discovers through
//! `apidiscovery.k8s.io/v2` in two requests and sees what kubectl 1.27 sees through the legacy
//! documents; kube-rs finds the same API through either form.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::*;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery};

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Runs kubectl with `-v=8` and its own fresh discovery cache; its output and its log.
fn kubectl_logged(
    version: &str,
    kubeconfig: &Path,
    cache: &Path,
    args: &[&str],
) -> (String, String) {
    let cache = format!("--cache-dir={}", cache.display());
    let args: Vec<&str> = [cache.as_str(), "-v=8"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let output = kubectl_any(version, kubeconfig, &args);
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "kubectl {version} {args:?}:\n{log}"
    );
    (String::from_utf8_lossy(&output.stdout).into_owned(), log)
}

/// What kubectl 1.30+ logged at `-v=8` about its request to `url`: the request and the
/// response, up to its next request.
fn exchange<'a>(log: &'a str, url: &str) -> &'a str {
    let needle = format!("verb=\"GET\" url=\"{url}\"");
    let start = log
        .find(&needle)
        .unwrap_or_else(|| panic!("no GET {url} in:\n{log}"));
    let rest = &log[start + needle.len()..];
    &rest[..rest.find("\"Request\"").unwrap_or(rest.len())]
}

/// Asserts that kubectl 1.33 discovered through the aggregated documents alone.
fn assert_aggregated(log: &str, server: &Server) {
    for path in ["/api", "/apis"] {
        let exchange = exchange(log, &server.url(&format!("{path}?timeout=32s")));
        assert!(
            exchange.contains(&format!("Accept: {AGGREGATED},"))
                && exchange.contains("\"Response\" status=\"200 OK\"")
                && exchange.contains(&format!("Content-Type: {AGGREGATED}"))
                && exchange.contains("Etag: \""),
            "{path}:{exchange}"
        );
    }
    for legacy in ["/api/v1?timeout=32s", "/apis/apps/v1?timeout=32s"] {
        assert!(!log.contains(&server.url(legacy)), "asked {legacy}:\n{log}");
    }
}

/// Every resource kube-rs found, with its capabilities, in a comparable form.
fn summary(discovery: &Discovery) -> Vec<String> {
    let line = |ar: &ApiResource, caps: &ApiCapabilities| {
        format!(
            "{} {} {} {:?} {:?}",
            ar.api_version, ar.plural, ar.kind, caps.scope, caps.operations
        )
    };
    let mut lines = Vec::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                lines.push(line(&ar, &caps));
                for (sub, sub_caps) in &caps.subresources {
                    lines.push(format!("  {}: {}", ar.plural, line(sub, sub_caps)));
                }
            }
        }
    }
    lines.sort();
    lines
}

async fn kube_rs_discoveries(kubeconfig: &Path) -> (Vec<String>, Vec<String>) {
    let client = common::kube_client(kubeconfig).await;
    let legacy = Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(client).run_aggregated().await.unwrap();
    (summary(&legacy), summary(&aggregated))
}

#[test]
fn kubectl_and_kube_rs_discover_through_aggregated_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), free_port());
    let kubeconfig = server.kubeconfig();
    let cache = |name: &str| dir.path().join(name);

    // kubectl 1.33: two requests, the aggregated documents, and the same table as the legacy
    // documents give kubectl 1.27 (which asks for v2beta1, no longer served, then plain JSON).
    let (aggregated, log) = kubectl_logged(
        "1.33",
        &kubeconfig,
        &cache("133"),
        &["api-resources", "-o", "wide"],
    );
    assert_aggregated(&log, &server);
    let (legacy, log) = kubectl_logged(
        "1.27",
        &kubeconfig,
        &cache("127"),
        &["api-resources", "-o", "wide"],
    );
    assert!(
        log.contains(&server.url("/apis/apps/v1?timeout=32s")),
        "{log}"
    );
    assert_eq!(aggregated, legacy);
    for row in [
        "deployments deploy apps/v1 true Deployment create,delete,deletecollection,get,list,patch,update,watch all",
        "namespaces ns v1 false Namespace create,delete,get,list,patch,update,watch",
    ] {
        let rows: Vec<String> = aggregated
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        assert!(
            rows.iter().any(|r| r == row),
            "no {row:?} in:\n{aggregated}"
        );
    }

    // Resource commands map kinds and short names through it.
    kubectl_ok(
        "1.33",
        &kubeconfig,
        &[
            "create",
            "deployment",
            "web",
            "--image=registry.local/web:1",
        ],
    );
    let (deployments, log) = kubectl_logged(
        "1.33",
        &kubeconfig,
        &cache("133-get"),
        &["get", "deploy", "-o", "name"],
    );
    assert_aggregated(&log, &server);
    assert_eq!(deployments.trim(), "deployment.apps/web");

    // kube-rs reads both forms into the same resources and capabilities.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (legacy, aggregated) = runtime.block_on(kube_rs_discoveries(&kubeconfig));
    assert!(
        legacy
            .iter()
            .any(|l| l.starts_with("apps/v1 deployments Deployment Namespaced"))
    );
    assert_eq!(legacy, aggregated);
    server.stop();
}
