//! API aggregation, as upstream's kube-aggregator: `apiregistration.k8s.io/v1` APIServices
//! register group-versions, served here (local ones, one per built-in group-version and one
//! per custom resource group-version, written by the server itself) or by an extension API
//! server behind a Service, to which requests for that group-version are passed on
//! ([`proxy`]) once authenticated and authorized here.
//!
//! - [`Aggregator`] compiles the APIServices backed by a Service (those whose group-version
//!   this server does not serve itself) once per version of their set, and keeps what each
//!   listed at its last discovery check, for the discovery documents.
//! - [`available`] is upstream's availability controller: every APIService's `Available`
//!   condition (local ones always; others once their Service, its endpoints and a discovery
//!   request answer), with upstream's reasons and messages.
//! - [`ensure_local`] writes the local APIServices at start, with upstream's priorities;
//!   [`publish_authentication`] the `kube-system/extension-apiserver-authentication`
//!   ConfigMap, which tells extension API servers how this server's front proxy identifies
//!   users (its client CA, the front proxy's CA and headers).

pub(crate) mod available;
pub(crate) mod proxy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use capstan_api::apiregistration::APIService;
use capstan_api::catalog;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use serde_json::{Value, json};

use crate::pki::{FRONT_PROXY_CLIENT, FrontProxy};
use crate::registry::{ListOptions, Registries, Registry, WriteOptions};
use crate::status::ApiError;

/// The group and version priorities upstream gives its built-in group-versions (their order
/// in discovery), `(group, version)`.
fn priority(group: &str, version: &str) -> (i32, i32) {
    match (group, version) {
        ("", _) | ("apiregistration.k8s.io", _) => (18000, if group.is_empty() { 1 } else { 15 }),
        ("apps", _) => (17800, 15),
        ("events.k8s.io", _) => (17750, 15),
        ("authentication.k8s.io", _) => (17700, 15),
        ("authorization.k8s.io", _) => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", _) => (17500, 15),
        ("batch", _) => (17400, 15),
        ("certificates.k8s.io", _) => (17300, 15),
        ("networking.k8s.io", _) => (17200, 15),
        ("policy", _) => (17100, 15),
        ("rbac.authorization.k8s.io", _) => (17000, 15),
        ("storage.k8s.io", _) => (16800, 15),
        ("admissionregistration.k8s.io" | "apiextensions.k8s.io", _) => (16700, 15),
        ("scheduling.k8s.io", _) => (16600, 15),
        ("coordination.k8s.io", _) => (16500, 15),
        ("node.k8s.io", _) => (16300, 15),
        ("discovery.k8s.io", _) => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", _) => (16100, 21),
        // Custom resources' groups, as upstream's CRD registration controller writes them.
        _ => (1000, 100),
    }
}

/// The name of the APIService of `group`/`version`: `<version>.<group>`.
pub(crate) fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// A local APIService for `group`/`version`.
pub(crate) fn local(group: &str, version: &str) -> Value {
    let (group_priority, version_priority) = priority(group, version);
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": name_of(group, version), "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
        "spec": {"group": group, "version": version,
                 "groupPriorityMinimum": group_priority, "versionPriority": version_priority},
    })
}

/// Writes the local APIService of every built-in group-version that lacks one.
pub(crate) async fn ensure_local(registries: &Registries) -> Result<(), ApiError> {
    let Some(services) = registries.get("apiregistration.k8s.io", "v1", "apiservices") else {
        return Ok(());
    };
    let mut seen = std::collections::HashSet::new();
    for resource in catalog::resources() {
        if !seen.insert((resource.group, resource.version)) {
            continue;
        }
        create_if_missing(&services, None, local(resource.group, resource.version)).await?;
    }
    Ok(())
}

/// The local APIService of the built-in Metrics API (`v1beta1.metrics.k8s.io`, metrics-server's
/// priorities) when `served`; otherwise the one an earlier start wrote is deleted, so that an
/// extension API server (a real metrics-server) can register the group-version.
pub(crate) async fn ensure_metrics(registries: &Registries, served: bool) -> Result<(), ApiError> {
    use capstan_api::resourcemetrics::{GROUP, VERSION};
    let Some(services) = registries.get("apiregistration.k8s.io", "v1", "apiservices") else {
        return Ok(());
    };
    if served {
        let mut object = local(GROUP, VERSION);
        let (group_priority, version_priority) = crate::handlers::resourcemetrics::PRIORITY;
        object["spec"]["groupPriorityMinimum"] = group_priority.into();
        object["spec"]["versionPriority"] = version_priority.into();
        return create_if_missing(&services, None, object).await;
    }
    let name = name_of(GROUP, VERSION);
    let existing = match services.read(None, &name, None).await {
        Ok(existing) => existing.object(),
        Err(error) if error.status().code() == 404 => return Ok(()),
        Err(error) => return Err(error),
    };
    let ours = existing["metadata"]["labels"][AUTOMANAGED] == "onstart"
        && existing["spec"]["service"].is_null();
    if ours {
        match services.delete(None, &name, &Default::default()).await {
            Ok(_) => {}
            Err(error) if error.status().code() == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The label of the local APIServices written for custom resources' group-versions (and the
/// value upstream's CRD registration controller gives it).
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Makes the local APIServices of custom resources those of the group-versions in `served`:
/// one created for each that has none, and those written for group-versions no longer served
/// deleted (as upstream's CRD registration controller; an APIService someone else wrote is
/// left alone).
pub(crate) async fn sync_custom(
    registries: &Registries,
    served: &std::collections::BTreeSet<(String, String)>,
) -> Result<(), ApiError> {
    let Some(services) = registries.get("apiregistration.k8s.io", "v1", "apiservices") else {
        return Ok(());
    };
    let cached = ListOptions {
        resource_version: Some("0".to_owned()),
        ..ListOptions::default()
    };
    let existing: Vec<Value> = services
        .list(None, &cached)
        .await?
        .items
        .iter()
        .map(|item| item.object())
        .collect();
    for (group, version) in served {
        let name = name_of(group, version);
        if !existing
            .iter()
            .any(|s| s["metadata"]["name"] == name.as_str())
        {
            let mut object = local(group, version);
            object["metadata"]["labels"][AUTOMANAGED] = json!("true");
            create_if_missing(&services, None, object).await?;
        }
    }
    for service in &existing {
        let (group, version) = (
            service["spec"]["group"].as_str().unwrap_or_default(),
            service["spec"]["version"].as_str().unwrap_or_default(),
        );
        let ours = service["metadata"]["labels"][AUTOMANAGED] == "true";
        if ours && !served.contains(&(group.to_owned(), version.to_owned())) {
            let name = service["metadata"]["name"].as_str().unwrap_or_default();
            match services.delete(None, name, &Default::default()).await {
                Ok(_) => {}
                Err(error) if error.status().code() == 404 => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// Creates `object` (in `namespace`, if namespaced) unless it exists.
async fn create_if_missing(
    registry: &Registry,
    namespace: Option<&str>,
    object: Value,
) -> Result<(), ApiError> {
    match registry
        .create(namespace, object, &WriteOptions::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if error.status().code() == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

/// Writes `kube-system/extension-apiserver-authentication`: the CA of client certificates
/// (`client-ca-file`) and how the front proxy identifies users (its CA, its certificate's
/// name and its headers), as upstream's cluster authentication trust controller writes it.
pub(crate) async fn publish_authentication(
    registries: &Registries,
    client_ca: &str,
    front_proxy: &FrontProxy,
) -> Result<(), ApiError> {
    let Some(config_maps) = registries.core("configmaps") else {
        return Ok(());
    };
    let name = "extension-apiserver-authentication";
    let data = json!({
        "client-ca-file": client_ca,
        "requestheader-client-ca-file": front_proxy.ca_cert_pem,
        "requestheader-allowed-names": format!("[\"{FRONT_PROXY_CLIENT}\"]"),
        "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        "requestheader-group-headers": "[\"X-Remote-Group\"]",
        "requestheader-username-headers": "[\"X-Remote-User\"]",
        "requestheader-uid-headers": "[\"X-Remote-Uid\"]",
    });
    match config_maps.get(Some("kube-system"), name).await {
        Ok(existing) if existing["data"] == data => Ok(()),
        Ok(mut existing) => {
            existing["data"] = data;
            config_maps
                .update(
                    Some("kube-system"),
                    name,
                    existing,
                    None,
                    &WriteOptions::default(),
                )
                .await
                .map(|_| ())
        }
        Err(error) if error.status().code() == 404 => {
            let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "kube-system"}, "data": data});
            create_if_missing(&config_maps, Some("kube-system"), object).await
        }
        Err(error) => Err(error),
    }
}

/// A group-version served by an extension API server.
#[derive(Debug)]
pub(crate) struct Remote {
    /// The APIService's name.
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority: i32,
    pub version_priority: i32,
    /// The Service's namespace, name and port.
    pub namespace: String,
    pub service: String,
    pub port: i32,
    /// Whether its `Available` condition is true.
    pub available: bool,
    /// TLS towards it: its CA bundle (or no verification), the front proxy's certificate;
    /// or why it cannot be made.
    pub tls: Result<Arc<rustls::ClientConfig>, String>,
}

impl Remote {
    fn new(service: &APIService, front_proxy: &FrontProxy) -> Option<Remote> {
        let spec = service.spec.clone()?;
        let reference = spec.service?;
        let bundle = spec.ca_bundle.as_ref().map(|b| b.0.as_slice());
        let trust = if spec.insecure_skip_tls_verify == Some(true) {
            None
        } else {
            Some(bundle.unwrap_or_default())
        };
        let tls = capstan_client::tls::client_config_presenting(
            trust,
            &front_proxy.client.cert_pem,
            &front_proxy.client.key_pem,
        )
        .map(Arc::new);
        let available = service
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "Available" && c.status == "True");
        Some(Remote {
            name: service.metadata.name.clone().unwrap_or_default(),
            group: spec.group.unwrap_or_default(),
            version: spec.version.unwrap_or_default(),
            group_priority: spec.group_priority_minimum,
            version_priority: spec.version_priority,
            namespace: reference.namespace.unwrap_or_default(),
            service: reference.name.unwrap_or_default(),
            port: reference.port.unwrap_or(443),
            available,
            tls,
        })
    }

    /// The name its serving certificate must have: `<service>.<namespace>.svc`.
    pub(crate) fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }
}

/// The compiled remotes and the APIServices they were compiled from.
#[derive(Debug, Default)]
struct Compiled {
    fingerprint: Vec<bytes::Bytes>,
    remotes: Arc<Vec<Arc<Remote>>>,
}

/// The APIServices served by extension API servers, and what they serve.
pub(crate) struct Aggregator {
    registries: Arc<Registries>,
    front_proxy: FrontProxy,
    compiled: Mutex<Compiled>,
    /// The resources each remote group-version listed at its last successful check, the
    /// APIService (by its name and Service) that answered, and when.
    discovered: RwLock<HashMap<(String, String), Discovered>>,
    /// Whether the built-in Metrics API serves `metrics.k8s.io/v1beta1` here.
    builtin_metrics: bool,
}

/// What a remote listed at its last successful check.
#[derive(Debug, Clone)]
struct Discovered {
    resources: Vec<APIResource>,
    /// The APIService's name, Service namespace, name and port.
    asked: (String, String, String, i32),
    at: std::time::Instant,
}

/// What identifies the server a remote's check asked.
fn asked(remote: &Remote) -> (String, String, String, i32) {
    (
        remote.name.clone(),
        remote.namespace.clone(),
        remote.service.clone(),
        remote.port,
    )
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    pub(crate) fn new(registries: Arc<Registries>, front_proxy: FrontProxy) -> Self {
        Aggregator {
            registries,
            front_proxy,
            compiled: Mutex::new(Compiled::default()),
            discovered: RwLock::default(),
            builtin_metrics: false,
        }
    }

    /// This aggregator with `metrics.k8s.io/v1beta1` served here (the built-in Metrics API).
    pub(crate) fn with_builtin_metrics(mut self, served: bool) -> Self {
        self.builtin_metrics = served;
        self
    }

    pub(crate) fn registries(&self) -> &Arc<Registries> {
        &self.registries
    }

    /// The group-versions served by extension API servers now (not those this server
    /// serves itself, whatever an APIService says).
    pub(crate) async fn remotes(&self) -> Arc<Vec<Arc<Remote>>> {
        let Some(registry) = self
            .registries
            .get("apiregistration.k8s.io", "v1", "apiservices")
        else {
            return Arc::default();
        };
        let cached = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let Ok(list) = registry.list(None, &cached).await else {
            return Arc::default();
        };
        let fingerprint: Vec<bytes::Bytes> =
            list.items.iter().map(|item| item.json.clone()).collect();
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.fingerprint != fingerprint {
            let remotes = list
                .items
                .iter()
                .filter_map(|item| serde_json::from_value::<APIService>(item.object()).ok())
                .filter_map(|service| Remote::new(&service, &self.front_proxy))
                .filter(|remote| !self.served_here(&remote.group, &remote.version))
                .map(Arc::new)
                .collect();
            *compiled = Compiled {
                fingerprint,
                remotes: Arc::new(remotes),
            };
        }
        compiled.remotes.clone()
    }

    /// The aggregated group-versions as discovery lists them.
    pub(crate) async fn discovery(&self) -> Vec<crate::handlers::discovery::RemoteVersion> {
        use crate::handlers::discovery::{RemoteVersion, interned};
        self.remotes()
            .await
            .iter()
            .map(|r| RemoteVersion {
                group: interned(&r.group),
                version: interned(&r.version),
                group_priority: r.group_priority,
                version_priority: r.version_priority,
                resources: self.discovered(&r.group, &r.version),
            })
            .collect()
    }

    /// Whether this server serves `group`/`version` itself.
    fn served_here(&self, group: &str, version: &str) -> bool {
        let metrics = (
            capstan_api::resourcemetrics::GROUP,
            capstan_api::resourcemetrics::VERSION,
        );
        (self.builtin_metrics && (group, version) == metrics)
            || catalog::resources_in(group, version).next().is_some()
            || self
                .registries
                .custom_find(|r| (r.group, r.version) == (group, version))
                .is_some()
    }

    /// The remote serving the group-version a path (`/apis/<group>/<version>[/…]`) is under.
    pub(crate) async fn remote_for(&self, path: &str) -> Option<Arc<Remote>> {
        let mut parts = path.trim_start_matches('/').split('/');
        let (Some("apis"), Some(group), Some(version)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        if self.served_here(group, version) {
            return None;
        }
        self.remotes()
            .await
            .iter()
            .find(|r| r.group == group && r.version == version)
            .cloned()
    }

    /// What `group`/`version` listed at its last successful check.
    pub(crate) fn discovered(&self, group: &str, version: &str) -> Option<Vec<APIResource>> {
        self.discovered
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_owned(), version.to_owned()))
            .map(|d| d.resources.clone())
    }

    /// Whether `remote`'s server answered a check within `within` (so another need not be
    /// sent yet).
    fn answered_within(&self, remote: &Remote, within: std::time::Duration) -> bool {
        self.discovered
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(remote.group.clone(), remote.version.clone()))
            .is_some_and(|d| d.asked == asked(remote) && d.at.elapsed() < within)
    }

    /// Records what `remote` listed (`None`: it could not be asked).
    fn record(&self, remote: &Remote, resources: Option<Vec<APIResource>>) {
        let mut discovered = self.discovered.write().unwrap_or_else(|e| e.into_inner());
        let key = (remote.group.clone(), remote.version.clone());
        match resources {
            Some(resources) => {
                discovered.insert(
                    key,
                    Discovered {
                        resources,
                        asked: asked(remote),
                        at: std::time::Instant::now(),
                    },
                );
            }
            None => {
                discovered.remove(&key);
            }
        }
    }
}
