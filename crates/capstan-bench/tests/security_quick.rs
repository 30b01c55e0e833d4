//! Smoke test of `capstan-bench security`: a scaled-down run of both scenarios against the real
//! `capstan server` binary (SQLite), so that the driver keeps working as authentication and
//! encryption at rest change. The auth rounds run over all three clients, the Go one included
//! (`scripts/install-test-deps` installs Go).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_quick_security_benchmark_measures_every_identity_and_server() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = common::run_bench(
        &[
            "security",
            "--quick",
            "--backends",
            "sqlite",
            "--duration",
            "100ms",
            "--objects",
            "100",
            "--auth-protocols",
            "h2,http1,go-h2",
        ],
        &["--dir".as_ref(), dir.path().as_os_str()],
    );
    assert!(!stdout.contains("**error**"), "{stdout}");
    for protocol in ["HTTP/2", "HTTP/1.1", "HTTP/2 (Go)"] {
        for identity in ["cert admin", "cert reader", "token reader"] {
            assert!(
                stdout.lines().any(
                    |l| l.starts_with(&format!("| sqlite | {protocol} | 32 | 1 |"))
                        && l.contains(&format!("| {identity} |"))
                ),
                "no {protocol} GET row for {identity}:\n{stdout}"
            );
        }
    }
    for server in ["plain", "encrypted"] {
        for clients in [1, 32] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(&format!("| sqlite | {server} | {clients} | 1 |"))),
                "no create row for {server} at {clients} clients:\n{stdout}"
            );
        }
    }
    // The Secrets are sealed on the encrypting server, and only there.
    assert!(
        stdout.contains(
            "| sqlite | plain | sealed values (`k8s:enc:`) in the datastore's files: no |"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "| sqlite | encrypted | sealed values (`k8s:enc:`) in the datastore's files: yes"
        ),
        "{stdout}"
    );
}
