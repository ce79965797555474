//! A run folder of LLMServingSim's vLLM harness (`bench/` of casys-kaist/LLMServingSim):
//!
//! * `meta.json`: `vllm_version`, `model`, `engine_kwargs` (`tensor_parallel_size`,
//!   `max_num_seqs`, `max_num_batched_tokens`), `started_at`, `tick_seconds`, and when
//!   recorded `kv_cache` (`num_gpu_blocks`, `block_size`, `enable_prefix_caching`,
//!   `gpu_memory_utilization`), `hardware` and `resolved_config` (vLLM's whole config,
//!   whose `scheduler_config` says `scheduler_reserve_full_isl` and `async_scheduling`);
//! * `requests.jsonl`: per request `request_id`, `input_toks`, `output_toks`,
//!   `arrival_time` (Unix s), and `queued_ts`, `scheduled_ts`, `first_token_ts`,
//!   `last_token_ts` (a monotonic clock: only differences count);
//! * `timeseries.csv`: per tick `t` (s since `started_at`), `prompt_throughput` and
//!   `gen_throughput` (tokens/s), `running`, `waiting`, `kv_cache_pct`.
//!
//! The requests' monotonic times are placed on the series' clock by the first request's
//! `arrival_time - started_at`. A `kv_cache_pct` column that is zero throughout while
//! requests run was not recorded, and is dropped.

use std::path::Path;

use serde_json::Value;

use super::{
    Client, EngineMeta, MeasuredRequest, Measurement, Series, SeriesRow, TraceError, check_clock, err, finite,
    read_bounded, tokens,
};

/// Reads a harness run folder.
pub fn read(dir: &Path) -> Result<Measurement, TraceError> {
    let meta_path = dir.join("meta.json");
    let meta_file = meta_path.display().to_string();
    let meta: Value = serde_json::from_str(&read_bounded(&meta_path)?)
        .map_err(|e| err(&meta_file, Some(e.line() as u64), None, format!("not JSON: {e}")))?;
    let engine = engine_meta(&meta_file, &meta)?;
    let started = meta
        .get("started_at")
        .and_then(Value::as_str)
        .ok_or_else(|| err(&meta_file, None, Some("started_at"), "missing (an ISO 8601 time)"))?;
    let started_unix = started
        .parse::<jiff::Timestamp>()
        .map_err(|e| {
            err(
                &meta_file,
                None,
                Some("started_at"),
                format!("not an ISO 8601 time ({e})"),
            )
        })?
        .as_nanosecond() as f64
        / 1e9;
    let tick = match meta.get("tick_seconds") {
        None => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or_else(|| err(&meta_file, None, Some("tick_seconds"), "must be a positive number"))?,
    };

    let req_path = dir.join("requests.jsonl");
    let (requests, origin_note) = read_requests(&req_path, started_unix)?;
    let ts_path = dir.join("timeseries.csv");
    let series = read_series(&ts_path, tick)?;
    let mut notes = vec![origin_note];
    let mut series = series;
    if series.rows.iter().all(|r| r.kv_pct.is_none_or(|k| k == 0.0))
        && series.rows.iter().any(|r| r.running.is_some_and(|x| x > 0.0))
    {
        series.rows.iter_mut().for_each(|r| r.kv_pct = None);
        notes.push(format!(
            "{}: kv_cache_pct is 0 throughout while requests run: not recorded, ignored",
            ts_path.display()
        ));
    }
    Ok(Measurement {
        source: dir.display().to_string(),
        format: "harness",
        engine,
        client: Client::Open,
        requests,
        series: Some(series),
        notes,
    })
}

fn u32_at(file: &str, v: &Value, path: &[&str]) -> Result<Option<u32>, TraceError> {
    let mut cur = v;
    for k in path {
        match cur.get(k) {
            Some(x) => cur = x,
            None => return Ok(None),
        }
    }
    if cur.is_null() {
        return Ok(None);
    }
    cur.as_u64()
        .filter(|&x| x >= 1 && x <= u64::from(u32::MAX))
        .map(|x| Some(x as u32))
        .ok_or_else(|| {
            err(
                file,
                None,
                Some(&path.join(".")),
                format!("must be a positive whole number, got {cur}"),
            )
        })
}

fn bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    path.iter().try_fold(v, |cur, k| cur.get(k))?.as_bool()
}

fn engine_meta(file: &str, meta: &Value) -> Result<EngineMeta, TraceError> {
    let s = |p: &[&str]| path_str(meta, p);
    Ok(EngineMeta {
        model: s(&["model"]),
        vllm_version: s(&["vllm_version"]),
        gpu: s(&["hardware", "device_name"]),
        gpu_memory_bytes: meta
            .get("hardware")
            .and_then(|h| h.get("device_total_memory_bytes"))
            .and_then(Value::as_u64),
        tensor_parallel_size: u32_at(file, meta, &["engine_kwargs", "tensor_parallel_size"])?,
        max_num_seqs: u32_at(file, meta, &["engine_kwargs", "max_num_seqs"])?,
        max_num_batched_tokens: u32_at(file, meta, &["engine_kwargs", "max_num_batched_tokens"])?,
        num_gpu_blocks: u32_at(file, meta, &["kv_cache", "num_gpu_blocks"])?,
        block_size: u32_at(file, meta, &["kv_cache", "block_size"])?,
        prefix_caching: bool_at(meta, &["kv_cache", "enable_prefix_caching"]),
        gpu_memory_utilization: meta
            .get("kv_cache")
            .and_then(|k| k.get("gpu_memory_utilization"))
            .and_then(Value::as_f64),
        reserve_full_isl: bool_at(
            meta,
            &["resolved_config", "scheduler_config", "scheduler_reserve_full_isl"],
        ),
        async_scheduling: bool_at(meta, &["resolved_config", "scheduler_config", "async_scheduling"]),
        started_at: s(&["started_at"]),
    })
}

fn path_str(v: &Value, path: &[&str]) -> Option<String> {
    path.iter()
        .try_fold(v, |cur, k| cur.get(k))?
        .as_str()
        .map(str::to_string)
}

fn num(file: &str, line: u64, o: &Value, field: &str) -> Result<f64, TraceError> {
    let v = o
        .get(field)
        .ok_or_else(|| err(file, Some(line), Some(field), "missing"))?;
    let x = v
        .as_f64()
        .ok_or_else(|| err(file, Some(line), Some(field), format!("not a number ({v})")))?;
    finite(file, line, field, x)
}

fn read_requests(path: &Path, started_unix: f64) -> Result<(Vec<MeasuredRequest>, String), TraceError> {
    let file = path.display().to_string();
    let text = read_bounded(path)?;
    let mut out: Vec<(f64, MeasuredRequest)> = Vec::new();
    let mut prev_queued = f64::NEG_INFINITY;
    for (i, l) in text.lines().enumerate() {
        let line = i as u64 + 1;
        if l.trim().is_empty() {
            continue;
        }
        let o: Value = serde_json::from_str(l).map_err(|e| err(&file, Some(line), None, format!("not JSON: {e}")))?;
        let id = o
            .get("request_id")
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .ok_or_else(|| err(&file, Some(line), Some("request_id"), "missing"))?;
        let arrival = num(&file, line, &o, "arrival_time")?;
        let queued = num(&file, line, &o, "queued_ts")?;
        if queued < prev_queued {
            return Err(err(
                &file,
                Some(line),
                Some("queued_ts"),
                format!("{queued} is before the previous line's {prev_queued}: requests must be in queue order"),
            ));
        }
        prev_queued = queued;
        let r = MeasuredRequest {
            id,
            line,
            queued_s: queued,
            input_tokens: tokens(&file, line, "input_toks", num(&file, line, &o, "input_toks")?)?,
            output_tokens: tokens(&file, line, "output_toks", num(&file, line, &o, "output_toks")?)?,
            scheduled_s: Some(num(&file, line, &o, "scheduled_ts")?),
            first_token_s: num(&file, line, &o, "first_token_ts")?,
            last_token_s: num(&file, line, &o, "last_token_ts")?,
        };
        check_clock(&file, &r)?;
        out.push((arrival, r));
    }
    let Some((a0, q0)) = out.first().map(|(a, r)| (*a, r.queued_s)) else {
        return Err(err(&file, None, None, "no requests"));
    };
    // The monotonic clock onto the series' clock (seconds since `started_at`).
    let shift = a0 - started_unix - q0;
    if !(-60.0..=3600.0).contains(&(a0 - started_unix)) {
        return Err(err(
            &file,
            Some(1),
            Some("arrival_time"),
            format!(
                "the first request arrives {:.1} s after meta.json's started_at: not the same run",
                a0 - started_unix
            ),
        ));
    }
    let reqs = out
        .into_iter()
        .map(|(_, mut r)| {
            r.queued_s += shift;
            r.scheduled_s = r.scheduled_s.map(|s| s + shift);
            r.first_token_s += shift;
            r.last_token_s += shift;
            r
        })
        .collect();
    Ok((
        reqs,
        format!(
            "requests placed on the series' clock by the first arrival, {:.3} s after started_at",
            a0 - started_unix
        ),
    ))
}

/// The series columns read besides `t`, in [`SeriesRow`] order.
const SERIES_COLUMNS: [&str; 5] = [
    "prompt_throughput",
    "gen_throughput",
    "running",
    "waiting",
    "kv_cache_pct",
];

fn read_series(path: &Path, tick: f64) -> Result<Series, TraceError> {
    let file = path.display().to_string();
    let text = read_bounded(path)?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| err(&file, Some(1), None, e.to_string()))?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h.trim() == name);
    let t_col = col("t").ok_or_else(|| err(&file, Some(1), Some("t"), "missing column"))?;
    let cols = SERIES_COLUMNS.map(col);
    let mut rows = Vec::new();
    let mut prev = f64::NEG_INFINITY;
    for (i, rec) in rdr.records().enumerate() {
        let line = i as u64 + 2;
        let rec = rec.map_err(|e| err(&file, Some(line), None, e.to_string()))?;
        let t = series_value(&file, line, &rec, t_col, "t")?;
        if t <= prev {
            return Err(err(
                &file,
                Some(line),
                Some("t"),
                format!("{t} does not follow {prev}: rows must be in time order"),
            ));
        }
        prev = t;
        let mut v = [None; 5];
        for (k, c) in cols.iter().enumerate() {
            if let Some(c) = c {
                v[k] = Some(series_value(&file, line, &rec, *c, SERIES_COLUMNS[k])?);
            }
        }
        rows.push(SeriesRow {
            t_s: t,
            prompt_tps: v[0],
            gen_tps: v[1],
            running: v[2],
            waiting: v[3],
            kv_pct: v[4],
        });
    }
    if rows.is_empty() {
        return Err(err(&file, None, None, "no rows"));
    }
    Ok(Series {
        source: file,
        interval_s: tick,
        rows,
    })
}

/// Column `c` (`name`) of a series row: a finite number, not negative.
fn series_value(file: &str, line: u64, rec: &csv::StringRecord, c: usize, name: &str) -> Result<f64, TraceError> {
    let s = rec.get(c).ok_or_else(|| err(file, Some(line), Some(name), "missing"))?;
    let x: f64 = s.trim().parse().map_err(|_| {
        err(
            file,
            Some(line),
            Some(name),
            format!("not a number: {}", crate::quote::quote(s)),
        )
    })?;
    let x = finite(file, line, name, x)?;
    if x < 0.0 {
        return Err(err(file, Some(line), Some(name), format!("negative ({x})")));
    }
    Ok(x)
}
