//! `[backends]`: the fleet. Either one table of N identical backends (the original form,
//! kept as one unnamed group so its outputs stay byte-identical) or `[[backends.groups]]`,
//! each group with its own count, engine flags, profile or step-time coefficients and KV
//! capacity (a block count, or the memory inputs vLLM derives it from). Discovery order is
//! group order, then index within the group.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{FieldError, Res, count, from_value, secs};
use crate::profiles::{self, KvInputs, Profile};
use fleetsim_core::backend::Label;
use fleetsim_core::backend::perf::StepTimeModel;
use fleetsim_core::backend::vllm::VllmConfig;
use fleetsim_core::sim::BackendModel;
use fleetsim_core::time::SimDuration;

/// Most backends a fleet may have.
const MAX_BACKENDS: u32 = 4096;

/// `[backends]` keys shared by every group.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SharedFile {
    /// `"vllm"` (default) or `"queueing"`, for every group.
    #[serde(default = "default_model")]
    model: String,
    /// Delay between engine state and the value `/metrics` serves (default 0).
    metrics_lag_s: Option<f64>,
    /// Backend groups, in discovery order (instead of one group's keys on `[backends]`).
    groups: Option<Vec<GroupFile>>,
}

fn default_model() -> String {
    "vllm".into()
}

/// Keys of `[backends]` that are not one group's.
const SHARED_KEYS: [&str; 3] = ["model", "metrics_lag_s", "groups"];

/// JSON Schema of `[backends]`: the shared keys and one group's keys in one table, as
/// [`validate`] splits it (the reference and editors see every key `[backends]` accepts).
pub(super) fn schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut all = SharedFile::json_schema(generator);
    let group = GroupFile::json_schema(generator);
    let more = group
        .get("properties")
        .and_then(|p| p.as_object())
        .cloned()
        .unwrap_or_default();
    if let Some(props) = all.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.extend(more);
    }
    all
}

/// `[backends]`, split.
struct Backends {
    top: SharedFile,
    single: GroupFile,
}

/// One group: `[[backends.groups]]`, or the keys of a single `[backends]` table.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "BackendGroupFile")]
pub struct GroupFile {
    /// Group name (required in `[[backends.groups]]`): backends are named `<name>-<i>`.
    pub name: Option<String>,
    /// Number of backends.
    pub count: Option<i64>,
    /// Explicit endpoint URLs, in discovery order (default `http://<name>-<i>:8000`).
    pub urls: Option<Vec<String>>,
    /// Model names the group's backends serve (vLLM's `--served-model-name`, the router's
    /// `--static-models` entries): a request naming a model (`model` of a workload group,
    /// a trace's model column) goes only to backends serving it. Default: none named,
    /// the backends serve every request.
    pub serves: Option<Vec<String>>,
    /// `<model>/<gpu>/tp<N>` (see `sim profiles`): step time and model shape; or
    /// `file:PATH`, a profile `sim calibrate` wrote (relative to the scenario's folder):
    /// step time and the measured engine's flags and KV blocks; or `auto`: the physics
    /// model for the group's `model` on its `gpu` at `tp` (and `dp`).
    pub profile: Option<String>,
    /// With `profile = "auto"`: the model served (`sim profiles --models`, or a Hugging
    /// Face name; on a single `[backends]` table, `model` says it when it is not `vllm`
    /// or `queueing`).
    pub model: Option<String>,
    /// With `profile = "auto"`: the GPU (`sim profiles --gpus`).
    pub gpu: Option<String>,
    /// With `profile = "auto"`: tensor-parallel GPUs per backend (default 1).
    pub tp: Option<i64>,
    /// With `profile = "auto"`: data-parallel engines sharing a MoE model's experts
    /// (default 1; each engine is one backend of `count`).
    pub dp: Option<i64>,
    /// vLLM `--max-num-seqs` (default: `vllm serve`'s for the profile's GPU, else 1024).
    pub max_num_seqs: Option<i64>,
    /// vLLM `--max-num-batched-tokens` (default: `vllm serve`'s for the GPU, else 8192).
    pub max_num_batched_tokens: Option<i64>,
    /// Usable KV blocks (default: derived from the profile's memory, else 29,205).
    pub kv_blocks: Option<i64>,
    /// GPU memory, GiB (default: the profile's GPU).
    pub gpu_memory_gib: Option<f64>,
    /// vLLM `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: Option<f64>,
    /// Activation peak and non-torch memory per GPU, GiB (default 0; vLLM logs it).
    pub activation_memory_gib: Option<f64>,
    /// vLLM `--kv-cache-dtype`: `auto` (the model's bf16), `fp8`, `fp8_e4m3`, `fp8_e5m2`.
    pub kv_cache_dtype: Option<String>,
    /// Tokens per KV block (default 16).
    pub block_size_tokens: Option<i64>,
    /// Automatic prefix caching (default on).
    pub prefix_caching: Option<bool>,
    /// vLLM's `scheduler_reserve_full_isl`: admit a request only when its whole prompt's
    /// KV blocks are free (vLLM 0.19's default; default here: the profile file's, else off).
    pub reserve_full_isl: Option<bool>,
    /// Step-time model coefficients (override the profile's).
    pub step_time: Option<StepTimeFile>,
    /// Servers per backend (queueing model only).
    pub slots: Option<i64>,
}

/// `[backends.step_time]`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepTimeFile {
    /// µs per step.
    pub beta0_us: Option<f64>,
    /// µs per prefill token.
    pub beta1_us: Option<f64>,
    /// µs per decode token.
    pub beta2_us: Option<f64>,
    /// µs per token of context the step's requests attend to (default 0, or the profile
    /// file's).
    pub beta3_us: Option<f64>,
}

/// The validated fleet.
pub(super) struct Fleet {
    /// Backend names and URLs, in discovery order.
    pub names: Vec<(String, String)>,
    /// One model per backend.
    pub models: Vec<BackendModel>,
    /// Group and profile per backend (empty strings for a single unnamed table).
    pub labels: Vec<Label>,
    /// Gauge lag.
    pub gauge_lag: SimDuration,
    /// The most tokens one request may hold on every backend (vLLM fleets).
    pub context_limit: Option<u32>,
    /// Tokens per KV block (one value: the router hashes blocks of one size).
    pub block_size_tokens: u32,
    /// The largest group's KV blocks (what a policy sizes a per-pod index from).
    pub kv_blocks: u32,
}

impl GroupFile {
    fn vllm_only(&self) -> [(&'static str, bool); 16] {
        [
            ("profile", self.profile.is_some()),
            ("model", self.model.is_some()),
            ("gpu", self.gpu.is_some()),
            ("tp", self.tp.is_some()),
            ("dp", self.dp.is_some()),
            ("max_num_seqs", self.max_num_seqs.is_some()),
            ("max_num_batched_tokens", self.max_num_batched_tokens.is_some()),
            ("kv_blocks", self.kv_blocks.is_some()),
            ("gpu_memory_gib", self.gpu_memory_gib.is_some()),
            ("gpu_memory_utilization", self.gpu_memory_utilization.is_some()),
            ("activation_memory_gib", self.activation_memory_gib.is_some()),
            ("kv_cache_dtype", self.kv_cache_dtype.is_some()),
            ("block_size_tokens", self.block_size_tokens.is_some()),
            ("prefix_caching", self.prefix_caching.is_some()),
            ("step_time", self.step_time.is_some()),
            ("reserve_full_isl", self.reserve_full_isl.is_some()),
        ]
    }

    /// Every key of a group, in the order errors name them, and whether it is set.
    fn keys(&self) -> impl Iterator<Item = (&'static str, bool)> {
        [
            ("name", self.name.is_some()),
            ("count", self.count.is_some()),
            ("urls", self.urls.is_some()),
            ("serves", self.serves.is_some()),
            ("slots", self.slots.is_some()),
        ]
        .into_iter()
        .chain(self.vllm_only())
    }

    fn is_empty(&self) -> bool {
        self.keys().all(|(_, set)| !set)
    }

    /// The first key set (for an error message).
    fn first_key(&self) -> &'static str {
        self.keys().find(|(_, set)| *set).map_or("count", |(k, _)| k)
    }

    /// The memory inputs KV blocks are derived from, and whether each is set.
    fn memory_keys(&self) -> [(&'static str, bool); 4] {
        [
            ("gpu_memory_gib", self.gpu_memory_gib.is_some()),
            ("gpu_memory_utilization", self.gpu_memory_utilization.is_some()),
            ("activation_memory_gib", self.activation_memory_gib.is_some()),
            ("kv_cache_dtype", self.kv_cache_dtype.is_some()),
        ]
    }

    /// The first memory input set.
    fn first_memory_key(&self) -> Option<&'static str> {
        self.memory_keys().into_iter().find(|(_, set)| *set).map(|(k, _)| k)
    }
}

/// Validates `[backends]` (the raw table: its shared keys, then one group's keys or
/// `[[backends.groups]]`).
pub(super) fn validate(raw: &toml::Value) -> Res<Fleet> {
    let b = split(raw)?;
    let gauge_lag = secs(b.top.metrics_lag_s.unwrap_or(0.0), "backends.metrics_lag_s", true)?;
    if !matches!(b.top.model.as_str(), "vllm" | "queueing") {
        return Err(FieldError::new(
            "backends.model",
            format!("unknown model `{}`; expected `vllm` or `queueing`", b.top.model),
        ));
    }
    let list = b.groups()?;
    let named = b.top.groups.is_some();
    let mut fleet = Fleet {
        names: Vec::new(),
        models: Vec::new(),
        labels: Vec::new(),
        gauge_lag,
        context_limit: None,
        block_size_tokens: 0,
        kv_blocks: 0,
    };
    let mut seen_names = std::collections::BTreeSet::new();
    let mut seen_urls = std::collections::BTreeMap::new();
    for (gi, (path, g)) in list.iter().enumerate() {
        let at = |k: &str| format!("{path}.{k}");
        let name = group_name(g, named, path, &mut seen_names)?;
        let n = group_count(g, named, path, fleet.names.len())?;
        let first = fleet.names.len();
        let urls = group_urls(g, &name, n, named, first, &at)?;
        for (i, url) in urls.iter().enumerate() {
            if let Some(prev) = seen_urls.insert(url.clone(), gi) {
                let also = if prev == gi {
                    String::new()
                } else {
                    format!(" (also in {})", list[prev].0)
                };
                return Err(FieldError::new(
                    format!("{}[{i}]", at("urls")),
                    format!("duplicate URL `{url}`{also}"),
                ));
            }
        }
        let (profile, file_profile) = group_profile(g, &at)?;
        let model = if b.top.model == "vllm" {
            if g.slots.is_some() {
                return Err(FieldError::new(
                    at("slots"),
                    "only applies to model = \"queueing\"; vLLM backends use max_num_seqs",
                ));
            }
            BackendModel::Vllm(engine(g, profile.as_ref(), file_profile.as_ref(), &at)?)
        } else {
            queueing_model(g, path, &at)?
        };
        let block = g
            .block_size_tokens
            .unwrap_or(
                file_profile
                    .as_ref()
                    .map_or(16, |f| i64::from(f.engine.block_size_tokens)),
            )
            .clamp(1, i64::from(u32::MAX)) as u32;
        fleet.set_block_size(gi, block, &at)?;
        fleet.size_kv(&model, g);
        let label = Label {
            group: if named { name.clone() } else { String::new() },
            profile: match (&profile, &file_profile) {
                (Some(p), _) => p.id.clone(),
                (None, Some(f)) => format!("{}{}", profiles::file::FILE_PREFIX, f.profile.name),
                (None, None) => String::new(),
            },
            serves: served_names(g.serves.as_deref(), &at("serves"))?,
        };
        fleet.push_group(&name, named, urls, &model, &label);
    }
    Ok(fleet)
}

/// A group's `serves` at `path`: distinct model names, each non-empty and free of
/// control characters (an empty list is refused: a group serving nothing is a mistake).
fn served_names(list: Option<&[String]>, path: &str) -> Res<Vec<String>> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if list.is_empty() {
        return Err(FieldError::new(
            path,
            "lists no model; leave it out to serve every request",
        ));
    }
    for (i, m) in list.iter().enumerate() {
        if m.trim().is_empty() || m.chars().any(char::is_control) {
            return Err(FieldError::new(
                format!("{path}[{i}]"),
                "a model name: non-empty, without control characters",
            ));
        }
        if list[..i].contains(m) {
            return Err(FieldError::new(
                format!("{path}[{i}]"),
                format!("{} is listed twice", crate::quote::quote(m)),
            ));
        }
    }
    Ok(list.to_vec())
}

/// `[backends]` split into its shared keys and one group's keys.
fn split(raw: &toml::Value) -> Res<Backends> {
    let toml::Value::Table(all) = raw else {
        return Err(FieldError::new("backends", "must be a table"));
    };
    let (shared, single): (toml::Table, toml::Table) = all
        .clone()
        .into_iter()
        .partition(|(k, _)| SHARED_KEYS.contains(&k.as_str()));
    let mut top: SharedFile = from_value(&toml::Value::Table(shared), "backends")?;
    let mut single: GroupFile = from_value(&toml::Value::Table(single), "backends")?;
    // A single table's `model` names the engine kind, or with `profile = "auto"` the
    // model served by vLLM engines.
    if top.groups.is_none()
        && !matches!(top.model.as_str(), "vllm" | "queueing")
        && single
            .profile
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case("auto"))
    {
        single.model = Some(std::mem::replace(&mut top.model, "vllm".into()));
    }
    Ok(Backends { top, single })
}

impl Backends {
    /// The groups with their key paths: the single table's, or `[[backends.groups]]`.
    fn groups(&self) -> Res<Vec<(String, &GroupFile)>> {
        let Some(groups) = &self.top.groups else {
            if self.single.name.is_some() {
                return Err(FieldError::new(
                    "backends.name",
                    "names a group; use [[backends.groups]] for named groups",
                ));
            }
            return Ok(vec![("backends".to_string(), &self.single)]);
        };
        if !self.single.is_empty() {
            return Err(FieldError::new(
                format!("backends.{}", self.single.first_key()),
                "give engine keys either on [backends] (one group) or in each [[backends.groups]], not both",
            ));
        }
        if groups.is_empty() {
            return Err(FieldError::new("backends.groups", "needs at least one group"));
        }
        Ok(groups
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("backends.groups[{i}]"), g))
            .collect())
    }
}

/// A group's name: `backend` for the single table; a named group's, unique among `seen`.
fn group_name(g: &GroupFile, named: bool, path: &str, seen: &mut std::collections::BTreeSet<String>) -> Res<String> {
    match (&g.name, named) {
        (Some(n), true) => {
            if n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    format!("`{n}` must be non-empty letters, digits, `-` or `_` (it names backends `{n}-0`, ...)"),
                ));
            }
            if !seen.insert(n.clone()) {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    format!("duplicate group name `{n}`"),
                ));
            }
            Ok(n.clone())
        }
        (None, true) => Err(FieldError::new(path, "needs `name`")),
        (_, false) => Ok("backend".to_string()),
    }
}

/// A group's backend count, the fleet's `before` backends plus these at most [`MAX_BACKENDS`].
fn group_count(g: &GroupFile, named: bool, path: &str, before: usize) -> Res<u32> {
    let at = format!("{path}.count");
    let n = count(g.count.ok_or_else(|| FieldError::new(path, "needs `count`"))?, &at, 1)?;
    let total = before as u64 + u64::from(n);
    if total > u64::from(MAX_BACKENDS) {
        let what = if named { "the groups add up to" } else { "" };
        return Err(FieldError::new(
            at,
            format!("{what}{total} backends is above the supported {MAX_BACKENDS}")
                .trim_start()
                .to_string(),
        ));
    }
    Ok(n)
}

/// A group's `n` endpoint URLs: as listed, or `http://<name>-<i>:8000` (the single table
/// keeps its global numbering from `first`).
fn group_urls(
    g: &GroupFile,
    name: &str,
    n: u32,
    named: bool,
    first: usize,
    at: &dyn Fn(&str) -> String,
) -> Res<Vec<String>> {
    match &g.urls {
        Some(u) if u.len() != n as usize => Err(FieldError::new(
            at("urls"),
            format!("lists {} URLs but {} = {n}", u.len(), at("count")),
        )),
        Some(u) => Ok(u.clone()),
        None => Ok((0..n as usize)
            .map(|i| format!("http://{name}-{}:8000", if named { i } else { first + i }))
            .collect()),
    }
}

/// A group's `profile`: a shipped one, `auto` (derived from its `model`, `gpu`, `tp` and
/// `dp`, which apply to nothing else), or a `file:PATH` profile read from its file.
fn group_profile(
    g: &GroupFile,
    at: &dyn Fn(&str) -> String,
) -> Res<(Option<Profile>, Option<profiles::file::ProfileFile>)> {
    let (profile, file) = match &g.profile {
        Some(id) if id.starts_with(profiles::file::FILE_PREFIX) => {
            let path = &id[profiles::file::FILE_PREFIX.len()..];
            let f = profiles::file::ProfileFile::read(std::path::Path::new(path))
                .map_err(|m| FieldError::new(at("profile"), m))?;
            (None, Some(f))
        }
        Some(id) if id.eq_ignore_ascii_case("auto") => (Some(auto_profile(g, at)?), None),
        Some(id) => (
            Some(profiles::find(id).map_err(|m| FieldError::new(at("profile"), m))?),
            None,
        ),
        None => (None, None),
    };
    if !is_auto(profile.as_ref())
        && let Some((k, _)) = g.vllm_only()[1..5].iter().find(|(_, set)| *set)
    {
        return Err(FieldError::new(at(k), "only applies with profile = \"auto\""));
    }
    Ok((profile, file))
}

/// True for a profile derived by the physics model (`profile = "auto"`).
fn is_auto(profile: Option<&Profile>) -> bool {
    profile.is_some_and(|p| matches!(p.source, profiles::Source::Physics(_)))
}

/// The auto profile of a group: its `model` on its `gpu` at `tp` (and `dp`), priced by the
/// physics model with the shipped coefficients.
fn auto_profile(g: &GroupFile, at: &dyn Fn(&str) -> String) -> Res<Profile> {
    // The model: `model`, else the one name the group serves (a trace's model name).
    let (name, key) = match (g.model.as_deref(), g.serves.as_deref()) {
        (Some(m), _) => (m, "model"),
        (None, Some([one])) => (one.as_str(), "serves"),
        _ => {
            return Err(FieldError::new(
                at("model"),
                "profile = \"auto\" needs the model served: `model`, or one name in `serves` (`sim profiles --models`)",
            ));
        }
    };
    let (model, dtype) = profiles::models::resolve(name).ok_or_else(|| {
        let from = if key == "serves" {
            " (from `serves`; set `model` to a known shape, or give the group another profile)"
        } else {
            ""
        };
        FieldError::new(
            at("model"),
            format!(
                "unknown model {}{from} (`sim profiles --models` lists the known shapes)",
                crate::quote::quote(name)
            ),
        )
    })?;
    let gname = g
        .gpu
        .as_deref()
        .ok_or_else(|| FieldError::new(at("gpu"), "profile = \"auto\" needs the GPU (`sim profiles --gpus`)"))?;
    let gpu = profiles::gpus::resolve(gname).ok_or_else(|| {
        FieldError::new(
            at("gpu"),
            format!(
                "unknown GPU {} (`sim profiles --gpus` lists the known datasheets)",
                crate::quote::quote(gname)
            ),
        )
    })?;
    let tp = count(g.tp.unwrap_or(1), &at("tp"), 1)?;
    let dp = count(g.dp.unwrap_or(1), &at("dp"), 1)?;
    let kv_dtype_bytes = match g.kv_cache_dtype.as_deref() {
        Some(d) if d.starts_with("fp8") => 1,
        _ => 2,
    };
    Ok(Profile::auto(profiles::auto::Deployment {
        model,
        dtype,
        gpu,
        parallel: profiles::auto::Parallel { tp, dp },
        kv_dtype_bytes,
        // Current vLLM schedules asynchronously (the default from 0.19).
        async_scheduling: true,
    }))
}

/// A queueing group: its `slots`, and none of the vLLM keys.
fn queueing_model(g: &GroupFile, path: &str, at: &dyn Fn(&str) -> String) -> Res<BackendModel> {
    if let Some((k, _)) = g.vllm_only().into_iter().find(|(_, set)| *set) {
        return Err(FieldError::new(at(k), "only applies to model = \"vllm\""));
    }
    let slots = count(
        g.slots
            .ok_or_else(|| FieldError::new(path, "model = \"queueing\" needs `slots`"))?,
        &at("slots"),
        1,
    )?;
    Ok(BackendModel::Queueing { slots })
}

impl Fleet {
    /// Extends the fleet to `n` backends like its last one (an autoscaler's pool): numbered
    /// on across the single table (`backend-<i>`), or within the last group (`<name>-<i>`).
    pub(super) fn extend_to(&mut self, n: u32) {
        let (Some(model), Some(label)) = (self.models.last().cloned(), self.labels.last().cloned()) else {
            return;
        };
        while self.names.len() < n as usize {
            let name = if label.group.is_empty() {
                format!("backend-{}", self.names.len())
            } else {
                let k = self.labels.iter().filter(|l| l.group == label.group).count();
                format!("{}-{k}", label.group)
            };
            let url = format!("http://{name}:8000");
            self.names.push((name, url));
            self.models.push(model.clone());
            self.labels.push(label.clone());
        }
    }

    /// Takes group `gi`'s block size: the first group's, which every other must match.
    fn set_block_size(&mut self, gi: usize, block: u32, at: &dyn Fn(&str) -> String) -> Res<()> {
        if gi == 0 {
            self.block_size_tokens = block;
        } else if block != self.block_size_tokens {
            return Err(FieldError::new(
                at("block_size_tokens"),
                format!(
                    "is {block} but the first group's is {}; the router hashes prefixes in blocks of one size",
                    self.block_size_tokens
                ),
            ));
        }
        Ok(())
    }

    /// Counts a group's engine in the fleet's context limit and largest KV pool.
    fn size_kv(&mut self, model: &BackendModel, g: &GroupFile) {
        if let BackendModel::Vllm(cfg) = model {
            let limit = (u64::from(cfg.kv_blocks) * u64::from(cfg.block_size_tokens)).min(u64::from(u32::MAX)) as u32;
            self.context_limit = Some(self.context_limit.map_or(limit, |l| l.min(limit)));
            self.kv_blocks = self.kv_blocks.max(cfg.kv_blocks);
        } else {
            self.kv_blocks = self
                .kv_blocks
                .max(g.kv_blocks.unwrap_or(29_205).clamp(1, i64::from(u32::MAX)) as u32);
        }
    }

    /// Adds a group's backends, one per URL: `<name>-<i>`, or `backend-<i>` numbered across
    /// the single table.
    fn push_group(&mut self, name: &str, named: bool, urls: Vec<String>, model: &BackendModel, label: &Label) {
        let first = self.names.len();
        for (i, url) in urls.into_iter().enumerate() {
            let bname = if named {
                format!("{name}-{i}")
            } else {
                format!("backend-{}", first + i)
            };
            self.names.push((bname, url));
            self.models.push(model.clone());
            self.labels.push(label.clone());
        }
    }
}

/// Makes every `profile = "file:PATH"` of `[backends]` and its groups absolute, against
/// the scenario's folder (as trace files are).
pub(super) fn resolve_profile_files(table: &mut toml::Table, base: &std::path::Path) {
    let Some(toml::Value::Table(b)) = table.get_mut("backends") else {
        return;
    };
    let fix = |v: &mut toml::Value| {
        if let toml::Value::String(s) = v
            && let Some(rest) = s.strip_prefix(profiles::file::FILE_PREFIX)
        {
            let p = std::path::Path::new(rest);
            let joined = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
            let abs = std::fs::canonicalize(&joined)
                .or_else(|_| std::path::absolute(&joined))
                .unwrap_or(joined);
            *s = format!("{}{}", profiles::file::FILE_PREFIX, abs.display());
        }
    };
    if let Some(v) = b.get_mut("profile") {
        fix(v);
    }
    if let Some(toml::Value::Array(groups)) = b.get_mut("groups") {
        for g in groups {
            if let Some(v) = g.get_mut("profile") {
                fix(v);
            }
        }
    }
}

/// A vLLM group's engine: explicit keys, else the profile, else the shipped defaults.
fn engine(
    g: &GroupFile,
    profile: Option<&Profile>,
    file: Option<&profiles::file::ProfileFile>,
    at: &dyn Fn(&str) -> String,
) -> Res<VllmConfig> {
    let step_time = step_time(g, profile, file, at)?;
    let block_size_tokens = count(
        g.block_size_tokens
            .unwrap_or(file.map_or(16, |f| i64::from(f.engine.block_size_tokens))),
        &at("block_size_tokens"),
        1,
    )?;
    // `vllm serve` defaults for the profile's GPU; the H100-class ones without a profile.
    let (d_tokens, d_seqs) = match (profile, file) {
        (Some(p), _) => p.gpu.vllm_batch_defaults(),
        (None, Some(f)) => (f.engine.max_num_batched_tokens, f.engine.max_num_seqs),
        (None, None) => (8192, 1024),
    };
    let max_num_seqs = count(g.max_num_seqs.unwrap_or(i64::from(d_seqs)), &at("max_num_seqs"), 1)?;
    let max_num_batched_tokens = count(
        g.max_num_batched_tokens.unwrap_or(i64::from(d_tokens)),
        &at("max_num_batched_tokens"),
        1,
    )?;
    let batch = (max_num_batched_tokens, max_num_seqs);
    let kv_blocks = kv_blocks(g, profile, file, block_size_tokens, batch, at)?;
    Ok(VllmConfig {
        max_num_seqs,
        max_num_batched_tokens,
        kv_blocks,
        block_size_tokens,
        prefix_caching: g.prefix_caching.unwrap_or(file.is_none_or(|f| f.engine.prefix_caching)),
        step_time,
        reserve_full_isl: g
            .reserve_full_isl
            .unwrap_or(file.is_some_and(|f| f.engine.reserve_full_isl)),
    })
}

/// `step_time`: each coefficient given, else the profile's (shipped or file), else the
/// default model's.
fn step_time(
    g: &GroupFile,
    profile: Option<&Profile>,
    file: Option<&profiles::file::ProfileFile>,
    at: &dyn Fn(&str) -> String,
) -> Res<StepTimeModel> {
    let st = g.step_time.as_ref();
    let coef = |v: Option<f64>, d: f64, k: &str| -> Res<f64> {
        let x = v.unwrap_or(d);
        if !x.is_finite() || !(0.0..=1e6).contains(&x) {
            return Err(FieldError::new(
                at(&format!("step_time.{k}")),
                format!("must be between 0 and 1e6 µs, got {x}"),
            ));
        }
        Ok(x)
    };
    if is_auto(profile) && st.is_some() {
        return Err(FieldError::new(
            at("step_time"),
            "profile = \"auto\" prices steps with the physics model; step_time does not apply",
        ));
    }
    let def = match (profile, file) {
        (Some(p), _) => p.step_time.clone(),
        (None, Some(f)) => f.step_time_model(),
        (None, None) => StepTimeModel::default(),
    };
    Ok(StepTimeModel {
        beta0_us: coef(st.and_then(|s| s.beta0_us), def.beta0_us, "beta0_us")?,
        beta1_us: coef(st.and_then(|s| s.beta1_us), def.beta1_us, "beta1_us")?,
        beta2_us: coef(st.and_then(|s| s.beta2_us), def.beta2_us, "beta2_us")?,
        beta3_us: coef(st.and_then(|s| s.beta3_us), def.beta3_us, "beta3_us")?,
        physics: def.physics,
    })
}

/// A vLLM group's KV blocks: `kv_blocks` as given; else a profile file's measured count;
/// else derived from the shipped profile's memory; else the default. The memory inputs go
/// with a shipped profile alone.
fn kv_blocks(
    g: &GroupFile,
    profile: Option<&Profile>,
    file: Option<&profiles::file::ProfileFile>,
    block_size_tokens: u32,
    batch: (u32, u32),
    at: &dyn Fn(&str) -> String,
) -> Res<u32> {
    let refuse_memory = |why: &str| match g.first_memory_key() {
        Some(key) => Err(FieldError::new(at(key), why)),
        None => Ok(()),
    };
    let kv_blocks = match (g.kv_blocks, profile) {
        (None, None) if file.is_some() => {
            refuse_memory("a profile file carries its measured kv_blocks; give kv_blocks to change it")?;
            file.map_or(1, |f| f.engine.kv_blocks)
        }
        (Some(k), _) => {
            refuse_memory("kv_blocks is given, so the memory inputs would be ignored; give one or the other")?;
            count(k, &at("kv_blocks"), 1)?
        }
        (None, Some(p)) => kv_blocks_from_memory(g, p, block_size_tokens, batch, at)?,
        (None, None) => {
            refuse_memory(
                "deriving KV blocks from memory needs a `profile` (the model's layers, KV heads and weights)",
            )?;
            29_205
        }
    };
    if kv_blocks >= fleetsim_core::backend::MAX_KV_BLOCKS {
        return Err(FieldError::new(
            at("kv_blocks"),
            format!("too large (at most {})", fleetsim_core::backend::MAX_KV_BLOCKS - 1),
        ));
    }
    Ok(kv_blocks)
}

/// The KV blocks vLLM derives from the GPU's memory for profile `p` and the group's memory
/// inputs; an error names the input it is about.
fn kv_blocks_from_memory(
    g: &GroupFile,
    p: &Profile,
    block_size_tokens: u32,
    (max_num_batched_tokens, max_num_seqs): (u32, u32),
    at: &dyn Fn(&str) -> String,
) -> Res<u32> {
    let dtype_bytes = match g.kv_cache_dtype.as_deref().unwrap_or("auto") {
        "auto" | "bfloat16" | "float16" | "bf16" | "fp16" => 2,
        "fp8" | "fp8_e4m3" | "fp8_e5m2" => 1,
        other => {
            return Err(FieldError::new(
                at("kv_cache_dtype"),
                format!(
                    "unknown KV cache dtype {}; expected auto, fp8, fp8_e4m3 or fp8_e5m2",
                    crate::quote::quote(other)
                ),
            ));
        }
    };
    let mut k = KvInputs::for_profile(
        p,
        g.gpu_memory_utilization.unwrap_or(0.9),
        block_size_tokens,
        dtype_bytes,
        // An auto profile sets aside the physics model's reserve and the activation peak
        // vLLM profiles at start-up for this batch; the fitted profiles keep BLIS's upper
        // bound (0).
        g.activation_memory_gib.unwrap_or(if is_auto(Some(p)) {
            profiles::auto::SHIPPED.reserve_gib + p.model.profile_peak_gib(p.tp, max_num_batched_tokens, max_num_seqs)
        } else {
            0.0
        }),
    );
    if let Some(m) = g.gpu_memory_gib {
        k.gpu_memory_gib = m;
    }
    profiles::kv_blocks(&k).map_err(|m| {
        // The input the message is about, else the first memory key given.
        let key = g
            .memory_keys()
            .into_iter()
            .find(|(k, set)| *set && m.starts_with(k))
            .map(|(k, _)| k)
            .or_else(|| g.first_memory_key())
            .unwrap_or("profile");
        FieldError::new(at(key), format!("{m} ({})", p.id))
    })
}
