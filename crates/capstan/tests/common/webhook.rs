//! A test admission webhook server: HTTPS on loopback with a certificate from its own CA (for
//! `127.0.0.1` and the DNS names given), answering AdmissionReviews at a few paths:
//!
//! - `/deny`: refuses (403) an object, or for a delete the old object, labelled `deny=yes`,
//!   and attaching to a container named `denied`;
//! - `/mutate`: allows, with a JSON patch that labels the object `mutated=yes` and the warning
//!   `labelled by the test webhook`;
//! - `/scale-even`: a mutating webhook for `Scale` objects: an odd `spec.replicas` is raised to
//!   the next even count;
//! - `/scale-limit`: refuses (403) a `Scale` of more than 5 replicas, with the count;
//! - `/slow`: answers after 5 s;
//! - `/garbage`: answers `200` with a body that is not JSON;
//! - `/convert`: a CRD conversion webhook (ConversionReview) between `v1`, whose `spec.hostPort`
//!   is `host:port`, and `v2`, with `spec.host` and `spec.port`; it refuses objects labelled
//!   `convert=refuse`.
//!
//! Any other path allows. Every review received is kept, for tests to look at, with the path
//! it was sent to as its `path`.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};

pub struct WebhookServer {
    pub port: u16,
    /// The CA that signed the serving certificate, PEM.
    pub ca_pem: String,
    /// The reviews received, in order.
    pub reviews: Arc<Mutex<Vec<Value>>>,
    _https: super::https::Https,
}

impl WebhookServer {
    /// Serves on a free loopback port, with a certificate for `127.0.0.1`, `localhost` and
    /// `dns_names`.
    pub fn start(dns_names: &[&str]) -> WebhookServer {
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let kept = reviews.clone();
        let https = super::https::serve(dns_names, None, move |request| {
            let kept = kept.clone();
            async move { answer(request, kept).await }
        });
        WebhookServer {
            port: https.port,
            ca_pem: https.ca_pem.clone(),
            reviews,
            _https: https,
        }
    }

    /// The CA bundle as a configuration's `caBundle` carries it.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The reviews received so far for objects named `name`.
    pub fn reviews_of(&self, name: &str) -> Vec<Value> {
        self.reviews
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["request"]["name"] == name)
            .cloned()
            .collect()
    }
}

fn labelled_deny(object: &Value) -> bool {
    object["metadata"]["labels"]["deny"] == "yes"
}

fn attaches_to_denied(request: &Value) -> bool {
    request["kind"]["kind"] == "PodAttachOptions" && request["object"]["container"] == "denied"
}

async fn answer(
    request: hyper::Request<Incoming>,
    kept: Arc<Mutex<Vec<Value>>>,
) -> hyper::Response<Full<bytes::Bytes>> {
    let path = request.uri().path().to_owned();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut recorded = review.clone();
    if let Some(fields) = recorded.as_object_mut() {
        fields.insert("path".to_owned(), path.clone().into());
    }
    kept.lock().unwrap().push(recorded);
    let request = &review["request"];
    if path == "/convert" {
        return json_reply(&json!({
            "apiVersion": review["apiVersion"],
            "kind": "ConversionReview",
            "response": convert(request),
        }));
    }
    let mut response = json!({"uid": request["uid"], "allowed": true});
    match path.as_str() {
        "/deny"
            if labelled_deny(&request["object"])
                || labelled_deny(&request["oldObject"])
                || attaches_to_denied(request) =>
        {
            response["allowed"] = false.into();
            response["status"] = json!({"code": 403, "message": "the object is labelled deny"});
        }
        "/mutate" => {
            let patch = if request["object"]["metadata"]["labels"].is_object() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            response["patchType"] = "JSONPatch".into();
            response["warnings"] = json!(["labelled by the test webhook"]);
            response["patch"] = base64::engine::general_purpose::STANDARD
                .encode(patch.to_string())
                .into();
        }
        "/scale-even" => {
            let replicas = request["object"]["spec"]["replicas"].as_i64().unwrap_or(0);
            if request["kind"]["kind"] == "Scale" && replicas % 2 == 1 {
                let patch =
                    json!([{"op": "replace", "path": "/spec/replicas", "value": replicas + 1}]);
                response["patchType"] = "JSONPatch".into();
                response["patch"] = base64::engine::general_purpose::STANDARD
                    .encode(patch.to_string())
                    .into();
            }
        }
        "/scale-limit" => {
            let replicas = request["object"]["spec"]["replicas"].as_i64().unwrap_or(0);
            if request["object"]["kind"] == "Scale" && replicas > 5 {
                response["allowed"] = false.into();
                response["status"] = json!({"code": 403,
                    "message": format!("scale to at most 5 replicas, not {replicas}")});
            }
        }
        "/slow" => tokio::time::sleep(Duration::from_secs(5)).await,
        "/garbage" => {
            return hyper::Response::new(Full::new(bytes::Bytes::from_static(b"<html>no</html>")));
        }
        _ => {}
    }
    json_reply(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
}

/// The answer to a ConversionReview's request.
fn convert(request: &Value) -> Value {
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let mut converted = Vec::new();
    for object in request["objects"].as_array().into_iter().flatten() {
        if object["metadata"]["labels"]["convert"] == "refuse" {
            return json!({
                "uid": request["uid"],
                "result": {"status": "Failure", "message": "the object refuses conversion"},
            });
        }
        let mut object = object.clone();
        let spec = object["spec"].as_object_mut().unwrap();
        if desired.ends_with("/v2") {
            if let Some(Value::String(host_port)) = spec.remove("hostPort") {
                let (host, port) = host_port.split_once(':').unwrap_or((&host_port, ""));
                spec.insert("host".into(), host.into());
                spec.insert("port".into(), port.into());
            }
        } else if let (Some(Value::String(host)), Some(Value::String(port))) =
            (spec.remove("host"), spec.remove("port"))
        {
            spec.insert("hostPort".into(), format!("{host}:{port}").into());
        }
        object["apiVersion"] = desired.into();
        converted.push(object);
    }
    json!({"uid": request["uid"], "result": {"status": "Success"}, "convertedObjects": converted})
}

fn json_reply(answer: &Value) -> hyper::Response<Full<bytes::Bytes>> {
    let mut reply = hyper::Response::new(Full::new(bytes::Bytes::from(answer.to_string())));
    reply.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    reply
}
