//! Strict decoding of request bodies (`fieldValidation`): the fields a JSON or YAML document
//! repeats, joined with the unknown fields the typed decode finds, worded and ordered as
//! upstream's strict decoder reports them.
//!
//! A JSON body is parsed once, into a `Value`, by a visitor that notices a key repeated within
//! one object (the map insert finds the key taken, which costs nothing when it is not) and
//! resolves it as Go's decoder does when it fills a typed object: a repeated object merges into
//! the earlier one key by key, a repeated array overwrites the earlier one element by element,
//! anything else replaces it. Only when there is an order to establish (a repeated key, or more
//! than one unknown field) is the raw document walked again, to list the problems in document
//! order with upstream's field paths (`spec.containers[0].name`, map keys verbatim).
//!
//! A YAML body converts as upstream converts it: a repeated key keeps its last value whole, and
//! the strict conversion's complaint is yaml.v2's, `yaml: unmarshal errors:` followed by one
//! `line N: key "x" already set in map` per repeat, N being the line where the repeated value
//! starts. The first parse refuses repeated keys; only a body that has some is parsed again,
//! noting where each repeat is.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fmt;

use bytes::Bytes;
use capstan_api::field::go_quote;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Upstream's strict decoder stops collecting problems at this many.
pub(crate) const MAX_PROBLEMS: usize = 100;

/// How upstream's strict errors about YAML begin; its warnings drop this and split the rest.
const YAML_ERRORS: &str = "yaml: unmarshal errors:";

/// One thing strict decoding reports about a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A field the kind does not have, by path.
    Unknown(String),
    /// A field an object of the document names twice, by path.
    Duplicate(String),
    /// The repeated keys of a YAML document, one `line N: key "x" already set in map` each.
    Yaml(Vec<String>),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unknown(path) => write!(f, "unknown field {}", go_quote(path)),
            Problem::Duplicate(path) => write!(f, "duplicate field {}", go_quote(path)),
            Problem::Yaml(lines) => write!(f, "{YAML_ERRORS}\n  {}", lines.join("\n  ")),
        }
    }
}

impl Problem {
    /// The `Warning` texts of this problem under `fieldValidation=Warn`: upstream splits a YAML
    /// complaint into one warning per line.
    pub(crate) fn warnings(&self) -> Vec<String> {
        match self {
            Problem::Yaml(lines) => lines.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// Upstream's `strict decoding error: a, b` for a non-empty list of problems.
pub(crate) fn strict_decoding_error(problems: &[Problem]) -> String {
    let list: Vec<String> = problems.iter().map(Problem::to_string).collect();
    format!("strict decoding error: {}", list.join(", "))
}

/// What a parsed body leaves for strict field validation to report, beyond its value.
#[derive(Clone, Debug, Default)]
pub(crate) enum Source {
    /// Nothing: a protobuf body, or an object the server built.
    #[default]
    Opaque,
    /// A JSON document, kept to order its problems, and whether an object in it repeats a key.
    Json {
        /// The document as sent.
        bytes: Bytes,
        /// Whether some object names a key twice.
        repeats: bool,
    },
    /// A YAML document and yaml.v2's lines about the keys it repeats.
    Yaml {
        /// `line N: key "x" already set in map`, in document order.
        repeats: Vec<String>,
    },
}

impl Source {
    /// The strict decoding problems of the body, given the unknown fields its typed decode
    /// found (as paths), in the order upstream reports them.
    pub(crate) fn problems(&self, unknown: &[String]) -> Vec<Problem> {
        let listed = || {
            unknown
                .iter()
                .take(MAX_PROBLEMS)
                .map(|path| Problem::Unknown(path.clone()))
                .collect::<Vec<_>>()
        };
        match self {
            Source::Json { bytes, repeats } if *repeats || unknown.len() > 1 => {
                let unknown: HashSet<&str> = unknown.iter().map(String::as_str).collect();
                let is_unknown = |path: &str, _: &str, _: usize| unknown.contains(path);
                walk(bytes, &is_unknown).unwrap_or_else(|_| listed())
            }
            // Upstream checks the YAML first, then decodes the JSON it converts to, whose keys
            // are sorted as the unknown fields are.
            Source::Yaml { repeats } if !repeats.is_empty() => {
                let mut problems = vec![Problem::Yaml(repeats.clone())];
                problems.extend(listed());
                problems
            }
            _ => listed(),
        }
    }
}

/// Parses a JSON document as Go's decoder fills a typed object from it, and tells whether some
/// object in it repeats a key.
pub(crate) fn parse_json(bytes: &[u8]) -> Result<(Value, bool), serde_json::Error> {
    let repeats = Cell::new(false);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = JsonSeed { repeats: &repeats }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok((value, repeats.get()))
}

/// The repeated fields of a JSON document (a patch, decoded as a free-form map), in document
/// order. The document must have parsed already.
pub(crate) fn json_duplicates(bytes: &[u8]) -> Vec<Problem> {
    walk(bytes, &|_: &str, _: &str, _: usize| false).unwrap_or_default()
}

/// The problems of a JSON patch decoded as upstream decodes its operations: fields other than
/// `op`, `path`, `from` and `value` are unknown, and repeats count anywhere.
pub(crate) fn json_patch_problems(bytes: &[u8]) -> Vec<Problem> {
    let is_unknown = |_: &str, key: &str, depth: usize| {
        depth == 1 && !matches!(key, "op" | "path" | "from" | "value")
    };
    walk(bytes, &is_unknown).unwrap_or_default()
}

/// A JSON document as Go's `%+v` prints the `map[string]interface{}` it decodes into (how
/// upstream shows a strategic merge patch it refuses): `map[a:1 b:[x y]]`, keys sorted.
pub(crate) fn go_format(value: &Value) -> String {
    let mut out = String::new();
    go_format_into(value, &mut out);
    out
}

fn go_format_into(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&go_float(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                go_format_into(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                go_format_into(item, out);
            }
            out.push(']');
        }
    }
}

/// Go's `%v` of a float64: the shortest digits, in exponent form (`1e+06`, `1e-05`) when the
/// exponent is below -4 or at least 6.
fn go_float(f: f64) -> String {
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        f.to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    }
}

/// Resolves a repeated key of a JSON object as Go's decoder does when it decodes the second
/// value into the field the first one filled.
fn merge_repeat(earlier: &mut Value, later: Value) {
    match (earlier, later) {
        (Value::Object(earlier), Value::Object(later)) => {
            for (key, value) in later {
                match earlier.entry(key) {
                    Entry::Occupied(mut slot) => merge_repeat(slot.get_mut(), value),
                    Entry::Vacant(slot) => {
                        slot.insert(value);
                    }
                }
            }
        }
        (Value::Array(earlier), Value::Array(later)) => {
            let len = later.len();
            for (i, value) in later.into_iter().enumerate() {
                match earlier.get_mut(i) {
                    Some(slot) => merge_repeat(slot, value),
                    None => earlier.push(value),
                }
            }
            earlier.truncate(len);
        }
        (earlier, later) => *earlier = later,
    }
}

/// Builds a `Value` as `serde_json` does, noting repeated keys.
#[derive(Clone, Copy)]
struct JsonSeed<'a> {
    repeats: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for JsonSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(mut slot) => {
                    self.repeats.set(true);
                    merge_repeat(slot.get_mut(), value);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// Decides whether a key is unknown, from its path, the key itself and the depth of the object
/// holding it (0 for the document).
type IsUnknown<'a> = dyn Fn(&str, &str, usize) -> bool + 'a;

/// Walks a JSON document in order, listing unknown fields (not entered) and repeated keys
/// (entered, as Go's decoder decodes them again), each once, at most [`MAX_PROBLEMS`].
fn walk(bytes: &[u8], is_unknown: &IsUnknown<'_>) -> Result<Vec<Problem>, serde_json::Error> {
    let mut path = String::new();
    let mut problems = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    Walk {
        path: &mut path,
        depth: 0,
        is_unknown,
        problems: &mut problems,
    }
    .deserialize(&mut deserializer)?;
    Ok(problems)
}

struct Walk<'a, 'f> {
    path: &'a mut String,
    depth: usize,
    is_unknown: &'a IsUnknown<'f>,
    problems: &'a mut Vec<Problem>,
}

impl<'f> Walk<'_, 'f> {
    fn note(&mut self, problem: Problem) {
        if self.problems.len() < MAX_PROBLEMS && !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }

    fn inner(&mut self, depth: usize) -> Walk<'_, 'f> {
        Walk {
            path: &mut *self.path,
            depth,
            is_unknown: self.is_unknown,
            problems: &mut *self.problems,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let len = self.path.len();
            self.path.push('[');
            self.path.push_str(&index.to_string());
            self.path.push(']');
            let depth = self.depth + 1;
            let more = seq.next_element_seed(self.inner(depth))?.is_some();
            self.path.truncate(len);
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let len = self.path.len();
            if len > 0 {
                self.path.push('.');
            }
            self.path.push_str(&key);
            if (self.is_unknown)(self.path, &key, self.depth) {
                let path = self.path.clone();
                self.note(Problem::Unknown(path));
                map.next_value::<IgnoredAny>()?;
            } else {
                if !seen.insert(key) {
                    let path = self.path.clone();
                    self.note(Problem::Duplicate(path));
                }
                let depth = self.depth + 1;
                map.next_value_seed(self.inner(depth))?;
            }
            self.path.truncate(len);
        }
        Ok(())
    }
}

thread_local! {
    /// The repeats met by the YAML parse under way on this thread (parses do not nest).
    static YAML_REPEATS: RefCell<Vec<YamlRepeat>> = const { RefCell::new(Vec::new()) };
}

/// A key a YAML mapping repeats, and where its value starts.
struct YamlRepeat {
    key: String,
    /// The 1-based line where the parser places the value.
    line: u64,
    /// The byte offset of a scalar value, whose line may need correcting.
    scalar_offset: Option<u64>,
}

/// The stack of the thread that parses a document with repeated keys: room for the parser's
/// whole nesting budget in a debug build, with a wide margin.
const SECOND_PARSE_STACK: usize = 64 << 20;

/// Parses a YAML document as upstream converts it to JSON: a repeated key keeps its last value.
/// Returns yaml.v2's lines about the repeats, in document order.
pub(crate) fn parse_yaml(text: &str) -> Result<(Value, Vec<String>), serde_saphyr::Error> {
    let first = match serde_saphyr::from_str::<Value>(text) {
        Ok(value) => return Ok((value, Vec::new())),
        // A repeated key, which the first parse refuses: parse again letting repeats through
        // to note where each is. Any other error stands.
        Err(error)
            if matches!(
                error.without_snippet(),
                serde_saphyr::Error::DuplicateMappingKey { .. }
            ) =>
        {
            error
        }
        Err(error) => return Err(error),
    };
    // The second parse takes several times the stack per level of the first: within the
    // parser's nesting budget (64) it overflowed a 2 MiB thread stack at about 45 levels (a
    // fuzzed input), which aborts the process. It runs on a thread of its own with room for
    // the whole budget; documents with repeated keys are rare, so the thread costs little.
    let second = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("yaml-repeats".into())
            .stack_size(SECOND_PARSE_STACK)
            .spawn_scoped(scope, || {
                let options = serde_saphyr::options! {
                    duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
                };
                YAML_REPEATS.with_borrow_mut(Vec::clear);
                let parsed = serde_saphyr::from_str_with_options::<YamlNode>(text, options);
                let repeats = YAML_REPEATS.with_borrow_mut(std::mem::take);
                parsed.ok().map(|YamlNode(value)| (value, repeats))
            })
            .ok()
            .and_then(|thread| thread.join().ok().flatten())
    });
    let Some((value, repeats)) = second else {
        return Err(first);
    };
    let lines = repeats
        .into_iter()
        .map(|repeat| {
            let line = repeat
                .scalar_offset
                .and_then(|offset| block_scalar_header(text, offset, repeat.line))
                .unwrap_or(repeat.line);
            format!(
                "line {line}: key {} already set in map",
                go_quote(&repeat.key)
            )
        })
        .collect();
    Ok((value, lines))
}

/// The line of a block scalar's header (`|`, `>-`, ...) when the scalar whose content starts at
/// `offset` (on `line`) is one: yaml.v2 places the scalar there, the parser at its content.
fn block_scalar_header(text: &str, offset: u64, line: u64) -> Option<u64> {
    let mut before = text.get(..usize::try_from(offset).ok()?)?;
    let mut lines_up = 0;
    loop {
        before = before.trim_end_matches([' ', '\t']);
        before = before.strip_suffix('\n')?;
        before = before.strip_suffix('\r').unwrap_or(before);
        lines_up += 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        let above = &before[start..];
        let content = above.split(" #").next().unwrap_or_default().trim();
        if content.is_empty() {
            // A blank line leading the block's content.
            continue;
        }
        let last = content.rsplit([' ', '\t']).next().unwrap_or_default();
        let mut chars = last.chars();
        let is_header = matches!(chars.next(), Some('|' | '>'))
            && chars.all(|c| c.is_ascii_digit() || c == '+' || c == '-');
        return is_header.then(|| line.saturating_sub(lines_up));
    }
}

/// A YAML value whose maps note repeated keys with the line of the repeated value.
struct YamlNode(Value);

impl<'de> Deserialize<'de> for YamlNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor).map(YamlNode)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value that converts to JSON")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        i64::try_from(v)
            .map(Value::from)
            .or_else(|_| u64::try_from(v).map(Value::from))
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        u64::try_from(v)
            .map(Value::from)
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        YamlNode::deserialize(deserializer).map(|node| node.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(YamlNode(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value: serde_saphyr::Spanned<YamlNode> = map.next_value()?;
            let value_at = value.referenced;
            let value = value.value.0;
            if object.contains_key(&key) {
                let scalar = !value.is_object() && !value.is_array();
                let repeat = YamlRepeat {
                    key: key.clone(),
                    line: value_at.line(),
                    scalar_offset: value_at.span().byte_offset().filter(|_| scalar),
                };
                YAML_REPEATS.with_borrow_mut(|repeats| repeats.push(repeat));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
#[path = "strict_tests.rs"]
mod tests;
