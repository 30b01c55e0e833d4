//! The resource catalogue: every built-in resource Capstan serves, each declared once. A
//! declaration ([`Resource`]) holds what discovery advertises and the API server routes by (names,
//! scope, verbs, short names, categories, subresources, storage key), the kind's strategy (decoding,
//! defaulting, validation, selectable fields, deletion), its Table printer and its `k8s-openapi`
//! type, whose schema the OpenAPI documents and strategic merge patches are built from. Discovery,
//! the registries, Table printing, OpenAPI and patching all read this one table.
//!
//! The declarations live in one file per API group (`core.rs`, `apps.rs`, ...); [`resources`]
//! lists them in the order upstream lists groups. Adding a built-in kind is adding one
//! declaration to its group's file (and the group's slice to [`GROUPS`] for a new group).

mod admissionregistration;
mod apiextensions;
mod apiregistration;
mod apps;
mod authentication;
mod authorization;
mod autoscaling;
mod batch;
mod certificates;
mod coordination;
mod core;
mod discovery;
mod events;
mod flowcontrol;
mod networking;
mod node;
mod policy;
mod rbac;
mod scheduling;
mod storage;

pub use apiextensions::CLEANUP_FINALIZER;

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use schemars::{JsonSchema, SchemaGenerator};

use crate::printers::{Column, PrintFn, Printer};
use crate::strategy::{Converted, Hooks, Kind, Strategy, Typed};

/// The verbs of a resource that supports every collection and object operation.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of namespaces, which upstream does not delete as a collection.
const NO_COLLECTION_DELETE: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// The verbs of the review APIs, which answer a question and store nothing.
const CREATE_ONLY: &[&str] = &["create"];

/// The verbs of `status` and `scale` subresources.
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

/// A subresource such as `pods/status`.
#[derive(Clone, Copy, Debug)]
pub struct Subresource {
    /// The name after the slash: `status`, `scale`, `binding`, ...
    pub name: &'static str,
    /// The group of the subresource's kind when it differs from the parent's (e.g. `Scale` is
    /// `autoscaling/v1`); `None` for the parent's group and version.
    pub group_version: Option<(&'static str, &'static str)>,
    /// The kind the subresource reads and writes.
    pub kind: &'static str,
    /// The verbs it supports.
    pub verbs: &'static [&'static str],
    /// What a request to it does: read or write the parent object, or one of the actions
    /// upstream serves with a REST storage of their own.
    pub serves: Serves,
    /// The `k8s-openapi` type of the subresource's kind when it is not the parent's
    /// (`Scale`, `Binding`, `Eviction`, `TokenRequest`); options kinds have none.
    pub schema: Option<Schema>,
}

/// What a subresource does. The handlers dispatch on this, never on a subresource's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// Reads and writes the parent object through its own endpoint (`status`, `finalize`,
    /// `ephemeralcontainers`): the registry and the kind's strategy decide what may change.
    Object,
    /// The parent's replica count and selector as `autoscaling/v1` `Scale`, found at these
    /// paths.
    Scale(ScalePaths),
    /// A `Binding` that assigns the pod to a node.
    Binding,
    /// An `Eviction`: deletes the pod when its disruption budgets allow.
    Eviction,
    /// A `TokenRequest`, answered with a token for the service account; nothing is stored.
    TokenRequest,
    /// Streamed from the pod's node or proxied to a backend.
    Stream(Stream),
}

/// Where a `scale` subresource finds the replica counts and the selector in its parent, as
/// paths of dot-separated fields (`.spec.replicas`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas, read and written.
    pub spec_replicas: &'static str,
    /// The observed replicas.
    pub status_replicas: &'static str,
    /// A label selector in its string form (a custom resource's `labelSelectorPath`); `None`
    /// for the built-in workloads, whose `spec.selector` is turned into that form.
    pub label_selector: Option<&'static str>,
}

/// The paths of the built-in workloads' scale.
pub const WORKLOAD_SCALE: ScalePaths = ScalePaths {
    spec_replicas: ".spec.replicas",
    status_replicas: ".status.replicas",
    label_selector: None,
};

/// How a subresource served by the pod's node, or proxied to a backend, takes its options and
/// answers, as upstream's REST storage for it does. Its options are a kind the API never stores
/// (`PodLogOptions`, `PodExecOptions`, `PodProxyOptions`, ...) whose fields are sent as query
/// parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// A read with options (upstream's getter with options, `pods/log`): `GET` only, answered
    /// with a stream of bytes in one of `produces`.
    Read {
        /// The kind whose fields are the query parameters.
        options: &'static str,
        /// The media types the answer is labelled with.
        produces: &'static [&'static str],
    },
    /// A connecter (`pods/exec`, `attach`, `portforward`): each verb's HTTP method (`get`:
    /// `GET`, `create`: `POST`) opens a connection that is upgraded (SPDY, WebSocket) and carries
    /// whatever the protocol does. The subresource's kind is its options kind.
    Connect,
    /// A connecter with a path (`pods/proxy`, `services/proxy`, `nodes/proxy`): every method
    /// (`HEAD` and `OPTIONS` too, which have no verb of their own) is passed on, with what
    /// follows `proxy/` as the backend's path. The subresource's kind is its options kind.
    Proxy,
}

/// The media types upstream labels `pods/log` with (the bytes are the container's log in any
/// case).
const LOG_MEDIA_TYPES: &[&str] = &[
    "text/plain",
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

/// The `status` subresource of a kind.
const fn status(kind: &'static str) -> Subresource {
    Subresource {
        name: "status",
        group_version: None,
        kind,
        verbs: GET_PATCH_UPDATE,
        serves: Serves::Object,
        schema: None,
    }
}

/// The `scale` subresource, which speaks `autoscaling/v1` `Scale`.
const SCALE: Subresource = Subresource {
    name: "scale",
    group_version: Some(("autoscaling", "v1")),
    kind: "Scale",
    verbs: GET_PATCH_UPDATE,
    serves: Serves::Scale(WORKLOAD_SCALE),
    schema: Some(schema_of::<k8s_openapi::api::autoscaling::v1::Scale>()),
};

/// The `scale` subresource of a custom resource, at the paths its CRD names.
pub fn custom_scale(paths: ScalePaths) -> Subresource {
    Subresource {
        serves: Serves::Scale(paths),
        ..SCALE
    }
}

/// The `finalize` subresource of namespaces.
const FINALIZE: Subresource = Subresource {
    name: "finalize",
    group_version: None,
    kind: "Namespace",
    verbs: &["update"],
    serves: Serves::Object,
    schema: None,
};

/// A pod subresource the API server connects to the pod's node for: `kind` is its options kind.
const fn connect(name: &'static str, kind: &'static str) -> Subresource {
    Subresource {
        name,
        group_version: None,
        kind,
        verbs: &["create", "get"],
        serves: Serves::Stream(Stream::Connect),
        schema: None,
    }
}

/// The verbs of a proxy subresource: those of the methods it passes on (`HEAD` is `get`;
/// `OPTIONS` has none), as upstream's discovery lists them.
const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];

/// The `proxy` subresource of pods, services and nodes: `kind` is its options kind.
const fn proxy(kind: &'static str) -> Subresource {
    Subresource {
        name: "proxy",
        group_version: None,
        kind,
        verbs: PROXY_VERBS,
        serves: Serves::Stream(Stream::Proxy),
        schema: None,
    }
}

/// `pods/log`: read from the pod's node, with `PodLogOptions`; its kind is `Pod`.
const POD_LOG: Subresource = Subresource {
    name: "log",
    group_version: None,
    kind: "Pod",
    verbs: &["get"],
    serves: Serves::Stream(Stream::Read {
        options: "PodLogOptions",
        produces: LOG_MEDIA_TYPES,
    }),
    schema: None,
};

/// The `k8s-openapi` type of a kind, as the OpenAPI documents and strategic merge patches need
/// it: the definition name upstream gives it and how to generate its JSON schema.
#[derive(Clone, Copy, Debug)]
pub struct Schema {
    /// The definition name (`io.k8s.api.core.v1.Pod`).
    pub name: fn() -> Cow<'static, str>,
    /// Adds the type's schema (and those of every type it holds) to a generator.
    pub generate: fn(&mut SchemaGenerator) -> schemars::Schema,
}

/// The schema of `T`.
pub const fn schema_of<T: JsonSchema>() -> Schema {
    Schema {
        name: T::schema_name,
        generate: SchemaGenerator::subschema_for::<T>,
    }
}

/// Whether a `k8s-openapi` scope is a namespace's.
pub trait Scope {
    /// `true` for namespaced kinds.
    const NAMESPACED: bool;
}

impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A resource type served by the API server: the one declaration of a built-in kind.
#[derive(Debug)]
pub struct Resource {
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The version served.
    pub version: &'static str,
    /// The kind of a single object.
    pub kind: &'static str,
    /// The plural, lower-case name used in paths.
    pub plural: &'static str,
    /// The singular, lower-case name.
    pub singular: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names `kubectl` accepts.
    pub short_names: &'static [&'static str],
    /// Categories such as `all`.
    pub categories: &'static [&'static str],
    /// The verbs on the resource itself.
    pub verbs: &'static [&'static str],
    /// The subresources served.
    pub subresources: &'static [Subresource],
    /// The first segment of the storage key after `/registry/`, as upstream lays out etcd.
    pub storage_prefix: &'static str,
    /// The `apiVersion` objects are stored in when it is not this one (another version of the
    /// group, or another group's, as events.k8s.io's Events are core Events): this version is
    /// then served by conversion (see [`crate::convert`]) from the stored one, which shares the
    /// storage key.
    pub stored_as: Option<&'static str>,
    /// Whether a create is a question the API server answers and nothing is stored (the review
    /// APIs: the API server's `authz/reviews.rs` answers them).
    pub review: bool,
    /// The kind's `k8s-openapi` type.
    pub schema: Schema,
    /// Builds the kind's strategy (the registry builds it once).
    pub strategy: fn() -> Arc<dyn Strategy>,
    /// The kind's Table printer; `None` for upstream's default convertor (name and age).
    pub printer: Option<Printer>,
}

impl PartialEq for Resource {
    fn eq(&self, other: &Self) -> bool {
        (self.group, self.version, self.plural) == (other.group, other.version, other.plural)
    }
}

impl Eq for Resource {}

/// The declaration of `T` with every verb, no subresource, short name or category, no printer,
/// a strategy that defaults and validates nothing kind-specific, and stored under its plural:
/// each declaration states what differs.
pub const fn of<T>(singular: &'static str) -> Resource
where
    T: Kind + JsonSchema,
    T::Scope: Scope,
{
    Resource {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        singular,
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names: &[],
        categories: &[],
        verbs: ALL_VERBS,
        subresources: &[],
        storage_prefix: T::URL_PATH_SEGMENT,
        stored_as: None,
        review: false,
        schema: schema_of::<T>(),
        strategy: plain::<T>,
        printer: None,
    }
}

/// The strategy of a kind that defaults and validates nothing kind-specific (the review kinds,
/// whose bodies are only decoded).
fn plain<K: Kind>() -> Arc<dyn Strategy> {
    typed::<K>(Hooks::plain())
}

/// The strategy running `hooks` on the `k8s-openapi` type `K`.
pub fn typed<K: Kind>(hooks: Hooks<K>) -> Arc<dyn Strategy> {
    Arc::new(Typed::new(hooks))
}

/// The strategy of a version served by conversion from `hub`'s stored one: `served` decodes,
/// defaults and validates in the served shape.
fn converted(
    served: Arc<dyn Strategy>,
    hub: Arc<dyn Strategy>,
    api_version: &str,
    kind: &str,
) -> Arc<dyn Strategy> {
    match crate::convert::conversion(api_version, kind) {
        Some(conversion) => Arc::new(Converted::new(served, hub, conversion)),
        None => hub,
    }
}

/// A Table printer from its columns and row function.
const fn printer(columns: &'static [Column], print: PrintFn) -> Option<Printer> {
    Some(Printer {
        columns,
        print: crate::printers::Print::Fn(print),
    })
}

impl Subresource {
    /// How it streams, for a subresource served by the pod's node or proxied.
    pub fn stream(&self) -> Option<Stream> {
        match self.serves {
            Serves::Stream(stream) => Some(stream),
            _ => None,
        }
    }
}

impl Resource {
    /// `group/version`, or only the version for the core group (the `apiVersion` of objects).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The subresource called `name`, if served.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether objects are stored in this version (otherwise they are converted from
    /// [`Resource::stored_as`]).
    pub fn is_stored_version(&self) -> bool {
        self.stored_as.is_none()
    }

    /// Whether the resource supports `verb`.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// The key prefix under which every object of this resource is stored, ending in `/`.
    pub fn storage_key_prefix(&self) -> String {
        format!("/registry/{}/", self.storage_prefix)
    }

    /// The storage key of one object.
    pub fn storage_key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("/registry/{}/{ns}/{name}", self.storage_prefix),
            _ => format!("/registry/{}/{name}", self.storage_prefix),
        }
    }

    /// The key prefix of every object in `namespace` (or all of them for `None`).
    pub fn storage_namespace_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("/registry/{}/{ns}/", self.storage_prefix),
            _ => self.storage_key_prefix(),
        }
    }
}

/// The declarations of every group, in the order upstream lists groups.
static GROUPS: &[&[Resource]] = &[
    core::RESOURCES,
    apiregistration::RESOURCES,
    apps::RESOURCES,
    events::RESOURCES,
    authentication::RESOURCES,
    authorization::RESOURCES,
    autoscaling::RESOURCES,
    batch::RESOURCES,
    certificates::RESOURCES,
    flowcontrol::RESOURCES,
    networking::RESOURCES,
    policy::RESOURCES,
    rbac::RESOURCES,
    storage::RESOURCES,
    admissionregistration::RESOURCES,
    apiextensions::RESOURCES,
    scheduling::RESOURCES,
    coordination::RESOURCES,
    node::RESOURCES,
    discovery::RESOURCES,
];

/// Every built-in resource, grouped by API group in the order upstream lists groups.
pub fn resources() -> impl Iterator<Item = &'static Resource> + Clone {
    GROUPS.iter().flat_map(|group| group.iter())
}

/// The API groups other than core, in the order `/apis` lists them.
pub fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for r in resources() {
        if !r.group.is_empty() && !groups.contains(&r.group) {
            groups.push(r.group);
        }
    }
    groups
}

/// The versions served for `group`, preferred first.
pub fn versions(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for r in resources().filter(|r| r.group == group) {
        if !versions.contains(&r.version) {
            versions.push(r.version);
        }
    }
    versions
}

/// The resources of one group-version, in catalogue order.
pub fn resources_in(group: &str, version: &str) -> impl Iterator<Item = &'static Resource> {
    let (group, version) = (group.to_owned(), version.to_owned());
    resources().filter(move |r| r.group == group && r.version == version)
}

/// The resource served at `group`/`version`/`plural`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    resources().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a kind, by group and kind.
pub fn lookup_kind(group: &str, kind: &str) -> Option<&'static Resource> {
    resources().find(|r| r.group == group && r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_unique_per_group_and_short_names_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        let mut shorts = std::collections::BTreeSet::new();
        for r in resources() {
            assert!(
                seen.insert((r.group, r.version, r.plural)),
                "{} twice",
                r.plural
            );
            // Every version of a kind after the first repeats its short names.
            if !r.is_stored_version() {
                let stored = resources().find(|s| {
                    Some(s.api_version().as_str()) == r.stored_as
                        && s.kind == r.kind
                        && s.is_stored_version()
                });
                assert_eq!(stored.map(|s| s.storage_prefix), Some(r.storage_prefix));
                continue;
            }
            for s in r.short_names {
                // `ev` is shared by the two Event APIs, as upstream.
                if *s != "ev" {
                    assert!(shorts.insert(*s), "short name {s} twice");
                }
            }
            assert!(r.storage_key_prefix().ends_with('/'));
        }
    }

    /// Admission's `matchPolicy: Equivalent` takes resources sharing a storage key prefix as
    /// equivalent: they must be versions of one kind, one stored and the others served from it.
    #[test]
    fn resources_sharing_storage_are_versions_of_one_kind() {
        for r in resources() {
            for other in resources().filter(|o| o != &r) {
                if other.storage_key_prefix() != r.storage_key_prefix() {
                    continue;
                }
                let stored =
                    |x: &Resource| x.stored_as.map_or_else(|| x.api_version(), str::to_owned);
                assert_eq!(
                    stored(r),
                    stored(other),
                    "{}/{} and {}/{} share storage",
                    r.api_version(),
                    r.plural,
                    other.api_version(),
                    other.plural
                );
                assert_eq!(r.plural, other.plural);
            }
        }
        let shared = |group: &str, version: &str, plural: &str| {
            let r = lookup(group, version, plural).unwrap();
            resources()
                .filter(|o| o != &r && o.storage_key_prefix() == r.storage_key_prefix())
                .map(|o| o.api_version())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shared("autoscaling", "v1", "horizontalpodautoscalers"),
            ["autoscaling/v2"]
        );
        assert_eq!(shared("", "v1", "events"), ["events.k8s.io/v1"]);
        assert!(shared("", "v1", "pods").is_empty());
    }

    #[test]
    fn every_strategy_decodes_by_its_type() {
        for resource in resources() {
            let strategy = (resource.strategy)();
            let object = serde_json::json!({
                "apiVersion": resource.api_version(), "kind": resource.kind,
                "metadata": {"name": "x"}, "notAField": 1
            });
            match strategy.decode(&object) {
                Ok((decoded, unknown)) => {
                    assert_eq!(decoded["kind"], resource.kind);
                    assert_eq!(
                        unknown,
                        ["notAField"],
                        "{} must be decoded by its type",
                        resource.kind
                    );
                }
                // Kinds with required fields (Event.involvedObject, ...) name what is missing.
                Err(crate::strategy::DecodeError::Missing { path }) => assert!(!path.is_empty()),
                Err(other) => panic!("{}: {other:?}", resource.kind),
            }
        }
    }

    #[test]
    fn storage_keys_follow_upstream_layout() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert_eq!(
            pods.storage_key(Some("default"), "web"),
            "/registry/pods/default/web"
        );
        assert_eq!(pods.storage_namespace_prefix(None), "/registry/pods/");
        let nodes = lookup("", "v1", "nodes").unwrap();
        assert_eq!(nodes.storage_key(None, "n1"), "/registry/minions/n1");
        let deploy = lookup_kind("apps", "Deployment").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.list_kind(), "DeploymentList");
        assert_eq!(deploy.subresource("scale").unwrap().kind, "Scale");
        assert_eq!(groups()[..2], ["apiregistration.k8s.io", "apps"]);
        assert_eq!(versions("batch"), ["v1"]);
        assert_eq!(versions("autoscaling"), ["v2", "v1"]);
    }
}
