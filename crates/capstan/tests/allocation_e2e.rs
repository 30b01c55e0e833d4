//! Service allocation across several servers on one etcd: Services created at once through
//! three `capstan server` processes get distinct cluster IPs and node ports, each address an
//! IPAddress naming its Service; deleting them lets their addresses and ports go; the repair
//! loop releases an IPAddress whose Service is gone and restores one a Service lost. What a
//! user sees is checked with stock kubectl (1.32 and 1.33): `kubectl get ipaddresses`,
//! `kubectl get servicecidrs`, `kubectl api-resources`, and the errors for a taken address or
//! one outside the range.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Datastore, Server, assert_refused, free_port, kube_client, kubectl_any, kubectl_ok};
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const SERVICES: usize = 200;

fn get_json(version: &str, kc: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&kubectl_ok(version, kc, &args)).unwrap()
}

/// Polls `probe` until it holds, for up to `limit`.
fn within(limit: Duration, what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn services_made_at_once_across_three_servers_get_distinct_addresses_and_ports() {
    let etcd = Datastore::start("etcd");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut flags = etcd.flags();
    flags.extend(
        [
            "--disable-controller-manager",
            "--disable-scheduler",
            "--disable-metrics-server",
            "--allocation-repair-interval",
            "1s",
            "--allocation-leak-grace",
            "10s",
        ]
        .map(str::to_owned),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let servers: Vec<Server> = dirs
        .iter()
        .map(|dir| Server::start_with(dir.path(), free_port(), &flags))
        .collect();
    let kubeconfigs: Vec<_> = servers.iter().map(Server::kubeconfig).collect();
    let kc = &kubeconfigs[0];

    // The kinds are served, listed and printed as upstream's.
    let resources = kubectl_ok(
        "default",
        kc,
        &["api-resources", "--api-group=networking.k8s.io"],
    );
    for (plural, kind) in [
        ("ipaddresses", "IPAddress"),
        ("servicecidrs", "ServiceCIDR"),
    ] {
        let line = resources
            .lines()
            .find(|l| l.starts_with(plural))
            .unwrap_or_else(|| panic!("{plural} in {resources}"));
        assert!(
            line.contains("networking.k8s.io/v1") && line.contains(kind) && line.contains("false"),
            "{line}"
        );
    }
    let cidrs = kubectl_ok("1.33", &kubeconfigs[1], &["get", "servicecidrs"]);
    let mut lines = cidrs.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CIDRS", "AGE"], "{cidrs}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[..2], ["kubernetes", "10.43.0.0/16"], "{cidrs}");
    let cidr = get_json("default", kc, &["get", "servicecidr", "kubernetes"]);
    assert_eq!(cidr["status"]["conditions"][0]["type"], "Ready");

    // 200 Services at once, spread over the three servers, half of them NodePort.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for kc in &kubeconfigs {
            clients.push(kube::Api::<Service>::namespaced(
                kube_client(kc).await,
                "default",
            ));
        }
        let creates = (0..SERVICES).map(|i| {
            let api = clients[i % clients.len()].clone();
            async move {
                let type_ = if i % 2 == 0 { "ClusterIP" } else { "NodePort" };
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("svc-{i}")},
                    "spec": {"type": type_, "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]},
                }))
                .unwrap();
                api.create(&PostParams::default(), &svc)
                    .await
                    .unwrap_or_else(|e| panic!("create svc-{i}: {e}"))
            }
        });
        futures::future::join_all(creates).await;
    });
    eprintln!("{SERVICES} Services made in {:?}", started.elapsed());

    // Every Service of the cluster: ours, the kubernetes Service and the cluster DNS's.
    let services = get_json("default", kc, &["get", "services", "--all-namespaces"]);
    let services = services["items"].as_array().unwrap();
    assert_eq!(services.len(), SERVICES + 2, "with kubernetes and kube-dns");
    let mut ips = BTreeMap::new();
    let mut ports = BTreeSet::new();
    for svc in services {
        let name = svc["metadata"]["name"].as_str().unwrap().to_owned();
        let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
        assert!(ip.starts_with("10.43."), "{name}: {ip}");
        let namespace = svc["metadata"]["namespace"].as_str().unwrap().to_owned();
        assert!(
            ips.insert(ip.clone(), (namespace, name.clone())).is_none(),
            "{ip} handed out twice"
        );
        for port in svc["spec"]["ports"].as_array().unwrap() {
            if let Some(node_port) = port["nodePort"].as_u64() {
                assert!((30000..=32767).contains(&node_port));
                assert!(
                    ports.insert(node_port),
                    "node port {node_port} handed out twice"
                );
            }
        }
    }
    assert_eq!(
        ports.len(),
        SERVICES,
        "two node ports for each of the 100 NodePort Services"
    );

    // Each address is an IPAddress naming its Service, whichever server made it.
    let addresses = get_json("default", &kubeconfigs[2], &["get", "ipaddresses"]);
    let addresses: BTreeMap<String, Value> = addresses["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["metadata"]["name"].as_str().unwrap().to_owned(),
                a.clone(),
            )
        })
        .collect();
    assert_eq!(addresses.len(), ips.len());
    for (ip, (namespace, name)) in &ips {
        let address = &addresses[ip];
        assert_eq!(address["spec"]["parentRef"]["resource"], "services");
        assert_eq!(
            &address["spec"]["parentRef"]["namespace"],
            namespace.as_str()
        );
        assert_eq!(&address["spec"]["parentRef"]["name"], name.as_str());
        assert_eq!(
            address["metadata"]["labels"]["ipaddress.kubernetes.io/managed-by"],
            "ipallocator.k8s.io"
        );
    }
    let (ip0, _) = ips.iter().find(|(_, (_, name))| name == "svc-0").unwrap();
    let table = kubectl_ok("default", kc, &["get", "ipaddress", ip0]);
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "PARENTREF"]
    );
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        [ip0.as_str(), "services/default/svc-0"]
    );

    // A taken address and one outside the range are refused as upstream words it.
    for version in ["default", "1.33"] {
        let taken = kubectl_any(
            version,
            &kubeconfigs[1],
            &[
                "create",
                "service",
                "clusterip",
                "clash",
                "--tcp=80",
                "--clusterip",
                ip0,
            ],
        );
        assert_refused(
            &taken,
            &[&format!(
                "Service \"clash\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip0}\"}}: failed to allocate IP {ip0}: provided IP is already allocated"
            )],
        );
        let outside = kubectl_any(
            version,
            &kubeconfigs[2],
            &[
                "create",
                "service",
                "clusterip",
                "outside",
                "--tcp=80",
                "--clusterip",
                "10.99.0.5",
            ],
        );
        let stderr = String::from_utf8_lossy(&outside.stderr);
        assert!(
            stderr.contains("failed to allocate IP 10.99.0.5: the provided network does not match the current range"),
            "{stderr}"
        );
    }
    // A hand-made IPAddress that is not a canonical IP is refused.
    let bad = common::kubectl_stdin(
        "default",
        kc,
        &["create", "-f", "-"],
        r#"{"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": {"name": "10.043.0.9"}, "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "x"}}}"#,
    );
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("metadata.name: Invalid value: \"10.043.0.9\": must not have leading 0s"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // Deleting the Services, again through all three servers, lets everything go.
    runtime.block_on(async {
        let mut clients = Vec::new();
        for kc in &kubeconfigs {
            clients.push(kube::Api::<Service>::namespaced(
                kube_client(kc).await,
                "default",
            ));
        }
        let deletes = (0..SERVICES).map(|i| {
            let api = clients[(i + 1) % clients.len()].clone();
            async move {
                api.delete(&format!("svc-{i}"), &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("delete svc-{i}: {e}"));
            }
        });
        futures::future::join_all(deletes).await;
    });
    let left = get_json("default", kc, &["get", "ipaddresses"]);
    let left: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        left,
        ["10.43.0.1", "10.43.0.10"],
        "only the addresses of kubernetes and kube-dns are held"
    );
    // Every freed node port can be asked for again.
    let reuse: Vec<String> = ports.iter().take(4).map(ToString::to_string).collect();
    let manifest = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "reuse"},
        "spec": {"type": "NodePort", "ports": reuse.iter().enumerate().map(|(i, p)| json!({
            "name": format!("p{i}"), "port": 80 + i, "nodePort": p.parse::<u16>().unwrap(),
        })).collect::<Vec<_>>()},
    });
    let made = common::kubectl_stdin(
        "1.33",
        &kubeconfigs[2],
        &["create", "-f", "-"],
        &manifest.to_string(),
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    // A leaked IPAddress (its Service gone) is released by the repair loop after the grace
    // period; a Service whose IPAddress was lost gets it back.
    let leaked = common::kubectl_stdin(
        "default",
        kc,
        &["create", "-f", "-"],
        r#"{"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
            "metadata": {"name": "10.43.200.7", "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io", "ipaddress.kubernetes.io/ip-family": "IPv4"}},
            "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "gone"}}}"#,
    );
    assert!(
        leaked.status.success(),
        "{}",
        String::from_utf8_lossy(&leaked.stderr)
    );
    let reuse_ip = get_json("default", kc, &["get", "service", "reuse"])["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    kubectl_ok("default", kc, &["delete", "ipaddress", &reuse_ip]);
    within(
        Duration::from_secs(10),
        "the lost IPAddress restored",
        || {
            kubectl_any("default", kc, &["get", "ipaddress", &reuse_ip])
                .status
                .success()
        },
    );
    let restored = get_json("default", kc, &["get", "ipaddress", &reuse_ip]);
    assert_eq!(restored["spec"]["parentRef"]["name"], "reuse");
    within(
        Duration::from_secs(25),
        "the leaked IPAddress released",
        || {
            !kubectl_any("default", kc, &["get", "ipaddress", "10.43.200.7"])
                .status
                .success()
        },
    );
    drop(servers);
}
