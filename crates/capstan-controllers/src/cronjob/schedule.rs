//! CronJob schedules as upstream parses and steps them (robfig/cron v3's `ParseStandard` and
//! `SpecSchedule.Next`): five fields (minute, hour, day of month, month, day of week) with
//! `*`, `?`, ranges, steps, lists and month/day names; the descriptors `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly` and
//! `@every <duration>`; and an optional `TZ=<zone>` / `CRON_TZ=<zone>` prefix, which is how
//! the controller applies `spec.timeZone`. Times are stepped in the schedule's zone the way
//! robfig does, so daylight-saving transitions behave as upstream (a time skipped by a
//! spring-forward does not run that day; one repeated by a fall-back runs twice).

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

/// Set when a day field was `*` or `?` (robfig's `starBit`): then both day fields must match.
const STAR: u64 = 1 << 63;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A five-field schedule in a zone.
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

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
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
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// Loads an IANA zone as Go's `time.LoadLocation` does (`""` and `UTC` are UTC; the
/// controller's local zone is taken to be UTC).
pub fn load_zone(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" | "Local" => Ok(TimeZone::UTC),
        _ => TimeZone::get(name).map_err(|_| format!("unknown time zone {name}")),
    }
}

/// Parses a schedule as robfig's `ParseStandard` does (with robfig's error messages).
pub fn parse(text: &str) -> Result<Schedule, String> {
    if text.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = text;
    let mut zone = TimeZone::UTC;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let (Some(space), Some(eq)) = (spec.find(' '), spec.find('=')) else {
            return Err(format!("provided bad location {spec}: missing schedule"));
        };
        let name = &spec[eq + 1..space];
        zone = load_zone(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
        spec = spec[space..].trim();
    }
    if let Some(descriptor) = spec.strip_prefix('@') {
        return parse_descriptor(descriptor, spec, zone);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: {spec}",
            fields.len()
        ));
    }
    Ok(Schedule::Spec(Spec {
        minute: field(fields[0], &MINUTES)?,
        hour: field(fields[1], &HOURS)?,
        dom: field(fields[2], &DOM)?,
        month: field(fields[3], &MONTHS)?,
        dow: field(fields[4], &DOW)?,
        zone,
    }))
}

fn parse_descriptor(descriptor: &str, spec: &str, zone: TimeZone) -> Result<Schedule, String> {
    let all = |b: &Bounds| bits(b.min, b.max, 1) | STAR;
    let (minute, hour) = (1, 1);
    let make = |dom: u64, month: u64, dow: u64, hour: u64| Spec {
        minute,
        hour,
        dom,
        month,
        dow,
        zone: zone.clone(),
    };
    let spec = match descriptor {
        "yearly" | "annually" => make(1 << 1, 1 << 1, all(&DOW), hour),
        "monthly" => make(1 << 1, all(&MONTHS), all(&DOW), hour),
        "weekly" => make(all(&DOM), all(&MONTHS), 1, hour),
        "daily" | "midnight" => make(all(&DOM), all(&MONTHS), all(&DOW), hour),
        "hourly" => make(all(&DOM), all(&MONTHS), all(&DOW), all(&HOURS)),
        _ => {
            if let Some(duration) = descriptor.strip_prefix("every ") {
                let parsed: kube::core::Duration = duration
                    .parse()
                    .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
                let secs = if parsed.is_negative() {
                    0
                } else {
                    Duration::from(parsed).as_secs()
                };
                return Ok(Schedule::Every(Duration::from_secs(secs.max(1))));
            }
            return Err(format!("unrecognized descriptor: {spec}"));
        }
    };
    Ok(Schedule::Spec(spec))
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    if step == 1 {
        return (!(u64::MAX << (max + 1))) & (u64::MAX << min);
    }
    (min..=max)
        .step_by(step as usize)
        .fold(0, |acc, i| acc | 1 << i)
}

fn number(text: &str) -> Result<u32, String> {
    let n: i64 = text
        .parse()
        .map_err(|_| format!("failed to parse int from {text}: invalid syntax"))?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {text}"));
    }
    u32::try_from(n).map_err(|_| format!("failed to parse int from {text}: value out of range"))
}

fn number_or_name(text: &str, names: &[&str]) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        // Months are named from 1, days from 0.
        return Ok(i as u32 + if names.len() == 12 { 1 } else { 0 });
    }
    number(text)
}

fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    let mut out = 0;
    for expr in text.split(',') {
        out |= range(expr, bounds)?;
    }
    Ok(out)
}

fn range(expr: &str, b: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end, mut extra);
    if low_high[0] == "*" || low_high[0] == "?" {
        (start, end, extra) = (b.min, b.max, STAR);
    } else {
        start = number_or_name(low_high[0], b.names)?;
        end = match low_high.len() {
            1 => start,
            2 => number_or_name(low_high[1], b.names)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        extra = 0;
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = number(range_and_step[1])?;
            if single {
                end = b.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
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
}
