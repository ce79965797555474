//! `sim validate`: replays a measurement's requests through the engine model with a
//! profile and compares per-request latencies (TTFT, TPOT, E2E) and the engine's gauges
//! over time with what was measured.
//!
//! Errors are the simulated figure's relative deviation from the measured one, in percent
//! (`(sim / measured - 1) x 100`): for each statistic (mean, p50, p90, p99) and per request
//! (MAPE, and the quantiles of the signed per-request error). Every figure goes into one
//! flat map (`validation.json`), which `--check` bounds read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Result, anyhow, bail};

use super::window::Window;
use super::{Workload, target};
use crate::backend::replay::{Replay, replay};
use crate::backend::vllm::VllmConfig;
use crate::measure::Measurement;

/// Mean and percentiles.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Linear-interpolation quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (idx.floor() as usize, idx.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo as f64)
}

impl Stat {
    /// Of `xs`.
    pub fn of(xs: &[f64]) -> Stat {
        let mut s = xs.to_vec();
        s.sort_by(f64::total_cmp);
        Stat {
            mean: s.iter().sum::<f64>() / s.len().max(1) as f64,
            p50: quantile(&s, 0.5),
            p90: quantile(&s, 0.9),
            p99: quantile(&s, 0.99),
        }
    }
}

/// One latency, measured against simulated.
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    /// `ttft`, `tpot` or `e2e`.
    pub name: &'static str,
    /// Measured, s.
    pub measured: Stat,
    /// Simulated, s.
    pub simulated: Stat,
    /// Mean absolute per-request error, %.
    pub mape_pct: f64,
    /// Signed per-request error, % (p10, p50, p90).
    pub per_request_pct: [f64; 3],
    /// Measured and simulated value per request (s), in the measurement's order.
    pub pairs: Vec<(f64, f64)>,
}

fn pct(sim: f64, meas: f64) -> f64 {
    (sim / meas - 1.0) * 100.0
}

/// One gauge over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Gauge {
    /// `running` or `waiting`.
    pub name: &'static str,
    /// Time-average measured.
    pub measured_mean: f64,
    /// Time-average simulated.
    pub simulated_mean: f64,
    /// Root mean square difference over the samples.
    pub rmse: f64,
    /// `(t_s, measured, simulated)` per sample.
    pub points: Vec<(f64, f64, f64)>,
}

/// A validation.
#[derive(Clone, Debug)]
pub struct Validation {
    /// The measurement.
    pub source: String,
    /// The profile's name.
    pub profile: String,
    /// Requests compared.
    pub requests: usize,
    /// Their indices in the measurement.
    pub scored: Vec<usize>,
    /// The window they arrived in.
    pub window: Window,
    /// TTFT, TPOT, E2E.
    pub latencies: Vec<Latency>,
    /// Running and waiting (when measured).
    pub gauges: Vec<Gauge>,
    /// Cumulative generation tokens `(t_s, measured, simulated)`, when measured.
    pub cum_gen: Vec<(f64, f64, f64)>,
    /// Engine steps and preemptions in the replay.
    pub steps: u64,
    /// Preemptions in the replay.
    pub preemptions: u64,
}

impl Validation {
    /// Every figure by name (what `--check` reads and `validation.json` holds).
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("requests".into(), self.requests as f64);
        m.insert("sim_steps".into(), self.steps as f64);
        m.insert("sim_preemptions".into(), self.preemptions as f64);
        for l in &self.latencies {
            let n = l.name;
            for (stat, a, b) in [
                ("mean", l.measured.mean, l.simulated.mean),
                ("p50", l.measured.p50, l.simulated.p50),
                ("p90", l.measured.p90, l.simulated.p90),
                ("p99", l.measured.p99, l.simulated.p99),
            ] {
                m.insert(format!("{n}_{stat}_measured_s"), a);
                m.insert(format!("{n}_{stat}_simulated_s"), b);
                m.insert(format!("{n}_{stat}_err_pct"), pct(b, a));
            }
            m.insert(format!("{n}_mape_pct"), l.mape_pct);
            m.insert(format!("{n}_request_err_p10_pct"), l.per_request_pct[0]);
            m.insert(format!("{n}_request_err_p50_pct"), l.per_request_pct[1]);
            m.insert(format!("{n}_request_err_p90_pct"), l.per_request_pct[2]);
        }
        for g in &self.gauges {
            m.insert(format!("{}_mean_measured", g.name), g.measured_mean);
            m.insert(format!("{}_mean_simulated", g.name), g.simulated_mean);
            m.insert(format!("{}_rmse", g.name), g.rmse);
        }
        m
    }

    /// The table, in Markdown.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let scope = if self.window.is_all() {
            String::new()
        } else {
            format!(" arriving in --window {} (the whole run replayed)", self.window.text())
        };
        let _ = writeln!(
            s,
            "{}: {} requests{scope} scored, profile {} ({} engine steps, {} preemptions)\n",
            self.source, self.requests, self.profile, self.steps, self.preemptions
        );
        let _ = writeln!(
            s,
            "| metric | measured mean | simulated mean | mean err | p50 err | p90 err | p99 err | MAPE | per-request err p10 / p50 / p90 |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for l in &self.latencies {
            let unit = if l.name == "tpot" { 1e3 } else { 1.0 };
            let u = if l.name == "tpot" { "ms" } else { "s" };
            let _ = writeln!(
                s,
                "| {} | {:.2} {u} | {:.2} {u} | {:+.1} % | {:+.1} % | {:+.1} % | {:+.1} % | {:.1} % | {:+.1} / {:+.1} / {:+.1} % |",
                l.name.to_uppercase(),
                l.measured.mean * unit,
                l.simulated.mean * unit,
                pct(l.simulated.mean, l.measured.mean),
                pct(l.simulated.p50, l.measured.p50),
                pct(l.simulated.p90, l.measured.p90),
                pct(l.simulated.p99, l.measured.p99),
                l.mape_pct,
                l.per_request_pct[0],
                l.per_request_pct[1],
                l.per_request_pct[2],
            );
        }
        if !self.gauges.is_empty() {
            let _ = writeln!(
                s,
                "\n| gauge | measured mean | simulated mean | RMSE |\n|---|---:|---:|---:|"
            );
            for g in &self.gauges {
                let _ = writeln!(
                    s,
                    "| {} | {:.1} | {:.1} | {:.1} |",
                    g.name, g.measured_mean, g.simulated_mean, g.rmse
                );
            }
        }
        s
    }
}

fn latency(name: &'static str, pairs: Vec<(f64, f64)>) -> Latency {
    let meas: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let sim: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let mut errs: Vec<f64> = pairs.iter().filter(|p| p.0 > 0.0).map(|p| pct(p.1, p.0)).collect();
    let mape = errs.iter().map(|e| e.abs()).sum::<f64>() / errs.len().max(1) as f64;
    errs.sort_by(f64::total_cmp);
    Latency {
        name,
        measured: Stat::of(&meas),
        simulated: Stat::of(&sim),
        mape_pct: mape,
        per_request_pct: [quantile(&errs, 0.1), quantile(&errs, 0.5), quantile(&errs, 0.9)],
        pairs,
    }
}

/// The replay of `w`, refused when it runs past the series' grid (a profile far too slow
/// for the measurement: its samples would not cover the run).
fn whole_replay(m: &Measurement, cfg: &VllmConfig, w: &Workload, profile: &str) -> Result<Replay> {
    let rep = replay(cfg, &w.requests, &w.opts);
    if rep.past_grid {
        bail!(
            "{}: with profile {profile}, the replay runs past {} intervals of {} s (the most a series keeps): the profile's step time is far too slow for this measurement",
            crate::quote::escape(&m.source),
            crate::backend::replay::MAX_SAMPLES,
            w.opts.interval.as_secs_f64()
        );
    }
    Ok(rep)
}

/// Replays the measurement with `cfg` (the whole run) and compares the requests that
/// arrive in `window`, and the gauges over the window's span of the measured series.
pub fn validate(
    m: &Measurement,
    cfg: &VllmConfig,
    w: &Workload,
    profile: &str,
    window: Window,
) -> Result<(Validation, Replay)> {
    if m.requests.is_empty() {
        bail!("{}: no requests", crate::quote::escape(&m.source));
    }
    let rep = whole_replay(m, cfg, w, profile)?;
    let scored: Vec<usize> = (0..m.requests.len())
        .filter(|&i| window.contains(m.requests[i].queued_s - w.first_s))
        .collect();
    if scored.is_empty() {
        bail!(
            "{}: no request arrives in --window {}",
            crate::quote::escape(&m.source),
            window.text()
        );
    }
    let s = |t: crate::time::SimTime| t.as_secs_f64() + w.origin_s;
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    let mut e2e = Vec::new();
    for &i in &scored {
        let (r, q) = (&m.requests[i], &rep.requests[i]);
        // The simulated request is timed from when it was sent, as measured: its arrival
        // at the engine less the client's trip (0 when the engine stamped the times).
        let queued = s(q.queued) - w.client_delay_s;
        ttft.push((r.ttft_s(), s(q.first_token) - queued));
        e2e.push((r.e2e_s(), s(q.last_token) - queued));
        if let Some(t) = r.tpot_s() {
            tpot.push((t, (s(q.last_token) - s(q.first_token)) / f64::from(r.output_tokens - 1)));
        }
    }
    let mut latencies = vec![latency("ttft", ttft)];
    if !tpot.is_empty() {
        latencies.push(latency("tpot", tpot));
    }
    latencies.push(latency("e2e", e2e));
    let (gauges, cum_gen) = if m.series.is_some() {
        gauges(m, w, &rep, window)?
    } else {
        (Vec::new(), Vec::new())
    };
    Ok((
        Validation {
            source: m.source.clone(),
            profile: profile.to_string(),
            requests: scored.len(),
            scored,
            window,
            latencies,
            gauges,
            cum_gen,
            steps: rep.steps,
            preemptions: rep.preemptions,
        },
        rep,
    ))
}

/// Running and waiting, measured against simulated, over the measured series' samples
/// in the window (the simulation's length does not enter), and the cumulative generation
/// tokens.
type GaugesAndTokens = (Vec<Gauge>, Vec<(f64, f64, f64)>);

fn gauges(m: &Measurement, w: &Workload, rep: &Replay, window: Window) -> Result<GaugesAndTokens> {
    let t = target(m, w)?;
    let dt = w.opts.interval.as_secs_f64();
    let at = |k: usize| w.origin_s + (k + 1) as f64 * dt;
    let inside = |k: usize| window.contains((k + 1) as f64 * dt - t.offset_s);
    let mut gauges = Vec::new();
    for (name, meas, f) in [
        (
            "running",
            &t.running,
            (|x: &crate::backend::replay::Sample| f64::from(x.running)) as fn(&_) -> f64,
        ),
        ("waiting", &t.waiting, |x| f64::from(x.waiting)),
    ] {
        let Some(meas) = meas else { continue };
        let points: Vec<(f64, f64, f64)> = (0..meas.len())
            .filter(|&k| inside(k))
            .map(|k| (at(k), meas[k], rep.samples.get(k).map_or(0.0, f)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let n = points.len() as f64;
        let mean = |i: usize| points.iter().map(|p| if i == 1 { p.1 } else { p.2 }).sum::<f64>() / n;
        let rmse = (points.iter().map(|p| (p.1 - p.2).powi(2)).sum::<f64>() / n).sqrt();
        gauges.push(Gauge {
            name,
            measured_mean: mean(1),
            simulated_mean: mean(2),
            rmse,
            points,
        });
    }
    let mut cum_gen = Vec::new();
    if let Some(meas) = &t.cum_gen {
        let n = rep.samples.len().max(meas.len());
        let mut acc = 0.0;
        let sim: Vec<f64> = rep
            .samples
            .iter()
            .map(|x| {
                acc += x.generation_tokens as f64;
                acc
            })
            .collect();
        let hold = |v: &[f64], k: usize| v.get(k).copied().unwrap_or(v.last().copied().unwrap_or(0.0));
        cum_gen = (0..n).map(|k| (at(k), hold(meas, k), hold(&sim, k))).collect();
    }
    Ok((gauges, cum_gen))
}

/// A bound on a validation figure: `METRIC OP NUMBER` or `abs(METRIC) OP NUMBER`, with
/// OP one of `<`, `<=`, `>`, `>=`.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// As written.
    pub text: String,
    metric: String,
    abs: bool,
    op: &'static str,
    bound: f64,
}

impl Bound {
    /// Parses a bound, checking the metric against `known`.
    pub fn parse(text: &str, known: &BTreeMap<String, f64>) -> Result<Bound> {
        let t = text.trim();
        let op = ["<=", ">=", "<", ">"]
            .into_iter()
            .find(|o| t.contains(o))
            .ok_or_else(|| anyhow!("--check {}: no comparison (<, <=, >, >=)", crate::quote::quote(t)))?;
        let (lhs, rhs) = t.split_once(op).expect("found above");
        let bound: f64 = rhs.trim().parse().ok().filter(|b: &f64| b.is_finite()).ok_or_else(|| {
            anyhow!(
                "--check {}: {} is not a number",
                crate::quote::quote(t),
                crate::quote::quote(rhs.trim())
            )
        })?;
        let lhs = lhs.trim();
        let (abs, metric) = match lhs.strip_prefix("abs(").and_then(|x| x.strip_suffix(')')) {
            Some(inner) => (true, inner.trim()),
            None => (false, lhs),
        };
        if !known.contains_key(metric) {
            bail!(
                "--check {}: unknown metric {} (validation.json lists them, e.g. e2e_mean_err_pct)",
                crate::quote::quote(t),
                crate::quote::quote(metric)
            );
        }
        Ok(Bound {
            text: t.to_string(),
            metric: metric.to_string(),
            abs,
            op,
            bound,
        })
    }

    /// The value and whether the bound holds.
    pub fn eval(&self, m: &BTreeMap<String, f64>) -> (f64, bool) {
        let mut x = m.get(&self.metric).copied().unwrap_or(f64::NAN);
        if self.abs {
            x = x.abs();
        }
        let ok = match self.op {
            "<=" => x <= self.bound,
            ">=" => x >= self.bound,
            "<" => x < self.bound,
            _ => x > self.bound,
        };
        (x, ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_bounds() {
        let s = Stat::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.mean, s.p50), (2.5, 2.5));
        let l = latency("e2e", vec![(1.0, 1.1), (2.0, 1.8)]);
        assert!((l.mape_pct - 10.0).abs() < 1e-9);
        let mut m = BTreeMap::new();
        m.insert("e2e_mean_err_pct".to_string(), -2.5);
        let b = Bound::parse("abs(e2e_mean_err_pct) <= 3", &m).unwrap();
        assert_eq!(b.eval(&m), (2.5, true));
        assert!(!Bound::parse("e2e_mean_err_pct > 0", &m).unwrap().eval(&m).1);
        assert!(
            Bound::parse("nope < 3", &m)
                .unwrap_err()
                .to_string()
                .contains("unknown metric")
        );
        assert!(Bound::parse("e2e_mean_err_pct", &m).is_err());
    }
}
