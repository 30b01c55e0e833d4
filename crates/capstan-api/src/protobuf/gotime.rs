//! Go's text forms of the time values Kubernetes puts in JSON: `metav1.Time` (RFC 3339, whole
//! seconds, UTC), `metav1.MicroTime` (RFC 3339 with six fraction digits) and `time.Duration`'s
//! `String` (`1h0m0s`, `1.5s`, `300ms`).

use super::ProtobufError;

/// Unix seconds of Go's zero `time.Time` (January 1, year 1, UTC), which JSON shows as `null`.
const GO_ZERO_UNIX: i64 = -62_135_596_800;
/// Unix seconds of 0000-01-01T00:00:00Z and of 10000-01-01T00:00:00Z: the years RFC 3339 has.
const MIN_UNIX: i64 = -62_167_219_200;
const MAX_UNIX: i64 = 253_402_300_800;
const NANOS: i64 = 1_000_000_000;

/// The proleptic Gregorian date of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // `month` is in 1..=12 and `day` in 1..=31 by construction.
    (year, month.unsigned_abs() as u32, day.unsigned_abs() as u32)
}

fn format_seconds(seconds: i64) -> Result<String, ProtobufError> {
    if !(MIN_UNIX..MAX_UNIX).contains(&seconds) {
        return Err(ProtobufError::TimeOutOfRange(seconds));
    }
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let secs = seconds.rem_euclid(86_400);
    Ok(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    ))
}

/// A `metav1.Time` read from `{seconds, nanos}`: upstream drops the nanoseconds; `None` is the
/// zero time (JSON `null`).
pub(crate) fn time(seconds: i64) -> Result<Option<String>, ProtobufError> {
    if seconds == GO_ZERO_UNIX {
        return Ok(None);
    }
    Ok(Some(format_seconds(seconds)? + "Z"))
}

/// A `metav1.MicroTime` read from `{seconds, nanos}`: nanoseconds truncated toward zero to whole
/// microseconds, then normalised as Go's `time.Unix` does; `None` is the zero time.
pub(crate) fn micro_time(seconds: i64, nanos: i32) -> Result<Option<String>, ProtobufError> {
    let nanos = i64::from(nanos);
    let nanos = nanos - nanos % 1000;
    let seconds = seconds
        .checked_add(nanos.div_euclid(NANOS))
        .ok_or(ProtobufError::TimeOutOfRange(seconds))?;
    let nanos = nanos.rem_euclid(NANOS);
    if seconds == GO_ZERO_UNIX && nanos == 0 {
        return Ok(None);
    }
    Ok(Some(format!(
        "{}.{:06}Z",
        format_seconds(seconds)?,
        nanos / 1000
    )))
}

/// `.digits` of `value / 10^precision` with trailing zeros dropped (nothing when zero), and the
/// integer part.
fn fraction(value: u64, precision: u32) -> (String, u64) {
    let scale = 10u64.pow(precision);
    let digits = value % scale;
    if digits == 0 {
        return (String::new(), value / scale);
    }
    let text = format!("{digits:0width$}", width = precision as usize);
    (format!(".{}", text.trim_end_matches('0')), value / scale)
}

/// Go's `time.Duration(nanoseconds).String()`.
pub(crate) fn duration(nanoseconds: i64) -> String {
    let value = nanoseconds.unsigned_abs();
    let sign = if nanoseconds < 0 { "-" } else { "" };
    if value == 0 {
        return "0s".to_owned();
    }
    if value < NANOS.unsigned_abs() {
        let (precision, unit) = match value {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "\u{b5}s"),
            _ => (6, "ms"),
        };
        let (frac, whole) = fraction(value, precision);
        return format!("{sign}{whole}{frac}{unit}");
    }
    let (frac, seconds) = fraction(value, 9);
    let (minutes, hours) = (seconds / 60 % 60, seconds / 3600);
    let seconds = seconds % 60;
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}{frac}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}{frac}s")
    } else {
        format!("{sign}{seconds}{frac}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc3339_in_utc() {
        assert_eq!(time(0).unwrap().as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            time(1_136_214_245).unwrap().as_deref(),
            Some("2006-01-02T15:04:05Z")
        );
        assert_eq!(
            time(951_782_400).unwrap().as_deref(),
            Some("2000-02-29T00:00:00Z")
        );
        assert_eq!(time(-1).unwrap().as_deref(), Some("1969-12-31T23:59:59Z"));
        assert_eq!(
            time(MIN_UNIX).unwrap().as_deref(),
            Some("0000-01-01T00:00:00Z")
        );
        assert_eq!(
            time(MAX_UNIX - 1).unwrap().as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(time(GO_ZERO_UNIX).unwrap(), None);
        assert_eq!(time(MAX_UNIX), Err(ProtobufError::TimeOutOfRange(MAX_UNIX)));
        assert_eq!(time(i64::MIN), Err(ProtobufError::TimeOutOfRange(i64::MIN)));
    }

    #[test]
    fn micro_times_keep_microseconds() {
        let t = |s, n| micro_time(s, n).unwrap();
        assert_eq!(
            t(1_136_214_245, 0).as_deref(),
            Some("2006-01-02T15:04:05.000000Z")
        );
        assert_eq!(
            t(1_136_214_245, 123_456_789).as_deref(),
            Some("2006-01-02T15:04:05.123456Z")
        );
        assert_eq!(t(0, -1_500).as_deref(), Some("1969-12-31T23:59:59.999999Z"));
        assert_eq!(
            t(0, 1_999_999_999).as_deref(),
            Some("1970-01-01T00:00:01.999999Z")
        );
        assert_eq!(t(GO_ZERO_UNIX, 999), None);
        assert!(micro_time(i64::MAX, i32::MAX).is_err());
    }

    #[test]
    fn durations_print_as_go_does() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (2_200_000, "2.2ms"),
            (300_000_000, "300ms"),
            (1_500_000_000, "1.5s"),
            (30 * NANOS, "30s"),
            (90 * NANOS, "1m30s"),
            (3600 * NANOS, "1h0m0s"),
            (-(3661 * NANOS + 1), "-1h1m1.000000001s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (i64::MAX, "2562047h47m16.854775807s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(duration(nanos), text, "{nanos}");
        }
    }
}
