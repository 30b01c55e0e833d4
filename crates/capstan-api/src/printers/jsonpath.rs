//! The JSONPath subset a CustomResourceDefinition's `additionalPrinterColumns` use, as kubectl's
//! `jsonpath` reads them: `.field` steps (with `['odd.key']`), `[n]` indices, `[*]` and
//! `[?(@.a.b=="value")]` filters (`==` and `!=` against a quoted string or a number). A path
//! yields every value it reaches, in document order; a column prints the first.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// An object's field.
    Field(String),
    /// An array's item (negative: from the end).
    Index(i64),
    /// Every item or field value.
    All,
    /// The array items whose `path` compares to `value` (`equal`: `==`, else `!=`).
    Filter {
        path: Vec<Step>,
        equal: bool,
        value: Value,
    },
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses `.spec.replicas`-style paths (an optional `{...}` around them is accepted).
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let text = text.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let text = text.strip_prefix('$').unwrap_or(text);
        parse_steps(text).map(JsonPath)
    }

    /// Every value the path reaches in `object`.
    pub fn find<'a>(&self, object: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![object];
        for step in &self.0 {
            current = current.into_iter().flat_map(|v| apply(step, v)).collect();
        }
        current
    }
}

fn parse_steps(mut text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while !text.is_empty() {
        if let Some(rest) = text.strip_prefix('.') {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let name = &rest[..end];
            if name.is_empty() {
                return Err(format!("empty field name in {text:?}"));
            }
            steps.push(if name == "*" {
                Step::All
            } else {
                Step::Field(name.to_owned())
            });
            text = &rest[end..];
        } else if let Some(rest) = text.strip_prefix('[') {
            let end = closing(rest).ok_or_else(|| format!("unclosed '[' in {text:?}"))?;
            steps.push(bracket(rest[..end].trim())?);
            text = &rest[end + 1..];
        } else {
            return Err(format!("unexpected {text:?}"));
        }
    }
    Ok(steps)
}

/// Where the `]` closing a bracket starts at `text` is, quotes and parentheses skipped.
fn closing(text: &str) -> Option<usize> {
    let mut depth = 0;
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ']') if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

fn bracket(inner: &str) -> Result<Step, String> {
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Some(quoted) = unquote(inner) {
        return Ok(Step::Field(quoted.to_owned()));
    }
    if let Ok(index) = inner.parse::<i64>() {
        return Ok(Step::Index(index));
    }
    let filter = inner
        .strip_prefix("?(")
        .and_then(|f| f.strip_suffix(')'))
        .ok_or_else(|| format!("unsupported [{inner}]"))?;
    let (left, right, equal) = match (filter.split_once("=="), filter.split_once("!=")) {
        (Some((l, r)), _) => (l, r, true),
        (None, Some((l, r))) => (l, r, false),
        (None, None) => return Err(format!("unsupported filter {filter:?}")),
    };
    let path = left
        .trim()
        .strip_prefix('@')
        .ok_or_else(|| format!("a filter starts with @: {filter:?}"))?;
    let right = right.trim();
    let value = match unquote(right) {
        Some(text) => Value::String(text.to_owned()),
        None => serde_json::from_str(right).map_err(|_| format!("bad filter value {right:?}"))?,
    };
    Ok(Step::Filter {
        path: parse_steps(path)?,
        equal,
        value,
    })
}

fn unquote(text: &str) -> Option<&str> {
    text.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

fn apply<'a>(step: &Step, value: &'a Value) -> Vec<&'a Value> {
    match (step, value) {
        (Step::Field(name), Value::Object(map)) => map.get(name).into_iter().collect(),
        (Step::Index(i), Value::Array(list)) => {
            let len = i64::try_from(list.len()).unwrap_or(i64::MAX);
            let at = if *i < 0 { len + i } else { *i };
            usize::try_from(at)
                .ok()
                .and_then(|at| list.get(at))
                .into_iter()
                .collect()
        }
        (Step::All, Value::Array(list)) => list.iter().collect(),
        (Step::All, Value::Object(map)) => map.values().collect(),
        (
            Step::Filter {
                path,
                equal,
                value: wanted,
            },
            Value::Array(list),
        ) => list
            .iter()
            .filter(|item| {
                let found = JsonPath(path.clone()).find(item);
                let matches = found.first().is_some_and(|v| *v == wanted);
                matches == *equal && (!found.is_empty() || !*equal)
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn first(path: &str, object: &Value) -> Option<Value> {
        JsonPath::parse(path)
            .unwrap()
            .find(object)
            .first()
            .map(|v| (*v).clone())
    }

    #[test]
    fn the_paths_printer_columns_use() {
        let object = json!({
            "spec": {"replicas": 3, "odd.key": "x", "list": [1, 2, 3]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Synced", "status": "False"},
            ]},
        });
        assert_eq!(first(".spec.replicas", &object), Some(json!(3)));
        assert_eq!(first("{.spec.replicas}", &object), Some(json!(3)));
        assert_eq!(first(".spec['odd.key']", &object), Some(json!("x")));
        assert_eq!(first(".spec.list[1]", &object), Some(json!(2)));
        assert_eq!(first(".spec.list[-1]", &object), Some(json!(3)));
        assert_eq!(
            first(".status.conditions[?(@.type==\"Synced\")].status", &object),
            Some(json!("False"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type=='Ready')].status", &object),
            Some(json!("True"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type!='Ready')].type", &object),
            Some(json!("Synced"))
        );
        assert_eq!(first(".spec.missing", &object), None);
        assert_eq!(
            JsonPath::parse(".status.conditions[*].type")
                .unwrap()
                .find(&object)
                .len(),
            2
        );
        assert!(JsonPath::parse(".spec..x").is_err());
        assert!(JsonPath::parse(".spec[?(@.a > 1)]").is_err());
    }
}
