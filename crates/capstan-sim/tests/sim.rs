//! The simulator against an in-process API server on a temporary SQLite store, through kube-rs
//! only: three nodes register Ready with their leases, a pod bound to one of them runs with an
//! address and is deleted when asked, and a second run takes the nodes over without handing out
//! an address twice.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use capstan_sim::SimConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const CONVERGE: Duration = Duration::from_secs(30);

struct Cluster {
    client: Client,
    _server: capstan_apiserver::RunningServer,
    _dir: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    // RUST_LOG=capstan_sim=debug shows what the simulator does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let store = capstan_store::Store::sqlite(capstan_store::sqlite::SqliteConfig::new(
        dir.path().join("state.db"),
    ))
    .await
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let config = capstan_apiserver::Config {
        data_dir: dir.path().to_owned(),
        bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        tls_sans: Vec::new(),
        tls: Default::default(),
        encryption_provider_config: None,
        secrets_encryption: false,
        audit: None,
        kubeconfig_path: kubeconfig.clone(),
        kubeconfig_mode: 0o600,
        token_auth_file: None,
        authentication: Default::default(),
        service_cidr: "10.43.0.0/16".to_owned(),
        allocation_repair: Default::default(),
        join_token: None,
        advertise_address: None,
        default_storage_class: false,
        metrics_server: None,
        admission_control_config_file: None,
        node_cert_lifetime: capstan_apiserver::pki::DEFAULT_NODE_LIFETIME,
        authentication_token_webhook: None,
        authorization: Default::default(),
        controller_credentials: true,
        dashboard: true,
        profiling: true,
    };
    let server = capstan_apiserver::start(config, store).await.unwrap();
    let kubeconfig = Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    // No controllers run here: make the `default` service account that the service account
    // controller would, which ServiceAccount admission requires of new pods.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
        )
        .await
        .unwrap();
    Cluster {
        client,
        _server: server,
        _dir: dir,
    }
}

/// A running simulator and the way to stop it.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), capstan_sim::SimError>>,
}

fn start_sim(client: &Client, config: SimConfig) -> Running {
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(capstan_sim::run(client.clone(), config, async move {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// Polls `check` until it gives a value or [`CONVERGE`] passes.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn config() -> SimConfig {
    SimConfig {
        nodes: 3,
        lease_interval: Duration::from_millis(500),
        status_report_interval: Duration::from_secs(1),
        labels: [("sim.test/zone".to_owned(), "z1".to_owned())].into(),
        ..SimConfig::default()
    }
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("KubeletReady")
            })
        })
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "app", "image": "registry.invalid/app:1"},
                {"name": "sidecar", "image": "registry.invalid/sidecar:1"},
            ],
        },
    }))
    .unwrap()
}

/// The pod's address once it is Running with one.
async fn running_ip(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("pod {name} running"), || async {
        let pod = pods.get(name).await.ok()?;
        let status = pod.status?;
        (status.phase.as_deref() == Some("Running"))
            .then_some(())
            .and(status.pod_ip)
    })
    .await
}

async fn gone(pods: &Api<Pod>, name: &str) {
    eventually(&format!("pod {name} gone"), || async {
        match pods.get(name).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_nodes_register_run_pods_and_let_them_go() {
    let cluster = cluster().await;
    let client = &cluster.client;
    let sim = start_sim(client, config());

    // Three Ready nodes with the kubelet's labels, our annotation and the configured capacity.
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = eventually("three Ready nodes", || async {
        let list = nodes
            .list(&ListParams::default().labels("type=capstan-sim"))
            .await
            .ok()?;
        (list.items.len() == 3 && list.items.iter().all(is_ready)).then_some(list.items)
    })
    .await;
    let mut names: Vec<String> = listed.iter().map(ResourceExt::name_any).collect();
    names.sort();
    assert_eq!(names, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    let node = nodes.get("sim-node-1").await.unwrap();
    let labels = node.labels();
    assert_eq!(labels["kubernetes.io/hostname"], "sim-node-1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["sim.test/zone"], "z1");
    assert_eq!(node.annotations()["capstan.io/sim"], "true");
    let status = node.status.clone().unwrap();
    let addresses: Vec<(String, String)> = status
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".to_owned(), "10.0.0.2".to_owned()),
            ("Hostname".to_owned(), "sim-node-1".to_owned())
        ]
    );
    let allocatable = status.allocatable.unwrap();
    assert_eq!(allocatable["cpu"].0, "32");
    assert_eq!(allocatable["memory"].0, "256Gi");
    assert_eq!(allocatable["pods"].0, "110");
    let info = status.node_info.unwrap();
    assert_eq!(info.kubelet_version, "v1.33.0");
    assert_eq!(info.container_runtime_version, "capstan-sim://1");
    let conditions: Vec<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        [
            ("MemoryPressure".to_owned(), "False".to_owned()),
            ("DiskPressure".to_owned(), "False".to_owned()),
            ("PIDPressure".to_owned(), "False".to_owned()),
            ("Ready".to_owned(), "True".to_owned()),
        ]
    );

    // The conditions are posted again with a new heartbeat; the transition time stays.
    let ready = |node: &Node| {
        let ready = node
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        Some((ready.last_heartbeat_time?, ready.last_transition_time?))
    };
    let (first_heartbeat, since) = ready(&node).unwrap();
    let (_, since_after) = eventually("a node heartbeat", || async {
        let node = nodes.get("sim-node-1").await.ok()?;
        ready(&node).filter(|(heartbeat, _)| *heartbeat > first_heartbeat)
    })
    .await;
    assert_eq!(since_after, since);

    // A lease per node, held by it, owned by its Node, and renewed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = eventually("the lease of sim-node-1", || async {
        leases.get("sim-node-1").await.ok()
    })
    .await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("sim-node-1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &lease.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("Node", "sim-node-1", node.metadata.uid.as_ref())
    );
    for name in ["sim-node-0", "sim-node-2"] {
        assert!(leases.get(name).await.is_ok(), "lease of {name}");
    }
    let first_renewal = spec.renew_time.unwrap();
    eventually("a lease renewal", || async {
        let renewed = leases.get("sim-node-1").await.ok()?.spec?.renew_time?;
        (renewed > first_renewal).then_some(())
    })
    .await;

    // A pod bound to a simulated node runs, with an address from the node's range.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web", "sim-node-1"))
        .await
        .unwrap();
    let ip = running_ip(&pods, "web").await;
    assert_eq!(ip, "10.100.1.1");
    let web = pods.get("web").await.unwrap();
    let status = web.status.clone().unwrap();
    assert_eq!(status.host_ip.as_deref(), Some("10.0.0.2"));
    assert_eq!(status.pod_ips.unwrap()[0].ip, ip);
    assert!(status.start_time.is_some());
    let mut true_conditions: Vec<String> = status
        .conditions
        .unwrap()
        .into_iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_)
        .collect();
    true_conditions.sort();
    assert_eq!(
        true_conditions,
        [
            "ContainersReady",
            "Initialized",
            "PodReadyToStartContainers",
            "PodScheduled",
            "Ready"
        ]
    );
    let containers = status.container_statuses.unwrap();
    assert_eq!(containers.len(), 2);
    for c in &containers {
        assert!(c.ready, "{}", c.name);
        assert_eq!(c.started, Some(true));
        assert_eq!(c.image_id, "capstan-sim://image");
        assert_eq!(
            c.container_id.as_deref(),
            Some(format!("capstan-sim://{}-{}", web.uid().unwrap(), c.name).as_str())
        );
        assert!(c.state.as_ref().unwrap().running.is_some());
    }

    // A second pod on the same node gets the next address; one on a node that is not ours
    // is left alone.
    pods.create(&PostParams::default(), &pod("api", "sim-node-1"))
        .await
        .unwrap();
    assert_eq!(running_ip(&pods, "api").await, "10.100.1.2");
    pods.create(&PostParams::default(), &pod("elsewhere", "real-node"))
        .await
        .unwrap();

    // Deleting a pod bound to a node only marks it; the simulated kubelet finishes the job
    // (the default grace period is 30 s, the wait here is shorter).
    let deleting = pods.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(
        deleting
            .left()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    );
    let began = tokio::time::Instant::now();
    gone(&pods, "web").await;
    assert!(began.elapsed() < Duration::from_secs(25));
    let elsewhere = pods.get("elsewhere").await.unwrap();
    assert_ne!(
        elsewhere.status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );

    // Stopping leaves the nodes in place.
    sim.stop().await;
    assert_eq!(
        nodes
            .list(&ListParams::default().labels("type=capstan-sim"))
            .await
            .unwrap()
            .items
            .len(),
        3
    );

    // A second run takes the nodes over; the surviving pod keeps its address, and a new one
    // does not get it again (it gets the address the deleted pod had).
    let sim = start_sim(client, config());
    pods.create(&PostParams::default(), &pod("later", "sim-node-1"))
        .await
        .unwrap();
    assert_eq!(running_ip(&pods, "later").await, "10.100.1.1");
    assert_eq!(running_ip(&pods, "api").await, "10.100.1.2");
    let lease = leases.get("sim-node-1").await.unwrap();
    assert_eq!(lease.owner_references()[0].uid, node.uid().unwrap());
    sim.stop().await;
}
