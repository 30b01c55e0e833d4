//! The service proxy, as kube-proxy's nftables mode: every node agent runs one, which watches
//! Services, EndpointSlices and its own Node through the API and keeps its own nftables table
//! (`ip kube-proxy`) so that cluster IPs, node ports and external IPs reach the Services'
//! endpoints.
//!
//! - `rules.rs`: the pure model — what the table should hold for a set of Services, slices and
//!   this node (chains per Service port, dispatch map entries, hairpin and affinity sets),
//!   kept per Service so that a sync recomputes only the Services that changed.
//! - `nft.rs`: that model as nftables JSON (the `nftables` crate), the base chains hooked into
//!   prerouting, output, input, forward and postrouting, the difference between two models as
//!   one transaction, applied with `nft -j -f -`.
//! - here: the watches and the sync loop. A change to a watched object wakes the loop, which
//!   brings the model up to date and applies only what changed since the last successful
//!   sync; the first sync (after the watches have listed everything) and any sync after a
//!   failure replace the whole table, which also reconciles what a crashed process left. A
//!   clean stop removes the table.
//!
//! - `conntrack.rs`: after a sync, UDP flows whose endpoint is gone are deleted from the
//!   kernel's connection tracking (`conntrack`), as upstream's proxy does.
//!
//! IPv4 only; topology-aware hints, LoadBalancer source ranges and health-check node ports are
//! not implemented.

pub mod conntrack;
mod metrics;
pub mod nft;
pub mod rules;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

pub use nft::{NftError, Writer};
pub use rules::{Desired, NodeInfo};

/// The proxy's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name.
    pub node_name: String,
    /// The nftables table (family `ip`) the proxy owns; `kube-proxy` by default, as upstream's.
    pub table: String,
    /// How to run `nft` (`["nft"]`; tests run it in a network namespace).
    pub nft: Vec<String>,
    /// How to run `conntrack` (`["conntrack"]`), which clears stale UDP flows.
    pub conntrack: Vec<String>,
}

impl Config {
    /// The settings for node `node_name`, with upstream's table name.
    pub fn new(node_name: &str) -> Config {
        Config {
            node_name: node_name.to_owned(),
            table: "kube-proxy".to_owned(),
            nft: vec!["nft".to_owned()],
            conntrack: vec!["conntrack".to_owned()],
        }
    }
}

/// Keeps the proxy's table in step with a model, applying differences.
#[derive(Debug)]
pub struct Proxier {
    writer: Writer,
    nft: Vec<String>,
    applied: Option<Desired>,
}

/// What one sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncStats {
    /// Whether the whole table was replaced.
    pub full: bool,
    /// How many commands the transaction held.
    pub commands: usize,
}

impl Proxier {
    /// A proxier for table `table`, run with `nft` (the command line before `-j -f -`), which
    /// replaces whatever the table holds on its first sync.
    pub fn new(table: &str, nft: &[String]) -> Proxier {
        Proxier {
            writer: Writer::new(table),
            nft: nft.to_vec(),
            applied: None,
        }
    }

    /// Brings the table to `desired`: the whole table the first time and after a failure,
    /// only the difference otherwise.
    pub async fn sync(&mut self, desired: Desired) -> Result<SyncStats, NftError> {
        let started = std::time::Instant::now();
        let full = self.applied.is_none();
        let transaction = self.writer.transaction(self.applied.as_ref(), &desired);
        let commands = transaction.len();
        let applied = nft::apply(&self.nft, transaction).await;
        metrics::synced(full, started.elapsed(), applied.is_ok());
        match applied {
            Ok(()) => {
                self.applied = Some(desired);
                Ok(SyncStats { full, commands })
            }
            Err(error) => {
                self.applied = None;
                Err(error)
            }
        }
    }

    /// What the last successful sync put in the table.
    pub fn applied(&self) -> Option<&Desired> {
        self.applied.as_ref()
    }

    /// Removes the table.
    pub async fn remove(&mut self) -> Result<(), NftError> {
        self.applied = None;
        nft::apply(&self.nft, self.writer.removal()).await
    }
}

/// An error running the proxy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `nft` is missing or the kernel lacks nftables.
    #[error("nftables is not usable: {0}")]
    Unusable(NftError),
}

/// Runs the proxy until `shutdown` resolves, then removes its table.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    // Fail early, with a clear message, where nft cannot run at all.
    let mut proxier = Proxier::new(&config.table, &config.nft);
    proxier.remove().await.map_err(Error::Unusable)?;
    let wake = Arc::new(Notify::new());
    let (services, services_task) = reflect::<Service>(Api::all(client.clone()), None, &wake);
    let (slices, slices_task) = reflect::<EndpointSlice>(Api::all(client.clone()), None, &wake);
    let (nodes, nodes_task) = reflect::<Node>(
        Api::all(client),
        Some(format!("metadata.name={}", config.node_name)),
        &wake,
    );
    let tasks = [services_task, slices_task, nodes_task];
    let work = async {
        // Nothing is programmed before every watch has listed: a Service whose slices are
        // not known yet would be rejected for a moment.
        let _ = tokio::join!(
            services.wait_until_ready(),
            slices.wait_until_ready(),
            nodes.wait_until_ready()
        );
        tracing::info!(table = %config.table, node = %config.node_name, "service proxy started");
        let mut retry: Option<Duration> = None;
        let mut model = rules::Model::default();
        let mut conntrack_warned = false;
        loop {
            let started = Instant::now();
            let node = nodes.state().into_iter().next();
            let info = NodeInfo::from_node(&config.node_name, node.as_deref());
            let desired = model.desired(&services.state(), &slices.state(), &info);
            match proxier.sync(desired).await {
                Ok(stats) => {
                    retry = None;
                    tracing::debug!(
                        full = stats.full,
                        commands = stats.commands,
                        took = ?started.elapsed(),
                        "service rules synced"
                    );
                    // With the rules in place, flows to endpoints that are gone are dropped.
                    if stats.commands > 0
                        && let Some(applied) = proxier.applied()
                    {
                        match conntrack::clean(&config.conntrack, applied).await {
                            Ok(0) => {}
                            Ok(deleted) => {
                                tracing::debug!(deleted, "stale UDP flows cleared");
                            }
                            Err(error) if !conntrack_warned => {
                                conntrack_warned = true;
                                tracing::warn!(error = %error, "cannot clear stale UDP flows (is conntrack installed?)");
                            }
                            Err(error) => {
                                tracing::debug!(error = %error, "cannot clear stale UDP flows")
                            }
                        }
                    }
                }
                Err(error) => {
                    let delay = retry.map_or(Duration::from_millis(500), |d| {
                        (d * 2).min(Duration::from_secs(30))
                    });
                    retry = Some(delay);
                    tracing::warn!(error = %error, retry_in = ?delay, "cannot program service rules");
                }
            }
            match retry {
                Some(delay) => {
                    let _ = tokio::time::timeout(delay, wake.notified()).await;
                }
                None => wake.notified().await,
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = shutdown => {}
    }
    for task in tasks {
        task.abort();
    }
    if let Err(error) = proxier.remove().await {
        tracing::warn!(error = %error, "cannot remove the service proxy's table");
    }
    Ok(())
}

/// A reflector of `api` (optionally narrowed by a field selector) whose every change wakes
/// `wake`; the store and the task driving it.
fn reflect<K>(
    api: Api<K>,
    fields: Option<String>,
    wake: &Arc<Notify>,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let mut config = capstan_client::watcher_config();
    if let Some(fields) = fields {
        config = config.fields(&fields);
    }
    let wake = Arc::clone(wake);
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(error) = event {
                tracing::debug!(error = %error, "service proxy watch error");
                continue;
            }
            wake.notify_one();
        }
    });
    (reader, task)
}
