//! The shared storage conformance suite against the SQLite backend, one fresh database per test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use capstan_store::conformance::{Options, TestStore};
use capstan_store::sqlite::SqliteConfig;

async fn sqlite_store(options: Options) -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = SqliteConfig {
        watch_buffer: options.watch_buffer,
        ..SqliteConfig::new(dir.path().join("state.db"))
    };
    let store = capstan_store::Store::sqlite(config)
        .await
        .expect("open sqlite store");
    TestStore::new(store, dir)
}

capstan_store::conformance_tests!(sqlite_store);
