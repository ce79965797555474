//! Metric names: the summary flattened to `key.sub[i].leaf` -> value with units last, and
//! the old spellings still accepted.

use super::Summary;
use crate::decision::Branch;

/// Summary keys that identify rather than measure.
const NOT_METRICS: [&str; 8] = [
    "scenario",
    "seed",
    "policy",
    "version",
    "worst_moment",
    "scale_events",
    "replica_timeline",
    "pods",
];

/// Adds the numbers in `v` to `out` as `prefix.key[i].leaf` -> value (booleans as 0/1;
/// strings and nulls left out). Shared by sweeps, checks and goldens so a metric has one
/// name everywhere.
pub fn flatten_json(prefix: &str, v: &serde_json::Value, out: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::Value;
    match v {
        Value::Number(_) => {
            out.insert(prefix.to_string(), v.clone());
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), Value::from(u8::from(*b)));
        }
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten_json(&p, x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten_json(&format!("{prefix}[{i}]"), x, out);
            }
        }
        Value::String(_) | Value::Null => {}
    }
}

/// The summary's numbers as `key.sub[i].leaf` -> value (strings and identifiers left out),
/// percentiles named with the unit last: `ttft_s.p99` in `summary.json` is `ttft_p99_s`,
/// its count `ttft_count`, `decision_regret.p50` is `decision_regret_p50`.
pub fn flatten(s: &Summary) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::{Map, Value};
    let mut out = Map::new();
    if let Value::Object(m) = serde_json::to_value(s).expect("a summary serializes") {
        for (k, v) in m {
            if NOT_METRICS.contains(&k.as_str()) {
                continue;
            }
            match &v {
                Value::Object(p) if p.contains_key("p50") => {
                    for (leaf, x) in p {
                        flatten_json(&percentile_name(&k, leaf), x, &mut out);
                    }
                }
                _ => flatten_json(&k, &v, &mut out),
            }
        }
    }
    out
}

/// How evenly the requests spread over the backends, queue or not: the share metrics of the
/// summary (`docs/OUTPUTS.md`), in the order reports print them.
pub const SHARE_METRICS: [&str; 5] = [
    "request_jain_index",
    "request_share_max_min_ratio",
    "request_share_max",
    "request_share_min",
    "backends_never_served",
];

/// Per-backend share metrics (`backends[i].NAME`).
pub const BACKEND_SHARE_METRICS: [&str; 2] = ["request_share", "share_per_capacity"];

/// Unit suffixes that go last in a metric name.
pub const UNITS: [&str; 3] = ["_per_s", "_rps", "_s"];

/// `(name without its unit, unit)`: `("ttft", "_s")`, `("peak_waiting", "")`.
pub fn split_unit(name: &str) -> (&str, &str) {
    UNITS
        .iter()
        .find_map(|u| name.strip_suffix(u).map(|b| (b, *u)))
        .unwrap_or((name, ""))
}

/// `ttft_s` + `p99` -> `ttft_p99_s`; the count has no unit: `ttft_count`.
fn percentile_name(key: &str, leaf: &str) -> String {
    let (base, unit) = split_unit(key);
    if leaf == "count" {
        format!("{base}_count")
    } else {
        format!("{base}_{leaf}{unit}")
    }
}

/// A statistic of a metric with the unit kept last: (`ttft_p99_s`, `mean`) ->
/// `ttft_p99_mean_s`, (`peak_backend_sessions`, `std`) -> `peak_backend_sessions_std`.
pub fn stat_name(metric: &str, stat: &str) -> String {
    let (base, unit) = split_unit(metric);
    format!("{base}_{stat}{unit}")
}

/// The current name of a metric written in the old style (before units went last):
/// `ttft_s.p99` -> `ttft_p99_s`, `decision_regret.max` -> `decision_regret_max`; other
/// names are returned unchanged. Keeps older `[expect]` bounds, `--metric`s and goldens
/// working.
pub fn canonical_metric(name: &str) -> std::borrow::Cow<'_, str> {
    const LEAVES: [&str; 6] = ["count", "mean", "p50", "p90", "p99", "max"];
    if let Some((key, leaf)) = name.split_once('.')
        && LEAVES.contains(&leaf)
        && !key.contains(['.', '['])
    {
        return percentile_name(key, leaf).into();
    }
    name.into()
}

/// Whether `name` is a metric a run reports: a fleet-level summary key (`ttft_p99_s`, or its
/// old spelling `ttft_s.p99`) or a
/// per-backend one (`backends[3].peak_waiting`).
pub fn known_metric(name: &str) -> bool {
    use std::sync::OnceLock;
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let mut s = Summary::default();
        s.backends.push(Default::default());
        // The autoscaler's keys are metrics of the runs that have one.
        s.autoscale = Some(Default::default());
        s.backends[0].cost = Some(Default::default());
        // So are the SLO's (with `[slo]`) and a fixed fleet's cost (`[slo]` or `[price]`).
        s.slo = Some(super::SloSummary {
            slo_ttft_s: Some(0.0),
            slo_tpot_s: Some(0.0),
            slo_e2e_s: Some(0.0),
            slo_groups: vec![Default::default()],
            ..Default::default()
        });
        s.fleet_cost = Some(Default::default());
        s.decisions_by_branch = Branch::ALL.iter().map(|b| (b.as_str().to_string(), 0)).collect();
        flatten(&s).keys().cloned().collect()
    });
    if let Some(rest) = name.strip_prefix("backends[")
        && let Some((idx, field)) = rest.split_once("].")
        && idx.parse::<u32>().is_ok()
    {
        return keys.iter().any(|k| k.strip_prefix("backends[0].") == Some(field));
    }
    let name = canonical_metric(name);
    keys.iter().any(|k| *k == name)
}

#[cfg(test)]
mod tests {
    use super::super::percentiles;
    use super::*;

    #[test]
    fn share_metrics_are_summary_metrics() {
        for m in SHARE_METRICS {
            assert!(known_metric(m), "{m}");
        }
        for m in BACKEND_SHARE_METRICS {
            assert!(known_metric(&format!("backends[2].{m}")), "{m}");
        }
    }

    #[test]
    fn metric_names_put_the_unit_last() {
        let s = Summary {
            ttft_s: percentiles(vec![1.0, 2.0]),
            ..Default::default()
        };
        let m = flatten(&s);
        assert_eq!(m["ttft_p99_s"], serde_json::json!(1.99));
        assert_eq!(m["ttft_count"], serde_json::json!(2));
        assert!(
            m.contains_key("decision_regret_p50")
                && m.contains_key("tpot_p90_s")
                && m.contains_key("output_tokens_per_s")
        );
        assert!(
            !m.keys().any(|k| k.contains("_s.")),
            "{:?}",
            m.keys().collect::<Vec<_>>()
        );
        assert_eq!(canonical_metric("ttft_s.p99"), "ttft_p99_s");
        assert_eq!(canonical_metric("queue_wait_s.count"), "queue_wait_count");
        assert_eq!(canonical_metric("decision_regret.max"), "decision_regret_max");
        assert_eq!(canonical_metric("backends[1].busy_s"), "backends[1].busy_s");
        assert_eq!(canonical_metric("requests.finished"), "requests.finished");
        assert!(
            known_metric("ttft_s.p99")
                && known_metric("tpot_p99_s")
                && known_metric("itl_p90_s")
                && known_metric("itl_s.p99")
                && !known_metric("ttft_s.p98")
        );
        assert_eq!(stat_name("ttft_p99_s", "mean"), "ttft_p99_mean_s");
        assert_eq!(stat_name("throughput_rps", "ci95"), "throughput_ci95_rps");
        assert_eq!(stat_name("output_tokens_per_s", "std"), "output_tokens_std_per_s");
        assert_eq!(stat_name("latched_sessions", "mean"), "latched_sessions_mean");
    }
}
