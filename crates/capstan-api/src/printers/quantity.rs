//! Resource quantities printed as upstream's `resource.Quantity.String()`: the canonical form
//! (`1024Mi` → `1Gi`, `1000m` → `1`, `0.5` → `500m`, `1.5Gi` → `1536Mi`), except that a value
//! already written in a form upstream considers canonical is kept exactly as written, as upstream
//! keeps the string it parsed. Values are exact to the nano unit and rounded up below it.

use serde_json::Value;

/// How a quantity is written: decimal SI suffixes, binary SI suffixes, or `e` exponents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// The quantity at `value` (a JSON string, a number, or absent) as upstream prints it; absent
/// means zero, `0`.
pub(super) fn quantity_string(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => canonical(s.trim()),
        Some(Value::Number(n)) => canonical(&n.to_string()),
        _ => "0".to_owned(),
    }
}

/// The parts of a quantity string, as upstream's scanner splits them.
struct Scanned<'a> {
    positive: bool,
    /// The integer digits, leading zeros removed (`"0"` when none are left).
    num: &'a str,
    /// The fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

fn scan(s: &str) -> Option<Scanned<'_>> {
    let bytes = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match bytes.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < bytes.len() && bytes[pos] == b'0' {
        pos += 1;
    }
    if pos == bytes.len() {
        return Some(Scanned {
            positive,
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let start = pos;
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    let mut denom = "";
    if pos < bytes.len() && bytes[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
    }
    let suffix_start = pos;
    while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos != bytes.len() {
        return None;
    }
    Some(Scanned {
        positive,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// The base, exponent and format a suffix stands for.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let decimal = |e| Some((10, e, Format::DecimalSi));
    let binary = |e| Some((2, e, Format::BinarySi));
    match suffix {
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            let exponent: i64 = suffix[1..].parse().ok()?;
            Some((10, i32::try_from(exponent).ok()?, Format::DecimalExponent))
        }
        _ => None,
    }
}

const NANOS: i128 = 1_000_000_000;

fn pow10(exp: u32) -> Option<i128> {
    10_i128.checked_pow(exp)
}

/// `value × 10^shift`, rounding away from zero when `shift` is negative.
fn shift10(value: i128, shift: i32) -> Option<i128> {
    if shift >= 0 {
        value.checked_mul(pow10(shift.unsigned_abs())?)
    } else {
        let Some(divisor) = pow10(shift.unsigned_abs()) else {
            return Some(i128::from(value != 0));
        };
        let quotient = value / divisor;
        Some(if value % divisor == 0 {
            quotient
        } else {
            quotient + 1
        })
    }
}

/// The canonical string of `s`, or `s` itself when upstream would keep it or could not parse it.
fn canonical(s: &str) -> String {
    if s == "0" {
        return "0".to_owned();
    }
    match parse(s) {
        Some(Parsed::Keep) => s.to_owned(),
        Some(Parsed::Value { nanos, format }) => {
            render(nanos, format).unwrap_or_else(|| s.to_owned())
        }
        None => s.to_owned(),
    }
}

enum Parsed {
    /// Upstream keeps the text as written.
    Keep,
    /// The value in nano units and how it should be written.
    Value { nanos: i128, format: Format },
}

fn parse(s: &str) -> Option<Parsed> {
    let scanned = scan(s)?;
    let (base, exponent, mut format) = interpret(scanned.suffix)?;
    let digits = format!("{}{}", scanned.num, scanned.denom);
    let denom_len = i32::try_from(scanned.denom.len()).ok()?;
    let digits_len = i32::try_from(digits.len()).ok()?;

    // Upstream's fast path: small enough to hold exactly in an int64 with a decimal scale.
    let (precision, mut scale, multiplier) = match format {
        Format::DecimalSi | Format::DecimalExponent => (18 - digits_len, exponent, 1_i64),
        Format::BinarySi if exponent >= 0 && scanned.denom.is_empty() => {
            let num_len = i32::try_from(scanned.num.len()).ok()?;
            (15 - num_len - exponent * 3 / 10 - 1, 0, 1_i64 << exponent)
        }
        Format::BinarySi => (-1, 0, 1),
    };
    if precision >= 0 {
        scale -= denom_len;
        if scale >= -9 {
            let value: i64 = digits.parse().ok()?;
            if let Some(result) = value.checked_mul(multiplier) {
                let keep = match format {
                    Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !digits.ends_with("000") && !digits.starts_with('0'),
                };
                if keep {
                    return Some(Parsed::Keep);
                }
                let signed = if scanned.positive { result } else { -result };
                let nanos = shift10(i128::from(signed), scale + 9)?;
                return Some(Parsed::Value { nanos, format });
            }
        }
    }

    // The general path: exact decimal arithmetic, rounded up to a whole nano unit.
    let unscaled: i128 = digits.parse().ok()?;
    let mut nanos = if base == 10 {
        shift10(unscaled, exponent - denom_len + 9)?
    } else {
        let power = 1_i128.checked_shl(u32::try_from(exponent).ok()?)?;
        shift10(unscaled.checked_mul(power)?, 9 - denom_len)?
    };
    if format == Format::BinarySi {
        nanos = nanos.min(i128::from(i64::MAX) * NANOS);
        if nanos > 0 && nanos < NANOS {
            format = Format::DecimalSi;
        }
    }
    let nanos = if scanned.positive { nanos } else { -nanos };
    Some(Parsed::Value { nanos, format })
}

/// Upstream's `CanonicalizeBytes` for a value in nano units.
fn render(nanos: i128, format: Format) -> Option<String> {
    if nanos == 0 {
        return Some("0".to_owned());
    }
    if format == Format::BinarySi && nanos.abs() >= 1024 * NANOS && nanos % NANOS == 0 {
        let mut value = nanos / NANOS;
        let mut exponent = 0;
        while value.abs() >= 1024 && value % 1024 == 0 {
            value /= 1024;
            exponent += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
            .get(exponent)
            .copied()
            .unwrap_or("");
        return Some(format!("{value}{suffix}"));
    }
    let format = if format == Format::BinarySi {
        Format::DecimalSi
    } else {
        format
    };
    let mut mantissa = nanos;
    let mut exponent: i32 = -9;
    while mantissa.abs() >= 10 && mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    let down = exponent.rem_euclid(3);
    mantissa = mantissa.checked_mul(pow10(down.unsigned_abs())?)?;
    exponent -= down;
    let suffix = match format {
        Format::DecimalExponent if exponent == 0 => String::new(),
        Format::DecimalExponent => format!("e{exponent}"),
        _ => match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        }
        .to_owned(),
    };
    Some(format!("{mantissa}{suffix}"))
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
