//! Operations on objects that follow their type's merge structure, as structured-merge-diff
//! defines them: merging an applied configuration into an object, comparing two objects into
//! added, modified and removed fields, the set of fields an object sets, and removing a set of
//! fields from an object.
//!
//! Scalars, atomic lists and atomic objects are leaves: they are compared, owned and replaced
//! whole. An empty or null object or list on both sides is a leaf too, which keeps the
//! difference between empty and absent.

use serde_json::{Map, Value};

use super::fieldpath::{Path, PathElement, Set};
use super::schema::{self, Elem, ListKind, Type};

/// The shape a value has under a type, after the type is matched against the value (an untyped
/// value's shape is the value's own).
enum Shape {
    Leaf,
    Object { ty: Type },
    List { elem: Elem, kind: ListKind },
}

fn is_empty_or_null(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// How `ty` treats the values `lhs` and `rhs` (one of which may be absent).
fn shape(ty: Type, lhs: Option<&Value>, rhs: Option<&Value>) -> Shape {
    let sample = match rhs {
        Some(Value::Null) | None => lhs,
        some => some,
    };
    let both_empty = is_empty_or_null(lhs) && is_empty_or_null(rhs);
    match (ty, sample) {
        (Type::Scalar, _) => Shape::Leaf,
        (Type::Struct(_) | Type::Map { .. }, _) if schema::is_atomic_object(ty) => Shape::Leaf,
        (Type::Struct(_) | Type::Map { .. }, Some(Value::Object(_)) | Some(Value::Null) | None) => {
            if both_empty {
                Shape::Leaf
            } else {
                Shape::Object { ty }
            }
        }
        (Type::List { kind: None, .. }, _) => Shape::Leaf,
        (
            Type::List {
                elem,
                kind: Some(kind),
            },
            Some(Value::Array(_)) | Some(Value::Null) | None,
        ) => {
            if both_empty {
                Shape::Leaf
            } else {
                Shape::List { elem, kind }
            }
        }
        (Type::Untyped, Some(Value::Object(_))) if !both_empty => Shape::Object { ty },
        _ => Shape::Leaf,
    }
}

fn as_object(v: Option<&Value>) -> Option<&Map<String, Value>> {
    match v {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn as_list(v: Option<&Value>) -> &[Value] {
    match v {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

/// Why a list item has no path element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError(pub String);

/// The path element of a list item: its key fields (with upstream's defaults for absent ones)
/// for a keyed list, its value for a set.
pub fn item_element(elem: Elem, kind: ListKind, item: &Value) -> Result<PathElement, ItemError> {
    match kind {
        ListKind::Map(keys) => {
            let Value::Object(map) = item else {
                return Err(ItemError(if item.is_null() {
                    "associative list with keys may not have a null element".into()
                } else {
                    "associative list with keys may not have non-map elements".into()
                }));
            };
            let mut fields = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(value) = map.get(*key) {
                    fields.push(((*key).to_owned(), value.clone()));
                } else if let Some(default) = schema::key_default(elem, key) {
                    fields.push(((*key).to_owned(), default.clone()));
                }
            }
            if fields.is_empty() {
                return Err(ItemError(format!(
                    "associative list with keys has an element that omits all key fields {keys:?} (and doesn't have default values for any key fields)"
                )));
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(fields))
        }
        ListKind::Set => match item {
            Value::Object(_) => Err(ItemError(
                "associative list without keys has an element that's a map type".into(),
            )),
            Value::Array(_) => Err(ItemError(
                "not supported: associative list with lists as elements".into(),
            )),
            Value::Null => Err(ItemError(
                "associative list without keys has an element that's an explicit null".into(),
            )),
            scalar => Ok(PathElement::Value(scalar.clone())),
        },
    }
}

/// Indexes a list's items by element, keeping the first of repeated items.
fn index_items(elem: Elem, kind: ListKind, items: &[Value]) -> Vec<(PathElement, &Value)> {
    let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(items.len());
    for item in items {
        if let Ok(pe) = item_element(elem, kind, item)
            && !out.iter().any(|(seen, _)| *seen == pe)
        {
            out.push((pe, item));
        }
    }
    out
}

fn find<'a>(items: &[(PathElement, &'a Value)], pe: &PathElement) -> Option<&'a Value> {
    items.iter().find(|(p, _)| p == pe).map(|(_, v)| *v)
}

/// Merges `rhs` (an applied configuration) into `lhs` (the live object): leaves of `rhs` win,
/// objects merge field by field and keyed lists and sets item by item, in upstream's order.
pub fn merge(ty: Type, lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
    match shape(ty, lhs, rhs) {
        Shape::Leaf => rhs.or(lhs).cloned(),
        Shape::Object { ty } => {
            let empty = Map::new();
            let l = as_object(lhs).unwrap_or(&empty);
            let r = as_object(rhs).unwrap_or(&empty);
            let mut out = Map::new();
            for (key, lv) in l {
                if let Some(v) = merge(schema::child(ty, key), Some(lv), r.get(key)) {
                    out.insert(key.clone(), v);
                }
            }
            for (key, rv) in r {
                if !l.contains_key(key)
                    && let Some(v) = merge(schema::child(ty, key), None, Some(rv))
                {
                    out.insert(key.clone(), v);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Shape::List { elem, kind } => {
            let l = index_items(elem, kind, as_list(lhs));
            let r = index_items(elem, kind, as_list(rhs));
            let items = merge_list_order(&l, &r);
            let out: Vec<Value> = items
                .into_iter()
                .filter_map(|(lv, rv)| merge(elem.ty(), lv, rv))
                .collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
    }
}

/// The items of a merged list in upstream's order, as (live, applied) pairs: items only in the
/// live list keep their place, items in the applied list appear in its order, and an item in
/// both appears where the applied list puts it relative to the other shared items.
#[allow(clippy::type_complexity)]
fn merge_list_order<'a>(
    lhs: &[(PathElement, &'a Value)],
    rhs: &[(PathElement, &'a Value)],
) -> Vec<(Option<&'a Value>, Option<&'a Value>)> {
    let shared: Vec<&PathElement> = rhs
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| find(lhs, pe).is_some())
        .collect();
    let mut shared_i = 0;
    let mut done: Vec<&PathElement> = Vec::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li].0;
            if *pe == rhs[ri].0 {
                done.push(pe);
                out.push((Some(lhs[li].1), Some(rhs[ri].1)));
                li += 1;
                ri += 1;
                shared_i += 1;
                continue;
            }
            let next_shared = shared.get(shared_i);
            if find(rhs, pe).is_some() && next_shared.is_some_and(|n| *n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = &lhs[li].0;
            if find(rhs, pe).is_none() {
                out.push((Some(lhs[li].1), None));
                li += 1;
                continue;
            } else if done.contains(&pe) {
                li += 1;
            }
        }
        if ri < rhs.len() {
            let pe = &rhs[ri].0;
            done.push(pe);
            out.push((find(lhs, pe), Some(rhs[ri].1)));
            ri += 1;
            if shared.get(shared_i).is_some_and(|n| *n == pe) {
                shared_i += 1;
            }
        }
    }
    out
}

/// The difference between two objects, by field.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Fields only the new object has.
    pub added: Set,
    /// Leaves whose value changed.
    pub modified: Set,
    /// Fields only the old object has.
    pub removed: Set,
}

/// Compares `lhs` (old) with `rhs` (new). Top-level fields for which `skip` is true are left
/// out (the fields an endpoint resets).
pub fn compare(ty: Type, lhs: &Value, rhs: &Value, skip: &dyn Fn(&str) -> bool) -> Comparison {
    let mut out = Comparison::default();
    let shape = shape(ty, Some(lhs), Some(rhs));
    compare_children(shape, Some(lhs), Some(rhs), skip, &mut out);
    out
}

/// Compares the children of two values of one shape into `out` (relative to the values).
fn compare_children(
    shape: Shape,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    skip: &dyn Fn(&str) -> bool,
    out: &mut Comparison,
) {
    let no_skip = |_: &str| false;
    match shape {
        Shape::Leaf => {}
        Shape::Object { ty } => {
            let empty = Map::new();
            let l = as_object(lhs).unwrap_or(&empty);
            let r = as_object(rhs).unwrap_or(&empty);
            let meta = schema::is_object_meta(ty);
            let left_out = |key: &str| skip(key) || (meta && key == "managedFields");
            for (key, lv) in l {
                if !left_out(key) {
                    let pe = PathElement::Field(key.clone());
                    compare_child(
                        schema::child(ty, key),
                        pe,
                        Some(lv),
                        r.get(key),
                        &no_skip,
                        out,
                    );
                }
            }
            for (key, rv) in r {
                if !l.contains_key(key) && !left_out(key) {
                    let pe = PathElement::Field(key.clone());
                    compare_child(schema::child(ty, key), pe, None, Some(rv), &no_skip, out);
                }
            }
        }
        Shape::List { elem, kind } => {
            let l = index_items(elem, kind, as_list(lhs));
            let r = index_items(elem, kind, as_list(rhs));
            for (pe, lv) in &l {
                compare_child(elem.ty(), pe.clone(), Some(lv), find(&r, pe), &no_skip, out);
            }
            for (pe, rv) in &r {
                if find(&l, pe).is_none() {
                    compare_child(elem.ty(), pe.clone(), None, Some(rv), &no_skip, out);
                }
            }
        }
    }
}

fn compare_child(
    ty: Type,
    pe: PathElement,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    skip: &dyn Fn(&str) -> bool,
    out: &mut Comparison,
) {
    let shape = shape(ty, lhs, rhs);
    if matches!(shape, Shape::Leaf) {
        match (lhs, rhs) {
            (None, Some(_)) => out.added.insert_member(pe),
            (Some(_), None) => out.removed.insert_member(pe),
            (Some(l), Some(r)) if !values_equal(l, r) => out.modified.insert_member(pe),
            _ => {}
        }
        return;
    }
    let mut sub = Comparison::default();
    compare_children(shape, lhs, rhs, skip, &mut sub);
    match (lhs, rhs) {
        (None, Some(_)) => out.added.insert_member(pe.clone()),
        (Some(_), None) => out.removed.insert_member(pe.clone()),
        _ => {}
    }
    out.added.set_child(pe.clone(), sub.added);
    out.modified.set_child(pe.clone(), sub.modified);
    out.removed.set_child(pe, sub.removed);
}

/// Equality of JSON values with numbers compared by value (`1` equals `1.0`).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| values_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

/// The fields `value` sets: every leaf, every list item, every map entry, and every field whose
/// value is null or an empty object. Top-level fields for which `skip` is true are left out.
pub fn field_set(ty: Type, value: &Value, skip: &dyn Fn(&str) -> bool) -> Set {
    let mut set = Set::new();
    field_set_node(ty, value, skip, &mut set);
    set
}

/// Adds the fields under `value` to `set` (relative to `value`); returns whether `value` itself
/// is a leaf (owned whole).
fn field_set_node(ty: Type, value: &Value, skip: &dyn Fn(&str) -> bool, set: &mut Set) -> bool {
    let atomic_list = matches!(ty, Type::List { kind: None, .. });
    let no_skip = |_: &str| false;
    match (ty, value) {
        (Type::Scalar, _) => true,
        _ if atomic_list || schema::is_atomic_object(ty) => true,
        (Type::Untyped, Value::Null) => false,
        (Type::Untyped, Value::Object(_)) | (Type::Struct(_) | Type::Map { .. }, _) => {
            let Value::Object(map) = value else {
                return false;
            };
            let meta = schema::is_object_meta(ty);
            for (key, v) in map {
                if skip(key) || (meta && key == "managedFields") {
                    continue;
                }
                let pe = PathElement::Field(key.clone());
                let mut sub = Set::new();
                let leaf = field_set_node(schema::child(ty, key), v, &no_skip, &mut sub);
                let empty_map = matches!(v, Value::Object(m) if m.is_empty());
                if leaf || v.is_null() || empty_map || !schema::is_declared(ty, key) {
                    set.insert_member(pe.clone());
                }
                set.set_child(pe, sub);
            }
            false
        }
        (Type::Untyped, _) => true,
        (
            Type::List {
                elem,
                kind: Some(kind),
            },
            Value::Array(items),
        ) => {
            let elements: Vec<Option<PathElement>> = items
                .iter()
                .map(|item| item_element(elem, kind, item).ok())
                .collect();
            for (i, pe) in elements.iter().enumerate() {
                let Some(pe) = pe else { continue };
                let repeated = elements
                    .iter()
                    .enumerate()
                    .any(|(j, other)| j != i && other.as_ref() == Some(pe));
                if repeated {
                    // A repeated item is owned whole, once.
                    set.insert_member(pe.clone());
                    continue;
                }
                let mut sub = Set::new();
                field_set_node(elem.ty(), &items[i], &no_skip, &mut sub);
                set.insert_member(pe.clone());
                set.set_child(pe.clone(), sub);
            }
            false
        }
        (Type::List { .. }, _) => false,
    }
}

/// `value` without the fields in `remove`: a removed field or item goes with everything under
/// it. Returns `None` when nothing is left of an object or list.
pub fn remove(ty: Type, value: &Value, remove: &Set) -> Option<Value> {
    match shape(ty, Some(value), None) {
        Shape::Leaf => Some(value.clone()),
        Shape::Object { ty } => {
            let mut out = Map::new();
            for (key, v) in as_object(Some(value)).into_iter().flatten() {
                let pe = PathElement::Field(key.clone());
                if remove.has_member(&pe) {
                    continue;
                }
                match remove.child(&pe) {
                    Some(sub) => {
                        if let Some(v) = self::remove(schema::child(ty, key), v, sub) {
                            out.insert(key.clone(), v);
                        }
                    }
                    None => {
                        out.insert(key.clone(), v.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Shape::List { elem, kind } => {
            let mut out = Vec::new();
            for item in as_list(Some(value)) {
                let Ok(pe) = item_element(elem, kind, item) else {
                    out.push(item.clone());
                    continue;
                };
                if remove.has_member(&pe) {
                    continue;
                }
                match remove.child(&pe) {
                    Some(sub) => {
                        if let Some(v) = self::remove(elem.ty(), item, sub) {
                            out.push(v);
                        }
                    }
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
    }
}

/// `set` with every struct field that has children made a member too (owning `a.b.c` then also
/// owns `a` when `a` is a named field, but not `a.b` when `a` is a map).
pub fn with_named_fields(ty: Type, set: &Set) -> Set {
    let mut out = Set::new();
    for pe in set.members() {
        out.insert_member(pe.clone());
    }
    for (pe, child) in set.children() {
        let child_ty = match (pe, ty) {
            (PathElement::Field(name), _) => {
                if schema::is_declared(ty, name) {
                    out.insert_member(pe.clone());
                }
                schema::child(ty, name)
            }
            (PathElement::Key(_) | PathElement::Value(_), Type::List { elem, .. }) => elem.ty(),
            _ => Type::Untyped,
        };
        out.set_child(pe.clone(), with_named_fields(child_ty, child));
    }
    out
}

/// Checks an applied configuration against its type: fields the type does not declare, values
/// of the wrong shape, and list items without their keys or repeated. Returns upstream's
/// messages (`.spec.foo: field not declared in schema`).
pub fn validate(ty: Type, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate_at(ty, value, &mut Vec::new(), &mut errors);
    errors
}

fn validate_at(ty: Type, value: &Value, path: &mut Path, errors: &mut Vec<String>) {
    let at = |path: &Path| super::fieldpath::path_text(path);
    match ty {
        Type::Struct(_) | Type::Map { .. } => match value {
            Value::Null => {}
            Value::Object(map) => {
                for (key, v) in map {
                    path.push(PathElement::Field(key.clone()));
                    if matches!(ty, Type::Struct(_)) && !schema::is_declared(ty, key) {
                        errors.push(format!("{}: field not declared in schema", at(path)));
                    } else {
                        validate_at(schema::child(ty, key), v, path, errors);
                    }
                    path.pop();
                }
            }
            other => errors.push(format!("{}: expected map, got {other}", at(path))),
        },
        Type::List { elem, kind } => match value {
            Value::Null => {}
            Value::Array(items) => {
                let mut seen: Vec<PathElement> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match kind {
                        Some(kind) => match item_element(elem, kind, item) {
                            Ok(pe) => {
                                if seen.contains(&pe) {
                                    errors.push(format!(
                                        "{}: duplicate entries for key {pe}",
                                        at(path)
                                    ));
                                    continue;
                                }
                                seen.push(pe.clone());
                                path.push(pe);
                                validate_at(elem.ty(), item, path, errors);
                                path.pop();
                            }
                            Err(ItemError(e)) => {
                                errors.push(format!("{}: element {i}: {e}", at(path)));
                            }
                        },
                        None => {
                            path.push(PathElement::Index(i));
                            validate_at(elem.ty(), item, path, errors);
                            path.pop();
                        }
                    }
                }
            }
            other => errors.push(format!("{}: expected list, got {other}", at(path))),
        },
        Type::Scalar => {
            if matches!(value, Value::Object(_) | Value::Array(_)) {
                errors.push(format!(
                    "{}: expected scalar, got {}",
                    at(path),
                    if value.is_object() { "map" } else { "list" }
                ));
            }
        }
        Type::Untyped => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Type {
        schema::for_kind("apps/v1", "Deployment").unwrap()
    }

    #[test]
    fn merge_keeps_live_fields_and_merges_keyed_lists() {
        let live = json!({
            "metadata": {"name": "d", "labels": {"a": "1"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
            ]}}}
        });
        let config = json!({
            "metadata": {"name": "d", "labels": {"b": "2"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}
            ]}}}
        });
        let out = merge(deployment(), Some(&live), Some(&config)).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(out["spec"]["replicas"], 1);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}])
        );
    }

    #[test]
    fn merge_orders_shared_items_as_the_configuration_does() {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a"}, {"name": "x"}, {"name": "b"}
        ]}}}});
        let config = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "b"}, {"name": "a"}
        ]}}}});
        let out = merge(deployment(), Some(&live), Some(&config)).unwrap();
        let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["x", "b", "a"]);
    }

    #[test]
    fn atomic_lists_and_structs_are_replaced() {
        let live = json!({"spec": {"selector": {"matchLabels": {"a": "1"}},
            "template": {"spec": {"containers": [{"name": "a", "args": ["1", "2"]}]}}}});
        let config = json!({"spec": {"selector": {"matchLabels": {"b": "2"}},
            "template": {"spec": {"containers": [{"name": "a", "args": ["3"]}]}}}});
        let out = merge(deployment(), Some(&live), Some(&config)).unwrap();
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"b": "2"}}));
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["3"])
        );
    }

    #[test]
    fn field_sets_mark_map_entries_and_list_items() {
        let config = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "i",
                    "ports": [{"containerPort": 80}]}]}}}
        });
        let set = field_set(deployment(), &config, &|_| false);
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:apiVersion": {}, "f:kind": {},
                "f:metadata": {"f:labels": {"f:app": {}}, "f:name": {}},
                "f:spec": {"f:replicas": {}, "f:selector": {},
                    "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}
                        }}
                    }}}}}
            })
        );
    }

    #[test]
    fn compare_reports_added_modified_and_removed_fields() {
        let old = json!({"metadata": {"labels": {"a": "1", "b": "1"}}, "spec": {"replicas": 1}});
        let new = json!({"metadata": {"labels": {"a": "2", "c": "1"}}, "spec": {"replicas": 1,
            "paused": true}});
        let c = compare(deployment(), &old, &new, &|_| false);
        assert_eq!(
            c.modified.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {"f:a": {}}}})
        );
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {"f:c": {}}}, "f:spec": {"f:paused": {}}})
        );
        assert_eq!(
            c.removed.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {"f:b": {}}}})
        );
    }

    #[test]
    fn remove_drops_fields_and_items() {
        let value = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
        let mut set = Set::new();
        set.insert(&[
            PathElement::Field("metadata".into()),
            PathElement::Field("labels".into()),
            PathElement::Field("a".into()),
        ]);
        set.insert(&[
            PathElement::Field("spec".into()),
            PathElement::Field("template".into()),
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            PathElement::Key(vec![("name".into(), json!("a"))]),
        ]);
        let out = remove(deployment(), &value, &set).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "b"}])
        );
    }

    #[test]
    fn validation_names_undeclared_fields_and_bad_items() {
        let errors = validate(
            deployment(),
            &json!({"spec": {"foo": 1, "template": {"spec": {"containers": [
                {"image": "x"}, {"name": "a"}, {"name": "a"}
            ]}}}}),
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(errors[0], ".spec.foo: field not declared in schema");
        assert!(errors[1].contains("omits all key fields"), "{errors:?}");
        assert!(errors[2].contains("duplicate entries"), "{errors:?}");
    }
}
