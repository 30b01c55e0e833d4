//! Bootstrap tokens, as upstream's bootstrap token authenticator reads them (kubeadm's
//! `abcdef.0123456789abcdef`): a bearer token `<id>.<secret>` authenticates as
//! `system:bootstrap:<id>` in `system:bootstrappers` (and the secret's extra groups) when the
//! Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` holds the
//! same `token-id` and `token-secret`, is not being deleted, has not expired and is marked
//! `usage-bootstrap-authentication: true`. Anything else is no match (the request then fails
//! with 401 like any unknown token). `capstan agent` may join with one too
//! (`join.rs`).

use base64::Engine as _;
use serde_json::Value;

use super::User;
use crate::registry::Registry;

pub(crate) use capstan_api::bootstraptoken::{GROUP, NAMESPACE, SECRET_PREFIX, SECRET_TYPE};

/// The id and secret of a well-formed token (`[a-z0-9]{6}.[a-z0-9]{16}`).
pub(crate) fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let lower_alnum = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (id.len() == 6 && secret.len() == 16 && lower_alnum(id) && lower_alnum(secret))
        .then_some((id, secret))
}

/// A Secret's `data[key]`, decoded (empty when absent or not base64).
fn data(secret: &Value, key: &str) -> String {
    secret["data"][key]
        .as_str()
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default()
}

/// Whether `group` may be an extra group of a bootstrap token
/// (`system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`).
fn valid_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !rest.is_empty()
        && rest.len() <= 256
        && rest.bytes().last().is_some_and(allowed)
        && rest.bytes().all(|b| allowed(b) || b == b':' || b == b'-')
}

/// Whether the Secret's `expiration` has passed at `now` (seconds since the epoch).
pub(crate) fn expired(secret: &Value, now: i64) -> bool {
    capstan_api::bootstraptoken::expired(&data(secret, "expiration"), now)
}

/// The user a bootstrap token Secret authenticates for token `id`.`token_secret` at `now`, if
/// it does.
pub(crate) fn user_of(secret: &Value, id: &str, token_secret: &str, now: i64) -> Option<User> {
    if !secret["metadata"]["deletionTimestamp"].is_null()
        || secret["type"].as_str() != Some(SECRET_TYPE)
        || !secret["data"].is_object()
    {
        return None;
    }
    let stored = data(secret, "token-secret");
    if !super::constant_time_eq(stored.as_bytes(), token_secret.as_bytes())
        || data(secret, "token-id") != id
        || expired(secret, now)
        || data(secret, "usage-bootstrap-authentication") != "true"
    {
        return None;
    }
    let mut groups = std::collections::BTreeSet::from([GROUP.to_owned()]);
    let extra = data(secret, "auth-extra-groups");
    if !extra.is_empty() {
        for group in extra.split(',') {
            let group = group.trim();
            if !valid_group(group) {
                tracing::debug!(
                    secret = %secret["metadata"]["name"],
                    %group,
                    "bootstrap token secret has an invalid extra group"
                );
                return None;
            }
            groups.insert(group.to_owned());
        }
    }
    // Sorted, as upstream's set lists them; then the group of every authenticated user.
    let mut groups: Vec<String> = groups.into_iter().collect();
    groups.push("system:authenticated".to_owned());
    Some(User {
        name: format!("system:bootstrap:{id}"),
        uid: String::new(),
        groups,
        extra: Default::default(),
    })
}

/// Authenticates `token` against the bootstrap token Secrets in `secrets`: `None` when it is
/// not a bootstrap token or matches no usable Secret.
pub(crate) async fn authenticate(secrets: &Registry, token: &str) -> Option<User> {
    let (id, token_secret) = parse(token)?;
    let secret =
        super::serviceaccount::lookup(secrets, Some(NAMESPACE), &format!("{SECRET_PREFIX}{id}"))
            .await?;
    user_of(
        &secret,
        id,
        token_secret,
        super::serviceaccount::now_seconds(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(data: &[(&str, &str)]) -> Value {
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String(b64(v))))
            .collect();
        json!({
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "type": SECRET_TYPE,
            "data": data,
        })
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn tokens_have_kubeadms_form() {
        assert_eq!(
            parse("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef.0123456789abcde",
            "ABCDEF.0123456789abcdef",
            "abcdef0123456789abcdef",
            "abcde.0123456789abcdefg",
            "abcdef.0123456789abcdef.x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_valid_secret_authenticates_with_its_groups_sorted() {
        let s = secret(&[
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
            (
                "auth-extra-groups",
                "system:bootstrappers:worker,system:bootstrappers:kubeadm:default-node-token",
            ),
            ("expiration", "2030-01-01T00:00:00Z"),
        ]);
        let user = user_of(&s, "abcdef", "0123456789abcdef", NOW).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
                "system:bootstrappers:worker",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn each_failed_rule_refuses() {
        let good = [
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
        ];
        assert!(user_of(&secret(&good), "abcdef", "0123456789abcdef", NOW).is_some());
        // The wrong secret.
        assert!(user_of(&secret(&good), "abcdef", "0123456789abcdeg", NOW).is_none());
        // Another id stored.
        let mut other = good;
        other[0] = ("token-id", "zzzzzz");
        assert!(user_of(&secret(&other), "abcdef", "0123456789abcdef", NOW).is_none());
        // Not for authentication.
        let mut unusable = good;
        unusable[2] = ("usage-bootstrap-authentication", "false");
        assert!(user_of(&secret(&unusable), "abcdef", "0123456789abcdef", NOW).is_none());
        // Expired, or an expiration that does not parse.
        for expiration in ["2020-01-01T00:00:00Z", "tomorrow"] {
            let mut s = secret(&good);
            s["data"]["expiration"] = json!(b64(expiration));
            assert!(user_of(&s, "abcdef", "0123456789abcdef", NOW).is_none());
        }
        // An extra group outside system:bootstrappers:.
        let mut s = secret(&good);
        s["data"]["auth-extra-groups"] = json!(b64("system:masters"));
        assert!(user_of(&s, "abcdef", "0123456789abcdef", NOW).is_none());
        // Another type, or being deleted.
        let mut s = secret(&good);
        s["type"] = json!("Opaque");
        assert!(user_of(&s, "abcdef", "0123456789abcdef", NOW).is_none());
        let mut s = secret(&good);
        s["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(user_of(&s, "abcdef", "0123456789abcdef", NOW).is_none());
    }

    #[test]
    fn extra_groups_follow_upstreams_pattern() {
        assert!(valid_group("system:bootstrappers:a"));
        assert!(valid_group(
            "system:bootstrappers:kubeadm:default-node-token"
        ));
        assert!(!valid_group("system:bootstrappers:"));
        assert!(!valid_group("system:bootstrappers:a-"));
        assert!(!valid_group("system:bootstrappers:A"));
        assert!(!valid_group("system:nodes"));
    }
}
