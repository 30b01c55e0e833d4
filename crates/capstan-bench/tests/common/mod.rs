//! Shared by the quick benchmark tests: run `capstan-bench` against the `capstan` binary cargo
//! built beside it (`cargo test --workspace` and `scripts/test` build it; with
//! `-p capstan-bench` alone, build it first with `cargo build -p capstan`).

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The server binary beside the bench binary.
pub fn server_binary() -> PathBuf {
    let server = Path::new(env!("CARGO_BIN_EXE_capstan-bench")).with_file_name("capstan");
    assert!(
        server.is_file(),
        "no server binary at {}: build it with `cargo build -p capstan`",
        server.display()
    );
    server
}

/// Runs `capstan-bench ARGS --server <capstan> EXTRA`; its stdout, once it succeeded.
pub fn run_bench(args: &[&str], extra: &[&std::ffi::OsStr]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_capstan-bench"))
        .args(args)
        .arg("--server")
        .arg(server_binary())
        .args(extra)
        .output()
        .expect("run capstan-bench");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// The first line of `stdout` starting with `prefix` (a Markdown table row), split into its
/// trimmed cells: the first, before the leading `|`, is empty. Fails the test if there is none.
pub fn row_cells<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    let row = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row starting with {prefix:?}:\n{stdout}"));
    row.split('|').map(str::trim).collect()
}
