//! The shared storage conformance suite against a real etcd started for each test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use capstan_store::conformance::{Options, TestStore};
async fn etcd_store(options: Options) -> TestStore {
    let server = capstan_testkit::EtcdServer::start().expect("start etcd");
    let config = capstan_store::etcd::EtcdConfig {
        endpoints: vec![server.endpoint()],
        prefix: "/capstan-test".into(),
        watch_buffer: options.watch_buffer,
    };
    let store = capstan_store::Store::etcd(config)
        .await
        .expect("connect to etcd");
    TestStore::new(store, server)
}
capstan_store::conformance_tests!(etcd_store);
