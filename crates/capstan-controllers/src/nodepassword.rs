//! The node password cleaner (k3s's counterpart removes its node-password Secrets with their
//! Nodes): the Secret `kube-system/<node>.node-password.capstan` that the server keeps when a
//! machine first joins as `<node>` goes once that Node is deleted, so the name can be joined
//! again by another machine. A Secret whose Node this controller has not seen go is left alone
//! for a while (the agent registers its Node right after joining), and a Node's absence is
//! confirmed by a live read before the Secret is deleted.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::runtime::{self, Setup, Task};

/// How often the Secrets are checked.
const PERIOD: Duration = Duration::from_secs(5);
/// How old a Secret must be before a missing Node this controller never saw removes it.
const GRACE: Duration = Duration::from_secs(120);
/// The Secret type of node passwords.
pub const SECRET_TYPE: &str = "capstan.io/node-password";
/// The suffix of their names.
pub const SUFFIX: &str = ".node-password.capstan";

/// The node a node password Secret is for, if it is one.
pub fn node_of(secret: &Secret) -> Option<&str> {
    if secret.metadata.namespace.as_deref() != Some("kube-system")
        || secret.type_.as_deref() != Some(SECRET_TYPE)
    {
        return None;
    }
    secret
        .metadata
        .name
        .as_deref()?
        .strip_suffix(SUFFIX)
        .filter(|n| !n.is_empty())
}

/// Returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let secrets = setup.watch_by_fields::<Secret>("type=capstan.io/node-password");
    let nodes = setup.watch::<Node>();
    let (secret_store, node_store) = (secrets.store(), nodes.store());
    let synced = setup.synced();
    let client = setup.client();
    Box::pin(async move {
        synced.await;
        tracing::info!(controller = "node-password", "caches synced; starting");
        let mut seen = HashSet::new();
        loop {
            sweep(&client, &secret_store, &node_store, &mut seen).await;
            tokio::time::sleep(PERIOD).await;
        }
    })
}

/// One pass: `seen` holds the nodes with a password that existed at an earlier pass.
async fn sweep(
    client: &Client,
    secrets: &Store<Secret>,
    nodes: &Store<Node>,
    seen: &mut HashSet<String>,
) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut still = HashSet::new();
    for secret in secrets.state() {
        let Some(node) = node_of(&secret) else {
            continue;
        };
        if nodes.get(&ObjectRef::new(node)).is_some() {
            still.insert(node.to_owned());
            continue;
        }
        let young = secret
            .metadata
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| now.duration_since(t.0).as_secs() < GRACE.as_secs() as i64);
        if young && !seen.contains(node) {
            continue;
        }
        let live: Api<Node> = Api::all(client.clone());
        if !matches!(live.get_metadata_opt(node).await, Ok(None)) {
            still.insert(node.to_owned());
            continue;
        }
        let name = secret.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(%node, "node-password: the node is gone; its password is released")
            }
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => tracing::warn!(secret = %name, %error, "node-password: cannot delete"),
        }
    }
    *seen = still;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(namespace: &str, name: &str, type_: &str) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_node_password_secrets_name_a_node() {
        assert_eq!(
            node_of(&secret(
                "kube-system",
                "n1.example.node-password.capstan",
                SECRET_TYPE
            )),
            Some("n1.example")
        );
        assert_eq!(
            node_of(&secret("default", "n1.node-password.capstan", SECRET_TYPE)),
            None
        );
        assert_eq!(
            node_of(&secret("kube-system", "n1.node-password.capstan", "Opaque")),
            None
        );
        assert_eq!(
            node_of(&secret(
                "kube-system",
                ".node-password.capstan",
                SECRET_TYPE
            )),
            None
        );
    }
}
