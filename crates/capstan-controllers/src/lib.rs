//! Capstan's controller manager: upstream kube-controller-manager's controllers, each a
//! level-triggered reconciler that reads the desired and the current state from shared
//! informer caches and acts on the difference through the API (never on storage).
//!
//! [`runtime`] holds the informers and work queues; every other module is one controller (or
//! helpers shared by several). [`start`] runs the enabled ones.

pub mod certificates;
pub mod clientbuilder;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod expectations;
pub mod gc;
pub mod history;
pub mod job;
mod metrics;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod nodepassword;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod podgc;
pub mod pods;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacert;
pub mod runtime;
pub mod serviceaccount;
pub mod statefulset;
pub mod tainteviction;
pub mod tokencleaner;
pub mod ttlafterfinished;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;
use kube::Client;

pub use capstan_client::informer::SharedInformers;

use crate::runtime::{AbortOnDrop, Informers, Setup, Task};

/// One controller of the manager.
struct Controller {
    /// Its name as `--disable-controllers` takes it (upstream's older form).
    name: &'static str,
    /// Upstream's current name for it (kube-controller-manager accepts both forms).
    long_name: &'static str,
    /// The service account it runs as with `--use-service-account-credentials` (upstream's;
    /// `kube-system/<account>`, bound to `system:controller:<account>`).
    account: &'static str,
    /// Keys reconciled at once (upstream's `--concurrent-*-syncs` default).
    concurrency: u16,
    /// Registers its informer handlers and returns its run future.
    start: fn(Setup<'_>) -> Task,
}

/// Every controller, in the order they are started.
const TABLE: &[Controller] = &[
    Controller {
        name: "nodeipam",
        long_name: "node-ipam-controller",
        account: "node-controller",
        concurrency: 1,
        start: nodeipam::start,
    },
    Controller {
        name: "nodelifecycle",
        long_name: "node-lifecycle-controller",
        account: "node-controller",
        concurrency: 5,
        start: nodelifecycle::start,
    },
    Controller {
        name: "node-password",
        long_name: "node-password-controller",
        account: "node-password-controller",
        concurrency: 1,
        start: nodepassword::start,
    },
    Controller {
        name: "tokencleaner",
        long_name: "token-cleaner-controller",
        account: "token-cleaner",
        concurrency: 1,
        start: tokencleaner::start,
    },
    Controller {
        name: "podgc",
        long_name: "pod-garbage-collector-controller",
        account: "pod-garbage-collector",
        concurrency: 1,
        start: podgc::start,
    },
    Controller {
        name: "taint-eviction-controller",
        long_name: "taint-eviction-controller",
        account: "node-controller",
        concurrency: 5,
        start: tainteviction::start,
    },
    Controller {
        name: "replicaset",
        long_name: "replicaset-controller",
        account: "replicaset-controller",
        concurrency: 5,
        start: replicaset::start::<ReplicaSet>,
    },
    Controller {
        name: "replicationcontroller",
        long_name: "replicationcontroller-controller",
        account: "replication-controller",
        concurrency: 5,
        start: replicaset::start::<ReplicationController>,
    },
    Controller {
        name: "deployment",
        long_name: "deployment-controller",
        account: "deployment-controller",
        concurrency: 5,
        start: deployment::start,
    },
    Controller {
        name: "resourcequota",
        long_name: "resourcequota-controller",
        account: "resourcequota-controller",
        concurrency: 5,
        start: resourcequota::start,
    },
    Controller {
        name: "endpoint",
        long_name: "endpoints-controller",
        account: "endpoint-controller",
        concurrency: 5,
        start: endpoints::legacy::start,
    },
    Controller {
        name: "endpointslice",
        long_name: "endpointslice-controller",
        account: "endpointslice-controller",
        concurrency: 5,
        start: endpoints::slices::start,
    },
    Controller {
        name: "endpointslicemirroring",
        long_name: "endpointslice-mirroring-controller",
        account: "endpointslicemirroring-controller",
        concurrency: 5,
        start: endpoints::mirroring::start,
    },
    Controller {
        name: "disruption",
        long_name: "disruption-controller",
        account: "disruption-controller",
        concurrency: 5,
        start: disruption::start,
    },
    Controller {
        name: "daemonset",
        long_name: "daemonset-controller",
        account: "daemon-set-controller",
        concurrency: 2,
        start: daemonset::start,
    },
    Controller {
        name: "job",
        long_name: "job-controller",
        account: "job-controller",
        concurrency: 5,
        start: job::start,
    },
    Controller {
        name: "cronjob",
        long_name: "cronjob-controller",
        account: "cronjob-controller",
        concurrency: 5,
        start: cronjob::start,
    },
    Controller {
        name: "ttl-after-finished",
        long_name: "ttl-after-finished-controller",
        account: "ttl-after-finished-controller",
        concurrency: 5,
        start: ttlafterfinished::start,
    },
    Controller {
        name: "garbagecollector",
        long_name: "garbage-collector-controller",
        account: "generic-garbage-collector",
        concurrency: 1,
        start: gc::start,
    },
    Controller {
        name: "namespace",
        long_name: "namespace-controller",
        account: "namespace-controller",
        concurrency: 5,
        start: namespace::start,
    },
    Controller {
        name: "serviceaccount",
        long_name: "serviceaccount-controller",
        account: "service-account-controller",
        concurrency: 5,
        start: serviceaccount::start,
    },
    Controller {
        name: "root-ca-cert-publisher",
        long_name: "root-ca-certificate-publisher-controller",
        account: "root-ca-cert-publisher",
        concurrency: 5,
        start: rootcacert::start,
    },
    Controller {
        name: "csrsigning",
        long_name: "certificatesigningrequest-signing-controller",
        account: "certificate-controller",
        concurrency: 5,
        start: certificates::signer::start,
    },
    Controller {
        name: "csrapproving",
        long_name: "certificatesigningrequest-approving-controller",
        account: "certificate-controller",
        concurrency: 5,
        start: certificates::approver::start,
    },
    Controller {
        name: "csrcleaner",
        long_name: "certificatesigningrequest-cleaner-controller",
        account: "certificate-controller",
        concurrency: 1,
        start: certificates::cleaner::start,
    },
    Controller {
        name: "statefulset",
        long_name: "statefulset-controller",
        account: "statefulset-controller",
        concurrency: 5,
        start: statefulset::start,
    },
    Controller {
        name: "persistentvolume-binder",
        long_name: "persistentvolume-binder-controller",
        account: "persistent-volume-binder",
        concurrency: 5,
        start: persistentvolume::start,
    },
    Controller {
        name: "pvc-protection",
        long_name: "persistentvolumeclaim-protection-controller",
        account: "pvc-protection-controller",
        concurrency: 5,
        start: persistentvolume::protection::start_claims,
    },
    Controller {
        name: "pv-protection",
        long_name: "persistentvolume-protection-controller",
        account: "pv-protection-controller",
        concurrency: 5,
        start: persistentvolume::protection::start_volumes,
    },
    Controller {
        name: "horizontalpodautoscaling",
        long_name: "horizontal-pod-autoscaler-controller",
        account: "horizontal-pod-autoscaler",
        concurrency: 5,
        start: podautoscaler::start,
    },
    Controller {
        name: "ephemeral-volume",
        long_name: "ephemeral-volume-controller",
        account: "ephemeral-volume-controller",
        concurrency: 5,
        start: persistentvolume::ephemeral::start,
    },
];

/// Every controller's name as `--disable-controllers` takes it, sorted.
pub fn controller_names() -> Vec<&'static str> {
    let mut names: Vec<_> = TABLE.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names
}

/// The service account each controller runs as with per-controller credentials, by the name
/// `--disable-controllers` takes (in the order they start).
pub fn controller_accounts() -> Vec<(&'static str, &'static str)> {
    TABLE.iter().map(|c| (c.name, c.account)).collect()
}

/// The name [`TABLE`] lists a controller under, given either of upstream's names.
fn short_name(name: &str) -> &str {
    TABLE
        .iter()
        .find(|c| c.long_name == name)
        .map_or(name, |c| c.name)
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
    /// The CA the CSR signer signs with (`--cluster-signing-cert-file` and `-key-file`; the
    /// server's cluster CA inside `capstan server`); without it the signer does not run.
    pub signing_ca: Option<certificates::SigningCa>,
    /// The CA of the `kubernetes.io/kubelet-serving` signer when it is not `signing_ca`
    /// (`--cluster-signing-kubelet-serving-cert-file` and `-key-file`; inside `capstan server`
    /// the kubelet serving CA the API server checks kubelets against).
    pub kubelet_serving_ca: Option<certificates::SigningCa>,
    /// The longest certificate the signer issues (`--cluster-signing-duration`).
    pub signing_duration: Duration,
    /// How the controllers authenticate (`--use-service-account-credentials`).
    pub credentials: clientbuilder::Credentials,
    /// The HorizontalPodAutoscaler controller's settings (`--horizontal-pod-autoscaler-*`).
    pub horizontal_pod_autoscaler: podautoscaler::Settings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: BTreeSet::new(),
            cluster_cidr: "10.42.0.0/16".into(),
            node_monitor_grace_period: Duration::from_secs(50),
            terminated_pod_gc_threshold: podgc::TERMINATED_THRESHOLD,
            root_ca: None,
            signing_ca: None,
            kubelet_serving_ca: None,
            signing_duration: certificates::DEFAULT_SIGNING_DURATION,
            credentials: clientbuilder::Credentials::Shared,
            horizontal_pod_autoscaler: podautoscaler::Settings::default(),
        }
    }
}

impl Config {
    /// Checks that every disabled name is a controller's and the cluster CIDR parses.
    pub fn validate(&self) -> Result<(), String> {
        nodeipam::ClusterCidr::parse(&self.cluster_cidr)?;
        self.horizontal_pod_autoscaler.validate()?;
        match self
            .disabled
            .iter()
            .find(|n| !TABLE.iter().any(|c| c.name == short_name(n.as_str())))
        {
            Some(unknown) => Err(format!(
                "unknown controller {unknown:?}; known controllers: {}",
                controller_names().join(", ")
            )),
            None => Ok(()),
        }
    }

    fn enabled(&self, name: &str) -> bool {
        !self.disabled.iter().any(|n| short_name(n) == name)
    }
}

/// The running controllers; dropping it stops them and leaves their informers (stopping
/// those no other component of the process uses).
#[derive(Debug)]
pub struct ControllerManager {
    _tasks: Vec<AbortOnDrop>,
    _informers: Informers,
}

/// Starts the enabled controllers as `identity` (the events' reporting instance), reading the
/// process's shared informers (`informers`, which the scheduler of the same process reads too).
/// `client` is the controller manager's own: the informers it starts list and watch with it,
/// and with per-controller credentials ([`Config::credentials`]) it makes the controllers'
/// service accounts and their tokens; each controller then starts once its first token is
/// held. Must be called within a Tokio runtime.
pub fn start(
    client: Client,
    config: &Config,
    identity: &str,
    informers: &SharedInformers,
) -> ControllerManager {
    let mut informers = informers.view();
    let mut clients = clientbuilder::Clients::new(&client, &config.credentials);
    let controllers: Vec<Task> = TABLE
        .iter()
        .filter(|c| config.enabled(c.name))
        .map(|c| {
            let (controller_client, source) = clients.client(c.account);
            let setup = Setup::new(
                &mut informers,
                controller_client,
                config,
                identity,
                c.concurrency,
            );
            clientbuilder::after_token((c.start)(setup), source)
        })
        .collect();
    informers.start(&client);
    let mut tasks = clients.start();
    tasks.extend(
        controllers
            .into_iter()
            .map(|c| AbortOnDrop(tokio::spawn(c))),
    );
    ControllerManager {
        _tasks: tasks,
        _informers: informers,
    }
}
