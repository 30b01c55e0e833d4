//! Small pieces every printer shares: reading fields out of an object's JSON with upstream's
//! zero values for absent fields, timestamps and ages (`duration.HumanDuration`), label and
//! selector strings, and the `<none>` style placeholders.

use jiff::Timestamp;
use serde_json::Value;

/// The value at `path`, if every step exists.
pub(super) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

/// The string at `path`, or `""` when absent or not a string (Go's zero value).
pub(super) fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    at(value, path).and_then(Value::as_str).unwrap_or("")
}

/// The string at `path` when present (a Go `*string`).
pub(super) fn opt_text<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

/// The string at `path`, or `default` when absent or empty: a string field the `v1` defaults
/// fill in (`spec.type`, `status.phase`...), as upstream sees it after decoding.
pub(super) fn defaulted<'a>(value: &'a Value, path: &[&str], default: &'a str) -> &'a str {
    match text(value, path) {
        "" => default,
        found => found,
    }
}

/// The integer at `path`, or 0.
pub(super) fn int(value: &Value, path: &[&str]) -> i64 {
    opt_int(value, path).unwrap_or(0)
}

/// The integer at `path` when present (a Go `*int32`).
pub(super) fn opt_int(value: &Value, path: &[&str]) -> Option<i64> {
    at(value, path).and_then(Value::as_i64)
}

/// The boolean at `path`, or false.
pub(super) fn flag(value: &Value, path: &[&str]) -> bool {
    opt_flag(value, path).unwrap_or(false)
}

/// The boolean at `path` when present (a Go `*bool`).
pub(super) fn opt_flag(value: &Value, path: &[&str]) -> Option<bool> {
    at(value, path).and_then(Value::as_bool)
}

/// The list at `path`, or an empty one.
pub(super) fn list<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    at(value, path)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The number of entries of the map (or list) at `path`.
pub(super) fn len(value: &Value, path: &[&str]) -> usize {
    match at(value, path) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(items)) => items.len(),
        _ => 0,
    }
}

/// The string-valued entries of the map at `path`, in key order.
pub(super) fn string_map<'a>(value: &'a Value, path: &[&str]) -> Vec<(&'a str, &'a str)> {
    let Some(Value::Object(map)) = at(value, path) else {
        return Vec::new();
    };
    let mut entries: Vec<(&str, &str)> = map
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
        .collect();
    entries.sort_unstable();
    entries
}

/// The object's `metadata.name`.
pub(super) fn name(object: &Value) -> Value {
    Value::from(text(object, &["metadata", "name"]))
}

/// `0001-01-01T00:00:00Z`, Go's zero `time.Time`, which upstream treats as "not set".
const GO_ZERO_SECONDS: i64 = -62_135_596_800;

fn parse_time(value: Option<&Value>) -> Option<Timestamp> {
    let ts: Timestamp = value?.as_str()?.parse().ok()?;
    (ts.as_second() != GO_ZERO_SECONDS || ts.subsec_nanosecond() != 0).then_some(ts)
}

/// A `metav1.Time` at `path`: `None` when absent, null, unparsable or Go's zero time.
/// Upstream keeps whole seconds only, so any fraction is dropped.
pub(super) fn time(value: &Value, path: &[&str]) -> Option<Timestamp> {
    let ts = parse_time(at(value, path))?;
    Timestamp::from_second(ts.as_second()).ok()
}

/// A `metav1.MicroTime` at `path`, kept to the microsecond.
pub(super) fn micro_time(value: &Value, path: &[&str]) -> Option<Timestamp> {
    let ts = parse_time(at(value, path))?;
    Timestamp::from_microsecond(ts.as_microsecond()).ok()
}

/// Nanoseconds from `earlier` to `later`, saturating like Go's `time.Time.Sub`.
pub(super) fn nanos_between(earlier: Timestamp, later: Timestamp) -> i64 {
    let nanos = later.as_nanosecond() - earlier.as_nanosecond();
    i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX })
}

/// How long ago `ts` was, as upstream's `translateTimestampSince`: `<unknown>` when not set.
pub(super) fn since(ts: Option<Timestamp>, now: Timestamp) -> String {
    match ts {
        Some(ts) => human_duration(nanos_between(ts, now)),
        None => "<unknown>".to_owned(),
    }
}

/// The object's age (`metadata.creationTimestamp` to `now`).
pub(super) fn age(object: &Value, now: Timestamp) -> Value {
    Value::from(since(time(object, &["metadata", "creationTimestamp"]), now))
}

/// A duration (in nanoseconds) the way kubectl shows ages, with two or three significant
/// figures: `45s`, `3m20s`, `15m`, `2h5m`, `20h`, `3d4h`, `120d`, `2y30d`, `10y`. A duration a
/// little below zero (clock skew) prints as `0s`; anything more negative as `<invalid>`.
pub fn human_duration(nanos: i64) -> String {
    const SECOND: i64 = 1_000_000_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let d = days % 365;
        return if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        };
    }
    format!("{years}y")
}

/// `value`, or `<none>` when it is empty.
pub(super) fn or_none(value: &str) -> String {
    if value.is_empty() {
        "<none>".to_owned()
    } else {
        value.to_owned()
    }
}

/// A `map[string]string` printed as upstream's `labels.FormatLabels`: `k=v` pairs sorted and
/// joined by commas, `<none>` when empty.
pub(super) fn format_labels(value: &Value, path: &[&str]) -> String {
    let mut pairs: Vec<String> = string_map(value, path)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.sort_unstable();
    or_none(&pairs.join(","))
}

/// A `metav1.LabelSelector` as upstream's `LabelSelectorAsSelector(...).String()`: requirements
/// sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`. `Ok("")` for a missing or empty
/// selector; `Err` for an operator upstream does not know or values that do not fit it.
pub(super) fn selector_string(selector: Option<&Value>) -> Result<String, ()> {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return Ok(String::new());
    };
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in string_map(selector, &["matchLabels"]) {
        requirements.push((key.to_owned(), format!("{key}={value}")));
    }
    for expression in list(selector, &["matchExpressions"]) {
        let key = text(expression, &["key"]);
        let mut values: Vec<&str> = list(expression, &["values"])
            .iter()
            .map(|v| v.as_str().unwrap_or(""))
            .collect();
        values.sort_unstable();
        let rendered = match (text(expression, &["operator"]), values.is_empty()) {
            ("In", false) => format!("{key} in ({})", values.join(",")),
            ("NotIn", false) => format!("{key} notin ({})", values.join(",")),
            ("Exists", true) => key.to_owned(),
            ("DoesNotExist", true) => format!("!{key}"),
            // An unknown operator, or values where upstream requires none (or the reverse).
            _ => return Err(()),
        };
        requirements.push((key.to_owned(), rendered));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(requirements
        .into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(","))
}

/// A label selector as upstream's `metav1.FormatLabelSelector`: `<none>` when it selects nothing
/// or everything, `<error>` when it cannot be parsed.
pub(super) fn format_label_selector(selector: Option<&Value>) -> String {
    match selector_string(selector) {
        Ok(s) => or_none(&s),
        Err(()) => "<error>".to_owned(),
    }
}

/// The names and images of a container list, each joined by commas.
pub(super) fn container_cells(containers: &[Value]) -> (Value, Value) {
    let names: Vec<&str> = containers.iter().map(|c| text(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, &["image"])).collect();
    (Value::from(names.join(",")), Value::from(images.join(",")))
}

/// An `IntOrString` as Go's `String()`: the number in decimal or the string as is.
pub(super) fn int_or_string(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// A `*bool` as upstream's `printBoolPtr`: `True`, `False` or `<unset>`.
pub(super) fn bool_ptr(value: Option<bool>) -> String {
    match value {
        Some(true) => "True".to_owned(),
        Some(false) => "False".to_owned(),
        None => "<unset>".to_owned(),
    }
}

/// Up to `max` items joined by commas, with ` + N more...` for the rest, or `<unset>` when
/// there are none (upstream's `listWithMoreString`).
pub(super) fn list_with_more(items: &[String], max: usize) -> String {
    if items.len() > max {
        return format!("{} + {} more...", items[..max].join(","), items.len() - max);
    }
    if items.is_empty() {
        "<unset>".to_owned()
    } else {
        items.join(",")
    }
}
