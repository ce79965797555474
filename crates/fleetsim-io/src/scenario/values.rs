//! Value helpers shared by the section validators: typed deserialisation of a sub-table with
//! its key path, seconds to integer nanoseconds, counts, distributions, tagged tables.

use serde::de::DeserializeOwned;

use super::{FieldError, Res};
use fleetsim_core::dist::{Dist, DistTable};
use fleetsim_core::policy::params;
use fleetsim_core::time::SimDuration;

pub(super) fn from_value<T: DeserializeOwned>(v: &toml::Value, path: &str) -> Res<T> {
    serde_path_to_error::deserialize(v.clone()).map_err(|e| {
        let inner = e.path().to_string();
        let p = if inner == "." || inner.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{inner}")
        };
        FieldError::new(p, super::suggest::unknown_field(e.into_inner().message().trim()))
    })
}

/// Seconds to nanoseconds (the same rule as the policies' durations).
pub(super) fn secs(v: f64, path: &str, allow_zero: bool) -> Res<SimDuration> {
    params::secs(v, path, allow_zero).map_err(|e| FieldError::new(e.key, e.message))
}

/// An integer count `>= min` (the same rule as the policies' counts).
pub(super) fn count(v: i64, path: &str, min: i64) -> Res<u32> {
    params::count(v, path, min).map_err(|e| FieldError::new(e.key, e.message))
}

/// A count `>= min` and `<= max`; `above` says why a larger one is refused.
pub(super) fn count_within(v: i64, path: &str, min: i64, max: u32, above: impl Fn(u32) -> String) -> Res<u32> {
    count(v, path, min).and_then(|c| {
        if c > max {
            Err(FieldError::new(path, above(c)))
        } else {
            Ok(c)
        }
    })
}

pub(super) fn dist(v: &toml::Value, path: &str) -> Res<Dist> {
    match v {
        toml::Value::Integer(i) => Dist::constant(*i as f64).map_err(|m| FieldError::new(path, m)),
        toml::Value::Float(f) => Dist::constant(*f).map_err(|m| FieldError::new(path, m)),
        toml::Value::Table(_) => {
            let t: DistTable = from_value(v, path)?;
            Dist::from_table(&t).map_err(|(k, m)| FieldError::new(format!("{path}.{k}"), m))
        }
        other => Err(FieldError::new(
            path,
            format!(
                "expected a number or a distribution table such as {{ dist = \"exponential\", mean = 1.0 }}, got {}",
                other.type_str()
            ),
        )),
    }
}

pub(super) fn tag<'a>(t: &'a toml::Table, key: &str, path: &str, valid: &str) -> Res<&'a str> {
    match t.get(key) {
        Some(toml::Value::String(s)) => Ok(s),
        Some(other) => Err(FieldError::new(
            format!("{path}.{key}"),
            format!("expected a string (one of {valid}), got {}", other.type_str()),
        )),
        None => Err(FieldError::new(path, format!("missing `{key}` (one of {valid})"))),
    }
}

pub(super) fn without(t: &toml::Table, key: &str) -> toml::Value {
    let mut t = t.clone();
    t.remove(key);
    toml::Value::Table(t)
}
