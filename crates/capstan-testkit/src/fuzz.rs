//! Building blocks of the fuzz targets (`fuzz` modules of `capstan-api`, `capstan-apiserver`
//! and `capstan-stream`).
//!
//! Every target takes plain bytes, as libFuzzer and AFL hand them, and reads them through an
//! [`Input`]: each decision a generator makes (which key, which type, how many items) consumes
//! input bytes, so a mutation of the bytes is a mutation of the structure, and an exhausted
//! input reads as zeros (the smallest choice) rather than failing. The same targets run under
//! `cargo test`/`cargo nextest` with bolero's random engine for [`CI_TIME`] each, and under
//! `cargo bolero test` with a coverage-guided engine for as long as one likes.
//!
//! Generators:
//! - [`Input::json`]: any JSON value, keys and strings drawn mostly from [`KEYS`] and
//!   [`STRINGS`] (Kubernetes field names, directives, quantities, selectors, names at and past
//!   their limits), so random inputs reach the code behind a decoder, not only its first check;
//! - [`Input::from_schema`]: a value shaped by a JSON schema (a kind's `schemars` schema), with
//!   the occasional wrong type or unknown field, for the typed decoders and strategies.

use std::time::Duration;

use serde_json::{Map, Number, Value};

/// How long each fuzz target runs in an ordinary test run (CI): short, since the suite runs
/// them all on two cores. `BOLERO_RANDOM_TEST_TIME_MS` overrides it for longer local runs.
pub const CI_TIME: Duration = Duration::from_secs(6);

/// How deeply [`Input::json`] nests by default.
pub const DEFAULT_DEPTH: usize = 6;

/// Object keys the generators favour: Kubernetes fields and the strategic merge patch
/// directives.
pub const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "generateName",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "spec",
    "status",
    "data",
    "binaryData",
    "stringData",
    "type",
    "items",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "image",
    "command",
    "args",
    "env",
    "value",
    "valueFrom",
    "ports",
    "containerPort",
    "hostPort",
    "port",
    "targetPort",
    "nodePort",
    "protocol",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "volumes",
    "volumeMounts",
    "mountPath",
    "selector",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "template",
    "replicas",
    "strategy",
    "rollingUpdate",
    "maxSurge",
    "maxUnavailable",
    "conditions",
    "tolerations",
    "affinity",
    "nodeSelector",
    "nodeName",
    "securityContext",
    "rules",
    "subjects",
    "roleRef",
    "verbs",
    "apiGroups",
    "clusterIP",
    "clusterIPs",
    "ipFamilies",
    "externalIPs",
    "schedule",
    "hard",
    "used",
    "op",
    "path",
    "from",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/finalizers",
    "$setElementOrder/ports",
    "$setElementOrder/env",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/args",
    "",
];

/// String values the generators favour.
pub const STRINGS: &[&str] = &[
    "",
    "a",
    "v1",
    "apps/v1",
    "Pod",
    "ConfigMap",
    "Deployment",
    "default",
    "kube-system",
    "nginx",
    "app",
    "x",
    "-",
    ".",
    "a.b",
    "a/b",
    "example.com/a",
    "A_b.c-d",
    "replace",
    "delete",
    "merge",
    "add",
    "remove",
    "move",
    "copy",
    "test",
    "/",
    "/metadata",
    "/metadata/labels/a",
    "/spec/containers/0",
    "/spec/containers/-",
    "/a~1b",
    "/~2",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "TCP",
    "UDP",
    "SCTP",
    "Always",
    "Never",
    "IfNotPresent",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "None",
    "RollingUpdate",
    "0",
    "1",
    "-1",
    "100m",
    "1.5Gi",
    "1e3",
    "1E-9",
    "0.0000000001",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551616Ei",
    "1e2147483647",
    "1e-2147483648",
    "999999999999999999999999999999999999999k",
    "+.5",
    "50%",
    "101%",
    "10.0.0.1",
    "10.0.0.0/8",
    "::1",
    "fd00::/108",
    "256.0.0.1",
    "2024-01-02T03:04:05Z",
    "2024-13-45T99:99:99Z",
    "*/5 * * * *",
    "@every 1h",
    "CRON_TZ=Mars/Olympus 0 0 * * *",
    "a=b,c!=d",
    "a in (x,y),!b",
    "metadata.name=x",
    "spec.nodeName==",
    "\u{0}",
    "\u{ffff}",
    "é",
    "🦀",
    "\\",
    "\"",
    "%",
    "${x}",
    "$(VAR)",
];

/// Reads generator decisions from fuzz input bytes. Reading past the end gives zeros.
#[derive(Debug)]
pub struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    /// An input over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Input { bytes, at: 0 }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at.min(self.bytes.len())..]
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// The next four bytes as a big-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// A number in `0..n` (`n` at most 256 for an even spread); 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::from(self.byte()) % n
    }

    /// `true` about once in `n` times.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'b, T>(&mut self, items: &'b [T]) -> &'b T {
        &items[self.below(items.len())]
    }

    /// Up to `max` raw bytes.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let len = self.below(max.min(255) + 1);
        let start = self.at.min(self.bytes.len());
        let end = (start + len).min(self.bytes.len());
        self.at = start + len;
        &self.bytes[start..end]
    }

    /// A string: mostly one of `favoured`, sometimes raw input bytes (lossily UTF-8), sometimes
    /// a favoured string repeated or joined to another.
    pub fn string(&mut self, favoured: &[&str]) -> String {
        match self.below(8) {
            0 | 1 => String::from_utf8_lossy(self.bytes(64)).into_owned(),
            2 => {
                let a = self.pick(favoured);
                let b = self.pick(favoured);
                format!("{a}{b}")
            }
            3 if self.one_in(4) => {
                // Long strings: past the 63- and 253-character limits of names.
                let unit = self.pick(favoured);
                let unit = if unit.is_empty() { "a" } else { unit };
                unit.repeat(usize::from(self.byte()) + 1)
            }
            _ => (*self.pick(favoured)).to_owned(),
        }
    }

    /// A JSON number: small and large integers, boundaries, fractions.
    pub fn number(&mut self) -> Value {
        match self.below(6) {
            0 => Value::from(i64::from(self.byte()) - 8),
            1 => Value::from(i64::from(self.u32() as i32)),
            2 => Value::from(*self.pick(&[
                i64::MAX,
                i64::MIN,
                i64::from(i32::MAX),
                i64::from(i32::MIN),
                65535,
                65536,
                0,
            ])),
            3 => Value::from(u64::MAX),
            4 => Number::from_f64(f64::from(self.u32() as i32) / 16.0)
                .map_or(Value::Null, Value::Number),
            _ => Number::from_f64(*self.pick(&[0.5, -0.0, 1e300, -1e-300, 2.5e18]))
                .map_or(Value::Null, Value::Number),
        }
    }

    /// Any JSON value nested at most `depth` deep.
    pub fn json(&mut self, depth: usize) -> Value {
        let choice = if depth == 0 {
            self.below(4)
        } else {
            self.below(7)
        };
        match choice {
            0 => Value::Null,
            1 => Value::Bool(self.byte() & 1 == 1),
            2 => self.number(),
            3 => Value::String(self.string(STRINGS)),
            4 | 5 => {
                let len = self.below(6);
                let mut map = Map::new();
                for _ in 0..len {
                    let key = self.string(KEYS);
                    let value = self.json(depth - 1);
                    map.insert(key, value);
                }
                Value::Object(map)
            }
            _ => {
                let len = self.below(5);
                Value::Array((0..len).map(|_| self.json(depth - 1)).collect())
            }
        }
    }

    /// A value shaped by the JSON schema `schema`, whose `$ref`s point into `definitions`
    /// (`#/definitions/<name>` or `#/$defs/<name>`). About one value in `chaos` ignores the
    /// schema (wrong type, unknown field), so decoders' refusals are exercised too; `chaos` 0
    /// keeps to the schema.
    pub fn from_schema(
        &mut self,
        schema: &Value,
        definitions: &Map<String, Value>,
        depth: usize,
        chaos: usize,
    ) -> Value {
        let chaotic = |input: &mut Self| chaos != 0 && input.one_in(chaos);
        if chaotic(self) {
            return self.json(depth.min(2));
        }
        let schema = resolve(schema, definitions);
        let kind = match schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(types)) => types
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ if schema.get("properties").is_some() => "object",
            _ if schema.get("x-kubernetes-int-or-string").is_some() => "int-or-string",
            _ => "any",
        };
        match kind {
            "object" => {
                let mut map = Map::new();
                if depth == 0 {
                    return Value::Object(map);
                }
                if let Some(Value::Object(properties)) = schema.get("properties") {
                    let names: Vec<&String> = properties.keys().collect();
                    // Each property present with probability about 1/2, at most 12 of them.
                    let wanted = self.below(names.len().min(12) + 1);
                    for _ in 0..wanted {
                        let name = *self.pick(&names);
                        let value =
                            self.from_schema(&properties[name], definitions, depth - 1, chaos);
                        map.insert(name.clone(), value);
                    }
                }
                if let Some(additional) = schema.get("additionalProperties")
                    && additional.is_object()
                {
                    for _ in 0..self.below(4) {
                        let key = self.string(KEYS);
                        let value = self.from_schema(additional, definitions, depth - 1, chaos);
                        map.insert(key, value);
                    }
                }
                if chaotic(self) {
                    map.insert(self.string(KEYS), self.json(1));
                }
                Value::Object(map)
            }
            "array" => {
                if depth == 0 {
                    return Value::Array(Vec::new());
                }
                let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
                let len = self.below(4);
                Value::Array(
                    (0..len)
                        .map(|_| self.from_schema(&items, definitions, depth - 1, chaos))
                        .collect(),
                )
            }
            "string" => {
                if let Some(Value::Array(options)) = schema.get("enum")
                    && !options.is_empty()
                    && !self.one_in(4)
                {
                    return self.pick(options).clone();
                }
                if schema.get("format").and_then(Value::as_str) == Some("byte") && self.one_in(2) {
                    return Value::String(base64_of(self.bytes(32)));
                }
                Value::String(self.string(STRINGS))
            }
            "integer" | "number" => self.number(),
            "boolean" => Value::Bool(self.byte() & 1 == 1),
            "int-or-string" => {
                if self.one_in(2) {
                    self.number()
                } else {
                    Value::String(self.string(STRINGS))
                }
            }
            _ => self.json(depth.min(3)),
        }
    }
}

/// Follows `$ref` (and a lone `allOf`/`anyOf` member) to the schema it names.
fn resolve<'s>(schema: &'s Value, definitions: &'s Map<String, Value>) -> &'s Value {
    let mut schema = schema;
    for _ in 0..16 {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().unwrap_or_default();
            match definitions.get(name) {
                Some(target) => schema = target,
                None => return schema,
            }
        } else if let Some(Value::Array(members)) =
            schema.get("allOf").or_else(|| schema.get("anyOf"))
            && let Some(first) = members
                .iter()
                .find(|m| m.get("type") != Some(&"null".into()))
        {
            schema = first;
        } else {
            return schema;
        }
    }
    schema
}

/// Standard base64 with padding (enough for generated `format: byte` values).
fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_input_reads_as_zeros() {
        let mut input = Input::new(&[7]);
        assert_eq!(input.byte(), 7);
        assert!(input.is_empty());
        assert_eq!(input.byte(), 0);
        assert_eq!(input.u32(), 0);
        assert!(input.bytes(10).is_empty());
        // An empty input generates the smallest value of each kind.
        assert_eq!(Input::new(&[]).json(3), Value::Null);
    }

    #[test]
    fn generated_json_is_bounded_by_depth() {
        fn depth(v: &Value) -> usize {
            match v {
                Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
                Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        let bytes: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut input = Input::new(&bytes);
        for _ in 0..50 {
            assert!(depth(&input.json(4)) <= 4);
        }
    }

    #[test]
    fn schema_values_follow_the_schema_without_chaos() {
        let definitions = serde_json::json!({
            "Port": {"type": "object", "properties": {
                "port": {"type": "integer"},
                "protocol": {"type": "string", "enum": ["TCP", "UDP"]}
            }}
        });
        let Value::Object(definitions) = definitions else {
            unreachable!()
        };
        let schema = serde_json::json!({"type": "array", "items": {"$ref": "#/definitions/Port"}});
        let bytes: Vec<u8> = (0..512u32).map(|i| (i * 97 + 13) as u8).collect();
        let mut input = Input::new(&bytes);
        let value = input.from_schema(&schema, &definitions, 4, 0);
        for item in value.as_array().into_iter().flatten() {
            let item = item
                .as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>());
            for key in item.into_iter().flatten() {
                assert!(key == "port" || key == "protocol", "{key}");
            }
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_of(b""), "");
        assert_eq!(base64_of(b"f"), "Zg==");
        assert_eq!(base64_of(b"fo"), "Zm8=");
        assert_eq!(base64_of(b"foo"), "Zm9v");
        assert_eq!(base64_of(b"foob"), "Zm9vYg==");
    }
}
