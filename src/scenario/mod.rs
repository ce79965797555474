//! Scenario files: the raw TOML layer ([`ScenarioFile`], serde with `deny_unknown_fields`
//! and upstream defaults) and its validation into a runnable [`Scenario`] (units resolved,
//! cross-field checks done). Every error names the key path, and the file and line where
//! the key is written (see [`load`]).

mod backends;
mod counts;
mod locate;
mod overrides;
mod policy_tables;

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::dist::{Dist, DistTable};
use crate::policy::{Fallback, POLICY_KINDS, PolicyConfig};
use crate::router::RouterConfig;
use crate::sim::{BackendModel, FrontBalancer, SimConfig};
use crate::time::{SimDuration, SimTime, secs_to_ns};
use crate::workload::{Arrival, GroupConfig, Workload, generate};

pub use overrides::{normalize, parse_set};

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
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((l, c)) = self.location {
            write!(f, ":{l}:{c}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
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

// ---------------------------------------------------------------------------------------
// Raw layer
// ---------------------------------------------------------------------------------------

/// The scenario file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Scenario name (default: the file stem). Results go to `results/<name>/`.
    pub name: Option<String>,
    /// Free text shown in reports.
    #[serde(default)]
    pub description: String,
    /// Master seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Run limits.
    #[serde(default)]
    pub limits: LimitsFile,
    /// The fleet (`[backends]`, validated in [`backends`]).
    pub backends: toml::Value,
    /// Network latencies.
    #[serde(default)]
    pub network: NetworkFile,
    /// The router.
    #[serde(default)]
    pub router: RouterFile,
    /// The workload.
    pub workload: WorkloadFile,
    /// Signal faults and slowdowns (`[[faults]]`).
    #[serde(default)]
    pub faults: Vec<FaultFile>,
    /// Router events (`[[router_events]]`).
    #[serde(default)]
    pub router_events: Vec<RouterEventFile>,
    /// Backends joining, leaving, draining, restarting (`[[fleet_events]]`).
    #[serde(default)]
    pub fleet_events: Vec<FleetEventFile>,
    /// Client retry behaviour (`[client]`).
    #[serde(default)]
    pub client: ClientFile,
}

/// `[[fleet_events]]`: a membership change of one backend.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetEventFile {
    /// When.
    pub at_s: f64,
    /// Backend index.
    pub backend: i64,
    /// `join`, `leave`, `drain`, `restart`.
    pub kind: String,
    /// `restart`: time out of the fleet (default 0).
    pub downtime_s: Option<f64>,
}

/// `[client]`: what clients do when a request fails (OpenAI Python SDK defaults).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// Retries per turn (default 2).
    #[serde(default = "default_retries")]
    pub max_retries: i64,
    /// First backoff, seconds (default 0.5; doubles per retry).
    #[serde(default = "default_retry_initial")]
    pub retry_initial_delay_s: f64,
    /// Backoff cap, seconds (default 8).
    #[serde(default = "default_retry_max")]
    pub retry_max_delay_s: f64,
}

impl Default for ClientFile {
    fn default() -> Self {
        ClientFile {
            max_retries: default_retries(),
            retry_initial_delay_s: default_retry_initial(),
            retry_max_delay_s: default_retry_max(),
        }
    }
}

fn default_retries() -> i64 {
    2
}
fn default_retry_initial() -> f64 {
    0.5
}
fn default_retry_max() -> f64 {
    8.0
}

/// `[[router_events]]`: `kind = "restart"` at `at_s` (all replicas, or `replica`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterEventFile {
    /// When.
    pub at_s: f64,
    /// `restart`.
    pub kind: String,
    /// One replica (default: every replica).
    pub replica: Option<i64>,
}

/// `[[faults]]`: one fault on one backend over a time window.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultFile {
    /// Backend index.
    pub backend: i64,
    /// `scrape_fail`, `scrape_hang`, `zero_stats`, `frozen_stats`, `extra_lag`, `slowdown`.
    pub kind: String,
    /// Start, seconds (default 0).
    #[serde(default)]
    pub from_s: f64,
    /// End, seconds (default: never).
    pub until_s: Option<f64>,
    /// `extra_lag`: seconds.
    pub lag_s: Option<f64>,
    /// `slowdown`: step-time factor.
    pub factor: Option<f64>,
}

fn default_seed() -> u64 {
    1
}

/// `[limits]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Stop at this simulated time (default: when every session is done).
    pub max_sim_time_s: Option<f64>,
    /// Refuse runs longer than this many events.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Refuse runs estimated to need more memory than this (default: half the machine's).
    pub max_memory_gib: Option<f64>,
}

impl Default for LimitsFile {
    fn default() -> Self {
        LimitsFile {
            max_sim_time_s: None,
            max_events: default_max_events(),
            max_memory_gib: None,
        }
    }
}

fn default_max_events() -> u64 {
    1_000_000_000
}

/// `[network]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// Router to engine queue (HTTP, API server, tokeniser); default 2 ms.
    #[serde(default = "default_dispatch")]
    pub dispatch_latency_s: f64,
    /// Engine to router/client per chunk; default 1 ms.
    #[serde(default = "default_response")]
    pub response_latency_s: f64,
}

impl Default for NetworkFile {
    fn default() -> Self {
        NetworkFile {
            dispatch_latency_s: default_dispatch(),
            response_latency_s: default_response(),
        }
    }
}

fn default_dispatch() -> f64 {
    0.002
}
fn default_response() -> f64 {
    0.001
}

/// `[router]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterFile {
    /// Engine-stats refresh interval (default: the policy's upstream value, 30 s for
    /// production-stack's `--engine-stats-interval`, 0.05 s for llm-d).
    pub engine_stats_interval_s: Option<f64>,
    /// One `/metrics` round trip (default 10 ms).
    #[serde(default = "default_scrape")]
    pub scrape_duration_s: f64,
    /// `--request-stats-window` (upstream default 60).
    #[serde(default = "default_window")]
    pub request_stats_window_s: f64,
    /// Delay before a dispatch shows in request stats (upstream: 0).
    #[serde(default)]
    pub request_stats_lag_s: f64,
    /// Characters per token for the prefix trie (default 4).
    #[serde(default = "default_cpt")]
    pub chars_per_token: i64,
    /// Transport delay of engine KV events to KV-event-fed routers (default 10 ms).
    #[serde(default = "default_kv_lag")]
    pub kv_event_lag_s: f64,
    /// Router replicas (default 1).
    #[serde(default = "default_replicas")]
    pub replicas: i64,
    /// Uniform jitter on every sleep between scrape passes, seconds (default 0).
    #[serde(default)]
    pub scrape_jitter_s: f64,
    /// When the first scrape pass starts, as a fraction of the interval in [0, 1)
    /// (default 0: at router start): the phase of the scrape against the workload.
    #[serde(default)]
    pub engine_stats_phase: f64,
    /// Load balancer in front of the replicas: "round_robin" (default), "random",
    /// "session_hash".
    #[serde(default = "default_front")]
    pub front: String,
    /// Counterfactual: decisions see live engine gauges (default false).
    #[serde(default)]
    pub fresh_signals: bool,
    /// `[router.policy]`, a table tagged by `kind`.
    pub policy: Option<toml::Table>,
}

impl Default for RouterFile {
    fn default() -> Self {
        RouterFile {
            engine_stats_interval_s: None,
            scrape_duration_s: default_scrape(),
            request_stats_window_s: default_window(),
            request_stats_lag_s: 0.0,
            chars_per_token: default_cpt(),
            kv_event_lag_s: default_kv_lag(),
            replicas: default_replicas(),
            scrape_jitter_s: 0.0,
            engine_stats_phase: 0.0,
            front: default_front(),
            fresh_signals: false,
            policy: None,
        }
    }
}

fn default_scrape() -> f64 {
    0.01
}
fn default_window() -> f64 {
    60.0
}
fn default_replicas() -> i64 {
    1
}
fn default_front() -> String {
    "round_robin".into()
}
fn default_kv_lag() -> f64 {
    0.01
}
fn default_cpt() -> i64 {
    4
}

/// `[router.policy]` for `kind = "prefixaware"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefixAwareFile {
    #[serde(default)]
    prefix_min_match_length: i64,
    #[serde(default = "default_fallback")]
    fallback: String,
    #[serde(default = "default_band")]
    band: i64,
    #[serde(default = "default_tie")]
    tie: String,
    #[serde(default)]
    sample: i64,
    insert: Option<String>,
}

fn default_tie() -> String {
    "random".into()
}
fn default_fallback() -> String {
    "qps".into()
}
fn default_band() -> i64 {
    1
}

/// `[router.policy]` for `kind = "leastinflight"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeastInflightFile {
    #[serde(default = "default_band")]
    band: i64,
    #[serde(default = "default_tie")]
    tie: String,
}

/// `[router.policy]` for policies without parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

/// `[workload]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    /// Session groups.
    #[serde(default)]
    pub groups: Vec<GroupFile>,
    /// Replayed traces.
    #[serde(default)]
    pub traces: Vec<TraceFile>,
}

/// `[[workload.traces]]`: a replayed trace file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceFile {
    /// The trace, relative to the scenario file.
    pub file: String,
    /// Group name (default: the file stem).
    pub name: Option<String>,
    /// `native`, `mooncake`, `azure`, `burstgpt` (default: detected).
    pub format: Option<String>,
    /// `open` (default) or `closed`.
    pub mode: Option<String>,
    /// Factor on trace time.
    pub time_scale: Option<f64>,
    /// Or: the replay's mean request rate.
    pub target_rate_per_s: Option<f64>,
    /// Window start, trace seconds from the first request.
    pub start_s: Option<f64>,
    /// Window length, trace seconds.
    pub duration_s: Option<f64>,
    /// Simulated time of the window start.
    pub at_s: Option<f64>,
    /// Most requests replayed.
    pub max_requests: Option<i64>,
    /// Replays of the window.
    pub repeat: Option<i64>,
    /// Arrival jitter, seconds.
    pub arrival_jitter_s: Option<f64>,
    /// `auto`, `infer`, `none`, `synthesize`.
    pub sessions: Option<String>,
    /// Session inference settings.
    pub infer: Option<InferFile>,
    /// Session synthesis settings.
    pub synthesize: Option<SynthFile>,
    /// Send the session key header (default true).
    #[serde(default = "yes")]
    pub sends_session_key: bool,
    /// Count malformed rows instead of failing.
    #[serde(default)]
    pub skip_bad_rows: bool,
    /// Tokens per trace block (default 512).
    pub block_tokens: Option<i64>,
    /// Service time per request, seconds (queueing backends).
    pub service_time_s: Option<toml::Value>,
    /// `format = "sessions"`: which column holds what.
    pub columns: Option<toml::Value>,
    /// When sessions of a trace of offsets open (`kind = "burst" | "poisson" | "interval"`).
    pub session_arrival: Option<toml::Value>,
    /// `append` (default) or `independent`: content of calls without hashes.
    pub context: Option<String>,
    /// Prefix shared across sessions: tokens, or a table of tokens per model name.
    pub shared_prefix_tokens: Option<toml::Value>,
    /// `format = "otel"`: attributes naming the session, in order.
    pub session_attributes: Option<Vec<String>>,
}

/// `[workload.traces.infer]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferFile {
    /// Fewest shared blocks that link two requests (default 2).
    pub min_shared_blocks: Option<i64>,
    /// Most extenders per request (default 8).
    pub max_fanout: Option<i64>,
    /// Longest gap between linked requests, seconds (default: any).
    pub max_gap_s: Option<f64>,
    /// Fewest tokens a request's input must exceed its parent's by (default 1).
    pub min_growth_tokens: Option<i64>,
}

/// `[workload.traces.synthesize]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynthFile {
    /// Mean turns per session (default 4).
    pub mean_turns: Option<f64>,
    /// Sessions a request may continue (default 64).
    pub max_open: Option<i64>,
}

/// `[[workload.groups]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupFile {
    /// Group name (unique).
    pub name: String,
    /// Number of sessions.
    pub sessions: i64,
    /// Arrival process table (`kind = "burst" | "poisson" | "interval"`).
    pub arrival: toml::Value,
    /// Turns per session (distribution).
    #[serde(default = "one")]
    pub turns: toml::Value,
    /// Shared system prompt tokens.
    #[serde(default)]
    pub system_prompt_tokens: i64,
    /// Shared prompt name (default: the group name).
    pub system_prompt: Option<String>,
    /// New tokens in turn 1 (default: `input_tokens`).
    pub first_input_tokens: Option<toml::Value>,
    /// New tokens per later turn.
    pub input_tokens: toml::Value,
    /// Output tokens per turn.
    pub output_tokens: toml::Value,
    /// Think time between turns, seconds.
    #[serde(default = "zero")]
    pub think_time_s: toml::Value,
    /// Service time per request, seconds (queueing backends).
    pub service_time_s: Option<toml::Value>,
    /// Send the session key header (default true).
    #[serde(default = "yes")]
    pub sends_session_key: bool,
    /// Per-session context cap in tokens.
    pub max_context_tokens: Option<i64>,
    /// `chat` or `completions` (default: see [`crate::workload::RequestApi`]).
    pub request_api: Option<String>,
}

fn one() -> toml::Value {
    toml::Value::Integer(1)
}
fn zero() -> toml::Value {
    toml::Value::Integer(0)
}
fn yes() -> bool {
    true
}

// ---------------------------------------------------------------------------------------
// Validated layer
// ---------------------------------------------------------------------------------------

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
}

impl Scenario {
    /// Generates the workload for the scenario's seed.
    pub fn workload(&self) -> Result<Workload, FieldError> {
        let mut w = generate(&self.groups, self.sim.seed, self.context_limit_tokens)
            .map_err(|e| FieldError::new(format!("workload.groups[{}]", e.group), e.message))?;
        if self.traces.is_empty() {
            return Ok(w);
        }
        for (i, t) in self.traces.iter().enumerate() {
            let group = (self.groups.len() + i) as u32;
            crate::trace::replay::append(&mut w, t, group, self.sim.seed, self.context_limit_tokens)
                .map_err(|m| FieldError::new(format!("workload.traces[{i}].file"), m))?;
        }
        w.sort_open_order();
        Ok(w)
    }
}

fn from_value<T: DeserializeOwned>(v: &toml::Value, path: &str) -> Res<T> {
    serde_path_to_error::deserialize(v.clone()).map_err(|e| {
        let inner = e.path().to_string();
        let p = if inner == "." || inner.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{inner}")
        };
        FieldError::new(p, e.into_inner().message().trim().to_string())
    })
}

fn secs(v: f64, path: &str, allow_zero: bool) -> Res<SimDuration> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        let want = if allow_zero { ">= 0" } else { "> 0" };
        return Err(FieldError::new(
            path,
            format!("must be a finite number of seconds {want}, got {v}"),
        ));
    }
    if v > 1e9 {
        return Err(FieldError::new(
            path,
            format!("{v} s is beyond the simulator's range (1e9 s)"),
        ));
    }
    let ns = secs_to_ns(v);
    if !allow_zero && ns == 0 {
        return Err(FieldError::new(
            path,
            format!("{v} s is below the simulator's 1 ns resolution"),
        ));
    }
    Ok(SimDuration(ns))
}

fn count(v: i64, path: &str, min: i64) -> Res<u32> {
    if v < min || v > i64::from(u32::MAX) {
        return Err(FieldError::new(path, format!("must be an integer >= {min}, got {v}")));
    }
    Ok(v as u32)
}

fn dist(v: &toml::Value, path: &str) -> Res<Dist> {
    match v {
        toml::Value::Integer(i) => Dist::constant(*i as f64).map_err(|m| FieldError::new(path, m)),
        toml::Value::Float(f) => Dist::constant(*f).map_err(|m| FieldError::new(path, m)),
        toml::Value::Table(_) => {
            let t: DistTable = from_value(v, path)?;
            Dist::from_table(&t).map_err(|(k, m)| FieldError::new(format!("{path}.{k}"), m))
        }
        other => Err(FieldError::new(
            path,
            format!(
                "expected a number or a distribution table such as {{ dist = \"exponential\", mean = 1.0 }}, got {}",
                other.type_str()
            ),
        )),
    }
}

fn tag<'a>(t: &'a toml::Table, key: &str, path: &str, valid: &str) -> Res<&'a str> {
    match t.get(key) {
        Some(toml::Value::String(s)) => Ok(s),
        Some(other) => Err(FieldError::new(
            format!("{path}.{key}"),
            format!("expected a string (one of {valid}), got {}", other.type_str()),
        )),
        None => Err(FieldError::new(path, format!("missing `{key}` (one of {valid})"))),
    }
}

fn without(t: &toml::Table, key: &str) -> toml::Value {
    let mut t = t.clone();
    t.remove(key);
    toml::Value::Table(t)
}

/// The tie rules of the least-in-flight choices, for messages.
const TIES: &str = "`random` (PR #1089) or `first` (Python `min()`: first in discovery order)";

fn policy(t: Option<&toml::Table>, fleet: policy_tables::Fleet) -> Res<PolicyConfig> {
    let path = "router.policy";
    let Some(t) = t else {
        return Err(FieldError::new(
            path,
            format!("missing [router.policy] table with `kind` (one of {POLICY_KINDS})"),
        ));
    };
    let kind = tag(t, "kind", path, POLICY_KINDS)?;
    let rest = without(t, "kind");
    match kind {
        "roundrobin" => {
            from_value::<NoParams>(&rest, path)?;
            Ok(PolicyConfig::RoundRobin)
        }
        "session" => {
            from_value::<NoParams>(&rest, path)?;
            Ok(PolicyConfig::Session)
        }
        "prefixaware" => {
            let p: PrefixAwareFile = from_value(&rest, path)?;
            let fallback = match p.fallback.as_str() {
                "qps" => Fallback::Qps,
                "leastinflight" => Fallback::LeastInflight,
                "local_inflight" => Fallback::LocalInflight,
                "scraped_plus_sent" => Fallback::ScrapedPlusSent,
                other => {
                    return Err(FieldError::new(
                        format!("{path}.fallback"),
                        format!(
                            "unknown fallback `{other}`; expected `qps` (upstream), `leastinflight` (PR #1089), `local_inflight` or `scraped_plus_sent`"
                        ),
                    ));
                }
            };
            if p.prefix_min_match_length < 0 {
                return Err(FieldError::new(
                    format!("{path}.prefix_min_match_length"),
                    format!("must be >= 0 characters, got {}", p.prefix_min_match_length),
                ));
            }
            Ok(PolicyConfig::PrefixAware {
                prefix_min_match_length: p.prefix_min_match_length as u64,
                fallback,
                band: count(p.band, &format!("{path}.band"), 0)?,
                tie: policy_tables::tie(&p.tie, &format!("{path}.tie"), TIES)?,
                sample: count(p.sample, &format!("{path}.sample"), 0)?,
                insert: policy_tables::insertion(p.insert.as_deref(), &format!("{path}.insert"))?,
            })
        }
        "leastinflight" => {
            let p: LeastInflightFile = from_value(&rest, path)?;
            Ok(PolicyConfig::LeastInflight {
                band: count(p.band, &format!("{path}.band"), 0)?,
                tie: policy_tables::tie(&p.tie, &format!("{path}.tie"), TIES)?,
            })
        }
        other => policy_tables::parse(other, &rest, path, fleet).unwrap_or_else(|| {
            Err(FieldError::new(
                format!("{path}.kind"),
                format!("unknown policy `{other}`; expected one of {POLICY_KINDS}"),
            ))
        }),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BurstFile {
    at_s: f64,
    #[serde(default)]
    spread_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoissonFile {
    #[serde(default)]
    start_s: f64,
    rate_per_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntervalFile {
    #[serde(default)]
    start_s: f64,
    every_s: f64,
}

const ARRIVAL_KINDS: &str = "burst, poisson, interval";

fn arrival(v: &toml::Value, path: &str) -> Res<Arrival> {
    let Some(t) = v.as_table() else {
        return Err(FieldError::new(
            path,
            "expected a table such as { kind = \"burst\", at_s = 30, spread_s = 2 }".to_string(),
        ));
    };
    let kind = tag(t, "kind", path, ARRIVAL_KINDS)?;
    let rest = without(t, "kind");
    match kind {
        "burst" => {
            let b: BurstFile = from_value(&rest, path)?;
            Ok(Arrival::Burst {
                at: SimTime(secs(b.at_s, &format!("{path}.at_s"), true)?.0),
                spread: secs(b.spread_s, &format!("{path}.spread_s"), true)?,
            })
        }
        "poisson" => {
            let p: PoissonFile = from_value(&rest, path)?;
            if !(p.rate_per_s.is_finite() && p.rate_per_s > 0.0) {
                return Err(FieldError::new(
                    format!("{path}.rate_per_s"),
                    format!("must be > 0, got {}", p.rate_per_s),
                ));
            }
            Ok(Arrival::Poisson {
                start: SimTime(secs(p.start_s, &format!("{path}.start_s"), true)?.0),
                rate_per_s: p.rate_per_s,
            })
        }
        "interval" => {
            let p: IntervalFile = from_value(&rest, path)?;
            Ok(Arrival::Interval {
                start: SimTime(secs(p.start_s, &format!("{path}.start_s"), true)?.0),
                every: secs(p.every_s, &format!("{path}.every_s"), false)?,
            })
        }
        other => Err(FieldError::new(
            format!("{path}.kind"),
            format!("unknown arrival `{other}`; expected one of {ARRIVAL_KINDS}"),
        )),
    }
}

fn router_events(list: &[RouterEventFile], replicas: u32) -> Res<Vec<(SimTime, Option<u16>)>> {
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let at = |k: &str| format!("router_events[{i}].{k}");
        if e.kind != "restart" {
            return Err(FieldError::new(
                at("kind"),
                format!("unknown router event `{}`; expected `restart`", e.kind),
            ));
        }
        let replica = match e.replica {
            None => None,
            Some(r) if r >= 0 && r < i64::from(replicas) => Some(r as u16),
            Some(r) => {
                return Err(FieldError::new(
                    at("replica"),
                    format!("replica {r} does not exist (router.replicas = {replicas}, indices from 0)"),
                ));
            }
        };
        out.push((SimTime(secs(e.at_s, &at("at_s"), true)?.0), replica));
    }
    Ok(out)
}

fn fleet_events(list: &[FleetEventFile], n_backends: u32) -> Res<Vec<crate::fleet::FleetEvent>> {
    use crate::fleet::{FleetEvent, FleetEventKind};
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let at = |k: &str| format!("fleet_events[{i}].{k}");
        let backend = backend_index(e.backend, n_backends, &at("backend"))?;
        let kind = match e.kind.as_str() {
            "restart" => FleetEventKind::Restart {
                downtime: secs(e.downtime_s.unwrap_or(0.0), &at("downtime_s"), true)?,
            },
            k @ ("join" | "leave" | "drain") => {
                if e.downtime_s.is_some() {
                    return Err(FieldError::new(
                        at("downtime_s"),
                        "`downtime_s` applies only to kind = \"restart\"",
                    ));
                }
                match k {
                    "join" => FleetEventKind::Join,
                    "leave" => FleetEventKind::Leave,
                    _ => FleetEventKind::Drain,
                }
            }
            other => {
                return Err(FieldError::new(
                    at("kind"),
                    format!("unknown fleet event `{other}`; expected join, leave, drain or restart"),
                ));
            }
        };
        out.push(FleetEvent {
            at: SimTime(secs(e.at_s, &at("at_s"), true)?.0),
            backend,
            kind,
        });
    }
    crate::fleet::initial_membership(&out, n_backends as usize)
        .map_err(|(i, m)| FieldError::new(format!("fleet_events[{i}]"), m))?;
    Ok(out)
}

fn client(c: &ClientFile) -> Res<crate::fleet::ClientConfig> {
    let max_retries = count(c.max_retries, "client.max_retries", 0)?;
    if max_retries > 100 {
        return Err(FieldError::new(
            "client.max_retries",
            format!("must be at most 100, got {max_retries}"),
        ));
    }
    let initial = secs(c.retry_initial_delay_s, "client.retry_initial_delay_s", true)?;
    let max = secs(c.retry_max_delay_s, "client.retry_max_delay_s", true)?;
    if max < initial {
        return Err(FieldError::new(
            "client.retry_max_delay_s",
            "must be at least client.retry_initial_delay_s",
        ));
    }
    Ok(crate::fleet::ClientConfig {
        max_retries,
        retry_initial_delay: initial,
        retry_max_delay: max,
    })
}

/// A backend index given in a scenario table.
fn backend_index(v: i64, n_backends: u32, path: &str) -> Res<crate::ids::BackendId> {
    if v < 0 || v >= i64::from(n_backends) {
        return Err(FieldError::new(
            path,
            format!("backend {v} does not exist (backends.count = {n_backends}, indices from 0)"),
        ));
    }
    Ok(crate::ids::BackendId::from_index(v as usize))
}

fn faults(list: &[FaultFile], n_backends: u32) -> Res<Vec<crate::faults::Fault>> {
    use crate::faults::{Fault, FaultKind};
    let mut out = Vec::new();
    for (i, f) in list.iter().enumerate() {
        let at = |k: &str| format!("faults[{i}].{k}");
        let backend = backend_index(f.backend, n_backends, &at("backend"))?;
        let only = |key: &str, given: bool, kinds: &str| -> Res<()> {
            if given {
                Err(FieldError::new(at(key), format!("`{key}` applies only to {kinds}")))
            } else {
                Ok(())
            }
        };
        let kind = match f.kind.as_str() {
            "scrape_fail" | "scrape_hang" | "zero_stats" | "frozen_stats" => {
                only("lag_s", f.lag_s.is_some(), "kind = \"extra_lag\"")?;
                only("factor", f.factor.is_some(), "kind = \"slowdown\"")?;
                match f.kind.as_str() {
                    "scrape_fail" => FaultKind::ScrapeFail,
                    "scrape_hang" => FaultKind::ScrapeHang,
                    "zero_stats" => FaultKind::ZeroStats,
                    _ => FaultKind::FrozenStats,
                }
            }
            "extra_lag" => {
                only("factor", f.factor.is_some(), "kind = \"slowdown\"")?;
                let l = f
                    .lag_s
                    .ok_or_else(|| FieldError::new(at("lag_s"), "extra_lag needs `lag_s`"))?;
                FaultKind::ExtraLag(secs(l, &at("lag_s"), false)?)
            }
            "slowdown" => {
                only("lag_s", f.lag_s.is_some(), "kind = \"extra_lag\"")?;
                let x = f
                    .factor
                    .ok_or_else(|| FieldError::new(at("factor"), "slowdown needs `factor`"))?;
                if !(x.is_finite() && x > 0.0 && x <= 1000.0) {
                    return Err(FieldError::new(at("factor"), format!("must be in (0, 1000], got {x}")));
                }
                FaultKind::Slowdown(x)
            }
            other => {
                return Err(FieldError::new(
                    at("kind"),
                    format!(
                        "unknown fault `{other}`; expected scrape_fail, scrape_hang, zero_stats, frozen_stats, extra_lag or slowdown"
                    ),
                ));
            }
        };
        let from = SimTime(secs(f.from_s, &at("from_s"), true)?.0);
        let until = match f.until_s {
            Some(u) => SimTime(secs(u, &at("until_s"), true)?.0),
            None => SimTime(u64::MAX),
        };
        if until <= from {
            return Err(FieldError::new(at("until_s"), "must be after from_s"));
        }
        out.push(Fault {
            backend,
            kind,
            from,
            until,
        });
    }
    Ok(out)
}

/// Validates a parsed file. `stem` names the scenario when `name` is absent.
pub fn validate(f: ScenarioFile, stem: &str) -> Res<Scenario> {
    let name = f.name.clone().unwrap_or_else(|| stem.to_string());
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(FieldError::new(
            "name",
            format!("`{name}` cannot be used as a results folder name"),
        ));
    }
    let fleet_b = backends::validate(&f.backends)?;
    let n = fleet_b.names.len() as u32;
    let r = &f.router;
    let fleet = policy_tables::Fleet {
        block_size_tokens: fleet_b.block_size_tokens,
        kv_blocks: fleet_b.kv_blocks,
        // Validated below; clamped here so a bad value is reported under its own key.
        chars_per_token: r.chars_per_token.clamp(1, 64) as u32,
    };
    let policy = policy(r.policy.as_ref(), fleet)?;
    let router = RouterConfig {
        engine_stats_interval: secs(
            r.engine_stats_interval_s
                .unwrap_or_else(|| policy.default_engine_stats_interval_s()),
            "router.engine_stats_interval_s",
            false,
        )?,
        scrape_duration: secs(r.scrape_duration_s, "router.scrape_duration_s", true)?,
        request_stats_window: secs(r.request_stats_window_s, "router.request_stats_window_s", false)?,
        request_stats_lag: secs(r.request_stats_lag_s, "router.request_stats_lag_s", true)?,
        chars_per_token: match count(r.chars_per_token, "router.chars_per_token", 1)? {
            c if c > 64 => {
                return Err(FieldError::new(
                    "router.chars_per_token",
                    format!("must be at most 64, got {c}"),
                ));
            }
            c => c,
        },
        kv_event_lag: secs(r.kv_event_lag_s, "router.kv_event_lag_s", true)?,
        replicas: match count(r.replicas, "router.replicas", 1)? {
            n if n > 1024 => {
                return Err(FieldError::new(
                    "router.replicas",
                    format!("{n} replicas is above the supported 1024"),
                ));
            }
            n => n,
        },
        scrape_jitter: secs(r.scrape_jitter_s, "router.scrape_jitter_s", true)?,
        engine_stats_phase: match r.engine_stats_phase {
            v if (0.0..1.0).contains(&v) => v,
            v => {
                return Err(FieldError::new(
                    "router.engine_stats_phase",
                    format!("must be a fraction of the interval in [0, 1), got {v}"),
                ));
            }
        },
        front: match r.front.as_str() {
            "round_robin" => FrontBalancer::RoundRobin,
            "random" => FrontBalancer::Random,
            "session_hash" => FrontBalancer::SessionHash,
            other => {
                return Err(FieldError::new(
                    "router.front",
                    format!("unknown front balancer `{other}`; expected `round_robin`, `random` or `session_hash`"),
                ));
            }
        },
        block_size_tokens: fleet_b.block_size_tokens,
        fresh_signals: r.fresh_signals,
        policy,
    };
    if router.engine_stats_interval.0 + router.scrape_duration.0 * u64::from(n) == 0 {
        return Err(FieldError::new(
            "router.engine_stats_interval_s",
            "a scrape period of zero would never advance",
        ));
    }
    let limits = &f.limits;
    let max_sim_time = match limits.max_sim_time_s {
        Some(v) => Some(SimTime(secs(v, "limits.max_sim_time_s", false)?.0)),
        None => None,
    };
    if limits.max_events == 0 {
        return Err(FieldError::new("limits.max_events", "must be > 0"));
    }
    let net = &f.network;
    let router_replicas = router.replicas;
    let sim = SimConfig {
        name,
        seed: f.seed,
        backends: fleet_b.names,
        models: fleet_b.models,
        labels: fleet_b.labels,
        router,
        dispatch_latency: secs(net.dispatch_latency_s, "network.dispatch_latency_s", true)?,
        response_latency: secs(net.response_latency_s, "network.response_latency_s", true)?,
        gauge_lag: fleet_b.gauge_lag,
        max_sim_time,
        max_events: limits.max_events,
        faults: faults(&f.faults, n)?,
        router_restarts: router_events(&f.router_events, router_replicas)?,
        fleet_events: fleet_events(&f.fleet_events, n)?,
        client: client(&f.client)?,
    };
    let queueing = matches!(sim.models[0], BackendModel::Queueing { .. });
    if f.workload.groups.is_empty() && f.workload.traces.is_empty() {
        return Err(FieldError::new(
            "workload.groups",
            "needs at least one [[workload.groups]] table (or [[workload.traces]])",
        ));
    }
    let mut groups = Vec::new();
    let mut names_seen = std::collections::BTreeSet::new();
    for (i, g) in f.workload.groups.iter().enumerate() {
        let p = format!("workload.groups[{i}]");
        if g.name.is_empty() || !names_seen.insert(g.name.clone()) {
            return Err(FieldError::new(
                format!("{p}.name"),
                format!("group names must be unique and non-empty, got `{}`", g.name),
            ));
        }
        let sessions = count(g.sessions, &format!("{p}.sessions"), 1)?;
        let service = match (&g.service_time_s, queueing) {
            (Some(v), true) => Some(dist(v, &format!("{p}.service_time_s"))?),
            (None, true) => {
                return Err(FieldError::new(
                    p,
                    "queueing backends need `service_time_s` (a distribution in seconds)",
                ));
            }
            (Some(_), false) => {
                return Err(FieldError::new(
                    format!("{p}.service_time_s"),
                    "only applies to backends.model = \"queueing\"; vLLM service time comes from the step-time model",
                ));
            }
            (None, false) => None,
        };
        let input = dist(&g.input_tokens, &format!("{p}.input_tokens"))?;
        counts::check(&g.turns, &format!("{p}.turns"), 1, "turns")?;
        counts::check(&g.output_tokens, &format!("{p}.output_tokens"), 1, "output_tokens")?;
        groups.push(GroupConfig {
            name: g.name.clone(),
            sessions,
            arrival: arrival(&g.arrival, &format!("{p}.arrival"))?,
            turns: dist(&g.turns, &format!("{p}.turns"))?,
            system_prompt_tokens: count(g.system_prompt_tokens, &format!("{p}.system_prompt_tokens"), 0)?,
            system_prompt: g.system_prompt.clone().unwrap_or_else(|| g.name.clone()),
            first_input_tokens: match &g.first_input_tokens {
                Some(v) => dist(v, &format!("{p}.first_input_tokens"))?,
                None => input.clone(),
            },
            input_tokens: input,
            output_tokens: dist(&g.output_tokens, &format!("{p}.output_tokens"))?,
            think_time_s: dist(&g.think_time_s, &format!("{p}.think_time_s"))?,
            service_time_s: service,
            sends_session_key: g.sends_session_key,
            max_context_tokens: match g.max_context_tokens {
                Some(v) => Some(count(v, &format!("{p}.max_context_tokens"), 2)?),
                None => None,
            },
            request_api: policy_tables::request_api(g.request_api.as_deref(), &format!("{p}.request_api"))?,
        });
    }
    let mut traces = Vec::new();
    for (i, t) in f.workload.traces.iter().enumerate() {
        let tc = trace_group(t, &format!("workload.traces[{i}]"), queueing)?;
        if !names_seen.insert(tc.name.clone()) {
            return Err(FieldError::new(
                format!("workload.traces[{i}].name"),
                format!(
                    "group names must be unique across [[workload.groups]] and [[workload.traces]], got `{}` twice (set `name`)",
                    tc.name
                ),
            ));
        }
        traces.push(tc);
    }
    let budget = crate::preflight::Budget::new(limits.max_memory_gib)
        .map_err(|m| FieldError::new("limits.max_memory_gib", m))?;
    for t in &mut traces {
        t.max_memory_bytes = budget.bytes;
    }
    preflight(&sim, &groups, &budget)?;
    Ok(Scenario {
        sim,
        groups,
        traces,
        description: f.description,
        context_limit_tokens: fleet_b.context_limit,
        budget,
    })
}

/// Refuses a fleet or workload whose estimated memory exceeds the budget, naming the key that
/// drives it (see [`crate::preflight`]).
fn preflight(sim: &SimConfig, groups: &[GroupConfig], budget: &crate::preflight::Budget) -> Res<()> {
    use crate::preflight::{kv_bytes, sessions_bytes};
    let kv_blocks: Vec<u64> = sim
        .models
        .iter()
        .filter_map(|m| match m {
            BackendModel::Vllm(cfg) => Some(u64::from(cfg.kv_blocks)),
            _ => None,
        })
        .collect();
    if !kv_blocks.is_empty() {
        let total = kv_blocks.iter().fold(0u64, |a, b| a.saturating_add(*b));
        let grouped = sim.labels.iter().any(|l| !l.group.is_empty());
        let (key, what) = if grouped {
            (
                "backends.groups",
                format!("{} backends with {total} KV blocks in all", kv_blocks.len()),
            )
        } else {
            (
                "backends.kv_blocks",
                format!("{} backends x backends.kv_blocks = {}", kv_blocks.len(), kv_blocks[0]),
            )
        };
        budget
            .check(kv_bytes(1, total), &what)
            .map_err(|m| FieldError::new(key, m))?;
    }
    let need: Vec<u64> = groups
        .iter()
        .map(|g| sessions_bytes(u64::from(g.sessions), g.turns.mean()))
        .collect();
    let total = need.iter().fold(0u64, |a, b| a.saturating_add(*b));
    if let Some((i, _)) = need.iter().enumerate().max_by_key(|(_, b)| **b) {
        let g = &groups[i];
        let what = format!(
            "{} sessions x mean turns {} in group `{}`",
            g.sessions,
            g.turns.mean(),
            g.name
        );
        // Name the factor that drives the estimate.
        let key = if g.turns.mean() > f64::from(g.sessions) {
            "turns"
        } else {
            "sessions"
        };
        budget
            .check(total, &what)
            .map_err(|m| FieldError::new(format!("workload.groups[{i}].{key}"), m))?;
    }
    Ok(())
}

/// Validates one `[[workload.traces]]` table (`p` is its key path).
fn trace_group(t: &TraceFile, p: &str, queueing: bool) -> Res<crate::trace::TraceGroupConfig> {
    use crate::trace::{Format, Mode, Scale, SessionMode};
    if t.file.is_empty() {
        return Err(FieldError::new(format!("{p}.file"), "names no file"));
    }
    let file = std::path::PathBuf::from(&t.file);
    let name = match &t.name {
        Some(n) => n.clone(),
        None => file.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string(),
    };
    if name.is_empty() {
        return Err(FieldError::new(format!("{p}.name"), "must not be empty"));
    }
    let mut g = crate::trace::TraceGroupConfig::new(&name, file);
    if let Some(f) = &t.format {
        g.format = Some(Format::parse(f).map_err(|m| FieldError::new(format!("{p}.format"), m))?);
    }
    g.mode = match t.mode.as_deref() {
        None | Some("open") => Mode::Open,
        Some("closed") => Mode::Closed,
        Some(o) => {
            return Err(FieldError::new(
                format!("{p}.mode"),
                format!("unknown mode `{o}`; expected `open` or `closed`"),
            ));
        }
    };
    let positive = |v: f64, k: &str| -> Res<f64> {
        if !(v.is_finite() && v > 0.0 && v <= 1e9) {
            return Err(FieldError::new(
                format!("{p}.{k}"),
                format!("must be a finite number > 0 (at most 1e9), got {v}"),
            ));
        }
        Ok(v)
    };
    g.scale = match (t.time_scale, t.target_rate_per_s) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new(
                format!("{p}.target_rate_per_s"),
                "set either time_scale or target_rate_per_s, not both",
            ));
        }
        (Some(f), None) => Scale::Factor(positive(f, "time_scale")?),
        (None, Some(r)) => Scale::TargetRate(positive(r, "target_rate_per_s")?),
        (None, None) => Scale::Factor(1.0),
    };
    g.start_s = secs(t.start_s.unwrap_or(0.0), &format!("{p}.start_s"), true)?.0 as f64 / 1e9;
    if let Some(d) = t.duration_s {
        secs(d, &format!("{p}.duration_s"), false)?;
        g.duration_s = Some(d);
    }
    g.at = SimTime(secs(t.at_s.unwrap_or(0.0), &format!("{p}.at_s"), true)?.0);
    if let Some(m) = t.max_requests {
        g.max_requests = Some(u64::from(count(m, &format!("{p}.max_requests"), 1)?));
    }
    g.repeat = count(t.repeat.unwrap_or(1), &format!("{p}.repeat"), 1)?;
    if g.repeat > 1_000_000 {
        return Err(FieldError::new(format!("{p}.repeat"), "at most 1000000"));
    }
    if let Some(j) = t.arrival_jitter_s {
        secs(j, &format!("{p}.arrival_jitter_s"), true)?;
        g.arrival_jitter_s = j;
    }
    if let Some(m) = &t.sessions {
        g.sessions = SessionMode::parse(m).map_err(|e| FieldError::new(format!("{p}.sessions"), e))?;
    }
    if let Some(i) = &t.infer {
        let q = format!("{p}.infer");
        if let Some(v) = i.min_shared_blocks {
            g.infer.min_shared_blocks = count(v, &format!("{q}.min_shared_blocks"), 1)?;
        }
        if let Some(v) = i.max_fanout {
            g.infer.max_fanout = count(v, &format!("{q}.max_fanout"), 1)?;
        }
        if let Some(v) = i.max_gap_s {
            g.infer.max_gap_ns = Some(secs(v, &format!("{q}.max_gap_s"), true)?.0);
        }
        if let Some(v) = i.min_growth_tokens {
            g.infer.min_growth_tokens = count(v, &format!("{q}.min_growth_tokens"), 0)?;
        }
    }
    if let Some(sy) = &t.synthesize {
        let q = format!("{p}.synthesize");
        if let Some(v) = sy.mean_turns {
            if !(v.is_finite() && (1.0..=1e6).contains(&v)) {
                return Err(FieldError::new(
                    format!("{q}.mean_turns"),
                    format!("must be between 1 and 1e6, got {v}"),
                ));
            }
            g.synthesize.mean_turns = v;
        }
        if let Some(v) = sy.max_open {
            g.synthesize.max_open = count(v, &format!("{q}.max_open"), 1)?;
        }
    }
    if let Some(v) = &t.session_arrival {
        g.agent.session_arrival = Some(arrival(v, &format!("{p}.session_arrival"))?);
    }
    crate::trace::agent_cfg::apply(
        &mut g.agent,
        g.format,
        t.columns.as_ref(),
        t.context.as_deref(),
        t.shared_prefix_tokens.as_ref(),
        t.session_attributes.as_deref(),
    )
    .map_err(|(k, m)| FieldError::new(format!("{p}.{k}"), m))?;
    g.sends_session_key = t.sends_session_key;
    g.skip_bad_rows = t.skip_bad_rows;
    if let Some(b) = t.block_tokens {
        g.block_tokens = Some(count(b, &format!("{p}.block_tokens"), 1)?);
    }
    g.service_time_s = match (&t.service_time_s, queueing) {
        (Some(v), true) => Some(dist(v, &format!("{p}.service_time_s"))?),
        (None, true) => {
            return Err(FieldError::new(
                p,
                "queueing backends need `service_time_s` (a distribution in seconds)",
            ));
        }
        (Some(_), false) => {
            return Err(FieldError::new(
                format!("{p}.service_time_s"),
                "only applies to backends.model = \"queueing\"; vLLM service time comes from the step-time model",
            ));
        }
        (None, false) => None,
    };
    Ok(g)
}

/// Resolves every `workload.traces[i].file` of `table` against `base` (the scenario file's
/// folder) into an absolute path, so the effective scenario runs from anywhere.
pub fn resolve_trace_files(table: &mut toml::Table, base: &Path) {
    let Some(toml::Value::Table(w)) = table.get_mut("workload") else {
        return;
    };
    let Some(toml::Value::Array(list)) = w.get_mut("traces") else {
        return;
    };
    for t in list {
        if let Some(toml::Value::String(f)) = t.get_mut("file") {
            let p = Path::new(f.as_str());
            let joined = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
            let abs = std::fs::canonicalize(&joined)
                .or_else(|_| std::path::absolute(&joined))
                .unwrap_or(joined);
            *f = abs.display().to_string();
        }
    }
}

/// Largest scenario file read (a scenario is a few KiB; this refuses a wrong file early).
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// Top-level tables that belong to other commands (`sim sweep`, `sim check`): a scenario may
/// carry them, `sim run` ignores them, and they never reach validation.
pub const TOOL_TABLES: [&str; 2] = ["sweep", "expect"];

/// A parsed scenario file with overrides applied but not yet validated: the starting point
/// of `sim run` and of every sweep point. Keeps the original text so that any error can be
/// located at its line.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file name used in messages.
    pub file: String,
    /// Names the scenario when the file has no `name`.
    pub stem: String,
    /// The text as read.
    pub text: String,
    /// The scenario table (overrides applied, [`TOOL_TABLES`] removed).
    pub table: toml::Table,
    /// The [`TOOL_TABLES`] present in the file.
    pub tools: toml::Table,
    /// Normalized paths set by overrides, with where each value came from.
    overridden: Vec<(String, String)>,
}

impl Source {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<Source, ScenarioError> {
        let file = path.display().to_string();
        let text =
            crate::atomic::read_text(path, MAX_SCENARIO_BYTES, "the scenario").map_err(|(location, message)| {
                ScenarioError {
                    file: file.clone(),
                    location,
                    path: String::new(),
                    message,
                }
            })?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
        Source::parse(&text, &file, stem)
    }

    /// Parses `text` (`file` is used in messages).
    pub fn parse(text: &str, file: &str, stem: &str) -> Result<Source, ScenarioError> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| ScenarioError {
            file: file.to_string(),
            location: e.span().map(|s| locate::line_col(text, s.start)),
            path: String::new(),
            message: format!("invalid TOML: {}", e.message().trim()),
        })?;
        let mut tools = toml::Table::new();
        for k in TOOL_TABLES {
            if let Some(v) = table.remove(k) {
                tools.insert(k.to_string(), v);
            }
        }
        Ok(Source {
            file: file.to_string(),
            stem: stem.to_string(),
            text: text.to_string(),
            table,
            tools,
            overridden: Vec::new(),
        })
    }

    /// Applies `path=value` overrides in order; `origin` (`--set`, `sweep axis band`) is
    /// named in any error the values later cause.
    pub fn apply(&mut self, sets: &[(String, String)], origin: &str) -> Result<(), ScenarioError> {
        for (k, v) in sets {
            // `expect.*` and `sweep.*` set the tool tables, not the scenario.
            let head = overrides::normalize(k);
            let head = head.split(['.', '[']).next().unwrap_or("");
            let table = if TOOL_TABLES.contains(&head) {
                &mut self.tools
            } else {
                &mut self.table
            };
            overrides::apply(table, k, v).map_err(|m| ScenarioError {
                file: self.file.clone(),
                location: None,
                path: overrides::normalize(k),
                message: format!("{origin}: {m}"),
            })?;
            self.overridden.push((overrides::normalize(k), origin.to_string()));
        }
        Ok(())
    }

    /// Attaches file, line and override origin to a validation error.
    pub fn error(&self, e: FieldError) -> ScenarioError {
        let under =
            |p: &str| e.path == *p || e.path.starts_with(&format!("{p}.")) || e.path.starts_with(&format!("{p}["));
        // The latest override of a path is the one in effect.
        let origin = self.overridden.iter().rev().find(|(p, _)| under(p)).map(|(_, o)| o);
        ScenarioError {
            file: self.file.clone(),
            location: if origin.is_some() {
                None
            } else {
                locate::locate(&self.text, &e.path)
            },
            message: match origin {
                Some(o) => format!("{} (value from {o})", e.message),
                None => e.message,
            },
            path: e.path,
        }
    }

    /// `file:line:col: path: message` for a key of this file.
    pub fn message(&self, path: &str, message: &str) -> String {
        self.error(FieldError::new(path, message)).to_string()
    }

    /// Validates the scenario without generating its workload.
    pub fn scenario(&self) -> Result<Scenario, ScenarioError> {
        let raw: ScenarioFile = from_value(&toml::Value::Table(self.resolved_table()), "").map_err(|mut e| {
            e.path = e.path.trim_start_matches('.').to_string();
            self.error(e)
        })?;
        validate(raw, &self.stem).map_err(|e| self.error(e))
    }

    /// Validates and generates the workload; also returns the effective scenario text
    /// (overrides applied, tool tables removed), which results record.
    pub fn build(&self) -> Result<(Scenario, Workload, String), ScenarioError> {
        let scenario = self.scenario()?;
        let workload = scenario.workload().map_err(|e| self.error(e))?;
        Ok((scenario, workload, self.effective()))
    }

    /// The effective scenario text (trace files as absolute paths).
    pub fn effective(&self) -> String {
        toml::to_string(&self.resolved_table()).unwrap_or_default()
    }

    /// The scenario table with trace files resolved against the scenario's folder.
    fn resolved_table(&self) -> toml::Table {
        let mut t = self.table.clone();
        let base = Path::new(&self.file).parent().unwrap_or(Path::new(""));
        resolve_trace_files(&mut t, base);
        t
    }

    /// The trace files the scenario replays (resolved), in order.
    pub fn trace_files(&self) -> Vec<std::path::PathBuf> {
        let t = self.resolved_table();
        let Some(toml::Value::Array(list)) = t.get("workload").and_then(|w| w.get("traces")) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|x| x.get("file").and_then(|f| f.as_str()).map(std::path::PathBuf::from))
            .collect()
    }

    /// Deserializes a tool table (`sweep`), with errors located like scenario keys.
    pub fn tool<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, ScenarioError> {
        match self.tools.get(name) {
            None => Ok(None),
            Some(v) => from_value(v, name).map(Some).map_err(|e| self.error(e)),
        }
    }
}

/// Loads, overrides (`--set path=value`, applied in order) and validates a scenario file.
/// The workload is generated too, so errors in it (e.g. a request larger than the KV cache)
/// surface here.
pub fn load(path: &Path, sets: &[(String, String)]) -> Result<(Scenario, Workload, String), ScenarioError> {
    let mut src = Source::read(path)?;
    src.apply(sets, "--set")?;
    src.build()
}

/// [`load`] from a string (`file` is used in messages). Also returns the effective
/// scenario text (after overrides), which results record.
pub fn load_str(
    text: &str,
    file: &str,
    stem: &str,
    sets: &[(String, String)],
) -> Result<(Scenario, Workload, String), ScenarioError> {
    let mut src = Source::parse(text, file, stem)?;
    src.apply(sets, "--set")?;
    src.build()
}

#[cfg(test)]
mod tests;
