//! Scenario files: TOML in, a validated [`Scenario`] out, every error one line naming the
//! file, line and key path. A file with several mistakes reports all of them at once, in
//! file order (see [`Source::scenario`]).
//!
//! Owns: the file format and its validation. Layers, in data-flow order:
//! * `source.rs`: read and parse the file, apply `--set` overrides (`overrides.rs`), set the
//!   tool tables (`[sweep]`, `[expect]`) aside, locate errors at their line (`locate.rs`);
//! * `schema.rs`: the raw file as serde structs (`deny_unknown_fields`), with the defaults
//!   of its keys in `defaults.rs`;
//! * validation per section: `backends.rs` (the fleet), `router.rs` (`[router.policy]`,
//!   through the core's policy registry), `workload.rs` (arrivals), `traces.rs` (replayed traces), `events.rs`
//!   (router and fleet events, client retries, faults), composed by `validate.rs`, with the
//!   value helpers in `values.rs` and `counts.rs`.
//!
//! May not see: the simulation's state or results; it only builds configs
//! (`SimConfig`, `GroupConfig`, `TraceGroupConfig`) that the simulation consumes.
//!
//! Invariant: a value is validated or refused, never silently shifted; a scenario that
//! validates can be run (its memory is preflighted), and the same text and overrides give
//! the same [`Scenario`].

mod autoscaler;
mod backends;
mod counts;
mod defaults;
mod events;
mod locate;
mod overrides;
mod router;
mod schema;
mod slo;
mod source;
pub mod suggest;
mod traces;
mod validate;
mod values;
mod workload;

use fleetsim_core::sim::SimConfig;
use fleetsim_core::workload::{GroupConfig, NO_MODEL, Workload, generate};

pub use autoscaler::{AutoscalerFile, BehaviorFile, FallbackFile, GPU_PRICES, PolicyFile, RulesFile, probed_ready_s};
pub use overrides::{normalize, parse_set};
pub use schema::{
    ClientFile, FaultFile, FleetEventFile, GroupFile, InferFile, LimitsFile, NetworkFile, RouterEventFile, RouterFile,
    ScenarioFile, SynthFile, TraceFile, WorkloadFile,
};
pub use slo::{DEFAULT_ATTAINMENT, SloFile, SloTargetsFile};
pub use source::{MAX_SCENARIO_BYTES, Source, TOOL_TABLES, load, load_str};
pub use traces::resolve_trace_files;
pub use validate::validate;
use values::{count, count_within, dist, from_value, secs, tag, without};

/// A scenario error: one line, naming file, line and key path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ScenarioError {
    /// The scenario file.
    pub file: String,
    /// 1-based line and column of the offending key, when it is written in the file.
    pub location: Option<(usize, usize)>,
    /// Dotted key path (`router.policy.fallback`, `workload.groups[0].turns`), or empty.
    pub path: String,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
    /// The file's further errors, after this one in file order (empty when it is the only
    /// one). `Display` shows this error alone; [`ScenarioError::lines`] shows them all.
    pub also: Vec<ScenarioError>,
}

/// Errors of one file shown at once; the rest are counted.
pub const MAX_ERRORS_SHOWN: usize = 20;

impl ScenarioError {
    /// An error with no further ones.
    pub fn one(
        file: impl Into<String>,
        location: Option<(usize, usize)>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ScenarioError {
            file: file.into(),
            location,
            path: path.into(),
            message: message.into(),
            also: Vec::new(),
        }
    }

    /// Every error of the file, one line each in file order: the first
    /// [`MAX_ERRORS_SHOWN`], then `and N more errors in FILE` when there are more.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = std::iter::once(self)
            .chain(&self.also)
            .take(MAX_ERRORS_SHOWN)
            .map(ToString::to_string)
            .collect();
        let total = 1 + self.also.len();
        if total > MAX_ERRORS_SHOWN {
            out.push(format!(
                "and {} more errors in {}",
                total - MAX_ERRORS_SHOWN,
                crate::quote::escape(&self.file)
            ));
        }
        out
    }
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // File names, key paths and messages carry user text: one line whatever it holds.
        use crate::quote::escape;
        write!(f, "{}", escape(&self.file))?;
        if let Some((l, c)) = self.location {
            write!(f, ":{l}:{c}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", escape(&self.path))?;
        }
        write!(f, ": {}", escape(&self.message))
    }
}

/// A validation failure before the file and line are attached.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Key path.
    pub path: String,
    /// Message.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

type Res<T> = Result<T, FieldError>;

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Simulation settings.
    pub sim: SimConfig,
    /// Session groups.
    pub groups: Vec<GroupConfig>,
    /// Replayed traces.
    pub traces: Vec<crate::trace::TraceGroupConfig>,
    /// Description.
    pub description: String,
    /// Largest request one engine can hold (tokens), `None` in queueing mode.
    pub context_limit_tokens: Option<u32>,
    /// Memory budget (`limits.max_memory_gib`), checked before allocating.
    pub budget: crate::preflight::Budget,
    /// Estimated bytes of a streamed run of the fleet and the session groups (traces are
    /// checked as they are read), see [`crate::preflight`].
    pub estimate_bytes: u64,
}

impl Scenario {
    /// Generates the workload for the scenario's seed, reading its trace files afresh.
    pub fn workload(&self) -> Result<Workload, FieldError> {
        self.workload_with(&crate::trace::TraceCache::new())
    }

    /// [`Scenario::workload`] with the trace files taken from (or read into) `traces`, so
    /// the runs of a sweep parse each file once.
    pub fn workload_with(&self, traces: &crate::trace::TraceCache) -> Result<Workload, FieldError> {
        let mut w = generate(&self.groups, self.sim.seed, self.context_limit_tokens)
            .map_err(|e| FieldError::new(format!("workload.groups[{}]", e.group), e.message))?;
        if self.traces.is_empty() {
            return Ok(w);
        }
        for (i, t) in self.traces.iter().enumerate() {
            let group = (self.groups.len() + i) as u32;
            crate::trace::replay::append(&mut w, t, group, self.sim.seed, self.context_limit_tokens, traces)
                .map_err(|m| FieldError::new(format!("workload.traces[{i}].file"), m))?;
        }
        self.model_warnings(&mut w);
        w.sort_open_order();
        number_copies(&mut w);
        Ok(w)
    }

    /// Names, per replayed trace, the model names its calls carry that the backends serving
    /// them do not model (another model's profile, the default engine, or no shipped shape
    /// at all), with the keys that map them: a warning on stderr and the run's
    /// `model-unmapped` hint, never a silent substitution.
    fn model_warnings(&self, w: &mut Workload) {
        if self.context_limit_tokens.is_none() {
            return; // queueing backends model no LLM
        }
        for (i, facts) in w.traces.iter_mut().enumerate() {
            let group = (self.groups.len() + i) as u32;
            let mut calls: std::collections::BTreeMap<u32, u64> = Default::default();
            for s in w.sessions.iter().filter(|s| s.group == group && s.model != NO_MODEL) {
                *calls.entry(s.model).or_default() += s.turns.len() as u64;
            }
            for (m, n) in calls {
                let name = &w.models[m as usize];
                if let Some(text) = model_warning(&self.sim.labels, &facts.group, name, n) {
                    w.notes.push(format!("warning: {text}"));
                    facts.model_warnings.push(text);
                }
            }
        }
    }
}

/// The warning for trace group `group`'s `n` calls naming `model`, when the backends that
/// serve it model something else: the shipped shape it resolves to (`sim profiles
/// --models`) against each serving backend's profile (no profile: the default engine,
/// Llama-3.1-8B on one H100). A measured profile (`file:`) is taken as the user's word.
fn model_warning(labels: &[fleetsim_core::backend::Label], group: &str, model: &str, n: u64) -> Option<String> {
    let serving: Vec<&str> = labels
        .iter()
        .filter(|l| l.serves.is_empty() || l.serves.iter().any(|s| s == model))
        .map(|l| l.profile.as_str())
        .collect();
    let shape = crate::profiles::models::resolve(model).map(|(m, _)| m.name);
    fn simulated_as(p: &str) -> Option<&str> {
        match p {
            "" => Some(DEFAULT_ENGINE_SHAPE),
            p if p.starts_with(crate::profiles::file::FILE_PREFIX) => None,
            p => p.split('/').next(),
        }
    }
    let mut wrong: Vec<&str> = serving
        .iter()
        .copied()
        .filter(|p| simulated_as(p).is_some_and(|m| shape.is_none_or(|s| !same_shape(m, s))))
        .collect();
    wrong.sort_unstable();
    wrong.dedup();
    let as_what = wrong
        .iter()
        .map(|p| match *p {
            "" => "the default engine (Llama-3.1-8B on one H100: no profile set)".to_string(),
            p => format!("profile {p}"),
        })
        .collect::<Vec<_>>()
        .join(" and ");
    let q = crate::quote::quote(model);
    let head = format!("trace {group}: model {q} ({n} call{})", if n == 1 { "" } else { "s" });
    match shape {
        _ if wrong.is_empty() => None,
        Some(s) => Some(format!(
            "{head} is the shape {s} but its calls are simulated as {as_what}; model it with profile = \"auto\", gpu = \"...\" and serves = [{q}] on the backend group that serves it (or a shipped {s} profile, `sim profiles`)"
        )),
        None => Some(format!(
            "{head} is unmapped (no shipped shape, `sim profiles --models`) and its calls are simulated as {as_what}; give the group that serves it (serves = [{q}]) a profile of its own: profile = \"auto\" with a known `model`, a shipped profile, or profile = \"file:...\" from `sim calibrate`"
        )),
    }
}

/// Whether a profile's model part (`qwen3-14b-fp8` of an auto profile's id) is `shape`.
fn same_shape(profile_model: &str, shape: &str) -> bool {
    let p = profile_model.to_ascii_lowercase();
    p == shape || p.strip_prefix(shape).is_some_and(|rest| rest.starts_with('-'))
}

/// The model shape of the default engine (a backend without a profile: BLIS's fit of
/// Llama-3.1-8B on one H100).
const DEFAULT_ENGINE_SHAPE: &str = "llama-3.1-8b";

/// Names the copies of a session id that several sessions carry (one trace replayed by
/// several `[[workload.traces]]` groups keeps its own ids in each copy) `ID#1`, `ID#2`, ...
/// in session order, as `sim explain --session` asks for them: every output (requests,
/// decisions, timeline) then names one session per id and joins back to it. Each copy is
/// its own session, so it carries its own key to the router too.
fn number_copies(w: &mut Workload) {
    let mut count: rustc_hash::FxHashMap<&str, u32> = Default::default();
    for s in &w.sessions {
        *count.entry(s.key.as_str()).or_default() += 1;
    }
    let shared: rustc_hash::FxHashMap<String, u32> = count
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| (k.to_string(), 0))
        .collect();
    if shared.is_empty() {
        return;
    }
    let mut seen = shared;
    for s in &mut w.sessions {
        if let Some(k) = seen.get_mut(&s.key) {
            *k += 1;
            s.key = format!("{}#{k}", s.key);
        }
    }
}

#[cfg(test)]
mod tests;
