//! Discovery, generated from the catalogue: the legacy documents (`/api`, `/apis`,
//! `/apis/<group>`, and the resource list of each group-version, what `kubectl api-resources`
//! and `kubectl api-versions` printed from before 1.30) and the aggregated documents
//! (`apidiscovery.k8s.io/v2`, every group, version and resource of `/api` or `/apis` in one
//! answer, what client-go 1.30+ asks for first), chosen by the `Accept` header as upstream's
//! discovery handlers choose.
//!
//! Both forms come from one list per group-version, [`api_resources`]: the legacy lists serve it
//! as it is, and the aggregated documents convert it as upstream's
//! `ConvertGroupVersionIntoToDiscovery` does, so the two never disagree.

use std::sync::{Arc, OnceLock};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::StatusError;
use capstan_api::catalog::{self, Resource};
use capstan_api::custom::version_order;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
use serde::Serialize;
use serde_json::{Value, json};

use crate::status::ApiError;
use capstan_api::sha512_hex;

/// `/api`: the core group's versions.
fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// What discovery lists: the catalogue's resources, the custom resources served now, and the
/// group-versions extension API servers serve.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// The custom resources served.
    pub(crate) custom: Vec<&'static Resource>,
    /// The group-versions of APIServices backed by extension API servers.
    pub(crate) remote: Vec<RemoteVersion>,
}

/// A group-version an extension API server serves.
#[derive(Debug)]
pub(crate) struct RemoteVersion {
    pub group: &'static str,
    pub version: &'static str,
    pub group_priority: i32,
    pub version_priority: i32,
    /// What it listed at its last successful check (`None`: it has not answered).
    pub resources: Option<Vec<APIResource>>,
}

/// `text`, kept for the life of the process (group and version names of APIServices, which
/// discovery documents borrow as they borrow the catalogue's).
pub(crate) fn interned(text: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = names.iter().find(|n| **n == text) {
        return name;
    }
    let name: &'static str = Box::leak(text.to_owned().into_boxed_str());
    names.push(name);
    name
}

/// Upstream's priority of a custom resource group-version (its CRD's APIService).
const CUSTOM_PRIORITY: (i32, i32) = (1000, 100);

impl Served {
    /// Every resource served.
    fn resources(&self) -> impl Iterator<Item = &'static Resource> + '_ {
        catalog::resources().chain(self.custom.iter().copied())
    }

    /// The named groups: the catalogue's in upstream's order, then the custom and aggregated
    /// groups by their priority, highest first, then by name (upstream gives every CRD group
    /// the same priority, below the built-in ones; an APIService's group has the highest
    /// `groupPriorityMinimum` of its versions).
    fn groups(&self) -> Vec<&'static str> {
        let mut groups = catalog::groups();
        let mut others: Vec<(i32, &'static str)> = self
            .custom
            .iter()
            .map(|r| (CUSTOM_PRIORITY.0, r.group))
            .chain(self.remote.iter().map(|r| (r.group_priority, r.group)))
            .filter(|(_, g)| catalog::versions(g).is_empty())
            .collect();
        // Each group at its highest priority, then by priority and name.
        others.sort_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)));
        others.dedup_by(|later, first| later.1 == first.1);
        others.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        groups.extend(others.into_iter().map(|(_, g)| g));
        groups
    }

    /// The versions of `group`, preferred first: the catalogue's order, or for a custom group
    /// upstream's version priority (GA before beta before alpha, higher numbers first).
    fn versions(&self, group: &str) -> Vec<&'static str> {
        let builtin = catalog::versions(group);
        if !builtin.is_empty() {
            return builtin;
        }
        let mut versions: Vec<(i32, &'static str)> = self
            .custom
            .iter()
            .filter(|r| r.group == group)
            .map(|r| (CUSTOM_PRIORITY.1, r.version))
            .chain(
                self.remote
                    .iter()
                    .filter(|r| r.group == group)
                    .map(|r| (r.version_priority, r.version)),
            )
            .collect();
        versions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| version_order(a.1, b.1)));
        let mut versions: Vec<&'static str> = versions.into_iter().map(|(_, v)| v).collect();
        versions.dedup();
        versions
    }

    /// The extension API server's group-version, if `group`/`version` is one.
    fn remote(&self, group: &str, version: &str) -> Option<&RemoteVersion> {
        self.remote
            .iter()
            .find(|r| r.group == group && r.version == version)
    }

    /// The resources of one group-version.
    fn resources_in<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'static Resource> + 'a {
        self.resources()
            .filter(move |r| r.group == group && r.version == version)
    }
}

fn group(served: &Served, name: &str) -> Value {
    let versions: Vec<Value> = served
        .versions(name)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`: every named group.
fn api_group_list(served: &Served) -> Value {
    let groups: Vec<Value> = served
        .groups()
        .into_iter()
        .map(|g| group(served, g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if the group is served.
fn api_group(served: &Served, name: &str) -> Option<Value> {
    if !served.groups().contains(&name) {
        return None;
    }
    let mut doc = group(served, name);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// `None` for an empty list, which upstream omits.
fn non_empty(items: &[&str]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| strings(items))
}

/// The resources of one group-version as upstream's installer registers them, sorted by name:
/// each resource and its subresources (`deployments`, `deployments/scale`,
/// `deployments/status`, ...). A subresource names a group and version only when its kind lives
/// elsewhere (`Scale` in `autoscaling/v1`, `Eviction` in `policy/v1`).
fn api_resources(served: &Served, group: &str, version: &str) -> Vec<APIResource> {
    let mut entries = Vec::new();
    for r in served.resources_in(group, version) {
        entries.push(APIResource {
            name: r.plural.to_owned(),
            singular_name: r.singular.to_owned(),
            namespaced: r.namespaced,
            kind: r.kind.to_owned(),
            verbs: strings(r.verbs),
            short_names: non_empty(r.short_names),
            categories: non_empty(r.categories),
            ..APIResource::default()
        });
        for sub in r.subresources {
            let (group, version) = match sub.group_version {
                Some((g, v)) => (Some(g.to_owned()), Some(v.to_owned())),
                None => (None, None),
            };
            entries.push(APIResource {
                name: format!("{}/{}", r.plural, sub.name),
                namespaced: r.namespaced,
                group,
                version,
                kind: sub.kind.to_owned(),
                verbs: strings(sub.verbs),
                ..APIResource::default()
            });
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// `/api/v1` or `/apis/<group>/<version>`, if served.
fn api_resource_list(served: &Served, group: &str, version: &str) -> Option<Value> {
    // A group-version served in this process but not from the catalogue (the built-in Metrics
    // API) lists what it declared; requests for an extension API server's are passed on
    // before they get here.
    let resources = match served.remote(group, version) {
        Some(remote) => remote.resources.clone().unwrap_or_default(),
        None => api_resources(served, group, version),
    };
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    serde_json::to_value(APIResourceList {
        group_version,
        resources,
    })
    .ok()
}

// The aggregated documents. `k8s-openapi` has no `apidiscovery.k8s.io` types (they are not part
// of the OpenAPI documents it is generated from), so these mirror upstream's Go types
// (`k8s.io/api/apidiscovery/v2`), field order and `omitempty` included.

/// The group, version and kind of an aggregated document.
const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";
const AGGREGATED_VERSION: &str = "v2";
const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";

/// `metav1.GroupVersionKind`: every field written, empty or not.
#[derive(Debug, Serialize)]
struct GroupVersionKind {
    group: String,
    version: String,
    kind: String,
}

impl GroupVersionKind {
    /// The kind an entry of a legacy list answers with; empty group and version mean the
    /// group-version of the list itself, as upstream writes them.
    fn of(entry: &APIResource) -> Self {
        GroupVersionKind {
            group: entry.group.clone().unwrap_or_default(),
            version: entry.version.clone().unwrap_or_default(),
            kind: entry.kind.clone(),
        }
    }
}

/// `APISubresourceDiscovery` (upstream's `acceptedTypes` is never set for built-in resources).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiSubresourceDiscovery {
    subresource: String,
    response_kind: GroupVersionKind,
    verbs: Vec<String>,
}

/// `APIResourceDiscovery`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiResourceDiscovery {
    resource: String,
    response_kind: GroupVersionKind,
    scope: &'static str,
    singular_resource: String,
    verbs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    short_names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    categories: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subresources: Vec<ApiSubresourceDiscovery>,
}

/// `APIVersionDiscovery`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiVersionDiscovery {
    version: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    resources: Vec<ApiResourceDiscovery>,
    /// `Current`, or `Stale` for an extension API server's group-version it could not ask.
    freshness: &'static str,
}

/// The `metadata` of a group: only its name (omitted for the core group, `""`), and the
/// `creationTimestamp: null` every zero `ObjectMeta` carries in 1.33's JSON.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupMeta {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'static str,
    creation_timestamp: (),
}

/// `APIGroupDiscovery`: a group and its versions, preferred first.
#[derive(Debug, Serialize)]
struct ApiGroupDiscovery {
    metadata: GroupMeta,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    versions: Vec<ApiVersionDiscovery>,
}

/// An empty `ListMeta`, written as `{}`.
#[derive(Debug, Serialize)]
struct ListMeta {}

/// `APIGroupDiscoveryList`. Upstream hashes it for the ETag before the type is set, and
/// serves it with the type.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiGroupDiscoveryList<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    metadata: ListMeta,
    items: &'a [ApiGroupDiscovery],
}

/// Upstream's conversion of a legacy list into aggregated entries: the resources, then each
/// subresource under its parent, with the scope spelled out.
fn resource_discovery(entries: &[APIResource]) -> Vec<ApiResourceDiscovery> {
    let scope = |namespaced: bool| if namespaced { "Namespaced" } else { "Cluster" };
    let mut resources: Vec<ApiResourceDiscovery> = entries
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| ApiResourceDiscovery {
            resource: r.name.clone(),
            response_kind: GroupVersionKind::of(r),
            scope: scope(r.namespaced),
            singular_resource: r.singular_name.clone(),
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone().unwrap_or_default(),
            categories: r.categories.clone().unwrap_or_default(),
            subresources: Vec::new(),
        })
        .collect();
    for r in entries {
        let Some((parent, subresource)) = r.name.split_once('/') else {
            continue;
        };
        // The catalogue nests subresources in their resource, so the parent is always there.
        if let Some(parent) = resources.iter_mut().find(|p| p.resource == parent) {
            parent.subresources.push(ApiSubresourceDiscovery {
                subresource: subresource.to_owned(),
                response_kind: GroupVersionKind::of(r),
                verbs: r.verbs.clone(),
            });
        }
    }
    resources
}

fn group_discovery(served: &Served, name: &'static str) -> ApiGroupDiscovery {
    let versions = served
        .versions(name)
        .into_iter()
        .map(|version| match served.remote(name, version) {
            // What the extension API server listed, stale until it answers.
            Some(remote) => ApiVersionDiscovery {
                version,
                resources: resource_discovery(remote.resources.as_deref().unwrap_or_default()),
                freshness: if remote.resources.is_some() {
                    "Current"
                } else {
                    "Stale"
                },
            },
            None => ApiVersionDiscovery {
                version,
                resources: resource_discovery(&api_resources(served, name, version)),
                freshness: "Current",
            },
        })
        .collect();
    ApiGroupDiscovery {
        metadata: GroupMeta {
            name,
            creation_timestamp: (),
        },
        versions,
    }
}

/// An aggregated document, built once: its groups, its JSON and its ETag.
#[derive(Debug)]
struct Aggregated {
    items: Vec<ApiGroupDiscovery>,
    json: bytes::Bytes,
    /// Upstream's: the upper-case hex SHA-512 of the untyped list's JSON, quoted.
    etag: String,
}

impl Aggregated {
    fn new(items: Vec<ApiGroupDiscovery>) -> Self {
        let untyped = serde_json::to_vec(&Self::list(&items, false)).unwrap_or_default();
        let json = serde_json::to_vec(&Self::list(&items, true)).unwrap_or_default();
        Aggregated {
            etag: format!("\"{}\"", sha512_hex(&untyped)),
            json: json.into(),
            items,
        }
    }

    fn list(items: &[ApiGroupDiscovery], typed: bool) -> ApiGroupDiscoveryList<'_> {
        ApiGroupDiscoveryList {
            kind: typed.then_some(AGGREGATED_KIND),
            api_version: typed.then_some("apidiscovery.k8s.io/v2"),
            metadata: ListMeta {},
            items,
        }
    }

    /// `/api`: the core group alone.
    fn core() -> Arc<Aggregated> {
        static DOC: OnceLock<Arc<Aggregated>> = OnceLock::new();
        DOC.get_or_init(|| {
            Arc::new(Aggregated::new(vec![group_discovery(
                &Served::default(),
                "",
            )]))
        })
        .clone()
    }

    /// `/apis`: every named group, in the order the legacy `/apis` lists them (upstream's
    /// group priorities, which the catalogue follows, then the custom groups). Built once
    /// while only built-in groups are served, and for each request once custom ones are.
    fn groups(served: &Served) -> Arc<Aggregated> {
        static BUILTIN: OnceLock<Arc<Aggregated>> = OnceLock::new();
        let build = || {
            Arc::new(Aggregated::new(
                served
                    .groups()
                    .into_iter()
                    .map(|g| group_discovery(served, g))
                    .collect(),
            ))
        };
        if served.custom.is_empty() && served.remote.is_empty() {
            BUILTIN.get_or_init(build).clone()
        } else {
            build()
        }
    }
}

/// The encodings discovery documents are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Yaml,
}

impl Format {
    fn media_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
        }
    }
}

/// What a discovery request is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Negotiated {
    /// The aggregated document (`/api` and `/apis` only).
    Aggregated(Format),
    /// The legacy document.
    Legacy(Format),
    /// 406: nothing the client accepts can be written.
    NotAcceptable,
}

/// One media range of an `Accept` header.
#[derive(Debug)]
struct Clause<'a> {
    kind: &'a str,
    subtype: &'a str,
    q: f32,
    params: Vec<(&'a str, &'a str)>,
}

impl Clause<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| *v)
    }

    /// Whether the clause asks for a conversion (`as`, `g` or `v`), and which.
    fn conversion(&self) -> Option<(&str, &str, &str)> {
        let (g, v, kind) = (self.param("g"), self.param("v"), self.param("as"));
        (g.is_some() || v.is_some() || kind.is_some()).then(|| {
            (
                g.unwrap_or_default(),
                v.unwrap_or_default(),
                kind.unwrap_or_default(),
            )
        })
    }

    /// The encoding of ours this range admits, in upstream's order of preference (JSON first,
    /// so `*/*` and `application/*` mean JSON). Protobuf is never written here.
    fn format(&self) -> Option<Format> {
        match (self.kind, self.subtype) {
            ("application", "json") | ("application", "*") | ("*", "*") => Some(Format::Json),
            ("application", "yaml") => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// Parses an `Accept` header as upstream's `goautoneg` does: ranges ordered by quality, then
/// specific types before wildcards, otherwise in the order given.
fn parse_accept(accept: &str) -> Vec<Clause<'_>> {
    let mut clauses: Vec<Clause<'_>> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let (kind, subtype) = parts.next()?.split_once('/')?;
            let mut clause = Clause {
                kind: kind.trim(),
                subtype: subtype.trim(),
                q: 1.0,
                params: Vec::new(),
            };
            for param in parts {
                let (key, value) = param.split_once('=').unwrap_or((param, ""));
                let (key, value) = (key.trim(), value.trim().trim_matches('"'));
                if key == "q" {
                    clause.q = value.parse().unwrap_or(0.0);
                } else {
                    clause.params.push((key, value));
                }
            }
            Some(clause)
        })
        .collect();
    clauses.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then((a.kind == "*").cmp(&(b.kind == "*")))
            .then((a.subtype == "*").cmp(&(b.subtype == "*")))
    });
    clauses
}

/// Upstream's choice between the two documents: `/api` and `/apis` serve the aggregated one if
/// any range asks for `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` in an encoding we write
/// (the first such range wins, wherever plain ranges stand); otherwise, like every other
/// discovery path, the legacy document in the first plain range we can write. `v2beta1`, which
/// 1.33 no longer serves (its `AggregatedDiscoveryRemoveBetaType` gate is on by default), and
/// protobuf ranges are passed over, so client-go's list of alternatives falls through to plain
/// JSON and a client that accepts nothing else is told 406.
fn negotiate(accept: Option<&str>, aggregated_here: bool) -> Negotiated {
    let accept = accept.map(str::trim).unwrap_or_default();
    if accept.is_empty() {
        return Negotiated::Legacy(Format::Json);
    }
    let clauses = parse_accept(accept);
    if aggregated_here {
        let aggregated = clauses.iter().find_map(|c| {
            let wanted =
                c.conversion() == Some((AGGREGATED_GROUP, AGGREGATED_VERSION, AGGREGATED_KIND));
            wanted.then(|| c.format()).flatten()
        });
        if let Some(format) = aggregated {
            return Negotiated::Aggregated(format);
        }
    }
    clauses
        .iter()
        .filter(|c| c.conversion().is_none())
        .find_map(Clause::format)
        .map_or(Negotiated::NotAcceptable, Negotiated::Legacy)
}

fn encode(value: &impl Serialize, format: Format) -> Vec<u8> {
    match format {
        Format::Json => serde_json::to_vec(value).unwrap_or_default(),
        Format::Yaml => serde_saphyr::to_string(value)
            .map(String::into_bytes)
            .unwrap_or_default(),
    }
}

/// An aggregated document with upstream's headers: the converted media type, `Vary: Accept`,
/// the ETag, and 304 when `If-None-Match` names it.
fn respond_aggregated(doc: &Aggregated, format: Format, headers: &HeaderMap) -> Response {
    let content_type = format!(
        "{};g={AGGREGATED_GROUP};v={AGGREGATED_VERSION};as={AGGREGATED_KIND}",
        format.media_type()
    );
    let cache = [
        (header::ETAG, doc.etag.clone()),
        (header::VARY, "Accept".to_owned()),
        (header::CACHE_CONTROL, "public".to_owned()),
    ];
    let if_none_match = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if if_none_match == Some(doc.etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    let body = match format {
        Format::Json => doc.json.clone(),
        Format::Yaml => encode(&Aggregated::list(&doc.items, true), format).into(),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        cache,
        body,
    )
        .into_response()
}

/// Serves a discovery path (`path` without its leading or trailing slash), or `None` if it is
/// not one.
pub(crate) fn respond(
    path: &str,
    headers: &HeaderMap,
    server_address: &str,
    served: &Served,
) -> Option<Response> {
    let parts: Vec<&str> = path.split('/').collect();
    let (document, aggregated) = match parts.as_slice() {
        ["api"] => (api_versions(server_address), Some(Aggregated::core())),
        ["api", version] => (api_resource_list(served, "", version)?, None),
        ["apis"] => (api_group_list(served), Some(Aggregated::groups(served))),
        ["apis", group] => (api_group(served, group)?, None),
        ["apis", group, version] => (api_resource_list(served, group, version)?, None),
        _ => return None,
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    Some(
        match (negotiate(accept, aggregated.is_some()), aggregated) {
            (Negotiated::Aggregated(format), Some(doc)) => {
                respond_aggregated(&doc, format, headers)
            }
            (Negotiated::Legacy(format), _) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(format.media_type()),
                )],
                encode(&document, format),
            )
                .into_response(),
            _ => ApiError::from(StatusError::not_acceptable(&[
                "application/json",
                "application/yaml",
            ]))
            .into_response(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_versions_in_upstream_priority() {
        let mut versions = vec![
            "v1alpha1", "foo", "v1", "v2beta1", "v1beta2", "v2", "v1beta1", "bar",
        ];
        versions.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            versions,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }

    #[test]
    fn core_resources_are_listed_with_subresources_in_name_order() {
        let doc = api_resource_list(&Served::default(), "", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(names.contains(&"pods/status") && names.contains(&"pods/eviction"));
        let pods = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let eviction = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(eviction["group"], "policy");
        assert!(api_resource_list(&Served::default(), "apps", "v2").is_none());
    }

    /// What kubectl 1.30+ (client-go's discovery client) sends to `/api` and `/apis`.
    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
        application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    const V2_JSON: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

    async fn get(
        path: &str,
        headers: &[(header::HeaderName, &str)],
    ) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        let response = respond(path, &map, "127.0.0.1:6443", &Served::default()).unwrap();
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, 1 << 22).await.unwrap();
        (parts.status, parts.headers, body.to_vec())
    }

    async fn aggregated(path: &str) -> Value {
        let (code, headers, body) = get(path, &[(header::ACCEPT, KUBECTL_ACCEPT)]).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], V2_JSON);
        serde_json::from_slice(&body).unwrap()
    }

    fn find<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
        list.as_array()
            .unwrap()
            .iter()
            .find(|item| item[key] == name)
            .unwrap_or_else(|| panic!("no {key} {name} in {list}"))
    }

    const ALL: &[&str] = capstan_api::catalog::ALL_VERBS;

    #[tokio::test]
    async fn apis_lists_named_groups_with_deployments_as_upstream_writes_them() {
        let doc = aggregated("apis").await;
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(doc["metadata"], json!({}));
        let names: Vec<&str> = doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, catalog::groups(), "the legacy /apis order");
        let apps = &doc["items"][1];
        assert_eq!(
            apps["metadata"],
            json!({"name": "apps", "creationTimestamp": null})
        );
        let v1 = &apps["versions"][0];
        assert_eq!(
            (&v1["version"], &v1["freshness"]),
            (&json!("v1"), &json!("Current"))
        );
        // The entry of upstream's own fixture (api/discovery/aggregated_v2.json).
        assert_eq!(
            *find(&v1["resources"], "resource", "deployments"),
            json!({
                "resource": "deployments",
                "responseKind": {"group": "", "version": "", "kind": "Deployment"},
                "scope": "Namespaced",
                "singularResource": "deployment",
                "verbs": ALL,
                "shortNames": ["deploy"],
                "categories": ["all"],
                "subresources": [
                    {
                        "subresource": "scale",
                        "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                        "verbs": ["get", "patch", "update"]
                    },
                    {
                        "subresource": "status",
                        "responseKind": {"group": "", "version": "", "kind": "Deployment"},
                        "verbs": ["get", "patch", "update"]
                    }
                ]
            })
        );
        let revisions = find(&v1["resources"], "resource", "controllerrevisions");
        for omitted in ["shortNames", "categories", "subresources"] {
            assert!(revisions.get(omitted).is_none(), "{revisions}");
        }
    }

    #[tokio::test]
    async fn api_lists_the_core_group_without_a_name() {
        let doc = aggregated("api").await;
        assert_eq!(doc["items"].as_array().unwrap().len(), 1);
        let core = &doc["items"][0];
        assert_eq!(core["metadata"], json!({"creationTimestamp": null}));
        let v1 = &core["versions"][0];
        assert_eq!(v1["version"], "v1");
        let pods = find(&v1["resources"], "resource", "pods");
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "", "kind": "Pod"})
        );
        assert_eq!(
            pods["subresources"],
            json!([
                {
                    "subresource": "attach",
                    "responseKind": {"group": "", "version": "", "kind": "PodAttachOptions"},
                    "verbs": ["create", "get"]
                },
                {
                    "subresource": "binding",
                    "responseKind": {"group": "", "version": "", "kind": "Binding"},
                    "verbs": ["create"]
                },
                {
                    "subresource": "ephemeralcontainers",
                    "responseKind": {"group": "", "version": "", "kind": "Pod"},
                    "verbs": ["get", "patch", "update"]
                },
                {
                    "subresource": "eviction",
                    "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                    "verbs": ["create"]
                },
                {
                    "subresource": "exec",
                    "responseKind": {"group": "", "version": "", "kind": "PodExecOptions"},
                    "verbs": ["create", "get"]
                },
                {
                    "subresource": "log",
                    "responseKind": {"group": "", "version": "", "kind": "Pod"},
                    "verbs": ["get"]
                },
                {
                    "subresource": "portforward",
                    "responseKind": {"group": "", "version": "", "kind": "PodPortForwardOptions"},
                    "verbs": ["create", "get"]
                },
                {
                    "subresource": "proxy",
                    "responseKind": {"group": "", "version": "", "kind": "PodProxyOptions"},
                    "verbs": ["create", "delete", "get", "patch", "update"]
                },
                {
                    "subresource": "status",
                    "responseKind": {"group": "", "version": "", "kind": "Pod"},
                    "verbs": ["get", "patch", "update"]
                }
            ])
        );
        // Services and nodes are proxied to as upstream's connecters with a path.
        for (resource, kind) in [
            ("services", "ServiceProxyOptions"),
            ("nodes", "NodeProxyOptions"),
        ] {
            let entry = find(&v1["resources"], "resource", resource);
            assert_eq!(
                *find(&entry["subresources"], "subresource", "proxy"),
                json!({
                    "subresource": "proxy",
                    "responseKind": {"group": "", "version": "", "kind": kind},
                    "verbs": ["create", "delete", "get", "patch", "update"]
                })
            );
        }
        // A service account's token requests speak authentication.k8s.io/v1.
        let accounts = find(&v1["resources"], "resource", "serviceaccounts");
        assert_eq!(
            accounts["subresources"],
            json!([{
                "subresource": "token",
                "responseKind": {"group": "authentication.k8s.io", "version": "v1",
                                 "kind": "TokenRequest"},
                "verbs": ["create"]
            }])
        );
        let namespaces = find(&v1["resources"], "resource", "namespaces");
        assert_eq!(namespaces["scope"], "Cluster");
        assert_eq!(
            namespaces["verbs"],
            json!([
                "create", "delete", "get", "list", "patch", "update", "watch"
            ])
        );
        let finalize = find(&namespaces["subresources"], "subresource", "finalize");
        assert_eq!(finalize["verbs"], json!(["update"]));
    }

    /// Every entry of every legacy list says the same in the aggregated documents.
    #[tokio::test]
    async fn aggregated_documents_agree_with_the_legacy_lists() {
        let (core, named) = (aggregated("api").await, aggregated("apis").await);
        let groups = std::iter::once("").chain(catalog::groups());
        for group in groups {
            let doc = if group.is_empty() { &core } else { &named };
            let item = doc["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["metadata"]["name"].as_str().unwrap_or_default() == group)
                .unwrap();
            let versions: Vec<&str> = item["versions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["version"].as_str().unwrap())
                .collect();
            assert_eq!(versions, catalog::versions(group));
            for version in versions {
                let legacy = api_resource_list(&Served::default(), group, version).unwrap();
                let resources = &find(&item["versions"], "version", version)["resources"];
                let mut seen = 0;
                for entry in legacy["resources"].as_array().unwrap() {
                    let name = entry["name"].as_str().unwrap();
                    let (sub, parent) = match name.split_once('/') {
                        Some((parent, sub)) => (
                            find(
                                &find(resources, "resource", parent)["subresources"],
                                "subresource",
                                sub,
                            ),
                            None,
                        ),
                        None => {
                            let parent = find(resources, "resource", name);
                            (parent, Some(parent))
                        }
                    };
                    seen += 1;
                    assert_eq!(sub["verbs"], entry["verbs"], "{group}/{version} {name}");
                    assert_eq!(sub["responseKind"]["kind"], entry["kind"], "{name}");
                    assert_eq!(
                        sub["responseKind"]["group"],
                        entry.get("group").cloned().unwrap_or(json!("")),
                        "{name}"
                    );
                    let Some(parent) = parent else { continue };
                    assert_eq!(parent["singularResource"], entry["singularName"], "{name}");
                    assert_eq!(
                        parent["scope"] == "Namespaced",
                        entry["namespaced"] == true,
                        "{name}"
                    );
                    assert_eq!(parent.get("shortNames"), entry.get("shortNames"), "{name}");
                    assert_eq!(parent.get("categories"), entry.get("categories"), "{name}");
                }
                let aggregated_entries: usize = resources
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| 1 + r["subresources"].as_array().map_or(0, Vec::len))
                    .sum();
                assert_eq!(aggregated_entries, seen, "{group}/{version}");
            }
        }
    }

    #[tokio::test]
    async fn the_etag_is_upstreams_hash_and_if_none_match_gets_304() {
        let (code, headers, body) = get("apis", &[(header::ACCEPT, KUBECTL_ACCEPT)]).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(headers[header::VARY], "Accept");
        assert_eq!(headers[header::CACHE_CONTROL], "public");
        let etag = headers[header::ETAG].to_str().unwrap().to_owned();
        // Upstream writes the list in its Go field order and hashes it before its type is set.
        let body = String::from_utf8(body).unwrap();
        let typed = r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"apiregistration.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"apiservices","#;
        assert!(body.starts_with(typed), "{}", &body[..200]);
        let untyped = body.replacen(
            r#""kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","#,
            "",
            1,
        );
        assert_eq!(etag, format!("\"{}\"", sha512_hex(untyped.as_bytes())));
        assert_eq!(etag.len(), 130);

        let (code, headers, body) = get(
            "apis",
            &[
                (header::ACCEPT, KUBECTL_ACCEPT),
                (header::IF_NONE_MATCH, &etag),
            ],
        )
        .await;
        assert_eq!(code, StatusCode::NOT_MODIFIED);
        assert_eq!(headers[header::ETAG], etag.as_str());
        assert_eq!(headers[header::VARY], "Accept");
        assert!(body.is_empty());

        let (code, _, _) = get(
            "apis",
            &[
                (header::ACCEPT, KUBECTL_ACCEPT),
                (header::IF_NONE_MATCH, "\"stale\""),
            ],
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        let (_, core, _) = get("api", &[(header::ACCEPT, V2_JSON)]).await;
        assert_ne!(core[header::ETAG], etag.as_str());
    }

    #[tokio::test]
    async fn plain_json_and_older_clients_get_the_legacy_documents() {
        // kubectl 1.27-1.29 ask for v2beta1 first, which 1.33 no longer serves.
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        for accept in [None, Some("application/json"), Some("*/*"), Some(beta)] {
            let headers: Vec<_> = accept.map(|a| (header::ACCEPT, a)).into_iter().collect();
            let (code, response, body) = get("apis", &headers).await;
            assert_eq!(code, StatusCode::OK);
            assert_eq!(response[header::CONTENT_TYPE], "application/json");
            assert!(response.get(header::ETAG).is_none() && response.get(header::VARY).is_none());
            let doc: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(doc["kind"], "APIGroupList", "{accept:?}");
            let (_, _, body) = get("api", &headers).await;
            let doc: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(doc["kind"], "APIVersions", "{accept:?}");
        }
        // Resource lists have no aggregated form: the plain alternative, or 406 without one.
        let (code, _, body) = get("apis/apps/v1", &[(header::ACCEPT, KUBECTL_ACCEPT)]).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap()["kind"],
            "APIResourceList"
        );
        let (code, _, body) = get("apis/apps/v1", &[(header::ACCEPT, V2_JSON)]).await;
        assert_eq!(code, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap()["reason"],
            "NotAcceptable"
        );
        assert!(
            respond(
                "apis/nope.example.com",
                &HeaderMap::new(),
                "",
                &Served::default()
            )
            .is_none()
        );
    }

    #[tokio::test]
    async fn protobuf_alternatives_fall_through_and_yaml_is_written() {
        let protobuf = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let (code, _, body) = get("apis", &[(header::ACCEPT, protobuf)]).await;
        assert_eq!(code, StatusCode::NOT_ACCEPTABLE);
        let status: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            status["message"],
            "only the following media types are accepted: application/json, application/yaml"
        );
        let (code, headers, _) = get(
            "apis",
            &[(header::ACCEPT, &format!("{protobuf},{V2_JSON}"))],
        )
        .await;
        assert_eq!(
            (code, &headers[header::CONTENT_TYPE]),
            (StatusCode::OK, &HeaderValue::from_static(V2_JSON))
        );
        let (code, headers, _) = get(
            "apis",
            &[(header::ACCEPT, &format!("{protobuf},application/json"))],
        )
        .await;
        assert_eq!(
            (code, &headers[header::CONTENT_TYPE]),
            (
                StatusCode::OK,
                &HeaderValue::from_static("application/json")
            )
        );

        let yaml = "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let (code, headers, body) = get("api", &[(header::ACCEPT, yaml)]).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], yaml);
        let body = String::from_utf8(body).unwrap();
        assert!(
            body.starts_with("kind: APIGroupDiscoveryList\napiVersion: apidiscovery.k8s.io/v2\n"),
            "{body}"
        );
    }

    #[test]
    fn negotiation_follows_upstream() {
        use Format::{Json, Yaml};
        use Negotiated::{Aggregated as Agg, Legacy, NotAcceptable as No};
        const PB: &str = "application/vnd.kubernetes.protobuf";
        let any_order = "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io";
        let nopeer = format!("{V2_JSON};profile=nopeer,{KUBECTL_ACCEPT}");
        let plain_first = format!("application/json,{V2_JSON}");
        let wildcard = "*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        let v1 = "application/json;g=apidiscovery.k8s.io;v=v1;as=APIGroupDiscoveryList";
        let yaml = "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let pb_then_json = format!("{PB},application/json");
        // (Accept, served at /api or /apis, answer)
        let cases: &[(Option<&str>, bool, Negotiated)] = &[
            (None, true, Legacy(Json)),
            (Some(""), true, Legacy(Json)),
            (Some("application/json"), true, Legacy(Json)),
            (Some("application/json, */*"), true, Legacy(Json)),
            (Some(KUBECTL_ACCEPT), true, Agg(Json)),
            (Some(KUBECTL_ACCEPT), false, Legacy(Json)),
            (Some(V2_JSON), false, No),
            // Parameters in any order; unknown ones (client-go 1.35's `profile`) are ignored.
            (Some(any_order), true, Agg(Json)),
            (Some(&nopeer), true, Agg(Json)),
            (Some(wildcard), true, Agg(Json)),
            // The aggregated form wins wherever it stands: upstream's wrapper looks for it first.
            (Some(&plain_first), true, Agg(Json)),
            (Some(beta), true, No),
            (Some(v1), true, No),
            (Some(yaml), true, Agg(Yaml)),
            // Quality orders the alternatives.
            (
                Some("application/json;q=0.5,application/yaml"),
                true,
                Legacy(Yaml),
            ),
            (
                Some("application/yaml;q=0.1,application/json"),
                true,
                Legacy(Json),
            ),
            (Some(PB), true, No),
            (Some(&pb_then_json), true, Legacy(Json)),
            (
                Some("application/json;as=Table;g=meta.k8s.io;v=v1"),
                true,
                No,
            ),
            (Some("text/html"), false, No),
        ];
        for (accept, aggregated_here, expected) in cases {
            assert_eq!(
                negotiate(*accept, *aggregated_here),
                *expected,
                "{accept:?} {aggregated_here}"
            );
        }
    }

    #[test]
    fn groups_prefer_their_first_version() {
        let apps = api_group(&Served::default(), "apps").unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        assert_eq!(apps["kind"], "APIGroup");
        assert!(api_group(&Served::default(), "nope.example.com").is_none());
        let list = api_group_list(&Served::default());
        assert!(
            list["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "batch")
        );
    }
}
