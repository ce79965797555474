//! The simulation: owns every component and is the only place that touches several of them
//! in one step (one `match` over `Event`, in `Simulation::handle`). The handlers it
//! dispatches to are grouped by concern: `requests` (sessions, routing, arrival at the
//! engine, completion, failures and retries), `steps` (engine iterations and queueing
//! service), `signals` (scrapes, gauge history, the KV-event feed), `membership`
//! (backends joining, draining, leaving, restarting) and `recording` (invariants and the
//! summary).
//!
//! ```text
//!  client sessions ──TurnArrival──▶ Router ──(dispatch latency)──▶ Backend (engine)
//!        ▲                           │  ▲                             │ steps
//!        │ think time                │  └──ScrapeRead (gauges)───────┤
//!        └──────Complete◀── (response latency) ◀──FirstChunk/finish──┘
//! ```
//!
//! # Ordering contract
//!
//! Time is integer nanoseconds ([`SimTime`]). Every scheduled event gets `seq`, a global
//! counter of pushes, and events run in `(time, seq)` order: earlier first, and at one
//! instant in the order they were scheduled. A handler that schedules several events for
//! the same instant therefore fixes their order by the order of its `schedule` calls (a
//! finishing step schedules first chunks before completions, for example). Session opens
//! come from the workload's sorted cursor instead of the queue and count as scheduled at
//! time zero: at equal time they run before every queued event. Nothing else breaks ties,
//! so a run is a pure function of the scenario and its seed (no wall clock, no thread
//! count, no hash-map iteration order). Engine steps may wait in per-backend lanes beside
//! the heap ([`EngineMode::Fast`], [`crate::engine`]); they take `seq` from the same
//! counter, so the order is exactly the reference mode's. Events are never removed: a
//! step of a replaced engine carries the old incarnation and is ignored when it pops.
//! Engines coalesce pure-decode steps in the fast mode
//! (`backend::vllm` stretches). A stretch's certain steps may take no queue event at all
//! (`collapse`): they are keyed as the reference mode orders them, passed in that order
//! before each event, and run when something reads their engine.

use crate::backend::queueing::QueueingServer;
use crate::backend::vllm::{StepEvents, VllmConfig, VllmEngine};
use crate::backend::{Backend, Engine, EngineRef, Engines};
use crate::engine::EventQueue;
use crate::fleet::{ClientConfig, FleetEvent, FleetEventKind, Membership};
use crate::ids::{BackendId, ReplicaId, RequestId, ScrapeSlot, SessionId};
use crate::metrics::{DecisionLog, EngineCounters, FleetTracker, RecordSink, RecordWindow, RequestRec, Summary, TsRow};
use crate::policy::{Branch, EndpointInfo};
use crate::rng::{SimRng, stream};
use crate::router::{Router, RouterConfig};
use crate::time::{SimDuration, SimTime};
use crate::workload::Workload;

mod autoscaling;
mod collapse;
mod membership;
mod recording;
mod requests;
mod signals;
mod steps;

pub use crate::router::front::FrontBalancer;
use crate::router::front::FrontState;
use signals::GaugeHistory;

/// Backend model selection.
#[derive(Clone, Debug, PartialEq)]
pub enum BackendModel {
    /// vLLM v1 engines.
    Vllm(VllmConfig),
    /// c-server queues.
    Queueing {
        /// Servers per backend.
        slots: u32,
    },
}

/// Everything a run needs besides the workload (the validated scenario).
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Scenario name.
    pub name: String,
    /// Master seed.
    pub seed: u64,
    /// Backend names and URLs, in discovery order.
    pub backends: Vec<(String, String)>,
    /// Backend model, one per backend in discovery order (all vLLM or all queueing).
    pub models: Vec<BackendModel>,
    /// Group and profile per backend, for outputs.
    pub labels: Vec<crate::backend::Label>,
    /// Router.
    pub router: RouterConfig,
    /// Router to engine: HTTP, API server, tokenisation.
    pub dispatch_latency: SimDuration,
    /// Engine to router / client, per response chunk.
    pub response_latency: SimDuration,
    /// How far behind the engine's state its `/metrics` values are.
    pub gauge_lag: SimDuration,
    /// Stop at this simulated time even if work remains.
    pub max_sim_time: Option<SimTime>,
    /// Refuse to process more than this many events.
    pub max_events: u64,
    /// Signal faults and slowdowns.
    pub faults: Vec<crate::faults::Fault>,
    /// Router restarts: when, and which replica (None = all).
    pub router_restarts: Vec<(SimTime, Option<u16>)>,
    /// Backends joining, leaving, draining, restarting.
    pub fleet_events: Vec<FleetEvent>,
    /// What clients do when a request fails.
    pub client: ClientConfig,
    /// An autoscaler over the fleet (`[autoscaler]`): backends past its initial replicas
    /// start absent, a pool it creates pods in.
    pub autoscaler: Option<crate::autoscale::AutoscalerConfig>,
    /// Latency targets per session group (`[slo]`): attainment and goodput in the summary.
    pub slo: Option<crate::metrics::SloConfig>,
    /// Each backend's GPUs and price (`[slo]` or `[price]`): a fixed fleet's cost in the
    /// summary.
    pub prices: Option<Vec<crate::metrics::BackendPrice>>,
}

impl SimConfig {
    /// The counterfactual with fresh signals: every decision sees the engines' live gauges,
    /// request stats and KV events without delay, and no signal fault applies (slowdowns
    /// stay: they are real capacity, not signals).
    pub fn with_fresh_signals(&self) -> SimConfig {
        let mut c = self.clone();
        c.router.fresh_signals = true;
        c.router.request_stats_lag = SimDuration::ZERO;
        c.router.kv_event_lag = SimDuration::ZERO;
        c.gauge_lag = SimDuration::ZERO;
        c.faults
            .retain(|f| matches!(f.kind, crate::faults::FaultKind::Slowdown(_)));
        c
    }
}

/// Output switches.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Keep the per-backend time series.
    pub record_series: bool,
    /// Keep the decision audit (views and truth per decision).
    pub record_decisions: bool,
    /// Check every invariant after every event (slow; for tests and `--invariants`).
    pub check_invariants: bool,
    /// Keep the log of every event processed (`sim check --determinism`).
    pub record_event_log: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            record_series: true,
            record_decisions: true,
            check_invariants: false,
            record_event_log: false,
        }
    }
}

impl RunOptions {
    /// Summary only: no series, decisions, event log or checks (sweeps, benchmarks).
    pub fn summary_only() -> Self {
        RunOptions {
            record_series: false,
            record_decisions: false,
            check_invariants: false,
            record_event_log: false,
        }
    }
}

/// Which event-loop implementation runs a scenario. Both give byte-identical outputs (the
/// differential test `tests/it/engine_modes.rs` holds them to it); the reference mode is
/// the plain per-iteration loop the faster one is checked against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineMode {
    /// Engine steps in per-backend lanes beside the heap (see [`crate::engine`]),
    /// pure-decode steps coalesced, each engine's KV cache kept per run
    /// ([`crate::backend::kv::RunPool`]).
    #[default]
    Fast,
    /// Every event through one binary heap, one event per engine iteration, the KV
    /// cache kept per block ([`crate::backend::kv::BlockPool`]).
    Reference,
}

/// What kind of event a record is; its name is what the event log, `sim check
/// --determinism` and the engine-mode tests print, and its code what the log hash reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A session opens or sends its next turn.
    TurnArrival,
    /// A request reaches its backend.
    BackendArrival,
    /// A vLLM engine step ends.
    StepDone,
    /// A queueing server finishes a request.
    ServiceDone,
    /// A first response chunk reaches the router.
    FirstChunk,
    /// A response completes at the router.
    Complete,
    /// A dispatch reaches the router's request stats (`request_stats_lag_s`).
    RecordDispatch,
    /// A replica reads one backend's `/metrics`.
    ScrapeRead,
    /// A replica's scrape pass ends.
    ScrapePassEnd,
    /// A router replica restarts.
    RouterRestart,
    /// A scheduled fleet event.
    Fleet,
    /// A restarted backend is back.
    Rejoin,
    /// The client learns that a request failed.
    Fail,
    /// The client retries a turn.
    Resend,
    /// A paced replay session sends a turn.
    Issue,
    /// Prometheus scrapes the pods (`[autoscaler]`).
    PromScrape,
    /// The HPA reconciles.
    HpaSync,
    /// KEDA polls its trigger.
    KedaPoll,
    /// A new pod is Ready.
    PodReady,
    /// A deleted pod is killed (its drain is over).
    PodKill,
}

impl EventKind {
    /// Every kind, in code order.
    pub const ALL: [EventKind; 20] = [
        EventKind::TurnArrival,
        EventKind::BackendArrival,
        EventKind::StepDone,
        EventKind::ServiceDone,
        EventKind::FirstChunk,
        EventKind::Complete,
        EventKind::RecordDispatch,
        EventKind::ScrapeRead,
        EventKind::ScrapePassEnd,
        EventKind::RouterRestart,
        EventKind::Fleet,
        EventKind::Rejoin,
        EventKind::Fail,
        EventKind::Resend,
        EventKind::Issue,
        EventKind::PromScrape,
        EventKind::HpaSync,
        EventKind::KedaPoll,
        EventKind::PodReady,
        EventKind::PodKill,
    ];

    /// The kind's name (stable: logs and tests compare it).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::TurnArrival => "TurnArrival",
            EventKind::BackendArrival => "BackendArrival",
            EventKind::StepDone => "StepDone",
            EventKind::ServiceDone => "ServiceDone",
            EventKind::FirstChunk => "FirstChunk",
            EventKind::Complete => "Complete",
            EventKind::RecordDispatch => "RecordDispatch",
            EventKind::ScrapeRead => "ScrapeRead",
            EventKind::ScrapePassEnd => "ScrapePassEnd",
            EventKind::RouterRestart => "RouterRestart",
            EventKind::Fleet => "Fleet",
            EventKind::Rejoin => "Rejoin",
            EventKind::Fail => "Fail",
            EventKind::Resend => "Resend",
            EventKind::Issue => "Issue",
            EventKind::PromScrape => "PromScrape",
            EventKind::HpaSync => "HpaSync",
            EventKind::KedaPoll => "KedaPoll",
            EventKind::PodReady => "PodReady",
            EventKind::PodKill => "PodKill",
        }
    }

    /// The kind's code (its position above), for hashing a log.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// One processed event: when, what kind, and the ids it carries. Two runs of the same
/// inputs produce identical logs; the first differing entry is where they diverged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Simulated time.
    pub t: SimTime,
    /// Event kind.
    pub kind: EventKind,
    /// First id (session, request, backend or scrape slot).
    pub a: u32,
    /// Second id (the request of a `ServiceDone`, the replica of a scrape or restart),
    /// else 0.
    pub b: u32,
}

impl EventRecord {
    /// The event kind's name.
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    fn of(t: SimTime, ev: &Event) -> EventRecord {
        use EventKind as K;
        let (kind, a, b) = match *ev {
            Event::TurnArrival { session } => (K::TurnArrival, session.0, 0),
            Event::BackendArrival { request } => (K::BackendArrival, request.0, 0),
            Event::StepDone { backend, .. } => (K::StepDone, backend.0, 0),
            Event::ServiceDone { backend, request, .. } => (K::ServiceDone, backend.0, request.0),
            Event::FirstChunk { request } => (K::FirstChunk, request.0, 0),
            Event::Complete { request } => (K::Complete, request.0, 0),
            Event::RecordDispatch { request } => (K::RecordDispatch, request.0, 0),
            Event::ScrapeRead { replica, slot } => (K::ScrapeRead, slot.0, replica.0),
            Event::ScrapePassEnd { replica } => (K::ScrapePassEnd, 0, replica.0),
            Event::RouterRestart { replica } => (K::RouterRestart, 0, replica.0),
            Event::Fleet { index } => (K::Fleet, index, 0),
            Event::Rejoin { backend } => (K::Rejoin, backend.0, 0),
            Event::Fail { request } => (K::Fail, request.0, 0),
            Event::Resend { session, turn } => (K::Resend, session.0, turn),
            Event::Issue { session, turn } => (K::Issue, session.0, turn),
            Event::PromScrape => (K::PromScrape, 0, 0),
            Event::HpaSync => (K::HpaSync, 0, 0),
            Event::KedaPoll => (K::KedaPoll, 0, 0),
            Event::PodReady { backend, generation } => (K::PodReady, backend.0, generation),
            Event::PodKill { backend, generation } => (K::PodKill, backend.0, generation),
        };
        EventRecord { t, kind, a, b }
    }
}

/// Why a run stopped early.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    /// The event cap was hit.
    #[error(
        "the run exceeded limits.max_events = {0} events at t = {1}; raise limits.max_events or shorten the workload"
    )]
    TooManyEvents(u64, SimTime),
    /// The run would pass the simulator's time horizon.
    #[error(
        "the run reached the time horizon (1e18 ns, about 31.7 years of simulated time) at t = {0}; limits.max_sim_time_s stops a run earlier; else shorten workload.groups[].think_time_s or workload.traces[].time_scale"
    )]
    Horizon(SimTime),
    /// An invariant check failed.
    #[error("invariant violated at t = {0}: {1}")]
    Invariant(SimTime, String),
}

/// A finished run.
pub struct RunResult {
    /// The summary.
    pub summary: Summary,
    /// Per-request records, by request id.
    pub requests: Vec<RequestRec>,
    /// Per-backend time series.
    pub series: Vec<TsRow>,
    /// Decision audit.
    pub decisions: DecisionLog,
    /// Session keys by session id (for files).
    pub session_keys: Vec<String>,
    /// Stretches of idle_while_queued time, when series are recorded.
    pub episodes: Vec<crate::metrics::Episode>,
    /// Every event processed, when [`RunOptions::record_event_log`] is set.
    pub event_log: Vec<EventRecord>,
    /// Engine iterations taken in coalesced pure-decode stretches, all engines
    /// ([`EngineMode::Fast`]; zero in the reference mode). A speed figure for `sim bench`
    /// and the tests, written to no output file.
    pub coalesced_steps: u64,
    /// Of those, the iterations taken as virtual steps of collapsed stretches (handled
    /// without a queue event; see `sim::collapse`). A speed figure, like `coalesced_steps`.
    pub collapsed_steps: u64,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    TurnArrival {
        session: SessionId,
    },
    BackendArrival {
        request: RequestId,
    },
    /// `incarnation`: the engine incarnation that started the step (a restart makes it stale).
    StepDone {
        backend: BackendId,
        incarnation: u32,
    },
    ServiceDone {
        backend: BackendId,
        request: RequestId,
        incarnation: u32,
    },
    FirstChunk {
        request: RequestId,
    },
    Complete {
        request: RequestId,
    },
    RecordDispatch {
        request: RequestId,
    },
    ScrapeRead {
        replica: ReplicaId,
        slot: ScrapeSlot,
    },
    ScrapePassEnd {
        replica: ReplicaId,
    },
    RouterRestart {
        replica: ReplicaId,
    },
    /// `cfg.fleet_events[index]` happens.
    Fleet {
        index: u32,
    },
    /// A restarted backend is back.
    Rejoin {
        backend: BackendId,
    },
    /// The client learns that `request` failed.
    Fail {
        request: RequestId,
    },
    /// The client sends `turn` of `session` again.
    Resend {
        session: SessionId,
        turn: u32,
    },
    /// A replayed session sends `turn` (happens-before pacing, [`crate::workload::pacing`]).
    Issue {
        session: SessionId,
        turn: u32,
    },
    /// Prometheus scrapes every Ready pod.
    PromScrape,
    /// The HPA's reconcile.
    HpaSync,
    /// KEDA's poll.
    KedaPoll,
    /// Pod `generation` of `backend` is Ready.
    PodReady {
        backend: BackendId,
        generation: u32,
    },
    /// Pod `generation` of `backend` is killed.
    PodKill {
        backend: BackendId,
        generation: u32,
    },
}

/// One backend's state in the run, beside its engine (which lives in [`Engines`], typed by
/// model).
struct Node {
    /// In the fleet, draining, or not.
    membership: Membership,
    /// Engine incarnation (a leave or restart starts a new one; older steps are stale).
    incarnation: u32,
    /// Counters of replaced engine incarnations.
    retired: EngineCounters,
    /// Coalesced steps of replaced engine incarnations.
    retired_coalesced: u64,
    /// Published gauges over time, for lagged scrapes.
    gauges: GaugeHistory,
    /// Keep gauge history this far back (metrics lag, extra-lag faults); zero keeps none.
    history: SimDuration,
    /// Requests routed to it and not yet finished or failed.
    outstanding: u32,
    /// Requests routed to it over the run.
    routed: u64,
    /// Its collapsed stretch (see `collapse`; vLLM engines only).
    collapsed: Option<collapse::Collapse>,
}

/// What the run records per request, by request id.
struct RequestLog {
    /// The request records (the run's `requests` output): all of them, or those not yet
    /// handed to a sink that takes them (indexed by request id either way).
    requests: RecordWindow,
    /// The replica that routed each request.
    replica_of: Vec<ReplicaId>,
    /// Router request-stats progress per request (`STATS_*` flags).
    stats_state: Vec<u8>,
    /// The policy branch of each decision.
    branches: Vec<Branch>,
    /// Per decision: true outstanding of the pick minus the true minimum.
    regrets: Vec<u32>,
    /// Per decision with engine stats: age of the oldest entry seen, ns.
    view_ages: Vec<u64>,
}

impl RequestLog {
    fn with_capacity(n: usize) -> Self {
        RequestLog {
            requests: RecordWindow::new(false, n),
            replica_of: Vec::with_capacity(n),
            stats_state: Vec::with_capacity(n),
            branches: Vec::with_capacity(n),
            regrets: Vec::with_capacity(n),
            view_ages: Vec::with_capacity(n),
        }
    }
}

/// The run's random streams beside the routers' (which derive theirs per replica, see
/// [`Router::new`]): one named stream per purpose, all from the master seed.
struct Streams {
    /// Client retry jitter (`client.retry`).
    retry: SimRng,
}

impl Streams {
    fn new(seed: u64) -> Self {
        Streams {
            retry: stream(seed, "client.retry", 0),
        }
    }
}

/// Per-request progress of router-side request stats (bit flags).
const STATS_RECORDED: u8 = 1;
const STATS_RESPONSE: u8 = 2;
const STATS_COMPLETE: u8 = 4;

#[derive(Clone, Debug, Default)]
struct SessionState {
    next_turn: u32,
    first_backend: Option<BackendId>,
    last_backend: Option<BackendId>,
    first_turn_suboptimal: bool,
    stayed: bool,
}

/// Runs one scenario on its workload; returns the result and the wall time of the loop.
pub fn run(
    cfg: SimConfig,
    workload: &Workload,
    opts: RunOptions,
) -> Result<(RunResult, std::time::Duration), SimError> {
    run_mode(cfg, workload, opts, EngineMode::Fast)
}

/// [`run`] with an explicit engine mode (`sim run --engine reference`).
pub fn run_mode(
    cfg: SimConfig,
    workload: &Workload,
    opts: RunOptions,
    mode: EngineMode,
) -> Result<(RunResult, std::time::Duration), SimError> {
    let sim = Simulation::with_mode(cfg, workload, opts, mode);
    let t0 = std::time::Instant::now();
    let res = sim.run()?;
    Ok((res, t0.elapsed()))
}

/// [`run_mode`] handing the decision audit to `sink` in bounded batches as the run goes
/// (see [`crate::metrics::RecordSink`]) instead of keeping it: the result's `decisions` is
/// then empty, and every decision went to the sink, in order, exactly as [`run_mode`] would
/// have kept it. Needs `opts.record_decisions`. Likewise the request records and the time
/// series if the sink takes them (the result's `requests`, `series` then empty); the
/// summary is the same either way.
pub fn run_streamed(
    cfg: SimConfig,
    workload: &Workload,
    opts: RunOptions,
    mode: EngineMode,
    sink: &mut dyn RecordSink,
) -> Result<(RunResult, std::time::Duration), SimError> {
    let sim = Simulation::with_mode(cfg, workload, opts, mode).with_sink(sink);
    let t0 = std::time::Instant::now();
    let res = sim.run()?;
    Ok((res, t0.elapsed()))
}

/// A simulation instance (one run): the configuration, the event queue, the engines and
/// their per-backend state, the routers, the request log, and the run's counters.
pub struct Simulation<'w> {
    cfg: SimConfig,
    opts: RunOptions,
    workload: &'w Workload,
    queue: EventQueue<Event>,
    cursor: usize,
    /// The engines, by backend, in one vector per model.
    engines: Engines,
    /// Per-backend state beside the engines, by backend.
    nodes: Vec<Node>,
    /// Router replicas (one unless `router.replicas` says otherwise).
    routers: Vec<Router>,
    /// The fault timeline.
    faults: crate::faults::Faults,
    /// The front load balancer's state.
    front: FrontState,
    step_events: StepEvents,
    sessions: Vec<SessionState>,
    /// Per request: its record and the router's books on it.
    log: RequestLog,
    fleet: FleetTracker,
    decisions: DecisionLog,
    /// Where full batches of `decisions` go (`run_streamed`); none: the run keeps them.
    sink: Option<&'w mut dyn RecordSink>,
    /// Records on their way to the sink, and what the summary keeps of them.
    outflow: recording::Outflow,
    finished: usize,
    total: usize,
    events: u64,
    event_log: Vec<EventRecord>,
    past_horizon: bool,
    /// Inter-token gaps of finished requests: gap (ns) -> output tokens (exact). One
    /// hash-map update per gap run (a B-tree search per run, then sorted batches of runs,
    /// cost 3-4 % of bench-10k); sorted into the summary's histogram at the end, so its
    /// order never reaches an output.
    itl_counts: rustc_hash::FxHashMap<u64, u64>,
    /// Per session: failed attempts of its current turn.
    attempts: Vec<u32>,
    /// Open-loop sessions: failed attempts per `(session, turn)` with a retry pending.
    open_attempts: rustc_hash::FxHashMap<(u32, u32), u32>,
    /// Attempts refused for lack of endpoints.
    rejected: u64,
    /// Per request model (workload index): attempts refused because no backend of the
    /// fleet serves it.
    unserved: Vec<u64>,
    /// Planned turns given up after the last retry.
    abandoned: u64,
    streams: Streams,
    /// Engines coalesce pure-decode steps ([`EngineMode::Fast`]).
    coalesce: bool,
    /// Stretches may collapse into one lane event (`collapse`): the fast mode without a
    /// reader of every step (fresh signals, a KV-event feed, faults, fleet events,
    /// invariant checks).
    collapsible: bool,
    /// Backends with a collapsed stretch.
    collapsing: Vec<BackendId>,
    /// No virtual step is due before this time (the earliest one's, or earlier).
    virtual_next: SimTime,
    /// Virtual steps run so far.
    collapsed_steps: u64,
    /// The autoscaler and its pods (`[autoscaler]`).
    scaler: Option<autoscaling::Scaler>,
}

/// The router replicas, each with its own policy state, knowing the `listed` endpoints
/// and which of them serve each of the request `models`.
fn replicas(cfg: &SimConfig, listed: &[bool], models: &[String]) -> Vec<Router> {
    let serves = served_models(&cfg.labels, models);
    let endpoints: Vec<EndpointInfo> = cfg
        .backends
        .iter()
        .enumerate()
        .map(|(i, (_, url))| EndpointInfo {
            backend: BackendId::from_index(i),
            url: url.clone(),
        })
        .collect();
    (0..cfg.router.replicas.max(1))
        .map(|r| {
            let mut router = Router::new(
                cfg.router.clone(),
                endpoints.clone(),
                listed,
                cfg.seed,
                ReplicaId::from_index(r as usize),
            );
            router.set_models(serves.clone(), models.len());
            router
        })
        .collect()
}

/// Per backend, the request models (indices in `models`) it serves; `None`: it names no
/// model and serves all. Empty when no backend names a model.
fn served_models(labels: &[crate::backend::Label], models: &[String]) -> Vec<Option<Vec<u32>>> {
    if labels.iter().all(|l| l.serves.is_empty()) {
        return Vec::new();
    }
    labels
        .iter()
        .map(|l| {
            (!l.serves.is_empty()).then(|| {
                (0..models.len() as u32)
                    .filter(|&m| l.serves.contains(&models[m as usize]))
                    .collect()
            })
        })
        .collect()
}

/// The queue with the run's first events: each replica's first scrape read, on its own
/// phase spread evenly over one interval (production-stack issue #166: replicas do not
/// coordinate), then the router restarts and the fleet events, in that order.
fn initial_events(cfg: &SimConfig, replicas: u64, mode: EngineMode) -> EventQueue<Event> {
    let mut queue = match mode {
        // One lane per backend for its pending engine step.
        EngineMode::Fast => EventQueue::with_lanes(cfg.backends.len()),
        EngineMode::Reference => EventQueue::new(),
    };
    for r in 0..replicas {
        let phase = cfg.router.first_scrape(r, replicas);
        queue.push(
            phase,
            Event::ScrapeRead {
                replica: ReplicaId::from_index(r as usize),
                slot: ScrapeSlot(0),
            },
        );
    }
    for &(at, replica) in &cfg.router_restarts {
        let restarted: Vec<u16> = match replica {
            Some(r) => vec![r],
            None => (0..replicas as u16).collect(),
        };
        for r in restarted {
            queue.push(
                at,
                Event::RouterRestart {
                    replica: ReplicaId(u32::from(r)),
                },
            );
        }
    }
    for (i, e) in cfg.fleet_events.iter().enumerate() {
        queue.push(e.at, Event::Fleet { index: i as u32 });
    }
    queue
}

impl<'w> Simulation<'w> {
    /// Builds the fleet, the router and the initial events.
    pub fn new(cfg: SimConfig, workload: &'w Workload, opts: RunOptions) -> Self {
        Self::with_mode(cfg, workload, opts, EngineMode::Fast)
    }

    /// [`Simulation::new`] with an explicit engine mode.
    pub fn with_mode(cfg: SimConfig, workload: &'w Workload, opts: RunOptions, mode: EngineMode) -> Self {
        let n = cfg.backends.len();
        assert!(n > 0, "no backends (validation missed it)");
        let mut membership =
            crate::fleet::initial_membership(&cfg.fleet_events, n).expect("fleet events validated with the scenario");
        let scaler = cfg
            .autoscaler
            .clone()
            .map(|a| autoscaling::Scaler::new(a, &cfg.backends));
        if let Some(a) = &cfg.autoscaler {
            // The pool past the initial replicas has no pods yet.
            for m in membership.iter_mut().skip(a.initial_replicas as usize) {
                *m = Membership::Absent;
            }
        }
        let listed: Vec<bool> = membership.iter().map(|m| *m == Membership::Active).collect();
        let coalesce = mode == EngineMode::Fast;
        let mut engines = Engines::default();
        for m in &cfg.models {
            engines.push(fresh_backend(m, coalesce));
        }
        let routers = replicas(&cfg, &listed, &workload.models);
        if routers[0].wants_kv_events() {
            for e in engines.vllm_engines_mut() {
                e.enable_kv_events();
            }
        }
        let slots: Vec<u32> = (0..n).map(|i| engines.get(BackendId::from_index(i)).slots()).collect();
        let faults = crate::faults::Faults::new(cfg.faults.clone());
        let mut queue = initial_events(&cfg, routers.len() as u64, mode);
        let mut fleet = FleetTracker::new(&slots, opts.record_series);
        for (i, l) in listed.iter().enumerate() {
            if !l {
                fleet.set_in_service(SimTime::ZERO, BackendId::from_index(i), false);
            }
        }
        if let Some(s) = &scaler {
            for ev in s.first_events() {
                queue.push(SimTime::ZERO, ev);
            }
            fleet.track_pods(&listed);
        }
        let nodes = membership
            .into_iter()
            .enumerate()
            .map(|(i, membership)| Node {
                membership,
                incarnation: 0,
                retired: EngineCounters::default(),
                retired_coalesced: 0,
                gauges: GaugeHistory::default(),
                history: std::cmp::max(cfg.gauge_lag, faults.max_lag(BackendId::from_index(i))),
                outstanding: 0,
                routed: 0,
                collapsed: None,
            })
            .collect();
        Simulation {
            fleet,
            nodes,
            itl_counts: rustc_hash::FxHashMap::default(),
            attempts: vec![0; workload.sessions.len()],
            open_attempts: rustc_hash::FxHashMap::default(),
            rejected: 0,
            unserved: vec![0; workload.models.len()],
            abandoned: 0,
            streams: Streams::new(cfg.seed),
            decisions: DecisionLog::new(n, cfg.router.request_stats_window.as_secs_f64()),
            sink: None,
            outflow: recording::Outflow::new(
                n,
                cfg.slo
                    .as_ref()
                    .map(|c| crate::metrics::SloStats::new(workload.sessions.len(), c.targets.len())),
            ),
            sessions: vec![SessionState::default(); workload.sessions.len()],
            log: RequestLog::with_capacity(workload.total_requests()),
            step_events: StepEvents::default(),
            total: workload.total_requests(),
            finished: 0,
            events: 0,
            past_horizon: false,
            cursor: 0,
            queue,
            engines,
            faults,
            front: FrontState::new(cfg.router.front, stream(cfg.seed, "router.front", 0)),
            routers,
            workload,
            opts,
            cfg,
            event_log: Vec::new(),
            coalesce,
            collapsible: false,
            collapsing: Vec::new(),
            virtual_next: SimTime(u64::MAX),
            collapsed_steps: 0,
            scaler,
        }
    }

    /// Hands the decision audit to `sink` in batches as the run goes ([`run_streamed`]),
    /// and the request records and time series too if it takes them.
    pub fn with_sink(mut self, sink: &'w mut dyn RecordSink) -> Self {
        self.outflow.requests = sink.takes_requests();
        self.outflow.series = sink.takes_series() && self.opts.record_series;
        if self.outflow.requests {
            self.log.requests = RecordWindow::new(true, 0);
        }
        self.sink = Some(sink);
        self
    }

    /// Runs to completion (all turns done), the time limit, or an error.
    pub fn run(mut self) -> Result<RunResult, SimError> {
        let mut now = SimTime::ZERO;
        self.collapsible = self.coalesce
            && !self.opts.check_invariants
            && !self.cfg.router.fresh_signals
            && self.cfg.faults.is_empty()
            && self.cfg.fleet_events.is_empty()
            && self.cfg.autoscaler.is_none()
            && !self.routers[0].wants_kv_events();
        // The next session to open, read once per open rather than once per event (a
        // session plan is two cache lines, and the pool's data evicts it between events).
        let open_at =
            |w: &Workload, cursor: usize| w.open_order.get(cursor).map(|s| (w.sessions[s.index()].open_at, *s));
        let mut next_open = open_at(self.workload, self.cursor);
        while self.finished < self.total {
            let mut next_heap = self.queue.peek_time();
            if !self.collapsing.is_empty() {
                // Collapsed steps before the next event ran before it: their successors'
                // keys (and a collapse end's) are known from here on.
                let t_next = match (next_open, next_heap) {
                    (Some((to, _)), Some(th)) => Some(to.min(th)),
                    (Some((to, _)), None) => Some(to),
                    (None, th) => th,
                };
                if let Some(t) = t_next {
                    let t = self
                        .cfg
                        .max_sim_time
                        .map_or(t, |m| t.min(SimTime(m.0.saturating_add(1))));
                    self.pass_all(t, 0, 0);
                    next_heap = self.queue.peek_time();
                }
            }
            let (t, key, tie, ev) = match (next_open, next_heap) {
                (None, None) => break,
                (Some((to, s)), th) if th.is_none_or(|th| to <= th) => {
                    self.cursor += 1;
                    next_open = open_at(self.workload, self.cursor);
                    self.queue.advance_to(to);
                    // Opens run before every queued event at the same time.
                    (to, 0, 0, Event::TurnArrival { session: s })
                }
                _ => self.queue.pop_keyed().expect("peeked"),
            };
            if self.cfg.max_sim_time.is_some_and(|m| t > m) {
                now = self.cfg.max_sim_time.expect("checked");
                break;
            }
            if !self.collapsing.is_empty() {
                self.pass_all(t, key, tie);
            }
            now = t;
            self.events += 1;
            if self.events > self.cfg.max_events {
                return Err(SimError::TooManyEvents(self.cfg.max_events, now));
            }
            if self.opts.record_event_log {
                self.event_log.push(EventRecord::of(now, &ev));
            }
            self.handle(now, ev);
            if self.past_horizon {
                return Err(SimError::Horizon(now));
            }
            if self.opts.check_invariants {
                self.check_invariants(now).map_err(|e| SimError::Invariant(now, e))?;
            }
        }
        // Steps a reference run would have taken up to `now`.
        self.pass_all(now, u64::MAX, u64::MAX);
        for b in 0..self.nodes.len() {
            self.catch_up(BackendId::from_index(b));
        }
        Ok(self.finish(now))
    }

    /// Schedules `ev` after `d`; past the horizon the run stops with an error instead.
    fn schedule(&mut self, now: SimTime, d: SimDuration, ev: Event) {
        match now.checked_add(d) {
            Some(t) => self.queue.push(t, ev),
            None => self.past_horizon = true,
        }
    }

    fn handle(&mut self, now: SimTime, ev: Event) {
        match ev {
            Event::TurnArrival { session } => self.on_turn(now, session),
            Event::BackendArrival { request } => self.on_backend_arrival(now, request),
            Event::StepDone { backend, incarnation } if incarnation == self.nodes[backend.index()].incarnation => {
                self.on_step_done(now, backend)
            }
            Event::ServiceDone {
                backend,
                request,
                incarnation,
            } if incarnation == self.nodes[backend.index()].incarnation => self.on_service_done(now, backend, request),
            // A step or service of an engine that has since been replaced.
            Event::StepDone { .. } | Event::ServiceDone { .. } => {}
            Event::FirstChunk { request } => {
                self.router_of(request).on_first_token(request);
                let r = &mut self.log.requests[request.index()];
                r.t_first_chunk = Some(now);
                let b = r.backend;
                self.router_stats_event(request, b, STATS_RESPONSE);
            }
            Event::Complete { request } => self.on_complete(now, request),
            Event::RecordDispatch { request } => {
                let b = self.log.requests[request.index()].backend;
                self.router_of(request).on_new_request(b, now);
                let pending = std::mem::replace(&mut self.log.stats_state[request.index()], STATS_RECORDED);
                self.apply_response_stats(request, b, pending);
                self.settle(request, RecordWindow::DISPATCH_RECORDED);
            }
            Event::ScrapeRead { replica, slot } => self.on_scrape_read(now, replica, slot),
            Event::ScrapePassEnd { replica } => self.on_scrape_pass_end(now, replica),
            Event::RouterRestart { replica } => self.routers[replica.index()].restart(now),
            Event::Fleet { index } => {
                let e = self.cfg.fleet_events[index as usize];
                self.on_fleet_event(now, e.backend, e.kind);
            }
            Event::Rejoin { backend } => self.on_fleet_event(now, backend, FleetEventKind::Join),
            Event::Fail { request } => self.on_fail(now, request),
            Event::Resend { session, turn } | Event::Issue { session, turn } => self.send_turn(now, session, turn),
            Event::PromScrape => self.on_prom_scrape(now),
            Event::HpaSync => self.on_hpa_sync(now),
            Event::KedaPoll => self.on_keda_poll(now),
            Event::PodReady { backend, generation } => self.on_pod_ready(now, backend, generation),
            Event::PodKill { backend, generation } => self.on_pod_kill(now, backend, generation),
        }
    }
}

/// A new, empty backend of the configured model.
/// `fast`: advance pure-decode stretches cheaply and keep the KV cache per run
/// ([`EngineMode::Fast`]).
fn fresh_backend(model: &BackendModel, fast: bool) -> Backend {
    match model {
        BackendModel::Vllm(v) => {
            let mut e = VllmEngine::with_kv_runs(v.clone(), fast);
            e.set_coalescing(fast);
            Backend::Vllm(e)
        }
        BackendModel::Queueing { slots } => Backend::Queueing(QueueingServer::new(*slots)),
    }
}

/// A backend's engine counters (zeros for the queueing model).
fn engine_counters(b: EngineRef<'_>) -> EngineCounters {
    match b {
        Engine::Vllm(e) => EngineCounters {
            steps: e.steps(),
            preemptions: e.preemptions(),
            query_tokens: e.cache_stats().query_tokens,
            hit_tokens: e.cache_stats().hit_tokens,
        },
        Engine::Queueing(_) => EngineCounters::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_keep_their_codes_and_names() {
        // Codes feed `sim check --determinism`'s log hash and names its report: both are
        // pinned (a reorder would change every published hash).
        for (i, k) in EventKind::ALL.iter().enumerate() {
            assert_eq!(usize::from(k.code()), i, "{k:?}");
        }
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names.join(" "),
            "TurnArrival BackendArrival StepDone ServiceDone FirstChunk Complete RecordDispatch \
             ScrapeRead ScrapePassEnd RouterRestart Fleet Rejoin Fail Resend Issue PromScrape \
             HpaSync KedaPoll PodReady PodKill"
        );
    }
}
