//! The raw scenario file: serde structs mirroring the TOML as written, with
//! `deny_unknown_fields` so a misspelt key is an error naming it. No validation here; the
//! defaults live in [`super::defaults`].

use schemars::JsonSchema;
use serde::Deserialize;

use super::defaults::{
    default_cpt, default_dispatch, default_front, default_kv_lag, default_max_events, default_replicas,
    default_response, default_retries, default_retry_initial, default_retry_max, default_scrape, default_seed,
    default_window, one, yes, zero,
};

/// The scenario file as written.
#[derive(Debug, Deserialize, JsonSchema)]
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
    /// The fleet (`[backends]`, validated in `backends.rs`).
    #[schemars(schema_with = "super::backends::schema")]
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
    /// An HPA or a KEDA ScaledObject over the fleet (`[autoscaler]`).
    pub autoscaler: Option<super::autoscaler::AutoscalerFile>,
    /// Latency targets (`[slo]`): attainment and goodput in the summary.
    pub slo: Option<super::slo::SloFile>,
    /// Dollars per GPU-hour by GPU (`[price]`, e.g. `h100 = 2.99`), over the stated list
    /// prices.
    pub price: Option<std::collections::BTreeMap<String, f64>>,
}

/// `[[fleet_events]]`: a membership change of one backend.
#[derive(Debug, Deserialize, JsonSchema)]
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
#[derive(Debug, Deserialize, JsonSchema)]
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

/// `[[router_events]]`: `kind = "restart"` at `at_s` (all replicas, or `replica`).
#[derive(Debug, Deserialize, JsonSchema)]
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
#[derive(Debug, Deserialize, JsonSchema)]
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

/// `[limits]`.
#[derive(Debug, Deserialize, JsonSchema)]
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

/// `[network]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// Router to engine queue (HTTP, API server, tokeniser); default 2 ms.
    #[serde(default = "default_dispatch")]
    pub dispatch_latency_s: f64,
    /// Engine to router/client per chunk; default 1 ms.
    #[serde(default = "default_response")]
    pub response_latency_s: f64,
}

/// `[router]`.
#[derive(Debug, Deserialize, JsonSchema)]
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
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub policy: Option<toml::Table>,
}

/// `[workload]`.
#[derive(Debug, Deserialize, JsonSchema)]
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
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceFile {
    /// The trace, relative to the scenario file.
    pub file: String,
    /// Group name (default: the file stem).
    pub name: Option<String>,
    /// `native`, `mooncake`, `azure`, `burstgpt`, `dynamo`, `otel` or `sessions` (default:
    /// detected from the content; `sessions` when `columns` is given).
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
    /// Count malformed rows (0 prompt tokens, calls larger than the KV cache, ...) and
    /// skip them instead of failing.
    #[serde(default)]
    pub skip_bad_rows: bool,
    /// `format = "sessions"`: keep only rows whose columns hold these values, e.g.
    /// `{ is_error = false }` (a value or a list of values per column).
    #[serde(rename = "where")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub where_: Option<toml::Value>,
    /// Truncate each call's prompt so prompt + output holds at most this many tokens (an
    /// agent harness's context truncation).
    pub max_context_tokens: Option<i64>,
    /// Cut every gap in which no call of the trace is in flight to at most this many
    /// seconds (multi-day traces).
    pub max_idle_gap_s: Option<f64>,
    /// Tokens per trace block (default 512).
    pub block_tokens: Option<i64>,
    /// Service time per request, seconds (queueing backends).
    #[schemars(with = "Option<serde_json::Value>")]
    pub service_time_s: Option<toml::Value>,
    /// `format = "sessions"`: which column holds what.
    #[schemars(with = "Option<serde_json::Value>")]
    pub columns: Option<toml::Value>,
    /// When sessions of a trace of offsets open (`kind = "burst" | "poisson" | "interval"`).
    #[schemars(with = "Option<serde_json::Value>")]
    pub session_arrival: Option<toml::Value>,
    /// `append` (default) or `independent`: content of calls without hashes.
    pub context: Option<String>,
    /// Prefix shared across sessions: tokens, or a table of tokens per model name.
    #[schemars(with = "Option<serde_json::Value>")]
    pub shared_prefix_tokens: Option<toml::Value>,
    /// Characters per token of a shared part recorded in characters
    /// (`columns.shared_prefix_chars`; default 4).
    pub chars_per_token: Option<f64>,
    /// `format = "otel"`: attributes naming the session, in order.
    pub session_attributes: Option<Vec<String>>,
}

/// `[workload.traces.infer]`.
#[derive(Debug, Deserialize, JsonSchema)]
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
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SynthFile {
    /// Mean turns per session (default 4).
    pub mean_turns: Option<f64>,
    /// Sessions a request may continue (default 64).
    pub max_open: Option<i64>,
}

/// `[[workload.groups]]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupFile {
    /// Group name (unique).
    pub name: String,
    /// Number of sessions.
    pub sessions: i64,
    /// Arrival process table (`kind = "burst" | "poisson" | "interval"`).
    #[schemars(with = "serde_json::Value")]
    pub arrival: toml::Value,
    /// Turns per session (distribution).
    #[serde(default = "one")]
    #[schemars(with = "serde_json::Value")]
    pub turns: toml::Value,
    /// Shared system prompt tokens.
    #[serde(default)]
    pub system_prompt_tokens: i64,
    /// Shared prompt name (default: the group name).
    pub system_prompt: Option<String>,
    /// New tokens in turn 1 (default: `input_tokens`).
    #[schemars(with = "Option<serde_json::Value>")]
    pub first_input_tokens: Option<toml::Value>,
    /// New tokens per later turn.
    #[schemars(with = "serde_json::Value")]
    pub input_tokens: toml::Value,
    /// Output tokens per turn.
    #[schemars(with = "serde_json::Value")]
    pub output_tokens: toml::Value,
    /// Think time between turns, seconds.
    #[serde(default = "zero")]
    #[schemars(with = "serde_json::Value")]
    pub think_time_s: toml::Value,
    /// Service time per request, seconds (queueing backends).
    #[schemars(with = "Option<serde_json::Value>")]
    pub service_time_s: Option<toml::Value>,
    /// Send the session key header (default true).
    #[serde(default = "yes")]
    pub sends_session_key: bool,
    /// Per-session context cap in tokens.
    pub max_context_tokens: Option<i64>,
    /// `chat` (the default: `/v1/chat/completions` with `messages`, as agents send) or
    /// `completions` (one `prompt` string). Routers that read the prompt treat the two
    /// differently.
    #[schemars(with = "Option<String>")]
    pub request_api: Option<fleetsim_core::workload::RequestApi>,
    /// The model its requests name (the request's `model` field): the router sends them
    /// only to backends serving it (`serves` of a backend group). Default: none, any
    /// backend serves them.
    pub model: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BurstFile {
    pub(super) at_s: f64,
    #[serde(default)]
    pub(super) spread_s: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PoissonFile {
    #[serde(default)]
    pub(super) start_s: f64,
    pub(super) rate_per_s: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct IntervalFile {
    #[serde(default)]
    pub(super) start_s: f64,
    pub(super) every_s: f64,
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

impl Default for LimitsFile {
    fn default() -> Self {
        LimitsFile {
            max_sim_time_s: None,
            max_events: default_max_events(),
            max_memory_gib: None,
        }
    }
}

impl Default for NetworkFile {
    fn default() -> Self {
        NetworkFile {
            dispatch_latency_s: default_dispatch(),
            response_latency_s: default_response(),
        }
    }
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
