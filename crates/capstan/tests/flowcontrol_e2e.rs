//! End to end: API Priority and Fairness and RBAC against the real `capstan server`. Two token
//! users, each given only what RBAC roles allow: one floods LISTs, the other writes. A
//! FlowSchema and PriorityLevelConfiguration written with stock kubectl send the flooder to a
//! small level of its own; the flood gets 429s while every write of the other identity goes
//! through (its latencies are printed; their budget lives in BENCHMARKS.md, not here). Stock
//! kubectl lists the bootstrap configuration with upstream's columns, and answers `auth can-i`
//! and `get` for each user through impersonation (`--as`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use common::*;

const VERSIONS: [&str; 2] = ["1.27", "1.33"];
const NS: &str = "flood";
/// How many clients flood at once.
const FLOODERS: usize = 24;
/// How many objects the other identity writes meanwhile.
const WRITES: usize = 50;

/// A client that presents `token` (and skips TLS verification, as the test server's CA is not
/// at hand here).
async fn token_client(server: &Server, dir: &Path, token: &str) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = dir.join(format!("{token}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        server.url("")
    );
    std::fs::write(&path, text).unwrap();
    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn apply(version: &str, kubeconfig: &Path, dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    kubectl_ok(
        version,
        kubeconfig,
        &["apply", "-f", path.to_str().unwrap()],
    );
}

/// The bootstrap configuration as stock kubectl lists it.
fn tables(version: &str, kubeconfig: &Path) {
    let table = kubectl_ok(version, kubeconfig, &["get", "flowschemas"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "AGE",
            "MISSINGPL"
        ]
    );
    let row = |name: &str| -> Vec<String> {
        table
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|cells| cells[0] == name)
            .unwrap_or_else(|| panic!("{name} in {table}"))
    };
    assert_eq!(row("exempt")[1..4], ["exempt", "1", "<none>"]);
    assert_eq!(
        row("global-default")[1..4],
        ["global-default", "9900", "ByUser"]
    );
    assert_eq!(row("global-default")[5], "False");
    let table = kubectl_ok(version, kubeconfig, &["get", "prioritylevelconfigurations"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "NOMINALCONCURRENCYSHARES",
            "QUEUES",
            "HANDSIZE",
            "QUEUELENGTHLIMIT",
            "AGE"
        ]
    );
    let workload = table
        .lines()
        .find(|l| l.starts_with("workload-low "))
        .unwrap();
    let cells: Vec<&str> = workload.split_whitespace().collect();
    assert_eq!(cells[1..6], ["Limited", "100", "128", "6", "50"]);
    let exempt = table.lines().find(|l| l.starts_with("exempt ")).unwrap();
    let cells: Vec<&str> = exempt.split_whitespace().collect();
    assert_eq!(
        cells[1..6],
        ["Exempt", "<none>", "<none>", "<none>", "<none>"]
    );
}

#[test]
fn a_flooding_user_gets_429s_while_another_keeps_writing() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "flood-token,flooder,10,\"flooders\"\nwrite-token,writer,11,\"writers\"\n",
    )
    .unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--token-auth-file", tokens.to_str().unwrap()],
    );
    let kubeconfig = server.kubeconfig();
    for version in VERSIONS {
        tables(version, &kubeconfig);
    }
    let admin = |args: &[&str]| kubectl_ok("1.33", &kubeconfig, args);
    admin(&["create", "namespace", NS]);
    // RBAC: the flooder may list config maps, the writer may create them; nothing more.
    admin(&[
        "create",
        "clusterrole",
        "cm-lister",
        "--verb=list",
        "--resource=configmaps",
    ]);
    admin(&[
        "create",
        "clusterrolebinding",
        "flooders-list",
        "--clusterrole=cm-lister",
        "--group=flooders",
    ]);
    admin(&[
        "-n",
        NS,
        "create",
        "role",
        "cm-writer",
        "--verb=create",
        "--resource=configmaps",
    ]);
    admin(&[
        "-n",
        NS,
        "create",
        "rolebinding",
        "writer-writes",
        "--role=cm-writer",
        "--user=writer",
    ]);
    // The bootstrap `view` and `edit` roles, bound in the namespace.
    admin(&[
        "-n",
        NS,
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=viewer",
    ]);
    admin(&[
        "-n",
        NS,
        "create",
        "rolebinding",
        "editor",
        "--clusterrole=edit",
        "--user=editor",
    ]);
    // What RBAC now allows, asked as each user through impersonation (`--as`).
    for version in VERSIONS {
        let can = |args: &[&str]| {
            let mut all = vec!["auth", "can-i"];
            all.extend_from_slice(args);
            let output = kubectl_any(version, &kubeconfig, &all);
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        };
        assert_eq!(
            can(&[
                "list",
                "configmaps",
                "-n",
                NS,
                "--as=flooder",
                "--as-group=flooders"
            ]),
            "yes"
        );
        assert_eq!(
            can(&[
                "create",
                "configmaps",
                "-n",
                NS,
                "--as=flooder",
                "--as-group=flooders"
            ]),
            "no"
        );
        assert_eq!(
            can(&["create", "configmaps", "-n", NS, "--as=writer"]),
            "yes"
        );
        assert_eq!(
            can(&["create", "configmaps", "-n", "default", "--as=writer"]),
            "no"
        );
        for (verb, resource, user, answer) in [
            ("list", "deployments.apps", "viewer", "yes"),
            ("create", "deployments.apps", "viewer", "no"),
            ("get", "secrets", "viewer", "no"),
            ("create", "deployments.apps", "editor", "yes"),
            ("create", "roles.rbac.authorization.k8s.io", "editor", "no"),
        ] {
            let who = format!("--as={user}");
            assert_eq!(
                can(&[verb, resource, "-n", NS, &who]),
                answer,
                "{user} {verb} {resource}"
            );
        }
        let denied = kubectl_any(
            version,
            &kubeconfig,
            &["-n", NS, "get", "configmaps", "--as=writer"],
        );
        assert_refused(
            &denied,
            &[
                "User \"writer\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"flood\"",
            ],
        );
    }
    // A level of three seats and one short queue, and a schema sending the flooders there.
    apply(
        "1.33",
        &kubeconfig,
        dir.path(),
        "flood.yaml",
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata:\n  name: flood\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1\n    limitResponse:\n      type: Queue\n      queuing: {queues: 1, handSize: 1, queueLengthLimit: 1}\n---\napiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata:\n  name: flooders\nspec:\n  priorityLevelConfiguration: {name: flood}\n  matchingPrecedence: 500\n  distinguisherMethod: {type: ByUser}\n  rules:\n  - subjects: [{kind: Group, group: {name: flooders}}]\n    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}]\n",
    );
    let schema: serde_json::Value =
        serde_json::from_str(&admin(&["get", "flowschema", "flooders", "-o", "json"])).unwrap();
    let level: serde_json::Value = serde_json::from_str(&admin(&[
        "get",
        "prioritylevelconfiguration",
        "flood",
        "-o",
        "json",
    ]))
    .unwrap();
    // The classifier picks up the new schema within a moment.
    std::thread::sleep(Duration::from_millis(600));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Something sizeable to list (about 1 MB), so that answers take a while to write.
    runtime.block_on(async {
        let admin: Api<ConfigMap> = Api::namespaced(common::kube_client(&kubeconfig).await, NS);
        let filler = "x".repeat(4096);
        for i in 0..250 {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": filler},
            }))
            .unwrap();
            admin.create(&PostParams::default(), &cm).await.unwrap();
        }
    });

    // The flooder's requests name its schema and level.
    let header = "Authorization: Bearer flood-token";
    let url = server.url(&format!("/api/v1/namespaces/{NS}/configmaps?limit=1"));
    let head = curl_with(&url, &["-H", header, "-D", "-", "-o", "/dev/null"]).unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains(&format!(
            "x-kubernetes-pf-flowschema-uid: {}",
            schema["metadata"]["uid"].as_str().unwrap()
        )),
        "{head}"
    );
    assert!(
        head.contains(&format!(
            "x-kubernetes-pf-prioritylevel-uid: {}",
            level["metadata"]["uid"].as_str().unwrap()
        )),
        "{head}"
    );
    // RBAC holds: the flooder may not write, the writer may not list.
    let body = curl_with(
        &server.url(&format!("/api/v1/namespaces/{NS}/secrets")),
        &["-H", header],
    )
    .unwrap();
    assert!(body.contains("\"reason\":\"Forbidden\""), "{body}");

    // The flood: clients fetching the list as of one revision in a loop, a new curl each time.
    // Such reads go to the datastore while they hold their seat; lists from the watch cache
    // never wait, so on two cores they never hold more than two seats at once.
    let listed: serde_json::Value = serde_json::from_str(&admin(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{NS}/configmaps?limit=1"),
    ]))
    .unwrap();
    let revision = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let rejected = Arc::new(AtomicUsize::new(0));
    let url = server.url(&format!(
        "/api/v1/namespaces/{NS}/configmaps?resourceVersion={revision}&resourceVersionMatch=Exact"
    ));
    let flood: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (stop, ok, rejected, url) =
                (stop.clone(), ok.clone(), rejected.clone(), url.clone());
            std::thread::spawn(move || {
                let header = "Authorization: Bearer flood-token";
                while !stop.load(Ordering::Relaxed) {
                    let code = curl_with(
                        &url,
                        &["-H", header, "-o", "/dev/null", "-w", "%{http_code}"],
                    )
                    .unwrap_or_default();
                    match code.trim() {
                        "200" => ok.fetch_add(1, Ordering::Relaxed),
                        "429" => rejected.fetch_add(1, Ordering::Relaxed),
                        other => panic!("a flood request was answered {other:?}"),
                    };
                }
            })
        })
        .collect();
    let latencies = runtime.block_on(async {
        let writer = token_client(&server, dir.path(), "write-token").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let writes: Api<ConfigMap> = Api::namespaced(writer.clone(), NS);
        let mut latencies = Vec::new();
        for i in 0..WRITES {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("written-{i}")}, "data": {"i": i.to_string()},
            }))
            .unwrap();
            let started = Instant::now();
            writes
                .create(&PostParams::default(), &cm)
                .await
                .expect("every write of the other identity goes through");
            latencies.push(started.elapsed());
        }
        // The writer may not list: RBAC answers 403.
        match writes.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
            other => panic!("the writer listed: {:?}", other.map(|l| l.items.len())),
        }
        latencies
    });
    stop.store(true, Ordering::Relaxed);
    for thread in flood {
        thread.join().unwrap();
    }
    let (ok, rejected) = (ok.load(Ordering::Relaxed), rejected.load(Ordering::Relaxed));
    runtime.shutdown_timeout(Duration::from_secs(5));
    let mut sorted = latencies.clone();
    sorted.sort();
    let p99 = sorted[sorted.len() * 99 / 100 - 1];
    println!(
        "flood: {ok} lists served, {rejected} rejected; writer: {} creates, p50 {:?}, p99 {:?}",
        sorted.len(),
        sorted[sorted.len() / 2],
        p99
    );
    assert!(
        rejected > 0,
        "the flood was never turned away ({ok} served)"
    );
    assert!(ok > 0, "the flooder was still served within its level");
    server.stop();
}
