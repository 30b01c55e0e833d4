//! Smoke test of `capstan-bench dns`: a small run (100 Services, 8 clients for 2 s, two idle
//! servers) against the real binaries, so the driver keeps working as the DNS server changes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

#[test]
fn the_dns_benchmark_answers_every_query() {
    let stdout = common::run_bench(&["dns", "--quick"], &[]);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| ") && l.contains(" ms |"))
        .unwrap_or_else(|| panic!("no results row:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | queries/s | p50 | p99 | max | failed | ...
    assert!(cells[1].parse::<f64>().unwrap() > 0.0, "{row}");
    assert_eq!(cells[5], "0", "failed queries: {row}");
    assert!(stdout.contains("| with DNS |"), "{stdout}");
    assert!(stdout.contains("| `--disable-dns` |"), "{stdout}");
}
