//! `certificates.k8s.io/v1` CertificateSigningRequests: upstream's validation of a new request
//! (a PEM `CERTIFICATE REQUEST` whose signature verifies, usages from the known set without
//! duplicates, a qualified signer name, at least ten minutes of requested duration, the
//! conditions' rules, well-formed issued certificates) and of updates through the object,
//! `/status` (which alone may set the certificate, once) and `/approval` (which alone may add
//! Approved and Denied conditions). What earlier releases let in stays tolerated when the stored
//! object already has it, as upstream's validation options do.

use std::collections::BTreeSet;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};

use crate::certificates::{self as certs, APPROVED, DENIED, FAILED, KNOWN_USAGES, LEGACY_UNKNOWN};
use crate::field::{BadValue, FieldError, Path};
use crate::names::{is_dns1123_label, is_dns1123_subdomain};
use crate::validation::meta::{validate_object_meta, validate_object_meta_update};
use crate::validation::names::NameValidator;

/// What an update may do beyond the rules of a create (upstream's validation options).
#[derive(Clone, Copy, Debug, Default)]
struct Options {
    /// Add, change or remove Approved/Denied conditions (`/approval`).
    setting_approval: bool,
    /// Set `status.certificate` (`/status`).
    setting_certificate: bool,
    /// The stored object has both Approved and Denied.
    both_approved_and_denied: bool,
    /// The stored object asks the legacy signer.
    legacy_signer: bool,
    /// The stored object has repeated condition types.
    duplicate_conditions: bool,
    /// The stored object has a condition without a type.
    empty_condition_type: bool,
    /// The certificate is unchanged, or the stored one is already malformed.
    arbitrary_certificate: bool,
    /// The stored object has an unknown usage.
    unknown_usages: bool,
    /// The stored object has a repeated usage.
    duplicate_usages: bool,
}

fn usages(csr: &CertificateSigningRequest) -> &[String] {
    csr.spec.usages.as_deref().unwrap_or(&[])
}

impl Options {
    /// The options of a write whose stored object is `old` (`None` for a create).
    fn for_write(new: &CertificateSigningRequest, old: Option<&CertificateSigningRequest>) -> Self {
        let Some(old) = old else {
            return Options::default();
        };
        let conditions = certs::conditions(old);
        let mut seen = BTreeSet::new();
        let duplicate_conditions = conditions.iter().any(|c| !seen.insert(c.type_.as_str()));
        let mut seen = BTreeSet::new();
        let duplicate_usages = usages(old).iter().any(|u| !seen.insert(u.as_str()));
        Options {
            setting_approval: false,
            setting_certificate: false,
            both_approved_and_denied: certs::has_condition(old, APPROVED)
                && certs::has_condition(old, DENIED),
            legacy_signer: old.spec.signer_name == LEGACY_UNKNOWN,
            duplicate_conditions,
            empty_condition_type: conditions.iter().any(|c| c.type_.is_empty()),
            arbitrary_certificate: certs::certificate(new) == certs::certificate(old)
                || certs::check_certificates(certs::certificate(old)).is_err(),
            unknown_usages: usages(old)
                .iter()
                .any(|u| !KNOWN_USAGES.contains(&u.as_str())),
            duplicate_usages,
        }
    }
}

/// Go's `%#v` of a byte slice (`[]byte{0x2d, 0x2d}`), as upstream shows a bad request.
fn go_bytes(bytes: &[u8]) -> BadValue {
    let items: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    BadValue::Other(format!("[]byte{{{}}}", items.join(", ")))
}

/// Upstream's `ValidateSignerName`: `<domain>/<path>`, the domain DNS labels with at least one
/// dot, the path DNS subdomains separated by dots, within the length limits.
pub fn validate_signer_name(path: &Path, signer: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if signer.is_empty() {
        errs.push(FieldError::required(path, ""));
        return errs;
    }
    let segments: Vec<&str> = signer.split('/').collect();
    if segments.len() != 2 {
        errs.push(FieldError::invalid(
            path,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return errs;
    }
    let (domain, rest) = (segments[0], segments[1]);
    const SUBDOMAIN_MAX: usize = 253;
    const LABEL_MAX: usize = 63;
    if domain.len() > SUBDOMAIN_MAX {
        errs.push(FieldError::too_long(path, SUBDOMAIN_MAX));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for label in &labels {
        let problems = is_dns1123_label(label);
        if !problems.is_empty() {
            for problem in problems {
                errs.push(FieldError::invalid(
                    path,
                    domain,
                    &format!(
                        "validating label {}: {problem}",
                        crate::field::go_quote(label)
                    ),
                ));
            }
            break;
        }
    }
    if labels.len() < 2 {
        errs.push(FieldError::invalid(
            path,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for label in rest.split('.') {
        let problems = is_dns1123_subdomain(label);
        if !problems.is_empty() {
            for problem in problems {
                errs.push(FieldError::invalid(
                    path,
                    rest,
                    &format!(
                        "validating label {}: {problem}",
                        crate::field::go_quote(label)
                    ),
                ));
            }
            break;
        }
    }
    let max = SUBDOMAIN_MAX + (SUBDOMAIN_MAX + LABEL_MAX + 1) + 1;
    if signer.len() > max {
        errs.push(FieldError::too_long(path, max));
    }
    errs
}

fn validate_conditions(csr: &CertificateSigningRequest, opts: Options) -> Vec<FieldError> {
    let path = Path::new("status").child("conditions");
    let mut errs = Vec::new();
    let (mut approved, mut denied) = (false, false);
    let mut seen = BTreeSet::new();
    for (i, c) in certs::conditions(csr).iter().enumerate() {
        let at = path.index(i);
        if !opts.empty_condition_type && c.type_.is_empty() {
            errs.push(FieldError::required(&at.child("type"), ""));
        }
        let allowed: &[&str] = if [APPROVED, DENIED, FAILED].contains(&c.type_.as_str()) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if c.status.is_empty() {
            errs.push(FieldError::required(&at.child("status"), ""));
        } else if !allowed.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                &at.child("status"),
                c.status.as_str(),
                allowed,
            ));
        }
        if !opts.both_approved_and_denied {
            let exclusive = match c.type_.as_str() {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if exclusive {
                errs.push(FieldError::invalid(
                    &at.child("type"),
                    c.type_.as_str(),
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.duplicate_conditions && !seen.insert(c.type_.as_str()) {
            errs.push(FieldError::duplicate(&at.child("type"), c.type_.as_str()));
        }
    }
    errs
}

fn validate(csr: &CertificateSigningRequest, opts: Options) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &csr.metadata,
        false,
        NameValidator::PathSegment,
        &Path::new("metadata"),
    );
    let spec = Path::new("spec");
    if let Err(problem) = certs::parse_request(&csr.spec.request.0) {
        errs.push(FieldError::invalid(
            &spec.child("request"),
            go_bytes(&csr.spec.request.0),
            &problem,
        ));
    }
    if usages(csr).is_empty() {
        errs.push(FieldError::required(&spec.child("usages"), ""));
    }
    if !opts.unknown_usages {
        for (i, usage) in usages(csr).iter().enumerate() {
            if !KNOWN_USAGES.contains(&usage.as_str()) {
                errs.push(FieldError::not_supported(
                    &spec.child("usages").index(i),
                    usage.as_str(),
                    KNOWN_USAGES,
                ));
            }
        }
    }
    if !opts.duplicate_usages {
        let mut seen = BTreeSet::new();
        for (i, usage) in usages(csr).iter().enumerate() {
            if !seen.insert(usage.as_str()) {
                errs.push(FieldError::duplicate(
                    &spec.child("usages").index(i),
                    usage.as_str(),
                ));
            }
        }
    }
    if !opts.legacy_signer && csr.spec.signer_name == LEGACY_UNKNOWN {
        errs.push(FieldError::invalid(
            &spec.child("signerName"),
            csr.spec.signer_name.as_str(),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        errs.extend(validate_signer_name(
            &spec.child("signerName"),
            &csr.spec.signer_name,
        ));
    }
    if let Some(seconds) = csr.spec.expiration_seconds
        && seconds < 600
    {
        errs.push(FieldError::invalid(
            &spec.child("expirationSeconds"),
            BadValue::Int(seconds.into()),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errs.extend(validate_conditions(csr, opts));
    if !opts.arbitrary_certificate
        && let Err(problem) = certs::check_certificates(certs::certificate(csr))
    {
        errs.push(FieldError::invalid(
            &Path::new("status").child("certificate"),
            "<certificate data>",
            &problem,
        ));
    }
    errs
}

/// A new request.
pub fn validate_certificate_signing_request(csr: &CertificateSigningRequest) -> Vec<FieldError> {
    validate(csr, Options::for_write(csr, None))
}

fn of_type<'a>(
    csr: &'a CertificateSigningRequest,
    kind: &str,
) -> Vec<&'a CertificateSigningRequestCondition> {
    certs::conditions(csr)
        .iter()
        .filter(|c| c.type_ == kind)
        .collect()
}

fn validate_update(
    new: &CertificateSigningRequest,
    old: &CertificateSigningRequest,
    opts: Options,
) -> Vec<FieldError> {
    let mut errs = validate(new, opts);
    let conditions = Path::new("status").child("conditions");
    for kind in [APPROVED, DENIED, FAILED] {
        if of_type(new, kind).len() < of_type(old, kind).len() {
            errs.push(FieldError::forbidden(
                &conditions,
                &format!("updates may not remove a condition of type \"{kind}\""),
            ));
        }
    }
    if !opts.setting_approval {
        for kind in [APPROVED, DENIED] {
            let (before, after) = (of_type(old, kind), of_type(new, kind));
            if after.len() > before.len() {
                errs.push(FieldError::forbidden(
                    &conditions,
                    &format!("updates may not add a condition of type \"{kind}\""),
                ));
            } else if after.len() == before.len() && after != before {
                errs.push(FieldError::forbidden(
                    &conditions,
                    &format!("updates may not modify a condition of type \"{kind}\""),
                ));
            }
        }
    }
    if certs::certificate(new) != certs::certificate(old) {
        if !opts.setting_certificate {
            errs.push(FieldError::forbidden(
                &Path::new("status").child("certificate"),
                "updates may not set certificate content",
            ));
        } else if !certs::certificate(old).is_empty() {
            errs.push(FieldError::forbidden(
                &Path::new("status").child("certificate"),
                "updates may not modify existing certificate content",
            ));
        }
    }
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &Path::new("metadata"),
    ));
    errs
}

/// An update of the object itself.
pub fn validate_certificate_signing_request_update(
    new: &CertificateSigningRequest,
    old: &CertificateSigningRequest,
) -> Vec<FieldError> {
    validate_update(new, old, Options::for_write(new, Some(old)))
}

/// An update through `/status`, which may set the certificate.
pub fn validate_certificate_signing_request_status_update(
    new: &CertificateSigningRequest,
    old: &CertificateSigningRequest,
) -> Vec<FieldError> {
    let opts = Options {
        setting_certificate: true,
        ..Options::for_write(new, Some(old))
    };
    validate_update(new, old, opts)
}

/// An update through another subresource: `/approval` may set Approved and Denied conditions.
pub fn validate_certificate_signing_request_subresource_update(
    new: &CertificateSigningRequest,
    old: &CertificateSigningRequest,
    subresource: &str,
) -> Vec<FieldError> {
    let opts = Options {
        setting_approval: subresource == "approval",
        ..Options::for_write(new, Some(old))
    };
    validate_update(new, old, opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn request_pem() -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap()
            .into_bytes()
    }

    fn csr() -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("c".into()),
                resource_version: Some("1".into()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request_pem()),
                signer_name: "example.com/signer".into(),
                usages: Some(vec!["client auth".into()]),
                ..CertificateSigningRequestSpec::default()
            },
            status: None,
        }
    }

    fn condition(kind: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition {
            type_: kind.into(),
            status: "True".into(),
            ..CertificateSigningRequestCondition::default()
        }
    }

    fn with_conditions(
        mut csr: CertificateSigningRequest,
        kinds: &[&str],
    ) -> CertificateSigningRequest {
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(kinds.iter().map(|k| condition(k)).collect()),
            certificate: None,
        });
        csr
    }

    fn bodies(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::body).collect()
    }

    #[test]
    fn a_valid_request_passes() {
        assert_eq!(
            bodies(&validate_certificate_signing_request(&csr())),
            Vec::<String>::new()
        );
    }

    #[test]
    fn spec_rules_have_upstreams_messages() {
        let mut bad = csr();
        bad.spec.request = ByteString(b"xy".to_vec());
        bad.spec.usages = Some(vec![
            "client auth".into(),
            "bogus".into(),
            "client auth".into(),
        ]);
        bad.spec.signer_name = "nodomain".into();
        bad.spec.expiration_seconds = Some(599);
        let errs = validate_certificate_signing_request(&bad);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.request",
                "spec.usages[1]",
                "spec.usages[2]",
                "spec.signerName",
                "spec.expirationSeconds"
            ]
        );
        assert_eq!(
            errs[0].body(),
            "Invalid value: []byte{0x78, 0x79}: PEM block type must be CERTIFICATE REQUEST"
        );
        assert!(
            errs[1].body().starts_with(
                "Unsupported value: \"bogus\": supported values: \"any\", \"cert sign\""
            )
        );
        assert_eq!(errs[2].body(), "Duplicate value: \"client auth\"");
        assert_eq!(
            errs[3].body(),
            "Invalid value: \"nodomain\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
        );
        assert_eq!(
            errs[4].body(),
            "Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"
        );
        let mut legacy = csr();
        legacy.spec.signer_name = LEGACY_UNKNOWN.into();
        assert_eq!(
            bodies(&validate_certificate_signing_request(&legacy)),
            [
                "Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
            ]
        );
        assert_eq!(
            bodies(&validate_signer_name(&Path::new("s"), "example/x")),
            [
                "Invalid value: \"example\": should be a domain with at least two segments separated by dots"
            ]
        );
    }

    #[test]
    fn approval_conditions_change_only_through_approval() {
        let old = csr();
        let approved = with_conditions(csr(), &[APPROVED]);
        assert_eq!(
            bodies(&validate_certificate_signing_request_status_update(
                &approved, &old
            )),
            ["Forbidden: updates may not add a condition of type \"Approved\""]
        );
        assert!(
            validate_certificate_signing_request_subresource_update(&approved, &old, "approval")
                .is_empty()
        );
        let both = with_conditions(csr(), &[APPROVED, DENIED]);
        assert_eq!(
            bodies(&validate_certificate_signing_request_subresource_update(
                &both, &old, "approval"
            )),
            ["Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"]
        );
        assert_eq!(
            bodies(&validate_certificate_signing_request_subresource_update(
                &old, &approved, "approval"
            )),
            ["Forbidden: updates may not remove a condition of type \"Approved\""]
        );
        let mut pending = condition(FAILED);
        pending.status = "False".into();
        let mut failed_false = csr();
        failed_false.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![pending]),
            certificate: None,
        });
        assert_eq!(
            bodies(&validate_certificate_signing_request_status_update(
                &failed_false,
                &old
            )),
            ["Unsupported value: \"False\": supported values: \"True\""]
        );
    }

    #[test]
    fn the_certificate_is_set_once_through_status_only() {
        let old = with_conditions(csr(), &[APPROVED]);
        let cert = crate::certificates::self_signed_pem();
        let mut issued = old.clone();
        issued.status.as_mut().unwrap().certificate = Some(ByteString(cert.into_bytes()));
        assert!(validate_certificate_signing_request_status_update(&issued, &old).is_empty());
        assert_eq!(
            bodies(&validate_certificate_signing_request_update(&issued, &old)),
            ["Forbidden: updates may not set certificate content"]
        );
        let mut changed = issued.clone();
        changed.status.as_mut().unwrap().certificate = Some(ByteString(b"junk".to_vec()));
        assert_eq!(
            bodies(&validate_certificate_signing_request_status_update(
                &changed, &issued
            )),
            [
                "Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block",
                "Forbidden: updates may not modify existing certificate content"
            ]
        );
    }
}
