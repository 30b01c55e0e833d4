#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use axum::http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn get(path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    send(Method::GET, path, headers).await
}

async fn send(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn assert_secured(headers: &HeaderMap) {
    assert_eq!(
        headers[header::CONTENT_SECURITY_POLICY],
        CONTENT_SECURITY_POLICY
    );
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
}

#[test]
fn the_dashboards_paths_are_its_prefix_only() {
    assert!(serves("/dashboard"));
    assert!(serves("/dashboard/"));
    assert!(serves("/dashboard/v/0123/app.mjs"));
    assert!(!serves("/dashboards"));
    assert!(!serves("/dashboardx/"));
    assert!(!serves("/api/v1/dashboard/"));
    assert!(!serves("/"));
    assert!(!serves("/livez"));
}

#[test]
fn the_policy_allows_no_inline_script_and_no_framing() {
    let script = CONTENT_SECURITY_POLICY
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .unwrap();
    assert_eq!(script, "script-src 'self'");
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    assert!(CONTENT_SECURITY_POLICY.contains("default-src 'none'"));
}

#[tokio::test]
async fn the_bare_prefix_redirects_to_the_page() {
    let (status, headers, _) = get("/dashboard", &[]).await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], "/dashboard/");
    assert_secured(&headers);
}

#[tokio::test]
async fn the_page_names_its_assets_by_version_and_is_revalidated() {
    let (status, headers, body) = get("/dashboard/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_secured(&headers);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    let etag = headers[header::ETAG].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{}\"", version()));
    let page = String::from_utf8(body).unwrap();
    assert!(!page.contains("{{"), "every placeholder is filled: {page}");
    let script = format!(
        r#"<script type="module" src="/dashboard/v/{}/app.mjs">"#,
        version()
    );
    assert!(page.contains(&script), "{page}");
    // No inline script: every script element names its source.
    assert_eq!(
        page.matches("<script").count(),
        page.matches("<script type=\"module\" src=").count()
    );
    // Every asset the page names is served.
    for href in page.split('"').filter(|s| s.starts_with("/dashboard/v/")) {
        let (status, _, _) = get(href, &[]).await;
        assert_eq!(status, StatusCode::OK, "{href}");
    }
    // The same page again is not sent again.
    let (status, headers, body) = get("/dashboard/", &[("if-none-match", &etag)]).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_secured(&headers);
    let (status, _, _) = get("/dashboard/index.html", &[]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn assets_are_cached_for_good_and_compressed_when_asked() {
    let path = format!("/dashboard/v/{}/vendor/preact.mjs", version());
    let (status, headers, plain) = get(&path, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_secured(&headers);
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(headers[header::CACHE_CONTROL], IMMUTABLE);
    assert!(headers.get(header::CONTENT_ENCODING).is_none());
    assert_eq!(plain, include_bytes!("../assets/vendor/preact.mjs"));

    let (status, headers, compressed) =
        get(&path, &[("accept-encoding", "br;q=1.0, gzip;q=0.8")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert_eq!(headers[header::VARY], "Accept-Encoding");
    assert!(compressed.len() < plain.len());
    assert_eq!(gunzip(&compressed), plain);

    // gzip refused with q=0 is not used.
    let (_, headers, body) = get(&path, &[("accept-encoding", "gzip;q=0")]).await;
    assert!(headers.get(header::CONTENT_ENCODING).is_none());
    assert_eq!(body, plain);

    let css = format!("/dashboard/v/{}/style.css", version());
    let (status, headers, _) = get(&css, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
}

#[tokio::test]
async fn unknown_assets_and_stale_versions_are_not_found() {
    for path in [
        format!("/dashboard/v/{}/nothing.mjs", version()),
        format!("/dashboard/v/{}/../lib.rs", version()),
        "/dashboard/v/0000000000000000/app.mjs".to_owned(),
        "/dashboard/app.mjs".to_owned(),
        "/dashboard/v/".to_owned(),
    ] {
        let (status, headers, body) = get(&path, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_secured(&headers);
        assert_eq!(body, b"404 page not found\n");
    }
}

#[tokio::test]
async fn only_reads_are_served() {
    let (status, headers, _) = send(Method::POST, "/dashboard/", &[]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_secured(&headers);
    let (status, _, _) = send(Method::PUT, "/dashboard/nothing", &[]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, headers, body) = send(Method::HEAD, "/dashboard/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
    assert_secured(&headers);
}

/// Every module the application imports is an embedded asset, by a relative path: the browser
/// resolves imports with no import map (which would be an inline script).
#[test]
fn every_import_resolves_to_an_embedded_module() {
    for module in ASSETS.iter().filter(|a| a.path.ends_with(".mjs")) {
        let text = std::str::from_utf8(module.bytes).unwrap();
        let dir = module.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut imports = 0;
        for quote in ['"', '\''] {
            for marker in [format!("from{quote}"), format!("from {quote}")] {
                for piece in text.split(marker.as_str()).skip(1) {
                    let specifier = piece.split(quote).next().unwrap();
                    imports += 1;
                    let relative = specifier
                        .strip_prefix("./")
                        .unwrap_or_else(|| panic!("{}: bare import {specifier}", module.path));
                    let resolved = if dir.is_empty() {
                        relative.to_owned()
                    } else {
                        format!("{dir}/{relative}")
                    };
                    assert!(
                        ASSETS.iter().any(|a| a.path == resolved),
                        "{} imports {specifier}, which is not embedded",
                        module.path
                    );
                }
            }
        }
        if module.path == "app.mjs" {
            assert!(imports >= 5, "app.mjs imports its modules");
        }
    }
}

#[test]
fn the_version_is_a_digest_of_the_assets() {
    let version = version();
    assert_eq!(version.len(), 16);
    assert!(version.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn the_assets_stay_small() {
    let total: usize =
        built().gzipped.iter().map(Vec::len).sum::<usize>() + built().index_gzip.len();
    assert!(total < 100 * 1024, "{total} bytes compressed");
}
