//! The resource catalogue: every built-in resource Capstan serves, with the names, scope, verbs,
//! short names, categories and subresources that discovery advertises and that the API server
//! routes by. One table, read by discovery, routing, storage keys and `kubectl api-resources`.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// How it is served when it streams from the pod's node (`log`, `exec`, `attach`,
    /// `portforward`) or proxies to a pod, service or node (`proxy`) rather than reading and
    /// writing an object the API stores.
    pub stream: Option<Stream>,
}

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
        stream: None,
    }
}

/// The `scale` subresource, which speaks `autoscaling/v1` `Scale`.
const SCALE: Subresource = Subresource {
    name: "scale",
    group_version: Some(("autoscaling", "v1")),
    kind: "Scale",
    verbs: GET_PATCH_UPDATE,
    stream: None,
};

/// The `finalize` subresource of namespaces.
const FINALIZE: Subresource = Subresource {
    name: "finalize",
    group_version: None,
    kind: "Namespace",
    verbs: &["update"],
    stream: None,
};

/// A pod subresource the API server connects to the pod's node for: `kind` is its options kind.
const fn connect(name: &'static str, kind: &'static str) -> Subresource {
    Subresource {
        name,
        group_version: None,
        kind,
        verbs: &["create", "get"],
        stream: Some(Stream::Connect),
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
        stream: Some(Stream::Proxy),
    }
}

/// `pods/log`: read from the pod's node, with `PodLogOptions`; its kind is `Pod`.
const POD_LOG: Subresource = Subresource {
    name: "log",
    group_version: None,
    kind: "Pod",
    verbs: &["get"],
    stream: Some(Stream::Read {
        options: "PodLogOptions",
        produces: LOG_MEDIA_TYPES,
    }),
};

/// A resource type served by the API server.
#[derive(Debug, PartialEq, Eq)]
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

macro_rules! resource {
    ($group:literal, $version:literal, $kind:literal, $plural:literal, $singular:literal,
     namespaced: $ns:literal, short: [$($short:literal),*], categories: [$($cat:literal),*],
     verbs: $verbs:expr, sub: [$($sub:expr),*], storage: $storage:literal
     $(, stored_as: $stored_as:literal)?) => {
        Resource {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            short_names: &[$($short),*],
            categories: &[$($cat),*],
            verbs: $verbs,
            subresources: &[$($sub),*],
            storage_prefix: $storage,
            stored_as: {
                #[allow(unused_mut, unused_assignments)]
                let mut stored_as = None;
                $(stored_as = Some($stored_as);)?
                stored_as
            },
        }
    };
}

/// Every built-in resource, grouped by API group in the order upstream lists groups.
pub static RESOURCES: &[Resource] = &[
    // core/v1
    resource!("", "v1", "ConfigMap", "configmaps", "configmap", namespaced: true,
        short: ["cm"], categories: [], verbs: ALL_VERBS, sub: [], storage: "configmaps"),
    resource!("", "v1", "Endpoints", "endpoints", "endpoints", namespaced: true,
        short: ["ep"], categories: [], verbs: ALL_VERBS, sub: [], storage: "services/endpoints"),
    resource!("", "v1", "Event", "events", "event", namespaced: true,
        short: ["ev"], categories: [], verbs: ALL_VERBS, sub: [], storage: "events"),
    resource!("", "v1", "LimitRange", "limitranges", "limitrange", namespaced: true,
        short: ["limits"], categories: [], verbs: ALL_VERBS, sub: [], storage: "limitranges"),
    resource!("", "v1", "Namespace", "namespaces", "namespace", namespaced: false,
        short: ["ns"], categories: [], verbs: NO_COLLECTION_DELETE,
        sub: [status("Namespace"), FINALIZE], storage: "namespaces"),
    resource!("", "v1", "Node", "nodes", "node", namespaced: false,
        short: ["no"], categories: [], verbs: ALL_VERBS,
        sub: [proxy("NodeProxyOptions"), status("Node")], storage: "minions"),
    resource!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim",
        namespaced: true, short: ["pvc"], categories: [], verbs: ALL_VERBS,
        sub: [status("PersistentVolumeClaim")], storage: "persistentvolumeclaims"),
    resource!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume",
        namespaced: false, short: ["pv"], categories: [], verbs: ALL_VERBS,
        sub: [status("PersistentVolume")], storage: "persistentvolumes"),
    resource!("", "v1", "Pod", "pods", "pod", namespaced: true,
        short: ["po"], categories: ["all"], verbs: ALL_VERBS,
        sub: [
            status("Pod"),
            Subresource { name: "binding", group_version: None, kind: "Binding", verbs: &["create"], stream: None },
            Subresource { name: "eviction", group_version: Some(("policy", "v1")), kind: "Eviction", verbs: &["create"], stream: None },
            Subresource { name: "ephemeralcontainers", group_version: None, kind: "Pod", verbs: &["get", "patch", "update"], stream: None },
            connect("attach", "PodAttachOptions"),
            connect("exec", "PodExecOptions"),
            POD_LOG,
            connect("portforward", "PodPortForwardOptions"),
            proxy("PodProxyOptions")
        ],
        storage: "pods"),
    resource!("", "v1", "PodTemplate", "podtemplates", "podtemplate", namespaced: true,
        short: [], categories: [], verbs: ALL_VERBS, sub: [], storage: "podtemplates"),
    resource!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller",
        namespaced: true, short: ["rc"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("ReplicationController"), SCALE], storage: "controllers"),
    resource!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", namespaced: true,
        short: ["quota"], categories: [], verbs: ALL_VERBS,
        sub: [status("ResourceQuota")], storage: "resourcequotas"),
    resource!("", "v1", "Secret", "secrets", "secret", namespaced: true,
        short: [], categories: [], verbs: ALL_VERBS, sub: [], storage: "secrets"),
    resource!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", namespaced: true,
        short: ["sa"], categories: [], verbs: ALL_VERBS,
        sub: [Subresource { name: "token", group_version: Some(("authentication.k8s.io", "v1")), kind: "TokenRequest", verbs: &["create"], stream: None }],
        storage: "serviceaccounts"),
    resource!("", "v1", "Service", "services", "service", namespaced: true,
        short: ["svc"], categories: ["all"], verbs: ALL_VERBS,
        sub: [proxy("ServiceProxyOptions"), status("Service")], storage: "services/specs"),
    // apps/v1
    resource!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision",
        namespaced: true, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "controllerrevisions"),
    resource!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", namespaced: true,
        short: ["ds"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("DaemonSet")], storage: "daemonsets"),
    resource!("apps", "v1", "Deployment", "deployments", "deployment", namespaced: true,
        short: ["deploy"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("Deployment"), SCALE], storage: "deployments"),
    resource!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", namespaced: true,
        short: ["rs"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("ReplicaSet"), SCALE], storage: "replicasets"),
    resource!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", namespaced: true,
        short: ["sts"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("StatefulSet"), SCALE], storage: "statefulsets"),
    // events.k8s.io/v1
    // events.k8s.io/v1: the core Events, served in the newer shape by conversion
    resource!("events.k8s.io", "v1", "Event", "events", "event", namespaced: true,
        short: ["ev"], categories: [], verbs: ALL_VERBS, sub: [], storage: "events",
        stored_as: "v1"),
    // authentication.k8s.io/v1
    resource!("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews",
        "selfsubjectreview", namespaced: false, short: [], categories: [], verbs: CREATE_ONLY,
        sub: [], storage: "selfsubjectreviews"),
    // authorization.k8s.io/v1
    resource!("authorization.k8s.io", "v1", "SelfSubjectAccessReview",
        "selfsubjectaccessreviews", "selfsubjectaccessreview", namespaced: false, short: [],
        categories: [], verbs: CREATE_ONLY, sub: [], storage: "selfsubjectaccessreviews"),
    resource!("authorization.k8s.io", "v1", "SelfSubjectRulesReview",
        "selfsubjectrulesreviews", "selfsubjectrulesreview", namespaced: false, short: [],
        categories: [], verbs: CREATE_ONLY, sub: [], storage: "selfsubjectrulesreviews"),
    // autoscaling/v2, stored; autoscaling/v1 converted from it
    resource!("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers",
        "horizontalpodautoscaler", namespaced: true, short: ["hpa"], categories: ["all"],
        verbs: ALL_VERBS, sub: [status("HorizontalPodAutoscaler")],
        storage: "horizontalpodautoscalers"),
    resource!("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers",
        "horizontalpodautoscaler", namespaced: true, short: ["hpa"], categories: ["all"],
        verbs: ALL_VERBS, sub: [status("HorizontalPodAutoscaler")],
        storage: "horizontalpodautoscalers", stored_as: "autoscaling/v2"),
    // batch/v1
    resource!("batch", "v1", "CronJob", "cronjobs", "cronjob", namespaced: true,
        short: ["cj"], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("CronJob")], storage: "cronjobs"),
    resource!("batch", "v1", "Job", "jobs", "job", namespaced: true,
        short: [], categories: ["all"], verbs: ALL_VERBS,
        sub: [status("Job")], storage: "jobs"),
    // flowcontrol.apiserver.k8s.io/v1
    resource!("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", "flowschema",
        namespaced: false, short: [], categories: [], verbs: ALL_VERBS,
        sub: [status("FlowSchema")], storage: "flowschemas"),
    resource!("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration",
        "prioritylevelconfigurations", "prioritylevelconfiguration", namespaced: false, short: [],
        categories: [], verbs: ALL_VERBS, sub: [status("PriorityLevelConfiguration")],
        storage: "prioritylevelconfigurations"),
    // networking.k8s.io/v1
    resource!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass",
        namespaced: false, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "ingressclasses"),
    resource!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", namespaced: true,
        short: ["ing"], categories: [], verbs: ALL_VERBS, sub: [status("Ingress")],
        storage: "ingress"),
    resource!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy",
        namespaced: true, short: ["netpol"], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "networkpolicies"),
    // policy/v1
    resource!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget",
        namespaced: true, short: ["pdb"], categories: [], verbs: ALL_VERBS,
        sub: [status("PodDisruptionBudget")], storage: "poddisruptionbudgets"),
    // rbac.authorization.k8s.io/v1
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings",
        "clusterrolebinding", namespaced: false, short: [], categories: [], verbs: ALL_VERBS,
        sub: [], storage: "clusterrolebindings"),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole",
        namespaced: false, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "clusterroles"),
    resource!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding",
        namespaced: true, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "rolebindings"),
    resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", namespaced: true,
        short: [], categories: [], verbs: ALL_VERBS, sub: [], storage: "roles"),
    // storage.k8s.io/v1
    resource!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass",
        namespaced: false, short: ["sc"], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "storageclasses"),
    // scheduling.k8s.io/v1
    resource!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass",
        namespaced: false, short: ["pc"], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "priorityclasses"),
    // coordination.k8s.io/v1
    resource!("coordination.k8s.io", "v1", "Lease", "leases", "lease", namespaced: true,
        short: [], categories: [], verbs: ALL_VERBS, sub: [], storage: "leases"),
    // node.k8s.io/v1
    resource!("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass",
        namespaced: false, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "runtimeclasses"),
    // discovery.k8s.io/v1
    resource!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice",
        namespaced: true, short: [], categories: [], verbs: ALL_VERBS, sub: [],
        storage: "endpointslices"),
];

/// The API groups other than core, in the order `/apis` lists them.
pub fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !groups.contains(&r.group) {
            groups.push(r.group);
        }
    }
    groups
}

/// The versions served for `group`, preferred first.
pub fn versions(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        if !versions.contains(&r.version) {
            versions.push(r.version);
        }
    }
    versions
}

/// The resources of one group-version, in catalogue order.
pub fn resources_in(group: &str, version: &str) -> impl Iterator<Item = &'static Resource> {
    let (group, version) = (group.to_owned(), version.to_owned());
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

/// The resource served at `group`/`version`/`plural`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a kind, by group and kind.
pub fn lookup_kind(group: &str, kind: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_unique_per_group_and_short_names_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        let mut shorts = std::collections::BTreeSet::new();
        for r in RESOURCES {
            assert!(
                seen.insert((r.group, r.version, r.plural)),
                "{} twice",
                r.plural
            );
            // Every version of a kind after the first repeats its short names.
            if !r.is_stored_version() {
                let stored = RESOURCES.iter().find(|s| {
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
        assert_eq!(groups()[0], "apps");
        assert_eq!(versions("batch"), ["v1"]);
        assert_eq!(versions("autoscaling"), ["v2", "v1"]);
    }
}
