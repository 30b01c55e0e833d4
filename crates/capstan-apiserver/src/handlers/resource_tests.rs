//! The REST semantics of the generic registry, exercised in process through [`Api::serve`] on
//! a temporary SQLite store: one request at a time, asserting on codes, bodies and stored state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::Request;
use capstan_api::RequestInfo;
use capstan_store::Store;
use serde_json::{Value, json};

use super::Api;

pub(super) struct Harness {
    pub(super) api: Api,
    store: Store,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub(super) async fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let (api, store) = crate::test_support::bootstrapped(dir.path(), false).await;
        // The service account controller's work: pods in `default` need its `default`
        // service account (ServiceAccount admission).
        api.registry("", "v1", "serviceaccounts")
            .unwrap()
            .create(
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default"}}),
                &crate::registry::WriteOptions::default(),
            )
            .await
            .unwrap();
        Harness {
            api,
            store,
            _dir: dir,
        }
    }

    pub(super) async fn call(
        &self,
        method: &str,
        uri: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let info = RequestInfo::new(method, path, query);
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(body)
            .unwrap();
        let response = self.api.serve(&info, request).await;
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Sends a body as written (JSON with repeated keys, YAML); returns the code, the answer and
    /// the `Warning` headers.
    pub(super) async fn send(
        &self,
        method: &str,
        uri: &str,
        content_type: &str,
        body: &str,
    ) -> (u16, Value, Vec<String>) {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let info = RequestInfo::new(method, path, query);
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(Body::from(body.to_owned()))
            .unwrap();
        let response = self.api.serve(&info, request).await;
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .unwrap();
        let answer = serde_json::from_slice(&bytes)
            .or_else(|_| serde_saphyr::from_slice(&bytes))
            .unwrap_or(Value::Null);
        (code, answer, warnings)
    }

    pub(super) async fn get(&self, uri: &str) -> (u16, Value) {
        self.call("GET", uri, "application/json", None).await
    }
    pub(super) async fn post(&self, uri: &str, body: Value) -> (u16, Value) {
        self.call("POST", uri, "application/json", Some(body)).await
    }
    pub(super) async fn put(&self, uri: &str, body: Value) -> (u16, Value) {
        self.call("PUT", uri, "application/json", Some(body)).await
    }
    pub(super) async fn delete(&self, uri: &str, body: Option<Value>) -> (u16, Value) {
        self.call("DELETE", uri, "application/json", body).await
    }
    pub(super) async fn patch(&self, uri: &str, kind: &str, body: Value) -> (u16, Value) {
        self.call("PATCH", uri, kind, Some(body)).await
    }
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn create_fills_system_fields_and_refuses_duplicates() {
    let h = Harness::new().await;
    let (code, created) = h.post(CMS, cm("a", json!({"k": "v"}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(created["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert!(
        created["metadata"].get("generation").is_none(),
        "configmaps have no generation"
    );
    let (code, body) = h.post(CMS, cm("a", json!({}))).await;
    assert_eq!(code, 409);
    assert_eq!(body["reason"], "AlreadyExists");
    assert_eq!(body["message"], "configmaps \"a\" already exists");

    let (code, generated) = h
        .post(
            CMS,
            json!({"metadata": {"generateName": "web-"}, "data": {}}),
        )
        .await;
    assert_eq!(code, 201);
    let name = generated["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");

    let (code, body) = h.post(CMS, json!({"metadata": {}, "data": {}})).await;
    assert_eq!(code, 422);
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name");

    let (code, body) = h
        .post(
            CMS,
            json!({"metadata": {"name": "x", "resourceVersion": "5"}}),
        )
        .await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    let (code, body) = h
        .post(
            CMS,
            json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = h
        .post(
            CMS,
            json!({"metadata": {"name": "x", "namespace": "other"}}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = h
        .post("/api/v1/namespaces/missing/configmaps", cm("x", json!({})))
        .await;
    assert_eq!(code, 404);
    assert_eq!(body["message"], "namespaces \"missing\" not found");
}

#[tokio::test]
async fn updates_are_compare_and_swap_and_no_ops_keep_the_version() {
    let h = Harness::new().await;
    let (_, created) = h.post(CMS, cm("a", json!({"k": "1"}))).await;
    let mut next = created.clone();
    next["data"]["k"] = "2".into();
    let (code, updated) = h.put(&format!("{CMS}/a"), next.clone()).await;
    assert_eq!(code, 200);
    assert!(rv(&updated) > rv(&created));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);

    // The same body again, with the old version: a conflict.
    let (code, body) = h.put(&format!("{CMS}/a"), next).await;
    assert_eq!(code, 409);
    assert_eq!(
        body["message"],
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Writing what is stored changes nothing, not even the version.
    let (code, same) = h.put(&format!("{CMS}/a"), updated.clone()).await;
    assert_eq!(code, 200);
    assert_eq!(rv(&same), rv(&updated));
    assert_eq!(h.store.current_revision().await.unwrap(), rv(&updated));

    // Without a resourceVersion the update is unconditional.
    let (code, _) = h.put(&format!("{CMS}/a"), cm("a", json!({"k": "3"}))).await;
    assert_eq!(code, 200);

    // ConfigMaps are not created by PUT; services are (201, then 200).
    let (code, _) = h.put(&format!("{CMS}/nope"), cm("nope", json!({}))).await;
    assert_eq!(code, 404);
    let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
    let (code, _) = h
        .put("/api/v1/namespaces/default/services/s", svc.clone())
        .await;
    assert_eq!(code, 201);
    let (code, _) = h.put("/api/v1/namespaces/default/services/s", svc).await;
    assert_eq!(code, 200);

    // The name in the body must be the name in the URL.
    let (code, _) = h.put(&format!("{CMS}/a"), cm("b", json!({}))).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn status_is_written_apart_and_generation_counts_spec_changes() {
    let h = Harness::new().await;
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 9}
    });
    let url = "/apis/apps/v1/namespaces/default/deployments";
    let (code, created) = h.post(url, deploy).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["generation"], 1);
    // The status set on create is dropped (Go's zero status stays: `{}`).
    assert_eq!(
        created.get("status"),
        Some(&json!({})),
        "status is not set on create: {created}"
    );

    let mut with_status = created.clone();
    with_status["status"] = json!({"replicas": 1, "observedGeneration": 1});
    with_status["spec"]["replicas"] = 5.into();
    let (code, after_status) = h.put(&format!("{url}/d/status"), with_status).await;
    assert_eq!(code, 200, "{after_status}");
    assert_eq!(after_status["status"]["replicas"], 1);
    assert_eq!(
        after_status["spec"]["replicas"], 1,
        "the status endpoint keeps the spec"
    );
    assert_eq!(after_status["metadata"]["generation"], 1);

    let mut scaled = after_status.clone();
    scaled["spec"]["replicas"] = 3.into();
    scaled["status"] = json!({});
    let (code, after_spec) = h.put(&format!("{url}/d"), scaled).await;
    assert_eq!(code, 200);
    assert_eq!(after_spec["spec"]["replicas"], 3);
    assert_eq!(
        after_spec["status"]["replicas"], 1,
        "the main endpoint keeps the status"
    );
    assert_eq!(after_spec["metadata"]["generation"], 2);

    let (code, relabeled) = h
        .patch(
            &format!("{url}/d"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        relabeled["metadata"]["generation"], 2,
        "metadata changes keep the generation"
    );
}

#[tokio::test]
async fn patches_merge_and_json_and_fail_cleanly() {
    let h = Harness::new().await;
    h.post(CMS, cm("p", json!({"a": "1", "b": "2"}))).await;
    let url = format!("{CMS}/p");
    let (code, merged) = h
        .patch(
            &url,
            "application/merge-patch+json",
            json!({"data": {"a": null, "c": "3"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(merged["data"], json!({"b": "2", "c": "3"}));
    let (code, patched) = h
        .patch(
            &url,
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/data/b", "value": "x"}]),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(patched["data"]["b"], "x");
    let (code, body) = h
        .patch(
            &url,
            "application/json-patch+json",
            json!([{"op": "test", "path": "/data/b", "value": "nope"}]),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = h
        .patch(
            &url,
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "1"}, "data": {}}),
        )
        .await;
    assert_eq!(
        code, 409,
        "a patch pinning an old version conflicts: {body}"
    );
    let (code, _) = h.patch(&url, "text/plain", json!({})).await;
    assert_eq!(code, 415);
    let (code, _) = h
        .patch(
            &format!("{CMS}/missing"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn deletes_honour_preconditions_finalizers_and_grace() {
    let h = Harness::new().await;
    let (_, created) = h.post(CMS, cm("d", json!({}))).await;
    let (code, body) = h
        .delete(
            &format!("{CMS}/d"),
            Some(json!({"preconditions": {"uid": "other"}})),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = h
        .delete(
            &format!("{CMS}/d"),
            Some(json!({"preconditions": {"uid": created["metadata"]["uid"]}})),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(body["status"], "Success");
    assert_eq!(body["details"]["name"], "d");
    assert_eq!(h.get(&format!("{CMS}/d")).await.0, 404);

    // Finalizers keep an object until the last one is removed.
    let mut held = cm("f", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.post(CMS, held).await;
    let (code, pending) = h.delete(&format!("{CMS}/f"), None).await;
    assert_eq!(code, 200);
    assert!(
        pending["metadata"]["deletionTimestamp"].is_string(),
        "{pending}"
    );
    assert_eq!(h.get(&format!("{CMS}/f")).await.0, 200);
    let (code, body) = h
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold", "new"]}}),
        )
        .await;
    assert_eq!(code, 422, "no new finalizers while deleting: {body}");
    let (code, _) = h
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(h.get(&format!("{CMS}/f")).await.0, 404);

    // Foreground propagation is recorded as the garbage collector's finalizer.
    h.post(CMS, cm("g", json!({}))).await;
    let (code, pending) = h
        .delete(&format!("{CMS}/g?propagationPolicy=Foreground"), None)
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        pending["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let (code, _) = h
        .delete(&format!("{CMS}/g?propagationPolicy=Sideways"), None)
        .await;
    assert_eq!(code, 422);

    // A scheduled pod is deleted gracefully; an unscheduled one at once.
    let pod = |name: &str, node: Option<&str>| {
        let mut pod = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = node.into();
        }
        pod
    };
    let pods = "/api/v1/namespaces/default/pods";
    h.post(pods, pod("scheduled", Some("n1"))).await;
    h.post(pods, pod("pending", None)).await;
    let (code, terminating) = h.delete(&format!("{pods}/scheduled"), None).await;
    assert_eq!(code, 200);
    assert_eq!(terminating["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(h.get(&format!("{pods}/scheduled")).await.0, 200);
    let (code, gone) = h.delete(&format!("{pods}/pending"), None).await;
    assert_eq!(code, 200);
    assert_eq!(gone["kind"], "Pod", "pods answer a delete with the object");
    assert_eq!(h.get(&format!("{pods}/pending")).await.0, 404);
    let (code, _) = h
        .delete(&format!("{pods}/scheduled?gracePeriodSeconds=0"), None)
        .await;
    assert_eq!(code, 200);
    assert_eq!(h.get(&format!("{pods}/scheduled")).await.0, 404);
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let h = Harness::new().await;
    let before = h.store.current_revision().await.unwrap();
    let (code, body) = h
        .post(&format!("{CMS}?dryRun=All"), cm("dry", json!({})))
        .await;
    assert_eq!(code, 201);
    assert_eq!(body["metadata"]["name"], "dry");
    assert_eq!(h.get(&format!("{CMS}/dry")).await.0, 404);
    h.post(CMS, cm("wet", json!({"a": "1"}))).await;
    let after_create = h.store.current_revision().await.unwrap();
    assert!(after_create > before);
    let (code, _) = h
        .put(
            &format!("{CMS}/wet?dryRun=All"),
            cm("wet", json!({"a": "2"})),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = h.delete(&format!("{CMS}/wet?dryRun=All"), None).await;
    assert_eq!(code, 200);
    assert_eq!(h.get(&format!("{CMS}/wet")).await.1["data"]["a"], "1");
    assert_eq!(h.store.current_revision().await.unwrap(), after_create);
    assert_eq!(
        h.post(&format!("{CMS}?dryRun=Some"), cm("x", json!({})))
            .await
            .0,
        422
    );
}

#[tokio::test]
async fn field_validation_strict_rejects_unknown_fields() {
    let h = Harness::new().await;
    let mut body = cm("u", json!({}));
    body["spec"] = json!({"x": 1});
    let (code, status) = h
        .post(&format!("{CMS}?fieldValidation=Strict"), body.clone())
        .await;
    assert_eq!(code, 400);
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\""
    );
    let (code, created) = h.post(&format!("{CMS}?fieldValidation=Ignore"), body).await;
    assert_eq!(code, 201);
    assert!(created.get("spec").is_none());
}

/// A ConfigMap that names `metadata.name` and `data.k` twice and has an unknown `spec`.
const REPEATING_CM: &str = r#"{"apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "first", "name": "dup"},
    "spec": {"x": 1},
    "data": {"k": "1", "other": "o", "k": "2"}}"#;

const REPEATING_PROBLEMS: [&str; 3] = [
    r#"duplicate field "metadata.name""#,
    r#"unknown field "spec""#,
    r#"duplicate field "data.k""#,
];

fn warning_headers(texts: &[&str]) -> Vec<String> {
    texts
        .iter()
        .map(|t| format!("299 - \"{}\"", t.replace('"', "\\\"")))
        .collect()
}

#[tokio::test]
async fn field_validation_reports_repeated_json_fields_on_create() {
    let h = Harness::new().await;
    let json = "application/json";
    let (code, status, warnings) = h
        .send(
            "POST",
            &format!("{CMS}?fieldValidation=Strict"),
            json,
            REPEATING_CM,
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: {}",
            REPEATING_PROBLEMS.join(", ")
        )
    );
    assert!(warnings.is_empty());
    assert_eq!(h.get(&format!("{CMS}/dup")).await.0, 404);

    // Warn is the default: the object is written, the last value winning, with a warning each.
    let (code, created, warnings) = h.send("POST", CMS, json, REPEATING_CM).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["name"], "dup");
    assert_eq!(created["data"], json!({"k": "2", "other": "o"}));
    assert!(created.get("spec").is_none());
    assert_eq!(warnings, warning_headers(&REPEATING_PROBLEMS));

    let body = REPEATING_CM.replace("\"dup\"", "\"quiet\"");
    let (code, created, warnings) = h
        .send(
            "POST",
            &format!("{CMS}?fieldValidation=Ignore"),
            json,
            &body,
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["k"], "2");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn field_validation_reports_repeated_json_fields_on_update() {
    let h = Harness::new().await;
    assert_eq!(h.post(CMS, cm("dup", json!({"k": "0"}))).await.0, 201);
    let json = "application/json";
    let uri = format!("{CMS}/dup");
    let (code, status, _) = h
        .send(
            "PUT",
            &format!("{uri}?fieldValidation=Strict"),
            json,
            REPEATING_CM,
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: {}",
            REPEATING_PROBLEMS.join(", ")
        )
    );
    assert_eq!(h.get(&uri).await.1["data"]["k"], "0");

    let (code, updated, warnings) = h
        .send(
            "PUT",
            &format!("{uri}?fieldValidation=Warn"),
            json,
            REPEATING_CM,
        )
        .await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["data"]["k"], "2");
    assert_eq!(warnings, warning_headers(&REPEATING_PROBLEMS));

    // A repeated object merges into the first, as Go decodes it into the same field.
    let body = r#"{"metadata": {"name": "dup", "labels": {"a": "1"}},
        "metadata": {"labels": {"b": "2"}}, "data": {"k": "3"}}"#;
    let (code, updated, warnings) = h
        .send("PUT", &format!("{uri}?fieldValidation=Ignore"), json, body)
        .await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn field_validation_reports_repeated_yaml_keys() {
    let h = Harness::new().await;
    let yaml = "application/yaml";
    let body = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: first
  name: ydup
spec:
  x: 1
data:
  k: '1'
  k: '2'
";
    let lines = [
        r#"line 5: key "name" already set in map"#,
        r#"line 10: key "k" already set in map"#,
    ];
    let (code, status, _) = h
        .send("POST", &format!("{CMS}?fieldValidation=Strict"), yaml, body)
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: yaml: unmarshal errors:\n  {}, unknown field \"spec\"",
            lines.join("\n  ")
        )
    );

    let (code, created, warnings) = h.send("POST", CMS, yaml, body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["name"], "ydup");
    assert_eq!(created["data"]["k"], "2");
    assert_eq!(
        warnings,
        warning_headers(&[lines[0], lines[1], r#"unknown field "spec""#])
    );

    let uri = format!("{CMS}/ydup");
    let (code, status, _) = h
        .send("PUT", &format!("{uri}?fieldValidation=Strict"), yaml, body)
        .await;
    assert_eq!(code, 400, "{status}");
    let (code, updated, warnings) = h
        .send("PUT", &format!("{uri}?fieldValidation=Ignore"), yaml, body)
        .await;
    assert_eq!(code, 200, "{updated}");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn field_validation_checks_patches_and_their_results() {
    let h = Harness::new().await;
    assert_eq!(h.post(CMS, cm("p", json!({"k": "0"}))).await.0, 201);
    let uri = format!("{CMS}/p");
    let merge = "application/merge-patch+json";
    let body = r#"{"metadata": {"labels": {"a": "1", "a": "2"}}, "spec": {"x": 1}}"#;
    let problems =
        r#"strict decoding error: duplicate field "metadata.labels.a", unknown field "spec""#;

    // Strict: 422 naming the patch, shown as the patched object for a merge patch.
    let (code, status, _) = h
        .send(
            "PATCH",
            &format!("{uri}?fieldValidation=Strict"),
            merge,
            body,
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "{\"apiVersion\":\"v1\""#),
        "{message}"
    );
    assert!(message.ends_with(&format!("\": {problems}")), "{message}");
    assert!(h.get(&uri).await.1["metadata"].get("labels").is_none());

    // A strategic merge patch is shown as Go prints the patch map.
    let strategic = "application/strategic-merge-patch+json";
    let (code, status, _) = h
        .send(
            "PATCH",
            &format!("{uri}?fieldValidation=Strict"),
            strategic,
            body,
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        format!(
            r#" "" is invalid: patch: Invalid value: "map[metadata:map[labels:map[a:2]] spec:map[x:1]]": {}"#,
            problems
        )
    );

    // Warn (the default): applied, the last value winning, with a warning each.
    let (code, patched, warnings) = h.send("PATCH", &uri, merge, body).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"]["a"], "2");
    assert!(patched.get("spec").is_none());
    assert_eq!(
        warnings,
        warning_headers(&[
            r#"duplicate field "metadata.labels.a""#,
            r#"unknown field "spec""#
        ])
    );

    // A JSON patch's operations have four fields; Ignore reports nothing.
    let json_patch = "application/json-patch+json";
    let ops = r#"[{"op": "add", "path": "/data/x", "value": "1", "valeu": 2}]"#;
    let (code, _, warnings) = h.send("PATCH", &uri, json_patch, ops).await;
    assert_eq!(code, 200);
    assert_eq!(
        warnings,
        warning_headers(&[r#"json patch unknown field "[0].valeu""#])
    );
    let ops = r#"[{"op": "add", "path": "/data/y", "value": "1", "op": "add"}]"#;
    let (code, _, warnings) = h
        .send(
            "PATCH",
            &format!("{uri}?fieldValidation=Ignore"),
            json_patch,
            ops,
        )
        .await;
    assert_eq!(code, 200);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn lists_page_with_continue_tokens_and_select() {
    let h = Harness::new().await;
    for i in 0..7 {
        let mut object = cm(&format!("c{i}"), json!({}));
        object["metadata"]["labels"] = json!({"parity": if i % 2 == 0 { "even" } else { "odd" }});
        h.post(CMS, object).await;
    }
    let (code, page) = h.get(&format!("{CMS}?limit=3")).await;
    assert_eq!(code, 200);
    assert_eq!(page["kind"], "ConfigMapList");
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert!(
        page["items"][0].get("kind").is_none(),
        "list items carry no kind"
    );
    let mut names: Vec<String> = Vec::new();
    let mut page = page;
    loop {
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        let Some(token) = page["metadata"]["continue"].as_str() else {
            break;
        };
        let next = h.get(&format!("{CMS}?limit=3&continue={token}")).await;
        assert_eq!(next.0, 200, "{}", next.1);
        assert_eq!(
            next.1["metadata"]["resourceVersion"],
            page["metadata"]["resourceVersion"]
        );
        page = next.1;
    }
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);

    let (_, odd) = h
        .get(&format!("{CMS}?labelSelector=parity%3Dodd&limit=2"))
        .await;
    let odd_names: Vec<&str> = odd["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(odd_names, ["c1", "c3"]);
    assert!(odd["metadata"]["continue"].is_string());
    let (code, body) = h.get(&format!("{CMS}?fieldSelector=data.x%3D1")).await;
    assert_eq!(code, 400);
    assert!(
        body["message"].as_str().unwrap().contains("data.x"),
        "{body}"
    );
    let (code, _) = h.get(&format!("{CMS}?continue=garbage")).await;
    assert_eq!(code, 400);
    // One name across every namespace (a filtered informer's list), and none.
    for (selector, expected) in [("metadata.name%3Dc2", 1), ("metadata.name%3Dnone", 0)] {
        let (code, list) = h
            .get(&format!("/api/v1/configmaps?fieldSelector={selector}"))
            .await;
        assert_eq!(code, 200, "{list}");
        assert_eq!(
            list["items"].as_array().map(Vec::len),
            Some(expected),
            "{list}"
        );
    }

    // Reads at a revision: too new is 504, compacted is 410.
    let current = h.store.current_revision().await.unwrap();
    let (code, body) = h
        .get(&format!("{CMS}?resourceVersion={}", current + 100))
        .await;
    assert_eq!(code, 504, "{body}");
    let (code, body) = h
        .get(&format!(
            "{CMS}?resourceVersion=2&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(code, 200, "{body}");
    h.store.compact(current).await.unwrap();
    let (code, body) = h
        .get(&format!(
            "{CMS}?resourceVersion=2&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(code, 410, "{body}");
    assert_eq!(body["reason"], "Expired");
    let (code, _) = h.get(&format!("{CMS}?resourceVersionMatch=Exact")).await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn watches_stream_changes_and_report_compaction() {
    use futures::StreamExt;
    let h = Harness::new().await;
    let (_, first) = h.post(CMS, cm("w1", json!({}))).await;
    let info = RequestInfo::new("GET", CMS, "watch=1&labelSelector=app%3Dx");
    let request = Request::get(format!(
        "{CMS}?watch=1&labelSelector=app%3Dx&resourceVersion={}",
        rv(&first)
    ))
    .body(Body::empty())
    .unwrap();
    let response = h.api.serve(&info, request).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body().into_data_stream();

    let mut labeled = cm("w2", json!({}));
    labeled["metadata"]["labels"] = json!({"app": "x"});
    h.post(CMS, labeled).await;
    h.patch(
        &format!("{CMS}/w2"),
        "application/merge-patch+json",
        json!({"data": {"k": "v"}}),
    )
    .await;
    h.patch(
        &format!("{CMS}/w2"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "y"}}}),
    )
    .await;
    let mut events = Vec::new();
    let mut buffer = Vec::new();
    while events.len() < 3 {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(5), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            events.push((
                event["type"].as_str().unwrap().to_owned(),
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                event["object"]["kind"].clone(),
            ));
        }
    }
    let kinds: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        kinds,
        ["ADDED", "MODIFIED", "DELETED"],
        "leaving the selector reads as a delete"
    );
    assert!(events.iter().all(|e| e.1 == "w2" && e.2 == "ConfigMap"));

    // A watch from a compacted revision ends with a 410 ERROR event.
    let current = h.store.current_revision().await.unwrap();
    h.store.compact(current).await.unwrap();
    let info = RequestInfo::new("GET", CMS, "watch=1");
    let request = Request::get(format!("{CMS}?watch=1&resourceVersion=1"))
        .body(Body::empty())
        .unwrap();
    let response = h.api.serve(&info, request).await;
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let event: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
}

#[tokio::test]
async fn initial_events_end_with_a_bookmark() {
    let h = Harness::new().await;
    h.post(CMS, cm("i1", json!({}))).await;
    let query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let info = RequestInfo::new("GET", CMS, query);
    let request = Request::get(format!("{CMS}?{query}"))
        .body(Body::empty())
        .unwrap();
    let response = h.api.serve(&info, request).await;
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let events: Vec<Value> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "ADDED", "{events:?}");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let (code, _) = h
        .get(&format!("{CMS}?watch=1&sendInitialEvents=true"))
        .await;
    assert_eq!(
        code, 422,
        "sendInitialEvents needs resourceVersionMatch=NotOlderThan"
    );
}

#[tokio::test]
async fn deletecollection_and_terminating_namespaces() {
    let h = Harness::new().await;
    for name in ["a", "b", "c"] {
        let mut object = cm(name, json!({}));
        object["metadata"]["labels"] = json!({"group": if name == "c" { "keep" } else { "drop" }});
        h.post(CMS, object).await;
    }
    let (code, deleted) = h
        .delete(&format!("{CMS}?labelSelector=group%3Ddrop"), None)
        .await;
    assert_eq!(code, 200);
    assert_eq!(deleted["items"].as_array().unwrap().len(), 2);
    let (_, left) = h.get(CMS).await;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);

    h.post(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "doomed"}}),
    )
    .await;
    let (code, ns) = h.delete("/api/v1/namespaces/doomed", None).await;
    assert_eq!(code, 200, "{ns}");
    let (code, body) = h
        .post(
            "/api/v1/namespaces/doomed/configmaps",
            cm("late", json!({})),
        )
        .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("because it is being terminated"),
        "{body}"
    );
}

#[tokio::test]
async fn the_admission_chain_is_upstreams_plugins_in_upstreams_order() {
    let h = Harness::new().await;
    assert_eq!(
        h.api.admission.names(),
        [
            "NamespaceLifecycle",
            "LimitRanger",
            "ServiceAccount",
            "NodeRestriction",
            "PodSecurity",
            "Priority",
            "DefaultTolerationSeconds",
            "DefaultStorageClass",
            "StorageObjectInUseProtection",
            "PersistentVolumeClaimResize",
            "CertificateApproval",
            "CertificateSigning",
            "CertificateSubjectRestriction",
            "MutatingAdmissionWebhook",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionWebhook",
            "ResourceQuota",
        ]
    );
}

#[tokio::test]
async fn the_namespaces_every_cluster_needs_may_not_be_deleted() {
    let h = Harness::new().await;
    for name in ["default", "kube-system", "kube-public"] {
        let (code, body) = h.delete(&format!("/api/v1/namespaces/{name}"), None).await;
        assert_eq!(code, 403, "{body}");
        assert_eq!(body["reason"], "Forbidden");
        assert_eq!(
            body["message"],
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
        let (code, ns) = h.get(&format!("/api/v1/namespaces/{name}")).await;
        assert_eq!(code, 200);
        assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    }
    // Others may go.
    let (code, _) = h.delete("/api/v1/namespaces/kube-node-lease", None).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn every_path_that_creates_checks_the_namespace() {
    let h = Harness::new().await;
    let url = "/api/v1/namespaces/nowhere/configmaps";
    let (code, body) = h.post(url, cm("a", json!({}))).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["details"]["kind"], "namespaces");
    assert_eq!(body["details"]["name"], "nowhere");
    // A PUT that would create (where the kind allows it), and an apply, are creates too.
    let (code, body) = h
        .put(
            "/api/v1/namespaces/nowhere/endpoints/b",
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "b"}}),
        )
        .await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["details"]["kind"], "namespaces");
    let (code, body) = h
        .call(
            "PATCH",
            &format!("{url}/c?fieldManager=test"),
            "application/apply-patch+yaml",
            Some(cm("c", json!({}))),
        )
        .await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["details"]["kind"], "namespaces");
}

#[tokio::test]
async fn a_services_addresses_are_allocated_on_every_write_path() {
    let h = Harness::new().await;
    let url = "/api/v1/namespaces/default/services";
    let svc = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"type": "NodePort", "selector": {"app": name},
                        "ports": [{"port": 80, "protocol": "TCP"}]}})
    };
    let allocated = |svc: &Value| {
        let ip = svc["spec"]["clusterIP"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let port = svc["spec"]["ports"][0]["nodePort"]
            .as_u64()
            .unwrap_or_default();
        assert!(ip.starts_with("10.43."), "{svc}");
        assert!((30000..=32767).contains(&port), "{svc}");
        (ip, port)
    };
    let (code, posted) = h.post(url, svc("post")).await;
    assert_eq!(code, 201, "{posted}");
    let (code, put) = h.put(&format!("{url}/put"), svc("put")).await;
    assert_eq!(code, 201, "{put}");
    let (code, applied) = h
        .call(
            "PATCH",
            &format!("{url}/apply?fieldManager=test"),
            "application/apply-patch+yaml",
            Some(svc("apply")),
        )
        .await;
    assert_eq!(code, 201, "{applied}");
    let addresses: Vec<_> = [&posted, &put, &applied]
        .into_iter()
        .map(allocated)
        .collect();
    for (i, a) in addresses.iter().enumerate() {
        for b in &addresses[i + 1..] {
            assert_ne!(a.0, b.0);
            assert_ne!(a.1, b.1);
        }
    }
    // A PUT that leaves them out keeps them.
    let mut replaced = posted.clone();
    replaced["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterIP");
    replaced["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterIPs");
    replaced["spec"]["ports"][0]
        .as_object_mut()
        .unwrap()
        .remove("nodePort");
    let (code, updated) = h.put(&format!("{url}/post"), replaced).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(allocated(&updated), addresses[0]);
    // Asking for an address another service holds is refused, through a patch too.
    let (code, body) = h
        .patch(
            &format!("{url}/put"),
            "application/merge-patch+json",
            json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "nodePort": addresses[0].1}]}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("provided port is already allocated"),
        "{body}"
    );
}

#[tokio::test]
async fn scale_binding_and_eviction_subresources() {
    let h = Harness::new().await;
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    });
    let url = "/apis/apps/v1/namespaces/default/deployments";
    h.post(url, deploy).await;
    let (code, scale) = h.get(&format!("{url}/d/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=d");
    let (code, scaled) = h
        .patch(
            &format!("{url}/d/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(code, 200, "{scaled}");
    assert_eq!(scaled["spec"]["replicas"], 4);
    let (_, parent) = h.get(&format!("{url}/d")).await;
    assert_eq!(parent["spec"]["replicas"], 4);
    assert_eq!(parent["metadata"]["generation"], 2);
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = 1.into();
    assert_eq!(
        h.put(&format!("{url}/d/scale"), stale).await.0,
        409,
        "the scale's version is the parent's"
    );
    let (code, body) = h
        .patch(
            &format!("{url}/d/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": -1}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");

    let pods = "/api/v1/namespaces/default/pods";
    h.post(pods, json!({"metadata": {"name": "p", "labels": {"app": "p"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let (code, body) = h.post(&format!("{pods}/p/binding"), binding.clone()).await;
    assert_eq!(code, 201, "{body}");
    let (_, pod) = h.get(&format!("{pods}/p")).await;
    assert_eq!(pod["spec"]["nodeName"], "n1");
    let (code, body) = h.post(&format!("{pods}/p/binding"), binding).await;
    assert_eq!(code, 409, "{body}");

    // A budget that allows no disruption blocks the eviction; without one the pod goes.
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"},
                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "p"}}}});
    h.post(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        pdb,
    )
    .await;
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"},
                          "deleteOptions": {"gracePeriodSeconds": 0}});
    let (code, body) = h
        .post(&format!("{pods}/p/eviction"), eviction.clone())
        .await;
    assert_eq!(code, 429, "{body}");
    h.delete(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/b",
        None,
    )
    .await;
    let (code, body) = h.post(&format!("{pods}/p/eviction"), eviction).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(h.get(&format!("{pods}/p")).await.0, 404);
}

#[tokio::test]
async fn services_get_cluster_ips_and_node_ports() {
    let h = Harness::new().await;
    let services = "/api/v1/namespaces/default/services";
    let (code, kubernetes) = h.get(&format!("{services}/kubernetes")).await;
    assert_eq!(code, 200);
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.43.0.1");
    assert_eq!(kubernetes["spec"]["ports"][0]["targetPort"], 6443);

    let (code, web) = h
        .post(services, json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 201, "{web}");
    let ip: std::net::Ipv4Addr = web["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[..2], [10, 43]);
    assert_ne!(ip.to_string(), "10.43.0.1");
    let node_port = web["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    assert_eq!(
        web["spec"]["ports"][0]["targetPort"], 80,
        "defaulted to the port"
    );

    let (code, body) = h
        .post(services, json!({"metadata": {"name": "clash"}, "spec": {"clusterIP": ip.to_string(), "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.clusterIPs");
    assert_eq!(
        body["message"],
        format!(
            "Service \"clash\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"
        )
    );
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "out"}, "spec": {"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "Service \"out\" is invalid: spec.clusterIPs: Invalid value: []string{\"192.168.0.1\"}: failed to allocate IP 192.168.0.1: the provided network does not match the current range"
    );
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "net"}, "spec": {"clusterIP": "10.43.0.0", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "Service \"net\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.43.0.0\"}: failed to allocate IP 10.43.0.0: the provided IP (10.43.0.0) is not in the valid range. The range of valid IPs is 10.43.0.0/16"
    );
    // Each cluster IP is an IPAddress naming its Service; the refused ones left none.
    let addresses = "/apis/networking.k8s.io/v1/ipaddresses";
    let (code, address) = h.get(&format!("{addresses}/{ip}")).await;
    assert_eq!(code, 200, "{address}");
    assert_eq!(
        address["spec"]["parentRef"],
        json!({"resource": "services", "namespace": "default", "name": "web"})
    );
    assert_eq!(
        address["metadata"]["labels"],
        json!({"ipaddress.kubernetes.io/ip-family": "IPv4", "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"})
    );
    let (_, listed) = h.get(addresses).await;
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "the kubernetes Service's and web's: {names:?}"
    );
    assert!(names.contains(&"10.43.0.1"));
    // A generated name is made before the allocation: the IPAddress names the Service by it.
    let (code, generated) = h
        .post(
            services,
            json!({"metadata": {"generateName": "gen-"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201, "{generated}");
    let name = generated["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let generated_ip = generated["spec"]["clusterIP"].as_str().unwrap();
    let (code, address) = h.get(&format!("{addresses}/{generated_ip}")).await;
    assert_eq!(code, 200, "{address}");
    assert_eq!(address["spec"]["parentRef"]["name"], name);
    // A dry run takes nothing.
    let (code, dry) = h
        .post(&format!("{services}?dryRun=All"), json!({"metadata": {"name": "dry"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 201, "{dry}");
    let dry_ip = dry["spec"]["clusterIP"].as_str().unwrap();
    assert_eq!(h.get(&format!("{addresses}/{dry_ip}")).await.0, 404);
    let (code, cidr) = h
        .get("/apis/networking.k8s.io/v1/servicecidrs/kubernetes")
        .await;
    assert_eq!(code, 200, "{cidr}");
    assert_eq!(cidr["spec"]["cidrs"], json!(["10.43.0.0/16"]));
    assert_eq!(cidr["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(cidr["status"]["conditions"][0]["status"], "True");
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}}))
        .await;
    assert_eq!(code, 422, "a taken node port: {body}");
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "np2"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}}))
        .await;
    assert_eq!(code, 422, "a node port out of range: {body}");
    let (code, headless) = h
        .post(services, json!({"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 201, "{headless}");
    assert_eq!(headless["spec"]["clusterIP"], "None");

    // A patch that makes a ClusterIP service a NodePort one gets node ports.
    let (code, plain) = h
        .post(
            services,
            json!({"metadata": {"name": "plain"}, "spec": {"ports": [{"port": 81}]}}),
        )
        .await;
    assert_eq!(code, 201, "{plain}");
    assert!(plain["spec"]["ports"][0].get("nodePort").is_none());
    let (code, patched) = h
        .patch(
            &format!("{services}/plain"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"type": "NodePort"}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    let patched_port = patched["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&patched_port) && patched_port != node_port);
    assert_eq!(patched["spec"]["clusterIP"], plain["spec"]["clusterIP"]);

    // A PUT that leaves the allocations out keeps them.
    let (code, replaced) = h
        .put(&format!("{services}/web"), json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(replaced["spec"]["clusterIP"], web["spec"]["clusterIP"]);
    assert_eq!(replaced["spec"]["ports"][0]["nodePort"], node_port);

    // Deleting the Service lets go of its address and port: another may have them.
    h.delete(&format!("{services}/web"), None).await;
    assert_eq!(h.get(&format!("{addresses}/{ip}")).await.0, 404);
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "again"}, "spec": {"type": "NodePort", "clusterIP": ip.to_string(), "ports": [{"port": 80, "nodePort": node_port}]}}))
        .await;
    assert_eq!(code, 201, "{body}");
    // A type change to ClusterIP lets go of the node port.
    let mut changed = body.clone();
    changed["spec"]["type"] = "ClusterIP".into();
    let (code, body) = h.put(&format!("{services}/again"), changed).await;
    assert_eq!(code, 200, "{body}");
    assert!(body["spec"]["ports"][0].get("nodePort").is_none(), "{body}");
    let (code, body) = h
        .post(services, json!({"metadata": {"name": "np3"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}}))
        .await;
    assert_eq!(code, 201, "the freed node port is free: {body}");
}

#[tokio::test]
async fn load_balancers_keeping_traffic_local_get_a_health_check_node_port() {
    let h = Harness::new().await;
    let services = "/api/v1/namespaces/default/services";
    let lb = |name: &str, health: Option<u64>| {
        let mut svc = json!({"metadata": {"name": name}, "spec": {"type": "LoadBalancer",
            "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}});
        if let Some(port) = health {
            svc["spec"]["healthCheckNodePort"] = port.into();
        }
        svc
    };
    let (code, web) = h.post(services, lb("web", None)).await;
    assert_eq!(code, 201, "{web}");
    let health = web["spec"]["healthCheckNodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&health));
    assert_ne!(
        health,
        web["spec"]["ports"][0]["nodePort"].as_u64().unwrap()
    );
    let (code, body) = h.post(services, lb("clash", Some(health))).await;
    assert_eq!(code, 500, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "Internal error occurred: failed to allocate requested HealthCheck NodePort {health}: provided port is already allocated"
        )
    );
    // A PUT that leaves it out keeps it.
    let mut replaced = lb("web", None);
    replaced["metadata"]["resourceVersion"] = web["metadata"]["resourceVersion"].clone();
    replaced["spec"]["ports"] = web["spec"]["ports"].clone();
    let (code, kept) = h.put(&format!("{services}/web"), replaced).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["healthCheckNodePort"], health);
    // Traffic no longer kept local: the port goes, and another may ask for it.
    let (code, cluster) = h
        .patch(
            &format!("{services}/web"),
            "application/merge-patch+json",
            json!({"spec": {"externalTrafficPolicy": "Cluster"}}),
        )
        .await;
    assert_eq!(code, 200, "{cluster}");
    assert!(
        cluster["spec"].get("healthCheckNodePort").is_none(),
        "{cluster}"
    );
    let (code, body) = h.post(services, lb("again", Some(health))).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["healthCheckNodePort"], health);
}

#[tokio::test]
async fn a_type_change_drops_what_the_new_type_does_not_use() {
    let h = Harness::new().await;
    let services = "/api/v1/namespaces/default/services";
    let (code, web) = h
        .post(services, json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}))
        .await;
    assert_eq!(code, 201, "{web}");
    // As client-go's e2e jig does: the stored object with only type and externalName changed.
    let mut changed = web.clone();
    changed["spec"]["type"] = "ExternalName".into();
    changed["spec"]["externalName"] = "web.example.com".into();
    let (code, external) = h.put(&format!("{services}/web"), changed).await;
    assert_eq!(code, 200, "{external}");
    let spec = &external["spec"];
    for field in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "ipFamilyPolicy",
        "externalTrafficPolicy",
    ] {
        assert!(spec.get(field).is_none(), "{field} left: {spec}");
    }
    assert!(spec["ports"][0].get("nodePort").is_none(), "{spec}");

    // Back to ClusterIP by a patch: a fresh address, and no node port.
    let (code, back) = h
        .patch(
            &format!("{services}/web"),
            "application/merge-patch+json",
            json!({"spec": {"type": "ClusterIP", "externalName": null}}),
        )
        .await;
    assert_eq!(code, 200, "{back}");
    assert!(
        back["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .starts_with("10.43.")
    );
    assert!(back["spec"]["ports"][0].get("nodePort").is_none());

    // A cluster IP the client changed on the way to ExternalName is not dropped: validation
    // refuses it, as upstream.
    let mut changed = back.clone();
    changed["spec"]["type"] = "ExternalName".into();
    changed["spec"]["externalName"] = "web.example.com".into();
    changed["spec"]["clusterIP"] = "10.43.9.9".into();
    changed["spec"]["clusterIPs"] = json!(["10.43.9.9"]);
    let (code, body) = h.put(&format!("{services}/web"), changed).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.clusterIPs");
}

#[tokio::test]
async fn reads_from_the_cache_see_every_completed_write() {
    let h = Harness::new().await;
    // Every write is visible to the very next read, whichever resource the latest write was to.
    for i in 0..20 {
        let (code, created) = h.post(CMS, cm(&format!("c{i}"), json!({"i": "0"}))).await;
        assert_eq!(code, 201, "{created}");
        let (_, secret) = h
            .post(
                "/api/v1/namespaces/default/secrets",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s{i}")}}),
            )
            .await;
        let (code, got) = h.get(&format!("{CMS}/c{i}")).await;
        assert_eq!(code, 200, "{got}");
        assert_eq!(got["kind"], "ConfigMap");
        assert_eq!(got["apiVersion"], "v1");
        assert_eq!(rv(&got), rv(&created));
        // Not older than the secret's revision: the configmaps are caught up with it too.
        let (code, got) = h
            .get(&format!("{CMS}/c{i}?resourceVersion={}", rv(&secret)))
            .await;
        assert_eq!(code, 200, "{got}");
        let (code, list) = h.get(CMS).await;
        assert_eq!(code, 200);
        assert_eq!(list["items"].as_array().unwrap().len(), i + 1);
        assert!(
            list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap()
                >= rv(&secret)
        );
    }
    let current = h.store.current_revision().await.unwrap();
    let (code, body) = h
        .get(&format!("{CMS}/c0?resourceVersion={}", current + 100))
        .await;
    assert_eq!(code, 504, "{body}");
    assert_eq!(body["reason"], "Timeout");
    let (code, _) = h.get(&format!("{CMS}/c0?resourceVersion=x")).await;
    assert_eq!(code, 400);
    let (code, body) = h.get(&format!("{CMS}/missing")).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["reason"], "NotFound");
}

#[tokio::test]
async fn later_pages_show_the_first_pages_revision() {
    let h = Harness::new().await;
    for i in 0..5 {
        h.post(CMS, cm(&format!("c{i}"), json!({"v": "old"}))).await;
    }
    // Unchanged between pages.
    let (_, first) = h.get(&format!("{CMS}?limit=2")).await;
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let (code, second) = h.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(code, 200, "{second}");
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    assert_eq!(second["metadata"]["remainingItemCount"], 1);
    let names: Vec<&str> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c2", "c3"]);

    // Changed between pages: the rest of the list is still the state of the first page.
    let (_, mut c3) = h.get(&format!("{CMS}/c3")).await;
    c3["data"]["v"] = json!("new");
    let (code, _) = h.put(&format!("{CMS}/c3"), c3).await;
    assert_eq!(code, 200);
    let (code, deleted) = h.delete(&format!("{CMS}/c4"), None).await;
    assert_eq!(code, 200, "{deleted}");
    let (code, second) = h.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(code, 200, "{second}");
    assert_eq!(second["items"][1]["metadata"]["name"], "c3");
    assert_eq!(second["items"][1]["data"]["v"], "old");
    let token = second["metadata"]["continue"].as_str().unwrap();
    let (_, third) = h.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(third["items"][0]["metadata"]["name"], "c4");
    assert!(third["metadata"].get("continue").is_none(), "{third}");
    // A new list sees the changes.
    let (_, now) = h.get(&format!("{CMS}?limit=10")).await;
    assert_eq!(now["items"].as_array().unwrap().len(), 4);
    assert_eq!(now["items"][3]["data"]["v"], "new");

    // A page size with a revision and no match rule reads exactly that revision.
    let at = first["metadata"]["resourceVersion"].as_str().unwrap();
    let (code, exact) = h.get(&format!("{CMS}?limit=10&resourceVersion={at}")).await;
    assert_eq!(code, 200, "{exact}");
    assert_eq!(exact["items"].as_array().unwrap().len(), 5);
    assert_eq!(exact["metadata"]["resourceVersion"], at);
}

fn causes(body: &Value) -> Vec<(String, String)> {
    body["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_owned(),
                        c["reason"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn status_writes_are_validated_by_the_kinds_status_rules() {
    let h = Harness::new().await;
    let url = "/apis/apps/v1/namespaces/default/deployments";
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"app": "d"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    });
    let (code, created) = h.post(url, deploy).await;
    assert_eq!(code, 201, "{created}");

    let mut bad = created.clone();
    bad["status"] = json!({"replicas": -1});
    let (code, body) = h.put(&format!("{url}/d/status"), bad).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    // As upstream: the counts left at 0 now exceed the negative replicas too.
    let invalid = |field: &str| (field.to_owned(), "FieldValueInvalid".to_owned());
    assert_eq!(
        causes(&body),
        [
            invalid("status.replicas"),
            invalid("status.updatedReplicas"),
            invalid("status.readyReplicas"),
            invalid("status.availableReplicas"),
        ]
    );
    assert!(
        body["message"].as_str().unwrap().starts_with(
            "Deployment.apps \"d\" is invalid: [status.replicas: Invalid value: -1: must be greater than or equal to 0, "
        ),
        "{body}"
    );

    // A valid status is written; the status endpoint keeps the labels, as upstream's does.
    let mut good = created.clone();
    good["status"] = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1});
    good["metadata"]["labels"] = json!({"app": "other"});
    let (code, written) = h.put(&format!("{url}/d/status"), good).await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["status"]["availableReplicas"], 1);
    assert_eq!(written["metadata"]["labels"], json!({"app": "d"}));

    // Patches through /status are validated the same way.
    let (code, body) = h
        .patch(
            &format!("{url}/d/status"),
            "application/merge-patch+json",
            json!({"status": {"readyReplicas": 2}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "status.readyReplicas".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
}

#[tokio::test]
async fn pod_status_writes_check_ips_and_keep_what_upstream_keeps() {
    let h = Harness::new().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i",
                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}
    });
    let (code, created) = h.post(pods, pod).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"}),
        "a new pod is Pending with its QoS class"
    );

    let mut bad = created.clone();
    bad["status"] = json!({"phase": "Running", "podIP": "10.0.0.300"});
    let (code, body) = h.put(&format!("{pods}/p/status"), bad).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "status.podIPs[0]".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
    assert_eq!(
        body["message"],
        "Pod \"p\" is invalid: status.podIPs[0]: Invalid value: \"10.0.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    );

    let mut changed_qos = created.clone();
    changed_qos["status"] = json!({"phase": "Running", "qosClass": "BestEffort"});
    let (code, body) = h.put(&format!("{pods}/p/status"), changed_qos).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [("status.qosClass".to_owned(), "FieldValueInvalid".to_owned())]
    );

    // A valid status: the QoS class the writer left out is kept, podIPs follows podIP, and the
    // owner references are not the status writer's to change.
    let mut good = created.clone();
    good["status"] = json!({"phase": "Running", "podIP": "10.0.0.3", "hostIP": "192.168.1.2"});
    good["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]);
    let (code, written) = h.put(&format!("{pods}/p/status"), good).await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["status"]["phase"], "Running");
    assert_eq!(written["status"]["qosClass"], "Guaranteed");
    assert_eq!(written["status"]["podIPs"], json!([{"ip": "10.0.0.3"}]));
    assert_eq!(written["status"]["hostIPs"], json!([{"ip": "192.168.1.2"}]));
    assert!(
        written["metadata"].get("ownerReferences").is_none(),
        "{written}"
    );
}

#[tokio::test]
async fn ephemeral_containers_are_added_through_their_subresource_only() {
    let h = Harness::new().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({
        "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "app", "image": "i"}]}
    });
    let (code, created) = h.post(pods, pod.clone()).await;
    assert_eq!(code, 201, "{created}");
    // Not on create, not through the pod itself.
    let mut with = pod.clone();
    with["metadata"]["name"] = json!("q");
    with["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "i"}]);
    let (code, body) = h.post(pods, with).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "spec.ephemeralContainers".to_owned(),
            "FieldValueForbidden".to_owned()
        )]
    );

    // kubectl debug's strategic merge patch adds one (defaulted as upstream defaults it);
    // anything else the write carries is dropped.
    let url = format!("{pods}/p/ephemeralcontainers");
    let (code, written) = h
        .patch(
            &url,
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"a": "2"}},
                   "spec": {"ephemeralContainers": [
                       {"name": "debug", "image": "busybox", "targetContainerName": "app",
                        "stdin": true, "tty": true}],
                            "activeDeadlineSeconds": 5}}),
        )
        .await;
    assert_eq!(code, 200, "{written}");
    let debug = &written["spec"]["ephemeralContainers"][0];
    assert_eq!(debug["name"], "debug");
    assert_eq!(debug["targetContainerName"], "app");
    assert_eq!(debug["imagePullPolicy"], "Always");
    assert_eq!(debug["terminationMessagePolicy"], "File");
    assert_eq!(written["metadata"]["labels"]["a"], "1");
    assert!(written["spec"].get("activeDeadlineSeconds").is_none());
    let (code, read) = h.get(&url).await;
    assert_eq!((code, &read["kind"]), (200, &json!("Pod")));
    assert_eq!(
        read["spec"]["ephemeralContainers"],
        written["spec"]["ephemeralContainers"]
    );

    // Existing ones may be neither changed nor removed; new ones are validated.
    let mut changed = written.clone();
    changed["spec"]["ephemeralContainers"][0]["image"] = json!("other");
    let (code, body) = h.put(&url, changed).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Forbidden: existing ephemeral containers \"debug\" may not be changed\n"
    );
    let mut removed = written.clone();
    removed["spec"]["ephemeralContainers"] = json!([]);
    let (code, body) = h.put(&url, removed).await;
    assert_eq!(code, 422, "{body}");
    let mut bad = written.clone();
    bad["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "app", "image": "i", "ports": [{"containerPort": 80}]}));
    let (code, body) = h.put(&url, bad).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [
            (
                "spec.ephemeralContainers[1].name".to_owned(),
                "FieldValueDuplicate".to_owned()
            ),
            (
                "spec.ephemeralContainers[1].ports".to_owned(),
                "FieldValueForbidden".to_owned()
            )
        ]
    );
}

#[tokio::test]
async fn service_and_namespace_status_and_finalize() {
    let h = Harness::new().await;
    let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
    let services = "/api/v1/namespaces/default/services";
    let (code, created) = h.post(services, svc).await;
    assert_eq!(code, 201, "{created}");
    let mut with_lb = created.clone();
    with_lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
    let (code, body) = h.put(&format!("{services}/s/status"), with_lb).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "status.loadBalancer.ingress".to_owned(),
            "FieldValueForbidden".to_owned()
        )]
    );

    let namespaces = "/api/v1/namespaces";
    let (code, ns) = h
        .post(
            namespaces,
            json!({"metadata": {"name": "gone"}, "spec": {"finalizers": ["example.com/x"]}}),
        )
        .await;
    assert_eq!(code, 201, "{ns}");
    assert_eq!(
        ns["spec"]["finalizers"],
        json!(["example.com/x", "kubernetes"])
    );
    let mut terminating = ns.clone();
    terminating["status"]["phase"] = "Terminating".into();
    let (code, body) = h
        .put(&format!("{namespaces}/gone/status"), terminating)
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [("status.Phase".to_owned(), "FieldValueInvalid".to_owned())]
    );

    let mut bad_finalizer = ns.clone();
    bad_finalizer["spec"]["finalizers"] = json!(["custom"]);
    let (code, body) = h
        .put(&format!("{namespaces}/gone/finalize"), bad_finalizer)
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "spec.finalizers[0]".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );

    // Finalizing removes the last finalizer of a terminating namespace: it goes.
    let (code, _) = h.delete(&format!("{namespaces}/gone"), None).await;
    assert_eq!(code, 200);
    let (_, current) = h.get(&format!("{namespaces}/gone")).await;
    let mut finalized = current.clone();
    finalized["spec"]["finalizers"] = json!([]);
    let (code, body) = h
        .put(&format!("{namespaces}/gone/finalize"), finalized)
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(h.get(&format!("{namespaces}/gone")).await.0, 404);
}

// Server-side apply and managedFields.

const APPLY: &str = "application/apply-patch+yaml";

fn entries(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_owned(),
                        e["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .and_then(|list| list.iter().find(|e| e["manager"] == manager))
        .map_or(&Value::Null, |e| &e["fieldsV1"])
}

#[tokio::test]
async fn creates_and_updates_record_their_managers() {
    let h = Harness::new().await;
    let (code, created) = h
        .post(
            &format!("{CMS}?fieldManager=creator"),
            cm("owned", json!({"a": "1"})),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(entries(&created), [("creator".into(), "Update".into())]);
    assert_eq!(
        fields_of(&created, "creator"),
        &json!({"f:data": {".": {}, "f:a": {}}})
    );
    // Without fieldManager, the User-Agent's product names the manager.
    let (code, patched) = h
        .patch(
            &format!("{CMS}/owned"),
            "application/merge-patch+json",
            json!({"data": {"b": "2"}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        entries(&patched),
        [
            ("creator".into(), "Update".into()),
            (String::new(), "Update".into())
        ]
        .iter()
        .map(|(m, o): &(String, String)| (
            if m.is_empty() {
                "unknown".into()
            } else {
                m.clone()
            },
            o.clone()
        ))
        .collect::<Vec<_>>()
    );
    // A write that changes nothing changes no entry and takes no revision.
    let (code, again) = h
        .patch(
            &format!("{CMS}/owned?fieldManager=other"),
            "application/merge-patch+json",
            json!({"data": {"b": "2"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(rv(&again), rv(&patched));
    // managedFields: [{}] clears them.
    let mut body = again.clone();
    body["metadata"]["managedFields"] = json!([{}]);
    let (code, cleared) = h.put(&format!("{CMS}/owned"), body).await;
    assert_eq!(code, 200, "{cleared}");
    assert!(
        cleared["metadata"].get("managedFields").is_none(),
        "{cleared}"
    );
}

#[tokio::test]
async fn apply_creates_shares_conflicts_and_forces() {
    let h = Harness::new().await;
    let uri = |manager: &str, force: bool| {
        format!(
            "{CMS}/shared?fieldManager={manager}{}",
            if force { "&force=true" } else { "" }
        )
    };
    let config = |data: Value| cm("shared", data);
    let (code, created) = h
        .patch(
            &uri("alice", false),
            APPLY,
            config(json!({"a": "1", "b": "1"})),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(entries(&created), [("alice".into(), "Apply".into())]);
    assert_eq!(
        fields_of(&created, "alice"),
        &json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
    // Applying the same configuration again is a no-op.
    let (code, same) = h
        .patch(
            &uri("alice", false),
            APPLY,
            config(json!({"a": "1", "b": "1"})),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(rv(&same), rv(&created));
    // Bob applies the same value of "a": shared ownership, no conflict.
    let (code, shared) = h
        .patch(&uri("bob", false), APPLY, config(json!({"a": "1"})))
        .await;
    assert_eq!(code, 200, "{shared}");
    assert_eq!(fields_of(&shared, "bob"), &json!({"f:data": {"f:a": {}}}));
    // Bob applies a different value of "b": 409 naming alice and the field.
    let (code, status) = h
        .patch(
            &uri("bob", false),
            APPLY,
            config(json!({"a": "1", "b": "2"})),
        )
        .await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .data.b"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.b"}])
    );
    // Forced, bob takes "b".
    let (code, forced) = h
        .patch(
            &uri("bob", true),
            APPLY,
            config(json!({"a": "1", "b": "2"})),
        )
        .await;
    assert_eq!(code, 200, "{forced}");
    assert_eq!(forced["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(fields_of(&forced, "alice"), &json!({"f:data": {"f:a": {}}}));
    // Alice stops applying "a": bob still owns it, so it stays. (Applying `data: {}` would
    // make her the owner of the map itself, as upstream.)
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}});
    let (code, kept) = h.patch(&uri("alice", false), APPLY, bare).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["data"], json!({"a": "1", "b": "2"}));
    assert!(fields_of(&kept, "alice").is_null(), "{kept}");
    // Bob stops applying "b": nobody else owns it, so it goes.
    let (code, dropped) = h
        .patch(&uri("bob", false), APPLY, config(json!({"a": "1"})))
        .await;
    assert_eq!(code, 200, "{dropped}");
    assert_eq!(dropped["data"], json!({"a": "1"}));
}

#[tokio::test]
async fn apply_merges_keyed_lists_and_reports_bad_configurations() {
    let h = Harness::new().await;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = |containers: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": containers}}}})
    };
    let (code, created) = h
        .patch(
            &format!("{deployments}/web?fieldManager=base"),
            APPLY,
            deployment(json!([{"name": "app", "image": "app:1"}])),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    // Defaults apply to the result.
    assert_eq!(created["spec"]["replicas"], 1);
    // A second manager adds a sidecar to the keyed list without touching "app".
    let (code, both) = h
        .patch(
            &format!("{deployments}/web?fieldManager=sidecar"),
            APPLY,
            deployment(json!([{"name": "log", "image": "log:1"}])),
        )
        .await;
    assert_eq!(code, 200, "{both}");
    let names: Vec<&str> = both["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "log"]);
    // Scaling through /scale records an Update entry for the scale subresource.
    let (code, _) = h
        .patch(
            &format!("{deployments}/web/scale?fieldManager=scaler"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(code, 200);
    let (_, scaled) = h.get(&format!("{deployments}/web")).await;
    let entry = scaled["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "scaler")
        .unwrap()
        .clone();
    assert_eq!(entry["subresource"], "scale");
    assert_eq!(entry["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    // Errors, in upstream's shapes.
    let (code, status) = h
        .patch(&format!("{CMS}/x"), APPLY, cm("x", json!({})))
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let (code, status) = h
        .patch(
            &format!("{CMS}/x?fieldManager=m"),
            APPLY,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["message"], "invalid object type: /v1, Kind=Secret");
    let (code, status) = h
        .patch(
            &format!("{CMS}/x?fieldManager=m"),
            APPLY,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "spec": 1}),
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "failed to create typed patch object (/x; /v1, Kind=ConfigMap): .spec: field not declared in schema"
    );
    let (code, status) = h
        .patch(
            &format!("{CMS}/x?fieldManager=m&force=true"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    // YAML configurations are read too.
    let (code, created, _) = h
        .send(
            "PATCH",
            &format!("{CMS}/yaml?fieldManager=m"),
            APPLY,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml\ndata:\n  k: v\n",
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["k"], "v");
}

async fn get_as(h: &Harness, uri: &str, accept: &str) -> (u16, Vec<u8>) {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let info = RequestInfo::new("GET", path, query);
    let request = Request::get(uri)
        .header("accept", accept)
        .body(Body::empty())
        .unwrap();
    let response = h.api.serve(&info, request).await;
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (code, bytes.to_vec())
}

#[tokio::test]
async fn metadata_only_reads_answer_partial_object_metadata() {
    let h = Harness::new().await;
    h.post(CMS, cm("m1", json!({"secret": "not in metadata"})))
        .await;
    let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let many = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let (code, body) = get_as(&h, &format!("{CMS}/m1"), one).await;
    assert_eq!(code, 200);
    let partial: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(partial["kind"], "PartialObjectMetadata");
    assert_eq!(partial["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(partial["metadata"]["name"], "m1");
    assert!(partial.get("data").is_none());
    let (code, body) = get_as(&h, CMS, &format!("{many}, application/json")).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list["items"][0]["metadata"]["name"], "m1");
    assert!(list["metadata"]["resourceVersion"].is_string());
    // The wrong arity is 406, as upstream.
    let (code, _) = get_as(&h, CMS, one).await;
    assert_eq!(code, 406);
    let (code, _) = get_as(&h, &format!("{CMS}/m1"), many).await;
    assert_eq!(code, 406);
    // Watches send each object's metadata.
    let (code, body) = get_as(
        &h,
        &format!("{CMS}?watch=1&resourceVersion=0&timeoutSeconds=1"),
        one,
    )
    .await;
    assert_eq!(code, 200);
    let first: Value = serde_json::from_slice(body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "PartialObjectMetadata");
    assert!(first["object"].get("data").is_none());
}

#[tokio::test]
async fn the_first_apply_to_an_unmanaged_object_meets_before_first_apply() {
    let h = Harness::new().await;
    let (_, created) = h.post(CMS, cm("legacy", json!({"a": "1"}))).await;
    // Clearing managedFields leaves an object nobody manages, like one written before them.
    let mut body = created.clone();
    body["metadata"]["managedFields"] = json!([]);
    let (code, cleared) = h.put(&format!("{CMS}/legacy"), body).await;
    assert_eq!(code, 200);
    assert!(cleared["metadata"].get("managedFields").is_none());
    // Updates keep it unmanaged.
    let (_, patched) = h
        .patch(
            &format!("{CMS}/legacy?fieldManager=x"),
            "application/merge-patch+json",
            json!({"data": {"b": "2"}}),
        )
        .await;
    assert!(
        patched["metadata"].get("managedFields").is_none(),
        "{patched}"
    );
    // The first apply: what the object had belongs to before-first-apply.
    let (code, status) = h
        .patch(
            &format!("{CMS}/legacy?fieldManager=applier"),
            APPLY,
            cm("legacy", json!({"a": "changed"})),
        )
        .await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.a"
    );
    let (code, applied) = h
        .patch(
            &format!("{CMS}/legacy?fieldManager=applier"),
            APPLY,
            cm("legacy", json!({"a": "1"})),
        )
        .await;
    assert_eq!(code, 200, "{applied}");
    assert_eq!(
        entries(&applied),
        [
            ("applier".to_owned(), "Apply".to_owned()),
            ("before-first-apply".to_owned(), "Update".to_owned())
        ]
    );
}

const HPAS_V1: &str = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
const HPAS_V2: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";

/// Reads watch events from `body` until `count` arrived.
async fn watch_events(
    body: &mut (impl futures::Stream<Item = Result<bytes::Bytes, axum::Error>> + Unpin),
    count: usize,
) -> Vec<Value> {
    use futures::StreamExt;
    let mut events = Vec::new();
    let mut buffer = Vec::new();
    while events.len() < count {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(5), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
    }
    events
}

#[tokio::test]
async fn autoscalers_are_one_object_in_two_versions() {
    let h = Harness::new().await;
    let info = RequestInfo::new("GET", HPAS_V1, "watch=1");
    let request = Request::get(format!("{HPAS_V1}?watch=1"))
        .body(Body::empty())
        .unwrap();
    let response = h.api.serve(&info, request).await;
    let mut v1_watch = response.into_body().into_data_stream();

    // Written as v2 with metrics v1 cannot hold...
    let (code, created) = h
        .post(
            HPAS_V2,
            json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "maxReplicas": 5,
                    "metrics": [
                        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                    ],
                },
            }),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["minReplicas"], 1);
    // ...it reads as v1 with the CPU target in its field and the rest in the annotation.
    let (code, v1) = h.get(&format!("{HPAS_V1}/web")).await;
    assert_eq!(code, 200, "{v1}");
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(
        v1["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(
        v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"],
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"500Mi"}}]"#
    );
    // The v1 watcher saw the v2 create as v1.
    let events = watch_events(&mut v1_watch, 1).await;
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(
        events[0]["object"]["spec"]["targetCPUUtilizationPercentage"],
        60
    );

    // Writing it back as v1 (a new CPU target) keeps the memory metric.
    let mut changed = v1.clone();
    changed["spec"]["targetCPUUtilizationPercentage"] = json!(70);
    let (code, updated) = h.put(&format!("{HPAS_V1}/web"), changed).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["apiVersion"], "autoscaling/v1");
    let (_, v2) = h.get(&format!("{HPAS_V2}/web")).await;
    let metrics = v2["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 2, "{v2}");
    assert_eq!(metrics[0]["resource"]["name"], "memory");
    assert_eq!(metrics[1]["resource"]["target"]["averageUtilization"], 70);
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
    let events = watch_events(&mut v1_watch, 1).await;
    assert_eq!(events[0]["type"], "MODIFIED");
    assert_eq!(
        events[0]["object"]["spec"]["targetCPUUtilizationPercentage"],
        70
    );

    // A v1 create without a target gets v1's implied 80% CPU; lists in either version see both.
    let (code, _) = h
        .post(
            HPAS_V1,
            json!({
                "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "api"},
                "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "api"}, "maxReplicas": 3},
            }),
        )
        .await;
    assert_eq!(code, 201);
    let (_, list) = h.get(HPAS_V2).await;
    assert_eq!(list["apiVersion"], "autoscaling/v2");
    let api = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "api")
        .unwrap();
    assert_eq!(
        api["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    let (_, list) = h.get(&format!("{HPAS_V1}?resourceVersion=0")).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert!(list["items"][0].get("apiVersion").is_none());
    assert_eq!(list["items"][0]["metadata"]["name"], "api");
    assert_eq!(
        list["items"][0]["spec"]["targetCPUUtilizationPercentage"],
        80
    );

    // Validation speaks v2 paths for a v1 body, as upstream's internal validation does.
    let (code, status) = h
        .post(
            HPAS_V1,
            json!({
                "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "bad"},
                "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1,
                         "targetCPUUtilizationPercentage": 0},
            }),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        causes(&status),
        [(
            "spec.metrics[0].resource.target.averageUtilization".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
}

#[tokio::test]
async fn managers_of_one_autoscaler_conflict_across_versions() {
    let h = Harness::new().await;
    let v2 = |max: i64| {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": max},
        })
    };
    let (code, created) = h
        .patch(&format!("{HPAS_V2}/web?fieldManager=alice"), APPLY, v2(5))
        .await;
    assert_eq!(code, 201, "{created}");
    // Bob applies another maximum in v1: Alice's field, compared in v2 terms, conflicts.
    let v1 = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 7},
    });
    let (code, status) = h
        .patch(
            &format!("{HPAS_V1}/web?fieldManager=bob"),
            APPLY,
            v1.clone(),
        )
        .await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.maxReplicas"
    );
    // Forced, the field changes hands: Alice keeps what she still holds, in v2 terms.
    let (code, forced) = h
        .patch(
            &format!("{HPAS_V1}/web?fieldManager=bob&force=true"),
            APPLY,
            v1,
        )
        .await;
    assert_eq!(code, 200, "{forced}");
    assert_eq!(forced["spec"]["maxReplicas"], 7);
    let entries = forced["metadata"]["managedFields"].as_array().unwrap();
    let alice = entries.iter().find(|e| e["manager"] == "alice").unwrap();
    assert_eq!(alice["apiVersion"], "autoscaling/v2");
    assert!(
        alice["fieldsV1"]["f:spec"].get("f:maxReplicas").is_none(),
        "{alice}"
    );
    assert!(
        alice["fieldsV1"]["f:spec"]
            .get("f:scaleTargetRef")
            .is_some(),
        "{alice}"
    );
    let bob = entries.iter().find(|e| e["manager"] == "bob").unwrap();
    assert_eq!(bob["apiVersion"], "autoscaling/v1");
    assert!(
        bob["fieldsV1"]["f:spec"].get("f:maxReplicas").is_some(),
        "{bob}"
    );
}

#[tokio::test]
async fn pods_get_their_priority_from_their_class() {
    let h = Harness::new().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str, extra: Value| {
        let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    };
    // The system classes exist at start.
    let (code, class) = h
        .get("/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical")
        .await;
    assert_eq!(code, 200, "{class}");
    assert_eq!(class["value"], 2_000_001_000);
    // No class and no default: priority 0.
    let (code, plain) = h.post(pods, pod("plain", json!({}))).await;
    assert_eq!(code, 201, "{plain}");
    assert_eq!(plain["spec"]["priority"], 0);
    assert_eq!(plain["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    // A named class gives its value and policy.
    let classes = "/apis/scheduling.k8s.io/v1/priorityclasses";
    let (code, _) = h
        .post(
            classes,
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                              "metadata": {"name": "high"}, "value": 1000,
                              "preemptionPolicy": "Never"}),
        )
        .await;
    assert_eq!(code, 201);
    let (code, high) = h
        .post(pods, pod("high", json!({"priorityClassName": "high"})))
        .await;
    assert_eq!(code, 201, "{high}");
    assert_eq!(high["spec"]["priority"], 1000);
    assert_eq!(high["spec"]["preemptionPolicy"], "Never");
    // The global default applies to pods without a class.
    let (code, _) = h
        .post(
            classes,
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                              "metadata": {"name": "normal"}, "value": 10,
                              "globalDefault": true}),
        )
        .await;
    assert_eq!(code, 201);
    // Admission reads the cache as it stands (upstream reads an informer): wait until the
    // cache has the new class.
    for _ in 0..100 {
        let (code, _) = h
            .get("/apis/scheduling.k8s.io/v1/priorityclasses/normal?resourceVersion=0")
            .await;
        if code == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (code, defaulted) = h.post(pods, pod("defaulted", json!({}))).await;
    assert_eq!(code, 201, "{defaulted}");
    assert_eq!(defaulted["spec"]["priority"], 10);
    assert_eq!(defaulted["spec"]["priorityClassName"], "normal");
    // An unknown class, or a priority that disagrees with the class, is forbidden.
    let (code, status) = h
        .post(pods, pod("lost", json!({"priorityClassName": "nope"})))
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"lost\" is forbidden: no PriorityClass with name nope was found"
    );
    let (code, status) = h
        .post(
            pods,
            pod("liar", json!({"priorityClassName": "high", "priority": 5})),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the integer value of priority (5) must not be provided in pod spec"),
        "{status}"
    );
}

#[tokio::test]
async fn nodes_keep_their_status_on_create() {
    let h = Harness::new().await;
    let (code, node) = h
        .post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                   "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
                              "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .await;
    assert_eq!(code, 201, "{node}");
    assert_eq!(node["status"]["allocatable"]["cpu"], "4");
    assert_eq!(node["status"]["conditions"][0]["type"], "Ready");
    // Other kinds with a status subresource still drop it on create.
    let (code, svc) = h
        .post(
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"port": 80}]},
                   "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        )
        .await;
    assert_eq!(code, 201, "{svc}");
    assert!(
        svc["status"]["loadBalancer"].get("ingress").is_none(),
        "{svc}"
    );
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data() {
    let h = Harness::new().await;
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, created) = h
        .post(
            &format!("{secrets}?fieldValidation=Strict"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                   "data": {"a": "b2xk", "b": "a2VwdA=="},
                   "stringData": {"a": "new", "c": "added"}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created.get("stringData"), None, "{created}");
    // base64 of "new", "kept", "added"; stringData wins over data for the same key.
    let want = json!({"a": "bmV3", "b": "a2VwdA==", "c": "YWRkZWQ="});
    assert_eq!(created["data"], want);
    let (_, read) = h.get(&format!("{secrets}/s")).await;
    assert_eq!((read["data"].clone(), read.get("stringData")), (want, None));
    // A patch (kubectl apply's strategic merge) and an update fold it the same way.
    let (code, patched) = h
        .patch(
            &format!("{secrets}/s"),
            "application/strategic-merge-patch+json",
            json!({"stringData": {"d": "x"}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["data"]["d"], "eA==");
    assert_eq!(patched.get("stringData"), None);
    let mut replaced = patched.clone();
    replaced["stringData"] = json!({"a": "again"});
    let (code, updated) = h.put(&format!("{secrets}/s"), replaced).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["data"]["a"], "YWdhaW4=");
    assert_eq!(updated.get("stringData"), None);
    // Server-side apply of a manifest written with stringData only.
    let (code, applied) = h
        .call(
            "PATCH",
            &format!("{secrets}/applied?fieldManager=kubectl"),
            APPLY,
            Some(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "applied"}, "stringData": {"k": "v"}})),
        )
        .await;
    assert_eq!(code, 201, "{applied}");
    assert_eq!(applied["data"], json!({"k": "dg=="}));
    assert_eq!(applied.get("stringData"), None);
}

#[tokio::test]
async fn events_are_one_resource_served_in_both_shapes() {
    let h = Harness::new().await;
    let core = "/api/v1/namespaces/default/events";
    let newer = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (code, created) = h
        .post(
            newer,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "e1"},
                   "eventTime": "2026-11-27T08:00:00.000000Z",
                   "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
                   "note": "hello", "reason": "Started", "type": "Normal", "action": "Start",
                   "reportingController": "example.com/c", "reportingInstance": "i"}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["note"], "hello");
    // The same object through the core API, in the core shape.
    let (code, read) = h.get(&format!("{core}/e1")).await;
    assert_eq!(code, 200, "{read}");
    assert_eq!(read["apiVersion"], "v1");
    assert_eq!(read["message"], "hello");
    assert_eq!(read["involvedObject"]["name"], "p");
    assert_eq!(read["reportingComponent"], "example.com/c");
    assert_eq!(
        read["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    // A core event is listed through events.k8s.io, and field selectors use its names there.
    let (code, _) = h
        .post(
            core,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
                   "involvedObject": {"kind": "Pod", "name": "q", "namespace": "default"},
                   "message": "from core", "reason": "Pulled", "type": "Normal"}),
        )
        .await;
    assert_eq!(code, 201);
    let (_, list) = h.get(newer).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["e1", "e2"]);
    assert_eq!(list["items"][1]["note"], "from core");
    let (code, selected) = h
        .get(&format!("{newer}?fieldSelector=regarding.name%3Dq"))
        .await;
    assert_eq!(code, 200, "{selected}");
    assert_eq!(selected["items"].as_array().unwrap().len(), 1);
    assert_eq!(selected["items"][0]["metadata"]["name"], "e2");
    let (code, _) = h
        .get(&format!("{core}?fieldSelector=involvedObject.name%3Dp"))
        .await;
    assert_eq!(code, 200);
    // Each version selects by its own names, whichever listed first (the objects' fields are
    // kept in one cache for both).
    for (url, name) in [
        (
            format!("{core}?fieldSelector=involvedObject.name%3Dp"),
            "e1",
        ),
        (
            format!("{core}?fieldSelector=reportingComponent%3Dexample.com%2Fc"),
            "e1",
        ),
        (
            format!("{newer}?fieldSelector=reportingController%3Dexample.com%2Fc"),
            "e1",
        ),
        (format!("{newer}?fieldSelector=regarding.name%3Dq"), "e2"),
    ] {
        let (code, selected) = h.get(&url).await;
        assert_eq!(code, 200, "{selected}");
        let names: Vec<&str> = selected["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [name], "{url}");
    }
    // The core `source` field is the reporting controller when the event has no source.
    let (code, selected) = h
        .get(&format!("{core}?fieldSelector=source%3Dexample.com%2Fc"))
        .await;
    assert_eq!(code, 200, "{selected}");
    assert_eq!(selected["items"].as_array().unwrap().len(), 1, "{selected}");
    assert_eq!(selected["items"][0]["metadata"]["name"], "e1");
    // Deleted through one API, gone from the other.
    assert_eq!(h.delete(&format!("{core}/e1"), None).await.0, 200);
    assert_eq!(h.get(&format!("{newer}/e1")).await.0, 404);
    // events.k8s.io keeps its own, stricter validation.
    let (code, invalid) = h
        .post(
            newer,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "bad"}, "reason": "R", "type": "Normal"}),
        )
        .await;
    assert_eq!(code, 422, "{invalid}");
}

#[tokio::test]
async fn endpoints_without_a_table_refuse_one() {
    let h = Harness::new().await;
    let uri = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let request = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .header(
            "accept",
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        )
        .body(Body::from(
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
            .to_string(),
        ))
        .unwrap();
    let response = h
        .api
        .serve(&RequestInfo::new("POST", uri, ""), request)
        .await;
    assert_eq!(response.status().as_u16(), 406);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let status: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
    // Kinds with a table still print one.
    let request = Request::builder()
        .uri("/api/v1/namespaces")
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Body::empty())
        .unwrap();
    let response = h
        .api
        .serve(&RequestInfo::new("GET", "/api/v1/namespaces", ""), request)
        .await;
    assert_eq!(response.status().as_u16(), 200);
}

/// Bodies as upstream's encoder writes them, byte for byte where clients compare them (the
/// official Python client's own tests compare a conflict's body as text).
#[tokio::test]
async fn bodies_are_written_in_upstreams_field_order() {
    let h = Harness::new().await;
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mock-2"},
                         "spec": {"ports": [{"port": 80}]}});
    let uri = "/api/v1/namespaces/default/services";
    let send = async |body: &Value| {
        let request = Request::builder()
            .method("POST")
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = h
            .api
            .serve(&RequestInfo::new("POST", uri, ""), request)
            .await;
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    };
    let (code, created) = send(&service).await;
    assert_eq!(code, 201, "{created}");
    assert!(
        created.starts_with(r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"mock-2","namespace":"default","uid":"#),
        "{created}"
    );
    assert!(
        created.ends_with(",\"status\":{\"loadBalancer\":{}}}\n"),
        "{created}"
    );
    let (code, conflict) = send(&service).await;
    assert_eq!(code, 409);
    assert_eq!(
        conflict,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"services \\\"mock-2\\\" already exists\",\"reason\":\"AlreadyExists\",\
         \"details\":{\"name\":\"mock-2\",\"kind\":\"services\"},\"code\":409}\n"
    );
    // Reads from the cache, and lists, are written the same way.
    let (_, read) = h.get("/api/v1/namespaces/default/services/mock-2").await;
    assert_eq!(read["status"], json!({"loadBalancer": {}}));
    let request = Request::builder().uri(uri).body(Body::empty()).unwrap();
    let response = h
        .api
        .serve(&RequestInfo::new("GET", uri, ""), request)
        .await;
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let list = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(
        list.starts_with(
            r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"#
        ) && list.contains(r#""items":[{"metadata":{"name":"kubernetes","#)
            && list.contains(r#"{"metadata":{"name":"mock-2","#)
            && list.ends_with("}]}\n"),
        "{list}"
    );
}

#[test]
fn connect_requests_are_admitted_with_their_options_as_upstream_decodes_them() {
    let parts = |path: &str| -> Vec<String> { path.split('/').map(str::to_owned).collect() };
    let exec = super::connect_options(
        "pods",
        "exec",
        "command=ls&command=-l&container=c&stdin=true&tty=1&stdout=false",
        &[],
    );
    assert_eq!(
        exec,
        json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "tty": true,
               "container": "c", "command": ["ls", "-l"]})
    );
    let forward = super::connect_options("pods", "portforward", "ports=80,8080&ports=9", &[]);
    assert_eq!(forward["kind"], "PodPortForwardOptions");
    assert_eq!(forward["ports"], json!([80, 8080, 9]));
    let proxy = super::connect_options(
        "services",
        "proxy",
        "",
        &parts("api/v1/namespaces/ns/services/web/proxy/a/b"),
    );
    assert_eq!(
        proxy,
        json!({"kind": "ServiceProxyOptions", "apiVersion": "v1", "path": "/a/b"})
    );
}
