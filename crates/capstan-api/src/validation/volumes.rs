//! Volumes: a pod's volumes (unique DNS-label names, exactly one source, each source's own
//! rules) and the sources of a PersistentVolume, as upstream validates them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{go_string_slice, validate_label_selector};
use crate::validation::names::{
    NameValidator, inclusive_range_error, is_dns1123_subdomain, validate_dns1123_label,
    validate_dns1123_subdomain, validate_qualified_name,
};

/// Upstream's message for a file mode outside 0..=0o777.
pub const FILE_MODE_ERROR: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const MORE_THAN_ONE: &str = "may not specify more than 1 volume type";

/// Host-path types upstream supports (sorted, as it lists them).
pub const HOST_PATH_TYPES: &[&str] = &[
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

/// Paths a downward-API volume file may reference.
const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// Resources a resource-field selector may reference (sorted).
pub const CONTAINER_RESOURCE_FIELD_PATHS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// What a pod's volume list yields for container checks: each valid volume's name and whether it
/// is backed by a claim (a PVC or a generic ephemeral volume), and whether it is an image volume.
#[derive(Clone, Debug, Default)]
pub struct VolumeIndex {
    volumes: BTreeMap<String, (bool, bool)>,
}

impl VolumeIndex {
    /// Whether a valid volume has this name.
    pub fn has(&self, name: &str) -> bool {
        self.volumes.contains_key(name)
    }

    /// Whether the named volume is claim-backed (usable as a block device).
    pub fn is_claim(&self, name: &str) -> bool {
        self.volumes.get(name).is_some_and(|(claim, _)| *claim)
    }

    /// Whether the named volume is an image volume.
    pub fn is_image(&self, name: &str) -> bool {
        self.volumes.get(name).is_some_and(|(_, image)| *image)
    }
}

fn mode_error(mode: Option<i32>, path: &Path) -> Option<FieldError> {
    mode.filter(|m| !(0..=0o777).contains(m))
        .map(|m| FieldError::invalid(path, m, FILE_MODE_ERROR))
}

/// `required_if_empty` on its own.
fn required(value: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(value, path, &mut errs);
    errs
}

fn required_if_empty(value: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
}

fn is_abs(path: &str) -> bool {
    path.starts_with('/')
}

/// No `..` element in the path.
pub fn validate_path_no_backsteps(target: &str, path: &Path) -> Vec<FieldError> {
    if target.split('/').any(|item| item == "..") {
        vec![FieldError::invalid(path, target, "must not contain '..'")]
    } else {
        Vec::new()
    }
}

/// A relative path without `..` elements.
pub fn validate_local_descending_path(target: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if is_abs(target) {
        errs.push(FieldError::invalid(path, target, "must be a relative path"));
    }
    errs.extend(validate_path_no_backsteps(target, path));
    errs
}

/// A relative path without `..` elements that does not start with `..`.
pub fn validate_local_non_reserved_path(target: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_local_descending_path(target, path);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(FieldError::invalid(
            path,
            target,
            "must not start with '..'",
        ));
    }
    errs
}

fn validate_key_to_path(kp: &api::KeyToPath, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(&kp.key, &path.child("key"), &mut errs);
    required_if_empty(&kp.path, &path.child("path"), &mut errs);
    errs.extend(validate_local_non_reserved_path(
        &kp.path,
        &path.child("path"),
    ));
    errs.extend(mode_error(kp.mode, &path.child("mode")));
    errs
}

fn validate_host_path(hp: &api::HostPathVolumeSource, path: &Path) -> Vec<FieldError> {
    if hp.path.is_empty() {
        return vec![FieldError::required(&path.child("path"), "")];
    }
    let mut errs = validate_path_no_backsteps(&hp.path, &path.child("path"));
    if let Some(t) = &hp.type_
        && !HOST_PATH_TYPES.contains(&t.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            t.as_str(),
            HOST_PATH_TYPES,
        ));
    }
    errs
}

/// A field selector of the downward API against the allowed paths.
pub fn validate_object_field_selector(
    fs: &api::ObjectFieldSelector,
    allowed: &[&str],
    path: &Path,
) -> Vec<FieldError> {
    let api_version = fs.api_version.as_deref().unwrap_or("");
    if api_version.is_empty() {
        return vec![FieldError::required(&path.child("apiVersion"), "")];
    }
    if fs.field_path.is_empty() {
        return vec![FieldError::required(&path.child("fieldPath"), "")];
    }
    if api_version != "v1" {
        return vec![FieldError::invalid(
            &path.child("fieldPath"),
            fs.field_path.as_str(),
            &format!("error converting fieldPath: unsupported pod version: {api_version}"),
        )];
    }
    let field_path = fs.field_path.as_str();
    // `metadata.labels['key']` and `metadata.annotations['key']` select one entry.
    if let Some(open) = field_path.find("['")
        && field_path.ends_with("']")
        && open + 2 <= field_path.len() - 2
    {
        let base = &field_path[..open];
        let subscript = &field_path[open + 2..field_path.len() - 2];
        return match base {
            "metadata.annotations" => validate_qualified_name(&subscript.to_lowercase(), path),
            "metadata.labels" => validate_qualified_name(subscript, path),
            _ => vec![FieldError::invalid(
                path,
                base,
                "does not support subscript",
            )],
        };
    }
    // Upstream's conversion accepts these paths, and then checks the allowed list.
    const CONVERTIBLE: &[&str] = &[
        "metadata.annotations",
        "metadata.labels",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.schedulerName",
        "status.phase",
        "status.hostIP",
        "status.hostIPs",
        "status.podIP",
        "status.podIPs",
    ];
    if !CONVERTIBLE.contains(&field_path) {
        return vec![FieldError::invalid(
            &path.child("fieldPath"),
            field_path,
            &format!("error converting fieldPath: field label not supported: {field_path}"),
        )];
    }
    if !allowed.contains(&field_path) {
        return vec![FieldError::not_supported(
            &path.child("fieldPath"),
            field_path,
            allowed,
        )];
    }
    Vec::new()
}

const CPU_DIVISORS: &[&str] = &["1m", "1"];
const BYTE_DIVISORS: &[&str] = &[
    "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
];

/// A resource field selector of the downward API.
pub fn validate_container_resource_field_selector(
    fs: &api::ResourceFieldSelector,
    volume: bool,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let resource = fs.resource.as_str();
    if volume && fs.container_name.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(&path.child("containerName"), ""));
    } else if resource.is_empty() {
        errs.push(FieldError::required(&path.child("resource"), ""));
    } else if !CONTAINER_RESOURCE_FIELD_PATHS.contains(&resource)
        && !resource.starts_with("limits.hugepages-")
        && !resource.starts_with("requests.hugepages-")
    {
        errs.push(FieldError::not_supported(
            &path.child("resource"),
            resource,
            CONTAINER_RESOURCE_FIELD_PATHS,
        ));
    }
    let Some(divisor) = &fs.divisor else {
        return errs;
    };
    let shown = match crate::quantity::Quantity::parse(&divisor.0) {
        Ok(q) if q.is_zero() => return errs,
        Ok(q) => q.canonical(),
        Err(e) => {
            errs.push(FieldError::invalid(
                &path.child("divisor"),
                divisor.0.as_str(),
                &e.to_string(),
            ));
            return errs;
        }
    };
    let (allowed, what) = match resource {
        "limits.cpu" | "requests.cpu" => (CPU_DIVISORS, "cpu"),
        "limits.memory" | "requests.memory" => (BYTE_DIVISORS, "memory"),
        "limits.ephemeral-storage" | "requests.ephemeral-storage" => {
            (BYTE_DIVISORS, "local ephemeral storage")
        }
        r if r.starts_with("requests.hugepages-") || r.starts_with("limits.hugepages-") => {
            (BYTE_DIVISORS, "hugepages")
        }
        _ => return errs,
    };
    if !allowed.contains(&shown.as_str()) {
        let detail = if what == "cpu" {
            "only divisor's values 1m and 1 are supported with the cpu resource".to_owned()
        } else {
            format!(
                "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the {what} resource"
            )
        };
        errs.push(FieldError::invalid(
            &path.child("divisor"),
            resource,
            &detail,
        ));
    }
    errs
}

fn validate_downward_api_file(file: &api::DownwardAPIVolumeFile, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(&file.path, &path.child("path"), &mut errs);
    errs.extend(validate_local_non_reserved_path(
        &file.path,
        &path.child("path"),
    ));
    match (&file.field_ref, &file.resource_field_ref) {
        (Some(fr), rfr) => {
            errs.extend(validate_object_field_selector(
                fr,
                VOLUME_FIELD_PATHS,
                &path.child("fieldRef"),
            ));
            if rfr.is_some() {
                errs.push(FieldError::invalid(
                    path,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        }
        (None, Some(rfr)) => errs.extend(validate_container_resource_field_selector(
            rfr,
            true,
            &path.child("resourceFieldRef"),
        )),
        (None, None) => errs.push(FieldError::required(
            path,
            "one of fieldRef and resourceFieldRef is required",
        )),
    }
    errs.extend(mode_error(file.mode, &path.child("mode")));
    errs
}

fn validate_projected(projected: &api::ProjectedVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(mode_error(
        projected.default_mode,
        &path.child("defaultMode"),
    ));
    let mut all_paths: BTreeSet<String> = BTreeSet::new();
    let mut note_path = |p: &str, shown: &str, errs: &mut Vec<FieldError>| {
        if !all_paths.insert(p.to_owned()) {
            errs.push(FieldError::invalid(
                path,
                shown,
                "conflicting duplicate paths",
            ));
        }
    };
    for (i, source) in projected.sources.iter().flatten().enumerate() {
        let src_path = path.child("sources").index(i);
        let mut count = 0;
        if let Some(secret) = &source.secret {
            count += 1;
            let p = src_path.child("secret");
            let name = secret.name.as_str();
            required_if_empty(name, &p.child("name"), &mut errs);
            for (j, kp) in secret.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &p.child("items").index(j)));
                if !kp.path.is_empty() {
                    note_path(&kp.path, name, &mut errs);
                }
            }
        }
        if let Some(cm) = &source.config_map {
            count += 1;
            let p = src_path.child("configMap");
            let name = cm.name.as_str();
            required_if_empty(name, &p.child("name"), &mut errs);
            for (j, kp) in cm.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &p.child("items").index(j)));
                if !kp.path.is_empty() {
                    note_path(&kp.path, name, &mut errs);
                }
            }
        }
        if let Some(dapi) = &source.downward_api {
            count += 1;
            let p = src_path.child("downwardAPI");
            for file in dapi.items.iter().flatten() {
                errs.extend(validate_downward_api_file(file, &p));
                if !file.path.is_empty() {
                    note_path(&file.path, &file.path, &mut errs);
                }
            }
        }
        if let Some(token) = &source.service_account_token {
            count += 1;
            let p = src_path.child("serviceAccountToken");
            let expiration = token.expiration_seconds.unwrap_or(0);
            if expiration < 600 {
                errs.push(FieldError::invalid(
                    &p.child("expirationSeconds"),
                    expiration,
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if expiration > 1 << 32 {
                errs.push(FieldError::invalid(
                    &p.child("expirationSeconds"),
                    expiration,
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
            if token.path.is_empty() {
                errs.push(FieldError::required(&path.child("path"), ""));
            } else {
                errs.extend(validate_local_non_reserved_path(
                    &token.path,
                    &path.child("path"),
                ));
            }
        }
        if let Some(ctb) = &source.cluster_trust_bundle {
            count += 1;
            let p = src_path.child("clusterTrustBundle");
            match (&ctb.name, &ctb.signer_name) {
                (Some(_), Some(_)) => errs.push(FieldError::invalid(
                    &p,
                    BadValue::Omitted,
                    "only one of name and signerName may be used",
                )),
                (Some(name), None) => {
                    if name.is_empty() {
                        errs.push(FieldError::required(
                            &p.child("name"),
                            "must be a valid object name",
                        ));
                    }
                    if ctb.label_selector.is_some() {
                        errs.push(FieldError::invalid(
                            &p.child("labelSelector"),
                            BadValue::Omitted,
                            "labelSelector must be unset if name is specified",
                        ));
                    }
                }
                (None, Some(signer)) => {
                    if signer.is_empty() {
                        errs.push(FieldError::required(
                            &p.child("signerName"),
                            "must be a valid signer name",
                        ));
                    }
                    errs.extend(validate_label_selector(
                        ctb.label_selector.as_ref(),
                        false,
                        &p.child("labelSelector"),
                    ));
                }
                (None, None) => errs.push(FieldError::required(
                    &p,
                    "either name or signerName must be specified",
                )),
            }
            required_if_empty(&ctb.path, &p.child("path"), &mut errs);
            errs.extend(validate_local_non_reserved_path(
                &ctb.path,
                &p.child("path"),
            ));
            note_path(&ctb.path, &ctb.path, &mut errs);
        }
        if count > 1 {
            errs.push(FieldError::forbidden(
                &src_path,
                "may not specify more than 1 volume type per source",
            ));
        }
    }
    errs
}

fn iqn_valid(value: &str) -> bool {
    // iqn\.\d{4}-\d{2}\.([[:alnum:]-.]+)(:[^,;*&$|\s]+)$, unanchored at the start.
    let b = value.as_bytes();
    (0..b.len()).any(|start| {
        let rest = &b[start..];
        if rest.len() < 12 || &rest[..4] != b"iqn." {
            return false;
        }
        let date = &rest[4..12];
        if !(date[..4].iter().all(u8::is_ascii_digit)
            && date[4] == b'-'
            && date[5..7].iter().all(u8::is_ascii_digit)
            && date[7] == b'.')
        {
            return false;
        }
        let tail = &rest[12..];
        // Some split point: a nonempty name part, then ':' and a nonempty allowed tail.
        (1..tail.len()).any(|colon| {
            tail[colon] == b':'
                && tail[..colon]
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
                && tail.len() > colon + 1
                && tail[colon + 1..]
                    .iter()
                    .all(|c| !b",;*&$|".contains(c) && !c.is_ascii_whitespace())
        })
    })
}

fn iscsi_name_valid(value: &str) -> bool {
    if value.starts_with("iqn") {
        iqn_valid(value)
    } else if value.starts_with("eui") {
        value.len() == 20 && value.bytes().skip(4).all(|b| b.is_ascii_alphanumeric())
    } else if value.starts_with("naa") {
        value.len() == 36 && value.bytes().skip(4).all(|b| b.is_ascii_alphanumeric())
    } else {
        false
    }
}

fn has_iscsi_prefix(value: &str) -> bool {
    value.starts_with("iqn") || value.starts_with("eui") || value.starts_with("naa")
}

fn validate_iscsi_common(
    iqn: &str,
    lun: i32,
    chap: bool,
    has_secret: bool,
    initiator: Option<&str>,
    prefix_detail: &str,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if iqn.is_empty() {
        errs.push(FieldError::required(&path.child("iqn"), ""));
    } else if !has_iscsi_prefix(iqn) {
        errs.push(FieldError::invalid(&path.child("iqn"), iqn, prefix_detail));
    } else if !iscsi_name_valid(iqn) {
        errs.push(FieldError::invalid(
            &path.child("iqn"),
            iqn,
            "must be valid format",
        ));
    }
    if !(0..=255).contains(&lun) {
        errs.push(FieldError::invalid(
            &path.child("lun"),
            lun,
            &inclusive_range_error(0, 255),
        ));
    }
    if chap && !has_secret {
        errs.push(FieldError::required(&path.child("secretRef"), ""));
    }
    if let Some(initiator) = initiator {
        if !has_iscsi_prefix(initiator) {
            errs.push(FieldError::invalid(
                &path.child("initiatorname"),
                initiator,
                prefix_detail,
            ));
        }
        if has_iscsi_prefix(initiator) && !iscsi_name_valid(initiator) {
            errs.push(FieldError::invalid(
                &path.child("initiatorname"),
                initiator,
                "must be valid format",
            ));
        }
    }
    errs
}

fn validate_fc(fc: &api::FCVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let wwns = fc.target_wwns.as_deref().unwrap_or(&[]);
    let wwids = fc.wwids.as_deref().unwrap_or(&[]);
    if wwns.is_empty() && wwids.is_empty() {
        errs.push(FieldError::required(
            &path.child("targetWWNs"),
            "must specify either targetWWNs or wwids, but not both",
        ));
    }
    if !wwns.is_empty() && !wwids.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("targetWWNs"),
            BadValue::Other(go_string_slice(wwns)),
            "targetWWNs and wwids can not be specified simultaneously",
        ));
    }
    if !wwns.is_empty() {
        match fc.lun {
            None => errs.push(FieldError::required(
                &path.child("lun"),
                "lun is required if targetWWNs is specified",
            )),
            Some(lun) if !(0..=255).contains(&lun) => errs.push(FieldError::invalid(
                &path.child("lun"),
                lun,
                &inclusive_range_error(0, 255),
            )),
            Some(_) => {}
        }
    }
    errs
}

fn validate_flex_options(
    options: Option<&BTreeMap<String, String>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for key in options.into_iter().flatten().map(|(k, _)| k) {
        let namespace = key.split_once('/').map_or(key.as_str(), |(ns, _)| ns);
        let normalized = format!(".{}", namespace.to_lowercase());
        if normalized.ends_with(".kubernetes.io") || normalized.ends_with(".k8s.io") {
            errs.push(FieldError::invalid(
                &path.child("options").key(key),
                key.as_str(),
                "kubernetes.io and k8s.io namespaces are reserved",
            ));
        }
    }
    errs
}

fn validate_flocker(f: &api::FlockerVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = f.dataset_name.as_deref().unwrap_or("");
    let uuid = f.dataset_uuid.as_deref().unwrap_or("");
    if name.is_empty() && uuid.is_empty() {
        errs.push(FieldError::required(
            path,
            "one of datasetName and datasetUUID is required",
        ));
    }
    if !name.is_empty() && !uuid.is_empty() {
        errs.push(FieldError::invalid(
            path,
            "resource",
            "datasetName and datasetUUID can not be specified simultaneously",
        ));
    }
    if name.contains('/') {
        errs.push(FieldError::invalid(
            &path.child("datasetName"),
            name,
            "must not contain '/'",
        ));
    }
    errs
}

fn validate_nfs(nfs: &api::NFSVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(&nfs.server, &path.child("server"), &mut errs);
    required_if_empty(&nfs.path, &path.child("path"), &mut errs);
    if !is_abs(&nfs.path) {
        errs.push(FieldError::invalid(
            &path.child("path"),
            nfs.path.as_str(),
            "must be an absolute path",
        ));
    }
    errs
}

fn split_host_port_ok(pair: &str) -> bool {
    if let Some(rest) = pair.strip_prefix('[') {
        return rest
            .split_once("]:")
            .is_some_and(|(_, port)| !port.contains(':'));
    }
    pair.matches(':').count() == 1 && !pair.contains('[') && !pair.contains(']')
}

fn validate_quobyte(q: &api::QuobyteVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let registry_msg = "must be a host:port pair or multiple pairs separated by commas";
    if q.registry.is_empty() {
        errs.push(FieldError::required(&path.child("registry"), registry_msg));
    } else if q.tenant.as_deref().unwrap_or("").len() >= 65 {
        errs.push(FieldError::required(
            &path.child("tenant"),
            "must be a UUID and may not exceed a length of 64 characters",
        ));
    } else {
        for pair in q.registry.split(',') {
            if !split_host_port_ok(pair) {
                errs.push(FieldError::invalid(
                    &path.child("registry"),
                    q.registry.as_str(),
                    registry_msg,
                ));
            }
        }
    }
    required_if_empty(&q.volume, &path.child("volume"), &mut errs);
    errs
}

fn validate_azure_disk(a: &api::AzureDiskVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(&a.disk_name, &path.child("diskName"), &mut errs);
    required_if_empty(&a.disk_uri, &path.child("diskURI"), &mut errs);
    if let Some(mode) = &a.caching_mode {
        const MODES: &[&str] = &["None", "ReadOnly", "ReadWrite"];
        if !MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("cachingMode"),
                mode.as_str(),
                MODES,
            ));
        }
    }
    if let Some(kind) = &a.kind {
        const KINDS: &[&str] = &["Dedicated", "Managed", "Shared"];
        if !KINDS.contains(&kind.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("kind"),
                kind.as_str(),
                KINDS,
            ));
        }
        if kind == "Managed" && !a.disk_uri.starts_with("/subscriptions/") {
            errs.push(FieldError::not_supported(
                &path.child("diskURI"),
                a.disk_uri.as_str(),
                &["/subscriptions/{sub-id}/resourcegroups/{group-name}/providers/microsoft.compute/disks/{disk-id}"],
            ));
        }
        if kind != "Managed" && !a.disk_uri.starts_with("https://") {
            errs.push(FieldError::not_supported(
                &path.child("diskURI"),
                a.disk_uri.as_str(),
                &["https://{account-name}.blob.core.windows.net/{container-name}/{disk-name}.vhd"],
            ));
        }
    }
    errs
}

fn validate_storageos_names(
    name: Option<&str>,
    namespace: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match name.unwrap_or("") {
        "" => errs.push(FieldError::required(&path.child("volumeName"), "")),
        n => errs.extend(validate_dns1123_label(n, &path.child("volumeName"))),
    }
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        errs.extend(validate_dns1123_label(ns, &path.child("volumeNamespace")));
    }
    errs
}

/// A CSI driver name: a DNS subdomain (case-insensitively) of at most 63 characters.
pub fn validate_csi_driver_name(driver: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if driver.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    if driver.len() > 63 {
        errs.push(FieldError::too_long(path, 63));
    }
    for msg in is_dns1123_subdomain(&driver.to_lowercase()) {
        errs.push(FieldError::invalid(path, driver, &msg));
    }
    errs
}

fn validate_pv_secret_reference(r: &api::SecretReference, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match r.name.as_deref().unwrap_or("") {
        "" => errs.push(FieldError::required(&path.child("name"), "")),
        n => errs.extend(validate_dns1123_subdomain(n, &path.child("name"))),
    }
    match r.namespace.as_deref().unwrap_or("") {
        "" => errs.push(FieldError::required(&path.child("namespace"), "")),
        ns => errs.extend(validate_dns1123_label(ns, &path.child("namespace"))),
    }
    errs
}

/// Whether the pod is being validated as a Pod (not a template), and its metadata if so.
#[derive(Clone, Copy, Debug, Default)]
pub struct VolumeContext<'a> {
    /// The pod's metadata, for generic ephemeral volumes' PVC names.
    pub pod_meta: Option<&'a ObjectMeta>,
    /// Whether the top-level object is a Pod.
    pub resource_is_pod: bool,
}

/// Visits one volume source in upstream's order (pod volumes and PersistentVolumes alike):
/// only the first one set is validated, each further one is forbidden.
macro_rules! one_source {
    ($errs:ident, $count:ident, $path:expr, $field:expr, $name:expr, $check:expr) => {
        if let Some(s) = &$field {
            if $count > 0 {
                $errs.push(FieldError::forbidden(&$path.child($name), MORE_THAN_ONE));
            } else {
                $count += 1;
                #[allow(clippy::redundant_closure_call)]
                $errs.extend(($check)(s));
            }
        }
    };
}

/// A partition number of a cloud disk: 0 (none) to 255.
fn validate_partition(partition: Option<i32>, path: &Path, errs: &mut Vec<FieldError>) {
    let partition = partition.unwrap_or(0);
    if !(0..=255).contains(&partition) {
        errs.push(FieldError::invalid(
            path,
            partition,
            &inclusive_range_error(1, 255),
        ));
    }
}

/// A GCE persistent disk, for pods and PersistentVolumes alike (upstream reports under
/// `persistentDisk`); `path` is the volume source's.
fn validate_gce_pd(s: &api::GCEPersistentDiskVolumeSource, path: &Path) -> Vec<FieldError> {
    let p = path.child("persistentDisk");
    let mut e = Vec::new();
    required_if_empty(&s.pd_name, &p.child("pdName"), &mut e);
    validate_partition(s.partition, &p.child("partition"), &mut e);
    e
}

/// An AWS EBS volume, for pods and PersistentVolumes alike; `path` is the volume source's.
fn validate_aws_ebs(s: &api::AWSElasticBlockStoreVolumeSource, path: &Path) -> Vec<FieldError> {
    let p = path.child("awsElasticBlockStore");
    let mut e = Vec::new();
    required_if_empty(&s.volume_id, &p.child("volumeID"), &mut e);
    validate_partition(s.partition, &p.child("partition"), &mut e);
    e
}

/// Counts the sources of one volume and validates each; returns the errors.
fn validate_volume_source(v: &api::Volume, path: &Path, ctx: VolumeContext<'_>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut count = 0usize;
    macro_rules! source {
        ($field:expr, $name:expr, $check:expr) => {
            one_source!(errs, count, path, $field, $name, $check)
        };
    }
    source!(v.empty_dir, "emptyDir", |s: &api::EmptyDirVolumeSource| {
        let mut e = Vec::new();
        if let Some(limit) = &s.size_limit {
            let negative = crate::quantity::Quantity::parse(&limit.0).map(|q| q.is_negative());
            match negative {
                Ok(true) => e.push(FieldError::forbidden(
                    &path.child("emptyDir").child("sizeLimit"),
                    "SizeLimit field must be a valid resource quantity",
                )),
                Ok(false) => {}
                Err(err) => e.push(FieldError::invalid(
                    &path.child("emptyDir").child("sizeLimit"),
                    limit.0.as_str(),
                    &err.to_string(),
                )),
            }
        }
        e
    });
    source!(v.host_path, "hostPath", |s| validate_host_path(
        s,
        &path.child("hostPath")
    ));
    source!(v.git_repo, "gitRepo", |s: &api::GitRepoVolumeSource| {
        let p = path.child("gitRepo");
        let mut e = Vec::new();
        required_if_empty(&s.repository, &p.child("repository"), &mut e);
        e.extend(validate_local_descending_path(
            s.directory.as_deref().unwrap_or(""),
            &p.child("directory"),
        ));
        e
    });
    source!(v.gce_persistent_disk, "gcePersistentDisk", |s| {
        validate_gce_pd(s, path)
    });
    source!(v.aws_elastic_block_store, "awsElasticBlockStore", |s| {
        validate_aws_ebs(s, path)
    });
    source!(v.secret, "secret", |s: &api::SecretVolumeSource| {
        let p = path.child("secret");
        let mut e = Vec::new();
        required_if_empty(
            s.secret_name.as_deref().unwrap_or(""),
            &p.child("secretName"),
            &mut e,
        );
        e.extend(mode_error(s.default_mode, &p.child("defaultMode")));
        for (i, kp) in s.items.iter().flatten().enumerate() {
            e.extend(validate_key_to_path(kp, &p.child("items").index(i)));
        }
        e
    });
    source!(v.nfs, "nfs", |s| validate_nfs(s, &path.child("nfs")));
    if let Some(iscsi) = &v.iscsi {
        if count > 0 {
            errs.push(FieldError::forbidden(&path.child("iscsi"), MORE_THAN_ONE));
        } else {
            count += 1;
            let p = path.child("iscsi");
            required_if_empty(&iscsi.target_portal, &p.child("targetPortal"), &mut errs);
            errs.extend(validate_iscsi_common(
                &iscsi.iqn,
                iscsi.lun,
                iscsi.chap_auth_discovery.unwrap_or(false)
                    || iscsi.chap_auth_session.unwrap_or(false),
                iscsi.secret_ref.is_some(),
                iscsi.initiator_name.as_deref(),
                "must be valid format starting with iqn, eui, or naa",
                &p,
            ));
        }
        if iscsi.initiator_name.is_some() && v.name.len() + 1 + iscsi.target_portal.len() > 64 {
            errs.push(FieldError::invalid(
                &path.child("name"),
                v.name.as_str(),
                "Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.",
            ));
        }
    }
    source!(
        v.glusterfs,
        "glusterfs",
        |s: &api::GlusterfsVolumeSource| {
            let p = path.child("glusterfs");
            let mut e = Vec::new();
            required_if_empty(&s.endpoints, &p.child("endpoints"), &mut e);
            required_if_empty(&s.path, &p.child("path"), &mut e);
            e
        }
    );
    source!(v.flocker, "flocker", |s| validate_flocker(
        s,
        &path.child("flocker")
    ));
    source!(
        v.persistent_volume_claim,
        "persistentVolumeClaim",
        |s: &api::PersistentVolumeClaimVolumeSource| required(
            &s.claim_name,
            &path.child("persistentVolumeClaim").child("claimName")
        )
    );
    source!(v.rbd, "rbd", |s: &api::RBDVolumeSource| {
        let p = path.child("rbd");
        let mut e = Vec::new();
        if s.monitors.is_empty() {
            e.push(FieldError::required(&p.child("monitors"), ""));
        }
        required_if_empty(&s.image, &p.child("image"), &mut e);
        e
    });
    source!(v.cinder, "cinder", |s: &api::CinderVolumeSource| {
        let p = path.child("cinder");
        let mut e = Vec::new();
        required_if_empty(&s.volume_id, &p.child("volumeID"), &mut e);
        if let Some(r) = &s.secret_ref
            && r.name.is_empty()
        {
            e.push(FieldError::required(
                &p.child("secretRef").child("name"),
                "",
            ));
        }
        e
    });
    source!(v.cephfs, "cephFS", |s: &api::CephFSVolumeSource| {
        if s.monitors.is_empty() {
            vec![FieldError::required(
                &path.child("cephfs").child("monitors"),
                "",
            )]
        } else {
            Vec::new()
        }
    });
    source!(v.quobyte, "quobyte", |s| validate_quobyte(
        s,
        &path.child("quobyte")
    ));
    // Upstream misspells this path when a second source follows downwardAPI.
    source!(
        v.downward_api,
        "downwarAPI",
        |s: &api::DownwardAPIVolumeSource| {
            let p = path.child("downwardAPI");
            let mut e = Vec::new();
            e.extend(mode_error(s.default_mode, &p.child("defaultMode")));
            for file in s.items.iter().flatten() {
                e.extend(validate_downward_api_file(file, &p));
            }
            e
        }
    );
    source!(v.fc, "fc", |s| validate_fc(s, &path.child("fc")));
    source!(v.flex_volume, "flexVolume", |s: &api::FlexVolumeSource| {
        let p = path.child("flexVolume");
        let mut e = Vec::new();
        required_if_empty(&s.driver, &p.child("driver"), &mut e);
        e.extend(validate_flex_options(s.options.as_ref(), &p));
        e
    });
    source!(
        v.config_map,
        "configMap",
        |s: &api::ConfigMapVolumeSource| {
            let p = path.child("configMap");
            let mut e = Vec::new();
            required_if_empty(&s.name, &p.child("name"), &mut e);
            e.extend(mode_error(s.default_mode, &p.child("defaultMode")));
            for (i, kp) in s.items.iter().flatten().enumerate() {
                e.extend(validate_key_to_path(kp, &p.child("items").index(i)));
            }
            e
        }
    );
    source!(
        v.azure_file,
        "azureFile",
        |s: &api::AzureFileVolumeSource| {
            let p = path.child("azureFile");
            let mut e = Vec::new();
            required_if_empty(&s.secret_name, &p.child("secretName"), &mut e);
            required_if_empty(&s.share_name, &p.child("shareName"), &mut e);
            e
        }
    );
    source!(
        v.vsphere_volume,
        "vsphereVolume",
        |s: &api::VsphereVirtualDiskVolumeSource| required(
            &s.volume_path,
            &path.child("vsphereVolume").child("volumePath")
        )
    );
    source!(
        v.photon_persistent_disk,
        "photonPersistentDisk",
        |s: &api::PhotonPersistentDiskVolumeSource| required(
            &s.pd_id,
            &path.child("photonPersistentDisk").child("pdID")
        )
    );
    source!(
        v.portworx_volume,
        "portworxVolume",
        |s: &api::PortworxVolumeSource| required(
            &s.volume_id,
            &path.child("portworxVolume").child("volumeID")
        )
    );
    source!(v.azure_disk, "azureDisk", |s| validate_azure_disk(
        s,
        &path.child("azureDisk")
    ));
    source!(
        v.storageos,
        "storageos",
        |s: &api::StorageOSVolumeSource| {
            let p = path.child("storageos");
            let mut e = validate_storageos_names(
                s.volume_name.as_deref(),
                s.volume_namespace.as_deref(),
                &p,
            );
            if let Some(r) = &s.secret_ref
                && r.name.is_empty()
            {
                e.push(FieldError::required(
                    &p.child("secretRef").child("name"),
                    "",
                ));
            }
            e
        }
    );
    source!(v.projected, "projected", |s| validate_projected(
        s,
        &path.child("projected")
    ));
    source!(v.scale_io, "scaleIO", |s: &api::ScaleIOVolumeSource| {
        let p = path.child("scaleIO");
        let mut e = Vec::new();
        required_if_empty(&s.gateway, &p.child("gateway"), &mut e);
        required_if_empty(&s.system, &p.child("system"), &mut e);
        required_if_empty(
            s.volume_name.as_deref().unwrap_or(""),
            &p.child("volumeName"),
            &mut e,
        );
        e
    });
    source!(v.csi, "csi", |s: &api::CSIVolumeSource| {
        let p = path.child("csi");
        let mut e = validate_csi_driver_name(&s.driver, &p.child("driver"));
        if let Some(r) = &s.node_publish_secret_ref {
            if r.name.is_empty() {
                e.push(FieldError::required(
                    &p.child("nodePublishSecretRef").child("name"),
                    "",
                ));
            } else {
                for msg in NameValidator::DnsSubdomain.validate(&r.name, false) {
                    e.push(FieldError::invalid(&p.child("name"), r.name.as_str(), &msg));
                }
            }
        }
        e
    });
    source!(
        v.ephemeral,
        "ephemeral",
        |s: &api::EphemeralVolumeSource| {
            let p = path.child("ephemeral");
            let mut e = Vec::new();
            match &s.volume_claim_template {
                None => e.push(FieldError::required(&p.child("volumeClaimTemplate"), "")),
                Some(template) => {
                    let tp = p.child("volumeClaimTemplate");
                    if let Some(meta) = &template.metadata {
                        e.extend(crate::validation::meta::validate_template_object_meta(
                            meta,
                            &tp.child("metadata"),
                        ));
                    }
                    e.extend(
                        crate::validation::storage::validate_persistent_volume_claim_spec(
                            &template.spec,
                            &tp.child("spec"),
                        ),
                    );
                }
            }
            let pod_name = ctx.pod_meta.and_then(|m| m.name.as_deref()).unwrap_or("");
            if !pod_name.is_empty() && !v.name.is_empty() {
                let pvc = format!("{pod_name}-{}", v.name);
                for msg in NameValidator::DnsSubdomain.validate(&pvc, false) {
                    e.push(FieldError::invalid(
                        &p.child("name"),
                        v.name.as_str(),
                        &format!("PVC name {}: {msg}", crate::field::go_quote(&pvc)),
                    ));
                }
            }
            e
        }
    );
    source!(v.image, "image", |s: &api::ImageVolumeSource| {
        let p = path.child("image");
        let mut e = Vec::new();
        if ctx.resource_is_pod && s.reference.as_deref().unwrap_or("").is_empty() {
            e.push(FieldError::required(&p.child("reference"), ""));
        }
        e.extend(super::pod::validate_pull_policy(
            s.pull_policy.as_deref().unwrap_or(""),
            &p.child("pullPolicy"),
        ));
        e
    });
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    errs
}

/// A pod's volumes: each has one valid source and a unique DNS-label name. Returns the index of
/// valid volumes for the container checks, and the errors.
pub fn validate_volumes(
    volumes: &[api::Volume],
    path: &Path,
    ctx: VolumeContext<'_>,
) -> (VolumeIndex, Vec<FieldError>) {
    let mut errs = Vec::new();
    let mut index = VolumeIndex::default();
    let pod_name = ctx.pod_meta.and_then(|m| m.name.as_deref()).unwrap_or("");
    let created_pvcs: BTreeSet<String> = if pod_name.is_empty() {
        BTreeSet::new()
    } else {
        volumes
            .iter()
            .filter(|v| v.ephemeral.is_some())
            .map(|v| format!("{pod_name}-{}", v.name))
            .collect()
    };
    for (i, v) in volumes.iter().enumerate() {
        let vpath = path.index(i);
        let name_path = vpath.child("name");
        let mut el = validate_volume_source(v, &vpath, ctx);
        if v.name.is_empty() {
            el.push(FieldError::required(&name_path, ""));
        } else {
            el.extend(validate_dns1123_label(&v.name, &name_path));
        }
        if index.has(&v.name) {
            el.push(FieldError::duplicate(&name_path, v.name.as_str()));
        }
        if el.is_empty() {
            let claim = v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
            index
                .volumes
                .insert(v.name.clone(), (claim, v.image.is_some()));
        } else {
            errs.extend(el);
        }
        if let Some(pvc) = &v.persistent_volume_claim
            && created_pvcs.contains(&pvc.claim_name)
        {
            errs.push(FieldError::invalid(
                &vpath.child("persistentVolumeClaim").child("claimName"),
                pvc.claim_name.as_str(),
                "must not reference a PVC that gets created for an ephemeral volume",
            ));
        }
    }
    (index, errs)
}

/// The volume source of a PersistentVolume: exactly one, each with its own rules.
pub fn validate_persistent_volume_source(
    spec: &api::PersistentVolumeSpec,
    pv_name: &str,
    node_affinity_specified: bool,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut count = 0usize;
    macro_rules! source {
        ($field:expr, $name:expr, $check:expr) => {
            one_source!(errs, count, path, $field, $name, $check)
        };
    }
    source!(spec.host_path, "hostPath", |s| validate_host_path(
        s,
        &path.child("hostPath")
    ));
    source!(spec.gce_persistent_disk, "gcePersistentDisk", |s| {
        validate_gce_pd(s, path)
    });
    source!(spec.aws_elastic_block_store, "awsElasticBlockStore", |s| {
        validate_aws_ebs(s, path)
    });
    source!(
        spec.glusterfs,
        "glusterfs",
        |s: &api::GlusterfsPersistentVolumeSource| {
            let p = path.child("glusterfs");
            let mut e = Vec::new();
            required_if_empty(&s.endpoints, &p.child("endpoints"), &mut e);
            required_if_empty(&s.path, &p.child("path"), &mut e);
            if let Some(ns) = &s.endpoints_namespace {
                if ns.is_empty() {
                    e.push(FieldError::invalid(
                        &p.child("endpointsNamespace"),
                        ns.as_str(),
                        "if the endpointnamespace is set, it must be a valid namespace name",
                    ));
                } else {
                    for msg in NameValidator::DnsLabel.validate(ns, false) {
                        e.push(FieldError::invalid(
                            &p.child("endpointsNamespace"),
                            ns.as_str(),
                            &msg,
                        ));
                    }
                }
            }
            e
        }
    );
    source!(spec.flocker, "flocker", |s| validate_flocker(
        s,
        &path.child("flocker")
    ));
    source!(spec.nfs, "nfs", |s| validate_nfs(s, &path.child("nfs")));
    source!(spec.rbd, "rbd", |s: &api::RBDPersistentVolumeSource| {
        let p = path.child("rbd");
        let mut e = Vec::new();
        if s.monitors.is_empty() {
            e.push(FieldError::required(&p.child("monitors"), ""));
        }
        required_if_empty(&s.image, &p.child("image"), &mut e);
        e
    });
    source!(spec.quobyte, "quobyte", |s| validate_quobyte(
        s,
        &path.child("quobyte")
    ));
    source!(
        spec.cephfs,
        "cephFS",
        |s: &api::CephFSPersistentVolumeSource| {
            if s.monitors.is_empty() {
                vec![FieldError::required(
                    &path.child("cephfs").child("monitors"),
                    "",
                )]
            } else {
                Vec::new()
            }
        }
    );
    source!(
        spec.iscsi,
        "iscsi",
        |s: &api::ISCSIPersistentVolumeSource| {
            let p = path.child("iscsi");
            let mut e = Vec::new();
            required_if_empty(&s.target_portal, &p.child("targetPortal"), &mut e);
            if s.initiator_name.is_some() && pv_name.len() + 1 + s.target_portal.len() > 64 {
                e.push(FieldError::invalid(
                &p.child("targetportal"),
                s.target_portal.as_str(),
                "Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.",
            ));
            }
            e.extend(validate_iscsi_common(
                &s.iqn,
                s.lun,
                s.chap_auth_discovery.unwrap_or(false) || s.chap_auth_session.unwrap_or(false),
                s.secret_ref.is_some(),
                s.initiator_name.as_deref(),
                "must be valid format",
                &p,
            ));
            if let Some(r) = &s.secret_ref
                && r.name.as_deref().unwrap_or("").is_empty()
            {
                e.push(FieldError::required(
                    &p.child("secretRef").child("name"),
                    "",
                ));
            }
            e
        }
    );
    source!(
        spec.cinder,
        "cinder",
        |s: &api::CinderPersistentVolumeSource| {
            let p = path.child("cinder");
            let mut e = Vec::new();
            required_if_empty(&s.volume_id, &p.child("volumeID"), &mut e);
            if let Some(r) = &s.secret_ref {
                required_if_empty(
                    r.name.as_deref().unwrap_or(""),
                    &p.child("secretRef").child("name"),
                    &mut e,
                );
                required_if_empty(
                    r.namespace.as_deref().unwrap_or(""),
                    &p.child("secretRef").child("namespace"),
                    &mut e,
                );
            }
            e
        }
    );
    source!(spec.fc, "fc", |s| validate_fc(s, &path.child("fc")));
    if let Some(flex) = &spec.flex_volume {
        // Upstream counts flexVolume without the one-source check.
        count += 1;
        let p = path.child("flexVolume");
        required_if_empty(&flex.driver, &p.child("driver"), &mut errs);
        errs.extend(validate_flex_options(flex.options.as_ref(), &p));
    }
    source!(
        spec.azure_file,
        "azureFile",
        |s: &api::AzureFilePersistentVolumeSource| {
            let p = path.child("azureFile");
            let mut e = Vec::new();
            required_if_empty(&s.secret_name, &p.child("secretName"), &mut e);
            required_if_empty(&s.share_name, &p.child("shareName"), &mut e);
            if s.secret_namespace.as_ref().is_some_and(String::is_empty) {
                e.push(FieldError::required(&p.child("secretNamespace"), ""));
            }
            e
        }
    );
    source!(
        spec.vsphere_volume,
        "vsphereVolume",
        |s: &api::VsphereVirtualDiskVolumeSource| required(
            &s.volume_path,
            &path.child("vsphereVolume").child("volumePath")
        )
    );
    source!(
        spec.photon_persistent_disk,
        "photonPersistentDisk",
        |s: &api::PhotonPersistentDiskVolumeSource| required(
            &s.pd_id,
            &path.child("photonPersistentDisk").child("pdID")
        )
    );
    source!(
        spec.portworx_volume,
        "portworxVolume",
        |s: &api::PortworxVolumeSource| required(
            &s.volume_id,
            &path.child("portworxVolume").child("volumeID")
        )
    );
    source!(spec.azure_disk, "azureDisk", |s| validate_azure_disk(
        s,
        &path.child("azureDisk")
    ));
    source!(
        spec.scale_io,
        "scaleIO",
        |s: &api::ScaleIOPersistentVolumeSource| {
            let p = path.child("scaleIO");
            let mut e = Vec::new();
            required_if_empty(&s.gateway, &p.child("gateway"), &mut e);
            required_if_empty(&s.system, &p.child("system"), &mut e);
            required_if_empty(
                s.volume_name.as_deref().unwrap_or(""),
                &p.child("volumeName"),
                &mut e,
            );
            e
        }
    );
    source!(spec.local, "local", |s: &api::LocalVolumeSource| {
        let p = path.child("local");
        let mut e = Vec::new();
        if s.path.is_empty() {
            e.push(FieldError::required(&p.child("path"), ""));
        } else {
            e.extend(validate_path_no_backsteps(&s.path, &p.child("path")));
        }
        if !node_affinity_specified {
            e.push(FieldError::required(
                &path.child("nodeAffinity"),
                "Local volume requires node affinity",
            ));
        }
        e
    });
    source!(
        spec.storageos,
        "storageos",
        |s: &api::StorageOSPersistentVolumeSource| {
            let p = path.child("storageos");
            let mut e = validate_storageos_names(
                s.volume_name.as_deref(),
                s.volume_namespace.as_deref(),
                &p,
            );
            if let Some(r) = &s.secret_ref {
                required_if_empty(
                    r.name.as_deref().unwrap_or(""),
                    &p.child("secretRef").child("name"),
                    &mut e,
                );
                required_if_empty(
                    r.namespace.as_deref().unwrap_or(""),
                    &p.child("secretRef").child("namespace"),
                    &mut e,
                );
            }
            e
        }
    );
    source!(spec.csi, "csi", |s: &api::CSIPersistentVolumeSource| {
        let p = path.child("csi");
        let mut e = validate_csi_driver_name(&s.driver, &p.child("driver"));
        required_if_empty(&s.volume_handle, &p.child("volumeHandle"), &mut e);
        for (r, name) in [
            (
                &s.controller_publish_secret_ref,
                "controllerPublishSecretRef",
            ),
            (&s.controller_expand_secret_ref, "controllerExpandSecretRef"),
            (&s.node_publish_secret_ref, "nodePublishSecretRef"),
            (&s.node_expand_secret_ref, "nodeExpandSecretRef"),
        ] {
            if let Some(r) = r {
                e.extend(validate_pv_secret_reference(r, &p.child(name)));
            }
        }
        e
    });
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(volumes: Vec<api::Volume>, expected: &[&str]) {
        let (_, errs) = validate_volumes(
            &volumes,
            &Path::new("spec").child("volumes"),
            VolumeContext::default(),
        );
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(got, expected);
    }

    fn empty_dir(name: &str) -> api::Volume {
        api::Volume {
            name: name.into(),
            empty_dir: Some(api::EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    }

    #[test]
    fn names_sources_and_duplicates() {
        check(vec![empty_dir("a"), empty_dir("b")], &[]);
        check(
            vec![
                empty_dir("a"),
                empty_dir("a"),
                api::Volume {
                    name: "c".into(),
                    ..Default::default()
                },
            ],
            &[
                "spec.volumes[1].name: Duplicate value: \"a\"",
                "spec.volumes[2]: Required value: must specify a volume type",
            ],
        );
        check(
            vec![api::Volume {
                name: "Bad".into(),
                empty_dir: Some(Default::default()),
                host_path: Some(api::HostPathVolumeSource {
                    path: "/x/../y".into(),
                    type_: Some("Dir".into()),
                }),
                ..Default::default()
            }],
            &[
                "spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type",
                "spec.volumes[0].name: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            ],
        );
        check(
            vec![api::Volume {
                name: "h".into(),
                host_path: Some(api::HostPathVolumeSource {
                    path: "/x/../y".into(),
                    type_: Some("Dir".into()),
                }),
                ..Default::default()
            }],
            &[
                "spec.volumes[0].hostPath.path: Invalid value: \"/x/../y\": must not contain '..'",
                "spec.volumes[0].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"",
            ],
        );
    }

    #[test]
    fn secrets_config_maps_and_downward_api() {
        check(
            vec![
                api::Volume {
                    name: "s".into(),
                    secret: Some(api::SecretVolumeSource {
                        default_mode: Some(0o1000),
                        items: Some(vec![api::KeyToPath {
                            key: "".into(),
                            path: "/abs".into(),
                            mode: None,
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                api::Volume {
                    name: "d".into(),
                    downward_api: Some(api::DownwardAPIVolumeSource {
                        items: Some(vec![api::DownwardAPIVolumeFile {
                            path: "labels".into(),
                            field_ref: Some(api::ObjectFieldSelector {
                                api_version: Some("v1".into()),
                                field_path: "spec.nodeName".into(),
                            }),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ],
            &[
                "spec.volumes[0].secret.secretName: Required value",
                "spec.volumes[0].secret.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].secret.items[0].key: Required value",
                "spec.volumes[0].secret.items[0].path: Invalid value: \"/abs\": must be a relative path",
                "spec.volumes[1].downwardAPI.fieldRef.fieldPath: Unsupported value: \"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\"",
            ],
        );
    }

    #[test]
    fn iscsi_names() {
        assert!(iscsi_name_valid("iqn.2015-02.example.com:test"));
        assert!(!iscsi_name_valid("iqn.2015-02.example.com"));
        assert!(iscsi_name_valid("eui.02004567A425678D"));
        assert!(!iscsi_name_valid("eui.02004567A425678"));
        assert!(iscsi_name_valid(&format!("naa.{}", "a".repeat(32))));
    }
}
