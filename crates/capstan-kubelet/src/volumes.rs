//! Pod volumes on the node, laid out as the kubelet lays them out:
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`. Supported so far: `emptyDir`
//! (on disk, or tmpfs for the Memory medium with its size limit), `hostPath` (with its type
//! checks), `configMap` and `secret` (files written from the object's keys, honouring `items`
//! and modes). A volume is set up before the first container that mounts it starts, and
//! everything goes with the pod's directory when the pod goes.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Pod, Secret, Volume};
use kube::Api;

/// A mount for the runtime: (path in the container, path on the host, read-only).
pub type Mount = (String, String, bool);

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

fn empty_dir(volume: &Volume, pod_dir: &Path) -> Result<PathBuf, String> {
    let source = volume.empty_dir.clone().unwrap_or_default();
    let dir = plugin_dir(pod_dir, "empty-dir", &volume.name);
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| io_error(&dir, e))?;
    if source.medium.as_deref() == Some("Memory") && !is_mount_point(&dir) {
        let mut options = String::from("mode=1777");
        if let Some(limit) = source.size_limit.as_ref()
            && let Ok(q) = capstan_api::quantity::Quantity::parse(&limit.0)
            && q.value() > 0
        {
            options.push_str(&format!(",size={}", q.value()));
        }
        let data = std::ffi::CString::new(options).map_err(|e| e.to_string())?;
        rustix::mount::mount(
            "tmpfs",
            &dir,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            data.as_c_str(),
        )
        .map_err(|e| format!("cannot mount tmpfs at {}: {e}", dir.display()))?;
    }
    Ok(dir)
}

fn host_path(volume: &Volume) -> Result<PathBuf, String> {
    let source = volume.host_path.clone().unwrap_or_default();
    let path = PathBuf::from(&source.path);
    let kind = source.type_.unwrap_or_default();
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

/// Writes `files` (relative path → contents, mode) into `dir`, replacing what was there.
fn write_files(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    for (relative, (contents, mode)) in files {
        if relative
            .split('/')
            .any(|part| part == ".." || part.is_empty())
        {
            return Err(format!("invalid path {relative:?} in volume"));
        }
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        std::fs::write(&path, contents).map_err(|e| io_error(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| io_error(&path, e))?;
    }
    Ok(())
}

/// The files of a ConfigMap or Secret volume: every key, or only `items` (a missing item key
/// is an error unless the volume is optional).
fn select(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    kind: &str,
    name: &str,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mode = |m: Option<i32>| (m.unwrap_or(default_mode) & 0o777) as u32;
    match items {
        None => Ok(data
            .into_iter()
            .map(|(k, v)| (k, (v, mode(None))))
            .collect()),
        Some(items) => items
            .iter()
            .map(|item| {
                let value = data.get(&item.key).cloned().ok_or_else(|| {
                    format!(
                        "configuration key {:?} not found in {kind} {name:?}",
                        item.key
                    )
                })?;
                Ok((item.path.clone(), (value, mode(item.mode))))
            })
            .collect(),
    }
}

async fn config_map(
    client: &kube::Client,
    namespace: &str,
    volume: &Volume,
    pod_dir: &Path,
) -> Result<PathBuf, String> {
    let source = volume.config_map.clone().unwrap_or_default();
    let dir = plugin_dir(pod_dir, "configmap", &volume.name);
    let object = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(&source.name)
        .await
        .map_err(|e| format!("cannot read configmap {:?}: {e}", source.name))?;
    let data: BTreeMap<String, Vec<u8>> = match object {
        Some(map) => map
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .chain(
                map.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            )
            .collect(),
        None if source.optional == Some(true) => BTreeMap::new(),
        None => return Err(format!("configmap {:?} not found", source.name)),
    };
    let files = select(
        data,
        source.items.as_ref(),
        source.default_mode.unwrap_or(0o644),
        "ConfigMap",
        &source.name,
    )?;
    write_files(&dir, &files)?;
    Ok(dir)
}

async fn secret(
    client: &kube::Client,
    namespace: &str,
    volume: &Volume,
    pod_dir: &Path,
) -> Result<PathBuf, String> {
    let source = volume.secret.clone().unwrap_or_default();
    let name = source.secret_name.clone().unwrap_or_default();
    let dir = plugin_dir(pod_dir, "secret", &volume.name);
    let object = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&name)
        .await
        .map_err(|e| format!("cannot read secret {name:?}: {e}"))?;
    let data: BTreeMap<String, Vec<u8>> = match object {
        Some(secret) => secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
        None if source.optional == Some(true) => BTreeMap::new(),
        None => return Err(format!("secret {name:?} not found")),
    };
    let files = select(
        data,
        source.items.as_ref(),
        source.default_mode.unwrap_or(0o644),
        "Secret",
        &name,
    )?;
    write_files(&dir, &files)?;
    Ok(dir)
}

/// Sets up the volumes `container` mounts and returns its mounts. An error says what is
/// missing or wrong (the container then waits).
pub async fn prepare(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    pod_dir: &Path,
) -> Result<Vec<Mount>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let volumes: BTreeMap<&str, &Volume> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| (v.name.as_str(), v))
        .collect();
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.get(mount.name.as_str()) else {
            return Err(format!("volume {:?} is not defined in the pod", mount.name));
        };
        let (base, forced_readonly) = if volume.empty_dir.is_some() {
            (empty_dir(volume, pod_dir)?, false)
        } else if volume.host_path.is_some() {
            (host_path(volume)?, false)
        } else if volume.config_map.is_some() {
            (config_map(client, namespace, volume, pod_dir).await?, true)
        } else if volume.secret.is_some() {
            (secret(client, namespace, volume, pod_dir).await?, true)
        } else {
            return Err(format!(
                "volume {:?}: this volume type is not supported by this node yet",
                volume.name
            ));
        };
        let mut host = base;
        if let Some(sub_path) = mount.sub_path.as_deref().filter(|p| !p.is_empty()) {
            if sub_path.starts_with('/') || sub_path.split('/').any(|p| p == "..") {
                return Err(format!("invalid subPath {sub_path:?}"));
            }
            host = host.join(sub_path);
            if !host.exists() {
                std::fs::create_dir_all(&host).map_err(|e| io_error(&host, e))?;
            }
        }
        mounts.push((
            mount.mount_path.clone(),
            host.display().to_string(),
            mount.read_only.unwrap_or(false) || forced_readonly,
        ));
    }
    Ok(mounts)
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

    #[test]
    fn items_pick_keys_and_modes() {
        let data = BTreeMap::from([
            ("a".to_owned(), b"1".to_vec()),
            ("b".to_owned(), b"2".to_vec()),
        ]);
        let all = select(data.clone(), None, 0o644, "ConfigMap", "c");
        assert_eq!(all.map(|f| f.len()).ok(), Some(2));
        let items = vec![KeyToPath {
            key: "b".to_owned(),
            path: "dir/b.txt".to_owned(),
            mode: Some(0o600),
        }];
        let picked =
            select(data.clone(), Some(&items), 0o644, "ConfigMap", "c").unwrap_or_default();
        assert_eq!(picked.get("dir/b.txt"), Some(&(b"2".to_vec(), 0o600)));
        let missing = vec![KeyToPath {
            key: "z".to_owned(),
            path: "z".to_owned(),
            mode: None,
        }];
        assert!(select(data, Some(&missing), 0o644, "ConfigMap", "c").is_err());
    }

    #[test]
    fn host_path_types_are_checked() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let volume = |path: &Path, kind: &str| Volume {
            name: "v".to_owned(),
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: path.display().to_string(),
                type_: Some(kind.to_owned()),
            }),
            ..Volume::default()
        };
        let created = dir.path().join("new");
        assert!(host_path(&volume(&created, "DirectoryOrCreate")).is_ok());
        assert!(created.is_dir());
        assert!(host_path(&volume(&created, "File")).is_err());
        assert!(host_path(&volume(&dir.path().join("absent"), "Directory")).is_err());
        let file = dir.path().join("f");
        assert!(host_path(&volume(&file, "FileOrCreate")).is_ok());
        assert!(host_path(&volume(&file, "File")).is_ok());
        assert!(host_path(&volume(&file, "Directory")).is_err());
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

    #[test]
    fn files_are_written_and_replaced() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("v");
        let files = BTreeMap::from([("a/b".to_owned(), (b"x".to_vec(), 0o600))]);
        assert!(write_files(&target, &files).is_ok());
        assert_eq!(std::fs::read(target.join("a/b"))?, b"x");
        let evil = BTreeMap::from([("../x".to_owned(), (b"x".to_vec(), 0o600))]);
        assert!(write_files(&target, &evil).is_err());
        Ok(())
    }
}
