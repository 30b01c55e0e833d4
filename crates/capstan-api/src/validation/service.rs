//! Services: ports (required unless headless or ExternalName, named when several, unique by
//! protocol and port), selector labels, session affinity, cluster IPs and families, external
//! IPs, node ports, traffic policies, and the update rules for cluster IPs and families.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{
    go_string_slice, validate_labels, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::{
    NameValidator, is_valid_port_num, parse_ip_sloppy, validate_cidr_legacy,
    validate_dns1123_label, validate_dns1123_subdomain, validate_ip_legacy,
    validate_qualified_name,
};
use crate::validation::pod::{PORT_PROTOCOLS, validate_port_num_or_name};

/// Service types upstream supports (sorted).
pub const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

fn opt_str(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

fn is_headless(spec: &ServiceSpec) -> bool {
    spec.cluster_ips
        .as_deref()
        .is_some_and(|ips| ips.len() == 1 && ips[0] == "None")
}

fn go_int_or_string(v: &Option<IntOrString>) -> String {
    match v {
        Some(IntOrString::String(s)) => format!(
            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
            crate::field::go_quote(s)
        ),
        Some(IntOrString::Int(i)) => {
            format!("intstr.IntOrString{{Type:0, IntVal:{i}, StrVal:\"\"}}")
        }
        None => "intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}".to_owned(),
    }
}

fn validate_service_port(
    sp: &ServicePort,
    require_name: bool,
    names: &mut BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = opt_str(&sp.name);
    if require_name && name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else if !name.is_empty() {
        errs.extend(validate_dns1123_label(name, &path.child("name")));
        if !names.insert(name.to_owned()) {
            errs.push(FieldError::duplicate(&path.child("name"), name));
        }
    }
    for msg in is_valid_port_num(i64::from(sp.port)) {
        errs.push(FieldError::invalid(&path.child("port"), sp.port, &msg));
    }
    match opt_str(&sp.protocol) {
        "" => errs.push(FieldError::required(&path.child("protocol"), "")),
        p if !PORT_PROTOCOLS.contains(&p) => errs.push(FieldError::not_supported(
            &path.child("protocol"),
            p,
            PORT_PROTOCOLS,
        )),
        _ => {}
    }
    errs.extend(validate_port_num_or_name(
        sp.target_port.as_ref().unwrap_or(&IntOrString::Int(0)),
        &path.child("targetPort"),
    ));
    if let Some(app) = &sp.app_protocol {
        errs.extend(validate_qualified_name(app, &path.child("appProtocol")));
    }
    errs
}

fn validate_cluster_ips(spec: &ServiceSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if opt_str(&spec.type_) == "ExternalName" {
        return errs;
    }
    let ips_path = Path::new("spec").child("clusterIPs");
    let ips = spec.cluster_ips.clone().unwrap_or_default();
    let shown = || BadValue::Other(go_string_slice(&ips));
    let cluster_ip = opt_str(&spec.cluster_ip);
    if !cluster_ip.is_empty() {
        if ips.is_empty() {
            errs.push(FieldError::required(&ips_path, ""));
        } else if ips[0] != cluster_ip {
            errs.push(FieldError::invalid(
                &ips_path,
                shown(),
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        errs.push(FieldError::invalid(
            &ips_path,
            shown(),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let families = spec.ip_families.clone().unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (i, family) in families.iter().enumerate() {
        if family != "IPv4" && family != "IPv6" {
            errs.push(FieldError::not_supported(
                &Path::new("spec").child("ipFamilies").index(i),
                family.as_str(),
                &["IPv4", "IPv6"],
            ));
        }
        if !seen.insert(family) {
            errs.push(FieldError::duplicate(
                &Path::new("spec").child("ipFamilies").index(i),
                family.as_str(),
            ));
        }
    }
    if let Some(policy) = &spec.ip_family_policy {
        const POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
        if !POLICIES.contains(&policy.as_str()) {
            errs.push(FieldError::not_supported(
                &Path::new("spec").child("ipFamilyPolicy"),
                policy.as_str(),
                POLICIES,
            ));
        }
    }
    let mut invalid = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                invalid = true;
                errs.push(FieldError::invalid(
                    &ips_path,
                    shown(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        let e = validate_ip_legacy(&ips_path.index(i), ip);
        invalid |= !e.is_empty();
        errs.extend(e);
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid(
            &ips_path,
            shown(),
            "may only hold up to 2 values",
        ));
    }
    if invalid {
        return errs;
    }
    if ips.len() > 1 {
        let v6: Vec<bool> = ips
            .iter()
            .filter_map(|ip| parse_ip_sloppy(ip))
            .map(|ip| ip.is_ipv6())
            .collect();
        if !(v6.len() == 2 && v6[0] != v6[1]) {
            errs.push(FieldError::invalid(
                &ips_path,
                shown(),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !is_headless(spec) {
        for (i, (ip, family)) in ips.iter().zip(&families).enumerate() {
            let is_v6 = parse_ip_sloppy(ip).is_some_and(|p| p.is_ipv6());
            if family == "IPv4" && is_v6 {
                errs.push(FieldError::invalid(
                    &ips_path.index(i),
                    ip.as_str(),
                    &format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
            if family == "IPv6" && !is_v6 {
                errs.push(FieldError::invalid(
                    &ips_path.index(i),
                    ip.as_str(),
                    &format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    errs
}

/// An IP that is not unspecified, loopback or link-local (endpoints and external IPs).
pub fn validate_non_special_ip(ip: &str, path: &Path) -> Vec<FieldError> {
    let Some(parsed) = parse_ip_sloppy(ip) else {
        return vec![FieldError::invalid(path, ip, "must be a valid IP address")];
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match parsed {
        crate::validation::names::ParsedIp::V4(v4) => (
            v4.is_unspecified(),
            v4.is_loopback(),
            v4.is_link_local(),
            v4.octets()[..3] == [224, 0, 0],
        ),
        crate::validation::names::ParsedIp::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => (
                v4.is_unspecified(),
                v4.is_loopback(),
                v4.is_link_local(),
                v4.octets()[..3] == [224, 0, 0],
            ),
            None => (
                v6.is_unspecified(),
                v6.is_loopback(),
                (v6.segments()[0] & 0xffc0) == 0xfe80,
                (v6.segments()[0] & 0xff0f) == 0xff02,
            ),
        },
    };
    let mut errs = Vec::new();
    if unspecified {
        errs.push(FieldError::invalid(
            path,
            ip,
            &format!("may not be unspecified ({ip})"),
        ));
    }
    if loopback {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    if link_local {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_multicast {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
    errs
}

/// A Service (namespaced, DNS-1035 name).
pub fn validate_service(svc: &Service) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let mut errs =
        validate_object_meta(&svc.metadata, true, NameValidator::Dns1035Label, &meta_path);
    let spec_path = Path::new("spec");
    let spec = svc.spec.clone().unwrap_or_default();
    let service_type = opt_str(&spec.type_);
    let ports = spec.ports.clone().unwrap_or_default();
    if ports.is_empty() && !is_headless(&spec) && service_type != "ExternalName" {
        errs.push(FieldError::required(&spec_path.child("ports"), ""));
    }
    match service_type {
        "LoadBalancer" | "NodePort" if is_headless(&spec) => {
            errs.push(FieldError::invalid(
                &spec_path.child("clusterIPs").index(0),
                "None",
                &format!("may not be set to 'None' for {service_type} services"),
            ));
        }
        "ExternalName" => {
            if spec.cluster_ips.as_ref().is_some_and(|ips| !ips.is_empty()) {
                errs.push(FieldError::forbidden(
                    &spec_path.child("clusterIPs"),
                    "may not be set for ExternalName services",
                ));
            }
            if spec.ip_families.as_ref().is_some_and(|f| !f.is_empty()) {
                errs.push(FieldError::forbidden(
                    &spec_path.child("ipFamilies"),
                    "may not be set for ExternalName services",
                ));
            }
            if spec.ip_family_policy.is_some() {
                errs.push(FieldError::forbidden(
                    &spec_path.child("ipFamilyPolicy"),
                    "may not be set for ExternalName services",
                ));
            }
            let cname = opt_str(&spec.external_name);
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                errs.push(FieldError::required(&spec_path.child("externalName"), ""));
            } else {
                errs.extend(validate_dns1123_subdomain(
                    cname,
                    &spec_path.child("externalName"),
                ));
            }
        }
        _ => {}
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        errs.extend(validate_service_port(
            port,
            ports.len() > 1,
            &mut names,
            &spec_path.child("ports").index(i),
        ));
    }
    if spec.selector.is_some() {
        errs.extend(validate_labels(
            spec.selector.as_ref(),
            &spec_path.child("selector"),
        ));
    }
    match opt_str(&spec.session_affinity) {
        "" => errs.push(FieldError::required(
            &spec_path.child("sessionAffinity"),
            "",
        )),
        "ClientIP" => {
            let p = spec_path.child("sessionAffinityConfig");
            match spec
                .session_affinity_config
                .as_ref()
                .map(|c| c.client_ip.as_ref())
            {
                None => errs.push(FieldError::required(
                    &p,
                    "when session affinity type is ClientIP",
                )),
                Some(None) => errs.push(FieldError::required(
                    &p.child("clientIP"),
                    "when session affinity type is ClientIP",
                )),
                Some(Some(c)) => match c.timeout_seconds {
                    None => errs.push(FieldError::required(
                        &p.child("clientIP").child("timeoutSeconds"),
                        "when session affinity type is ClientIP",
                    )),
                    Some(t) if t <= 0 || t > 86400 => errs.push(FieldError::invalid(
                        &p.child("clientIP").child("timeoutSeconds"),
                        t,
                        "must be greater than 0 and less than 86400",
                    )),
                    Some(_) => {}
                },
            }
        }
        "None" => {
            if spec.session_affinity_config.is_some() {
                errs.push(FieldError::forbidden(
                    &spec_path.child("sessionAffinityConfig"),
                    "must not be set when session affinity is None",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &spec_path.child("sessionAffinity"),
            other,
            &["ClientIP", "None"],
        )),
    }
    errs.extend(validate_cluster_ips(&spec));
    for (i, ip) in spec.external_ips.iter().flatten().enumerate() {
        let p = spec_path.child("externalIPs").index(i);
        let e = validate_ip_legacy(&p, ip);
        if e.is_empty() {
            errs.extend(validate_non_special_ip(ip, &p));
        } else {
            errs.extend(e);
        }
    }
    if service_type.is_empty() {
        errs.push(FieldError::required(&spec_path.child("type"), ""));
    } else if !SERVICE_TYPES.contains(&service_type) {
        errs.push(FieldError::not_supported(
            &spec_path.child("type"),
            service_type,
            SERVICE_TYPES,
        ));
    }
    if service_type == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.node_port.unwrap_or(0) != 0 {
                errs.push(FieldError::forbidden(
                    &spec_path.child("ports").index(i).child("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut node_ports = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let node_port = port.node_port.unwrap_or(0);
        if node_port != 0 && !node_ports.insert((opt_str(&port.protocol).to_owned(), node_port)) {
            errs.push(FieldError::duplicate(
                &spec_path.child("ports").index(i).child("nodePort"),
                node_port,
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        if !seen.insert((opt_str(&port.protocol).to_owned(), port.port)) {
            let shown = format!(
                "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{}, TargetPort:{}, NodePort:0}}",
                crate::field::go_quote(opt_str(&port.protocol)),
                port.port,
                go_int_or_string(&None),
            );
            errs.push(FieldError::duplicate(
                &spec_path.child("ports").index(i),
                BadValue::Other(shown),
            ));
        }
    }
    let ranges = spec.load_balancer_source_ranges.clone().unwrap_or_default();
    if !ranges.is_empty() {
        let p = spec_path.child("LoadBalancerSourceRanges");
        if service_type != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                &p,
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, range) in ranges.iter().enumerate() {
            errs.extend(validate_cidr_legacy(&p.index(i), range.trim()));
        }
    }
    if spec.allocate_load_balancer_node_ports.is_some() && service_type != "LoadBalancer" {
        errs.push(FieldError::forbidden(
            &spec_path.child("allocateLoadBalancerNodePorts"),
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if service_type == "LoadBalancer" && spec.allocate_load_balancer_node_ports.is_none() {
        errs.push(FieldError::required(
            &Path::new("allocateLoadBalancerNodePorts"),
            "",
        ));
    }
    if let Some(class) = &spec.load_balancer_class {
        if service_type != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                &spec_path.child("loadBalancerClass"),
                "may only be used when service type is 'LoadBalancer'",
            ));
        } else {
            errs.extend(validate_qualified_name(
                class,
                &spec_path.child("loadBalancerClass"),
            ));
        }
    }
    let externally_accessible = crate::defaults::core::externally_accessible(&spec);
    let etp = opt_str(&spec.external_traffic_policy);
    if !externally_accessible {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                &spec_path.child("externalTrafficPolicy"),
                etp,
                "may only be set for externally-accessible services",
            ));
        }
    } else if etp.is_empty() {
        errs.push(FieldError::required(
            &spec_path.child("externalTrafficPolicy"),
            "",
        ));
    } else if etp != "Cluster" && etp != "Local" {
        errs.push(FieldError::not_supported(
            &spec_path.child("externalTrafficPolicy"),
            etp,
            &["Cluster", "Local"],
        ));
    }
    let health = spec.health_check_node_port.unwrap_or(0);
    if !(service_type == "LoadBalancer" && etp == "Local") {
        if health != 0 {
            errs.push(FieldError::invalid(&spec_path.child("healthCheckNodePort"), health, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"));
        }
    } else if health == 0 {
        errs.push(FieldError::required(
            &spec_path.child("healthCheckNodePort"),
            "",
        ));
    } else {
        for msg in is_valid_port_num(i64::from(health)) {
            errs.push(FieldError::invalid(
                &spec_path.child("healthCheckNodePort"),
                health,
                &msg,
            ));
        }
    }
    match &spec.internal_traffic_policy {
        None if matches!(service_type, "NodePort" | "LoadBalancer" | "ClusterIP") => {
            errs.push(FieldError::required(
                &spec_path.child("internalTrafficPolicy"),
                "",
            ));
        }
        Some(p) if p != "Cluster" && p != "Local" => {
            errs.push(FieldError::not_supported(
                &spec_path.child("internalTrafficPolicy"),
                p.as_str(),
                &["Cluster", "Local"],
            ));
        }
        _ => {}
    }
    if let Some(td) = &spec.traffic_distribution
        && td != "PreferClose"
    {
        errs.push(FieldError::not_supported(
            &spec_path.child("trafficDistribution"),
            td.as_str(),
            &["PreferClose"],
        ));
    }
    errs
}

/// An update of a Service: cluster IPs and families may not change once set (secondaries may be
/// added or removed), the health-check node port is fixed, and the new service must be valid.
pub fn validate_service_update(new: &Service, old: &Service) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    let external = |s: &ServiceSpec| opt_str(&s.type_) == "ExternalName";
    let both_headless = is_headless(&new_spec) && is_headless(&old_spec);
    if !(external(&new_spec) || external(&old_spec) || both_headless) {
        let new_ips = new_spec.cluster_ips.clone().unwrap_or_default();
        let old_ips = old_spec.cluster_ips.clone().unwrap_or_default();
        let p = Path::new("spec").child("clusterIPs");
        let shown = || BadValue::Other(go_string_slice(&new_ips));
        if old_ips.len() == new_ips.len() {
            for (i, (a, b)) in old_ips.iter().zip(&new_ips).enumerate() {
                if a != b {
                    errs.push(FieldError::invalid(
                        &p.index(i),
                        shown(),
                        "may not change once set",
                    ));
                }
            }
        } else if old_ips.len() > new_ips.len() {
            if new_ips.is_empty() {
                errs.push(FieldError::invalid(
                    &p.index(0),
                    shown(),
                    "primary clusterIP can not be unset",
                ));
            }
            if !new_ips.is_empty() && !old_ips.is_empty() && new_ips[0] != old_ips[0] {
                errs.push(FieldError::invalid(
                    &p.index(0),
                    shown(),
                    "may not change once set",
                ));
            }
            if new_ips.len() == 1 && new_spec.ip_family_policy.as_deref() != Some("SingleStack") {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("ipFamilyPolicy"),
                    new_spec
                        .ip_family_policy
                        .clone()
                        .map_or(BadValue::Null, BadValue::Str),
                    "must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        } else if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
            errs.push(FieldError::invalid(
                &p.index(0),
                shown(),
                "may not change once set",
            ));
        }
    }
    let needs_health = |s: &ServiceSpec| {
        opt_str(&s.type_) == "LoadBalancer" && opt_str(&s.external_traffic_policy) == "Local"
    };
    if needs_health(&new_spec)
        && needs_health(&old_spec)
        && new_spec.health_check_node_port != old_spec.health_check_node_port
    {
        errs.push(FieldError::forbidden(
            &Path::new("spec").child("healthCheckNodePort"),
            "field is immutable",
        ));
    }
    errs.extend(validate_service(new));
    errs
}

/// Load-balancer IP modes (sorted).
pub const LOAD_BALANCER_IP_MODES: &[&str] = &["Proxy", "VIP"];

/// A Service's `status.loadBalancer` at `path`: ingress points only for `LoadBalancer`
/// services, each with a valid IP (and then an IP mode, `VIP` or `Proxy`) and a hostname that
/// is a DNS name rather than an IP address. 1.33 leaves `AllowServiceLBStatusOnNonLB` off and
/// `LoadBalancerIPMode` on.
pub fn validate_load_balancer_status(
    status: Option<&k8s_openapi::api::core::v1::LoadBalancerStatus>,
    spec: &ServiceSpec,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ingress = status.and_then(|s| s.ingress.as_deref()).unwrap_or(&[]);
    let ingress_path = path.child("ingress");
    if opt_str(&spec.type_) != "LoadBalancer" && !ingress.is_empty() {
        errs.push(FieldError::forbidden(
            &ingress_path,
            "may only be used when `spec.type` is 'LoadBalancer'",
        ));
        return errs;
    }
    for (i, point) in ingress.iter().enumerate() {
        let p = ingress_path.index(i);
        let ip = opt_str(&point.ip);
        if !ip.is_empty() {
            errs.extend(validate_ip_legacy(&p.child("ip"), ip));
        }
        match point.ip_mode.as_deref() {
            None if !ip.is_empty() => errs.push(FieldError::required(
                &p.child("ipMode"),
                "must be specified when `ip` is set",
            )),
            None => {}
            Some(_) if ip.is_empty() => errs.push(FieldError::forbidden(
                &p.child("ipMode"),
                "may not be specified when `ip` is not set",
            )),
            Some(mode) if !LOAD_BALANCER_IP_MODES.contains(&mode) => errs.push(
                FieldError::not_supported(&p.child("ipMode"), mode, LOAD_BALANCER_IP_MODES),
            ),
            Some(_) => {}
        }
        let hostname = opt_str(&point.hostname);
        if !hostname.is_empty() {
            errs.extend(validate_dns1123_subdomain(hostname, &p.child("hostname")));
            if parse_ip_sloppy(hostname).is_some() {
                errs.push(FieldError::invalid(
                    &p.child("hostname"),
                    hostname,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

/// An update of a Service's status subresource: the metadata rules and the load balancer's
/// status.
pub fn validate_service_status_update(new: &Service, old: &Service) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    errs.extend(validate_load_balancer_status(
        new.status.as_ref().and_then(|s| s.load_balancer.as_ref()),
        &new.spec.clone().unwrap_or_default(),
        &Path::new("status").child("loadBalancer"),
    ));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn check(svc: Service, expected: &[&str]) {
        let got: Vec<String> = validate_service(&svc)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, expected);
    }

    fn service(spec: serde_json::Value) -> Service {
        let mut svc = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("d".into()),
                ..Default::default()
            },
            spec: Some(serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}"))),
            status: None,
        };
        crate::defaults::core::default_service(&mut svc);
        svc
    }

    #[test]
    fn ports_and_types() {
        check(
            service(serde_json::json!({"ports": [{"port": 80}], "selector": {"app": "web"}})),
            &[],
        );
        check(
            service(serde_json::json!({})),
            &["spec.ports: Required value"],
        );
        check(
            service(
                serde_json::json!({"ports": [{"port": 80}, {"port": 80, "name": "Web"}, {"port": 0, "name": "x", "nodePort": 30000}]}),
            ),
            &[
                "spec.ports[0].name: Required value",
                "spec.ports[1].name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.ports[2].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[2].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[2].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
                "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}",
            ],
        );
        check(
            service(serde_json::json!({"type": "ExternalName", "externalName": "Bad_Name"})),
            &[
                "spec.externalName: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        );
        check(
            service(
                serde_json::json!({"clusterIP": "None", "clusterIPs": ["None"], "type": "NodePort", "ports": [{"port": 80}]}),
            ),
            &[
                "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services",
            ],
        );
        let mut svc = service(serde_json::json!({"ports": [{"port": 80}]}));
        svc.metadata.name = Some("1web".into());
        let errs = validate_service(&svc);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].detail.starts_with("a DNS-1035 label"));
    }

    #[test]
    fn cluster_ips_are_immutable() {
        let mut old = service(
            serde_json::json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]}),
        );
        old.metadata.resource_version = Some("1".into());
        let mut new = service(
            serde_json::json!({"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2"], "ports": [{"port": 80}]}),
        );
        new.metadata.resource_version = Some("1".into());
        let got: Vec<String> = validate_service_update(&new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            ["spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.2\"}: may not change once set"]
        );
        assert!(validate_service_update(&old, &old).is_empty());
    }

    #[test]
    fn load_balancer_status_updates() {
        let with_status = |type_: &str, ingress: serde_json::Value| {
            let mut svc = service(serde_json::json!({"type": type_, "ports": [{"port": 80}]}));
            svc.metadata.resource_version = Some("1".into());
            svc.status = Some(
                serde_json::from_value(serde_json::json!({"loadBalancer": {"ingress": ingress}}))
                    .unwrap_or_else(|e| panic!("{e}")),
            );
            svc
        };
        let errors = |svc: &Service| -> Vec<String> {
            validate_service_status_update(svc, svc)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let fine = with_status(
            "LoadBalancer",
            serde_json::json!([{"ip": "1.2.3.4", "ipMode": "Proxy"}, {"hostname": "lb.example.com"}]),
        );
        assert_eq!(errors(&fine), Vec::<String>::new());
        assert_eq!(
            errors(&with_status(
                "ClusterIP",
                serde_json::json!([{"ip": "1.2.3.4", "ipMode": "VIP"}])
            )),
            [
                "status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'"
            ]
        );
        assert_eq!(
            errors(&with_status(
                "LoadBalancer",
                serde_json::json!([
                    {"ip": "1.2.3", "ipMode": "Tunnel"},
                    {"ipMode": "VIP", "hostname": "10.0.0.1"},
                    {"ip": "1.2.3.4"}
                ])
            )),
            [
                "status.loadBalancer.ingress[0].ip: Invalid value: \"1.2.3\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "status.loadBalancer.ingress[0].ipMode: Unsupported value: \"Tunnel\": supported values: \"Proxy\", \"VIP\"",
                "status.loadBalancer.ingress[1].ipMode: Forbidden: may not be specified when `ip` is not set",
                "status.loadBalancer.ingress[1].hostname: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
                "status.loadBalancer.ingress[2].ipMode: Required value: must be specified when `ip` is set",
            ]
        );
    }
}
