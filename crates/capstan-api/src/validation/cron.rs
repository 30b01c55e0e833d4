//! CronJob schedules and time zones, checked as upstream checks them: a schedule is what
//! `robfig/cron/v3`'s standard parser accepts (five fields, or an `@` descriptor such as
//! `@daily` or `@every 1h30m`), with that parser's error messages; a time zone is a name Go's
//! `time.LoadLocation` finds. Time zones are looked up in the IANA database bundled with `jiff`,
//! case-sensitively as on a Linux file system.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use crate::field::go_quote;

/// Bounds and names of one schedule field.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

const DESCRIPTORS: &[&str] = &[
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Go's `strconv.Atoi`, with its error text.
fn go_atoi(expr: &str) -> Result<i64, String> {
    let syntax = || format!("strconv.Atoi: parsing {}: invalid syntax", go_quote(expr));
    let (negative, digits) = match expr.as_bytes().first() {
        Some(b'-') => (true, &expr[1..]),
        Some(b'+') => (false, &expr[1..]),
        _ => (false, expr),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax());
    }
    let magnitude: i128 = digits
        .bytes()
        .try_fold(0i128, |acc, b| {
            acc.checked_mul(10)?.checked_add(i128::from(b - b'0'))
        })
        .unwrap_or(i128::MAX);
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            go_quote(expr)
        )
    })
}

fn must_parse_int(expr: &str) -> Result<u64, String> {
    let num = go_atoi(expr).map_err(|e| format!("failed to parse int from {expr}: {e}"))?;
    u64::try_from(num).map_err(|_| format!("negative number ({num}) not allowed: {expr}"))
}

fn parse_int_or_name(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    if let Some((_, value)) = bounds.names.iter().find(|(name, _)| *name == lower) {
        return Ok(*value);
    }
    must_parse_int(expr)
}

fn check_range(expr: &str, bounds: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max)
    } else {
        let start = parse_int_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => parse_int_or_name(low_and_high[1], bounds)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            // `N/step` means `N-max/step`.
            if single {
                end = bounds.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

fn check_field(field: &str, bounds: &Bounds) -> Result<(), String> {
    field
        .split(',')
        .filter(|expr| !expr.is_empty())
        .try_for_each(|expr| check_range(expr, bounds))
}

/// Go's `time.ParseDuration`, reporting only whether (and why not) it parses.
pub fn check_go_duration(text: &str) -> Result<(), String> {
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let mut s = text;
    if let Some(rest) = s.strip_prefix(['-', '+']) {
        s = rest;
    }
    if s == "0" {
        return Ok(());
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
    if !text.starts_with('-') && total > limit - 1 {
        return Err(invalid());
    }
    Ok(())
}

fn check_descriptor(descriptor: &str) -> Result<(), String> {
    if DESCRIPTORS.contains(&descriptor) {
        return Ok(());
    }
    if let Some(duration) = descriptor.strip_prefix("@every ") {
        return check_go_duration(duration)
            .map_err(|e| format!("failed to parse duration {descriptor}: {e}"));
    }
    Err(format!("unrecognized descriptor: {descriptor}"))
}

/// Whether `spec` parses as a standard cron schedule (`cron.ParseStandard`): the error is the
/// parser's message, which upstream reports as the field error's detail.
pub fn parse_standard_schedule(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".to_owned());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let space = spec.find(' ').unwrap_or(spec.len());
        let zone = &spec[eq + 1..space];
        if let Err(e) = load_location(zone) {
            return Err(format!("provided bad location {zone}: {e}"));
        }
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return check_descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (field, bounds) in
        fields
            .iter()
            .zip([&MINUTES, &HOURS, &DAYS_OF_MONTH, &MONTHS, &DAYS_OF_WEEK])
    {
        check_field(field, bounds)?;
    }
    Ok(())
}

fn zone_names() -> &'static BTreeSet<String> {
    static NAMES: OnceLock<BTreeSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        jiff::tz::db()
            .available()
            .map(|name| name.to_string())
            .collect()
    })
}

/// Go's `time.LoadLocation` on a Linux host: `""` and `UTC` are UTC, `Local` is the local zone,
/// other names must be IANA zone names (matched case-sensitively).
pub fn load_location(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "UTC" || name == "Local" {
        return Ok(());
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err("time: invalid location name".to_owned());
    }
    if zone_names().contains(name) {
        Ok(())
    } else {
        Err(format!("unknown time zone {name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let ok = [
            "* * * * *",
            "*/5 1-3,7 ? JAN-mar sun",
            "0 0 1 1 *",
            "15 4 * * 1-5",
            "@daily",
            "@every 1h30m",
            "@every 1.5s",
            "TZ=UTC 0 * * * *",
            "  0   0 * * *  ",
        ];
        for schedule in ok {
            assert_eq!(parse_standard_schedule(schedule), Ok(()), "{schedule}");
        }
        let bad = [
            ("", "empty spec string"),
            ("* * *", "expected exactly 5 fields, found 3: [* * *]"),
            (
                "0 0 0 * * *",
                "expected exactly 5 fields, found 6: [0 0 0 * * *]",
            ),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("*/2/3 * * * *", "too many slashes: */2/3"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("*/-1 * * * *", "negative number (-1) not allowed: -1"),
            (
                "* * * foo *",
                "failed to parse int from foo: strconv.Atoi: parsing \"foo\": invalid syntax",
            ),
            ("@sometimes", "unrecognized descriptor: @sometimes"),
            (
                "@every 5",
                "failed to parse duration @every 5: time: missing unit in duration \"5\"",
            ),
            (
                "@every 5y",
                "failed to parse duration @every 5y: time: unknown unit \"y\" in duration \"5y\"",
            ),
            (
                "TZ=Mars/Base 0 * * * *",
                "provided bad location Mars/Base: unknown time zone Mars/Base",
            ),
        ];
        for (schedule, message) in bad {
            assert_eq!(
                parse_standard_schedule(schedule),
                Err(message.to_owned()),
                "{schedule}"
            );
        }
    }

    #[test]
    fn durations() {
        for ok in ["0", "-1s", "1h2m3.5s", ".5h", "300ms", "2562047h"] {
            assert_eq!(check_go_duration(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_go_duration("."),
            Err("time: invalid duration \".\"".to_owned())
        );
        assert_eq!(
            check_go_duration("9999999999h"),
            Err("time: invalid duration \"9999999999h\"".to_owned())
        );
    }

    #[test]
    fn locations() {
        assert_eq!(load_location("America/New_York"), Ok(()));
        assert_eq!(load_location("UTC"), Ok(()));
        assert_eq!(load_location("Etc/GMT+5"), Ok(()));
        assert_eq!(
            load_location("america/new_york"),
            Err("unknown time zone america/new_york".to_owned())
        );
        assert_eq!(
            load_location("a..b"),
            Err("time: invalid location name".to_owned())
        );
    }
}
