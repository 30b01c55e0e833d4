//! Go's duration syntax (`time.ParseDuration`), as Kubernetes flags, the `timeout` query
//! parameter and CronJob's `@every` write durations: an optional sign, then number-unit pairs
//! such as `5m`, `1h30m`, `1.5s`, `250ms`; `0` alone is zero. One parser, with Go's error
//! messages, serves every caller.

use std::time::Duration;

use crate::field::go_quote;

/// Parses a Go duration: signed nanoseconds (Go's `time.Duration`), or the error Go's
/// `time.ParseDuration` gives, word for word.
pub fn go_duration_nanos(text: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let negative = text.starts_with('-');
    let mut s = text.strip_prefix(['-', '+']).unwrap_or(text);
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let limit: u128 = 1 << 63;
    let mut total: u128 = 0;
    while !s.is_empty() {
        let bytes = s.as_bytes();
        if !(bytes[0] == b'.' || bytes[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut whole: u128 = 0;
        for b in &bytes[..int_len] {
            whole = whole * 10 + u128::from(b - b'0');
            if whole > limit {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        let mut fraction = 0f64;
        let mut has_fraction = false;
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let mut scale = 1f64;
            for b in rest[..frac_len].bytes() {
                scale *= 10.0;
                fraction += f64::from(b - b'0') / scale;
            }
            has_fraction = frac_len > 0;
            s = &rest[frac_len..];
        }
        if int_len == 0 && !has_fraction {
            return Err(invalid());
        }
        let unit_len = s
            .bytes()
            .take_while(|b| *b != b'.' && !b.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", go_quote(text)));
        }
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(unit),
                    go_quote(text)
                ));
            }
        };
        if whole > limit / nanos {
            return Err(invalid());
        }
        let mut value = whole * nanos;
        if fraction > 0.0 {
            // Truncation toward zero, as Go's float-to-integer conversion.
            value += (fraction * nanos as f64) as u128;
            if value > limit {
                return Err(invalid());
            }
        }
        total += value;
        if total > limit {
            return Err(invalid());
        }
    }
    if negative {
        // -2^63 is the one value whose magnitude is out of i64's positive range.
        return Ok(i64::try_from(total).map_or(i64::MIN, |t| -t));
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// A Go duration that is not negative, as a [`Duration`]; `None` when it does not parse or is
/// negative.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let nanos = go_duration_nanos(text).ok()?;
    Some(Duration::from_nanos(u64::try_from(nanos).ok()?))
}

/// A duration cut to milliseconds, as Go's `Duration.String` prints it (`523ms`, `1.5s`,
/// `2m3.04s`, `1h0m0s`), as events and messages write durations.
pub fn format_go_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let hours = millis / 3_600_000;
    let minutes = millis / 60_000 % 60;
    let seconds = millis / 1000 % 60;
    let fraction = millis % 1000;
    let mut text = String::new();
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&seconds.to_string());
    if fraction > 0 {
        let digits = format!("{fraction:03}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text.push('s');
    text
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
        check("1.5s", Some(Duration::from_millis(1500)));
        check(".5h", Some(Duration::from_secs(1800)));
        check("+2s", Some(Duration::from_secs(2)));
        check("-1s", None);
        check("", None);
        check("5", None);
        check("5x", None);
        check("m5", None);
    }

    #[test]
    fn go_errors_and_limits() {
        assert_eq!(go_duration_nanos("-1s"), Ok(-1_000_000_000));
        assert_eq!(go_duration_nanos("1h2m3.5s"), Ok(3_723_500_000_000));
        assert_eq!(
            go_duration_nanos("2562047h"),
            Ok(2_562_047 * 3_600_000_000_000)
        );
        assert_eq!(go_duration_nanos("-9223372036854775808ns"), Ok(i64::MIN));
        assert_eq!(
            go_duration_nanos("9223372036854775808ns"),
            Err("time: invalid duration \"9223372036854775808ns\"".to_owned())
        );
        assert_eq!(
            go_duration_nanos("."),
            Err("time: invalid duration \".\"".to_owned())
        );
        assert_eq!(
            go_duration_nanos("9999999999h"),
            Err("time: invalid duration \"9999999999h\"".to_owned())
        );
        assert_eq!(
            go_duration_nanos("5"),
            Err("time: missing unit in duration \"5\"".to_owned())
        );
        assert_eq!(
            go_duration_nanos("5y"),
            Err("time: unknown unit \"y\" in duration \"5y\"".to_owned())
        );
    }

    #[test]
    fn durations_print_as_go_prints_them_cut_to_milliseconds() {
        let cases = [
            (Duration::from_nanos(999_999), "0s"),
            (Duration::from_micros(523_400), "523ms"),
            (Duration::from_millis(1000), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(1234), "1.234s"),
            (Duration::from_millis(123_040), "2m3.04s"),
            (Duration::from_secs(3600), "1h0m0s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_go_duration(d), text, "{d:?}");
        }
    }
}
