//! Authentication: who a request comes from.
//!
//! As upstream's union authenticator: a verified client certificate wins (user = CN, groups = O);
//! otherwise a bearer token from the static token file (`--token-auth-file`, kube-apiserver's CSV
//! format `token,user,uid,"group1,group2"`), a service account token this server issued
//! ([`crate::authn::serviceaccount`]), a bootstrap token ([`crate::authn::bootstrap`]), an
//! external issuer's JWT ([`crate::authn::jwt`]: `--oidc-*`, `--authentication-config`) or one
//! the token review webhook vouches for ([`crate::authn::webhook`], asked last as upstream);
//! otherwise the request is anonymous, if anonymous requests are allowed there
//! ([`Anonymous`]: `--anonymous-auth`, or the configuration file's `anonymous` paths). A bearer
//! token that matches nothing fails the request with 401 whatever its path.

pub(crate) mod bootstrap;
pub mod jwt;
pub(crate) mod serviceaccount;
pub(crate) mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Who made a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The user name (`system:anonymous` without credentials).
    pub name: String,
    /// The user's unique id, when the authenticator knows one (a service account's uid).
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Further facts the authenticator attached (a service account token's pod and
    /// credential id, under upstream's `authentication.kubernetes.io/...` keys).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    pub fn anonymous() -> Self {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }
    }

    pub(crate) fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }

    /// The identity a verified client certificate carries: user = CN, groups = O.
    pub fn from_certificate(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())?
            .to_owned();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_owned))
            .collect();
        groups.push("system:authenticated".into());
        Some(User {
            name,
            groups,
            ..User::default()
        })
    }
}

/// A token file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("cannot read token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("token file line {line}: {reason}")]
    Invalid {
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The static bearer tokens of `--token-auth-file`.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    users: HashMap<String, User>,
}

/// Splits one CSV record, honouring double quotes (`""` inside quotes is a quote).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        let field = fields.last_mut().ok_or("empty record")?;
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            (',', false) => fields.push(String::new()),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    Ok(fields)
}

impl TokenFile {
    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let mut users = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let invalid = |reason: String| TokenFileError::Invalid {
                line: line_no,
                reason,
            };
            let fields = csv_fields(trimmed).map_err(invalid)?;
            if fields.len() < 3 {
                return Err(invalid(format!(
                    "expected token,user,uid[,\"groups\"], found {} field(s)",
                    fields.len()
                )));
            }
            let (token, name) = (fields[0].trim(), fields[1].trim());
            if token.is_empty() || name.is_empty() {
                return Err(invalid("token and user must not be empty".into()));
            }
            let mut groups: Vec<String> = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            groups.push("system:authenticated".into());
            let user = User {
                name: name.to_owned(),
                uid: fields[2].trim().to_owned(),
                groups,
                ..User::default()
            };
            if users.insert(token.to_owned(), user).is_some() {
                return Err(invalid("duplicate token".into()));
            }
        }
        Ok(TokenFile { users })
    }

    /// Reads and parses a token file.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The user a bearer token belongs to.
    pub(crate) fn user(&self, token: &str) -> Option<&User> {
        // Without a file there is nothing to find, and hashing a long JWT is not free.
        if self.users.is_empty() {
            return None;
        }
        self.users.get(token)
    }
}

/// Compares two byte strings in time that depends only on their lengths (secrets: join
/// tokens, bootstrap tokens, node passwords).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The outcome of authenticating one request.
#[derive(Debug)]
pub(crate) enum Authenticated {
    /// A known user, or the anonymous one.
    User(User),
    /// Credentials were offered and are wrong: 401.
    Rejected,
}

/// How the server authenticates beyond certificates and its own tokens: upstream's
/// `--oidc-*`, `--authentication-config` and `--anonymous-auth`.
#[derive(Clone, Debug, Default)]
pub struct AuthenticationOptions {
    /// The `--oidc-*` flags.
    pub oidc: jwt::OidcFlags,
    /// `--authentication-config`: an `AuthenticationConfiguration` file, re-read when it
    /// changes.
    pub config_file: Option<PathBuf>,
    /// `--anonymous-auth`, when given (default: anonymous requests allowed).
    pub anonymous_auth: Option<bool>,
}

/// Which requests without credentials are taken as `system:anonymous`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Anonymous {
    enabled: bool,
    /// The only paths allowed, when not empty.
    paths: Vec<String>,
}

impl Default for Anonymous {
    fn default() -> Self {
        Anonymous {
            enabled: true,
            paths: Vec::new(),
        }
    }
}

impl Anonymous {
    fn allows(&self, path: &str) -> bool {
        self.enabled && (self.paths.is_empty() || self.paths.iter().any(|p| p == path))
    }
}

/// The JWT authenticators in use, replaced whole when the configuration file changes.
pub(crate) type JwtAuthenticators = std::sync::RwLock<Arc<Vec<Arc<jwt::JwtAuthenticator>>>>;

impl AuthenticationOptions {
    /// The JWT authenticators and the anonymous setting these options make, refusing what
    /// upstream refuses (`disallowed`: the service account issuers, which no JWT issuer may
    /// claim).
    pub(crate) fn build(
        &self,
        disallowed: &[&str],
    ) -> Result<(Vec<Arc<jwt::JwtAuthenticator>>, Anonymous), String> {
        let (config, algorithms) = match &self.config_file {
            Some(_) if self.oidc.any() => {
                return Err(
                    "authentication-config file and oidc-* flags are mutually exclusive".into(),
                );
            }
            Some(path) => (
                jwt::AuthenticationConfiguration::load(path)?,
                // Any allowed algorithm, as upstream takes for the file's issuers.
                jwt::all_algorithms(),
            ),
            None if self.oidc.any() => (
                jwt::AuthenticationConfiguration {
                    jwt: vec![self.oidc.to_config()?],
                    ..Default::default()
                },
                jwt::signing_algorithms(&self.oidc.signing_algs)?,
            ),
            None => (jwt::AuthenticationConfiguration::default(), Vec::new()),
        };
        let compiled = jwt::compile(&config, disallowed, &algorithms)?;
        let anonymous = match (&compiled.anonymous, self.anonymous_auth) {
            (Some(_), Some(_)) => {
                return Err("invalid authentication configuration: anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file".into());
            }
            (Some(file), None) => Anonymous {
                enabled: file.enabled,
                paths: file.conditions.iter().map(|c| c.path.clone()).collect(),
            },
            (None, flag) => Anonymous {
                enabled: flag.unwrap_or(true),
                paths: Vec::new(),
            },
        };
        Ok((compiled.authenticators, anonymous))
    }
}

/// How often `--authentication-config` is re-read (upstream's interval).
const CONFIG_RELOAD: std::time::Duration = std::time::Duration::from_secs(60);

impl Authenticator {
    /// Re-reads the authentication configuration file every [`CONFIG_RELOAD`] while the
    /// authenticator lives: a changed file that validates replaces the JWT authenticators; one
    /// that does not (or that changes `anonymous`, fixed at start as upstream's) is logged and
    /// the current ones stay.
    pub(crate) fn watch_config(self: &Arc<Self>, options: AuthenticationOptions) {
        let Some(path) = options.config_file.clone() else {
            return;
        };
        let authenticator = Arc::downgrade(self);
        let mut seen = std::fs::read_to_string(&path).unwrap_or_default();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CONFIG_RELOAD).await;
                let Some(authenticator) = authenticator.upgrade() else {
                    return;
                };
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                if text == seen {
                    continue;
                }
                seen = text;
                match authenticator.reload(&options) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "reloaded authentication config")
                    }
                    Err(error) => tracing::error!(%error, "failed to reload authentication config"),
                }
            }
        });
    }

    /// Builds the JWT authenticators of `options` again and puts them in place.
    fn reload(&self, options: &AuthenticationOptions) -> Result<(), String> {
        let (issuers, anonymous) = options.build(&[serviceaccount::ISSUER])?;
        if anonymous != self.anonymous {
            return Err("anonymous: Forbidden: changed from initial configuration file".into());
        }
        *self.jwt.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(issuers);
        Ok(())
    }
}

/// Every way a request may authenticate, in upstream's order: a verified client certificate,
/// then bearer tokens (the static token file, then service account tokens, then bootstrap
/// tokens, then external issuers' JWTs), else anonymous where allowed.
#[derive(Debug, Default)]
pub(crate) struct Authenticator {
    /// `--token-auth-file`.
    pub tokens: TokenFile,
    /// Service account tokens (JWTs this server issued).
    pub service_accounts: Option<std::sync::Arc<crate::authn::serviceaccount::TokenAuthority>>,
    /// The Secrets bootstrap tokens are checked against.
    pub bootstrap_secrets: Option<std::sync::Arc<crate::registry::Registry>>,
    /// External issuers' JWT authenticators.
    pub jwt: JwtAuthenticators,
    /// Where requests without credentials are anonymous.
    pub anonymous: Anonymous,
    /// Tokens that authenticated lately.
    pub cache: TokenCache,
    /// The token review webhook (`--authentication-token-webhook-config-file`), asked last.
    pub webhook: Option<std::sync::Arc<crate::authn::webhook::TokenWebhook>>,
}

/// How long a token that authenticated is taken at its word (upstream's token success cache
/// TTL, `--authentication-token-cache-ttl`'s 10 s; failures are not cached).
const TOKEN_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// The most tokens remembered.
const TOKEN_CACHE_ENTRIES: usize = 65_536;

/// The users of the bearer tokens (service account and bootstrap tokens) that authenticated
/// in the last [`TOKEN_CACHE_TTL`], by the SHA-256 of the token: a request with a known token
/// skips the signature check and the lookups, as upstream's cached token authenticator does.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    users: std::sync::Mutex<HashMap<[u8; 32], (User, std::time::Instant)>>,
}

fn token_digest(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

impl TokenCache {
    /// The user of `token` and until when it stands, if it authenticated lately.
    fn get(&self, token: &str) -> Option<(User, std::time::Instant)> {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users
            .get(&token_digest(token))
            .filter(|(_, until)| *until > std::time::Instant::now())
            .map(|(user, until)| (user.clone(), *until))
    }

    /// Remembers that `token` is `user`'s; returns until when.
    fn put(&self, token: &str, user: &User) -> std::time::Instant {
        let now = std::time::Instant::now();
        let until = now + TOKEN_CACHE_TTL;
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if users.len() >= TOKEN_CACHE_ENTRIES {
            users.retain(|_, (_, until)| *until > now);
            if users.len() >= TOKEN_CACHE_ENTRIES {
                users.clear();
            }
        }
        users.insert(token_digest(token), (user.clone(), until));
        until
    }
}

/// The bearer token a connection last authenticated with, and its user until the shared
/// [`TokenCache`] entry it came from expires: a client sends the same token on every request
/// of a connection, and matching it here (one comparison) skips hashing the token and the
/// shared cache's lock. It never outlives the shared entry, so a token is taken at its word no
/// longer than upstream's success cache allows. It is the connection's own (the server makes
/// one per connection and passes it in the request's extensions), so nothing is shared
/// between clients.
#[derive(Debug, Default)]
pub(crate) struct ConnectionToken {
    last: std::sync::Mutex<Option<(Box<str>, User, std::time::Instant)>>,
}

impl ConnectionToken {
    fn get(&self, token: &str) -> Option<User> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(known, _, until)| **known == *token && *until > std::time::Instant::now())
            .map(|(_, user, _)| user.clone())
    }

    fn put(&self, token: &str, user: &User, until: std::time::Instant) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((token.into(), user.clone(), until));
    }
}

impl Authenticator {
    /// Remembers a token that authenticated, in the shared cache and on its connection.
    fn remember(&self, token: &str, user: &User, connection: Option<&ConnectionToken>) {
        let until = self.cache.put(token, user);
        if let Some(connection) = connection {
            connection.put(token, user, until);
        }
    }

    /// The user of a bearer token on its own, as a TokenReview asks: the token authenticators
    /// only (no certificate, never anonymous).
    pub(crate) async fn authenticate_token(&self, token: &str) -> Option<User> {
        match self
            .authenticate(None, Some(&format!("Bearer {token}")), "", None)
            .await
        {
            Authenticated::User(user) if !user.is_anonymous() => Some(user),
            _ => None,
        }
    }

    /// Authenticates a request for `path` from its connection's certificate user and its
    /// Authorization header; `connection` remembers the connection's last token.
    pub(crate) async fn authenticate(
        &self,
        certificate_user: Option<&User>,
        authorization: Option<&str>,
        path: &str,
        connection: Option<&ConnectionToken>,
    ) -> Authenticated {
        if let Some(user) = certificate_user {
            return Authenticated::User(user.clone());
        }
        let Some(header) = authorization else {
            return if self.anonymous.allows(path) {
                Authenticated::User(User::anonymous())
            } else {
                Authenticated::Rejected
            };
        };
        let Some(token) = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Authenticated::Rejected;
        };
        if let Some(user) = self.tokens.user(token) {
            return Authenticated::User(user.clone());
        }
        if let Some(user) = connection.and_then(|c| c.get(token)) {
            return Authenticated::User(user);
        }
        if let Some((user, until)) = self.cache.get(token) {
            if let Some(connection) = connection {
                connection.put(token, &user, until);
            }
            return Authenticated::User(user);
        }
        if let Some(authority) = &self.service_accounts {
            match authority.authenticate(token).await {
                Ok(Some(user)) => {
                    self.remember(token, &user, connection);
                    return Authenticated::User(user);
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::debug!(%reason, "service account token refused");
                }
            }
        }
        if let Some(secrets) = &self.bootstrap_secrets
            && let Some(user) = bootstrap::authenticate(secrets, token).await
        {
            self.remember(token, &user, connection);
            return Authenticated::User(user);
        }
        let issuers = self.jwt.read().unwrap_or_else(|e| e.into_inner()).clone();
        for issuer in issuers.iter() {
            match issuer.authenticate(token).await {
                Ok(Some(user)) => {
                    self.remember(token, &user, connection);
                    return Authenticated::User(user);
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::debug!(issuer = issuer.issuer(), %reason, "JWT refused");
                }
            }
        }
        if let Some(reviewer) = &self.webhook {
            match reviewer.authenticate(token).await {
                webhook::Outcome::User(user) => return Authenticated::User(user),
                webhook::Outcome::Unauthenticated => {}
                webhook::Outcome::Failed(reason) => {
                    tracing::debug!(%reason, "token review webhook failed");
                }
            }
        }
        Authenticated::Rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_as_kube_apiserver_reads_them() {
        let file = TokenFile::parse(
            "# comment\n\
             secret1,alice,uid1,\"system:masters,devs\"\n\
             \n\
             secret2,bob,uid2\n",
        )
        .unwrap();
        assert_eq!(
            file.user("secret1"),
            Some(&User {
                name: "alice".into(),
                uid: "uid1".into(),
                groups: vec![
                    "system:masters".into(),
                    "devs".into(),
                    "system:authenticated".into()
                ],
                ..User::default()
            })
        );
        assert_eq!(
            file.user("secret2").unwrap().groups,
            ["system:authenticated"]
        );
        assert_eq!(file.user("nope"), None);
    }

    #[test]
    fn malformed_token_files_name_the_line() {
        let check = |text: &str, line: usize| match TokenFile::parse(text) {
            Err(TokenFileError::Invalid { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
            other => panic!("{text:?}: expected an error on line {line}, got {other:?}"),
        };
        check("a,b\n", 1);
        check("t,u,1\nt,v,2\n", 2);
        check("ok,u,1\nt,u,1,\"open\n", 2);
        check(",u,1\n", 1);
    }

    #[test]
    fn the_token_cache_remembers_successes_by_digest_and_stays_bounded() {
        let cache = TokenCache::default();
        let user = User {
            name: "system:serviceaccount:ns:sa".into(),
            ..User::default()
        };
        assert_eq!(cache.get("t1"), None);
        cache.put("t1", &user);
        let (cached, until) = cache.get("t1").unwrap();
        assert_eq!(cached, user);
        assert!(until > std::time::Instant::now() + TOKEN_CACHE_TTL / 2);
        assert_eq!(cache.get("t2"), None);
        // The token itself is never kept, only its digest.
        let users = cache.users.lock().unwrap();
        assert!(users.contains_key(&token_digest("t1")));
        drop(users);
        for i in 0..TOKEN_CACHE_ENTRIES {
            cache.put(&format!("bulk-{i}"), &user);
        }
        assert!(cache.users.lock().unwrap().len() <= TOKEN_CACHE_ENTRIES);
    }

    #[test]
    fn a_connection_remembers_its_last_token_no_longer_than_the_shared_cache() {
        let connection = ConnectionToken::default();
        let user = User {
            name: "system:serviceaccount:ns:sa".into(),
            ..User::default()
        };
        let now = std::time::Instant::now();
        assert_eq!(connection.get("t1"), None);
        connection.put("t1", &user, now + std::time::Duration::from_secs(5));
        assert_eq!(connection.get("t1"), Some(user.clone()));
        assert_eq!(
            connection.get("t2"),
            None,
            "another token is not taken for it"
        );
        assert_eq!(connection.get("t"), None);
        // Expired with the shared entry it came from.
        connection.put("t1", &user, now);
        assert_eq!(connection.get("t1"), None);
    }

    #[tokio::test]
    async fn certificates_win_then_tokens_then_anonymous() {
        let authenticator = Authenticator {
            tokens: TokenFile::parse("tok,carol,1,grp\n").unwrap(),
            service_accounts: None,
            bootstrap_secrets: None,
            ..Default::default()
        };
        let admin = User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        let name = async |certificate: Option<&User>, header: Option<&str>| match authenticator
            .authenticate(certificate, header, "/api", None)
            .await
        {
            Authenticated::User(u) => u.name,
            Authenticated::Rejected => "REJECTED".into(),
        };
        assert_eq!(name(Some(&admin), Some("Bearer bad")).await, "system:admin");
        assert_eq!(name(None, Some("Bearer tok")).await, "carol");
        assert_eq!(name(None, Some("Bearer bad")).await, "REJECTED");
        assert_eq!(name(None, Some("Basic xyz")).await, "REJECTED");
        assert_eq!(name(None, Some("Bearer ")).await, "REJECTED");
        assert_eq!(name(None, None).await, "system:anonymous");
    }

    #[tokio::test]
    async fn anonymous_requests_are_refused_where_not_allowed() {
        let outcome = async |anonymous: Anonymous, path: &str| {
            let authenticator = Authenticator {
                anonymous,
                ..Default::default()
            };
            match authenticator.authenticate(None, None, path, None).await {
                Authenticated::User(user) => user.name,
                Authenticated::Rejected => "REJECTED".into(),
            }
        };
        assert_eq!(
            outcome(Anonymous::default(), "/api").await,
            "system:anonymous"
        );
        let off = Anonymous {
            enabled: false,
            paths: Vec::new(),
        };
        assert_eq!(outcome(off, "/healthz").await, "REJECTED");
        let livez = Anonymous {
            enabled: true,
            paths: vec!["/livez".into()],
        };
        assert_eq!(outcome(livez.clone(), "/livez").await, "system:anonymous");
        assert_eq!(outcome(livez.clone(), "/livez/ping").await, "REJECTED");
        assert_eq!(outcome(livez, "/readyz").await, "REJECTED");
    }

    #[test]
    fn a_changed_configuration_replaces_the_issuers_but_not_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("authn.yaml");
        let head =
            "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n";
        let issuer = |url: &str| {
            format!(
                "{head}jwt:\n- issuer:\n    url: {url}\n    audiences: [a]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n"
            )
        };
        std::fs::write(&file, issuer("https://one.example")).unwrap();
        let options = AuthenticationOptions {
            config_file: Some(file.clone()),
            ..Default::default()
        };
        let (issuers, anonymous) = options.build(&[]).unwrap();
        let authenticator = Authenticator {
            jwt: std::sync::RwLock::new(Arc::new(issuers)),
            anonymous,
            ..Default::default()
        };
        let current = || -> Vec<String> {
            authenticator
                .jwt
                .read()
                .unwrap()
                .iter()
                .map(|j| j.issuer().to_owned())
                .collect()
        };
        std::fs::write(&file, issuer("https://two.example")).unwrap();
        authenticator.reload(&options).unwrap();
        assert_eq!(current(), ["https://two.example"]);
        std::fs::write(&file, issuer("http://insecure.example")).unwrap();
        assert!(
            authenticator
                .reload(&options)
                .unwrap_err()
                .contains("URL scheme must be https")
        );
        assert_eq!(current(), ["https://two.example"]);
        std::fs::write(
            &file,
            format!(
                "{}anonymous:\n  enabled: false\n",
                issuer("https://three.example")
            ),
        )
        .unwrap();
        assert_eq!(
            authenticator.reload(&options).unwrap_err(),
            "anonymous: Forbidden: changed from initial configuration file"
        );
        assert_eq!(current(), ["https://two.example"]);
    }

    #[test]
    fn options_refuse_what_upstream_refuses_and_set_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("authn.yaml");
        std::fs::write(
            &file,
            "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n  conditions:\n  - path: /livez\n",
        )
        .unwrap();
        let oidc = jwt::OidcFlags {
            issuer_url: "https://issuer.example".into(),
            client_id: "c".into(),
            ..Default::default()
        };
        let both = AuthenticationOptions {
            oidc: oidc.clone(),
            config_file: Some(file.clone()),
            anonymous_auth: None,
        };
        assert_eq!(
            both.build(&[]).unwrap_err(),
            "authentication-config file and oidc-* flags are mutually exclusive"
        );
        let twice = AuthenticationOptions {
            config_file: Some(file.clone()),
            anonymous_auth: Some(false),
            ..Default::default()
        };
        assert!(
            twice
                .build(&[])
                .unwrap_err()
                .ends_with("--anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file")
        );
        let from_file = AuthenticationOptions {
            config_file: Some(file),
            ..Default::default()
        };
        let (issuers, anonymous) = from_file.build(&[]).unwrap();
        assert!(issuers.is_empty());
        assert_eq!(anonymous.paths, ["/livez"]);
        let flags = AuthenticationOptions {
            oidc,
            anonymous_auth: Some(false),
            ..Default::default()
        };
        let (issuers, anonymous) = flags.build(&[]).unwrap();
        assert_eq!(issuers[0].issuer(), "https://issuer.example");
        assert!(!anonymous.enabled);
        let (issuers, anonymous) = AuthenticationOptions::default().build(&[]).unwrap();
        assert!(issuers.is_empty());
        assert_eq!(anonymous, Anonymous::default());
    }
}
