//! What the `certificates.k8s.io/v1` CertificateSigningRequest API shares between its
//! validation, the API server's admission and authorization checks and the certificate
//! controllers: the well-known signer names, the key usages, PEM blocks as Go's `encoding/pem`
//! reads them, the parsed request (subject, names, verified signature), the conditions and the
//! requester the server records on create.

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64::Engine;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use serde_json::Value;
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};

/// The signer of client certificates the API server accepts.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The signer of kubelets' client certificates.
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// The legacy signer, which no in-tree controller signs for (and v1 refuses on create).
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The condition types with upstream's meaning.
pub const APPROVED: &str = "Approved";
/// Denied by an approver.
pub const DENIED: &str = "Denied";
/// The signer could not or would not sign.
pub const FAILED: &str = "Failed";

/// Every key usage upstream knows, in the sorted order its errors list them.
pub const KNOWN_USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// One PEM block as Go's `pem.Decode` finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemBlock {
    /// The type after `BEGIN` (`CERTIFICATE`, `CERTIFICATE REQUEST`).
    pub label: String,
    /// Whether the block has `Key: value` headers.
    pub has_headers: bool,
    /// The decoded body.
    pub der: Vec<u8>,
}

/// The PEM blocks of `data`, in order, skipping text around and between them; a block whose
/// body is not base64 or that lacks its END line is skipped as Go's decoder skips it.
pub fn pem_blocks(data: &[u8]) -> Vec<PemBlock> {
    let text = String::from_utf8_lossy(data);
    let mut blocks = Vec::new();
    let mut rest: &str = &text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        if label.contains('\n') {
            rest = after;
            continue;
        }
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_start.find(&end_marker) else {
            rest = after;
            continue;
        };
        let body = &body_start[..end];
        rest = &body_start[end + end_marker.len()..];
        let mut has_headers = false;
        let mut encoded = String::new();
        let mut in_headers = true;
        for line in body.trim_start_matches(['\r', '\n']).lines() {
            let line = line.trim();
            if in_headers {
                if line.contains(':') {
                    has_headers = true;
                    continue;
                }
                if line.is_empty() && has_headers {
                    in_headers = false;
                    continue;
                }
                in_headers = false;
            }
            encoded.push_str(line);
        }
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(encoded.as_bytes()) {
            blocks.push(PemBlock {
                label: label.to_owned(),
                has_headers,
                der,
            });
        }
    }
    blocks
}

/// What a certificate request asks for, parsed and with its signature checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedRequest {
    /// The request's DER (the PEM block's body).
    pub der: Vec<u8>,
    /// The subject's common name (the first one).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
    /// Requested DNS names.
    pub dns_names: Vec<String>,
    /// Requested IP addresses.
    pub ip_addresses: Vec<IpAddr>,
    /// Requested e-mail addresses.
    pub email_addresses: Vec<String>,
    /// Requested URIs.
    pub uris: Vec<String>,
}

/// Parses `spec.request`: the first PEM block must be a `CERTIFICATE REQUEST` whose PKCS#10
/// request parses and whose signature verifies; the error text is the one upstream's
/// validation puts into its field error.
pub fn parse_request(request: &[u8]) -> Result<ParsedRequest, String> {
    let block = pem_blocks(request)
        .into_iter()
        .next()
        .filter(|b| b.label == "CERTIFICATE REQUEST")
        .ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    let (_, csr) = X509CertificationRequest::from_der(&block.der)
        .map_err(|_| "x509: malformed certificate request".to_owned())?;
    if csr.verify_signature().is_err() {
        let algorithm = csr
            .certification_request_info
            .subject_pki
            .algorithm
            .algorithm
            .to_id_string();
        return Err(match algorithm.as_str() {
            // rsaEncryption
            "1.2.840.113549.1.1.1" => "crypto/rsa: verification error",
            // id-Ed25519
            "1.3.101.112" => "x509: Ed25519 verification failure",
            _ => "x509: ECDSA verification failure",
        }
        .to_owned());
    }
    let subject = &csr.certification_request_info.subject;
    let mut parsed = ParsedRequest {
        common_name: subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_owned(),
        organizations: subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_owned))
            .collect(),
        ..ParsedRequest::default()
    };
    if let Some(extensions) = csr.requested_extensions() {
        for extension in extensions {
            if let ParsedExtension::SubjectAlternativeName(san) = extension {
                for name in &san.general_names {
                    match name {
                        GeneralName::DNSName(dns) => parsed.dns_names.push((*dns).to_owned()),
                        GeneralName::RFC822Name(mail) => {
                            parsed.email_addresses.push((*mail).to_owned());
                        }
                        GeneralName::URI(uri) => parsed.uris.push((*uri).to_owned()),
                        GeneralName::IPAddress(bytes) => {
                            if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                                parsed.ip_addresses.push(IpAddr::from(v4));
                            } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                                parsed.ip_addresses.push(IpAddr::from(v6));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    parsed.der = block.der;
    Ok(parsed)
}

/// Checks `status.certificate` as upstream: empty, or only `CERTIFICATE` blocks without
/// headers, each holding a certificate, at least one.
pub fn check_certificates(data: &[u8]) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    let blocks = pem_blocks(data);
    if blocks.is_empty() {
        return Err("must contain at least one CERTIFICATE PEM block".to_owned());
    }
    for block in blocks {
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                crate::field::go_quote(&block.label)
            ));
        }
        if block.has_headers {
            return Err("no PEM block headers are permitted".to_owned());
        }
        if x509_parser::parse_x509_certificate(&block.der).is_err() {
            return Err("x509: malformed certificate".to_owned());
        }
    }
    Ok(())
}

/// The conditions of a request.
pub fn conditions(csr: &CertificateSigningRequest) -> &[CertificateSigningRequestCondition] {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

/// Whether the request has a condition of `kind` (upstream treats any status as present).
pub fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    conditions(csr).iter().any(|c| c.type_ == kind)
}

/// The issued certificate, empty while none is.
pub fn certificate(csr: &CertificateSigningRequest) -> &[u8] {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map_or(&[], |c| c.0.as_slice())
}

/// Who made a request, as the server records it in its spec on create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requester<'a> {
    /// The user name.
    pub name: &'a str,
    /// The user's uid (may be empty).
    pub uid: &'a str,
    /// The user's groups.
    pub groups: &'a [String],
    /// The user's extra facts.
    pub extra: &'a BTreeMap<String, Vec<String>>,
}

/// Replaces what a client sent as `spec.username`, `uid`, `groups` and `extra` of a new request
/// by `requester` (upstream's strategy does this on every create; a write with no requester
/// leaves them empty).
pub fn record_requester(object: &mut Value, requester: Option<&Requester<'_>>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    let Some(user) = requester else {
        return;
    };
    if !user.name.is_empty() {
        spec.insert("username".into(), user.name.into());
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), user.uid.into());
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), user.groups.into());
    }
    if !user.extra.is_empty() {
        spec.insert(
            "extra".into(),
            serde_json::to_value(user.extra).unwrap_or_default(),
        );
    }
}

/// The resource names an authorization check of a signer tries, in order: the signer itself,
/// then every signer of its domain (`example.com/*`), as upstream's `IsAuthorizedForSignerName`.
pub fn signer_resource_names(signer: &str) -> Vec<String> {
    let mut names = vec![signer.to_owned()];
    if let Some((domain, _)) = signer.split_once('/') {
        names.push(format!("{domain}/*"));
    }
    names
}

/// A fresh self-signed certificate for the name `x`, in PEM (a test's fixture).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn self_signed_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    rcgen::CertificateParams::new(vec!["x".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *org);
        }
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    #[test]
    fn a_request_parses_with_its_subject_and_names() {
        let pem = request("system:node:n1", &["system:nodes"], &["n1.example"]);
        let parsed = parse_request(pem.as_bytes()).unwrap();
        assert_eq!(parsed.common_name, "system:node:n1");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert_eq!(parsed.dns_names, ["n1.example"]);
    }

    #[test]
    fn other_blocks_and_bad_signatures_are_refused_with_upstreams_texts() {
        assert_eq!(
            parse_request(b"nothing").unwrap_err(),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let pem = request("a", &[], &[]);
        let mut block = pem_blocks(pem.as_bytes()).remove(0);
        let last = block.der.len() - 1;
        block.der[last] ^= 0xff;
        let broken = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(&block.der)
        );
        assert_eq!(
            parse_request(broken.as_bytes()).unwrap_err(),
            "x509: ECDSA verification failure"
        );
    }

    #[test]
    fn certificates_must_be_headerless_certificate_blocks() {
        assert_eq!(check_certificates(b""), Ok(()));
        assert_eq!(
            check_certificates(b"junk").unwrap_err(),
            "must contain at least one CERTIFICATE PEM block"
        );
        let pem = request("a", &[], &[]);
        assert_eq!(
            check_certificates(pem.as_bytes()).unwrap_err(),
            "only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""
        );
        let cert = self_signed_pem();
        assert_eq!(check_certificates(cert.as_bytes()), Ok(()));
        let with_header = cert.replacen(
            "-----BEGIN CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\n",
            1,
        );
        assert_eq!(
            check_certificates(with_header.as_bytes()).unwrap_err(),
            "no PEM block headers are permitted"
        );
    }

    #[test]
    fn the_requester_replaces_what_the_client_sent() {
        let mut object = serde_json::json!({"spec": {"username": "mallory", "groups": ["system:masters"], "request": "x"}});
        let groups = vec!["g".to_owned()];
        let extra = BTreeMap::new();
        record_requester(
            &mut object,
            Some(&Requester {
                name: "alice",
                uid: "",
                groups: &groups,
                extra: &extra,
            }),
        );
        assert_eq!(
            object,
            serde_json::json!({"spec": {"username": "alice", "groups": ["g"], "request": "x"}})
        );
        assert_eq!(
            signer_resource_names("example.com/foo"),
            ["example.com/foo", "example.com/*"]
        );
    }
}
