//! The simulation: owns every component and is the only place that touches several of them
//! in one step (one `match` over [`Event`]).
//!
//! ```text
//!  client sessions ──TurnArrival──▶ Router ──(dispatch latency)──▶ Backend (engine)
//!        ▲                           │  ▲                             │ steps
//!        │ think time                │  └──ScrapeRead (gauges)───────┤
//!        └──────Complete◀── (response latency) ◀──FirstChunk/finish──┘
//! ```
//!
//! Same-instant rule: events at one simulated time run in the order they were scheduled;
//! session opens (the workload cursor) count as scheduled at time zero, so they run before
//! any other event at the same instant.

use crate::backend::queueing::QueueingServer;
use crate::backend::vllm::{StepEvents, VllmConfig, VllmEngine};
use crate::backend::{Backend, Gauges};
use crate::engine::EventQueue;
use crate::faults::ScrapeOutcome;
use crate::fleet::{ClientConfig, FleetEvent, FleetEventKind, Membership};
use crate::ids::{BackendId, RequestId, SessionId};
use crate::metrics::{
    DecisionLog, DecisionRow, EngineCounters, FleetTracker, RequestRec, Summary, SummaryInputs, TsRow, summarize,
};
use crate::policy::{Branch, EndpointInfo};
use crate::rng::stream;
use crate::router::engine_stats::{EngineStatsEntry, ScrapeNext};
use crate::router::{Router, RouterConfig};
use crate::time::{SimDuration, SimTime};
use crate::workload::Workload;

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
/// differential test `tests/engine_modes.rs` holds them to it); the reference mode is
/// the plain per-iteration loop the faster one is checked against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineMode {
    /// Engine steps in per-backend lanes beside the heap (see [`crate::engine`]).
    #[default]
    Fast,
    /// Every event through one binary heap, one event per engine iteration.
    Reference,
}

/// One processed event: when, what kind, and the ids it carries. Two runs of the same
/// inputs produce identical logs; the first differing entry is where they diverged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Simulated time.
    pub t: SimTime,
    /// Event kind (see [`EventRecord::kind_name`]).
    pub kind: u8,
    /// First id (session, request, backend or scrape position).
    pub a: u32,
    /// Second id (the request of a `ServiceDone`), else 0.
    pub b: u32,
}

impl EventRecord {
    /// The event kind's name.
    pub fn kind_name(&self) -> &'static str {
        [
            "TurnArrival",
            "BackendArrival",
            "StepDone",
            "ServiceDone",
            "FirstChunk",
            "Complete",
            "RecordDispatch",
            "ScrapeRead",
            "ScrapePassEnd",
            "RouterRestart",
            "Fleet",
            "Rejoin",
            "Fail",
            "Resend",
            "Issue",
        ]
        .get(self.kind as usize)
        .copied()
        .unwrap_or("?")
    }

    fn of(t: SimTime, ev: &Event) -> EventRecord {
        let (kind, a, b) = match *ev {
            Event::TurnArrival { session } => (0, session.0, 0),
            Event::BackendArrival { request } => (1, request.0, 0),
            Event::StepDone { backend, .. } => (2, backend.0, 0),
            Event::ServiceDone { backend, request, .. } => (3, backend.0, request.0),
            Event::FirstChunk { request } => (4, request.0, 0),
            Event::Complete { request } => (5, request.0, 0),
            Event::RecordDispatch { request } => (6, request.0, 0),
            Event::ScrapeRead { replica, pos } => (7, pos, u32::from(replica)),
            Event::ScrapePassEnd { replica } => (8, 0, u32::from(replica)),
            Event::RouterRestart { replica } => (9, 0, u32::from(replica)),
            Event::Fleet { index } => (10, index, 0),
            Event::Rejoin { backend } => (11, backend.0, 0),
            Event::Fail { request } => (12, request.0, 0),
            Event::Resend { session, turn } => (13, session.0, turn),
            Event::Issue { session, turn } => (14, session.0, turn),
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
        replica: u16,
        pos: u32,
    },
    ScrapePassEnd {
        replica: u16,
    },
    RouterRestart {
        replica: u16,
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
    /// A replayed session sends `turn` (happens-before pacing, [`crate::trace::pacing`]).
    Issue {
        session: SessionId,
        turn: u32,
    },
}

/// How requests are spread over router replicas (the load balancer in front of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontBalancer {
    /// Round robin over replicas.
    RoundRobin,
    /// Uniformly random.
    Random,
    /// By a hash of the session key (sticky), round robin for requests without one.
    SessionHash,
}

impl FrontBalancer {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            FrontBalancer::RoundRobin => "round_robin",
            FrontBalancer::Random => "random",
            FrontBalancer::SessionHash => "session_hash",
        }
    }
}

/// The front balancer's counter and random stream.
struct FrontState {
    kind: FrontBalancer,
    next: usize,
    rng: crate::rng::SimRng,
}

impl FrontState {
    fn new(kind: FrontBalancer, rng: crate::rng::SimRng) -> Self {
        FrontState { kind, next: 0, rng }
    }

    fn pick(&mut self, key: Option<&str>, replicas: usize) -> usize {
        if replicas == 1 {
            return 0;
        }
        match (self.kind, key) {
            (FrontBalancer::Random, _) => crate::dist::uniform_index(&mut self.rng, replicas),
            (FrontBalancer::SessionHash, Some(k)) => {
                let h = k
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, b| crate::content::mix(h, u64::from(b)));
                (h % replicas as u64) as usize
            }
            _ => {
                let r = self.next % replicas;
                self.next += 1;
                r
            }
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

/// Gauge values over time, for `gauge_lag` (kept only when the lag is positive).
#[derive(Default)]
struct GaugeHistory {
    changes: std::collections::VecDeque<(SimTime, Gauges)>,
}

impl GaugeHistory {
    /// Records a change at `t`, dropping history older than `keep` before `t` (one value
    /// from before that is kept: it is the value as of `t - keep`).
    fn push(&mut self, t: SimTime, g: Gauges, keep: SimDuration) {
        if self.changes.back().is_none_or(|(_, v)| *v != g) {
            self.changes.push_back((t, g));
        }
        let horizon = t.0.saturating_sub(keep.0);
        while self.changes.len() > 1 && self.changes[1].0.0 <= horizon {
            self.changes.pop_front();
        }
    }

    /// Value as of `t` (zeros before the first step).
    fn at(&self, t: SimTime) -> Gauges {
        let i = self.changes.partition_point(|(t0, _)| *t0 <= t);
        if i == 0 {
            Gauges::default()
        } else {
            self.changes[i - 1].1
        }
    }
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

/// A simulation instance (one run).
pub struct Simulation<'w> {
    cfg: SimConfig,
    opts: RunOptions,
    workload: &'w Workload,
    queue: EventQueue<Event>,
    cursor: usize,
    backends: Vec<Backend>,
    /// Router replicas (one unless `router.replicas` says otherwise).
    routers: Vec<Router>,
    /// The fault timeline.
    faults: crate::faults::Faults,
    /// Per decision: true outstanding of the pick minus the true minimum.
    regrets: Vec<u32>,
    /// Per decision with engine stats: age of the oldest entry seen, ns.
    view_ages: Vec<u64>,
    /// Per backend: keep gauge history this far back (metrics lag, extra-lag faults).
    history: Vec<SimDuration>,
    /// The replica that routed each request.
    replica_of: Vec<u16>,
    /// The front load balancer's state.
    front: FrontState,
    step_events: StepEvents,
    sessions: Vec<SessionState>,
    requests: Vec<RequestRec>,
    outstanding: Vec<u32>,
    fleet: FleetTracker,
    decisions: DecisionLog,
    branches: Vec<Branch>,
    gauges: Vec<GaugeHistory>,
    finished: usize,
    total: usize,
    events: u64,
    event_log: Vec<EventRecord>,
    past_horizon: bool,
    /// Router request-stats progress per request (`STATS_*` flags).
    stats_state: Vec<u8>,
    /// Per backend: in the fleet, draining, or not.
    membership: Vec<Membership>,
    /// Per backend: engine incarnation (a leave or restart starts a new one).
    incarnation: Vec<u32>,
    /// Per backend: counters of replaced engine incarnations.
    retired: Vec<EngineCounters>,
    /// Per session: failed attempts of its current turn.
    attempts: Vec<u32>,
    /// Open-loop sessions: failed attempts per `(session, turn)` with a retry pending.
    open_attempts: rustc_hash::FxHashMap<(u32, u32), u32>,
    /// Attempts refused for lack of endpoints.
    rejected: u64,
    /// Planned turns given up after the last retry.
    abandoned: u64,
    /// Retry jitter.
    retry_rng: crate::rng::SimRng,
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
        let membership =
            crate::fleet::initial_membership(&cfg.fleet_events, n).expect("fleet events validated with the scenario");
        let listed: Vec<bool> = membership.iter().map(|m| *m == Membership::Active).collect();
        let backends: Vec<Backend> = cfg.models.iter().map(fresh_backend).collect();
        let endpoints: Vec<EndpointInfo> = cfg
            .backends
            .iter()
            .enumerate()
            .map(|(i, (_, url))| EndpointInfo {
                backend: BackendId::from_index(i),
                url: url.clone(),
            })
            .collect();
        let routers: Vec<Router> = (0..cfg.router.replicas.max(1))
            .map(|r| {
                Router::new(
                    cfg.router.clone(),
                    endpoints.clone(),
                    &listed,
                    stream(cfg.seed, "router.policy", u64::from(r)),
                )
                .with_jitter_rng(stream(cfg.seed, "router.scrape_jitter", u64::from(r)))
            })
            .collect();
        let mut backends = backends;
        if routers[0].wants_kv_events() {
            for b in &mut backends {
                if let Backend::Vllm(e) = b {
                    e.enable_kv_events();
                }
            }
        }
        let slots: Vec<u32> = backends.iter().map(Backend::slots).collect();
        let faults = crate::faults::Faults::new(cfg.faults.clone());
        let mut queue = match mode {
            // One lane per backend for its pending engine step.
            EngineMode::Fast => EventQueue::with_lanes(n),
            EngineMode::Reference => EventQueue::new(),
        };
        // Each replica scrapes on its own phase, spread evenly over one interval
        // (production-stack issue #166: replicas do not coordinate).
        let r_count = routers.len() as u64;
        for r in 0..r_count {
            let phase = cfg.router.first_scrape(r, r_count);
            queue.push(
                phase,
                Event::ScrapeRead {
                    replica: r as u16,
                    pos: 0,
                },
            );
        }
        for &(at, replica) in &cfg.router_restarts {
            let replicas: Vec<u16> = match replica {
                Some(r) => vec![r],
                None => (0..r_count as u16).collect(),
            };
            for r in replicas {
                queue.push(at, Event::RouterRestart { replica: r });
            }
        }
        for (i, e) in cfg.fleet_events.iter().enumerate() {
            queue.push(e.at, Event::Fleet { index: i as u32 });
        }
        let mut fleet = FleetTracker::new(&slots, opts.record_series);
        for (i, l) in listed.iter().enumerate() {
            if !l {
                fleet.set_in_service(SimTime::ZERO, BackendId::from_index(i), false);
            }
        }
        Simulation {
            fleet,
            membership,
            incarnation: vec![0; n],
            retired: vec![EngineCounters::default(); n],
            attempts: vec![0; workload.sessions.len()],
            open_attempts: rustc_hash::FxHashMap::default(),
            rejected: 0,
            abandoned: 0,
            retry_rng: stream(cfg.seed, "client.retry", 0),
            decisions: DecisionLog::new(n, cfg.router.request_stats_window.as_secs_f64()),
            gauges: (0..n).map(|_| GaugeHistory::default()).collect(),
            sessions: vec![SessionState::default(); workload.sessions.len()],
            requests: Vec::with_capacity(workload.total_requests()),
            outstanding: vec![0; n],
            step_events: StepEvents::default(),
            branches: Vec::with_capacity(workload.total_requests()),
            total: workload.total_requests(),
            finished: 0,
            events: 0,
            past_horizon: false,
            stats_state: Vec::with_capacity(workload.total_requests()),
            cursor: 0,
            queue,
            backends,
            replica_of: Vec::with_capacity(workload.total_requests()),
            history: (0..n)
                .map(|i| std::cmp::max(cfg.gauge_lag, faults.max_lag(BackendId::from_index(i))))
                .collect(),
            faults,
            regrets: Vec::with_capacity(workload.total_requests()),
            view_ages: Vec::with_capacity(workload.total_requests()),
            front: FrontState::new(cfg.router.front, stream(cfg.seed, "router.front", 0)),
            routers,
            workload,
            opts,
            cfg,
            event_log: Vec::new(),
        }
    }

    /// Runs to completion (all turns done), the time limit, or an error.
    pub fn run(mut self) -> Result<RunResult, SimError> {
        let mut now = SimTime::ZERO;
        while self.finished < self.total {
            let next_open = self
                .workload
                .open_order
                .get(self.cursor)
                .map(|s| (self.workload.sessions[s.index()].open_at, *s));
            let next_heap = self.queue.peek_time();
            let (t, ev) = match (next_open, next_heap) {
                (None, None) => break,
                (Some((to, s)), th) if th.is_none_or(|th| to <= th) => {
                    self.cursor += 1;
                    self.queue.advance_to(to);
                    (to, Event::TurnArrival { session: s })
                }
                _ => self.queue.pop().expect("peeked"),
            };
            if self.cfg.max_sim_time.is_some_and(|m| t > m) {
                now = self.cfg.max_sim_time.expect("checked");
                break;
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
            Event::StepDone { backend, incarnation } if incarnation == self.incarnation[backend.index()] => {
                self.on_step_done(now, backend)
            }
            Event::ServiceDone {
                backend,
                request,
                incarnation,
            } if incarnation == self.incarnation[backend.index()] => self.on_service_done(now, backend, request),
            // A step or service of an engine that has since been replaced.
            Event::StepDone { .. } | Event::ServiceDone { .. } => {}
            Event::FirstChunk { request } => {
                self.router_of(request).on_first_token(request);
                let r = &mut self.requests[request.index()];
                r.t_first_chunk = Some(now);
                let b = r.backend;
                self.router_stats_event(request, b, STATS_RESPONSE);
            }
            Event::Complete { request } => self.on_complete(now, request),
            Event::RecordDispatch { request } => {
                let b = self.requests[request.index()].backend;
                self.router_of(request).on_new_request(b, now);
                let pending = std::mem::replace(&mut self.stats_state[request.index()], STATS_RECORDED);
                self.apply_response_stats(request, b, pending);
            }
            Event::ScrapeRead { replica, pos } => {
                let Some(b) = self.routers[replica as usize].scrape_target(pos as usize) else {
                    // Nothing listed: the pass is over at once.
                    let sleep = self.routers[replica as usize].scrape_pass_end();
                    self.schedule(now, sleep, Event::ScrapeRead { replica, pos: 0 });
                    return;
                };
                let lag = self.cfg.gauge_lag.0.saturating_add(self.faults.extra_lag(b, now).0);
                let g = if lag > 0 {
                    self.gauges[b.index()].at(SimTime(now.0.saturating_sub(lag)))
                } else {
                    self.backends[b.index()].gauges()
                };
                let g = match self.faults.scrape(b, now, g) {
                    // A backend that left refuses the connection.
                    _ if self.membership[b.index()] == Membership::Absent => None,
                    ScrapeOutcome::Fail => None,
                    ScrapeOutcome::Values(g) => Some(g),
                };
                let entry = g.map(|g| EngineStatsEntry {
                    running: g.running,
                    waiting: g.waiting,
                    kv_used_blocks: g.kv_used_blocks,
                    kv_total_blocks: g.kv_total_blocks,
                    read_at: now,
                });
                let (next, mut after) = self.routers[replica as usize].scrape_read(pos as usize, entry);
                if self.faults.hangs(b, now) {
                    // Upstream's `requests.get(..., timeout=scrape_interval)`: the pass waits.
                    after = after.max(self.cfg.router.engine_stats_interval);
                }
                let ev = match next {
                    ScrapeNext::Read(p) => Event::ScrapeRead { replica, pos: p as u32 },
                    ScrapeNext::PassEnd => Event::ScrapePassEnd { replica },
                };
                self.schedule(now, after, ev);
            }
            Event::ScrapePassEnd { replica } => {
                let sleep = self.routers[replica as usize].scrape_pass_end();
                self.schedule(now, sleep, Event::ScrapeRead { replica, pos: 0 });
            }
            Event::RouterRestart { replica } => self.routers[replica as usize].restart(now),
            Event::Fleet { index } => {
                let e = self.cfg.fleet_events[index as usize];
                self.on_fleet_event(now, e.backend, e.kind);
            }
            Event::Rejoin { backend } => self.on_fleet_event(now, backend, FleetEventKind::Join),
            Event::Fail { request } => self.on_fail(now, request),
            Event::Resend { session, turn } | Event::Issue { session, turn } => self.send_turn(now, session, turn),
        }
    }

    fn on_turn(&mut self, now: SimTime, s: SessionId) {
        let turn = self.sessions[s.index()].next_turn;
        let workload = self.workload;
        let plan = &workload.sessions[s.index()];
        if let Some(rp) = plan.replay.as_deref().filter(|r| r.paced()) {
            // Happens-before: the first call now, the calls overlapping it at their offsets.
            for &t in rp.roots_after_first() {
                let d = plan.turns[t as usize].think_before;
                self.schedule(now, d, Event::Issue { session: s, turn: t });
            }
            self.send_turn(now, s, 0);
            return;
        }
        if plan.open_loop {
            // Open loop: the next turn follows this one's sending, not its completion.
            self.sessions[s.index()].next_turn += 1;
            if let Some(next) = plan.turns.get(turn as usize + 1) {
                let d = next.think_before;
                self.schedule(now, d, Event::TurnArrival { session: s });
            }
        }
        self.send_turn(now, s, turn);
    }

    /// The fewest requests outstanding on any backend discovery lists (the best pick in
    /// truth), or `None` when nothing is listed.
    fn least_outstanding(&self) -> Option<u32> {
        self.outstanding
            .iter()
            .zip(&self.membership)
            .filter(|(_, m)| **m == Membership::Active)
            .map(|(o, _)| *o)
            .min()
    }

    /// Sends `turn` of session `s` through the front balancer and a router replica.
    fn send_turn(&mut self, now: SimTime, s: SessionId, turn: u32) {
        let plan = &self.workload.sessions[s.index()];
        let key = plan.sends_key.then_some(plan.key.as_str());
        let replica = self.front.pick(key, self.routers.len());
        if self.routers[replica].endpoints().is_empty() {
            // No endpoint to route to: the router answers with an error at once.
            self.rejected += 1;
            self.retry_or_abandon(now, s, turn);
            return;
        }
        let content = self.workload.content(s, turn as usize);
        let rid = RequestId::from_index(self.requests.len());
        if self.cfg.router.fresh_signals {
            let backends = &self.backends;
            self.routers[replica].set_fresh_engine_stats(now, |b| {
                let g = backends[b.index()].gauges();
                EngineStatsEntry {
                    running: g.running,
                    waiting: g.waiting,
                    kv_used_blocks: g.kv_used_blocks,
                    kv_total_blocks: g.kv_total_blocks,
                    read_at: now,
                }
            });
        }
        let audit = self.opts.record_decisions.then_some(&mut self.decisions.scratch);
        self.replica_of.push(replica as u16);
        let (b, d) = self.routers[replica].route(now, rid, key, &content, audit);
        let min = self.least_outstanding().expect("a listed endpoint was picked");
        self.regrets.push(self.outstanding[b.index()] - min);
        if let Some(age) = self.routers[replica].last_view_age() {
            self.view_ages.push(age.0);
        }
        if self.opts.record_decisions {
            self.decisions.commit_view();
            self.decisions.truth.extend_from_slice(&self.outstanding);
            self.decisions.rows.push(DecisionRow {
                t: now,
                request: rid,
                session: s,
                turn,
                backend: b,
                branch: d.branch,
                match_chars: d.match_chars,
            });
        }
        self.branches.push(d.branch);
        let st = &mut self.sessions[s.index()];
        st.last_backend = Some(b);
        if turn == 0 {
            st.first_backend = Some(b);
            st.first_turn_suboptimal = self.outstanding[b.index()] > min;
            st.stayed = true;
        } else if st.first_backend != Some(b) {
            st.stayed = false;
        }
        self.outstanding[b.index()] += 1;
        self.requests.push(RequestRec {
            session: s,
            turn,
            backend: b,
            branch: d.branch,
            prompt_tokens: content.prompt_tokens,
            output_tokens: content.output_tokens,
            t_router: now,
            t_engine: None,
            t_admit: None,
            t_first_token: None,
            t_first_chunk: None,
            t_finish_engine: None,
            t_done: None,
            t_failed: None,
            cached_tokens: 0,
            preemptions: 0,
        });
        let lag = self.routers[replica].request_stats_lag();
        if lag.0 == 0 {
            self.routers[replica].on_new_request(b, now);
            self.stats_state.push(STATS_RECORDED);
        } else {
            self.stats_state.push(0);
            self.schedule(now, lag, Event::RecordDispatch { request: rid });
        }
        self.schedule(now, self.cfg.dispatch_latency, Event::BackendArrival { request: rid });
    }

    fn on_backend_arrival(&mut self, now: SimTime, rid: RequestId) {
        let r = &mut self.requests[rid.index()];
        let b = r.backend;
        if self.membership[b.index()] == Membership::Absent {
            // The backend left while the request was on its way: connection refused.
            r.t_failed = Some(now);
            self.outstanding[b.index()] -= 1;
            self.schedule(now, self.cfg.response_latency, Event::Fail { request: rid });
            return;
        }
        r.t_engine = Some(now);
        let plan = &self.workload.sessions[r.session.index()];
        let turn = r.turn as usize;
        match &mut self.backends[b.index()] {
            Backend::Vllm(e) => {
                if e.enqueue(rid, self.workload.content(r.session, turn)) {
                    self.start_step(now, b);
                }
            }
            Backend::Queueing(q) => {
                let service = plan.turns[turn].service;
                if let Some(d) = q.arrive(rid, service) {
                    self.requests[rid.index()].t_admit = Some(now);
                    let incarnation = self.incarnation[b.index()];
                    self.schedule(
                        now,
                        d,
                        Event::ServiceDone {
                            backend: b,
                            request: rid,
                            incarnation,
                        },
                    );
                }
                self.note_gauges(now, b);
            }
        }
        self.observe(now, b);
    }

    fn start_step(&mut self, now: SimTime, b: BackendId) {
        let Backend::Vllm(e) = &mut self.backends[b.index()] else {
            unreachable!("steps are vLLM-only")
        };
        self.step_events.clear();
        if let Some(d) = e.start_step(&mut self.step_events) {
            let factor = if self.faults.is_empty() {
                1.0
            } else {
                self.faults.slowdown(b, now)
            };
            let d = if factor == 1.0 {
                d
            } else {
                SimDuration((d.0 as f64 * factor).round() as u64)
            };
            for &(rid, cached) in &self.step_events.admitted {
                let r = &mut self.requests[rid.index()];
                r.t_admit = Some(now);
                r.cached_tokens = cached;
            }
            let incarnation = self.incarnation[b.index()];
            let ev = Event::StepDone {
                backend: b,
                incarnation,
            };
            match now.checked_add(d) {
                Some(t) => self.queue.push_lane(b.index(), t, ev),
                None => self.past_horizon = true,
            }
        }
    }

    fn on_step_done(&mut self, now: SimTime, b: BackendId) {
        let Backend::Vllm(e) = &mut self.backends[b.index()] else {
            unreachable!("steps are vLLM-only")
        };
        let mut ev = std::mem::take(&mut self.step_events);
        ev.clear();
        e.finish_step(&mut ev);
        let resp = self.cfg.response_latency;
        for &rid in &ev.first_tokens {
            self.requests[rid.index()].t_first_token = Some(now);
            self.schedule(now, resp, Event::FirstChunk { request: rid });
        }
        for f in &ev.finished {
            let r = &mut self.requests[f.id.index()];
            r.t_finish_engine = Some(now);
            r.preemptions = f.preemptions;
            self.outstanding[r.backend.index()] -= 1;
            self.schedule(now, resp, Event::Complete { request: f.id });
        }
        self.step_events = ev;
        self.note_gauges(now, b);
        self.start_step(now, b);
        self.observe(now, b);
        self.maybe_drained(now, b);
    }

    fn on_service_done(&mut self, now: SimTime, b: BackendId, rid: RequestId) {
        let resp = self.cfg.response_latency;
        let r = &mut self.requests[rid.index()];
        r.t_first_token = Some(now);
        r.t_finish_engine = Some(now);
        self.outstanding[b.index()] -= 1;
        self.schedule(now, resp, Event::FirstChunk { request: rid });
        self.schedule(now, resp, Event::Complete { request: rid });
        let Backend::Queueing(q) = &mut self.backends[b.index()] else {
            unreachable!("service is queueing-only")
        };
        if let Some((next, d)) = q.complete() {
            self.requests[next.index()].t_admit = Some(now);
            let incarnation = self.incarnation[b.index()];
            self.schedule(
                now,
                d,
                Event::ServiceDone {
                    backend: b,
                    request: next,
                    incarnation,
                },
            );
        }
        self.note_gauges(now, b);
        self.observe(now, b);
        self.maybe_drained(now, b);
    }

    /// A fleet event on backend `b`.
    fn on_fleet_event(&mut self, now: SimTime, b: BackendId, kind: FleetEventKind) {
        let i = b.index();
        match kind {
            FleetEventKind::Join => {
                match self.membership[i] {
                    // Listed again with the engine (and cache) it still runs.
                    Membership::Draining => {}
                    // A new pod: a fresh engine.
                    Membership::Absent => self.replace_engine(now, b),
                    Membership::Active => return,
                }
                self.membership[i] = Membership::Active;
                for r in &mut self.routers {
                    r.add_endpoint(b);
                }
                self.fleet.set_in_service(now, b, true);
            }
            FleetEventKind::Drain => {
                if self.membership[i] != Membership::Active {
                    return;
                }
                self.membership[i] = Membership::Draining;
                for r in &mut self.routers {
                    r.remove_endpoint(b);
                }
                self.fleet.set_in_service(now, b, false);
                self.maybe_drained(now, b);
            }
            FleetEventKind::Leave | FleetEventKind::Restart { .. } => {
                if self.membership[i] == Membership::Absent {
                    // A drain already took it out.
                    return;
                }
                self.membership[i] = Membership::Absent;
                for r in &mut self.routers {
                    r.remove_endpoint(b);
                    r.forget_kv(now, b);
                }
                self.fleet.set_in_service(now, b, false);
                // Requests it holds fail; the client hears of it one response latency later.
                let resp = self.cfg.response_latency;
                for k in 0..self.requests.len() {
                    let r = &mut self.requests[k];
                    if r.backend == b && r.t_engine.is_some() && r.t_finish_engine.is_none() && r.t_failed.is_none() {
                        r.t_failed = Some(now);
                        self.outstanding[i] -= 1;
                        self.schedule(
                            now,
                            resp,
                            Event::Fail {
                                request: RequestId::from_index(k),
                            },
                        );
                    }
                }
                self.replace_engine(now, b);
                if let FleetEventKind::Restart { downtime } = kind {
                    if downtime.0 == 0 {
                        self.on_fleet_event(now, b, FleetEventKind::Join);
                    } else {
                        self.schedule(now, downtime, Event::Rejoin { backend: b });
                    }
                }
            }
        }
    }

    /// Replaces backend `b`'s engine with a fresh, empty one (its counters are kept for the
    /// summary; events of the old incarnation become stale).
    fn replace_engine(&mut self, now: SimTime, b: BackendId) {
        let i = b.index();
        let old = std::mem::replace(&mut self.backends[i], fresh_backend(&self.cfg.models[i]));
        let c = engine_counters(&old);
        let r = &mut self.retired[i];
        r.steps += c.steps;
        r.preemptions += c.preemptions;
        r.query_tokens += c.query_tokens;
        r.hit_tokens += c.hit_tokens;
        if self.routers[0].wants_kv_events()
            && let Backend::Vllm(e) = &mut self.backends[i]
        {
            e.enable_kv_events();
        }
        self.incarnation[i] += 1;
        self.note_gauges(now, b);
        self.observe(now, b);
    }

    /// A draining backend that holds nothing more is gone.
    fn maybe_drained(&mut self, now: SimTime, b: BackendId) {
        let i = b.index();
        if self.membership[i] == Membership::Draining && self.outstanding[i] == 0 {
            self.membership[i] = Membership::Absent;
            for r in &mut self.routers {
                r.forget_kv(now, b);
            }
        }
    }

    /// The client learns that `rid` failed: the router closes its books on it, and the
    /// client retries the turn or gives up.
    fn on_fail(&mut self, now: SimTime, rid: RequestId) {
        self.router_of(rid).on_finished(rid);
        let r = &self.requests[rid.index()];
        let (b, s, turn) = (r.backend, r.session, r.turn);
        let what = if r.t_first_chunk.is_none() {
            STATS_RESPONSE | STATS_COMPLETE
        } else {
            STATS_COMPLETE
        };
        self.router_stats_event(rid, b, what);
        self.retry_or_abandon(now, s, turn);
    }

    /// After a failed attempt of `turn`: retry after the client's backoff, or give up the
    /// turn and the rest of the session.
    fn retry_or_abandon(&mut self, now: SimTime, s: SessionId, turn: u32) {
        // Open loop: several turns of a session may be in flight; each counts its own
        // attempts.
        let a = if self.workload.sessions[s.index()].open_loop {
            let a = self.open_attempts.entry((s.0, turn)).or_insert(0);
            *a += 1;
            *a
        } else {
            let a = &mut self.attempts[s.index()];
            *a += 1;
            *a
        };
        if a <= self.cfg.client.max_retries {
            let u: f64 = rand::RngExt::random(&mut self.retry_rng);
            let d = self.cfg.client.retry_delay(a, u);
            self.schedule(now, d, Event::Resend { session: s, turn });
        } else {
            self.open_attempts.remove(&(s.0, turn));
            let workload = self.workload;
            let plan = &workload.sessions[s.index()];
            // Open loop: later turns do not wait for this one, only it is lost; paced: it and
            // the calls waiting for it.
            let left = if plan.open_loop {
                plan.replay
                    .as_deref()
                    .filter(|r| r.paced())
                    .map_or(1, |r| r.lost_with(turn))
            } else {
                plan.turns.len() - turn as usize
            };
            self.total -= left;
            self.abandoned += left as u64;
        }
    }

    /// Applies a response-side request-stats update, or, if the dispatch itself has not
    /// reached the stats yet (`request_stats_lag_s`), defers it so updates stay in order.
    fn router_stats_event(&mut self, rid: RequestId, b: BackendId, what: u8) {
        let st = &mut self.stats_state[rid.index()];
        if *st & STATS_RECORDED == 0 {
            *st |= what;
        } else {
            self.apply_response_stats(rid, b, what);
        }
    }

    /// The replica that routed `rid`.
    fn router_of(&mut self, rid: RequestId) -> &mut Router {
        &mut self.routers[self.replica_of[rid.index()] as usize]
    }

    /// Applies the response-side updates named by `flags`, first chunk before completion.
    fn apply_response_stats(&mut self, rid: RequestId, b: BackendId, flags: u8) {
        if flags & STATS_RESPONSE != 0 {
            self.router_of(rid).on_request_response(b);
        }
        if flags & STATS_COMPLETE != 0 {
            self.router_of(rid).on_request_complete(b);
        }
    }

    fn on_complete(&mut self, now: SimTime, rid: RequestId) {
        self.router_of(rid).on_finished(rid);
        let r = &mut self.requests[rid.index()];
        r.t_done = Some(now);
        let (b, s) = (r.backend, r.session);
        self.router_stats_event(rid, b, STATS_COMPLETE);
        self.finished += 1;
        self.attempts[s.index()] = 0;
        if self.workload.sessions[s.index()].open_loop {
            let turn = self.requests[rid.index()].turn;
            if !self.open_attempts.is_empty() {
                self.open_attempts.remove(&(s.0, turn));
            }
            let workload = self.workload;
            let plan = &workload.sessions[s.index()];
            if let Some(rp) = plan.replay.as_deref().filter(|r| r.paced()) {
                for &t in rp.waiting_for(turn) {
                    let d = plan.turns[t as usize].think_before;
                    self.schedule(now, d, Event::Issue { session: s, turn: t });
                }
            }
            return;
        }
        let st = &mut self.sessions[s.index()];
        st.next_turn += 1;
        let plan = &self.workload.sessions[s.index()];
        if let Some(next) = plan.turns.get(st.next_turn as usize) {
            self.queue
                .push(now + next.think_before, Event::TurnArrival { session: s });
        }
    }

    fn note_gauges(&mut self, now: SimTime, b: BackendId) {
        if self.history[b.index()].0 > 0 {
            let g = self.backends[b.index()].gauges();
            self.gauges[b.index()].push(now, g, self.history[b.index()]);
        }
    }

    fn observe(&mut self, now: SimTime, b: BackendId) {
        let be = &mut self.backends[b.index()];
        self.fleet.set(now, b, be.running(), be.waiting(), be.kv_used_blocks());
        if self.routers[0].wants_kv_events() {
            let mut ev = Vec::new();
            be.drain_kv_events(&mut ev);
            if !ev.is_empty() {
                // Every replica subscribes to the same feed.
                let last = self.routers.len() - 1;
                for r in &mut self.routers[..last] {
                    r.publish_kv_events(now, b, ev.clone());
                }
                self.routers[last].publish_kv_events(now, b, ev);
            }
        }
    }

    fn check_invariants(&self, now: SimTime) -> Result<(), String> {
        if now < self.queue.now() {
            return Err("time went backwards".into());
        }
        for (i, b) in self.backends.iter().enumerate() {
            b.check().map_err(|e| format!("backend {i}: {e}"))?;
        }
        let arrived = self.requests.len();
        let failed = self.requests.iter().filter(|r| r.t_failed.is_some()).count();
        let in_flight = self
            .requests
            .iter()
            .filter(|r| r.t_done.is_none() && r.t_failed.is_none())
            .count();
        if arrived != self.finished + failed + in_flight {
            return Err(format!(
                "arrived {arrived} != finished {} + failed {failed} + in flight {in_flight}",
                self.finished
            ));
        }
        for (i, m) in self.membership.iter().enumerate() {
            let listed = self
                .routers
                .iter()
                .all(|r| r.endpoints().iter().any(|e| e.backend.index() == i));
            if listed != (*m == Membership::Active) {
                return Err(format!("backend {i} is {m:?} but listed = {listed}"));
            }
            if *m == Membership::Absent {
                // Nothing may still be at the engine of a backend that left: what remains
                // outstanding is on the wire, dispatched before it left (refused on arrival).
                let on_wire = self
                    .requests
                    .iter()
                    .filter(|r| r.backend.index() == i && r.t_failed.is_none() && r.t_engine.is_none())
                    .count() as u32;
                if self.outstanding[i] != on_wire {
                    return Err(format!(
                        "backend {i} left but {} requests are outstanding on it ({on_wire} on the wire)",
                        self.outstanding[i]
                    ));
                }
            }
        }
        let outstanding: u32 = self.outstanding.iter().sum();
        let at_engine: u32 = self
            .backends
            .iter()
            .map(|b| b.running() + b.waiting() + b.pending())
            .sum();
        let in_transit = self
            .requests
            .iter()
            .filter(|r| r.t_engine.is_none() && r.t_failed.is_none())
            .count() as u32;
        if outstanding != at_engine + in_transit {
            return Err(format!(
                "outstanding {outstanding} != at engines {at_engine} + in transit {in_transit}"
            ));
        }
        Ok(())
    }

    fn finish(mut self, end: SimTime) -> RunResult {
        self.fleet.finish(end);
        let n = self.backends.len();
        let mut first_turns = vec![0u64; n];
        let mut last_turns = vec![0u64; n];
        let mut latched = 0;
        for st in &self.sessions {
            if let Some(b) = st.last_backend {
                last_turns[b.index()] += 1;
            }
            if let Some(b) = st.first_backend {
                first_turns[b.index()] += 1;
                if st.first_turn_suboptimal && st.stayed {
                    latched += 1;
                }
            }
        }
        let engines = self
            .backends
            .iter()
            .zip(&self.retired)
            .map(|(b, r)| {
                let c = engine_counters(b);
                EngineCounters {
                    steps: c.steps + r.steps,
                    preemptions: c.preemptions + r.preemptions,
                    query_tokens: c.query_tokens + r.query_tokens,
                    hit_tokens: c.hit_tokens + r.hit_tokens,
                }
            })
            .collect();
        let inputs = SummaryInputs {
            scenario: &self.cfg.name,
            seed: self.cfg.seed,
            policy: self.cfg.router.policy.describe(),
            end,
            events: self.events,
            names: self.cfg.backends.clone(),
            labels: self.cfg.labels.clone(),
            engines,
            planned: self.workload.total_requests() as u64,
            sessions: self.workload.sessions.len() as u64,
            sessions_hit_context_limit: self.workload.sessions.iter().filter(|s| s.hit_context_limit).count() as u64,
            latched_sessions: latched,
            first_turns,
            last_turns,
            regrets: &self.regrets,
            view_ages_ns: &self.view_ages,
            rejected: self.rejected,
            abandoned: self.abandoned,
        };
        let mut summary = summarize(inputs, &self.fleet, &self.requests, &self.branches);
        summary.replay = crate::trace::fidelity::summarize(self.workload, &self.requests);
        RunResult {
            summary,
            series: self.fleet.take_series(),
            episodes: self.fleet.take_episodes(),
            requests: self.requests,
            decisions: self.decisions,
            session_keys: self.workload.sessions.iter().map(|s| s.key.clone()).collect(),
            event_log: self.event_log,
        }
    }
}

/// A new, empty backend of the configured model.
fn fresh_backend(model: &BackendModel) -> Backend {
    match model {
        BackendModel::Vllm(v) => Backend::Vllm(VllmEngine::new(v.clone())),
        BackendModel::Queueing { slots } => Backend::Queueing(QueueingServer::new(*slots)),
    }
}

/// A backend's engine counters (zeros for the queueing model).
fn engine_counters(b: &Backend) -> EngineCounters {
    match b {
        Backend::Vllm(e) => EngineCounters {
            steps: e.steps(),
            preemptions: e.preemptions(),
            query_tokens: e.cache_stats().query_tokens,
            hit_tokens: e.cache_stats().hit_tokens,
        },
        Backend::Queueing(_) => EngineCounters::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_history_serves_the_value_as_of_a_past_time() {
        let mut h = GaugeHistory::default();
        let g = |running, waiting| Gauges {
            running,
            waiting,
            ..Gauges::default()
        };
        assert_eq!(h.at(SimTime(5)), g(0, 0), "before any step the gauges read zero");
        let keep = SimDuration(100);
        h.push(SimTime(10), g(1, 0), keep);
        h.push(SimTime(10), g(1, 0), keep); // unchanged values are not stored twice
        h.push(SimTime(20), g(2, 3), keep);
        h.push(SimTime(30), g(0, 0), keep);
        assert_eq!(h.changes.len(), 3);
        assert_eq!(h.at(SimTime(9)), g(0, 0));
        assert_eq!(h.at(SimTime(15)), g(1, 0));
        assert_eq!(h.at(SimTime(20)), g(2, 3));
        assert_eq!(h.at(SimTime(29)), g(2, 3));
        assert_eq!(h.at(SimTime(31)), g(0, 0));
        // History older than `keep` is pruned on push (one older value stays).
        h.push(SimTime(125), g(5, 5), keep);
        assert_eq!(h.changes.len(), 3);
        assert_eq!(h.at(SimTime(25)), g(2, 3));
    }
}
