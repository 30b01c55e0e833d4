//! Label and field selectors, as list and watch requests carry them (`?labelSelector=`,
//! `?fieldSelector=`) and as API objects embed them (`metav1.LabelSelector`): parsing with
//! upstream's grammar and error messages, matching, and upstream's canonical string form.
//!
//! - [`LabelSelector`] follows `k8s.io/apimachinery/pkg/labels`: `a=b`, `a!=b`, `a in (x,y)`,
//!   `a notin (x)`, `a`, `!a`, `a>5`, `a<5`; keys and values are validated as label keys and
//!   values.
//! - [`FieldSelector`] follows `k8s.io/apimachinery/pkg/fields`: `a=b`, `a==b`, `a!=b`, with
//!   `\,`, `\=` and `\\` escapes in values; which fields a resource supports is the registry's
//!   business ([`FieldSelector::check_supported_fields`]).
//!
//! A [`SelectorError`] prints exactly the text kube-apiserver puts in the message of the 400
//! `BadRequest` it answers a bad selector with ([`SelectorError::to_status`]).

mod fields;
mod labels;

pub use fields::{
    FieldOperator, FieldRequirement, FieldSelector, escape_field_value, unescape_field_value,
};
pub use labels::{LabelOperator, LabelRequirement, LabelSelector};

use crate::StatusError;
use crate::field::{FieldError, aggregate, go_quote};

/// Why a selector could not be parsed, built or used. `Display` gives upstream's message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector does not follow the grammar; the text is upstream's parser message,
    /// e.g. `found 'c', expected: ',' or 'end of string'`.
    #[error("{0}")]
    Syntax(String),
    /// One requirement of a label selector could not be parsed; upstream prefixes the cause
    /// with `unable to parse requirement: `.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<SelectorError>),
    /// A label requirement is invalid (bad key, bad value, wrong number of values); one field
    /// error per problem, printed as upstream aggregates them.
    #[error("{}", aggregate(.0))]
    Invalid(Vec<FieldError>),
    /// A `metav1.LabelSelector` expression uses an operator other than `In`, `NotIn`, `Exists`
    /// or `DoesNotExist`.
    #[error("{} is not a valid label selector operator", go_quote(.0))]
    UnknownOperator(String),
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldSyntax {
        /// The whole selector as given.
        selector: String,
        /// The term that could not be split.
        term: String,
    },
    /// A field selector value has a backslash not followed by `\`, `,` or `=` (the text is the
    /// offending sequence, e.g. `\a`, or a lone `\` at the end).
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// A field selector value has an unescaped `,` or `=` (upstream prints the character's
    /// code point in decimal).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// A field selector names a field the resource does not support (the resource registered
    /// its own list of selectable fields).
    #[error("field label not supported: {0}")]
    FieldLabelNotSupported(String),
    /// A field selector names a field other than `metadata.name` and `metadata.namespace`, on
    /// a resource that registered no selectable fields of its own.
    #[error(
        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
        go_quote(.0)
    )]
    UnknownField(String),
}

impl SelectorError {
    /// The message kube-apiserver puts in the `Status` of its 400 answer. It is the bare parser
    /// or conversion error: the `Unable to find "pods" that match label selector ...` prefix that
    /// `kubectl` shows is added on the client side.
    pub fn status_message(&self) -> String {
        self.to_string()
    }

    /// The 400 `BadRequest` kube-apiserver answers a request carrying this selector with.
    pub fn to_status(&self) -> StatusError {
        StatusError::bad_request(&self.status_message())
    }
}

impl From<SelectorError> for StatusError {
    fn from(error: SelectorError) -> Self {
        error.to_status()
    }
}

/// What the field and label selector tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;
    use std::fmt::Display;

    use super::SelectorError;

    /// Asserts that `parsed`, the parse of `input`, is `expected`: `Ok` the canonical form,
    /// `Err` the message the API server sends.
    pub(crate) fn check_parsed<S: Display>(
        parsed: Result<S, SelectorError>,
        input: &str,
        expected: Result<&str, &str>,
    ) {
        let got = parsed
            .map(|s| s.to_string())
            .map_err(|e| e.status_message());
        let expected = expected.map(str::to_owned).map_err(str::to_owned);
        assert_eq!(got, expected, "parsing {input:?}");
    }

    /// A map of the `(key, value)` pairs.
    pub(crate) fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }
}
