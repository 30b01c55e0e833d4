//! Strategic merge patch, case by case: each case is an object, a patch (most of them shaped as
//! kubectl sends them) and the object kube-apiserver makes of them, or the error it answers.

use serde_json::{Value, json};

use super::metadata::{FIELD_PATCHES, PatchStrategy};
use super::*;

type Kind = (&'static str, &'static str, &'static str);

/// A case: its name, the patch, and how the patch changes the original.
type Case = (&'static str, Value, fn(&mut Value));

const POD: Kind = ("", "v1", "Pod");
const DEPLOYMENT: Kind = ("apps", "v1", "Deployment");

fn meta(kind: Kind) -> PatchMeta<'static> {
    for_kind(kind.0, kind.1, kind.2).expect("a served kind")
}

/// Applies `patch` to `original` (of `kind`) and expects `expected`.
fn check(kind: Kind, original: &Value, patch: &Value, expected: &Value) {
    match apply(original, patch, meta(kind)) {
        Ok(patched) => assert_eq!(&patched, expected, "patch: {patch}"),
        Err(error) => panic!("patch {patch} failed: {error}"),
    }
}

/// Applies `patch` to `original` (of `kind`) and expects upstream's error, by status code and
/// message.
fn check_error(kind: Kind, original: &Value, patch: &Value, code: u16, message: &str) {
    match apply(original, patch, meta(kind)) {
        Ok(patched) => panic!("patch {patch} applied, giving {patched}"),
        Err(error) => {
            assert_eq!(error.to_string(), message, "patch: {patch}");
            assert_eq!(error.code(), code, "patch: {patch}");
        }
    }
}

/// `value` changed by `edit`.
fn edited(value: &Value, edit: fn(&mut Value)) -> Value {
    let mut value = value.clone();
    edit(&mut value);
    value
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "0b4c6f0e-1111-2222-3333-444455556666",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"team": "a"},
            "finalizers": ["example.com/a", "example.com/b"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                 "uid": "u-1", "controller": true}]
        },
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx:1.24",
                 "ports": [{"containerPort": 80, "protocol": "TCP"},
                           {"containerPort": 443, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "3600"]}
            ],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "config", "configMap": {"name": "web-config"}}],
            "nodeSelector": {"disk": "ssd", "zone": "a"},
            "tolerations": [{"key": "k", "operator": "Exists"}]
        },
        "status": {"phase": "Running"}
    })
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "generation": 4,
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"deployment.kubernetes.io/revision": "3"}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": "nginx:1.24",
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "busybox:1.36"}
                ]}
            }
        },
        "status": {"replicas": 3, "readyReplicas": 3}
    })
}

#[test]
fn lists_of_objects_merge_by_their_merge_key() {
    let cases: &[Case] = &[
        (
            "containers by name",
            json!({"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]}}),
            |pod| pod["spec"]["containers"][1]["image"] = json!("busybox:1.37"),
        ),
        (
            "env by name: one changed, one added after the server's items",
            json!({"spec": {"containers": [{"name": "app",
                "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}),
            |pod| {
                pod["spec"]["containers"][0]["env"] = json!([
                    {"name": "A", "value": "1"}, {"name": "B", "value": "3"},
                    {"name": "C", "value": "4"}]);
            },
        ),
        (
            "ports by containerPort",
            json!({"spec": {"containers": [{"name": "app",
                "ports": [{"containerPort": 443, "name": "https"}]}]}}),
            |pod| pod["spec"]["containers"][0]["ports"][1]["name"] = json!("https"),
        ),
        (
            "volumeMounts by mountPath",
            json!({"spec": {"containers": [{"name": "app",
                "volumeMounts": [{"mountPath": "/data", "readOnly": true}]}]}}),
            |pod| pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = json!(true),
        ),
        (
            "volumes by name",
            json!({"spec": {"volumes": [{"name": "config", "configMap": {"name": "web-config-2"}}]}}),
            |pod| pod["spec"]["volumes"][1]["configMap"]["name"] = json!("web-config-2"),
        ),
        (
            "ownerReferences by uid; an item the server has no place for goes first",
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-2"}]}}),
            |pod| {
                pod["metadata"]["ownerReferences"] = json!([
                    {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-2"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u-1",
                     "controller": true}]);
            },
        ),
        (
            "a new container goes first without $setElementOrder, and keeps its nulls",
            json!({"spec": {"containers": [{"name": "debug", "image": "busybox", "command": null}]}}),
            |pod| {
                let containers = pod["spec"]["containers"].as_array_mut().unwrap();
                containers.insert(
                    0,
                    json!({"name": "debug", "image": "busybox", "command": null}),
                );
            },
        ),
        (
            "$patch: delete removes the item with that key",
            json!({"spec": {"containers": [{"name": "app", "env": [{"$patch": "delete", "name": "A"}]}]}}),
            |pod| pod["spec"]["containers"][0]["env"] = json!([{"name": "B", "value": "2"}]),
        ),
        (
            "$patch: delete of an item the server lacks changes nothing",
            json!({"spec": {"volumes": [{"$patch": "delete", "name": "cache"}]}}),
            |_| {},
        ),
        (
            "$patch: replace makes the other items the whole list",
            json!({"spec": {"containers": [{"name": "app",
                "ports": [{"$patch": "replace"}, {"containerPort": 8080}]}]}}),
            |pod| pod["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080}]),
        ),
    ];
    let original = pod();
    for (name, patch, edit) in cases {
        eprintln!("case: {name}");
        check(POD, &original, patch, &edited(&original, *edit));
    }
}

#[test]
fn maps_merge_key_by_key_and_other_lists_are_replaced() {
    let cases: &[Case] = &[
        (
            "null removes a key, and a field",
            json!({"metadata": {"labels": {"tier": null, "track": "stable"}},
                   "spec": {"nodeSelector": null}}),
            |pod| {
                pod["metadata"]["labels"] = json!({"app": "web", "track": "stable"});
                pod["spec"].as_object_mut().unwrap().remove("nodeSelector");
            },
        ),
        (
            "null for a key the object lacks is dropped",
            json!({"metadata": {"labels": {"missing": null}}}),
            |_| {},
        ),
        (
            "a new object loses its null fields",
            json!({"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": null}}}),
            |pod| pod["spec"]["securityContext"] = json!({"runAsUser": 1000}),
        ),
        (
            "$patch: replace replaces a map",
            json!({"spec": {"nodeSelector": {"$patch": "replace", "disk": "hdd"}}}),
            |pod| pod["spec"]["nodeSelector"] = json!({"disk": "hdd"}),
        ),
        (
            "$patch: delete empties a map (upstream keeps it, empty)",
            json!({"spec": {"nodeSelector": {"$patch": "delete"}}}),
            |pod| pod["spec"]["nodeSelector"] = json!({}),
        ),
        (
            "a map with a $patch directive is dropped where the object has no such field",
            json!({"spec": {"affinity": {"$patch": "replace", "nodeAffinity": {}}}}),
            |_| {},
        ),
        (
            "lists without a strategy are replaced whole",
            json!({"spec": {"tolerations": [{"key": "other", "operator": "Exists"}],
                   "containers": [{"name": "sidecar", "args": ["sleep", "10"]}]}}),
            |pod| {
                pod["spec"]["tolerations"] = json!([{"key": "other", "operator": "Exists"}]);
                pod["spec"]["containers"][1]["args"] = json!(["sleep", "10"]);
            },
        ),
        (
            "a value of another type replaces the field",
            json!({"spec": {"nodeSelector": "none"}}),
            |pod| pod["spec"]["nodeSelector"] = json!("none"),
        ),
        ("an empty patch changes nothing", json!({}), |_| {}),
    ];
    let original = pod();
    for (name, patch, edit) in cases {
        eprintln!("case: {name}");
        check(POD, &original, patch, &edited(&original, *edit));
    }
    check(POD, &original, &Value::Null, &original);
}

#[test]
fn lists_of_scalars_with_the_merge_strategy_are_unioned() {
    let cases: &[Case] = &[
        (
            "finalizers: union, server items first when the patch names them in order",
            json!({"metadata": {"finalizers": ["example.com/b", "example.com/c"]}}),
            |pod| {
                pod["metadata"]["finalizers"] =
                    json!(["example.com/a", "example.com/b", "example.com/c"]);
            },
        ),
        (
            "$deleteFromPrimitiveList removes finalizers",
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}}),
            |pod| pod["metadata"]["finalizers"] = json!(["example.com/b"]),
        ),
        (
            "$deleteFromPrimitiveList of an absent list adds nothing",
            json!({"spec": {"containers": [{"name": "app",
                "$deleteFromPrimitiveList/command": ["sh"]}]}}),
            |_| {},
        ),
        (
            "$setElementOrder with a deletion list, as kubectl apply sends them",
            json!({"metadata": {
                "$setElementOrder/finalizers": ["example.com/c", "example.com/b"],
                "$deleteFromPrimitiveList/finalizers": ["example.com/a"],
                "finalizers": ["example.com/c"]}}),
            |pod| pod["metadata"]["finalizers"] = json!(["example.com/c", "example.com/b"]),
        ),
    ];
    let original = pod();
    for (name, patch, edit) in cases {
        eprintln!("case: {name}");
        check(POD, &original, patch, &edited(&original, *edit));
    }
}

#[test]
fn set_element_order_orders_merged_lists() {
    let mut three = pod();
    three["spec"]["containers"] = json!([
        {"name": "app", "image": "nginx:1.24"},
        {"name": "istio-proxy", "image": "proxy:1"},
        {"name": "sidecar", "image": "busybox:1.36"}
    ]);
    let cases: &[(&str, Value, Value)] = &[
        (
            "reorder only",
            json!({"spec": {"$setElementOrder/containers": [{"name": "istio-proxy"},
                {"name": "sidecar"}, {"name": "app"}]}}),
            json!([{"name": "istio-proxy", "image": "proxy:1"},
                   {"name": "sidecar", "image": "busybox:1.36"},
                   {"name": "app", "image": "nginx:1.24"}]),
        ),
        (
            "a new item lands where the order puts it",
            json!({"spec": {"$setElementOrder/containers": [{"name": "app"}, {"name": "debug"},
                {"name": "istio-proxy"}, {"name": "sidecar"}],
                "containers": [{"name": "debug", "image": "busybox"}]}}),
            json!([{"name": "app", "image": "nginx:1.24"}, {"name": "debug", "image": "busybox"},
                   {"name": "istio-proxy", "image": "proxy:1"},
                   {"name": "sidecar", "image": "busybox:1.36"}]),
        ),
        (
            "a server-only item keeps its place among the ordered ones",
            json!({"spec": {"$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                "containers": [{"name": "sidecar", "image": "busybox:1.37"}]}}),
            json!([{"name": "app", "image": "nginx:1.24"},
                   {"name": "istio-proxy", "image": "proxy:1"},
                   {"name": "sidecar", "image": "busybox:1.37"}]),
        ),
        (
            // Upstream reads the server's order through the list's reused memory: removing
            // `app` and appending `debug` leaves it as [istio-proxy, sidecar, debug], so
            // `sidecar` lands before `debug` (with the untouched order it would land after).
            "a deletion and an addition in one patch",
            json!({"spec": {"$setElementOrder/containers": [{"name": "istio-proxy"}, {"name": "debug"}],
                "containers": [{"name": "debug", "image": "busybox"},
                               {"$patch": "delete", "name": "app"}]}}),
            json!([{"name": "istio-proxy", "image": "proxy:1"},
                   {"name": "sidecar", "image": "busybox:1.36"},
                   {"name": "debug", "image": "busybox"}]),
        ),
    ];
    for (name, patch, containers) in cases {
        eprintln!("case: {name}");
        let mut expected = three.clone();
        expected["spec"]["containers"] = containers.clone();
        check(POD, &three, patch, &expected);
    }
}

#[test]
fn retain_keys_clears_the_other_members_of_a_union() {
    // kubectl apply, after `strategy.type` changes from RollingUpdate to Recreate.
    let original = deployment();
    let recreate = edited(&original, |deployment| {
        deployment["spec"]["strategy"] = json!({"type": "Recreate"});
    });
    for patch in [
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": null,
                                     "type": "Recreate"}}}),
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    ] {
        check(DEPLOYMENT, &original, &patch, &recreate);
    }

    // kubectl apply, after a volume's source changes from a ConfigMap to a Secret.
    let original = pod();
    let patch = json!({"spec": {
        "$setElementOrder/volumes": [{"name": "data"}, {"name": "config"}],
        "volumes": [{"$retainKeys": ["name", "secret"], "configMap": null, "name": "config",
                     "secret": {"secretName": "web-secret"}}]}});
    let expected = edited(&original, |pod| {
        pod["spec"]["volumes"][1] =
            json!({"name": "config", "secret": {"secretName": "web-secret"}});
    });
    check(POD, &original, &patch, &expected);
}

#[test]
fn patches_kubectl_sends() {
    let original = deployment();

    // kubectl set image deployment/web app=nginx:1.25 (a two-way diff of the object).
    let set_image = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
        "containers": [{"image": "nginx:1.25", "name": "app"}]}}}});
    let expected = edited(&original, |deployment| {
        deployment["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.25");
    });
    check(DEPLOYMENT, &original, &set_image, &expected);

    // kubectl rollout restart deployment/web.
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2025-06-01T12:00:00Z"}}}}});
    let expected = edited(&original, |deployment| {
        deployment["spec"]["template"]["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/restartedAt": "2025-06-01T12:00:00Z"});
    });
    check(DEPLOYMENT, &original, &restart, &expected);

    // kubectl annotate and kubectl label send JSON merge patches; as strategic merge patches
    // they mean the same.
    let annotate = json!({"metadata": {"annotations": {"owner": "team-a",
        "deployment.kubernetes.io/revision": null}}});
    let expected = edited(&original, |deployment| {
        deployment["metadata"]["annotations"] = json!({"owner": "team-a"});
    });
    check(DEPLOYMENT, &original, &annotate, &expected);
    // Removing the last annotation sends the map as null.
    let expected = edited(&original, |deployment| {
        deployment["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
    });
    check(
        DEPLOYMENT,
        &original,
        &json!({"metadata": {"annotations": null}}),
        &expected,
    );
    let label = json!({"metadata": {"labels": {"env": "prod"}}});
    let expected = edited(&original, |deployment| {
        deployment["metadata"]["labels"]["env"] = json!("prod");
    });
    check(DEPLOYMENT, &original, &label, &expected);

    // kubectl edit: replicas raised, an env var changed, another removed.
    let edit = json!({"spec": {"replicas": 5, "template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
        "containers": [{"$setElementOrder/env": [{"name": "A"}],
                        "env": [{"name": "A", "value": "10"}, {"$patch": "delete", "name": "B"}],
                        "name": "app"}]}}}});
    let expected = edited(&original, |deployment| {
        deployment["spec"]["replicas"] = json!(5);
        deployment["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "10"}]);
    });
    check(DEPLOYMENT, &original, &edit, &expected);

    // kubectl apply (client-side), after the tier label, the replica count and env var B were
    // removed from the manifest since the last apply: the three-way patch nulls the fields,
    // deletes the list item, and records the new configuration.
    let last_applied = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"labels":{"app":"web"},"name":"web","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"env":[{"name":"A","value":"1"}],"image":"nginx:1.24","name":"app"},{"image":"busybox:1.36","name":"sidecar"}]}}}}"#;
    let apply_patch = json!({
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{last_applied}\n")},
            "labels": {"tier": null}
        },
        "spec": {"replicas": null, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"$setElementOrder/env": [{"name": "A"}],
                            "env": [{"$patch": "delete", "name": "B"}], "name": "app"}]}}}
    });
    let mut expected = edited(&original, |deployment| {
        deployment["metadata"]["labels"] = json!({"app": "web"});
        deployment["spec"]
            .as_object_mut()
            .unwrap()
            .remove("replicas");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}]);
    });
    expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(format!("{last_applied}\n"));
    check(DEPLOYMENT, &original, &apply_patch, &expected);
}

#[test]
fn malformed_patches_fail_as_upstream_fails_them() {
    let original = pod();
    let cases: &[(&str, Value, u16, &str)] = &[
        (
            "a merge-list item without its merge key",
            json!({"spec": {"containers": [{"image": "nginx:1.25"}]}}),
            500,
            "map: map[image:nginx:1.25] does not contain declared merge key: name",
        ),
        (
            "a $patch: delete item without its merge key",
            json!({"spec": {"volumes": [{"$patch": "delete", "emptyDir": {}}]}}),
            500,
            "map: map[$patch:delete emptyDir:map[]] does not contain declared merge key: name",
        ),
        (
            "an unknown $patch in a map",
            json!({"spec": {"nodeSelector": {"$patch": "remove"}}}),
            500,
            "unknown patch type: remove in map: map[$patch:remove]",
        ),
        (
            "$patch: merge in a map",
            json!({"spec": {"nodeSelector": {"$patch": "merge", "disk": "hdd"}}}),
            500,
            "unknown patch type: merge in map: map[$patch:merge disk:hdd]",
        ),
        (
            "an unknown $patch in a list",
            json!({"spec": {"containers": [{"$patch": "drop", "name": "app"}]}}),
            500,
            "unknown patch type: drop in map: map[$patch:drop name:app]",
        ),
        (
            "a $patch that is not a string",
            json!({"spec": {"containers": [{"$patch": 1, "name": "app"}]}}),
            500,
            "unknown patch type: %!s(int64=1) in map: map[$patch:1 name:app]",
        ),
        (
            "$patch: merge in a list",
            json!({"spec": {"containers": [{"$patch": "merge"}]}}),
            500,
            "merging lists cannot yet be specified in the patch",
        ),
        (
            "a field $retainKeys does not name",
            json!({"spec": {"volumes": [{"$retainKeys": ["name"], "name": "config",
                                         "secret": {"secretName": "s"}}]}}),
            400,
            "invalid patch format of retainKeys",
        ),
        (
            "$retainKeys that is not a list",
            json!({"spec": {"nodeSelector": {"$retainKeys": "disk"}}}),
            400,
            "invalid patch format of retainKeys",
        ),
        (
            "$setElementOrder without a field",
            json!({"spec": {"$setElementOrder": [{"name": "app"}]}}),
            400,
            "invalid patch format of setElementOrder list",
        ),
        (
            "$deleteFromPrimitiveList without a field",
            json!({"metadata": {"$deleteFromPrimitiveList": ["example.com/a"]}}),
            400,
            "invalid patch format of primitive list",
        ),
        (
            "$setElementOrder that is not a list",
            json!({"spec": {"$setElementOrder/containers": "app"}}),
            500,
            "expected a []interface {}, but received a string",
        ),
        (
            "a patch list out of its $setElementOrder",
            json!({"spec": {"$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                   "containers": [{"name": "sidecar", "image": "x"}, {"name": "app", "image": "y"}]}}),
            500,
            "The order in patch list:\n[map[image:x name:sidecar] map[image:y name:app]]\n doesn't match $setElementOrder list:\n[map[name:app] map[name:sidecar]]\n",
        ),
        (
            "$setElementOrder for a field the type lacks",
            json!({"spec": {"$setElementOrder/sidecars": [{"name": "a"}]}}),
            500,
            "unable to find api field in struct PodSpec for the json field \"sidecars\"",
        ),
        (
            "$setElementOrder for a map the object has",
            json!({"spec": {"$setElementOrder/nodeSelector": ["disk"]}}),
            500,
            "expected a []interface {}, but received a map[string]interface {}",
        ),
        (
            "$setElementOrder for a field that is not a list",
            json!({"spec": {"$setElementOrder/securityContext": ["runAsUser"]}}),
            500,
            "expected slice or array type, but got: struct",
        ),
        (
            "items of mixed types",
            json!({"metadata": {"finalizers": [["x"]]}}),
            500,
            "list element types are not identical: [[example.com/a example.com/b] [[x]]]",
        ),
        (
            "objects in a list of scalars deleted by value",
            json!({"spec": {"$deleteFromPrimitiveList/tolerations": [{"key": "k"}]}}),
            500,
            "cannot merge lists without merge key for struct",
        ),
        (
            "a patch that is not an object",
            json!(["spec"]),
            400,
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
    ];
    for (name, patch, code, message) in cases {
        eprintln!("case: {name}");
        check_error(POD, &original, patch, *code, message);
    }

    // Scalars where a list of objects merges by key.
    check_error(
        POD,
        &json!({"spec": {"containers": []}}),
        &json!({"spec": {"containers": ["app"]}}),
        500,
        "expected a map[string]interface {}, but received a string",
    );

    // A list of lists is the one failure upstream answers with 422.
    check_error(
        POD,
        &json!({"metadata": {"finalizers": []}}),
        &json!({"metadata": {"finalizers": [["x"]]}}),
        422,
        "lists of lists are not supported",
    );

    // Opaque fields (a ControllerRevision's data) have no fields to merge into.
    check_error(
        ("apps", "v1", "ControllerRevision"),
        &json!({"revision": 1, "data": {"spec": {"replicas": 1}}}),
        &json!({"data": {"spec": {"replicas": 2}}}),
        500,
        "unable to find api field in struct RawExtension for the json field \"spec\"",
    );
}

#[test]
fn documents_nested_too_deeply_are_refused() {
    let mut deep = json!("leaf");
    for _ in 0..MAX_DEPTH + 10 {
        deep = json!({"a": deep});
    }
    let patch = json!({"metadata": {"labels": deep}});
    check_error(
        POD,
        &pod(),
        &patch,
        400,
        &format!("the patch or the object nests more than {MAX_DEPTH} levels deep"),
    );
    // Just within the limit is fine.
    let mut shallow = json!("leaf");
    for _ in 0..MAX_DEPTH - 3 {
        shallow = json!({"a": shallow});
    }
    let patched = apply(
        &pod(),
        &json!({"metadata": {"annotations": shallow}}),
        meta(POD),
    );
    assert!(patched.is_ok(), "{patched:?}");
}

#[test]
fn failures_become_the_status_upstream_answers() {
    let status = |error: StrategicPatchError| error.to_status().to_json();
    assert_eq!(
        status(StrategicPatchError::BadRetainKeysFormat),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "code": 400, "reason": "BadRequest", "message": "invalid patch format of retainKeys"})
    );
    assert_eq!(
        status(StrategicPatchError::ListOfLists),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "code": 422, "reason": "Invalid", "details": {},
               "message": "the server rejected our request due to an error in our request"})
    );
    assert_eq!(
        status(StrategicPatchError::MergeDirectiveInList),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "code": 500, "message": "merging lists cannot yet be specified in the patch"})
    );
    assert_eq!(
        custom_resource_rejection().to_json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "code": 415, "reason": "UnsupportedMediaType",
               "message": "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"})
    );
    assert_eq!(
        StatusError::unsupported_media_type(&BUILTIN_PATCH_TYPES)
            .status
            .message
            .as_deref(),
        Some(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        )
    );
}

#[test]
fn every_served_kind_has_patch_metadata_and_custom_resources_have_none() {
    let mut count = 0;
    for (group, version, kind) in served_kinds() {
        let meta = for_kind(group, version, kind);
        assert!(meta.is_some(), "{group}/{version} {kind}");
        assert_eq!(meta.map(|meta| meta.type_name()), Some(kind));
        count += 1;
    }
    // Every catalogue kind (the two HorizontalPodAutoscaler versions are two), and the kinds of
    // the subresources: Scale, Binding, Eviction and TokenRequest.
    assert_eq!(count, crate::catalog::resources().count() + 4);
    assert!(served_kinds().contains(&("autoscaling", "v1", "Scale")));
    assert!(for_kind("stable.example.com", "v1", "CronTab").is_none());
    assert!(for_kind("apps", "v1beta1", "Deployment").is_none());
    assert!(for_kind("", "v1", "Deployment").is_none());
    assert!(builtin().len() > 100, "{}", builtin().len());
}

/// The metadata of the field reached by `path` from `kind` (list fields are stepped into).
fn field_at(kind: Kind, path: &[&str]) -> (Option<String>, String) {
    let mut meta = meta(kind);
    let (last, parents) = path.split_last().expect("a path");
    for step in parents {
        meta = match meta.list_field(step) {
            Ok((item, _)) => item,
            Err(_) => meta.field(step).expect("a field").0,
        };
    }
    let (_, field) = meta.field(last).expect("the field");
    (
        field.strategy.map(str::to_owned),
        field.merge_key.to_owned(),
    )
}

#[test]
fn the_walker_sees_the_table_at_the_json_names_of_nested_types() {
    let merge = |key: &str| (Some("merge".to_owned()), key.to_owned());
    let none = (None, String::new());
    for (kind, path, expected) in [
        (
            DEPLOYMENT,
            &["spec", "template", "spec", "containers"][..],
            merge("name"),
        ),
        (
            DEPLOYMENT,
            &["spec", "template", "spec", "containers", "env"][..],
            merge("name"),
        ),
        (
            DEPLOYMENT,
            &["spec", "template", "spec", "initContainers", "volumeMounts"][..],
            merge("mountPath"),
        ),
        (
            DEPLOYMENT,
            &["spec", "template", "spec", "containers", "args"][..],
            none.clone(),
        ),
        (
            DEPLOYMENT,
            &["spec", "strategy"][..],
            (Some("retainKeys".to_owned()), String::new()),
        ),
        (
            POD,
            &["spec", "volumes"][..],
            (Some("merge,retainKeys".to_owned()), "name".to_owned()),
        ),
        (
            POD,
            &["spec", "ephemeralContainers", "env"][..],
            merge("name"),
        ),
        (POD, &["metadata", "finalizers"][..], merge("")),
        (POD, &["metadata", "ownerReferences"][..], merge("uid")),
        (("", "v1", "Service"), &["spec", "ports"][..], merge("port")),
        (
            ("", "v1", "Node"),
            &["status", "addresses"][..],
            merge("type"),
        ),
        (
            ("batch", "v1", "CronJob"),
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "containers",
            ][..],
            merge("name"),
        ),
        (
            ("policy", "v1", "PodDisruptionBudget"),
            &["spec", "selector"][..],
            (Some("replace".to_owned()), String::new()),
        ),
        (
            ("discovery.k8s.io", "v1", "EndpointSlice"),
            &["endpoints"][..],
            none.clone(),
        ),
    ] {
        assert_eq!(field_at(kind, path), expected, "{kind:?} {path:?}");
    }
}

#[test]
fn every_table_entry_names_a_real_field_of_the_right_shape() {
    use k8s_openapi::api::{
        admissionregistration, apps, autoscaling, batch, core, flowcontrol, networking, policy,
        storage,
    };
    use k8s_openapi::schemars::SchemaGenerator;
    let mut generator = SchemaGenerator::default();
    generator.subschema_for::<admissionregistration::v1::MutatingWebhookConfiguration>();
    generator.subschema_for::<admissionregistration::v1::ValidatingWebhookConfiguration>();
    generator.subschema_for::<admissionregistration::v1::ValidatingAdmissionPolicy>();
    generator.subschema_for::<apps::v1::DaemonSet>();
    generator.subschema_for::<apps::v1::Deployment>();
    generator.subschema_for::<apps::v1::ReplicaSet>();
    generator.subschema_for::<apps::v1::StatefulSet>();
    generator.subschema_for::<autoscaling::v2::HorizontalPodAutoscaler>();
    generator.subschema_for::<batch::v1::Job>();
    generator.subschema_for::<core::v1::ComponentStatus>();
    generator.subschema_for::<core::v1::Namespace>();
    generator.subschema_for::<core::v1::Node>();
    generator.subschema_for::<core::v1::PersistentVolumeClaim>();
    generator.subschema_for::<core::v1::Pod>();
    generator.subschema_for::<core::v1::ReplicationController>();
    generator.subschema_for::<core::v1::Service>();
    generator.subschema_for::<core::v1::ServiceAccount>();
    generator.subschema_for::<flowcontrol::v1::FlowSchema>();
    generator.subschema_for::<flowcontrol::v1::PriorityLevelConfiguration>();
    generator.subschema_for::<networking::v1::ServiceCIDR>();
    generator.subschema_for::<policy::v1::PodDisruptionBudget>();
    generator.subschema_for::<storage::v1::CSINode>();
    let definitions = generator.take_definitions(false);
    let definition_of = |reference: &Value| {
        let name = reference["$ref"].as_str()?.rsplit('/').next()?;
        definitions.get(name)
    };
    for entry in FIELD_PATCHES {
        let property = definitions
            .get(entry.definition)
            .and_then(|definition| definition.get("properties")?.get(entry.field));
        let Some(property) = property else {
            panic!("{} has no field {}", entry.definition, entry.field);
        };
        match entry.strategy {
            PatchStrategy::Merge | PatchStrategy::MergeRetainKeys => {
                assert_eq!(property.get("type"), Some(&json!("array")), "{entry:?}");
                match entry.merge_key {
                    Some(key) => {
                        let item = definition_of(&property["items"]);
                        let item_fields = item.and_then(|item| item.get("properties"));
                        assert!(
                            item_fields.is_some_and(|fields| fields.get(key).is_some()),
                            "{entry:?}"
                        );
                    }
                    None => {
                        assert_eq!(
                            property["items"].get("type"),
                            Some(&json!("string")),
                            "{entry:?}"
                        )
                    }
                }
            }
            PatchStrategy::Replace | PatchStrategy::RetainKeys => {
                let target = definition_of(property);
                assert!(
                    target.is_some_and(|target| target.get("properties").is_some()),
                    "{entry:?}"
                );
            }
        }
    }
}

#[test]
fn catalogues_read_openapi_v3_references_and_extensions() {
    let definitions = json!({
        "io.example.v1.Widget": {"type": "object", "properties": {
            "parts": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.example.v1.Part"}]},
                      "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "id"},
            "spec": {"allOf": [{"$ref": "#/components/schemas/io.example.v1.Spec"}]}}},
        "io.example.v1.Part": {"type": "object", "properties": {
            "id": {"type": "string"}, "size": {"type": "integer", "format": "int32"}}},
        "io.example.v1.Spec": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"}}}
    });
    let catalogue = Catalogue::from_definitions(definitions.as_object().unwrap());
    assert_eq!(catalogue.len(), 3);
    let widget = catalogue.get("io.example.v1.Widget").unwrap();
    let original = json!({"parts": [{"id": "a", "size": 1}, {"id": "b", "size": 2}],
                          "spec": {"tags": ["x"]}});
    let patch = json!({"parts": [{"id": "b", "size": 3}], "spec": {"tags": ["y"]}});
    assert_eq!(
        apply(&original, &patch, widget).unwrap(),
        json!({"parts": [{"id": "a", "size": 1}, {"id": "b", "size": 3}],
               "spec": {"tags": ["y", "x"]}})
    );
    assert_eq!(widget.type_name(), "Widget");
    assert_eq!(widget.go_kind(), "struct");
}
