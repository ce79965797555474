//! A served or loaded run beside a simulated one: request share per backend, prefix hit
//! rate, idle-while-queued and latency percentiles, from each folder's `requests.csv` and
//! `summary.json` (what a folder lacks shows as `-`).
//!
//! A folder is a `sim run` output, a `sim load` output (`"kind": "load"`) or a `sim serve`
//! output (`"kind": "serve"`); `requests.csv` needs `backend`, `ttft_s` and `e2e_s` columns
//! (a backend given as a number is the index into `summary.json`'s `backends`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::metrics::{Percentiles, percentiles};

/// What one folder shows.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// `run`, `load` or `serve`.
    pub kind: String,
    /// Finished requests (a row with an `e2e_s`).
    pub finished: u64,
    /// Finished requests per backend name.
    pub per_backend: BTreeMap<String, u64>,
    /// Prefix-cache hit rate, if reported.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Time some backend idled while another queued, if measured.
    pub idle_while_queued_s: Option<f64>,
    /// Time to first token.
    pub ttft_s: Percentiles,
    /// End to end.
    pub e2e_s: Percentiles,
}

/// The kind of a folder: `serve` (`sim serve --out` writes `serve.json`), `load` or `run`.
pub fn kind_of(dir: &Path, summary: &serde_json::Value) -> String {
    if dir.join("serve.json").is_file() {
        return "serve".into();
    }
    summary["kind"].as_str().unwrap_or("run").to_string()
}

/// Whether `dir` is a served or loaded run (it holds `serve.json`, or its `summary.json`
/// says `"kind": "load"` or `"serve"`).
pub fn is_live(dir: &Path) -> bool {
    dir.join("serve.json").is_file()
        || std::fs::read_to_string(dir.join("summary.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| matches!(v["kind"].as_str(), Some("load" | "serve")))
}

/// Reads one folder.
pub fn read(dir: &Path) -> Result<Side> {
    let sp = dir.join("summary.json");
    let text = std::fs::read_to_string(&sp).with_context(|| format!("reading {}", sp.display()))?;
    let summary: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", sp.display()))?;
    let names: Vec<String> = summary["backends"]
        .as_array()
        .map(|a| a.iter().map(|b| b["name"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let rp = dir.join("requests.csv");
    let mut rdr = csv::Reader::from_path(&rp).with_context(|| format!("reading {}", rp.display()))?;
    let headers = rdr
        .headers()
        .with_context(|| format!("{}: no header", rp.display()))?
        .clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("{}: no `{name}` column", rp.display()))
    };
    let (cb, ct, ce) = (col("backend")?, col("ttft_s")?, col("e2e_s")?);
    let mut side = Side {
        kind: kind_of(dir, &summary),
        prefix_cache_hit_rate: summary["prefix_cache_hit_rate"].as_f64(),
        idle_while_queued_s: summary["idle_while_queued_s"].as_f64(),
        ..Side::default()
    };
    let (mut ttft, mut e2e) = (Vec::new(), Vec::new());
    for (i, row) in rdr.records().enumerate() {
        let row = row.with_context(|| format!("{}: row {}", rp.display(), i + 2))?;
        let num = |c: usize| row.get(c).and_then(|v| v.parse::<f64>().ok());
        let Some(e) = num(ce) else { continue };
        side.finished += 1;
        e2e.push(e);
        if let Some(t) = num(ct) {
            ttft.push(t);
        }
        let b = row.get(cb).unwrap_or("");
        let name = match b.parse::<usize>() {
            Ok(i) if i < names.len() => names[i].clone(),
            _ => b.to_string(),
        };
        *side.per_backend.entry(name).or_default() += 1;
    }
    side.ttft_s = percentiles(ttft);
    side.e2e_s = percentiles(e2e);
    Ok(side)
}

/// The relative tolerance of the side-by-side verdict when none is given: a served run is
/// another process on a wall clock, never equal to the simulation to the digit.
pub const DEFAULT_REL_TOL: f64 = 0.10;

/// The figures the table shows, by name (`share backend-0` as a fraction of the finished
/// requests), for the verdict; a figure a side lacks is absent.
pub fn figures(s: &Side, backends: &[&String]) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    let mut put = |k: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            m.insert(k, serde_json::json!(v));
        }
    };
    put("requests finished".into(), Some(s.finished as f64));
    for k in backends {
        let n = s.per_backend.get(*k).copied().unwrap_or(0);
        let share = (s.finished > 0).then(|| n as f64 / s.finished as f64);
        put(format!("share {}", label(k)), share);
    }
    put("prefix_cache_hit_rate".into(), s.prefix_cache_hit_rate);
    put("idle_while_queued_s".into(), s.idle_while_queued_s);
    for (metric, ps) in [("ttft_s", &s.ttft_s), ("e2e_s", &s.e2e_s)] {
        for (name, v) in [("p50", ps.p50), ("p90", ps.p90), ("p99", ps.p99)] {
            put(format!("{metric} {name}"), (ps.count > 0).then_some(v));
        }
    }
    m
}

/// Every backend of either side, sorted.
fn backends<'a>(a: &'a Side, b: &'a Side) -> Vec<&'a String> {
    let mut v: Vec<&String> = a.per_backend.keys().chain(b.per_backend.keys()).collect();
    v.sort();
    v.dedup();
    v
}

fn label(k: &str) -> &str {
    if k.is_empty() { "(unnamed)" } else { k }
}

/// The tolerance verdict under the table: the shown figures both sides have, each within
/// `abs + rel x |A|` of A or not; the text and whether all were within.
pub fn verdict(a: &Side, b: &Side, tol: crate::check::golden::Tolerance) -> (String, bool) {
    let names = backends(a, b);
    let (ma, mb) = (figures(a, &names), figures(b, &names));
    let both: Vec<String> = ma.keys().filter(|k| mb.contains_key(*k)).cloned().collect();
    let deltas = crate::check::golden::compare(&ma, &mb, tol, &both);
    let f = crate::sweep::table::fmt_stat;
    let beyond: Vec<String> = deltas
        .iter()
        .filter(|d| !d.ok)
        .map(|d| {
            let (x, y) = (d.a.unwrap_or(0.0), d.b.unwrap_or(0.0));
            let rel = if x != 0.0 {
                format!(" ({:+.1}%)", (y - x) / x.abs() * 100.0)
            } else {
                String::new()
            };
            format!("- {}: {} vs {}{rel}\n", d.metric, f(x), f(y))
        })
        .collect();
    let skipped = ma.len().max(mb.len()).saturating_sub(both.len());
    let mut out = format!(
        "verdict: {} of {} shown figures within tolerance (rel {}%, abs {:e})",
        deltas.len() - beyond.len(),
        deltas.len(),
        f(tol.rel * 100.0),
        tol.abs
    );
    if skipped > 0 {
        out.push_str(&format!("; {skipped} shown on one side only, not compared"));
    }
    if beyond.is_empty() {
        out.push('\n');
    } else {
        out.push_str("; beyond it:\n");
        out.push_str(&beyond.concat());
    }
    (out, beyond.is_empty())
}

/// The side-by-side table, Markdown.
pub fn render(a: &Side, la: &str, b: &Side, lb: &str) -> String {
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let f = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |v| format!("{v:.d$}"));
    rows.push((
        "requests finished".into(),
        a.finished.to_string(),
        b.finished.to_string(),
    ));
    let share = |s: &Side, k: &str| {
        let n = s.per_backend.get(k).copied().unwrap_or(0);
        if s.finished == 0 {
            "-".to_string()
        } else {
            format!("{n} ({:.1}%)", 100.0 * n as f64 / s.finished as f64)
        }
    };
    for k in backends(a, b) {
        rows.push((format!("share {}", label(k)), share(a, k), share(b, k)));
    }
    rows.push((
        "prefix_cache_hit_rate".into(),
        f(a.prefix_cache_hit_rate, 3),
        f(b.prefix_cache_hit_rate, 3),
    ));
    rows.push((
        "idle_while_queued_s".into(),
        f(a.idle_while_queued_s, 1),
        f(b.idle_while_queued_s, 1),
    ));
    // A side's p50, p90 and p99 of TTFT (or E2E), `-` where it has none.
    let quantiles = |s: &Side, ttft: bool| {
        let ps = if ttft { &s.ttft_s } else { &s.e2e_s };
        [ps.p50, ps.p90, ps.p99].map(|v| {
            if ps.count == 0 {
                "-".to_string()
            } else {
                format!("{v:.3}")
            }
        })
    };
    for (metric, ttft) in [("ttft_s", true), ("e2e_s", false)] {
        let names = ["p50", "p90", "p99"].into_iter();
        for ((name, x), y) in names.zip(quantiles(a, ttft)).zip(quantiles(b, ttft)) {
            rows.push((format!("{metric} {name}"), x, y));
        }
    }
    let mut out = format!("| metric | {la} [{}] | {lb} [{}] |\n|---|---:|---:|\n", a.kind, b.kind);
    for (m, x, y) in rows {
        out.push_str(&format!("| {m} | {x} | {y} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(kind: &str, per: &[(&str, u64)]) -> Side {
        Side {
            kind: kind.into(),
            finished: per.iter().map(|p| p.1).sum(),
            per_backend: per.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            prefix_cache_hit_rate: Some(0.5),
            idle_while_queued_s: None,
            ttft_s: percentiles(vec![1.0, 2.0, 3.0]),
            e2e_s: Percentiles::default(),
        }
    }

    #[test]
    fn table_lists_every_backend_of_either_side() {
        let t = render(
            &side("load", &[("backend-0", 3), ("backend-1", 1)]),
            "a",
            &side("run", &[("backend-2", 2)]),
            "b",
        );
        assert!(t.contains("| share backend-0 | 3 (75.0%) | 0 (0.0%) |"), "{t}");
        assert!(t.contains("| share backend-2 | 0 (0.0%) | 2 (100.0%) |"), "{t}");
        assert!(t.contains("| idle_while_queued_s | - | - |"), "{t}");
        assert!(t.contains("| ttft_s p50 | 2.000 | 2.000 |"), "{t}");
        assert!(t.contains("| e2e_s p99 | - | - |"), "{t}");
    }

    #[test]
    fn verdict_names_each_figure_beyond_tolerance() {
        use crate::check::golden::Tolerance;
        let a = side("load", &[("backend-0", 3), ("backend-1", 1)]);
        let tol = Tolerance { abs: 1e-9, rel: 0.1 };
        let (same, ok) = verdict(&a, &a, tol);
        assert!(ok, "{same}");
        assert!(
            same.starts_with("verdict: 7 of 7 shown figures within tolerance (rel 10%, abs 1e-9)"),
            "{same}"
        );
        let b = side("run", &[("backend-0", 2), ("backend-1", 2)]);
        let (text, ok) = verdict(&a, &b, tol);
        assert!(!ok);
        assert!(text.contains("- share backend-0: 0.75 vs 0.5 (-33.3%)"), "{text}");
        assert!(text.contains("- share backend-1: 0.25 vs 0.5 (+100.0%)"), "{text}");
        assert!(!text.contains("requests finished:"), "{text}");
    }
}
