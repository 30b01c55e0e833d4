//! Resource quantities printed as upstream's `resource.Quantity.String()`: the canonical form
//! (`1024Mi` → `1Gi`, `1000m` → `1`, `0.5` → `500m`, `1.5Gi` → `1536Mi`), through the one
//! `Quantity` implementation in [`crate::quantity`]; a string that is not a quantity prints as
//! written.

use serde_json::Value;

use crate::quantity::Quantity;

/// The quantity at `value` (a JSON string, a number, or absent) as upstream prints it; absent
/// means zero, `0`.
pub(super) fn quantity_string(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => canonical(s.trim()),
        Some(Value::Number(n)) => canonical(&n.to_string()),
        _ => "0".to_owned(),
    }
}

fn canonical(s: &str) -> String {
    Quantity::parse(s).map_or_else(|_| s.to_owned(), |q| q.canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_as_upstream() {
        let cases = [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("8Gi", "8Gi"),
            ("512", "512"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("100m", "100m"),
            ("1e3", "1e3"),
            ("1000e3", "1e6"),
            ("10G", "10G"),
            ("10000M", "10G"),
            ("0", "0"),
            ("00", "0"),
            ("0Gi", "0"),
            ("100Ki", "100Ki"),
            ("0.5Ki", "512"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("1e-12", "1e-9"),
            ("0.0000000001", "1n"),
            ("-1Gi", "-1Gi"),
            ("-1024Mi", "-1Gi"),
            ("-1500m", "-1500m"),
            ("+1Gi", "+1Gi"),
            ("5", "5"),
            ("50", "50"),
            ("nonsense", "nonsense"),
        ];
        for (input, want) in cases {
            assert_eq!(quantity_string(Some(&Value::from(input))), want, "{input}");
        }
        assert_eq!(quantity_string(None), "0");
        assert_eq!(quantity_string(Some(&serde_json::json!(3))), "3");
    }
}
