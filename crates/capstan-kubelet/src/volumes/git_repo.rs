//! The deprecated `gitRepo` volume, as the kubelet's plugin sets it up: an empty directory the
//! system `git` clones `repository` into (with `directory` as the clone's name when given,
//! `.` cloning into the volume itself), then, when `revision` is set, `git checkout
//! <revision>` and `git reset --hard` in the clone. It is set up once per pod (a `ready` mark
//! under `<pod-dir>/plugins/kubernetes.io~git-repo/<name>/`) and never refreshed; a failed
//! setup leaves the directory empty for the next try.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::GitRepoVolumeSource;

/// How long one git command may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(300);

fn io_error(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Refuses arguments git would read as options.
fn non_flag(value: &str, what: &str) -> Result<(), String> {
    if value.starts_with('-') {
        return Err(format!("{value:?} is an invalid value for {what}"));
    }
    Ok(())
}

/// Checks a source as the plugin does before running git.
pub fn validate(source: &GitRepoVolumeSource) -> Result<(), String> {
    non_flag(&source.repository, "repository")?;
    non_flag(source.revision.as_deref().unwrap_or_default(), "revision")?;
    non_flag(source.directory.as_deref().unwrap_or_default(), "directory")
}

/// Runs `git args` in `dir`; its combined output on failure.
async fn git(args: &[&str], dir: &Path) -> Result<(), String> {
    let shown = format!("git {}", args.join(" "));
    let child = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        // Never wait for credentials on a terminal the agent does not have.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(GIT_TIMEOUT, child).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("failed to exec '{shown}': {e}")),
        Err(_) => {
            return Err(format!(
                "failed to exec '{shown}': timed out after {}s",
                GIT_TIMEOUT.as_secs()
            ));
        }
    };
    if output.status.success() {
        return Ok(());
    }
    let mut said = String::from_utf8_lossy(&output.stdout).into_owned();
    said.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(format!(
        "failed to exec '{shown}': {}: {}",
        said.trim(),
        output.status
    ))
}

/// Where the clone is once `git clone` ran in `dir`: the volume itself for directory `.`, the
/// named directory for another, the one directory git created otherwise.
pub fn clone_dir(dir: &Path, directory: Option<&str>) -> Result<PathBuf, String> {
    if let Some(directory) = directory.filter(|d| !d.is_empty()) {
        let parts: Vec<&str> = directory
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        return Ok(parts.iter().fold(dir.to_path_buf(), |d, p| d.join(p)));
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io_error(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    match entries.as_slice() {
        [only] => Ok(only.clone()),
        _ => Err(format!(
            "unexpected directory contents: {:?}",
            entries
                .iter()
                .filter_map(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
        )),
    }
}

fn empty(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| io_error(&path, e))?;
    }
    Ok(())
}

async fn clone(source: &GitRepoVolumeSource, dir: &Path) -> Result<(), String> {
    let mut args = vec!["clone", "--", source.repository.as_str()];
    let directory = source.directory.as_deref().filter(|d| !d.is_empty());
    if let Some(directory) = directory {
        args.push(directory);
    }
    git(&args, dir).await?;
    let Some(revision) = source.revision.as_deref().filter(|r| !r.is_empty()) else {
        return Ok(());
    };
    let repo = clone_dir(dir, directory)?;
    git(&["checkout", revision], &repo).await?;
    git(&["reset", "--hard"], &repo).await
}

/// Sets the volume up in `dir` unless that was done (`meta_dir` holds the mark).
pub async fn set_up(
    source: &GitRepoVolumeSource,
    dir: &Path,
    meta_dir: &Path,
) -> Result<(), String> {
    let ready = meta_dir.join("ready");
    if ready.exists() {
        return Ok(());
    }
    validate(source)?;
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| io_error(dir, e))?;
    // What an earlier, failed try left.
    empty(dir)?;
    if let Err(e) = clone(source, dir).await {
        let _ = empty(dir);
        return Err(e);
    }
    std::fs::create_dir_all(meta_dir).map_err(|e| io_error(meta_dir, e))?;
    std::fs::write(&ready, b"").map_err(|e| io_error(&ready, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A bare repository with two commits of `file`; returns (repo, first commit).
    fn repository(root: &Path) -> (PathBuf, String) {
        let run = |args: &[&str], dir: &Path| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .output()
                .expect("git is installed (scripts/install-deps)");
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        run(&["init", "-q", "-b", "main"], &work);
        std::fs::write(work.join("file"), "one").unwrap();
        run(&["add", "file"], &work);
        run(&["commit", "-q", "-m", "one"], &work);
        let first = run(&["rev-parse", "HEAD"], &work);
        std::fs::write(work.join("file"), "two").unwrap();
        run(&["commit", "-q", "-am", "two"], &work);
        let bare = root.join("repo.git");
        run(
            &[
                "clone",
                "-q",
                "--bare",
                &work.display().to_string(),
                &bare.display().to_string(),
            ],
            root,
        );
        (bare, first)
    }

    fn source(repo: &Path, revision: Option<&str>, directory: Option<&str>) -> GitRepoVolumeSource {
        GitRepoVolumeSource {
            repository: format!("file://{}", repo.display()),
            revision: revision.map(str::to_owned),
            directory: directory.map(str::to_owned),
        }
    }

    #[tokio::test]
    async fn clones_follow_the_directory_rules() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let (repo, first) = repository(root.path());
        // No directory: a directory named by the repository, at its newest commit.
        let (dir, meta) = (root.path().join("v1"), root.path().join("m1"));
        assert_eq!(
            set_up(&source(&repo, None, None), &dir, &meta).await,
            Ok(())
        );
        assert_eq!(std::fs::read_to_string(dir.join("repo/file"))?, "two");
        assert!(meta.join("ready").exists());
        // ".": the volume is the clone, at the revision asked for.
        let (dir, meta) = (root.path().join("v2"), root.path().join("m2"));
        let at_first = source(&repo, Some(&first), Some("."));
        assert_eq!(set_up(&at_first, &dir, &meta).await, Ok(()));
        assert_eq!(std::fs::read_to_string(dir.join("file"))?, "one");
        assert!(dir.join(".git").is_dir());
        // A named directory, with a revision.
        let (dir, meta) = (root.path().join("v3"), root.path().join("m3"));
        let named = source(&repo, Some(&first), Some("code"));
        assert_eq!(set_up(&named, &dir, &meta).await, Ok(()));
        assert_eq!(std::fs::read_to_string(dir.join("code/file"))?, "one");
        // Set up once: a second call does nothing, even if the clone changed since.
        std::fs::write(dir.join("code/file"), "edited")?;
        assert_eq!(set_up(&named, &dir, &meta).await, Ok(()));
        assert_eq!(std::fs::read_to_string(dir.join("code/file"))?, "edited");
        Ok(())
    }

    #[tokio::test]
    async fn failures_say_what_git_said_and_leave_the_volume_empty() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let (repo, _) = repository(root.path());
        let (dir, meta) = (root.path().join("v"), root.path().join("m"));
        let bad_revision = source(&repo, Some("no-such-revision"), None);
        let error = set_up(&bad_revision, &dir, &meta)
            .await
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with("failed to exec 'git checkout no-such-revision'"),
            "{error}"
        );
        assert_eq!(std::fs::read_dir(&dir)?.count(), 0);
        assert!(!meta.join("ready").exists());
        let missing = source(&root.path().join("absent.git"), None, None);
        let error = set_up(&missing, &dir, &meta)
            .await
            .err()
            .unwrap_or_default();
        assert!(error.starts_with("failed to exec 'git clone --"), "{error}");
        let flag = GitRepoVolumeSource {
            repository: "--upload-pack=touch /tmp/x".to_owned(),
            ..GitRepoVolumeSource::default()
        };
        let error = set_up(&flag, &dir, &meta).await.err().unwrap_or_default();
        assert!(
            error.contains("is an invalid value for repository"),
            "{error}"
        );
        Ok(())
    }
}
