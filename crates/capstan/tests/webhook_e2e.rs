//! End to end: admission webhooks with stock kubectl (the oldest and newest supported), called
//! over TLS by a test webhook server on loopback (`common::webhook`). A validating webhook
//! refuses Deployments, ConfigMaps and custom objects labelled `deny=yes` (and their deletes)
//! with its own message; a mutating webhook labels new ConfigMaps and custom objects; a
//! webhook reached through a Service (an ExternalName to loopback, its certificate checked for
//! `<service>.<namespace>.svc`) takes effect the same way; a webhook that times out or answers
//! garbage refuses under `failurePolicy: Fail` with upstream's errors and is skipped under
//! `Ignore`; a false match condition skips a webhook; configurations themselves are never sent to webhooks; bad configurations are
//! refused with upstream's messages. A CRD's conversion webhook (the same server) converts its
//! objects between versions on reads, lists and writes, also after its storage version moves.
//! ValidatingAdmissionPolicies (CEL in the API server) refuse Deployments over the limit their
//! parameters (a ConfigMap) set, in the namespaces their binding selects, for both kubectl
//! versions; a binding with Warn gives upstream's warning, match conditions skip, evaluation
//! errors follow the failure policy, deletes are judged on the stored object, and bad policies
//! and bindings are refused with upstream's messages. `kubectl scale` of a Deployment and of a
//! custom object is admitted with the `Scale`: raised by a mutating webhook, refused with a
//! validating webhook's message. Under `matchPolicy: Equivalent` webhooks and a policy whose
//! rules name only `v1` of a two-version CRD get writes through `v1beta1`, converted; `Exact`
//! ones do not.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::webhook::WebhookServer;
use common::*;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, kind: Gizmo}
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
              size: {type: integer}
"#;

/// A webhook configuration of `kind` with one webhook `name` at `client` (a `clientConfig`
/// in YAML flow style) for `rules`.
fn configuration(kind: &str, name: &str, client: &str, rules: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}
webhooks:
- name: {name}
  clientConfig: {client}
  rules: {rules}
  sideEffects: None
  admissionReviewVersions: [v1, v1beta1]
{extra}
"#
    )
}

fn apply(version: &str, kc: &Path, yaml: &str) {
    kubectl_stdin_ok(version, kc, &["apply", "-f", "-"], yaml);
}

const DENIED: &str = "admission webhook \"deny.webhooks.capstan.test\" denied the request: the object is labelled deny";

#[test]
fn admission_webhooks_mutate_and_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let hooks = WebhookServer::start(&["hooks.default.svc"]);
    let bundle = hooks.ca_bundle();
    let url = |path: &str| format!("{{url: \"{}\", caBundle: {bundle}}}", hooks.url(path));
    let v = "1.33";

    // Bad configurations are refused with upstream's messages.
    let bad = configuration(
        "ValidatingWebhookConfiguration",
        "bad",
        "{url: \"http://127.0.0.1/x?y=1\"}",
        "[{operations: [\"*\", CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [pods]}]",
        "  timeoutSeconds: 40",
    );
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &bad);
    assert_refused(
        &out,
        &[
            "webhooks[0].name: Invalid value: \"bad\": should be a domain with at least three segments separated by dots",
            "webhooks[0].timeoutSeconds: Invalid value: 40: the timeout value must be between 1 and 30 seconds",
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
            "webhooks[0].clientConfig.url: Invalid value: \"y=1\": query parameters are not permitted in the URL",
            "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
        ],
    );

    // A ConfigMap labelled deny that exists before any webhook.
    kubectl_ok(v, &kc, &["create", "configmap", "kept"]);
    kubectl_ok(v, &kc, &["label", "configmap", "kept", "deny=yes"]);
    apply(v, &kc, CRD);
    kubectl_ok(
        v,
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gizmos.example.com",
        ],
    );

    let all_writes = "[{operations: [CREATE, UPDATE, DELETE], apiGroups: [\"\", apps, example.com], apiVersions: [v1], resources: [configmaps, deployments, gizmos]}]";
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny.webhooks.capstan.test",
            &url("/deny"),
            all_writes,
            "",
        ),
    );
    apply(
        v,
        &kc,
        &configuration(
            "MutatingWebhookConfiguration",
            "mutate.webhooks.capstan.test",
            &url("/mutate"),
            "[{operations: [CREATE], apiGroups: [\"\", example.com], apiVersions: [v1], resources: [configmaps, gizmos]}]",
            "",
        ),
    );
    let listed = kubectl_ok(v, &kc, &["get", "validatingwebhookconfigurations"]);
    assert!(
        listed.contains("NAME")
            && listed.contains("WEBHOOKS")
            && listed.contains("deny.webhooks.capstan.test   1"),
        "{listed}"
    );

    // The configurations take effect as soon as the server has them.
    eventually("the validating webhook", || {
        let out = kubectl_stdin(
            v,
            &kc,
            &["create", "--dry-run=server", "-f", "-"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe, labels: {deny: \"yes\"}}\n",
        );
        String::from_utf8_lossy(&out.stderr)
            .contains(DENIED)
            .then_some(())
    });

    for version in ["1.27", "1.33"] {
        // Refused with the webhook's message and code, for a built-in and a custom kind.
        // Unlabelled, a Deployment is let through.
        kubectl_ok(
            version,
            &kc,
            &[
                "create",
                "deployment",
                "web",
                "--image=busybox",
                "--dry-run=server",
                "-o",
                "name",
            ],
        );
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, labels: {deny: \"yes\"}}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox}]}\n";
        let out = kubectl_stdin(version, &kc, &["create", "-f", "-"], deployment);
        assert_refused(&out, &[DENIED]);
        let gizmo = "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g, labels: {deny: \"yes\"}}\nspec: {size: 1}\n";
        let out = kubectl_stdin(version, &kc, &["create", "-f", "-"], gizmo);
        assert_refused(&out, &[DENIED]);
        // The delete of an object labelled deny is refused, judged by its stored state.
        assert_refused(
            &kubectl_any(version, &kc, &["delete", "configmap", "kept"]),
            &[DENIED],
        );
    }

    // The mutating webhook labels new ConfigMaps and custom objects; the validating one saw
    // the mutated object.
    let out = kubectl_any(v, &kc, &["create", "configmap", "plain"]);
    assert!(out.status.success());
    // The webhook's warning reaches the client.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Warning: labelled by the test webhook"),
        "{err}"
    );
    let labels = kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "configmap",
            "plain",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert_eq!(labels, r#"{"mutated":"yes"}"#);
    let validated = hooks.reviews_of("plain").into_iter().find(|r| {
        r["request"]["operation"] == "CREATE"
            && r["request"]["object"]["metadata"]["labels"]["mutated"] == "yes"
    });
    let validated = validated.expect("the validating webhook saw the mutated ConfigMap");
    assert_eq!(validated["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(validated["request"]["kind"]["kind"], "ConfigMap");
    assert_eq!(validated["request"]["resource"]["resource"], "configmaps");
    assert_eq!(validated["request"]["namespace"], "default");
    assert_eq!(validated["request"]["options"]["kind"], "CreateOptions");
    assert!(validated["request"]["userInfo"]["username"].is_string());
    let gizmo = "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g2}\nspec: {size: 2}\n";
    apply(v, &kc, gizmo);
    let labels = kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "gizmo",
            "g2",
            "-o",
            "jsonpath={.metadata.labels.mutated}",
        ],
    );
    assert_eq!(labels, "yes");
    // An update is sent with the stored object as oldObject.
    kubectl_ok(v, &kc, &["label", "configmap", "plain", "more=1"]);
    let update = hooks
        .reviews_of("plain")
        .into_iter()
        .find(|r| r["request"]["operation"] == "UPDATE")
        .expect("an UPDATE review");
    assert_eq!(
        update["request"]["oldObject"]["metadata"]["labels"]["mutated"],
        "yes"
    );
    assert_eq!(
        update["request"]["object"]["metadata"]["labels"]["more"],
        "1"
    );

    // Opening a session is admitted as CONNECT, with the request's options as the object.
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "attach.webhooks.capstan.test",
            &url("/deny"),
            "[{operations: [CONNECT], apiGroups: [\"\"], apiVersions: [v1], resources: [pods/attach]}]",
            "",
        ),
    );
    let attach = "/api/v1/namespaces/default/pods/attached/attach?container=denied&stdout=true";
    let err = eventually("the attach webhook", || {
        let out = kubectl_stdin(v, &kc, &["create", "--raw", attach, "-f", "-"], "{}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.contains("the object is labelled deny").then_some(err)
    });
    assert!(
        err.contains("admission webhook \"attach.webhooks.capstan.test\" denied the request"),
        "{err}"
    );
    let connect = hooks
        .reviews_of("attached")
        .into_iter()
        .find(|r| r["request"]["operation"] == "CONNECT")
        .expect("a CONNECT review");
    assert_eq!(connect["request"]["subResource"], "attach");
    assert_eq!(connect["request"]["kind"]["kind"], "PodAttachOptions");
    assert_eq!(connect["request"]["object"]["stdout"], true);
    kubectl_ok(
        v,
        &kc,
        &[
            "delete",
            "validatingwebhookconfiguration",
            "attach.webhooks.capstan.test",
        ],
    );

    // Webhook configurations are never sent to webhooks: the deny webhook cannot lock itself.
    kubectl_ok(
        v,
        &kc,
        &[
            "label",
            "validatingwebhookconfiguration",
            "deny.webhooks.capstan.test",
            "deny=yes",
        ],
    );
    kubectl_ok(
        v,
        &kc,
        &[
            "delete",
            "validatingwebhookconfiguration",
            "deny.webhooks.capstan.test",
        ],
    );
    kubectl_ok(
        v,
        &kc,
        &[
            "delete",
            "mutatingwebhookconfiguration",
            "mutate.webhooks.capstan.test",
        ],
    );
    eventually("the webhooks to go", || {
        kubectl_any(v, &kc, &["delete", "configmap", "kept"])
            .status
            .success()
            .then_some(())
    });

    // Through a Service: an ExternalName to loopback, the certificate checked for its name.
    apply(
        v,
        &kc,
        "apiVersion: v1\nkind: Service\nmetadata: {name: hooks}\nspec: {type: ExternalName, externalName: localhost}\n",
    );
    let service = format!(
        "{{service: {{namespace: default, name: hooks, port: {}, path: /deny}}, caBundle: {bundle}}}",
        hooks.port
    );
    let secrets =
        "[{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [secrets]}]";
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny.webhooks.capstan.test",
            &service,
            secrets,
            "  matchConditions:\n  - {name: not-exempt, expression: \"object.metadata.name != 'exempt'\"}",
        ),
    );
    eventually("the webhook behind the Service", || {
        let out = kubectl_stdin(
            v,
            &kc,
            &["create", "--dry-run=server", "-f", "-"],
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s2, labels: {deny: \"yes\"}}\n",
        );
        String::from_utf8_lossy(&out.stderr)
            .contains(DENIED)
            .then_some(())
    });
    kubectl_ok(
        v,
        &kc,
        &[
            "create",
            "secret",
            "generic",
            "allowed",
            "--from-literal=a=b",
        ],
    );
    // A match condition that is false skips the webhook: the exempt Secret goes through.
    let exempt =
        "apiVersion: v1\nkind: Secret\nmetadata: {name: exempt, labels: {deny: \"yes\"}}\n";
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], exempt);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A condition that does not compile is refused with the configuration.
    let bad = configuration(
        "ValidatingWebhookConfiguration",
        "bad.webhooks.capstan.test",
        &service,
        secrets,
        "  matchConditions:\n  - {name: broken, expression: \"object.\"}",
    );
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &bad);
    assert_refused(
        &out,
        &[
            "webhooks[0].matchConditions[0].expression: Invalid value: \"object.\": compilation failed: ",
        ],
    );

    // A webhook that takes longer than its timeout refuses under Fail, with upstream's error.
    let slow = |policy: &str| {
        configuration(
            "ValidatingWebhookConfiguration",
            "deny.webhooks.capstan.test",
            &url("/slow"),
            secrets,
            &format!("  timeoutSeconds: 1\n  failurePolicy: {policy}"),
        )
    };
    apply(v, &kc, &slow("Fail"));
    let err = eventually("the slow webhook", || {
        let out = kubectl_any(
            v,
            &kc,
            &["create", "secret", "generic", "late", "--from-literal=a=b"],
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.contains("context deadline exceeded").then_some(err)
    });
    assert!(
        err.contains(&format!(
            "Internal error occurred: failed calling webhook \"deny.webhooks.capstan.test\": failed to call webhook: Post \"https://127.0.0.1:{}/slow?timeout=1s\": context deadline exceeded",
            hooks.port
        )),
        "{err}"
    );
    // Under Ignore the write goes through.
    apply(v, &kc, &slow("Ignore"));
    eventually("the ignored slow webhook", || {
        kubectl_any(
            v,
            &kc,
            &["create", "secret", "generic", "late", "--from-literal=a=b"],
        )
        .status
        .success()
        .then_some(())
    });

    // An answer that is not an AdmissionReview refuses under Fail.
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny.webhooks.capstan.test",
            &url("/garbage"),
            secrets,
            "",
        ),
    );
    let err = eventually("the garbage webhook", || {
        let out = kubectl_any(
            v,
            &kc,
            &["create", "secret", "generic", "junk", "--from-literal=a=b"],
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.contains("failed calling webhook").then_some(err)
    });
    assert!(
        err.contains("failed calling webhook \"deny.webhooks.capstan.test\": failed to call webhook: json parse error"),
        "{err}"
    );

    server.stop();
}

const HOSTS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: hosts.convert.example.com
spec:
  group: convert.example.com
  scope: Namespaced
  names: {plural: hosts, kind: Host}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1, v1beta1]
      clientConfig: {url: "URL", caBundle: "CA"}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {hostPort: {type: string}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {host: {type: string}, port: {type: string}}}
"#;

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}}}
"#;

/// Writes through `scale` are admitted with the `Scale` objects, as upstream's: `kubectl
/// scale` of a Deployment and of a custom object is raised to an even count by a mutating
/// webhook whose rules name `deployments/scale` and `widgets/scale`, and refused past 5
/// replicas (the mutated count) by a validating webhook whose rules name `deployments/*`,
/// with the webhook's message; the reviews carry the `autoscaling/v1` `Scale` as kind and
/// objects, the parent as resource and `scale` as subresource.
#[test]
fn scale_writes_are_admitted_with_the_scale() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let hooks = WebhookServer::start(&[]);
    let bundle = hooks.ca_bundle();
    let url = |path: &str| format!("{{url: \"{}\", caBundle: {bundle}}}", hooks.url(path));
    let v = "1.33";

    apply(v, &kc, WIDGETS);
    kubectl_ok(
        v,
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
        ],
    );
    kubectl_ok(
        v,
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=1",
        ],
    );
    apply(
        v,
        &kc,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {replicas: 1}\n",
    );
    apply(
        v,
        &kc,
        &configuration(
            "MutatingWebhookConfiguration",
            "scale-even.webhooks.capstan.test",
            &url("/scale-even"),
            "[{operations: [UPDATE], apiGroups: [apps, example.com], apiVersions: [v1], resources: [deployments/scale, widgets/scale]}]",
            "",
        ),
    );
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "scale-limit.webhooks.capstan.test",
            &url("/scale-limit"),
            "[{operations: [UPDATE], apiGroups: [apps, example.com], apiVersions: [v1], resources: [\"deployments/*\", widgets/scale]}]",
            "",
        ),
    );
    let limited = "admission webhook \"scale-limit.webhooks.capstan.test\" denied the request: scale to at most 5 replicas";
    eventually("the scale webhooks", || {
        let out = kubectl_any(
            v,
            &kc,
            &[
                "scale",
                "deployment",
                "web",
                "--replicas=9",
                "--dry-run=server",
            ],
        );
        String::from_utf8_lossy(&out.stderr)
            .contains(limited)
            .then_some(())
    });

    for version in ["1.27", "1.33"] {
        kubectl_ok(
            version,
            &kc,
            &["scale", "deployment", "web", "--replicas=2"],
        );
        // 3 is raised to 4 by the mutating webhook, and let through.
        kubectl_ok(
            version,
            &kc,
            &["scale", "deployment", "web", "--replicas=3"],
        );
        let replicas = kubectl_ok(
            version,
            &kc,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        );
        assert_eq!(replicas, "4");
        // 5 is raised to 6, which the validating webhook refuses: it judged the mutated Scale.
        assert_refused(
            &kubectl_any(
                version,
                &kc,
                &["scale", "deployment", "web", "--replicas=5"],
            ),
            &[&format!("{limited}, not 6")],
        );
        assert_refused(
            &kubectl_any(
                version,
                &kc,
                &["scale", "deployment", "web", "--replicas=9"],
            ),
            &[&format!("{limited}, not 10")],
        );
        let replicas = kubectl_ok(
            version,
            &kc,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        );
        assert_eq!(replicas, "4");
    }

    // A custom object's scale the same way (1 is raised to 2).
    kubectl_ok(v, &kc, &["scale", "widget", "w", "--replicas=1"]);
    let replicas = kubectl_ok(
        v,
        &kc,
        &["get", "widget", "w", "-o", "jsonpath={.spec.replicas}"],
    );
    assert_eq!(replicas, "2");
    assert_refused(
        &kubectl_any(v, &kc, &["scale", "widget", "w", "--replicas=7"]),
        &[&format!("{limited}, not 8")],
    );

    // What the webhooks were sent.
    let reviews = hooks.reviews_of("web");
    let mutated = reviews
        .iter()
        .find(|r| {
            r["request"]["object"]["spec"]["replicas"] == 3
                && r["request"]["oldObject"]["spec"]["replicas"] == 2
        })
        .expect("the mutating webhook's review of the scale to 3");
    let request = &mutated["request"];
    assert_eq!(
        request["kind"],
        serde_json::json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(request["requestKind"], request["kind"]);
    assert_eq!(
        request["resource"],
        serde_json::json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(request["subResource"], "scale");
    assert_eq!(request["requestSubResource"], "scale");
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["object"]["kind"], "Scale");
    assert_eq!(request["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(request["object"]["metadata"]["name"], "web");
    assert_eq!(request["oldObject"]["kind"], "Scale");
    assert_eq!(request["oldObject"]["status"]["selector"], "app=web");
    let validated = reviews
        .iter()
        .find(|r| r["request"]["object"]["spec"]["replicas"] == 4)
        .expect("the validating webhook's review of the mutated scale");
    assert_eq!(validated["request"]["kind"]["kind"], "Scale");
    assert_eq!(validated["request"]["oldObject"]["spec"]["replicas"], 2);
    let widget = hooks
        .reviews_of("w")
        .into_iter()
        .find(|r| r["request"]["resource"]["resource"] == "widgets")
        .expect("a review of the widget's scale");
    assert_eq!(widget["request"]["kind"]["kind"], "Scale");
    assert_eq!(widget["request"]["subResource"], "scale");
}

const GADGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
"#;

/// `matchPolicy`: webhooks and a ValidatingAdmissionPolicy whose rules name only `v1` of a
/// two-version CRD get writes made through `v1beta1` under `Equivalent` (the default), sent
/// the object converted to `v1` with `kind`/`resource` in `v1` and
/// `requestKind`/`requestResource` in `v1beta1`; a mutating webhook's patch of the `v1`
/// object lands in the object written through `v1beta1`; an `Exact` webhook gets only writes
/// through `v1`.
#[test]
fn equivalent_match_policy_reaches_other_versions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let hooks = WebhookServer::start(&[]);
    let bundle = hooks.ca_bundle();
    let url = |path: &str| format!("{{url: \"{}\", caBundle: {bundle}}}", hooks.url(path));
    let v = "1.33";
    apply(v, &kc, GADGETS);
    kubectl_ok(
        v,
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gadgets.example.com",
        ],
    );
    let v1_only = "[{operations: [CREATE, UPDATE], apiGroups: [example.com], apiVersions: [v1], resources: [gadgets]}]";
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny.webhooks.capstan.test",
            &url("/deny"),
            v1_only,
            "",
        ),
    );
    apply(
        v,
        &kc,
        &configuration(
            "ValidatingWebhookConfiguration",
            "exact.webhooks.capstan.test",
            &url("/exact"),
            v1_only,
            "  matchPolicy: Exact",
        ),
    );
    apply(
        v,
        &kc,
        &configuration(
            "MutatingWebhookConfiguration",
            "mutate.webhooks.capstan.test",
            &url("/mutate"),
            v1_only,
            "",
        ),
    );
    apply(
        v,
        &kc,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: gadget-size}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [gadgets]}
  validations:
  - expression: object.spec.size < 10
    messageExpression: "'size ' + string(object.spec.size) + ' seen as ' + object.apiVersion + ' through ' + request.resource.version + ', requested ' + request.requestResource.version + ' ' + request.requestKind.version"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: gadget-size}
spec: {policyName: gadget-size, validationActions: [Deny]}
"#,
    );
    let gadget = |name: &str, version: &str, labels: &str, size: i64| {
        format!(
            "apiVersion: example.com/{version}\nkind: Gadget\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec: {{size: {size}}}\n"
        )
    };
    // A write through v1beta1 reaches the webhook whose rules name v1 only.
    eventually("the webhooks through v1beta1", || {
        let out = kubectl_stdin(
            v,
            &kc,
            &["create", "--dry-run=server", "-f", "-"],
            &gadget("probe", "v1beta1", "deny: \"yes\"", 1),
        );
        String::from_utf8_lossy(&out.stderr)
            .contains(DENIED)
            .then_some(())
    });
    eventually("the policy through v1beta1", || {
        let out = kubectl_stdin(
            v,
            &kc,
            &["create", "--dry-run=server", "-f", "-"],
            &gadget("probe", "v1beta1", "", 20),
        );
        String::from_utf8_lossy(&out.stderr)
            .contains("ValidatingAdmissionPolicy 'gadget-size' with binding 'gadget-size' denied request: size 20 seen as example.com/v1 through v1, requested v1beta1 v1beta1")
            .then_some(())
    });

    // Created through v1beta1: mutated through v1, the label lands on the object.
    let out = kubectl_stdin(
        v,
        &kc,
        &["create", "-f", "-"],
        &gadget("b", "v1beta1", "", 2),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let labels = kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "gadgets.v1beta1.example.com",
            "b",
            "-o",
            "jsonpath={.metadata.labels.mutated}",
        ],
    );
    assert_eq!(labels, "yes");
    let reviews = hooks.reviews_of("b");
    let gvk = |version: &str| serde_json::json!({"group": "example.com", "version": version, "kind": "Gadget"});
    let gvr = |version: &str| serde_json::json!({"group": "example.com", "version": version, "resource": "gadgets"});
    for path in ["/mutate", "/deny"] {
        let review = reviews
            .iter()
            .find(|r| r["path"] == path)
            .unwrap_or_else(|| panic!("no review at {path}: {reviews:?}"));
        let request = &review["request"];
        assert_eq!(request["kind"], gvk("v1"), "{path}");
        assert_eq!(request["resource"], gvr("v1"), "{path}");
        assert_eq!(request["requestKind"], gvk("v1beta1"), "{path}");
        assert_eq!(request["requestResource"], gvr("v1beta1"), "{path}");
        assert_eq!(request["object"]["apiVersion"], "example.com/v1", "{path}");
    }
    // The validating webhook saw the mutated object.
    let denied = reviews.iter().find(|r| r["path"] == "/deny").unwrap();
    assert_eq!(
        denied["request"]["object"]["metadata"]["labels"]["mutated"],
        "yes"
    );
    // The Exact webhook was not called through v1beta1, and is through v1.
    assert!(
        !reviews.iter().any(|r| r["path"] == "/exact"),
        "{reviews:?}"
    );
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &gadget("c", "v1", "", 2));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exact = hooks
        .reviews_of("c")
        .into_iter()
        .find(|r| r["path"] == "/exact")
        .expect("the Exact webhook's review through v1");
    assert_eq!(exact["request"]["kind"], gvk("v1"));
    assert_eq!(exact["request"]["requestKind"], gvk("v1"));
    // An update through v1beta1 is sent with both objects in v1.
    kubectl_ok(
        v,
        &kc,
        &["label", "gadgets.v1beta1.example.com", "b", "more=1"],
    );
    let update = hooks
        .reviews_of("b")
        .into_iter()
        .find(|r| r["path"] == "/deny" && r["request"]["operation"] == "UPDATE")
        .expect("an UPDATE review");
    assert_eq!(
        update["request"]["oldObject"]["apiVersion"],
        "example.com/v1"
    );
    assert_eq!(
        update["request"]["object"]["metadata"]["labels"]["more"],
        "1"
    );
    assert_eq!(update["request"]["requestKind"], gvk("v1beta1"));
}

/// A CRD whose versions a webhook converts: an object written in either version is stored in
/// the storage version and read in both; lists of objects written in different versions
/// convert as one; the webhook's refusal is upstream's error.
#[test]
fn custom_resources_convert_through_their_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let hooks = WebhookServer::start(&[]);
    let crd = HOSTS_CRD
        .replace("URL", &hooks.url("/convert"))
        .replace("CA", &hooks.ca_bundle());
    for version in ["1.27", "1.33"] {
        apply(version, &kc, &crd);
        kubectl_ok(
            version,
            &kc,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                "crd/hosts.convert.example.com",
            ],
        );
        let get = |resource: &str, name: &str, path: &str| {
            let path = format!("jsonpath={path}");
            let mut args = vec!["get", resource];
            if !name.is_empty() {
                args.push(name);
            }
            args.extend(["-o", &path]);
            kubectl_ok(version, &kc, &args)
        };
        eventually("the v1 object to be created", || {
            let out = kubectl_stdin(
                version,
                &kc,
                &["apply", "-f", "-"],
                "apiVersion: convert.example.com/v1\nkind: Host\nmetadata: {name: one}\nspec: {hostPort: \"localhost:8080\"}\n",
            );
            out.status.success().then_some(())
        });
        // Read in the other version: converted by the webhook.
        assert_eq!(
            get(
                "hosts.v2.convert.example.com",
                "one",
                "{.apiVersion} {.spec.host} {.spec.port}"
            ),
            "convert.example.com/v2 localhost 8080"
        );
        // Written in v2, stored (and read) in v1.
        apply(
            version,
            &kc,
            "apiVersion: convert.example.com/v2\nkind: Host\nmetadata: {name: two}\nspec: {host: example.org, port: \"443\"}\n",
        );
        assert_eq!(
            get(
                "hosts.v1.convert.example.com",
                "two",
                "{.apiVersion} {.spec.hostPort}"
            ),
            "convert.example.com/v1 example.org:443"
        );
        // Lists of objects written in different versions, in either version.
        assert_eq!(
            get(
                "hosts.v2.convert.example.com",
                "",
                "{range .items[*]}{.metadata.name}={.spec.host}:{.spec.port} {end}"
            ),
            "one=localhost:8080 two=example.org:443 "
        );
        assert_eq!(
            get(
                "hosts.v1.convert.example.com",
                "",
                "{range .items[*]}{.metadata.name}={.spec.hostPort} {end}"
            ),
            "one=localhost:8080 two=example.org:443 "
        );
        // Updates through v2 keep metadata and reach the storage version.
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "hosts.v2.convert.example.com",
                "two",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"seen":"yes"}},"spec":{"port":"8443"}}"#,
            ],
        );
        assert_eq!(
            get(
                "hosts.v1.convert.example.com",
                "two",
                "{.metadata.labels.seen} {.spec.hostPort}"
            ),
            "yes example.org:8443"
        );
        let review = hooks
            .reviews
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|r| r["kind"] == "ConversionReview")
            .cloned()
            .unwrap();
        assert_eq!(review["apiVersion"], "apiextensions.k8s.io/v1");

        // The storage version moves to v2: objects stored in v1 stay, and each is read from
        // the version it is in.
        kubectl_ok(
            version,
            &kc,
            &[
                "patch",
                "crd",
                "hosts.convert.example.com",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
            ],
        );
        eventually("v2 to be recorded as stored", || {
            let stored = kubectl_ok(
                version,
                &kc,
                &[
                    "get",
                    "crd",
                    "hosts.convert.example.com",
                    "-o",
                    "jsonpath={.status.storedVersions}",
                ],
            );
            (stored == r#"["v1","v2"]"#).then_some(())
        });
        apply(
            version,
            &kc,
            "apiVersion: convert.example.com/v1\nkind: Host\nmetadata: {name: four}\nspec: {hostPort: \"b:2\"}\n",
        );
        eventually("lists to convert objects stored in either version", || {
            let v2 = get(
                "hosts.v2.convert.example.com",
                "",
                "{range .items[*]}{.apiVersion}={.spec.host}:{.spec.port} {end}",
            );
            let v1 = get(
                "hosts.v1.convert.example.com",
                "",
                "{range .items[*]}{.apiVersion}={.spec.hostPort} {end}",
            );
            (v2 == "convert.example.com/v2=b:2 convert.example.com/v2=localhost:8080 convert.example.com/v2=example.org:8443 "
                && v1 == "convert.example.com/v1=b:2 convert.example.com/v1=localhost:8080 convert.example.com/v1=example.org:8443 ")
                .then_some(())
        });

        // A refusal is upstream's error: here on a write through v1, which must convert to
        // the storage version.
        let refused = kubectl_stdin(
            version,
            &kc,
            &["apply", "-f", "-"],
            "apiVersion: convert.example.com/v1\nkind: Host\nmetadata: {name: three, labels: {convert: refuse}}\nspec: {hostPort: \"a:1\"}\n",
        );
        assert_refused(
            &refused,
            &[
                "conversion webhook for convert.example.com/v1, Kind=Host failed: the object refuses conversion",
            ],
        );
        kubectl_ok(
            version,
            &kc,
            &["delete", "crd", "hosts.convert.example.com"],
        );
        eventually("the CRD to go", || {
            let out = kubectl(version, &kc, &["get", "crd", "hosts.convert.example.com"]);
            (!out.status.success()).then_some(())
        });
    }
    server.stop();
}

/// A policy limiting Deployments' replicas to a ConfigMap's `maxReplicas`, bound with Deny in
/// namespaces labelled `environment: test`.
const REPLICA_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  variables:
  - {name: max, expression: "int(params.data.maxReplicas)"}
  validations:
  - expression: "object.spec.replicas <= variables.max"
    messageExpression: "'replicas must be no greater than ' + string(variables.max)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit-binding
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: replica-limits, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {environment: test}
"#;

/// A policy on ConfigMaps: a `debug` key warned about, a labelled one kept from deletion, and
/// a validation that fails to evaluate under the failure policy given.
fn configmap_policy(failure_policy: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: configmaps
spec:
  failurePolicy: {failure_policy}
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE, DELETE], resources: [configmaps]}}
  matchConditions:
  - {{name: policed, expression: "(request.operation == 'DELETE' ? oldObject : object).metadata.name.startsWith('policed-')"}}
  validations:
  - expression: "request.operation == 'DELETE' || !has(object.data) || !('debug' in object.data)"
    message: no debug settings
  - expression: "request.operation == 'CREATE' || !has(oldObject.metadata.labels) || !('keep' in oldObject.metadata.labels) || oldObject.metadata.labels.keep != 'yes'"
    message: this ConfigMap is kept
    reason: Forbidden
  - expression: "request.operation == 'DELETE' || !has(object.data) || !('broken' in object.data) || object.data.nothing == 'x'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: configmaps-warn
spec:
  policyName: configmaps
  validationActions: [Warn]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: configmaps-deny
spec:
  policyName: configmaps
  validationActions: [Deny, Audit]
  matchResources:
    objectSelector:
      matchLabels: {{enforce: "yes"}}
"#
    )
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: limited}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: registry.local/web:1}]}
"#;

#[test]
fn validating_admission_policies_refuse_and_warn() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let v = "1.33";

    // Bad policies and bindings are refused with upstream's messages.
    let bad = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bad}
spec:
  failurePolicy: Sometimes
  validations: [{expression: "object.spec.replicas <="}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bad}
spec: {policyName: bad, validationActions: [Deny, Warn]}
"#;
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], bad);
    assert_refused(
        &out,
        &[
            "spec.failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
            "spec.matchConstraints: Required value",
            "spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: ",
            "spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\"}: must not contain both Deny and Warn",
        ],
    );

    // A Deployment over the limit of the policy's parameters is refused, for both kubectl
    // versions, once its parameters exist; before, the binding cannot be configured.
    apply(v, &kc, REPLICA_POLICY);
    let tables = kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "validatingadmissionpolicies,validatingadmissionpolicybindings",
        ],
    );
    assert!(
        tables.contains("replica-limit   1             v1/ConfigMap"),
        "{tables}"
    );
    assert!(
        tables.contains("replica-limit-binding   replica-limit   */replica-limits"),
        "{tables}"
    );
    kubectl_ok(v, &kc, &["create", "namespace", "limited"]);
    kubectl_ok(
        v,
        &kc,
        &["label", "namespace", "limited", "environment=test"],
    );
    let ten = DEPLOYMENT.replace("REPLICAS", "10");
    let out = kubectl_stdin(v, &kc, &["apply", "-f", "-"], &ten);
    assert_refused(
        &out,
        &[
            "The deployments \"web\" is invalid: : ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
        ],
    );
    kubectl_ok(
        v,
        &kc,
        &[
            "-n",
            "limited",
            "create",
            "configmap",
            "replica-limits",
            "--from-literal=maxReplicas=3",
        ],
    );
    for version in ["1.27", "1.33"] {
        let out = kubectl_stdin(version, &kc, &["apply", "-f", "-"], &ten);
        assert_refused(
            &out,
            &[
                "The deployments \"web\" is invalid: : ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: replicas must be no greater than 3",
            ],
        );
    }
    apply(v, &kc, &DEPLOYMENT.replace("REPLICAS", "2"));
    // Updates are judged too; another namespace is not bound.
    assert_refused(
        &kubectl_any(
            v,
            &kc,
            &[
                "-n",
                "limited",
                "patch",
                "deployment",
                "web",
                "-p",
                "{\"spec\":{\"replicas\":4}}",
            ],
        ),
        &["replicas must be no greater than 3"],
    );
    kubectl_ok(
        v,
        &kc,
        &["create", "deployment", "free", "--image=x", "--replicas=10"],
    );
    // Without its binding the policy has nothing to say.
    kubectl_ok(
        v,
        &kc,
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "replica-limit-binding",
        ],
    );
    apply(v, &kc, &ten);

    // Warn: the write succeeds with upstream's warning; Deny on the objects it selects.
    apply(v, &kc, &configmap_policy("Fail"));
    let out = kubectl(
        v,
        &kc,
        &["create", "configmap", "policed-a", "--from-literal=debug=1"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'configmaps' with binding 'configmaps-warn': no debug settings"),
        "{err}"
    );
    // A match condition that is false skips the policy.
    let out = kubectl(
        v,
        &kc,
        &["create", "configmap", "other", "--from-literal=debug=1"],
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let enforced = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: NAME, labels: {enforce: \"yes\", keep: \"yes\"}}\ndata: {DATA: \"1\"}\n";
    let out = kubectl_stdin(
        v,
        &kc,
        &["create", "-f", "-"],
        &enforced
            .replace("NAME", "policed-b")
            .replace("DATA", "debug"),
    );
    assert_refused(
        &out,
        &[
            "configmaps \"policed-b\" is invalid: : ValidatingAdmissionPolicy 'configmaps' with binding 'configmaps-deny' denied request: no debug settings",
        ],
    );
    // A validation that fails to evaluate refuses under Fail and is skipped under Ignore.
    let broken = enforced
        .replace("NAME", "policed-c")
        .replace("DATA", "broken");
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &broken);
    assert_refused(
        &out,
        &[
            "ValidatingAdmissionPolicy 'configmaps' with binding 'configmaps-deny' denied request: expression 'request.operation == 'DELETE' || !has(object.data) || !('broken' in object.data) || object.data.nothing == 'x'' resulted in error: ",
        ],
    );
    apply(v, &kc, &configmap_policy("Ignore"));
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &broken);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Deletes are judged on the stored object, with the validation's reason.
    assert_refused(
        &kubectl_any(v, &kc, &["delete", "configmap", "policed-c"]),
        &[
            "configmaps \"policed-c\" is forbidden: ValidatingAdmissionPolicy 'configmaps' with binding 'configmaps-deny' denied request: this ConfigMap is kept",
        ],
    );
    kubectl_ok(v, &kc, &["label", "configmap", "policed-c", "keep-"]);
    kubectl_ok(v, &kc, &["delete", "configmap", "policed-c"]);
    server.stop();
}

fn api_service(name: &str, group: &str, version: &str, service: &str, bundle: &str) -> String {
    format!(
        r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {name}}}
spec:
  group: {group}
  version: {version}
  service: {service}
  caBundle: {bundle}
  groupPriorityMinimum: 2000
  versionPriority: 10
"#
    )
}

#[test]
fn api_services_pass_requests_to_extension_api_servers() {
    use common::extension::ExtensionServer;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let v = "1.33";

    // Local APIServices for the built-in group-versions, available once the availability
    // controller has looked at them (its first pass runs as the server starts).
    common::eventually("the local APIServices to be available", || {
        let listed = kubectl_ok(v, &kc, &["get", "apiservices"]);
        listed
            .contains("v1.apps                           Local     True")
            .then_some(())
    });
    // Bad APIServices are refused with upstream's messages.
    let bad = api_service(
        "v1.wrong",
        "wardle.example.com",
        "v1alpha1",
        "{namespace: default, name: wardle}",
        "\"\"",
    )
    .replace("groupPriorityMinimum: 2000", "groupPriorityMinimum: 0");
    let out = kubectl_stdin(v, &kc, &["create", "-f", "-"], &bad);
    assert_refused(
        &out,
        &[
            "metadata.name: Invalid value: \"v1.wrong\": must be `spec.version+\".\"+spec.group`: \"v1alpha1.wardle.example.com\"",
            "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
        ],
    );

    // The extension API server trusts the front proxy CA the cluster publishes.
    let front_proxy_ca = kubectl_ok(
        v,
        &kc,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "extension-apiserver-authentication",
            "-o",
            "jsonpath={.data.requestheader-client-ca-file}",
        ],
    );
    let wardle = ExtensionServer::start(&["wardle.default.svc"], &front_proxy_ca);
    apply(
        v,
        &kc,
        "apiVersion: v1\nkind: Service\nmetadata: {name: wardle, namespace: default}\nspec: {type: ExternalName, externalName: localhost}\n",
    );
    let service = format!(
        "{{namespace: default, name: wardle, port: {}}}",
        wardle.port
    );
    apply(
        v,
        &kc,
        &api_service(
            "v1alpha1.wardle.example.com",
            "wardle.example.com",
            "v1alpha1",
            &service,
            &wardle.ca_bundle(),
        ),
    );
    kubectl_ok(
        v,
        &kc,
        &[
            "wait",
            "--for=condition=Available",
            "--timeout=60s",
            "apiservice/v1alpha1.wardle.example.com",
        ],
    );
    let row = kubectl_ok(
        v,
        &kc,
        &["get", "apiservice", "v1alpha1.wardle.example.com"],
    );
    assert!(row.contains("default/wardle   True"), "{row}");

    // Discovery lists the group and its resources, legacy and aggregated; requests reach the
    // extension API server as the user this server authenticated.
    for version in ["1.27", "1.33"] {
        let resources = kubectl_ok(
            version,
            &kc,
            &["api-resources", "--api-group=wardle.example.com"],
        );
        assert!(
            resources.contains("flunders") && resources.contains("Flunder"),
            "kubectl {version}: {resources}"
        );
        let got = kubectl_ok(version, &kc, &["get", "flunders", "-o", "json"]);
        let list: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(
            list["items"][0]["metadata"]["name"], "seen-by-system-admin",
            "kubectl {version}: {got}"
        );
        let groups = list["items"][0]["spec"]["groups"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            groups.contains(&"system:masters".into())
                && groups.contains(&"system:authenticated".into()),
            "{groups:?}"
        );
    }
    // A user's UID goes along as X-Remote-Uid (upstream 1.33's default), which the published
    // configuration names; the admin's certificate carries none, so none is sent for it.
    kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "flunders",
            "--as=jane",
            "--as-group=system:masters",
            "--as-uid=jane-uid-7",
        ],
    );
    let uid_headers = kubectl_ok(
        v,
        &kc,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "extension-apiserver-authentication",
            "-o",
            "jsonpath={.data.requestheader-uid-headers}",
        ],
    );
    assert_eq!(uid_headers.trim(), r#"["X-Remote-Uid"]"#);
    let seen = wardle.seen_under("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders");
    assert!(
        seen.iter().all(|s| s.header("authorization").is_empty()),
        "credentials passed on"
    );
    assert!(
        seen.iter()
            .any(|s| s.header("x-remote-user") == ["jane"]
                && s.header("x-remote-uid") == ["jane-uid-7"]),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .filter(|s| s.header("x-remote-user") == ["system:admin"])
            .all(|s| s.header("x-remote-uid").is_empty()),
        "{seen:?}"
    );
    let versions = kubectl_ok(v, &kc, &["api-versions"]);
    assert!(
        versions.contains("wardle.example.com/v1alpha1"),
        "{versions}"
    );

    // Authorization happens here first: a user with no grant never reaches it.
    assert_refused(
        &kubectl_any(v, &kc, &["get", "flunders", "--as=nobody"]),
        &[
            "flunders.wardle.example.com is forbidden: User \"nobody\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"default\"",
        ],
    );

    // An APIService whose Service is missing is unavailable, with upstream's reason, and its
    // requests are answered 503.
    apply(
        v,
        &kc,
        &api_service(
            "v1.gone.example.com",
            "gone.example.com",
            "v1",
            "{namespace: default, name: gone}",
            &wardle.ca_bundle(),
        ),
    );
    let row = eventually("the missing service's APIService to be unavailable", || {
        let row = kubectl_ok(v, &kc, &["get", "apiservice", "v1.gone.example.com"]);
        row.contains("False (ServiceNotFound)").then_some(row)
    });
    assert!(row.contains("default/gone"), "{row}");
    let message = kubectl_ok(
        v,
        &kc,
        &[
            "get",
            "apiservice",
            "v1.gone.example.com",
            "-o",
            "jsonpath={.status.conditions[0].message}",
        ],
    );
    assert_eq!(message, "service/gone in \"default\" is not present");
    let out = kubectl_any(v, &kc, &["get", "--raw", "/apis/gone.example.com/v1"]);
    assert_refused(
        &out,
        &["the server is currently unable to handle the request"],
    );
    kubectl_ok(v, &kc, &["delete", "apiservice", "v1.gone.example.com"]);
    server.stop();
}
