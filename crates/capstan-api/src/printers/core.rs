//! Printers for the core (`v1`) resources, and for `events.k8s.io/v1` events, which upstream
//! serves from the same storage and prints with the core event printer.

use jiff::Timestamp;
use serde_json::Value;

use super::descriptions::*;
use super::format::{
    age, at, container_cells, defaulted, flag, format_labels, int, len, list, micro_time, name,
    opt_int, opt_text, or_none, since, string_map, text, time,
};
use super::quantity::quantity_string;
use super::{AGE, Column, NAME, Row, RowCondition, col, wide};

/// Shared by the printers that list a pod template's containers.
pub(super) const CONTAINERS_DESCRIPTION: &str = "Names of each container in the template.";
/// Shared by the printers that list a pod template's images.
pub(super) const IMAGES_DESCRIPTION: &str = "Images referenced by each container in the template.";

// ---------------------------------------------------------------------------------------------
// pods

pub(crate) const POD_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Ready",
        "string",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    col(
        "Status",
        "string",
        "The aggregate status of the containers in this pod.",
    ),
    col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide("IP", "string", POD_IP),
    wide("Node", "string", POD_NODE_NAME),
    wide("Nominated Node", "string", POD_NOMINATED_NODE),
    wide("Readiness Gates", "string", POD_READINESS_GATES),
];

/// A later time of the two, where `None` is Go's zero time (earlier than any other).
fn later(current: Option<Timestamp>, candidate: Option<Timestamp>) -> Option<Timestamp> {
    match (current, candidate) {
        (Some(c), Some(t)) if c < t => Some(t),
        (None, Some(t)) => Some(t),
        _ => current,
    }
}

fn has_condition(pod: &Value, type_: &str, status: &str) -> bool {
    list(pod, &["status", "conditions"])
        .iter()
        .any(|c| text(c, &["type"]) == type_ && text(c, &["status"]) == status)
}

/// The status of the first `Initialized` condition is `True`.
fn initialized(pod: &Value) -> bool {
    list(pod, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == "Initialized")
        .is_some_and(|c| text(c, &["status"]) == "True")
}

/// The reason a terminated container (or init container, with `prefix` `Init:`) gives.
fn terminated_reason(terminated: &Value, prefix: &str) -> String {
    let reason = text(terminated, &["reason"]);
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = int(terminated, &["signal"]);
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!("{prefix}ExitCode:{}", int(terminated, &["exitCode"]))
    }
}

/// READY counts ready containers (restartable init containers included); STATUS is the phase or
/// reason, overridden by the first unfinished init container (`Init:1/2`, `Init:Error`...) or else
/// by the containers' waiting and terminated reasons, then by deletion (`Terminating`, or
/// `Unknown` on a lost node); RESTARTS adds how long ago the last restart ended.
pub(crate) fn pod(pod: &Value, now: Timestamp) -> Row {
    let init_specs = list(pod, &["spec", "initContainers"]);
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .rev()
            .find(|c| text(c, &["name"]) == name)
            .is_some_and(|c| text(c, &["restartPolicy"]) == "Always")
    };
    let total = list(pod, &["spec", "containers"]).len()
        + init_specs
            .iter()
            .filter(|c| text(c, &["restartPolicy"]) == "Always")
            .count();
    let mut ready = 0_usize;
    let mut restarts = 0_i64;
    let mut sidecar_restarts = 0_i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;

    let phase = text(pod, &["status", "phase"]);
    let status_reason = text(pod, &["status", "reason"]);
    let mut reason = if status_reason.is_empty() {
        phase.to_owned()
    } else {
        status_reason.to_owned()
    };
    if list(pod, &["status", "conditions"])
        .iter()
        .any(|c| text(c, &["type"]) == "PodScheduled" && text(c, &["reason"]) == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }

    let mut conditions = Vec::new();
    match phase {
        "Succeeded" => conditions.push(RowCondition {
            type_: "Completed",
            status: "True",
            reason: "Succeeded",
            message: "The pod has completed successfully.",
        }),
        "Failed" => conditions.push(RowCondition {
            type_: "Completed",
            status: "True",
            reason: "Failed",
            message: "The pod failed.",
        }),
        _ => {}
    }

    let mut initializing = false;
    for (i, status) in list(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let sidecar = is_sidecar(text(status, &["name"]));
        let count = int(status, &["restartCount"]);
        let finished = time(status, &["lastState", "terminated", "finishedAt"]);
        restarts += count;
        last_restart = later(last_restart, finished);
        if sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = later(last_sidecar_restart, finished);
        }
        let terminated = at(status, &["state", "terminated"]).filter(|t| !t.is_null());
        let waiting_reason = text(status, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| int(t, &["exitCode"]) == 0) {
            continue;
        }
        if sidecar && flag(status, &["started"]) {
            if flag(status, &["ready"]) {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(terminated) = terminated {
            terminated_reason(terminated, "Init:")
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }

    if !initializing || initialized(pod) {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for status in list(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int(status, &["restartCount"]);
            last_restart = later(
                last_restart,
                time(status, &["lastState", "terminated", "finishedAt"]),
            );
            let waiting_reason = text(status, &["state", "waiting", "reason"]);
            let terminated = at(status, &["state", "terminated"]).filter(|t| !t.is_null());
            let running = at(status, &["state", "running"]).is_some_and(|r| !r.is_null());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(terminated) = terminated {
                reason = terminated_reason(terminated, "");
            } else if flag(status, &["ready"]) && running {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_condition(pod, "Ready", "True") {
                "Running".to_owned()
            } else {
                "NotReady".to_owned()
            };
        }
    }

    let deleting = at(pod, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null());
    if deleting && status_reason == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_owned();
    }

    let restarts_cell = match last_restart {
        Some(ts) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(ts), now)),
        _ => restarts.to_string(),
    };

    // The IP: `status.podIP` wins over `status.podIPs[0]`, as in upstream's v1 conversion.
    let pod_ip = match text(pod, &["status", "podIP"]) {
        "" => list(pod, &["status", "podIPs"])
            .first()
            .map_or("", |ip| text(ip, &["ip"])),
        ip => ip,
    };
    let gates = list(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let pod_conditions = list(pod, &["status", "conditions"]);
        let met = gates
            .iter()
            .filter(|gate| {
                let wanted = text(gate, &["conditionType"]);
                pod_conditions
                    .iter()
                    .find(|c| text(c, &["type"]) == wanted)
                    .is_some_and(|c| text(c, &["status"]) == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    Row {
        cells: vec![
            name(pod),
            Value::from(format!("{ready}/{total}")),
            Value::from(reason),
            Value::from(restarts_cell),
            age(pod, now),
            Value::from(or_none(pod_ip)),
            Value::from(or_none(text(pod, &["spec", "nodeName"]))),
            Value::from(or_none(text(pod, &["status", "nominatedNodeName"]))),
            Value::from(readiness_gates),
        ],
        conditions,
    }
}

// ---------------------------------------------------------------------------------------------
// podtemplates

pub(crate) const POD_TEMPLATE_COLUMNS: &[Column] = &[
    NAME,
    col("Containers", "string", CONTAINERS_DESCRIPTION),
    col("Images", "string", IMAGES_DESCRIPTION),
    col("Pod Labels", "string", "The labels for the pod template."),
];

pub(crate) fn pod_template(object: &Value, _now: Timestamp) -> Row {
    let (names, images) = container_cells(list(object, &["template", "spec", "containers"]));
    Row::of(vec![
        name(object),
        names,
        images,
        Value::from(format_labels(object, &["template", "metadata", "labels"])),
    ])
}

// ---------------------------------------------------------------------------------------------
// replicationcontrollers

pub(crate) const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", RC_SPEC_REPLICAS),
    col("Current", "integer", RC_STATUS_REPLICAS),
    col("Ready", "integer", RC_READY),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", RC_SELECTOR),
];

pub(crate) fn replication_controller(object: &Value, now: Timestamp) -> Row {
    let (names, images) =
        container_cells(list(object, &["spec", "template", "spec", "containers"]));
    // An empty selector defaults to the template's labels.
    let selector = if len(object, &["spec", "selector"]) == 0 {
        format_labels(object, &["spec", "template", "metadata", "labels"])
    } else {
        format_labels(object, &["spec", "selector"])
    };
    Row::of(vec![
        name(object),
        Value::from(opt_int(object, &["spec", "replicas"]).unwrap_or(1)),
        Value::from(int(object, &["status", "replicas"])),
        Value::from(int(object, &["status", "readyReplicas"])),
        age(object, now),
        names,
        images,
        Value::from(selector),
    ])
}

// ---------------------------------------------------------------------------------------------
// services

pub(crate) const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", SVC_TYPE),
    col("Cluster-IP", "string", SVC_CLUSTER_IP),
    col("External-IP", "string", SVC_EXTERNAL_IPS),
    col("Port(s)", "string", SVC_PORTS),
    AGE,
    wide("Selector", "string", SVC_SELECTOR),
];

fn strings(value: &Value, path: &[&str]) -> Vec<String> {
    list(value, path)
        .iter()
        .map(|v| v.as_str().unwrap_or("").to_owned())
        .collect()
}

/// The load balancer's IPs (or host names), sorted and de-duplicated. The server always prints
/// wide, so upstream's 16-character clipping never applies.
fn load_balancer_ingress(service: &Value) -> String {
    let mut result: Vec<&str> = list(service, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| match (text(i, &["ip"]), text(i, &["hostname"])) {
            ("", "") => None,
            ("", host) => Some(host),
            (ip, _) => Some(ip),
        })
        .collect();
    result.sort_unstable();
    result.dedup();
    result.join(",")
}

fn external_ip(service: &Value, type_: &str) -> String {
    let external_ips = strings(service, &["spec", "externalIPs"]);
    match type_ {
        "ClusterIP" | "NodePort" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            let lb = load_balancer_ingress(service);
            if !external_ips.is_empty() {
                let mut all: Vec<String> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').map(str::to_owned).collect()
                };
                all.extend(external_ips);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_owned()
            }
        }
        "ExternalName" => text(service, &["spec", "externalName"]).to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

fn port_string(ports: &[Value]) -> String {
    ports
        .iter()
        .map(|p| {
            let port = int(p, &["port"]);
            let protocol = defaulted(p, &["protocol"], "TCP");
            match int(p, &["nodePort"]) {
                node_port if node_port > 0 => format!("{port}:{node_port}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn service(service: &Value, now: Timestamp) -> Row {
    let type_ = defaulted(service, &["spec", "type"], "ClusterIP");
    let cluster_ip = match list(service, &["spec", "clusterIPs"]).first() {
        Some(ip) => ip.as_str().unwrap_or("").to_owned(),
        None => or_none(text(service, &["spec", "clusterIP"])),
    };
    Row::of(vec![
        name(service),
        Value::from(type_),
        Value::from(cluster_ip),
        Value::from(external_ip(service, type_)),
        Value::from(or_none(&port_string(list(service, &["spec", "ports"])))),
        age(service, now),
        Value::from(format_labels(service, &["spec", "selector"])),
    ])
}

// ---------------------------------------------------------------------------------------------
// endpoints

pub(crate) const ENDPOINTS_COLUMNS: &[Column] =
    &[NAME, col("Endpoints", "string", EP_SUBSETS), AGE];

/// `host:port`, with brackets around an IPv6 host (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn format_endpoints(endpoints: &Value) -> String {
    const MAX: usize = 3;
    let subsets = list(endpoints, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut shown: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for subset in subsets {
        let addresses = list(subset, &["addresses"]);
        let ports = list(subset, &["ports"]);
        if ports.is_empty() {
            // A headless service without ports lists bare addresses.
            count += addresses.len();
            for address in addresses {
                if shown.len() == MAX {
                    more = true;
                    break;
                }
                shown.push(text(address, &["ip"]).to_owned());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for address in addresses {
                if shown.len() == MAX {
                    more = true;
                    break;
                }
                shown.push(join_host_port(text(address, &["ip"]), int(port, &["port"])));
            }
        }
    }
    let joined = shown.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

pub(crate) fn endpoints(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(format_endpoints(object)),
        age(object, now),
    ])
}

// ---------------------------------------------------------------------------------------------
// nodes

pub(crate) const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The status of the node"),
    col("Roles", "string", "The roles of the node"),
    AGE,
    col("Version", "string", NODE_KUBELET),
    wide("Internal-IP", "string", NODE_ADDRESSES),
    wide("External-IP", "string", NODE_ADDRESSES),
    wide("OS-Image", "string", NODE_OS_IMAGE),
    wide("Kernel-Version", "string", NODE_KERNEL),
    wide("Container-Runtime", "string", NODE_RUNTIME),
];

/// Roles from `node-role.kubernetes.io/<role>` label keys and the `kubernetes.io/role` label's
/// value, sorted and de-duplicated.
fn node_roles(node: &Value) -> String {
    let mut roles: Vec<&str> = string_map(node, &["metadata", "labels"])
        .into_iter()
        .filter_map(|(key, value)| {
            if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then_some(role)
            } else {
                (key == "kubernetes.io/role" && !value.is_empty()).then_some(value)
            }
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    or_none(&roles.join(","))
}

fn node_address(node: &Value, type_: &str) -> String {
    list(node, &["status", "addresses"])
        .iter()
        .find(|a| text(a, &["type"]) == type_)
        .map_or_else(|| "<none>".to_owned(), |a| text(a, &["address"]).to_owned())
}

fn or_unknown(value: &str) -> String {
    if value.is_empty() {
        "<unknown>".to_owned()
    } else {
        value.to_owned()
    }
}

pub(crate) fn node(node: &Value, now: Timestamp) -> Row {
    // The last `Ready` condition counts, as upstream keys conditions by type.
    let ready = list(node, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| text(c, &["type"]) == "Ready");
    let mut status = vec![match ready {
        Some(c) if text(c, &["status"]) == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if flag(node, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled");
    }
    let info = |field: &str| text(node, &["status", "nodeInfo", field]);
    Row::of(vec![
        name(node),
        Value::from(status.join(",")),
        Value::from(node_roles(node)),
        age(node, now),
        Value::from(info("kubeletVersion")),
        Value::from(node_address(node, "InternalIP")),
        Value::from(node_address(node, "ExternalIP")),
        Value::from(or_unknown(info("osImage"))),
        Value::from(or_unknown(info("kernelVersion"))),
        Value::from(or_unknown(info("containerRuntimeVersion"))),
    ])
}

// ---------------------------------------------------------------------------------------------
// events (core/v1 and events.k8s.io/v1)

pub(crate) const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen", "string", EV_LAST),
    col("Type", "string", EV_TYPE),
    col("Reason", "string", EV_REASON),
    col("Object", "string", EV_OBJECT),
    wide("Subobject", "string", EV_SUBOBJECT),
    wide("Source", "string", EV_SOURCE),
    col("Message", "string", EV_MESSAGE),
    wide("First Seen", "string", EV_FIRST),
    wide("Count", "string", EV_COUNT),
    Column {
        priority: 1,
        ..NAME
    },
];

/// Where an event's fields live: `core/v1` and `events.k8s.io/v1` name them differently.
struct EventFields {
    involved: &'static str,
    message: &'static str,
    source: &'static str,
    first: &'static str,
    last: &'static str,
    count: &'static str,
}

const CORE_EVENT: EventFields = EventFields {
    involved: "involvedObject",
    message: "message",
    source: "source",
    first: "firstTimestamp",
    last: "lastTimestamp",
    count: "count",
};

const EVENTS_V1_EVENT: EventFields = EventFields {
    involved: "regarding",
    message: "note",
    source: "deprecatedSource",
    first: "deprecatedFirstTimestamp",
    last: "deprecatedLastTimestamp",
    count: "deprecatedCount",
};

fn first_non_empty<'a>(first: &'a str, second: &'a str) -> &'a str {
    if first.is_empty() { second } else { first }
}

fn event_with(event: &Value, now: Timestamp, fields: &EventFields) -> Row {
    let first_timestamp = match time(event, &[fields.first]) {
        Some(ts) => since(Some(ts), now),
        None => since(micro_time(event, &["eventTime"]), now),
    };
    let mut last_timestamp = match time(event, &[fields.last]) {
        Some(ts) => since(Some(ts), now),
        None => first_timestamp.clone(),
    };
    let mut count = int(event, &[fields.count]);
    if at(event, &["series"]).is_some_and(|s| !s.is_null()) {
        last_timestamp = since(micro_time(event, &["series", "lastObservedTime"]), now);
        count = int(event, &["series", "count"]);
    } else if count == 0 {
        // Singleton events of the newer API carry no count.
        count = 1;
    }
    let kind = text(event, &[fields.involved, "kind"]).to_lowercase();
    let target = match text(event, &[fields.involved, "name"]) {
        "" => kind,
        object => format!("{kind}/{object}"),
    };
    let component = first_non_empty(
        text(event, &[fields.source, "component"]),
        text(event, &["reportingController"]),
    );
    let host = first_non_empty(
        text(event, &[fields.source, "host"]),
        text(event, &["reportingInstance"]),
    );
    let source = if host.is_empty() {
        component.to_owned()
    } else {
        format!("{component}, {host}")
    };
    Row::of(vec![
        Value::from(last_timestamp),
        Value::from(text(event, &["type"])),
        Value::from(text(event, &["reason"])),
        Value::from(target),
        Value::from(text(event, &[fields.involved, "fieldPath"])),
        Value::from(source),
        Value::from(text(event, &[fields.message]).trim()),
        Value::from(first_timestamp),
        Value::from(count),
        name(event),
    ])
}

pub(crate) fn event(event: &Value, now: Timestamp) -> Row {
    event_with(event, now, &CORE_EVENT)
}

pub(crate) fn events_v1_event(event: &Value, now: Timestamp) -> Row {
    event_with(event, now, &EVENTS_V1_EVENT)
}

// ---------------------------------------------------------------------------------------------
// namespaces, secrets, serviceaccounts, configmaps

pub(crate) const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The status of the namespace"),
    AGE,
];

pub(crate) fn namespace(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(defaulted(object, &["status", "phase"], "Active")),
        age(object, now),
    ])
}

pub(crate) const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", SECRET_TYPE),
    col("Data", "string", SECRET_DATA),
    AGE,
];

pub(crate) fn secret(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(defaulted(object, &["type"], "Opaque")),
        Value::from(len(object, &["data"])),
        age(object, now),
    ])
}

pub(crate) const SERVICE_ACCOUNT_COLUMNS: &[Column] =
    &[NAME, col("Secrets", "string", SA_SECRETS), AGE];

pub(crate) fn service_account(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(len(object, &["secrets"])),
        age(object, now),
    ])
}

pub(crate) const CONFIG_MAP_COLUMNS: &[Column] = &[NAME, col("Data", "string", CM_DATA), AGE];

pub(crate) fn config_map(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(len(object, &["data"]) + len(object, &["binaryData"])),
        age(object, now),
    ])
}

// ---------------------------------------------------------------------------------------------
// resourcequotas

pub(crate) const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Request",
        "string",
        "Request represents a minimum amount of cpu/memory that a container may consume.",
    ),
    col(
        "Limit",
        "string",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
    AGE,
];

pub(crate) fn resource_quota(object: &Value, now: Timestamp) -> Row {
    let hard = at(object, &["status", "hard"]).and_then(Value::as_object);
    let used = at(object, &["status", "used"]);
    let mut resources: Vec<&String> = hard.map(|h| h.keys().collect()).unwrap_or_default();
    resources.sort_unstable();
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for resource in resources {
        let entry = format!(
            "{resource}: {}/{}",
            quantity_string(used.and_then(|u| u.get(resource.as_str()))),
            quantity_string(hard.and_then(|h| h.get(resource.as_str()))),
        );
        let mut pieces = resource.split('.');
        if pieces.next() == Some("limits") && pieces.next().is_some() {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    Row::of(vec![
        name(object),
        Value::from(requests.join(", ")),
        Value::from(limits.join(", ")),
        age(object, now),
    ])
}

// ---------------------------------------------------------------------------------------------
// persistentvolumes, persistentvolumeclaims

pub(crate) const PERSISTENT_VOLUME_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity", "string", PV_CAPACITY),
    col("Access Modes", "string", PV_ACCESS_MODES),
    col("Reclaim Policy", "string", PV_RECLAIM),
    col("Status", "string", PV_PHASE),
    col("Claim", "string", PV_CLAIM),
    col("StorageClass", "string", "StorageClass of the pv"),
    col(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pv",
    ),
    col("Reason", "string", PV_REASON),
    AGE,
    wide("VolumeMode", "string", PV_VOLUME_MODE),
];

/// Access modes as upstream abbreviates them, always in the order RWO, ROX, RWX, RWOP.
fn access_modes(object: &Value, path: &[&str]) -> String {
    let modes = list(object, path);
    let has = |mode: &str| modes.iter().any(|m| m.as_str() == Some(mode));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The beta storage class annotation, which wins over the spec field.
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn storage_class(object: &Value) -> String {
    match at(object, &["metadata", "annotations", BETA_STORAGE_CLASS]) {
        Some(class) => class.as_str().unwrap_or("").to_owned(),
        None => text(object, &["spec", "storageClassName"]).to_owned(),
    }
}

fn phase_or_terminating<'a>(object: &'a Value, default: &'a str) -> &'a str {
    if at(object, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null()) {
        "Terminating"
    } else {
        defaulted(object, &["status", "phase"], default)
    }
}

pub(crate) fn persistent_volume(object: &Value, now: Timestamp) -> Row {
    let claim = match at(object, &["spec", "claimRef"]) {
        Some(claim) if !claim.is_null() => {
            format!("{}/{}", text(claim, &["namespace"]), text(claim, &["name"]))
        }
        _ => String::new(),
    };
    Row::of(vec![
        name(object),
        Value::from(quantity_string(at(
            object,
            &["spec", "capacity", "storage"],
        ))),
        Value::from(access_modes(object, &["spec", "accessModes"])),
        Value::from(defaulted(
            object,
            &["spec", "persistentVolumeReclaimPolicy"],
            "Retain",
        )),
        Value::from(phase_or_terminating(object, "Pending")),
        Value::from(claim),
        Value::from(storage_class(object)),
        Value::from(opt_text(object, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        Value::from(text(object, &["status", "reason"])),
        age(object, now),
        Value::from(opt_text(object, &["spec", "volumeMode"]).unwrap_or("Filesystem")),
    ])
}

pub(crate) const PERSISTENT_VOLUME_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", PVC_PHASE),
    col("Volume", "string", PVC_VOLUME),
    col("Capacity", "string", PVC_CAPACITY),
    col("Access Modes", "string", PVC_ACCESS_MODES),
    col("StorageClass", "string", "StorageClass of the pvc"),
    col(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pvc",
    ),
    AGE,
    wide("VolumeMode", "string", PVC_VOLUME_MODE),
];

pub(crate) fn persistent_volume_claim(object: &Value, now: Timestamp) -> Row {
    let volume = text(object, &["spec", "volumeName"]);
    // Capacity and access modes are only shown once the claim is bound to a volume.
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity_string(at(object, &["status", "capacity", "storage"])),
            access_modes(object, &["status", "accessModes"]),
        )
    };
    let class = match at(object, &["metadata", "annotations", BETA_STORAGE_CLASS]) {
        Some(class) => class.as_str().unwrap_or(""),
        None => text(object, &["spec", "storageClassName"]),
    };
    Row::of(vec![
        name(object),
        Value::from(phase_or_terminating(object, "Pending")),
        Value::from(volume),
        Value::from(capacity),
        Value::from(modes),
        Value::from(class),
        Value::from(opt_text(object, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        age(object, now),
        Value::from(opt_text(object, &["spec", "volumeMode"]).unwrap_or("Filesystem")),
    ])
}
