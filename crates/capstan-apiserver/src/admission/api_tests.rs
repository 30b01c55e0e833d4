//! LimitRanger and ResourceQuota admission, exercised in process through [`Api::serve`]: what
//! is defaulted, refused (with upstream's messages) and recorded in quotas, on every path that
//! creates an object.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::tests::Harness;

const NS: &str = "/api/v1/namespaces/default";

fn pod(name: &str, cpu: Option<&str>) -> Value {
    let resources = match cpu {
        Some(cpu) => json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}),
        None => json!({}),
    };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]}})
}

/// Creates a quota and writes its status as the quota controller would (none runs here).
async fn quota(h: &Harness, name: &str, hard: Value, used: Value) {
    let (code, created) = h
        .post(
            &format!("{NS}/resourcequotas"),
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
                "spec": {"hard": hard}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let mut with_status = created;
    with_status["status"] = json!({"hard": hard, "used": used});
    let (code, written) = h
        .put(&format!("{NS}/resourcequotas/{name}/status"), with_status)
        .await;
    assert_eq!(code, 200, "{written}");
}

async fn used(h: &Harness, name: &str) -> Value {
    let (code, quota) = h.get(&format!("{NS}/resourcequotas/{name}")).await;
    assert_eq!(code, 200, "{quota}");
    quota["status"]["used"].clone()
}

fn assert_forbidden(code: u16, status: &Value, message: &str) {
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    assert_eq!(status["message"], message, "{status}");
}

#[tokio::test]
async fn creates_are_charged_to_quota_and_refused_past_it() {
    let h = Harness::new().await;
    quota(
        &h,
        "my-quota",
        json!({"pods": "2", "requests.cpu": "1"}),
        json!({"pods": "0", "requests.cpu": "0"}),
    )
    .await;
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p1", Some("300m"))).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        used(&h, "my-quota").await,
        json!({"pods": "1", "requests.cpu": "300m"})
    );
    // A dry run is checked but not charged.
    let (code, body) = h
        .post(&format!("{NS}/pods?dryRun=All"), pod("dry", Some("300m")))
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        used(&h, "my-quota").await,
        json!({"pods": "1", "requests.cpu": "300m"})
    );
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p2", Some("800m"))).await;
    assert_forbidden(
        code,
        &body,
        "pods \"p2\" is forbidden: exceeded quota: my-quota, requested: requests.cpu=800m, used: requests.cpu=300m, limited: requests.cpu=1",
    );
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p2", Some("700m"))).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p3", Some("0"))).await;
    assert_forbidden(
        code,
        &body,
        "pods \"p3\" is forbidden: exceeded quota: my-quota, requested: pods=1, used: pods=2, limited: pods=2",
    );
    // A cpu quota makes every container state its cpu request.
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p4", None)).await;
    assert_forbidden(
        code,
        &body,
        "pods \"p4\" is forbidden: failed quota: my-quota: must specify requests.cpu for: c",
    );
    assert_eq!(
        used(&h, "my-quota").await,
        json!({"pods": "2", "requests.cpu": "1"})
    );
}

#[tokio::test]
async fn a_quota_without_usage_refuses_until_it_has_some() {
    let h = Harness::new().await;
    quota(
        &h,
        "q",
        json!({"count/configmaps": "2", "pods": "1"}),
        json!({"pods": "0"}),
    )
    .await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
    let (code, body) = h.post(&format!("{NS}/configmaps"), cm).await;
    assert_forbidden(
        code,
        &body,
        "configmaps \"a\" is forbidden: status unknown for quota: q, resources: count/configmaps",
    );
    // Objects the quota does not track pass.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    let (code, body) = h.post(&format!("{NS}/secrets"), secret).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn every_path_that_creates_is_charged() {
    let h = Harness::new().await;
    quota(
        &h,
        "counts",
        json!({"count/configmaps": "3", "services": "1"}),
        json!({"count/configmaps": "0", "services": "0"}),
    )
    .await;
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    // POST, with a generated name.
    let mut generated = cm("");
    generated["metadata"] = json!({"generateName": "gen-"});
    let (code, body) = h.post(&format!("{NS}/configmaps"), generated).await;
    assert_eq!(code, 201, "{body}");
    // Server-side apply that creates.
    let (code, body) = h
        .patch(
            &format!("{NS}/configmaps/applied?fieldManager=test"),
            "application/apply-patch+yaml",
            cm("applied"),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    // An apply of an existing object is an update: not charged again.
    let (code, body) = h
        .patch(
            &format!("{NS}/configmaps/applied?fieldManager=test"),
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "v"}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        used(&h, "counts").await,
        json!({"count/configmaps": "2", "services": "0"})
    );
    let (code, body) = h.post(&format!("{NS}/configmaps"), cm("third")).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h
        .patch(
            &format!("{NS}/configmaps/fourth?fieldManager=test"),
            "application/apply-patch+yaml",
            cm("fourth"),
        )
        .await;
    assert_forbidden(
        code,
        &body,
        "configmaps \"fourth\" is forbidden: exceeded quota: counts, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3",
    );
    // A PUT that creates (services allow it).
    let svc = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"port": 80}]}})
    };
    let (code, body) = h.put(&format!("{NS}/services/one"), svc("one")).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = h.put(&format!("{NS}/services/two"), svc("two")).await;
    assert_forbidden(
        code,
        &body,
        "services \"two\" is forbidden: exceeded quota: counts, requested: services=1, used: services=1, limited: services=1",
    );
}

#[tokio::test]
async fn racing_creates_cannot_both_take_the_last_of_a_quota() {
    let h = Harness::new().await;
    quota(
        &h,
        "q",
        json!({"count/secrets": "1"}),
        json!({"count/secrets": "0"}),
    )
    .await;
    let secret =
        |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
    let uri = format!("{NS}/secrets");
    let ((a, _), (b, _)) = tokio::join!(h.post(&uri, secret("a")), h.post(&uri, secret("b")));
    let mut codes = [a, b];
    codes.sort_unstable();
    assert_eq!(codes, [201, 403]);
    assert_eq!(used(&h, "q").await, json!({"count/secrets": "1"}));
}

/// A namespace the watch cache has no quotas for is looked up in the store, and that answer
/// stands for a while (upstream's live lookup): a quota stored meanwhile is not seen through it.
/// Once the plugin expects a quota write there (it admitted one), the store is asked every
/// time, so a quota is enforced from the moment it is stored even while the cache lags.
#[tokio::test]
async fn a_remembered_lookup_gives_way_to_an_expected_quota_write() {
    let h = Harness::new().await;
    let registry = h.api.registry("", "v1", "resourcequotas").unwrap();
    let remembering = crate::admission::NamespaceLookup::new(registry.clone());
    let expecting = crate::admission::NamespaceLookup::new(registry);
    assert!(remembering.live("default").await.unwrap().is_empty());
    assert!(expecting.live("default").await.unwrap().is_empty());
    expecting.expect_write("default");
    quota(&h, "q", json!({"pods": "1"}), json!({"pods": "0"})).await;
    assert!(remembering.live("default").await.unwrap().is_empty());
    let seen = expecting.live("default").await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["metadata"]["name"], "q");
    assert_eq!(seen[0]["status"]["used"], json!({"pods": "0"}));
    // Still asked while the write is expected: the next change is seen too.
    let (code, body) = h.post(&format!("{NS}/pods"), pod("p1", None)).await;
    assert_eq!(code, 201, "{body}");
    let seen = expecting.live("default").await.unwrap();
    assert_eq!(seen[0]["status"]["used"], json!({"pods": "1"}));
}

#[tokio::test]
async fn service_updates_are_charged_for_new_node_ports() {
    let h = Harness::new().await;
    let (code, body) = h
        .post(
            &format!("{NS}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    quota(
        &h,
        "ports",
        json!({"services.nodeports": "0"}),
        json!({"services.nodeports": "0"}),
    )
    .await;
    let (code, body) = h
        .patch(
            &format!("{NS}/services/web"),
            "application/merge-patch+json",
            json!({"spec": {"type": "NodePort"}}),
        )
        .await;
    assert_forbidden(
        code,
        &body,
        "services \"web\" is forbidden: exceeded quota: ports, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0",
    );
}

#[tokio::test]
async fn limit_ranges_default_and_bound_pods_before_quota() {
    let h = Harness::new().await;
    let (code, body) = h
        .post(
            &format!("{NS}/limitranges"),
            json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
                "spec": {"limits": [
                    {"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "200m"}, "max": {"cpu": "1"}},
                    {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}]}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    // The quota's cpu constraint is met by the defaults: LimitRanger runs first.
    quota(
        &h,
        "cpu",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "0"}),
    )
    .await;
    let (code, created) = h.post(&format!("{NS}/pods"), pod("defaulted", None)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "200m"}})
    );
    assert_eq!(
        created["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container c; cpu limit for container c"
    );
    assert_eq!(created["status"]["qosClass"], "Burstable");
    assert_eq!(used(&h, "cpu").await, json!({"requests.cpu": "200m"}));
    let (code, body) = h.post(&format!("{NS}/pods"), pod("big", Some("2"))).await;
    assert_forbidden(
        code,
        &body,
        "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2",
    );
    let claim = |storage: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}})
    };
    let (code, body) = h
        .post(&format!("{NS}/persistentvolumeclaims"), claim("2Gi"))
        .await;
    assert_forbidden(
        code,
        &body,
        "persistentvolumeclaims \"data\" is forbidden: maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 2Gi",
    );
    let (code, body) = h
        .post(&format!("{NS}/persistentvolumeclaims"), claim("512Mi"))
        .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn pods_created_by_apply_get_priority_and_default_tolerations() {
    let h = Harness::new().await;
    let (code, body) = h
        .patch(
            &format!("{NS}/pods/applied?fieldManager=test"),
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "applied"},
                   "spec": {"priorityClassName": "system-cluster-critical",
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["priority"], 2_000_000_000);
    let keys: Vec<&str> = body["spec"]["tolerations"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["key"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable"
        ]
    );
    let (code, body) = h
        .patch(
            &format!("{NS}/pods/unknown?fieldManager=test"),
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unknown"},
                   "spec": {"priorityClassName": "nonesuch",
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(code, 403, "{body}");
}
