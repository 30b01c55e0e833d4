//! The node's resource statistics, what the kubelet API's `/stats/summary`,
//! `/metrics/resource` and `/metrics/cadvisor` answer: read on request (there is no
//! housekeeping loop, so an idle node pays nothing between scrapes) from
//! - the runtime (CRI `ListPodSandbox`, `ListContainers` for the running pods and containers,
//!   `ListContainerStats` for their writable layers, `ImageFsInfo` for the image filesystem);
//! - the cgroups the runtime puts them in ([`cgroup`]: pod cgroups as
//!   [`crate::spec::cgroup_parent`] names them, a container's at `<pod cgroup>/<id>`, on cgroup
//!   v1 or v2) for CPU, memory and process counts;
//! - `/proc` ([`procfs`]) for the node's CPU, memory, interfaces and processes, and a pod
//!   sandbox's `/proc/<pid>/net/dev` for the pod's network;
//! - the filesystems (`statvfs`) of the kubelet's root directory, the image store, the log
//!   directory and the pods' volumes.
//!
//! `usageNanoCores` is a rate: the collector keeps each container's, pod's and the node's
//! previous CPU sample (as upstream's CRI stats provider keeps its cache) and reports the
//! usage between the two, so it is left out of the first answer after a container starts.
//! [`summary`] holds the Summary API's types, [`metrics`] the Prometheus families.
//!
//! Not measured: cgroups laid out by the systemd driver (`kubepods.slice/...`, an external
//! runtime configured so; the agent's own containerd uses cgroupfs), whose pods then have no
//! CPU or memory figures rather than wrong ones; persistent volumes' usage (`volume` lists the
//! pod-local kinds only); swap; accelerators; user-defined metrics.

pub mod cgroup;
pub mod metrics;
pub mod procfs;
pub mod summary;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_cri::v1 as cri;

use crate::runtime::cri::Cri;
use crate::spec::CONTAINER_NAME;
use cgroup::{CgroupStats, Hierarchy};
use procfs::{Interface, MemInfo};
use summary::Instant;

/// The cgroup holding every pod, upstream's `pods` system container.
const PODS_CGROUP: &str = "/kubepods";

/// The volume plugins whose directories under `<root-dir>/pods/<uid>/volumes` are measured;
/// `empty-dir` also counts towards the pod's ephemeral storage.
const MEASURED_VOLUMES: [&str; 5] = [
    "empty-dir",
    "configmap",
    "secret",
    "projected",
    "downward-api",
];

/// A CPU sample: when (ns since the epoch) and the usage then (ns).
pub(crate) type CpuSample = (i64, u64);

/// How much is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// CPU and memory only (`only_cpu_and_memory=true`, `/metrics/resource`).
    CpuAndMemory,
    /// Everything: network, filesystems, volumes, processes too.
    Full,
}

/// Collects the node's statistics on request; keeps only the previous CPU samples.
#[derive(Debug)]
pub struct Collector {
    cri: Cri,
    node_name: String,
    root_dir: PathBuf,
    log_root: PathBuf,
    hierarchy: Hierarchy,
    /// The pods bound to the node, for their containers' image names.
    known: crate::pod::manager::KnownPods,
    /// The previous CPU sample (time in ns, usage in ns) of the node, each pod and container.
    previous: Mutex<HashMap<String, CpuSample>>,
}

/// A filesystem's size from `statvfs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FsCapacity {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Everything one request reports, read at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub now: Instant,
    pub detail: Detail,
    pub node: NodeSample,
    pub pods: Vec<PodSample>,
    /// Why part of the figures is missing (the runtime did not answer).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct NodeSample {
    pub boot: Option<Instant>,
    pub cpu_ns: Option<u64>,
    pub cpu_previous: Option<CpuSample>,
    pub memory: Option<MemInfo>,
    pub faults: (Option<u64>, Option<u64>),
    pub cores: usize,
    pub interfaces: Vec<Interface>,
    pub fs: Option<FsCapacity>,
    pub image_fs: Option<(FsCapacity, Option<u64>, Option<u64>)>,
    /// The device the image filesystem is mounted from (cAdvisor's `device` label).
    pub image_fs_device: Option<String>,
    pub max_pid: Option<i64>,
    pub threads: Option<i64>,
    /// The `pods` system container: `/kubepods`, its creation and counters.
    pub pods_cgroup: Option<(Instant, CgroupStats, Option<CpuSample>)>,
}

#[derive(Debug, Clone)]
pub(crate) struct PodSample {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub start: Instant,
    pub cgroup: Option<String>,
    pub stats: Option<CgroupStats>,
    pub cpu_previous: Option<CpuSample>,
    pub interfaces: Vec<Interface>,
    pub containers: Vec<ContainerSample>,
    /// Name, plugin, bytes and inodes used, the filesystem.
    pub volumes: Vec<(String, String, u64, u64, FsCapacity)>,
}

#[derive(Debug, Clone)]
pub(crate) struct ContainerSample {
    pub id: String,
    pub name: String,
    pub image: String,
    pub start: Instant,
    pub cgroup: String,
    pub stats: Option<CgroupStats>,
    pub cpu_previous: Option<CpuSample>,
    /// The writable layer's bytes and inodes, as the runtime counts them.
    pub writable: Option<(Option<u64>, Option<u64>)>,
    /// The log files' bytes and inodes, and their filesystem.
    pub logs: Option<(u64, u64, FsCapacity)>,
}

impl Collector {
    /// A collector for the node `node_name` whose runtime is `cri`, keeping pods' volumes
    /// under `root_dir` and their logs under `log_root`; `known` are the pods bound to it.
    pub fn new(
        cri: Cri,
        node_name: &str,
        root_dir: &Path,
        log_root: &Path,
        known: crate::pod::manager::KnownPods,
    ) -> Collector {
        Collector {
            known,
            cri,
            node_name: node_name.to_owned(),
            root_dir: root_dir.to_path_buf(),
            log_root: log_root.to_path_buf(),
            hierarchy: Hierarchy::detect(),
            previous: Mutex::new(HashMap::new()),
        }
    }

    /// The processes in cgroup `path` and the cgroups under it.
    pub fn count_procs(&self, path: &str) -> Option<u64> {
        self.hierarchy.count_procs(path)
    }

    /// The Summary API's answer.
    pub async fn summary(&self, only_cpu_and_memory: bool) -> summary::Summary {
        let detail = if only_cpu_and_memory {
            Detail::CpuAndMemory
        } else {
            Detail::Full
        };
        build_summary(&self.collect(detail).await, &self.node_name)
    }

    /// Reads everything `detail` asks for.
    pub(crate) async fn collect(&self, detail: Detail) -> Snapshot {
        let mut runtime = self.cri.runtime.clone();
        let sandboxes = runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    state: Some(cri::PodSandboxStateValue {
                        state: cri::PodSandboxState::SandboxReady as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map(|r| r.into_inner().items);
        let containers = runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    state: Some(cri::ContainerStateValue {
                        state: cri::ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map(|r| r.into_inner().containers);
        let writable = match detail {
            Detail::Full => runtime
                .list_container_stats(cri::ListContainerStatsRequest { filter: None })
                .await
                .map(|r| r.into_inner().stats)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|s| {
                    let id = s.attributes.as_ref()?.id.clone();
                    let layer = s.writable_layer?;
                    Some((
                        id,
                        (
                            layer.used_bytes.map(|v| v.value),
                            layer.inodes_used.map(|v| v.value),
                        ),
                    ))
                })
                .collect(),
            Detail::CpuAndMemory => HashMap::new(),
        };
        let image_fs = match detail {
            Detail::Full => self
                .cri
                .images
                .clone()
                .image_fs_info(cri::ImageFsInfoRequest {})
                .await
                .ok()
                .and_then(|r| r.into_inner().image_filesystems.into_iter().next())
                .and_then(|usage| {
                    let mountpoint = usage.fs_id.as_ref()?.mountpoint.clone();
                    let capacity = statvfs(Path::new(&mountpoint))?;
                    Some((
                        capacity,
                        usage.used_bytes.map(|v| v.value),
                        usage.inodes_used.map(|v| v.value),
                        mountpoint,
                    ))
                }),
            Detail::CpuAndMemory => None,
        };
        let error = match (&sandboxes, &containers) {
            (Err(e), _) | (_, Err(e)) => Some(format!(
                "failed to list pod stats from the container runtime: {}",
                e.message()
            )),
            _ => None,
        };
        let now = Instant::now();
        let mut snapshot = Snapshot {
            node: self.node(detail, image_fs),
            pods: self.pods(
                detail,
                sandboxes.unwrap_or_default(),
                containers.unwrap_or_default(),
                &writable,
            ),
            now,
            detail,
            error,
        };
        self.remember(&mut snapshot);
        snapshot
    }

    fn node(
        &self,
        detail: Detail,
        image_fs: Option<(FsCapacity, Option<u64>, Option<u64>, String)>,
    ) -> NodeSample {
        let stat = read("/proc/stat").and_then(|t| procfs::parse_stat(&t));
        let mut node = NodeSample {
            boot: stat
                .as_ref()
                .and_then(|s| s.boot_time)
                .map(|s| Instant::from_nanos(s.saturating_mul(1_000_000_000))),
            cpu_ns: stat.map(|s| s.cpu_busy_ns),
            memory: read("/proc/meminfo").and_then(|t| procfs::parse_meminfo(&t)),
            faults: read("/proc/vmstat")
                .map(|t| procfs::parse_vmstat_faults(&t))
                .unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pods_cgroup: self.hierarchy.read(PODS_CGROUP).map(|stats| {
                let created = std::fs::metadata(self.hierarchy.dir("memory", PODS_CGROUP))
                    .map(|m| m.ctime().saturating_mul(1_000_000_000))
                    .unwrap_or_default();
                (Instant::from_nanos(created), stats, None)
            }),
            image_fs_device: image_fs.as_ref().and_then(|(_, _, _, mountpoint)| {
                let mountinfo = read("/proc/self/mountinfo")?;
                procfs::mount_source(&mountinfo, Path::new(mountpoint))
            }),
            image_fs: image_fs.map(|(fs, used, inodes, _)| (fs, used, inodes)),
            ..NodeSample::default()
        };
        if detail == Detail::Full {
            node.interfaces = read("/proc/net/dev")
                .map(|t| procfs::parse_net_dev(&t))
                .unwrap_or_default();
            node.fs = statvfs(&self.root_dir);
            node.max_pid = read("/proc/sys/kernel/pid_max").and_then(|t| t.trim().parse().ok());
            node.threads = read("/proc/loadavg").and_then(|t| procfs::parse_loadavg_threads(&t));
        }
        node
    }

    fn pods(
        &self,
        detail: Detail,
        sandboxes: Vec<cri::PodSandbox>,
        containers: Vec<cri::Container>,
        writable: &HashMap<String, (Option<u64>, Option<u64>)>,
    ) -> Vec<PodSample> {
        // The newest ready sandbox of each pod.
        let mut newest: HashMap<String, cri::PodSandbox> = HashMap::new();
        for sandbox in sandboxes {
            let Some(uid) = sandbox.metadata.as_ref().map(|m| m.uid.clone()) else {
                continue;
            };
            match newest.get(&uid) {
                Some(kept) if kept.created_at >= sandbox.created_at => {}
                _ => {
                    newest.insert(uid, sandbox);
                }
            }
        }
        // The newest running container of each name in each sandbox.
        let mut by_sandbox: HashMap<String, Vec<cri::Container>> = HashMap::new();
        for container in containers {
            let list = by_sandbox
                .entry(container.pod_sandbox_id.clone())
                .or_default();
            let name = container_name(&container);
            match list.iter_mut().find(|c| container_name(c) == name) {
                Some(kept) if kept.created_at >= container.created_at => {}
                Some(kept) => *kept = container,
                None => list.push(container),
            }
        }
        let log_fs = (detail == Detail::Full)
            .then(|| statvfs(&self.log_root))
            .flatten();
        // The image each container was asked for, by pod UID and container name (the runtime
        // only knows the image's ID).
        let images: HashMap<(String, String), String> = self
            .known
            .list()
            .iter()
            .flat_map(|pod| {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let status = pod.status.iter().flat_map(|s| {
                    s.container_statuses
                        .iter()
                        .flatten()
                        .chain(s.init_container_statuses.iter().flatten())
                });
                let reported: Vec<((String, String), String)> = status
                    .filter(|c| !c.image.is_empty())
                    .map(|c| ((uid.clone(), c.name.clone()), c.image.clone()))
                    .collect();
                let spec = pod.spec.iter().flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                });
                let asked: Vec<((String, String), String)> = spec
                    .filter_map(|c| Some(((uid.clone(), c.name.clone()), c.image.clone()?)))
                    .collect();
                // The status' (normalized) name wins over the spec's.
                asked.into_iter().chain(reported)
            })
            .collect();
        let mut pods: Vec<PodSample> = newest
            .into_values()
            .map(|sandbox| {
                let metadata = sandbox.metadata.clone().unwrap_or_default();
                let cgroup = cgroup::pod_cgroup(&self.hierarchy, &metadata.uid);
                let stats = cgroup.as_deref().and_then(|c| self.hierarchy.read(c));
                let mut containers: Vec<ContainerSample> = by_sandbox
                    .remove(&sandbox.id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| {
                        let name = container_name(&c);
                        let path = format!("{}/{}", cgroup.as_deref().unwrap_or(""), c.id);
                        let log_dir = self
                            .log_root
                            .join(format!(
                                "{}_{}_{}",
                                metadata.namespace, metadata.name, metadata.uid
                            ))
                            .join(&name);
                        ContainerSample {
                            stats: cgroup.as_ref().and_then(|_| self.hierarchy.read(&path)),
                            writable: writable.get(&c.id).copied(),
                            logs: log_fs.map(|fs| {
                                let (bytes, inodes) = disk_usage(&log_dir);
                                (bytes, inodes, fs)
                            }),
                            image: images
                                .get(&(metadata.uid.clone(), name.clone()))
                                .cloned()
                                .or_else(|| c.image.as_ref().map(|i| i.image.clone()))
                                .unwrap_or_else(|| c.image_ref.clone()),
                            start: Instant::from_nanos(c.created_at),
                            cgroup: path,
                            cpu_previous: None,
                            id: c.id,
                            name,
                        }
                    })
                    .collect();
                containers.sort_by(|a, b| a.name.cmp(&b.name));
                let interfaces = match (detail, &cgroup) {
                    (Detail::Full, Some(pod)) => self
                        .hierarchy
                        .procs(&format!("{pod}/{}", sandbox.id))
                        .first()
                        .and_then(|pid| read(&format!("/proc/{pid}/net/dev")))
                        .map(|t| procfs::parse_net_dev(&t))
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                let volumes = match detail {
                    Detail::Full => self.volumes(&metadata.uid),
                    Detail::CpuAndMemory => Vec::new(),
                };
                PodSample {
                    name: metadata.name,
                    namespace: metadata.namespace,
                    uid: metadata.uid,
                    start: Instant::from_nanos(sandbox.created_at),
                    cgroup,
                    stats,
                    cpu_previous: None,
                    interfaces,
                    containers,
                    volumes,
                }
            })
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// The measured volumes of the pod with `uid`: name, plugin, bytes, inodes, filesystem.
    fn volumes(&self, uid: &str) -> Vec<(String, String, u64, u64, FsCapacity)> {
        let base = self.root_dir.join("pods").join(uid).join("volumes");
        let mut volumes = Vec::new();
        for plugin in MEASURED_VOLUMES {
            let Ok(entries) = std::fs::read_dir(base.join(format!("kubernetes.io~{plugin}")))
            else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(fs) = statvfs(&path) else {
                    continue;
                };
                let (bytes, inodes) = disk_usage(&path);
                volumes.push((
                    entry.file_name().to_string_lossy().into_owned(),
                    plugin.to_owned(),
                    bytes,
                    inodes,
                    fs,
                ));
            }
        }
        volumes.sort_by(|a, b| a.0.cmp(&b.0));
        volumes
    }

    /// Gives every CPU figure its previous sample, keeps the new ones and forgets those of
    /// what is gone.
    fn remember(&self, snapshot: &mut Snapshot) {
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = snapshot.now.nanos;
        let mut seen = HashSet::new();
        let mut exchange = |key: String, usage: Option<u64>| -> Option<CpuSample> {
            let usage = usage?;
            seen.insert(key.clone());
            previous.insert(key, (now, usage))
        };
        snapshot.node.cpu_previous = exchange("node".to_owned(), snapshot.node.cpu_ns);
        if let Some((_, stats, before)) = &mut snapshot.node.pods_cgroup {
            *before = exchange("pods".to_owned(), stats.cpu_usage_ns);
        }
        for pod in &mut snapshot.pods {
            pod.cpu_previous = exchange(
                format!("pod/{}", pod.uid),
                pod.stats.as_ref().and_then(|s| s.cpu_usage_ns),
            );
            for container in &mut pod.containers {
                container.cpu_previous = exchange(
                    container.id.clone(),
                    container.stats.as_ref().and_then(|s| s.cpu_usage_ns),
                );
            }
        }
        previous.retain(|key, _| seen.contains(key));
    }
}

fn container_name(container: &cri::Container) -> String {
    container
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .or_else(|| container.labels.get(CONTAINER_NAME).cloned())
        .unwrap_or_default()
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The size of the filesystem holding `path`.
pub(crate) fn statvfs(path: &Path) -> Option<FsCapacity> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(FsCapacity {
        capacity: s.f_blocks.saturating_mul(s.f_frsize),
        available: s.f_bavail.saturating_mul(s.f_frsize),
        used: s
            .f_blocks
            .saturating_sub(s.f_bfree)
            .saturating_mul(s.f_frsize),
        inodes: s.f_files,
        inodes_free: s.f_ffree,
    })
}

/// The disk space (allocated blocks) and inodes of everything under `path`, symbolic links
/// not followed and other filesystems not entered, as `du` counts them.
pub(crate) fn disk_usage(path: &Path) -> (u64, u64) {
    let Ok(root) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    let device = root.dev();
    let (mut bytes, mut inodes) = (0_u64, 0_u64);
    let mut pending = vec![(path.to_path_buf(), root)];
    while let Some((path, metadata)) = pending.pop() {
        bytes = bytes.saturating_add(metadata.blocks().saturating_mul(512));
        inodes += 1;
        if !metadata.is_dir() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            if let Ok(child) = entry.metadata()
                && child.dev() == device
            {
                pending.push((entry.path(), child));
            }
        }
    }
    (bytes, inodes)
}

fn memory_stats(now: &Instant, stats: &CgroupStats) -> summary::MemoryStats {
    summary::MemoryStats {
        time: now.text.clone(),
        available_bytes: stats
            .memory_limit
            .zip(stats.working_set)
            .map(|(limit, ws)| limit.saturating_sub(ws)),
        usage_bytes: stats.memory_usage,
        working_set_bytes: stats.working_set,
        rss_bytes: stats.rss,
        page_faults: stats.page_faults,
        major_page_faults: stats.major_page_faults,
    }
}

fn fs_stats(
    now: &Instant,
    fs: &FsCapacity,
    used: Option<u64>,
    inodes_used: Option<u64>,
) -> summary::FsStats {
    summary::FsStats {
        time: now.text.clone(),
        available_bytes: Some(fs.available),
        capacity_bytes: Some(fs.capacity),
        used_bytes: used,
        inodes_free: Some(fs.inodes_free),
        inodes: Some(fs.inodes),
        inodes_used,
    }
}

fn network_stats(now: &Instant, interfaces: &[Interface]) -> Option<summary::NetworkStats> {
    let stats = |i: &Interface| summary::InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    };
    let default = interfaces
        .iter()
        .find(|i| i.name == "eth0")
        .or_else(|| interfaces.first())?;
    Some(summary::NetworkStats {
        time: now.text.clone(),
        default: stats(default),
        interfaces: interfaces.iter().map(stats).collect(),
    })
}

/// The Summary API's answer from a snapshot, as upstream's summary provider assembles it
/// (with `only_cpu_and_memory` when the snapshot holds only those).
pub(crate) fn build_summary(snapshot: &Snapshot, node_name: &str) -> summary::Summary {
    let now = &snapshot.now;
    let full = snapshot.detail == Detail::Full;
    let node = &snapshot.node;
    let system_containers = node
        .pods_cgroup
        .iter()
        .map(|(created, stats, before)| summary::ContainerStats {
            name: "pods".to_owned(),
            start_time: created.text.clone(),
            cpu: Some(summary::cpu(now, stats.cpu_usage_ns, *before)),
            memory: Some(memory_stats(now, stats)),
            ..Default::default()
        })
        .collect();
    let node_stats = summary::NodeStats {
        node_name: node_name.to_owned(),
        system_containers,
        start_time: node
            .boot
            .as_ref()
            .map(|b| b.text.clone())
            .unwrap_or_default(),
        cpu: node
            .cpu_ns
            .map(|usage| summary::cpu(now, Some(usage), node.cpu_previous)),
        memory: node.memory.as_ref().map(|m| summary::MemoryStats {
            time: now.text.clone(),
            available_bytes: Some(m.total.saturating_sub(m.working_set())),
            usage_bytes: Some(m.usage()),
            working_set_bytes: Some(m.working_set()),
            rss_bytes: Some(m.anon),
            page_faults: node.faults.0,
            major_page_faults: node.faults.1,
        }),
        network: full.then(|| network_stats(now, &node.interfaces)).flatten(),
        fs: node.fs.as_ref().map(|fs| {
            fs_stats(
                now,
                fs,
                Some(fs.used),
                Some(fs.inodes.saturating_sub(fs.inodes_free)),
            )
        }),
        runtime: node
            .image_fs
            .as_ref()
            .map(|(fs, used, inodes)| summary::RuntimeStats {
                image_fs: Some(fs_stats(now, fs, *used, *inodes)),
            }),
        rlimit: full.then(|| summary::RlimitStats {
            time: now.text.clone(),
            max_pid: node.max_pid,
            running_processes: node.threads,
        }),
    };
    let image_fs = node.image_fs.as_ref().map(|(fs, _, _)| *fs);
    let pods = snapshot
        .pods
        .iter()
        .map(|pod| {
            let containers: Vec<summary::ContainerStats> =
                pod.containers
                    .iter()
                    .map(|c| summary::ContainerStats {
                        name: c.name.clone(),
                        start_time: c.start.text.clone(),
                        cpu: c
                            .stats
                            .as_ref()
                            .map(|s| summary::cpu(now, s.cpu_usage_ns, c.cpu_previous)),
                        memory: c.stats.as_ref().map(|s| memory_stats(now, s)),
                        rootfs: c.writable.and_then(|(used, inodes)| {
                            Some(fs_stats(now, image_fs.as_ref()?, used, inodes))
                        }),
                        logs: c.logs.as_ref().map(|(bytes, inodes, fs)| {
                            fs_stats(now, fs, Some(*bytes), Some(*inodes))
                        }),
                    })
                    .collect();
            let volumes: Vec<summary::VolumeStats> = pod
                .volumes
                .iter()
                .map(|(name, _, bytes, inodes, fs)| summary::VolumeStats {
                    fs: fs_stats(now, fs, Some(*bytes), Some(*inodes)),
                    name: name.clone(),
                    pvc_ref: None,
                })
                .collect();
            let ephemeral_storage = full.then(|| {
                // The writable layers, the logs and the emptyDir volumes, on the node's
                // filesystem.
                let (mut bytes, mut inodes) = (0_u64, 0_u64);
                for c in &pod.containers {
                    if let Some((used, used_inodes)) = c.writable {
                        bytes += used.unwrap_or(0);
                        inodes += used_inodes.unwrap_or(0);
                    }
                    if let Some((used, used_inodes, _)) = c.logs {
                        bytes += used;
                        inodes += used_inodes;
                    }
                }
                for (_, plugin, used, used_inodes, _) in &pod.volumes {
                    if plugin == "empty-dir" {
                        bytes += used;
                        inodes += used_inodes;
                    }
                }
                match &node.fs {
                    Some(fs) => fs_stats(now, fs, Some(bytes), Some(inodes)),
                    None => summary::FsStats {
                        time: now.text.clone(),
                        used_bytes: Some(bytes),
                        inodes_used: Some(inodes),
                        ..Default::default()
                    },
                }
            });
            summary::PodStats {
                pod_ref: summary::PodReference {
                    name: pod.name.clone(),
                    namespace: pod.namespace.clone(),
                    uid: pod.uid.clone(),
                },
                start_time: pod.start.text.clone(),
                containers,
                cpu: pod
                    .stats
                    .as_ref()
                    .map(|s| summary::cpu(now, s.cpu_usage_ns, pod.cpu_previous)),
                memory: pod.stats.as_ref().map(|s| memory_stats(now, s)),
                network: full.then(|| network_stats(now, &pod.interfaces)).flatten(),
                volumes,
                ephemeral_storage,
                process_stats: full
                    .then(|| pod.stats.as_ref().and_then(|s| s.processes))
                    .flatten()
                    .map(|count| summary::ProcessStats {
                        process_count: Some(count),
                    }),
            }
        })
        .collect();
    summary::Summary {
        node: node_stats,
        pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(detail: Detail) -> Snapshot {
        let now = Instant::from_nanos(1_700_000_002_000_000_000);
        let stats = CgroupStats {
            cpu_usage_ns: Some(3_000_000_000),
            memory_usage: Some(10 << 20),
            working_set: Some(8 << 20),
            rss: Some(4 << 20),
            memory_limit: Some(64 << 20),
            processes: Some(2),
            ..Default::default()
        };
        let fs = FsCapacity {
            capacity: 100 << 30,
            available: 40 << 30,
            used: 60 << 30,
            inodes: 1000,
            inodes_free: 400,
        };
        Snapshot {
            now: now.clone(),
            detail,
            node: NodeSample {
                boot: Some(Instant::from_nanos(1_600_000_000_000_000_000)),
                cpu_ns: Some(50_000_000_000),
                cpu_previous: Some((1_700_000_000_000_000_000, 48_000_000_000)),
                memory: Some(MemInfo {
                    total: 4 << 30,
                    free: 1 << 30,
                    inactive_file: 1 << 30,
                    anon: 1 << 29,
                    cached: 1 << 30,
                }),
                fs: Some(fs),
                image_fs: Some((fs, Some(7 << 20), Some(30))),
                ..Default::default()
            },
            pods: vec![PodSample {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                start: Instant::from_nanos(1_699_999_000_000_000_000),
                cgroup: Some("/kubepods/podu1".into()),
                stats: Some(stats.clone()),
                cpu_previous: None,
                interfaces: vec![Interface {
                    name: "eth0".into(),
                    rx_bytes: 5,
                    ..Default::default()
                }],
                containers: vec![ContainerSample {
                    id: "c1".into(),
                    name: "app".into(),
                    image: "busybox".into(),
                    start: Instant::from_nanos(1_699_999_001_000_000_000),
                    cgroup: "/kubepods/podu1/c1".into(),
                    stats: Some(stats),
                    cpu_previous: Some((1_700_000_000_000_000_000, 2_000_000_000)),
                    writable: Some((Some(4096), Some(4))),
                    logs: Some((8192, 2, fs)),
                }],
                volumes: vec![
                    ("cache".into(), "empty-dir".into(), 1 << 20, 3, fs),
                    ("config".into(), "configmap".into(), 4096, 2, fs),
                ],
            }],
            error: None,
        }
    }

    #[test]
    fn the_summary_is_assembled_as_upstreams_provider_does() {
        let summary = build_summary(&snapshot(Detail::Full), "n1");
        let node = &summary.node;
        assert_eq!(node.node_name, "n1");
        // 2 s of CPU over 2 s: one core.
        assert_eq!(
            node.cpu.as_ref().unwrap().usage_nano_cores,
            Some(1_000_000_000)
        );
        let memory = node.memory.as_ref().unwrap();
        assert_eq!(memory.working_set_bytes, Some(2 << 30));
        assert_eq!(memory.available_bytes, Some(2 << 30));
        assert_eq!(
            node.runtime
                .as_ref()
                .unwrap()
                .image_fs
                .as_ref()
                .unwrap()
                .used_bytes,
            Some(7 << 20)
        );
        let pod = &summary.pods[0];
        let container = &pod.containers[0];
        assert_eq!(
            container.cpu.as_ref().unwrap().usage_nano_cores,
            Some(500_000_000)
        );
        assert_eq!(
            container.memory.as_ref().unwrap().available_bytes,
            Some(56 << 20)
        );
        assert_eq!(container.rootfs.as_ref().unwrap().used_bytes, Some(4096));
        assert_eq!(container.logs.as_ref().unwrap().used_bytes, Some(8192));
        assert_eq!(pod.network.as_ref().unwrap().default.rx_bytes, Some(5));
        // Writable layer, logs and the emptyDir volume; the configMap does not count.
        let ephemeral = pod.ephemeral_storage.as_ref().unwrap();
        assert_eq!(ephemeral.used_bytes, Some(4096 + 8192 + (1 << 20)));
        assert_eq!(ephemeral.inodes_used, Some(4 + 2 + 3));
        assert_eq!(pod.volumes.len(), 2);
        assert_eq!(pod.process_stats.as_ref().unwrap().process_count, Some(2));
    }

    #[test]
    fn only_cpu_and_memory_leaves_the_rest_out() {
        let summary = build_summary(&snapshot(Detail::CpuAndMemory), "n1");
        let json = serde_json::to_value(&summary).unwrap();
        let pod = &json["pods"][0];
        for absent in ["network", "ephemeral-storage", "process_stats"] {
            assert!(pod.get(absent).is_none(), "{absent} in {pod}");
        }
        assert!(pod["cpu"].is_object() && pod["memory"].is_object());
        assert!(json["node"].get("rlimit").is_none() && json["node"].get("network").is_none());
    }

    #[test]
    fn disk_usage_counts_blocks_and_inodes_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1_u8; 10_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"x").unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("root")).unwrap();
        let (bytes, inodes) = disk_usage(dir.path());
        assert_eq!(inodes, 5, "the directory, a, sub, sub/b and the link");
        assert!(bytes >= 10_000, "{bytes}");
        assert_eq!(disk_usage(&dir.path().join("missing")), (0, 0));
        assert!(statvfs(dir.path()).is_some_and(|fs| fs.capacity > 0));
    }
}
