//! An HTTPS server on loopback for the test servers (admission and conversion webhooks,
//! extension API servers): a certificate from its own CA for `127.0.0.1`, `localhost` and the
//! DNS names given, client certificates of a given CA demanded or none asked for, and a
//! handler for each request, on a runtime of its own.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Https {
    pub port: u16,
    /// The CA that signed the serving certificate, PEM.
    pub ca_pem: String,
    _runtime: tokio::runtime::Runtime,
}

/// Serves `handler` on a free loopback port, demanding client certificates signed by
/// `client_ca_pem` when given.
pub fn serve<F, Fut>(dns_names: &[&str], client_ca_pem: Option<&str>, handler: F) -> Https
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = hyper::Response<Full<bytes::Bytes>>> + Send + 'static,
{
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut names: Vec<String> = vec!["localhost".into()];
    names.extend(dns_names.iter().map(|n| n.to_string()));
    let mut params = CertificateParams::new(names).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert_pem = params.signed_by(&key, &issuer).unwrap().pem();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(client_ca_pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap(),
            PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, handler) = (acceptor.clone(), handler.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request| {
                    let answer = handler(request);
                    async move { Ok::<_, std::convert::Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Https {
        port,
        ca_pem,
        _runtime: runtime,
    }
}
