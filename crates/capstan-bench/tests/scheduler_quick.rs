//! Smoke test of `capstan-bench scheduler`: a small SchedulingBasic run against the real
//! `capstan server` binary built next to the bench binary, so the driver keeps working as the
//! server and scheduler change.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_scheduler_benchmark_binds_every_pod() {
    let stdout = common::run_bench(
        &[
            "scheduler",
            "--nodes",
            "20",
            "--init-pods",
            "20",
            "--pods",
            "200",
            "--clients",
            "8",
        ],
        &[],
    );
    let cells = common::row_cells(&stdout, "| 20 |");
    assert!(!cells.iter().any(|c| c.contains("failed")), "{cells:?}");
}
