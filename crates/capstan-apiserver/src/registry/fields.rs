//! The field manager: keeps `metadata.managedFields` of built-in objects current on every create,
//! update and patch, and runs server-side apply (`application/apply-patch+yaml`). The rules are
//! in `capstan_api::apply`; this module decides, per request, which entry is written (manager,
//! operation, API version, subresource), what the endpoint resets, and turns conflicts and bad
//! configurations into upstream's errors.

use capstan_api::StatusError;
use capstan_api::apply::managed::{self, Context, Ignored, Managed, Manager, Operation};
use capstan_api::apply::{schema, typed};
use capstan_api::catalog::Resource;
use serde_json::{Value, json};

use crate::registry::object::{meta_str, now_rfc3339};
use crate::status::ApiError;

/// The most Update entries an object keeps; older ones merge into `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The annotation `kubectl apply` (client-side) keeps its last configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Who writes: the field manager named by the request (`fieldManager`, or the first part of the
/// `User-Agent` as upstream takes it), and `force` for applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Writer {
    /// The manager name.
    pub manager: String,
    /// `force=true`: an apply takes conflicting fields.
    pub force: bool,
}

/// What one endpoint of a resource records.
pub(crate) struct Endpoint<'a> {
    /// The resource.
    pub resource: &'static Resource,
    /// `status`, `scale`, or `None` for the main endpoint.
    pub subresource: Option<&'a str>,
    /// Whether the kind has a status subresource (its main endpoint then never owns `status`).
    pub status_subresource: bool,
    /// A custom resource's merge structure, from its schema.
    pub custom_type: Option<schema::Type>,
}

impl Endpoint<'_> {
    fn ignored(&self) -> Ignored {
        match self.subresource {
            Some("status") => Ignored::all_but(&["status", "metadata"]),
            None if self.status_subresource => Ignored::fields(&["status"]),
            _ => Ignored::none(),
        }
    }

    /// What a field manager context borrows: the time now, the API version, what is ignored.
    fn context_parts(&self) -> (String, String, Ignored) {
        (now_rfc3339(), self.resource.api_version(), self.ignored())
    }

    fn manager(&self, name: &str, operation: Operation) -> Manager {
        Manager::new(
            name,
            operation,
            &self.resource.api_version(),
            self.subresource.unwrap_or_default(),
        )
    }

    /// Converts an object of this endpoint's version to another version of its kind, with
    /// that version's type: how the fields of managers that wrote in another version are
    /// compared.
    fn other_versions(&self) -> impl Fn(&Value, &str) -> Option<(schema::Type, Value)> + use<> {
        let kind = self.resource.kind;
        move |object: &Value, version: &str| {
            let from = object.get("apiVersion").and_then(Value::as_str)?;
            let conversion = capstan_api::convert::between(kind, from, version)?;
            let converted = conversion.convert(object, version).ok()?;
            Some((schema::for_kind(version, kind)?, converted))
        }
    }

    /// The type field management walks: the built-in kind's, or a custom resource's from its
    /// schema (`capstan_api::apply::custom`), or without one upstream's deduced shape (objects
    /// merged key by key, lists replaced whole).
    fn ty(&self) -> Option<schema::Type> {
        let resource = self.resource;
        schema::for_kind(&resource.api_version(), resource.kind)
            .or(self.custom_type)
            .or_else(|| {
                capstan_api::catalog::lookup(resource.group, resource.version, resource.plural)
                    .is_none()
                    .then_some(schema::Type::Untyped)
            })
    }

    /// Records an update by `writer` that turns `old` (`None` on create) into `new`: `new`'s
    /// `managedFields` are replaced by the result. A request that clears `managedFields`
    /// (`[]` or `[{}]`) clears them; an object that has none and already exists stays
    /// untracked until its first apply, as upstream.
    pub(crate) fn update(&self, old: Option<&Value>, new: &mut Value, writer: &str) {
        let Some(ty) = self.ty() else {
            return;
        };
        let from_request = if self.subresource.is_some() || managed::is_reset(new) {
            None
        } else {
            managed::decode(new).ok().filter(|m| !m.is_empty())
        };
        let reset = self.subresource.is_none() && managed::is_reset(new);
        let mut owned: Managed = match (from_request, reset) {
            (Some(m), _) => m,
            (None, true) => Managed::new(),
            (None, false) => old
                .map(|o| managed::decode(o).unwrap_or_default())
                .unwrap_or_default(),
        };
        remove_managed_fields(new);
        if owned.is_empty() && old.is_some_and(|o| !meta_str(o, "uid").is_empty()) {
            return;
        }
        let old = old.unwrap_or_else(|| schema::zero(ty));
        let (now, api_version, ignored) = self.context_parts();
        let other_versions = self.other_versions();
        let ctx = Context {
            ty,
            api_version: &api_version,
            ignored: &ignored,
            now: &now,
            other_versions: Some(&other_versions),
        };
        managed::update(
            &ctx,
            old,
            new,
            &mut owned,
            &self.manager(writer, Operation::Update),
        );
        managed::cap_update_managers(&mut owned, MAX_UPDATE_MANAGERS);
        managed::encode(new, &owned);
    }

    /// Applies `config` for `writer` to `live` (`None` when the object does not exist yet) and
    /// returns the object to write, with its `managedFields`.
    pub(crate) fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        writer: &Writer,
    ) -> Result<Value, ApiError> {
        let resource = self.resource;
        let Some(ty) = self.ty() else {
            return Err(StatusError::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
            ])
            .into());
        };
        let gvk = |v: &Value| {
            let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
            format!("{group}/{version}, Kind={kind}")
        };
        let expected = format!(
            "{}/{}, Kind={}",
            resource.group, resource.version, resource.kind
        );
        if gvk(config) != expected {
            return Err(
                StatusError::bad_request(&format!("invalid object type: {}", gvk(config))).into(),
            );
        }
        if config
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .is_some_and(|m| !m.is_null())
        {
            return Err(StatusError::bad_request("metadata.managedFields must be nil").into());
        }
        let errors = typed::validate(ty, config);
        if !errors.is_empty() {
            let name = meta_str(config, "name");
            let namespace = meta_str(config, "namespace");
            let detail = match errors.as_slice() {
                [one] => one.clone(),
                many => format!("errors:\n  {}", many.join("\n  ")),
            };
            return Err(StatusError::bad_request(&format!(
                "failed to create typed patch object ({namespace}/{name}; {expected}): {detail}"
            ))
            .into());
        }
        let empty = json!({});
        let live = live.unwrap_or(&empty);
        let mut owned = managed::decode(live).map_err(|e| {
            ApiError::from(StatusError::internal(&format!(
                "failed to decode managed fields: {e}"
            )))
        })?;
        let (now, api_version, ignored) = self.context_parts();
        let other_versions = self.other_versions();
        let ctx = Context {
            ty,
            api_version: &api_version,
            ignored: &ignored,
            now: &now,
            other_versions: Some(&other_versions),
        };
        let mut live = live.clone();
        remove_managed_fields(&mut live);
        if owned.is_empty() && !meta_str(&live, "uid").is_empty() {
            // An object nobody manages yet: what it has belongs to "before-first-apply".
            managed::update(
                &ctx,
                schema::zero(ty),
                &live,
                &mut owned,
                &self.manager("before-first-apply", Operation::Update),
            );
        }
        let applier = self.manager(&writer.manager, Operation::Apply);
        let before = owned.clone();
        let result = managed::apply(&ctx, &live, config, &mut owned, &applier, writer.force);
        let result = match result {
            Err(conflicts) if writer.manager == "kubectl" && !writer.force => {
                // Fields `kubectl apply` set client-side may move to its server-side apply.
                let allowed = last_applied_fields(ty, &live);
                if allowed
                    .is_some_and(|allowed| conflicts.0.iter().all(|(_, path)| allowed.has(path)))
                {
                    owned = before;
                    managed::apply(&ctx, &live, config, &mut owned, &applier, true)
                } else {
                    Err(conflicts)
                }
            }
            other => other,
        };
        let mut new = match result {
            Ok(Some(new)) => new,
            Ok(None) => live,
            Err(conflicts) => {
                return Err(
                    StatusError::apply_conflict(&conflicts.message(), &conflicts.causes()).into(),
                );
            }
        };
        if writer.manager == "kubectl" {
            update_last_applied(&mut new, config);
        }
        managed::encode(&mut new, &owned);
        Ok(new)
    }
}

fn remove_managed_fields(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// The fields of the client-side `kubectl apply` configuration that still hold the live values.
fn last_applied_fields(
    ty: schema::Type,
    live: &Value,
) -> Option<capstan_api::apply::fieldpath::Set> {
    let text = live["metadata"]["annotations"][LAST_APPLIED].as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    if last.get("apiVersion") != live.get("apiVersion") {
        return None;
    }
    let set = typed::field_set(ty, &last, &|_| false);
    let diff = typed::compare(ty, &last, live, &|_| false);
    Some(
        set.difference(&diff.modified)
            .difference(&diff.added)
            .difference(&diff.removed),
    )
}

/// Keeps the client-side apply annotation in step when `kubectl` applies server-side.
fn update_last_applied(object: &mut Value, config: &Value) {
    if object["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return;
    }
    let mut last = config.clone();
    if let Some(annotations) = last
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty()
            && let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("annotations");
        }
    }
    object["metadata"]["annotations"][LAST_APPLIED] = Value::String(format!("{last}\n"));
}
