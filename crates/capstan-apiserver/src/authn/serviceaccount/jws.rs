//! Compact JSON Web Signatures with ES256 (ECDSA P-256, SHA-256), written with `ring`: the form
//! of upstream's service account tokens (go-jose with an ECDSA key). The protected header is
//! `{"alg":"ES256","kid":"<key id>"}`, the key id being upstream's: the unpadded base64url of the
//! SHA-256 of the public key's DER `SubjectPublicKeyInfo`, so relying parties can pick the key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::PublicKeyData as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde::{Deserialize, Serialize};

/// The only algorithm issued and accepted.
pub(crate) const ALGORITHM: &str = "ES256";

/// A key that cannot sign service account tokens.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    /// The PEM is not a PKCS#8 key.
    #[error("not a PKCS#8 private key: {0}")]
    Pem(#[source] rcgen::Error),
    /// The key is not an ECDSA P-256 key.
    #[error("the service account key must be an ECDSA P-256 key: {0}")]
    Rejected(ring::error::KeyRejected),
    /// Signing failed.
    #[error("signing failed")]
    Sign,
}

/// Why a compact JWS was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JwsError {
    /// Not three base64url parts, or a header that is not JSON.
    #[error("malformed token")]
    Malformed,
    /// Signed with another algorithm.
    #[error("unexpected signature algorithm")]
    Algorithm,
    /// The signature does not verify with this key.
    #[error("invalid signature")]
    Signature,
}

/// The protected header.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    kid: String,
}

/// The key that signs (and verifies) service account tokens.
pub(crate) struct SigningKey {
    pair: EcdsaKeyPair,
    key_id: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The key in `pem` (PKCS#8, as `pki::service_account_key` writes it).
    pub(crate) fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let parsed = rcgen::KeyPair::from_pem(pem).map_err(KeyError::Pem)?;
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            parsed.serialized_der(),
            &rng,
        )
        .map_err(KeyError::Rejected)?;
        let spki = parsed.subject_public_key_info();
        let key_id = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(SigningKey { pair, key_id, rng })
    }

    /// A fresh key that lives in memory only (an API without a data directory: tests).
    pub(crate) fn generate() -> Result<Self, KeyError> {
        let key =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(KeyError::Pem)?;
        Self::from_pem(&key.serialize_pem())
    }

    /// The key id tokens name in their header.
    pub(crate) fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key as an uncompressed point (`04 || x || y`).
    pub(crate) fn public_point(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// Signs `payload` (the claims' JSON) into a compact JWS.
    pub(crate) fn sign(&self, payload: &[u8]) -> Result<String, KeyError> {
        let header = Header {
            alg: ALGORITHM.to_owned(),
            kid: self.key_id.clone(),
        };
        let header = serde_json::to_vec(&header).map_err(|_| KeyError::Sign)?;
        let mut token = URL_SAFE_NO_PAD.encode(header);
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(payload));
        let signature = self
            .pair
            .sign(&self.rng, token.as_bytes())
            .map_err(|_| KeyError::Sign)?;
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.as_ref()));
        Ok(token)
    }

    /// Verifies a compact JWS signed by this key and returns its payload.
    pub(crate) fn verify(&self, token: &str) -> Result<Vec<u8>, JwsError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwsError::Malformed);
        };
        let decode = |part: &str| {
            URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|_| JwsError::Malformed)
        };
        let parsed: Header =
            serde_json::from_slice(&decode(header)?).map_err(|_| JwsError::Malformed)?;
        if parsed.alg != ALGORITHM {
            return Err(JwsError::Algorithm);
        }
        let signed = &token[..header.len() + 1 + payload.len()];
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, self.public_point())
            .verify(signed.as_bytes(), &decode(signature)?)
            .map_err(|_| JwsError::Signature)?;
        decode(payload)
    }
}

/// The payload of a compact JWS, unverified: what upstream reads first to see whether a token
/// is one of its issuer's before it checks the signature.
pub(crate) fn unverified_payload(token: &str) -> Option<Vec<u8>> {
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    URL_SAFE_NO_PAD.decode(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_with_their_key_only() {
        let key = SigningKey::generate().unwrap();
        let token = key.sign(br#"{"sub":"x"}"#).unwrap();
        assert_eq!(key.verify(&token).unwrap(), br#"{"sub":"x"}"#);
        assert_eq!(
            unverified_payload(&token).as_deref(),
            Some(&br#"{"sub":"x"}"#[..])
        );
        let header: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            header,
            serde_json::json!({"alg": "ES256", "kid": key.key_id})
        );
        // Another key, a changed payload, a changed algorithm: refused.
        let other = SigningKey::generate().unwrap();
        assert_eq!(other.verify(&token), Err(JwsError::Signature));
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            URL_SAFE_NO_PAD.encode(br#"{"sub":"y"}"#),
            parts[2]
        );
        assert_eq!(key.verify(&forged), Err(JwsError::Signature));
        let none = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            parts[1],
            parts[2]
        );
        assert_eq!(key.verify(&none), Err(JwsError::Algorithm));
        assert_eq!(key.verify("a.b"), Err(JwsError::Malformed));
        assert_eq!(key.verify("a.b.c.d"), Err(JwsError::Malformed));
        assert_eq!(key.verify("!!.b.c"), Err(JwsError::Malformed));
    }

    #[test]
    fn the_key_id_is_the_hash_of_the_public_key_info() {
        let pem = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .unwrap()
            .serialize_pem();
        let key = SigningKey::from_pem(&pem).unwrap();
        assert_eq!(SigningKey::from_pem(&pem).unwrap().key_id, key.key_id);
        // SubjectPublicKeyInfo of a P-256 key: the algorithm identifiers, then the point.
        let mut spki = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        spki.extend_from_slice(key.public_point());
        let expected = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        assert_eq!(key.key_id, expected);
        assert_eq!(key.key_id.len(), 43);
        assert!(SigningKey::from_pem("garbage").is_err());
    }
}
