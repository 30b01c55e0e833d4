//! This machine as a Node: the object the agent registers (labels, capacity and allocatable
//! from the machine, addresses, system info), the conditions it posts, and the Lease in
//! `kube-node-lease` it renews every 10 s so the node lifecycle controller knows it is alive.

pub mod certificate;
pub mod join;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use capstan_client::events::EventType;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio::sync::watch;

use crate::now;
use crate::pod::events::{Events, reason};

/// The kubelet version this agent reports.
pub const KUBELET_VERSION: &str = "v1.33.0";
/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How long a lease lasts without renewal (the kubelet's 40 s).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// How often the lease is renewed.
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How often conditions are posted when nothing changed (the kubelet's
/// `nodeStatusReportFrequency`).
pub const STATUS_REPORT: Duration = Duration::from_secs(300);

/// How often the runtime's health and images are looked at: a change (the pod network coming
/// up at start, the runtime going away) is posted within a second, as upstream's kubelet
/// posts its first Ready quickly (`fastStatusUpdateOnce`) rather than at its next 10 s tick.
pub const OBSERVE: Duration = Duration::from_secs(1);
/// Memory kept back from pods: the kubelet's default hard eviction threshold
/// (`memory.available<100Mi`).
const EVICTION_MEMORY: u64 = 100 * 1024 * 1024;
/// Share of the node's filesystem kept back from pods (`nodefs.available<10%`).
const EVICTION_NODEFS_PERCENT: u64 = 10;

/// What the agent reads off the machine once at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// Total memory, in bytes.
    pub memory: u64,
    /// Size of the filesystem holding the agent's root directory, in bytes.
    pub filesystem: u64,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// The firmware's system UUID (the machine ID when unreadable).
    pub system_uuid: String,
    /// This boot's ID.
    pub boot_id: String,
    /// The running kernel's release.
    pub kernel: String,
    /// The operating system's pretty name (`/etc/os-release`).
    pub os_image: String,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}

impl Machine {
    /// Reads this machine; `root_dir` is the directory whose filesystem pods' data go to.
    pub fn read(root_dir: &Path) -> Machine {
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| mem_total(&text))
            .unwrap_or_default();
        let filesystem = rustix::fs::statvfs(root_dir)
            .map(|s| s.f_blocks.saturating_mul(s.f_frsize))
            .unwrap_or_default();
        let machine_id = read_trimmed("/etc/machine-id").unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory,
            filesystem,
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid")
                .unwrap_or_else(|| machine_id.clone()),
            machine_id,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|text| pretty_name(&text))
                .unwrap_or_else(|| "Linux".to_owned()),
        }
    }
}

/// This machine's host name, lower case (the default node name).
pub fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .unwrap_or_else(|| "localhost".to_owned())
        .to_lowercase()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `PRETTY_NAME` of `/etc/os-release`.
fn pretty_name(os_release: &str) -> Option<String> {
    let value = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))?;
    Some(value.trim_matches('"').to_owned())
}

/// The address other machines reach this one at: the source address of the default route
/// (found by connecting a UDP socket, which sends nothing), else loopback.
pub fn default_ip() -> IpAddr {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|socket| {
            socket.connect("192.0.2.1:9")?;
            socket.local_addr()
        })
        .map(|addr| addr.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// Kubernetes' name for this machine's architecture.
pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

/// How the node registers.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The node's name.
    pub name: String,
    /// Its InternalIP.
    pub ip: IpAddr,
    /// Labels beyond the kubelet's own.
    pub labels: BTreeMap<String, String>,
    /// The most pods it runs.
    pub max_pods: u32,
    /// The kubelet API's port.
    pub kubelet_port: u16,
}

fn quantity(text: String) -> Quantity {
    Quantity(text)
}

/// The node's capacity and allocatable (capacity less the eviction thresholds).
pub fn resources(
    machine: &Machine,
    max_pods: u32,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let fixed = |cpu: String, memory: String, storage: String| -> BTreeMap<String, Quantity> {
        [
            ("cpu", cpu),
            ("ephemeral-storage", storage),
            ("hugepages-1Gi", "0".to_owned()),
            ("hugepages-2Mi", "0".to_owned()),
            ("memory", memory),
            ("pods", max_pods.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), quantity(v)))
        .collect()
    };
    let capacity = fixed(
        machine.cpus.to_string(),
        format!("{}Ki", machine.memory / 1024),
        format!("{}Ki", machine.filesystem / 1024),
    );
    let allocatable = fixed(
        machine.cpus.to_string(),
        format!(
            "{}Ki",
            machine.memory.saturating_sub(EVICTION_MEMORY) / 1024
        ),
        (machine.filesystem - machine.filesystem * EVICTION_NODEFS_PERCENT / 100).to_string(),
    );
    (capacity, allocatable)
}

/// The Node the agent registers. Its `kubernetes.io/hostname` label and `Hostname` address are
/// the node's name, as k3s's agent runs the kubelet with `--hostname-override` set to it: nodes
/// sharing a machine stay distinct topology domains.
pub fn node(registration: &Registration, machine: &Machine, runtime: &str) -> Node {
    let mut labels: BTreeMap<String, String> = [
        ("beta.kubernetes.io/arch", arch()),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch()),
        ("kubernetes.io/hostname", registration.name.as_str()),
        ("kubernetes.io/os", "linux"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.extend(registration.labels.clone());
    let (capacity, allocatable) = resources(machine, registration.max_pods);
    Node {
        metadata: ObjectMeta {
            name: Some(registration.name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".to_owned(),
                    address: registration.ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".to_owned(),
                    address: registration.name.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(registration.kubelet_port),
                }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: arch().to_owned(),
                boot_id: machine.boot_id.clone(),
                container_runtime_version: runtime.to_owned(),
                kernel_version: machine.kernel.clone(),
                kube_proxy_version: String::new(),
                kubelet_version: KUBELET_VERSION.to_owned(),
                machine_id: machine.machine_id.clone(),
                operating_system: "linux".to_owned(),
                os_image: machine.os_image.clone(),
                system_uuid: machine.system_uuid.clone(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// The node's health as the agent sees it: `Ok` when the runtime and its network are ready,
/// else why not.
pub type Health = Result<(), String>;

/// What a heartbeat reports: the runtime's health and, when they could be listed, the images
/// the node holds (`status.images`).
#[derive(Debug, Clone)]
pub struct Observation {
    /// The runtime's health.
    pub health: Health,
    /// The node's images, largest first, at most [`MAX_IMAGES`]; `None` when unknown.
    pub images: Option<Vec<ContainerImage>>,
    /// The volumes the node's pods have mounted that upstream's kubelet reports
    /// (`status.volumesInUse`), sorted.
    pub volumes_in_use: Vec<String>,
}

/// The most images a node reports, as the kubelet's `--node-status-max-images` default.
pub const MAX_IMAGES: usize = 50;

/// The images of a CRI image list as `status.images` reports them: every name (tags, then
/// digests) of each image, largest first, at most [`MAX_IMAGES`], as upstream's kubelet.
pub fn node_images(images: Vec<k8s_cri::v1::Image>) -> Vec<ContainerImage> {
    let mut images: Vec<ContainerImage> = images
        .into_iter()
        .map(|image| {
            let names: Vec<String> = image
                .repo_tags
                .into_iter()
                .chain(image.repo_digests)
                .collect();
            ContainerImage {
                names: (!names.is_empty()).then_some(names),
                size_bytes: i64::try_from(image.size).ok(),
            }
        })
        .filter(|image| image.names.is_some())
        .collect();
    images.sort_by(|a, b| {
        b.size_bytes
            .cmp(&a.size_bytes)
            .then_with(|| a.names.cmp(&b.names))
    });
    images.truncate(MAX_IMAGES);
    images
}

/// The four conditions the kubelet posts; `since` gives each condition's last transition
/// (kept from the previous report when its status did not change).
pub fn conditions(health: &Health, previous: &[NodeCondition], at: Time) -> Vec<NodeCondition> {
    let (ready, reason, message) = match health {
        Ok(()) => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_owned(),
        ),
        Err(why) => ("False", "KubeletNotReady", why.clone()),
    };
    [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available".to_owned(),
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure".to_owned(),
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available".to_owned(),
        ),
        ("Ready", ready, reason, message),
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| {
        let transition = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| at.clone());
        NodeCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message),
            last_heartbeat_time: Some(at.clone()),
            last_transition_time: Some(transition),
        }
    })
    .collect()
}

/// Whether `next` says anything but its heartbeats differently from `previous` (conditions
/// matched by type, in any order; types only `previous` has are not looked at).
fn changed(previous: &[NodeCondition], next: &[NodeCondition]) -> bool {
    let key = |c: &NodeCondition| (c.status.clone(), c.reason.clone(), c.message.clone());
    next.iter().any(|c| {
        previous
            .iter()
            .find(|p| p.type_ == c.type_)
            .is_none_or(|p| key(p) != key(c))
    })
}

/// The conditions a report builds on: those last `posted`, unless the Node as the API holds it
/// (`stored`) says otherwise, when someone else rewrote them (the node lifecycle controller's
/// Unknown while the kubelet could not be heard); then those, as upstream's kubelet builds on
/// the Node it fetches, so that the report follows at once, with new transition times.
fn baseline<'a>(
    posted: &'a [NodeCondition],
    stored: Option<&'a [NodeCondition]>,
) -> &'a [NodeCondition] {
    match stored {
        Some(stored) if !posted.is_empty() && changed(stored, posted) => stored,
        _ => posted,
    }
}

/// Registers the node: creates it, or, when a node of that name exists (a restart, or a
/// re-join), brings its labels, addresses, capacity and system info up to date. Returns the
/// node as stored.
pub async fn register(client: &kube::Client, node: &Node) -> Result<Node, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    match nodes.create(&PostParams::default(), node).await {
        Ok(created) => {
            // The status given at creation is dropped by the API (status is a subresource).
            patch_status(&nodes, &name, node.status.clone().unwrap_or_default()).await?;
            Ok(created)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await?;
            patch_status(&nodes, &name, node.status.clone().unwrap_or_default()).await
        }
        Err(e) => Err(e),
    }
}

async fn patch_status(
    nodes: &Api<Node>,
    name: &str,
    status: NodeStatus,
) -> Result<Node, kube::Error> {
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": status})),
        )
        .await
}

/// Keeps the node alive: renews its Lease every 10 s, and posts its conditions and images when
/// they change (looked at every second with `observe`) or every 5 minutes; the node's readiness
/// changes are also written as events. With each renewal the conditions are also compared with
/// the Node as `stored` (the watch of [`follow`]) last showed it: conditions rewritten by
/// someone else are posted over at once ([`baseline`]). Runs until dropped.
pub async fn heartbeat<F, Fut>(
    client: kube::Client,
    node: Node,
    stored: watch::Receiver<Option<Arc<Node>>>,
    events: Events,
    observe: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Observation>,
{
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut posted: Vec<NodeCondition> = Vec::new();
    let mut posted_images: Option<Vec<ContainerImage>> = None;
    let mut posted_volumes: Option<Vec<String>> = None;
    let mut last_post = tokio::time::Instant::now();
    let mut last_lease: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(OBSERVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = Time(now());
        let observation = observe().await;
        let renew = last_lease.is_none_or(|at| at.elapsed() >= LEASE_RENEW);
        let api_conditions = renew
            .then(|| {
                let node = stored.borrow();
                node.as_ref()?.status.as_ref()?.conditions.clone()
            })
            .flatten();
        let previous = baseline(&posted, api_conditions.as_deref());
        let next = conditions(&observation.health, previous, at);
        let images_changed = observation
            .images
            .as_ref()
            .is_some_and(|images| posted_images.as_ref() != Some(images));
        let volumes_changed = posted_volumes.as_ref() != Some(&observation.volumes_in_use);
        if posted.is_empty()
            || changed(previous, &next)
            || images_changed
            || volumes_changed
            || last_post.elapsed() >= STATUS_REPORT
        {
            let status = NodeStatus {
                conditions: Some(next.clone()),
                images: observation.images.clone(),
                volumes_in_use: Some(observation.volumes_in_use.clone()),
                ..NodeStatus::default()
            };
            match patch_status(&nodes, &name, status).await {
                Ok(stored) => {
                    let was_ready = ready_status(previous);
                    let ready = ready_status(&next);
                    if ready != was_ready && (was_ready.is_some() || ready == Some(true)) {
                        let (reason, status) = match ready {
                            Some(true) => (reason::NODE_READY, "NodeReady"),
                            _ => (reason::NODE_NOT_READY, "NodeNotReady"),
                        };
                        events.node(
                            EventType::Normal,
                            reason,
                            format!("Node {name} status is now: {status}"),
                        );
                    }
                    posted = next;
                    if observation.images.is_some() {
                        posted_images = observation.images;
                    }
                    posted_volumes = Some(observation.volumes_in_use);
                    last_post = tokio::time::Instant::now();
                    if stored.metadata.uid.is_none() {
                        tracing::warn!(node = %name, "the node has no UID");
                    }
                }
                Err(e) => tracing::warn!(node = %name, error = %e, "cannot post the node's status"),
            }
        }
        if renew {
            match renew_lease(&nodes, &leases, &name).await {
                Ok(()) => last_lease = Some(tokio::time::Instant::now()),
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "cannot renew the node's lease")
                }
            }
        }
    }
}

/// Whether `conditions` say the node is ready (none when they do not say).
fn ready_status(conditions: &[NodeCondition]) -> Option<bool> {
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// Renews (or creates) the node's Lease, owned by the Node so it goes with it.
async fn renew_lease(
    nodes: &Api<Node>,
    leases: &Api<Lease>,
    name: &str,
) -> Result<(), kube::Error> {
    let renew = MicroTime(now());
    match leases.get_opt(name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(renew);
            spec.holder_identity = Some(name.to_owned());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            leases.replace(name, &PostParams::default(), &lease).await?;
        }
        None => {
            let node = nodes.get(name).await?;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(LEASE_NAMESPACE.to_owned()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".to_owned(),
                        kind: "Node".to_owned(),
                        name: name.to_owned(),
                        uid: node.metadata.uid.unwrap_or_default(),
                        ..OwnerReference::default()
                    }]),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.to_owned()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(renew),
                    ..LeaseSpec::default()
                }),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

/// Follows this node's Node object with a watch (retrying until it can) and publishes each
/// version on `sender`: pod admission reads its labels, taints and allocatable resources, the
/// pod network its `podCIDR`. Runs until dropped.
pub async fn follow(client: kube::Client, name: String, sender: watch::Sender<Option<Arc<Node>>>) {
    let api: Api<Node> = Api::all(client);
    let config = capstan_client::watcher_config().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(node) => {
                sender.send_replace(Some(Arc::new(node)));
            }
            Err(e) => tracing::warn!(error = %e, "watching this node failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_images_are_the_largest_fifty_with_every_name() {
        let image = |tag: &str, size: u64| k8s_cri::v1::Image {
            repo_tags: vec![tag.to_owned()],
            repo_digests: vec![format!("{tag}@sha256:00")],
            size,
            ..Default::default()
        };
        let mut list: Vec<_> = (0..60).map(|i| image(&format!("i{i}"), 100 + i)).collect();
        list.push(k8s_cri::v1::Image {
            size: 1_000_000,
            ..Default::default()
        });
        let images = super::node_images(list);
        assert_eq!(images.len(), super::MAX_IMAGES);
        assert_eq!(
            images[0].names.as_deref().unwrap(),
            ["i59".to_owned(), "i59@sha256:00".to_owned()]
        );
        assert_eq!(images[0].size_bytes, Some(159));
        assert!(
            images
                .windows(2)
                .all(|w| w[0].size_bytes >= w[1].size_bytes)
        );
    }

    use super::*;

    fn machine() -> Machine {
        Machine {
            cpus: 2,
            memory: 8 * 1024 * 1024 * 1024,
            filesystem: 100 * 1024 * 1024 * 1024,
            machine_id: "m".to_owned(),
            system_uuid: "u".to_owned(),
            boot_id: "b".to_owned(),
            kernel: "6.1.0".to_owned(),
            os_image: "Debian GNU/Linux 12 (bookworm)".to_owned(),
        }
    }

    #[test]
    fn allocatable_keeps_back_the_eviction_thresholds() {
        let (capacity, allocatable) = resources(&machine(), 110);
        assert_eq!(capacity["memory"].0, "8388608Ki");
        assert_eq!(allocatable["memory"].0, "8286208Ki");
        assert_eq!(capacity["ephemeral-storage"].0, "104857600Ki");
        assert_eq!(allocatable["ephemeral-storage"].0, "96636764160");
        assert_eq!(allocatable["pods"].0, "110");
        assert_eq!(allocatable["cpu"].0, "2");
    }

    #[test]
    fn the_machine_is_read_from_proc() {
        assert_eq!(
            mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
            Some(16384 * 1024)
        );
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        let here = Machine::read(Path::new("/"));
        assert!(here.cpus >= 1 && here.memory > 0 && here.filesystem > 0);
    }

    #[test]
    fn transitions_are_kept_while_a_condition_holds() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap_or_default());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap_or_default());
        let first = conditions(&Err("runtime down".to_owned()), &[], t0.clone());
        let ready = first.iter().find(|c| c.type_ == "Ready");
        assert_eq!(ready.map(|c| c.status.as_str()), Some("False"));
        let second = conditions(&Err("runtime down".to_owned()), &first, t1.clone());
        assert!(!changed(&first, &second));
        assert_eq!(second[3].last_transition_time, Some(t0.clone()));
        assert_eq!(second[3].last_heartbeat_time, Some(t1.clone()));
        let third = conditions(&Ok(()), &second, t1.clone());
        assert!(changed(&second, &third));
        assert_eq!(third[3].status, "True");
        assert_eq!(third[3].last_transition_time, Some(t1));
        assert_eq!(third[0].last_transition_time, Some(t0));
    }

    #[test]
    fn conditions_rewritten_by_the_node_controller_are_reported_over() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap_or_default());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap_or_default());
        let t2 = Time(k8s_openapi::jiff::Timestamp::from_second(3_000).unwrap_or_default());
        let posted = conditions(&Ok(()), &[], t0.clone());
        // The API's copy, as the node lifecycle controller leaves it after a silence: every
        // condition Unknown, in its own order, beside a condition the kubelet does not post.
        let mut stored: Vec<NodeCondition> = posted
            .iter()
            .rev()
            .map(|c| NodeCondition {
                status: "Unknown".to_owned(),
                reason: Some("NodeStatusUnknown".to_owned()),
                message: Some("Kubelet stopped posting node status.".to_owned()),
                last_transition_time: Some(t1.clone()),
                ..c.clone()
            })
            .collect();
        stored.push(NodeCondition {
            type_: "NetworkUnavailable".to_owned(),
            status: "False".to_owned(),
            ..NodeCondition::default()
        });
        let previous = baseline(&posted, Some(&stored));
        assert_eq!(previous, stored.as_slice(), "the API's copy is built on");
        let next = conditions(&Ok(()), previous, t2.clone());
        assert!(changed(previous, &next), "and differs: a report follows");
        let ready = next.iter().find(|c| c.type_ == "Ready");
        assert_eq!(ready.map(|c| c.status.as_str()), Some("True"));
        assert_eq!(
            ready.and_then(|c| c.last_transition_time.clone()),
            Some(t2.clone()),
            "Unknown to True is a transition"
        );
        assert_eq!(
            ready_status(previous),
            Some(false),
            "a NodeReady event follows"
        );

        // The API's copy as posted, but for its heartbeats, order and the extra condition:
        // what was posted is built on, and nothing is reported before it is due.
        let mut same: Vec<NodeCondition> = conditions(&Ok(()), &posted, t1.clone())
            .into_iter()
            .rev()
            .collect();
        same.push(stored[stored.len() - 1].clone());
        assert_eq!(baseline(&posted, Some(&same)), posted.as_slice());
        assert!(!changed(&posted, &conditions(&Ok(()), &posted, t2)));
        // Nothing posted yet, or no copy of the API's: what was posted.
        assert!(baseline(&[], Some(&stored)).is_empty());
        assert_eq!(baseline(&posted, None), posted.as_slice());
    }

    #[test]
    fn the_node_carries_the_well_known_labels() {
        let registration = Registration {
            name: "node-a".to_owned(),
            ip: IpAddr::from([10, 0, 0, 5]),
            labels: BTreeMap::from([("zone".to_owned(), "a".to_owned())]),
            max_pods: 110,
            kubelet_port: 10250,
        };
        let node = node(&registration, &machine(), "containerd://1.6.20");
        let labels = node.metadata.labels.unwrap_or_default();
        // The node's name, as k3s passes it to the kubelet as --hostname-override: nodes sharing
        // a machine are still distinct topology domains.
        assert_eq!(labels["kubernetes.io/hostname"], "node-a");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["zone"], "a");
        let status = node.status.unwrap_or_default();
        let info = status.node_info.unwrap_or_default();
        assert_eq!(info.container_runtime_version, "containerd://1.6.20");
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        let addresses = status.addresses.unwrap_or_default();
        assert_eq!(addresses[0].address, "10.0.0.5");
        assert_eq!(
            (addresses[1].type_.as_str(), addresses[1].address.as_str()),
            ("Hostname", "node-a")
        );
    }
}
