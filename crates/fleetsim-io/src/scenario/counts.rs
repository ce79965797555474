//! Count-valued distributions (`turns`, `output_tokens`): a value the sampler would clamp or
//! round into another (`turns = 0.5`, `output_tokens = 0`) is refused at load, naming the key.

use super::FieldError;

/// Checks a count written as a number or a distribution table: a number must be a whole
/// number >= `min`; a table's `value`, `min` and `mean` (when given) must not lie below `min`.
pub fn check(v: &toml::Value, path: &str, min: i64, what: &str) -> Result<(), FieldError> {
    let low = |x: f64, key: &str| {
        let at = if key.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{key}")
        };
        FieldError::new(at, format!("{what} must be at least {min}, got {x}"))
    };
    match v {
        toml::Value::Integer(i) if *i < min => Err(low(*i as f64, "")),
        toml::Value::Float(f) if f.fract() != 0.0 || !f.is_finite() => Err(FieldError::new(
            path,
            format!("{what} is a count: a whole number >= {min} (or a distribution), got {f}"),
        )),
        toml::Value::Float(f) if *f < min as f64 => Err(low(*f, "")),
        toml::Value::Table(t) => {
            let dist = t.get("dist").and_then(toml::Value::as_str).unwrap_or("");
            for key in ["value", "mean", "max"] {
                let x = t
                    .get(key)
                    .and_then(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)));
                // A uniform may start below `min` (draws are floored at it), not end there.
                if let Some(x) = x.filter(|x| *x < min as f64 && (key != "max" || dist == "uniform")) {
                    return Err(low(x, key));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> toml::Value {
        toml::from_str::<toml::Table>(&format!("x = {s}")).unwrap()["x"].clone()
    }

    #[test]
    fn refuses_counts_that_would_be_clamped_or_rounded() {
        assert!(check(&v("1"), "g.turns", 1, "turns").is_ok());
        assert!(check(&v("3.0"), "g.turns", 1, "turns").is_ok());
        assert!(check(&v("{ dist = \"uniform\", min = 0, max = 4 }"), "g.turns", 1, "turns").is_ok());
        let e = check(&v("0"), "g.turns", 1, "turns").unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.message.as_str()),
            ("g.turns", "turns must be at least 1, got 0")
        );
        let e = check(&v("0.5"), "g.turns", 1, "turns").unwrap_err();
        assert!(e.message.contains("a whole number >= 1"), "{e:?}");
        let e = check(
            &v("{ dist = \"constant\", value = 0 }"),
            "g.output_tokens",
            1,
            "output_tokens",
        )
        .unwrap_err();
        assert_eq!(e.path, "g.output_tokens.value");
        let e = check(&v("{ dist = \"exponential\", mean = 0.5 }"), "g.turns", 1, "turns").unwrap_err();
        assert_eq!(e.path, "g.turns.mean");
        let e = check(&v("{ dist = \"uniform\", min = 0, max = 0.5 }"), "g.turns", 1, "turns").unwrap_err();
        assert_eq!(e.path, "g.turns.max");
    }
}
