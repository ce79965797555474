//! Golden results and `sim compare`: compact flattened summaries, and metric-by-metric
//! deltas with tolerances.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::metrics::{Summary, flatten, flatten_json};

/// A golden file: what produced it and its metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Golden {
    /// fleetsim version.
    pub fleetsim_version: String,
    /// Scenario name.
    pub scenario: String,
    /// SHA-256 of the effective scenario text (overrides applied).
    pub scenario_sha256: String,
    /// Seed.
    pub seed: u64,
    /// Policy description.
    pub policy: String,
    /// Flattened numeric summary metrics.
    pub metrics: Map<String, Value>,
}

impl Golden {
    /// The golden record of a run.
    pub fn of(summary: &Summary, effective_scenario: &str) -> Golden {
        Golden {
            fleetsim_version: env!("CARGO_PKG_VERSION").to_string(),
            scenario: summary.scenario.clone(),
            scenario_sha256: crate::sweep::sha256_hex(effective_scenario.as_bytes()),
            seed: summary.seed,
            policy: summary.policy.clone(),
            metrics: flatten(summary),
        }
    }
}

/// Default golden path of a scenario.
pub fn golden_path(dir: &Path, scenario: &str) -> PathBuf {
    dir.join(format!("{scenario}.json"))
}

/// Loads metrics from a golden file, a `summary.json`, or a results folder holding one.
pub fn load_metrics(path: &Path) -> Result<(String, Map<String, Value>)> {
    let (label, m) = load_raw(path)?;
    // Old goldens name percentiles `ttft_s.p99`; today's name is `ttft_p99_s`.
    let m = m
        .into_iter()
        .map(|(k, v)| (crate::metrics::canonical_metric(&k).into_owned(), v))
        .collect();
    Ok((label, m))
}

fn load_raw(path: &Path) -> Result<(String, Map<String, Value>)> {
    let sweep = if path.is_dir() {
        path.join("sweep.json")
    } else {
        path.to_path_buf()
    };
    if sweep.file_name().is_some_and(|n| n == "sweep.json") && sweep.is_file() {
        return sweep_metrics(&sweep);
    }
    let file = if path.is_dir() {
        // A results folder must hold one whole run.
        crate::atomic::verify(path)?;
        path.join("summary.json")
    } else {
        // A summary.json inside a results folder is checked against its manifest too.
        if let Some(dir) = path.parent().filter(|d| d.join(crate::atomic::MANIFEST).is_file()) {
            crate::atomic::verify(dir)?;
        }
        path.to_path_buf()
    };
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let v: Value = serde_json::from_slice(&bytes).with_context(|| format!("{}: not JSON", file.display()))?;
    if v.get("metrics").is_some() {
        let g: Golden = serde_json::from_value(v).with_context(|| format!("{}: not a golden file", file.display()))?;
        // A metric that is not a number is bad input (exit 2), not a difference (exit 1).
        if let Some((k, v)) = g.metrics.iter().find(|(_, v)| !v.is_number()) {
            bail!("{}: metrics.{k}: expected a number, got {v}", file.display());
        }
        return Ok((format!("{} seed {} ({})", g.scenario, g.seed, g.policy), g.metrics));
    }
    if v.get("idle_while_queued_s").is_some() {
        let label = format!(
            "{} seed {} ({})",
            v["scenario"].as_str().unwrap_or("?"),
            v["seed"],
            v["policy"].as_str().unwrap_or("?")
        );
        let mut m = Map::new();
        flatten_json("", &v, &mut m);
        for k in ["seed", "version"] {
            m.remove(k);
        }
        m.retain(|k, _| !k.starts_with("worst_moment"));
        return Ok((label, m));
    }
    bail!("{}: neither a golden file nor a summary.json", file.display())
}

/// A sweep's per-point means as metrics named `[axis=label, ...] <metric>_mean<unit>`
/// (`[interval=1, band=0] ttft_p99_mean_s`), so two sweeps over the same grid compare
/// point by point.
fn sweep_metrics(file: &Path) -> Result<(String, Map<String, Value>)> {
    let f = crate::sweep::table::read(file)?;
    let plan = &f.meta.plan;
    let agg = crate::sweep::table::aggregate(&f.rows);
    let mut m = Map::new();
    for (p, stats) in &agg.points {
        let point: Vec<String> = plan
            .axes
            .iter()
            .zip(plan.labels(*p))
            .map(|(a, l)| format!("{}={l}", a.name))
            .collect();
        for (c, st) in agg.columns.iter().zip(stats) {
            if let Some(x) = serde_json::Number::from_f64(st.mean) {
                m.insert(
                    format!("[{}] {}", point.join(", "), crate::metrics::stat_name(c, "mean")),
                    Value::Number(x),
                );
            }
        }
    }
    let label = format!(
        "sweep {}: {} points x {} seeds",
        f.meta.scenario,
        f.meta.points,
        plan.seeds.len()
    );
    Ok((label, m))
}

/// Tolerances: a metric passes when `|b - a| <= abs + rel * |a|`.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Absolute.
    pub abs: f64,
    /// Relative to the baseline.
    pub rel: f64,
}

/// One metric's comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// Metric.
    pub metric: String,
    /// Baseline value (None if absent).
    pub a: Option<f64>,
    /// New value (None if absent).
    pub b: Option<f64>,
    /// Within tolerance.
    pub ok: bool,
}

/// Compares every metric present in either side (restricted to `only` when non-empty), in
/// the baseline's order then the new side's extras.
pub fn compare(a: &Map<String, Value>, b: &Map<String, Value>, tol: Tolerance, only: &[String]) -> Vec<Delta> {
    let mut keys: Vec<&String> = a.keys().collect();
    keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
    keys.into_iter()
        .filter(|k| only.is_empty() || only.iter().any(|o| o == *k))
        // Non-numeric values on both sides are not metrics.
        .filter(|k| a.get(*k).is_none_or(Value::is_number) || b.get(*k).is_none_or(Value::is_number))
        .map(|k| {
            let x = a.get(k).and_then(Value::as_f64);
            let y = b.get(k).and_then(Value::as_f64);
            let ok = match (x, y) {
                (Some(x), Some(y)) => (y - x).abs() <= tol.abs + tol.rel * x.abs(),
                _ => false,
            };
            Delta {
                metric: k.clone(),
                a: x,
                b: y,
                ok,
            }
        })
        .collect()
}

/// The comparison as a table: every metric beyond tolerance, plus changed ones within it
/// when `all` is set.
pub fn render(deltas: &[Delta], label_a: &str, label_b: &str, all: bool) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), crate::sweep::table::fmt_stat);
    let mut rows: Vec<Vec<String>> = Vec::new();
    for d in deltas {
        let changed = d.a != d.b;
        if !(all && changed) && d.ok {
            continue;
        }
        let (diff, rel) = match (d.a, d.b) {
            (Some(a), Some(b)) => (
                crate::sweep::table::fmt_stat(b - a),
                if a != 0.0 {
                    format!("{:+.2}%", (b - a) / a.abs() * 100.0)
                } else {
                    String::new()
                },
            ),
            _ => (String::new(), String::new()),
        };
        rows.push(vec![
            d.metric.clone(),
            f(d.a),
            f(d.b),
            diff,
            rel,
            if d.ok { "ok".into() } else { "BEYOND TOLERANCE".into() },
        ]);
    }
    let mut out = format!("A: {label_a}\nB: {label_b}\n");
    if rows.is_empty() {
        let same = deltas.iter().filter(|d| d.a == d.b).count();
        out.push_str(&format!(
            "all {} metrics within tolerance ({same} identical)\n",
            deltas.len()
        ));
        return out;
    }
    out.push_str(&crate::output::render(
        &["metric", "A", "B", "B - A", "rel", ""],
        rows,
        &[],
    ));
    let bad = deltas.iter().filter(|d| !d.ok).count();
    out.push_str(&format!("{bad} of {} metrics beyond tolerance\n", deltas.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, f64)]) -> Map<String, Value> {
        pairs.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect()
    }

    #[test]
    fn tolerances_and_missing_metrics() {
        let a = m(&[("x", 100.0), ("y", 1.0), ("gone", 1.0)]);
        let b = m(&[("x", 104.0), ("y", 1.0), ("new", 2.0)]);
        let d = compare(&a, &b, Tolerance { abs: 0.0, rel: 0.05 }, &[]);
        let ok: Vec<(&str, bool)> = d.iter().map(|d| (d.metric.as_str(), d.ok)).collect();
        assert_eq!(ok, [("x", true), ("y", true), ("gone", false), ("new", false)]);
        let d = compare(&a, &b, Tolerance { abs: 0.0, rel: 0.01 }, &["x".into()]);
        assert_eq!(d.len(), 1);
        assert!(!d[0].ok);
        let t = render(&d, "a", "b", false);
        assert!(t.contains("BEYOND TOLERANCE") && t.contains("+4.00%"), "{t}");
    }
}
