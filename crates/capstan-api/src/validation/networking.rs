//! `networking.k8s.io/v1` Ingresses, IngressClasses, NetworkPolicies, IPAddresses and
//! ServiceCIDRs, as upstream 1.33 validates them: ingress rules (hosts, path types and paths,
//! service or resource backends), TLS hosts and secret names, the class annotation agreeing with
//! `ingressClassName`, ingress class controllers and parameter references, network policy
//! ports, peers and CIDRs, IPAddress names (a canonical IP) and parent references, and the
//! CIDRs of a ServiceCIDR (one or one per family, strictly formed, fixed once set).

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, IPAddress, IPBlock, Ingress, IngressBackend, IngressClass,
    IngressClassParametersReference, IngressLoadBalancerStatus, IngressSpec, NetworkPolicy,
    NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec, ParentReference, ServiceCIDR,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{
    validate_label_selector, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::{
    NameValidator, cidr_strictly_inside, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain,
    is_valid_path_segment_name, is_valid_port_name, is_valid_port_num,
    is_wildcard_dns1123_subdomain, parse_cidr_sloppy, parse_ip_sloppy, validate_cidr,
    validate_cidr_legacy, validate_domain_prefixed_path, validate_ip_legacy,
};

const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
const MAX_CONTROLLER_LEN: usize = 250;

fn meta_path() -> Path {
    Path::new("metadata")
}

fn invalid_each(path: &Path, value: &str, messages: Vec<String>) -> Vec<FieldError> {
    messages
        .into_iter()
        .map(|msg| FieldError::invalid(path, value, &msg))
        .collect()
}

// Ingresses

/// Options that keep stored objects valid across stricter validation.
#[derive(Clone, Copy, Default)]
struct IngressOptions {
    allow_invalid_secret_name: bool,
    allow_invalid_wildcard_host_rule: bool,
}

/// A new Ingress.
pub fn validate_ingress(ingress: &Ingress) -> Vec<FieldError> {
    let mut errs = validate_ingress_with(ingress, IngressOptions::default());
    let annotation = ingress
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INGRESS_CLASS_ANNOTATION));
    let class = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_ref());
    if let (Some(annotation), Some(class)) = (annotation, class)
        && annotation != class
    {
        errs.push(FieldError::invalid(
            &Path::new("annotations").child(INGRESS_CLASS_ANNOTATION),
            annotation.as_str(),
            "must match `ingressClassName` when both are specified",
        ));
    }
    errs
}

/// An update of an Ingress (stored invalid secret names and wildcard rules stay allowed).
pub fn validate_ingress_update(new: &Ingress, old: &Ingress) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let old_spec = old.spec.clone().unwrap_or_default();
    let options = IngressOptions {
        allow_invalid_secret_name: old_spec
            .tls
            .iter()
            .flatten()
            .any(|tls| !tls_secret_name_errors(tls.secret_name.as_deref()).is_empty()),
        allow_invalid_wildcard_host_rule: old_spec.rules.iter().flatten().any(|rule| {
            rule.host.as_deref().unwrap_or_default().contains('*')
                && rule.http.as_ref().is_some_and(|http| {
                    !validate_http_paths(&http.paths, &Path::new(""), IngressOptions::default())
                        .is_empty()
                })
        }),
    };
    errs.extend(validate_ingress_with(new, options));
    errs
}

/// An update of an Ingress through `/status`.
pub fn validate_ingress_status_update(new: &Ingress, old: &Ingress) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let status = |i: &Ingress| {
        i.status
            .as_ref()
            .and_then(|s| s.load_balancer.clone())
            .unwrap_or_default()
    };
    errs.extend(validate_load_balancer_status(
        &status(new),
        &status(old),
        &Path::new("status").child("loadBalancer"),
    ));
    errs
}

fn validate_load_balancer_status(
    status: &IngressLoadBalancerStatus,
    old: &IngressLoadBalancerStatus,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let existing: Vec<&str> = old
        .ingress
        .iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref())
        .collect();
    for (i, ingress) in status.ingress.iter().flatten().enumerate() {
        let at = path.child("ingress").index(i);
        if let Some(ip) = ingress.ip.as_deref().filter(|ip| !ip.is_empty())
            && !existing.contains(&ip)
        {
            errs.extend(validate_ip_legacy(&at.child("ip"), ip));
        }
        if let Some(hostname) = ingress.hostname.as_deref().filter(|h| !h.is_empty()) {
            errs.extend(invalid_each(
                &at.child("hostname"),
                hostname,
                is_dns1123_subdomain(hostname),
            ));
            if parse_ip_sloppy(hostname).is_some() {
                errs.push(FieldError::invalid(
                    &at.child("hostname"),
                    hostname,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

fn validate_ingress_with(ingress: &Ingress, options: IngressOptions) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &ingress.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let spec = ingress.spec.clone().unwrap_or_default();
    errs.extend(validate_ingress_spec(&spec, &Path::new("spec"), options));
    errs
}

fn validate_ingress_spec(
    spec: &IngressSpec,
    path: &Path,
    options: IngressOptions,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rules = spec.rules.as_deref().unwrap_or_default();
    if rules.is_empty() && spec.default_backend.is_none() {
        errs.push(FieldError::invalid(
            path,
            BadValue::Other("[]networking.IngressRule(nil)".into()),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(backend) = &spec.default_backend {
        errs.extend(validate_backend(backend, &path.child("defaultBackend")));
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = path.child("rules").index(i);
        let host = rule.host.as_deref().unwrap_or_default();
        let mut wildcard = false;
        if !host.is_empty() {
            if parse_ip_sloppy(host).is_some() {
                errs.push(FieldError::invalid(
                    &at.child("host"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            }
            if host.contains('*') {
                errs.extend(invalid_each(
                    &at.child("host"),
                    host,
                    is_wildcard_dns1123_subdomain(host),
                ));
                wildcard = true;
            } else {
                errs.extend(invalid_each(
                    &at.child("host"),
                    host,
                    is_dns1123_subdomain(host),
                ));
            }
        }
        if (!wildcard || !options.allow_invalid_wildcard_host_rule)
            && let Some(http) = &rule.http
        {
            errs.extend(validate_http_paths(&http.paths, &at.child("http"), options));
        }
    }
    for (i, tls) in spec.tls.iter().flatten().enumerate() {
        let at = path.child("tls").index(i);
        for (j, host) in tls.hosts.iter().flatten().enumerate() {
            let messages = if host.contains('*') {
                is_wildcard_dns1123_subdomain(host)
            } else {
                is_dns1123_subdomain(host)
            };
            errs.extend(invalid_each(&at.child("hosts").index(j), host, messages));
        }
        if !options.allow_invalid_secret_name {
            let name = tls.secret_name.as_deref().unwrap_or_default();
            errs.extend(invalid_each(
                &at.child("secretName"),
                name,
                tls_secret_name_errors(Some(name)),
            ));
        }
    }
    if let Some(class) = &spec.ingress_class_name {
        errs.extend(invalid_each(
            &path.child("ingressClassName"),
            class,
            is_dns1123_subdomain(class),
        ));
    }
    errs
}

fn tls_secret_name_errors(name: Option<&str>) -> Vec<String> {
    match name {
        None | Some("") => Vec::new(),
        Some(name) => is_dns1123_subdomain(name),
    }
}

fn validate_http_paths(
    paths: &[HTTPIngressPath],
    path: &Path,
    _options: IngressOptions,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if paths.is_empty() {
        errs.push(FieldError::required(&path.child("paths"), ""));
    }
    for (i, p) in paths.iter().enumerate() {
        errs.extend(validate_http_path(p, &path.child("paths").index(i)));
    }
    errs
}

fn validate_http_path(p: &HTTPIngressPath, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let value = p.path.as_deref().unwrap_or_default();
    match p.path_type.as_str() {
        "" => {
            return vec![FieldError::required(
                &path.child("pathType"),
                "pathType must be specified",
            )];
        }
        "Exact" | "Prefix" => {
            if !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    &path.child("path"),
                    value,
                    "must be an absolute path",
                ));
            }
            if !value.is_empty() {
                for sequence in ["//", "/./", "/../", "%2f", "%2F"] {
                    if value.contains(sequence) {
                        errs.push(FieldError::invalid(
                            &path.child("path"),
                            value,
                            &format!("must not contain '{sequence}'"),
                        ));
                    }
                }
                for suffix in ["/..", "/."] {
                    if value.ends_with(suffix) {
                        errs.push(FieldError::invalid(
                            &path.child("path"),
                            value,
                            &format!("cannot end with '{suffix}'"),
                        ));
                    }
                }
            }
        }
        "ImplementationSpecific" => {
            if !value.is_empty() && !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    &path.child("path"),
                    value,
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("pathType"),
            other,
            &["Exact", "ImplementationSpecific", "Prefix"],
        )),
    }
    errs.extend(validate_backend(&p.backend, &path.child("backend")));
    errs
}

fn validate_backend(backend: &IngressBackend, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (&backend.resource, &backend.service) {
        (Some(_), Some(_)) => {
            errs.push(FieldError::invalid(
                path,
                "",
                "cannot set both resource and service backends",
            ));
        }
        (Some(resource), None) => {
            let at = path.child("resource");
            errs.extend(object_reference(
                &at,
                ("apiGroup", resource.api_group.as_deref()),
                [("kind", &resource.kind), ("name", &resource.name)],
            ));
        }
        (None, Some(service)) => {
            let name_path = path.child("service").child("name");
            if service.name.is_empty() {
                errs.push(FieldError::required(&name_path, ""));
            } else {
                errs.extend(invalid_each(
                    &name_path,
                    &service.name,
                    is_dns1035_label(&service.name),
                ));
            }
            let port = service.port.clone().unwrap_or_default();
            let name = port.name.as_deref().unwrap_or_default();
            let number = port.number.unwrap_or(0);
            let port_path = path.child("service").child("port");
            match (!name.is_empty(), number != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    path,
                    "",
                    "cannot set both port name & port number",
                )),
                (true, false) => errs.extend(invalid_each(
                    &port_path.child("name"),
                    name,
                    is_valid_port_name(name),
                )),
                (false, true) => {
                    for msg in is_valid_port_num(i64::from(number)) {
                        errs.push(FieldError::invalid(
                            &port_path.child("number"),
                            number,
                            &msg,
                        ));
                    }
                }
                (false, false) => errs.push(FieldError::required(
                    path,
                    "port name or number is required",
                )),
            }
        }
        (None, None) => errs.push(FieldError::invalid(
            path,
            "",
            "resource or service backend is required",
        )),
    }
    errs
}

// IPAddresses

/// A new IPAddress: named by an IP address in canonical form, with a parent reference.
pub fn validate_ip_address(ip: &IPAddress) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta(&ip.metadata, false, NameValidator::IpAddress, &meta_path());
    let path = Path::new("spec").child("parentRef");
    // The typed spec cannot tell a missing reference from an empty one: both are missing.
    let parent = ip
        .spec
        .as_ref()
        .map(|s| &s.parent_ref)
        .filter(|p| **p != ParentReference::default());
    match parent {
        None => errs.push(FieldError::required(&path, "")),
        Some(parent) => errs.extend(validate_parent_reference(parent, &path)),
    }
    errs
}

/// A reference to an object by group and two names (an Ingress backend's `resource`, an
/// IPAddress's `parentRef`): the group, when given, a DNS subdomain; both names required, each
/// a path segment.
fn object_reference(
    path: &Path,
    (group_field, group): (&str, Option<&str>),
    names: [(&str, &String); 2],
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(group) = group {
        errs.extend(invalid_each(
            &path.child(group_field),
            group,
            is_dns1123_subdomain(group),
        ));
    }
    for (field, value) in names {
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(field), ""));
        } else {
            errs.extend(invalid_each(
                &path.child(field),
                value,
                is_valid_path_segment_name(value),
            ));
        }
    }
    errs
}

/// Upstream's `validateIPAddressParentReference`: the resource and name are required (the
/// group may be empty, the core group's), each a path segment; the group a DNS subdomain.
fn validate_parent_reference(parent: &ParentReference, path: &Path) -> Vec<FieldError> {
    let group = parent.group.as_deref().filter(|g| !g.is_empty());
    let mut errs = object_reference(
        path,
        ("group", group),
        [("resource", &parent.resource), ("name", &parent.name)],
    );
    let namespace = parent.namespace.as_deref().unwrap_or_default();
    if !namespace.is_empty() {
        errs.extend(invalid_each(
            &path.child("namespace"),
            namespace,
            is_valid_path_segment_name(namespace),
        ));
    }
    errs
}

/// An update of an IPAddress: valid as a new one, its parent reference fixed.
pub fn validate_ip_address_update(new: &IPAddress, old: &IPAddress) -> Vec<FieldError> {
    let mut errs = validate_ip_address(new);
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &meta_path(),
    ));
    let parent = |ip: &IPAddress| ip.spec.as_ref().map(|s| s.parent_ref.clone());
    if parent(new) != parent(old) {
        errs.push(FieldError::invalid(
            &Path::new("spec").child("parentRef"),
            BadValue::Other(go_parent_reference(parent(new).as_ref())),
            crate::validation::meta::FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// Go's `%#v` of a `*networking.ParentReference`, as upstream's immutable-field error shows it.
fn go_parent_reference(parent: Option<&ParentReference>) -> String {
    match parent {
        None => "null".to_owned(),
        Some(p) => format!(
            "networking.ParentReference{{Group:{}, Resource:{}, Namespace:{}, Name:{}}}",
            crate::field::go_quote(p.group.as_deref().unwrap_or_default()),
            crate::field::go_quote(&p.resource),
            crate::field::go_quote(p.namespace.as_deref().unwrap_or_default()),
            crate::field::go_quote(&p.name),
        ),
    }
}

// ServiceCIDRs

/// Go's `%#v` of a ServiceCIDR's spec, as upstream's errors about the whole list show it.
fn go_service_cidr_spec(cidrs: &[String]) -> String {
    format!(
        "networking.ServiceCIDRSpec{{CIDRs:{}}}",
        crate::validation::meta::go_string_slice(cidrs)
    )
}

/// A new ServiceCIDR: one CIDR, or two of different families, each a strict CIDR value.
pub fn validate_service_cidr(cidr: &ServiceCIDR) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &cidr.metadata,
        false,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let path = Path::new("spec").child("cidrs");
    let cidrs = cidr
        .spec
        .as_ref()
        .and_then(|s| s.cidrs.clone())
        .unwrap_or_default();
    if cidrs.is_empty() {
        errs.push(FieldError::required(&path, "at least one CIDR required"));
        return errs;
    }
    if cidrs.len() > 2 {
        errs.push(FieldError::invalid(
            &path,
            BadValue::Other(go_service_cidr_spec(&cidrs)),
            "may only hold up to 2 values",
        ));
        return errs;
    }
    if cidrs.len() == 2 {
        let family = |c: &str| parse_cidr_sloppy(c).map(|(ip, _)| ip.is_ipv6());
        let dual = matches!(
            (family(&cidrs[0]), family(&cidrs[1])),
            (Some(a), Some(b)) if a != b
        );
        if !dual {
            errs.push(FieldError::invalid(
                &path,
                BadValue::Other(go_service_cidr_spec(&cidrs)),
                "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ));
            return errs;
        }
    }
    for (i, value) in cidrs.iter().enumerate() {
        errs.extend(validate_cidr(&path.index(i), value));
    }
    errs
}

/// An update of a ServiceCIDR: valid as a new one, its CIDRs fixed.
pub fn validate_service_cidr_update(new: &ServiceCIDR, old: &ServiceCIDR) -> Vec<FieldError> {
    let mut errs = validate_service_cidr(new);
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &meta_path(),
    ));
    let cidrs = |c: &ServiceCIDR| {
        c.spec
            .as_ref()
            .and_then(|s| s.cidrs.clone())
            .unwrap_or_default()
    };
    if cidrs(new) != cidrs(old) {
        errs.push(FieldError::invalid(
            &Path::new("spec").child("cidrs"),
            BadValue::Other(crate::validation::meta::go_string_slice(&cidrs(new))),
            crate::validation::meta::FIELD_IMMUTABLE,
        ));
    }
    errs
}

// IngressClasses

/// A new IngressClass.
pub fn validate_ingress_class(class: &IngressClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &class.metadata,
        false,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let spec = class.spec.clone().unwrap_or_default();
    let path = Path::new("spec");
    let controller = spec.controller.as_deref().unwrap_or_default();
    if controller.is_empty() {
        errs.push(FieldError::required(&path.child("controller"), ""));
    } else {
        if controller.len() > MAX_CONTROLLER_LEN {
            errs.push(FieldError::too_long(
                &path.child("controller"),
                MAX_CONTROLLER_LEN,
            ));
        }
        errs.extend(validate_domain_prefixed_path(
            &path.child("controller"),
            controller,
        ));
    }
    if let Some(parameters) = &spec.parameters {
        errs.extend(validate_class_parameters(
            parameters,
            &path.child("parameters"),
        ));
    }
    errs
}

/// An update of an IngressClass: the controller is fixed.
pub fn validate_ingress_class_update(new: &IngressClass, old: &IngressClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let controller = |c: &IngressClass| {
        c.spec
            .as_ref()
            .and_then(|s| s.controller.clone())
            .unwrap_or_default()
    };
    if controller(new) != controller(old) {
        errs.push(FieldError::invalid(
            &Path::new("spec").child("controller"),
            controller(new),
            crate::validation::meta::FIELD_IMMUTABLE,
        ));
    }
    errs.extend(validate_ingress_class(new));
    errs
}

fn validate_class_parameters(
    params: &IngressClassParametersReference,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(group) = &params.api_group {
        errs.extend(invalid_each(
            &path.child("apiGroup"),
            group,
            is_dns1123_subdomain(group),
        ));
    }
    for (field, value) in [("kind", &params.kind), ("name", &params.name)] {
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(field), ""));
        } else {
            errs.extend(invalid_each(
                &path.child(field),
                value,
                is_valid_path_segment_name(value),
            ));
        }
    }
    let Some(scope) = params.scope.as_deref() else {
        errs.push(FieldError::required(&path.child("scope"), ""));
        return errs;
    };
    match scope {
        "Namespace" => match params.namespace.as_deref() {
            None => errs.push(FieldError::required(
                &path.child("namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            Some(ns) => errs.extend(invalid_each(
                &path.child("namespace"),
                ns,
                is_dns1123_label(ns),
            )),
        },
        "Cluster" => {
            if params.namespace.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("scope"),
            other,
            &["Cluster", "Namespace"],
        )),
    }
    errs
}

// NetworkPolicies

/// A new NetworkPolicy.
pub fn validate_network_policy(policy: &NetworkPolicy) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &policy.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    let spec = policy.spec.clone().unwrap_or_default();
    errs.extend(validate_policy_spec(&spec, false, &[]));
    errs
}

/// An update of a NetworkPolicy: CIDRs it already had stay allowed, as does an invalid label
/// value its pod selector already had.
pub fn validate_network_policy_update(new: &NetworkPolicy, old: &NetworkPolicy) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let old_spec = old.spec.clone().unwrap_or_default();
    let allow_invalid_labels =
        !validate_label_selector(old_spec.pod_selector.as_ref(), false, &Path::new("")).is_empty();
    let mut existing: Vec<String> = Vec::new();
    let peers = old_spec
        .ingress
        .iter()
        .flatten()
        .flat_map(|r| r.from.iter().flatten())
        .chain(
            old_spec
                .egress
                .iter()
                .flatten()
                .flat_map(|r| r.to.iter().flatten()),
        );
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            existing.push(block.cidr.clone());
            existing.extend(block.except.iter().flatten().cloned());
        }
    }
    let spec = new.spec.clone().unwrap_or_default();
    errs.extend(validate_policy_spec(&spec, allow_invalid_labels, &existing));
    errs
}

fn validate_policy_spec(
    spec: &NetworkPolicySpec,
    allow_invalid_labels: bool,
    existing_cidrs: &[String],
) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = validate_label_selector(
        spec.pod_selector.as_ref(),
        allow_invalid_labels,
        &path.child("podSelector"),
    );
    for (i, rule) in spec.ingress.iter().flatten().enumerate() {
        let at = path.child("ingress").index(i);
        for (j, port) in rule.ports.iter().flatten().enumerate() {
            errs.extend(validate_policy_port(port, &at.child("ports").index(j)));
        }
        for (j, peer) in rule.from.iter().flatten().enumerate() {
            errs.extend(validate_peer(
                peer,
                allow_invalid_labels,
                existing_cidrs,
                &at.child("from").index(j),
            ));
        }
    }
    for (i, rule) in spec.egress.iter().flatten().enumerate() {
        let at = path.child("egress").index(i);
        for (j, port) in rule.ports.iter().flatten().enumerate() {
            errs.extend(validate_policy_port(port, &at.child("ports").index(j)));
        }
        for (j, peer) in rule.to.iter().flatten().enumerate() {
            errs.extend(validate_peer(
                peer,
                allow_invalid_labels,
                existing_cidrs,
                &at.child("to").index(j),
            ));
        }
    }
    let types = spec.policy_types.as_deref().unwrap_or_default();
    if types.len() > 2 {
        errs.push(FieldError::invalid(
            &path.child("policyTypes"),
            BadValue::Other(format!(
                "&{}",
                crate::validation::meta::go_string_slice(types)
            )),
            "may not specify more than two policyTypes",
        ));
        return errs;
    }
    for (i, t) in types.iter().enumerate() {
        if t != "Ingress" && t != "Egress" {
            errs.push(FieldError::not_supported(
                &path.child("policyTypes").index(i),
                t.as_str(),
                &["Ingress", "Egress"],
            ));
        }
    }
    errs
}

fn validate_policy_port(port: &NetworkPolicyPort, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(protocol) = port.protocol.as_deref()
        && !matches!(protocol, "TCP" | "UDP" | "SCTP")
    {
        errs.push(FieldError::not_supported(
            &path.child("protocol"),
            protocol,
            &["TCP", "UDP", "SCTP"],
        ));
    }
    match &port.port {
        Some(IntOrString::Int(number)) => {
            for msg in is_valid_port_num(i64::from(*number)) {
                errs.push(FieldError::invalid(&path.child("port"), *number, &msg));
            }
            if let Some(end) = port.end_port {
                if end < *number {
                    errs.push(FieldError::invalid(
                        &path.child("endPort"),
                        end,
                        "must be greater than or equal to `port`",
                    ));
                }
                for msg in is_valid_port_num(i64::from(end)) {
                    errs.push(FieldError::invalid(&path.child("endPort"), end, &msg));
                }
            }
        }
        Some(IntOrString::String(name)) => {
            if let Some(end) = port.end_port {
                errs.push(FieldError::invalid(
                    &path.child("endPort"),
                    end,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            errs.extend(invalid_each(
                &path.child("port"),
                name,
                is_valid_port_name(name),
            ));
        }
        None => {
            if let Some(end) = port.end_port {
                errs.push(FieldError::invalid(
                    &path.child("endPort"),
                    end,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
    errs
}

fn validate_peer(
    peer: &NetworkPolicyPeer,
    allow_invalid_labels: bool,
    existing_cidrs: &[String],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut peers = 0;
    if let Some(selector) = &peer.pod_selector {
        peers += 1;
        errs.extend(validate_label_selector(
            Some(selector),
            allow_invalid_labels,
            &path.child("podSelector"),
        ));
    }
    if let Some(selector) = &peer.namespace_selector {
        peers += 1;
        errs.extend(validate_label_selector(
            Some(selector),
            allow_invalid_labels,
            &path.child("namespaceSelector"),
        ));
    }
    if let Some(block) = &peer.ip_block {
        peers += 1;
        errs.extend(validate_ip_block(
            block,
            existing_cidrs,
            &path.child("ipBlock"),
        ));
    }
    if peers == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    } else if peers > 1 && peer.ip_block.is_some() {
        errs.push(FieldError::forbidden(
            path,
            "may not specify both ipBlock and another peer",
        ));
    }
    errs
}

fn validate_ip_block(block: &IPBlock, existing: &[String], path: &Path) -> Vec<FieldError> {
    if block.cidr.is_empty() {
        return vec![FieldError::required(&path.child("cidr"), "")];
    }
    let check = |p: &Path, value: &str| {
        if existing.iter().any(|e| e == value) {
            Vec::new()
        } else {
            validate_cidr_legacy(p, value)
        }
    };
    let mut errs = check(&path.child("cidr"), &block.cidr);
    let Some(cidr) = parse_cidr_sloppy(&block.cidr) else {
        return errs;
    };
    for (i, except) in block.except.iter().flatten().enumerate() {
        let at = path.child("except").index(i);
        errs.extend(check(&at, except));
        if let Some(inner) = parse_cidr_sloppy(except)
            && !cidr_strictly_inside(cidr, inner)
        {
            errs.push(FieldError::invalid(
                &at,
                except.as_str(),
                "must be a strict subset of `cidr`",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    use crate::validation::test_support::messages;

    use crate::validation::test_support::decode;

    #[test]
    fn ingress_rules_paths_and_backends() {
        let ingress: Ingress = decode(json!({
            "metadata": {"name": "web", "namespace": "ns",
                "annotations": {"kubernetes.io/ingress.class": "nginx"}},
            "spec": {
                "ingressClassName": "traefik",
                "rules": [
                    {"host": "shop.example.com", "http": {"paths": [
                        {"path": "/", "pathType": "Prefix",
                         "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                        {"path": "a//b", "pathType": "Exact",
                         "backend": {"service": {"name": "Web", "port": {"name": "http", "number": 80}}}},
                        {"path": "/x", "pathType": "Regex",
                         "backend": {}}
                    ]}},
                    {"host": "10.0.0.1"},
                    {"host": "*.example.com", "http": {"paths": []}}
                ],
                "tls": [{"hosts": ["*.bad*"], "secretName": "Bad_Name"}]
            }
        }));
        let errs = messages(&validate_ingress(&ingress));
        let expected = [
            "spec.rules[0].http.paths[1].path: Invalid value: \"a//b\": must be an absolute path",
            "spec.rules[0].http.paths[1].path: Invalid value: \"a//b\": must not contain '//'",
            "spec.rules[0].http.paths[1].backend.service.name: Invalid value: \"Web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            "spec.rules[0].http.paths[1].backend: Invalid value: \"\": cannot set both port name & port number",
            "spec.rules[0].http.paths[2].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            "spec.rules[0].http.paths[2].backend: Invalid value: \"\": resource or service backend is required",
            "spec.rules[1].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            "spec.rules[2].http.paths: Required value",
        ];
        for e in expected {
            assert!(errs.iter().any(|m| m == e), "missing {e}\nin {errs:#?}");
        }
        assert!(
            errs.iter().any(|m| m.starts_with(
                "spec.tls[0].hosts[0]: Invalid value: \"*.bad*\": a wildcard DNS-1123 subdomain"
            )),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|m| m.starts_with("spec.tls[0].secretName: Invalid value: \"Bad_Name\"")),
            "{errs:#?}"
        );
        assert!(errs.iter().any(|m| m == "annotations.kubernetes.io/ingress.class: Invalid value: \"nginx\": must match `ingressClassName` when both are specified"), "{errs:#?}");
        let empty: Ingress =
            decode(json!({"metadata": {"name": "e", "namespace": "ns"}, "spec": {}}));
        assert_eq!(
            messages(&validate_ingress(&empty)),
            [
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
            ]
        );
    }

    #[test]
    fn ingress_classes_and_network_policies() {
        let class: IngressClass = decode(json!({
            "metadata": {"name": "nginx"},
            "spec": {"controller": "k8s.io/ingress-nginx",
                "parameters": {"kind": "Config", "name": "c", "scope": "Namespace"}}
        }));
        assert_eq!(
            messages(&validate_ingress_class(&class)),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
        let bad: IngressClass =
            decode(json!({"metadata": {"name": "x"}, "spec": {"controller": "nginx"}}));
        assert_eq!(
            messages(&validate_ingress_class(&bad)),
            [
                "spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"
            ]
        );
        let policy: NetworkPolicy = decode(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "podSelector": {},
                "ingress": [{"ports": [{"port": 80, "endPort": 70}, {"port": "http", "endPort": 90}],
                    "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16", "10.1.0.0/16"]},
                        "podSelector": {}}]}],
                "policyTypes": ["Ingress", "Sideways"]
            }
        }));
        assert_eq!(
            messages(&validate_network_policy(&policy)),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 70: must be greater than or equal to `port`",
                "spec.ingress[0].ports[1].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
                "spec.ingress[0].from[0]: Required value: must specify a peer",
                "spec.ingress[0].from[1].ipBlock.except[0]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`",
                "spec.ingress[0].from[1]: Forbidden: may not specify both ipBlock and another peer",
                "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\"",
            ]
        );
    }

    #[test]
    fn ip_addresses_are_canonical_ips_with_a_parent() {
        let ip = |name: &str, parent: Value| -> IPAddress {
            decode(json!({"metadata": {"name": name}, "spec": {"parentRef": parent}}))
        };
        let service =
            json!({"group": "", "resource": "services", "namespace": "ns", "name": "web"});
        assert!(validate_ip_address(&ip("10.43.0.12", service.clone())).is_empty());
        assert!(validate_ip_address(&ip("2001:db8::1", service.clone())).is_empty());
        assert_eq!(
            messages(&validate_ip_address(&ip("010.43.0.12", service.clone()))),
            ["metadata.name: Invalid value: \"010.43.0.12\": must not have leading 0s"]
        );
        assert_eq!(
            messages(&validate_ip_address(&ip("2001:db8:0::1", service.clone()))),
            [
                "metadata.name: Invalid value: \"2001:db8:0::1\": must be in canonical form (\"2001:db8::1\")"
            ]
        );
        assert_eq!(
            messages(&validate_ip_address(&ip("web", service.clone()))),
            [
                "metadata.name: Invalid value: \"web\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ]
        );
        assert_eq!(
            messages(&validate_ip_address(&ip("10.43.0.12", json!({})))),
            ["spec.parentRef: Required value"]
        );
        assert_eq!(
            messages(&validate_ip_address(&ip(
                "10.43.0.12",
                json!({"group": "Bad_Group", "resource": "a/b", "name": "x"})
            ))),
            [
                "spec.parentRef.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.parentRef.resource: Invalid value: \"a/b\": may not contain '/'",
            ]
        );
        let mut old = ip("10.43.0.12", service);
        old.metadata.resource_version = Some("5".into());
        let mut new = ip(
            "10.43.0.12",
            json!({"resource": "services", "namespace": "ns", "name": "other"}),
        );
        new.metadata.resource_version = Some("5".into());
        assert_eq!(
            messages(&validate_ip_address_update(&new, &old)),
            [
                "spec.parentRef: Invalid value: networking.ParentReference{Group:\"\", Resource:\"services\", Namespace:\"ns\", Name:\"other\"}: field is immutable"
            ]
        );
    }

    #[test]
    fn service_cidrs_hold_one_cidr_per_family() {
        let cidr = |cidrs: Value| -> ServiceCIDR {
            decode(json!({"metadata": {"name": "extra"}, "spec": {"cidrs": cidrs}}))
        };
        assert!(validate_service_cidr(&cidr(json!(["10.44.0.0/16"]))).is_empty());
        assert!(validate_service_cidr(&cidr(json!(["10.44.0.0/16", "2001:db8::/112"]))).is_empty());
        for (cidrs, expected) in [
            (
                json!([]),
                "spec.cidrs: Required value: at least one CIDR required",
            ),
            (
                json!(["10.44.0.0/16", "10.45.0.0/16"]),
                "spec.cidrs: Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{\"10.44.0.0/16\", \"10.45.0.0/16\"}}: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ),
            (
                json!(["a", "b", "c"]),
                "spec.cidrs: Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{\"a\", \"b\", \"c\"}}: may only hold up to 2 values",
            ),
            (
                json!(["10.44.0.1/16"]),
                "spec.cidrs[0]: Invalid value: \"10.44.0.1/16\": must not have bits set beyond the prefix length",
            ),
            (
                json!(["10.44.0.0/016"]),
                "spec.cidrs[0]: Invalid value: \"10.44.0.0/016\": must not have leading 0s in IP or prefix length",
            ),
            (
                json!(["2001:db8:0::/64"]),
                "spec.cidrs[0]: Invalid value: \"2001:db8:0::/64\": must be in canonical form (\"2001:db8::/64\")",
            ),
            (
                json!(["10.44.0.0"]),
                "spec.cidrs[0]: Invalid value: \"10.44.0.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ),
        ] {
            assert_eq!(messages(&validate_service_cidr(&cidr(cidrs))), [expected]);
        }
        let mut old = cidr(json!(["10.44.0.0/16"]));
        old.metadata.resource_version = Some("5".into());
        let mut new = cidr(json!(["10.45.0.0/16"]));
        new.metadata.resource_version = Some("5".into());
        assert_eq!(
            messages(&validate_service_cidr_update(&new, &old)),
            ["spec.cidrs: Invalid value: []string{\"10.45.0.0/16\"}: field is immutable"]
        );
    }
}
