//! The admission chain: upstream's built-in admission plugins, each a [`Plugin`] registered
//! in one [`Chain`], run in upstream's order: NamespaceLifecycle ([`lifecycle`]), LimitRanger
//! ([`limitranges`]), ServiceAccount ([`serviceaccount`]), NodeRestriction
//! ([`noderestriction`]), PodSecurity ([`podsecurity`]), Priority ([`priority`]), DefaultTolerationSeconds ([`tolerations`]),
//! DefaultStorageClass, StorageObjectInUseProtection and PersistentVolumeClaimResize
//! ([`storage`]), CertificateApproval, CertificateSigning and CertificateSubjectRestriction
//! ([`certificates`]), MutatingAdmissionWebhook ([`webhook`]), ValidatingAdmissionPolicy ([`policy`]),
//! ValidatingAdmissionWebhook ([`webhook`]), ResourceQuota
//! ([`quota`]). Every plugin has two phases, as upstream's: [`Plugin::admit`]
//! (mutating) and [`Plugin::validate`] (validating), and looks at the [`Attributes`] of the
//! write to decide whether it has anything to say.
//!
//! Where it runs:
//! - creates and updates (POST, PUT, PATCH, server-side apply, through any endpoint) run it
//!   inside the registry's write ([`Chain::for_request`] gives the registry a
//!   [`crate::registry::Admission`]): the mutating phase on a new object once decoded and
//!   defaulted, the validating phase once the strategy has prepared and validated the object,
//!   just before it is stored (a write through `scale` is shown the `Scale` objects instead
//!   of the parent: [`crate::handlers::scale`]);
//! - deletes, and the subresources whose bodies are not stored (bindings, evictions,
//!   TokenRequests), run it from their handlers ([`Chain::admit`]), once per object.
//!
//! The same request admission also carries the RBAC escalation check
//! ([`crate::authz::escalation`]), which upstream's storage of roles and bindings runs, not its
//! admission. The Service's cluster IPs and node ports are not admission either, as upstream's
//! are not: the services registry allocates them in its write hook ([`crate::registry::services`]).
//!
//! Adding a plugin: a module here with a type implementing [`Plugin`], and its place in
//! [`Chain::configured`]. Plugins that take configuration read it from the admission
//! configuration file ([`config`], `--admission-control-config-file`).
//!
//! The CEL expressions of the webhooks' match conditions and of the admission policies get the
//! `authorizer` variable, decided by the server's authorizer ([`cel_authz`]).
//!
//! Plugins that read objects per namespace (LimitRanges, ResourceQuotas) use a
//! [`NamespaceLookup`]: the watch cache as it stands, as upstream's plugins read their
//! informers; a namespace the cache has none for is looked up in the store, and that answer is
//! used for 30 s (upstream's `liveLookupCache`), so an object created a moment ago is not missed
//! while the cache catches up. Unlike upstream's, that answer is not used for a namespace where
//! this server has just admitted a write of the looked-up kind
//! ([`NamespaceLookup::expect_write`]): a quota created a moment ago is not missed either.

pub(crate) mod cel_authz;
pub(crate) mod certificates;
pub(crate) mod config;
pub(crate) mod lifecycle;
pub(crate) mod limitranges;
pub(crate) mod noderestriction;
pub(crate) mod podsecurity;
pub(crate) mod policy;
pub(crate) mod priority;
pub(crate) mod quota;
pub(crate) mod serviceaccount;
pub(crate) mod storage;
pub(crate) mod tolerations;
pub(crate) mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_api::catalog::Resource;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::authn::User;
use crate::registry::{ListOptions, Registry};
use crate::status::ApiError;

/// How long a store lookup of a namespace the cache had nothing for stands in for the cache.
const LIVE_TTL: Duration = Duration::from_secs(30);

/// Past this many remembered lookups, expired ones are dropped.
const LIVE_ENTRIES: usize = 10_000;

/// What is remembered of a namespace the cache had nothing for.
#[derive(Debug)]
enum Live {
    /// A store lookup: when it was made, and what it found.
    Found(Instant, Arc<Vec<Value>>),
    /// A write of the looked-up kind was admitted then: until [`LIVE_TTL`] after it, the store
    /// is asked every time (the write may land after any lookup made meanwhile).
    Writing(Instant),
}

/// Store lookups by namespace.
type LiveLookups = HashMap<String, Live>;

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
        self.live(namespace).await
    }

    /// The objects in `namespace` when the cache has none: a store lookup made less than
    /// [`LIVE_TTL`] ago, else a new one (remembered, unless a write is expected).
    pub(crate) async fn live(&self, namespace: &str) -> Result<Arc<Vec<Value>>, ApiError> {
        let now = Instant::now();
        if let Some(Live::Found(at, items)) = self.lock().get(namespace)
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
            live.retain(|_, entry| match entry {
                Live::Found(at, _) | Live::Writing(at) => now.duration_since(*at) < LIVE_TTL,
            });
        }
        // While a write is expected (made before this lookup or during it), nothing is
        // remembered.
        let writing = matches!(live.get(namespace),
            Some(Live::Writing(at)) if now.saturating_duration_since(*at) < LIVE_TTL);
        if !writing {
            live.insert(namespace.to_owned(), Live::Found(now, items.clone()));
        }
        Ok(items)
    }

    /// Tells the lookup that a write of its kind in `namespace` was just admitted: what it
    /// remembers of the namespace is dropped, and until [`LIVE_TTL`] from now a namespace the
    /// cache has nothing for is looked up in the store every time, so that the new object is
    /// seen as soon as it is stored even while the cache lags.
    pub(crate) fn expect_write(&self, namespace: &str) {
        self.lock()
            .insert(namespace.to_owned(), Live::Writing(Instant::now()));
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

/// The stored object a delete removes, which validating admission sees as `oldObject`: the
/// one given, else read from the resource's registry in `table`.
pub(crate) async fn stored_for_delete(
    table: &crate::registry::Registries,
    attrs: &Attributes<'_>,
    old: Option<&Value>,
) -> Option<Value> {
    if let Some(old) = old {
        return Some(old.clone());
    }
    let resource = attrs.resource;
    let registry = table.get(resource.group, resource.version, resource.plural)?;
    let namespace = (!attrs.namespace.is_empty()).then_some(attrs.namespace);
    registry.get(namespace, attrs.name).await.ok()
}

/// What is done to the object being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A new object (through the main endpoint, or a subresource's body: a binding, an
    /// eviction, a TokenRequest).
    Create,
    /// A change of a stored object.
    Update,
    /// A delete.
    Delete,
    /// Opening a session through a connect subresource (`exec`, `attach`, `portforward`,
    /// `proxy`); the object is the request's options (`PodExecOptions`, …).
    Connect,
}

/// The warnings plugins (the webhooks) give a request, for its response's `Warning` headers.
#[derive(Debug, Default)]
pub(crate) struct Warnings(Mutex<Vec<String>>);

impl Warnings {
    /// Adds a warning (an empty or repeated one is dropped, as upstream's recorder does).
    pub(crate) fn add(&self, warning: &str) {
        let mut warnings = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !warning.is_empty() && !warnings.iter().any(|w| w == warning) {
            warnings.push(warning.to_owned());
        }
    }

    /// The warnings given so far, taken.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a plugin is asked about (upstream's `admission.Attributes`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attributes<'a> {
    /// The resource written (for a webhook or policy that matched through an equivalent
    /// resource, that one: see [`Attributes::through`]).
    pub resource: &'static Resource,
    /// The resource the request was made through, when `resource` is an equivalent one a
    /// webhook or policy matched it through (`matchPolicy: Equivalent`); `None` otherwise.
    pub request_resource: Option<&'static Resource>,
    /// The subresource written through (empty for the main endpoint).
    pub subresource: &'a str,
    /// What is done.
    pub operation: Operation,
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    /// The object's name: the URL's, or for a create the new object's (empty while it is to
    /// be generated).
    pub name: &'a str,
    /// Who asks (`None` for the server's own writes).
    pub user: Option<&'a User>,
    /// Whether nothing is to be recorded (`dryRun=All`).
    pub dry_run: bool,
    /// Where warnings for the response go (`None`: nowhere).
    pub warnings: Option<&'a Warnings>,
    /// Where audit annotations for the request's events go (`None`: it is not audited).
    pub audit: Option<&'a crate::audit::Annotations>,
    /// The server's authorizer, for the plugins that authorize what a write does (approving
    /// and signing certificate requests); `None` for the server's own writes.
    pub authorizer: Option<&'a Arc<crate::authz::Authorizer>>,
}

impl<'a> Attributes<'a> {
    /// These attributes as a webhook or policy that matched the request through `equivalent`
    /// (another version or group serving the same objects) sees them: the resource is that
    /// one, the request's own is kept as the requested one.
    pub(crate) fn through(&self, equivalent: &'static Resource) -> Attributes<'a> {
        Attributes {
            resource: equivalent,
            request_resource: Some(self.request_resource.unwrap_or(self.resource)),
            ..*self
        }
    }

    /// The resource the request was made through.
    pub(crate) fn requested(&self) -> &'static Resource {
        self.request_resource.unwrap_or(self.resource)
    }

    /// Whether the write goes through the main endpoint of a namespaced resource, where most
    /// plugins act.
    pub(crate) fn main_namespaced(&self) -> bool {
        self.subresource.is_empty() && self.resource.namespaced
    }

    /// Whether this creates an object of the core group's `plural` through its main endpoint.
    pub(crate) fn creates_core(&self, plural: &str) -> bool {
        self.operation == Operation::Create
            && self.subresource.is_empty()
            && self.resource.group.is_empty()
            && self.resource.plural == plural
    }
}

/// One admission plugin.
pub(crate) trait Plugin: Send + Sync + std::fmt::Debug {
    /// Upstream's name of the plugin.
    fn name(&self) -> &'static str;

    /// The mutating phase: may change the new object.
    fn admit<'a>(&'a self, _review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async { Ok(()) })
    }

    /// The validating phase, for creates and updates the registry is about to store.
    fn validate<'a>(&'a self, _review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async { Ok(()) })
    }
}

/// What a plugin's phase answers: `Ok` lets the write through, an error refuses it.
pub(crate) type Verdict<'a> = BoxFuture<'a, Result<(), ApiError>>;

/// A write as a plugin's phase sees it: the request's attributes, the new object (`O`), and
/// the stored object where there is one.
pub(crate) struct Review<'a, O> {
    pub attrs: &'a Attributes<'a>,
    pub object: O,
    pub old: Option<&'a Value>,
}

/// The mutating phase's view: the new object may be changed (`None` for a delete).
pub(crate) type Mutation<'a> = Review<'a, Option<&'a mut Value>>;

/// The validating phase's view of a create or update about to be stored.
pub(crate) type Validation<'a> = Review<'a, &'a Value>;

/// The admission chain: every plugin, in order.
#[derive(Debug)]
pub(crate) struct Chain {
    plugins: Vec<Box<dyn Plugin>>,
}

/// The registries the admission plugins read (a plugin whose registry is missing is left out;
/// NodeRestriction then finds no pod or node it looks up).
#[derive(Debug, Default)]
pub(crate) struct Registries {
    /// Namespaces (NamespaceLifecycle).
    pub namespaces: Option<Arc<Registry>>,
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
    /// StorageClasses (DefaultStorageClass, PersistentVolumeClaimResize).
    pub storage_classes: Option<Arc<Registry>>,
    /// Every registry (the webhooks: their configurations, the namespaces and services they
    /// read, and the resources whose patched objects they decode).
    pub table: Option<Arc<crate::registry::Registries>>,
}

impl Registries {
    /// The registries of the table the plugins read.
    pub(crate) fn from_table(table: &Arc<crate::registry::Registries>) -> Self {
        let core = |plural: &str| table.core(plural);
        Registries {
            namespaces: core("namespaces"),
            limit_ranges: core("limitranges"),
            service_accounts: core("serviceaccounts"),
            pods: core("pods"),
            nodes: core("nodes"),
            priority_classes: table.get("scheduling.k8s.io", "v1", "priorityclasses"),
            quotas: core("resourcequotas"),
            storage_classes: table.get("storage.k8s.io", "v1", "storageclasses"),
            table: Some(table.clone()),
        }
    }
}

impl Chain {
    /// The chain of upstream's plugins, in upstream's order, over these registries, with no
    /// admission configuration file.
    pub(crate) fn new(registries: Registries) -> Self {
        Self::configured(registries, &config::AdmissionConfig::default())
    }

    /// The chain of upstream's plugins, in upstream's order, over these registries, configured
    /// by `config` (the admission configuration file's).
    pub(crate) fn configured(registries: Registries, config: &config::AdmissionConfig) -> Self {
        let mut plugins: Vec<Box<dyn Plugin>> = Vec::new();
        if let Some(namespaces) = &registries.namespaces {
            plugins.push(Box::new(lifecycle::NamespaceLifecycle::new(
                namespaces.clone(),
            )));
        }
        if let Some(ranges) = registries.limit_ranges {
            plugins.push(Box::new(limitranges::LimitRanger::new(ranges)));
        }
        if let Some(accounts) = registries.service_accounts {
            plugins.push(Box::new(serviceaccount::ServiceAccountAdmission::new(
                accounts,
            )));
        }
        plugins.push(Box::new(noderestriction::NodeRestriction::new(
            registries.pods.clone(),
            registries.nodes,
        )));
        if let Some(namespaces) = &registries.namespaces {
            plugins.push(Box::new(podsecurity::PodSecurity::new(
                Arc::new(config.pod_security.clone()),
                namespaces.clone(),
                registries.pods,
            )));
        }
        if let Some(classes) = registries.priority_classes {
            plugins.push(Box::new(priority::Priority::new(classes)));
        }
        plugins.push(Box::new(tolerations::DefaultTolerationSeconds));
        if let Some(classes) = &registries.storage_classes {
            plugins.push(Box::new(storage::DefaultStorageClass::new(classes.clone())));
        }
        plugins.push(Box::new(storage::InUseProtection));
        if let Some(classes) = registries.storage_classes {
            plugins.push(Box::new(storage::ClaimResize::new(classes)));
        }
        plugins.push(Box::new(certificates::CertificateApproval));
        plugins.push(Box::new(certificates::CertificateSigning));
        plugins.push(Box::new(certificates::CertificateSubjectRestriction));
        if let Some(webhooks) = registries.table.as_ref().and_then(webhook::Webhooks::new) {
            let webhooks = Arc::new(webhooks);
            plugins.push(Box::new(webhook::MutatingWebhooks(webhooks.clone())));
            if let Some(policies) = registries.table.as_ref().and_then(policy::Policies::new) {
                plugins.push(Box::new(policies));
            }
            plugins.push(Box::new(webhook::ValidatingWebhooks(webhooks)));
        }
        if let Some(quotas) = registries.quotas {
            plugins.push(Box::new(quota::QuotaAdmission::new(quotas)));
        }
        Chain { plugins }
    }

    /// The plugins' names, in order.
    #[cfg(test)]
    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Runs the mutating phase of every plugin, in order.
    async fn mutate(
        &self,
        attrs: &Attributes<'_>,
        mut object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            let review = Review {
                attrs,
                object: object.as_deref_mut(),
                old,
            };
            let admitted = plugin.admit(review).await;
            refused_by(plugin.as_ref(), attrs, admitted)?;
        }
        Ok(())
    }

    /// Runs the validating phase of every plugin, in order.
    async fn check(
        &self,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            let validated = plugin.validate(Review { attrs, object, old }).await;
            refused_by(plugin.as_ref(), attrs, validated)?;
        }
        Ok(())
    }

    /// Admits a write the registry does not store through its admission: a delete (`object`
    /// is `None`) or a subresource's body that is not stored (a binding, an eviction, a
    /// TokenRequest). Both phases run; mutations of a body are not kept.
    pub(crate) async fn admit(
        &self,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
    ) -> Result<(), ApiError> {
        match object {
            Some(object) => {
                let mut body = object.clone();
                self.mutate(attrs, Some(&mut body), None).await?;
                self.check(attrs, &body, None).await
            }
            None => self.mutate(attrs, None, None).await,
        }
    }

    /// The admission the writes of one request run inside the registry: this chain as `user`
    /// through `subresource` of `resource` (upstream runs admission for every write, the
    /// server's own aside).
    ///
    /// Writes of RBAC roles and bindings by a user are also checked for escalation
    /// ([`crate::authz::escalation`]) with `authorizer`; `name` is the object's name in the request's
    /// path (empty for a create). `audit` takes the audit annotations plugins give.
    pub(crate) fn for_request(
        self: &Arc<Self>,
        resource: &'static Resource,
        subresource: Option<&str>,
        user: Option<&User>,
        authorizer: Option<&Arc<crate::authz::Authorizer>>,
        name: &str,
        audit: Option<crate::audit::Annotations>,
    ) -> Option<Arc<dyn crate::registry::Admission>> {
        let escalation = match (user, authorizer) {
            (Some(user), Some(authorizer))
                if subresource.is_none() && crate::authz::escalation::applies_to(resource) =>
            {
                Some(crate::authz::escalation::EscalationCheck {
                    user: user.clone(),
                    authorizer: authorizer.clone(),
                    request_name: name.to_owned(),
                })
            }
            _ => None,
        };
        Some(Arc::new(RequestAdmission {
            chain: self.clone(),
            user: user.cloned(),
            escalation,
            subresource: subresource.unwrap_or_default().to_owned(),
            warnings: Warnings::default(),
            audit,
            authorizer: authorizer.cloned(),
        }))
    }
}

/// Passes on a plugin's answer, noting a refusal in the debug log with the plugin's name.
fn refused_by(
    plugin: &dyn Plugin,
    attrs: &Attributes<'_>,
    answer: Result<(), ApiError>,
) -> Result<(), ApiError> {
    if let Err(error) = &answer {
        tracing::debug!(
            plugin = plugin.name(),
            resource = attrs.resource.plural,
            namespace = attrs.namespace,
            name = attrs.name,
            code = error.status().code(),
            "admission refused"
        );
    }
    answer
}

/// The admission of one request's writes.
#[derive(Debug)]
struct RequestAdmission {
    chain: Arc<Chain>,
    /// Who asks.
    user: Option<User>,
    /// The RBAC escalation check, for a user's writes of roles and bindings.
    escalation: Option<crate::authz::escalation::EscalationCheck>,
    /// The subresource written through (empty for the main endpoint).
    subresource: String,
    /// The warnings the plugins gave.
    warnings: Warnings,
    /// The request's audit annotations, when it is audited.
    audit: Option<crate::audit::Annotations>,
    /// The server's authorizer (the certificate plugins ask it).
    authorizer: Option<Arc<crate::authz::Authorizer>>,
}

impl RequestAdmission {
    /// The attributes of writing `object` of `resource` through this request.
    fn attributes<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        operation: Operation,
        dry_run: bool,
    ) -> Attributes<'a> {
        Attributes {
            resource,
            request_resource: None,
            subresource: &self.subresource,
            operation,
            namespace: namespace_of(object),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            user: self.user.as_ref(),
            dry_run,
            warnings: Some(&self.warnings),
            audit: self.audit.as_ref(),
            authorizer: self.authorizer.as_ref(),
        }
    }
}

impl crate::registry::Admission for RequestAdmission {
    fn take_warnings(&self) -> Vec<String> {
        self.warnings.take()
    }

    fn record_requester(&self, resource: &'static Resource, object: &mut Value) {
        if self.subresource.is_empty() && certificates::is_csr(resource) {
            certificates::record_requester(self.user.as_ref(), object);
        }
    }

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
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            // Each attempt of a write starts here: what an earlier attempt warned about was
            // judged on a copy the write then found stale (and retried), so it is dropped.
            self.warnings.take();
            // The attributes borrow the object's name; the plugins change the object.
            let (namespace, name) = (
                namespace_of(object).to_owned(),
                object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            );
            let attrs = Attributes {
                resource,
                request_resource: None,
                subresource: &self.subresource,
                operation: if old.is_some() {
                    Operation::Update
                } else {
                    Operation::Create
                },
                namespace: &namespace,
                name: &name,
                user: self.user.as_ref(),
                dry_run,
                warnings: Some(&self.warnings),
                audit: self.audit.as_ref(),
                authorizer: self.authorizer.as_ref(),
            };
            self.chain.mutate(&attrs, Some(object), old).await
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
            let operation = if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            };
            let attrs = self.attributes(resource, object, operation, dry_run);
            self.chain.check(&attrs, object, old).await
        })
    }
}
