//! Pod and pod-spec defaults: restart and DNS policy, grace period, scheduler, security context,
//! service links, container pull policy (by image tag), termination message, port protocol,
//! probe timings, HTTP handler path and scheme, volume sources and file modes, field-selector API
//! version, requests from limits, and resource quantities rounded up to milli-units.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EphemeralContainer, HostIP, LifecycleHandler, Pod, PodCondition, PodIP, PodSpec,
    PodStatus, PodTemplateSpec, Probe, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::quantity::Quantity;

/// Default grace period, in seconds.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// Default scheduler.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Default termination message path.
pub const TERMINATION_MESSAGE_PATH_DEFAULT: &str = "/dev/termination-log";
/// Default mode of secret, config map, downward API and projected volume files (0644).
pub const DEFAULT_FILE_MODE: i32 = 0o644;

fn set_if_none<T>(slot: &mut Option<T>, value: T) {
    if slot.is_none() {
        *slot = Some(value);
    }
}

fn set_if_empty(slot: &mut Option<String>, value: &str) {
    if slot.as_deref().unwrap_or("").is_empty() {
        *slot = Some(value.to_owned());
    }
}

/// Rounds every quantity up to milli-units and prints it as upstream serialises it
/// (`SetDefaults_ResourceList` plus canonical encoding). Malformed quantities are left for
/// validation to report.
pub fn default_resource_list(list: &mut Option<BTreeMap<String, ApiQuantity>>) {
    for q in list.iter_mut().flat_map(|l| l.values_mut()) {
        if let Ok(mut parsed) = Quantity::parse(&q.0) {
            parsed.round_up(-3);
            q.0 = parsed.canonical();
        }
    }
}

fn default_resources(resources: &mut Option<ResourceRequirements>) {
    if let Some(r) = resources {
        default_resource_list(&mut r.limits);
        default_resource_list(&mut r.requests);
    }
}

/// The tag upstream's image-name parser finds: the explicit tag, `latest` when there is neither
/// tag nor digest, and none when the reference does not parse.
fn image_tag(image: &str) -> Option<String> {
    if image.is_empty() || image != image.trim() {
        return None;
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    // Repository paths (after an optional registry host) are lower case.
    let path = match repo.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            rest
        }
        _ => repo,
    };
    if path.is_empty() || path.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    match (tag, digest) {
        (Some(tag), _) if !tag.is_empty() => Some(tag.to_owned()),
        (None, None) => Some("latest".to_owned()),
        _ => None,
    }
}

fn default_probe(probe: &mut Option<Probe>) {
    let Some(p) = probe else { return };
    for (slot, value) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if slot.unwrap_or(0) == 0 {
            *slot = Some(value);
        }
    }
    if let Some(http) = &mut p.http_get {
        set_if_empty(&mut http.path, "/");
        set_if_empty(&mut http.scheme, "HTTP");
    }
    if let Some(grpc) = &mut p.grpc {
        set_if_none(&mut grpc.service, String::new());
    }
}

fn default_handler(handler: &mut Option<LifecycleHandler>) {
    if let Some(http) = handler.as_mut().and_then(|h| h.http_get.as_mut()) {
        set_if_empty(&mut http.path, "/");
        set_if_empty(&mut http.scheme, "HTTP");
    }
}

/// The pull policy a container without one gets: `Always` for an image tagged (or defaulting
/// to) `latest`, else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    match image_tag(image).as_deref() {
        Some("latest") => "Always",
        _ => "IfNotPresent",
    }
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let policy = default_pull_policy(c.image.as_deref().unwrap_or(""));
        c.image_pull_policy = Some(policy.to_owned());
    }
    set_if_empty(
        &mut c.termination_message_path,
        TERMINATION_MESSAGE_PATH_DEFAULT,
    );
    set_if_empty(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        set_if_empty(&mut port.protocol, "TCP");
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(fr) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_if_empty(&mut fr.api_version, "v1");
        }
    }
    default_resources(&mut c.resources);
    default_probe(&mut c.liveness_probe);
    default_probe(&mut c.readiness_probe);
    default_probe(&mut c.startup_probe);
    if let Some(lifecycle) = &mut c.lifecycle {
        default_handler(&mut lifecycle.post_start);
        default_handler(&mut lifecycle.pre_stop);
    }
}

fn default_ephemeral_container(ec: &mut EphemeralContainer) {
    // Same defaults as a container; copy through a Container to share the code.
    let mut c = Container {
        name: std::mem::take(&mut ec.name),
        image: ec.image.take(),
        image_pull_policy: ec.image_pull_policy.take(),
        termination_message_path: ec.termination_message_path.take(),
        termination_message_policy: ec.termination_message_policy.take(),
        ports: ec.ports.take(),
        env: ec.env.take(),
        resources: ec.resources.take(),
        liveness_probe: ec.liveness_probe.take(),
        readiness_probe: ec.readiness_probe.take(),
        startup_probe: ec.startup_probe.take(),
        lifecycle: ec.lifecycle.take(),
        ..Default::default()
    };
    default_container(&mut c);
    ec.name = c.name;
    ec.image = c.image;
    ec.image_pull_policy = c.image_pull_policy;
    ec.termination_message_path = c.termination_message_path;
    ec.termination_message_policy = c.termination_message_policy;
    ec.ports = c.ports;
    ec.env = c.env;
    ec.resources = c.resources;
    ec.liveness_probe = c.liveness_probe;
    ec.readiness_probe = c.readiness_probe;
    ec.startup_probe = c.startup_probe;
    ec.lifecycle = c.lifecycle;
}

/// Defaults of one volume: an empty source becomes `emptyDir`, file modes 0644, host-path type
/// unset (`""`), projected token expiry one hour, and the legacy plugins' fields.
pub fn default_volume(v: &mut Volume) {
    let has_source = v.aws_elastic_block_store.is_some()
        || v.azure_disk.is_some()
        || v.azure_file.is_some()
        || v.cephfs.is_some()
        || v.cinder.is_some()
        || v.config_map.is_some()
        || v.csi.is_some()
        || v.downward_api.is_some()
        || v.empty_dir.is_some()
        || v.ephemeral.is_some()
        || v.fc.is_some()
        || v.flex_volume.is_some()
        || v.flocker.is_some()
        || v.gce_persistent_disk.is_some()
        || v.git_repo.is_some()
        || v.glusterfs.is_some()
        || v.host_path.is_some()
        || v.image.is_some()
        || v.iscsi.is_some()
        || v.nfs.is_some()
        || v.persistent_volume_claim.is_some()
        || v.photon_persistent_disk.is_some()
        || v.portworx_volume.is_some()
        || v.projected.is_some()
        || v.quobyte.is_some()
        || v.rbd.is_some()
        || v.scale_io.is_some()
        || v.secret.is_some()
        || v.storageos.is_some()
        || v.vsphere_volume.is_some();
    if !has_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(hp) = &mut v.host_path {
        set_if_none(&mut hp.type_, String::new());
    }
    if let Some(s) = &mut v.secret {
        set_if_none(&mut s.default_mode, DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.config_map {
        set_if_none(&mut s.default_mode, DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.downward_api {
        set_if_none(&mut s.default_mode, DEFAULT_FILE_MODE);
        for item in s.items.iter_mut().flatten() {
            if let Some(fr) = &mut item.field_ref {
                set_if_empty(&mut fr.api_version, "v1");
            }
        }
    }
    if let Some(p) = &mut v.projected {
        set_if_none(&mut p.default_mode, DEFAULT_FILE_MODE);
        for source in p.sources.iter_mut().flatten() {
            if let Some(d) = &mut source.downward_api {
                for item in d.items.iter_mut().flatten() {
                    if let Some(fr) = &mut item.field_ref {
                        set_if_empty(&mut fr.api_version, "v1");
                    }
                }
            }
            if let Some(t) = &mut source.service_account_token {
                set_if_none(&mut t.expiration_seconds, 3600);
            }
        }
    }
    if let Some(s) = &mut v.iscsi {
        set_if_empty(&mut s.iscsi_interface, "default");
    }
    if let Some(s) = &mut v.rbd {
        set_if_empty(&mut s.pool, "rbd");
        set_if_empty(&mut s.user, "admin");
        set_if_empty(&mut s.keyring, "/etc/ceph/keyring");
    }
    if let Some(s) = &mut v.azure_disk {
        set_if_none(&mut s.caching_mode, "ReadWrite".to_owned());
        set_if_none(&mut s.fs_type, "ext4".to_owned());
        set_if_none(&mut s.read_only, false);
        set_if_none(&mut s.kind, "Shared".to_owned());
    }
    if let Some(s) = &mut v.scale_io {
        set_if_empty(&mut s.storage_mode, "ThinProvisioned");
        set_if_empty(&mut s.fs_type, "xfs");
    }
    if let Some(template) = v
        .ephemeral
        .as_mut()
        .and_then(|e| e.volume_claim_template.as_mut())
    {
        set_if_none(&mut template.spec.volume_mode, "Filesystem".to_owned());
        if let Some(r) = &mut template.spec.resources {
            default_resource_list(&mut r.limits);
            default_resource_list(&mut r.requests);
        }
    }
}

/// Defaults every pod spec gets, in a Pod or in a template (`SetDefaults_PodSpec` and the
/// nested defaulters).
pub fn default_pod_spec(spec: &mut PodSpec) {
    set_if_empty(&mut spec.dns_policy, "ClusterFirst");
    set_if_empty(&mut spec.restart_policy, "Always");
    set_if_none(&mut spec.security_context, Default::default());
    set_if_none(
        &mut spec.termination_grace_period_seconds,
        DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
    );
    set_if_empty(&mut spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c);
    }
    for c in spec.containers.iter_mut() {
        default_container(c);
    }
    for ec in spec.ephemeral_containers.iter_mut().flatten() {
        default_ephemeral_container(ec);
    }
    default_resource_list(&mut spec.overhead);
}

/// Defaults of a pod template (workload kinds call this for `spec.template`).
pub fn default_pod_template_spec(template: &mut PodTemplateSpec) {
    default_pod_spec(template.spec.get_or_insert_with(Default::default));
}

fn requests_from_limits(c: &mut Container) {
    let Some(resources) = &mut c.resources else {
        return;
    };
    let Some(limits) = &resources.limits else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    for (name, value) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| value.clone());
    }
}

/// Defaults of a Pod: the pod-only ones (requests copied from limits, service links on, host
/// ports from container ports under host networking), then the pod-spec defaults. The priority
/// is not a default: the API server's Priority admission sets it.
pub fn default_pod(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        requests_from_limits(c);
    }
    set_if_none(&mut spec.enable_service_links, true);
    if spec.host_network == Some(true) {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            for port in c.ports.iter_mut().flatten() {
                if port.host_port.unwrap_or(0) == 0 {
                    port.host_port = Some(port.container_port);
                }
            }
        }
    }
    default_pod_spec(spec);
    if let Some(status) = &mut pod.status {
        convert_status_ips(status);
    }
}

/// What a pod status keeps of its IPs through upstream's internal form, where only the lists
/// exist: a singular `podIP` (`hostIP`) that is set and differs from the list's first entry
/// replaces the list, and `podIP` is then the list's first entry. `hostIP` is left as given, for
/// validation to compare with `hostIPs[0]` as upstream does.
fn convert_status_ips(status: &mut PodStatus) {
    let pod_ip = status.pod_ip.clone().unwrap_or_default();
    let pod_ips = status.pod_ips.get_or_insert_with(Vec::new);
    if !pod_ip.is_empty() && pod_ips.first().is_none_or(|first| first.ip != pod_ip) {
        *pod_ips = vec![PodIP { ip: pod_ip }];
    }
    if let Some(first) = pod_ips.first() {
        status.pod_ip = Some(first.ip.clone());
    }
    if status.pod_ips.as_ref().is_some_and(Vec::is_empty) {
        status.pod_ips = None;
    }
    let host_ip = status.host_ip.clone().unwrap_or_default();
    if !host_ip.is_empty()
        && status
            .host_ips
            .as_ref()
            .and_then(|ips| ips.first())
            .is_none_or(|first| first.ip != host_ip)
    {
        status.host_ips = Some(vec![HostIP { ip: host_ip }]);
    }
}

/// Upstream's QoS class of a pod (`ComputePodQOS`), from the cpu and memory requests and limits
/// of its containers and init containers: `BestEffort` when none is set, `Guaranteed` when every
/// container limits both and the summed requests equal the summed limits, else `Burstable`.
pub fn pod_qos_class(spec: &PodSpec) -> &'static str {
    let zero = Quantity::from_i64(0);
    let mut requests: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut guaranteed = true;
    let positive = |list: Option<&BTreeMap<String, ApiQuantity>>| -> Vec<(&'static str, Quantity)> {
        let mut out = Vec::new();
        for name in ["cpu", "memory"] {
            if let Some(q) = list
                .and_then(|l| l.get(name))
                .and_then(|q| Quantity::parse(&q.0).ok())
                .filter(|q| *q > zero)
            {
                out.push((name, q));
            }
        }
        out
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let resources = c.resources.as_ref();
        for (name, q) in positive(resources.and_then(|r| r.requests.as_ref())) {
            let sum = requests.get(name).map_or_else(|| q.clone(), |s| s.add(&q));
            requests.insert(name, sum);
        }
        let found = positive(resources.and_then(|r| r.limits.as_ref()));
        if found.len() < 2 {
            guaranteed = false;
        }
        for (name, q) in found {
            let sum = limits.get(name).map_or_else(|| q.clone(), |s| s.add(&q));
            limits.insert(name, sum);
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.iter().all(|(name, q)| limits.get(name) == Some(q))
        && requests.len() == limits.len()
    {
        return "Guaranteed";
    }
    "Burstable"
}

/// What upstream's pod strategy sets on create: phase `Pending`, the QoS class, and for a pod
/// with scheduling gates a `PodScheduled=False` condition saying so (the status a client sent
/// is gone by then).
pub fn prepare_pod_for_create(pod: &mut Pod) {
    let spec = pod.spec.clone().unwrap_or_default();
    let gated = spec
        .scheduling_gates
        .as_ref()
        .is_some_and(|gates| !gates.is_empty());
    pod.status = Some(PodStatus {
        phase: Some("Pending".to_owned()),
        qos_class: Some(pod_qos_class(&spec).to_owned()),
        conditions: gated.then(|| {
            vec![PodCondition {
                type_: "PodScheduled".to_owned(),
                status: "False".to_owned(),
                reason: Some("SchedulingGated".to_owned()),
                message: Some("Scheduling is blocked due to non-empty scheduling gates".to_owned()),
                last_transition_time: Some(super::now()),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
}

/// What upstream's pod status strategy carries over on a write through `/status`: the owner
/// references (old kubelets corrupt them), a QoS class the writer dropped, and, while the
/// `ResourceHealthStatus` gate is off (1.33), no `allocatedResourcesStatus` unless the pod
/// already had one.
pub fn prepare_pod_status_update(pod: &mut Pod, old: &Pod) {
    pod.metadata.owner_references = old.metadata.owner_references.clone();
    let old_status = old.status.clone().unwrap_or_default();
    let status = pod.status.get_or_insert_with(Default::default);
    if status.qos_class.as_deref().unwrap_or("").is_empty() {
        status.qos_class = old_status.qos_class.clone();
    }
    let health_in_use = [
        &old_status.container_statuses,
        &old_status.init_container_statuses,
        &old_status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .any(|c| c.allocated_resources_status.is_some());
    if !health_in_use {
        for c in [
            &mut status.container_statuses,
            &mut status.init_container_statuses,
            &mut status.ephemeral_container_statuses,
        ]
        .into_iter()
        .flatten()
        .flatten()
        {
            c.allocated_resources_status = None;
        }
    }
}

/// What upstream's ephemeral containers strategy keeps of a write through
/// `/ephemeralcontainers`: the stored pod with only its ephemeral containers replaced (and the
/// writer's resource version, for the concurrency check).
pub fn prepare_pod_ephemeral_containers_update(pod: &mut Pod, old: &Pod) {
    let ephemeral = pod
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.take());
    let resource_version = pod.metadata.resource_version.take();
    *pod = old.clone();
    pod.metadata.resource_version = resource_version;
    pod.spec
        .get_or_insert_with(Default::default)
        .ephemeral_containers = ephemeral;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, SecretVolumeSource};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    fn check(input: serde_json::Value, expected: serde_json::Value) {
        crate::defaults::check_defaults::<Pod>(input, default_pod, expected);
    }

    #[test]
    fn minimal_pod() {
        check(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            json!({
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{
                        "name": "c", "image": "nginx", "imagePullPolicy": "Always",
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
                    }],
                    "dnsPolicy": "ClusterFirst", "enableServiceLinks": true,
                    "restartPolicy": "Always", "schedulerName": "default-scheduler",
                    "securityContext": {}, "terminationGracePeriodSeconds": 30
                }
            }),
        );
    }

    #[test]
    fn containers_volumes_and_resources() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                host_network: Some(true),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("registry.io:5000/app:1.2".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]),
                    resources: Some(ResourceRequirements {
                        limits: Some(BTreeMap::from([
                            ("cpu".into(), ApiQuantity("1n".into())),
                            ("memory".into(), ApiQuantity("1024Mi".into())),
                        ])),
                        requests: Some(BTreeMap::from([(
                            "memory".into(),
                            ApiQuantity("0.5Gi".into()),
                        )])),
                        claims: None,
                    }),
                    liveness_probe: Some(Probe {
                        http_get: Some(HTTPGetAction {
                            port: IntOrString::Int(8080),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                volumes: Some(vec![
                    Volume {
                        name: "e".into(),
                        ..Default::default()
                    },
                    Volume {
                        name: "s".into(),
                        secret: Some(SecretVolumeSource::default()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        default_pod(&mut pod);
        let spec = pod.spec.unwrap_or_default();
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let ports = c.ports.clone().unwrap_or_default();
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(ports[0].host_port, Some(80));
        let resources = c.resources.clone().unwrap_or_default();
        let requests = resources.requests.unwrap_or_default();
        assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("1m"));
        assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("512Mi"));
        assert_eq!(
            resources
                .limits
                .unwrap_or_default()
                .get("memory")
                .map(|q| q.0.as_str()),
            Some("1Gi")
        );
        let probe = c.liveness_probe.clone().unwrap_or_default();
        assert_eq!(
            (
                probe.timeout_seconds,
                probe.period_seconds,
                probe.success_threshold,
                probe.failure_threshold
            ),
            (Some(1), Some(10), Some(1), Some(3))
        );
        let http = probe.http_get.unwrap_or_default();
        assert_eq!(
            (http.path.as_deref(), http.scheme.as_deref()),
            (Some("/"), Some("HTTP"))
        );
        let volumes = spec.volumes.unwrap_or_default();
        assert!(volumes[0].empty_dir.is_some());
        assert_eq!(
            volumes[1].secret.as_ref().and_then(|s| s.default_mode),
            Some(420)
        );
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, tag) in [
            ("nginx", Some("latest")),
            ("nginx:latest", Some("latest")),
            ("nginx:1.25", Some("1.25")),
            ("localhost:5000/nginx", Some("latest")),
            ("nginx@sha256:abc", None),
            ("Nginx", None),
            ("", None),
        ] {
            assert_eq!(image_tag(image).as_deref(), tag, "{image}");
        }
    }

    #[test]
    fn pull_policy_defaults_follow_the_tag() {
        for (image, policy) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("localhost:5000/busybox", "Always"),
            ("localhost:5000/busybox:1", "IfNotPresent"),
            ("busybox@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), policy, "{image}");
        }
    }

    #[test]
    fn qos_classes() {
        let qos = |containers: serde_json::Value| {
            let mut pod: Pod = serde_json::from_value(json!({"spec": {"containers": containers}}))
                .unwrap_or_else(|e| panic!("{e}"));
            default_pod(&mut pod);
            pod_qos_class(&pod.spec.unwrap_or_default())
        };
        assert_eq!(qos(json!([{"name": "a"}])), "BestEffort");
        assert_eq!(
            qos(json!([{"name": "a", "resources": {"requests": {"cpu": "0"}}}])),
            "BestEffort"
        );
        assert_eq!(
            qos(json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])),
            "Guaranteed"
        );
        assert_eq!(
            qos(json!([
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "100m", "memory": "1Gi"}}}
            ])),
            "Burstable"
        );
        assert_eq!(
            qos(json!([{"name": "a", "resources": {"limits": {"cpu": "1"}}}])),
            "Burstable"
        );
    }

    #[test]
    fn status_ips_follow_upstream_conversion() {
        let status = |value: serde_json::Value| {
            let mut pod: Pod =
                serde_json::from_value(json!({"spec": {"containers": []}, "status": value}))
                    .unwrap_or_else(|e| panic!("{e}"));
            default_pod(&mut pod);
            serde_json::to_value(pod.status).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(
            status(json!({"podIP": "10.0.0.1"})),
            json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]})
        );
        assert_eq!(
            status(json!({"podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]})),
            json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]})
        );
        // The singular field wins when both are set and differ.
        assert_eq!(
            status(
                json!({"podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.1.1.1", "hostIPs": [{"ip": "2.2.2.2"}]})
            ),
            json!({"podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}], "hostIP": "1.1.1.1", "hostIPs": [{"ip": "1.1.1.1"}]})
        );
        // A lone hostIPs keeps an empty hostIP, which validation reports.
        assert_eq!(
            status(json!({"hostIPs": [{"ip": "2.2.2.2"}]})),
            json!({"hostIPs": [{"ip": "2.2.2.2"}]})
        );
    }

    #[test]
    fn status_writes_keep_owners_and_qos() {
        let old: Pod = serde_json::from_value(json!({
            "metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]},
            "status": {"qosClass": "Burstable"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut new: Pod = serde_json::from_value(json!({
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "allocatedResourcesStatus": [{"name": "cpu"}]
            }]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        prepare_pod_status_update(&mut new, &old);
        assert_eq!(new.metadata.owner_references, old.metadata.owner_references);
        let status = new.status.unwrap_or_default();
        assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            status.container_statuses.unwrap_or_default()[0]
                .allocated_resources_status
                .is_none()
        );
    }

    #[test]
    fn new_pods_are_pending_with_their_qos_and_gated_ones_say_so() {
        let mut pod: Pod = serde_json::from_value(json!({
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "schedulingGates": [{"name": "example.com/quota"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        prepare_pod_for_create(&mut pod);
        let status = serde_json::to_value(pod.status.unwrap_or_default()).unwrap_or_default();
        assert_eq!(status["phase"], "Pending");
        assert_eq!(status["qosClass"], "BestEffort");
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        assert_eq!(conditions.len(), 1, "{conditions:?}");
        assert_eq!(conditions[0]["type"], "PodScheduled");
        assert_eq!(conditions[0]["status"], "False");
        assert_eq!(conditions[0]["reason"], "SchedulingGated");
        assert_eq!(
            conditions[0]["message"],
            "Scheduling is blocked due to non-empty scheduling gates"
        );
        assert!(conditions[0]["lastTransitionTime"].is_string());

        let mut ungated: Pod = serde_json::from_value(json!({
            "spec": {"containers": [{"name": "c", "image": "i"}], "schedulingGates": []}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        prepare_pod_for_create(&mut ungated);
        assert!(ungated.status.unwrap_or_default().conditions.is_none());
    }
}
