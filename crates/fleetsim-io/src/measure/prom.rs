//! One engine's series from Prometheus: a `/api/v1/query_range` answer (JSON, `resultType`
//! `matrix`, each series named by `metric.__name__`) or an OpenMetrics / Prometheus text
//! dump whose samples carry timestamps (`name{labels} value timestamp`, one scrape after
//! another). Read: `vllm:prompt_tokens_total` and `vllm:generation_tokens_total` (counters,
//! turned into per-second rates between samples), `vllm:num_requests_running`,
//! `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (a fraction, shown as
//! percent), names from [`crate::vllm_metrics`]. Series of several engines (different
//! label sets of one metric) are refused: select one engine's series.
//!
//! Timestamps are Unix time in the unit their size says (seconds, as OpenMetrics and
//! query_range give them; milliseconds, as Prometheus text does; micro- or nanoseconds,
//! as some exporters write), the first sample's unit for the whole file. Values are
//! counts and gauges: a negative one is refused, naming the sample.

use std::collections::BTreeMap;
use std::path::Path;

use fleetsim_core::backend::replay::MAX_SPAN;
use fleetsim_core::time::{checked_secs_to_ns, short};
use serde_json::Value;

use super::{Measurement, Series, SeriesRow, TraceError, err, read_bounded};
use crate::vllm_metrics as vm;

/// Samples by metric, `(unix s, value)` in time order.
pub type Raw = BTreeMap<String, Vec<(f64, f64)>>;

/// The unit of a Unix timestamp by its size (now is about 1.7e9 s): seconds below 1e11,
/// then milliseconds, microseconds and nanoseconds, as divisors to seconds.
fn unit_of(t: f64) -> f64 {
    match t.abs() {
        x if x < 1e11 => 1.0,
        x if x < 1e14 => 1e3,
        x if x < 1e17 => 1e6,
        _ => 1e9,
    }
}

/// Timestamps to seconds, in the unit of the file's first one.
#[derive(Default)]
struct Clock {
    unit: Option<f64>,
}

impl Clock {
    /// `t` in seconds, or why not (a unit other than the first sample's).
    fn secs(&mut self, t: f64) -> Result<f64, String> {
        if !t.is_finite() {
            return Err(format!("timestamp {t} is not a finite number"));
        }
        let u = unit_of(t);
        let first = *self.unit.get_or_insert(u);
        if u != first {
            return Err(format!(
                "timestamp {} is in another unit than the first sample's ({})",
                short(t),
                unit_name(first)
            ));
        }
        Ok(t / u)
    }
}

fn unit_name(u: f64) -> &'static str {
    match u {
        1.0 => "seconds",
        1e3 => "milliseconds",
        1e6 => "microseconds",
        _ => "nanoseconds",
    }
}

/// The metric samples fleetsim reads, in [`SeriesRow`]'s column order.
fn wanted() -> [String; 5] {
    [
        vm::PROMPT_TOKENS.sample_name(),
        vm::GENERATION_TOKENS.sample_name(),
        vm::NUM_REQUESTS_RUNNING.sample_name(),
        vm::NUM_REQUESTS_WAITING.sample_name(),
        vm::KV_CACHE_USAGE_PERC.sample_name(),
    ]
}

/// Reads either format into per-metric samples.
pub fn read(path: &Path) -> Result<(String, Raw), TraceError> {
    let file = path.display().to_string();
    let text = read_bounded(path)?;
    let raw = if text.trim_start().starts_with('{') {
        query_range(&file, &text)?
    } else {
        openmetrics(&file, &text)?
    };
    let want = wanted();
    if !want[..2].iter().any(|w| raw.contains_key(w)) {
        return Err(err(
            &file,
            None,
            None,
            format!(
                "has neither {} nor {}: an engine's token counters are needed",
                want[0], want[1]
            ),
        ));
    }
    Ok((file, raw))
}

fn query_range(file: &str, text: &str) -> Result<Raw, TraceError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| err(file, Some(e.line() as u64), None, format!("not JSON: {e}")))?;
    if v.get("status").and_then(Value::as_str) != Some("success") {
        return Err(err(
            file,
            None,
            Some("status"),
            "not \"success\" (a query_range answer)",
        ));
    }
    let result = v
        .get("data")
        .and_then(|d| d.get("result"))
        .and_then(Value::as_array)
        .ok_or_else(|| err(file, None, Some("data.result"), "missing"))?;
    let mut raw = Raw::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut clock = Clock::default();
    for (i, s) in result.iter().enumerate() {
        let at = |f: &str| format!("data.result[{i}].{f}");
        let metric = s
            .get("metric")
            .and_then(Value::as_object)
            .ok_or_else(|| err(file, None, Some(&at("metric")), "missing"))?;
        let Some(name) = metric.get("__name__").and_then(Value::as_str) else {
            continue;
        };
        if !wanted().iter().any(|w| w == name) {
            continue;
        }
        let set = Value::Object(metric.clone()).to_string();
        if let Some(prev) = labels.insert(name.to_string(), set.clone())
            && prev != set
        {
            return Err(err(
                file,
                None,
                Some(&at("metric")),
                format!("a second {name} series ({set}; first {prev}): select one engine's series"),
            ));
        }
        let values = s
            .get("values")
            .and_then(Value::as_array)
            .ok_or_else(|| err(file, None, Some(&at("values")), "missing"))?;
        let mut pts = Vec::with_capacity(values.len());
        for (k, p) in values.iter().enumerate() {
            let bad = || {
                err(
                    file,
                    None,
                    Some(&format!("data.result[{i}].values[{k}]")),
                    "not [time, \"value\"]",
                )
            };
            let t = p.get(0).and_then(Value::as_f64).ok_or_else(bad)?;
            let x: f64 = p
                .get(1)
                .and_then(Value::as_str)
                .ok_or_else(bad)?
                .parse()
                .map_err(|_| bad())?;
            let at = format!("data.result[{i}].values[{k}]");
            let t = clock.secs(t).map_err(|m| err(file, None, Some(&at), m))?;
            push(file, None, &at, &mut pts, t, x)?;
        }
        raw.insert(name.to_string(), pts);
    }
    Ok(raw)
}

fn push(
    file: &str,
    line: Option<u64>,
    field: &str,
    pts: &mut Vec<(f64, f64)>,
    t: f64,
    x: f64,
) -> Result<(), TraceError> {
    if !t.is_finite() || !x.is_finite() {
        return Err(err(file, line, Some(field), format!("not a finite number ({t}, {x})")));
    }
    if x < 0.0 {
        return Err(err(
            file,
            line,
            Some(field),
            format!("negative value {}: counters and gauges are never negative", short(x)),
        ));
    }
    if let Some(&(p, _)) = pts.last()
        && t <= p
    {
        return Err(err(
            file,
            line,
            Some(field),
            format!("time {t} does not follow {p}: samples must be in time order"),
        ));
    }
    pts.push((t, x));
    Ok(())
}

fn openmetrics(file: &str, text: &str) -> Result<Raw, TraceError> {
    let mut raw = Raw::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let want = wanted();
    let mut clock = Clock::default();
    for (i, l) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let (name, rest) = match l.find(['{', ' ']) {
            Some(k) => (&l[..k], &l[k..]),
            None => continue,
        };
        if !want.iter().any(|w| w == name) {
            continue;
        }
        let (set, rest) = if let Some(r) = rest.strip_prefix('{') {
            let end = r
                .find('}')
                .ok_or_else(|| err(file, Some(line), Some(name), "unclosed label set"))?;
            (&r[..end], &r[end + 1..])
        } else {
            ("", rest)
        };
        let mut parts = rest.split_whitespace();
        let value: f64 = parts
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| err(file, Some(line), Some(name), "no value"))?;
        let ts: f64 = parts
            .next()
            .ok_or_else(|| {
                err(
                    file,
                    Some(line),
                    Some(name),
                    "no timestamp: a dump of several scrapes needs one per sample",
                )
            })?
            .parse()
            .map_err(|_| err(file, Some(line), Some(name), "timestamp not a number"))?;
        let t = clock.secs(ts).map_err(|m| err(file, Some(line), Some(name), m))?;
        if let Some(prev) = labels.insert(name.to_string(), set.to_string())
            && prev != set
        {
            return Err(err(
                file,
                Some(line),
                Some(name),
                format!("a second label set {{{set}}} (first {{{prev}}}): select one engine's series"),
            ));
        }
        push(
            file,
            Some(line),
            name,
            raw.entry(name.to_string()).or_default(),
            t,
            value,
        )?;
    }
    Ok(raw)
}

/// The series on the measurement's clock: counters become rates over each sample's
/// interval, and the series is shifted so that its first prompt tokens fall with the
/// measurement's first first-token (the two clocks share no origin).
pub fn align((file, raw): (String, Raw), m: &Measurement, _path: &Path) -> Result<Series, TraceError> {
    let want = wanted();
    // The time grid: the first counter's samples.
    let grid: Vec<f64> = raw
        .get(&want[0])
        .or_else(|| raw.get(&want[1]))
        .map(|p| p.iter().map(|x| x.0).collect())
        .unwrap_or_default();
    if grid.len() < 2 {
        return Err(err(&file, None, None, "fewer than two samples of the token counters"));
    }
    let at = |name: &str, t: f64| -> Option<f64> {
        let p = raw.get(name)?;
        let k = p.partition_point(|x| x.0 <= t + 1e-9);
        (k > 0).then(|| p[k - 1].1)
    };
    let rate = |name: &str, t0: f64, t1: f64| -> Option<f64> {
        let (a, b) = (at(name, t0)?, at(name, t1)?);
        // A counter reset (engine restart) reads as the new count.
        Some(if b >= a { b - a } else { b } / (t1 - t0))
    };
    let mut rows: Vec<SeriesRow> = grid
        .windows(2)
        .map(|w| SeriesRow {
            t_s: w[1],
            prompt_tps: rate(&want[0], w[0], w[1]),
            gen_tps: rate(&want[1], w[0], w[1]),
            running: at(&want[2], w[1]),
            waiting: at(&want[3], w[1]),
            kv_pct: at(&want[4], w[1]).map(|f| f * 100.0),
        })
        .collect();
    let spread = grid[grid.len() - 1] - grid[0];
    checked_secs_to_ns(spread, MAX_SPAN).map_err(|e| {
        err(
            &file,
            None,
            None,
            format!("the samples' span: {e}; a series spans at most 7 days"),
        )
    })?;
    let interval = super::interval(&file, None, "timestamps", spread / (grid.len() - 1) as f64)?;
    let first_prompt = rows
        .iter()
        .find(|r| r.prompt_tps.is_some_and(|x| x > 0.0) || r.gen_tps.is_some_and(|x| x > 0.0))
        .map(|r| r.t_s)
        .ok_or_else(|| err(&file, None, None, "the token counters never rise"))?;
    let f0 = m.requests.iter().map(|r| r.first_token_s).fold(f64::INFINITY, f64::min);
    let shift = first_prompt - interval / 2.0 - f0;
    rows.iter_mut().for_each(|r| r.t_s -= shift);
    Ok(Series {
        source: format!("{file} (aligned: its first tokens at the measurement's first first-token)"),
        interval_s: interval,
        rows,
    })
}
