//! Defaults of the raw file's keys, one function per key (serde's `default = ...`) and the
//! `Default` of each optional table, so every default is in one place (upstream's where it
//! models an upstream flag).

use super::schema::{ClientFile, LimitsFile, NetworkFile, RouterFile};

impl Default for ClientFile {
    fn default() -> Self {
        ClientFile {
            max_retries: default_retries(),
            retry_initial_delay_s: default_retry_initial(),
            retry_max_delay_s: default_retry_max(),
        }
    }
}

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

impl Default for LimitsFile {
    fn default() -> Self {
        LimitsFile {
            max_sim_time_s: None,
            max_events: default_max_events(),
            max_memory_gib: None,
        }
    }
}

pub(super) fn default_max_events() -> u64 {
    1_000_000_000
}

impl Default for NetworkFile {
    fn default() -> Self {
        NetworkFile {
            dispatch_latency_s: default_dispatch(),
            response_latency_s: default_response(),
        }
    }
}

pub(super) fn default_dispatch() -> f64 {
    0.002
}
pub(super) fn default_response() -> f64 {
    0.001
}

impl Default for RouterFile {
    fn default() -> Self {
        RouterFile {
            engine_stats_interval_s: None,
            scrape_duration_s: default_scrape(),
            request_stats_window_s: default_window(),
            request_stats_lag_s: 0.0,
            chars_per_token: default_cpt(),
            kv_event_lag_s: default_kv_lag(),
            replicas: default_replicas(),
            scrape_jitter_s: 0.0,
            engine_stats_phase: 0.0,
            front: default_front(),
            fresh_signals: false,
            policy: None,
        }
    }
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

pub(super) fn default_tie() -> String {
    "random".into()
}
pub(super) fn default_fallback() -> String {
    "qps".into()
}
pub(super) fn default_band() -> i64 {
    1
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
