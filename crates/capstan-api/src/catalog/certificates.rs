//! The `certificates.k8s.io/v1` kinds: CertificateSigningRequests, with upstream's `status`
//! subresource (the signer's certificate and conditions) and `approval` subresource (the
//! Approved and Denied conditions). The requester recorded in the spec comes from the request's
//! user, which the strategy does not see: the API server's admission records it
//! ([`crate::certificates::record_requester`]).

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{GET_PATCH_UPDATE, Resource, Serves, Subresource, of, printer, status, typed};
use crate::certificates::{APPROVED, DENIED};
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation::certificates as v;

/// The `approval` subresource: writes the request's Approved and Denied conditions.
const APPROVAL: Subresource = Subresource {
    name: "approval",
    group_version: None,
    kind: "CertificateSigningRequest",
    verbs: GET_PATCH_UPDATE,
    serves: Serves::Object,
    schema: None,
};

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["csr"],
    subresources: &[APPROVAL, status("CertificateSigningRequest")],
    printer: printer(
        p::CERTIFICATE_SIGNING_REQUEST_COLUMNS,
        p::certificate_signing_request,
    ),
    strategy: || {
        typed::<CertificateSigningRequest>(Hooks {
            validate: v::validate_certificate_signing_request,
            validate_update: v::validate_certificate_signing_request_update,
            validate_status_update: v::validate_certificate_signing_request_status_update,
            validate_subresource_update: v::validate_certificate_signing_request_subresource_update,
            prepare_create: |csr| {
                csr.status = Some(CertificateSigningRequestStatus::default());
            },
            prepare_update,
            field_names: &["spec.signerName"],
            fields: |csr| vec![("spec.signerName", csr.spec.signer_name.clone())],
            ..Hooks::with_status()
        })
    },
    ..of::<CertificateSigningRequest>("certificatesigningrequest")
}];

/// What each endpoint may change: nothing but metadata through the object; the certificate and
/// conditions other than Approved/Denied through `/status`; the conditions through `/approval`.
fn prepare_update(
    new: &mut CertificateSigningRequest,
    old: &CertificateSigningRequest,
    subresource: Option<&str>,
) {
    new.spec = old.spec.clone();
    match subresource {
        Some("status") => {
            for kind in [APPROVED, DENIED] {
                keep_instances(new, old, kind);
            }
            stamp_conditions(new, old);
        }
        Some("approval") => {
            stamp_conditions(new, old);
            let conditions = new.status.take().and_then(|s| s.conditions);
            let mut status = old.status.clone().unwrap_or_default();
            status.conditions = conditions;
            new.status = Some(status);
        }
        _ => new.status = old.status.clone(),
    }
}

fn indices(conditions: &[CertificateSigningRequestCondition], kind: &str) -> Vec<usize> {
    conditions
        .iter()
        .enumerate()
        .filter(|(_, c)| c.type_ == kind)
        .map(|(i, _)| i)
        .collect()
}

/// Puts the stored conditions of `kind` back in place when `/status` kept their number (a
/// change of number is refused by validation).
fn keep_instances(
    new: &mut CertificateSigningRequest,
    old: &CertificateSigningRequest,
    kind: &str,
) {
    let before = crate::certificates::conditions(old);
    let Some(after) = new.status.as_mut().and_then(|s| s.conditions.as_mut()) else {
        return;
    };
    let (from, to) = (indices(before, kind), indices(after, kind));
    if from.len() == to.len() {
        for (f, t) in from.into_iter().zip(to) {
            after[t] = before[f].clone();
        }
    }
}

/// Fills in conditions' missing update times with now, and missing transition times with the
/// stored condition's of the same type and status, else now.
fn stamp_conditions(new: &mut CertificateSigningRequest, old: &CertificateSigningRequest) {
    let now = crate::defaults::now();
    let before = crate::certificates::conditions(old);
    let Some(after) = new.status.as_mut().and_then(|s| s.conditions.as_mut()) else {
        return;
    };
    for condition in after.iter_mut() {
        if condition.last_update_time.is_none() {
            condition.last_update_time = Some(now.clone());
        }
        if condition.last_transition_time.is_none() {
            let earlier: Option<Time> = before
                .iter()
                .find(|o| {
                    o.type_ == condition.type_
                        && o.status == condition.status
                        && o.last_transition_time.is_some()
                })
                .and_then(|o| o.last_transition_time.clone());
            condition.last_transition_time = Some(earlier.unwrap_or_else(|| now.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, reason: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition {
            type_: kind.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            ..CertificateSigningRequestCondition::default()
        }
    }

    fn with(conditions: Vec<CertificateSigningRequestCondition>) -> CertificateSigningRequest {
        let mut csr = CertificateSigningRequest::default();
        csr.spec.signer_name = "example.com/s".into();
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(conditions),
            certificate: None,
        });
        csr
    }

    #[test]
    fn status_writes_keep_the_approval_and_stamp_times() {
        let old = with(vec![condition(APPROVED, "ByAdmin")]);
        let mut new = with(vec![
            condition(APPROVED, "Changed"),
            condition("Failed", "Oops"),
        ]);
        new.spec.signer_name = "other.com/s".into();
        prepare_update(&mut new, &old, Some("status"));
        let conditions = crate::certificates::conditions(&new);
        assert_eq!(new.spec.signer_name, "example.com/s");
        assert_eq!(conditions[0].reason.as_deref(), Some("ByAdmin"));
        assert!(conditions[1].last_update_time.is_some());
        assert!(conditions[1].last_transition_time.is_some());
    }

    #[test]
    fn approval_writes_change_only_conditions() {
        let mut old = with(vec![]);
        old.status.as_mut().unwrap().certificate = Some(k8s_openapi::ByteString(b"c".to_vec()));
        let mut new = with(vec![condition(APPROVED, "ByAdmin")]);
        prepare_update(&mut new, &old, Some("approval"));
        let status = new.status.as_ref().unwrap();
        assert_eq!(status.certificate.as_ref().unwrap().0, b"c");
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        let mut main = with(vec![condition(DENIED, "x")]);
        prepare_update(&mut main, &old, None);
        assert!(crate::certificates::conditions(&main).is_empty());
    }
}
