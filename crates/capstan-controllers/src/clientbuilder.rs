//! Per-controller credentials: upstream's `--use-service-account-credentials` and the dynamic
//! client builder of `k8s.io/controller-manager/pkg/clientbuilder`. Each controller gets a
//! client that authenticates as the service account `kube-system/<account>` (upstream's
//! account name for that controller, which the bootstrap policy binds the role
//! `system:controller:<account>` to). The controller manager's own client makes the account
//! when it is missing and asks the TokenRequest subresource (`serviceaccounts/token`) for a
//! token bound to nothing, for the API server's own audiences, valid for an hour; a
//! [`TokenSource`] renews it once 80% of its life has passed (upstream's 20% leeway), sooner
//! when the API server answers 401 to a request that carried it (the account was recreated,
//! say), and retries with backoff when the request fails. The controllers' clients share the
//! controller manager's server address and the certificate authorities it trusts, never its
//! own client certificate or token.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{AUTHORIZATION, USER_AGENT};
use http::{HeaderValue, Request, Response, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::runtime::{AbortOnDrop, Task};

/// The namespace of the controllers' service accounts.
pub const NAMESPACE: &str = "kube-system";

/// How long the tokens asked for last (upstream's builder asks for an hour).
pub const TOKEN_SECONDS: i64 = 3600;

/// The shortest time between two token requests that a 401 answer causes.
const MIN_REISSUE: Duration = Duration::from_secs(10);

/// How the controllers authenticate to the API server.
#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// Every controller uses the controller manager's own client (and credential).
    #[default]
    Shared,
    /// Each controller uses the tokens of its own service account. The settings are the
    /// controller manager's (server, trusted authorities, headers); its credential is left out.
    ServiceAccounts(Box<kube::Config>),
}

/// When to ask for a new token, given the life a new one has: after 80% of it.
pub fn refresh_after(life: Duration) -> Duration {
    life.mul_f64(0.8)
}

/// The wait before the `failures`th retry of a failed token request: half a second doubling
/// up to half a minute.
pub fn retry_after(failures: u32) -> Duration {
    let millis = 500u64.saturating_mul(1u64 << failures.saturating_sub(1).min(16));
    Duration::from_millis(millis.min(30_000))
}

/// The current token of one service account, kept fresh by [`TokenSource::run`].
pub struct TokenSource {
    account: String,
    root: Client,
    header: watch::Sender<Option<HeaderValue>>,
    rejected: Notify,
    /// The shortest time between two token requests that a 401 answer causes.
    min_reissue: Duration,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("account", &self.account)
            .field("has_token", &self.header.borrow().is_some())
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// The token source of `kube-system/<account>`, asking through `root` (the controller
    /// manager's client).
    pub fn new(root: Client, account: &str) -> Arc<TokenSource> {
        Arc::new(TokenSource {
            account: account.to_owned(),
            root,
            header: watch::Sender::new(None),
            rejected: Notify::new(),
            min_reissue: MIN_REISSUE,
        })
    }

    /// The service account's name.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The `Authorization` header of the current token, once there is one.
    pub fn header(&self) -> Option<HeaderValue> {
        self.header.borrow().clone()
    }

    /// Done once a first token is held.
    pub async fn ready(&self) {
        let mut receiver = self.header.subscribe();
        // The sender lives as long as `self`, so the wait cannot fail.
        let _ = receiver.wait_for(Option::is_some).await;
    }

    /// Notes that the API server refused a request carrying the current token.
    fn rejected(&self) {
        self.rejected.notify_one();
    }

    /// Creates the service account unless it exists (as upstream's builder does, with the
    /// controller manager's own credential).
    async fn ensure_account(&self) -> Result<(), kube::Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.root.clone(), NAMESPACE);
        if api.get_opt(&self.account).await?.is_some() {
            return Ok(());
        }
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(self.account.clone()),
                namespace: Some(NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &account).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// A new token and how long it is valid from now.
    async fn issue(&self) -> Result<(HeaderValue, Duration), TokenError> {
        self.ensure_account().await?;
        let api: Api<ServiceAccount> = Api::namespaced(self.root.clone(), NAMESPACE);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(TOKEN_SECONDS),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let answer = api
            .create_token_request(&self.account, &PostParams::default(), &request)
            .await?;
        let status = answer.status.ok_or(TokenError::Empty)?;
        if status.token.is_empty() {
            return Err(TokenError::Empty);
        }
        let remaining = status
            .expiration_timestamp
            .0
            .duration_since(jiff::Timestamp::now());
        let life = Duration::try_from(remaining)
            .ok()
            .filter(|life| !life.is_zero())
            .ok_or(TokenError::Expired)?;
        let mut header = HeaderValue::from_str(&format!("Bearer {}", status.token))
            .map_err(|_| TokenError::Malformed)?;
        header.set_sensitive(true);
        Ok((header, life))
    }

    /// Keeps a current token until dropped: asks for one, then for the next after 80% of its
    /// life (or, no sooner than ten seconds after it was issued, when a request carrying it
    /// was refused as unauthenticated), retrying failures with backoff.
    pub async fn run(self: Arc<Self>) {
        let mut failures = 0;
        loop {
            match self.issue().await {
                Ok((header, life)) => {
                    failures = 0;
                    let issued = Instant::now();
                    self.header.send_replace(Some(header));
                    tracing::debug!(account = %self.account, ?life, "controller token issued");
                    tokio::select! {
                        () = tokio::time::sleep_until(issued + refresh_after(life)) => {}
                        () = self.rejected.notified() => {
                            tokio::time::sleep_until(issued + self.min_reissue).await;
                        }
                    }
                }
                Err(error) => {
                    failures += 1;
                    let delay = retry_after(failures);
                    tracing::warn!(
                        account = %self.account,
                        %error,
                        retry_in = ?delay,
                        "cannot get a token for the controller's service account"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
enum TokenError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("the TokenRequest came back without a token")]
    Empty,
    #[error("the TokenRequest came back with an expired token")]
    Expired,
    #[error("the token is not a valid header value")]
    Malformed,
}

/// Puts a [`TokenSource`]'s current token on every request.
#[derive(Clone, Debug)]
pub struct BearerLayer(pub Arc<TokenSource>);

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            source: self.0.clone(),
        }
    }
}

/// The service [`BearerLayer`] makes.
#[derive(Clone, Debug)]
pub struct Bearer<S> {
    inner: S,
    source: Arc<TokenSource>,
}

impl<S, B, RB> Service<Request<B>> for Bearer<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(header) = self.source.header() {
            request.headers_mut().insert(AUTHORIZATION, header);
        }
        let response = self.inner.call(request);
        let source = self.source.clone();
        Box::pin(async move {
            let response = response.await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                source.rejected();
            }
            Ok(response)
        })
    }
}

/// The client settings of a controller running as `account`: the controller manager's
/// settings without its credential, its User-Agent suffixed with `/<account>` (as upstream's
/// builder names the controller in it).
fn account_config(base: &kube::Config, account: &str) -> kube::Config {
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo::default();
    for (name, value) in &mut config.headers {
        if *name == USER_AGENT
            && let Ok(agent) = value.to_str()
            && let Ok(named) = HeaderValue::from_str(&format!("{agent}/{account}"))
        {
            *value = named;
        }
    }
    config
}

/// The controllers' clients: the controller manager's for all, or one per service account
/// with its token source.
pub(crate) struct Clients {
    root: Client,
    base: Option<kube::Config>,
    accounts: BTreeMap<&'static str, (Client, Arc<TokenSource>)>,
}

impl Clients {
    pub(crate) fn new(root: &Client, credentials: &Credentials) -> Clients {
        Clients {
            root: root.clone(),
            base: match credentials {
                Credentials::Shared => None,
                Credentials::ServiceAccounts(config) => Some(config.as_ref().clone()),
            },
            accounts: BTreeMap::new(),
        }
    }

    /// The client of a controller running as `account`, and the token source it waits for
    /// (none with shared credentials). Controllers of one account share its client.
    pub(crate) fn client(&mut self, account: &'static str) -> (Client, Option<Arc<TokenSource>>) {
        let Some(base) = &self.base else {
            return (self.root.clone(), None);
        };
        if let Some((client, source)) = self.accounts.get(account) {
            return (client.clone(), Some(source.clone()));
        }
        let source = TokenSource::new(self.root.clone(), account);
        let client = match kube::client::ClientBuilder::try_from(account_config(base, account)) {
            Ok(builder) => builder.with_layer(&BearerLayer(source.clone())).build(),
            Err(error) => {
                // The same settings built the controller manager's client, so this is not
                // expected; the manager's credential is the fallback (upstream's role for it
                // grants the controllers nothing they could misuse).
                tracing::error!(%account, %error, "cannot build the controller's client");
                return (self.root.clone(), None);
            }
        };
        self.accounts
            .insert(account, (client.clone(), source.clone()));
        (client, Some(source))
    }

    /// Runs every token source until the returned handles are dropped.
    pub(crate) fn start(&self) -> Vec<AbortOnDrop> {
        self.accounts
            .values()
            .map(|(_, source)| AbortOnDrop(tokio::spawn(source.clone().run())))
            .collect()
    }
}

/// `task`, started once `source` (if any) holds a first token.
pub(crate) fn after_token(task: Task, source: Option<Arc<TokenSource>>) -> Task {
    match source {
        None => task,
        Some(source) => Box::pin(async move {
            source.ready().await;
            task.await
        }),
    }
}

#[cfg(test)]
mod tests;
