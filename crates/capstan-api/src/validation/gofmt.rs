//! Go's `%#v` rendering of the few structured values upstream puts in field errors (label
//! selectors, int-or-string values, strategies), so that messages read exactly as upstream's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{BadValue, go_quote};
use crate::validation::meta::{go_string_map, go_string_slice};

/// Go prints non-nil pointers inside a struct as an address; no address is meaningful here, so
/// one fixed, Go-looking address stands in for it.
pub(crate) const POINTER_PLACEHOLDER: &str = "0xc000000000";

/// `%#v` of a `map[string]string` that may be nil.
pub(crate) fn go_opt_string_map(
    map: Option<&std::collections::BTreeMap<String, String>>,
) -> String {
    match map {
        None => "map[string]string(nil)".to_owned(),
        Some(map) => go_string_map(map),
    }
}

/// `%#v` of a `[]string` that may be nil.
pub(crate) fn go_opt_string_slice(values: Option<&[String]>) -> String {
    match values {
        None => "[]string(nil)".to_owned(),
        Some(values) => go_string_slice(values),
    }
}

/// Go's `%#v` of a slice of a named string type.
pub(crate) fn go_typed_slice(type_name: &str, values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| crate::field::go_quote(v)).collect();
    format!("[]{type_name}{{{}}}", quoted.join(", "))
}

/// `%#v` of a `metav1.LabelSelector`.
pub(crate) fn go_label_selector(selector: &LabelSelector) -> String {
    let expressions = match &selector.match_expressions {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        go_quote(&r.key),
                        go_quote(&r.operator),
                        go_opt_string_slice(r.values.as_deref())
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{}}}",
        go_opt_string_map(selector.match_labels.as_ref()),
        expressions
    )
}

/// A `*metav1.LabelSelector` as a bad value: `null` when absent.
pub(crate) fn selector_value(selector: Option<&LabelSelector>) -> BadValue {
    selector.map_or(BadValue::Null, |s| BadValue::Other(go_label_selector(s)))
}

/// `%#v` of an `intstr.IntOrString` (type 0 is an integer, 1 a string).
pub(crate) fn go_int_or_string(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(i) => format!("intstr.IntOrString{{Type:0, IntVal:{i}, StrVal:\"\"}}"),
        IntOrString::String(s) => {
            format!(
                "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
                go_quote(s)
            )
        }
    }
}

/// An `intstr.IntOrString` as a bad value.
pub(crate) fn int_or_string_value(value: &IntOrString) -> BadValue {
    BadValue::Other(go_int_or_string(value))
}

/// `%#v` of a pointer field inside a struct: `(*T)(nil)` or a placeholder address.
pub(crate) fn go_pointer<T>(type_name: &str, value: Option<&T>) -> String {
    match value {
        None => format!("(*{type_name})(nil)"),
        Some(_) => format!("(*{type_name})({POINTER_PLACEHOLDER})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use std::collections::BTreeMap;

    #[test]
    fn selectors_print_as_go() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: None,
        };
        assert_eq!(
            go_label_selector(&selector),
            "v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
        );
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "Exists".into(),
                values: None,
            }]),
        };
        assert_eq!(
            go_label_selector(&selector),
            "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"k\", Operator:\"Exists\", Values:[]string(nil)}}}"
        );
        assert_eq!(selector_value(None), BadValue::Null);
    }

    #[test]
    fn int_or_strings_print_as_go() {
        assert_eq!(
            go_int_or_string(&IntOrString::Int(-1)),
            "intstr.IntOrString{Type:0, IntVal:-1, StrVal:\"\"}"
        );
        assert_eq!(
            go_int_or_string(&IntOrString::String("5".into())),
            "intstr.IntOrString{Type:1, IntVal:0, StrVal:\"5\"}"
        );
        assert_eq!(go_pointer::<i32>("int32", None), "(*int32)(nil)");
    }
}
