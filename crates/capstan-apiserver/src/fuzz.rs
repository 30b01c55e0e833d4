//! Fuzz targets of what the API server decodes from a request before the registry: bodies by
//! content type (JSON, YAML, protobuf) into the kind's typed form with strict field
//! validation's findings, and PATCH bodies (JSON patch, merge patch, strategic merge patch,
//! apply configurations) applied to objects. Run by bolero like `capstan-api`'s targets (its
//! `fuzz` module says how); inputs that once failed are kept as the named tests at the end.

use bytes::Bytes;
use capstan_testkit::fuzz::{CI_TIME, DEFAULT_DEPTH, Input, KEYS, STRINGS};
use serde_json::Value;

use crate::handlers::patch::{self, PatchType};
use crate::handlers::resource::parse_body;
use crate::registry::FieldValidation;

/// Runs `target` on bolero's inputs for the CI time (or as the chosen engine says).
macro_rules! fuzz {
    ($target:expr) => {
        bolero::check!()
            .with_test_time(CI_TIME)
            .for_each(|bytes: &[u8]| $target(bytes))
    };
}

/// Pieces of YAML documents: indentation, flow and block collections, anchors and aliases,
/// tags, block scalars, merge keys, documents.
const YAML_TOKENS: &[&str] = &[
    "\n",
    "\n  ",
    "\n    ",
    "\n- ",
    "\n  - ",
    ": ",
    ":",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ", ",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "<<: *a",
    "!!str ",
    "!!int ",
    "!!binary ",
    "!!map ",
    "!custom ",
    "|\n  ",
    ">-\n  ",
    "|+\n",
    "? ",
    "---\n",
    "...\n",
    "#c\n",
    "'",
    "\"",
    "\\u0000",
    "~",
    "null",
    "true",
    "0x1F",
    "0o17",
    "1e3",
    ".inf",
    ".nan",
    "\t",
    "%YAML 1.2\n",
    "%TAG ! tag:x,2000:\n",
];

/// A YAML document: a generated object written as YAML and mutated, or a sequence of tokens.
fn yaml_text(input: &mut Input<'_>) -> String {
    match input.below(4) {
        0 => {
            let mut text = String::new();
            for _ in 0..=input.below(24) {
                match input.below(3) {
                    0 => text.push_str(input.pick::<&str>(KEYS)),
                    1 => text.push_str(&input.string(STRINGS)),
                    _ => text.push_str(input.pick::<&str>(YAML_TOKENS)),
                }
            }
            text
        }
        1 => {
            // Aliases of aliases: each level doubles what a naive expansion would build.
            let levels = input.below(40);
            let mut text = String::from("a0: &a0 [x, x]\n");
            for i in 1..=levels {
                text.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
            }
            text
        }
        2 => {
            // Deep nesting, flow or block.
            let depth = (input.u32() % 20_000) as usize;
            if input.one_in(2) {
                "[".repeat(depth)
            } else {
                (0..depth.min(2_000))
                    .map(|i| format!("{}k:\n", " ".repeat(i)))
                    .collect()
            }
        }
        _ => {
            let value = input.json(DEFAULT_DEPTH);
            let mut text = serde_saphyr::to_string(&value).unwrap_or_default();
            for _ in 0..input.below(4) {
                let at = (input.u32() as usize) % (text.len() + 1);
                let at = (0..=at)
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(0);
                text.insert_str(at, input.pick::<&str>(YAML_TOKENS));
            }
            text
        }
    }
}

/// A JSON document: generated and mutated, deeply nested, or with repeated keys.
fn json_text(input: &mut Input<'_>) -> Vec<u8> {
    match input.below(5) {
        0 => {
            let depth = (input.u32() % 100_000) as usize;
            let open = *input.pick(&["[", "{\"a\":"]);
            open.repeat(depth).into_bytes()
        }
        1 => {
            // An object repeating keys, nested.
            let mut text = String::from("{");
            for i in 0..=input.below(6) {
                if i > 0 {
                    text.push(',');
                }
                let key = input.pick(KEYS);
                let value = serde_json::to_string(&input.json(2)).unwrap_or_default();
                text.push_str(&format!("\"{key}\":{value}"));
            }
            text.push('}');
            text.into_bytes()
        }
        2 => input.rest().to_vec(),
        _ => {
            let mut bytes = serde_json::to_vec(&input.json(DEFAULT_DEPTH)).unwrap_or_default();
            for _ in 0..input.below(3) {
                let at = (input.u32() as usize) % (bytes.len() + 1);
                match input.below(3) {
                    0 => bytes.truncate(at),
                    1 => bytes.insert(at, *input.pick(b"{}[]\",:\\0-.e")),
                    _ => {
                        if at < bytes.len() {
                            bytes[at] = input.byte();
                        }
                    }
                }
            }
            bytes
        }
    }
}

/// A kind of the catalogue.
fn some_resource(input: &mut Input<'_>) -> &'static capstan_api::catalog::Resource {
    let resources: Vec<_> = capstan_api::catalog::resources().collect();
    resources[usize::from(input.byte()) % resources.len()]
}

fn request_body_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let content_type = *input.pick(&[
        "application/json",
        "application/json; charset=utf-8",
        "application/yaml",
        capstan_api::protobuf::MEDIA_TYPE,
        "",
        "text/plain",
    ]);
    let body = match content_type {
        "application/yaml" => yaml_text(&mut input).into_bytes(),
        ct if ct == capstan_api::protobuf::MEDIA_TYPE => {
            let mut body = capstan_api::protobuf::MAGIC.to_vec();
            body.extend_from_slice(input.rest());
            body
        }
        _ => json_text(&mut input),
    };
    let Ok((object, source)) = parse_body(Bytes::from(body), Some(content_type)) else {
        return;
    };
    // As the registry's decode_body: the typed decode, then strict validation's findings.
    let resource = some_resource(&mut input);
    if let Ok((_decoded, unknown)) = (resource.strategy)().decode(&object) {
        for problem in source.problems(&unknown) {
            let _ = problem.warnings();
        }
    }
}

#[test]
fn request_bodies() {
    fuzz!(request_body_target);
}

/// A JSON patch operation, mostly well formed.
fn json_patch_op(input: &mut Input<'_>) -> Value {
    let op = input.string(&["add", "remove", "replace", "move", "copy", "test"]);
    let mut path = String::new();
    for _ in 0..input.below(4) {
        path.push('/');
        path.push_str(&input.string(&[
            "metadata",
            "labels",
            "spec",
            "containers",
            "0",
            "1",
            "-",
            "a~1b",
            "~",
            "~2",
            "",
            "99999999999999999999",
        ]));
    }
    let mut op = serde_json::json!({"op": op, "path": path});
    if input.one_in(2) {
        op["value"] = input.json(3);
    }
    if input.one_in(3) {
        op["from"] = Value::String(format!("/{}", input.string(KEYS)));
    }
    if input.one_in(8) {
        op[input.string(KEYS)] = input.json(1);
    }
    op
}

fn patch_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let resource = some_resource(&mut input);
    let kind = *input.pick(&[
        PatchType::Json,
        PatchType::Merge,
        PatchType::Strategic,
        PatchType::Apply,
    ]);
    let body: Vec<u8> = match (kind, input.below(4)) {
        (_, 0) => json_text(&mut input),
        (PatchType::Apply, _) => yaml_text(&mut input).into_bytes(),
        (PatchType::Json, _) => {
            let ops: Vec<Value> = (0..input.below(5))
                .map(|_| json_patch_op(&mut input))
                .collect();
            serde_json::to_vec(&ops).unwrap_or_default()
        }
        _ => serde_json::to_vec(&input.json(DEFAULT_DEPTH)).unwrap_or_default(),
    };
    let _ = patch::patch_problems(kind, &body, FieldValidation::Strict);
    let Ok(document) = patch::decode_patch(kind, &body) else {
        return;
    };
    let mut original = input.json(DEFAULT_DEPTH);
    if input.one_in(2) {
        original = serde_json::json!({
            "apiVersion": "v1", "kind": resource.kind,
            "metadata": {"name": "a", "labels": {"a": "b"}, "finalizers": ["x"]},
            "spec": original,
        });
    }
    let _ = match kind {
        PatchType::Strategic => {
            crate::handlers::strategic::apply(resource, &original, &document).map(|_| ())
        }
        PatchType::Apply => Ok(()),
        _ => patch::apply_generic(kind, &original, &document).map(|_| ()),
    };
    let scale = serde_json::json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "a"}, "spec": {"replicas": 1}, "status": {"replicas": 1},
    });
    let content_type = match kind {
        PatchType::Json => "application/json-patch+json",
        PatchType::Merge => "application/merge-patch+json",
        PatchType::Strategic => "application/strategic-merge-patch+json",
        PatchType::Apply => "application/apply-patch+yaml",
    };
    let _ = patch::apply_to_scale(&scale, Some(content_type), &body);
}

#[test]
fn patches() {
    fuzz!(patch_target);
}

// ---------------------------------------------------------------------------------------------
// Regression inputs: each once made a target fail.
// ---------------------------------------------------------------------------------------------

/// A request body fuzzing found (#request_bodies): YAML nested at the parser's depth budget
/// with a repeated key took the second, repeat-noting parse, which overflowed the stack (and
/// aborted the process) at about 45 levels. Also past the budget, and in flow style.
#[test]
fn yaml_nested_to_the_depth_budget_with_a_repeated_key() {
    for depth in [44, 50, 63, 64, 65, 2_000] {
        let mut body: String = (0..depth)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        body.push_str(&format!("{0}a: 1\n{0}a: 2\n", " ".repeat(depth)));
        let result = parse_body(Bytes::from(body), Some("application/yaml"));
        // Within the budget (64 levels, the repeated pair one more) the repeat is noted.
        assert_eq!(result.is_ok(), depth < 64, "{depth}");
        let flow = format!("{}{{a: 1, a: 2}}{}", "[".repeat(depth), "]".repeat(depth));
        let result = parse_body(Bytes::from(flow), Some("application/yaml"));
        assert_eq!(result.is_ok(), depth < 64, "{depth} (flow)");
    }
}
