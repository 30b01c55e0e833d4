//! The Node authorizer and NodeRestriction through the whole request chain: a kubelet's user
//! (`system:node:n1` in `system:nodes`, as its client certificate names it) reaches what the
//! pods bound to its node use, its own Node and Lease, and nothing else; other users are judged
//! by RBAC alone; the bootstrap binding of the `system:node` role has no subjects, and an old
//! one that bound the node group is emptied at start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::tests::started;
use super::*;
use crate::registry::WriteOptions;

/// A started API server's request chain (shared with the escalation tests).
pub(super) struct Cluster {
    _dir: tempfile::TempDir,
    store: Store,
    pub(super) api: Arc<Api>,
    pub(super) control: Control,
}

const NS: &str = "/api/v1/namespaces/default";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";

fn node_user(node: &str) -> User {
    User {
        name: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        ..User::default()
    }
}

pub(super) fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        ..User::default()
    }
}

impl Cluster {
    pub(super) async fn new() -> Cluster {
        let (dir, store, api, control) = started().await;
        Cluster {
            _dir: dir,
            store,
            api,
            control,
        }
    }

    /// Sends a request as `user` (authenticated as by a client certificate).
    pub(super) async fn send(
        &self,
        user: &User,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let metrics = Metrics::new();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, content_type)
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let app = router(
            self.store.clone(),
            metrics.clone(),
            self.api.clone(),
            "127.0.0.1:6443".into(),
        );
        let response = handle(
            request,
            Some(user),
            &Authenticator::default(),
            app,
            &metrics,
            &self.control,
        )
        .await;
        let code = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap_or_default())
    }

    async fn get(&self, user: &User, path: &str) -> (StatusCode, Value) {
        self.send(user, "GET", path, JSON, None).await
    }

    /// Creates an object as the server itself would (no admission, no authorization).
    pub(super) async fn create(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Value {
        self.api
            .registry(group, "v1", plural)
            .unwrap()
            .create(namespace, object, &WriteOptions::default())
            .await
            .unwrap()
            .object
    }
}

/// Asserts a 403 with exactly `message`.
fn forbidden(answer: (StatusCode, Value), message: &str) {
    let (code, status) = answer;
    assert_eq!(code, StatusCode::FORBIDDEN, "{status}");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    assert_eq!(status["message"], message, "{status}");
}

fn ok(answer: (StatusCode, Value), code: StatusCode) -> Value {
    assert_eq!(answer.0, code, "{}", answer.1);
    answer.1
}

/// Two nodes, each with a pod; n1's pod uses a secret, a config map and a claim bound to a
/// volume; n2's pod uses other ones.
async fn two_nodes() -> Cluster {
    let cluster = Cluster::new().await;
    let c = &cluster;
    c.create(
        "",
        "serviceaccounts",
        Some("default"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
    )
    .await;
    for name in ["used", "other"] {
        c.create(
            "",
            "secrets",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {}}),
        )
        .await;
        c.create(
            "",
            "configmaps",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        )
        .await;
    }
    for (name, claim) in [("pv-used", "data"), ("pv-other", "elsewhere")] {
        c.create(
            "",
            "persistentvolumes",
            None,
            json!({"apiVersion": "v1",
            "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/tmp/pv"},
                     "claimRef": {"namespace": "default", "name": claim}}}),
        )
        .await;
    }
    for node in ["n1", "n2"] {
        c.create(
            "",
            "nodes",
            None,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
                "labels": {"kubernetes.io/hostname": node}}}),
        )
        .await;
    }
    let pod = |name: &str, node: &str, uses: &str, claim: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "serviceAccountName": "default",
                "containers": [{"name": "c", "image": "busybox",
                    "env": [{"name": "X", "valueFrom":
                        {"configMapKeyRef": {"name": uses, "key": "x"}}}]}],
                "volumes": [{"name": "s", "secret": {"secretName": uses}},
                            {"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}})
    };
    c.create(
        "",
        "pods",
        Some("default"),
        pod("web", "n1", "used", "data"),
    )
    .await;
    c.create(
        "",
        "pods",
        Some("default"),
        pod("other", "n2", "other", "elsewhere"),
    )
    .await;
    cluster
}

#[tokio::test]
async fn a_node_reads_only_what_its_pods_use() {
    let c = two_nodes().await;
    let n1 = node_user("n1");
    ok(
        c.get(&n1, &format!("{NS}/secrets/used")).await,
        StatusCode::OK,
    );
    ok(
        c.get(&n1, &format!("{NS}/configmaps/used")).await,
        StatusCode::OK,
    );
    ok(
        c.get(&n1, "/api/v1/persistentvolumes/pv-used").await,
        StatusCode::OK,
    );
    // A claim a pod names but nobody made: related, so the answer is the truth (404).
    let (code, _) = c
        .get(&n1, &format!("{NS}/persistentvolumeclaims/data"))
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    forbidden(
        c.get(&n1, &format!("{NS}/secrets/other")).await,
        "secrets \"other\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" \
         in API group \"\" in the namespace \"default\": no relationship found between node 'n1' \
         and this object",
    );
    forbidden(
        c.get(&n1, &format!("{NS}/configmaps/other")).await,
        "configmaps \"other\" is forbidden: User \"system:node:n1\" cannot get resource \
         \"configmaps\" in API group \"\" in the namespace \"default\": no relationship found \
         between node 'n1' and this object",
    );
    forbidden(
        c.get(&n1, "/api/v1/persistentvolumes/pv-other").await,
        "persistentvolumes \"pv-other\" is forbidden: User \"system:node:n1\" cannot get \
         resource \"persistentvolumes\" in API group \"\" at the cluster scope: no relationship \
         found between node 'n1' and this object",
    );
    // One object may be listed and watched by name, never the whole collection.
    let list = ok(
        c.get(
            &n1,
            &format!("{NS}/secrets?fieldSelector=metadata.name%3Dused"),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    forbidden(
        c.get(&n1, &format!("{NS}/secrets")).await,
        "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API \
         group \"\" in the namespace \"default\": No Object name found",
    );
    // Pods: its own, and the ones bound to it by field selector.
    ok(c.get(&n1, &format!("{NS}/pods/web")).await, StatusCode::OK);
    forbidden(
        c.get(&n1, &format!("{NS}/pods/other")).await,
        "pods \"other\" is forbidden: User \"system:node:n1\" cannot get resource \"pods\" in \
         API group \"\" in the namespace \"default\": no relationship found between node 'n1' and \
         this object",
    );
    let mine = ok(
        c.get(&n1, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
            .await,
        StatusCode::OK,
    );
    assert_eq!(mine["items"][0]["metadata"]["name"], "web");
    forbidden(
        c.get(&n1, "/api/v1/pods").await,
        "pods is forbidden: User \"system:node:n1\" cannot list resource \"pods\" in API group \
         \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector",
    );
    // Nodes: its own.
    ok(c.get(&n1, "/api/v1/nodes/n1").await, StatusCode::OK);
    forbidden(
        c.get(&n1, "/api/v1/nodes/n2").await,
        "nodes \"n2\" is forbidden: User \"system:node:n1\" cannot get resource \"nodes\" in API \
         group \"\" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object",
    );
    // What upstream's NodeRules grant every node.
    ok(c.get(&n1, &format!("{NS}/services")).await, StatusCode::OK);
    forbidden(
        c.get(&n1, "/apis/apps/v1/namespaces/default/deployments")
            .await,
        "deployments.apps is forbidden: User \"system:node:n1\" cannot list resource \
         \"deployments\" in API group \"apps\" in the namespace \"default\"",
    );
    // A pod bound a moment ago counts at once (the lookup is confirmed by a consistent read).
    c.create(
        "",
        "pods",
        Some("default"),
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "late"}, "spec": {"nodeName": "n1", "serviceAccountName": "default",
        "containers": [{"name": "c", "image": "busybox",
            "envFrom": [{"secretRef": {"name": "other"}}]}]}}),
    )
    .await;
    ok(
        c.get(&n1, &format!("{NS}/secrets/other")).await,
        StatusCode::OK,
    );
}

#[tokio::test]
async fn a_node_writes_only_its_own_node_lease_and_pods() {
    let c = two_nodes().await;
    let n1 = node_user("n1");
    let patch = async |path: &str, body: Value| c.send(&n1, "PATCH", path, MERGE, Some(body)).await;
    // Nodes.
    ok(
        patch(
            "/api/v1/nodes/n1",
            json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "z"}}}),
        )
        .await,
        StatusCode::OK,
    );
    ok(
        patch(
            "/api/v1/nodes/n1/status",
            json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}),
        )
        .await,
        StatusCode::OK,
    );
    forbidden(
        patch(
            "/api/v1/nodes/n2",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"",
    );
    forbidden(
        patch(
            "/api/v1/nodes/n2/status",
            json!({"status": {"conditions": []}}),
        )
        .await,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"",
    );
    forbidden(
        patch(
            "/api/v1/nodes/n1",
            json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
        )
        .await,
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane",
    );
    forbidden(
        patch(
            "/api/v1/nodes/n1",
            json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
        )
        .await,
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints",
    );
    forbidden(
        c.send(&n1, "DELETE", "/api/v1/nodes/n1", JSON, None).await,
        "nodes \"n1\" is forbidden: User \"system:node:n1\" cannot delete resource \"nodes\" in \
         API group \"\" at the cluster scope",
    );
    // Pods: no plain pod, no other node's pod status, no other node's pod deleted.
    forbidden(
        c.send(
            &n1,
            "POST",
            &format!("{NS}/pods"),
            JSON,
            Some(json!({"apiVersion": "v1",
            "kind": "Pod", "metadata": {"name": "sneaky"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}})),
        )
        .await,
        "pods \"sneaky\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" \
         annotation, node \"n1\" can only create mirror pods",
    );
    // A mirror pod of its own (a static pod's copy) is what a node may create.
    let n1_uid = c
        .api
        .registry("", "v1", "nodes")
        .unwrap()
        .get(None, "n1")
        .await
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let mirror = |uid: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static-web-n1",
            "annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid,
                                 "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}})
    };
    forbidden(
        c.send(
            &n1,
            "POST",
            &format!("{NS}/pods"),
            JSON,
            Some(mirror("stale")),
        )
        .await,
        &format!(
            "pods \"static-web-n1\" is forbidden: node n1 UID mismatch: expected stale got {n1_uid}"
        ),
    );
    ok(
        c.send(
            &n1,
            "POST",
            &format!("{NS}/pods"),
            JSON,
            Some(mirror(&n1_uid)),
        )
        .await,
        StatusCode::CREATED,
    );
    ok(
        c.send(
            &n1,
            "DELETE",
            &format!("{NS}/pods/static-web-n1"),
            JSON,
            None,
        )
        .await,
        StatusCode::OK,
    );
    let running = json!({"status": {"phase": "Running"}});
    ok(
        patch(&format!("{NS}/pods/web/status"), running.clone()).await,
        StatusCode::OK,
    );
    forbidden(
        patch(&format!("{NS}/pods/other/status"), running).await,
        "pods \"other\" is forbidden: node \"n1\" can only update pod status for pods with \
         spec.nodeName set to itself",
    );
    forbidden(
        patch(
            &format!("{NS}/pods/web/status"),
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await,
        "pods \"web\" is forbidden: node \"n1\" cannot update labels through pod status",
    );
    forbidden(
        c.send(&n1, "DELETE", &format!("{NS}/pods/other"), JSON, None)
            .await,
        "pods \"other\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to \
         itself",
    );
    forbidden(
        c.send(
            &n1,
            "POST",
            &format!("{NS}/pods/other/eviction"),
            JSON,
            Some(json!({
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}})),
        )
        .await,
        "pods \"other\" is forbidden: node n1 can only evict pods with spec.nodeName set to itself",
    );
    // Tokens: for its pods' service account, bound to one of its pods.
    let (_, web) = c.get(&n1, &format!("{NS}/pods/web")).await;
    let token = async |pod: &str, uid: &str| {
        c.send(
            &n1,
            "POST",
            &format!("{NS}/serviceaccounts/default/token"),
            JSON,
            Some(json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"boundObjectRef":
                {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}}})),
        )
        .await
    };
    let issued = ok(
        token("web", web["metadata"]["uid"].as_str().unwrap()).await,
        StatusCode::CREATED,
    );
    assert!(
        issued["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    let other_uid = c
        .api
        .registry("", "v1", "pods")
        .unwrap()
        .get(Some("default"), "other")
        .await
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    forbidden(
        token("other", &other_uid).await,
        "serviceaccounts \"default\" is forbidden: node requested token bound to a pod scheduled \
         on a different node",
    );
    forbidden(
        token("web", "not-its-uid").await,
        "serviceaccounts \"default\" is forbidden: the UID in the bound object reference \
         (not-its-uid) does not match the UID in record. The object might have been deleted and \
         then recreated",
    );
    // Leases: its own in kube-node-lease.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}})
    };
    ok(
        c.send(&n1, "POST", leases, JSON, Some(lease("n1"))).await,
        StatusCode::CREATED,
    );
    ok(
        patch(
            &format!("{leases}/n1"),
            json!({"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}}),
        )
        .await,
        StatusCode::OK,
    );
    forbidden(
        c.send(&n1, "POST", leases, JSON, Some(lease("n2"))).await,
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same \
         name as the requesting node",
    );
    c.create(
        "coordination.k8s.io",
        "leases",
        Some("kube-node-lease"),
        lease("n2"),
    )
    .await;
    forbidden(
        patch(
            &format!("{leases}/n2"),
            json!({"spec": {"holderIdentity": "n1"}}),
        )
        .await,
        "leases.coordination.k8s.io \"n2\" is forbidden: User \"system:node:n1\" cannot patch \
         resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \
         \"kube-node-lease\": can only access node lease with the same name as the requesting node",
    );
    // Events are left alone.
    ok(
        c.send(
            &n1,
            "POST",
            &format!("{NS}/events"),
            JSON,
            Some(json!({"apiVersion": "v1",
            "kind": "Event", "metadata": {"name": "web.1"}, "reason": "Started",
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}})),
        )
        .await,
        StatusCode::CREATED,
    );
}

#[tokio::test]
async fn users_that_are_not_nodes_are_judged_by_rbac_alone() {
    let c = two_nodes().await;
    // A reader of secrets (RBAC) reads any of them, node or not.
    let rbac = "rbac.authorization.k8s.io";
    c.create(
        rbac,
        "clusterroles",
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole", "metadata": {"name": "secret-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    )
    .await;
    c.create(rbac, "clusterrolebindings", None, json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding", "metadata": {"name": "secret-readers"},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "secret-reader"},
        "subjects": [{"kind": "User", "name": "jane"}, {"kind": "User", "name": "system:node:n2"}]}))
        .await;
    c.control
        .authorizer
        .refresh(c.api.registries())
        .await
        .unwrap();
    let jane = user("jane", &["system:authenticated"]);
    ok(
        c.get(&jane, &format!("{NS}/secrets/other")).await,
        StatusCode::OK,
    );
    forbidden(
        c.get(&jane, &format!("{NS}/configmaps/other")).await,
        "configmaps \"other\" is forbidden: User \"jane\" cannot get resource \"configmaps\" in \
         API group \"\" in the namespace \"default\"",
    );
    // The union: what RBAC grants a node is granted even where the Node authorizer had no
    // opinion.
    ok(
        c.get(&node_user("n2"), &format!("{NS}/secrets/used")).await,
        StatusCode::OK,
    );
    // A node's name without the node group is no node: nothing but RBAC, no node reason.
    forbidden(
        c.get(
            &user("system:node:n1", &["system:authenticated"]),
            &format!("{NS}/secrets/used"),
        )
        .await,
        "secrets \"used\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in \
         API group \"\" in the namespace \"default\"",
    );
    // NodeRestriction leaves other users alone.
    let admin = user("system:admin", &["system:masters"]);
    ok(
        c.send(
            &admin,
            "PATCH",
            "/api/v1/nodes/n2",
            MERGE,
            Some(json!({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}})),
        )
        .await,
        StatusCode::OK,
    );
    ok(
        c.send(
            &admin,
            "POST",
            &format!("{NS}/pods"),
            JSON,
            Some(json!({"apiVersion": "v1",
            "kind": "Pod", "metadata": {"name": "plain"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
        )
        .await,
        StatusCode::CREATED,
    );
    // An access review shows the Node authorizer's reason.
    let (code, review) = c
        .send(&node_user("n1"), "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            JSON, Some(json!({"apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes":
                    {"verb": "get", "resource": "secrets", "namespace": "default", "name": "other"}}})))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{review}");
    assert_eq!(review["status"]["allowed"], false);
    assert_eq!(
        review["status"]["reason"],
        "no relationship found between node 'n1' and this object"
    );
}

#[tokio::test]
async fn the_node_group_is_no_longer_bound_to_the_node_role() {
    let c = Cluster::new().await;
    let bindings = c
        .api
        .registry("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        .unwrap()
        .clone();
    let fresh = bindings.get(None, "system:node").await.unwrap();
    assert!(fresh.get("subjects").is_none(), "{fresh}");
    assert_eq!(fresh["roleRef"]["name"], "system:node");
    // A data directory from before: the bootstrap's binding of the node group is emptied at
    // start, an administrator's own binding is not.
    let mut old = fresh.clone();
    old["subjects"] = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                              "name": "system:nodes"}]);
    bindings
        .update(
            None,
            "system:node",
            old.clone(),
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let emptied = bindings.get(None, "system:node").await.unwrap();
    assert!(emptied.get("subjects").is_none(), "{emptied}");
    let mut kept = emptied.clone();
    kept["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] = json!("false");
    kept["subjects"] = old["subjects"].clone();
    bindings
        .update(None, "system:node", kept, None, &WriteOptions::default())
        .await
        .unwrap();
    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let still = bindings.get(None, "system:node").await.unwrap();
    assert_eq!(still["subjects"][0]["name"], "system:nodes");
}

/// The controller manager's cluster-admin binding (`capstan:controller-manager`) is made only
/// while its controllers share its credential, and goes when they have their own accounts.
#[tokio::test]
async fn the_admin_binding_goes_when_controllers_have_their_own_accounts() {
    // The cluster was bootstrapped with shared controller credentials.
    let c = Cluster::new().await;
    let bindings = c
        .api
        .registry("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        .unwrap()
        .clone();
    let admin = bindings
        .get(None, "capstan:controller-manager")
        .await
        .unwrap();
    assert_eq!(admin["roleRef"]["name"], "cluster-admin");
    crate::authz::ensure_bootstrap(c.api.registries(), false)
        .await
        .unwrap();
    let gone = bindings.get(None, "capstan:controller-manager").await;
    assert_eq!(gone.unwrap_err().status().code(), 404);
    let own = bindings
        .get(None, "system:kube-controller-manager")
        .await
        .unwrap();
    assert_eq!(own["roleRef"]["name"], "system:kube-controller-manager");
    // Turned off again, the binding is back; one an administrator took over stays.
    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let mut kept = bindings
        .get(None, "capstan:controller-manager")
        .await
        .unwrap();
    kept["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] = json!("false");
    bindings
        .update(
            None,
            "capstan:controller-manager",
            kept,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    crate::authz::ensure_bootstrap(c.api.registries(), false)
        .await
        .unwrap();
    assert!(
        bindings
            .get(None, "capstan:controller-manager")
            .await
            .is_ok()
    );
}

/// A cluster made by an older version: its bootstrap roles and bindings get what they lack at
/// the next start (upstream's reconciliation), except those an administrator protected.
#[tokio::test]
async fn bootstrap_objects_regain_what_an_older_version_lacked() {
    let c = Cluster::new().await;
    let group = "rbac.authorization.k8s.io";
    let roles = c.api.registry(group, "v1", "clusterroles").unwrap().clone();
    let bindings = c
        .api
        .registry(group, "v1", "clusterrolebindings")
        .unwrap()
        .clone();
    let fresh = roles.get(None, "system:kube-scheduler").await.unwrap();
    let fresh_rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_json::from_value(fresh["rules"].clone()).unwrap();
    let mut old = fresh.clone();
    let dropped = old["rules"].as_array_mut().unwrap().pop().unwrap();
    old["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io/bootstrapping");
    roles
        .update(
            None,
            "system:kube-scheduler",
            old,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let mut unbound = bindings.get(None, "system:kube-scheduler").await.unwrap();
    let subjects = unbound["subjects"].clone();
    unbound["subjects"] = json!([{"apiGroup": group, "kind": "User", "name": "someone"}]);
    bindings
        .update(
            None,
            "system:kube-scheduler",
            unbound,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();

    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let role = roles.get(None, "system:kube-scheduler").await.unwrap();
    let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_json::from_value(role["rules"].clone()).unwrap();
    assert!(
        capstan_api::rbac::uncovered(&rules, &fresh_rules).is_empty(),
        "the dropped rule {dropped} is granted again: {role}"
    );
    assert_eq!(
        role["metadata"]["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults",
        "{role}"
    );
    let binding = bindings.get(None, "system:kube-scheduler").await.unwrap();
    let names: Vec<&str> = binding["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["someone", subjects[0]["name"].as_str().unwrap()],
        "the expected subject is added, the administrator's kept: {binding}"
    );
    // Nothing more to do the next time: the objects are not written again.
    let version = role["metadata"]["resourceVersion"].clone();
    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let again = roles.get(None, "system:kube-scheduler").await.unwrap();
    assert_eq!(again["metadata"]["resourceVersion"], version);

    // Protected: left as the administrator made it.
    let mut protected = again.clone();
    protected["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] =
        json!("false");
    protected["rules"] = json!([]);
    roles
        .update(
            None,
            "system:kube-scheduler",
            protected,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    crate::authz::ensure_bootstrap(c.api.registries(), true)
        .await
        .unwrap();
    let kept = roles.get(None, "system:kube-scheduler").await.unwrap();
    assert!(kept["rules"].as_array().is_none_or(Vec::is_empty), "{kept}");
}
