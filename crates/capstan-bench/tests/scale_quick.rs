//! Smoke test of `capstan-bench scale`: the quick run (30 simulated nodes, 600 pods) on one
//! server over SQLite and on three servers sharing an etcd, against the real `capstan` binary,
//! so that the driver keeps working as the server changes. It also checks what the run shows:
//! every phase reported, and a cluster that recovers from the kill of its first server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_quick_scale_benchmark_runs_every_phase_and_recovers() {
    let stdout = common::run_bench(&["scale", "--quick"], &[]);
    assert!(!stdout.contains("| failed |"), "{stdout}");
    for section in ["### 1 server(s) on sqlite", "### 3 server(s) on etcd"] {
        assert!(stdout.contains(section), "{section} missing:\n{stdout}");
    }
    for row in [
        "| 30 simulated nodes Ready |",
        "| 600 pod creates at 16 clients |",
        "| mutating calls",
        "| LIST all pods in pages of 500",
        "| scheduler: 100 pods with 600 running |",
        "| server 3 RSS: nodes only, with the pods |",
        "| etcd RSS with the pods |",
        "| after SIGKILL of server 1: the server started again and ready (`/readyz`) |",
        "| after SIGKILL of server 1: both Leases held by another server",
    ] {
        assert!(stdout.contains(row), "no row {row}:\n{stdout}");
    }
    // Both clusters ran a new ReplicaSet's pod after the kill.
    let recovered = stdout
        .lines()
        .filter(|l| l.contains("a new ReplicaSet's pod Running and ready"))
        .count();
    assert_eq!(recovered, 2, "{stdout}");
}
