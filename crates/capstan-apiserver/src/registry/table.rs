//! Every served resource's registry, in one table: the handlers, the authorizers, admission
//! plugins and the server's own reconcilers find registries here, without the HTTP layer.

use std::collections::HashMap;
use std::sync::Arc;

use capstan_api::catalog::{self, Resource};
use capstan_store::Store;

use super::Registry;
use super::cache::Caches;

/// The registries of every resource the catalogue serves, keyed by (group, version, plural).
pub(crate) struct Registries {
    by_resource: HashMap<(&'static str, &'static str, &'static str), Arc<Registry>>,
    /// The watch caches the registries read from; they live as long as the table.
    _caches: Arc<Caches>,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("resources", &self.by_resource.len())
            .finish()
    }
}

impl Registries {
    /// A registry over `store` for every catalogued resource, with its strategy, one watch cache
    /// per stored kind (versions served by conversion share it). `begin_write` gives a
    /// resource's write hook, if it has one ([`Registry::with_begin_write`]).
    pub(crate) fn new(
        store: &Store,
        begin_write: &dyn Fn(&'static Resource) -> Option<super::BeginWrite>,
    ) -> Self {
        let caches = Caches::start(
            store.clone(),
            catalog::resources()
                .filter(|r| r.is_stored_version())
                .map(|r| (r.storage_key_prefix(), r.kind, r.api_version())),
        );
        let by_resource = catalog::resources()
            .map(|r| {
                let mut registry = Registry::new(r, (r.strategy)(), store.clone())
                    .with_cache(caches.cache(&r.storage_key_prefix()));
                if let Some(hook) = begin_write(r) {
                    registry = registry.with_begin_write(hook);
                }
                ((r.group, r.version, r.plural), Arc::new(registry))
            })
            .collect();
        Registries {
            by_resource,
            _caches: caches,
        }
    }

    /// The registry serving `resource` (a plural, or a short name or kind the catalogue
    /// resolves) of `group`/`version`.
    pub(crate) fn get(&self, group: &str, version: &str, resource: &str) -> Option<&Arc<Registry>> {
        let resource = catalog::lookup(group, version, resource)?;
        self.by_resource
            .get(&(resource.group, resource.version, resource.plural))
    }

    /// The registry of a core (`v1`) resource.
    pub(crate) fn core(&self, plural: &str) -> Option<&Arc<Registry>> {
        self.get("", "v1", plural)
    }
}
