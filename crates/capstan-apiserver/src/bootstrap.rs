//! The objects every cluster has from its first start, written by the server itself before it
//! answers its first request.

use serde_json::json;

use crate::registry::services::Cidr;
use crate::registry::{Registries, WriteOptions};
use crate::status::ApiError;

/// Default objects every cluster has at start: the system namespaces, the system priority
/// classes, and the `kubernetes` service pointing at the API server's `port`.
pub(crate) async fn ensure_defaults(
    registries: &Registries,
    service_cidr: Cidr,
    port: u16,
) -> Result<(), ApiError> {
    let Some(namespaces) = registries.core("namespaces") else {
        return Ok(());
    };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match namespaces
            .create(None, object, &WriteOptions::default())
            .await
        {
            Ok(_) => {}
            Err(error) if error.status().code() == 409 => {}
            Err(error) => return Err(error),
        }
    }
    if let Some(classes) = registries.get("scheduling.k8s.io", "v1", "priorityclasses") {
        for class in crate::admission::priority::system_classes() {
            match classes.create(None, class, &WriteOptions::default()).await {
                Ok(_) => {}
                Err(error) if error.status().code() == 409 => {}
                Err(error) => return Err(error),
            }
        }
    }
    if let Some(services) = registries.core("services")
        && services.get(Some("default"), "kubernetes").await.is_err()
    {
        {
            let svc = crate::registry::services::kubernetes_service(service_cidr, port);
            let created = services
                .create(Some("default"), svc, &WriteOptions::default())
                .await;
            match created {
                Ok(_) => {}
                Err(error) if error.status().code() == 409 => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}
