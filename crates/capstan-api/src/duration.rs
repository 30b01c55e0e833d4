//! Go duration syntax, as Kubernetes flags and the `timeout` query parameter write durations:
//! a sequence of number-unit pairs such as `5m`, `1h30m`, `250ms`, `30s`; `0` alone is zero.

use std::time::Duration;

/// Parses a Go duration with units `h`, `m`, `s`, `ms`, `us`/`µs` and `ns` (whole numbers).
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    if text.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "h" => Duration::from_secs(3600),
            "m" => Duration::from_secs(60),
            "s" => Duration::from_secs(1),
            "ms" => Duration::from_millis(1),
            "us" | "µs" => Duration::from_micros(1),
            "ns" => Duration::from_nanos(1),
            _ => return None,
        };
        total = total.checked_add(unit.checked_mul(u32::try_from(number).ok()?)?)?;
        rest = &rest[unit_len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let check = |text: &str, expected: Option<Duration>| {
            assert_eq!(parse_go_duration(text), expected, "{text}")
        };
        check("0", Some(Duration::ZERO));
        check("5m", Some(Duration::from_secs(300)));
        check("1h30m", Some(Duration::from_secs(5400)));
        check("250ms", Some(Duration::from_millis(250)));
        check("32s", Some(Duration::from_secs(32)));
        check("", None);
        check("5", None);
        check("5x", None);
        check("m5", None);
    }
}
