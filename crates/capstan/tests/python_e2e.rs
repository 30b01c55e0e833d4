//! End to end: the official Python `kubernetes` client (typed `CoreV1Api` / `AppsV1Api` calls
//! and `watch.Watch()`, and a ValidatingAdmissionPolicy refusing a Deployment) against the real
//! `capstan server`, on SQLite and on a real etcd; and the
//! served OpenAPI documents against what the client was generated from (the operations and query
//! parameters of its `pods/log` and connect methods).
//!
//! The checks live in `tests/python/client_e2e.py`; this test starts the server (compacting
//! every second, for the expired-watch check), runs the script with the server's admin
//! kubeconfig, and fails with the script's output unless it passed every check.
//! `scripts/install-deps` installs the client (`pip install kubernetes`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;

/// Fails with a hint when `python3` or its `kubernetes` package is missing.
fn require_python_client() {
    let probe = Command::new("python3")
        .args(["-c", "import kubernetes; print(kubernetes.__version__)"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the Python kubernetes client is not installed (run scripts/install-deps): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("python3 cannot run (run scripts/install-deps): {e}"),
    }
}

fn run_on(datastore: &str) {
    require_python_client();
    let store = Datastore::start(datastore);
    let dir = tempfile::tempdir().unwrap();
    let mut flags = store.flags();
    flags.extend(["--etcd-compaction-interval".into(), "1s".into()]);
    // The checks replace a Deployment with the resourceVersion they read; its controller's
    // status writes would race them.
    flags.push("--disable-controllers=deployment".into());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_with(&dir.path().join("data"), free_port(), &flags);

    let (code, output) =
        python::run_script("client_e2e.py", &[server.kubeconfig().to_str().unwrap()]);
    assert!(
        code == Some(0) && output.lines().any(|l| l == "ALL CHECKS PASSED"),
        "the Python client checks failed on {datastore} (exit status {code:?}):\n{output}"
    );
    // The script printed one line per check; a run that checked little is a broken script.
    let checks = output.lines().filter(|l| l.starts_with("ok: ")).count();
    assert!(
        checks >= 60,
        "only {checks} checks ran on {datastore}:\n{output}"
    );
    server.stop();
}

#[test]
fn python_client_on_sqlite() {
    run_on("sqlite");
}

#[test]
fn python_client_on_etcd() {
    run_on("etcd");
}
