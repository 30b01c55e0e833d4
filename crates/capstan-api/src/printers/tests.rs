//! Realistic objects and the exact cells, columns and Tables upstream produces for them.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::*;

/// The printer the catalogue declares for `group`/`resource`.
fn printer_of(group: &str, resource: &str) -> Option<&'static Printer> {
    crate::catalog::resources()
        .find(|r| r.group == group && r.plural == resource)
        .and_then(|r| r.printer.as_ref())
}

fn columns(group: &str, resource: &str) -> Option<&'static [Column]> {
    printer_of(group, resource).map(|p| p.columns)
}

fn table_columns(group: &str, resource: &str) -> &'static [Column] {
    super::table_columns(printer_of(group, resource))
}

fn row(group: &str, resource: &str, object: &Value, now: Timestamp) -> Option<Row> {
    printer_of(group, resource).map(|p| super::row(Some(p), object, now))
}

fn cells(group: &str, resource: &str, object: &Value, now: Timestamp) -> Vec<Value> {
    super::row(printer_of(group, resource), object, now).cells
}

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

fn now() -> Timestamp {
    "2025-05-01T12:00:00Z".parse().expect("valid timestamp")
}

/// The RFC 3339 time `seconds` before [`now`].
fn ago(seconds: i64) -> String {
    let ts = now()
        .checked_sub(SignedDuration::from_secs(seconds))
        .expect("in range");
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Metadata created 76 hours ago (an age of `3d4h`).
fn meta(name: &str) -> Value {
    json!({"name": name, "namespace": "default", "uid": "u-1", "resourceVersion": "42",
           "creationTimestamp": ago(76 * HOUR)})
}

/// Asserts the cells printed for `object` of `group`/`resource`, and that there is one per
/// column.
fn check(group: &str, resource: &str, case: &str, object: Value, expected: Value) {
    let cells = cells(group, resource, &object, now());
    assert_eq!(
        cells.len(),
        table_columns(group, resource).len(),
        "{resource}: {case}: one cell per column"
    );
    assert_eq!(Value::Array(cells), expected, "{resource}: {case}");
}

fn column_names(group: &str, resource: &str) -> Vec<(&'static str, i32)> {
    table_columns(group, resource)
        .iter()
        .map(|c| (c.name, c.priority))
        .collect()
}

#[test]
fn human_durations_match_upstream() {
    const NANOS: i64 = 1_000_000_000;
    let cases = [
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (2 * MINUTE, "2m"),
        (200, "3m20s"),
        (10 * MINUTE, "10m"),
        (179 * MINUTE + 59, "179m"),
        (3 * HOUR, "3h"),
        (3 * HOUR + 5 * MINUTE, "3h5m"),
        (8 * HOUR + 30 * MINUTE, "8h"),
        (47 * HOUR, "47h"),
        (2 * DAY, "2d"),
        (2 * DAY + 3 * HOUR, "2d3h"),
        (8 * DAY, "8d"),
        (729 * DAY, "729d"),
        (730 * DAY, "2y"),
        (800 * DAY, "2y70d"),
        (8 * 365 * DAY, "8y"),
        (4000 * DAY, "10y"),
    ];
    for (seconds, want) in cases {
        assert_eq!(human_duration(seconds * NANOS), want, "{seconds}s");
    }
    // A little clock skew reads as now; more is invalid.
    assert_eq!(human_duration(-NANOS - NANOS / 2), "0s");
    assert_eq!(human_duration(-2 * NANOS), "<invalid>");
}

#[test]
fn columns_are_upstreams() {
    assert_eq!(
        column_names("", "pods"),
        [
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1),
        ]
    );
    assert_eq!(
        column_names("", "events"),
        [
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1),
        ]
    );
    assert_eq!(columns("events.k8s.io", "events"), columns("", "events"));
    assert_eq!(
        column_names("batch", "cronjobs"),
        [
            ("Name", 0),
            ("Schedule", 0),
            ("Timezone", 0),
            ("Suspend", 0),
            ("Active", 0),
            ("Last Schedule", 0),
            ("Age", 0),
            ("Containers", 1),
            ("Images", 1),
            ("Selector", 1),
        ]
    );
    assert_eq!(
        column_names("scheduling.k8s.io", "priorityclasses"),
        [
            ("Name", 0),
            ("Value", 0),
            ("Global-Default", 0),
            ("Age", 0),
            ("PreemptionPolicy", 0),
        ]
    );
    // No printer: upstream's default convertor.
    for (group, resource) in [("", "limitranges"), ("rbac.authorization.k8s.io", "roles")] {
        assert_eq!(columns(group, resource), None);
        assert_eq!(
            column_names(group, resource),
            [("Name", 0), ("Created At", 0)]
        );
    }
    assert_eq!(DEFAULT_COLUMNS[1].type_, "date");

    assert_eq!(
        columns("", "pods").map(|c| c[0].to_json()),
        Some(json!({
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            "priority": 0,
        }))
    );
    assert_eq!(
        columns("", "services").map(|c| c[6].to_json()),
        Some(json!({
            "name": "Selector",
            "type": "string",
            "format": "",
            "description": "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/",
            "priority": 1,
        }))
    );
}

#[test]
fn every_printer_fills_every_column_even_for_an_empty_object() {
    let resources = [
        ("", "pods"),
        ("", "podtemplates"),
        ("", "replicationcontrollers"),
        ("", "services"),
        ("", "endpoints"),
        ("", "nodes"),
        ("", "events"),
        ("", "namespaces"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("", "configmaps"),
        ("", "resourcequotas"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("apps", "controllerrevisions"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("coordination.k8s.io", "leases"),
        ("events.k8s.io", "events"),
        ("discovery.k8s.io", "endpointslices"),
        ("policy", "poddisruptionbudgets"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("storage.k8s.io", "csidrivers"),
    ];
    for (group, resource) in resources {
        let columns = columns(group, resource).expect("has a printer");
        let row = row(group, resource, &json!({}), now()).expect("has a printer");
        assert_eq!(row.cells.len(), columns.len(), "{group}/{resource}");
        assert!(columns.iter().all(|c| !c.description.is_empty()));
    }
}

#[test]
fn pods() {
    let running = json!({
        "metadata": meta("web-0"),
        "spec": {"nodeName": "node-1", "containers": [{"name": "app"}, {"name": "proxy"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.244.1.5",
            "podIPs": [{"ip": "10.244.1.5"}, {"ip": "fd00::5"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 5,
                 "state": {"running": {"startedAt": ago(10 * MINUTE)}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                              "finishedAt": ago(10 * MINUTE)}}},
                {"name": "proxy", "ready": true, "restartCount": 0,
                 "state": {"running": {"startedAt": ago(DAY)}}},
            ],
        },
    });
    check(
        "",
        "pods",
        "running, restarted",
        running,
        json!([
            "web-0",
            "2/2",
            "Running",
            "5 (10m ago)",
            "3d4h",
            "10.244.1.5",
            "node-1",
            "<none>",
            "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "no status at all",
        json!({"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c"}]}}),
        json!([
            "bare",
            "0/1",
            "",
            "0",
            "<unknown>",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "pending, waiting for an image",
        json!({
            "metadata": meta("pull"),
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "podIPs": [{"ip": "10.0.0.9"}],
                       "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                           "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        }),
        json!([
            "pull",
            "0/1",
            "ContainerCreating",
            "0",
            "3d4h",
            "10.0.0.9",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );

    let init = |statuses: Value| {
        json!({
            "metadata": meta("init"),
            "spec": {"initContainers": [{"name": "migrate"}, {"name": "seed"}],
                     "containers": [{"name": "app"}]},
            "status": {"phase": "Pending",
                       "conditions": [{"type": "Initialized", "status": "False"}],
                       "initContainerStatuses": statuses,
                       "containerStatuses": [{"name": "app", "restartCount": 0,
                           "state": {"waiting": {"reason": "PodInitializing"}}}]},
        })
    };
    let done = json!({"name": "migrate", "restartCount": 0,
                      "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
    check(
        "",
        "pods",
        "second init container running",
        init(json!([done, {"name": "seed", "restartCount": 1,
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(5 * MINUTE)}}}])),
        json!([
            "init",
            "0/1",
            "Init:1/2",
            "1 (5m ago)",
            "3d4h",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );
    check(
        "",
        "pods",
        "init container crash looping",
        init(json!([{"name": "migrate", "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}])),
        json!([
            "init",
            "0/1",
            "Init:CrashLoopBackOff",
            "4",
            "3d4h",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );
    check(
        "",
        "pods",
        "init container waiting without reason",
        init(json!([{"name": "migrate", "state": {"waiting": {}}}])),
        json!([
            "init", "0/1", "Init:0/2", "0", "3d4h", "<none>", "<none>", "<none>", "<none>"
        ]),
    );
    for (terminated, reason) in [
        (json!({"exitCode": 2}), "Init:ExitCode:2"),
        (json!({"exitCode": 137, "signal": 9}), "Init:Signal:9"),
        (json!({"exitCode": 1, "reason": "Error"}), "Init:Error"),
    ] {
        check(
            "",
            "pods",
            reason,
            init(json!([done, {"name": "seed", "state": {"terminated": terminated}}])),
            json!([
                "init", "0/1", reason, "0", "3d4h", "<none>", "<none>", "<none>", "<none>"
            ]),
        );
    }

    check(
        "",
        "pods",
        "crash loop back-off",
        json!({
            "metadata": meta("crash"),
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": false,
                "restartCount": 7,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "finishedAt": ago(30)}}}]},
        }),
        json!([
            "crash",
            "0/1",
            "CrashLoopBackOff",
            "7 (30s ago)",
            "3d4h",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "restarts without a last termination time",
        json!({
            "metadata": meta("r"),
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": true,
                "restartCount": 3, "state": {"running": {}}}]},
        }),
        json!([
            "r", "1/1", "Running", "3", "3d4h", "<none>", "<none>", "<none>", "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "terminated without a reason",
        json!({
            "metadata": meta("killed"),
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c",
                "state": {"terminated": {"exitCode": 137, "signal": 9}}}]},
        }),
        json!([
            "killed", "0/1", "Signal:9", "0", "3d4h", "<none>", "<none>", "<none>", "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "evicted",
        json!({
            "metadata": meta("evicted"),
            "spec": {"nodeName": "node-2", "containers": [{"name": "c"}]},
            "status": {"phase": "Failed", "reason": "Evicted",
                       "message": "The node was low on resource: memory."},
        }),
        json!([
            "evicted", "0/1", "Evicted", "0", "3d4h", "<none>", "node-2", "<none>", "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "terminating",
        json!({
            "metadata": {"name": "bye", "creationTimestamp": ago(90),
                         "deletionTimestamp": ago(-30)},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": true,
                "state": {"running": {}}}]},
        }),
        json!([
            "bye",
            "1/1",
            "Terminating",
            "0",
            "90s",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "lost node",
        json!({
            "metadata": {"name": "lost", "creationTimestamp": ago(2 * DAY),
                         "deletionTimestamp": ago(0)},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "reason": "NodeLost"},
        }),
        json!([
            "lost", "0/1", "Unknown", "0", "2d", "<none>", "<none>", "<none>", "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "scheduling gated",
        json!({
            "metadata": meta("gated"),
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "wait"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "SchedulingGated"}]},
        }),
        json!([
            "gated",
            "0/1",
            "SchedulingGated",
            "0",
            "3d4h",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );

    let completed = json!({
        "metadata": meta("job-abc"),
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "c", "ready": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
    });
    check(
        "",
        "pods",
        "completed",
        completed.clone(),
        json!([
            "job-abc",
            "0/1",
            "Completed",
            "0",
            "3d4h",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ]),
    );
    let row = row("", "pods", &completed, now()).expect("pods have a printer");
    assert_eq!(
        row.conditions,
        [RowCondition {
            type_: "Completed",
            status: "True",
            reason: "Succeeded",
            message: "The pod has completed successfully.",
        }]
    );
    let failed = json!({"metadata": {"name": "f"}, "status": {"phase": "Failed"}});
    let row = self::row("", "pods", &failed, now()).expect("pods have a printer");
    assert_eq!(row.conditions[0].reason, "Failed");
    assert_eq!(row.conditions[0].message, "The pod failed.");

    let partly_done = |ready_condition: &str| {
        json!({
            "metadata": meta("mixed"),
            "spec": {"containers": [{"name": "done"}, {"name": "server"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": ready_condition}],
                       "containerStatuses": [
                           {"name": "done", "state": {"terminated": {"exitCode": 0,
                                                                     "reason": "Completed"}}},
                           {"name": "server", "ready": true, "state": {"running": {}}},
                       ]},
        })
    };
    check(
        "",
        "pods",
        "one container completed, one serving",
        partly_done("True"),
        json!([
            "mixed", "1/2", "Running", "0", "3d4h", "<none>", "<none>", "<none>", "<none>"
        ]),
    );
    check(
        "",
        "pods",
        "one container completed, pod not ready",
        partly_done("False"),
        json!([
            "mixed", "1/2", "NotReady", "0", "3d4h", "<none>", "<none>", "<none>", "<none>"
        ]),
    );

    check(
        "",
        "pods",
        "sidecar init container",
        json!({
            "metadata": meta("mesh"),
            "spec": {"initContainers": [{"name": "envoy", "restartPolicy": "Always"}],
                     "containers": [{"name": "app"}],
                     "readinessGates": [{"conditionType": "example.com/lb"},
                                        {"conditionType": "example.com/dns"}]},
            "status": {"phase": "Running", "nominatedNodeName": "node-3",
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "example.com/lb", "status": "True"},
                                      {"type": "example.com/dns", "status": "False"}],
                       "initContainerStatuses": [{"name": "envoy", "ready": true,
                           "started": true, "restartCount": 2, "state": {"running": {}},
                           "lastState": {"terminated": {"exitCode": 1,
                                                        "finishedAt": ago(HOUR)}}}],
                       "containerStatuses": [{"name": "app", "ready": true, "restartCount": 1,
                           "state": {"running": {}},
                           "lastState": {"terminated": {"exitCode": 1,
                                                        "finishedAt": ago(3 * HOUR)}}}]},
        }),
        json!([
            "mesh",
            "2/2",
            "Running",
            "3 (60m ago)",
            "3d4h",
            "<none>",
            "<none>",
            "node-3",
            "1/2"
        ]),
    );
}

#[test]
fn services() {
    let service = |spec: Value, status: Value| json!({"metadata": meta("web"), "spec": spec, "status": status});
    let cases = [
        (
            "cluster IP, protocol defaulted",
            service(
                json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                       "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53}],
                       "selector": {"tier": "frontend", "app": "web"}}),
                json!({}),
            ),
            json!([
                "web",
                "ClusterIP",
                "10.96.0.10",
                "<none>",
                "80/TCP,53/TCP",
                "3d4h",
                "app=web,tier=frontend"
            ]),
        ),
        (
            "node ports, type from the v1 default",
            service(
                json!({"clusterIP": "10.96.3.4",
                       "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                                 {"port": 443, "protocol": "TCP", "nodePort": 30443}],
                       "externalIPs": ["192.0.2.1", "192.0.2.2"]}),
                json!({}),
            ),
            json!([
                "web",
                "ClusterIP",
                "10.96.3.4",
                "192.0.2.1,192.0.2.2",
                "80:30080/TCP,443:30443/TCP",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "load balancer pending",
            service(
                json!({"type": "LoadBalancer", "clusterIPs": ["10.96.7.7"],
                       "ports": [{"port": 443, "protocol": "TCP", "nodePort": 31443}]}),
                json!({"loadBalancer": {}}),
            ),
            json!([
                "web",
                "LoadBalancer",
                "10.96.7.7",
                "<pending>",
                "443:31443/TCP",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "load balancer with addresses",
            service(
                json!({"type": "LoadBalancer", "clusterIPs": ["10.96.7.7"],
                       "ports": [{"port": 443, "protocol": "TCP", "nodePort": 31443}]}),
                json!({"loadBalancer": {"ingress": [
                    {"ip": "203.0.113.9"}, {"hostname": "a1b2c3.elb.example.com"},
                    {"ip": "203.0.113.10"}, {"ip": "203.0.113.9"}]}}),
            ),
            json!([
                "web",
                "LoadBalancer",
                "10.96.7.7",
                "203.0.113.10,203.0.113.9,a1b2c3.elb.example.com",
                "443:31443/TCP",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "load balancer with external IPs",
            service(
                json!({"type": "LoadBalancer", "clusterIPs": ["10.96.7.7"],
                       "externalIPs": ["198.51.100.1"], "ports": [{"port": 80, "protocol": "UDP"}]}),
                json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}),
            ),
            json!([
                "web",
                "LoadBalancer",
                "10.96.7.7",
                "203.0.113.9,198.51.100.1",
                "80/UDP",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "empty type and protocol read as their defaults",
            service(
                json!({"type": "", "clusterIPs": ["10.96.0.1"],
                       "ports": [{"port": 443, "protocol": ""}]}),
                json!({}),
            ),
            json!([
                "web",
                "ClusterIP",
                "10.96.0.1",
                "<none>",
                "443/TCP",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "external name",
            service(
                json!({"type": "ExternalName", "externalName": "db.example.com"}),
                json!({}),
            ),
            json!([
                "web",
                "ExternalName",
                "<none>",
                "db.example.com",
                "<none>",
                "3d4h",
                "<none>"
            ]),
        ),
        (
            "headless",
            service(
                json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                       "selector": {"app": "db"}}),
                json!({}),
            ),
            json!([
                "web",
                "ClusterIP",
                "None",
                "<none>",
                "<none>",
                "3d4h",
                "app=db"
            ]),
        ),
    ];
    for (case, object, expected) in cases {
        check("", "services", case, object, expected);
    }
}

#[test]
fn endpoints() {
    let endpoints = |subsets: Value| json!({"metadata": meta("web"), "subsets": subsets});
    let cases = [
        ("no subsets", endpoints(json!(null)), "<none>"),
        (
            "two ports",
            endpoints(
                json!([{"addresses": [{"ip": "10.244.1.5"}, {"ip": "10.244.2.7"}],
                              "notReadyAddresses": [{"ip": "10.244.3.1"}],
                              "ports": [{"name": "http", "port": 8080}]}]),
            ),
            "10.244.1.5:8080,10.244.2.7:8080",
        ),
        (
            "more than three",
            endpoints(json!([
                {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                 "ports": [{"port": 80}, {"port": 443}]},
                {"addresses": [{"ip": "10.0.1.1"}], "ports": [{"port": 80}]},
            ])),
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more...",
        ),
        (
            "IPv6",
            endpoints(json!([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}])),
            "[fd00::1]:80",
        ),
        (
            "headless without ports",
            endpoints(json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}])),
            "10.0.0.1,10.0.0.2",
        ),
    ];
    for (case, object, expected) in cases {
        check(
            "",
            "endpoints",
            case,
            object,
            json!(["web", expected, "3d4h"]),
        );
    }
}

#[test]
fn nodes() {
    let node = |labels: Value, unschedulable: bool, conditions: Value| {
        json!({
            "metadata": {"name": "node-1", "creationTimestamp": ago(40 * DAY), "labels": labels},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "conditions": conditions,
                "addresses": [{"type": "Hostname", "address": "node-1"},
                              {"type": "InternalIP", "address": "172.18.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian GNU/Linux 12",
                             "kernelVersion": "6.8.0", "containerRuntimeVersion": "containerd://2.0.5"},
            },
        })
    };
    let ready = json!([{"type": "MemoryPressure", "status": "False"},
                       {"type": "Ready", "status": "True"}]);
    let cases = [
        (
            "ready control plane",
            node(
                json!({"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "master",
                       "node-role.kubernetes.io/": "", "kubernetes.io/hostname": "node-1"}),
                false,
                ready.clone(),
            ),
            "Ready",
            "control-plane,master",
        ),
        (
            "cordoned",
            node(json!({}), true, ready),
            "Ready,SchedulingDisabled",
            "<none>",
        ),
        (
            "not ready",
            node(
                json!({}),
                false,
                json!([{"type": "Ready", "status": "Unknown"}]),
            ),
            "NotReady",
            "<none>",
        ),
    ];
    for (case, object, status, roles) in cases {
        check(
            "",
            "nodes",
            case,
            object,
            json!([
                "node-1",
                status,
                roles,
                "40d",
                "v1.33.1",
                "172.18.0.2",
                "<none>",
                "Debian GNU/Linux 12",
                "6.8.0",
                "containerd://2.0.5"
            ]),
        );
    }
    check(
        "",
        "nodes",
        "just registered",
        json!({"metadata": {"name": "new", "creationTimestamp": ago(3)},
               "status": {"addresses": [{"type": "ExternalIP", "address": "198.51.100.4"}]}}),
        json!([
            "new",
            "Unknown",
            "<none>",
            "3s",
            "",
            "<none>",
            "198.51.100.4",
            "<unknown>",
            "<unknown>",
            "<unknown>"
        ]),
    );
}

#[test]
fn events() {
    check(
        "",
        "events",
        "classic event",
        json!({
            "metadata": {"name": "web-0.17d2a", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
            "reason": "BackOff", "type": "Warning",
            "message": "Back-off restarting failed container\n",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": ago(2 * HOUR), "lastTimestamp": ago(45), "count": 12,
        }),
        json!([
            "45s",
            "Warning",
            "BackOff",
            "pod/web-0",
            "spec.containers{app}",
            "kubelet, node-1",
            "Back-off restarting failed container",
            "120m",
            12,
            "web-0.17d2a"
        ]),
    );
    check(
        "",
        "events",
        "new-style event read as core/v1",
        json!({
            "metadata": {"name": "n.1"},
            "involvedObject": {"kind": "Node"},
            "reason": "RegisteredNode", "type": "Normal", "message": "Registered",
            "eventTime": ago(5 * MINUTE), "reportingComponent": "node-controller",
            "reportingController": "node-controller", "reportingInstance": "cp-1",
        }),
        json!([
            "5m",
            "Normal",
            "RegisteredNode",
            "node",
            "",
            "node-controller, cp-1",
            "Registered",
            "5m",
            1,
            "n.1"
        ]),
    );
    check(
        "",
        "events",
        "series",
        json!({
            "metadata": {"name": "s.1"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "type": "Warning", "reason": "FailedMount", "message": "oops",
            "eventTime": "2025-05-01T11:00:00.123456Z",
            "series": {"count": 40, "lastObservedTime": "2025-05-01T11:59:30.000000Z"},
            "reportingController": "kubelet",
        }),
        json!([
            "30s",
            "Warning",
            "FailedMount",
            "pod/p",
            "",
            "kubelet",
            "oops",
            "59m",
            40,
            "s.1"
        ]),
    );
    check(
        "events.k8s.io",
        "events",
        "events.k8s.io/v1 event",
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "d.1"},
            "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"},
            "reason": "ScalingReplicaSet", "type": "Normal", "action": "Scale",
            "note": "Scaled up replica set web-5d to 3 from 0",
            "eventTime": null, "reportingController": "deployment-controller",
            "deprecatedSource": {"component": "deployment-controller"},
            "deprecatedFirstTimestamp": ago(10 * MINUTE),
            "deprecatedLastTimestamp": ago(2 * MINUTE), "deprecatedCount": 2,
        }),
        json!([
            "2m",
            "Normal",
            "ScalingReplicaSet",
            "deployment/web",
            "",
            "deployment-controller",
            "Scaled up replica set web-5d to 3 from 0",
            "10m",
            2,
            "d.1"
        ]),
    );
    check(
        "",
        "events",
        "no times at all",
        json!({"metadata": {"name": "x"}}),
        json!(["<unknown>", "", "", "", "", "", "", "<unknown>", 1, "x"]),
    );
}

#[test]
fn namespaces_secrets_service_accounts_config_maps() {
    check(
        "",
        "namespaces",
        "active",
        json!({"metadata": meta("team-a"), "status": {"phase": "Active"}}),
        json!(["team-a", "Active", "3d4h"]),
    );
    check(
        "",
        "namespaces",
        "terminating",
        json!({"metadata": meta("old"), "status": {"phase": "Terminating"}}),
        json!(["old", "Terminating", "3d4h"]),
    );
    check(
        "",
        "namespaces",
        "phase defaulted",
        json!({"metadata": meta("new")}),
        json!(["new", "Active", "3d4h"]),
    );
    check(
        "",
        "secrets",
        "tls",
        json!({"metadata": meta("cert"), "type": "kubernetes.io/tls",
               "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}),
        json!(["cert", "kubernetes.io/tls", 2, "3d4h"]),
    );
    check(
        "",
        "secrets",
        "empty, type defaulted",
        json!({"metadata": meta("empty")}),
        json!(["empty", "Opaque", 0, "3d4h"]),
    );
    check(
        "",
        "serviceaccounts",
        "default",
        json!({"metadata": meta("default")}),
        json!(["default", 0, "3d4h"]),
    );
    check(
        "",
        "serviceaccounts",
        "with a token secret",
        json!({"metadata": meta("builder"), "secrets": [{"name": "builder-token"}]}),
        json!(["builder", 1, "3d4h"]),
    );
    check(
        "",
        "configmaps",
        "data and binary data",
        json!({"metadata": meta("conf"), "data": {"a": "1", "b": "2"},
               "binaryData": {"c": "AA=="}}),
        json!(["conf", 3, "3d4h"]),
    );
}

#[test]
fn replication_controllers_and_pod_templates() {
    check(
        "",
        "replicationcontrollers",
        "selector defaulted from the template",
        json!({
            "metadata": meta("frontend"),
            "spec": {"template": {"metadata": {"labels": {"app": "frontend", "tier": "web"}},
                                  "spec": {"containers": [{"name": "php", "image": "php:8"},
                                                          {"name": "log", "image": "fluent:1"}]}}},
            "status": {"replicas": 1, "readyReplicas": 1},
        }),
        json!([
            "frontend",
            1,
            1,
            1,
            "3d4h",
            "php,log",
            "php:8,fluent:1",
            "app=frontend,tier=web"
        ]),
    );
    check(
        "",
        "replicationcontrollers",
        "explicit selector, no status",
        json!({"metadata": meta("rc"), "spec": {"replicas": 3, "selector": {"app": "x"}}}),
        json!(["rc", 3, 0, 0, "3d4h", "", "", "app=x"]),
    );
    check(
        "",
        "podtemplates",
        "template",
        json!({"metadata": meta("tmpl"),
               "template": {"metadata": {"labels": {"role": "batch"}},
                            "spec": {"containers": [{"name": "run", "image": "busybox"}]}}}),
        json!(["tmpl", "run", "busybox", "role=batch"]),
    );
    check(
        "",
        "podtemplates",
        "no labels",
        json!({"metadata": meta("tmpl"), "template": {"spec": {"containers": []}}}),
        json!(["tmpl", "", "", "<none>"]),
    );
}

#[test]
fn limit_ranges_use_the_default_convertor() {
    let object = json!({"metadata": {"name": "limits", "creationTimestamp": "2025-04-28T08:00:00Z"},
                        "spec": {"limits": [{"type": "Container"}]}});
    check(
        "",
        "limitranges",
        "created",
        object,
        json!(["limits", "2025-04-28T08:00:00Z"]),
    );
    assert_eq!(row("", "limitranges", &json!({}), now()), None);
    check(
        "",
        "limitranges",
        "no creation time",
        json!({"metadata": {"name": "x"}}),
        json!(["x", "0001-01-01T00:00:00Z"]),
    );
}

#[test]
fn resource_quotas() {
    check(
        "",
        "resourcequotas",
        "requests and limits",
        json!({
            "metadata": meta("compute"),
            "spec": {"hard": {"cpu": "2", "memory": "4Gi"}},
            "status": {
                "hard": {"cpu": "2", "memory": "4Gi", "pods": "10", "limits.cpu": "4",
                         "limits.memory": "8Gi", "requests.storage": "100Gi"},
                "used": {"cpu": "500m", "memory": "1024Mi", "pods": "3",
                         "requests.storage": "0"},
            },
        }),
        json!([
            "compute",
            "cpu: 500m/2, memory: 1Gi/4Gi, pods: 3/10, requests.storage: 0/100Gi",
            "limits.cpu: 0/4, limits.memory: 0/8Gi",
            "3d4h"
        ]),
    );
    check(
        "",
        "resourcequotas",
        "not yet computed",
        json!({"metadata": meta("new"), "spec": {"hard": {"pods": "10"}}}),
        json!(["new", "", "", "3d4h"]),
    );
}

#[test]
fn persistent_volumes_and_claims() {
    check(
        "",
        "persistentvolumes",
        "bound, class from the beta annotation",
        json!({
            "metadata": {"name": "pv-1", "creationTimestamp": ago(9 * DAY),
                         "annotations": {"volume.beta.kubernetes.io/storage-class": "slow"}},
            "spec": {"capacity": {"storage": "10240Mi"},
                     "accessModes": ["ReadOnlyMany", "ReadWriteOnce", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast",
                     "claimRef": {"namespace": "default", "name": "data"},
                     "volumeMode": "Block"},
            "status": {"phase": "Bound"},
        }),
        json!([
            "pv-1",
            "10Gi",
            "RWO,ROX",
            "Delete",
            "Bound",
            "default/data",
            "slow",
            "<unset>",
            "",
            "9d",
            "Block"
        ]),
    );
    check(
        "",
        "persistentvolumes",
        "released, terminating, defaults",
        json!({
            "metadata": {"name": "pv-2", "creationTimestamp": ago(HOUR),
                         "deletionTimestamp": ago(0)},
            "spec": {"capacity": {"storage": "1.5Gi"}, "accessModes": ["ReadWriteOncePod"],
                     "volumeAttributesClassName": "gold"},
            "status": {"phase": "Released", "reason": "Recycling"},
        }),
        json!([
            "pv-2",
            "1536Mi",
            "RWOP",
            "Retain",
            "Terminating",
            "",
            "",
            "gold",
            "Recycling",
            "60m",
            "Filesystem"
        ]),
    );
    check(
        "",
        "persistentvolumeclaims",
        "bound",
        json!({
            "metadata": meta("data"),
            "spec": {"volumeName": "pv-1", "storageClassName": "fast",
                     "resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "10Gi"},
                       "accessModes": ["ReadWriteMany", "ReadWriteOnce"]},
        }),
        json!([
            "data",
            "Bound",
            "pv-1",
            "10Gi",
            "RWO,RWX",
            "fast",
            "<unset>",
            "3d4h",
            "Filesystem"
        ]),
    );
    check(
        "",
        "persistentvolumeclaims",
        "pending",
        json!({
            "metadata": meta("wait"),
            "spec": {"resources": {"requests": {"storage": "5Gi"}}, "volumeMode": "Block"},
            "status": {"phase": "Pending"},
        }),
        json!([
            "wait", "Pending", "", "", "", "", "<unset>", "3d4h", "Block"
        ]),
    );
}

#[test]
fn deployments_replica_sets_stateful_sets_daemon_sets() {
    let template = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                  {"name": "exporter", "image": "exporter:0.1"}]}});
    check(
        "apps",
        "deployments",
        "rolling out",
        json!({
            "metadata": meta("web"),
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": template},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3,
                       "availableReplicas": 2},
        }),
        json!([
            "web",
            "2/3",
            3,
            2,
            "3d4h",
            "nginx,exporter",
            "nginx:1.27,exporter:0.1",
            "app=web"
        ]),
    );
    check(
        "apps",
        "deployments",
        "no status, replicas defaulted",
        json!({"metadata": meta("new"), "spec": {"selector": {}}}),
        json!(["new", "0/1", 0, 0, "3d4h", "", "", ""]),
    );
    check(
        "apps",
        "deployments",
        "scaled to zero",
        json!({"metadata": meta("idle"),
               "spec": {"replicas": 0, "selector": {"matchExpressions": [
                   {"key": "app", "operator": "Bogus"}]}}}),
        json!(["idle", "0/0", 0, 0, "3d4h", "", "", "<invalid>"]),
    );
    check(
        "apps",
        "replicasets",
        "set-based selector",
        json!({
            "metadata": meta("web-5d"),
            "spec": {"replicas": 2,
                     "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                         {"key": "tier", "operator": "Exists"},
                         {"key": "env", "operator": "In", "values": ["staging", "prod"]},
                         {"key": "legacy", "operator": "DoesNotExist"},
                         {"key": "zone", "operator": "NotIn", "values": ["b", "a"]}]},
                     "template": template},
            "status": {"replicas": 2, "readyReplicas": 1},
        }),
        json!([
            "web-5d",
            2,
            2,
            1,
            "3d4h",
            "nginx,exporter",
            "nginx:1.27,exporter:0.1",
            "app=web,env in (prod,staging),!legacy,tier,zone notin (a,b)"
        ]),
    );
    check(
        "apps",
        "replicasets",
        "selector upstream cannot parse",
        json!({"metadata": meta("rs"), "spec": {"replicas": 1, "selector": {"matchExpressions": [
            {"key": "env", "operator": "In", "values": []}]}}}),
        json!(["rs", 1, 0, 0, "3d4h", "", "", "<error>"]),
    );
    check(
        "apps",
        "replicasets",
        "empty selector",
        json!({"metadata": meta("rs"), "spec": {"replicas": 0, "selector": {}}}),
        json!(["rs", 0, 0, 0, "3d4h", "", "", "<none>"]),
    );
    check(
        "apps",
        "statefulsets",
        "partly ready",
        json!({"metadata": meta("db"), "spec": {"replicas": 3, "template": template},
               "status": {"replicas": 3, "readyReplicas": 1}}),
        json!([
            "db",
            "1/3",
            "3d4h",
            "nginx,exporter",
            "nginx:1.27,exporter:0.1"
        ]),
    );
    check(
        "apps",
        "daemonsets",
        "on linux nodes",
        json!({
            "metadata": meta("agent"),
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                           "containers": [{"name": "a", "image": "agent:2"}]}}},
            "status": {"desiredNumberScheduled": 5, "currentNumberScheduled": 5,
                       "numberReady": 4, "updatedNumberScheduled": 3, "numberAvailable": 4},
        }),
        json!([
            "agent",
            5,
            5,
            4,
            3,
            4,
            "kubernetes.io/os=linux",
            "3d4h",
            "a",
            "agent:2",
            "app=agent"
        ]),
    );
    check(
        "apps",
        "daemonsets",
        "nothing scheduled yet",
        json!({"metadata": meta("agent")}),
        json!(["agent", 0, 0, 0, 0, 0, "<none>", "3d4h", "", "", "<none>"]),
    );
}

#[test]
fn controller_revisions() {
    let revision = |owners: Value| {
        json!({"metadata": {"name": "web-6c9d", "creationTimestamp": ago(20 * MINUTE),
                            "ownerReferences": owners},
               "revision": 4})
    };
    let cases = [
        (
            "owned by a stateful set",
            revision(
                json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                              "uid": "u", "controller": true}]),
            ),
            "statefulset.apps/web",
        ),
        (
            "owned by a core object",
            revision(
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u",
                              "controller": true}]),
            ),
            "pod/p",
        ),
        (
            "owner that is not the controller",
            revision(
                json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                              "uid": "u"}]),
            ),
            "<none>",
        ),
    ];
    for (case, object, controller) in cases {
        check(
            "apps",
            "controllerrevisions",
            case,
            object,
            json!(["web-6c9d", controller, 4, "20m"]),
        );
    }
}

#[test]
fn jobs() {
    let job = |spec: Value, status: Value| {
        json!({"metadata": {"name": "pi", "creationTimestamp": ago(10 * MINUTE)},
               "spec": spec, "status": status})
    };
    let template = json!({"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}});
    let selector = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "c1"}});
    let cases = [
        (
            "complete",
            job(
                json!({"completions": 1, "parallelism": 1, "selector": selector,
                       "template": template}),
                json!({"succeeded": 1, "startTime": ago(10 * MINUTE),
                       "completionTime": ago(10 * MINUTE - 45),
                       "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                      {"type": "Complete", "status": "True"}]}),
            ),
            json!([
                "pi",
                "Complete",
                "1/1",
                "45s",
                "10m",
                "pi",
                "perl:5.34",
                "batch.kubernetes.io/controller-uid=c1"
            ]),
        ),
        (
            "running work queue",
            job(
                json!({"parallelism": 3, "template": template}),
                json!({"active": 3, "startTime": ago(200)}),
            ),
            json!([
                "pi",
                "Running",
                "0/1 of 3",
                "3m20s",
                "10m",
                "pi",
                "perl:5.34",
                "<none>"
            ]),
        ),
        (
            "failed",
            job(
                json!({"completions": 5, "parallelism": 2}),
                json!({"failed": 6, "succeeded": 2, "startTime": ago(9 * MINUTE),
                       "conditions": [{"type": "FailureTarget", "status": "True"},
                                      {"type": "Failed", "status": "True"}]}),
            ),
            json!(["pi", "Failed", "2/5", "9m", "10m", "", "", "<none>"]),
        ),
        (
            "about to fail",
            job(
                json!({"completions": 5}),
                json!({"conditions": [{"type": "FailureTarget", "status": "True"}]}),
            ),
            json!(["pi", "FailureTarget", "0/5", "", "10m", "", "", "<none>"]),
        ),
        (
            "suspended",
            job(
                json!({"suspend": true}),
                json!({"conditions": [{"type": "Suspended", "status": "True"},
                                      {"type": "Complete", "status": "False"}]}),
            ),
            json!(["pi", "Suspended", "0/1", "", "10m", "", "", "<none>"]),
        ),
    ];
    for (case, object, expected) in cases {
        check("batch", "jobs", case, object, expected);
    }
    check(
        "batch",
        "jobs",
        "terminating",
        json!({"metadata": {"name": "pi", "deletionTimestamp": ago(0)},
               "spec": {"parallelism": 1}}),
        json!([
            "pi",
            "Terminating",
            "0/1",
            "",
            "<unknown>",
            "",
            "",
            "<none>"
        ]),
    );
}

#[test]
fn cron_jobs() {
    check(
        "batch",
        "cronjobs",
        "scheduled",
        json!({
            "metadata": meta("backup"),
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {
                "selector": {"matchLabels": {"job": "backup"}},
                "template": {"spec": {"containers": [{"name": "dump", "image": "pg:16"}]}}}}},
            "status": {"active": [{"name": "backup-1"}, {"name": "backup-2"}],
                       "lastScheduleTime": ago(4 * MINUTE)},
        }),
        json!([
            "backup",
            "*/5 * * * *",
            "<none>",
            "False",
            2,
            "4m",
            "3d4h",
            "dump",
            "pg:16",
            "job=backup"
        ]),
    );
    check(
        "batch",
        "cronjobs",
        "suspended, never run",
        json!({
            "metadata": meta("report"),
            "spec": {"schedule": "0 6 * * 1", "timeZone": "Europe/Paris", "suspend": true,
                     "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
            "status": {},
        }),
        json!([
            "report",
            "0 6 * * 1",
            "Europe/Paris",
            "True",
            0,
            "<none>",
            "3d4h",
            "",
            "",
            "<none>"
        ]),
    );
}

#[test]
fn csi_drivers() {
    assert_eq!(
        column_names("storage.k8s.io", "csidrivers"),
        [
            ("Name", 0),
            ("AttachRequired", 0),
            ("PodInfoOnMount", 0),
            ("StorageCapacity", 0),
            ("TokenRequests", 0),
            ("RequiresRepublish", 0),
            ("Modes", 0),
            ("Age", 0),
        ]
    );
    check(
        "storage.k8s.io",
        "csidrivers",
        "defaulted",
        json!({"metadata": meta("csi.example.com"),
               "spec": {"attachRequired": false, "podInfoOnMount": true, "storageCapacity": false,
                        "requiresRepublish": false,
                        "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                        "tokenRequests": [{"audience": "vault"}, {"audience": ""}]}}),
        json!([
            "csi.example.com",
            false,
            true,
            false,
            "vault,",
            false,
            "Persistent,Ephemeral",
            "3d4h"
        ]),
    );
    check(
        "storage.k8s.io",
        "csidrivers",
        "bare",
        json!({"metadata": meta("bare"), "spec": {}}),
        json!([
            "bare", true, false, false, "<unset>", false, "<none>", "3d4h"
        ]),
    );
}

#[test]
fn leases_endpoint_slices_budgets_priority_classes() {
    check(
        "coordination.k8s.io",
        "leases",
        "held",
        json!({"metadata": meta("kube-scheduler"),
               "spec": {"holderIdentity": "cp-1_6f1c", "leaseDurationSeconds": 15}}),
        json!(["kube-scheduler", "cp-1_6f1c", "3d4h"]),
    );
    check(
        "coordination.k8s.io",
        "leases",
        "free",
        json!({"metadata": meta("free"), "spec": {}}),
        json!(["free", "", "3d4h"]),
    );
    check(
        "discovery.k8s.io",
        "endpointslices",
        "four addresses",
        json!({
            "metadata": meta("web-abc12"),
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "metrics"},
                      {}],
            "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]},
                          {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}],
        }),
        json!([
            "web-abc12",
            "IPv4",
            "8080,metrics,*",
            "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...",
            "3d4h"
        ]),
    );
    check(
        "discovery.k8s.io",
        "endpointslices",
        "empty",
        json!({"metadata": meta("web-empty"), "addressType": "IPv6", "endpoints": []}),
        json!(["web-empty", "IPv6", "<unset>", "<unset>", "3d4h"]),
    );
    check(
        "policy",
        "poddisruptionbudgets",
        "min available",
        json!({"metadata": meta("web"), "spec": {"minAvailable": 2},
               "status": {"disruptionsAllowed": 1}}),
        json!(["web", "2", "N/A", 1, "3d4h"]),
    );
    check(
        "policy",
        "poddisruptionbudgets",
        "max unavailable percentage",
        json!({"metadata": meta("db"), "spec": {"maxUnavailable": "25%"}}),
        json!(["db", "N/A", "25%", 0, "3d4h"]),
    );
    check(
        "scheduling.k8s.io",
        "priorityclasses",
        "system",
        json!({"metadata": {"name": "system-node-critical", "creationTimestamp": ago(400 * DAY)},
               "value": 2_000_001_000, "globalDefault": false,
               "preemptionPolicy": "PreemptLowerPriority"}),
        json!([
            "system-node-critical",
            2_000_001_000,
            false,
            "400d",
            "PreemptLowerPriority"
        ]),
    );
    check(
        "scheduling.k8s.io",
        "priorityclasses",
        "default, policy defaulted",
        json!({"metadata": meta("low"), "value": -10, "globalDefault": true}),
        json!(["low", -10, true, "3d4h", "PreemptLowerPriority"]),
    );
}

#[test]
fn list_tables() {
    let pods = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("a"),
               "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "b", "labels": {"app": "x"}},
               "spec": {"containers": [{"name": "c"}]}}),
    ];
    let list_meta = ListMeta {
        resource_version: Some("1234".into()),
        continue_token: Some("eyJ2".into()),
        remaining_item_count: Some(7),
    };
    let table = list_table(
        printer_of("", "pods"),
        &[&pods[0], &pods[1]],
        &list_meta,
        &TableOptions::default(),
        now(),
    );
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        table["metadata"],
        json!({"resourceVersion": "1234", "continue": "eyJ2", "remainingItemCount": 7})
    );
    assert_eq!(table["columnDefinitions"].as_array().map(Vec::len), Some(9));
    assert_eq!(table["columnDefinitions"][3]["name"], "Restarts");
    assert_eq!(
        table["rows"][0],
        json!({
            "cells": ["a", "0/1", "Succeeded", "0", "3d4h", "<none>", "<none>", "<none>",
                      "<none>"],
            "conditions": [{"type": "Completed", "status": "True", "reason": "Succeeded",
                            "message": "The pod has completed successfully."}],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": meta("a")},
        })
    );
    assert_eq!(table["rows"][1].get("conditions"), None);
    assert_eq!(
        table["rows"][1]["object"]["metadata"],
        json!({"name": "b", "labels": {"app": "x"}})
    );

    // A watch event after the first: no headers; and the whole object when asked.
    let options = TableOptions {
        include_object: IncludeObject::Object,
        no_headers: true,
    };
    let table = object_table(printer_of("", "pods"), &pods[0], &options, now());
    assert_eq!(table["columnDefinitions"], Value::Null);
    assert_eq!(table["metadata"], json!({"resourceVersion": "42"}));
    assert_eq!(table["rows"][0]["object"], pods[0]);

    let options = TableOptions {
        include_object: IncludeObject::None,
        no_headers: false,
    };
    let table = list_table(
        printer_of("", "pods"),
        &[&pods[1]],
        &ListMeta::default(),
        &options,
        now(),
    );
    assert_eq!(table["metadata"], json!({}));
    assert_eq!(table["rows"][0]["object"], Value::Null);

    // Empty lists: printers give `[]`, the default convertor `null`.
    let empty = list_table(
        printer_of("", "pods"),
        &[],
        &ListMeta::default(),
        &TableOptions::default(),
        now(),
    );
    assert_eq!(empty["rows"], json!([]));
    let empty = list_table(
        printer_of("", "limitranges"),
        &[],
        &ListMeta::default(),
        &TableOptions::default(),
        now(),
    );
    assert_eq!(empty["rows"], Value::Null);
    assert_eq!(
        empty["columnDefinitions"][1],
        json!({"name": "Created At", "type": "date", "format": "",
               "description": super::descriptions::META_CREATED, "priority": 0})
    );
}

#[test]
fn include_object_is_read_as_upstream() {
    let cases = [
        (None, IncludeObject::Metadata),
        (Some(""), IncludeObject::Metadata),
        (Some("Metadata"), IncludeObject::Metadata),
        (Some("None"), IncludeObject::None),
        (Some("Object"), IncludeObject::Object),
    ];
    for (query, want) in cases {
        assert_eq!(
            IncludeObject::from_query(query).ok(),
            Some(want),
            "{query:?}"
        );
    }
    let error = IncludeObject::from_query(Some("object")).expect_err("case matters");
    assert_eq!(error.code(), 400);
    assert_eq!(
        error.to_json()["message"],
        "Unable to convert to Table as requested: includeObject: Invalid value: \"object\": must be 'Metadata', 'Object', 'None', or empty"
    );
}
