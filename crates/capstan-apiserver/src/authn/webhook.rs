//! Webhook token authentication, as upstream's (`--authentication-token-webhook-config-file`,
//! `k8s.io/apiserver/plugin/pkg/authenticator/token/webhook` behind the token cache of
//! `.../authentication/token/cache`): a bearer token no other authenticator knows is posted to
//! the service the kubeconfig file names as a TokenReview (`authentication.k8s.io/v1`, or
//! `v1beta1` with `--authentication-token-webhook-version`) whose spec carries the token and
//! the API's audiences, and the answer's `status` decides: `authenticated` with its `user`
//! (name, uid, groups, extra), after its `audiences` (none: the API's own) are checked to
//! meet the API's.
//!
//! Answers are remembered by the SHA-256 of the audiences and the token (never the token
//! itself) for `--authentication-token-webhook-cache-ttl` (2 m), users and refusals alike;
//! failures (the service unreachable, a 5xx after the retries, an answer with
//! `status.error`) are not remembered, and leave the request unauthenticated (401), as
//! upstream's union fails on its authenticators' errors.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::authn::User;
use crate::remote::{Backoff, Service};

/// The TokenReview version spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V1beta1,
}

impl Version {
    /// `--authentication-token-webhook-version`, in upstream's words when it is neither.
    pub(crate) fn parse(text: &str) -> Result<Version, String> {
        match text {
            "v1" => Ok(Version::V1),
            "v1beta1" => Ok(Version::V1beta1),
            other => Err(format!(
                "unsupported authentication webhook version {other:?}, supported versions are \
                 \"v1\", \"v1beta1\""
            )),
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Version::V1 => "authentication.k8s.io/v1",
            Version::V1beta1 => "authentication.k8s.io/v1beta1",
        }
    }
}

/// What the webhook made of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It belongs to this user.
    User(User),
    /// It is not one the webhook knows (or not for the API's audiences).
    Unauthenticated,
    /// The webhook could not be asked, or answered with an error.
    Failed(String),
}

/// The TokenReview sent, in Go's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata,
    spec: Spec<'a>,
    status: EmptyStatus,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    creation_timestamp: Option<()>,
}

#[derive(Serialize)]
struct Spec<'a> {
    token: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    audiences: &'a [String],
}

#[derive(Serialize)]
struct EmptyStatus {
    user: serde_json::Map<String, Value>,
}

/// The most answers remembered (upstream's cache: 32 stripes of 128).
const CACHE_ENTRIES: usize = 4096;

/// The webhook token authenticator with its cache.
#[derive(Debug)]
pub(crate) struct TokenWebhook {
    service: Service,
    version: Version,
    /// The API's audiences, asked for and assumed when the answer names none.
    audiences: Vec<String>,
    ttl: Duration,
    backoff: Backoff,
    cache: Mutex<HashMap<[u8; 32], (Outcome, Instant)>>,
}

impl TokenWebhook {
    /// Asks `service` with `version`, for the API's `audiences`, remembering answers for `ttl`
    /// (zero: not at all).
    pub(crate) fn new(
        service: Service,
        version: Version,
        audiences: Vec<String>,
        ttl: Duration,
    ) -> TokenWebhook {
        TokenWebhook {
            service,
            version,
            audiences,
            ttl,
            backoff: Backoff::WEBHOOK,
            cache: Mutex::default(),
        }
    }

    fn key(&self, token: &str) -> [u8; 32] {
        let mut context = ring::digest::Context::new(&ring::digest::SHA256);
        for audience in &self.audiences {
            context.update(&(audience.len() as u64).to_be_bytes());
            context.update(audience.as_bytes());
        }
        context.update(b"|");
        context.update(token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(context.finish().as_ref());
        key
    }

    /// Who `token` belongs to, from the cache or the webhook.
    pub(crate) async fn authenticate(&self, token: &str) -> Outcome {
        let key = self.key(token);
        let now = Instant::now();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((outcome, until)) = cache.get(&key)
                && *until > now
            {
                return outcome.clone();
            }
        }
        let outcome = self.review(token).await;
        if !matches!(outcome, Outcome::Failed(_)) && !self.ttl.is_zero() {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_ENTRIES {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, (outcome.clone(), Instant::now() + self.ttl));
        }
        outcome
    }

    /// Posts the TokenReview and reads its answer.
    async fn review(&self, token: &str) -> Outcome {
        let review = Review {
            kind: "TokenReview",
            api_version: self.version.api_version(),
            metadata: Metadata {
                creation_timestamp: None,
            },
            spec: Spec {
                token,
                audiences: &self.audiences,
            },
            status: EmptyStatus {
                user: serde_json::Map::new(),
            },
        };
        let body = match serde_json::to_vec(&review) {
            Ok(body) => body,
            Err(error) => return Outcome::Failed(error.to_string()),
        };
        match self.service.post_retrying(&body, self.backoff).await {
            Ok(answer) => self.outcome(&answer),
            Err(error) => {
                tracing::error!(%error, "Failed to make webhook authenticator request");
                Outcome::Failed(error)
            }
        }
    }

    /// What an answer says about the token.
    fn outcome(&self, answer: &Value) -> Outcome {
        let status = &answer["status"];
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let answered = strings(&status["audiences"]);
        let got = if answered.is_empty() {
            &self.audiences
        } else {
            &answered
        };
        if !self.audiences.is_empty() && !self.audiences.iter().any(|a| got.contains(a)) {
            return Outcome::Unauthenticated;
        }
        if status["authenticated"] != true {
            return match status["error"].as_str().filter(|e| !e.is_empty()) {
                Some(error) => Outcome::Failed(error.to_owned()),
                None => Outcome::Unauthenticated,
            };
        }
        let user = &status["user"];
        let mut groups = strings(&user["groups"]);
        let name = user["username"].as_str().unwrap_or_default().to_owned();
        // Every authenticated user is in `system:authenticated` (upstream's group adder).
        if !groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
            && name != "system:anonymous"
        {
            groups.push("system:authenticated".to_owned());
        }
        let extra = user["extra"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), strings(v)))
            .collect();
        Outcome::User(User {
            name,
            uid: user["uid"].as_str().unwrap_or_default().to_owned(),
            groups,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    /// A webhook on loopback (plain HTTP: the transport is `remote`'s) answering TokenReviews
    /// by `answer`, keeping the reviews it was sent.
    async fn webhook(
        answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<Value>>>) {
        crate::test_support::review_webhook("/authenticate", answer).await
    }

    fn authenticator(url: &str, version: Version, ttl: Duration) -> TokenWebhook {
        let service = Service::new(capstan_client::credentials::ServiceKubeconfig {
            server: url.to_owned(),
            ..Default::default()
        })
        .unwrap();
        let mut webhook = TokenWebhook::new(service, version, vec!["https://api".into()], ttl);
        webhook.backoff = Backoff {
            initial: Duration::from_millis(1),
            steps: 2,
        };
        webhook
    }

    fn reply(review: &Value) -> (u16, Value) {
        let token = review["spec"]["token"].as_str().unwrap();
        let status = match token {
            "alice-token" => json!({
                "authenticated": true,
                "user": {"username": "alice", "uid": "42", "groups": ["devs"],
                         "extra": {"scopes": ["a", "b"]}},
            }),
            "other-audience" => json!({
                "authenticated": true,
                "user": {"username": "mallory"},
                "audiences": ["https://elsewhere"],
            }),
            "broken" => json!({"authenticated": false, "error": "backend down"}),
            "five-hundred" => return (500, json!({"kind": "Status", "message": "oops"})),
            _ => json!({"authenticated": false}),
        };
        (
            200,
            json!({"apiVersion": review["apiVersion"], "kind": "TokenReview", "status": status}),
        )
    }

    #[tokio::test]
    async fn reviews_carry_the_token_and_audiences_and_answers_name_the_user() {
        let (url, seen) = webhook(reply).await;
        let webhook = authenticator(&url, Version::V1, Duration::from_secs(120));
        assert_eq!(
            webhook.authenticate("alice-token").await,
            Outcome::User(User {
                name: "alice".into(),
                uid: "42".into(),
                groups: vec!["devs".into(), "system:authenticated".into()],
                extra: [("scopes".to_owned(), vec!["a".to_owned(), "b".to_owned()])].into(),
            })
        );
        let sent = seen.lock().unwrap()[0].clone();
        assert_eq!(
            sent,
            json!({
                "kind": "TokenReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null},
                "spec": {"token": "alice-token", "audiences": ["https://api"]},
                "status": {"user": {}},
            })
        );
        assert_eq!(
            webhook.authenticate("nobody").await,
            Outcome::Unauthenticated
        );
        // A user for other audiences is no user of this API.
        assert_eq!(
            webhook.authenticate("other-audience").await,
            Outcome::Unauthenticated
        );
        // v1beta1 is spoken when asked for.
        let beta = authenticator(&url, Version::V1beta1, Duration::ZERO);
        assert!(matches!(
            beta.authenticate("alice-token").await,
            Outcome::User(_)
        ));
        assert_eq!(
            seen.lock().unwrap().last().unwrap()["apiVersion"],
            "authentication.k8s.io/v1beta1"
        );
    }

    #[tokio::test]
    async fn users_and_refusals_are_cached_by_digest_but_failures_are_not() {
        let (url, seen) = webhook(reply).await;
        let webhook = authenticator(&url, Version::V1, Duration::from_secs(120));
        let count = || seen.lock().unwrap().len();
        for _ in 0..3 {
            assert!(matches!(
                webhook.authenticate("alice-token").await,
                Outcome::User(_)
            ));
            assert_eq!(
                webhook.authenticate("nobody").await,
                Outcome::Unauthenticated
            );
        }
        assert_eq!(count(), 2, "one review per token");
        // The token is never kept, only a digest.
        {
            let cache = webhook.cache.lock().unwrap();
            assert!(cache.contains_key(&webhook.key("alice-token")));
            assert!(!format!("{:?}", cache.keys().collect::<Vec<_>>()).contains("alice"));
        }
        // Errors: the webhook's own, and a 500 retried (twice here), asked again each time.
        assert_eq!(
            webhook.authenticate("broken").await,
            Outcome::Failed("backend down".into())
        );
        assert_eq!(
            webhook.authenticate("broken").await,
            Outcome::Failed("backend down".into())
        );
        assert_eq!(count(), 4);
        assert_eq!(
            webhook.authenticate("five-hundred").await,
            Outcome::Failed("oops".into())
        );
        assert_eq!(count(), 6);
        // A zero TTL caches nothing.
        let uncached = authenticator(&url, Version::V1, Duration::ZERO);
        uncached.authenticate("nobody").await;
        uncached.authenticate("nobody").await;
        assert_eq!(count(), 8);
    }

    #[tokio::test]
    async fn an_unreachable_webhook_is_a_failure() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let webhook = authenticator(
            &format!("http://127.0.0.1:{port}/"),
            Version::V1,
            Duration::from_secs(120),
        );
        let Outcome::Failed(error) = webhook.authenticate("t").await else {
            panic!("expected a failure");
        };
        assert!(error.contains("connection refused"), "{error}");
        assert!(webhook.cache.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_webhook_is_asked_last_and_its_failures_are_unauthenticated() {
        use crate::authn::{Authenticated, Authenticator, TokenFile};
        let (url, seen) = webhook(reply).await;
        let authenticator = Authenticator {
            tokens: TokenFile::parse("tok,carol,1\n").unwrap(),
            webhook: Some(Arc::new(authenticator(
                &url,
                Version::V1,
                Duration::from_secs(120),
            ))),
            ..Authenticator::default()
        };
        let name = async |header: &str| match authenticator
            .authenticate(None, Some(header), "/api", None)
            .await
        {
            Authenticated::User(user) => user.name,
            Authenticated::Rejected => "REJECTED".into(),
        };
        assert_eq!(name("Bearer tok").await, "carol");
        assert!(
            seen.lock().unwrap().is_empty(),
            "the token file answered first"
        );
        assert_eq!(name("Bearer alice-token").await, "alice");
        assert_eq!(name("Bearer nobody").await, "REJECTED");
        assert_eq!(name("Bearer broken").await, "REJECTED");
        assert_eq!(name("Bearer five-hundred").await, "REJECTED");
    }

    #[test]
    fn versions_are_v1_and_v1beta1() {
        assert_eq!(Version::parse("v1"), Ok(Version::V1));
        assert_eq!(Version::parse("v1beta1"), Ok(Version::V1beta1));
        assert_eq!(
            Version::parse("v2").unwrap_err(),
            "unsupported authentication webhook version \"v2\", supported versions are \"v1\", \"v1beta1\""
        );
    }
}
