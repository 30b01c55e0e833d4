//! Upstream's ServiceAccount admission plugin, for new pods:
//!
//! - a pod without `serviceAccountName` gets `default` (the deprecated `serviceAccount`
//!   mirrors it, as upstream's conversion writes it);
//! - the service account must exist: read from the watch cache, else from the store (ten
//!   times, 100-200 ms apart, for `default`, which the service account controller is expected to
//!   create in a new namespace), else the pod is refused with 403;
//! - unless the pod or the service account sets `automountServiceAccountToken: false`, every
//!   container and init container that does not already mount something at
//!   `/var/run/secrets/kubernetes.io/serviceaccount` mounts there, read-only, a projected volume
//!   `kube-api-access-<5 random characters>`: a service account token (3607 s), the
//!   `kube-root-ca.crt` ConfigMap's `ca.crt` and the pod's namespace;
//! - a pod without image pull secrets gets its service account's;
//! - a service account annotated `kubernetes.io/enforce-mountable-secrets: "true"` limits the
//!   secrets its pods may use to the ones it lists;
//! - mirror pods (`kubernetes.io/config.mirror`) are not changed, and may not name a service
//!   account, secrets or service account token projections.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::{GroupResource, StatusError};
use serde_json::{Value, json};

use super::{Mutation, Plugin, Review, Validation, Verdict};
use crate::registry::Registry;
use crate::registry::object::generate_name;
use crate::status::ApiError;

/// The service account of pods that name none.
pub(crate) const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where containers find their token, CA bundle and namespace.
pub(crate) const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the projected volume's name.
pub(crate) const VOLUME_PREFIX: &str = "kube-api-access-";
/// The annotation marking mirror pods.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The annotation with which a service account limits its pods' secrets.
const ENFORCE_MOUNTABLE_SECRETS: &str = "kubernetes.io/enforce-mountable-secrets";
/// How often `default` is looked for in the store before a pod is refused.
const DEFAULT_ATTEMPTS: usize = 10;

/// The plugin, reading service accounts from `accounts`.
#[derive(Debug)]
pub(crate) struct ServiceAccountAdmission {
    accounts: Arc<Registry>,
}

fn forbidden(pod: &Value, reason: &str) -> ApiError {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    StatusError::forbidden(GroupResource::new("", "pods"), name, reason).into()
}

fn namespace_of(pod: &Value) -> &str {
    pod["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn is_mirror(pod: &Value) -> bool {
    pod["metadata"]["annotations"]
        .get(MIRROR_ANNOTATION)
        .is_some()
}

/// Go's `strconv.ParseBool` for true.
fn parses_true(text: &str) -> bool {
    matches!(text, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// The projected volume of upstream's `TokenVolumeSource`.
pub(crate) fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {
                    "expirationSeconds": crate::authn::serviceaccount::WARN_ONLY_EXPIRATION_SECONDS,
                    "path": "token",
                }},
                {"configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }},
                {"downwardAPI": {
                    "items": [{
                        "path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    }],
                }},
            ],
        },
    })
}

/// Mounts the token volume in every container and init container not already mounting
/// something at [`MOUNT_PATH`], adding the volume (a `kube-api-access-*` volume the pod has is
/// reused) when one of them does.
pub(crate) fn mount_token(spec: &mut serde_json::Map<String, Value>) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|volumes| {
            volumes
                .iter()
                .filter_map(|v| v["name"].as_str())
                .find(|name| name.starts_with(VOLUME_PREFIX))
                .map(str::to_owned)
        });
    let name = existing
        .clone()
        .unwrap_or_else(|| generate_name(VOLUME_PREFIX));
    let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut() {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let mounts = container
                .entry("volumeMounts")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !mounts.is_array() {
                *mounts = Value::Array(Vec::new());
            }
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if !mounts.iter().any(|m| m["mountPath"] == MOUNT_PATH) {
                mounts.push(mount.clone());
                needed = true;
            }
        }
    }
    if existing.is_none() && needed {
        let volumes = spec
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !volumes.is_array() {
            *volumes = Value::Array(Vec::new());
        }
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(token_volume(&name));
        }
    }
}

/// Whether a token is mounted: the pod's choice, else the service account's, else yes.
fn automounts(pod: &Value, account: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// Every container of every kind in a pod spec.
fn all_containers(spec: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |list| {
            spec[list]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |c| (list, c))
        })
}

/// Whether a pod spec names any secret (upstream's `VisitPodSecretNames`).
fn names_secrets(spec: &Value) -> bool {
    let present = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    if spec["imagePullSecrets"]
        .as_array()
        .is_some_and(|s| s.iter().any(|r| present(&r["name"])))
    {
        return true;
    }
    for (_, container) in all_containers(spec) {
        let env_from = container["envFrom"].as_array().into_iter().flatten();
        if env_from
            .into_iter()
            .any(|e| present(&e["secretRef"]["name"]))
        {
            return true;
        }
        let env = container["env"].as_array().into_iter().flatten();
        if env
            .into_iter()
            .any(|e| present(&e["valueFrom"]["secretKeyRef"]["name"]))
        {
            return true;
        }
    }
    spec["volumes"].as_array().into_iter().flatten().any(|v| {
        present(&v["secret"]["secretName"])
            || present(&v["azureFile"]["secretName"])
            || present(&v["csi"]["nodePublishSecretRef"]["name"])
            || [
                "cephfs",
                "cinder",
                "flexVolume",
                "rbd",
                "scaleIO",
                "iscsi",
                "storageos",
            ]
            .iter()
            .any(|plugin| present(&v[*plugin]["secretRef"]["name"]))
            || v["projected"]["sources"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| present(&s["secret"]["name"])))
    })
}

/// Upstream's check of the secrets a pod may use under an enforcing service account.
fn limit_secret_references(spec: &Value, account: &Value) -> Result<(), String> {
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_owned))
            .collect()
    };
    let account_name = account["metadata"]["name"].as_str().unwrap_or_default();
    let mountable = names(&account["secrets"]);
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let Some(secret) = volume["secret"].as_object() else {
            continue;
        };
        let secret = secret
            .get("secretName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !mountable.iter().any(|m| m == secret) {
            return Err(format!(
                "volume with secret.secretName=\"{secret}\" is not allowed because service account \
                 {account_name} does not reference that secret"
            ));
        }
    }
    for (list, label) in [
        ("initContainers", "init container"),
        ("containers", "container"),
    ] {
        for container in spec[list].as_array().into_iter().flatten() {
            for env in container["env"].as_array().into_iter().flatten() {
                let Some(secret) = env["valueFrom"]["secretKeyRef"]["name"].as_str() else {
                    continue;
                };
                if !mountable.iter().any(|m| m == secret) {
                    return Err(format!(
                        "{label} {} with envVar {} referencing secret.secretName=\"{secret}\" is \
                         not allowed because service account {account_name} does not reference \
                         that secret",
                        container["name"].as_str().unwrap_or_default(),
                        env["name"].as_str().unwrap_or_default(),
                    ));
                }
            }
        }
    }
    let pull = names(&account["imagePullSecrets"]);
    for (i, reference) in spec["imagePullSecrets"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = reference["name"].as_str().unwrap_or_default();
        if !pull.iter().any(|p| p == name) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account \
                 {account_name} does not reference that imagePullSecret"
            ));
        }
    }
    Ok(())
}

impl ServiceAccountAdmission {
    /// The plugin over the ServiceAccount registry.
    pub(crate) fn new(accounts: Arc<Registry>) -> Self {
        ServiceAccountAdmission { accounts }
    }

    /// The service account `name` in `namespace`: the cache's, else the store's (retried for
    /// `default`); upstream's error otherwise.
    async fn account(&self, namespace: &str, name: &str) -> Result<Value, String> {
        if let Ok(cached) = self.accounts.read(Some(namespace), name, Some("0")).await {
            return Ok(cached.object());
        }
        let attempts = if name == DEFAULT_SERVICE_ACCOUNT {
            DEFAULT_ATTEMPTS
        } else {
            1
        };
        let pause = Duration::from_millis(100 + rand::random_range(0..100));
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
            }
            match self.accounts.get(Some(namespace), name).await {
                Ok(account) => return Ok(account),
                Err(error) if error.status().code() == 404 => {}
                Err(error) => {
                    return Err(error.status().status.message.clone().unwrap_or_default());
                }
            }
        }
        Err(format!(
            "serviceaccount {} not found",
            capstan_api::field::go_quote(name)
        ))
    }

    async fn account_or_forbidden(&self, pod: &Value, name: &str) -> Result<Value, ApiError> {
        let namespace = namespace_of(pod);
        self.account(namespace, name).await.map_err(|error| {
            forbidden(
                pod,
                &format!("error looking up service account {namespace}/{name}: {error}"),
            )
        })
    }

    /// The mutating step, for a pod being created.
    async fn mutate_pod(&self, pod: &mut Value) -> Result<(), ApiError> {
        if is_mirror(pod) {
            return self.validate_pod(pod).await;
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let text = |key: &str| {
            spec.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let name = text("serviceAccountName")
            .or_else(|| text("serviceAccount"))
            .unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_owned());
        spec.insert("serviceAccountName".into(), json!(name));
        spec.insert("serviceAccount".into(), json!(name));
        let account = self.account_or_forbidden(pod, &name).await?;
        let mount = automounts(pod, &account);
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        if mount {
            mount_token(spec);
        }
        let has_pull_secrets = spec
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .is_some_and(|s| !s.is_empty());
        let account_pull_secrets: Vec<Value> = account["imagePullSecrets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| json!({"name": s["name"].as_str().unwrap_or_default()}))
            .collect();
        if !has_pull_secrets && !account_pull_secrets.is_empty() {
            spec.insert(
                "imagePullSecrets".into(),
                Value::Array(account_pull_secrets),
            );
        }
        Ok(())
    }

    /// The validating step, for a pod being created.
    async fn validate_pod(&self, pod: &Value) -> Result<(), ApiError> {
        let spec = &pod["spec"];
        let account_name = spec["serviceAccountName"].as_str().unwrap_or_default();
        if is_mirror(pod) {
            if !account_name.is_empty() {
                return Err(forbidden(
                    pod,
                    "a mirror pod may not reference service accounts",
                ));
            }
            if names_secrets(spec) {
                return Err(forbidden(pod, "a mirror pod may not reference secrets"));
            }
            for volume in spec["volumes"].as_array().into_iter().flatten() {
                for source in volume["projected"]["sources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if source.get("serviceAccountToken").is_some() {
                        return Err(forbidden(
                            pod,
                            "a mirror pod may not use ServiceAccountToken volume projections",
                        ));
                    }
                    if source.get("clusterTrustBundle").is_some() {
                        return Err(forbidden(
                            pod,
                            "a mirror pod may not use ClusterTrustBundle projected volume sources",
                        ));
                    }
                }
            }
            return Ok(());
        }
        if account_name.is_empty() {
            return Err(forbidden(
                pod,
                &format!(
                    "no service account specified for pod {}/{}",
                    namespace_of(pod),
                    pod["metadata"]["name"].as_str().unwrap_or_default()
                ),
            ));
        }
        let account = self.account_or_forbidden(pod, account_name).await?;
        let enforce = account["metadata"]["annotations"][ENFORCE_MOUNTABLE_SECRETS]
            .as_str()
            .is_some_and(parses_true);
        if enforce {
            limit_secret_references(spec, &account).map_err(|e| forbidden(pod, &e))?;
        }
        Ok(())
    }
}

impl Plugin for ServiceAccountAdmission {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            match object {
                Some(pod) if attrs.creates_core("pods") => self.mutate_pod(pod).await,
                _ => Ok(()),
            }
        })
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            if !attrs.creates_core("pods") {
                return Ok(());
            }
            self.validate_pod(object).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn every_container_mounts_one_projected_volume() {
        let mut pod = spec(json!({
            "initContainers": [{"name": "init", "image": "i"}],
            "containers": [
                {"name": "a", "image": "i", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "b", "image": "i", "volumeMounts": [{"name": "own", "mountPath": MOUNT_PATH}]},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "own", "emptyDir": {}}],
        }));
        mount_token(&mut pod);
        let volumes = pod["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 3);
        let name = volumes[2]["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX), "{name}");
        let suffix = &name[VOLUME_PREFIX.len()..];
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{suffix}"
        );
        assert_eq!(volumes[2], token_volume(name));
        assert_eq!(
            volumes[2]["projected"],
            json!({"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]})
        );
        let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
        assert_eq!(pod["initContainers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(pod["containers"][0]["volumeMounts"][1], mount);
        assert_eq!(
            pod["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1,
            "a container mounting the path itself is left alone"
        );
    }

    #[test]
    fn an_existing_token_volume_is_reused_and_nothing_is_added_when_no_one_needs_it() {
        let mut pod = spec(json!({
            "containers": [{"name": "a", "image": "i"}],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": []}}],
        }));
        mount_token(&mut pod);
        assert_eq!(pod["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(
            pod["containers"][0]["volumeMounts"][0]["name"],
            "kube-api-access-abcde"
        );
        let mut mounted = spec(json!({
            "containers": [{"name": "a", "image": "i",
                "volumeMounts": [{"name": "x", "mountPath": MOUNT_PATH}]}],
        }));
        mount_token(&mut mounted);
        assert!(mounted.get("volumes").is_none());
    }

    #[test]
    fn automount_is_the_pods_choice_then_the_accounts() {
        let pod = |v: Value| json!({"spec": {"automountServiceAccountToken": v}});
        let account = |v: Value| json!({"automountServiceAccountToken": v});
        assert!(automounts(&pod(Value::Null), &account(Value::Null)));
        assert!(!automounts(&pod(Value::Null), &account(json!(false))));
        assert!(automounts(&pod(json!(true)), &account(json!(false))));
        assert!(!automounts(&pod(json!(false)), &account(json!(true))));
    }

    #[test]
    fn enforcing_accounts_limit_secrets() {
        let account = json!({"metadata": {"name": "sa"}, "secrets": [{"name": "ok"}],
            "imagePullSecrets": [{"name": "pull"}]});
        let allowed = json!({"volumes": [{"name": "v", "secret": {"secretName": "ok"}}],
            "containers": [{"name": "c", "env": [{"name": "E",
                "valueFrom": {"secretKeyRef": {"name": "ok", "key": "k"}}}]}],
            "imagePullSecrets": [{"name": "pull"}]});
        assert_eq!(limit_secret_references(&allowed, &account), Ok(()));
        let volume = json!({"volumes": [{"name": "v", "secret": {"secretName": "no"}}]});
        assert_eq!(
            limit_secret_references(&volume, &account),
            Err("volume with secret.secretName=\"no\" is not allowed because service account sa does not reference that secret".into())
        );
        let env = json!({"initContainers": [{"name": "i", "env": [{"name": "E",
            "valueFrom": {"secretKeyRef": {"name": "no", "key": "k"}}}]}]});
        assert_eq!(
            limit_secret_references(&env, &account),
            Err("init container i with envVar E referencing secret.secretName=\"no\" is not allowed because service account sa does not reference that secret".into())
        );
        let pull = json!({"imagePullSecrets": [{"name": "pull"}, {"name": "other"}]});
        assert_eq!(
            limit_secret_references(&pull, &account),
            Err("imagePullSecrets[1].name=\"other\" is not allowed because service account sa does not reference that imagePullSecret".into())
        );
    }

    #[test]
    fn secrets_are_found_wherever_a_pod_names_them() {
        assert!(!names_secrets(
            &json!({"containers": [{"name": "c"}], "volumes": [{"name": "e", "emptyDir": {}}]})
        ));
        for spec in [
            json!({"imagePullSecrets": [{"name": "s"}]}),
            json!({"containers": [{"envFrom": [{"secretRef": {"name": "s"}}]}]}),
            json!({"ephemeralContainers": [{"env": [{"name": "e", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}),
            json!({"volumes": [{"secret": {"secretName": "s"}}]}),
            json!({"volumes": [{"rbd": {"secretRef": {"name": "s"}}}]}),
            json!({"volumes": [{"projected": {"sources": [{"secret": {"name": "s"}}]}}]}),
        ] {
            assert!(names_secrets(&spec), "{spec}");
        }
    }
}
