//! String-format checks shared by every kind: DNS labels and subdomains, qualified names (label
//! keys), label values, config-map keys, environment-variable names, port names and numbers, IP
//! addresses and CIDRs, path segments. Each `is_*` check returns upstream's messages (empty when
//! the value is valid); callers wrap them in [`FieldError::invalid`](crate::field::FieldError).
//! [`NameValidator`] says which rule a kind's `metadata.name` follows.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::field::{FieldError, Path};

/// Longest DNS-1123 label.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest DNS-1035 label.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Longest name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const ENV_VAR_NAME_FMT: &str = "[-._a-zA-Z][-._a-zA-Z0-9]*";
const ENV_VAR_NAME_MSG: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";
const RELAXED_ENV_VAR_NAME_MSG: &str = "a valid environment variable name must consist only of printable ASCII characters other than '='";
const HTTP_HEADER_NAME_FMT: &str = "[-A-Za-z0-9]+";
const HTTP_HEADER_NAME_MSG: &str =
    "a valid HTTP header must consist of alphanumeric characters or '-'";

/// `must be no more than N characters`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// Upstream's regex explanation: the message, examples and the pattern.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

/// `must be non-empty`.
pub fn empty_error() -> &'static str {
    "must be non-empty"
}

/// `must be between LO and HI, inclusive`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-')
        }
        _ => false,
    }
}

fn matches_dns1123_subdomain(value: &str) -> bool {
    !value.is_empty() && value.split('.').all(matches_dns1123_label)
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name_part(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A DNS-1123 label (RFC 1123), as container, port and volume names use.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// A DNS-1123 subdomain, as most object names use.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// A DNS-1123 subdomain after `*.`, as Ingress hosts and TLS hosts may be.
pub fn is_wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let valid = value
        .strip_prefix("*.")
        .is_some_and(matches_dns1123_subdomain);
    if !valid {
        errs.push(regex_error(
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
            &format!("\\*\\.{DNS1123_SUBDOMAIN_FMT}"),
            &["*.example.com"],
        ));
    }
    errs
}

/// The characters of the path of a domain-prefixed path.
const HTTP_PATH_FMT: &str = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+";

/// A domain-prefixed path such as `acme.io/foo` (IngressClass controllers).
pub fn validate_domain_prefixed_path(path: &Path, value: &str) -> Vec<FieldError> {
    if value.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        return vec![FieldError::invalid(
            path,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )];
    };
    let mut errs: Vec<FieldError> = is_dns1123_subdomain(host)
        .into_iter()
        .map(|msg| FieldError::invalid(path, host, &msg))
        .collect();
    let http_path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !rest.chars().all(http_path_char) {
        errs.push(FieldError::invalid(
            path,
            rest,
            &regex_error("Invalid path", HTTP_PATH_FMT, &[]),
        ));
    }
    errs
}

/// Whether CIDR `inner` lies strictly inside CIDR `outer` (same family, longer prefix, and
/// `inner`'s address within `outer`).
pub fn cidr_strictly_inside(outer: (ParsedIp, u8), inner: (ParsedIp, u8)) -> bool {
    fn bits(ip: &ParsedIp) -> (u128, u8) {
        match ip {
            ParsedIp::V4(v4) => (u128::from(u32::from(*v4)), 32),
            ParsedIp::V6(v6) => (u128::from(*v6), 128),
        }
    }
    let ((o, o_width), (i, i_width)) = (bits(&outer.0), bits(&inner.0));
    if o_width != i_width || outer.1 >= inner.1 {
        return false;
    }
    let shift = u32::from(o_width - outer.1);
    let mask = if shift >= 128 { 0 } else { (!0u128) << shift };
    (o & mask) == (i & mask)
}

/// A DNS-1123 subdomain whose labels may also contain `_` (and start with one), as relaxed DNS
/// search paths allow.
pub fn is_dns1123_subdomain_with_underscore(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let label_ok = |label: &str| {
        let body = label.strip_prefix('_').unwrap_or(label);
        let b = body.as_bytes();
        match (b.first(), b.last()) {
            (Some(&f), Some(&l)) => {
                is_lower_alnum(f)
                    && is_lower_alnum(l)
                    && b.iter()
                        .all(|&c| is_lower_alnum(c) || c == b'-' || c == b'_')
            }
            _ => false,
        }
    };
    if value.is_empty() || !value.split('.').all(label_ok) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '_', '-' or '.', and must start and end with an alphanumeric character",
            "_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errs
}

/// A DNS-1035 label, as service names use.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    let bytes = value.as_bytes();
    let ok = match (bytes.first(), bytes.last()) {
        (Some(first), Some(&last)) => {
            first.is_ascii_lowercase()
                && is_lower_alnum(last)
                && bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-')
        }
        _ => false,
    };
    if !ok {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// A qualified name: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters. Label keys, annotation keys and finalizers use it.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                for msg in is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {msg}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.` starting and ending with an
/// alphanumeric.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn has_chdir_prefix(value: &str) -> Option<String> {
    if value == "." {
        Some("must not be '.'".to_owned())
    } else if value == ".." {
        Some("must not be '..'".to_owned())
    } else if value.starts_with("..") {
        Some("must not start with '..'".to_owned())
    } else {
        None
    }
}

/// A key of a ConfigMap or Secret.
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(
            CONFIG_MAP_KEY_MSG,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    errs.extend(has_chdir_prefix(value));
    errs
}

/// The strict environment-variable name rule (before relaxed validation).
pub fn is_env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let bytes = value.as_bytes();
    let ok = match bytes.first() {
        Some(first) => {
            (first.is_ascii_alphabetic() || matches!(first, b'-' | b'.' | b'_'))
                && bytes
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        }
        None => false,
    };
    if !ok {
        errs.push(regex_error(
            ENV_VAR_NAME_MSG,
            ENV_VAR_NAME_FMT,
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    errs.extend(has_chdir_prefix(value));
    errs
}

/// The relaxed environment-variable name rule that 1.33 applies (feature
/// `RelaxedEnvironmentVariableValidation`, on by default): printable ASCII other than `=`.
pub fn is_relaxed_env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.is_empty() {
        errs.push(format!("environment variable name {}", empty_error()));
    }
    if value.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errs.push(RELAXED_ENV_VAR_NAME_MSG.to_owned());
    }
    errs
}

/// An HTTP header name.
pub fn is_http_header_name(value: &str) -> Vec<String> {
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            HTTP_HEADER_NAME_MSG,
            HTTP_HEADER_NAME_FMT,
            &["X-Header-Name"],
        )]
    }
}

/// A port number from 1 to 65535.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// An IANA service name as a port name: at most 15 of `[-a-z0-9]`, at least one letter, no
/// leading, trailing or doubled hyphen.
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !port.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// A Unix user ID (0 to 2^32-1).
pub fn is_valid_user_id(uid: i64) -> Vec<String> {
    if (0..=0xffff_ffff).contains(&uid) {
        Vec::new()
    } else {
        vec![inclusive_range_error(0, 0xffff_ffff)]
    }
}

/// A Unix group ID (0 to 2^32-1).
pub fn is_valid_group_id(gid: i64) -> Vec<String> {
    is_valid_user_id(gid)
}

/// A name that can be a path segment of a URL or a storage key.
pub fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    for illegal in [".", ".."] {
        if name == illegal {
            return vec![format!("may not be '{illegal}'")];
        }
    }
    is_valid_path_segment_prefix(name)
}

/// A prefix of a path-segment name (no `.`/`..` check, since a suffix follows).
pub fn is_valid_path_segment_prefix(name: &str) -> Vec<String> {
    ["/", "%"]
        .iter()
        .filter(|illegal| name.contains(*illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// Parses an IPv4 address leniently, as Go's historic parser did: decimal octets up to 255,
/// leading zeros allowed.
fn parse_ipv4_sloppy(value: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = value.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse::<u8>().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Addr::from(octets))
}

/// A parsed IP address, as upstream's sloppy parser reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParsedIp {
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 address (IPv4-mapped ones included).
    V6(Ipv6Addr),
}

impl ParsedIp {
    /// Whether this is IPv6 (upstream counts IPv4-mapped IPv6 as IPv4).
    pub fn is_ipv6(&self) -> bool {
        match self {
            ParsedIp::V4(_) => false,
            ParsedIp::V6(v6) => v6.to_ipv4_mapped().is_none(),
        }
    }
}

/// Parses an IP address as upstream's legacy fields accept it.
pub fn parse_ip_sloppy(value: &str) -> Option<ParsedIp> {
    if let Some(v4) = parse_ipv4_sloppy(value) {
        return Some(ParsedIp::V4(v4));
    }
    if value.contains(':') {
        if let Ok(v6) = value.parse::<Ipv6Addr>() {
            return Some(ParsedIp::V6(v6));
        }
        // An IPv6 address whose trailing IPv4 part has leading zeros.
        if let Some(idx) = value.rfind(':') {
            let (head, tail) = value.split_at(idx + 1);
            if let Some(v4) = parse_ipv4_sloppy(tail) {
                let rebuilt = format!("{head}{v4}");
                if let Ok(v6) = rebuilt.parse::<Ipv6Addr>() {
                    return Some(ParsedIp::V6(v6));
                }
            }
        }
    }
    None
}

/// An IP address in a field that predates strict IP validation (1.33 leaves
/// `StrictIPCIDRValidation` off).
pub fn validate_ip_legacy(path: &Path, value: &str) -> Vec<FieldError> {
    if parse_ip_sloppy(value).is_some() {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            path,
            value,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        )]
    }
}

/// The messages upstream's `IsValidIP` gives `value`, an IP address in a field newer than strict
/// IP validation: parsed as the legacy fields are, then no leading zeros, no IPv4-mapped IPv6
/// address, and the canonical form (RFC 5952 for IPv6).
pub fn is_valid_ip(value: &str) -> Vec<String> {
    let Some(ip) = parse_ip_sloppy(value) else {
        return vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_owned()];
    };
    let mut errors = Vec::new();
    // Rust's parser, as Go's `netip.ParseAddr`, refuses leading zeros.
    if value.parse::<std::net::IpAddr>().is_err() {
        errors.push("must not have leading 0s".to_owned());
    }
    let canonical = match ip {
        ParsedIp::V4(v4) => v4.to_string(),
        ParsedIp::V6(v6) => match v6.to_ipv4_mapped() {
            Some(_) => {
                errors.push("must not be an IPv4-mapped IPv6 address".to_owned());
                return errors;
            }
            None => v6.to_string(),
        },
    };
    if errors.is_empty() && value != canonical {
        errors.push(format!(
            "must be in canonical form ({})",
            crate::field::go_quote(&canonical)
        ));
    }
    errors
}

/// An IP address in a field newer than strict IP validation (upstream's `IsValidIP`).
pub fn validate_ip(path: &Path, value: &str) -> Vec<FieldError> {
    invalid_each(path, value, is_valid_ip(value))
}

/// A "subnet"-style CIDR value in a field newer than strict validation (upstream's
/// `IsValidCIDR`): no leading zeros, no IPv4-mapped address, no bits set past the prefix
/// length, and the canonical form.
pub fn validate_cidr(path: &Path, value: &str) -> Vec<FieldError> {
    let Some((ip, bits)) = parse_cidr_sloppy(value) else {
        return validate_cidr_legacy(path, value);
    };
    let invalid = |detail: &str| vec![FieldError::invalid(path, value, detail)];
    let (addr, prefix) = value.split_once('/').unwrap_or((value, ""));
    if addr.parse::<std::net::IpAddr>().is_err() || (prefix.len() > 1 && prefix.starts_with('0')) {
        return invalid("must not have leading 0s in IP or prefix length");
    }
    let network = match ip {
        ParsedIp::V4(v4) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            if u32::from(v4) & !mask != 0 {
                return invalid("must not have bits set beyond the prefix length");
            }
            v4.to_string()
        }
        ParsedIp::V6(v6) => {
            if v6.to_ipv4_mapped().is_some() {
                return invalid("must not have an IPv4-mapped IPv6 address");
            }
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            if u128::from(v6) & !mask != 0 {
                return invalid("must not have bits set beyond the prefix length");
            }
            v6.to_string()
        }
    };
    let canonical = format!("{network}/{bits}");
    if value != canonical {
        return invalid(&format!(
            "must be in canonical form ({})",
            crate::field::go_quote(&canonical)
        ));
    }
    Vec::new()
}

/// Parses a CIDR value leniently (`ip/prefix`).
pub fn parse_cidr_sloppy(value: &str) -> Option<(ParsedIp, u8)> {
    let (ip, bits) = value.split_once('/')?;
    let ip = parse_ip_sloppy(ip)?;
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u8 = bits.parse().ok()?;
    let max = match ip {
        ParsedIp::V4(_) => 32,
        ParsedIp::V6(_) => 128,
    };
    (bits <= max).then_some((ip, bits))
}

/// A CIDR value in a field that predates strict validation.
pub fn validate_cidr_legacy(path: &Path, value: &str) -> Vec<FieldError> {
    if parse_cidr_sloppy(value).is_some() {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            path,
            value,
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        )]
    }
}

/// Which rule an object's `metadata.name` follows, with `prefix` meaning a `generateName` whose
/// end will be completed by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameValidator {
    /// A DNS-1123 subdomain (most kinds).
    DnsSubdomain,
    /// A DNS-1123 label (namespaces).
    DnsLabel,
    /// A DNS-1035 label (services).
    Dns1035Label,
    /// Anything usable as a path segment (e.g. RBAC roles).
    PathSegment,
    /// An IP address in canonical form (IPAddress objects, which cannot generate names: a
    /// `generateName` is checked as a whole address).
    IpAddress,
}

impl NameValidator {
    /// The messages for `name`; `prefix` is true for a `generateName`.
    pub fn validate(self, name: &str, prefix: bool) -> Vec<String> {
        let masked;
        let name =
            if prefix && !matches!(self, NameValidator::PathSegment | NameValidator::IpAddress) {
                masked = mask_trailing_dash(name);
                masked.as_str()
            } else {
                name
            };
        match self {
            NameValidator::DnsSubdomain => is_dns1123_subdomain(name),
            NameValidator::DnsLabel => is_dns1123_label(name),
            NameValidator::Dns1035Label => is_dns1035_label(name),
            NameValidator::PathSegment if prefix => is_valid_path_segment_prefix(name),
            NameValidator::PathSegment => is_valid_path_segment_name(name),
            NameValidator::IpAddress => is_valid_ip(name),
        }
    }
}

/// Upstream replaces a generateName's trailing dash (and, through an old quirk, the character
/// before it) by `a`, so that the prefix can be checked as a whole name.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        let cut = name
            .char_indices()
            .rev()
            .nth(1)
            .map_or(0, |(index, _)| index);
        format!("{}a", &name[..cut])
    } else {
        name.to_owned()
    }
}

/// `Invalid` errors for each message of `check(value)`.
pub(crate) fn invalid_each(path: &Path, value: &str, messages: Vec<String>) -> Vec<FieldError> {
    messages
        .into_iter()
        .map(|msg| FieldError::invalid(path, value, &msg))
        .collect()
}

/// Every message for `value` as a DNS-1123 label, as `Invalid` errors.
pub fn validate_dns1123_label(value: &str, path: &Path) -> Vec<FieldError> {
    invalid_each(path, value, is_dns1123_label(value))
}

/// Every message for `value` as a DNS-1123 subdomain, as `Invalid` errors.
pub fn validate_dns1123_subdomain(value: &str, path: &Path) -> Vec<FieldError> {
    invalid_each(path, value, is_dns1123_subdomain(value))
}

/// Every message for `value` as a qualified name, as `Invalid` errors.
pub fn validate_qualified_name(value: &str, path: &Path) -> Vec<FieldError> {
    invalid_each(path, value, is_qualified_name(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(got: Vec<String>, expected: &[&str]) {
        assert_eq!(
            got,
            expected.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        );
    }

    const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    #[test]
    fn dns_names() {
        for ok in ["a", "ab", "a-b", "0", "a.b", "1.2.3", "a--b"] {
            check(is_dns1123_subdomain(ok), &[]);
        }
        check(is_dns1123_subdomain("Web_1"), &[SUBDOMAIN]);
        check(is_dns1123_subdomain("a..b"), &[SUBDOMAIN]);
        check(is_dns1123_subdomain(""), &[SUBDOMAIN]);
        check(
            is_dns1123_subdomain(&"a".repeat(254)),
            &["must be no more than 253 characters"],
        );
        check(is_dns1123_label("web"), &[]);
        check(is_dns1123_label("a.b"), &["must not contain dots"]);
        check(is_dns1123_label("-a"), &[LABEL]);
        check(is_dns1035_label("web-1"), &[]);
        check(
            is_dns1035_label("1web"),
            &[
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            ],
        );
    }

    #[test]
    fn regex_error_lists_examples_as_upstream() {
        assert_eq!(
            regex_error("m", "f", &["a", "b"]),
            "m (e.g. 'a',  or 'b', regex used for validation is 'f')"
        );
        assert_eq!(
            regex_error("m", "f", &[]),
            "m (regex used for validation is 'f')"
        );
    }

    #[test]
    fn qualified_names_and_label_values() {
        for ok in ["app", "example.com/app", "A.b-c_d", "k8s.io/x"] {
            check(is_qualified_name(ok), &[]);
        }
        check(is_qualified_name("/a"), &["prefix part must be non-empty"]);
        check(
            is_qualified_name("Ex.com/a"),
            &[&format!("prefix part {SUBDOMAIN}")],
        );
        let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        check(
            is_qualified_name("a/"),
            &["name part must be non-empty", name_part],
        );
        check(is_qualified_name("-a"), &[name_part]);
        check(
            is_qualified_name(&"a".repeat(64)),
            &["name part must be no more than 63 characters"],
        );
        let three = is_qualified_name("a/b/c");
        assert_eq!(three.len(), 1);
        assert!(three[0].starts_with("a qualified name must consist of"));
        assert!(three[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
        check(is_valid_label_value(""), &[]);
        check(is_valid_label_value("v1.2_3"), &[]);
        let value_msg = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        check(is_valid_label_value("-x"), &[value_msg]);
        check(
            is_valid_label_value(&"a".repeat(64)),
            &["must be no more than 63 characters"],
        );
    }

    #[test]
    fn qualified_name_edges_as_upstream() {
        let name_part = |value: &str| {
            is_qualified_name(value)
                .into_iter()
                .map(|e| e.split(" (e.g.").next().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        let long = format!("{}/{}", "p".repeat(253), "k".repeat(63));
        check(is_qualified_name(&long), &[]);
        let pattern = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
        // Lengths are bytes, and only ASCII alphanumerics count.
        assert_eq!(name_part("é"), [pattern]);
        assert_eq!(
            name_part(&"-".repeat(64)),
            ["name part must be no more than 63 characters", pattern]
        );
        check(
            is_qualified_name("a..b/a"),
            &[&format!("prefix part {SUBDOMAIN}")],
        );
        check(
            is_qualified_name(&format!("{}/a", "p".repeat(254))),
            &["prefix part must be no more than 253 characters"],
        );
        let value = is_valid_label_value(&format!("{}_", "v".repeat(63)));
        assert_eq!(value.len(), 2);
        assert_eq!(value[0], "must be no more than 63 characters");
    }

    #[test]
    fn keys_env_ports() {
        check(is_config_map_key("a.b_C-1"), &[]);
        check(is_config_map_key(".."), &["must not be '..'"]);
        check(is_config_map_key("..a"), &["must not start with '..'"]);
        assert_eq!(is_config_map_key("a b").len(), 1);
        check(is_relaxed_env_var_name("1A-b.c"), &[]);
        check(
            is_relaxed_env_var_name("A=B"),
            &[
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ],
        );
        check(is_env_var_name("A_1"), &[]);
        assert_eq!(is_env_var_name("1A").len(), 1);
        check(is_valid_port_name("http"), &[]);
        check(
            is_valid_port_name("-HTTP--"),
            &[
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "must contain at least one letter (a-z)",
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen",
            ],
        );
        check(
            is_valid_port_name("123"),
            &["must contain at least one letter (a-z)"],
        );
        check(
            is_valid_port_num(0),
            &["must be between 1 and 65535, inclusive"],
        );
        check(is_valid_port_num(65535), &[]);
    }

    #[test]
    fn name_validators_mask_generate_name_dashes() {
        assert!(
            NameValidator::DnsSubdomain
                .validate("web-", true)
                .is_empty()
        );
        assert!(
            !NameValidator::DnsSubdomain
                .validate("web-", false)
                .is_empty()
        );
        assert!(NameValidator::DnsLabel.validate("ns-", true).is_empty());
        assert!(
            NameValidator::Dns1035Label
                .validate("svc-", true)
                .is_empty()
        );
        check(
            NameValidator::PathSegment.validate("..", false),
            &["may not be '..'"],
        );
        check(
            NameValidator::PathSegment.validate("a/b%", false),
            &["may not contain '/'", "may not contain '%'"],
        );
        check(NameValidator::PathSegment.validate("..", true), &[]);
    }

    #[test]
    fn ips_and_cidrs() {
        for ok in [
            "10.0.0.1",
            "010.001.0.1",
            "::1",
            "2001:db8::ffff",
            "::ffff:1.2.3.4",
        ] {
            assert!(parse_ip_sloppy(ok).is_some(), "{ok}");
        }
        for bad in ["", "1.2.3", "256.0.0.1", "a::g", "1.2.3.4.5"] {
            assert!(parse_ip_sloppy(bad).is_none(), "{bad}");
        }
        let path = Path::new("spec").child("clusterIP");
        assert_eq!(
            validate_ip_legacy(&path, "x")[0].to_string(),
            "spec.clusterIP: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        );
        assert!(validate_cidr_legacy(&path, "10.0.0.0/8").is_empty());
        assert!(validate_cidr_legacy(&path, "10.0.0.0/33").len() == 1);
        assert!(validate_cidr_legacy(&path, "fd00::/64").is_empty());
    }
}
