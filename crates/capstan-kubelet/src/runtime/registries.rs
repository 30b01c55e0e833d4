//! Registry mirrors: k3s's `registries.yaml` (`<data-dir>/agent/registries.yaml`) turned into
//! containerd's per-registry host files (`certs.d/<registry>/hosts.toml`, which the generated
//! containerd configuration points `config_path` at), so that `docker.io/...` images can come
//! from a mirror, e.g. a registry on loopback in an air-gapped setup.
//!
//! ```yaml
//! mirrors:
//!   docker.io:
//!     endpoint: ["http://127.0.0.1:5000"]
//! configs:
//!   "127.0.0.1:5000":
//!     tls: {ca_file: /etc/ssl/mirror-ca.pem, insecure_skip_verify: false}
//! ```
//!
//! Each mirror's endpoints are tried in order, then the registry itself (as k3s does); a
//! mirror called `*` applies to every registry (containerd's `_default`). `configs` give an
//! endpoint host's TLS settings (`ca_file`, `cert_file`/`key_file`, `insecure_skip_verify`).
//! Two k3s settings need containerd's CRI registry configuration or k3s's patched containerd
//! and are refused with a clear message rather than ignored: `rewrite` and `auth` (image pull
//! secrets carry credentials instead).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The file's name under the agent's directory.
pub const FILE: &str = "registries.yaml";

/// A file name marking a host directory as written here, so stale ones can be removed.
const MARKER: &str = ".capstan";

/// The registries file, as k3s reads it.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    /// Mirrors by registry host (`docker.io`, `registry.example.com:5000`, `*`).
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Settings by endpoint host.
    #[serde(default)]
    pub configs: BTreeMap<String, RegistryConfig>,
}

/// Where a registry's images may come from instead.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// Endpoint URLs (`http://host:port`, `https://host`), tried in order.
    #[serde(default)]
    pub endpoint: Vec<String>,
    /// Repository rewrites (k3s's containerd only).
    #[serde(default)]
    pub rewrite: BTreeMap<String, String>,
}

/// One endpoint host's settings.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Credentials (not supported here).
    #[serde(default)]
    pub auth: Option<serde_json::Value>,
    /// TLS settings.
    #[serde(default)]
    pub tls: Option<Tls>,
}

/// TLS settings of an endpoint host.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// A client certificate.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// Its key.
    #[serde(default)]
    pub key_file: Option<String>,
    /// The CA to trust.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Skip verifying the server's certificate.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// A registries file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RegistriesError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("{FILE}: {0}")]
    Invalid(String),
}

/// Parses a registries file.
pub fn parse(text: &str) -> Result<Registries, RegistriesError> {
    if text.trim().is_empty() {
        return Ok(Registries::default());
    }
    let registries: Registries =
        serde_saphyr::from_str(text).map_err(|e| RegistriesError::Invalid(e.to_string()))?;
    for (registry, mirror) in &registries.mirrors {
        if !mirror.rewrite.is_empty() {
            return Err(RegistriesError::Invalid(format!(
                "mirrors.{registry}.rewrite needs k3s's containerd; stock containerd cannot rewrite repositories"
            )));
        }
        for endpoint in &mirror.endpoint {
            endpoint_host(endpoint).ok_or_else(|| {
                RegistriesError::Invalid(format!(
                    "mirrors.{registry}.endpoint: {endpoint:?} is not an http:// or https:// URL"
                ))
            })?;
        }
    }
    if let Some((host, _)) = registries.configs.iter().find(|(_, c)| c.auth.is_some()) {
        return Err(RegistriesError::Invalid(format!(
            "configs.{host:?}.auth is not supported: give pods an imagePullSecret instead"
        )));
    }
    Ok(registries)
}

/// The host (with port) of an endpoint URL.
fn endpoint_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))?;
    let host = rest.split('/').next().unwrap_or_default();
    (!host.is_empty()).then_some(host)
}

fn toml_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The `hosts.toml` of `registry`: its mirror endpoints, then the registry itself.
pub fn hosts_toml(
    registry: &str,
    mirror: &Mirror,
    configs: &BTreeMap<String, RegistryConfig>,
) -> String {
    let mut out = String::new();
    if registry != "*" {
        let server = if registry == "docker.io" {
            "https://registry-1.docker.io".to_owned()
        } else {
            format!("https://{registry}")
        };
        out.push_str(&format!("server = {}\n", toml_string(&server)));
    }
    for endpoint in &mirror.endpoint {
        let endpoint = endpoint.trim_end_matches('/');
        out.push_str(&format!("\n[host.{}]\n", toml_string(endpoint)));
        out.push_str("  capabilities = [\"pull\", \"resolve\"]\n");
        let tls = endpoint_host(endpoint)
            .and_then(|host| configs.get(host))
            .and_then(|c| c.tls.as_ref());
        if let Some(tls) = tls {
            if let Some(ca) = &tls.ca_file {
                out.push_str(&format!("  ca = {}\n", toml_string(ca)));
            }
            if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                out.push_str(&format!(
                    "  client = [[{}, {}]]\n",
                    toml_string(cert),
                    toml_string(key)
                ));
            }
            if tls.insecure_skip_verify {
                out.push_str("  skip_verify = true\n");
            }
        }
    }
    out
}

/// Writes the host files of the registries file under `agent_dir` (if there is one) into
/// `certs_dir`, replacing what an earlier start wrote; returns the registries configured.
pub fn apply(agent_dir: &Path, certs_dir: &Path) -> Result<Vec<String>, RegistriesError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| RegistriesError::Io { path, source }
    };
    let file = agent_dir.join(FILE);
    let registries = match std::fs::read_to_string(&file) {
        Ok(text) => parse(&text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Registries::default(),
        Err(e) => return Err(io(&file)(e)),
    };
    if let Ok(entries) = std::fs::read_dir(certs_dir) {
        for entry in entries.flatten() {
            if entry.path().join(MARKER).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let mut written = Vec::new();
    for (registry, mirror) in &registries.mirrors {
        let dir_name = if registry == "*" {
            "_default"
        } else {
            registry
        };
        let dir = certs_dir.join(dir_name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let hosts = dir.join("hosts.toml");
        std::fs::write(&hosts, hosts_toml(registry, mirror, &registries.configs))
            .map_err(io(&hosts))?;
        std::fs::write(dir.join(MARKER), "written from registries.yaml\n").map_err(io(&dir))?;
        written.push(registry.clone());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_become_host_files_with_tls_settings() {
        let registries = parse(
            r#"
mirrors:
  docker.io:
    endpoint: ["http://127.0.0.1:5000", "https://mirror.example.com/"]
configs:
  "mirror.example.com":
    tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem, insecure_skip_verify: true}
"#,
        )
        .unwrap();
        let toml = hosts_toml(
            "docker.io",
            &registries.mirrors["docker.io"],
            &registries.configs,
        );
        assert_eq!(
            toml,
            "server = \"https://registry-1.docker.io\"\n\n\
             [host.\"http://127.0.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n\n\
             [host.\"https://mirror.example.com\"]\n  capabilities = [\"pull\", \"resolve\"]\n  \
             ca = \"/ca.pem\"\n  client = [[\"/c.pem\", \"/k.pem\"]]\n  skip_verify = true\n"
        );
    }

    #[test]
    fn unsupported_or_malformed_settings_are_refused() {
        assert!(parse("mirrors:\n  docker.io:\n    endpoint: [\"ftp://x\"]\n").is_err());
        assert!(
            parse("mirrors:\n  docker.io:\n    rewrite: {\"^a\": \"b\"}\n")
                .unwrap_err()
                .to_string()
                .contains("rewrite")
        );
        assert!(parse("configs:\n  x:\n    auth: {username: a}\n").is_err());
        assert!(parse("mirrorz: {}\n").is_err());
        assert_eq!(parse("").unwrap(), Registries::default());
    }

    #[test]
    fn applying_replaces_what_an_earlier_start_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs.d");
        std::fs::write(
            dir.path().join(FILE),
            "mirrors:\n  \"*\":\n    endpoint: [\"http://127.0.0.1:5000\"]\n  quay.io:\n    endpoint: [\"http://127.0.0.1:5001\"]\n",
        )
        .unwrap();
        assert_eq!(apply(dir.path(), &certs).unwrap(), ["*", "quay.io"]);
        let default = std::fs::read_to_string(certs.join("_default/hosts.toml")).unwrap();
        assert!(!default.contains("server ="), "{default}");
        assert!(default.contains("[host.\"http://127.0.0.1:5000\"]"));
        // A directory of the user's own is kept; ours follow the file.
        std::fs::create_dir_all(certs.join("mine.example.com")).unwrap();
        std::fs::write(dir.path().join(FILE), "").unwrap();
        assert!(apply(dir.path(), &certs).unwrap().is_empty());
        assert!(!certs.join("quay.io").exists());
        assert!(certs.join("mine.example.com").exists());
    }
}
