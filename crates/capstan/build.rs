//! Stamps the binary with the commit it is built from and the time of the build, which
//! `/version` reports as `gitCommit`, `gitTreeState` and `buildDate` (clients and upstream's
//! `kubectl version` spec parse them). Only this leaf crate reruns it when the checkout moves.

use std::path::PathBuf;
use std::process::Command;

/// This crate's folder, as cargo gives it to the running script: the build script's binary is
/// shared by checkouts of the workspace at other paths (cargo leaves workspace paths out of
/// its hashes), so the path it was compiled in may be another checkout's, or gone.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(manifest_dir())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        // Said, so that an empty stamp can be traced to its cause.
        Ok(out) => {
            let message = String::from_utf8_lossy(&out.stderr);
            if !message.trim().is_empty() {
                println!("cargo:warning=git {}: {}", args.join(" "), message.trim());
            }
            None
        }
        Err(error) => {
            println!("cargo:warning=git {}: {error}", args.join(" "));
            None
        }
    }
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let state = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => "clean",
        Some(_) => "dirty",
        None => "",
    };
    // SOURCE_DATE_EPOCH makes the stamp reproducible; otherwise the build's own time.
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
        });
    println!("cargo:rustc-env=CAPSTAN_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=CAPSTAN_GIT_TREE_STATE={state}");
    println!("cargo:rustc-env=CAPSTAN_BUILD_DATE={}", rfc3339(epoch));
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // Rerun when HEAD moves (a commit, a checkout) or the index changes (a staged edit).
    let mut watched = vec![
        "HEAD".to_owned(),
        "index".to_owned(),
        "packed-refs".to_owned(),
    ];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for file in watched {
        // When git cannot answer (not installed yet, a repository it refuses to read), watch
        // the workspace's `.git` directly: a stamp left empty must not stick once git works.
        let path = match git(&["rev-parse", "--git-path", &file]) {
            Some(path) => manifest_dir().join(path),
            None => manifest_dir().join("../../.git").join(&file),
        };
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC), the form Go's `buildDate` takes.
fn rfc3339(epoch: i64) -> String {
    let (days, secs) = (epoch.div_euclid(86_400), epoch.rem_euclid(86_400));
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}
