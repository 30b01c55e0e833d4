//! Upstream's Summary API types (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`), with its JSON
//! field names: what `/stats/summary` answers. Times are `metav1.Time` strings (RFC 3339, whole
//! seconds, UTC); optional figures are left out when unknown, as upstream's `omitempty`
//! pointers are.

use serde::Serialize;

/// Top level: the node and its pods.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    /// The node's stats.
    pub node: NodeStats,
    /// Each pod's stats.
    pub pods: Vec<PodStats>,
}

/// The node's stats.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// Raw containers of system daemons (`pods`: the cgroup holding every pod).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// When collection of the node's stats started: the boot time.
    pub start_time: String,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem of the kubelet's root directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's image filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Process limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

/// The runtime's filesystems.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// Where images are stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// Process limits of the node.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RlimitStats {
    /// When read.
    pub time: String,
    /// `/proc/sys/kernel/pid_max`.
    #[serde(rename = "maxpid", skip_serializing_if = "Option::is_none")]
    pub max_pid: Option<i64>,
    /// Threads on the node.
    #[serde(rename = "curproc", skip_serializing_if = "Option::is_none")]
    pub running_processes: Option<i64>,
}

/// A pod's stats.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When its sandbox was created.
    pub start_time: String,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// The pod cgroup's CPU (all containers and the sandbox).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// The pod cgroup's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod network namespace's interfaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The pod's volumes.
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeStats>,
    /// Containers' writable layers and logs, and local ephemeral volumes.
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    /// Process count.
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

/// A pod's identity.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// Processes of a pod.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ProcessStats {
    /// How many.
    #[serde(rename = "process_count", skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// A container's stats.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in the pod (or the system container's).
    pub name: String,
    /// When it was created.
    pub start_time: String,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The writable layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// The log files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// CPU usage.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When read.
    pub time: String,
    /// Usage averaged since the previous sample, in billionths of a core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative usage, core-nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory usage.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When read.
    pub time: String,
    /// The limit less the working set, when there is a limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// All memory in use, page cache included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// The usage less the inactive file cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory.
    #[serde(rename = "rssBytes", skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Minor page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// One interface's counters.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// The interface.
    pub name: String,
    /// Bytes received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Transmit errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network usage: the default interface's counters inline, and every interface's.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NetworkStats {
    /// When read.
    pub time: String,
    /// The default interface (`eth0` when there is one).
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// All interfaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// A filesystem's usage.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When read.
    pub time: String,
    /// Space available to unprivileged users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// The filesystem's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Space used by what is measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// All inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used by what is measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// A volume's usage.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// The filesystem figures.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The claim it comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

/// A claim's identity.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PvcReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// `t` as `metav1.Time` encodes it: RFC 3339 in UTC, whole seconds.
pub fn time(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The CPU figures of `usage_ns` read at `now`, with the rate since `previous` (its time and
/// usage) when there was one and the counter did not go back.
pub fn cpu(now: &Instant, usage_ns: Option<u64>, previous: Option<(i64, u64)>) -> CpuStats {
    CpuStats {
        time: now.text.clone(),
        usage_nano_cores: usage_ns.zip(previous).and_then(|(usage, (then, before))| {
            let elapsed = now.nanos.checked_sub(then).filter(|e| *e > 0)?;
            let used = usage.checked_sub(before)?;
            Some((u128::from(used) * 1_000_000_000 / elapsed as u128) as u64)
        }),
        usage_core_nano_seconds: usage_ns,
    }
}

/// A moment: nanoseconds since the Unix epoch and its `metav1.Time` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    /// Nanoseconds since the Unix epoch.
    pub nanos: i64,
    /// As `metav1.Time`.
    pub text: String,
}

impl Instant {
    /// Now.
    pub fn now() -> Instant {
        Instant::at(crate::now())
    }

    /// `t`.
    pub fn at(t: k8s_openapi::jiff::Timestamp) -> Instant {
        Instant {
            nanos: t.as_nanosecond() as i64,
            text: time(t),
        }
    }

    /// The moment `nanos` nanoseconds after the epoch (the runtime's `created_at`).
    pub fn from_nanos(nanos: i64) -> Instant {
        let t = k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(nanos))
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        Instant::at(t)
    }

    /// Milliseconds since the epoch, as Prometheus timestamps count.
    pub fn millis(&self) -> i64 {
        self.nanos.div_euclid(1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_has_upstreams_json_shape() {
        let at = Instant::from_nanos(1_700_000_000_500_000_000);
        assert_eq!(at.text, "2023-11-14T22:13:20Z");
        assert_eq!(at.millis(), 1_700_000_000_500);
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: at.text.clone(),
                cpu: Some(cpu(&at, Some(5_000_000_000), None)),
                rlimit: Some(RlimitStats {
                    time: at.text.clone(),
                    max_pid: Some(4_194_304),
                    running_processes: Some(321),
                }),
                network: Some(NetworkStats {
                    time: at.text.clone(),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(10),
                        ..Default::default()
                    },
                    interfaces: vec![InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(10),
                        ..Default::default()
                    }],
                }),
                runtime: Some(RuntimeStats {
                    image_fs: Some(FsStats {
                        time: at.text.clone(),
                        used_bytes: Some(7),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                },
                start_time: at.text.clone(),
                containers: vec![ContainerStats {
                    name: "c".into(),
                    start_time: at.text.clone(),
                    memory: Some(MemoryStats {
                        time: at.text.clone(),
                        working_set_bytes: Some(3),
                        rss_bytes: Some(2),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                volumes: vec![VolumeStats {
                    fs: FsStats {
                        time: at.text.clone(),
                        used_bytes: Some(1),
                        ..Default::default()
                    },
                    name: "data".into(),
                    pvc_ref: None,
                }],
                ephemeral_storage: Some(FsStats {
                    time: at.text.clone(),
                    used_bytes: Some(9),
                    ..Default::default()
                }),
                process_stats: Some(ProcessStats {
                    process_count: Some(2),
                }),
                ..Default::default()
            }],
        };
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "node": {
                    "nodeName": "n1",
                    "startTime": "2023-11-14T22:13:20Z",
                    "cpu": {"time": "2023-11-14T22:13:20Z", "usageCoreNanoSeconds": 5_000_000_000_u64},
                    "network": {
                        "time": "2023-11-14T22:13:20Z", "name": "eth0", "rxBytes": 10,
                        "interfaces": [{"name": "eth0", "rxBytes": 10}]
                    },
                    "runtime": {"imageFs": {"time": "2023-11-14T22:13:20Z", "usedBytes": 7}},
                    "rlimit": {"time": "2023-11-14T22:13:20Z", "maxpid": 4_194_304, "curproc": 321}
                },
                "pods": [{
                    "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                    "startTime": "2023-11-14T22:13:20Z",
                    "containers": [{
                        "name": "c",
                        "startTime": "2023-11-14T22:13:20Z",
                        "memory": {"time": "2023-11-14T22:13:20Z", "workingSetBytes": 3, "rssBytes": 2}
                    }],
                    "volume": [{"time": "2023-11-14T22:13:20Z", "usedBytes": 1, "name": "data"}],
                    "ephemeral-storage": {"time": "2023-11-14T22:13:20Z", "usedBytes": 9},
                    "process_stats": {"process_count": 2}
                }]
            })
        );
    }

    #[test]
    fn usage_nano_cores_is_the_rate_between_two_samples() {
        let then = Instant::from_nanos(1_000_000_000_000);
        let now = Instant::from_nanos(1_002_000_000_000);
        // 1 s of CPU over 2 s: half a core.
        let stats = cpu(&now, Some(3_000_000_000), Some((then.nanos, 2_000_000_000)));
        assert_eq!(stats.usage_nano_cores, Some(500_000_000));
        assert_eq!(stats.usage_core_nano_seconds, Some(3_000_000_000));
        // No previous sample, a counter that went back, no time elapsed: no rate.
        assert_eq!(cpu(&now, Some(3), None).usage_nano_cores, None);
        assert_eq!(
            cpu(&now, Some(3), Some((then.nanos, 5))).usage_nano_cores,
            None
        );
        assert_eq!(
            cpu(&now, Some(9), Some((now.nanos, 5))).usage_nano_cores,
            None
        );
    }
}
