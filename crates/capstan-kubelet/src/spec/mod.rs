//! What the agent asks the runtime for, built without I/O from the pod: the sandbox
//! configuration (hostname, namespaces, host ports, cgroup parent, labels the agent finds its
//! pods by again) and each container's configuration (command, environment, mounts, resource
//! limits as cgroup settings, security context).

pub mod dns;
pub mod env;

use std::collections::{BTreeMap, HashMap};

use capstan_api::quantity::Quantity;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSpec};

/// The sandbox and container label that holds the pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// The label that holds the pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// The label that holds the pod's UID: the agent finds a pod's sandboxes and containers by it.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// The container label that holds the container's name in the pod.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// The container annotation that holds the hash of the spec it was started from.
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// The container annotation that holds its restart count.
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// The container annotation that holds its pod's grace period, for stops after a restart.
pub const GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// The container annotation that holds where in the container its termination message is.
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
/// The container annotation that holds its termination message policy.
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Where a container's termination message is unless its spec says otherwise.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// The paths the kubelet hides from unprivileged containers (upstream's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/devices/virtual/powercap",
    "/sys/firmware",
];
/// The paths the kubelet makes read-only for unprivileged containers.
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The CFS period the kubelet uses, in microseconds.
const CPU_PERIOD: i64 = 100_000;

fn meta(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// The labels that tie a sandbox to its pod.
pub fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let (name, namespace, uid) = meta(pod);
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(POD_NAME.to_owned(), name.to_owned());
    labels.insert(POD_NAMESPACE.to_owned(), namespace.to_owned());
    labels.insert(POD_UID.to_owned(), uid.to_owned());
    labels
}

/// The pod's QoS class, from its status or computed from its spec.
pub fn qos_class(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.qos_class.clone())
        .or_else(|| {
            pod.spec
                .as_ref()
                .map(|spec| capstan_api::defaults::pod::pod_qos_class(spec).to_owned())
        })
        .unwrap_or_else(|| "BestEffort".to_owned())
}

/// The pod's cgroup, as the kubelet lays them out with the cgroupfs driver.
pub fn cgroup_parent(pod: &Pod) -> String {
    let (_, _, uid) = meta(pod);
    match qos_class(pod).as_str() {
        "Guaranteed" => format!("/kubepods/pod{uid}"),
        "Burstable" => format!("/kubepods/burstable/pod{uid}"),
        _ => format!("/kubepods/besteffort/pod{uid}"),
    }
}

/// The directory under the pod log root that holds this pod's container logs
/// (`<namespace>_<name>_<uid>`, upstream's layout).
pub fn pod_log_dir_name(pod: &Pod) -> String {
    let (name, namespace, uid) = meta(pod);
    format!("{namespace}_{name}_{uid}")
}

fn namespace_mode(host: bool, shared: cri::NamespaceMode) -> i32 {
    if host {
        cri::NamespaceMode::Node as i32
    } else {
        shared as i32
    }
}

/// The namespaces of the pod's containers: the node's when the pod asks for host networking,
/// PIDs or IPC; otherwise the pod's (PIDs per container unless the pod shares them).
pub fn namespaces(spec: &PodSpec) -> cri::NamespaceOption {
    let pid = if spec.share_process_namespace == Some(true) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: namespace_mode(spec.host_network == Some(true), cri::NamespaceMode::Pod),
        pid: namespace_mode(spec.host_pid == Some(true), pid),
        ipc: namespace_mode(spec.host_ipc == Some(true), cri::NamespaceMode::Pod),
        ..cri::NamespaceOption::default()
    }
}

fn all_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
}

/// The pod's host name: `spec.hostname` or its name, cut to 63 characters without a trailing
/// `-` or `.` (upstream's `GeneratePodHostNameAndDomain`).
pub fn pod_hostname(pod: &Pod) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
        .unwrap_or(name);
    if host.len() <= 63 {
        return host.to_owned();
    }
    host.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_owned()
}

/// The pod's domain when it has a subdomain: `<subdomain>.<namespace>.svc.<cluster domain>`.
pub fn pod_domain(pod: &Pod, cluster_domain: &str) -> Option<String> {
    let subdomain = pod.spec.as_ref()?.subdomain.as_deref()?;
    if subdomain.is_empty() {
        return None;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    Some(format!("{subdomain}.{namespace}.svc.{cluster_domain}"))
}

/// The sandbox configuration of `pod` (attempt `attempt`), logging under `log_directory`.
pub fn sandbox_config(pod: &Pod, attempt: u32, log_directory: &str) -> cri::PodSandboxConfig {
    let (name, namespace, uid) = meta(pod);
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let hostname = if spec.host_network == Some(true) {
        String::new()
    } else {
        pod_hostname(pod)
    };
    let port_mappings = all_containers(spec)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| cri::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp as i32,
                Some("SCTP") => cri::Protocol::Sctp as i32,
                _ => cri::Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let security = spec.security_context.clone().unwrap_or_default();
    let privileged = all_containers(spec).any(|c| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    });
    let sysctls = security
        .sysctls
        .iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_owned(),
            uid: uid.to_owned(),
            namespace: namespace.to_owned(),
            attempt,
        }),
        hostname,
        log_directory: log_directory.to_owned(),
        dns_config: None,
        port_mappings,
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(pod),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(spec)),
                run_as_user: security.run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: security.run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: security.supplemental_groups.clone().unwrap_or_default(),
                privileged,
                ..cri::LinuxSandboxSecurityContext::default()
            }),
            sysctls,
            ..cri::LinuxPodSandboxConfig::default()
        }),
        ..cri::PodSandboxConfig::default()
    }
}

/// A stable hash of what in a container's spec requires a new container when it changes
/// (everything but its resources, which may change in place).
pub fn container_hash(container: &Container) -> String {
    let mut spec = container.clone();
    spec.resources = None;
    spec.resize_policy = None;
    let text = serde_json::to_string(&spec).unwrap_or_default();
    let hash = crate::fnv1a(crate::FNV_OFFSET, text.bytes());
    format!("{hash:016x}")
}

fn quantity(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
) -> Option<Quantity> {
    Quantity::parse(&list?.get(name)?.0).ok()
}

/// The cgroup settings of a container: CPU shares from its request, a CFS quota from its CPU
/// limit, a memory limit, and the OOM score adjustment of the pod's QoS class.
pub fn linux_resources(
    container: &Container,
    qos: &str,
    node_memory: i64,
) -> cri::LinuxContainerResources {
    let resources = container.resources.clone().unwrap_or_default();
    let requests = resources.requests.as_ref();
    let limits = resources.limits.as_ref();
    let cpu_request = quantity(requests, "cpu").or_else(|| quantity(limits, "cpu"));
    let cpu_shares = match cpu_request {
        Some(q) if !q.is_zero() => (q.milli_value().saturating_mul(1024) / 1000).max(2),
        _ => 2,
    };
    let cpu_quota = match quantity(limits, "cpu") {
        Some(q) if !q.is_zero() => (q.milli_value().saturating_mul(CPU_PERIOD) / 1000).max(1000),
        _ => 0,
    };
    let memory_limit = quantity(limits, "memory").map_or(0, |q| q.value());
    let oom_score_adj = match qos {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let request = quantity(requests, "memory")
                .or_else(|| quantity(limits, "memory"))
                .map_or(0, |q| q.value());
            let adj = if node_memory > 0 {
                1000 - (1000 * i128::from(request) / i128::from(node_memory)) as i64
            } else {
                999
            };
            adj.clamp(2, 999)
        }
    };
    cri::LinuxContainerResources {
        cpu_period: if cpu_quota > 0 { CPU_PERIOD } else { 0 },
        cpu_quota,
        cpu_shares,
        memory_limit_in_bytes: memory_limit,
        oom_score_adj,
        ..cri::LinuxContainerResources::default()
    }
}

/// The container's security settings, the pod's settings filling in what it leaves out.
pub fn container_security(
    spec: &PodSpec,
    container: &Container,
) -> cri::LinuxContainerSecurityContext {
    let pod = spec.security_context.clone().unwrap_or_default();
    let own = container.security_context.clone().unwrap_or_default();
    let privileged = own.privileged.unwrap_or(false);
    let capabilities = own.capabilities.clone().unwrap_or_default();
    let (masked, readonly) = if privileged {
        (Vec::new(), Vec::new())
    } else {
        (
            MASKED_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            READONLY_PATHS.iter().map(|p| (*p).to_owned()).collect(),
        )
    };
    cri::LinuxContainerSecurityContext {
        capabilities: Some(cri::Capability {
            add_capabilities: capabilities.add.unwrap_or_default(),
            drop_capabilities: capabilities.drop.unwrap_or_default(),
            ..cri::Capability::default()
        }),
        privileged,
        namespace_options: Some(namespaces(spec)),
        run_as_user: own
            .run_as_user
            .or(pod.run_as_user)
            .map(|value| cri::Int64Value { value }),
        run_as_group: own
            .run_as_group
            .or(pod.run_as_group)
            .map(|value| cri::Int64Value { value }),
        readonly_rootfs: own.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: pod.supplemental_groups.unwrap_or_default(),
        no_new_privs: own.allow_privilege_escalation == Some(false),
        masked_paths: masked,
        readonly_paths: readonly,
        ..cri::LinuxContainerSecurityContext::default()
    }
}

/// What a container is started with, besides its spec: resolved environment and mounts, the
/// image as the runtime knows it, and its restart count.
#[derive(Debug, Clone, Default)]
pub struct ContainerInputs {
    /// The environment, in order, `$(VAR)` references expanded.
    pub env: Vec<(String, String)>,
    /// Volume mounts: (path in the container, path on the host, read-only).
    pub mounts: Vec<(String, String, bool)>,
    /// The image reference the runtime resolved (its ID).
    pub image_ref: String,
    /// How many times the container has been restarted before this one.
    pub restart_count: u32,
    /// The node's memory, for the OOM score of burstable pods.
    pub node_memory: i64,
    /// The running container whose process namespace this one joins, by runtime ID (an
    /// ephemeral container's `targetContainerName`).
    pub pid_target: Option<String>,
}

/// An ephemeral container as the container it runs as (the fields they share; its
/// `targetContainerName` goes into [`ContainerInputs::pid_target`]).
pub fn ephemeral_container(ephemeral: &EphemeralContainer) -> Container {
    let e = ephemeral.clone();
    Container {
        name: e.name,
        image: e.image,
        image_pull_policy: e.image_pull_policy,
        command: e.command,
        args: e.args,
        working_dir: e.working_dir,
        env: e.env,
        env_from: e.env_from,
        volume_mounts: e.volume_mounts,
        volume_devices: e.volume_devices,
        security_context: e.security_context,
        stdin: e.stdin,
        stdin_once: e.stdin_once,
        tty: e.tty,
        termination_message_path: e.termination_message_path,
        termination_message_policy: e.termination_message_policy,
        ..Container::default()
    }
}

/// The configuration of `container` in `pod`.
pub fn container_config(
    pod: &Pod,
    container: &Container,
    inputs: &ContainerInputs,
) -> cri::ContainerConfig {
    let (name, namespace, uid) = meta(pod);
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let env_map: HashMap<&str, &str> = inputs
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let expand_all = |items: &Option<Vec<String>>| -> Vec<String> {
        items
            .iter()
            .flatten()
            .map(|item| expand(item, &env_map))
            .collect()
    };
    let labels = HashMap::from([
        (POD_NAME.to_owned(), name.to_owned()),
        (POD_NAMESPACE.to_owned(), namespace.to_owned()),
        (POD_UID.to_owned(), uid.to_owned()),
        (CONTAINER_NAME.to_owned(), container.name.clone()),
    ]);
    let annotations = HashMap::from([
        (CONTAINER_HASH.to_owned(), container_hash(container)),
        (RESTART_COUNT.to_owned(), inputs.restart_count.to_string()),
        (
            GRACE_PERIOD.to_owned(),
            spec.termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
        (
            TERMINATION_MESSAGE_PATH.to_owned(),
            container
                .termination_message_path
                .clone()
                .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.to_owned()),
        ),
        (
            TERMINATION_MESSAGE_POLICY.to_owned(),
            container
                .termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".to_owned()),
        ),
    ]);
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: inputs.restart_count,
        }),
        image: Some(cri::ImageSpec {
            image: inputs.image_ref.clone(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..cri::ImageSpec::default()
        }),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: inputs
            .env
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: inputs
            .mounts
            .iter()
            .map(|(container_path, host_path, readonly)| cri::Mount {
                container_path: container_path.clone(),
                host_path: host_path.clone(),
                readonly: *readonly,
                ..cri::Mount::default()
            })
            .collect(),
        labels,
        annotations,
        log_path: format!("{}/{}.log", container.name, inputs.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_resources(
                container,
                &qos_class(pod),
                inputs.node_memory,
            )),
            security_context: Some({
                let mut security = container_security(spec, container);
                if let (Some(target), Some(namespaces)) =
                    (&inputs.pid_target, security.namespace_options.as_mut())
                {
                    namespaces.pid = cri::NamespaceMode::Target as i32;
                    namespaces.target_id = target.clone();
                }
                security
            }),
        }),
        ..cri::ContainerConfig::default()
    }
}

/// Expands `$(NAME)` references to variables of `env` as the kubelet does: `$$` escapes a `$`,
/// and a reference to an unknown variable stays as written.
pub fn expand(text: &str, env: &HashMap<&str, &str>) -> String {
    expand_by(text, |name| env.get(name).map(|v| (*v).to_owned()))
}

/// A volume mount's `subPathExpr` expanded from the container's environment, as upstream's
/// `ExpandContainerVolumeMounts`: a reference to a variable that is missing or empty is an
/// error naming every such variable.
pub fn expand_sub_path(expr: &str, env: &HashMap<&str, &str>) -> Result<String, String> {
    let mut missing = std::collections::BTreeSet::new();
    let expanded = expand_by(expr, |name| match env.get(name) {
        Some(value) if !value.is_empty() => Some((*value).to_owned()),
        _ => {
            missing.insert(name.to_owned());
            Some(String::new())
        }
    });
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ))
    }
}

/// `$(VAR)` expansion with `lookup`; a name it does not know is written back as it was.
fn expand_by(text: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".to_owned()),
                namespace: Some("ns".to_owned()),
                uid: Some("u-1".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers,
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn limits(cpu: &str, memory: &str) -> ResourceRequirements {
        let list = BTreeMap::from([
            ("cpu".to_owned(), Q(cpu.to_owned())),
            ("memory".to_owned(), Q(memory.to_owned())),
        ]);
        ResourceRequirements {
            limits: Some(list.clone()),
            requests: Some(list),
            ..ResourceRequirements::default()
        }
    }

    #[test]
    fn expansion_follows_the_kubelet() {
        let env = HashMap::from([("A", "x"), ("B", "y")]);
        for (input, expected) in [
            ("$(A)-$(B)", "x-y"),
            ("$$(A)", "$(A)"),
            ("$(C)", "$(C)"),
            ("cost $5", "cost $5"),
            ("$(A", "$(A"),
            ("plain", "plain"),
        ] {
            assert_eq!(expand(input, &env), expected, "{input}");
        }
    }

    #[test]
    fn sub_path_expressions_need_every_variable() {
        let env = HashMap::from([("POD", "web-0"), ("EMPTY", "")]);
        assert_eq!(
            expand_sub_path("logs/$(POD)", &env).as_deref(),
            Ok("logs/web-0")
        );
        assert_eq!(
            expand_sub_path("$(NOPE)/$(EMPTY)/$(POD)", &env),
            Err("missing value for EMPTY, NOPE".to_owned())
        );
    }

    #[test]
    fn limits_become_cgroup_settings() {
        let container = Container {
            name: "c".to_owned(),
            resources: Some(limits("500m", "64Mi")),
            ..Container::default()
        };
        let r = linux_resources(&container, "Guaranteed", 1 << 33);
        assert_eq!(r.cpu_shares, 512);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(r.oom_score_adj, -997);
        let best_effort = linux_resources(&Container::default(), "BestEffort", 1 << 33);
        assert_eq!((best_effort.cpu_shares, best_effort.cpu_quota), (2, 0));
        assert_eq!(best_effort.oom_score_adj, 1000);
    }

    #[test]
    fn the_sandbox_maps_host_ports_and_labels_the_pod() {
        let container = Container {
            name: "c".to_owned(),
            ports: Some(vec![ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                ..ContainerPort::default()
            }]),
            ..Container::default()
        };
        let config = sandbox_config(&pod(vec![container]), 0, "/logs/ns_web_u-1");
        assert_eq!(config.port_mappings.len(), 1);
        assert_eq!(config.port_mappings[0].host_port, 8080);
        assert_eq!(config.labels[POD_UID], "u-1");
        assert_eq!(config.hostname, "web");
        assert_eq!(
            config.linux.map(|l| l.cgroup_parent).unwrap_or_default(),
            "/kubepods/besteffort/podu-1"
        );
    }

    #[test]
    fn containers_carry_their_hash_and_expanded_command() {
        let container = Container {
            name: "c".to_owned(),
            image: Some("busybox".to_owned()),
            command: Some(vec!["echo".to_owned(), "$(GREETING)".to_owned()]),
            ..Container::default()
        };
        let inputs = ContainerInputs {
            env: vec![("GREETING".to_owned(), "hi".to_owned())],
            restart_count: 3,
            image_ref: "sha256:abc".to_owned(),
            ..ContainerInputs::default()
        };
        let config = container_config(&pod(vec![container.clone()]), &container, &inputs);
        assert_eq!(config.command, ["echo", "hi"]);
        assert_eq!(config.log_path, "c/3.log");
        assert_eq!(
            config.annotations[CONTAINER_HASH],
            container_hash(&container)
        );
        assert_eq!(config.metadata.map(|m| m.attempt), Some(3));
        let mut resized = container.clone();
        resized.resources = Some(limits("1", "1Gi"));
        assert_eq!(container_hash(&resized), container_hash(&container));
        resized.image = Some("busybox:2".to_owned());
        assert_ne!(container_hash(&resized), container_hash(&container));
    }
}
