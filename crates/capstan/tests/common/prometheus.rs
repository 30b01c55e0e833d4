//! Prometheus exposition text checked with a maintained parser: Prometheus' own Python client
//! (`prometheus_client.parser`, `prometheus_client.openmetrics.parser`; `scripts/install-deps`
//! installs it).

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Parses Prometheus text (stdin) with the maintained Python parser and prints every sample
/// as JSON: `[family, type, sample name, labels, value, timestamp]`.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
text = sys.stdin.read()
parse = openmetrics if sys.argv[1] == "openmetrics" else text_string_to_metric_families
out = []
for family in parse(text):
    for s in family.samples:
        ts = s.timestamp
        if ts is not None and not isinstance(ts, (int, float)):
            ts = float(ts.sec) + ts.nsec / 1e9
        out.append([family.name, family.type, s.name, s.labels, s.value, ts])
print(json.dumps(out))
"#;

/// One parsed sample.
#[derive(Debug, Clone)]
pub struct Sample {
    pub family: String,
    pub kind: String,
    pub name: String,
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
    pub timestamp: Option<f64>,
}

/// Every sample of `text` (Prometheus text format 0.0.4, or OpenMetrics when `format` is
/// `openmetrics`) as Prometheus' own Python client parses it; fails the test if it refuses it.
pub fn parse_metrics(text: &str, format: &str) -> Vec<Sample> {
    let mut child = Command::new("python3")
        .args(["-c", PARSE, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/install-deps installs it and prometheus-client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text (pip install prometheus-client?): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .map(|row| Sample {
            family: row[0].as_str().unwrap().to_owned(),
            kind: row[1].as_str().unwrap().to_owned(),
            name: row[2].as_str().unwrap().to_owned(),
            labels: row[3].as_object().unwrap().clone(),
            value: row[4].as_f64().unwrap(),
            timestamp: row[5].as_f64(),
        })
        .collect()
}
