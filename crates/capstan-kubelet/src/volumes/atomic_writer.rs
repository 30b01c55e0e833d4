//! Writes the files of a configMap, secret, downwardAPI or projected volume so a container that
//! has the volume's directory mounted sees either the old set of files or the new one, never a
//! mix, as the kubelet's atomic writer does:
//!
//! ```text
//! <volume>/..2024_05_01_10_00_00.1234567/   the files, in a directory of their own (0755)
//! <volume>/..data -> ..2024_05_01_10_00_00.1234567
//! <volume>/key    -> ..data/key            one link per top-level name of the payload
//! ```
//!
//! An update writes a new timestamped directory, points a new link `..data_tmp` at it and
//! renames that over `..data` (one atomic step), then removes the links of names the payload
//! no longer has and the old directory. Nothing is written when the payload equals what is
//! there. Names beginning with `..` are the writer's own: a payload may not use them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The link to the current timestamped directory.
pub const DATA_DIR: &str = "..data";
/// The link renamed over [`DATA_DIR`] to switch to a new directory.
const NEW_DATA_DIR: &str = "..data_tmp";
/// The longest file name in a payload path.
const MAX_NAME: usize = 255;
/// The longest payload path.
const MAX_PATH: usize = 4096;

/// One file of a volume: its contents and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    /// The contents.
    pub data: Vec<u8>,
    /// The permission bits (`0o644`).
    pub mode: u32,
}

/// The files of a volume by relative path.
pub type Payload = BTreeMap<String, FileProjection>;

fn io_error(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// A payload path cleaned as Go's `filepath.Clean` cleans a relative path, or why it cannot be
/// used: it must be relative, non-empty, without `..` elements, not begin with `..`, and
/// within the length limits.
pub fn clean_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err(format!("invalid path: must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {path}"));
    }
    if path.len() > MAX_PATH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH} characters"
        ));
    }
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts {
        if *part == ".." {
            return Err(format!("invalid path: must not contain '..': {path}"));
        }
        if part.len() > MAX_NAME {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_NAME} characters"
            ));
        }
    }
    if parts[0].starts_with("..") {
        return Err(format!("invalid path: must not start with '..': {path}"));
    }
    let cleaned: Vec<&str> = parts
        .into_iter()
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if cleaned.is_empty() {
        return Err(format!("invalid path: must name a file: {path:?}"));
    }
    Ok(cleaned.join("/"))
}

/// The relative paths of every file and directory under `dir`.
fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &relative, out)?;
        }
        out.insert(relative);
    }
    Ok(())
}

/// Whether a file of the payload differs from what `old` holds (contents or mode).
fn differs(old: &Path, file: &FileProjection) -> Result<bool, String> {
    let meta = match std::fs::symlink_metadata(old) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(io_error(old, e)),
    };
    if !meta.is_file() || meta.permissions().mode() & 0o7777 != file.mode {
        return Ok(true);
    }
    let on_disk = std::fs::read(old).map_err(|e| io_error(old, e))?;
    Ok(on_disk != file.data)
}

/// Removes everything in `dir` (a volume directory without a `..data` link holds leftovers of
/// another layout or of an interrupted write).
fn clear(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let removed = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| io_error(&path, e))?;
    }
    Ok(())
}

/// A new, empty timestamped directory in `target` (mode 0755).
fn new_timestamped_dir(target: &Path) -> Result<PathBuf, String> {
    let stamp = crate::now().strftime("%Y_%m_%d_%H_%M_%S").to_string();
    let random = ring::rand::SystemRandom::new();
    loop {
        let mut bytes = [0u8; 4];
        ring::rand::SecureRandom::fill(&random, &mut bytes)
            .map_err(|_| "no randomness for a volume directory's name".to_owned())?;
        let dir = target.join(format!("..{stamp}.{}", u32::from_be_bytes(bytes)));
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| io_error(&dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&dir, e)),
        }
    }
}

fn write_payload(dir: &Path, payload: &BTreeMap<String, &FileProjection>) -> Result<(), String> {
    for (relative, file) in payload {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| io_error(parent, e))?;
        }
        std::fs::write(&path, &file.data).map_err(|e| io_error(&path, e))?;
        // Set after the write: the process's umask applied to the file's creation.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.mode))
            .map_err(|e| io_error(&path, e))?;
    }
    Ok(())
}

/// Projects `payload` into `target` (created if missing). Returns whether anything was
/// written.
pub fn write(target: &Path, payload: &Payload) -> Result<bool, String> {
    let mut clean: BTreeMap<String, &FileProjection> = BTreeMap::new();
    for (path, file) in payload {
        clean.insert(clean_path(path)?, file);
    }
    std::fs::create_dir_all(target).map_err(|e| io_error(target, e))?;
    let data_link = target.join(DATA_DIR);
    let old = match std::fs::read_link(&data_link) {
        Ok(old) => Some(target.join(old)),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(&data_link, e)),
    };
    let mut stale = BTreeSet::new();
    match &old {
        Some(old) => {
            walk(old, "", &mut stale).or_else(|e| match e.kind() {
                ErrorKind::NotFound => Ok(()),
                _ => Err(io_error(old, e)),
            })?;
            // What the new payload keeps, with every directory leading to it, stays.
            for path in clean.keys() {
                let mut current = path.as_str();
                loop {
                    stale.remove(current);
                    match current.rsplit_once('/') {
                        Some((parent, _)) => current = parent,
                        None => break,
                    }
                }
            }
            let mut changed = false;
            for (path, file) in &clean {
                if differs(&old.join(path), file)? {
                    changed = true;
                    break;
                }
            }
            if !changed && stale.is_empty() {
                return Ok(false);
            }
        }
        None => clear(target)?,
    }
    let fresh = new_timestamped_dir(target)?;
    if let Err(e) = write_payload(&fresh, &clean) {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(e);
    }
    // The visible names, each a link into `..data`.
    let tops: BTreeSet<&str> = clean
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for top in tops {
        let visible = target.join(top);
        match std::fs::symlink_metadata(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible)
                    .map_err(|e| io_error(&visible, e))?;
            }
            Err(e) => return Err(io_error(&visible, e)),
        }
    }
    let fresh_name = fresh.file_name().map(|n| n.to_owned()).unwrap_or_default();
    let tmp_link = target.join(NEW_DATA_DIR);
    let _ = std::fs::remove_file(&tmp_link);
    if let Err(e) = std::os::unix::fs::symlink(&fresh_name, &tmp_link)
        .and_then(|()| std::fs::rename(&tmp_link, &data_link))
    {
        let _ = std::fs::remove_file(&tmp_link);
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(io_error(&data_link, e));
    }
    for path in stale.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(path);
        if let Err(e) = std::fs::remove_file(&visible)
            && e.kind() != ErrorKind::NotFound
        {
            return Err(io_error(&visible, e));
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(&old)
            .or_else(|e| match e.kind() {
                ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| io_error(&old, e))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0)
    }

    #[test]
    fn paths_are_checked_and_cleaned() {
        assert_eq!(clean_path("a/./b//c").as_deref(), Ok("a/b/c"));
        assert_eq!(clean_path("..a").ok(), None);
        assert_eq!(clean_path("a/../b").ok(), None);
        assert_eq!(clean_path("/etc/passwd").ok(), None);
        assert_eq!(clean_path("").ok(), None);
        assert_eq!(clean_path(".").ok(), None);
        assert_eq!(clean_path("a/..b").as_deref(), Ok("a/..b"));
        assert_eq!(clean_path(&"x".repeat(256)).ok(), None);
    }

    #[test]
    fn files_are_linked_through_the_data_directory() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("vol");
        let payload = Payload::from([
            ("name".to_owned(), file("pod-a", 0o644)),
            ("dir/secret".to_owned(), file("s3cret", 0o400)),
        ]);
        assert_eq!(write(&target, &payload), Ok(true));
        assert_eq!(std::fs::read_to_string(target.join("name"))?, "pod-a");
        assert_eq!(
            std::fs::read_to_string(target.join("dir/secret"))?,
            "s3cret"
        );
        assert_eq!(mode(&target.join("name")), 0o644);
        assert_eq!(mode(&target.join("dir/secret")), 0o400);
        assert_eq!(
            std::fs::read_link(target.join("name"))?,
            Path::new("..data/name")
        );
        assert_eq!(
            std::fs::read_link(target.join("dir"))?,
            Path::new("..data/dir")
        );
        let first = std::fs::read_link(target.join(DATA_DIR))?;
        assert!(first.to_string_lossy().starts_with("..20"), "{first:?}");
        assert_eq!(mode(&target.join(&first)), 0o755);
        // The same payload again writes nothing.
        assert_eq!(write(&target, &payload), Ok(false));
        assert_eq!(std::fs::read_link(target.join(DATA_DIR))?, first);
        // A changed payload switches directories; dropped names go.
        let next = Payload::from([
            ("name".to_owned(), file("pod-b", 0o644)),
            ("other".to_owned(), file("o", 0o600)),
        ]);
        assert_eq!(write(&target, &next), Ok(true));
        let second = std::fs::read_link(target.join(DATA_DIR))?;
        assert_ne!(first, second);
        assert!(
            !target.join(&first).exists(),
            "the old directory is removed"
        );
        assert_eq!(std::fs::read_to_string(target.join("name"))?, "pod-b");
        assert_eq!(mode(&target.join("other")), 0o600);
        assert!(std::fs::symlink_metadata(target.join("dir")).is_err());
        // A mode change alone is a change.
        let chmod = Payload::from([
            ("name".to_owned(), file("pod-b", 0o600)),
            ("other".to_owned(), file("o", 0o600)),
        ]);
        assert_eq!(write(&target, &chmod), Ok(true));
        assert_eq!(mode(&target.join("name")), 0o600);
        let mut names: Vec<String> = std::fs::read_dir(&target)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        names.sort();
        let data = std::fs::read_link(target.join(DATA_DIR))?;
        assert_eq!(
            names,
            [
                data.to_string_lossy().into_owned(),
                "..data".to_owned(),
                "name".to_owned(),
                "other".to_owned()
            ]
        );
        Ok(())
    }

    #[test]
    fn the_directory_stays_the_same_inode_and_old_layouts_are_replaced() -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("vol");
        std::fs::create_dir_all(&target)?;
        // Files written directly, as an older agent did.
        std::fs::write(target.join("name"), "old")?;
        std::fs::write(target.join("gone"), "x")?;
        let inode = std::fs::metadata(&target)?.ino();
        let payload = Payload::from([("name".to_owned(), file("new", 0o644))]);
        assert_eq!(write(&target, &payload), Ok(true));
        assert_eq!(std::fs::read_to_string(target.join("name"))?, "new");
        assert!(!target.join("gone").exists());
        assert_eq!(std::fs::metadata(&target)?.ino(), inode);
        let evil = Payload::from([("..data/x".to_owned(), file("x", 0o644))]);
        assert!(write(&target, &evil).is_err());
        Ok(())
    }
}
