//! The kubelet's certificate rotation, as upstream's certificate manager
//! (`k8s.io/client-go/util/certificate`) with `RotateKubeletClientCertificate` and
//! `--rotate-server-certificates`: for its client certificate (`system:node:<name>` in
//! `system:nodes`, signer `kubernetes.io/kube-apiserver-client-kubelet`) and its serving
//! certificate (the node's names and addresses, signer `kubernetes.io/kubelet-serving`), the
//! kubelet waits until a jittered point 70-90 % into the certificate's life, makes a new ECDSA
//! P-256 key, asks for a certificate with a CertificateSigningRequest, waits for it to be
//! approved and issued, writes the pair to its certificate directory and presents it from then
//! on, without a restart: new connections to the API server carry the new client certificate
//! (the API client's TLS asks a [`LiveCert`] at each handshake) and the kubelet API serves the
//! new serving certificate. A failed attempt is retried with upstream's back-off (2 s doubling
//! to 128 s).
//!
//! Pairs are kept as upstream's: `<cert-dir>/kubelet-client-<time>.pem` (certificate and key in
//! one file, mode 0600) and a `kubelet-client-current.pem` symlink swapped by rename, likewise
//! `kubelet-server-*`. At start the stored pair is used when it lasts longer than the one the
//! node was given (at join, or by the server for its own node).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use capstan_client::tls::LiveCert;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, PostParams};

/// Which certificate a [`Rotation`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client certificate the kubelet authenticates to the API server with.
    Client,
    /// The kubelet API's serving certificate.
    Serving,
}

impl Kind {
    /// The signer its requests name.
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Kind::Serving => "kubernetes.io/kubelet-serving",
        }
    }

    /// The usages its requests ask for (an ECDSA key: no key encipherment, as upstream's
    /// kubelet asks only for RSA keys).
    pub fn usages(self) -> [&'static str; 2] {
        match self {
            Kind::Client => ["digital signature", "client auth"],
            Kind::Serving => ["digital signature", "server auth"],
        }
    }

    /// The stem of its files in the certificate directory.
    fn stem(self) -> &'static str {
        match self {
            Kind::Client => "kubelet-client",
            Kind::Serving => "kubelet-server",
        }
    }
}

/// Why a certificate could not be renewed.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The key or request could not be made.
    #[error("cannot make the request: {0}")]
    Request(#[from] rcgen::Error),
    /// The API refused or failed.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The request was denied or failed.
    #[error("certificate signing request {name} was {how}: {message}")]
    Refused {
        /// The request.
        name: String,
        /// `denied` or `failed`.
        how: &'static str,
        /// The condition's message.
        message: String,
    },
    /// No certificate was issued in time.
    #[error("certificate signing request {0} was not issued within 15 minutes")]
    Timeout(String),
    /// The issued certificate does not go with the key.
    #[error("the issued certificate is unusable: {0}")]
    Unusable(#[from] capstan_client::tls::TlsError),
    /// The pair could not be stored.
    #[error("cannot store the certificate: {0}")]
    Io(#[from] std::io::Error),
}

/// The validity of the first certificate in `cert_pem`: its start and end.
pub fn validity(cert_pem: &str) -> Option<(SystemTime, SystemTime)> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).ok()?;
    let at = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        }
    };
    Some((
        at(cert.validity().not_before),
        at(cert.validity().not_after),
    ))
}

/// When a certificate valid from `not_before` to `not_after` is renewed: at `0.7 + 0.2 *
/// jitter` of its life (`jitter` in [0, 1)), upstream's `nextRotationDeadline` (70-90 %, so
/// that nodes started together do not all renew together).
pub fn deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or_default()
        .as_secs_f64();
    not_before + Duration::from_secs_f64(total * (0.7 + 0.2 * jitter.clamp(0.0, 1.0)))
}

/// A new key and the PEM request for `kind` of node `node` valid for `names` (serving only):
/// subject `CN=system:node:<node>, O=system:nodes`, as upstream's kubelet asks.
pub fn request(
    kind: Kind,
    node: &str,
    names: &[String],
) -> Result<(String, rcgen::KeyPair), rcgen::Error> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    if kind == Kind::Serving {
        for name in names {
            params.subject_alt_names.push(match name.parse() {
                Ok(ip) => rcgen::SanType::IpAddress(ip),
                Err(_) => rcgen::SanType::DnsName(name.clone().try_into()?),
            });
        }
    }
    let csr = params.serialize_request(&key)?;
    Ok((csr.pem()?, key))
}

/// The certificate and the key of a PEM file holding both.
pub fn split_pair(pem: &str) -> Option<(String, String)> {
    let (mut cert, mut key) = (String::new(), String::new());
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN ") {
        let block = &rest[start..];
        let label_end = block[11..].find("-----")? + 11;
        let label = &block[11..label_end];
        let end_marker = format!("-----END {label}-----");
        let end = block.find(&end_marker)? + end_marker.len();
        let target = if label.ends_with("PRIVATE KEY") {
            &mut key
        } else if label == "CERTIFICATE" {
            &mut cert
        } else {
            rest = &block[end..];
            continue;
        };
        target.push_str(&block[..end]);
        target.push('\n');
        rest = &block[end..];
    }
    (!cert.is_empty() && !key.is_empty()).then_some((cert, key))
}

/// Where a kind of certificate is kept: `<dir>/<stem>-current.pem`, a symlink to the newest
/// `<stem>-<unix time>.pem`.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    stem: &'static str,
}

impl Store {
    /// The store of `kind` under `dir`.
    pub fn new(dir: &Path, kind: Kind) -> Store {
        Store {
            dir: dir.to_owned(),
            stem: kind.stem(),
        }
    }

    /// The current file.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.stem))
    }

    /// The stored pair, if any.
    pub fn load(&self) -> Option<(String, String)> {
        split_pair(&std::fs::read_to_string(self.current_path()).ok()?)
    }

    /// Stores a pair: written whole to a new timestamped file (mode 0600), then the `current`
    /// symlink is pointed at it by renaming a new link over it; older files are removed.
    pub fn save(&self, cert_pem: &str, key_pem: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let file = format!(
            "{}-{}.{:09}.pem",
            self.stem,
            now.as_secs(),
            now.subsec_nanos()
        );
        capstan_client::credentials::write_file(
            &self.dir.join(&file),
            &format!(
                "{}{}",
                cert_pem.trim_end(),
                format_args!("\n{}\n", key_pem.trim_end())
            ),
            0o600,
        )?;
        let link = self.dir.join(format!("{}-current.pem.link", self.stem));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link)?;
        std::fs::rename(&link, self.current_path())?;
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&format!("{}-", self.stem))
                && name.ends_with(".pem")
                && !name.ends_with("-current.pem")
                && name != file.as_str()
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

/// What a [`Rotation`] does once it has a new pair (rewrite the node's kubeconfig).
type OnRotate = Box<dyn Fn(&str, &str) -> std::io::Result<()> + Send + Sync>;

/// One certificate kept current: its kind, the node, the names asked for, where it is stored
/// and what presents it.
pub struct Rotation {
    kind: Kind,
    node: String,
    names: Vec<String>,
    store: Store,
    live: Arc<LiveCert>,
    current: Mutex<String>,
    on_rotate: Option<OnRotate>,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation")
            .field("kind", &self.kind)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// The pair of `given` and `stored` to start with: the stored one when it is still valid at
/// `now` and ends later than the given one.
fn better<'a>(
    given: &'a (String, String),
    stored: Option<&'a (String, String)>,
    now: SystemTime,
) -> &'a (String, String) {
    let end = |pair: &(String, String)| validity(&pair.0).map(|(_, end)| end);
    match stored {
        Some(stored)
            if end(stored).is_some_and(|s| s > now && end(given).is_none_or(|g| s > g)) =>
        {
            stored
        }
        _ => given,
    }
}

impl Rotation {
    /// Keeps the `kind` certificate of node `node` (valid for `names` when serving) under
    /// `cert_dir`, starting from `given` (certificate, key) or the stored pair if better.
    pub fn start(
        kind: Kind,
        node: &str,
        names: &[String],
        cert_dir: &Path,
        given: (String, String),
    ) -> Result<Rotation, RotationError> {
        let store = Store::new(cert_dir, kind);
        let stored = store.load();
        let (cert, key) = better(&given, stored.as_ref(), SystemTime::now()).clone();
        if stored.as_ref().is_none_or(|s| s.0 != cert) {
            store.save(&cert, &key)?;
        }
        let live = Arc::new(LiveCert::new(&cert, &key)?);
        Ok(Rotation {
            kind,
            node: node.to_owned(),
            names: names.to_vec(),
            store,
            live,
            current: Mutex::new(cert),
            on_rotate: None,
        })
    }

    /// Runs `action` with each new pair after it is stored.
    pub fn on_rotate(
        mut self,
        action: impl Fn(&str, &str) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Rotation {
        self.on_rotate = Some(Box::new(action));
        self
    }

    /// What presents the current pair.
    pub fn live(&self) -> Arc<LiveCert> {
        self.live.clone()
    }

    /// The current certificate (PEM).
    pub fn current(&self) -> String {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Renews the certificate at each deadline, for ever.
    pub async fn run(self: Arc<Self>, client: kube::Client) {
        loop {
            let when = validity(&self.current())
                .map(|(start, end)| deadline(start, end, rand::random::<f64>()))
                .unwrap_or_else(SystemTime::now);
            let wait = when.duration_since(SystemTime::now()).unwrap_or_default();
            tracing::info!(kind = ?self.kind, wait = ?wait, "certificate rotation deadline");
            tokio::time::sleep(wait).await;
            let mut backoff = Duration::from_secs(2);
            loop {
                match self.rotate(&client).await {
                    Ok(name) => {
                        tracing::info!(kind = ?self.kind, csr = %name, "certificate rotated");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind = ?self.kind, error = %e, retry = ?backoff, "certificate rotation failed");
                        let jitter = backoff.mul_f64(0.1 * rand::random::<f64>());
                        tokio::time::sleep(backoff + jitter).await;
                        backoff = (backoff * 2).min(Duration::from_secs(128));
                    }
                }
            }
        }
    }

    /// One renewal: a new key, a request, the issued certificate stored and presented.
    /// Returns the request's name.
    pub async fn rotate(&self, client: &kube::Client) -> Result<String, RotationError> {
        let (request, key) = request(self.kind, &self.node, &self.names)?;
        let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
        let created = csrs
            .create(
                &PostParams::default(),
                &CertificateSigningRequest {
                    metadata: ObjectMeta {
                        generate_name: Some("csr-".to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: CertificateSigningRequestSpec {
                        request: ByteString(request.into_bytes()),
                        signer_name: self.kind.signer().to_owned(),
                        usages: Some(self.kind.usages().map(str::to_owned).to_vec()),
                        ..CertificateSigningRequestSpec::default()
                    },
                    status: None,
                },
            )
            .await?;
        let name = created.metadata.name.unwrap_or_default();
        let uid = created.metadata.uid;
        tracing::info!(kind = ?self.kind, csr = %name, "certificate signing request created");
        let give_up = tokio::time::Instant::now() + Duration::from_secs(15 * 60);
        let cert = loop {
            let csr = csrs.get(&name).await?;
            if csr.metadata.uid != uid {
                return Err(RotationError::Refused {
                    name,
                    how: "replaced",
                    message: "the request was deleted and another made with its name".into(),
                });
            }
            let status = csr.status.unwrap_or_default();
            for condition in status.conditions.unwrap_or_default() {
                let how = match condition.type_.as_str() {
                    "Denied" => "denied",
                    "Failed" => "failed",
                    _ => continue,
                };
                return Err(RotationError::Refused {
                    name,
                    how,
                    message: condition.message.unwrap_or_default(),
                });
            }
            if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
                break String::from_utf8_lossy(&cert.0).into_owned();
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(RotationError::Timeout(name));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let key_pem = key.serialize_pem();
        self.live.set(&cert, &key_pem)?;
        self.store.save(&cert, &key_pem)?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = cert.clone();
        if let Some(action) = &self.on_rotate {
            action(&cert, &key_pem)?;
        }
        Ok(name)
    }
}

/// An API client that presents what `cert` holds at each new connection, otherwise as
/// `config` says (server, CA, headers): the kubelet's client, whose certificate rotates.
pub fn client(config: &kube::Config, cert: Arc<LiveCert>) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    let mut tls = config.rustls_client_config()?;
    tls.client_auth_cert_resolver = cert;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(config.extra_headers_layer()?)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// A node's certificates kept current: the API client presenting its client certificate,
/// what its kubelet API serves, and the rotations to run ([`crate::Config::rotations`]).
pub struct NodeCertificates {
    /// The API client.
    pub client: kube::Client,
    /// The kubelet API's TLS.
    pub tls: crate::server::ServingTls,
    /// The client and serving rotations.
    pub rotations: Vec<Arc<Rotation>>,
}

impl std::fmt::Debug for NodeCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCertificates")
            .field("rotations", &self.rotations)
            .finish_non_exhaustive()
    }
}

/// What a node starts with.
#[derive(Clone, Debug)]
pub struct Given<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The kubelet's certificate directory (`<agent-dir>/pki`).
    pub cert_dir: &'a Path,
    /// The node's kubeconfig, rewritten with each new client certificate.
    pub kubeconfig: &'a Path,
    /// The API server's URL.
    pub server: &'a str,
    /// The cluster CA (PEM): the API server's, and the kubelet API's clients'.
    pub ca_pem: &'a str,
    /// The client certificate and key.
    pub client: (String, String),
    /// The serving certificate and key.
    pub serving: (String, String),
    /// The names renewed serving certificates are asked for (the node's name, host name and
    /// addresses).
    pub serving_names: &'a [String],
}

impl NodeCertificates {
    /// Sets up both rotations from `given` and the client from `config` (the node's
    /// kubeconfig's settings).
    pub fn start(
        given: Given<'_>,
        config: &kube::Config,
    ) -> Result<NodeCertificates, RotationError> {
        let (kubeconfig, server, ca) = (
            given.kubeconfig.to_owned(),
            given.server.to_owned(),
            given.ca_pem.to_owned(),
        );
        let client_rotation =
            Rotation::start(Kind::Client, given.node, &[], given.cert_dir, given.client)?
                .on_rotate(move |cert_pem, key_pem| {
                    capstan_client::credentials::Kubeconfig {
                        server: &server,
                        ca_pem: &ca,
                        cert_pem,
                        key_pem,
                    }
                    .write(&kubeconfig, 0o600)
                });
        let serving_rotation = Rotation::start(
            Kind::Serving,
            given.node,
            given.serving_names,
            given.cert_dir,
            given.serving,
        )?;
        // The kubeconfig holds the pair in use (the stored one may have been chosen).
        if let Some(action) = &client_rotation.on_rotate {
            let live = client_rotation.current();
            let key = Store::new(given.cert_dir, Kind::Client)
                .load()
                .filter(|(cert, _)| *cert == live)
                .map(|(_, key)| key);
            if let Some(key) = key {
                action(&live, &key)?;
            }
        }
        let client = client(config, client_rotation.live())?;
        Ok(NodeCertificates {
            client,
            tls: crate::server::ServingTls {
                cert: serving_rotation.live(),
                client_ca_pem: given.ca_pem.to_owned(),
            },
            rotations: vec![Arc::new(client_rotation), Arc::new(serving_rotation)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate valid from `start` to `end` seconds after the epoch, PEM,
    /// and its key.
    fn cert(start: i64, end: i64) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n1".to_owned()]).unwrap();
        params.not_before = time_at(start);
        params.not_after = time_at(end);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn time_at(secs: i64) -> time::OffsetDateTime {
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_deadline_falls_between_70_and_90_percent_of_the_life() {
        let (start, end) = (at(1_000_000), at(1_000_000 + 1000));
        assert_eq!(deadline(start, end, 0.0), at(1_000_700));
        assert_eq!(deadline(start, end, 0.5), at(1_000_800));
        assert_eq!(deadline(start, end, 1.0), at(1_000_900));
        for _ in 0..100 {
            let d = deadline(start, end, rand::random::<f64>());
            assert!(d >= at(1_000_700) && d <= at(1_000_900), "{d:?}");
        }
        // A signer's backdated start: 100 s certificates starting 300 s in the past are
        // renewed at once or within the minute.
        let (pem, _) = cert(2_000_000 - 300, 2_000_000 + 100);
        let (s, e) = validity(&pem).unwrap();
        assert_eq!((s, e), (at(2_000_000 - 300), at(2_000_100)));
        assert_eq!(deadline(s, e, 0.0), at(2_000_000 - 20));
        assert_eq!(deadline(s, e, 1.0), at(2_000_000 + 60));
    }

    #[test]
    fn requests_have_upstreams_subject_names_and_usages() {
        let names = vec!["n1".to_owned(), "10.0.0.5".to_owned(), "host1".to_owned()];
        let (pem, key) = request(Kind::Serving, "n1", &names).unwrap();
        let parsed = capstan_api::certificates::parse_request(pem.as_bytes()).unwrap();
        assert_eq!(parsed.common_name, "system:node:n1");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert_eq!(parsed.dns_names, ["n1", "host1"]);
        assert_eq!(
            parsed.ip_addresses,
            ["10.0.0.5".parse::<std::net::IpAddr>().unwrap()]
        );
        assert!(key.serialize_pem().contains("PRIVATE KEY"));
        let (pem, _) = request(Kind::Client, "n1", &names).unwrap();
        let parsed = capstan_api::certificates::parse_request(pem.as_bytes()).unwrap();
        assert!(parsed.dns_names.is_empty() && parsed.ip_addresses.is_empty());
        assert_eq!(
            Kind::Client.signer(),
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(Kind::Client.usages(), ["digital signature", "client auth"]);
        assert_eq!(Kind::Serving.signer(), "kubernetes.io/kubelet-serving");
        assert_eq!(Kind::Serving.usages(), ["digital signature", "server auth"]);
    }

    #[test]
    fn pairs_are_swapped_whole_behind_the_current_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), Kind::Client);
        assert!(store.load().is_none());
        let first = cert(0, 4_000_000_000);
        store.save(&first.0, &first.1).unwrap();
        assert_eq!(store.load().unwrap(), (first.0.clone(), first.1.clone()));
        let second = cert(0, 4_100_000_000);
        store.save(&second.0, &second.1).unwrap();
        assert_eq!(store.load().unwrap(), (second.0.clone(), second.1.clone()));
        let link = std::fs::read_link(store.current_path()).unwrap();
        let target = dir.path().join(&link);
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Only the current file is left beside the link.
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                link.to_string_lossy().into_owned(),
                "kubelet-client-current.pem".to_owned()
            ]
        );
    }

    #[test]
    fn a_longer_lasting_stored_pair_is_preferred_at_start() {
        let now = SystemTime::now();
        let secs = |t: SystemTime| {
            i64::try_from(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap()
        };
        let given = cert(secs(now) - 60, secs(now) + 600);
        let longer = cert(secs(now) - 60, secs(now) + 6000);
        let expired = cert(secs(now) - 6000, secs(now) - 60);
        assert_eq!(better(&given, Some(&longer), now), &longer);
        assert_eq!(better(&given, Some(&expired), now), &given);
        assert_eq!(better(&longer, Some(&given), now), &longer);
        assert_eq!(better(&given, None, now), &given);
        let dir = tempfile::tempdir().unwrap();
        Store::new(dir.path(), Kind::Serving)
            .save(&longer.0, &longer.1)
            .unwrap();
        let rotation =
            Rotation::start(Kind::Serving, "n1", &[], dir.path(), given.clone()).unwrap();
        assert_eq!(rotation.current(), longer.0);
    }
}
