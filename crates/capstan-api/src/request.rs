//! What a request is about, read from its method, path and query as upstream's request-info
//! resolver reads it: the Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
//! `delete`, `deletecollection`, or a special verb such as `proxy`), and for API resource requests
//! the group, version, namespace, resource, subresource and name.
//!
//! Authorization, admission, metrics and routing all work from this one description.

use crate::field::go_quote as quoted;
use crate::status::{GroupResource, StatusError};

/// A request's description.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the request is for an API resource (under `/api` or `/apis`) rather than a path
    /// such as `/healthz` or a discovery document.
    pub is_resource_request: bool,
    /// The URL path.
    pub path: String,
    /// The Kubernetes verb for resource requests; the lower-case HTTP method otherwise.
    pub verb: String,
    /// `api` or `apis` for resource requests.
    pub api_prefix: String,
    /// The API group (empty for the core group).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The namespace (for a namespace object itself, its name).
    pub namespace: String,
    /// Whether the path scopes the resource to a namespace (`.../namespaces/{ns}/{resource}`),
    /// as opposed to naming a namespace object (`.../namespaces/{name}`, its `status` or
    /// `finalize`), which also sets [`RequestInfo::namespace`].
    pub namespace_scoped_path: bool,
    /// The resource (plural name), e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The object's name when the request names one.
    pub name: String,
    /// The path segments from the resource on: `resource/name/subresource/...`.
    pub parts: Vec<String>,
}

/// Path segments that are verbs rather than resources.
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Subresources of a namespace, as opposed to resources inside it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// A query parameter's first value.
fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Decodes `%XX` escapes and `+` (as in a query string); malformed escapes stay as they are.
fn percent_decode(text: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The object name a field selector pins down (`metadata.name=x` or `metadata.name==x`), as
/// upstream treats a list or watch of one named object.
fn name_from_field_selector(selector: &str) -> Option<String> {
    let mut name = None;
    for term in selector.split(',') {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        if value.is_empty() || name.replace(value.to_owned()).is_some() {
            return None;
        }
    }
    // A name that cannot be a path segment does not count.
    name.filter(|n| n != "." && n != ".." && !n.contains('/') && !n.contains('%'))
}

impl RequestInfo {
    /// Describes a request. `query` is the raw query string (without `?`).
    pub fn new(method: &str, path: &str, query: &str) -> RequestInfo {
        let mut info = RequestInfo {
            path: path.to_owned(),
            verb: method.to_ascii_lowercase(),
            ..RequestInfo::default()
        };
        let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        if parts.len() == 1 && parts[0].is_empty() {
            parts.clear();
        }
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return info;
        }
        info.api_prefix = parts[0].to_owned();
        let mut rest = &parts[1..];
        if info.api_prefix == "apis" {
            if rest.len() < 3 {
                return info;
            }
            info.api_group = rest[0].to_owned();
            rest = &rest[1..];
        }
        info.is_resource_request = true;
        info.api_version = rest[0].to_owned();
        rest = &rest[1..];

        if SPECIAL_VERBS.contains(&rest[0]) {
            if rest.len() < 2 {
                return info;
            }
            info.verb = rest[0].to_owned();
            rest = &rest[1..];
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_owned();
        }

        if rest[0] == "namespaces" && rest.len() > 1 {
            info.namespace = rest[1].to_owned();
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
                info.namespace_scoped_path = true;
            }
        }
        info.parts = rest.iter().map(|p| (*p).to_owned()).collect();
        if let Some(resource) = rest.first() {
            info.resource = (*resource).to_owned();
        }
        if let Some(name) = rest.get(1) {
            info.name = (*name).to_owned();
        }
        if rest.len() >= 3 && info.verb != "proxy" {
            info.subresource = rest[2].to_owned();
        }

        if info.name.is_empty() && info.verb == "get" {
            let watch = query_value(query, "watch")
                .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"));
            info.verb = if watch { "watch" } else { "list" }.to_owned();
            if let Some(name) = query_value(query, "fieldSelector")
                .map(percent_decode)
                .and_then(|s| name_from_field_selector(&s))
            {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_owned();
        }
        info
    }

    /// The metrics scope: `resource` for one object, `namespace` or `cluster` for collections,
    /// empty for non-resource requests (upstream's `CleanScope`).
    pub fn scope(&self) -> &'static str {
        if !self.name.is_empty() || self.verb == "create" {
            "resource"
        } else if !self.namespace.is_empty() {
            "namespace"
        } else if self.is_resource_request {
            "cluster"
        } else {
            ""
        }
    }

    /// The error upstream's authorization filter returns when `user` may not do this.
    pub fn forbidden(&self, user: &str) -> StatusError {
        self.forbidden_because(user, "")
    }

    /// The error upstream's authorization filter returns when `user` may not do this and the
    /// authorizers gave `reason` (written after the description, as upstream does, when not
    /// empty), e.g. the Node authorizer's `no relationship found between node 'n1' and this
    /// object`.
    pub fn forbidden_because(&self, user: &str, reason: &str) -> StatusError {
        let user = quoted(user);
        let because = |description: String| {
            if reason.is_empty() {
                description
            } else {
                format!("{description}: {reason}")
            }
        };
        if !self.is_resource_request {
            let reason = because(format!(
                "User {user} cannot {} path {}",
                self.verb,
                quoted(&self.path)
            ));
            return StatusError::forbidden(GroupResource::default(), "", &reason);
        }
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let place = if self.namespace.is_empty() {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace {}", quoted(&self.namespace))
        };
        let reason = because(format!(
            "User {user} cannot {} resource {} in API group {} {place}",
            self.verb,
            quoted(&resource),
            quoted(&self.api_group)
        ));
        StatusError::forbidden(
            GroupResource::new(&self.api_group, &self.resource),
            &self.name,
            &reason,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (method, path?query) → (verb, group, version, namespace, resource, subresource, name)
    fn check(method: &str, url: &str, expected: (&str, &str, &str, &str, &str, &str, &str)) {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let info = RequestInfo::new(method, path, query);
        let got = (
            info.verb.as_str(),
            info.api_group.as_str(),
            info.api_version.as_str(),
            info.namespace.as_str(),
            info.resource.as_str(),
            info.subresource.as_str(),
            info.name.as_str(),
        );
        assert_eq!(got, expected, "{method} {url}");
        assert!(info.is_resource_request, "{method} {url}");
    }

    #[test]
    fn resource_requests_resolve_as_upstream() {
        check(
            "GET",
            "/api/v1/namespaces",
            ("list", "", "v1", "", "namespaces", "", ""),
        );
        check(
            "GET",
            "/api/v1/namespaces/other",
            ("get", "", "v1", "other", "namespaces", "", "other"),
        );
        check(
            "GET",
            "/api/v1/namespaces/other/pods",
            ("list", "", "v1", "other", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/namespaces/other/pods/foo",
            ("get", "", "v1", "other", "pods", "", "foo"),
        );
        check(
            "HEAD",
            "/api/v1/namespaces/other/pods/foo",
            ("get", "", "v1", "other", "pods", "", "foo"),
        );
        check(
            "GET",
            "/api/v1/pods",
            ("list", "", "v1", "", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/namespaces/other/pods/foo/status",
            ("get", "", "v1", "other", "pods", "status", "foo"),
        );
        check(
            "PUT",
            "/api/v1/namespaces/other/finalize",
            (
                "update",
                "",
                "v1",
                "other",
                "namespaces",
                "finalize",
                "other",
            ),
        );
        check(
            "PUT",
            "/api/v1/namespaces/other/status",
            ("update", "", "v1", "other", "namespaces", "status", "other"),
        );
        check(
            "GET",
            "/api/v1/watch/pods",
            ("watch", "", "v1", "", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/pods?watch=true",
            ("watch", "", "v1", "", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/pods?watch=false",
            ("list", "", "v1", "", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/pods?watch=0",
            ("list", "", "v1", "", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/watch/namespaces/other/pods",
            ("watch", "", "v1", "other", "pods", "", ""),
        );
        check(
            "GET",
            "/api/v1/proxy/namespaces/other/pods/foo/a/b",
            ("proxy", "", "v1", "other", "pods", "", "foo"),
        );
        check(
            "POST",
            "/api/v1/namespaces/other/pods",
            ("create", "", "v1", "other", "pods", "", ""),
        );
        check(
            "PATCH",
            "/apis/apps/v1/namespaces/other/deployments/web",
            ("patch", "apps", "v1", "other", "deployments", "", "web"),
        );
        check(
            "DELETE",
            "/apis/apps/v1/namespaces/other/deployments/web",
            ("delete", "apps", "v1", "other", "deployments", "", "web"),
        );
        check(
            "DELETE",
            "/apis/apps/v1/namespaces/other/deployments",
            (
                "deletecollection",
                "apps",
                "v1",
                "other",
                "deployments",
                "",
                "",
            ),
        );
        check(
            "GET",
            "/apis/apps/v1/namespaces/other/deployments/web/scale",
            ("get", "apps", "v1", "other", "deployments", "scale", "web"),
        );
        check(
            "GET",
            "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo",
            ("list", "", "v1", "other", "pods", "", "foo"),
        );
        check(
            "GET",
            "/api/v1/namespaces/other/pods?watch=1&fieldSelector=metadata.name==foo",
            ("watch", "", "v1", "other", "pods", "", "foo"),
        );
        check(
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3Dfoo,spec.nodeName%3Dn",
            ("list", "", "v1", "", "pods", "", ""),
        );
    }

    #[test]
    fn other_paths_are_non_resource_requests() {
        for (method, path) in [
            ("GET", "/"),
            ("GET", "/healthz"),
            ("GET", "/api"),
            ("GET", "/api/v1"),
            ("GET", "/apis"),
            ("GET", "/apis/apps"),
            ("GET", "/apis/apps/v1"),
            ("POST", "/version"),
        ] {
            let info = RequestInfo::new(method, path, "");
            assert!(!info.is_resource_request, "{path}");
            assert_eq!(info.verb, method.to_ascii_lowercase());
            assert_eq!(info.scope(), "");
        }
    }

    #[test]
    fn malformed_escapes_do_not_panic() {
        assert_eq!(percent_decode("a%3Db%zz%e2%8"), "a=b%zz\u{fffd}%8");
        assert_eq!(percent_decode("%C3%A9+x%"), "\u{e9} x%");
    }

    #[test]
    fn a_namespace_in_the_path_scopes_what_follows_it_not_a_namespace_object() {
        let scoped = |path: &str| RequestInfo::new("GET", path, "").namespace_scoped_path;
        assert!(scoped("/api/v1/namespaces/a/pods/x"));
        assert!(scoped("/api/v1/namespaces/a/nodes"));
        assert!(scoped("/apis/apps/v1/namespaces/a/deployments"));
        assert!(!scoped("/api/v1/namespaces/a"));
        assert!(!scoped("/api/v1/namespaces/a/status"));
        assert!(!scoped("/api/v1/namespaces/a/finalize"));
        assert!(!scoped("/api/v1/namespaces"));
        assert!(!scoped("/api/v1/nodes/n"));
    }

    #[test]
    fn scopes_follow_upstream() {
        let scope = |method: &str, path: &str| RequestInfo::new(method, path, "").scope();
        assert_eq!(scope("GET", "/api/v1/namespaces/a/pods/x"), "resource");
        assert_eq!(scope("POST", "/api/v1/namespaces/a/pods"), "resource");
        assert_eq!(scope("GET", "/api/v1/namespaces/a/pods"), "namespace");
        assert_eq!(scope("GET", "/api/v1/pods"), "cluster");
    }

    #[test]
    fn forbidden_messages_match_upstream() {
        let message = |method: &str, path: &str| {
            RequestInfo::new(method, path, "")
                .forbidden("jane")
                .status
                .message
                .unwrap_or_default()
        };
        assert_eq!(
            message("GET", "/api/v1/namespaces/default/pods"),
            "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        assert_eq!(
            message(
                "GET",
                "/apis/apps/v1/namespaces/default/deployments/web/scale"
            ),
            "deployments.apps \"web\" is forbidden: User \"jane\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"default\""
        );
        assert_eq!(
            message("GET", "/api/v1/nodes"),
            "nodes is forbidden: User \"jane\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
        assert_eq!(
            message("GET", "/metrics"),
            "forbidden: User \"jane\" cannot get path \"/metrics\""
        );
        let because = RequestInfo::new("GET", "/api/v1/namespaces/ns/secrets/x", "")
            .forbidden_because(
                "system:node:n1",
                "no relationship found between node 'n1' and this object",
            );
        assert_eq!(
            because.status.message.unwrap_or_default(),
            "secrets \"x\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"ns\": no relationship found between node 'n1' and this object"
        );
    }
}
