//! Fixtures the unit tests share: a store on a fresh SQLite file, an API over it with its
//! default objects, as a new server makes them, and a review webhook on loopback.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use capstan_store::Store;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::handlers::resource::Api;
use crate::registry::services::Cidr;

/// A store on a new SQLite file in `dir`.
pub(crate) async fn sqlite(dir: &Path) -> Store {
    Store::sqlite(capstan_store::sqlite::SqliteConfig::new(
        dir.join("state.db"),
    ))
    .await
    .unwrap()
}

/// An API over a new SQLite store in `dir`, Services in 10.43.0.0/16, with the default objects
/// a new server writes (the default StorageClass too with `default_class`); and the store.
pub(crate) async fn bootstrapped(dir: &Path, default_class: bool) -> (Api, Store) {
    let store = sqlite(dir).await;
    let api = Api::with_services(&store, Cidr::parse("10.43.0.0/16").unwrap());
    crate::bootstrap::ensure_defaults(api.registries(), api.service_cidr(), 6443, default_class)
        .await
        .unwrap();
    (api, store)
}

/// A webhook on loopback (plain HTTP) answering the reviews posted to it by `answer` (status
/// code and body), keeping each review it was sent; its URL (ending in `path`) and the reviews.
pub(crate) async fn review_webhook(
    path: &str,
    answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (kept, answer) = (seen.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (kept, answer) = (kept.clone(), answer.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (kept, answer) = (kept.clone(), answer.clone());
                        async move {
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            let (code, reply) = answer(&review);
                            kept.lock().unwrap().push(review);
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(code)
                                    .body(Full::new(bytes::Bytes::from(reply.to_string())))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}{path}"), seen)
}
