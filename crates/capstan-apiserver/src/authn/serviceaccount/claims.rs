//! The claims of a service account token, as upstream's `pkg/serviceaccount` writes them: the
//! registered claims (`aud`, `exp`, `iat`, `iss`, `jti`, `nbf`, `sub`) and the private
//! `kubernetes.io` claim naming the namespace, the service account and the object the token is
//! bound to (a pod, with the node it runs on, a secret, or a node), plus `warnafter` for the
//! extended tokens of projected volumes. Members are written in Go's order (sorted keys), and
//! `aud` is always an array.

use serde::{Deserialize, Deserializer, Serialize};

/// How far clocks may disagree (go-jose's `DefaultLeeway`): a token is accepted this long after
/// it expires and before it becomes valid, and an object deleted less than this long ago still
/// backs the tokens bound to it.
pub(crate) const LEEWAY_SECONDS: i64 = 60;

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Private {
    /// The service account's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The node the bound pod runs on, or the node the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    /// The pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The service account.
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    /// For an extended token: when its holder should have replaced it (seconds since the
    /// epoch); use after that is only logged upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// An object named in the `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjectRef {
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ObjectRef {
    /// The name and uid of `object`.
    pub(crate) fn of(object: &serde_json::Value) -> Self {
        let meta = |field: &str| {
            object["metadata"][field]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        ObjectRef {
            name: meta("name"),
            uid: meta("uid"),
        }
    }
}

/// Every claim of a token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    /// The audiences.
    #[serde(default, deserialize_with = "audiences")]
    pub aud: Vec<String>,
    /// Expiry, seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Issue time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    /// The issuer.
    #[serde(default)]
    pub iss: String,
    /// The token's unique id (upstream's `ServiceAccountTokenJTI`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    /// The private claim.
    #[serde(
        rename = "kubernetes.io",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes: Option<Private>,
    /// Not valid before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// The subject: `system:serviceaccount:<namespace>:<name>`.
    #[serde(default)]
    pub sub: String,
}

/// `aud` as a string or an array of strings (RFC 7519 allows both).
fn audiences<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Audience {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Audience>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(Audience::One(one)) => vec![one],
        Some(Audience::Many(many)) => many,
    })
}

/// The object a token is bound to, when it is bound to one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Bound to the service account alone.
    #[default]
    Nothing,
    /// Bound to a pod, and the node it runs on when that node is known.
    Pod {
        /// The pod.
        pod: ObjectRef,
        /// Its node.
        node: Option<ObjectRef>,
    },
    /// Bound to a secret.
    Secret(ObjectRef),
    /// Bound to a node.
    Node(ObjectRef),
}

/// What a token is issued for.
#[derive(Clone, Debug)]
pub(crate) struct Grant<'a> {
    /// The issuer.
    pub issuer: &'a str,
    /// The service account's namespace.
    pub namespace: &'a str,
    /// The service account.
    pub account: ObjectRef,
    /// What the token is bound to.
    pub bound: Bound,
    /// The audiences.
    pub audiences: &'a [String],
    /// How long the token is valid, in seconds.
    pub expiration_seconds: i64,
    /// For an extended token, after how many seconds its holder should have replaced it.
    pub warn_after_seconds: Option<i64>,
}

/// The user name of a service account.
pub(crate) fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

impl Claims {
    /// The claims of a token issued at `now` (seconds since the epoch) with id `jti`, as
    /// upstream's `Claims`.
    pub(crate) fn new(grant: &Grant<'_>, now: i64, jti: String) -> Claims {
        let mut private = Private {
            namespace: grant.namespace.to_owned(),
            serviceaccount: grant.account.clone(),
            warnafter: grant.warn_after_seconds.map(|after| now + after),
            ..Private::default()
        };
        match &grant.bound {
            Bound::Nothing => {}
            Bound::Pod { pod, node } => {
                private.pod = Some(pod.clone());
                private.node = node.clone();
            }
            Bound::Secret(secret) => private.secret = Some(secret.clone()),
            Bound::Node(node) => private.node = Some(node.clone()),
        }
        Claims {
            aud: grant.audiences.to_vec(),
            exp: Some(now + grant.expiration_seconds),
            iat: Some(now),
            iss: grant.issuer.to_owned(),
            jti,
            kubernetes: Some(private),
            nbf: Some(now),
            sub: username(grant.namespace, &grant.account.name),
        }
    }

    /// Checks the times of the claims at `now`, with upstream's leeway and messages.
    pub(crate) fn check_times(&self, now: i64) -> Result<(), &'static str> {
        if self.nbf.is_some_and(|nbf| now + LEEWAY_SECONDS < nbf) {
            return Err("service account token is not valid yet");
        }
        if self.exp.is_some_and(|exp| now - LEEWAY_SECONDS > exp) {
            return Err("service account token has expired");
        }
        if self.iat.is_some_and(|iat| now + LEEWAY_SECONDS < iat) {
            return Err(
                "service account token claims could not be validated due to unexpected validation error",
            );
        }
        Ok(())
    }

    /// Whether the token was issued for one of `accepted` (a token without audiences is meant
    /// for the API itself, as upstream reads legacy tokens).
    pub(crate) fn audience_accepted(&self, accepted: &[String]) -> bool {
        let audiences = if self.aud.is_empty() {
            accepted
        } else {
            &self.aud
        };
        audiences.iter().any(|a| accepted.contains(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn account() -> ObjectRef {
        ObjectRef {
            name: "default".into(),
            uid: "sa-uid".into(),
        }
    }

    fn grant(bound: Bound) -> Grant<'static> {
        static AUDIENCES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            vec!["https://kubernetes.default.svc.cluster.local".into()]
        });
        Grant {
            issuer: "https://kubernetes.default.svc.cluster.local",
            namespace: "ns",
            account: account(),
            bound,
            audiences: &AUDIENCES,
            expiration_seconds: 3600,
            warn_after_seconds: None,
        }
    }

    #[test]
    fn claims_are_written_as_upstream_writes_them() {
        let claims = Claims::new(&grant(Bound::Nothing), 1_000, "id-1".into());
        assert_eq!(
            serde_json::to_string(&claims).unwrap(),
            r#"{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":4600,"iat":1000,"iss":"https://kubernetes.default.svc.cluster.local","jti":"id-1","kubernetes.io":{"namespace":"ns","serviceaccount":{"name":"default","uid":"sa-uid"}},"nbf":1000,"sub":"system:serviceaccount:ns:default"}"#
        );
        let pod = ObjectRef {
            name: "p".into(),
            uid: "pod-uid".into(),
        };
        let node = ObjectRef {
            name: "n".into(),
            uid: "node-uid".into(),
        };
        let mut extended = grant(Bound::Pod {
            pod,
            node: Some(node.clone()),
        });
        extended.expiration_seconds = 365 * 24 * 3600;
        extended.warn_after_seconds = Some(3607);
        let claims = Claims::new(&extended, 1_000, String::new());
        assert_eq!(
            serde_json::to_value(&claims).unwrap()["kubernetes.io"],
            json!({"namespace": "ns", "node": {"name": "n", "uid": "node-uid"},
                   "pod": {"name": "p", "uid": "pod-uid"},
                   "serviceaccount": {"name": "default", "uid": "sa-uid"}, "warnafter": 4607})
        );
        assert_eq!(claims.exp, Some(1_000 + 365 * 24 * 3600));
        assert!(
            !serde_json::to_string(&claims).unwrap().contains("jti"),
            "no id, no jti"
        );
        let bound_to_node = Claims::new(&grant(Bound::Node(node)), 0, String::new());
        let private = bound_to_node.kubernetes.unwrap();
        assert_eq!(private.node.unwrap().name, "n");
        assert!(private.pod.is_none() && private.secret.is_none());
    }

    #[test]
    fn claims_read_back_with_either_audience_form() {
        let claims = Claims::new(&grant(Bound::Nothing), 1_000, "id".into());
        let text = serde_json::to_vec(&claims).unwrap();
        assert_eq!(serde_json::from_slice::<Claims>(&text).unwrap(), claims);
        let single: Claims = serde_json::from_value(json!({"aud": "x", "iss": "i"})).unwrap();
        assert_eq!(single.aud, ["x"]);
        let none: Claims = serde_json::from_value(json!({"iss": "i"})).unwrap();
        assert!(none.aud.is_empty() && none.kubernetes.is_none());
    }

    #[test]
    fn times_are_checked_with_a_minute_of_leeway() {
        let claims = Claims::new(&grant(Bound::Nothing), 1_000, String::new());
        assert_eq!(claims.check_times(1_000), Ok(()));
        assert_eq!(claims.check_times(4_600 + 60), Ok(()));
        assert_eq!(
            claims.check_times(4_600 + 61),
            Err("service account token has expired")
        );
        assert_eq!(claims.check_times(1_000 - 60), Ok(()));
        assert_eq!(
            claims.check_times(1_000 - 61),
            Err("service account token is not valid yet")
        );
    }

    #[test]
    fn audiences_must_meet() {
        let accepted = vec!["https://kubernetes.default.svc.cluster.local".to_owned()];
        let claims = Claims::new(&grant(Bound::Nothing), 0, String::new());
        assert!(claims.audience_accepted(&accepted));
        let other = Claims {
            aud: vec!["vault".into(), "other".into()],
            ..claims.clone()
        };
        assert!(!other.audience_accepted(&accepted));
        let both = Claims {
            aud: vec!["vault".into(), accepted[0].clone()],
            ..claims.clone()
        };
        assert!(both.audience_accepted(&accepted));
        let legacy = Claims {
            aud: Vec::new(),
            ..claims
        };
        assert!(legacy.audience_accepted(&accepted));
    }
}
