//! End to end: the web dashboard at `/dashboard/` in a real headless browser (Playwright for
//! Python driving Debian's Chromium) against the real `capstan server` (without a node: pods
//! stay Pending), with users of the server's `--token-auth-file` and the admin kubeconfig's
//! client certificate: the first load's size, a new Deployment's pods shown with their
//! status within 2 s of their creation, a pod's YAML viewed and a label edited through it, a
//! stale edit shown as the API's Conflict, and a user without RBAC access shown "Forbidden" and
//! no objects. And `--disable-dashboard`: `/dashboard/` is then an unserved path.
//!
//! The browser checks live in `tests/python/dashboard_e2e.py`; this test starts the server,
//! runs the script, and fails with its output unless it passed every check.
//! `scripts/install-deps` installs Playwright (`pip install playwright`) and Chromium (apt).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const ALICE_TOKEN: &str = "alice-dashboard-token-7d1f0c";
const BOB_TOKEN: &str = "bob-dashboard-token-92ab4e";

/// Fails with a hint when Playwright or Chromium is missing.
fn require_browser() {
    let probe = Command::new("python3")
        .args(["-c", "import playwright.sync_api, kubernetes"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "Playwright for Python is not installed (run scripts/install-deps): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("python3 cannot run (run scripts/install-deps): {e}"),
    }
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "Chromium is not installed (run scripts/install-deps)"
    );
}

/// The kubeconfig's client certificate and key, written as PEM files in `dir`.
fn client_files(kubeconfig: &Path, dir: &Path) -> (String, String) {
    use base64::Engine;
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let write = |field: &str, name: &str| {
        let data = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(field))
            .unwrap();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path.to_str().unwrap().to_owned()
    };
    (
        write("client-certificate-data: ", "client.crt"),
        write("client-key-data: ", "client.key"),
    )
}

#[test]
fn dashboard_in_a_headless_browser() {
    require_browser();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        format!("{ALICE_TOKEN},alice,1001,\"\"\n{BOB_TOKEN},bob,1002,\"\"\n"),
    )
    .unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--token-auth-file", tokens.to_str().unwrap()],
    );
    let kubeconfig = server.kubeconfig();
    let (code, output) = python::run_script(
        "dashboard_e2e.py",
        &[kubeconfig.to_str().unwrap(), ALICE_TOKEN, BOB_TOKEN],
    );
    assert!(
        code == Some(0) && output.lines().any(|l| l == "ALL CHECKS PASSED"),
        "the dashboard checks failed (exit status {code:?}):\n{output}"
    );
    // The script printed one line per check; a run that checked little is a broken script.
    let checks = output.lines().filter(|l| l.starts_with("ok: ")).count();
    assert!(checks >= 25, "only {checks} checks ran:\n{output}");
    println!("{output}");
    server.stop();
}

/// `--disable-dashboard`: `/dashboard/` is an unserved path (the admin gets a 404 Status,
/// anonymous requests the usual refusal), while the API is served as before.
#[test]
fn disable_dashboard_leaves_the_path_unserved() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--disable-dashboard"],
    );
    let page = curl_with(&server.url("/dashboard/"), &["-w", "\n%{http_code}"]).unwrap();
    assert!(page.ends_with("\n401") || page.ends_with("\n403"), "{page}");
    let kubeconfig = server.kubeconfig();
    let (cert, key) = client_files(&kubeconfig, dir.path());
    let page = curl_with(
        &server.url("/dashboard/"),
        &["--cert", &cert, "--key", &key, "-w", "\n%{http_code}"],
    )
    .unwrap();
    assert!(page.ends_with("\n404"), "{page}");
    assert!(page.contains("\"reason\":\"NotFound\""), "{page}");
    server.stop();

    // Served by default, to anyone, with its security headers.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), free_port());
    let page = curl_with(&server.url("/dashboard/"), &["-i"]).unwrap();
    assert!(page.starts_with("HTTP/2 200"), "{page}");
    let lower = page.to_ascii_lowercase();
    assert!(lower.contains("x-frame-options: deny"), "{page}");
    assert!(lower.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(
        page.contains("<script type=\"module\" src=\"/dashboard/v/"),
        "{page}"
    );
    server.stop();
}
