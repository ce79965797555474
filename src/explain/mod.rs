//! `sim explain`: says, in plain language, why capacity was stranded in a run.
//!
//! Input is a finished run (its requests, decision audit and stranding episodes); nothing
//! here touches the simulation. For each of the worst episodes (stretches during which some
//! backend in service had a free slot while another queued, merged across short gaps):
//!
//! 1. **what**: which backends idled and for how long, which queued and how many;
//! 2. **who**: the requests that waited there, their sessions, and for each session the
//!    decision that *placed* it on the queued backend (its first turn there in the current
//!    run of turns);
//! 3. **why**: those decisions grouped by the branch the policy took, each with the cause
//!    that branch implies and the evidence from the audit: what the view said (values and
//!    their age) beside the truth at that instant;
//! 4. **latch**: how many later turns of those sessions followed them there through an
//!    affinity branch (prefix match, session hash, cache hit) whatever the load.
//!
//! The counterfactual (the same scenario and seed re-run with fresh signals or another
//! policy) is computed by the caller, which can run simulations; see
//! [`Counterfactual`].
//!
//! Owns: episode finding (`find.rs`) and the text (`render.rs`). May not see: the
//! simulation (it reads a finished [`crate::sim::RunResult`]). Invariant: the same run gives the same
//! explanation, byte for byte.

mod find;
mod render;
mod session;

use serde::Serialize;

use crate::metrics::round6;
use crate::time::{SimDuration, SimTime, ns_to_secs};

pub use find::explain;
pub use render::render;
pub use session::{
    FreshPick, IdleWhile, Journey, JourneyTurn, Queue, SeenBackend, SessionCounterfactual, journey, render_journey,
    session_outcome,
};

/// Knobs of the explanation.
#[derive(Clone, Copy, Debug)]
pub struct ExplainOptions {
    /// Episodes closer than this are one episode (stranding flickers between engine steps).
    pub merge_gap_s: f64,
    /// Episodes with fewer stranded slot-seconds are not explained.
    pub min_stranded_slot_s: f64,
    /// Explain at most this many episodes (the worst, shown in time order).
    pub max_episodes: usize,
    /// A view older than this counts as stale (default: the scrape interval). Integer
    /// nanoseconds, as the views' ages are, so the interval is compared exactly.
    pub stale_after: SimDuration,
}

impl ExplainOptions {
    /// Defaults for a run whose engine stats are scraped every `interval`.
    pub fn for_interval(interval: SimDuration) -> Self {
        ExplainOptions {
            merge_gap_s: 2.0,
            min_stranded_slot_s: 1.0,
            max_episodes: 3,
            stale_after: interval,
        }
    }

    /// True if a view entry of age `age` counts as stale.
    pub fn is_stale(&self, age: SimDuration) -> bool {
        age > self.stale_after
    }
}

/// What kind of reasoning put a session on a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// `_qps_routing`: dispatch counts in a window, not load.
    QpsWindow,
    /// A load-aware policy fell back to `_qps_routing` because engine stats were missing.
    MissingStats,
    /// A load-aware pick on scraped engine load that read zero for a busy backend.
    ZeroStats,
    /// A load-aware pick on a view that was stale (older than the threshold, or reused
    /// for several decisions while the truth moved).
    StaleView,
    /// A load-aware pick whose view was fresh and right at the time.
    LoadView,
    /// Cache or session affinity: prefix match, session hash, cache-tree heuristics.
    Affinity,
    /// A score mixing affinity and load.
    Score,
    /// Load-blind: random or round robin.
    Blind,
    /// The pick was the only endpoint listed: the others were out of the fleet.
    NoChoice,
}

impl Cause {
    fn text(self) -> &'static str {
        match self {
            Cause::QpsWindow => {
                "`_qps_routing` ranks endpoints by how many requests the router sent them in the last window (and picks an endpoint it never used first), not by how busy they are: a backend holding a few long requests looks quiet, one serving a chatty short-turn session looks busy"
            }
            Cause::MissingStats => {
                "engine stats were missing for an endpoint (a failed scrape, or one not scraped since discovery listed it), so the load-aware policy silently fell back to `_qps_routing`"
            }
            Cause::ZeroStats => {
                "the scraped load of the chosen backend read zero while the router itself had requests in flight to it (a metrics name the router does not parse, production-stack issue #1074), so it looked idle"
            }
            Cause::StaleView => {
                "the decisions read a stale engine-stats view: taken before the requests they had just sent reached the engines and shared by every decision until the next scrape, it showed the pick as (near) least loaded when in truth it was not"
            }
            Cause::LoadView => {
                "a load-aware pick that was right when made; the queue built up later (longer requests, or sessions growing) and nothing moves a session once placed"
            }
            Cause::Affinity => {
                "cache or session affinity: the policy follows the prefix (or key) to the backend that served it before, whatever its load"
            }
            Cause::Score => "a score mixing cache affinity and load favoured it",
            Cause::Blind => "a load-blind pick (random or round robin)",
            Cause::NoChoice => {
                "it was the only endpoint listed then (the others were out of the fleet), so the router had no choice; affinity kept the session there after they came back"
            }
        }
    }
}

/// A backend that had free slots during an episode.
#[derive(Clone, Debug, Serialize)]
pub struct IdleBackend {
    /// Name.
    pub backend: String,
    /// Seconds with a free slot.
    pub free_s: f64,
}

/// A backend that queued during an episode.
#[derive(Clone, Debug, Serialize)]
pub struct QueuedBackend {
    /// Name.
    pub backend: String,
    /// Longest queue.
    pub peak_waiting: u32,
    /// Integral of the queue, request-seconds.
    pub waiting_request_s: f64,
}

/// Decisions of one branch that placed sessions on the queued backend.
#[derive(Clone, Debug, Serialize)]
pub struct CauseGroup {
    /// Branch name (as in `decisions.csv`).
    pub branch: String,
    /// The cause.
    pub cause: Cause,
    /// Placing decisions.
    pub decisions: usize,
    /// Sessions placed.
    pub sessions: Vec<String>,
    /// First and last decision time, seconds.
    pub from_s: f64,
    /// ...
    pub until_s: f64,
    /// Distinct engine-stats views those decisions read.
    pub distinct_views: usize,
    /// Oldest engine-stats entry any of them read, seconds (0 if none read engine stats).
    pub max_view_age_s: f64,
    /// Largest true in-flight excess of the pick over the least-loaded backend.
    pub max_regret: u32,
    /// What the first decision saw, beside the truth.
    pub evidence: String,
}

/// One explained episode.
#[derive(Clone, Debug, Serialize)]
pub struct EpisodeStory {
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub until_s: f64,
    /// Stranded slot-seconds (integral of min(waiting, free slots)).
    pub stranded_slot_s: f64,
    /// Highest min(waiting, free slots).
    pub peak_stranded: u64,
    /// Backends with free slots, most idle first.
    pub idle: Vec<IdleBackend>,
    /// Backends that queued, longest queue first.
    pub queued: Vec<QueuedBackend>,
    /// Requests that waited on the main queued backend during the episode.
    pub waiting_requests: usize,
    /// Their sessions.
    pub sessions: Vec<String>,
    /// The placing decisions, by branch, most sessions first.
    pub causes: Vec<CauseGroup>,
    /// Sessions whose later turns all followed them there through an affinity branch.
    pub latched_sessions: Vec<String>,
    /// Those later turns.
    pub latched_turns: u64,
    /// The main cause.
    pub main_cause: Cause,
    /// Fleet changes, router restarts and signal faults up to the episode's end.
    pub context: Vec<String>,
}

/// A re-run of the same scenario and seed with one thing changed.
#[derive(Clone, Debug, Serialize)]
pub struct Counterfactual {
    /// What changed.
    pub label: String,
    /// The policy it ran.
    pub policy: String,
    /// Its idle_while_queued_s.
    pub idle_while_queued_s: f64,
    /// Its stranded_slot_s.
    pub stranded_slot_s: f64,
    /// Its TTFT p50, seconds.
    pub ttft_p50_s: f64,
    /// Its TTFT p99, seconds.
    pub ttft_p99_s: f64,
    /// Its largest number of sessions on one backend.
    pub peak_backend_sessions: u64,
}

impl Counterfactual {
    /// The figures of a run's summary.
    pub fn of(label: &str, s: &crate::metrics::Summary) -> Self {
        Counterfactual {
            label: label.to_string(),
            policy: s.policy.clone(),
            idle_while_queued_s: s.idle_while_queued_s,
            stranded_slot_s: s.stranded_slot_s,
            ttft_p50_s: s.ttft_s.p50,
            ttft_p99_s: s.ttft_s.p99,
            peak_backend_sessions: s.peak_backend_sessions,
        }
    }
}

/// How old the views were.
#[derive(Clone, Debug, Serialize)]
pub struct Staleness {
    /// Decisions that read engine stats.
    pub decisions_with_engine_view: u64,
    /// Of those, how many read an entry older than `stale_after_s`.
    pub older_than_threshold: u64,
    /// The threshold.
    pub stale_after_s: f64,
    /// Decisions whose pick had more requests in flight than the least-loaded backend.
    pub decisions_with_regret: u64,
    /// Sessions latched by a first pick that was not among the least loaded.
    pub latched_sessions: u64,
}

/// The whole explanation.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// Scenario.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Policy.
    pub policy: String,
    /// The run's idle_while_queued_s.
    pub idle_while_queued_s: f64,
    /// The run's stranded_slot_s.
    pub stranded_slot_s: f64,
    /// Share of stranded slot-seconds inside the explained episodes.
    pub explained_share: f64,
    /// Decisions were recorded only up to this many (None: all).
    pub audit_truncated_at: Option<usize>,
    /// The episodes, in time order.
    pub episodes: Vec<EpisodeStory>,
    /// View ages and regret over the whole run.
    pub staleness: Staleness,
    /// Re-runs, the actual run first.
    pub counterfactuals: Vec<Counterfactual>,
    /// What the autoscaler bought, when the run had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<ScaleStory>,
    /// The requests' concentration, when a concentration hint fires: the busiest backend's
    /// share and the mechanism that put the requests there, with the key that changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concentration: Option<Concentration>,
}

/// Where the requests went, when most of them went to few backends.
#[derive(Clone, Debug, Serialize)]
pub struct Concentration {
    /// The busiest backend.
    pub backend: String,
    /// Its requests.
    pub requests: u64,
    /// Requests routed.
    pub of: u64,
    /// Backends in service that served nothing.
    pub never_served: u64,
    /// Jain's index of requests per slot (1 = even, 1/n = all on one).
    pub jain_index: f64,
    /// The mechanism the audit shows (None: no rule applies).
    pub mechanism: Option<crate::hints::Mechanism>,
}

impl Concentration {
    /// The concentration of the run of `s` with audit `log`, if a concentration hint fires.
    pub fn of(s: &crate::metrics::Summary, log: &crate::metrics::DecisionLog) -> Option<Concentration> {
        if crate::hints::share_hints(s).is_empty() {
            return None;
        }
        let busiest = s
            .backends
            .iter()
            .max_by(|a, b| a.requests.cmp(&b.requests).then(b.name.cmp(&a.name)))?;
        Some(Concentration {
            backend: busiest.name.clone(),
            requests: busiest.requests,
            of: s.backends.iter().map(|b| b.requests).sum(),
            never_served: s.backends_never_served,
            jain_index: s.request_jain_index,
            mechanism: crate::hints::concentration_cause(log, s),
        })
    }
}

/// An autoscaled run's scale-ups and whether they bought anything.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleStory {
    /// Scale-ups.
    pub scale_ups: u64,
    /// The first: when, from, to, the value it read and the controller's reason.
    pub first_up: Option<(f64, u32, u32, Option<f64>, String)>,
    /// Pods added that served no request.
    pub replicas_never_served: u64,
    /// Backends whose pods cost time and served nothing.
    pub idle_backends: Vec<String>,
    /// Replica-seconds Ready and idle while another backend queued.
    pub replica_seconds_idle_while_queued: f64,
    /// Sessions latched on a first pick that was not among the least loaded.
    pub latched_sessions: u64,
}

impl ScaleStory {
    /// Of a run's summary (`None` without an autoscaler).
    pub fn of(s: &crate::metrics::Summary) -> Option<ScaleStory> {
        let a = s.autoscale.as_ref()?;
        Some(ScaleStory {
            scale_ups: a.scale_ups,
            first_up: a
                .scale_events
                .iter()
                .find(|e| e.to > e.from)
                .map(|e| (e.t_s, e.from, e.to, e.metric, e.reason.clone())),
            replicas_never_served: a.replicas_never_served,
            idle_backends: s
                .backends
                .iter()
                .filter(|b| b.requests == 0 && b.cost.as_ref().is_some_and(|c| c.replica_seconds > 0.0))
                .map(|b| b.name.clone())
                .collect(),
            replica_seconds_idle_while_queued: a.replica_seconds_idle_while_queued,
            latched_sessions: s.latched_sessions,
        })
    }
}

pub(super) fn secs(t: SimTime) -> f64 {
    round6(ns_to_secs(t.0))
}
