//! The URL arithmetic of the proxy subresources, as upstream's Go does it: `[scheme:]name[:port]`
//! names (`SplitSchemeNamePort`), paths joined and cleaned as Go's `path.Join` and
//! `JoinPreservingTrailingSlash`, paths escaped as a Go `url.URL` writes them, the addresses
//! the proxy may reach (`IsGlobalUnicast`), and the rewriting of the backend's links and
//! redirects so that they lead back through the proxy (the proxy transport's `rewriteURL`).

use std::net::IpAddr;

/// `[scheme:]name[:port]` split as upstream's `SplitSchemeNamePort`: one, two or three parts,
/// a name that is not empty and a scheme that is empty, `http` or `https`. The port may be a
/// number, a port name, or empty.
pub(crate) fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// Whether the proxy may reach `ip`, as Go's `IsGlobalUnicast`: not unspecified, loopback,
/// multicast, link-local or the IPv4 broadcast address (private ranges are global unicast).
pub(crate) fn is_global_unicast(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// `host:port`, with an IPv6 host in brackets, as Go's `net.JoinHostPort`.
pub(crate) fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Go's `path.Clean`: the shortest path naming the same file (no `.`, no `x/..`, no repeated
/// slashes); `.` for an empty relative path.
pub(crate) fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    let rooted = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|last| *last != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Go's `path.Join`: the non-empty elements joined with `/` and cleaned; empty when all are.
pub(crate) fn join(elements: &[&str]) -> String {
    let nonempty: Vec<&str> = elements.iter().copied().filter(|e| !e.is_empty()).collect();
    if nonempty.is_empty() {
        return String::new();
    }
    clean(&nonempty.join("/"))
}

/// Upstream's `JoinPreservingTrailingSlash`: [`join`], keeping the trailing slash of the last
/// non-empty element.
pub(crate) fn join_preserving_trailing_slash(elements: &[&str]) -> String {
    let mut result = join(elements);
    if let Some(last) = elements.iter().rev().find(|e| !e.is_empty())
        && last.ends_with('/')
        && !result.ends_with('/')
    {
        result.push('/');
    }
    result
}

/// `%XX` escapes decoded (a path: `+` stays); malformed escapes are kept as they are.
pub(crate) fn unescape_lossy(text: &str) -> String {
    unescape(text).unwrap_or_else(|| {
        // Decode what decodes, keep the rest.
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && let Some(byte) = hex_pair(bytes.get(i + 1..i + 3))
            {
                out.push(byte);
                i += 3;
                continue;
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    let pair = pair?;
    if pair.len() != 2 || !pair.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()
}

/// `%XX` escapes decoded as Go's `url.PathUnescape`; `None` for a malformed escape.
fn unescape(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(hex_pair(bytes.get(i + 1..i + 3))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A path escaped as a Go `url.URL` writes its path: unreserved characters and `$&+,/:;=@`
/// as they are, everything else as `%XX`.
pub(crate) fn escape_path(path: &str) -> String {
    escape_keeping(path, b"$&+,/:;=@")
}

/// One path segment escaped as Go's `url.PathEscape` does: unreserved characters and `$&+:=@`
/// as they are, everything else (`/`, `,` and `;` too) as `%XX`.
pub(crate) fn escape_segment(segment: &str) -> String {
    escape_keeping(segment, b"$&+:=@")
}

/// `text` with every byte but the unreserved ones and `kept` as `%XX`.
fn escape_keeping(text: &str, kept: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) || kept.contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A URL as Go's `url.Parse` reads one, with what the rewriting needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    /// The scheme, lower-cased.
    scheme: Option<String>,
    /// `user[:password]` before an `@` in the authority.
    user: Option<String>,
    /// The host (with its port), as written.
    host: String,
    /// `scheme:/path` (an empty authority) rather than `scheme:///path`.
    omit_host: bool,
    /// Set for `scheme:rest` without a slash after the colon.
    opaque: Option<String>,
    /// The path, unescaped.
    path: String,
    /// The query, as written; `Some("")` for a lone `?`.
    query: Option<String>,
    /// The fragment, as written.
    fragment: Option<String>,
}

impl Url {
    /// Parses `text` as Go's `url.Parse`; `None` where Go's fails.
    fn parse(text: &str) -> Option<Url> {
        if text.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return None;
        }
        let (text, fragment) = match text.split_once('#') {
            Some((before, fragment)) => {
                unescape(fragment)?;
                (before, Some(fragment.to_owned()))
            }
            None => (text, None),
        };
        let mut url = Url {
            scheme: None,
            user: None,
            host: String::new(),
            omit_host: false,
            opaque: None,
            path: String::new(),
            query: None,
            fragment,
        };
        if text == "*" {
            url.path = "*".to_owned();
            return Some(url);
        }
        let mut rest = text;
        for (i, c) in text.bytes().enumerate() {
            match c {
                b'a'..=b'z' | b'A'..=b'Z' => {}
                b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
                b':' if i == 0 => return None,
                b':' => {
                    url.scheme = Some(text[..i].to_ascii_lowercase());
                    rest = &text[i + 1..];
                    break;
                }
                _ => break,
            }
        }
        if rest.ends_with('?') && rest.matches('?').count() == 1 {
            url.query = Some(String::new());
            rest = &rest[..rest.len() - 1];
        } else if let Some((before, query)) = rest.split_once('?') {
            url.query = Some(query.to_owned());
            rest = before;
        }
        if !rest.starts_with('/') {
            if url.scheme.is_some() {
                url.opaque = Some(rest.to_owned());
                return Some(url);
            }
            if rest.split('/').next().is_some_and(|s| s.contains(':')) {
                return None;
            }
        }
        if (url.scheme.is_some() || !rest.starts_with("///")) && rest.starts_with("//") {
            let authority = &rest[2..];
            let (authority, path) = match authority.find('/') {
                Some(i) => (&authority[..i], &authority[i..]),
                None => (authority, ""),
            };
            let (user, host) = match authority.rfind('@') {
                Some(i) => (Some(authority[..i].to_owned()), &authority[i + 1..]),
                None => (None, authority),
            };
            if !valid_host(host) {
                return None;
            }
            url.user = user;
            url.host = host.to_owned();
            rest = path;
        } else if url.scheme.is_some() && rest.starts_with('/') {
            url.omit_host = true;
        }
        url.path = unescape(rest)?;
        Some(url)
    }

    /// The URL written as Go's `URL.String()` writes it.
    fn to_text(&self) -> String {
        let mut out = String::new();
        if let Some(scheme) = &self.scheme {
            out.push_str(scheme);
            out.push(':');
        }
        if let Some(opaque) = &self.opaque {
            out.push_str(opaque);
        } else {
            if (self.scheme.is_some() || !self.host.is_empty() || self.user.is_some())
                && !(self.omit_host && self.host.is_empty() && self.user.is_none())
            {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    out.push_str("//");
                }
                if let Some(user) = &self.user {
                    out.push_str(user);
                    out.push('@');
                }
                out.push_str(&self.host);
            }
            let path = escape_path(&self.path);
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                out.push('/');
            }
            if out.is_empty() && path.split('/').next().is_some_and(|s| s.contains(':')) {
                out.push_str("./");
            }
            out.push_str(&path);
        }
        if let Some(query) = &self.query {
            out.push('?');
            out.push_str(query);
        }
        if let Some(fragment) = self.fragment.as_deref().filter(|f| !f.is_empty()) {
            out.push('#');
            out.push_str(fragment);
        }
        out
    }
}

/// Whether `host` (with an optional port) is one Go's URL parser accepts: a bracketed IPv6
/// address or a name, and a port of digits.
fn valid_host(host: &str) -> bool {
    let port = if let Some(rest) = host.strip_prefix('[') {
        match rest.find(']') {
            Some(i) => &rest[i + 1..],
            None => return false,
        }
    } else {
        match host.rfind(':') {
            Some(i) => &host[i..],
            None => "",
        }
    };
    match port.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    }
}

/// Rewrites the URLs a backend answers with (links in HTML, `Location`) to lead back through
/// the proxy, as upstream's proxy transport: a URL of the backend's host (or of the host the
/// client asked) with an absolute path gets the proxy's path in front of it and loses the
/// backend's scheme and host; others stay as they are.
#[derive(Debug, Clone)]
pub(crate) struct Rewriter {
    /// The backend's `host:port`, as the proxy reached it.
    pub backend_host: String,
    /// The `Host` the client asked the API server for.
    pub request_host: String,
    /// The path of the proxy subresource (the request's path without the backend's part):
    /// `/api/v1/namespaces/ns/pods/p/proxy`.
    pub prepend: String,
}

impl Rewriter {
    /// The rewritten `target`, or `None` to leave it as it is (another host, a relative path,
    /// or not a URL Go's parser reads).
    pub(crate) fn rewrite(&self, target: &str) -> Option<String> {
        let mut url = Url::parse(target)?;
        let different_host =
            !url.host.is_empty() && url.host != self.backend_host && url.host != self.request_host;
        if different_host || !url.path.starts_with('/') {
            return None;
        }
        if url.host != self.request_host {
            url.scheme = None;
            url.host = String::new();
        }
        if !url.path.starts_with(&self.prepend) {
            let trailing = url.path.ends_with('/');
            url.path = join(&[&self.prepend, &url.path]);
            if trailing {
                url.path.push('/');
            }
        }
        Some(url.to_text())
    }

    /// Whether a `Location` value is one Go's URL parser reads (a backend's unreadable
    /// redirect is an error upstream).
    pub(crate) fn parses(target: &str) -> bool {
        Url::parse(target).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_scheme_name_and_port() {
        assert_eq!(split_scheme_name_port("p"), Some(("", "p", "")));
        assert_eq!(split_scheme_name_port("p:80"), Some(("", "p", "80")));
        assert_eq!(split_scheme_name_port("p:http"), Some(("", "p", "http")));
        assert_eq!(
            split_scheme_name_port("https:p:443"),
            Some(("https", "p", "443"))
        );
        assert_eq!(split_scheme_name_port("https:p:"), Some(("https", "p", "")));
        assert_eq!(split_scheme_name_port("ftp:p:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn only_global_unicast_addresses_are_reachable() {
        for ok in [
            "10.42.0.5",
            "192.168.1.1",
            "8.8.8.8",
            "fd00::1",
            "2001:db8::1",
        ] {
            assert!(is_global_unicast(ok.parse().unwrap()), "{ok}");
        }
        for refused in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_global_unicast(refused.parse().unwrap()), "{refused}");
        }
    }

    #[test]
    fn paths_join_and_clean_as_go() {
        assert_eq!(clean("/a//b/./c/../d/"), "/a/b/d");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("a/../.."), "..");
        assert_eq!(clean(""), ".");
        assert_eq!(join(&["", ""]), "");
        assert_eq!(join(&["/api/p/proxy", "/x/y"]), "/api/p/proxy/x/y");
        assert_eq!(join_preserving_trailing_slash(&["", ""]), "");
        assert_eq!(join_preserving_trailing_slash(&["", "/"]), "/");
        assert_eq!(join_preserving_trailing_slash(&["", "/a//b/"]), "/a/b/");
        assert_eq!(join_preserving_trailing_slash(&["", "/a/../b"]), "/b");
    }

    #[test]
    fn paths_escape_as_a_go_url() {
        assert_eq!(
            escape_path("/results/wheezy_udp@kubernetes.default:x"),
            "/results/wheezy_udp@kubernetes.default:x"
        );
        assert_eq!(escape_path("/a b/(c)?"), "/a%20b/%28c%29%3F");
        assert_eq!(unescape_lossy("/a%20b/%zz"), "/a b/%zz");
    }

    fn rewriter() -> Rewriter {
        Rewriter {
            backend_host: "10.42.0.5:80".into(),
            request_host: "127.0.0.1:6443".into(),
            prepend: "/api/v1/namespaces/ns/pods/https:p:443/proxy".into(),
        }
    }

    #[test]
    fn links_of_the_backend_lead_back_through_the_proxy() {
        let r = rewriter();
        let prefix = "/api/v1/namespaces/ns/pods/https:p:443/proxy";
        assert_eq!(
            r.rewrite("/tlsrewriteme").unwrap(),
            format!("{prefix}/tlsrewriteme")
        );
        assert_eq!(r.rewrite("/a/b/").unwrap(), format!("{prefix}/a/b/"));
        assert_eq!(
            r.rewrite("/?x=1#top").unwrap(),
            format!("{prefix}/?x=1#top")
        );
        assert_eq!(
            r.rewrite("http://10.42.0.5:80/x").unwrap(),
            format!("{prefix}/x")
        );
        // The host the client asked for stays, with the prefix.
        assert_eq!(
            r.rewrite("https://127.0.0.1:6443/x").unwrap(),
            format!("https://127.0.0.1:6443{prefix}/x")
        );
        // Already through the proxy.
        assert_eq!(
            r.rewrite(&format!("{prefix}/y")).unwrap(),
            format!("{prefix}/y")
        );
        // Other hosts, relative paths, other schemes and what Go cannot parse stay.
        for same in [
            "http://example.com/x",
            "x/y",
            "mailto:a@b",
            "#frag",
            "/%zz",
            "http://h:port/x",
        ] {
            assert_eq!(r.rewrite(same), None, "{same}");
        }
        assert!(!Rewriter::parses("/%zz"));
        assert!(Rewriter::parses("/fine"));
    }
}
