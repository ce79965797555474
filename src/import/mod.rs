//! `sim import`: turns a deployment's own configuration (production-stack router flags, the
//! production-stack Helm chart's values, `vllm serve` flags) into a commented scenario whose
//! comments say which flag or key each value came from.
//!
//! Upstream sources read: vllm-project/production-stack @ a6c01db
//! (`src/vllm_router/parsers/parser.py` for the router's flags and defaults,
//! `helm/values.yaml` and `helm/templates/deployment-{router,vllm-multi}.yaml` for how the
//! chart turns values into flags) and vLLM's `vllm/engine/arg_utils.py` for engine flags.
//!
//! Owns: the mapping from deployment flags to scenario keys. May not see: the simulation.
//! Invariant: every value written names the flag or key it came from.

mod flags;
mod helm;
mod tables;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use flags::{Flag, Parsed, number};

/// `sim import` arguments.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Router flags read: --routing-logic, --static-backends, --static-models, --session-key,
--engine-stats-interval, --request-stats-window, --prefix-min-match-length,
--kv-aware-threshold, --imbalanced-threshold (PR #884); every other flag of the router's
parser is listed as ignored. vLLM flags read: the model (positional or --model),
--max-num-seqs, --max-num-batched-tokens, --block-size, --enable-prefix-caching,
--no-enable-prefix-caching, --gpu-memory-utilization, --max-model-len,
--tensor-parallel-size, --kv-cache-dtype, --num-gpu-blocks-override. Helm values read:
servingEngineSpec.modelSpec[] (name, enabled, modelURL, replicaCount, requestGPUType,
vllmConfig.*, vllmConfig.extraArgs) and routerSpec (routingLogic, engineScrapeInterval,
requestStatsWindow, sessionKey, prefixMinMatchLength, replicaCount, serviceDiscovery,
staticBackends, extraArgs).

Example:
  sim import --router-args \"--service-discovery static --static-backends http://a:8000,http://b:8000 \\
      --static-models m,m --routing-logic prefixaware --engine-stats-interval 10\" \\
    --vllm-args \"vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64\" -o out/mine.toml
  sim run out/mine.toml --out out/mine")]
pub struct ImportArgs {
    /// The production-stack router's command line (`vllm-router ...` or just its flags).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub router_args: Option<String>,
    /// A production-stack Helm values file (the chart's own schema).
    #[arg(long, value_name = "VALUES_YAML")]
    pub helm: Option<PathBuf>,
    /// A `vllm serve` command line, applied to every engine (after Helm's vllmConfig).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub vllm_args: Option<String>,
    /// A request trace to replay as the workload (else a placeholder group that runs).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// The GPU when the configuration does not say (h100, a100, l40s).
    #[arg(long, default_value = "h100")]
    pub gpu: String,
    /// List unknown flags as ignored instead of failing on them.
    #[arg(long)]
    pub allow_unknown: bool,
    /// The scenario file to write.
    #[arg(short = 'o', long = "out", value_name = "SCENARIO_TOML")]
    pub out: PathBuf,
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sourced<T> {
    pub v: T,
    pub from: String,
}

fn src<T>(v: T, from: impl Into<String>) -> Sourced<T> {
    Sourced { v, from: from.into() }
}

/// Engine settings of one group.
#[derive(Clone, Debug, Default)]
pub(crate) struct Engine {
    pub model: Option<Sourced<String>>,
    pub max_num_seqs: Option<Sourced<i64>>,
    pub max_num_batched_tokens: Option<Sourced<i64>>,
    pub block_size: Option<Sourced<i64>>,
    pub prefix_caching: Option<Sourced<bool>>,
    pub gpu_memory_utilization: Option<Sourced<f64>>,
    pub max_model_len: Option<Sourced<i64>>,
    pub tp: Option<Sourced<i64>>,
    pub kv_cache_dtype: Option<Sourced<String>>,
    pub kv_blocks: Option<Sourced<i64>>,
}

/// One group of identical engines.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub name: String,
    pub count: Sourced<i64>,
    pub urls: Option<Sourced<Vec<String>>>,
    pub gpu: Sourced<String>,
    pub engine: Engine,
}

/// Router settings.
#[derive(Clone, Debug)]
pub(crate) struct Router {
    pub routing_logic: Sourced<String>,
    pub engine_stats_interval_s: Sourced<i64>,
    pub request_stats_window_s: Sourced<i64>,
    pub prefix_min_match_length: Option<Sourced<i64>>,
    pub kv_aware_threshold: Option<Sourced<i64>>,
    pub imbalanced_threshold: Option<Sourced<f64>>,
    pub session_key: Option<Sourced<String>>,
    pub replicas: Option<Sourced<i64>>,
    pub static_backends: Option<Sourced<Vec<String>>>,
    pub static_models: Option<Sourced<Vec<String>>>,
}

impl Default for Router {
    fn default() -> Self {
        Router {
            routing_logic: src("roundrobin".into(), "no --routing-logic: roundrobin"),
            engine_stats_interval_s: src(30, "router default (--engine-stats-interval 30)"),
            request_stats_window_s: src(60, "router default (--request-stats-window 60)"),
            prefix_min_match_length: None,
            kv_aware_threshold: None,
            imbalanced_threshold: None,
            session_key: None,
            replicas: None,
            static_backends: None,
            static_models: None,
        }
    }
}

/// What an import gathered.
#[derive(Debug, Default)]
pub(crate) struct Import {
    pub router: Router,
    pub groups: Vec<Group>,
    /// Flags and keys read but without effect on the simulation, with where they were.
    pub ignored: Vec<String>,
    /// Notes for the header (simplifications the reader should know).
    pub notes: Vec<String>,
}

/// Runs `sim import`.
pub fn run(a: ImportArgs) -> Result<std::process::ExitCode> {
    if a.router_args.is_none() && a.helm.is_none() && a.vllm_args.is_none() {
        bail!("sim import: give at least one of --router-args, --helm, --vllm-args");
    }
    if !crate::profiles::GPUS
        .iter()
        .any(|g| g.name == a.gpu.to_ascii_lowercase())
    {
        bail!("--gpu: unknown GPU `{}`; expected h100, a100 or l40s", a.gpu);
    }
    let text = import(&a).map_err(|e| anyhow::anyhow!(e))?;
    let stem = a
        .out
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("imported")
        .to_string();
    // The folder first: a trace path is resolved against it.
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    }
    // The written scenario must load: check before writing (results are whole or absent).
    crate::scenario::load_str(&text, &a.out.display().to_string(), &stem, &[])
        .map_err(|e| anyhow::anyhow!("the imported scenario does not validate (please report): {e}"))?;
    std::fs::write(&a.out, &text).map_err(|e| anyhow::anyhow!("{}: {e}", a.out.display()))?;
    eprintln!(
        "wrote {}; run it with: sim run {} --out out/{stem}",
        a.out.display(),
        a.out.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// The scenario text for `a` (also used by tests).
pub fn import(a: &ImportArgs) -> Result<String, String> {
    let mut imp = Import::default();
    let gpu = a.gpu.to_ascii_lowercase();
    if let Some(path) = &a.helm {
        helm::read(path, &mut imp, &gpu, a.allow_unknown)?;
    }
    if let Some(line) = &a.router_args {
        let p = flags::parse(line, tables::ROUTER, "--router-args", false, a.allow_unknown)?;
        router_flags(&p, &mut imp, "--router-args")?;
    }
    let vllm = match &a.vllm_args {
        Some(line) => Some(flags::parse(line, tables::VLLM, "--vllm-args", true, a.allow_unknown)?),
        None => None,
    };
    if imp.groups.is_empty() {
        // No Helm engines: the fleet is the router's static backends, else one engine.
        let (count, urls) = match &imp.router.static_backends {
            Some(b) => (
                src(b.v.len() as i64, format!("{} URLs in {}", b.v.len(), b.from)),
                Some(b.clone()),
            ),
            None => (src(1, "one engine (no --static-backends or Helm replicas given)"), None),
        };
        imp.groups.push(Group {
            name: "backend".into(),
            count,
            urls,
            gpu: src(gpu.clone(), "--gpu"),
            engine: Engine::default(),
        });
        if let Some(m) = &imp.router.static_models {
            let mut distinct: Vec<&String> = m.v.iter().collect();
            distinct.dedup();
            if let Some(first) = m.v.first() {
                imp.groups[0].engine.model = Some(src(first.clone(), m.from.clone()));
            }
            if distinct.len() > 1 {
                imp.notes.push(format!(
                    "{} lists {} models; the simulator routes every request among all backends (the router first keeps the request's model's endpoints), so the fleet is described with the first model's profile",
                    m.from,
                    distinct.len()
                ));
            }
        }
    }
    if let Some(p) = &vllm {
        for g in &mut imp.groups {
            vllm_flags(p, &mut g.engine, "--vllm-args")?;
        }
        for u in &p.unknown {
            imp.ignored.push(format!("{u} (--vllm-args, unknown)"));
        }
        ignored_of(p, tables::VLLM_USED, "--vllm-args", &mut imp.ignored);
    }
    let trace = match &a.trace {
        Some(t) => {
            if !t.is_file() {
                return Err(format!("--trace: {} is not a readable file", t.display()));
            }
            Some(relative_to(t, a.out.parent().unwrap_or(Path::new(""))))
        }
        None => None,
    };
    let stem = a.out.file_stem().and_then(|s| s.to_str()).unwrap_or("imported");
    write(&imp, a, stem, trace.as_deref())
}

/// Applies production-stack router flags.
pub(crate) fn router_flags(p: &Parsed, imp: &mut Import, what: &str) -> Result<(), String> {
    let r = &mut imp.router;
    let from = |f: &Flag| format!("{} ({what})", f.written);
    if let Some(f) = p.get("--routing-logic") {
        let v = f.value.clone().unwrap_or_default();
        match v.as_str() {
            "roundrobin" | "session" | "prefixaware" | "kvaware" | "loadaware" | "load_balanced_kvaware" => {}
            "disaggregated_prefill" | "disaggregated_prefill_orchestrated" => {
                return Err(format!(
                    "{what}: --routing-logic {v} is not modelled (the simulator has no prefill/decode disaggregation)"
                ));
            }
            other => {
                return Err(format!(
                    "{what}: --routing-logic `{other}` is not one of roundrobin, session, kvaware, prefixaware, loadaware (PR #1035), load_balanced_kvaware (PR #884)"
                ));
            }
        }
        r.routing_logic = src(v, from(f));
    }
    if let Some(f) = p.get("--engine-stats-interval") {
        r.engine_stats_interval_s = src(positive(f, what)?, from(f));
    }
    if let Some(f) = p.get("--request-stats-window") {
        r.request_stats_window_s = src(positive(f, what)?, from(f));
    }
    if let Some(f) = p.get("--prefix-min-match-length") {
        r.prefix_min_match_length = Some(src(non_negative(f, what)?, from(f)));
    }
    if let Some(f) = p.get("--kv-aware-threshold") {
        r.kv_aware_threshold = Some(src(non_negative(f, what)?, from(f)));
    }
    if let Some(f) = p.get("--imbalanced-threshold") {
        r.imbalanced_threshold = Some(src(number::<f64>(f, what)?, from(f)));
    }
    if let Some(f) = p.get("--session-key") {
        r.session_key = Some(src(f.value.clone().unwrap_or_default(), from(f)));
    }
    if let Some(f) = p.get("--static-backends") {
        let urls = list(f);
        if urls.is_empty() {
            return Err(format!("{what}: --static-backends is empty"));
        }
        r.static_backends = Some(src(urls, from(f)));
    }
    if let Some(f) = p.get("--static-models") {
        r.static_models = Some(src(list(f), from(f)));
    }
    if let (Some(b), Some(m)) = (&r.static_backends, &r.static_models)
        && b.v.len() != m.v.len()
    {
        return Err(format!(
            "{what}: --static-backends lists {} URLs but --static-models lists {} models (the router needs one model per backend)",
            b.v.len(),
            m.v.len()
        ));
    }
    for u in &p.unknown {
        imp.ignored.push(format!("{u} ({what}, unknown)"));
    }
    ignored_of(p, tables::ROUTER_USED, what, &mut imp.ignored);
    Ok(())
}

/// Applies `vllm serve` flags to one engine.
pub(crate) fn vllm_flags(p: &Parsed, e: &mut Engine, what: &str) -> Result<(), String> {
    let from = |f: &Flag| format!("{} ({what})", f.written);
    // `vllm serve MODEL`: the first positional after `vllm` / `serve`.
    let model = p.positionals.iter().find(|w| {
        !matches!(
            w.as_str(),
            "vllm" | "serve" | "python" | "-m" | "vllm.entrypoints.openai.api_server"
        )
    });
    if let Some(m) = model {
        e.model = Some(src(m.clone(), format!("`{m}` ({what})")));
    }
    if let Some(f) = p.get("--model") {
        e.model = Some(src(f.value.clone().unwrap_or_default(), from(f)));
    }
    let ints: [(&str, &mut Option<Sourced<i64>>); 5] = [
        ("--max-num-seqs", &mut e.max_num_seqs),
        ("--max-num-batched-tokens", &mut e.max_num_batched_tokens),
        ("--block-size", &mut e.block_size),
        ("--max-model-len", &mut e.max_model_len),
        ("--tensor-parallel-size", &mut e.tp),
    ];
    for (name, slot) in ints {
        if let Some(f) = p.get(name) {
            *slot = Some(src(positive(f, what)?, from(f)));
        }
    }
    if let Some(f) = p.get("--num-gpu-blocks-override") {
        e.kv_blocks = Some(src(positive(f, what)?, from(f)));
    }
    if let Some(f) = p.get("--gpu-memory-utilization") {
        let u: f64 = number(f, what)?;
        if !(u > 0.0 && u <= 1.0) {
            return Err(format!("{what}: --gpu-memory-utilization must be in (0, 1], got {u}"));
        }
        e.gpu_memory_utilization = Some(src(u, from(f)));
    }
    if let Some(f) = p.get("--kv-cache-dtype") {
        e.kv_cache_dtype = Some(src(f.value.clone().unwrap_or_default(), from(f)));
    }
    // The last of --enable-prefix-caching / --no-enable-prefix-caching wins.
    if let Some(f) = p
        .flags
        .iter()
        .rev()
        .find(|f| f.name == "--enable-prefix-caching" || f.name == "--no-enable-prefix-caching")
    {
        e.prefix_caching = Some(src(f.name == "--enable-prefix-caching", from(f)));
    }
    Ok(())
}

fn positive(f: &Flag, what: &str) -> Result<i64, String> {
    let v: i64 = number(f, what)?;
    if v < 1 {
        return Err(format!("{what}: `{}` must be at least 1, got {v}", f.name));
    }
    Ok(v)
}

fn non_negative(f: &Flag, what: &str) -> Result<i64, String> {
    let v: i64 = number(f, what)?;
    if v < 0 {
        return Err(format!("{what}: `{}` must be at least 0, got {v}", f.name));
    }
    Ok(v)
}

fn list(f: &Flag) -> Vec<String> {
    f.value
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Known flags that do not affect the simulation.
fn ignored_of(p: &Parsed, used: &[&str], what: &str, out: &mut Vec<String>) {
    for f in &p.flags {
        if !used.contains(&f.name.as_str()) {
            out.push(format!("{} ({what})", f.written));
        }
    }
}

/// `target` relative to `dir` (both made absolute), for a scenario's trace path.
fn relative_to(target: &Path, dir: &Path) -> String {
    let abs = |p: &Path| -> PathBuf {
        let p = if p.as_os_str().is_empty() { Path::new(".") } else { p };
        std::fs::canonicalize(p).unwrap_or_else(|_| std::env::current_dir().unwrap_or_default().join(p))
    };
    let (t, d) = (abs(target), abs(dir));
    let tc: Vec<_> = t.components().collect();
    let dc: Vec<_> = d.components().collect();
    let common = tc.iter().zip(&dc).take_while(|(a, b)| a == b).count();
    let mut r = PathBuf::new();
    for _ in common..dc.len() {
        r.push("..");
    }
    for c in &tc[common..] {
        r.push(c);
    }
    r.to_string_lossy().replace('\\', "/")
}

/// A TOML string literal.
fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `key = value  # comment`, aligned.
fn line(o: &mut String, key: &str, value: String, comment: &str) {
    let kv = format!("{key} = {value}");
    let _ = writeln!(o, "{kv:<34} # {comment}");
}

fn write(imp: &Import, a: &ImportArgs, stem: &str, trace: Option<&str>) -> Result<String, String> {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Imported by `sim import` (fleetsim {}) from:",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(r) = &a.router_args {
        let _ = writeln!(o, "#   --router-args {}", q(r));
    }
    if let Some(h) = &a.helm {
        let _ = writeln!(o, "#   --helm {}", h.display());
    }
    if let Some(v) = &a.vllm_args {
        let _ = writeln!(o, "#   --vllm-args {}", q(v));
    }
    let _ = writeln!(
        o,
        "# Each value's comment names the flag or key it came from; \"default\" means the flag or\n# key was absent and the upstream default applies."
    );
    if imp.ignored.is_empty() {
        let _ = writeln!(o, "#\n# Ignored (no effect on the simulation): none.");
    } else {
        let _ = writeln!(o, "#\n# Ignored (no effect on the simulation):");
        for i in &imp.ignored {
            let _ = writeln!(o, "#   {i}");
        }
    }
    for n in &imp.notes {
        let _ = writeln!(o, "#\n# Note: {n}.");
    }
    let _ = writeln!(o, "\nname = {}\nseed = 1\n", q(stem));
    let _ = writeln!(o, "[backends]");
    let single = imp.groups.len() == 1;
    let mut min_context: Option<i64> = None;
    for (gi, g) in imp.groups.iter().enumerate() {
        if !single {
            let _ = writeln!(o, "\n[[backends.groups]]");
            line(
                &mut o,
                "name",
                q(&g.name),
                "servingEngineSpec.modelSpec[].name (--helm)",
            );
        } else if gi == 0 && g.name != "backend" {
            let _ = writeln!(o, "# engines of `{}`", g.name);
        }
        line(&mut o, "count", g.count.v.to_string(), &g.count.from);
        if let Some(u) = &g.urls {
            let list: Vec<String> = u.v.iter().map(|s| q(s)).collect();
            line(&mut o, "urls", format!("[{}]", list.join(", ")), &u.from);
        }
        group_engine(&mut o, g, &mut min_context)?;
    }
    router(&mut o, &imp.router);
    workload(&mut o, imp, trace, min_context);
    Ok(o)
}

/// A group's engine keys.
fn group_engine(o: &mut String, g: &Group, min_context: &mut Option<i64>) -> Result<(), String> {
    let e = &g.engine;
    let tp = e.tp.as_ref().map_or(1, |t| t.v);
    let tp_from =
        e.tp.as_ref()
            .map_or("default --tensor-parallel-size 1".to_string(), |t| t.from.clone());
    let shape = e.model.as_ref().and_then(|m| crate::profiles::model_for(&m.v));
    let profile = shape.and_then(|s| crate::profiles::find(&format!("{}/{}/tp{tp}", s.name, g.gpu.v)).ok());
    match (&profile, &e.model) {
        (Some(p), Some(m)) => line(
            o,
            "profile",
            q(&p.id),
            &format!(
                "model {} on {} ({}), TP {tp} ({tp_from}); {}",
                m.v,
                g.gpu.v,
                g.gpu.from,
                p.citation()
            ),
        ),
        (_, m) => {
            let what = m.as_ref().map_or("no model given".to_string(), |m| {
                format!("no profile for {} on {} TP {tp} ({})", m.v, g.gpu.v, m.from)
            });
            let _ = writeln!(
                o,
                "# {what}: step time and KV capacity are the shipped defaults (Llama-3.1-8B on one H100);\n# set [backends.step_time] and kv_blocks for your model (see `sim profiles`)."
            );
        }
    }
    let (d_tokens, d_seqs) = crate::profiles::GPUS
        .iter()
        .find(|x| x.name == g.gpu.v)
        .map_or((8192, 1024), crate::profiles::Gpu::vllm_batch_defaults);
    match &e.max_num_seqs {
        Some(v) => line(o, "max_num_seqs", v.v.to_string(), &v.from),
        None => line(
            o,
            "max_num_seqs",
            d_seqs.to_string(),
            &format!("default --max-num-seqs for {}", g.gpu.v),
        ),
    }
    match &e.max_num_batched_tokens {
        Some(v) => line(o, "max_num_batched_tokens", v.v.to_string(), &v.from),
        None => line(
            o,
            "max_num_batched_tokens",
            d_tokens.to_string(),
            &format!("default --max-num-batched-tokens for {}", g.gpu.v),
        ),
    }
    let block = e.block_size.as_ref().map_or(16, |b| b.v);
    match &e.block_size {
        Some(v) => line(o, "block_size_tokens", v.v.to_string(), &v.from),
        None => line(o, "block_size_tokens", "16".into(), "default --block-size 16"),
    }
    match &e.prefix_caching {
        Some(v) => line(o, "prefix_caching", v.v.to_string(), &v.from),
        None => line(
            o,
            "prefix_caching",
            "true".into(),
            "default (vLLM v1 enables prefix caching)",
        ),
    }
    // KV capacity: an explicit block count, else vLLM's derivation from memory.
    let kv = match (&e.kv_blocks, &profile) {
        (Some(k), _) => {
            line(o, "kv_blocks", k.v.to_string(), &k.from);
            Some(k.v)
        }
        (None, Some(p)) => {
            let util = e.gpu_memory_utilization.as_ref().map_or(0.9, |u| u.v);
            match &e.gpu_memory_utilization {
                Some(u) => line(o, "gpu_memory_utilization", util.to_string(), &u.from),
                None => line(
                    o,
                    "gpu_memory_utilization",
                    "0.9".into(),
                    "default --gpu-memory-utilization 0.9",
                ),
            }
            let dtype_bytes = match e.kv_cache_dtype.as_ref().map(|d| d.v.as_str()) {
                Some(d) if d.starts_with("fp8") => 1,
                _ => 2,
            };
            if let Some(d) = &e.kv_cache_dtype {
                line(o, "kv_cache_dtype", q(&d.v), &d.from);
            }
            let inputs = crate::profiles::KvInputs::for_profile(p, util, block as u32, dtype_bytes, 0.0);
            let blocks = crate::profiles::kv_blocks(&inputs).map_err(|m| format!("{} ({}): {m}", g.name, p.id))?;
            let _ = writeln!(
                o,
                "# kv_blocks derived as vLLM does: {blocks} blocks of {block} tokens ({} tokens) on {:.0} GiB; set\n# activation_memory_gib to the activation peak vLLM logs at start-up to refine it.",
                u64::from(blocks) * block as u64,
                p.gpu.memory_gib
            );
            Some(i64::from(blocks))
        }
        (None, None) => None,
    };
    if let Some(m) = &e.max_model_len {
        let cap = kv.unwrap_or(29_205) * block;
        if m.v > cap {
            return Err(format!(
                "{}: --max-model-len {} does not fit the KV cache ({cap} tokens); vLLM refuses to start with this configuration",
                g.name, m.v
            ));
        }
        let _ = writeln!(
            o,
            "# max_model_len {} ({}): the workload's max_context_tokens",
            m.v, m.from
        );
        *min_context = Some(min_context.map_or(m.v, |c| c.min(m.v)));
    }
    Ok(())
}

fn router(o: &mut String, r: &Router) {
    let _ = writeln!(o, "\n[router]");
    line(
        o,
        "engine_stats_interval_s",
        r.engine_stats_interval_s.v.to_string(),
        &r.engine_stats_interval_s.from,
    );
    line(
        o,
        "request_stats_window_s",
        r.request_stats_window_s.v.to_string(),
        &r.request_stats_window_s.from,
    );
    if let Some(n) = &r.replicas {
        line(o, "replicas", n.v.to_string(), &n.from);
    }
    let _ = writeln!(o, "\n[router.policy]");
    let mut kind = r.routing_logic.v.as_str();
    let threshold = r.imbalanced_threshold.as_ref().filter(|t| t.v.is_finite());
    if kind == "load_balanced_kvaware" && threshold.is_none() {
        // PR #884's default threshold is +inf: the router never rebalances.
        kind = "kvaware";
        line(
            o,
            "kind",
            q(kind),
            &format!(
                "{}; default --imbalanced-threshold inf (PR #884) never rebalances, so plain kvaware",
                r.routing_logic.from
            ),
        );
    } else {
        line(o, "kind", q(kind), &r.routing_logic.from);
    }
    match kind {
        "prefixaware" => {
            match &r.prefix_min_match_length {
                Some(p) => line(
                    o,
                    "prefix_min_match_length",
                    p.v.to_string(),
                    &format!("{} (characters)", p.from),
                ),
                None => line(
                    o,
                    "prefix_min_match_length",
                    "0".into(),
                    "default --prefix-min-match-length 0 (off)",
                ),
            }
            line(o, "fallback", q("qps"), "upstream main (_qps_routing)");
        }
        "loadaware" => line(o, "beta", "1.0".into(), "PR #1035 default (env LOADAWARE_BETA unset)"),
        "kvaware" | "load_balanced_kvaware" => {
            match &r.kv_aware_threshold {
                Some(p) => line(o, "kv_aware_threshold", p.v.to_string(), &p.from),
                None => line(
                    o,
                    "kv_aware_threshold",
                    "2000".into(),
                    "default --kv-aware-threshold 2000",
                ),
            }
            if let (true, Some(t)) = (kind == "load_balanced_kvaware", threshold) {
                // The scenario counts requests in whole numbers; the router compares a
                // spread of whole requests with `>=`, so ceil keeps the meaning.
                line(
                    o,
                    "imbalanced_threshold",
                    (t.v.ceil().max(1.0) as i64).to_string(),
                    &t.from,
                );
            }
        }
        _ => {}
    }
    if let Some(k) = &r.session_key {
        let _ = writeln!(
            o,
            "# session key header {} ({}): workload groups send it",
            q(&k.v),
            k.from
        );
    }
}

fn workload(o: &mut String, imp: &Import, trace: Option<&str>, max_context: Option<i64>) {
    let n: i64 = imp.groups.iter().map(|g| g.count.v).sum();
    match trace {
        Some(t) => {
            let _ = writeln!(o, "\n[[workload.traces]]");
            line(o, "file", q(t), "--trace (relative to this file)");
        }
        None => {
            let _ = writeln!(
                o,
                "\n# Placeholder workload (no --trace given): replace it with your traffic, e.g.\n# [[workload.traces]] file = \"your-trace.jsonl\" (see docs/your-fleet.md)."
            );
            let _ = writeln!(o, "[[workload.groups]]");
            line(o, "name", q("placeholder"), "placeholder: 8 chat sessions per backend");
            line(o, "sessions", (8 * n).min(4096).to_string(), "placeholder");
            line(
                o,
                "arrival",
                format!("{{ kind = \"poisson\", rate_per_s = {} }}", n.max(1)),
                "placeholder: one new session per backend per second",
            );
            line(o, "turns", "4".into(), "placeholder");
            line(
                o,
                "system_prompt_tokens",
                "500".into(),
                "placeholder: a shared system prompt",
            );
            line(
                o,
                "input_tokens",
                "{ dist = \"uniform\", min = 100, max = 600 }".into(),
                "placeholder",
            );
            line(
                o,
                "output_tokens",
                "{ dist = \"uniform\", min = 100, max = 400 }".into(),
                "placeholder",
            );
            line(
                o,
                "think_time_s",
                "{ dist = \"exponential\", mean = 5.0 }".into(),
                "placeholder",
            );
            if let Some(m) = max_context {
                line(o, "max_context_tokens", m.to_string(), "--max-model-len");
            }
        }
    }
}

#[cfg(test)]
mod tests;
