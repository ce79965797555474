//! A run as vLLM's `/metrics` would have shown it to a Prometheus server scraping every
//! `step`: the per-backend series in vLLM's names and labels
//! ([`crate::vllm_metrics`]), sampled on a fixed grid, written as OpenMetrics text with
//! timestamps (`sim run --openmetrics`; `promtool tsdb create-blocks-from openmetrics` loads
//! it) and as promtool unit-test input (`sim alerts --test-out`).
//!
//! What each series is, per backend (`instance` = its URL's `host:port`, `job="vllm"`,
//! `engine="0"`): the gauges hold the engine's state at the sample instant (running,
//! waiting, KV blocks in use over the pool); `vllm:request_success_total` and the latency
//! histograms count requests whose last token was sampled by then; prompt tokens and prefix
//! cache queries and hits count at admission, generated tokens and preemptions at the
//! request's end (vLLM adds them per step: the difference is inside one request's life).
//! Faults change what the backend exports as they change what the router reads: under
//! `zero_stats` the gauges read zero while the counters go on counting; under `scrape_fail`
//! the backend has no sample at all.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::faults::FaultKind;
use crate::ids::BackendId;
use crate::sim::{BackendModel, RunResult, SimConfig};
use crate::time::SimTime;
use crate::vllm_metrics::{self as vm, Kind, Metric};

/// The `job` label fleetsim gives every exported series.
pub const JOB: &str = "vllm";

/// One sample row: a sample name, its labels, and a value per grid instant (`None`: no
/// sample then).
#[derive(Clone, Debug)]
pub struct Row {
    /// Sample name (`vllm:request_success_total`, `..._bucket`, ...).
    pub sample: String,
    /// Labels in writing order.
    pub labels: Vec<(String, String)>,
    /// Value at each grid instant.
    pub values: Vec<Option<f64>>,
}

/// One backend's rows of one family (one row, or a histogram's buckets, count and sum).
#[derive(Clone, Debug)]
pub struct Member {
    /// The backend's `instance` label.
    pub instance: String,
    /// Rows.
    pub rows: Vec<Row>,
}

/// One metric family.
#[derive(Clone, Debug)]
pub struct Family {
    /// Which.
    pub metric: Metric,
    /// One member per backend.
    pub members: Vec<Member>,
}

/// A run's series on a fixed grid `k * step`, `k = 0..=n`.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// Grid step, ns.
    pub step_ns: u64,
    /// Grid instants.
    pub times: Vec<SimTime>,
    /// Backends' `instance` labels, by backend index.
    pub instances: Vec<String>,
    /// Backends' slot limits, by backend index.
    pub slots: Vec<u32>,
    /// Families in [`vm::EXPORTED`] order.
    pub families: Vec<Family>,
}

impl Sampled {
    /// The values of `sample` for `instance`, summed over its other labels (`None` where
    /// no row has a sample).
    pub fn values(&self, sample: &str, instance: &str) -> Vec<Option<f64>> {
        let mut out: Vec<Option<f64>> = vec![None; self.times.len()];
        for f in &self.families {
            for m in f.members.iter().filter(|m| m.instance == instance) {
                for r in m.rows.iter().filter(|r| r.sample == sample) {
                    for (o, v) in out.iter_mut().zip(&r.values) {
                        if let Some(v) = v {
                            *o = Some(o.unwrap_or(0.0) + v);
                        }
                    }
                }
            }
        }
        out
    }
}

/// `host:port` of a backend URL (`http://backend-0:8000` gives `backend-0:8000`), the
/// `instance` label Prometheus gives the target.
pub fn instance_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// Whether a fault of kind `pred` covers backend `b` at `t`.
fn faulted(cfg: &SimConfig, b: BackendId, t: SimTime, pred: fn(&FaultKind) -> bool) -> bool {
    cfg.faults.iter().any(|f| pred(&f.kind) && f.covers(b, t))
}

/// Per-backend cumulative counters at one instant.
#[derive(Clone, Default)]
struct Counts {
    success: f64,
    prompt: f64,
    generation: f64,
    preemptions: f64,
    queries: f64,
    hits: f64,
    /// Per histogram (e2e, queue, TTFT): bucket counts (non-cumulative), count, sum.
    hist: [(Vec<f64>, f64, f64); 3],
}

const HISTOGRAMS: [Metric; 3] = [vm::E2E_REQUEST_LATENCY, vm::REQUEST_QUEUE_TIME, vm::TIME_TO_FIRST_TOKEN];

fn observe(h: &mut (Vec<f64>, f64, f64), buckets: &[f64], x: f64) {
    if h.0.is_empty() {
        h.0 = vec![0.0; buckets.len() + 1];
    }
    let i = buckets.iter().position(|&b| x <= b).unwrap_or(buckets.len());
    h.0[i] += 1.0;
    h.1 += 1.0;
    h.2 += x;
}

/// The served model's name: the profile's model (`llama-3.1-8b/h100/tp1` gives
/// `llama-3.1-8b`), else `default`.
fn model_name(res: &RunResult, b: usize) -> String {
    let p = res.summary.backends[b].profile.as_str();
    match p.split('/').next() {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => "default".to_string(),
    }
}

/// Samples a finished run (recorded with its series) every `step_ns` from 0 to the first
/// grid instant at or after its end.
pub fn sample(res: &RunResult, cfg: &SimConfig, step_ns: u64) -> Sampled {
    let step_ns = step_ns.max(1);
    let end_ns = (res.summary.sim_time_s * 1e9).round() as u64;
    let times: Vec<SimTime> = (0..=end_ns.div_ceil(step_ns)).map(|k| SimTime(k * step_ns)).collect();
    let instances: Vec<String> = res.summary.backends.iter().map(|b| instance_of(&b.url)).collect();
    let slots: Vec<u32> = res.summary.backends.iter().map(|b| b.slots).collect();
    let grid = Grid {
        res,
        cfg,
        times: &times,
        instances: &instances,
        gauges: gauges(res, &times),
        counts: counts(res, &times),
        unscraped: fault_grid(cfg, &times, res.summary.backends.len(), |k| {
            matches!(k, FaultKind::ScrapeFail)
        }),
        zero: fault_grid(cfg, &times, res.summary.backends.len(), |k| {
            matches!(k, FaultKind::ZeroStats)
        }),
    };
    let families = vm::EXPORTED
        .iter()
        .map(|m| Family {
            metric: *m,
            members: (0..instances.len())
                .map(|b| Member {
                    instance: instances[b].clone(),
                    rows: grid.rows(m, b),
                })
                .collect(),
        })
        .collect();
    Sampled {
        step_ns,
        times,
        instances,
        slots,
        families,
    }
}

/// Per backend, the engine's (running, waiting, KV blocks used) at each instant: the last
/// series row at or before it.
fn gauges(res: &RunResult, times: &[SimTime]) -> Vec<Vec<(u32, u32, u32)>> {
    let nb = res.summary.backends.len();
    let mut gauges = vec![vec![(0u32, 0u32, 0u32); times.len()]; nb];
    let mut cur = vec![(0u32, 0u32, 0u32); nb];
    let mut rows = res.series.iter().peekable();
    for (k, &t) in times.iter().enumerate() {
        while let Some(r) = rows.next_if(|r| r.t <= t) {
            cur[r.backend.index()] = (r.running, r.waiting, r.kv_used_blocks);
        }
        for b in 0..nb {
            gauges[b][k] = cur[b];
        }
    }
    gauges
}

/// What a request adds to its backend's counters and histograms, and when.
enum Inc {
    /// At admission: prompt tokens (prefix-cache queries) and the cached ones (hits).
    Admit { prompt: f64, cached: f64 },
    /// At its last token: a success, its output tokens and preemptions, and its latencies.
    Finish {
        output: f64,
        preemptions: f64,
        e2e: f64,
        queue: f64,
        ttft: f64,
    },
}

/// Per backend, the increments of its requests, `(time, request, increment)` in time order.
fn increments(res: &RunResult) -> Vec<Vec<(SimTime, usize, Inc)>> {
    let mut incs: Vec<Vec<(SimTime, usize, Inc)>> = (0..res.summary.backends.len()).map(|_| Vec::new()).collect();
    for (i, r) in res.requests.iter().enumerate() {
        let b = r.backend.index();
        let Some(t_engine) = r.t_engine else { continue };
        if let Some(ta) = r.t_admit {
            let inc = Inc::Admit {
                prompt: f64::from(r.prompt_tokens),
                cached: f64::from(r.cached_tokens),
            };
            incs[b].push((ta, i, inc));
        }
        if let (Some(tf), None) = (r.t_finish_engine, r.t_failed) {
            let secs = |t: Option<SimTime>| t.map_or(0.0, |t| (t - t_engine).as_secs_f64());
            let inc = Inc::Finish {
                output: f64::from(r.output_tokens),
                preemptions: f64::from(r.preemptions),
                e2e: secs(Some(tf)),
                queue: secs(r.t_admit),
                ttft: secs(r.t_first_token),
            };
            incs[b].push((tf, i, inc));
        }
    }
    for list in &mut incs {
        list.sort_by_key(|&(t, i, _)| (t, i));
    }
    incs
}

impl Counts {
    /// Counters and histograms at zero.
    fn zero() -> Counts {
        let mut c = Counts::default();
        for (h, m) in c.hist.iter_mut().zip(&HISTOGRAMS) {
            h.0 = vec![0.0; m.buckets.len() + 1];
        }
        c
    }

    /// Adds one request's increment.
    fn add(&mut self, inc: &Inc) {
        match inc {
            Inc::Admit { prompt, cached } => {
                self.prompt += prompt;
                self.queries += prompt;
                self.hits += cached;
            }
            Inc::Finish {
                output,
                preemptions,
                e2e,
                queue,
                ttft,
            } => {
                self.success += 1.0;
                self.generation += output;
                self.preemptions += preemptions;
                for (j, x) in [*e2e, *queue, *ttft].into_iter().enumerate() {
                    observe(&mut self.hist[j], HISTOGRAMS[j].buckets, x);
                }
            }
        }
    }
}

/// Per backend, its cumulative counters at each instant.
fn counts(res: &RunResult, times: &[SimTime]) -> Vec<Vec<Counts>> {
    increments(res)
        .iter()
        .map(|list| {
            let mut c = Counts::zero();
            let mut it = list.iter().peekable();
            times
                .iter()
                .map(|&t| {
                    while let Some((_, _, inc)) = it.next_if(|(ti, _, _)| *ti <= t) {
                        c.add(inc);
                    }
                    c.clone()
                })
                .collect()
        })
        .collect()
}

/// Per backend and instant, whether a fault of a kind `pred` accepts covers it.
fn fault_grid(cfg: &SimConfig, times: &[SimTime], nb: usize, pred: fn(&FaultKind) -> bool) -> Vec<Vec<bool>> {
    (0..nb)
        .map(|b| {
            times
                .iter()
                .map(|&t| faulted(cfg, BackendId::from_index(b), t, pred))
                .collect()
        })
        .collect()
}

/// A run laid on the sample grid: what every exported family's rows are read from.
struct Grid<'a> {
    res: &'a RunResult,
    cfg: &'a SimConfig,
    times: &'a [SimTime],
    instances: &'a [String],
    gauges: Vec<Vec<(u32, u32, u32)>>,
    counts: Vec<Vec<Counts>>,
    /// The backend has no sample at the instant (`scrape_fail`).
    unscraped: Vec<Vec<bool>>,
    /// Its gauges read zero (`zero_stats`).
    zero: Vec<Vec<bool>>,
}

impl Grid<'_> {
    /// The labels every series of backend `b` carries.
    fn base(&self, b: usize) -> Vec<(String, String)> {
        vec![
            (vm::LABEL_JOB.into(), JOB.into()),
            (vm::LABEL_INSTANCE.into(), self.instances[b].clone()),
            (vm::LABEL_MODEL_NAME.into(), model_name(self.res, b)),
            (vm::LABEL_ENGINE.into(), "0".into()),
        ]
    }

    /// `f` of each instant where backend `b` has a sample.
    fn series(&self, b: usize, f: &dyn Fn(usize) -> f64) -> Vec<Option<f64>> {
        (0..self.times.len())
            .map(|k| (!self.unscraped[b][k]).then(|| f(k)))
            .collect()
    }

    /// A gauge of backend `b`: `f`, or zero under `zero_stats`.
    fn gauge(&self, b: usize, f: &dyn Fn(usize) -> f64) -> Vec<Option<f64>> {
        self.series(b, &|k| if self.zero[b][k] { 0.0 } else { f(k) })
    }

    /// The rows of family `m` for backend `b`.
    fn rows(&self, m: &Metric, b: usize) -> Vec<Row> {
        let (g, c) = (&self.gauges[b], &self.counts[b]);
        let one = |values| {
            vec![Row {
                sample: m.sample_name(),
                labels: self.base(b),
                values,
            }]
        };
        match m.name {
            n if n == vm::CACHE_CONFIG_INFO.name => vec![self.cache_config(m, b)],
            n if n == vm::NUM_REQUESTS_RUNNING.name => one(self.gauge(b, &|k| f64::from(g[k].0))),
            n if n == vm::NUM_REQUESTS_WAITING.name => one(self.gauge(b, &|k| f64::from(g[k].1))),
            n if n == vm::KV_CACHE_USAGE_PERC.name => {
                let blocks = match &self.cfg.models[b] {
                    BackendModel::Vllm(v) => f64::from(v.kv_blocks.max(1)),
                    BackendModel::Queueing { .. } => 1.0,
                };
                one(self.gauge(b, &|k| f64::from(g[k].2) / blocks))
            }
            n if n == vm::PREFIX_CACHE_QUERIES.name => one(self.series(b, &|k| c[k].queries)),
            n if n == vm::PREFIX_CACHE_HITS.name => one(self.series(b, &|k| c[k].hits)),
            n if n == vm::NUM_PREEMPTIONS.name => one(self.series(b, &|k| c[k].preemptions)),
            n if n == vm::PROMPT_TOKENS.name => one(self.series(b, &|k| c[k].prompt)),
            n if n == vm::GENERATION_TOKENS.name => one(self.series(b, &|k| c[k].generation)),
            n if n == vm::REQUEST_SUCCESS.name => {
                let mut labels = self.base(b);
                // Simulated requests end at their sampled output length: a natural stop.
                labels.push((vm::LABEL_FINISHED_REASON.into(), "stop".into()));
                vec![Row {
                    sample: m.sample_name(),
                    labels,
                    values: self.series(b, &|k| c[k].success),
                }]
            }
            _ => self.histogram(m, b),
        }
    }

    /// `vllm:cache_config_info` of backend `b`: its KV cache set-up in labels, value 1.
    fn cache_config(&self, m: &Metric, b: usize) -> Row {
        let (blocks, size, prefix) = match &self.cfg.models[b] {
            BackendModel::Vllm(v) => (v.kv_blocks, v.block_size_tokens, v.prefix_caching),
            BackendModel::Queueing { .. } => (0, 0, false),
        };
        let mut labels = vec![
            (vm::LABEL_JOB.into(), JOB.into()),
            (vm::LABEL_INSTANCE.into(), self.instances[b].clone()),
        ];
        let vals = [
            size.to_string(),
            if prefix { "True" } else { "False" }.into(),
            blocks.to_string(),
        ];
        labels.extend(vm::CACHE_CONFIG_LABELS.iter().map(|l| l.to_string()).zip(vals));
        labels.push((vm::LABEL_ENGINE.into(), "0".into()));
        Row {
            sample: m.sample_name(),
            labels,
            values: self.series(b, &|_| 1.0),
        }
    }

    /// The latency histogram `m` of backend `b`: its cumulative buckets, count and sum.
    fn histogram(&self, m: &Metric, b: usize) -> Vec<Row> {
        let c = &self.counts[b];
        let j = HISTOGRAMS
            .iter()
            .position(|h| h.name == m.name)
            .expect("an exported histogram");
        let les = m.buckets.iter().map(|&x| le_label(x)).chain(["+Inf".into()]);
        let mut rows: Vec<Row> = les
            .enumerate()
            .map(|(i, le)| {
                let mut labels = self.base(b);
                labels.push(("le".into(), le));
                Row {
                    sample: format!("{}_bucket", m.name),
                    labels,
                    values: self.series(b, &|k| c[k].hist[j].0[..=i].iter().sum()),
                }
            })
            .collect();
        rows.push(Row {
            sample: format!("{}_count", m.name),
            labels: self.base(b),
            values: self.series(b, &|k| c[k].hist[j].1),
        });
        rows.push(Row {
            sample: format!("{}_sum", m.name),
            labels: self.base(b),
            values: self.series(b, &|k| c[k].hist[j].2),
        });
        rows
    }
}

/// A bucket bound as prometheus_client writes it (`1.0`, `0.3`).
fn le_label(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// A label value escaped for the text formats (and PromQL strings): `\`, `"`, newline.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// `name{a="x",b="y"}`.
pub fn selector(sample: &str, labels: &[(String, String)]) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{sample}{{{}}}", inner.join(","))
}

/// A value as the text formats write it (shortest round trip, integers without a point).
pub fn fmt_value(v: f64) -> String {
    format!("{v}")
}

/// Seconds since the epoch for grid instant `t` shifted by `epoch_s`, with nanosecond
/// digits only as needed.
fn fmt_ts(epoch_s: u64, t: SimTime) -> String {
    let (s, ns) = (epoch_s + t.0 / 1_000_000_000, t.0 % 1_000_000_000);
    if ns == 0 {
        s.to_string()
    } else {
        let frac = format!("{ns:09}");
        format!("{s}.{}", frac.trim_end_matches('0'))
    }
}

/// OpenMetrics text: each family's HELP and TYPE, then per backend its samples in time
/// order (a histogram's buckets, count and sum together at each instant), then `# EOF`.
/// Timestamps are `epoch_s` plus simulated time.
pub fn openmetrics(s: &Sampled, epoch_s: u64) -> String {
    let mut out = String::new();
    for f in &s.families {
        let _ = writeln!(out, "# HELP {} {}", f.metric.name, f.metric.help);
        let _ = writeln!(out, "# TYPE {} {}", f.metric.name, f.metric.kind.as_str());
        for m in &f.members {
            let heads: Vec<String> = m.rows.iter().map(|r| selector(&r.sample, &r.labels)).collect();
            for (k, &t) in s.times.iter().enumerate() {
                let ts = fmt_ts(epoch_s, t);
                for (r, head) in m.rows.iter().zip(&heads) {
                    if let Some(v) = r.values[k] {
                        let _ = writeln!(out, "{head} {} {ts}", fmt_value(v));
                    }
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// A value list in promtool's expanding notation: runs of one value as `v+0xN`, runs of
/// missing samples as `_xN`.
pub fn promtool_values(values: &[Option<f64>]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i + 1;
        while j < values.len() && values[j] == values[i] {
            j += 1;
        }
        let run = j - i;
        let v = values[i].map_or_else(|| "_".to_string(), fmt_value);
        parts.push(match (run, values[i].is_some()) {
            (1, _) => v,
            (_, true) => format!("{v}+0x{}", run - 1),
            (_, false) => format!("_x{run}"),
        });
        i = j;
    }
    parts.join(" ")
}

/// The rows of the families named, as promtool `input_series` (series selector, values).
pub fn input_series(s: &Sampled, families: &[&str]) -> Vec<(String, String)> {
    let wanted: BTreeMap<&str, ()> = families.iter().map(|f| (*f, ())).collect();
    let mut out = Vec::new();
    for f in s.families.iter().filter(|f| wanted.contains_key(f.metric.name)) {
        for m in &f.members {
            for r in &m.rows {
                out.push((selector(&r.sample, &r.labels), promtool_values(&r.values)));
            }
        }
    }
    out
}

/// Whether `m` is a counter or histogram (its samples only rise).
pub fn is_cumulative(m: &Metric) -> bool {
    m.kind != Kind::Gauge
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(instance_of("http://backend-0:8000"), "backend-0:8000");
        assert_eq!(instance_of("https://a.b:1/x/y"), "a.b:1");
        assert_eq!(instance_of("a:1"), "a:1");
        assert_eq!(le_label(1.0), "1.0");
        assert_eq!(le_label(0.3), "0.3");
        assert_eq!(fmt_ts(0, SimTime(1_500_000_000)), "1.5");
        assert_eq!(fmt_ts(100, SimTime(2_000_000_000)), "102");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(
            promtool_values(&[Some(0.0), Some(0.0), Some(0.0), Some(1.5), None, None]),
            "0+0x2 1.5 _x2"
        );
        assert_eq!(promtool_values(&[Some(2.0)]), "2");
        assert_eq!(promtool_values(&[None]), "_");
        assert!(is_cumulative(&vm::REQUEST_SUCCESS) && !is_cumulative(&vm::NUM_REQUESTS_RUNNING));
    }
}
