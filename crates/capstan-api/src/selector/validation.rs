//! The string checks selectors need, with upstream's messages (`k8s.io/apimachinery/pkg/util/
//! validation`): qualified names (label keys), label values and DNS-1123 subdomains (key
//! prefixes). Each check returns the list of problems; an empty list means valid. Lengths are
//! counted in bytes, as upstream counts them.

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MAX_LEN: usize = 63;

const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX_LEN: usize = 63;

const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// Upstream's explanation of a pattern mismatch: the message, the examples, then the pattern.
fn regex_error(message: &str, pattern: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{message} (regex used for validation is '{pattern}')");
    }
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{pattern}')",
        examples.join(" or ")
    )
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// Whether `text` is one or more of `[-A-Za-z0-9_.]`, starting and ending with an ASCII
/// alphanumeric: the qualified-name pattern.
fn is_qualified_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Whether `text` is a lowercase RFC 1123 subdomain (length aside).
fn is_dns1123_subdomain_token(text: &str) -> bool {
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                edge(first) && edge(last) && bytes.iter().all(|b| edge(b) || *b == b'-')
            }
            _ => false,
        }
    };
    text.split('.').all(label_ok)
}

/// Upstream's `IsDNS1123Subdomain`.
pub(super) fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errors.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LEN));
    }
    if !is_dns1123_subdomain_token(value) {
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errors
}

/// Upstream's `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters. This is what a label key must be.
pub(super) fn qualified_name(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            errors.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        errors.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LEN)
        ));
    }
    if !is_qualified_token(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errors
}

/// Upstream's `IsValidLabelValue`: empty, or a qualified-name token of at most 63 characters.
pub(super) fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LEN {
        errors.push(max_len_error(LABEL_VALUE_MAX_LEN));
    }
    if !value.is_empty() && !is_qualified_token(value) {
        errors.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME_PATTERN: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const SUBDOMAIN_PATTERN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const VALUE_PATTERN: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn qualified_names() {
        let check = |value: &str, expected: &[String]| {
            assert_eq!(qualified_name(value), expected, "{value:?}");
        };
        for good in [
            "a",
            "A",
            "1",
            "a-b_c.d",
            "example.com/MyName",
            "a.b-c/x",
            &"k".repeat(63),
            &format!("{}/{}", "p".repeat(253), "k".repeat(63)),
        ] {
            check(good, &[]);
        }
        let name = |detail: &str| format!("name part {detail}");
        check("", &[name("must be non-empty"), name(NAME_PATTERN)]);
        check("-a", &[name(NAME_PATTERN)]);
        check("a_", &[name(NAME_PATTERN)]);
        check("a b", &[name(NAME_PATTERN)]);
        check("é", &[name(NAME_PATTERN)]);
        check(
            &"k".repeat(64),
            &[name("must be no more than 63 characters")],
        );
        check(
            &"-".repeat(64),
            &[
                name("must be no more than 63 characters"),
                name(NAME_PATTERN),
            ],
        );
        check("/a", &["prefix part must be non-empty".to_owned()]);
        check("a/", &[name("must be non-empty"), name(NAME_PATTERN)]);
        check(
            "Example.com/a",
            &[format!("prefix part {SUBDOMAIN_PATTERN}")],
        );
        check("a..b/a", &[format!("prefix part {SUBDOMAIN_PATTERN}")]);
        check(
            &format!("{}/a", "p".repeat(254)),
            &["prefix part must be no more than 253 characters".to_owned()],
        );
        check(
            "a/b/c",
            &[format!(
                "a qualified name {NAME_PATTERN} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )],
        );
    }

    #[test]
    fn label_values() {
        let check = |value: &str, expected: &[&str]| {
            assert_eq!(label_value(value), expected, "{value:?}");
        };
        check("", &[]);
        check("a", &[]);
        check("My_Value-1.2", &[]);
        check(&"v".repeat(63), &[]);
        check(&"v".repeat(64), &["must be no more than 63 characters"]);
        check("@", &[VALUE_PATTERN]);
        check("-1", &[VALUE_PATTERN]);
        check("a/b", &[VALUE_PATTERN]);
        check(
            &format!("{}_", "v".repeat(63)),
            &["must be no more than 63 characters", VALUE_PATTERN],
        );
    }
}
