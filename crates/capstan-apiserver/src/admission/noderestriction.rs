//! Upstream's NodeRestriction admission plugin: what a node (user `system:node:<node>` in
//! `system:nodes`, [`crate::authz::node::node_identity`]) may write, once the Node authorizer let
//! the request through.
//!
//! - Pods: created only as mirror pods bound to the node and owned by its Node, naming no
//!   service account, secret, config map, claim or cluster trust bundle (there are no static
//!   pods here, so a kubelet never creates one: any other pod is refused); deleted, evicted and
//!   their status written only when bound to the node, a status write changing neither labels
//!   nor resource claim statuses; no other operation or subresource.
//! - Nodes: only its own Node; not created with or changed to a `configSource`, its taints not
//!   changed, and no label set, changed or removed under `node-restriction.kubernetes.io/`, nor
//!   under `kubernetes.io/` or `k8s.io/` outside the labels kubelets set (upstream's
//!   `kubeletapis.IsKubeletLabel`).
//! - PersistentVolumeClaims: only their status, and of it only capacity, conditions and
//!   allocated resources.
//! - Service account tokens: only bound to a pod (with its UID) on the node.
//! - Leases: only its own, in `kube-node-lease`.
//!
//! Refusals are 403 Forbidden with upstream's messages, e.g. `pods "web" is forbidden: pod does
//! not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods`.
//! The objects it looks up (a pod being deleted, evicted or bound to a token, the node named as
//! a mirror pod's owner) come from the watch cache, as upstream's from its informers; one that
//! is missing or does not match there is read again consistently before the request is
//! refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capstan_api::{GroupResource, StatusError};
use serde_json::Value;

use super::{
    Attributes, Mutation, Operation as AdmissionOperation, Plugin, Review, Validation, Verdict,
};
use crate::authn::User;
use crate::authz::node::{
    MIRROR_POD_ANNOTATION, NODE_LEASE_NAMESPACE, node_identity, pod_config_map_names,
    pod_secret_names,
};
use crate::registry::Registry;
use crate::status::ApiError;

/// What a request does to its object.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operation<'a> {
    /// Creates `object` (a TokenRequest or Eviction for those subresources).
    Create(&'a Value),
    /// Replaces `old` with `new`.
    Update {
        /// The object as it will be stored.
        new: &'a Value,
        /// The object as it is.
        old: &'a Value,
    },
    /// Deletes the object.
    Delete,
}

impl Operation<'_> {
    /// Upstream's name of the operation.
    fn name(&self) -> &'static str {
        match self {
            Operation::Create(_) => "CREATE",
            Operation::Update { .. } => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// A write to admit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write<'a> {
    /// The API group of the resource.
    pub group: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The subresource (empty for the main endpoint).
    pub subresource: &'a str,
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    /// The object's name: the URL's, or for a create the new object's.
    pub name: &'a str,
    /// What is done.
    pub operation: Operation<'a>,
}

impl Write<'_> {
    /// Upstream's `admission.NewForbidden`: the resource and the name the request is about
    /// (for a create without a name, the object's `generateName`, else `Unknown`).
    fn forbidden(&self, reason: &str) -> ApiError {
        let name = if !self.name.is_empty() {
            self.name.to_owned()
        } else {
            match self.operation {
                Operation::Create(object) => {
                    let meta = &object["metadata"];
                    [meta["name"].as_str(), meta["generateName"].as_str()]
                        .into_iter()
                        .flatten()
                        .find(|n| !n.is_empty())
                        .unwrap_or("Unknown")
                        .to_owned()
                }
                _ => "Unknown".to_owned(),
            }
        };
        StatusError::forbidden(GroupResource::new(self.group, self.resource), &name, reason).into()
    }
}

/// The NodeRestriction plugin.
#[derive(Debug, Default)]
pub(crate) struct NodeRestriction {
    pods: Option<Arc<Registry>>,
    nodes: Option<Arc<Registry>>,
}

/// A lister's NotFound, as upstream's plugin returns it (the resource named by its singular,
/// as client-go's listers do).
fn not_found(singular: &str, name: &str) -> ApiError {
    StatusError::not_found(GroupResource::new("", singular), name).into()
}

/// The labels of `object`.
fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// The keys whose values differ between two label maps (added, removed or changed).
fn modified_labels(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> BTreeSet<String> {
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(*v)))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The prefix of a label key (before its `/`), empty when it has none.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

/// Whether `namespace` is `domain` or one of its subdomains.
fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Upstream's `kubeletapis.IsKubeletLabel`: the labels kubelets set on their own Node.
fn is_kubelet_label(key: &str) -> bool {
    const LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let namespace = label_namespace(key);
    LABELS.contains(&key)
        || in_domain(namespace, "kubelet.kubernetes.io")
        || in_domain(namespace, "node.kubernetes.io")
}

/// The labels of `modified` a node may not add, change or remove, sorted.
fn forbidden_labels(modified: BTreeSet<String>) -> Vec<String> {
    modified
        .into_iter()
        .filter(|key| {
            let namespace = label_namespace(key);
            let restricted = in_domain(namespace, "node-restriction.kubernetes.io");
            let kubernetes =
                in_domain(namespace, "kubernetes.io") || in_domain(namespace, "k8s.io");
            restricted || (kubernetes && !is_kubelet_label(key))
        })
        .collect()
}

/// A field as Go's semantic equality sees it: absent, null and empty are alike.
fn present(value: &Value) -> Option<&Value> {
    match value {
        Value::Null => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(o) if o.is_empty() => None,
        other => Some(other),
    }
}

/// Whether two pods' `status.resourceClaimStatuses` name the same claims.
fn claim_statuses_equal(a: &Value, b: &Value) -> bool {
    let entries = |pod: &Value| -> Vec<(Option<String>, Option<String>)> {
        pod["status"]["resourceClaimStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["name"].as_str().map(str::to_owned),
                    s["resourceClaimName"].as_str().map(str::to_owned),
                )
            })
            .collect()
    };
    entries(a) == entries(b)
}

/// A claim with what a node may change through its status taken out.
fn claim_without_node_fields(claim: &Value) -> Value {
    let mut claim = claim.clone();
    if let Some(meta) = claim["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    if let Some(status) = claim["status"].as_object_mut() {
        for field in [
            "capacity",
            "conditions",
            "allocatedResourceStatuses",
            "allocatedResources",
        ] {
            status.remove(field);
        }
    }
    claim
}

/// The differences between two JSON values, as `path: old -> new` lines.
fn differences(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let null = Value::Null;
                differences(
                    &format!("{path}.{key}"),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if present(old) != present(new) => out.push(format!("{path}: {old} -> {new}")),
        _ => {}
    }
}

impl NodeRestriction {
    /// The plugin, reading pods and nodes from these registries.
    pub(crate) fn new(pods: Option<Arc<Registry>>, nodes: Option<Arc<Registry>>) -> Self {
        NodeRestriction { pods, nodes }
    }

    /// Admits `write` made by `user`: nothing to check unless `user` is a node.
    pub(crate) async fn admit_write(&self, user: &User, write: &Write<'_>) -> Result<(), ApiError> {
        let Some(node) = node_identity(user) else {
            return Ok(());
        };
        if node.is_empty() {
            return Err(write.forbidden(&format!(
                "could not determine node from user \"{}\"",
                user.name
            )));
        }
        match (write.group, write.resource) {
            ("", "pods") => match write.subresource {
                "" => self.admit_pod(node, write).await,
                "status" => admit_pod_status(node, write),
                "eviction" => self.admit_eviction(node, write).await,
                other => Err(write.forbidden(&format!(
                    "unexpected pod subresource \"{other}\", only 'status' and 'eviction' are allowed"
                ))),
            },
            ("", "nodes") => admit_node(node, write),
            ("", "persistentvolumeclaims") => match write.subresource {
                "status" => admit_claim_status(node, write),
                _ => Err(write.forbidden("may only update PVC status")),
            },
            ("", "serviceaccounts") => self.admit_token(node, write).await,
            ("coordination.k8s.io", "leases") => admit_lease(node, write),
            _ => Ok(()),
        }
    }

    /// Reads `namespace/name` from `registry`: from the watch cache as it stands, and again
    /// consistently when the cache has no such object or one that `fits` refuses.
    async fn lookup(
        registry: Option<&Arc<Registry>>,
        namespace: Option<&str>,
        name: &str,
        singular: &str,
        fits: impl Fn(&Value) -> bool,
    ) -> Result<Value, ApiError> {
        let Some(registry) = registry else {
            return Err(not_found(singular, name));
        };
        if let Ok(cached) = registry.read(namespace, name, Some("0")).await {
            let object = cached.object();
            if fits(&object) {
                return Ok(object);
            }
        }
        match registry.get(namespace, name).await {
            Ok(object) => Ok(object),
            Err(error) if error.status().code() == 404 => Err(not_found(singular, name)),
            Err(error) => Err(error),
        }
    }

    /// Upstream's `admitPod`: mirror pods created, own pods deleted.
    async fn admit_pod(&self, node: &str, write: &Write<'_>) -> Result<(), ApiError> {
        match write.operation {
            Operation::Create(pod) => self.admit_pod_create(node, write, pod).await,
            Operation::Delete => {
                let on_node = |pod: &Value| pod["spec"]["nodeName"].as_str() == Some(node);
                let namespace = Some(write.namespace).filter(|n| !n.is_empty());
                let pod =
                    Self::lookup(self.pods.as_ref(), namespace, write.name, "pod", on_node).await?;
                if !on_node(&pod) {
                    return Err(write.forbidden(&format!(
                        "node \"{node}\" can only delete pods with spec.nodeName set to itself"
                    )));
                }
                Ok(())
            }
            Operation::Update { .. } => Err(write.forbidden(&format!(
                "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
                write.operation.name()
            ))),
        }
    }

    /// Upstream's `admitPodCreate`: only a mirror pod of this node's, naming nothing else.
    async fn admit_pod_create(
        &self,
        node: &str,
        write: &Write<'_>,
        pod: &Value,
    ) -> Result<(), ApiError> {
        let refuse = |reason: String| Err(write.forbidden(&reason));
        if pod["metadata"]["annotations"]
            .get(MIRROR_POD_ANNOTATION)
            .is_none()
        {
            return refuse(format!(
                "pod does not have \"{MIRROR_POD_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
            ));
        }
        if pod["spec"]["nodeName"].as_str().unwrap_or_default() != node {
            return refuse(format!(
                "node \"{node}\" can only create pods with spec.nodeName set to itself"
            ));
        }
        let owners = pod["metadata"]["ownerReferences"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let owner = match owners {
            [] => {
                return refuse(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            [owner] => owner,
            _ => {
                return refuse(format!(
                    "node \"{node}\" can only create pods with a single owner reference set to itself"
                ));
            }
        };
        if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
            return refuse(format!(
                "node \"{node}\" can only create pods with an owner reference set to itself"
            ));
        }
        if owner["controller"] != true {
            return refuse(format!(
                "node \"{node}\" can only create pods with a controller owner reference set to itself"
            ));
        }
        if owner["blockOwnerDeletion"] == true {
            return refuse(format!(
                "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
            ));
        }
        let owner_uid = owner["uid"].as_str().unwrap_or_default();
        let same_uid = |n: &Value| n["metadata"]["uid"].as_str() == Some(owner_uid);
        let node_object = Self::lookup(self.nodes.as_ref(), None, node, "node", same_uid).await?;
        if !same_uid(&node_object) {
            return refuse(format!(
                "node {node} UID mismatch: expected {owner_uid} got {}",
                node_object["metadata"]["uid"].as_str().unwrap_or_default()
            ));
        }
        if !pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            return refuse(format!(
                "node \"{node}\" can not create pods that reference a service account"
            ));
        }
        if !pod_secret_names(pod).is_empty() {
            return refuse(format!(
                "node \"{node}\" can not create pods that reference secrets"
            ));
        }
        if !pod_config_map_names(pod).is_empty() {
            return refuse(format!(
                "node \"{node}\" can not create pods that reference configmaps"
            ));
        }
        let volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
        let trust_bundles = volumes
            .clone()
            .filter_map(|v| v["projected"]["sources"].as_array())
            .flatten()
            .any(|source| present(&source["clusterTrustBundle"]).is_some());
        if trust_bundles {
            return refuse(format!(
                "node \"{node}\" can not create pods that reference clustertrustbundles"
            ));
        }
        if volumes
            .clone()
            .any(|v| present(&v["persistentVolumeClaim"]).is_some())
        {
            return refuse(format!(
                "node \"{node}\" can not create pods that reference persistentvolumeclaims"
            ));
        }
        Ok(())
    }

    /// Upstream's `admitPodEviction`: only pods bound to the node.
    async fn admit_eviction(&self, node: &str, write: &Write<'_>) -> Result<(), ApiError> {
        let Operation::Create(eviction) = write.operation else {
            return Err(
                write.forbidden(&format!("unexpected operation {}", write.operation.name()))
            );
        };
        let name = if write.name.is_empty() {
            eviction["metadata"]["name"].as_str().unwrap_or_default()
        } else {
            write.name
        };
        if name.is_empty() {
            return Err(write.forbidden("could not determine pod from request data"));
        }
        let on_node = |pod: &Value| pod["spec"]["nodeName"].as_str() == Some(node);
        let namespace = Some(write.namespace).filter(|n| !n.is_empty());
        let pod = Self::lookup(self.pods.as_ref(), namespace, name, "pod", on_node).await?;
        if !on_node(&pod) {
            return Err(write.forbidden(&format!(
                "node {node} can only evict pods with spec.nodeName set to itself"
            )));
        }
        Ok(())
    }

    /// Upstream's `admitServiceAccount`: tokens only bound to a pod on the node.
    async fn admit_token(&self, node: &str, write: &Write<'_>) -> Result<(), ApiError> {
        let Operation::Create(request) = write.operation else {
            return Ok(());
        };
        if write.subresource != "token" {
            return Ok(());
        }
        let reference = &request["spec"]["boundObjectRef"];
        let text = |key: &str| reference[key].as_str().unwrap_or_default();
        if reference.is_null()
            || text("apiVersion") != "v1"
            || text("kind") != "Pod"
            || text("name").is_empty()
        {
            return Err(write.forbidden("node requested token not bound to a pod"));
        }
        let uid = text("uid");
        if uid.is_empty() {
            return Err(write.forbidden("node requested token with a pod binding without a uid"));
        }
        let fits = |pod: &Value| {
            pod["metadata"]["uid"].as_str() == Some(uid)
                && pod["spec"]["nodeName"].as_str() == Some(node)
        };
        let namespace = Some(write.namespace).filter(|n| !n.is_empty());
        let pod = Self::lookup(self.pods.as_ref(), namespace, text("name"), "pod", fits).await?;
        if pod["metadata"]["uid"].as_str() != Some(uid) {
            return Err(write.forbidden(&format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            )));
        }
        if pod["spec"]["nodeName"].as_str() != Some(node) {
            return Err(write
                .forbidden("node requested token bound to a pod scheduled on a different node"));
        }
        Ok(())
    }
}

/// Upstream's `admitPodStatus`: only pods bound to the node, labels and claim statuses kept.
fn admit_pod_status(node: &str, write: &Write<'_>) -> Result<(), ApiError> {
    let Operation::Update { new, old } = write.operation else {
        return Err(write.forbidden(&format!(
            "unexpected operation \"{}\"",
            write.operation.name()
        )));
    };
    if old["spec"]["nodeName"].as_str().unwrap_or_default() != node {
        return Err(write.forbidden(&format!(
            "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
        )));
    }
    if labels(old) != labels(new) {
        return Err(write.forbidden(&format!(
            "node \"{node}\" cannot update labels through pod status"
        )));
    }
    if !claim_statuses_equal(old, new) {
        return Err(write.forbidden(&format!(
            "node \"{node}\" cannot update resource claim statues"
        )));
    }
    Ok(())
}

/// Upstream's `admitPVCStatus`: only capacity, conditions and allocated resources change.
fn admit_claim_status(node: &str, write: &Write<'_>) -> Result<(), ApiError> {
    let Operation::Update { new, old } = write.operation else {
        return Err(write.forbidden(&format!(
            "unexpected operation \"{}\"",
            write.operation.name()
        )));
    };
    let (old, new) = (
        claim_without_node_fields(old),
        claim_without_node_fields(new),
    );
    let mut changed = Vec::new();
    differences("", &old, &new, &mut changed);
    if !changed.is_empty() {
        return Err(write.forbidden(&format!(
            "node \"{node}\" is not allowed to update fields other than status.quantity and status.conditions: {}",
            changed.join("; ")
        )));
    }
    Ok(())
}

/// Upstream's `admitNode`: its own Node, without a config source, taints it did not have, or
/// labels kubelets may not set.
fn admit_node(node: &str, write: &Write<'_>) -> Result<(), ApiError> {
    if write.name != node {
        return Err(write.forbidden(&format!(
            "node \"{node}\" is not allowed to modify node \"{}\"",
            write.name
        )));
    }
    match write.operation {
        Operation::Create(object) => {
            if present(&object["spec"]["configSource"]).is_some() {
                return Err(write.forbidden(&format!(
                    "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                )));
            }
            let forbidden = forbidden_labels(modified_labels(&labels(object), &BTreeMap::new()));
            if !forbidden.is_empty() {
                return Err(write.forbidden(&format!(
                    "node \"{node}\" is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                )));
            }
        }
        Operation::Update { new, old } => {
            let source = present(&new["spec"]["configSource"]);
            if source.is_some() && source != present(&old["spec"]["configSource"]) {
                return Err(write.forbidden(&format!(
                    "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                )));
            }
            if present(&new["spec"]["taints"]) != present(&old["spec"]["taints"]) {
                return Err(
                    write.forbidden(&format!("node \"{node}\" is not allowed to modify taints"))
                );
            }
            let forbidden = forbidden_labels(modified_labels(&labels(new), &labels(old)));
            if !forbidden.is_empty() {
                return Err(write.forbidden(&format!(
                    "is not allowed to modify labels: {}",
                    forbidden.join(", ")
                )));
            }
        }
        Operation::Delete => {}
    }
    Ok(())
}

/// Upstream's `admitLease`: its own Lease in `kube-node-lease`.
fn admit_lease(node: &str, write: &Write<'_>) -> Result<(), ApiError> {
    if write.namespace != NODE_LEASE_NAMESPACE {
        return Err(write.forbidden(&format!(
            "can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"
        )));
    }
    if write.name != node {
        return Err(
            write.forbidden("can only access node lease with the same name as the requesting node")
        );
    }
    Ok(())
}

impl NodeRestriction {
    /// The write `attrs` describe, doing `operation`.
    fn write<'a>(attrs: &'a Attributes<'a>, operation: Operation<'a>) -> Write<'a> {
        Write {
            group: attrs.resource.group,
            resource: attrs.resource.plural,
            subresource: attrs.subresource,
            namespace: attrs.namespace,
            name: attrs.name,
            operation,
        }
    }
}

impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    /// Creates (of objects, and of the bodies of subresources) and deletes.
    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            let Some(user) = attrs.user else {
                return Ok(());
            };
            let operation = match (attrs.operation, object) {
                (AdmissionOperation::Create, Some(object)) => Operation::Create(object),
                (AdmissionOperation::Delete, _) => Operation::Delete,
                _ => return Ok(()),
            };
            self.admit_write(user, &Self::write(attrs, operation)).await
        })
    }

    /// Updates, once the new object is known.
    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            let (Some(user), Some(old)) = (attrs.user, old) else {
                return Ok(());
            };
            let operation = Operation::Update { new: object, old };
            self.admit_write(user, &Self::write(attrs, operation)).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A claim-free pod a node may create: a mirror pod of node `node` (uid `uid`).
    fn mirror_pod(node: &str, uid: &str) -> Value {
        json!({"metadata": {"name": "static-web", "namespace": "default",
                "annotations": {MIRROR_POD_ANNOTATION: "hash"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
                                     "controller": true}]},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
    }

    fn node_user(name: &str) -> User {
        User {
            name: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..User::default()
        }
    }

    fn write<'a>(
        resource: &'a str,
        sub: &'a str,
        ns: &'a str,
        name: &'a str,
        operation: Operation<'a>,
    ) -> Write<'a> {
        let (group, resource) = match resource.split_once('.') {
            Some((resource, group)) => (group, resource),
            None => ("", resource),
        };
        Write {
            group,
            resource,
            subresource: sub,
            namespace: ns,
            name,
            operation,
        }
    }

    /// Admits `write` for node n1 without lookups; `Ok` or the refusal's message.
    fn admit(write: &Write<'_>) -> Result<(), String> {
        let plugin = NodeRestriction::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(plugin.admit_write(&node_user("n1"), write))
            .map_err(|e| e.status().to_json()["message"].as_str().unwrap().to_owned())
    }

    #[test]
    fn other_users_and_events_are_left_alone() {
        let plugin = NodeRestriction::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let jane = User {
            name: "jane".into(),
            groups: vec!["system:nodes".into()],
            ..User::default()
        };
        let pod = json!({"metadata": {"name": "p"}, "spec": {}});
        let create = write("pods", "", "default", "p", Operation::Create(&pod));
        assert!(runtime.block_on(plugin.admit_write(&jane, &create)).is_ok());
        let event = json!({"metadata": {"name": "e"}});
        assert!(
            admit(&write(
                "events",
                "",
                "default",
                "e",
                Operation::Create(&event)
            ))
            .is_ok()
        );
        let unnamed = User {
            name: "system:node:".into(),
            groups: vec!["system:nodes".into()],
            ..User::default()
        };
        let error = runtime
            .block_on(plugin.admit_write(&unnamed, &create))
            .unwrap_err();
        assert_eq!(
            error.status().to_json()["message"],
            "pods \"p\" is forbidden: could not determine node from user \"system:node:\""
        );
    }

    #[test]
    fn nodes_create_only_mirror_pods_of_their_own() {
        let plain = json!({"metadata": {"name": "web"}, "spec": {"nodeName": "n1"}});
        assert_eq!(
            admit(&write("pods", "", "default", "web", Operation::Create(&plain))),
            Err("pods \"web\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods".into())
        );
        let check = |change: &dyn Fn(&mut Value), message: &str| {
            let mut pod = mirror_pod("n1", "u1");
            change(&mut pod);
            let got = admit(&write(
                "pods",
                "",
                "default",
                "static-web",
                Operation::Create(&pod),
            ));
            assert_eq!(
                got,
                Err(format!("pods \"static-web\" is forbidden: {message}"))
            );
        };
        check(
            &|p| p["spec"]["nodeName"] = json!("n2"),
            "node \"n1\" can only create pods with spec.nodeName set to itself",
        );
        check(
            &|p| p["metadata"]["ownerReferences"] = json!([]),
            "node \"n1\" can only create pods with an owner reference set to itself",
        );
        check(
            &|p| p["metadata"]["ownerReferences"][0]["name"] = json!("n2"),
            "node \"n1\" can only create pods with an owner reference set to itself",
        );
        check(
            &|p| p["metadata"]["ownerReferences"][0]["controller"] = json!(false),
            "node \"n1\" can only create pods with a controller owner reference set to itself",
        );
        check(
            &|p| p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true),
            "node \"n1\" must not set blockOwnerDeletion on an owner reference",
        );
        // Without a node to compare the owner's uid with (no lookups here): the lister's 404.
        let pod = mirror_pod("n1", "u1");
        assert_eq!(
            admit(&write(
                "pods",
                "",
                "default",
                "static-web",
                Operation::Create(&pod)
            )),
            Err("node \"n1\" not found".into())
        );
    }

    #[test]
    fn pod_status_and_other_pod_writes() {
        let old =
            json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"nodeName": "n1"}});
        let mut new = old.clone();
        new["status"] = json!({"phase": "Running"});
        let status = |new: &Value, old: &Value| {
            admit(&write(
                "pods",
                "status",
                "default",
                "p",
                Operation::Update { new, old },
            ))
        };
        assert_eq!(status(&new, &old), Ok(()));
        let mut relabelled = new.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert_eq!(
            status(&relabelled, &old),
            Err(
                "pods \"p\" is forbidden: node \"n1\" cannot update labels through pod status"
                    .into()
            )
        );
        let mut elsewhere = old.clone();
        elsewhere["spec"]["nodeName"] = json!("n2");
        assert_eq!(
            status(&elsewhere, &elsewhere),
            Err("pods \"p\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself".into())
        );
        let mut claimed = new.clone();
        claimed["status"]["resourceClaimStatuses"] =
            json!([{"name": "gpu", "resourceClaimName": "x"}]);
        assert_eq!(
            status(&claimed, &old),
            Err("pods \"p\" is forbidden: node \"n1\" cannot update resource claim statues".into())
        );
        assert_eq!(
            admit(&write("pods", "", "default", "p", Operation::Update { new: &new, old: &old })),
            Err("pods \"p\" is forbidden: unexpected operation \"UPDATE\", node \"n1\" can only create and delete mirror pods".into())
        );
        let binding = json!({});
        assert_eq!(
            admit(&write("pods", "binding", "default", "p", Operation::Create(&binding))),
            Err("pods \"p\" is forbidden: unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed".into())
        );
        // Deletes and evictions look the pod up; without lookups it is the lister's 404.
        assert_eq!(
            admit(&write("pods", "", "default", "p", Operation::Delete)),
            Err("pod \"p\" not found".into())
        );
    }

    #[test]
    fn a_node_writes_only_its_own_node_and_not_its_taints_or_restricted_labels() {
        let node = json!({"metadata": {"name": "n1", "labels": {
            "kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "zone": "a",
            "node.kubernetes.io/exclude-from-external-load-balancers": "true"}},
            "spec": {}});
        assert_eq!(
            admit(&write("nodes", "", "", "n1", Operation::Create(&node))),
            Ok(())
        );
        assert_eq!(
            admit(&write("nodes", "", "", "n2", Operation::Delete)),
            Err(
                "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
                    .into()
            )
        );
        let mut labelled = node.clone();
        labelled["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
        labelled["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("x");
        labelled["metadata"]["labels"]["example.k8s.io/x"] = json!("y");
        assert_eq!(
            admit(&write("nodes", "", "", "n1", Operation::Create(&labelled))),
            Err("nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: example.k8s.io/x, node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane".into())
        );
        let update = |new: &Value| {
            admit(&write(
                "nodes",
                "status",
                "",
                "n1",
                Operation::Update { new, old: &node },
            ))
        };
        let mut status = node.clone();
        status["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        status["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("z1");
        assert_eq!(update(&status), Ok(()));
        assert_eq!(
            update(&labelled),
            Err("nodes \"n1\" is forbidden: is not allowed to modify labels: example.k8s.io/x, node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane".into())
        );
        let mut tainted = node.clone();
        tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
        assert_eq!(
            update(&tainted),
            Err("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints".into())
        );
        let mut empty = node.clone();
        empty["spec"]["taints"] = json!([]);
        assert_eq!(
            update(&empty),
            Ok(()),
            "no taints and an empty list are alike"
        );
        let mut sourced = node.clone();
        sourced["spec"]["configSource"] = json!({"configMap": {"name": "c"}});
        assert_eq!(
            update(&sourced),
            Err("nodes \"n1\" is forbidden: node \"n1\" is not allowed to update configSource to a new non-nil configSource".into())
        );
        assert_eq!(
            admit(&write("nodes", "", "", "n1", Operation::Create(&sourced))),
            Err("nodes \"n1\" is forbidden: node \"n1\" is not allowed to create pods with a non-nil configSource".into())
        );
    }

    #[test]
    fn leases_claims_and_tokens() {
        let lease = json!({"metadata": {"name": "n1"}});
        let leases = "leases.coordination.k8s.io";
        assert_eq!(
            admit(&write(
                leases,
                "",
                NODE_LEASE_NAMESPACE,
                "n1",
                Operation::Create(&lease)
            )),
            Ok(())
        );
        assert_eq!(
            admit(&write(leases, "", NODE_LEASE_NAMESPACE, "n2", Operation::Delete)),
            Err("leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node".into())
        );
        assert_eq!(
            admit(&write(leases, "", "default", "n1", Operation::Delete)),
            Err("leases.coordination.k8s.io \"n1\" is forbidden: can only access leases in the \"kube-node-lease\" system namespace".into())
        );
        let claim = json!({"metadata": {"name": "c", "resourceVersion": "5"},
            "spec": {"volumeName": "v"}, "status": {"phase": "Bound"}});
        let mut grown = claim.clone();
        grown["metadata"]["resourceVersion"] = json!("6");
        grown["status"]["capacity"] = json!({"storage": "2Gi"});
        let claims = |new: &Value, sub| {
            admit(&write(
                "persistentvolumeclaims",
                sub,
                "default",
                "c",
                Operation::Update { new, old: &claim },
            ))
        };
        assert_eq!(claims(&grown, "status"), Ok(()));
        let mut relabelled = grown.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(
            claims(&relabelled, "status"),
            Err("persistentvolumeclaims \"c\" is forbidden: node \"n1\" is not allowed to update fields other than status.quantity and status.conditions: .metadata.labels: null -> {\"a\":\"b\"}".into())
        );
        assert_eq!(
            claims(&grown, ""),
            Err("persistentvolumeclaims \"c\" is forbidden: may only update PVC status".into())
        );
        let token = |spec: Value| {
            let request = json!({ "spec": spec });
            admit(&write(
                "serviceaccounts",
                "token",
                "default",
                "sa",
                Operation::Create(&request),
            ))
        };
        assert_eq!(
            token(json!({"audiences": ["x"]})),
            Err(
                "serviceaccounts \"sa\" is forbidden: node requested token not bound to a pod"
                    .into()
            )
        );
        assert_eq!(
            token(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "s"}})),
            Err(
                "serviceaccounts \"sa\" is forbidden: node requested token not bound to a pod"
                    .into()
            )
        );
        assert_eq!(
            token(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}})),
            Err("serviceaccounts \"sa\" is forbidden: node requested token with a pod binding without a uid".into())
        );
        let plain = json!({"metadata": {"name": "sa"}});
        assert_eq!(
            admit(&write(
                "serviceaccounts",
                "",
                "default",
                "sa",
                Operation::Create(&plain)
            )),
            Ok(())
        );
    }
}
