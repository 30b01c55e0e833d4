//! Registry credentials for image pulls, from the pod's `imagePullSecrets`
//! (`kubernetes.io/dockerconfigjson` and the older `kubernetes.io/dockercfg`): every entry whose
//! registry matches the image's, tried in order.

use base64::Engine as _;
use k8s_cri::v1::AuthConfig;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;

/// The registry host of an image reference, as Docker resolves it.
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_owned()
        }
        _ => "docker.io".to_owned(),
    }
}

/// Whether a docker config key (`https://index.docker.io/v1/`, `registry:5000`, …) names
/// `registry`.
fn matches(key: &str, registry: &str) -> bool {
    let host = key
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let docker_hub =
        |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    host == registry || docker_hub(host) && docker_hub(registry)
}

/// The credentials in one docker config (`auths` or the bare legacy map) for `registry`.
pub fn from_docker_config(config: &serde_json::Value, registry: &str) -> Vec<AuthConfig> {
    let auths = config.get("auths").unwrap_or(config);
    let Some(entries) = auths.as_object() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|(key, _)| matches(key, registry))
        .map(|(key, entry)| {
            let text = |field: &str| {
                entry
                    .get(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let (mut username, mut password) = (text("username"), text("password"));
            let auth = text("auth");
            if username.is_empty()
                && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(&auth)
                && let Some((user, pass)) = String::from_utf8_lossy(&decoded).split_once(':')
            {
                username = user.to_owned();
                password = pass.to_owned();
            }
            AuthConfig {
                username,
                password,
                auth,
                server_address: key.clone(),
                identity_token: text("identitytoken"),
                registry_token: text("registrytoken"),
            }
        })
        .collect()
}

/// The credentials the pod's pull secrets hold for `image`'s registry. Secrets that cannot
/// be read are skipped (the pull is then tried without them), as the kubelet does.
pub async fn credentials(client: &kube::Client, pod: &Pod, image: &str) -> Vec<AuthConfig> {
    let registry = registry_of(image);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut found = Vec::new();
    for reference in pod
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
    {
        let Ok(Some(secret)) = secrets.get_opt(&reference.name).await else {
            tracing::warn!(secret = %reference.name, "cannot read an image pull secret");
            continue;
        };
        let data = secret.data.unwrap_or_default();
        for key in [".dockerconfigjson", ".dockercfg"] {
            if let Some(bytes) = data.get(key)
                && let Ok(config) = serde_json::from_slice::<serde_json::Value>(&bytes.0)
            {
                found.extend(from_docker_config(&config, &registry));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registries_resolve_as_docker_does() {
        assert_eq!(registry_of("busybox"), "docker.io");
        assert_eq!(registry_of("library/busybox:1"), "docker.io");
        assert_eq!(registry_of("localhost:5000/x"), "localhost:5000");
        assert_eq!(registry_of("quay.io/a/b"), "quay.io");
    }

    #[test]
    fn docker_configs_give_credentials_for_their_registry() {
        let config = json!({"auths": {
            "localhost:5000": {"auth": base64::engine::general_purpose::STANDARD.encode("me:secret")},
            "https://index.docker.io/v1/": {"username": "hub", "password": "pw"},
        }});
        let local = from_docker_config(&config, "localhost:5000");
        assert_eq!(local.len(), 1);
        assert_eq!(
            (local[0].username.as_str(), local[0].password.as_str()),
            ("me", "secret")
        );
        let hub = from_docker_config(&config, "docker.io");
        assert_eq!(hub.len(), 1);
        assert_eq!(hub[0].username, "hub");
        assert!(from_docker_config(&config, "quay.io").is_empty());
    }
}
