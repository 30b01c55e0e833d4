//! The Prometheus exposition formats every Capstan `/metrics` endpoint answers in: the text
//! format 0.0.4 (`text/plain; version=0.0.4`), which upstream's components send unless a
//! client's `Accept` asks for OpenMetrics, and OpenMetrics 1.0.0 text.
//!
//! - [`negotiate`] picks the format from a request's `Accept` header (0.0.4 unless
//!   `application/openmetrics-text` is preferred), [`Format::content_type`] names it;
//! - [`encode_registry`] encodes a `prometheus_client` [`Registry`] in either format: the
//!   crate writes OpenMetrics only, so its output is rewritten line by line into 0.0.4 as
//!   client_golang writes the same families (counters named with their `_total`, no
//!   `_created` samples, no `# UNIT`, no exemplars, no `# EOF`, `info` as a gauge);
//! - [`encode_families`] encodes families built at scrape time ([`MetricFamily`], samples
//!   with explicit timestamps, which `prometheus_client` cannot carry), as client_golang's
//!   `expfmt` writes them: families by name, samples by label values, labels by name, values
//!   in Go's shortest `%g` form, timestamps in milliseconds.

use std::fmt::Write as _;

use prometheus_client::registry::Registry;

/// `Content-Type` of the text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics 1.0.0 text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` a response in this format carries.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// The format to answer a request whose `Accept` header is `accept` in: OpenMetrics when the
/// client accepts `application/openmetrics-text` at least as much as `text/plain` (or the
/// wildcards matching it), the text format 0.0.4 otherwise, also with no header at all.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let mut q = 1.0;
        for parameter in parts {
            if let Some((key, value)) = parameter.split_once('=')
                && key.trim().eq_ignore_ascii_case("q")
            {
                q = value.trim().parse::<f64>().unwrap_or(0.0).clamp(0.0, 1.0);
            }
        }
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// Encodes `registry` in `format`; with `eof` OpenMetrics output ends with its `# EOF` line
/// (leave it off to append more families, then write `# EOF` yourself).
pub fn encode_registry(
    registry: &Registry,
    format: Format,
    eof: bool,
) -> Result<String, std::fmt::Error> {
    let mut written = String::new();
    prometheus_client::encoding::text::encode_registry(&mut written, registry)?;
    // `prometheus_client` ends every help text with a period of its own (`Registry::register`
    // appends one); upstream writes the text as given, so that period goes.
    let mut openmetrics = String::with_capacity(written.len());
    for line in written.lines() {
        let line = match line.strip_prefix("# HELP ") {
            Some(_) => line.strip_suffix('.').unwrap_or(line),
            None => line,
        };
        openmetrics.push_str(line);
        openmetrics.push('\n');
    }
    Ok(match format {
        Format::OpenMetrics => {
            if eof {
                openmetrics.push_str("# EOF\n");
            }
            openmetrics
        }
        Format::Text => openmetrics_to_text(&openmetrics),
    })
}

/// Rewrites OpenMetrics text as the text format 0.0.4 (see the module's documentation).
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    // The metadata lines of one family are rewritten once its type is known.
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(String, String)> = None;
    let mut kind = String::new();
    let mut family = String::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name.to_owned(), text.replace("\\\"", "\"")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, openmetrics_kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, text_kind) = match openmetrics_kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "stateset" => (name.to_owned(), "gauge"),
                "histogram" => (name.to_owned(), "histogram"),
                "summary" => (name.to_owned(), "summary"),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some((_, text)) = help.take() {
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {text_kind}");
            kind = openmetrics_kind.to_owned();
            family = rest.split_once(' ').map_or(rest, |(n, _)| n).to_owned();
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF` and comments have no 0.0.4 form.
        } else if !line.is_empty() {
            let Some(sample) = split_sample(line) else {
                continue;
            };
            if kind == "counter" && sample.name == format!("{family}_created") {
                continue;
            }
            out.push_str(sample.name);
            out.push_str(sample.labels);
            out.push(' ');
            out.push_str(sample.value);
            if let Some(seconds) = sample.timestamp.and_then(|t| t.parse::<f64>().ok()) {
                let _ = write!(out, " {}", (seconds * 1000.0).round() as i64);
            }
            out.push('\n');
        }
    }
    out
}

/// The parts of an OpenMetrics sample line.
struct SampleLine<'a> {
    name: &'a str,
    /// `{...}` or empty.
    labels: &'a str,
    value: &'a str,
    timestamp: Option<&'a str>,
}

fn split_sample(line: &str) -> Option<SampleLine<'_>> {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = "";
    if rest.starts_with('{') {
        // The label set ends at the first `}` outside a quoted value.
        let (mut quoted, mut escaped, mut end) = (false, false, None);
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end?;
        labels = &rest[..=end];
        rest = &rest[end + 1..];
    }
    // An exemplar follows ` # `.
    let rest = rest.split(" # ").next().unwrap_or_default();
    let mut fields = rest.split_whitespace();
    let value = fields.next()?;
    Some(SampleLine {
        name,
        labels,
        value,
        timestamp: fields.next(),
    })
}

/// A metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A monotonic counter (its samples are named `<name>`, which should end in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A histogram: samples with the suffixes `_bucket` (label `le`), `_sum`, `_count`.
    Histogram,
    /// No type.
    Untyped,
}

/// One sample of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Appended to the family's name (`_bucket`, `_sum`, `_count` of histograms; else empty).
    pub suffix: &'static str,
    /// Label names and values; written sorted by name.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
    /// When the value was observed, in milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// A sample with `labels` and `value`, no suffix or timestamp.
    pub fn new(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            suffix: "",
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
            timestamp_ms: None,
        }
    }

    /// The sample observed at `timestamp_ms`.
    #[must_use]
    pub fn at(mut self, timestamp_ms: i64) -> Sample {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }
}

/// A metric family built at scrape time.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// The name as the text format 0.0.4 writes it (counters with their `_total`).
    pub name: String,
    /// The help text.
    pub help: String,
    /// The type.
    pub kind: MetricType,
    /// The samples.
    pub samples: Vec<Sample>,
}

impl MetricFamily {
    /// An empty family.
    pub fn new(name: &str, help: &str, kind: MetricType) -> MetricFamily {
        MetricFamily {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            samples: Vec::new(),
        }
    }
}

/// Encodes `families` in `format` as client_golang's gatherer and `expfmt` write them:
/// families without samples left out, families sorted by name, each family's samples by their
/// label values (labels sorted by name, a bucket's `le` last), values in Go's shortest `%g`
/// form; a histogram's samples stay in the order given (each label set's buckets, then its
/// `_sum` and `_count`). In OpenMetrics
/// counters lose `_total` in their family name, timestamps are in seconds and `# EOF` ends
/// the output unless `eof` is false.
pub fn encode_families(families: &[MetricFamily], format: Format, eof: bool) -> String {
    let mut sorted: Vec<&MetricFamily> =
        families.iter().filter(|f| !f.samples.is_empty()).collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for family in sorted {
        let (name, kind) = match (format, family.kind) {
            (Format::Text, kind) => (family.name.as_str(), text_type(kind)),
            (Format::OpenMetrics, MetricType::Counter) => (
                family
                    .name
                    .strip_suffix("_total")
                    .unwrap_or(family.name.as_str()),
                "counter",
            ),
            (Format::OpenMetrics, MetricType::Untyped) => (family.name.as_str(), "unknown"),
            (Format::OpenMetrics, kind) => (family.name.as_str(), text_type(kind)),
        };
        let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help, format));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let mut samples: Vec<(Vec<&(String, String)>, &Sample)> = family
            .samples
            .iter()
            .map(|s| {
                let mut labels: Vec<&(String, String)> = s.labels.iter().collect();
                // A histogram bucket's `le` comes after the other labels, as `expfmt` appends it.
                labels.sort_by_key(|(name, _)| (name == "le", name.clone()));
                (labels, s)
            })
            .collect();
        if family.kind != MetricType::Histogram {
            samples.sort_by(|a, b| {
                let values = |l: &Vec<&(String, String)>| -> Vec<String> {
                    l.iter().map(|(_, v)| v.clone()).collect()
                };
                values(&a.0)
                    .cmp(&values(&b.0))
                    .then(a.1.timestamp_ms.cmp(&b.1.timestamp_ms))
            });
        }
        for (labels, sample) in samples {
            let sample_name = match (format, family.kind) {
                (Format::OpenMetrics, MetricType::Counter) => format!("{name}_total"),
                _ => format!("{}{}", family.name, sample.suffix),
            };
            out.push_str(&sample_name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{key}=\"{}\"", escape_label_value(value));
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&go_float(sample.value));
            if let Some(ms) = sample.timestamp_ms {
                match format {
                    Format::Text => {
                        let _ = write!(out, " {ms}");
                    }
                    Format::OpenMetrics => {
                        let _ = write!(out, " {}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
                    }
                }
            }
            out.push('\n');
        }
    }
    if format == Format::OpenMetrics && eof {
        out.push_str("# EOF\n");
    }
    out
}

fn text_type(kind: MetricType) -> &'static str {
    match kind {
        MetricType::Counter => "counter",
        MetricType::Gauge => "gauge",
        MetricType::Histogram => "histogram",
        MetricType::Untyped => "untyped",
    }
}

/// Help text escaped: `\` and newlines in both formats, `"` too in OpenMetrics.
fn escape_help(help: &str, format: Format) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A label value escaped: `\`, `"` and newlines.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// `value` as Go's `strconv.FormatFloat(value, 'g', -1, 64)` writes it, as `expfmt` does:
/// the shortest digits that read back as `value`, in exponent form (`1.5e+06`, `1e-05`)
/// when the decimal exponent is below -4 or at least 6, as Go's shortest `%g` decides;
/// `NaN`, `+Inf`, `-Inf` for the special values.
pub fn go_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` writes the shortest round-tripping digits: `d[.ddd]e[-]x`.
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if value < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{point}{rest}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    let places = digits.len() as i32;
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if exponent + 1 >= places {
        let zeros = "0".repeat((exponent + 1 - places) as usize);
        format!("{sign}{digits}{zeros}")
    } else {
        let (whole, fraction) = digits.split_at((exponent + 1) as usize);
        format!("{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;

    #[test]
    fn floats_are_written_as_go_writes_them() {
        for (value, go) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.5, "0.5"),
            (123456.0, "123456"),
            (1_234_567.0, "1.234567e+06"),
            (1e6, "1e+06"),
            (1_700_000_000.0, "1.7e+09"),
            (1_234_567_168.0, "1.234567168e+09"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000_012_5, "1.25e-05"),
            (12.345, "12.345"),
            (-3.25, "-3.25"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_float(value), go, "{value}");
        }
    }

    #[test]
    fn accept_headers_choose_the_format() {
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        // Prometheus' own scrape header.
        assert_eq!(
            negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0.2,text/plain;q=0.9")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        assert_eq!(negotiate(Some("application/json")), Format::Text);
        assert_eq!(Format::Text.content_type(), TEXT_CONTENT_TYPE);
    }

    #[test]
    fn families_are_written_as_expfmt_writes_them() {
        let mut cpu = MetricFamily::new(
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            MetricType::Counter,
        );
        cpu.samples.push(
            Sample::new(
                &[("pod", "b"), ("namespace", "ns"), ("container", "c")],
                12.5,
            )
            .at(1_700_000_000_123),
        );
        cpu.samples.push(
            Sample::new(
                &[("pod", "a"), ("namespace", "ns"), ("container", "c")],
                3.0,
            )
            .at(1_700_000_000_123),
        );
        let errors = MetricFamily {
            samples: vec![Sample::new(&[], 0.0)],
            ..MetricFamily::new(
                "a_scrape_error",
                "1 if \"bad\"\\ else 0\nor so",
                MetricType::Gauge,
            )
        };
        let empty = MetricFamily::new("b_empty", "no samples", MetricType::Gauge);
        let families = [cpu, empty, errors];
        assert_eq!(
            encode_families(&families, Format::Text, true),
            "# HELP a_scrape_error 1 if \"bad\"\\\\ else 0\\nor so\n\
             # TYPE a_scrape_error gauge\n\
             a_scrape_error 0\n\
             # HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n\
             # TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"a\"} 3 1700000000123\n\
             container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"b\"} 12.5 1700000000123\n"
        );
        assert_eq!(
            encode_families(&families, Format::OpenMetrics, true),
            "# HELP a_scrape_error 1 if \\\"bad\\\"\\\\ else 0\\nor so\n\
             # TYPE a_scrape_error gauge\n\
             a_scrape_error 0\n\
             # HELP container_cpu_usage_seconds [STABLE] Cumulative cpu time consumed by the container in core-seconds\n\
             # TYPE container_cpu_usage_seconds counter\n\
             container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"a\"} 3 1700000000.123\n\
             container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"b\"} 12.5 1700000000.123\n\
             # EOF\n"
        );
        let quoted = MetricFamily {
            samples: vec![Sample::new(&[("path", "a\"b\\c\nd")], 1.0)],
            ..MetricFamily::new("x", "h", MetricType::Untyped)
        };
        assert_eq!(
            encode_families(&[quoted], Format::Text, false),
            "# HELP x h\n# TYPE x untyped\nx{path=\"a\\\"b\\\\c\\nd\"} 1\n"
        );
    }

    #[test]
    fn histogram_buckets_put_le_last() {
        let bucket = |le: &str, value: f64| Sample {
            suffix: "_bucket",
            labels: vec![
                ("le".to_owned(), le.to_owned()),
                ("operation_type".to_owned(), "status".to_owned()),
            ],
            value,
            timestamp_ms: None,
        };
        let total = |suffix: &'static str, value: f64| Sample {
            suffix,
            labels: vec![("operation_type".to_owned(), "status".to_owned())],
            value,
            timestamp_ms: None,
        };
        let family = MetricFamily {
            samples: vec![
                bucket("0.005", 1.0),
                bucket("+Inf", 2.0),
                total("_sum", 0.25),
                total("_count", 2.0),
            ],
            ..MetricFamily::new("op_seconds", "Durations", MetricType::Histogram)
        };
        assert_eq!(
            encode_families(&[family], Format::Text, true),
            "# HELP op_seconds Durations\n\
             # TYPE op_seconds histogram\n\
             op_seconds_bucket{operation_type=\"status\",le=\"0.005\"} 1\n\
             op_seconds_bucket{operation_type=\"status\",le=\"+Inf\"} 2\n\
             op_seconds_sum{operation_type=\"status\"} 0.25\n\
             op_seconds_count{operation_type=\"status\"} 2\n"
        );
    }

    #[test]
    fn registries_are_rewritten_as_the_text_format() {
        let mut registry = Registry::default();
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        requests
            .get_or_create(&vec![("code".to_owned(), "200".to_owned())])
            .inc_by(3);
        registry.register("http_requests", "Requests served", requests);
        let pods = Gauge::<i64>::default();
        pods.set(4);
        registry.register("running_pods", "Pods running", pods);
        let latency = Histogram::new([0.5, 1.0]);
        latency.observe(0.7);
        registry.register("latency_seconds", "Latency.", latency);
        let text = encode_registry(&registry, Format::Text, true).unwrap();
        // Help texts as given: the period `prometheus_client` appends is dropped, one of the
        // text's own kept.
        assert_eq!(
            text,
            "# HELP http_requests_total Requests served\n\
             # TYPE http_requests_total counter\n\
             http_requests_total{code=\"200\"} 3\n\
             # HELP running_pods Pods running\n\
             # TYPE running_pods gauge\n\
             running_pods 4\n\
             # HELP latency_seconds Latency.\n\
             # TYPE latency_seconds histogram\n\
             latency_seconds_sum 0.7\n\
             latency_seconds_count 1\n\
             latency_seconds_bucket{le=\"0.5\"} 0\n\
             latency_seconds_bucket{le=\"1.0\"} 1\n\
             latency_seconds_bucket{le=\"+Inf\"} 1\n"
        );
        let openmetrics = encode_registry(&registry, Format::OpenMetrics, true).unwrap();
        assert!(openmetrics.starts_with("# HELP http_requests Requests served\n"));
        assert!(openmetrics.ends_with("# EOF\n"));
        assert!(
            !encode_registry(&registry, Format::OpenMetrics, false)
                .unwrap()
                .contains("# EOF")
        );
    }

    #[test]
    fn openmetrics_extras_have_no_text_form() {
        let openmetrics = "# HELP jobs Jobs done.\n\
                           # TYPE jobs counter\n\
                           # UNIT jobs jobs\n\
                           jobs_total{kind=\"a # b}\"} 2 # {trace=\"x\"} 1.0 1.5\n\
                           jobs_created{kind=\"a # b}\"} 1700000000.5\n\
                           # HELP build Build.\n\
                           # TYPE build info\n\
                           build_info{version=\"1\"} 1\n\
                           # TYPE seen gauge\n\
                           seen 3 1700000000.25\n\
                           # EOF\n";
        assert_eq!(
            openmetrics_to_text(openmetrics),
            "# HELP jobs_total Jobs done.\n\
             # TYPE jobs_total counter\n\
             jobs_total{kind=\"a # b}\"} 2\n\
             # HELP build_info Build.\n\
             # TYPE build_info gauge\n\
             build_info{version=\"1\"} 1\n\
             # TYPE seen gauge\n\
             seen 3 1700000000250\n"
        );
    }
}
