//! Decoder tests: bodies built with a small encoder (field numbers written out by hand, as
//! upstream's `generated.proto` files give them), real bodies captured from kubectl, and a
//! schema-driven check that every field of the common kinds survives a trip through
//! k8s-openapi's types under the JSON name the table gives it.

use serde_json::{Value, json};

use super::model::{self, Card, Special, Ty};
use super::*;

/// A message under construction.
#[derive(Clone, Debug, Default)]
struct Pb(Vec<u8>);

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Pb {
    fn new() -> Self {
        Pb::default()
    }
    fn key(mut self, tag: u32, wire_type: u8) -> Self {
        put_varint(&mut self.0, (u64::from(tag) << 3) | u64::from(wire_type));
        self
    }
    /// A varint field (negative numbers as ten-byte two's complement, as Go writes them).
    fn int(self, tag: u32, v: i64) -> Self {
        let mut s = self.key(tag, 0);
        put_varint(&mut s.0, v as u64);
        s
    }
    fn bytes(self, tag: u32, b: &[u8]) -> Self {
        let mut s = self.key(tag, 2);
        put_varint(&mut s.0, b.len() as u64);
        s.0.extend_from_slice(b);
        s
    }
    fn str(self, tag: u32, v: &str) -> Self {
        self.bytes(tag, v.as_bytes())
    }
    fn msg(self, tag: u32, m: Pb) -> Self {
        self.bytes(tag, &m.0)
    }
    fn double(self, tag: u32, v: f64) -> Self {
        let mut s = self.key(tag, 1);
        s.0.extend_from_slice(&v.to_bits().to_le_bytes());
        s
    }
    /// A `map<string, string>` entry.
    fn entry(self, tag: u32, k: &str, v: &str) -> Self {
        self.msg(tag, Pb::new().str(1, k).str(2, v))
    }
    /// A `map<string, message>` entry.
    fn entry_msg(self, tag: u32, k: &str, v: Pb) -> Self {
        self.msg(tag, Pb::new().str(1, k).msg(2, v))
    }
}

fn envelope(api_version: &str, kind: &str, raw: Pb) -> Vec<u8> {
    let unknown = Pb::new()
        .msg(1, Pb::new().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    let mut body = MAGIC.to_vec();
    body.extend_from_slice(&unknown.0);
    body
}

fn decoded(api_version: &str, kind: &str, raw: Pb) -> Value {
    let (av, k, value) = decode(&envelope(api_version, kind, raw)).unwrap();
    assert_eq!((av.as_str(), k.as_str()), (api_version, kind));
    value
}

/// ObjectMeta as a Go client writes it: every value field present, zero or not.
fn go_meta(name: &str, namespace: &str) -> Pb {
    Pb::new()
        .str(1, name)
        .str(2, "")
        .str(3, namespace)
        .str(4, "")
        .str(5, "")
        .str(6, "")
        .int(7, 0)
        .msg(8, Pb::new())
}

const SECONDS_2006: i64 = 1_136_214_245; // 2006-01-02T15:04:05Z

#[test]
fn config_map_with_data_and_binary_data() {
    let raw = Pb::new()
        .msg(1, go_meta("settings", "default").entry(11, "app", "web"))
        .entry(2, "a.conf", "x=1")
        .entry(2, "empty", "")
        .msg(3, Pb::new().str(1, "blob").bytes(2, &[0, 1, 2, 0xff]))
        .msg(3, Pb::new().str(1, "nothing"));
    let value = decoded("v1", "ConfigMap", raw);
    assert_eq!(
        value,
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "default",
                "labels": {"app": "web"},
                "creationTimestamp": null
            },
            "data": {"a.conf": "x=1", "empty": ""},
            "binaryData": {"blob": "AAEC/w==", "nothing": ""}
        })
    );
    let typed: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(value).unwrap();
    assert_eq!(typed.metadata.name.as_deref(), Some("settings"));
    assert_eq!(
        typed.metadata.generate_name, None,
        "zero value fields with omitempty are left out"
    );
    assert_eq!(typed.binary_data.unwrap()["blob"].0, vec![0, 1, 2, 0xff]);
}

#[test]
fn deployment_with_a_pod_template() {
    let container = Pb::new()
        .str(1, "web")
        .str(2, "nginx:1.27")
        .str(3, "nginx")
        .str(3, "-g")
        .msg(
            6,
            Pb::new()
                .str(1, "")
                .int(2, 0)
                .int(3, 80)
                .str(4, "TCP")
                .str(5, ""),
        )
        .msg(
            8,
            Pb::new()
                .entry_msg(1, "cpu", Pb::new().str(1, "500m"))
                .entry_msg(2, "memory", Pb::new().str(1, "128Mi"))
                .entry_msg(2, "ephemeral-storage", Pb::new()),
        )
        .msg(9, Pb::new().str(1, "cache").str(3, "/cache"))
        .str(13, "/dev/termination-log")
        .str(14, "IfNotPresent")
        .msg(15, Pb::new())
        .int(16, 0);
    let pod_spec = Pb::new()
        .msg(
            1,
            Pb::new()
                .str(1, "cache")
                .msg(2, Pb::new().msg(2, Pb::new())),
        )
        .msg(2, container)
        .str(3, "Always")
        .int(4, 30);
    let spec = Pb::new()
        .int(1, 0)
        .msg(2, Pb::new().entry(1, "app", "web"))
        .msg(
            3,
            Pb::new()
                .msg(1, go_meta("", "").entry(11, "app", "web"))
                .msg(2, pod_spec),
        )
        .msg(4, Pb::new())
        .int(5, 0)
        .int(9, 600);
    let raw = Pb::new()
        .msg(1, go_meta("web", ""))
        .msg(2, spec)
        .msg(3, Pb::new());
    let value = decoded("apps/v1", "Deployment", raw);
    assert_eq!(
        value,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": null},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                    "spec": {
                        "volumes": [{"name": "cache", "emptyDir": {}}],
                        "containers": [{
                            "name": "web",
                            "image": "nginx:1.27",
                            "command": ["nginx", "-g"],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "resources": {
                                "limits": {"cpu": "500m"},
                                "requests": {"memory": "128Mi", "ephemeral-storage": "0"}
                            },
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                            "terminationMessagePath": "/dev/termination-log",
                            "imagePullPolicy": "IfNotPresent",
                            "securityContext": {}
                        }],
                        "restartPolicy": "Always",
                        "terminationGracePeriodSeconds": 30
                    }
                },
                "strategy": {},
                "progressDeadlineSeconds": 600
            },
            "status": {}
        })
    );
    let typed: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(value).unwrap();
    let spec = typed.spec.unwrap();
    assert_eq!(
        spec.replicas,
        Some(0),
        "a pointer field keeps its zero value"
    );
    let pod = spec.template.spec.unwrap();
    assert!(
        pod.volumes.unwrap()[0].empty_dir.is_some(),
        "emptyDir: {{}} is present"
    );
    assert!(pod.containers[0].security_context.is_some());
}

#[test]
fn service_ports_with_int_or_string_target_ports() {
    let port = |name: &str, port: i64, target: Pb| {
        Pb::new()
            .str(1, name)
            .str(2, "TCP")
            .int(3, port)
            .msg(4, target)
            .int(5, 0)
    };
    let spec = Pb::new()
        .msg(
            1,
            port("http", 80, Pb::new().int(1, 0).int(2, 8080).str(3, "")),
        )
        .msg(
            1,
            port("named", 443, Pb::new().int(1, 1).int(2, 0).str(3, "https")),
        )
        .msg(1, port("", 53, Pb::new()))
        .entry(2, "app", "web")
        .str(4, "ClusterIP");
    let value = decoded(
        "v1",
        "Service",
        Pb::new().msg(1, go_meta("web", "ns")).msg(2, spec),
    );
    assert_eq!(
        value["spec"],
        json!({
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                {"name": "named", "protocol": "TCP", "port": 443, "targetPort": "https"},
                {"protocol": "TCP", "port": 53, "targetPort": 0}
            ],
            "selector": {"app": "web"},
            "type": "ClusterIP"
        })
    );
    assert_eq!(
        value["status"],
        json!({"loadBalancer": {}}),
        "an absent value struct prints as its zero"
    );
    let bad = Pb::new().msg(2, Pb::new().msg(1, port("x", 1, Pb::new().int(1, 2))));
    assert_eq!(
        decode(&envelope("v1", "Service", bad)),
        Err(ProtobufError::InvalidIntOrString(2))
    );
}

#[test]
fn pod_timestamps_and_durations() {
    let meta = go_meta("p", "ns")
        .msg(8, Pb::new().int(1, SECONDS_2006).int(2, 999))
        .msg(9, Pb::new())
        .int(10, 0);
    let value = decoded("v1", "Pod", Pb::new().msg(1, meta));
    assert_eq!(
        value["metadata"],
        json!({
            "name": "p",
            "namespace": "ns",
            "creationTimestamp": "2006-01-02T15:04:05Z",
            "deletionTimestamp": null,
            "deletionGracePeriodSeconds": 0
        })
    );
    let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(value).unwrap();
    assert_eq!(typed.metadata.deletion_grace_period_seconds, Some(0));

    // events.k8s.io/v1 Event: eventTime is a MicroTime.
    let raw = Pb::new()
        .msg(1, go_meta("e", "ns"))
        .msg(2, Pb::new().int(1, SECONDS_2006).int(2, 123_456_789))
        .str(6, "Pulled");
    let value = decoded("events.k8s.io/v1", "Event", raw);
    assert_eq!(value["eventTime"], json!("2006-01-02T15:04:05.123456Z"));
    assert_eq!(value["deprecatedFirstTimestamp"], Value::Null);
    assert_eq!(value["deprecatedSource"], json!({}));

    // No common kind has a meta/v1 Duration field: render the message directly.
    let duration = model::message_by_name("k8s.io.apimachinery.pkg.apis.meta.v1.Duration").unwrap();
    let mut renderer = render::Renderer::new(8, 100);
    let ninety = Pb::new().int(1, 90_000_000_000).0;
    assert_eq!(
        renderer.message(duration, &[&ninety], 0).unwrap(),
        json!("1m30s")
    );
    assert_eq!(renderer.message(duration, &[], 0).unwrap(), json!("0s"));
}

#[test]
fn delete_options_and_evictions() {
    let options = Pb::new()
        .int(1, 0)
        .msg(2, Pb::new().str(1, "uid-1"))
        .str(4, "Foreground")
        .str(5, "All");
    for api_version in ["v1", "apps/v1", "meta.k8s.io/v1"] {
        let value = decoded(api_version, "DeleteOptions", options.clone());
        assert_eq!(
            value,
            json!({
                "apiVersion": api_version,
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": "uid-1"},
                "propagationPolicy": "Foreground",
                "dryRun": ["All"]
            })
        );
    }
    let eviction = Pb::new()
        .msg(1, go_meta("web-0", "ns"))
        .msg(2, Pb::new().int(1, 30));
    let value = decoded("policy/v1", "Eviction", eviction);
    assert_eq!(
        value,
        json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "web-0", "namespace": "ns", "creationTimestamp": null},
            "deleteOptions": {"gracePeriodSeconds": 30}
        })
    );
    let typed: k8s_openapi::api::policy::v1::Eviction = serde_json::from_value(value).unwrap();
    assert_eq!(typed.delete_options.unwrap().grace_period_seconds, Some(30));
}

#[test]
fn wrapped_lists_raw_extensions_and_crd_schemas() {
    // SubjectAccessReview: extra is map<string, ExtraValue>, ExtraValue a wrapped []string.
    let spec = Pb::new()
        .str(3, "jane")
        .entry_msg(5, "scopes", Pb::new().str(1, "a").str(1, "b"))
        .entry_msg(5, "none", Pb::new());
    let value = decoded(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        Pb::new().msg(2, spec),
    );
    assert_eq!(
        value["spec"],
        json!({"user": "jane", "extra": {"scopes": ["a", "b"], "none": []}})
    );

    // ControllerRevision: data is a RawExtension holding JSON.
    let raw = Pb::new()
        .msg(2, Pb::new().bytes(1, br#"{"spec": {"x": [1, 2.5]}}"#))
        .int(3, 7);
    let value = decoded("apps/v1", "ControllerRevision", raw);
    assert_eq!(value["data"], json!({"spec": {"x": [1, 2.5]}}));
    assert_eq!(value["revision"], json!(7));
    let not_json = Pb::new().msg(2, Pb::new().bytes(1, b"\x01\x02"));
    assert!(matches!(
        decode(&envelope("apps/v1", "ControllerRevision", not_json)),
        Err(ProtobufError::InvalidEmbeddedJson(_))
    ));
    let cbor = Pb::new().msg(2, Pb::new().bytes(1, &[0xd9, 0xd9, 0xf7, 0xa0]));
    assert_eq!(
        decode(&envelope("apps/v1", "ControllerRevision", cbor)),
        Err(ProtobufError::UnsupportedCbor)
    );

    // A CRD schema: JSONSchemaProps type=5, default=8 (JSON), minimum=11 (double), enum=20,
    // required=23, items=24 (JSONSchemaPropsOrArray), properties=29 (map),
    // additionalProperties=30 (JSONSchemaPropsOrBool), xKubernetesPreserveUnknownFields=38.
    let leaf = Pb::new()
        .str(5, "integer")
        .double(11, 1.0)
        .msg(8, Pb::new().bytes(1, b"3"));
    let tags = Pb::new()
        .str(5, "array")
        .msg(24, Pb::new().msg(1, Pb::new().str(5, "string")));
    let labels = Pb::new().str(5, "object").msg(30, Pb::new().int(1, 1));
    let mode = Pb::new()
        .msg(20, Pb::new().bytes(1, b"\"a\""))
        .msg(20, Pb::new().bytes(1, b"\"b\""));
    let schema = Pb::new()
        .str(5, "object")
        .entry_msg(29, "replicas", leaf)
        .entry_msg(29, "tags", tags)
        .entry_msg(29, "labels", labels)
        .entry_msg(29, "mode", mode)
        .str(23, "replicas")
        .int(38, 1);
    let version = Pb::new()
        .str(1, "v1")
        .int(2, 1)
        .int(3, 1)
        .msg(4, Pb::new().msg(1, schema));
    let spec = Pb::new()
        .str(1, "example.com")
        .msg(
            3,
            Pb::new()
                .str(1, "widgets")
                .str(2, "widget")
                .str(4, "Widget")
                .str(5, "WidgetList"),
        )
        .str(4, "Namespaced")
        .msg(7, version);
    let value = decoded(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        Pb::new()
            .msg(1, go_meta("widgets.example.com", ""))
            .msg(2, spec),
    );
    assert_eq!(
        value["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        json!({
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "minimum": 1, "default": 3},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": true},
                "mode": {"enum": ["a", "b"]}
            },
            "required": ["replicas"],
            "x-kubernetes-preserve-unknown-fields": true
        })
    );
    let typed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(value).unwrap();
    assert_eq!(typed.spec.names.kind, "Widget");
}

#[test]
fn wire_details_follow_gos_decoder() {
    // Packed and unpacked elements of one repeated int64 (PodSpec.securityContext=14,
    // PodSecurityContext.supplementalGroups=4).
    let mut packed = Vec::new();
    for v in [1u64, 2, 300] {
        put_varint(&mut packed, v);
    }
    let security = Pb::new().bytes(4, &packed).int(4, -1);
    let spec = Pb::new().msg(14, security);
    let value = decoded("v1", "Pod", Pb::new().msg(2, spec));
    assert_eq!(
        value["spec"]["securityContext"]["supplementalGroups"],
        json!([1, 2, 300, -1])
    );
    assert_eq!(
        value["spec"]["containers"],
        Value::Null,
        "a nil slice without omitempty"
    );

    // A singular message that occurs twice merges; a scalar's last occurrence wins; unknown
    // fields (here 99 and a group) are skipped; invalid UTF-8 prints as U+FFFD.
    let raw = Pb::new()
        .msg(1, Pb::new().str(1, "first").entry(11, "a", "1"))
        .msg(1, Pb::new().str(1, "second").entry(11, "b", "2"))
        .str(99, "ignored")
        .key(98, 3)
        .int(1, 5)
        .key(98, 4)
        .bytes(2, &Pb::new().str(1, "k").bytes(2, b"v\xff\xfe").0);
    let value = decoded("v1", "ConfigMap", raw);
    assert_eq!(
        value["metadata"],
        json!({"name": "second", "labels": {"a": "1", "b": "2"}, "creationTimestamp": null})
    );
    assert_eq!(value["data"], json!({"k": "v\u{fffd}\u{fffd}"}));

    // int32 keeps the low 32 bits of the varint; negative numbers use ten bytes.
    let raw = Pb::new().msg(2, Pb::new().int(1, -5).int(5, (1 << 32) + 7));
    let value = decoded("apps/v1", "Deployment", raw);
    assert_eq!(value["spec"]["replicas"], json!(-5));
    assert_eq!(value["spec"]["minReadySeconds"], json!(7));
}

#[test]
fn envelope_defaults_and_kinds() {
    let raw = Pb::new().msg(1, go_meta("x", ""));
    let body = envelope("", "", raw.clone());
    assert_eq!(decode(&body), Err(ProtobufError::MissingKind));
    assert_eq!(
        decode(&envelope("", "ConfigMap", raw.clone())),
        Err(ProtobufError::MissingVersion)
    );
    assert_eq!(
        decode(&envelope("a/b/c", "ConfigMap", raw.clone())),
        Err(ProtobufError::MissingVersion)
    );
    let options = DecodeOptions {
        default_api_version: Some("v1".to_owned()),
        default_kind: Some("Namespace".to_owned()),
        ..DecodeOptions::default()
    };
    let (av, kind, value) = decode_with(&body, &options).unwrap();
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "Namespace"));
    assert_eq!(value["spec"], json!({}));
    assert_eq!(
        decode(&envelope("v1", "Widget", raw.clone())),
        Err(ProtobufError::UnknownKind {
            api_version: "v1".to_owned(),
            kind: "Widget".to_owned()
        })
    );
    // No raw at all: the zero object.
    let mut empty = MAGIC.to_vec();
    empty.extend(
        Pb::new()
            .msg(1, Pb::new().str(1, "v1").str(2, "Namespace"))
            .0,
    );
    assert_eq!(
        decode(&empty).unwrap().2,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"creationTimestamp": null}, "spec": {}, "status": {}})
    );
}

#[test]
fn malformed_bodies_are_errors() {
    let good = envelope(
        "v1",
        "ConfigMap",
        Pb::new().msg(1, go_meta("x", "")).entry(2, "k", "v"),
    );
    assert!(decode(&good).is_ok());
    assert_eq!(decode(b""), Err(ProtobufError::Empty));
    assert_eq!(decode(b"k8s\0"), Err(ProtobufError::Empty));
    assert_eq!(
        decode(b"{\"kind\":\"ConfigMap\"}"),
        Err(ProtobufError::NotProtobuf)
    );
    // Every truncation of a valid body fails cleanly (or, cut between envelope fields, decodes).
    for len in 5..good.len() {
        let _ = decode(&good[..len]);
    }
    assert_eq!(
        decode(&good[..good.len() - 1]),
        Err(ProtobufError::Truncated)
    );
    // Garbage after the magic: deterministic pseudo-random bytes never panic.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut body = MAGIC.to_vec();
        for _ in 0..(state % 64) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            body.push(state as u8);
        }
        let _ = decode(&body);
        // Also garbage as the object of a real kind.
        let _ = decode(&envelope("apps/v1", "Deployment", Pb(body[4..].to_vec())));
    }
    // A known field with the wrong wire type.
    let wrong = envelope("v1", "ConfigMap", Pb::new().int(2, 1));
    assert_eq!(
        decode(&wrong),
        Err(ProtobufError::WrongWireType {
            message: "k8s.io.api.core.v1.ConfigMap",
            field: "data",
            wire_type: 0
        })
    );
    let limits = DecodeOptions {
        max_body_bytes: 10,
        ..DecodeOptions::default()
    };
    assert_eq!(
        decode_with(&good, &limits),
        Err(ProtobufError::TooLarge {
            size: good.len(),
            limit: 10
        })
    );
}

#[test]
fn nesting_and_expansion_are_bounded() {
    // CRD schemas nest without bound: properties -> JSONSchemaProps -> properties -> ...
    let mut schema = Pb::new().str(5, "string");
    for _ in 0..200 {
        schema = Pb::new().entry_msg(29, "p", schema);
    }
    let version = Pb::new().str(1, "v1").msg(4, Pb::new().msg(1, schema));
    let body = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        Pb::new().msg(2, Pb::new().msg(7, version)),
    );
    assert_eq!(decode(&body), Err(ProtobufError::TooDeep(128)));
    let deep = DecodeOptions {
        max_depth: 1000,
        ..DecodeOptions::default()
    };
    assert!(decode_with(&body, &deep).is_ok());

    // Each empty container (two bytes) expands to a zero Container object.
    let mut spec = Pb::new();
    for _ in 0..5000 {
        spec = spec.msg(2, Pb::new());
    }
    let body = envelope("v1", "Pod", Pb::new().msg(2, spec));
    let small = DecodeOptions {
        max_values: 10_000,
        ..DecodeOptions::default()
    };
    assert_eq!(
        decode_with(&body, &small),
        Err(ProtobufError::TooManyValues(10_000))
    );
    let (_, _, pod) = decode(&body).unwrap();
    assert_eq!(
        pod["spec"]["containers"][4999],
        json!({"name": "", "resources": {}})
    );
}

// ------------------------------------------------------------------ schema-driven round trips

/// A protobuf message with every field of message `index` set to a non-zero value, recursing
/// into message types not already on `stack`.
fn populate(index: u16, stack: &mut Vec<u16>) -> Pb {
    let message = model::message(index).unwrap();
    let mut out = Pb::new();
    match message.special {
        Special::Time => return out.int(1, SECONDS_2006),
        Special::MicroTime => return out.int(1, SECONDS_2006).int(2, 123_456_000),
        Special::Duration => return out.int(1, 1_500_000_000),
        Special::Quantity => return out.str(1, "1Gi"),
        Special::IntOrString => return out.int(1, 1).str(3, "http"),
        Special::RawExtension | Special::FieldsV1 => return out.bytes(1, br#"{"f:a":{}}"#),
        Special::Json => return out.bytes(1, br#"{"x":1}"#),
        Special::SchemaOrBool => return out.int(1, 1),
        Special::SchemaOrStringArray => return out.str(2, "a"),
        // Its JSONSchemaProps is already on the stack: one empty schema.
        Special::SchemaOrArray => return out.msg(1, Pb::new()),
        _ => {}
    }
    stack.push(index);
    for field in message.fields {
        let one = |out: Pb| -> Pb {
            match field.ty {
                Ty::S => out.str(field.tag, &format!("s{}", field.tag)),
                Ty::B => out.int(field.tag, 1),
                Ty::I32 | Ty::I64 => out.int(field.tag, i64::from(field.tag) + 1),
                Ty::F64 => out.double(field.tag, 1.5),
                Ty::BY => out.bytes(field.tag, b"\x01\x02"),
                Ty::M(_) => out,
            }
        };
        out = match (field.card, field.ty) {
            (_, Ty::M(target)) if stack.contains(&target) => out,
            (Card::Map, Ty::M(target)) => out.entry_msg(field.tag, "k", populate(target, stack)),
            (Card::Map, Ty::S) => out.entry(field.tag, "k", "v"),
            (Card::Map, _) => out.msg(field.tag, Pb::new().str(1, "k").bytes(2, b"\x03")),
            (_, Ty::M(target)) => out.msg(field.tag, populate(target, stack)),
            _ => one(out),
        };
    }
    stack.pop();
    out
}

/// Decodes a fully populated `kind` and checks that k8s-openapi's type reads every field back:
/// a wrong JSON name, type or shape would be dropped or rejected on the way.
fn round_trips<T>(api_version: &str, kind: &str)
where
    T: k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize,
{
    let index = model::message_for_kind(api_version, kind).unwrap();
    let raw = populate(index, &mut Vec::new());
    let value = decoded(api_version, kind, raw);
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{api_version} {kind}: k8s-openapi rejects the JSON: {e}"));
    let again = serde_json::to_value(&typed).unwrap();
    let (mut left, mut right) = (Vec::new(), Vec::new());
    diff("", &value, &again, &mut left, &mut right);
    if !left.is_empty() || !right.is_empty() {
        panic!(
            "{api_version} {kind}: lost or changed by k8s-openapi: {left:?}; it printed {right:?}"
        );
    }
}

fn diff(path: &str, a: &Value, b: &Value, left: &mut Vec<String>, right: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => diff(&format!("{path}.{k}"), v, w, left, right),
                    None => left.push(format!("{path}.{k}")),
                }
            }
            // k8s-openapi prints apiVersion and kind on nested resources too (a StatefulSet's
            // volumeClaimTemplates); upstream leaves their empty TypeMeta out.
            let extra = y.keys().filter(|k| !x.contains_key(*k));
            let extra =
                extra.filter(|k| path.is_empty() || !matches!(k.as_str(), "apiVersion" | "kind"));
            right.extend(extra.map(|k| format!("{path}.{k}")));
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), v, w, left, right);
            }
        }
        _ if a != b => {
            left.push(format!("{path}={a}"));
            right.push(format!("{path}={b}"));
        }
        _ => {}
    }
}

#[test]
fn every_field_of_the_common_kinds_reads_back_through_k8s_openapi() {
    use k8s_openapi::api::{
        apps, authentication, authorization, autoscaling, batch, coordination, core, discovery,
        events, networking, policy, rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::apimachinery::pkg::apis::meta;

    round_trips::<core::v1::Pod>("v1", "Pod");
    round_trips::<core::v1::PodTemplate>("v1", "PodTemplate");
    round_trips::<core::v1::ReplicationController>("v1", "ReplicationController");
    round_trips::<core::v1::Service>("v1", "Service");
    round_trips::<core::v1::Endpoints>("v1", "Endpoints");
    round_trips::<core::v1::Node>("v1", "Node");
    round_trips::<core::v1::Namespace>("v1", "Namespace");
    round_trips::<core::v1::ConfigMap>("v1", "ConfigMap");
    round_trips::<core::v1::Secret>("v1", "Secret");
    round_trips::<core::v1::ServiceAccount>("v1", "ServiceAccount");
    round_trips::<core::v1::Event>("v1", "Event");
    round_trips::<core::v1::LimitRange>("v1", "LimitRange");
    round_trips::<core::v1::ResourceQuota>("v1", "ResourceQuota");
    round_trips::<core::v1::PersistentVolume>("v1", "PersistentVolume");
    round_trips::<core::v1::PersistentVolumeClaim>("v1", "PersistentVolumeClaim");
    round_trips::<core::v1::Binding>("v1", "Binding");
    round_trips::<apps::v1::Deployment>("apps/v1", "Deployment");
    round_trips::<apps::v1::ReplicaSet>("apps/v1", "ReplicaSet");
    round_trips::<apps::v1::StatefulSet>("apps/v1", "StatefulSet");
    round_trips::<apps::v1::DaemonSet>("apps/v1", "DaemonSet");
    round_trips::<apps::v1::ControllerRevision>("apps/v1", "ControllerRevision");
    round_trips::<batch::v1::Job>("batch/v1", "Job");
    round_trips::<batch::v1::CronJob>("batch/v1", "CronJob");
    round_trips::<coordination::v1::Lease>("coordination.k8s.io/v1", "Lease");
    round_trips::<events::v1::Event>("events.k8s.io/v1", "Event");
    round_trips::<discovery::v1::EndpointSlice>("discovery.k8s.io/v1", "EndpointSlice");
    round_trips::<policy::v1::PodDisruptionBudget>("policy/v1", "PodDisruptionBudget");
    round_trips::<policy::v1::Eviction>("policy/v1", "Eviction");
    round_trips::<scheduling::v1::PriorityClass>("scheduling.k8s.io/v1", "PriorityClass");
    round_trips::<autoscaling::v1::Scale>("autoscaling/v1", "Scale");
    round_trips::<autoscaling::v2::HorizontalPodAutoscaler>(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
    );
    round_trips::<meta::v1::DeleteOptions>("meta.k8s.io/v1", "DeleteOptions");
    round_trips::<authorization::v1::SelfSubjectAccessReview>(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
    );
    round_trips::<authorization::v1::SubjectAccessReview>(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
    );
    round_trips::<authentication::v1::TokenReview>("authentication.k8s.io/v1", "TokenReview");
    round_trips::<authentication::v1::SelfSubjectReview>(
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
    );
    round_trips::<rbac::v1::Role>("rbac.authorization.k8s.io/v1", "Role");
    round_trips::<rbac::v1::ClusterRole>("rbac.authorization.k8s.io/v1", "ClusterRole");
    round_trips::<rbac::v1::RoleBinding>("rbac.authorization.k8s.io/v1", "RoleBinding");
    round_trips::<rbac::v1::ClusterRoleBinding>(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
    );
    round_trips::<apiextensions::v1::CustomResourceDefinition>(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    );
    round_trips::<networking::v1::Ingress>("networking.k8s.io/v1", "Ingress");
    round_trips::<networking::v1::NetworkPolicy>("networking.k8s.io/v1", "NetworkPolicy");
    round_trips::<storage::v1::StorageClass>("storage.k8s.io/v1", "StorageClass");
}

// ------------------------------------------------------------------ bodies captured from kubectl

/// Request bodies stock kubectl 1.32 sent against a loopback endpoint that recorded them
/// (`scripts/kubectl-capture-server.py`), base64-encoded, with the JSON that
/// `--dry-run=client -o json` prints for the same command: the body kubectl would send as JSON.
/// The commands, in order:
/// `kubectl create configmap settings --from-literal=a.conf=x=1 --from-file=blob=bin.dat`
/// (bin.dat holding 00 01 02 ff), `create deployment web --image=nginx:1.27 --port=80
/// --replicas=2`, `create secret generic creds --from-literal=password=s3cr3t`, `create service
/// clusterip web --tcp=80:8080`, `create namespace team-a`, `create job once --image=busybox --
/// echo hi`, `create cronjob nightly --image=busybox --schedule='0 3 * * *' -- date`, `create
/// quota q --hard=cpu=2,memory=1Gi,pods=10`, `create priorityclass high --value=1000
/// --description=important`, `create poddisruptionbudget pdb --selector=app=web
/// --min-available=1`, `create serviceaccount bot`, and `auth can-i get pods`.
const KUBECTL: &[(&str, &str, &str)] = &[
    (
        "configmap",
        include_str!("testdata/kubectl/configmap.pb.b64"),
        include_str!("testdata/kubectl/configmap.json"),
    ),
    (
        "deployment",
        include_str!("testdata/kubectl/deployment.pb.b64"),
        include_str!("testdata/kubectl/deployment.json"),
    ),
    (
        "secret",
        include_str!("testdata/kubectl/secret.pb.b64"),
        include_str!("testdata/kubectl/secret.json"),
    ),
    (
        "service",
        include_str!("testdata/kubectl/service.pb.b64"),
        include_str!("testdata/kubectl/service.json"),
    ),
    (
        "namespace",
        include_str!("testdata/kubectl/namespace.pb.b64"),
        include_str!("testdata/kubectl/namespace.json"),
    ),
    (
        "job",
        include_str!("testdata/kubectl/job.pb.b64"),
        include_str!("testdata/kubectl/job.json"),
    ),
    (
        "cronjob",
        include_str!("testdata/kubectl/cronjob.pb.b64"),
        include_str!("testdata/kubectl/cronjob.json"),
    ),
    (
        "resourcequota",
        include_str!("testdata/kubectl/resourcequota.pb.b64"),
        include_str!("testdata/kubectl/resourcequota.json"),
    ),
    (
        "priorityclass",
        include_str!("testdata/kubectl/priorityclass.pb.b64"),
        include_str!("testdata/kubectl/priorityclass.json"),
    ),
    (
        "poddisruptionbudget",
        include_str!("testdata/kubectl/poddisruptionbudget.pb.b64"),
        include_str!("testdata/kubectl/poddisruptionbudget.json"),
    ),
    (
        "serviceaccount",
        include_str!("testdata/kubectl/serviceaccount.pb.b64"),
        include_str!("testdata/kubectl/serviceaccount.json"),
    ),
];

fn kubectl_body(b64: &str) -> Vec<u8> {
    use base64::Engine as _;
    let text: String = b64.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[test]
fn kubectl_protobuf_bodies_decode_to_the_json_kubectl_would_send() {
    for (name, b64, json) in KUBECTL {
        let body = kubectl_body(b64);
        assert!(is_protobuf(&body), "{name}");
        let (_, _, value) = decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected: Value = serde_json::from_str(json).unwrap();
        assert_eq!(value, expected, "{name}");
    }
}

#[test]
fn kubectl_auth_can_i_sends_a_self_subject_access_review() {
    let body = kubectl_body(include_str!(
        "testdata/kubectl/selfsubjectaccessreview.pb.b64"
    ));
    let (api_version, kind, value) = decode(&body).unwrap();
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview")
    );
    assert_eq!(
        value,
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}},
            "status": {"allowed": false}
        })
    );
}
