//! The profiles as a client reads them from `/debug/pprof/`: this test binary runs on the
//! sampling allocator, as `capstan` does, so its heap profile must find the functions that
//! allocate, and a CPU profile the function that burns CPU.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use capstan_pprof::profile::Profile;
use capstan_pprof::{Sampled, heap, serve};
use http::{Method, StatusCode, header};

#[global_allocator]
static ALLOCATOR: Sampled<System> = Sampled::new(System);

/// 16 MiB in 64 blocks, kept by the caller.
#[inline(never)]
fn keep_big_buffers() -> Vec<Vec<u8>> {
    (0..64).map(|i| vec![i as u8; 256 * 1024]).collect()
}

/// Sums one sample type over the samples whose stack names a function containing `function`.
fn total(profile: &Profile, kind: &str, function: &str) -> i64 {
    let index = profile.sample_index(kind).expect("sample type");
    profile
        .sample
        .iter()
        .filter(|s| profile.stack(s).iter().any(|n| n.contains(function)))
        .map(|s| s.value[index])
        .sum()
}

async fn get(path: &str, query: &str) -> http::Response<Vec<u8>> {
    serve(&Method::GET, path, query, b"").await
}

#[tokio::test]
async fn heap_profile_finds_what_is_in_use_and_what_was_allocated() {
    heap::start(heap::DEFAULT_RATE);
    let held = black_box(keep_big_buffers());

    let response = get("/debug/pprof/heap", "").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/octet-stream"
    );
    assert_eq!(
        response.headers()[header::CONTENT_DISPOSITION],
        "attachment; filename=\"heap\""
    );
    let profile = Profile::from_gzip(response.body()).expect("a gzipped pprof profile");
    let types: Vec<&str> = profile
        .sample_type
        .iter()
        .map(|t| profile.text(t.r#type))
        .collect();
    assert_eq!(
        types,
        [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space"
        ]
    );
    assert_eq!(profile.period, 512 * 1024);
    // Sampling estimates: 16 MiB in use, give or take what chance does with ~32 samples.
    let inuse = total(&profile, "inuse_space", "keep_big_buffers");
    assert!(
        (8 << 20..32 << 20).contains(&inuse),
        "in use by keep_big_buffers: {inuse} bytes"
    );
    // The allocator's and the profiler's frames are cut off the top of every stack.
    for sample in &profile.sample {
        let leaf = profile.stack(sample).first().copied().unwrap_or_default();
        assert!(!leaf.contains("capstan_pprof::heap"), "leaf frame {leaf}");
    }

    drop(held);
    let after = Profile::from_gzip(get("/debug/pprof/allocs", "").await.body()).expect("profile");
    assert_eq!(
        after.text(after.default_sample_type),
        "alloc_space",
        "allocs shows allocations by default"
    );
    assert_eq!(
        total(&after, "inuse_space", "keep_big_buffers"),
        0,
        "all freed"
    );
    assert!(total(&after, "alloc_space", "keep_big_buffers") >= inuse);

    let text = get("/debug/pprof/heap", "debug=1").await;
    assert_eq!(
        text.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let text = String::from_utf8_lossy(text.body());
    assert!(text.starts_with("heap profile: "), "{text}");
    assert!(text.contains("keep_big_buffers"), "{text}");
}

#[tokio::test]
async fn heap_delta_counts_only_the_window() {
    heap::start(heap::DEFAULT_RATE);
    let before = black_box(keep_big_buffers());
    let (during, response) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            black_box(keep_big_buffers())
        },
        get("/debug/pprof/allocs", "seconds=1"),
    );
    let profile = Profile::from_gzip(response.body()).expect("profile");
    let window = total(&profile, "alloc_space", "keep_big_buffers");
    // One call's 16 MiB (not two): give or take sampling.
    assert!((8 << 20..32 << 20).contains(&window), "{window}");
    drop((before, during));

    let bad = get("/debug/pprof/heap", "seconds=x").await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(bad.headers()["x-go-pprof"], "1");
}

#[inline(never)]
fn burn_cpu(until: Instant) -> u64 {
    let mut x = 0u64;
    while Instant::now() < until {
        for i in 0..10_000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_profile_finds_the_busy_function_and_runs_once_at_a_time() {
    let burner = std::thread::spawn(|| burn_cpu(Instant::now() + Duration::from_millis(1500)));
    let (response, second) = tokio::join!(get("/debug/pprof/profile", "seconds=1"), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        get("/debug/pprof/profile", "seconds=1").await
    });
    let _ = burner.join();

    assert_eq!(second.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        String::from_utf8_lossy(second.body()),
        "Could not enable CPU profiling: cpu profiling already in use\n"
    );
    assert_eq!(second.headers()["x-go-pprof"], "1");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_DISPOSITION],
        "attachment; filename=\"profile\""
    );
    let profile = Profile::from_gzip(response.body()).expect("a gzipped pprof profile");
    assert_eq!(profile.period, 10_000_000, "100 Hz");
    let busy = total(&profile, "cpu", "burn_cpu");
    // A thread spinning for the whole second: up to 1 s of CPU at 10 ms a sample, less when
    // other processes share the cores, but never a mere handful of samples.
    assert!(busy >= 50_000_000, "burn_cpu sampled for {busy} ns");
    assert!(profile.duration_nanos >= 1_000_000_000);
}

#[tokio::test]
async fn index_symbols_and_unknown_profiles() {
    let index = get("/debug/pprof/", "").await;
    assert_eq!(index.status(), StatusCode::OK);
    assert!(String::from_utf8_lossy(index.body()).contains("href='heap?debug=1'"));

    let unknown = get("/debug/pprof/goroutine", "").await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert_eq!(String::from_utf8_lossy(unknown.body()), "Unknown profile\n");

    let address = format!("{:#x}", keep_big_buffers as fn() -> Vec<Vec<u8>> as usize);
    let symbols = serve(&Method::POST, "/debug/pprof/symbol", "", address.as_bytes()).await;
    let text = String::from_utf8_lossy(symbols.body()).into_owned();
    assert!(text.starts_with("num_symbols: 1\n"), "{text}");
    assert!(
        text.contains(&format!("{address} profiles::keep_big_buffers")),
        "{text}"
    );

    let too_long = get("/debug/pprof/profile", "seconds=100000").await;
    assert_eq!(too_long.status(), StatusCode::BAD_REQUEST);
}
