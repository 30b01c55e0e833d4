//! Encryption at rest, as upstream's `--encryption-provider-config`: an
//! `apiserver.config.k8s.io/v1` `EncryptionConfiguration` names, per resource (`secrets`,
//! `deployments.apps`, `*.apps`, `*.` for the core group, `*.*`), an ordered list of providers
//! (`aescbc`, `aesgcm`, `secretbox`, `identity`; each with named keys). The first provider's
//! first key seals every write, as upstream stores it (`k8s:enc:<provider>:v1:<key name>:`
//! then the IV or nonce and the ciphertext; AES-GCM authenticates the storage key); reads try
//! each provider and key by that prefix, `identity` reading what is not encrypted. A value read
//! with any but the first is stale: an update rewrites it even if unchanged, which is how keys
//! are rotated (add a key, make it first, rewrite every object, drop the old key).
//!
//! The [`Encryption`] is the store's [`Transformer`]; it re-reads the file when it changes
//! (upstream's automatic reload), keeping the last good configuration if the new one is bad, so
//! that rotation needs no restart. `--secrets-encryption` (k3s's switch) writes a configuration
//! with a fresh `aescbc` key for Secrets, `identity` after it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use capstan_store::transform::Transformer;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use rand::RngCore as _;
use serde_json::Value;

/// What every sealed value starts with.
const ENCRYPTED: &[u8] = b"k8s:enc:";

/// How often the configuration file is checked for changes.
const RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// An AES key of one of the three sizes.
#[derive(Clone)]
enum AesKey {
    K128([u8; 16]),
    K192([u8; 24]),
    K256([u8; 32]),
}

impl AesKey {
    fn new(bytes: &[u8]) -> Option<AesKey> {
        Some(match bytes.len() {
            16 => AesKey::K128(bytes.try_into().ok()?),
            24 => AesKey::K192(bytes.try_into().ok()?),
            32 => AesKey::K256(bytes.try_into().ok()?),
            _ => return None,
        })
    }
}

type Aes192Gcm = aes_gcm::AesGcm<aes::Aes192, aes_gcm::aead::consts::U12>;

/// One provider's way of sealing with one key.
#[derive(Clone)]
enum Cipher {
    AesCbc(AesKey),
    AesGcm(AesKey),
    Secretbox([u8; 32]),
    Identity,
}

/// A provider's key, or `identity`, with the prefix its values carry.
#[derive(Clone)]
struct Sealer {
    prefix: Vec<u8>,
    cipher: Cipher,
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

impl Sealer {
    fn seal(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = self.prefix.clone();
        match &self.cipher {
            Cipher::Identity => out.extend_from_slice(value),
            Cipher::AesCbc(aes) => {
                let iv: [u8; 16] = random();
                out.extend_from_slice(&iv);
                let sealed = match aes {
                    AesKey::K128(k) => cbc::Encryptor::<aes::Aes128>::new(k.into(), &iv.into())
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                    AesKey::K192(k) => cbc::Encryptor::<aes::Aes192>::new(k.into(), &iv.into())
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                    AesKey::K256(k) => cbc::Encryptor::<aes::Aes256>::new(k.into(), &iv.into())
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                };
                out.extend_from_slice(&sealed);
            }
            Cipher::AesGcm(aes) => {
                let nonce: [u8; 12] = random();
                let payload = Payload {
                    msg: value,
                    aad: key.as_bytes(),
                };
                let sealed = match aes {
                    AesKey::K128(k) => {
                        aes_gcm::Aes128Gcm::new(k.into()).encrypt(&nonce.into(), payload)
                    }
                    AesKey::K192(k) => Aes192Gcm::new(k.into()).encrypt(&nonce.into(), payload),
                    AesKey::K256(k) => {
                        aes_gcm::Aes256Gcm::new(k.into()).encrypt(&nonce.into(), payload)
                    }
                }
                .map_err(|_| "aes-gcm encryption failed".to_owned())?;
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
            }
            Cipher::Secretbox(k) => {
                let nonce: [u8; 24] = random();
                let sealed = crypto_secretbox::XSalsa20Poly1305::new(k.into())
                    .encrypt(&nonce.into(), value)
                    .map_err(|_| "secretbox encryption failed".to_owned())?;
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
            }
        }
        Ok(out)
    }

    /// Opens `data` (the stored value without this sealer's prefix).
    fn open(&self, key: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        match &self.cipher {
            Cipher::Identity => Ok(data.to_vec()),
            Cipher::AesCbc(aes) => {
                if data.len() < 16 {
                    return Err("the stored data was shorter than the required size".to_owned());
                }
                let (iv, sealed) = data.split_at(16);
                let iv: [u8; 16] = iv.try_into().map_err(|_| "bad IV".to_owned())?;
                if sealed.is_empty() || sealed.len() % 16 != 0 {
                    return Err("invalid ciphertext: not a multiple of the block size".to_owned());
                }
                match aes {
                    AesKey::K128(k) => cbc::Decryptor::<aes::Aes128>::new(k.into(), &iv.into())
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed),
                    AesKey::K192(k) => cbc::Decryptor::<aes::Aes192>::new(k.into(), &iv.into())
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed),
                    AesKey::K256(k) => cbc::Decryptor::<aes::Aes256>::new(k.into(), &iv.into())
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed),
                }
                .map_err(|_| "invalid PKCS7 data (empty or not padded)".to_owned())
            }
            Cipher::AesGcm(aes) => {
                if data.len() < 12 {
                    return Err("the stored data was shorter than the required size".to_owned());
                }
                let (nonce, sealed) = data.split_at(12);
                let nonce: [u8; 12] = nonce.try_into().map_err(|_| "bad nonce".to_owned())?;
                let payload = Payload {
                    msg: sealed,
                    aad: key.as_bytes(),
                };
                match aes {
                    AesKey::K128(k) => {
                        aes_gcm::Aes128Gcm::new(k.into()).decrypt(&nonce.into(), payload)
                    }
                    AesKey::K192(k) => Aes192Gcm::new(k.into()).decrypt(&nonce.into(), payload),
                    AesKey::K256(k) => {
                        aes_gcm::Aes256Gcm::new(k.into()).decrypt(&nonce.into(), payload)
                    }
                }
                .map_err(|_| "cipher: message authentication failed".to_owned())
            }
            Cipher::Secretbox(k) => {
                if data.len() < 24 {
                    return Err("the stored data was shorter than the required size".to_owned());
                }
                let (nonce, sealed) = data.split_at(24);
                let nonce: [u8; 24] = nonce.try_into().map_err(|_| "bad nonce".to_owned())?;
                crypto_secretbox::XSalsa20Poly1305::new(k.into())
                    .decrypt(&nonce.into(), sealed)
                    .map_err(|_| "output array was not large enough for encryption".to_owned())
            }
        }
    }
}

/// One `resources` entry: the resources it names and their sealers, in order.
#[derive(Clone)]
struct Rule {
    resources: Vec<String>,
    sealers: Vec<Sealer>,
}

impl Rule {
    /// Whether the rule names `plural` of `group` (`""`: core).
    fn names(&self, group: &str, plural: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*.*"
                || (group.is_empty() && (r == plural || r == "*."))
                || (!group.is_empty()
                    && (r.strip_prefix(plural).and_then(|g| g.strip_prefix('.')) == Some(group)
                        || r.strip_prefix("*.") == Some(group)))
        })
    }
}

/// A parsed `EncryptionConfiguration`.
#[derive(Clone, Default)]
pub struct EncryptionConfig {
    rules: Vec<Rule>,
}

impl std::fmt::Debug for EncryptionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        let resources: Vec<&Vec<String>> = self.rules.iter().map(|r| &r.resources).collect();
        f.debug_struct("EncryptionConfig")
            .field("resources", &resources)
            .finish_non_exhaustive()
    }
}

fn provider_sealers(index: usize, rule: usize, provider: &Value) -> Result<Vec<Sealer>, String> {
    let at = format!("resources[{rule}].providers[{index}]");
    let object = provider
        .as_object()
        .ok_or_else(|| format!("{at}: Invalid value: a provider must be an object"))?;
    let kinds: Vec<&String> = object.keys().collect();
    if kinds.len() != 1 {
        return Err(format!(
            "{at}: Invalid value: more than one provider specified in a single element, should split into different list elements"
        ));
    }
    let kind = kinds[0].as_str();
    let settings = &object[kind];
    if kind == "identity" {
        return Ok(vec![Sealer {
            prefix: Vec::new(),
            cipher: Cipher::Identity,
        }]);
    }
    if kind == "kms" {
        return Err(format!(
            "{at}.kms: Unsupported value: KMS providers are not supported by this server"
        ));
    }
    if !matches!(kind, "aescbc" | "aesgcm" | "secretbox") {
        return Err(format!(
            "{at}: Unsupported value: {kind:?}: supported values: \"aescbc\", \"aesgcm\", \"secretbox\", \"identity\""
        ));
    }
    let keys = settings["keys"].as_array().cloned().unwrap_or_default();
    if keys.is_empty() {
        return Err(format!(
            "{at}.{kind}.keys: Required value: keys list cannot be empty"
        ));
    }
    let mut names = std::collections::HashSet::new();
    let mut sealers = Vec::new();
    for (k, entry) in keys.iter().enumerate() {
        let key_at = format!("{at}.{kind}.keys[{k}]");
        let name = entry["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            return Err(format!(
                "{key_at}.name: Required value: key name is required"
            ));
        }
        if name.contains(':') {
            return Err(format!(
                "{key_at}.name: Invalid value: {name:?}: key name must not contain \":\""
            ));
        }
        if !names.insert(name.to_owned()) {
            return Err(format!("{key_at}.name: Duplicate value: {name:?}"));
        }
        let secret = entry["secret"].as_str().unwrap_or_default();
        if secret.is_empty() {
            return Err(format!(
                "{key_at}.secret: Required value: secret is required"
            ));
        }
        let bytes = STANDARD.decode(secret).map_err(|_| {
            format!("{key_at}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded")
        })?;
        let length = |expected: &str| {
            format!(
                "{key_at}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {expected}",
                bytes.len()
            )
        };
        let cipher = match kind {
            "aescbc" => Cipher::AesCbc(AesKey::new(&bytes).ok_or_else(|| length("[16 24 32]"))?),
            "aesgcm" => Cipher::AesGcm(AesKey::new(&bytes).ok_or_else(|| length("[16 24 32]"))?),
            _ => Cipher::Secretbox(bytes.as_slice().try_into().map_err(|_| length("[32]"))?),
        };
        sealers.push(Sealer {
            prefix: format!("k8s:enc:{kind}:v1:{name}:").into_bytes(),
            cipher,
        });
    }
    Ok(sealers)
}

impl EncryptionConfig {
    /// Parses a configuration document (YAML or JSON), checking it as upstream does.
    pub fn parse(text: &str) -> Result<EncryptionConfig, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("cannot parse: {e}"))?;
        if doc["kind"] != "EncryptionConfiguration"
            || doc["apiVersion"] != "apiserver.config.k8s.io/v1"
        {
            return Err(format!(
                "expected apiVersion apiserver.config.k8s.io/v1, kind EncryptionConfiguration; got {} {}",
                doc["apiVersion"], doc["kind"]
            ));
        }
        let entries = doc["resources"].as_array().cloned().unwrap_or_default();
        if entries.is_empty() {
            return Err("resources: Required value: resources cannot be empty".to_owned());
        }
        let mut rules = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let resources: Vec<String> = entry["resources"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|v| v.as_str())
                        .map(str::to_ascii_lowercase)
                        .collect()
                })
                .unwrap_or_default();
            if resources.is_empty() {
                return Err(format!(
                    "resources[{i}].resources: Required value: resources cannot be empty"
                ));
            }
            for resource in &resources {
                // A resource an earlier wildcard already covers would never use this rule.
                let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
                if let Some(mask) = seen.iter().find(|earlier| {
                    *earlier == "*.*"
                        || (*earlier == "*." && group.is_empty())
                        || (earlier.strip_prefix("*.") == Some(group) && !group.is_empty())
                        || *earlier == resource
                }) {
                    if mask == resource {
                        return Err(format!(
                            "resources[{i}].resources: Duplicate value: {resource:?}"
                        ));
                    }
                    if plural != "*" || mask == "*.*" {
                        return Err(format!(
                            "resources[{i}].resources: Invalid value: {resource:?}: resource {resource:?} is masked by earlier rule {mask:?}"
                        ));
                    }
                }
            }
            seen.extend(resources.iter().cloned());
            let providers = entry["providers"].as_array().cloned().unwrap_or_default();
            if providers.is_empty() {
                return Err(format!(
                    "resources[{i}].providers: Required value: providers cannot be empty"
                ));
            }
            let mut sealers = Vec::new();
            for (p, provider) in providers.iter().enumerate() {
                sealers.extend(provider_sealers(p, i, provider)?);
            }
            rules.push(Rule { resources, sealers });
        }
        Ok(EncryptionConfig { rules })
    }

    /// The sealers of `plural` of `group`, if a rule names it.
    fn sealers(&self, group: &str, plural: &str) -> Option<&[Sealer]> {
        self.rules
            .iter()
            .find(|r| r.names(group, plural))
            .map(|r| r.sealers.as_slice())
    }

    /// A configuration for Secrets with a fresh `aescbc` key named `key_name`, `identity`
    /// after it (what `--secrets-encryption` writes).
    pub fn generate_document(key_name: &str) -> String {
        let key: [u8; 32] = random();
        serde_json::to_string_pretty(&serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "EncryptionConfiguration",
            "resources": [{
                "resources": ["secrets"],
                "providers": [
                    {"aescbc": {"keys": [{"name": key_name, "secret": STANDARD.encode(key)}]}},
                    {"identity": {}},
                ],
            }],
        }))
        .unwrap_or_default()
    }
}

/// The storage key prefixes of the built-in resources, longest first.
fn builtin_prefixes() -> Vec<(String, &'static str, &'static str)> {
    let mut prefixes: Vec<(String, &str, &str)> = capstan_api::catalog::resources()
        .map(|r| (r.storage_key_prefix(), r.group, r.plural))
        .collect();
    prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
    prefixes.dedup_by(|a, b| a.0 == b.0);
    prefixes
}

/// The resource a storage key belongs to: a built-in's, or a custom resource's
/// (`/registry/<group>/<plural>/...`).
fn resource_of<'a>(
    prefixes: &'a [(String, &'static str, &'static str)],
    key: &'a str,
) -> Option<(&'a str, &'a str)> {
    if let Some((_, group, plural)) = prefixes
        .iter()
        .find(|(p, _, _)| key.starts_with(p.as_str()))
    {
        return Some((group, plural));
    }
    let mut parts = key.strip_prefix("/registry/")?.splitn(3, '/');
    let (group, plural) = (parts.next()?, parts.next()?);
    (group.contains('.') && parts.next().is_some()).then_some((group, plural))
}

/// The configuration in use, and the file it came from.
struct Loaded {
    config: EncryptionConfig,
    modified: Option<SystemTime>,
}

/// Encryption at rest for the store ([`Transformer`]), reloaded when its file changes.
pub struct Encryption {
    path: PathBuf,
    loaded: RwLock<Loaded>,
    prefixes: Vec<(String, &'static str, &'static str)>,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Encryption {
    /// Loads the configuration at `path` (`--encryption-provider-config`).
    pub fn load(path: &Path) -> Result<Arc<Encryption>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--encryption-provider-config {}: {e}", path.display()))?;
        let config = EncryptionConfig::parse(&text)
            .map_err(|e| format!("--encryption-provider-config {}: {e}", path.display()))?;
        Ok(Arc::new(Encryption {
            path: path.to_owned(),
            loaded: RwLock::new(Loaded {
                config,
                modified: modified(path),
            }),
            prefixes: builtin_prefixes(),
        }))
    }

    /// Writes a configuration with a fresh key for Secrets at `path` unless one is there
    /// (`--secrets-encryption`), and loads it.
    pub fn load_or_generate(path: &Path) -> Result<Arc<Encryption>, String> {
        if !path.exists() {
            let name = format!(
                "aescbckey-{}",
                time::OffsetDateTime::now_utc().unix_timestamp()
            );
            capstan_client::credentials::write_file(
                path,
                &EncryptionConfig::generate_document(&name),
                0o600,
            )
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Self::load(path)
    }

    /// Reloads the file when it changed; a bad new file is reported and the old
    /// configuration kept.
    pub fn reload_if_changed(&self) {
        let now = modified(&self.path);
        if now == self.loaded.read().map(|l| l.modified).unwrap_or(None) {
            return;
        }
        let parsed = std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|text| EncryptionConfig::parse(&text));
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        loaded.modified = now;
        match parsed {
            Ok(config) => {
                loaded.config = config;
                tracing::info!(path = %self.path.display(), "reloaded the encryption configuration");
            }
            Err(error) => tracing::error!(
                path = %self.path.display(), %error,
                "the encryption configuration changed but is invalid; the previous one stays in use"
            ),
        }
    }

    /// Reloads the file whenever it changes, for as long as the returned task runs.
    pub fn watch_file(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_PERIOD).await;
                let Some(me) = me.upgrade() else { return };
                me.reload_if_changed();
            }
        })
    }

    /// Runs `f` with the sealers for `key`, if its resource is encrypted.
    fn with_sealers<T>(&self, key: &str, f: impl FnOnce(Option<&[Sealer]>) -> T) -> T {
        let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
        let sealers = resource_of(&self.prefixes, key)
            .and_then(|(group, plural)| loaded.config.sealers(group, plural));
        f(sealers)
    }
}

/// Which sealer opens `stored`, and what remains of it after the prefix: the first whose
/// prefix it has (`identity` only for values that are not encrypted), as upstream tries them.
fn opener<'a>(sealers: &'a [Sealer], stored: &'a [u8]) -> Option<(usize, &'a Sealer, &'a [u8])> {
    sealers.iter().enumerate().find_map(|(i, s)| {
        let matched = match s.cipher {
            Cipher::Identity => !stored.starts_with(ENCRYPTED),
            _ => stored.starts_with(&s.prefix),
        };
        matched.then(|| (i, s, &stored[s.prefix.len()..]))
    })
}

impl Transformer for Encryption {
    fn seal(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, String> {
        self.with_sealers(key, |sealers| match sealers.and_then(|s| s.first()) {
            Some(sealer) => sealer.seal(key, value),
            None => Ok(value.to_vec()),
        })
    }

    fn open(&self, key: &str, stored: &[u8]) -> Result<Vec<u8>, String> {
        self.with_sealers(key, |sealers| {
            let Some(sealers) = sealers else {
                if stored.starts_with(ENCRYPTED) {
                    return Err(
                        "the object is encrypted but its resource has no encryption provider"
                            .to_owned(),
                    );
                }
                return Ok(stored.to_vec());
            };
            match opener(sealers, stored) {
                Some((_, sealer, data)) => sealer.open(key, data),
                None if stored.starts_with(ENCRYPTED) => Err("no matching prefix found".to_owned()),
                None => Err(
                    "identity transformer is not configured: cannot read unencrypted data"
                        .to_owned(),
                ),
            }
        })
    }

    fn stale(&self, key: &str, stored: &[u8]) -> bool {
        self.with_sealers(key, |sealers| match sealers {
            Some(sealers) => opener(sealers, stored).is_none_or(|(i, _, _)| i != 0),
            None => stored.starts_with(ENCRYPTED),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(bytes: usize) -> String {
        STANDARD.encode(vec![7u8; bytes])
    }

    fn config(providers: &str) -> Encryption {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets, '*.apps']\n  providers:\n{providers}"
        );
        Encryption {
            path: PathBuf::new(),
            loaded: RwLock::new(Loaded {
                config: EncryptionConfig::parse(&text).unwrap(),
                modified: None,
            }),
            prefixes: builtin_prefixes(),
        }
    }

    const SECRET: &str = "/registry/secrets/default/s";

    #[test]
    fn every_provider_round_trips_with_upstreams_prefix() {
        for (providers, prefix) in [
            (
                format!(
                    "  - aescbc: {{keys: [{{name: k1, secret: {}}}]}}\n",
                    key(32)
                ),
                "k8s:enc:aescbc:v1:k1:",
            ),
            (
                format!(
                    "  - aescbc: {{keys: [{{name: k1, secret: {}}}]}}\n",
                    key(16)
                ),
                "k8s:enc:aescbc:v1:k1:",
            ),
            (
                format!("  - aesgcm: {{keys: [{{name: g, secret: {}}}]}}\n", key(24)),
                "k8s:enc:aesgcm:v1:g:",
            ),
            (
                format!(
                    "  - secretbox: {{keys: [{{name: s, secret: {}}}]}}\n",
                    key(32)
                ),
                "k8s:enc:secretbox:v1:s:",
            ),
        ] {
            let encryption = config(&providers);
            let sealed = encryption.seal(SECRET, b"{\"data\":1}").unwrap();
            assert!(sealed.starts_with(prefix.as_bytes()), "{prefix}");
            assert!(!sealed.windows(8).any(|w| w == b"\"data\":1"));
            assert_eq!(encryption.open(SECRET, &sealed).unwrap(), b"{\"data\":1}");
            assert!(!encryption.stale(SECRET, &sealed));
            // Two seals of one value differ (a fresh IV or nonce each time).
            assert_ne!(encryption.seal(SECRET, b"{\"data\":1}").unwrap(), sealed);
            // Without identity, plain data is unreadable.
            assert!(encryption.open(SECRET, b"{}").is_err());
        }
    }

    #[test]
    fn aes_gcm_binds_the_value_to_its_key() {
        let encryption = config(&format!(
            "  - aesgcm: {{keys: [{{name: g, secret: {}}}]}}\n",
            key(32)
        ));
        let sealed = encryption.seal(SECRET, b"v").unwrap();
        let moved = encryption.open("/registry/secrets/default/other", &sealed);
        assert_eq!(moved.unwrap_err(), "cipher: message authentication failed");
    }

    #[test]
    fn reads_try_each_key_and_older_ones_are_stale() {
        let old = config(&format!(
            "  - aescbc: {{keys: [{{name: old, secret: {}}}]}}\n",
            key(32)
        ));
        let sealed_old = old.seal(SECRET, b"v").unwrap();
        let rotated = config(&format!(
            "  - aescbc: {{keys: [{{name: new, secret: {}}}, {{name: old, secret: {}}}]}}\n  - identity: {{}}\n",
            STANDARD.encode([9u8; 32]),
            key(32)
        ));
        assert_eq!(rotated.open(SECRET, &sealed_old).unwrap(), b"v");
        assert!(rotated.stale(SECRET, &sealed_old));
        // Plain values are read by identity, and stale too; new writes use the first key.
        assert_eq!(rotated.open(SECRET, b"plain").unwrap(), b"plain");
        assert!(rotated.stale(SECRET, b"plain"));
        let sealed_new = rotated.seal(SECRET, b"v").unwrap();
        assert!(sealed_new.starts_with(b"k8s:enc:aescbc:v1:new:"));
        assert!(!rotated.stale(SECRET, &sealed_new));
        // Other resources pass through; `*.apps` covers Deployments.
        assert_eq!(
            rotated
                .seal("/registry/configmaps/default/c", b"x")
                .unwrap(),
            b"x"
        );
        assert!(
            rotated
                .seal("/registry/deployments/default/d", b"x")
                .unwrap()
                .starts_with(b"k8s:enc:")
        );
        // A key no longer listed cannot read what it sealed.
        let dropped = config("  - identity: {}\n");
        assert_eq!(
            dropped.open(SECRET, &sealed_old).unwrap_err(),
            "no matching prefix found"
        );
    }

    #[test]
    fn bad_configurations_are_refused_with_the_field() {
        let header = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n";
        for (body, error) in [
            ("resources: []\n", "resources: Required value"),
            (
                "resources:\n- resources: [secrets]\n  providers: []\n",
                "resources[0].providers: Required value",
            ),
            (
                "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: k, secret: AAAA}]}\n",
                "secret is not of the expected length, got 3, expected one of [16 24 32]",
            ),
            (
                "resources:\n- resources: [secrets]\n  providers:\n  - {identity: {}, aescbc: {keys: []}}\n",
                "more than one provider specified in a single element",
            ),
            (
                "resources:\n- resources: ['*.']\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n",
                "resource \"secrets\" is masked by earlier rule \"*.\"",
            ),
            (
                "resources:\n- resources: [secrets]\n  providers: [{kms: {name: x}}]\n",
                "KMS providers are not supported",
            ),
        ] {
            let got = EncryptionConfig::parse(&format!("{header}{body}"))
                .err()
                .unwrap_or_default();
            assert!(got.contains(error), "{body}: {got}");
        }
        let generated = EncryptionConfig::generate_document("k");
        let parsed = EncryptionConfig::parse(&generated).unwrap();
        assert!(parsed.sealers("", "secrets").is_some());
        assert!(parsed.sealers("", "configmaps").is_none());
    }

    #[test]
    fn storage_keys_name_their_resources() {
        let prefixes = builtin_prefixes();
        assert_eq!(resource_of(&prefixes, SECRET), Some(("", "secrets")));
        assert_eq!(
            resource_of(&prefixes, "/registry/deployments/ns/d"),
            Some(("apps", "deployments"))
        );
        assert_eq!(
            resource_of(&prefixes, "/registry/stable.example.com/crontabs/ns/c"),
            Some(("stable.example.com", "crontabs"))
        );
        assert_eq!(resource_of(&prefixes, "/other/key"), None);
    }
}
