//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`): a request carrying
//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` or `Impersonate-Extra-*` headers runs
//! as the user they name, once the authorizer lets the requester `impersonate` each of them
//! (`users`, `groups`, `serviceaccounts` for `system:serviceaccount:<ns>:<name>`, `uids`, and
//! `authentication.k8s.io` `userextras/<key>`), as upstream's impersonation filter does before
//! priority and fairness and authorization see the request.

use axum::http::HeaderMap;
use capstan_api::{RequestInfo, StatusError};

use crate::authn::User;
use crate::authz::{Attributes, Authorizer};
use crate::status::ApiError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// One thing a request asks to act as.
struct Request {
    group: &'static str,
    resource: String,
    namespace: String,
    name: String,
}

impl Request {
    fn attributes(&self) -> Attributes {
        Attributes {
            resource_request: true,
            verb: "impersonate".into(),
            group: self.group.into(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ..Attributes::default()
        }
    }

    /// Upstream's 403 for an impersonation the requester may not do.
    fn forbidden(&self, requester: &str, reason: &str) -> ApiError {
        let info = RequestInfo {
            is_resource_request: true,
            verb: "impersonate".into(),
            api_group: self.group.into(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ..RequestInfo::default()
        };
        ApiError::forbidden_because(&info, requester, reason)
    }
}

/// The user a request acts as: `user` itself when it asks for no impersonation, else the user
/// its headers name (after checking that `user` may impersonate each part); the impersonation
/// headers are removed.
pub(crate) async fn acting_user(
    user: User,
    headers: &mut HeaderMap,
    authorizer: &Authorizer,
) -> Result<User, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let name = values(USER).into_iter().next();
    let groups = values(GROUP);
    let uid = values(UID).into_iter().next();
    let extras: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(key, value)| {
            let key = key.as_str().strip_prefix(EXTRA)?;
            Some((key.to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let Some(name) = name else {
        if groups.is_empty() && uid.is_none() && extras.is_empty() {
            return Ok(user);
        }
        return Err(StatusError::internal(
            "requested impersonation of groups, a uid or extras without impersonating a user",
        )
        .into());
    };
    let mut requests = Vec::new();
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    requests.push(match service_account {
        Some((namespace, account)) => Request {
            group: "",
            resource: "serviceaccounts".into(),
            namespace: namespace.into(),
            name: account.into(),
        },
        None => Request {
            group: "",
            resource: "users".into(),
            namespace: String::new(),
            name: name.clone(),
        },
    });
    for group in &groups {
        requests.push(Request {
            group: "",
            resource: "groups".into(),
            namespace: String::new(),
            name: group.clone(),
        });
    }
    if let Some(uid) = &uid {
        requests.push(Request {
            group: "authentication.k8s.io",
            resource: "uids".into(),
            namespace: String::new(),
            name: uid.clone(),
        });
    }
    for (key, value) in &extras {
        requests.push(Request {
            group: "authentication.k8s.io",
            resource: format!("userextras/{key}"),
            namespace: String::new(),
            name: value.clone(),
        });
    }
    for request in &requests {
        let decision = authorizer.authorize(&user, &request.attributes()).await;
        if !decision.allowed {
            return Err(request.forbidden(&user.name, &decision.reason));
        }
    }
    let mut acting_groups = groups.clone();
    if groups.is_empty()
        && let Some((namespace, _)) = service_account
    {
        acting_groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
        ];
    }
    // Everyone impersonated is authenticated (or, as the anonymous user, unauthenticated)
    // unless the groups asked for say which.
    let anonymous = name == "system:anonymous";
    let implied = if anonymous {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !acting_groups
        .iter()
        .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
    {
        acting_groups.push(implied.into());
    }
    for header in [USER, GROUP, UID] {
        headers.remove(header);
    }
    let extra_keys: Vec<_> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(EXTRA))
        .cloned()
        .collect();
    for key in extra_keys {
        headers.remove(key);
    }
    let mut extra: std::collections::BTreeMap<String, Vec<String>> =
        std::collections::BTreeMap::new();
    for (key, value) in extras {
        extra.entry(key).or_default().push(value);
    }
    Ok(User {
        name,
        uid: uid.unwrap_or_default(),
        groups: acting_groups,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[tokio::test]
    async fn admins_act_as_others_and_others_may_not() {
        let authorizer = crate::authz::tests_support::bootstrapped();
        let admin = User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        let mut h = headers(&[("Impersonate-User", "jane"), ("Impersonate-Group", "devs")]);
        let jane = acting_user(admin.clone(), &mut h, &authorizer)
            .await
            .unwrap();
        assert_eq!(jane.name, "jane");
        assert_eq!(jane.groups, ["devs", "system:authenticated"]);
        assert!(h.is_empty());
        let mut h = headers(&[
            ("Impersonate-User", "kim"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-Scopes", "edit"),
        ]);
        let kim = acting_user(admin.clone(), &mut h, &authorizer)
            .await
            .unwrap();
        assert_eq!(kim.uid, "u-1");
        assert_eq!(kim.extra["scopes"], ["view", "edit"]);
        let mut h = headers(&[("Impersonate-User", "system:serviceaccount:ci:builder")]);
        let sa = acting_user(admin.clone(), &mut h, &authorizer)
            .await
            .unwrap();
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                "system:authenticated"
            ]
        );
        let mut h = headers(&[("Impersonate-User", "admin2")]);
        let error = acting_user(jane, &mut h, &authorizer).await.unwrap_err();
        assert_eq!(error.status().code(), 403);
        assert_eq!(
            error.status().to_json()["message"],
            "users \"admin2\" is forbidden: User \"jane\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let mut h = headers(&[("Impersonate-Group", "devs")]);
        assert_eq!(
            acting_user(admin.clone(), &mut h, &authorizer)
                .await
                .unwrap_err()
                .status()
                .code(),
            500
        );
        let mut h = HeaderMap::new();
        assert_eq!(
            acting_user(admin, &mut h, &authorizer).await.unwrap().name,
            "admin"
        );
    }
}
