//! JWT authenticators: ID tokens of an external OpenID Connect issuer, as upstream's `oidc`
//! token authenticator takes them, configured by the `--oidc-*` flags (one issuer) or by the
//! structured `AuthenticationConfiguration` file (`--authentication-config`, any number of
//! issuers, claim mappings and validation rules in CEL).
//!
//! - [`AuthenticationConfiguration`] is the file (`apiserver.config.k8s.io/v1beta1`, also
//!   `v1alpha1` and `v1`), [`OidcFlags`] the flags, which upstream turns into the same
//!   configuration (the issuer URL plus `#` prefixes usernames of any claim but `email`
//!   unless `--oidc-username-prefix` says otherwise, `-` for none).
//! - [`compile`] validates it with upstream's field errors (HTTPS issuer URLs without query,
//!   fragment or user; audiences; exactly one of claim and expression; a prefix with a claim;
//!   reserved extra keys; `claims.email_verified` read wherever `claims.email` names the user;
//!   the service account issuer refused) and compiles the expressions once.
//! - [`JwtAuthenticator::authenticate`] takes a token only when its unverified `iss` is the
//!   issuer's (so other authenticators may try the rest), then checks what go-oidc checks: an
//!   allowed signing algorithm, the signature against the issuer's JWKS (from
//!   `<issuer>/.well-known/openid-configuration`, or the `discoveryURL`, whose `issuer` must
//!   match; fetched on first use and again for an unknown key id, at most every
//!   [`REFETCH_FLOOR`]), the audience, `exp`, and `nbf` with five minutes of skew; then maps
//!   the claims to a user in upstream's order (username, groups, uid, extra, required claims,
//!   claim validation rules, user validation rules) with upstream's error texts.
//!
//! Not done: distributed claims (`_claim_names`/`_claim_sources`) for groups, and ES512
//! (the signature library has no P-521).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use capstan_api::cel::{Activation, CelValue, Expression};
use capstan_api::field::{BadValue, FieldError, Path, aggregate};
use capstan_api::strategic::json_kind as go_json_type;
use http_body_util::{BodyExt as _, Empty, Limited};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::User;

/// The `apiVersion`s of the configuration file this server reads.
const API_VERSIONS: &[&str] = &[
    "apiserver.config.k8s.io/v1alpha1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1",
];

/// How often the keys of an issuer may be fetched again for a key id they lack.
pub(crate) const REFETCH_FLOOR: Duration = Duration::from_secs(10);
/// How long a fetch from an issuer may take (upstream's HTTP client timeout).
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest discovery document or key set read.
const MAX_DOCUMENT: usize = 1 << 20;
/// The clock skew allowed on `nbf` (go-oidc's).
const NOT_BEFORE_SKEW: i64 = 5 * 60;

/// upstream's `AuthenticationConfiguration`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthenticationConfiguration {
    /// `apiserver.config.k8s.io/v1beta1` (or `v1alpha1`, `v1`).
    #[serde(default)]
    pub api_version: String,
    /// `AuthenticationConfiguration`.
    #[serde(default)]
    pub kind: String,
    /// The JWT issuers.
    #[serde(default)]
    pub jwt: Vec<JwtConfig>,
    /// Which requests without credentials are taken as `system:anonymous`.
    #[serde(default)]
    pub anonymous: Option<AnonymousConfig>,
}

/// One issuer's authenticator.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtConfig {
    /// Where tokens come from and whom they are for.
    pub issuer: IssuerConfig,
    /// Conditions a token's claims must meet.
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    /// How claims become the user.
    #[serde(default)]
    pub claim_mappings: ClaimMappings,
    /// Conditions the resulting user must meet.
    #[serde(default)]
    pub user_validation_rules: Vec<UserValidationRule>,
}

/// An issuer.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerConfig {
    /// The `iss` of its tokens, an HTTPS URL.
    #[serde(default)]
    pub url: String,
    /// Where its discovery document is, when not under `url`.
    #[serde(default, rename = "discoveryURL")]
    pub discovery_url: String,
    /// PEM certificates trusted for fetches from it (default: the host's roots).
    #[serde(default)]
    pub certificate_authority: String,
    /// The audiences a token must name one of.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// `MatchAny` (the only policy).
    #[serde(default)]
    pub audience_match_policy: String,
    /// The network the issuer is reached through (not supported).
    #[serde(default)]
    pub egress_selector_type: String,
}

/// A claim validation rule: a claim with its required value, or an expression.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimValidationRule {
    #[serde(default)]
    pub claim: String,
    #[serde(default)]
    pub required_value: String,
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: String,
}

/// The claim mappings.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMappings {
    #[serde(default)]
    pub username: PrefixedClaimOrExpression,
    #[serde(default)]
    pub groups: PrefixedClaimOrExpression,
    #[serde(default)]
    pub uid: ClaimOrExpression,
    #[serde(default)]
    pub extra: Vec<ExtraMapping>,
}

/// A claim (with a prefix) or an expression.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrefixedClaimOrExpression {
    #[serde(default)]
    pub claim: String,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub expression: String,
}

/// A claim or an expression.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimOrExpression {
    #[serde(default)]
    pub claim: String,
    #[serde(default)]
    pub expression: String,
}

/// An extra key and the expression giving its values.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtraMapping {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value_expression: String,
}

/// A user validation rule.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserValidationRule {
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: String,
}

/// Anonymous requests: off, on, or on for some paths only.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnonymousConfig {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub conditions: Vec<AnonymousCondition>,
}

/// A path anonymous requests may reach.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnonymousCondition {
    #[serde(default)]
    pub path: String,
}

impl AuthenticationConfiguration {
    /// Reads the file (YAML or JSON) at `path`.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| {
            format!(
                "failed to load authentication configuration from file {:?}: {e}",
                path.display().to_string()
            )
        })
    }

    /// Decodes the file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err("empty config data".into());
        }
        let config: AuthenticationConfiguration =
            serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if !API_VERSIONS.contains(&config.api_version.as_str())
            || config.kind != "AuthenticationConfiguration"
        {
            return Err(format!(
                "no kind {:?} is registered for version {:?}",
                config.kind, config.api_version
            ));
        }
        Ok(config)
    }
}

/// The `--oidc-*` flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OidcFlags {
    /// `--oidc-issuer-url`.
    pub issuer_url: String,
    /// `--oidc-client-id`: the one audience.
    pub client_id: String,
    /// `--oidc-ca-file`.
    pub ca_file: Option<std::path::PathBuf>,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix` (`-`: none; unset: the issuer URL and `#` for claims other
    /// than `email`).
    pub username_prefix: String,
    /// `--oidc-groups-claim`.
    pub groups_claim: String,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
    /// `--oidc-signing-algs` (default RS256).
    pub signing_algs: Vec<String>,
    /// `--oidc-required-claim`.
    pub required_claims: BTreeMap<String, String>,
}

impl OidcFlags {
    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        *self != OidcFlags::default()
    }

    /// The configuration upstream makes of the flags.
    pub fn to_config(&self) -> Result<JwtConfig, String> {
        if self.issuer_url.is_empty() || self.client_id.is_empty() {
            return Err(
                "oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set"
                    .into(),
            );
        }
        let username_claim = if self.username_claim.is_empty() {
            "sub".to_owned()
        } else {
            self.username_claim.clone()
        };
        let prefix = match self.username_prefix.as_str() {
            "-" => String::new(),
            "" if username_claim != "email" => format!("{}#", self.issuer_url),
            other => other.to_owned(),
        };
        let certificate_authority = match &self.ca_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("open {}: {e}", path.display()))?,
            None => String::new(),
        };
        let groups = if self.groups_claim.is_empty() {
            PrefixedClaimOrExpression::default()
        } else {
            PrefixedClaimOrExpression {
                claim: self.groups_claim.clone(),
                prefix: Some(self.groups_prefix.clone()),
                expression: String::new(),
            }
        };
        Ok(JwtConfig {
            issuer: IssuerConfig {
                url: self.issuer_url.clone(),
                certificate_authority,
                audiences: vec![self.client_id.clone()],
                ..IssuerConfig::default()
            },
            claim_validation_rules: self
                .required_claims
                .iter()
                .map(|(claim, value)| ClaimValidationRule {
                    claim: claim.clone(),
                    required_value: value.clone(),
                    ..ClaimValidationRule::default()
                })
                .collect(),
            claim_mappings: ClaimMappings {
                username: PrefixedClaimOrExpression {
                    claim: username_claim,
                    prefix: Some(prefix),
                    expression: String::new(),
                },
                groups,
                ..ClaimMappings::default()
            },
            user_validation_rules: Vec::new(),
        })
    }
}

/// The signing algorithms upstream allows (`--oidc-signing-algs`).
const ALLOWED_ALGORITHMS: &[&str] = &[
    "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "RS256", "RS384", "RS512",
];

/// The algorithms named, checked against upstream's allow list (ES512 is allowed and never
/// verifies: the signature library has no P-521).
pub fn signing_algorithms(names: &[String]) -> Result<Vec<Algorithm>, String> {
    let names: Vec<&str> = if names.is_empty() {
        vec!["RS256"]
    } else {
        names.iter().map(String::as_str).collect()
    };
    let mut algorithms = Vec::new();
    for name in names {
        if !ALLOWED_ALGORITHMS.contains(&name) {
            return Err(format!("oidc: unsupported signing alg: {name:?}"));
        }
        if let Ok(algorithm) = name.parse::<Algorithm>() {
            algorithms.push(algorithm);
        }
    }
    Ok(algorithms)
}

/// Every algorithm upstream allows (a configuration file's issuers take any).
pub(crate) fn all_algorithms() -> Vec<Algorithm> {
    ALLOWED_ALGORITHMS
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Validation and compilation.

/// How a claim mapping is evaluated.
enum Mapping {
    /// A claim's value, with a prefix.
    Claim { claim: String, prefix: String },
    /// A CEL expression over `claims`.
    Expression(Expression),
}

/// A compiled validation rule.
struct Rule {
    expression: Expression,
    text: String,
    message: String,
}

/// What [`compile`] accepts: the authenticators, and the anonymous setting of the file.
pub(crate) struct Compiled {
    pub authenticators: Vec<Arc<JwtAuthenticator>>,
    pub anonymous: Option<AnonymousConfig>,
}

/// Validates `config` as upstream does (`disallowed`: the service account issuers) and
/// compiles its issuers' authenticators, each accepting `algorithms`.
pub(crate) fn compile(
    config: &AuthenticationConfiguration,
    disallowed: &[&str],
    algorithms: &[Algorithm],
) -> Result<Compiled, String> {
    let root = Path::new("jwt");
    let mut errors = Vec::new();
    if config.jwt.len() > 64 {
        errors.push(FieldError::too_many(&root, config.jwt.len(), 64));
    }
    let mut authenticators = Vec::new();
    let mut issuers = Vec::new();
    let mut discovery_urls = Vec::new();
    for (index, jwt) in config.jwt.iter().enumerate().take(64) {
        let path = root.index(index);
        let mut own = Vec::new();
        let compiled = compile_one(jwt, &path, disallowed, algorithms, &mut own);
        if issuers.contains(&jwt.issuer.url) {
            own.push(FieldError::duplicate(
                &path.child("issuer").child("url"),
                jwt.issuer.url.as_str(),
            ));
        }
        issuers.push(jwt.issuer.url.clone());
        if !jwt.issuer.discovery_url.is_empty() {
            if discovery_urls.contains(&jwt.issuer.discovery_url) {
                own.push(FieldError::duplicate(
                    &path.child("issuer").child("discoveryURL"),
                    jwt.issuer.discovery_url.as_str(),
                ));
            }
            discovery_urls.push(jwt.issuer.discovery_url.clone());
        }
        match compiled {
            Some(authenticator) if own.is_empty() => authenticators.push(Arc::new(authenticator)),
            _ => errors.extend(own),
        }
    }
    if let Some(anonymous) = &config.anonymous
        && !anonymous.enabled
        && !anonymous.conditions.is_empty()
    {
        errors.push(FieldError::invalid(
            &Path::new("anonymous").child("conditions"),
            BadValue::Str(format!("{:?}", anonymous.conditions)),
            "enabled should be set to true when conditions are defined",
        ));
    }
    if !errors.is_empty() {
        return Err(format!(
            "invalid authentication configuration: {}",
            aggregate(&errors)
        ));
    }
    Ok(Compiled {
        authenticators,
        anonymous: config.anonymous.clone(),
    })
}

fn compile_expression(text: &str, path: &Path, errors: &mut Vec<FieldError>) -> Option<Expression> {
    match Expression::compile(text) {
        Ok(expression) => Some(expression),
        Err(reason) => {
            errors.push(FieldError::invalid(
                path,
                text,
                &format!("compilation failed: {reason}"),
            ));
            None
        }
    }
}

fn validate_url(url: &str, disallowed: &[&str], path: &Path, errors: &mut Vec<FieldError>) {
    if disallowed.contains(&url) {
        let mut sorted = disallowed.to_vec();
        sorted.sort_unstable();
        errors.push(FieldError::invalid(
            path,
            url,
            &format!(
                "URL must not overlap with disallowed issuers: [{}]",
                sorted.join(" ")
            ),
        ));
    }
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => {
            errors.push(FieldError::invalid(path, url, &e.to_string()));
            return;
        }
    };
    let checks = [
        (parsed.scheme() != "https", "URL scheme must be https"),
        (
            !parsed.username().is_empty() || parsed.password().is_some(),
            "URL must not contain a username or password",
        ),
        (
            parsed.query().is_some_and(|q| !q.is_empty()),
            "URL must not contain a query",
        ),
        (
            parsed.fragment().is_some_and(|f| !f.is_empty()),
            "URL must not contain a fragment",
        ),
    ];
    for (failed, detail) in checks {
        if failed {
            errors.push(FieldError::invalid(path, url, detail));
        }
    }
}

fn compile_one(
    config: &JwtConfig,
    path: &Path,
    disallowed: &[&str],
    algorithms: &[Algorithm],
    errors: &mut Vec<FieldError>,
) -> Option<JwtAuthenticator> {
    let issuer = &config.issuer;
    let issuer_path = path.child("issuer");
    if issuer.url.is_empty() {
        errors.push(FieldError::required(&issuer_path.child("url"), ""));
    } else {
        validate_url(&issuer.url, disallowed, &issuer_path.child("url"), errors);
    }
    if !issuer.discovery_url.is_empty() {
        let discovery_path = issuer_path.child("discoveryURL");
        if !issuer.url.is_empty()
            && issuer.url.trim_end_matches('/') == issuer.discovery_url.trim_end_matches('/')
        {
            errors.push(FieldError::invalid(
                &discovery_path,
                issuer.discovery_url.as_str(),
                "discoveryURL must be different from URL",
            ));
        }
        validate_url(&issuer.discovery_url, &[], &discovery_path, errors);
    }
    let audiences_path = issuer_path.child("audiences");
    if issuer.audiences.is_empty() {
        errors.push(FieldError::required(
            &audiences_path,
            &format!("at least one {audiences_path} is required"),
        ));
    }
    for (index, audience) in issuer.audiences.iter().enumerate() {
        if audience.is_empty() {
            errors.push(FieldError::required(&audiences_path.index(index), ""));
        }
        if issuer.audiences[..index].contains(audience) {
            errors.push(FieldError::duplicate(
                &audiences_path.index(index),
                audience.as_str(),
            ));
        }
    }
    let policy_path = issuer_path.child("audienceMatchPolicy");
    let policy = issuer.audience_match_policy.as_str();
    if issuer.audiences.len() > 1 && policy != "MatchAny" {
        errors.push(FieldError::invalid(
            &policy_path,
            policy,
            "audienceMatchPolicy must be MatchAny for multiple audiences",
        ));
    }
    if issuer.audiences.len() == 1 && !policy.is_empty() && policy != "MatchAny" {
        errors.push(FieldError::invalid(
            &policy_path,
            policy,
            "audienceMatchPolicy must be empty or MatchAny for single audience",
        ));
    }
    let mut roots = None;
    if !issuer.certificate_authority.is_empty() {
        match capstan_client::tls::client_config_trusting(issuer.certificate_authority.as_bytes()) {
            Ok(config) => roots = Some(config),
            Err(reason) => errors.push(FieldError::invalid(
                &issuer_path.child("certificateAuthority"),
                "<omitted>",
                &reason,
            )),
        }
    }
    if !issuer.egress_selector_type.is_empty() {
        errors.push(FieldError::invalid(
            &issuer_path.child("egressSelectorType"),
            issuer.egress_selector_type.as_str(),
            "egress selector is not supported when StructuredAuthenticationConfigurationEgressSelector feature gate is disabled",
        ));
    }

    // Claim validation rules.
    let rules_path = path.child("claimValidationRules");
    let mut required_claims = Vec::new();
    let mut claim_rules = Vec::new();
    let mut uses_email_verified = false;
    for (index, rule) in config.claim_validation_rules.iter().enumerate() {
        let path = rules_path.index(index);
        match (rule.claim.is_empty(), rule.expression.is_empty()) {
            (false, false) => errors.push(FieldError::invalid(
                &path,
                rule.claim.as_str(),
                "claim and expression can't both be set",
            )),
            (true, true) => errors.push(FieldError::required(
                &path,
                "claim or expression is required",
            )),
            (false, true) => {
                if !rule.message.is_empty() {
                    errors.push(FieldError::invalid(
                        &path.child("message"),
                        rule.message.as_str(),
                        "may not be specified when claim is set",
                    ));
                }
                if required_claims.iter().any(|(c, _)| *c == rule.claim) {
                    errors.push(FieldError::duplicate(
                        &path.child("claim"),
                        rule.claim.as_str(),
                    ));
                }
                required_claims.push((rule.claim.clone(), rule.required_value.clone()));
            }
            (true, false) => {
                if !rule.required_value.is_empty() {
                    errors.push(FieldError::invalid(
                        &path.child("requiredValue"),
                        rule.required_value.as_str(),
                        "may not be specified when expression is set",
                    ));
                }
                if claim_rules.iter().any(|r: &Rule| r.text == rule.expression) {
                    errors.push(FieldError::duplicate(
                        &path.child("expression"),
                        rule.expression.as_str(),
                    ));
                    continue;
                }
                uses_email_verified |= selects(&rule.expression, "claims", "email_verified");
                if let Some(expression) =
                    compile_expression(&rule.expression, &path.child("expression"), errors)
                {
                    claim_rules.push(Rule {
                        expression,
                        text: rule.expression.clone(),
                        message: rule.message.clone(),
                    });
                }
            }
        }
    }

    // Claim mappings.
    let mappings = &config.claim_mappings;
    let mappings_path = path.child("claimMappings");
    let username = prefixed(
        &mappings.username,
        &mappings_path.child("username"),
        true,
        errors,
    );
    let uses_email = selects(&mappings.username.expression, "claims", "email");
    uses_email_verified |= selects(&mappings.username.expression, "claims", "email_verified");
    let groups = prefixed(
        &mappings.groups,
        &mappings_path.child("groups"),
        false,
        errors,
    );
    let uid_path = mappings_path.child("uid");
    let uid = match (
        mappings.uid.claim.is_empty(),
        mappings.uid.expression.is_empty(),
    ) {
        (false, false) => {
            errors.push(FieldError::invalid(
                &uid_path,
                "",
                "claim and expression can't both be set",
            ));
            None
        }
        (false, true) => Some(Mapping::Claim {
            claim: mappings.uid.claim.clone(),
            prefix: String::new(),
        }),
        (true, false) => compile_expression(
            &mappings.uid.expression,
            &uid_path.child("expression"),
            errors,
        )
        .map(Mapping::Expression),
        (true, true) => None,
    };
    let mut extra = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for (index, mapping) in mappings.extra.iter().enumerate() {
        let path = mappings_path.child("extra").index(index);
        let key_path = path.child("key");
        let key = mapping.key.as_str();
        validate_extra_key(key, &key_path, errors);
        if keys.contains(&key) {
            errors.push(FieldError::duplicate(&key_path, key));
            continue;
        }
        keys.push(key);
        if mapping.value_expression.is_empty() {
            errors.push(FieldError::required(&path.child("valueExpression"), ""));
            continue;
        }
        uses_email_verified |= selects(&mapping.value_expression, "claims", "email_verified");
        if let Some(expression) = compile_expression(
            &mapping.value_expression,
            &path.child("valueExpression"),
            errors,
        ) {
            extra.push((key.to_owned(), expression, mapping.value_expression.clone()));
        }
    }
    if uses_email && !uses_email_verified {
        errors.push(FieldError::invalid(
            &mappings_path.child("username").child("expression"),
            mappings.username.expression.as_str(),
            "claims.email_verified must be used in claimMappings.username.expression or claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when claims.email is used in claimMappings.username.expression",
        ));
    }

    // User validation rules.
    let mut user_rules: Vec<Rule> = Vec::new();
    for (index, rule) in config.user_validation_rules.iter().enumerate() {
        let path = path
            .child("userValidationRules")
            .index(index)
            .child("expression");
        if rule.expression.is_empty() {
            errors.push(FieldError::required(&path, ""));
            continue;
        }
        if user_rules.iter().any(|r| r.text == rule.expression) {
            errors.push(FieldError::duplicate(&path, rule.expression.as_str()));
            continue;
        }
        if let Some(expression) = compile_expression(&rule.expression, &path, errors) {
            user_rules.push(Rule {
                expression,
                text: rule.expression.clone(),
                message: rule.message.clone(),
            });
        }
    }

    let Some(Some(username)) = username else {
        return None;
    };
    let discovery = if issuer.discovery_url.is_empty() {
        format!(
            "{}/.well-known/openid-configuration",
            issuer.url.trim_end_matches('/')
        )
    } else {
        issuer.discovery_url.clone()
    };
    Some(JwtAuthenticator {
        issuer: issuer.url.clone(),
        discovery,
        audiences: issuer.audiences.clone(),
        algorithms: algorithms.to_vec(),
        username,
        groups: groups.flatten(),
        uid,
        extra,
        required_claims,
        claim_rules,
        user_rules,
        fetcher: Fetcher::new(roots),
        keys: RwLock::new(None),
        fetching: tokio::sync::Mutex::new(None),
    })
}

/// A username or groups mapping: `Some(None)` when (optional and) absent.
fn prefixed(
    mapping: &PrefixedClaimOrExpression,
    path: &Path,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<Option<Mapping>> {
    match (mapping.claim.is_empty(), mapping.expression.is_empty()) {
        (false, false) => {
            errors.push(FieldError::invalid(
                path,
                "",
                "claim and expression can't both be set",
            ));
            None
        }
        (true, true) if required => {
            errors.push(FieldError::required(
                path,
                "claim or expression is required",
            ));
            None
        }
        (true, true) => Some(None),
        (true, false) => {
            if let Some(prefix) = &mapping.prefix {
                errors.push(FieldError::invalid(
                    &path.child("prefix"),
                    prefix.as_str(),
                    "may not be specified when expression is set",
                ));
            }
            compile_expression(&mapping.expression, &path.child("expression"), errors)
                .map(|e| Some(Mapping::Expression(e)))
        }
        (false, true) => match &mapping.prefix {
            None => {
                errors.push(FieldError::required(
                    &path.child("prefix"),
                    "prefix is required when claim is set. It can be set to an empty string to disable prefixing",
                ));
                None
            }
            Some(prefix) => Some(Some(Mapping::Claim {
                claim: mapping.claim.clone(),
                prefix: prefix.clone(),
            })),
        },
    }
}

/// An extra key must be a lower-case, domain-prefixed path outside Kubernetes' domains.
fn validate_extra_key(key: &str, path: &Path, errors: &mut Vec<FieldError>) {
    errors.extend(capstan_api::names::validate_domain_prefixed_path(path, key));
    let domain = key
        .split_once('/')
        .map(|(domain, _)| domain)
        .unwrap_or_default();
    if key != key.to_lowercase() {
        errors.push(FieldError::invalid(path, key, "must be lowercase"));
    }
    let reserved = |suffix: &str| domain == suffix || domain.ends_with(&format!(".{suffix}"));
    if reserved("kubernetes.io") || reserved("k8s.io") {
        errors.push(FieldError::invalid(
            path,
            key,
            "k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use",
        ));
    }
}

/// Whether `expression` selects `field` of the variable `variable` (`claims.email`,
/// `claims.?email`, `claims["email"]`): upstream walks the compiled expression; this reads
/// its tokens, which finds the same selections outside string literals.
fn selects(expression: &str, variable: &str, field: &str) -> bool {
    let bytes = expression.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            if b == b'\\' {
                i += 2;
                continue;
            }
            if b == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if b == b'"' || b == b'\'' {
            quote = Some(b);
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !ident(bytes[i - 1]);
        if starts_word && expression[i..].starts_with(variable) {
            let mut j = i + variable.len();
            if j < bytes.len() && ident(bytes[j]) {
                i = j;
                continue;
            }
            while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                j += 1;
            }
            let rest = &expression[j..];
            let name = if let Some(after) = rest.strip_prefix(".?").or(rest.strip_prefix('.')) {
                let after = after.trim_start();
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                Some(&after[..end.unwrap_or(after.len())])
            } else if let Some(after) = rest.strip_prefix('[') {
                let after = after.trim_start();
                after
                    .strip_prefix('"')
                    .and_then(|a| a.split('"').next())
                    .or_else(|| after.strip_prefix('\'').and_then(|a| a.split('\'').next()))
            } else {
                None
            };
            if name == Some(field) {
                return true;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Fetching the issuer's keys.

type HttpsClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

/// GETs of an issuer's documents, trusting the configured CA (else the host's roots).
struct Fetcher {
    client: Result<HttpsClient, String>,
}

impl Fetcher {
    fn new(roots: Option<rustls::ClientConfig>) -> Fetcher {
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match roots {
            Some(mut config) => {
                // The connector offers its own ALPN protocols.
                config.alpn_protocols.clear();
                Ok(builder.with_tls_config(config))
            }
            None => builder
                .with_native_roots()
                .map_err(|e| format!("loading the host's root certificates: {e}")),
        };
        let client = builder.map(|builder| {
            let connector = builder.https_or_http().enable_http1().build();
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector)
        });
        Fetcher { client }
    }

    async fn get(&self, url: &str) -> Result<Value, String> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_DOCUMENT)
                .collect()
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?
                .to_bytes();
            if !status.is_success() {
                return Err(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&body).trim()
                ));
            }
            serde_json::from_slice(&body).map_err(|e| format!("decoding {url}: {e}"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("Get {url:?}: timeout"))?
    }
}

// ---------------------------------------------------------------------------------------------
// Authenticating.

/// One issuer's authenticator.
pub(crate) struct JwtAuthenticator {
    issuer: String,
    discovery: String,
    audiences: Vec<String>,
    algorithms: Vec<Algorithm>,
    username: Mapping,
    groups: Option<Mapping>,
    uid: Option<Mapping>,
    extra: Vec<(String, Expression, String)>,
    required_claims: Vec<(String, String)>,
    claim_rules: Vec<Rule>,
    user_rules: Vec<Rule>,
    fetcher: Fetcher,
    /// The issuer's keys, once fetched.
    keys: RwLock<Option<Arc<JwkSet>>>,
    /// Held while fetching; when the last fetch began.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthenticator")
            .field("issuer", &self.issuer)
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

/// The `iss` of a compact JWT, unverified (Google's legacy bare issuer coalesced).
pub(crate) fn untrusted_issuer(token: &str) -> Option<String> {
    if token.trim_start().starts_with('{') {
        return None;
    }
    let payload = super::serviceaccount::jws::unverified_payload(token)?;
    #[derive(Deserialize)]
    struct Issuer {
        #[serde(default)]
        iss: String,
    }
    let issuer = serde_json::from_slice::<Issuer>(&payload).ok()?.iss;
    Some(if issuer == "accounts.google.com" {
        "https://accounts.google.com".to_owned()
    } else {
        issuer
    })
}

fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// A claim as a string; upstream's "claim not present" when absent.
fn string_claim(claims: &Map<String, Value>, name: &str) -> Result<String, String> {
    match claims.get(name) {
        None => Err("claim not present".into()),
        Some(Value::String(value)) => Ok(value.clone()),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go value of type string",
            go_json_type(other)
        )),
    }
}

/// A CEL result that must be a string or a list of strings; empty strings are dropped and
/// `null` or nothing left is no value (upstream's `convertCELValueToStringList`).
fn string_list(value: &CelValue) -> Result<Vec<String>, String> {
    const WRONG: &str = "expression must return a string or a list of strings";
    match value {
        CelValue::String(s) if s.is_empty() => Ok(Vec::new()),
        CelValue::String(s) => Ok(vec![s.to_string()]),
        CelValue::Null => Ok(Vec::new()),
        CelValue::List(items) => {
            let mut out = Vec::new();
            for item in items.iter() {
                match item {
                    CelValue::String(s) if s.is_empty() => {}
                    CelValue::String(s) => out.push(s.to_string()),
                    _ => return Err(WRONG.into()),
                }
            }
            Ok(out)
        }
        _ => Err(WRONG.into()),
    }
}

fn check_rules(rules: &[Rule], activation: &Activation) -> Result<(), String> {
    for rule in rules {
        match rule.expression.value(activation)? {
            CelValue::Bool(true) => {}
            CelValue::Bool(false) => {
                return Err(format!(
                    "validation expression '{}' failed: {}",
                    rule.text, rule.message
                ));
            }
            _ => return Err("validation expression must return a boolean".into()),
        }
    }
    Ok(())
}

impl JwtAuthenticator {
    /// The issuer URL.
    pub(crate) fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Authenticates `token` when it names this issuer: `Ok(None)` when it does not, `Err`
    /// with upstream's reason when it does and is refused.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        if untrusted_issuer(token).as_deref() != Some(self.issuer.as_str()) {
            return Ok(None);
        }
        let claims = self
            .verify(token)
            .await
            .map_err(|e| format!("oidc: verify token: {e}"))?;
        self.user(&claims).map(Some)
    }

    /// go-oidc's checks: algorithm, signature, issuer, audience, expiry, not-before.
    async fn verify(&self, token: &str) -> Result<Map<String, Value>, String> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| format!("malformed jwt: {e}"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(format!(
                "oidc: id token signed with unsupported algorithm, expected {:?} got {:?}",
                self.algorithms, header.alg
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let claims = self
            .verified(token, header.kid.as_deref(), &validation)
            .await?;
        let issuer = claims
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if issuer != self.issuer {
            return Err(format!(
                "oidc: id token issued by a different provider, expected {:?} got {issuer:?}",
                self.issuer
            ));
        }
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(one)) => vec![one.as_str()],
            Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences
            .iter()
            .any(|a| self.audiences.iter().any(|mine| mine == a))
        {
            let mut expected = self.audiences.clone();
            expected.sort();
            return Err(format!(
                "oidc: expected audience in {expected:?} got {audiences:?}"
            ));
        }
        let now = now_seconds();
        let expiry = claims.get("exp").and_then(Value::as_f64).unwrap_or(0.0) as i64;
        if expiry < now {
            return Err(format!("oidc: token is expired (Token Expiry: {expiry})"));
        }
        if let Some(not_before) = claims.get("nbf").and_then(Value::as_f64)
            && now + NOT_BEFORE_SKEW < not_before as i64
        {
            return Err(format!(
                "oidc: current time {now} before the nbf (not before) time: {}",
                not_before as i64
            ));
        }
        Ok(claims)
    }

    /// The claims of `token` if a key of the issuer's signed it, fetching the keys when none
    /// are known or none has the token's key id.
    async fn verified(
        &self,
        token: &str,
        kid: Option<&str>,
        validation: &Validation,
    ) -> Result<Map<String, Value>, String> {
        let known = self.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(keys) = &known
            && let Some(claims) = check_signature(keys, token, kid, validation)?
        {
            return Ok(claims);
        }
        let keys = self.refetch(known.as_ref()).await?;
        check_signature(&keys, token, kid, validation)?
            .ok_or_else(|| "failed to verify signature: failed to verify id token signature".into())
    }

    /// Fetches the keys again, unless another request did meanwhile or the last fetch was
    /// less than [`REFETCH_FLOOR`] ago.
    async fn refetch(&self, seen: Option<&Arc<JwkSet>>) -> Result<Arc<JwkSet>, String> {
        let mut last = self.fetching.lock().await;
        let current = self.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(current) = &current
            && seen.is_none_or(|seen| !Arc::ptr_eq(seen, current))
        {
            return Ok(current.clone());
        }
        if let Some(at) = *last
            && at.elapsed() < REFETCH_FLOOR
        {
            return current.ok_or_else(|| "oidc: authenticator not initialized".into());
        }
        *last = Some(Instant::now());
        let keys = Arc::new(self.fetch_keys().await.map_err(|e| {
            tracing::warn!(issuer = %self.issuer, error = %e, "oidc: fetching the issuer's keys");
            format!("fetching keys {e}")
        })?);
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Some(keys.clone());
        Ok(keys)
    }

    async fn fetch_keys(&self) -> Result<JwkSet, String> {
        let discovery = self.fetcher.get(&self.discovery).await?;
        let issuer = discovery
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if issuer != self.issuer {
            return Err(format!(
                "oidc: issuer did not match the issuer returned by provider, expected {:?} got {issuer:?}",
                self.issuer
            ));
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or("oidc: discovery document has no jwks_uri")?;
        let keys = self.fetcher.get(jwks_uri).await?;
        serde_json::from_value::<JwkSet>(keys).map_err(|e| format!("oidc: decoding keys: {e}"))
    }

    /// The user the verified `claims` name, in upstream's order of mappings and checks.
    fn user(&self, claims: &Map<String, Value>) -> Result<User, String> {
        let needs_cel = matches!(self.username, Mapping::Expression(_))
            || matches!(self.groups, Some(Mapping::Expression(_)))
            || matches!(self.uid, Some(Mapping::Expression(_)))
            || !self.extra.is_empty()
            || !self.claim_rules.is_empty();
        let mut activation = Activation::default();
        if needs_cel {
            activation.json("claims", &Value::Object(claims.clone()));
        }
        let name = match &self.username {
            Mapping::Expression(expression) => {
                let failed =
                    |e: &str| format!("oidc: error evaluating username claim expression: {e}");
                match expression.value(&activation).map_err(|e| failed(&e))? {
                    CelValue::String(name) => name.to_string(),
                    _ => return Err(failed("username claim expression must return a string")),
                }
            }
            Mapping::Claim { claim, prefix } => {
                let name = string_claim(claims, claim)
                    .map_err(|e| format!("oidc: parse username claims {claim:?}: {e}"))?;
                if claim == "email"
                    && let Some(verified) = claims.get("email_verified")
                {
                    match verified {
                        Value::Bool(true) => {}
                        Value::Bool(false) => return Err("oidc: email not verified".into()),
                        other => {
                            return Err(format!(
                                "oidc: parse 'email_verified' claim: json: cannot unmarshal {} into Go value of type bool",
                                go_json_type(other)
                            ));
                        }
                    }
                }
                format!("{prefix}{name}")
            }
        };
        let groups = match &self.groups {
            None => Vec::new(),
            Some(Mapping::Claim { claim, prefix }) => match claims.get(claim) {
                None => Vec::new(),
                Some(Value::String(one)) => vec![format!("{prefix}{one}")],
                Some(Value::Array(many)) => many
                    .iter()
                    .map(|g| {
                        g.as_str().map(|g| format!("{prefix}{g}")).ok_or_else(|| {
                            format!(
                                "oidc: parse groups claim {claim:?}: json: cannot unmarshal {} into Go value of type string",
                                go_json_type(g)
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => {
                    return Err(format!(
                        "oidc: parse groups claim {claim:?}: json: cannot unmarshal {} into Go value of type string",
                        go_json_type(other)
                    ));
                }
            },
            Some(Mapping::Expression(expression)) => {
                let failed = |e: String| format!("oidc: error evaluating group claim expression: {e}");
                string_list(&expression.value(&activation).map_err(failed)?).map_err(failed)?
            }
        };
        let uid = match &self.uid {
            None => String::new(),
            Some(Mapping::Claim { claim, .. }) => string_claim(claims, claim)
                .map_err(|e| format!("oidc: parse uid claim {claim:?}: {e}"))?,
            Some(Mapping::Expression(expression)) => {
                let failed = |e: &str| format!("oidc: error evaluating uid claim expression: {e}");
                match expression.value(&activation).map_err(|e| failed(&e))? {
                    CelValue::String(uid) => uid.to_string(),
                    _ => return Err(failed("uid claim expression must return a string")),
                }
            }
        };
        let mut extra = BTreeMap::new();
        for (key, expression, text) in &self.extra {
            let values = string_list(&expression.value(&activation)?).map_err(|e| {
                format!("oidc: error evaluating extra claim expression: {text}: {e}")
            })?;
            if !values.is_empty() {
                extra.insert(key.clone(), values);
            }
        }
        for (claim, value) in &self.required_claims {
            if !claims.contains_key(claim) {
                return Err(format!(
                    "oidc: required claim {claim} not present in ID token"
                ));
            }
            let got = string_claim(claims, claim)
                .map_err(|e| format!("oidc: parse claim {claim}: {e}"))?;
            if got != *value {
                return Err(format!(
                    "oidc: required claim {claim} value does not match. Got = {got}, want = {value}"
                ));
            }
        }
        check_rules(&self.claim_rules, &activation)
            .map_err(|e| format!("oidc: error evaluating claim validation expression: {e}"))?;
        let mut user = User {
            name,
            uid,
            groups,
            extra,
        };
        if !self.user_rules.is_empty() {
            let mut activation = Activation::default();
            activation.json(
                "user",
                &serde_json::json!({
                    "username": user.name,
                    "uid": user.uid,
                    "groups": user.groups,
                    "extra": user.extra,
                }),
            );
            check_rules(&self.user_rules, &activation)
                .map_err(|e| format!("oidc: error evaluating user info validation rule: {e}"))?;
        }
        user.groups.push("system:authenticated".into());
        Ok(user)
    }

    /// This authenticator with `keys` known, as if fetched (tests).
    #[cfg(test)]
    pub(crate) fn with_keys(self, keys: JwkSet) -> Self {
        *self.keys.write().unwrap() = Some(Arc::new(keys));
        self
    }
}

/// Verifies `token` with the key of id `kid` (each key when the token names none): its
/// claims, `None` when no key fits, an error when the token itself is malformed.
fn check_signature(
    keys: &JwkSet,
    token: &str,
    kid: Option<&str>,
    validation: &Validation,
) -> Result<Option<Map<String, Value>>, String> {
    let candidates: Vec<&Jwk> = match kid {
        Some(kid) => keys
            .keys
            .iter()
            .filter(|k| k.common.key_id.as_deref() == Some(kid))
            .collect(),
        None => keys.keys.iter().collect(),
    };
    for jwk in candidates {
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key, validation) {
            Ok(data) => return Ok(Some(data.claims)),
            Err(error) => match error.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature
                | jsonwebtoken::errors::ErrorKind::InvalidAlgorithm
                | jsonwebtoken::errors::ErrorKind::InvalidEcdsaKey
                | jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_)
                | jsonwebtoken::errors::ErrorKind::InvalidKeyFormat => continue,
                _ => return Err(format!("malformed jwt: {error}")),
            },
        }
    }
    Ok(None)
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
