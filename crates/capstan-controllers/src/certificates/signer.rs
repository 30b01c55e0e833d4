//! The CSR signer (upstream's `csrsigning` controller): an approved, unsigned request that has
//! not failed, to `kubernetes.io/kube-apiserver-client`, `kube-apiserver-client-kubelet` or
//! `kubelet-serving`, is checked against its signer's rules and signed by the cluster CA. A
//! request that breaks them gets a `Failed` condition (`SignerValidationFailure`) instead.
//! Requests to other signers, `kubernetes.io/legacy-unknown` among them, are left alone. The
//! kubelet serving signer may have a CA of its own (upstream's per-signer CA files).
//!
//! The certificate carries the request's subject and names, the key usages asked for, no CA
//! bit; it starts five minutes in the past (clock skew) and lasts `spec.expirationSeconds`
//! (at least ten minutes) or the signing duration, whichever is shorter, and never past the
//! CA's own end.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::certificates::{
    self as certs, FAILED, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING,
    ParsedRequest,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

use super::SigningCa;
use crate::runtime::{Change, Error, Queue, Setup, Task};

/// How far a certificate's start is set back (upstream's backdate, for clock skew).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Below this lifetime a certificate's end is not moved back with its start (upstream's
/// `Short`).
const SHORT: Duration = Duration::from_secs(8 * 3600);

/// The shortest certificate issued.
const MIN_DURATION: Duration = Duration::from_secs(10 * 60);

/// A loaded signing CA: its issuer and its certificate's end.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    ca_not_after: time::OffsetDateTime,
    max_duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("max_duration", &self.max_duration)
            .finish_non_exhaustive()
    }
}

/// Whether the signer handles `signer`, and if so whether the request obeys its rules.
pub fn check_for_signer(
    signer: &str,
    request: &ParsedRequest,
    usages: &[String],
) -> Option<Result<(), String>> {
    let set = || usages.iter().map(String::as_str).collect();
    match signer {
        KUBE_APISERVER_CLIENT => Some(super::validate_apiserver_client_usages(usages)),
        KUBE_APISERVER_CLIENT_KUBELET => Some(super::validate_kubelet_client(request, &set())),
        KUBELET_SERVING => Some(super::validate_kubelet_serving(request, &set())),
        _ => None,
    }
}

/// The lifetime of a certificate asked to last `expiration_seconds` under a `max` signer.
pub fn lifetime(expiration_seconds: Option<i32>, max: Duration) -> Duration {
    let Some(seconds) = expiration_seconds else {
        return max;
    };
    let asked = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    if asked > max {
        max
    } else if asked < MIN_DURATION {
        MIN_DURATION
    } else {
        asked
    }
}

fn key_usage(usage: &str) -> Option<KeyUsagePurpose> {
    Some(match usage {
        "signing" | "digital signature" => KeyUsagePurpose::DigitalSignature,
        "content commitment" => KeyUsagePurpose::ContentCommitment,
        "key encipherment" => KeyUsagePurpose::KeyEncipherment,
        "key agreement" => KeyUsagePurpose::KeyAgreement,
        "data encipherment" => KeyUsagePurpose::DataEncipherment,
        "cert sign" => KeyUsagePurpose::KeyCertSign,
        "crl sign" => KeyUsagePurpose::CrlSign,
        "encipher only" => KeyUsagePurpose::EncipherOnly,
        "decipher only" => KeyUsagePurpose::DecipherOnly,
        _ => return None,
    })
}

fn extended_usage(usage: &str) -> Option<ExtendedKeyUsagePurpose> {
    Some(match usage {
        "any" => ExtendedKeyUsagePurpose::Any,
        "server auth" => ExtendedKeyUsagePurpose::ServerAuth,
        "client auth" => ExtendedKeyUsagePurpose::ClientAuth,
        "code signing" => ExtendedKeyUsagePurpose::CodeSigning,
        "email protection" | "s/mime" => ExtendedKeyUsagePurpose::EmailProtection,
        "ipsec end system" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5]),
        "ipsec tunnel" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6]),
        "ipsec user" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7]),
        "timestamping" => ExtendedKeyUsagePurpose::TimeStamping,
        "ocsp signing" => ExtendedKeyUsagePurpose::OcspSigning,
        "microsoft sgc" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
        "netscape sgc" => ExtendedKeyUsagePurpose::Other(vec![2, 16, 840, 1, 113_730, 4, 1]),
        _ => return None,
    })
}

impl Signer {
    /// The signer of `ca`, issuing for at most `max_duration`.
    pub fn new(ca: &SigningCa, max_duration: Duration) -> Result<Self, String> {
        let key = KeyPair::from_pem(&ca.key_pem).map_err(|e| format!("the CA key: {e}"))?;
        let der = certs::pem_blocks(ca.cert_pem.as_bytes())
            .into_iter()
            .find(|b| b.label == "CERTIFICATE")
            .ok_or("the CA certificate: no CERTIFICATE block")?
            .der;
        let (_, parsed) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("the CA certificate: {e}"))?;
        let ca_not_after = parsed.validity().not_after.to_datetime();
        let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key)
            .map_err(|e| format!("the CA certificate: {e}"))?;
        Ok(Signer {
            issuer,
            ca_not_after,
            max_duration,
        })
    }

    /// Issues the certificate `csr` asks for at `now` (PEM).
    pub fn sign(
        &self,
        request: &ParsedRequest,
        usages: &[String],
        expiration_seconds: Option<i32>,
        now: time::OffsetDateTime,
    ) -> Result<String, String> {
        use base64::Engine;
        let pem = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(&request.der)
        );
        let mut params = CertificateSigningRequestParams::from_pem(&pem)
            .map_err(|e| format!("unable to parse the request: {e}"))?;
        let p = &mut params.params;
        p.key_usages = usages.iter().filter_map(|u| key_usage(u)).collect();
        p.extended_key_usages = usages.iter().filter_map(|u| extended_usage(u)).collect();
        p.is_ca = IsCa::ExplicitNoCa;
        p.use_authority_key_identifier_extension = true;
        let mut serial = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut serial)
            .map_err(|_| "no randomness for a serial number".to_owned())?;
        serial[0] &= 0x7f;
        p.serial_number = Some(SerialNumber::from_slice(&serial));
        let ttl = lifetime(expiration_seconds, self.max_duration);
        p.not_before = now - BACKDATE;
        let not_after = if ttl < SHORT {
            now + ttl
        } else {
            p.not_before + ttl
        };
        p.not_after = not_after.min(self.ca_not_after);
        params
            .signed_by(&self.issuer)
            .map(|c| c.pem())
            .map_err(|e| format!("unable to sign: {e}"))
    }
}

struct Context {
    client: Client,
    signer: Signer,
    /// The kubelet serving signer's own CA, when it has one.
    kubelet_serving: Option<Signer>,
}

/// Registers the CSR handler and returns the controller's run future; without a signing CA
/// (or with one that does not load) it does nothing.
pub fn start(mut setup: Setup<'_>) -> Task {
    let signer = match setup.config().signing_ca.as_ref() {
        Some(ca) => Signer::new(ca, setup.config().signing_duration),
        None => Err("no signing CA is configured".into()),
    };
    let signer = match signer {
        Ok(signer) => signer,
        Err(error) => {
            tracing::warn!(%error, "the CSR signer does not run");
            return Box::pin(async {});
        }
    };
    let kubelet_serving = match setup.config().kubelet_serving_ca.as_ref() {
        Some(ca) => match Signer::new(ca, setup.config().signing_duration) {
            Ok(signer) => Some(signer),
            Err(error) => {
                tracing::warn!(%error, "the CSR signer does not run");
                return Box::pin(async {});
            }
        },
        None => None,
    };
    let requests = setup.watch::<CertificateSigningRequest>();
    let (queue, rx) = Queue::<CertificateSigningRequest>::new();
    requests.on_change(move |change| {
        if let Change::Applied { new, .. } = change
            && wants_signing(new)
        {
            queue.add(ObjectRef::from_obj(*new));
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
        signer,
        kubelet_serving,
    });
    setup.run("csrsigning", &requests, rx, ctx, reconcile)
}

/// Approved, not yet issued, not failed.
fn wants_signing(csr: &CertificateSigningRequest) -> bool {
    certs::certificate(csr).is_empty() && super::is_approved(csr) && !super::is_failed(csr)
}

/// Now, as the certificate's clock.
fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !wants_signing(&csr) {
        return Ok(Action::await_change());
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let request = certs::parse_request(&csr.spec.request.0)
        .map_err(|e| Error::Invalid(format!("unable to parse csr {name:?}: {e}")))?;
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let Some(verdict) = check_for_signer(&csr.spec.signer_name, &request, &usages) else {
        return Ok(Action::await_change());
    };
    let mut updated = (*csr).clone();
    let status = updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    match verdict {
        Err(message) => {
            status.conditions.get_or_insert_with(Vec::new).push(
                CertificateSigningRequestCondition {
                    type_: FAILED.into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(message),
                    last_update_time: Some(Time(crate::pods::now())),
                    ..CertificateSigningRequestCondition::default()
                },
            );
        }
        Ok(()) => {
            let signer = match &ctx.kubelet_serving {
                Some(own) if csr.spec.signer_name == KUBELET_SERVING => own,
                _ => &ctx.signer,
            };
            let pem = signer
                .sign(&request, &usages, csr.spec.expiration_seconds, now())
                .map_err(Error::Invalid)?;
            status.certificate = Some(ByteString(pem.into_bytes()));
        }
    }
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    api.replace_status(&name, &PostParams::default(), &updated)
        .await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> SigningCa {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        params.not_after = time::OffsetDateTime::now_utc() + Duration::from_secs(3 * 365 * 86400);
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        SigningCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn request(cn: &str, orgs: &[&str]) -> ParsedRequest {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *org);
        }
        let pem = params
            .serialize_request(&key)
            .and_then(|r| r.pem())
            .unwrap_or_else(|e| panic!("{e}"));
        certs::parse_request(pem.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn lifetimes_follow_the_request_within_bounds() {
        let year = super::super::DEFAULT_SIGNING_DURATION;
        assert_eq!(lifetime(None, year), year);
        assert_eq!(lifetime(Some(600), year), MIN_DURATION);
        assert_eq!(lifetime(Some(3600), year), Duration::from_secs(3600));
        assert_eq!(lifetime(Some(i32::MAX), year), year);
    }

    #[test]
    fn only_the_in_tree_signers_are_handled() {
        let usages = vec!["client auth".to_owned()];
        let alice = request("alice", &["devs"]);
        assert_eq!(
            check_for_signer(KUBE_APISERVER_CLIENT, &alice, &usages),
            Some(Ok(()))
        );
        assert!(check_for_signer("kubernetes.io/legacy-unknown", &alice, &usages).is_none());
        assert!(check_for_signer("example.com/x", &alice, &usages).is_none());
        assert_eq!(
            check_for_signer(KUBE_APISERVER_CLIENT_KUBELET, &alice, &usages),
            Some(Err("subject organization is not system:nodes".into()))
        );
    }

    #[test]
    fn issued_certificates_carry_the_subject_usages_and_backdated_validity() {
        let signer = Signer::new(&ca(), super::super::DEFAULT_SIGNING_DURATION)
            .unwrap_or_else(|e| panic!("{e}"));
        let now = time::OffsetDateTime::now_utc();
        let usages = vec!["client auth".to_owned(), "digital signature".to_owned()];
        let pem = signer
            .sign(&request("alice", &["devs"]), &usages, Some(3600), now)
            .unwrap_or_else(|e| panic!("{e}"));
        let der = certs::pem_blocks(pem.as_bytes()).remove(0).der;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap_or_else(|e| panic!("{e}"));
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok());
        assert_eq!(cn, Some("alice"));
        assert_eq!(cert.issuer().to_string(), "CN=test-ca");
        let validity = cert.validity();
        let start = validity.not_before.timestamp();
        let end = validity.not_after.timestamp();
        assert_eq!(start, (now - BACKDATE).unix_timestamp());
        assert_eq!(end, (now + Duration::from_secs(3600)).unix_timestamp());
        let eku = cert
            .extended_key_usage()
            .ok()
            .flatten()
            .map(|e| e.value.client_auth);
        assert_eq!(eku, Some(true));
        assert!(!cert.is_ca());
        // A year-long certificate moves its end back with its start, and stops at the CA's end.
        let long = signer
            .sign(&request("bob", &[]), &usages, None, now)
            .unwrap_or_else(|e| panic!("{e}"));
        let der = certs::pem_blocks(long.as_bytes()).remove(0).der;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cert.validity().not_after.timestamp(),
            (now - BACKDATE + super::super::DEFAULT_SIGNING_DURATION).unix_timestamp()
        );
    }
}
