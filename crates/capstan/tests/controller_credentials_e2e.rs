//! End to end: per-controller credentials (`--use-service-account-credentials`, issue 25). The
//! real `capstan server` runs each controller as its own service account in kube-system, which
//! the audit log shows as the user of each write: a Deployment's ReplicaSet is created by the
//! deployment controller's account, its pods by the ReplicaSet controller's, the cascade that
//! deletes them by the garbage collector's; each account has upstream's role and no more, and
//! the controller manager's own user is no cluster admin. With the flag off, everything is
//! done as `system:kube-controller-manager`, bound to cluster-admin.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
"#;

const ACCOUNT: &str = "system:serviceaccount:kube-system:";

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The user of the first successful `verb` of `resource` in `namespace` (with a name starting
/// with `prefix`, when the event names the object: creates often do not), once audited.
fn writer(log: &Path, verb: &str, resource: &str, namespace: &str, prefix: &str) -> String {
    eventually(&format!("{verb} {resource} {namespace}/{prefix}*"), || {
        events(log).into_iter().find_map(|e| {
            let code = e["responseStatus"]["code"].as_i64().unwrap_or_default();
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            (e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].is_null()
                && e["objectRef"]["namespace"] == namespace
                && name.starts_with(prefix)
                && (200..300).contains(&code))
            .then(|| e["user"]["username"].as_str().unwrap().to_owned())
        })
    })
}

/// A server auditing every write to `<dir>/audit.log`, with `extra` flags.
fn server(dir: &Path, extra: &[&str]) -> (Server, std::path::PathBuf) {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.join("audit.log");
    let (policy_arg, log_arg) = (policy.display().to_string(), log.display().to_string());
    let mut flags = vec![
        "--audit-policy-file",
        policy_arg.as_str(),
        "--audit-log-path",
        log_arg.as_str(),
    ];
    flags.extend_from_slice(extra);
    let server = Server::start_with(&dir.join("data"), free_port(), &flags);
    (server, log)
}

/// `kubectl auth can-i` as `user`: whether it answered yes.
fn can_i(kc: &Path, user: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i", "--as", user];
    all.extend_from_slice(args);
    let out = kubectl_any("1.33", kc, &all);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(answer == "yes" || answer == "no", "{answer:?} {out:?}");
    answer == "yes"
}

#[test]
fn each_controller_writes_as_its_own_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = server(dir.path(), &[]);
    let kc = server.kubeconfig();
    // The service account controller (as its own account) makes `default`, which pods need.
    eventually("the default service account", || {
        kubectl_any("1.33", &kc, &["get", "serviceaccount", "default"])
            .status
            .success()
            .then_some(())
    });
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=1",
        ],
    );
    assert_eq!(
        writer(&log, "create", "replicasets", "default", ""),
        format!("{ACCOUNT}deployment-controller")
    );
    assert_eq!(
        writer(&log, "create", "pods", "default", ""),
        format!("{ACCOUNT}replicaset-controller")
    );
    assert_eq!(
        writer(&log, "create", "serviceaccounts", "default", ""),
        format!("{ACCOUNT}service-account-controller")
    );
    // The controller manager made the accounts in kube-system with its own credential, and
    // asked for their tokens.
    for account in [
        "deployment-controller",
        "replicaset-controller",
        "generic-garbage-collector",
        "namespace-controller",
    ] {
        kubectl_ok(
            "1.33",
            &kc,
            &["-n", "kube-system", "get", "serviceaccount", account],
        );
    }
    assert_eq!(
        writer(&log, "create", "serviceaccounts", "kube-system", ""),
        "system:kube-controller-manager"
    );
    let token = eventually("the deployment controller's token request", || {
        events(&log).into_iter().find(|e| {
            e["objectRef"]["subresource"] == "token"
                && e["objectRef"]["name"] == "deployment-controller"
        })
    });
    assert_eq!(token["user"]["username"], "system:kube-controller-manager");
    assert_eq!(token["responseStatus"]["code"], 201);

    // Each account holds upstream's role and no more; the manager's user is no admin.
    let deployer = format!("{ACCOUNT}deployment-controller");
    assert!(!can_i(&kc, &deployer, &["create", "secrets"]));
    assert!(!can_i(&kc, &deployer, &["delete", "pods"]));
    assert!(can_i(&kc, &deployer, &["create", "replicasets.apps"]));
    let collector = format!("{ACCOUNT}generic-garbage-collector");
    assert!(can_i(&kc, &collector, &["delete", "widgets.example.com"]));
    assert!(!can_i(&kc, &collector, &["create", "pods"]));
    assert!(!can_i(
        &kc,
        "system:kube-controller-manager",
        &["delete", "pods"]
    ));
    assert!(can_i(
        &kc,
        "system:kube-controller-manager",
        &["list", "widgets.example.com", "--all-namespaces"]
    ));
    let admin = kubectl_any(
        "1.33",
        &kc,
        &["get", "clusterrolebinding", "capstan:controller-manager"],
    );
    assert!(!admin.status.success());

    // The garbage collector deletes the orphaned ReplicaSet as its own account.
    kubectl_ok("1.33", &kc, &["delete", "deployment", "web"]);
    assert_eq!(
        writer(&log, "delete", "replicasets", "default", "web-"),
        format!("{ACCOUNT}generic-garbage-collector")
    );
    // The namespace controller empties and removes a namespace as its own account.
    kubectl_ok("1.33", &kc, &["create", "namespace", "doomed"]);
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "-n",
            "doomed",
            "create",
            "configmap",
            "left",
            "--from-literal=a=b",
        ],
    );
    kubectl_ok(
        "1.33",
        &kc,
        &["delete", "namespace", "doomed", "--wait=false"],
    );
    eventually("the namespace gone", || {
        (!kubectl_any("1.33", &kc, &["get", "namespace", "doomed"])
            .status
            .success())
        .then_some(())
    });
    let emptied = eventually("the namespace's configmaps removed", || {
        events(&log).into_iter().find(|e| {
            e["objectRef"]["namespace"] == "doomed"
                && e["objectRef"]["resource"] == "configmaps"
                && (e["verb"] == "delete" || e["verb"] == "deletecollection")
                && e["user"]["username"] != "system:admin"
        })
    });
    assert_eq!(
        emptied["user"]["username"],
        format!("{ACCOUNT}namespace-controller")
    );
    server.stop();
}

#[test]
fn without_service_account_credentials_the_manager_does_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = server(dir.path(), &["--use-service-account-credentials=false"]);
    let kc = server.kubeconfig();
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=1",
        ],
    );
    assert_eq!(
        writer(&log, "create", "replicasets", "default", ""),
        "system:kube-controller-manager"
    );
    assert!(can_i(
        &kc,
        "system:kube-controller-manager",
        &["delete", "pods"]
    ));
    assert!(
        !kubectl_any(
            "1.33",
            &kc,
            &[
                "-n",
                "kube-system",
                "get",
                "serviceaccount",
                "deployment-controller"
            ],
        )
        .status
        .success()
    );
    server.stop();

    // Restarted with per-controller credentials, the admin binding goes.
    let (server, log) = server_again(dir.path());
    let kc = server.kubeconfig();
    kubectl_ok("1.33", &kc, &["create", "namespace", "second"]);
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "-n",
            "second",
            "create",
            "deployment",
            "api",
            "--image=busybox",
        ],
    );
    assert_eq!(
        writer(&log, "create", "replicasets", "second", ""),
        format!("{ACCOUNT}deployment-controller")
    );
    assert!(!can_i(
        &kc,
        "system:kube-controller-manager",
        &["delete", "pods"]
    ));
    server.stop();
}

/// The server of `dir` started again with the default flags (a fresh audit log).
fn server_again(dir: &Path) -> (Server, std::path::PathBuf) {
    let again = dir.join("again");
    std::fs::create_dir_all(&again).unwrap();
    let policy = again.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = again.join("audit.log");
    let (policy_arg, log_arg) = (policy.display().to_string(), log.display().to_string());
    let server = Server::start_with(
        &dir.join("data"),
        free_port(),
        &[
            "--audit-policy-file",
            &policy_arg,
            "--audit-log-path",
            &log_arg,
        ],
    );
    (server, log)
}

#[test]
fn every_controller_runs_as_an_account_the_bootstrap_policy_binds() {
    let bound = capstan_apiserver::controller_accounts();
    let mut used = std::collections::BTreeSet::new();
    for (controller, account) in capstan_controllers::controller_accounts() {
        assert!(
            bound.contains(&account),
            "{controller} runs as {account}, which no bootstrap role is bound to"
        );
        used.insert(account);
    }
    // No role is bound to an account no controller uses.
    assert_eq!(
        used.into_iter().collect::<Vec<_>>(),
        bound,
        "bootstrap accounts and controller accounts differ"
    );
}
