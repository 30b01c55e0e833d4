//! Fuzz targets of the API's decoders, run by bolero: for [`capstan_testkit::fuzz::CI_TIME`]
//! each under `cargo test`, for longer with `BOLERO_RANDOM_TEST_TIME_MS`, or coverage-guided
//! with `cargo bolero test -p capstan-api fuzz::<target>` (README, "Testing").
//!
//! Every target must end in `Ok` or `Err` for any input: a panic, a hang or a runaway
//! allocation is a bug. Where a round trip holds (a selector or quantity printed and parsed
//! again), the target asserts it. Inputs that once failed are kept as the named tests at the
//! end.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use capstan_testkit::fuzz::{CI_TIME, DEFAULT_DEPTH, Input, STRINGS};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::catalog::{self, Resource};
use crate::quantity::Quantity;
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy::Strategy;

/// Runs `target` on bolero's inputs for the CI time (or as the chosen engine says).
macro_rules! fuzz {
    ($target:expr) => {
        bolero::check!()
            .with_test_time(CI_TIME)
            .for_each(|bytes: &[u8]| $target(bytes))
    };
}

// ---------------------------------------------------------------------------------------------
// Quantities
// ---------------------------------------------------------------------------------------------

/// Pieces quantities are made of.
const QUANTITY_PARTS: &[&str] = &[
    "0",
    "1",
    "5",
    "9",
    "00",
    "12",
    "999",
    "1024",
    "000000000",
    "9223372036854775807",
    ".",
    ".5",
    "+",
    "-",
    "e",
    "E",
    "e3",
    "e-9",
    "E+2",
    "e18",
    "e-18",
    "e19",
    "e308",
    "e-2147483648",
    "e2147483647",
    "e4294967296",
    "n",
    "u",
    "m",
    "k",
    "M",
    "G",
    "T",
    "P",
    "Ei",
    "Ki",
    "Mi",
    "Gi",
    "Ti",
    "Pi",
    "i",
    " ",
];

/// A quantity-like string: mostly pieces of the grammar, sometimes raw bytes.
fn quantity_text(input: &mut Input<'_>) -> String {
    if input.one_in(8) {
        return String::from_utf8_lossy(input.bytes(40)).into_owned();
    }
    let mut text = String::new();
    for _ in 0..=input.below(6) {
        text.push_str(input.pick::<&str>(QUANTITY_PARTS));
    }
    text
}

/// Whether upstream's printed form of `quantity` reads back as the same value. Two ranges do
/// not, upstream's as ours: a decimal-SI value of 1000E or more prints without a suffix (there
/// is none past `E`, and `CanonicalizeBytes` drops what it cannot name), and a decimal
/// exponent past 32 bits is truncated when read (`int32(parsed)`).
fn round_trips(quantity: &Quantity, canonical: &str) -> bool {
    let zero = Quantity::from_i64(0);
    let magnitude = if quantity.is_negative() {
        zero.sub(quantity)
    } else {
        quantity.clone()
    };
    let limit = Quantity::parse("1000E").unwrap_or(zero);
    if quantity.format() == crate::quantity::Format::DecimalSI && magnitude >= limit {
        return false;
    }
    match canonical.split_once(['e', 'E']) {
        Some((_, exponent)) => exponent
            .parse::<i64>()
            .is_ok_and(|e| e.unsigned_abs() < 1 << 30),
        None => true,
    }
}

fn quantity_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let text = quantity_text(&mut input);
    let Ok(quantity) = Quantity::parse(&text) else {
        return;
    };
    let canonical = quantity.canonical();
    // Arithmetic on whatever parsed (the quota code's).
    let _ = (
        quantity.value(),
        quantity.milli_value(),
        quantity.is_negative(),
    );
    if !round_trips(&quantity, &canonical) {
        return;
    }
    let again = Quantity::parse(&canonical)
        .unwrap_or_else(|e| panic!("{text:?} printed as {canonical:?}, which fails: {e}"));
    assert_eq!(again, quantity, "{text:?} printed as {canonical:?}");
    // Printing the reparsed quantity gives the same text: the canonical form is a fixed point.
    let reparsed = again.canonical();
    assert_eq!(
        Quantity::parse(&reparsed).map(|q| q.canonical()).ok(),
        Some(reparsed.clone()),
        "{text:?}: {canonical:?} then {reparsed:?}"
    );
    // The arithmetic the quota code does on parsed quantities.
    let _ = (
        quantity.value(),
        quantity.milli_value(),
        quantity.is_negative(),
    );
    let sum = quantity.add(&again);
    let _ = sum.canonical();
    let _ = quantity.sub(&sum).canonical();
    let mut rounded = quantity.clone();
    rounded.round_up(i32::from(input.byte() as i8) / 8);
    let _ = rounded.canonical();
    let _ = quantity.cmp(&sum);
}

#[test]
fn quantities() {
    fuzz!(quantity_target);
}

// ---------------------------------------------------------------------------------------------
// Label and field selectors
// ---------------------------------------------------------------------------------------------

const SELECTOR_KEYS: &[&str] = &[
    "a",
    "app",
    "example.com/a",
    "a.b-c_d",
    "A",
    "-a",
    "a-",
    "a/b/c",
    "/a",
    "example.com/",
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
];

const LABEL_TOKENS: &[&str] = &[
    "=", "==", "!=", "!", " in ", " notin ", "in", "notin", "(", ")", ",", " ", ">", "<", "1",
    "-1", "x", "x.y", "", "\t",
];

const FIELD_TOKENS: &[&str] = &[
    "=", "==", "!=", ",", "\\", "\\,", "\\=", "\\\\", "\\a", "x", "", " ", "a=b", "=",
];

/// A selector-like string: keys and tokens joined, sometimes raw bytes.
fn selector_text(input: &mut Input<'_>, tokens: &[&str]) -> String {
    if input.one_in(8) {
        return String::from_utf8_lossy(input.bytes(64)).into_owned();
    }
    let mut text = String::new();
    for _ in 0..=input.below(12) {
        match input.below(3) {
            0 => text.push_str(input.pick::<&str>(SELECTOR_KEYS)),
            1 => text.push_str(input.pick::<&str>(tokens)),
            _ => text.push_str(&input.string(STRINGS)),
        }
    }
    text
}

fn some_labels(input: &mut Input<'_>) -> BTreeMap<String, String> {
    (0..input.below(4))
        .map(|_| {
            (
                (*input.pick(SELECTOR_KEYS)).to_owned(),
                input.string(&["x", "1", "-1", "", "x.y"]),
            )
        })
        .collect()
}

fn label_selector_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let text = selector_text(&mut input, LABEL_TOKENS);
    let Ok(selector) = LabelSelector::parse(&text) else {
        return;
    };
    let printed = selector.to_string();
    let again = LabelSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
    assert_same_terms(&selector.to_string(), &again.to_string(), &text, true);
    assert_fixed_point(&again.to_string(), |t| {
        LabelSelector::parse(t).map(|s| s.to_string())
    });
    let labels = some_labels(&mut input);
    assert_eq!(
        selector.matches(&labels),
        again.matches(&labels),
        "{text:?} against {labels:?}"
    );
    let _ = selector.requires_exact_match("a");
}

/// Asserts two printed selectors hold the same terms. Upstream sorts terms by their text as
/// written (fields) or by key keeping the written order of equal keys (labels), so printing
/// may reorder what a second parse orders differently: the terms, not their order, survive.
fn assert_same_terms(printed: &str, again: &str, text: &str, parens: bool) {
    let terms = |s: &str| {
        let mut terms: Vec<String> = split_terms(s, parens);
        terms.sort();
        terms
    };
    assert_eq!(
        terms(printed),
        terms(again),
        "{text:?} printed as {printed:?}"
    );
}

/// Splits a printed selector at the commas between its terms: not escaped ones (fields), nor
/// those of `in (a,b)` with `parens` (labels, whose values cannot hold parentheses).
fn split_terms(s: &str, parens: bool) -> Vec<String> {
    let mut terms = Vec::new();
    let (mut depth, mut current, mut escaped) = (0i32, String::new(), false);
    for c in s.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '(' if parens => depth += 1,
            ')' if parens => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    terms.push(current);
    terms
}

/// Asserts that a printed selector parses and prints as itself.
fn assert_fixed_point<E: std::fmt::Display>(
    printed: &str,
    reprint: impl Fn(&str) -> Result<String, E>,
) {
    match reprint(printed) {
        Ok(again) => assert_eq!(again, printed, "printing is not stable"),
        Err(e) => panic!("{printed:?} does not parse: {e}"),
    }
}

#[test]
fn label_selectors() {
    fuzz!(label_selector_target);
}

/// A `metav1.LabelSelector` from generated JSON: decoded as the API type, then converted.
fn api_label_selector_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let mut selector = serde_json::Map::new();
    let labels: Map<String, Value> = some_labels(&mut input)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    selector.insert("matchLabels".into(), Value::Object(labels));
    let expressions: Vec<Value> = (0..input.below(4))
        .map(|_| {
            let values: Vec<Value> = (0..input.below(3))
                .map(|_| Value::String(input.string(&["x", "1", "", "a b"])))
                .collect();
            serde_json::json!({
                "key": input.pick(SELECTOR_KEYS),
                "operator": input.pick(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "in", ""]),
                "values": values,
            })
        })
        .collect();
    selector.insert("matchExpressions".into(), Value::Array(expressions));
    let Ok(api) = serde_json::from_value(Value::Object(selector)) else {
        return;
    };
    if let Ok(selector) = LabelSelector::from_api(Some(&api)) {
        let printed = selector.to_string();
        // A selector made from the API type prints in the string grammar, which parses back
        // unless it matches nothing (upstream prints such a selector as nothing at all). The
        // parse folds repeated values (`a in (,)` reads as `a in ()`), as upstream's does, so
        // only the meaning survives the trip, and the second print is final.
        if !selector.matches_nothing() {
            let again = LabelSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{printed:?} does not parse: {e}"));
            let labels = some_labels(&mut input);
            assert_eq!(
                selector.matches(&labels),
                again.matches(&labels),
                "{printed:?}"
            );
            assert_fixed_point(&again.to_string(), |t| {
                LabelSelector::parse(t).map(|s| s.to_string())
            });
        }
    }
}

#[test]
fn api_label_selectors() {
    fuzz!(api_label_selector_target);
}

fn field_selector_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let text = selector_text(&mut input, FIELD_TOKENS);
    let Ok(selector) = FieldSelector::parse(&text) else {
        return;
    };
    let printed = selector.to_string();
    let again = FieldSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
    assert_same_terms(&printed, &again.to_string(), &text, false);
    assert_fixed_point(&again.to_string(), |t| {
        FieldSelector::parse(t).map(|s| s.to_string())
    });
    let fields = some_labels(&mut input);
    assert_eq!(
        selector.matches(&fields),
        again.matches(&fields),
        "{text:?}"
    );
    let _ = selector.check_default_fields();
    let _ = selector.requires_exact_match("metadata.name");
}

#[test]
fn field_selectors() {
    fuzz!(field_selector_target);
}

// ---------------------------------------------------------------------------------------------
// Schemas of the built-in kinds, for generated objects
// ---------------------------------------------------------------------------------------------

/// A kind's schema with its definitions, and its strategy.
struct Kind {
    resource: &'static Resource,
    schema: Value,
    definitions: Map<String, Value>,
    strategy: Arc<dyn Strategy>,
}

/// Every catalogued kind, in catalogue order.
fn kinds() -> &'static [Kind] {
    static KINDS: OnceLock<Vec<Kind>> = OnceLock::new();
    KINDS.get_or_init(|| {
        catalog::resources()
            .map(|resource| {
                let mut generator = SchemaSettings::openapi3().into_generator();
                let schema = (resource.schema.generate)(&mut generator).to_value();
                let definitions = generator
                    .definitions()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Kind {
                    resource,
                    schema,
                    definitions,
                    strategy: (resource.strategy)(),
                }
            })
            .collect()
    })
}

/// An object of `kind` generated from its schema, with its `apiVersion` and `kind` set (or,
/// now and then, wrong).
fn object_of(kind: &Kind, input: &mut Input<'_>, chaos: usize) -> Value {
    let mut object = input.from_schema(&kind.schema, &kind.definitions, DEFAULT_DEPTH + 2, chaos);
    if let Value::Object(map) = &mut object
        && !input.one_in(16)
    {
        let api_version = if kind.resource.group.is_empty() {
            kind.resource.version.to_owned()
        } else {
            format!("{}/{}", kind.resource.group, kind.resource.version)
        };
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.resource.kind.into());
    }
    object
}

// ---------------------------------------------------------------------------------------------
// Typed decoding, defaulting, validation, printing of every kind
// ---------------------------------------------------------------------------------------------

fn typed_object_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let kinds = kinds();
    let kind = &kinds[usize::from(input.byte()) % kinds.len()];
    let object = object_of(kind, &mut input, 24);
    let Ok((mut decoded, _unknown)) = kind.strategy.decode(&object) else {
        return;
    };
    kind.strategy.prepare_for_create(&mut decoded);
    let _ = kind.strategy.validate(&decoded);
    let _ = kind.strategy.selectable_fields(&decoded);
    let _ = kind.strategy.default_grace_period(&decoded);
    let _ = crate::gojson::to_vec(&decoded);
    let _ = crate::printers::row(
        kind.resource.printer.as_ref(),
        &decoded,
        jiff::Timestamp::UNIX_EPOCH,
    );
    // An update from another generated object of the kind.
    let old = object_of(kind, &mut input, 24);
    if let Ok((old, _)) = kind.strategy.decode(&old) {
        let mut new = decoded;
        kind.strategy.prepare_for_update(&mut new, &old, None);
        let _ = kind.strategy.validate_update(&new, &old, None);
        for subresource in kind.resource.subresources {
            let _ = kind
                .strategy
                .validate_update(&new, &old, Some(subresource.name));
        }
    }
}

#[test]
fn typed_objects() {
    fuzz!(typed_object_target);
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

/// Adds strategic merge patch directives at random places of a patch.
fn sprinkle_directives(value: &mut Value, input: &mut Input<'_>, depth: usize) {
    if depth == 0 {
        return;
    }
    match value {
        Value::Object(map) => {
            if input.one_in(6) {
                let directive = *input.pick(&["replace", "delete", "merge", "bogus"]);
                map.insert("$patch".into(), directive.into());
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            if !keys.is_empty() && input.one_in(6) {
                let retained: Vec<Value> = keys
                    .iter()
                    .filter(|_| input.one_in(2))
                    .map(|k| Value::String(k.clone()))
                    .collect();
                map.insert("$retainKeys".into(), Value::Array(retained));
            }
            for key in keys {
                if matches!(map.get(&key), Some(Value::Array(_))) && input.one_in(4) {
                    let order = input.json(2);
                    map.insert(format!("$setElementOrder/{key}"), order);
                }
                if matches!(map.get(&key), Some(Value::Array(_))) && input.one_in(6) {
                    let deleted = input.json(1);
                    map.insert(format!("$deleteFromPrimitiveList/{key}"), deleted);
                }
                if let Some(child) = map.get_mut(&key) {
                    sprinkle_directives(child, input, depth - 1);
                }
            }
        }
        Value::Array(items) => {
            if input.one_in(8) {
                items.push(
                    serde_json::json!({"$patch": input.pick(&["replace", "delete", "merge"])}),
                );
            }
            for item in items {
                sprinkle_directives(item, input, depth - 1);
            }
        }
        _ => {}
    }
}

fn strategic_merge_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let kinds = kinds();
    let kind = &kinds[usize::from(input.byte()) % kinds.len()];
    let (group, version, name) = (
        kind.resource.group,
        kind.resource.version,
        kind.resource.kind,
    );
    let Some(meta) = crate::strategic::for_kind(group, version, name) else {
        return;
    };
    let original = object_of(kind, &mut input, 32);
    let mut patch = object_of(kind, &mut input, 12);
    sprinkle_directives(&mut patch, &mut input, DEFAULT_DEPTH + 2);
    if let Ok(patched) = crate::strategic::apply(&original, &patch, meta) {
        // A patch applied to its own result again must still succeed or fail cleanly.
        let _ = crate::strategic::apply(&patched, &patch, meta);
    }
}

#[test]
fn strategic_merge_patches() {
    fuzz!(strategic_merge_target);
}

// ---------------------------------------------------------------------------------------------
// Protobuf request bodies
// ---------------------------------------------------------------------------------------------

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A protobuf message of random fields (tags, wire types, lengths that sometimes lie).
fn protobuf_message(input: &mut Input<'_>, depth: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..input.below(8) {
        let tag = u64::from(input.byte() % 20);
        let wire = input.below(6) as u64;
        put_varint(&mut out, tag << 3 | wire);
        match wire {
            0 => put_varint(&mut out, u64::from(input.u32()) << input.below(33)),
            1 => out.extend_from_slice(&[input.byte(); 8]),
            2 => {
                let body = if depth > 0 && input.one_in(2) {
                    protobuf_message(input, depth - 1)
                } else {
                    input.string(STRINGS).into_bytes()
                };
                let len = if input.one_in(16) {
                    body.len() as u64 + u64::from(input.byte())
                } else {
                    body.len() as u64
                };
                put_varint(&mut out, len);
                out.extend_from_slice(&body);
            }
            5 => out.extend_from_slice(&[input.byte(); 4]),
            // Groups (3, 4) are not proto3: the decoder must refuse them.
            _ => {}
        }
    }
    out
}

/// The bodies kubectl sent, from the decoder's own test data.
fn protobuf_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protobuf/testdata/kubectl");
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "b64")
                && let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(body) = base64::engine::general_purpose::STANDARD.decode(text.trim())
            {
                seeds.push(body);
            }
        }
        seeds.sort();
        seeds
    })
}

/// A protobuf body: a mutated kubectl body, or an envelope around a random message.
fn protobuf_body(input: &mut Input<'_>) -> Vec<u8> {
    let seeds = protobuf_seeds();
    if !seeds.is_empty() && input.one_in(2) {
        let mut body = input.pick(seeds).clone();
        for _ in 0..=input.below(4) {
            let at = (input.u32() as usize) % body.len().max(1);
            match input.below(4) {
                0 if at < body.len() => body[at] = input.byte(),
                1 => body.truncate(at),
                2 => {
                    let insert = input.bytes(8).to_vec();
                    body.splice(at.min(body.len())..at.min(body.len()), insert);
                }
                _ if at < body.len() => body[at] ^= 1 << input.below(8),
                _ => {}
            }
        }
        return body;
    }
    let kinds = kinds();
    let kind = &kinds[usize::from(input.byte()) % kinds.len()];
    let api_version = if kind.resource.group.is_empty() {
        kind.resource.version.to_owned()
    } else {
        format!("{}/{}", kind.resource.group, kind.resource.version)
    };
    let mut type_meta = Vec::new();
    put_varint(&mut type_meta, 1 << 3 | 2);
    put_varint(&mut type_meta, api_version.len() as u64);
    type_meta.extend_from_slice(api_version.as_bytes());
    put_varint(&mut type_meta, 2 << 3 | 2);
    put_varint(&mut type_meta, kind.resource.kind.len() as u64);
    type_meta.extend_from_slice(kind.resource.kind.as_bytes());
    let raw = protobuf_message(input, 5);
    let mut body = crate::protobuf::MAGIC.to_vec();
    put_varint(&mut body, 1 << 3 | 2);
    put_varint(&mut body, type_meta.len() as u64);
    body.extend_from_slice(&type_meta);
    put_varint(&mut body, 2 << 3 | 2);
    put_varint(&mut body, raw.len() as u64);
    body.extend_from_slice(&raw);
    body
}

fn protobuf_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let body = if input.one_in(8) {
        input.rest().to_vec()
    } else {
        protobuf_body(&mut input)
    };
    if let Ok((api_version, kind, object)) = crate::protobuf::decode(&body) {
        // What the API server does next with a decoded body.
        let _ = crate::gojson::to_vec(&object);
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        if let Some(resource) = catalog::lookup_kind(group, &kind) {
            let _ = (resource.strategy)().decode(&object);
        }
    }
}

#[test]
fn protobuf_bodies() {
    fuzz!(protobuf_target);
}

// ---------------------------------------------------------------------------------------------
// JSON as upstream writes it
// ---------------------------------------------------------------------------------------------

fn gojson_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let kinds = kinds();
    let object = if input.one_in(2) {
        let kind = &kinds[usize::from(input.byte()) % kinds.len()];
        object_of(kind, &mut input, 16)
    } else {
        input.json(DEFAULT_DEPTH)
    };
    let written = crate::gojson::to_vec(&object);
    let parsed: Value = serde_json::from_slice(&written).unwrap_or_else(|e| {
        panic!(
            "gojson wrote invalid JSON ({e}): {}",
            String::from_utf8_lossy(&written)
        )
    });
    let normalized = crate::gojson::normalize(&object);
    // Normalizing is idempotent.
    assert_eq!(crate::gojson::normalize(&normalized), normalized);
    let _ = parsed;
}

#[test]
fn gojson_writing() {
    fuzz!(gojson_target);
}

// ---------------------------------------------------------------------------------------------
// Regression inputs: each once made a target fail.
// ---------------------------------------------------------------------------------------------
