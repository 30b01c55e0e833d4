//! Profiles of a running Capstan process, served under `/debug/pprof/` the way Kubernetes'
//! components serve Go's `net/http/pprof` with `--profiling` (on by default): a CPU profile
//! over `?seconds=` (default 30) at `/debug/pprof/profile`, the sampled heap at
//! `/debug/pprof/heap` (what is in use) and `/debug/pprof/allocs` (everything allocated), the
//! index at `/debug/pprof/`, and `/debug/pprof/symbol`. Profiles are gzip-compressed pprof
//! protobuf, so `go tool pprof https://server/debug/pprof/heap` and the other pprof viewers
//! read them; `?debug=1` gives text. Errors are Go's: plain text with `X-Go-Pprof: 1`.
//!
//! - [`cpu`]: samples every thread's stack 100 times a second of CPU time with TiKV's `pprof`
//!   crate (SIGPROF), one profile at a time;
//! - [`heap`]: the [`heap::Sampled`] allocator wrapper the binary installs, sampling about one
//!   allocation per 512 KiB as Go's runtime does;
//! - [`profile`]: the pprof messages and their builder.
//!
//! This crate decides nothing about who may read a profile: each server mounts
//! [`serve_request`] (or [`serve`]) behind its own authentication and authorization (the API server as the non-resource path
//! `/debug/pprof/*`, the kubelet as `nodes/proxy`).

pub mod cpu;
pub mod heap;
pub mod profile;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use http::{HeaderValue, Response, StatusCode, header};

pub use heap::Sampled;
use profile::{Builder, Symbol};

/// The path prefix every component serves the profiles under.
pub const PREFIX: &str = "/debug/pprof";

/// How long a CPU profile runs unless `?seconds=` says otherwise (Go's default).
const DEFAULT_SECONDS: u64 = 30;
/// The longest profile taken (a request cannot hold a profiler for hours).
const MAX_SECONDS: u64 = 600;

/// The largest request body read (a `POST /debug/pprof/symbol` list of addresses).
const MAX_BODY: usize = 1 << 20;

/// Answers an HTTP request for a path under [`PREFIX`]: reads its body (up to 1 MiB; a
/// larger or failed one reads as empty) and calls [`serve`] with its path and query.
pub async fn serve_request<B>(request: http::Request<B>) -> Response<Vec<u8>>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt as _;
    let (parts, body) = request.into_parts();
    let body = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Default::default(),
    };
    let query = parts.uri.query().unwrap_or_default();
    serve(&parts.method, parts.uri.path(), query, &body).await
}

/// Answers a request for `path` (starting with [`PREFIX`]) with `query` (the URL's query
/// string) and, for `POST /debug/pprof/symbol`, `body`. Profiles that take time (`profile`,
/// or a heap delta with `seconds`) wait without blocking the async runtime.
pub async fn serve(
    method: &http::Method,
    path: &str,
    query: &str,
    body: &[u8],
) -> Response<Vec<u8>> {
    let params: BTreeMap<String, String> = form_pairs(query);
    let name = path
        .strip_prefix(PREFIX)
        .unwrap_or(path)
        .trim_start_matches('/');
    match name {
        "" => index(),
        "profile" => cpu_profile(&params).await,
        "symbol" => symbol(method, query, body),
        "heap" | "allocs" => heap_profile(name, &params).await,
        _ => error(StatusCode::NOT_FOUND, "Unknown profile"),
    }
}

fn form_pairs(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// Go's `serveError`: the message as plain text, marked as pprof's.
fn error(status: StatusCode, message: &str) -> Response<Vec<u8>> {
    let mut response = Response::new(format!("{message}\n").into_bytes());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-go-pprof", HeaderValue::from_static("1"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn ok(content_type: &'static str, attachment: Option<&str>, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(name) = attachment
        && let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
    {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

fn index() -> Response<Vec<u8>> {
    let (stacks, _) = heap::snapshot();
    let live: u64 = stacks.iter().map(|s| s.allocs - s.frees).sum();
    let mut html = String::from(
        "<html>\n<head><title>/debug/pprof/</title></head>\n<body>\n/debug/pprof/<br>\n<br>\n\
         Types of profiles available:\n<table>\n<thead><td>Count</td><td>Profile</td></thead>\n",
    );
    for (count, name, what) in [
        (
            stacks.len(),
            "allocs",
            "Sampled allocations since sampling started, by stack.",
        ),
        (
            usize::try_from(live).unwrap_or(usize::MAX),
            "heap",
            "Sampled allocations still in use, by stack.",
        ),
        (
            0,
            "profile",
            "CPU profile over ?seconds= (default 30); then open it with go tool pprof.",
        ),
    ] {
        let _ = writeln!(
            html,
            "<tr><td>{count}</td><td><a href='{name}?debug=1'>{name}</a></td><td>{what}</td></tr>"
        );
    }
    html.push_str("</table>\n</body>\n</html>\n");
    ok("text/html; charset=utf-8", None, html.into_bytes())
}

async fn cpu_profile(params: &BTreeMap<String, String>) -> Response<Vec<u8>> {
    let seconds = params
        .get("seconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(DEFAULT_SECONDS);
    if seconds > MAX_SECONDS {
        return error(
            StatusCode::BAD_REQUEST,
            "profile duration exceeds server's WriteTimeout",
        );
    }
    match cpu::profile(Duration::from_secs(seconds)).await {
        Ok(profile) => ok(
            "application/octet-stream",
            Some("profile"),
            profile.to_gzip(),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Could not enable CPU profiling: {e}"),
        ),
    }
}

async fn heap_profile(name: &str, params: &BTreeMap<String, String>) -> Response<Vec<u8>> {
    let debug = params
        .get("debug")
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or(0);
    let started = SystemTime::now();
    let (mut stacks, dropped) = heap::snapshot();
    let mut duration = Duration::ZERO;
    if let Some(seconds) = params.get("seconds") {
        let seconds = match seconds.parse::<u64>() {
            Ok(s) if s > 0 && s <= MAX_SECONDS => s,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid value for \"seconds\" - must be a positive integer",
                );
            }
        };
        duration = Duration::from_secs(seconds);
        tokio::time::sleep(duration).await;
        stacks = delta(&stacks, heap::snapshot().0);
    }
    let symbols = match tokio::task::spawn_blocking(move || symbolize_heap(stacks)).await {
        Ok(symbols) => symbols,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    if debug != 0 {
        return ok(
            "text/plain; charset=utf-8",
            None,
            heap_text(&symbols, dropped).into_bytes(),
        );
    }
    let profile = heap_pprof(name, &symbols, started, duration);
    ok("application/octet-stream", Some(name), profile.to_gzip())
}

/// The counts of `after` minus those of `before`, stack by stack (a delta profile).
fn delta(before: &[heap::StackCounts], after: Vec<heap::StackCounts>) -> Vec<heap::StackCounts> {
    let earlier: std::collections::HashMap<&[usize], &heap::StackCounts> =
        before.iter().map(|s| (s.frames.as_slice(), s)).collect();
    after
        .into_iter()
        .filter_map(|mut s| {
            if let Some(b) = earlier.get(s.frames.as_slice()) {
                s.allocs -= b.allocs;
                s.alloc_bytes -= b.alloc_bytes;
                s.frees -= b.frees;
                s.free_bytes -= b.free_bytes;
            }
            (s.allocs != 0 || s.frees != 0).then_some(s)
        })
        .collect()
}

/// A heap stack with its frames symbolized and the allocator's own frames cut off the top.
#[derive(Debug)]
struct HeapStack {
    frames: Vec<(usize, Vec<Symbol>)>,
    counts: heap::StackCounts,
}

fn symbolize_heap(stacks: Vec<heap::StackCounts>) -> Vec<HeapStack> {
    let mut cache: std::collections::HashMap<usize, Vec<Symbol>> = std::collections::HashMap::new();
    stacks
        .into_iter()
        .map(|counts| {
            let mut frames: Vec<(usize, Vec<Symbol>)> = counts
                .frames
                .iter()
                .map(|&ip| {
                    let symbols = cache.entry(ip).or_insert_with(|| resolve(ip)).clone();
                    (ip, symbols)
                })
                .collect();
            let plumbing = frames
                .iter()
                .take_while(|(_, symbols)| {
                    symbols.is_empty() || symbols.iter().all(|s| is_allocator_frame(&s.name))
                })
                .count();
            frames.drain(..plumbing.min(frames.len().saturating_sub(1)));
            HeapStack { frames, counts }
        })
        .collect()
}

/// Frames of the allocator and of this profiler, above the code that allocated.
fn is_allocator_frame(name: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "capstan_pprof::",
        "<capstan_pprof::",
        "backtrace::",
        "<backtrace::",
        "__rust_",
        "__rdl_",
        "__rg_",
        "alloc::alloc::",
        "std::alloc::",
        "<mimalloc::",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The functions at `ip`, innermost (inlined) first.
fn resolve(ip: usize) -> Vec<Symbol> {
    let mut symbols = Vec::new();
    // `backtrace::resolve` looks up the byte before the address (a return address points
    // after its call), which is what a stack's frames want.
    backtrace::resolve(ip as *mut std::ffi::c_void, |symbol| {
        let system_name = symbol
            .name()
            .and_then(|n| n.as_str().map(str::to_owned))
            .unwrap_or_default();
        let name = symbol
            .name()
            .map(|n| format!("{n:#}"))
            .unwrap_or_else(|| format!("{ip:#x}"));
        symbols.push(Symbol {
            name,
            system_name,
            file: symbol
                .filename()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            line: symbol.lineno().unwrap_or(0),
        });
    });
    symbols
}

fn heap_pprof(
    name: &str,
    stacks: &[HeapStack],
    time: SystemTime,
    duration: Duration,
) -> profile::Profile {
    let rate = heap::rate();
    let mut builder = Builder::new(
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        ("space", "bytes"),
        i64::try_from(rate).unwrap_or(i64::MAX),
    );
    if name == "allocs" {
        builder.default_sample_type("alloc_space");
    }
    for stack in stacks {
        let c = &stack.counts;
        let (allocs, alloc_bytes) = heap::unsample(c.allocs, c.alloc_bytes, rate);
        let (inuse, inuse_bytes) =
            heap::unsample(c.allocs - c.frees, c.alloc_bytes - c.free_bytes, rate);
        let locations = stack
            .frames
            .iter()
            .map(|(ip, symbols)| builder.location(*ip as u64, symbols))
            .collect();
        builder.sample(locations, &[allocs, alloc_bytes, inuse, inuse_bytes]);
    }
    builder.finish(time, duration)
}

/// Go's legacy text heap profile (`?debug=1`): totals, then a block per stack with its
/// frames.
fn heap_text(stacks: &[HeapStack], dropped: u64) -> String {
    let rate = heap::rate();
    let mut totals = [0i64; 4];
    let mut rows = Vec::new();
    for stack in stacks {
        let c = &stack.counts;
        let (inuse, inuse_bytes) =
            heap::unsample(c.allocs - c.frees, c.alloc_bytes - c.free_bytes, rate);
        let (allocs, alloc_bytes) = heap::unsample(c.allocs, c.alloc_bytes, rate);
        for (total, v) in totals
            .iter_mut()
            .zip([inuse, inuse_bytes, allocs, alloc_bytes])
        {
            *total += v;
        }
        rows.push((inuse_bytes, inuse, allocs, alloc_bytes, stack));
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(b.3.cmp(&a.3)));
    let mut text = format!(
        "heap profile: {}: {} [{}: {}] @ heap/{}\n",
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        rate * 2
    );
    for (inuse_bytes, inuse, allocs, alloc_bytes, stack) in rows {
        let _ = write!(text, "{inuse}: {inuse_bytes} [{allocs}: {alloc_bytes}] @");
        for (ip, _) in &stack.frames {
            let _ = write!(text, " {ip:#x}");
        }
        text.push('\n');
        for (ip, symbols) in &stack.frames {
            for symbol in symbols {
                let _ = writeln!(
                    text,
                    "#\t{ip:#x}\t{}\t{}:{}",
                    symbol.name, symbol.file, symbol.line
                );
            }
        }
        text.push('\n');
    }
    let _ = writeln!(
        text,
        "\n# sampling: one allocation per {rate} bytes on average; {dropped} samples dropped"
    );
    text
}

/// `/debug/pprof/symbol`: `GET` says symbols can be looked up; `POST` (or `GET` with the
/// addresses as the query) of `0x…+0x…` answers one `<address> <function>` line per address.
fn symbol(method: &http::Method, query: &str, body: &[u8]) -> Response<Vec<u8>> {
    let request = if method == http::Method::POST {
        String::from_utf8_lossy(body).into_owned()
    } else {
        query.to_owned()
    };
    let mut text = String::from("num_symbols: 1\n");
    for word in request.split('+') {
        let Some(hex) = word.trim().strip_prefix("0x") else {
            continue;
        };
        let Ok(address) = usize::from_str_radix(hex, 16) else {
            continue;
        };
        let mut name = None;
        // The address itself, not the byte before it (see `resolve`).
        backtrace::resolve(address.wrapping_add(1) as *mut std::ffi::c_void, |symbol| {
            if name.is_none() {
                name = symbol.name().map(|n| format!("{n:#}"));
            }
        });
        if let Some(name) = name {
            let _ = writeln!(text, "{address:#x} {name}");
        }
    }
    ok("text/plain; charset=utf-8", None, text.into_bytes())
}
