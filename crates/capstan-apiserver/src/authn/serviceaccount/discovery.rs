//! Service account issuer discovery, as upstream serves it: `/.well-known/openid-configuration`
//! (the OpenID provider metadata of the issuer: issuer, `jwks_uri`, `id_token`, `public`, the
//! keys' algorithms) and `/openid/v1/jwks` (the public signing keys as a JSON Web Key Set), so
//! that workload identity federations can verify Capstan's tokens. Both are rendered once, in
//! the field order Go's encoder writes them, and cached by clients for an hour. Reading them
//! is authorized as any non-resource URL (upstream's `system:service-account-issuer-discovery`
//! role, bound to every service account).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::jws::{ALGORITHM, SigningKey};

/// The provider metadata's path.
pub(crate) const CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// The key set's path.
pub(crate) const JWKS_PATH: &str = "/openid/v1/jwks";
/// Clients may cache both for an hour (upstream's age for keys read from files).
const CACHE_CONTROL: &str = "public, max-age=3600";

#[derive(Serialize)]
struct Metadata<'a> {
    issuer: &'a str,
    jwks_uri: &'a str,
    response_types_supported: [&'a str; 1],
    subject_types_supported: [&'a str; 1],
    id_token_signing_alg_values_supported: [&'a str; 1],
}

/// One key, as go-jose writes an EC public key.
#[derive(Serialize)]
struct Jwk<'a> {
    #[serde(rename = "use")]
    use_: &'a str,
    kty: &'a str,
    kid: &'a str,
    crv: &'a str,
    alg: &'a str,
    x: String,
    y: String,
}

#[derive(Serialize)]
struct KeySet<'a> {
    keys: Vec<Jwk<'a>>,
}

/// The two documents, rendered.
#[derive(Debug)]
pub(crate) struct IssuerDiscovery {
    config: String,
    keyset: String,
}

impl IssuerDiscovery {
    /// The documents of `issuer` signing with `key`, its keys published at `jwks_uri`.
    pub(crate) fn new(key: &SigningKey, issuer: &str, jwks_uri: &str) -> IssuerDiscovery {
        let metadata = Metadata {
            issuer,
            jwks_uri,
            response_types_supported: ["id_token"],
            subject_types_supported: ["public"],
            id_token_signing_alg_values_supported: [ALGORITHM],
        };
        // The uncompressed point: 0x04, then x and y of 32 bytes each.
        let point = key.public_point();
        let (x, y) = point
            .get(1..)
            .unwrap_or_default()
            .split_at(point.len().saturating_sub(1) / 2);
        let keyset = KeySet {
            keys: vec![Jwk {
                use_: "sig",
                kty: "EC",
                kid: key.key_id(),
                crv: "P-256",
                alg: ALGORITHM,
                x: URL_SAFE_NO_PAD.encode(x),
                y: URL_SAFE_NO_PAD.encode(y),
            }],
        };
        IssuerDiscovery {
            config: serde_json::to_string(&metadata).unwrap_or_default(),
            keyset: serde_json::to_string(&keyset).unwrap_or_default(),
        }
    }

    fn respond(body: &str, content_type: &'static str) -> Response {
        (
            [
                (header::CONTENT_TYPE, content_type),
                (header::CACHE_CONTROL, CACHE_CONTROL),
            ],
            body.to_owned(),
        )
            .into_response()
    }

    /// `GET /.well-known/openid-configuration`.
    pub(crate) fn config(&self) -> Response {
        Self::respond(&self.config, "application/json")
    }

    /// `GET /openid/v1/jwks`.
    pub(crate) fn keyset(&self) -> Response {
        Self::respond(&self.keyset, "application/jwk-set+json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documents_are_upstreams_and_the_key_verifies_tokens() {
        let key = SigningKey::generate().unwrap();
        let discovery = IssuerDiscovery::new(
            &key,
            "https://kubernetes.default.svc.cluster.local",
            "https://10.0.0.1:6443/openid/v1/jwks",
        );
        assert_eq!(
            discovery.config,
            r#"{"issuer":"https://kubernetes.default.svc.cluster.local","jwks_uri":"https://10.0.0.1:6443/openid/v1/jwks","response_types_supported":["id_token"],"subject_types_supported":["public"],"id_token_signing_alg_values_supported":["ES256"]}"#
        );
        let keyset: serde_json::Value = serde_json::from_str(&discovery.keyset).unwrap();
        let jwk = &keyset["keys"][0];
        assert!(
            discovery
                .keyset
                .starts_with(r#"{"keys":[{"use":"sig","kty":"EC","kid":""#)
        );
        assert_eq!(jwk["kid"], key.key_id());
        // The coordinates rebuild the public key, which verifies a token the key signed.
        let coordinate = |c: &str| URL_SAFE_NO_PAD.decode(jwk[c].as_str().unwrap()).unwrap();
        let mut point = vec![4u8];
        point.extend(coordinate("x"));
        point.extend(coordinate("y"));
        assert_eq!(point, key.public_point());
        let token = key.sign(br#"{"sub":"x"}"#).unwrap();
        let (signed, signature) = token.rsplit_once('.').unwrap();
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point)
            .verify(
                signed.as_bytes(),
                &URL_SAFE_NO_PAD.decode(signature).unwrap(),
            )
            .unwrap();
        let response = discovery.keyset();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/jwk-set+json"
        );
        assert_eq!(
            response.headers()[header::CACHE_CONTROL],
            "public, max-age=3600"
        );
    }
}
