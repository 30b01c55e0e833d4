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

/// `dns --from-pod --quick` on a real node (root, containerd and the CNI plugins, as the node
/// tests): the pod's client answers every query through the `kube-dns` cluster IP (the driver
/// fails if the pod is not gone before the server stops). Its own bridge, pod and service ranges (the kubelet port is
/// a free one), so that it runs beside the other node tests and a benchmark.
#[test]
fn the_dns_benchmark_from_a_pod_answers_every_query() {
    let stdout = common::run_bench(
        &[
            "dns",
            "--from-pod",
            "--quick",
            "--bridge",
            "capdnsq0",
            "--cluster-cidr",
            "10.217.0.0/16",
            "--service-cidr",
            "10.218.0.0/16",
        ],
        &[],
    );
    let cells = common::row_cells(
        &stdout,
        "| pod, to the kube-dns cluster IP 10.218.0.10:53 |",
    );
    // | client | queries/s | p50 | p99 | max | failed | ...
    assert!(cells[2].parse::<f64>().unwrap() > 0.0, "{cells:?}");
    assert_eq!(cells[6], "0", "failed queries: {cells:?}");
    assert!(
        stdout.contains("| host, to the DNS server's endpoint "),
        "{stdout}"
    );
}
