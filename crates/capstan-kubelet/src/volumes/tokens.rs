//! Service account tokens for projected volumes, as the kubelet's token manager gets them: a
//! TokenRequest (`POST .../serviceaccounts/<sa>/token`) bound to the pod, kept and handed out
//! again until 80% of its lifetime has passed or it is 24 hours old, then requested afresh. A
//! token that cannot be renewed is still handed out while it has not expired.

use std::collections::HashMap;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::Api;
use kube::api::PostParams;

/// A token's lifetime unless the projection sets one (the API's default).
pub const DEFAULT_EXPIRATION: i64 = 3600;
/// The oldest a token may get before it is renewed, whatever its lifetime.
const MAX_AGE: i64 = 24 * 3600;

/// What a token is requested for: equal keys share a token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The pod's namespace.
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// The audiences (none: the API server's own).
    pub audiences: Vec<String>,
    /// The lifetime asked for, in seconds.
    pub expiration: i64,
    /// The pod the token is bound to.
    pub pod_name: String,
    /// Its UID.
    pub pod_uid: String,
}

impl Key {
    /// The token a projection of `pod` asks for.
    pub fn new(pod: &Pod, projection: &ServiceAccountTokenProjection) -> Key {
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        Key {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            service_account,
            audiences: projection
                .audience
                .clone()
                .filter(|a| !a.is_empty())
                .into_iter()
                .collect(),
            expiration: projection.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// A token the API server issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The token.
    pub token: String,
    /// When it expires, in Unix seconds.
    pub expires: i64,
    /// Its lifetime in seconds, as the server granted it.
    pub lifetime: i64,
}

impl Issued {
    /// Whether the token should be renewed at `now` (Unix seconds): 80% of its lifetime has
    /// passed, or it is a day old.
    pub fn needs_refresh(&self, now: i64) -> bool {
        let issued = self.expires - self.lifetime;
        now >= issued + MAX_AGE || now >= self.expires - self.lifetime / 5
    }
}

/// The tokens of one pod's volumes.
#[derive(Debug, Default)]
pub struct Tokens {
    cache: HashMap<Key, Issued>,
}

fn now_seconds() -> i64 {
    crate::now().as_second()
}

impl Tokens {
    /// Whether the token for `key` must be requested (none yet, or due for renewal).
    pub fn due(&self, key: &Key) -> bool {
        self.cache
            .get(key)
            .is_none_or(|t| t.needs_refresh(now_seconds()))
    }

    /// The token for `key`: the one held unless it is due, else a new one.
    pub async fn get(&mut self, client: &kube::Client, key: &Key) -> Result<String, String> {
        let now = now_seconds();
        if let Some(held) = self.cache.get(key)
            && !held.needs_refresh(now)
        {
            return Ok(held.token.clone());
        }
        match request(client, key).await {
            Ok(issued) => {
                let token = issued.token.clone();
                self.cache.insert(key.clone(), issued);
                Ok(token)
            }
            Err(e) => match self.cache.get(key) {
                Some(held) if held.expires > now => {
                    tracing::warn!(namespace = %key.namespace, service_account = %key.service_account, error = %e, "cannot renew a service account token; the current one is still valid");
                    Ok(held.token.clone())
                }
                _ => Err(e),
            },
        }
    }
}

/// Asks the API server for a token bound to the pod.
async fn request(client: &kube::Client, key: &Key) -> Result<Issued, String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: key.audiences.clone(),
            expiration_seconds: Some(key.expiration),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(key.pod_name.clone()),
                uid: Some(key.pod_uid.clone()),
            }),
        },
        ..TokenRequest::default()
    };
    let fail = |message: String| {
        format!(
            "failed to fetch token for service account \"{}/{}\": {message}",
            key.namespace, key.service_account
        )
    };
    let response = Api::<ServiceAccount>::namespaced(client.clone(), &key.namespace)
        .create_token_request(&key.service_account, &PostParams::default(), &request)
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) => fail(format!("{} ({})", status.message, status.code)),
            other => fail(other.to_string()),
        })?;
    let status = response
        .status
        .ok_or_else(|| fail("the answer has no status".to_owned()))?;
    if status.token.is_empty() {
        return Err(fail("the answer has no token".to_owned()));
    }
    let lifetime = response
        .spec
        .expiration_seconds
        .unwrap_or(key.expiration)
        .max(1);
    Ok(Issued {
        token: status.token,
        expires: status.expiration_timestamp.0.as_second(),
        lifetime,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use http_body_util::BodyExt as _;
    use std::sync::{Arc, Mutex};

    /// An API server that knows no TokenRequest API until `available` is set, then issues
    /// tokens; it records what it was asked.
    fn api(
        available: Arc<Mutex<bool>>,
        seen: Arc<Mutex<Vec<(String, String, serde_json::Value)>>>,
    ) -> kube::Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (available, seen) = (available.clone(), seen.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
                let body: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                seen.lock().unwrap().push((
                    parts.method.to_string(),
                    parts.uri.to_string(),
                    body.clone(),
                ));
                let (status, answer) = if *available.lock().unwrap() {
                    let mut answer = body;
                    answer["status"] = serde_json::json!({
                        "token": format!("header.payload{}.signature", seen.lock().unwrap().len()),
                        "expirationTimestamp": "2030-01-01T00:00:00Z",
                    });
                    (201, answer)
                } else {
                    (
                        404,
                        serde_json::json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "the server could not find the requested resource",
                            "reason": "NotFound", "code": 404,
                        }),
                    )
                };
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(answer.to_string().into_bytes()))
                    .map_err(|e| e.to_string())
            }
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn tokens_are_requested_bound_to_the_pod() {
        let available = Arc::new(Mutex::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = api(available.clone(), seen.clone());
        let key = Key {
            namespace: "ns".to_owned(),
            service_account: "builder".to_owned(),
            audiences: vec!["vault".to_owned()],
            expiration: 600,
            pod_name: "p".to_owned(),
            pod_uid: "u-1".to_owned(),
        };
        let mut tokens = Tokens::default();
        // Without the API: a clear error, retried later.
        assert_eq!(
            tokens.get(&client, &key).await,
            Err("failed to fetch token for service account \"ns/builder\": the server could not find the requested resource (404)".to_owned())
        );
        assert!(tokens.due(&key));
        *available.lock().unwrap() = true;
        assert_eq!(
            tokens.get(&client, &key).await.as_deref(),
            Ok("header.payload2.signature")
        );
        // Held until it is due.
        assert!(!tokens.due(&key));
        assert_eq!(
            tokens.get(&client, &key).await.as_deref(),
            Ok("header.payload2.signature")
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let (method, uri, body) = &seen[1];
        assert_eq!(method, "POST");
        assert!(
            uri.starts_with("/api/v1/namespaces/ns/serviceaccounts/builder/token"),
            "{uri}"
        );
        assert_eq!(body["kind"], "TokenRequest");
        assert_eq!(body["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(body["spec"]["audiences"], serde_json::json!(["vault"]));
        assert_eq!(body["spec"]["expirationSeconds"], 600);
        assert_eq!(
            body["spec"]["boundObjectRef"],
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"})
        );
    }

    #[test]
    fn tokens_are_renewed_after_80_percent_or_a_day() {
        let hour = Issued {
            token: "t".to_owned(),
            expires: 10_000 + 3600,
            lifetime: 3600,
        };
        assert!(!hour.needs_refresh(10_000));
        assert!(!hour.needs_refresh(10_000 + 2879));
        assert!(hour.needs_refresh(10_000 + 2880));
        let week = Issued {
            token: "t".to_owned(),
            expires: 7 * 86_400,
            lifetime: 7 * 86_400,
        };
        assert!(!week.needs_refresh(86_399));
        assert!(week.needs_refresh(86_400));
    }

    #[test]
    fn keys_default_the_service_account_and_lifetime() {
        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("p".to_owned()),
                namespace: Some("ns".to_owned()),
                uid: Some("u".to_owned()),
                ..Default::default()
            },
            ..Pod::default()
        };
        let key = Key::new(
            &pod,
            &ServiceAccountTokenProjection {
                path: "token".to_owned(),
                audience: Some(String::new()),
                expiration_seconds: None,
            },
        );
        assert_eq!(key.service_account, "default");
        assert_eq!(key.expiration, 3600);
        assert!(key.audiences.is_empty());
        let tokens = Tokens::default();
        assert!(tokens.due(&key));
    }
}
