//! Images without a registry: the node agent builds the images it needs itself and imports
//! image archives into containerd, so nothing depends on pulling from the internet (DESIGN.md §8).
//!
//! - **The sandbox (pause) program** is ours: `pause/pause.rs`, a freestanding static Linux
//!   executable under 2 KB (raw system calls, no libc) that exits 0 on SIGINT or SIGTERM and
//!   otherwise reaps children forever, as upstream's `pause.c`. The build script compiles it with
//!   the crate's own `rustc` for the crate's target (x86_64 or aarch64) and it is embedded here
//!   as [`PAUSE_PROGRAM`]. [`pause_image`] packs it as the image [`PAUSE_IMAGE`], the sandbox image
//!   the agent configures containerd's CRI plugin with.
//! - **An OCI image archive writer**, [`oci_archive`]: a list of files ([`ImageFile`]) and a
//!   runtime configuration ([`ImageConfig`]) become the bytes of an OCI image-layout tar archive
//!   (`oci-layout`, `index.json`, `blobs/sha256/…`) holding one uncompressed layer, the image
//!   config (the host's `os`/`architecture`), the manifest and an index that names the image
//!   (`io.containerd.image.name`, `org.opencontainers.image.ref.name`). The output is
//!   deterministic (entries sorted, mtimes 0, owner root), so the same input always gives the
//!   same digests and re-importing an unchanged image changes nothing.
//! - **A busybox image**, [`busybox_image`], from Debian's `busybox-static` binary: `/bin/busybox`,
//!   a symlink per applet, `/etc/passwd` and `/etc/group`, `/tmp`; conventionally named
//!   [`BUSYBOX_IMAGE`] so pods that ask for `busybox` run without a registry.
//! - **Importing** archives (ours, `docker save` or OCI archives from elsewhere) into containerd's
//!   `k8s.io` namespace, the one its CRI plugin serves, with containerd's own client `ctr`:
//!   [`import`] (bytes on ctr's stdin), [`import_file`], and [`import_dir`], which imports every
//!   `*.tar` of a directory so air-gapped users can preload images (`<data-dir>/agent/images/`).
//!
//! Image names are normalised as Docker and the CRI plugin do ([`normalize_name`]):
//! `busybox` is `docker.io/library/busybox:latest`.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The sandbox (pause) image: our own pause program (see the module documentation), never
/// pulled. The registry part is not a real host, so nothing ever tries to pull it; bump the tag
/// when the program's behaviour changes (an import under the same name replaces the old one).
pub const PAUSE_IMAGE: &str = "capstan.internal/pause:1";

/// The name the busybox image built by [`busybox_image`] is conventionally imported under, the
/// one Docker Hub uses, so pods whose image is `busybox` run without a registry.
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:latest";

/// The containerd namespace of the CRI plugin, where images must be for pods to use them.
pub const CONTAINERD_NAMESPACE: &str = "k8s.io";

/// The sandbox program, compiled by the build script from `pause/pause.rs` for this target.
pub const PAUSE_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// The path of a program, `PATH` as it is conventionally set in images.
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// The host's OCI platform architecture and ELF machine: images are built for the machine the
/// agent runs on, the only one the embedded pause program is compiled for.
#[cfg(target_arch = "x86_64")]
const ARCHITECTURE: &str = "amd64";
#[cfg(target_arch = "x86_64")]
const ELF_MACHINE: u16 = 62;
#[cfg(target_arch = "aarch64")]
const ARCHITECTURE: &str = "arm64";
#[cfg(target_arch = "aarch64")]
const ELF_MACHINE: u16 = 183;

/// Failures to build or import images.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// An image name is not a valid image reference.
    #[error("invalid image name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A path of a file for an image is not a usable path.
    #[error("invalid path {path:?} in an image: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two files for an image have the same path.
    #[error("the path {0:?} appears twice in an image")]
    DuplicatePath(String),
    /// Writing the archive failed (it is written to memory, so this is not expected).
    #[error("cannot write an image archive")]
    Archive(#[source] io::Error),
    /// Serialising a JSON document of the archive failed (not expected either).
    #[error("cannot write an image's JSON")]
    Json(#[source] serde_json::Error),
    /// The busybox binary could not be read.
    #[error("cannot read the busybox binary {path}")]
    ReadBusybox {
        /// The binary.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The busybox binary is not an ELF executable for this machine, or not a static one.
    #[error(
        "{path} cannot be the busybox of an image: {reason}; install the Debian package \
         `busybox-static` (apt-get install busybox-static), whose /bin/busybox is static"
    )]
    UnsuitableBusybox {
        /// The binary.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `busybox --list` could not be run or failed.
    #[error("cannot list the applets of {path}: {reason}")]
    BusyboxList {
        /// The binary.
        path: PathBuf,
        /// What happened.
        reason: String,
        /// The error running it, if it could not be run.
        #[source]
        source: Option<io::Error>,
    },
    /// `ctr`, containerd's client, is not installed.
    #[error("`ctr` was not found on PATH: install the Debian package `containerd`")]
    CtrMissing(#[source] io::Error),
    /// Running `ctr`, or talking to it, failed.
    #[error("cannot run `ctr`")]
    Ctr(#[source] io::Error),
    /// `ctr` ran and failed.
    #[error("`ctr images import` {what} failed ({status}): {stderr}")]
    ImportFailed {
        /// What was imported.
        what: String,
        /// How ctr exited.
        status: ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// A file to import could not be found.
    #[error("cannot import {path}")]
    ImportPath {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The directory of archives to import could not be read.
    #[error("cannot read the image directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What an entry of an image's file system is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file with these contents.
    Regular(Vec<u8>),
    /// A symbolic link to this target (as written, relative or absolute).
    Symlink(String),
    /// A directory.
    Directory,
}

/// One entry of an image's file system, owned by root (0:0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// The path in the image, e.g. `/bin/sh` (a leading `/` is optional; `..` is refused).
    /// Parent directories not listed are added with mode 0755.
    pub path: String,
    /// The permission bits, setuid, setgid and sticky included (`0o7777`); 0777 for symlinks.
    pub mode: u32,
    /// What it is.
    pub kind: FileKind,
}

impl ImageFile {
    /// A regular file.
    pub fn file(path: impl Into<String>, mode: u32, contents: impl Into<Vec<u8>>) -> Self {
        let kind = FileKind::Regular(contents.into());
        Self {
            path: path.into(),
            mode,
            kind,
        }
    }

    /// A symbolic link.
    pub fn symlink(path: impl Into<String>, target: impl Into<String>) -> Self {
        let kind = FileKind::Symlink(target.into());
        Self {
            path: path.into(),
            mode: 0o777,
            kind,
        }
    }

    /// A directory.
    pub fn dir(path: impl Into<String>, mode: u32) -> Self {
        Self {
            path: path.into(),
            mode,
            kind: FileKind::Directory,
        }
    }
}

/// How containers of an image run unless told otherwise: the `config` object of the OCI image
/// configuration. Empty fields are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `Entrypoint`: the program and its first arguments.
    pub entrypoint: Vec<String>,
    /// `Cmd`: the arguments after the entrypoint (the program, if there is no entrypoint).
    pub cmd: Vec<String>,
    /// `Env`: `NAME=value` pairs.
    pub env: Vec<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
    /// `User`: a user name or uid, optionally with `:group`.
    pub user: Option<String>,
}

/// The archive of the sandbox (pause) image [`PAUSE_IMAGE`]: just `/pause` (mode 0755), its
/// entrypoint. The same bytes on every call.
pub fn pause_image() -> Vec<u8> {
    let files = [ImageFile::file("/pause", 0o755, PAUSE_PROGRAM)];
    let config = ImageConfig {
        entrypoint: vec!["/pause".to_owned()],
        ..ImageConfig::default()
    };
    match oci_archive(PAUSE_IMAGE, &files, &config) {
        Ok(archive) => archive,
        // The name and files are constants (the unit tests build this archive), and archives are
        // written to memory, where writes do not fail: there is no error to report.
        Err(err) => unreachable!("the pause image cannot be built: {err}"),
    }
}

/// The archive of a runnable busybox image named `name` (usually [`BUSYBOX_IMAGE`]) from
/// `busybox`, a statically linked busybox for this machine such as the `/bin/busybox` of
/// Debian's `busybox-static` package (a dynamic one is refused: the image has no libc).
///
/// The image holds `/bin/busybox` and a symlink to it in `/bin` for each applet it lists
/// (`busybox --list`), `/etc/passwd` and `/etc/group` (root, and nobody as 65534), and the empty
/// directories `/tmp` (1777), `/root`, `/home` and `/var/www`. It runs `sh` with the usual `PATH`.
///
/// This blocks (it reads the binary and runs it once): call it off async worker threads.
pub fn busybox_image(busybox: &Path, name: &str) -> Result<Vec<u8>, ImageError> {
    let binary = std::fs::read(busybox).map_err(|source| ImageError::ReadBusybox {
        path: busybox.to_owned(),
        source,
    })?;
    check_static_elf(&binary).map_err(|reason| ImageError::UnsuitableBusybox {
        path: busybox.to_owned(),
        reason,
    })?;
    let applets = busybox_applets(busybox)?;

    let mut files = vec![
        ImageFile::file("/bin/busybox", 0o755, binary),
        ImageFile::file(
            "/etc/passwd",
            0o644,
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
        ),
        ImageFile::file("/etc/group", 0o644, "root:x:0:\nnobody:x:65534:\n"),
        ImageFile::dir("/tmp", 0o1777),
        ImageFile::dir("/root", 0o700),
        ImageFile::dir("/home", 0o755),
        ImageFile::dir("/var/www", 0o755),
    ];
    files.extend(
        applets
            .into_iter()
            .filter(|applet| applet != "busybox")
            .map(|applet| ImageFile::symlink(format!("/bin/{applet}"), "busybox")),
    );
    let config = ImageConfig {
        cmd: vec!["sh".to_owned()],
        env: vec![DEFAULT_PATH.to_owned()],
        ..ImageConfig::default()
    };
    oci_archive(name, &files, &config)
}

/// The applets `busybox --list` names, one per line: only plain file names are kept.
fn busybox_applets(busybox: &Path) -> Result<Vec<String>, ImageError> {
    let list_error = |reason: String, source| ImageError::BusyboxList {
        path: busybox.to_owned(),
        reason,
        source,
    };
    let output = std::process::Command::new(busybox)
        .arg("--list")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| list_error("it could not be run".to_owned(), Some(err)))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(list_error(
            format!("{}: {}", output.status, stderr.trim()),
            None,
        ));
    }
    let applets: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|applet| !applet.is_empty() && *applet != "." && *applet != "..")
        .filter(|applet| !applet.contains('/'))
        .map(str::to_owned)
        .collect();
    if applets.is_empty() {
        return Err(list_error("it listed no applets".to_owned(), None));
    }
    Ok(applets)
}

/// Checks that `binary` is an ELF executable for this machine that needs no program
/// interpreter (no `PT_INTERP`: statically linked, static-pie included); says why not.
fn check_static_elf(binary: &[u8]) -> Result<(), String> {
    const PT_INTERP: u32 = 3;
    let not_elf = || "it is not an ELF executable".to_owned();
    if binary.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(not_elf());
    }
    let little = match binary.get(5) {
        Some(1) => true,
        Some(2) => false,
        _ => return Err(not_elf()),
    };
    let u16_at = |at: usize| {
        let bytes: [u8; 2] = binary.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if little {
            u16::from_le_bytes(bytes)
        } else {
            u16::from_be_bytes(bytes)
        })
    };
    let u32_at = |at: usize| {
        let bytes: [u8; 4] = binary.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    };
    let u64_at = |at: usize| {
        let bytes: [u8; 8] = binary.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if little {
            u64::from_le_bytes(bytes)
        } else {
            u64::from_be_bytes(bytes)
        })
    };
    // (e_phoff, e_phentsize, e_phnum) by class.
    let (phoff, phentsize, phnum) = match binary.get(4) {
        Some(1) => (u32_at(0x1c).map(u64::from), u16_at(0x2a), u16_at(0x2c)),
        Some(2) => (u64_at(0x20), u16_at(0x36), u16_at(0x38)),
        _ => return Err(not_elf()),
    };
    let (Some(e_type), Some(machine), Some(phoff), Some(phentsize), Some(phnum)) =
        (u16_at(0x10), u16_at(0x12), phoff, phentsize, phnum)
    else {
        return Err("its ELF header is truncated".to_owned());
    };
    if e_type != 2 && e_type != 3 {
        return Err(not_elf());
    }
    if machine != ELF_MACHINE {
        return Err(format!(
            "it is for ELF machine {machine}, not this machine's ({ARCHITECTURE}, {ELF_MACHINE})"
        ));
    }
    let phoff = usize::try_from(phoff).map_err(|_| not_elf())?;
    for index in 0..usize::from(phnum) {
        let at = usize::from(phentsize)
            .checked_mul(index)
            .and_then(|off| off.checked_add(phoff));
        let Some(p_type) = at.and_then(u32_at) else {
            return Err("its program headers are truncated".to_owned());
        };
        if p_type == PT_INTERP {
            return Err("it is dynamically linked (it has a program interpreter)".to_owned());
        }
    }
    Ok(())
}

/// Normalises an image reference as Docker and containerd's CRI plugin do: a name without a
/// registry is on `docker.io` (`library/` for one-component names) and a name without a tag or
/// digest is tagged `latest`. `busybox` becomes `docker.io/library/busybox:latest`.
pub fn normalize_name(name: &str) -> Result<String, ImageError> {
    let invalid = |reason| ImageError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    let (named, digest) = match name.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (name, None),
    };
    let (domain, remainder) = match named.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (
                if first == "index.docker.io" {
                    "docker.io"
                } else {
                    first
                },
                rest,
            )
        }
        _ => ("docker.io", named),
    };
    if domain.is_empty()
        || domain.contains(|c: char| !c.is_ascii_alphanumeric() && !".-:[]".contains(c))
    {
        return Err(invalid("its registry is not a host name"));
    }
    let last = remainder.rfind('/').map_or(0, |slash| slash + 1);
    let (path, tag) = match remainder[last..].rfind(':') {
        Some(colon) => (
            &remainder[..last + colon],
            Some(&remainder[last + colon + 1..]),
        ),
        None => (remainder, None),
    };
    let component_ok = |component: &str| {
        !component.is_empty()
            && component.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && component.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && component
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
    };
    if !path.split('/').all(component_ok) {
        return Err(invalid(
            "its path must be lowercase letters, digits and separators (`.`, `_`, `-`, `/`)",
        ));
    }
    if let Some(tag) = tag {
        let tag_ok = !tag.is_empty()
            && tag.len() <= 128
            && !tag.starts_with(['.', '-'])
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !tag_ok {
            return Err(invalid(
                "its tag must be up to 128 letters, digits, `.`, `_` or `-`",
            ));
        }
    }
    if let Some(digest) = digest {
        let digest_ok = digest.split_once(':').is_some_and(|(algorithm, hex)| {
            !algorithm.is_empty() && !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit())
        });
        if !digest_ok {
            return Err(invalid("its digest is not `algorithm:hex`"));
        }
    }
    let library = if domain == "docker.io" && !path.contains('/') {
        "library/"
    } else {
        ""
    };
    let mut normalized = format!("{domain}/{library}{path}");
    match (tag, digest) {
        (Some(tag), _) => {
            normalized.push(':');
            normalized.push_str(tag);
        }
        (None, None) => normalized.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(digest) = digest {
        normalized.push('@');
        normalized.push_str(digest);
    }
    Ok(normalized)
}

/// An OCI content descriptor.
#[derive(Serialize)]
struct Descriptor<'a> {
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    digest: String,
    size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform: Option<Platform>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, &'a str>,
}

#[derive(Serialize)]
struct Platform {
    architecture: &'static str,
    os: &'static str,
}

#[derive(Serialize)]
struct ImageConfigJson<'a> {
    architecture: &'static str,
    os: &'static str,
    config: ContainerConfigJson<'a>,
    rootfs: RootFs,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerConfigJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    env: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    entrypoint: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    cmd: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    working_dir: Option<&'a str>,
}

#[derive(Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<String>,
}

#[derive(Serialize)]
struct Manifest<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    config: Descriptor<'a>,
    layers: Vec<Descriptor<'a>>,
}

#[derive(Serialize)]
struct Index<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    manifests: Vec<Descriptor<'a>>,
}

/// `sha256:<hex>` of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", capstan_api::sha256_hex(bytes))
}

/// A tar header for an entry owned by root with mtime 0.
fn tar_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(size);
    header
}

/// The bytes of an OCI image-layout tar archive of one image named `name` (normalised with
/// [`normalize_name`]; a digest is refused), for this machine's platform: one uncompressed layer
/// with `files`, and `config`. The same input gives the same bytes.
pub fn oci_archive(
    name: &str,
    files: &[ImageFile],
    config: &ImageConfig,
) -> Result<Vec<u8>, ImageError> {
    let name = normalize_name(name)?;
    if name.contains('@') {
        return Err(ImageError::InvalidName {
            name,
            reason: "an image being built has no digest yet: name it by a tag",
        });
    }
    // The tag: what follows the last `:` after the last `/` (normalisation always adds one).
    let last = name.rfind('/').map_or(0, |slash| slash + 1);
    let tag = name[last..]
        .rsplit_once(':')
        .map_or("latest", |(_, tag)| tag);

    let layer = layer_tar(files)?;
    let layer_digest = sha256(&layer);
    let config_json = serde_json::to_vec(&ImageConfigJson {
        architecture: ARCHITECTURE,
        os: "linux",
        config: ContainerConfigJson {
            user: config.user.as_deref(),
            env: &config.env,
            entrypoint: &config.entrypoint,
            cmd: &config.cmd,
            working_dir: config.working_dir.as_deref(),
        },
        rootfs: RootFs {
            kind: "layers",
            diff_ids: vec![layer_digest.clone()],
        },
    })
    .map_err(ImageError::Json)?;
    let manifest = serde_json::to_vec(&Manifest {
        schema_version: 2,
        media_type: MEDIA_MANIFEST,
        config: Descriptor {
            media_type: MEDIA_CONFIG,
            digest: sha256(&config_json),
            size: config_json.len(),
            platform: None,
            annotations: BTreeMap::new(),
        },
        layers: vec![Descriptor {
            media_type: MEDIA_LAYER,
            digest: layer_digest,
            size: layer.len(),
            platform: None,
            annotations: BTreeMap::new(),
        }],
    })
    .map_err(ImageError::Json)?;
    let index = serde_json::to_vec(&Index {
        schema_version: 2,
        media_type: MEDIA_INDEX,
        manifests: vec![Descriptor {
            media_type: MEDIA_MANIFEST,
            digest: sha256(&manifest),
            size: manifest.len(),
            platform: Some(Platform {
                architecture: ARCHITECTURE,
                os: "linux",
            }),
            annotations: BTreeMap::from([
                (ANNOTATION_CONTAINERD_NAME, name.as_str()),
                (ANNOTATION_REF_NAME, tag),
            ]),
        }],
    })
    .map_err(ImageError::Json)?;

    let mut blobs = BTreeMap::new();
    for blob in [layer, config_json, manifest] {
        let digest = sha256(&blob);
        let hex = digest.trim_start_matches("sha256:").to_owned();
        blobs.insert(hex, blob);
    }
    let mut archive = tar::Builder::new(Vec::new());
    let mut append = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        let mut header = tar_header(kind, mode, data.len() as u64);
        archive
            .append_data(&mut header, path, data)
            .map_err(ImageError::Archive)
    };
    append("blobs/", tar::EntryType::Directory, 0o755, &[])?;
    append("blobs/sha256/", tar::EntryType::Directory, 0o755, &[])?;
    for (hex, blob) in &blobs {
        append(
            &format!("blobs/sha256/{hex}"),
            tar::EntryType::Regular,
            0o644,
            blob,
        )?;
    }
    append("index.json", tar::EntryType::Regular, 0o644, &index)?;
    append(
        "oci-layout",
        tar::EntryType::Regular,
        0o644,
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    archive.into_inner().map_err(ImageError::Archive)
}

/// Splits an image path into its components, refusing `..` and the root itself.
fn components(path: &str) -> Result<Vec<&str>, ImageError> {
    let invalid = |reason| ImageError::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(invalid("`..` is not allowed"));
    }
    if parts.is_empty() {
        return Err(invalid("it names the root directory"));
    }
    if path.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    Ok(parts)
}

/// The layer: `files` and their unlisted parent directories, sorted by path (parents first).
fn layer_tar(files: &[ImageFile]) -> Result<Vec<u8>, ImageError> {
    let mut entries: BTreeMap<String, (u32, &FileKind)> = BTreeMap::new();
    for file in files {
        let path = components(&file.path)?.join("/");
        if entries
            .insert(path.clone(), (file.mode & 0o7777, &file.kind))
            .is_some()
        {
            return Err(ImageError::DuplicatePath(path));
        }
    }
    let mut parents = BTreeMap::new();
    for path in entries.keys() {
        let mut prefix = path.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            match entries.get(parent) {
                Some((_, FileKind::Directory)) => {}
                Some(_) => {
                    return Err(ImageError::InvalidPath {
                        path: path.clone(),
                        reason: "a parent of it is not a directory",
                    });
                }
                None => {
                    parents.insert(parent.to_owned(), (0o755, &FileKind::Directory));
                }
            }
            prefix = parent;
        }
    }
    entries.extend(parents);

    let mut layer = tar::Builder::new(Vec::new());
    for (path, (mode, kind)) in &entries {
        let appended = match kind {
            FileKind::Regular(contents) => {
                let mut header = tar_header(tar::EntryType::Regular, *mode, contents.len() as u64);
                layer.append_data(&mut header, path, contents.as_slice())
            }
            FileKind::Directory => {
                let mut header = tar_header(tar::EntryType::Directory, *mode, 0);
                layer.append_data(&mut header, format!("{path}/"), io::empty())
            }
            FileKind::Symlink(target) => {
                if target.is_empty() || target.contains('\0') {
                    return Err(ImageError::InvalidPath {
                        path: path.clone(),
                        reason: "its symlink target is empty or contains a NUL byte",
                    });
                }
                let mut header = tar_header(tar::EntryType::Symlink, 0o777, 0);
                layer.append_link(&mut header, path, target)
            }
        };
        appended.map_err(ImageError::Archive)?;
    }
    layer.into_inner().map_err(ImageError::Archive)
}

/// `ctr` against the containerd at `address`, in the CRI plugin's namespace.
fn ctr(address: &Path) -> Command {
    let mut command = Command::new("ctr");
    command
        .arg("--address")
        .arg(address)
        .arg("--namespace")
        .arg(CONTAINERD_NAMESPACE)
        .args(["images", "import"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn spawn_error(err: io::Error) -> ImageError {
    if err.kind() == io::ErrorKind::NotFound {
        ImageError::CtrMissing(err)
    } else {
        ImageError::Ctr(err)
    }
}

/// The names of the images ctr says it imported: it prints `unpacking <name> (<digest>)...done`
/// for each image it imports and unpacks.
fn imported_names(stdout: &[u8]) -> Vec<String> {
    let stdout = String::from_utf8_lossy(stdout);
    stdout
        .split("unpacking ")
        .skip(1)
        .filter_map(|rest| {
            rest.split_once(" (sha256:")
                .map(|(name, _)| name.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Checks how ctr exited and returns the names it imported.
fn import_result(what: String, output: std::process::Output) -> Result<Vec<String>, ImageError> {
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        return Err(ImageError::ImportFailed {
            what,
            status: output.status,
            stderr,
        });
    }
    Ok(imported_names(&output.stdout))
}

/// Imports an image archive (OCI image layout or `docker save` format, uncompressed) into the
/// containerd at `address`, namespace `k8s.io`, and unpacks it for the default snapshotter, with
/// `ctr --address <address> --namespace k8s.io images import -` reading the archive on its
/// standard input. Returns the names of the images imported; an image already there under the
/// same name is replaced. Dropping the future kills ctr.
pub async fn import(address: &Path, archive: &[u8]) -> Result<Vec<String>, ImageError> {
    let mut child = ctr(address)
        .arg("-")
        .stdin(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let stdin = child.stdin.take();
    let write = async move {
        let Some(mut stdin) = stdin else {
            return Ok(());
        };
        stdin.write_all(archive).await?;
        stdin.shutdown().await
    };
    let (written, output) = tokio::join!(write, child.wait_with_output());
    let output = output.map_err(ImageError::Ctr)?;
    let names = import_result(format!("of {} bytes", archive.len()), output)?;
    // ctr succeeded, so it read the whole archive; a write error after that is of no concern,
    // but one before it would have made ctr fail above.
    if let Err(err) = written {
        tracing::debug!(%err, "writing to ctr's standard input");
    }
    Ok(names)
}

/// Imports the image archive at `path` as [`import`] does, with
/// `ctr --address <address> --namespace k8s.io images import <path>`.
pub async fn import_file(address: &Path, path: &Path) -> Result<Vec<String>, ImageError> {
    let path_error = |source| ImageError::ImportPath {
        path: path.to_owned(),
        source,
    };
    // Absolute, so a name starting with `-` cannot be read as a flag; checked, for a clear error.
    let absolute = std::path::absolute(path).map_err(path_error)?;
    tokio::fs::metadata(&absolute).await.map_err(path_error)?;
    let output = ctr(address)
        .arg(&absolute)
        .output()
        .await
        .map_err(spawn_error)?;
    import_result(absolute.display().to_string(), output)
}

/// Imports every `*.tar` file of `dir` (sorted by name) as [`import_file`] does: the images an
/// air-gapped user preloads into `<data-dir>/agent/images/`. A file that fails to import is
/// logged and skipped; a missing directory imports nothing. Fails only if the directory cannot
/// be read or `ctr` is missing. Returns the names of the images imported.
pub async fn import_dir(address: &Path, dir: &Path) -> Result<Vec<String>, ImageError> {
    let read_error = |source| ImageError::ReadDir {
        path: dir.to_owned(),
        source,
    };
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(dir = %dir.display(), "no image directory: nothing to preload");
            return Ok(Vec::new());
        }
        Err(err) => return Err(read_error(err)),
    };
    let mut archives = Vec::new();
    while let Some(entry) = entries.next_entry().await.map_err(read_error)? {
        let path = entry.path();
        let is_tar = path.extension().is_some_and(|extension| extension == "tar");
        // Follows symlinks: a link to an archive elsewhere is imported too.
        if is_tar
            && tokio::fs::metadata(&path)
                .await
                .is_ok_and(|meta| meta.is_file())
        {
            archives.push(path);
        }
    }
    archives.sort();

    let mut names = Vec::new();
    for archive in archives {
        match import_file(address, &archive).await {
            Ok(imported) => {
                tracing::info!(archive = %archive.display(), images = ?imported, "imported images");
                names.extend(imported);
            }
            Err(err @ ImageError::CtrMissing(_)) => return Err(err),
            Err(err) => {
                tracing::warn!(
                    archive = %archive.display(),
                    error = &err as &dyn std::error::Error,
                    "cannot import an image archive; skipping it"
                );
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;
    use std::io::Read;

    use super::*;

    /// One entry of a tar archive, read back.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Entry {
        kind: tar::EntryType,
        mode: u32,
        data: Vec<u8>,
        link: Option<String>,
    }

    fn read_tar(bytes: &[u8]) -> BTreeMap<String, Entry> {
        let mut archive = tar::Archive::new(bytes);
        let mut entries = BTreeMap::new();
        let mut order = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
            let header = entry.header();
            assert_eq!(header.mtime().unwrap(), 0, "{path}");
            assert_eq!(
                (header.uid().unwrap(), header.gid().unwrap()),
                (0, 0),
                "{path}"
            );
            let kind = header.entry_type();
            let mode = header.mode().unwrap();
            let link = entry
                .link_name()
                .unwrap()
                .map(|link| link.to_string_lossy().into_owned());
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            order.push(path.clone());
            assert!(
                entries
                    .insert(
                        path.clone(),
                        Entry {
                            kind,
                            mode,
                            data,
                            link
                        }
                    )
                    .is_none(),
                "{path}"
            );
        }
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "entries are sorted");
        entries
    }

    fn json(entry: &Entry) -> serde_json::Value {
        serde_json::from_slice(&entry.data).unwrap()
    }

    fn blob<'a>(archive: &'a BTreeMap<String, Entry>, digest: &str) -> &'a Entry {
        let hex = digest.strip_prefix("sha256:").unwrap();
        &archive[&format!("blobs/sha256/{hex}")]
    }

    /// Checks the layout of an archive and returns its index entry, config and layer entries.
    fn check_archive(
        bytes: &[u8],
        name: &str,
        tag: &str,
    ) -> (
        serde_json::Value,
        serde_json::Value,
        BTreeMap<String, Entry>,
    ) {
        let archive = read_tar(bytes);
        assert_eq!(
            json(&archive["oci-layout"]),
            serde_json::json!({"imageLayoutVersion": "1.0.0"})
        );
        for (path, entry) in &archive {
            if let Some(hex) = path
                .strip_prefix("blobs/sha256/")
                .filter(|hex| !hex.is_empty())
            {
                assert_eq!(sha256(&entry.data), format!("sha256:{hex}"), "blob {path}");
                assert_eq!(entry.kind, tar::EntryType::Regular);
            }
        }
        let blobs = archive
            .keys()
            .filter(|path| path.starts_with("blobs/sha256/"))
            .count();
        assert_eq!(
            blobs,
            1 + 3,
            "the directory, a layer, a config and a manifest"
        );

        let index = json(&archive["index.json"]);
        assert_eq!(index["schemaVersion"], 2);
        assert_eq!(index["mediaType"], MEDIA_INDEX);
        let descriptors = index["manifests"].as_array().unwrap();
        assert_eq!(descriptors.len(), 1);
        let descriptor = &descriptors[0];
        assert_eq!(descriptor["mediaType"], MEDIA_MANIFEST);
        assert_eq!(
            descriptor["platform"],
            serde_json::json!({"architecture": ARCHITECTURE, "os": "linux"})
        );
        assert_eq!(descriptor["annotations"][ANNOTATION_CONTAINERD_NAME], name);
        assert_eq!(descriptor["annotations"][ANNOTATION_REF_NAME], tag);
        let manifest = blob(&archive, descriptor["digest"].as_str().unwrap());
        assert_eq!(descriptor["size"], manifest.data.len());

        let manifest = json(manifest);
        assert_eq!(manifest["schemaVersion"], 2);
        assert_eq!(manifest["mediaType"], MEDIA_MANIFEST);
        assert_eq!(manifest["config"]["mediaType"], MEDIA_CONFIG);
        let config = blob(&archive, manifest["config"]["digest"].as_str().unwrap());
        assert_eq!(manifest["config"]["size"], config.data.len());
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], MEDIA_LAYER);
        let layer_digest = layers[0]["digest"].as_str().unwrap();
        let layer = blob(&archive, layer_digest);
        assert_eq!(layers[0]["size"], layer.data.len());

        let config = json(config);
        assert_eq!(config["architecture"], ARCHITECTURE);
        assert_eq!(config["os"], "linux");
        assert_eq!(config["rootfs"]["type"], "layers");
        // Uncompressed: the diff ID is the layer's own digest.
        assert_eq!(
            config["rootfs"]["diff_ids"],
            serde_json::json!([layer_digest])
        );
        (
            descriptor.clone(),
            config["config"].clone(),
            read_tar(&layer.data),
        )
    }

    #[test]
    fn pause_program_is_a_static_elf_for_this_machine() {
        assert_eq!(&PAUSE_PROGRAM[..4], b"\x7fELF");
        assert_eq!(check_static_elf(PAUSE_PROGRAM), Ok(()));
        assert!(
            PAUSE_PROGRAM.len() < 16 * 1024,
            "{} bytes",
            PAUSE_PROGRAM.len()
        );
    }

    #[test]
    fn pause_image_holds_the_program() {
        let archive = pause_image();
        let (_, config, layer) = check_archive(&archive, PAUSE_IMAGE, "1");
        assert_eq!(config, serde_json::json!({"Entrypoint": ["/pause"]}));
        assert_eq!(layer.keys().collect::<Vec<_>>(), ["pause"]);
        let pause = &layer["pause"];
        assert_eq!((pause.kind, pause.mode), (tar::EntryType::Regular, 0o755));
        assert_eq!(pause.data, PAUSE_PROGRAM);
        assert_eq!(pause_image(), archive, "deterministic");
    }

    #[test]
    fn archives_hold_files_links_and_parents() {
        let files = [
            ImageFile::symlink("/usr/bin/b", "a"),
            ImageFile::file("usr/bin/a", 0o4755, "program"),
            ImageFile::dir("/tmp/", 0o1777),
            ImageFile::file(format!("/deep/{}/file", "x".repeat(150)), 0o600, "long"),
            ImageFile::symlink("/long-link", format!("/{}", "y".repeat(150))),
        ];
        let config = ImageConfig {
            entrypoint: vec!["/usr/bin/a".into()],
            cmd: vec!["--flag".into()],
            env: vec!["A=1".into()],
            working_dir: Some("/tmp".into()),
            user: Some("65534:65534".into()),
        };
        let archive = oci_archive("example", &files, &config).unwrap();
        let (_, json_config, layer) =
            check_archive(&archive, "docker.io/library/example:latest", "latest");
        assert_eq!(
            json_config,
            serde_json::json!({
                "User": "65534:65534", "Env": ["A=1"], "Entrypoint": ["/usr/bin/a"],
                "Cmd": ["--flag"], "WorkingDir": "/tmp",
            })
        );
        let long = format!("deep/{}/", "x".repeat(150));
        let paths: Vec<&str> = layer.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "deep/",
                long.as_str(),
                &format!("{long}file"),
                "long-link",
                "tmp/",
                "usr/",
                "usr/bin/",
                "usr/bin/a",
                "usr/bin/b",
            ]
        );
        assert_eq!(
            (layer["deep/"].kind, layer["deep/"].mode),
            (tar::EntryType::Directory, 0o755)
        );
        assert_eq!(
            (layer["tmp/"].kind, layer["tmp/"].mode),
            (tar::EntryType::Directory, 0o1777)
        );
        let a = &layer["usr/bin/a"];
        assert_eq!(
            (a.kind, a.mode, a.data.as_slice()),
            (tar::EntryType::Regular, 0o4755, b"program".as_slice())
        );
        let b = &layer["usr/bin/b"];
        assert_eq!(
            (b.kind, b.link.as_deref()),
            (tar::EntryType::Symlink, Some("a"))
        );
        assert_eq!(
            layer["long-link"].link.as_deref(),
            Some(format!("/{}", "y".repeat(150)).as_str())
        );
        assert_eq!(layer[&format!("{long}file")].data, b"long");
        assert_eq!(
            oci_archive("example", &files, &config).unwrap(),
            archive,
            "deterministic"
        );
    }

    #[test]
    fn archives_refuse_bad_input() {
        let config = ImageConfig::default();
        let file = |path: &str| ImageFile::file(path, 0o644, "x");
        for files in [
            vec![file("/a/../b")],
            vec![file("/")],
            vec![file("/a"), file("a")],
            vec![file("/a"), file("/a/b")],
        ] {
            assert!(oci_archive("x:1", &files, &config).is_err(), "{files:?}");
        }
        for name in ["", "UPPER", "x:", "x@sha256:00", "a//b", "x:-tag", "-x"] {
            assert!(
                oci_archive(name, &[file("/a")], &config).is_err(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn names_normalize_as_docker_does() {
        for (name, normalized) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            ("user/app:v1", "docker.io/user/app:v1"),
            ("index.docker.io/user/app", "docker.io/user/app:latest"),
            ("localhost/app", "localhost/app:latest"),
            ("localhost:5000/a/b:c", "localhost:5000/a/b:c"),
            ("capstan.internal/pause:1", "capstan.internal/pause:1"),
            ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
            (
                "busybox@sha256:abcd",
                "docker.io/library/busybox@sha256:abcd",
            ),
            (
                "busybox:1@sha256:abcd",
                "docker.io/library/busybox:1@sha256:abcd",
            ),
        ] {
            assert_eq!(normalize_name(name).unwrap(), normalized, "{name}");
        }
        for name in [
            "",
            "Busybox",
            "a//b",
            "a:b:c",
            "x@sha256",
            "x@sha256:xyz",
            "/a",
        ] {
            assert!(normalize_name(name).is_err(), "{name:?}");
        }
    }

    #[test]
    fn elf_checks() {
        assert!(
            check_static_elf(b"#!/bin/sh\n")
                .unwrap_err()
                .contains("not an ELF")
        );
        assert!(
            check_static_elf(b"\x7fELF\x02\x01")
                .unwrap_err()
                .contains("truncated")
        );
        // A 64-bit little-endian executable header and one program header of type `p_type`.
        let elf = |machine: u16, p_type: u32| {
            let mut elf = vec![0u8; 64 + 56];
            elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
            elf[0x10..0x12].copy_from_slice(&2u16.to_le_bytes());
            elf[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
            elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
            elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
            elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
            elf[64..68].copy_from_slice(&p_type.to_le_bytes());
            elf
        };
        assert_eq!(check_static_elf(&elf(ELF_MACHINE, 1)), Ok(()));
        let err = check_static_elf(&elf(ELF_MACHINE, 3)).unwrap_err();
        assert!(err.contains("dynamically linked"), "{err}");
        let err = check_static_elf(&elf(ELF_MACHINE + 1, 1)).unwrap_err();
        assert!(err.contains("machine"), "{err}");
        let mut truncated = elf(ELF_MACHINE, 1);
        truncated.truncate(66);
        let err = check_static_elf(&truncated).unwrap_err();
        assert!(err.contains("program headers are truncated"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let dynamic = dir.path().join("busybox");
        std::fs::write(&dynamic, elf(ELF_MACHINE, 3)).unwrap();
        let err = busybox_image(&dynamic, BUSYBOX_IMAGE).unwrap_err();
        assert!(err.to_string().contains("busybox-static"), "{err}");
        let err = busybox_image(&dir.path().join("none"), BUSYBOX_IMAGE).unwrap_err();
        assert!(matches!(err, ImageError::ReadBusybox { .. }), "{err}");
    }

    #[test]
    fn busybox_image_holds_busybox_and_its_applets() {
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            eprintln!("skipped: /bin/busybox is not installed (Debian package busybox-static)");
            return;
        }
        let archive = busybox_image(busybox, BUSYBOX_IMAGE).unwrap();
        let (_, config, layer) = check_archive(&archive, BUSYBOX_IMAGE, "latest");
        assert_eq!(
            config,
            serde_json::json!({"Env": [DEFAULT_PATH], "Cmd": ["sh"]})
        );
        let binary = &layer["bin/busybox"];
        assert_eq!((binary.kind, binary.mode), (tar::EntryType::Regular, 0o755));
        assert_eq!(binary.data, std::fs::read(busybox).unwrap());
        for applet in ["sh", "ls", "echo", "sleep", "wget", "["] {
            let link = &layer[&format!("bin/{applet}")];
            assert_eq!(
                (link.kind, link.link.as_deref()),
                (tar::EntryType::Symlink, Some("busybox")),
                "{applet}"
            );
        }
        assert_eq!(
            (layer["tmp/"].kind, layer["tmp/"].mode),
            (tar::EntryType::Directory, 0o1777)
        );
        for dir in ["root/", "home/", "var/", "var/www/", "etc/", "bin/"] {
            assert_eq!(layer[dir].kind, tar::EntryType::Directory, "{dir}");
        }
        let passwd = String::from_utf8(layer["etc/passwd"].data.clone()).unwrap();
        assert!(passwd.starts_with("root:x:0:0:") && passwd.contains("nobody:x:65534:65534:"));
        assert!(String::from_utf8_lossy(&layer["etc/group"].data).contains("nobody:x:65534:"));
        assert_eq!(
            busybox_image(busybox, BUSYBOX_IMAGE).unwrap(),
            archive,
            "deterministic"
        );
    }

    /// skopeo, if installed, reads the archives as an independent check of the layout.
    #[test]
    fn skopeo_accepts_the_archives() {
        if std::process::Command::new("skopeo")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: skopeo is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause.tar");
        std::fs::write(&path, pause_image()).unwrap();
        let output = std::process::Command::new("skopeo")
            .args(["inspect", "--config"])
            .arg(format!("oci-archive:{}", path.display()))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let config: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/pause"])
        );
        assert_eq!(config["architecture"], ARCHITECTURE);
    }

    #[test]
    fn ctr_output_names_the_images() {
        let stdout = b"unpacking docker.io/library/busybox:latest (sha256:0123)...done\n\
                       unpacking capstan.internal/pause:1 (sha256:4567)...done\n";
        assert_eq!(imported_names(stdout), [BUSYBOX_IMAGE, PAUSE_IMAGE]);
        assert!(imported_names(b"").is_empty());
    }

    #[tokio::test]
    async fn import_dir_of_a_missing_directory_imports_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let names = import_dir(&dir.path().join("c.sock"), &dir.path().join("none"))
            .await
            .unwrap();
        assert!(names.is_empty());
    }
}
