//! The Capstan web dashboard: a single-page application served by `capstan server` at
//! `/dashboard/` (off with `--disable-dashboard`).
//!
//! This crate holds no cluster logic and no credentials. It embeds the page's static assets
//! (`assets/`: the HTML shell, the stylesheet, the application's ES modules and the vendored
//! Preact and htm modules) in the binary and serves them through [`router`], which the API
//! server mounts ahead of its authentication: the assets carry no cluster data, and the page
//! needs them to let a user log in. Everything the page shows it reads in the browser from the
//! API server's own REST API on the same origin, with the user's own credentials (a bearer
//! token, or the browser's TLS client certificate), so a user sees exactly what RBAC grants.
//!
//! Layout of the served paths:
//! - `/dashboard` redirects to `/dashboard/`;
//! - `/dashboard/` (and `/dashboard/index.html`) is the HTML shell, revalidated on every load
//!   (its ETag is the assets' version);
//! - `/dashboard/v/<version>/<file>` are the assets, where `<version>` is a digest of all of
//!   them: they are cached for a year as immutable, and a stale version is a 404;
//! - everything else under `/dashboard/` is a 404.
//!
//! Every answer carries a `Content-Security-Policy` allowing scripts, styles and connections
//! from the same origin only (no inline scripts), `X-Content-Type-Options: nosniff` and
//! `X-Frame-Options: DENY`; assets are sent gzip-compressed to clients that accept it.

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The path the dashboard is served under.
pub const PREFIX: &str = "/dashboard";

/// The policy every answer carries: nothing but the same origin, no inline script or style, no
/// framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// How long a versioned asset may be cached.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// One embedded file.
#[derive(Debug)]
struct Asset {
    /// Its path under `/dashboard/v/<version>/`.
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            bytes: include_bytes!(concat!("../assets/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// The versioned assets.
static ASSETS: &[Asset] = &[
    asset!("app.mjs", JS),
    asset!("html.mjs", JS),
    asset!("api.mjs", JS),
    asset!("views.mjs", JS),
    asset!("detail.mjs", JS),
    asset!("metrics.mjs", JS),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("vendor/preact.mjs", JS),
    asset!("vendor/hooks.mjs", JS),
    asset!("vendor/htm.mjs", JS),
    asset!("vendor/LICENSE.preact", TEXT),
    asset!("vendor/LICENSE.htm", TEXT),
    asset!("vendor/VERSIONS", TEXT),
];

/// The HTML shell; `{{ASSETS}}` stands for `/dashboard/v/<version>`.
const INDEX_TEMPLATE: &str = include_str!("../assets/index.html");

/// What is computed once from the embedded files.
#[derive(Debug)]
struct Built {
    version: String,
    index: Vec<u8>,
    index_gzip: Vec<u8>,
    /// Each asset's gzip form, in [`ASSETS`]' order.
    gzipped: Vec<Vec<u8>>,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        for asset in ASSETS {
            digest.update(asset.path.as_bytes());
            digest.update(&[0]);
            digest.update(&(asset.bytes.len() as u64).to_be_bytes());
            digest.update(asset.bytes);
        }
        let version: String = digest
            .finish()
            .as_ref()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        let index = INDEX_TEMPLATE
            .replace("{{ASSETS}}", &format!("{PREFIX}/v/{version}"))
            .into_bytes();
        Built {
            index_gzip: gzip(&index),
            gzipped: ASSETS.iter().map(|a| gzip(a.bytes)).collect(),
            version,
            index,
        }
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing into a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// The digest naming the current assets (the `<version>` of their paths).
pub fn version() -> &'static str {
    &built().version
}

/// Whether `path` is the dashboard's (the API server passes those to [`router`] before
/// authentication).
pub fn serves(path: &str) -> bool {
    path == PREFIX
        || path
            .strip_prefix(PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The dashboard's routes (only its own paths; see [`serves`]). The assets' version and their
/// compressed forms are computed here, once per process, rather than on the first request.
pub fn router() -> Router {
    built();
    Router::new()
        .route(PREFIX, get(redirect))
        .route("/dashboard/", get(index))
        .route("/dashboard/index.html", get(index))
        .route("/dashboard/v/{version}/{*file}", get(asset))
        .fallback(not_found)
        .layer(axum::middleware::map_response(
            |response: Response| async move { secured(response) },
        ))
}

/// The headers every answer carries (a layer over every route).
fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn redirect() -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(header::LOCATION, "/dashboard/")],
    )
        .into_response()
}

async fn not_found(method: Method) -> Response {
    let status = if method == Method::GET || method == Method::HEAD {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::METHOD_NOT_ALLOWED
    };
    (
        status,
        [
            (header::CONTENT_TYPE, TEXT),
            (header::CACHE_CONTROL, "no-store"),
        ],
        if status == StatusCode::NOT_FOUND {
            "404 page not found\n"
        } else {
            "405 method not allowed\n"
        },
    )
        .into_response()
}

/// Whether the client takes gzip (`Accept-Encoding` names it, or `*`, without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|entry| {
            let mut parts = entry.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// A body, compressed when the client takes it.
fn body(
    headers: &HeaderMap,
    content_type: &'static str,
    cache: &'static str,
    plain: &'static [u8],
    gzipped: &'static [u8],
) -> Response {
    let gzip = accepts_gzip(headers);
    let mut response = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, cache),
            (header::VARY, "Accept-Encoding"),
        ],
        Body::from(if gzip { gzipped } else { plain }),
    )
        .into_response();
    if gzip {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn index(headers: HeaderMap) -> Response {
    let built = built();
    let etag = format!("\"{}\"", built.version);
    let mut response = if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag))
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body(
            &headers,
            "text/html; charset=utf-8",
            "no-cache",
            &built.index,
            &built.index_gzip,
        )
    };
    if let Ok(value) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

async fn asset(
    method: Method,
    Path((version, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let built = built();
    let found = (version == built.version)
        .then(|| ASSETS.iter().position(|a| a.path == file))
        .flatten();
    match found {
        Some(i) => body(
            &headers,
            ASSETS[i].content_type,
            IMMUTABLE,
            ASSETS[i].bytes,
            &built.gzipped[i],
        ),
        None => not_found(method).await,
    }
}

#[cfg(test)]
mod tests;
