//! Simulated nodes, built in: `capstan sim` registers any number of fake nodes that behave, as
//! seen through the Kubernetes API, like nodes with a real kubelet, the way
//! [kwok](https://kwok.sigs.k8s.io) does. They let the scheduler and the control plane be
//! measured at thousands of nodes and pods without running a single container.
//!
//! Every simulated node:
//! - registers a `Node` named `{prefix}{index}` with the kubelet's well-known labels plus
//!   `type=capstan-sim`, the annotation `capstan.io/sim: "true"`, the configured capacity, and
//!   the status a healthy kubelet posts (Ready, no pressure, addresses, node info), written
//!   through `nodes/status`; an existing node of that name is taken over;
//! - keeps its `Lease` in `kube-node-lease` renewed, and posts its conditions again about every
//!   five minutes, the kubelet's node status report frequency;
//! - "runs" every pod bound to it: the pod goes straight to Running with an address from the
//!   node's /24, every container running and ready, and stays so;
//! - confirms the deletion of its pods being deleted (grace period 0, UID precondition), as a
//!   kubelet does once containers have stopped, so controllers see them go.
//!
//! Nothing here touches storage: the simulator is a [`kube::Client`] user like any other, and
//! [`run`] stops on shutdown leaving the nodes registered (they turn NotReady when their leases
//! expire, as after a kubelet stops).
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), capstan_sim::SimError> {
//! let config = capstan_sim::SimConfig { nodes: 5_000, ..Default::default() };
//! capstan_sim::run(client, config, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod addresses;
mod objects;
mod runner;
mod timing;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

pub use k8s_openapi::api::core::v1::Taint;

pub use objects::{
    CONTAINER_RUNTIME_VERSION, KUBELET_VERSION, LEASE_NAMESPACE, SIM_ANNOTATION, SIM_TYPE,
    TYPE_LABEL,
};

/// How many nodes to simulate, what they look like, and how often they write.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// How many nodes to run.
    pub nodes: usize,
    /// Node `i` is called `{name_prefix}{i}`.
    pub name_prefix: String,
    /// CPU capacity of each node (a quantity).
    pub cpu: String,
    /// Memory capacity of each node (a quantity).
    pub memory: String,
    /// How many pods each node takes.
    pub pods: String,
    /// Ephemeral storage capacity of each node (a quantity).
    pub ephemeral_storage: String,
    /// Labels added to every node (they override the built-in ones of the same key).
    pub labels: BTreeMap<String, String>,
    /// Taints every node registers with.
    pub taints: Vec<Taint>,
    /// How often each node renews its lease (the kubelet's default is 10 s).
    pub lease_interval: Duration,
    /// The lease duration each node declares (the kubelet's default is 40 s).
    pub lease_duration_seconds: i32,
    /// How often each node posts its conditions again without a change (upstream's
    /// `nodeStatusReportFrequency`, 5 minutes).
    pub status_report_interval: Duration,
    /// Node `i`'s pods get addresses from `10.(pod_cidr_base + i / 256).(i % 256).0/24`; node
    /// addresses count up from `10.0.0.1`. Allows `(256 - pod_cidr_base) * 256` nodes.
    pub pod_cidr_base: u8,
    /// The most API writes in flight at once (registrations, lease renewals, pod updates).
    pub concurrency: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 1,
            name_prefix: "sim-node-".to_owned(),
            cpu: "32".to_owned(),
            memory: "256Gi".to_owned(),
            pods: "110".to_owned(),
            ephemeral_storage: "100Gi".to_owned(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            lease_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            status_report_interval: Duration::from_secs(5 * 60),
            pod_cidr_base: 100,
            concurrency: 32,
        }
    }
}

impl SimConfig {
    /// Checks what the API server would not catch, or would catch only at the first node.
    pub fn validate(&self) -> Result<(), SimError> {
        let invalid = |message: String| Err(SimError::InvalidConfig(message));
        let max = addresses::max_nodes(self.pod_cidr_base);
        if self.nodes > max {
            return invalid(format!(
                "{} nodes do not fit the pod address ranges from 10.{}.0.0: at most {max}",
                self.nodes, self.pod_cidr_base
            ));
        }
        if self.name_prefix.is_empty() {
            return invalid("the node name prefix is empty".to_owned());
        }
        if self.lease_interval.is_zero() || self.status_report_interval.is_zero() {
            return invalid("the lease and status intervals must be positive".to_owned());
        }
        if self.lease_duration_seconds <= 0 {
            return invalid("the lease duration must be positive".to_owned());
        }
        if self.concurrency == 0 {
            return invalid("the write concurrency must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// Why the simulator stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration cannot work (too many nodes for the address ranges, a zero interval…).
    #[error("invalid simulator configuration: {0}")]
    InvalidConfig(String),
    /// A node could not be registered (its Node, status or Lease was refused, or the API server
    /// stayed unavailable through the retries).
    #[error("cannot register node {node}")]
    Register {
        /// The node's name.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The watch of pods ended, which a watcher never does while the simulator runs.
    #[error("the watch of pods ended")]
    WatchEnded,
}

/// Runs the simulated nodes until `shutdown` completes: registers them (at most
/// [`SimConfig::concurrency`] writes at once), then keeps their leases and status current and
/// runs the pods bound to them. On shutdown the nodes stay registered. Returns an error if the
/// configuration is invalid, a node cannot be registered, or the pod watch ends.
pub async fn run(
    client: kube::Client,
    config: SimConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SimError> {
    config.validate()?;
    if config
        .pods
        .parse::<usize>()
        .is_ok_and(|pods| pods > addresses::POD_ADDRESSES_PER_NODE)
    {
        tracing::warn!(
            pods = %config.pods,
            "each node has {} pod addresses; pods beyond them stay Pending",
            addresses::POD_ADDRESSES_PER_NODE
        );
    }
    tracing::info!(
        nodes = config.nodes,
        prefix = %config.name_prefix,
        "starting simulated nodes"
    );
    let sim = runner::Sim::new(client, config);
    tokio::select! {
        result = sim.run() => result,
        () = shutdown => {
            tracing::info!("simulated nodes stopping; their Node objects stay registered");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_configuration_is_valid() {
        assert!(SimConfig::default().validate().is_ok());
        let five_thousand = SimConfig {
            nodes: 5_000,
            ..SimConfig::default()
        };
        assert!(five_thousand.validate().is_ok());
    }

    #[test]
    fn impossible_configurations_are_refused() {
        let check = |config: SimConfig, message: &str| match config.validate() {
            Err(SimError::InvalidConfig(m)) => assert!(m.contains(message), "{m}"),
            other => panic!("expected InvalidConfig({message}), got {other:?}"),
        };
        let base = SimConfig::default;
        check(
            SimConfig {
                nodes: 40_000,
                ..base()
            },
            "at most 39936",
        );
        check(
            SimConfig {
                nodes: 257,
                pod_cidr_base: 255,
                ..base()
            },
            "at most 256",
        );
        check(
            SimConfig {
                name_prefix: String::new(),
                ..base()
            },
            "prefix",
        );
        check(
            SimConfig {
                lease_interval: Duration::ZERO,
                ..base()
            },
            "intervals",
        );
        check(
            SimConfig {
                lease_duration_seconds: 0,
                ..base()
            },
            "duration",
        );
        check(
            SimConfig {
                concurrency: 0,
                ..base()
            },
            "concurrency",
        );
    }
}
