//! The Go load driver (`go/getload`): closed-loop GETs through Go's net/http HTTP/2 client, the
//! transport client-go uses, for `capstan-bench security --auth-protocols go-h2`.
//!
//! hyper's h2 (like nghttp2 and curl) never adds `Authorization` to HPACK's dynamic table, so
//! every request carries the whole token as a Huffman-coded literal that the server decodes
//! again. Go's encoder indexes it: the token crosses a connection once. Only a Go client shows
//! what a token costs Kubernetes' own clients, so the driver's source is built into this binary,
//! written to the run's directory and compiled with the machine's Go toolchain (`--go`, else
//! `go` on PATH, else Debian's `/usr/lib/go-*/bin/go`) with a build cache kept between runs.
//! The program reports its counts, its own CPU time and every latency; they become a
//! [`Phase`](crate::Phase) like the Rust driver's rounds.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;
use tokio::io::AsyncBufReadExt as _;

use crate::api::{CpuMeter, ServerProcess};

const MAIN_GO: &str = include_str!("../go/getload/main.go");
const GO_MOD: &str = include_str!("../go/getload/go.mod");

/// The built driver.
pub(crate) struct GoLoad {
    binary: PathBuf,
}

/// Who the Go clients are: a client certificate or a bearer token.
pub(crate) enum GoIdentity<'a> {
    Certificate { cert: &'a Path, key: &'a Path },
    Token(&'a Path),
}

/// What the program prints.
#[derive(Deserialize)]
struct Report {
    ok: u64,
    errors: u64,
    #[serde(default)]
    first_error: Option<String>,
    elapsed_ns: u64,
    cpu_ns: u64,
    latencies_ns: Vec<u64>,
}

impl GoLoad {
    /// Writes the driver's source under `dir` and builds it with `go` (see the module doc).
    pub(crate) async fn build(dir: &Path, go: Option<&Path>) -> Result<GoLoad> {
        let go = match go {
            Some(go) => go.to_owned(),
            None => capstan_testkit::find_go().context(
                "the go-h2 protocol needs a Go toolchain (Debian: apt install golang-go), or \
                 --go PATH",
            )?,
        };
        let source = dir.join("getload");
        fs::create_dir_all(&source)?;
        fs::write(source.join("main.go"), MAIN_GO)?;
        fs::write(source.join("go.mod"), GO_MOD)?;
        let binary = source.join("getload");
        let cache = std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".cache/capstan/go-build"))
            .unwrap_or_else(|| dir.join("go-build"));
        eprintln!("[auth] building the Go driver with {}", go.display());
        let output = tokio::process::Command::new(&go)
            .args(["build", "-o"])
            .arg(&binary)
            .arg(".")
            .current_dir(&source)
            .env("GOCACHE", &cache)
            .env("GOPATH", dir.join("gopath"))
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("CGO_ENABLED", "0")
            .output()
            .await
            .with_context(|| format!("running {}", go.display()))?;
        ensure!(
            output.status.success(),
            "go build of the Go driver failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(GoLoad { binary })
    }

    /// One round: `clients` Go clients as `identity` GET `paths` (a file, one path a line) on
    /// `server` for `duration`. Returns the phase and the CPU cells (server, Go driver).
    pub(crate) async fn round(
        &self,
        server: &ServerProcess,
        ca: &Path,
        identity: &GoIdentity<'_>,
        paths: &Path,
        clients: usize,
        duration: Duration,
    ) -> Result<(crate::Phase, (String, String))> {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .arg("-server")
            .arg(server.base_url())
            .arg("-ca")
            .arg(ca)
            .arg("-paths")
            .arg(paths)
            .arg("-clients")
            .arg(clients.to_string())
            .arg("-duration")
            .arg(format!("{}ms", duration.as_millis().max(1)));
        match identity {
            GoIdentity::Certificate { cert, key } => {
                command.arg("-cert").arg(cert).arg("-key").arg(key);
            }
            GoIdentity::Token(file) => {
                command.arg("-token-file").arg(file);
            }
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("running the Go driver")?;
        let stdout = child.stdout.take().context("the Go driver's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        // The server's CPU is measured over the driver's timed phase only: from its "started"
        // line to its report.
        let started = lines.next_line().await?;
        let cpu = CpuMeter::start(&server.pid);
        let report_line = lines.next_line().await?;
        let (server_cpu, _) = cpu.finish();
        let output = child.wait_with_output().await?;
        if !output.status.success() || started.as_deref() != Some("started") {
            bail!(
                "the Go driver failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let report: Report = serde_json::from_str(report_line.as_deref().unwrap_or_default())
            .context("reading the Go driver's report")?;
        // The driver's CPU share is over its timed phase, as it measured it.
        let elapsed = Duration::from_nanos(report.elapsed_ns);
        let driver_cpu = format!(
            "{:.0}%",
            report.cpu_ns as f64 / report.elapsed_ns.max(1) as f64 * 100.0
        );
        let mut hist = crate::histogram()?;
        for latency in &report.latencies_ns {
            hist.saturating_record(*latency);
        }
        let phase = crate::Phase {
            hist,
            ok: report.ok,
            errors: report.errors,
            first_error: report.first_error.filter(|e| !e.is_empty()),
            elapsed,
        };
        Ok((phase, (server_cpu, driver_cpu)))
    }
}
