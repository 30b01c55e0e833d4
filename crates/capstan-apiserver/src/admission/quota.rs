//! Upstream's ResourceQuota admission plugin: a namespaced object is created (or a service or
//! claim changed) only if it fits every quota of its namespace that constrains it, and its usage
//! is added to those quotas' `status.used` before the object is stored, so that racing
//! requests cannot both take the last of a quota. The evaluation itself is
//! [`capstan_api::quota::check_request`]; this module reads the quotas and records the usage.
//!
//! As upstream's plugin:
//! - a namespace's quotas are read consistently when the watch cache has any (where upstream
//!   reads its informer and keeps a look-aside copy of the quotas it wrote, so that it does not
//!   work from a copy older than its own last write); a namespace the cache has none for is
//!   looked up in the store (see [`crate::admission`]);
//! - each usage write is a compare-and-swap on the quota's `resourceVersion`; a quota that
//!   changed meanwhile is read again and the request checked again, up to three times, after
//!   which the conflict is the answer;
//! - a namespace's quotas are looked up in the store every time for 30 s after this server
//!   admitted a quota write there (see [`NamespaceLookup::expect_write`]), so that a quota is
//!   enforced from the moment it is stored even while the watch cache lags;
//! - a dry run is checked but records nothing;
//! - a refusal is 403 Forbidden with upstream's message, e.g. `pods "p3" is forbidden: exceeded
//!   quota: q, requested: pods=1, used: pods=2, limited: pods=2`.
//!
//! Checks within one namespace take turns in this server (upstream's evaluator works through a
//! namespace's requests in one worker), so they do not conflict with each other; they can still
//! conflict with the quota controller or another server. The usage recorded is provisional:
//! the quota controller measures it again from the objects (so a deleted object frees its
//! share).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use capstan_api::catalog::Resource;
use capstan_api::quota::{self, Denial, Evaluator, Item, Operation, Request, ResourceList};
use capstan_api::{GroupResource, StatusError};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::admission::{NamespaceLookup, namespace_of};
use crate::registry::object::meta_str;
use crate::registry::{Registry, WriteOptions};
use crate::status::ApiError;

/// How many times the quotas are read again after a write lost a race (upstream's retries).
const RETRIES: usize = 3;

/// The ResourceQuota plugin over the ResourceQuotas registry.
#[derive(Debug)]
pub(crate) struct QuotaAdmission {
    quotas: NamespaceLookup,
    /// One turn-taking lock per namespace.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A quota as read: its JSON (to write back) and its typed form (to evaluate).
struct Read {
    json: Value,
    typed: ResourceQuota,
}

/// The time deleted pods' grace periods are judged at.
fn now() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    let nanos = i32::try_from(since.subsec_nanos()).unwrap_or(0);
    Timestamp::new(seconds, nanos).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl QuotaAdmission {
    /// The plugin reading and writing quotas through `registry`.
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        QuotaAdmission {
            quotas: NamespaceLookup::new(registry),
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// The namespace's quotas. They decide what is refused and are written right after: read
    /// consistently.
    async fn quotas(&self, namespace: &str) -> Result<Vec<Read>, ApiError> {
        let listed = self.quotas.list(namespace, true).await?;
        Ok(listed
            .iter()
            .filter_map(|json| {
                let typed = serde_json::from_value(json.clone()).ok()?;
                Some(Read {
                    json: json.clone(),
                    typed,
                })
            })
            .collect())
    }

    /// Admits a create (`old` is `None`) or an update of `object`; see the module doc.
    async fn check(
        &self,
        resource: &Resource,
        object: &Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let namespace = namespace_of(object);
        let creates_namespace = resource.group.is_empty() && resource.plural == "namespaces";
        if namespace.is_empty() || creates_namespace {
            return Ok(());
        }
        if resource.group.is_empty() && resource.plural == "resourcequotas" && !dry_run {
            // The requests after this one must see the quota as soon as it is stored.
            self.quotas.expect_write(namespace);
        }
        let Some(evaluator) = Evaluator::for_resource(resource.group, resource.plural) else {
            return Ok(());
        };
        let operation = if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        };
        if !evaluator.handles(operation) {
            return Ok(());
        }
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            turns.entry(namespace.to_owned()).or_default().clone()
        };
        let _turn = turn.lock().await;
        let mut quotas = self.quotas(namespace).await?;
        if quotas.is_empty() {
            return Ok(());
        }
        let new = Typed::of(&evaluator, object)?;
        let old = old.map(|old| Typed::of(&evaluator, old)).transpose()?;
        let forbidden = |reason: &str| -> ApiError {
            StatusError::forbidden(
                GroupResource::new(resource.group, resource.plural),
                meta_str(object, "name"),
                reason,
            )
            .into()
        };
        let mut last_error = None;
        for _ in 0..=RETRIES {
            let typed: Vec<ResourceQuota> = quotas.iter().map(|q| q.typed.clone()).collect();
            let request = Request {
                evaluator: &evaluator,
                operation,
                item: new.item(),
                old: old.as_ref().map(Typed::item),
                now: now(),
            };
            let updates = match quota::check_request(&typed, &request) {
                Ok(updates) => updates,
                Err(Denial::Forbidden(reason)) => return Err(forbidden(&reason)),
                Err(Denial::Error(message)) => return Err(StatusError::internal(&message).into()),
            };
            if dry_run || updates.is_empty() {
                return Ok(());
            }
            let failed = self
                .record(namespace, &quotas, updates, &mut last_error)
                .await?;
            if failed.is_empty() {
                return Ok(());
            }
            // Only the quotas that changed meanwhile are checked again: the others took the
            // usage already.
            let fresh = self.quotas.registry();
            quotas = Vec::with_capacity(failed.len());
            for name in failed {
                match fresh.get(Some(namespace), &name).await {
                    Ok(json) => {
                        if let Ok(typed) = serde_json::from_value(json.clone()) {
                            quotas.push(Read { json, typed });
                        }
                    }
                    // Deleted meanwhile: it constrains nothing any more.
                    Err(error) if error.status().code() == 404 => {}
                    Err(error) => return Err(error),
                }
            }
            if quotas.is_empty() {
                return Ok(());
            }
        }
        Err(last_error.unwrap_or_else(|| {
            StatusError::internal("resource quota evaluation failed to record usage").into()
        }))
    }

    /// Writes the new usage of each quota in `updates`; the names of those that changed since
    /// they were read (their write lost the race).
    async fn record(
        &self,
        namespace: &str,
        quotas: &[Read],
        updates: BTreeMap<usize, ResourceList>,
        last_error: &mut Option<ApiError>,
    ) -> Result<Vec<String>, ApiError> {
        let registry = self.quotas.registry();
        let mut failed = Vec::new();
        for (index, used) in updates {
            let Some(read) = quotas.get(index) else {
                continue;
            };
            let name = meta_str(&read.json, "name").to_owned();
            let mut body = read.json.clone();
            body["status"]["used"] = serde_json::to_value(quota::to_api(&used))
                .map_err(|e| StatusError::internal(&e.to_string()))?;
            match registry
                .update(
                    Some(namespace),
                    &name,
                    body,
                    Some("status"),
                    &WriteOptions::default(),
                )
                .await
            {
                Ok(_) => {}
                Err(error) if matches!(error.status().code(), 404 | 409) => {
                    failed.push(name);
                    *last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(failed)
    }
}

/// An admitted object in the type its evaluator reads.
enum Typed {
    Pod(Box<Pod>),
    Service(Box<Service>),
    Claim(Box<PersistentVolumeClaim>),
    Object,
}

impl Typed {
    fn of(evaluator: &Evaluator, object: &Value) -> Result<Typed, ApiError> {
        fn decode<T: serde::de::DeserializeOwned>(object: &Value) -> Result<Box<T>, ApiError> {
            serde_json::from_value(object.clone())
                .map(Box::new)
                .map_err(|e| StatusError::internal(&e.to_string()).into())
        }
        Ok(match evaluator {
            Evaluator::Pods => Typed::Pod(decode(object)?),
            Evaluator::Services => Typed::Service(decode(object)?),
            Evaluator::Claims => Typed::Claim(decode(object)?),
            Evaluator::Objects { .. } => Typed::Object,
        })
    }

    fn item(&self) -> Item<'_> {
        match self {
            Typed::Pod(pod) => Item::Pod(pod),
            Typed::Service(service) => Item::Service(service),
            Typed::Claim(claim) => Item::Claim(claim),
            Typed::Object => Item::Object,
        }
    }
}

impl super::Plugin for QuotaAdmission {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    fn validate<'a>(&'a self, review: super::Validation<'a>) -> super::Verdict<'a> {
        Box::pin(async move {
            let super::Review { attrs, object, old } = review;
            if !attrs.main_namespaced() {
                return Ok(());
            }
            self.check(attrs.resource, object, old, attrs.dry_run).await
        })
    }
}
