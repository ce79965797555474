//! Measurements of a real vLLM engine: the requests it served and the series it exported,
//! read from the files a benchmark leaves, for `sim calibrate` and `sim validate`.
//!
//! Readers:
//! * [`harness`]: a run folder of LLMServingSim's vLLM harness (`meta.json`,
//!   `requests.jsonl`, `timeseries.csv`): per-request queue, schedule, first- and
//!   last-token times and per-second engine series;
//! * [`bench`](mod@bench): `vllm bench serve --save-result --save-detailed` JSON
//!   (`vllm/benchmarks/serve.py`): per-request start, prompt and output lengths, TTFT and
//!   inter-token gaps; the token series follow from the token times;
//! * [`lmbench`]: LMBench's per-request CSV (as llm-d-benchmark publishes them), with the
//!   Kubernetes Deployment beside it for the engine;
//! * [`prom`]: an engine's series as a Prometheus `query_range` answer or an OpenMetrics
//!   text dump with timestamps (prompt and generation token counters, running, waiting,
//!   KV usage), added to either of the above;
//! * [`from_trace`]: the recorded TTFT and end of a session trace's calls (Dynamo, OTel,
//!   sessions), for validation only (no engine series, no engine configuration).
//!
//! Every reader checks what it reads: a missing field, an unsorted or inconsistent clock,
//! a zero-length request, a non-finite number, a negative gauge, a token count past the
//! core's bound or a time past the replay's span ([`check_span`]) is one [`TraceError`]
//! naming the file, the line and the field. Nothing is sized by a time span or a token
//! count before that check.
//!
//! Owns: reading and checking measurements. May not see: a run.

pub mod bench;
pub mod harness;
pub mod lmbench;
pub mod prom;

use std::path::Path;

use fleetsim_core::backend::replay::{MAX_SAMPLES, MAX_SPAN, MIN_INTERVAL};
use fleetsim_core::content::checked_tokens;
use fleetsim_core::time::{checked_secs_to_ns, short};

pub use crate::trace::TraceError;

/// The block sizes vLLM accepts (`BlockSize` in `vllm/config/cache.py`, the choices of
/// `vllm serve --block-size`).
pub const VLLM_BLOCK_SIZES: [u32; 7] = [1, 8, 16, 32, 64, 128, 256];

/// Largest measurement file read (bytes): a detailed `vllm bench serve` result of 100,000
/// requests with their texts is a few hundred MB.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// One measured request. Times are seconds from the measurement's origin (the series'
/// origin when there is one), on one clock.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRequest {
    /// The request's id as recorded.
    pub id: String,
    /// 1-based line (or index + 1 for JSON arrays) it came from.
    pub line: u64,
    /// Reached the engine (or, for a client-side record, was sent).
    pub queued_s: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// First scheduled, when recorded.
    pub scheduled_s: Option<f64>,
    /// First output token.
    pub first_token_s: f64,
    /// Last output token.
    pub last_token_s: f64,
}

impl MeasuredRequest {
    /// Time to first token, s.
    pub fn ttft_s(&self) -> f64 {
        self.first_token_s - self.queued_s
    }

    /// End to end, s.
    pub fn e2e_s(&self) -> f64 {
        self.last_token_s - self.queued_s
    }

    /// Time per output token after the first, s (`None` for one-token outputs).
    pub fn tpot_s(&self) -> Option<f64> {
        (self.output_tokens > 1).then(|| (self.last_token_s - self.first_token_s) / f64::from(self.output_tokens - 1))
    }
}

/// One interval of an engine's series, ending at `t_s`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeriesRow {
    /// The interval's end, s from the origin.
    pub t_s: f64,
    /// Prompt tokens per second over the interval.
    pub prompt_tps: Option<f64>,
    /// Generation tokens per second over the interval.
    pub gen_tps: Option<f64>,
    /// `num_requests_running` at `t_s`.
    pub running: Option<f64>,
    /// `num_requests_waiting` at `t_s`.
    pub waiting: Option<f64>,
    /// KV cache usage at `t_s`, percent.
    pub kv_pct: Option<f64>,
}

/// An engine's series at a fixed interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// Where it came from (file, or "derived from the token times").
    pub source: String,
    /// Interval, s.
    pub interval_s: f64,
    /// Rows, by time.
    pub rows: Vec<SeriesRow>,
}

impl Series {
    /// Whether any row has the column.
    pub fn has(&self, col: fn(&SeriesRow) -> Option<f64>) -> bool {
        self.rows.iter().any(|r| col(r).is_some())
    }
}

/// The engine as the measurement records it (any field may be unknown).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineMeta {
    /// Model as served.
    pub model: Option<String>,
    /// vLLM version.
    pub vllm_version: Option<String>,
    /// GPU name.
    pub gpu: Option<String>,
    /// GPU memory, bytes.
    pub gpu_memory_bytes: Option<u64>,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: Option<u32>,
    /// `--data-parallel-size`: engines in one `vllm serve`, balanced by vLLM.
    pub data_parallel_size: Option<u32>,
    /// `--enable-expert-parallel`.
    pub expert_parallel: Option<bool>,
    /// Separate servers behind one load balancer (a Deployment's `replicas`).
    pub replicas: Option<u32>,
    /// The `vllm serve ...` command line, when recorded (flags the engine ran with).
    pub vllm_command: Option<String>,
    /// `--max-num-seqs`.
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u32>,
    /// `num_gpu_blocks` as the engine allocated them.
    pub num_gpu_blocks: Option<u32>,
    /// `--block-size`.
    pub block_size: Option<u32>,
    /// `--enable-prefix-caching`.
    pub prefix_caching: Option<bool>,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// `scheduler_reserve_full_isl`.
    pub reserve_full_isl: Option<bool>,
    /// `async_scheduling`.
    pub async_scheduling: Option<bool>,
    /// When the measurement started (as recorded, ISO 8601 or vLLM's `%Y%m%d-%H%M%S`).
    pub started_at: Option<String>,
}

/// How the client sent the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Client {
    /// At their recorded times, whatever was in flight.
    #[default]
    Open,
    /// At most this many in flight (`--max-concurrency`).
    Closed(u32),
}

/// A whole measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurement {
    /// The path read.
    pub source: String,
    /// Reader (`harness`, `vllm-bench`, `trace`).
    pub format: &'static str,
    /// The engine.
    pub engine: EngineMeta,
    /// How the client sent.
    pub client: Client,
    /// Requests, sorted by `queued_s`.
    pub requests: Vec<MeasuredRequest>,
    /// The engine's series, when measured or derivable.
    pub series: Option<Series>,
    /// What the reader did that a user should know (skipped failed requests, derived
    /// series, alignment).
    pub notes: Vec<String>,
}

impl Measurement {
    /// True when the times are the client's (sent, first and last chunk received), so
    /// they include the trip to the engine; false when the engine stamped them.
    pub fn client_timed(&self) -> bool {
        self.format != "harness"
    }
}

/// A one-line error.
pub(crate) fn err(file: &str, line: Option<u64>, field: Option<&str>, message: impl Into<String>) -> TraceError {
    TraceError {
        file: file.to_string(),
        line,
        column: field.map(str::to_string),
        message: message.into(),
    }
}

/// Reads a file whole, bounded.
pub(crate) fn read_bounded(path: &Path) -> Result<String, TraceError> {
    let file = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| err(&file, None, None, e.to_string()))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(err(
            &file,
            None,
            None,
            format!(
                "{} bytes, more than the {} a measurement may have",
                meta.len(),
                MAX_FILE_BYTES
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| err(&file, None, None, e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| err(&file, None, None, format!("not UTF-8 ({e})")))
}

/// A finite number, or an error naming the field.
pub(crate) fn finite(file: &str, line: u64, field: &str, x: f64) -> Result<f64, TraceError> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(err(file, Some(line), Some(field), format!("not a finite number ({x})")))
    }
}

/// A token count: a whole number from 1 to [`MAX_REQUEST_TOKENS`] (zero-length requests
/// refused), through the core's one checked conversion.
pub(crate) fn tokens(file: &str, line: u64, field: &str, x: f64) -> Result<u32, TraceError> {
    checked_tokens(x, 1).map_err(|e| err(file, Some(line), Some(field), e.to_string()))
}

/// A series interval in seconds (a tick, or the mean gap between samples): from
/// [`MIN_INTERVAL`] to [`MAX_SPAN`], through the core's checked conversion.
pub(crate) fn interval(file: &str, line: Option<u64>, field: &str, secs: f64) -> Result<f64, TraceError> {
    let at = |m: String| err(file, line, Some(field), m);
    let ns = checked_secs_to_ns(secs, MAX_SPAN).map_err(|e| at(format!("a series interval: {e}")))?;
    if ns < MIN_INTERVAL.0 {
        return Err(at(format!(
            "a series interval of {} s is shorter than the {} s minimum",
            short(secs),
            MIN_INTERVAL.as_secs_f64()
        )));
    }
    Ok(secs)
}

/// Checks that a measurement fits a replay: every request's times, from the replay's
/// origin (the series' origin, or the first request if earlier), within [`MAX_SPAN`],
/// and its series no more than [`MAX_SAMPLES`] intervals long. `file` is the requests'
/// file, `fields` names their times as it does (sent or queued, first token, last token).
pub fn check_span(file: &str, m: &Measurement, fields: [&str; 3]) -> Result<(), TraceError> {
    let origin = m.requests.iter().map(|r| r.queued_s).fold(0.0f64, f64::min);
    for r in &m.requests {
        for (field, t) in fields.iter().zip([r.queued_s, r.first_token_s, r.last_token_s]) {
            checked_secs_to_ns(t - origin, MAX_SPAN).map_err(|e| {
                err(
                    file,
                    Some(r.line),
                    Some(field),
                    format!(
                        "{e}: a measurement spans at most {} s (7 days) from its first request",
                        MAX_SPAN.as_secs_f64()
                    ),
                )
            })?;
        }
    }
    let Some(s) = &m.series else { return Ok(()) };
    let end = s.rows.iter().map(|r| r.t_s).fold(0.0f64, f64::max);
    let end = end.max(m.requests.iter().map(|r| r.last_token_s).fold(0.0f64, f64::max));
    let samples = ((end - origin) / s.interval_s).ceil();
    if samples.is_nan() || samples > MAX_SAMPLES as f64 {
        return Err(err(
            &s.source,
            None,
            None,
            format!(
                "{} s at an interval of {} s is {} samples, more than the {MAX_SAMPLES} a series may have",
                short(end - origin),
                short(s.interval_s),
                short(samples)
            ),
        ));
    }
    Ok(())
}

/// Checks one request's clock: queued <= scheduled <= first token <= last token.
pub(crate) fn check_clock(file: &str, r: &MeasuredRequest) -> Result<(), TraceError> {
    let mut prev = ("queued", r.queued_s);
    let steps = [
        r.scheduled_s.map(|s| ("scheduled", s)),
        Some(("first_token", r.first_token_s)),
        Some(("last_token", r.last_token_s)),
    ];
    for (name, t) in steps.into_iter().flatten() {
        if t < prev.1 {
            return Err(err(
                file,
                Some(r.line),
                Some(name),
                format!(
                    "{name} ({t:.6}) is before {} ({:.6}): inconsistent clock",
                    prev.0, prev.1
                ),
            ));
        }
        prev = (name, t);
    }
    Ok(())
}

/// Reads a measurement: a harness run folder, a `vllm bench serve` JSON result, or a
/// session trace with recorded latencies; `series`, when given, replaces the reader's
/// series with a Prometheus `query_range` JSON or an OpenMetrics dump.
pub fn load(path: &Path, series: Option<&Path>) -> Result<Measurement, TraceError> {
    let file = path.display().to_string();
    let mut m = if path.is_dir() {
        harness::read(path)?
    } else if !path.exists() {
        return Err(err(&file, None, None, "no such file or folder"));
    } else if file.ends_with(".json") {
        bench::read(path)?
    } else if file.ends_with(".csv") && lmbench::sniff(path) {
        lmbench::read(path)?
    } else {
        from_trace(path)?
    };
    if let Some(s) = series {
        let read = prom::read(s)?;
        m.series = Some(prom::align(read, &m, s)?);
        check_span(&file, &m, ["queued", "first_token", "last_token"])?;
    }
    Ok(m)
}

/// A session trace's recorded calls as measured requests (`dynamo`, `otel`, `sessions`):
/// arrival, lengths, recorded TTFT and end. Calls without a recorded TTFT and end are
/// left out (counted in the notes).
pub fn from_trace(path: &Path) -> Result<Measurement, TraceError> {
    let file = path.display().to_string();
    let t = crate::trace::read(path, crate::trace::ReadOptions::default())?;
    let Some(calls) = t.calls.as_deref() else {
        return Err(err(
            &file,
            None,
            None,
            "records no latencies: a measurement needs per-request first- and last-token times (a harness folder, a `vllm bench serve` JSON, or a Dynamo/OTel/sessions trace with TTFT and ends)",
        ));
    };
    let none = crate::trace::model::NONE;
    let t0 = t.rows.iter().map(|r| r.t_ns).min().unwrap_or(0);
    let mut requests = Vec::new();
    let mut skipped = 0u64;
    for (i, r) in t.rows.iter().enumerate() {
        let (ttft, end) = (calls.ttft_ns[i], calls.end_ns[i]);
        if ttft == none || end == none {
            skipped += 1;
            continue;
        }
        let q = (r.t_ns - t0) as f64 / 1e9;
        let m = MeasuredRequest {
            id: format!("row-{}", r.line),
            line: u64::from(r.line),
            queued_s: q,
            input_tokens: r.input,
            output_tokens: r.output,
            scheduled_s: None,
            first_token_s: q + ttft as f64 / 1e9,
            last_token_s: (end.saturating_sub(t0)) as f64 / 1e9,
        };
        check_clock(&file, &m)?;
        requests.push(m);
    }
    if requests.is_empty() {
        return Err(err(&file, None, None, "no call records both a TTFT and an end"));
    }
    requests.sort_by(|a, b| a.queued_s.total_cmp(&b.queued_s));
    let mut notes = t.notes();
    if skipped > 0 {
        notes.push(format!("{skipped} calls without a recorded TTFT or end left out"));
    }
    notes.push("a session trace records no engine series or configuration: validation only".into());
    let m = Measurement {
        source: file,
        format: "trace",
        engine: EngineMeta::default(),
        client: Client::Open,
        requests,
        series: None,
        notes,
    };
    check_span(&m.source, &m, ["start", "ttft", "end"])?;
    Ok(m)
}

/// The engine series implied by per-request token times: prompt tokens counted when a
/// request's first token is sampled (as vLLM's `IterationStats` counts them) and
/// generation tokens when sampled, per `interval_s`. `chunks` gives each request's
/// streamed chunks as `(time, tokens)` (the first chunk holds the first token). Callers
/// bound the span first ([`check_span`]): the series has one row per interval.
pub fn series_from_tokens(requests: &[MeasuredRequest], chunks: &[Vec<(f64, u32)>], interval_s: f64) -> Series {
    let end = requests.iter().map(|r| r.last_token_s).fold(0.0f64, f64::max);
    let n = ((end / interval_s).ceil() as usize).max(1);
    let mut prompt = vec![0.0; n];
    let mut gen_ = vec![0.0; n];
    let bin = |t: f64| (((t / interval_s).ceil() as usize).max(1) - 1).min(n - 1);
    for (r, times) in requests.iter().zip(chunks) {
        prompt[bin(r.first_token_s)] += f64::from(r.input_tokens);
        for &(t, k) in times {
            gen_[bin(t)] += f64::from(k);
        }
    }
    Series {
        source: "derived from the requests' token times".into(),
        interval_s,
        rows: (0..n)
            .map(|k| SeriesRow {
                t_s: (k + 1) as f64 * interval_s,
                prompt_tps: Some(prompt[k] / interval_s),
                gen_tps: Some(gen_[k] / interval_s),
                ..SeriesRow::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_series_bins_by_interval_end() {
        let r = MeasuredRequest {
            id: "a".into(),
            line: 1,
            queued_s: 0.0,
            input_tokens: 10,
            output_tokens: 3,
            scheduled_s: None,
            first_token_s: 0.5,
            last_token_s: 1.5,
        };
        let s = series_from_tokens(&[r], &[vec![(0.5, 1), (1.0, 1), (1.5, 1)]], 1.0);
        assert_eq!(s.rows.len(), 2);
        assert_eq!((s.rows[0].prompt_tps, s.rows[0].gen_tps), (Some(10.0), Some(2.0)));
        assert_eq!(s.rows[1].gen_tps, Some(1.0));
    }
}
