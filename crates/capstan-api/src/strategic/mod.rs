//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds, with
//! upstream's semantics (`strategicpatch.StrategicMergePatch`, as kube-apiserver applies it):
//! what `kubectl apply` (client-side), `kubectl edit`, `kubectl set image`, `kubectl rollout
//! restart` and `kubectl patch` send.
//!
//! A patch is a JSON object merged into the stored object field by field:
//!
//! * objects merge recursively; `null` removes a field;
//! * lists whose field has the `merge` strategy merge: items of objects are matched by the
//!   field's merge key and merged, unmatched ones appended; scalars are unioned; all other
//!   lists are replaced whole;
//! * directives steer the merge: `$patch: replace` (in an object, or as a list item) replaces
//!   instead of merging, `$patch: delete` removes an object or a list item, `$retainKeys`
//!   clears every field it does not name, `$setElementOrder/<list>` gives the order of a merged
//!   list, `$deleteFromPrimitiveList/<list>` removes scalars from a merged list. `$patch: merge`
//!   is refused, in objects and in lists, as upstream refuses it.
//!
//! Which fields merge, and on which key, is patch metadata: [`metadata`] holds the table and
//! [`for_kind`] finds the metadata of a kind ([`Catalogue`] builds it for other types). Custom
//! resources have none; upstream refuses strategic merge patches for them with the 415 of
//! [`custom_resource_rejection`]. Failures are [`StrategicPatchError`]s, whose
//! [`StrategicPatchError::to_status`] gives the status kube-apiserver answers with.
//!
//! Where upstream's results depend on Go specifics (the order of merged lists comes out of
//! `sort.SliceStable` with an inconsistent comparison; error messages print maps with `%v`),
//! this module reproduces them. Go's map iteration order is random where upstream iterates a
//! patch; this module iterates in key order, which is one of the orders upstream may take.

mod error;
pub mod metadata;
mod order;
mod schema;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

use crate::StatusError;
use error::{go_s, go_type_name, go_v};
use order::{Keying, interleave, order_seen_after_merge, sort_by_order};
use schema::LookupError;

pub use error::{StrategicPatchError, json_kind};
pub use metadata::{FieldPatch, PatchStrategy};
pub use schema::{Catalogue, PatchMeta, builtin, for_kind, served_kinds};

/// The content type of a strategic merge patch.
pub const CONTENT_TYPE: &str = "application/strategic-merge-patch+json";

/// The patch content types kube-apiserver accepts for built-in resources, in the order its
/// 415 message lists them.
pub const BUILTIN_PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    CONTENT_TYPE,
    "application/apply-patch+yaml",
];

/// The patch content types kube-apiserver accepts for custom resources: no strategic merge
/// patch, for want of patch metadata.
pub const CUSTOM_RESOURCE_PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// The 415 `UnsupportedMediaType` kube-apiserver answers a strategic merge patch of a custom
/// resource (or of any kind [`for_kind`] does not know) with: "the body of the request was in
/// an unknown format - accepted media types include: application/json-patch+json,
/// application/merge-patch+json, application/apply-patch+yaml".
pub fn custom_resource_rejection() -> StatusError {
    StatusError::unsupported_media_type(&CUSTOM_RESOURCE_PATCH_TYPES)
}

/// How deeply the object and the patch may nest (objects and lists); deeper documents are
/// refused with [`StrategicPatchError::TooDeep`] before any work, which bounds the recursion.
/// JSON as `serde_json` parses it by default never nests deeper.
pub const MAX_DEPTH: usize = 128;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Go's names for the decoded JSON types, as upstream's type errors print them.
const GO_MAP: &str = "map[string]interface {}";
const GO_LIST: &str = "[]interface {}";

type Object = Map<String, Value>;
type Result<T, E = StrategicPatchError> = std::result::Result<T, E>;

/// Applies strategic merge patch `patch` to `original`, an object whose type's patch metadata
/// is `meta`, and returns the patched object. A `null` patch changes nothing.
pub fn apply(original: &Value, patch: &Value, meta: PatchMeta<'_>) -> Result<Value> {
    check_depth(original)?;
    check_depth(patch)?;
    let original = match original {
        Value::Object(original) => original.clone(),
        Value::Null => Object::new(),
        _ => return Err(StrategicPatchError::BadJsonDocument),
    };
    let patch = match patch {
        Value::Object(patch) => patch.clone(),
        Value::Null => Object::new(),
        other => {
            return Err(StrategicPatchError::PatchNotAnObject {
                found: json_kind(other),
            });
        }
    };
    merge_map(original, patch, meta).map(Value::Object)
}

/// Refuses a document nested deeper than [`MAX_DEPTH`], without recursing.
fn check_depth(value: &Value) -> Result<()> {
    let mut pending = vec![(value, 0usize)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        if depth >= MAX_DEPTH {
            return Err(StrategicPatchError::TooDeep { limit: MAX_DEPTH });
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    Ok(())
}

/// Merges `patch` into `original` (upstream's `mergeMap`).
fn merge_map(mut original: Object, mut patch: Object, meta: PatchMeta<'_>) -> Result<Object> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Object::new()),
            _ => Err(unknown_patch_type(directive, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    merge_ordered_lists(&mut original, &mut patch, meta)?;

    for (key, patch_value) in patch {
        let (key, deletion) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let field = directive_field(
                &key,
                DELETE_FROM_PRIMITIVE_LIST,
                StrategicPatchError::BadPrimitiveListFormat,
            )?;
            (field.to_owned(), true)
        } else {
            (key, false)
        };
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(current) = original.remove(&key) else {
            if !deletion && let Some(value) = added(patch_value) {
                original.insert(key, value);
            }
            continue;
        };
        let merged = match (current, patch_value) {
            (Value::Object(current), Value::Object(patch_value)) => {
                let (child, field) = meta
                    .field(&key)
                    .map_err(|error| lookup_error(error, &key))?;
                let (_, strategy) = split_strategy(field.strategy)?;
                if strategy == "replace" {
                    Some(Value::Object(patch_value))
                } else {
                    Some(Value::Object(merge_map(current, patch_value, child)?))
                }
            }
            (Value::Array(current), Value::Array(patch_value)) => {
                let (item, field) = meta
                    .list_field(&key)
                    .map_err(|error| lookup_error(error, &key))?;
                let (_, strategy) = split_strategy(field.strategy)?;
                if strategy == "merge" || deletion {
                    let merged = merge_list(current, patch_value, item, field.merge_key, deletion)?;
                    Some(Value::Array(merged))
                } else {
                    Some(Value::Array(patch_value))
                }
            }
            (current, patch_value) if go_type_name(&current) == go_type_name(&patch_value) => {
                remove_directives(patch_value)
            }
            // A deletion list for a field of another type leaves the field alone.
            (current, _) if deletion => Some(current),
            (_, patch_value) => added(patch_value),
        };
        if let Some(merged) = merged {
            original.insert(key, merged);
        }
    }
    Ok(original)
}

/// A patch value taken as it is (the object has no such field, or one of another type): nulls
/// dropped from objects inside it, objects carrying `$patch` dropped; `None` if the value
/// itself is dropped.
fn added(mut value: Value) -> Option<Value> {
    discard_nulls(&mut value);
    remove_directives(value)
}

/// Drops `null` fields from every object inside `value` (list items stay, even `null` ones).
fn discard_nulls(value: &mut Value) {
    // Bounded by the depth check in `apply`.
    match value {
        Value::Object(map) => {
            map.retain(|_, item| !item.is_null());
            map.values_mut().for_each(discard_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// Drops every object carrying a `$patch` directive from `value`; `None` if `value` is one.
/// Other directives stay, as upstream leaves them.
fn remove_directives(value: Value) -> Option<Value> {
    // Bounded by the depth check in `apply`.
    match value {
        Value::Object(map) => {
            if map.contains_key(DIRECTIVE) {
                return None;
            }
            let kept = map
                .into_iter()
                .filter_map(|(key, item)| remove_directives(item).map(|item| (key, item)))
                .collect();
            Some(Value::Object(kept))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

/// The field a `<prefix>/<field>` directive key names.
fn directive_field<'k>(
    key: &'k str,
    prefix: &str,
    malformed: StrategicPatchError,
) -> Result<&'k str> {
    match key.split_once('/') {
        Some((head, field)) if head == prefix => Ok(field),
        _ => Err(malformed),
    }
}

fn lookup_error(error: LookupError, field: &str) -> StrategicPatchError {
    match error {
        LookupError::UnknownField { type_name } => StrategicPatchError::UnknownField {
            type_name,
            field: field.to_owned(),
        },
        LookupError::NotAStruct(kind) => StrategicPatchError::NotAStruct { kind },
        LookupError::NotAList => StrategicPatchError::NotAList,
        LookupError::ListOfLists => StrategicPatchError::SliceOfSlice,
    }
}

/// Splits a declared strategy into whether it includes `retainKeys` and the other strategy
/// (empty if none), as upstream's `extractRetainKeysPatchStrategy`.
fn split_strategy(strategy: Option<&str>) -> Result<(bool, &str)> {
    let Some(strategy) = strategy else {
        return Ok((false, ""));
    };
    let parts: Vec<&str> = strategy.split(',').collect();
    match parts.as_slice() {
        ["retainKeys"] => Ok((true, "")),
        [single] => Ok((false, single)),
        ["retainKeys", other] | [other, "retainKeys"] => Ok((true, other)),
        _ => Err(StrategicPatchError::UnexpectedStrategy {
            strategies: parts.into_iter().map(str::to_owned).collect(),
        }),
    }
}

fn unknown_patch_type(directive: &Value, map: &Object) -> StrategicPatchError {
    StrategicPatchError::UnknownPatchType {
        directive: go_s(directive),
        map: go_v(&Value::Object(map.clone())),
    }
}

fn no_merge_key(item: &Value, merge_key: &str) -> StrategicPatchError {
    StrategicPatchError::NoMergeKey {
        map: go_v(item),
        key: merge_key.to_owned(),
    }
}

/// The value of `merge_key` in a list item, which must be a map that holds it.
fn merge_key_value<'a>(item: &'a Value, merge_key: &str) -> Result<&'a Value, StrategicPatchError> {
    item.as_object()
        .ok_or_else(|| wrong_type(GO_MAP, item))?
        .get(merge_key)
        .ok_or_else(|| no_merge_key(item, merge_key))
}

fn wrong_type(expected: &'static str, found: &Value) -> StrategicPatchError {
    StrategicPatchError::WrongType {
        expected,
        actual: go_type_name(found),
    }
}

/// Applies a `$retainKeys` directive: every field of `original` it does not name is cleared,
/// and the patch may set no field it does not name.
fn retain_keys(original: &mut Object, patch: &mut Object) -> Result<()> {
    let Some(retained) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retained) = retained else {
        return Err(StrategicPatchError::BadRetainKeysFormat);
    };
    let named = |key: &str| retained.iter().any(|item| item.as_str() == Some(key));
    for (key, value) in patch.iter() {
        if value.is_null()
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || key.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !named(key) {
            return Err(StrategicPatchError::BadRetainKeysFormat);
        }
    }
    original.retain(|key, _| named(key));
    Ok(())
}

/// Whether the items of the lists (taken together) are objects, checking they all have one
/// type, as upstream's `sliceElementType`.
fn items_are_maps(original: &[Value], patch: &[Value]) -> Result<bool> {
    let lists = || {
        go_v(&Value::Array(vec![
            Value::Array(original.to_vec()),
            Value::Array(patch.to_vec()),
        ]))
    };
    let mut first: Option<&Value> = None;
    for item in original.iter().chain(patch) {
        match first {
            None => {
                if item.is_null() {
                    return Err(StrategicPatchError::NullListItem { lists: lists() });
                }
                if item.is_array() {
                    return Err(StrategicPatchError::ListOfLists);
                }
                first = Some(item);
            }
            Some(first) => {
                if go_type_name(first) != go_type_name(item) {
                    return Err(StrategicPatchError::MixedListItems { lists: lists() });
                }
            }
        }
    }
    first
        .map(Value::is_object)
        .ok_or(StrategicPatchError::NoListItems)
}

/// Merges list `patch` into list `original` of a field with the `merge` strategy (or a
/// `$deleteFromPrimitiveList` list when `deletion`), as upstream's `mergeSlice`.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    item: PatchMeta<'_>,
    merge_key: &str,
    deletion: bool,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let maps = items_are_maps(&original, &patch)?;
    let keying = Keying { maps, merge_key };
    if !maps {
        if deletion {
            return Ok(original
                .into_iter()
                .filter(|value| !patch.contains(value))
                .collect());
        }
        let server_order = keying.keys(&original);
        let patch_order = keying.keys(&patch);
        let mut merged = original;
        merged.extend(patch.iter().cloned());
        dedupe_scalars(&mut merged);
        // Upstream sorts the items out by merge key when the field declares one, which
        // scalars cannot have.
        if let (false, Some(first)) = (merge_key.is_empty(), merged.first()) {
            return Err(wrong_type(GO_MAP, first));
        }
        let (named, server_only): (Vec<_>, Vec<_>) =
            merged.into_iter().partition(|value| patch.contains(value));
        let named = sort_by_order(named, &patch_order, keying);
        let server_only = sort_by_order(server_only, &server_order, keying);
        return Ok(interleave(server_only, named, &server_order, keying));
    }
    if merge_key.is_empty() {
        return Err(StrategicPatchError::MergeKeyUndeclared {
            kind: item.go_kind(),
        });
    }
    let (original, patch) = list_directives(original, patch, merge_key)?;
    let server_order = keying.keys(&original);
    let patch_order = keying.keys(&patch);
    let merged = merge_items(original, patch, merge_key, item)?;
    let mut named = Vec::new();
    let mut server_only = Vec::new();
    for value in merged {
        let key = merge_key_value(&value, merge_key)?;
        if patch_order
            .iter()
            .any(|candidate| candidate.as_ref() == Some(key))
        {
            named.push(value);
        } else {
            server_only.push(value);
        }
    }
    let named = sort_by_order(named, &patch_order, keying);
    let server_only = sort_by_order(server_only, &server_order, keying);
    Ok(interleave(server_only, named, &server_order, keying))
}

/// Carries out the `$patch` items of a merged list of objects: `delete` removes the original
/// items with that merge key, `replace` makes the other patch items the whole list. Returns
/// the original list and the patch items left to merge.
fn list_directives(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for value in patch {
        let Some(directive) = value.get(DIRECTIVE) else {
            rest.push(value);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(key) = value.get(merge_key) else {
                    return Err(no_merge_key(&value, merge_key));
                };
                original.retain(|item| item.get(merge_key) != Some(key));
            }
            // Keep going: the other directives still have to be taken out.
            Some("replace") => replace = true,
            Some("merge") => return Err(StrategicPatchError::MergeDirectiveInList),
            _ => {
                let map = value.as_object().cloned().unwrap_or_default();
                return Err(unknown_patch_type(directive, &map));
            }
        }
    }
    if replace {
        Ok((rest, Vec::new()))
    } else {
        Ok((original, rest))
    }
}

/// Merges each patch item into the original item with the same merge key, or appends it
/// (as it is, directives and nulls included, as upstream does).
fn merge_items(
    mut list: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
    item: PatchMeta<'_>,
) -> Result<Vec<Value>> {
    for value in patch {
        let Value::Object(value) = value else {
            return Err(wrong_type(GO_MAP, &value));
        };
        let Some(key) = value.get(merge_key) else {
            return Err(no_merge_key(&Value::Object(value), merge_key));
        };
        let found = list.iter().position(|candidate| {
            candidate
                .as_object()
                .and_then(|candidate| candidate.get(merge_key))
                == Some(key)
        });
        match found.and_then(|index| list.get_mut(index)) {
            Some(slot) => {
                let Value::Object(current) = std::mem::take(slot) else {
                    return Err(StrategicPatchError::ItemNotAMap {
                        index: found.unwrap_or_default(),
                    });
                };
                *slot = Value::Object(merge_map(current, value, item)?);
            }
            None => list.push(Value::Object(value)),
        }
    }
    Ok(list)
}

/// Removes duplicates from a list of scalars the way upstream does (a duplicate's place is
/// taken by the last item), which reorders the list; the caller restores an order after.
fn dedupe_scalars(items: &mut Vec<Value>) {
    if items.is_empty() {
        return;
    }
    let mut last = items.len() - 1;
    let mut i = 0;
    while i < last {
        let mut j = i + 1;
        while j <= last {
            if items[i] == items[j] {
                items.swap(j, last);
                items.truncate(last);
                last -= 1;
            } else {
                j += 1;
            }
        }
        i += 1;
    }
}

/// Checks that every item of `list` is an object with the merge key.
fn require_merge_keys(list: &[Value], merge_key: &str) -> Result<()> {
    for item in list {
        let Some(map) = item.as_object() else {
            return Err(wrong_type(GO_MAP, item));
        };
        if !map.contains_key(merge_key) {
            return Err(no_merge_key(item, merge_key));
        }
    }
    Ok(())
}

/// Processes the `$setElementOrder/<field>` directives of `patch`: merges each such list field
/// and puts its items in the directive's order (server-only items where they stood), as
/// upstream's `mergePatchIntoOriginal`. The list fields done are taken out of `patch`.
fn merge_ordered_lists(
    original: &mut Object,
    patch: &mut Object,
    meta: PatchMeta<'_>,
) -> Result<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|key| key.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(wrong_type(GO_LIST, &order));
        };
        let field = directive_field(
            &key,
            SET_ELEMENT_ORDER,
            StrategicPatchError::BadSetElementOrderFormat,
        )?;
        let current = match original.get(field) {
            None => None,
            Some(Value::Array(_)) => original.remove(field),
            Some(other) => return Err(wrong_type(GO_LIST, other)),
        };
        let patch_list = match patch.get(field) {
            None => None,
            Some(Value::Array(_)) => patch.remove(field),
            Some(other) => return Err(wrong_type(GO_LIST, other)),
        };
        let as_list = |value: &Option<Value>| -> Vec<Value> {
            match value {
                Some(Value::Array(items)) => items.clone(),
                _ => Vec::new(),
            }
        };
        let (item, field_meta) = meta
            .list_field(field)
            .map_err(|error| lookup_error(error, field))?;
        let (_, strategy) = split_strategy(field_meta.strategy)?;
        let merge_key = field_meta.merge_key;
        let original_items = as_list(&current);
        let patch_items = as_list(&patch_list);
        check_order(&patch_items, &order, merge_key)?;

        // Whether upstream merged the lists in the original list's memory (see
        // `order_seen_after_merge`).
        let mut reused_memory = false;

        let merged = match (current, patch_list) {
            (Some(Value::Array(current)), None) => current,
            (None, Some(Value::Array(patch_list))) => patch_list
                .into_iter()
                .filter_map(remove_directives)
                .collect(),
            (Some(Value::Array(current)), Some(Value::Array(patch_list))) => {
                if strategy == "merge" {
                    reused_memory = true;
                    merge_list(current, patch_list, item, merge_key, false)?
                } else {
                    patch_list
                }
            }
            _ => continue,
        };

        let mut named = Vec::new();
        let mut server_only = Vec::new();
        if merge_key.is_empty() {
            for value in merged {
                if order.contains(&value) {
                    named.push(value);
                } else {
                    server_only.push(value);
                }
            }
        } else {
            for value in merged {
                let key = merge_key_value(&value, merge_key)?;
                let mut found = false;
                for (index, candidate) in order.iter().enumerate() {
                    let Some(candidate) = candidate.as_object() else {
                        return Err(StrategicPatchError::ItemNotAMap { index });
                    };
                    if candidate.get(merge_key) == Some(key) {
                        found = true;
                        break;
                    }
                }
                if found {
                    named.push(value);
                } else {
                    server_only.push(value);
                }
            }
        }

        let maps = items_are_maps(&original_items, &patch_items)?;
        let keying = Keying { maps, merge_key };
        if maps {
            require_merge_keys(&named, merge_key)?;
            require_merge_keys(&order, merge_key)?;
        }
        let named = sort_by_order(named, &keying.keys(&order), keying);
        if maps {
            require_merge_keys(&server_only, merge_key)?;
            require_merge_keys(&original_items, merge_key)?;
        }
        let server_order = if maps && reused_memory {
            order_seen_after_merge(&original_items, &patch_items, keying)
        } else {
            keying.keys(&original_items)
        };
        let server_only = sort_by_order(server_only, &server_order, keying);
        original.insert(
            field.to_owned(),
            Value::Array(interleave(server_only, named, &server_order, keying)),
        );
    }
    Ok(())
}

/// Checks that the patch list's items (less deletions) appear in the `$setElementOrder` list,
/// in its order (upstream's `validatePatchWithSetOrderList`).
fn check_order(patch_list: &[Value], order: &[Value], merge_key: &str) -> Result<()> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let mut kept = Vec::with_capacity(patch_list.len());
    for item in patch_list {
        if merge_key.is_empty() {
            kept.push(item);
            continue;
        }
        let Some(map) = item.as_object() else {
            return Err(wrong_type(GO_MAP, item));
        };
        if map.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
            kept.push(item);
        }
    }
    let (mut in_patch, mut in_order) = (0, 0);
    while let (Some(&item), Some(ordered)) = (kept.get(in_patch), order.get(in_order)) {
        if item
            .as_object()
            .is_some_and(|map| map.contains_key(DIRECTIVE))
        {
            in_patch += 1;
            continue;
        }
        if same_item(item, ordered, merge_key)? {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < kept.len() {
        return Err(StrategicPatchError::OrderMismatch {
            patch: go_v(&Value::Array(patch_list.to_vec())),
            order: go_v(&Value::Array(order.to_vec())),
        });
    }
    Ok(())
}

/// Whether two list items are the same item: equal scalars, or objects with equal merge keys.
fn same_item(left: &Value, right: &Value, merge_key: &str) -> Result<bool> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let left_map = left.as_object().ok_or_else(|| wrong_type(GO_MAP, left))?;
    let right_map = right.as_object().ok_or_else(|| wrong_type(GO_MAP, right))?;
    let left_key = left_map
        .get(merge_key)
        .ok_or_else(|| no_merge_key(left, merge_key))?;
    let right_key = right_map
        .get(merge_key)
        .ok_or_else(|| no_merge_key(right, merge_key))?;
    Ok(left_key == right_key)
}
