//! A request's query parameters as Go's `url.Values` holds them: every value of every key, in
//! the order given (`command=sh&command=-c` is two values of `command`). The subresources the
//! pod's node serves (`log`, `exec`, `attach`, `portforward`) read their options this way, both
//! in the API server, which checks them, and in the kubelet, which acts on them.

use std::collections::HashMap;

/// The values of each query parameter, in the order they came.
pub type Values = HashMap<String, Vec<String>>;

/// Decodes a URL query (`application/x-www-form-urlencoded`); no query is an empty one.
pub fn parse(query: Option<&str>) -> Values {
    let mut values: Values = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        values
            .entry(k.into_owned())
            .or_default()
            .push(v.into_owned());
    }
    values
}

/// The first value of `key`, as Go's `url.Values.Get`, or `None` when the key is absent.
pub fn first<'a>(values: &'a Values, key: &str) -> Option<&'a str> {
    values.get(key).and_then(|v| v.first()).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_kept_in_order_and_decoded() {
        let values = parse(Some(
            "command=sh&command=-c&command=echo+a%26b&tty=&x=1&x=2",
        ));
        assert_eq!(values["command"], ["sh", "-c", "echo a&b"]);
        assert_eq!(first(&values, "command"), Some("sh"));
        assert_eq!(first(&values, "x"), Some("1"));
        assert_eq!(first(&values, "tty"), Some(""));
        assert_eq!(first(&values, "stdin"), None);
        assert!(parse(None).is_empty());
        assert!(parse(Some("")).is_empty());
    }
}
