//! `vllm bench serve --save-result --save-detailed` JSON (`vllm/benchmarks/serve.py`,
//! `benchmark()`'s `result` plus the run's settings): per request `input_lens`,
//! `output_lens`, `ttfts` (s), `itls` (the gaps between streamed chunks, s),
//! `start_times` (the client's send time, `time.perf_counter()` s) and `errors`; and
//! `max_concurrency`, `model_id`, `date`.
//!
//! The client's times are all there is: a request is "queued" when sent, its first token
//! is `start + ttft`, its later tokens follow by `itls` (a chunk of several tokens puts
//! them at the chunk's time). Failed requests (a non-empty `errors` entry) are left out.
//! The engine series follow from the token times ([`super::series_from_tokens`]): prompt
//! and generation tokens per second, no running or waiting (give `--series` for those).

use std::path::Path;

use serde_json::Value;

use super::{
    Client, EngineMeta, MeasuredRequest, Measurement, TraceError, check_clock, check_span, err, finite, read_bounded,
    series_from_tokens, tokens,
};

/// The interval of the series derived from the token times, s.
pub const DERIVED_INTERVAL_S: f64 = 1.0;

fn array<'a>(file: &str, o: &'a Value, field: &str) -> Result<&'a Vec<Value>, TraceError> {
    o.get(field)
        .ok_or_else(|| {
            err(
                file,
                None,
                Some(field),
                "missing (save with `vllm bench serve --save-result --save-detailed`)",
            )
        })?
        .as_array()
        .ok_or_else(|| err(file, None, Some(field), "not an array"))
}

fn f(file: &str, i: usize, field: &str, v: &Value) -> Result<f64, TraceError> {
    let line = i as u64 + 1;
    let x = v.as_f64().ok_or_else(|| {
        err(
            file,
            Some(line),
            Some(field),
            format!("not a number ({v}) (entry {line})"),
        )
    })?;
    finite(file, line, field, x)
}

/// Reads a `vllm bench serve` result. Lines in errors are the request's 1-based index in
/// the arrays.
pub fn read(path: &Path) -> Result<Measurement, TraceError> {
    let file = path.display().to_string();
    let o = result_object(path, &file)?;
    let a = Arrays::of(&file, &o)?;
    let errors = o.get("errors").and_then(Value::as_array);
    let mut failed = 0u64;
    let mut rows: Vec<(MeasuredRequest, Vec<(f64, u32)>)> = Vec::new();
    for i in 0..a.input.len() {
        if errors
            .and_then(|e| e.get(i))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            failed += 1;
            continue;
        }
        rows.push(a.request(&file, i)?);
    }
    if rows.is_empty() {
        return Err(err(&file, None, None, "no successful requests"));
    }
    rows.sort_by(|a, b| a.0.queued_s.total_cmp(&b.0.queued_s));
    let t0 = rows[0].0.queued_s;
    for (r, times) in &mut rows {
        r.queued_s -= t0;
        r.first_token_s -= t0;
        r.last_token_s -= t0;
        times.iter_mut().for_each(|t| t.0 -= t0);
    }
    let (requests, chunks): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
    let client = client(&file, &o)?;
    let mut notes = vec![
        "times are the client's (send, first and last chunk); the series are derived from them (no running or waiting: add --series)".to_string(),
    ];
    if failed > 0 {
        notes.push(format!("{failed} failed requests left out"));
    }
    let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
    let mut m = Measurement {
        source: file,
        format: "vllm-bench",
        engine: EngineMeta {
            model: s("model_id"),
            started_at: s("date"),
            ..EngineMeta::default()
        },
        client,
        requests,
        series: None,
        notes,
    };
    // The span is bounded before the series is sized by it.
    check_span(&m.source, &m, ["start_times", "ttfts", "itls"])?;
    m.series = Some(series_from_tokens(&m.requests, &chunks, DERIVED_INTERVAL_S));
    Ok(m)
}

/// The file as a `vllm bench serve` result: a JSON object (a Prometheus answer is named as
/// such, since it belongs beside the requests).
fn result_object(path: &Path, file: &str) -> Result<Value, TraceError> {
    let o: Value = serde_json::from_str(&read_bounded(path)?)
        .map_err(|e| err(file, Some(e.line() as u64), None, format!("not JSON: {e}")))?;
    if !o.is_object() {
        return Err(err(file, None, None, "not a JSON object (a `vllm bench serve` result)"));
    }
    if o.get("status").is_some() && o.get("data").is_some() {
        return Err(err(
            file,
            None,
            None,
            "a Prometheus query_range answer: give it with --series beside the requests",
        ));
    }
    Ok(o)
}

/// The per-request arrays of a result, one entry per request each.
struct Arrays<'a> {
    input: &'a Vec<Value>,
    output: &'a Vec<Value>,
    ttfts: &'a Vec<Value>,
    itls: &'a Vec<Value>,
    starts: &'a Vec<Value>,
}

impl<'a> Arrays<'a> {
    /// The arrays, each as long as `input_lens`.
    fn of(file: &str, o: &'a Value) -> Result<Self, TraceError> {
        let a = Arrays {
            input: array(file, o, "input_lens")?,
            output: array(file, o, "output_lens")?,
            ttfts: array(file, o, "ttfts")?,
            itls: array(file, o, "itls")?,
            starts: array(file, o, "start_times")?,
        };
        let n = a.input.len();
        for (name, v) in [
            ("output_lens", a.output),
            ("ttfts", a.ttfts),
            ("itls", a.itls),
            ("start_times", a.starts),
        ] {
            if v.len() != n {
                return Err(err(
                    file,
                    None,
                    Some(name),
                    format!("{} entries, but input_lens has {n}", v.len()),
                ));
            }
        }
        Ok(a)
    }

    /// Request `i`: its times from its send, TTFT and gaps, and its streamed chunks as
    /// `(time, tokens)` (the output tokens spread over the chunks in order, as evenly as
    /// they go; no allocation per token).
    fn request(&self, file: &str, i: usize) -> Result<(MeasuredRequest, Vec<(f64, u32)>), TraceError> {
        let line = i as u64 + 1;
        let start = f(file, i, "start_times", &self.starts[i])?;
        let ttft = f(file, i, "ttfts", &self.ttfts[i])?;
        if ttft <= 0.0 {
            return Err(err(file, Some(line), Some("ttfts"), format!("{ttft} s: not positive")));
        }
        let gaps = self.itls[i]
            .as_array()
            .ok_or_else(|| err(file, Some(line), Some("itls"), "not an array of gaps"))?;
        let mut times = vec![start + ttft];
        for g in gaps {
            let g = f(file, i, "itls", g)?;
            if g < 0.0 {
                return Err(err(
                    file,
                    Some(line),
                    Some("itls"),
                    format!("negative gap {g}: inconsistent clock"),
                ));
            }
            times.push(times[times.len() - 1] + g);
        }
        let out = tokens(file, line, "output_lens", f(file, i, "output_lens", &self.output[i])?)?;
        let input = tokens(file, line, "input_lens", f(file, i, "input_lens", &self.input[i])?)?;
        fleetsim_core::content::checked_total(input, out)
            .map_err(|e| err(file, Some(line), Some("output_lens"), format!("with the prompt, {e}")))?;
        let r = MeasuredRequest {
            id: format!("{i}"),
            line,
            queued_s: start,
            input_tokens: input,
            output_tokens: out,
            scheduled_s: None,
            first_token_s: times[0],
            last_token_s: times[times.len() - 1],
        };
        check_clock(file, &r)?;
        // Token k falls in chunk floor(k * chunks / out): chunk j holds
        // ceil((j + 1) * out / chunks) - ceil(j * out / chunks) of them.
        let (per, out) = (times.len() as u64, u64::from(out));
        let upto = |j: u64| (j * out).div_ceil(per);
        let chunks = (0..per)
            .map(|j| (times[j as usize], (upto(j + 1) - upto(j)) as u32))
            .filter(|c| c.1 > 0)
            .collect();
        Ok((r, chunks))
    }
}

/// The client: closed with `max_concurrency` requests at most in flight, else open.
fn client(file: &str, o: &Value) -> Result<Client, TraceError> {
    Ok(match o.get("max_concurrency") {
        None | Some(Value::Null) => Client::Open,
        Some(v) => Client::Closed(
            v.as_u64()
                .filter(|&c| c >= 1 && c <= u64::from(u32::MAX))
                .ok_or_else(|| {
                    err(
                        file,
                        None,
                        Some("max_concurrency"),
                        format!("not a positive whole number ({v})"),
                    )
                })? as u32,
        ),
    })
}
