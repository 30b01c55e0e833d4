//! Every served resource's registry, in one table: the handlers, the authorizers, admission
//! plugins and the server's own reconcilers find registries here, without the HTTP layer.
//!
//! The built-in resources are fixed when the table is made; custom resources come and go at
//! run time as their CustomResourceDefinitions are established and deleted
//! ([`Registries::set_custom`]), and are found through the same [`Registries::get`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};

use capstan_api::catalog::{self, Resource};
use capstan_api::custom::Declared;
use capstan_api::openapi::custom::{CustomKind, Published, publish};
use capstan_store::Store;

use super::cache::Caches;
use super::{Convert, Registry};

/// The registries of every resource served, keyed by (group, version, plural).
pub(crate) struct Registries {
    by_resource: HashMap<(&'static str, &'static str, &'static str), Arc<Registry>>,
    custom: RwLock<Custom>,
    /// The OpenAPI documents with the custom resources served now, built at the first request
    /// after a change.
    openapi: Mutex<Option<Arc<Published>>>,
    store: Store,
    /// The table itself, which conversion webhooks resolve their Services through.
    me: Weak<Registries>,
    /// The watch caches the registries read from; they live as long as the table.
    caches: Arc<Caches>,
}

/// The custom resources served, by the CRD that declares them.
#[derive(Default)]
struct Custom {
    /// What each CRD serves.
    by_crd: BTreeMap<String, Served>,
}

/// What one CRD serves.
struct Served {
    /// The CRD's generation its resources were declared from.
    generation: i64,
    /// The registries of its served versions.
    registries: Vec<Arc<Registry>>,
    /// What their OpenAPI documents are published from.
    published: Vec<CustomKind>,
    /// Whether objects may be stored in other versions than the storage version.
    mixed_storage: bool,
}

/// What a custom resource's OpenAPI documents are published from.
fn published(declared: &Declared) -> CustomKind {
    CustomKind {
        resource: declared.resource,
        list_kind: declared.list_kind.clone(),
        schema: declared
            .schema
            .as_ref()
            .and_then(|s| serde_json::to_value(s.as_ref()).ok()),
    }
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("resources", &self.by_resource.len())
            .finish_non_exhaustive()
    }
}

impl Registries {
    /// A registry over `store` for every catalogued resource, with its strategy, one watch cache
    /// per stored kind (versions served by conversion share it). `write_hooks` gives a
    /// resource's write hooks, if it has some ([`Registry::with_write_hooks`]); `me` is the
    /// table's own `Arc` (made with `Arc::new_cyclic`).
    pub(crate) fn new(
        store: &Store,
        write_hooks: &dyn Fn(&'static Resource) -> Option<Arc<dyn super::WriteHooks>>,
        me: Weak<Registries>,
    ) -> Self {
        let caches = Caches::start(
            store.clone(),
            catalog::resources().filter(|r| r.is_stored_version()),
        );
        let by_resource = catalog::resources()
            .map(|r| {
                let mut registry = Registry::new(r, (r.strategy)(), store.clone())
                    .with_cache(caches.cache(&r.storage_key_prefix()));
                if let Some(hooks) = write_hooks(r) {
                    registry = registry.with_write_hooks(hooks);
                }
                ((r.group, r.version, r.plural), Arc::new(registry))
            })
            .collect();
        Registries {
            by_resource,
            custom: RwLock::default(),
            openapi: Mutex::default(),
            store: store.clone(),
            me,
            caches,
        }
    }

    /// How many objects each built-in resource stores, as upstream's `apiserver_storage_objects`
    /// labels them (`pods`, `deployments.apps`); -1 while its watch cache loads.
    pub(crate) fn object_counts(&self) -> Vec<(String, i64)> {
        catalog::resources()
            .filter(|r| r.is_stored_version())
            .map(|r| {
                let label = if r.group.is_empty() {
                    r.plural.to_owned()
                } else {
                    format!("{}.{}", r.plural, r.group)
                };
                let count = self
                    .caches
                    .cache(&r.storage_key_prefix())
                    .and_then(|cache| cache.len())
                    .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
                (label, count)
            })
            .collect()
    }

    /// The registry serving `plural` of `group`/`version`: a built-in resource or a custom one.
    pub(crate) fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Registry>> {
        if let Some(resource) = catalog::lookup(group, version, plural) {
            return self
                .by_resource
                .get(&(resource.group, resource.version, resource.plural))
                .cloned();
        }
        self.custom_find(|r| (r.group, r.version, r.plural) == (group, version, plural))
    }

    /// The registry of the custom resource served now that `matches`.
    pub(crate) fn custom_find(&self, matches: impl Fn(&Resource) -> bool) -> Option<Arc<Registry>> {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        custom
            .by_crd
            .values()
            .flat_map(|served| &served.registries)
            .find(|r| matches(r.resource))
            .cloned()
    }

    /// The registry serving objects of `kind` in `group`/`version` (a built-in or a custom
    /// kind; a ValidatingAdmissionPolicy names its parameters' kind so).
    pub(crate) fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<Registry>> {
        if let Some(resource) =
            catalog::resources().find(|r| (r.group, r.version, r.kind) == (group, version, kind))
        {
            return self.get(resource.group, resource.version, resource.plural);
        }
        self.custom_find(|r| (r.group, r.version, r.kind) == (group, version, kind))
    }

    /// The registries of the resources equivalent to `resource` (upstream's
    /// `EquivalentResourcesFor`): the other versions and groups serving the same stored
    /// objects (sharing its storage key prefix), built-in ones in the catalog's order and a
    /// custom resource's versions in its CRD's order, each serving `subresource` when one is
    /// given; `resource` itself is left out.
    pub(crate) fn equivalents(&self, resource: &Resource, subresource: &str) -> Vec<Arc<Registry>> {
        // Called for every webhook and policy a request's own resource does not match: the
        // storage prefixes are compared as they are, without making the keys.
        let equivalent = |r: &Resource| {
            r != resource
                && r.storage_prefix == resource.storage_prefix
                && (subresource.is_empty() || r.subresource(subresource).is_some())
        };
        let mut found: Vec<Arc<Registry>> = catalog::resources()
            .filter(|r| equivalent(r))
            .filter_map(|r| {
                self.by_resource
                    .get(&(r.group, r.version, r.plural))
                    .cloned()
            })
            .collect();
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        found.extend(
            custom
                .by_crd
                .values()
                .flat_map(|served| &served.registries)
                .filter(|r| equivalent(r.resource))
                .cloned(),
        );
        found
    }

    /// The registry of a core (`v1`) resource.
    pub(crate) fn core(&self, plural: &str) -> Option<Arc<Registry>> {
        self.get("", "v1", plural)
    }

    /// The table, for what must resolve Services through it later (conversion webhooks).
    pub(crate) fn weak(&self) -> Weak<Registries> {
        self.me.clone()
    }

    /// Serves the custom resources `declared` for the CRD `crd` in place of what it served
    /// before (nothing, for an empty list). Its versions share one watch cache, added with the
    /// first declaration and dropped with the last, and the conversion webhook `webhook` makes
    /// (called only when the registries are made again).
    pub(crate) fn set_custom(
        &self,
        crd: &str,
        declared: &[Declared],
        webhook: impl FnOnce() -> Option<Arc<dyn Convert>>,
    ) {
        let generation = declared.first().map_or(0, |d| d.generation);
        let mut custom = self.custom.write().unwrap_or_else(|e| e.into_inner());
        if declared.is_empty() {
            if let Some(served) = custom.by_crd.remove(crd) {
                if let Some(registry) = served.registries.first() {
                    self.caches.remove(&registry.resource.storage_key_prefix());
                }
                drop(custom);
                self.openapi_changed();
            }
            return;
        }
        // Each pass of the CRD controllers declares every CRD again: keep what is unchanged.
        if let Some(served) = custom.by_crd.get(crd)
            && served.generation == generation
            && served.mixed_storage == declared.iter().any(|d| d.mixed_storage)
            && served.registries.len() == declared.len()
            && served.registries.iter().zip(declared).all(|(r, d)| {
                std::ptr::eq(r.resource, d.resource) && r.deprecation() == d.deprecation.as_deref()
            })
        {
            return;
        }
        // One conversion webhook client (and its connections) for the CRD's versions.
        let webhook = webhook();
        // The versions share the objects, kept in one cache in the storage version.
        let cache = declared.first().map(|d| {
            self.caches.add(
                &d.resource.storage_key_prefix(),
                d.resource.kind,
                &d.storage_api_version,
            )
        });
        let registries = declared
            .iter()
            .map(|d| {
                let registry = Registry::new(d.resource, d.strategy.clone(), self.store.clone())
                    .stored_as(&d.storage_api_version, webhook.clone(), d.mixed_storage)
                    .deprecated(d.deprecation.as_deref())
                    .with_cache(cache.clone());
                Arc::new(registry)
            })
            .collect();
        let published = declared.iter().map(published).collect();
        custom.by_crd.insert(
            crd.to_owned(),
            Served {
                generation,
                registries,
                published,
                mixed_storage: declared.iter().any(|d| d.mixed_storage),
            },
        );
        // Not under the table's lock: building the documents takes it after theirs.
        drop(custom);
        self.openapi_changed();
    }

    /// Drops the OpenAPI documents built for the custom resources served before.
    fn openapi_changed(&self) {
        *self.openapi.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The OpenAPI documents to serve: the built-in ones and those of the custom resources
    /// served now.
    pub(crate) fn openapi(&self) -> Arc<Published> {
        let mut openapi = self.openapi.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(published) = openapi.as_ref() {
            return published.clone();
        }
        let kinds: Vec<CustomKind> = {
            let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
            custom
                .by_crd
                .values()
                .flat_map(|served| served.published.iter().cloned())
                .collect()
        };
        let published = Arc::new(publish(kinds));
        *openapi = Some(published.clone());
        published
    }

    /// Marks the resources of CRD `crd` as being deleted (creates refused) or not.
    pub(crate) fn set_custom_terminating(&self, crd: &str, terminating: bool) {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        if let Some(served) = custom.by_crd.get(crd) {
            for registry in &served.registries {
                registry.set_terminating(terminating);
            }
        }
    }

    /// The names of the CRDs whose resources are served.
    pub(crate) fn custom_definitions(&self) -> Vec<String> {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        custom.by_crd.keys().cloned().collect()
    }

    /// The custom resources served.
    pub(crate) fn custom_resources(&self) -> Vec<&'static Resource> {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        custom
            .by_crd
            .values()
            .flat_map(|served| &served.registries)
            .map(|r| r.resource)
            .collect()
    }
}
