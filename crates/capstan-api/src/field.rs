//! Field-level validation errors, as upstream reports them: a path such as
//! `spec.containers[0].image`, a type with its machine-readable reason (`FieldValueRequired`) and
//! human text (`Required value`), the offending value printed as Go prints it, and a detail.
//! Validation collects every error it finds; [`crate::StatusError::invalid`] turns the list into
//! one 422 `Invalid` with a cause per error.

use std::fmt;

/// A path to a field: `metadata.name`, `spec.containers[0].image`, `metadata.labels[app]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A path starting at a top-level field.
    pub fn new(field: &str) -> Self {
        Path(field.to_owned())
    }

    /// The path of a child field.
    pub fn child(&self, field: &str) -> Self {
        if self.0.is_empty() {
            Path(field.to_owned())
        } else {
            Path(format!("{}.{field}", self.0))
        }
    }

    /// The path of a list item.
    pub fn index(&self, index: usize) -> Self {
        Path(format!("{}[{index}]", self.0))
    }

    /// The path of a map entry.
    pub fn key(&self, key: &str) -> Self {
        Path(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What kind of problem a field has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// A value that should exist was not found.
    NotFound,
    /// A required value is missing.
    Required,
    /// A value that must be unique is repeated.
    Duplicate,
    /// A value is malformed.
    Invalid,
    /// A value is not one of the allowed ones.
    NotSupported,
    /// A value is not allowed in this situation.
    Forbidden,
    /// A value is too long.
    TooLong,
    /// A list has too many items.
    TooMany,
    /// The server failed while validating.
    Internal,
    /// A value has the wrong type for the schema.
    TypeInvalid,
}

impl ErrorType {
    /// The machine-readable reason (a `StatusCause` reason).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human-readable text.
    pub fn text(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// The offending value, printed as upstream prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// No value is shown.
    Omitted,
    /// `null`.
    Null,
    /// A string, shown quoted.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// Anything else, already formatted.
    Other(String),
}

impl From<&str> for BadValue {
    fn from(value: &str) -> Self {
        BadValue::Str(value.to_owned())
    }
}

impl From<String> for BadValue {
    fn from(value: String) -> Self {
        BadValue::Str(value)
    }
}

impl From<i64> for BadValue {
    fn from(value: i64) -> Self {
        BadValue::Int(value)
    }
}

impl From<i32> for BadValue {
    fn from(value: i32) -> Self {
        BadValue::Int(i64::from(value))
    }
}

impl From<bool> for BadValue {
    fn from(value: bool) -> Self {
        BadValue::Bool(value)
    }
}

/// Whether Go's `strconv.IsPrint` holds for a character outside ASCII, as far as it can be told
/// without Unicode's category tables: control characters, separators other than the ASCII
/// space, the common format characters and private-use characters are not printable.
fn go_printable(c: char) -> bool {
    !(c.is_control()
        || matches!(
            c,
            '\u{a0}'
                | '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{1680}'
                | '\u{180e}'
                | '\u{2000}'..='\u{200f}'
                | '\u{2028}'..='\u{202f}'
                | '\u{205f}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{3000}'
                | '\u{e000}'..='\u{f8ff}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{f0000}'..='\u{10ffff}'
        ))
}

/// `text` quoted as Go's `strconv.Quote` (`%q`) quotes it: the short escapes where Go has
/// them, `\xNN` for other ASCII controls, `\uNNNN` / `\UNNNNNNNN` for what is not printable.
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_ascii() && (c < ' ' || c == '\u{7f}') => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_ascii() || go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// One field error.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub error_type: ErrorType,
    /// Where.
    pub field: String,
    /// The offending value.
    pub bad_value: BadValue,
    /// More explanation.
    pub detail: String,
}

impl FieldError {
    fn new(error_type: ErrorType, field: &Path, bad_value: BadValue, detail: String) -> Self {
        FieldError {
            error_type,
            field: field.to_string(),
            bad_value,
            detail,
        }
    }

    /// A required value is missing.
    pub fn required(field: &Path, detail: &str) -> Self {
        Self::new(
            ErrorType::Required,
            field,
            BadValue::Str(String::new()),
            detail.into(),
        )
    }

    /// A value is malformed.
    pub fn invalid(field: &Path, value: impl Into<BadValue>, detail: &str) -> Self {
        Self::new(ErrorType::Invalid, field, value.into(), detail.into())
    }

    /// A value is not one of `supported`.
    pub fn not_supported(field: &Path, value: impl Into<BadValue>, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, value.into(), detail)
    }

    /// A value has the wrong type for its schema (custom resources).
    pub fn type_invalid(field: &Path, value: impl Into<BadValue>, detail: &str) -> Self {
        Self::new(ErrorType::TypeInvalid, field, value.into(), detail.into())
    }

    /// A value that must be unique is repeated.
    pub fn duplicate(field: &Path, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::Duplicate, field, value.into(), String::new())
    }

    /// A value is not allowed here.
    pub fn forbidden(field: &Path, detail: &str) -> Self {
        Self::new(
            ErrorType::Forbidden,
            field,
            BadValue::Str(String::new()),
            detail.into(),
        )
    }

    /// A value is longer than `max_bytes`.
    pub fn too_long(field: &Path, max_bytes: usize) -> Self {
        Self::new(
            ErrorType::TooLong,
            field,
            BadValue::Omitted,
            format!("may not be more than {max_bytes} bytes"),
        )
    }

    /// A list has more than `max_items` items (`actual` of them).
    pub fn too_many(field: &Path, actual: usize, max_items: usize) -> Self {
        Self::new(
            ErrorType::TooMany,
            field,
            BadValue::Int(i64::try_from(actual).unwrap_or(i64::MAX)),
            format!("must have at most {max_items} items"),
        )
    }

    /// A value that should exist was not found.
    pub fn not_found(field: &Path, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::NotFound, field, value.into(), String::new())
    }

    /// The server failed while validating.
    pub fn internal(field: &Path, error: &str) -> Self {
        Self::new(ErrorType::Internal, field, BadValue::Null, error.into())
    }

    /// The message without the field, e.g. `Invalid value: "x": must be lower case`.
    pub fn body(&self) -> String {
        let mut body = match (self.error_type, &self.bad_value) {
            (
                ErrorType::Required
                | ErrorType::Forbidden
                | ErrorType::TooLong
                | ErrorType::Internal,
                _,
            )
            | (_, BadValue::Omitted) => self.error_type.text().to_owned(),
            (_, BadValue::Null) => format!("{}: null", self.error_type.text()),
            (_, BadValue::Str(s)) => format!("{}: {}", self.error_type.text(), go_quote(s)),
            (_, BadValue::Int(i)) => format!("{}: {i}", self.error_type.text()),
            (_, BadValue::Bool(b)) => format!("{}: {b}", self.error_type.text()),
            (_, BadValue::Other(s)) => format!("{}: {s}", self.error_type.text()),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Upstream's aggregate message: one error as it is, several (duplicates dropped) as
/// `[first, second]`.
pub fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_string();
        if !seen.contains(&message) {
            seen.push(message);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_as_upstream() {
        let containers = Path::new("spec").child("containers");
        assert_eq!(
            containers.index(0).child("image").to_string(),
            "spec.containers[0].image"
        );
        assert_eq!(
            Path::new("metadata").child("labels").key("app").to_string(),
            "metadata.labels[app]"
        );
        assert_eq!(Path::default().child("kind").to_string(), "kind");
    }

    #[test]
    fn errors_print_as_upstream() {
        let check = |error: FieldError, expected: &str| assert_eq!(error.to_string(), expected);
        let name = Path::new("metadata").child("name");
        check(
            FieldError::required(&name, ""),
            "metadata.name: Required value",
        );
        check(
            FieldError::required(&name, "name or generateName is required"),
            "metadata.name: Required value: name or generateName is required",
        );
        check(
            FieldError::invalid(
                &name,
                "Web_1",
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
            ),
            "metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
        );
        check(
            FieldError::invalid(
                &Path::new("spec").child("replicas"),
                -1i64,
                "must be greater than or equal to 0",
            ),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
        );
        check(
            FieldError::not_supported(
                &Path::new("spec").child("restartPolicy"),
                "Sometimes",
                &["Always", "OnFailure", "Never"],
            ),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        );
        check(
            FieldError::duplicate(
                &Path::new("spec").child("containers").index(1).child("name"),
                "web",
            ),
            "spec.containers[1].name: Duplicate value: \"web\"",
        );
        check(
            FieldError::forbidden(
                &Path::new("spec"),
                "pod updates may not change fields other than `spec.containers[*].image`",
            ),
            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`",
        );
        check(
            FieldError::too_long(&Path::new("data"), 1048576),
            "data: Too long: may not be more than 1048576 bytes",
        );
        check(
            FieldError::invalid(&name, "a\"b\n", "bad"),
            "metadata.name: Invalid value: \"a\\\"b\\n\": bad",
        );
        check(
            FieldError::invalid(&name, BadValue::Null, "bad"),
            "metadata.name: Invalid value: null: bad",
        );
    }

    #[test]
    fn aggregates_drop_duplicates_and_bracket_several() {
        let a = FieldError::required(&Path::new("a"), "");
        let b = FieldError::required(&Path::new("b"), "");
        assert_eq!(aggregate(&[]), "");
        assert_eq!(aggregate(std::slice::from_ref(&a)), "a: Required value");
        assert_eq!(aggregate(&[a.clone(), a.clone()]), "a: Required value");
        assert_eq!(aggregate(&[a, b]), "[a: Required value, b: Required value]");
    }
}
