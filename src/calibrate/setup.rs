//! The engine a measurement ran: each setting from `--engine-args` first, then the
//! measurement (its metadata, or the `vllm serve` command of its deployment), then a
//! profile file's engine (validation with a profile that records one), then vLLM's own
//! default or derivation (KV blocks from the model's shape and the GPU's memory, batch
//! limits from the GPU); an essential setting still unknown is refused with the flag that
//! gives it. Every value carries where it came from, and the run's own values are never
//! replaced by a profile's without saying so.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};

use crate::backend::perf::StepTimeModel;
use crate::backend::replay::{Dispatch, ReplayOptions};
use crate::backend::vllm::VllmConfig;
use crate::measure::{EngineMeta, Measurement};
use crate::profiles::auto::{Deployment, Parallel};
use crate::profiles::gpus::{self, Gpu};
use crate::profiles::models::{self, ModelShape, WeightDtype};

/// The `vllm serve` flags [`setup`] reads: those that take a value.
const VALUE_FLAGS: &[&str] = &[
    "model",
    "max-num-seqs",
    "max-num-batched-tokens",
    "block-size",
    "tensor-parallel-size",
    "tp",
    "data-parallel-size",
    "dp",
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
    "async-scheduling",
    "no-async-scheduling",
    "enable-expert-parallel",
    "no-enable-expert-parallel",
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
    "enable-chunked-prefill",
    "no-enable-chunked-prefill",
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
        let Some(flag) = short_or_long(&w) else {
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

/// `--flag` or the short `-tp`/`-dp`, without its dashes and with `_` as `-`.
fn short_or_long(w: &str) -> Option<String> {
    w.strip_prefix("--")
        .or_else(|| w.strip_prefix('-').filter(|f| *f == "tp" || *f == "dp"))
        .map(|f| f.replace('_', "-"))
}

/// The flags of [`parse_engine_args`] that do not change the engine model, as given.
pub fn ignored_flags(flags: &BTreeMap<String, Option<String>>) -> Vec<String> {
    flags
        .keys()
        .filter(|k| IGNORED_VALUE_FLAGS.contains(&k.as_str()) || IGNORED_SWITCHES.contains(&k.as_str()))
        .map(|k| format!("--{k}"))
        .collect()
}

/// A command line a deployment recorded, read leniently (it ran, whatever flags it has):
/// `--flag value` or `--flag=value`, the positional model, switches by their form.
fn parse_recorded(s: &str) -> Result<BTreeMap<String, Option<String>>> {
    let words = shlex::split(s).ok_or_else(|| anyhow!("unbalanced quotes in {}", crate::quote::quote(s)))?;
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let Some(flag) = short_or_long(w) else {
            // `vllm serve MODEL`: the positional model (`vllm` and `serve` are not one).
            if w != "vllm" && w != "serve" {
                out.insert("model".to_string(), Some(w.clone()));
            }
            i += 1;
            continue;
        };
        if let Some((k, v)) = flag.split_once('=') {
            out.insert(k.to_string(), Some(v.to_string()));
            i += 1;
        } else if words.get(i + 1).is_some_and(|n| !n.starts_with("--")) && !is_switch(&flag) {
            out.insert(flag, Some(words[i + 1].clone()));
            i += 2;
        } else {
            out.insert(flag, None);
            i += 1;
        }
    }
    Ok(out)
}

fn is_switch(flag: &str) -> bool {
    flag.starts_with("enable-")
        || flag.starts_with("no-")
        || flag.starts_with("disable-")
        || SWITCHES.contains(&flag)
        || IGNORED_SWITCHES.contains(&flag)
}

/// Options for [`setup`] beyond the engine flags.
#[derive(Clone, Debug, Default)]
pub struct SetupOptions {
    /// Memory of one GPU, GiB (when the measurement does not record it).
    pub gpu_memory_gib: Option<f64>,
    /// Activation peak and non-torch memory per GPU, GiB (KV derivation; default 0).
    pub activation_memory_gib: Option<f64>,
    /// `--gpu NAME`: the GPU, where the measurement does not name it.
    pub gpu: Option<String>,
    /// `--model NAME`: the model, where the measurement does not name it.
    pub model: Option<String>,
    /// `--replicas N`: separate servers behind one load balancer.
    pub replicas: Option<u32>,
    /// A profile file's engine, for settings neither the flags nor the run record.
    pub fallback: Option<crate::profiles::file::Engine>,
    /// The same prompts ran on the engine just before (its prefix cache holds them).
    pub warm_prefix: bool,
}

/// The engine a measurement ran, with where each value came from.
#[derive(Clone, Debug)]
pub struct Setup {
    /// One engine (step time still to be fitted or given).
    pub cfg: VllmConfig,
    /// `key = value (source)`, in the order they were settled.
    pub provenance: Vec<String>,
    /// Tensor-parallel size, when known.
    pub tp: Option<u32>,
    /// Engines of one `vllm serve` (`--data-parallel-size`).
    pub dp: u32,
    /// Separate servers behind a load balancer.
    pub replicas: u32,
    /// `--enable-expert-parallel`.
    pub expert_parallel: bool,
    /// The model as served.
    pub model: Option<String>,
    /// Its shape and weights' dtype, when known.
    pub shape: Option<(&'static ModelShape, WeightDtype)>,
    /// The GPU as named by the run or `--gpu`.
    pub gpu_name: Option<String>,
    /// Its datasheet, when known.
    pub gpu: Option<&'static Gpu>,
    /// KV cache bytes per element.
    pub kv_dtype_bytes: u32,
    /// Where `kv_blocks` came from.
    pub kv_from: String,
    /// The inputs of a derived KV capacity (none when recorded or given).
    pub kv_derivation: Option<crate::profiles::KvInputs>,
    /// The engine's prefix cache holds the run's prompts at its start.
    pub warm_prefix: bool,
    /// vLLM's async scheduling.
    pub async_scheduling: bool,
}

impl Setup {
    /// The deployment an auto profile is derived from, or what is missing and the flag
    /// that gives it.
    pub fn deployment(&self, source: &str) -> Result<Deployment> {
        let (model, dtype) = self.shape.ok_or_else(|| match &self.model {
            Some(m) => anyhow!(
                "{source}: the model {} has no shape in the table (`sim profiles --models` lists them); give a known one with --model NAME",
                crate::quote::quote(m)
            ),
            None => anyhow!("{source}: the model is not recorded; give it with --model NAME (`sim profiles --models`)"),
        })?;
        let gpu = self.gpu.ok_or_else(|| match &self.gpu_name {
            Some(g) => anyhow!(
                "{source}: the GPU {} has no datasheet in the table (`sim profiles --gpus` lists them); give a known one with --gpu NAME",
                crate::quote::quote(g)
            ),
            None => anyhow!("{source}: the GPU is not recorded; give it with --gpu NAME (`sim profiles --gpus`)"),
        })?;
        Ok(Deployment {
            model,
            dtype,
            gpu,
            parallel: Parallel {
                tp: self.tp.unwrap_or(1),
                dp: self.dp,
            },
            kv_dtype_bytes: self.kv_dtype_bytes,
            async_scheduling: self.async_scheduling,
        })
    }

    /// How the replay spreads requests: one engine per data-parallel rank and replica,
    /// vLLM's balancer within a server, a Service's random pick across replicas, and
    /// lockstep steps for the data-parallel ranks of a mixture-of-experts model.
    pub fn replay_options(&self, base: ReplayOptions) -> ReplayOptions {
        let moe = self.shape.is_some_and(|(m, _)| m.moe.is_some());
        ReplayOptions {
            engines: self.dp * self.replicas,
            dispatch: if self.replicas > 1 {
                Dispatch::Random { seed: 0 }
            } else {
                Dispatch::LeastLoaded
            },
            lockstep: self.dp > 1 && moe,
            warm_prefix: self.warm_prefix,
            ..base
        }
    }

    /// The engines in one line (what `sim validate` prints before its table).
    pub fn engines_line(&self) -> String {
        let n = self.dp * self.replicas;
        let what = match (self.dp, self.replicas) {
            (1, 1) => "1 engine".to_string(),
            (dp, 1) => format!(
                "{dp} data-parallel engines (vLLM's balancer{})",
                if self
                    .replay_options(ReplayOptions::single(None, crate::time::SimDuration(1)))
                    .lockstep
                {
                    ", stepping together: MoE ranks"
                } else {
                    ""
                }
            ),
            (1, r) => format!("{r} replicas (a Service's random pick)"),
            _ => format!("{n} engines"),
        };
        format!(
            "{what} of {} on {}, TP {}",
            self.shape.map_or_else(
                || self.model.clone().unwrap_or_else(|| "an unnamed model".into()),
                |(m, d)| if d == WeightDtype::Bf16 {
                    m.name.to_string()
                } else {
                    format!("{} ({})", m.name, d.name())
                }
            ),
            self.gpu.map_or_else(
                || self.gpu_name.clone().unwrap_or_else(|| "an unnamed GPU".into()),
                |g| g.name.to_string()
            ),
            self.tp.unwrap_or(1)
        )
    }
}

/// Where a setting came from.
#[derive(Clone, Copy)]
enum Src {
    Flag,
    Run,
}

impl Src {
    fn name(self) -> &'static str {
        match self {
            Src::Flag => "--engine-args",
            Src::Run => "measurement",
        }
    }
}

/// The flags given and the flags the run's own command line recorded.
struct Flags {
    given: BTreeMap<String, Option<String>>,
    run: BTreeMap<String, Option<String>>,
}

impl Flags {
    fn raw(&self, names: &[&str]) -> Option<(Option<String>, Src)> {
        for (map, src) in [(&self.given, Src::Flag), (&self.run, Src::Run)] {
            if let Some(v) = names.iter().find_map(|n| map.get(*n)) {
                return Some((v.clone(), src));
            }
        }
        None
    }

    fn num(&self, names: &[&str]) -> Result<Option<(u32, Src)>> {
        match self.raw(names) {
            None => Ok(None),
            Some((None, _)) => bail!("--engine-args: --{} needs a value", names[0]),
            Some((Some(v), src)) => {
                let x = v.parse::<u32>().ok().filter(|&x| x >= 1).ok_or_else(|| {
                    anyhow!(
                        "{}: --{} {}: not a positive whole number",
                        src.name(),
                        names[0],
                        crate::quote::quote(&v)
                    )
                })?;
                check_bounds(names[0], x, src)?;
                Ok(Some((x, src)))
            }
        }
    }

    /// A fraction in (0, 1], if given.
    fn fraction(&self, name: &str) -> Result<Option<f64>> {
        match self.raw(&[name]) {
            Some((Some(v), src)) => v
                .parse::<f64>()
                .ok()
                .filter(|u| *u > 0.0 && *u <= 1.0)
                .map(Some)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: --{name} {}: not a fraction in (0, 1]",
                        src.name(),
                        crate::quote::quote(&v)
                    )
                }),
            Some((None, src)) => bail!("{}: --{name} needs a value", src.name()),
            None => Ok(None),
        }
    }

    /// A switch or its opposite: the flags given first, then the run's; both in one
    /// command line is refused (vLLM's parser takes the later, silently).
    fn switch(&self, on: &str, off: &str) -> Result<Option<bool>> {
        for (map, src) in [(&self.given, Src::Flag), (&self.run, Src::Run)] {
            match (map.get(on), map.get(off)) {
                (Some(_), Some(_)) => bail!("{}: both --{on} and --{off}", src.name()),
                (Some(v), None) => return Ok(Some(!matches!(v.as_deref(), Some("false" | "False")))),
                (None, Some(_)) => return Ok(Some(false)),
                (None, None) => {}
            }
        }
        Ok(None)
    }
}

/// What vLLM and the engine model take beyond a positive whole number: `--block-size` one
/// of vLLM's, `--num-gpu-blocks-override` below the engine model's bound.
fn check_bounds(name: &str, x: u32, src: Src) -> Result<()> {
    let sizes = crate::measure::VLLM_BLOCK_SIZES;
    if name == "block-size" && !sizes.contains(&x) {
        bail!("{}: --block-size {x}: vLLM accepts only {sizes:?}", src.name());
    }
    let max = crate::backend::MAX_KV_BLOCKS;
    if name == "num-gpu-blocks-override" && x >= max {
        bail!(
            "{}: --num-gpu-blocks-override {x}: more than the {} blocks an engine may have",
            src.name(),
            max - 1
        );
    }
    Ok(())
}

/// The model served (and its known shape) and the GPU (and its datasheet).
type Identity = (
    Option<String>,
    Option<(&'static ModelShape, WeightDtype)>,
    Option<String>,
    Option<&'static Gpu>,
);

/// The model and GPU: the flags, else the measurement; each said in `prov`.
fn identity(e: &EngineMeta, flags: &Flags, opts: &SetupOptions, prov: &mut Vec<String>) -> Identity {
    let model = opts
        .model
        .clone()
        .or_else(|| flags.raw(&["model"]).and_then(|(v, _)| v))
        .or_else(|| e.model.clone());
    let shape = model.as_deref().and_then(models::resolve);
    let gpu_name = opts.gpu.clone().or_else(|| e.gpu.clone());
    let gpu = gpu_name.as_deref().and_then(gpus::resolve);
    if let Some(m) = &model {
        let how = if opts.model.is_some() { "--model" } else { "measurement" };
        let shape_s = shape.map_or("no known shape".to_string(), |(s, d)| {
            format!("{} {}", s.name, d.name())
        });
        prov.push(format!("model = {m} ({how}; {shape_s})"));
    }
    if let Some(g) = &gpu_name {
        let how = if opts.gpu.is_some() { "--gpu" } else { "measurement" };
        let sheet = gpu.map_or("no datasheet".to_string(), |g| format!("datasheet {}", g.name));
        prov.push(format!("gpu = {g} ({how}; {sheet})"));
    }
    (model, shape, gpu_name, gpu)
}

/// Tensor and data parallelism, replicas and expert parallelism: the flags, else the
/// measurement; each said in `prov`.
fn parallelism(
    e: &EngineMeta,
    flags: &Flags,
    opts: &SetupOptions,
    src: &str,
    prov: &mut Vec<String>,
) -> Result<(Option<u32>, u32, u32, bool)> {
    let tp = flags
        .num(&["tensor-parallel-size", "tp"])?
        .map(|(v, _)| v)
        .or(e.tensor_parallel_size);
    let dp = flags
        .num(&["data-parallel-size", "dp"])?
        .map(|(v, _)| v)
        .or(e.data_parallel_size)
        .unwrap_or(1);
    let replicas = opts.replicas.or(e.replicas).unwrap_or(1);
    if dp > 1 && replicas > 1 {
        bail!("{src}: {replicas} replicas of {dp} data-parallel engines each: not modelled (one or the other)");
    }
    let expert_parallel = flags
        .switch("enable-expert-parallel", "no-enable-expert-parallel")?
        .or(e.expert_parallel)
        .unwrap_or(false);
    prov.push(format!(
        "tensor_parallel_size = {}{}",
        tp.unwrap_or(1),
        if tp.is_none() { " (not recorded: 1)" } else { "" }
    ));
    prov.push(format!("data_parallel_size = {dp}"));
    if replicas > 1 {
        prov.push(format!("replicas = {replicas}"));
    }
    if expert_parallel {
        prov.push("enable_expert_parallel = true".into());
    }
    if opts.warm_prefix {
        prov.push("prefix cache warm with the run's prompts (--warm-prefix-cache)".into());
    }
    Ok((tp, dp, replicas, expert_parallel))
}

/// The measured engine's configuration (see the module doc for the order of sources).
pub fn setup(m: &Measurement, engine_args: &str, opts: &SetupOptions) -> Result<Setup> {
    let flags = Flags {
        given: parse_engine_args(engine_args)?,
        run: match &m.engine.vllm_command {
            Some(c) => parse_recorded(c).map_err(|e| anyhow!("{}: the recorded command line: {e}", m.source))?,
            None => BTreeMap::new(),
        },
    };
    let e = &m.engine;
    let src = crate::quote::escape(&m.source);
    let mut prov = Vec::new();
    let (model, shape, gpu_name, gpu) = identity(e, &flags, opts, &mut prov);
    let (tp, dp, replicas, expert_parallel) = parallelism(e, &flags, opts, &src, &mut prov)?;
    let fb = opts.fallback.as_ref();
    let batch_defaults = gpu.map(Gpu::vllm_batch_defaults);
    let mut pick = |key: &str,
                    names: &[&str],
                    meta: Option<u32>,
                    fallback: Option<u32>,
                    default: Option<u32>|
     -> Result<u32> {
        let (v, s) = match (flags.num(names)?, meta, fallback, default) {
            (Some((v, s)), ..) => (v, s.name().to_string()),
            (None, Some(v), ..) => (v, "measurement".into()),
            (None, None, Some(v), _) => (v, "profile file: the run does not record it".into()),
            (None, None, None, Some(v)) => (v, format!("vLLM's default on {}", gpu.map_or("this GPU", |g| g.name))),
            _ => bail!(
                "{src}: {key} is not recorded; give it: --engine-args \"--{} N\" (or the GPU with --gpu NAME, for vLLM's default)",
                names[0]
            ),
        };
        prov.push(format!("{key} = {v} ({s})"));
        Ok(v)
    };
    let max_num_seqs = pick(
        "max_num_seqs",
        &["max-num-seqs"],
        e.max_num_seqs,
        fb.map(|f| f.max_num_seqs),
        batch_defaults.map(|d| d.1),
    )?;
    let max_num_batched_tokens = pick(
        "max_num_batched_tokens",
        &["max-num-batched-tokens"],
        e.max_num_batched_tokens,
        fb.map(|f| f.max_num_batched_tokens),
        batch_defaults.map(|d| d.0),
    )?;
    let block_size = flags
        .num(&["block-size"])?
        .map(|(v, _)| v)
        .or(e.block_size)
        .unwrap_or(16);
    prov.push(format!("block_size_tokens = {block_size}"));
    let prefix_caching = flags
        .switch("enable-prefix-caching", "no-enable-prefix-caching")?
        .or(e.prefix_caching)
        .unwrap_or(true);
    prov.push(format!("prefix_caching = {prefix_caching}"));
    // vLLM 0.19 defaults `scheduler_reserve_full_isl` to true; earlier versions lack it.
    let reserve = flags
        .switch("scheduler-reserve-full-isl", "no-scheduler-reserve-full-isl")?
        .or(e.reserve_full_isl)
        .unwrap_or_else(|| e.vllm_version.as_deref().is_some_and(version_at_least_0_19));
    prov.push(format!("reserve_full_isl = {reserve}"));
    // vLLM 0.19 schedules asynchronously by default; earlier versions do not.
    let async_scheduling = flags
        .switch("async-scheduling", "no-async-scheduling")?
        .or(e.async_scheduling)
        .unwrap_or_else(|| e.vllm_version.as_deref().is_some_and(version_at_least_0_19));
    prov.push(format!("async_scheduling = {async_scheduling}"));
    let kv_dtype_bytes = match flags.raw(&["kv-cache-dtype"]).and_then(|(v, _)| v).as_deref() {
        None | Some("auto") | Some("bfloat16") | Some("float16") => 2,
        Some(d) if d.starts_with("fp8") => 1,
        Some(d) => bail!("--engine-args: --kv-cache-dtype {}: unknown", crate::quote::quote(d)),
    };
    let mut s = Setup {
        cfg: VllmConfig {
            max_num_seqs,
            max_num_batched_tokens,
            kv_blocks: 0,
            block_size_tokens: block_size,
            prefix_caching,
            step_time: StepTimeModel::default(),
            reserve_full_isl: reserve,
        },
        provenance: prov,
        tp,
        dp,
        replicas,
        expert_parallel,
        model,
        shape,
        gpu_name,
        gpu,
        kv_dtype_bytes,
        kv_from: String::new(),
        kv_derivation: None,
        warm_prefix: opts.warm_prefix,
        async_scheduling,
    };
    let (kv_blocks, kv_from, derivation) = kv(m, &s, &flags, opts)?;
    s.kv_derivation = derivation;
    s.cfg.kv_blocks = kv_blocks;
    let max = crate::backend::MAX_KV_BLOCKS;
    if kv_blocks >= max {
        bail!(
            "{kv_blocks} KV blocks ({kv_from}): more than the {} an engine may have",
            max - 1
        );
    }
    s.provenance.push(format!("kv_blocks = {kv_blocks} ({kv_from})"));
    s.kv_from = kv_from;
    let ignored = ignored_flags(&flags.given);
    if !ignored.is_empty() {
        s.provenance.push(format!(
            "ignored (no effect on the engine model): {}",
            ignored.join(" ")
        ));
    }
    Ok(s)
}

pub(super) fn version_at_least_0_19(v: &str) -> bool {
    let mut it = v.trim_start_matches('v').split(['.', '+', '-']);
    let major: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let minor: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (major, minor) >= (0, 19)
}

/// KV blocks: the override flag, the run's `num_gpu_blocks`, a profile file's, else
/// derived as vLLM derives them.
fn kv(
    m: &Measurement,
    s: &Setup,
    flags: &Flags,
    opts: &SetupOptions,
) -> Result<(u32, String, Option<crate::profiles::KvInputs>)> {
    if let Some((b, src)) = flags.num(&["num-gpu-blocks-override"])? {
        return Ok((
            b.saturating_sub(1).max(1),
            format!("--num-gpu-blocks-override in the {} less vLLM's null block", src.name()),
            None,
        ));
    }
    if let Some(b) = m.engine.num_gpu_blocks {
        return Ok((
            b.saturating_sub(1).max(1),
            format!("num_gpu_blocks {b} recorded (less vLLM's null block)"),
            None,
        ));
    }
    let derived = derive_kv(m, s, flags, opts);
    match (derived, &opts.fallback) {
        (Ok((b, from, k)), _) => Ok((b, from, Some(k))),
        (Err(_), Some(f)) => Ok((
            f.kv_blocks,
            format!("the profile file's ({}): the run records none", f.kv_blocks_from),
            None,
        )),
        (Err(e), None) => Err(e),
    }
}

/// KV blocks derived as vLLM derives them (weights, memory, utilization; activation
/// reserve an input, default 0, so an upper bound), saying where the memory came from.
fn derive_kv(
    m: &Measurement,
    s: &Setup,
    flags: &Flags,
    opts: &SetupOptions,
) -> Result<(u32, String, crate::profiles::KvInputs)> {
    let src = crate::quote::escape(&m.source);
    let (shape, dtype) = s.shape.ok_or_else(|| {
        anyhow!(
            "{src}: num_gpu_blocks is not recorded and the model {} has no known shape to derive it from; give --model NAME (`sim profiles --models` lists the known shapes) or --engine-args \"--num-gpu-blocks-override N\" (vLLM logs \"# GPU blocks: N\")",
            crate::quote::quote(s.model.as_deref().unwrap_or("(unknown)"))
        )
    })?;
    let (gib, memory_from) = match (opts.gpu_memory_gib, m.engine.gpu_memory_bytes, s.gpu) {
        (Some(g), ..) => (g, "--gpu-memory-gib".to_string()),
        (None, Some(b), _) => (
            b as f64 / f64::from(1u32 << 30),
            "the run's recorded GPU memory".to_string(),
        ),
        (None, None, Some(g)) => (g.memory_gib, format!("the {} datasheet", g.name)),
        (None, None, None) => bail!(
            "{src}: num_gpu_blocks and the GPU's memory are not recorded; give --gpu NAME (its datasheet's memory), --gpu-memory-gib G or --engine-args \"--num-gpu-blocks-override N\""
        ),
    };
    let util = flags
        .fraction("gpu-memory-utilization")?
        .or(m.engine.gpu_memory_utilization)
        .unwrap_or(0.9);
    // Activations, buffers and the driver's share: as given, else the physics model's
    // shipped reserve (vLLM measures it at start-up; 0 would overstate the cache).
    if !(gib.is_finite() && gib > 0.0) {
        bail!("--gpu-memory-gib {gib}: not a positive number of GiB");
    }
    if opts.activation_memory_gib.is_some_and(|a| !(a.is_finite() && a >= 0.0)) {
        bail!("--activation-memory-gib: not a number of GiB >= 0");
    }
    let act = opts
        .activation_memory_gib
        .unwrap_or(crate::profiles::auto::SHIPPED.reserve_gib);
    let tp = s.tp.unwrap_or(1);
    // Per-GPU weights (a MoE model's experts spread over its data-parallel ranks too),
    // as the whole-model figure the derivation divides by TP.
    let weight_bytes = match s.gpu {
        Some(gpu) => {
            let d = Deployment {
                model: shape,
                dtype,
                gpu,
                parallel: Parallel { tp, dp: s.dp },
                kv_dtype_bytes: s.kv_dtype_bytes,
                async_scheduling: s.async_scheduling,
            };
            d.weight_bytes_per_gpu() * u64::from(tp)
        }
        None => shape.weight_bytes(),
    };
    let k = crate::profiles::KvInputs {
        gpu_memory_gib: gib,
        gpu_memory_utilization: util,
        weight_bytes,
        tp,
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        kv_dtype_bytes: s.kv_dtype_bytes,
        block_size_tokens: s.cfg.block_size_tokens,
        activation_memory_gib: act,
    };
    // What is left to fail is the combination: name every input it came from.
    let b = crate::profiles::kv_blocks(&k).map_err(|e| {
        anyhow!(
            "deriving KV blocks ({} on {gib} GiB ({memory_from}) x {util}, TP {tp}; from {src}, --engine-args and --gpu-memory-gib): {e}",
            shape.name
        )
    })?;
    Ok((
        b,
        format!(
            "derived as vLLM does: {} on {gib:.2} GiB ({memory_from}) x {util} per GPU, TP {tp}, {act} GiB set aside for activations and buffers{}",
            shape.name,
            if opts.activation_memory_gib.is_some() {
                " (--activation-memory-gib)"
            } else {
                " (the shipped reserve_gib)"
            }
        ),
        k,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_args_parse_like_vllm_serve() {
        let f = parse_engine_args(
            "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs 8 --max_num_batched_tokens=512 --no-enable-prefix-caching -tp 2 --disable-log-requests --port 80",
        )
        .unwrap();
        assert_eq!(f["model"].as_deref(), Some("meta-llama/Llama-3.1-8B"));
        assert_eq!(f["max-num-seqs"].as_deref(), Some("8"));
        assert_eq!(f["max-num-batched-tokens"].as_deref(), Some("512"));
        assert_eq!(f["no-enable-prefix-caching"], None);
        assert_eq!(f["tp"].as_deref(), Some("2"));
        assert_eq!(f["disable-log-requests"], None);
        assert_eq!(f["port"].as_deref(), Some("80"));
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
        // A recorded command line is read as it ran.
        let f = parse_recorded("vllm serve m --some-new-flag 3 --enable-foo").unwrap();
        assert_eq!(f["model"].as_deref(), Some("m"));
        assert_eq!(f["some-new-flag"].as_deref(), Some("3"));
        assert!(version_at_least_0_19("0.19.0") && version_at_least_0_19("v0.20.1") && !version_at_least_0_19("0.8.4"));
    }
}
