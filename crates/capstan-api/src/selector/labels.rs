//! Label selectors: upstream's `labels.Parse` grammar (its lexer, parser and messages), label
//! requirements with their validation, matching, canonical form, and conversion from
//! `metav1.LabelSelector`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

use super::SelectorError;
use crate::field::{BadValue, FieldError, Path, go_quote};
use crate::names;

/// How a label requirement relates a key to its values (upstream's `selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LabelOperator {
    /// `key in (v1,v2)`: the label exists and has one of the values.
    In,
    /// `key notin (v1,v2)`: the label is absent or has none of the values.
    NotIn,
    /// `key=v`: the label exists and has the value.
    Equals,
    /// `key==v`: the same as [`LabelOperator::Equals`], printed as written.
    DoubleEquals,
    /// `key!=v`: the label is absent or has another value.
    NotEquals,
    /// `key`: the label exists.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label exists and is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label exists and is an integer less than `n`.
    LessThan,
}

impl LabelOperator {
    /// Upstream's name for the operator: `in`, `notin`, `=`, `==`, `!=`, `exists`, `!`, `gt`,
    /// `lt`.
    pub fn as_str(self) -> &'static str {
        match self {
            LabelOperator::In => "in",
            LabelOperator::NotIn => "notin",
            LabelOperator::Equals => "=",
            LabelOperator::DoubleEquals => "==",
            LabelOperator::NotEquals => "!=",
            LabelOperator::Exists => "exists",
            LabelOperator::DoesNotExist => "!",
            LabelOperator::GreaterThan => "gt",
            LabelOperator::LessThan => "lt",
        }
    }
}

/// Go's `%#v` for a `[]string`, as upstream prints a bad list of values.
fn go_string_slice(values: &[String], nil_when_empty: bool) -> String {
    if values.is_empty() && nil_when_empty {
        return "[]string(nil)".to_owned();
    }
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// One condition on one label: a key, an operator and (for most operators) values. Built only
/// through [`LabelRequirement::new`] or parsing, so it is always valid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    key: String,
    operator: LabelOperator,
    values: Vec<String>,
}

impl LabelRequirement {
    /// A validated requirement, with upstream's `NewRequirement` rules: the key is a qualified
    /// name; `In`/`NotIn` take at least one value, `Equals`/`DoubleEquals`/`NotEquals` exactly
    /// one, `Exists`/`DoesNotExist` none, `GreaterThan`/`LessThan` exactly one integer; every
    /// value is a valid label value (the empty string is one). All problems are reported
    /// together, as [`SelectorError::Invalid`].
    pub fn new(
        key: impl Into<String>,
        operator: LabelOperator,
        values: Vec<String>,
    ) -> Result<Self, SelectorError> {
        Self::build(key.into(), operator, values, false)
    }

    /// `new`, choosing how an empty value list prints in errors: upstream's conversion from
    /// `metav1.LabelSelector` hands over a nil slice, other callers an empty one.
    fn build(
        key: String,
        operator: LabelOperator,
        values: Vec<String>,
        nil_when_empty: bool,
    ) -> Result<Self, SelectorError> {
        let mut errors = Vec::new();
        let key_errors = names::is_qualified_name(&key);
        if !key_errors.is_empty() {
            errors.push(FieldError::invalid(
                &Path::new("key"),
                key.as_str(),
                &key_errors.join("; "),
            ));
        }
        let values_path = Path::new("values");
        let bad_values = || BadValue::Other(go_string_slice(&values, nil_when_empty));
        match operator {
            LabelOperator::In | LabelOperator::NotIn => {
                if values.is_empty() {
                    errors.push(FieldError::invalid(
                        &values_path,
                        bad_values(),
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::NotEquals => {
                if values.len() != 1 {
                    errors.push(FieldError::invalid(
                        &values_path,
                        bad_values(),
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            LabelOperator::Exists | LabelOperator::DoesNotExist => {
                if !values.is_empty() {
                    errors.push(FieldError::invalid(
                        &values_path,
                        bad_values(),
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                if values.len() != 1 {
                    errors.push(FieldError::invalid(
                        &values_path,
                        bad_values(),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, value) in values.iter().enumerate() {
                    if value.parse::<i64>().is_err() {
                        errors.push(FieldError::invalid(
                            &values_path.index(i),
                            value.as_str(),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, value) in values.iter().enumerate() {
            let value_errors = names::is_valid_label_value(value);
            if !value_errors.is_empty() {
                errors.push(FieldError::invalid(
                    &values_path.index(i).key(&key),
                    value.as_str(),
                    &value_errors.join("; "),
                ));
            }
        }
        if errors.is_empty() {
            Ok(LabelRequirement {
                key,
                operator,
                values,
            })
        } else {
            Err(SelectorError::Invalid(errors))
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> LabelOperator {
        self.operator
    }

    /// The values in the order given (a parsed requirement has them sorted and deduplicated).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// Whether labels, read through `lookup` (the value of a key, if the label exists), satisfy
    /// this requirement. `GreaterThan`/`LessThan` fail when the label is not a 64-bit integer.
    pub fn matches_with<S: AsRef<str>>(&self, lookup: impl Fn(&str) -> Option<S>) -> bool {
        let value = lookup(&self.key);
        let value = value.as_ref().map(AsRef::as_ref);
        match self.operator {
            LabelOperator::In | LabelOperator::Equals | LabelOperator::DoubleEquals => {
                value.is_some_and(|v| self.has_value(v))
            }
            LabelOperator::NotIn | LabelOperator::NotEquals => {
                value.is_none_or(|v| !self.has_value(v))
            }
            LabelOperator::Exists => value.is_some(),
            LabelOperator::DoesNotExist => value.is_none(),
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                let Some(Ok(actual)) = value.map(str::parse::<i64>) else {
                    return false;
                };
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let Ok(bound) = bound.parse::<i64>() else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }

    /// Whether the labels satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key))
    }
}

/// Upstream's `String()`: `!key`, `key`, `key=v`, `key==v`, `key!=v`, `key>n`, `key<n`,
/// `key in (a,b)`, `key notin (a,b)`; several values are printed sorted.
impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == LabelOperator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (operator, parenthesised) = match self.operator {
            LabelOperator::Exists | LabelOperator::DoesNotExist => return Ok(()),
            LabelOperator::Equals => ("=", false),
            LabelOperator::DoubleEquals => ("==", false),
            LabelOperator::NotEquals => ("!=", false),
            LabelOperator::GreaterThan => (">", false),
            LabelOperator::LessThan => ("<", false),
            LabelOperator::In => (" in (", true),
            LabelOperator::NotIn => (" notin (", true),
        };
        f.write_str(operator)?;
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if parenthesised {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: requirements that must all hold, kept sorted by key; or the selector that
/// matches nothing (what a nil `metav1.LabelSelector` converts to).
///
/// The default is [`LabelSelector::everything`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
    matches_nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every object (no requirements); it is empty.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// The selector that matches no object; it is not empty, and prints as the empty string.
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            matches_nothing: true,
        }
    }

    /// Parses the query-string form (`?labelSelector=`, `kubectl -l`), with upstream's grammar
    /// and error messages: requirements separated by commas, each `[!]key`,
    /// `key (=|==|!=|>|<) value` or `key (in|notin) (v1,v2)`; blanks (space, tab, CR, LF)
    /// separate tokens. The empty string parses to [`LabelSelector::everything`].
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(selector);
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            matches_nothing: false,
        })
    }

    /// Converts a `metav1.LabelSelector` as upstream's `LabelSelectorAsSelector` does. `None`
    /// (an absent selector) gives [`LabelSelector::nothing`]; a selector with neither
    /// `matchLabels` nor `matchExpressions` gives [`LabelSelector::everything`]. Each entry of
    /// `matchLabels` is an `Equals` requirement; expressions take `In`, `NotIn`, `Exists` or
    /// `DoesNotExist`. The first invalid entry (labels in key order, then expressions in order)
    /// is the error.
    pub fn from_api(selector: Option<&metav1::LabelSelector>) -> Result<Self, SelectorError> {
        let Some(selector) = selector else {
            return Ok(LabelSelector::nothing());
        };
        let match_labels = selector.match_labels.as_ref();
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if match_labels.is_none_or(BTreeMap::is_empty) && expressions.is_empty() {
            return Ok(LabelSelector::everything());
        }
        let mut result = LabelSelector::everything();
        for (key, value) in match_labels.into_iter().flatten() {
            let requirement = LabelRequirement::build(
                key.clone(),
                LabelOperator::Equals,
                vec![value.clone()],
                true,
            )?;
            result.requirements.push(requirement);
        }
        for expression in expressions {
            let operator = match expression.operator.as_str() {
                "In" => LabelOperator::In,
                "NotIn" => LabelOperator::NotIn,
                "Exists" => LabelOperator::Exists,
                "DoesNotExist" => LabelOperator::DoesNotExist,
                other => return Err(SelectorError::UnknownOperator(other.to_owned())),
            };
            let requirement = LabelRequirement::build(
                expression.key.clone(),
                operator,
                expression.values.clone().unwrap_or_default(),
                true,
            )?;
            result.requirements.push(requirement);
        }
        result.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(result)
    }

    /// This selector with one more requirement (kept sorted by key). Adding to
    /// [`LabelSelector::nothing`] leaves it matching nothing.
    pub fn with_requirement(mut self, requirement: LabelRequirement) -> Self {
        if !self.matches_nothing {
            self.requirements.push(requirement);
            self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        }
        self
    }

    /// Whether the selector does not restrict the selection (it has no requirements and is not
    /// [`LabelSelector::nothing`]).
    pub fn is_empty(&self) -> bool {
        !self.matches_nothing && self.requirements.is_empty()
    }

    /// Whether this is [`LabelSelector::nothing`], which matches no object.
    pub fn matches_nothing(&self) -> bool {
        self.matches_nothing
    }

    /// The requirements, sorted by key (none for `everything` and `nothing`).
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether labels read through `lookup` (the value of a key, if the label exists) satisfy
    /// every requirement.
    pub fn matches_with<S: AsRef<str>>(&self, lookup: impl Fn(&str) -> Option<S>) -> bool {
        !self.matches_nothing && self.requirements.iter().all(|r| r.matches_with(&lookup))
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key))
    }

    /// The value `key` must have for the selector to match, if its first requirement on `key`
    /// pins one (`=`, `==`, or `in` with a single value), as upstream's `RequiresExactMatch`.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let requirement = self.requirements.iter().find(|r| r.key == key)?;
        match (requirement.operator, requirement.values.as_slice()) {
            (LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::In, [value]) => {
                Some(value)
            }
            _ => None,
        }
    }
}

/// Upstream's canonical form: the requirements, sorted by key, joined by `,`; the empty string
/// for `everything` and `nothing`.
impl fmt::Display for LabelSelector {
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

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(selector: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(selector)
    }
}

/// The tokens of upstream's label selector lexer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// A run of special characters that is no operator (upstream keeps it, though every
    /// single special character is a token of its own).
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// The token a literal stands for, if it is an operator, a keyword or punctuation.
fn literal_token(literal: &[u8]) -> Option<Token> {
    Some(match literal {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(byte: u8) -> bool {
    matches!(byte, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Upstream's byte-wise lexer. Like upstream, it reads a NUL byte as the end of the input
/// (where it stops a token, the NUL is consumed and lexing resumes after it).
struct Lexer<'a> {
    input: &'a [u8],
    position: usize,
}

impl Lexer<'_> {
    /// The next byte, or 0 at the end.
    fn read(&mut self) -> u8 {
        match self.input.get(self.position) {
            Some(&byte) => {
                self.position += 1;
                byte
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.position = self.position.saturating_sub(1);
    }

    /// An identifier, or a keyword (`in`, `notin`) spelt as one.
    fn identifier_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            match self.read() {
                0 => break,
                byte if is_special(byte) || is_blank(byte) => {
                    self.unread();
                    break;
                }
                byte => buffer.push(byte),
            }
        }
        let literal = String::from_utf8_lossy(&buffer).into_owned();
        (literal_token(&buffer).unwrap_or(Token::Identifier), literal)
    }

    /// The longest operator or punctuation starting here.
    fn special(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        let mut longest: Option<(Token, usize)> = None;
        loop {
            match self.read() {
                0 => break,
                byte if is_special(byte) => {
                    buffer.push(byte);
                    if let Some(token) = literal_token(&buffer) {
                        longest = Some((token, buffer.len()));
                    } else if longest.is_some() {
                        self.unread();
                        break;
                    }
                }
                _ => {
                    self.unread();
                    break;
                }
            }
        }
        match longest {
            Some((token, length)) => (
                token,
                String::from_utf8_lossy(buffer.get(..length).unwrap_or_default()).into_owned(),
            ),
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buffer)
                ),
            ),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut byte = self.read();
        while is_blank(byte) {
            byte = self.read();
        }
        match byte {
            0 => (Token::EndOfString, String::new()),
            byte if is_special(byte) => {
                self.unread();
                self.special()
            }
            _ => {
                self.unread();
                self.identifier_or_keyword()
            }
        }
    }
}

/// Where the parser is: after a key, `in` and `notin` are operators; elsewhere they are plain
/// identifiers (a key or a value may be spelt `in`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// Upstream's recursive-descent parser over the whole token list.
struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

/// The text upstream lists after `expected:` when an operator is missing.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

fn syntax(message: String) -> SelectorError {
    SelectorError::Syntax(message)
}

impl Parser {
    fn new(selector: &str) -> Self {
        let mut lexer = Lexer {
            input: selector.as_bytes(),
            position: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn token_at(&self, position: usize, context: Context) -> (Token, String) {
        let (token, literal) = self
            .items
            .get(position)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        let token = match token {
            Token::In | Token::NotIn if context == Context::Values => Token::Identifier,
            token => token,
        };
        (token, literal)
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.token_at(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        self.position += 1;
        self.token_at(self.position - 1, context)
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .requirement()
                        .map_err(|e| SelectorError::Requirement(Box::new(e)))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(syntax(format!(
                                    "found '{literal}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(syntax(format!(
                                "found '{literal}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(syntax(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        let (key, operator) = self.key_and_inferred_operator()?;
        if let Some(operator) = operator {
            return LabelRequirement::new(key, operator, Vec::new());
        }
        let operator = self.operator()?;
        let values = match operator {
            LabelOperator::In | LabelOperator::NotIn => self.value_set()?,
            _ => self.exact_value()?,
        };
        LabelRequirement::new(key, operator, values.into_iter().collect())
    }

    /// The key, with `Exists` or `DoesNotExist` when nothing follows it but `,` or the end;
    /// `!key` followed by anything else still gives `DoesNotExist` (upstream then fails on
    /// what follows).
    fn key_and_inferred_operator(
        &mut self,
    ) -> Result<(String, Option<LabelOperator>), SelectorError> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            operator = Some(LabelOperator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(syntax(format!("found '{literal}', expected: identifier")));
        }
        let key_errors = names::is_qualified_name(&literal);
        if !key_errors.is_empty() {
            // Upstream validates the parsed key against a nil field path, printed `<nil>`.
            return Err(SelectorError::Invalid(vec![FieldError::invalid(
                &Path::new("<nil>"),
                literal.as_str(),
                &key_errors.join("; "),
            )]));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(LabelOperator::Exists);
        }
        Ok((literal, operator))
    }

    fn operator(&mut self) -> Result<LabelOperator, SelectorError> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => LabelOperator::In,
            Token::Equals => LabelOperator::Equals,
            Token::DoubleEquals => LabelOperator::DoubleEquals,
            Token::GreaterThan => LabelOperator::GreaterThan,
            Token::LessThan => LabelOperator::LessThan,
            Token::NotIn => LabelOperator::NotIn,
            Token::NotEquals => LabelOperator::NotEquals,
            _ => {
                return Err(syntax(format!(
                    "found '{literal}', expected: {BINARY_OPERATORS}"
                )));
            }
        })
    }

    /// `(v1,v2,...)`; `()` is the set holding the empty string.
    fn value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(syntax(format!("found '{literal}' expected: '('")));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.identifier_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    // Upstream names the token that followed `(` here.
                    return Err(syntax(format!("found '{literal}', expected: ')'")));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(syntax(format!(
                "found '{literal}', expected: ',', ')' or identifier"
            ))),
        }
    }

    /// Comma-separated, possibly empty values up to (not including) `)`. As in 1.33, a second
    /// comma in a row is consumed with the first, so `(a,,)` is an error while `(a,,b)` is not.
    fn identifier_list(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let mut values = BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.insert(literal);
                    let (next, literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => {
                            return Err(syntax(format!("found '{literal}', expected: ',' or ')'")));
                        }
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        values.insert(String::new());
                        return Ok(values);
                    }
                    if next == Token::Comma {
                        self.consume(Context::Values);
                        values.insert(String::new());
                    }
                }
                _ => {
                    return Err(syntax(format!(
                        "found '{literal}', expected: ',', or identifier"
                    )));
                }
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; nothing before `,` or the end is the empty
    /// value.
    fn exact_value(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(BTreeSet::from([literal]))
        } else {
            Err(syntax(format!("found '{literal}', expected: identifier")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::test_support::{check_parsed, string_map};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    const NAME_PATTERN: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_PATTERN: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    /// Parses `input`; `Ok` is the canonical form, `Err` the message the API server sends.
    fn check(input: &str, expected: Result<&str, &str>) {
        check_parsed(LabelSelector::parse(input), input, expected);
    }

    #[test]
    fn parses_to_the_canonical_form() {
        let ok = |input: &str, expected: &str| check(input, Ok(expected));
        ok("", "");
        ok("   ", "");
        ok("x=a,y=b,z=c", "x=a,y=b,z=c");
        ok("z=c,x=a", "x=a,z=c");
        ok("x==a", "x==a");
        ok("x!=a", "x!=a");
        ok("x=", "x=");
        ok("x= ", "x=");
        ok("x=,z= ", "x=,z=");
        ok("x= ,z= ", "x=,z=");
        ok("!x", "!x");
        ok("! x", "!x");
        ok("x", "x");
        ok("  x  ", "x");
        ok("\rx", "x");
        ok("x>1", "x>1");
        ok("x>1,z<5", "x>1,z<5");
        ok("x > 1", "x>1");
        ok("x>007", "x>007");
        ok("x in (abc,def)", "x in (abc,def)");
        ok("x in (def,abc,abc)", "x in (abc,def)");
        ok("x in ()", "x in ()");
        ok("x notin ( )", "x notin ()");
        ok("x in (abc,)", "x in (,abc)");
        ok("x notin (, a)", "x notin (,a)");
        ok("x in (a,,b)", "x in (,a,b)");
        ok("x in (a,,,b)", "x in (,a,b)");
        ok(
            "x notin (abc,,def),bar,z in (),w",
            "bar,w,x notin (,abc,def),z in ()",
        );
        ok("a in (x,y,notin, z,in)", "a in (in,notin,x,y,z)");
        ok("foo  in\t (abc)", "foo in (abc)");
        ok("x notin\n (abc)", "x notin (abc)");
        ok("x,y in (a)", "x,y in (a)");
        ok("notin=in", "notin=in");
        ok("in", "in");
        ok("in in (in)", "in in (in)");
        ok(
            "this-is-a-dns.domain.com/key-with-dash",
            "this-is-a-dns.domain.com/key-with-dash",
        );
        ok(
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)",
        );
        ok("b,!a,c=1", "!a,b,c=1");
        ok("a=1,a!=2", "a=1,a!=2");
        ok(
            &format!("x={}", "v".repeat(63)),
            &format!("x={}", "v".repeat(63)),
        );
        ok(&"k".repeat(63), &"k".repeat(63));
        // Upstream's lexer reads a NUL byte as the end of the input; where it ends a token it
        // is consumed, and lexing resumes after it.
        ok("\0a", "");
        ok("a=\0b", "a=b");
    }

    #[test]
    fn rejects_what_upstream_rejects_with_its_messages() {
        let err = |input: &str, expected: &str| check(input, Err(expected));
        let unable = |detail: &str| format!("unable to parse requirement: {detail}");
        let no_operator = |found: &str| {
            unable(&format!(
                "found '{found}', expected: in, notin, =, ==, !=, gt, lt"
            ))
        };
        err("a b", &no_operator("b"));
        err("a b=c", &no_operator("b"));
        err("x nott in (y)", &no_operator("nott"));
        err("a (", &no_operator("("));
        err("x!", &no_operator("!"));
        err("a=b c", "found 'c', expected: ',' or 'end of string'");
        err("x==a==b", "found '==', expected: ',' or 'end of string'");
        err("!x=a", "found '=', expected: ',' or 'end of string'");
        err(
            "a in (xyz)b notin ()",
            "found 'b', expected: ',' or 'end of string'",
        );
        err("a=b,", "found '', expected: identifier after ','");
        err("a in (xyz),", "found '', expected: identifier after ','");
        err("x,,y", "found ',', expected: identifier after ','");
        err(
            ",x,y",
            "found ',', expected: !, identifier, or 'end of string'",
        );
        err(
            ",",
            "found ',', expected: !, identifier, or 'end of string'",
        );
        err(
            "(",
            "found '(', expected: !, identifier, or 'end of string'",
        );
        err(
            "!=x",
            "found '!=', expected: !, identifier, or 'end of string'",
        );
        err("!", &unable("found '', expected: identifier"));
        err("!!x", &unable("found '!', expected: identifier"));
        err("x=(a)", &unable("found '(', expected: identifier"));
        err("x===a", &unable("found '=', expected: identifier"));
        err("a in x", &unable("found 'x' expected: '('"));
        err("a in", &unable("found '' expected: '('"));
        err(
            "a notin(",
            &unable("found '', expected: ',', ')' or identifier"),
        );
        err(
            "x in (=)",
            &unable("found '=', expected: ',', ')' or identifier"),
        );
        err(
            "a in (xyz abc)",
            &unable("found 'abc', expected: ',' or ')'"),
        );
        err("x in (a=)", &unable("found '=', expected: ',' or ')'"));
        err(
            "x in (,=)",
            &unable("found '=', expected: ',', or identifier"),
        );
        // In 1.33 a doubled comma swallows the next token, so `(,,)` and `(a,,)` fail.
        err(
            "x in (,,)",
            &unable("found ')', expected: ',', or identifier"),
        );
        err(
            "x in (a,,)",
            &unable("found ')', expected: ',', or identifier"),
        );
        err("a\0b", &no_operator("b"));
    }

    #[test]
    fn validates_keys_and_values_as_upstream() {
        let err = |input: &str, expected: &str| check(input, Err(expected));
        let unable = |detail: &str| format!("unable to parse requirement: {detail}");
        err(
            "A=@",
            &unable(&format!(
                "values[0][A]: Invalid value: \"@\": {VALUE_PATTERN}"
            )),
        );
        err(
            "x=a||y=b",
            &unable(&format!(
                "values[0][x]: Invalid value: \"a||y\": {VALUE_PATTERN}"
            )),
        );
        err(
            "x in (a,b_)",
            &unable(&format!(
                "values[1][x]: Invalid value: \"b_\": {VALUE_PATTERN}"
            )),
        );
        err(
            &format!("x={}", "v".repeat(64)),
            &unable(&format!(
                "values[0][x]: Invalid value: \"{}\": must be no more than 63 characters",
                "v".repeat(64)
            )),
        );
        // A parsed key is checked against a nil field path, which upstream prints `<nil>`.
        err(
            "_a=b",
            &unable(&format!("<nil>: Invalid value: \"_a\": {NAME_PATTERN}")),
        );
        err(
            "app:monolith",
            &unable(&format!(
                "<nil>: Invalid value: \"app:monolith\": {NAME_PATTERN}"
            )),
        );
        err(
            "a/b/c ?=? def",
            &unable(
                "<nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ),
        );
        err(
            "app.kubernetes_io/name=x",
            &unable(
                "<nil>: Invalid value: \"app.kubernetes_io/name\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ),
        );
        err(
            &"k".repeat(64),
            &unable(&format!(
                "<nil>: Invalid value: \"{}\": name part must be no more than 63 characters",
                "k".repeat(64)
            )),
        );
        err(
            "/a",
            &unable("<nil>: Invalid value: \"/a\": prefix part must be non-empty"),
        );
        // Gt and Lt take one integer, which must also be a valid label value.
        let not_integer = |value: &str| {
            unable(&format!(
                "values[0]: Invalid value: \"{value}\": for 'Gt', 'Lt' operators, the value must be an integer"
            ))
        };
        err("x<a", &not_integer("a"));
        err("x>", &not_integer(""));
        err("x>1.5", &not_integer("1.5"));
        err(
            "x>99999999999999999999",
            &not_integer("99999999999999999999"),
        );
        err(
            "x>-1",
            &unable(&format!(
                "values[0][x]: Invalid value: \"-1\": {VALUE_PATTERN}"
            )),
        );
        err(
            "x>a_",
            &unable(&format!(
                "[values[0]: Invalid value: \"a_\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"a_\": {VALUE_PATTERN}]"
            )),
        );
    }

    #[test]
    fn requirements_are_validated_on_construction() {
        let check =
            |key: &str, operator: LabelOperator, values: &[&str], expected: Result<&str, &str>| {
                let values = values.iter().map(|v| (*v).to_owned()).collect();
                let got = LabelRequirement::new(key, operator, values)
                    .map(|r| r.to_string())
                    .map_err(|e| e.to_string());
                assert_eq!(got, expected.map(str::to_owned).map_err(str::to_owned));
            };
        use LabelOperator::*;
        check("x", In, &["b", "a"], Ok("x in (a,b)"));
        check("x", NotIn, &["a"], Ok("x notin (a)"));
        check("x", Equals, &["a"], Ok("x=a"));
        check("x", DoubleEquals, &[""], Ok("x=="));
        check("x", NotEquals, &["a"], Ok("x!=a"));
        check("x", Exists, &[], Ok("x"));
        check("x", DoesNotExist, &[], Ok("!x"));
        check(
            "x",
            GreaterThan,
            &["-1"],
            Err(
                "values[0][x]: Invalid value: \"-1\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
        );
        check("x", LessThan, &["6"], Ok("x<6"));
        check(
            "x",
            In,
            &[],
            Err(
                "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty",
            ),
        );
        check(
            "x",
            Equals,
            &["bar", "foo"],
            Err(
                "values: Invalid value: []string{\"bar\", \"foo\"}: exact-match compatibility requires one single value",
            ),
        );
        check(
            "x",
            Exists,
            &["foo"],
            Err(
                "values: Invalid value: []string{\"foo\"}: values set must be empty for exists and does not exist",
            ),
        );
        check(
            "x",
            GreaterThan,
            &[],
            Err(
                "values: Invalid value: []string{}: for 'Gt', 'Lt' operators, exactly one value is required",
            ),
        );
        check(
            "x",
            LessThan,
            &["1", "2"],
            Err(
                "values: Invalid value: []string{\"1\", \"2\"}: for 'Gt', 'Lt' operators, exactly one value is required",
            ),
        );
        let long_key = "a".repeat(254);
        check(
            &long_key,
            Exists,
            &[],
            Err(&format!(
                "key: Invalid value: \"{long_key}\": name part must be no more than 63 characters"
            )),
        );
        check(
            "x",
            Equals,
            &["a b"],
            Err(&format!(
                "values[0][x]: Invalid value: \"a b\": {VALUE_PATTERN}"
            )),
        );
        check(
            "_",
            NotIn,
            &["a\"b"],
            Err(&format!(
                "[key: Invalid value: \"_\": {NAME_PATTERN}, values[0][_]: Invalid value: \"a\\\"b\": {VALUE_PATTERN}]"
            )),
        );
        let requirement = LabelRequirement::new("x", In, vec!["b".into(), "a".into()]);
        assert_eq!(
            requirement.map(|r| (r.key().to_owned(), r.operator(), r.values().to_vec())),
            Ok(("x".to_owned(), In, vec!["b".to_owned(), "a".to_owned()]))
        );
        assert_eq!(In.as_str(), "in");
        assert_eq!(GreaterThan.as_str(), "gt");
        assert_eq!(DoesNotExist.as_str(), "!");
    }

    #[test]
    fn matches_as_upstream() {
        let check = |selector: &str, pairs: &[(&str, &str)], expected: bool| {
            let parsed = LabelSelector::parse(selector);
            let got = parsed.map(|s| s.matches(&string_map(pairs)));
            assert_eq!(got, Ok(expected), "{selector:?} on {pairs:?}");
        };
        check("", &[("x", "y")], true);
        check("", &[], true);
        check("x=y", &[("x", "y")], true);
        check("x==y", &[("x", "y")], true);
        check("x=y,z=w", &[("x", "y"), ("z", "w")], true);
        check("x!=y,z!=w", &[("x", "z"), ("z", "a")], true);
        check("notin=in", &[("notin", "in")], true);
        check("x", &[("x", "z")], true);
        check("x", &[("x", "")], true);
        check("!x", &[("y", "z")], true);
        check("x>1", &[("x", "2")], true);
        check("x<1", &[("x", "0")], true);
        check("x<10", &[("x", "-5")], true);
        check("x in (a,b)", &[("x", "b")], true);
        check("x notin (a)", &[], true);
        check("x notin (a)", &[("x", "b")], true);
        check("x in ()", &[("x", "")], true);
        check("x notin ()", &[("y", "")], true);
        check("x!=", &[], true);
        check("x=z", &[], false);
        check("x=", &[], false);
        check("x=y", &[("x", "z")], false);
        check("x=y,z=w", &[("x", "w"), ("z", "w")], false);
        check("x!=y,z!=w", &[("x", "z"), ("z", "w")], false);
        check("x", &[("y", "z")], false);
        check("!x", &[("x", "z")], false);
        check("x>1", &[("x", "0")], false);
        check("x>1", &[("x", "1")], false);
        check("x<1", &[("x", "2")], false);
        check("x>1", &[("x", "v2")], false);
        check("x>1", &[], false);
        check("x in (a)", &[], false);
        check("x in ()", &[], false);
        check("x notin (a)", &[("x", "a")], false);
        let set = [("foo", "bar"), ("baz", "blah")];
        check("foo=bar,baz=blah", &set, true);
        check("foo=bar,foobar=bar,baz=blah", &set, false);

        let selector = LabelSelector::parse("app=web,tier");
        let lookup = |key: &str| match key {
            "app" => Some("web".to_owned()),
            "tier" => Some("front".to_owned()),
            _ => None,
        };
        assert_eq!(selector.map(|s| s.matches_with(lookup)), Ok(true));
    }

    #[test]
    fn everything_and_nothing() {
        let any = string_map(&[("a", "b")]);
        let everything = LabelSelector::everything();
        assert!(everything.is_empty() && !everything.matches_nothing());
        assert!(everything.matches(&any) && everything.matches(&BTreeMap::new()));
        assert_eq!(everything.to_string(), "");
        assert_eq!(LabelSelector::default(), everything);
        assert_eq!(LabelSelector::parse(""), Ok(everything));

        let nothing = LabelSelector::nothing();
        assert!(!nothing.is_empty() && nothing.matches_nothing());
        assert!(!nothing.matches(&any) && !nothing.matches(&BTreeMap::new()));
        assert_eq!(nothing.to_string(), "");

        let parsed = LabelSelector::parse("a");
        assert_eq!(parsed.as_ref().map(LabelSelector::is_empty), Ok(false));
    }

    #[test]
    fn adds_and_introspects_requirements() {
        let a = LabelRequirement::new("a", LabelOperator::Exists, Vec::new());
        let b = LabelRequirement::new("b", LabelOperator::Equals, vec!["1".into()]);
        let (Ok(a), Ok(b)) = (a, b) else {
            panic!("valid requirements were rejected");
        };
        let selector = LabelSelector::everything()
            .with_requirement(b.clone())
            .with_requirement(a.clone());
        assert_eq!(selector.to_string(), "a,b=1");
        assert_eq!(selector.requirements(), &[a.clone(), b.clone()]);
        assert!(selector.matches(&string_map(&[("a", ""), ("b", "1")])));
        assert!(
            LabelSelector::nothing()
                .with_requirement(a)
                .matches_nothing()
        );

        let parsed: Result<LabelSelector, _> = "a=1,b in (2),c in (3,4),d!=5,e==6,f".parse();
        let Ok(parsed) = parsed else {
            panic!("valid selector was rejected");
        };
        let exact: Vec<Option<&str>> = ["a", "b", "c", "d", "e", "f", "z"]
            .iter()
            .map(|key| parsed.requires_exact_match(key))
            .collect();
        assert_eq!(
            exact,
            [Some("1"), Some("2"), None, None, Some("6"), None, None]
        );
    }

    fn api_selector(
        match_labels: &[(&str, &str)],
        expressions: &[(&str, &str, Option<&[&str]>)],
    ) -> metav1::LabelSelector {
        metav1::LabelSelector {
            match_labels: Some(string_map(match_labels)),
            match_expressions: Some(
                expressions
                    .iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key: (*key).to_owned(),
                        operator: (*operator).to_owned(),
                        values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn converts_api_label_selectors() {
        let check = |selector: Option<metav1::LabelSelector>, expected: Result<&str, &str>| {
            let got = LabelSelector::from_api(selector.as_ref())
                .map(|s| s.to_string())
                .map_err(|e| e.to_string());
            assert_eq!(
                got,
                expected.map(str::to_owned).map_err(str::to_owned),
                "{selector:?}"
            );
        };
        check(Some(api_selector(&[], &[])), Ok(""));
        check(
            Some(api_selector(
                &[("b", "2"), ("a", "1")],
                &[("c", "In", Some(&["y", "x"]))],
            )),
            Ok("a=1,b=2,c in (x,y)"),
        );
        check(
            Some(api_selector(
                &[],
                &[
                    ("d", "DoesNotExist", None),
                    ("c", "Exists", Some(&[])),
                    ("e", "NotIn", Some(&["1"])),
                ],
            )),
            Ok("c,!d,e notin (1)"),
        );
        check(
            Some(api_selector(&[("a", "1")], &[("a", "NotIn", Some(&["2"]))])),
            Ok("a=1,a notin (2)"),
        );
        check(
            Some(api_selector(&[], &[("a", "Foo", Some(&["x"]))])),
            Err("\"Foo\" is not a valid label selector operator"),
        );
        check(
            Some(api_selector(&[], &[("a", "in", Some(&["x"]))])),
            Err("\"in\" is not a valid label selector operator"),
        );
        check(
            Some(api_selector(&[], &[("a", "In", None)])),
            Err(
                "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
            ),
        );
        check(
            Some(api_selector(&[], &[("a", "NotIn", Some(&[]))])),
            Err(
                "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
            ),
        );
        check(
            Some(api_selector(&[], &[("a", "Exists", Some(&["x", "y"]))])),
            Err(
                "values: Invalid value: []string{\"x\", \"y\"}: values set must be empty for exists and does not exist",
            ),
        );
        check(
            Some(api_selector(&[("a b", "c")], &[])),
            Err(&format!("key: Invalid value: \"a b\": {NAME_PATTERN}")),
        );
        check(
            Some(api_selector(&[("a", "@")], &[])),
            Err(&format!(
                "values[0][a]: Invalid value: \"@\": {VALUE_PATTERN}"
            )),
        );
        check(
            Some(api_selector(&[], &[("_", "In", None)])),
            Err(&format!(
                "[key: Invalid value: \"_\": {NAME_PATTERN}, values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty]"
            )),
        );

        // Absent matches nothing; present but empty matches everything.
        let absent = LabelSelector::from_api(None);
        assert_eq!(absent, Ok(LabelSelector::nothing()));
        let empty = LabelSelector::from_api(Some(&metav1::LabelSelector::default()));
        assert_eq!(empty, Ok(LabelSelector::everything()));

        let selector = api_selector(&[("app", "web")], &[("tier", "In", Some(&["a", "b"]))]);
        let converted = LabelSelector::from_api(Some(&selector));
        let on = |pairs: &[(&str, &str)]| converted.as_ref().map(|s| s.matches(&string_map(pairs)));
        assert_eq!(on(&[("app", "web"), ("tier", "b")]), Ok(true));
        assert_eq!(on(&[("app", "web"), ("tier", "c")]), Ok(false));
        assert_eq!(on(&[("app", "web")]), Ok(false));
    }

    #[test]
    fn errors_become_400_bad_request() {
        let error = LabelSelector::parse("a b").map(|_| ()).err();
        let status = error.map(|e| crate::StatusError::from(e).to_json());
        assert_eq!(
            status,
            Some(serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 400, "reason": "BadRequest",
                "message": "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            }))
        );
    }
}
