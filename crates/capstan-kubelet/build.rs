//! Compiles the sandbox (pause) program, `pause/pause.rs`, into `$OUT_DIR/pause`; `images.rs`
//! embeds it. The program is freestanding (no libc, no std) and static, built with the same
//! `rustc` and for the same target as this crate: see the file for what it does.

use std::env;
use std::path::PathBuf;
use std::process::{Command, exit};

const SOURCE: &str = "pause/pause.rs";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = var("TARGET");
    let host = var("HOST");
    let out = PathBuf::from(var("OUT_DIR")).join("pause");
    let source = PathBuf::from(var("CARGO_MANIFEST_DIR")).join(SOURCE);

    let arch = var("CARGO_CFG_TARGET_ARCH");
    let os = var("CARGO_CFG_TARGET_OS");
    if os != "linux" || !matches!(arch.as_str(), "x86_64" | "aarch64") {
        fail(&format!(
            "capstan-kubelet embeds a sandbox (pause) program written for Linux on x86_64 or \
             aarch64; the target {target} is {os} on {arch}"
        ));
    }

    let mut command = Command::new(&rustc);
    command
        .arg("--edition=2024")
        .arg("--crate-type=bin")
        .arg("--crate-name=pause")
        .arg("--target")
        .arg(&target)
        .args(["-C", "opt-level=2"])
        .args(["-C", "debuginfo=0"])
        .args(["-C", "codegen-units=1"])
        .args(["-C", "panic=abort"])
        .args(["-C", "relocation-model=static"])
        .args(["-C", "target-feature=+crt-static"])
        .args(["-C", "link-arg=-nostartfiles"])
        .args(["-C", "link-arg=-nostdlib"])
        .args(["-C", "link-arg=-static"])
        .args(["-C", "strip=symbols"]);
    // The linker Cargo resolved for the target (`target.<triple>.linker`), if one is configured.
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        command.arg("-C").arg({
            let mut arg = std::ffi::OsString::from("linker=");
            arg.push(linker);
            arg
        });
    }
    command.arg(&source).arg("-o").arg(&out);

    let output = match command.output() {
        Ok(output) => output,
        Err(err) => fail(&format!("cannot run {}: {err}", rustc.to_string_lossy())),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let cross = if target == host {
            String::new()
        } else {
            format!(
                "\n\nThis is a cross build (host {host}, target {target}): the pause program needs \
                 the target's standard library (`rustup target add {target}`) and a linker for \
                 it (`target.{target}.linker` in Cargo's configuration, e.g. a C compiler for \
                 {target})."
            )
        };
        fail(&format!(
            "compiling the sandbox program {} for {target} failed ({}):\n{stderr}{cross}",
            source.display(),
            output.status
        ));
    }
    for line in stderr.lines().filter(|line| !line.trim().is_empty()) {
        println!("cargo:warning=pause.rs: {line}");
    }
}

fn var(name: &str) -> String {
    match env::var(name) {
        Ok(value) => value,
        Err(err) => fail(&format!(
            "the environment variable {name} Cargo sets: {err}"
        )),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    exit(1)
}
