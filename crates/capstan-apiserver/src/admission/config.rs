//! The admission configuration file (`--admission-control-config-file`): upstream's
//! `AdmissionConfiguration` (`apiserver.config.k8s.io/v1`, or the older `apiserver.k8s.io`
//! `v1alpha1`), whose `plugins` list gives each plugin its configuration inline
//! (`configuration`) or in a file of its own (`path`, relative to this file's directory).
//!
//! The one plugin configured so far is PodSecurity: a `PodSecurityConfiguration`
//! (`pod-security.admission.config.k8s.io/v1`, `v1beta1` or `v1alpha1`) with its `defaults`
//! (`enforce`, `enforce-version`, `audit`, `audit-version`, `warn`, `warn-version`) and
//! `exemptions` (`usernames`, `runtimeClasses`, `namespaces`), validated with upstream's
//! messages. Other plugins' entries are accepted and not read, as a plugin that takes no
//! configuration ignores its entry.

use std::path::Path;

use serde_json::Value;

use capstan_api::podsecurity::{self, LevelVersion, Policy};

use super::podsecurity::PodSecurityConfig;

/// What the admission configuration file configures.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AdmissionConfig {
    /// The PodSecurity plugin's defaults and exemptions.
    pub pod_security: PodSecurityConfig,
}

/// Reads and validates the admission configuration file at `path`.
pub(crate) fn load(path: &Path) -> Result<AdmissionConfig, String> {
    let document = read_document(path)?;
    let directory = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&document, directory).map_err(|error| format!("{}: {error}", path.display()))
}

fn read_document(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("reading {}: {error}", path.display()))?;
    serde_saphyr::from_str::<Value>(&text)
        .map_err(|error| format!("decoding {}: {error}", path.display()))
}

/// The configuration in `document`, reading plugin files relative to `directory`.
pub(crate) fn parse(document: &Value, directory: &Path) -> Result<AdmissionConfig, String> {
    let api_version = document.get("apiVersion").and_then(Value::as_str);
    let kind = document.get("kind").and_then(Value::as_str);
    let known = matches!(
        api_version,
        Some("apiserver.config.k8s.io/v1" | "apiserver.k8s.io/v1alpha1")
    );
    if !known || kind != Some("AdmissionConfiguration") {
        return Err(format!(
            "not an AdmissionConfiguration of apiserver.config.k8s.io/v1 (apiVersion {:?}, kind {:?})",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default()
        ));
    }
    let mut config = AdmissionConfig::default();
    let plugins = document
        .get("plugins")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for plugin in plugins {
        if plugin.get("name").and_then(Value::as_str) != Some("PodSecurity") {
            continue;
        }
        let configuration = match (
            plugin.get("configuration").filter(|c| !c.is_null()),
            plugin.get("path").and_then(Value::as_str),
        ) {
            (Some(configuration), _) => configuration.clone(),
            (None, Some(file)) => read_document(&directory.join(file))?,
            (None, None) => continue,
        };
        config.pod_security = pod_security(&configuration)?;
    }
    Ok(config)
}

/// A `PodSecurityConfiguration`, validated as upstream validates it.
fn pod_security(document: &Value) -> Result<PodSecurityConfig, String> {
    let api_version = document.get("apiVersion").and_then(Value::as_str);
    let kind = document.get("kind").and_then(Value::as_str);
    let known = matches!(
        api_version,
        Some(
            "pod-security.admission.config.k8s.io/v1"
                | "pod-security.admission.config.k8s.io/v1beta1"
                | "pod-security.admission.config.k8s.io/v1alpha1"
        )
    );
    if !known || kind != Some("PodSecurityConfiguration") {
        return Err(format!(
            "PodSecurity: not a PodSecurityConfiguration of pod-security.admission.config.k8s.io/v1 (apiVersion {:?}, kind {:?})",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default()
        ));
    }
    let mut errors = Vec::new();
    let defaults = document.get("defaults");
    let mut policy = Policy::default();
    for (mode, target) in [
        ("enforce", &mut policy.enforce),
        ("audit", &mut policy.audit),
        ("warn", &mut policy.warn),
    ] {
        *target = level_version(defaults, mode, &mut errors);
    }
    let exemptions = document.get("exemptions");
    let list = |key: &str, errors: &mut Vec<String>| -> Vec<String> {
        let items: Vec<String> = exemptions
            .and_then(|e| e.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect();
        for (i, item) in items.iter().enumerate() {
            if item.is_empty() {
                errors.push(format!(
                    "exemptions.{key}[{i}]: Invalid value: \"\": must be non-empty"
                ));
            } else if items[..i].contains(item) {
                errors.push(format!(
                    "exemptions.{key}[{i}]: Duplicate value: {}",
                    capstan_api::field::go_quote(item)
                ));
            }
        }
        items
    };
    let config = PodSecurityConfig {
        defaults: policy,
        exempt_usernames: list("usernames", &mut errors),
        exempt_runtime_classes: list("runtimeClasses", &mut errors),
        exempt_namespaces: list("namespaces", &mut errors),
    };
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(format!(
            "invalid PodSecurity configuration: {}",
            errors.join(", ")
        ))
    }
}

/// One mode's default (`enforce` and `enforce-version`), `privileged:latest` when unset.
fn level_version(defaults: Option<&Value>, mode: &str, errors: &mut Vec<String>) -> LevelVersion {
    let mut lv = LevelVersion::PRIVILEGED;
    let value = |key: &str| {
        defaults
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    if let Some(level) = value(mode) {
        match podsecurity::parse_level(level) {
            Ok(level) => lv.level = level,
            Err(error) => errors.push(format!(
                "defaults.{mode}: Invalid value: {}: {error}",
                capstan_api::field::go_quote(level)
            )),
        }
    }
    let version_key = format!("{mode}-version");
    if let Some(version) = value(&version_key) {
        match podsecurity::parse_version(version) {
            Ok(version) => lv.version = version,
            Err(error) => errors.push(format!(
                "defaults.{version_key}: Invalid value: {}: {error}",
                capstan_api::field::go_quote(version)
            )),
        }
    }
    lv
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use capstan_api::podsecurity::{Level, Version};

    fn document(configuration: Value) -> Value {
        json!({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": "Other", "configuration": {"anything": 1}},
                        {"name": "PodSecurity", "configuration": configuration}]})
    }

    fn pod_security(defaults: Value, exemptions: Value) -> Value {
        json!({"apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration", "defaults": defaults, "exemptions": exemptions})
    }

    #[test]
    fn reads_defaults_and_exemptions_inline() {
        let config = parse(
            &document(pod_security(
                json!({"enforce": "baseline", "enforce-version": "v1.30", "warn": "restricted"}),
                json!({"usernames": ["admin"], "runtimeClasses": ["kata"], "namespaces": ["kube-system"]}),
            )),
            Path::new("."),
        )
        .unwrap();
        let ps = config.pod_security;
        assert_eq!(ps.defaults.enforce.level, Level::Baseline);
        assert_eq!(ps.defaults.enforce.version, Version::Minor(30));
        assert_eq!(ps.defaults.warn.to_string(), "restricted:latest");
        assert_eq!(ps.defaults.audit.to_string(), "privileged:latest");
        assert_eq!(ps.exempt_usernames, ["admin"]);
        assert_eq!(ps.exempt_runtime_classes, ["kata"]);
        assert_eq!(ps.exempt_namespaces, ["kube-system"]);
    }

    #[test]
    fn reads_a_plugin_file_relative_to_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("podsecurity.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults:\n  audit: restricted\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("admission.yaml"),
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: podsecurity.yaml\n",
        )
        .unwrap();
        let config = load(&dir.path().join("admission.yaml")).unwrap();
        assert_eq!(config.pod_security.defaults.audit.level, Level::Restricted);
    }

    #[test]
    fn refuses_bad_values_with_upstreams_texts() {
        let error = parse(
            &document(pod_security(
                json!({"enforce": "strict", "warn-version": "1.2"}),
                json!({"namespaces": ["a", "a", ""]}),
            )),
            Path::new("."),
        )
        .unwrap_err();
        assert_eq!(
            error,
            "invalid PodSecurity configuration: \
             defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted, \
             defaults.warn-version: Invalid value: \"1.2\": must be \"latest\" or \"v1.x\", \
             exemptions.namespaces[1]: Duplicate value: \"a\", \
             exemptions.namespaces[2]: Invalid value: \"\": must be non-empty"
        );
        let error = parse(
            &json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            Path::new("."),
        )
        .unwrap_err();
        assert!(error.contains("not an AdmissionConfiguration"), "{error}");
        let error = parse(
            &document(json!({"apiVersion": "v1", "kind": "Other"})),
            Path::new("."),
        )
        .unwrap_err();
        assert!(error.contains("not a PodSecurityConfiguration"), "{error}");
    }
}
