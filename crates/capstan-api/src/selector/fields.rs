//! Field selectors: upstream's `fields.ParseSelector` (terms split on unescaped commas, sorted,
//! each `field=value`, `field==value` or `field!=value` with `\,` `\=` `\\` escapes in the
//! value), matching, canonical form, and the check of a selector against the fields a resource
//! supports.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::SelectorError;

/// How a field requirement compares (upstream's `selection.Equals` / `selection.NotEquals`;
/// `==` parses to `Equals`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// The field has the value (a missing field counts as the empty string).
    Equals,
    /// The field does not have the value.
    NotEquals,
}

impl FieldOperator {
    /// The operator as the canonical form prints it: `=` or `!=`.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        }
    }
}

/// One term of a field selector, with its value unescaped.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// The field, e.g. `metadata.name` or `spec.nodeName` (never escaped).
    pub field: String,
    /// The comparison.
    pub operator: FieldOperator,
    /// The value, unescaped.
    pub value: String,
}

impl FieldRequirement {
    /// Whether the fields, read through `lookup`, satisfy this term; a field `lookup` does not
    /// know reads as the empty string, as upstream's `Fields.Get` does.
    pub fn matches_with<S: AsRef<str>>(&self, lookup: impl Fn(&str) -> Option<S>) -> bool {
        let actual = lookup(&self.field);
        let equal = actual.as_ref().map_or("", AsRef::as_ref) == self.value;
        match self.operator {
            FieldOperator::Equals => equal,
            FieldOperator::NotEquals => !equal,
        }
    }
}

/// `field=value` or `field!=value`, the value escaped.
impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.field,
            self.operator.as_str(),
            escape_field_value(&self.value)
        )
    }
}

/// Escapes a literal value for use in a field selector: `\` becomes `\\`, `,` becomes `\,` and
/// `=` becomes `\=` (upstream's `EscapeValue`).
pub fn escape_field_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Undoes [`escape_field_value`] (upstream's `UnescapeValue`): `\\`, `\,` and `\=` are the only
/// escapes; any other backslash is [`SelectorError::InvalidEscape`], and a bare `,` or `=` is
/// [`SelectorError::UnescapedCharacter`].
pub fn unescape_field_value(value: &str) -> Result<String, SelectorError> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_owned());
    }
    let mut unescaped = String::with_capacity(value.len());
    let mut escaping = false;
    for c in value.chars() {
        if escaping {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidEscape(format!("\\{c}")));
            }
            unescaped.push(c);
            escaping = false;
            continue;
        }
        match c {
            '\\' => escaping = true,
            ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
            c => unescaped.push(c),
        }
    }
    if escaping {
        return Err(SelectorError::InvalidEscape("\\".to_owned()));
    }
    Ok(unescaped)
}

/// The selector's terms: split on commas not escaped by a backslash, escapes left in place.
/// The empty selector has no terms; otherwise empty terms are kept.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaping = false;
    for (i, c) in selector.char_indices() {
        if escaping {
            escaping = false;
        } else if c == '\\' {
            escaping = true;
        } else if c == ',' {
            terms.push(selector.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    terms.push(selector.get(start..).unwrap_or_default());
    terms
}

/// Splits a term at the first operator, trying `!=`, then `==`, then `=` at each position; the
/// value is returned still escaped.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    const OPERATORS: [(&str, FieldOperator); 3] = [
        ("!=", FieldOperator::NotEquals),
        ("==", FieldOperator::Equals),
        ("=", FieldOperator::Equals),
    ];
    for (i, _) in term.char_indices() {
        let (field, rest) = term.split_at(i);
        for (text, operator) in OPERATORS {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((field, operator, value));
            }
        }
    }
    None
}

/// A field selector: terms that must all hold. Parsed terms are kept in the order upstream keeps
/// them (sorted by their text as written), which is also the order of the canonical form.
///
/// The default is [`FieldSelector::everything`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches every object (no terms); it is empty.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// The selector `field=value` (upstream's `OneTermEqualSelector`), e.g. the
    /// `metadata.name` selector of a list or watch of one named object.
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> Self {
        FieldSelector {
            requirements: vec![FieldRequirement {
                field: field.into(),
                operator: FieldOperator::Equals,
                value: value.into(),
            }],
        }
    }

    /// Parses the query-string form (`?fieldSelector=`), as upstream does: the selector is split
    /// on unescaped commas, the terms are sorted (as text) and empty ones skipped, and each is
    /// split at its first `!=`, `==` or `=` (the field is taken literally, the value unescaped).
    /// The first bad term, in sorted order, is the error. A term whose field and value are both
    /// empty (`=`) selects nothing and is dropped, as upstream's transform step drops it.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let Some((field, operator, value)) = split_term(term) else {
                return Err(SelectorError::FieldSyntax {
                    selector: selector.to_owned(),
                    term: term.to_owned(),
                });
            };
            let value = unescape_field_value(value)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field: field.to_owned(),
                operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether the selector does not restrict the selection (it has no terms).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, in canonical order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether the fields, read through `lookup` (a field `lookup` does not know reads as the
    /// empty string), satisfy every term.
    pub fn matches_with<S: AsRef<str>>(&self, lookup: impl Fn(&str) -> Option<S>) -> bool {
        self.requirements.iter().all(|r| r.matches_with(&lookup))
    }

    /// Whether the fields satisfy every term.
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.matches_with(|field| fields.get(field))
    }

    /// The value `field` must have, from the first `=` term on it (upstream's
    /// `RequiresExactMatch`), e.g. to serve `metadata.name=x` as a single read.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.operator == FieldOperator::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// Rewrites every term through `convert(field, value) -> (field, value)`, in order, stopping
    /// at its first error (upstream's `Transform`, through which the API server maps selectors
    /// onto a resource's fields, e.g. `spec.host` to `spec.nodeName` on pods). A term converted
    /// to an empty field and an empty value is dropped.
    pub fn transform<E>(
        &self,
        mut convert: impl FnMut(&str, &str) -> Result<(String, String), E>,
    ) -> Result<FieldSelector, E> {
        let mut requirements = Vec::with_capacity(self.requirements.len());
        for requirement in &self.requirements {
            let (field, value) = convert(&requirement.field, &requirement.value)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field,
                operator: requirement.operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Checks every field against those a resource supports, as the API server does for a
    /// resource that registered its selectable fields (pods, nodes, events, ...): the first
    /// other field is [`SelectorError::FieldLabelNotSupported`] (`field label not supported:
    /// foo`). List `metadata.name` and `metadata.namespace` in `supported` if the resource takes
    /// them.
    pub fn check_supported_fields(&self, supported: &[&str]) -> Result<(), SelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| !supported.contains(&r.field.as_str()))
        {
            Some(r) => Err(SelectorError::FieldLabelNotSupported(r.field.clone())),
            None => Ok(()),
        }
    }

    /// Checks every field against `metadata.name` and `metadata.namespace`, as the API server
    /// does for a resource that registered no selectable fields of its own: the first other
    /// field is [`SelectorError::UnknownField`] (`"foo" is not a known field selector: only
    /// "metadata.name", "metadata.namespace"`).
    pub fn check_default_fields(&self) -> Result<(), SelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| r.field != "metadata.name" && r.field != "metadata.namespace")
        {
            Some(r) => Err(SelectorError::UnknownField(r.field.clone())),
            None => Ok(()),
        }
    }
}

/// Upstream's canonical form: the terms joined by `,`, values escaped, `==` printed as `=`; the
/// empty string for `everything`.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(selector: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(selector)
    }
}
