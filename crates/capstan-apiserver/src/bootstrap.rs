//! The objects every cluster has from its first start, written by the server itself before it
//! answers its first request.

use serde_json::json;

use crate::registry::services::Cidr;
use crate::registry::{Registries, WriteOptions};
use crate::status::ApiError;

/// The default StorageClass a new cluster gets (unless `--disable-default-storageclass`):
/// Capstan's local-path provisioner, binding once a pod is scheduled, deleting a volume with
/// its claim, growing claims on request.
pub(crate) fn default_storage_class() -> serde_json::Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "local-path",
            "annotations": {capstan_api::fit::volume::ANN_DEFAULT_CLASS: "true"},
        },
        "provisioner": capstan_api::fit::volume::LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true,
    })
}

/// Default objects every cluster has at start: the system namespaces, the system priority
/// classes, the default ServiceCIDR and the `kubernetes` service pointing at the API server's
/// `port`; with
/// `storage_class`, the default StorageClass ([`default_storage_class`]) when the cluster is
/// new (its `kube-system` namespace made by this start), so that a class the user edited or
/// removed is left as it is.
pub(crate) async fn ensure_defaults(
    registries: &Registries,
    service_cidr: Cidr,
    port: u16,
    storage_class: bool,
) -> Result<(), ApiError> {
    let Some(namespaces) = registries.core("namespaces") else {
        return Ok(());
    };
    let mut new_cluster = false;
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match namespaces
            .create(None, object, &WriteOptions::default())
            .await
        {
            Ok(_) => new_cluster |= name == "kube-system",
            Err(error) if error.status().code() == 409 => {}
            Err(error) => return Err(error),
        }
    }
    if storage_class
        && new_cluster
        && let Some(classes) = registries.get("storage.k8s.io", "v1", "storageclasses")
    {
        match classes
            .create(None, default_storage_class(), &WriteOptions::default())
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
    ensure_default_service_cidr(registries, service_cidr).await?;
    if let Some(services) = registries.core("services")
        && services.get(Some("default"), "kubernetes").await.is_err()
    {
        let svc = crate::registry::services::kubernetes_service(service_cidr, port);
        let created = services
            .create(Some("default"), svc, &WriteOptions::default())
            .await;
        // Another server starting on the same datastore may make it first (and take its
        // address): what counts is that it exists.
        if let Err(error) = created
            && services.get(Some("default"), "kubernetes").await.is_err()
        {
            return Err(error);
        }
    }
    Ok(())
}

/// The default ServiceCIDR, `kubernetes`, holding the configured range, made and marked Ready
/// as upstream's default-servicecidr controller does (with no reason, as upstream's condition);
/// one that holds other CIDRs (another server's configuration) is left as it is, with a
/// warning.
async fn ensure_default_service_cidr(
    registries: &Registries,
    service_cidr: Cidr,
) -> Result<(), ApiError> {
    let Some(cidrs) = registries.get("networking.k8s.io", "v1", "servicecidrs") else {
        return Ok(());
    };
    let name = crate::registry::services::DEFAULT_SERVICE_CIDR;
    let object = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "spec": {"cidrs": [service_cidr.to_string()]},
    });
    match cidrs.create(None, object, &WriteOptions::default()).await {
        Ok(_) => {}
        Err(error) if error.status().code() == 409 => {}
        Err(error) => return Err(error),
    }
    let mut current = cidrs.get(None, name).await?;
    if current["spec"]["cidrs"] != json!([service_cidr.to_string()]) {
        tracing::warn!(
            configured = %service_cidr,
            stored = %current["spec"]["cidrs"],
            "the default ServiceCIDR holds other CIDRs than this server's --service-cidr"
        );
        return Ok(());
    }
    let ready = current["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if !ready {
        current["status"] = json!({"conditions": [{
            "type": "Ready",
            "status": "True",
            "lastTransitionTime": crate::registry::object::now_rfc3339(),
            "reason": "",
            "message": "Kubernetes default Service CIDR is ready",
        }]});
        match cidrs
            .update(
                None,
                name,
                current,
                Some("status"),
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => {}
            // Another server marked it meanwhile.
            Err(error) if error.status().code() == 409 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_default_class_is_made_once_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (api, _) = crate::test_support::bootstrapped(dir.path(), true).await;
        let registries = api.registries();
        let classes = registries
            .get("storage.k8s.io", "v1", "storageclasses")
            .unwrap();
        let class = classes.get(None, "local-path").await.unwrap();
        assert_eq!(class["provisioner"], "capstan.io/local-path");
        assert_eq!(class["volumeBindingMode"], "WaitForFirstConsumer");
        assert_eq!(
            class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
            "true"
        );
        // Removed by its user, it stays removed across restarts.
        classes
            .delete(None, "local-path", &Default::default())
            .await
            .unwrap();
        ensure_defaults(registries, api.service_cidr(), 6443, true)
            .await
            .unwrap();
        assert!(classes.get(None, "local-path").await.is_err());
    }

    #[tokio::test]
    async fn a_cluster_made_without_the_default_class_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let (api, _) = crate::test_support::bootstrapped(dir.path(), false).await;
        let classes = api
            .registries()
            .get("storage.k8s.io", "v1", "storageclasses")
            .unwrap();
        assert!(classes.get(None, "local-path").await.is_err());
    }
}
