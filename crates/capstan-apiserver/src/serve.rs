//! HTTPS serving: TLS with optional client certificates, HTTP/1.1 and HTTP/2 (ALPN), and the
//! identity of each connection's user attached to its requests.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Extension;
use axum::http::{Method, Request, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capstan_store::Store;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::auth::{Authenticated, TokenFile, User, authenticate};
use crate::pki::Pki;
use crate::status::ApiError;
use crate::{Config, StartError, health};

/// A running API server.
#[derive(Debug)]
pub struct RunningServer {
    local_addr: SocketAddr,
    accept_loop: JoinHandle<()>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections.
    pub fn shutdown(self) {}
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

fn tls_config(pki: &Pki) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_cert_pem.as_bytes()) {
        let cert = cert.map_err(|e| rustls::Error::General(format!("CA certificate: {e}")))?;
        roots.add(cert)?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| rustls::Error::General(format!("client verifier: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(pki.serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| rustls::Error::General(format!("serving certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving.key_pem.as_bytes())
        .map_err(|e| rustls::Error::General(format!("serving key: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn router(store: Store) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/version", get(health::version))
        .fallback(unserved)
        .with_state(store)
}

/// Everything the API does not serve yet: refused as upstream refuses it.
async fn unserved(Extension(user): Extension<User>, method: Method, uri: Uri) -> Response {
    if user.is_anonymous() {
        return ApiError::unauthorized().into_response();
    }
    if !user.groups.iter().any(|g| g == "system:masters") {
        let verb = method.as_str().to_ascii_lowercase();
        return ApiError::forbidden(&user.name, &verb, uri.path()).into_response();
    }
    ApiError::not_found().into_response()
}

pub(crate) async fn listen(
    config: &Config,
    pki: &Pki,
    tokens: TokenFile,
    store: Store,
) -> Result<RunningServer, StartError> {
    let tokens = Arc::new(tokens);
    let acceptor = TlsAcceptor::from(Arc::new(tls_config(pki)?));
    let addr = SocketAddr::new(config.bind_address, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| StartError::Listen { addr, source })?;
    let app = router(store);
    let accept_loop = tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (acceptor, app, tokens) = (acceptor.clone(), app.clone(), tokens.clone());
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                };
                let certificate_user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|cert| User::from_certificate(cert));
                let service =
                    hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let mut request = request.map(Body::new);
                        let authorization = request
                            .headers()
                            .get(axum::http::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok());
                        let outcome =
                            authenticate(certificate_user.as_ref(), authorization, &tokens);
                        let app = app.clone();
                        async move {
                            match outcome {
                                Authenticated::User(user) => {
                                    request.extensions_mut().insert(user);
                                    app.oneshot(request).await
                                }
                                Authenticated::Rejected => {
                                    Ok(ApiError::unauthorized().into_response())
                                }
                            }
                        }
                    });
                if let Err(error) = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
            });
        }
    });
    Ok(RunningServer {
        local_addr,
        accept_loop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    async fn call(user: User, path: &str) -> (StatusCode, serde_json::Value) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::sqlite(capstan_store::sqlite::SqliteConfig::new(
            dir.path().join("state.db"),
        ))
        .await
        .unwrap();
        let mut request = Request::get(path).body(Body::empty()).unwrap();
        request.extensions_mut().insert(user);
        let response = router(store).oneshot(request).await.unwrap();
        let code = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test]
    async fn users_outside_system_masters_are_forbidden_with_a_status() {
        let user = User {
            name: "jane".into(),
            groups: vec!["developers".into(), "system:authenticated".into()],
        };
        let (code, body) = call(user, "/api/v1/namespaces").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(body["reason"], "Forbidden");
        assert_eq!(body["code"], 403);
        assert_eq!(
            body["message"],
            "forbidden: User \"jane\" cannot get path \"/api/v1/namespaces\""
        );
    }

    #[tokio::test]
    async fn admins_get_not_found_for_what_is_not_served_yet() {
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        };
        let (code, body) = call(admin, "/apis").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(body["reason"], "NotFound");
    }

    #[test]
    fn identity_comes_from_the_certificate_subject() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::OrganizationName, "system:masters");
        dn.push(rcgen::DnType::CommonName, "system:admin");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        let user = User::from_certificate(cert.der()).unwrap();
        assert_eq!(user.name, "system:admin");
        assert_eq!(user.groups, ["system:masters", "system:authenticated"]);
    }
}
