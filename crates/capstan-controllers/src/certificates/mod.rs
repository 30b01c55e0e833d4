//! The certificate controllers (upstream's `pkg/controller/certificates`): the signer
//! ([`signer`], `csrsigning`) issues certificates from the cluster CA for approved requests to
//! the in-tree signers; the approver ([`approver`], `csrapproving`) approves node client
//! requests whose requester may create them (a SubjectAccessReview); the cleaner ([`cleaner`],
//! `csrcleaner`) deletes requests once they are done with or stale. Shared here: the signing
//! CA, upstream's subject rules for kubelet requests, and the conditions.

pub mod approver;
pub mod cleaner;
pub mod signer;

use std::collections::BTreeSet;
use std::time::Duration;

use capstan_api::certificates::{APPROVED, DENIED, FAILED, ParsedRequest};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

/// Upstream's `--cluster-signing-duration` default: a year.
pub const DEFAULT_SIGNING_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The CA certificate and key (PEM) the signer issues certificates with.
#[derive(Clone)]
pub struct SigningCa {
    /// The CA's certificate.
    pub cert_pem: String,
    /// The CA's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for SigningCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningCa").finish_non_exhaustive()
    }
}

/// The usages of a request, as a set.
pub(crate) fn usage_set(csr: &CertificateSigningRequest) -> BTreeSet<&str> {
    csr.spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

/// Go's `%v` of a sorted string list: `[a b c]`.
fn go_list(items: &[&str]) -> String {
    format!("[{}]", items.join(" "))
}

const KUBELET_CLIENT_USAGES: &[&str] = &["client auth", "digital signature", "key encipherment"];
const KUBELET_CLIENT_USAGES_NO_RSA: &[&str] = &["client auth", "digital signature"];
const KUBELET_SERVING_USAGES: &[&str] = &["digital signature", "key encipherment", "server auth"];
const KUBELET_SERVING_USAGES_NO_RSA: &[&str] = &["digital signature", "server auth"];

fn usages_are(usages: &BTreeSet<&str>, wanted: &[&str]) -> bool {
    usages.len() == wanted.len() && wanted.iter().all(|u| usages.contains(u))
}

fn only_system_nodes(request: &ParsedRequest) -> Result<(), String> {
    if request.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    Ok(())
}

fn node_common_name(request: &ParsedRequest) -> Result<(), String> {
    if !request.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Upstream's `ValidateKubeletClientCSR`: a node's client certificate (organization
/// `system:nodes` only, common name `system:node:<name>`, no subject alternative names, usages
/// client auth and digital signature, with or without key encipherment).
pub fn validate_kubelet_client(
    request: &ParsedRequest,
    usages: &BTreeSet<&str>,
) -> Result<(), String> {
    only_system_nodes(request)?;
    if !request.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !request.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !request.ip_addresses.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !request.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    node_common_name(request)?;
    if !usages_are(usages, KUBELET_CLIENT_USAGES)
        && !usages_are(usages, KUBELET_CLIENT_USAGES_NO_RSA)
    {
        return Err(format!(
            "usages did not match {}",
            go_list(KUBELET_CLIENT_USAGES)
        ));
    }
    Ok(())
}

/// Upstream's `ValidateKubeletServingCSR`: a node's serving certificate (usages server auth
/// and digital signature, with or without key encipherment; the node's subject; a DNS or IP
/// name; no e-mail or URI names).
pub fn validate_kubelet_serving(
    request: &ParsedRequest,
    usages: &BTreeSet<&str>,
) -> Result<(), String> {
    if !usages_are(usages, KUBELET_SERVING_USAGES)
        && !usages_are(usages, KUBELET_SERVING_USAGES_NO_RSA)
    {
        return Err(format!(
            "usages did not match {}",
            go_list(KUBELET_SERVING_USAGES)
        ));
    }
    only_system_nodes(request)?;
    node_common_name(request)?;
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !request.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !request.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    Ok(())
}

/// Upstream's usages check of `kube-apiserver-client` requests: client auth, optionally
/// digital signature and key encipherment, nothing else.
pub fn validate_apiserver_client_usages(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for usage in usages {
        match usage.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// Whether the request is approved and not denied (upstream's `IsCertificateRequestApproved`).
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    capstan_api::certificates::has_condition(csr, APPROVED)
        && !capstan_api::certificates::has_condition(csr, DENIED)
}

/// Whether the signer gave up on the request.
pub fn is_failed(csr: &CertificateSigningRequest) -> bool {
    capstan_api::certificates::conditions(csr)
        .iter()
        .any(|c| c.type_ == FAILED && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cn: &str, orgs: &[&str]) -> ParsedRequest {
        ParsedRequest {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            ..ParsedRequest::default()
        }
    }

    #[test]
    fn kubelet_client_rules_have_upstreams_messages() {
        let usages: BTreeSet<&str> = ["client auth", "digital signature"].into();
        assert_eq!(
            validate_kubelet_client(&node("system:node:n1", &["system:nodes"]), &usages),
            Ok(())
        );
        assert_eq!(
            validate_kubelet_client(&node("system:node:n1", &["other"]), &usages).unwrap_err(),
            "subject organization is not system:nodes"
        );
        assert_eq!(
            validate_kubelet_client(&node("alice", &["system:nodes"]), &usages).unwrap_err(),
            "subject common name does not begin with system:node:"
        );
        let mut with_dns = node("system:node:n1", &["system:nodes"]);
        with_dns.dns_names.push("n1".into());
        assert_eq!(
            validate_kubelet_client(&with_dns, &usages).unwrap_err(),
            "DNS subjectAltNames are not allowed"
        );
        let server: BTreeSet<&str> = ["server auth"].into();
        assert_eq!(
            validate_kubelet_client(&node("system:node:n1", &["system:nodes"]), &server)
                .unwrap_err(),
            "usages did not match [client auth digital signature key encipherment]"
        );
    }

    #[test]
    fn kubelet_serving_needs_a_name_and_server_usages() {
        let usages: BTreeSet<&str> = ["server auth", "digital signature"].into();
        let bare = node("system:node:n1", &["system:nodes"]);
        assert_eq!(
            validate_kubelet_serving(&bare, &usages).unwrap_err(),
            "DNS or IP subjectAltName is required"
        );
        let mut named = bare.clone();
        named.ip_addresses.push("10.0.0.1".parse().unwrap());
        assert_eq!(validate_kubelet_serving(&named, &usages), Ok(()));
    }

    #[test]
    fn apiserver_client_usages() {
        let of = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            validate_apiserver_client_usages(&of(&["client auth", "digital signature"])),
            Ok(())
        );
        assert_eq!(
            validate_apiserver_client_usages(&of(&["server auth"])).unwrap_err(),
            "invalid usage for client certificate: server auth"
        );
        assert_eq!(
            validate_apiserver_client_usages(&of(&["key encipherment"])).unwrap_err(),
            "missing required usage for client certificate: client auth"
        );
    }
}
