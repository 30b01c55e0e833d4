//! The objects a kubelet writes, built without I/O: the Node it registers, its Lease, the status
//! of a pod it starts, and the patches that keep them current. Field values follow what
//! upstream's kubelet reports (condition types, reasons and messages, container state shapes).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    DaemonEndpoint, HostIP, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::SimConfig;
use crate::addresses;

/// The annotation that marks a node as simulated.
pub const SIM_ANNOTATION: &str = "capstan.io/sim";
/// The label every simulated node carries, with the value [`SIM_TYPE`].
pub const TYPE_LABEL: &str = "type";
/// The value of [`TYPE_LABEL`] on simulated nodes.
pub const SIM_TYPE: &str = "capstan-sim";
/// The kubelet version simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.33.0";
/// The container runtime simulated nodes report; also the scheme of their container IDs.
pub const CONTAINER_RUNTIME_VERSION: &str = "capstan-sim://1";
/// The image ID every simulated container reports.
pub const IMAGE_ID: &str = "capstan-sim://image";
/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's port, as the node's daemon endpoint reports it (nothing listens there).
pub const KUBELET_PORT: i32 = 10250;

/// The name of node `index`.
pub fn node_name(prefix: &str, index: usize) -> String {
    format!("{prefix}{index}")
}

/// The index of the simulated node called `name`, if it is one of the `count` nodes.
pub fn node_index(prefix: &str, count: usize, name: &str) -> Option<usize> {
    let digits = name.strip_prefix(prefix)?;
    // Only the canonical spelling: "sim-node-07" is not node 7.
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse::<usize>().ok().filter(|i| *i < count)
}

/// The current time.
pub fn now() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| {
            let seconds = i64::try_from(d.as_secs()).ok()?;
            Timestamp::new(seconds, i32::try_from(d.subsec_nanos()).ok()?).ok()
        })
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A stable 64-bit hash (FNV-1a) of `text`, for the IDs a machine would report.
fn fnv(text: &str, seed: u64) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// 32 hexadecimal digits derived from `text`.
fn hex_id(text: &str, salt: &str) -> String {
    let key = format!("{salt}/{text}");
    format!("{:016x}{:016x}", fnv(&key, 1), fnv(&key, 2))
}

/// A UUID-shaped ID derived from `text`.
fn uuid_id(text: &str, salt: &str) -> String {
    let h = hex_id(text, salt);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The labels of node `name`: the kubelet's well-known ones, `type=capstan-sim`, then the
/// configured ones (which win).
pub fn node_labels(config: &SimConfig, name: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        (TYPE_LABEL, SIM_TYPE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.extend(config.labels.clone());
    labels
}

/// The annotations of a simulated node.
pub fn node_annotations() -> BTreeMap<String, String> {
    [
        (SIM_ANNOTATION, "true"),
        // The kubelet leaves volume attachment to the attach/detach controller by default.
        (
            "volumes.kubernetes.io/controller-managed-attach-detach",
            "true",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The node's four conditions as the kubelet posts them: no memory, disk or PID pressure, and
/// ready. `heartbeat` is now; `transition` is when the node became ready.
pub fn node_conditions(heartbeat: Timestamp, transition: Timestamp) -> Vec<NodeCondition> {
    [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        (
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(heartbeat)),
        last_transition_time: Some(Time(transition)),
    })
    .collect()
}

/// When the node's Ready condition last became True, if it is True.
pub fn ready_since(node: &Node) -> Option<Timestamp> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// The capacity of a simulated node (its allocatable is the same: nothing is reserved).
fn capacity(config: &SimConfig) -> BTreeMap<String, Quantity> {
    [
        ("cpu", config.cpu.as_str()),
        ("ephemeral-storage", config.ephemeral_storage.as_str()),
        ("hugepages-1Gi", "0"),
        ("hugepages-2Mi", "0"),
        ("memory", config.memory.as_str()),
        ("pods", config.pods.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
    .collect()
}

/// The status of node `index`, as its kubelet reports it at registration.
pub fn node_status(
    config: &SimConfig,
    index: usize,
    heartbeat: Timestamp,
    transition: Timestamp,
) -> NodeStatus {
    let name = node_name(&config.name_prefix, index);
    let capacity = capacity(config);
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: addresses::node_ip(index).to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: name.clone(),
            },
        ]),
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        conditions: Some(node_conditions(heartbeat, transition)),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: KUBELET_PORT }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".to_owned(),
            boot_id: uuid_id(&name, "boot"),
            container_runtime_version: CONTAINER_RUNTIME_VERSION.to_owned(),
            kernel_version: "capstan-sim".to_owned(),
            // Deprecated: kubelets of 1.31 and later leave it empty.
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.to_owned(),
            machine_id: hex_id(&name, "machine"),
            operating_system: "linux".to_owned(),
            os_image: "Capstan simulated node".to_owned(),
            swap: None,
            system_uuid: uuid_id(&name, "system"),
        }),
        ..NodeStatus::default()
    }
}

/// Node `index` as its kubelet registers it: labels, annotations, taints and status.
pub fn node(config: &SimConfig, index: usize, now: Timestamp) -> Node {
    let name = node_name(&config.name_prefix, index);
    Node {
        metadata: ObjectMeta {
            labels: Some(node_labels(config, &name)),
            annotations: Some(node_annotations()),
            name: Some(name),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!config.taints.is_empty()).then(|| config.taints.clone()),
            ..NodeSpec::default()
        }),
        status: Some(node_status(config, index, now, now)),
    }
}

/// The metadata patch that takes over an existing node: our labels and annotations are set,
/// others are left alone (as a restarted kubelet does; its taints stay as they are).
pub fn node_takeover_patch(config: &SimConfig, name: &str) -> Value {
    json!({"metadata": {"labels": node_labels(config, name), "annotations": node_annotations()}})
}

/// The strategic merge patch of `nodes/status` that posts the conditions again with a new
/// heartbeat (conditions merge by type, so others' conditions stay).
pub fn node_heartbeat_patch(heartbeat: Timestamp, transition: Timestamp) -> Value {
    json!({"status": {"conditions": node_conditions(heartbeat, transition)}})
}

/// The Lease of node `name` (uid `node_uid`), renewed at `now`, owned by the Node as the kubelet
/// makes it.
pub fn lease(name: &str, node_uid: &str, duration_seconds: i32, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Node".to_owned(),
                name: name.to_owned(),
                uid: node_uid.to_owned(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

/// The merge patch that renews node `name`'s lease at `now`.
pub fn lease_renewal_patch(name: &str, duration_seconds: i32, now: Timestamp) -> Value {
    json!({"spec": {
        "holderIdentity": name,
        "leaseDurationSeconds": duration_seconds,
        "renewTime": MicroTime(now),
    }})
}

/// The merge patch that takes over an existing lease: ours, owned by the node `node_uid`, renewed.
pub fn lease_takeover_patch(
    name: &str,
    node_uid: &str,
    duration_seconds: i32,
    now: Timestamp,
) -> Value {
    let lease = lease(name, node_uid, duration_seconds, now);
    json!({
        "metadata": {"ownerReferences": lease.metadata.owner_references},
        "spec": lease.spec,
    })
}

/// Whether the pod's phase is final: the kubelet leaves such pods alone.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Whether a pod bound to a simulated node still has to be started: it is not being deleted, has
/// not finished, and is not yet Running with an address.
pub fn needs_start(pod: &Pod) -> bool {
    let running_with_ip = phase(pod) == Some("Running")
        && pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(|ip| !ip.is_empty());
    pod.metadata.deletion_timestamp.is_none() && !is_terminal(pod) && !running_with_ip
}

/// Whether the pod shares its node's network namespace (its address is then the node's).
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The container ID of container `name` in the pod `uid`.
fn container_id(uid: &str, name: &str) -> String {
    format!("capstan-sim://{uid}-{name}")
}

fn running(uid: &str, container: &Container, since: &Time) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: IMAGE_ID.to_owned(),
        container_id: Some(container_id(uid, &container.name)),
        ready: true,
        started: Some(true),
        restart_count: 0,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(since.clone()),
            }),
            ..ContainerState::default()
        }),
        last_state: Some(ContainerState::default()),
        ..ContainerStatus::default()
    }
}

/// An init container that ran to completion, as the kubelet reports it once the pod's main
/// containers start.
fn completed(uid: &str, container: &Container, at: &Time) -> ContainerStatus {
    ContainerStatus {
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(container_id(uid, &container.name)),
                exit_code: 0,
                reason: Some("Completed".to_owned()),
                started_at: Some(at.clone()),
                finished_at: Some(at.clone()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        started: Some(false),
        ..running(uid, container, at)
    }
}

/// The status of `pod` once its containers run on a node with address `host_ip`, the pod having
/// the address `pod_ip`: phase Running, every container running and ready (init containers
/// completed, sidecars running), the pod's conditions True.
pub fn pod_status(pod: &Pod, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: Timestamp) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let t = Time(now);
    let old = pod.status.as_ref();
    let old_conditions = old.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let condition = |type_: &str| PodCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(t.clone()),
        ..PodCondition::default()
    };
    // The kubelet's order; PodScheduled is the scheduler's, added only if it did not set it.
    let mut conditions: Vec<PodCondition> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ]
    .into_iter()
    .map(condition)
    .collect();
    if !old_conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    {
        conditions.push(condition("PodScheduled"));
    }
    let spec = pod.spec.as_ref();
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    let init_containers = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let init_statuses: Vec<ContainerStatus> = init_containers
        .iter()
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                running(uid, c, &t)
            } else {
                completed(uid, c, &t)
            }
        })
        .collect();
    PodStatus {
        phase: Some("Running".to_owned()),
        host_ip: Some(host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: host_ip.to_string(),
        }]),
        pod_ip: Some(pod_ip.to_string()),
        pod_ips: Some(vec![PodIP {
            ip: pod_ip.to_string(),
        }]),
        start_time: Some(
            old.and_then(|s| s.start_time.clone())
                .unwrap_or_else(|| t.clone()),
        ),
        conditions: Some(conditions),
        container_statuses: Some(containers.iter().map(|c| running(uid, c, &t)).collect()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..PodStatus::default()
    }
}

/// The strategic merge patch of `pods/status` that starts `pod`, carrying the pod's UID so it
/// cannot apply to a pod of the same name created since (as the kubelet's status manager does).
pub fn pod_status_patch(pod: &Pod, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: Timestamp) -> Value {
    json!({
        "metadata": {"uid": pod.metadata.uid},
        "status": pod_status(pod, host_ip, pod_ip, now),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn config() -> SimConfig {
        SimConfig {
            nodes: 3,
            labels: [("zone".to_owned(), "a".to_owned())].into(),
            ..SimConfig::default()
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn node_names_round_trip_through_indexes() {
        let check = |name: &str, expected: Option<usize>| {
            assert_eq!(node_index("sim-node-", 100, name), expected, "{name}");
        };
        assert_eq!(node_name("sim-node-", 7), "sim-node-7");
        check("sim-node-0", Some(0));
        check("sim-node-7", Some(7));
        check("sim-node-99", Some(99));
        check("sim-node-100", None);
        check("sim-node-07", None);
        check("sim-node-", None);
        check("sim-node--1", None);
        check("sim-node-1a", None);
        check("other-1", None);
        check("", None);
    }

    #[test]
    fn a_node_looks_like_a_registered_kubelet() {
        let mut config = config();
        config.taints = vec![k8s_openapi::api::core::v1::Taint {
            key: "sim".to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Default::default()
        }];
        let node = serde_json::to_value(node(&config, 2, at(1_700_000_000))).unwrap();
        let expected = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "sim-node-2",
                "labels": {
                    "beta.kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": "sim-node-2",
                    "kubernetes.io/os": "linux",
                    "type": "capstan-sim",
                    "zone": "a",
                },
                "annotations": {
                    "capstan.io/sim": "true",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {"taints": [{"key": "sim", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.3"},
                    {"type": "Hostname", "address": "sim-node-2"},
                ],
                "allocatable": {
                    "cpu": "32", "ephemeral-storage": "100Gi", "hugepages-1Gi": "0",
                    "hugepages-2Mi": "0", "memory": "256Gi", "pods": "110",
                },
                "capacity": {
                    "cpu": "32", "ephemeral-storage": "100Gi", "hugepages-1Gi": "0",
                    "hugepages-2Mi": "0", "memory": "256Gi", "pods": "110",
                },
                "conditions": [
                    {"type": "MemoryPressure", "status": "False",
                     "reason": "KubeletHasSufficientMemory",
                     "message": "kubelet has sufficient memory available",
                     "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                     "lastTransitionTime": "2023-11-14T22:13:20Z"},
                    {"type": "DiskPressure", "status": "False",
                     "reason": "KubeletHasNoDiskPressure",
                     "message": "kubelet has no disk pressure",
                     "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                     "lastTransitionTime": "2023-11-14T22:13:20Z"},
                    {"type": "PIDPressure", "status": "False",
                     "reason": "KubeletHasSufficientPID",
                     "message": "kubelet has sufficient PID available",
                     "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                     "lastTransitionTime": "2023-11-14T22:13:20Z"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                     "lastTransitionTime": "2023-11-14T22:13:20Z"},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": node["status"]["nodeInfo"].clone(),
            },
        });
        assert_eq!(node, expected);
        let info = &node["status"]["nodeInfo"];
        assert_eq!(info["kubeletVersion"], "v1.33.0");
        assert_eq!(info["containerRuntimeVersion"], "capstan-sim://1");
        assert_eq!(info["operatingSystem"], "linux");
        assert_eq!(info["architecture"], "amd64");
        assert_eq!(info["osImage"], "Capstan simulated node");
        assert_eq!(info["machineID"].as_str().unwrap().len(), 32);
        assert_eq!(info["systemUUID"].as_str().unwrap().len(), 36);
        assert_eq!(info["bootID"].as_str().unwrap().len(), 36);
        // Stable per node, different between nodes.
        let again = serde_json::to_value(super::node(&config, 2, at(0))).unwrap();
        assert_eq!(again["status"]["nodeInfo"], *info);
        let other = serde_json::to_value(super::node(&config, 1, at(0))).unwrap();
        assert_ne!(other["status"]["nodeInfo"]["machineID"], info["machineID"]);
    }

    #[test]
    fn configured_labels_win_and_no_taints_means_none() {
        let mut config = config();
        config.labels.insert("type".to_owned(), "custom".to_owned());
        let node = node(&config, 0, at(0));
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["type"], "custom");
        assert_eq!(node.spec.unwrap().taints, None);
    }

    #[test]
    fn the_heartbeat_keeps_the_transition_time() {
        let patch = node_heartbeat_patch(at(1_000), at(10));
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 4);
        for c in conditions {
            assert_eq!(c["lastHeartbeatTime"], "1970-01-01T00:16:40Z");
            assert_eq!(c["lastTransitionTime"], "1970-01-01T00:00:10Z");
        }
        let node = Node {
            status: Some(node_status(&config(), 0, at(1_000), at(10))),
            ..Node::default()
        };
        assert_eq!(ready_since(&node), Some(at(10)));
        assert_eq!(ready_since(&Node::default()), None);
    }

    #[test]
    fn a_lease_is_owned_by_its_node() {
        let lease = serde_json::to_value(lease("sim-node-1", "uid-1", 40, at(5))).unwrap();
        assert_eq!(
            lease,
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": "sim-node-1",
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": "sim-node-1", "uid": "uid-1"}
                    ],
                },
                "spec": {
                    "holderIdentity": "sim-node-1",
                    "leaseDurationSeconds": 40,
                    "renewTime": "1970-01-01T00:00:05.000000Z",
                },
            })
        );
        assert_eq!(
            lease_renewal_patch("sim-node-1", 40, at(6)),
            json!({"spec": {
                "holderIdentity": "sim-node-1",
                "leaseDurationSeconds": 40,
                "renewTime": "1970-01-01T00:00:06.000000Z",
            }})
        );
        let takeover = lease_takeover_patch("sim-node-1", "uid-2", 40, at(7));
        assert_eq!(takeover["metadata"]["ownerReferences"][0]["uid"], "uid-2");
        assert_eq!(takeover["spec"]["holderIdentity"], "sim-node-1");
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_started_pod_runs_every_container() {
        let pod = pod(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {
                "nodeName": "sim-node-0",
                "initContainers": [
                    {"name": "setup", "image": "busybox"},
                    {"name": "proxy", "image": "envoy", "restartPolicy": "Always"},
                ],
                "containers": [
                    {"name": "app", "image": "nginx:1.27"},
                    {"name": "log", "image": "fluent"},
                ],
            },
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }));
        let host = Ipv4Addr::new(10, 0, 0, 1);
        let ip = Ipv4Addr::new(10, 100, 0, 1);
        let patch = pod_status_patch(&pod, host, ip, at(60));
        let t = "1970-01-01T00:01:00Z";
        let condition =
            |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": t});
        let running = |name: &str, image: &str| {
            json!({
                "name": name, "image": image, "imageID": "capstan-sim://image",
                "containerID": format!("capstan-sim://u1-{name}"),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": t}}, "lastState": {},
            })
        };
        assert_eq!(
            patch,
            json!({
                "metadata": {"uid": "u1"},
                "status": {
                    "phase": "Running",
                    "hostIP": "10.0.0.1",
                    "hostIPs": [{"ip": "10.0.0.1"}],
                    "podIP": "10.100.0.1",
                    "podIPs": [{"ip": "10.100.0.1"}],
                    "startTime": t,
                    "conditions": [
                        condition("PodReadyToStartContainers"),
                        condition("Initialized"),
                        condition("Ready"),
                        condition("ContainersReady"),
                        condition("PodScheduled"),
                    ],
                    "containerStatuses": [running("app", "nginx:1.27"), running("log", "fluent")],
                    "initContainerStatuses": [
                        {
                            "name": "setup", "image": "busybox", "imageID": "capstan-sim://image",
                            "containerID": "capstan-sim://u1-setup",
                            "ready": true, "started": false, "restartCount": 0,
                            "state": {"terminated": {
                                "containerID": "capstan-sim://u1-setup", "exitCode": 0,
                                "reason": "Completed", "startedAt": t, "finishedAt": t,
                            }},
                            "lastState": {},
                        },
                        running("proxy", "envoy"),
                    ],
                },
            })
        );
    }

    #[test]
    fn the_schedulers_condition_and_the_start_time_are_kept() {
        let pod = pod(json!({
            "metadata": {"name": "p", "uid": "u2"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {
                "phase": "Pending",
                "startTime": "1970-01-01T00:00:30Z",
                "conditions": [{"type": "PodScheduled", "status": "True",
                                "lastTransitionTime": "1970-01-01T00:00:20Z"}],
            },
        }));
        let status = pod_status(
            &pod,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 100, 0, 9),
            at(60),
        );
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady"
            ]
        );
        assert_eq!(status.start_time, Some(Time(at(30))));
        assert_eq!(status.init_container_statuses, None);
    }

    #[test]
    fn which_pods_need_starting() {
        let check = |status: Value, deleting: bool, expected: bool| {
            let mut value = json!({"metadata": {"name": "p"}, "status": status});
            if deleting {
                value["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            assert_eq!(needs_start(&pod(value.clone())), expected, "{value}");
        };
        check(json!({}), false, true);
        check(json!({"phase": "Pending"}), false, true);
        check(json!({"phase": "Running"}), false, true);
        check(
            json!({"phase": "Running", "podIP": "10.100.0.1"}),
            false,
            false,
        );
        check(json!({"phase": "Succeeded"}), false, false);
        check(json!({"phase": "Failed"}), false, false);
        check(json!({"phase": "Pending"}), true, false);
        assert!(is_terminal(&pod(json!({"status": {"phase": "Failed"}}))));
        assert!(host_network(&pod(
            json!({"spec": {"hostNetwork": true, "containers": []}})
        )));
    }
}
