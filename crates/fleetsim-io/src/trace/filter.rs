//! The `where` row filter of a `format = "sessions"` trace: keep only the calls whose
//! columns hold given values, e.g. `where = { is_error = false }` to drop errored calls,
//! `where = { status = ["ok", "length"], model = "m" }`.
//!
//! A condition is `column = value` or `column = [value, ...]` (one of them); every
//! condition must hold. A boolean matches `true`/`false` in any case (and `1`/`0` in a
//! CSV), a number matches numerically (`1`, `1.0`, `"1"`), a string matches the field's
//! text exactly. A row whose field is absent or empty matches nothing. In a CSV every
//! filtered column must be in the header; in JSONL at least one row must have it.

/// One value a condition accepts.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterValue {
    /// `true` / `false`.
    Bool(bool),
    /// A number (integers compare exactly up to 2^53).
    Number(f64),
    /// Exact text.
    Text(String),
}

/// `column = value | [values]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RowFilter {
    /// The column (CSV header name or JSON key).
    pub column: String,
    /// Values that keep the row.
    pub any_of: Vec<FilterValue>,
}

impl FilterValue {
    fn of(v: &toml::Value) -> Option<FilterValue> {
        match v {
            toml::Value::Boolean(b) => Some(FilterValue::Bool(*b)),
            toml::Value::Integer(i) => Some(FilterValue::Number(*i as f64)),
            toml::Value::Float(f) if f.is_finite() => Some(FilterValue::Number(*f)),
            toml::Value::String(s) => Some(FilterValue::Text(s.clone())),
            _ => None,
        }
    }

    /// Whether a field holding `text` (a CSV cell or a JSON scalar's text) or the JSON
    /// value `json` matches.
    fn matches(&self, text: &str, json: Option<&serde_json::Value>) -> bool {
        let t = text.trim();
        match self {
            FilterValue::Bool(b) => {
                let word = if *b { "true" } else { "false" };
                match json {
                    Some(serde_json::Value::Bool(x)) => x == b,
                    Some(serde_json::Value::String(_)) => t.eq_ignore_ascii_case(word),
                    None => t.eq_ignore_ascii_case(word) || t == if *b { "1" } else { "0" },
                    Some(_) => false,
                }
            }
            FilterValue::Number(x) => match json {
                Some(serde_json::Value::Number(n)) => n.as_f64() == Some(*x),
                Some(serde_json::Value::String(_)) | None => t.parse::<f64>().ok() == Some(*x),
                Some(_) => false,
            },
            FilterValue::Text(s) => match json {
                Some(serde_json::Value::String(v)) => v == s,
                Some(serde_json::Value::Number(n)) => n.to_string() == *s,
                Some(_) => false,
                None => t == s,
            },
        }
    }
}

impl RowFilter {
    /// Whether a CSV cell matches (`None`: absent).
    pub fn matches_text(&self, cell: Option<&str>) -> bool {
        match cell {
            Some(c) if !c.trim().is_empty() => self.any_of.iter().any(|v| v.matches(c, None)),
            _ => false,
        }
    }

    /// Whether a JSON field matches (`None` or null: absent).
    pub fn matches_json(&self, v: Option<&serde_json::Value>) -> bool {
        match v {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::String(s)) if s.trim().is_empty() => false,
            Some(x) => {
                let text = match x {
                    serde_json::Value::String(s) => s.clone(),
                    o => o.to_string(),
                };
                self.any_of.iter().any(|f| f.matches(&text, Some(x)))
            }
        }
    }
}

/// Parses a `where` table; errors are `(key path under the trace table, message)`.
pub fn parse(v: &toml::Value) -> Result<Vec<RowFilter>, (String, String)> {
    let toml::Value::Table(t) = v else {
        return Err((
            "where".into(),
            "expected a table of column = value, e.g. where = { is_error = false }".into(),
        ));
    };
    if t.is_empty() {
        return Err(("where".into(), "names no column".into()));
    }
    let mut out = Vec::new();
    for (col, val) in t {
        let key = format!("where.{col}");
        let bad = || {
            (
                key.clone(),
                format!(
                    "expected a boolean, number or string, or a list of them, got {}",
                    crate::quote::escape(&val.to_string())
                ),
            )
        };
        let any_of = match val {
            toml::Value::Array(a) if a.is_empty() => return Err((key, "an empty list keeps no row".into())),
            toml::Value::Array(a) => a
                .iter()
                .map(|x| FilterValue::of(x).ok_or_else(bad))
                .collect::<Result<_, _>>()?,
            x => vec![FilterValue::of(x).ok_or_else(bad)?],
        };
        if col.is_empty() {
            return Err((key, "names no column".into()));
        }
        out.push(RowFilter {
            column: col.clone(),
            any_of,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(text: &str) -> Vec<RowFilter> {
        parse(&toml::from_str::<toml::Table>(&format!("w = {text}")).unwrap()["w"]).unwrap()
    }

    #[test]
    fn values_match_by_type() {
        let b = &f("{ is_error = false }")[0];
        assert!(b.matches_text(Some("false")) && b.matches_text(Some("FALSE")) && b.matches_text(Some("0")));
        assert!(!b.matches_text(Some("true")) && !b.matches_text(Some("")) && !b.matches_text(None));
        assert!(!b.matches_text(Some("no")));
        assert!(b.matches_json(Some(&serde_json::json!(false))));
        assert!(!b.matches_json(Some(&serde_json::json!(0))) && !b.matches_json(None));
        let n = &f("{ status = [200, 201] }")[0];
        assert!(n.matches_text(Some("200")) && n.matches_text(Some("201.0")) && !n.matches_text(Some("500")));
        assert!(n.matches_json(Some(&serde_json::json!(200))) && n.matches_json(Some(&serde_json::json!("201"))));
        let s = &f("{ model = \"m\" }")[0];
        assert!(s.matches_text(Some("m")) && !s.matches_text(Some("M")));
        assert!(s.matches_json(Some(&serde_json::json!("m"))));
    }

    #[test]
    fn bad_filters_name_the_key() {
        let e = |t: &str| parse(&toml::from_str::<toml::Table>(&format!("w = {t}")).unwrap()["w"]).unwrap_err();
        assert_eq!(e("{ is_error = {} }").0, "where.is_error");
        assert_eq!(e("{ s = [] }").0, "where.s");
        assert_eq!(e("{}").0, "where");
        assert_eq!(e("3").0, "where");
        assert!(e("{ x = [1, {a = 1}] }").1.contains("boolean, number or string"));
    }
}
