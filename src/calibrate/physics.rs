//! The physics model's global coefficients, fitted once across a set of real runs (`sim
//! calibrate --physics RUNS.toml`), and judged on runs the fit never saw (`sim validate
//! --leave-one-out RUNS.toml`): for each group of runs (one model on one GPU), the
//! coefficients are refitted without the group and the group's runs are predicted.
//!
//! A run is replayed as `sim validate --profile auto` replays it (the same engine setup,
//! the same profile derivation); the fit minimises, over runs, the absolute log-ratio of
//! the simulated to the measured E2E, TTFT (half weight: queueing amplifies it) and TPOT
//! means, each group weighing the same whatever its number of runs.
//!
//! Owns: the run list, the global fit, the leave-one-out table. May not see: scenarios.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use rayon::prelude::*;
use serde::Deserialize;

use super::optim::{Round, minimize};
use super::setup::{Setup, SetupOptions, setup};
use super::validate::{Validation, validate};
use super::window::Window;
use crate::measure::Measurement;
use crate::profiles::auto::{COEFFICIENTS, Coefficients, Deployment};

/// One run of a run list.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEntry {
    /// Short name (the table's row).
    pub name: String,
    /// The measurement, relative to the list's folder.
    pub path: PathBuf,
    /// Leave-one-out fold: runs of one model on one GPU.
    pub group: String,
    /// `--gpu`, where the measurement does not name it.
    pub gpu: Option<String>,
    /// `--model`, where the measurement does not name it.
    pub model: Option<String>,
    /// `--engine-args`.
    #[serde(default)]
    pub engine_args: String,
    /// `--replicas`.
    pub replicas: Option<u32>,
    /// `--warm-prefix-cache`: the same prompts ran on the server just before.
    #[serde(default)]
    pub warm_prefix_cache: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunList {
    run: Vec<RunEntry>,
}

/// A run ready to replay.
pub struct Run {
    /// As listed.
    pub entry: RunEntry,
    /// The measurement.
    pub m: Measurement,
    /// Its engine.
    pub s: Setup,
    /// What its auto profile is derived from.
    pub deployment: Deployment,
}

/// Reads a run list and every run in it.
pub fn read_runs(list: &Path) -> Result<Vec<Run>> {
    let text = std::fs::read_to_string(list).map_err(|e| anyhow!("{}: {e}", list.display()))?;
    let l: RunList = toml::from_str(&text).map_err(|e| anyhow!("{}: {}", list.display(), e.message()))?;
    if l.run.is_empty() {
        bail!("{}: lists no [[run]]", list.display());
    }
    let base = list.parent().unwrap_or(Path::new("."));
    l.run
        .into_iter()
        .map(|entry| {
            let path = base.join(&entry.path);
            let m = crate::measure::load(&path, None)?;
            let opts = SetupOptions {
                gpu: entry.gpu.clone(),
                model: entry.model.clone(),
                replicas: entry.replicas,
                warm_prefix: entry.warm_prefix_cache,
                ..SetupOptions::default()
            };
            let s = setup(&m, &entry.engine_args, &opts).map_err(|e| anyhow!("run {}: {e}", entry.name))?;
            let deployment = s.deployment(&m.source)?;
            Ok(Run {
                entry,
                m,
                s,
                deployment,
            })
        })
        .collect()
}

/// Replays `r` with the auto profile of coefficients `c`, scoring the requests in `window`.
pub fn replay_run(r: &Run, c: &Coefficients, window: Window) -> Result<Validation> {
    let mut cfg = r.s.cfg.clone();
    cfg.step_time = r.deployment.step_time(c);
    if let Some(k) = r.s.kv_derivation {
        // A capacity derived from the datasheet sets aside the coefficients' reserve.
        cfg.kv_blocks = crate::profiles::kv_blocks(&crate::profiles::KvInputs {
            activation_memory_gib: c.reserve_gib.min(k.gpu_memory_gib),
            ..k
        })
        .map_err(|e| anyhow!("run {}: {e}", r.entry.name))?;
    }
    let w = super::workload(&r.m, &r.s, c.client_overhead_us * 1e-6)?;
    Ok(validate(&r.m, &cfg, &w, &r.deployment.id(), window)?.0)
}

/// Simulated over measured, per statistic: `(e2e, ttft, tpot)` means and p90s.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Errors {
    /// Mean E2E, TTFT, TPOT: simulated / measured - 1.
    pub mean: [f64; 3],
    /// p90 E2E, TTFT, TPOT: simulated / measured - 1.
    pub p90: [f64; 3],
}

/// The errors of a validation.
pub fn errors(v: &Validation) -> Errors {
    let mut e = Errors::default();
    for l in &v.latencies {
        let i = match l.name {
            "e2e" => 0,
            "ttft" => 1,
            _ => 2,
        };
        e.mean[i] = l.simulated.mean / l.measured.mean - 1.0;
        e.p90[i] = l.simulated.p90 / l.measured.p90 - 1.0;
    }
    e
}

/// Weights of the loss's terms: E2E, TTFT, TPOT means.
const TERM_WEIGHTS: [f64; 3] = [1.0, 0.5, 1.0];

/// The loss of coefficients `c` over `runs`: the weighted absolute log-ratios (robust: a
/// saturated run's queueing cannot outweigh every other run), each group weighing the
/// same.
fn loss(runs: &[&Run], c: &Coefficients) -> f64 {
    let mut per_group: BTreeMap<&str, usize> = BTreeMap::new();
    for r in runs {
        *per_group.entry(r.entry.group.as_str()).or_default() += 1;
    }
    let groups = per_group.len() as f64;
    let terms: Vec<f64> = runs
        .par_iter()
        .map(|r| match replay_run(r, c, Window::ALL) {
            Ok(v) => {
                let e = errors(&v);
                let w = 1.0 / (per_group[r.entry.group.as_str()] as f64 * groups);
                w * (0..3)
                    .map(|i| TERM_WEIGHTS[i] * (1.0 + e.mean[i]).max(1e-6).ln().abs())
                    .sum::<f64>()
            }
            Err(_) => 1e6,
        })
        .collect();
    terms.iter().sum()
}

/// Where the fit starts, and what it is pulled back to: figures from public
/// measurements and vLLM's start-up logs, independent of the runs fitted. Streaming reads
/// reach 85-92 % of a GPU's datasheet bandwidth (nvbandwidth, STREAM-like kernels),
/// paged-attention decode and fused-MoE kernels less; large bf16 GEMMs 70-80 % of dense
/// peak; NCCL's all-reduce bus bandwidth about 75 % of an NVLink, far less of a PCIe slot
/// crossed through the host; a synchronous vLLM step costs 1-3 ms of CPU; a small
/// all-reduce 10-30 µs; an HTTP client 10-30 ms before the engine sees a request; vLLM
/// logs 1.5-3 GiB per GPU of activations and buffers at start-up, plus the driver's share.
pub const PRIOR: Coefficients = Coefficients {
    mem_efficiency: 0.85,
    expert_efficiency: 0.5,
    kv_mem_efficiency: 0.75,
    flop_efficiency: 0.7,
    link_efficiency: 0.75,
    pcie_efficiency: 0.3,
    step_overhead_us: 2000.0,
    request_overhead_us: 20.0,
    allreduce_us: 15.0,
    client_overhead_us: 20_000.0,
    reserve_gib: 3.0,
};

/// How far (standard deviation of the natural log) each coefficient may plausibly be
/// from [`PRIOR`], by how well the figures above pin it: the fit pays [`PRIOR_WEIGHT`]
/// per squared deviation, so a coefficient the runs do not pin down stays near its prior
/// instead of absorbing another's error.
const PRIOR_SD: [f64; COEFFICIENTS] = [0.1, 0.5, 0.3, 0.2, 0.2, 0.7, 0.7, 1.0, 0.7, 0.5, 0.4];

/// The weight of the prior against the runs (the runs' loss is a mean of absolute log
/// errors: a coefficient one standard deviation off costs as much as a 1 % error on
/// every statistic of every run).
const PRIOR_WEIGHT: f64 = 0.025;

/// Bounds of each coefficient (efficiencies at most 1).
const BOUNDS: [(f64, f64); COEFFICIENTS] = [
    (0.05, 1.0),
    (0.02, 1.0),
    (0.02, 1.0),
    (0.02, 1.0),
    (0.02, 1.0),
    (0.02, 1.0),
    (1.0, 1e5),
    (0.01, 1e4),
    (0.01, 1e3),
    (1.0, 2e5),
    (0.0, 16.0),
];

/// A fit's result.
#[derive(Clone, Debug)]
pub struct GlobalFit {
    /// The coefficients.
    pub coefficients: Coefficients,
    /// The loss at them.
    pub loss: f64,
    /// Replays of the runs (one per run per loss evaluation).
    pub replays: u64,
}

fn coefficients_of(x: &[f64]) -> Coefficients {
    let mut v = [0.0; COEFFICIENTS];
    for i in 0..COEFFICIENTS {
        v[i] = x[i].exp().clamp(BOUNDS[i].0, BOUNDS[i].1);
    }
    Coefficients::from_values(&v)
}

/// The prior's penalty at `x` (ln-coefficients).
fn prior_penalty(x: &[f64]) -> f64 {
    PRIOR
        .named()
        .iter()
        .zip(x)
        .zip(PRIOR_SD)
        .map(|(((_, p), x), sd)| ((x - p.ln()) / sd).powi(2))
        .sum::<f64>()
        * PRIOR_WEIGHT
}

/// The rounds of the global fit.
const ROUNDS: [Round; 2] = [
    Round {
        iterations: 300,
        step: 0.5,
    },
    Round {
        iterations: 150,
        step: 0.1,
    },
];

/// Fits the global coefficients to `runs` from [`PRIOR`] (Nelder-Mead on their logs).
pub fn fit(runs: &[&Run]) -> Result<GlobalFit> {
    if runs.is_empty() {
        bail!("no runs to fit");
    }
    let start: Vec<f64> = PRIOR.named().iter().map(|(_, v)| v.max(1e-3).ln()).collect();
    let cost = |x: &[f64]| loss(runs, &coefficients_of(x)) + prior_penalty(x);
    let m = minimize(&cost, start, &ROUNDS, 1e-7)?;
    Ok(GlobalFit {
        coefficients: round_coefficients(&coefficients_of(&m.x)),
        loss: m.cost,
        replays: m.evaluations * runs.len() as u64,
    })
}

/// The loss of given coefficients over `runs` (no fit).
pub fn evaluate(runs: &[&Run], c: &Coefficients) -> GlobalFit {
    let x: Vec<f64> = c.named().iter().map(|(_, v)| v.max(1e-9).ln()).collect();
    GlobalFit {
        coefficients: *c,
        loss: loss(runs, c) + prior_penalty(&x),
        replays: runs.len() as u64,
    }
}

/// Coefficients from `name=value,...`, the rest from `base`.
pub fn parse_coefficients(text: &str, base: &Coefficients) -> Result<Coefficients> {
    let mut v: Vec<f64> = base.named().iter().map(|(_, x)| *x).collect();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, x) = part
            .split_once('=')
            .ok_or_else(|| anyhow!("--coefficients {}: expected name=value", crate::quote::quote(part)))?;
        let i = base
            .named()
            .iter()
            .position(|(n, _)| *n == k.trim())
            .ok_or_else(|| anyhow!("--coefficients: unknown coefficient {}", crate::quote::quote(k.trim())))?;
        v[i] = x
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= BOUNDS[i].0 && *x <= BOUNDS[i].1)
            .ok_or_else(|| {
                anyhow!(
                    "--coefficients {k}: {} is not in [{}, {}]",
                    crate::quote::quote(x.trim()),
                    BOUNDS[i].0,
                    BOUNDS[i].1
                )
            })?;
    }
    let arr: [f64; COEFFICIENTS] = v.try_into().map_err(|_| anyhow!("coefficient count"))?;
    Ok(Coefficients::from_values(&arr))
}

/// Coefficients to 4 significant digits (the shipped table's precision).
pub fn round_coefficients(c: &Coefficients) -> Coefficients {
    let mut v = [0.0; COEFFICIENTS];
    for (i, (_, x)) in c.named().iter().enumerate() {
        v[i] = significant(*x, 4);
    }
    Coefficients::from_values(&v)
}

fn significant(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let p = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * p).round() / p
}

/// The physics model's error on runs it never saw, % (absolute, simulated / measured - 1):
/// `sim validate --leave-one-out traces/validation.toml`, each model-on-GPU group of the
/// shipped runs predicted with coefficients fitted to the other groups. Printed beside
/// every prediction of an auto profile; `tests/it/physics.rs` holds these figures to what
/// that command measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldOutError {
    /// Median over runs of the E2E mean's error.
    pub e2e_median: f64,
    /// The worst run's E2E mean error.
    pub e2e_worst: f64,
    /// Median over runs of the TTFT mean's error.
    pub ttft_median: f64,
    /// The worst run's TTFT mean error.
    pub ttft_worst: f64,
    /// Median over runs of the TPOT mean's error.
    pub tpot_median: f64,
    /// Runs judged.
    pub runs: usize,
}

/// See [`HeldOutError`].
pub const HELD_OUT: HeldOutError = HeldOutError {
    e2e_median: 12.4,
    e2e_worst: 36.8,
    ttft_median: 22.7,
    ttft_worst: 86.7,
    tpot_median: 12.0,
    runs: 15,
};

impl HeldOutError {
    /// The figures of a leave-one-out table, to 0.1 %.
    pub fn of(l: &LeaveOneOut) -> HeldOutError {
        let r1 = |x: f64| (x * 10.0).round() / 10.0;
        let worst = |i: usize| {
            l.rows
                .iter()
                .map(|r| r.errors.mean[i].abs() * 100.0)
                .fold(0.0, f64::max)
        };
        let (m, _) = l.medians();
        HeldOutError {
            e2e_median: r1(m[0]),
            e2e_worst: r1(worst(0)),
            ttft_median: r1(m[1]),
            ttft_worst: r1(worst(1)),
            tpot_median: r1(m[2]),
            runs: l.rows.len(),
        }
    }

    /// One line for a prediction: the band it comes with.
    pub fn band(&self) -> String {
        format!(
            "expected error of an auto profile on a model and GPU it was not fitted to (leave-one-out over {} real runs): E2E mean ±{:.1} % median, ±{:.1} % worst; TTFT mean ±{:.1} % median, ±{:.1} % worst; TPOT mean ±{:.1} % median",
            self.runs, self.e2e_median, self.e2e_worst, self.ttft_median, self.ttft_worst, self.tpot_median
        )
    }
}

/// One run's row of the leave-one-out table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The run's name.
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its deployment's profile id.
    pub profile: String,
    /// Requests scored.
    pub requests: usize,
    /// Measured E2E mean, s.
    pub e2e_mean_s: f64,
    /// The errors predicted without the run's group.
    pub errors: Errors,
}

/// The leave-one-out evaluation: per group, the coefficients fitted on the other groups
/// (and their loss), and each run's errors with them.
#[derive(Clone, Debug)]
pub struct LeaveOneOut {
    /// Per run.
    pub rows: Vec<Row>,
    /// Per group: the coefficients fitted without it.
    pub folds: Vec<(String, Coefficients)>,
    /// Replays run.
    pub replays: u64,
}

/// One fold's result: its rows, what it left out with the coefficients fitted without
/// it, and the replays it ran.
type Fold = (Vec<Row>, (String, Coefficients), u64);

/// What one fold leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaveOut {
    /// One run: its group's other runs stay in the fit.
    Run,
    /// One group (a model on a GPU): the fit never saw that model on that GPU.
    Group,
}

/// Leaves each run, or each group, out in turn: fits the global coefficients to the
/// rest (from [`PRIOR`]) and predicts what was left out.
pub fn leave_one_out(runs: &[Run], by: LeaveOut) -> Result<LeaveOneOut> {
    let key = |r: &Run| match by {
        LeaveOut::Run => r.entry.name.clone(),
        LeaveOut::Group => r.entry.group.clone(),
    };
    let mut folds_keys: Vec<String> = Vec::new();
    for r in runs {
        if !folds_keys.contains(&key(r)) {
            folds_keys.push(key(r));
        }
    }
    if folds_keys.len() < 2 {
        bail!("leave-one-out needs at least two folds");
    }
    let results: Vec<Result<Fold>> = folds_keys
        .par_iter()
        .map(|k| {
            let train: Vec<&Run> = runs.iter().filter(|r| key(r) != *k).collect();
            let f = fit(&train)?;
            let mut rows = Vec::new();
            for r in runs.iter().filter(|r| key(r) == *k) {
                let v = replay_run(r, &f.coefficients, Window::ALL)?;
                rows.push(Row {
                    name: r.entry.name.clone(),
                    group: r.entry.group.clone(),
                    profile: r.deployment.id(),
                    requests: v.requests,
                    e2e_mean_s: v
                        .latencies
                        .iter()
                        .find(|l| l.name == "e2e")
                        .map_or(0.0, |l| l.measured.mean),
                    errors: errors(&v),
                });
            }
            let n = rows.len() as u64;
            Ok((rows, (k.clone(), f.coefficients), f.replays + n))
        })
        .collect();
    let mut l = LeaveOneOut {
        rows: Vec::new(),
        folds: Vec::new(),
        replays: 0,
    };
    for r in results {
        let (rows, fold, replays) = r?;
        l.rows.extend(rows);
        l.folds.push(fold);
        l.replays += replays;
    }
    // Rows in the list's order whatever the folds' order.
    let order: Vec<&str> = runs.iter().map(|r| r.entry.name.as_str()).collect();
    l.rows.sort_by_key(|row| order.iter().position(|n| *n == row.name));
    Ok(l)
}

/// The median of `xs` (NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    super::validate::quantile(&s, 0.5)
}

impl LeaveOneOut {
    /// Median absolute error per statistic: `[e2e, ttft, tpot]` means, then p90s, %.
    pub fn medians(&self) -> ([f64; 3], [f64; 3]) {
        let col = |f: &dyn Fn(&Errors) -> f64| {
            median(&self.rows.iter().map(|r| f(&r.errors).abs() * 100.0).collect::<Vec<_>>())
        };
        (
            [col(&|e| e.mean[0]), col(&|e| e.mean[1]), col(&|e| e.mean[2])],
            [col(&|e| e.p90[0]), col(&|e| e.p90[1]), col(&|e| e.p90[2])],
        )
    }

    /// The worst absolute E2E mean error, % (and its run).
    pub fn worst_e2e(&self) -> (f64, &str) {
        self.rows
            .iter()
            .map(|r| (r.errors.mean[0].abs() * 100.0, r.name.as_str()))
            .fold((0.0, ""), |a, b| if b.0 > a.0 { b } else { a })
    }

    /// The table in Markdown.
    pub fn markdown(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| run | profile (derived) | requests | measured E2E mean | E2E mean | TTFT mean | TPOT mean | E2E p90 | TTFT p90 | TPOT p90 |"
        );
        let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let pct = |x: f64| format!("{:+.1} %", x * 100.0);
        for r in &self.rows {
            let e = &r.errors;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} s | {} | {} | {} | {} | {} | {} |",
                r.name,
                r.profile,
                r.requests,
                r.e2e_mean_s,
                pct(e.mean[0]),
                pct(e.mean[1]),
                pct(e.mean[2]),
                pct(e.p90[0]),
                pct(e.p90[1]),
                pct(e.p90[2])
            );
        }
        let (m, p) = self.medians();
        let _ = writeln!(
            s,
            "| **median of absolute errors** | | | | **{:.1} %** | **{:.1} %** | **{:.1} %** | **{:.1} %** | **{:.1} %** | **{:.1} %** |",
            m[0], m[1], m[2], p[0], p[1], p[2]
        );
        s
    }
}

/// The coefficients as a table (name, value).
pub fn coefficients_table(c: &Coefficients) -> String {
    c.named()
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}
