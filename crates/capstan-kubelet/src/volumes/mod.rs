//! Pod volumes on the node, laid out as the kubelet lays them out:
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`. A volume is set up before
//! the first container that mounts it starts, and everything goes with the pod's directory
//! when the pod goes. Supported:
//!
//! - `emptyDir` (on disk, or tmpfs for the Memory medium with its size limit) and `hostPath`
//!   (with its type checks);
//! - `configMap`, `secret`, `downwardAPI` and `projected` (configMap, secret, downwardAPI and
//!   serviceAccountToken sources): their files are written by [`crate::volumes::atomic_writer`] (the
//!   `..data` link layout, so running containers see updates whole), with `defaultMode` and
//!   `items[].mode`; secret, downwardAPI and projected volumes live on a tmpfs of their own,
//!   as upstream's do. They are refreshed while the pod runs: downward API files when the
//!   pod's labels or annotations change, service account tokens when [`crate::volumes::tokens`] says
//!   they are due, and what comes from ConfigMaps and Secrets every minute;
//! - `gitRepo` ([`crate::volumes::git_repo`]), cloned once;
//! - `persistentVolumeClaim` ([`crate::volumes::claims`]) bound to a `hostPath` or `local` volume,
//!   and `ephemeral` volumes through the claim made for the pod (`<pod>-<volume>`).
//!
//! Beside them, [`crate::volumes::local_path`] is the node's local-path provisioner (its own
//! task and user, started by the binary).

pub mod atomic_writer;
pub mod claims;
pub mod git_repo;
pub mod local_path;
pub mod tokens;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, HostPathVolumeSource, KeyToPath, Pod,
    ProjectedVolumeSource, Secret, Volume, VolumeProjection,
};
use kube::Api;

use atomic_writer::{FileProjection, Payload};
use tokens::Tokens;

/// A mount for the runtime: (path in the container, path on the host, read-only).
pub type Mount = (String, String, bool);

/// How often what volumes hold of ConfigMaps and Secrets is read again while the pod runs.
const REFRESH: Duration = Duration::from_secs(60);

/// The default permission bits of projected files (the API's default `defaultMode`).
const DEFAULT_MODE: i32 = 0o644;

fn plugin_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir
        .join("volumes")
        .join(format!("kubernetes.io~{plugin}"))
        .join(name)
}

fn io_error(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

fn is_mount_point(path: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let target = path.display().to_string();
    mounts
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(target.as_str()))
}

/// Mounts a tmpfs at `dir` (world-writable with the sticky bit, as an emptyDir's), unless one
/// is there already.
fn mount_tmpfs(dir: &Path, size: Option<i64>) -> Result<(), String> {
    if is_mount_point(dir) {
        return Ok(());
    }
    let mut options = String::from("mode=1777");
    if let Some(size) = size.filter(|s| *s > 0) {
        options.push_str(&format!(",size={size}"));
    }
    let data = std::ffi::CString::new(options).map_err(|e| e.to_string())?;
    rustix::mount::mount(
        "tmpfs",
        dir,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(|e| format!("cannot mount tmpfs at {}: {e}", dir.display()))
}

fn empty_dir(volume: &Volume, pod_dir: &Path) -> Result<PathBuf, String> {
    let source = volume.empty_dir.clone().unwrap_or_default();
    let dir = plugin_dir(pod_dir, "empty-dir", &volume.name);
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| io_error(&dir, e))?;
    if source.medium.as_deref() == Some("Memory") {
        let size = source
            .size_limit
            .as_ref()
            .and_then(|limit| capstan_api::quantity::Quantity::parse(&limit.0).ok())
            .map(|q| q.value());
        mount_tmpfs(&dir, size)?;
    }
    Ok(dir)
}

/// A hostPath source's path, after its type checks (creating what the `...OrCreate` types
/// create).
pub fn host_path(source: &HostPathVolumeSource) -> Result<PathBuf, String> {
    let path = PathBuf::from(&source.path);
    let kind = source.type_.clone().unwrap_or_default();
    let meta = std::fs::metadata(&path);
    let fail = |what: &str| {
        Err(format!(
            "hostPath type check failed: {} is not a {what}",
            path.display()
        ))
    };
    use std::os::unix::fs::FileTypeExt as _;
    match kind.as_str() {
        "" => {}
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(&path).map_err(|e| io_error(&path, e))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| io_error(&path, e))?;
            } else if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                return fail("directory");
            }
        }
        "FileOrCreate" => {
            if meta.is_err() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
                }
                std::fs::write(&path, b"").map_err(|e| io_error(&path, e))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| io_error(&path, e))?;
            } else if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                return fail("file");
            }
        }
        "Directory" if !meta.as_ref().is_ok_and(|m| m.is_dir()) => return fail("directory"),
        "File" if !meta.as_ref().is_ok_and(|m| m.is_file()) => return fail("file"),
        "Socket" if !meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) => {
            return fail("socket");
        }
        "CharDevice" if !meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) => {
            return fail("character device");
        }
        "BlockDevice" if !meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) => {
            return fail("block device");
        }
        "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice" => {}
        other => return Err(format!("unknown hostPath type {other:?}")),
    }
    Ok(path)
}

/// Errors of several sources, as Go's error aggregates print them.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

fn mode_bits(mode: Option<i32>, default_mode: i32) -> u32 {
    (mode.unwrap_or(default_mode) & 0o777) as u32
}

/// The files a ConfigMap or Secret gives a volume (upstream's `MakePayload`): every key, or
/// only `items`. A missing object or key is an error unless the source is optional.
fn make_payload(
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
    kind: &str,
    name: &str,
) -> Result<Payload, String> {
    let Some(data) = data else {
        if optional {
            return Ok(Payload::new());
        }
        return Err(format!("{kind} {name:?} not found"));
    };
    let file = |data: Vec<u8>, mode: Option<i32>| FileProjection {
        data,
        mode: mode_bits(mode, default_mode),
    };
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        return Ok(data.into_iter().map(|(k, v)| (k, file(v, None))).collect());
    };
    let mut payload = Payload::new();
    for item in items {
        match data.get(&item.key) {
            Some(value) => {
                payload.insert(item.path.clone(), file(value.clone(), item.mode));
            }
            None if optional => {}
            None if kind == "secret" => {
                return Err(format!("references non-existent secret key: {}", item.key));
            }
            None => {
                return Err(format!(
                    "configmap references non-existent config key: {}",
                    item.key
                ));
            }
        }
    }
    Ok(payload)
}

async fn config_map_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let object = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot read configmap {name:?}: {e}"))?;
    Ok(object.map(|map| {
        map.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .chain(
                map.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            )
            .collect()
    }))
}

async fn secret_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let object = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot read secret {name:?}: {e}"))?;
    Ok(object.map(|secret| {
        secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    }))
}

/// Whether a downward API volume may name this field (the pod's own metadata only).
fn volume_field(path: &str) -> bool {
    let subscripted = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|p| p.strip_prefix("['"))
            .is_some_and(|p| p.ends_with("']"))
    };
    matches!(
        path,
        "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "metadata.labels"
            | "metadata.annotations"
    ) || subscripted("metadata.labels")
        || subscripted("metadata.annotations")
}

/// The files of downward API `items` for `pod` (upstream's `CollectData`): field values, with
/// labels and annotations as `key="value"` lines, and resource values of the named container
/// in units of the divisor (the node's allocatable standing in for a missing limit).
pub fn downward_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &BTreeMap<String, String>,
    default_mode: i32,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            if volume_field(&field.field_path) {
                crate::spec::env::field_value(pod, &field.field_path, "", &[])
            } else {
                Err(format!("unsupported fieldPath: {}", field.field_path))
            }
        } else if let Some(resource) = &item.resource_field_ref {
            let name = resource.container_name.as_deref().unwrap_or_default();
            let named = if name.is_empty() {
                Err(format!(
                    "{}: resourceFieldRef needs a containerName in a volume",
                    item.path
                ))
            } else {
                Ok(name)
            };
            named.and_then(|name| {
                pod.spec
                    .iter()
                    .flat_map(|s| {
                        s.containers
                            .iter()
                            .chain(s.init_containers.iter().flatten())
                    })
                    .find(|c| c.name == name)
                    .ok_or_else(|| format!("container {name} not found"))
                    .and_then(|container| {
                        crate::spec::env::resource_value(
                            container,
                            &resource.resource,
                            resource.divisor.as_ref().map(|d| d.0.as_str()),
                            allocatable,
                        )
                    })
            })
        } else {
            Ok(String::new())
        };
        match value {
            Ok(value) => {
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: value.into_bytes(),
                        mode: mode_bits(item.mode, default_mode),
                    },
                );
            }
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors)?;
    Ok(payload)
}

/// Why a projection source cannot be projected on this node, if it cannot.
fn unsupported_projection(source: &VolumeProjection) -> Option<String> {
    if let Some(bundle) = &source.cluster_trust_bundle {
        return Some(format!(
            "clusterTrustBundle projections are not supported by this node (path {:?})",
            bundle.path
        ));
    }
    let known = source.config_map.is_some()
        || source.secret.is_some()
        || source.downward_api.is_some()
        || source.service_account_token.is_some();
    (!known).then(|| "this projection source is not supported by this node".to_owned())
}

/// The volume types, as the plugins that serve them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    EmptyDir,
    HostPath,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    GitRepo,
    Claim,
}

impl Kind {
    fn of(volume: &Volume) -> Option<Kind> {
        Some(if volume.empty_dir.is_some() {
            Kind::EmptyDir
        } else if volume.host_path.is_some() {
            Kind::HostPath
        } else if volume.config_map.is_some() {
            Kind::ConfigMap
        } else if volume.secret.is_some() {
            Kind::Secret
        } else if volume.downward_api.is_some() {
            Kind::DownwardApi
        } else if volume.projected.is_some() {
            Kind::Projected
        } else if volume.git_repo.is_some() {
            Kind::GitRepo
        } else if volume.persistent_volume_claim.is_some() || volume.ephemeral.is_some() {
            Kind::Claim
        } else {
            return None;
        })
    }

    /// The plugin's directory name under `volumes/`.
    fn plugin(self) -> &'static str {
        match self {
            Kind::EmptyDir => "empty-dir",
            Kind::HostPath => "host-path",
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
            Kind::DownwardApi => "downward-api",
            Kind::Projected => "projected",
            Kind::GitRepo => "git-repo",
            Kind::Claim => "persistent-claim",
        }
    }

    /// Whether the volume's files are written by the atomic writer.
    fn projects_files(self) -> bool {
        matches!(
            self,
            Kind::ConfigMap | Kind::Secret | Kind::DownwardApi | Kind::Projected
        )
    }
}

/// What setting a pod's volumes up needs from the node.
#[derive(Clone, Copy)]
pub struct Host<'a> {
    /// The API client.
    pub client: &'a kube::Client,
    /// The node's name.
    pub node_name: &'a str,
    /// The node's allocatable resources (downward API resource values without limits).
    pub allocatable: &'a BTreeMap<String, String>,
    /// The pod's directory, `<root-dir>/pods/<uid>`.
    pub pod_dir: &'a Path,
    /// The node's volumes in use, which set-up adds to.
    pub in_use: &'a InUse,
}

/// The volumes the node's pods have mounted that the node reports in `status.volumesInUse`
/// (see [`claims::in_use_name`]), by pod: noted when a pod's volume is set up, forgotten with
/// the pod's directory.
#[derive(Clone, Debug, Default)]
pub struct InUse(
    std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::collections::BTreeSet<String>>>>,
);

impl InUse {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, std::collections::BTreeSet<String>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that pod `uid` mounts volume `name`.
    pub fn note(&self, uid: &str, name: String) {
        self.lock().entry(uid.to_owned()).or_default().insert(name);
    }

    /// Forgets pod `uid`'s volumes.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Every volume in use, sorted, each once.
    pub fn list(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<String> =
            self.lock().values().flatten().cloned().collect();
        names.into_iter().collect()
    }
}

impl std::fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("node_name", &self.node_name)
            .field("pod_dir", &self.pod_dir)
            .finish_non_exhaustive()
    }
}

/// A fingerprint of what downward API files are made of that may change while the pod runs.
fn metadata_fingerprint(pod: &Pod) -> u64 {
    let text = serde_json::to_string(&(&pod.metadata.labels, &pod.metadata.annotations))
        .unwrap_or_default();
    crate::fnv1a(crate::FNV_OFFSET, text.into_bytes())
}

/// Why a container's mounts could not be prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareError {
    /// A volume could not be set up (upstream reports it as `FailedMount`).
    Mount {
        /// The volume.
        volume: String,
        /// Why.
        message: String,
    },
    /// The container's mounts are wrong (a `CreateContainerConfigError`).
    Config(String),
}

/// One pod's volumes as its worker keeps them between syncs: the service account tokens
/// issued for them, and when they were last refreshed.
#[derive(Debug, Default)]
pub struct PodVolumes {
    tokens: Tokens,
    /// When ConfigMaps and Secrets were last read for the volumes.
    fetched: Option<Instant>,
    /// The pod metadata the downward API files were last written from.
    metadata: Option<u64>,
}

impl PodVolumes {
    /// The files of a configMap, secret, downwardAPI or projected volume, read afresh.
    async fn payload(
        &mut self,
        host: &Host<'_>,
        pod: &Pod,
        volume: &Volume,
    ) -> Result<Payload, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if let Some(source) = &volume.config_map {
            let data = config_map_data(host.client, namespace, &source.name).await?;
            return make_payload(
                data,
                source.items.as_ref(),
                source.default_mode.unwrap_or(DEFAULT_MODE),
                source.optional == Some(true),
                "configmap",
                &source.name,
            );
        }
        if let Some(source) = &volume.secret {
            let name = source.secret_name.clone().unwrap_or_default();
            let data = secret_data(host.client, namespace, &name).await?;
            return make_payload(
                data,
                source.items.as_ref(),
                source.default_mode.unwrap_or(DEFAULT_MODE),
                source.optional == Some(true),
                "secret",
                &name,
            );
        }
        if let Some(source) = &volume.downward_api {
            return downward_payload(
                source.items.as_deref().unwrap_or_default(),
                pod,
                host.allocatable,
                source.default_mode.unwrap_or(DEFAULT_MODE),
            );
        }
        if let Some(source) = &volume.projected {
            return self.projected_payload(host, pod, source).await;
        }
        Err(format!("volume {:?} has no files to project", volume.name))
    }

    /// The files of a projected volume (upstream's `collectData`): each source's, later ones
    /// replacing earlier ones at the same path; every failing source is reported.
    async fn projected_payload(
        &mut self,
        host: &Host<'_>,
        pod: &Pod,
        source: &ProjectedVolumeSource,
    ) -> Result<Payload, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let default_mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        let mut payload = Payload::new();
        let mut errors = Vec::new();
        for projection in source.sources.iter().flatten() {
            if let Some(reason) = unsupported_projection(projection) {
                errors.push(reason);
                continue;
            }
            let part = if let Some(secret) = &projection.secret {
                match secret_data(host.client, namespace, &secret.name).await {
                    Ok(data) => make_payload(
                        data,
                        secret.items.as_ref(),
                        default_mode,
                        secret.optional == Some(true),
                        "secret",
                        &secret.name,
                    ),
                    Err(e) => Err(e),
                }
            } else if let Some(map) = &projection.config_map {
                match config_map_data(host.client, namespace, &map.name).await {
                    Ok(data) => make_payload(
                        data,
                        map.items.as_ref(),
                        default_mode,
                        map.optional == Some(true),
                        "configmap",
                        &map.name,
                    ),
                    Err(e) => Err(e),
                }
            } else if let Some(downward) = &projection.downward_api {
                downward_payload(
                    downward.items.as_deref().unwrap_or_default(),
                    pod,
                    host.allocatable,
                    default_mode,
                )
            } else if let Some(token) = &projection.service_account_token {
                let key = tokens::Key::new(pod, token);
                self.tokens.get(host.client, &key).await.map(|token_text| {
                    Payload::from([(
                        token.path.clone(),
                        FileProjection {
                            data: token_text.into_bytes(),
                            mode: mode_bits(None, default_mode),
                        },
                    )])
                })
            } else {
                Ok(Payload::new())
            };
            match part {
                Ok(part) => payload.extend(part),
                Err(e) => errors.push(e),
            }
        }
        aggregate(errors)?;
        Ok(payload)
    }

    /// Sets one volume up; returns its host path and whether it is read-only by nature.
    async fn set_up(
        &mut self,
        host: &Host<'_>,
        pod: &Pod,
        volume: &Volume,
    ) -> Result<(PathBuf, bool), String> {
        let Some(kind) = Kind::of(volume) else {
            return Err(format!(
                "volume {:?}: this volume type is not supported by this node",
                volume.name
            ));
        };
        let dir = plugin_dir(host.pod_dir, kind.plugin(), &volume.name);
        match kind {
            Kind::EmptyDir => Ok((empty_dir(volume, host.pod_dir)?, false)),
            Kind::HostPath => Ok((
                host_path(&volume.host_path.clone().unwrap_or_default())?,
                false,
            )),
            Kind::ConfigMap | Kind::Secret | Kind::DownwardApi | Kind::Projected => {
                std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
                if kind != Kind::ConfigMap {
                    // Upstream keeps these in memory.
                    mount_tmpfs(&dir, None)?;
                }
                let payload = self.payload(host, pod, volume).await?;
                atomic_writer::write(&dir, &payload)
                    .map_err(|e| format!("volume {:?}: {e}", volume.name))?;
                if kind != Kind::DownwardApi && self.fetched.is_none() {
                    self.fetched = Some(Instant::now());
                }
                Ok((dir, true))
            }
            Kind::GitRepo => {
                let source = volume.git_repo.clone().unwrap_or_default();
                let meta = host
                    .pod_dir
                    .join("plugins")
                    .join("kubernetes.io~git-repo")
                    .join(&volume.name);
                crate::volumes::git_repo::set_up(&source, &dir, &meta).await?;
                Ok((dir, false))
            }
            Kind::Claim => {
                let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
                // An ephemeral volume's claim is `<pod>-<volume>`, and must be the pod's own.
                let (source, owner) = match &volume.persistent_volume_claim {
                    Some(source) => (source.clone(), None),
                    None => (
                        k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                            claim_name: capstan_api::fit::volume::volume_claim(pod_name, volume)
                                .unwrap_or_default(),
                            read_only: None,
                        },
                        Some(pod),
                    ),
                };
                let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
                let resolved = crate::volumes::claims::resolve(
                    host.client,
                    host.node_name,
                    namespace,
                    &source,
                    owner,
                )
                .await?;
                if let Some(name) = resolved.in_use {
                    host.in_use
                        .note(pod.metadata.uid.as_deref().unwrap_or_default(), name);
                }
                Ok((resolved.path, resolved.read_only))
            }
        }
    }

    /// Sets up the volumes `container` mounts and returns its mounts. An error says what is
    /// missing or wrong (the container then waits).
    pub async fn prepare(
        &mut self,
        host: &Host<'_>,
        pod: &Pod,
        container: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, PrepareError> {
        let env: std::collections::HashMap<&str, &str> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let volumes: BTreeMap<&str, &Volume> = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .map(|v| (v.name.as_str(), v))
            .collect();
        // Downward API files are written from this pod: a refresh needs only follow later
        // changes.
        self.metadata
            .get_or_insert_with(|| metadata_fingerprint(pod));
        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let Some(volume) = volumes.get(mount.name.as_str()) else {
                return Err(PrepareError::Config(format!(
                    "volume {:?} is not defined in the pod",
                    mount.name
                )));
            };
            let (mut host_dir, forced_readonly) =
                self.set_up(host, pod, volume)
                    .await
                    .map_err(|message| PrepareError::Mount {
                        volume: volume.name.clone(),
                        message,
                    })?;
            let sub_path = match mount.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
                Some(expr) => {
                    Some(crate::spec::expand_sub_path(expr, &env).map_err(PrepareError::Config)?)
                }
                None => mount.sub_path.clone(),
            };
            if let Some(sub_path) = sub_path.as_deref().filter(|p| !p.is_empty()) {
                // Upstream's checks, with its messages: the container is not created.
                if sub_path.starts_with('/') {
                    return Err(PrepareError::Config(format!(
                        "error SubPath `{sub_path}` must not be an absolute path"
                    )));
                }
                if sub_path.split('/').any(|p| p == "..") {
                    return Err(PrepareError::Config(format!(
                        "unable to provision SubPath `{sub_path}`: must not contain '..'"
                    )));
                }
                host_dir = host_dir.join(sub_path);
                if !host_dir.exists() {
                    std::fs::create_dir_all(&host_dir)
                        .map_err(|e| PrepareError::Config(io_error(&host_dir, e)))?;
                }
            }
            mounts.push((
                mount.mount_path.clone(),
                host_dir.display().to_string(),
                mount.read_only.unwrap_or(false) || forced_readonly,
            ));
        }
        Ok(mounts)
    }

    /// Brings the files of the pod's configMap, secret, downwardAPI and projected volumes that
    /// are set up in line with their sources: downward API files when the pod's labels or
    /// annotations changed, tokens when they are due, everything every [`REFRESH`]. A volume
    /// that cannot be refreshed keeps its files.
    pub async fn refresh(&mut self, host: &Host<'_>, pod: &Pod) {
        let now = Instant::now();
        let fingerprint = metadata_fingerprint(pod);
        let metadata_changed = self.metadata != Some(fingerprint);
        self.metadata = Some(fingerprint);
        let periodic = self
            .fetched
            .is_none_or(|t| now.duration_since(t) >= REFRESH);
        if periodic {
            self.fetched = Some(now);
        }
        let pod_name = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for volume in volumes {
            let Some(kind) = Kind::of(volume).filter(|k| k.projects_files()) else {
                continue;
            };
            let dir = plugin_dir(host.pod_dir, kind.plugin(), &volume.name);
            if std::fs::symlink_metadata(dir.join(atomic_writer::DATA_DIR)).is_err() {
                // Not set up: no container mounted it yet.
                continue;
            }
            let due = match kind {
                Kind::DownwardApi => metadata_changed,
                Kind::Projected => {
                    let mut sources = volume
                        .projected
                        .iter()
                        .flat_map(|p| p.sources.iter().flatten());
                    periodic
                        || sources.any(|s| {
                            (metadata_changed && s.downward_api.is_some())
                                || s.service_account_token
                                    .as_ref()
                                    .is_some_and(|t| self.tokens.due(&tokens::Key::new(pod, t)))
                        })
                }
                _ => periodic,
            };
            if !due {
                continue;
            }
            let written = match self.payload(host, pod, volume).await {
                Ok(payload) => atomic_writer::write(&dir, &payload),
                Err(e) => Err(e),
            };
            match written {
                Ok(true) => {
                    tracing::info!(pod = %pod_name, volume = %volume.name, "volume contents updated")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(pod = %pod_name, volume = %volume.name, error = %e, "cannot refresh the volume")
                }
            }
        }
    }
}

/// The `/etc/hosts` the node agent manages for a pod's containers, as upstream's kubelet
/// writes it to `<pod-dir>/etc-hosts` before each container starts: localhost and the IPv6
/// boilerplate, the pod's addresses under its host name (and its FQDN with a subdomain), then
/// the `hostAliases`. A host-network pod gets the node's own file with its aliases appended. A
/// container that mounts something at `/etc/hosts` itself, or a pod without an address yet,
/// gets none (the runtime's copy stays).
#[derive(Debug, Clone, Copy)]
pub struct EtcHosts<'a> {
    /// The pod's addresses.
    pub pod_ips: &'a [&'a str],
    /// The node's addresses (a host-network pod's).
    pub host_ips: &'a [String],
    /// The cluster's DNS domain.
    pub cluster_domain: &'a str,
}

/// Where the node's own hosts file is.
const NODE_HOSTS: &str = "/etc/hosts";

impl EtcHosts<'_> {
    /// Writes the pod's hosts file and returns its mount for `container`, if it gets one.
    pub fn mount(
        &self,
        pod_dir: &Path,
        pod: &Pod,
        container: &Container,
    ) -> Result<Option<Mount>, String> {
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ips: Vec<&str> = if host_network {
            self.host_ips.iter().map(String::as_str).collect()
        } else {
            self.pod_ips
                .iter()
                .copied()
                .filter(|ip| !ip.is_empty())
                .collect()
        };
        let own = container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == NODE_HOSTS);
        if ips.is_empty() || own {
            return Ok(None);
        }
        let aliases = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_aliases.as_deref())
            .unwrap_or_default();
        let content = if host_network {
            let node = std::fs::read_to_string(NODE_HOSTS)
                .map_err(|e| io_error(Path::new(NODE_HOSTS), e))?;
            format!(
                "# Kubernetes-managed hosts file (host network).\n{node}{}",
                alias_lines(aliases)
            )
        } else {
            managed_hosts(
                &ips,
                &crate::spec::pod_hostname(pod),
                crate::spec::pod_domain(pod, self.cluster_domain).as_deref(),
                aliases,
            )
        };
        std::fs::create_dir_all(pod_dir).map_err(|e| io_error(pod_dir, e))?;
        let file = pod_dir.join("etc-hosts");
        std::fs::write(&file, content).map_err(|e| io_error(&file, e))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| io_error(&file, e))?;
        Ok(Some((
            NODE_HOSTS.to_owned(),
            file.display().to_string(),
            false,
        )))
    }
}

/// The hosts file of a pod on the pod network.
fn managed_hosts(
    ips: &[&str],
    hostname: &str,
    domain: Option<&str>,
    aliases: &[k8s_openapi::api::core::v1::HostAlias],
) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    for ip in ips {
        match domain {
            Some(domain) => out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n")),
            None => out.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    out.push_str(&alias_lines(aliases));
    out
}

/// The `hostAliases` section: one line per address with all its names.
fn alias_lines(aliases: &[k8s_openapi::api::core::v1::HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.as_deref().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    out
}

/// Creates the file a new container writes its termination message to,
/// `<pod-dir>/containers/<name>/<random id>` (writable by any user, as upstream makes it), and
/// returns its mount at the container's `terminationMessagePath` (none when the path is
/// empty).
pub fn termination_log(pod_dir: &Path, container: &Container) -> Result<Option<Mount>, String> {
    let target = container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| crate::spec::DEFAULT_TERMINATION_MESSAGE_PATH.to_owned());
    if target.is_empty() {
        return Ok(None);
    }
    let dir = pod_dir.join("containers").join(&container.name);
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let mut id = [0u8; 4];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id)
        .map_err(|_| "no randomness for the termination log's name".to_owned())?;
    let file = dir.join(format!("{:08x}", u32::from_be_bytes(id)));
    std::fs::write(&file, b"").map_err(|e| io_error(&file, e))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| io_error(&file, e))?;
    Ok(Some((target, file.display().to_string(), false)))
}

/// Removes a pod's directory, unmounting the tmpfs volumes in it first.
pub fn remove_pod_dir(pod_dir: &Path) -> std::io::Result<()> {
    if !pod_dir.exists() {
        return Ok(());
    }
    let prefix = format!("{}/", pod_dir.display());
    if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
        let mut targets: Vec<&str> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|target| target.starts_with(&prefix))
            .collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        for target in targets {
            rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)?;
        }
    }
    std::fs::remove_dir_all(pod_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ClusterTrustBundleProjection, ConfigMapProjection, DownwardAPIProjection,
        ObjectFieldSelector, PodSpec, ResourceFieldSelector, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn the_managed_hosts_file_names_the_pod_and_its_aliases() {
        let pod = |spec: PodSpec| Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            ..Pod::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let hosts = EtcHosts {
            pod_ips: &["10.42.0.7"],
            host_ips: &["192.0.2.1".to_owned()],
            cluster_domain: "cluster.local",
        };
        let container = Container {
            name: "c".into(),
            ..Container::default()
        };
        let plain = pod(PodSpec {
            hostname: Some("h".into()),
            subdomain: Some("sub".into()),
            host_aliases: Some(vec![k8s_openapi::api::core::v1::HostAlias {
                ip: "1.2.3.4".into(),
                hostnames: Some(vec!["foo".into(), "bar".into()]),
            }]),
            ..PodSpec::default()
        });
        let mount = hosts
            .mount(dir.path(), &plain, &container)
            .unwrap()
            .unwrap();
        assert_eq!(mount.0, "/etc/hosts");
        assert_eq!(
            std::fs::read_to_string(&mount.1).unwrap(),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.42.0.7\th.sub.shop.svc.cluster.local\th\n\
             \n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"
        );
        // Without hostname and subdomain: the pod's name alone.
        hosts
            .mount(dir.path(), &pod(PodSpec::default()), &container)
            .unwrap();
        let content = std::fs::read_to_string(dir.path().join("etc-hosts")).unwrap();
        assert!(
            content.ends_with("fe00::2\tip6-allrouters\n10.42.0.7\tweb-0\n"),
            "{content}"
        );
        // A container that mounts its own /etc/hosts, or a pod without an address, gets none.
        let own = Container {
            volume_mounts: Some(vec![k8s_openapi::api::core::v1::VolumeMount {
                name: "v".into(),
                mount_path: "/etc/hosts".into(),
                ..Default::default()
            }]),
            ..container.clone()
        };
        assert_eq!(hosts.mount(dir.path(), &plain, &own).unwrap(), None);
        let no_ip = EtcHosts {
            pod_ips: &[""],
            ..hosts
        };
        assert_eq!(no_ip.mount(dir.path(), &plain, &container).unwrap(), None);
        // A host-network pod: the node's own file, marked as such.
        let host = pod(PodSpec {
            host_network: Some(true),
            ..PodSpec::default()
        });
        hosts.mount(dir.path(), &host, &container).unwrap().unwrap();
        let content = std::fs::read_to_string(dir.path().join("etc-hosts")).unwrap();
        assert!(content.starts_with("# Kubernetes-managed hosts file (host network).\n"));
        assert!(content.ends_with(&std::fs::read_to_string("/etc/hosts").unwrap()));
    }

    fn text(payload: &Payload, path: &str) -> Option<(String, u32)> {
        payload
            .get(path)
            .map(|f| (String::from_utf8_lossy(&f.data).into_owned(), f.mode))
    }

    #[test]
    fn items_pick_keys_and_modes() {
        let data = BTreeMap::from([
            ("a".to_owned(), b"1".to_vec()),
            ("b".to_owned(), b"2".to_vec()),
        ]);
        let all = make_payload(Some(data.clone()), None, 0o644, false, "configmap", "c");
        assert_eq!(all.map(|f| f.len()).ok(), Some(2));
        let items = vec![KeyToPath {
            key: "b".to_owned(),
            path: "dir/b.txt".to_owned(),
            mode: Some(0o600),
        }];
        let picked = make_payload(
            Some(data.clone()),
            Some(&items),
            0o644,
            false,
            "secret",
            "c",
        )
        .unwrap_or_default();
        assert_eq!(text(&picked, "dir/b.txt"), Some(("2".to_owned(), 0o600)));
        assert_eq!(picked.len(), 1);
        let missing = vec![KeyToPath {
            key: "z".to_owned(),
            path: "z".to_owned(),
            mode: None,
        }];
        assert_eq!(
            make_payload(
                Some(data.clone()),
                Some(&missing),
                0o644,
                false,
                "configmap",
                "c"
            ),
            Err("configmap references non-existent config key: z".to_owned())
        );
        assert_eq!(
            make_payload(
                Some(data.clone()),
                Some(&missing),
                0o644,
                false,
                "secret",
                "c"
            ),
            Err("references non-existent secret key: z".to_owned())
        );
        // Optional: a missing key or object is no error.
        assert_eq!(
            make_payload(Some(data), Some(&missing), 0o644, true, "configmap", "c"),
            Ok(Payload::new())
        );
        assert_eq!(
            make_payload(None, None, 0o644, true, "secret", "s"),
            Ok(Payload::new())
        );
        assert_eq!(
            make_payload(None, None, 0o644, false, "secret", "s"),
            Err("secret \"s\" not found".to_owned())
        );
        // The default mode; the permission bits only.
        let all = make_payload(
            Some(BTreeMap::from([("k".to_owned(), Vec::new())])),
            None,
            0o100_400,
            false,
            "configmap",
            "c",
        )
        .unwrap_or_default();
        assert_eq!(text(&all, "k"), Some((String::new(), 0o400)));
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".to_owned()),
                namespace: Some("ns".to_owned()),
                uid: Some("1234".to_owned()),
                labels: Some(BTreeMap::from([
                    ("tier".to_owned(), "web".to_owned()),
                    ("app".to_owned(), "shop".to_owned()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "note".to_owned(),
                    "say \"hi\"\n\tbye\\".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".to_owned(),
                    resources: Some(ResourceRequirements {
                        limits: Some(BTreeMap::from([
                            ("cpu".to_owned(), Q("250m".to_owned())),
                            ("memory".to_owned(), Q("64Mi".to_owned())),
                        ])),
                        requests: Some(BTreeMap::from([(
                            "ephemeral-storage".to_owned(),
                            Q("1Gi".to_owned()),
                        )])),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn field(path: &str, field_path: &str, mode: Option<i32>) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.to_owned(),
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: field_path.to_owned(),
            }),
            mode,
            resource_field_ref: None,
        }
    }

    fn resource(path: &str, resource: &str, divisor: Option<&str>) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.to_owned(),
            field_ref: None,
            mode: None,
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("app".to_owned()),
                resource: resource.to_owned(),
                divisor: divisor.map(|d| Q(d.to_owned())),
            }),
        }
    }

    #[test]
    fn downward_api_files() {
        let allocatable = BTreeMap::from([("ephemeral-storage".to_owned(), "10Gi".to_owned())]);
        let items = [
            field("name", "metadata.name", None),
            field("namespace", "metadata.namespace", Some(0o600)),
            field("uid", "metadata.uid", None),
            field("labels", "metadata.labels", None),
            field("annotations", "metadata.annotations", None),
            field("meta/tier", "metadata.labels['tier']", None),
            field("meta/absent", "metadata.annotations['absent']", None),
            resource("cpu_limit", "limits.cpu", Some("1m")),
            resource("cpu_cores", "limits.cpu", None),
            resource("mem_limit", "limits.memory", Some("1Mi")),
            resource("storage_request", "requests.ephemeral-storage", Some("1Mi")),
            resource("storage_limit", "limits.ephemeral-storage", Some("1Gi")),
        ];
        let payload = downward_payload(&items, &pod(), &allocatable, 0o644).unwrap_or_default();
        let expected = [
            ("name", "p", 0o644),
            ("namespace", "ns", 0o600),
            ("uid", "1234", 0o644),
            // Sorted by key, values quoted as Go's %q quotes them, no final newline.
            ("labels", "app=\"shop\"\ntier=\"web\"", 0o644),
            ("annotations", "note=\"say \\\"hi\\\"\\n\\tbye\\\\\"", 0o644),
            ("meta/tier", "web", 0o644),
            ("meta/absent", "", 0o644),
            ("cpu_limit", "250", 0o644),
            ("cpu_cores", "1", 0o644),
            ("mem_limit", "64", 0o644),
            ("storage_request", "1024", 0o644),
            // No limit: the node's allocatable.
            ("storage_limit", "10", 0o644),
        ];
        for (path, value, mode) in expected {
            assert_eq!(
                text(&payload, path),
                Some((value.to_owned(), mode)),
                "{path}"
            );
        }
        assert_eq!(payload.len(), expected.len());
        // Only the pod's metadata; a resource needs a container that exists. Every error is
        // reported.
        let bad = [
            field("ip", "status.podIP", None),
            DownwardAPIVolumeFile {
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some("nope".to_owned()),
                    resource: "limits.cpu".to_owned(),
                    divisor: None,
                }),
                ..resource("x", "limits.cpu", None)
            },
        ];
        assert_eq!(
            downward_payload(&bad, &pod(), &allocatable, 0o644),
            Err("[unsupported fieldPath: status.podIP, container nope not found]".to_owned())
        );
        let unnamed = DownwardAPIVolumeFile {
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: None,
                resource: "limits.cpu".to_owned(),
                divisor: None,
            }),
            ..resource("cpu", "limits.cpu", None)
        };
        assert_eq!(
            downward_payload(&[unnamed], &pod(), &allocatable, 0o644),
            Err("cpu: resourceFieldRef needs a containerName in a volume".to_owned())
        );
        assert_eq!(
            downward_payload(&bad[..1], &pod(), &allocatable, 0o644),
            Err("unsupported fieldPath: status.podIP".to_owned())
        );
    }

    #[test]
    fn downward_files_follow_label_changes() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let items = [field("labels", "metadata.labels", None)];
        let mut pod = pod();
        let first = downward_payload(&items, &pod, &BTreeMap::new(), 0o644).unwrap_or_default();
        assert_eq!(atomic_writer::write(dir.path(), &first), Ok(true));
        let before = metadata_fingerprint(&pod);
        pod.metadata
            .labels
            .get_or_insert_default()
            .insert("tier".to_owned(), "db".to_owned());
        assert_ne!(metadata_fingerprint(&pod), before);
        let second = downward_payload(&items, &pod, &BTreeMap::new(), 0o644).unwrap_or_default();
        assert_eq!(atomic_writer::write(dir.path(), &second), Ok(true));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("labels"))?,
            "app=\"shop\"\ntier=\"db\""
        );
        Ok(())
    }

    #[test]
    fn unsupported_projections_are_named() {
        let bundle = VolumeProjection {
            cluster_trust_bundle: Some(ClusterTrustBundleProjection {
                path: "ca.pem".to_owned(),
                name: Some("b".to_owned()),
                ..ClusterTrustBundleProjection::default()
            }),
            ..VolumeProjection::default()
        };
        assert!(
            unsupported_projection(&bundle)
                .is_some_and(|e| e.starts_with("clusterTrustBundle projections are not supported"))
        );
        assert!(unsupported_projection(&VolumeProjection::default()).is_some());
        let supported = [
            VolumeProjection {
                config_map: Some(ConfigMapProjection::default()),
                ..VolumeProjection::default()
            },
            VolumeProjection {
                downward_api: Some(DownwardAPIProjection::default()),
                ..VolumeProjection::default()
            },
        ];
        assert!(
            supported
                .iter()
                .all(|s| unsupported_projection(s).is_none())
        );
    }

    #[test]
    fn volume_kinds_and_plugin_directories() {
        let git = Volume {
            name: "g".to_owned(),
            git_repo: Some(Default::default()),
            ..Volume::default()
        };
        assert_eq!(Kind::of(&git), Some(Kind::GitRepo));
        assert_eq!(
            plugin_dir(Path::new("/r/pods/u"), Kind::DownwardApi.plugin(), "info"),
            Path::new("/r/pods/u/volumes/kubernetes.io~downward-api/info")
        );
        let nfs = Volume {
            name: "n".to_owned(),
            nfs: Some(Default::default()),
            ..Volume::default()
        };
        assert_eq!(Kind::of(&nfs), None);
    }

    #[test]
    fn host_path_types_are_checked() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let source = |path: &Path, kind: &str| HostPathVolumeSource {
            path: path.display().to_string(),
            type_: Some(kind.to_owned()),
        };
        let created = dir.path().join("new");
        assert!(host_path(&source(&created, "DirectoryOrCreate")).is_ok());
        assert!(created.is_dir());
        assert!(host_path(&source(&created, "File")).is_err());
        assert!(host_path(&source(&dir.path().join("absent"), "Directory")).is_err());
        let file = dir.path().join("f");
        assert!(host_path(&source(&file, "FileOrCreate")).is_ok());
        assert!(host_path(&source(&file, "File")).is_ok());
        assert!(host_path(&source(&file, "Directory")).is_err());
        Ok(())
    }

    #[test]
    fn termination_logs_are_fresh_files_per_container() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let container = Container {
            name: "app".to_owned(),
            ..Container::default()
        };
        let first = termination_log(dir.path(), &container).ok().flatten();
        let second = termination_log(dir.path(), &container).ok().flatten();
        let (Some(first), Some(second)) = (first, second) else {
            panic!("no termination log");
        };
        assert_eq!(first.0, "/dev/termination-log");
        assert_ne!(
            first.1, second.1,
            "each container instance gets its own file"
        );
        assert!(
            first
                .1
                .starts_with(&dir.path().join("containers/app").display().to_string())
        );
        let meta = std::fs::metadata(&first.1)?;
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (0, 0o666));
        let none = Container {
            name: "quiet".to_owned(),
            termination_message_path: Some(String::new()),
            ..Container::default()
        };
        assert_eq!(termination_log(dir.path(), &none), Ok(None));
        Ok(())
    }
}
