//! Defaults of the raw file's keys, one function per key (serde's `default = ...`), so every
//! default value is in one place, upstream's where the key models an upstream flag (the
//! optional tables' `Default` impls in `schema.rs` call these).

pub(super) fn default_retries() -> i64 {
    2
}
pub(super) fn default_retry_initial() -> f64 {
    0.5
}
pub(super) fn default_retry_max() -> f64 {
    8.0
}

pub(super) fn default_seed() -> u64 {
    1
}

pub(super) fn default_max_events() -> u64 {
    1_000_000_000
}

pub(super) fn default_dispatch() -> f64 {
    0.002
}
pub(super) fn default_response() -> f64 {
    0.001
}

pub(super) fn default_scrape() -> f64 {
    0.01
}
pub(super) fn default_window() -> f64 {
    60.0
}
pub(super) fn default_replicas() -> i64 {
    1
}
pub(super) fn default_front() -> String {
    "round_robin".into()
}
pub(super) fn default_kv_lag() -> f64 {
    0.01
}
pub(super) fn default_cpt() -> i64 {
    4
}

pub(super) fn one() -> toml::Value {
    toml::Value::Integer(1)
}
pub(super) fn zero() -> toml::Value {
    toml::Value::Integer(0)
}
pub(super) fn yes() -> bool {
    true
}
