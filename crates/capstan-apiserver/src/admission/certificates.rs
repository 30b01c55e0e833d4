//! Upstream's admission of CertificateSigningRequests, and the requester its strategy records:
//! - CertificateApproval: a write through `/approval` needs the `approve` verb on the `signers`
//!   resource of `certificates.k8s.io` named by the request's signer (or `<domain>/*`);
//! - CertificateSigning: a `/status` write that changes the certificate needs `sign` on it;
//! - CertificateSubjectRestriction: a request to the `kube-apiserver-client` signer may not ask
//!   for the `system:masters` organization;
//! - [`record_requester`]: a new request's `spec.username`, `uid`, `groups` and `extra` are the
//!   requesting user's, whatever the client sent.

use capstan_api::catalog::Resource;
use capstan_api::certificates::{self as certs, KUBE_APISERVER_CLIENT, Requester};
use capstan_api::{GroupResource, StatusError};
use serde_json::Value;

use super::{Attributes, Operation, Plugin, Review, Validation, Verdict};
use crate::authn::User;
use crate::authz::Authorizer;
use crate::status::ApiError;

const GROUP: &str = "certificates.k8s.io";

/// Whether `resource` is the CertificateSigningRequests.
pub(crate) fn is_csr(resource: &Resource) -> bool {
    resource.group == GROUP && resource.plural == "certificatesigningrequests"
}

/// Records `user` as the requester of the new request `object`.
pub(crate) fn record_requester(user: Option<&User>, object: &mut Value) {
    let requester = user.map(|u| Requester {
        name: &u.name,
        uid: &u.uid,
        groups: &u.groups,
        extra: &u.extra,
    });
    certs::record_requester(object, requester.as_ref());
}

fn signer_of(object: &Value) -> &str {
    object
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether `user` may `verb` requests to `signer` (upstream's `IsAuthorizedForSignerName`: the
/// signer by name, then every signer of its domain).
pub(crate) async fn authorized_for_signer(
    authorizer: &Authorizer,
    user: &User,
    verb: &str,
    signer: &str,
) -> bool {
    for name in certs::signer_resource_names(signer) {
        let attributes = crate::authz::Attributes {
            resource_request: true,
            verb: verb.to_owned(),
            group: GROUP.to_owned(),
            resource: "signers".to_owned(),
            name,
            ..crate::authz::Attributes::default()
        };
        if authorizer.authorize(user, &attributes).await.allowed {
            return true;
        }
    }
    false
}

fn forbidden(attrs: &Attributes<'_>, reason: &str) -> ApiError {
    StatusError::forbidden(
        GroupResource::new(attrs.resource.group, attrs.resource.plural),
        attrs.name,
        reason,
    )
    .into()
}

/// The check of the approval and signing plugins: a user's write through `subresource` needs
/// `verb` on the signer.
async fn check_signer_verb(
    attrs: &Attributes<'_>,
    signer: &str,
    verb: &str,
) -> Result<(), ApiError> {
    let (Some(user), Some(authorizer)) = (attrs.user, attrs.authorizer) else {
        return Ok(());
    };
    if authorized_for_signer(authorizer, user, verb, signer).await {
        return Ok(());
    }
    tracing::debug!(user = %user.name, name = attrs.name, signer, verb, "refused for the signer");
    Err(forbidden(
        attrs,
        &format!(
            "user not permitted to {verb} requests with signerName {}",
            capstan_api::field::go_quote(signer)
        ),
    ))
}

/// Upstream's CertificateApproval plugin.
#[derive(Debug)]
pub(crate) struct CertificateApproval;

impl Plugin for CertificateApproval {
    fn name(&self) -> &'static str {
        "CertificateApproval"
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            if !is_csr(attrs.resource)
                || attrs.subresource != "approval"
                || attrs.operation != Operation::Update
            {
                return Ok(());
            }
            check_signer_verb(attrs, signer_of(object), "approve").await
        })
    }
}

/// Upstream's CertificateSigning plugin.
#[derive(Debug)]
pub(crate) struct CertificateSigning;

impl Plugin for CertificateSigning {
    fn name(&self) -> &'static str {
        "CertificateSigning"
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            let Some(old) = old else {
                return Ok(());
            };
            if !is_csr(attrs.resource)
                || attrs.subresource != "status"
                || attrs.operation != Operation::Update
                || object.pointer("/status/certificate") == old.pointer("/status/certificate")
            {
                return Ok(());
            }
            check_signer_verb(attrs, signer_of(old), "sign").await
        })
    }
}

/// Upstream's CertificateSubjectRestriction plugin.
#[derive(Debug)]
pub(crate) struct CertificateSubjectRestriction;

impl Plugin for CertificateSubjectRestriction {
    fn name(&self) -> &'static str {
        "CertificateSubjectRestriction"
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            if !is_csr(attrs.resource)
                || !attrs.subresource.is_empty()
                || attrs.operation != Operation::Create
                || signer_of(object) != KUBE_APISERVER_CLIENT
            {
                return Ok(());
            }
            let request = object
                .pointer("/spec/request")
                .and_then(Value::as_str)
                .and_then(|b64| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(b64).ok()
                })
                .unwrap_or_default();
            let parsed = certs::parse_request(&request)
                .map_err(|e| forbidden(attrs, &format!("failed to parse CSR: {e}")))?;
            if parsed.organizations.iter().any(|o| o == "system:masters") {
                return Err(forbidden(
                    attrs,
                    &format!(
                        "use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
                    ),
                ));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review<'a>(
        attrs: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Validation<'a> {
        Review { attrs, object, old }
    }
    use serde_json::json;

    fn csrs() -> &'static Resource {
        capstan_api::catalog::lookup(GROUP, "v1", "certificatesigningrequests")
            .unwrap_or_else(|| panic!("CSRs are served"))
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::default()
        }
    }

    fn attrs<'a>(
        subresource: &'a str,
        operation: Operation,
        user: &'a User,
        authorizer: &'a std::sync::Arc<Authorizer>,
    ) -> Attributes<'a> {
        Attributes {
            resource: csrs(),
            request_resource: None,
            subresource,
            operation,
            namespace: "",
            name: "c",
            user: Some(user),
            dry_run: false,
            warnings: None,
            audit: None,
            authorizer: Some(authorizer),
        }
    }

    fn message(error: &ApiError) -> String {
        error.status().status.message.clone().unwrap_or_default()
    }

    #[tokio::test]
    async fn approving_and_signing_need_the_verb_on_the_signer() {
        let authorizer = std::sync::Arc::new(crate::authz::tests_support::bootstrapped());
        let admin = user("root", &["system:masters"]);
        let plain = user("bob", &["system:authenticated"]);
        let csr = json!({"spec": {"signerName": "example.com/s"}});
        let approve = |u| attrs("approval", Operation::Update, u, &authorizer);
        assert!(
            CertificateApproval
                .validate(review(&approve(&admin), &csr, Some(&csr)))
                .await
                .is_ok()
        );
        let refused = CertificateApproval
            .validate(review(&approve(&plain), &csr, Some(&csr)))
            .await
            .unwrap_err();
        assert_eq!(refused.status().code(), 403);
        assert_eq!(
            message(&refused),
            "certificatesigningrequests.certificates.k8s.io \"c\" is forbidden: user not \
             permitted to approve requests with signerName \"example.com/s\""
        );
        // Status writes that leave the certificate alone need nothing; setting it needs `sign`.
        let status = attrs("status", Operation::Update, &plain, &authorizer);
        assert!(
            CertificateSigning
                .validate(review(&status, &csr, Some(&csr)))
                .await
                .is_ok()
        );
        let signed = json!({"spec": {"signerName": "example.com/s"},
                            "status": {"certificate": "Y2VydA=="}});
        let refused = CertificateSigning
            .validate(review(&status, &signed, Some(&csr)))
            .await
            .unwrap_err();
        assert!(
            message(&refused)
                .ends_with("user not permitted to sign requests with signerName \"example.com/s\"")
        );
    }

    #[tokio::test]
    async fn the_apiserver_client_signer_refuses_system_masters() {
        let authorizer = std::sync::Arc::new(crate::authz::tests_support::bootstrapped());
        let plain = user("bob", &["system:authenticated"]);
        let request = |orgs: &[&str]| {
            let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
            let mut params = rcgen::CertificateParams::default();
            for org in orgs {
                params
                    .distinguished_name
                    .push(rcgen::DnType::OrganizationName, *org);
            }
            let pem = params
                .serialize_request(&key)
                .and_then(|r| r.pem())
                .unwrap_or_else(|e| panic!("{e}"));
            use base64::Engine;
            json!({"spec": {"signerName": KUBE_APISERVER_CLIENT,
                "request": base64::engine::general_purpose::STANDARD.encode(pem)}})
        };
        let create = attrs("", Operation::Create, &plain, &authorizer);
        assert!(
            CertificateSubjectRestriction
                .validate(review(&create, &request(&["devs"]), None))
                .await
                .is_ok()
        );
        let refused = CertificateSubjectRestriction
            .validate(review(&create, &request(&["devs", "system:masters"]), None))
            .await
            .unwrap_err();
        assert!(message(&refused).ends_with(
            "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
        ));
    }

    #[test]
    fn the_requester_is_the_user() {
        let mut object = json!({"spec": {"username": "mallory", "signerName": "x/y"}});
        record_requester(Some(&user("alice", &["devs"])), &mut object);
        assert_eq!(
            object,
            json!({"spec": {"username": "alice", "groups": ["devs"], "signerName": "x/y"}})
        );
        record_requester(None, &mut object);
        assert_eq!(object, json!({"spec": {"signerName": "x/y"}}));
    }
}
