//! `/healthz`, `/livez`, `/readyz` and `/version`, answered as upstream answers them: plain
//! `ok`, or with `?verbose` one `[+]name ok` / `[-]name failed` line per check and a closing
//! line; 500 when a check fails.

use std::collections::HashMap;
use std::time::Duration;

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

/// What the binary knows of its own build, reported by `/version`.
#[derive(Clone, Debug, Default)]
pub struct BuildInfo {
    /// The commit built from, 40 hex digits (empty when unknown).
    pub git_commit: String,
    /// `clean` or `dirty` (empty when unknown).
    pub git_tree_state: String,
    /// When the binary was built, `YYYY-MM-DDTHH:MM:SSZ`.
    pub build_date: String,
}

static BUILD: std::sync::OnceLock<BuildInfo> = std::sync::OnceLock::new();

/// Records the running binary's build, once, before the server starts (later calls are
/// ignored: a process has one build).
pub fn set_build_info(info: BuildInfo) {
    let _ = BUILD.set(info);
}

/// Upstream's `version.Info`, its members in the struct's order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct VersionInfo {
    major: String,
    minor: String,
    emulation_major: String,
    emulation_minor: String,
    min_compatibility_major: String,
    min_compatibility_minor: String,
    git_version: String,
    git_commit: String,
    git_tree_state: String,
    build_date: String,
    go_version: String,
    compiler: String,
    platform: String,
}

/// `/version` (and `/version/`), written as upstream writes it: indented by two spaces, in
/// `version.Info`'s member order, without a closing newline.
pub(crate) async fn version() -> Response {
    let minor = capstan_api::KUBERNETES_MINOR.to_string();
    let build = BUILD.get().cloned().unwrap_or_default();
    let tree_state = if build.git_tree_state.is_empty() {
        "clean".to_owned()
    } else {
        build.git_tree_state
    };
    let info = VersionInfo {
        major: "1".to_owned(),
        minor: minor.clone(),
        emulation_major: "1".to_owned(),
        emulation_minor: minor,
        min_compatibility_major: "1".to_owned(),
        min_compatibility_minor: (capstan_api::KUBERNETES_MINOR - 1).to_string(),
        git_version: capstan_api::kubernetes_version(),
        git_commit: build.git_commit,
        git_tree_state: tree_state,
        build_date: build.build_date,
        go_version: String::new(),
        compiler: "rustc".to_owned(),
        platform: format!("{}/{}", std::env::consts::OS, go_arch()),
    };
    let body = serde_json::to_string_pretty(&info).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The architecture under Go's name, as clients expect it in `platform`.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
