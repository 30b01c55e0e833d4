//! The endpoints of the `kubernetes` Service: every running API server, as upstream's
//! lease-based endpoint reconciler keeps them. Each server holds a Lease in `kube-system`
//! (`capstan-apiserver-<address>-<port>`, labelled `apiserver.kubernetes.io/identity:
//! kube-apiserver`, renewed every 10 s for 15 s); the `default/kubernetes` Endpoints (marked
//! not to be mirrored) and EndpointSlice list the addresses of the Leases that have not
//! expired, so a server that stops drops out within 15 s and several servers on one etcd all
//! appear. In-cluster clients reach the servers through the Service's cluster IP.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::api::Api;
use crate::registry::{ListOptions, WriteOptions};
use crate::status::ApiError;

/// How often a server renews its Lease and rewrites the endpoints.
const INTERVAL: Duration = Duration::from_secs(10);
/// How long a Lease stands unrenewed (upstream's master lease TTL).
const LEASE_SECONDS: i64 = 15;
/// The label of the servers' Leases, and its value.
const IDENTITY_LABEL: (&str, &str) = ("apiserver.kubernetes.io/identity", "kube-apiserver");
/// The Service, its namespace, and its port's name.
const SERVICE: &str = "kubernetes";
const NAMESPACE: &str = "default";
const LEASE_NAMESPACE: &str = "kube-system";

/// This server's Lease name.
fn lease_name(address: IpAddr, port: u16) -> String {
    let address = address.to_string().replace(['.', ':'], "-");
    format!("capstan-apiserver-{address}-{port}")
}

fn now_micro() -> String {
    let now = Timestamp::now();
    format!("{}", now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

/// Starts reconciling for a server reached at `address`:`port`; stops when the handle is
/// aborted.
pub(crate) fn start(api: Arc<Api>, address: IpAddr, port: u16) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = reconcile(&api, address, port).await {
                tracing::warn!(%error, "cannot reconcile the kubernetes service's endpoints");
            }
            tokio::time::sleep(INTERVAL).await;
        }
    })
}

/// Renews this server's Lease, then writes the endpoints of every server whose Lease stands.
pub(crate) async fn reconcile(api: &Api, address: IpAddr, port: u16) -> Result<(), String> {
    let error = |e: ApiError| e.status().to_json().to_string();
    let leases = api
        .registry("coordination.k8s.io", "v1", "leases")
        .ok_or("no leases")?;
    let name = lease_name(address, port);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
                     "labels": {IDENTITY_LABEL.0: IDENTITY_LABEL.1}},
        "spec": {"holderIdentity": format!("{address}:{port}"),
                 "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now_micro()},
    });
    match leases.get(Some(LEASE_NAMESPACE), &name).await {
        Ok(mut current) => {
            current["spec"] = lease["spec"].clone();
            current["metadata"]["labels"] = lease["metadata"]["labels"].clone();
            leases
                .update(
                    Some(LEASE_NAMESPACE),
                    &name,
                    current,
                    None,
                    &WriteOptions::default(),
                )
                .await
                .map_err(error)?;
        }
        Err(_) => {
            leases
                .create(Some(LEASE_NAMESPACE), lease, &WriteOptions::default())
                .await
                .map_err(error)?;
        }
    }
    let listed = leases
        .list(Some(LEASE_NAMESPACE), &ListOptions::default())
        .await
        .map_err(error)?;
    let now = Timestamp::now();
    let mut addresses: Vec<IpAddr> = listed
        .items
        .iter()
        .map(|item| item.object())
        .filter(|lease| lease["metadata"]["labels"][IDENTITY_LABEL.0] == IDENTITY_LABEL.1)
        .filter_map(|lease| live_address(&lease, now))
        .collect();
    addresses.sort();
    addresses.dedup();
    write_endpoints(api, &addresses, port).await
}

/// The address of a Lease that has not expired.
fn live_address(lease: &Value, now: Timestamp) -> Option<IpAddr> {
    let spec = &lease["spec"];
    let renewed: Timestamp = spec["renewTime"].as_str()?.parse().ok()?;
    let duration = spec["leaseDurationSeconds"]
        .as_i64()
        .unwrap_or(LEASE_SECONDS);
    if renewed.as_second() + duration < now.as_second() {
        return None;
    }
    let holder = spec["holderIdentity"].as_str()?;
    let (address, _) = holder.rsplit_once(':')?;
    address.trim_matches(['[', ']']).parse().ok()
}

/// Writes the Endpoints and EndpointSlice of the `kubernetes` Service, when they differ.
async fn write_endpoints(api: &Api, addresses: &[IpAddr], port: u16) -> Result<(), String> {
    let error = |e: ApiError| e.status().to_json().to_string();
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
    // Compared and written in the form the registry stores.
    let (endpoints, slice) = (
        capstan_api::gojson::normalize(&endpoints),
        capstan_api::gojson::normalize(&slice),
    );
    for (group, plural, object, fields) in [
        ("", "endpoints", endpoints, ["subsets", "subsets"]),
        (
            "discovery.k8s.io",
            "endpointslices",
            slice,
            ["endpoints", "ports"],
        ),
    ] {
        let registry = api.registry(group, "v1", plural).ok_or("no registry")?;
        match registry.get(Some(NAMESPACE), SERVICE).await {
            Ok(current) => {
                let same = fields.iter().all(|f| current.get(*f) == object.get(*f))
                    && current["metadata"]["labels"] == object["metadata"]["labels"];
                if same {
                    continue;
                }
                let mut updated = object.clone();
                updated["metadata"]["resourceVersion"] =
                    current["metadata"]["resourceVersion"].clone();
                registry
                    .update(
                        Some(NAMESPACE),
                        SERVICE,
                        updated,
                        None,
                        &WriteOptions::default(),
                    )
                    .await
                    .map_err(error)?;
            }
            Err(_) => {
                registry
                    .create(Some(NAMESPACE), object, &WriteOptions::default())
                    .await
                    .map_err(error)?;
            }
        }
    }
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
            json!({"spec": {"holderIdentity": "192.0.2.7:6443", "leaseDurationSeconds": 15,
                            "renewTime": renewed}})
        };
        assert_eq!(
            live_address(&lease("2026-11-27T11:59:50.000000Z"), now),
            Some(IpAddr::from([192, 0, 2, 7]))
        );
        assert_eq!(
            live_address(&lease("2026-11-27T11:59:40.000000Z"), now),
            None
        );
        assert_eq!(
            lease_name(IpAddr::from([10, 0, 0, 1]), 6443),
            "capstan-apiserver-10-0-0-1-6443"
        );
    }
}
