//! The string `format`s a custom resource's schema may check, as upstream's apiextensions
//! server keeps them (`StripUnsupportedFormatsPostProcessor` at 1.33: every other format is
//! dropped before validation) and kube-openapi's format registry checks them. A format name is
//! compared with its dashes removed (`date-time` is `datetime`), as go-openapi normalizes it.
//!
//! Each check follows the Go function upstream registers for the format (`net.ParseIP`,
//! `net.ParseCIDR`, `net.ParseMAC`, `url.ParseRequestURI`, `net/mail.ParseAddress`,
//! `time.Parse`, govalidator's patterns and checksums, strfmt's scala-style durations), written
//! over the same grammar; `email` and `uri` take the common forms of those grammars.

use std::net::IpAddr;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use regex::Regex;

/// The string formats upstream validates at 1.33, dashes removed.
const STRING_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// The format `schema` is validated with once unsupported formats are dropped (`None` when
/// there is none): a string format for `string` (and untyped and int-or-string) nodes,
/// `int32`/`int64` for integers, `float`/`double` for numbers.
pub(crate) fn effective(schema: &JSONSchemaProps) -> Option<&str> {
    let format = schema.format.as_deref().filter(|f| !f.is_empty())?;
    let kind = if schema.x_kubernetes_int_or_string == Some(true) {
        ""
    } else {
        schema.type_.as_deref().unwrap_or("")
    };
    let kept = match kind {
        "" | "string" => STRING_FORMATS.contains(&normalized(format).as_str()),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    };
    kept.then_some(format)
}

fn normalized(format: &str) -> String {
    format.replace('-', "")
}

/// Whether `value` is written in the string format `format` (true for a format no string
/// check exists for, such as `int32`).
pub(crate) fn valid(format: &str, value: &str) -> bool {
    match normalized(format).as_str() {
        "bsonobjectid" => value.len() == 24 && value.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => request_uri(value),
        "email" => email(value),
        "hostname" => hostname(value),
        "ipv4" => ip(value).is_some() && value.contains('.'),
        "ipv6" => ip(value).is_some() && value.contains(':'),
        "cidr" => cidr(value),
        "mac" => mac(value),
        "uuid" => matches(&UUID, value),
        "uuid3" => matches(&UUID3, value),
        "uuid4" => matches(&UUID4, value),
        "uuid5" => matches(&UUID5, value),
        "isbn" => isbn10(value) || isbn13(value),
        "isbn10" => isbn10(value),
        "isbn13" => isbn13(value),
        "creditcard" => credit_card(value),
        "ssn" => value.len() == 11 && matches(&SSN, value),
        "hexcolor" => matches(&HEX_COLOR, value),
        "rgbcolor" => matches(&RGB_COLOR, value),
        "byte" => matches(&BASE64, value),
        "date" => date(value),
        "duration" => duration(value),
        "datetime" => date_time(value),
        _ => true,
    }
}

/// One of this module's own patterns, compiled (each is exercised by the unit tests).
#[allow(
    clippy::expect_used,
    reason = "constant patterns, compiled once and tested"
)]
fn constant(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a format pattern compiles")
}

fn matches(re: &Regex, value: &str) -> bool {
    re.is_match(value)
}

type Pattern = LazyLock<Regex>;

static HOSTNAME: Pattern = LazyLock::new(|| {
    constant(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
    )
});
static UUID: Pattern = LazyLock::new(|| uuid_pattern(r"[0-9a-f]{4}", r"[0-9a-f]{4}"));
static UUID3: Pattern = LazyLock::new(|| uuid_pattern(r"3[0-9a-f]{3}", r"[0-9a-f]{4}"));
static UUID4: Pattern = LazyLock::new(|| uuid_pattern(r"4[0-9a-f]{3}", r"[89ab][0-9a-f]{3}"));
static UUID5: Pattern = LazyLock::new(|| uuid_pattern(r"5[0-9a-f]{3}", r"[89ab][0-9a-f]{3}"));
static SSN: Pattern = LazyLock::new(|| constant(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static HEX_COLOR: Pattern = LazyLock::new(|| constant(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGB_COLOR: Pattern = LazyLock::new(|| {
    let byte = r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*";
    constant(&format!(r"^rgb\({byte},{byte},{byte}\)$"))
});
static BASE64: Pattern = LazyLock::new(|| {
    constant(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
});
static CREDIT_CARD: Pattern = LazyLock::new(|| {
    constant(
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$",
    )
});
static DATE_TIME_CLOCK: Pattern = LazyLock::new(|| {
    constant(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});
static SCALA_DURATION: Pattern = LazyLock::new(|| constant(r"(\d+)\s*([A-Za-zµ]+)"));

fn uuid_pattern(third: &str, fourth: &str) -> Regex {
    constant(&format!(
        r"(?i)^[0-9a-f]{{8}}-?[0-9a-f]{{4}}-?{third}-?{fourth}-?[0-9a-f]{{12}}$"
    ))
}

/// RFC 1034 host names as go-openapi reads them: its pattern, at most 255 bytes, no label
/// longer than 63.
fn hostname(value: &str) -> bool {
    matches(&HOSTNAME, value) && value.len() <= 255 && value.split('.').all(|l| l.len() <= 63)
}

/// `net.ParseIP`: dotted IPv4 without leading zeros, or IPv6 (with an IPv4 tail or not). The
/// standard parser reads both as Go's does (see `names::is_valid_ip`).
fn ip(value: &str) -> Option<IpAddr> {
    value.parse().ok()
}

/// `net.ParseCIDR`: an address, `/`, and a prefix length within the address's bits.
fn cidr(value: &str) -> bool {
    let Some((address, bits)) = value.split_once('/') else {
        return false;
    };
    let width = match ip(address) {
        Some(IpAddr::V4(_)) => 32,
        Some(IpAddr::V6(_)) => 128,
        None => return false,
    };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|n| n <= width)
}

/// `net.ParseMAC`: 6, 8 or 20 octets as `xx:xx:..`/`xx-xx-..`, or as dotted groups of four
/// hex digits.
fn mac(value: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let octets = |groups: usize| matches!(groups, 6 | 8 | 20);
    if value.contains('.') {
        let groups: Vec<&str> = value.split('.').collect();
        return octets(groups.len() * 2) && groups.iter().all(|g| hex(g, 4));
    }
    [':', '-'].iter().any(|&sep| {
        let groups: Vec<&str> = value.split(sep).collect();
        octets(groups.len()) && groups.iter().all(|g| hex(g, 2))
    })
}

/// govalidator's ISBN-10: digits (spaces and dashes ignored), the last may be `X`, weighted
/// sum divisible by 11.
fn isbn10(value: &str) -> bool {
    let digits: Vec<char> = value
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect();
    if digits.len() != 10
        || !digits[..9].iter().all(char::is_ascii_digit)
        || !(digits[9].is_ascii_digit() || digits[9] == 'X')
    {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .enumerate()
        .map(|(i, c)| (i as u32 + 1) * c.to_digit(10).unwrap_or(10))
        .sum();
    sum.is_multiple_of(11)
}

/// govalidator's ISBN-13: 13 digits (spaces and dashes ignored) with the EAN check digit.
fn isbn13(value: &str) -> bool {
    let digits: Vec<u32> = value
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_digit(10))
        .collect::<Option<_>>()
        .unwrap_or_default();
    if digits.len() != 13 {
        return false;
    }
    let sum: u32 = digits[..12]
        .iter()
        .enumerate()
        .map(|(i, d)| if i % 2 == 0 { *d } else { 3 * d })
        .sum();
    (10 - sum % 10) % 10 == digits[12]
}

/// govalidator's credit card: the digits (anything else ignored) of a known issuer's number
/// that pass the Luhn check.
fn credit_card(value: &str) -> bool {
    let digits: String = value.chars().filter(char::is_ascii_digit).collect();
    if !matches(&CREDIT_CARD, &digits) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let twice = 2 * d;
                if twice > 9 { twice - 9 } else { twice }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// `time.Parse("2006-01-02", ..)`: a four-digit year, a two-digit month and a day within it.
fn date(value: &str) -> bool {
    let b = value.as_bytes();
    if !value.is_ascii() || b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let number = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (
        number(&value[..4]),
        number(&value[5..7]),
        number(&value[8..]),
    ) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// strfmt's date-time: split at the first `t` (case-insensitively), a date before it and an
/// RFC 3339 clock with its zone after it (hours to 23, minutes and seconds to 59).
fn date_time(value: &str) -> bool {
    if value.len() < 4 {
        return false;
    }
    let lower = value.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(day), Some(clock)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !date(day) {
        return false;
    }
    DATE_TIME_CLOCK
        .captures(clock)
        .is_some_and(|c| &c[1] <= "23" && &c[2] <= "59" && &c[3] <= "59")
}

/// strfmt's duration: Go's `time.ParseDuration`, or else any number-unit pair in the text
/// with a unit strfmt knows (`5 sec`, `3 days`, `2 weeks`).
fn duration(value: &str) -> bool {
    if crate::duration::go_duration_nanos(value).is_ok() {
        return true;
    }
    const UNITS: &[&[&str]] = &[
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let mut known = false;
    for pair in SCALA_DURATION.captures_iter(value) {
        if pair[1].parse::<i64>().is_err() {
            return false;
        }
        let unit = pair[2].to_lowercase();
        known |= UNITS.iter().any(|variants| {
            let last = variants.len() - 1;
            variants
                .iter()
                .enumerate()
                .any(|(i, v)| i == last && unit.starts_with(v) || unit == *v)
        });
    }
    known
}

/// Go's `url.ParseRequestURI`: `*`, an absolute path, or a scheme with an opaque part or an
/// authority (user info, host, optional numeric port) and a path; no control characters and
/// no broken `%` escapes.
fn request_uri(value: &str) -> bool {
    if value.is_empty() || value.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    if value == "*" {
        return true;
    }
    let (scheme, rest) = match scheme(value) {
        Ok(split) => split,
        Err(()) => return false,
    };
    let rest = match rest.strip_suffix('?') {
        Some(forced) if !forced.contains('?') => forced,
        _ => rest.split_once('?').map_or(rest, |(path, _)| path),
    };
    if !rest.starts_with('/') {
        return !scheme.is_empty();
    }
    let path = match rest.strip_prefix("//").filter(|_| !scheme.is_empty()) {
        Some(after) => {
            let (authority, path) = after.find('/').map_or((after, ""), |i| after.split_at(i));
            if !authority_ok(authority) {
                return false;
            }
            path
        }
        None => rest,
    };
    escapes_ok(path)
}

/// The scheme before the first `:` (empty when the text has none), and the rest.
fn scheme(value: &str) -> Result<(&str, &str), ()> {
    for (i, c) in value.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err(()),
            ':' => return Ok((&value[..i], &value[i + 1..])),
            _ => return Ok(("", value)),
        }
    }
    Ok(("", value))
}

fn authority_ok(authority: &str) -> bool {
    let (user, host) = authority
        .rfind('@')
        .map_or(("", authority), |i| (&authority[..i], &authority[i + 1..]));
    let user_ok = user
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c) || !c.is_ascii());
    if !user_ok {
        return false;
    }
    let (host, port) = if let Some(bracketed) = host.strip_prefix('[') {
        let Some(end) = bracketed.find(']') else {
            return false;
        };
        (&bracketed[..end], &bracketed[end + 1..])
    } else {
        host.rfind(':')
            .map_or((host, ""), |i| (&host[..i], &host[i..]))
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:<>\"%".contains(c) || !c.is_ascii());
    port_ok && host_ok && escapes_ok(host)
}

/// Every `%` starts a two-digit hex escape.
fn escapes_ok(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if i + 2 >= b.len() || !b[i + 1].is_ascii_hexdigit() || !b[i + 2].is_ascii_hexdigit() {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// `net/mail.ParseAddress` for its common forms: `local@domain`, or a display name followed
/// by `<local@domain>`; the local part a dot-atom or a quoted string, the domain a dot-atom or
/// a bracketed literal.
fn email(value: &str) -> bool {
    let value = value.trim();
    let address = match value.strip_suffix('>') {
        Some(inner) => match inner.rfind('<') {
            Some(i) => &inner[i + 1..],
            None => return false,
        },
        None => value,
    };
    let Some(at) = address.rfind('@') else {
        return false;
    };
    let (local, domain) = (&address[..at], &address[at + 1..]);
    let local_ok = if let Some(quoted) = local.strip_prefix('"') {
        quoted.len() > 1 && quoted.ends_with('"')
    } else {
        dot_atom(local)
    };
    let domain_ok = if domain.starts_with('[') {
        domain.len() > 2 && domain.ends_with(']')
    } else {
        dot_atom(domain)
    };
    local_ok && domain_ok
}

fn dot_atom(text: &str) -> bool {
    !text.is_empty()
        && text.split('.').all(|atom| {
            !atom.is_empty()
                && atom.chars().all(|c| {
                    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii()
                })
        })
}
