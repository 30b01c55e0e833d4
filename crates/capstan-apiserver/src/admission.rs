//! The admission that runs inside writes ([`crate::registry::Admission`]): the RBAC
//! escalation check ([`crate::escalation`]) for roles and bindings, and upstream's
//! LimitRanger (defaults, then limits; [`crate::limitranges`]), ServiceAccount
//! ([`crate::serviceaccount::admission`]), NodeRestriction ([`crate::noderestriction`]),
//! Priority ([`crate::priority`]), DefaultTolerationSeconds ([`crate::tolerations`]) and
//! ResourceQuota ([`crate::quota`]) plugins, in upstream's order, for every create and update of
//! a namespaced object through the main endpoint (POST, PUT, PATCH and server-side apply,
//! including the ones that create). NodeRestriction also runs for a node's writes to
//! cluster-scoped objects and through subresources (a Node, its status, a pod's status), and
//! the API runs it itself for a node's deletes, evictions, bindings and TokenRequests, which do
//! not pass through here.
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

use crate::auth::User;
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

/// The admission chain of writes: LimitRanger, ServiceAccount, NodeRestriction, Priority,
/// DefaultTolerationSeconds, then ResourceQuota. A request's writes run it as that request's
/// user ([`Chain::for_request`]).
#[derive(Debug)]
pub(crate) struct Chain {
    limits: Option<crate::limitranges::LimitRanger>,
    service_accounts: Option<crate::serviceaccount::admission::ServiceAccountAdmission>,
    nodes: crate::noderestriction::NodeRestriction,
    priority_classes: Option<Arc<Registry>>,
    quota: Option<crate::quota::QuotaAdmission>,
}

/// The registries the admission plugins read (a plugin whose registry is missing is left out;
/// NodeRestriction then finds no pod or node it looks up).
#[derive(Debug, Default)]
pub(crate) struct Registries {
    /// LimitRanges.
    pub limit_ranges: Option<Arc<Registry>>,
    /// ServiceAccounts.
    pub service_accounts: Option<Arc<Registry>>,
    /// Pods (NodeRestriction).
    pub pods: Option<Arc<Registry>>,
    /// Nodes (NodeRestriction).
    pub nodes: Option<Arc<Registry>>,
    /// PriorityClasses.
    pub priority_classes: Option<Arc<Registry>>,
    /// ResourceQuotas.
    pub quotas: Option<Arc<Registry>>,
}

impl Chain {
    /// The chain over these registries.
    pub(crate) fn new(registries: Registries) -> Self {
        Chain {
            limits: registries
                .limit_ranges
                .map(crate::limitranges::LimitRanger::new),
            service_accounts: registries
                .service_accounts
                .map(crate::serviceaccount::admission::ServiceAccountAdmission::new),
            nodes: crate::noderestriction::NodeRestriction::new(registries.pods, registries.nodes),
            priority_classes: registries.priority_classes,
            quota: registries.quotas.map(crate::quota::QuotaAdmission::new),
        }
    }

    /// NodeRestriction, for the writes that do not go through the registry's admission
    /// (deletes, evictions, bindings, TokenRequests).
    pub(crate) fn node_restriction(&self) -> &crate::noderestriction::NodeRestriction {
        &self.nodes
    }

    /// The admission a write by `user` through `subresource` of `resource` runs inside the
    /// registry, if any: the whole chain for the main endpoint of a namespaced resource (the
    /// other plugins have nothing to say about cluster-scoped objects or subresources), and
    /// NodeRestriction wherever the user is a node.
    ///
    /// Writes of RBAC roles and bindings by a user are also checked for escalation
    /// ([`crate::escalation`]) with `authorizer`; `name` is the object's name in the request's
    /// path (empty for a create).
    pub(crate) fn for_request(
        self: &Arc<Self>,
        resource: &Resource,
        subresource: Option<&str>,
        user: Option<&User>,
        authorizer: Option<&Arc<crate::authz::Authorizer>>,
        name: &str,
    ) -> Option<Arc<dyn crate::registry::Admission>> {
        let node_user = user
            .filter(|u| crate::nodeauthz::node_identity(u).is_some())
            .cloned();
        let plugins = subresource.is_none() && resource.namespaced;
        let escalation = match (user, authorizer) {
            (Some(user), Some(authorizer))
                if subresource.is_none() && crate::escalation::applies_to(resource) =>
            {
                Some(crate::escalation::EscalationCheck {
                    user: user.clone(),
                    authorizer: authorizer.clone(),
                    request_name: name.to_owned(),
                })
            }
            _ => None,
        };
        (plugins || node_user.is_some() || escalation.is_some()).then(|| {
            Arc::new(RequestAdmission {
                chain: self.clone(),
                plugins,
                node_user,
                escalation,
                subresource: subresource.unwrap_or_default().to_owned(),
            }) as Arc<dyn crate::registry::Admission>
        })
    }
}

/// Whether `resource` is the core group's pods.
fn is_pods(resource: &Resource) -> bool {
    resource.group.is_empty() && resource.plural == "pods"
}

/// The admission of one request's write.
#[derive(Debug)]
struct RequestAdmission {
    chain: Arc<Chain>,
    /// Whether the plugins other than NodeRestriction run (the main endpoint of a namespaced
    /// resource).
    plugins: bool,
    /// The request's user, when it is a node (NodeRestriction runs).
    node_user: Option<User>,
    /// The RBAC escalation check, for a user's writes of roles and bindings.
    escalation: Option<crate::escalation::EscalationCheck>,
    /// The subresource written through (empty for the main endpoint).
    subresource: String,
}

impl RequestAdmission {
    /// What NodeRestriction is asked about `object`, written through this request.
    fn node_write<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        operation: crate::noderestriction::Operation<'a>,
    ) -> crate::noderestriction::Write<'a> {
        crate::noderestriction::Write {
            group: resource.group,
            resource: resource.plural,
            subresource: &self.subresource,
            namespace: namespace_of(object),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            operation,
        }
    }
}

impl crate::registry::Admission for RequestAdmission {
    fn authorize_grants<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            match &self.escalation {
                Some(check) => check.check(resource, object, old).await,
                None => Ok(()),
            }
        })
    }

    fn mutate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let chain = &self.chain;
            if self.plugins {
                if let Some(limits) = &chain.limits {
                    limits.mutate(resource, object).await?;
                }
                if is_pods(resource)
                    && let Some(accounts) = &chain.service_accounts
                {
                    accounts.mutate(object).await?;
                }
            }
            if let Some(user) = &self.node_user {
                let write = self.node_write(
                    resource,
                    object,
                    crate::noderestriction::Operation::Create(object),
                );
                chain.nodes.admit(user, &write).await?;
            }
            if self.plugins && is_pods(resource) {
                if let Some(classes) = &chain.priority_classes {
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
            let chain = &self.chain;
            // A create was admitted by NodeRestriction when it was mutated; an update is here.
            if let (Some(user), Some(old)) = (&self.node_user, old) {
                let write = self.node_write(
                    resource,
                    object,
                    crate::noderestriction::Operation::Update { new: object, old },
                );
                chain.nodes.admit(user, &write).await?;
            }
            if !self.plugins {
                return Ok(());
            }
            if let Some(limits) = &chain.limits {
                limits.validate(resource, object, old).await?;
            }
            if old.is_none()
                && is_pods(resource)
                && let Some(accounts) = &chain.service_accounts
            {
                accounts.validate(object).await?;
            }
            if let Some(quota) = &chain.quota {
                quota.admit(resource, object, old, dry_run).await?;
            }
            Ok(())
        })
    }
}
