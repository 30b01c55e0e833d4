//! The TLS configuration of Capstan's HTTPS servers, the API server and the kubelet API: one
//! serving certificate, and client certificates from the cluster CA, asked for but optional
//! (a connection without one is still served; the server then authenticates the request some
//! other way or refuses it). rustls with the `ring` provider and its safe default protocol
//! versions, as everywhere in the workspace.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

/// Why a TLS server configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM document could not be read.
    #[error("{what}: {source}")]
    Pem {
        /// Which one (`CA certificate`, `serving certificate`, `serving key`).
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the certificates.
    #[error("{what}: {source}")]
    Rustls {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rustls::Error,
    },
    /// The client certificate verifier could not be built (no usable CA certificate).
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// What a server presents and whom it trusts, all PEM.
#[derive(Clone, Copy)]
pub struct ServerTls<'a> {
    /// The serving certificate (and any intermediates after it).
    pub cert_pem: &'a str,
    /// Its private key.
    pub key_pem: &'a str,
    /// The CA bundle client certificates are checked against.
    pub client_ca_pem: &'a str,
}

impl std::fmt::Debug for ServerTls<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// Which TLS versions and TLS 1.2 cipher suites a server accepts, as upstream's
/// `--tls-min-version` and `--tls-cipher-suites` set them. TLS 1.0 and 1.1 are never offered
/// (rustls has neither), and TLS 1.3's suites are not configurable (as in Go).
#[derive(Clone, Debug, Default)]
pub struct TlsPolicy {
    /// TLS 1.3 only (`VersionTLS13`); otherwise TLS 1.2 and 1.3.
    pub tls13_only: bool,
    /// The TLS 1.2 suites offered; empty: every suite rustls offers (AEAD with ECDHE only).
    pub tls12_suites: Vec<rustls::SupportedCipherSuite>,
}

impl TlsPolicy {
    /// The policy of `--tls-min-version` (`VersionTLS12` or `VersionTLS13`; none: TLS 1.2)
    /// and `--tls-cipher-suites` (upstream's, that is Go's, names), or why they are unusable.
    pub fn parse(min_version: Option<&str>, cipher_suites: &[String]) -> Result<TlsPolicy, String> {
        let tls13_only = match min_version.unwrap_or("VersionTLS12") {
            "VersionTLS12" => false,
            "VersionTLS13" => true,
            "VersionTLS10" | "VersionTLS11" => {
                return Err(format!(
                    "--tls-min-version {}: TLS 1.0 and 1.1 are insecure and not served; use \
                     VersionTLS12 or VersionTLS13",
                    min_version.unwrap_or_default()
                ));
            }
            other => {
                return Err(format!(
                    "--tls-min-version {other:?}: unknown version, allowed values: VersionTLS12, \
                     VersionTLS13"
                ));
            }
        };
        if tls13_only && !cipher_suites.is_empty() {
            return Err(
                "cipher suites may not be specified when --tls-min-version is 'VersionTLS13'"
                    .to_owned(),
            );
        }
        let offered = rustls::crypto::ring::default_provider().cipher_suites;
        let mut tls12_suites = Vec::new();
        for name in cipher_suites
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
        {
            // TLS 1.3's suites are not configurable (as in Go): named, they change nothing.
            if matches!(
                name,
                "TLS_AES_128_GCM_SHA256"
                    | "TLS_AES_256_GCM_SHA384"
                    | "TLS_CHACHA20_POLY1305_SHA256"
            ) {
                continue;
            }
            // Go names the TLS 1.2 ChaCha20 suites without their hash.
            let full = if name.ends_with("_CHACHA20_POLY1305") {
                format!("{name}_SHA256")
            } else {
                name.to_owned()
            };
            match offered
                .iter()
                .find(|s| s.tls13().is_none() && format!("{:?}", s.suite()) == full)
            {
                Some(suite) => {
                    if !tls12_suites.contains(suite) {
                        tls12_suites.push(*suite);
                    }
                }
                None if name.starts_with("TLS_") => {
                    return Err(format!(
                        "--tls-cipher-suites: {name} is not served (only AEAD suites with ECDHE \
                         key exchange are); allowed: {}",
                        offered
                            .iter()
                            .filter(|s| s.tls13().is_none())
                            .map(|s| format!("{:?}", s.suite()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                None => {
                    return Err(format!(
                        "--tls-cipher-suites: unknown cipher suite {name:?}"
                    ));
                }
            }
        }
        Ok(TlsPolicy {
            tls13_only,
            tls12_suites,
        })
    }

    /// The crypto provider and protocol versions of this policy.
    fn provider(
        &self,
    ) -> (
        rustls::crypto::CryptoProvider,
        Vec<&'static rustls::SupportedProtocolVersion>,
    ) {
        let mut provider = rustls::crypto::ring::default_provider();
        if !self.tls12_suites.is_empty() {
            provider
                .cipher_suites
                .retain(|s| s.tls13().is_some() || self.tls12_suites.contains(s));
        }
        let versions = if self.tls13_only {
            vec![&rustls::version::TLS13]
        } else {
            vec![&rustls::version::TLS12, &rustls::version::TLS13]
        };
        (provider, versions)
    }
}

impl ServerTls<'_> {
    /// The server configuration, offering the application protocols `alpn` in order of
    /// preference (the API server: `h2` and `http/1.1`; the kubelet API: `http/1.1`).
    pub fn config(&self, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, TlsError> {
        self.config_with(alpn, &TlsPolicy::default())
    }

    /// [`ServerTls::config`] with the versions and suites of `policy`.
    pub fn config_with(
        &self,
        alpn: &[&[u8]],
        policy: &TlsPolicy,
    ) -> Result<rustls::ServerConfig, TlsError> {
        let cert = LiveCert::new(self.cert_pem, self.key_pem)?;
        server_config(self.client_ca_pem, alpn, policy, Arc::new(cert))
    }
}

/// A server configuration presenting whatever `cert` holds at each handshake (a certificate
/// replaced or re-read from its files while serving), trusting client certificates from
/// `client_ca_pem`, with the versions and suites of `policy` and the protocols `alpn`.
pub fn server_config(
    client_ca_pem: &str,
    alpn: &[&[u8]],
    policy: &TlsPolicy,
    cert: Arc<LiveCert>,
) -> Result<rustls::ServerConfig, TlsError> {
    let (provider, versions) = policy.provider();
    let provider = Arc::new(provider);
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        let ca = ca.map_err(|source| TlsError::Pem {
            what: "CA certificate",
            source,
        })?;
        roots.add(ca).map_err(|source| TlsError::Rustls {
            what: "CA certificate",
            source,
        })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|source| TlsError::Rustls {
            what: "protocol versions",
            source,
        })?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A certificate with its key, PEM, ready for rustls; refused when the key is not the
/// certificate's.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what: "serving certificate",
            source,
        })?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|source| TlsError::Pem {
            what: "serving key",
            source,
        })?;
    let serving = |source| TlsError::Rustls {
        what: "serving certificate",
        source,
    };
    if chain.is_empty() {
        return Err(serving(rustls::Error::NoCertificatesPresented));
    }
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(serving)?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(serving)?;
    Ok(certified)
}

/// What a file looked like when last read: its modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The files a [`LiveCert`] follows, and when and how they were last looked at.
struct Files {
    cert: PathBuf,
    key: PathBuf,
    seen: Mutex<(Instant, Stamp, Stamp)>,
}

/// How often a [`LiveCert`] looks at its files (at a handshake, never more often).
const RECHECK: Duration = Duration::from_secs(1);

/// A certificate and key that can change while a server or client uses them: replaced by
/// [`LiveCert::set`] (the kubelet's rotated certificates), or re-read from the files it was
/// loaded from when they change ([`LiveCert::from_files`], looked at no more than once a second,
/// at a handshake). New connections get the current pair; established ones keep theirs. A
/// pair that does not load (a half-written rotation: the key replaced, the certificate not
/// yet) is ignored and the previous one kept until a later look finds a pair that loads.
pub struct LiveCert {
    current: RwLock<Arc<CertifiedKey>>,
    files: Option<Files>,
}

impl std::fmt::Debug for LiveCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCert").finish_non_exhaustive()
    }
}

impl LiveCert {
    /// A pair held in memory, replaced only by [`LiveCert::set`].
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<LiveCert, TlsError> {
        Ok(LiveCert {
            current: RwLock::new(Arc::new(certified_key(cert_pem, key_pem)?)),
            files: None,
        })
    }

    /// The pair in the PEM files `cert` and `key`, re-read when either changes.
    pub fn from_files(cert: &Path, key: &Path) -> Result<LiveCert, TlsError> {
        let stamps = (stamp(cert), stamp(key));
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        let live = LiveCert::new(&read(cert), &read(key))?;
        Ok(LiveCert {
            files: Some(Files {
                cert: cert.to_owned(),
                key: key.to_owned(),
                seen: Mutex::new((Instant::now(), stamps.0, stamps.1)),
            }),
            ..live
        })
    }

    /// Presents `cert_pem` with `key_pem` from now on.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let certified = Arc::new(certified_key(cert_pem, key_pem)?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = certified;
        Ok(())
    }

    /// The pair presented now (re-read first if the files changed).
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.refresh();
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the files if a second has passed since they were last looked at and they
    /// changed.
    fn refresh(&self) {
        let Some(files) = &self.files else { return };
        let mut seen = files.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.0.elapsed() < RECHECK {
            return;
        }
        seen.0 = Instant::now();
        let stamps = (stamp(&files.cert), stamp(&files.key));
        if (stamps.0, stamps.1) == (seen.1, seen.2) {
            return;
        }
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        match self.set(&read(&files.cert), &read(&files.key)) {
            Ok(()) => {
                (seen.1, seen.2) = stamps;
                tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(cert = %files.cert.display(), error = %e, "the changed certificate does not load; keeping the previous one");
            }
        }
    }
}

impl ResolvesServerCert for LiveCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for LiveCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use rustls::pki_types::ServerName;

    use super::*;

    /// A CA, a serving certificate for `localhost` and a client certificate, PEM.
    struct Pki {
        ca: String,
        serving: (String, String),
        client: (String, String),
    }

    fn pki() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::from_ca_cert_pem(&ca, ca_key).unwrap();
        let leaf = |names: Vec<String>, usage| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        Pki {
            serving: leaf(
                vec!["localhost".into()],
                ExtendedKeyUsagePurpose::ServerAuth,
            ),
            client: leaf(vec![], ExtendedKeyUsagePurpose::ClientAuth),
            ca,
        }
    }

    /// Handshakes with a server of `server` as a client that trusts `ca` and presents `client`;
    /// returns the protocol agreed and the certificates the server saw.
    async fn handshake(
        server: rustls::ServerConfig,
        ca: &str,
        client: Option<&(String, String)>,
    ) -> (Option<Vec<u8>>, usize) {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let mut config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .unwrap(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let (near, far) = tokio::io::duplex(64 * 1024);
        let accept = tokio_rustls::TlsAcceptor::from(Arc::new(server)).accept(far);
        let connect = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), near);
        let (accepted, connected) = tokio::join!(accept, connect);
        connected.unwrap();
        let accepted = accepted.unwrap();
        let session = accepted.get_ref().1;
        (
            session.alpn_protocol().map(<[u8]>::to_vec),
            session.peer_certificates().map_or(0, <[_]>::len),
        )
    }

    #[tokio::test]
    async fn client_certificates_are_verified_but_optional() {
        let pki = pki();
        let tls = ServerTls {
            cert_pem: &pki.serving.0,
            key_pem: &pki.serving.1,
            client_ca_pem: &pki.ca,
        };
        let config = tls.config(&[b"h2", b"http/1.1"]).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let (alpn, seen) = handshake(config, &pki.ca, Some(&pki.client)).await;
        assert_eq!((alpn.as_deref(), seen), (Some(&b"http/1.1"[..]), 1));
        let config = tls.config(&[b"http/1.1"]).unwrap();
        assert_eq!(handshake(config, &pki.ca, None).await.1, 0);
    }

    /// Whether a client offering only `version` completes a handshake with `server`.
    async fn handshakes_with(
        server: rustls::ServerConfig,
        ca: &str,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let (near, far) = tokio::io::duplex(64 * 1024);
        let accept = tokio_rustls::TlsAcceptor::from(Arc::new(server)).accept(far);
        let connect = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), near);
        let (accepted, connected) = tokio::join!(accept, connect);
        accepted.is_ok() && connected.is_ok()
    }

    #[tokio::test]
    async fn the_minimum_version_and_suites_follow_upstreams_flags() {
        let pki = pki();
        let tls = ServerTls {
            cert_pem: &pki.serving.0,
            key_pem: &pki.serving.1,
            client_ca_pem: &pki.ca,
        };
        let default = TlsPolicy::parse(None, &[]).unwrap();
        let config = tls.config_with(&[], &default).unwrap();
        assert!(handshakes_with(config, &pki.ca, &rustls::version::TLS12).await);
        let tls13 = TlsPolicy::parse(Some("VersionTLS13"), &[]).unwrap();
        let config = tls.config_with(&[], &tls13).unwrap();
        assert!(!handshakes_with(config, &pki.ca, &rustls::version::TLS12).await);
        let config = tls.config_with(&[], &tls13).unwrap();
        assert!(handshakes_with(config, &pki.ca, &rustls::version::TLS13).await);
        // The test CA's keys are ECDSA: a TLS 1.2 server offering RSA suites only cannot agree.
        let rsa_only =
            TlsPolicy::parse(None, &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned()]).unwrap();
        let config = tls.config_with(&[], &rsa_only).unwrap();
        assert!(!handshakes_with(config, &pki.ca, &rustls::version::TLS12).await);
        let ecdsa = TlsPolicy::parse(
            None,
            &[
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305".to_owned(),
                "TLS_AES_128_GCM_SHA256".to_owned(),
            ],
        )
        .unwrap();
        assert_eq!(ecdsa.tls12_suites.len(), 1);
        let config = tls.config_with(&[], &ecdsa).unwrap();
        assert!(handshakes_with(config, &pki.ca, &rustls::version::TLS12).await);
        for (min, suites, error) in [
            (Some("VersionTLS11"), vec![], "TLS 1.0 and 1.1 are insecure"),
            (Some("TLS12"), vec![], "unknown version"),
            (
                Some("VersionTLS13"),
                vec!["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
                "cipher suites may not be specified when --tls-min-version is 'VersionTLS13'",
            ),
            (None, vec!["TLS_RSA_WITH_AES_128_CBC_SHA"], "is not served"),
            (None, vec!["AES"], "unknown cipher suite"),
        ] {
            let suites: Vec<String> = suites.into_iter().map(str::to_owned).collect();
            let got = TlsPolicy::parse(min, &suites).unwrap_err();
            assert!(got.contains(error), "{got}");
        }
    }

    #[test]
    fn a_live_certificate_follows_its_files_and_keeps_the_last_good_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (
            dir.path().join("serving.crt"),
            dir.path().join("serving.key"),
        );
        let (first, second) = (pki(), pki());
        std::fs::write(&cert, &first.serving.0).unwrap();
        std::fs::write(&key, &first.serving.1).unwrap();
        let live = LiveCert::from_files(&cert, &key).unwrap();
        let der = |pem: &str| {
            CertificateDer::pem_slice_iter(pem.as_bytes())
                .next()
                .unwrap()
                .unwrap()
                .to_vec()
        };
        assert_eq!(live.current().cert[0].to_vec(), der(&first.serving.0));
        // Half a rotation: the key replaced, the certificate not yet.
        std::fs::write(&key, &second.serving.1).unwrap();
        std::thread::sleep(RECHECK + Duration::from_millis(100));
        assert_eq!(live.current().cert[0].to_vec(), der(&first.serving.0));
        std::fs::write(&cert, &second.serving.0).unwrap();
        std::thread::sleep(RECHECK + Duration::from_millis(100));
        assert_eq!(live.current().cert[0].to_vec(), der(&second.serving.0));
        // A pair set in memory is presented at once; a mismatched one is refused.
        live.set(&first.serving.0, &first.serving.1).unwrap();
        assert_eq!(live.current().cert[0].to_vec(), der(&first.serving.0));
        assert!(live.set(&first.serving.0, &second.serving.1).is_err());
        assert_eq!(live.current().cert[0].to_vec(), der(&first.serving.0));
    }

    #[test]
    fn unusable_material_is_refused_with_what_it_was() {
        let pki = pki();
        let tls = ServerTls {
            cert_pem: &pki.serving.0,
            key_pem: &pki.serving.1,
            client_ca_pem: &pki.ca,
        };
        let error = |tls: ServerTls<'_>| tls.config(&[]).unwrap_err().to_string();
        assert!(
            error(ServerTls {
                client_ca_pem: "",
                ..tls
            })
            .starts_with("client verifier: ")
        );
        assert!(
            error(ServerTls {
                key_pem: "not a key",
                ..tls
            })
            .starts_with("serving key: ")
        );
        // Another certificate's key does not go with the serving certificate.
        assert!(
            error(ServerTls {
                key_pem: &pki.client.1,
                ..tls
            })
            .starts_with("serving certificate: ")
        );
    }
}

/// A client configuration that accepts any server certificate, for the two places where a
/// certificate cannot or need not be checked by the TLS layer: the API server's proxy towards
/// pods and Services (reached by address, as upstream's proxy transport skips verification)
/// and a joining agent fetching the CA bundle (whose hash it checks against the join token
/// before trusting anything). ALPN offers HTTP/1.1.
pub fn insecure_client_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts any server certificate (see [`insecure_client_config`]); signatures are still
/// checked, so the peer holds the key of the certificate it showed.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Where Debian and its kin keep the system's trusted CA certificates.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A client configuration that trusts the PEM certificates of `ca_bundle`, or the system's
/// trusted CAs when the bundle is empty (as upstream's webhook clients do with an empty
/// `caBundle`). ALPN offers HTTP/1.1.
pub fn client_config_trusting(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca_bundle)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The PEM certificates of `ca_bundle`, or the system's trusted CAs when it is empty.
fn roots(ca_bundle: &[u8]) -> Result<rustls::RootCertStore, String> {
    let system;
    let pem = if ca_bundle.is_empty() {
        system = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
        &system[..]
    } else {
        ca_bundle
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("unable to load root certificates: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("unable to load root certificates: {e}"))?;
    }
    if roots.is_empty() && !ca_bundle.is_empty() {
        return Err("unable to load root certificates: no certificates found".to_owned());
    }
    Ok(roots)
}

/// A client configuration that presents the PEM certificate `cert_pem` with its key `key_pem`
/// and trusts the PEM certificates of `ca_bundle` (the system's trusted CAs when it is empty),
/// or with `None` any server certificate: how the API server reaches extension API servers
/// (an APIService's `caBundle`, or its `insecureSkipTLSVerify`). ALPN offers HTTP/1.1.
pub fn client_config_presenting(
    ca_bundle: Option<&[u8]>,
    cert_pem: &str,
    key_pem: &str,
) -> Result<rustls::ClientConfig, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("client certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("client key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match ca_bundle {
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_client_auth_cert(chain, key),
        Some(bundle) => builder
            .with_root_certificates(roots(bundle)?)
            .with_client_auth_cert(chain, key),
    }
    .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
