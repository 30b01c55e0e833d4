//! The HTTP endpoints of the components `capstan` runs on their own, as upstream's serve them:
//!
//! - [`serve_secure`]: `capstan scheduler` and `capstan controller-manager` answer HTTPS on
//!   `--secure-port` (upstream's 10259 and 10257): `/healthz`, `/livez` and `/readyz` to anyone
//!   (upstream's `--authorization-always-allow-paths`), `/metrics` (the process registry,
//!   `capstan_client::metrics`) to callers the API server vouches for, as upstream's delegated
//!   authentication and authorization do: a client certificate signed by the CA the API server
//!   publishes in `kube-system/extension-apiserver-authentication`, else a bearer token checked
//!   with a TokenReview (answers kept for 10 s), else `system:anonymous`; then a
//!   SubjectAccessReview for the path (the verb: the method, lower-cased). The CA is read
//!   again every 30 s ([`LiveClientCa`]), so a rotated or later published one is trusted
//!   without a restart. With `--profiling` (the default) `/debug/pprof/` serves the process's
//!   profiles ([`capstan_pprof`]) behind the same checks. Refusals are upstream's `Status` objects (401
//!   `Unauthorized`, 403 `forbidden: User "..." cannot get path "..."`). The serving certificate
//!   is `--tls-cert-file`/`--tls-private-key-file`, or a self-signed one made at start.
//! - [`serve_plain_metrics`]: `capstan agent`'s service proxy answers `/metrics` and `/healthz`
//!   over plain HTTP on `--proxy-metrics-bind-address` (kube-proxy's `metricsBindAddress`,
//!   `127.0.0.1:10249`); a port already taken is logged, not fatal, as kube-proxy does.
//!
//! Inside `capstan server` none of this runs: the API server's own `/metrics` carries the
//! process registry.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capstan_api::{GroupResource, StatusError};
use capstan_apiserver::User;
use capstan_client::prometheus;
use clap::Args;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio::net::TcpListener;

/// How long a TokenReview's answer is reused (upstream's delegated authentication caches
/// successes and failures for 10 s).
const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);
/// How often the published client CA is read again.
const CLIENT_CA_REFRESH: Duration = Duration::from_secs(30);

/// The flags of a component's HTTPS endpoints (upstream's secure serving flags).
#[derive(Debug, Clone, Args)]
pub(crate) struct SecureServingFlags {
    /// The port of the HTTPS endpoints (`/metrics`, `/healthz`, `/livez`, `/readyz`); 0 serves
    /// none. Default: upstream's (10259 for the scheduler, 10257 for the controller manager).
    #[arg(long)]
    secure_port: Option<u16>,
    /// The address the HTTPS endpoints listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// The serving certificate (PEM, chain first); a self-signed one is made at start without.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Paths served to anyone without asking the API server (a trailing `*` matches a prefix).
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    authorization_always_allow_paths: Vec<String>,
    /// Serve the process's CPU and heap profiles at `/debug/pprof/` (to callers the API
    /// server authorizes for that path), as upstream's `--profiling`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) profiling: bool,
}

/// Starts the HTTPS endpoints of `component` (unless the port is 0) and returns the address
/// they listen on; the listener is bound before this returns, so a taken port fails the start.
pub(crate) async fn serve_secure(
    flags: &SecureServingFlags,
    default_port: u16,
    client: kube::Client,
    component: &str,
) -> Result<Option<SocketAddr>> {
    let port = flags.secure_port.unwrap_or(default_port);
    if port == 0 {
        return Ok(None);
    }
    if flags.profiling {
        capstan_pprof::heap::start(capstan_pprof::heap::DEFAULT_RATE);
    }
    let (chain, key) = serving_certificate(flags, component)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let client_ca = Arc::new(LiveClientCa::new(provider));
    client_ca.refresh(&client).await;
    tokio::spawn({
        let (client_ca, client) = (client_ca.clone(), client.clone());
        async move {
            loop {
                tokio::time::sleep(CLIENT_CA_REFRESH).await;
                client_ca.refresh(&client).await;
            }
        }
    });
    let builder = builder.with_client_cert_verifier(client_ca);
    let mut config = builder
        .with_single_cert(chain, key)
        .context("the serving certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = TcpListener::bind((flags.bind_address, port))
        .await
        .with_context(|| format!("cannot listen on {}:{port}", flags.bind_address))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, component, "serving /metrics and health checks over HTTPS");
    let state = Arc::new(Delegated {
        client,
        always_allow: flags.authorization_always_allow_paths.clone(),
        tokens: Mutex::new(HashMap::new()),
        profiling: flags.profiling,
    });
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, state) = (acceptor.clone(), state.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let certificate_user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| User::from_certificate(leaf));
                let service = hyper::service::service_fn(move |request| {
                    let (state, certificate_user) = (state.clone(), certificate_user.clone());
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            state.handle(request, certificate_user).await,
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(Some(address))
}

/// Serves the process's `/metrics` and `/healthz` over plain HTTP on `address` (kube-proxy's
/// metrics endpoint); a failure to listen is logged and the component runs on without it.
pub(crate) async fn serve_plain_metrics(address: SocketAddr) -> Option<SocketAddr> {
    let listener = match TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%address, %error, "cannot serve the proxy's metrics");
            return None;
        }
    };
    let bound = listener.local_addr().ok();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    Ok::<_, std::convert::Infallible>(route(&request))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    bound
}

/// What the secure endpoints need to authenticate and authorize through the API server.
struct Delegated {
    client: kube::Client,
    always_allow: Vec<String>,
    /// TokenReview answers by token: the user (None: the token was refused) and when asked.
    tokens: Mutex<HashMap<String, (Option<User>, Instant)>>,
    /// Whether `/debug/pprof/` is served (`--profiling`).
    profiling: bool,
}

impl Delegated {
    async fn handle(
        &self,
        request: Request<Incoming>,
        certificate_user: Option<User>,
    ) -> Response<Full<Bytes>> {
        let user = match certificate_user {
            Some(user) => user,
            None => match request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(bearer)
            {
                Some(token) => match self.review_token(token).await {
                    Ok(Some(user)) => user,
                    Ok(None) => {
                        return status(&StatusError::unauthorized("Unauthorized"));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "TokenReview failed");
                        return status(&StatusError::unauthorized("Unauthorized"));
                    }
                },
                None => User::anonymous(),
            },
        };
        let path = request.uri().path().to_owned();
        // A non-resource request's verb is its method, lower-cased (upstream's RequestInfo).
        let verb = request.method().as_str().to_ascii_lowercase();
        if !always_allowed(&self.always_allow, &path) {
            match self.review_access(&user, &path, &verb).await {
                Ok(true) => {}
                Ok(false) => {
                    let reason = format!("User \"{}\" cannot {verb} path \"{path}\"", user.name);
                    let nothing = GroupResource::new("", "");
                    return status(&StatusError::forbidden(nothing, "", &reason));
                }
                Err(error) => {
                    tracing::warn!(%error, "SubjectAccessReview failed");
                    return status(&StatusError::internal("the authorization check failed"));
                }
            }
        }
        if self.profiling && path.starts_with("/debug/pprof/") {
            return capstan_pprof::serve_request(request)
                .await
                .map(|body| Full::new(Bytes::from(body)));
        }
        route(&request)
    }

    /// The user a bearer token stands for (None when the API server refuses it), cached.
    async fn review_token(&self, token: &str) -> Result<Option<User>> {
        if let Some((user, asked)) = self.tokens.lock().ok().and_then(|t| t.get(token).cloned())
            && asked.elapsed() < TOKEN_CACHE_TTL
        {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(info)) => Some(User {
                name: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default().into_iter().collect(),
            }),
            _ => None,
        };
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.retain(|_, (_, asked)| asked.elapsed() < TOKEN_CACHE_TTL);
            tokens.insert(token.to_owned(), (user.clone(), Instant::now()));
        }
        Ok(user)
    }

    /// Whether the API server lets `user` `verb` the non-resource path `path`.
    async fn review_access(&self, user: &User, path: &str, verb: &str) -> Result<bool> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// Whether `path` is one of `always_allow` (a trailing `*` matching a prefix).
fn always_allowed(always_allow: &[String], path: &str) -> bool {
    always_allow
        .iter()
        .any(|allowed| match allowed.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == allowed,
        })
}

/// The token of an `Authorization: Bearer <token>` header's value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The endpoints themselves, once the caller may have them.
fn route<B>(request: &Request<B>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "",
        );
    }
    match request.uri().path() {
        "/healthz" | "/livez" | "/readyz" => {
            plain(StatusCode::OK, "text/plain; charset=utf-8", "ok")
        }
        "/metrics" => {
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = prometheus::negotiate(accept);
            let registry = capstan_client::metrics::registry();
            match prometheus::encode_registry(&registry, format, true) {
                Ok(body) => plain(StatusCode::OK, format.content_type(), &body),
                Err(_) => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    "cannot encode the metrics",
                ),
            }
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n",
        ),
    }
}

fn plain(code: StatusCode, content_type: &str, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = code;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// A refusal as the API's `Status` object.
fn status(error: &StatusError) -> Response<Full<Bytes>> {
    let code = StatusCode::from_u16(error.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    plain(code, "application/json", &error.to_json().to_string())
}

/// The client CA of the secure port, followed as upstream's components follow the
/// `client-ca-file` of `kube-system/extension-apiserver-authentication`: re-read every
/// [`CLIENT_CA_REFRESH`], so a CA the API server rotates or publishes later is trusted without
/// a restart. Without one, no client certificate is asked for (bearer tokens still work).
#[derive(Debug)]
struct LiveClientCa {
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// The bundle last read, and the verifier built from it.
    current: std::sync::RwLock<(String, Option<Arc<dyn ClientCertVerifier>>)>,
}

impl LiveClientCa {
    fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> LiveClientCa {
        LiveClientCa {
            provider,
            current: std::sync::RwLock::new((String::new(), None)),
        }
    }

    fn verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.current
            .read()
            .ok()
            .and_then(|current| current.1.clone())
    }

    /// Reads the published bundle; a new one replaces the verifier (an unreadable map keeps
    /// the one in use).
    async fn refresh(&self, client: &kube::Client) {
        let map = match Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .get_opt("extension-apiserver-authentication")
            .await
        {
            Ok(map) => map,
            Err(error) => {
                tracing::warn!(%error, "cannot read the client CA to verify certificates with");
                return;
            }
        };
        let pem = map
            .and_then(|m| m.data)
            .and_then(|mut data| data.remove("client-ca-file"))
            .unwrap_or_default();
        if self.current.read().is_ok_and(|current| current.0 == pem) {
            return;
        }
        let verifier = self.build(&pem);
        if let Ok(mut current) = self.current.write() {
            *current = (pem, verifier);
        }
    }

    fn build(&self, pem: &str) -> Option<Arc<dyn ClientCertVerifier>> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return None;
        }
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|error| tracing::warn!(%error, "the published client CA is unusable"))
        .ok()
    }
}

impl ClientCertVerifier for LiveClientCa {
    fn offer_client_auth(&self) -> bool {
        self.verifier().is_some()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self.verifier() {
            Some(verifier) => verifier.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::General("no client CA".into())),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The serving certificate: the flags' files, or a self-signed one for this machine's names.
fn serving_certificate(
    flags: &SecureServingFlags,
    component: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    if let (Some(cert), Some(key)) = (&flags.tls_cert_file, &flags.tls_private_key_file) {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("cannot read {}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("cannot read {}", key.display()))?;
        return Ok((chain, key));
    }
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        names.push(host.trim().to_owned());
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{component}@capstan"));
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((
        vec![cert.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| anyhow::anyhow!("the generated key: {e}"))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a client certificate it signed, as PEM and DER.
    fn ca_and_client() -> (String, CertificateDer<'static>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert.pem(), ca_key).unwrap();
        let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "jane");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = leaf.signed_by(&leaf_key, &issuer).unwrap();
        (ca_cert.pem(), leaf.der().clone())
    }

    #[test]
    fn the_client_ca_can_change_while_serving() {
        let live = LiveClientCa::new(Arc::new(rustls::crypto::ring::default_provider()));
        assert!(
            !live.offer_client_auth(),
            "no CA published: no certificate asked for"
        );
        let (first_pem, first_client) = ca_and_client();
        let (second_pem, second_client) = ca_and_client();
        let now = rustls::pki_types::UnixTime::now();
        for (pem, trusted, refused) in [
            (&first_pem, &first_client, &second_client),
            (&second_pem, &second_client, &first_client),
        ] {
            *live.current.write().unwrap() = (pem.clone(), live.build(pem));
            assert!(live.offer_client_auth());
            assert!(live.verify_client_cert(trusted, &[], now).is_ok());
            assert!(live.verify_client_cert(refused, &[], now).is_err());
        }
        assert!(live.build("not a certificate").is_none());
    }

    #[test]
    fn always_allowed_paths_match_exactly_or_by_prefix() {
        let allow: Vec<String> = ["/healthz", "/readyz", "/livez", "/debug/*"]
            .map(str::to_owned)
            .to_vec();
        assert!(always_allowed(&allow, "/healthz"));
        assert!(!always_allowed(&allow, "/healthz/ping"));
        assert!(always_allowed(&allow, "/debug/pprof"));
        assert!(!always_allowed(&allow, "/metrics"));
    }

    #[test]
    fn the_endpoints_answer_as_upstream_components() {
        let get = |path: &str| {
            let request = Request::get(path).body(()).unwrap_or_default();
            route(&request)
        };
        assert_eq!(get("/healthz").status(), StatusCode::OK);
        assert_eq!(get("/nope").status(), StatusCode::NOT_FOUND);
        let metrics = get("/metrics");
        assert_eq!(metrics.status(), StatusCode::OK);
        assert_eq!(
            metrics.headers()[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let post = Request::post("/metrics").body(()).unwrap_or_default();
        assert_eq!(route(&post).status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        assert_eq!(bearer("Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic dXNlcg=="), None);
        assert_eq!(bearer("Bearer "), None);
    }

    #[test]
    fn refusals_are_upstream_status_objects() {
        let reason = "User \"system:anonymous\" cannot get path \"/metrics\"";
        let refused = status(&StatusError::forbidden(
            GroupResource::new("", ""),
            "",
            reason,
        ));
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(refused.headers()[header::CONTENT_TYPE], "application/json");
    }
}
