//! Fixed-input tests of the quota evaluators and checks, against what upstream's evaluator and
//! admission tests expect.

#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::{Value, json};

fn now() -> Timestamp {
    "2025-01-01T00:00:00Z".parse().unwrap()
}

fn pod(spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(n, q)| ((*n).to_owned(), Quantity::parse(q).unwrap()))
        .collect()
}

fn printed(list: &ResourceList) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, q)| (n.clone(), q.canonical()))
        .collect()
}

fn check_usage(evaluator: &Evaluator, item: Item<'_>, expected: &[(&str, &str)]) {
    let got = printed(&evaluator.usage(item, now()));
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(n, q)| ((*n).to_owned(), (*q).to_owned()))
        .collect();
    assert_eq!(got, want);
}

fn container(name: &str, requests: Value, limits: Value) -> Value {
    json!({"name": name, "image": "busybox", "resources": {"requests": requests, "limits": limits}})
}

fn quota(name: &str, spec: Value, status: Value) -> ResourceQuota {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status}),
    )
    .unwrap()
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn pod_usage_follows_pod_requests_and_limits() {
    // Containers add up; limits are counted separately.
    let p = pod(json!({"containers": [
        container("a", json!({"cpu": "100m", "memory": "1Gi"}), json!({"cpu": "1"})),
        container("b", json!({"cpu": "200m", "memory": "512Mi"}), json!({"cpu": "500m"})),
    ]}));
    check_usage(
        &Evaluator::Pods,
        Item::Pod(&p),
        &[
            ("count/pods", "1"),
            ("cpu", "300m"),
            ("limits.cpu", "1500m"),
            ("memory", "1536Mi"),
            ("pods", "1"),
            ("requests.cpu", "300m"),
            ("requests.memory", "1536Mi"),
        ],
    );
    // An init container larger than the sum sets the request; the overhead is added to
    // requests and to the limits that exist.
    let p = pod(json!({
        "containers": [container("a", json!({"cpu": "1"}), json!({"cpu": "2"}))],
        "initContainers": [container("i", json!({"cpu": "3", "memory": "64Mi"}), json!({}))],
        "overhead": {"cpu": "250m", "memory": "10Mi"},
    }));
    check_usage(
        &Evaluator::Pods,
        Item::Pod(&p),
        &[
            ("count/pods", "1"),
            ("cpu", "3250m"),
            ("limits.cpu", "2250m"),
            ("memory", "74Mi"),
            ("pods", "1"),
            ("requests.cpu", "3250m"),
            ("requests.memory", "74Mi"),
        ],
    );
    // Sidecars (restartable init containers) run beside the app containers and before later
    // init containers.
    let p = pod(json!({
        "containers": [container("a", json!({"cpu": "1"}), json!({}))],
        "initContainers": [
            {"name": "s", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            container("i", json!({"cpu": "1200m"}), json!({})),
        ],
    }));
    check_usage(
        &Evaluator::Pods,
        Item::Pod(&p),
        &[
            ("count/pods", "1"),
            ("cpu", "1700m"),
            ("pods", "1"),
            ("requests.cpu", "1700m"),
        ],
    );
    // Extended resources and hugepages are counted as requests.
    let p = pod(json!({"containers": [container(
        "a",
        json!({"example.com/gpu": "2", "hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"}),
        json!({"example.com/gpu": "2", "ephemeral-storage": "2Gi"}),
    )]}));
    check_usage(
        &Evaluator::Pods,
        Item::Pod(&p),
        &[
            ("count/pods", "1"),
            ("ephemeral-storage", "1Gi"),
            ("hugepages-2Mi", "4Mi"),
            ("limits.ephemeral-storage", "2Gi"),
            ("pods", "1"),
            ("requests.ephemeral-storage", "1Gi"),
            ("requests.example.com/gpu", "2"),
            ("requests.hugepages-2Mi", "4Mi"),
        ],
    );
}

#[test]
fn finished_and_long_deleted_pods_only_count_as_objects() {
    let mut done = pod(json!({"containers": [container("a", json!({"cpu": "1"}), json!({}))]}));
    done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    check_usage(&Evaluator::Pods, Item::Pod(&done), &[("count/pods", "1")]);

    let mut deleting = pod(json!({"containers": [container("a", json!({"cpu": "1"}), json!({}))]}));
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    // Deleted 10 s ago with 30 s of grace: still counts.
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2024-12-31T23:59:50Z".parse().unwrap(),
        ));
    assert!(pod_counts(&deleting, now()));
    // Deleted a minute ago: its grace is over.
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2024-12-31T23:59:00Z".parse().unwrap(),
        ));
    check_usage(
        &Evaluator::Pods,
        Item::Pod(&deleting),
        &[("count/pods", "1")],
    );
}

#[test]
fn service_usage_counts_load_balancers_and_node_ports() {
    let service = |spec: Value| -> Service {
        serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": spec})).unwrap()
    };
    let cluster_ip = service(json!({"ports": [{"port": 80}]}));
    check_usage(
        &Evaluator::Services,
        Item::Service(&cluster_ip),
        &[
            ("count/services", "1"),
            ("services", "1"),
            ("services.loadbalancers", "0"),
            ("services.nodeports", "0"),
        ],
    );
    let node_port = service(json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}));
    check_usage(
        &Evaluator::Services,
        Item::Service(&node_port),
        &[
            ("count/services", "1"),
            ("services", "1"),
            ("services.loadbalancers", "0"),
            ("services.nodeports", "2"),
        ],
    );
    let lb = service(
        json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
        "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}),
    );
    check_usage(
        &Evaluator::Services,
        Item::Service(&lb),
        &[
            ("count/services", "1"),
            ("services", "1"),
            ("services.loadbalancers", "1"),
            ("services.nodeports", "1"),
        ],
    );
}

#[test]
fn claim_usage_is_charged_to_its_storage_class() {
    let claim = |meta: Value, spec: Value, status: Value| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": meta, "spec": spec, "status": status})).unwrap()
    };
    let plain = claim(
        json!({"name": "c"}),
        json!({"resources": {"requests": {"storage": "1.5"}}}),
        json!({}),
    );
    // A fractional request is charged in whole bytes.
    check_usage(
        &Evaluator::Claims,
        Item::Claim(&plain),
        &[
            ("count/persistentvolumeclaims", "1"),
            ("persistentvolumeclaims", "1"),
            ("requests.storage", "2"),
        ],
    );
    // The beta annotation wins over the spec; a larger allocation is charged.
    let gold = claim(
        json!({"name": "c", "annotations": {BETA_STORAGE_CLASS_ANNOTATION: "gold"}}),
        json!({"storageClassName": "silver", "resources": {"requests": {"storage": "1Gi"}}}),
        json!({"allocatedResources": {"storage": "2Gi"}}),
    );
    check_usage(
        &Evaluator::Claims,
        Item::Claim(&gold),
        &[
            ("count/persistentvolumeclaims", "1"),
            (
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "1",
            ),
            ("gold.storageclass.storage.k8s.io/requests.storage", "2Gi"),
            ("persistentvolumeclaims", "1"),
            ("requests.storage", "2Gi"),
        ],
    );
}

#[test]
fn quota_names_find_their_evaluators() {
    let check = |name: &str, expected: Option<Evaluator>| {
        assert_eq!(Evaluator::for_quota_name(name), expected, "{name}");
    };
    let objects = |group: &str, resource: &str| {
        Some(Evaluator::Objects {
            group: group.into(),
            resource: resource.into(),
        })
    };
    check("pods", Some(Evaluator::Pods));
    check("count/pods", Some(Evaluator::Pods));
    check("requests.cpu", Some(Evaluator::Pods));
    check("limits.memory", Some(Evaluator::Pods));
    check("requests.example.com/gpu", Some(Evaluator::Pods));
    check("requests.hugepages-2Mi", Some(Evaluator::Pods));
    check("services.nodeports", Some(Evaluator::Services));
    check("count/services", Some(Evaluator::Services));
    check("requests.storage", Some(Evaluator::Claims));
    check(
        "gold.storageclass.storage.k8s.io/requests.storage",
        Some(Evaluator::Claims),
    );
    check("count/persistentvolumeclaims", Some(Evaluator::Claims));
    check("configmaps", objects("", "configmaps"));
    check("count/configmaps", objects("", "configmaps"));
    check("count/deployments.apps", objects("apps", "deployments"));
    check(
        "count/widgets.example.com",
        objects("example.com", "widgets"),
    );
    check("count/events", None);
    check("unknown", None);

    let grouped = evaluators_for(&names(&[
        "pods",
        "requests.cpu",
        "count/configmaps",
        "configmaps",
        "services",
    ]));
    assert_eq!(
        grouped,
        vec![
            (Evaluator::Pods, names(&["pods", "requests.cpu"])),
            (Evaluator::Services, names(&["services"])),
            (
                objects("", "configmaps").unwrap(),
                names(&["count/configmaps", "configmaps"])
            ),
        ]
    );
    // Every created object counts under both names of its kind.
    check_usage(
        &Evaluator::for_resource("", "secrets").unwrap(),
        Item::Object,
        &[("count/secrets", "1"), ("secrets", "1")],
    );
    assert_eq!(Evaluator::for_resource("", "events"), None);
}

#[test]
fn pod_scopes_match_as_upstream() {
    let evaluator = Evaluator::Pods;
    let scope = |name: &str, operator: &str, values: &[&str]| ScopedResourceSelectorRequirement {
        scope_name: name.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| names(values)),
    };
    let best_effort = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
    let burstable = pod(
        json!({"activeDeadlineSeconds": 60, "priorityClassName": "high",
        "containers": [container("a", json!({"cpu": "1"}), json!({}))]}),
    );
    let cross = pod(
        json!({"containers": [{"name": "a", "image": "x"}], "affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "namespaces": ["other"]}]}}}),
    );
    let cases: &[(
        ScopedResourceSelectorRequirement,
        &Pod,
        Result<bool, String>,
    )] = &[
        (scope("BestEffort", "Exists", &[]), &best_effort, Ok(true)),
        (scope("BestEffort", "Exists", &[]), &burstable, Ok(false)),
        (scope("NotBestEffort", "Exists", &[]), &burstable, Ok(true)),
        (scope("Terminating", "Exists", &[]), &burstable, Ok(true)),
        (
            scope("NotTerminating", "Exists", &[]),
            &best_effort,
            Ok(true),
        ),
        (scope("PriorityClass", "Exists", &[]), &burstable, Ok(true)),
        (
            scope("PriorityClass", "Exists", &[]),
            &best_effort,
            Ok(false),
        ),
        (
            scope("PriorityClass", "In", &["high", "low"]),
            &burstable,
            Ok(true),
        ),
        (
            scope("PriorityClass", "In", &["low"]),
            &burstable,
            Ok(false),
        ),
        (
            scope("PriorityClass", "NotIn", &["low"]),
            &burstable,
            Ok(true),
        ),
        (
            scope("PriorityClass", "NotIn", &["low"]),
            &best_effort,
            Ok(true),
        ),
        (
            scope("PriorityClass", "DoesNotExist", &[]),
            &best_effort,
            Ok(true),
        ),
        (
            scope("PriorityClass", "In", &[]),
            &burstable,
            Err("for 'in', 'notin' operators, values set can't be empty".into()),
        ),
        (
            scope("CrossNamespacePodAffinity", "Exists", &[]),
            &cross,
            Ok(true),
        ),
        (
            scope("CrossNamespacePodAffinity", "Exists", &[]),
            &best_effort,
            Ok(false),
        ),
    ];
    for (selector, pod, expected) in cases {
        assert_eq!(
            &evaluator.matches_scope(selector, Item::Pod(pod)),
            expected,
            "{} {}",
            selector.scope_name,
            selector.operator
        );
    }
    // Other kinds have no scopes: a scoped quota never counts them.
    let scoped = quota(
        "q",
        json!({"hard": {"count/configmaps": "1"}, "scopes": ["BestEffort"]}),
        json!({"hard": {"count/configmaps": "1"}, "used": {"count/configmaps": "0"}}),
    );
    let configmaps = Evaluator::for_resource("", "configmaps").unwrap();
    assert_eq!(configmaps.matches(&scoped, Item::Object), Ok(false));
}

#[test]
fn compute_quotas_make_containers_state_their_resources() {
    let p = pod(json!({
        "containers": [
            container("c1", json!({"cpu": "1"}), json!({})),
            container("c2", json!({}), json!({})),
        ],
        "initContainers": [container("i1", json!({"cpu": "1", "memory": "1Gi"}), json!({"cpu": "1", "memory": "1Gi"}))],
    }));
    let required = names(&["limits.cpu", "requests.memory", "pods", "requests.storage"]);
    assert_eq!(
        Evaluator::Pods.constraints(&required, Item::Pod(&p)),
        Err("must specify limits.cpu for: c1,c2; requests.memory for: c1,c2".into())
    );
    assert_eq!(
        Evaluator::Pods.constraints(&names(&["pods"]), Item::Pod(&p)),
        Ok(())
    );
}

#[test]
fn usage_of_a_namespace_respects_the_quota_scopes() {
    let best_effort = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
    let burstable = pod(json!({"containers": [container("a", json!({"cpu": "250m"}), json!({}))]}));
    let mut failed = burstable.clone();
    failed.status = Some(serde_json::from_value(json!({"phase": "Failed"})).unwrap());
    let items = [
        Item::Pod(&best_effort),
        Item::Pod(&burstable),
        Item::Pod(&failed),
    ];

    let all = quota(
        "all",
        json!({"hard": {"pods": "10", "count/pods": "10", "requests.cpu": "2"}}),
        json!({}),
    );
    let tracked = names(&["count/pods", "pods", "requests.cpu"]);
    let used = usage_of(&Evaluator::Pods, &all, &tracked, items, now());
    assert_eq!(
        printed(&used),
        printed(&list(&[
            ("count/pods", "3"),
            ("pods", "2"),
            ("requests.cpu", "250m")
        ]))
    );

    let scoped = quota(
        "be",
        json!({"hard": {"pods": "10"}, "scopes": ["BestEffort"]}),
        json!({}),
    );
    let used = usage_of(&Evaluator::Pods, &scoped, &names(&["pods"]), items, now());
    assert_eq!(printed(&used), printed(&list(&[("pods", "1")])));
    // Nothing to count: zero.
    let used = usage_of(
        &Evaluator::Pods,
        &all,
        &names(&["requests.memory"]),
        items,
        now(),
    );
    assert_eq!(printed(&used), printed(&list(&[("requests.memory", "0")])));
}

#[test]
fn status_is_written_only_when_it_changes() {
    // First sync: hard copied from the spec, used measured.
    let fresh = quota(
        "q",
        json!({"hard": {"pods": "2", "requests.cpu": "1"}}),
        json!({}),
    );
    let measured = list(&[("pods", "1"), ("requests.cpu", "250m")]);
    let status = next_status(&fresh, &measured).unwrap();
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({"hard": {"pods": "2", "requests.cpu": "1"}, "used": {"pods": "1", "requests.cpu": "250m"}})
    );
    // The same again: nothing to write, even when written differently.
    let synced = quota(
        "q",
        json!({"hard": {"pods": "2", "requests.cpu": "1"}}),
        json!({"hard": {"pods": "2", "requests.cpu": "1000m"}, "used": {"pods": "1", "requests.cpu": "0.25"}}),
    );
    assert_eq!(next_status(&synced, &measured), None);
    // A name no evaluator measured keeps its recorded usage; a name dropped from the spec goes.
    let changed = quota(
        "q",
        json!({"hard": {"pods": "3", "foo": "1"}}),
        json!({"hard": {"pods": "2", "foo": "1", "requests.cpu": "1"}, "used": {"pods": "1", "foo": "1", "requests.cpu": "0"}}),
    );
    let status = next_status(&changed, &list(&[("pods", "2")])).unwrap();
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({"hard": {"foo": "1", "pods": "3"}, "used": {"foo": "1", "pods": "2"}})
    );
}

fn create<'a>(evaluator: &'a Evaluator, item: Item<'a>) -> Request<'a> {
    Request {
        evaluator,
        operation: Operation::Create,
        item,
        old: None,
        now: now(),
    }
}

#[test]
fn a_create_over_quota_is_refused_with_upstreams_message() {
    let q = quota(
        "my-quota",
        json!({"hard": {"pods": "2", "requests.cpu": "1"}}),
        json!({"hard": {"pods": "2", "requests.cpu": "1"}, "used": {"pods": "2", "requests.cpu": "800m"}}),
    );
    let p = pod(json!({"containers": [container("c", json!({"cpu": "500m"}), json!({}))]}));
    assert_eq!(
        check_request(std::slice::from_ref(&q), &create(&Evaluator::Pods, Item::Pod(&p))),
        Err(Denial::Forbidden(
            "exceeded quota: my-quota, requested: pods=1,requests.cpu=500m, used: pods=2,requests.cpu=800m, limited: pods=2,requests.cpu=1".into()
        ))
    );
    // Within the quota: the new usage to record.
    let roomy = quota(
        "my-quota",
        json!({"hard": {"pods": "3", "requests.cpu": "2"}}),
        json!({"hard": {"pods": "3", "requests.cpu": "2"}, "used": {"pods": "2", "requests.cpu": "800m"}}),
    );
    let updates = check_request(
        std::slice::from_ref(&roomy),
        &create(&Evaluator::Pods, Item::Pod(&p)),
    )
    .unwrap();
    assert_eq!(
        printed(&updates[&0]),
        printed(&list(&[("pods", "3"), ("requests.cpu", "1300m")]))
    );
}

#[test]
fn quotas_without_usage_or_compute_specs_refuse() {
    let unknown = quota(
        "q",
        json!({"hard": {"pods": "2", "requests.cpu": "1"}}),
        json!({"hard": {"pods": "2", "requests.cpu": "1"}, "used": {"pods": "1"}}),
    );
    let p = pod(json!({"containers": [container("c", json!({"cpu": "500m"}), json!({}))]}));
    assert_eq!(
        check_request(&[unknown], &create(&Evaluator::Pods, Item::Pod(&p))),
        Err(Denial::Forbidden(
            "status unknown for quota: q, resources: pods,requests.cpu".into()
        ))
    );
    let compute = quota(
        "compute",
        json!({"hard": {"limits.cpu": "2"}}),
        json!({"hard": {"limits.cpu": "2"}, "used": {"limits.cpu": "0"}}),
    );
    assert_eq!(
        check_request(&[compute], &create(&Evaluator::Pods, Item::Pod(&p))),
        Err(Denial::Forbidden(
            "failed quota: compute: must specify limits.cpu for: c".into()
        ))
    );
    // A quota whose status the controller has not written yet constrains nothing.
    let new = quota("new", json!({"hard": {"pods": "0"}}), json!({}));
    assert_eq!(
        check_request(&[new], &create(&Evaluator::Pods, Item::Pod(&p))),
        Ok(BTreeMap::new())
    );
}

#[test]
fn only_quotas_that_match_are_charged() {
    let objects = Evaluator::for_resource("", "configmaps").unwrap();
    let counts = quota(
        "counts",
        json!({"hard": {"count/configmaps": "3"}}),
        json!({"hard": {"count/configmaps": "3"}, "used": {"count/configmaps": "3"}}),
    );
    let pods_only = quota(
        "pods",
        json!({"hard": {"pods": "1"}}),
        json!({"hard": {"pods": "1"}, "used": {"pods": "1"}}),
    );
    assert_eq!(
        check_request(&[pods_only.clone(), counts.clone()], &create(&objects, Item::Object)),
        Err(Denial::Forbidden(
            "exceeded quota: counts, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3".into()
        ))
    );
    let legacy = quota(
        "legacy",
        json!({"hard": {"configmaps": "5"}}),
        json!({"hard": {"configmaps": "5"}, "used": {"configmaps": "1"}}),
    );
    let updates = check_request(&[pods_only, legacy], &create(&objects, Item::Object)).unwrap();
    assert_eq!(updates.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        printed(&updates[&1]),
        printed(&list(&[("configmaps", "2")]))
    );
}

#[test]
fn service_updates_are_charged_for_their_growth() {
    let service = |type_: &str| -> Service {
        serde_json::from_value(json!({"metadata": {"name": "s", "resourceVersion": "5"},
            "spec": {"type": type_, "ports": [{"port": 80}]}}))
        .unwrap()
    };
    let (old, new) = (service("ClusterIP"), service("NodePort"));
    let q = quota(
        "q",
        json!({"hard": {"services": "5", "services.nodeports": "0"}}),
        json!({"hard": {"services": "5", "services.nodeports": "0"}, "used": {"services": "1", "services.nodeports": "0"}}),
    );
    let request = Request {
        evaluator: &Evaluator::Services,
        operation: Operation::Update,
        item: Item::Service(&new),
        old: Some(Item::Service(&old)),
        now: now(),
    };
    // The service already counts: only the node port is new.
    assert_eq!(
        check_request(std::slice::from_ref(&q), &request),
        Err(Denial::Forbidden(
            "exceeded quota: q, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0".into()
        ))
    );
    // Going back costs nothing.
    let back = Request {
        item: Item::Service(&old),
        old: Some(Item::Service(&new)),
        ..request
    };
    assert_eq!(check_request(&[q], &back), Ok(BTreeMap::new()));
}

#[test]
fn resource_lists_compare_and_print_as_upstream() {
    let a = list(&[("cpu", "1500m"), ("memory", "1Gi")]);
    let b = list(&[("cpu", "1"), ("memory", "2Gi"), ("pods", "1")]);
    assert_eq!(less_than_or_equal(&a, &b), Err(names(&["cpu"])));
    assert_eq!(pretty_print(&add(&a, &b)), "cpu=2500m,memory=3Gi,pods=1");
    assert_eq!(
        pretty_print(&subtract_non_negative(&a, &b)),
        "cpu=500m,memory=0"
    );
    assert_eq!(
        pretty_print_names(&names(&["pods", "cpu", "pods"])),
        "cpu,pods"
    );
    assert!(equals(&list(&[("cpu", "1")]), &list(&[("cpu", "1000m")])));
    assert!(!equals(
        &list(&[("cpu", "1")]),
        &list(&[("cpu", "1"), ("pods", "0")])
    ));
}
