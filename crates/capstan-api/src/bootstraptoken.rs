//! Bootstrap token Secrets (`bootstrap.kubernetes.io/token` in `kube-system`, kubeadm's
//! `abcdef.0123456789abcdef` tokens): the names and the expiry rule the API server's
//! authenticator and the `tokencleaner` controller share.

/// The namespace bootstrap token Secrets live in.
pub const NAMESPACE: &str = "kube-system";
/// The Secret type of bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The prefix of a bootstrap token Secret's name (the token id follows).
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The group every bootstrap token user is in.
pub const GROUP: &str = "system:bootstrappers";

/// Whether a Secret's `expiration` (RFC 3339; empty: none) is at or before `now` (seconds
/// since the epoch); one that does not parse counts as expired, as upstream's.
pub fn expired(expiration: &str, now: i64) -> bool {
    if expiration.is_empty() {
        return false;
    }
    match expiration.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(at) => at.as_second() <= now,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expirations_at_or_before_now_and_unreadable_ones_have_expired() {
        let now = "2026-01-01T00:00:00Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert!(!expired("", now));
        assert!(!expired("2026-01-01T00:00:01Z", now));
        assert!(expired("2026-01-01T00:00:00Z", now));
        assert!(expired("2025-12-31T23:59:59Z", now));
        assert!(expired("tomorrow", now));
    }
}
