//! Parsing with repeated keys, and the order and wording of strict decoding problems.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

fn json_source(text: &str) -> (Value, Source) {
    let (value, repeats) = parse_json(text.as_bytes()).unwrap();
    let source = Source::Json {
        bytes: Bytes::copy_from_slice(text.as_bytes()),
        repeats,
    };
    (value, source)
}

fn texts(problems: &[Problem]) -> Vec<String> {
    problems.iter().map(Problem::to_string).collect()
}

#[test]
fn json_without_repeats_parses_as_serde_json_does() {
    let text =
        r#"{"a": [1, -2, 3.5, 1e300, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
    let (value, repeats) = parse_json(text.as_bytes()).unwrap();
    assert!(!repeats);
    assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
    for bad in ["{", r#"{"a": 1} x"#, "[1,]", ""] {
        assert_eq!(
            parse_json(bad.as_bytes()).unwrap_err().to_string(),
            serde_json::from_str::<Value>(bad).unwrap_err().to_string()
        );
    }
}

#[test]
fn json_repeats_resolve_as_go_decodes_into_a_typed_object() {
    let (value, repeats) = parse_json(
        br#"{
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "metadata": {"labels": {"y": "2"}},
            "data": {"k": "v1", "k": "v2"},
            "list": [{"a": 1, "b": 2}, {"c": 3}],
            "list": [{"a": 9}],
            "s": 1, "s": "two"
        }"#,
    )
    .unwrap();
    assert!(repeats);
    assert_eq!(
        value,
        json!({
            "metadata": {"name": "a", "labels": {"x": "1", "y": "2"}},
            "data": {"k": "v2"},
            "list": [{"a": 9, "b": 2}],
            "s": "two",
        })
    );
}

#[test]
fn problems_follow_the_document_and_skip_inside_unknown_fields() {
    let (_, source) = json_source(
        r#"{"kind": "ConfigMap", "zeta": {"q": 1, "q": 2}, "metadata": {"name": "a", "name": "b",
            "labels": {"k": "1", "k": "2"}}, "alpha": 1, "alpha": 2,
            "data": {"x": "1"}, "kind": "ConfigMap", "items": [{"n": 1, "n": 2}]}"#,
    );
    let unknown = ["alpha".to_owned(), "zeta".to_owned()];
    assert_eq!(
        texts(&source.problems(&unknown)),
        [
            r#"unknown field "zeta""#,
            r#"duplicate field "metadata.name""#,
            r#"duplicate field "metadata.labels.k""#,
            r#"unknown field "alpha""#,
            r#"duplicate field "kind""#,
            r#"duplicate field "items[0].n""#,
        ]
    );
}

#[test]
fn a_single_unknown_field_needs_no_walk() {
    let source = Source::Json {
        bytes: Bytes::from_static(b"not even JSON"),
        repeats: false,
    };
    assert_eq!(
        source.problems(&["spec".to_owned()]),
        [Problem::Unknown("spec".into())]
    );
    assert!(Source::Opaque.problems(&[]).is_empty());
}

#[test]
fn problems_stop_at_a_hundred() {
    let keys: Vec<String> = (0..150).map(|i| format!("\"k{i}\": 1")).collect();
    let text = format!("{{{}}}", keys.join(", "));
    let (_, source) = json_source(&text);
    let unknown: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
    let problems = source.problems(&unknown);
    assert_eq!(problems.len(), 100);
    assert_eq!(problems[0], Problem::Unknown("k0".into()));
}

#[test]
fn walks_stay_linear_in_wide_objects() {
    let keys: Vec<String> = (0..50_000).map(|i| format!("\"k{i}\": 1")).collect();
    let text = format!("{{\"data\": {{{}, \"k7\": 2}}}}", keys.join(", "));
    let (value, source) = json_source(&text);
    assert_eq!(value["data"]["k7"], 2);
    let unknown: Vec<String> = (0..50_000).map(|i| format!("x{i}")).collect();
    assert_eq!(
        source.problems(&unknown),
        [Problem::Duplicate("data.k7".into())]
    );
}

#[test]
fn paths_quote_as_go_and_keep_map_keys_verbatim() {
    let (_, source) =
        json_source(r#"{"metadata": {"annotations": {"a.b/c\"d": "1", "a.b/c\"d": "2"}}}"#);
    assert_eq!(
        texts(&source.problems(&[])),
        [r#"duplicate field "metadata.annotations.a.b/c\"d""#]
    );
}

#[test]
fn json_patch_operations_know_four_fields() {
    let problems = json_patch_problems(
        br#"[{"op": "add", "path": "/a", "value": {"x": 1, "x": 2}, "valeu": 1, "op": "add"}]"#,
    );
    assert_eq!(
        texts(&problems),
        [
            r#"duplicate field "[0].value.x""#,
            r#"unknown field "[0].valeu""#,
            r#"duplicate field "[0].op""#,
        ]
    );
    assert_eq!(
        texts(&json_duplicates(br#"{"a": {"b": 1, "b": 2}, "a": 1}"#)),
        [r#"duplicate field "a.b""#, r#"duplicate field "a""#]
    );
}

#[test]
fn go_format_prints_as_go_prints_a_decoded_map() {
    let patch = json!({
        "metadata": {"labels": {"b": "2", "a": "x y"}},
        "spec": {"replicas": 3, "ratio": 1.5, "list": [1, "two", null, true], "none": {}},
        "big": 1e6, "small": 0.00001, "round": 1.0, "plain": 123456.0, "tiny": 0.0001,
    });
    assert_eq!(
        go_format(&patch),
        "map[big:1e+06 metadata:map[labels:map[a:x y b:2]] plain:123456 round:1 small:1e-05 \
         spec:map[list:[1 two <nil> true] none:map[] ratio:1.5 replicas:3] tiny:0.0001]"
    );
}

#[test]
fn yaml_repeats_keep_the_last_value_and_name_the_line_of_the_value() {
    let text = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  name: b
data:
  k: v
metadata:
  name: c
  labels:
    x: '1'
";
    let (value, repeats) = parse_yaml(text).unwrap();
    assert_eq!(
        value,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}, "data": {"k": "v"}})
    );
    assert_eq!(
        repeats,
        [
            r#"line 5: key "name" already set in map"#,
            r#"line 9: key "metadata" already set in map"#,
        ]
    );
    let source = Source::Yaml { repeats };
    let problems = source.problems(&["spec".to_owned()]);
    assert_eq!(
        strict_decoding_error(&problems),
        "strict decoding error: yaml: unmarshal errors:\n  line 5: key \"name\" already set in map\n  line 9: key \"metadata\" already set in map, unknown field \"spec\""
    );
    let warnings: Vec<String> = problems.iter().flat_map(Problem::warnings).collect();
    assert_eq!(
        warnings,
        [
            r#"line 5: key "name" already set in map"#,
            r#"line 9: key "metadata" already set in map"#,
            r#"unknown field "spec""#,
        ]
    );
}

#[test]
fn yaml_without_repeats_and_broken_yaml_parse_as_before() {
    let (value, repeats) = parse_yaml("a: [1, {b: c}]\n").unwrap();
    assert!(repeats.is_empty());
    assert_eq!(value, json!({"a": [1, {"b": "c"}]}));
    let error = parse_yaml("a: [1\n").unwrap_err().to_string();
    assert_eq!(
        error,
        serde_saphyr::from_str::<Value>("a: [1\n")
            .unwrap_err()
            .to_string()
    );
}

#[test]
fn yaml_lines_are_where_yaml_v2_places_the_repeated_value() {
    // Block collections start at their first entry, block scalars at their header, anything
    // else where it is written (an empty value at its key).
    let cases = [
        ("a: 1\na: {x: 1}\n", 2),
        ("a: 1\na:\n- 1\n", 3),
        ("a: 1\na:\n  - 1\n", 3),
        ("a: 1\na:   # c\n   # d\n  x: 1\n", 4),
        ("a: 1\na:\n\nb: 2\n", 2),
        ("a: 1\na: |\n  text\n", 2),
        ("a: 1\na: >- # c\n\n  text\n", 2),
        ("a: 1\na:\n  |\n  text\n", 3),
        ("a: 1\na:\n  text\n", 3),
        ("a: 1\n\"a\": 2\n", 2),
    ];
    for (text, line) in cases {
        let (_, repeats) = parse_yaml(text).unwrap();
        assert_eq!(
            repeats,
            [format!("line {line}: key \"a\" already set in map")],
            "{text:?}"
        );
    }
}
