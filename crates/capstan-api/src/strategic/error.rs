//! Why a strategic merge patch failed, worded as upstream words it, and the `Status` that
//! kube-apiserver answers for each failure.
//!
//! Upstream sorts the failures three ways (`interpretStrategicMergePatchError` in the PATCH
//! handler): malformed directives are 400 `BadRequest` with the failure as the message; a list
//! of lists is 422 `Invalid` with the generic message "the server rejected our request due to an
//! error in our request" and empty details; every other failure (a merge-list item without its
//! merge key, an unknown `$patch`, a `$setElementOrder` list that disagrees with the patch, ...)
//! is not an API status at all, so the server answers 500 with no reason and the failure's text
//! as the message, which kubectl prints as `Error from server: <message>`.

use serde_json::Value;

use crate::StatusError;
use crate::field::go_quote;

/// A strategic merge patch that cannot be applied.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StrategicPatchError {
    /// The object to patch is not a JSON object.
    #[error("invalid JSON document")]
    BadJsonDocument,
    /// The patch is not a JSON object (`found` is the JSON kind it is, as Go's decoder names it).
    #[error("json: cannot unmarshal {found} into Go value of type map[string]interface {{}}")]
    PatchNotAnObject {
        /// `array`, `string`, `number` or `bool`.
        found: &'static str,
    },
    /// The patch or the object nests deeper than Capstan walks.
    #[error("the patch or the object nests more than {limit} levels deep")]
    TooDeep {
        /// The deepest nesting accepted.
        limit: usize,
    },
    /// A `$deleteFromPrimitiveList` key is not `$deleteFromPrimitiveList/<field>`.
    #[error("invalid patch format of primitive list")]
    BadPrimitiveListFormat,
    /// `$retainKeys` is not a list, or the patch sets a field the list does not name.
    #[error("invalid patch format of retainKeys")]
    BadRetainKeysFormat,
    /// A `$setElementOrder` key is not `$setElementOrder/<field>`.
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrderFormat,
    /// A merged list holds lists.
    #[error("lists of lists are not supported")]
    ListOfLists,
    /// An item of a merged list lacks the list's merge key (`map` is the item as Go prints it).
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey {
        /// The item, printed as Go's `%v` prints a map.
        map: String,
        /// The merge key.
        key: String,
    },
    /// A `$patch` directive has a value other than `replace` or `delete` (or `merge` in a map).
    #[error("unknown patch type: {directive} in map: {map}")]
    UnknownPatchType {
        /// The directive's value, printed as Go's `%s` prints it.
        directive: String,
        /// The map holding it, printed as Go's `%v` prints it.
        map: String,
    },
    /// A merged list holds `{"$patch": "merge"}`, which upstream never implemented.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    /// A value has the wrong JSON type (named as Go names the decoded types).
    #[error("expected a {expected}, but received a {actual}")]
    WrongType {
        /// The Go type wanted, e.g. `[]interface {}`.
        expected: &'static str,
        /// The Go type found, e.g. `string`.
        actual: &'static str,
    },
    /// The items of a merged list (original and patch together) are not all of one type.
    #[error("list element types are not identical: {lists}")]
    MixedListItems {
        /// The original and patch lists, printed as Go's `%v` prints them.
        lists: String,
    },
    /// A merged list begins with `null`, which upstream cannot type (it panics there).
    #[error("list element types are not identical: {lists} (the first item is null)")]
    NullListItem {
        /// The original and patch lists, printed as Go's `%v` prints them.
        lists: String,
    },
    /// A `$setElementOrder` list applies to a list that is empty in both object and patch.
    #[error("no elements in any of the given slices")]
    NoListItems,
    /// A list of objects is merged (a `$deleteFromPrimitiveList` of objects, say) but the field
    /// declares no merge key.
    #[error("cannot merge lists without merge key for {kind}")]
    MergeKeyUndeclared {
        /// The Go kind of the items (`struct`).
        kind: &'static str,
    },
    /// A patch list's items are not in the order its `$setElementOrder` list gives.
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    OrderMismatch {
        /// The patch list, printed as Go's `%v` prints it.
        patch: String,
        /// The `$setElementOrder` list, printed likewise.
        order: String,
    },
    /// An item of an ordered list is not an object (`index` is its position).
    #[error("value for key {index} is not a map")]
    ItemNotAMap {
        /// The item's position in its list.
        index: usize,
    },
    /// A directive names a field the type does not have.
    #[error("unable to find api field in struct {type_name} for the json field {}", go_quote(.field))]
    UnknownField {
        /// The Go name of the type.
        type_name: String,
        /// The field named.
        field: String,
    },
    /// The patch walks into a field as an object, but the type there is not a struct.
    #[error("merging an object in json but data type is not struct, instead is: {kind}")]
    NotAStruct {
        /// The Go kind found (`map`, `slice`, ...).
        kind: &'static str,
    },
    /// A list directive names a field that is not a list.
    #[error("expected slice or array type, but got: struct")]
    NotAList,
    /// A list directive names a field that is a list of lists.
    #[error("unexpected slice of slice")]
    SliceOfSlice,
    /// A field's declared patch strategy is not one upstream knows how to combine.
    #[error("unexpected patch strategy: [{}]", .strategies.join(" "))]
    UnexpectedStrategy {
        /// The comma-separated strategies, split.
        strategies: Vec<String>,
    },
}

impl StrategicPatchError {
    /// The HTTP status kube-apiserver answers with for this failure.
    pub fn code(&self) -> u16 {
        match self {
            StrategicPatchError::BadJsonDocument
            | StrategicPatchError::PatchNotAnObject { .. }
            | StrategicPatchError::TooDeep { .. }
            | StrategicPatchError::BadPrimitiveListFormat
            | StrategicPatchError::BadRetainKeysFormat
            | StrategicPatchError::BadSetElementOrderFormat => 400,
            StrategicPatchError::ListOfLists => 422,
            _ => 500,
        }
    }

    /// The `Status` kube-apiserver answers with for this failure (see the module docs).
    pub fn to_status(&self) -> StatusError {
        match self.code() {
            400 => StatusError::bad_request(&self.to_string()),
            422 => StatusError::unprocessable_entity(),
            _ => StatusError::not_a_status(&self.to_string()),
        }
    }
}

/// Go's name for the type a JSON value decodes to (`map[string]interface {}`, `int64`, ...),
/// as `reflect.TypeOf(v)` prints with `%s`.
pub(crate) fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The JSON kind of a value, as Go's decoder names it in "cannot unmarshal" errors (the
/// JWT authenticator's claim errors say it too).
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's `%v` prints the decoded form: maps as `map[k:v ...]` with sorted keys,
/// lists as `[a b]`, `null` as `<nil>`, strings bare.
pub(crate) fn go_v(value: &Value) -> String {
    let mut out = String::new();
    write_go(&mut out, value, false);
    out
}

/// A value as Go's `%s` prints the decoded form: like [`go_v`], but scalars other than strings
/// print as `%!s(type=value)`.
pub(crate) fn go_s(value: &Value) -> String {
    let mut out = String::new();
    write_go(&mut out, value, true);
    out
}

fn write_go(out: &mut String, value: &Value, as_string: bool) {
    // The walker rejects documents nested deeper than its limit before printing any of them,
    // so this recursion is bounded.
    match value {
        Value::String(text) => out.push_str(text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                write_go(out, item, as_string);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
            out.push_str("map[");
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                write_go(out, item, as_string);
            }
            out.push(']');
        }
        scalar => {
            let text = go_scalar(scalar);
            if as_string {
                let type_name = match scalar {
                    Value::Null => {
                        out.push_str("%!s(<nil>)");
                        return;
                    }
                    other => go_type_name(other),
                };
                out.push_str(&format!("%!s({type_name}={text})"));
            } else {
                out.push_str(&text);
            }
        }
    }
}

fn go_scalar(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => match number.as_i64() {
            Some(int) => int.to_string(),
            None => go_float(number.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => text.clone(),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// A float64 as Go's `%v` prints it: the shortest digits that read back exactly, in exponent
/// form (`1e+06`, `1e-05`) when the decimal exponent is below -4 or at least 6.
pub(crate) fn go_float(value: f64) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "NaN".to_owned()
        } else if value > 0.0 {
            "+Inf".to_owned()
        } else {
            "-Inf".to_owned()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-5".
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
    // Plain form: place the decimal point `exponent + 1` digits in.
    let point = exponent + 1;
    let text = if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        format!("0.{zeros}{digits}")
    } else {
        let point = point as usize;
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_go_prints_decoded_json() {
        for (value, expected) in [
            (
                json!({"image": "nginx", "b": {"x": 1}, "a": [1, "two", null, true]}),
                "map[a:[1 two <nil> true] b:map[x:1] image:nginx]",
            ),
            (json!({}), "map[]"),
            (json!([]), "[]"),
            (
                json!({"$patch": "delete", "name": "a"}),
                "map[$patch:delete name:a]",
            ),
            (json!(1.5), "1.5"),
            (json!(100000.0), "100000"),
            (json!(1e6), "1e+06"),
            (json!(123456789.0), "1.23456789e+08"),
            (json!(0.0001), "0.0001"),
            (json!(0.00001), "1e-05"),
            (json!(-2.5e-7), "-2.5e-07"),
            (json!(1e21), "1e+21"),
            (json!(-3), "-3"),
        ] {
            assert_eq!(go_v(&value), expected, "{value}");
        }
        assert_eq!(go_s(&json!("merge")), "merge");
        assert_eq!(go_s(&json!(5)), "%!s(int64=5)");
        assert_eq!(go_s(&json!(null)), "%!s(<nil>)");
        assert_eq!(go_s(&json!(true)), "%!s(bool=true)");
        assert_eq!(go_type_name(&json!([])), "[]interface {}");
        assert_eq!(go_type_name(&json!(2.5)), "float64");
    }
}
