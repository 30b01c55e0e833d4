//! Smoke test of `capstan-bench api`: a scaled-down run of every scenario against the real
//! `capstan server` binary on SQLite and on etcd, so that the driver keeps working as the server
//! changes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_quick_api_benchmark_runs_every_scenario_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = common::run_bench(
        &[
            "api",
            "--quick",
            "--duration",
            "100ms",
            "--objects",
            "600",
            "--watchers",
            "20",
            "--watch-events",
            "10",
            "--list-walks",
            "1",
        ],
        &["--dir".as_ref(), dir.path().as_os_str()],
    );
    assert!(!stdout.contains("**error**"), "{stdout}");
    for section in [
        "### Start-up",
        "### Memory",
        "### Creates",
        "### Gets",
        "### Lists",
        "### Watch fan-out",
    ] {
        assert!(stdout.contains(section), "{section} missing:\n{stdout}");
    }
    for backend in ["sqlite", "etcd"] {
        // Every watcher of the 20 got each of the 10 events.
        assert!(
            stdout.contains(&format!("| {backend} | 20 | 1 | 10 |")),
            "no watch row for {backend}:\n{stdout}"
        );
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("| {backend} | 20 |")) && l.contains("| 20 / 20 |")),
            "a watcher on {backend} missed events:\n{stdout}"
        );
    }
    // A list row for 600 objects of each kind on each backend, walked in two pages of 500. Match
    // the row's leading cells: a throughput column elsewhere can happen to read 600 too.
    for backend in ["sqlite", "etcd"] {
        for kind in ["configmaps", "pods"] {
            let row = format!("| {backend} | {kind} | 600 |");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("no list row {row}:\n{stdout}"));
            let pages = line.split('|').nth(5).map(str::trim);
            assert_eq!(pages, Some("2"), "{line}\n{stdout}");
        }
    }
}
