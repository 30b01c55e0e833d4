//! The server's certificates, under `<data-dir>/tls`.
//!
//! First start generates a cluster CA, a serving certificate and an admin client certificate
//! (`CN=system:admin`, `O=system:masters`, upstream's group with every permission). Later starts
//! reuse the CA and the admin certificate, so existing kubeconfigs keep working, and issue a new
//! serving certificate for the current names (`--tls-san` may have changed). Keys are written
//! with mode 0600.
//!
//! Leaf certificates the server keeps (admin, components, the front proxy's client) are issued
//! again at a start that finds them expired or within [`RENEW_WITHIN`] (90 days, k3s's rule) of
//! their end, or missing: `capstan certificate rotate` moves them aside ([`rotate`]) so the next
//! start issues new ones from the same CAs. [`inventory`] lists them for `capstan certificate
//! check`.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Errors reading or creating certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key could not be generated or parsed.
    #[error("{what}: {source}")]
    Certificate {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// A setting is unusable (the message says which and why).
    #[error("{0}")]
    Invalid(String),
}

/// A certificate and its private key, PEM-encoded.
#[derive(Clone)]
pub struct CertAndKey {
    /// The certificate.
    pub cert_pem: String,
    /// The private key.
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey").finish_non_exhaustive()
    }
}

/// Everything the server needs to serve TLS and authenticate clients.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The cluster CA's certificate (clients trust it; it signs client certificates).
    pub ca_cert_pem: String,
    /// The serving certificate.
    pub serving: CertAndKey,
    /// The admin client certificate.
    pub admin: CertAndKey,
}

const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A kept leaf certificate this close to its end (or past it) is issued again at start, as
/// k3s renews its certificates.
pub const RENEW_WITHIN: Duration = Duration::from_secs(90 * 24 * 3600);

/// How long node certificates the server issues directly last unless told otherwise (the CSR
/// signer's default `--cluster-signing-duration`, a year).
pub const DEFAULT_NODE_LIFETIME: Duration = LEAF_VALIDITY;

/// How far a node certificate's start is set back (the CSR signer's backdate).
const NODE_BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Below this lifetime a node certificate's end is counted from now rather than from its
/// backdated start (the CSR signer's rule).
const NODE_SHORT: Duration = Duration::from_secs(8 * 3600);

/// The end of the first certificate in `cert_pem`, if it parses.
pub fn not_after(cert_pem: &str) -> Option<time::OffsetDateTime> {
    let der = rustls_pki_der(cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(cert.validity().not_after.to_datetime())
}

fn rustls_pki_der(cert_pem: &str) -> Option<Vec<u8>> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    (pem.label == "CERTIFICATE").then_some(pem.contents)
}

/// Whether the certificate `cert_pem` ends within `window` of `now` (or has ended, or does not
/// parse): it is then issued again.
pub fn needs_renewal(cert_pem: &str, now: time::OffsetDateTime, window: Duration) -> bool {
    not_after(cert_pem).is_none_or(|end| end <= now + window)
}

/// A kept pair under `dir` (`<stem>.crt`, `<stem>.key`) that is still good: present and not
/// due for renewal.
fn kept(dir: &Path, stem: &str) -> Result<Option<CertAndKey>, PkiError> {
    let cert = read(&dir.join(format!("{stem}.crt")))?;
    let key = read(&dir.join(format!("{stem}.key")))?;
    match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => {
            if needs_renewal(&cert_pem, time::OffsetDateTime::now_utc(), RENEW_WITHIN) {
                tracing::info!(certificate = %format!("{stem}.crt"), "certificate expires within 90 days or has expired: issuing it again");
                return Ok(None);
            }
            Ok(Some(CertAndKey { cert_pem, key_pem }))
        }
        _ => Ok(None),
    }
}

fn cert_error(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Certificate {
        what: what.to_owned(),
        source,
    }
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes `contents` to `path` atomically with the given mode
/// (`capstan_client::credentials::write_file`).
pub(crate) fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    capstan_client::credentials::write_file(path, contents, mode).map_err(|source| PkiError::Io {
        path: path.to_owned(),
        source,
    })
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for clocks that are behind.
    params.not_before = now - Duration::from_secs(3600);
    params.not_after = now + lifetime;
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name("capstan-ca", None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, CA_VALIDITY);
    params
}

/// The names the serving certificate is valid for: the usual local names, the in-cluster names
/// of the `kubernetes` service, and every extra name (`--tls-san`).
pub fn serving_names(hostname: Option<&str>, extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    names.extend(hostname.map(str::to_owned));
    names.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| !n.is_empty() && seen.insert(n.clone()));
    names
}

fn san(name: &str) -> Result<SanType, PkiError> {
    match name.parse::<IpAddr>() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => Ok(SanType::DnsName(
            name.to_owned()
                .try_into()
                .map_err(cert_error("invalid DNS name in --tls-san"))?,
        )),
    }
}

fn issue(
    issuer: &Issuer<'_, KeyPair>,
    dn: DistinguishedName,
    names: &[String],
    usage: ExtendedKeyUsagePurpose,
) -> Result<CertAndKey, PkiError> {
    issue_for(issuer, dn, names, usage, |params| {
        validity(params, LEAF_VALIDITY)
    })
}

/// [`issue`] with the validity `valid` sets.
fn issue_for(
    issuer: &Issuer<'_, KeyPair>,
    dn: DistinguishedName,
    names: &[String],
    usage: ExtendedKeyUsagePurpose,
    valid: impl FnOnce(&mut CertificateParams),
) -> Result<CertAndKey, PkiError> {
    let key = KeyPair::generate().map_err(cert_error("generating a key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    params.subject_alt_names = names.iter().map(|n| san(n)).collect::<Result<_, _>>()?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    valid(&mut params);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(cert_error("signing a certificate"))?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Loads the client certificate of a control-plane component (`<file>.crt` under `dir`, user
/// `user`, no groups), issuing it with the cluster CA on first use and when it is due for
/// renewal ([`RENEW_WITHIN`]). Components that talk to the
/// API server (the scheduler as `system:kube-scheduler`, ...) authenticate with these and are
/// authorized by upstream's bootstrap roles for those users.
pub fn component_client(
    dir: &Path,
    file: &str,
    user: &str,
    group: Option<&str>,
) -> Result<CertAndKey, PkiError> {
    let path = |ext: &str| dir.join(format!("{file}.{ext}"));
    if let Some(kept) = kept(dir, file)? {
        return Ok(kept);
    }
    let cert = issue(
        &cluster_issuer(dir)?,
        name(user, group),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    write_file(&path("key"), &cert.key_pem, 0o600)?;
    write_file(&path("crt"), &cert.cert_pem, 0o644)?;
    Ok(cert)
}

/// Issues a kubelet serving certificate for node `node` valid for `names` (its addresses and
/// host names), signed by the kubelet serving CA under `dir` ([`kubelet_ca`]), as upstream's
/// kubelet serving certificates are named (`system:node:<node>` in `system:nodes`), lasting
/// `lifetime` as the CSR signer counts it ([`node_validity`]). It is issued afresh each time: a
/// node's addresses may change between starts; the kubelet renews it through CSRs.
pub fn kubelet_serving(
    dir: &Path,
    node: &str,
    names: &[String],
    lifetime: Duration,
) -> Result<CertAndKey, PkiError> {
    let (ca_cert_pem, ca_key, _) = own_ca(dir, KUBELET_CA, "capstan-kubelet-serving-ca")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key)
        .map_err(cert_error("reading kubelet-serving-ca.crt"))?;
    issue_for(
        &issuer,
        name(&format!("system:node:{node}"), Some("system:nodes")),
        names,
        ExtendedKeyUsagePurpose::ServerAuth,
        |params| node_validity(params, time::OffsetDateTime::now_utc(), lifetime),
    )
}

/// Issues a client certificate for node `node` (`system:node:<node>` in `system:nodes`),
/// signed by the cluster CA under `dir`, lasting `lifetime` as the CSR signer counts it
/// ([`node_validity`]): a joining agent's, or the server's own node's, which the kubelet then
/// renews through CSRs.
pub fn node_client(dir: &Path, node: &str, lifetime: Duration) -> Result<CertAndKey, PkiError> {
    issue_for(
        &cluster_issuer(dir)?,
        name(&format!("system:node:{node}"), Some("system:nodes")),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        |params| node_validity(params, time::OffsetDateTime::now_utc(), lifetime),
    )
}

/// A node certificate's validity as the CSR signer (`csrsigning`) sets it, so that the first
/// certificates of a node and those it renews through CSRs age alike: it starts five minutes
/// before `now`, and lasts `lifetime` (`--cluster-signing-duration`) from its start, or from
/// `now` when shorter than eight hours.
pub fn node_validity(
    params: &mut CertificateParams,
    now: time::OffsetDateTime,
    lifetime: Duration,
) {
    params.not_before = now - NODE_BACKDATE;
    params.not_after = if lifetime < NODE_SHORT {
        now + lifetime
    } else {
        params.not_before + lifetime
    };
}

/// The cluster CA under `dir`, ready to sign.
fn cluster_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, PkiError> {
    let (Some(ca_cert_pem), Some(ca_key)) =
        (read(&dir.join("ca.crt"))?, read(&dir.join("ca.key"))?)
    else {
        return Err(PkiError::Io {
            path: dir.join("ca.crt"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "the cluster CA is missing"),
        });
    };
    let ca_key = KeyPair::from_pem(&ca_key).map_err(cert_error("reading ca.key"))?;
    Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).map_err(cert_error("reading ca.crt"))
}

/// A CA of its own under `dir` (`<file>.crt`, `<file>.key`, common name `common_name`),
/// created on first use: its certificate, its key and whether it was just created.
fn own_ca(dir: &Path, file: &str, common_name: &str) -> Result<(String, KeyPair, bool), PkiError> {
    let (cert_path, key_path) = (
        dir.join(format!("{file}.crt")),
        dir.join(format!("{file}.key")),
    );
    if let (Some(cert), Some(key)) = (read(&cert_path)?, read(&key_path)?) {
        let key = KeyPair::from_pem(&key).map_err(|source| PkiError::Certificate {
            what: format!("reading {file}.key"),
            source,
        })?;
        return Ok((cert, key, false));
    }
    let key = KeyPair::generate().map_err(cert_error("generating a CA key"))?;
    let mut params = ca_params();
    params.distinguished_name = name(common_name, None);
    let cert = params
        .self_signed(&key)
        .map_err(cert_error("self-signing a CA"))?;
    write_file(&key_path, &key.serialize_pem(), 0o600)?;
    write_file(&cert_path, &cert.pem(), 0o644)?;
    Ok((cert.pem(), key, true))
}

/// The file stem of the CA that signs kubelet serving certificates.
pub const KUBELET_CA: &str = "kubelet-serving-ca";

/// The certificate of the CA that signs kubelet serving certificates (`<dir>/kubelet-serving-ca.crt`,
/// created on first use): what the API server checks kubelets against. It is not the cluster
/// CA, so that no kubelet certificate is ever trusted by a client of the API server.
pub fn kubelet_ca(dir: &Path) -> Result<String, PkiError> {
    own_ca(dir, KUBELET_CA, "capstan-kubelet-serving-ca").map(|(cert, _, _)| cert)
}

/// The front proxy's credentials: what the API server shows extension API servers when it
/// passes them a request, as upstream's `--proxy-client-cert-file` signed by the
/// `--requestheader-client-ca-file` CA (a CA of its own, so that the client certificate is
/// no user of this server).
#[derive(Clone, Debug)]
pub struct FrontProxy {
    /// The front proxy CA's certificate, which extension API servers trust for it.
    pub ca_cert_pem: String,
    /// The client certificate (`front-proxy-client`).
    pub client: CertAndKey,
}

/// The file stem of the front proxy's CA (`--requestheader-client-ca-file`).
pub const FRONT_PROXY_CA: &str = "front-proxy-ca";

/// Checks that `cert_pem` is a CA certificate and `key_pem` its key (the key's public half is
/// the certificate's).
pub fn check_ca_pair(cert_pem: &str, key_pem: &str) -> Result<(), String> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("its key: {e}"))?;
    let der = rustls_pki_der(cert_pem).ok_or("its certificate is not PEM")?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| format!("its certificate: {e}"))?;
    if !cert.is_ca() {
        return Err("its certificate is not a CA's".to_owned());
    }
    if cert
        .tbs_certificate
        .subject_pki
        .subject_public_key
        .data
        .as_ref()
        != key.public_key_raw()
    {
        return Err("its key is not its certificate's".to_owned());
    }
    Ok(())
}

/// The name the front proxy's client certificate has (`requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Loads the front proxy's CA and client certificate under `dir` (`front-proxy-ca.*`,
/// `front-proxy-client.*`), creating them on first use.
pub fn front_proxy(dir: &Path) -> Result<FrontProxy, PkiError> {
    let path = |file: &str| dir.join(file);
    let (ca_cert_pem, ca_key, created) = own_ca(dir, FRONT_PROXY_CA, "capstan-front-proxy-ca")?;
    if created {
        let _ = fs::remove_file(path("front-proxy-client.crt"));
    }
    if let Some(client) = kept(dir, "front-proxy-client")? {
        return Ok(FrontProxy {
            ca_cert_pem,
            client,
        });
    }
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key)
        .map_err(cert_error("reading front-proxy-ca.crt"))?;
    let client = issue(
        &issuer,
        name(FRONT_PROXY_CLIENT, None),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    write_file(&path("front-proxy-client.key"), &client.key_pem, 0o600)?;
    write_file(&path("front-proxy-client.crt"), &client.cert_pem, 0o644)?;
    Ok(FrontProxy {
        ca_cert_pem,
        client,
    })
}

/// The file under the certificates' directory holding the key that signs service account
/// tokens.
pub const SERVICE_ACCOUNT_KEY: &str = "service-account.key";

/// The PEM (PKCS#8) of the key that signs service account tokens, `<dir>/service-account.key`:
/// an ECDSA P-256 key generated on first start (mode 0600) and kept, so tokens issued before a
/// restart stay valid after it, as upstream's `--service-account-key-file`.
pub fn service_account_key(dir: &Path) -> Result<String, PkiError> {
    let path = dir.join(SERVICE_ACCOUNT_KEY);
    if let Some(pem) = read(&path)? {
        KeyPair::from_pem(&pem).map_err(cert_error("reading service-account.key"))?;
        return Ok(pem);
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(cert_error("generating the service account key"))?;
    let pem = key.serialize_pem();
    write_file(&path, &pem, 0o600)?;
    Ok(pem)
}

/// Loads the certificates under `dir`, creating what is missing, and issues a serving
/// certificate for `names`.
pub fn load_or_create(dir: &Path, names: &[String]) -> Result<Pki, PkiError> {
    let path = |file: &str| dir.join(file);
    let (ca_cert_pem, ca_key) = match (read(&path("ca.crt"))?, read(&path("ca.key"))?) {
        (Some(cert), Some(key)) => (
            cert,
            KeyPair::from_pem(&key).map_err(cert_error("reading ca.key"))?,
        ),
        _ => {
            let key = KeyPair::generate().map_err(cert_error("generating the CA key"))?;
            let cert = ca_params()
                .self_signed(&key)
                .map_err(cert_error("self-signing the CA"))?;
            write_file(&path("ca.key"), &key.serialize_pem(), 0o600)?;
            write_file(&path("ca.crt"), &cert.pem(), 0o644)?;
            // A new CA invalidates every certificate signed by an old one.
            for stale in [
                "admin.crt",
                "admin.key",
                "scheduler.crt",
                "scheduler.key",
                "kubelet-client.crt",
                "kubelet-client.key",
            ] {
                let _ = fs::remove_file(path(stale));
            }
            (cert.pem(), key)
        }
    };
    let issuer =
        Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).map_err(cert_error("reading ca.crt"))?;

    let serving = issue(
        &issuer,
        name("capstan-apiserver", None),
        names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    write_file(&path("serving.key"), &serving.key_pem, 0o600)?;
    write_file(&path("serving.crt"), &serving.cert_pem, 0o644)?;

    let admin = match kept(dir, "admin")? {
        Some(admin) => admin,
        None => {
            let admin = issue(
                &issuer,
                name("system:admin", Some("system:masters")),
                &[],
                ExtendedKeyUsagePurpose::ClientAuth,
            )?;
            write_file(&path("admin.key"), &admin.key_pem, 0o600)?;
            write_file(&path("admin.crt"), &admin.cert_pem, 0o644)?;
            admin
        }
    };
    Ok(Pki {
        ca_cert_pem,
        serving,
        admin,
    })
}

/// One certificate under the certificates' directory, as `capstan certificate check` lists it.
#[derive(Clone, Debug)]
pub struct CertificateFile {
    /// The file's stem (`admin` for `admin.crt`): the name `--service` takes.
    pub name: String,
    /// The subject (`CN=system:admin, O=system:masters`).
    pub subject: String,
    /// The start of its validity.
    pub not_before: time::OffsetDateTime,
    /// The end of its validity.
    pub not_after: time::OffsetDateTime,
    /// Whether it is a CA (kept by `capstan certificate rotate`).
    pub is_ca: bool,
}

/// Every certificate (`*.crt`) directly under `dir`, by name; files that do not parse are left
/// out.
pub fn inventory(dir: &Path) -> Result<Vec<CertificateFile>, PkiError> {
    let io = |source| PkiError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let Some(stem) = path
            .extension()
            .is_some_and(|e| e == "crt")
            .then(|| path.file_stem())
            .flatten()
            .and_then(|s| s.to_str())
        else {
            continue;
        };
        let Some(pem) = read(&path)? else { continue };
        let Some(der) = rustls_pki_der(&pem) else {
            continue;
        };
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
            continue;
        };
        found.push(CertificateFile {
            name: stem.to_owned(),
            subject: cert.subject().to_string(),
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            is_ca: cert.is_ca(),
        });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// `capstan certificate rotate`: moves the leaf certificates under `dir` (every one that is
/// not a CA, or only those named in `only`) with their keys into `dir/expired-<stamp>/`, so
/// that the next start issues new ones from the same CAs, as `k3s certificate rotate`. CAs and
/// the service account key are kept. Returns the backup directory and the names moved.
pub fn rotate(
    dir: &Path,
    only: &[String],
    stamp: &str,
) -> Result<(PathBuf, Vec<String>), PkiError> {
    let leaves: Vec<String> = inventory(dir)?
        .into_iter()
        .filter(|c| !c.is_ca)
        .map(|c| c.name)
        .collect();
    if let Some(unknown) = only.iter().find(|n| !leaves.contains(n)) {
        return Err(PkiError::Invalid(format!(
            "{unknown:?} is not a leaf certificate under {}; known: {}",
            dir.display(),
            leaves.join(", ")
        )));
    }
    let chosen: Vec<String> = leaves
        .into_iter()
        .filter(|n| only.is_empty() || only.contains(n))
        .collect();
    let backup = dir.join(format!("expired-{stamp}"));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| PkiError::Io { path, source }
    };
    fs::create_dir_all(&backup).map_err(io(&backup))?;
    for name in &chosen {
        for ext in ["crt", "key"] {
            let file = format!("{name}.{ext}");
            let from = dir.join(&file);
            if from.exists() {
                fs::rename(&from, backup.join(&file)).map_err(io(&from))?;
            }
        }
    }
    Ok((backup, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_names_cover_local_and_cluster_names_without_duplicates() {
        let names = serving_names(Some("node1"), &["10.0.0.5".into(), "localhost".into()]);
        for expected in [
            "localhost",
            "127.0.0.1",
            "kubernetes.default.svc",
            "node1",
            "10.0.0.5",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        assert_eq!(names.iter().filter(|n| *n == "localhost").count(), 1);
    }

    #[test]
    fn restarts_keep_the_ca_and_the_admin_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), &serving_names(None, &[])).unwrap();
        let second =
            load_or_create(dir.path(), &serving_names(None, &["extra.example".into()])).unwrap();
        assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
        assert_eq!(first.admin.cert_pem, second.admin.cert_pem);
        assert_ne!(first.serving.cert_pem, second.serving.cert_pem);
        let mode = |f: &str| {
            use std::os::unix::fs::PermissionsExt;
            fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("ca.key"), 0o600);
        assert_eq!(mode("admin.key"), 0o600);
    }

    #[test]
    fn the_service_account_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = service_account_key(dir.path()).unwrap();
        assert!(first.starts_with("-----BEGIN PRIVATE KEY-----"), "{first}");
        assert_eq!(service_account_key(dir.path()).unwrap(), first);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.path().join(SERVICE_ACCOUNT_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        fs::write(dir.path().join(SERVICE_ACCOUNT_KEY), "not a key").unwrap();
        assert!(service_account_key(dir.path()).is_err());
    }

    #[test]
    fn kept_leaves_near_their_end_are_issued_again() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path(), &serving_names(None, &[])).unwrap();
        let first =
            component_client(dir.path(), "scheduler", "system:kube-scheduler", None).unwrap();
        assert_eq!(
            component_client(dir.path(), "scheduler", "system:kube-scheduler", None)
                .unwrap()
                .cert_pem,
            first.cert_pem
        );
        let now = time::OffsetDateTime::now_utc();
        assert!(!needs_renewal(&first.cert_pem, now, RENEW_WITHIN));
        assert!(needs_renewal(
            &first.cert_pem,
            now + Duration::from_secs(300 * 86400),
            RENEW_WITHIN
        ));
        assert!(needs_renewal("not a certificate", now, RENEW_WITHIN));
        // A certificate ending within 90 days is replaced at the next load.
        let issuer = cluster_issuer(dir.path()).unwrap();
        let short = issue_for(
            &issuer,
            name("system:kube-scheduler", None),
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            |p| validity(p, Duration::from_secs(30 * 86400)),
        )
        .unwrap();
        fs::write(dir.path().join("scheduler.crt"), &short.cert_pem).unwrap();
        fs::write(dir.path().join("scheduler.key"), &short.key_pem).unwrap();
        let renewed =
            component_client(dir.path(), "scheduler", "system:kube-scheduler", None).unwrap();
        assert_ne!(renewed.cert_pem, short.cert_pem);
        assert!(!needs_renewal(&renewed.cert_pem, now, RENEW_WITHIN));
    }

    #[test]
    fn node_certificates_age_as_the_signer_issues_them() {
        let mut params = CertificateParams::default();
        let now = time::OffsetDateTime::now_utc();
        node_validity(&mut params, now, Duration::from_secs(100));
        assert_eq!(params.not_before, now - NODE_BACKDATE);
        assert_eq!(params.not_after, now + Duration::from_secs(100));
        node_validity(&mut params, now, LEAF_VALIDITY);
        assert_eq!(params.not_after, now - NODE_BACKDATE + LEAF_VALIDITY);
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path(), &serving_names(None, &[])).unwrap();
        let client = node_client(dir.path(), "n1", Duration::from_secs(120)).unwrap();
        let end = not_after(&client.cert_pem).unwrap();
        assert!((end - now).whole_seconds() <= 121, "{end}");
    }

    #[test]
    fn rotation_moves_leaves_aside_and_keeps_the_cas() {
        let dir = tempfile::tempdir().unwrap();
        let pki = load_or_create(dir.path(), &serving_names(None, &[])).unwrap();
        front_proxy(dir.path()).unwrap();
        component_client(dir.path(), "scheduler", "system:kube-scheduler", None).unwrap();
        let listed = inventory(dir.path()).unwrap();
        let names: Vec<_> = listed.iter().map(|c| (c.name.as_str(), c.is_ca)).collect();
        assert_eq!(
            names,
            [
                ("admin", false),
                ("ca", true),
                ("front-proxy-ca", true),
                ("front-proxy-client", false),
                ("scheduler", false),
                ("serving", false)
            ]
        );
        assert!(rotate(dir.path(), &["ca".into()], "1").is_err());
        let (backup, moved) = rotate(dir.path(), &["admin".into()], "1").unwrap();
        assert_eq!(moved, ["admin"]);
        assert!(backup.join("admin.crt").exists() && backup.join("admin.key").exists());
        let (_, moved) = rotate(dir.path(), &[], "2").unwrap();
        assert_eq!(moved, ["front-proxy-client", "scheduler", "serving"]);
        assert!(dir.path().join("ca.key").exists());
        // The next start issues new leaves from the same CA.
        let again = load_or_create(dir.path(), &serving_names(None, &[])).unwrap();
        assert_eq!(again.ca_cert_pem, pki.ca_cert_pem);
        assert_ne!(again.admin.cert_pem, pki.admin.cert_pem);
    }
}
