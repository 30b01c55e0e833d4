//! Upstream's Node authorizer: what a kubelet (user `system:node:<node>` in group
//! `system:nodes`) may read and write, narrowed to its own node.
//!
//! - Secrets, ConfigMaps, PersistentVolumeClaims (and their status), PersistentVolumes,
//!   ResourceClaims and service account tokens only when a pod bound to the node uses them:
//!   through its volumes, environment, `imagePullSecrets`, projected sources or service account;
//!   a PersistentVolume through the claim it is bound to (`spec.claimRef`), and the secrets such
//!   a volume names for the kubelet through that volume. Secrets and ConfigMaps may also be
//!   listed or watched one at a time (`fieldSelector=metadata.name=<name>`).
//! - Pods: read when bound to the node, listed and watched with `spec.nodeName=<node>`;
//!   created, deleted, evicted and their status written (NodeRestriction admission,
//!   [`crate::admission::noderestriction`], then narrows these to the node's own pods).
//! - Nodes: its own Node read; created and written (NodeRestriction narrows to its own).
//! - Leases in `kube-node-lease` and CSINodes: its own, by name.
//! - Everything else by upstream's `NodeRules` ([`node_rules`]), the rules of the `system:node`
//!   ClusterRole, which is no longer bound to the node group.
//!
//! Users that are not nodes get no opinion, and neither does a node asking for something these
//! rules do not grant: RBAC decides then. A refusal's reason is upstream's (`no relationship
//! found between node 'n1' and this object`, `can only list/watch pods with spec.nodeName
//! field selector`, ...).
//!
//! Upstream keeps a graph of these relationships, fed by informers. Here they are looked up when
//! asked, from the API server's own watch caches: the pods bound to the node in the object's
//! namespace (read through the pod cache's node index, so only the node's pods there are
//! looked at), and for volumes the PersistentVolumes. The cache is read as it stands; a
//! lookup that finds no relationship is made again with a consistent read before the request is
//! refused, so an object created a moment ago is not refused because the cache lags.

use std::sync::{Arc, LazyLock};

use capstan_api::selector::{FieldOperator, FieldSelector, escape_field_value};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use crate::authn::User;
use crate::authz::{Attributes, Decision, rule_allows};
use crate::registry::Registries;
use crate::registry::selectors::Selectors;
use crate::registry::{ListOptions, Registry};

/// The group every node's user is in.
pub(crate) const NODES_GROUP: &str = "system:nodes";
/// The prefix of a node's user name.
const NODE_USER_PREFIX: &str = "system:node:";
/// The namespace of the nodes' Leases.
pub(crate) const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The annotation that makes a pod a mirror pod (a kubelet's copy of a static pod).
pub(crate) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The node `user` is, as upstream's node identifier reads it: a name `system:node:<node>` and
/// the group `system:nodes`. `Some("")` is a node whose name cannot be told.
pub(crate) fn node_identity(user: &User) -> Option<&str> {
    let node = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.groups.iter().any(|g| g == NODES_GROUP).then_some(node)
}

/// Upstream's `NodeRules` (1.33, with its default features: no DynamicResourceAllocation, no
/// ClusterTrustBundle): what every node may do, before the Node authorizer narrows it. The
/// `system:node` ClusterRole holds them too.
pub(crate) fn node_rules() -> Value {
    let read = ["get", "list", "watch"];
    json!([
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"],
         "resources": ["subjectaccessreviews", "localsubjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": read},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["create", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": read},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
         "verbs": ["create", "get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update", "patch", "delete"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
         "verbs": ["get", "update", "patch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csidrivers"],
         "verbs": ["get", "watch", "list"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"],
         "verbs": ["get", "create", "update", "patch", "delete"]},
        {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": read},
    ])
}

/// [`node_rules`], parsed once.
static NODE_RULES: LazyLock<Vec<PolicyRule>> =
    LazyLock::new(|| serde_json::from_value(node_rules()).unwrap_or_default());

/// A kind of object a node reaches only through its pods (upstream's graph vertices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vertex {
    /// A pod: bound to the node.
    Pod,
    /// A secret a pod, or a volume a pod's claim is bound to, uses.
    Secret,
    /// A config map a pod uses.
    ConfigMap,
    /// A PersistentVolumeClaim a pod mounts (directly or as an ephemeral volume's claim).
    Claim,
    /// A PersistentVolume bound to a claim a pod mounts.
    Volume,
    /// The service account a pod runs as.
    ServiceAccount,
    /// A ResourceClaim a pod uses (`resource.k8s.io`, not served here).
    ResourceClaim,
    /// A VolumeAttachment to the node (`storage.k8s.io`, not served here).
    VolumeAttachment,
}

/// What the node authorizer makes of a request before it looks anything up.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Allowed.
    Allow,
    /// No opinion, for this reason (possibly empty).
    NoOpinion(String),
    /// Allowed if the named object is related to the node.
    Related(Vertex),
}

fn no_opinion(reason: &str) -> Step {
    Step::NoOpinion(reason.to_owned())
}

/// Upstream's `authorize`: a named object, related to the node.
fn named(vertex: Vertex, attrs: &Attributes) -> Step {
    if attrs.name.is_empty() {
        return no_opinion("No Object name found");
    }
    Step::Related(vertex)
}

/// `get` of one object related to the node.
fn get(vertex: Vertex, attrs: &Attributes) -> Step {
    if attrs.verb != "get" {
        return no_opinion("can only get individual resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot get subresource");
    }
    named(vertex, attrs)
}

/// `get`, `list` or `watch` of one namespaced object related to the node.
fn read_namespaced(vertex: Vertex, attrs: &Attributes) -> Step {
    if !matches!(attrs.verb.as_str(), "get" | "list" | "watch") {
        return no_opinion("can only read resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot read subresource");
    }
    if attrs.namespace.is_empty() {
        return no_opinion("can only read namespaced object of this type");
    }
    named(vertex, attrs)
}

/// An update of the status of an object related to the node.
fn status_update(vertex: Vertex, attrs: &Attributes) -> Step {
    if !matches!(attrs.verb.as_str(), "update" | "patch") {
        return no_opinion("can only get/update/patch this type");
    }
    if attrs.subresource != "status" {
        return no_opinion("can only update status subresource");
    }
    named(vertex, attrs)
}

/// A TokenRequest for a service account a pod on the node runs as.
fn create_token(attrs: &Attributes) -> Step {
    if attrs.verb != "create" || attrs.name.is_empty() {
        return no_opinion("can only create tokens for individual service accounts");
    }
    if attrs.subresource != "token" {
        return no_opinion("can only create token subresource of serviceaccount");
    }
    Step::Related(Vertex::ServiceAccount)
}

/// The node's own Lease (creates are checked by NodeRestriction, which sees the name).
fn lease(node: &str, attrs: &Attributes) -> Step {
    if !matches!(
        attrs.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if attrs.namespace != NODE_LEASE_NAMESPACE {
        return Step::NoOpinion(format!(
            "can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"
        ));
    }
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    Step::Allow
}

/// The node's own CSINode.
fn csi_node(node: &str, attrs: &Attributes) -> Step {
    if !matches!(
        attrs.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a CSINode");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot authorize CSINode subresources");
    }
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access CSINode with the same name as the requesting node");
    }
    Step::Allow
}

/// Node objects: its own read; creates and writes left to NodeRestriction.
fn node_object(node: &str, attrs: &Attributes) -> Step {
    match (attrs.subresource.as_str(), attrs.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Step::Allow,
        ("", "get" | "list" | "watch") => match attrs.name.as_str() {
            name if name == node => Step::Allow,
            "" => Step::NoOpinion(format!(
                "node '{node}' cannot read all nodes, only its own Node object"
            )),
            name => Step::NoOpinion(format!(
                "node '{node}' cannot read '{name}', only its own Node object"
            )),
        },
        _ => no_opinion(""),
    }
}

/// Whether a list or watch selects the pods bound to `node` (`spec.nodeName=<node>`).
fn selects_node(node: &str, field_selector: &str) -> bool {
    FieldSelector::parse(field_selector).is_ok_and(|selector| {
        selector.requirements().iter().any(|r| {
            r.field == "spec.nodeName" && r.operator == FieldOperator::Equals && r.value == node
        })
    })
}

/// Pods: those bound to the node read; creates, deletes, status and evictions left to
/// NodeRestriction.
fn pod(node: &str, attrs: &Attributes) -> Step {
    match (attrs.subresource.as_str(), attrs.verb.as_str()) {
        ("", "get") => get(Vertex::Pod, attrs),
        ("", "list" | "watch") => {
            if selects_node(node, &attrs.field_selector) {
                Step::Allow
            } else if !attrs.name.is_empty() {
                named(Vertex::Pod, attrs)
            } else {
                no_opinion("can only list/watch pods with spec.nodeName field selector")
            }
        }
        ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
            Step::Allow
        }
        _ => no_opinion(""),
    }
}

/// What the Node authorizer makes of a request from `node`, before any lookup.
fn step(node: &str, attrs: &Attributes) -> Step {
    if attrs.resource_request {
        match (attrs.group.as_str(), attrs.resource.as_str()) {
            ("", "secrets") => return read_namespaced(Vertex::Secret, attrs),
            ("", "configmaps") => return read_namespaced(Vertex::ConfigMap, attrs),
            ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                return status_update(Vertex::Claim, attrs);
            }
            ("", "persistentvolumeclaims") => return get(Vertex::Claim, attrs),
            ("", "persistentvolumes") => return get(Vertex::Volume, attrs),
            ("resource.k8s.io", "resourceclaims") => return get(Vertex::ResourceClaim, attrs),
            ("storage.k8s.io", "volumeattachments") => {
                return get(Vertex::VolumeAttachment, attrs);
            }
            ("", "serviceaccounts") => return create_token(attrs),
            ("coordination.k8s.io", "leases") => return lease(node, attrs),
            ("storage.k8s.io", "csinodes") => return csi_node(node, attrs),
            ("", "nodes") => return node_object(node, attrs),
            ("", "pods") => return pod(node, attrs),
            _ => {}
        }
    }
    if NODE_RULES.iter().any(|rule| rule_allows(rule, attrs)) {
        Step::Allow
    } else {
        no_opinion("")
    }
}

/// The names under `key` of each object in the array at `pointer` of `value`.
fn names_in<'a>(value: &'a Value, pointer: &str, key: &str) -> Vec<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get(key).and_then(Value::as_str))
        .collect()
}

/// Every container of a pod: init, regular and ephemeral.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|list| pod["spec"][list].as_array())
        .flatten()
}

fn volumes(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["spec"]["volumes"].as_array().into_iter().flatten()
}

fn projected_sources<'a>(volume: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a str> {
    volume["projected"]["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(move |source| source[kind]["name"].as_str())
}

/// The secrets a pod names, as upstream's `VisitPodSecretNames`: image pull secrets, every
/// container's `envFrom` and `env`, and the volume sources that take a secret.
pub(crate) fn pod_secret_names(pod: &Value) -> Vec<&str> {
    let mut names = names_in(pod, "/spec/imagePullSecrets", "name");
    for container in containers(pod) {
        names.extend(
            container["envFrom"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["secretRef"]["name"].as_str()),
        );
        names.extend(
            container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["valueFrom"]["secretKeyRef"]["name"].as_str()),
        );
    }
    for volume in volumes(pod) {
        names.extend(volume["azureFile"]["secretName"].as_str());
        names.extend(volume["secret"]["secretName"].as_str());
        for source in [
            "cephfs",
            "cinder",
            "flexVolume",
            "rbd",
            "scaleIO",
            "iscsi",
            "storageos",
        ] {
            names.extend(volume[source]["secretRef"]["name"].as_str());
        }
        names.extend(volume["csi"]["nodePublishSecretRef"]["name"].as_str());
        names.extend(projected_sources(volume, "secret"));
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The config maps a pod names, as upstream's `VisitPodConfigmapNames`: every container's
/// `envFrom` and `env`, and `configMap` and projected volumes.
pub(crate) fn pod_config_map_names(pod: &Value) -> Vec<&str> {
    let mut names = Vec::new();
    for container in containers(pod) {
        names.extend(
            container["envFrom"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["configMapRef"]["name"].as_str()),
        );
        names.extend(
            container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["valueFrom"]["configMapKeyRef"]["name"].as_str()),
        );
    }
    for volume in volumes(pod) {
        names.extend(volume["configMap"]["name"].as_str());
        names.extend(projected_sources(volume, "configMap"));
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The claims a pod mounts: `persistentVolumeClaim` volumes, and the claim an ephemeral volume
/// gets (`<pod>-<volume>`).
pub(crate) fn pod_claim_names(pod: &Value) -> Vec<String> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    volumes(pod)
        .filter_map(|volume| {
            if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
                Some(claim.to_owned())
            } else if volume.get("ephemeral").is_some_and(|e| !e.is_null()) {
                let name = volume["name"].as_str().unwrap_or_default();
                Some(format!("{pod_name}-{name}"))
            } else {
                None
            }
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// The ResourceClaims a pod uses: those it names, and those made for it from a template (as
/// its status records them).
fn pod_resource_claim_names(pod: &Value) -> Vec<&str> {
    let made = |entry: &str| {
        pod["status"]["resourceClaimStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"].as_str() == Some(entry))
            .and_then(|s| s["resourceClaimName"].as_str())
    };
    pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|claim| {
            claim["resourceClaimName"].as_str().or_else(|| {
                claim["resourceClaimTemplateName"]
                    .as_str()
                    .and_then(|_| made(claim["name"].as_str().unwrap_or_default()))
            })
        })
        .collect()
}

/// Whether `pod` is a mirror pod, which grants its node nothing but the pod itself.
pub(crate) fn is_mirror_pod(pod: &Value) -> bool {
    pod["metadata"]["annotations"]
        .get(MIRROR_POD_ANNOTATION)
        .is_some()
}

/// Whether `pod` (bound to the node) uses the `vertex` object named `name` of its namespace.
fn pod_uses(pod: &Value, vertex: Vertex, name: &str) -> bool {
    if is_mirror_pod(pod) {
        return false;
    }
    match vertex {
        Vertex::Secret => pod_secret_names(pod).contains(&name),
        Vertex::ConfigMap => pod_config_map_names(pod).contains(&name),
        Vertex::Claim => pod_claim_names(pod).iter().any(|c| c == name),
        Vertex::ServiceAccount => pod["spec"]["serviceAccountName"].as_str() == Some(name),
        Vertex::ResourceClaim => pod_resource_claim_names(pod).contains(&name),
        Vertex::Pod | Vertex::Volume | Vertex::VolumeAttachment => false,
    }
}

/// The secrets a PersistentVolume names that the kubelet reads (upstream's
/// `VisitPVSecretNames` with `kubeletVisible`), as (namespace, name): a source's own namespace
/// where it has one, else the namespace of the claim the volume is bound to.
pub(crate) fn volume_secrets(volume: &Value) -> Vec<(String, String)> {
    let spec = &volume["spec"];
    let claim_namespace = spec["claimRef"]["namespace"].as_str().unwrap_or_default();
    let mut secrets = Vec::new();
    let mut add = |namespace: &str, name: Option<&str>| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            secrets.push((namespace.to_owned(), name.to_owned()));
        }
    };
    let own_or_claims = |reference: &Value| -> String {
        reference["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(claim_namespace)
            .to_owned()
    };
    if spec["azureFile"].is_object() {
        let file = &spec["azureFile"];
        let namespace = file["secretNamespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(claim_namespace);
        add(namespace, file["secretName"].as_str());
    } else if spec["cinder"].is_object() || spec["storageos"].is_object() {
        let source = if spec["cinder"].is_object() {
            &spec["cinder"]
        } else {
            &spec["storageos"]
        };
        let reference = &source["secretRef"];
        add(
            reference["namespace"].as_str().unwrap_or_default(),
            reference["name"].as_str(),
        );
    } else if spec["csi"].is_object() {
        for key in [
            "nodePublishSecretRef",
            "nodeStageSecretRef",
            "nodeExpandSecretRef",
        ] {
            let reference = &spec["csi"][key];
            add(
                reference["namespace"].as_str().unwrap_or_default(),
                reference["name"].as_str(),
            );
        }
    } else if let Some(source) = ["cephfs", "flexVolume", "rbd", "scaleIO", "iscsi"]
        .into_iter()
        .find(|s| spec[*s].is_object())
    {
        let reference = &spec[source]["secretRef"];
        if reference.is_object() {
            add(&own_or_claims(reference), reference["name"].as_str());
        }
    }
    secrets
}

/// The registries the relationships are looked up in.
#[derive(Debug)]
struct Lookups {
    pods: Arc<Registry>,
    volumes: Arc<Registry>,
}

/// The Node authorizer.
#[derive(Debug, Default)]
pub(crate) struct NodeAuthorizer {
    /// Where relationships are looked up; without them no object is related to any node.
    lookups: Option<Lookups>,
}

/// How fresh a lookup must be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Freshness {
    /// The watch cache as it stands.
    Cached,
    /// Every write made before the lookup (a consistent read).
    Consistent,
}

impl Freshness {
    fn resource_version(self) -> Option<String> {
        match self {
            Freshness::Cached => Some("0".to_owned()),
            Freshness::Consistent => None,
        }
    }
}

impl NodeAuthorizer {
    /// The Node authorizer over `api`'s pods and PersistentVolumes.
    pub(crate) fn new(registries: &Registries) -> NodeAuthorizer {
        let lookups = match (
            registries.get("", "v1", "pods"),
            registries.get("", "v1", "persistentvolumes"),
        ) {
            (Some(pods), Some(volumes)) => Some(Lookups {
                pods: pods.clone(),
                volumes: volumes.clone(),
            }),
            _ => None,
        };
        NodeAuthorizer { lookups }
    }

    /// The Node authorizer's answer for `user`, `None` when `user` is not a node (no opinion,
    /// no reason).
    pub(crate) async fn authorize(&self, user: &User, attrs: &Attributes) -> Option<Decision> {
        let node = node_identity(user)?;
        let refuse = |reason: String| Decision {
            reason,
            ..Decision::default()
        };
        if node.is_empty() {
            return Some(refuse(format!("unknown node for user \"{}\"", user.name)));
        }
        Some(match step(node, attrs) {
            Step::Allow => Decision::allow(),
            Step::NoOpinion(reason) => refuse(reason),
            Step::Related(vertex) => {
                let (namespace, name) = (attrs.namespace.as_str(), attrs.name.as_str());
                if self
                    .related(node, vertex, namespace, name, Freshness::Cached)
                    .await
                    || self
                        .related(node, vertex, namespace, name, Freshness::Consistent)
                        .await
                {
                    Decision::allow()
                } else {
                    tracing::debug!(%node, ?vertex, %namespace, %name, "node authorizer: no relationship");
                    refuse(format!(
                        "no relationship found between node '{node}' and this object"
                    ))
                }
            }
        })
    }

    /// Whether the `vertex` object `namespace/name` is related to `node`.
    async fn related(
        &self,
        node: &str,
        vertex: Vertex,
        namespace: &str,
        name: &str,
        freshness: Freshness,
    ) -> bool {
        let Some(lookups) = &self.lookups else {
            return false;
        };
        let cluster_scoped = matches!(vertex, Vertex::Volume | Vertex::VolumeAttachment);
        if namespace.is_empty() && !cluster_scoped {
            // A namespaced object named without its namespace is related to nothing.
            return false;
        }
        match vertex {
            Vertex::Pod => lookups
                .pods
                .read(
                    Some(namespace),
                    name,
                    freshness.resource_version().as_deref(),
                )
                .await
                .is_ok_and(|pod| pod.object()["spec"]["nodeName"].as_str() == Some(node)),
            Vertex::Secret => {
                self.used_by_pods(node, namespace, vertex, name, freshness)
                    .await
                    || self
                        .secret_of_used_volume(node, namespace, name, freshness)
                        .await
            }
            Vertex::ConfigMap | Vertex::Claim | Vertex::ServiceAccount | Vertex::ResourceClaim => {
                self.used_by_pods(node, namespace, vertex, name, freshness)
                    .await
            }
            Vertex::Volume => {
                let Ok(volume) = lookups
                    .volumes
                    .read(None, name, freshness.resource_version().as_deref())
                    .await
                else {
                    return false;
                };
                self.volume_used(node, &volume.object(), freshness).await
            }
            // Not served here: no such object can name the node.
            Vertex::VolumeAttachment => false,
        }
    }

    /// Whether a pod bound to `node` in `namespace` uses the `vertex` object `name`.
    async fn used_by_pods(
        &self,
        node: &str,
        namespace: &str,
        vertex: Vertex,
        name: &str,
        freshness: Freshness,
    ) -> bool {
        let Some(lookups) = &self.lookups else {
            return false;
        };
        let selector = format!("spec.nodeName={}", escape_field_value(node));
        let Ok(selectors) = Selectors::parse(None, Some(&selector)) else {
            return false;
        };
        let options = ListOptions {
            selectors,
            resource_version: freshness.resource_version(),
            ..ListOptions::default()
        };
        match lookups.pods.list(Some(namespace), &options).await {
            Ok(list) => list
                .items
                .iter()
                .any(|pod| pod_uses(&pod.object(), vertex, name)),
            Err(error) => {
                tracing::debug!(?error, "node authorizer: cannot list pods");
                false
            }
        }
    }

    /// Whether PersistentVolume `volume` is bound to a claim a pod on `node` mounts.
    async fn volume_used(&self, node: &str, volume: &Value, freshness: Freshness) -> bool {
        let claim = &volume["spec"]["claimRef"];
        match (claim["namespace"].as_str(), claim["name"].as_str()) {
            (Some(namespace), Some(name)) if !name.is_empty() => {
                self.used_by_pods(node, namespace, Vertex::Claim, name, freshness)
                    .await
            }
            _ => false,
        }
    }

    /// Whether secret `namespace/name` is one the kubelet reads for a PersistentVolume bound
    /// to a claim a pod on `node` mounts.
    async fn secret_of_used_volume(
        &self,
        node: &str,
        namespace: &str,
        name: &str,
        freshness: Freshness,
    ) -> bool {
        let Some(lookups) = &self.lookups else {
            return false;
        };
        let options = ListOptions {
            resource_version: freshness.resource_version(),
            ..ListOptions::default()
        };
        let Ok(list) = lookups.volumes.list(None, &options).await else {
            return false;
        };
        for volume in list.items.iter().map(|v| v.object()) {
            let names_it = volume_secrets(&volume)
                .iter()
                .any(|(ns, n)| ns == namespace && n == name);
            if names_it && self.volume_used(node, &volume, freshness).await {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: ns.into(),
            ..Attributes::default()
        }
    }

    fn check(verb: &str, resource: &str, sub: &str, ns: &str, name: &str, expected: Step) {
        let (group, resource) = match resource.split_once('.') {
            Some((resource, group)) => (group, resource),
            None => ("", resource),
        };
        let got = step("n1", &attrs(verb, group, resource, sub, ns, name));
        assert_eq!(got, expected, "{verb} {group}/{resource}/{sub} {ns}/{name}");
    }

    fn reason(text: &str) -> Step {
        Step::NoOpinion(text.to_owned())
    }

    #[test]
    fn nodes_are_users_named_for_a_node_in_the_nodes_group() {
        let user = |name: &str, groups: &[&str]| User {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::default()
        };
        assert_eq!(
            node_identity(&user("system:node:n1", &[NODES_GROUP])),
            Some("n1")
        );
        assert_eq!(
            node_identity(&user("system:node:", &[NODES_GROUP])),
            Some("")
        );
        assert_eq!(node_identity(&user("system:node:n1", &["devs"])), None);
        assert_eq!(node_identity(&user("jane", &[NODES_GROUP])), None);
    }

    #[test]
    fn objects_pods_use_need_a_relationship() {
        let secret = || Step::Related(Vertex::Secret);
        check("get", "secrets", "", "ns", "s", secret());
        check("list", "secrets", "", "ns", "s", secret());
        check(
            "watch",
            "configmaps",
            "",
            "ns",
            "c",
            Step::Related(Vertex::ConfigMap),
        );
        check(
            "list",
            "secrets",
            "",
            "ns",
            "",
            reason("No Object name found"),
        );
        check(
            "update",
            "secrets",
            "",
            "ns",
            "s",
            reason("can only read resources of this type"),
        );
        check(
            "get",
            "secrets",
            "x",
            "ns",
            "s",
            reason("cannot read subresource"),
        );
        check(
            "get",
            "secrets",
            "",
            "",
            "s",
            reason("can only read namespaced object of this type"),
        );
        check(
            "get",
            "persistentvolumeclaims",
            "",
            "ns",
            "c",
            Step::Related(Vertex::Claim),
        );
        check(
            "list",
            "persistentvolumeclaims",
            "",
            "ns",
            "c",
            reason("can only get individual resources of this type"),
        );
        check(
            "patch",
            "persistentvolumeclaims",
            "status",
            "ns",
            "c",
            Step::Related(Vertex::Claim),
        );
        check(
            "get",
            "persistentvolumeclaims",
            "status",
            "ns",
            "c",
            reason("can only get/update/patch this type"),
        );
        check(
            "get",
            "persistentvolumes",
            "",
            "",
            "v",
            Step::Related(Vertex::Volume),
        );
        check(
            "create",
            "serviceaccounts",
            "token",
            "ns",
            "sa",
            Step::Related(Vertex::ServiceAccount),
        );
        check(
            "get",
            "serviceaccounts",
            "",
            "ns",
            "sa",
            reason("can only create tokens for individual service accounts"),
        );
        check(
            "create",
            "serviceaccounts",
            "",
            "ns",
            "sa",
            reason("can only create token subresource of serviceaccount"),
        );
    }

    #[test]
    fn nodes_leases_and_pods_are_narrowed_to_the_node() {
        check("get", "nodes", "", "", "n1", Step::Allow);
        check(
            "get",
            "nodes",
            "",
            "",
            "n2",
            reason("node 'n1' cannot read 'n2', only its own Node object"),
        );
        check(
            "list",
            "nodes",
            "",
            "",
            "",
            reason("node 'n1' cannot read all nodes, only its own Node object"),
        );
        // Writes are NodeRestriction's to narrow; deletes are not granted.
        check("patch", "nodes", "", "", "n2", Step::Allow);
        check("update", "nodes", "status", "", "n1", Step::Allow);
        check("delete", "nodes", "", "", "n1", reason(""));
        let lease = "leases.coordination.k8s.io";
        check("update", lease, "", NODE_LEASE_NAMESPACE, "n1", Step::Allow);
        check("create", lease, "", NODE_LEASE_NAMESPACE, "", Step::Allow);
        check(
            "update",
            lease,
            "",
            NODE_LEASE_NAMESPACE,
            "n2",
            reason("can only access node lease with the same name as the requesting node"),
        );
        check(
            "get",
            lease,
            "",
            "kube-system",
            "n1",
            reason("can only access leases in the \"kube-node-lease\" system namespace"),
        );
        check(
            "list",
            lease,
            "",
            NODE_LEASE_NAMESPACE,
            "",
            reason("can only get, create, update, patch, or delete a node lease"),
        );
        check("get", "pods", "", "ns", "p", Step::Related(Vertex::Pod));
        check("create", "pods", "", "ns", "", Step::Allow);
        check("patch", "pods", "status", "ns", "p", Step::Allow);
        check("create", "pods", "eviction", "ns", "p", Step::Allow);
        check("update", "pods", "", "ns", "p", reason(""));
        check("get", "pods", "log", "ns", "p", reason(""));
        check(
            "list",
            "pods",
            "",
            "",
            "",
            reason("can only list/watch pods with spec.nodeName field selector"),
        );
        let mut watch = attrs("watch", "", "pods", "", "", "");
        for (selector, allowed) in [
            ("spec.nodeName=n1", true),
            ("spec.nodeName==n1", true),
            ("metadata.namespace=x,spec.nodeName=n1", true),
            ("spec.nodeName=n2", false),
            ("spec.nodeName!=n1", false),
            ("spec.nodeName", false),
        ] {
            watch.field_selector = selector.into();
            assert_eq!(step("n1", &watch) == Step::Allow, allowed, "{selector}");
        }
    }

    #[test]
    fn the_rest_follows_upstreams_node_rules() {
        check("create", "events", "", "ns", "", Step::Allow);
        check("list", "services", "", "ns", "", Step::Allow);
        check("get", "endpoints", "", "ns", "e", Step::Allow);
        check(
            "get",
            "runtimeclasses.node.k8s.io",
            "",
            "",
            "r",
            Step::Allow,
        );
        check("get", "deployments.apps", "", "ns", "d", reason(""));
        check("create", "namespaces", "", "", "", reason(""));
        let path = Attributes {
            verb: "get".into(),
            path: "/healthz".into(),
            ..Attributes::default()
        };
        assert_eq!(step("n1", &path), reason(""));
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn pods_name_what_upstreams_visitors_name() {
        let p = pod(json!({
            "imagePullSecrets": [{"name": "pull"}],
            "serviceAccountName": "sa",
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [{"name": "c", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                {"name": "C", "value": "plain"}],
                "envFrom": [{"configMapRef": {"name": "from-cm"}}]}],
            "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "debug"}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol-secret"}},
                {"name": "m", "configMap": {"name": "vol-cm"}},
                {"name": "p", "projected": {"sources": [
                    {"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}},
                    {"serviceAccountToken": {"path": "token"}}]}},
                {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "empty", "emptyDir": {}}]
        }));
        let mut secrets = pod_secret_names(&p);
        secrets.sort_unstable();
        assert_eq!(
            secrets,
            [
                "csi",
                "debug",
                "env-secret",
                "init-env",
                "proj-secret",
                "pull",
                "vol-secret"
            ]
        );
        let mut maps = pod_config_map_names(&p);
        maps.sort_unstable();
        assert_eq!(maps, ["env-cm", "from-cm", "proj-cm", "vol-cm"]);
        assert_eq!(pod_claim_names(&p), ["data", "web-scratch"]);
        assert!(pod_uses(&p, Vertex::ServiceAccount, "sa"));
        assert!(pod_uses(&p, Vertex::Claim, "web-scratch"));
        assert!(!pod_uses(&p, Vertex::Secret, "other"));
        // A mirror pod grants its node nothing it names.
        let mut mirror = p.clone();
        mirror["metadata"]["annotations"] = json!({MIRROR_POD_ANNOTATION: "x"});
        assert!(!pod_uses(&mirror, Vertex::Secret, "pull"));
        let claims = json!({"metadata": {"name": "p"}, "spec": {"resourceClaims": [
                {"name": "a", "resourceClaimName": "direct"},
                {"name": "b", "resourceClaimTemplateName": "t"},
                {"name": "c", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x"}]}});
        assert_eq!(pod_resource_claim_names(&claims), ["direct", "p-b-x"]);
    }

    #[test]
    fn volumes_name_the_secrets_the_kubelet_reads() {
        let volume = |source: Value| {
            let mut spec = json!({"claimRef": {"namespace": "claims", "name": "c"}});
            spec.as_object_mut()
                .unwrap()
                .extend(source.as_object().unwrap().clone());
            json!({ "spec": spec })
        };
        let pair = |ns: &str, name: &str| (ns.to_owned(), name.to_owned());
        assert_eq!(
            volume_secrets(&volume(json!({"rbd": {"secretRef": {"name": "r"}}}))),
            [pair("claims", "r")]
        );
        assert_eq!(
            volume_secrets(&volume(
                json!({"iscsi": {"secretRef": {"name": "i", "namespace": "own"}}})
            )),
            [pair("own", "i")]
        );
        assert_eq!(
            volume_secrets(&volume(
                json!({"azureFile": {"secretName": "a", "shareName": "s"}})
            )),
            [pair("claims", "a")]
        );
        assert_eq!(
            volume_secrets(&volume(json!({"csi": {"driver": "d",
                "controllerPublishSecretRef": {"namespace": "x", "name": "controller"},
                "nodeStageSecretRef": {"namespace": "x", "name": "stage"},
                "nodePublishSecretRef": {"namespace": "x", "name": "publish"}}}))),
            [pair("x", "publish"), pair("x", "stage")]
        );
        assert!(volume_secrets(&volume(json!({"hostPath": {"path": "/x"}}))).is_empty());
    }
}
