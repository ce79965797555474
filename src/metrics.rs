//! Ground-truth measurements: per-request records, time-integrated fleet imbalance, the
//! decision audit log, and the run summary. Everything here is measured on the *live*
//! backend state (what really happened), never on what the router believed.
//!
//! Definitions (all integrals over simulated time):
//! * **Waiting** means in the scheduler's waiting queue: not admitted at the last scheduling
//!   pass (or preempted). A request that reached the engine during the step in progress is
//!   not waiting yet; counting it would turn every sub-step arrival into "stranding".
//! * A backend has a **free slot** when it runs fewer than its slot limit (`max_num_seqs`,
//!   or servers in queueing mode) *and* has nothing waiting (a backend with a queue but spare
//!   slots is blocked on KV or the token budget, so its slots are not really free).
//! * **idle_while_queued_s**: time during which some backend has a free slot while some
//!   backend has a waiting request.
//! * **stranded_slot_s**: integral of `min(total waiting, total free slots)`: request-seconds
//!   of waiting that spare capacity elsewhere could have absorbed.
//! * Only backends **in service** (listed by discovery: not absent, not draining) can have
//!   free slots; a draining backend's queue still counts as waiting.
//! * An **episode** is one maximal stretch of idle_while_queued time; each records, per
//!   backend, how long it had a free slot and how much it queued (`sim explain` reads them).
//! * **latched_sessions**: sessions whose first turn went to a backend that was not among the
//!   least loaded in truth at that instant (outstanding = dispatched and unfinished,
//!   in transit included), and all of whose turns then stayed on that backend.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::decision::Branch;
use crate::ids::{BackendId, RequestId, SessionId};
use crate::time::{SimTime, ns_to_secs};
use crate::view::{EngineStatsEntry, RequestStatsEntry, ViewEntry};

/// One request's life. Times are `None` until reached.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRec {
    /// Session.
    pub session: SessionId,
    /// Turn index within the session.
    pub turn: u32,
    /// Backend it was routed to.
    pub backend: BackendId,
    /// Branch of the routing decision.
    pub branch: Branch,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Arrival at the router (= decision time).
    pub t_router: SimTime,
    /// Arrival at the engine.
    pub t_engine: Option<SimTime>,
    /// First scheduled by the engine.
    pub t_admit: Option<SimTime>,
    /// First output token sampled (engine side).
    pub t_first_token: Option<SimTime>,
    /// First chunk received by the router / client.
    pub t_first_chunk: Option<SimTime>,
    /// Last token sampled (engine side).
    pub t_finish_engine: Option<SimTime>,
    /// Stream complete at the router / client.
    pub t_done: Option<SimTime>,
    /// When the request failed (its backend left or restarted, or refused it on arrival).
    pub t_failed: Option<SimTime>,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times preempted.
    pub preemptions: u32,
}

/// One row of the per-backend time series (written whenever running or waiting changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsRow {
    /// When.
    pub t: SimTime,
    /// Which backend.
    pub backend: BackendId,
    /// Running requests.
    pub running: u32,
    /// Waiting requests.
    pub waiting: u32,
    /// KV blocks in use.
    pub kv_used_blocks: u32,
}

#[derive(Clone, Debug, Default)]
struct BackendTrack {
    running: u32,
    waiting: u32,
    slots: u32,
    /// Listed by discovery (accepting new requests).
    in_service: bool,
    last: SimTime,
    peak_running: u32,
    peak_waiting: u32,
    running_ns: u128,
    waiting_ns: u128,
    busy_ns: u128,
    idle_ns: u128,
    out_ns: u128,
}

/// One stretch of idle_while_queued time (see module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    /// Start.
    pub start: SimTime,
    /// End.
    pub end: SimTime,
    /// Integral of `min(total waiting, free slots)` over the episode, request-ns.
    pub stranded_ns: u128,
    /// Highest `min(total waiting, free slots)`.
    pub peak_stranded: u64,
    /// Per backend: time with a free slot, ns.
    pub free_ns: Vec<u64>,
    /// Per backend: integral of its waiting queue, request-ns.
    pub waiting_ns: Vec<u128>,
    /// Per backend: longest waiting queue during the episode.
    pub peak_waiting: Vec<u32>,
}

/// The moment of greatest stranding (first reached).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorstMoment {
    /// When, seconds.
    pub t_s: f64,
    /// `min(total waiting, free slots)` at that moment.
    pub stranded: u64,
    /// Per backend `[running, waiting]` at that moment.
    pub backends: Vec<[u32; 2]>,
}

/// Integrates fleet-level imbalance from backend state changes.
pub struct FleetTracker {
    backends: Vec<BackendTrack>,
    last: SimTime,
    total_waiting: u64,
    free_slots: u64,
    idle_while_queued_ns: u128,
    stranded_ns: u128,
    worst: Option<(SimTime, u64, Vec<[u32; 2]>)>,
    series: Option<Vec<TsRow>>,
    /// Closed episodes, when recorded; the open one.
    episodes: Option<Vec<Episode>>,
    open: Option<Episode>,
}

impl FleetTracker {
    /// A tracker over backends with the given slot limits, all idle and in service at time
    /// zero; `record` keeps the time series and the episodes.
    pub fn new(slots: &[u32], record: bool) -> Self {
        FleetTracker {
            backends: slots
                .iter()
                .map(|&s| BackendTrack {
                    slots: s,
                    in_service: true,
                    ..Default::default()
                })
                .collect(),
            last: SimTime::ZERO,
            total_waiting: 0,
            free_slots: slots.iter().map(|&s| u64::from(s)).sum(),
            idle_while_queued_ns: 0,
            stranded_ns: 0,
            worst: None,
            series: record.then(Vec::new),
            episodes: record.then(Vec::new),
            open: None,
        }
    }

    /// Integrates the state that held over `[last, now)`. Only states that last a positive
    /// time can become the worst moment (not transients inside one instant).
    fn advance_fleet(&mut self, now: SimTime) {
        let dt = u128::from((now - self.last).0);
        if dt > 0 && self.total_waiting > 0 && self.free_slots > 0 {
            let stranded = self.total_waiting.min(self.free_slots);
            self.idle_while_queued_ns += dt;
            self.stranded_ns += dt * u128::from(stranded);
            if self.worst.as_ref().is_none_or(|w| stranded > w.1) {
                let snap = self.backends.iter().map(|t| [t.running, t.waiting]).collect();
                self.worst = Some((self.last, stranded, snap));
            }
            if let Some(e) = &mut self.open {
                e.stranded_ns += dt * u128::from(stranded);
                e.peak_stranded = e.peak_stranded.max(stranded);
                for (i, t) in self.backends.iter().enumerate() {
                    if Self::free_of(t) > 0 {
                        e.free_ns[i] += dt as u64;
                    }
                    e.waiting_ns[i] += dt * u128::from(t.waiting);
                }
            }
        }
        self.last = now;
    }

    /// Opens or closes the episode after a state change at `now`.
    fn update_episode(&mut self, now: SimTime) {
        let Some(done) = self.episodes.as_mut() else {
            return;
        };
        let stranding = self.total_waiting > 0 && self.free_slots > 0;
        match (&mut self.open, stranding) {
            (None, true) => {
                let n = self.backends.len();
                self.open = Some(Episode {
                    start: now,
                    end: now,
                    stranded_ns: 0,
                    peak_stranded: 0,
                    free_ns: vec![0; n],
                    waiting_ns: vec![0; n],
                    peak_waiting: self.backends.iter().map(|t| t.waiting).collect(),
                });
            }
            (Some(e), true) => {
                for (p, t) in e.peak_waiting.iter_mut().zip(&self.backends) {
                    *p = (*p).max(t.waiting);
                }
            }
            (Some(_), false) => {
                let mut e = self.open.take().expect("open");
                e.end = now;
                if e.end > e.start {
                    done.push(e);
                }
            }
            (None, false) => {}
        }
    }

    fn advance_backend(t: &mut BackendTrack, now: SimTime) {
        let dt = u128::from((now - t.last).0);
        t.running_ns += dt * u128::from(t.running);
        t.waiting_ns += dt * u128::from(t.waiting);
        if t.running > 0 {
            t.busy_ns += dt;
        } else if t.waiting == 0 {
            if t.in_service {
                t.idle_ns += dt;
            } else {
                t.out_ns += dt;
            }
        }
        t.last = now;
    }

    fn free_of(t: &BackendTrack) -> u64 {
        if t.in_service && t.waiting == 0 {
            u64::from(t.slots - t.running.min(t.slots))
        } else {
            0
        }
    }

    /// Records backend `b`'s live state at `now`.
    pub fn set(&mut self, now: SimTime, b: BackendId, running: u32, waiting: u32, kv_used_blocks: u32) {
        let t = &self.backends[b.index()];
        if t.running == running && t.waiting == waiting {
            return;
        }
        self.advance_fleet(now);
        let t = &mut self.backends[b.index()];
        Self::advance_backend(t, now);
        self.total_waiting -= u64::from(t.waiting);
        self.free_slots -= Self::free_of(t);
        t.running = running;
        t.waiting = waiting;
        t.peak_running = t.peak_running.max(running);
        t.peak_waiting = t.peak_waiting.max(waiting);
        self.total_waiting += u64::from(waiting);
        self.free_slots += Self::free_of(t);
        if let Some(s) = &mut self.series {
            s.push(TsRow {
                t: now,
                backend: b,
                running,
                waiting,
                kv_used_blocks,
            });
        }
        self.update_episode(now);
    }

    /// Backend `b` enters or leaves service (discovery lists it or not) at `now`.
    pub fn set_in_service(&mut self, now: SimTime, b: BackendId, in_service: bool) {
        if self.backends[b.index()].in_service == in_service {
            return;
        }
        self.advance_fleet(now);
        let t = &mut self.backends[b.index()];
        Self::advance_backend(t, now);
        self.free_slots -= Self::free_of(t);
        t.in_service = in_service;
        self.free_slots += Self::free_of(t);
        self.update_episode(now);
    }

    /// Closes all integrals (and the open episode) at `end`.
    pub fn finish(&mut self, end: SimTime) {
        self.advance_fleet(end);
        for t in &mut self.backends {
            Self::advance_backend(t, end);
        }
        if let (Some(mut e), Some(done)) = (self.open.take(), self.episodes.as_mut()) {
            e.end = end;
            if e.end > e.start {
                done.push(e);
            }
        }
    }

    /// The recorded episodes (empty if not recorded).
    pub fn take_episodes(&mut self) -> Vec<Episode> {
        self.episodes.take().unwrap_or_default()
    }

    /// The recorded time series (empty if not recorded).
    pub fn take_series(&mut self) -> Vec<TsRow> {
        self.series.take().unwrap_or_default()
    }
}

/// One routing decision, with offsets into the per-backend view and truth arrays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecisionRow {
    /// Decision time.
    pub t: SimTime,
    /// The request.
    pub request: RequestId,
    /// Its session.
    pub session: SessionId,
    /// Its turn.
    pub turn: u32,
    /// The pick.
    pub backend: BackendId,
    /// Branch taken.
    pub branch: Branch,
    /// Prefix match length (characters).
    pub match_chars: u64,
}

/// One backend's entry of one decision's view, compactly (16 bytes instead of a
/// [`ViewEntry`]'s 72): engine stats are interned in [`DecisionLog::engines`] (an entry
/// only changes when a scrape pass publishes, so consecutive decisions share it), and the
/// request stats keep their integer counts (`qps` is `window_dispatches / W`, recomputed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// Index into `engines` (`ENGINE_NONE`: no stats), with `UNLISTED_BIT` set when
    /// discovery did not list the backend.
    engine: u32,
    /// `u32::MAX`: no request stats.
    window_dispatches: u32,
    in_prefill: u32,
    in_decoding: u32,
}

const UNLISTED_BIT: u32 = 1 << 31;
const ENGINE_NONE: u32 = UNLISTED_BIT - 1;
const REQUESTS_NONE: u32 = u32::MAX;

/// Every decision with the view the policy saw and the truth at that instant.
#[derive(Default)]
pub struct DecisionLog {
    /// Backends per decision (length of each view / truth slice).
    pub n_backends: usize,
    /// The request-stats window in seconds (`qps = window_dispatches / W`).
    pub qps_window_s: f64,
    /// Decisions in order.
    pub rows: Vec<DecisionRow>,
    /// `rows.len() * n_backends` compact view entries (read them with [`DecisionLog::view`]).
    pub views: Vec<AuditEntry>,
    /// Distinct engine-stats entries the views refer to.
    pub engines: Vec<EngineStatsEntry>,
    /// `rows.len() * n_backends` true outstanding counts.
    pub truth: Vec<u32>,
    /// Scratch: the router appends the view of the decision in progress here, then
    /// [`DecisionLog::commit_view`] stores it compactly.
    pub scratch: Vec<ViewEntry>,
    /// Per backend: the last interned engine entry and its index.
    last_engine: Vec<Option<(EngineStatsEntry, u32)>>,
}

/// The view of one decision: one [`ViewEntry`] per backend, decoded on access.
#[derive(Clone, Copy)]
pub struct View<'a> {
    log: &'a DecisionLog,
    entries: &'a [AuditEntry],
}

impl<'a> View<'a> {
    /// Backend `b`'s entry.
    pub fn get(&self, b: usize) -> ViewEntry {
        self.log.decode(self.entries[b])
    }

    /// Number of backends.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True for a fleet of no backends.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in backend order.
    pub fn iter(&self) -> ViewIter<'a> {
        ViewIter {
            log: self.log,
            entries: self.entries.iter(),
        }
    }
}

impl<'a> IntoIterator for View<'a> {
    type Item = ViewEntry;
    type IntoIter = ViewIter<'a>;
    fn into_iter(self) -> ViewIter<'a> {
        self.iter()
    }
}

/// Iterator over a [`View`]'s entries.
pub struct ViewIter<'a> {
    log: &'a DecisionLog,
    entries: std::slice::Iter<'a, AuditEntry>,
}

impl Iterator for ViewIter<'_> {
    type Item = ViewEntry;
    fn next(&mut self) -> Option<ViewEntry> {
        self.entries.next().map(|e| self.log.decode(*e))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for ViewIter<'_> {}

impl DecisionLog {
    /// An empty log for `n_backends` backends and a request-stats window of `qps_window_s`.
    pub fn new(n_backends: usize, qps_window_s: f64) -> DecisionLog {
        DecisionLog {
            n_backends,
            qps_window_s,
            last_engine: vec![None; n_backends],
            ..Default::default()
        }
    }

    /// Stores the view in `scratch` (one entry per backend) as the next decision's view.
    pub fn commit_view(&mut self) {
        assert_eq!(self.scratch.len(), self.n_backends, "a view covers every backend");
        if self.last_engine.len() != self.n_backends {
            self.last_engine = vec![None; self.n_backends];
        }
        self.views.reserve(self.n_backends);
        for (b, v) in self.scratch.iter().enumerate() {
            let mut engine = match v.engine {
                None => ENGINE_NONE,
                Some(e) => match self.last_engine[b] {
                    Some((last, idx)) if last == e => idx,
                    _ => {
                        let idx = self.engines.len() as u32;
                        assert!(idx < ENGINE_NONE, "too many distinct engine-stats entries");
                        self.engines.push(e);
                        self.last_engine[b] = Some((e, idx));
                        idx
                    }
                },
            };
            if !v.listed {
                engine |= UNLISTED_BIT;
            }
            let (window_dispatches, in_prefill, in_decoding) = match v.requests {
                None => (REQUESTS_NONE, 0, 0),
                Some(r) => {
                    assert!(r.window_dispatches != REQUESTS_NONE, "window dispatch count overflow");
                    debug_assert_eq!(r.qps, f64::from(r.window_dispatches) / self.qps_window_s);
                    (r.window_dispatches, r.in_prefill, r.in_decoding)
                }
            };
            self.views.push(AuditEntry {
                engine,
                window_dispatches,
                in_prefill,
                in_decoding,
            });
        }
        self.scratch.clear();
    }

    fn decode(&self, e: AuditEntry) -> ViewEntry {
        let idx = e.engine & !UNLISTED_BIT;
        ViewEntry {
            engine: (idx != ENGINE_NONE).then(|| self.engines[idx as usize]),
            requests: (e.window_dispatches != REQUESTS_NONE).then(|| RequestStatsEntry {
                window_dispatches: e.window_dispatches,
                qps: f64::from(e.window_dispatches) / self.qps_window_s,
                in_prefill: e.in_prefill,
                in_decoding: e.in_decoding,
            }),
            listed: e.engine & UNLISTED_BIT == 0,
        }
    }

    /// The view decision `i` saw.
    pub fn view(&self, i: usize) -> View<'_> {
        View {
            log: self,
            entries: &self.views[i * self.n_backends..(i + 1) * self.n_backends],
        }
    }

    /// View and truth slices of decision `i`.
    pub fn detail(&self, i: usize) -> (View<'_>, &[u32]) {
        let r = i * self.n_backends..(i + 1) * self.n_backends;
        (self.view(i), &self.truth[r])
    }
}

/// Summary statistics of a latency sample, seconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Sample size.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Rounds to the microsecond (reports only).
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Percentiles with linear interpolation between closest ranks (numpy's default).
pub fn percentiles(mut xs: Vec<f64>) -> Percentiles {
    if xs.is_empty() {
        return Percentiles::default();
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        let idx = p * (xs.len() - 1) as f64;
        let lo = idx.floor() as usize;
        let hi = idx.ceil() as usize;
        xs[lo] + (xs[hi] - xs[lo]) * (idx - lo as f64)
    };
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    Percentiles {
        count: xs.len() as u64,
        mean: round6(mean),
        p50: round6(q(0.5)),
        p90: round6(q(0.9)),
        p99: round6(q(0.99)),
        max: round6(*xs.last().expect("non-empty")),
    }
}

/// Request counts.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RequestCounts {
    /// Turns planned by the workload.
    pub planned: u64,
    /// Sent to the router.
    pub arrived: u64,
    /// Completed.
    pub finished: u64,
    /// Arrived but not completed (nor failed) when the run ended.
    pub in_flight: u64,
    /// Failed: their backend left or restarted while holding them, or refused them.
    pub failed: u64,
    /// Attempts refused by the router because discovery listed no endpoint.
    pub rejected: u64,
    /// Turns given up after the client's last retry (their sessions end there).
    pub abandoned: u64,
}

/// Per-backend results.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BackendSummary {
    /// Name (`backend-{i}`).
    pub name: String,
    /// URL.
    pub url: String,
    /// `[[backends.groups]]` name (absent for a single `[backends]` table).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Profile (`<model>/<gpu>/tp<N>`), when the group names one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// Concurrent-request slots (`max_num_seqs`).
    pub slots: u32,
    /// Requests routed here.
    pub requests: u64,
    /// Sessions whose first turn was routed here.
    pub first_turn_sessions: u64,
    /// Sessions whose latest turn was routed here (where they ended up).
    pub last_turn_sessions: u64,
    /// Highest running count.
    pub peak_running: u32,
    /// Highest waiting count.
    pub peak_waiting: u32,
    /// Time-averaged running count.
    pub mean_running: f64,
    /// Time-averaged waiting count.
    pub mean_waiting: f64,
    /// Seconds with at least one request running.
    pub busy_s: f64,
    /// Seconds in service with nothing running or waiting.
    pub idle_s: f64,
    /// Seconds out of the fleet (before joining, after leaving or draining, while
    /// restarting), nothing running.
    pub out_of_service_s: f64,
    /// Engine steps executed.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix cache hit rate (hit tokens / queried tokens).
    pub prefix_cache_hit_rate: f64,
}

/// The run summary written to `summary.json`. Deterministic: wall-clock figures are not
/// here (they go to `perf.json`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Master seed.
    pub seed: u64,
    /// Policy description.
    pub policy: String,
    /// fleetsim version.
    pub version: String,
    /// Simulated seconds until the last event.
    pub sim_time_s: f64,
    /// Events processed.
    pub events: u64,
    /// Backends.
    pub backend_count: u64,
    /// Sessions.
    pub sessions: u64,
    /// Sessions cut short by the context limit.
    pub sessions_hit_context_limit: u64,
    /// Request counts.
    pub requests: RequestCounts,
    /// See module docs.
    pub idle_while_queued_s: f64,
    /// See module docs.
    pub stranded_slot_s: f64,
    /// See module docs.
    pub latched_sessions: u64,
    /// The most sessions any one backend ended up holding (by latest turn): 8 when all of
    /// burst8's agents pile onto one backend.
    pub peak_backend_sessions: u64,
    /// Decisions per branch (every branch listed, zeros included).
    pub decisions_by_branch: BTreeMap<String, u64>,
    /// Per decision, the true outstanding requests of the pick minus the fewest any backend
    /// had at that instant (0 = the pick was among the least loaded in truth).
    pub decision_regret: Percentiles,
    /// Decisions whose pick was not among the least loaded in truth.
    pub decisions_with_regret: u64,
    /// Per decision that read engine stats, the age of the oldest entry it saw (seconds).
    pub view_age_s: Percentiles,
    /// Finished requests per simulated second.
    pub throughput_rps: f64,
    /// Output tokens of finished requests per simulated second.
    pub output_tokens_per_s: f64,
    /// Fleet prefix cache hit rate.
    pub prefix_cache_hit_rate: f64,
    /// Fleet preemptions.
    pub preemptions: u64,
    /// Engine arrival to first scheduled.
    pub queue_wait_s: Percentiles,
    /// Router arrival to first chunk at the client.
    pub ttft_s: Percentiles,
    /// Router arrival to stream end at the client.
    pub e2e_s: Percentiles,
    /// Time per output token after the first, per request with at least 2 output tokens:
    /// `(e2e - ttft) / (output_tokens - 1)`, as vLLM's `benchmarks/benchmark_serving.py`
    /// (`calculate_metrics`: `tpot = (latency - ttft) / (output_len - 1)`) computes it.
    pub tpot_s: Percentiles,
    /// Per backend.
    pub backends: Vec<BackendSummary>,
    /// The moment of greatest stranding, if any.
    pub worst_moment: Option<WorstMoment>,
    /// Replays of session traces: pacing and recorded-vs-simulated latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::trace::fidelity::ReplaySummary>,
}

/// Engine-side counters needed by the summary, per backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCounters {
    /// Steps.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix-cache query tokens.
    pub query_tokens: u64,
    /// Prefix-cache hit tokens.
    pub hit_tokens: u64,
}

/// Inputs of [`summarize`] besides the records.
pub struct SummaryInputs<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Seed.
    pub seed: u64,
    /// Policy description.
    pub policy: String,
    /// End of the run.
    pub end: SimTime,
    /// Events processed.
    pub events: u64,
    /// Backend names and URLs.
    pub names: Vec<(String, String)>,
    /// Group and profile per backend.
    pub labels: Vec<crate::backend::Label>,
    /// Engine counters per backend.
    pub engines: Vec<EngineCounters>,
    /// Planned requests.
    pub planned: u64,
    /// Sessions.
    pub sessions: u64,
    /// Sessions cut by the context limit.
    pub sessions_hit_context_limit: u64,
    /// Latched sessions (computed by the simulation, which knows the first-turn truth).
    pub latched_sessions: u64,
    /// Sessions per backend by first turn.
    pub first_turns: Vec<u64>,
    /// Sessions per backend by latest turn.
    pub last_turns: Vec<u64>,
    /// Per decision: true outstanding requests of the pick minus the fleet minimum.
    pub regrets: &'a [u32],
    /// Per decision that saw engine stats: age of the oldest entry, ns.
    pub view_ages_ns: &'a [u64],
    /// Attempts refused for lack of endpoints.
    pub rejected: u64,
    /// Turns abandoned after the last retry.
    pub abandoned: u64,
}

fn secs(ns: u128) -> f64 {
    round6(ns as f64 / 1e9)
}

/// Builds the summary.
pub fn summarize(inp: SummaryInputs, fleet: &FleetTracker, requests: &[RequestRec], decisions: &[Branch]) -> Summary {
    let end_s = inp.end.as_secs_f64();
    let span = inp.end.0 as f64;
    let n = inp.names.len();
    let mut per_backend_requests = vec![0u64; n];
    let mut finished = 0u64;
    let mut failed = 0u64;
    let mut out_tokens = 0u64;
    let (mut qw, mut ttft, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    for r in requests {
        per_backend_requests[r.backend.index()] += 1;
        if let (Some(a), Some(b)) = (r.t_engine, r.t_admit) {
            qw.push(ns_to_secs((b - a).0));
        }
        if let Some(f) = r.t_first_chunk {
            ttft.push(ns_to_secs((f - r.t_router).0));
        }
        if let Some(d) = r.t_done {
            e2e.push(ns_to_secs((d - r.t_router).0));
            finished += 1;
            out_tokens += u64::from(r.output_tokens);
        }
        if r.t_failed.is_some() {
            failed += 1;
        }
    }
    let mut by_branch: BTreeMap<String, u64> = Branch::ALL.iter().map(|b| (b.as_str().to_string(), 0)).collect();
    for b in decisions {
        *by_branch.get_mut(b.as_str()).expect("all branches listed") += 1;
    }
    // a / b, rounded for reports; 0 when there is nothing to divide by.
    let per = |a: f64, b: f64| if b > 0.0 { round6(a / b) } else { 0.0 };
    let ratio = |a: u64, b: u64| per(a as f64, b as f64);
    let backends = (0..n)
        .map(|i| {
            let t = &fleet.backends[i];
            let e = inp.engines[i];
            BackendSummary {
                name: inp.names[i].0.clone(),
                url: inp.names[i].1.clone(),
                group: inp.labels.get(i).map(|l| l.group.clone()).unwrap_or_default(),
                profile: inp.labels.get(i).map(|l| l.profile.clone()).unwrap_or_default(),
                slots: t.slots,
                requests: per_backend_requests[i],
                first_turn_sessions: inp.first_turns[i],
                last_turn_sessions: inp.last_turns[i],
                peak_running: t.peak_running,
                peak_waiting: t.peak_waiting,
                mean_running: per(t.running_ns as f64, span),
                mean_waiting: per(t.waiting_ns as f64, span),
                busy_s: secs(t.busy_ns),
                idle_s: secs(t.idle_ns),
                out_of_service_s: secs(t.out_ns),
                steps: e.steps,
                preemptions: e.preemptions,
                prefix_cache_hit_rate: ratio(e.hit_tokens, e.query_tokens),
            }
        })
        .collect();
    let q: u64 = inp.engines.iter().map(|e| e.query_tokens).sum();
    let h: u64 = inp.engines.iter().map(|e| e.hit_tokens).sum();
    let arrived = requests.len() as u64;
    Summary {
        scenario: inp.scenario.to_string(),
        seed: inp.seed,
        policy: inp.policy,
        version: env!("CARGO_PKG_VERSION").to_string(),
        sim_time_s: round6(end_s),
        events: inp.events,
        backend_count: n as u64,
        sessions: inp.sessions,
        sessions_hit_context_limit: inp.sessions_hit_context_limit,
        requests: RequestCounts {
            planned: inp.planned,
            arrived,
            finished,
            in_flight: arrived - finished - failed,
            failed,
            rejected: inp.rejected,
            abandoned: inp.abandoned,
        },
        idle_while_queued_s: secs(fleet.idle_while_queued_ns),
        stranded_slot_s: secs(fleet.stranded_ns),
        latched_sessions: inp.latched_sessions,
        peak_backend_sessions: inp.last_turns.iter().copied().max().unwrap_or(0),
        decision_regret: percentiles(inp.regrets.iter().map(|&r| f64::from(r)).collect()),
        decisions_with_regret: inp.regrets.iter().filter(|&&r| r > 0).count() as u64,
        view_age_s: percentiles(inp.view_ages_ns.iter().map(|&a| ns_to_secs(a)).collect()),
        decisions_by_branch: by_branch,
        throughput_rps: per(finished as f64, end_s),
        output_tokens_per_s: per(out_tokens as f64, end_s),
        prefix_cache_hit_rate: ratio(h, q),
        preemptions: inp.engines.iter().map(|e| e.preemptions).sum(),
        queue_wait_s: percentiles(qw),
        ttft_s: percentiles(ttft),
        e2e_s: percentiles(e2e),
        tpot_s: tpot_of(requests),
        backends,
        worst_moment: fleet.worst.as_ref().map(|(t, s, b)| WorstMoment {
            t_s: round6(t.as_secs_f64()),
            stranded: *s,
            backends: b.clone(),
        }),
        replay: None,
    }
}

/// TPOT percentiles over the finished requests with at least 2 output tokens (see
/// [`Summary::tpot_s`]); client-side times, as the benchmark measures them.
fn tpot_of(requests: &[RequestRec]) -> Percentiles {
    percentiles(
        requests
            .iter()
            .filter(|r| r.output_tokens > 1)
            .filter_map(|r| Some(ns_to_secs((r.t_done? - r.t_first_chunk?).0) / f64::from(r.output_tokens - 1)))
            .collect(),
    )
}

/// Summary keys that identify rather than measure.
const NOT_METRICS: [&str; 5] = ["scenario", "seed", "policy", "version", "worst_moment"];

/// Adds the numbers in `v` to `out` as `prefix.key[i].leaf` -> value (booleans as 0/1;
/// strings and nulls left out). Shared by sweeps, checks and goldens so a metric has one
/// name everywhere.
pub fn flatten_json(prefix: &str, v: &serde_json::Value, out: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::Value;
    match v {
        Value::Number(_) => {
            out.insert(prefix.to_string(), v.clone());
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), Value::from(u8::from(*b)));
        }
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten_json(&p, x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten_json(&format!("{prefix}[{i}]"), x, out);
            }
        }
        Value::String(_) | Value::Null => {}
    }
}

/// The summary's numbers as `key.sub[i].leaf` -> value (strings and identifiers left out),
/// percentiles named with the unit last: `ttft_s.p99` in `summary.json` is `ttft_p99_s`,
/// its count `ttft_count`, `decision_regret.p50` is `decision_regret_p50`.
pub fn flatten(s: &Summary) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::{Map, Value};
    let mut out = Map::new();
    if let Value::Object(m) = serde_json::to_value(s).expect("a summary serializes") {
        for (k, v) in m {
            if NOT_METRICS.contains(&k.as_str()) {
                continue;
            }
            match &v {
                Value::Object(p) if p.contains_key("p50") => {
                    for (leaf, x) in p {
                        flatten_json(&percentile_name(&k, leaf), x, &mut out);
                    }
                }
                _ => flatten_json(&k, &v, &mut out),
            }
        }
    }
    out
}

/// Unit suffixes that go last in a metric name.
pub const UNITS: [&str; 3] = ["_per_s", "_rps", "_s"];

/// `(name without its unit, unit)`: `("ttft", "_s")`, `("peak_waiting", "")`.
pub fn split_unit(name: &str) -> (&str, &str) {
    UNITS
        .iter()
        .find_map(|u| name.strip_suffix(u).map(|b| (b, *u)))
        .unwrap_or((name, ""))
}

/// `ttft_s` + `p99` -> `ttft_p99_s`; the count has no unit: `ttft_count`.
fn percentile_name(key: &str, leaf: &str) -> String {
    let (base, unit) = split_unit(key);
    if leaf == "count" {
        format!("{base}_count")
    } else {
        format!("{base}_{leaf}{unit}")
    }
}

/// A statistic of a metric with the unit kept last: (`ttft_p99_s`, `mean`) ->
/// `ttft_p99_mean_s`, (`peak_backend_sessions`, `std`) -> `peak_backend_sessions_std`.
pub fn stat_name(metric: &str, stat: &str) -> String {
    let (base, unit) = split_unit(metric);
    format!("{base}_{stat}{unit}")
}

/// The current name of a metric written in the old style (before units went last):
/// `ttft_s.p99` -> `ttft_p99_s`, `decision_regret.max` -> `decision_regret_max`; other
/// names are returned unchanged. Keeps older `[expect]` bounds, `--metric`s and goldens
/// working.
pub fn canonical_metric(name: &str) -> std::borrow::Cow<'_, str> {
    const LEAVES: [&str; 6] = ["count", "mean", "p50", "p90", "p99", "max"];
    if let Some((key, leaf)) = name.split_once('.')
        && LEAVES.contains(&leaf)
        && !key.contains(['.', '['])
    {
        return percentile_name(key, leaf).into();
    }
    name.into()
}

/// Whether `name` is a metric a run reports: a fleet-level summary key (`ttft_p99_s`, or its
/// old spelling `ttft_s.p99`) or a
/// per-backend one (`backends[3].peak_waiting`).
pub fn known_metric(name: &str) -> bool {
    use std::sync::OnceLock;
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let mut s = Summary::default();
        s.backends.push(Default::default());
        s.decisions_by_branch = Branch::ALL.iter().map(|b| (b.as_str().to_string(), 0)).collect();
        flatten(&s).keys().cloned().collect()
    });
    if let Some(rest) = name.strip_prefix("backends[")
        && let Some((idx, field)) = rest.split_once("].")
        && idx.parse::<u32>().is_ok()
    {
        return keys.iter().any(|k| k.strip_prefix("backends[0].") == Some(field));
    }
    let name = canonical_metric(name);
    keys.iter().any(|k| *k == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_put_the_unit_last() {
        let s = Summary {
            ttft_s: percentiles(vec![1.0, 2.0]),
            ..Default::default()
        };
        let m = flatten(&s);
        assert_eq!(m["ttft_p99_s"], serde_json::json!(1.99));
        assert_eq!(m["ttft_count"], serde_json::json!(2));
        assert!(
            m.contains_key("decision_regret_p50")
                && m.contains_key("tpot_p90_s")
                && m.contains_key("output_tokens_per_s")
        );
        assert!(
            !m.keys().any(|k| k.contains("_s.")),
            "{:?}",
            m.keys().collect::<Vec<_>>()
        );
        assert_eq!(canonical_metric("ttft_s.p99"), "ttft_p99_s");
        assert_eq!(canonical_metric("queue_wait_s.count"), "queue_wait_count");
        assert_eq!(canonical_metric("decision_regret.max"), "decision_regret_max");
        assert_eq!(canonical_metric("backends[1].busy_s"), "backends[1].busy_s");
        assert_eq!(canonical_metric("requests.finished"), "requests.finished");
        assert!(known_metric("ttft_s.p99") && known_metric("tpot_p99_s") && !known_metric("ttft_s.p98"));
        assert_eq!(stat_name("ttft_p99_s", "mean"), "ttft_p99_mean_s");
        assert_eq!(stat_name("throughput_rps", "ci95"), "throughput_ci95_rps");
        assert_eq!(stat_name("output_tokens_per_s", "std"), "output_tokens_std_per_s");
        assert_eq!(stat_name("latched_sessions", "mean"), "latched_sessions_mean");
    }

    #[test]
    fn tpot_is_vllm_benchmark_serving_definition() {
        let rec = |out: u32, first_ms: u64, done_ms: u64| RequestRec {
            session: SessionId(0),
            turn: 0,
            backend: BackendId(0),
            branch: Branch::ALL[0],
            prompt_tokens: 10,
            output_tokens: out,
            t_router: SimTime(0),
            t_engine: Some(SimTime(0)),
            t_admit: Some(SimTime(0)),
            t_first_token: Some(SimTime(first_ms * 1_000_000)),
            t_first_chunk: Some(SimTime(first_ms * 1_000_000)),
            t_finish_engine: Some(SimTime(done_ms * 1_000_000)),
            t_done: Some(SimTime(done_ms * 1_000_000)),
            t_failed: None,
            cached_tokens: 0,
            preemptions: 0,
        };
        // (1000 - 100) ms over 9 gaps = 100 ms; (700 - 100) over 3 = 200 ms; 1 token: none.
        let t = tpot_of(&[rec(10, 100, 1000), rec(4, 100, 700), rec(1, 100, 100)]);
        assert_eq!((t.count, t.p50), (2, 0.15));
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let p = percentiles(vec![4.0, 1.0, 3.0, 2.0]);
        // numpy.percentile([1,2,3,4], [50, 90, 99]) = 2.5, 3.7, 3.97
        assert_eq!((p.p50, p.p90, p.p99, p.max, p.mean), (2.5, 3.7, 3.97, 4.0, 2.5));
        assert_eq!(percentiles(vec![]).count, 0);
    }

    #[test]
    fn idle_while_queued_and_stranded_integrals() {
        // Two backends with 4 slots. 0..10: b1 runs 4 and queues 4, b0 idle -> both integrals
        // accrue (stranded = min(4 waiting, 4 free) = 4). 10..20: b0 takes 2 -> 2 free on b0
        // ... b1 still queues 2 -> stranded min(2, 2) = 2.
        let mut f = FleetTracker::new(&[4, 4], true);
        f.set(SimTime(0), BackendId(1), 4, 4, 0);
        f.set(SimTime(10), BackendId(1), 4, 2, 0);
        f.set(SimTime(10), BackendId(0), 2, 0, 0);
        f.set(SimTime(20), BackendId(1), 4, 0, 0);
        f.finish(SimTime(30));
        assert_eq!(f.idle_while_queued_ns, 20);
        assert_eq!(f.stranded_ns, 4 * 10 + 2 * 10);
        let w = f.worst.clone().unwrap();
        assert_eq!((w.0, w.1, w.2.clone()), (SimTime(0), 4, vec![[0, 0], [4, 4]]));
        assert_eq!(f.backends[0].idle_ns, 10);
        assert_eq!(f.backends[1].busy_ns, 30);
        assert_eq!(f.backends[1].peak_waiting, 4);
        assert_eq!(f.take_series().len(), 4);
    }

    #[test]
    fn a_queue_behind_kv_is_not_a_free_slot() {
        // b0 runs 1 of 4 slots but has a waiting request (KV-bound): its slots are not free,
        // so its own queue does not count as stranded.
        let mut f = FleetTracker::new(&[4, 4], false);
        f.set(SimTime(0), BackendId(0), 1, 1, 0);
        f.set(SimTime(0), BackendId(1), 4, 0, 0);
        f.finish(SimTime(100));
        assert_eq!(f.idle_while_queued_ns, 0);
        assert!(f.worst.is_none(), "a zero-length transient is not the worst moment");
    }
}
