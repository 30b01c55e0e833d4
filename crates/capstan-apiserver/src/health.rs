//! `/healthz`, `/livez`, `/readyz` and `/version`, answered as upstream answers them: plain
//! `ok`, or with `?verbose` one `[+]name ok` / `[-]name failed` line per check and a closing
//! line; 500 when a check fails.

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_store::Store;

/// Checks that the datastore answers.
async fn datastore_check(store: &Store) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(2), store.current_revision()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

async fn report(kind: &str, store: &Store, verbose: bool) -> Response {
    // Upstream names the storage check "etcd" whatever the backend; clients grep for it.
    let checks = [("ping", Ok(())), ("etcd", datastore_check(store).await)];
    let healthy = checks.iter().all(|(_, result)| result.is_ok());
    let mut body = String::new();
    if verbose || !healthy {
        for (name, result) in &checks {
            match result {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    tracing::warn!(check = name, %reason, "{kind} check failed");
                    body.push_str(&format!("[-]{name} failed: reason withheld\n"));
                }
            }
        }
        body.push_str(&format!(
            "{kind} check {}\n",
            if healthy { "passed" } else { "failed" }
        ));
    } else {
        body.push_str("ok");
    }
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

fn is_verbose(query: &HashMap<String, String>) -> bool {
    query.contains_key("verbose")
}

pub(crate) async fn healthz(
    State(store): State<Store>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    report("healthz", &store, is_verbose(&query)).await
}

pub(crate) async fn livez(
    State(store): State<Store>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    report("livez", &store, is_verbose(&query)).await
}

pub(crate) async fn readyz(
    State(store): State<Store>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    report("readyz", &store, is_verbose(&query)).await
}

/// `/version`, in upstream's `version.Info` shape.
pub(crate) async fn version() -> Json<serde_json::Value> {
    let minor = capstan_api::KUBERNETES_MINOR.to_string();
    Json(serde_json::json!({
        "major": "1",
        "minor": minor,
        "emulationMajor": "1",
        "emulationMinor": minor,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": (capstan_api::KUBERNETES_MINOR - 1).to_string(),
        "gitVersion": capstan_api::kubernetes_version(),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    }))
}

/// The architecture under Go's name, as clients expect it in `platform`.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
