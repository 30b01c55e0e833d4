//! The protobuf form of the v2 document: `openapi.v2.Document` of gnostic's `OpenAPIv2.proto`,
//! which client-go's `OpenAPISchema()` (behind kubectl's client-side validation and its check for
//! server-side field validation) asks for with
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and decodes with nothing
//! else.
//!
//! The encoding follows gnostic's own JSON-to-protobuf compiler: JSON maps become repeated
//! `Named*` pairs in document order, `type` a `TypeItem`, `items` an `ItemsItem`, parameters the
//! `oneof` of body and non-body parameters by `in`, and every value gnostic keeps as `Any` (vendor
//! extensions, `default`, `enum`, `example`) its YAML text; JSON is YAML, so the compact JSON of
//! the value is written.

use serde_json::{Map, Value};

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire_type));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    /// A `string` field; proto3 omits the empty string.
    fn string(&mut self, field: u32, value: &str) {
        if !value.is_empty() {
            self.bytes(field, value.as_bytes());
        }
    }

    /// A `bool` field; proto3 omits `false` unless the field is a member of a `oneof`.
    fn boolean(&mut self, field: u32, value: bool, in_oneof: bool) {
        if value || in_oneof {
            self.key(field, 0);
            self.varint(u64::from(value));
        }
    }

    /// An `int64` field (two's complement varint).
    fn int64(&mut self, field: u32, value: i64) {
        if value != 0 {
            self.key(field, 0);
            self.varint(value as u64);
        }
    }

    /// A `double` field.
    fn double(&mut self, field: u32, value: f64) {
        if value != 0.0 {
            self.key(field, 1);
            self.0.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// An embedded message, written even when empty (its presence matters).
    fn message(&mut self, field: u32, build: impl FnOnce(&mut Message)) {
        let mut inner = Message::default();
        build(&mut inner);
        self.bytes(field, &inner.0);
    }
}

/// Encodes the v2 `document` as an `openapi.v2.Document`.
pub(crate) fn encode_document(document: &Value) -> Vec<u8> {
    let mut m = Message::default();
    let Value::Object(doc) = document else {
        return m.0;
    };
    m.string(1, str_of(doc, "swagger"));
    if let Some(Value::Object(info)) = doc.get("info") {
        m.message(2, |m| {
            m.string(1, str_of(info, "title"));
            m.string(2, str_of(info, "version"));
            m.string(3, str_of(info, "description"));
            vendor_extensions(m, 7, info);
        });
    }
    m.string(3, str_of(doc, "host"));
    m.string(4, str_of(doc, "basePath"));
    strings(&mut m, 5, doc.get("schemes"));
    strings(&mut m, 6, doc.get("consumes"));
    strings(&mut m, 7, doc.get("produces"));
    if let Some(Value::Object(paths)) = doc.get("paths") {
        m.message(8, |m| {
            vendor_extensions(m, 1, paths);
            for (path, item) in paths.iter().filter(|(k, _)| !k.starts_with("x-")) {
                m.message(2, |m| {
                    m.string(1, path);
                    m.message(2, |m| path_item(m, item));
                });
            }
        });
    }
    if let Some(Value::Object(definitions)) = doc.get("definitions") {
        m.message(9, |m| named_schemas(m, definitions));
    }
    if let Some(Value::Array(requirements)) = doc.get("security") {
        for requirement in requirements {
            m.message(12, |m| security_requirement(m, requirement));
        }
    }
    if let Some(Value::Object(definitions)) = doc.get("securityDefinitions") {
        m.message(13, |m| {
            for (name, definition) in definitions {
                m.message(1, |m| {
                    m.string(1, name);
                    m.message(2, |m| security_definition(m, definition));
                });
            }
        });
    }
    vendor_extensions(&mut m, 16, doc);
    m.0
}

fn str_of<'a>(object: &'a Map<String, Value>, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn bool_of(object: &Map<String, Value>, key: &str) -> bool {
    object.get(key).and_then(Value::as_bool).unwrap_or_default()
}

/// A repeated `string` field from a JSON array (or a single string).
fn strings(m: &mut Message, field: u32, value: Option<&Value>) {
    match value {
        Some(Value::Array(items)) => {
            for item in items.iter().filter_map(Value::as_str) {
                m.bytes(field, item.as_bytes());
            }
        }
        Some(Value::String(item)) => m.bytes(field, item.as_bytes()),
        _ => {}
    }
}

/// An `Any`: the YAML (here JSON) text of `value` in field 2.
fn any(m: &mut Message, field: u32, value: &Value) {
    m.message(field, |m| m.string(2, &value.to_string()));
}

/// The `x-` keys of `object` as repeated `NamedAny` in `field`.
fn vendor_extensions(m: &mut Message, field: u32, object: &Map<String, Value>) {
    for (name, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
        m.message(field, |m| {
            m.string(1, name);
            any(m, 2, value);
        });
    }
}

fn path_item(m: &mut Message, item: &Value) {
    let Value::Object(item) = item else {
        return;
    };
    m.string(1, str_of(item, "$ref"));
    for (method, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("options", 6),
        ("head", 7),
        ("patch", 8),
    ] {
        if let Some(Value::Object(op)) = item.get(method) {
            m.message(field, |m| operation(m, op));
        }
    }
    parameters(m, 9, item.get("parameters"));
    vendor_extensions(m, 10, item);
}

fn operation(m: &mut Message, op: &Map<String, Value>) {
    strings(m, 1, op.get("tags"));
    m.string(2, str_of(op, "summary"));
    m.string(3, str_of(op, "description"));
    m.string(5, str_of(op, "operationId"));
    strings(m, 6, op.get("produces"));
    strings(m, 7, op.get("consumes"));
    parameters(m, 8, op.get("parameters"));
    if let Some(Value::Object(responses)) = op.get("responses") {
        m.message(9, |m| {
            for (code, response) in responses.iter().filter(|(k, _)| !k.starts_with("x-")) {
                m.message(1, |m| {
                    m.string(1, code);
                    m.message(2, |m| response_value(m, response));
                });
            }
            vendor_extensions(m, 2, responses);
        });
    }
    strings(m, 10, op.get("schemes"));
    m.boolean(11, bool_of(op, "deprecated"), false);
    if let Some(Value::Array(requirements)) = op.get("security") {
        for requirement in requirements {
            m.message(12, |m| security_requirement(m, requirement));
        }
    }
    vendor_extensions(m, 13, op);
}

/// `ResponseValue`: a `JsonReference` (2) or a `Response` (1).
fn response_value(m: &mut Message, response: &Value) {
    let Value::Object(response) = response else {
        return;
    };
    if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
        m.message(2, |m| m.string(1, reference));
        return;
    }
    m.message(1, |m| {
        m.string(1, str_of(response, "description"));
        if let Some(schema) = response.get("schema") {
            // SchemaItem.schema
            m.message(2, |m| m.message(1, |m| schema_message(m, schema)));
        }
        vendor_extensions(m, 5, response);
    });
}

/// Repeated `ParametersItem`: a `JsonReference` (2) or a `Parameter` (1), which is a
/// `BodyParameter` (1) or a `NonBodyParameter` (2) holding the sub-schema of its `in`.
fn parameters(m: &mut Message, field: u32, params: Option<&Value>) {
    let Some(Value::Array(params)) = params else {
        return;
    };
    for param in params {
        let Value::Object(p) = param else {
            continue;
        };
        m.message(field, |m| {
            if let Some(reference) = p.get("$ref").and_then(Value::as_str) {
                m.message(2, |m| m.string(1, reference));
                return;
            }
            m.message(1, |m| {
                if str_of(p, "in") == "body" {
                    m.message(1, |m| {
                        m.string(1, str_of(p, "description"));
                        m.string(2, str_of(p, "name"));
                        m.string(3, "body");
                        m.boolean(4, bool_of(p, "required"), false);
                        if let Some(schema) = p.get("schema") {
                            m.message(5, |m| schema_message(m, schema));
                        }
                        vendor_extensions(m, 6, p);
                    });
                } else {
                    m.message(2, |m| non_body_parameter(m, p));
                }
            });
        });
    }
}

fn non_body_parameter(m: &mut Message, p: &Map<String, Value>) {
    // Query and form-data sub-schemas have `allowEmptyValue` at 5 and every later field one
    // number higher than the header and path sub-schemas.
    let (field, shift) = match str_of(p, "in") {
        "header" => (1, 0),
        "formData" => (2, 1),
        "path" => (4, 0),
        _ => (3, 1),
    };
    m.message(field, |m| {
        m.boolean(1, bool_of(p, "required"), false);
        m.string(2, str_of(p, "in"));
        m.string(3, str_of(p, "description"));
        m.string(4, str_of(p, "name"));
        if shift == 1 {
            m.boolean(5, bool_of(p, "allowEmptyValue"), false);
        }
        m.string(5 + shift, str_of(p, "type"));
        m.string(6 + shift, str_of(p, "format"));
        if let Some(items) = p.get("items") {
            m.message(7 + shift, |m| primitives_items(m, items));
        }
        m.string(8 + shift, str_of(p, "collectionFormat"));
        if let Some(default) = p.get("default") {
            any(m, 9 + shift, default);
        }
        m.boolean(19 + shift, bool_of(p, "uniqueItems"), false);
        if let Some(Value::Array(values)) = p.get("enum") {
            for value in values {
                any(m, 20 + shift, value);
            }
        }
        vendor_extensions(m, 22 + shift, p);
    });
}

fn primitives_items(m: &mut Message, items: &Value) {
    let Value::Object(items) = items else {
        return;
    };
    m.string(1, str_of(items, "type"));
    m.string(2, str_of(items, "format"));
    if let Some(nested) = items.get("items") {
        m.message(3, |m| primitives_items(m, nested));
    }
    m.string(4, str_of(items, "collectionFormat"));
    vendor_extensions(m, 18, items);
}

/// Repeated `NamedSchema` in field 1 (`Definitions`, `Properties`).
fn named_schemas(m: &mut Message, schemas: &Map<String, Value>) {
    for (name, schema) in schemas {
        m.message(1, |m| {
            m.string(1, name);
            m.message(2, |m| schema_message(m, schema));
        });
    }
}

fn schema_message(m: &mut Message, schema: &Value) {
    let Value::Object(s) = schema else {
        return;
    };
    let int = |key: &str| s.get(key).and_then(Value::as_i64).unwrap_or_default();
    let float = |key: &str| s.get(key).and_then(Value::as_f64).unwrap_or_default();
    m.string(1, str_of(s, "$ref"));
    m.string(2, str_of(s, "format"));
    m.string(3, str_of(s, "title"));
    m.string(4, str_of(s, "description"));
    if let Some(default) = s.get("default") {
        any(m, 5, default);
    }
    m.double(6, float("multipleOf"));
    m.double(7, float("maximum"));
    m.boolean(8, bool_of(s, "exclusiveMaximum"), false);
    m.double(9, float("minimum"));
    m.boolean(10, bool_of(s, "exclusiveMinimum"), false);
    m.int64(11, int("maxLength"));
    m.int64(12, int("minLength"));
    m.string(13, str_of(s, "pattern"));
    m.int64(14, int("maxItems"));
    m.int64(15, int("minItems"));
    m.boolean(16, bool_of(s, "uniqueItems"), false);
    m.int64(17, int("maxProperties"));
    m.int64(18, int("minProperties"));
    strings(m, 19, s.get("required"));
    if let Some(Value::Array(values)) = s.get("enum") {
        for value in values {
            any(m, 20, value);
        }
    }
    match s.get("additionalProperties") {
        Some(Value::Bool(allowed)) => m.message(21, |m| m.boolean(2, *allowed, true)),
        Some(additional @ Value::Object(_)) => {
            m.message(21, |m| m.message(1, |m| schema_message(m, additional)));
        }
        _ => {}
    }
    if let Some(ty) = s.get("type") {
        m.message(22, |m| strings(m, 1, Some(ty)));
    }
    match s.get("items") {
        Some(Value::Array(items)) => m.message(23, |m| {
            for item in items {
                m.message(1, |m| schema_message(m, item));
            }
        }),
        Some(item @ Value::Object(_)) => {
            m.message(23, |m| m.message(1, |m| schema_message(m, item)));
        }
        _ => {}
    }
    if let Some(Value::Array(all_of)) = s.get("allOf") {
        for item in all_of {
            m.message(24, |m| schema_message(m, item));
        }
    }
    if let Some(Value::Object(properties)) = s.get("properties") {
        m.message(25, |m| named_schemas(m, properties));
    }
    m.string(26, str_of(s, "discriminator"));
    m.boolean(27, bool_of(s, "readOnly"), false);
    if let Some(example) = s.get("example") {
        any(m, 30, example);
    }
    vendor_extensions(m, 31, s);
}

/// `SecurityRequirement`: repeated `NamedStringArray` in field 1.
fn security_requirement(m: &mut Message, requirement: &Value) {
    let Value::Object(requirement) = requirement else {
        return;
    };
    for (name, scopes) in requirement {
        m.message(1, |m| {
            m.string(1, name);
            m.message(2, |m| strings(m, 1, Some(scopes)));
        });
    }
}

/// `SecurityDefinitionsItem`: the API-key (2) and basic (1) schemes, the ones an API server uses.
fn security_definition(m: &mut Message, definition: &Value) {
    let Value::Object(d) = definition else {
        return;
    };
    match str_of(d, "type") {
        "basic" => m.message(1, |m| {
            m.string(1, "basic");
            m.string(2, str_of(d, "description"));
            vendor_extensions(m, 3, d);
        }),
        _ => m.message(2, |m| {
            m.string(1, str_of(d, "type"));
            m.string(2, str_of(d, "name"));
            m.string(3, str_of(d, "in"));
            m.string(4, str_of(d, "description"));
            vendor_extensions(m, 5, d);
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_fields_with_their_numbers_and_wire_types() {
        let bytes =
            encode_document(&json!({"swagger": "2.0", "info": {"title": "K", "version": "v"}}));
        // Document.swagger = 1 (LEN), Document.info = 2 (LEN) holding title = 1, version = 2.
        assert_eq!(
            bytes,
            [
                0x0a, 3, b'2', b'.', b'0', 0x12, 6, 0x0a, 1, b'K', 0x12, 1, b'v'
            ]
        );
    }

    #[test]
    fn vendor_extensions_are_named_any_with_yaml_text() {
        let mut m = Message::default();
        schema_message(&mut m, &json!({"x-a": [1]}));
        // Schema.vendor_extension = 31 -> key (31 << 3 | 2) = 250 = 0xfa 0x01.
        let expected_any = [0x12, 3, b'[', b'1', b']'];
        let mut named = vec![0x0a, 3, b'x', b'-', b'a', 0x12, expected_any.len() as u8];
        named.extend_from_slice(&expected_any);
        let mut expected = vec![0xfa, 0x01, named.len() as u8];
        expected.extend_from_slice(&named);
        assert_eq!(m.0, expected);
    }

    #[test]
    fn query_and_path_parameters_use_their_sub_schemas() {
        let mut m = Message::default();
        parameters(
            &mut m,
            8,
            Some(&json!([{"in": "query", "name": "q", "type": "string", "uniqueItems": true}])),
        );
        // ParametersItem(8) > Parameter(1) > NonBodyParameter(2) > QueryParameterSubSchema(3)
        // with in = 2, name = 4, type = 6 and unique_items = 20 (varint key 0xa0 0x01).
        let query = [
            0x12, 5, b'q', b'u', b'e', b'r', b'y', 0x22, 1, b'q', 0x32, 6, b's', b't', b'r', b'i',
            b'n', b'g', 0xa0, 0x01, 1,
        ];
        let mut expected = vec![0x42, (query.len() + 6) as u8, 0x0a, (query.len() + 4) as u8];
        expected.extend_from_slice(&[0x12, (query.len() + 2) as u8, 0x1a, query.len() as u8]);
        expected.extend_from_slice(&query);
        assert_eq!(m.0, expected);
    }

    #[test]
    fn negative_integers_are_ten_byte_varints() {
        let mut m = Message::default();
        m.int64(11, -1);
        assert_eq!(m.0.len(), 1 + 10);
        assert_eq!(m.0[10], 0x01);
    }
}
