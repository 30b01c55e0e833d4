//! The node IPAM controller (upstream's `nodeipam` with the range allocator): every node gets a
//! `podCIDR` of its own, the next free /24 of the cluster CIDR (`--cluster-cidr`, 10.42.0.0/16 by
//! default); ranges of deleted nodes are free again.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::runtime::{self, Change, Error, Queue, Setup, Task};

/// The node mask size (upstream's `--node-cidr-mask-size` for IPv4).
const NODE_MASK: u8 = 24;

/// An IPv4 range carved into per-node /24s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterCidr {
    base: u32,
    prefix: u8,
}

impl ClusterCidr {
    /// Parses `a.b.c.d/n` (n at most 24).
    pub fn parse(text: &str) -> Result<ClusterCidr, String> {
        let (ip, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{text:?} is not an IPv4 CIDR"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{text:?} has no valid prefix length"))?;
        if prefix > NODE_MASK {
            return Err(format!(
                "{text:?} is smaller than one /{NODE_MASK} per node"
            ));
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Ok(ClusterCidr {
            base: u32::from(ip) & mask,
            prefix,
        })
    }

    /// How many node ranges it holds.
    fn size(&self) -> u32 {
        1 << (NODE_MASK - self.prefix)
    }

    /// The `index`th node range.
    fn range(&self, index: u32) -> String {
        let ip = Ipv4Addr::from(self.base + (index << (32 - NODE_MASK)));
        format!("{ip}/{NODE_MASK}")
    }

    /// The index of `cidr` if it is one of its node ranges.
    fn index_of(&self, cidr: &str) -> Option<u32> {
        let (ip, prefix) = cidr.split_once('/')?;
        let ip = u32::from(ip.parse::<Ipv4Addr>().ok()?);
        if prefix != NODE_MASK.to_string()
            || ip.wrapping_sub(self.base) >> (32 - NODE_MASK) >= self.size()
            || ip < self.base
        {
            return None;
        }
        Some((ip - self.base) >> (32 - NODE_MASK))
    }
}

/// The ranges in use, and where the next search starts (upstream's allocator rotates).
#[derive(Debug, Default)]
struct Allocations {
    used: BTreeSet<u32>,
    next: u32,
}

impl Allocations {
    fn allocate(&mut self, size: u32) -> Option<u32> {
        (0..size)
            .map(|i| (self.next + i) % size)
            .find(|i| !self.used.contains(i))
            .inspect(|i| {
                self.used.insert(*i);
                self.next = (i + 1) % size;
            })
    }
}

/// The controller's shared state.
pub struct Context {
    client: Client,
    cidr: ClusterCidr,
    allocations: Mutex<Allocations>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("cidr", &self.cidr)
            .finish_non_exhaustive()
    }
}

/// Registers the informer handlers and returns the controller's run future (a warning and
/// nothing else when the cluster CIDR does not parse; the configuration is validated first).
pub fn start(mut setup: Setup<'_>) -> Task {
    let cidr = match ClusterCidr::parse(&setup.config().cluster_cidr) {
        Ok(cidr) => cidr,
        Err(error) => {
            tracing::warn!(%error, "nodeipam not started");
            return Box::pin(async {});
        }
    };
    let nodes = setup.watch::<Node>();
    let (queue, rx) = Queue::<Node>::new();
    let ctx = Arc::new(Context {
        client: setup.client(),
        cidr,
        allocations: Mutex::new(Allocations::default()),
    });
    {
        let ctx = ctx.clone();
        nodes.on_change(move |change| {
            let node = change.object();
            let own = pod_cidr(node).and_then(|c| ctx.cidr.index_of(c));
            let mut allocations = ctx.allocations.lock().unwrap_or_else(|e| e.into_inner());
            match (change, own) {
                (Change::Applied { .. }, Some(index)) => {
                    allocations.used.insert(index);
                }
                (Change::Applied { .. }, None) => queue.add(ObjectRef::from_obj(node)),
                (Change::Deleted(_), Some(index)) => {
                    allocations.used.remove(&index);
                }
                (Change::Deleted(_), None) => {}
            }
        });
    }
    // One at a time (the table's concurrency): allocations are decided against the ranges
    // already handed out.
    setup.run("nodeipam", &nodes, rx, ctx, reconcile)
}

fn pod_cidr(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .pod_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
}

/// Gives a node without a `podCIDR` the next free range.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    if pod_cidr(&node).is_some() {
        return Ok(Action::await_change());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(ctx.client.clone());
    // The informer's copy may predate this controller's own patch (a status update queued the
    // node again before the patch was seen): ask the API server before allocating twice.
    match api.get_opt(&name).await {
        Ok(Some(current)) => {
            if let Some(index) = pod_cidr(&current).and_then(|c| ctx.cidr.index_of(c)) {
                ctx.allocations
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .used
                    .insert(index);
                return Ok(Action::await_change());
            }
        }
        Ok(None) => return Ok(Action::await_change()),
        Err(error) => return Err(Error::Api(error)),
    }
    let Some(index) = ctx
        .allocations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .allocate(ctx.cidr.size())
    else {
        tracing::warn!(node = %name, "no pod CIDR left in the cluster CIDR");
        return Err(Error::Invalid(format!("no pod CIDR left for node {name}")));
    };
    let cidr = ctx.cidr.range(index);
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %name, %cidr, "pod CIDR allocated");
            Ok(Action::await_change())
        }
        Err(error) => {
            ctx.allocations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .used
                .remove(&index);
            if runtime::is_not_found(&error) {
                return Ok(Action::await_change());
            }
            Err(error.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_carved_and_recognised() {
        let cidr = ClusterCidr::parse("10.42.0.0/16").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cidr.size(), 256);
        assert_eq!(cidr.range(0), "10.42.0.0/24");
        assert_eq!(cidr.range(255), "10.42.255.0/24");
        assert_eq!(cidr.index_of("10.42.7.0/24"), Some(7));
        assert_eq!(cidr.index_of("10.43.0.0/24"), None);
        assert_eq!(cidr.index_of("10.41.255.0/24"), None);
        assert_eq!(cidr.index_of("10.42.7.0/25"), None);
        assert!(ClusterCidr::parse("10.42.0.0/25").is_err());
        assert_eq!(
            ClusterCidr::parse("10.42.3.4/16"),
            Ok(cidr),
            "host bits are cleared"
        );
    }

    #[test]
    fn allocation_skips_used_ranges_and_rotates() {
        let mut a = Allocations::default();
        a.used.insert(0);
        a.used.insert(2);
        assert_eq!(a.allocate(4), Some(1));
        assert_eq!(a.allocate(4), Some(3));
        assert_eq!(a.allocate(4), None);
        a.used.remove(&0);
        assert_eq!(a.allocate(4), Some(0));
    }
}
