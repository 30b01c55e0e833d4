//! End to end: `capstan server`'s profiles at `/debug/pprof/` (`--profiling`, on by default),
//! read as a Kubernetes user reads kube-apiserver's: `kubectl get --raw` for the index, and
//! the CPU and heap profiles fetched over HTTPS and opened with `go tool pprof`, which must
//! find Capstan's own functions in them (the heap sampled by the binary's allocator). A user
//! without access to the path is refused; `--profiling=false` serves nothing.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{Server, assert_refused, free_port, kubectl_any, kubectl_ok};

/// GETs `path` as the cluster admin into `out`; the HTTP status.
fn fetch(server: &Server, tls: &Path, path: &str, out: &Path) -> String {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "60", "-o"])
        .arg(out)
        .args(["-w", "%{http_code}", "--cacert"])
        .arg(tls.join("ca.crt"))
        .arg("--cert")
        .arg(tls.join("admin.crt"))
        .arg("--key")
        .arg(tls.join("admin.key"))
        .arg(server.url(path))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `go tool pprof -top` of a profile file: the report, or a failure with pprof's error.
fn pprof_top(profile: &Path, extra: &[&str]) -> String {
    let go = capstan_testkit::find_go().expect("go (scripts/install-test-deps installs golang-go)");
    let out = Command::new(go)
        .args(["tool", "pprof", "-top", "-nodecount=400"])
        .args(extra)
        .arg(profile)
        .env("HOME", profile.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go tool pprof: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn profiles_open_in_go_tool_pprof_and_need_authorization() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path();
    let port = free_port();
    let server = Server::start(data_dir, port);
    let kc = server.kubeconfig();
    let tls = data_dir.join("tls");

    let index = kubectl_ok("default", &kc, &["get", "--raw", "/debug/pprof/"]);
    assert!(
        index.contains("heap") && index.contains("profile"),
        "{index}"
    );

    // A CPU profile while the server answers requests: kubectl calls from another thread.
    let cpu = data_dir.join("cpu.pb.gz");
    let load = {
        let kc = kc.clone();
        std::thread::spawn(move || {
            for i in 0..15 {
                kubectl_ok(
                    "default",
                    &kc,
                    &[
                        "create",
                        "configmap",
                        &format!("load-{i}"),
                        "--from-literal=a=b",
                    ],
                );
                kubectl_ok("default", &kc, &["get", "configmaps", "-o", "json"]);
            }
        })
    };
    assert_eq!(
        fetch(&server, &tls, "/debug/pprof/profile?seconds=3", &cpu),
        "200"
    );
    load.join().unwrap();
    let top = pprof_top(&cpu, &[]);
    assert!(top.contains("Type: cpu"), "{top}");
    assert!(
        top.contains("capstan"),
        "Capstan's functions in the CPU profile:\n{top}"
    );

    // The heap: what the server holds, by the stacks that allocated it.
    let heap = data_dir.join("heap.pb.gz");
    assert_eq!(fetch(&server, &tls, "/debug/pprof/heap", &heap), "200");
    let top = pprof_top(&heap, &["-sample_index=inuse_space"]);
    assert!(top.contains("Type: inuse_space"), "{top}");
    assert!(
        top.contains("capstan"),
        "Capstan's functions in the heap profile:\n{top}"
    );
    let allocs = data_dir.join("allocs.pb.gz");
    assert_eq!(fetch(&server, &tls, "/debug/pprof/allocs", &allocs), "200");
    let top = pprof_top(&allocs, &[]);
    assert!(top.contains("Type: alloc_space"), "{top}");

    // A service account's token: authenticated, not authorized for the path.
    let token = kubectl_ok("default", &kc, &["create", "token", "default"]);
    let refused = common::curl_with(
        &server.url("/debug/pprof/heap"),
        &["-H", &format!("Authorization: Bearer {}", token.trim())],
    )
    .unwrap();
    let status: serde_json::Value = serde_json::from_str(&refused).unwrap();
    assert_eq!(status["code"], 403);
    assert_eq!(
        status["message"],
        "forbidden: User \"system:serviceaccount:default:default\" cannot get path \
         \"/debug/pprof/heap\""
    );
    server.stop();

    // Without profiling the path is not served at all.
    let server = Server::start_with(data_dir, port, &["--profiling=false"]);
    let kc = server.kubeconfig();
    let off = kubectl_any("default", &kc, &["get", "--raw", "/debug/pprof/"]);
    assert_refused(&off, &["NotFound"]);
    server.stop();
}
