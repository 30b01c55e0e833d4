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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::test_support::{check_parsed, string_map};

    /// Parses `input`; `Ok` is the canonical form, `Err` the message the API server sends.
    fn check(input: &str, expected: Result<&str, &str>) {
        check_parsed(FieldSelector::parse(input), input, expected);
    }

    #[test]
    fn parses_to_the_canonical_form() {
        let ok = |input: &str, expected: &str| check(input, Ok(expected));
        ok("", "");
        ok("x=a,y=b,z=c", "x=a,y=b,z=c");
        ok("x!=a,y=b", "x!=a,y=b");
        ok("z=1,a!=2", "a!=2,z=1");
        ok("x==a", "x=a");
        ok("x=a||y\\=b", "x=a||y\\=b");
        ok("x=a\\=\\=b", "x=a\\=\\=b");
        ok("a=b,", "a=b");
        ok(",a=b", "a=b");
        ok("a=b,,c=d", "a=b,c=d");
        ok(",", "");
        ok("a=", "a=");
        ok("=b", "=b");
        ok("a==b", "a=b");
        ok("a=!b", "a=!b");
        ok("a!b=c", "a!b=c");
        ok("a = b", "a = b");
        ok("a=b\\,c", "a=b\\,c");
        ok("a\\,b=c", "a\\,b=c");
        ok("a=\\\\", "a=\\\\");
        // Terms are sorted by their text as written: `k2` sorts before `k=`.
        ok("k=\\,,k2=v2", "k2=v2,k=\\,");
        ok("k=\\\\,k2=v2", "k2=v2,k=\\\\");
        ok("함=수,목=록", "목=록,함=수");
        // A term with neither field nor value selects nothing and is dropped.
        ok("=", "");
        ok("==", "");
        ok("!=", "");
        ok("=,a=b", "a=b");
    }

    #[test]
    fn rejects_what_upstream_rejects_with_its_messages() {
        let err = |input: &str, expected: &str| check(input, Err(expected));
        err("x", "invalid selector: 'x'; can't understand 'x'");
        err("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'");
        // The first bad term in sorted order is reported.
        err("b,a", "invalid selector: 'b,a'; can't understand 'a'");
        err(
            "x in (a)",
            "invalid selector: 'x in (a)'; can't understand 'x in (a)'",
        );
        err(
            "x in (a,b,c)",
            "invalid selector: 'x in (a,b,c)'; can't understand 'b'",
        );
        err(
            "a=b=c",
            "invalid field selector: unescaped character in value: 61",
        );
        err(
            "x==a==b",
            "invalid field selector: unescaped character in value: 61",
        );
        err(
            "x=a||y=b",
            "invalid field selector: unescaped character in value: 61",
        );
        err(
            "k=\\a",
            "invalid field selector: invalid escape sequence: \\a",
        );
        err(
            "k=\\",
            "invalid field selector: invalid escape sequence: \\",
        );
        err(
            "k=v\\\\\\",
            "invalid field selector: invalid escape sequence: \\",
        );
        err(
            "k=\\é",
            "invalid field selector: invalid escape sequence: \\é",
        );
    }

    #[test]
    fn escapes_and_unescapes_values() {
        for (raw, escaped) in [
            ("", ""),
            ("a", "a"),
            ("=", "\\="),
            (",", "\\,"),
            ("\\", "\\\\"),
            ("\\=\\,\\", "\\\\\\=\\\\\\,\\\\"),
            ("함", "함"),
        ] {
            assert_eq!(escape_field_value(raw), escaped);
            assert_eq!(unescape_field_value(escaped), Ok(raw.to_owned()));
        }
        for (bad, error) in [
            ("\\", SelectorError::InvalidEscape("\\".into())),
            ("\\\\\\", SelectorError::InvalidEscape("\\".into())),
            ("\\a", SelectorError::InvalidEscape("\\a".into())),
            ("a,b", SelectorError::UnescapedCharacter(',')),
            ("a=b", SelectorError::UnescapedCharacter('=')),
        ] {
            assert_eq!(unescape_field_value(bad), Err(error));
        }
        assert_eq!(
            SelectorError::UnescapedCharacter(',').to_string(),
            "invalid field selector: unescaped character in value: 44"
        );
    }

    #[test]
    fn exposes_requirements() {
        let parsed = FieldSelector::parse("spec.nodeName!=n1,metadata.name==web\\,1");
        let requirements = parsed.map(|s| s.requirements().to_vec());
        assert_eq!(
            requirements,
            Ok(vec![
                FieldRequirement {
                    field: "metadata.name".into(),
                    operator: FieldOperator::Equals,
                    value: "web,1".into(),
                },
                FieldRequirement {
                    field: "spec.nodeName".into(),
                    operator: FieldOperator::NotEquals,
                    value: "n1".into(),
                },
            ])
        );
        assert_eq!(FieldOperator::Equals.as_str(), "=");
        assert_eq!(FieldOperator::NotEquals.as_str(), "!=");
    }

    #[test]
    fn matches_as_upstream() {
        let check = |selector: &str, pairs: &[(&str, &str)], expected: bool| {
            let parsed = FieldSelector::parse(selector);
            let got = parsed.map(|s| s.matches(&string_map(pairs)));
            assert_eq!(got, Ok(expected), "{selector:?} on {pairs:?}");
        };
        check("", &[("x", "y")], true);
        check("x=y", &[("x", "y")], true);
        check("x=y,z=w", &[("x", "y"), ("z", "w")], true);
        check("x!=y,z!=w", &[("x", "z"), ("z", "a")], true);
        check("notin=in", &[("notin", "in")], true);
        check("x=y", &[("x", "z")], false);
        check("x=y,z=w", &[("x", "w"), ("z", "w")], false);
        check("x!=y,z!=w", &[("x", "z"), ("z", "w")], false);
        // A missing field reads as the empty string.
        check("x=", &[], true);
        check("x!=", &[], false);
        check("x!=y", &[], true);
        check("x=y", &[], false);
        let set = [("foo", "bar"), ("baz", "blah"), ("complex", "=value\\,\\")];
        check("foo=bar,baz=blah", &set, true);
        check("foo=bar,baz=blah,complex=\\=value\\\\\\,\\\\", &set, true);
        check("foo=blah", &set, false);
        check("foo=bar,foobar=bar,baz=blah", &set, false);

        let selector = FieldSelector::parse("spec.unschedulable=false,metadata.name=n1");
        let lookup = |field: &str| match field {
            "spec.unschedulable" => Some(false.to_string()),
            "metadata.name" => Some("n1".to_owned()),
            _ => None,
        };
        assert_eq!(selector.map(|s| s.matches_with(lookup)), Ok(true));

        let one = FieldSelector::one_term_equal("metadata.name", "a=b");
        assert_eq!(one.to_string(), "metadata.name=a\\=b");
        assert!(one.matches(&string_map(&[("metadata.name", "a=b")])));
        assert!(!one.matches(&string_map(&[("metadata.name", "a")])));
        assert!(!one.is_empty());
        assert!(FieldSelector::everything().is_empty());
        assert!(FieldSelector::everything().matches(&string_map(&[("a", "b")])));
    }

    #[test]
    fn exact_matches() {
        let check = |selector: &str, field: &str, expected: Option<&str>| {
            let parsed = FieldSelector::parse(selector);
            let got = parsed.as_ref().map(|s| s.requires_exact_match(field));
            assert_eq!(got, Ok(expected), "{selector:?} for {field:?}");
        };
        check("metadata.name=a", "metadata.name", Some("a"));
        check("metadata.name==a\\,b", "metadata.name", Some("a,b"));
        check("metadata.name!=a", "metadata.name", None);
        check(
            "metadata.name!=a,metadata.name=b",
            "metadata.name",
            Some("b"),
        );
        check("spec.nodeName=n", "metadata.name", None);
        check("", "metadata.name", None);
    }

    #[test]
    fn checks_fields_as_the_api_server_does() {
        const POD_FIELDS: &[&str] = &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
        ];
        let supported = |selector: &str, expected: Result<(), &str>| {
            let got = FieldSelector::parse(selector)
                .and_then(|s| s.check_supported_fields(POD_FIELDS))
                .map_err(|e| e.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "{selector:?}");
        };
        supported("", Ok(()));
        supported("metadata.name=a,status.phase!=Running", Ok(()));
        supported("foo=bar", Err("field label not supported: foo"));
        supported(
            "status.phase=x,b=1,a=2",
            Err("field label not supported: a"),
        );

        let default = |selector: &str, expected: Result<(), &str>| {
            let got = FieldSelector::parse(selector)
                .and_then(|s| s.check_default_fields())
                .map_err(|e| e.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "{selector:?}");
        };
        default("metadata.name=a,metadata.namespace=b", Ok(()));
        default(
            "foo.bar=baz",
            Err(
                "\"foo.bar\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            ),
        );

        let error =
            FieldSelector::parse("foo=bar").and_then(|s| s.check_supported_fields(POD_FIELDS));
        let status = error.map_err(|e| e.to_status().to_json());
        assert_eq!(
            status,
            Err(serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 400, "reason": "BadRequest", "message": "field label not supported: foo",
            }))
        );
    }

    #[test]
    fn transforms_terms() {
        // The pod conversion upstream registers: `spec.host` is the old name of `spec.nodeName`.
        let pods = |field: &str, value: &str| match field {
            "metadata.name" | "spec.nodeName" => Ok((field.to_owned(), value.to_owned())),
            "spec.host" => Ok(("spec.nodeName".to_owned(), value.to_owned())),
            _ => Err(SelectorError::FieldLabelNotSupported(field.to_owned())),
        };
        let check = |selector: &str, expected: Result<&str, &str>| {
            let got = FieldSelector::parse(selector)
                .and_then(|s| s.transform(pods))
                .map(|s| s.to_string())
                .map_err(|e| e.to_string());
            let expected = expected.map(str::to_owned).map_err(str::to_owned);
            assert_eq!(got, expected, "{selector:?}");
        };
        check(
            "spec.host=n1,metadata.name=x",
            Ok("metadata.name=x,spec.nodeName=n1"),
        );
        check("spec.host!=n1", Ok("spec.nodeName!=n1"));
        check("spec.host=n1,zz=1", Err("field label not supported: zz"));

        let cleared = FieldSelector::parse("a=1,b!=2").and_then(|s| {
            s.transform(|_, _| Ok::<_, SelectorError>((String::new(), String::new())))
        });
        assert_eq!(cleared.map(|s| s.is_empty()), Ok(true));
    }
}
