//! The Python test scripts of `tests/python/`: each is run with its arguments, its output kept,
//! and killed if it hangs.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a script may run before it counts as hung (they take seconds).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// The path of `tests/python/<name>`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// Runs the script `tests/python/<name>` with `args`: its exit status (`None` when it was
/// killed after [`SCRIPT_TIMEOUT`]) and its stdout followed by its stderr.
pub fn run_script(name: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new("python3")
        .arg(script(name))
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut output = stdout.join().unwrap();
    let errors = stderr.join().unwrap();
    if !errors.is_empty() {
        output.push_str("--- stderr ---\n");
        output.push_str(&errors);
    }
    match status {
        Some(status) => (status.code(), output),
        None => {
            output.push_str(&format!("--- killed after {SCRIPT_TIMEOUT:?} ---\n"));
            (None, output)
        }
    }
}
