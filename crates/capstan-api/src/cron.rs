//! CronJob schedules, one type for the API's validation and the CronJob controller, as
//! upstream parses and steps them with `robfig/cron/v3` (`ParseStandard`, `SpecSchedule.Next`):
//! five fields (minute, hour, day of month, month, day of week) with `*`, `?`, ranges, steps,
//! lists and month/day names; the descriptors `@yearly`, `@annually`, `@monthly`, `@weekly`,
//! `@daily`, `@midnight`, `@hourly` and `@every <Go duration>`; and an optional `TZ=<zone>` /
//! `CRON_TZ=<zone>` prefix, which is how the controller applies `spec.timeZone`. Parse errors
//! are robfig's messages word for word (upstream reports them as field errors). Times are
//! stepped in the schedule's zone the way robfig does, so daylight-saving transitions behave
//! as upstream (a time skipped by a spring-forward does not run that day; one repeated by a
//! fall-back runs twice). Zones come from the IANA database bundled with `jiff`, looked up
//! case-sensitively as Go's `time.LoadLocation` does on Linux.
//!
//! No crate is used for the schedule itself: maintained cron crates (`croner`, `cron`) differ
//! from robfig in syntax (seconds fields, `L`/`W`/`#`), in how day-of-month and day-of-week
//! combine and in their error texts, all of which clients of the API observe.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

use crate::duration::go_duration_nanos;
use crate::field::go_quote;

/// Set when a day field was `*` or `?` (robfig's `starBit`): then both day fields must match.
const STAR: u64 = 1 << 63;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A five-field schedule (or a descriptor other than `@every`) in a zone.
    Spec(Spec),
    /// `@every <duration>`: a fixed delay (whole seconds, at least one).
    Every(Duration),
}

/// Bit sets of the allowed values of each field (robfig's `SpecSchedule`).
#[derive(Debug, Clone)]
pub struct Spec {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    zone: TimeZone,
}

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

/// The values `start..=end` by `step` as bits.
fn bits(start: u64, end: u64, step: u64) -> u64 {
    (start..=end)
        .step_by(usize::try_from(step).unwrap_or(usize::MAX))
        .fold(0, |acc, i| acc | 1 << i)
}

/// One comma-separated part of a field (robfig's `getRange`).
fn range(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut extra) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max, STAR)
    } else {
        let start = parse_int_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => parse_int_or_name(low_and_high[1], bounds)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end, 0)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            // `N/step` means `N-max/step`.
            if single {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
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
    Ok(bits(start, end, step) | extra)
}

/// A whole field: its comma-separated parts, empty ones skipped as Go's `FieldsFunc` does.
fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    text.split(',')
        .filter(|expr| !expr.is_empty())
        .try_fold(0, |acc, expr| Ok(acc | range(expr, bounds)?))
}

fn descriptor(spec: &str, zone: TimeZone) -> Result<Schedule, String> {
    let all = |b: &Bounds| bits(b.min, b.max, 1) | STAR;
    let make = |dom: u64, month: u64, dow: u64, hour: u64| {
        Schedule::Spec(Spec {
            minute: 1,
            hour,
            dom,
            month,
            dow,
            zone: zone.clone(),
        })
    };
    Ok(match spec {
        "@yearly" | "@annually" => make(1 << 1, 1 << 1, all(&DAYS_OF_WEEK), 1),
        "@monthly" => make(1 << 1, all(&MONTHS), all(&DAYS_OF_WEEK), 1),
        "@weekly" => make(all(&DAYS_OF_MONTH), all(&MONTHS), 1, 1),
        "@daily" | "@midnight" => make(all(&DAYS_OF_MONTH), all(&MONTHS), all(&DAYS_OF_WEEK), 1),
        "@hourly" => make(
            all(&DAYS_OF_MONTH),
            all(&MONTHS),
            all(&DAYS_OF_WEEK),
            all(&HOURS),
        ),
        _ => {
            let Some(duration) = spec.strip_prefix("@every ") else {
                return Err(format!("unrecognized descriptor: {spec}"));
            };
            let nanos = go_duration_nanos(duration)
                .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
            // robfig's `Every`: at least a second, rounded down to whole seconds.
            let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(0);
            Schedule::Every(Duration::from_secs(secs.max(1)))
        }
    })
}

/// Parses `spec` as robfig's `ParseStandard` does; the error is that parser's message.
pub fn parse(spec: &str) -> Result<Schedule, String> {
    if spec.is_empty() {
        return Err("empty spec string".to_owned());
    }
    let mut spec = spec;
    let mut zone = TimeZone::UTC;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let space = spec.find(' ').unwrap_or(spec.len());
        let name = &spec[eq + 1..space];
        zone = load_zone(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return descriptor(spec, zone);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    Ok(Schedule::Spec(Spec {
        minute: field(fields[0], &MINUTES)?,
        hour: field(fields[1], &HOURS)?,
        dom: field(fields[2], &DAYS_OF_MONTH)?,
        month: field(fields[3], &MONTHS)?,
        dow: field(fields[4], &DAYS_OF_WEEK)?,
        zone,
    }))
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

/// Go's `time.LoadLocation` on a Linux host: `""` and `UTC` are UTC, `Local` is the local zone
/// (taken to be UTC, as the server keeps UTC), other names must be IANA zone names (matched
/// case-sensitively).
pub fn load_zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name == "UTC" || name == "Local" {
        return Ok(TimeZone::UTC);
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err("time: invalid location name".to_owned());
    }
    if !zone_names().contains(name) {
        return Err(format!("unknown time zone {name}"));
    }
    TimeZone::get(name).map_err(|_| format!("unknown time zone {name}"))
}

fn at_civil(zone: &TimeZone, y: i16, m: i8, d: i8, h: i8) -> Option<Zoned> {
    jiff::civil::date(y, m, d)
        .at(h, 0, 0, 0)
        .to_zoned(zone.clone())
        .ok()
}

impl Spec {
    fn day_matches(&self, t: &Zoned) -> bool {
        let dom = self.dom & (1 << t.day()) != 0;
        let dow = self.dow & (1 << t.weekday().to_sunday_zero_offset()) != 0;
        if self.dom & STAR != 0 || self.dow & STAR != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first time strictly after `after` that matches, within five years.
    fn next(&self, after: Timestamp) -> Option<Timestamp> {
        let start = Timestamp::from_second(after.as_second().checked_add(1)?).ok()?;
        let mut t = start.to_zoned(self.zone.clone());
        let mut added = false;
        let year_limit = t.year() + 5;
        'wrap: loop {
            if t.year() > year_limit {
                return None;
            }
            while self.month & (1 << t.month()) == 0 {
                if !added {
                    added = true;
                    t = at_civil(&self.zone, t.year(), t.month(), 1, 0)?;
                }
                t = t.checked_add(1.month()).ok()?;
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&t) {
                if !added {
                    added = true;
                    t = at_civil(&self.zone, t.year(), t.month(), t.day(), 0)?;
                }
                t = t.checked_add(1.day()).ok()?;
                // A daylight-saving shift may leave it off midnight.
                let hour = i64::from(t.hour());
                if hour != 0 {
                    let shift = if hour > 12 { 24 - hour } else { -hour };
                    t = t.checked_add(shift.hours()).ok()?;
                }
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while self.hour & (1 << t.hour()) == 0 {
                if !added {
                    added = true;
                    t = at_civil(&self.zone, t.year(), t.month(), t.day(), t.hour())?;
                }
                t = t.checked_add(1.hour()).ok()?;
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while self.minute & (1 << t.minute()) == 0 {
                if !added {
                    added = true;
                    let secs = t.timestamp().as_second();
                    t = Timestamp::from_second(secs - secs.rem_euclid(60))
                        .ok()?
                        .to_zoned(self.zone.clone());
                }
                t = t.checked_add(1.minute()).ok()?;
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            // Standard schedules fire at second 0 only.
            while t.second() != 0 {
                added = true;
                t = t.checked_add(1.second()).ok()?;
                if t.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(t.timestamp());
        }
    }
}

impl Schedule {
    /// The first activation strictly after `after` (`None` if there is none within five years).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Spec(spec) => spec.next(after),
            Schedule::Every(delay) => {
                Timestamp::from_second(after.as_second().checked_add(delay.as_secs() as i64)?).ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The next `n` activations after `from`, as RFC 3339 in UTC.
    fn nexts(spec: &str, from: &str, n: usize) -> Vec<String> {
        let schedule = parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let mut at = ts(from);
        let mut out = Vec::new();
        for _ in 0..n {
            match schedule.next(at) {
                Some(t) => {
                    out.push(t.to_string());
                    at = t;
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn standard_fields() {
        let check = |spec: &str, from: &str, want: &[&str]| {
            assert_eq!(nexts(spec, from, want.len()), want, "{spec} from {from}");
        };
        check(
            "*/15 * * * *",
            "2026-03-01T10:07:30Z",
            &["2026-03-01T10:15:00Z", "2026-03-01T10:30:00Z"],
        );
        check(
            "0 3 * * *",
            "2026-03-01T03:00:00Z",
            &["2026-03-02T03:00:00Z"],
        );
        check(
            "30 9 * * mon-fri",
            "2026-03-06T10:00:00Z",
            &["2026-03-09T09:30:00Z"],
        );
        check(
            "0 0 1,15 * *",
            "2026-03-02T00:00:00Z",
            &["2026-03-15T00:00:00Z", "2026-04-01T00:00:00Z"],
        );
        // Day of month and day of week both restricted: either matches.
        check(
            "0 0 13 * 5",
            "2026-03-01T00:00:00Z",
            &["2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z"],
        );
        check(
            "0 12 * FEB Sun",
            "2026-01-01T00:00:00Z",
            &["2026-02-01T12:00:00Z"],
        );
        check(
            "5/20 * * * *",
            "2026-01-01T00:06:00Z",
            &[
                "2026-01-01T00:25:00Z",
                "2026-01-01T00:45:00Z",
                "2026-01-01T01:05:00Z",
            ],
        );
        check(
            "0 0 29 2 *",
            "2026-01-01T00:00:00Z",
            &["2028-02-29T00:00:00Z"],
        );
        check("0 0 30 2 *", "2026-01-01T00:00:00Z", &[]);
        check("@hourly", "2026-01-01T00:00:00Z", &["2026-01-01T01:00:00Z"]);
        check("@daily", "2026-01-01T00:00:01Z", &["2026-01-02T00:00:00Z"]);
        check(
            "@midnight",
            "2026-01-01T00:00:00Z",
            &["2026-01-02T00:00:00Z"],
        );
        check("@weekly", "2026-01-01T00:00:00Z", &["2026-01-04T00:00:00Z"]);
        check(
            "@monthly",
            "2026-01-15T00:00:00Z",
            &["2026-02-01T00:00:00Z"],
        );
        check("@yearly", "2026-01-15T00:00:00Z", &["2027-01-01T00:00:00Z"]);
        check(
            "@annually",
            "2026-01-15T00:00:00Z",
            &["2027-01-01T00:00:00Z"],
        );
        check(
            "@every 90m",
            "2026-01-01T00:00:10.5Z",
            &["2026-01-01T01:30:10Z"],
        );
        check(
            "@every 10ms",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T00:00:01Z"],
        );
    }

    #[test]
    fn errors_as_robfig_words_them() {
        let check = |spec: &str, want: &str| {
            let error = parse(spec).err().unwrap_or_default();
            assert!(error.contains(want), "{spec}: {error:?} lacks {want:?}");
        };
        check("", "empty spec string");
        check("* * * *", "expected exactly 5 fields, found 4");
        check("0 0 * * * *", "expected exactly 5 fields, found 6");
        check("60 * * * *", "end of range (60) above maximum (59)");
        check("* * 0 * *", "beginning of range (0) below minimum (1)");
        check(
            "5-1 * * * *",
            "beginning of range (5) beyond end of range (1)",
        );
        check("*/0 * * * *", "step of range should be a positive number");
        check("1-2-3 * * * *", "too many hyphens");
        check("*/2/3 * * * *", "too many slashes");
        check("* * * * 7", "above maximum (6)");
        check("x * * * *", "failed to parse int from x");
        check("@fortnightly", "unrecognized descriptor: @fortnightly");
        check("@every soon", "failed to parse duration");
        check(
            "TZ=Mars/Olympus 0 * * * *",
            "provided bad location Mars/Olympus",
        );
    }

    #[test]
    fn time_zones_and_daylight_saving() {
        let check = |spec: &str, from: &str, want: &[&str]| {
            assert_eq!(nexts(spec, from, want.len()), want, "{spec} from {from}");
        };
        // 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
        check(
            "TZ=Europe/Berlin 0 9 * * *",
            "2026-03-28T12:00:00Z",
            &["2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"],
        );
        check(
            "CRON_TZ=Europe/Berlin 0 9 * * *",
            "2026-01-10T12:00:00Z",
            &["2026-01-11T08:00:00Z"],
        );
        // 02:30 does not exist on the spring-forward day in New York: that day is skipped.
        check(
            "TZ=America/New_York 30 2 * * *",
            "2026-03-07T12:00:00Z",
            &["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"],
        );
        // 01:30 happens twice on the fall-back day: it runs twice.
        check(
            "TZ=America/New_York 30 1 * * *",
            "2026-10-31T12:00:00Z",
            &[
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-02T06:30:00Z",
            ],
        );
        // Midnight daily across the spring-forward.
        check(
            "TZ=America/New_York 0 0 * * *",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"],
        );
        // A zone with a non-hour offset.
        check(
            "TZ=Asia/Kolkata 0 9 * * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T03:30:00Z"],
        );
    }

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
            assert_eq!(parse(schedule).map(|_| ()), Ok(()), "{schedule}");
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
                parse(schedule).map(|_| ()),
                Err(message.to_owned()),
                "{schedule}"
            );
        }
    }

    #[test]
    fn locations() {
        for ok in ["America/New_York", "UTC", "", "Local", "Etc/GMT+5"] {
            assert!(load_zone(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            load_zone("america/new_york").err(),
            Some("unknown time zone america/new_york".to_owned())
        );
        assert_eq!(
            load_zone("a..b").err(),
            Some("time: invalid location name".to_owned())
        );
    }
}
