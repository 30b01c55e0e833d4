//! The admission that runs inside writes ([`crate::registry::Admission`]): upstream's
//! LimitRanger (defaults, then limits; [`crate::limitranges`]), ServiceAccount
//! ([`crate::serviceaccount::admission`]), Priority ([`crate::priority`]),
//! DefaultTolerationSeconds ([`crate::tolerations`]) and ResourceQuota ([`crate::quota`])
//! plugins, in upstream's order, for every create and update of a namespaced object through the
//! main endpoint (POST, PUT, PATCH and server-side apply, including the ones that create).
//!
//! Both read their objects (LimitRanges, ResourceQuotas) from the watch cache as it stands, as
//! upstream's plugins read their informers; a namespace the cache has none for is looked up in
//! the store, and that answer is used for 30 s (upstream's `liveLookupCache`), so an object
//! created a moment ago is not missed while the cache catches up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_api::catalog::Resource;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::registry::{ListOptions, Registry};
use crate::status::ApiError;

/// How long a store lookup of a namespace the cache had nothing for stands in for the cache.
const LIVE_TTL: Duration = Duration::from_secs(30);

/// Past this many remembered lookups, expired ones are dropped.
const LIVE_ENTRIES: usize = 10_000;

/// Store lookups by namespace: when each was made, and what it found.
type LiveLookups = HashMap<String, (Instant, Arc<Vec<Value>>)>;

/// The objects of one namespaced resource in a namespace, as admission reads them.
#[derive(Debug)]
pub(crate) struct NamespaceLookup {
    registry: Arc<Registry>,
    live: Mutex<LiveLookups>,
}

impl NamespaceLookup {
    /// Lookups of `registry`'s objects.
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        NamespaceLookup {
            registry,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The registry looked in.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The objects in `namespace`: the cache's, or when it has none, a recent store lookup.
    /// With `consistent`, a namespace the cache has objects for is read consistently (which
    /// waits for the cache to hold every write made before the call).
    pub(crate) async fn list(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<Arc<Vec<Value>>, ApiError> {
        let cached = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let list = self.registry.list(Some(namespace), &cached).await?;
        if !list.items.is_empty() {
            let list = if consistent {
                self.registry
                    .list(Some(namespace), &ListOptions::default())
                    .await?
            } else {
                list
            };
            return Ok(Arc::new(
                list.items.iter().map(|item| item.object()).collect(),
            ));
        }
        let now = Instant::now();
        if let Some((at, items)) = self.lock().get(namespace)
            && now.duration_since(*at) < LIVE_TTL
        {
            return Ok(items.clone());
        }
        let items: Vec<Value> = self
            .registry
            .list(Some(namespace), &ListOptions::default())
            .await?
            .items
            .iter()
            .map(|item| item.object())
            .collect();
        let items = Arc::new(items);
        let mut live = self.lock();
        if live.len() >= LIVE_ENTRIES {
            live.retain(|_, (at, _)| now.duration_since(*at) < LIVE_TTL);
        }
        live.insert(namespace.to_owned(), (now, items.clone()));
        Ok(items)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveLookups> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The namespace of an object being admitted (empty for cluster-scoped ones).
pub(crate) fn namespace_of(object: &Value) -> &str {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The admission chain of writes: LimitRanger, ServiceAccount, Priority,
/// DefaultTolerationSeconds, then ResourceQuota.
#[derive(Debug)]
pub(crate) struct Chain {
    limits: Option<crate::limitranges::LimitRanger>,
    service_accounts: Option<crate::serviceaccount::admission::ServiceAccountAdmission>,
    priority_classes: Option<Arc<Registry>>,
    quota: Option<crate::quota::QuotaAdmission>,
}

impl Chain {
    /// The chain over the LimitRange, ServiceAccount, PriorityClass and ResourceQuota
    /// registries (a plugin whose registry is missing is left out).
    pub(crate) fn new(
        limit_ranges: Option<Arc<Registry>>,
        service_accounts: Option<Arc<Registry>>,
        priority_classes: Option<Arc<Registry>>,
        quotas: Option<Arc<Registry>>,
    ) -> Self {
        Chain {
            limits: limit_ranges.map(crate::limitranges::LimitRanger::new),
            service_accounts: service_accounts
                .map(crate::serviceaccount::admission::ServiceAccountAdmission::new),
            priority_classes,
            quota: quotas.map(crate::quota::QuotaAdmission::new),
        }
    }
}

/// Whether `resource` is the core group's pods.
fn is_pods(resource: &Resource) -> bool {
    resource.group.is_empty() && resource.plural == "pods"
}

impl crate::registry::Admission for Chain {
    fn mutate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            if let Some(limits) = &self.limits {
                limits.mutate(resource, object).await?;
            }
            if is_pods(resource) {
                if let Some(accounts) = &self.service_accounts {
                    accounts.mutate(object).await?;
                }
                if let Some(classes) = &self.priority_classes {
                    crate::priority::admit(classes, object).await?;
                }
                crate::tolerations::admit(object);
            }
            Ok(())
        })
    }

    fn validate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            if let Some(limits) = &self.limits {
                limits.validate(resource, object, old).await?;
            }
            if old.is_none()
                && is_pods(resource)
                && let Some(accounts) = &self.service_accounts
            {
                accounts.validate(object).await?;
            }
            if let Some(quota) = &self.quota {
                quota.admit(resource, object, old, dry_run).await?;
            }
            Ok(())
        })
    }
}
