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

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How long the script may run before it counts as hung (it takes seconds).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_e2e.py")
}

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

/// Runs the script against `kubeconfig`: (exit status, stdout and stderr), killing it after
/// [`SCRIPT_TIMEOUT`].
fn run_script(kubeconfig: &Path) -> (Option<i32>, String) {
    let mut child = Command::new("python3")
        .arg(script())
        .arg(kubeconfig)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut output = stdout.join().unwrap();
    let errors = stderr.join().unwrap();
    if !errors.is_empty() {
        output.push_str("--- stderr ---\n");
        output.push_str(&errors);
    }
    match status {
        Some(status) => (status.code(), output),
        None => {
            output.push_str(&format!("--- killed after {SCRIPT_TIMEOUT:?} ---\n"));
            (None, output)
        }
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

    let (code, output) = run_script(&server.kubeconfig());
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
