//! The checks at the versions where their behaviour changes, the order and overrides of the
//! evaluation, and the labels' parsing, against upstream's texts.

use serde_json::{Value, json};

use super::*;

fn lv(level: Level, version: Version) -> LevelVersion {
    LevelVersion { level, version }
}

const LATEST: Version = Version::Latest;

fn v(minor: u32) -> Version {
    Version::Minor(minor)
}

/// The violations of `spec` (no metadata) at `level`/`version`, as `reason (detail)`.
fn detail(spec: Value, level: Level, version: Version) -> String {
    forbidden_detail(&evaluate(&json!({}), &spec, lv(level, version)))
}

fn detail_meta(meta: Value, spec: Value, level: Level, version: Version) -> String {
    forbidden_detail(&evaluate(&meta, &spec, lv(level, version)))
}

/// A container that passes every restricted check.
fn good(name: &str) -> Value {
    json!({"name": name, "image": "x", "securityContext": {
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"}}})
}

#[test]
fn a_bare_pod_violates_restricted_as_kubectl_shows() {
    let spec = json!({"containers": [{"name": "c", "image": "x"}]});
    assert_eq!(
        detail(spec.clone(), Level::Restricted, LATEST),
        "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    assert_eq!(detail(spec.clone(), Level::Baseline, LATEST), "");
    assert_eq!(detail(spec, Level::Privileged, LATEST), "");
}

#[test]
fn baseline_checks_come_first_then_restricted_ones() {
    let spec = json!({"containers": [{"name": "c", "image": "x",
        "securityContext": {"privileged": true}}]});
    let text = detail(spec, Level::Restricted, LATEST);
    assert!(
        text.starts_with(
            "privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"
        ),
        "{text}"
    );
}

#[test]
fn a_compliant_pod_passes_every_level_and_version() {
    let spec = json!({"containers": [good("a")], "initContainers": [good("i")]});
    for minor in 0..=33 {
        assert_eq!(
            detail(spec.clone(), Level::Restricted, v(minor)),
            "",
            "v1.{minor}"
        );
    }
    assert_eq!(detail(spec, Level::Restricted, LATEST), "");
}

#[test]
fn allow_privilege_escalation_starts_at_1_8_and_spares_windows_from_1_25() {
    let spec = json!({"containers": [{"name": "a"}, {"name": "b", "securityContext": {"allowPrivilegeEscalation": true}}]});
    let find = |version| {
        evaluate(&json!({}), &spec, lv(Level::Restricted, version))
            .into_iter()
            .find(|v| v.reason == "allowPrivilegeEscalation != false")
    };
    assert!(find(v(7)).is_none());
    assert_eq!(
        find(v(8)).map(|v| v.detail).as_deref(),
        Some("containers \"a\", \"b\" must set securityContext.allowPrivilegeEscalation=false")
    );
    let windows = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
    let reasons = |version| -> Vec<String> {
        evaluate(&json!({}), &windows, lv(Level::Restricted, version))
            .into_iter()
            .map(|v| v.reason)
            .collect()
    };
    assert!(reasons(v(24)).contains(&"allowPrivilegeEscalation != false".to_owned()));
    assert!(reasons(v(24)).contains(&"unrestricted capabilities".to_owned()));
    assert!(reasons(v(24)).contains(&"seccompProfile".to_owned()));
    assert_eq!(reasons(v(25)), vec!["runAsNonRoot != true"]);
}

#[test]
fn capabilities_restricted_from_1_22_replaces_the_baseline_check() {
    let spec = json!({"containers": [{"name": "a", "securityContext": {
        "allowPrivilegeEscalation": false, "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "NET_BIND_SERVICE", "CHOWN"]}}}]});
    assert_eq!(
        detail(spec.clone(), Level::Restricted, v(22)),
        "unrestricted capabilities (container \"a\" must not include \"CHOWN\", \"SYS_ADMIN\" in securityContext.capabilities.add)"
    );
    // Before 1.22 the baseline check judges added capabilities: CHOWN is a default one.
    assert_eq!(
        detail(spec.clone(), Level::Restricted, v(21)),
        "non-default capabilities (container \"a\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"
    );
    assert_eq!(
        detail(spec, Level::Baseline, LATEST),
        "non-default capabilities (container \"a\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"
    );
    let both = json!({"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}}, {"name": "b"}]});
    let text = forbidden_detail(
        &evaluate(&json!({}), &both, lv(Level::Restricted, LATEST))
            .into_iter()
            .filter(|v| v.reason == "unrestricted capabilities")
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        text,
        "unrestricted capabilities (containers \"a\", \"b\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"a\" must not include \"NET_RAW\" in securityContext.capabilities.add)"
    );
}

#[test]
fn run_as_non_root_explicit_and_implicit() {
    let bad = json!({"securityContext": {"runAsNonRoot": false},
        "containers": [{"name": "a", "securityContext": {"runAsNonRoot": false}}, {"name": "b"}]});
    let found: Vec<Violation> = evaluate(&json!({}), &bad, lv(Level::Restricted, LATEST))
        .into_iter()
        .filter(|v| v.reason == "runAsNonRoot != true")
        .collect();
    assert_eq!(
        found[0].detail,
        "pod and container \"a\" must not set securityContext.runAsNonRoot=false"
    );
    let pod_level =
        json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"}]});
    assert!(
        !evaluate(&json!({}), &pod_level, lv(Level::Restricted, LATEST))
            .iter()
            .any(|v| v.reason == "runAsNonRoot != true")
    );
}

#[test]
fn run_as_user_zero_is_refused_from_1_23() {
    let spec = json!({"securityContext": {"runAsUser": 0, "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "a", "securityContext": {"runAsUser": 0,
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]});
    assert_eq!(detail(spec.clone(), Level::Restricted, v(22)), "");
    assert_eq!(
        detail(spec, Level::Restricted, v(23)),
        "runAsUser=0 (pod and container \"a\" must not set runAsUser=0)"
    );
}

#[test]
fn seccomp_annotations_before_1_19_fields_from_then() {
    let meta = json!({"annotations": {
        "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
        "container.seccomp.security.alpha.kubernetes.io/a": "runtime/default"}});
    let spec = json!({"containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]});
    assert_eq!(
        detail_meta(meta.clone(), spec.clone(), Level::Baseline, v(18)),
        "seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\")"
    );
    assert_eq!(
        detail_meta(meta.clone(), spec.clone(), Level::Baseline, v(19)),
        "seccompProfile (container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
    );
    // At restricted from 1.19 the restricted check replaces the baseline one: one message.
    let text = detail_meta(meta, spec, Level::Restricted, LATEST);
    assert_eq!(text.matches("seccompProfile (").count(), 1, "{text}");
    assert!(text.contains(
        "seccompProfile (container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
    ));
}

#[test]
fn sysctls_safe_sets_grow_with_the_version() {
    let spec = |name: &str| json!({"securityContext": {"sysctls": [{"name": name, "value": "1"}]}, "containers": [{"name": "a"}]});
    let check = |name: &str, version| detail(spec(name), Level::Baseline, version);
    assert_eq!(check("kernel.shm_rmid_forced", v(0)), "");
    assert_eq!(
        check("net.ipv4.ip_local_reserved_ports", v(26)),
        "forbidden sysctls (net.ipv4.ip_local_reserved_ports)"
    );
    assert_eq!(check("net.ipv4.ip_local_reserved_ports", v(27)), "");
    assert_ne!(check("net.ipv4.tcp_keepalive_time", v(28)), "");
    assert_eq!(check("net.ipv4.tcp_keepalive_probes", v(29)), "");
    assert_ne!(check("net.ipv4.tcp_rmem", v(31)), "");
    assert_eq!(check("net.ipv4.tcp_wmem", v(32)), "");
    assert_eq!(check("net.ipv4.tcp_wmem", LATEST), "");
    assert_eq!(
        check("kernel.msgmax", LATEST),
        "forbidden sysctls (kernel.msgmax)"
    );
}

#[test]
fn selinux_container_engine_t_is_allowed_from_1_31() {
    let spec = json!({"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}, "containers": [{"name": "a"}]});
    assert_eq!(
        detail(spec.clone(), Level::Baseline, v(30)),
        "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"container_engine_t\")"
    );
    assert_eq!(detail(spec, Level::Baseline, v(31)), "");
    let user = json!({"containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"user": "u", "role": "r"}}}]});
    assert_eq!(
        detail(user, Level::Baseline, LATEST),
        "seLinuxOptions (container \"a\" set forbidden securityContext.seLinuxOptions: user may not be set; role may not be set)"
    );
}

#[test]
fn host_namespaces_ports_paths_privileged_procmount() {
    let spec = json!({"hostNetwork": true, "hostPID": true, "hostIPC": true,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
        "containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9, "hostPort": 10}],
            "securityContext": {"privileged": true, "procMount": "Unmasked"}}]});
    assert_eq!(
        detail(spec.clone(), Level::Baseline, LATEST),
        "host namespaces (hostIPC, hostNetwork, hostPID), \
         hostPath volumes (volume \"h\"), \
         hostPort (container \"a\" uses hostPorts 10, 8080), \
         privileged (container \"a\" must not set securityContext.privileged=true), \
         procMount (container \"a\" must not set securityContext.procMount to \"Unmasked\")"
    );
    // At restricted the volumes check replaces hostPathVolumes.
    let text = detail(spec, Level::Restricted, LATEST);
    assert!(!text.contains("hostPath volumes"), "{text}");
    assert!(
        text.contains(
            "restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")"
        ),
        "{text}"
    );
}

#[test]
fn restricted_volume_types() {
    let spec = json!({"containers": [good("a")], "volumes": [
        {"name": "n", "nfs": {"server": "s", "path": "/"}},
        {"name": "g", "gitRepo": {"repository": "r"}},
        {"name": "i", "image": {"reference": "x"}},
        {"name": "ok", "configMap": {"name": "c"}},
        {"name": "p", "persistentVolumeClaim": {"claimName": "c"}}]});
    assert_eq!(
        detail(spec, Level::Restricted, LATEST),
        "restricted volume types (volumes \"n\", \"g\", \"i\" use restricted volume types \"gitRepo\", \"nfs\", \"unknown\")"
    );
}

#[test]
fn apparmor_fields_and_annotations() {
    let meta = json!({"annotations": {
        "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/b": "localhost/p"}});
    let spec = json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
        "containers": [{"name": "a"}, {"name": "b", "securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}}]});
    assert_eq!(
        detail_meta(meta, spec, Level::Baseline, LATEST),
        "forbidden AppArmor profiles (pod and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/a=\\\"unconfined\\\"\")"
    );
}

#[test]
fn windows_host_process() {
    let spec = json!({"securityContext": {"windowsOptions": {"hostProcess": true}},
        "containers": [{"name": "a", "securityContext": {"windowsOptions": {"hostProcess": true}}}, {"name": "b"}]});
    assert_eq!(
        detail(spec, Level::Baseline, v(0)),
        "hostProcess (pod and container \"a\" must not set securityContext.windowsOptions.hostProcess=true)"
    );
}

#[test]
fn init_and_ephemeral_containers_are_checked_init_first() {
    let spec = json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}],
        "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
        "ephemeralContainers": [{"name": "e", "securityContext": {"privileged": true}}]});
    assert_eq!(
        detail(spec, Level::Baseline, LATEST),
        "privileged (containers \"i\", \"c\", \"e\" must not set securityContext.privileged=true)"
    );
}

#[test]
fn labels_resolve_over_defaults_with_upstreams_errors() {
    let labels = json!({
        ENFORCE_LEVEL_LABEL: "restricted",
        ENFORCE_VERSION_LABEL: "v1.25",
        WARN_LEVEL_LABEL: "baseline"});
    let (policy, errors) = policy_from_labels(labels.as_object(), &Policy::default());
    assert!(errors.is_empty());
    assert_eq!(policy.enforce.to_string(), "restricted:v1.25");
    assert_eq!(policy.warn.to_string(), "baseline:latest");
    assert_eq!(policy.audit.to_string(), "privileged:latest");

    let bad = json!({ENFORCE_LEVEL_LABEL: "strict", WARN_LEVEL_LABEL: "nope", AUDIT_VERSION_LABEL: "v1.01"});
    let (policy, errors) = policy_from_labels(bad.as_object(), &Policy::default());
    assert_eq!(policy.enforce.level, Level::Restricted, "fail closed");
    assert_eq!(policy.warn.level, Level::Privileged, "fail open");
    let fields: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect();
    assert_eq!(
        fields,
        vec![
            "metadata.labels[pod-security.kubernetes.io/enforce]: must be one of privileged, baseline, restricted",
            "metadata.labels[pod-security.kubernetes.io/audit-version]: must be \"latest\" or \"v1.x\"",
            "metadata.labels[pod-security.kubernetes.io/warn]: must be one of privileged, baseline, restricted",
        ]
    );
}

#[test]
fn versions_parse_as_upstream() {
    assert_eq!(parse_version("latest"), Ok(Version::Latest));
    assert_eq!(parse_version("v1.0"), Ok(Version::Minor(0)));
    assert_eq!(parse_version("v1.33"), Ok(Version::Minor(33)));
    assert_eq!(parse_version("v1.99"), Ok(Version::Minor(99)));
    for bad in ["v2.0", "1.25", "v1.", "v1.01", "v1.x", ""] {
        assert_eq!(parse_version(bad), Err(VERSION_ERROR), "{bad}");
    }
}

#[test]
fn warn_follows_a_stricter_enforce_label_unless_set() {
    let parse = |labels: Value| policy_from_labels(labels.as_object(), &Policy::default()).0;
    let policy = parse(json!({ENFORCE_LEVEL_LABEL: "restricted", ENFORCE_VERSION_LABEL: "v1.30"}));
    assert_eq!(policy.warn.to_string(), "restricted:v1.30");
    let policy = parse(json!({ENFORCE_LEVEL_LABEL: "restricted", WARN_VERSION_LABEL: "v1.20"}));
    assert_eq!(policy.warn.to_string(), "restricted:v1.20");
    let policy = parse(json!({ENFORCE_LEVEL_LABEL: "restricted", WARN_LEVEL_LABEL: "privileged"}));
    assert_eq!(policy.warn.level, Level::Privileged);
    // An invalid enforce label enforces restricted, but does not warn.
    let policy = parse(json!({ENFORCE_LEVEL_LABEL: "bogus"}));
    assert_eq!(policy.enforce.level, Level::Restricted);
    assert_eq!(policy.warn.level, Level::Privileged);
    // Defaults stricter than the enforce label keep their warn level.
    let defaults = Policy {
        warn: lv(Level::Restricted, LATEST),
        ..Policy::default()
    };
    let (policy, _) = policy_from_labels(
        json!({ENFORCE_LEVEL_LABEL: "baseline"}).as_object(),
        &defaults,
    );
    assert_eq!(policy.warn.level, Level::Restricted);
}

#[test]
fn compact_strings() {
    let policy = Policy {
        enforce: lv(Level::Restricted, LATEST),
        warn: lv(Level::Baseline, v(30)),
        audit: lv(Level::Baseline, LATEST),
    };
    let labels = json!({ENFORCE_LEVEL_LABEL: "restricted", WARN_VERSION_LABEL: "v1.30"});
    assert_eq!(
        policy.compact_string(labels.as_object()),
        "enforce=restricted:latest, warn=baseline:v1.30"
    );
    assert!(policy.equivalent(&policy));
    assert!(!policy.equivalent(&Policy::default()));
    let mut privileged = Policy::default();
    privileged.enforce.version = v(20);
    assert!(privileged.equivalent(&Policy::default()));
    assert_eq!(
        forbidden_reason(&[
            Violation {
                reason: "a".into(),
                detail: "x".into()
            },
            Violation {
                reason: "b".into(),
                detail: String::new()
            }
        ]),
        "a, b"
    );
}
