//! The `authorizer` variable of admission's CEL expressions (webhooks' `matchConditions`,
//! ValidatingAdmissionPolicies), decided by the server's authorizer for the request's user
//! (or the service account an expression names): the expressions are evaluated, the checks
//! they asked for decided, and the expressions evaluated again until nothing is pending
//! ([`capstan_api::cel::authz`]).

use capstan_api::cel::authz::{Checks, Decided, Principal, Query, ResourceQuery};

use super::Attributes;
use crate::authn::User;

/// How many times expressions are evaluated for one request's checks before the checks still
/// pending are left failing (each round decides every check the last one asked for, so only
/// a chain of checks each depending on the one before needs more than two).
const ROUNDS: usize = 16;

/// The check of the request's own resource (`authorizer.requestResource`).
pub(crate) fn request_resource(attrs: &Attributes<'_>) -> ResourceQuery {
    ResourceQuery {
        group: attrs.resource.group.to_owned(),
        resource: attrs.resource.plural.to_owned(),
        subresource: attrs.subresource.to_owned(),
        namespace: attrs.namespace.to_owned(),
        name: attrs.name.to_owned(),
        ..ResourceQuery::default()
    }
}

/// Evaluates with `evaluate` until it leaves no check pending, deciding the checks it asked
/// for in between; what the last evaluation gave.
pub(crate) async fn settle<T>(
    checks: &Checks,
    attrs: &Attributes<'_>,
    mut evaluate: impl FnMut() -> T,
) -> T {
    for _ in 1..ROUNDS {
        let outcome = evaluate();
        let pending = checks.take_pending();
        if pending.is_empty() {
            return outcome;
        }
        for query in pending {
            let decided = decide(attrs, &query).await;
            checks.decide(query, decided);
        }
    }
    evaluate()
}

/// Upstream's user of a service account (`serviceaccount.UserInfo`).
fn service_account(namespace: &str, name: &str) -> User {
    User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        extra: Default::default(),
    }
}

/// The server's authorizer's answer to `query` for this request.
async fn decide(attrs: &Attributes<'_>, query: &Query) -> Decided {
    let user = match &query.principal {
        Principal::Requester => attrs.user.cloned(),
        Principal::ServiceAccount { namespace, name } => Some(service_account(namespace, name)),
    };
    // The server's own writes are the API server's, a member of `system:masters`.
    let Some(user) = user else {
        return Decided {
            allowed: true,
            ..Decided::default()
        };
    };
    let Some(authorizer) = attrs.authorizer else {
        return Decided {
            error: "no authorizer is configured".to_owned(),
            ..Decided::default()
        };
    };
    let resource = query.resource.clone().unwrap_or_default();
    let asked = crate::authz::Attributes {
        resource_request: query.resource.is_some(),
        verb: query.verb.clone(),
        group: resource.group,
        version: "*".to_owned(),
        resource: resource.resource,
        subresource: resource.subresource,
        name: resource.name,
        namespace: resource.namespace,
        path: query.path.clone(),
        field_selector: resource.field_selector,
    };
    let decision = authorizer.authorize(&user, &asked).await;
    Decided {
        allowed: decision.allowed,
        reason: decision.reason,
        error: decision.error,
    }
}
