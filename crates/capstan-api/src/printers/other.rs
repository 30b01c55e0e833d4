//! Printers for the smaller groups: `coordination.k8s.io/v1` leases, `discovery.k8s.io/v1`
//! endpoint slices, `policy/v1` pod disruption budgets, `scheduling.k8s.io/v1` priority
//! classes, `storage.k8s.io/v1` storage classes and CSI drivers, and the others.

use jiff::Timestamp;
use serde_json::Value;

use super::descriptions::*;
use super::format::{
    age, at, flag, format_label_selector, int, int_or_string, list, list_with_more, name, opt_flag,
    opt_int, opt_text, text,
};
use super::quantity::quantity_string;
use super::{AGE, Column, NAME, Row, col, wide};

pub(crate) const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    col("Role", "string", RB_ROLE),
    AGE,
    wide("Users", "string", RB_USERS),
    wide("Groups", "string", RB_GROUPS),
    wide("ServiceAccounts", "string", RB_SERVICE_ACCOUNTS),
];

/// A RoleBinding or ClusterRoleBinding: `Kind/name` of its role, then its subjects by kind
/// (service accounts as `namespace/name`).
pub(crate) fn role_binding(object: &Value, now: Timestamp) -> Row {
    let role = format!(
        "{}/{}",
        text(object, &["roleRef", "kind"]),
        text(object, &["roleRef", "name"])
    );
    let (mut users, mut groups, mut accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in list(object, &["subjects"]) {
        let name = text(subject, &["name"]).to_owned();
        match text(subject, &["kind"]) {
            "User" => users.push(name),
            "Group" => groups.push(name),
            "ServiceAccount" => match opt_text(subject, &["namespace"]) {
                Some(ns) if !ns.is_empty() => accounts.push(format!("{ns}/{name}")),
                _ => accounts.push(name),
            },
            _ => {}
        }
    }
    Row::of(vec![
        name(object),
        Value::from(role),
        age(object, now),
        Value::from(users.join(", ")),
        Value::from(groups.join(", ")),
        Value::from(accounts.join(", ")),
    ])
}

pub(crate) const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    col("Class", "string", ING_CLASS),
    col("Hosts", "string", ING_HOSTS),
    col("Address", "string", ING_ADDRESS),
    col("Ports", "string", ING_PORTS),
    AGE,
];

/// An Ingress: its class, up to three hosts (`*` for none), the load balancer's addresses
/// (sorted, distinct), and `80` or `80, 443` with TLS.
pub(crate) fn ingress(object: &Value, now: Timestamp) -> Row {
    let rules = list(object, &["spec", "rules"]);
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == 3 {
            more = true;
        }
        let host = text(rule, &["host"]);
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    let hosts = if hosts.is_empty() {
        "*".to_owned()
    } else if more {
        format!("{} + {} more...", hosts.join(","), rules.len() - 3)
    } else {
        hosts.join(",")
    };
    let mut addresses: Vec<&str> = list(object, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| opt_text(i, &["ip"]).or_else(|| opt_text(i, &["hostname"])))
        .filter(|a| !a.is_empty())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let ports = if list(object, &["spec", "tls"]).is_empty() {
        "80"
    } else {
        "80, 443"
    };
    Row::of(vec![
        name(object),
        Value::from(opt_text(object, &["spec", "ingressClassName"]).unwrap_or("<none>")),
        Value::from(hosts),
        Value::from(addresses.join(",")),
        Value::from(ports),
        age(object, now),
    ])
}

pub(crate) const INGRESS_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Controller", "string", IC_CONTROLLER),
    col("Parameters", "string", IC_PARAMETERS),
    AGE,
];

/// An IngressClass: its controller and `Kind[.apiGroup]/name` of its parameters.
pub(crate) fn ingress_class(object: &Value, now: Timestamp) -> Row {
    let parameters = match at(object, &["spec", "parameters"]) {
        Some(p) if p.is_object() => {
            let mut text_ = text(p, &["kind"]).to_owned();
            if let Some(group) = opt_text(p, &["apiGroup"]) {
                text_ = format!("{text_}.{group}");
            }
            format!("{text_}/{}", text(p, &["name"]))
        }
        _ => "<none>".to_owned(),
    };
    Row::of(vec![
        name(object),
        Value::from(text(object, &["spec", "controller"])),
        Value::from(parameters),
        age(object, now),
    ])
}

pub(crate) const IP_ADDRESS_COLUMNS: &[Column] =
    &[NAME, col("ParentRef", "string", IPADDRESS_PARENT_REF)];

/// An IPAddress: `resource[.group]/[namespace/]name` of its parent, lowercased, then its age,
/// a cell past the columns as upstream's printer sends it.
pub(crate) fn ip_address(object: &Value, now: Timestamp) -> Row {
    let parent = match at(object, &["spec", "parentRef"]) {
        Some(p) if p.is_object() => {
            let resource = text(p, &["resource"]);
            let group = text(p, &["group"]);
            let mut shown = if group.is_empty() {
                resource.to_owned()
            } else {
                format!("{resource}.{group}")
            }
            .to_lowercase();
            let namespace = text(p, &["namespace"]);
            if !namespace.is_empty() {
                shown = format!("{shown}/{namespace}");
            }
            format!("{shown}/{}", text(p, &["name"]))
        }
        _ => "<none>".to_owned(),
    };
    Row::of(vec![name(object), Value::from(parent), age(object, now)])
}

pub(crate) const SERVICE_CIDR_COLUMNS: &[Column] =
    &[NAME, col("CIDRs", "string", SERVICE_CIDR_CIDRS), AGE];

/// A ServiceCIDR: its CIDRs joined by commas.
pub(crate) fn service_cidr(object: &Value, now: Timestamp) -> Row {
    let cidrs: Vec<&str> = list(object, &["spec", "cidrs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    Row::of(vec![
        name(object),
        Value::from(cidrs.join(",")),
        age(object, now),
    ])
}

pub(crate) const NETWORK_POLICY_COLUMNS: &[Column] =
    &[NAME, col("Pod-Selector", "string", NP_POD_SELECTOR), AGE];

/// A NetworkPolicy: its pod selector.
pub(crate) fn network_policy(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(format_label_selector(at(object, &["spec", "podSelector"]))),
        age(object, now),
    ])
}

pub(crate) const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Provisioner", "string", SC_PROVISIONER),
    col("ReclaimPolicy", "string", SC_RECLAIM),
    col("VolumeBindingMode", "string", SC_BINDING),
    col("AllowVolumeExpansion", "string", SC_EXPANSION),
    AGE,
];

/// A StorageClass: `(default)` after the name of the default class, its provisioner, reclaim
/// policy and binding mode (upstream's defaults when unset) and whether volumes may grow.
pub(crate) fn storage_class(object: &Value, now: Timestamp) -> Row {
    let annotations = [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ];
    let is_default = annotations
        .iter()
        .any(|a| opt_text(object, &["metadata", "annotations", a]) == Some("true"));
    let mut class_name = text(object, &["metadata", "name"]).to_owned();
    if is_default {
        class_name.push_str(" (default)");
    }
    Row::of(vec![
        Value::from(class_name),
        Value::from(text(object, &["provisioner"])),
        Value::from(opt_text(object, &["reclaimPolicy"]).unwrap_or("Delete")),
        Value::from(opt_text(object, &["volumeBindingMode"]).unwrap_or("Immediate")),
        Value::from(flag(object, &["allowVolumeExpansion"])),
        age(object, now),
    ])
}

pub(crate) const RUNTIME_CLASS_COLUMNS: &[Column] =
    &[NAME, col("Handler", "string", RC_HANDLER), AGE];

/// A RuntimeClass: its handler.
pub(crate) fn runtime_class(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(text(object, &["handler"])),
        age(object, now),
    ])
}

pub(crate) const CSI_DRIVER_COLUMNS: &[Column] = &[
    NAME,
    col("AttachRequired", "boolean", CSI_ATTACH_REQUIRED),
    col("PodInfoOnMount", "boolean", CSI_POD_INFO_ON_MOUNT),
    col("StorageCapacity", "boolean", CSI_STORAGE_CAPACITY),
    col("TokenRequests", "string", CSI_TOKEN_REQUESTS),
    col("RequiresRepublish", "boolean", CSI_REQUIRES_REPUBLISH),
    col("Modes", "string", CSI_MODES),
    AGE,
];

/// A CSIDriver: its flags (upstream's defaults when unset), the audiences of its token
/// requests (`<unset>` without the list) and its lifecycle modes (`<none>` without any).
pub(crate) fn csi_driver(object: &Value, now: Timestamp) -> Row {
    let spec_flag = |field: &str, default: bool| {
        Value::from(opt_flag(object, &["spec", field]).unwrap_or(default))
    };
    let token_requests = match at(object, &["spec", "tokenRequests"]) {
        Some(Value::Array(requests)) => requests
            .iter()
            .map(|r| text(r, &["audience"]))
            .collect::<Vec<_>>()
            .join(","),
        _ => "<unset>".to_owned(),
    };
    let modes: Vec<&str> = list(object, &["spec", "volumeLifecycleModes"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let modes = if modes.is_empty() {
        "<none>".to_owned()
    } else {
        modes.join(",")
    };
    Row::of(vec![
        name(object),
        spec_flag("attachRequired", true),
        spec_flag("podInfoOnMount", false),
        spec_flag("storageCapacity", false),
        Value::from(token_requests),
        spec_flag("requiresRepublish", false),
        Value::from(modes),
        age(object, now),
    ])
}

pub(crate) const LEASE_COLUMNS: &[Column] = &[NAME, col("Holder", "string", LEASE_HOLDER), AGE];

pub(crate) fn lease(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(text(object, &["spec", "holderIdentity"])),
        age(object, now),
    ])
}

pub(crate) const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    col("AddressType", "string", EPS_ADDRESS_TYPE),
    col("Ports", "string", EPS_PORTS),
    col("Endpoints", "string", EPS_ENDPOINTS),
    AGE,
];

pub(crate) fn endpoint_slice(object: &Value, now: Timestamp) -> Row {
    let ports: Vec<String> = list(object, &["ports"])
        .iter()
        .map(|port| {
            match (
                at(port, &["port"]).and_then(Value::as_i64),
                opt_text(port, &["name"]),
            ) {
                (Some(number), _) => number.to_string(),
                (None, Some(port_name)) => port_name.to_owned(),
                (None, None) => "*".to_owned(),
            }
        })
        .collect();
    let addresses: Vec<String> = list(object, &["endpoints"])
        .iter()
        .flat_map(|endpoint| list(endpoint, &["addresses"]))
        .map(|address| address.as_str().unwrap_or("").to_owned())
        .collect();
    Row::of(vec![
        name(object),
        Value::from(text(object, &["addressType"])),
        Value::from(list_with_more(&ports, 3)),
        Value::from(list_with_more(&addresses, 3)),
        age(object, now),
    ])
}

pub(crate) const POD_DISRUPTION_BUDGET_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Min Available",
        "string",
        "The minimum number of pods that must be available.",
    ),
    col(
        "Max Unavailable",
        "string",
        "The maximum number of pods that may be unavailable.",
    ),
    col(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

fn int_or_string_or_na(object: &Value, path: &[&str]) -> String {
    match at(object, path) {
        Some(value) if !value.is_null() => int_or_string(value),
        _ => "N/A".to_owned(),
    }
}

pub(crate) fn pod_disruption_budget(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(int_or_string_or_na(object, &["spec", "minAvailable"])),
        Value::from(int_or_string_or_na(object, &["spec", "maxUnavailable"])),
        Value::from(int(object, &["status", "disruptionsAllowed"])),
        age(object, now),
    ])
}

pub(crate) const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Value", "integer", PC_VALUE),
    col("Global-Default", "boolean", PC_GLOBAL_DEFAULT),
    AGE,
    col("PreemptionPolicy", "string", PC_PREEMPTION),
];

pub(crate) fn priority_class(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(int(object, &["value"])),
        Value::from(flag(object, &["globalDefault"])),
        age(object, now),
        // The v1 defaults set `PreemptLowerPriority`.
        Value::from(opt_text(object, &["preemptionPolicy"]).unwrap_or("PreemptLowerPriority")),
    ])
}

pub(crate) const HPA_COLUMNS: &[Column] = &[
    NAME,
    col("Reference", "string", HPA_REFERENCE),
    col("Targets", "string", HPA_TARGETS),
    col("MinPods", "string", HPA_MIN_PODS),
    col("MaxPods", "string", HPA_MAX_PODS),
    col("Replicas", "string", HPA_REPLICAS),
    AGE,
];

/// A HorizontalPodAutoscaler (of either version, printed from its `autoscaling/v2` form): its
/// target, each metric as `current/target` (two at most), the replica bounds and count.
pub(crate) fn horizontal_pod_autoscaler(object: &Value, now: Timestamp) -> Row {
    let converted;
    let hpa = match crate::convert::conversion(
        object["apiVersion"].as_str().unwrap_or_default(),
        "HorizontalPodAutoscaler",
    )
    .and_then(|c| (c.to_hub)(object).ok())
    {
        Some(hub) => {
            converted = hub;
            &converted
        }
        None => object,
    };
    let reference = format!(
        "{}/{}",
        text(hpa, &["spec", "scaleTargetRef", "kind"]),
        text(hpa, &["spec", "scaleTargetRef", "name"])
    );
    let min =
        opt_int(hpa, &["spec", "minReplicas"]).map_or("<unset>".to_owned(), |n| n.to_string());
    Row::of(vec![
        name(object),
        Value::from(reference),
        Value::from(hpa_metrics(
            list(hpa, &["spec", "metrics"]),
            list(hpa, &["status", "currentMetrics"]),
        )),
        Value::from(min),
        Value::from(int(hpa, &["spec", "maxReplicas"])),
        Value::from(int(hpa, &["status", "currentReplicas"])),
        age(object, now),
    ])
}

/// A quantity pointer as Go prints it: `<nil>` when unset.
fn quantity_ptr(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "<nil>".to_owned(),
        some => quantity_string(some),
    }
}

/// Upstream's `formatHPAMetrics`: each metric's current value (from the status at the same
/// index) against its target.
fn hpa_metrics(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".to_owned();
    }
    let status = |i: usize, source: &str| statuses.get(i).and_then(|s| at(s, &[source]));
    let unknown = || "<unknown>".to_owned();
    let items: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| match text(spec, &["type"]) {
            "External" => {
                let target = &spec["external"]["target"];
                match at(target, &["averageValue"]) {
                    Some(average) if !average.is_null() => {
                        let current = status(i, "external")
                            .and_then(|s| at(s, &["current", "averageValue"]))
                            .map_or_else(unknown, |q| quantity_ptr(Some(q)));
                        format!("{current}/{} (avg)", quantity_ptr(Some(average)))
                    }
                    _ => {
                        let current = status(i, "external")
                            .map_or_else(unknown, |s| quantity_ptr(at(s, &["current", "value"])));
                        format!("{current}/{}", quantity_ptr(at(target, &["value"])))
                    }
                }
            }
            "Pods" => {
                let current = status(i, "pods").map_or_else(unknown, |s| {
                    quantity_ptr(at(s, &["current", "averageValue"]))
                });
                format!(
                    "{current}/{}",
                    quantity_ptr(at(spec, &["pods", "target", "averageValue"]))
                )
            }
            "Object" => {
                let target = &spec["object"]["target"];
                match at(target, &["averageValue"]) {
                    Some(average) if !average.is_null() => {
                        let current = status(i, "object")
                            .and_then(|s| at(s, &["current", "averageValue"]))
                            .map_or_else(unknown, |q| quantity_ptr(Some(q)));
                        format!("{current}/{} (avg)", quantity_ptr(Some(average)))
                    }
                    _ => {
                        let current = status(i, "object")
                            .map_or_else(unknown, |s| quantity_ptr(at(s, &["current", "value"])));
                        format!("{current}/{}", quantity_ptr(at(target, &["value"])))
                    }
                }
            }
            kind @ ("Resource" | "ContainerResource") => {
                let source = if kind == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let resource = text(spec, &[source, "name"]);
                let target = &spec[source]["target"];
                match at(target, &["averageValue"]) {
                    Some(average) if !average.is_null() => {
                        let current = status(i, source).map_or_else(unknown, |s| {
                            quantity_ptr(at(s, &["current", "averageValue"]))
                        });
                        format!("{resource}: {current}/{}", quantity_ptr(Some(average)))
                    }
                    _ => {
                        let current = status(i, source)
                            .and_then(|s| opt_int(s, &["current", "averageUtilization"]))
                            .map_or_else(unknown, |n| format!("{n}%"));
                        let target = opt_int(target, &["averageUtilization"])
                            .map_or("<auto>".to_owned(), |n| format!("{n}%"));
                        format!("{resource}: {current}/{target}")
                    }
                }
            }
            _ => "<unknown type>".to_owned(),
        })
        .collect();
    if items.len() > 2 {
        return format!("{} + {} more...", items[..2].join(", "), items.len() - 2);
    }
    items.join(", ")
}

pub(crate) const FLOW_SCHEMA_COLUMNS: &[Column] = &[
    NAME,
    col("PriorityLevel", "string", FS_PRIORITY_LEVEL),
    col("MatchingPrecedence", "string", FS_MATCHING_PRECEDENCE),
    col("DistinguisherMethod", "string", FS_DISTINGUISHER),
    AGE,
    col("MissingPL", "string", FS_MISSING_PL),
];

/// A FlowSchema: its priority level, precedence, distinguisher, and whether the level is
/// missing (its `Dangling` condition, `?` before the server has judged it).
pub(crate) fn flow_schema(object: &Value, now: Timestamp) -> Row {
    let dangling = list(object, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == "Dangling")
        .map_or("?", |c| text(c, &["status"]));
    Row::of(vec![
        name(object),
        Value::from(text(
            object,
            &["spec", "priorityLevelConfiguration", "name"],
        )),
        Value::from(int(object, &["spec", "matchingPrecedence"])),
        Value::from(opt_text(object, &["spec", "distinguisherMethod", "type"]).unwrap_or("<none>")),
        age(object, now),
        Value::from(dangling),
    ])
}

pub(crate) const PRIORITY_LEVEL_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", PL_TYPE),
    col("NominalConcurrencyShares", "string", PL_NCS),
    col("Queues", "string", PL_QUEUES),
    col("HandSize", "string", PL_HAND_SIZE),
    col("QueueLengthLimit", "string", PL_QUEUE_LENGTH_LIMIT),
    AGE,
];

/// A PriorityLevelConfiguration: its type, and for limited levels their shares and queuing
/// (`<none>` where there is none).
pub(crate) fn priority_level(object: &Value, now: Timestamp) -> Row {
    let none = || Value::from("<none>");
    let limited = at(object, &["spec", "limited"]).filter(|l| l.is_object());
    let queuing = limited
        .and_then(|l| at(l, &["limitResponse", "queuing"]))
        .filter(|q| q.is_object());
    let number = |v: Option<&Value>, path: &[&str]| {
        v.map_or_else(none, |v| Value::from(opt_int(v, path).unwrap_or(0)))
    };
    Row::of(vec![
        name(object),
        Value::from(text(object, &["spec", "type"])),
        number(limited, &["nominalConcurrencyShares"]),
        number(queuing, &["queues"]),
        number(queuing, &["handSize"]),
        number(queuing, &["queueLengthLimit"]),
        age(object, now),
    ])
}

pub(crate) const WEBHOOK_CONFIGURATION_COLUMNS: &[Column] =
    &[NAME, col("Webhooks", "integer", WEBHOOKS), AGE];

/// A Mutating- or ValidatingWebhookConfiguration: how many webhooks it registers.
pub(crate) fn webhook_configuration(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(list(object, &["webhooks"]).len()),
        age(object, now),
    ])
}

pub(crate) const ADMISSION_POLICY_COLUMNS: &[Column] = &[
    NAME,
    col("Validations", "integer", VALIDATIONS),
    col("ParamKind", "string", PARAM_KIND),
    AGE,
];

/// A ValidatingAdmissionPolicy: how many validations, and the `apiVersion/kind` of its
/// parameters.
pub(crate) fn admission_policy(object: &Value, now: Timestamp) -> Row {
    let param_kind = match at(object, &["spec", "paramKind"]) {
        Some(kind) if !kind.is_null() => {
            format!("{}/{}", text(kind, &["apiVersion"]), text(kind, &["kind"]))
        }
        _ => "<unset>".to_owned(),
    };
    Row::of(vec![
        name(object),
        Value::from(list(object, &["spec", "validations"]).len()),
        Value::from(param_kind),
        age(object, now),
    ])
}

pub(crate) const ADMISSION_POLICY_BINDING_COLUMNS: &[Column] = &[
    NAME,
    col("PolicyName", "string", POLICY_NAME),
    col("ParamRef", "string", PARAM_REF),
    AGE,
];

/// A ValidatingAdmissionPolicyBinding: its policy, and its parameters: `namespace/name` (`*/name`
/// without a namespace), or the selector as Go prints the struct.
pub(crate) fn admission_policy_binding(object: &Value, now: Timestamp) -> Row {
    let param = match at(object, &["spec", "paramRef"]).filter(|r| !r.is_null()) {
        None => "<unset>".to_owned(),
        Some(reference) => match (
            text(reference, &["name"]),
            at(reference, &["selector"]).filter(|s| !s.is_null()),
        ) {
            ("", Some(selector)) => go_struct_selector(selector),
            ("", None) => "<unset>".to_owned(),
            (name, _) => match text(reference, &["namespace"]) {
                "" => format!("*/{name}"),
                namespace => format!("{namespace}/{name}"),
            },
        },
    };
    Row::of(vec![
        name(object),
        Value::from(text(object, &["spec", "policyName"])),
        Value::from(param),
        age(object, now),
    ])
}

/// A `metav1.LabelSelector` as its generated Go `String()` prints it.
fn go_struct_selector(selector: &Value) -> String {
    let mut labels: Vec<(&str, &str)> = super::format::string_map(selector, &["matchLabels"]);
    labels.sort_unstable();
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {v},")).collect();
    let expressions: String = list(selector, &["matchExpressions"])
        .iter()
        .map(|e| {
            let values: Vec<&str> = list(e, &["values"])
                .iter()
                .map(|v| v.as_str().unwrap_or_default())
                .collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                text(e, &["key"]),
                text(e, &["operator"]),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

pub(crate) const API_SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Service", "string", API_SERVICE_SERVICE),
    col("Available", "string", API_SERVICE_AVAILABLE),
    AGE,
];

/// An APIService: `namespace/name` of its Service (`Local` without one), and its `Available`
/// condition (`True`, or the status with its reason, `Unknown` without one).
pub(crate) fn api_service(object: &Value, now: Timestamp) -> Row {
    let service = match at(object, &["spec", "service"]).filter(|s| !s.is_null()) {
        Some(service) => format!(
            "{}/{}",
            text(service, &["namespace"]),
            text(service, &["name"])
        ),
        None => "Local".to_owned(),
    };
    let available = list(object, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == "Available")
        .map_or_else(
            || "Unknown".to_owned(),
            |c| match (text(c, &["status"]), text(c, &["reason"])) {
                ("True", _) | (_, "") => text(c, &["status"]).to_owned(),
                (status, reason) => format!("{status} ({reason})"),
            },
        );
    Row::of(vec![
        name(object),
        Value::from(service),
        Value::from(available),
        age(object, now),
    ])
}

pub(crate) const CERTIFICATE_SIGNING_REQUEST_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    col("SignerName", "string", CSR_SIGNER_NAME),
    col("Requestor", "string", CSR_REQUESTOR),
    col("RequestedDuration", "string", CSR_REQUESTED_DURATION),
    col("Condition", "string", CSR_CONDITION),
];

/// A CertificateSigningRequest: its signer, who asked, the duration asked for and its state
/// (`Approved`, `Denied` or `Pending`, then `,Failed` and `,Issued` as they apply).
pub(crate) fn certificate_signing_request(object: &Value, now: Timestamp) -> Row {
    let signer = opt_text(object, &["spec", "signerName"])
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let duration = opt_int(object, &["spec", "expirationSeconds"]).map_or_else(
        || "<none>".to_owned(),
        |s| super::format::human_duration(s.saturating_mul(1_000_000_000)),
    );
    let (mut approved, mut denied, mut failed) = (false, false, false);
    for condition in list(object, &["status", "conditions"]) {
        match text(condition, &["type"]) {
            "Approved" => approved = true,
            "Denied" => denied = true,
            "Failed" => failed = true,
            _ => {}
        }
    }
    let mut state = if denied {
        "Denied"
    } else if approved {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if failed {
        state.push_str(",Failed");
    }
    if !text(object, &["status", "certificate"]).is_empty() {
        state.push_str(",Issued");
    }
    Row::of(vec![
        name(object),
        age(object, now),
        Value::from(signer),
        Value::from(text(object, &["spec", "username"])),
        Value::from(duration),
        Value::from(state),
    ])
}
