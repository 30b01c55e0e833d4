//! A test extension API server for `wardle.example.com/v1alpha1`: HTTPS on loopback with a
//! certificate from its own CA (for `127.0.0.1`, `localhost` and the DNS names given) that
//! demands a client certificate signed by the CA it is given (the API server's front proxy
//! CA, as an extension API server reads it from `extension-apiserver-authentication`).
//!
//! It lists one namespaced resource, `flunders`, at `/apis/wardle.example.com/v1alpha1`, and
//! answers a list of flunders with one flunder named after the user the front proxy sent
//! (`X-Remote-User`), whose `spec.groups` are the `X-Remote-Group` values. Every request's
//! path and headers are kept, for tests to look at.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::{Value, json};

pub const GROUP_VERSION: &str = "wardle.example.com/v1alpha1";

/// A request received: its path and headers (names lower case).
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The values of header `name`.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

pub struct ExtensionServer {
    pub port: u16,
    /// The CA that signed the serving certificate, PEM.
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _https: super::https::Https,
}

impl ExtensionServer {
    /// Serves on a free loopback port, trusting client certificates signed by `client_ca_pem`.
    pub fn start(dns_names: &[&str], client_ca_pem: &str) -> ExtensionServer {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let https = super::https::serve(dns_names, Some(client_ca_pem), move |request| {
            let answer = answer(request, &kept);
            async move { answer }
        });
        ExtensionServer {
            port: https.port,
            ca_pem: https.ca_pem.clone(),
            seen,
            _https: https,
        }
    }

    /// The CA bundle as an APIService's `caBundle` carries it.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The requests received so far whose path starts with `prefix`.
    pub fn seen_under(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .cloned()
            .collect()
    }
}

fn flunder(name: &str, namespace: &str, groups: &[&str]) -> Value {
    json!({"apiVersion": GROUP_VERSION, "kind": "Flunder",
           "metadata": {"name": name, "namespace": namespace}, "spec": {"groups": groups}})
}

fn answer(
    request: hyper::Request<Incoming>,
    kept: &Mutex<Vec<Seen>>,
) -> hyper::Response<Full<bytes::Bytes>> {
    let path = request.uri().path().to_owned();
    let seen = Seen {
        path: path.clone(),
        headers: request
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
    };
    kept.lock().unwrap().push(seen.clone());
    let user = seen
        .header("x-remote-user")
        .first()
        .copied()
        .unwrap_or("")
        .to_owned();
    let groups = seen.header("x-remote-group");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let body = match parts.as_slice() {
        ["apis", "wardle.example.com", "v1alpha1"] => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
            "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                           "kind": "Flunder", "verbs": ["get", "list"]}],
        }),
        [
            "apis",
            "wardle.example.com",
            "v1alpha1",
            "namespaces",
            namespace,
            "flunders",
        ] => json!({
            "apiVersion": GROUP_VERSION, "kind": "FlunderList", "metadata": {"resourceVersion": "1"},
            "items": [flunder(&format!("seen-by-{}", user.replace(':', "-")), namespace, &groups)],
        }),
        _ => {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": "not found", "reason": "NotFound",
                                "code": 404});
            return reply(404, &status);
        }
    };
    reply(200, &body)
}

fn reply(code: u16, body: &Value) -> hyper::Response<Full<bytes::Bytes>> {
    hyper::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(serde_json::to_vec(body).unwrap().into()))
        .unwrap()
}
