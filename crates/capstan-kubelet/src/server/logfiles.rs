//! The kubelet API's `/logs/`: the node's log directory served as upstream's kubelet serves it,
//! through Go's `http.FileServer` (`http.StripPrefix("/logs/", http.FileServer(http.Dir(
//! "/var/log/")))`): a directory is listed in Go's HTML form (entries sorted by name,
//! directories with a `/`), a directory asked for without its slash is redirected to it (and a
//! file asked for with one, to the file), a directory with an `index.html` is served that file,
//! a file is sent with its `Last-Modified` (and `304` to a matching `If-Modified-Since`) and a
//! content type from its name or its first bytes. Ranges are not served; the whole file is.

use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use tokio::io::AsyncReadExt as _;

use crate::server::Body;

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    if !content_type.is_empty() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        );
    }
    response
}

/// Go's `http.Error`: the message and a newline as plain text.
fn error(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = full(status, "text/plain; charset=utf-8", format!("{message}\n"));
    response.headers_mut().insert(
        "x-content-type-options",
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// Go's `localRedirect`: a `301` to `target` (relative), keeping the query.
fn redirect<B>(request: &Request<B>, target: &str) -> Response<Body> {
    let mut location = target.to_owned();
    if let Some(query) = request.uri().query().filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(query);
    }
    let mut response = full(StatusCode::MOVED_PERMANENTLY, "", Bytes::new());
    if let Ok(value) = header::HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// `%XX` escapes decoded; `None` when one is malformed.
fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let pair = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(pair, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A name written into a listing's link as Go's `url.URL{Path: name}.String()` writes it.
fn href(name: &str) -> String {
    let mut out = String::new();
    if name
        .split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        out.push_str("./");
    }
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Go's `htmlReplacer`.
fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// The file `name` (a cleaned, slash-separated path) under `root`, as Go's `http.Dir` opens it:
/// `..` cannot climb above the root.
fn resolve(root: &Path, name: &str) -> PathBuf {
    let mut path = root.to_path_buf();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::ParentDir if path != root => {
                path.pop();
            }
            _ => {}
        }
    }
    path
}

/// Serves `/logs/<rest>` (`full_path` is the request's path) from `root`.
pub(crate) async fn serve<B>(
    root: &Path,
    full_path: &str,
    rest: &str,
    request: &Request<B>,
) -> Response<Body> {
    let Some(rest) = unescape(rest) else {
        return error(StatusCode::BAD_REQUEST, "400 Bad Request");
    };
    // What the file server sees once the prefix is stripped.
    let url = format!("/{rest}");
    if url.ends_with("/index.html") {
        return redirect(request, "./");
    }
    let path = resolve(root, &url);
    let metadata = match tokio::fs::metadata(&path).await {
        Ok(metadata) => metadata,
        Err(e) => return open_error(&e),
    };
    let base = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    if metadata.is_dir() {
        if !url.ends_with('/') {
            return redirect(request, &format!("{base}/"));
        }
        let index = path.join("index.html");
        if let Ok(meta) = tokio::fs::metadata(&index).await
            && meta.is_file()
        {
            return file(&index, &meta, request).await;
        }
        return listing(&path, &metadata, request).await;
    }
    if url.ends_with('/') || full_path.ends_with('/') {
        return redirect(request, &format!("../{base}"));
    }
    file(&path, &metadata, request).await
}

/// Go's `toHTTPError`.
fn open_error(e: &std::io::Error) -> Response<Body> {
    match e.kind() {
        std::io::ErrorKind::NotFound => error(StatusCode::NOT_FOUND, "404 page not found"),
        std::io::ErrorKind::PermissionDenied => error(StatusCode::FORBIDDEN, "403 Forbidden"),
        _ => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500 Internal Server Error",
        ),
    }
}

/// `Last-Modified`, and whether a matching `If-Modified-Since` makes the answer a `304`.
fn modified<B>(metadata: &std::fs::Metadata, request: &Request<B>) -> (Option<String>, bool) {
    let Ok(time) = metadata.modified() else {
        return (None, false);
    };
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let Ok(stamp) = k8s_openapi::jiff::Timestamp::from_second(seconds as i64) else {
        return (None, false);
    };
    let text = stamp.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let unchanged = request
        .headers()
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|since| since == text);
    (Some(text), unchanged)
}

/// A directory's listing, as Go's `dirList`.
async fn listing<B>(
    dir: &Path,
    metadata: &std::fs::Metadata,
    request: &Request<B>,
) -> Response<Body> {
    let (last_modified, unchanged) = modified(metadata, request);
    if unchanged {
        return full(StatusCode::NOT_MODIFIED, "", Bytes::new());
    }
    let mut entries = Vec::new();
    let mut read = match tokio::fs::read_dir(dir).await {
        Ok(read) => read,
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "Error reading directory"),
    };
    loop {
        match read.next_entry().await {
            Ok(Some(entry)) => {
                let mut name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                    name.push('/');
                }
                entries.push(name);
            }
            Ok(None) => break,
            Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "Error reading directory"),
        }
    }
    entries.sort_by(|a, b| a.trim_end_matches('/').cmp(b.trim_end_matches('/')));
    let mut html = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for name in &entries {
        html.push_str(&format!(
            "<a href=\"{}\">{}</a>\n",
            href(name),
            html_escape(name)
        ));
    }
    html.push_str("</pre>\n");
    let mut response = full(StatusCode::OK, "text/html; charset=utf-8", html);
    if let Some(value) = last_modified.and_then(|t| header::HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert(header::LAST_MODIFIED, value);
    }
    response
}

/// The content type Go's file server gives a file: from its extension, else from its first
/// bytes (`http.DetectContentType`, for the kinds a log directory holds).
fn content_type(path: &Path, head: &[u8]) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => return "text/html; charset=utf-8",
        Some("json") => return "application/json",
        Some("xml") => return "text/xml; charset=utf-8",
        Some("css") => return "text/css; charset=utf-8",
        Some("js") => return "text/javascript; charset=utf-8",
        _ => {}
    }
    if head.starts_with(b"\x1f\x8b\x08") {
        return "application/x-gzip";
    }
    let binary = head
        .iter()
        .any(|b| matches!(b, 0x00..=0x08 | 0x0B | 0x0E..=0x1A | 0x1C..=0x1F));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// A file's contents, streamed.
async fn file<B>(
    path: &Path,
    metadata: &std::fs::Metadata,
    request: &Request<B>,
) -> Response<Body> {
    let (last_modified, unchanged) = modified(metadata, request);
    if unchanged {
        return full(StatusCode::NOT_MODIFIED, "", Bytes::new());
    }
    let mut opened = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) => return open_error(&e),
    };
    let mut head = vec![0u8; 512];
    let mut filled = 0;
    while filled < head.len() {
        match opened.read(&mut head[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return open_error(&e),
        }
    }
    head.truncate(filled);
    let kind = content_type(path, &head);
    let first = futures::stream::once(async move { Ok(Frame::data(Bytes::from(head))) });
    let rest = futures::stream::unfold(Some(opened), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 32 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Frame::data(Bytes::from(buf))), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    let body = BodyExt::boxed(StreamBody::new(first.chain(rest)));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    headers.insert(
        header::ACCEPT_RANGES,
        header::HeaderValue::from_static("bytes"),
    );
    if let Ok(length) = header::HeaderValue::from_str(&metadata.len().to_string()) {
        headers.insert(header::CONTENT_LENGTH, length);
    }
    if let Some(value) = last_modified.and_then(|t| header::HeaderValue::from_str(&t).ok()) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(root: &Path, path: &str) -> (StatusCode, http::HeaderMap, String) {
        let request = Request::get(path).body(()).unwrap();
        let rest = path.strip_prefix("/logs/").unwrap();
        let response = serve(root, path, rest.split('?').next().unwrap(), &request).await;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn directories_list_as_gos_file_server_lists_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pods")).unwrap();
        std::fs::write(dir.path().join("syslog"), "line one\nline two\n").unwrap();
        std::fs::write(dir.path().join("a&b.log"), "x").unwrap();
        let (status, headers, body) = get(dir.path(), "/logs/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(
            body,
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
             <a href=\"a&b.log\">a&amp;b.log</a>\n<a href=\"pods/\">pods/</a>\n\
             <a href=\"syslog\">syslog</a>\n</pre>\n"
        );
        let (status, headers, body) = get(dir.path(), "/logs/syslog").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(headers[header::CONTENT_LENGTH], "18");
        assert!(headers.contains_key(header::LAST_MODIFIED));
        assert_eq!(body, "line one\nline two\n");
        // A directory without its slash, and a file with one, are redirected.
        let (status, headers, _) = get(dir.path(), "/logs/pods?x=1").await;
        assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(headers[header::LOCATION], "pods/?x=1");
        let (status, headers, _) = get(dir.path(), "/logs/syslog/").await;
        assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(headers[header::LOCATION], "../syslog");
        let (status, _, body) = get(dir.path(), "/logs/missing").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::NOT_FOUND, "404 page not found\n")
        );
        // `..` does not leave the directory.
        let (status, _, _) = get(dir.path(), "/logs/../../etc/passwd").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
