//! The smaller built-in kinds outside core/v1's workloads: policy/v1 PodDisruptionBudgets and
//! Evictions, scheduling.k8s.io/v1 PriorityClasses, coordination.k8s.io/v1 Leases,
//! discovery.k8s.io/v1 EndpointSlices, events.k8s.io/v1 Events, core/v1 Bindings and
//! autoscaling/v1 Scales, as upstream 1.33 validates them (with its default feature gates).
//!
//! Where upstream's strategy leaves metadata to the generic registry checks (PodDisruptionBudgets:
//! a path-segment name, checked only once the spec is valid), the functions here do the same, so
//! that each returns the whole list upstream would report.

use std::collections::BTreeSet;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Binding;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, EndpointPort, EndpointSlice};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;

use crate::StatusError;
use crate::field::{BadValue, FieldError, Path};
use crate::validation::apps::{is_not_more_than_100_percent, validate_positive_int_or_percent};
use crate::validation::gofmt::go_pointer;
use crate::validation::meta::{
    FIELD_IMMUTABLE, validate_label_name, validate_label_selector, validate_labels,
    validate_object_meta, validate_object_meta_generic, validate_object_meta_update,
    validate_object_meta_update_generic,
};
use crate::validation::names::{
    NameValidator, ParsedIp, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value, parse_ip_sloppy, regex_error, validate_dns1123_label,
    validate_qualified_name,
};
use crate::validation::service::validate_non_special_ip;

fn meta_path() -> Path {
    Path::new("metadata")
}

/// Seconds of Go's zero time (`0001-01-01T00:00:00Z`) since the Unix epoch.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

fn is_go_zero(t: &Timestamp) -> bool {
    t.as_second() == GO_ZERO_TIME_SECONDS && t.subsec_nanosecond() == 0
}

fn selector_has_invalid_value(selector: Option<&LabelSelector>) -> bool {
    selector.is_some_and(|s| {
        s.match_expressions.iter().flatten().any(|r| {
            r.values
                .iter()
                .flatten()
                .any(|v| !is_valid_label_value(v).is_empty())
        })
    })
}

// ---------------------------------------------------------------------------------------------
// PodDisruptionBudgets

fn validate_pdb_spec(
    pdb: &PodDisruptionBudget,
    allow_invalid_selector_values: bool,
) -> Vec<FieldError> {
    let path = Path::new("spec");
    let spec = pdb.spec.clone().unwrap_or_default();
    let mut errs = Vec::new();
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        errs.push(FieldError::invalid(
            &path,
            BadValue::Other(format!(
                "policy.PodDisruptionBudgetSpec{{MinAvailable:{}, Selector:{}, MaxUnavailable:{}, UnhealthyPodEvictionPolicy:{}}}",
                go_pointer("intstr.IntOrString", spec.min_available.as_ref()),
                go_pointer("v1.LabelSelector", spec.selector.as_ref()),
                go_pointer("intstr.IntOrString", spec.max_unavailable.as_ref()),
                go_pointer(
                    "policy.UnhealthyPodEvictionPolicyType",
                    spec.unhealthy_pod_eviction_policy.as_ref()
                ),
            )),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (value, field) in [
        (&spec.min_available, "minAvailable"),
        (&spec.max_unavailable, "maxUnavailable"),
    ] {
        if let Some(value) = value {
            errs.extend(validate_positive_int_or_percent(value, &path.child(field)));
            errs.extend(is_not_more_than_100_percent(value, &path.child(field)));
        }
    }
    errs.extend(validate_label_selector(
        spec.selector.as_ref(),
        allow_invalid_selector_values,
        &path.child("selector"),
    ));
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy
        && policy != "IfHealthyBudget"
        && policy != "AlwaysAllow"
    {
        errs.push(FieldError::not_supported(
            &path.child("unhealthyPodEvictionPolicy"),
            policy.as_str(),
            &["AlwaysAllow", "IfHealthyBudget"],
        ));
    }
    errs
}

/// A new PodDisruptionBudget: at most one of minAvailable and maxUnavailable, each a
/// non-negative integer or a percentage up to 100%, a valid selector and eviction policy; then,
/// if all that holds, the generic metadata checks (path-segment name).
pub fn validate_pod_disruption_budget(pdb: &PodDisruptionBudget) -> Vec<FieldError> {
    let errs = validate_pdb_spec(pdb, false);
    if !errs.is_empty() {
        return errs;
    }
    validate_object_meta_generic(
        &pdb.metadata,
        true,
        NameValidator::PathSegment,
        &meta_path(),
    )
}

/// An update of a PodDisruptionBudget: the metadata rules and the new spec (selector values
/// need not be label values if the old selector already had such).
pub fn validate_pod_disruption_budget_update(
    new: &PodDisruptionBudget,
    old: &PodDisruptionBudget,
) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update_generic(&new.metadata, &old.metadata, &meta_path());
    let old_selector = old.spec.as_ref().and_then(|s| s.selector.as_ref());
    errs.extend(validate_pdb_spec(
        new,
        selector_has_invalid_value(old_selector),
    ));
    errs
}

const CONDITION_REASON_FMT: &str = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?";
const CONDITION_REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'";

fn is_valid_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let Some((first, rest)) = bytes.split_first() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    if rest
        .iter()
        .any(|b| !(b.is_ascii_alphanumeric() || b"_,:".contains(b)))
    {
        return false;
    }
    rest.last()
        .is_none_or(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// `metav1.Condition` lists (apimachinery's `ValidateConditions`): unique types that are label
/// names, a known status, a set transition time, a well-formed reason and bounded texts.
pub fn validate_conditions(conditions: &[Condition], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let p = path.index(i);
        if !seen.insert(condition.type_.clone()) {
            errs.push(FieldError::duplicate(
                &p.child("type"),
                condition.type_.as_str(),
            ));
        }
        errs.extend(validate_label_name(&condition.type_, &p.child("type")));
        if !["False", "True", "Unknown"].contains(&condition.status.as_str()) {
            errs.push(FieldError::not_supported(
                &p.child("status"),
                condition.status.as_str(),
                &["False", "True", "Unknown"],
            ));
        }
        if let Some(generation) = condition.observed_generation.filter(|g| *g < 0) {
            errs.push(FieldError::invalid(
                &p.child("observedGeneration"),
                generation,
                "must be greater than or equal to zero",
            ));
        }
        if is_go_zero(&condition.last_transition_time.0) {
            errs.push(FieldError::required(
                &p.child("lastTransitionTime"),
                "must be set",
            ));
        }
        let reason_path = p.child("reason");
        if condition.reason.is_empty() {
            errs.push(FieldError::required(&reason_path, "must be set"));
        } else {
            if !is_valid_condition_reason(&condition.reason) {
                errs.push(FieldError::invalid(
                    &reason_path,
                    condition.reason.as_str(),
                    &regex_error(
                        CONDITION_REASON_MSG,
                        CONDITION_REASON_FMT,
                        &[
                            "my_name",
                            "MY_NAME",
                            "MyName",
                            "ReasonA,ReasonB",
                            "ReasonA:ReasonB",
                        ],
                    ),
                ));
            }
            if condition.reason.len() > 1024 {
                errs.push(FieldError::too_long(&reason_path, 1024));
            }
        }
        if condition.message.len() > 32 * 1024 {
            errs.push(FieldError::too_long(&p.child("message"), 32 * 1024));
        }
    }
    errs
}

/// An update of a PodDisruptionBudget's status subresource: conditions and non-negative counts.
/// Upstream's status strategy checks only the status, not the metadata.
pub fn validate_pod_disruption_budget_status_update(
    new: &PodDisruptionBudget,
    _old: &PodDisruptionBudget,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("status");
    let status = new.status.clone().unwrap_or_default();
    errs.extend(validate_conditions(
        status.conditions.as_deref().unwrap_or(&[]),
        &path.child("conditions"),
    ));
    for (value, field) in [
        (status.disruptions_allowed, "disruptionsAllowed"),
        (status.current_healthy, "currentHealthy"),
        (status.desired_healthy, "desiredHealthy"),
        (status.expected_pods, "expectedPods"),
    ] {
        errs.extend(crate::validation::meta::validate_nonnegative(
            i64::from(value),
            &path.child(field),
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Evictions and Bindings

/// The checks upstream's eviction subresource makes before evicting: the body names the pod of
/// the URL (400 otherwise), and the body's dry-run list agrees with the request's (a plain
/// error, served as a 500 without a reason). Returns the dry-run list the eviction runs with.
pub fn check_eviction(
    eviction: &Eviction,
    url_name: &str,
    request_dry_run: &[String],
) -> Result<Vec<String>, Box<StatusError>> {
    if eviction.metadata.name.as_deref().unwrap_or("") != url_name {
        return Err(Box::new(StatusError::bad_request(
            "name in URL does not match name in Eviction object",
        )));
    }
    let body = eviction
        .delete_options
        .as_ref()
        .and_then(|o| o.dry_run.clone())
        .unwrap_or_default();
    if body.is_empty() {
        return Ok(request_dry_run.to_vec());
    }
    if request_dry_run.is_empty() || request_dry_run == body.as_slice() {
        return Ok(body);
    }
    Err(Box::new(StatusError::not_a_status(&format!(
        "Non-matching dry-run options in request and content: [{}] and [{}]",
        request_dry_run.join(" "),
        body.join(" ")
    ))))
}

/// A pod Binding: the target is a Node (or has no kind) and is named. Upstream returns these
/// errors as a plain aggregate ([`crate::field::aggregate`]), served as a 500 without a reason.
pub fn validate_binding(binding: &Binding) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let kind = binding.target.kind.as_deref().unwrap_or("");
    if !kind.is_empty() && kind != "Node" {
        errs.push(FieldError::not_supported(
            &Path::new("target").child("kind"),
            kind,
            &["Node", "<empty>"],
        ));
    }
    if binding.target.name.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(&Path::new("target").child("name"), ""));
    }
    errs
}

/// A Scale sent to a `scale` subresource: valid metadata and non-negative replicas.
pub fn validate_scale(scale: &Scale) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &scale.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    if replicas < 0 {
        errs.push(FieldError::invalid(
            &Path::new("spec").child("replicas"),
            replicas,
            "must be greater than or equal to 0",
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// PriorityClasses

/// The highest value a user-defined PriorityClass may have.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;
/// The value of `system-cluster-critical`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// The built-in PriorityClasses, by name and value (neither is the global default).
pub const SYSTEM_PRIORITY_CLASSES: &[(&str, i32)] = &[
    ("system-node-critical", SYSTEM_CRITICAL_PRIORITY + 1000),
    ("system-cluster-critical", SYSTEM_CRITICAL_PRIORITY),
];

fn known_system_priority_class(name: &str, value: i32, global_default: bool) -> Result<(), String> {
    match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
        None => Err(format!("{name} is not a known system priority class")),
        Some((_, expected)) if *expected != value => {
            Err(format!("value of {name} PriorityClass must be {expected}"))
        }
        Some(_) if global_default => Err(format!(
            "globalDefault of {name} PriorityClass must be false"
        )),
        Some(_) => Ok(()),
    }
}

/// A new PriorityClass (cluster-scoped, DNS-subdomain name): `system-` names are reserved for
/// the built-in classes with their exact values, other values are at most one billion, and the
/// preemption policy is PreemptLowerPriority or Never.
pub fn validate_priority_class(pc: &PriorityClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &pc.metadata,
        false,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let name = pc.metadata.name.as_deref().unwrap_or("");
    if name.starts_with("system-") {
        if let Err(e) = known_system_priority_class(name, pc.value, pc.global_default == Some(true))
        {
            errs.push(FieldError::forbidden(
                &meta_path().child("name"),
                &format!(
                    "priority class names with 'system-' prefix are reserved for system use only. error: {e}"
                ),
            ));
        }
    } else if pc.value > HIGHEST_USER_DEFINABLE_PRIORITY {
        errs.push(FieldError::forbidden(
            &Path::new("value"),
            &format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
            ),
        ));
    }
    if let Some(policy) = &pc.preemption_policy {
        let p = Path::new("preemptionPolicy");
        match policy.as_str() {
            "PreemptLowerPriority" | "Never" => {}
            "" => errs.push(FieldError::required(&p, "")),
            other => errs.push(FieldError::not_supported(
                &p,
                other,
                &["PreemptLowerPriority", "Never"],
            )),
        }
    }
    errs
}

/// An update of a PriorityClass: metadata rules; the value and preemption policy are fixed.
pub fn validate_priority_class_update(new: &PriorityClass, old: &PriorityClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    if new.value != old.value {
        errs.push(FieldError::forbidden(
            &Path::new("value"),
            "may not be changed in an update.",
        ));
    }
    if new.preemption_policy != old.preemption_policy {
        errs.push(FieldError::invalid(
            &Path::new("preemptionPolicy"),
            new.preemption_policy
                .as_deref()
                .map_or(BadValue::Null, BadValue::from),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Leases

fn validate_lease_spec(lease: &Lease) -> Vec<FieldError> {
    let path = Path::new("spec");
    let spec = lease.spec.clone().unwrap_or_default();
    let mut errs = Vec::new();
    if let Some(duration) = spec.lease_duration_seconds.filter(|d| *d <= 0) {
        errs.push(FieldError::invalid(
            &path.child("leaseDurationSeconds"),
            duration,
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = spec.lease_transitions.filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            &path.child("leaseTransitions"),
            transitions,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(strategy) = &spec.strategy {
        // Upstream nests the field name twice.
        let p = path.child("strategy").child("strategy");
        if strategy.contains('/') {
            for msg in is_qualified_name(strategy) {
                errs.push(FieldError::invalid(&p, strategy.as_str(), &msg));
            }
        } else if strategy != "OldestEmulationVersion" {
            errs.push(FieldError::not_supported(
                &p,
                strategy.as_str(),
                &["OldestEmulationVersion"],
            ));
        }
    }
    if spec
        .preferred_holder
        .as_deref()
        .is_some_and(|h| !h.is_empty())
        && spec.strategy.as_deref().unwrap_or("").is_empty()
    {
        errs.push(FieldError::forbidden(
            &path.child("preferredHolder"),
            "may only be specified if `strategy` is defined",
        ));
    }
    errs
}

/// A new Lease (namespaced, DNS-subdomain name, generic metadata rules): a positive duration,
/// non-negative transitions, and a known coordination strategy for a preferred holder.
pub fn validate_lease(lease: &Lease) -> Vec<FieldError> {
    let mut errs = validate_object_meta_generic(
        &lease.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    errs.extend(validate_lease_spec(lease));
    errs
}

/// An update of a Lease: generic metadata rules and the spec checks.
pub fn validate_lease_update(new: &Lease, old: &Lease) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update_generic(&new.metadata, &old.metadata, &meta_path());
    errs.extend(validate_lease_spec(new));
    errs
}

// ---------------------------------------------------------------------------------------------
// EndpointSlices

const MAX_TOPOLOGY_LABELS: usize = 16;
const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 20_000;
const MAX_ENDPOINTS: usize = 1000;
const MAX_ZONE_HINTS: usize = 8;

fn validate_fqdn(name: &str, path: &Path) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let errs = is_dns1123_subdomain(name);
    if !errs.is_empty() {
        return vec![FieldError::invalid(path, name, &errs.join(","))];
    }
    if name.split('.').count() < 2 {
        return vec![FieldError::invalid(
            path,
            name,
            "should be a domain with at least two segments separated by dots",
        )];
    }
    for label in name.split('.') {
        let errs = is_dns1123_label(label);
        if !errs.is_empty() {
            return vec![FieldError::invalid(path, label, &errs.join(","))];
        }
    }
    Vec::new()
}

fn validate_endpoint_address(address: &str, address_type: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match address_type {
        "IPv4" | "IPv6" => {
            let want_v6 = address_type == "IPv6";
            let ok = parse_ip_sloppy(address).is_some_and(|ip: ParsedIp| ip.is_ipv6() == want_v6);
            if !ok {
                errs.push(FieldError::invalid(
                    path,
                    address,
                    &format!("must be a valid {address_type} address"),
                ));
            }
            errs.extend(validate_non_special_ip(address, path));
        }
        "FQDN" => errs.extend(validate_fqdn(address, path)),
        _ => {}
    }
    errs
}

fn validate_hints(hints: &EndpointHints, path: &Path) -> Vec<FieldError> {
    let zones_path = path.child("forZones");
    let zones = hints.for_zones.as_deref().unwrap_or(&[]);
    if zones.len() > MAX_ZONE_HINTS {
        return vec![FieldError::too_many(
            &zones_path,
            zones.len(),
            MAX_ZONE_HINTS,
        )];
    }
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, zone) in zones.iter().enumerate() {
        let p = zones_path.index(i).child("name");
        if !seen.insert(zone.name.clone()) {
            errs.push(FieldError::duplicate(&p, zone.name.as_str()));
        }
        for msg in is_valid_label_value(&zone.name) {
            errs.push(FieldError::invalid(&p, zone.name.as_str(), &msg));
        }
    }
    errs
}

fn validate_endpoints(endpoints: &[Endpoint], address_type: &str) -> Vec<FieldError> {
    let path = Path::new("endpoints");
    if endpoints.len() > MAX_ENDPOINTS {
        return vec![FieldError::too_many(&path, endpoints.len(), MAX_ENDPOINTS)];
    }
    let mut errs = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let p = path.index(i);
        let addresses_path = p.child("addresses");
        if endpoint.addresses.is_empty() {
            errs.push(FieldError::required(
                &addresses_path,
                "must contain at least 1 address",
            ));
        } else if endpoint.addresses.len() > MAX_ADDRESSES {
            errs.push(FieldError::too_many(
                &addresses_path,
                endpoint.addresses.len(),
                MAX_ADDRESSES,
            ));
        }
        for (j, address) in endpoint.addresses.iter().enumerate() {
            errs.extend(validate_endpoint_address(
                address,
                address_type,
                &addresses_path.index(j),
            ));
        }
        if let Some(node) = &endpoint.node_name {
            for msg in NameValidator::DnsSubdomain.validate(node, false) {
                errs.push(FieldError::invalid(
                    &p.child("nodeName"),
                    node.as_str(),
                    &msg,
                ));
            }
        }
        let topology_path = p.child("deprecatedTopology");
        let topology = endpoint.deprecated_topology.as_ref();
        let topology_len = topology.map_or(0, |t| t.len());
        if topology_len > MAX_TOPOLOGY_LABELS {
            errs.push(FieldError::too_many(
                &topology_path,
                topology_len,
                MAX_TOPOLOGY_LABELS,
            ));
        }
        errs.extend(validate_labels(topology, &topology_path));
        if topology.is_some_and(|t| t.contains_key("topology.kubernetes.io/zone")) {
            errs.push(FieldError::internal(
                &topology_path.key("topology.kubernetes.io/zone"),
                "reserved key was not removed in conversion",
            ));
        }
        if let Some(hostname) = &endpoint.hostname {
            errs.extend(validate_dns1123_label(hostname, &p.child("hostname")));
        }
        if let Some(hints) = &endpoint.hints {
            errs.extend(validate_hints(hints, &p.child("hints")));
        }
    }
    errs
}

fn validate_endpoint_ports(ports: &[EndpointPort]) -> Vec<FieldError> {
    let path = Path::new("ports");
    if ports.len() > MAX_PORTS {
        return vec![FieldError::too_many(&path, ports.len(), MAX_PORTS)];
    }
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = path.index(i);
        let name = port.name.as_deref().unwrap_or("");
        if !name.is_empty() {
            errs.extend(validate_dns1123_label(name, &p.child("name")));
        }
        if !names.insert(name.to_owned()) {
            errs.push(FieldError::duplicate(&p.child("name"), name));
        }
        match port.protocol.as_deref() {
            None => errs.push(FieldError::required(&p.child("protocol"), "")),
            Some(protocol) if !["SCTP", "TCP", "UDP"].contains(&protocol) => {
                errs.push(FieldError::not_supported(
                    &p.child("protocol"),
                    protocol,
                    &["SCTP", "TCP", "UDP"],
                ));
            }
            Some(_) => {}
        }
        if let Some(app) = &port.app_protocol {
            errs.extend(validate_qualified_name(app, &p.child("appProtocol")));
        }
    }
    errs
}

/// A new EndpointSlice (namespaced, DNS-subdomain name): a known address type, at most 1000
/// endpoints whose addresses fit the type, valid node names, hostnames, topology labels and
/// zone hints, and ports with unique DNS-label names and known protocols.
pub fn validate_endpoint_slice(slice: &EndpointSlice) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &slice.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let address_type = slice.address_type.as_str();
    let type_path = Path::new("addressType");
    match address_type {
        "" => errs.push(FieldError::required(&type_path, "")),
        "FQDN" | "IPv4" | "IPv6" => {}
        other => errs.push(FieldError::not_supported(
            &type_path,
            other,
            &["FQDN", "IPv4", "IPv6"],
        )),
    }
    errs.extend(validate_endpoints(&slice.endpoints, address_type));
    errs.extend(validate_endpoint_ports(
        slice.ports.as_deref().unwrap_or(&[]),
    ));
    errs
}

/// An update of an EndpointSlice: the new slice's checks and a fixed address type. (Upstream
/// runs the metadata update rules generically for every kind; they are included here.)
pub fn validate_endpoint_slice_update(new: &EndpointSlice, old: &EndpointSlice) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    errs.extend(validate_endpoint_slice(new));
    if new.address_type != old.address_type {
        errs.push(FieldError::invalid(
            &Path::new("addressType"),
            new.address_type.as_str(),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// events.k8s.io/v1 Events

fn validate_series(event: &EventV1) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(series) = &event.series {
        if series.count < 2 {
            errs.push(FieldError::invalid(
                &Path::new("series.count"),
                "",
                "should be at least 2",
            ));
        }
        if is_go_zero(&series.last_observed_time.0) {
            errs.push(FieldError::required(
                &Path::new("series.lastObservedTime"),
                "",
            ));
        }
    }
    errs
}

fn time_set(time: Option<&Time>) -> bool {
    time.is_some_and(|t| !is_go_zero(&t.0))
}

/// A new events.k8s.io/v1 Event: the legacy rules every Event passes, then the strict ones of
/// that API (metadata, series, eventTime set, type Normal or Warning, deprecated fields unset).
pub fn validate_events_v1_event(event: &EventV1) -> Vec<FieldError> {
    let mut errs = crate::validation::core::validate_event(&crate::convert::events::to_core(event));
    errs.extend(validate_object_meta(
        &event.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    ));
    errs.extend(validate_series(event));
    if event.event_time.as_ref().is_none_or(|t| is_go_zero(&t.0)) {
        errs.push(FieldError::required(&Path::new("eventTime"), ""));
    }
    let type_ = event.type_.as_deref().unwrap_or("");
    if type_ != "Normal" && type_ != "Warning" {
        errs.push(FieldError::invalid(
            &Path::new("type"),
            "",
            &format!("has invalid value: {type_}"),
        ));
    }
    for (set, field) in [
        (
            time_set(event.deprecated_first_timestamp.as_ref()),
            "firstTimestamp",
        ),
        (
            time_set(event.deprecated_last_timestamp.as_ref()),
            "lastTimestamp",
        ),
        (event.deprecated_count.unwrap_or(0) != 0, "count"),
        (
            event.deprecated_source.as_ref().is_some_and(|s| {
                !s.component.as_deref().unwrap_or("").is_empty()
                    || !s.host.as_deref().unwrap_or("").is_empty()
            }),
            "source",
        ),
    ] {
        if set {
            errs.push(FieldError::invalid(
                &Path::new(field),
                "",
                "needs to be unset",
            ));
        }
    }
    errs
}

/// An update of an events.k8s.io/v1 Event, as a 1.33 server judges it: the legacy rules on the
/// new event and the metadata rules. Upstream's `ValidateEventUpdate` would also check a
/// changed series and hold every other field fixed, but its event strategy passes the new event
/// as the old one too (`oldEvent := obj` in `pkg/registry/core/event/strategy.go`), so those
/// checks never fire; clients rely on that (the `Events API` conformance spec patches `note`
/// through events.k8s.io/v1).
pub fn validate_events_v1_event_update(new: &EventV1, old: &EventV1) -> Vec<FieldError> {
    let mut errs = crate::validation::core::validate_event(&crate::convert::events::to_core(new));
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &meta_path(),
    ));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::misc::{default_endpoint_slice, default_priority_class};
    use crate::validation::test_support::check;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    fn decode<T: DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    fn meta(name: &str) -> Value {
        json!({"name": name, "namespace": "default", "resourceVersion": "1"})
    }

    #[test]
    fn pod_disruption_budgets() {
        let pdb = |spec: Value, name: &str| -> PodDisruptionBudget {
            decode(json!({"metadata": meta(name), "spec": spec}))
        };
        check(
            validate_pod_disruption_budget(&pdb(
                json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}),
                "web",
            )),
            &[],
        );
        check(
            validate_pod_disruption_budget(&pdb(
                json!({"minAvailable": -1, "maxUnavailable": "120%", "unhealthyPodEvictionPolicy": "Never"}),
                "web",
            )),
            &[
                "spec: Invalid value: policy.PodDisruptionBudgetSpec{MinAvailable:(*intstr.IntOrString)(0xc000000000), Selector:(*v1.LabelSelector)(nil), MaxUnavailable:(*intstr.IntOrString)(0xc000000000), UnhealthyPodEvictionPolicy:(*policy.UnhealthyPodEvictionPolicyType)(0xc000000000)}: minAvailable and maxUnavailable cannot be both set",
                "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
                "spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"120%\"}: must not be greater than 100%",
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
            ],
        );
        // Metadata is checked (path-segment names) only once the spec is valid.
        check(
            validate_pod_disruption_budget(&pdb(json!({"maxUnavailable": 1}), "a/b")),
            &["metadata.name: Invalid value: \"a/b\": may not contain '/'"],
        );
        let old = pdb(json!({"maxUnavailable": 1}), "web");
        let mut new = old.clone();
        new.status = decode(json!({
            "currentHealthy": -1, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0,
            "conditions": [{"type": "DisruptionAllowed", "status": "Maybe", "reason": "1bad", "message": "",
                            "lastTransitionTime": "0001-01-01T00:00:00Z"}]
        }));
        check(
            validate_pod_disruption_budget_status_update(&new, &old),
            &[
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
                "status.conditions[0].lastTransitionTime: Required value: must be set",
                "status.conditions[0].reason: Invalid value: \"1bad\": a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
                "status.currentHealthy: Invalid value: -1: must be greater than or equal to 0",
            ],
        );
    }

    #[test]
    fn evictions_bindings_scales() {
        let eviction: Eviction =
            decode(json!({"metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["All"]}}));
        assert_eq!(
            check_eviction(&eviction, "p", &[]),
            Ok(vec!["All".to_owned()])
        );
        assert_eq!(
            check_eviction(&eviction, "q", &[]).map_err(|e| e.code()),
            Err(400)
        );
        let mismatch = check_eviction(&eviction, "p", &["Other".to_owned()])
            .err()
            .map(|e| e.to_json()["message"].clone());
        assert_eq!(
            mismatch,
            Some(json!(
                "Non-matching dry-run options in request and content: [Other] and [All]"
            ))
        );

        let binding: Binding =
            decode(json!({"metadata": {"name": "p"}, "target": {"kind": "Pod"}}));
        check(
            validate_binding(&binding),
            &[
                "target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\"",
                "target.name: Required value",
            ],
        );
        let scale: Scale = decode(json!({"metadata": meta("web"), "spec": {"replicas": -2}}));
        check(
            validate_scale(&scale),
            &["spec.replicas: Invalid value: -2: must be greater than or equal to 0"],
        );
    }

    #[test]
    fn priority_classes() {
        let pc = |value: Value| -> PriorityClass {
            let mut pc: PriorityClass = decode(value);
            default_priority_class(&mut pc);
            pc
        };
        check(
            validate_priority_class(&pc(json!({"metadata": {"name": "high"}, "value": 1000}))),
            &[],
        );
        check(
            validate_priority_class(&pc(
                json!({"metadata": {"name": "system-node-critical"}, "value": 2000001000}),
            )),
            &[],
        );
        check(
            validate_priority_class(&pc(
                json!({"metadata": {"name": "system-mine"}, "value": 5, "preemptionPolicy": "Sometimes"}),
            )),
            &[
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class",
                "preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\"",
            ],
        );
        check(
            validate_priority_class(&pc(
                json!({"metadata": {"name": "system-cluster-critical"}, "value": 1}),
            )),
            &[
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must be 2000000000",
            ],
        );
        check(
            validate_priority_class(&pc(
                json!({"metadata": {"name": "huge", "namespace": "x"}, "value": 1000000001}),
            )),
            &[
                "metadata.namespace: Forbidden: not allowed on this type",
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
            ],
        );
        let old = pc(json!({"metadata": {"name": "high", "resourceVersion": "1"}, "value": 10}));
        let new = pc(
            json!({"metadata": {"name": "high", "resourceVersion": "1"}, "value": 11, "preemptionPolicy": "Never"}),
        );
        check(
            validate_priority_class_update(&new, &old),
            &[
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ],
        );
    }

    #[test]
    fn leases() {
        let lease: Lease = decode(json!({"metadata": meta("node-1"), "spec": {
            "holderIdentity": "node-1", "leaseDurationSeconds": 0, "leaseTransitions": -1,
            "strategy": "Newest", "preferredHolder": "x"}}));
        check(
            validate_lease(&lease),
            &[
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
                "spec.strategy.strategy: Unsupported value: \"Newest\": supported values: \"OldestEmulationVersion\"",
            ],
        );
        let holder: Lease =
            decode(json!({"metadata": meta("l"), "spec": {"preferredHolder": "x"}}));
        check(
            validate_lease_update(&holder, &holder),
            &["spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"],
        );
    }

    fn slice(value: Value) -> EndpointSlice {
        let mut slice: EndpointSlice = decode(value);
        default_endpoint_slice(&mut slice);
        slice
    }

    #[test]
    fn endpoint_slices() {
        check(
            validate_endpoint_slice(&slice(
                json!({"metadata": meta("web-abc"), "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "n1", "hints": {"forZones": [{"name": "a"}]}}],
                "ports": [{"name": "http", "port": 80}]}),
            )),
            &[],
        );
        check(
            validate_endpoint_slice(&slice(json!({"metadata": meta("s"), "addressType": "IPv4",
                "endpoints": [
                    {"addresses": []},
                    {"addresses": ["::1", "127.0.0.1"], "hostname": "Web", "deprecatedTopology": {"topology.kubernetes.io/zone": "a"}},
                    {"addresses": ["10.0.0.2"], "hints": {"forZones": [{"name": "a"}, {"name": "a"}]}}
                ],
                "ports": [{"port": 80}, {"port": 81, "protocol": "HTTP"}]}))),
            &[
                "endpoints[0].addresses: Required value: must contain at least 1 address",
                "endpoints[1].addresses[0]: Invalid value: \"::1\": must be a valid IPv4 address",
                "endpoints[1].addresses[0]: Invalid value: \"::1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                "endpoints[1].addresses[1]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                "endpoints[1].deprecatedTopology[topology.kubernetes.io/zone]: Internal error: reserved key was not removed in conversion",
                "endpoints[1].hostname: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "endpoints[2].hints.forZones[1].name: Duplicate value: \"a\"",
                "ports[1].name: Duplicate value: \"\"",
                "ports[1].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ],
        );
        check(
            validate_endpoint_slice(&slice(json!({"metadata": meta("s"), "addressType": "FQDN",
                "endpoints": [{"addresses": ["example.com.", "localhost", "a_b.example.com"]}]}))),
            &[
                "endpoints[0].addresses[1]: Invalid value: \"localhost\": should be a domain with at least two segments separated by dots",
                "endpoints[0].addresses[2]: Invalid value: \"a_b.example.com\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        );
        let old = slice(json!({"metadata": meta("s"), "addressType": "IPv4", "endpoints": []}));
        let new = slice(json!({"metadata": meta("s"), "addressType": "Carrier", "endpoints": []}));
        check(
            validate_endpoint_slice_update(&new, &old),
            &[
                "addressType: Unsupported value: \"Carrier\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                "addressType: Invalid value: \"Carrier\": field is immutable",
            ],
        );
    }

    #[test]
    fn events() {
        let event = |extra: Value| -> EventV1 {
            let mut value = json!({
                "metadata": meta("e1"), "eventTime": "2024-05-01T10:00:00.123400Z",
                "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
                "action": "Scale", "reason": "Scaled", "type": "Normal",
                "regarding": {"kind": "Deployment", "namespace": "default", "name": "web"}
            });
            if let (Some(v), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
                for (k, x) in extra {
                    v.insert(k.clone(), x.clone());
                }
            }
            decode(value)
        };
        check(validate_events_v1_event(&event(json!({}))), &[]);
        check(
            validate_events_v1_event(&event(json!({
                "type": "Odd", "reportingInstance": "", "deprecatedCount": 2,
                "deprecatedSource": {"component": "kubelet"},
                "series": {"count": 1, "lastObservedTime": "2024-05-01T10:00:00Z"}
            }))),
            &[
                "reportingInstance: Required value",
                "series.count: Invalid value: \"\": should be at least 2",
                "type: Invalid value: \"\": has invalid value: Odd",
                "count: Invalid value: \"\": needs to be unset",
                "source: Invalid value: \"\": needs to be unset",
            ],
        );
        // A changed note, time or object passes, as on an upstream server (see the function).
        let old = event(json!({}));
        let new = event(
            json!({"note": "changed", "eventTime": "2024-05-01T11:00:00Z",
            "regarding": {"kind": "Deployment", "namespace": "default", "name": "api"}}),
        );
        check(validate_events_v1_event_update(&new, &old), &[]);
        // The legacy rules still hold for the new event, and so do the metadata rules.
        let mut renamed = event(json!({"reportingController": ""}));
        renamed.metadata.name = Some("other".to_owned());
        let got: Vec<String> = validate_events_v1_event_update(&renamed, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            got.iter()
                .any(|e| e.starts_with("reportingController: Required value")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|e| e.starts_with("metadata.name: Invalid value")),
            "{got:?}"
        );
    }
}
