//! Service account tokens, as upstream's API server issues and checks them.
//!
//! - [`TokenAuthority::request`] answers the `serviceaccounts/token` subresource (an
//!   `authentication.k8s.io/v1` TokenRequest, upstream's `TokenREST`): a JWT for the service
//!   account, valid for `spec.expirationSeconds` (default 3600, at least 600, at most 2^32) and
//!   for `spec.audiences` (default: the API's own), optionally bound to a pod, secret or node
//!   that must exist (with the uid given, if any).
//! - [`TokenAuthority::authenticate`] is upstream's service account token authenticator: a
//!   bearer token signed by our key, from our issuer, for one of the API's audiences and within
//!   its validity authenticates as `system:serviceaccount:<namespace>:<name>` while the service
//!   account (and the object it is bound to) still exists with the same uid.
//! - [`admission`] is upstream's ServiceAccount admission plugin (the default service account,
//!   and the projected `kube-api-access-*` volume every container mounts).
//!
//! Tokens are ES256 JWTs ([`jws`]) with upstream's claims ([`claims`]); the key lives in
//! `<data-dir>/tls/service-account.key` (see `pki::service_account_key`).

pub(crate) mod claims;
pub(crate) mod discovery;
pub(crate) mod jws;

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_api::field::{FieldError, Path, go_quote};
use capstan_api::{GroupResource, StatusError};
use serde_json::{Value, json};

use crate::authn::User;
use crate::registry::Registry;
use crate::registry::object::{meta_str, new_uid, timestamp};
use crate::status::ApiError;
use claims::{Bound, Claims, Grant, LEEWAY_SECONDS, ObjectRef};
use jws::SigningKey;

/// The issuer of our tokens (upstream's `--service-account-issuer` as kubeadm and k3s set it).
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A TokenRequest's validity when it names none.
pub(crate) const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest validity a TokenRequest may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest validity a TokenRequest may ask for.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// The validity the ServiceAccount admission plugin asks for in projected volumes; a pod-bound
/// request for it (for the API's audiences) gets an extended token (upstream's
/// `--service-account-extend-token-expiration`, on by default).
pub(crate) const WARN_ONLY_EXPIRATION_SECONDS: i64 = 3607;
/// How long an extended token is valid.
const EXTENDED_EXPIRATION_SECONDS: i64 = 365 * 24 * 3600;

/// The objects tokens name.
#[derive(Clone, Debug)]
pub(crate) struct Lookups {
    /// ServiceAccounts.
    pub service_accounts: Arc<Registry>,
    /// Pods.
    pub pods: Arc<Registry>,
    /// Secrets.
    pub secrets: Arc<Registry>,
    /// Nodes.
    pub nodes: Arc<Registry>,
}

impl Lookups {
    /// The registries of the table tokens name; `None` if one is missing.
    pub(crate) fn from_table(table: &crate::registry::Registries) -> Option<Self> {
        let core = |plural: &str| table.core(plural);
        Some(Lookups {
            service_accounts: core("serviceaccounts")?,
            pods: core("pods")?,
            secrets: core("secrets")?,
            nodes: core("nodes")?,
        })
    }
}

/// Issues and checks service account tokens.
#[derive(Debug)]
pub(crate) struct TokenAuthority {
    key: Option<SigningKey>,
    issuer: String,
    audiences: Vec<String>,
    lookups: Option<Lookups>,
}

fn unavailable() -> ApiError {
    StatusError::service_unavailable("this API server cannot issue service account tokens").into()
}

/// Seconds since the epoch.
pub(crate) fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `seconds` since the epoch as Kubernetes writes `metav1.Time`.
fn rfc3339(seconds: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .map(timestamp)
        .unwrap_or_default()
}

/// Whether `object`'s deletion began before `before` (seconds since the epoch).
fn deleted_before(object: &Value, before: i64) -> bool {
    object["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|t| t.as_second() < before)
}

/// Reads an object as upstream's token getter does: from the watch cache, or from the store
/// when the cache does not have it (yet).
pub(crate) async fn lookup(
    registry: &Registry,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    if name.is_empty() {
        return None;
    }
    match registry.read(namespace, name, Some("0")).await {
        Ok(cached) => Some(cached.object()),
        Err(_) => registry.get(namespace, name).await.ok(),
    }
}

/// The `spec.boundObjectRef` of a TokenRequest.
struct BoundRef {
    kind: String,
    api_version: String,
    name: String,
    uid: String,
}

impl TokenAuthority {
    /// An authority signing with `key`, reading the objects tokens name from `lookups`.
    pub(crate) fn new(key: Option<SigningKey>, lookups: Option<Lookups>) -> Self {
        TokenAuthority {
            key,
            issuer: ISSUER.to_owned(),
            audiences: vec![ISSUER.to_owned()],
            lookups,
        }
    }

    /// The issuer discovery documents, the keys published at `https://<external>/openid/v1/jwks`
    /// (`external`: the address clients reach this server at); `None` without a key.
    pub(crate) fn issuer_discovery(&self, external: &str) -> Option<discovery::IssuerDiscovery> {
        let key = self.key.as_ref()?;
        let jwks_uri = format!("https://{external}{}", discovery::JWKS_PATH);
        Some(discovery::IssuerDiscovery::new(
            key,
            &self.issuer,
            &jwks_uri,
        ))
    }

    /// The same authority with another key.
    pub(crate) fn with_key(&self, key: SigningKey) -> Self {
        TokenAuthority {
            key: Some(key),
            issuer: self.issuer.clone(),
            audiences: self.audiences.clone(),
            lookups: self.lookups.clone(),
        }
    }

    fn parts(&self) -> Result<(&SigningKey, &Lookups), ApiError> {
        match (&self.key, &self.lookups) {
            (Some(key), Some(lookups)) => Ok((key, lookups)),
            _ => Err(unavailable()),
        }
    }

    /// Signs a token for `grant` issued at `now`.
    pub(crate) fn sign(&self, grant: &Grant<'_>, now: i64) -> Result<String, ApiError> {
        let key = self.key.as_ref().ok_or_else(unavailable)?;
        let claims = Claims::new(grant, now, new_uid());
        let payload = serde_json::to_vec(&claims)
            .map_err(|e| StatusError::internal(&format!("encoding token claims: {e}")))?;
        key.sign(&payload)
            .map_err(|e| StatusError::internal(&format!("failed to generate token: {e}")).into())
    }

    /// Answers a TokenRequest (`body`) for service account `name` in `namespace`, as upstream's
    /// `TokenREST.Create`: the request with its defaults and `status.token` and
    /// `status.expirationTimestamp` filled in.
    pub(crate) async fn request(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let (_, lookups) = self.parts()?;
        let invalid = |errors: &[FieldError], object: &str| -> ApiError {
            StatusError::invalid("authentication.k8s.io", "TokenRequest", object, errors).into()
        };
        let given_name = meta_str(body, "name");
        if !given_name.is_empty() && given_name != name {
            return Err(invalid(
                &[FieldError::invalid(
                    &Path::new("metadata").child("name"),
                    given_name,
                    "must match the service account name if specified",
                )],
                name,
            ));
        }
        let given_namespace = meta_str(body, "namespace");
        if !given_namespace.is_empty() && given_namespace != namespace {
            return Err(invalid(
                &[FieldError::invalid(
                    &Path::new("metadata").child("namespace"),
                    given_namespace,
                    "must match the service account namespace if specified",
                )],
                name,
            ));
        }
        let account = lookups.service_accounts.get(Some(namespace), name).await?;
        let spec = &body["spec"];
        let mut audiences: Vec<String> = spec["audiences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if audiences.is_empty() {
            audiences = self.audiences.clone();
        }
        let expiration_seconds = spec["expirationSeconds"]
            .as_i64()
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        // The time is taken before the token is made, so the expiration reported is never
        // later than the token's.
        let now = now_seconds();
        let expiration_path = Path::new("spec").child("expirationSeconds");
        let mut errors = Vec::new();
        if expiration_seconds < MIN_EXPIRATION_SECONDS {
            errors.push(FieldError::invalid(
                &expiration_path,
                expiration_seconds,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if expiration_seconds > MAX_EXPIRATION_SECONDS {
            errors.push(FieldError::invalid(
                &expiration_path,
                expiration_seconds,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        if !errors.is_empty() {
            return Err(invalid(&errors, ""));
        }
        let bound_ref = spec["boundObjectRef"].as_object().map(|r| {
            let text = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or_default();
            BoundRef {
                kind: text("kind").to_owned(),
                api_version: text("apiVersion").to_owned(),
                name: text("name").to_owned(),
                uid: text("uid").to_owned(),
            }
        });
        let bound = match &bound_ref {
            None => Bound::Nothing,
            Some(reference) => self.bind(lookups, namespace, name, reference).await?,
        };
        let pod_bound = matches!(bound, Bound::Pod { .. });
        let (mut token_seconds, mut warn_after_seconds) = (expiration_seconds, None);
        if pod_bound
            && expiration_seconds == WARN_ONLY_EXPIRATION_SECONDS
            && audiences.iter().all(|a| self.audiences.contains(a))
        {
            warn_after_seconds = Some(expiration_seconds);
            token_seconds = EXTENDED_EXPIRATION_SECONDS;
        }
        let grant = Grant {
            issuer: &self.issuer,
            namespace,
            account: ObjectRef::of(&account),
            bound,
            audiences: &audiences,
            expiration_seconds: token_seconds,
            warn_after_seconds,
        };
        let token = self.sign(&grant, now)?;
        let bound_object_ref = match &bound_ref {
            None => Value::Null,
            Some(_) => spec["boundObjectRef"].clone(),
        };
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": rfc3339(now),
            },
            "spec": {
                "audiences": audiences,
                "expirationSeconds": expiration_seconds,
                "boundObjectRef": bound_object_ref,
            },
            "status": {
                "token": token,
                "expirationTimestamp": rfc3339(now + expiration_seconds),
            },
        }))
    }

    /// Resolves the object a TokenRequest for service account `account` binds its token to.
    async fn bind(
        &self,
        lookups: &Lookups,
        namespace: &str,
        account: &str,
        reference: &BoundRef,
    ) -> Result<Bound, ApiError> {
        let (group, version) = match reference.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", reference.api_version.as_str()),
        };
        let (bound, object) = match (group, reference.kind.as_str()) {
            ("", "Pod") => {
                let pod = lookups.pods.get(Some(namespace), &reference.name).await?;
                let pod_account = pod["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or_default();
                if pod_account != account {
                    return Err(StatusError::bad_request(&format!(
                        "cannot bind token for serviceaccount {} to pod running with different \
                         serviceaccount name.",
                        go_quote(account)
                    ))
                    .into());
                }
                // The node the pod runs on is named too, if it can be read (upstream's
                // `ServiceAccountTokenPodNodeInfo`); a node that cannot does not fail the request.
                let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
                let node = lookup(&lookups.nodes, None, node_name)
                    .await
                    .map(|node| ObjectRef::of(&node));
                let bound = Bound::Pod {
                    pod: ObjectRef::of(&pod),
                    node,
                };
                (bound, pod)
            }
            ("", "Node") => {
                let node = lookups.nodes.get(None, &reference.name).await?;
                (Bound::Node(ObjectRef::of(&node)), node)
            }
            ("", "Secret") => {
                let secret = lookups
                    .secrets
                    .get(Some(namespace), &reference.name)
                    .await?;
                (Bound::Secret(ObjectRef::of(&secret)), secret)
            }
            _ => {
                return Err(StatusError::bad_request(&format!(
                    "cannot bind token for serviceaccount {} to object of type {group}/{version}, \
                     Kind={}.",
                    go_quote(account),
                    reference.kind
                ))
                .into());
            }
        };
        let uid = meta_str(&object, "uid");
        if !reference.uid.is_empty() && reference.uid != uid {
            return Err(StatusError::conflict(
                GroupResource::new(group, &reference.kind),
                &reference.name,
                &format!(
                    "the UID in the bound object reference ({}) does not match the UID in \
                     record. The object might have been deleted and then recreated",
                    reference.uid
                ),
            )
            .into());
        }
        Ok(bound)
    }

    /// Authenticates a bearer token: `Ok(None)` when it is not one of ours (not a JWT, or
    /// another issuer's), `Err` with the reason when it is ours but not valid (any more).
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        #[derive(serde::Deserialize)]
        struct Issuer {
            #[serde(default)]
            iss: String,
        }
        let (Some(key), Some(lookups)) = (&self.key, &self.lookups) else {
            return Ok(None);
        };
        let ours = jws::unverified_payload(token)
            .and_then(|payload| serde_json::from_slice::<Issuer>(&payload).ok())
            .is_some_and(|claims| claims.iss == self.issuer);
        if !ours {
            return Ok(None);
        }
        let payload = key.verify(token).map_err(|e| e.to_string())?;
        let claims: Claims =
            serde_json::from_slice(&payload).map_err(|e| format!("malformed claims: {e}"))?;
        if claims.iss != self.issuer {
            return Err(format!("token issuer {:?} is invalid", claims.iss));
        }
        if !claims.audience_accepted(&self.audiences) {
            return Err(format!(
                "token audiences {:?} is invalid for the target audiences {:?}",
                claims.aud, self.audiences
            ));
        }
        let now = now_seconds();
        claims.check_times(now)?;
        self.validate(lookups, &claims, now).await.map(Some)
    }

    /// Upstream's `Validator`: the service account, and the object the token is bound to, must
    /// still exist with the uids the token names (objects deleted less than the leeway ago
    /// still count).
    async fn validate(&self, lookups: &Lookups, claims: &Claims, now: i64) -> Result<User, String> {
        let private = claims.kubernetes.clone().unwrap_or_default();
        let namespace = private.namespace.as_str();
        let account = &private.serviceaccount;
        let deleted_by = now - LEEWAY_SECONDS;
        let Some(found) = lookup(&lookups.service_accounts, Some(namespace), &account.name).await
        else {
            return Err(format!(
                "serviceaccounts {} not found",
                go_quote(&account.name)
            ));
        };
        if deleted_before(&found, deleted_by) {
            return Err(format!(
                "service account {namespace}/{} has been deleted",
                account.name
            ));
        }
        let uid = meta_str(&found, "uid");
        if uid != account.uid {
            return Err(format!(
                "service account UID ({uid}) does not match claim ({})",
                account.uid
            ));
        }
        let invalidated = || "service account token has been invalidated".to_owned();
        let check = |object: Option<Value>, reference: &ObjectRef, what: &str| {
            let object = object.ok_or_else(invalidated)?;
            if deleted_before(&object, deleted_by) {
                return Err(invalidated());
            }
            let uid = meta_str(&object, "uid");
            if uid != reference.uid {
                return Err(format!(
                    "{what} UID ({uid}) does not match service account {what} ref claim ({})",
                    reference.uid
                ));
            }
            Ok(())
        };
        if let Some(secret) = &private.secret {
            let object = lookup(&lookups.secrets, Some(namespace), &secret.name).await;
            check(object, secret, "secret")?;
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            extra.insert(
                format!("authentication.kubernetes.io/{key}"),
                vec![value.to_owned()],
            );
        };
        if let Some(pod) = &private.pod {
            let object = lookup(&lookups.pods, Some(namespace), &pod.name).await;
            check(object, pod, "pod")?;
            put("pod-name", &pod.name);
            put("pod-uid", &pod.uid);
        }
        if let Some(node) = &private.node {
            if private.pod.is_none() {
                let object = lookup(&lookups.nodes, None, &node.name).await;
                check(object, node, "node")?;
            }
            put("node-name", &node.name);
            put("node-uid", &node.uid);
        }
        if !claims.jti.is_empty() {
            put("credential-id", &format!("JTI={}", claims.jti));
        }
        Ok(User {
            name: claims::username(namespace, &account.name),
            uid: account.uid.clone(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
            extra,
        })
    }
}
