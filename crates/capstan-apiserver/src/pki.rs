//! The server's certificates, under `<data-dir>/tls`.
//!
//! First start generates a cluster CA, a serving certificate and an admin client certificate
//! (`CN=system:admin`, `O=system:masters`, upstream's group with every permission). Later starts
//! reuse the CA and the admin certificate, so existing kubeconfigs keep working, and issue a new
//! serving certificate for the current names (`--tls-san` may have changed). Keys are written
//! with mode 0600.

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
    validity(&mut params, LEAF_VALIDITY);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(cert_error("signing a certificate"))?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Loads the client certificate of a control-plane component (`<file>.crt` under `dir`, user
/// `user`, no groups), issuing it with the cluster CA on first use. Components that talk to the
/// API server (the scheduler as `system:kube-scheduler`, ...) authenticate with these and are
/// authorized by upstream's bootstrap roles for those users.
pub fn component_client(
    dir: &Path,
    file: &str,
    user: &str,
    group: Option<&str>,
) -> Result<CertAndKey, PkiError> {
    let path = |ext: &str| dir.join(format!("{file}.{ext}"));
    if let (Some(cert_pem), Some(key_pem)) = (read(&path("crt"))?, read(&path("key"))?) {
        return Ok(CertAndKey { cert_pem, key_pem });
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
/// kubelet serving certificates are named (`system:node:<node>` in `system:nodes`). It is
/// issued afresh each time: a node's addresses may change between starts.
pub fn kubelet_serving(dir: &Path, node: &str, names: &[String]) -> Result<CertAndKey, PkiError> {
    let (ca_cert_pem, ca_key, _) = own_ca(dir, KUBELET_CA, "capstan-kubelet-serving-ca")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key)
        .map_err(cert_error("reading kubelet-serving-ca.crt"))?;
    issue(
        &issuer,
        name(&format!("system:node:{node}"), Some("system:nodes")),
        names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

/// Issues a client certificate for node `node` (`system:node:<node>` in `system:nodes`),
/// signed by the cluster CA under `dir`, for a joining agent.
pub fn node_client(dir: &Path, node: &str) -> Result<CertAndKey, PkiError> {
    issue(
        &cluster_issuer(dir)?,
        name(&format!("system:node:{node}"), Some("system:nodes")),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )
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
const KUBELET_CA: &str = "kubelet-serving-ca";

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

/// The name the front proxy's client certificate has (`requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Loads the front proxy's CA and client certificate under `dir` (`front-proxy-ca.*`,
/// `front-proxy-client.*`), creating them on first use.
pub fn front_proxy(dir: &Path) -> Result<FrontProxy, PkiError> {
    let path = |file: &str| dir.join(file);
    let (ca_cert_pem, ca_key, created) = own_ca(dir, "front-proxy-ca", "capstan-front-proxy-ca")?;
    if created {
        let _ = fs::remove_file(path("front-proxy-client.crt"));
    }
    if let (Some(cert_pem), Some(key_pem)) = (
        read(&path("front-proxy-client.crt"))?,
        read(&path("front-proxy-client.key"))?,
    ) {
        return Ok(FrontProxy {
            ca_cert_pem,
            client: CertAndKey { cert_pem, key_pem },
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

    let admin = match (read(&path("admin.crt"))?, read(&path("admin.key"))?) {
        (Some(cert_pem), Some(key_pem)) => CertAndKey { cert_pem, key_pem },
        _ => {
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
}
