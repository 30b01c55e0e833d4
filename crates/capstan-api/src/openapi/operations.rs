//! The paths and operations of the documents, derived from the catalogue in a form neither v2 nor
//! v3: one [`PathItem`] per URL template, each with its path-level parameters and operations.
//! Operation ids, tags, actions and parameters follow upstream's API installer: `listCoreV1
//! NamespacedPod`, `deleteAppsV1CollectionNamespacedDeployment`, `watchCoreV1PodListForAllNamespaces`,
//! `patchAppsV1NamespacedDeploymentScale`, `connectCoreV1PostNamespacedPodExec`,
//! `connectCoreV1HeadNodeProxyWithPath`, tag `apps_v1`, action `watchlist`, ...

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::version;
use serde_json::{Value, json};

use super::definitions::{Definitions, Gvk, name_of, reference};
use crate::catalog::{self, Resource, Stream, Subresource};

/// An HTTP method of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Put,
    Post,
    Delete,
    Patch,
    Head,
    Options,
}

impl Method {
    /// The key of the operation in its path item.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Put => "put",
            Method::Post => "post",
            Method::Delete => "delete",
            Method::Patch => "patch",
            Method::Head => "head",
            Method::Options => "options",
        }
    }
}

/// Where a parameter is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum In {
    Path,
    Query,
}

impl In {
    /// The `in` of the parameter.
    pub(crate) fn key(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
        }
    }
}

/// A path or query parameter.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub name: &'static str,
    pub location: In,
    /// `string`, `integer` or `boolean`.
    pub ty: &'static str,
    pub description: Cow<'static, str>,
}

/// The request body of an operation.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    /// An object of the definition named, in any media type the server decodes.
    Object(String),
    /// A patch, in one of these media types.
    Patch(&'static [&'static str]),
    /// Optional `DeleteOptions`.
    DeleteOptions,
}

/// The body of an operation's responses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// An object of the definition named.
    Object(String),
    /// Bytes with no schema (a log, what a connection carries), described as a string.
    Bytes,
}

impl Payload {
    /// An object of definition `name`.
    fn of(name: &str) -> Payload {
        Payload::Object(name.to_owned())
    }

    /// The schema of the payload, with a v3 reference for an object.
    pub(crate) fn schema(&self) -> Value {
        match self {
            Payload::Object(name) => reference(name),
            Payload::Bytes => json!({"type": "string"}),
        }
    }
}

/// The responses of an operation: which status codes, and whether the body may be a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Responses {
    /// 200.
    Ok,
    /// 200, 201 and 202: a create.
    Created,
    /// 200 and 201: a replace or a patch.
    Replaced,
    /// 200 and 202: a delete.
    Deleted,
    /// 200 with the streaming media types too: a list or a watch.
    Streamed,
    /// 200 in JSON only: `/version/`.
    JsonOnly,
    /// 200 in the media types listed: a subresource served by the pod's node.
    Produces(&'static [&'static str]),
}

impl Responses {
    /// The status codes with a body, and their descriptions.
    pub(crate) fn codes(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Responses::Ok | Responses::Streamed | Responses::JsonOnly | Responses::Produces(_) => {
                &[("200", "OK")]
            }
            Responses::Created => &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
            Responses::Replaced => &[("200", "OK"), ("201", "Created")],
            Responses::Deleted => &[("200", "OK"), ("202", "Accepted")],
        }
    }

    /// The media types the response may come in.
    pub(crate) fn media_types(self) -> &'static [&'static str] {
        match self {
            Responses::JsonOnly => &["application/json"],
            Responses::Streamed => &[
                "application/json",
                "application/json;stream=watch",
                "application/vnd.kubernetes.protobuf",
                "application/vnd.kubernetes.protobuf;stream=watch",
                "application/yaml",
            ],
            Responses::Produces(media_types) => media_types,
            _ => OBJECT_MEDIA_TYPES,
        }
    }
}

/// The media types an object is served in.
pub(crate) const OBJECT_MEDIA_TYPES: &[&str] = &[
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
];

/// The media types a patch of `group`/`version` `kind` may be sent in: every patch type for a
/// built-in kind, no strategic merge patch for a custom one (upstream has no patch metadata
/// for it; kubectl reads this list to choose).
pub(crate) fn patch_media_types(group: &str, version: &str, kind: &str) -> &'static [&'static str] {
    if crate::strategic::for_kind(group, version, kind).is_some() {
        PATCH_MEDIA_TYPES
    } else {
        &CUSTOM_PATCH_MEDIA_TYPES
    }
}

/// The media types a patch of a custom resource may be sent in, sorted.
const CUSTOM_PATCH_MEDIA_TYPES: [&str; 3] = [
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// The media types a patch may be sent in.
pub(crate) const PATCH_MEDIA_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// One operation.
#[derive(Clone, Debug)]
pub(crate) struct Operation {
    pub method: Method,
    pub id: String,
    pub description: String,
    pub tag: String,
    /// `x-kubernetes-action`: get, list, watch, watchlist, post, put, patch, delete,
    /// deletecollection, connect; none for discovery.
    pub action: Option<&'static str>,
    /// `x-kubernetes-group-version-kind` of the object read or written.
    pub gvk: Option<Gvk>,
    /// Operation-level parameters, sorted by name.
    pub params: Vec<Param>,
    pub body: Option<Body>,
    /// The body of the responses with one.
    pub response: Payload,
    pub responses: Responses,
}

impl Operation {
    /// Adds the operation's `x-kubernetes-action` and `x-kubernetes-group-version-kind`, where
    /// it has them, to its OpenAPI (v2 or v3) object `out`.
    pub(crate) fn insert_extensions(&self, out: &mut serde_json::Map<String, serde_json::Value>) {
        if let Some(action) = self.action {
            out.insert("x-kubernetes-action".into(), action.into());
        }
        if let Some(gvk) = &self.gvk {
            out.insert(super::definitions::GVK_EXTENSION.into(), gvk.to_value());
        }
    }
}

/// The operations at one URL template.
#[derive(Clone, Debug)]
pub(crate) struct PathItem {
    pub path: String,
    /// Parameters of every operation at this path, sorted by name.
    pub params: Vec<Param>,
    pub operations: Vec<Operation>,
}

/// The root-relative paths of every document served under `/openapi/v3/`, in the order the root
/// lists them: `api`, `api/v1`, `apis`, then `apis/<group>` and `apis/<group>/<version>` per
/// group, and `version`.
pub(crate) fn document_paths() -> Vec<String> {
    let mut paths = vec!["api".to_owned()];
    for version in catalog::versions("") {
        paths.push(format!("api/{version}"));
    }
    paths.push("apis".to_owned());
    for group in catalog::groups() {
        paths.push(format!("apis/{group}"));
        for version in catalog::versions(group) {
            paths.push(format!("apis/{group}/{version}"));
        }
    }
    paths.push("version".to_owned());
    paths
}

/// The path items of the document at root-relative `path` (one of [`document_paths`]).
pub(crate) fn document(defs: &Definitions, path: &str) -> Option<Vec<PathItem>> {
    let segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        ["api"] => Some(vec![discovery_item(
            "/api/",
            "getCoreAPIVersions",
            "get the versions of the core API",
            "core",
            name_of::<meta::APIVersions>(),
        )]),
        ["apis"] => Some(vec![discovery_item(
            "/apis/",
            "getAPIVersions",
            "get the API groups and their versions",
            "apis",
            name_of::<meta::APIGroupList>(),
        )]),
        ["version"] => Some(vec![PathItem {
            path: "/version/".to_owned(),
            params: Vec::new(),
            operations: vec![Operation {
                method: Method::Get,
                id: "getCodeVersion".to_owned(),
                description: "get the version of the server".to_owned(),
                tag: "version".to_owned(),
                action: None,
                gvk: None,
                params: Vec::new(),
                body: None,
                response: Payload::Object(name_of::<version::Info>()),
                responses: Responses::JsonOnly,
            }],
        }]),
        ["api", version] if catalog::versions("").contains(version) => {
            Some(group_version(defs, "", version))
        }
        ["apis", group] if catalog::groups().contains(group) => {
            let naming = Naming::new(group, "");
            Some(vec![discovery_item(
                &format!("/apis/{group}/"),
                &format!("get{}APIGroup", naming.group),
                "get information of a group",
                &naming.group_tag,
                name_of::<meta::APIGroup>(),
            )])
        }
        ["apis", group, version] if catalog::versions(group).contains(version) => {
            Some(group_version(defs, group, version))
        }
        _ => None,
    }
}

/// A discovery path with a single `get`.
fn discovery_item(
    path: &str,
    id: &str,
    description: &str,
    tag: &str,
    response: String,
) -> PathItem {
    PathItem {
        path: path.to_owned(),
        params: Vec::new(),
        operations: vec![Operation {
            method: Method::Get,
            id: id.to_owned(),
            description: description.to_owned(),
            tag: tag.to_owned(),
            action: None,
            gvk: None,
            params: Vec::new(),
            body: None,
            response: Payload::Object(response),
            responses: Responses::Ok,
        }],
    }
}

/// Upstream's `ToValidOperationID`: letters (and digits after the first character) are kept,
/// every other character is dropped and capitalises the next letter.
pub(crate) fn to_operation_id(s: &str, capitalize_first: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut capitalize = capitalize_first;
    for (i, c) in s.chars().enumerate() {
        if c.is_alphabetic() || c == '_' || (i != 0 && c.is_numeric()) {
            if capitalize {
                out.extend(c.to_uppercase());
                capitalize = false;
            } else {
                out.push(c);
            }
        } else {
            capitalize = true;
        }
    }
    out
}

/// The group and version parts of the operation ids and tags of a group-version.
struct Naming {
    /// `Core`, `Apps`, `Events`, `RbacAuthorization`, ...
    group: String,
    /// `core`, `apps`, `events`, `rbacAuthorization`, ...
    group_tag: String,
    /// `V1`.
    version: String,
    /// `apps_v1`.
    tag: String,
}

impl Naming {
    fn new(group: &str, version: &str) -> Self {
        let trimmed = if group.is_empty() {
            "core"
        } else {
            group.strip_suffix(".k8s.io").unwrap_or(group)
        };
        let group_tag = to_operation_id(trimmed, false);
        Naming {
            group: to_operation_id(trimmed, true),
            tag: format!("{group_tag}_{}", to_operation_id(version, false)),
            group_tag,
            version: to_operation_id(version, true),
        }
    }

    /// `verb` + group + version + `rest`: `listAppsV1NamespacedDeployment`.
    fn id(&self, verb: &str, rest: &str) -> String {
        format!("{verb}{}{}{rest}", self.group, self.version)
    }

    /// The operation `spec` describes, on an object of kind `gvk`.
    fn operation(&self, gvk: &Gvk, spec: Spec<'_>) -> Operation {
        Operation {
            method: spec.method,
            id: self.id(spec.verb, &spec.rest),
            description: spec.description,
            tag: self.tag.clone(),
            action: Some(spec.action),
            gvk: Some(gvk.clone()),
            params: sorted(spec.params),
            body: spec.body,
            response: spec.response,
            responses: spec.responses,
        }
    }
}

/// What tells one operation on a resource from another.
struct Spec<'a> {
    method: Method,
    /// The first word of the operation id: `list`, `read`, `watch`, ...
    verb: &'a str,
    /// What follows the group and version in the operation id: `NamespacedPodStatus`.
    rest: String,
    description: String,
    action: &'static str,
    body: Option<Body>,
    /// The body of the responses with one.
    response: Payload,
    responses: Responses,
    params: Vec<Param>,
}

/// The path items of one group-version: the resource list, then every resource's collection,
/// object, all-namespaces, watch and subresource paths.
fn group_version(defs: &Definitions, group: &str, version: &str) -> Vec<PathItem> {
    let naming = Naming::new(group, version);
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut items = vec![discovery_item(
        &format!("{prefix}/"),
        &naming.id("get", "APIResources"),
        "get available resources",
        &naming.tag,
        name_of::<meta::APIResourceList>(),
    )];
    for resource in catalog::resources_in(group, version) {
        resource_items(defs, &naming, &prefix, resource, &mut items);
    }
    items
}

/// The path items of custom `resources` (all of one group-version): as upstream publishes a
/// CustomResourceDefinition's version, the resources' paths without the group-version's
/// discovery path.
pub(crate) fn custom_items(defs: &Definitions, resources: &[&Resource]) -> Vec<PathItem> {
    let mut items = Vec::new();
    for resource in resources {
        let naming = Naming::new(resource.group, resource.version);
        let prefix = format!("/apis/{}/{}", resource.group, resource.version);
        resource_items(defs, &naming, &prefix, resource, &mut items);
    }
    items
}

/// The paths of one resource and its subresources.
fn resource_items(
    defs: &Definitions,
    naming: &Naming,
    prefix: &str,
    r: &Resource,
    items: &mut Vec<PathItem>,
) {
    let Some(object_def) = defs.definition_of(r.group, r.version, r.kind) else {
        return;
    };
    let list_def = format!("{object_def}List");
    let status = name_of::<meta::Status>();
    let watch_event = name_of::<meta::WatchEvent<Value>>();
    let gvk = Gvk::new(r.group, r.version, r.kind);
    let kind = r.kind;
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let (collection, watch_collection) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
            format!("{prefix}/watch/namespaces/{{namespace}}/{}", r.plural),
        )
    } else {
        (
            format!("{prefix}/{}", r.plural),
            format!("{prefix}/watch/{}", r.plural),
        )
    };
    let object = format!("{collection}/{{name}}");
    let namespace = r.namespaced.then(namespace_param);
    let op = |spec: Spec<'_>| naming.operation(&gvk, spec);

    // The collection: list, create, delete a collection.
    let mut operations = Vec::new();
    if r.supports("list") {
        operations.push(op(Spec {
            method: Method::Get,
            verb: "list",
            rest: format!("{scope}{kind}"),
            description: format!("list or watch {kind} objects"),
            action: "list",
            body: None,
            response: Payload::of(&list_def),
            responses: Responses::Streamed,
            params: list_params(),
        }));
    }
    if r.supports("create") {
        operations.push(op(Spec {
            method: Method::Post,
            verb: "create",
            rest: format!("{scope}{kind}"),
            description: format!("create a {kind}"),
            action: "post",
            body: Some(Body::Object(object_def.to_owned())),
            response: Payload::of(object_def),
            responses: Responses::Created,
            params: write_params(false),
        }));
    }
    if r.supports("deletecollection") {
        operations.push(op(Spec {
            method: Method::Delete,
            verb: "delete",
            rest: format!("Collection{scope}{kind}"),
            description: format!("delete a collection of {kind} objects"),
            action: "deletecollection",
            body: Some(Body::DeleteOptions),
            response: Payload::of(&status),
            responses: Responses::Ok,
            params: delete_collection_params(),
        }));
    }
    push_item(
        items,
        &collection,
        namespace.iter().cloned().chain([pretty_param()]),
        operations,
    );

    // One object: read, replace, patch, delete.
    let mut operations = Vec::new();
    if r.supports("get") {
        operations.push(op(Spec {
            method: Method::Get,
            verb: "read",
            rest: format!("{scope}{kind}"),
            description: format!("read the named {kind}"),
            action: "get",
            body: None,
            response: Payload::of(object_def),
            responses: Responses::Ok,
            params: Vec::new(),
        }));
    }
    if r.supports("update") {
        operations.push(op(Spec {
            method: Method::Put,
            verb: "replace",
            rest: format!("{scope}{kind}"),
            description: format!("replace the named {kind}"),
            action: "put",
            body: Some(Body::Object(object_def.to_owned())),
            response: Payload::of(object_def),
            responses: Responses::Replaced,
            params: write_params(false),
        }));
    }
    if r.supports("patch") {
        operations.push(op(Spec {
            method: Method::Patch,
            verb: "patch",
            rest: format!("{scope}{kind}"),
            description: format!("partially update the named {kind}"),
            action: "patch",
            body: Some(Body::Patch(patch_media_types(r.group, r.version, r.kind))),
            response: Payload::of(object_def),
            responses: Responses::Replaced,
            params: write_params(true),
        }));
    }
    if r.supports("delete") {
        operations.push(op(Spec {
            method: Method::Delete,
            verb: "delete",
            rest: format!("{scope}{kind}"),
            description: format!("delete the named {kind}"),
            action: "delete",
            body: Some(Body::DeleteOptions),
            response: Payload::of(&status),
            responses: Responses::Deleted,
            params: delete_params(),
        }));
    }
    push_item(
        items,
        &object,
        [name_param(kind)]
            .into_iter()
            .chain(namespace.iter().cloned())
            .chain([pretty_param()]),
        operations,
    );

    // Lists across namespaces.
    if r.namespaced && r.supports("list") {
        let operation = op(Spec {
            method: Method::Get,
            verb: "list",
            rest: format!("{kind}ForAllNamespaces"),
            description: format!("list or watch {kind} objects in every namespace"),
            action: "list",
            body: None,
            response: Payload::of(&list_def),
            responses: Responses::Streamed,
            params: Vec::new(),
        });
        push_item(
            items,
            &format!("{prefix}/{}", r.plural),
            list_params().into_iter().chain([pretty_param()]),
            vec![operation],
        );
    }

    // The watch paths upstream still serves (deprecated in favour of `?watch=true`).
    if r.supports("watch") {
        let operation = op(Spec {
            method: Method::Get,
            verb: "watch",
            rest: format!("{scope}{kind}List"),
            description: format!(
                "watch changes to a list of {kind} objects; deprecated: list with the 'watch' parameter instead"
            ),
            action: "watchlist",
            body: None,
            response: Payload::of(&watch_event),
            responses: Responses::Streamed,
            params: Vec::new(),
        });
        push_item(
            items,
            &watch_collection,
            list_params()
                .into_iter()
                .chain(namespace.iter().cloned())
                .chain([pretty_param()]),
            vec![operation],
        );
        let operation = op(Spec {
            method: Method::Get,
            verb: "watch",
            rest: format!("{scope}{kind}"),
            description: format!(
                "watch changes to the named {kind}; deprecated: list with the 'watch' parameter and a metadata.name field selector instead"
            ),
            action: "watch",
            body: None,
            response: Payload::of(&watch_event),
            responses: Responses::Streamed,
            params: Vec::new(),
        });
        push_item(
            items,
            &format!("{watch_collection}/{{name}}"),
            list_params()
                .into_iter()
                .chain([name_param(kind)])
                .chain(namespace.iter().cloned())
                .chain([pretty_param()]),
            vec![operation],
        );
        if r.namespaced {
            let operation = op(Spec {
                method: Method::Get,
                verb: "watch",
                rest: format!("{kind}ListForAllNamespaces"),
                description: format!(
                    "watch changes to a list of {kind} objects in every namespace; deprecated: list with the 'watch' parameter instead"
                ),
                action: "watchlist",
                body: None,
                response: Payload::of(&watch_event),
                responses: Responses::Streamed,
                params: Vec::new(),
            });
            push_item(
                items,
                &format!("{prefix}/watch/{}", r.plural),
                list_params().into_iter().chain([pretty_param()]),
                vec![operation],
            );
        }
    }

    for sub in r.subresources {
        match sub.stream() {
            None => subresource_item(defs, naming, &object, r, sub, namespace.as_ref(), items),
            Some(Stream::Proxy) => {
                proxy_items(naming, &object, r, sub, namespace.as_ref(), items);
            }
            Some(stream) => {
                streamed_item(naming, &object, r, sub, stream, namespace.as_ref(), items);
            }
        }
    }
}

/// The path of a subresource served by the pod's node, as upstream describes it: the options
/// kind's fields are query parameters of the path (shared by its operations) beside `name` and
/// `namespace`, and the answer is a string. A read (`pods/log`) is one `get` answered in the
/// media types the catalogue lists (and takes `pretty`, as every read); a connecter
/// (`pods/exec`, ...) has a `connect` operation per method its verbs allow, answered in any media
/// type, named `connect<Group><Version><Method>...`, with the options kind as its kind.
fn streamed_item(
    naming: &Naming,
    object: &str,
    r: &Resource,
    sub: &Subresource,
    stream: Stream,
    namespace: Option<&Param>,
    items: &mut Vec<PathItem>,
) {
    let options = match stream {
        Stream::Read { options, .. } => options,
        Stream::Connect | Stream::Proxy => sub.kind,
    };
    let Some(mut params) = options_params(options) else {
        return;
    };
    let (group, version) = sub.group_version.unwrap_or((r.group, r.version));
    let gvk = Gvk::new(group, version, sub.kind);
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let rest = format!("{scope}{}{}", r.kind, to_operation_id(sub.name, true));
    let (name, kind) = (sub.name, r.kind);
    let op = |spec: Spec<'_>| naming.operation(&gvk, spec);
    let mut operations = Vec::new();
    match stream {
        Stream::Read { produces, .. } => {
            if sub.verbs.contains(&"get") {
                operations.push(op(Spec {
                    method: Method::Get,
                    verb: "read",
                    rest,
                    description: format!("read {name} of the named {kind}"),
                    action: "get",
                    body: None,
                    response: Payload::Bytes,
                    responses: Responses::Produces(produces),
                    params: Vec::new(),
                }));
            }
            params.push(pretty_param());
        }
        Stream::Connect | Stream::Proxy => {
            for method in sub.verbs.iter().filter_map(|verb| connect_method(verb)) {
                let upper = method.key().to_ascii_uppercase();
                operations.push(op(Spec {
                    method,
                    verb: "connect",
                    rest: format!("{}{rest}", to_operation_id(method.key(), true)),
                    description: format!(
                        "connect to {name} of the named {kind} through a {upper} request"
                    ),
                    action: "connect",
                    body: None,
                    response: Payload::Bytes,
                    responses: Responses::Produces(&["*/*"]),
                    params: Vec::new(),
                }));
            }
        }
    }
    push_item(
        items,
        &format!("{object}/{name}"),
        [name_param(sub.kind)]
            .into_iter()
            .chain(namespace.cloned())
            .chain(params),
        operations,
    );
}

/// The methods a proxy subresource passes on, in the order upstream's installer lists them.
const PROXY_METHODS: [Method; 7] = [
    Method::Get,
    Method::Put,
    Method::Post,
    Method::Delete,
    Method::Options,
    Method::Head,
    Method::Patch,
];

/// The two paths of a proxy subresource, as upstream describes them: `.../{name}/proxy` and
/// `.../{name}/proxy/{path}`, each with a `connect` operation per method passed on
/// (`connectCoreV1GetNamespacedPodProxy`, `connectCoreV1HeadNodeProxyWithPath`, ...) answered in
/// any media type, the options kind as their kind, and the options' `path` as a query parameter
/// beside the path's own `path` parameter.
fn proxy_items(
    naming: &Naming,
    object: &str,
    r: &Resource,
    sub: &Subresource,
    namespace: Option<&Param>,
    items: &mut Vec<PathItem>,
) {
    let Some(options) = options_params(sub.kind) else {
        return;
    };
    let gvk = Gvk::new(r.group, r.version, sub.kind);
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let (name, kind) = (sub.name, r.kind);
    for with_path in [false, true] {
        let suffix = if with_path { "WithPath" } else { "" };
        let rest = format!("{scope}{kind}{}{suffix}", to_operation_id(name, true));
        let operations = PROXY_METHODS
            .iter()
            .map(|method| {
                let upper = method.key().to_ascii_uppercase();
                naming.operation(
                    &gvk,
                    Spec {
                        method: *method,
                        verb: "connect",
                        rest: format!("{}{rest}", to_operation_id(method.key(), true)),
                        description: format!("pass a {upper} request on through {name} of {kind}"),
                        action: "connect",
                        body: None,
                        response: Payload::Bytes,
                        responses: Responses::Produces(&["*/*"]),
                        params: Vec::new(),
                    },
                )
            })
            .collect();
        let path_param = with_path.then_some(Param {
            name: "path",
            location: In::Path,
            ty: "string",
            description: Cow::Borrowed("path to the resource"),
        });
        let path = if with_path {
            format!("{object}/{name}/{{path}}")
        } else {
            format!("{object}/{name}")
        };
        push_item(
            items,
            &path,
            [name_param(sub.kind)]
                .into_iter()
                .chain(namespace.cloned())
                .chain(path_param)
                .chain(options.iter().cloned()),
            operations,
        );
    }
}

/// The HTTP method a connecter's verb is requested with, as upstream's authorizer names the
/// method's verb (`GET` is `get`, `POST` is `create`, ...).
fn connect_method(verb: &str) -> Option<Method> {
    match verb {
        "get" => Some(Method::Get),
        "create" => Some(Method::Post),
        "update" => Some(Method::Put),
        "patch" => Some(Method::Patch),
        "delete" => Some(Method::Delete),
        _ => None,
    }
}

/// The path of one subresource: `.../pods/{name}/status`, `.../deployments/{name}/scale`.
fn subresource_item(
    defs: &Definitions,
    naming: &Naming,
    object: &str,
    r: &Resource,
    sub: &Subresource,
    namespace: Option<&Param>,
    items: &mut Vec<PathItem>,
) {
    let (group, version) = sub.group_version.unwrap_or((r.group, r.version));
    let Some(def) = defs.definition_of(group, version, sub.kind) else {
        return;
    };
    let gvk = Gvk::new(group, version, sub.kind);
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let rest = format!("{scope}{}{}", r.kind, to_operation_id(sub.name, true));
    let (name, kind) = (sub.name, r.kind);
    let op = |spec: Spec<'_>| naming.operation(&gvk, spec);
    let mut operations = Vec::new();
    if sub.verbs.contains(&"get") {
        operations.push(op(Spec {
            method: Method::Get,
            verb: "read",
            rest: rest.clone(),
            description: format!("read {name} of the named {kind}"),
            action: "get",
            body: None,
            response: Payload::of(def),
            responses: Responses::Ok,
            params: Vec::new(),
        }));
    }
    if sub.verbs.contains(&"create") {
        operations.push(op(Spec {
            method: Method::Post,
            verb: "create",
            rest: rest.clone(),
            description: format!("create {name} of a {kind}"),
            action: "post",
            body: Some(Body::Object(def.to_owned())),
            response: Payload::of(def),
            responses: Responses::Created,
            params: write_params(false),
        }));
    }
    if sub.verbs.contains(&"update") {
        operations.push(op(Spec {
            method: Method::Put,
            verb: "replace",
            rest: rest.clone(),
            description: format!("replace {name} of the named {kind}"),
            action: "put",
            body: Some(Body::Object(def.to_owned())),
            response: Payload::of(def),
            responses: Responses::Replaced,
            params: write_params(false),
        }));
    }
    if sub.verbs.contains(&"patch") {
        operations.push(op(Spec {
            method: Method::Patch,
            verb: "patch",
            rest: rest.clone(),
            description: format!("partially update {name} of the named {kind}"),
            action: "patch",
            body: Some(Body::Patch(patch_media_types(group, version, sub.kind))),
            response: Payload::of(def),
            responses: Responses::Replaced,
            params: write_params(true),
        }));
    }
    push_item(
        items,
        &format!("{object}/{}", sub.name),
        [name_param(sub.kind)]
            .into_iter()
            .chain(namespace.cloned())
            .chain([pretty_param()]),
        operations,
    );
}

/// Adds a path item unless it has no operation.
fn push_item(
    items: &mut Vec<PathItem>,
    path: &str,
    params: impl IntoIterator<Item = Param>,
    operations: Vec<Operation>,
) {
    if !operations.is_empty() {
        items.push(PathItem {
            path: path.to_owned(),
            params: sorted(params.into_iter().collect()),
            operations,
        });
    }
}

/// Parameters in name order, as upstream lists them.
fn sorted(mut params: Vec<Param>) -> Vec<Param> {
    params.sort_by(|a, b| a.name.cmp(b.name));
    params
}

fn query(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param {
        name,
        location: In::Query,
        ty,
        description: Cow::Borrowed(description),
    }
}

fn pretty_param() -> Param {
    query(
        "pretty",
        "string",
        "If 'true', the response is pretty-printed.",
    )
}

fn namespace_param() -> Param {
    Param {
        name: "namespace",
        location: In::Path,
        ty: "string",
        description: Cow::Borrowed(
            "namespace of the objects: the scope of their names and of authorization",
        ),
    }
}

fn name_param(kind: &str) -> Param {
    Param {
        name: "name",
        location: In::Path,
        ty: "string",
        description: Cow::Owned(format!("name of the {kind}")),
    }
}

const DRY_RUN: &str = "When present, the request is validated and processed but nothing is persisted. The only value is 'All'.";
const FIELD_VALIDATION: &str = "How the server treats unknown or duplicate fields in the object sent: 'Ignore' drops them silently; 'Warn' drops them and returns a Warning header for each (the default); 'Strict' fails the request with every unknown and duplicate field listed.";
const LABEL_SELECTOR: &str =
    "Only return objects whose labels match this selector. Defaults to every object.";
const FIELD_SELECTOR: &str =
    "Only return objects whose fields match this selector. Defaults to every object.";
const LIMIT: &str = "The most items to return. When more exist, metadata.continue of the list is a token that fetches the next chunk of the same consistent snapshot. Not supported with watch.";
const CONTINUE: &str = "The metadata.continue token of a previous list response, to fetch its next chunk; every other parameter must be the same. An expired token yields 410 Gone. Not supported with watch.";
const RESOURCE_VERSION: &str = "Which resource versions the request may be served from: unset for the most recent, '0' for any, or a resource version, interpreted according to resourceVersionMatch. Defaults to unset.";
const RESOURCE_VERSION_MATCH: &str =
    "How resourceVersion applies to a list: 'NotOlderThan' or 'Exact'. Defaults to unset.";
const TIMEOUT_SECONDS: &str = "A time limit for the list or watch call, whatever its activity.";
const GRACE_PERIOD: &str = "Seconds to wait before the object is deleted: a non-negative integer, zero deleting at once. Unset uses the default of the kind.";
const ORPHAN_DEPENDENTS: &str = "Deprecated in favour of propagationPolicy: whether dependents are orphaned, adding or removing the 'orphan' finalizer. Set this or propagationPolicy, not both.";
const PROPAGATION_POLICY: &str = "Whether and how the garbage collector deletes dependents: 'Orphan', 'Background' or 'Foreground'. Unset uses the object's finalizers and the default of the kind.";
const SEND_INITIAL_EVENTS: &str = "With watch=true, begin the stream with a synthetic ADDED event for every object, then a BOOKMARK annotated \"k8s.io/initial-events-end\": \"true\"; requires resourceVersionMatch=NotOlderThan.";

/// The parameters of a list (and of the watch paths).
fn list_params() -> Vec<Param> {
    vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "Ask for BOOKMARK events in a watch; the server sends them at its discretion. Ignored unless watching.",
        ),
        query("continue", "string", CONTINUE),
        query("fieldSelector", "string", FIELD_SELECTOR),
        query("labelSelector", "string", LABEL_SELECTOR),
        query("limit", "integer", LIMIT),
        query("resourceVersion", "string", RESOURCE_VERSION),
        query("resourceVersionMatch", "string", RESOURCE_VERSION_MATCH),
        query("sendInitialEvents", "boolean", SEND_INITIAL_EVENTS),
        query("timeoutSeconds", "integer", TIMEOUT_SECONDS),
        query(
            "watch",
            "boolean",
            "Watch for changes to the described objects and stream them as added, modified and deleted events. Specify resourceVersion.",
        ),
    ]
}

/// The parameters of a create, a replace, or (with `patch`) a patch.
fn write_params(patch: bool) -> Vec<Param> {
    let mut params = vec![
        query("dryRun", "string", DRY_RUN),
        query(
            "fieldManager",
            "string",
            if patch {
                "Name of the actor or entity making the change, recorded in metadata.managedFields: at most 128 printable characters. Required for apply patches (application/apply-patch+yaml), optional for the other patch types."
            } else {
                "Name of the actor or entity making the change, recorded in metadata.managedFields: at most 128 printable characters."
            },
        ),
        query("fieldValidation", "string", FIELD_VALIDATION),
    ];
    if patch {
        params.push(query(
            "force",
            "boolean",
            "Force an apply patch: take over the fields other managers own. Must be unset for the other patch types.",
        ));
    }
    params
}

/// The parameters of a delete.
fn delete_params() -> Vec<Param> {
    vec![
        query("dryRun", "string", DRY_RUN),
        query("gracePeriodSeconds", "integer", GRACE_PERIOD),
        query("orphanDependents", "boolean", ORPHAN_DEPENDENTS),
        query("propagationPolicy", "string", PROPAGATION_POLICY),
    ]
}

/// The query parameters of an options kind of a subresource served by the pod's node: its
/// fields, as upstream's API installer derives them from the Go type (a list is a repeated
/// parameter of its item's type: `command`, `ports`). These kinds are never stored, are not
/// definitions of the documents and are not in `k8s-openapi`, so their fields are listed here.
/// Upstream's documents leave out `PodLogOptions.sinceTime` (a timestamp, which the installer
/// does not turn into a parameter) though the server reads it; so do these.
fn options_params(kind: &str) -> Option<Vec<Param>> {
    let params = match kind {
        "PodLogOptions" => vec![
            query(
                "container",
                "string",
                "The container whose log is returned; may be left out when the pod has a single container.",
            ),
            query(
                "follow",
                "boolean",
                "Keep the stream open and follow the log as it grows. Defaults to false.",
            ),
            query(
                "insecureSkipTLSVerifyBackend",
                "boolean",
                "Read the log from the kubelet without verifying its serving certificate. The connection to the kubelet can then be intercepted, so the log may not come from the real kubelet.",
            ),
            query(
                "limitBytes",
                "integer",
                "Stop after this many bytes of log. The output may end within a line and be slightly shorter or longer than the limit.",
            ),
            query(
                "previous",
                "boolean",
                "Return the log of the previous, terminated instance of the container. Defaults to false.",
            ),
            query(
                "sinceSeconds",
                "integer",
                "Return only the log written in this many seconds before now (from the pod's start at the earliest; nothing for a time in the future). At most one of sinceSeconds and sinceTime may be given.",
            ),
            query(
                "stream",
                "string",
                "Which output of the container to return: 'All' (standard output and standard error interleaved, the default), 'Stdout' or 'Stderr'. With tailLines only 'All' may be given.",
            ),
            query(
                "tailLines",
                "integer",
                "Return only this many lines from the end of the log. Unset, the log is returned from the container's start, or from sinceSeconds or sinceTime.",
            ),
            query(
                "timestamps",
                "boolean",
                "Begin every line with its RFC3339 or RFC3339Nano timestamp. Defaults to false.",
            ),
        ],
        "PodExecOptions" => vec![
            query(
                "command",
                "string",
                "The command to run, one parameter per element of its argv; no shell runs it.",
            ),
            query(
                "container",
                "string",
                "The container to run the command in; may be left out when the pod has a single container.",
            ),
            query(
                "stderr",
                "boolean",
                "Stream the standard error of the command back.",
            ),
            query(
                "stdin",
                "boolean",
                "Stream standard input to the command. Defaults to false.",
            ),
            query(
                "stdout",
                "boolean",
                "Stream the standard output of the command back.",
            ),
            query(
                "tty",
                "boolean",
                "Give the command a terminal, allocated by the container runtime on the node. Defaults to false.",
            ),
        ],
        "PodAttachOptions" => vec![
            query(
                "container",
                "string",
                "The container to attach to; may be left out when the pod has a single container.",
            ),
            query(
                "stderr",
                "boolean",
                "Stream the standard error of the container back. Defaults to true.",
            ),
            query(
                "stdin",
                "boolean",
                "Stream standard input to the container. Defaults to false.",
            ),
            query(
                "stdout",
                "boolean",
                "Stream the standard output of the container back. Defaults to true.",
            ),
            query(
                "tty",
                "boolean",
                "Attach through a terminal, allocated by the container runtime on the node. Defaults to false.",
            ),
        ],
        "PodPortForwardOptions" => vec![query(
            "ports",
            "integer",
            "The ports of the pod to forward, one parameter per port. Required with WebSockets.",
        )],
        "PodProxyOptions" => vec![query(
            "path",
            "string",
            "The path of the request passed on to the pod; the path after 'proxy/' takes its place.",
        )],
        "ServiceProxyOptions" => vec![query(
            "path",
            "string",
            "The path of the request passed on to the service's endpoint; the path after 'proxy/' takes its place.",
        )],
        "NodeProxyOptions" => vec![query(
            "path",
            "string",
            "The path of the request passed on to the node; the path after 'proxy/' takes its place.",
        )],
        _ => return None,
    };
    Some(params)
}

/// The parameters of a delete of a collection: those of a delete and those of a list that pick
/// the objects.
fn delete_collection_params() -> Vec<Param> {
    let mut params = delete_params();
    params.extend(
        list_params()
            .into_iter()
            .filter(|p| !matches!(p.name, "watch" | "allowWatchBookmarks")),
    );
    params
}
