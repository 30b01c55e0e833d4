//! How clients find the DNS server: the `kube-system/kube-dns` Service (the cluster DNS IP,
//! ports `dns` 53/UDP and `dns-tcp` 53/TCP, upstream's labels, no selector), created at start
//! when missing, and a Lease per running server (`capstan-dns-<address>-<port>` in
//! `kube-system`, labelled `k8s-app: kube-dns`, holder `<address>:<port>`, renewed every 10 s
//! for 15 s). The API server's endpoint reconciler turns the Leases that stand into the
//! Service's Endpoints and EndpointSlice, exactly as it does for the `kubernetes` Service, so
//! every running server is listed and one that stops or dies drops out.
//!
//! The Service has no `metrics` port: this server exports no Prometheus metrics, and a port
//! no endpoint serves would only be rejected by the service proxy.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// The namespace of the Service and the Leases.
pub const NAMESPACE: &str = "kube-system";
/// The Service's name.
pub const SERVICE: &str = "kube-dns";
/// The label (and value) of the DNS servers' Leases, the one upstream's kube-dns pods carry.
pub const LEASE_LABEL: (&str, &str) = ("k8s-app", "kube-dns");
/// How often the Lease is renewed.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How long a Lease stands unrenewed.
pub const LEASE_SECONDS: i32 = 15;

/// Errors while registering.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The API refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be built.
    #[error("cannot build the {0}: {1}")]
    Build(&'static str, serde_json::Error),
}

/// The `kube-dns` Service for the cluster DNS address `cluster_ip`.
pub fn kube_dns_service(cluster_ip: IpAddr) -> Result<Service, RegisterError> {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": SERVICE,
            "namespace": NAMESPACE,
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "CoreDNS",
            },
        },
        "spec": {
            "clusterIP": cluster_ip.to_string(),
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }))
    .map_err(|e| RegisterError::Build("kube-dns Service", e))
}

/// Creates the `kube-dns` Service unless it exists (an existing one is left as it is, and a
/// different cluster IP only noted).
pub async fn ensure_service(client: &Client, cluster_ip: IpAddr) -> Result<(), RegisterError> {
    let api: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let existing = api
        .get_opt(SERVICE)
        .await
        .map_err(|source| RegisterError::Api {
            what: "cannot read the kube-dns Service",
            source,
        })?;
    if let Some(existing) = existing {
        let ip = existing.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
        if ip != cluster_ip.to_string() {
            tracing::debug!(
                existing = %ip, wanted = %cluster_ip,
                "the kube-dns Service has another cluster IP; leaving it as it is"
            );
        }
        return Ok(());
    }
    match api
        .create(&PostParams::default(), &kube_dns_service(cluster_ip)?)
        .await
    {
        Ok(_) => {
            tracing::info!(%cluster_ip, "created the kube-dns Service");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(RegisterError::Api {
            what: "cannot create the kube-dns Service",
            source,
        }),
    }
}

/// The Lease name of a server reached at `address`.
pub fn lease_name(address: SocketAddr) -> String {
    let ip = address.ip().to_string().replace(['.', ':'], "-");
    format!("capstan-dns-{ip}-{}", address.port())
}

/// The current time as a Lease's `MicroTime`.
fn now() -> String {
    Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Creates or renews the Lease of a server reached at `address`.
pub async fn renew_lease(client: &Client, address: SocketAddr) -> Result<(), RegisterError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let name = lease_name(address);
    let spec = json!({
        "holderIdentity": address.to_string(),
        "leaseDurationSeconds": LEASE_SECONDS,
        "renewTime": now(),
    });
    let error = |what| move |source| RegisterError::Api { what, source };
    match api
        .get_opt(&name)
        .await
        .map_err(error("cannot read the DNS Lease"))?
    {
        Some(mut lease) => {
            lease.spec = Some(
                serde_json::from_value(spec).map_err(|e| RegisterError::Build("DNS Lease", e))?,
            );
            lease
                .metadata
                .labels
                .get_or_insert_default()
                .insert(LEASE_LABEL.0.to_owned(), LEASE_LABEL.1.to_owned());
            api.replace(&name, &PostParams::default(), &lease)
                .await
                .map_err(error("cannot renew the DNS Lease"))?;
        }
        None => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": NAMESPACE,
                             "labels": {LEASE_LABEL.0: LEASE_LABEL.1}},
                "spec": spec,
            }))
            .map_err(|e| RegisterError::Build("DNS Lease", e))?;
            api.create(&PostParams::default(), &lease)
                .await
                .map_err(error("cannot create the DNS Lease"))?;
        }
    }
    Ok(())
}

/// Deletes the Lease of a server reached at `address` (as it stops, so it drops out of the
/// endpoints at the next reconcile rather than when the Lease runs out).
pub async fn release_lease(client: &Client, address: SocketAddr) -> Result<(), RegisterError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    match api
        .delete(&lease_name(address), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(RegisterError::Api {
            what: "cannot delete the DNS Lease",
            source,
        }),
    }
}

/// Keeps the Service and this server's Lease: the Service is recreated whenever it is missing
/// (checked with every renewal), the Lease renewed every [`RENEW_INTERVAL`].
pub async fn run(client: Client, cluster_ip: Option<IpAddr>, address: SocketAddr) {
    loop {
        if let Some(ip) = cluster_ip
            && let Err(error) = ensure_service(&client, ip).await
        {
            tracing::warn!(%error, "cannot ensure the kube-dns Service");
        }
        if let Err(error) = renew_lease(&client, address).await {
            tracing::warn!(%error, "cannot renew the DNS server's Lease");
        }
        tokio::time::sleep(RENEW_INTERVAL).await;
    }
}
