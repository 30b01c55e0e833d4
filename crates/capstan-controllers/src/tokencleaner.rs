//! The bootstrap token cleaner (upstream's `tokencleaner`): deletes bootstrap token Secrets
//! (`bootstrap.kubernetes.io/token` in `kube-system`) once their `expiration` has passed.
//! The API server stops accepting a token at its expiration whether or not it is deleted; this
//! only keeps expired ones from piling up. Checked every few seconds against the informer's
//! cache, so the deletion follows the expiration closely.

use std::time::Duration;

use capstan_api::bootstraptoken::{NAMESPACE, SECRET_TYPE};

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::reflector::Store;

use crate::runtime::{self, Setup, Task};

/// How often expirations are checked.
const PERIOD: Duration = Duration::from_secs(5);

/// Whether bootstrap token Secret `secret` has expired at `now` (seconds since the epoch): an
/// `expiration` that does not parse counts as expired, as upstream's.
pub fn expired(secret: &Secret, now: i64) -> bool {
    if secret.metadata.namespace.as_deref() != Some(NAMESPACE)
        || secret.type_.as_deref() != Some(SECRET_TYPE)
    {
        return false;
    }
    // A client that wrote `stringData` has had it folded into `data` by the server.
    let expiration = secret
        .data
        .as_ref()
        .and_then(|d| d.get("expiration"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .unwrap_or_default();
    capstan_api::bootstraptoken::expired(&expiration, now)
}

/// Returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let secrets = setup.watch_by_fields::<Secret>("type=bootstrap.kubernetes.io/token");
    let store = secrets.store();
    let synced = setup.synced();
    let client = setup.client();
    Box::pin(async move {
        synced.await;
        tracing::info!(controller = "tokencleaner", "caches synced; starting");
        loop {
            sweep(&client, &store).await;
            tokio::time::sleep(PERIOD).await;
        }
    })
}

async fn sweep(client: &Client, store: &Store<Secret>) {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    for secret in store.state() {
        if !expired(&secret, now) || secret.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = secret.metadata.name.clone().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(secret = %name, "tokencleaner: deleted an expired bootstrap token")
            }
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => tracing::warn!(secret = %name, %error, "tokencleaner: cannot delete"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> k8s_openapi::ByteString {
        k8s_openapi::ByteString(text.as_bytes().to_vec())
    }

    fn secret(namespace: &str, type_: &str, expiration: Option<&str>) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("bootstrap-token-abcdef".into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: expiration.map(|e| [("expiration".to_owned(), bytes(e))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_expired_bootstrap_tokens_in_kube_system_go() {
        let now = 1_800_000_000; // 2027-01-15
        assert!(expired(
            &secret("kube-system", SECRET_TYPE, Some("2026-01-01T00:00:00Z")),
            now
        ));
        assert!(expired(
            &secret("kube-system", SECRET_TYPE, Some("soon")),
            now
        ));
        assert!(!expired(
            &secret("kube-system", SECRET_TYPE, Some("2030-01-01T00:00:00Z")),
            now
        ));
        assert!(!expired(&secret("kube-system", SECRET_TYPE, None), now));
        assert!(!expired(
            &secret("default", SECRET_TYPE, Some("2026-01-01T00:00:00Z")),
            now
        ));
        assert!(!expired(
            &secret("kube-system", "Opaque", Some("2026-01-01T00:00:00Z")),
            now
        ));
    }
}
