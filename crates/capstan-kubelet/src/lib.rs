//! The node agent (kubelet): it registers this machine as a Node, keeps its Lease and status
//! current, and runs the pods bound to it as real containers on containerd, spoken to through
//! CRI v1 over gRPC.
//!
//! Like the other components it reaches the cluster only through the Kubernetes API (a
//! [`kube::Client`]); it never touches storage.
//!
//! The agent in layers, each a folder:
//! - [`runtime`]: the container runtime and what it needs: [`runtime::containerd`] starts and
//!   supervises a containerd of the agent's own unless a runtime endpoint is given,
//!   [`runtime::cri`] connects the CRI runtime and image services, [`runtime::images`] builds
//!   OCI image archives without a registry and imports them, [`runtime::pull`] and
//!   [`runtime::registries`] pull images (k3s's `registries.yaml`), [`runtime::cni`] writes the
//!   CNI configuration, [`runtime::logs`] reads containers' CRI log files;
//! - [`spec`]: a pod spec turned into CRI sandbox and container configs ([`spec::env`]:
//!   environment variables, [`spec::dns`]: `resolv.conf`);
//! - [`volumes`]: pods' volumes (emptyDir, hostPath, configMap, secret, projected,
//!   downwardAPI, gitRepo, persistentVolumeClaim), with [`volumes::atomic_writer`] writing
//!   projected files, [`volumes::tokens`] service account tokens, [`volumes::git_repo`] clones,
//!   [`volumes::claims`] claims;
//! - [`pod`]: the pods bound to the node: [`pod::manager`] follows them and keeps one
//!   [`pod::worker`] per pod, [`pod::admission`] admits them, [`pod::probes`] runs probes and
//!   lifecycle hooks, [`pod::status`] computes and posts their status, [`pod::inspect`] reads
//!   what runs, [`pod::events`] writes the kubelet's events;
//! - [`node`]: the Node's registration, status and Lease, and [`node::join`] (joining a cluster
//!   from another machine with a CA-pinning token);
//! - [`stats`]: the node's resource statistics (cgroups, `/proc`, CRI stats) behind
//!   `/stats/summary` and the `/metrics/resource` and `/metrics/cadvisor` families;
//! - [`server`]: the kubelet API (logs, exec, attach, port-forward, `/pods`, `/stats/summary`,
//!   `/metrics`, `/metrics/resource`, `/metrics/cadvisor`) for the API server.

pub mod node;
pub mod observed;
pub mod pod;
pub mod runtime;
pub mod server;
pub mod spec;
pub mod stats;
pub mod volumes;

pub use node::join;
pub use runtime::{containerd, cri, images};

use pod::{events, manager as pods, worker};
use runtime::{cni, registries};

/// FNV-1a over `bytes`, continuing from `hash` (start with [`FNV_OFFSET`]): stable hashes for
/// container specs and runtime fingerprints.
pub(crate) fn fnv1a(hash: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(hash, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a's starting value.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The current time, as the API's timestamps take it.
pub(crate) fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node's name.
    pub node_name: String,
    /// The agent's data directory (`<data-dir>/agent`): its containerd, CNI configuration,
    /// preloaded images (`images/`), pod logs.
    pub agent_dir: PathBuf,
    /// The kubelet root directory (pods' volumes), `<agent-dir>/kubelet` by default.
    pub root_dir: PathBuf,
    /// A CRI endpoint to use instead of starting containerd.
    pub runtime_endpoint: Option<PathBuf>,
    /// Where the CNI plugins are.
    pub cni_bin_dir: PathBuf,
    /// The pod network bridge.
    pub cni_bridge: String,
    /// The node's address (default: the default route's source address).
    pub node_ip: Option<IpAddr>,
    /// Extra node labels.
    pub labels: BTreeMap<String, String>,
    /// The most pods the node runs.
    pub max_pods: u32,
    /// The kubelet API's port (0 picks a free one, which the node then reports).
    pub kubelet_port: u16,
    /// The cluster's DNS domain (`--cluster-domain`): pods with a subdomain are named
    /// `<hostname>.<subdomain>.<namespace>.svc.<domain>` in their `/etc/hosts`.
    pub cluster_domain: String,
    /// The cluster DNS servers pods with `dnsPolicy: ClusterFirst` use (`--cluster-dns`);
    /// when empty, the cluster IP of the `kube-system/kube-dns` Service if there is one.
    pub cluster_dns: Vec<IpAddr>,
    /// The host's resolver configuration, which `dnsPolicy: Default` pods get and the others'
    /// search lists extend (`--resolv-conf`).
    pub resolv_conf: PathBuf,
    /// The kubelet API's certificate and client CA; without them the API is not served (no
    /// logs, exec, attach or port-forward through the API server).
    pub tls: Option<server::ServingTls>,
    /// The node's certificates to keep renewed through CertificateSigningRequests
    /// ([`node::certificate`]); none: they are not renewed.
    pub rotations: Vec<Arc<node::certificate::Rotation>>,
    /// Whether the kubelet API serves the process's profiles at `/debug/pprof/` (upstream's
    /// `enableProfilingHandler`, on by default).
    pub profiling: bool,
}

impl Config {
    /// The defaults for a node called `node_name` keeping its state under `agent_dir`.
    pub fn new(node_name: &str, agent_dir: PathBuf) -> Config {
        Config {
            node_name: node_name.to_owned(),
            root_dir: agent_dir.join("kubelet"),
            agent_dir,
            runtime_endpoint: None,
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
            cni_bridge: "cni0".to_owned(),
            node_ip: None,
            labels: BTreeMap::new(),
            max_pods: 110,
            kubelet_port: 10250,
            cluster_domain: "cluster.local".to_owned(),
            cluster_dns: Vec::new(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            tls: None,
            rotations: Vec::new(),
            profiling: true,
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its containerd did not start.
    #[error(transparent)]
    Containerd(#[from] containerd::ContainerdError),
    /// The runtime could not be reached.
    #[error(transparent)]
    Cri(#[from] cri::CriError),
    /// The node could not be registered.
    #[error("cannot register node {node}")]
    Register {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The registries file is not usable.
    #[error(transparent)]
    Registries(#[from] registries::RegistriesError),
    /// The kubelet API's port could not be opened.
    #[error("cannot listen on the kubelet port {port}")]
    Listen {
        /// The port.
        port: u16,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory could not be created.
    #[error("cannot create {path}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The sandbox image as the runtime names it.
fn sandbox_image() -> String {
    images::PAUSE_IMAGE.to_owned()
}

/// Runs the node agent until `shutdown` resolves: starts (or connects to) the runtime,
/// provisions the sandbox image and the preloaded images, registers the node, sets the pod
/// network up once the node has a pod range, and runs the node's pods.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    let log_root = config.agent_dir.join("logs").join("pods");
    let cni_conf_dir = config.agent_dir.join("etc").join("cni").join("net.d");
    for dir in [&config.agent_dir, &config.root_dir, &log_root] {
        std::fs::create_dir_all(dir).map_err(|source| AgentError::Io {
            path: dir.clone(),
            source,
        })?;
    }
    let certs_dir = config
        .agent_dir
        .join("etc")
        .join("containerd")
        .join("certs.d");
    let mirrored = registries::apply(&config.agent_dir, &certs_dir)?;
    if !mirrored.is_empty() {
        tracing::info!(registries = ?mirrored, "registry mirrors configured");
    }
    let own_runtime = match &config.runtime_endpoint {
        Some(_) => None,
        None => {
            let layout = containerd::Layout::new(&config.agent_dir);
            let settings = containerd::RuntimeSettings {
                sandbox_image: sandbox_image(),
                cni_bin_dir: config.cni_bin_dir.clone(),
                cni_conf_dir: cni_conf_dir.clone(),
                registry_config_dir: certs_dir.clone(),
            };
            Some(containerd::Containerd::start(&layout, &settings).await?)
        }
    };
    // One of the two is set: the agent's own containerd when no endpoint was given.
    let socket = own_runtime
        .as_ref()
        .map(|own| own.socket().to_path_buf())
        .or_else(|| config.runtime_endpoint.clone())
        .unwrap_or_default();
    let cri = cri::Cri::connect(&socket).await?;
    let (runtime_name, runtime_version) = cri.version().await?;
    tracing::info!(runtime = %runtime_name, version = %runtime_version, socket = %socket.display(), "container runtime ready");
    let address = cri::strip_scheme(&socket);
    match images::import(&address, &images::pause_image()).await {
        Ok(names) => tracing::info!(images = ?names, "sandbox image provisioned"),
        Err(e) => {
            tracing::error!(error = %e, "cannot provision the sandbox image; pods cannot start")
        }
    }
    match images::import_dir(&address, &config.agent_dir.join("images")).await {
        Ok(names) if !names.is_empty() => {
            tracing::info!(images = ?names, "preloaded images imported")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot import the preloaded images"),
    }
    // The port is opened before the node is registered, which reports it.
    let listener =
        match &config.tls {
            Some(_) => Some(server::bind(config.kubelet_port).await.map_err(|source| {
                AgentError::Listen {
                    port: config.kubelet_port,
                    source,
                }
            })?),
            None => None,
        };
    let kubelet_port = listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map_or(config.kubelet_port, |a| a.port());
    let machine = node::Machine::read(&config.root_dir);
    let ip = config.node_ip.unwrap_or_else(node::default_ip);
    let registration = node::Registration {
        name: config.node_name.clone(),
        ip,
        labels: config.labels.clone(),
        max_pods: config.max_pods,
        kubelet_port,
    };
    let node_object = node::node(
        &registration,
        &machine,
        &format!("{runtime_name}://{runtime_version}"),
    );
    let allocatable = node::resources(&machine, config.max_pods)
        .1
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    node::register(&client, &node_object)
        .await
        .map_err(|source| AgentError::Register {
            node: config.node_name.clone(),
            source,
        })?;
    tracing::info!(node = %config.node_name, %ip, "node registered");
    let events = events::Events::start(client.clone(), &config.node_name);
    events.node(
        capstan_client::events::EventType::Normal,
        events::reason::STARTING,
        "Starting kubelet.".to_owned(),
    );
    let network = cni::Network {
        bridge: config.cni_bridge.clone(),
        ipam_dir: config.agent_dir.join("cni").join("networks"),
        mtu: None,
    };
    let (node_sender, node_updates) = tokio::sync::watch::channel(None);
    let follow_node = node::follow(client.clone(), config.node_name.clone(), node_sender);
    let pod_network = pod_network(cri.clone(), node_updates.clone(), network, cni_conf_dir);
    let health_cri = cri.clone();
    // Health is looked at every second; the image list, longer to produce, every tenth time.
    let observations = std::sync::atomic::AtomicU32::new(0);
    let volumes_in_use = volumes::InUse::default();
    let observed_volumes = volumes_in_use.clone();
    let observe = move || {
        let cri = health_cri.clone();
        let volumes_in_use = observed_volumes.list();
        let list_images = observations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(10);
        async move {
            let health = match cri.network_ready().await {
                Ok(ready) => ready,
                Err(e) => Err(format!("container runtime is down: {e}")),
            };
            let images = match list_images {
                true => cri
                    .images
                    .clone()
                    .list_images(k8s_cri::v1::ListImagesRequest { filter: None })
                    .await
                    .ok()
                    .map(|list| node::node_images(list.into_inner().images)),
                false => None,
            };
            node::Observation {
                health,
                images,
                volumes_in_use,
            }
        }
    };
    // Conditions are also compared with the Node as the watch shows it.
    let heartbeat = node::heartbeat(
        client.clone(),
        node_object,
        node_updates.clone(),
        events.clone(),
        observe,
    );
    let known_pods = pods::KnownPods::default();
    let pod_starts = Arc::new(observed::Histogram::new(&stats::metrics::POD_START_BUCKETS));
    let api_state = Arc::new(server::State {
        client: client.clone(),
        cri: cri.clone(),
        node_name: config.node_name.clone(),
        pods: known_pods.clone(),
        log_dir: PathBuf::from(server::NODE_LOG_DIR),
        profiling: config.profiling,
        pod_starts: pod_starts.clone(),
        machine: stats::metrics::MachineIds {
            boot_id: machine.boot_id.clone(),
            machine_id: machine.machine_id.clone(),
            system_uuid: machine.system_uuid.clone(),
        },
        stats: stats::Collector::new(
            cri.clone(),
            &config.node_name,
            &config.root_dir,
            &log_root,
            known_pods.clone(),
        ),
    });
    let tls = config.tls.clone();
    let kubelet_api = async move {
        match (listener, tls) {
            (Some(listener), Some(tls)) => {
                tracing::info!(port = kubelet_port, "kubelet API listening");
                server::serve(listener, tls, api_state).await;
            }
            _ => std::future::pending().await,
        }
    };
    let shared = Arc::new(worker::Shared {
        client: client.clone(),
        cri,
        node_name: config.node_name.clone(),
        host_ips: vec![ip.to_string()],
        runtime_name,
        log_root,
        root_dir: config.root_dir.clone(),
        cluster_domain: config.cluster_domain.clone(),
        cluster_dns: config.cluster_dns.clone(),
        resolv_conf: config.resolv_conf.clone(),
        node_memory: i64::try_from(machine.memory).unwrap_or(i64::MAX),
        allocatable,
        events,
        volumes_in_use,
        pod_starts,
    });
    let rotations = futures::future::join_all(
        config
            .rotations
            .iter()
            .map(|rotation| rotation.clone().run(client.clone())),
    );
    // Without rotations, nothing to wait for (but no reason to stop either).
    let rotations = async {
        rotations.await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = shutdown => {}
        _ = rotations => {}
        _ = heartbeat => {}
        _ = pod_network => {}
        _ = kubelet_api => {}
        _ = follow_node => {}
        _ = pods::run(shared, node_updates, known_pods) => {}
    }
    if let Some(own) = own_runtime {
        own.stop().await;
    }
    Ok(())
}

/// Writes the CNI configuration for the node's pod range as soon as the node has one (and again
/// when it changes), and tells the runtime. Runs until dropped.
async fn pod_network(
    cri: cri::Cri,
    mut node: tokio::sync::watch::Receiver<Option<Arc<Node>>>,
    network: cni::Network,
    conf_dir: PathBuf,
) {
    let mut current = String::new();
    loop {
        let cidr = node
            .borrow_and_update()
            .as_ref()
            .and_then(|n| n.spec.as_ref()?.pod_cidr.clone())
            .unwrap_or_default();
        if !cidr.is_empty() && cidr != current {
            match cni::write(&conf_dir, &network, &cidr) {
                Ok(_) => {
                    tracing::info!(pod_cidr = %cidr, bridge = %network.bridge, "pod network configured");
                    let _ = cri
                        .runtime
                        .clone()
                        .update_runtime_config(k8s_cri::v1::UpdateRuntimeConfigRequest {
                            runtime_config: Some(k8s_cri::v1::RuntimeConfig {
                                network_config: Some(k8s_cri::v1::NetworkConfig {
                                    pod_cidr: cidr.clone(),
                                }),
                            }),
                        })
                        .await;
                    current = cidr;
                }
                Err(e) => tracing::error!(error = %e, "cannot write the CNI configuration"),
            }
        }
        if node.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
