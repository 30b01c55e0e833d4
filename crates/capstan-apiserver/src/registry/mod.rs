//! The generic registry: every verb (create, get, list, watch, update, patch, delete,
//! deletecollection) for every resource, over JSON objects, written once. A resource brings only
//! its catalogue entry and a [`Strategy`].
//!
//! The rules the registry owns, as upstream's generic store does: objects are stored without
//! `resourceVersion` and read back with their mod revision as `resourceVersion`; creates fill in
//! uid, creation time and generated names; updates are compare-and-swap on the revision the
//! client read (409 when stale), a write that changes nothing takes no revision, and PUT of a
//! missing object creates it where the strategy allows; deletes honour preconditions, grace
//! periods and finalizers; every store error becomes an upstream `Status`.

pub(crate) mod cache;
pub(crate) mod fields;
#[cfg(test)]
mod index_tests;
mod list;
pub(crate) mod object;
pub(crate) mod selectors;
pub mod services;
pub(crate) use capstan_api::strategy;
pub(crate) mod strict;
mod table;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use capstan_api::catalog::Resource;
use capstan_api::convert::Conversion;
use capstan_api::field::{FieldError, Path};
use capstan_api::{GroupResource, StatusError};
use capstan_store::{KeyValue, Revision, Store, StoreError};
use futures::future::BoxFuture;
use serde_json::Value;

pub(crate) use list::ListOptions;
pub(crate) use strategy::Strategy;
pub(crate) use table::Registries;
pub(crate) use watch::{Changes, WatchOptions};

use crate::registry::strict::{Problem, Source, strict_decoding_error};
use crate::status::ApiError;
use cache::Cached;
use object::{finalizers, is_terminating, meta_str, set_meta};

/// How to treat fields the kind does not know and fields a body repeats (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Drop unknown fields and resolve repeats silently.
    Ignore,
    /// Drop and resolve them, and warn (the default).
    #[default]
    Warn,
    /// Reject the request.
    Strict,
}

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteOptions {
    /// `dryRun=All`: run everything but the store write.
    pub dry_run: bool,
    /// What to do with unknown and repeated fields.
    pub field_validation: FieldValidation,
    /// The body's document, for the repeated fields and the order of the problems
    /// `fieldValidation` reports.
    pub source: Source,
    /// The field manager recording this write in `managedFields` (`None`: not recorded, as for
    /// the server's own writes and for applies, which record themselves).
    pub writer: Option<crate::registry::fields::Writer>,
    /// Create the object when it does not exist even where the kind does not allow create on
    /// update (server-side apply).
    pub force_allow_create: bool,
    /// Write as upstream's storage-level updates do (the pod binding): no strategy and no
    /// `managedFields` entry; the caller's `modify` enforces the rules of the change.
    pub below_strategy: bool,
    /// The admission that runs inside this write (requests' writes; the server's own writes
    /// have none).
    pub admission: Option<Arc<dyn Admission>>,
}

/// Admission that runs inside a write, where upstream's runs in its handlers and generic store:
/// the mutating step on a new object once it is decoded and defaulted (before the strategy
/// prepares it), the validating step on a new or changed object once the strategy has prepared
/// and validated it, just before it is stored. Writes below the strategy are not admitted; an
/// update through a subresource is, when the request's admission asks to be (it knows the
/// endpoint it was made for).
pub(crate) trait Admission: Send + Sync + std::fmt::Debug {
    /// Authorizes what a new object (`old` is `None`) or a change of the stored `old` grants,
    /// after mutation and before the strategy validates it: upstream's RBAC escalation check,
    /// which the storage of roles and bindings runs there.
    fn authorize_grants<'a>(
        &'a self,
        _resource: &'static Resource,
        _object: &'a Value,
        _old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }

    /// Records on a new object of `resource` what its strategy takes from the requesting user
    /// (upstream's strategies read the user from the request's context in `PrepareForCreate`):
    /// a CertificateSigningRequest's requester. Runs after mutating admission, before the
    /// strategy prepares the object.
    fn record_requester(&self, _resource: &'static Resource, _object: &mut Value) {}

    /// The warnings admission gave (webhooks' `warnings`), taken, for the response.
    fn take_warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Changes a new object (`old` is `None`) or the new state of the stored `old` of
    /// `resource` before it is prepared and validated; with `dry_run` it records nothing.
    fn mutate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a mut Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>>;

    /// Checks a new object (`old` is `None`) or a change of the stored `old` just before it is
    /// stored; with `dry_run` it records nothing.
    fn validate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The grace period asked for.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `propagationPolicy`: Orphan, Background or Foreground.
    pub propagation_policy: Option<String>,
    /// The deprecated `orphanDependents`.
    pub orphan_dependents: Option<bool>,
}

impl DeleteOptions {
    /// The options a `DeleteOptions` body (or `null`) gives.
    pub(crate) fn from_body(body: &Value) -> DeleteOptions {
        DeleteOptions {
            dry_run: body["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "All")),
            grace_period_seconds: body["gracePeriodSeconds"].as_i64(),
            precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_owned),
            precondition_resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned),
            propagation_policy: body["propagationPolicy"].as_str().map(str::to_owned),
            orphan_dependents: body["orphanDependents"].as_bool(),
        }
    }

    /// These options once checked as upstream checks them: a known propagation policy, not
    /// given with `orphanDependents`; a negative grace period means immediately.
    pub(crate) fn validated(mut self) -> Result<DeleteOptions, ApiError> {
        let mut errors = Vec::new();
        if let Some(policy) = &self.propagation_policy {
            if !matches!(policy.as_str(), "Orphan" | "Background" | "Foreground") {
                errors.push(FieldError::not_supported(
                    &Path::new("propagationPolicy"),
                    policy.as_str(),
                    &["Foreground", "Background", "Orphan", "nil"],
                ));
            }
            if self.orphan_dependents.is_some() {
                errors.push(FieldError::invalid(
                    &Path::new("propagationPolicy"),
                    policy.as_str(),
                    "orphanDependents and deletionPropagation cannot be both set",
                ));
            }
        }
        if self.grace_period_seconds.is_some_and(|g| g < 0) {
            // Upstream treats a negative grace period as immediate deletion.
            self.grace_period_seconds = Some(0);
        }
        if !errors.is_empty() {
            return Err(StatusError::invalid("meta.k8s.io", "DeleteOptions", "", &errors).into());
        }
        Ok(self)
    }
}

/// The result of a write: the object as stored, whether it was created, and warnings.
#[derive(Debug)]
pub(crate) struct Written {
    /// The object with its new `resourceVersion`.
    pub object: Value,
    /// Whether the write created the object.
    pub created: bool,
    /// `Warning` headers to send (unknown and repeated fields under `fieldValidation=Warn`).
    pub warnings: Vec<String>,
}

impl Written {
    /// An object written at `revision`, which becomes its `resourceVersion`.
    /// The write, with `warnings` for the response.
    fn warned(mut self, warnings: Vec<String>) -> Written {
        self.warnings = warnings;
        self
    }

    fn at(mut object: Value, revision: Revision, created: bool) -> Written {
        set_meta(
            &mut object,
            "resourceVersion",
            Some(revision.to_string().into()),
        );
        Written {
            object,
            created,
            warnings: Vec::new(),
        }
    }
}

/// The result of a delete.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// Deletion has begun (a grace period or finalizers); this is the object now.
    Pending(Value),
}

/// The generic store of one resource.
pub(crate) struct Registry {
    /// The catalogue entry.
    pub resource: &'static Resource,
    strategy: Arc<dyn Strategy>,
    store: Store,
    cache: Option<Arc<cache::WatchCache>>,
    /// For a version served by conversion: how its objects convert to and from the stored
    /// version. The registry works in the served version; objects are converted on their way
    /// into the store and out of the store and the watch cache.
    conversion: Option<Converter>,
    /// Run around every write through the main endpoint (see [`WriteHooks`]).
    write_hooks: Option<Arc<dyn WriteHooks>>,
    /// Whether objects read are defaulted again (`Strategy::defaults_on_read`, kept here so
    /// the read paths of other kinds do not ask).
    defaults_on_read: bool,
    /// Tells this registry from every other one (and from one that served the same resource
    /// before), for what cached objects remember of how it serves them.
    id: u64,
    /// The warning every request to this (deprecated) version gets.
    deprecation: Option<Arc<str>>,
    /// Set while the CustomResourceDefinition of this (custom) resource is being deleted:
    /// creates are refused then, as upstream's.
    terminating: std::sync::atomic::AtomicBool,
}

/// The next [`Registry`] id.
static NEXT_REGISTRY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What a resource's storage does around the writes through its main endpoint, as upstream's
/// `BeginCreate`/`BeginUpdate` and `AfterDelete` hooks (the Service allocator's).
pub(crate) trait WriteHooks: Send + Sync {
    /// At the start of each write: after mutating admission and before the strategy prepares
    /// and validates the object, given the new object (which it may change), the stored one
    /// on an update, and whether the write is a dry run. What it returns is told whether the
    /// write was stored ([`Held::finish`]).
    fn begin_write<'a>(
        &'a self,
        registry: &'a Registry,
        object: &'a mut Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Box<dyn Held>, ApiError>>;

    /// After `object` was removed from storage.
    fn deleted<'a>(&'a self, object: &'a Value) -> BoxFuture<'a, ()>;
}

/// What a write hook did for one write, kept until the write is stored or given up.
pub(crate) trait Held: Send {
    /// The write was stored (`true`: what the hook did stands, what the old object held and
    /// the new one does not is let go) or not (`false`: what the hook did is undone).
    fn finish(self: Box<Self>, stored: bool) -> BoxFuture<'static, ()>;
}

/// A write in progress's [`Held`], if its registry has hooks: given up when dropped unfinished
/// (the undoing then runs as a task of its own).
pub(crate) struct HeldWrite(Option<Box<dyn Held>>);

impl HeldWrite {
    /// Tells the hook whether the write was stored.
    async fn finish(mut self, stored: bool) {
        if let Some(held) = self.0.take() {
            held.finish(stored).await;
        }
    }
}

impl Drop for HeldWrite {
    fn drop(&mut self) {
        if let Some(held) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(held.finish(false));
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("resource", &self.resource.plural)
            .finish()
    }
}

/// How long a read waits for the watch cache to catch up before it reads the store instead.
const FRESH_WAIT: Duration = Duration::from_secs(1);

/// How many times a write retries after losing a race it did not ask to lose (no
/// `resourceVersion` precondition).
const MAX_RETRIES: usize = 16;

/// How many names a create with `generateName` tries before giving up (upstream's
/// `maxNameGenerationCreateAttempts`).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// How a version served by conversion reaches its stored version and back.
#[derive(Debug, Clone)]
enum Converter {
    /// A built-in kind's conversion functions.
    Builtin(&'static Conversion),
    /// A custom resource's `None` conversion: only the `apiVersion` changes.
    ApiVersion {
        /// The served version's `apiVersion`.
        served: String,
        /// The stored version's.
        stored: String,
    },
    /// A custom resource's `Webhook` conversion: its CRD's conversion webhook converts.
    Webhook {
        /// The served version's `apiVersion`.
        served: String,
        /// The stored version's.
        stored: String,
        webhook: Arc<dyn Convert>,
    },
}

/// A custom resource's conversion webhook, as the registry calls it (`crate::conversion`
/// implements it over the webhook transport).
pub(crate) trait Convert: Send + Sync + std::fmt::Debug {
    /// `objects` in `desired` (an `apiVersion`), in their order.
    fn convert<'a>(
        &'a self,
        objects: Vec<Value>,
        desired: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Value>, ApiError>>;
}

impl Converter {
    /// Stored objects in the served version.
    async fn served_forms(&self, objects: Vec<Value>) -> Result<Vec<Value>, ApiError> {
        match self {
            Converter::Builtin(conversion) => {
                Ok(objects.iter().map(|o| (conversion.from_hub)(o)).collect())
            }
            Converter::ApiVersion { served, .. } => Ok(objects
                .iter()
                .map(|o| with_api_version(o, served))
                .collect()),
            Converter::Webhook {
                served, webhook, ..
            } => webhook.convert(objects, served).await,
        }
    }

    /// A served object in the stored version.
    async fn stored_form(&self, object: &Value) -> Result<Value, ApiError> {
        match self {
            Converter::Builtin(conversion) => {
                (conversion.to_hub)(object).map_err(|e| StatusError::internal(&e).into())
            }
            Converter::ApiVersion { stored, .. } => Ok(with_api_version(object, stored)),
            Converter::Webhook {
                stored, webhook, ..
            } => {
                let mut converted = webhook.convert(vec![object.clone()], stored).await?;
                converted
                    .pop()
                    .ok_or_else(|| StatusError::internal("conversion returned nothing").into())
            }
        }
    }
}

fn with_api_version(object: &Value, api_version: &str) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".to_owned(), api_version.into());
    }
    object
}

impl Registry {
    pub(crate) fn new(
        resource: &'static Resource,
        strategy: Arc<dyn Strategy>,
        store: Store,
    ) -> Self {
        let conversion = resource
            .stored_as
            .and_then(|_| capstan_api::convert::conversion(&resource.api_version(), resource.kind))
            .map(Converter::Builtin);
        Registry {
            resource,
            defaults_on_read: strategy.defaults_on_read(),
            id: NEXT_REGISTRY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            strategy,
            store,
            cache: None,
            conversion,
            write_hooks: None,
            deprecation: None,
            terminating: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Marks this custom resource's definition as being deleted (or no longer).
    pub(crate) fn set_terminating(&self, terminating: bool) {
        self.terminating
            .store(terminating, std::sync::atomic::Ordering::Relaxed);
    }

    /// This registry serving a deprecated version: every request gets `warning`.
    pub(crate) fn deprecated(mut self, warning: Option<&str>) -> Self {
        self.deprecation = warning.map(Arc::from);
        self
    }

    /// The warning every request to this version gets, if it is deprecated.
    pub(crate) fn deprecation(&self) -> Option<&str> {
        self.deprecation.as_deref()
    }

    /// Stores objects in `api_version` (a custom resource's storage version) when this
    /// registry serves another version: converted by `webhook` if given, else only their
    /// `apiVersion` differs (`None` conversion). With `mixed_storage` (objects stored before in
    /// other versions may remain), the storage version's registry converts too: each object
    /// from the version it is in.
    pub(crate) fn stored_as(
        mut self,
        api_version: &str,
        webhook: Option<Arc<dyn Convert>>,
        mixed_storage: bool,
    ) -> Self {
        let served = self.resource.api_version();
        if served != api_version || mixed_storage {
            let stored = api_version.to_owned();
            self.conversion = Some(match webhook {
                Some(webhook) => Converter::Webhook {
                    served,
                    stored,
                    webhook,
                },
                None => Converter::ApiVersion { served, stored },
            });
        }
        self
    }

    /// Runs `hooks` around every write through the main endpoint.
    pub(crate) fn with_write_hooks(mut self, hooks: Arc<dyn WriteHooks>) -> Self {
        self.write_hooks = Some(hooks);
        self
    }

    /// Runs the write hook, if any, on a new object (`old` is `None`) or a change of `old`.
    async fn begin_write(
        &self,
        object: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<HeldWrite, ApiError> {
        match &self.write_hooks {
            Some(hooks) => Ok(HeldWrite(Some(
                hooks.begin_write(self, object, old, dry_run).await?,
            ))),
            None => Ok(HeldWrite(None)),
        }
    }

    /// Runs the delete hook, if any, on an object just removed from storage.
    async fn deleted(&self, object: &Value) {
        if let Some(hooks) = &self.write_hooks {
            hooks.deleted(object).await;
        }
    }

    /// A cached object (stored version) as this registry serves it.
    pub(crate) async fn view(&self, cached: Arc<Cached>) -> Result<Arc<Cached>, ApiError> {
        let mut views = self.views(vec![cached]).await?;
        views
            .pop()
            .ok_or_else(|| StatusError::internal("conversion returned nothing").into())
    }

    /// Cached objects (stored version) as this registry serves them, converted together (one
    /// call of a conversion webhook for a whole list).
    pub(crate) async fn views(
        &self,
        cached: Vec<Arc<Cached>>,
    ) -> Result<Vec<Arc<Cached>>, ApiError> {
        if self.conversion.is_none() {
            if !self.defaults_on_read {
                return Ok(cached);
            }
            // Defaulting depends on the object and the schema alone: worked out once per
            // cached object, without decoding it when its JSON shows every defaulted field
            // (most objects were defaulted when written).
            return Ok(cached
                .iter()
                .map(|c| {
                    c.served_by(self.id, |stored| {
                        if !self.strategy.stored_needs_defaults(&stored.json) {
                            return None;
                        }
                        let before = stored.object();
                        let mut object = before.clone();
                        self.strategy.default_stored(&mut object);
                        (object != before).then_some(object)
                    })
                })
                .collect());
        }
        let objects = cached.iter().map(|c| c.object()).collect();
        Ok(self
            .served_forms(objects)
            .await?
            .into_iter()
            .map(Cached::of)
            .collect())
    }

    /// Stored objects (stored version) as served: converted, and defaulted again where the
    /// kind asks for it.
    async fn served_forms(&self, mut objects: Vec<Value>) -> Result<Vec<Value>, ApiError> {
        if let Some(conversion) = &self.conversion {
            objects = conversion.served_forms(objects).await?;
        }
        if self.defaults_on_read {
            for object in &mut objects {
                self.strategy.default_stored(object);
            }
        }
        Ok(objects)
    }

    /// A stored object (stored version) as served.
    async fn served_form(&self, object: Value) -> Result<Value, ApiError> {
        let mut objects = self.served_forms(vec![object]).await?;
        objects
            .pop()
            .ok_or_else(|| StatusError::internal("conversion returned nothing").into())
    }

    /// Serves watches and reads from `cache`, the resource's watch cache.
    pub(crate) fn with_cache(mut self, cache: Option<Arc<cache::WatchCache>>) -> Self {
        self.cache = cache;
        self
    }

    pub(crate) fn strategy(&self) -> &dyn Strategy {
        self.strategy.as_ref()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The field manager's view of one of this resource's endpoints.
    pub(crate) fn endpoint<'a>(
        &self,
        subresource: Option<&'a str>,
    ) -> crate::registry::fields::Endpoint<'a> {
        crate::registry::fields::Endpoint {
            resource: self.resource,
            subresource,
            status_subresource: self.strategy.status_policy()
                == strategy::StatusPolicy::Subresource,
            custom_type: self.strategy.merge_type(),
        }
    }

    fn group_resource(&self) -> GroupResource<'static> {
        GroupResource::new(self.resource.group, self.resource.plural)
    }

    fn key(&self, namespace: Option<&str>, name: &str) -> String {
        self.resource.storage_key(namespace, name)
    }

    /// Decodes a stored value (into the served version) and stamps its `resourceVersion`.
    pub(crate) async fn decode_stored(&self, kv: &KeyValue) -> Result<Value, ApiError> {
        let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
            ApiError::from(StatusError::internal(&format!(
                "stored object {} cannot be decoded: {e}",
                kv.key
            )))
        })?;
        object = self.served_form(object).await?;
        set_meta(
            &mut object,
            "resourceVersion",
            Some(kv.mod_revision.to_string().into()),
        );
        // Stored in the form upstream's types give it (the strategies' decoding normalises
        // every written object), so it is served as it is.
        Ok(object)
    }

    /// The stored form of an object: in the stored version, without `resourceVersion` (a
    /// create has none, so it is copied only when there is one to drop).
    ///
    /// Objects are stored as upstream writes them ([`capstan_api::gojson`]), so that reads and
    /// watch events only put their `resourceVersion` in ([`Cached::from_stored`]).
    async fn encode(&self, object: &Value) -> Result<Vec<u8>, ApiError> {
        if let Some(conversion) = &self.conversion {
            let mut stored = conversion.stored_form(object).await?;
            set_meta(&mut stored, "resourceVersion", None);
            return Ok(capstan_api::gojson::to_vec(&stored));
        }
        if object["metadata"].get("resourceVersion").is_some() {
            let mut object = object.clone();
            set_meta(&mut object, "resourceVersion", None);
            return Ok(capstan_api::gojson::to_vec(&object));
        }
        Ok(capstan_api::gojson::to_vec(object))
    }

    /// `object`, as this registry serves it, in the version `other` serves (a registry sharing
    /// this one's stored objects: another version of the kind, or another group serving it):
    /// converted to the stored version, then to `other`'s, as a read through `other` would
    /// serve it.
    pub(crate) async fn convert_to(
        &self,
        object: &Value,
        other: &Registry,
    ) -> Result<Value, ApiError> {
        let stored = match &self.conversion {
            Some(conversion) => conversion.stored_form(object).await?,
            None => object.clone(),
        };
        other.served_form(stored).await
    }

    /// Whether this version is served through a conversion webhook.
    pub(crate) fn converts_by_webhook(&self) -> bool {
        matches!(self.conversion, Some(Converter::Webhook { .. }))
    }

    /// A stored object in its stored version, with its `resourceVersion` put in.
    pub(crate) fn stored_cached(&self, kv: &KeyValue) -> Result<Arc<Cached>, ApiError> {
        if let Some(cached) = Cached::from_stored(&kv.value, kv.mod_revision) {
            return Ok(cached);
        }
        let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
            ApiError::from(StatusError::internal(&format!(
                "stored object {} cannot be decoded: {e}",
                kv.key
            )))
        })?;
        set_meta(
            &mut object,
            "resourceVersion",
            Some(kv.mod_revision.to_string().into()),
        );
        Ok(Cached::of(object))
    }

    /// A stored object as served: its stored JSON with its `resourceVersion` put in.
    pub(crate) async fn cached_from_kv(&self, kv: &KeyValue) -> Result<Arc<Cached>, ApiError> {
        if self.conversion.is_none()
            && !self.defaults_on_read
            && let Some(cached) = Cached::from_stored(&kv.value, kv.mod_revision)
        {
            return Ok(cached);
        }
        Ok(Cached::of(self.decode_stored(kv).await?))
    }

    /// Maps a store error about the object `name` to the API's error.
    pub(crate) fn store_error(&self, name: &str, error: StoreError) -> ApiError {
        store_error(self.group_resource(), name, error)
    }

    fn invalid(&self, name: &str, errors: &[FieldError]) -> ApiError {
        StatusError::invalid(self.resource.group, self.resource.kind, name, errors).into()
    }

    /// Checks the kind and version of a body and fills them in when missing.
    fn check_type(&self, object: &mut Value) -> Result<(), ApiError> {
        let Some(map) = object.as_object_mut() else {
            return Err(
                StatusError::bad_request("the body of the request must be a JSON object").into(),
            );
        };
        let expected_version = self.resource.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("apiVersion".into(), expected_version.clone().into());
            }
            Some(v) if v == expected_version => {}
            Some(v) => {
                return Err(StatusError::bad_request(&format!(
                    "the API version in the data ({v}) does not match the expected API version ({expected_version})"
                ))
                .into());
            }
        }
        match map.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("kind".into(), self.resource.kind.into());
            }
            Some(k) if k == self.resource.kind => {}
            Some(k) => {
                return Err(StatusError::bad_request(&format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    self.resource.kind
                ))
                .into());
            }
        }
        if !map
            .get("metadata")
            .is_none_or(|m| m.is_object() || m.is_null())
        {
            return Err(StatusError::bad_request("metadata must be an object").into());
        }
        Ok(())
    }

    /// Checks and fills in the namespace of a body against the request's.
    pub(crate) fn check_namespace(
        &self,
        object: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
        let in_body = meta_str(object, "namespace").to_owned();
        if self.resource.namespaced {
            let ns = namespace.unwrap_or_default();
            if in_body.is_empty() {
                set_meta(object, "namespace", Some(ns.into()));
            } else if in_body != ns {
                return Err(StatusError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
                .into());
            }
        } else if !in_body.is_empty() {
            set_meta(object, "namespace", None);
        }
        Ok(())
    }

    /// Upstream's answer to a body that does not decode into the kind.
    fn cannot_handle(&self, message: &str) -> ApiError {
        StatusError::bad_request(&format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {message}",
            kind = self.resource.kind,
            version = self.resource.version,
        ))
        .into()
    }

    /// Decodes an object into the kind's canonical form, with the paths of the fields the kind
    /// does not have.
    fn decode_kind(&self, object: &Value) -> Result<(Value, Vec<String>), ApiError> {
        self.strategy.decode(object).map_err(|e| match e {
            strategy::DecodeError::Missing { path } => self.invalid(
                meta_str(object, "name"),
                &[FieldError::required(&Path::new(&path), "")],
            ),
            strategy::DecodeError::Invalid(message) => self.cannot_handle(&message),
        })
    }

    /// Decodes a body into the kind's canonical form, reporting the fields the kind does not
    /// know and the fields the body repeats per `fieldValidation`.
    fn decode_body(
        &self,
        object: Value,
        validation: FieldValidation,
        source: &Source,
        warnings: &mut Vec<String>,
    ) -> Result<Value, ApiError> {
        let (decoded, unknown) = self.decode_kind(&object)?;
        if validation == FieldValidation::Ignore {
            return Ok(decoded);
        }
        let problems = source.problems(&unknown);
        if !problems.is_empty() {
            if validation == FieldValidation::Strict {
                return Err(self.cannot_handle(&strict_decoding_error(&problems)));
            }
            warnings.extend(problems.iter().flat_map(Problem::warnings));
        }
        Ok(decoded)
    }

    /// Decodes the result of a patch into the kind's canonical form, with the paths of the
    /// fields the kind does not have, for the patch to report.
    pub(crate) fn decode_patched(
        &self,
        object: &mut Value,
    ) -> Result<(Value, Vec<String>), ApiError> {
        self.check_type(object)?;
        self.decode_kind(object)
    }

    /// Reads one object: a consistent read.
    pub(crate) async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        Ok(self.read(namespace, name, None).await?.object())
    }

    /// The watch cache once it holds every write that completed before this call: what a
    /// consistent read may be served from. `None` when there is no cache or it does not catch
    /// up in time; the caller reads the store then.
    async fn fresh_cache(&self) -> Option<&cache::WatchCache> {
        let cache = self.cache.as_deref()?;
        let current = self.store.current_revision().await.ok()?;
        cache.wait_for(current, FRESH_WAIT).await.then_some(cache)
    }

    /// Reads one object as of `resourceVersion` (upstream's semantics for a GET: unset for the
    /// latest state, `0` for any state, a revision for a state not older than it), from the
    /// watch cache when it can answer, from the store otherwise.
    pub(crate) async fn read(
        &self,
        namespace: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Arc<Cached>, ApiError> {
        let key = self.key(namespace, name);
        let not_found = || ApiError::from(StatusError::not_found(self.group_resource(), name));
        let at = match resource_version.filter(|v| !v.is_empty()) {
            None => None,
            Some(text) => Some(parse_resource_version(text).map_err(|()| {
                ApiError::from(StatusError::bad_request(&format!(
                    "invalid resource version: {text}"
                )))
            })?),
        };
        let cache = match at {
            None => self.fresh_cache().await,
            Some(0) => self.cache.as_deref(),
            Some(revision) => match self.cache.as_deref() {
                Some(cache) if cache.wait_for(revision, FRESH_WAIT).await => Some(cache),
                _ => {
                    let current = self
                        .store
                        .current_revision()
                        .await
                        .map_err(|e| self.store_error(name, e))?;
                    if revision > current {
                        return Err(
                            StatusError::too_large_resource_version(revision, current, 1).into(),
                        );
                    }
                    None
                }
            },
        };
        if let Some((object, _)) = cache.and_then(|c| c.get(&key)) {
            return match object {
                Some(object) => self.view(object).await,
                None => Err(not_found()),
            };
        }
        let response = self
            .store
            .get(&key, None)
            .await
            .map_err(|e| self.store_error(name, e))?;
        match response.kv {
            Some(kv) => self.cached_from_kv(&kv).await,
            None => Err(not_found()),
        }
    }

    async fn get_kv(&self, key: &str, name: &str) -> Result<Option<KeyValue>, ApiError> {
        Ok(self
            .store
            .get(key, None)
            .await
            .map_err(|e| self.store_error(name, e))?
            .kv)
    }

    /// Creates an object from a request body.
    pub(crate) async fn create(
        &self,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if self.terminating.load(std::sync::atomic::Ordering::Relaxed) {
            let mut error = StatusError::method_not_supported(
                GroupResource::new(self.resource.group, self.resource.plural),
                "create",
            );
            error.status.message = Some(
                "create not allowed while custom resource definition is terminating".to_owned(),
            );
            return Err(error.into());
        }
        self.check_type(&mut object)?;
        self.check_namespace(&mut object, namespace)?;
        if !meta_str(&object, "resourceVersion").is_empty() {
            return Err(StatusError::bad_request(
                "resourceVersion should not be set on objects to be created",
            )
            .into());
        }
        let mut warnings = Vec::new();
        let mut object = self.decode_body(
            object,
            options.field_validation,
            &options.source,
            &mut warnings,
        )?;
        if let Some(writer) = &options.writer {
            self.endpoint(None)
                .update(None, &mut object, &writer.manager);
        }
        if let Some(admission) = &options.admission {
            admission
                .mutate(self.resource, &mut object, None, options.dry_run)
                .await?;
            admission
                .authorize_grants(self.resource, &object, None)
                .await?;
            admission.record_requester(self.resource, &mut object);
        }
        let prefix = match meta_str(&object, "name") {
            "" => meta_str(&object, "generateName").to_owned(),
            _ => String::new(),
        };
        if prefix.is_empty() {
            return self
                .create_named(namespace, object, options, warnings)
                .await;
        }
        // As upstream's store (RetryGenerateName): the name is made before the write hooks see
        // the object (a Service's IPAddress names its parent), and a create that meets an
        // object under a generated name is tried again, whole, under a new one.
        let mut attempt = 1;
        loop {
            let mut named = object.clone();
            let name = object::generate_name(&prefix);
            set_meta(&mut named, "name", Some(name.clone().into()));
            match self
                .create_named(namespace, named, options, warnings.clone())
                .await
            {
                Err(error) if error.is_already_exists() => {
                    if attempt == GENERATE_NAME_ATTEMPTS {
                        let resource = self.group_resource();
                        return Err(StatusError::generate_name_conflict(resource, &name).into());
                    }
                    attempt += 1;
                }
                written => return written,
            }
        }
    }

    /// [`Registry::create`] of an object with its name: the write hooks, then the write.
    async fn create_named(
        &self,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
        warnings: Vec<String>,
    ) -> Result<Written, ApiError> {
        let held = self.begin_write(&mut object, None, options.dry_run).await?;
        let written = self
            .create_begun(namespace, object, options, warnings)
            .await;
        held.finish(written.is_ok() && !options.dry_run).await;
        written
    }

    /// The rest of [`Registry::create`], once the write hook has run.
    async fn create_begun(
        &self,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
        warnings: Vec<String>,
    ) -> Result<Written, ApiError> {
        let name = self.prepare_and_validate_new(&mut object)?;
        if let Some(admission) = &options.admission {
            admission
                .validate(self.resource, &object, None, options.dry_run)
                .await?;
        }
        let key = self.key(namespace, &name);
        if options.dry_run {
            if self.get_kv(&key, &name).await?.is_some() {
                return Err(StatusError::already_exists(self.group_resource(), &name).into());
            }
            return Ok(Written {
                object,
                created: true,
                warnings,
            });
        }
        let kv = self
            .store
            .create(&key, self.encode(&object).await?)
            .await
            .map_err(|e| self.store_error(&name, e))?;
        set_meta(
            &mut object,
            "resourceVersion",
            Some(kv.mod_revision.to_string().into()),
        );
        Ok(Written {
            object,
            created: true,
            warnings,
        })
    }

    /// Prepares and validates a new object (its managed fields kept aside meanwhile); returns
    /// its name.
    fn prepare_and_validate_new(&self, object: &mut Value) -> Result<String, ApiError> {
        let managed = object::take_managed(object);
        self.prepare_new(object);
        let name = meta_str(object, "name").to_owned();
        let errors = self.validate_new(object);
        if !errors.is_empty() {
            return Err(self.invalid(&name, &errors));
        }
        object::put_managed(object, managed);
        Ok(name)
    }

    /// Fills in the system fields of a new object.
    fn prepare_new(&self, object: &mut Value) {
        set_meta(object, "uid", Some(object::new_uid().into()));
        self.strategy.prepare_for_create(object);
        set_meta(
            object,
            "creationTimestamp",
            Some(object::now_rfc3339().into()),
        );
        set_meta(object, "deletionTimestamp", None);
        set_meta(object, "deletionGracePeriodSeconds", None);
        set_meta(object, "resourceVersion", None);
        object::drop_empty_meta(object);
        if !self.strategy.tracks_generation() {
            set_meta(object, "generation", None);
        }
    }

    fn validate_new(&self, object: &Value) -> Vec<FieldError> {
        let mut errors = self.strategy.validate(object);
        // Every kind needs a name; strategies that check metadata say so themselves.
        if meta_str(object, "name").is_empty() && !errors.iter().any(|e| e.field == "metadata.name")
        {
            errors.insert(
                0,
                FieldError::required(
                    &Path::new("metadata").child("name"),
                    "name or generateName is required",
                ),
            );
        }
        errors
    }

    /// Replaces an object (PUT), or creates it where the strategy allows. `subresource` is
    /// `status` for writes through `/status`.
    pub(crate) async fn update(
        &self,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        subresource: Option<&str>,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.check_type(&mut body)?;
        self.check_namespace(&mut body, namespace)?;
        let body_name = meta_str(&body, "name");
        if body_name.is_empty() {
            set_meta(&mut body, "name", Some(name.into()));
        } else if body_name != name {
            return Err(StatusError::bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ))
            .into());
        }
        let mut warnings = Vec::new();
        let body = self.decode_body(
            body,
            options.field_validation,
            &options.source,
            &mut warnings,
        )?;
        let precondition = meta_str(&body, "resourceVersion").to_owned();
        let expected: Option<Revision> = if precondition.is_empty() {
            None
        } else {
            Some(parse_resource_version(&precondition).map_err(|_| {
                self.invalid(
                    name,
                    &[FieldError::invalid(
                        &Path::new("metadata").child("resourceVersion"),
                        precondition.as_str(),
                        "must be a decimal resource version",
                    )],
                )
            })?)
        };
        let key = self.key(namespace, name);
        let mut written = self
            .guaranteed_update(&key, name, expected, subresource, options, |_| {
                Ok(body.clone())
            })
            .await?;
        warnings.append(&mut written.warnings);
        written.warnings = warnings;
        Ok(written)
    }

    /// The compare-and-swap loop every update shares: start from the current object, compute
    /// the new one with `modify`, apply the strategy, write if anything changed, retry a lost
    /// race unless the client named the revision it expected.
    ///
    /// The starting point is the watch cache's copy when it has one, as upstream's cacher hands
    /// its copy to the storage's GuaranteedUpdate: it saves a read per write, and a stale copy
    /// costs nothing but a retry, because the write only succeeds at the revision it was
    /// computed from. Whatever a stale copy could decide wrongly (a precondition that fails, an
    /// error from `modify` or validation, "nothing changed") is decided again from the store.
    pub(crate) async fn guaranteed_update<F>(
        &self,
        key: &str,
        name: &str,
        expected: Option<Revision>,
        subresource: Option<&str>,
        options: &WriteOptions,
        mut modify: F,
    ) -> Result<Written, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Value, ApiError>,
    {
        let mut current = self.cached_current(key).await;
        let mut fresh = current.is_none();
        if fresh {
            current = self.stored_current(key, name).await?;
        }
        // Re-reads the store and starts the attempt again when the copy was the cache's.
        macro_rules! recheck_or {
            ($result:expr) => {{
                if !fresh {
                    current = self.stored_current(key, name).await?;
                    fresh = true;
                    continue;
                }
                return $result;
            }};
        }
        // What the write hook holds for the attempt in progress.
        let mut held: Option<HeldWrite> = None;
        // The warnings of the attempt's validation (ratcheted CEL rules of a custom resource).
        let mut warnings = Vec::new();
        for _ in 0..MAX_RETRIES {
            if let Some(held) = held.take() {
                held.finish(false).await;
            }
            let Some((mut old, revision)) = current.take() else {
                return self
                    .create_on_update(
                        key,
                        name,
                        expected,
                        subresource.is_none(),
                        options,
                        &mut modify,
                    )
                    .await;
            };
            if let Some(expected) = expected
                && expected != revision
            {
                recheck_or!(Err(StatusError::conflict(
                    self.group_resource(),
                    name,
                    StatusError::OBJECT_MODIFIED,
                )
                .into()));
            }
            let mut new = match modify(Some(&old)) {
                Ok(new) => new,
                Err(e) => recheck_or!(Err(e)),
            };
            self.check_type(&mut new)?;
            // Mutating admission sees the updated object before the strategy prepares it.
            if let Some(admission) = options
                .admission
                .as_ref()
                .filter(|_| !options.below_strategy)
                && let Err(e) = admission
                    .mutate(self.resource, &mut new, Some(&old), options.dry_run)
                    .await
            {
                recheck_or!(Err(e));
            }
            if !options.below_strategy && subresource.is_none() {
                match self
                    .begin_write(&mut new, Some(&old), options.dry_run)
                    .await
                {
                    Ok(hold) => held = Some(hold),
                    Err(e) => recheck_or!(Err(e)),
                }
            }
            if let Some(admission) = options
                .admission
                .as_ref()
                .filter(|_| !options.below_strategy && subresource.is_none())
                && let Err(e) = admission
                    .authorize_grants(self.resource, &new, Some(&old))
                    .await
            {
                recheck_or!(Err(e));
            }
            let unchanged = if options.below_strategy {
                strip_version(&new) == strip_version(&old)
            } else {
                if let Some(writer) = &options.writer {
                    self.endpoint(subresource)
                        .update(Some(&old), &mut new, &writer.manager);
                }
                // The strategies never look at managed fields: kept aside while they run.
                let old_managed = object::take_managed(&mut old);
                let new_managed = object::take_managed(&mut new);
                self.prepare_update(&mut new, &old, subresource);
                let errors;
                (errors, warnings) = self
                    .strategy
                    .validate_update_warned(&new, &old, subresource);
                if !errors.is_empty() {
                    recheck_or!(Err(self.invalid(name, &errors)));
                }
                let unchanged =
                    new_managed == old_managed && strip_version(&new) == strip_version(&old);
                object::put_managed(&mut old, old_managed);
                object::put_managed(&mut new, new_managed);
                unchanged
            };
            // Validating admission judges every update, a no-op included, as upstream's runs
            // before the storage finds nothing to write.
            if let Some(admission) = options
                .admission
                .as_ref()
                .filter(|_| !options.below_strategy)
                && let Err(e) = admission
                    .validate(self.resource, &new, Some(&old), options.dry_run)
                    .await
            {
                recheck_or!(Err(e));
            }
            // An unchanged object read under an older encryption key is written anyway, so
            // that rewriting every object moves it to the current key (upstream's "stale").
            if unchanged && !self.store.rewrite_needed(key).await {
                recheck_or!(Ok(Written {
                    object: old,
                    created: false,
                    warnings: Vec::new(),
                }));
            }
            if is_terminating(&new)
                && finalizers(&new).is_empty()
                && !self.strategy.deletion_held(&new)
            {
                // The last finalizer is gone: the object goes, as upstream does on update.
                if options.dry_run {
                    recheck_or!(Ok(Written {
                        object: new,
                        created: false,
                        warnings: Vec::new(),
                    }));
                }
                match self.store.delete(key, Some(revision)).await {
                    Ok(deleted) => {
                        // What the update kept stands, then goes with the object.
                        if let Some(held) = held.take() {
                            held.finish(true).await;
                        }
                        self.deleted(&new).await;
                        return Ok(Written::at(new, deleted.revision, false).warned(warnings));
                    }
                    Err(StoreError::Conflict { current: now, .. }) if expected.is_none() => {
                        current = Some(self.decoded(&now).await?);
                        fresh = true;
                        continue;
                    }
                    Err(StoreError::NotFound { .. }) if expected.is_none() => {
                        fresh = true;
                        continue;
                    }
                    Err(e) => return Err(self.store_error(name, e)),
                }
            }
            if options.dry_run {
                recheck_or!(Ok(Written::at(new, revision, false).warned(warnings)));
            }
            match self
                .store
                .update(key, self.encode(&new).await?, Some(revision))
                .await
            {
                Ok(stored) => {
                    if let Some(held) = held.take() {
                        held.finish(true).await;
                    }
                    return Ok(Written::at(new, stored.mod_revision, false).warned(warnings));
                }
                Err(StoreError::Conflict { current: now, .. }) if expected.is_none() => {
                    current = Some(self.decoded(&now).await?);
                    fresh = true;
                }
                Err(StoreError::Conflict { .. }) => {
                    recheck_or!(Err(StatusError::conflict(
                        self.group_resource(),
                        name,
                        StatusError::OBJECT_MODIFIED,
                    )
                    .into()));
                }
                Err(StoreError::NotFound { .. }) if expected.is_none() => {
                    fresh = true;
                }
                Err(e) => return Err(self.store_error(name, e)),
            }
        }
        Err(StatusError::conflict(self.group_resource(), name, StatusError::OBJECT_MODIFIED).into())
    }

    /// The watch cache's copy of `key` with its revision, decoded as from the store, when the
    /// cache is loaded and has the object (an object it lacks may just be too new for it).
    async fn cached_current(&self, key: &str) -> Option<(Value, Revision)> {
        let (cached, _) = self.cache.as_deref()?.get(key)?;
        let object = cached?.object();
        let revision = parse_resource_version(meta_str(&object, "resourceVersion")).ok()?;
        // A copy that does not convert is read again from the store.
        let object = self.served_form(object).await.ok()?;
        Some((object, revision))
    }

    /// The stored object at `key` with its revision.
    async fn stored_current(
        &self,
        key: &str,
        name: &str,
    ) -> Result<Option<(Value, Revision)>, ApiError> {
        match self.get_kv(key, name).await? {
            Some(kv) => Ok(Some(self.decoded(&kv).await?)),
            None => Ok(None),
        }
    }

    async fn decoded(&self, kv: &KeyValue) -> Result<(Value, Revision), ApiError> {
        Ok((self.decode_stored(kv).await?, kv.mod_revision))
    }

    async fn create_on_update<F>(
        &self,
        key: &str,
        name: &str,
        expected: Option<Revision>,
        main_endpoint: bool,
        options: &WriteOptions,
        modify: &mut F,
    ) -> Result<Written, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Value, ApiError>,
    {
        let allowed = self.strategy.allow_create_on_update() || options.force_allow_create;
        if !main_endpoint || !allowed || expected.is_some() {
            return Err(StatusError::not_found(self.group_resource(), name).into());
        }
        let mut object = modify(None)?;
        if let Some(writer) = &options.writer {
            self.endpoint(None)
                .update(None, &mut object, &writer.manager);
        }
        if let Some(admission) = &options.admission {
            admission
                .mutate(self.resource, &mut object, None, options.dry_run)
                .await?;
            admission
                .authorize_grants(self.resource, &object, None)
                .await?;
            admission.record_requester(self.resource, &mut object);
        }
        let held = self.begin_write(&mut object, None, options.dry_run).await?;
        let written = self.create_on_update_begun(key, object, options).await;
        held.finish(written.is_ok() && !options.dry_run).await;
        written
    }

    /// The rest of [`Registry::create_on_update`], once the write hook has run.
    async fn create_on_update_begun(
        &self,
        key: &str,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let name = self.prepare_and_validate_new(&mut object)?;
        if let Some(admission) = &options.admission {
            admission
                .validate(self.resource, &object, None, options.dry_run)
                .await?;
        }
        if options.dry_run {
            return Ok(Written {
                object,
                created: true,
                warnings: Vec::new(),
            });
        }
        let kv = self
            .store
            .create(key, self.encode(&object).await?)
            .await
            .map_err(|e| self.store_error(&name, e))?;
        set_meta(
            &mut object,
            "resourceVersion",
            Some(kv.mod_revision.to_string().into()),
        );
        Ok(Written {
            object,
            created: true,
            warnings: Vec::new(),
        })
    }

    /// Carries what a client may not change from `old` into `new`.
    fn prepare_update(&self, new: &mut Value, old: &Value, subresource: Option<&str>) {
        let main_endpoint = subresource.is_none();

        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            set_meta(new, field, old["metadata"].get(field).cloned());
        }
        set_meta(
            new,
            "resourceVersion",
            old["metadata"].get("resourceVersion").cloned(),
        );
        object::drop_empty_meta(new);
        if self.strategy.status_policy() == strategy::StatusPolicy::Subresource {
            if main_endpoint {
                match old.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        if let Some(map) = new.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            } else if subresource == Some("status") {
                // Through /status only the status (and metadata) changes.
                let status = new.get("status").cloned();
                let metadata = new.get("metadata").cloned();
                *new = old.clone();
                if let Some(map) = new.as_object_mut() {
                    match status {
                        Some(status) => map.insert("status".into(), status),
                        None => map.remove("status"),
                    };
                    if let Some(metadata) = metadata {
                        map.insert("metadata".into(), metadata);
                    }
                }
            }
        }
        self.strategy.prepare_for_update(new, old, subresource);
        if self.strategy.tracks_generation() && object::desired_state_changed(new, old) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            set_meta(new, "generation", Some(generation.into()));
        }
    }

    /// Deletes an object, or begins its graceful or finalized deletion.
    pub(crate) async fn delete(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let key = self.key(namespace, name);
        for _ in 0..MAX_RETRIES {
            let Some(kv) = self.get_kv(&key, name).await? else {
                return Err(StatusError::not_found(self.group_resource(), name).into());
            };
            let mut object = self.decode_stored(&kv).await?;
            self.check_preconditions(&object, name, options)?;
            if let Some(pending) = self.begin_deletion(&object, options) {
                let changed = strip_version(&pending) != strip_version(&object);
                if !changed || options.dry_run {
                    return Ok(Deleted::Pending(if changed { pending } else { object }));
                }
                match self
                    .store
                    .update(&key, self.encode(&pending).await?, Some(kv.mod_revision))
                    .await
                {
                    Ok(stored) => {
                        let mut pending = pending;
                        set_meta(
                            &mut pending,
                            "resourceVersion",
                            Some(stored.mod_revision.to_string().into()),
                        );
                        return Ok(Deleted::Pending(pending));
                    }
                    Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(self.store_error(name, e)),
                }
            }
            if options.dry_run {
                return Ok(Deleted::Gone(object));
            }
            match self.store.delete(&key, Some(kv.mod_revision)).await {
                Ok(deleted) => {
                    self.deleted(&object).await;
                    set_meta(
                        &mut object,
                        "resourceVersion",
                        Some(deleted.revision.to_string().into()),
                    );
                    return Ok(Deleted::Gone(object));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound { .. }) => {
                    return Err(StatusError::not_found(self.group_resource(), name).into());
                }
                Err(e) => return Err(self.store_error(name, e)),
            }
        }
        Err(StatusError::conflict(self.group_resource(), name, StatusError::OBJECT_MODIFIED).into())
    }

    fn check_preconditions(
        &self,
        object: &Value,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        if let Some(uid) = &options.precondition_uid {
            let actual = meta_str(object, "uid");
            if uid != actual {
                return Err(StatusError::conflict(
                    self.group_resource(),
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                )
                .into());
            }
        }
        if let Some(rv) = &options.precondition_resource_version {
            let actual = meta_str(object, "resourceVersion");
            if rv != actual {
                return Err(StatusError::conflict(
                    self.group_resource(),
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                )
                .into());
            }
        }
        Ok(())
    }

    /// The object with its deletion begun, when it cannot go at once: finalizers (including the
    /// ones a propagation policy adds) or a grace period keep it. `None`: delete it now.
    fn begin_deletion(&self, object: &Value, options: &DeleteOptions) -> Option<Value> {
        let mut finals = finalizers(object);
        let policy = match (
            options.propagation_policy.as_deref(),
            options.orphan_dependents,
        ) {
            (Some(policy), _) => Some(policy),
            (None, Some(true)) => Some("Orphan"),
            (None, Some(false)) => Some("Background"),
            (None, None) => None,
        };
        // The garbage collector's finalizers, as upstream records the propagation policy.
        let (add, remove): (&[&str], &[&str]) = match policy {
            Some("Orphan") => (&["orphan"], &["foregroundDeletion"]),
            Some("Foreground") => (&["foregroundDeletion"], &["orphan"]),
            Some("Background") => (&[], &["orphan", "foregroundDeletion"]),
            _ => (&[], &[]),
        };
        finals.retain(|f| !remove.contains(&f.as_str()));
        for f in add {
            if !finals.iter().any(|x| x == f) {
                finals.push((*f).to_owned());
            }
        }
        let mut pending = object.clone();
        let grace = options
            .grace_period_seconds
            .or_else(|| self.strategy.default_grace_period(object));
        let graceful =
            grace.is_some_and(|g| g > 0) && self.strategy.default_grace_period(object).is_some();
        if finals.is_empty() && !graceful && !self.strategy.deletion_held(object) {
            return None;
        }
        if finals != finalizers(object) {
            set_meta(&mut pending, "finalizers", Some(finals.into()));
        }
        if !is_terminating(object) {
            self.strategy.mark_terminating(&mut pending);
            let seconds = if graceful { grace.unwrap_or(0) } else { 0 };
            let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds);
            set_meta(
                &mut pending,
                "deletionTimestamp",
                Some(object::timestamp(at).into()),
            );
            set_meta(
                &mut pending,
                "deletionGracePeriodSeconds",
                Some(seconds.into()),
            );
            if self.strategy.tracks_generation() {
                let generation = object["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                set_meta(&mut pending, "generation", Some(generation.into()));
            }
        } else if graceful {
            // A shorter grace period than the one running shortens it, as upstream.
            let current = object["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0);
            if let Some(g) = grace.filter(|g| *g < current) {
                let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(g);
                set_meta(
                    &mut pending,
                    "deletionTimestamp",
                    Some(object::timestamp(at).into()),
                );
                set_meta(&mut pending, "deletionGracePeriodSeconds", Some(g.into()));
            }
        }
        Some(pending)
    }
}

/// The object without its `resourceVersion`, for comparing contents.
fn strip_version(object: &Value) -> Value {
    let mut object = object.clone();
    set_meta(&mut object, "resourceVersion", None);
    object
}

/// Parses a `resourceVersion` query or field: a non-negative decimal.
pub(crate) fn parse_resource_version(text: &str) -> Result<Revision, ()> {
    text.parse::<Revision>().ok().filter(|r| *r >= 0).ok_or(())
}

/// Maps a store error to the API's error for `resource` and object `name`.
pub(crate) fn store_error(resource: GroupResource<'_>, name: &str, error: StoreError) -> ApiError {
    let status = match error {
        StoreError::NotFound { .. } => StatusError::not_found(resource, name),
        StoreError::AlreadyExists { .. } => StatusError::already_exists(resource, name),
        StoreError::Conflict { .. } => {
            StatusError::conflict(resource, name, StatusError::OBJECT_MODIFIED)
        }
        StoreError::Compacted {
            requested,
            compacted,
        } => StatusError::too_old_resource_version(requested, compacted.unwrap_or(requested)),
        StoreError::FutureRevision { requested, current } => {
            StatusError::too_large_resource_version(requested, current, 1)
        }
        StoreError::ValueTooLarge { limit, .. } => StatusError::request_entity_too_large(&format!(
            "the stored object may not be larger than {limit} bytes"
        )),
        StoreError::Unavailable { message, .. } => StatusError::service_unavailable(&message),
        StoreError::Closed => StatusError::service_unavailable("the datastore is shutting down"),
        StoreError::InvalidArgument(message) => StatusError::bad_request(&message),
        StoreError::WatchLagged { .. } | StoreError::Transform { .. } => {
            StatusError::internal(&error.to_string())
        }
    };
    status.into()
}
