//! Fixtures the unit tests share: a store on a fresh SQLite file, and an API over it with its
//! default objects, as a new server makes them.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use capstan_store::Store;

use crate::handlers::resource::Api;
use crate::registry::services::Cidr;

/// A store on a new SQLite file in `dir`.
pub(crate) async fn sqlite(dir: &Path) -> Store {
    Store::sqlite(capstan_store::sqlite::SqliteConfig::new(
        dir.join("state.db"),
    ))
    .await
    .unwrap()
}

/// An API over a new SQLite store in `dir`, Services in 10.43.0.0/16, with the default objects
/// a new server writes (the default StorageClass too with `default_class`); and the store.
pub(crate) async fn bootstrapped(dir: &Path, default_class: bool) -> (Api, Store) {
    let store = sqlite(dir).await;
    let api = Api::with_services(&store, Cidr::parse("10.43.0.0/16").unwrap());
    crate::bootstrap::ensure_defaults(api.registries(), api.service_cidr(), 6443, default_class)
        .await
        .unwrap();
    (api, store)
}
