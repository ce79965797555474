//! `sim observe`: what `sim run` reports for a simulation, measured on a real fleet's vLLM
//! series: idle_while_queued_s, stranded_slot_s, the worst moment, each backend's share of
//! the requests, and the per-backend plot.
//!
//! The series come from a Prometheus server's `/api/v1/query_range`, from a saved
//! query_range response, or from polling the engines' `/metrics` directly (fetched by
//! [`crate::live::fetch`]; this module only reads what came). A backend is an `instance`;
//! its engines (data parallel) are added up. Each sample holds until the next, so the
//! integrals are those of the simulator's definitions (module [`crate::metrics`]) on a step
//! function sampled at the query's resolution: each change of state moves a stretch's ends
//! by less than one step.

pub mod exposition;

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::vllm_metrics as vm;

/// The families `sim observe` reads (sample names).
pub fn wanted() -> [String; 3] {
    [
        vm::NUM_REQUESTS_RUNNING.sample_name(),
        vm::NUM_REQUESTS_WAITING.sample_name(),
        vm::REQUEST_SUCCESS.sample_name(),
    ]
}

/// The PromQL that selects them in one query.
pub fn query(selector: &str) -> String {
    let names = wanted().join("|");
    if selector.is_empty() {
        format!("{{__name__=~\"{names}\"}}")
    } else {
        format!("{{__name__=~\"{names}\",{selector}}}")
    }
}

/// A series: its labels and `(time, value)` points.
pub type LabeledSeries = (BTreeMap<String, String>, Vec<(f64, f64)>);

/// One backend's samples on the common grid.
#[derive(Clone, Debug, Default)]
pub struct Backend {
    /// Its `instance` label.
    pub instance: String,
    /// `vllm:num_requests_running`.
    pub running: Vec<Option<f64>>,
    /// `vllm:num_requests_waiting`.
    pub waiting: Vec<Option<f64>>,
    /// `vllm:request_success_total` (`None` throughout when not exported).
    pub success: Vec<Option<f64>>,
}

/// Observed series on one time grid.
#[derive(Clone, Debug)]
pub struct Observed {
    /// Where they came from.
    pub source: String,
    /// Grid instants, seconds.
    pub times: Vec<f64>,
    /// Backends, by instance name.
    pub backends: Vec<Backend>,
}

/// The largest gauge read: a count of requests on one instance.
pub const MAX_GAUGE: f64 = 1e9;
/// The largest counter read (integers are exact in an f64 up to it).
pub const MAX_COUNTER: f64 = 9_007_199_254_740_992.0;
/// The latest sample time read, seconds: after the year 5000 as Unix time, so a larger
/// timestamp is in another unit (milliseconds, microseconds, nanoseconds).
pub const MAX_TIME_S: f64 = 1e11;

/// Why `v` cannot be a sample of family `ix` of [`wanted`] (a count: finite, not negative,
/// at most [`MAX_GAUGE`] or [`MAX_COUNTER`]); NaN is no sample, and passes.
pub fn bad_value(ix: usize, v: f64) -> Option<String> {
    let max = if ix == 2 { MAX_COUNTER } else { MAX_GAUGE };
    (!v.is_nan() && !(0.0..=max).contains(&v)).then(|| format!("{}: expected a count from 0 to {max}", shown(v)))
}

/// A number as written in a message: as is, or in exponent form when that is long
/// (`-1e300`, not its 301 digits).
fn shown(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() <= 24 { plain } else { format!("{x:e}") }
}

/// Why `t` (seconds) cannot be a sample time, if it cannot.
pub fn bad_time(t: f64) -> Option<String> {
    if !t.is_finite() {
        return Some(format!("timestamp {} is not a number", shown(t)));
    }
    (t.abs() > MAX_TIME_S).then(|| {
        format!(
            "timestamp {} s is past the year 5000: in milliseconds, microseconds or nanoseconds? \
             (sim observe reads seconds)",
            shown(t)
        )
    })
}

/// Collects `(labels, [(t, v)])` series into per-instance rows on the union of their
/// instants, adding up series of one instance and name (engines, finish reasons). Refuses,
/// naming the series and the instant, a value that cannot be a count ([`bad_value`]), a
/// time in another unit than seconds, and samples of one series less than a millisecond
/// apart or out of order.
pub fn collect(source: String, series: Vec<LabeledSeries>) -> Result<Observed> {
    let key = |t: f64| (t * 1000.0).round() as i64;
    let mut grid: BTreeMap<i64, f64> = BTreeMap::new();
    let names = wanted();
    // (instance, name index) -> t -> sum
    let mut sums: BTreeMap<(String, usize), BTreeMap<i64, f64>> = BTreeMap::new();
    for (labels, points) in series {
        let name = labels.get("__name__").map(String::as_str).unwrap_or("");
        let Some(ix) = names.iter().position(|n| n == name) else {
            continue;
        };
        let Some(inst) = labels.get(vm::LABEL_INSTANCE) else {
            bail!("{source}: a {name} series has no instance label");
        };
        let row = sums.entry((inst.clone(), ix)).or_default();
        let mut last: Option<i64> = None;
        for (t, v) in points {
            let at = || format!("{source}: {name} of instance {inst} at {}", when(t));
            if let Some(e) = bad_time(t) {
                bail!("{}: {e}", at());
            }
            if let Some(e) = bad_value(ix, v) {
                bail!("{}: {e}", at());
            }
            let k = key(t);
            if last.is_some_and(|l| k <= l) {
                bail!(
                    "{}: follows a sample of the same series less than 1 ms before it, or after it",
                    at()
                );
            }
            last = Some(k);
            grid.insert(k, t);
            if v.is_finite() {
                *row.entry(k).or_insert(0.0) += v;
            }
        }
    }
    let times: Vec<f64> = grid.values().copied().collect();
    let instances: Vec<String> = sums
        .keys()
        .map(|(i, _)| i.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for (ix, name) in names.iter().enumerate().take(2) {
        if !sums.keys().any(|(_, j)| *j == ix) {
            bail!("{source}: no {name} series: is the selector right, and does the range hold samples?");
        }
        for i in &instances {
            if !sums.contains_key(&(i.clone(), ix)) {
                bail!("{source}: instance {i} has no {name} series");
            }
        }
    }
    let row = |i: &String, ix: usize| -> Vec<Option<f64>> {
        let m = sums.get(&(i.clone(), ix));
        grid.keys().map(|k| m.and_then(|m| m.get(k).copied())).collect()
    };
    let backends = instances
        .iter()
        .map(|i| Backend {
            instance: i.clone(),
            running: row(i, 0),
            waiting: row(i, 1),
            success: row(i, 2),
        })
        .collect();
    Ok(Observed {
        source,
        times,
        backends,
    })
}

/// Parses a `/api/v1/query_range` response body: a clear error for an error status, a
/// partial response (warnings), another result type or a malformed series.
pub fn parse_query_range(source: &str, body: &str) -> Result<Observed> {
    let v: Value = serde_json::from_str(body).with_context(|| format!("{source}: not a query_range JSON response"))?;
    let status = v.get("status").and_then(Value::as_str).unwrap_or("");
    if status != "success" {
        let err = v.get("error").and_then(Value::as_str).unwrap_or("no error text");
        bail!("{source}: Prometheus answered status {status:?}: {err}");
    }
    if let Some(w) = v.get("warnings").and_then(Value::as_array).filter(|w| !w.is_empty()) {
        let first = w[0].as_str().unwrap_or("?");
        bail!("{source}: partial response ({} warnings), first: {first}", w.len());
    }
    let data = v.get("data").with_context(|| format!("{source}: no data"))?;
    let rt = data.get("resultType").and_then(Value::as_str).unwrap_or("");
    if rt != "matrix" {
        bail!("{source}: resultType {rt:?}, expected \"matrix\" (a query_range response)");
    }
    let result = data
        .get("result")
        .and_then(Value::as_array)
        .with_context(|| format!("{source}: data.result is not a list"))?;
    let mut series = Vec::with_capacity(result.len());
    for (i, s) in result.iter().enumerate() {
        let labels: BTreeMap<String, String> = s
            .get("metric")
            .and_then(Value::as_object)
            .with_context(|| format!("{source}: data.result[{i}].metric is not an object"))?
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let values = s
            .get("values")
            .and_then(Value::as_array)
            .with_context(|| format!("{source}: data.result[{i}].values is not a list"))?;
        let mut pts = Vec::with_capacity(values.len());
        for (j, p) in values.iter().enumerate() {
            let pt = p.as_array().filter(|a| a.len() == 2).and_then(|a| {
                let t = a[0].as_f64()?;
                let v = a[1].as_str()?.parse::<f64>().ok()?;
                Some((t, v))
            });
            let Some(pt) = pt else {
                bail!("{source}: data.result[{i}].values[{j}] is not [time, \"value\"]");
            };
            pts.push(pt);
        }
        series.push((labels, pts));
    }
    collect(source.to_string(), series)
}

/// The sums of the wanted families in one `/metrics` text (Prometheus or OpenMetrics
/// format), by sample name.
pub fn parse_metrics_text(text: &str) -> BTreeMap<String, f64> {
    let names = wanted();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..end];
        if !names.iter().any(|n| n == name) {
            continue;
        }
        let mut rest = &line[end..];
        if rest.starts_with('{') {
            // Skip the labels, minding quoted values.
            let (mut quoted, mut escaped, mut close) = (false, false, None);
            for (i, c) in rest.char_indices() {
                match (quoted, escaped, c) {
                    (true, true, _) => escaped = false,
                    (true, false, '\\') => escaped = true,
                    (_, false, '"') => quoted = !quoted,
                    (false, _, '}') => {
                        close = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(close) = close else { continue };
            rest = &rest[close + 1..];
        }
        if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            *out.entry(name.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

/// One backend's figures.
#[derive(Clone, Debug, Serialize)]
pub struct BackendReport {
    /// Instance.
    pub instance: String,
    /// Slot limit used.
    pub slots: u32,
    /// Requests finished in the range (counter increase, resets counted); `None` without
    /// `vllm:request_success_total`.
    pub requests: Option<f64>,
    /// Share of all backends' finished requests.
    pub share: Option<f64>,
    /// Peak running.
    pub peak_running: f64,
    /// Peak waiting.
    pub peak_waiting: f64,
    /// Time-averaged running.
    pub mean_running: f64,
    /// Time-averaged waiting.
    pub mean_waiting: f64,
}

/// The moment of greatest stranding (first reached).
#[derive(Clone, Debug, Serialize)]
pub struct Worst {
    /// When (the sample's time, seconds).
    pub t_s: f64,
    /// `min(total waiting, total free slots)`.
    pub stranded: f64,
    /// Per backend `[running, waiting]`.
    pub backends: Vec<[f64; 2]>,
}

/// `sim observe`'s result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Source.
    pub source: String,
    /// First sample, seconds.
    pub from_s: f64,
    /// Last sample, seconds.
    pub to_s: f64,
    /// Samples per backend.
    pub samples: usize,
    /// Time during which some backend had a free slot while another had a queue.
    pub idle_while_queued_s: f64,
    /// Integral of `min(total waiting, total free slots)`.
    pub stranded_slot_s: f64,
    /// The worst moment.
    pub worst_moment: Option<Worst>,
    /// Per backend.
    pub backends: Vec<BackendReport>,
}

/// Slot limits: a default and per-instance values.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    /// For every instance not named.
    pub default: Option<u32>,
    /// By instance.
    pub by_instance: BTreeMap<String, u32>,
}

impl Slots {
    /// Parses `N` or `INSTANCE=N` into these limits.
    pub fn add(&mut self, spec: &str) -> Result<()> {
        let num = |s: &str| -> Result<u32> {
            match s.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => bail!("--slots {spec}: expected a slot count of at least 1"),
            }
        };
        match spec.rsplit_once('=') {
            Some((inst, n)) => {
                self.by_instance.insert(inst.trim().to_string(), num(n)?);
            }
            None => self.default = Some(num(spec)?),
        }
        Ok(())
    }

    fn of(&self, instance: &str) -> Result<u32> {
        match self.by_instance.get(instance).copied().or(self.default) {
            Some(s) => Ok(s),
            None => bail!("no slot count for instance {instance}: give --slots N or --slots {instance}=N"),
        }
    }
}

/// A counter's increase over the samples, a drop counting as a reset.
fn increase(v: &[Option<f64>]) -> Option<f64> {
    let pts: Vec<f64> = v.iter().flatten().copied().collect();
    if pts.is_empty() {
        return None;
    }
    Some(
        pts.windows(2)
            .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
            .sum(),
    )
}

/// The figures `sim run` gives, on observed series.
pub fn analyze(o: &Observed, slots: &Slots) -> Result<Report> {
    let caps: Vec<u32> = o
        .backends
        .iter()
        .map(|b| slots.of(&b.instance))
        .collect::<Result<_>>()?;
    let nb = o.backends.len();
    let (mut iwq, mut stranded) = (0.0, 0.0);
    let mut worst: Option<Worst> = None;
    let mut run_int = vec![0.0; nb];
    let mut wait_int = vec![0.0; nb];
    for k in 0..o.times.len().saturating_sub(1) {
        let dt = o.times[k + 1] - o.times[k];
        let (mut total_w, mut free) = (0.0, 0.0);
        for (b, be) in o.backends.iter().enumerate() {
            // A backend without both samples here is not known to be up: neither free nor queued.
            if let (Some(r), Some(w)) = (be.running[k], be.waiting[k]) {
                total_w += w;
                if w == 0.0 {
                    free += (f64::from(caps[b]) - r).max(0.0);
                }
                run_int[b] += r * dt;
                wait_int[b] += w * dt;
            }
        }
        if dt > 0.0 && total_w > 0.0 && free > 0.0 {
            let s = total_w.min(free);
            iwq += dt;
            stranded += dt * s;
            if worst.as_ref().is_none_or(|w| s > w.stranded) {
                worst = Some(Worst {
                    t_s: o.times[k],
                    stranded: s,
                    backends: o
                        .backends
                        .iter()
                        .map(|b| [b.running[k].unwrap_or(0.0), b.waiting[k].unwrap_or(0.0)])
                        .collect(),
                });
            }
        }
    }
    let span = match (o.times.first(), o.times.last()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => 0.0,
    };
    let reqs: Vec<Option<f64>> = o.backends.iter().map(|b| increase(&b.success)).collect();
    let total: f64 = reqs.iter().flatten().sum();
    let peak = |v: &[Option<f64>]| v.iter().flatten().copied().fold(0.0, f64::max);
    let r6 = crate::metrics::round6;
    let backends = o
        .backends
        .iter()
        .enumerate()
        .map(|(b, be)| BackendReport {
            instance: be.instance.clone(),
            slots: caps[b],
            requests: reqs[b],
            share: reqs[b].filter(|_| total > 0.0).map(|r| r6(r / total)),
            peak_running: peak(&be.running),
            peak_waiting: peak(&be.waiting),
            mean_running: if span > 0.0 { r6(run_int[b] / span) } else { 0.0 },
            mean_waiting: if span > 0.0 { r6(wait_int[b] / span) } else { 0.0 },
        })
        .collect();
    Ok(Report {
        source: o.source.clone(),
        from_s: o.times.first().copied().unwrap_or(0.0),
        to_s: o.times.last().copied().unwrap_or(0.0),
        samples: o.times.len(),
        idle_while_queued_s: r6(iwq),
        stranded_slot_s: r6(stranded),
        worst_moment: worst,
        backends,
    })
}

/// The report as `sim run` prints a run's.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "observed {}: {} backends, {} samples from {} to {}",
        r.source,
        r.backends.len(),
        r.samples,
        when(r.from_s),
        when(r.to_s)
    );
    let w = r.backends.iter().map(|b| b.instance.len()).max().unwrap_or(7).max(7);
    let _ = writeln!(
        s,
        "\n{:<w$}  slots  requests   share  peak run  peak wait  mean run  mean wait",
        "backend"
    );
    for b in &r.backends {
        let req = b.requests.map_or("-".to_string(), |x| format!("{x:.0}"));
        let share = b.share.map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0));
        let _ = writeln!(
            s,
            "{:<w$}  {:>5}  {:>8}  {:>6}  {:>8}  {:>9}  {:>8.2}  {:>9.2}",
            b.instance, b.slots, req, share, b.peak_running, b.peak_waiting, b.mean_running, b.mean_waiting
        );
    }
    s.push('\n');
    if let Some(wm) = &r.worst_moment {
        let parts: Vec<String> = r
            .backends
            .iter()
            .zip(&wm.backends)
            .map(|(b, [run, wait])| format!("{} {run} running + {wait} waiting", b.instance))
            .collect();
        let _ = writeln!(s, "worst moment        {}: {}", when(wm.t_s), parts.join(" | "));
    }
    let _ = writeln!(s, "idle_while_queued_s {:.1}", r.idle_while_queued_s);
    let _ = writeln!(s, "stranded_slot_s     {:.1}", r.stranded_slot_s);
    s
}

/// Sample times from Prometheus or an OpenMetrics file are Unix seconds; a live `--scrape`
/// counts seconds from its start. Anything after 1973-03-03 (10^8 s) is taken for Unix time.
const UNIX_FROM_S: f64 = 1e8;

/// A sample time for people: Unix seconds as UTC (`2026-01-05 10:00:41 UTC`, with
/// milliseconds when it has them), seconds from the start of a live scrape as `t = 12.5 s`.
pub fn when(t_s: f64) -> String {
    if t_s >= UNIX_FROM_S && t_s.is_finite() {
        let ms = (t_s * 1000.0).round() as i64;
        if let Ok(ts) = jiff::Timestamp::from_millisecond(ms) {
            let fmt = if ms % 1000 == 0 {
                "%Y-%m-%d %H:%M:%S UTC"
            } else {
                "%Y-%m-%d %H:%M:%S%.3f UTC"
            };
            return ts.strftime(fmt).to_string();
        }
    }
    format!("t = {} s", crate::sweep::table::fmt_stat(t_s))
}

/// What the plot's time axis measures: time since the first sample, named in UTC when the
/// samples carry Unix time.
pub fn time_axis(o: &Observed) -> String {
    match o.times.first() {
        Some(&t0) if t0 >= UNIX_FROM_S => format!("time since {}", when(t0)),
        _ => "time since the first scrape".into(),
    }
}

/// The per-backend plot's data: `(name, slots, [(t_s from the first sample, running,
/// waiting)])`.
pub fn plot_data(o: &Observed, r: &Report) -> Vec<crate::plot::series::Panel> {
    let t0 = o.times.first().copied().unwrap_or(0.0);
    o.backends
        .iter()
        .zip(&r.backends)
        .map(|(b, rb)| {
            let pts = o
                .times
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    let v = |x: Option<f64>| x.unwrap_or(0.0).max(0.0).round() as u32;
                    (t - t0, v(b.running[k]), v(b.waiting[k]))
                })
                .collect();
            (b.instance.clone(), rb.slots, pts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_or_from_the_start() {
        assert_eq!(when(1_767_607_241.0), "2026-01-05 10:00:41 UTC");
        assert_eq!(when(1_767_607_241.5), "2026-01-05 10:00:41.500 UTC");
        assert_eq!(when(41.2), "t = 41.2 s");
    }

    fn body(series: &str) -> String {
        format!(r#"{{"status":"success","data":{{"resultType":"matrix","result":[{series}]}}}}"#)
    }

    fn s(name: &str, inst: &str, vals: &[(f64, &str)]) -> String {
        let v: Vec<String> = vals.iter().map(|(t, x)| format!("[{t},\"{x}\"]")).collect();
        format!(
            r#"{{"metric":{{"__name__":"{name}","instance":"{inst}","engine":"0"}},"values":[{}]}}"#,
            v.join(",")
        )
    }

    #[test]
    fn integrates_a_split_like_the_simulator() {
        // a: idle; b: 2 running, 2 waiting from t=10 to t=30; slots 2 each; step 10.
        let pts =
            |xs: [&'static str; 5]| -> Vec<(f64, &'static str)> { (0..5).map(|k| (k as f64 * 10.0, xs[k])).collect() };
        let all = [
            s("vllm:num_requests_running", "a", &pts(["0"; 5])),
            s("vllm:num_requests_waiting", "a", &pts(["0"; 5])),
            s("vllm:num_requests_running", "b", &pts(["0", "2", "2", "0", "0"])),
            s("vllm:num_requests_waiting", "b", &pts(["0", "2", "2", "0", "0"])),
            s("vllm:request_success_total", "a", &pts(["5", "5", "5", "5", "5"])),
            s("vllm:request_success_total", "b", &pts(["0", "1", "3", "1", "2"])),
        ];
        let o = parse_query_range("q", &body(&all.join(","))).unwrap();
        let mut slots = Slots::default();
        slots.add("2").unwrap();
        let r = analyze(&o, &slots).unwrap();
        assert_eq!(r.idle_while_queued_s, 20.0);
        assert_eq!(r.stranded_slot_s, 40.0);
        let w = r.worst_moment.as_ref().unwrap();
        assert_eq!(
            (w.t_s, w.stranded, w.backends.clone()),
            (10.0, 2.0, vec![[0.0, 0.0], [2.0, 2.0]])
        );
        // b: 0 -> 1 -> 3, reset to 1, -> 2: 3 + 1 + 1 = 5 requests; a: none.
        assert_eq!(r.backends[1].requests, Some(5.0));
        assert_eq!(r.backends[0].share, Some(0.0));
        assert!(render(&r).contains("idle_while_queued_s 20.0"));
    }

    #[test]
    fn bad_and_partial_responses_are_one_clear_error() {
        let e = |b: &str| parse_query_range("f.json", b).unwrap_err().to_string();
        assert!(e("{").contains("not a query_range JSON"));
        assert!(e(r#"{"status":"error","error":"bad query"}"#).contains("bad query"));
        assert!(e(r#"{"status":"success","warnings":["partial"],"data":{}}"#).contains("partial response"));
        assert!(e(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).contains("matrix"));
        assert!(e(&body(r#"{"metric":{},"values":[[1,2]]}"#)).contains("values[0]"));
        let only_running = body(&s("vllm:num_requests_running", "a", &[(0.0, "1")]));
        assert!(e(&only_running).contains("no vllm:num_requests_waiting series"));
        let one_missing = [
            s("vllm:num_requests_running", "a", &[(0.0, "1")]),
            s("vllm:num_requests_waiting", "a", &[(0.0, "1")]),
            s("vllm:num_requests_running", "b", &[(0.0, "1")]),
        ];
        assert!(e(&body(&one_missing.join(","))).contains("instance b has no vllm:num_requests_waiting"));
        let o = parse_query_range("f", &body(&one_missing[..2].join(","))).unwrap();
        assert!(
            analyze(&o, &Slots::default())
                .unwrap_err()
                .to_string()
                .contains("--slots a=N")
        );
    }

    #[test]
    fn metrics_text_sums_engines_and_skips_others() {
        let t = "# HELP vllm:num_requests_running x\nvllm:num_requests_running{engine=\"0\",model_name=\"a}b\"} 3.0\n\
                 vllm:num_requests_running{engine=\"1\"} 2\nvllm:num_requests_waiting 1 1700000000\n\
                 vllm:request_success_total{finished_reason=\"stop\"} 7\nvllm:other 9\n";
        let m = parse_metrics_text(t);
        assert_eq!(m.get("vllm:num_requests_running"), Some(&5.0));
        assert_eq!(m.get("vllm:num_requests_waiting"), Some(&1.0));
        assert_eq!(m.get("vllm:request_success_total"), Some(&7.0));
        assert_eq!(m.len(), 3);
        let mut sl = Slots::default();
        assert!(sl.add("0").is_err() && sl.add("x=y").is_err());
        sl.add("a:1=4").unwrap();
        assert_eq!(sl.of("a:1").unwrap(), 4);
    }
}
