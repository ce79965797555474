//! A policy table's values as the scenario wrote them, a serde deserializer over them that
//! names the key of any error, and the validators policies share.
//!
//! The scenario reader turns its `[router.policy]` table into a [`ParamValue`] (the core
//! knows no file format), and each policy deserializes its own parameter struct from it.
//! Errors carry the key path relative to the table, so the reader can name file, line and
//! `router.policy.KEY` exactly. Unlike a JSON value, a [`ParamValue`] holds any float,
//! `inf` and `nan` included, as TOML does.

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use crate::time::{SimDuration, secs_to_ns};

/// How ties between equally loaded endpoints break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tie {
    /// Uniformly at random (AIBrix).
    Random,
    /// First in discovery order (SGLang `min_by_key`).
    First,
}

impl Tie {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            Tie::Random => "random",
            Tie::First => "first",
        }
    }
}

/// One value of a policy table.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (any, `inf` and `nan` included).
    Float(f64),
    /// A string (datetimes arrive as their text).
    Str(String),
    /// A list.
    Array(Vec<ParamValue>),
    /// A table, keys in the file's order.
    Table(Vec<(String, ParamValue)>),
}

/// A parameter error: the key path inside the policy table (empty: the table itself) and
/// what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamError {
    /// `band`, `weights[2]`, or empty.
    pub key: String,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
}

impl ParamError {
    /// An error at `key`.
    pub fn new(key: &str, message: impl Into<String>) -> Self {
        ParamError {
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// The same error seen from the table that holds `outer` (a key or `[index]`).
    fn under(mut self, outer: &str) -> Self {
        self.key = match (self.key.is_empty(), self.key.starts_with('[')) {
            (true, _) => outer.to_string(),
            (false, true) => format!("{outer}{}", self.key),
            (false, false) => format!("{outer}.{}", self.key),
        };
        self
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamError {}

impl de::Error for ParamError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ParamError::new("", msg.to_string())
    }
}

/// Deserializes `T` (a policy's parameter struct) from its table, errors at their key.
pub fn deserialize<T: DeserializeOwned>(v: ParamValue) -> Result<T, ParamError> {
    T::deserialize(v)
}

struct MapAccess {
    items: std::vec::IntoIter<(String, ParamValue)>,
    key: String,
    value: Option<ParamValue>,
}

impl<'de> de::MapAccess<'de> for MapAccess {
    type Error = ParamError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ParamError> {
        let Some((k, v)) = self.items.next() else {
            return Ok(None);
        };
        self.key.clone_from(&k);
        self.value = Some(v);
        // An unknown key is an error at that key.
        seed.deserialize(k.into_deserializer())
            .map(Some)
            .map_err(|e: ParamError| e.under(&self.key))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ParamError> {
        let v = self.value.take().expect("serde asks for a value after its key");
        seed.deserialize(v).map_err(|e| e.under(&self.key))
    }
}

struct SeqAccess {
    items: std::vec::IntoIter<ParamValue>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for SeqAccess {
    type Error = ParamError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, ParamError> {
        let Some(v) = self.items.next() else {
            return Ok(None);
        };
        let i = self.index;
        self.index += 1;
        seed.deserialize(v).map(Some).map_err(|e| e.under(&format!("[{i}]")))
    }
}

impl<'de> de::Deserializer<'de> for ParamValue {
    type Error = ParamError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        match self {
            ParamValue::Bool(b) => visitor.visit_bool(b),
            ParamValue::Int(i) => visitor.visit_i64(i),
            ParamValue::Float(f) => visitor.visit_f64(f),
            ParamValue::Str(s) => visitor.visit_string(s),
            ParamValue::Array(a) => {
                let n = a.len();
                let mut seq = SeqAccess {
                    items: a.into_iter(),
                    index: 0,
                };
                let v = visitor.visit_seq(&mut seq)?;
                if seq.items.len() > 0 {
                    return Err(de::Error::invalid_length(n, &"fewer elements"));
                }
                Ok(v)
            }
            ParamValue::Table(t) => visitor.visit_map(MapAccess {
                items: t.into_iter(),
                key: String::new(),
                value: None,
            }),
        }
    }

    /// A key that is present is `Some` (absent keys never reach the deserializer).
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// A policy without parameters: any key is unknown.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// An integer count `>= min` that fits a `u32`.
pub fn count(v: i64, key: &str, min: i64) -> Result<u32, ParamError> {
    if v < min || v > i64::from(u32::MAX) {
        return Err(ParamError::new(
            key,
            format!("must be an integer >= {min} and <= {}, got {v}", u32::MAX),
        ));
    }
    Ok(v as u32)
}

/// Seconds to integer nanoseconds: finite, `> 0` (or `>= 0` with `allow_zero`), within the
/// simulator's range and resolution.
pub fn secs(v: f64, key: &str, allow_zero: bool) -> Result<SimDuration, ParamError> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        let want = if allow_zero { ">= 0" } else { "> 0" };
        return Err(ParamError::new(
            key,
            format!("must be a finite number of seconds {want}, got {v}"),
        ));
    }
    if v > 1e9 {
        return Err(ParamError::new(
            key,
            format!("{v} s is beyond the simulator's range (1e9 s)"),
        ));
    }
    let ns = secs_to_ns(v);
    if !allow_zero && ns == 0 {
        return Err(ParamError::new(
            key,
            format!("{v} s is below the simulator's 1 ns resolution"),
        ));
    }
    Ok(SimDuration(ns))
}

/// A fraction in `[0, 1]`.
pub fn unit(v: f64, key: &str) -> Result<f64, ParamError> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(ParamError::new(key, format!("must be in [0, 1], got {v}")))
    }
}

/// A finite weight `>= 0`.
pub fn weight(v: f64, key: &str) -> Result<f64, ParamError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ParamError::new(key, format!("must be a finite weight >= 0, got {v}")))
    }
}

/// A finite number `>= 0`.
pub fn finite_non_negative(v: f64, key: &str) -> Result<f64, ParamError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ParamError::new(key, format!("must be a finite number >= 0, got {v}")))
    }
}

/// An integer `>= 0`; `unit` names what it counts in the message.
pub fn non_negative(v: i64, key: &str, unit: &str) -> Result<u64, ParamError> {
    if v < 0 {
        return Err(ParamError::new(key, format!("must be >= 0 {unit}, got {v}")));
    }
    Ok(v as u64)
}

/// Largest index any prefix-cache policy may be configured to hold (entries).
const MAX_INDEX_ENTRIES: i64 = 10_000_000;

/// The size of a prefix index, in entries.
pub fn index_size(v: i64, key: &str) -> Result<u32, ParamError> {
    if !(1..=MAX_INDEX_ENTRIES).contains(&v) {
        return Err(ParamError::new(
            key,
            format!("must be between 1 and {MAX_INDEX_ENTRIES} entries, got {v}"),
        ));
    }
    Ok(v as u32)
}

/// A `tie` rule; `expected` names the upstreams of each choice for the message.
pub fn tie(v: &str, key: &str, expected: &str) -> Result<Tie, ParamError> {
    match v {
        "random" => Ok(Tie::Random),
        "first" => Ok(Tie::First),
        other => Err(ParamError::new(
            key,
            format!("unknown tie rule `{other}`; expected {expected}"),
        )),
    }
}

/// The `tie` of a policy whose upstream breaks ties to the first endpoint (the default);
/// `upstream` names that rule for the message.
pub fn tie_first(v: Option<&str>, key: &str, upstream: &str) -> Result<Tie, ParamError> {
    tie(
        v.unwrap_or("first"),
        key,
        &format!("`first` ({upstream}, the default) or `random`"),
    )
}

/// The tie rules of the least-in-flight choices, for messages.
pub const LEAST_INFLIGHT_TIES: &str = "`random` (PR #1089) or `first` (Python `min()`: first in discovery order)";

/// `, tie = first` when the tie rule is not the default (random), so existing reports keep
/// their wording.
pub fn tie_suffix(tie: Tie) -> &'static str {
    match tie {
        Tie::Random => "",
        Tie::First => ", tie = first",
    }
}

/// `, tie = random` when a policy whose upstream breaks ties to the first endpoint is run
/// with random ties (a what-if), so reports of the upstream rule keep their wording.
pub fn tie_suffix_first(tie: Tie) -> &'static str {
    match tie {
        Tie::First => "",
        Tie::Random => ", tie = random",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct P {
        #[serde(default)]
        band: i64,
        x: Option<f64>,
        list: Option<Vec<i64>>,
    }

    fn table(kv: &[(&str, ParamValue)]) -> ParamValue {
        ParamValue::Table(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    #[test]
    fn errors_name_their_key_and_floats_keep_inf() {
        let ok: P = deserialize(table(&[
            ("x", ParamValue::Float(f64::INFINITY)),
            ("band", ParamValue::Int(2)),
        ]))
        .unwrap();
        assert_eq!((ok.band, ok.x), (2, Some(f64::INFINITY)));
        let int_as_float: P = deserialize(table(&[("x", ParamValue::Int(3))])).unwrap();
        assert_eq!(int_as_float.x, Some(3.0));
        let e = deserialize::<P>(table(&[("bandd", ParamValue::Int(1))])).unwrap_err();
        assert_eq!(e.key, "bandd");
        assert!(e.message.starts_with("unknown field `bandd`, expected one of"), "{e}");
        let e = deserialize::<P>(table(&[("band", ParamValue::Str("two".into()))])).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.message.as_str()),
            ("band", "invalid type: string \"two\", expected i64")
        );
        let e = deserialize::<P>(table(&[("band", ParamValue::Float(1.5))])).unwrap_err();
        assert_eq!(e.message, "invalid type: floating point `1.5`, expected i64");
        let e = deserialize::<P>(table(&[(
            "list",
            ParamValue::Array(vec![ParamValue::Int(1), ParamValue::Bool(true)]),
        )]))
        .unwrap_err();
        assert_eq!(e.key, "list[1]");
        let e = deserialize::<P>(table(&[("band", ParamValue::Array(vec![]))])).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.message.as_str()),
            ("band", "invalid type: sequence, expected i64")
        );
    }

    #[test]
    fn validators_name_the_key() {
        assert_eq!(
            count(-1, "d", 1).unwrap_err().message,
            "must be an integer >= 1 and <= 4294967295, got -1"
        );
        assert_eq!(secs(0.0, "s", false).unwrap_err().key, "s");
        assert!(secs(0.0, "s", true).is_ok());
        assert!(weight(f64::NAN, "w").is_err());
        assert_eq!(tie_first(None, "tie", "x").unwrap(), Tie::First);
        assert!(
            tie("last", "tie", "")
                .unwrap_err()
                .message
                .contains("unknown tie rule `last`")
        );
    }
}
