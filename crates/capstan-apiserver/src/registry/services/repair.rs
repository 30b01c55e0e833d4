//! The allocation repair loop every server runs, as upstream's `ipallocator-repair-controller`
//! (`repairip.go`) and node port repair (`portallocator/controller/repair.go`) do: it finds what
//! a crash or an older version left behind and fixes it.
//!
//! - A Service whose cluster IP has no IPAddress gets one (Services stored before allocation
//!   moved to IPAddress objects, or whose address was lost); one whose IPAddress names another
//!   parent that no longer holds it gets it back; two Services with one address are reported.
//! - An IPAddress the allocator made whose Service is gone, or no longer holds the address, is
//!   deleted once it is older than the grace period (upstream's 60 s: a Service being created
//!   has its address before it is stored).
//! - The node port bitmap is rebuilt from the Services: a port a Service holds is marked; a
//!   marked port no Service holds is freed after it was seen so in three passes in a row
//!   (upstream's `numRepairsBeforeLeakCleanup`), for the same reason.
//!
//! Each change is made with the same conditional writes as allocation, so the loops of several
//! servers and their allocations never undo each other.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

use super::ports::Bitmap;
use super::{Allocators, IP_FAMILY, MANAGED_BY, cluster_ips, node_ports};
use crate::registry::object::meta_str;
use crate::registry::{DeleteOptions, ListOptions, Registries, WriteOptions};
use crate::status::ApiError;

/// How many passes in a row a marked port must be held by no Service before it is freed.
const PASSES_BEFORE_LEAK_CLEANUP: u32 = 3;

/// How often the loop runs and how old an unheld IPAddress must be to be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairTiming {
    /// Between passes.
    pub interval: Duration,
    /// The age an IPAddress without its Service reaches before it is released.
    pub grace: Duration,
}

impl Default for RepairTiming {
    fn default() -> Self {
        RepairTiming {
            interval: Duration::from_secs(30),
            grace: Duration::from_secs(60),
        }
    }
}

/// One pass, awaited: what the server runs before it answers its first request.
pub(crate) async fn first_pass(
    registries: Arc<Registries>,
    allocators: Arc<Allocators>,
    timing: RepairTiming,
) {
    let mut repair = Repair::new(registries, allocators, timing);
    if let Err(error) = repair.pass().await {
        tracing::warn!(error = ?error.status().to_json(), "the first allocation repair pass failed");
    }
}

/// Starts the loop: a pass per interval, the first one an interval from now.
pub(crate) fn start(
    registries: Arc<Registries>,
    allocators: Arc<Allocators>,
    timing: RepairTiming,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut repair = Repair::new(registries, allocators, timing);
        loop {
            tokio::time::sleep(timing.interval).await;
            if let Err(error) = repair.pass().await {
                tracing::warn!(error = ?error.status().to_json(), "the allocation repair pass failed");
            }
        }
    })
}

struct Repair {
    registries: Arc<Registries>,
    allocators: Arc<Allocators>,
    timing: RepairTiming,
    /// Marked ports held by no Service, with the passes in a row they were seen so.
    leaks: HashMap<u16, u32>,
}

fn key_of(svc: &Value) -> (String, String) {
    (
        meta_str(svc, "namespace").to_owned(),
        meta_str(svc, "name").to_owned(),
    )
}

fn managed(ip: &Value) -> bool {
    ip["metadata"]["labels"][MANAGED_BY.0] == MANAGED_BY.1
}

fn labels_right(ip: &Value) -> bool {
    managed(ip) && ip["metadata"]["labels"][IP_FAMILY] == "IPv4"
}

fn references_a_service(ip: &Value) -> bool {
    let parent = &ip["spec"]["parentRef"];
    parent["group"].as_str().unwrap_or_default().is_empty() && parent["resource"] == "services"
}

fn parent_of(ip: &Value) -> (String, String) {
    let parent = &ip["spec"]["parentRef"];
    (
        parent["namespace"].as_str().unwrap_or_default().to_owned(),
        parent["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// How long ago `object` was created.
fn age(object: &Value) -> Duration {
    meta_str(object, "creationTimestamp")
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .and_then(|created| {
            let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(created);
            Duration::try_from(elapsed).ok()
        })
        .unwrap_or_default()
}

impl Repair {
    fn new(registries: Arc<Registries>, allocators: Arc<Allocators>, timing: RepairTiming) -> Self {
        Repair {
            registries,
            allocators,
            timing,
            leaks: HashMap::new(),
        }
    }

    async fn pass(&mut self) -> Result<(), ApiError> {
        self.repair_ips().await?;
        self.repair_ports().await
    }

    async fn list(&self, group: &str, plural: &str) -> Result<Vec<Value>, ApiError> {
        let Some(registry) = self.registries.get(group, "v1", plural) else {
            return Ok(Vec::new());
        };
        Ok(registry
            .list(None, &ListOptions::default())
            .await?
            .items
            .iter()
            .map(|item| item.object())
            .collect())
    }

    /// Makes each Service's cluster IP and its IPAddress agree, and releases IPAddresses
    /// held by no Service. The IPAddresses are listed before the Services, so that an address
    /// made and stored meanwhile is met as held.
    async fn repair_ips(&self) -> Result<(), ApiError> {
        let addresses: BTreeMap<String, Value> = self
            .list("networking.k8s.io", "ipaddresses")
            .await?
            .into_iter()
            .map(|ip| (meta_str(&ip, "name").to_owned(), ip))
            .collect();
        let services: HashMap<(String, String), Value> = self
            .list("", "services")
            .await?
            .into_iter()
            .map(|svc| (key_of(&svc), svc))
            .collect();
        let ips = &self.allocators.ips;
        let registry = ips.addresses()?;
        for ((namespace, name), svc) in &services {
            for ip in cluster_ips(svc) {
                if !ips.cidr.contains(ip) {
                    tracing::warn!(%ip, %namespace, %name, "the ClusterIP [IPv4]: {ip} for Service {namespace}/{name} is not within any service CIDR; please recreate");
                    continue;
                }
                let Some(address) = addresses.get(&ip.to_string()) else {
                    // Listed before the Services: it may have been made since.
                    if self.create(ip, namespace, name).await? {
                        tracing::warn!(
                            "the ClusterIP [IPv4]: {ip} for Service {namespace}/{name} is not allocated; repairing"
                        );
                    }
                    continue;
                };
                if !references_a_service(address) {
                    tracing::warn!(
                        "the ClusterIP [IPv4]: {ip} for Service {namespace}/{name} has a wrong reference; repairing"
                    );
                    self.recreate(address, ip, namespace, name).await?;
                    continue;
                }
                let parent = parent_of(address);
                if parent != (namespace.clone(), name.clone()) {
                    match services.get(&parent) {
                        Some(other) if cluster_ips(other).contains(&ip) => {
                            tracing::warn!(
                                "the cluster IP [IPv4]:{ip} for service {namespace}/{name} was assigned to other services {}/{}; please recreate",
                                parent.0,
                                parent.1
                            );
                        }
                        _ => {
                            tracing::warn!(
                                "the ClusterIP [IPv4]: {ip} for Service {namespace}/{name} has a wrong reference; repairing"
                            );
                            self.recreate(address, ip, namespace, name).await?;
                        }
                    }
                    continue;
                }
                if !labels_right(address) {
                    self.recreate(address, ip, namespace, name).await?;
                }
            }
        }
        let services_registry = self.registries.core("services");
        for (ip, address) in &addresses {
            if !managed(address) {
                continue;
            }
            if !references_a_service(address) {
                tracing::warn!(
                    "IPAddress {ip} appears to have been modified, not referencing a Service: cleaning up"
                );
                self.delete(address, &registry).await?;
                continue;
            }
            let parent = parent_of(address);
            let held = services
                .get(&parent)
                .is_some_and(|svc| cluster_ips(svc).iter().any(|c| c.to_string() == *ip));
            if held || age(address) < self.timing.grace {
                continue;
            }
            // Read the Service again: it may have been stored since the list.
            if let Some(services) = &services_registry
                && let Ok(svc) = services.get(Some(&parent.0), &parent.1).await
                && cluster_ips(&svc).iter().any(|c| c.to_string() == *ip)
            {
                continue;
            }
            tracing::warn!("IPAddress {ip} appears to have leaked: cleaning up");
            self.delete(address, &registry).await?;
        }
        Ok(())
    }

    /// Makes the IPAddress of `ip` for the Service `namespace/name`; `false` when one exists.
    async fn create(&self, ip: Ipv4Addr, namespace: &str, name: &str) -> Result<bool, ApiError> {
        let registry = self.allocators.ips.addresses()?;
        match registry
            .create(
                None,
                super::ips::ip_address(ip, namespace, name),
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => Ok(true),
            // Made meanwhile: the next pass looks at it again.
            Err(error) if error.status().code() == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn recreate(
        &self,
        address: &Value,
        ip: Ipv4Addr,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let registry = self.allocators.ips.addresses()?;
        self.delete(address, &registry).await?;
        self.create(ip, namespace, name).await.map(drop)
    }

    /// Deletes `address` as it was listed (not one made since under its name).
    async fn delete(
        &self,
        address: &Value,
        registry: &crate::registry::Registry,
    ) -> Result<(), ApiError> {
        let options = DeleteOptions {
            precondition_uid: Some(meta_str(address, "uid").to_owned()),
            ..DeleteOptions::default()
        };
        match registry
            .delete(None, meta_str(address, "name"), &options)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if matches!(error.status().code(), 404 | 409) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Rebuilds the node port bitmap from the Services: read first, then the Services listed,
    /// then written only if nothing changed it meanwhile.
    async fn repair_ports(&mut self) -> Result<(), ApiError> {
        let ports = &self.allocators.ports;
        let (stored, revision) = ports.read().await?;
        let services = self.list("", "services").await?;
        let mut holders: BTreeMap<u16, Vec<(String, String)>> = BTreeMap::new();
        for svc in &services {
            for port in node_ports(svc) {
                holders.entry(port).or_default().push(key_of(svc));
            }
        }
        let mut findings = Vec::new();
        let repaired = repair_bitmap(&stored, &holders, &mut self.leaks, &mut findings);
        // What a raced pass found may be an allocation made meanwhile: told only once the
        // repair is written (the next pass looks again).
        if repaired == stored || ports.write(&repaired, revision).await? {
            for finding in findings {
                tracing::warn!("{finding}");
            }
        }
        Ok(())
    }
}

/// The bitmap the Services' node ports (`holders`, by port) make of `stored`: every held port
/// marked; a marked port nobody holds kept until it has been seen so in
/// [`PASSES_BEFORE_LEAK_CLEANUP`] passes (counted in `leaks`), then freed.
fn repair_bitmap(
    stored: &Bitmap,
    holders: &BTreeMap<u16, Vec<(String, String)>>,
    leaks: &mut HashMap<u16, u32>,
    findings: &mut Vec<String>,
) -> Bitmap {
    let mut repaired = stored.clone();
    for (port, services) in holders {
        leaks.remove(port);
        let (namespace, name) = &services[0];
        if !stored.in_range(*port) {
            findings.push(format!("the node port {port} for service {namespace}/{name} is not within the port range; please recreate"));
            continue;
        }
        if services.len() > 1 {
            findings.push(format!("the node port {port} for service {namespace}/{name} was assigned to multiple services; please recreate"));
        }
        if !stored.has(*port) {
            findings.push(format!(
                "the node port {port} for service {namespace}/{name} is not allocated; repairing"
            ));
            repaired.set(*port);
        }
    }
    leaks.retain(|port, _| stored.has(*port));
    for port in stored.held().clone() {
        if holders.contains_key(&port) {
            continue;
        }
        let seen = leaks.entry(port).or_insert(0);
        *seen += 1;
        if *seen >= PASSES_BEFORE_LEAK_CLEANUP {
            findings.push(format!(
                "the node port {port} appears to have leaked: cleaning up"
            ));
            repaired.clear(port);
            leaks.remove(&port);
        }
    }
    repaired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_held_are_marked_and_leaks_freed_after_three_passes() {
        let mut stored = Bitmap::empty(30000, 30010);
        stored.set(30001);
        stored.set(30002);
        let mut holders = BTreeMap::new();
        holders.insert(30002, vec![("ns".to_owned(), "a".to_owned())]);
        holders.insert(30003, vec![("ns".to_owned(), "b".to_owned())]);
        holders.insert(40000, vec![("ns".to_owned(), "c".to_owned())]);
        let mut leaks = HashMap::new();
        let first = repair_bitmap(&stored, &holders, &mut leaks, &mut Vec::new());
        // 30003 was missing: marked; 30001 is held by nobody: kept for now.
        assert_eq!(
            first.held().iter().copied().collect::<Vec<_>>(),
            [30001, 30002, 30003]
        );
        let second = repair_bitmap(&first, &holders, &mut leaks, &mut Vec::new());
        assert!(second.has(30001));
        let third = repair_bitmap(&second, &holders, &mut leaks, &mut Vec::new());
        assert_eq!(
            third.held().iter().copied().collect::<Vec<_>>(),
            [30002, 30003]
        );
        assert!(leaks.is_empty());
        // A port held again before the third pass is not freed.
        let mut stored = third.clone();
        stored.set(30004);
        let once = repair_bitmap(&stored, &holders, &mut leaks, &mut Vec::new());
        holders.insert(30004, vec![("ns".to_owned(), "d".to_owned())]);
        let _ = repair_bitmap(&once, &holders, &mut leaks, &mut Vec::new());
        holders.remove(&30004);
        let again = repair_bitmap(&once, &holders, &mut leaks, &mut Vec::new());
        assert!(
            again.has(30004),
            "the count starts over once the port is held"
        );
    }

    /// What a Service stored before IPAddresses and the bitmap (or whose allocations were
    /// lost) holds is accounted for by one pass, and a leaked IPAddress released once old.
    #[tokio::test]
    async fn a_pass_restores_lost_allocations_and_releases_leaks() {
        let dir = tempfile::tempdir().unwrap();
        let (api, _) = crate::test_support::bootstrapped(dir.path(), false).await;
        let registries = api.registries().clone();
        let services = registries.core("services").unwrap();
        let svc = serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "old", "namespace": "default"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        let svc = services
            .create(Some("default"), svc, &WriteOptions::default())
            .await
            .unwrap()
            .object;
        let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
        let port = u16::try_from(svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap()).unwrap();
        // Lose both allocations, and leak an address.
        let addresses = api.allocators().ips.addresses().unwrap();
        addresses
            .delete(None, &ip, &DeleteOptions::default())
            .await
            .unwrap();
        let ports = &api.allocators().ports;
        let (_, revision) = ports.read().await.unwrap();
        assert!(
            ports
                .write(&Bitmap::empty(30000, 32767), revision)
                .await
                .unwrap()
        );
        addresses
            .create(
                None,
                super::super::ips::ip_address("10.43.9.9".parse().unwrap(), "default", "gone"),
                &WriteOptions::default(),
            )
            .await
            .unwrap();

        let timing = RepairTiming {
            interval: Duration::from_secs(1),
            grace: Duration::from_secs(3600),
        };
        first_pass(registries.clone(), api.allocators().clone(), timing).await;
        let restored = addresses.get(None, &ip).await.unwrap();
        assert_eq!(restored["spec"]["parentRef"]["name"], "old");
        assert!(ports.read().await.unwrap().0.has(port));
        // Younger than the grace period: kept (its Service may be on its way).
        assert!(addresses.get(None, "10.43.9.9").await.is_ok());
        let timing = RepairTiming {
            grace: Duration::ZERO,
            ..timing
        };
        first_pass(registries.clone(), api.allocators().clone(), timing).await;
        assert!(addresses.get(None, "10.43.9.9").await.is_err());
        assert!(
            addresses.get(None, &ip).await.is_ok(),
            "a held address stays"
        );
    }
}
