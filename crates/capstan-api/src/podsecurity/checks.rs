//! Every check of upstream's Pod Security Standards, each with the policy versions its rules
//! changed at, and the order and overrides they are evaluated in.
//!
//! A check is a list of `(first minor version, rule)`: at a version the newest rule whose first
//! version is not newer applies, none before the first (`latest` takes the newest). The texts are
//! upstream's, word for word, since kubectl prints them.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Level, LevelVersion, Version, Violation};
use crate::field::go_quote;

/// A rule: the pod's metadata and spec → a violation, or `None` when it passes.
type Rule = fn(&Value, &Value) -> Option<Violation>;

/// One check: its id (which orders the results), level, versioned rules, and the baseline
/// checks it replaces at `restricted` from the first version of each rule.
struct Check {
    id: &'static str,
    level: Level,
    versions: &'static [(u32, Rule)],
    overrides: &'static [&'static str],
}

/// Every check, baseline ones first, each group sorted by id (upstream's order of results).
const CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[(0, app_armor_profile)],
        overrides: &[],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[(0, capabilities_baseline)],
        overrides: &[],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[(0, host_namespaces)],
        overrides: &[],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[(0, host_path_volumes)],
        overrides: &[],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[(0, host_ports)],
        overrides: &[],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[(0, privileged)],
        overrides: &[],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[(0, proc_mount)],
        overrides: &[],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[(0, se_linux_options_1_0), (31, se_linux_options_1_31)],
        overrides: &[],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[(0, seccomp_baseline_1_0), (19, seccomp_baseline_1_19)],
        overrides: &[],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            (0, sysctls_1_0),
            (27, sysctls_1_27),
            (29, sysctls_1_29),
            (32, sysctls_1_32),
        ],
        overrides: &[],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[(0, windows_host_process)],
        overrides: &[],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            (8, allow_privilege_escalation_1_8),
            (25, allow_privilege_escalation_1_25),
        ],
        overrides: &[],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            (22, capabilities_restricted_1_22),
            (25, capabilities_restricted_1_25),
        ],
        overrides: &["capabilities_baseline"],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[(0, restricted_volumes)],
        overrides: &["hostPathVolumes"],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[(0, run_as_non_root)],
        overrides: &[],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[(23, run_as_user)],
        overrides: &[],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[(19, seccomp_restricted_1_19), (25, seccomp_restricted_1_25)],
        overrides: &["seccompProfile_baseline"],
    },
];

/// The rule of `check` at `version`, if any applies yet.
fn rule_at(check: &Check, version: Version) -> Option<Rule> {
    check
        .versions
        .iter()
        .rev()
        .find(|(minor, _)| version.includes(*minor))
        .map(|(_, rule)| *rule)
}

/// The checks `(metadata, spec)` violates at `lv`, in upstream's order.
pub(super) fn evaluate(metadata: &Value, spec: &Value, lv: LevelVersion) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let restricted = lv.level == Level::Restricted;
    let overridden: Vec<&str> = if restricted {
        CHECKS
            .iter()
            .filter(|c| c.level == Level::Restricted && rule_at(c, lv.version).is_some())
            .flat_map(|c| c.overrides.iter().copied())
            .collect()
    } else {
        Vec::new()
    };
    CHECKS
        .iter()
        .filter(|c| match c.level {
            Level::Baseline => !overridden.contains(&c.id),
            _ => restricted,
        })
        .filter_map(|c| rule_at(c, lv.version))
        .filter_map(|rule| rule(metadata, spec))
        .collect()
}

// ---- helpers ----

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// Upstream's `joinQuote`: `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| go_quote(s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase<S: AsRef<str>>(names: &[S]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// The init containers, containers and ephemeral containers, in that order (upstream's visit).
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |key| {
            spec.get(key)
                .and_then(Value::as_array)
                .map(|items| items.as_slice())
                .unwrap_or_default()
                .iter()
        })
}

fn name(container: &Value) -> String {
    container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A present, non-null field.
fn field<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |value, key| value.get(*key))
        .filter(|value| !value.is_null())
}

fn str_at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a str> {
    field(object, path).and_then(Value::as_str)
}

fn bool_at(object: &Value, path: &[&str]) -> Option<bool> {
    field(object, path).and_then(Value::as_bool)
}

fn pod_security_context(spec: &Value) -> Option<&Value> {
    field(spec, &["securityContext"])
}

fn is_windows(spec: &Value) -> bool {
    str_at(spec, &["os", "name"]) == Some("windows")
}

/// The pod (`pod`) and the containers (`containers "a"`) that did something, joined by ` and `.
fn setters(pod: bool, containers: &[String]) -> String {
    let mut parts = Vec::new();
    if pod {
        parts.push("pod".to_owned());
    }
    if !containers.is_empty() {
        parts.push(containers_phrase(containers));
    }
    parts.join(" and ")
}

fn annotations(metadata: &Value) -> impl Iterator<Item = (&String, &str)> {
    metadata
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

fn annotation<'a>(metadata: &'a Value, key: &str) -> Option<&'a str> {
    metadata
        .get("annotations")
        .and_then(|a| a.get(key))
        .map(|v| v.as_str().unwrap_or_default())
}

// ---- baseline ----

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(metadata: &Value, spec: &Value) -> Option<Violation> {
    let allowed_type = |profile: &Value| {
        matches!(
            str_at(profile, &["type"]),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let mut bad_values = BTreeSet::new();
    let mut bad_pod = false;
    if let Some(profile) = pod_security_context(spec).and_then(|sc| field(sc, &["appArmorProfile"]))
        && !allowed_type(profile)
    {
        bad_pod = true;
        bad_values.insert(str_at(profile, &["type"]).unwrap_or_default().to_owned());
    }
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(profile) = field(c, &["securityContext", "appArmorProfile"])
            && !allowed_type(profile)
        {
            bad_containers.push(name(c));
            bad_values.insert(str_at(profile, &["type"]).unwrap_or_default().to_owned());
        }
    }
    let mut setter_list = Vec::new();
    if bad_pod {
        setter_list.push("pod".to_owned());
    }
    if !bad_containers.is_empty() {
        setter_list.push(containers_phrase(&bad_containers));
    }
    let mut forbidden: Vec<String> = annotations(metadata)
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    let mut values: Vec<String> = bad_values.into_iter().collect();
    if !forbidden.is_empty() {
        forbidden.sort();
        setter_list.push(pluralize("annotation", "annotations", forbidden.len()).to_owned());
        values.extend(forbidden);
    }
    if setter_list.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setter_list.join(" and "),
            join_quote(&values)
        ),
    )
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(container: &Value) -> impl Iterator<Item = &str> {
    field(container, &["securityContext", "capabilities", "add"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap_or_default())
}

fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut bad_caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in added_capabilities(c) {
            if !BASELINE_CAPABILITIES.contains(&cap) {
                valid = false;
                bad_caps.insert(cap.to_owned());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let caps: Vec<String> = bad_caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(_: &Value, spec: &Value) -> Option<Violation> {
    // Sorted, as upstream lists them.
    let used: Vec<&str> = ["hostIPC", "hostNetwork", "hostPID"]
        .into_iter()
        .filter(|key| bool_at(spec, &[key]) == Some(true))
        .collect();
    if used.is_empty() {
        return None;
    }
    violation("host namespaces", used.join(", "))
}

fn volumes(spec: &Value) -> &[Value] {
    spec.get("volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn host_path_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let names: Vec<String> = volumes(spec)
        .iter()
        .filter(|v| field(v, &["hostPath"]).is_some())
        .map(name)
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

fn host_ports(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for port in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port != 0 {
                valid = false;
                // A set of strings, so sorted as text.
                ports.insert(host_port.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "privileged"]) == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(mount) = field(c, &["securityContext", "procMount"]) {
            let mount = mount.as_str().unwrap_or_default();
            if mount != "Default" {
                bad.push(name(c));
                types.insert(mount.to_owned());
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

fn se_linux_options(spec: &Value, allowed: &[&str]) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut check = |options: &Value| {
        let mut valid = true;
        let kind = str_at(options, &["type"]).unwrap_or_default();
        if !allowed.contains(&kind) {
            valid = false;
            bad_types.insert(kind.to_owned());
        }
        if !str_at(options, &["user"]).unwrap_or_default().is_empty() {
            valid = false;
            set_user = true;
        }
        if !str_at(options, &["role"]).unwrap_or_default().is_empty() {
            valid = false;
            set_role = true;
        }
        valid
    };
    let bad_pod = pod_security_context(spec)
        .and_then(|sc| field(sc, &["seLinuxOptions"]))
        .is_some_and(|options| !check(options));
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(options) = field(c, &["securityContext", "seLinuxOptions"])
            && !check(options)
        {
            bad_containers.push(name(c));
        }
    }
    if !bad_pod && bad_containers.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.iter().cloned().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_owned());
    }
    if set_role {
        data.push("role may not be set".to_owned());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters(bad_pod, &bad_containers),
            data.join("; ")
        ),
    )
}

fn se_linux_options_1_0(_: &Value, spec: &Value) -> Option<Violation> {
    se_linux_options(
        spec,
        &["", "container_t", "container_init_t", "container_kvm_t"],
    )
}

fn se_linux_options_1_31(_: &Value, spec: &Value) -> Option<Violation> {
    se_linux_options(
        spec,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn seccomp_baseline_1_0(metadata: &Value, spec: &Value) -> Option<Violation> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let mut forbidden = BTreeSet::new();
    if let Some(value) = annotation(metadata, SECCOMP_POD_ANNOTATION)
        && !valid(value)
    {
        forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={}", go_quote(value)));
    }
    for c in containers(spec) {
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", name(c));
        if let Some(value) = annotation(metadata, &key)
            && !valid(value)
        {
            forbidden.insert(format!("{key}={}", go_quote(value)));
        }
    }
    if forbidden.is_empty() {
        return None;
    }
    let forbidden: Vec<String> = forbidden.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.join(", ")
        ),
    )
}

fn valid_seccomp(profile: &Value) -> bool {
    matches!(
        str_at(profile, &["type"]),
        Some("RuntimeDefault" | "Localhost")
    )
}

/// The seccomp profiles set to a bad type: whether the pod's is, the containers that are, and
/// the bad types; with whether the pod sets a good one.
fn seccomp_settings(spec: &Value) -> (bool, bool, Vec<String>, Vec<String>, BTreeSet<String>) {
    let mut bad_values = BTreeSet::new();
    let (mut bad_pod, mut pod_set) = (false, false);
    if let Some(profile) = pod_security_context(spec).and_then(|sc| field(sc, &["seccompProfile"]))
    {
        if valid_seccomp(profile) {
            pod_set = true;
        } else {
            bad_pod = true;
            bad_values.insert(str_at(profile, &["type"]).unwrap_or_default().to_owned());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match field(c, &["securityContext", "seccompProfile"]) {
            Some(profile) if !valid_seccomp(profile) => {
                explicit.push(name(c));
                bad_values.insert(str_at(profile, &["type"]).unwrap_or_default().to_owned());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    (bad_pod, pod_set, explicit, implicit, bad_values)
}

fn seccomp_explicit(
    bad_pod: bool,
    explicit: &[String],
    values: BTreeSet<String>,
) -> Option<Violation> {
    if !bad_pod && explicit.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters(bad_pod, explicit),
            join_quote(&values)
        ),
    )
}

fn seccomp_baseline_1_19(_: &Value, spec: &Value) -> Option<Violation> {
    let (bad_pod, _, explicit, _, values) = seccomp_settings(spec);
    seccomp_explicit(bad_pod, &explicit, values)
}

const SAFE_SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SAFE_SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SAFE_SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SAFE_SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

fn sysctls(spec: &Value, safe: &[&[&str]]) -> Option<Violation> {
    let forbidden: Vec<&str> = pod_security_context(spec)
        .and_then(|sc| sc.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| str_at(s, &["name"]).unwrap_or_default())
        .filter(|name| !safe.iter().any(|set| set.contains(name)))
        .collect();
    if forbidden.is_empty() {
        return None;
    }
    violation("forbidden sysctls", forbidden.join(", "))
}

fn sysctls_1_0(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SAFE_SYSCTLS_1_0])
}

fn sysctls_1_27(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SAFE_SYSCTLS_1_0, SAFE_SYSCTLS_1_27])
}

fn sysctls_1_29(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(
        spec,
        &[SAFE_SYSCTLS_1_0, SAFE_SYSCTLS_1_27, SAFE_SYSCTLS_1_29],
    )
}

fn sysctls_1_32(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(
        spec,
        &[
            SAFE_SYSCTLS_1_0,
            SAFE_SYSCTLS_1_27,
            SAFE_SYSCTLS_1_29,
            SAFE_SYSCTLS_1_32,
        ],
    )
}

fn windows_host_process(_: &Value, spec: &Value) -> Option<Violation> {
    let host_process = |sc: &Value| bool_at(sc, &["windowsOptions", "hostProcess"]) == Some(true);
    let bad_pod = pod_security_context(spec).is_some_and(host_process);
    let bad: Vec<String> = containers(spec)
        .filter(|c| field(c, &["securityContext"]).is_some_and(host_process))
        .map(name)
        .collect();
    if !bad_pod && bad.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters(bad_pod, &bad)
        ),
    )
}

// ---- restricted ----

fn allow_privilege_escalation_1_8(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "allowPrivilegeEscalation"]) != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

/// From v1.25 a Windows pod (`spec.os.name: windows`) passes: the field does not apply to it.
fn allow_privilege_escalation_1_25(metadata: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    allow_privilege_escalation_1_8(metadata, spec)
}

fn capabilities_restricted_1_22(_: &Value, spec: &Value) -> Option<Violation> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = field(c, &["securityContext", "capabilities"]) else {
            missing_drop.push(name(c));
            continue;
        };
        let dropped_all = caps
            .get("drop")
            .and_then(Value::as_array)
            .is_some_and(|drop| drop.iter().any(|d| d.as_str() == Some("ALL")));
        if !dropped_all {
            missing_drop.push(name(c));
        }
        let mut added_forbidden = false;
        for cap in added_capabilities(c) {
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(cap.to_owned());
            }
        }
        if added_forbidden {
            adding.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let forbidden: Vec<String> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// From v1.25 a Windows pod passes: capabilities do not apply to it.
fn capabilities_restricted_1_25(metadata: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    capabilities_restricted_1_22(metadata, spec)
}

/// The inline volume sources the restricted level allows.
const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The volume sources upstream names when it refuses them (others are `unknown`).
const NAMED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for volume in volumes(spec) {
        if ALLOWED_VOLUME_SOURCES
            .iter()
            .any(|source| field(volume, &[source]).is_some())
        {
            continue;
        }
        bad.push(name(volume));
        let kind = NAMED_VOLUME_SOURCES
            .iter()
            .find(|source| field(volume, &[source]).is_some())
            .copied()
            .unwrap_or("unknown");
        types.insert(kind.to_owned());
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value) -> Option<Violation> {
    let pod = pod_security_context(spec).and_then(|sc| bool_at(sc, &["runAsNonRoot"]));
    let bad_pod = pod == Some(false);
    let pod_non_root = pod == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match bool_at(c, &["securityContext", "runAsNonRoot"]) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    if bad_pod || !explicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters(bad_pod, &explicit)
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

fn run_as_user(_: &Value, spec: &Value) -> Option<Violation> {
    let root = |v: Option<&Value>| v.and_then(Value::as_i64) == Some(0);
    let bad_pod = pod_security_context(spec).is_some_and(|sc| root(field(sc, &["runAsUser"])));
    let bad: Vec<String> = containers(spec)
        .filter(|c| root(field(c, &["securityContext", "runAsUser"])))
        .map(name)
        .collect();
    if !bad_pod && bad.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters(bad_pod, &bad)),
    )
}

fn seccomp_restricted_1_19(_: &Value, spec: &Value) -> Option<Violation> {
    let (bad_pod, _, explicit, implicit, values) = seccomp_settings(spec);
    if let Some(v) = seccomp_explicit(bad_pod, &explicit, values) {
        return Some(v);
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

/// From v1.25 a Windows pod passes: seccomp does not apply to it.
fn seccomp_restricted_1_25(metadata: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    seccomp_restricted_1_19(metadata, spec)
}
