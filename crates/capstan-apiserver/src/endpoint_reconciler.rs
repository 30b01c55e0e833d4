//! The endpoints of the `kubernetes` Service: every running API server, as upstream's
//! lease-based endpoint reconciler keeps them. Each server keeps a master lease in storage,
//! not in the API: the key `/registry/masterleases/<address>` (upstream's `/masterleases/`
//! under the storage prefix), holding an Endpoints object with the server's address whose
//! `generation` grows at each renewal, written every 10 s with a TTL of 15 s, so the store
//! deletes it once its server stops renewing it. The `default/kubernetes` Endpoints (marked not
//! to be mirrored) and EndpointSlice list the addresses of the master leases present, so a
//! server that stops drops out within 15 s and several servers on one etcd all appear.
//! In-cluster clients reach the servers through the Service's cluster IP. (The API servers'
//! Leases in `kube-system` are their identity Leases, [`crate::identity`], a separate matter, as
//! upstream keeps them.)
//!
//! The same mechanism lists the cluster DNS servers (`capstan-dns`) as the endpoints of the
//! `kube-system/kube-dns` Service: each DNS server holds a Lease `capstan-dns-<address>-<port>`
//! labelled `k8s-app: kube-dns` with holder `<address>:<port>` (written through the API by the
//! DNS server itself, so a DNS server that dies drops out even while its API server runs), and
//! every reconcile writes the Endpoints (`dns` UDP and `dns-tcp` TCP at each server's real
//! port, marked not to be mirrored) and EndpointSlices (`kube-dns`, one more,
//! `kube-dns-<port>`, per further port in use; managed by `endpoint-reconciler.capstan.io`) of
//! the Service, as long as it exists and has no selector (a Service with a selector, such as a
//! CoreDNS deployment's, belongs to the endpoints controllers).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use capstan_store::{ListOptions as StoreListOptions, Store, StoreError};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::registry::Registries;
use crate::registry::{ListOptions, WriteOptions};
use crate::status::ApiError;

/// How often a server renews its master lease and rewrites the endpoints.
const INTERVAL: Duration = Duration::from_secs(10);
/// How long a master lease stands unrenewed (upstream's master lease TTL), and how long the
/// DNS servers' Leases stand when they do not say.
const LEASE_SECONDS: i64 = 15;
/// Where the master leases are stored.
const MASTER_LEASES: &str = "/registry/masterleases/";
/// Attempts of one master lease renewal that lose a race with another write.
const MAX_LEASE_RETRIES: usize = 5;
/// The Service, its namespace, and its port's name.
const SERVICE: &str = "kubernetes";
const NAMESPACE: &str = "default";
/// The DNS servers' Service, namespace and Lease label.
const DNS_SERVICE: &str = "kube-dns";
const DNS_NAMESPACE: &str = "kube-system";
const DNS_LEASE_LABEL: (&str, &str) = ("k8s-app", "kube-dns");
/// The managed-by value of the DNS Service's EndpointSlices.
const DNS_MANAGED_BY: &str = "endpoint-reconciler.capstan.io";

/// A master lease: an Endpoints object holding the server's address, at a `generation`.
fn master_lease(address: IpAddr, generation: i64) -> Vec<u8> {
    json!({
        "kind": "Endpoints", "apiVersion": "v1",
        "metadata": {"generation": generation, "creationTimestamp": null},
        "subsets": [{"addresses": [{"ip": address.to_string()}]}],
    })
    .to_string()
    .into_bytes()
}

/// The address a stored master lease holds.
fn master_lease_address(value: &[u8]) -> Option<IpAddr> {
    let lease: Value = serde_json::from_slice(value).ok()?;
    lease["subsets"][0]["addresses"][0]["ip"]
        .as_str()?
        .parse()
        .ok()
}

/// Writes this server's master lease with a fresh TTL (a new generation, so that the write
/// is not one of the same value, which would leave the expiry as it was).
async fn update_master_lease(store: &Store, address: IpAddr) -> Result<(), StoreError> {
    let key = format!("{MASTER_LEASES}{address}");
    let ttl = Duration::from_secs(LEASE_SECONDS.unsigned_abs());
    let mut outcome = Ok(());
    for _ in 0..MAX_LEASE_RETRIES {
        outcome = match store.get(&key, None).await?.kv {
            Some(kv) => {
                let stored: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
                let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                let value = master_lease(address, generation);
                store
                    .update_with_ttl(&key, value, Some(kv.mod_revision), ttl)
                    .await
                    .map(drop)
            }
            None => store
                .create_with_ttl(&key, master_lease(address, 1), ttl)
                .await
                .map(drop),
        };
        match outcome {
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. })
            | Err(StoreError::AlreadyExists { .. }) => continue,
            _ => return outcome,
        }
    }
    outcome
}

/// The addresses of the master leases stored, sorted.
async fn master_lease_addresses(store: &Store) -> Result<Vec<IpAddr>, StoreError> {
    let listed = store.list(&StoreListOptions::prefix(MASTER_LEASES)).await?;
    let mut addresses: Vec<IpAddr> = listed
        .kvs
        .iter()
        .filter_map(|kv| master_lease_address(&kv.value))
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

/// The reconciler of a server reached at `address`:`port`, running until it is stopped
/// ([`Reconciler::leave`], at shutdown) or dropped.
pub(crate) struct Reconciler {
    registries: Arc<Registries>,
    store: Store,
    address: IpAddr,
    port: u16,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("address", &self.address)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// Starts reconciling every [`INTERVAL`].
    pub(crate) fn start(
        registries: Arc<Registries>,
        store: Store,
        address: IpAddr,
        port: u16,
    ) -> Reconciler {
        let task = {
            let (registries, store) = (registries.clone(), store.clone());
            tokio::spawn(async move {
                loop {
                    if let Err(error) = reconcile(&registries, &store, address, port).await {
                        tracing::warn!(%error, "cannot reconcile the kubernetes service's endpoints");
                    }
                    if let Err(error) = reconcile_dns(&registries).await {
                        tracing::warn!(%error, "cannot reconcile the kube-dns service's endpoints");
                    }
                    tokio::time::sleep(INTERVAL).await;
                }
            })
        };
        Reconciler {
            registries,
            store,
            address,
            port,
            task,
        }
    }

    /// Stops reconciling and takes this server out of the endpoints at once, as upstream's
    /// reconciler does when its server shuts down: the master lease is deleted rather than
    /// left to expire, and the endpoints are written from the leases that remain.
    pub(crate) async fn leave(mut self) {
        self.task.abort();
        // Once the task has ended no renewal of this server's lease can follow the delete.
        let _ = (&mut self.task).await;
        match remove(&self.registries, &self.store, self.address, self.port).await {
            Ok(()) => {
                tracing::info!(address = %self.address, "left the kubernetes service's endpoints")
            }
            Err(error) => tracing::warn!(%error, "cannot leave the kubernetes service's endpoints"),
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Deletes the master lease of `address`, then writes the endpoints of the servers whose
/// leases remain. With none left the endpoints stay as they are: as upstream's, the
/// reconciler never erases every endpoint of the `kubernetes` Service.
pub(crate) async fn remove(
    registries: &Registries,
    store: &Store,
    address: IpAddr,
    port: u16,
) -> Result<(), String> {
    let key = format!("{MASTER_LEASES}{address}");
    match store.delete(&key, None).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(error) => {
            return Err(format!(
                "cannot remove the master lease of {address}: {error}"
            ));
        }
    }
    let mut addresses = master_lease_addresses(store)
        .await
        .map_err(|e| format!("cannot list the master leases: {e}"))?;
    addresses.retain(|a| *a != address);
    if addresses.is_empty() {
        return Ok(());
    }
    write_endpoints(registries, &addresses, port).await
}

/// Renews this server's master lease, then writes the endpoints of every server whose master
/// lease stands.
pub(crate) async fn reconcile(
    registries: &Registries,
    store: &Store,
    address: IpAddr,
    port: u16,
) -> Result<(), String> {
    update_master_lease(store, address)
        .await
        .map_err(|e| format!("cannot renew the master lease of {address}: {e}"))?;
    let mut addresses = master_lease_addresses(store)
        .await
        .map_err(|e| format!("cannot list the master leases: {e}"))?;
    // This server is an endpoint even if its lease expired between the write and the list.
    if !addresses.contains(&address) {
        addresses.push(address);
        addresses.sort();
    }
    write_endpoints(registries, &addresses, port).await
}

/// The address and port (`<address>:<port>`) of the holder of a Lease that has not expired.
fn live_holder(lease: &Value, now: Timestamp) -> Option<(IpAddr, u16)> {
    let spec = &lease["spec"];
    let renewed: Timestamp = spec["renewTime"].as_str()?.parse().ok()?;
    let duration = spec["leaseDurationSeconds"]
        .as_i64()
        .unwrap_or(LEASE_SECONDS);
    if renewed.as_second() + duration < now.as_second() {
        return None;
    }
    let holder = spec["holderIdentity"].as_str()?;
    let (address, port) = holder.rsplit_once(':')?;
    Some((
        address.trim_matches(['[', ']']).parse().ok()?,
        port.parse().ok()?,
    ))
}

/// The DNS servers whose Leases stand, grouped by port (ascending), addresses sorted.
fn dns_servers(leases: &[Value], now: Timestamp) -> Vec<(u16, Vec<IpAddr>)> {
    let mut by_port: std::collections::BTreeMap<u16, Vec<IpAddr>> = Default::default();
    for lease in leases {
        if lease["metadata"]["labels"][DNS_LEASE_LABEL.0] != DNS_LEASE_LABEL.1 {
            continue;
        }
        if let Some((address, port)) = live_holder(lease, now) {
            by_port.entry(port).or_default().push(address);
        }
    }
    by_port
        .into_iter()
        .map(|(port, mut addresses)| {
            addresses.sort();
            addresses.dedup();
            (port, addresses)
        })
        .collect()
}

/// Writes the endpoints of the `kube-system/kube-dns` Service from the DNS servers' Leases,
/// when the Service exists without a selector.
pub(crate) async fn reconcile_dns(registries: &Registries) -> Result<(), String> {
    let error = |e: ApiError| e.status().to_json().to_string();
    let services = registries.get("", "v1", "services").ok_or("no services")?;
    let Ok(service) = services.get(Some(DNS_NAMESPACE), DNS_SERVICE).await else {
        return Ok(());
    };
    let selector = &service["spec"]["selector"];
    if selector.as_object().is_some_and(|s| !s.is_empty()) {
        return Ok(());
    }
    let leases = registries
        .get("coordination.k8s.io", "v1", "leases")
        .ok_or("no leases")?;
    let listed = leases
        .list(Some(DNS_NAMESPACE), &ListOptions::default())
        .await
        .map_err(error)?;
    let objects: Vec<Value> = listed.items.iter().map(|item| item.object()).collect();
    let groups = dns_servers(&objects, Timestamp::now());
    let dns_ports = |port: u16| {
        json!([{"name": "dns", "port": port, "protocol": "UDP"},
               {"name": "dns-tcp", "port": port, "protocol": "TCP"}])
    };
    let mut endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": DNS_SERVICE, "namespace": DNS_NAMESPACE,
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
    });
    if !groups.is_empty() {
        endpoints["subsets"] = groups
            .iter()
            .map(|(port, addresses)| {
                json!({
                    "addresses": addresses.iter().map(|a| json!({"ip": a.to_string()})).collect::<Vec<_>>(),
                    "ports": dns_ports(*port),
                })
            })
            .collect();
    }
    let slice = |name: String, port: Option<u16>, addresses: &[IpAddr]| {
        let ipv4 = addresses.iter().all(IpAddr::is_ipv4);
        let mut slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": DNS_NAMESPACE,
                         "labels": {"kubernetes.io/service-name": DNS_SERVICE,
                                    "endpointslice.kubernetes.io/managed-by": DNS_MANAGED_BY}},
            "addressType": if ipv4 { "IPv4" } else { "IPv6" },
            "endpoints": addresses.iter().map(|a| json!({
                "addresses": [a.to_string()], "conditions": {"ready": true},
            })).collect::<Vec<_>>(),
        });
        if let Some(port) = port {
            slice["ports"] = dns_ports(port);
        }
        slice
    };
    let mut objects = vec![("", "endpoints", DNS_SERVICE.to_owned(), endpoints)];
    if groups.is_empty() {
        objects.push((
            "discovery.k8s.io",
            "endpointslices",
            DNS_SERVICE.to_owned(),
            slice(DNS_SERVICE.to_owned(), None, &[]),
        ));
    }
    for (i, (port, addresses)) in groups.iter().enumerate() {
        let name = if i == 0 {
            DNS_SERVICE.to_owned()
        } else {
            format!("{DNS_SERVICE}-{port}")
        };
        objects.push((
            "discovery.k8s.io",
            "endpointslices",
            name.clone(),
            slice(name, Some(*port), addresses),
        ));
    }
    let wanted: Vec<String> = objects
        .iter()
        .filter(|o| o.1 == "endpointslices")
        .map(|o| o.2.clone())
        .collect();
    for (group, plural, name, object) in objects {
        let fields: [&str; 2] = if plural == "endpoints" {
            ["subsets", "subsets"]
        } else {
            ["endpoints", "ports"]
        };
        write_if_changed(
            registries,
            group,
            plural,
            DNS_NAMESPACE,
            &name,
            object,
            fields,
        )
        .await?;
    }
    // Slices of ports no server uses any more.
    let slices = registries
        .get("discovery.k8s.io", "v1", "endpointslices")
        .ok_or("no registry")?;
    let listed = slices
        .list(Some(DNS_NAMESPACE), &ListOptions::default())
        .await
        .map_err(error)?;
    for item in &listed.items {
        let object = item.object();
        let labels = &object["metadata"]["labels"];
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if labels["kubernetes.io/service-name"] == DNS_SERVICE
            && labels["endpointslice.kubernetes.io/managed-by"] == DNS_MANAGED_BY
            && !wanted.iter().any(|w| w == name)
        {
            slices
                .delete(Some(DNS_NAMESPACE), name, &Default::default())
                .await
                .map_err(error)?;
        }
    }
    Ok(())
}

/// Writes `object` (`namespace/name`) unless the stored one has the same `fields` and labels.
async fn write_if_changed(
    registries: &Registries,
    group: &str,
    plural: &str,
    namespace: &str,
    name: &str,
    object: Value,
    fields: [&str; 2],
) -> Result<(), String> {
    let error = |e: ApiError| e.status().to_json().to_string();
    // Compared and written in the form the registry stores.
    let object = capstan_api::gojson::normalize(&object);
    let registry = registries.get(group, "v1", plural).ok_or("no registry")?;
    match registry.get(Some(namespace), name).await {
        Ok(current) => {
            let same = fields.iter().all(|f| current.get(*f) == object.get(*f))
                && current["metadata"]["labels"] == object["metadata"]["labels"];
            if same {
                return Ok(());
            }
            let mut updated = object;
            updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            registry
                .update(
                    Some(namespace),
                    name,
                    updated,
                    None,
                    &WriteOptions::default(),
                )
                .await
                .map_err(error)?;
        }
        Err(_) => {
            registry
                .create(Some(namespace), object, &WriteOptions::default())
                .await
                .map_err(error)?;
        }
    }
    Ok(())
}

/// Writes the Endpoints and EndpointSlice of the `kubernetes` Service, when they differ.
async fn write_endpoints(
    registries: &Registries,
    addresses: &[IpAddr],
    port: u16,
) -> Result<(), String> {
    let ports = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
    let mut endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
    });
    if !addresses.is_empty() {
        endpoints["subsets"] = json!([{
            "addresses": addresses.iter().map(|a| json!({"ip": a.to_string()})).collect::<Vec<_>>(),
            "ports": ports,
        }]);
    }
    let ipv4 = addresses.iter().all(IpAddr::is_ipv4);
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {"kubernetes.io/service-name": SERVICE}},
        "addressType": if ipv4 { "IPv4" } else { "IPv6" },
        "endpoints": addresses.iter().map(|a| json!({
            "addresses": [a.to_string()], "conditions": {"ready": true},
        })).collect::<Vec<_>>(),
        "ports": ports,
    });
    write_if_changed(
        registries,
        "",
        "endpoints",
        NAMESPACE,
        SERVICE,
        endpoints,
        ["subsets", "subsets"],
    )
    .await?;
    write_if_changed(
        registries,
        "discovery.k8s.io",
        "endpointslices",
        NAMESPACE,
        SERVICE,
        slice,
        ["endpoints", "ports"],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leases_that_stand_count() {
        let now: Timestamp = "2026-11-27T12:00:00Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let lease = |renewed: &str| {
            json!({"spec": {"holderIdentity": "192.0.2.7:53", "leaseDurationSeconds": 15,
                            "renewTime": renewed}})
        };
        assert_eq!(
            live_holder(&lease("2026-11-27T11:59:50.000000Z"), now),
            Some((IpAddr::from([192, 0, 2, 7]), 53))
        );
        assert_eq!(
            live_holder(&lease("2026-11-27T11:59:40.000000Z"), now),
            None
        );
        let dns = |holder: &str, renewed: &str, label: &str| {
            json!({"metadata": {"labels": {"k8s-app": label}},
                   "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                            "renewTime": renewed}})
        };
        let leases = [
            dns("192.0.2.8:53", "2026-11-27T11:59:55.000000Z", "kube-dns"),
            dns("192.0.2.7:53", "2026-11-27T11:59:55.000000Z", "kube-dns"),
            dns("192.0.2.9:5353", "2026-11-27T11:59:55.000000Z", "kube-dns"),
            dns("192.0.2.10:53", "2026-11-27T11:59:00.000000Z", "kube-dns"),
            dns("192.0.2.11:53", "2026-11-27T11:59:55.000000Z", "other"),
        ];
        assert_eq!(
            dns_servers(&leases, now),
            vec![
                (
                    53,
                    vec![IpAddr::from([192, 0, 2, 7]), IpAddr::from([192, 0, 2, 8])]
                ),
                (5353, vec![IpAddr::from([192, 0, 2, 9])]),
            ]
        );
    }

    /// The endpoints of the kubernetes Service come from the master leases in storage: each
    /// server's renewal writes its own (a new generation each time, with a TTL), every server
    /// with one is listed, one whose lease is gone drops out, and no Lease object is written.
    #[tokio::test]
    async fn servers_are_listed_from_their_master_leases() {
        let dir = tempfile::tempdir().unwrap();
        let (api, store) = crate::test_support::bootstrapped(dir.path(), false).await;
        let registries = api.registries().clone();
        let (one, two) = (IpAddr::from([192, 0, 2, 1]), IpAddr::from([192, 0, 2, 2]));
        let addresses = || async {
            let endpoints = registries
                .core("endpoints")
                .unwrap()
                .get(Some(NAMESPACE), SERVICE)
                .await
                .unwrap();
            let slice = registries
                .get("discovery.k8s.io", "v1", "endpointslices")
                .unwrap()
                .get(Some(NAMESPACE), SERVICE)
                .await
                .unwrap();
            let from_endpoints: Vec<String> = endpoints["subsets"][0]["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a["ip"].as_str().unwrap().to_owned())
                .collect();
            let from_slice: Vec<String> = slice["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["addresses"][0].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(from_endpoints, from_slice);
            from_endpoints
        };
        let generation = |ip: IpAddr| {
            let store = store.clone();
            async move {
                let kv = store
                    .get(&format!("/registry/masterleases/{ip}"), None)
                    .await
                    .unwrap()
                    .kv
                    .unwrap();
                assert_eq!(master_lease_address(&kv.value), Some(ip));
                let lease: Value = serde_json::from_slice(&kv.value).unwrap();
                assert_eq!(lease["kind"], "Endpoints");
                lease["metadata"]["generation"].as_i64().unwrap()
            }
        };

        reconcile(&registries, &store, one, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1"]);
        assert_eq!(generation(one).await, 1);
        reconcile(&registries, &store, two, 6443).await.unwrap();
        reconcile(&registries, &store, one, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(generation(one).await, 2, "a renewal is a new write");
        assert_eq!(generation(two).await, 1);

        // The second server's lease expires (the store deletes it): it drops out.
        store
            .delete("/registry/masterleases/192.0.2.2", None)
            .await
            .unwrap();
        reconcile(&registries, &store, one, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1"]);

        // A server that shuts down removes its lease and drops out at once; the last one left
        // does not erase the endpoints.
        reconcile(&registries, &store, two, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1", "192.0.2.2"]);
        remove(&registries, &store, two, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1"]);
        let lease = store
            .get("/registry/masterleases/192.0.2.2", None)
            .await
            .unwrap();
        assert!(lease.kv.is_none(), "the leaving server's lease is deleted");
        remove(&registries, &store, one, 6443).await.unwrap();
        assert_eq!(addresses().await, ["192.0.2.1"]);
        let lease = store
            .get("/registry/masterleases/192.0.2.1", None)
            .await
            .unwrap();
        assert!(lease.kv.is_none(), "the last server's lease is deleted too");

        let leases = registries
            .get("coordination.k8s.io", "v1", "leases")
            .unwrap()
            .list(None, &ListOptions::default())
            .await
            .unwrap();
        assert!(leases.items.is_empty(), "no Lease objects are written");
    }
}
