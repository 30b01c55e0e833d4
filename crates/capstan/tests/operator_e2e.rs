//! End to end: the example operator of `examples/echo-operator` (kube-rs: a CRD derived from a
//! Rust type, a controller that owns children, a finalizer, status through the status
//! subresource, server-side apply) against the real `capstan server`. A user applies and edits
//! an Echo with stock kubectl; the operator makes its child ConfigMap, reports its status and
//! ledger entry, and on deletion cleans up through its finalizer before the Echo goes. A quota
//! on the custom kind's object count holds.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use echo_operator::{Echo, FINALIZER, LEDGER};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, CustomResourceExt};
use serde_json::Value;

use common::*;

fn get_json(kc: &Path, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = kubectl_any("1.33", kc, &all);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn the_example_operator_reconciles_and_cleans_up_through_its_finalizer() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    kubectl_ok("1.33", &kc, &["create", "namespace", "operator"]);

    // The operator's CRD, derived from its Rust type, applied as its author would.
    let client: Client = runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kc).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        Client::try_from(config).unwrap()
    });
    runtime.block_on(async {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.patch(
            "echoes.example.capstan.dev",
            &PatchParams::apply("echo-operator"),
            &Patch::Apply(&Echo::crd()),
        )
        .await
        .unwrap();
    });
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/echoes.example.capstan.dev",
        ],
    );
    // A quota on the custom kind's object count (`count/<plural>.<group>`) holds.
    kubectl_ok("1.33", &kc, &["create", "namespace", "limited"]);
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "-n",
            "limited",
            "create",
            "quota",
            "echoes",
            "--hard=count/echoes.example.capstan.dev=1",
        ],
    );
    let limited = "apiVersion: example.capstan.dev/v1\nkind: Echo\nmetadata: {name: NAME, namespace: limited}\nspec: {message: hi}\n";
    eventually("the quota's usage", || {
        let used = kubectl_ok(
            "1.33",
            &kc,
            &[
                "-n",
                "limited",
                "get",
                "quota",
                "echoes",
                "-o",
                "jsonpath={.status.used}",
            ],
        );
        (!used.is_empty()).then_some(())
    });
    let out = kubectl_stdin(
        "1.33",
        &kc,
        &["create", "-f", "-"],
        &limited.replace("NAME", "one"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_stdin(
        "1.33",
        &kc,
        &["create", "-f", "-"],
        &limited.replace("NAME", "two"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("echoes.example.capstan.dev \"two\" is forbidden: exceeded quota: echoes, requested: count/echoes.example.capstan.dev=1, used: count/echoes.example.capstan.dev=1, limited: count/echoes.example.capstan.dev=1"),
        "{err}"
    );
    let operator = runtime.spawn(echo_operator::run(client.clone(), "operator"));

    // A user's Echo: the child, the status, the finalizer and the ledger follow.
    let echo = "apiVersion: example.capstan.dev/v1\nkind: Echo\nmetadata: {name: hello, namespace: default}\nspec: {message: MESSAGE, copies: 2}\n";
    let out = kubectl_stdin(
        "1.27",
        &kc,
        &["apply", "-f", "-"],
        &echo.replace("MESSAGE", "hi"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = eventually("the child ConfigMap", || {
        get_json(&kc, &["configmap", "hello-echo"])
    });
    assert_eq!(child["data"]["message"], "hi\nhi");
    assert_eq!(child["metadata"]["ownerReferences"][0]["kind"], "Echo");
    let managers = kubectl_ok(
        "1.33",
        &kc,
        &[
            "get",
            "configmap",
            "hello-echo",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ],
    );
    assert_eq!(
        managers, "echo-operator",
        "the child is applied by the operator alone"
    );
    let status = eventually("the Echo's status", || {
        let echo = get_json(&kc, &["echo", "hello"])?;
        (echo["status"]["ready"] == true).then_some(echo)
    });
    assert_eq!(status["status"]["configMap"], "hello-echo");
    assert_eq!(status["status"]["observedGeneration"], 1);
    assert_eq!(status["metadata"]["finalizers"][0], FINALIZER);
    let table = kubectl_ok("1.33", &kc, &["get", "ec"]);
    assert!(
        table.contains("MESSAGE") && table.contains("hello   hi        true"),
        "{table}"
    );
    let ledger = eventually("the ledger entry", || {
        get_json(&kc, &["-n", "operator", "configmap", LEDGER])
    });
    assert_eq!(ledger["data"]["default.hello"], "hi");

    // An edit of the spec is acted on.
    let out = kubectl_stdin(
        "1.33",
        &kc,
        &["apply", "-f", "-"],
        &echo.replace("MESSAGE", "bye"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("the edited message", || {
        let echo = get_json(&kc, &["echo", "hello"])?;
        let child = get_json(&kc, &["configmap", "hello-echo"])?;
        (echo["status"]["observedGeneration"] == 2 && child["data"]["message"] == "bye\nbye")
            .then_some(())
    });

    // Deleting the Echo waits for the operator's cleanup, then the child goes with it.
    kubectl_ok("1.33", &kc, &["delete", "echo", "hello", "--timeout=60s"]);
    assert!(
        get_json(&kc, &["echo", "hello"]).is_none(),
        "the Echo is gone"
    );
    let ledger = get_json(&kc, &["-n", "operator", "configmap", LEDGER]).unwrap();
    assert!(ledger["data"].get("default.hello").is_none(), "{ledger}");
    eventually("the child to be collected", || {
        get_json(&kc, &["configmap", "hello-echo"])
            .is_none()
            .then_some(())
    });
    operator.abort();
    server.stop();
}
