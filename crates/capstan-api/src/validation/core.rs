//! The smaller core/v1 kinds: Namespaces, ConfigMaps, Secrets, ServiceAccounts, Endpoints,
//! ReplicationControllers, LimitRanges, ResourceQuotas and Events.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, LimitRange, Namespace, ReplicationController, ResourceQuota,
    Secret, ServiceAccount,
};

use crate::field::{BadValue, FieldError, Path};
use crate::quantity::Quantity;
use crate::validation::meta::{
    FIELD_IMMUTABLE, ReplicaCounts, go_string_map, go_string_slice, require_resource_version,
    validate_finalizer_name, validate_kube_finalizer_name, validate_nonnegative,
    validate_object_meta, validate_object_meta_update, validate_replica_counts,
};
use crate::validation::names::{
    NameValidator, is_config_map_key, is_dns1123_subdomain, validate_dns1123_label,
    validate_ip_legacy, validate_qualified_name,
};
use crate::validation::pod::{PORT_PROTOCOLS, PodValidationOptions, validate_pod_template_spec};
use crate::validation::resources::{
    is_overcommit_allowed, parse_resource_list, validate_container_resource_name,
    validate_resource_name, validate_resource_quantity_value,
    validate_resource_quota_resource_name,
};

/// The most bytes a ConfigMap's or Secret's data may hold (1 MiB).
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn meta() -> Path {
    Path::new("metadata")
}

/// A Namespace (cluster-scoped, DNS-label name) and its spec finalizers.
pub fn validate_namespace(ns: &Namespace) -> Vec<FieldError> {
    let mut errs = validate_object_meta(&ns.metadata, false, NameValidator::DnsLabel, &meta());
    let path = Path::new("spec").child("finalizers");
    for finalizer in ns.spec.iter().flat_map(|s| s.finalizers.iter().flatten()) {
        errs.extend(validate_finalizer_name(finalizer, &path));
        errs.extend(validate_kube_finalizer_name(finalizer, &path));
    }
    errs
}

/// An update of a Namespace (metadata rules only; spec changes go through `finalize`).
pub fn validate_namespace_update(new: &Namespace, old: &Namespace) -> Vec<FieldError> {
    validate_object_meta_update(&new.metadata, &old.metadata, &meta())
}

/// An update of a Namespace's status subresource: the phase is `Active` until deletion begins
/// and `Terminating` after. Upstream names the field `status.Phase`.
pub fn validate_namespace_status_update(new: &Namespace, old: &Namespace) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    let phase = new
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let path = Path::new("status").child("Phase");
    if new.metadata.deletion_timestamp.is_none() {
        if phase != "Active" {
            errs.push(FieldError::invalid(
                &path,
                phase,
                "may only be 'Active' if `deletionTimestamp` is empty",
            ));
        }
    } else if phase != "Terminating" {
        errs.push(FieldError::invalid(
            &path,
            phase,
            "may only be 'Terminating' if `deletionTimestamp` is not empty",
        ));
    }
    errs
}

/// An update through a Namespace's `finalize` subresource: each of `spec.finalizers` is a
/// qualified name, standard when unprefixed (named by index, unlike on create).
pub fn validate_namespace_finalize_update(new: &Namespace, old: &Namespace) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    let path = Path::new("spec").child("finalizers");
    for (i, finalizer) in new
        .spec
        .iter()
        .flat_map(|s| s.finalizers.iter().flatten())
        .enumerate()
    {
        errs.extend(validate_finalizer_name(finalizer, &path.index(i)));
        errs.extend(validate_kube_finalizer_name(finalizer, &path.index(i)));
    }
    errs
}

/// A ConfigMap: keys are config-map keys, not repeated across data and binaryData, and all values
/// together hold at most 1 MiB.
pub fn validate_config_map(cm: &ConfigMap) -> Vec<FieldError> {
    let mut errs = validate_object_meta(&cm.metadata, true, NameValidator::DnsSubdomain, &meta());
    let mut total = 0usize;
    let binary = cm.binary_data.clone().unwrap_or_default();
    for (key, value) in cm.data.iter().flatten() {
        let p = Path::new("data").key(key);
        for msg in is_config_map_key(key) {
            errs.push(FieldError::invalid(&p, key.as_str(), &msg));
        }
        if binary.contains_key(key) {
            errs.push(FieldError::invalid(
                &p,
                key.as_str(),
                "duplicate of key present in binaryData",
            ));
        }
        total += value.len();
    }
    for (key, value) in &binary {
        for msg in is_config_map_key(key) {
            errs.push(FieldError::invalid(
                &Path::new("binaryData").key(key),
                key.as_str(),
                &msg,
            ));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&Path::new(""), MAX_SECRET_SIZE));
    }
    errs
}

/// An update of a ConfigMap: immutable ones keep their data.
pub fn validate_config_map_update(new: &ConfigMap, old: &ConfigMap) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    if old.immutable == Some(true) {
        let msg = "field is immutable when `immutable` is set";
        if new.immutable != Some(true) {
            errs.push(FieldError::forbidden(&Path::new("immutable"), msg));
        }
        if new.data.clone().unwrap_or_default() != old.data.clone().unwrap_or_default() {
            errs.push(FieldError::forbidden(&Path::new("data"), msg));
        }
        if new.binary_data.clone().unwrap_or_default()
            != old.binary_data.clone().unwrap_or_default()
        {
            errs.push(FieldError::forbidden(&Path::new("binaryData"), msg));
        }
    }
    errs.extend(validate_config_map(new));
    errs
}

fn json_error(bytes: &[u8]) -> Option<String> {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes) {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// A Secret: keys, total size, and the keys each well-known type requires. `stringData` has
/// been folded into `data` by then (`convert::secret`), as upstream's conversion does.
pub fn validate_secret(secret: &Secret) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta(&secret.metadata, true, NameValidator::DnsSubdomain, &meta());
    let data_path = Path::new("data");
    let data = secret.data.clone().unwrap_or_default();
    let mut total = 0usize;
    for (key, value) in &data {
        for msg in is_config_map_key(key) {
            errs.push(FieldError::invalid(&data_path.key(key), key.as_str(), &msg));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&data_path, MAX_SECRET_SIZE));
    }
    let required = |key: &str, errs: &mut Vec<FieldError>| {
        if !data.contains_key(key) {
            errs.push(FieldError::required(&data_path.key(key), ""));
            false
        } else {
            true
        }
    };
    match secret.type_.as_deref().unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let key = "kubernetes.io/service-account.name";
            let name = secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key));
            if name.is_none_or(String::is_empty) {
                errs.push(FieldError::required(
                    &meta().child("annotations").key(key),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" => {
            if required(".dockercfg", &mut errs)
                && let Some(e) = data.get(".dockercfg").and_then(|v| json_error(&v.0))
            {
                errs.push(FieldError::invalid(
                    &data_path.key(".dockercfg"),
                    "<secret contents redacted>",
                    &e,
                ));
            }
        }
        "kubernetes.io/dockerconfigjson" => {
            if required(".dockerconfigjson", &mut errs)
                && let Some(e) = data.get(".dockerconfigjson").and_then(|v| json_error(&v.0))
            {
                errs.push(FieldError::invalid(
                    &data_path.key(".dockerconfigjson"),
                    "<secret contents redacted>",
                    &e,
                ));
            }
        }
        "kubernetes.io/basic-auth"
            if !data.contains_key("username") && !data.contains_key("password") =>
        {
            errs.push(FieldError::required(&data_path.key("username"), ""));
            errs.push(FieldError::required(&data_path.key("password"), ""));
        }
        "kubernetes.io/ssh-auth" if data.get("ssh-privatekey").is_none_or(|v| v.0.is_empty()) => {
            errs.push(FieldError::required(&data_path.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            required("tls.crt", &mut errs);
            required("tls.key", &mut errs);
        }
        _ => {}
    }
    errs
}

/// An update of a Secret: the type is fixed and immutable secrets keep their data.
pub fn validate_secret_update(new: &Secret, old: &Secret) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    if new.type_ != old.type_ {
        errs.push(FieldError::invalid(
            &Path::new("type"),
            new.type_.clone().unwrap_or_default(),
            FIELD_IMMUTABLE,
        ));
    }
    if old.immutable == Some(true) {
        let msg = "field is immutable when `immutable` is set";
        if new.immutable != Some(true) {
            errs.push(FieldError::forbidden(&Path::new("immutable"), msg));
        }
        if new.data.clone().unwrap_or_default() != old.data.clone().unwrap_or_default() {
            errs.push(FieldError::forbidden(&Path::new("data"), msg));
        }
    }
    errs.extend(validate_secret(new));
    errs
}

/// A ServiceAccount (namespaced, DNS-subdomain name).
pub fn validate_service_account(sa: &ServiceAccount) -> Vec<FieldError> {
    validate_object_meta(&sa.metadata, true, NameValidator::DnsSubdomain, &meta())
}

/// An update of a ServiceAccount.
pub fn validate_service_account_update(
    new: &ServiceAccount,
    old: &ServiceAccount,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(validate_service_account(new));
    errs
}

/// Endpoints: each subset has addresses (valid, non-special IPs) and valid ports.
pub fn validate_endpoints(ep: &Endpoints) -> Vec<FieldError> {
    let mut errs = validate_object_meta(&ep.metadata, true, NameValidator::DnsSubdomain, &meta());
    for (i, subset) in ep.subsets.iter().flatten().enumerate() {
        let p = Path::new("subsets").index(i);
        let addresses = subset.addresses.as_deref().unwrap_or(&[]);
        let not_ready = subset.not_ready_addresses.as_deref().unwrap_or(&[]);
        if addresses.is_empty() && not_ready.is_empty() {
            errs.push(FieldError::required(
                &p,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (list, field) in [(addresses, "addresses"), (not_ready, "notReadyAddresses")] {
            for (j, address) in list.iter().enumerate() {
                let ap = p.child(field).index(j);
                errs.extend(validate_ip_legacy(&ap.child("ip"), &address.ip));
                if let Some(hostname) = address.hostname.as_deref().filter(|h| !h.is_empty()) {
                    errs.extend(validate_dns1123_label(hostname, &ap.child("hostname")));
                }
                if let Some(node) = &address.node_name {
                    for msg in NameValidator::DnsSubdomain.validate(node, false) {
                        errs.push(FieldError::invalid(
                            &ap.child("nodeName"),
                            node.as_str(),
                            &msg,
                        ));
                    }
                }
                errs.extend(crate::validation::service::validate_non_special_ip(
                    &address.ip,
                    &ap.child("ip"),
                ));
            }
        }
        let ports = subset.ports.as_deref().unwrap_or(&[]);
        for (j, port) in ports.iter().enumerate() {
            let pp = p.child("ports").index(j);
            let name = port.name.as_deref().unwrap_or("");
            if ports.len() > 1 && name.is_empty() {
                errs.push(FieldError::required(&pp.child("name"), ""));
            } else if !name.is_empty() {
                errs.extend(validate_dns1123_label(name, &pp.child("name")));
            }
            for msg in crate::validation::names::is_valid_port_num(i64::from(port.port)) {
                errs.push(FieldError::invalid(&pp.child("port"), port.port, &msg));
            }
            match port.protocol.as_deref().unwrap_or("") {
                "" => errs.push(FieldError::required(&pp.child("protocol"), "")),
                proto if !PORT_PROTOCOLS.contains(&proto) => {
                    errs.push(FieldError::not_supported(
                        &pp.child("protocol"),
                        proto,
                        PORT_PROTOCOLS,
                    ));
                }
                _ => {}
            }
            if let Some(app) = &port.app_protocol {
                errs.extend(validate_qualified_name(app, &pp.child("appProtocol")));
            }
        }
    }
    errs
}

/// An update of Endpoints.
pub fn validate_endpoints_update(new: &Endpoints, old: &Endpoints) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(validate_endpoints(new));
    errs
}

fn validate_rc_spec(rc: &ReplicationController) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("spec");
    let spec = rc.spec.clone().unwrap_or_default();
    errs.extend(validate_nonnegative(
        i64::from(spec.min_ready_seconds.unwrap_or(0)),
        &path.child("minReadySeconds"),
    ));
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() {
        errs.push(FieldError::required(&path.child("selector"), ""));
    }
    errs.extend(validate_nonnegative(
        i64::from(spec.replicas.unwrap_or(0)),
        &path.child("replicas"),
    ));
    let tp = path.child("template");
    match &spec.template {
        None => errs.push(FieldError::required(&tp, "")),
        Some(template) => {
            let labels: BTreeMap<String, String> = template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            if !selector.is_empty() && !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                errs.push(FieldError::invalid(
                    &tp.child("metadata").child("labels"),
                    BadValue::Other(go_string_map(&labels)),
                    "`selector` does not match template `labels`",
                ));
            }
            errs.extend(validate_pod_template_spec(
                template,
                &tp,
                &PodValidationOptions::default(),
            ));
            let pod_spec = template.spec.clone().unwrap_or_default();
            let restart = pod_spec.restart_policy.clone().unwrap_or_default();
            if restart != "Always" {
                errs.push(FieldError::not_supported(
                    &tp.child("spec").child("restartPolicy"),
                    restart,
                    &["Always"],
                ));
            }
            if pod_spec.active_deadline_seconds.is_some() {
                errs.push(FieldError::forbidden(
                    &tp.child("spec").child("activeDeadlineSeconds"),
                    "activeDeadlineSeconds in ReplicationController is not Supported",
                ));
            }
        }
    }
    errs
}

/// A ReplicationController: non-empty selector matching the template's labels, non-negative
/// replicas, and a valid template that always restarts.
pub fn validate_replication_controller(rc: &ReplicationController) -> Vec<FieldError> {
    let mut errs = validate_object_meta(&rc.metadata, true, NameValidator::DnsSubdomain, &meta());
    errs.extend(validate_rc_spec(rc));
    errs
}

/// An update of a ReplicationController.
pub fn validate_replication_controller_update(
    new: &ReplicationController,
    old: &ReplicationController,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(validate_rc_spec(new));
    errs
}

/// An update of a ReplicationController's status subresource: counts are not negative and
/// no count exceeds `replicas` (nor `availableReplicas` the ready ones).
pub fn validate_replication_controller_status_update(
    new: &ReplicationController,
    old: &ReplicationController,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    let status = new.status.clone().unwrap_or_default();
    errs.extend(validate_replica_counts(
        ReplicaCounts {
            replicas: status.replicas,
            labeled: status.fully_labeled_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
        },
        &Path::new("status"),
    ));
    errs
}

/// A LimitRange: known types, no type twice, resource names per type, and min <= default request
/// <= default <= max, with ratios of at least 1.
pub fn validate_limit_range(lr: &LimitRange) -> Vec<FieldError> {
    let mut errs = validate_object_meta(&lr.metadata, true, NameValidator::DnsSubdomain, &meta());
    let path = Path::new("spec").child("limits");
    let mut types = BTreeSet::new();
    for (i, item) in lr.spec.iter().flat_map(|s| s.limits.iter()).enumerate() {
        let p = path.index(i);
        let t = item.type_.as_str();
        let type_errs = validate_qualified_name(t, &p.child("type"));
        if !type_errs.is_empty() {
            errs.extend(type_errs);
        } else if !t.contains('/') && !matches!(t, "Pod" | "Container" | "PersistentVolumeClaim") {
            errs.push(FieldError::invalid(
                &p.child("type"),
                t,
                "must be a standard limit type or fully qualified",
            ));
        }
        if !types.insert(t) {
            errs.push(FieldError::duplicate(&p.child("type"), t));
        }
        let name_check = |name: &str, path: &Path| {
            if t == "Pod" || t == "Container" {
                validate_container_resource_name(name, path)
            } else {
                validate_resource_name(name, path)
            }
        };
        let mut lists: BTreeMap<&str, BTreeMap<String, Quantity>> = BTreeMap::new();
        for (field, list) in [("max", &item.max), ("min", &item.min)] {
            let parsed = parse_resource_list(list.as_ref(), &p.child(field), &mut errs);
            for name in parsed.keys() {
                errs.extend(name_check(name, &p.child(field).key(name)));
            }
            lists.insert(field, parsed);
        }
        if t == "Pod" {
            if item.default.as_ref().is_some_and(|d| !d.is_empty()) {
                errs.push(FieldError::forbidden(
                    &p.child("default"),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
            if item.default_request.as_ref().is_some_and(|d| !d.is_empty()) {
                errs.push(FieldError::forbidden(
                    &p.child("defaultRequest"),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
        } else {
            for (field, list) in [
                ("default", &item.default),
                ("defaultRequest", &item.default_request),
            ] {
                let parsed = parse_resource_list(list.as_ref(), &p.child(field), &mut errs);
                for name in parsed.keys() {
                    errs.extend(name_check(name, &p.child(field).key(name)));
                }
                lists.insert(field, parsed);
            }
        }
        if t == "PersistentVolumeClaim" {
            let has = |field: &str| item_has(item, field);
            if !has("min") && !has("max") {
                errs.push(FieldError::required(
                    &p.child("limits"),
                    "either minimum or maximum storage value is required, but neither was provided",
                ));
            }
        }
        let ratios = parse_resource_list(
            item.max_limit_request_ratio.as_ref(),
            &p.child("maxLimitRequestRatio"),
            &mut errs,
        );
        for name in ratios.keys() {
            errs.extend(name_check(name, &p.child("maxLimitRequestRatio").key(name)));
        }
        lists.insert("maxLimitRequestRatio", ratios);
        let get = |field: &str, key: &str| lists.get(field).and_then(|l| l.get(key)).cloned();
        let keys: BTreeSet<String> = lists.values().flat_map(|l| l.keys().cloned()).collect();
        let q = |v: &Quantity| BadValue::Other(v.canonical());
        for k in &keys {
            let (min, max, default, request, ratio) = (
                get("min", k),
                get("max", k),
                get("default", k),
                get("defaultRequest", k),
                get("maxLimitRequestRatio", k),
            );
            // Each pair in upstream's order: the larger side, the smaller side, the field
            // named and the value shown.
            for (high, high_name, low, low_name, field, shown) in [
                (&min, "min", &max, "max", "min", &min),
                (
                    &min,
                    "min",
                    &request,
                    "default request",
                    "defaultRequest",
                    &request,
                ),
                (
                    &request,
                    "default request",
                    &max,
                    "max",
                    "defaultRequest",
                    &request,
                ),
                (
                    &request,
                    "default request",
                    &default,
                    "default limit",
                    "defaultRequest",
                    &request,
                ),
                (&min, "min", &default, "default", "default", &min),
                (&default, "default", &max, "max", "default", &max),
            ] {
                if let (Some(high), Some(low), Some(shown)) = (high, low, shown)
                    && high > low
                {
                    errs.push(FieldError::invalid(
                        &p.child(field).key(k),
                        q(shown),
                        &format!("{high_name} value {high} is greater than {low_name} value {low}"),
                    ));
                }
            }
            if let Some(ratio) = &ratio {
                if *ratio < Quantity::from_i64(1) {
                    errs.push(FieldError::invalid(
                        &p.child("maxLimitRequestRatio").key(k),
                        q(ratio),
                        &format!("ratio {ratio} is less than 1"),
                    ));
                }
                if let (Some(min), Some(max)) = (&min, &max) {
                    let limit = max.milli_value() as f64 / min.milli_value() as f64;
                    if ratio.milli_value() as f64 / 1000.0 > limit {
                        errs.push(FieldError::invalid(
                            &p.child("maxLimitRequestRatio").key(k),
                            q(ratio),
                            &format!("ratio {ratio} is greater than max/min = {limit:.6}"),
                        ));
                    }
                }
            }
            if let (Some(default), Some(request)) = (&default, &request)
                && !is_overcommit_allowed(k)
                && default != request
            {
                errs.push(FieldError::invalid(
                        &p.child("defaultRequest").key(k),
                        q(request),
                        &format!("default value {default} must equal to defaultRequest value {request} in {k}"),
                    ));
            }
        }
    }
    errs
}

fn item_has(item: &k8s_openapi::api::core::v1::LimitRangeItem, field: &str) -> bool {
    let list = if field == "min" { &item.min } else { &item.max };
    list.as_ref().is_some_and(|l| l.contains_key("storage"))
}

/// An update of a LimitRange.
pub fn validate_limit_range_update(new: &LimitRange, old: &LimitRange) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(validate_limit_range(new));
    errs
}

const QUOTA_SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

fn scope_valid_for(scope: &str, resource: &str) -> bool {
    const COMPUTE: &[&str] = &[
        "cpu",
        "memory",
        "limits.cpu",
        "limits.memory",
        "requests.cpu",
        "requests.memory",
    ];
    match scope {
        "BestEffort" => resource == "pods",
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => resource == "pods" || COMPUTE.contains(&resource),
        _ => true,
    }
}

fn validate_quota_lists(quota: &ResourceQuota, errs: &mut Vec<FieldError>) {
    validate_quota_list(
        quota.spec.as_ref().and_then(|s| s.hard.as_ref()),
        &Path::new("spec").child("hard"),
        errs,
    );
    validate_quota_status_lists(quota, errs);
}

fn validate_quota_status_lists(quota: &ResourceQuota, errs: &mut Vec<FieldError>) {
    let status = quota.status.as_ref();
    validate_quota_list(
        status.and_then(|s| s.hard.as_ref()),
        &Path::new("status").child("hard"),
        errs,
    );
    validate_quota_list(
        status.and_then(|s| s.used.as_ref()),
        &Path::new("status").child("used"),
        errs,
    );
}

/// Quota resource names and their quantities in one list at `path`.
fn validate_quota_list(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let parsed = parse_resource_list(list, path, errs);
    for (name, q) in &parsed {
        let p = path.key(name);
        errs.extend(validate_resource_quota_resource_name(name, &p));
        errs.extend(validate_resource_quantity_value(name, q, &p));
    }
}

/// A ResourceQuota: quota resource names, quantities, and scopes valid for its resources.
pub fn validate_resource_quota(quota: &ResourceQuota) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta(&quota.metadata, true, NameValidator::DnsSubdomain, &meta());
    validate_quota_lists(quota, &mut errs);
    let spec = quota.spec.clone().unwrap_or_default();
    let hard: Vec<String> = spec.hard.clone().unwrap_or_default().into_keys().collect();
    let scopes = spec.scopes.clone().unwrap_or_default();
    let scopes_path = Path::new("spec").child("scopes");
    let shown = || BadValue::Other(go_string_slice(&scopes));
    let standard = |k: &str| crate::validation::resources::is_standard_quota_resource_name(k);
    for scope in &scopes {
        if !QUOTA_SCOPES.contains(&scope.as_str()) {
            errs.push(FieldError::invalid(
                &scopes_path,
                shown(),
                "unsupported scope",
            ));
        }
        for k in &hard {
            if standard(k) && !scope_valid_for(scope, k) {
                errs.push(FieldError::invalid(
                    &scopes_path,
                    shown(),
                    "unsupported scope applied to resource",
                ));
            }
        }
    }
    let has = |s: &str, list: &[String]| list.iter().any(|x| x == s);
    for (a, b) in [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ] {
        if has(a, &scopes) && has(b, &scopes) {
            errs.push(FieldError::invalid(
                &scopes_path,
                shown(),
                "conflicting scopes",
            ));
        }
    }
    if let Some(selector) = &spec.scope_selector {
        let p = Path::new("spec")
            .child("scopeSelector")
            .child("matchExpressions");
        let mut names = Vec::new();
        for req in selector.match_expressions.iter().flatten() {
            if !QUOTA_SCOPES.contains(&req.scope_name.as_str()) {
                errs.push(FieldError::invalid(
                    &p.child("scopeName"),
                    req.scope_name.as_str(),
                    "unsupported scope",
                ));
            }
            for k in &hard {
                if standard(k) && !scope_valid_for(&req.scope_name, k) {
                    errs.push(FieldError::invalid(
                        &p,
                        BadValue::Omitted,
                        "unsupported scope applied to resource",
                    ));
                }
            }
            if req.scope_name != "PriorityClass"
                && QUOTA_SCOPES.contains(&req.scope_name.as_str())
                && req.operator != "Exists"
            {
                errs.push(FieldError::invalid(
                    &p.child("operator"),
                    req.operator.as_str(),
                    "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
                ));
            }
            let values = req.values.as_deref().unwrap_or(&[]);
            match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                    &p.child("values"),
                    "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                )),
                "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid(
                    &p.child("values"),
                    BadValue::Other(go_string_slice(values)),
                    "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => errs.push(FieldError::invalid(&p.child("operator"), other, "not a valid selector operator")),
            }
            names.push(req.scope_name.clone());
        }
        for (a, b) in [
            ("BestEffort", "NotBestEffort"),
            ("Terminating", "NotTerminating"),
        ] {
            if has(a, &names) && has(b, &names) {
                errs.push(FieldError::invalid(&p, shown(), "conflicting scopes"));
            }
        }
    }
    errs
}

/// An update of a ResourceQuota: scopes are fixed.
pub fn validate_resource_quota_update(new: &ResourceQuota, old: &ResourceQuota) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(
        validate_resource_quota(new)
            .into_iter()
            .filter(|e| !e.field.starts_with("metadata")),
    );
    let scopes = |q: &ResourceQuota| -> BTreeSet<String> {
        q.spec
            .iter()
            .flat_map(|s| s.scopes.iter().flatten())
            .cloned()
            .collect()
    };
    if scopes(new) != scopes(old) {
        let list = new
            .spec
            .clone()
            .unwrap_or_default()
            .scopes
            .unwrap_or_default();
        errs.push(FieldError::invalid(
            &Path::new("spec").child("scopes"),
            BadValue::Other(go_string_slice(&list)),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// An update of a ResourceQuota's status subresource: `status.hard` and `status.used` hold
/// quota resource names with valid quantities.
pub fn validate_resource_quota_status_update(
    new: &ResourceQuota,
    old: &ResourceQuota,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta());
    errs.extend(require_resource_version(&new.metadata));
    validate_quota_status_lists(new, &mut errs);
    errs
}

/// A core/v1 Event, with upstream's legacy rules (strict rules apply only to events.k8s.io).
pub fn validate_event(event: &Event) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = event.metadata.namespace.as_deref().unwrap_or("");
    let involved_ns = event.involved_object.namespace.as_deref().unwrap_or("");
    let ns_path = Path::new("involvedObject").child("namespace");
    if event.event_time.is_none() {
        if involved_ns.is_empty() {
            if !namespace.is_empty() && namespace != "default" {
                errs.push(FieldError::invalid(
                    &ns_path,
                    involved_ns,
                    "does not match event.namespace",
                ));
            }
        } else if namespace != involved_ns {
            errs.push(FieldError::invalid(
                &ns_path,
                involved_ns,
                "does not match event.namespace",
            ));
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid(
                &ns_path,
                involved_ns,
                "does not match event.namespace",
            ));
        }
        let controller = event.reporting_component.as_deref().unwrap_or("");
        if controller.is_empty() {
            errs.push(FieldError::required(&Path::new("reportingController"), ""));
        }
        errs.extend(validate_qualified_name(
            controller,
            &Path::new("reportingController"),
        ));
        for (value, field, limit) in [
            (
                event.reporting_instance.as_deref().unwrap_or(""),
                "reportingInstance",
                128,
            ),
            (event.action.as_deref().unwrap_or(""), "action", 128),
            (event.reason.as_deref().unwrap_or(""), "reason", 128),
        ] {
            if value.is_empty() {
                errs.push(FieldError::required(&Path::new(field), ""));
            }
            if value.len() > limit {
                errs.push(FieldError::invalid(
                    &Path::new(field),
                    "",
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
        if event.message.as_deref().unwrap_or("").len() > 1024 {
            errs.push(FieldError::invalid(
                &Path::new("message"),
                "",
                "can have at most 1024 characters",
            ));
        }
    }
    for msg in is_dns1123_subdomain(namespace) {
        errs.push(FieldError::invalid(
            &Path::new("namespace"),
            namespace,
            &msg,
        ));
    }
    errs
}

/// An update of a core/v1 Event (legacy rules on the new event only).
pub fn validate_event_update(new: &Event, _old: &Event) -> Vec<FieldError> {
    validate_event(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_support::check;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(str::to_owned),
            resource_version: Some("1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn namespaces() {
        let ns = |name: &str, finalizers: Vec<&str>| Namespace {
            metadata: named(name, None),
            spec: Some(k8s_openapi::api::core::v1::NamespaceSpec {
                finalizers: Some(finalizers.into_iter().map(str::to_owned).collect()),
            }),
            status: None,
        };
        check(validate_namespace(&ns("dev", vec!["kubernetes"])), &[]);
        check(
            validate_namespace(&ns("a.b", vec!["custom"])),
            &[
                "metadata.name: Invalid value: \"a.b\": must not contain dots",
                "spec.finalizers: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
            ],
        );
    }

    #[test]
    fn config_maps_and_secrets() {
        let cm = ConfigMap {
            metadata: named("c", Some("d")),
            data: Some(BTreeMap::from([
                ("a b".into(), "x".into()),
                ("k".into(), "y".repeat(MAX_SECRET_SIZE)),
            ])),
            binary_data: Some(BTreeMap::from([("k".into(), ByteString(vec![1]))])),
            immutable: None,
        };
        check(
            validate_config_map(&cm),
            &[
                "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "data[k]: Invalid value: \"k\": duplicate of key present in binaryData",
                ": Too long: may not be more than 1048576 bytes",
            ],
        );
        let secret = |type_: &str, keys: &[&str]| Secret {
            metadata: named("s", Some("d")),
            type_: Some(type_.into()),
            data: Some(
                keys.iter()
                    .map(|k| ((*k).to_owned(), ByteString(b"{}".to_vec())))
                    .collect(),
            ),
            ..Default::default()
        };
        check(validate_secret(&secret("Opaque", &["a"])), &[]);
        check(
            validate_secret(&secret("kubernetes.io/tls", &["tls.crt"])),
            &["data[tls.key]: Required value"],
        );
        check(
            validate_secret(&secret("kubernetes.io/service-account-token", &[])),
            &["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
        );
        let mut old = secret("Opaque", &["a"]);
        old.immutable = Some(true);
        let mut new = secret("kubernetes.io/tls", &["tls.crt", "tls.key"]);
        new.immutable = Some(true);
        check(
            validate_secret_update(&new, &old),
            &[
                "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
                "data: Forbidden: field is immutable when `immutable` is set",
            ],
        );
    }

    #[test]
    fn replication_controllers() {
        let mut rc: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "rc", "namespace": "d"},
            "spec": {"replicas": -1, "selector": {"app": "x"},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        })).unwrap_or_else(|e| panic!("{e}"));
        crate::defaults::core::default_replication_controller(&mut rc);
        check(
            validate_replication_controller(&rc),
            &[
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
            ],
        );
    }

    #[test]
    fn limit_ranges_and_quotas() {
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "l", "namespace": "d"},
            "spec": {"limits": [{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}, {"type": "Bogus"}]}
        })).unwrap_or_else(|e| panic!("{e}"));
        check(
            validate_limit_range(&lr),
            &[
                "spec.limits[0].min[cpu]: Invalid value: 2: min value 2 is greater than max value 1",
                "spec.limits[1].type: Invalid value: \"Bogus\": must be a standard limit type or fully qualified",
            ],
        );
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": "d"},
            "spec": {"hard": {"pods": "1.5", "widgets": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}
        })).unwrap_or_else(|e| panic!("{e}"));
        check(
            validate_resource_quota(&quota),
            &[
                "spec.hard[pods]: Invalid value: 1500m: must be an integer",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource type or fully qualified",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource for quota",
                "spec.scopes: Invalid value: []string{\"BestEffort\", \"NotBestEffort\"}: conflicting scopes",
            ],
        );
    }

    #[test]
    fn endpoints_and_events() {
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "e", "namespace": "d"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}]
        })).unwrap_or_else(|e| panic!("{e}"));
        check(
            validate_endpoints(&ep),
            &[
                "subsets[0].addresses[0].ip: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                "subsets[0].ports[0].name: Required value",
                "subsets[0].ports[1].name: Required value",
            ],
        );
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "e", "namespace": "d"}, "involvedObject": {"namespace": "other"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        check(
            validate_event(&event),
            &["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"],
        );
    }

    #[test]
    fn namespace_status_and_finalize_updates() {
        let ns = |phase: &str, deleting: bool, finalizers: Vec<&str>| Namespace {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        "2024-01-01T00:00:00Z"
                            .parse()
                            .unwrap_or_else(|e| panic!("{e}")),
                    )
                }),
                ..named("dev", None)
            },
            spec: Some(k8s_openapi::api::core::v1::NamespaceSpec {
                finalizers: Some(finalizers.into_iter().map(str::to_owned).collect()),
            }),
            status: Some(k8s_openapi::api::core::v1::NamespaceStatus {
                phase: Some(phase.into()),
                conditions: None,
            }),
        };
        let live = ns("Active", false, vec!["kubernetes"]);
        check(validate_namespace_status_update(&live, &live), &[]);
        check(
            validate_namespace_status_update(&ns("Terminating", false, vec![]), &live),
            &[
                "status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty",
            ],
        );
        let doomed = ns("Active", true, vec!["kubernetes"]);
        check(
            validate_namespace_status_update(&doomed, &doomed),
            &[
                "status.Phase: Invalid value: \"Active\": may only be 'Terminating' if `deletionTimestamp` is not empty",
            ],
        );
        check(
            validate_namespace_finalize_update(&ns("Active", false, vec![]), &live),
            &[],
        );
        check(
            validate_namespace_finalize_update(
                &ns("Active", false, vec!["kubernetes", "custom", "a b/c"]),
                &live,
            ),
            &[
                "spec.finalizers[1]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
                "spec.finalizers[2]: Invalid value: \"a b/c\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        );
    }

    #[test]
    fn replication_controller_status_updates() {
        let rc = |status: serde_json::Value| ReplicationController {
            metadata: named("rc", Some("d")),
            spec: None,
            status: Some(serde_json::from_value(status).unwrap_or_else(|e| panic!("{e}"))),
        };
        let old = rc(json!({"replicas": 0}));
        check(
            validate_replication_controller_status_update(
                &rc(
                    json!({"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 2, "availableReplicas": 1, "observedGeneration": 2}),
                ),
                &old,
            ),
            &[],
        );
        check(
            validate_replication_controller_status_update(
                &rc(
                    json!({"replicas": -1, "readyReplicas": 2, "availableReplicas": 3, "observedGeneration": -2}),
                ),
                &old,
            ),
            &[
                "status.replicas: Invalid value: -1: must be greater than or equal to 0",
                "status.observedGeneration: Invalid value: -2: must be greater than or equal to 0",
                "status.fullyLabeledReplicas: Invalid value: 0: cannot be greater than status.replicas",
                "status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas",
            ],
        );
    }

    #[test]
    fn resource_quota_status_updates() {
        let quota = |status: serde_json::Value| ResourceQuota {
            metadata: named("q", Some("d")),
            spec: Some(
                serde_json::from_value(json!({"hard": {"pods": "-1"}}))
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
            status: Some(serde_json::from_value(status).unwrap_or_else(|e| panic!("{e}"))),
        };
        let old = quota(json!({}));
        check(
            validate_resource_quota_status_update(
                &quota(json!({"hard": {"pods": "10"}, "used": {"pods": "2"}})),
                &old,
            ),
            &[],
        );
        // The spec is not the status writer's: its errors are not reported here.
        check(
            validate_resource_quota_status_update(
                &quota(json!({"hard": {"pods": "1.5"}, "used": {"pods": "-1", "bogus": "1"}})),
                &old,
            ),
            &[
                "status.hard[pods]: Invalid value: 1500m: must be an integer",
                "status.used[bogus]: Invalid value: \"bogus\": must be a standard resource type or fully qualified",
                "status.used[bogus]: Invalid value: \"bogus\": must be a standard resource for quota",
                "status.used[pods]: Invalid value: \"-1\": must be greater than or equal to 0",
            ],
        );
    }
}
