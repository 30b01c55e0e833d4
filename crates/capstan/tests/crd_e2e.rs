//! End to end: CustomResourceDefinitions with stock kubectl (the oldest and newest supported).
//! A CRD is refused with upstream's errors when its name, group or versions are wrong; a valid
//! one is established with its names accepted and storage version recorded; its kind is then
//! discovered (short name and category included), its objects created (defaulted, pruned and
//! validated by the version's schema), listed as a Table,
//! read through a second served version, patched through the status subresource, scaled
//! through the scale subresource at the CRD's paths (`kubectl scale`), and deleted
//! with the CRD, whose API then goes away.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::*;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.count, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Mode, type: string, jsonPath: .spec.mode}
    - {name: Ready, type: boolean, jsonPath: .status.ready, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              mode: {type: string, enum: [fast, slow], default: fast}
          status:
            type: object
            properties:
              ready: {type: boolean}
              count: {type: integer}
              selector: {type: string}
  - name: v1beta1
    served: true
    storage: false
    deprecated: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: first
spec:
  size: 3
"#;

/// `kubectl apply` of a CRD, then waiting until the definition `name` is established.
fn establish(version: &str, kc: &Path, crd: &str, name: &str) {
    kubectl_stdin_ok(version, kc, &["apply", "-f", "-"], crd);
    let target = format!("crd/{name}");
    kubectl_ok(
        version,
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            &target,
        ],
    );
}

/// `kubectl get <target> -o jsonpath=<path>`.
fn jsonpath(version: &str, kc: &Path, target: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(target);
    let path = format!("jsonpath={path}");
    args.extend(["-o", path.as_str()]);
    kubectl_ok(version, kc, &args)
}

#[test]
fn custom_resources_are_served_from_their_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    for version in ["1.27", "1.33"] {
        // A definition whose name is not <plural>.<group>, with two storage versions.
        let bad = CRD
            .replace("name: widgets.example.com", "name: gadgets.example.com")
            .replace("storage: false", "storage: true");
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &bad),
            &[
                "metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group",
                "must have exactly one version marked as storage version",
            ],
        );

        // A schema that is not structural: a field without a type.
        let loose = CRD.replace("size: {type: integer, minimum: 1}", "size: {minimum: 1}");
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &loose),
            &[
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields",
            ],
        );

        establish(version, &kc, CRD, "widgets.example.com");
        let status = jsonpath(
            version,
            &kc,
            &["crd", "widgets.example.com"],
            "{.status.acceptedNames.kind} {.status.acceptedNames.listKind} {.status.storedVersions} {.spec.names.singular}",
        );
        assert_eq!(status, "Widget WidgetList [\"v1\"] widget");

        // Discovered: plural, short name and the `all` category work.
        let applied = eventually("the widget kind to be served", || {
            let out = kubectl_stdin(version, &kc, &["apply", "-f", "-"], WIDGET);
            out.status.success().then_some(out)
        });
        assert!(String::from_utf8_lossy(&applied.stdout).contains("widget.example.com/first"));
        // The printer columns, the `priority: 1` one only with `-o wide`.
        let table = kubectl_ok(version, &kc, &["get", "wd"]);
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "SIZE", "MODE", "AGE"], "{table}");
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(row[..3], ["first", "3", "fast"], "{table}");
        assert!(row[3].ends_with('s') || row[3].ends_with('m'), "{table}");
        let wide = kubectl_ok(version, &kc, &["get", "wd", "-o", "wide"]);
        let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "SIZE", "MODE", "READY", "AGE"], "{wide}");
        // No status yet: the Ready cell is empty (null), as upstream's.
        let row: Vec<&str> = wide.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row[..3], ["first", "3", "fast"], "{wide}");
        assert_eq!(row.len(), 4, "{wide}");
        // The second version has no columns: upstream's default, the name and age.
        let beta = kubectl_ok(version, &kc, &["get", "widgets.v1beta1.example.com"]);
        let header: Vec<&str> = beta.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGE"], "{beta}");
        // The deprecated version warns on every request, naming the one to use; v1 does not.
        let out = kubectl_any(version, &kc, &["get", "widgets.v1beta1.example.com"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(
                "Warning: example.com/v1beta1 Widget is deprecated; use example.com/v1 Widget"
            ),
            "{err}"
        );
        let out = kubectl_any(version, &kc, &["get", "widgets.v1.example.com"]);
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let all = kubectl_ok(version, &kc, &["get", "all", "-o", "name"]);
        assert!(all.contains("widget.example.com/first"), "{all}");

        // The schema: defaults filled in, unknown fields pruned, bad values refused.
        let defaulted = jsonpath(version, &kc, &["widget", "first"], "{.spec.mode}");
        assert_eq!(defaulted, "fast");
        kubectl_stdin_ok(
            version,
            &kc,
            &["create", "--validate=false", "-f", "-"],
            &WIDGET
                .replace("first", "second")
                .replace("size: 3", "size: 3\n  extra: 1"),
        );
        let spec = jsonpath(version, &kc, &["widget", "second"], "{.spec}");
        assert_eq!(spec, r#"{"mode":"fast","size":3}"#);
        let refused = kubectl_stdin(
            version,
            &kc,
            &["create", "--validate=false", "-f", "-"],
            &WIDGET
                .replace("first", "third")
                .replace("size: 3", "size: 0\n  mode: medium"),
        );
        assert_refused(
            &refused,
            &[
                "The Widget \"third\" is invalid:",
                "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ],
        );

        // Server-side apply: created and then changed by one manager, fields tracked.
        kubectl_stdin_ok(
            version,
            &kc,
            &["apply", "--server-side", "--field-manager=e2e", "-f", "-"],
            &WIDGET.replace("first", "applied"),
        );
        kubectl_stdin_ok(
            version,
            &kc,
            &["apply", "--server-side", "--field-manager=e2e", "-f", "-"],
            &WIDGET
                .replace("first", "applied")
                .replace("size: 3", "size: 5"),
        );
        let managed = jsonpath(
            version,
            &kc,
            &["widget", "applied"],
            "{.spec.size} {.metadata.managedFields[0].manager} {.metadata.managedFields[0].operation}",
        );
        assert_eq!(managed, "5 e2e Apply");

        // The second served version reads the same object.
        let beta = jsonpath(
            version,
            &kc,
            &["widgets.v1beta1.example.com", "first"],
            "{.apiVersion} {.spec.size} {.metadata.generation}",
        );
        assert_eq!(beta, "example.com/v1beta1 3 1");

        // The status subresource: the status is written there, not with the object.
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "widget",
                "first",
                "--type=merge",
                "-p",
                r#"{"spec":{"size":4},"status":{"ready":true}}"#,
            ],
        );
        let after = jsonpath(
            version,
            &kc,
            &["widget", "first"],
            "{.spec.size} {.status.ready} {.metadata.generation}",
        );
        assert_eq!(after, "4  2", "the main endpoint ignores the status");
        // kubectl 1.27 has `--subresource` (since 1.24).
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "widget",
                "first",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"ready":true,"count":2,"selector":"app=w"}}"#,
            ],
        );
        let ready = jsonpath(
            version,
            &kc,
            &["widget", "first"],
            "{.status.ready} {.metadata.generation}",
        );
        assert_eq!(ready, "true 2");

        // The scale subresource, at the CRD's paths: kubectl scale changes spec.size.
        kubectl_ok(version, &kc, &["scale", "widget", "first", "--replicas=6"]);
        let scaled = jsonpath(
            version,
            &kc,
            &["widget", "first"],
            "{.spec.size} {.metadata.generation}",
        );
        assert_eq!(scaled, "6 3");
        let scale = kubectl_ok(
            version,
            &kc,
            &[
                "get",
                "--raw",
                "/apis/example.com/v1/namespaces/default/widgets/first/scale",
            ],
        );
        let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["spec"]["replicas"], 6);
        assert_eq!(scale["status"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=w");
        // The object's schema still holds: size must be at least 1.
        assert_refused(
            &kubectl_any(version, &kc, &["scale", "widget", "first", "--replicas=0"]),
            &[
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ],
        );

        // Deleting the definition deletes its objects, then the API goes. While an object
        // holds it up (a finalizer), new objects are refused with upstream's 405.
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "widget",
                "first",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
            ],
        );
        kubectl_ok(
            version,
            &kc,
            &["delete", "crd", "widgets.example.com", "--wait=false"],
        );
        eventually(
            "creates to be refused while the definition terminates",
            || {
                let out = kubectl_stdin(
                    version,
                    &kc,
                    &["create", "-f", "-"],
                    "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: late, namespace: default}\nspec: {size: 1}\n",
                );
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                (!out.status.success()
                    && err.contains(
                        "create not allowed while custom resource definition is terminating",
                    ))
                .then_some(err)
            },
        );
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "widget",
                "first",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
        );
        eventually("the widget API to go", || {
            let out = kubectl_any(version, &kc, &["get", "widgets.example.com"]);
            (!out.status.success()).then_some(())
        });
        let raw = kubectl_any(
            version,
            &kc,
            &[
                "get",
                "--raw",
                "/apis/example.com/v1/namespaces/default/widgets/first",
            ],
        );
        assert!(!raw.status.success(), "the object went with its definition");
    }
    server.stop();
}

const FOO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: foos.publish.example.com
spec:
  group: publish.example.com
  scope: Namespaced
  names: {plural: foos, kind: Foo, shortNames: [fo]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: Foo CRD for Testing
        type: object
        properties:
          spec:
            type: object
            description: Specification of Foo
            properties:
              bars:
                description: List of Bars and their specs.
                type: array
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {description: Name of Bar., type: string}
                    bazs: {description: List of Bazs., type: array, items: {type: string}}
  - name: v2alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// The names of the definitions of `/openapi/v2` and of the documents `/openapi/v3` lists that
/// mention `needle`.
fn published(version: &str, kc: &Path, needle: &str) -> (Vec<String>, Vec<String>) {
    let names = |path: &str, key: &str| -> Vec<String> {
        let raw = kubectl_ok(version, kc, &["get", "--raw", path]);
        let doc: serde_json::Value = serde_json::from_str(&raw).unwrap();
        doc[key]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.contains(needle))
            .cloned()
            .collect()
    };
    (
        names("/openapi/v2", "definitions"),
        names("/openapi/v3", "paths"),
    )
}

/// A CRD's versions are published in OpenAPI v2 and v3 as upstream publishes them: `kubectl
/// explain` reads them (v3, and v2 on request), the v2 definition is the version's schema, and
/// a version that stops being served, or a deleted CRD, leaves the documents.
#[test]
fn custom_kinds_are_published_in_openapi_for_kubectl_explain() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    for version in ["1.27", "1.33"] {
        establish(version, &kc, FOO_CRD, "foos.publish.example.com");
        let explained = eventually("foos to be explained", || {
            let out = kubectl(
                version,
                &kc,
                &["explain", "foos", "--api-version=publish.example.com/v1"],
            );
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        });
        for expected in [
            "Foo CRD for Testing",
            "apiVersion\t<string>",
            "spec\t<Object>",
            "Specification of Foo",
        ] {
            assert!(explained.contains(expected), "{expected} in {explained}");
        }
        let bars = kubectl_ok(
            version,
            &kc,
            &[
                "explain",
                "fo.spec.bars",
                "--api-version=publish.example.com/v1",
            ],
        );
        for expected in [
            "List of Bars and their specs.",
            "bazs\t<[]string>",
            "name\t<string> -required-",
        ] {
            assert!(bars.contains(expected), "{expected} in {bars}");
        }
        let meta = kubectl_ok(
            version,
            &kc,
            &[
                "explain",
                "foos.metadata.creationTimestamp",
                "--api-version=publish.example.com/v1",
            ],
        );
        assert!(meta.contains("CreationTimestamp is a timestamp"), "{meta}");
        let missing = kubectl(
            version,
            &kc,
            &[
                "explain",
                "foos.spec.bars2",
                "--api-version=publish.example.com/v1",
            ],
        );
        assert_refused(&missing, &["field \"bars2\" does not exist"]);
        // The v2 document, which kubectl reads on request and older clients always.
        let v2 = kubectl_ok(
            version,
            &kc,
            &[
                "explain",
                "--output=plaintext-openapiv2",
                "foos.spec",
                "--api-version=publish.example.com/v1",
            ],
        );
        assert!(
            v2.contains("bars\t<[]Object>") && v2.contains("Specification of Foo"),
            "{v2}"
        );
        let (definitions, documents) = published(version, &kc, "publish");
        assert_eq!(
            definitions,
            [
                "com.example.publish.v1.Foo",
                "com.example.publish.v1.FooList",
                "com.example.publish.v2alpha1.Foo",
                "com.example.publish.v2alpha1.FooList",
            ]
        );
        assert_eq!(
            documents,
            [
                "apis/publish.example.com/v1",
                "apis/publish.example.com/v2alpha1"
            ]
        );

        // Objects are checked against the published schema's fields.
        let unknown = kubectl_stdin(
            version,
            &kc,
            &["create", "-f", "-"],
            r#"{"apiVersion":"publish.example.com/v1","kind":"Foo","metadata":{"name":"a"},"spec":{"bars":[{"name":"x"}],"foo":1}}"#,
        );
        assert_refused(&unknown, &["unknown field \"spec.foo\""]);

        // A version no longer served leaves the documents.
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "crd",
                "foos.publish.example.com",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/spec/versions/1/served","value":false}]"#,
            ],
        );
        eventually("v2alpha1 to leave the documents", || {
            let (definitions, documents) = published(version, &kc, "publish");
            (definitions
                == [
                    "com.example.publish.v1.Foo",
                    "com.example.publish.v1.FooList",
                ]
                && documents == ["apis/publish.example.com/v1"])
            .then_some(())
        });
        kubectl_ok(version, &kc, &["delete", "crd", "foos.publish.example.com"]);
        eventually("the definitions to go with their CRD", || {
            let (definitions, documents) = published(version, &kc, "publish");
            (definitions.is_empty() && documents.is_empty()).then_some(())
        });
    }
    server.stop();
}

const GAUGE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gauges.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gauges, kind: Gauge}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - {rule: "self.min <= self.max", message: "min must not exceed max"}
            properties:
              min: {type: integer}
              max: {type: integer}
              name:
                type: string
                x-kubernetes-validations:
                - {rule: "self == oldSelf", message: "name is immutable"}
"#;

/// A CRD whose rule compares every pair of items of a list of short strings: without
/// `maxItems` the list can hold as many items as a request, and the rule costs far more than
/// upstream's limit.
const PAIRS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: pairs.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: pairs, kind: Pair}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              items:
                type: array
                items: {type: string, maxLength: 10}
                x-kubernetes-validations:
                - rule: "self.all(a, self.all(b, a == b || a != b))"
"#;

/// CEL rules over their cost budget are refused at CRD creation with upstream's 422 and
/// messages; the same rule with `maxItems` is accepted.
#[test]
fn cel_rules_over_the_cost_budget_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let advice = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    let rule = "spec.validation.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule";
    for version in ["1.27", "1.33"] {
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-v=6", "-f", "-"], PAIRS_CRD),
            &[
                "422 Unprocessable Entity",
                &format!(
                    "{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {advice}"
                ),
                &format!(
                    "{rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
                ),
                &format!(
                    "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {advice}"
                ),
            ],
        );
        // 1,500 items: each inner step costs 15 (the loop's 2, `@result &&` 1, each comparison
        // of strings up to 40 bytes 6), so 1,500 × (5 + 1,500 × 15) + 2 = 33,757,502, 3.4 times
        // the limit of one rule, under that of the schema.
        let over = PAIRS_CRD.replace(
            "items: {type: string, maxLength: 10}",
            "items: {type: string, maxLength: 10}\n                maxItems: 1500",
        );
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &over),
            &[&format!(
                "The CustomResourceDefinition \"pairs.example.com\" is invalid: {rule}: Forbidden: estimated rule cost exceeds budget by factor of 3.4x {advice}"
            )],
        );
        let bounded = PAIRS_CRD.replace(
            "items: {type: string, maxLength: 10}",
            "items: {type: string, maxLength: 10}\n                maxItems: 100",
        );
        kubectl_stdin_ok(version, &kc, &["create", "-f", "-"], &bounded);
        kubectl_ok(version, &kc, &["delete", "crd", "pairs.example.com"]);
    }
}

/// CEL validation rules (`x-kubernetes-validations`), refused when they do not compile, and
/// defaults added to a schema later showing on objects stored before.
#[test]
fn cel_rules_validate_custom_objects_and_stored_objects_get_new_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    for version in ["1.27", "1.33"] {
        let broken = GAUGE_CRD.replace("self.min <= self.max", "self.min <=");
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &broken),
            &[
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.min <=\": compilation failed: ",
            ],
        );
        establish(version, &kc, GAUGE_CRD, "gauges.example.com");
        let gauge = "apiVersion: example.com/v1\nkind: Gauge\nmetadata: {name: g}\nspec: {min: 1, max: 5, name: first}\n";
        eventually("the gauge kind to be served", || {
            kubectl_stdin(version, &kc, &["apply", "-f", "-"], gauge)
                .status
                .success()
                .then_some(())
        });
        let out = kubectl_stdin(
            version,
            &kc,
            &["apply", "-f", "-"],
            &gauge.replace("min: 1", "min: 9"),
        );
        assert_refused(
            &out,
            &[
                "The Gauge \"g\" is invalid: spec: Invalid value: \"object\": min must not exceed max",
            ],
        );
        // A transition rule: the stored object is `oldSelf`.
        let out = kubectl_stdin(
            version,
            &kc,
            &["apply", "-f", "-"],
            &gauge.replace("name: first", "name: second"),
        );
        assert_refused(
            &out,
            &["spec.name: Invalid value: \"string\": name is immutable"],
        );
        // A default added to the schema shows on the object stored before it.
        let defaulted = GAUGE_CRD.replace(
            "              min: {type: integer}",
            "              min: {type: integer}\n              unit: {type: string, default: kg}",
        );
        kubectl_stdin_ok(version, &kc, &["apply", "-f", "-"], &defaulted);
        let unit = eventually("the stored gauge to be defaulted", || {
            let unit = jsonpath(version, &kc, &["gauge", "g"], "{.spec.unit}");
            (unit == "kg").then_some(unit)
        });
        assert_eq!(unit, "kg");
        // Stricter rules: one reading an optional field, and one the stored gauge's name
        // breaks. An update that leaves the name as stored is not held back by it (upstream's
        // ratcheting); a new gauge with that name is.
        let stricter = defaulted
            .replace(
                "                - {rule: \"self == oldSelf\", message: \"name is immutable\"}",
                "                - {rule: \"self == oldSelf\", message: \"name is immutable\"}\n                - {rule: \"self != 'first'\", message: \"first is reserved\"}",
            )
            .replace(
                "            - {rule: \"self.min <= self.max\", message: \"min must not exceed max\"}",
                "            - {rule: \"self.min <= self.max\", message: \"min must not exceed max\"}\n            - {rule: \"self.?unit.orValue('') != 'lb'\", message: \"pounds are not allowed\"}",
            );
        assert_ne!(stricter, defaulted);
        kubectl_stdin_ok(version, &kc, &["apply", "-f", "-"], &stricter);
        let second = gauge.replace("name: g}", "name: h}");
        let refused = eventually("the stricter rules to be served", || {
            let out = kubectl_stdin(
                version,
                &kc,
                &["create", "--dry-run=server", "-f", "-"],
                &second,
            );
            (!out.status.success()).then_some(out)
        });
        assert_refused(
            &refused,
            &["spec.name: Invalid value: \"string\": first is reserved"],
        );
        let out = kubectl_stdin(
            version,
            &kc,
            &["apply", "-f", "-"],
            &gauge.replace("max: 5", "max: 6"),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("Warning: spec.name: Invalid value: \"string\": first is reserved"),
            "the ratcheted rule is a warning: {stderr}"
        );
        assert_eq!(jsonpath(version, &kc, &["gauge", "g"], "{.spec.max}"), "6");
        assert_refused(
            &kubectl_stdin(
                version,
                &kc,
                &["apply", "-f", "-"],
                &gauge.replace("max: 5", "max: 6, unit: lb"),
            ),
            &["spec: Invalid value: \"object\": pounds are not allowed"],
        );
        kubectl_ok(
            version,
            &kc,
            &["delete", "crd", "gauges.example.com", "--timeout=60s"],
        );
        eventually("the gauge API to go", || {
            (!kubectl_any(version, &kc, &["get", "gauges.example.com"])
                .status
                .success())
            .then_some(())
        });
    }
    server.stop();
}

const GIZMO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields:
    - jsonPath: .spec.color
    - jsonPath: .spec.size
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              size: {type: integer}
              note: {type: string}
"#;

/// A CRD whose lists promise uniqueness: `tags` a set, `ports` a map keyed by port and
/// protocol.
const RACK_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: racks.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: racks, kind: Rack}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [port, protocol]
                items:
                  type: object
                  required: [port]
                  properties:
                    port: {type: integer}
                    protocol: {type: string, default: TCP}
"#;

#[test]
fn list_types_keep_their_elements_unique() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    apply(&kc, RACK_CRD);
    let rack = "apiVersion: example.com/v1\nkind: Rack\nmetadata: {name: r}\nspec: {tags: [a, b], ports: [{port: 80}, {port: 80, protocol: UDP}]}\n";
    eventually("the rack kind to be served", || {
        kubectl_stdin("1.33", &kc, &["apply", "-f", "-"], rack)
            .status
            .success()
            .then_some(())
    });
    for version in ["1.27", "1.33"] {
        // A repeated tag, and a port whose defaulted protocol repeats the first's keys.
        let broken = rack
            .replace("name: r", "name: broken")
            .replace("[a, b]", "[a, b, a]")
            .replace("protocol: UDP", "protocol: TCP");
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &broken),
            &[
                "spec.tags[2]: Duplicate value: \"a\"",
                "spec.ports[1]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}",
            ],
        );
        // An update that repeats a tag is refused the same way.
        let out = kubectl_stdin(
            version,
            &kc,
            &["apply", "-f", "-"],
            &rack.replace("[a, b]", "[b, b]"),
        );
        assert_refused(&out, &["spec.tags[1]: Duplicate value: \"b\""]);
    }
    kubectl_ok("1.33", &kc, &["delete", "crd", "racks.example.com"]);
    server.stop();
}

#[test]
fn selectable_fields_filter_custom_objects() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    // A field that is not a string, boolean or integer is refused with upstream's message.
    let refused = kubectl_stdin(
        "1.33",
        &kc,
        &["create", "-f", "-"],
        &GIZMO_CRD
            .replace("name: gizmos.example.com", "name: gadgets.example.com")
            .replace(
                "plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList",
                "plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList",
            )
            .replace(".spec.size", ".spec"),
    );
    assert_refused(
        &refused,
        &[
            "spec.versions[0].selectableFields[1].jsonPath: Invalid value: \".spec\": must point to a field of type string, boolean or integer.",
        ],
    );
    apply(&kc, GIZMO_CRD);
    eventually("the gizmo API", || {
        kubectl_any("1.33", &kc, &["get", "gizmos"])
            .status
            .success()
            .then_some(())
    });
    for (name, color, size) in [("a", "red", 1), ("b", "blue", 2), ("c", "red", 3)] {
        apply(
            &kc,
            &format!(
                "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {{name: {name}, namespace: default}}\nspec: {{color: {color}, size: {size}}}\n"
            ),
        );
    }
    apply(
        &kc,
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: plain, namespace: default}\nspec: {note: none}\n",
    );
    for version in ["1.27", "1.33"] {
        let names = |selector: &str| {
            kubectl_ok(
                version,
                &kc,
                &["get", "gizmos", "--field-selector", selector, "-o", "name"],
            )
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
        };
        assert_eq!(
            names("spec.color=red"),
            ["gizmo.example.com/a", "gizmo.example.com/c"]
        );
        assert_eq!(
            names("spec.color!=red,spec.size=2"),
            ["gizmo.example.com/b"]
        );
        // An absent field selects as the empty string.
        assert_eq!(names("spec.color="), ["gizmo.example.com/plain"]);
        let unknown = kubectl_any(
            version,
            &kc,
            &["get", "gizmos", "--field-selector", "spec.note=none"],
        );
        assert_refused(&unknown, &["field label not supported: spec.note"]);
    }
    server.stop();
}

/// `kubectl apply` of a manifest, which must succeed.
fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok("1.33", kc, &["apply", "-f", "-"], manifest);
}

const LINK_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: links.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: links, kind: Link}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              address: {type: string, format: ipv4}
              host: {type: string, format: hostname}
              since: {type: string, format: date-time}
              note: {type: string, format: no-such-format}
            oneOf:
            - required: [address]
            - required: [host]
"#;

#[test]
fn formats_and_alternatives_are_validated_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    // A junctor's alternative that names a type is not structural.
    let typed = LINK_CRD.replace("- required: [host]", "- {type: object, required: [host]}");
    assert_refused(
        &kubectl_stdin("1.33", &kc, &["create", "-f", "-"], &typed),
        &[
            "spec.validation.openAPIV3Schema.properties[spec].oneOf[1].type: Forbidden: must be empty to be structural",
        ],
    );
    establish("1.33", &kc, LINK_CRD, "links.example.com");
    let link = "apiVersion: example.com/v1\nkind: Link\nmetadata: {name: l}\nspec: {address: 10.0.0.1, since: \"2024-05-01T10:00:00Z\", note: anything}\n";
    eventually("the link kind to be served", || {
        kubectl_stdin("1.33", &kc, &["apply", "-f", "-"], link)
            .status
            .success()
            .then_some(())
    });
    for version in ["1.27", "1.33"] {
        let bad_formats = link
            .replace("name: l", "name: bad")
            .replace("10.0.0.1", "10.0.0.300")
            .replace("2024-05-01T10:00:00Z", "yesterday");
        assert_refused(
            &kubectl_stdin(version, &kc, &["create", "-f", "-"], &bad_formats),
            &[
                "spec.address: Invalid value: \"10.0.0.300\": spec.address in body must be of type ipv4: \"10.0.0.300\"",
                "spec.since: Invalid value: \"yesterday\": spec.since in body must be of type date-time: \"yesterday\"",
            ],
        );
        // Neither alternative of the oneOf, then both.
        for (spec, found) in [
            ("{note: x}", "Found none valid"),
            (
                "{address: 10.0.0.2, host: example.com}",
                "Found 2 valid alternatives",
            ),
        ] {
            let object = format!(
                "apiVersion: example.com/v1\nkind: Link\nmetadata: {{name: odd}}\nspec: {spec}\n"
            );
            let expected = format!(
                "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). {found}"
            );
            assert_refused(
                &kubectl_stdin(version, &kc, &["create", "-f", "-"], &object),
                &[&expected],
            );
        }
    }
    kubectl_ok("1.33", &kc, &["delete", "crd", "links.example.com"]);
    server.stop();
}

/// The `spec` of rack `shared`, read through `kubeconfig`.
fn rack_spec(kubeconfig: &Path) -> serde_json::Value {
    let out = kubectl_ok("1.33", kubeconfig, &["get", "rack", "shared", "-o", "json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["spec"].clone()
}

#[test]
fn server_side_apply_merges_custom_lists_by_their_list_types() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    establish("1.33", &kc, RACK_CRD, "racks.example.com");
    let rack = |ports: &str, tags: &str| {
        format!(
            "apiVersion: example.com/v1\nkind: Rack\nmetadata: {{name: shared, namespace: default}}\nspec: {{ports: {ports}, tags: {tags}}}\n"
        )
    };
    let apply = |version: &str, manager: &str, body: &str| {
        kubectl_stdin(
            version,
            &kc,
            &[
                "apply",
                "--server-side",
                "--field-manager",
                manager,
                "-f",
                "-",
            ],
            body,
        )
    };
    eventually("the rack kind to be served", || {
        apply("1.33", "first", &rack("[{port: 80}]", "[a]"))
            .status
            .success()
            .then_some(())
    });
    // A second manager's port and tag join the first's: the ports list is keyed by port and
    // protocol, the tags list a set; neither conflicts, as they would as atomic lists.
    let out = apply("1.27", "second", &rack("[{port: 443}]", "[b]"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rack_spec(&kc),
        serde_json::json!({
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}],
            "tags": ["a", "b"],
        })
    );
    // The first manager gives up its port: only its own item goes.
    let out = apply(
        "1.33",
        "first",
        &rack("[{port: 8080, protocol: UDP}]", "[a]"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rack_spec(&kc),
        serde_json::json!({
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 8080, "protocol": "UDP"}],
            "tags": ["a", "b"],
        })
    );
    // Applying the second manager's item as it is shares it; the second then gives it up and
    // the item stays, still the first's.
    let both = rack(
        "[{port: 443, protocol: TCP}, {port: 8080, protocol: UDP}]",
        "[a]",
    );
    let out = apply("1.33", "first", &both);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply("1.33", "second", &rack("[]", "[b]"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rack_spec(&kc)["ports"].as_array().map(Vec::len), Some(2));
    kubectl_ok("1.33", &kc, &["delete", "crd", "racks.example.com"]);
    server.stop();
}
