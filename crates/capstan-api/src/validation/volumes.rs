//! Volumes: a pod's volumes (unique DNS-label names, exactly one source, each source's own
//! rules) and the sources of a PersistentVolume, as upstream validates them. Each source type
//! has one validator that pod volumes and PersistentVolumes both call; where upstream's rules
//! for the two differ (the pod and PV variants of a source type, iSCSI's messages, inline versus
//! persistent CSI, PV-only local volumes) the difference is a parameter or a separate function.

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

/// The default mode and the items of a secret or config map volume.
fn validate_mode_and_items(
    default_mode: Option<i32>,
    items: Option<&[api::KeyToPath]>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> = mode_error(default_mode, &path.child("defaultMode"))
        .into_iter()
        .collect();
    for (i, kp) in items.unwrap_or_default().iter().enumerate() {
        errs.extend(validate_key_to_path(kp, &path.child("items").index(i)));
    }
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
        // Secrets and config maps project their keys alike: a name, and items at paths.
        let key_projections = [
            source
                .secret
                .as_ref()
                .map(|s| ("secret", s.name.as_str(), s.items.as_deref())),
            source
                .config_map
                .as_ref()
                .map(|c| ("configMap", c.name.as_str(), c.items.as_deref())),
        ];
        for (field, name, items) in key_projections.into_iter().flatten() {
            count += 1;
            let p = src_path.child(field);
            required_if_empty(name, &p.child("name"), &mut errs);
            for (j, kp) in items.unwrap_or_default().iter().enumerate() {
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

/// Upstream's message when `<name>:<targetPortal>` of an iSCSI source with an initiator name
/// is too long.
const ISCSI_TOO_LONG: &str = "Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.";

/// What the iSCSI sources of pods and PersistentVolumes share (their secret references differ).
struct IscsiFields<'a> {
    target_portal: &'a str,
    iqn: &'a str,
    lun: i32,
    chap: bool,
    initiator: Option<&'a str>,
    /// The secret reference's name, where one is set.
    secret_name: Option<&'a str>,
}

impl<'a> From<&'a api::ISCSIVolumeSource> for IscsiFields<'a> {
    fn from(s: &'a api::ISCSIVolumeSource) -> Self {
        Self {
            target_portal: &s.target_portal,
            iqn: &s.iqn,
            lun: s.lun,
            chap: s.chap_auth_discovery.unwrap_or(false) || s.chap_auth_session.unwrap_or(false),
            initiator: s.initiator_name.as_deref(),
            secret_name: s.secret_ref.as_ref().map(|r| r.name.as_str()),
        }
    }
}

impl<'a> From<&'a api::ISCSIPersistentVolumeSource> for IscsiFields<'a> {
    fn from(s: &'a api::ISCSIPersistentVolumeSource) -> Self {
        Self {
            target_portal: &s.target_portal,
            iqn: &s.iqn,
            lun: s.lun,
            chap: s.chap_auth_discovery.unwrap_or(false) || s.chap_auth_session.unwrap_or(false),
            initiator: s.initiator_name.as_deref(),
            secret_name: s
                .secret_ref
                .as_ref()
                .map(|r| r.name.as_deref().unwrap_or("")),
        }
    }
}

/// An iSCSI source of a pod volume (`pv_name` is `None`) or of the named PersistentVolume.
/// Upstream words a bad name prefix differently for the two; a PersistentVolume's source also
/// limits `<pv name>:<targetPortal>` and requires its secret's name, while a pod limits
/// `<volume name>:<targetPortal>` outside the source (see `validate_volume_source`).
fn validate_iscsi(s: &IscsiFields<'_>, pv_name: Option<&str>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(s.target_portal, &path.child("targetPortal"), &mut errs);
    if let Some(pv_name) = pv_name
        && s.initiator.is_some()
        && pv_name.len() + 1 + s.target_portal.len() > 64
    {
        errs.push(FieldError::invalid(
            &path.child("targetportal"),
            s.target_portal,
            ISCSI_TOO_LONG,
        ));
    }
    let prefix_detail = if pv_name.is_some() {
        "must be valid format"
    } else {
        "must be valid format starting with iqn, eui, or naa"
    };
    if s.iqn.is_empty() {
        errs.push(FieldError::required(&path.child("iqn"), ""));
    } else if !has_iscsi_prefix(s.iqn) {
        errs.push(FieldError::invalid(
            &path.child("iqn"),
            s.iqn,
            prefix_detail,
        ));
    } else if !iscsi_name_valid(s.iqn) {
        errs.push(FieldError::invalid(
            &path.child("iqn"),
            s.iqn,
            "must be valid format",
        ));
    }
    if !(0..=255).contains(&s.lun) {
        errs.push(FieldError::invalid(
            &path.child("lun"),
            s.lun,
            &inclusive_range_error(0, 255),
        ));
    }
    if s.chap && s.secret_name.is_none() {
        errs.push(FieldError::required(&path.child("secretRef"), ""));
    }
    if let Some(initiator) = s.initiator {
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
    if pv_name.is_some() && s.secret_name == Some("") {
        errs.push(FieldError::required(
            &path.child("secretRef").child("name"),
            "",
        ));
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

/// A FlexVolume: a driver, and options outside the Kubernetes namespaces.
fn validate_flex(
    driver: &str,
    options: Option<&BTreeMap<String, String>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = required(driver, &path.child("driver"));
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

/// A StorageOS volume; the secret a PersistentVolume references names its namespace too.
fn validate_storageos(
    volume_name: Option<&str>,
    volume_namespace: Option<&str>,
    secret_ref: Option<SecretRefNames<'_>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match volume_name.unwrap_or("") {
        "" => errs.push(FieldError::required(&path.child("volumeName"), "")),
        n => errs.extend(validate_dns1123_label(n, &path.child("volumeName"))),
    }
    if let Some(ns) = volume_namespace.filter(|ns| !ns.is_empty()) {
        errs.extend(validate_dns1123_label(ns, &path.child("volumeNamespace")));
    }
    if let Some(r) = secret_ref {
        r.require(&path.child("secretRef"), &mut errs);
    }
    errs
}

/// The secret a volume source references, as its checks see it: a pod volume's names only the
/// secret (`namespace` is `None`), a PersistentVolume's also the secret's namespace.
#[derive(Clone, Copy, Debug)]
struct SecretRefNames<'a> {
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> SecretRefNames<'a> {
    /// A pod volume's reference to a secret in the pod's namespace.
    fn local(r: &'a api::LocalObjectReference) -> Self {
        Self {
            name: &r.name,
            namespace: None,
        }
    }

    /// A PersistentVolume's reference to a secret in a namespace it names.
    fn namespaced(name: Option<&'a str>, namespace: Option<&'a str>) -> Self {
        Self {
            name: name.unwrap_or(""),
            namespace: Some(namespace.unwrap_or("")),
        }
    }

    /// The name is required, and so is the namespace where the reference has one.
    fn require(self, path: &Path, errs: &mut Vec<FieldError>) {
        required_if_empty(self.name, &path.child("name"), errs);
        if let Some(namespace) = self.namespace {
            required_if_empty(namespace, &path.child("namespace"), errs);
        }
    }
}

/// A GlusterFS volume; only a PersistentVolume may name the endpoints' namespace.
fn validate_glusterfs(
    endpoints: &str,
    volume_path: &str,
    endpoints_namespace: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(endpoints, &path.child("endpoints"), &mut errs);
    required_if_empty(volume_path, &path.child("path"), &mut errs);
    let ns_path = path.child("endpointsNamespace");
    match endpoints_namespace {
        None => {}
        Some("") => errs.push(FieldError::invalid(
            &ns_path,
            "",
            "if the endpointnamespace is set, it must be a valid namespace name",
        )),
        Some(ns) => {
            for msg in NameValidator::DnsLabel.validate(ns, false) {
                errs.push(FieldError::invalid(&ns_path, ns, &msg));
            }
        }
    }
    errs
}

/// A Ceph RBD volume.
fn validate_rbd(monitors: &[String], image: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if monitors.is_empty() {
        errs.push(FieldError::required(&path.child("monitors"), ""));
    }
    required_if_empty(image, &path.child("image"), &mut errs);
    errs
}

/// A CephFS volume (upstream reports under `cephfs`, though it forbids a second source under
/// `cephFS`).
fn validate_cephfs(monitors: &[String], path: &Path) -> Vec<FieldError> {
    if monitors.is_empty() {
        vec![FieldError::required(&path.child("monitors"), "")]
    } else {
        Vec::new()
    }
}

/// A Cinder volume; the secret a PersistentVolume references names its namespace too.
fn validate_cinder(
    volume_id: &str,
    secret_ref: Option<SecretRefNames<'_>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = required(volume_id, &path.child("volumeID"));
    if let Some(r) = secret_ref {
        r.require(&path.child("secretRef"), &mut errs);
    }
    errs
}

/// An Azure file share; a PersistentVolume may name the secret's namespace, and then not as "".
fn validate_azure_file(
    secret_name: &str,
    share_name: &str,
    secret_namespace: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(secret_name, &path.child("secretName"), &mut errs);
    required_if_empty(share_name, &path.child("shareName"), &mut errs);
    if secret_namespace == Some("") {
        errs.push(FieldError::required(&path.child("secretNamespace"), ""));
    }
    errs
}

/// A ScaleIO volume.
fn validate_scale_io(
    gateway: &str,
    system: &str,
    volume_name: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    required_if_empty(gateway, &path.child("gateway"), &mut errs);
    required_if_empty(system, &path.child("system"), &mut errs);
    required_if_empty(
        volume_name.unwrap_or(""),
        &path.child("volumeName"),
        &mut errs,
    );
    errs
}

/// A vSphere virtual disk.
fn validate_vsphere_volume(
    s: &api::VsphereVirtualDiskVolumeSource,
    path: &Path,
) -> Vec<FieldError> {
    required(&s.volume_path, &path.child("volumePath"))
}

/// A Photon persistent disk.
fn validate_photon_disk(s: &api::PhotonPersistentDiskVolumeSource, path: &Path) -> Vec<FieldError> {
    required(&s.pd_id, &path.child("pdID"))
}

/// A Portworx volume.
fn validate_portworx(s: &api::PortworxVolumeSource, path: &Path) -> Vec<FieldError> {
    required(&s.volume_id, &path.child("volumeID"))
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

/// An inline CSI volume of a pod: a driver and, if set, the name of its node-publish secret (in
/// the pod's namespace). Unlike a PersistentVolume's it has no volume handle.
fn validate_inline_csi(s: &api::CSIVolumeSource, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_csi_driver_name(&s.driver, &path.child("driver"));
    if let Some(r) = &s.node_publish_secret_ref {
        if r.name.is_empty() {
            errs.push(FieldError::required(
                &path.child("nodePublishSecretRef").child("name"),
                "",
            ));
        } else {
            for msg in NameValidator::DnsSubdomain.validate(&r.name, false) {
                errs.push(FieldError::invalid(
                    &path.child("name"),
                    r.name.as_str(),
                    &msg,
                ));
            }
        }
    }
    errs
}

/// A PersistentVolume's CSI source: a driver, a volume handle, and secrets each named with
/// their namespace.
fn validate_csi_persistent_volume(
    s: &api::CSIPersistentVolumeSource,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = validate_csi_driver_name(&s.driver, &path.child("driver"));
    required_if_empty(&s.volume_handle, &path.child("volumeHandle"), &mut errs);
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
            errs.extend(validate_pv_secret_reference(r, &path.child(name)));
        }
    }
    errs
}

/// A PersistentVolume's local volume (pods have none): a path without `..`, and the volume must
/// name its node affinity; `path` is the volume source's.
fn validate_local(
    s: &api::LocalVolumeSource,
    node_affinity_specified: bool,
    path: &Path,
) -> Vec<FieldError> {
    let p = path.child("local").child("path");
    let mut errs = if s.path.is_empty() {
        vec![FieldError::required(&p, "")]
    } else {
        validate_path_no_backsteps(&s.path, &p)
    };
    if !node_affinity_specified {
        errs.push(FieldError::required(
            &path.child("nodeAffinity"),
            "Local volume requires node affinity",
        ));
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
/// only the first one set is validated, each further one is forbidden. The check is a closure
/// of the source, or (after `=>`) a validator of the source and its path under `$name`.
macro_rules! one_source {
    ($errs:ident, $count:ident, $path:expr, $field:expr, $name:literal => $check:path) => {
        one_source!($errs, $count, $path, $field, $name, |s| $check(
            s,
            &$path.child($name)
        ))
    };
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
        ($($args:tt)*) => {
            one_source!(errs, count, path, $($args)*)
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
    source!(v.host_path, "hostPath" => validate_host_path);
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
        let mut e = required(
            s.secret_name.as_deref().unwrap_or(""),
            &p.child("secretName"),
        );
        e.extend(validate_mode_and_items(
            s.default_mode,
            s.items.as_deref(),
            &p,
        ));
        e
    });
    source!(v.nfs, "nfs" => validate_nfs);
    if let Some(iscsi) = &v.iscsi {
        if count > 0 {
            errs.push(FieldError::forbidden(&path.child("iscsi"), MORE_THAN_ONE));
        } else {
            count += 1;
            errs.extend(validate_iscsi(&iscsi.into(), None, &path.child("iscsi")));
        }
        if iscsi.initiator_name.is_some() && v.name.len() + 1 + iscsi.target_portal.len() > 64 {
            errs.push(FieldError::invalid(
                &path.child("name"),
                v.name.as_str(),
                ISCSI_TOO_LONG,
            ));
        }
    }
    source!(
        v.glusterfs,
        "glusterfs",
        |s: &api::GlusterfsVolumeSource| validate_glusterfs(
            &s.endpoints,
            &s.path,
            None,
            &path.child("glusterfs")
        )
    );
    source!(v.flocker, "flocker" => validate_flocker);
    source!(
        v.persistent_volume_claim,
        "persistentVolumeClaim",
        |s: &api::PersistentVolumeClaimVolumeSource| required(
            &s.claim_name,
            &path.child("persistentVolumeClaim").child("claimName")
        )
    );
    source!(v.rbd, "rbd", |s: &api::RBDVolumeSource| validate_rbd(
        &s.monitors,
        &s.image,
        &path.child("rbd")
    ));
    source!(v.cinder, "cinder", |s: &api::CinderVolumeSource| {
        validate_cinder(
            &s.volume_id,
            s.secret_ref.as_ref().map(SecretRefNames::local),
            &path.child("cinder"),
        )
    });
    source!(v.cephfs, "cephFS", |s: &api::CephFSVolumeSource| {
        validate_cephfs(&s.monitors, &path.child("cephfs"))
    });
    source!(v.quobyte, "quobyte" => validate_quobyte);
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
    source!(v.fc, "fc" => validate_fc);
    source!(v.flex_volume, "flexVolume", |s: &api::FlexVolumeSource| {
        validate_flex(&s.driver, s.options.as_ref(), &path.child("flexVolume"))
    });
    source!(
        v.config_map,
        "configMap",
        |s: &api::ConfigMapVolumeSource| {
            let p = path.child("configMap");
            let mut e = required(&s.name, &p.child("name"));
            e.extend(validate_mode_and_items(
                s.default_mode,
                s.items.as_deref(),
                &p,
            ));
            e
        }
    );
    source!(
        v.azure_file,
        "azureFile",
        |s: &api::AzureFileVolumeSource| validate_azure_file(
            &s.secret_name,
            &s.share_name,
            None,
            &path.child("azureFile")
        )
    );
    source!(v.vsphere_volume, "vsphereVolume" => validate_vsphere_volume);
    source!(v.photon_persistent_disk, "photonPersistentDisk" => validate_photon_disk);
    source!(v.portworx_volume, "portworxVolume" => validate_portworx);
    source!(v.azure_disk, "azureDisk" => validate_azure_disk);
    source!(
        v.storageos,
        "storageos",
        |s: &api::StorageOSVolumeSource| validate_storageos(
            s.volume_name.as_deref(),
            s.volume_namespace.as_deref(),
            s.secret_ref.as_ref().map(SecretRefNames::local),
            &path.child("storageos")
        )
    );
    source!(v.projected, "projected" => validate_projected);
    source!(v.scale_io, "scaleIO", |s: &api::ScaleIOVolumeSource| {
        validate_scale_io(
            &s.gateway,
            &s.system,
            s.volume_name.as_deref(),
            &path.child("scaleIO"),
        )
    });
    source!(v.csi, "csi" => validate_inline_csi);
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
        ($($args:tt)*) => {
            one_source!(errs, count, path, $($args)*)
        };
    }
    source!(spec.host_path, "hostPath" => validate_host_path);
    source!(spec.gce_persistent_disk, "gcePersistentDisk", |s| {
        validate_gce_pd(s, path)
    });
    source!(spec.aws_elastic_block_store, "awsElasticBlockStore", |s| {
        validate_aws_ebs(s, path)
    });
    source!(
        spec.glusterfs,
        "glusterfs",
        |s: &api::GlusterfsPersistentVolumeSource| validate_glusterfs(
            &s.endpoints,
            &s.path,
            s.endpoints_namespace.as_deref(),
            &path.child("glusterfs")
        )
    );
    source!(spec.flocker, "flocker" => validate_flocker);
    source!(spec.nfs, "nfs" => validate_nfs);
    source!(spec.rbd, "rbd", |s: &api::RBDPersistentVolumeSource| {
        validate_rbd(&s.monitors, &s.image, &path.child("rbd"))
    });
    source!(spec.quobyte, "quobyte" => validate_quobyte);
    source!(
        spec.cephfs,
        "cephFS",
        |s: &api::CephFSPersistentVolumeSource| validate_cephfs(&s.monitors, &path.child("cephfs"))
    );
    source!(
        spec.iscsi,
        "iscsi",
        |s: &api::ISCSIPersistentVolumeSource| validate_iscsi(
            &s.into(),
            Some(pv_name),
            &path.child("iscsi")
        )
    );
    source!(
        spec.cinder,
        "cinder",
        |s: &api::CinderPersistentVolumeSource| validate_cinder(
            &s.volume_id,
            s.secret_ref
                .as_ref()
                .map(|r| SecretRefNames::namespaced(r.name.as_deref(), r.namespace.as_deref())),
            &path.child("cinder")
        )
    );
    source!(spec.fc, "fc" => validate_fc);
    if let Some(flex) = &spec.flex_volume {
        // Upstream counts flexVolume without the one-source check.
        count += 1;
        errs.extend(validate_flex(
            &flex.driver,
            flex.options.as_ref(),
            &path.child("flexVolume"),
        ));
    }
    source!(
        spec.azure_file,
        "azureFile",
        |s: &api::AzureFilePersistentVolumeSource| validate_azure_file(
            &s.secret_name,
            &s.share_name,
            s.secret_namespace.as_deref(),
            &path.child("azureFile")
        )
    );
    source!(spec.vsphere_volume, "vsphereVolume" => validate_vsphere_volume);
    source!(spec.photon_persistent_disk, "photonPersistentDisk" => validate_photon_disk);
    source!(spec.portworx_volume, "portworxVolume" => validate_portworx);
    source!(spec.azure_disk, "azureDisk" => validate_azure_disk);
    source!(
        spec.scale_io,
        "scaleIO",
        |s: &api::ScaleIOPersistentVolumeSource| validate_scale_io(
            &s.gateway,
            &s.system,
            s.volume_name.as_deref(),
            &path.child("scaleIO")
        )
    );
    source!(spec.local, "local", |s| validate_local(
        s,
        node_affinity_specified,
        path
    ));
    source!(
        spec.storageos,
        "storageos",
        |s: &api::StorageOSPersistentVolumeSource| validate_storageos(
            s.volume_name.as_deref(),
            s.volume_namespace.as_deref(),
            s.secret_ref
                .as_ref()
                .map(|r| SecretRefNames::namespaced(r.name.as_deref(), r.namespace.as_deref())),
            &path.child("storageos")
        )
    );
    source!(spec.csi, "csi" => validate_csi_persistent_volume);
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

    /// The errors of a PersistentVolume spec's source, as messages.
    fn pv_source_errors(spec: &api::PersistentVolumeSpec, node_affinity: bool) -> Vec<String> {
        validate_persistent_volume_source(spec, "pv", node_affinity, &Path::new("spec"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn iscsi_rules_differ_for_pods_and_persistent_volumes_as_upstream() {
        let long_portal = "p".repeat(70);
        check(
            vec![api::Volume {
                name: "i".into(),
                iscsi: Some(api::ISCSIVolumeSource {
                    target_portal: long_portal.clone(),
                    iqn: "foo".into(),
                    lun: 300,
                    initiator_name: Some("x".into()),
                    secret_ref: Some(api::LocalObjectReference { name: "".into() }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            &[
                "spec.volumes[0].iscsi.iqn: Invalid value: \"foo\": must be valid format starting with iqn, eui, or naa",
                "spec.volumes[0].iscsi.lun: Invalid value: 300: must be between 0 and 255, inclusive",
                "spec.volumes[0].iscsi.initiatorname: Invalid value: \"x\": must be valid format starting with iqn, eui, or naa",
                "spec.volumes[0].name: Invalid value: \"i\": Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.",
            ],
        );
        let spec = api::PersistentVolumeSpec {
            iscsi: Some(api::ISCSIPersistentVolumeSource {
                target_portal: long_portal.clone(),
                iqn: "foo".into(),
                lun: 300,
                initiator_name: Some("x".into()),
                chap_auth_session: Some(true),
                secret_ref: Some(api::SecretReference::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source_errors(&spec, false),
            [
                format!(
                    "spec.iscsi.targetportal: Invalid value: \"{long_portal}\": Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified."
                ),
                "spec.iscsi.iqn: Invalid value: \"foo\": must be valid format".to_owned(),
                "spec.iscsi.lun: Invalid value: 300: must be between 0 and 255, inclusive"
                    .to_owned(),
                "spec.iscsi.initiatorname: Invalid value: \"x\": must be valid format".to_owned(),
                "spec.iscsi.secretRef.name: Required value".to_owned(),
            ]
        );
    }

    #[test]
    fn persistent_volume_sources_check_the_namespaces_pods_cannot_name() {
        let gluster = api::PersistentVolumeSpec {
            glusterfs: Some(api::GlusterfsPersistentVolumeSource {
                endpoints_namespace: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source_errors(&gluster, false),
            [
                "spec.glusterfs.endpoints: Required value",
                "spec.glusterfs.path: Required value",
                "spec.glusterfs.endpointsNamespace: Invalid value: \"\": if the endpointnamespace is set, it must be a valid namespace name",
            ]
        );
        let cinder = api::PersistentVolumeSpec {
            cinder: Some(api::CinderPersistentVolumeSource {
                volume_id: "v".into(),
                secret_ref: Some(api::SecretReference::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source_errors(&cinder, false),
            [
                "spec.cinder.secretRef.name: Required value",
                "spec.cinder.secretRef.namespace: Required value",
            ]
        );
        let azure = api::PersistentVolumeSpec {
            azure_file: Some(api::AzureFilePersistentVolumeSource {
                secret_name: "s".into(),
                share_name: "f".into(),
                secret_namespace: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source_errors(&azure, false),
            ["spec.azureFile.secretNamespace: Required value"]
        );
        let local = api::PersistentVolumeSpec {
            local: Some(api::LocalVolumeSource {
                path: "/a/../b".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source_errors(&local, false),
            [
                "spec.local.path: Invalid value: \"/a/../b\": must not contain '..'",
                "spec.nodeAffinity: Required value: Local volume requires node affinity",
            ]
        );
        assert_eq!(pv_source_errors(&local, true).len(), 1);
        // A pod's Cinder and StorageOS secrets name no namespace.
        check(
            vec![
                api::Volume {
                    name: "c".into(),
                    cinder: Some(api::CinderVolumeSource {
                        volume_id: "v".into(),
                        secret_ref: Some(api::LocalObjectReference::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                api::Volume {
                    name: "s".into(),
                    storageos: Some(api::StorageOSVolumeSource {
                        volume_name: Some("v".into()),
                        secret_ref: Some(api::LocalObjectReference::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ],
            &[
                "spec.volumes[0].cinder.secretRef.name: Required value",
                "spec.volumes[1].storageos.secretRef.name: Required value",
            ],
        );
    }

    #[test]
    fn projected_secrets_and_config_maps_share_paths_and_sources() {
        let items = Some(vec![api::KeyToPath {
            key: "k".into(),
            path: "a".into(),
            mode: None,
        }]);
        check(
            vec![api::Volume {
                name: "p".into(),
                projected: Some(api::ProjectedVolumeSource {
                    sources: Some(vec![api::VolumeProjection {
                        secret: Some(api::SecretProjection {
                            name: String::new(),
                            items: items.clone(),
                            ..Default::default()
                        }),
                        config_map: Some(api::ConfigMapProjection {
                            name: "c".into(),
                            items,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            &[
                "spec.volumes[0].projected.sources[0].secret.name: Required value",
                "spec.volumes[0].projected: Invalid value: \"c\": conflicting duplicate paths",
                "spec.volumes[0].projected.sources[0]: Forbidden: may not specify more than 1 volume type per source",
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
