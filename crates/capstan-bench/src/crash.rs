//! `capstan-bench crash-writer`: the process the SQLite crash test kills.
//!
//! Several writers create, update (compare-and-swap) and delete keys under `/crash/` and print
//! one line per acknowledged write on stdout, *after* the store acknowledged it:
//!
//! ```text
//! put <key> <mod_revision> <value>
//! del <key> <revision>
//! ```
//!
//! A compaction runs now and then, so the process may also be killed while history is being
//! purged. The test kills the process with SIGKILL at a random moment, reopens the database and
//! checks every acknowledged line against it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use capstan_store::sqlite::SqliteConfig;
use capstan_store::{Store, StoreError};

/// Flags of `crash-writer`.
#[derive(Debug, clap::Args)]
pub struct CrashWriterArgs {
    /// The SQLite database to write to (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Concurrent writers.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Keys per writer.
    #[arg(long, default_value_t = 16)]
    pub keys: usize,
    /// Compact to `current - 200` after every this many acknowledged writes of writer 0.
    #[arg(long, default_value_t = 250)]
    pub compact_every: u64,
}

/// Writes until killed (or until a write fails, which is an error).
pub async fn run(args: CrashWriterArgs) -> anyhow::Result<()> {
    let store = Store::sqlite(SqliteConfig::new(&args.db))
        .await
        .with_context(|| format!("cannot open {}", args.db.display()))?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for writer in 0..args.writers {
        let (store, out, keys) = (store.clone(), out.clone(), args.keys.max(1));
        let compact_every = (writer == 0).then_some(args.compact_every.max(1));
        tasks.push(tokio::spawn(async move {
            write_forever(store, out, writer, keys, compact_every).await
        }));
    }
    for task in tasks {
        task.await.context("writer task panicked")??;
    }
    Ok(())
}

fn say(out: &Mutex<std::io::Stdout>, line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
    out.write_fmt(line)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

async fn write_forever(
    store: Store,
    out: Arc<Mutex<std::io::Stdout>>,
    writer: usize,
    keys: usize,
    compact_every: Option<u64>,
) -> anyhow::Result<()> {
    let mut seq: u64 = 0;
    loop {
        seq += 1;
        let key = format!("/crash/{writer}/{}", seq as usize % keys);
        let value = format!("{writer}-{seq}");
        let current = store.get(&key, None).await?.kv;
        match current {
            None => match store.create(&key, value.clone()).await {
                Ok(kv) => say(&out, format_args!("put {key} {} {value}", kv.mod_revision))?,
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(error) => return Err(error.into()),
            },
            Some(kv) if seq.is_multiple_of(5) => {
                match store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(deleted) => say(&out, format_args!("del {key} {}", deleted.revision))?,
                    Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                    Err(error) => return Err(error.into()),
                }
            }
            Some(kv) => match store
                .update(&key, value.clone(), Some(kv.mod_revision))
                .await
            {
                Ok(kv) => say(&out, format_args!("put {key} {} {value}", kv.mod_revision))?,
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            },
        }
        if let Some(every) = compact_every
            && seq.is_multiple_of(every)
        {
            let current = store.current_revision().await?;
            if current > 200 {
                store.compact(current - 200).await?;
            }
        }
    }
}
