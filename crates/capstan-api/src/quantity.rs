//! Resource quantities (`500m`, `1.5Gi`, `2e3`) as upstream's `resource.Quantity` reads, compares
//! and prints them. Values are exact decimals of any size; parsing follows upstream's grammar and
//! rounding (values finer than `1n` round up, binary values are capped at 2^63-1), and
//! [`Quantity::canonical`] prints what upstream serialises, including its habit of echoing an
//! input that is already canonical.

use std::cmp::Ordering;
use std::fmt;

/// How a quantity prints its suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `e3`-style exponents.
    DecimalExponent,
    /// Binary suffixes `Ki`..`Ei`.
    BinarySI,
    /// Decimal suffixes `n`..`E`.
    DecimalSI,
}

/// Why a string is not a quantity, with upstream's messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// The string does not have the shape of a quantity.
    FormatWrong,
    /// The number cannot be read.
    Numeric,
    /// The suffix is unknown.
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::FormatWrong => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse quantity's numeric part",
            QuantityError::Suffix => "unable to parse quantity's suffix",
        })
    }
}

impl std::error::Error for QuantityError {}

/// An exact decimal: `(-1)^negative * digits * 10^exponent`, with `digits` free of leading and
/// trailing zeros (empty for zero).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    fn zero() -> Self {
        Decimal {
            negative: false,
            digits: Vec::new(),
            exponent: 0,
        }
    }

    fn from_parts(negative: bool, mut digits: Vec<u8>, mut exponent: i64) -> Self {
        let leading = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        if digits.is_empty() {
            return Decimal::zero();
        }
        Decimal {
            negative,
            digits,
            exponent,
        }
    }

    fn from_i128(value: i128) -> Self {
        let digits = value
            .unsigned_abs()
            .to_string()
            .bytes()
            .map(|b| b - b'0')
            .collect();
        Decimal::from_parts(value < 0, digits, 0)
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The position of the most significant digit: value is in [10^(m-1), 10^m).
    fn magnitude(&self) -> i64 {
        self.exponent + self.digits.len() as i64
    }

    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        match self.magnitude().cmp(&other.magnitude()) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        let len = self.digits.len().max(other.digits.len());
        for i in 0..len {
            let a = self.digits.get(i).copied().unwrap_or(0);
            let b = other.digits.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        Ordering::Equal
    }

    fn multiply_small(&self, factor: u32) -> Decimal {
        let mut out = Vec::with_capacity(self.digits.len() + 10);
        let mut carry: u64 = 0;
        for &d in self.digits.iter().rev() {
            let v = u64::from(d) * u64::from(factor) + carry;
            out.push((v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            out.push((carry % 10) as u8);
            carry /= 10;
        }
        out.reverse();
        Decimal::from_parts(self.negative, out, self.exponent)
    }

    /// Rounds away from zero to a multiple of 10^scale; returns whether it was exact.
    fn round_up_to(&mut self, scale: i64) -> bool {
        if self.is_zero() || self.exponent >= scale {
            return true;
        }
        let keep = self.magnitude() - scale;
        if keep <= 0 {
            *self = Decimal {
                negative: self.negative,
                digits: vec![1],
                exponent: scale,
            };
            return false;
        }
        let keep = usize::try_from(keep)
            .unwrap_or(usize::MAX)
            .min(self.digits.len());
        let dropped_nonzero = self.digits[keep..].iter().any(|&d| d != 0);
        let mut kept = self.digits[..keep].to_vec();
        if dropped_nonzero {
            // Add one unit in the last kept place.
            let mut i = kept.len();
            loop {
                if i == 0 {
                    kept.insert(0, 1);
                    break;
                }
                i -= 1;
                if kept[i] == 9 {
                    kept[i] = 0;
                } else {
                    kept[i] += 1;
                    break;
                }
            }
        }
        *self = Decimal::from_parts(self.negative, kept, scale);
        !dropped_nonzero
    }

    fn add(&self, other: &Decimal) -> Decimal {
        if self.is_zero() {
            return other.clone();
        }
        if other.is_zero() {
            return self.clone();
        }
        let exponent = self.exponent.min(other.exponent);
        let widen = |d: &Decimal| -> Vec<u8> {
            let mut v = d.digits.clone();
            let pad = usize::try_from(d.exponent - exponent).unwrap_or(0);
            v.extend(std::iter::repeat_n(0, pad));
            v
        };
        let (a, b) = (widen(self), widen(other));
        if self.negative == other.negative {
            let mut out = Vec::new();
            let mut carry = 0u8;
            let (mut ia, mut ib) = (a.len(), b.len());
            while ia > 0 || ib > 0 || carry > 0 {
                let mut s = carry;
                if ia > 0 {
                    ia -= 1;
                    s += a[ia];
                }
                if ib > 0 {
                    ib -= 1;
                    s += b[ib];
                }
                out.push(s % 10);
                carry = s / 10;
            }
            out.reverse();
            return Decimal::from_parts(self.negative, out, exponent);
        }
        // Different signs: subtract the smaller magnitude from the larger.
        let (big, small, negative) = match self.cmp_abs(other) {
            Ordering::Equal => return Decimal::zero(),
            Ordering::Greater => (a, b, self.negative),
            Ordering::Less => (b, a, other.negative),
        };
        let mut out = Vec::new();
        let mut borrow = 0i8;
        let mut is = small.len();
        for ib in (0..big.len()).rev() {
            let mut d = big[ib] as i8 - borrow;
            if is > 0 {
                is -= 1;
                d -= small[is] as i8;
            }
            if d < 0 {
                d += 10;
                borrow = 1;
            } else {
                borrow = 0;
            }
            out.push(d as u8);
        }
        out.reverse();
        Decimal::from_parts(negative, out, exponent)
    }

    /// The integer value, rounded away from zero, if it fits in i128.
    fn to_i128_round_up(&self) -> Option<i128> {
        let mut rounded = self.clone();
        rounded.round_up_to(0);
        let mut value: i128 = 0;
        for &d in &rounded.digits {
            value = value.checked_mul(10)?.checked_add(i128::from(d))?;
        }
        for _ in 0..rounded.exponent {
            value = value.checked_mul(10)?;
        }
        Some(if rounded.negative { -value } else { value })
    }

    fn digits_string(&self, extra_zeros: usize) -> String {
        let mut s: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        s.extend(std::iter::repeat_n('0', extra_zeros));
        s
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |d: &Decimal| {
            if d.is_zero() {
                0
            } else if d.negative {
                -1
            } else {
                1
            }
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal if sign(self) < 0 => other.cmp_abs(self),
            Ordering::Equal => self.cmp_abs(other),
            unequal => unequal,
        }
    }
}

/// A parsed quantity.
#[derive(Clone, Debug)]
pub struct Quantity {
    value: Decimal,
    format: Format,
    /// The input, kept when upstream would echo it back unchanged.
    cached: Option<String>,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value.cmp(&other.value)
    }
}

struct Pieces<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Splits a quantity string the way upstream's hand-written scanner does.
fn scan(s: &str) -> Result<Pieces<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(&first) = b.first() {
        if first == b'-' {
            positive = false;
            pos += 1;
        } else if first == b'+' {
            pos += 1;
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Pieces {
            positive,
            value: s,
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Ok(Pieces {
            positive,
            value: s,
            num: &s[num_start..],
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == num_start {
        "0"
    } else {
        &s[num_start..pos]
    };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[denom_start..pos];
        if pos >= end {
            return Ok(Pieces {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Pieces {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// (base, exponent, format) of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i64, Format)> {
    let decimal = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = decimal {
        return Some((10, e, Format::DecimalSI));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = binary {
        return Some((2, e, Format::BinarySI));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    let parsed: i64 = rest.parse().ok()?;
    // Upstream truncates the exponent to 32 bits.
    Some((10, i64::from(parsed as i32), Format::DecimalExponent))
}

fn parse_digits(s: &str) -> Vec<u8> {
    s.bytes().map(|b| b - b'0').collect()
}

const MAX_INT64_FACTORS: i64 = 18;

impl Quantity {
    /// Parses a quantity as upstream's `ParseQuantity` does.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        if s == "0" {
            return Ok(Quantity {
                value: Decimal::zero(),
                format: Format::DecimalSI,
                cached: Some("0".into()),
            });
        }
        let p = scan(s)?;
        let (base, exponent, format) = interpret(p.suffix).ok_or(QuantityError::Suffix)?;
        let digit_count = (p.num.len() + p.denom.len()) as i64;

        // Upstream's fast path (an int64 with a scale) decides whether the input string is kept.
        let (mut scale, precision, mantissa): (i64, i64, i128) = match format {
            Format::DecimalExponent | Format::DecimalSI => {
                (exponent, MAX_INT64_FACTORS - digit_count, 1)
            }
            Format::BinarySI if p.denom.is_empty() => (
                0,
                15 - p.num.len() as i64 - ((exponent as f32) * 3.0 / 10.0) as i64 - 1,
                1i128 << exponent,
            ),
            Format::BinarySI => (0, -1, 1),
        };
        if precision >= 0 {
            scale -= p.denom.len() as i64;
            if scale >= -9 {
                let shifted = format!("{}{}", p.num, p.denom);
                let int: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
                let product = i128::from(int) * mantissa;
                if i64::try_from(product).is_ok() {
                    let signed = if p.positive { product } else { -product };
                    let mut value = Decimal::from_i128(signed);
                    value.exponent += scale;
                    if value.is_zero() {
                        value = Decimal::zero();
                    }
                    let keep = match format {
                        Format::BinarySI => exponent % 10 == 0 && (int & 0x07) != 0,
                        _ => {
                            scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
                        }
                    };
                    return Ok(Quantity {
                        value,
                        format,
                        cached: keep.then(|| s.to_owned()),
                    });
                }
            }
        }

        // The general path: an exact decimal of the value part.
        let unsigned = p.value.trim_start_matches(['+', '-']);
        if unsigned.is_empty()
            || unsigned == "."
            || p.value.len() - unsigned.len() > 1
            || !unsigned.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            || unsigned.bytes().filter(|&b| b == b'.').count() > 1
        {
            return Err(QuantityError::Numeric);
        }
        let (int_part, frac_part) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let mut digits = parse_digits(int_part);
        digits.extend(parse_digits(frac_part));
        let mut amount = Decimal::from_parts(false, digits, -(frac_part.len() as i64));
        if base == 10 {
            if !amount.is_zero() {
                amount.exponent += exponent;
            }
        } else {
            for _ in 0..(exponent / 10) {
                amount = amount.multiply_small(1024);
            }
        }
        // Round anything finer than a nano-unit up, so that a tiny request is never zero.
        amount.round_up_to(-9);
        let mut format = format;
        if format == Format::BinarySI {
            let max = Decimal::from_i128(i128::from(i64::MAX));
            if amount > max {
                amount = max;
            }
            if !amount.is_zero() && amount.cmp_abs(&Decimal::from_i128(1)) == Ordering::Less {
                format = Format::DecimalSI;
            }
        }
        amount.negative = !p.positive && !amount.is_zero();
        Ok(Quantity {
            value: amount,
            format,
            cached: None,
        })
    }

    /// `value × 10^exponent`, printed in `format`: Go's `resource.NewScaledQuantity` with its
    /// format set (the Metrics API's CPU in nanocores, `DecimalSI`; memory in bytes, `BinarySI`).
    pub fn scaled(value: i128, exponent: i64, format: Format) -> Quantity {
        let digits = value
            .unsigned_abs()
            .to_string()
            .bytes()
            .map(|b| b - b'0')
            .collect();
        Quantity {
            value: Decimal::from_parts(value < 0, digits, exponent),
            format,
            cached: None,
        }
    }

    /// A quantity of `value` units in decimal format.
    pub fn from_i64(value: i64) -> Quantity {
        Quantity {
            value: Decimal::from_i128(i128::from(value)),
            format: Format::DecimalSI,
            cached: None,
        }
    }

    /// The format this quantity prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.value.is_zero()
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.value.negative
    }

    /// The integer value rounded away from zero (upstream's `Value()`), saturating at the i64
    /// range.
    pub fn value(&self) -> i64 {
        self.scaled_value(0)
    }

    /// The value in thousandths rounded away from zero (upstream's `MilliValue()`), saturating.
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(-3)
    }

    fn scaled_value(&self, scale: i64) -> i64 {
        let mut shifted = self.value.clone();
        if !shifted.is_zero() {
            shifted.exponent -= scale;
        }
        match shifted.to_i128_round_up() {
            Some(v) => i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX }),
            None => {
                if self.value.negative {
                    i64::MIN
                } else {
                    i64::MAX
                }
            }
        }
    }

    /// Rounds the value up (away from zero) to a multiple of 10^scale, as upstream's
    /// `RoundUp`; returns whether the value was already exact. A rounded quantity prints
    /// canonically.
    pub fn round_up(&mut self, scale: i32) -> bool {
        let exact = if self.value.exponent >= i64::from(scale) {
            true
        } else {
            self.value.round_up_to(i64::from(scale))
        };
        if !exact {
            self.cached = None;
        }
        exact
    }

    /// The sum of two quantities, printed in this one's format (in `other`'s when this one is
    /// zero, as upstream's `Add`).
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            value: self.value.add(&other.value),
            format: if self.is_zero() {
                other.format
            } else {
                self.format
            },
            cached: None,
        }
    }

    /// The difference `self - other`, printed in this one's format (in `other`'s when this one
    /// is zero, as upstream's `Sub`).
    pub fn sub(&self, other: &Quantity) -> Quantity {
        let mut negated = other.value.clone();
        if !negated.is_zero() {
            negated.negative = !negated.negative;
        }
        Quantity {
            value: self.value.add(&negated),
            format: if self.is_zero() {
                other.format
            } else {
                self.format
            },
            cached: None,
        }
    }

    /// The string upstream serialises for this quantity.
    pub fn canonical(&self) -> String {
        if let Some(cached) = &self.cached {
            return cached.clone();
        }
        if self.value.is_zero() {
            return "0".to_owned();
        }
        let sign = if self.value.negative { "-" } else { "" };
        let mut format = self.format;
        if format == Format::BinarySI {
            let limit = Decimal::from_i128(1024);
            if self.value.cmp_abs(&limit) == Ordering::Less || self.value.exponent < 0 {
                format = Format::DecimalSI;
            }
        }
        match format {
            Format::BinarySI => {
                // An integer: divide by 1024 while it divides evenly.
                let mut n = self.value.to_i128_round_up().unwrap_or(0).unsigned_abs();
                let mut power = 0;
                while n.is_multiple_of(1024) && power < 6 && n != 0 {
                    n /= 1024;
                    power += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
                format!("{sign}{n}{suffix}")
            }
            Format::DecimalSI | Format::DecimalExponent => {
                let mut exponent = self.value.exponent;
                let mut zeros = 0;
                while exponent % 3 != 0 {
                    zeros += 1;
                    exponent -= 1;
                }
                let number = self.value.digits_string(zeros);
                let suffix = if format == Format::DecimalExponent {
                    if exponent == 0 {
                        String::new()
                    } else {
                        format!("e{exponent}")
                    }
                } else {
                    // Upstream prints no suffix for exponents outside n..E.
                    match exponent {
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
                    .to_owned()
                };
                format!("{sign}{number}{suffix}")
            }
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, canonical: &str) {
        let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(q.canonical(), canonical, "input {input}");
    }

    #[test]
    fn parses_and_prints_as_upstream() {
        for (input, canonical) in [
            ("0", "0"),
            ("00", "0"),
            ("-0", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("0.1m", "100u"),
            ("100m", "100m"),
            ("2000m", "2"),
            ("1k", "1k"),
            ("1000", "1k"),
            ("1024", "1024"),
            ("1Ki", "1Ki"),
            ("8Ki", "8Ki"),
            ("1024Ki", "1Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("1E3", "1E3"),
            ("1n", "1n"),
            ("1.1n", "2n"),
            ("0.0000000001", "1n"),
            ("-1.5", "-1500m"),
            ("+1", "+1"),
            ("01", "01"),
            ("1.", "1."),
            ("12345678901234567890", "12345678901234567890"),
            ("100Ei", "9223372036854775807"),
        ] {
            check(input, canonical);
        }
    }

    #[test]
    fn rejects_malformed_input() {
        for (input, err) in [
            ("", QuantityError::FormatWrong),
            ("1x", QuantityError::FormatWrong),
            ("a", QuantityError::FormatWrong),
            ("1 ", QuantityError::FormatWrong),
            ("1Kb", QuantityError::FormatWrong),
            ("1mi", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1KM", QuantityError::Suffix),
        ] {
            assert_eq!(Quantity::parse(input).err(), Some(err), "{input}");
        }
        assert_eq!(
            QuantityError::FormatWrong.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn compares_by_value() {
        let q = |s: &str| Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert!(q("500m") < q("1"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("-1") < q("0"));
        assert!(q("-2") < q("-1"));
        assert!(q("1e30") > q("1E"));
        assert_eq!(q("0.0001u"), q("1n"));
    }

    #[test]
    fn values_round_away_from_zero() {
        let q = |s: &str| Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(q("1500m").value(), 2);
        assert_eq!(q("-1500m").value(), -2);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1n").milli_value(), 1);
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("1e30").value(), i64::MAX);
    }

    #[test]
    fn round_up_to_milli_and_add() {
        let mut q = Quantity::parse("1n").unwrap_or_else(|e| panic!("{e}"));
        assert!(!q.round_up(-3));
        assert_eq!(q.canonical(), "1m");
        let mut exact = Quantity::parse("100m").unwrap_or_else(|e| panic!("{e}"));
        assert!(exact.round_up(-3));
        assert_eq!(exact.canonical(), "100m");
        let a = Quantity::parse("1Gi").unwrap_or_else(|e| panic!("{e}"));
        let b = Quantity::parse("512Mi").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.add(&b).canonical(), "1536Mi");
        let c = Quantity::parse("-2").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Quantity::from_i64(1).add(&c).canonical(), "-1");
    }

    #[test]
    fn sums_and_differences_take_the_format_of_a_zero_start_from_the_other() {
        let q = |s: &str| Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"));
        // A zero takes the other's format, as upstream's Add and Sub.
        assert_eq!(Quantity::from_i64(0).add(&q("1Gi")).canonical(), "1Gi");
        assert_eq!(q("0").sub(&q("1Gi")).canonical(), "-1Gi");
        // Otherwise the receiver's format stays.
        assert_eq!(q("2Gi").sub(&q("512Mi")).canonical(), "1536Mi");
        assert_eq!(q("1").sub(&q("250m")).canonical(), "750m");
        assert_eq!(q("1").sub(&q("1")).canonical(), "0");
        assert!(q("1").sub(&q("2")).is_negative());
        assert_eq!(q("500m").add(&q("500m")).canonical(), "1");
    }
}
