//! `metadata.managedFields`: who owns which fields of an object, updated on every write as
//! upstream's field manager does. An update (create, PUT, non-apply PATCH) gives its manager the
//! fields it changed and takes them from everyone else; an apply gives its manager exactly the
//! fields of its configuration, fails on fields other managers own with different values
//! (unless forced, which takes them), and removes the fields the manager applied last time and
//! no longer applies, when nobody else owns them.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::fieldpath::{Path, PathElement, Set, path_text};
use super::schema::Type;
use super::typed::{self, Comparison};

/// The two operations upstream records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// The identity of a managed-fields entry: appliers are one entry per manager (and
/// subresource), updaters one per manager, API version and subresource.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Manager {
    /// The field manager's name.
    pub name: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The API version of an Update entry (empty for Apply entries, which are keyed without).
    pub api_version: String,
    /// The subresource written through, or empty.
    pub subresource: String,
}

impl Manager {
    /// The entry of `name` for `operation` through `subresource` at `api_version`.
    pub fn new(name: &str, operation: Operation, api_version: &str, subresource: &str) -> Self {
        Manager {
            name: if name.is_empty() {
                "unknown".into()
            } else {
                name.into()
            },
            operation,
            api_version: if operation == Operation::Apply {
                String::new()
            } else {
                api_version.into()
            },
            subresource: subresource.into(),
        }
    }

    /// How upstream names the manager in a conflict: `"kubectl"`, `"x" with subresource
    /// "status"`, `"kubectl-edit" using v1`.
    fn describe(&self) -> String {
        let mut out = format!("{:?}", self.name);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// The fields one manager owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// The fields.
    pub set: Set,
    /// The API version they are expressed in.
    pub api_version: String,
    /// When the manager last changed the object (RFC 3339), if known.
    pub time: Option<String>,
}

/// Every manager's fields.
pub type Managed = BTreeMap<Manager, Owned>;

/// Reads `metadata.managedFields`. Errors name what is wrong, as upstream's decoder does.
pub fn decode(object: &Value) -> Result<Managed, String> {
    let mut managed = Managed::new();
    let Some(entries) = object
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    else {
        return Ok(managed);
    };
    for (i, entry) in entries.iter().enumerate() {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let operation = match text("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = text("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match text("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => {
                return Err(format!(
                    "invalid fieldsType {other:?} in managed fields entry {i}"
                ));
            }
        }
        let set = match entry.get("fieldsV1") {
            Some(fields) => Set::from_fields_v1(fields)
                .map_err(|e| format!("error decoding versioned set: {e}"))?,
            None => Set::new(),
        };
        let manager = Manager {
            name: text("manager").to_owned(),
            operation,
            api_version: if operation == Operation::Apply {
                String::new()
            } else {
                api_version.to_owned()
            },
            subresource: text("subresource").to_owned(),
        };
        managed.insert(
            manager,
            Owned {
                set,
                api_version: api_version.to_owned(),
                time: entry.get("time").and_then(Value::as_str).map(str::to_owned),
            },
        );
    }
    Ok(managed)
}

/// Whether a request's `managedFields` asks to clear them: an empty list, or one empty entry.
pub fn is_reset(object: &Value) -> bool {
    match object.get("metadata").and_then(|m| m.get("managedFields")) {
        Some(Value::Array(entries)) => match entries.as_slice() {
            [] => true,
            [only] => only.as_object().is_some_and(Map::is_empty),
            _ => false,
        },
        _ => false,
    }
}

/// Writes `managed` into the object's `metadata.managedFields`, in upstream's order (appliers
/// first, then by time, manager, version and subresource); no entries removes the field.
pub fn encode(object: &mut Value, managed: &Managed) {
    let mut entries: Vec<(&Manager, &Owned)> = managed.iter().collect();
    let seconds = |o: &Owned| o.time.clone().unwrap_or_default();
    entries.sort_by(|(a, oa), (b, ob)| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| seconds(oa).cmp(&seconds(ob)))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| oa.api_version.cmp(&ob.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let list: Vec<Value> = entries
        .into_iter()
        .map(|(manager, owned)| {
            let mut entry = Map::new();
            entry.insert("manager".into(), manager.name.clone().into());
            entry.insert("operation".into(), manager.operation.as_str().into());
            entry.insert("apiVersion".into(), owned.api_version.clone().into());
            if let Some(time) = &owned.time {
                entry.insert("time".into(), time.clone().into());
            }
            entry.insert("fieldsType".into(), "FieldsV1".into());
            entry.insert("fieldsV1".into(), owned.set.to_fields_v1());
            if !manager.subresource.is_empty() {
                entry.insert("subresource".into(), manager.subresource.clone().into());
            }
            Value::Object(entry)
        })
        .collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Removes the fields no manager owns: the type and the system-set metadata.
fn strip_meta(set: &mut Set) {
    let f = |name: &str| PathElement::Field(name.into());
    set.remove(&[f("apiVersion")]);
    set.remove(&[f("kind")]);
    set.remove(&[f("metadata")]);
    for field in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.remove(&[f("metadata"), f(field)]);
    }
}

/// Fields a write through an endpoint never owns, because the endpoint resets them (`status` on
/// the main endpoint of a kind with a status subresource; everything but `status` and
/// `metadata` through `/status`).
#[derive(Clone, Debug, Default)]
pub struct Ignored {
    top_level: Vec<String>,
    keep_only: Option<Vec<String>>,
}

impl Ignored {
    /// Ignore nothing.
    pub fn none() -> Self {
        Ignored::default()
    }

    /// Ignore these top-level fields (and everything under them).
    pub fn fields(names: &[&str]) -> Self {
        Ignored {
            top_level: names.iter().map(|s| (*s).to_owned()).collect(),
            keep_only: None,
        }
    }

    /// Ignore every top-level field but these.
    pub fn all_but(names: &[&str]) -> Self {
        Ignored {
            top_level: Vec::new(),
            keep_only: Some(names.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    /// Whether top-level field `name` is ignored.
    pub fn skips(&self, name: &str) -> bool {
        self.top_level.iter().any(|n| n == name)
            || self
                .keep_only
                .as_ref()
                .is_some_and(|keep| !keep.iter().any(|n| n == name))
    }
}

/// A write's view of the object's type and version, shared by [`update`] and [`apply`].
#[derive(Clone)]
pub struct Context<'a> {
    /// The object's type.
    pub ty: Type,
    /// The `apiVersion` the request speaks.
    pub api_version: &'a str,
    /// What the endpoint resets.
    pub ignored: &'a Ignored,
    /// The current time, RFC 3339, for the writer's entry.
    pub now: &'a str,
    /// For kinds served in several versions: an object of `api_version` in another version,
    /// with that version's type, so that the fields of managers who wrote in that version are
    /// compared in their own terms (as upstream converts for each manager's version).
    pub other_versions: Option<&'a VersionConverter>,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("api_version", &self.api_version)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl Context<'_> {
    /// How a write from `old` to `new` looks in each version other than the request's that
    /// some manager wrote in.
    fn other_comparisons(
        &self,
        managed: &Managed,
        old: &Value,
        new: &Value,
    ) -> BTreeMap<String, Comparison> {
        let mut out = BTreeMap::new();
        let Some(convert) = self.other_versions else {
            return out;
        };
        for owned in managed.values() {
            let version = owned.api_version.as_str();
            if version == self.api_version || version.is_empty() || out.contains_key(version) {
                continue;
            }
            let (Some((ty, old)), Some((_, new))) = (convert(old, version), convert(new, version))
            else {
                continue;
            };
            let comparison = typed::compare(ty, &old, &new, &|name| self.ignored.skips(name));
            out.insert(version.to_owned(), comparison);
        }
        out
    }
}

/// Converts an object to another version of its kind (named by `apiVersion`), with that
/// version's type; `None` when the versions are not related.
pub type VersionConverter = dyn Fn(&Value, &str) -> Option<(Type, Value)>;

/// An apply that other managers' fields stand in the way of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<(Manager, Path)>);

impl Conflicts {
    /// Upstream's message: `Apply failed with 1 conflict: conflict with "kubectl-client-side-apply"
    /// using apps/v1: .spec.replicas`, or one line per conflicting field grouped by manager.
    pub fn message(&self) -> String {
        if let [(manager, path)] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                manager.describe(),
                path_text(path)
            );
        }
        let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (manager, path) in &self.0 {
            by_manager
                .entry(manager.describe())
                .or_default()
                .push(path_text(path));
        }
        let mut lines = Vec::new();
        for (manager, paths) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }

    /// The `Status` causes: (field, message) for each conflicting field.
    pub fn causes(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|(manager, path)| {
                (
                    path_text(path),
                    format!("conflict with {}", manager.describe()),
                )
            })
            .collect()
    }
}

/// Merges the oldest Update entries beyond `max` into one `ancient-changes` entry per API
/// version, as upstream caps them.
pub fn cap_update_managers(managed: &mut Managed, max: usize) {
    let mut updaters: Vec<(Manager, Option<String>)> = managed
        .iter()
        .filter(|(m, _)| m.operation == Operation::Update)
        .map(|(m, o)| (m.clone(), o.time.clone()))
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort_by(|(a, ta), (b, tb)| {
        ta.clone()
            .unwrap_or_default()
            .cmp(&tb.clone().unwrap_or_default())
            .then_with(|| a.cmp(b))
    });
    let mut count = updaters.len();
    let mut first_by_version: BTreeMap<String, Manager> = BTreeMap::new();
    for (manager, time) in updaters {
        if count <= max {
            break;
        }
        let Some(owned) = managed.get(&manager).cloned() else {
            continue;
        };
        let version = owned.api_version.clone();
        let bucket = Manager::new("ancient-changes", Operation::Update, &version, "");
        match first_by_version.get(&version) {
            Some(first) => {
                if !managed.contains_key(&bucket)
                    && let Some(first_owned) = managed.remove(first)
                {
                    managed.insert(bucket.clone(), first_owned);
                }
                if let Some(entry) = managed.get_mut(&bucket) {
                    entry.set.union_in_place(&owned.set);
                    entry.time = time;
                }
                managed.remove(&manager);
                count -= 1;
            }
            None => {
                first_by_version.insert(version, manager);
            }
        }
    }
}

/// Takes the fields a write changed from every manager but `writer`: with `force` (always, for
/// updates) conflicting fields change hands; without it they are reported.
fn take_changed(
    comparison: &Comparison,
    others: &BTreeMap<String, Comparison>,
    managed: &mut Managed,
    writer: &Manager,
    force: bool,
) -> Result<(), Conflicts> {
    let mut conflicts = Vec::new();
    let mut lost: Vec<(Manager, Set)> = Vec::new();
    for (manager, owned) in managed.iter() {
        if manager == writer {
            continue;
        }
        // A manager's fields are in the terms of the version it wrote in.
        let comparison = others.get(&owned.api_version).unwrap_or(comparison);
        let changed = comparison.modified.union(&comparison.added);
        let conflict = owned.set.intersection(&changed);
        if !conflict.is_empty() {
            conflicts.extend(conflict.paths().into_iter().map(|p| (manager.clone(), p)));
            lost.push((manager.clone(), conflict));
        }
        if !comparison.removed.is_empty() {
            lost.push((manager.clone(), comparison.removed.clone()));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(Conflicts(conflicts));
    }
    for (manager, set) in lost {
        if let Some(owned) = managed.get_mut(&manager) {
            owned.set = owned.set.difference(&set);
        }
    }
    managed.retain(|_, owned| !owned.set.is_empty());
    Ok(())
}

/// Records an update by `writer` that turned `old` into `new` (`old` is the empty object of the
/// type on create): the writer gains every field it added or changed, which everyone else loses,
/// and removed fields leave every owner.
pub fn update(
    ctx: &Context<'_>,
    old: &Value,
    new: &Value,
    managed: &mut Managed,
    writer: &Manager,
) {
    let comparison = typed::compare(ctx.ty, old, new, &|name| ctx.ignored.skips(name));
    // The operation's own fields, as upstream computes them for a fresh "current operation".
    let mut current = comparison.modified.union(&comparison.added);
    // Updates never conflict.
    if !managed.is_empty() {
        let others = ctx.other_comparisons(managed, old, new);
        let _ = take_changed(&comparison, &others, managed, writer, true);
    }
    strip_meta(&mut current);
    if let Some(owned) = managed.get_mut(writer)
        && !comparison.removed.is_empty()
    {
        owned.set = owned.set.difference(&comparison.removed);
    }
    if !current.is_empty() {
        if let Some(previous) = managed.remove(writer) {
            current.union_in_place(&previous.set);
            strip_meta(&mut current);
        }
        managed.insert(
            writer.clone(),
            Owned {
                set: current,
                api_version: ctx.api_version.to_owned(),
                time: Some(ctx.now.to_owned()),
            },
        );
    }
    managed.retain(|_, owned| !owned.set.is_empty());
}

/// Applies `config` for `writer` to `live`: returns the new object (`None` when nothing changes)
/// with `managed` updated, or the conflicts with other managers.
pub fn apply(
    ctx: &Context<'_>,
    live: &Value,
    config: &Value,
    managed: &mut Managed,
    writer: &Manager,
    force: bool,
) -> Result<Option<Value>, Conflicts> {
    let merged = typed::merge(ctx.ty, Some(live), Some(config)).unwrap_or_else(|| json!({}));
    let last = managed.get(writer).map(|o| o.set.clone());
    let mut applied = typed::field_set(ctx.ty, config, &|name| ctx.ignored.skips(name));
    strip_meta(&mut applied);
    let previous_time = managed.get(writer).and_then(|o| o.time.clone());
    managed.insert(
        writer.clone(),
        Owned {
            set: applied,
            api_version: ctx.api_version.to_owned(),
            time: previous_time,
        },
    );
    let new = match &last {
        Some(last) if !last.is_empty() => prune(ctx.ty, &merged, managed, last),
        _ => merged,
    };
    let comparison = typed::compare(ctx.ty, live, &new, &|name| ctx.ignored.skips(name));
    let others = ctx.other_comparisons(managed, live, &new);
    take_changed(&comparison, &others, managed, writer, force)?;
    // The applier keeps what it applied even when the result is empty.
    if typed::values_equal(live, &new) {
        return Ok(None);
    }
    if let Some(owned) = managed.get_mut(writer) {
        owned.time = Some(ctx.now.to_owned());
    }
    Ok(Some(new))
}

/// Removes from `merged` the fields the applier applied last time (`last`) and no longer
/// applies, unless another manager (or the new configuration) owns them.
fn prune(ty: Type, merged: &Value, managed: &Managed, last: &Set) -> Value {
    let no_skip = |_: &str| false;
    let last = typed::with_named_fields(ty, last);
    let pruned = typed::remove(ty, merged, &last).unwrap_or_else(|| json!({}));
    // Add back what someone owns.
    let mut owned = Set::new();
    for o in managed.values() {
        owned.union_in_place(&o.set);
    }
    let merged_set = typed::with_named_fields(ty, &typed::field_set(ty, merged, &no_skip));
    let pruned_set = typed::with_named_fields(ty, &typed::field_set(ty, &pruned, &no_skip));
    let owned = typed::with_named_fields(ty, &owned);
    let pruned = typed::remove(
        ty,
        merged,
        &merged_set.difference(&pruned_set.union(&owned)),
    )
    .unwrap_or_else(|| json!({}));
    // Only what the applier owned may go.
    let pruned_set = typed::with_named_fields(ty, &typed::field_set(ty, &pruned, &no_skip));
    typed::remove(
        ty,
        merged,
        &merged_set.difference(&pruned_set).intersection(&last),
    )
    .unwrap_or_else(|| json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::schema;

    const NOW: &str = "2026-11-22T15:00:00Z";

    fn ctx() -> (Type, Ignored) {
        (
            schema::for_kind("v1", "ConfigMap").unwrap(),
            Ignored::none(),
        )
    }

    fn applier(name: &str) -> Manager {
        Manager::new(name, Operation::Apply, "v1", "")
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    /// Applies a ConfigMap with `data` as the applier `name`.
    fn apply_data(
        ctx: &Context<'_>,
        live: &Value,
        data: Value,
        managed: &mut Managed,
        name: &str,
        force: bool,
    ) -> Result<Option<Value>, Conflicts> {
        apply(ctx, live, &cm(data), managed, &applier(name), force)
    }

    fn owned(managed: &Managed, name: &str) -> Value {
        managed
            .get(&applier(name))
            .map(|o| o.set.to_fields_v1())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn two_appliers_share_a_field_and_the_last_owner_removes_it() {
        let (ty, ignored) = ctx();
        let ctx = Context {
            ty,
            api_version: "v1",
            ignored: &ignored,
            now: NOW,
            other_versions: None,
        };
        let mut managed = Managed::new();
        let live = cm(json!({}));
        let live = apply_data(
            &ctx,
            &live,
            json!({"a": "1", "b": "1"}),
            &mut managed,
            "one",
            false,
        )
        .unwrap()
        .unwrap();
        // The same value for "a" from another manager: shared, no conflict.
        let live = apply_data(&ctx, &live, json!({"a": "1"}), &mut managed, "two", false)
            .unwrap()
            .unwrap_or(live);
        assert_eq!(owned(&managed, "two"), json!({"f:data": {"f:a": {}}}));
        // "one" stops applying "a" and "b": "b" goes, "a" stays (owned by "two").
        let live = apply_data(&ctx, &live, json!({}), &mut managed, "one", false)
            .unwrap()
            .unwrap();
        assert_eq!(live["data"], json!({"a": "1"}));
        // A different value conflicts, names the owner, and force takes the field.
        let conflict =
            apply_data(&ctx, &live, json!({"a": "2"}), &mut managed, "one", false).unwrap_err();
        assert_eq!(
            conflict.message(),
            "Apply failed with 1 conflict: conflict with \"two\": .data.a"
        );
        let live = apply_data(&ctx, &live, json!({"a": "2"}), &mut managed, "one", true)
            .unwrap()
            .unwrap();
        assert_eq!(live["data"]["a"], "2");
        assert!(!managed.contains_key(&applier("two")));
        assert_eq!(owned(&managed, "one"), json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn an_update_takes_changed_fields_from_appliers() {
        let (ty, ignored) = ctx();
        let ctx = Context {
            ty,
            api_version: "v1",
            ignored: &ignored,
            now: NOW,
            other_versions: None,
        };
        let mut managed = Managed::new();
        let live = apply_data(
            &ctx,
            &cm(json!({})),
            json!({"a": "1", "b": "1"}),
            &mut managed,
            "one",
            false,
        )
        .unwrap()
        .unwrap();
        let editor = Manager::new("kubectl-edit", Operation::Update, "v1", "");
        let new = cm(json!({"a": "2", "b": "1"}));
        update(&ctx, &live, &new, &mut managed, &editor);
        assert_eq!(owned(&managed, "one"), json!({"f:data": {"f:b": {}}}));
        assert_eq!(
            managed[&editor].set.to_fields_v1(),
            json!({"f:data": {"f:a": {}}})
        );
        // Applying the old value again now conflicts with the editor.
        let err = apply_data(
            &ctx,
            &new,
            json!({"a": "1", "b": "1"}),
            &mut managed,
            "one",
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.a"
        );
    }

    #[test]
    fn managed_fields_round_trip_through_the_object() {
        let (ty, ignored) = ctx();
        let ctx = Context {
            ty,
            api_version: "v1",
            ignored: &ignored,
            now: NOW,
            other_versions: None,
        };
        let mut managed = Managed::new();
        let creator = Manager::new("kubectl-create", Operation::Update, "v1", "");
        let mut object = cm(json!({"a": "1"}));
        update(&ctx, schema::zero(ty), &object, &mut managed, &creator);
        encode(&mut object, &managed);
        assert_eq!(
            object["metadata"]["managedFields"],
            json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                "time": NOW, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}])
        );
        assert_eq!(decode(&object).unwrap(), managed);
    }
}
