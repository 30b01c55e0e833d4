//! The Kubernetes API as Capstan serves it: the API level the whole workspace is pinned to, how a
//! request is read ([`RequestInfo`]), API errors as `Status` objects ([`StatusError`]), field
//! validation errors ([`field`]), the Table printers behind `kubectl get` ([`printers`]), the
//! OpenAPI documents ([`openapi`]), strategic merge patch with the built-in kinds' patch
//! metadata ([`strategic`]), the resource catalogue ([`catalog`]), selectors ([`selector`]),
//! quantities ([`quantity`]), the resource Metrics API ([`resourcemetrics`]), the query parameters of a request ([`query`]), ResourceQuota accounting ([`quota`]), Kubernetes protobuf bodies
//! ([`protobuf`]), conversion between the versions of a kind ([`convert`]), and upstream's
//! defaulting ([`defaults`]) and validation ([`validation`]) of each kind. No I/O.
//!
//! API types come from `k8s-openapi`, whose version feature is chosen once, in the workspace
//! manifest; this crate re-exports it so that every other crate sees the same level.

pub use k8s_openapi;

pub mod apiregistration;
pub mod apply;
pub mod bootstraptoken;
pub mod catalog;
pub mod cel;
pub mod certificates;
pub mod convert;
pub mod cron;
pub mod custom;
pub mod defaults;
pub mod duration;
pub mod field;
pub mod fit;
#[cfg(test)]
mod fuzz;
pub mod gojson;
pub mod names;
pub mod openapi;
pub mod podsecurity;
pub mod printers;
pub mod protobuf;
pub mod quantity;
pub mod query;
pub mod quota;
pub mod rbac;
mod request;
pub mod resourcemetrics;
pub mod selector;
mod status;
pub mod strategic;
pub mod strategy;
pub mod structural;
pub mod validation;

pub use duration::{go_duration_nanos, parse_go_duration};
pub use request::RequestInfo;
pub use status::{GroupResource, StatusError};

/// The Kubernetes minor version whose API Capstan serves (`k8s-openapi` feature `v1_33`).
pub const KUBERNETES_MINOR: u32 = k8s_openapi::k8s_if_ge_1_33! { 33 };

/// The Kubernetes version Capstan reports as its API level, e.g. in `/version`.
pub fn kubernetes_version() -> String {
    format!("v1.{KUBERNETES_MINOR}.0")
}

/// The SHA-512 of `bytes` in upper-case hex: the hash upstream puts in the ETags of discovery
/// and of OpenAPI v3 documents.
pub fn sha512_hex(bytes: &[u8]) -> String {
    hex(
        ring::digest::digest(&ring::digest::SHA512, bytes).as_ref(),
        b"0123456789ABCDEF",
    )
}

/// The SHA-256 of `bytes` in lower-case hex: the CA hash a join token carries
/// (`K10<hash>::...`, written by the server and checked by a joining agent) and the digests of
/// the OCI images the kubelet builds (`sha256:<hash>`).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(
        ring::digest::digest(&ring::digest::SHA256, bytes).as_ref(),
        b"0123456789abcdef",
    )
}

fn hex(bytes: &[u8], digits: &[u8; 16]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        out.push(char::from(digits[usize::from(byte >> 4)]));
        out.push(char::from(digits[usize::from(byte & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_is_pinned_to_kubernetes_1_33() {
        assert_eq!(KUBERNETES_MINOR, 33);
        assert_eq!(kubernetes_version(), "v1.33.0");
        // The pinned level must also expose the types 1.33 clients use.
        let _ = k8s_openapi::api::core::v1::Pod::default();
    }

    #[test]
    fn hashes_are_hex_in_the_case_their_users_expect() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha512_hex(b"abc"),
            "DDAF35A193617ABACC417349AE20413112E6FA4E89A97EA20A9EEEE64B55D39A\
             2192992A274FC1A836BA3C23A3FEEBBD454D4423643CE80E2A9AC94FA54CA49F"
        );
    }
}
