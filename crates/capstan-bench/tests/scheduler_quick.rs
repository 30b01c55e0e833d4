//! Smoke test of `capstan-bench scheduler`: a small SchedulingBasic run against the real
//! `capstan server` binary built next to the bench binary, so the driver keeps working as the
//! server and scheduler change.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_scheduler_benchmark_binds_every_pod() {
    let bench = env!("CARGO_BIN_EXE_capstan-bench");
    let server = Path::new(bench).with_file_name("capstan");
    assert!(
        server.is_file(),
        "no server binary at {}: build it with `cargo build -p capstan`",
        server.display()
    );
    let output = Command::new(bench)
        .args([
            "scheduler",
            "--nodes",
            "20",
            "--init-pods",
            "20",
            "--pods",
            "200",
        ])
        .args(["--clients", "8", "--server"])
        .arg(&server)
        .output()
        .expect("run capstan-bench scheduler");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| 20 |"))
        .unwrap_or_else(|| panic!("no row for 20 nodes:\n{stdout}\n{stderr}"));
    assert!(!row.contains("failed"), "{row}\n{stderr}");
}
