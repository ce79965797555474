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

pub mod plot;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;

use crate::backend::perf::StepTimeModel;
use crate::backend::replay::{Replay, ReplayOptions, ReplayRequest, replay};
use crate::backend::vllm::VllmConfig;
use crate::measure::{Client, Measurement};
use crate::profiles::file::{About, Engine, Fit, ProfileFile, StepTime};
use crate::time::{SimDuration, SimTime};

/// The engine a measurement ran, with where each value came from.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The engine (step time still to be fitted or given).
    pub cfg: VllmConfig,
    /// `key: value (source)` lines.
    pub provenance: Vec<String>,
    /// Tensor-parallel size.
    pub tp: Option<u32>,
    /// Model.
    pub model: Option<String>,
    /// Where `kv_blocks` came from.
    pub kv_from: String,
}

/// The `vllm serve` flags [`setup`] reads: those that take a value.
const VALUE_FLAGS: &[&str] = &[
    "model",
    "max-num-seqs",
    "max-num-batched-tokens",
    "block-size",
    "tensor-parallel-size",
    "tp",
    "num-gpu-blocks-override",
    "gpu-memory-utilization",
    "kv-cache-dtype",
];

/// The `vllm serve` switches [`setup`] reads (vLLM's `BooleanOptionalAction`: the flag or
/// its `--no-` form, never a value).
const SWITCHES: &[&str] = &[
    "enable-prefix-caching",
    "no-enable-prefix-caching",
    "scheduler-reserve-full-isl",
    "no-scheduler-reserve-full-isl",
];

/// `vllm serve` flags that do not change the engine model (serving, logging, loading,
/// numerics the step time absorbs): accepted and listed as ignored, so that a whole
/// `vllm serve` command line can be pasted.
const IGNORED_VALUE_FLAGS: &[&str] = &[
    "host",
    "port",
    "api-key",
    "served-model-name",
    "dtype",
    "max-model-len",
    "seed",
    "swap-space",
    "download-dir",
    "load-format",
    "tokenizer",
    "revision",
    "quantization",
    "pipeline-parallel-size",
    "data-parallel-size",
    "max-logprobs",
    "uvicorn-log-level",
    "generation-config",
    "chat-template",
    "kv-events-config",
    "compilation-config",
];

/// Switches of the same kind.
const IGNORED_SWITCHES: &[&str] = &[
    "trust-remote-code",
    "enforce-eager",
    "disable-log-requests",
    "disable-log-stats",
    "enable-log-requests",
    "async-scheduling",
    "no-async-scheduling",
    "enable-chunked-prefill",
    "no-enable-chunked-prefill",
    "enable-expert-parallel",
];

/// `vllm serve` flags as `name -> value` (`None` for a switch), as vLLM's argument parser
/// reads them: `--flag value` or `--flag=value`, `_` for `-`, one positional model (a
/// leading `vllm serve` is skipped). Unknown flags are refused with the closest known
/// one, a switch given a value is refused (vLLM refuses `--enable-prefix-caching=false`
/// and reads `--enable-prefix-caching false` as a second model), and so is a value flag
/// without its value. Flags that do not change the engine model are kept, under their
/// names, for [`ignored_flags`].
pub fn parse_engine_args(s: &str) -> Result<BTreeMap<String, Option<String>>> {
    let q = crate::quote::quote;
    let words = shlex::split(s).ok_or_else(|| anyhow!("--engine-args: unbalanced quotes in {}", q(s)))?;
    let skip = usize::from(words.first().is_some_and(|w| w == "vllm"));
    let skip = skip + usize::from(words.get(skip).is_some_and(|w| w == "serve"));
    let mut out = BTreeMap::new();
    let mut it = words.into_iter().skip(skip).peekable();
    let mut last_switch: Option<String> = None;
    while let Some(w) = it.next() {
        let Some(flag) = w
            .strip_prefix("--")
            .or_else(|| w.strip_prefix('-').filter(|f| *f == "tp"))
        else {
            // `vllm serve MODEL`: the one positional, never a switch's would-be value.
            if let Some(f) = last_switch {
                bail!(
                    "--engine-args: unexpected argument {} after --{f}: a switch takes no value (write --{f} or its opposite)",
                    q(&w)
                );
            }
            if out.contains_key("model") {
                bail!("--engine-args: unexpected argument {} (a second model?)", q(&w));
            }
            out.insert("model".to_string(), Some(w));
            continue;
        };
        let flag = flag.replace('_', "-");
        let (name, inline) = match flag.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (flag, None),
        };
        last_switch = None;
        if SWITCHES.contains(&name.as_str()) || IGNORED_SWITCHES.contains(&name.as_str()) {
            if let Some(v) = inline {
                bail!("--engine-args: --{name}={v}: a switch takes no value (write --{name} or its opposite)");
            }
            last_switch = Some(name.clone());
            out.insert(name, None);
        } else if VALUE_FLAGS.contains(&name.as_str()) || IGNORED_VALUE_FLAGS.contains(&name.as_str()) {
            let v = match inline {
                Some(v) => v,
                None => it
                    .next_if(|n| !n.starts_with("--"))
                    .ok_or_else(|| anyhow!("--engine-args: --{name} needs a value"))?,
            };
            out.insert(name, Some(v));
        } else {
            let known: Vec<&str> = [VALUE_FLAGS, SWITCHES, IGNORED_VALUE_FLAGS, IGNORED_SWITCHES].concat();
            bail!(
                "--engine-args: unknown flag --{name}{}",
                crate::scenario::suggest::closest(&name, &known)
                    .map_or_else(String::new, |k| format!("; did you mean --{k}?"))
            );
        }
    }
    Ok(out)
}

/// The flags of `parse_engine_args` that do not change the engine model, as given.
pub fn ignored_flags(flags: &BTreeMap<String, Option<String>>) -> Vec<String> {
    flags
        .keys()
        .filter(|k| IGNORED_VALUE_FLAGS.contains(&k.as_str()) || IGNORED_SWITCHES.contains(&k.as_str()))
        .map(|k| format!("--{k}"))
        .collect()
}

/// Options for [`setup`] beyond the engine flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetupOptions {
    /// Memory of one GPU, GiB (when the measurement does not record it).
    pub gpu_memory_gib: Option<f64>,
    /// Activation peak and non-torch memory per GPU, GiB (KV derivation; default 0).
    pub activation_memory_gib: Option<f64>,
}

/// The measured engine's configuration: `--engine-args` flags first, then the
/// measurement's metadata, then vLLM's derivation; unknown essentials are refused.
pub fn setup(m: &Measurement, engine_args: &str, opts: SetupOptions) -> Result<Setup> {
    let flags = parse_engine_args(engine_args)?;
    let e = &m.engine;
    let mut prov = Vec::new();
    let num = |name: &str| flag_u32(&flags, name);
    let mut pick = |key: &str, flag: Option<u32>, meta: Option<u32>, needed: &str| -> Result<u32> {
        let (v, src) = match (flag, meta) {
            (Some(v), _) => (v, "--engine-args"),
            (None, Some(v)) => (v, "measurement"),
            (None, None) => bail!(
                "{}: {key} is not recorded; give it: --engine-args \"--{needed} N\"",
                crate::quote::escape(&m.source)
            ),
        };
        prov.push(format!("{key} = {v} ({src})"));
        Ok(v)
    };
    let max_num_seqs = pick("max_num_seqs", num("max-num-seqs")?, e.max_num_seqs, "max-num-seqs")?;
    let max_num_batched_tokens = pick(
        "max_num_batched_tokens",
        num("max-num-batched-tokens")?,
        e.max_num_batched_tokens,
        "max-num-batched-tokens",
    )?;
    let block_size = num("block-size")?.or(e.block_size).unwrap_or(16);
    prov.push(format!("block_size_tokens = {block_size}"));
    let tp = num("tensor-parallel-size")?.or(num("tp")?).or(e.tensor_parallel_size);
    let model = flags.get("model").cloned().flatten().or_else(|| e.model.clone());
    // As vLLM's parser: the later of a switch and its opposite wins; here both is refused.
    let switch = |on: &str, off: &str| -> Result<Option<bool>> {
        match (flags.contains_key(on), flags.contains_key(off)) {
            (true, true) => bail!("--engine-args: both --{on} and --{off}"),
            (on, off) => Ok((on || off).then_some(on)),
        }
    };
    let prefix_caching = switch("enable-prefix-caching", "no-enable-prefix-caching")?
        .or(e.prefix_caching)
        .unwrap_or(true);
    prov.push(format!("prefix_caching = {prefix_caching}"));
    // vLLM 0.19 defaults `scheduler_reserve_full_isl` to true; earlier versions lack it.
    let reserve = switch("scheduler-reserve-full-isl", "no-scheduler-reserve-full-isl")?
        .or(e.reserve_full_isl)
        .unwrap_or_else(|| e.vllm_version.as_deref().is_some_and(version_at_least_0_19));
    prov.push(format!("reserve_full_isl = {reserve}"));
    let (kv_blocks, kv_from) = kv_blocks_of(m, &flags, model.as_deref(), tp, block_size, opts)?;
    prov.push(format!("kv_blocks = {kv_blocks} ({kv_from})"));
    let ignored = ignored_flags(&flags);
    if !ignored.is_empty() {
        prov.push(format!(
            "ignored (no effect on the engine model): {}",
            ignored.join(" ")
        ));
    }
    let cfg = VllmConfig {
        max_num_seqs,
        max_num_batched_tokens,
        kv_blocks,
        block_size_tokens: block_size,
        prefix_caching,
        step_time: StepTimeModel::default(),
        reserve_full_isl: reserve,
    };
    Ok(Setup {
        cfg,
        provenance: prov,
        tp,
        model,
        kv_from,
    })
}

/// A whole-number flag, if given: at least 1, and within what vLLM and the engine model
/// take (`--block-size` one of vLLM's, `--num-gpu-blocks-override` below the model's
/// bound).
fn flag_u32(flags: &BTreeMap<String, Option<String>>, name: &str) -> Result<Option<u32>> {
    let q = crate::quote::quote;
    let v = match flags.get(name) {
        None => return Ok(None),
        Some(None) => bail!("--engine-args: --{name} needs a value"),
        Some(Some(v)) => v,
    };
    let x = v
        .parse::<u32>()
        .ok()
        .filter(|&x| x >= 1)
        .ok_or_else(|| anyhow!("--engine-args: --{name} {}: not a positive whole number", q(v)))?;
    let sizes = crate::measure::VLLM_BLOCK_SIZES;
    if name == "block-size" && !sizes.contains(&x) {
        bail!("--engine-args: --block-size {x}: vLLM accepts only {sizes:?}");
    }
    let max = crate::backend::MAX_KV_BLOCKS;
    if name == "num-gpu-blocks-override" && x >= max {
        bail!(
            "--engine-args: --num-gpu-blocks-override {x}: more than the {} blocks an engine may have",
            max - 1
        );
    }
    Ok(Some(x))
}

/// The engine's usable KV blocks and where they came from: the flag, the recorded
/// `num_gpu_blocks` (each less vLLM's null block), or vLLM's derivation; fewer than the
/// engine model holds.
fn kv_blocks_of(
    m: &Measurement,
    flags: &BTreeMap<String, Option<String>>,
    model: Option<&str>,
    tp: Option<u32>,
    block_size: u32,
    opts: SetupOptions,
) -> Result<(u32, String)> {
    let (kv_blocks, kv_from) = if let Some(b) = flag_u32(flags, "num-gpu-blocks-override")? {
        (
            b.saturating_sub(1).max(1),
            "--num-gpu-blocks-override (less vLLM's null block)".to_string(),
        )
    } else if let Some(b) = m.engine.num_gpu_blocks {
        (
            b.saturating_sub(1).max(1),
            format!("num_gpu_blocks {b} recorded (less vLLM's null block)"),
        )
    } else {
        derive_kv(m, model, tp, block_size, flags, opts)?
    };
    let max = crate::backend::MAX_KV_BLOCKS;
    if kv_blocks >= max {
        bail!(
            "{kv_blocks} KV blocks ({kv_from}): more than the {} an engine may have",
            max - 1
        );
    }
    Ok((kv_blocks, kv_from))
}

fn version_at_least_0_19(v: &str) -> bool {
    let mut it = v.trim_start_matches('v').split(['.', '+', '-']);
    let major: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let minor: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (major, minor) >= (0, 19)
}

/// KV blocks derived as vLLM derives them (weights, memory, utilization; activation
/// reserve an input, default 0, so an upper bound).
fn derive_kv(
    m: &Measurement,
    model: Option<&str>,
    tp: Option<u32>,
    block_size: u32,
    flags: &BTreeMap<String, Option<String>>,
    opts: SetupOptions,
) -> Result<(u32, String)> {
    let src = crate::quote::escape(&m.source);
    let shape = model.and_then(crate::profiles::model_for).ok_or_else(|| {
        anyhow!(
            "{src}: num_gpu_blocks is not recorded and the model {} has no known shape to derive it from; give --engine-args \"--num-gpu-blocks-override N\" (vLLM logs \"# GPU blocks: N\")",
            crate::quote::quote(model.unwrap_or("(unknown)"))
        )
    })?;
    let gib = opts
        .gpu_memory_gib
        .or(m.engine.gpu_memory_bytes.map(|b| b as f64 / f64::from(1u32 << 30)))
        .ok_or_else(|| {
            anyhow!("{src}: num_gpu_blocks and the GPU's memory are not recorded; give --gpu-memory-gib G or --engine-args \"--num-gpu-blocks-override N\"")
        })?;
    let util = match flags.get("gpu-memory-utilization") {
        Some(Some(v)) => v.parse::<f64>().ok().filter(|u| *u > 0.0 && *u <= 1.0).ok_or_else(|| {
            anyhow!(
                "--engine-args: --gpu-memory-utilization {}: not a fraction in (0, 1]",
                crate::quote::quote(v)
            )
        })?,
        _ => m.engine.gpu_memory_utilization.unwrap_or(0.9),
    };
    if !(gib.is_finite() && gib > 0.0) {
        bail!("--gpu-memory-gib {gib}: not a positive number of GiB");
    }
    if opts.activation_memory_gib.is_some_and(|a| !(a.is_finite() && a >= 0.0)) {
        bail!("--activation-memory-gib: not a number of GiB >= 0");
    }
    let dtype = match flags.get("kv-cache-dtype").cloned().flatten().as_deref() {
        None | Some("auto") | Some("bfloat16") | Some("float16") => 2,
        Some(d) if d.starts_with("fp8") => 1,
        Some(d) => bail!("--engine-args: --kv-cache-dtype {}: unknown", crate::quote::quote(d)),
    };
    let act = opts.activation_memory_gib.unwrap_or(0.0);
    let k = crate::profiles::KvInputs {
        gpu_memory_gib: gib,
        gpu_memory_utilization: util,
        weight_bytes: shape.weight_bytes(),
        tp: tp.unwrap_or(1),
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        kv_dtype_bytes: dtype,
        block_size_tokens: block_size,
        activation_memory_gib: act,
    };
    // What is left to fail is the combination: name every input it came from.
    let b = crate::profiles::kv_blocks(&k).map_err(|e| {
        anyhow!(
            "deriving KV blocks ({} on {gib} GiB x {util}, TP {}; from {src}, --engine-args and --gpu-memory-gib): {e}",
            shape.name,
            tp.unwrap_or(1)
        )
    })?;
    Ok((
        b,
        format!(
            "derived as vLLM does: {} on {gib:.2} GiB x {util} per GPU, TP {}, activation reserve {act} GiB",
            shape.name,
            tp.unwrap_or(1)
        ),
    ))
}

/// The replay of a measurement's requests: arrivals relative to `origin_s`.
pub struct Workload {
    /// Requests, sorted by arrival.
    pub requests: Vec<ReplayRequest>,
    /// Replay options.
    pub opts: ReplayOptions,
    /// Seconds of the measurement's clock at replay time zero.
    pub origin_s: f64,
}

/// The replay inputs of a measurement; refuses requests larger than the KV cache.
pub fn workload(m: &Measurement, cfg: &VllmConfig) -> Result<Workload> {
    let origin_s = m.requests.iter().map(|r| r.queued_s).fold(0.0f64, f64::min);
    let interval_s = m.series.as_ref().map_or(1.0, |s| s.interval_s);
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
        let arrival = crate::time::checked_secs_to_ns(r.queued_s - origin_s, crate::backend::replay::MAX_SPAN)
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
        opts: ReplayOptions {
            max_concurrency: match m.client {
                Client::Open => None,
                Client::Closed(c) => Some(c),
            },
            interval: SimDuration::try_from_secs_f64(interval_s, crate::backend::replay::MAX_SPAN)
                .ok()
                .filter(|i| *i >= crate::backend::replay::MIN_INTERVAL)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: a series interval of {interval_s} s",
                        crate::quote::escape(&m.source)
                    )
                })?,
        },
        origin_s,
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

/// The loss of a replay against the target. Both series run to the later end; past its
/// end a series holds its totals and zero gauges.
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
    let term = |meas: &Option<Vec<f64>>, simv: Vec<f64>, cumulative: bool, floor: f64| -> Option<f64> {
        let meas = meas.as_ref()?;
        let n = meas.len().max(simv.len());
        let at = |v: &[f64], k: usize| -> f64 {
            match v.get(k) {
                Some(x) => *x,
                None if cumulative => v.last().copied().unwrap_or(0.0),
                None => 0.0,
            }
        };
        let mse = (0..n).map(|k| (at(&simv, k) - at(meas, k)).powi(2)).sum::<f64>() / n as f64;
        let scale = if cumulative {
            meas.last().copied().unwrap_or(1.0)
        } else {
            meas.iter().sum::<f64>() / meas.len() as f64
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

/// What the fit searches: ln of each coefficient (keeps them positive and scales the
/// simplex).
struct Problem<'a> {
    cfg: &'a VllmConfig,
    w: &'a Workload,
    t: &'a Target,
    sims: AtomicU64,
}

fn model_of(x: &[f64]) -> StepTimeModel {
    // Bounded so that a wild simplex vertex cannot make a replay run forever or vanish.
    let c = |v: f64, lo: f64, hi: f64| v.exp().clamp(lo, hi);
    StepTimeModel {
        beta0_us: c(x[0], 10.0, 1e6),
        beta1_us: c(x[1], 1e-3, 1e5),
        beta2_us: c(x[2], 1e-3, 1e5),
        beta3_us: x.get(3).map_or(0.0, |&v| c(v, 1e-6, 100.0)),
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Self::Param) -> std::result::Result<f64, argmin::core::Error> {
        self.sims.fetch_add(1, Ordering::Relaxed);
        let mut cfg = self.cfg.clone();
        cfg.step_time = model_of(x);
        let rep = replay(&cfg, &self.w.requests, &self.w.opts);
        Ok(loss(&rep, self.t).total())
    }
}

/// The fit's result.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The loss of the three-term form (without the context term), for the record.
    pub linear_loss: f64,
    /// The coefficients.
    pub step_time: StepTimeModel,
    /// The loss terms at the optimum.
    pub terms: LossTerms,
    /// Simulations run.
    pub simulations: u64,
    /// Optimiser iterations (both rounds).
    pub iterations: u64,
    /// The method, for the profile file.
    pub method: String,
}

/// First simplex: from these coefficients (µs), each vertex one coefficient x e^0.7
/// (the fourth, per context token, only in the context form).
const START_US: [f64; 4] = [10_000.0, 50.0, 50.0, 0.05];
/// The context term is kept only if it lowers the loss by at least this share: a term
/// that does not pay for itself is left out.
const CONTEXT_GAIN: f64 = 0.02;
/// Iterations of each Nelder-Mead round.
const ROUND_ITERS: [u64; 2] = [200, 150];
/// Simplex sizes of the rounds (ln units).
const ROUND_STEPS: [f64; 2] = [0.7, 0.15];
/// Stop a round when the vertices' costs' standard deviation falls below this.
const SD_TOLERANCE: f64 = 1e-5;

/// Fits the step-time coefficients: two rounds of Nelder-Mead in ln-coefficients, the
/// second restarted around the first's best with a smaller simplex (a restart escapes
/// the collapsed simplices a piecewise-constant loss can leave).
pub fn fit(cfg: &VllmConfig, w: &Workload, t: &Target) -> Result<Fitted> {
    let (x3, l3, s3, i3) = fit_form(cfg, w, t, 3)?;
    // The context form starts from the linear fit, with the context term at its start.
    let mut start4 = x3.clone();
    start4.push(START_US[3].ln());
    let (x4, l4, s4, i4) = fit_form_from(cfg, w, t, start4)?;
    let best = if l4 < l3 * (1.0 - CONTEXT_GAIN) { x4 } else { x3 };
    let step_time = model_of(&best);
    let mut c = cfg.clone();
    c.step_time = step_time.clone();
    let terms = loss(&replay(&c, &w.requests, &w.opts), t);
    Ok(Fitted {
        linear_loss: l3,
        step_time,
        terms,
        simulations: s3 + s4 + 1,
        iterations: i3 + i4,
        method: format!(
            "Nelder-Mead (argmin) on ln(beta0, beta1, beta2) from {:?} us, then on ln(beta0..beta3) from that optimum with beta3 = {} us (kept if it lowers the loss by {} % or more); each: rounds of {:?} iterations, simplex steps {:?}, sd tolerance {SD_TOLERANCE}",
            &START_US[..3],
            START_US[3],
            CONTEXT_GAIN * 100.0,
            ROUND_ITERS,
            ROUND_STEPS
        ),
    })
}

/// One form's fit from [`START_US`]: `(ln-coefficients, loss, simulations, iterations)`.
fn fit_form(cfg: &VllmConfig, w: &Workload, t: &Target, dims: usize) -> Result<(Vec<f64>, f64, u64, u64)> {
    fit_form_from(cfg, w, t, START_US[..dims].iter().map(|b| b.ln()).collect())
}

/// Two Nelder-Mead rounds from `start`.
fn fit_form_from(cfg: &VllmConfig, w: &Workload, t: &Target, start: Vec<f64>) -> Result<(Vec<f64>, f64, u64, u64)> {
    let problem = Problem {
        cfg,
        w,
        t,
        sims: AtomicU64::new(0),
    };
    let mut best = start;
    let mut best_cost = f64::INFINITY;
    let mut iterations = 0;
    let mut problem = problem;
    for (iters, step) in ROUND_ITERS.into_iter().zip(ROUND_STEPS) {
        let mut simplex = vec![best.clone()];
        for i in 0..best.len() {
            let mut v = best.clone();
            v[i] += step;
            simplex.push(v);
        }
        let solver = NelderMead::new(simplex)
            .with_sd_tolerance(SD_TOLERANCE)
            .map_err(|e| anyhow!("{e}"))?;
        let res = Executor::new(problem, solver)
            .configure(|s| s.max_iters(iters))
            .timer(false)
            .run()
            .map_err(|e| anyhow!("the fit failed: {e}"))?;
        iterations += res.state().get_iter();
        best = res
            .state()
            .get_best_param()
            .cloned()
            .context("the optimiser returned no parameters")?;
        best_cost = res.state().get_best_cost();
        problem = res.problem.problem.context("the optimiser kept the problem")?;
    }
    Ok((best, best_cost, problem.sims.load(Ordering::Relaxed), iterations))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_args_parse_like_vllm_serve() {
        let f = parse_engine_args(
            "meta-llama/Llama-3.1-8B --max-num-seqs 8 --max_num_batched_tokens=512 --no-enable-prefix-caching -tp 2",
        )
        .unwrap();
        assert_eq!(f["model"].as_deref(), Some("meta-llama/Llama-3.1-8B"));
        assert_eq!(f["max-num-seqs"].as_deref(), Some("8"));
        assert_eq!(f["max-num-batched-tokens"].as_deref(), Some("512"));
        assert_eq!(f["no-enable-prefix-caching"], None);
        assert_eq!(f["tp"].as_deref(), Some("2"));
        assert!(parse_engine_args("--model 'x").is_err());
        // A pasted command line: `vllm serve` skipped, serving flags kept as ignored.
        let f = parse_engine_args("vllm serve m --port 8000 --enforce-eager --max-num-seqs 4").unwrap();
        assert_eq!(f["model"].as_deref(), Some("m"));
        assert_eq!(ignored_flags(&f), ["--enforce-eager", "--port"]);
        for (bad, want) in [
            (
                "--max-num-seq 8",
                "unknown flag --max-num-seq; did you mean --max-num-seqs?",
            ),
            ("--frobnicate", "unknown flag --frobnicate"),
            (
                "m --enable-prefix-caching false",
                "unexpected argument `false` after --enable-prefix-caching",
            ),
            ("--enable-prefix-caching false", "a switch takes no value"),
            ("m n", "a second model"),
            ("--enable-prefix-caching=false", "a switch takes no value"),
            ("--max-num-seqs", "--max-num-seqs needs a value"),
            ("--max-num-seqs --block-size 16", "--max-num-seqs needs a value"),
        ] {
            let e = parse_engine_args(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
        assert!(version_at_least_0_19("0.19.0") && version_at_least_0_19("v0.20.1") && !version_at_least_0_19("0.8.4"));
    }
}
