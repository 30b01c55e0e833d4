//! Pods and pod templates. [`validate_pod_spec`] and [`validate_pod_template_spec`] take a path
//! prefix so that workload kinds (Deployments, Jobs, ...) can validate their embedded template at
//! `spec.template`. Pod create and update follow upstream's `ValidatePodCreate` and
//! `ValidatePodUpdate`, including the list of fields an update may change.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerStatus, EnvFromSource, EnvVar, LifecycleHandler, Pod,
    PodAffinityTerm, PodSpec, PodTemplate, PodTemplateSpec, Probe, SecurityContext, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{
    go_string_slice, validate_annotations, validate_label_name, validate_label_selector,
    validate_labels, validate_nonnegative, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::parse_ip_sloppy;
use crate::validation::names::{
    NameValidator, inclusive_range_error, is_config_map_key, is_http_header_name,
    is_relaxed_env_var_name, is_valid_group_id, is_valid_label_value, is_valid_port_name,
    is_valid_port_num, is_valid_user_id, validate_dns1123_label, validate_dns1123_subdomain,
    validate_ip_legacy, validate_qualified_name,
};
use crate::validation::node::{
    validate_node_selector, validate_node_selector_term, validate_taint_effect,
};
use crate::validation::resources::validate_resource_requirements;
use crate::validation::volumes::{
    VolumeContext, VolumeIndex, validate_container_resource_field_selector,
    validate_local_descending_path, validate_object_field_selector, validate_path_no_backsteps,
    validate_volumes,
};

/// Protocols a port may use (sorted).
pub const PORT_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
/// Image pull policies (sorted).
pub const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
/// Pod restart policies, in upstream's order.
pub const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
/// DNS policies, in upstream's order.
pub const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];

/// The fields a pod update may change, as upstream lists them in its error.
pub const UPDATABLE_POD_SPEC_FIELDS: &[&str] = &[
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];

const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// Choices that depend on where a pod spec is validated.
#[derive(Clone, Copy, Debug)]
pub struct PodValidationOptions {
    /// The top-level object is a Pod (not a template): host ports must equal container ports
    /// under host networking, image volumes need a reference, and images may not be padded.
    pub resource_is_pod: bool,
    /// Whether privileged containers are allowed (`--allow-privileged`; kubeadm and kind enable
    /// it, the flag's own default is false).
    pub allow_privileged: bool,
}

impl Default for PodValidationOptions {
    fn default() -> Self {
        PodValidationOptions {
            resource_is_pod: false,
            allow_privileged: true,
        }
    }
}

fn opt_str(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

/// Upstream's NotSupported error at `path` when `value` is none of `supported`.
fn unsupported(value: &str, supported: &[&str], path: &Path) -> Option<FieldError> {
    (!supported.contains(&value)).then(|| FieldError::not_supported(path, value, supported))
}

/// An image pull policy: one of Always, IfNotPresent, Never.
pub fn validate_pull_policy(policy: &str, path: &Path) -> Vec<FieldError> {
    match policy {
        "Always" | "IfNotPresent" | "Never" => Vec::new(),
        "" => vec![FieldError::required(path, "")],
        other => vec![FieldError::not_supported(path, other, PULL_POLICIES)],
    }
}

/// A port given as a number or an IANA name.
pub fn validate_port_num_or_name(port: &IntOrString, path: &Path) -> Vec<FieldError> {
    match port {
        IntOrString::Int(n) => is_valid_port_num(i64::from(*n))
            .into_iter()
            .map(|msg| FieldError::invalid(path, *n, &msg))
            .collect(),
        IntOrString::String(s) => is_valid_port_name(s)
            .into_iter()
            .map(|msg| FieldError::invalid(path, s.as_str(), &msg))
            .collect(),
    }
}

fn validate_container_ports(c: &Container, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        let p = path.index(i);
        let name = opt_str(&port.name);
        if !name.is_empty() {
            let msgs = is_valid_port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(&p.child("name"), name, &msg));
                }
            } else if !names.insert(name) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(FieldError::required(&p.child("containerPort"), ""));
        } else {
            for msg in is_valid_port_num(i64::from(port.container_port)) {
                errs.push(FieldError::invalid(
                    &p.child("containerPort"),
                    port.container_port,
                    &msg,
                ));
            }
        }
        let host_port = port.host_port.unwrap_or(0);
        if host_port != 0 {
            for msg in is_valid_port_num(i64::from(host_port)) {
                errs.push(FieldError::invalid(&p.child("hostPort"), host_port, &msg));
            }
        }
        match opt_str(&port.protocol) {
            "" => errs.push(FieldError::required(&p.child("protocol"), "")),
            proto if !PORT_PROTOCOLS.contains(&proto) => {
                errs.push(FieldError::not_supported(
                    &p.child("protocol"),
                    proto,
                    PORT_PROTOCOLS,
                ));
            }
            _ => {}
        }
    }
    errs
}

fn validate_name_list_entry(name: &str, prefix: bool, path: &Path) -> Vec<FieldError> {
    NameValidator::DnsSubdomain
        .validate(name, prefix)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, &msg))
        .collect()
}

fn validate_key_selector(name: &str, key: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_name_list_entry(name, false, &path.child("name"));
    if key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    } else {
        for msg in is_config_map_key(key) {
            errs.push(FieldError::invalid(&path.child("key"), key, &msg));
        }
    }
    errs
}

fn validate_env(vars: &[EnvVar], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, ev) in vars.iter().enumerate() {
        let p = path.index(i);
        if ev.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            for msg in is_relaxed_env_var_name(&ev.name) {
                errs.push(FieldError::invalid(
                    &p.child("name"),
                    ev.name.as_str(),
                    &msg,
                ));
            }
        }
        let Some(from) = &ev.value_from else { continue };
        let vp = p.child("valueFrom");
        let mut count = 0;
        if let Some(fr) = &from.field_ref {
            count += 1;
            errs.extend(validate_object_field_selector(
                fr,
                ENV_FIELD_PATHS,
                &vp.child("fieldRef"),
            ));
        }
        if let Some(rfr) = &from.resource_field_ref {
            count += 1;
            errs.extend(validate_container_resource_field_selector(
                rfr,
                false,
                &vp.child("resourceFieldRef"),
            ));
        }
        if let Some(cm) = &from.config_map_key_ref {
            count += 1;
            errs.extend(validate_key_selector(
                &cm.name,
                &cm.key,
                &vp.child("configMapKeyRef"),
            ));
        }
        if let Some(s) = &from.secret_key_ref {
            count += 1;
            errs.extend(validate_key_selector(
                &s.name,
                &s.key,
                &vp.child("secretKeyRef"),
            ));
        }
        if count == 0 {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !opt_str(&ev.value).is_empty() {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not be specified when `value` is not empty",
            ));
        } else if count > 1 {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
    errs
}

fn validate_env_from(sources: &[EnvFromSource], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, ev) in sources.iter().enumerate() {
        let p = path.index(i);
        let prefix = opt_str(&ev.prefix);
        if !prefix.is_empty() {
            for msg in is_relaxed_env_var_name(prefix) {
                errs.push(FieldError::invalid(&p.child("prefix"), prefix, &msg));
            }
        }
        let mut count = 0;
        for (name, field) in [
            (
                ev.config_map_ref.as_ref().map(|r| r.name.as_str()),
                "configMapRef",
            ),
            (ev.secret_ref.as_ref().map(|r| r.name.as_str()), "secretRef"),
        ] {
            let Some(name) = name else { continue };
            count += 1;
            if name.is_empty() {
                errs.push(FieldError::required(&p.child(field).child("name"), ""));
            } else {
                errs.extend(validate_name_list_entry(
                    name,
                    true,
                    &p.child(field).child("name"),
                ));
            }
        }
        if count == 0 {
            errs.push(FieldError::invalid(
                path,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if count > 1 {
            errs.push(FieldError::invalid(
                path,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
    errs
}

fn validate_volume_mounts(c: &Container, volumes: &VolumeIndex, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let devices: BTreeMap<&str, &str> = c
        .volume_devices
        .iter()
        .flatten()
        .map(|d| (d.name.as_str(), d.device_path.as_str()))
        .collect();
    let mut mount_points = BTreeSet::new();
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let p = path.index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        }
        if !volumes.has(&m.name) {
            errs.push(FieldError::not_found(&p.child("name"), m.name.as_str()));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(&p.child("mountPath"), ""));
        }
        if !mount_points.insert(m.mount_path.as_str()) {
            errs.push(FieldError::invalid(
                &p.child("mountPath"),
                m.mount_path.as_str(),
                "must be unique",
            ));
        }
        if devices.contains_key(m.name.as_str()) {
            errs.push(FieldError::invalid(
                &p.child("name"),
                m.name.as_str(),
                "must not already exist in volumeDevices",
            ));
        }
        if devices.values().any(|d| *d == m.mount_path) {
            errs.push(FieldError::invalid(
                &p.child("mountPath"),
                m.mount_path.as_str(),
                "must not already exist as a path in volumeDevices",
            ));
        }
        let sub_path = opt_str(&m.sub_path);
        let sub_path_expr = opt_str(&m.sub_path_expr);
        if volumes.is_image(&m.name) {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    &p.child("subPath"),
                    sub_path,
                    "not allowed in image volume sources",
                ));
            }
            if !sub_path_expr.is_empty() {
                errs.push(FieldError::invalid(
                    &p.child("subPathExpr"),
                    sub_path_expr,
                    "not allowed in image volume sources",
                ));
            }
        }
        // Upstream reports these two at the list path, not the item.
        if !sub_path.is_empty() {
            errs.extend(validate_local_descending_path(
                sub_path,
                &path.child("subPath"),
            ));
        }
        if !sub_path_expr.is_empty() {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    &p.child("subPathExpr"),
                    sub_path_expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            errs.extend(validate_local_descending_path(
                sub_path_expr,
                &path.child("subPathExpr"),
            ));
        }
        if let Some(propagation) = &m.mount_propagation {
            let pp = path.child("mountPropagation");
            const SUPPORTED: &[&str] = &["Bidirectional", "HostToContainer", "None"];
            if !SUPPORTED.contains(&propagation.as_str()) {
                errs.push(FieldError::not_supported(
                    &pp,
                    propagation.as_str(),
                    SUPPORTED,
                ));
            }
            if propagation == "Bidirectional" && !privileged {
                errs.push(FieldError::forbidden(
                    &pp,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
        if let Some(rro) = &m.recursive_read_only {
            let rp = path.child("recursiveReadOnly");
            match rro.as_str() {
                "Disabled" => {}
                "Enabled" | "IfPossible" => {
                    if !m.read_only.unwrap_or(false) {
                        errs.push(FieldError::forbidden(
                            &rp,
                            "may only be specified when readOnly is true",
                        ));
                    }
                    if m.mount_propagation
                        .as_deref()
                        .is_some_and(|mp| mp != "None")
                    {
                        errs.push(FieldError::forbidden(
                            &rp,
                            "may only be specified when mountPropagation is None or not specified",
                        ));
                    }
                }
                other => errs.push(FieldError::not_supported(
                    &rp,
                    other,
                    &["Disabled", "Enabled", "IfPossible"],
                )),
            }
        }
    }
    errs
}

fn validate_volume_devices(c: &Container, volumes: &VolumeIndex, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mounts: BTreeMap<&str, &str> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    let mut paths = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (i, d) in c.volume_devices.iter().flatten().enumerate() {
        let p = path.index(i);
        if d.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        }
        if names.contains(d.name.as_str()) {
            errs.push(FieldError::invalid(
                &p.child("name"),
                d.name.as_str(),
                "must be unique",
            ));
        }
        if volumes.has(&d.name) && !volumes.is_claim(&d.name) {
            errs.push(FieldError::invalid(
                &p.child("name"),
                d.name.as_str(),
                "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
            ));
        }
        if !volumes.has(&d.name) {
            errs.push(FieldError::not_found(&p.child("name"), d.name.as_str()));
        }
        if d.device_path.is_empty() {
            errs.push(FieldError::required(&p.child("devicePath"), ""));
        }
        if paths.contains(d.device_path.as_str()) {
            errs.push(FieldError::invalid(
                &p.child("devicePath"),
                d.device_path.as_str(),
                "must be unique",
            ));
        }
        if !d.device_path.is_empty()
            && !validate_path_no_backsteps(&d.device_path, &path.child("devicePath")).is_empty()
        {
            errs.push(FieldError::invalid(
                &p.child("devicePath"),
                d.device_path.as_str(),
                "can not contain backsteps ('..')",
            ));
        } else {
            paths.insert(d.device_path.as_str());
        }
        if mounts.contains_key(d.name.as_str()) {
            errs.push(FieldError::invalid(
                &p.child("name"),
                d.name.as_str(),
                "must not already exist in volumeMounts",
            ));
        }
        if mounts.values().any(|m| *m == d.device_path) {
            errs.push(FieldError::invalid(
                &p.child("devicePath"),
                d.device_path.as_str(),
                "must not already exist as a path in volumeMounts",
            ));
        }
        if !d.name.is_empty() {
            names.insert(d.name.as_str());
        }
    }
    errs
}

fn validate_security_context(
    sc: Option<&SecurityContext>,
    host_users: bool,
    path: &Path,
    opts: &PodValidationOptions,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(sc) = sc else { return errs };
    if sc.privileged == Some(true) && !opts.allow_privileged {
        errs.push(FieldError::forbidden(
            &path.child("privileged"),
            "disallowed by cluster policy",
        ));
    }
    if let Some(uid) = sc.run_as_user {
        for msg in is_valid_user_id(uid) {
            errs.push(FieldError::invalid(&path.child("runAsUser"), uid, &msg));
        }
    }
    if let Some(gid) = sc.run_as_group {
        for msg in is_valid_group_id(gid) {
            errs.push(FieldError::invalid(&path.child("runAsGroup"), gid, &msg));
        }
    }
    if let Some(proc_mount) = &sc.proc_mount {
        errs.extend(unsupported(
            proc_mount,
            &["Default", "Unmasked"],
            &path.child("procMount"),
        ));
        if host_users && proc_mount == "Unmasked" {
            errs.push(FieldError::invalid(
                &path.child("procMount"),
                proc_mount.as_str(),
                "`hostUsers` must be false to use `Unmasked`",
            ));
        }
    }
    errs.extend(validate_seccomp_profile(
        sc.seccomp_profile.as_ref(),
        &path.child("seccompProfile"),
    ));
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            errs.push(FieldError::invalid(
                path,
                BadValue::Omitted,
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        for cap in sc.capabilities.iter().flat_map(|c| c.add.iter().flatten()) {
            if cap == "CAP_SYS_ADMIN" {
                errs.push(FieldError::invalid(path, BadValue::Omitted, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"));
            }
        }
    }
    errs.extend(validate_app_armor_profile(
        sc.app_armor_profile.as_ref(),
        &path.child("appArmorProfile"),
    ));
    errs
}

fn validate_seccomp_profile(
    profile: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(profile) = profile else { return errs };
    const TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];
    match profile.type_.as_str() {
        "" => errs.push(FieldError::required(
            &path.child("type"),
            "type is required when seccompProfile is set",
        )),
        t if !TYPES.contains(&t) => {
            errs.push(FieldError::not_supported(&path.child("type"), t, TYPES))
        }
        _ => {}
    }
    if profile.type_ == "Localhost" {
        match &profile.localhost_profile {
            None => errs.push(FieldError::required(
                &path.child("localhostProfile"),
                "must be set when seccomp type is Localhost",
            )),
            Some(p) => errs.extend(validate_local_descending_path(
                p,
                &path.child("localhostProfile"),
            )),
        }
    } else if profile.localhost_profile.is_some() {
        errs.push(FieldError::invalid(
            &path.child("localhostProfile"),
            BadValue::Omitted,
            "can only be set when seccomp type is Localhost",
        ));
    }
    errs
}

fn validate_app_armor_profile(
    profile: Option<&k8s_openapi::api::core::v1::AppArmorProfile>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(profile) = profile else { return errs };
    match profile.type_.as_str() {
        "Localhost" => match &profile.localhost_profile {
            None => errs.push(FieldError::required(
                &path.child("localhostProfile"),
                "must be set when AppArmor type is Localhost",
            )),
            Some(p) => {
                if p.trim() != p {
                    errs.push(FieldError::invalid(
                        &path.child("localhostProfile"),
                        p.as_str(),
                        "must not be padded with whitespace",
                    ));
                } else if p.is_empty() {
                    errs.push(FieldError::required(
                        &path.child("localhostProfile"),
                        "must be set when AppArmor type is Localhost",
                    ));
                }
                if p.len() > 4095 {
                    errs.push(FieldError::too_long(&path.child("localhostProfile"), 4095));
                }
            }
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(p) = &profile.localhost_profile {
                errs.push(FieldError::invalid(
                    &path.child("localhostProfile"),
                    p.as_str(),
                    "can only be set when AppArmor type is Localhost",
                ));
            }
        }
        "" => errs.push(FieldError::required(
            &path.child("type"),
            "type is required when appArmorProfile is set",
        )),
        other => errs.push(FieldError::not_supported(
            &path.child("type"),
            other,
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
    errs
}

struct ContainerContext<'a> {
    volumes: &'a VolumeIndex,
    claim_names: &'a [String],
    restart_policy: &'a str,
    host_users: bool,
    opts: &'a PodValidationOptions,
}

fn validate_container_common(
    c: &Container,
    ctx: &ContainerContext<'_>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if c.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else {
        errs.extend(validate_dns1123_label(&c.name, &path.child("name")));
    }
    if opt_str(&c.image).is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    }
    match opt_str(&c.termination_message_policy) {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            &path.child("terminationMessagePolicy"),
            "",
        )),
        other => errs.push(FieldError::not_supported(
            &path.child("terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    errs.extend(validate_container_ports(c, &path.child("ports")));
    errs.extend(validate_env(
        c.env.as_deref().unwrap_or(&[]),
        &path.child("env"),
    ));
    errs.extend(validate_env_from(
        c.env_from.as_deref().unwrap_or(&[]),
        &path.child("envFrom"),
    ));
    errs.extend(validate_volume_mounts(
        c,
        ctx.volumes,
        &path.child("volumeMounts"),
    ));
    errs.extend(validate_volume_devices(
        c,
        ctx.volumes,
        &path.child("volumeDevices"),
    ));
    errs.extend(validate_pull_policy(
        opt_str(&c.image_pull_policy),
        &path.child("imagePullPolicy"),
    ));
    errs.extend(validate_resource_requirements(
        c.resources.as_ref(),
        ctx.claim_names,
        &path.child("resources"),
    ));
    let rp = path.child("resizePolicy");
    let mut seen = BTreeSet::new();
    for (i, policy) in c.resize_policy.iter().flatten().enumerate() {
        if !seen.insert(policy.resource_name.as_str()) {
            errs.push(FieldError::duplicate(
                &rp.index(i),
                policy.resource_name.as_str(),
            ));
        }
        match policy.resource_name.as_str() {
            "cpu" | "memory" => {}
            "" => errs.push(FieldError::required(&rp, "")),
            other => errs.push(FieldError::not_supported(&rp, other, &["cpu", "memory"])),
        }
        match policy.restart_policy.as_str() {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(FieldError::required(&rp, "")),
            other => errs.push(FieldError::not_supported(
                &rp,
                other,
                &["NotRequired", "RestartContainer"],
            )),
        }
        if ctx.restart_policy == "Never" && policy.restart_policy != "NotRequired" {
            errs.push(FieldError::invalid(
                &rp,
                policy.restart_policy.as_str(),
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
    errs.extend(validate_security_context(
        c.security_context.as_ref(),
        ctx.host_users,
        &path.child("securityContext"),
        ctx.opts,
    ));
    errs
}

fn validate_handler(
    exec: Option<&k8s_openapi::api::core::v1::ExecAction>,
    http: Option<&k8s_openapi::api::core::v1::HTTPGetAction>,
    tcp: Option<&k8s_openapi::api::core::v1::TCPSocketAction>,
    grpc: Option<&k8s_openapi::api::core::v1::GRPCAction>,
    sleep: Option<&k8s_openapi::api::core::v1::SleepAction>,
    grace: Option<i64>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut count = 0;
    let mut one = |name: &str, errs: &mut Vec<FieldError>| -> bool {
        if count > 0 {
            errs.push(FieldError::forbidden(
                &path.child(name),
                "may not specify more than 1 handler type",
            ));
            false
        } else {
            count += 1;
            true
        }
    };
    if let Some(exec) = exec
        && one("exec", &mut errs)
        && exec.command.as_ref().is_none_or(Vec::is_empty)
    {
        errs.push(FieldError::required(
            &path.child("exec").child("command"),
            "",
        ));
    }
    if let Some(http) = http
        && one("httpGet", &mut errs)
    {
        let p = path.child("httpGet");
        if opt_str(&http.path).is_empty() {
            errs.push(FieldError::required(&p.child("path"), ""));
        }
        errs.extend(validate_port_num_or_name(&http.port, &p.child("port")));
        let scheme = opt_str(&http.scheme);
        errs.extend(unsupported(scheme, &["HTTP", "HTTPS"], &p.child("scheme")));
        for header in http.http_headers.iter().flatten() {
            for msg in is_http_header_name(&header.name) {
                errs.push(FieldError::invalid(
                    &p.child("httpHeaders"),
                    header.name.as_str(),
                    &msg,
                ));
            }
        }
    }
    if let Some(tcp) = tcp
        && one("tcpSocket", &mut errs)
    {
        errs.extend(validate_port_num_or_name(
            &tcp.port,
            &path.child("tcpSocket").child("port"),
        ));
    }
    if let Some(grpc) = grpc
        && one("grpc", &mut errs)
    {
        errs.extend(validate_port_num_or_name(
            &IntOrString::Int(grpc.port),
            &path.child("grpc").child("port"),
        ));
    }
    if let Some(sleep) = sleep
        && one("sleep", &mut errs)
        && let Some(grace) = grace
        && (sleep.seconds < 0 || sleep.seconds > grace)
    {
        errs.push(FieldError::invalid(
            &path.child("sleep"),
            sleep.seconds,
            &format!("must be non-negative and less than terminationGracePeriodSeconds ({grace})"),
        ));
    }
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
    errs
}

fn validate_lifecycle_handler(
    h: &LifecycleHandler,
    grace: Option<i64>,
    path: &Path,
) -> Vec<FieldError> {
    validate_handler(
        h.exec.as_ref(),
        h.http_get.as_ref(),
        h.tcp_socket.as_ref(),
        None,
        h.sleep.as_ref(),
        grace,
        path,
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

fn validate_probe(
    probe: Option<&Probe>,
    kind: ProbeKind,
    grace: Option<i64>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(probe) = probe else { return errs };
    errs.extend(validate_handler(
        probe.exec.as_ref(),
        probe.http_get.as_ref(),
        probe.tcp_socket.as_ref(),
        probe.grpc.as_ref(),
        None,
        grace,
        path,
    ));
    for (value, name) in [
        (probe.initial_delay_seconds, "initialDelaySeconds"),
        (probe.timeout_seconds, "timeoutSeconds"),
        (probe.period_seconds, "periodSeconds"),
        (probe.success_threshold, "successThreshold"),
        (probe.failure_threshold, "failureThreshold"),
    ] {
        errs.extend(validate_nonnegative(
            i64::from(value.unwrap_or(0)),
            &path.child(name),
        ));
    }
    if let Some(tgps) = probe.termination_grace_period_seconds.filter(|t| *t <= 0) {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            tgps,
            "must be greater than 0",
        ));
    }
    match kind {
        ProbeKind::Liveness | ProbeKind::Startup => {
            let success = probe.success_threshold.unwrap_or(0);
            if success != 1 {
                errs.push(FieldError::invalid(
                    &path.child("successThreshold"),
                    success,
                    "must be 1",
                ));
            }
        }
        ProbeKind::Readiness => {
            if let Some(t) = probe.termination_grace_period_seconds {
                errs.push(FieldError::invalid(
                    &path.child("terminationGracePeriodSeconds"),
                    t,
                    "must not be set for readinessProbes",
                ));
            }
        }
    }
    errs
}

fn validate_probes_and_lifecycle(
    c: &Container,
    grace: Option<i64>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(lifecycle) = &c.lifecycle {
        let p = path.child("lifecycle");
        if let Some(h) = &lifecycle.post_start {
            errs.extend(validate_lifecycle_handler(h, grace, &p.child("postStart")));
        }
        if let Some(h) = &lifecycle.pre_stop {
            errs.extend(validate_lifecycle_handler(h, grace, &p.child("preStop")));
        }
    }
    errs.extend(validate_probe(
        c.liveness_probe.as_ref(),
        ProbeKind::Liveness,
        grace,
        &path.child("livenessProbe"),
    ));
    errs.extend(validate_probe(
        c.readiness_probe.as_ref(),
        ProbeKind::Readiness,
        grace,
        &path.child("readinessProbe"),
    ));
    errs.extend(validate_probe(
        c.startup_probe.as_ref(),
        ProbeKind::Startup,
        grace,
        &path.child("startupProbe"),
    ));
    errs
}

fn check_host_port_conflicts(
    containers: &[&Container],
    path: &Path,
    offset: usize,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (ci, c) in containers.iter().enumerate() {
        for (pi, port) in c.ports.iter().flatten().enumerate() {
            let host_port = port.host_port.unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            let key = format!(
                "{}/{}/{}",
                opt_str(&port.protocol),
                opt_str(&port.host_ip),
                host_port
            );
            if !seen.insert(key.clone()) {
                errs.push(FieldError::duplicate(
                    &path
                        .index(ci + offset)
                        .child("ports")
                        .index(pi)
                        .child("hostPort"),
                    key.as_str(),
                ));
            }
        }
    }
    errs
}

pub(crate) fn validate_tolerations(tolerations: &[Toleration], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        let key = opt_str(&t.key);
        let operator = opt_str(&t.operator);
        let effect = opt_str(&t.effect);
        let value = opt_str(&t.value);
        if !key.is_empty() {
            errs.extend(validate_label_name(key, &p.child("key")));
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(FieldError::invalid(
                &p.child("operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                &p.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let msgs = is_valid_label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("operator"),
                        value,
                        &msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &p.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() {
            errs.extend(validate_taint_effect(effect, true, &p.child("effect")));
        }
    }
    errs
}

fn validate_pod_affinity_term(term: &PodAffinityTerm, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_label_selector(
        term.label_selector.as_ref(),
        false,
        &path.child("labelSelector"),
    );
    errs.extend(validate_label_selector(
        term.namespace_selector.as_ref(),
        false,
        &path.child("namespaceSelector"),
    ));
    for ns in term.namespaces.iter().flatten() {
        for msg in NameValidator::DnsLabel.validate(ns, false) {
            errs.push(FieldError::invalid(
                &path.child("namespace"),
                ns.as_str(),
                &msg,
            ));
        }
    }
    let match_keys = term.match_label_keys.as_deref().unwrap_or(&[]);
    let mismatch_keys = term.mismatch_label_keys.as_deref().unwrap_or(&[]);
    for (keys, field) in [
        (match_keys, "matchLabelKeys"),
        (mismatch_keys, "mismatchLabelKeys"),
    ] {
        if keys.is_empty() {
            continue;
        }
        if term.label_selector.is_none() {
            errs.push(FieldError::forbidden(
                &path.child(field),
                "must not be specified when labelSelector is not set",
            ));
            continue;
        }
        for (i, key) in keys.iter().enumerate() {
            errs.extend(validate_label_name(key, &path.child(field).index(i)));
        }
    }
    for (i, key) in match_keys.iter().enumerate() {
        if mismatch_keys.contains(key) {
            errs.push(FieldError::invalid(
                &path.child("matchLabelKeys").index(i),
                key.as_str(),
                "exists in both matchLabelKeys and mismatchLabelKeys",
            ));
        }
    }
    if term.topology_key.is_empty() {
        errs.push(FieldError::required(
            &path.child("topologyKey"),
            "can not be empty",
        ));
    }
    errs.extend(validate_label_name(
        &term.topology_key,
        &path.child("topologyKey"),
    ));
    errs
}

fn validate_affinity(affinity: Option<&Affinity>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(affinity) = affinity else {
        return errs;
    };
    if let Some(na) = &affinity.node_affinity {
        let p = path.child("nodeAffinity");
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            errs.extend(validate_node_selector(
                required,
                false,
                &p.child("requiredDuringSchedulingIgnoredDuringExecution"),
            ));
        }
        for (i, term) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let tp = p
                .child("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            if term.weight <= 0 || term.weight > 100 {
                errs.push(FieldError::invalid(
                    &tp.child("weight"),
                    term.weight,
                    "must be in the range 1-100",
                ));
            }
            errs.extend(validate_node_selector_term(
                &term.preference,
                true,
                &tp.child("preference"),
            ));
        }
    }
    let pod_terms = [
        affinity.pod_affinity.as_ref().map(|a| {
            (
                &a.required_during_scheduling_ignored_during_execution,
                &a.preferred_during_scheduling_ignored_during_execution,
                "podAffinity",
            )
        }),
        affinity.pod_anti_affinity.as_ref().map(|a| {
            (
                &a.required_during_scheduling_ignored_during_execution,
                &a.preferred_during_scheduling_ignored_during_execution,
                "podAntiAffinity",
            )
        }),
    ];
    for (required, preferred, field) in pod_terms.into_iter().flatten() {
        let p = path.child(field);
        for (i, term) in required.iter().flatten().enumerate() {
            errs.extend(validate_pod_affinity_term(
                term,
                &p.child("requiredDuringSchedulingIgnoredDuringExecution")
                    .index(i),
            ));
        }
        for (i, weighted) in preferred.iter().flatten().enumerate() {
            let tp = p
                .child("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            if weighted.weight <= 0 || weighted.weight > 100 {
                errs.push(FieldError::invalid(
                    &tp.child("weight"),
                    weighted.weight,
                    "must be in the range 1-100",
                ));
            }
            errs.extend(validate_pod_affinity_term(
                &weighted.pod_affinity_term,
                &tp.child("podAffinityTerm"),
            ));
        }
    }
    errs
}

fn validate_topology_spread(
    constraints: &[TopologySpreadConstraint],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let p = path.index(i);
        if c.max_skew <= 0 {
            errs.push(FieldError::invalid(
                &p.child("maxSkew"),
                c.max_skew,
                "must be greater than zero",
            ));
        }
        if c.topology_key.is_empty() {
            errs.push(FieldError::required(
                &p.child("topologyKey"),
                "can not be empty",
            ));
        }
        errs.extend(unsupported(
            &c.when_unsatisfiable,
            &["DoNotSchedule", "ScheduleAnyway"],
            &p.child("whenUnsatisfiable"),
        ));
        if constraints[i + 1..].iter().any(|o| {
            o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
        }) {
            errs.push(FieldError::duplicate(
                &p.child("{topologyKey, whenUnsatisfiable}"),
                format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable),
            ));
        }
        if let Some(min) = c.min_domains {
            if min <= 0 {
                errs.push(FieldError::invalid(
                    &p.child("minDomains"),
                    min,
                    "must be greater than zero",
                ));
            }
            if c.when_unsatisfiable != "DoNotSchedule" {
                errs.push(FieldError::invalid(
                    &p.child("minDomains"),
                    min,
                    &format!(
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {}",
                        c.when_unsatisfiable
                    ),
                ));
            }
        }
        for (policy, field) in [
            (&c.node_affinity_policy, "nodeAffinityPolicy"),
            (&c.node_taints_policy, "nodeTaintsPolicy"),
        ] {
            errs.extend(
                policy
                    .as_deref()
                    .and_then(|policy| unsupported(policy, &["Honor", "Ignore"], &p.child(field))),
            );
        }
        let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
        if !keys.is_empty() {
            let selector_keys: BTreeSet<&str> = c
                .label_selector
                .iter()
                .flat_map(|s| {
                    s.match_labels
                        .iter()
                        .flatten()
                        .map(|(k, _)| k.as_str())
                        .chain(s.match_expressions.iter().flatten().map(|e| e.key.as_str()))
                })
                .collect();
            if c.label_selector.is_none() {
                errs.push(FieldError::forbidden(
                    &p.child("matchLabelKeys"),
                    "must not be specified when labelSelector is not set",
                ));
            }
            for (j, key) in keys.iter().enumerate() {
                errs.extend(validate_label_name(
                    key,
                    &p.child("matchLabelKeys").index(j),
                ));
                if selector_keys.contains(key.as_str()) {
                    errs.push(FieldError::invalid(
                        &p.child("matchLabelKeys").index(j),
                        key.as_str(),
                        "exists in both matchLabelKeys and labelSelector",
                    ));
                }
            }
        }
        errs.extend(validate_label_selector(
            c.label_selector.as_ref(),
            false,
            &p.child("labelSelector"),
        ));
    }
    errs
}

fn validate_dns_config(spec: &PodSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let dns_policy = opt_str(&spec.dns_policy);
    if dns_policy == "None" {
        match &spec.dns_config {
            None => {
                return vec![FieldError::required(
                    path,
                    "must provide `dnsConfig` when `dnsPolicy` is None",
                )];
            }
            Some(c) if c.nameservers.as_ref().is_none_or(Vec::is_empty) => {
                return vec![FieldError::required(
                    &path.child("nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                )];
            }
            Some(_) => {}
        }
    }
    let Some(config) = &spec.dns_config else {
        return errs;
    };
    let nameservers = config.nameservers.as_deref().unwrap_or(&[]);
    if nameservers.len() > 3 {
        errs.push(FieldError::invalid(
            &path.child("nameservers"),
            BadValue::Other(go_string_slice(nameservers)),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        errs.extend(validate_ip_legacy(&path.child("nameservers").index(i), ns));
    }
    let searches = config.searches.as_deref().unwrap_or(&[]);
    if searches.len() > 32 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            BadValue::Other(go_string_slice(searches)),
            "must not have more than 32 search paths",
        ));
    }
    if searches.join(" ").len() > 2048 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            BadValue::Other(go_string_slice(searches)),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        // Relaxed DNS search validation is on in 1.33: "." and underscores are allowed.
        if search != "." {
            let trimmed = search.strip_suffix('.').unwrap_or(search);
            for msg in crate::validation::names::is_dns1123_subdomain_with_underscore(trimmed) {
                errs.push(FieldError::invalid(
                    &path.child("searches").index(i),
                    trimmed,
                    &msg,
                ));
            }
        }
    }
    for (i, option) in config.options.iter().flatten().enumerate() {
        if opt_str(&option.name).is_empty() {
            errs.push(FieldError::required(
                &path.child("options").index(i),
                "must not be empty",
            ));
        }
    }
    errs
}

fn validate_pod_security_context(spec: &PodSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let sc_path = path.child("securityContext");
    if let Some(sc) = &spec.security_context {
        if let Some(g) = sc.fs_group {
            for msg in is_valid_group_id(g) {
                errs.push(FieldError::invalid(&sc_path.child("fsGroup"), g, &msg));
            }
        }
        if let Some(u) = sc.run_as_user {
            for msg in is_valid_user_id(u) {
                errs.push(FieldError::invalid(&sc_path.child("runAsUser"), u, &msg));
            }
        }
        if let Some(g) = sc.run_as_group {
            for msg in is_valid_group_id(g) {
                errs.push(FieldError::invalid(&sc_path.child("runAsGroup"), g, &msg));
            }
        }
        for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
            for msg in is_valid_group_id(*g) {
                errs.push(FieldError::invalid(
                    &sc_path.child("supplementalGroups").index(i),
                    *g,
                    &msg,
                ));
            }
        }
        for (policy, field, supported) in [
            (
                &sc.fs_group_change_policy,
                "fsGroupChangePolicy",
                &["Always", "OnRootMismatch"],
            ),
            (
                &sc.supplemental_groups_policy,
                "supplementalGroupsPolicy",
                &["Merge", "Strict"],
            ),
            (
                &sc.se_linux_change_policy,
                "seLinuxChangePolicy",
                &["MountOption", "Recursive"],
            ),
        ] {
            errs.extend(
                policy
                    .as_deref()
                    .and_then(|policy| unsupported(policy, supported, &sc_path.child(field))),
            );
        }
        errs.extend(validate_seccomp_profile(
            sc.seccomp_profile.as_ref(),
            &sc_path.child("seccompProfile"),
        ));
        errs.extend(validate_app_armor_profile(
            sc.app_armor_profile.as_ref(),
            &sc_path.child("appArmorProfile"),
        ));
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        errs.push(FieldError::invalid(
            &sc_path.child("shareProcessNamespace"),
            true,
            "ShareProcessNamespace and HostPID cannot both be enabled",
        ));
    }
    errs
}

/// A pod spec at `path` (e.g. `spec` or `spec.template.spec`). `pod_meta` is the metadata of a
/// real pod, when there is one (generic ephemeral volumes use it).
pub fn validate_pod_spec(
    spec: &PodSpec,
    pod_meta: Option<&ObjectMeta>,
    path: &Path,
    opts: &PodValidationOptions,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.termination_grace_period_seconds.is_none() {
        errs.push(FieldError::required(
            &path.child("terminationGracePeriodSeconds"),
            "",
        ));
    }
    let grace = spec.termination_grace_period_seconds;
    let host_users = spec.host_users.unwrap_or(true);
    let (volumes, volume_errs) = validate_volumes(
        spec.volumes.as_deref().unwrap_or(&[]),
        &path.child("volumes"),
        VolumeContext {
            pod_meta,
            resource_is_pod: opts.resource_is_pod,
        },
    );
    errs.extend(volume_errs);

    let mut claim_names: Vec<String> = Vec::new();
    for (i, claim) in spec.resource_claims.iter().flatten().enumerate() {
        let p = path.child("resourceClaims").index(i);
        if claim.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else if claim_names.contains(&claim.name) {
            errs.push(FieldError::duplicate(&p.child("name"), claim.name.as_str()));
        } else {
            errs.extend(validate_dns1123_label(&claim.name, &p.child("name")));
            claim_names.push(claim.name.clone());
        }
        match (&claim.resource_claim_name, &claim.resource_claim_template_name) {
            (Some(_), Some(_)) => errs.push(FieldError::invalid(&p, BadValue::Omitted, "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified")),
            (None, None) => errs.push(FieldError::invalid(&p, BadValue::Omitted, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")),
            _ => {}
        }
        for (name, field) in [
            (&claim.resource_claim_name, "resourceClaimName"),
            (
                &claim.resource_claim_template_name,
                "resourceClaimTemplateName",
            ),
        ] {
            if let Some(name) = name {
                errs.extend(validate_name_list_entry(name, false, &p.child(field)));
            }
        }
    }

    let restart_policy = opt_str(&spec.restart_policy);
    let ctx = ContainerContext {
        volumes: &volumes,
        claim_names: &claim_names,
        restart_policy,
        host_users,
        opts,
    };

    // Regular containers.
    let containers_path = path.child("containers");
    if spec.containers.is_empty() {
        errs.push(FieldError::required(&containers_path, ""));
    } else {
        let mut names = BTreeSet::new();
        for (i, c) in spec.containers.iter().enumerate() {
            let p = containers_path.index(i);
            errs.extend(validate_container_common(c, &ctx, &p));
            if !names.insert(c.name.as_str()) {
                errs.push(FieldError::duplicate(&p.child("name"), c.name.as_str()));
            }
            errs.extend(validate_probes_and_lifecycle(c, grace, &p));
            if c.restart_policy.is_some() {
                errs.push(FieldError::forbidden(
                    &p.child("restartPolicy"),
                    "may not be set for non-init containers",
                ));
            }
        }
        let all: Vec<&Container> = spec.containers.iter().collect();
        errs.extend(check_host_port_conflicts(&all, &containers_path, 0));
    }

    // Init containers: names unique with regular ones; probes only for sidecars.
    let init_path = path.child("initContainers");
    let mut all_names: BTreeSet<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let p = init_path.index(i);
        errs.extend(validate_container_common(c, &ctx, &p));
        let mut restart_always = false;
        if let Some(policy) = &c.restart_policy {
            if policy == "Always" {
                restart_always = true;
            } else {
                errs.push(FieldError::not_supported(
                    &p.child("restartPolicy"),
                    policy.as_str(),
                    &["Always"],
                ));
            }
        }
        if all_names.contains(c.name.as_str()) {
            errs.push(FieldError::duplicate(&p.child("name"), c.name.as_str()));
        } else if !c.name.is_empty() {
            all_names.insert(c.name.as_str());
        }
        errs.extend(check_host_port_conflicts(&[c], &init_path, i));
        if restart_always {
            errs.extend(validate_probes_and_lifecycle(c, grace, &p));
        } else {
            for (set, field) in [
                (c.lifecycle.is_some(), "lifecycle"),
                (c.liveness_probe.is_some(), "livenessProbe"),
                (c.readiness_probe.is_some(), "readinessProbe"),
                (c.startup_probe.is_some(), "startupProbe"),
            ] {
                if set {
                    errs.push(FieldError::forbidden(
                        &p.child(field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }

    // Ephemeral containers (only through their subresource; checked here for completeness).
    let eph_path = path.child("ephemeralContainers");
    let other_names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let mut eph_names = other_names.clone();
    for (i, ec) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = eph_path.index(i);
        let c = Container {
            name: ec.name.clone(),
            image: ec.image.clone(),
            image_pull_policy: ec.image_pull_policy.clone(),
            termination_message_policy: ec.termination_message_policy.clone(),
            env: ec.env.clone(),
            env_from: ec.env_from.clone(),
            volume_mounts: ec.volume_mounts.clone(),
            volume_devices: ec.volume_devices.clone(),
            security_context: ec.security_context.clone(),
            ports: ec.ports.clone(),
            resources: ec.resources.clone(),
            resize_policy: ec.resize_policy.clone(),
            ..Default::default()
        };
        errs.extend(validate_container_common(&c, &ctx, &p));
        errs.extend(validate_image_whitespace(&c, &p));
        if !eph_names.insert(ec.name.as_str()) {
            errs.push(FieldError::duplicate(&p.child("name"), ec.name.as_str()));
        }
        if let Some(target) = ec
            .target_container_name
            .as_deref()
            .filter(|t| !t.is_empty())
            && !other_names.contains(target)
        {
            errs.push(FieldError::not_found(
                &p.child("targetContainerName"),
                target,
            ));
        }
        for (set, field) in [
            (ec.ports.as_ref().is_some_and(|v| !v.is_empty()), "ports"),
            (
                ec.resources
                    .as_ref()
                    .is_some_and(|r| r != &Default::default()),
                "resources",
            ),
            (ec.liveness_probe.is_some(), "livenessProbe"),
            (ec.readiness_probe.is_some(), "readinessProbe"),
            (ec.startup_probe.is_some(), "startupProbe"),
            (ec.lifecycle.is_some(), "lifecycle"),
            (
                ec.resize_policy.as_ref().is_some_and(|v| !v.is_empty()),
                "resizePolicy",
            ),
            (ec.restart_policy.is_some(), "restartPolicy"),
        ] {
            if set {
                errs.push(FieldError::forbidden(
                    &p.child(field),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, vm) in ec.volume_mounts.iter().flatten().enumerate() {
            if !opt_str(&vm.sub_path).is_empty() {
                errs.push(FieldError::forbidden(
                    &p.child("volumeMounts").index(j).child("subPath"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
            if !opt_str(&vm.sub_path_expr).is_empty() {
                errs.push(FieldError::forbidden(
                    &p.child("volumeMounts").index(j).child("subPathExpr"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
    }

    // Host networking: host ports must equal container ports.
    if spec.host_network == Some(true) {
        for (i, c) in spec.containers.iter().enumerate() {
            for (j, port) in c.ports.iter().flatten().enumerate() {
                let host_port = port.host_port.unwrap_or(0);
                if (opts.resource_is_pod || host_port != 0) && host_port != port.container_port {
                    errs.push(FieldError::invalid(
                        &containers_path
                            .index(i)
                            .child("ports")
                            .index(j)
                            .child("hostPort"),
                        host_port,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    match restart_policy {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("restartPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            other,
            RESTART_POLICIES,
        )),
    }
    match opt_str(&spec.dns_policy) {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(FieldError::required(&path.child("dnsPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("dnsPolicy"),
            other,
            DNS_POLICIES,
        )),
    }
    errs.extend(validate_labels(
        spec.node_selector.as_ref(),
        &path.child("nodeSelector"),
    ));
    errs.extend(validate_pod_security_context(spec, path));
    errs.extend(validate_affinity(
        spec.affinity.as_ref(),
        &path.child("affinity"),
    ));
    errs.extend(validate_dns_config(spec, &path.child("dnsConfig")));
    for (i, gate) in spec.readiness_gates.iter().flatten().enumerate() {
        errs.extend(validate_qualified_name(
            &gate.condition_type,
            &path.child("readinessGates").index(i).child("conditionType"),
        ));
    }
    let mut gates = BTreeSet::new();
    for (i, gate) in spec.scheduling_gates.iter().flatten().enumerate() {
        let p = path.child("schedulingGates").index(i);
        errs.extend(validate_qualified_name(&gate.name, &p));
        if !gates.insert(gate.name.as_str()) {
            errs.push(FieldError::duplicate(&p, gate.name.as_str()));
        }
    }
    errs.extend(validate_topology_spread(
        spec.topology_spread_constraints.as_deref().unwrap_or(&[]),
        &path.child("topologySpreadConstraints"),
    ));
    if !host_users {
        for (set, field) in [
            (spec.host_network == Some(true), "hostNetwork"),
            (spec.host_pid == Some(true), "HostPID"),
            (spec.host_ipc == Some(true), "HostIPC"),
        ] {
            if set {
                errs.push(FieldError::forbidden(
                    &path.child(field),
                    "when `pod.Spec.HostUsers` is false",
                ));
            }
        }
    }
    let service_account = service_account_name(spec);
    if !service_account.is_empty() {
        errs.extend(validate_name_list_entry(
            service_account,
            false,
            &path.child("serviceAccountName"),
        ));
    }
    let node_name = opt_str(&spec.node_name);
    if !node_name.is_empty() {
        errs.extend(validate_name_list_entry(
            node_name,
            false,
            &path.child("nodeName"),
        ));
    }
    if let Some(ads) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(FieldError::invalid(
            &path.child("activeDeadlineSeconds"),
            ads,
            &inclusive_range_error(1, i64::from(i32::MAX)),
        ));
    }
    for (value, field) in [
        (opt_str(&spec.hostname), "hostname"),
        (opt_str(&spec.subdomain), "subdomain"),
    ] {
        if !value.is_empty() {
            errs.extend(validate_dns1123_label(value, &path.child(field)));
        }
    }
    if let Some(t) = spec.tolerations.as_deref().filter(|t| !t.is_empty()) {
        errs.extend(validate_tolerations(t, &path.child("tolerations")));
    }
    for (i, alias) in spec.host_aliases.iter().flatten().enumerate() {
        let p = path.child("hostAliases").index(i);
        errs.extend(validate_ip_legacy(&p.child("ip"), &alias.ip));
        for (j, host) in alias.hostnames.iter().flatten().enumerate() {
            errs.extend(validate_dns1123_subdomain(
                host,
                &p.child("hostnames").index(j),
            ));
        }
    }
    let priority_class = opt_str(&spec.priority_class_name);
    if !priority_class.is_empty() {
        errs.extend(validate_name_list_entry(
            priority_class,
            false,
            &path.child("priorityClassName"),
        ));
    }
    if let Some(runtime_class) = &spec.runtime_class_name {
        errs.extend(validate_name_list_entry(
            runtime_class,
            false,
            &path.child("runtimeClassName"),
        ));
    }
    if let Some(policy) = &spec.preemption_policy {
        match policy.as_str() {
            "PreemptLowerPriority" | "Never" => {}
            "" => errs.push(FieldError::required(&path.child("preemptionPolicy"), "")),
            other => errs.push(FieldError::not_supported(
                &path.child("preemptionPolicy"),
                other,
                &["PreemptLowerPriority", "Never"],
            )),
        }
    }
    if let Some(overhead) = &spec.overhead {
        let requirements = k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(overhead.clone()),
            ..Default::default()
        };
        errs.extend(validate_resource_requirements(
            Some(&requirements),
            &[],
            &path.child("overhead"),
        ));
    }
    if let Some(os) = &spec.os {
        if os.name != "linux" && os.name != "windows" {
            errs.push(FieldError::not_supported(
                &path.child("os").child("name"),
                os.name.as_str(),
                &["linux", "windows"],
            ));
        } else if os.name == "linux" {
            if spec
                .security_context
                .as_ref()
                .is_some_and(|s| s.windows_options.is_some())
            {
                errs.push(FieldError::forbidden(
                    &path.child("securityContext").child("windowsOptions"),
                    "windows options cannot be set for a linux pod",
                ));
            }
            for (c, p) in visit_containers(spec, path) {
                if c.security_context
                    .as_ref()
                    .is_some_and(|s| s.windows_options.is_some())
                {
                    errs.push(FieldError::forbidden(
                        &p.child("securityContext").child("windowsOptions"),
                        "windows options cannot be set for a linux pod",
                    ));
                }
            }
        }
    }
    errs
}

/// Containers in upstream's visiting order: init, regular, ephemeral (as plain containers).
fn visit_containers(spec: &PodSpec, path: &Path) -> Vec<(Container, Path)> {
    let mut out: Vec<(Container, Path)> = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        out.push((c.clone(), path.child("initContainers").index(i)));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        out.push((c.clone(), path.child("containers").index(i)));
    }
    for (i, ec) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let c = Container {
            name: ec.name.clone(),
            security_context: ec.security_context.clone(),
            ..Default::default()
        };
        out.push((c, path.child("ephemeralContainers").index(i)));
    }
    out
}

/// The effective service account name: `serviceAccountName`, or the deprecated
/// `serviceAccount` when the former is empty (as upstream's conversion does).
pub fn service_account_name(spec: &PodSpec) -> &str {
    match opt_str(&spec.service_account_name) {
        "" => opt_str(&spec.service_account),
        name => name,
    }
}

fn validate_image_whitespace(c: &Container, path: &Path) -> Vec<FieldError> {
    let image = opt_str(&c.image);
    if image.len() != image.trim().len() {
        vec![FieldError::invalid(
            &path.child("image"),
            image,
            "must not have leading or trailing whitespace",
        )]
    } else {
        Vec::new()
    }
}

const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

pub(crate) fn validate_pod_specific_annotations(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &PodSpec,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(annotations) = annotations else {
        return errs;
    };
    if let Some(value) = annotations.get(MIRROR_POD_ANNOTATION)
        && opt_str(&spec.node_name).is_empty()
    {
        errs.push(FieldError::invalid(
            &path.key(MIRROR_POD_ANNOTATION),
            value.as_str(),
            "must set spec.nodeName if mirror pod annotation is set",
        ));
    }
    if let Some(cost) = annotations.get(DELETION_COST_ANNOTATION)
        && cost.parse::<i32>().is_err()
    {
        errs.push(FieldError::invalid(
            &path.key(DELETION_COST_ANNOTATION),
            cost.as_str(),
            "must be a 32bit integer",
        ));
    }
    errs
}

/// A pod template spec at `path` (e.g. `spec.template`): its labels and annotations, and its pod
/// spec at `path.spec`. Ephemeral containers are not allowed.
pub fn validate_pod_template_spec(
    template: &PodTemplateSpec,
    path: &Path,
    opts: &PodValidationOptions,
) -> Vec<FieldError> {
    let meta = template.metadata.clone().unwrap_or_default();
    let spec = template.spec.clone().unwrap_or_default();
    let mut errs = validate_labels(meta.labels.as_ref(), &path.child("labels"));
    errs.extend(validate_annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(validate_pod_specific_annotations(
        meta.annotations.as_ref(),
        &spec,
        &path.child("annotations"),
    ));
    errs.extend(validate_pod_spec(&spec, None, &path.child("spec"), opts));
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            &path.child("spec").child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

fn validate_pod_metadata_and_spec(pod: &Pod, opts: &PodValidationOptions) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let spec_path = Path::new("spec");
    let spec = pod.spec.clone().unwrap_or_default();
    let mut errs =
        validate_object_meta(&pod.metadata, true, NameValidator::DnsSubdomain, &meta_path);
    errs.extend(validate_pod_specific_annotations(
        pod.metadata.annotations.as_ref(),
        &spec,
        &meta_path.child("annotations"),
    ));
    errs.extend(validate_pod_spec(
        &spec,
        Some(&pod.metadata),
        &spec_path,
        opts,
    ));
    if service_account_name(&spec).is_empty() {
        for (vi, volume) in spec.volumes.iter().flatten().enumerate() {
            for (si, source) in volume
                .projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
                .enumerate()
            {
                if source.service_account_token.is_some() {
                    errs.push(FieldError::forbidden(
                        &spec_path
                            .child("volumes")
                            .index(vi)
                            .child("projected")
                            .child("sources")
                            .index(si)
                            .child("serviceAccountToken"),
                        "must not be specified when serviceAccountName is not set",
                    ));
                }
            }
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        errs.extend(validate_image_whitespace(
            c,
            &spec_path.child("containers").index(i),
        ));
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        errs.extend(validate_image_whitespace(
            c,
            &spec_path.child("initContainers").index(i),
        ));
    }
    errs
}

/// A new Pod (after defaulting).
pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    validate_pod_with(
        pod,
        &PodValidationOptions {
            resource_is_pod: true,
            ..Default::default()
        },
    )
}

/// A new Pod with explicit options.
pub fn validate_pod_with(pod: &Pod, opts: &PodValidationOptions) -> Vec<FieldError> {
    let mut errs = validate_pod_metadata_and_spec(pod, opts);
    let spec_path = Path::new("spec");
    let spec = pod.spec.clone().unwrap_or_default();
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            &spec_path.child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
    if !opt_str(&spec.node_name).is_empty()
        && spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty())
    {
        errs.push(FieldError::forbidden(
            &spec_path.child("nodeName"),
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    errs
}

/// Per-container AppArmor annotations (deprecated beta form) start with this.
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Annotations no pod update may add, change or remove: the mirror-pod one and the AppArmor
/// per-container ones (the change half of upstream's `ValidatePodSpecificAnnotationUpdates`).
fn validate_pod_annotation_changes(new: &Pod, old: &Pod, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = BTreeMap::new();
    let old_ann = old.metadata.annotations.as_ref().unwrap_or(&empty);
    let new_ann = new.metadata.annotations.as_ref().unwrap_or(&empty);
    for (key, value) in old_ann {
        if new_ann.get(key) == Some(value) {
            continue;
        }
        if key.starts_with(APPARMOR_ANNOTATION_PREFIX) {
            errs.push(FieldError::forbidden(
                &path.key(key),
                "may not remove or update AppArmor annotations",
            ));
        }
        if key == MIRROR_POD_ANNOTATION {
            errs.push(FieldError::forbidden(
                &path.key(key),
                "may not remove or update mirror pod annotation",
            ));
        }
    }
    for key in new_ann.keys().filter(|k| !old_ann.contains_key(*k)) {
        if key.starts_with(APPARMOR_ANNOTATION_PREFIX) {
            errs.push(FieldError::forbidden(
                &path.key(key),
                "may not add AppArmor annotations",
            ));
        }
        if key == MIRROR_POD_ANNOTATION {
            errs.push(FieldError::forbidden(
                &path.key(key),
                "may not add mirror pod annotation",
            ));
        }
    }
    errs
}

/// JSON paths under `spec` where two specs differ, ignoring empty lists, maps and nulls (upstream
/// compares semantically, where empty and unset collections are equal).
fn spec_differences(old: &PodSpec, new: &PodSpec) -> Vec<String> {
    fn walk(
        prefix: &str,
        a: Option<&serde_json::Value>,
        b: Option<&serde_json::Value>,
        out: &mut Vec<String>,
    ) {
        match (a, b) {
            (Some(serde_json::Value::Object(x)), Some(serde_json::Value::Object(y))) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    walk(&format!("{prefix}.{k}"), x.get(k), y.get(k), out);
                }
            }
            (Some(serde_json::Value::Array(x)), Some(serde_json::Value::Array(y)))
                if x.len() == y.len() =>
            {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{prefix}[{i}]"), Some(p), Some(q), out);
                }
            }
            (x, y) if x != y => out.push(prefix.to_owned()),
            _ => {}
        }
    }
    let prune = |v| super::apps::prune_unset(v, false);
    let a = serde_json::to_value(old).ok().and_then(prune);
    let b = serde_json::to_value(new).ok().and_then(prune);
    let mut out = Vec::new();
    walk("spec", a.as_ref(), b.as_ref(), &mut out);
    out
}

fn tolerations_equal_but_seconds(old: &Toleration, new: &Toleration) -> bool {
    let mut old = old.clone();
    old.toleration_seconds = new.toleration_seconds;
    &old == new
}

/// An update of a Pod: metadata rules, the new pod's validity, and only the updatable spec
/// fields changed (images, a lower activeDeadlineSeconds, added tolerations, removed scheduling
/// gates, terminationGracePeriodSeconds from negative to 1, and node selector/affinity additions
/// while gated).
pub fn validate_pod_update(new: &Pod, old: &Pod) -> Vec<FieldError> {
    let opts = PodValidationOptions {
        resource_is_pod: true,
        ..Default::default()
    };
    let meta_path = Path::new("metadata");
    let spec_path = Path::new("spec");
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path);
    errs.extend(validate_pod_metadata_and_spec(new, &opts));
    errs.extend(validate_pod_annotation_changes(
        new,
        old,
        &meta_path.child("annotations"),
    ));
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();

    let empty: Vec<Container> = Vec::new();
    for (new_list, old_list, field) in [
        (&new_spec.containers, &old_spec.containers, "containers"),
        (
            new_spec.init_containers.as_ref().unwrap_or(&empty),
            old_spec.init_containers.as_ref().unwrap_or(&empty),
            "initContainers",
        ),
    ] {
        let p = spec_path.child(field);
        if new_list.len() != old_list.len() {
            errs.push(FieldError::forbidden(
                &p,
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
        for (i, c) in new_list.iter().enumerate() {
            if opt_str(&c.image).is_empty() {
                errs.push(FieldError::required(&p.index(i).child("image"), ""));
            }
            errs.extend(validate_image_whitespace(c, &p.index(i)));
        }
    }

    let ads_path = spec_path.child("activeDeadlineSeconds");
    match (
        new_spec.active_deadline_seconds,
        old_spec.active_deadline_seconds,
    ) {
        (Some(n), old_value) => {
            if !(0..=i64::from(i32::MAX)).contains(&n) {
                errs.push(FieldError::invalid(
                    &ads_path,
                    n,
                    &inclusive_range_error(0, i64::from(i32::MAX)),
                ));
                return errs;
            }
            if old_value.is_some_and(|o| o < n) {
                errs.push(FieldError::invalid(
                    &ads_path,
                    n,
                    "must be less than or equal to previous value",
                ));
                return errs;
            }
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            &ads_path,
            BadValue::Null,
            "must not update from a positive integer to nil value",
        )),
        (None, None) => {}
    }

    let tol_path = spec_path.child("tolerations");
    let new_tols = new_spec.tolerations.clone().unwrap_or_default();
    let old_tols = old_spec.tolerations.clone().unwrap_or_default();
    let all_kept = old_tols
        .iter()
        .all(|o| new_tols.iter().any(|n| tolerations_equal_but_seconds(o, n)));
    if !all_kept {
        errs.push(FieldError::forbidden(
            &tol_path,
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    } else {
        errs.extend(validate_tolerations(&new_tols, &tol_path));
    }

    let new_gates = new_spec.scheduling_gates.clone().unwrap_or_default();
    let old_gates = old_spec.scheduling_gates.clone().unwrap_or_default();
    for (i, gate) in new_gates.iter().enumerate() {
        if !old_gates.iter().any(|g| g.name == gate.name) {
            errs.push(FieldError::forbidden(
                &spec_path.child("schedulingGates").index(i).child("name"),
                &format!(
                    "only deletion is allowed, but found new scheduling gate '{}'",
                    gate.name
                ),
            ));
        }
    }

    if new_spec == old_spec {
        return errs;
    }
    let mut munged = new_spec.clone();
    for (c, o) in munged.containers.iter_mut().zip(&old_spec.containers) {
        c.image = o.image.clone();
    }
    if let (Some(cs), Some(os)) = (
        munged.init_containers.as_mut(),
        old_spec.init_containers.as_ref(),
    ) {
        for (c, o) in cs.iter_mut().zip(os) {
            c.image = o.image.clone();
        }
    }
    munged.active_deadline_seconds = old_spec.active_deadline_seconds;
    munged.scheduling_gates = old_spec.scheduling_gates.clone();
    munged.tolerations = old_spec.tolerations.clone();
    if old_spec
        .termination_grace_period_seconds
        .is_some_and(|t| t < 0)
        && munged.termination_grace_period_seconds == Some(1)
    {
        munged.termination_grace_period_seconds = old_spec.termination_grace_period_seconds;
    }
    if !old_gates.is_empty() {
        // Gated pods may gain node selector entries (no changes or removals).
        if munged.node_selector != old_spec.node_selector {
            let old_sel = old_spec.node_selector.clone().unwrap_or_default();
            let new_sel = munged.node_selector.clone().unwrap_or_default();
            for (k, v) in &old_sel {
                if new_sel.get(k) != Some(v) {
                    errs.push(FieldError::invalid(
                        &spec_path.child("nodeSelector"),
                        BadValue::Other(crate::validation::meta::go_string_map(&new_sel)),
                        "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                    ));
                    break;
                }
            }
            munged.node_selector = old_spec.node_selector.clone();
        }
    }
    let differences = spec_differences(&old_spec, &munged);
    if !differences.is_empty() {
        errs.push(FieldError::forbidden(
            &spec_path,
            &format!(
                "pod updates may not change fields other than {}\n{}",
                UPDATABLE_POD_SPEC_FIELDS.join(","),
                differences
                    .iter()
                    .map(|d| format!("  changed: {d}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        ));
    }
    errs
}

/// Pod conditions the system owns; any other condition type must be a qualified name.
const SYSTEM_POD_CONDITIONS: &[&str] = &["PodScheduled", "Ready", "Initialized"];

/// A container that leaves the terminated state must be allowed to restart: under restart
/// policy `Always` any may, under `OnFailure` those that failed, and restartable init containers
/// (`restartable`) always. Errors are named by the index of the old status.
fn validate_container_state_transitions(
    new: &[ContainerStatus],
    old: &[ContainerStatus],
    path: &Path,
    restart_policy: &str,
    restartable: impl Fn(&str) -> bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if restart_policy == "Always" {
        return errs;
    }
    let terminated = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .and_then(|state| state.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    for (i, old_status) in old.iter().enumerate() {
        let Some(exit_code) = terminated(old_status) else {
            continue;
        };
        if exit_code != 0 && restart_policy == "OnFailure" {
            continue;
        }
        if restartable(&old_status.name) {
            continue;
        }
        for new_status in new {
            if new_status.name == old_status.name && terminated(new_status).is_none() {
                errs.push(FieldError::forbidden(
                    &path.index(i).child("state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
    errs
}

/// Users reported in container statuses: Linux IDs in range, and none on a Windows pod.
fn validate_container_status_users(
    statuses: &[ContainerStatus],
    path: &Path,
    os: Option<&str>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, status) in statuses.iter().enumerate() {
        let Some(user) = &status.user else {
            continue;
        };
        let p = path.index(i).child("linux");
        match os.unwrap_or("linux") {
            "windows" if user.linux.is_some() => {
                errs.push(FieldError::forbidden(&p, "cannot be set for a windows pod"));
            }
            "linux" => {
                let Some(linux) = &user.linux else {
                    continue;
                };
                for msg in is_valid_user_id(linux.uid) {
                    errs.push(FieldError::invalid(&p.child("uid"), linux.uid, &msg));
                }
                for msg in is_valid_group_id(linux.gid) {
                    errs.push(FieldError::invalid(&p.child("gid"), linux.gid, &msg));
                }
                for (g, gid) in linux.supplemental_groups.iter().flatten().enumerate() {
                    for msg in is_valid_group_id(*gid) {
                        errs.push(FieldError::invalid(
                            &p.child("supplementalGroups").index(g),
                            *gid,
                            &msg,
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    errs
}

/// Go's `%#v` of a `[]core.<kind>{...}` of single-IP structs (`PodIP`, `HostIP`).
fn go_ip_list(kind: &str, ips: &[&str]) -> String {
    let items: Vec<String> = ips.iter().map(|ip| go_ip(kind, ip)).collect();
    format!("[]core.{kind}{{{}}}", items.join(", "))
}

fn go_ip(kind: &str, ip: &str) -> String {
    format!("core.{kind}{{IP:{}}}", crate::field::go_quote(ip))
}

/// Upstream's dual-stack check of a list of IPs: `Err` when one does not parse (the message
/// upstream's helper gives), else whether both families are present.
fn dual_stack(ips: &[&str]) -> Result<bool, String> {
    let mut families = Vec::with_capacity(ips.len());
    for ip in ips {
        match parse_ip_sloppy(ip) {
            Some(parsed) => families.push(parsed.is_ipv6()),
            None => return Err("ip <nil> is invalid".to_owned()),
        }
    }
    Ok(families.contains(&true) && families.contains(&false))
}

/// The family and duplicate checks of several pod or host IPs at `path`, in upstream's order
/// for each (`duplicates_first` for host IPs).
fn validate_ip_family_list(
    ips: &[&str],
    kind: &str,
    path: &Path,
    duplicates_first: bool,
) -> Vec<FieldError> {
    let mut family_errs = Vec::new();
    let dual = dual_stack(ips).unwrap_or_else(|e| {
        family_errs.push(FieldError::internal(
            path,
            &format!("failed to check for dual stack with error:{e}"),
        ));
        false
    });
    if !dual || ips.len() > 2 {
        family_errs.push(FieldError::invalid(
            path,
            BadValue::Other(go_ip_list(kind, ips)),
            "may specify no more than one IP for each IP family",
        ));
    }
    let mut duplicate_errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, ip) in ips.iter().enumerate() {
        if !seen.insert(*ip) {
            duplicate_errs.push(FieldError::duplicate(
                &path.index(i),
                BadValue::Other(go_ip(kind, ip)),
            ));
        }
    }
    if duplicates_first {
        duplicate_errs.extend(family_errs);
        duplicate_errs
    } else {
        family_errs.extend(duplicate_errs);
        family_errs
    }
}

/// A pod's IPs: each valid, and when several, one per family without repeats.
fn validate_pod_ips(pod: &Pod) -> Vec<FieldError> {
    let path = Path::new("status").child("podIPs");
    let ips: Vec<&str> = pod
        .status
        .iter()
        .flat_map(|s| s.pod_ips.iter().flatten())
        .map(|ip| ip.ip.as_str())
        .collect();
    let mut errs = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        errs.extend(validate_ip_legacy(&path.index(i), ip));
    }
    if ips.len() > 1 {
        errs.extend(validate_ip_family_list(&ips, "PodIP", &path, false));
    }
    errs
}

/// A pod's host IPs: the first equals `hostIP`, each is valid, and when several, no repeats
/// and one per family.
fn validate_host_ips(pod: &Pod) -> Vec<FieldError> {
    let path = Path::new("status").child("hostIPs");
    let status = pod.status.clone().unwrap_or_default();
    let ips: Vec<&str> = status
        .host_ips
        .iter()
        .flatten()
        .map(|ip| ip.ip.as_str())
        .collect();
    let mut errs = Vec::new();
    let Some(first) = ips.first() else {
        return errs;
    };
    if status.host_ip.as_deref().unwrap_or("") != *first {
        errs.push(FieldError::invalid(
            &path.index(0).child("ip"),
            *first,
            "must be equal to `hostIP`",
        ));
    }
    for (i, ip) in ips.iter().enumerate() {
        errs.extend(validate_ip_legacy(&path.index(i), ip));
    }
    if ips.len() > 1 {
        errs.extend(validate_ip_family_list(&ips, "HostIP", &path, true));
    }
    errs
}

/// An update through a Pod's `ephemeralcontainers` subresource (upstream's
/// `ValidatePodEphemeralContainersUpdate`): the metadata, spec and annotation rules of the new
/// pod; no ephemeral containers for static (mirror) pods; and the ephemeral containers
/// already there neither removed nor changed.
pub fn validate_pod_ephemeral_containers_update(new: &Pod, old: &Pod) -> Vec<FieldError> {
    let opts = PodValidationOptions {
        resource_is_pod: true,
        ..Default::default()
    };
    let meta_path = Path::new("metadata");
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path);
    errs.extend(validate_pod_metadata_and_spec(new, &opts));
    errs.extend(validate_pod_annotation_changes(
        new,
        old,
        &meta_path.child("annotations"),
    ));
    let mirror = old
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if mirror {
        return vec![FieldError::forbidden(
            &Path::new(""),
            "static pods do not support ephemeral containers",
        )];
    }
    let path = Path::new("spec").child("ephemeralContainers");
    let containers = |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.clone())
            .unwrap_or_default()
    };
    let new_containers = containers(new);
    for existing in containers(old) {
        match new_containers.iter().find(|c| c.name == existing.name) {
            None => errs.push(FieldError::forbidden(
                &path,
                &format!(
                    "existing ephemeral containers {:?} may not be removed\n",
                    existing.name
                ),
            )),
            Some(now) if *now != existing => errs.push(FieldError::forbidden(
                &path,
                &format!(
                    "existing ephemeral containers {:?} may not be changed\n",
                    existing.name
                ),
            )),
            Some(_) => {}
        }
    }
    errs
}

/// An update of a Pod's status subresource (upstream's `ValidatePodStatusUpdate`): metadata
/// and pod annotation rules; condition types (named, as upstream does, under
/// `metadata.conditions`); nominated node name; the QoS class is fixed; terminated containers
/// that may not restart stay terminated; resource claim statuses name the pod's claims once;
/// pod and host IPs; and the users containers report.
pub fn validate_pod_status_update(new: &Pod, old: &Pod) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path);
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    let annotations_path = meta_path.child("annotations");
    errs.extend(validate_pod_annotation_changes(new, old, &annotations_path));
    errs.extend(validate_pod_specific_annotations(
        new.metadata.annotations.as_ref(),
        &new_spec,
        &annotations_path,
    ));
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    for (i, condition) in status.conditions.iter().flatten().enumerate() {
        if !SYSTEM_POD_CONDITIONS.contains(&condition.type_.as_str()) {
            errs.extend(validate_qualified_name(
                &condition.type_,
                &meta_path.child("conditions").index(i).child("Type"),
            ));
        }
    }

    let path = Path::new("status");
    if new_spec.node_name != old_spec.node_name {
        errs.push(FieldError::forbidden(
            &path.child("nodeName"),
            "may not be changed directly",
        ));
    }
    let nominated = opt_str(&status.nominated_node_name);
    if status.nominated_node_name != old_status.nominated_node_name && !nominated.is_empty() {
        for msg in NameValidator::DnsSubdomain.validate(nominated, false) {
            errs.push(FieldError::invalid(
                &path.child("nominatedNodeName"),
                nominated,
                &msg,
            ));
        }
    }
    let qos = opt_str(&status.qos_class);
    if qos != opt_str(&old_status.qos_class) {
        errs.push(FieldError::invalid(
            &path.child("qosClass"),
            qos,
            crate::validation::meta::FIELD_IMMUTABLE,
        ));
    }

    let statuses = |list: &Option<Vec<ContainerStatus>>| list.clone().unwrap_or_default();
    let restart_policy = opt_str(&old_spec.restart_policy);
    errs.extend(validate_container_state_transitions(
        &statuses(&status.container_statuses),
        &statuses(&old_status.container_statuses),
        &path.child("containerStatuses"),
        restart_policy,
        |_| false,
    ));
    let restartable_init = |name: &str| {
        old_spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .is_some_and(|c| c.restart_policy.as_deref() == Some("Always"))
    };
    errs.extend(validate_container_state_transitions(
        &statuses(&status.init_container_statuses),
        &statuses(&old_status.init_container_statuses),
        &path.child("initContainerStatuses"),
        restart_policy,
        restartable_init,
    ));
    // The kubelet never restarts ephemeral containers.
    errs.extend(validate_container_state_transitions(
        &statuses(&status.ephemeral_container_statuses),
        &statuses(&old_status.ephemeral_container_statuses),
        &path.child("ephemeralContainerStatuses"),
        "Never",
        |_| false,
    ));

    let claims_path = path.child("resourceClaimStatuses");
    let mut claim_names = BTreeSet::new();
    for (i, claim) in status.resource_claim_statuses.iter().flatten().enumerate() {
        let p = claims_path.index(i).child("name");
        let declared = new_spec
            .resource_claims
            .iter()
            .flatten()
            .any(|c| c.name == claim.name);
        if !declared {
            errs.push(FieldError::invalid(
                &p,
                claim.name.as_str(),
                "must match the name of an entry in `spec.resourceClaims`",
            ));
        }
        if !claim_names.insert(claim.name.as_str()) {
            errs.push(FieldError::duplicate(&p, claim.name.as_str()));
        }
        if let Some(claim_name) = &claim.resource_claim_name {
            for msg in NameValidator::DnsSubdomain.validate(claim_name, false) {
                errs.push(FieldError::invalid(&p, claim_name.as_str(), &msg));
            }
        }
    }

    errs.extend(validate_pod_ips(new));
    errs.extend(validate_host_ips(new));

    let os = new_spec.os.as_ref().map(|o| o.name.as_str());
    for (list, field) in [
        (&status.container_statuses, "containerStatuses"),
        (&status.init_container_statuses, "initContainerStatuses"),
        (
            &status.ephemeral_container_statuses,
            "ephemeralContainerStatuses",
        ),
    ] {
        errs.extend(validate_container_status_users(
            list.as_deref().unwrap_or(&[]),
            &path.child(field),
            os,
        ));
    }
    errs
}

/// A PodTemplate object.
pub fn validate_pod_template(template: &PodTemplate) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &template.metadata,
        true,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    errs.extend(validate_pod_template_spec(
        &template.template.clone().unwrap_or_default(),
        &Path::new("template"),
        &PodValidationOptions::default(),
    ));
    errs
}

/// An update of a PodTemplate object.
pub fn validate_pod_template_update(new: &PodTemplate, old: &PodTemplate) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    errs.extend(validate_pod_template_spec(
        &new.template.clone().unwrap_or_default(),
        &Path::new("template"),
        &PodValidationOptions::default(),
    ));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_support::check;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        let mut pod: Pod = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        crate::defaults::default_pod(&mut pod);
        pod
    }

    fn base(containers: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "p", "namespace": "d", "resourceVersion": "1"}, "spec": {"containers": containers}})
    }

    #[test]
    fn valid_pod() {
        check(
            validate_pod(&pod(base(
                json!([{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "name": "http"}]}]),
            ))),
            &[],
        );
    }

    #[test]
    fn containers() {
        check(
            validate_pod(&pod(base(json!([])))),
            &["spec.containers: Required value"],
        );
        let mut value = base(json!([
            {"name": "c", "image": ""},
            {"name": "c", "image": " i ", "ports": [{"containerPort": 70000, "protocol": "HTTP"}], "env": [{"name": "A=B"}]}
        ]));
        value["spec"]["initContainers"] =
            json!([{"name": "c", "image": "i", "livenessProbe": {"exec": {"command": ["x"]}}}]);
        check(
            validate_pod(&pod(value)),
            &[
                "spec.containers[0].image: Required value",
                "spec.containers[1].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[1].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[1].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
                "spec.containers[1].name: Duplicate value: \"c\"",
                "spec.initContainers[0].name: Duplicate value: \"c\"",
                "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
                "spec.containers[1].image: Invalid value: \" i \": must not have leading or trailing whitespace",
            ],
        );
    }

    #[test]
    fn volumes_mounts_resources_policies() {
        let mut value = base(json!([{
            "name": "c", "image": "i",
            "volumeMounts": [{"name": "missing", "mountPath": "/a"}, {"name": "data", "mountPath": "/a"}],
            "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}}
        }]));
        value["spec"]["volumes"] = json!([{"name": "data"}]);
        value["spec"]["restartPolicy"] = json!("Sometimes");
        value["spec"]["dnsPolicy"] = json!("Custom");
        value["spec"]["nodeSelector"] = json!({"disk": "-ssd"});
        check(
            validate_pod(&pod(value)),
            &[
                "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
                "spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
                "spec.dnsPolicy: Unsupported value: \"Custom\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
                "spec.nodeSelector: Invalid value: \"-ssd\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ],
        );
    }

    #[test]
    fn templates_use_their_path_prefix() {
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "Web", "image": "i"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut template = template;
        crate::defaults::default_pod_template_spec(&mut template);
        let errs = validate_pod_template_spec(
            &template,
            &Path::new("spec").child("template"),
            &PodValidationOptions::default(),
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template.spec.containers[0].name");
    }

    #[test]
    fn updates() {
        let old = pod(base(json!([{"name": "c", "image": "nginx:1"}])));
        let mut new_image = old.clone();
        if let Some(spec) = new_image.spec.as_mut() {
            spec.containers[0].image = Some("nginx:2".into());
            spec.active_deadline_seconds = Some(10);
            spec.tolerations = Some(vec![Toleration {
                key: Some("k".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }]);
        }
        check(validate_pod_update(&new_image, &old), &[]);

        let mut changed = old.clone();
        if let Some(spec) = changed.spec.as_mut() {
            spec.restart_policy = Some("Never".into());
        }
        let errs = validate_pod_update(&changed, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec");
        assert!(errs[0].detail.starts_with("pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"));
        assert!(errs[0].detail.contains("spec.restartPolicy"));

        let mut more = old.clone();
        if let Some(spec) = more.spec.as_mut() {
            spec.containers.push(Container {
                name: "d".into(),
                image: Some("i".into()),
                ..Default::default()
            });
        }
        let errs = validate_pod_update(&pod(serde_json::to_value(&more).unwrap_or_default()), &old);
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            ["spec.containers: Forbidden: pod updates may not add or remove containers"]
        );
    }

    fn with_status(mut value: serde_json::Value, status: serde_json::Value) -> Pod {
        value["status"] = status;
        pod(value)
    }

    fn status_errors(new: &Pod, old: &Pod) -> Vec<String> {
        validate_pod_status_update(new, old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn pod_status_ips() {
        let spec = base(json!([{"name": "c", "image": "i"}]));
        let old = with_status(spec.clone(), json!({"qosClass": "BestEffort"}));
        let fine = with_status(
            spec.clone(),
            json!({"qosClass": "BestEffort", "podIP": "10.0.0.1",
                   "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                   "hostIP": "192.168.0.1", "hostIPs": [{"ip": "192.168.0.1"}]}),
        );
        assert_eq!(status_errors(&fine, &old), Vec::<String>::new());
        assert_eq!(
            status_errors(
                &with_status(
                    spec.clone(),
                    json!({"qosClass": "BestEffort", "podIP": "10.0.0.256"})
                ),
                &old
            ),
            [
                "status.podIPs[0]: Invalid value: \"10.0.0.256\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ]
        );
        assert_eq!(
            status_errors(
                &with_status(
                    spec.clone(),
                    json!({"qosClass": "BestEffort", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.1"}]})
                ),
                &old
            ),
            [
                "status.podIPs: Invalid value: []core.PodIP{core.PodIP{IP:\"10.0.0.1\"}, core.PodIP{IP:\"10.0.0.1\"}}: may specify no more than one IP for each IP family",
                "status.podIPs[1]: Duplicate value: core.PodIP{IP:\"10.0.0.1\"}",
            ]
        );
        assert_eq!(
            status_errors(
                &with_status(
                    spec.clone(),
                    json!({"qosClass": "BestEffort", "hostIPs": [{"ip": "fd00::1"}, {"ip": "x"}]})
                ),
                &old
            ),
            [
                "status.hostIPs[0].ip: Invalid value: \"fd00::1\": must be equal to `hostIP`",
                "status.hostIPs[1]: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "status.hostIPs: Internal error: failed to check for dual stack with error:ip <nil> is invalid",
                "status.hostIPs: Invalid value: []core.HostIP{core.HostIP{IP:\"fd00::1\"}, core.HostIP{IP:\"x\"}}: may specify no more than one IP for each IP family",
            ]
        );
    }

    #[test]
    fn pod_status_fields() {
        let mut spec = base(json!([{"name": "c", "image": "i"}]));
        spec["spec"]["restartPolicy"] = json!("OnFailure");
        let terminated = |code: i32| json!({"terminated": {"exitCode": code}});
        let container = |state: serde_json::Value| json!({"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": state});
        let old = with_status(
            spec.clone(),
            json!({"qosClass": "BestEffort", "containerStatuses": [container(terminated(0))]}),
        );
        let new = with_status(
            spec.clone(),
            json!({
                "qosClass": "Guaranteed",
                "nominatedNodeName": "Node_1",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "bad type", "status": "True"}],
                "containerStatuses": [{
                    "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"running": {}}, "user": {"linux": {"uid": -1, "gid": 0}}
                }],
                "resourceClaimStatuses": [{"name": "missing"}]
            }),
        );
        assert_eq!(
            status_errors(&new, &old),
            [
                "metadata.conditions[1].Type: Invalid value: \"bad type\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "status.nominatedNodeName: Invalid value: \"Node_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "status.qosClass: Invalid value: \"Guaranteed\": field is immutable",
                "status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state",
                "status.resourceClaimStatuses[0].name: Invalid value: \"missing\": must match the name of an entry in `spec.resourceClaims`",
                "status.containerStatuses[0].linux.uid: Invalid value: -1: must be between 0 and 4294967295, inclusive",
            ]
        );
        // A container that failed may restart under OnFailure.
        let failed = with_status(
            spec.clone(),
            json!({"qosClass": "BestEffort", "containerStatuses": [container(terminated(1))]}),
        );
        let restarted = with_status(
            spec,
            json!({"qosClass": "BestEffort", "containerStatuses": [container(json!({"running": {}}))]}),
        );
        assert_eq!(status_errors(&restarted, &failed), Vec::<String>::new());
    }

    #[test]
    fn pod_annotation_changes_on_status_writes() {
        let mut value = base(json!([{"name": "c", "image": "i"}]));
        let old = pod(value.clone());
        value["metadata"]["annotations"] = json!({
            "kubernetes.io/config.mirror": "x",
            "container.apparmor.security.beta.kubernetes.io/c": "runtime/default"
        });
        assert_eq!(
            status_errors(&pod(value), &old),
            [
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]: Forbidden: may not add AppArmor annotations",
                "metadata.annotations[kubernetes.io/config.mirror]: Forbidden: may not add mirror pod annotation",
                "metadata.annotations[kubernetes.io/config.mirror]: Invalid value: \"x\": must set spec.nodeName if mirror pod annotation is set",
            ]
        );
    }
}
