//! Capstan's controller manager: upstream kube-controller-manager's controllers, each a
//! level-triggered reconciler that reads the desired and the current state from shared
//! informer caches and acts on the difference through the API (never on storage).
//!
//! [`runtime`] holds the informers and work queues; every other module is one controller (or
//! helpers shared by several). [`start`] runs the enabled ones.

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod expectations;
pub mod gc;
pub mod history;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podgc;
pub mod pods;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacert;
pub mod runtime;
pub mod serviceaccount;
pub mod statefulset;
pub mod tainteviction;
pub mod ttlafterfinished;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use capstan_client::events::EventRecorder;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;
use kube::Client;

use crate::runtime::{AbortOnDrop, Informers};

/// Every controller by its upstream name, as `--disable-controllers` takes them.
pub const CONTROLLERS: &[&str] = &[
    "cronjob",
    "daemonset",
    "deployment",
    "disruption",
    "endpoint",
    "endpointslice",
    "endpointslicemirroring",
    "garbagecollector",
    "job",
    "namespace",
    "nodeipam",
    "nodelifecycle",
    "podgc",
    "replicaset",
    "replicationcontroller",
    "resourcequota",
    "root-ca-cert-publisher",
    "serviceaccount",
    "statefulset",
    "taint-eviction-controller",
    "ttl-after-finished",
];

/// Upstream's current controller names (kube-controller-manager accepts both forms), by the
/// older name this crate lists them under.
const LONG_NAMES: &[(&str, &str)] = &[
    ("cronjob", "cronjob-controller"),
    ("daemonset", "daemonset-controller"),
    ("deployment", "deployment-controller"),
    ("disruption", "disruption-controller"),
    ("endpoint", "endpoints-controller"),
    ("endpointslice", "endpointslice-controller"),
    (
        "endpointslicemirroring",
        "endpointslice-mirroring-controller",
    ),
    ("garbagecollector", "garbage-collector-controller"),
    ("job", "job-controller"),
    ("namespace", "namespace-controller"),
    ("nodeipam", "node-ipam-controller"),
    ("nodelifecycle", "node-lifecycle-controller"),
    ("podgc", "pod-garbage-collector-controller"),
    ("replicaset", "replicaset-controller"),
    ("replicationcontroller", "replicationcontroller-controller"),
    ("resourcequota", "resourcequota-controller"),
    (
        "root-ca-cert-publisher",
        "root-ca-certificate-publisher-controller",
    ),
    ("serviceaccount", "serviceaccount-controller"),
    ("statefulset", "statefulset-controller"),
    ("ttl-after-finished", "ttl-after-finished-controller"),
];

/// The name [`CONTROLLERS`] lists a controller under, given either of upstream's names.
fn short_name(name: &str) -> &str {
    LONG_NAMES
        .iter()
        .find(|(_, long)| *long == name)
        .map_or(name, |(short, _)| short)
}

/// Which controllers run, and their settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Controllers not to run (upstream names).
    pub disabled: BTreeSet<String>,
    /// The range node pod CIDRs come from (`--cluster-cidr`).
    pub cluster_cidr: String,
    /// How long a silent kubelet is trusted (`--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// Terminated pods kept before the oldest are deleted (`--terminated-pod-gc-threshold`).
    pub terminated_pod_gc_threshold: usize,
    /// The PEM bundle that verifies the API server, published in every namespace as the
    /// `kube-root-ca.crt` ConfigMap (upstream's `--root-ca-file`, else the kubeconfig's CA).
    pub root_ca: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: BTreeSet::new(),
            cluster_cidr: "10.42.0.0/16".into(),
            node_monitor_grace_period: Duration::from_secs(50),
            terminated_pod_gc_threshold: podgc::TERMINATED_THRESHOLD,
            root_ca: None,
        }
    }
}

impl Config {
    /// Checks that every disabled name is a controller's and the cluster CIDR parses.
    pub fn validate(&self) -> Result<(), String> {
        nodeipam::ClusterCidr::parse(&self.cluster_cidr)?;
        match self
            .disabled
            .iter()
            .find(|n| !CONTROLLERS.contains(&short_name(n.as_str())))
        {
            Some(unknown) => Err(format!(
                "unknown controller {unknown:?}; known controllers: {}",
                CONTROLLERS.join(", ")
            )),
            None => Ok(()),
        }
    }

    fn enabled(&self, name: &str) -> bool {
        !self.disabled.iter().any(|n| short_name(n) == name)
    }
}

/// The running controllers; dropping it stops them and their informers.
#[derive(Debug)]
pub struct ControllerManager {
    _tasks: Vec<AbortOnDrop>,
}

/// Starts the enabled controllers as `identity` (the events' reporting instance). Must be
/// called within a Tokio runtime.
pub fn start(client: Client, config: &Config, identity: &str) -> ControllerManager {
    // Each controller reports its events under its upstream component name.
    let recorder = |component: &str| EventRecorder::start(client.clone(), component, identity);
    let mut informers = Informers::default();
    let mut controllers: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = Vec::new();
    if config.enabled("nodeipam")
        && let Ok(cidr) = nodeipam::ClusterCidr::parse(&config.cluster_cidr)
    {
        controllers.push(Box::pin(nodeipam::start(
            &mut informers,
            client.clone(),
            cidr,
        )));
    }
    if config.enabled("nodelifecycle") {
        controllers.push(Box::pin(nodelifecycle::start(
            &mut informers,
            client.clone(),
            config.node_monitor_grace_period,
            5,
        )));
    }
    if config.enabled("podgc") {
        controllers.push(Box::pin(podgc::start(
            &mut informers,
            client.clone(),
            config.terminated_pod_gc_threshold,
        )));
    }
    if config.enabled("taint-eviction-controller") {
        controllers.push(Box::pin(tainteviction::start(
            &mut informers,
            client.clone(),
            recorder("taint-eviction-controller"),
            5,
        )));
    }
    if config.enabled("replicaset") {
        controllers.push(Box::pin(replicaset::start::<ReplicaSet>(
            &mut informers,
            client.clone(),
            recorder("replicaset-controller"),
            5,
        )));
    }
    if config.enabled("replicationcontroller") {
        controllers.push(Box::pin(replicaset::start::<ReplicationController>(
            &mut informers,
            client.clone(),
            recorder("replication-controller"),
            5,
        )));
    }
    if config.enabled("deployment") {
        controllers.push(Box::pin(deployment::start(
            &mut informers,
            client.clone(),
            recorder("deployment-controller"),
            5,
        )));
    }
    if config.enabled("resourcequota") {
        controllers.push(Box::pin(resourcequota::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("endpoint") {
        controllers.push(Box::pin(endpoints::legacy::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("endpointslice") {
        controllers.push(Box::pin(endpoints::slices::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("endpointslicemirroring") {
        controllers.push(Box::pin(endpoints::mirroring::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("disruption") {
        controllers.push(Box::pin(disruption::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("daemonset") {
        controllers.push(Box::pin(daemonset::start(
            &mut informers,
            client.clone(),
            recorder("daemonset-controller"),
            2,
        )));
    }
    if config.enabled("job") {
        controllers.push(Box::pin(job::start(
            &mut informers,
            client.clone(),
            recorder("job-controller"),
            5,
        )));
    }
    if config.enabled("cronjob") {
        controllers.push(Box::pin(cronjob::start(
            &mut informers,
            client.clone(),
            recorder("cronjob-controller"),
            5,
        )));
    }
    if config.enabled("ttl-after-finished") {
        controllers.push(Box::pin(ttlafterfinished::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("garbagecollector") {
        controllers.push(Box::pin(gc::run(client.clone())));
    }
    if config.enabled("namespace") {
        controllers.push(Box::pin(namespace::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    if config.enabled("serviceaccount") {
        controllers.push(Box::pin(serviceaccount::start(
            &mut informers,
            client.clone(),
            5,
        )));
    }
    match (&config.root_ca, config.enabled("root-ca-cert-publisher")) {
        (Some(root_ca), true) => controllers.push(Box::pin(rootcacert::start(
            &mut informers,
            client.clone(),
            root_ca.clone(),
            5,
        ))),
        // As upstream, the publisher needs the bundle; without one it does not start.
        (None, true) => {
            tracing::warn!("no root CA bundle known: root-ca-cert-publisher not started")
        }
        _ => {}
    }
    if config.enabled("statefulset") {
        controllers.push(Box::pin(statefulset::start(
            &mut informers,
            client.clone(),
            recorder("statefulset-controller"),
            5,
        )));
    }
    let mut tasks = informers.start(&client);
    tasks.extend(
        controllers
            .into_iter()
            .map(|c| AbortOnDrop(tokio::spawn(c))),
    );
    ControllerManager { _tasks: tasks }
}
