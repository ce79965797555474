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

mod autoscaler;
mod flags;
mod helm;
mod tables;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::policy::kind::{LogicValue, PolicyKind, RoutingLogic};
use crate::policy::{kvaware, prefixaware, registry, session};

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
staticBackends, extraArgs) and servingEngineSpec.modelSpec[].keda. --autoscaler reads an
autoscaling/v2 HorizontalPodAutoscaler or a keda.sh/v1alpha1 ScaledObject (docs/autoscaling.md
lists the keys).

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
    /// A Kubernetes HorizontalPodAutoscaler (autoscaling/v2) or KEDA ScaledObject manifest
    /// (YAML), imported as the scenario's `[autoscaler]`.
    #[arg(long, value_name = "MANIFEST_YAML")]
    pub autoscaler: Option<PathBuf>,
    /// A `vllm serve` command line, applied to every engine (after Helm's vllmConfig).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub vllm_args: Option<String>,
    /// A request trace to replay as the workload (else a commented template that exposes
    /// the imported router's failure class).
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
    /// Flags and keys that set a value of the scenario, with where they were.
    pub read: Vec<String>,
    /// Notes for the header (simplifications the reader should know).
    pub notes: Vec<String>,
    /// `[autoscaler]`, from a manifest or the chart's `keda` values.
    pub autoscaler: Option<autoscaler::Autoscaler>,
}

/// Runs `sim import`.
pub fn run(a: ImportArgs) -> Result<std::process::ExitCode> {
    if a.router_args.is_none() && a.helm.is_none() && a.vllm_args.is_none() && a.autoscaler.is_none() {
        bail!("sim import: give at least one of --router-args, --helm, --vllm-args, --autoscaler");
    }
    if !crate::profiles::GPUS
        .iter()
        .any(|g| g.name == a.gpu.to_ascii_lowercase())
    {
        bail!("--gpu: unknown GPU `{}`; expected h100, a100 or l40s", a.gpu);
    }
    let (text, origins) = import_with_origins(&a).map_err(|e| anyhow::anyhow!(e))?;
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
    // A value it refuses is named by the flag or key that gave it.
    crate::scenario::load_str(&text, &a.out.display().to_string(), &stem, &[])
        .map_err(|e| anyhow::anyhow!(refused(&e, &origins)))?;
    crate::atomic::write_file(&a.out, text.as_bytes())?;
    eprintln!(
        "wrote {}; run it with: sim run {} --out out/{stem}",
        a.out.display(),
        a.out.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// The scenario text for `a` (also used by tests).
pub fn import(a: &ImportArgs) -> Result<String, String> {
    import_with_origins(a).map(|(t, _)| t)
}

/// The scenario text for `a`, and where each key's value came from.
fn import_with_origins(a: &ImportArgs) -> Result<(String, Origins), String> {
    let mut imp = Import::default();
    let gpu = a.gpu.to_ascii_lowercase();
    if let Some(path) = &a.helm {
        helm::read(path, &mut imp, &gpu, a.allow_unknown)?;
    }
    if let Some(line) = &a.router_args {
        let p = flags::parse(line, tables::ROUTER, "--router-args", false, a.allow_unknown)?;
        router_flags(&p, &mut imp, "--router-args")?;
    }
    if let Some(path) = &a.autoscaler {
        autoscaler::read_manifest(path, &mut imp, a.allow_unknown)?;
    }
    let vllm = match &a.vllm_args {
        Some(line) => Some(flags::parse(line, tables::VLLM, "--vllm-args", true, a.allow_unknown)?),
        None => None,
    };
    if !imp.groups.is_empty()
        && let Some(m) = &imp.router.static_models
    {
        imp.ignored
            .push(format!("{} (the Helm engines' modelURL name the models)", m.from));
    }
    if imp.groups.is_empty() {
        static_groups(&mut imp, &gpu);
    }
    if let Some(p) = &vllm {
        for g in &mut imp.groups {
            vllm_flags(p, &mut g.engine, "--vllm-args")?;
        }
        for u in &p.unknown {
            imp.ignored.push(format!("{u} (--vllm-args, unknown)"));
        }
        ignored_of(p, tables::VLLM_USED, "--vllm-args", &mut imp);
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
    if imp.autoscaler.is_some() && imp.groups.len() > 1 {
        return Err(format!(
            "the autoscaler scales one pool, but the configuration has {} groups of engines ({}): keep the autoscaled group only",
            imp.groups.len(),
            imp.groups
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let stem = a.out.file_stem().and_then(|s| s.to_str()).unwrap_or("imported");
    write(&imp, a, stem, trace.as_deref())
}

/// Applies production-stack router flags.
pub(crate) fn router_flags(p: &Parsed, imp: &mut Import, what: &str) -> Result<(), String> {
    // The router's parser takes no positional argument: a word after the flags is an
    // error (argparse: "unrecognized arguments"), never silently dropped.
    if let Some(w) = p.stray.first() {
        return Err(format!(
            "{}: unexpected argument {} after the flags (the router takes no positional arguments)",
            crate::quote::escape(what),
            crate::quote::quote(w)
        ));
    }
    let r = &mut imp.router;
    let from = |f: &Flag| format!("{} ({what})", f.written);
    if let Some(f) = p.get("--routing-logic") {
        let v = f.value.clone().unwrap_or_default();
        routing_logic(&v).map_err(|m| f.err(&m))?;
        r.routing_logic = src(v, from(f));
    }
    if let Some(f) = p.get("--engine-stats-interval") {
        r.engine_stats_interval_s = src(positive(f)?, from(f));
    }
    if let Some(f) = p.get("--request-stats-window") {
        r.request_stats_window_s = src(positive(f)?, from(f));
    }
    if let Some(f) = p.get("--prefix-min-match-length") {
        r.prefix_min_match_length = Some(src(non_negative(f)?, from(f)));
    }
    if let Some(f) = p.get("--kv-aware-threshold") {
        r.kv_aware_threshold = Some(src(non_negative(f)?, from(f)));
    }
    if let Some(f) = p.get("--imbalanced-threshold") {
        // PR #884: a float; inf (its default) never rebalances. NaN or a negative value has
        // no meaning the scenario can hold: refused, never rewritten.
        let t = number::<f64>(f)?;
        if t.is_nan() || t < 0.0 {
            return Err(f.err(&format!("must be a number >= 0 (inf: never rebalance), got {t}")));
        }
        r.imbalanced_threshold = Some(src(t, from(f)));
    }
    if let Some(f) = p.get("--session-key") {
        r.session_key = Some(src(f.value.clone().unwrap_or_default(), from(f)));
    }
    if let Some(f) = p.get("--static-backends") {
        let urls = list(f);
        if urls.is_empty() {
            return Err(f.err("lists no URL"));
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
            "{}: {} lists {} URLs but {} lists {} models (the router needs one model per backend)",
            crate::quote::escape(what),
            crate::quote::escape(&b.from),
            b.v.len(),
            crate::quote::escape(&m.from),
            m.v.len()
        ));
    }
    for u in &p.unknown {
        imp.ignored.push(format!("{u} ({what}, unknown)"));
    }
    ignored_of(p, tables::ROUTER_USED, what, imp);
    Ok(())
}

/// The registry's entry for production-stack's `--routing-logic v`, or why there is none.
fn routing_logic(v: &str) -> Result<(&'static str, RoutingLogic), String> {
    let logics = registry::routing_logics();
    if let Some((e, l)) = logics.iter().find(|(e, _)| e.kind() == v) {
        return Ok((e.kind(), *l));
    }
    if v == "disaggregated_prefill" || v == "disaggregated_prefill_orchestrated" {
        return Err(format!(
            "{v} is not modelled (the simulator has no prefill/decode disaggregation)"
        ));
    }
    let names: Vec<String> = logics
        .iter()
        .map(|(e, l)| match l.pr {
            Some(pr) => format!("{} ({pr})", e.kind()),
            None => e.kind().to_string(),
        })
        .collect();
    Err(format!("{} is not one of {}", crate::quote::quote(v), names.join(", ")))
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
        e.model = Some(src(m.clone(), format!("{} ({what})", crate::quote::quote(m))));
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
            *slot = Some(src(positive(f)?, from(f)));
        }
    }
    if let Some(f) = p.get("--num-gpu-blocks-override") {
        e.kv_blocks = Some(src(positive(f)?, from(f)));
    }
    if let Some(f) = p.get("--gpu-memory-utilization") {
        let u: f64 = number(f)?;
        if !(u > 0.0 && u <= 1.0) {
            return Err(f.err(&format!("must be in (0, 1], got {u}")));
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

fn positive(f: &Flag) -> Result<i64, String> {
    let v: i64 = number(f)?;
    if v < 1 {
        return Err(f.err(&format!("must be at least 1, got {v}")));
    }
    Ok(v)
}

fn non_negative(f: &Flag) -> Result<i64, String> {
    let v: i64 = number(f)?;
    if v < 0 {
        return Err(f.err(&format!("must be at least 0, got {v}")));
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

/// Known flags that do not affect the simulation go to `imp.ignored`, the others to
/// `imp.read`.
fn ignored_of(p: &Parsed, used: &[&str], what: &str, imp: &mut Import) {
    for f in &p.flags {
        let line = format!("{} ({what})", f.written);
        if used.contains(&f.name.as_str()) {
            imp.read.push(line);
        } else {
            imp.ignored.push(line);
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

/// One table of the scenario being written: a `toml_edit` table (so every value is
/// escaped by the TOML library, never pasted into text), the comments waiting for its next
/// key, and its key path.
struct Section {
    t: toml_edit::Table,
    path: String,
    pending: String,
}

/// Where each written key's value came from: the scenario refusing a value names the flag
/// or Helm key that gave it, not a line of a file that is never written.
type Origins = Vec<(String, String)>;

/// A comment line: `# text`, with the text's control characters escaped (a newline in a
/// flag value, a Helm key or a path can never end the comment and start live TOML).
fn comment(text: &str) -> String {
    if text.is_empty() {
        "#\n".to_string()
    } else {
        format!("# {}\n", crate::quote::escape(text))
    }
}

impl Section {
    fn new(path: &str) -> Section {
        Section {
            t: toml_edit::Table::new(),
            path: path.to_string(),
            pending: String::new(),
        }
    }

    /// A comment line before the next key (or the next table).
    fn note(&mut self, text: &str) {
        self.pending.push_str(&comment(text));
    }

    /// `key = value  # from`, aligned, recording where the value came from.
    fn put(&mut self, o: &mut Origins, key: &str, v: impl Into<toml_edit::Value>, from: &str) {
        let mut v: toml_edit::Value = v.into();
        let width = key.len() + 3 + v.to_string().len();
        let pad = 34usize.saturating_sub(width) + 1;
        v.decor_mut()
            .set_suffix(format!("{}# {}", " ".repeat(pad), crate::quote::escape(from)));
        self.t.insert(key, toml_edit::Item::Value(v));
        let prefix = std::mem::take(&mut self.pending);
        if !prefix.is_empty()
            && let Some(mut k) = self.t.key_mut(key)
        {
            k.leaf_decor_mut().set_prefix(prefix);
        }
        let path = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        o.push((path, from.to_string()));
    }

    /// The finished table with `before` above its header (a blank line when empty); its own
    /// comments not followed by a key are handed on to what follows, then a blank line.
    fn finish(mut self, before: &mut String) -> toml_edit::Table {
        let prefix = match std::mem::take(before) {
            b if b.is_empty() => "\n".to_string(),
            b => b,
        };
        self.t.decor_mut().set_prefix(prefix);
        if !self.pending.is_empty() {
            *before = format!("{}\n", self.pending);
        }
        self.t
    }
}

/// An inline table `{ k = v, ... }`.
fn inline(pairs: &[(&str, toml_edit::Value)]) -> toml_edit::Value {
    let mut t = toml_edit::InlineTable::new();
    for (k, v) in pairs {
        t.insert(*k, v.clone());
    }
    toml_edit::Value::InlineTable(t)
}

/// The scenario text for `imp`, and where each key's value came from.
fn write(imp: &Import, a: &ImportArgs, stem: &str, trace: Option<&str>) -> Result<(String, Origins), String> {
    let mut o: Origins = Vec::new();
    let mut root = preamble(imp, a);
    root.put(&mut o, "name", stem, "-o (the file name)");
    root.put(&mut o, "seed", 1i64, "fleetsim's default seed");
    // Tables are finished in the order they are displayed, so a comment left at the end
    // of one table goes above the next one's header.
    let mut carry = std::mem::take(&mut root.pending);
    let mut doc = toml_edit::DocumentMut::new();
    *doc.as_table_mut() = root.t;
    let mut min_context: Option<i64> = None;
    let bt = backends(imp, &mut o, &mut carry, &mut min_context)?;
    doc.insert("backends", toml_edit::Item::Table(bt));
    let (router_t, policy_t) = router(&mut o, &imp.router, &mut carry)?;
    let mut rt = router_t;
    rt.insert("policy", toml_edit::Item::Table(policy_t));
    doc.insert("router", toml_edit::Item::Table(rt));
    let wl = workload(&mut o, imp, trace, min_context, &mut carry);
    doc.insert("workload", toml_edit::Item::Table(wl));
    if let Some(a) = &imp.autoscaler {
        let mut sec = Section::new("autoscaler");
        for (k, v) in &a.keys {
            sec.put(&mut o, k, v.v.clone(), &v.from);
        }
        doc.insert("autoscaler", toml_edit::Item::Table(sec.finish(&mut carry)));
    }
    let mut text = doc.to_string();
    text.push_str(&carry);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok((text, o))
}

/// The file's opening comment: what it was imported from, what was read and ignored, and
/// the import's notes.
fn preamble(imp: &Import, a: &ImportArgs) -> Section {
    let mut root = Section::new("");
    root.note(&format!(
        "Imported by `sim import` (fleetsim {}) from:",
        env!("CARGO_PKG_VERSION")
    ));
    if let Some(r) = &a.router_args {
        root.note(&format!("  --router-args {}", crate::quote::quote(r)));
    }
    if let Some(h) = &a.helm {
        root.note(&format!("  --helm {}", crate::quote::path(h)));
    }
    if let Some(v) = &a.vllm_args {
        root.note(&format!("  --vllm-args {}", crate::quote::quote(v)));
    }
    if let Some(m) = &a.autoscaler {
        root.note(&format!("  --autoscaler {}", crate::quote::path(m)));
    }
    root.note("Each value's comment names the flag or key it came from; \"default\" means the flag or");
    root.note("key was absent and the upstream default applies.");
    root.note("");
    if imp.read.is_empty() {
        root.note("Read: no flag or key (every value below is a default).");
    } else {
        root.note("Read (each sets the values whose comment names it):");
        for r in &imp.read {
            root.note(&format!("  {r}"));
        }
    }
    if imp.ignored.is_empty() {
        root.note("Ignored (no effect on the simulation): none.");
    } else {
        root.note("Ignored (no effect on the simulation):");
        for i in &imp.ignored {
            root.note(&format!("  {i}"));
        }
    }
    for n in &imp.notes {
        root.note("");
        root.note(&format!("Note: {n}."));
    }
    root.pending.push('\n');
    root
}

/// `[backends]`: one group's keys in it directly, or one `[[backends.groups]]` per group.
fn backends(
    imp: &Import,
    o: &mut Origins,
    carry: &mut String,
    min_context: &mut Option<i64>,
) -> Result<toml_edit::Table, String> {
    let multi_model = served_models(imp).len() > 1;
    if let [g] = imp.groups.as_slice() {
        let mut sec = Section::new("backends");
        if g.name != "backend" {
            sec.note(&format!("engines of {}", crate::quote::quote(&g.name)));
        }
        group_keys(&mut sec, o, g, multi_model, min_context)?;
        return Ok(sec.finish(carry));
    }
    let mut bt = toml_edit::Table::new();
    bt.set_implicit(true);
    let mut groups = toml_edit::ArrayOfTables::new();
    for (gi, g) in imp.groups.iter().enumerate() {
        let mut sec = Section::new(&format!("backends.groups[{gi}]"));
        sec.put(
            o,
            "name",
            g.name.as_str(),
            "servingEngineSpec.modelSpec[].name (--helm)",
        );
        group_keys(&mut sec, o, g, multi_model, min_context)?;
        groups.push(sec.finish(carry));
    }
    bt.insert("groups", toml_edit::Item::ArrayOfTables(groups));
    Ok(bt)
}

/// A group's keys: its count, URLs, the model it serves (when the fleet serves several)
/// and engine.
fn group_keys(
    s: &mut Section,
    o: &mut Origins,
    g: &Group,
    multi_model: bool,
    min_context: &mut Option<i64>,
) -> Result<(), String> {
    s.put(o, "count", g.count.v, &g.count.from);
    if let Some(u) = &g.urls {
        let list: toml_edit::Array = u.v.iter().map(String::as_str).collect();
        s.put(o, "urls", list, &u.from);
    }
    if let Some(m) = g.engine.model.as_ref().filter(|_| multi_model) {
        let list: toml_edit::Array = std::iter::once(m.v.as_str()).collect();
        s.put(
            o,
            "serves",
            list,
            &format!("{}: the router keeps its endpoints for requests naming it", m.from),
        );
    }
    group_engine(s, o, g, min_context)
}

/// Without Helm engines, the fleet is the router's static backends (else one engine): one
/// group per model `--static-models` names, in order of first appearance, each with the
/// URLs listed for that model.
fn static_groups(imp: &mut Import, gpu: &str) {
    let (b, m) = (&imp.router.static_backends, &imp.router.static_models);
    let mut models: Vec<&String> = Vec::new();
    for x in m.iter().flat_map(|m| &m.v) {
        if !models.contains(&x) {
            models.push(x);
        }
    }
    if let (Some(b), Some(m), true) = (b, m, models.len() > 1) {
        let groups: Vec<Group> = models
            .iter()
            .enumerate()
            .map(|(k, model)| {
                let urls: Vec<String> =
                    b.v.iter()
                        .zip(&m.v)
                        .filter(|(_, x)| x == model)
                        .map(|(u, _)| u.clone())
                        .collect();
                let from = format!("{} URLs of {} in {} and {}", urls.len(), model, b.from, m.from);
                Group {
                    name: format!("model-{k}"),
                    count: src(urls.len() as i64, from.clone()),
                    urls: Some(src(urls, from)),
                    gpu: src(gpu.to_string(), "--gpu"),
                    engine: Engine {
                        model: Some(src((*model).clone(), m.from.clone())),
                        ..Engine::default()
                    },
                }
            })
            .collect();
        let interleaved = b.v.len() > 1
            && groups
                .iter()
                .flat_map(|g| &g.urls.as_ref().expect("set").v)
                .ne(b.v.iter());
        if interleaved {
            imp.notes.push(format!(
                "{} interleaves models: discovery lists each model's backends in their order, grouped by model",
                m.from
            ));
        }
        imp.groups = groups;
        return;
    }
    let (count, urls) = match b {
        Some(b) => (
            src(b.v.len() as i64, format!("{} URLs in {}", b.v.len(), b.from)),
            Some(b.clone()),
        ),
        None => (src(1, "one engine (no --static-backends or Helm replicas given)"), None),
    };
    let model = m
        .as_ref()
        .and_then(|m| m.v.first().map(|f| src(f.clone(), m.from.clone())));
    imp.groups.push(Group {
        name: "backend".into(),
        count,
        urls,
        gpu: src(gpu.to_string(), "--gpu"),
        engine: Engine {
            model,
            ..Engine::default()
        },
    });
}

/// The distinct models the imported groups serve, in group order.
fn served_models(imp: &Import) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for m in imp.groups.iter().filter_map(|g| g.engine.model.as_ref()) {
        if !out.contains(&m.v.as_str()) {
            out.push(&m.v);
        }
    }
    out
}

/// What a group's KV capacity came from (for a message naming the flags).
fn kv_origins(g: &Group) -> String {
    let e = &g.engine;
    let mut v: Vec<String> = Vec::new();
    if let Some(m) = &e.model {
        v.push(format!("model {}", m.from));
    }
    v.push(format!("GPU {} ({})", g.gpu.v, g.gpu.from));
    for f in [&e.tp, &e.block_size].into_iter().flatten() {
        v.push(f.from.clone());
    }
    if let Some(u) = &e.gpu_memory_utilization {
        v.push(u.from.clone());
    }
    if let Some(d) = &e.kv_cache_dtype {
        v.push(d.from.clone());
    }
    v.join(", ")
}

/// A group's engine keys: its profile, batch limits, blocks, KV capacity and context.
fn group_engine(s: &mut Section, o: &mut Origins, g: &Group, min_context: &mut Option<i64>) -> Result<(), String> {
    let profile = group_profile(s, o, g);
    group_batch(s, o, g);
    let kv = group_kv(s, o, g, profile.as_ref())?;
    group_context(s, g, kv, min_context)
}

/// The group's `profile` (its model on its GPU at its TP), or a note that the shipped
/// defaults stand in; the profile found, if any.
fn group_profile(s: &mut Section, o: &mut Origins, g: &Group) -> Option<crate::profiles::Profile> {
    let e = &g.engine;
    let tp = e.tp.as_ref().map_or(1, |t| t.v);
    let tp_from =
        e.tp.as_ref()
            .map_or("default --tensor-parallel-size 1".to_string(), |t| t.from.clone());
    let shape = e.model.as_ref().and_then(|m| crate::profiles::model_for(&m.v));
    let profile = shape.and_then(|sh| crate::profiles::find(&format!("{}/{}/tp{tp}", sh.name, g.gpu.v)).ok());
    match (&profile, &e.model) {
        (Some(p), Some(m)) => s.put(
            o,
            "profile",
            p.id.as_str(),
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
            s.note(&format!(
                "{what}: step time and KV capacity are the shipped defaults (Llama-3.1-8B on one H100);"
            ));
            s.note("set [backends.step_time] and kv_blocks for your model (see `sim profiles`).");
        }
    }
    profile
}

/// The group's scheduler limits, block size and prefix caching (vLLM's defaults for its GPU
/// where the flags leave them out).
fn group_batch(s: &mut Section, o: &mut Origins, g: &Group) {
    let e = &g.engine;
    let (d_tokens, d_seqs) = crate::profiles::GPUS
        .iter()
        .find(|x| x.name == g.gpu.v)
        .map_or((8192, 1024), crate::profiles::Gpu::vllm_batch_defaults);
    match &e.max_num_seqs {
        Some(v) => s.put(o, "max_num_seqs", v.v, &v.from),
        None => s.put(
            o,
            "max_num_seqs",
            i64::from(d_seqs),
            &format!("default --max-num-seqs for {}", g.gpu.v),
        ),
    }
    match &e.max_num_batched_tokens {
        Some(v) => s.put(o, "max_num_batched_tokens", v.v, &v.from),
        None => s.put(
            o,
            "max_num_batched_tokens",
            i64::from(d_tokens),
            &format!("default --max-num-batched-tokens for {}", g.gpu.v),
        ),
    }
    match &e.block_size {
        Some(v) => s.put(o, "block_size_tokens", v.v, &v.from),
        None => s.put(o, "block_size_tokens", 16i64, "default --block-size 16"),
    }
    match &e.prefix_caching {
        Some(v) => s.put(o, "prefix_caching", v.v, &v.from),
        None => s.put(o, "prefix_caching", true, "default (vLLM v1 enables prefix caching)"),
    }
}

/// The group's KV capacity in blocks: an explicit block count, else vLLM's derivation from
/// the profile's memory (`None` with neither).
fn group_kv(
    s: &mut Section,
    o: &mut Origins,
    g: &Group,
    profile: Option<&crate::profiles::Profile>,
) -> Result<Option<i64>, String> {
    let e = &g.engine;
    let block = e.block_size.as_ref().map_or(16, |b| b.v);
    let p = match (&e.kv_blocks, profile) {
        (Some(k), _) => {
            s.put(o, "kv_blocks", k.v, &k.from);
            return Ok(Some(k.v));
        }
        (None, None) => return Ok(None),
        (None, Some(p)) => p,
    };
    let util = e.gpu_memory_utilization.as_ref().map_or(0.9, |u| u.v);
    match &e.gpu_memory_utilization {
        Some(u) => s.put(o, "gpu_memory_utilization", util, &u.from),
        None => s.put(o, "gpu_memory_utilization", 0.9, "default --gpu-memory-utilization 0.9"),
    }
    let dtype_bytes = match e.kv_cache_dtype.as_ref().map(|d| d.v.as_str()) {
        Some(d) if d.starts_with("fp8") => 1,
        _ => 2,
    };
    if let Some(d) = &e.kv_cache_dtype {
        s.put(o, "kv_cache_dtype", d.v.as_str(), &d.from);
    }
    let block_u32 = u32::try_from(block).map_err(|_| format!("{}: the block size is too large", kv_origins(g)))?;
    let inputs = crate::profiles::KvInputs::for_profile(p, util, block_u32, dtype_bytes, 0.0);
    let blocks = crate::profiles::kv_blocks(&inputs).map_err(|m| format!("{}: {m} ({})", kv_origins(g), p.id))?;
    s.note(&format!(
        "kv_blocks derived as vLLM does: {blocks} blocks of {block} tokens ({} tokens) on {:.0} GiB; set",
        u64::from(blocks) * block as u64,
        p.gpu.memory_gib
    ));
    s.note("activation_memory_gib to the activation peak vLLM logs at start-up to refine it.");
    Ok(Some(i64::from(blocks)))
}

/// The group's `--max-model-len`, refused when it does not fit `kv` blocks (the shipped
/// default's when `None`), else noted as the workload's context cap (the smallest over groups
/// in `min_context`).
fn group_context(s: &mut Section, g: &Group, kv: Option<i64>, min_context: &mut Option<i64>) -> Result<(), String> {
    let Some(m) = &g.engine.max_model_len else {
        return Ok(());
    };
    let block = g.engine.block_size.as_ref().map_or(16, |b| b.v);
    let cap = kv.unwrap_or(29_205).saturating_mul(block);
    if m.v > cap {
        return Err(format!(
            "{}: {} does not fit the KV cache of group {} ({cap} tokens); vLLM refuses to start with this configuration",
            m.from,
            m.v,
            crate::quote::quote(&g.name)
        ));
    }
    s.note(&format!(
        "max_model_len {} ({}): the workload's max_context_tokens",
        m.v, m.from
    ));
    *min_context = Some(min_context.map_or(m.v, |c| c.min(m.v)));
    Ok(())
}

/// `[router]` and `[router.policy]`.
fn router(o: &mut Origins, r: &Router, carry: &mut String) -> Result<(toml_edit::Table, toml_edit::Table), String> {
    let mut s = Section::new("router");
    s.put(
        o,
        "engine_stats_interval_s",
        r.engine_stats_interval_s.v,
        &r.engine_stats_interval_s.from,
    );
    s.put(
        o,
        "request_stats_window_s",
        r.request_stats_window_s.v,
        &r.request_stats_window_s.from,
    );
    if let Some(n) = &r.replicas {
        s.put(o, "replicas", n.v, &n.from);
    }
    let router_t = s.finish(carry);
    let mut s = Section::new("router.policy");
    let logic = policy_kind(o, &mut s, r)?;
    for k in logic.keys {
        match (k.flag.and_then(|f| flag_value(r, f)), k.default) {
            (Some((v, from)), _) => match k.unit {
                Some(unit) => s.put(o, k.key, v, &format!("{from} ({unit})")),
                None => s.put(o, k.key, v, from),
            },
            (None, Some((v, why))) => s.put(o, k.key, logic_value(v), why),
            (None, None) => {}
        }
    }
    if let Some(k) = &r.session_key {
        s.note(&format!(
            "session key header {} ({}): workload groups send it",
            crate::quote::quote(&k.v),
            k.from
        ));
    }
    let policy_t = s.finish(carry);
    Ok((router_t, policy_t))
}

/// Writes the policy kind of the deployment's routing logic into `s`, with where it came
/// from; returns the logic it runs (one that needs a flag the deployment leaves out runs
/// the logic it names instead).
fn policy_kind(o: &mut Origins, s: &mut Section, r: &Router) -> Result<RoutingLogic, String> {
    let (kind, logic) = routing_logic(&r.routing_logic.v)?;
    match logic.needs {
        Some((flag, plain, why)) if flag_value(r, flag).is_none() => {
            let (plain, logic) = routing_logic(plain)?;
            let from = format!("{}; {why}, so plain {plain}", r.routing_logic.from);
            s.put(o, "kind", plain, &from);
            Ok(logic)
        }
        _ => {
            s.put(o, "kind", kind, &r.routing_logic.from);
            Ok(logic)
        }
    }
}

/// The value the deployment gives a policy's router flag and where it came from (an
/// infinite `--imbalanced-threshold`, upstream's default, gives none).
fn flag_value<'a>(r: &'a Router, flag: &str) -> Option<(toml_edit::Value, &'a str)> {
    let given = |v: toml_edit::Value, from: &'a String| Some((v, from.as_str()));
    match flag {
        "--prefix-min-match-length" => r
            .prefix_min_match_length
            .as_ref()
            .and_then(|p| given(p.v.into(), &p.from)),
        "--kv-aware-threshold" => r.kv_aware_threshold.as_ref().and_then(|p| given(p.v.into(), &p.from)),
        "--imbalanced-threshold" => r
            .imbalanced_threshold
            .as_ref()
            .filter(|t| t.v.is_finite())
            .and_then(|t| given(t.v.into(), &t.from)),
        _ => None,
    }
}

/// A routing logic's default as a TOML value.
fn logic_value(v: LogicValue) -> toml_edit::Value {
    match v {
        LogicValue::Int(i) => i.into(),
        LogicValue::Float(x) => x.into(),
        LogicValue::Str(s) => s.into(),
    }
}

/// `[workload]`: the trace, or the template groups.
fn workload(
    o: &mut Origins,
    imp: &Import,
    trace: Option<&str>,
    max_context: Option<i64>,
    carry: &mut String,
) -> toml_edit::Table {
    let n: i64 = imp.groups.iter().map(|g| g.count.v).fold(0i64, i64::saturating_add);
    let mut wl = toml_edit::Table::new();
    wl.set_implicit(true);
    let mut list = toml_edit::ArrayOfTables::new();
    match trace {
        Some(t) => {
            let mut s = Section::new("workload.traces[0]");
            s.put(o, "file", t, "--trace (relative to this file)");
            list.push(s.finish(carry));
            wl.insert("traces", toml_edit::Item::ArrayOfTables(list));
        }
        None => {
            if carry.is_empty() {
                carry.push('\n');
            }
            for line in template_intro(&imp.router) {
                carry.push_str(&comment(&line));
            }
            let pools = template_pools(imp, n);
            let groups = pools.iter().flat_map(|p| {
                template_groups(&imp.router, p.backends)
                    .into_iter()
                    .map(move |g| (p, g))
            });
            for (i, (pool, g)) in groups.enumerate() {
                let mut s = Section::new(&format!("workload.groups[{i}]"));
                for c in g.comments {
                    s.note(c);
                }
                let t = "template";
                pool_keys(&mut s, o, pool, g.name);
                s.put(o, "sessions", g.sessions, g.why_sessions);
                s.put(o, "arrival", g.arrival, g.why_arrival);
                s.put(o, "turns", g.turns, t);
                s.put(
                    o,
                    "system_prompt",
                    pool.suffixed(g.prompt_name),
                    "the shared prompt's name (groups with the same name share it)",
                );
                s.put(o, "system_prompt_tokens", g.system_prompt_tokens, g.why_prompt);
                let uniform = |min: i64, max: i64| {
                    inline(&[("dist", "uniform".into()), ("min", min.into()), ("max", max.into())])
                };
                s.put(o, "input_tokens", uniform(g.input.0, g.input.1), "new tokens per turn");
                s.put(o, "output_tokens", uniform(g.output.0, g.output.1), t);
                s.put(
                    o,
                    "think_time_s",
                    inline(&[("dist", "exponential".into()), ("mean", g.think_s.into())]),
                    g.why_think,
                );
                if let Some(m) = max_context {
                    s.put(o, "max_context_tokens", m, "--max-model-len");
                }
                list.push(s.finish(carry));
            }
            wl.insert("groups", toml_edit::Item::ArrayOfTables(list));
        }
    }
    wl
}

/// The backends one model's template traffic is sized for; `model`: the model and the
/// first group serving it, when the fleet serves several.
struct TemplatePool {
    model: Option<(String, String)>,
    backends: i64,
}

impl TemplatePool {
    /// `name`, suffixed with the pool's group when the fleet serves several models.
    fn suffixed(&self, name: &str) -> String {
        match &self.model {
            Some((_, group)) => format!("{name}-{group}"),
            None => name.to_string(),
        }
    }
}

/// A template group's `name` in `pool`, and its `model` when the fleet serves several.
fn pool_keys(s: &mut Section, o: &mut Origins, pool: &TemplatePool, name: &str) {
    s.put(o, "name", pool.suffixed(name), "template");
    if let Some((model, group)) = &pool.model {
        s.put(
            o,
            "model",
            model.as_str(),
            &format!("template: traffic for the `{group}` engines' model"),
        );
    }
}

/// One template pool per model the fleet serves when it serves several (each sized by
/// its own backends), else one for all `n` backends.
fn template_pools(imp: &Import, n: i64) -> Vec<TemplatePool> {
    let models = served_models(imp);
    if models.len() < 2 {
        return vec![TemplatePool {
            model: None,
            backends: n,
        }];
    }
    models
        .into_iter()
        .map(|m| {
            let serving = || {
                imp.groups
                    .iter()
                    .filter(|g| g.engine.model.as_ref().is_some_and(|x| x.v == m))
            };
            let first = serving().next().map_or_else(String::new, |g| g.name.clone());
            TemplatePool {
                model: Some((m.to_string(), first)),
                backends: serving().map(|g| g.count.v).fold(0i64, i64::saturating_add),
            }
        })
        .collect()
}

/// One group of the template workload.
struct TemplateGroup {
    comments: Vec<&'static str>,
    name: &'static str,
    sessions: i64,
    why_sessions: &'static str,
    arrival: toml_edit::Value,
    why_arrival: &'static str,
    turns: i64,
    prompt_name: &'static str,
    system_prompt_tokens: i64,
    why_prompt: &'static str,
    input: (i64, i64),
    output: (i64, i64),
    think_s: f64,
    why_think: &'static str,
}

/// What the template workload is for, by the imported router's failure class.
fn template_intro(r: &Router) -> Vec<String> {
    let kind = r.routing_logic.v.as_str();
    let class = match kind {
        k if k == prefixaware::Kind::KIND => match &r.prefix_min_match_length {
            Some(p) if p.v > 0 => format!(
                "prefix-aware routing with a {}-character minimum match: every agent whose prompt starts with the same system prompt (longer than the threshold) is sent to the backend that first served it, so an agent burst piles onto one backend while the others idle",
                p.v
            ),
            _ => "prefix-aware routing: requests that share a prompt prefix follow the backend that first served it, so an agent burst with one system prompt piles onto one backend while the others idle".to_string(),
        },
        k if k == kvaware::Kind::KIND || k == kvaware::LoadBalancedKind::KIND => "KV-aware routing: the longest cached prefix wins, so agents sharing a system prompt pile onto one backend (and chat requests take the fallback)".to_string(),
        k if k == session::Kind::KIND => "session routing: a session stays on the backend its key hashes to, so a few long agent sessions latch onto few backends whatever their load".to_string(),
        _ => format!("{kind} routing: requests are spread without regard to their size, so long agent turns and short chat turns queue behind each other"),
    };
    let mut out =
        vec!["Template workload (no --trace given): built to expose the imported router's failure class,".to_string()];
    // Wrapped at 90 characters.
    let mut line = String::new();
    for w in format!("{class}.").split(' ') {
        if !line.is_empty() && line.len() + 1 + w.len() > 90 {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    out.push(line);
    out.extend([
        "Watch idle_while_queued_s, request_jain_index and the hints of `sim run`; then replace these".to_string(),
        "groups with your traffic, e.g. [[workload.traces]] file = \"your-trace.jsonl\" (docs/your-fleet.md)."
            .to_string(),
    ]);
    out
}

/// The template's groups for `n` backends: an agent burst sharing one system prompt, and
/// a chat user with its own.
fn template_groups(r: &Router, n: i64) -> Vec<TemplateGroup> {
    let n = n.max(1);
    // Above a prefix-match threshold (characters; about 4 per token) so the shared system
    // prompt alone decides where a prefix-aware router sends the agents.
    let threshold_tokens = r.prefix_min_match_length.as_ref().map_or(0, |p| (p.v + 3) / 4);
    let prompt = (threshold_tokens + 1000).max(3000);
    vec![
        TemplateGroup {
            comments: vec![
                "Agents started together (a batch job, an eval run, a team's morning): one system prompt,",
                "long growing contexts, short tool pauses.",
            ],
            name: "agents",
            sessions: (4 * n).min(2048),
            why_sessions: "template: 4 agents per backend",
            arrival: inline(&[("kind", "burst".into()), ("at_s", 0i64.into())]),
            why_arrival: "template: all at once",
            turns: 12,
            prompt_name: "agent-system",
            system_prompt_tokens: prompt,
            why_prompt: "template: one shared system prompt, above any prefix-match threshold",
            input: (500, 2500),
            output: (100, 600),
            think_s: 2.0,
            why_think: "template: tool calls between turns",
        },
        TemplateGroup {
            comments: vec!["A chat user arriving meanwhile, with its own short system prompt."],
            name: "chat",
            sessions: (2 * n).min(1024),
            why_sessions: "template: 2 chat sessions per backend",
            arrival: inline(&[("kind", "poisson".into()), ("rate_per_s", 0.5.into())]),
            why_arrival: "template: one new chat every 2 s",
            turns: 4,
            prompt_name: "chat-system",
            system_prompt_tokens: 300,
            why_prompt: "template: a different, short system prompt",
            input: (50, 400),
            output: (50, 300),
            think_s: 10.0,
            why_think: "template: a person reading and typing",
        },
    ]
}

/// The message of a scenario refusing an imported value: the flag or key it came from.
fn refused(e: &crate::scenario::ScenarioError, origins: &Origins) -> String {
    let exact = origins.iter().rev().find(|(p, _)| *p == e.path);
    let near = || {
        origins
            .iter()
            .rev()
            .filter(|(p, _)| !p.is_empty() && (e.path.starts_with(p.as_str()) || p.starts_with(e.path.as_str())))
            .max_by_key(|(p, _)| p.len())
    };
    match exact.or_else(near) {
        Some((path, from)) => format!("{from}: {} (the scenario's {path} refuses it)", e.message),
        None => format!(
            "the imported scenario is refused at {}: {} (no flag or key given sets it; please report)",
            if e.path.is_empty() {
                "its top level"
            } else {
                e.path.as_str()
            },
            e.message
        ),
    }
}

#[cfg(test)]
mod tests;
