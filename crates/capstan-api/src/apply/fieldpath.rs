//! Field paths and sets of them, as `metadata.managedFields` records them: a path is a sequence
//! of elements (a field name, a list item's key fields, a set item's value, or an index), and a
//! set is a tree of the paths it holds, written in the `FieldsV1` form (`{"f:spec":
//! {"f:replicas": {}}}`, with `"."` marking a path that has children and is itself a member).
//! The order of elements and the text forms are upstream's (structured-merge-diff), so sets
//! written by Capstan and by upstream read the same.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A field of an object or a key of a map: `f:name`.
    Field(String),
    /// The item of a keyed list whose key fields have these values (sorted by name):
    /// `k:{"name":"nginx"}`.
    Key(Vec<(String, Value)>),
    /// The item of a set with this value: `v:"a"`.
    Value(Value),
    /// An item by position: `i:0`.
    Index(usize),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key of this element.
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut object = Map::new();
                for (name, value) in fields {
                    object.insert(name.clone(), value.clone());
                }
                format!("k:{}", Value::Object(object))
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Parses a `FieldsV1` key; `None` for a form this version does not know (skipped, as
    /// upstream skips them) and `Err` for a malformed one.
    pub fn from_key(key: &str) -> Result<Option<PathElement>, String> {
        let Some((kind, rest)) = key.split_once(':') else {
            return Ok(None);
        };
        match kind {
            "f" => Ok(Some(PathElement::Field(rest.to_owned()))),
            "k" => {
                let object: Map<String, Value> =
                    serde_json::from_str(rest).map_err(|e| e.to_string())?;
                let mut fields: Vec<(String, Value)> = object.into_iter().collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Some(PathElement::Key(fields)))
            }
            "v" => Ok(Some(PathElement::Value(
                serde_json::from_str(rest).map_err(|e| e.to_string())?,
            ))),
            "i" => Ok(Some(PathElement::Index(
                rest.parse()
                    .map_err(|_| format!("invalid index {rest:?}"))?,
            ))),
            _ => Ok(None),
        }
    }
}

impl fmt::Display for PathElement {
    /// Upstream's path text: `.spec`, `[name="nginx"]`, `[="a"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", value_text(value))?;
                }
                f.write_str("]")
            }
            PathElement::Value(value) => write!(f, "[={}]", value_text(value)),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A value as upstream prints it inside a path: strings quoted, everything else as JSON.
fn value_text(value: &Value) -> String {
    value.to_string()
}

/// Upstream's total order of values: floats, ints, strings, bools, lists, maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(n) if !(n.is_i64() || n.is_u64()) => 0,
            Value::Number(_) => 1,
            Value::String(_) => 2,
            Value::Bool(_) => 3,
            Value::Array(_) => 4,
            Value::Object(_) => 5,
            Value::Null => 6,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x.cmp(&y)
            } else {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (x, y) in x.iter().zip(y) {
                let c = compare_values(x, y);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((kx, vx), (ky, vy)) in xs.iter().zip(&ys) {
                let c = kx.cmp(ky).then_with(|| compare_values(vx, vy));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((na, va), (nb, vb)) in a.iter().zip(b) {
                    let c = na.cmp(nb).then_with(|| compare_values(va, vb));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// A field path.
pub type Path = Vec<PathElement>;

/// Upstream's text of a path, e.g. `.spec.containers[name="nginx"].image`.
pub fn path_text(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths, as a tree: the elements that are members at this level, and the sets
/// under each element that has members below it. Children are never empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    /// The empty set.
    pub fn new() -> Set {
        Set::default()
    }

    /// Whether the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path (the empty path is no field, and is ignored).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether the set holds `path`.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether the set holds `pe` itself as a member at this level.
    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The paths under `pe`, relative to it.
    pub fn child(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    /// Every path in either set.
    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.union_in_place(other);
        out
    }

    /// Adds every path of `other`.
    pub fn union_in_place(&mut self, other: &Set) {
        self.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            self.children
                .entry(pe.clone())
                .or_default()
                .union_in_place(child);
        }
    }

    /// The paths of `self` that `other` does not hold.
    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    /// The paths of `self` that neither `other` holds nor lie under a member of `other`.
    pub fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let rest = match other.children.get(pe) {
                Some(o) => child.recursive_difference(o),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    /// The paths both sets hold.
    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let both = child.intersection(o);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        Set { members, children }
    }

    /// Every path, members of a level before the paths below it, each in element order (the
    /// order upstream lists conflicts in).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut path = prefix.clone();
            path.push(pe.clone());
            out.push(path);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Iterates over the members at this level.
    pub fn members(&self) -> impl Iterator<Item = &PathElement> {
        self.members.iter()
    }

    /// Iterates over the children at this level.
    pub fn children(&self) -> impl Iterator<Item = (&PathElement, &Set)> {
        self.children.iter()
    }

    /// Removes `path` as a member (what is under it stays).
    pub fn remove(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(child) = self.children.get_mut(first) {
                    child.remove(rest);
                    if child.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }

    pub(crate) fn insert_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    pub(crate) fn set_child(&mut self, pe: PathElement, child: Set) {
        if child.is_empty() {
            self.children.remove(&pe);
        } else {
            self.children.insert(pe, child);
        }
    }

    /// The `FieldsV1` form of the set.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_map(false))
    }

    fn fields_v1_map(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !self.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        // Members and children merge in element order; an element that is both writes its
        // children with ".".
        let mut members = self.members.iter().peekable();
        let mut children = self.children.iter().peekable();
        loop {
            match (members.peek(), children.peek()) {
                (Some(m), Some((c, set))) => match (*m).cmp(c) {
                    Ordering::Less => {
                        out.insert(m.to_key(), Value::Object(Map::new()));
                        members.next();
                    }
                    Ordering::Greater => {
                        out.insert(c.to_key(), Value::Object(set.fields_v1_map(false)));
                        children.next();
                    }
                    Ordering::Equal => {
                        out.insert(c.to_key(), Value::Object(set.fields_v1_map(true)));
                        members.next();
                        children.next();
                    }
                },
                (Some(m), None) => {
                    out.insert(m.to_key(), Value::Object(Map::new()));
                    members.next();
                }
                (None, Some((c, set))) => {
                    out.insert(c.to_key(), Value::Object(set.fields_v1_map(false)));
                    children.next();
                }
                (None, None) => break,
            }
        }
        out
    }

    /// Reads a `FieldsV1` document.
    pub fn from_fields_v1(value: &Value) -> Result<Set, String> {
        let Value::Object(map) = value else {
            return Err("FieldsV1 must be an object".into());
        };
        let mut set = Set::new();
        for (key, inner) in map {
            if key == "." {
                continue;
            }
            let Some(pe) = PathElement::from_key(key)? else {
                continue;
            };
            let Value::Object(inner_map) = inner else {
                return Err(format!("the value of {key:?} must be an object"));
            };
            let child = Set::from_fields_v1(inner)?;
            if inner_map.is_empty() || inner_map.contains_key(".") {
                set.members.insert(pe.clone());
            }
            if !child.is_empty() {
                set.children.insert(pe, child);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    #[test]
    fn fields_v1_round_trips_with_upstreams_layout() {
        let doc = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:containers": {
                    "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
                },
                "f:replicas": {}
            }
        });
        let set = Set::from_fields_v1(&doc).unwrap();
        assert!(set.has(&[f("spec"), f("replicas")]));
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(!set.has(&[f("metadata")]));
        let key = PathElement::Key(vec![("name".into(), json!("nginx"))]);
        assert!(set.has(&[f("spec"), f("containers"), key.clone()]));
        assert_eq!(set.to_fields_v1(), doc);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            serde_json::to_string(&doc).unwrap()
        );
        assert_eq!(
            path_text(&[f("spec"), f("containers"), key, f("image")]),
            ".spec.containers[name=\"nginx\"].image"
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::new();
        a.insert(&[f("a"), f("b")]);
        a.insert(&[f("a"), f("c")]);
        a.insert(&[f("d")]);
        let mut b = Set::new();
        b.insert(&[f("a"), f("b")]);
        b.insert(&[f("d")]);
        let diff = a.difference(&b);
        assert_eq!(diff.paths(), vec![vec![f("a"), f("c")]]);
        assert_eq!(a.intersection(&b), b);
        let mut only_a = Set::new();
        only_a.insert(&[f("a")]);
        assert_eq!(a.recursive_difference(&only_a).paths(), vec![vec![f("d")]]);
        assert!(a.difference(&a).is_empty());
        assert_eq!(b.union(&diff), a);
    }

    #[test]
    fn element_order_is_upstreams() {
        let mut elements = [
            PathElement::Index(0),
            PathElement::Value(json!("x")),
            PathElement::Value(json!(1)),
            PathElement::Key(vec![("name".into(), json!("a"))]),
            f("z"),
            f("a"),
        ];
        elements.sort();
        let keys: Vec<String> = elements.iter().map(PathElement::to_key).collect();
        assert_eq!(
            keys,
            ["f:a", "f:z", "k:{\"name\":\"a\"}", "v:1", "v:\"x\"", "i:0"]
        );
    }
}
