//! A run folder of LLMServingSim's vLLM harness (`bench/` of casys-kaist/LLMServingSim):
//!
//! * `meta.json`: `vllm_version`, `model`, `engine_kwargs` (`tensor_parallel_size`,
//!   `data_parallel_size`, `enable_expert_parallel`, `max_num_seqs`,
//!   `max_num_batched_tokens`), `started_at`, `tick_seconds`, and when
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

use fleetsim_core::backend::replay::MAX_SPAN;
use fleetsim_core::time::{checked_secs_to_ns, short};
use serde_json::Value;

use super::{
    Client, EngineMeta, MeasuredRequest, Measurement, Series, SeriesRow, TraceError, check_clock, err, finite,
    read_bounded, tokens,
};

/// How far a line's `queued_ts` may be before the previous line's (data-parallel engines
/// stamp their queues on their own, 0.63 ms apart in a measured run): later lines within
/// it are sorted into place; beyond it the file is refused as out of order.
pub const QUEUE_ORDER_TOLERANCE_S: f64 = 0.010;

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
        Some(v) => {
            let t = v
                .as_f64()
                .ok_or_else(|| err(&meta_file, None, Some("tick_seconds"), "must be a number of seconds"))?;
            super::interval(&meta_file, None, "tick_seconds", t)?
        }
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
    let m = Measurement {
        source: dir.display().to_string(),
        format: "harness",
        engine,
        client: Client::Open,
        requests,
        series: Some(series),
        notes,
    };
    super::check_span(
        &req_path.display().to_string(),
        &m,
        ["queued_ts", "first_token_ts", "last_token_ts"],
    )?;
    Ok(m)
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

/// A boolean at `path`, read as vLLM's pydantic config reads one: `true`/`false`, 0 or 1,
/// or one of the strings pydantic accepts (`"false"`, `"off"`, `"no"`, `"0"`, `"f"`,
/// `"n"` and their opposites, in any case); anything else is refused, naming the key.
fn bool_at(file: &str, v: &Value, path: &[&str]) -> Result<Option<bool>, TraceError> {
    let Some(cur) = path.iter().try_fold(v, |cur, k| cur.get(k)) else {
        return Ok(None);
    };
    let b = match cur {
        Value::Null => return Ok(None),
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_u64() {
            Some(0) => Some(false),
            Some(1) => Some(true),
            _ => None,
        },
        Value::String(t) => match t.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    };
    b.map(Some).ok_or_else(|| {
        err(
            file,
            None,
            Some(&path.join(".")),
            format!("must be true or false, got {}", crate::quote::quote(&cur.to_string())),
        )
    })
}

/// The KV cache's block size, if recorded: one vLLM accepts ([`super::VLLM_BLOCK_SIZES`]).
fn block_size(file: &str, meta: &Value) -> Result<Option<u32>, TraceError> {
    let b = u32_at(file, meta, &["kv_cache", "block_size"])?;
    match b {
        Some(b) if !super::VLLM_BLOCK_SIZES.contains(&b) => Err(err(
            file,
            None,
            Some("kv_cache.block_size"),
            format!("{b}: vLLM accepts only {:?}", super::VLLM_BLOCK_SIZES),
        )),
        _ => Ok(b),
    }
}

/// The number of GPU blocks, if recorded: fewer than the engine model holds.
fn gpu_blocks(file: &str, meta: &Value) -> Result<Option<u32>, TraceError> {
    let b = u32_at(file, meta, &["kv_cache", "num_gpu_blocks"])?;
    let max = fleetsim_core::backend::MAX_KV_BLOCKS;
    match b {
        Some(b) if b >= max => Err(err(
            file,
            None,
            Some("kv_cache.num_gpu_blocks"),
            format!("{b}: more than the {} blocks an engine may have", max - 1),
        )),
        _ => Ok(b),
    }
}

/// A number at `path`, if recorded.
fn f64_at(file: &str, v: &Value, path: &[&str]) -> Result<Option<f64>, TraceError> {
    match path.iter().try_fold(v, |cur, k| cur.get(k)) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_f64().filter(|x| x.is_finite()).map(Some).ok_or_else(|| {
            err(
                file,
                None,
                Some(&path.join(".")),
                format!("must be a number, got {}", crate::quote::quote(&x.to_string())),
            )
        }),
    }
}

fn engine_meta(file: &str, meta: &Value) -> Result<EngineMeta, TraceError> {
    let s = |p: &[&str]| path_str(meta, p);
    let sched = |k: &'static str| ["resolved_config", "scheduler_config", k];
    Ok(EngineMeta {
        model: s(&["model"]),
        vllm_version: s(&["vllm_version"]),
        gpu: s(&["hardware", "device_name"]),
        gpu_memory_bytes: f64_at(file, meta, &["hardware", "device_total_memory_bytes"])?
            .filter(|b| *b >= 0.0 && *b < 2f64.powi(60))
            .map(|b| b as u64),
        tensor_parallel_size: u32_at(file, meta, &["engine_kwargs", "tensor_parallel_size"])?,
        data_parallel_size: u32_at(file, meta, &["engine_kwargs", "data_parallel_size"])?,
        expert_parallel: bool_at(file, meta, &["engine_kwargs", "enable_expert_parallel"])?,
        replicas: None,
        vllm_command: None,
        max_num_seqs: u32_at(file, meta, &["engine_kwargs", "max_num_seqs"])?,
        max_num_batched_tokens: u32_at(file, meta, &["engine_kwargs", "max_num_batched_tokens"])?,
        num_gpu_blocks: gpu_blocks(file, meta)?,
        block_size: block_size(file, meta)?,
        prefix_caching: bool_at(file, meta, &["kv_cache", "enable_prefix_caching"])?,
        gpu_memory_utilization: f64_at(file, meta, &["kv_cache", "gpu_memory_utilization"])?,
        reserve_full_isl: bool_at(file, meta, &sched("scheduler_reserve_full_isl"))?,
        async_scheduling: bool_at(file, meta, &sched("async_scheduling"))?,
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
    let mut reordered = 0u64;
    let mut worst = 0.0f64;
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
            // Data-parallel engines stamp their own queues: a line may be a little
            // before the previous one.
            let back = prev_queued - queued;
            if back > QUEUE_ORDER_TOLERANCE_S {
                return Err(err(
                    &file,
                    Some(line),
                    Some("queued_ts"),
                    format!(
                        "{queued} is {:.3} ms before the previous line's {prev_queued}: requests must be in queue order (within {} ms)",
                        back * 1e3,
                        QUEUE_ORDER_TOLERANCE_S * 1e3
                    ),
                ));
            }
            reordered += 1;
            worst = worst.max(back);
        }
        prev_queued = prev_queued.max(queued);
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
    out.sort_by(|a, b| a.1.queued_s.total_cmp(&b.1.queued_s).then(a.1.line.cmp(&b.1.line)));
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
    let mut note = format!(
        "requests placed on the series' clock by the first arrival, {:.3} s after started_at",
        a0 - started_unix
    );
    if reordered > 0 {
        note.push_str(&format!(
            "; {reordered} lines queued before the line above them (at most {:.3} ms, within the {} ms tolerance): sorted by queued_ts",
            worst * 1e3,
            QUEUE_ORDER_TOLERANCE_S * 1e3
        ));
    }
    Ok((reqs, note))
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
        checked_secs_to_ns(t, MAX_SPAN).map_err(|e| {
            err(
                &file,
                Some(line),
                Some("t"),
                format!("{e}: a series spans at most 7 days from started_at"),
            )
        })?;
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
        return Err(err(file, Some(line), Some(name), format!("negative ({})", short(x))));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_vllms_config_reads_them() {
        let v = |x: &str| serde_json::from_str::<Value>(&format!("{{\"k\": {{\"b\": {x}}}}}")).unwrap();
        let at = |x: &str| bool_at("meta.json", &v(x), &["k", "b"]);
        for (x, want) in [
            ("true", Some(true)),
            ("false", Some(false)),
            ("\"false\"", Some(false)),
            ("\"Off\"", Some(false)),
            ("\"yes\"", Some(true)),
            ("0", Some(false)),
            ("1", Some(true)),
            ("null", None),
        ] {
            assert_eq!(at(x).unwrap(), want, "{x}");
        }
        for x in ["\"maybe\"", "2", "[]"] {
            let e = at(x).unwrap_err().to_string();
            assert!(e.contains("meta.json") && e.contains("k.b"), "{x}: {e}");
        }
        assert_eq!(bool_at("m", &v("true"), &["nope"]).unwrap(), None);
    }

    #[test]
    fn block_sizes_and_block_counts_are_vllms() {
        let meta = |k: &str, x: u64| serde_json::json!({ "kv_cache": { k: x } });
        assert_eq!(block_size("m", &meta("block_size", 32)).unwrap(), Some(32));
        assert!(block_size("m", &meta("block_size", 24)).is_err());
        assert!(block_size("m", &meta("block_size", 1 << 31)).is_err());
        assert!(gpu_blocks("m", &meta("num_gpu_blocks", 4_294_967_295)).is_err());
        assert_eq!(gpu_blocks("m", &meta("num_gpu_blocks", 2588)).unwrap(), Some(2588));
    }
}
