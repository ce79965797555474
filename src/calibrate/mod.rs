//! `sim calibrate`: fits a profile's step-time coefficients to a real vLLM engine's own
//! series by simulation: the measured requests are replayed through the engine model
//! ([`crate::backend::replay`]) with candidate coefficients, and Nelder-Mead (argmin)
//! minimises the distance between the simulated and the measured engine series
//! (cumulative prompt and generation tokens, running, waiting). Per-request latencies are
//! not used: they are what [`validate`] judges the fit on.
//!
//! The engine configuration comes from the measurement's metadata, overridden by `vllm
//! serve` flags (`--engine-args`); what is still unknown is derived as vLLM derives it
//! (KV blocks from the model's shape and the GPU's memory) or refused with the flag to
//! give.
//!
//! Owns: engine setup from a measurement, the loss, the fit. May not see: scenario runs.
//! Invariant: deterministic (a fixed start and simplex, the replay is deterministic, no
//! clock enters the result).

mod optim;
pub mod physics;
pub mod plot;
pub mod setup;
pub mod validate;
pub mod window;

pub use setup::{Setup, SetupOptions, parse_engine_args, setup};

use anyhow::{Result, anyhow, bail};

use crate::backend::perf::StepTimeModel;
use crate::backend::replay::{Replay, ReplayOptions, ReplayRequest, replay};
use crate::backend::vllm::VllmConfig;
use crate::measure::{Client, Measurement};
use crate::profiles::auto::{Coefficients, Deployment, SHIPPED};
use crate::profiles::file::{About, Engine, Fit, Physics, ProfileFile, StepTime};
use crate::time::{SimDuration, SimTime};
use optim::{Round, minimize};

/// The replay of a measurement's requests: arrivals relative to `origin_s`.
pub struct Workload {
    /// Requests, sorted by arrival.
    pub requests: Vec<ReplayRequest>,
    /// Replay options.
    pub opts: ReplayOptions,
    /// Seconds of the measurement's clock at replay time zero.
    pub origin_s: f64,
    /// The first request's arrival on the measurement's clock (where windows start).
    pub first_s: f64,
    /// Seconds from a request's recorded start to its arrival at the engine (the trip
    /// from a client that timed it; 0 when the engine stamped it).
    pub client_delay_s: f64,
}

/// The replay inputs of a measurement on the engines `s` describes, a client-timed
/// request reaching its engine `client_delay_s` after it was sent; refuses requests
/// larger than the KV cache.
pub fn workload(m: &Measurement, s: &Setup, client_delay_s: f64) -> Result<Workload> {
    let cfg = &s.cfg;
    let origin_s = m.requests.iter().map(|r| r.queued_s).fold(0.0f64, f64::min);
    let first_s = m.requests.iter().map(|r| r.queued_s).fold(f64::INFINITY, f64::min);
    let interval_s = m.series.as_ref().map_or(1.0, |s| s.interval_s);
    let delay = if m.client_timed() { client_delay_s.max(0.0) } else { 0.0 };
    let cap = u64::from(cfg.kv_blocks) * u64::from(cfg.block_size_tokens);
    let mut requests = Vec::with_capacity(m.requests.len());
    for r in &m.requests {
        let total = u64::from(r.input_tokens) + u64::from(r.output_tokens);
        if total > cap {
            bail!(
                "{}:{}: request {} needs {total} tokens of KV cache, more than the engine's {cap}",
                crate::quote::escape(&m.source),
                r.line,
                crate::quote::quote(&r.id)
            );
        }
        // Readers bound the span (`measure::check_span`); checked again at the conversion.
        let arrival = crate::time::checked_secs_to_ns(r.queued_s - origin_s + delay, crate::backend::replay::MAX_SPAN)
            .map_err(|e| {
                anyhow!(
                    "{}:{}: the request's arrival: {e}",
                    crate::quote::escape(&m.source),
                    r.line
                )
            })?;
        requests.push(ReplayRequest {
            arrival: SimTime(arrival),
            prompt_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
        });
    }
    Ok(Workload {
        requests,
        opts: s.replay_options(ReplayOptions::single(
            match m.client {
                Client::Open => None,
                Client::Closed(c) => Some(c),
            },
            SimDuration::try_from_secs_f64(interval_s, crate::backend::replay::MAX_SPAN)
                .ok()
                .filter(|i| *i >= crate::backend::replay::MIN_INTERVAL)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: a series interval of {interval_s} s",
                        crate::quote::escape(&m.source)
                    )
                })?,
        )),
        origin_s,
        first_s: if first_s.is_finite() { first_s } else { origin_s },
        client_delay_s: delay,
    })
}

/// The measured series the fit aims at, on the replay's sample grid.
#[derive(Clone, Debug, Default)]
pub struct Target {
    /// Cumulative prompt tokens at each sample.
    pub cum_prompt: Option<Vec<f64>>,
    /// Cumulative generation tokens.
    pub cum_gen: Option<Vec<f64>>,
    /// Running.
    pub running: Option<Vec<f64>>,
    /// Waiting.
    pub waiting: Option<Vec<f64>>,
    /// The samples the loss compares: those ending in this window.
    pub window: window::Window,
    /// Seconds from the grid's origin to the first arrival (where windows start).
    pub offset_s: f64,
}

/// The measured series on the replay grid (sample `k` ends at `origin + (k + 1) x
/// interval`); rows off the grid are placed on the nearest sample.
pub fn target(m: &Measurement, w: &Workload) -> Result<Target> {
    let s = m.series.as_ref().ok_or_else(|| {
        anyhow!(
            "{}: no engine series to fit to (give --series)",
            crate::quote::escape(&m.source)
        )
    })?;
    let dt = w.opts.interval.as_secs_f64();
    let n = s
        .rows
        .iter()
        .map(|r| ((r.t_s - w.origin_s) / dt).round().max(1.0) as usize)
        .max()
        .unwrap_or(1);
    let col = |f: fn(&crate::measure::SeriesRow) -> Option<f64>, cumulative: bool| -> Option<Vec<f64>> {
        if !s.has(f) {
            return None;
        }
        let mut v = vec![0.0; n];
        for r in &s.rows {
            let k = (((r.t_s - w.origin_s) / dt).round().max(1.0) as usize) - 1;
            if let Some(x) = f(r) {
                v[k] = if cumulative { x * s.interval_s } else { x };
            }
        }
        if cumulative {
            let mut acc = 0.0;
            v.iter_mut().for_each(|x| {
                acc += *x;
                *x = acc;
            });
        }
        Some(v)
    };
    Ok(Target {
        cum_prompt: col(|r| r.prompt_tps, true),
        cum_gen: col(|r| r.gen_tps, true),
        running: col(|r| r.running, false),
        waiting: col(|r| r.waiting, false),
        window: window::Window::ALL,
        offset_s: w.first_s - w.origin_s,
    })
}

/// Each term of the loss (normalised RMSEs) and their sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossTerms {
    /// Cumulative prompt tokens, RMSE over the measured total.
    pub cum_prompt: Option<f64>,
    /// Cumulative generation tokens, RMSE over the measured total.
    pub cum_gen: Option<f64>,
    /// Running, RMSE over the measured mean.
    pub running: Option<f64>,
    /// Waiting, RMSE over the measured mean (at least 1).
    pub waiting: Option<f64>,
}

impl LossTerms {
    /// The sum of the terms present.
    pub fn total(&self) -> f64 {
        [self.cum_prompt, self.cum_gen, self.running, self.waiting]
            .into_iter()
            .flatten()
            .sum()
    }
}

/// The loss of a replay against the target over the samples ending in the target's
/// window (cumulative series counted from the window's start). An open end runs to the
/// later of the two series' ends; past its end a series holds its totals and zero
/// gauges.
pub fn loss(rep: &Replay, t: &Target) -> LossTerms {
    let sim = |f: fn(&crate::backend::replay::Sample) -> f64, cumulative: bool| -> Vec<f64> {
        let mut acc = 0.0;
        rep.samples
            .iter()
            .map(|s| {
                if cumulative {
                    acc += f(s);
                    acc
                } else {
                    f(s)
                }
            })
            .collect()
    };
    let dt = rep.samples.first().map_or(1.0, |s| s.t.as_secs_f64());
    let term = |meas: &Option<Vec<f64>>, simv: Vec<f64>, cumulative: bool, floor: f64| -> Option<f64> {
        let meas = meas.as_ref()?;
        let at = |v: &[f64], k: usize| -> f64 {
            match v.get(k) {
                Some(x) => *x,
                None if cumulative => v.last().copied().unwrap_or(0.0),
                None => 0.0,
            }
        };
        let end = meas.len().max(simv.len());
        let (k0, k1) = span(t.window, dt, t.offset_s, end);
        if k1 <= k0 {
            return None;
        }
        let base = |v: &[f64]| if cumulative && k0 > 0 { at(v, k0 - 1) } else { 0.0 };
        let (bs, bm) = (base(&simv), base(meas));
        let n = (k1 - k0) as f64;
        let mse = (k0..k1)
            .map(|k| ((at(&simv, k) - bs) - (at(meas, k) - bm)).powi(2))
            .sum::<f64>()
            / n;
        let scale = if cumulative {
            at(meas, k1 - 1) - bm
        } else {
            (k0..k1).map(|k| at(meas, k)).sum::<f64>() / n
        }
        .max(floor);
        Some(mse.sqrt() / scale)
    };
    LossTerms {
        cum_prompt: term(&t.cum_prompt, sim(|s| s.prompt_tokens as f64, true), true, 1.0),
        cum_gen: term(&t.cum_gen, sim(|s| s.generation_tokens as f64, true), true, 1.0),
        running: term(&t.running, sim(|s| f64::from(s.running), false), false, 1.0),
        waiting: term(&t.waiting, sim(|s| f64::from(s.waiting), false), false, 1.0),
    }
}

/// The sample indices `[k0, k1)` whose interval ends (`(k + 1) x dt - offset`, s from
/// the first arrival) fall in `w`, of `end` samples.
pub fn span(w: window::Window, dt: f64, offset_s: f64, end: usize) -> (usize, usize) {
    let t = |k: usize| (k + 1) as f64 * dt - offset_s;
    let k0 = (0..end)
        .find(|&k| w.from_s.is_none_or(|a| t(k) >= a - 1e-9))
        .unwrap_or(end);
    let k1 = (k0..end)
        .find(|&k| w.to_s.is_some_and(|b| t(k) > b + 1e-9))
        .unwrap_or(end);
    (k0, k1)
}

fn model_of(x: &[f64]) -> StepTimeModel {
    // Bounded so that a wild simplex vertex cannot make a replay run forever or vanish.
    let c = |v: f64, lo: f64, hi: f64| v.exp().clamp(lo, hi);
    StepTimeModel {
        beta0_us: c(x[0], 10.0, 1e6),
        beta1_us: c(x[1], 1e-3, 1e5),
        beta2_us: c(x[2], 1e-3, 1e5),
        beta3_us: x.get(3).map_or(0.0, |&v| c(v, 1e-6, 100.0)),
        physics: None,
    }
}

/// The fit's result.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The loss of the three-term linear form (without the context term), for the record
    /// (linear fits only).
    pub linear_loss: Option<f64>,
    /// The step time.
    pub step_time: StepTimeModel,
    /// For a physics fit: the deployment and the corrected coefficients.
    pub physics: Option<(Deployment, Coefficients)>,
    /// The loss terms at the optimum.
    pub terms: LossTerms,
    /// Simulations run.
    pub simulations: u64,
    /// Optimiser iterations (all rounds).
    pub iterations: u64,
    /// The method, for the profile file.
    pub method: String,
}

impl Fitted {
    /// The step time in one line.
    pub fn describe(&self) -> String {
        match &self.physics {
            Some((d, c)) => format!(
                "the physics model for {} with mem_efficiency {}, kv_mem_efficiency {}, flop_efficiency {}, {} {} (fitted; the other coefficients as shipped)",
                d.id(),
                c.mem_efficiency,
                c.kv_mem_efficiency,
                c.flop_efficiency,
                if d.gpu.nvlink {
                    "link_efficiency"
                } else {
                    "pcie_efficiency"
                },
                if d.gpu.nvlink {
                    c.link_efficiency
                } else {
                    c.pcie_efficiency
                }
            ),
            None => format!(
                "{:.1} us + {:.3} us x prefill token + {:.3} us x decode token + {:.5} us x context token",
                self.step_time.beta0_us, self.step_time.beta1_us, self.step_time.beta2_us, self.step_time.beta3_us
            ),
        }
    }
}

/// First simplex: from these coefficients (µs), each vertex one coefficient x e^0.7
/// (the fourth, per context token, only in the context form).
const START_US: [f64; 4] = [10_000.0, 50.0, 50.0, 0.05];
/// The context term is kept only if it lowers the loss by at least this share: a term
/// that does not pay for itself is left out.
const CONTEXT_GAIN: f64 = 0.02;
/// The rounds of each Nelder-Mead fit: iterations and simplex size (ln units).
const ROUNDS: [Round; 2] = [
    Round {
        iterations: 200,
        step: 0.7,
    },
    Round {
        iterations: 150,
        step: 0.15,
    },
];
/// Stop a round when the vertices' costs' standard deviation falls below this.
const SD_TOLERANCE: f64 = 1e-5;

/// The replay's loss with `step_time`.
fn replay_loss(cfg: &VllmConfig, w: &Workload, t: &Target, step_time: StepTimeModel) -> f64 {
    let mut c = cfg.clone();
    c.step_time = step_time;
    loss(&replay(&c, &w.requests, &w.opts), t).total()
}

/// Fits the linear step-time coefficients: Nelder-Mead in ln-coefficients, in two
/// rounds, the second restarted around the first's best with a smaller simplex; first
/// the three-term form, then the context form from its optimum.
pub fn fit(cfg: &VllmConfig, w: &Workload, t: &Target) -> Result<Fitted> {
    let cost = |x: &[f64]| replay_loss(cfg, w, t, model_of(x));
    let three = minimize(
        &cost,
        START_US[..3].iter().map(|b| b.ln()).collect(),
        &ROUNDS,
        SD_TOLERANCE,
    )?;
    // The context form starts from the linear fit, with the context term at its start.
    let mut start4 = three.x.clone();
    start4.push(START_US[3].ln());
    let four = minimize(&cost, start4, &ROUNDS, SD_TOLERANCE)?;
    let best = if four.cost < three.cost * (1.0 - CONTEXT_GAIN) {
        &four.x
    } else {
        &three.x
    };
    let step_time = model_of(best);
    let mut c = cfg.clone();
    c.step_time = step_time.clone();
    let terms = loss(&replay(&c, &w.requests, &w.opts), t);
    Ok(Fitted {
        linear_loss: Some(three.cost),
        step_time,
        physics: None,
        terms,
        simulations: three.evaluations + four.evaluations + 1,
        iterations: three.iterations + four.iterations,
        method: format!(
            "Nelder-Mead (argmin) on ln(beta0, beta1, beta2) from {:?} us, then on ln(beta0..beta3) from that optimum with beta3 = {} us (kept if it lowers the loss by {} % or more); each: rounds of {:?}, sd tolerance {SD_TOLERANCE}",
            &START_US[..3],
            START_US[3],
            CONTEXT_GAIN * 100.0,
            ROUNDS.map(|r| (r.iterations, r.step)),
        ),
    })
}

/// The coefficients a physics fit corrects, from the shipped ones: the achieved
/// fractions of the GPU's bandwidth (weights, KV cache), FLOPs and link (NVLink or PCIe,
/// one factor); the overheads stay as shipped.
fn corrected(x: &[f64]) -> Coefficients {
    let f = |base: f64, k: usize| (base * x[k].exp()).clamp(0.02, 1.0);
    Coefficients {
        mem_efficiency: f(SHIPPED.mem_efficiency, 0),
        kv_mem_efficiency: f(SHIPPED.kv_mem_efficiency, 1),
        flop_efficiency: f(SHIPPED.flop_efficiency, 2),
        link_efficiency: f(SHIPPED.link_efficiency, 3),
        pcie_efficiency: f(SHIPPED.pcie_efficiency, 3),
        ..SHIPPED
    }
}

/// A correction factor of `e^CORRECTION_SD` costs [`CORRECTION_WEIGHT`] of loss.
const CORRECTION_SD: f64 = 0.5;
/// See [`CORRECTION_SD`] (a faithful replay's loss is 0.03-0.09).
const CORRECTION_WEIGHT: f64 = 0.05;

/// Names of the corrected coefficients, in [`corrected`]'s order.
const CORRECTED: [&str; 4] = [
    "mem_efficiency",
    "kv_mem_efficiency",
    "flop_efficiency",
    "link_efficiency",
];

/// The rounds of a physics fit (ln of the correction factors).
const PHYSICS_ROUNDS: [Round; 2] = [
    Round {
        iterations: 120,
        step: 0.3,
    },
    Round {
        iterations: 80,
        step: 0.08,
    },
];

/// Fits corrections to the physics model of `d`: its memory and compute efficiencies
/// and per-step overhead, from the shipped coefficients (Nelder-Mead on the logs of the
/// correction factors).
pub fn fit_physics(cfg: &VllmConfig, d: &Deployment, w: &Workload, t: &Target) -> Result<Fitted> {
    // The shipped coefficients are the prior: a correction costs as much as it moves them
    // (a window that cannot tell two coefficients apart leaves both near the prior).
    let cost = |x: &[f64]| {
        replay_loss(cfg, w, t, d.step_time(&corrected(x)))
            + CORRECTION_WEIGHT * x.iter().map(|v| (v / CORRECTION_SD).powi(2)).sum::<f64>()
    };
    let m = minimize(&cost, vec![0.0; CORRECTED.len()], &PHYSICS_ROUNDS, SD_TOLERANCE)?;
    let c = physics::round_coefficients(&corrected(&m.x));
    let step_time = d.step_time(&c);
    let mut cf = cfg.clone();
    cf.step_time = step_time.clone();
    let terms = loss(&replay(&cf, &w.requests, &w.opts), t);
    Ok(Fitted {
        linear_loss: None,
        step_time,
        physics: Some((*d, c)),
        terms,
        simulations: m.evaluations + 1,
        iterations: m.iterations,
        method: format!(
            "Nelder-Mead (argmin) on ln of correction factors to the shipped {}, from 1; rounds of {:?}, sd tolerance {SD_TOLERANCE}",
            CORRECTED.join(", "),
            PHYSICS_ROUNDS.map(|r| (r.iterations, r.step)),
        ),
    })
}

/// The series' token totals against the requests' in `window`: one line, or an error
/// when they disagree by more than [`TOKEN_TOLERANCE`] (a series that stops early, or is
/// another run's). Over the whole run both prompt and generation tokens are compared; in
/// a window, the prompt tokens of the requests whose first token falls in it (a series
/// counts a prompt when its first token is sampled), give or take the series' rows at
/// the window's edges.
pub fn token_totals(m: &Measurement, window: window::Window) -> Result<String> {
    let Some(series) = &m.series else {
        return Ok("token totals: no series".into());
    };
    let first = m.requests.iter().map(|r| r.queued_s).fold(f64::INFINITY, f64::min);
    let inside = |t: f64| window.contains(t - first);
    let mut series_tokens = [0.0f64; 2];
    // Tokens of the rows that straddle the window's edges (counted or not by a hair).
    let mut edge = 0.0f64;
    for r in &series.rows {
        let p = r.prompt_tps.unwrap_or(0.0) * series.interval_s;
        if inside(r.t_s) {
            series_tokens[0] += p;
            series_tokens[1] += r.gen_tps.unwrap_or(0.0) * series.interval_s;
        }
        if inside(r.t_s) != inside(r.t_s - series.interval_s) {
            edge += p;
        }
    }
    let mut request_tokens = [0.0f64; 2];
    for r in &m.requests {
        if inside(r.first_token_s) {
            request_tokens[0] += f64::from(r.input_tokens);
        }
        request_tokens[1] += f64::from(r.output_tokens);
    }
    let compared = if window.is_all() { 2 } else { 1 };
    let has = [series.has(|r| r.prompt_tps), series.has(|r| r.gen_tps)];
    let mut worst = 0.0f64;
    for k in 0..compared {
        if has[k] && request_tokens[k] > 0.0 {
            let slack = if window.is_all() { 0.0 } else { edge };
            let off = ((series_tokens[k] - request_tokens[k]).abs() - slack).max(0.0);
            worst = worst.max(off / request_tokens[k]);
        }
    }
    let line = if window.is_all() {
        format!(
            "token totals: series {:.0} prompt / {:.0} generation, requests {:.0} / {:.0}",
            series_tokens[0], series_tokens[1], request_tokens[0], request_tokens[1]
        )
    } else {
        format!(
            "prompt tokens in --window {}: series {:.0}, requests whose first token is in it {:.0} (edge rows {:.0})",
            window.text(),
            series_tokens[0],
            request_tokens[0],
            edge
        )
    };
    if worst > TOKEN_TOLERANCE {
        bail!(
            "{}: the engine series and the requests disagree on token totals ({line}: {:.0} % apart, more than {:.0} %): the series stops early, runs past the requests, or is another run's; fit a window both cover with --window A:B",
            crate::quote::escape(&m.source),
            worst * 100.0,
            TOKEN_TOLERANCE * 100.0
        );
    }
    Ok(format!("{line} (agree within {:.1} %)", worst * 100.0))
}

/// How far the series' and the requests' token totals may be apart.
pub const TOKEN_TOLERANCE: f64 = 0.10;

/// Rounds a coefficient for the profile file (4 significant digits after the point is
/// far below the fit's resolution, and keeps the file readable).
fn round(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The profile file of a fit.
pub fn profile_file(name: &str, m: &Measurement, s: &Setup, f: &Fitted) -> ProfileFile {
    ProfileFile {
        profile: About {
            name: name.to_string(),
            model: s.model.clone(),
            gpu: m.engine.gpu.clone(),
            tensor_parallel_size: s.tp,
            vllm_version: m.engine.vllm_version.clone(),
            measured_at: m.engine.started_at.clone(),
            source: m.source.clone(),
            generator: format!("sim calibrate (fleetsim {})", env!("CARGO_PKG_VERSION")),
        },
        step_time: StepTime {
            beta0_us: round(f.step_time.beta0_us),
            beta1_us: round(f.step_time.beta1_us),
            beta2_us: round(f.step_time.beta2_us),
            beta3_us: (f.step_time.beta3_us * 1e6).round() / 1e6,
        },
        physics: f.physics.as_ref().map(|(d, c)| Physics {
            model: d.model.name.to_string(),
            dtype: d.dtype.name().to_string(),
            gpu: d.gpu.name.to_string(),
            tp: d.parallel.tp,
            dp: d.parallel.dp,
            kv_dtype_bytes: d.kv_dtype_bytes,
            async_scheduling: d.async_scheduling,
            coefficients: c.named().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }),
        engine: Engine {
            max_num_seqs: s.cfg.max_num_seqs,
            max_num_batched_tokens: s.cfg.max_num_batched_tokens,
            kv_blocks: s.cfg.kv_blocks,
            kv_blocks_from: s.kv_from.clone(),
            block_size_tokens: s.cfg.block_size_tokens,
            prefix_caching: s.cfg.prefix_caching,
            reserve_full_isl: s.cfg.reserve_full_isl,
        },
        fit: Fit {
            loss: round(f.terms.total()),
            cum_prompt_nrmse: f.terms.cum_prompt.map(round),
            cum_generation_nrmse: f.terms.cum_gen.map(round),
            running_nrmse: f.terms.running.map(round),
            waiting_nrmse: f.terms.waiting.map(round),
            method: f.method.clone(),
            simulations: f.simulations,
            iterations: f.iterations,
        },
    }
}
