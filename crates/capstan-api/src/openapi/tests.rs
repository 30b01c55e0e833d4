use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;
use crate::catalog;

fn doc(group: &str, version: &str) -> Arc<Document> {
    v3_document(group, version).unwrap_or_else(|| panic!("no v3 document for {group}/{version}"))
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// Every group-version the catalogue serves (with the group-versions of subresource kinds).
fn served_group_versions() -> BTreeSet<(&'static str, &'static str)> {
    catalog::resources().map(|r| (r.group, r.version)).collect()
}

/// kubectl's `supportsQueryParamV3`: the first PATCH operation (in any order: Go ranges over a
/// map) whose group-version-kind is `gvk` must list `param` among its own parameters.
fn v3_supports_query_param(document: &Value, gvk: &Value, param: &str) -> bool {
    let mut seen = false;
    for item in document["paths"]
        .as_object()
        .into_iter()
        .flat_map(|p| p.values())
    {
        let Some(patch) = item.get("patch") else {
            continue;
        };
        if patch.get("x-kubernetes-group-version-kind") != Some(gvk) {
            continue;
        }
        seen = true;
        let has = patch["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == param && p["in"] == "query"));
        if !has {
            return false;
        }
    }
    seen
}

/// Every `$ref` in `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                match v {
                    Value::String(s) if k == "$ref" => out.push(s.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_v3_root_lists_every_served_group_version_with_its_hash() {
    let root = v3_root();
    let paths = root["paths"].as_object().expect("paths");
    for (group, version) in served_group_versions() {
        let path = group_version_path(group, version);
        let url = paths[&path]["serverRelativeURL"]
            .as_str()
            .expect("serverRelativeURL");
        let hash = v3_hash(group, version).expect("hash");
        assert_eq!(url, format!("/openapi/v3/{path}?hash={hash}"));
        assert_eq!(hash.len(), 128, "SHA-512 in hex");
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        );
    }
    for group in catalog::groups() {
        assert!(paths.contains_key(&format!("apis/{group}")), "apis/{group}");
    }
    for path in ["api", "apis", "version", "api/v1", "apis/apps/v1"] {
        assert!(paths.contains_key(path), "{path}");
        assert!(v3_document_at(path).is_some(), "{path}");
    }
    assert!(
        v3_document_at("/apis/apps/v1/").is_some(),
        "slashes are ignored"
    );
    assert!(v3_document("apps", "v1beta1").is_none());
    assert!(
        v3_document("autoscaling", "v2beta2").is_none(),
        "a version no longer served"
    );
    assert!(v3_document("autoscaling", "v1").is_some());
    assert!(v3_document_at("apis/nope").is_none());
}

#[test]
fn documents_are_built_once_and_hashed_over_their_bytes() {
    let a = doc("apps", "v1");
    let b = doc("apps", "v1");
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.hash, sha512_hex(&a.json));
    assert_eq!(
        serde_json::from_slice::<Value>(&a.json).expect("json"),
        a.value
    );
    assert_ne!(doc("", "v1").hash, a.hash);
    assert!(Arc::ptr_eq(&v2_document(), &v2_document()));
    assert!(Arc::ptr_eq(&v2_protobuf(), &v2_protobuf()));
}

#[test]
fn a_group_version_document_has_upstreams_shape() {
    let apps = &doc("apps", "v1").value;
    assert_eq!(apps["openapi"], "3.0.0");
    assert_eq!(apps["info"]["title"], "Kubernetes");
    assert_eq!(
        apps["components"]["securitySchemes"]["BearerToken"]["type"],
        "apiKey"
    );
    let resources = &apps["paths"]["/apis/apps/v1/"]["get"];
    assert_eq!(resources["operationId"], "getAppsV1APIResources");
    assert_eq!(
        resources["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList"
    );
    // Only apps/v1 paths.
    for path in apps["paths"].as_object().expect("paths").keys() {
        assert!(path.starts_with("/apis/apps/v1/"), "{path}");
    }
}

#[test]
fn patch_of_a_deployment_has_field_validation_and_the_patch_media_types() {
    let apps = &doc("apps", "v1").value;
    let item = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        gvk("apps", "v1", "Deployment")
    );
    assert_eq!(patch["tags"], json!(["apps_v1"]));
    let names: Vec<&str> = patch["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["dryRun", "fieldManager", "fieldValidation", "force"]
    );
    let body = patch["requestBody"]["content"]
        .as_object()
        .expect("content");
    assert_eq!(
        body.keys().collect::<Vec<_>>(),
        [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json"
        ]
    );
    assert_eq!(patch["requestBody"]["required"], true);
    assert_eq!(
        body["application/merge-patch+json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    let ok = &patch["responses"]["200"]["content"];
    for media in [
        "application/json",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
    ] {
        assert_eq!(
            ok[media]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.apps.v1.Deployment"
        );
    }
    assert_eq!(patch["responses"]["201"]["description"], "Created");
    assert_eq!(patch["responses"]["401"]["description"], "Unauthorized");
    // Path-level parameters.
    let path_params: Vec<(&str, &str)> = item["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default(),
                p["in"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        path_params,
        [("name", "path"), ("namespace", "path"), ("pretty", "query")]
    );
    assert_eq!(item["parameters"][0]["required"], true);
}

#[test]
fn kubectl_finds_server_side_field_validation_for_every_kind_in_v3() {
    for r in catalog::resources().filter(|r| r.supports("patch")) {
        let document = &doc(r.group, r.version).value;
        assert!(
            v3_supports_query_param(
                document,
                &gvk(r.group, r.version, r.kind),
                "fieldValidation"
            ),
            "{}/{} {}",
            r.group,
            r.version,
            r.kind
        );
        // kubectl looks at the PATCH operation, not at the others.
        assert!(!v3_supports_query_param(
            document,
            &gvk(r.group, r.version, r.kind),
            "watch"
        ));
    }
    // The scale subresource speaks autoscaling/v1 Scale.
    let apps = &doc("apps", "v1").value;
    assert!(v3_supports_query_param(
        apps,
        &gvk("autoscaling", "v1", "Scale"),
        "fieldValidation"
    ));
}

#[test]
fn operations_follow_upstreams_ids_actions_and_kinds() {
    let core = &doc("", "v1").value;
    let apps = &doc("apps", "v1").value;
    let op = |d: &Value, path: &str, method: &str| d["paths"][path][method].clone();
    let cases = [
        (
            core,
            "/api/v1/namespaces/{namespace}/pods",
            "get",
            "listCoreV1NamespacedPod",
            "list",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods",
            "post",
            "createCoreV1NamespacedPod",
            "post",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods",
            "delete",
            "deleteCoreV1CollectionNamespacedPod",
            "deletecollection",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}",
            "get",
            "readCoreV1NamespacedPod",
            "get",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}",
            "put",
            "replaceCoreV1NamespacedPod",
            "put",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}",
            "delete",
            "deleteCoreV1NamespacedPod",
            "delete",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
            "patch",
            "patchCoreV1NamespacedPodStatus",
            "patch",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}/binding",
            "post",
            "createCoreV1NamespacedPodBinding",
            "post",
            gvk("", "v1", "Binding"),
        ),
        (
            core,
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
            "post",
            "createCoreV1NamespacedPodEviction",
            "post",
            gvk("policy", "v1", "Eviction"),
        ),
        (
            core,
            "/api/v1/pods",
            "get",
            "listCoreV1PodForAllNamespaces",
            "list",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/watch/pods",
            "get",
            "watchCoreV1PodListForAllNamespaces",
            "watchlist",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/watch/namespaces/{namespace}/pods",
            "get",
            "watchCoreV1NamespacedPodList",
            "watchlist",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/watch/namespaces/{namespace}/pods/{name}",
            "get",
            "watchCoreV1NamespacedPod",
            "watch",
            gvk("", "v1", "Pod"),
        ),
        (
            core,
            "/api/v1/namespaces",
            "get",
            "listCoreV1Namespace",
            "list",
            gvk("", "v1", "Namespace"),
        ),
        (
            core,
            "/api/v1/namespaces/{name}/status",
            "patch",
            "patchCoreV1NamespaceStatus",
            "patch",
            gvk("", "v1", "Namespace"),
        ),
        (
            core,
            "/api/v1/nodes",
            "delete",
            "deleteCoreV1CollectionNode",
            "deletecollection",
            gvk("", "v1", "Node"),
        ),
        (
            core,
            "/api/v1/watch/nodes/{name}",
            "get",
            "watchCoreV1Node",
            "watch",
            gvk("", "v1", "Node"),
        ),
        (
            apps,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            "get",
            "readAppsV1NamespacedDeploymentScale",
            "get",
            gvk("autoscaling", "v1", "Scale"),
        ),
        (
            apps,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status",
            "put",
            "replaceAppsV1NamespacedDeploymentStatus",
            "put",
            gvk("apps", "v1", "Deployment"),
        ),
    ];
    for (document, path, method, id, action, kind) in cases {
        let operation = op(document, path, method);
        assert_eq!(operation["operationId"], id, "{method} {path}");
        assert_eq!(operation["x-kubernetes-action"], action, "{id}");
        assert_eq!(operation["x-kubernetes-group-version-kind"], kind, "{id}");
    }
    // Namespaces are not deleted as a collection, and their path has no namespace parameter.
    assert!(core["paths"]["/api/v1/namespaces"].get("delete").is_none());
    assert!(
        core["paths"]
            .get("/api/v1/namespaces/{namespace}/namespaces")
            .is_none()
    );
    let events = &doc("events.k8s.io", "v1").value;
    assert_eq!(
        events["paths"]["/apis/events.k8s.io/v1/namespaces/{namespace}/events"]["get"]["operationId"],
        "listEventsV1NamespacedEvent"
    );
    assert_eq!(
        events["paths"]["/apis/events.k8s.io/v1/events"]["get"]["tags"],
        json!(["events_v1"])
    );
    assert_eq!(
        doc("coordination.k8s.io", "v1").value["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]
            ["patch"]["operationId"],
        "patchCoordinationV1NamespacedLease"
    );
}

#[test]
fn operations_carry_the_query_parameters_of_their_verb() {
    let apps = &doc("apps", "v1").value;
    let names = |op: &Value| -> Vec<String> {
        op["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let collection = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"];
    assert_eq!(
        names(&collection["get"]),
        [
            "allowWatchBookmarks",
            "continue",
            "fieldSelector",
            "labelSelector",
            "limit",
            "resourceVersion",
            "resourceVersionMatch",
            "sendInitialEvents",
            "timeoutSeconds",
            "watch"
        ]
    );
    assert_eq!(
        names(&collection["post"]),
        ["dryRun", "fieldManager", "fieldValidation"]
    );
    assert_eq!(
        names(&collection["delete"]),
        [
            "continue",
            "dryRun",
            "fieldSelector",
            "gracePeriodSeconds",
            "labelSelector",
            "limit",
            "orphanDependents",
            "propagationPolicy",
            "resourceVersion",
            "resourceVersionMatch",
            "sendInitialEvents",
            "timeoutSeconds"
        ]
    );
    let object = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    assert_eq!(
        names(&object["put"]),
        ["dryRun", "fieldManager", "fieldValidation"]
    );
    assert_eq!(
        names(&object["delete"]),
        [
            "dryRun",
            "gracePeriodSeconds",
            "orphanDependents",
            "propagationPolicy"
        ]
    );
    assert!(object["get"].get("parameters").is_none());
    // The list across namespaces and the watch paths carry theirs on the path.
    let all = &apps["paths"]["/apis/apps/v1/deployments"];
    assert!(all["get"].get("parameters").is_none());
    assert!(names(all).contains(&"labelSelector".to_owned()));
    let watch = &apps["paths"]["/apis/apps/v1/watch/namespaces/{namespace}/deployments/{name}"];
    for p in ["watch", "name", "namespace", "pretty", "resourceVersion"] {
        assert!(names(watch).contains(&p.to_owned()), "{p}");
    }
    // Streaming media types on list and watch, a body on create and delete.
    let list_content = &collection["get"]["responses"]["200"]["content"];
    assert_eq!(
        list_content["application/json;stream=watch"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.DeploymentList"
    );
    assert_eq!(
        watch["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"
    );
    assert_eq!(
        collection["post"]["requestBody"]["content"]["*/*"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    );
    assert_eq!(
        collection["post"]["responses"]
            .as_object()
            .map(|r| r.keys().cloned().collect::<Vec<_>>()),
        Some(vec![
            "200".to_owned(),
            "201".into(),
            "202".into(),
            "401".into()
        ])
    );
    assert_eq!(
        object["delete"]["requestBody"]["content"]["*/*"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
    );
}

#[test]
fn definitions_carry_group_version_kinds() {
    let apps = &doc("apps", "v1").value;
    let schemas = &apps["components"]["schemas"];
    let deployment = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([gvk("apps", "v1", "Deployment")])
    );
    assert_eq!(
        deployment["description"],
        "Deployment enables declarative updates for Pods and ReplicaSets."
    );
    let list = &schemas["io.k8s.api.apps.v1.DeploymentList"];
    assert_eq!(
        list["x-kubernetes-group-version-kind"],
        json!([gvk("apps", "v1", "DeploymentList")])
    );
    assert_eq!(list["required"], json!(["items"]));
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    );
    let delete_options = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]
        ["x-kubernetes-group-version-kind"]
        .as_array()
        .expect("gvks");
    for (group, version) in served_group_versions() {
        assert!(
            delete_options.contains(&gvk(group, version, "DeleteOptions")),
            "{group}/{version}"
        );
    }
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.Status"]["x-kubernetes-group-version-kind"],
        json!([gvk("", "v1", "Status")])
    );
    // Nested types have no kind.
    assert!(
        schemas["io.k8s.api.apps.v1.DeploymentSpec"]
            .get("x-kubernetes-group-version-kind")
            .is_none()
    );
}

#[test]
fn every_catalogue_kind_has_a_definition_and_paths() {
    for r in catalog::resources() {
        let document = &doc(r.group, r.version).value;
        let schemas = &document["components"]["schemas"];
        let with_kind = |kind: &str| {
            schemas
                .as_object()
                .into_iter()
                .flat_map(|s| s.values())
                .any(|s| {
                    s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|g| g.contains(&gvk(r.group, r.version, kind)))
                })
        };
        assert!(with_kind(r.kind), "{}", r.kind);
        // Reviews (create only) have no list kind.
        assert!(
            with_kind(&r.list_kind()) || !r.supports("list"),
            "{}",
            r.list_kind()
        );
        let prefix = if r.group.is_empty() {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{}/{}", r.group, r.version)
        };
        let collection = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        assert!(document["paths"].get(&collection).is_some(), "{collection}");
        // Every subresource, stored or streamed from the node, has a path with an operation
        // per verb (a streamed one whose options kind has no parameters would have none).
        for sub in r.subresources {
            let path = format!("{collection}/{{name}}/{}", sub.name);
            let item = &document["paths"][&path];
            assert!(item.is_object(), "{path}");
            let (group, version) = sub.group_version.unwrap_or((r.group, r.version));
            for verb in sub.verbs {
                let method = match *verb {
                    "get" => "get",
                    "update" => "put",
                    "patch" => "patch",
                    "create" => "post",
                    "delete" => "delete",
                    other => panic!("unexpected verb {other}"),
                };
                let operation = &item[method];
                assert_eq!(
                    operation["x-kubernetes-group-version-kind"],
                    gvk(group, version, sub.kind),
                    "{path}"
                );
                // The action of a stored subresource's operation is its method's name.
                let action = match sub.stream() {
                    Some(catalog::Stream::Connect | catalog::Stream::Proxy) => "connect",
                    _ => method,
                };
                assert_eq!(operation["x-kubernetes-action"], action, "{method} {path}");
            }
        }
    }
}

#[test]
fn kubectl_explain_finds_every_kind_through_its_resource_path() {
    // As kubectl's explain template: the GVK of an operation at the resource's path, then the
    // definition listing that GVK.
    for r in catalog::resources() {
        let document = &doc(r.group, r.version).value;
        let prefix = if r.group.is_empty() {
            "/api".to_owned()
        } else {
            format!("/apis/{}", r.group)
        };
        let candidates = [
            format!("{prefix}/{}/{}", r.version, r.plural),
            format!("{prefix}/{}/{}/{{name}}", r.version, r.plural),
            format!(
                "{prefix}/{}/namespaces/{{namespace}}/{}",
                r.version, r.plural
            ),
            format!(
                "{prefix}/{}/namespaces/{{namespace}}/{}/{{name}}",
                r.version, r.plural
            ),
        ];
        let found = candidates.iter().find_map(|path| {
            let item = document["paths"].get(path)?;
            ["get", "post", "put", "patch", "delete"]
                .iter()
                .find_map(|m| {
                    item.get(*m)?
                        .get("x-kubernetes-group-version-kind")
                        .cloned()
                })
        });
        let found = found.unwrap_or_else(|| panic!("no GVK for {}", r.plural));
        assert_eq!(found, gvk(r.group, r.version, r.kind));
        let schema = document["components"]["schemas"]
            .as_object()
            .and_then(|s| {
                s.values().find(|s| {
                    s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|g| g.contains(&found))
                })
            })
            .unwrap_or_else(|| panic!("no schema for {found}"));
        assert!(schema["properties"]["metadata"].is_object(), "{}", r.kind);
        assert!(
            schema["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{}",
            r.kind
        );
    }
}

#[test]
fn v3_wraps_references_with_siblings_in_all_of_and_metadata_is_optional() {
    let apps = &doc("apps", "v1").value;
    let schemas = &apps["components"]["schemas"];
    let metadata = &schemas["io.k8s.api.apps.v1.Deployment"]["properties"]["metadata"];
    assert_eq!(
        metadata["allOf"],
        json!([{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}])
    );
    assert!(
        metadata["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Standard object's metadata"))
    );
    assert!(
        schemas["io.k8s.api.apps.v1.Deployment"]
            .get("required")
            .is_none()
    );
    // A required field other than metadata stays required.
    let core = &doc("", "v1").value;
    assert_eq!(
        core["components"]["schemas"]["io.k8s.api.core.v1.Binding"]["required"],
        json!(["target"])
    );
    assert_eq!(
        core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["required"],
        json!(["containers"])
    );
}

#[test]
fn every_reference_resolves_and_no_definition_is_unused() {
    let root = v3_root();
    for path in root["paths"].as_object().expect("paths").keys() {
        let document = &v3_document_at(path).expect("document").value;
        let schemas = document["components"]["schemas"]
            .as_object()
            .expect("schemas");
        let mut found = Vec::new();
        refs(document, &mut found);
        assert!(!found.is_empty(), "{path}");
        for reference in &found {
            let name = reference
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{path}: {reference}"));
            assert!(schemas.contains_key(name), "{path}: {reference}");
        }
        let used: BTreeSet<&str> = found.iter().filter_map(|r| r.rsplit('/').next()).collect();
        for name in schemas.keys() {
            assert!(used.contains(name.as_str()), "{path}: {name} is unused");
        }
    }
    let v2 = &v2_document().value;
    let definitions = v2["definitions"].as_object().expect("definitions");
    let mut found = Vec::new();
    refs(v2, &mut found);
    for reference in &found {
        let name = reference
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("{reference}"));
        assert!(definitions.contains_key(name), "{reference}");
    }
}

#[test]
fn the_v2_document_has_every_path_and_kubectl_finds_field_validation() {
    let v2 = &v2_document().value;
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(v2["info"]["version"], crate::kubernetes_version());
    let paths = v2["paths"].as_object().expect("paths");
    for path in v3_root()["paths"].as_object().expect("paths").keys() {
        for v3_path in v3_document_at(path).expect("document").value["paths"]
            .as_object()
            .expect("paths")
            .keys()
        {
            assert!(paths.contains_key(v3_path), "{v3_path}");
        }
    }
    // Operation ids are unique over the whole API.
    let mut ids = BTreeSet::new();
    for item in paths.values() {
        for method in ["get", "put", "post", "delete", "patch"] {
            if let Some(id) = item.get(method).and_then(|op| op["operationId"].as_str()) {
                assert!(ids.insert(id.to_owned()), "{id} twice");
            }
        }
    }
    let patch = &paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(
        patch["consumes"],
        json!([
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json"
        ])
    );
    assert_eq!(
        patch["parameters"][0],
        json!({
            "in": "body", "name": "body", "required": true,
            "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}
        })
    );
    assert_eq!(
        patch["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.apps.v1.Deployment"
    );
    assert_eq!(patch["schemes"], json!(["https"]));
    // kubectl's v2 `supportsQueryParam`, for every kind.
    for r in catalog::resources().filter(|r| r.supports("patch")) {
        let kind = gvk(r.group, r.version, r.kind);
        let op = paths
            .values()
            .filter_map(|item| item.get("patch"))
            .find(|op| op["x-kubernetes-group-version-kind"] == kind)
            .unwrap_or_else(|| panic!("no PATCH for {kind}"));
        assert!(
            op["parameters"].as_array().is_some_and(|ps| ps
                .iter()
                .any(|p| p["name"] == "fieldValidation"
                    && p["in"] == "query"
                    && p["type"] == "string")),
            "{kind}"
        );
    }
    // v2 keeps a reference's siblings beside it.
    let metadata = &v2["definitions"]["io.k8s.api.apps.v1.Deployment"]["properties"]["metadata"];
    assert_eq!(
        metadata["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(metadata["description"].is_string());
}

/// A parameter's name, `in` and type, as upstream's published documents of 1.33 have the
/// path-level parameters of the pod subresources served by the node.
type Shape = (&'static str, &'static str, &'static str);

const ATTACH_PARAMS: &[Shape] = &[
    ("container", "query", "string"),
    ("name", "path", "string"),
    ("namespace", "path", "string"),
    ("stderr", "query", "boolean"),
    ("stdin", "query", "boolean"),
    ("stdout", "query", "boolean"),
    ("tty", "query", "boolean"),
];

const EXEC_PARAMS: &[Shape] = &[
    ("command", "query", "string"),
    ("container", "query", "string"),
    ("name", "path", "string"),
    ("namespace", "path", "string"),
    ("stderr", "query", "boolean"),
    ("stdin", "query", "boolean"),
    ("stdout", "query", "boolean"),
    ("tty", "query", "boolean"),
];

const PORTFORWARD_PARAMS: &[Shape] = &[
    ("name", "path", "string"),
    ("namespace", "path", "string"),
    ("ports", "query", "integer"),
];

const LOG_PARAMS: &[Shape] = &[
    ("container", "query", "string"),
    ("follow", "query", "boolean"),
    ("insecureSkipTLSVerifyBackend", "query", "boolean"),
    ("limitBytes", "query", "integer"),
    ("name", "path", "string"),
    ("namespace", "path", "string"),
    ("pretty", "query", "string"),
    ("previous", "query", "boolean"),
    ("sinceSeconds", "query", "integer"),
    ("stream", "query", "string"),
    ("tailLines", "query", "integer"),
    ("timestamps", "query", "boolean"),
];

/// The connecters: subresource, options kind, path-level parameters, operation ids of `GET` and
/// `POST`.
const CONNECTERS: [(&str, &str, &[Shape], [&str; 2]); 3] = [
    (
        "attach",
        "PodAttachOptions",
        ATTACH_PARAMS,
        [
            "connectCoreV1GetNamespacedPodAttach",
            "connectCoreV1PostNamespacedPodAttach",
        ],
    ),
    (
        "exec",
        "PodExecOptions",
        EXEC_PARAMS,
        [
            "connectCoreV1GetNamespacedPodExec",
            "connectCoreV1PostNamespacedPodExec",
        ],
    ),
    (
        "portforward",
        "PodPortForwardOptions",
        PORTFORWARD_PARAMS,
        [
            "connectCoreV1GetNamespacedPodPortforward",
            "connectCoreV1PostNamespacedPodPortforward",
        ],
    ),
];

/// The name, `in` and type of each of `params` (the type under `schema` in v3), checking that
/// exactly the path parameters are required, that each is described, and upstream's
/// `uniqueItems`.
fn shapes(params: &Value, v3: bool) -> Vec<(String, String, String)> {
    params
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| {
            let location = p["in"].as_str().unwrap_or_default();
            assert_eq!(
                p.get("required").and_then(Value::as_bool),
                (location == "path").then_some(true),
                "{p}"
            );
            assert!(
                p["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{p}"
            );
            let holder = if v3 { &p["schema"] } else { p };
            assert_eq!(holder["uniqueItems"], true, "{p}");
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                location.to_owned(),
                holder["type"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn owned(shapes: &[Shape]) -> Vec<(String, String, String)> {
    shapes
        .iter()
        .map(|(n, i, t)| ((*n).to_owned(), (*i).to_owned(), (*t).to_owned()))
        .collect()
}

/// The methods of a path item.
fn methods(item: &Value) -> Vec<&str> {
    item.as_object()
        .expect("path item")
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "parameters")
        .collect()
}

#[test]
fn pod_connecters_have_upstreams_connect_operations_in_v3() {
    let core = &doc("", "v1").value;
    for (sub, kind, params, ids) in CONNECTERS {
        let path = format!("/api/v1/namespaces/{{namespace}}/pods/{{name}}/{sub}");
        let item = &core["paths"][&path];
        assert_eq!(shapes(&item["parameters"], true), owned(params), "{path}");
        let name = item["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "name"))
            .expect("name");
        assert_eq!(name["description"], format!("name of the {kind}"));
        assert_eq!(methods(item), ["get", "post"], "{path}");
        for (method, id) in ["get", "post"].into_iter().zip(ids) {
            let op = &item[method];
            assert_eq!(op["operationId"], id, "{method} {path}");
            assert_eq!(op["tags"], json!(["core_v1"]), "{id}");
            assert_eq!(op["x-kubernetes-action"], "connect", "{id}");
            assert_eq!(op["x-kubernetes-group-version-kind"], gvk("", "v1", kind));
            assert!(
                op["description"]
                    .as_str()
                    .is_some_and(|d| d.contains(sub) && d.contains(&method.to_uppercase())),
                "{id}: {}",
                op["description"]
            );
            // The options are the path's parameters; nothing is sent in a body.
            assert!(op.get("parameters").is_none(), "{id}");
            assert!(op.get("requestBody").is_none(), "{id}");
            assert_eq!(
                op["responses"],
                json!({
                    "200": {"content": {"*/*": {"schema": {"type": "string"}}}, "description": "OK"},
                    "401": {"description": "Unauthorized"}
                }),
                "{id}"
            );
        }
    }
}

#[test]
fn pod_log_has_upstreams_parameters_and_media_types_in_v3() {
    let core = &doc("", "v1").value;
    let item = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/log"];
    assert_eq!(shapes(&item["parameters"], true), owned(LOG_PARAMS));
    assert_eq!(methods(item), ["get"]);
    let op = &item["get"];
    assert_eq!(op["operationId"], "readCoreV1NamespacedPodLog");
    assert_eq!(op["tags"], json!(["core_v1"]));
    assert_eq!(op["x-kubernetes-action"], "get");
    assert_eq!(op["x-kubernetes-group-version-kind"], gvk("", "v1", "Pod"));
    assert!(op.get("parameters").is_none());
    let string = json!({"schema": {"type": "string"}});
    assert_eq!(
        op["responses"]["200"]["content"],
        json!({
            "application/json": string,
            "application/vnd.kubernetes.protobuf": string,
            "application/yaml": string,
            "text/plain": string,
        })
    );
    assert_eq!(
        op["responses"]["401"],
        json!({"description": "Unauthorized"})
    );
}

#[test]
fn the_v2_document_has_the_pod_log_and_connect_operations_in_swagger_form() {
    let v2 = &v2_document().value;
    let paths = &v2["paths"];
    let string = json!({"description": "OK", "schema": {"type": "string"}});
    for (sub, kind, params, ids) in CONNECTERS {
        let path = format!("/api/v1/namespaces/{{namespace}}/pods/{{name}}/{sub}");
        let item = &paths[&path];
        assert_eq!(shapes(&item["parameters"], false), owned(params), "{path}");
        for (method, id) in ["get", "post"].into_iter().zip(ids) {
            let op = &item[method];
            assert_eq!(op["operationId"], id);
            assert_eq!(op["consumes"], json!(["*/*"]), "{id}");
            assert_eq!(op["produces"], json!(["*/*"]), "{id}");
            assert_eq!(op["schemes"], json!(["https"]), "{id}");
            assert_eq!(op["tags"], json!(["core_v1"]), "{id}");
            assert_eq!(op["x-kubernetes-action"], "connect", "{id}");
            assert_eq!(op["x-kubernetes-group-version-kind"], gvk("", "v1", kind));
            assert!(op.get("parameters").is_none(), "{id}");
            assert_eq!(op["responses"]["200"], string, "{id}");
        }
    }
    let item = &paths["/api/v1/namespaces/{namespace}/pods/{name}/log"];
    assert_eq!(shapes(&item["parameters"], false), owned(LOG_PARAMS));
    let log = &item["get"];
    assert_eq!(log["operationId"], "readCoreV1NamespacedPodLog");
    assert_eq!(log["consumes"], json!(["*/*"]));
    // In upstream's order: a client that picks the first gets the plain text.
    assert_eq!(
        log["produces"],
        json!([
            "text/plain",
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf"
        ])
    );
    assert_eq!(log["responses"]["200"], string);
    assert_eq!(log["x-kubernetes-action"], "get");
}

#[test]
fn proxy_subresources_have_upstreams_two_paths_and_seven_methods() {
    let v2 = &v2_document().value;
    let v3 = &doc("", "v1").value;
    let string = json!({"description": "OK", "schema": {"type": "string"}});
    let namespace = ("namespace", "path", "string");
    for (object, rest, kind, namespaced) in [
        (
            "/api/v1/namespaces/{namespace}/pods/{name}",
            "NamespacedPodProxy",
            "PodProxyOptions",
            true,
        ),
        (
            "/api/v1/namespaces/{namespace}/services/{name}",
            "NamespacedServiceProxy",
            "ServiceProxyOptions",
            true,
        ),
        (
            "/api/v1/nodes/{name}",
            "NodeProxy",
            "NodeProxyOptions",
            false,
        ),
    ] {
        for with_path in [false, true] {
            let (path, rest) = if with_path {
                (
                    format!("{object}/proxy/{{path}}"),
                    format!("{rest}WithPath"),
                )
            } else {
                (format!("{object}/proxy"), rest.to_owned())
            };
            let mut expected = vec![("name", "path", "string")];
            expected.extend(namespaced.then_some(namespace));
            expected.extend(with_path.then_some(("path", "path", "string")));
            expected.push(("path", "query", "string"));
            let item = &v2["paths"][&path];
            assert_eq!(
                shapes(&item["parameters"], false),
                owned(&expected),
                "{path}"
            );
            assert_eq!(
                methods(item),
                ["delete", "get", "head", "options", "patch", "post", "put"],
                "{path}"
            );
            for method in methods(item) {
                let op = &item[method];
                let id = format!(
                    "connectCoreV1{}{rest}",
                    super::operations::to_operation_id(method, true)
                );
                assert_eq!(op["operationId"], id, "{method} {path}");
                assert_eq!(op["consumes"], json!(["*/*"]), "{id}");
                assert_eq!(op["produces"], json!(["*/*"]), "{id}");
                assert_eq!(op["x-kubernetes-action"], "connect", "{id}");
                assert_eq!(op["x-kubernetes-group-version-kind"], gvk("", "v1", kind));
                assert!(op.get("parameters").is_none(), "{id}");
                assert_eq!(op["responses"]["200"], string, "{id}");
            }
            let item = &v3["paths"][&path];
            assert_eq!(
                shapes(&item["parameters"], true),
                owned(&expected),
                "{path}"
            );
            assert_eq!(methods(item).len(), 7, "{path}");
        }
    }
}

/// A protobuf field's value: a number (whose value these tests do not need) or bytes.
#[derive(Debug)]
enum Field<'a> {
    Number,
    Bytes(&'a [u8]),
}

/// Splits one protobuf message into its fields.
fn fields(mut bytes: &[u8]) -> Vec<(u32, Field<'_>)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first().expect("truncated varint");
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes);
        let field = (key >> 3) as u32;
        match key & 7 {
            0 => {
                varint(&mut bytes);
                out.push((field, Field::Number));
            }
            1 => {
                bytes = &bytes[8..];
                out.push((field, Field::Number));
            }
            2 => {
                let len = varint(&mut bytes) as usize;
                out.push((field, Field::Bytes(&bytes[..len])));
                bytes = &bytes[len..];
            }
            other => panic!("wire type {other}"),
        }
    }
    out
}

fn bytes_of(message: &[u8], number: u32) -> Vec<&[u8]> {
    fields(message)
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if n == number => Some(b),
            _ => None,
        })
        .collect()
}

fn string_of(message: &[u8], number: u32) -> String {
    bytes_of(message, number)
        .first()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

#[test]
fn the_v2_protobuf_decodes_as_gnostics_document() {
    let pb = v2_protobuf();
    let v2 = &v2_document().value;
    assert_eq!(string_of(&pb, 1), "2.0");
    let info = bytes_of(&pb, 2)[0];
    assert_eq!(string_of(info, 1), "Kubernetes");
    // Paths (8) > NamedPathItem (2) > PathItem (2) > patch (8) > vendor extension (13) and
    // parameters (8) > Parameter (1) > NonBodyParameter (2) > QueryParameterSubSchema (3) > name (4).
    let paths = bytes_of(&pb, 8)[0];
    let named = bytes_of(paths, 2);
    assert_eq!(named.len(), v2["paths"].as_object().map_or(0, |p| p.len()));
    let deployment = named
        .iter()
        .find(|n| string_of(n, 1) == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        .expect("deployment path");
    let item = bytes_of(deployment, 2)[0];
    let patch = bytes_of(item, 8)[0];
    assert_eq!(string_of(patch, 5), "patchAppsV1NamespacedDeployment");
    let extensions: Vec<(String, String)> = bytes_of(patch, 13)
        .iter()
        .map(|named| (string_of(named, 1), string_of(bytes_of(named, 2)[0], 2)))
        .collect();
    let (_, yaml) = extensions
        .iter()
        .find(|(name, _)| name == "x-kubernetes-group-version-kind")
        .expect("gvk extension");
    assert_eq!(
        serde_json::from_str::<Value>(yaml).expect("yaml is json"),
        gvk("apps", "v1", "Deployment")
    );
    let query_names: Vec<String> = bytes_of(patch, 8)
        .iter()
        .flat_map(|item| bytes_of(item, 1))
        .flat_map(|param| bytes_of(param, 2))
        .flat_map(|non_body| bytes_of(non_body, 3))
        .map(|query| string_of(query, 4))
        .collect();
    assert_eq!(
        query_names,
        ["dryRun", "fieldManager", "fieldValidation", "force"]
    );
    let body = bytes_of(patch, 8)
        .iter()
        .flat_map(|item| bytes_of(item, 1))
        .flat_map(|param| bytes_of(param, 1))
        .next()
        .expect("body parameter");
    assert_eq!(
        string_of(bytes_of(body, 5)[0], 1),
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    // Definitions (9) > NamedSchema (1): every definition, with Deployment's properties (25).
    let definitions = bytes_of(bytes_of(&pb, 9)[0], 1);
    assert_eq!(
        definitions.len(),
        v2["definitions"].as_object().map_or(0, |d| d.len())
    );
    let deployment = definitions
        .iter()
        .find(|n| string_of(n, 1) == "io.k8s.api.apps.v1.Deployment")
        .expect("Deployment");
    let schema = bytes_of(deployment, 2)[0];
    let types: Vec<String> = bytes_of(schema, 22)
        .iter()
        .map(|t| string_of(t, 1))
        .collect();
    assert_eq!(types, ["object"]);
    let properties: Vec<String> = bytes_of(bytes_of(schema, 25)[0], 1)
        .iter()
        .map(|p| string_of(p, 1))
        .collect();
    assert_eq!(
        properties,
        ["apiVersion", "kind", "metadata", "spec", "status"]
    );
}

#[test]
fn the_v2_protobuf_carries_the_connect_paths_parameters_and_string_responses() {
    let pb = v2_protobuf();
    let paths = bytes_of(&pb, 8)[0];
    let exec = bytes_of(paths, 2)
        .into_iter()
        .find(|n| string_of(n, 1) == "/api/v1/namespaces/{namespace}/pods/{name}/exec")
        .expect("exec path");
    let item = bytes_of(exec, 2)[0];
    // PathItem: get (2), post (4), parameters (9).
    assert_eq!(
        string_of(bytes_of(item, 2)[0], 5),
        "connectCoreV1GetNamespacedPodExec"
    );
    assert_eq!(
        string_of(bytes_of(item, 4)[0], 5),
        "connectCoreV1PostNamespacedPodExec"
    );
    // ParametersItem (9) > Parameter (1) > NonBodyParameter (2) > query (3) or path (4) > name (4).
    let non_body: Vec<&[u8]> = bytes_of(item, 9)
        .into_iter()
        .flat_map(|p| bytes_of(p, 1))
        .flat_map(|p| bytes_of(p, 2))
        .collect();
    let named = |kind: u32| -> Vec<String> {
        non_body
            .iter()
            .flat_map(|n| bytes_of(n, kind))
            .map(|p| string_of(p, 4))
            .collect()
    };
    assert_eq!(
        named(3),
        ["command", "container", "stderr", "stdin", "stdout", "tty"]
    );
    assert_eq!(named(4), ["name", "namespace"]);
    // get > Responses (9) > NamedResponseValue (1) "200" > ResponseValue (2) > Response (1) >
    // SchemaItem (2) > Schema (1) > TypeItem (22) > value (1).
    let get = bytes_of(item, 2)[0];
    let ok = bytes_of(bytes_of(get, 9)[0], 1)
        .into_iter()
        .find(|r| string_of(r, 1) == "200")
        .expect("200");
    let response = bytes_of(bytes_of(ok, 2)[0], 1)[0];
    let schema = bytes_of(bytes_of(response, 2)[0], 1)[0];
    assert_eq!(string_of(bytes_of(schema, 22)[0], 1), "string");
    // produces (6) and consumes (7).
    assert_eq!(string_of(get, 6), "*/*");
    assert_eq!(string_of(get, 7), "*/*");
}

#[test]
fn build_cost_is_reported() {
    let stats = stats();
    assert_eq!(
        stats.v3_documents,
        v3_root()["paths"].as_object().map_or(0, |p| p.len())
    );
    assert!(stats.v2_definitions > 200, "{stats:?}");
    assert!(
        stats.v2_bytes > 500_000 && stats.v2_protobuf_bytes > 500_000,
        "{stats:?}"
    );
    assert_eq!(stats.v3_largest.0, "api/v1");
    println!(
        "openapi build: {:?}; v3: {} documents, {} bytes (largest {} at {} bytes); v2: {} bytes JSON, {} bytes protobuf, {} definitions",
        stats.build_time,
        stats.v3_documents,
        stats.v3_bytes,
        stats.v3_largest.0,
        stats.v3_largest.1,
        stats.v2_bytes,
        stats.v2_protobuf_bytes,
        stats.v2_definitions
    );
}
