//! Smoke test of `capstan-bench controllers`: a small run (5 Deployments of 4 on 20 simulated
//! nodes) against the real binaries, so the driver keeps working as the controllers change.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_controllers_benchmark_converges_and_rolls_out() {
    let stdout = common::run_bench(&["controllers", "--quick"], &[]);
    for phase in [
        "| create, until all available |",
        "| rolling update of all, until done |",
    ] {
        assert!(stdout.contains(phase), "{phase} missing:\n{stdout}");
    }
    assert!(stdout.contains("controller-manager RSS"), "{stdout}");
}
