use serde_json::{Value, json};

use super::*;
use crate::custom::declare;

/// The schema upstream's OpenAPI publishing conformance spec uses ("Foo CRD for Testing").
fn foo_schema() -> Value {
    json!({
        "description": "Foo CRD for Testing",
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "description": "Specification of Foo",
                "properties": {
                    "bars": {
                        "description": "List of Bars and their specs.",
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"description": "Name of Bar.", "type": "string"},
                                "feeling": {
                                    "description": "Whether Bar is feeling great.",
                                    "type": "string",
                                    "enum": ["Great", "Down"],
                                },
                                "bazs": {
                                    "description": "List of Bazs.",
                                    "items": {"type": "string"},
                                    "type": "array",
                                },
                            },
                        },
                    },
                },
            },
            "status": {
                "description": "Status of Foo",
                "type": "object",
                "properties": {
                    "quxType": {"pattern": "in-tree|out-of-tree", "type": "string"},
                },
            },
        },
    })
}

/// The published kinds of a CRD whose versions all have `schema`.
fn kinds(group: &str, kind: &str, versions: &[&str], schema: &Value) -> Vec<CustomKind> {
    let plural = format!("{}s", kind.to_lowercase());
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.{group}"), "generation": 1},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": plural, "kind": kind, "listKind": format!("{kind}List")},
                "versions": versions.iter().enumerate().map(|(i, v)| json!({
                    "name": v, "served": true, "storage": i == 0,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                })).collect::<Vec<_>>(),
            },
            "status": {"acceptedNames": {
                "plural": plural, "kind": kind, "listKind": format!("{kind}List"),
                "singular": kind.to_lowercase(),
            }},
        }))
        .unwrap();
    declare(&crd)
        .iter()
        .map(|d| CustomKind {
            resource: d.resource,
            list_kind: d.list_kind.clone(),
            schema: d
                .schema
                .as_ref()
                .map(|s| serde_json::to_value(s.as_ref()).unwrap()),
        })
        .collect()
}

/// A definition without what publishing adds (upstream's spec drops the same before comparing).
fn without_added(mut definition: Value) -> Value {
    let object = definition.as_object_mut().unwrap();
    object.remove(GVK_EXTENSION);
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for added in ["metadata", "apiVersion", "kind"] {
            properties.remove(added);
        }
        if properties.is_empty() {
            object.remove("properties");
        }
    }
    definition
}

#[test]
fn definition_names_reverse_the_group() {
    assert_eq!(
        definition_name("stable.example.com", "v1", "CronTab"),
        "com.example.stable.v1.CronTab"
    );
    assert_eq!(
        definition_name(
            "crd-publish-openapi-test-foo.example.com",
            "v1",
            "E2e-test-crd"
        ),
        "com.example.crd-publish-openapi-test-foo.v1.E2e-test-crd"
    );
}

#[test]
fn the_v2_definition_is_the_schema_with_type_and_object_meta() {
    let published = publish(kinds("foo.example.com", "Foo", &["v1"], &foo_schema()));
    let v2 = published.v2_document();
    let definition = &v2.value["definitions"]["com.example.foo.v1.Foo"];
    assert_eq!(without_added(definition.clone()), foo_schema());
    assert_eq!(
        definition[GVK_EXTENSION],
        json!([{"group": "foo.example.com", "kind": "Foo", "version": "v1"}])
    );
    assert_eq!(
        definition["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(definition["properties"]["apiVersion"]["type"], "string");
    let list = &v2.value["definitions"]["com.example.foo.v1.FooList"];
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/definitions/com.example.foo.v1.Foo"
    );
    assert_eq!(list["required"], json!(["items"]));
    assert_eq!(
        list[GVK_EXTENSION],
        json!([{"group": "foo.example.com", "kind": "FooList", "version": "v1"}])
    );
    // The built-in definitions and paths stay, the custom paths join them.
    assert!(v2.value["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    let object_path =
        &v2.value["paths"]["/apis/foo.example.com/v1/namespaces/{namespace}/foos/{name}"];
    assert_eq!(
        object_path["get"]["operationId"],
        "readFooExampleComV1NamespacedFoo"
    );
    assert_eq!(
        object_path["get"][GVK_EXTENSION],
        json!({"group": "foo.example.com", "kind": "Foo", "version": "v1"})
    );
    let patch_params = object_path["patch"]["parameters"].as_array().unwrap();
    assert!(patch_params.iter().any(|p| p["name"] == "fieldValidation"));
    assert!(v2.value["paths"]["/apis/foo.example.com/v1/namespaces/{namespace}/foos/{name}/status"]["put"].is_object());
    assert!(v2.json.windows(7).any(|w| w == b"Foo CRD"));
    // The protobuf form is encoded from the merged document.
    let protobuf = published.v2_protobuf();
    assert!(protobuf.len() > super::super::v2_protobuf().len());
}

#[test]
fn v3_documents_per_custom_group_version_hold_the_closure_of_their_definitions() {
    let mut all = kinds("foo.example.com", "Foo", &["v1", "v2"], &foo_schema());
    all.extend(kinds(
        "foo.example.com",
        "Waldo",
        &["v2"],
        &json!({"type": "object"}),
    ));
    let published = publish(all);
    let root = published.v3_root();
    let url = root["paths"]["apis/foo.example.com/v2"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert!(url.starts_with("/openapi/v3/apis/foo.example.com/v2?hash="));
    assert!(root["paths"]["apis/foo.example.com/v1"].is_object());
    assert!(
        root["paths"]["api/v1"].is_object(),
        "built-in documents stay listed"
    );
    let doc = published.v3_document_at("apis/foo.example.com/v2").unwrap();
    let schemas = &doc.value["components"]["schemas"];
    for name in [
        "com.example.foo.v2.Foo",
        "com.example.foo.v2.FooList",
        "com.example.foo.v2.Waldo",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    ] {
        assert!(schemas[name].is_object(), "{name} missing");
    }
    assert!(
        schemas["com.example.foo.v1.Foo"].is_null(),
        "v1 is another document"
    );
    // v3 references, and siblings of a reference wrapped in allOf.
    assert_eq!(
        schemas["com.example.foo.v2.Foo"]["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    // Built-in definitions read back from the v2 document are what built-in documents hold.
    let core = super::super::v3_document_at("api/v1").unwrap();
    let meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
    assert_eq!(schemas[meta], core.value["components"]["schemas"][meta]);
    assert!(
        doc.value["paths"]["/apis/foo.example.com/v2/namespaces/{namespace}/waldos"]["post"]
            .is_object()
    );
    assert!(doc.value["paths"]["/apis/foo.example.com/v2/foos"]["get"].is_object());
    // Built-in documents are still served.
    assert!(published.v3_document_at("apis/apps/v1").is_some());
    assert!(
        published
            .v3_document_at("apis/foo.example.com/v3")
            .is_none()
    );
}

#[test]
fn unknown_fields_at_the_root_publish_only_the_type_in_v2() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"spec": {"type": "object", "description": "Specification"}},
    });
    let published = publish(kinds("root.example.com", "Open", &["v1"], &schema));
    let v2 = published.v2_document();
    assert_eq!(
        v2.value["definitions"]["com.example.root.v1.Open"],
        json!({"type": "object", GVK_EXTENSION: [{"group": "root.example.com", "kind": "Open", "version": "v1"}]})
    );
    let v3 = published
        .v3_document_at("apis/root.example.com/v1")
        .unwrap();
    let definition = &v3.value["components"]["schemas"]["com.example.root.v1.Open"];
    assert_eq!(definition["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(
        definition["properties"]["spec"]["description"],
        "Specification"
    );
    assert!(definition["properties"]["metadata"].is_object());
}

#[test]
fn v2_drops_what_kubectl_cannot_read_and_v3_unfolds_int_or_string() {
    let schema = json!({
        "type": "object",
        "required": ["port", "maybe"],
        "properties": {
            "port": {"x-kubernetes-int-or-string": true},
            "maybe": {"type": "object", "nullable": true, "properties": {"a": {"type": "string"}}},
            "open": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"a": {"type": "string"}},
            },
            "list": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "choice": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}], "example": "a"},
            "flags": {"type": "boolean", "nullable": false, "x-kubernetes-embedded-resource": false},
        },
    });
    let published = publish(kinds("cut.example.com", "Cut", &["v1"], &schema));
    let v2 = published.v2_document();
    let v2 = without_added(v2.value["definitions"]["com.example.cut.v1.Cut"].clone());
    assert_eq!(
        v2,
        json!({
            "type": "object",
            "required": ["port"],
            "properties": {
                "port": {"x-kubernetes-int-or-string": true},
                "maybe": {},
                "open": {"x-kubernetes-preserve-unknown-fields": true},
                "list": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}},
                "choice": {"type": "string"},
                "flags": {"type": "boolean"},
            },
        })
    );
    let v3 = published.v3_document_at("apis/cut.example.com/v1").unwrap();
    let v3 = without_added(v3.value["components"]["schemas"]["com.example.cut.v1.Cut"].clone());
    assert_eq!(
        v3["properties"]["port"],
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
    );
    assert_eq!(v3["properties"]["maybe"]["nullable"], true);
    assert_eq!(
        v3["properties"]["open"]["properties"]["a"]["type"],
        "string"
    );
    assert_eq!(
        v3["properties"]["choice"],
        json!({"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]})
    );
    assert_eq!(v3["properties"]["flags"], json!({"type": "boolean"}));
    assert_eq!(v3["required"], json!(["port", "maybe"]));
}

#[test]
fn embedded_resources_get_type_and_object_meta() {
    let schema = json!({
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object"}},
            },
        },
    });
    let published = publish(kinds("embed.example.com", "Embed", &["v1"], &schema));
    let v2 = published.v2_document();
    let template = &v2.value["definitions"]["com.example.embed.v1.Embed"]["properties"]["template"];
    assert_eq!(template["required"], json!(["kind", "apiVersion"]));
    assert_eq!(template["properties"]["kind"]["type"], "string");
    assert_eq!(
        template["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(template["properties"]["spec"]["type"], "object");
}

#[test]
fn without_custom_kinds_the_built_in_documents_are_served() {
    let published = publish(Vec::new());
    assert!(Arc::ptr_eq(
        &published.v2_document(),
        &super::super::v2_document()
    ));
    assert_eq!(published.v3_root(), super::super::v3_root());
}

#[test]
fn custom_patches_offer_no_strategic_merge_patch() {
    let published = publish(kinds("foo.example.com", "Foo", &["v1"], &foo_schema()));
    let v2 = published.v2_document();
    let smp = json!("application/strategic-merge-patch+json");
    for (path, item) in v2.value["paths"].as_object().unwrap() {
        let Some(consumes) = item["patch"]["consumes"].as_array() else {
            continue;
        };
        if item["patch"]["x-kubernetes-action"] == "connect" {
            continue;
        }
        // Built-in kinds take every patch type; the custom kind (and its status) no strategic one.
        let custom = path.starts_with("/apis/foo.example.com/");
        assert_eq!(consumes.contains(&smp), !custom, "{path}: {consumes:?}");
    }
    let v3 = published.v3_document_at("apis/foo.example.com/v1").unwrap();
    let patch =
        &v3.value["paths"]["/apis/foo.example.com/v1/namespaces/{namespace}/foos/{name}"]["patch"];
    let content: Vec<&String> = patch["requestBody"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        content,
        [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json"
        ]
    );
}
