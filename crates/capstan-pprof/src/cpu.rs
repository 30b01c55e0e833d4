//! CPU profiles: every thread's stack sampled 100 times per second of CPU time it uses
//! (SIGPROF, through TiKV's `pprof` crate), for a given time, then written as Go's CPU
//! profiles are (`samples/count` and `cpu/nanoseconds`, period 10 ms). One profile runs at a
//! time, as in Go.

use std::time::{Duration, SystemTime};

use crate::profile::{Builder, Profile, Symbol};

/// Samples per second of CPU time (Go's rate).
pub const HZ: i32 = 100;

/// Why no profile was taken.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cpu profiling already in use")]
    InUse,
    #[error("{0}")]
    Profiler(String),
}

/// Profiles the whole process for `duration`.
pub async fn profile(duration: Duration) -> Result<Profile, Error> {
    let started = SystemTime::now();
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(HZ)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| match e {
            pprof::Error::Running => Error::InUse,
            other => Error::Profiler(other.to_string()),
        })?;
    tokio::time::sleep(duration).await;
    let taken = started.elapsed().unwrap_or(duration);
    // Symbolizing reads debug information: off the async workers.
    tokio::task::spawn_blocking(move || {
        let report = guard
            .report()
            .build()
            .map_err(|e| Error::Profiler(e.to_string()))?;
        drop(guard);
        Ok(to_profile(&report, started, taken))
    })
    .await
    .map_err(|e| Error::Profiler(e.to_string()))?
}

fn to_profile(report: &pprof::Report, started: SystemTime, taken: Duration) -> Profile {
    let period = 1_000_000_000 / i64::from(HZ);
    let mut builder = Builder::new(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds"),
        period,
    );
    for (frames, &count) in &report.data {
        let locations = frames
            .frames
            .iter()
            .map(|frame| {
                let symbols: Vec<Symbol> = frame
                    .iter()
                    .map(|s| Symbol {
                        name: s.name(),
                        system_name: s.sys_name().into_owned(),
                        file: s
                            .filename
                            .as_ref()
                            .map(|f| f.display().to_string())
                            .unwrap_or_default(),
                        line: s.lineno.unwrap_or(0),
                    })
                    .collect();
                builder.location(0, &symbols)
            })
            .collect();
        let count = count as i64;
        builder.sample(locations, &[count, count * period]);
    }
    builder.finish(started, taken)
}
