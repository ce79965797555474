//! The engine thread: every backend's [`LiveEngine`] on one simulated clock mapped to wall
//! time, fed by the HTTP handlers through a channel, sending each request's tokens back to
//! its handler as the engine samples them, and keeping what `sim run` would record (request
//! records, the fleet tracker, the metrics `/metrics` exports).
//!
//! One synchronous thread, no async runtime: it sleeps on its channel until the next step
//! end (`recv_timeout`, microsecond-accurate on Linux, where a tokio timer rounds to the
//! millisecond), then advances every engine to the clock's simulated now.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc::UnboundedSender, watch};

use crate::backend::Gauges;
use crate::backend::live::{Emission, LiveCounters, LiveEngine, Slowdown};
use crate::backend::vllm::VllmConfig;
use crate::content::Content;
use crate::decision::Branch;
use crate::faults::{Fault, FaultKind};
use crate::fleet::{FleetEvent, FleetEventKind, Membership};
use crate::ids::{BackendId, RequestId, SessionId};
use crate::live::Clock;
use crate::metrics::{FleetTracker, RequestRec, TsRow};
use crate::time::{SimDuration, SimTime};
use crate::vllm_metrics as vm;

/// The most engine work done between two looks at the command channel.
const SLICE: Duration = Duration::from_millis(5);
/// The most engine work done at a stop to catch up with the wall clock.
const STOP_CATCH_UP: Duration = Duration::from_secs(2);

/// Why a request ended, as vLLM's `finish_reason` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The model stopped (an EOS before `max_tokens`).
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Reason {
    /// `finish_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Stop => "stop",
            Reason::Length => "length",
        }
    }
}

/// What the engine thread tells a request's handler.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// One output token, sampled at simulated `at`.
    Token {
        /// The step's end.
        at: SimTime,
    },
    /// The last token has been sent: the request is finished.
    Done {
        /// The step's end.
        at: SimTime,
    },
    /// The backend was killed (restart or leave) while it held the request.
    Failed,
}

/// A request for the engine thread.
pub struct Submit {
    /// Backend index.
    pub backend: usize,
    /// Unique over the server's life.
    pub id: RequestId,
    /// Tokens and blocks.
    pub content: Content,
    /// When the HTTP request arrived (simulated).
    pub arrival: SimTime,
    /// The session key header, if any (for the per-session figures).
    pub session: Option<String>,
    /// `stop` or `length` when the last token comes.
    pub reason: Reason,
    /// Where tokens go.
    pub tx: UnboundedSender<Ev>,
    /// The token ids of its full blocks, for the KV events (empty when they are off).
    pub kv_tokens: Vec<u32>,
}

/// Commands to the engine thread.
pub enum Cmd {
    /// A request arrives.
    Submit(Box<Submit>),
    /// The client went away: abort.
    Abort {
        /// Backend index.
        backend: usize,
        /// The request.
        id: RequestId,
    },
    /// Stop and hand back the records.
    Stop(std::sync::mpsc::Sender<Records>),
}

/// A histogram as vLLM keeps it: per-bucket counts (the last is `+Inf`), sum and count.
#[derive(Clone, Debug)]
pub struct Hist {
    /// Upper bounds.
    pub bounds: &'static [f64],
    /// Non-cumulative counts, `bounds.len() + 1` of them.
    pub counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
}

impl Hist {
    fn new(m: &vm::Metric) -> Hist {
        Hist {
            bounds: m.buckets,
            counts: vec![0; m.buckets.len() + 1],
            sum: 0.0,
        }
    }

    fn observe(&mut self, x: f64) {
        let i = self.bounds.partition_point(|&b| b < x);
        self.counts[i] += 1;
        self.sum += x;
    }
}

/// What one backend's `/metrics` exports, as of the engine thread's latest advance.
#[derive(Clone, Debug)]
pub struct MetricsState {
    /// Gauges as published at the latest step end.
    pub gauges: Gauges,
    /// Engine counters.
    pub counters: LiveCounters,
    /// `vllm:prompt_tokens`.
    pub prompt_tokens: u64,
    /// `vllm:generation_tokens`.
    pub generation_tokens: u64,
    /// `vllm:request_success` by [`vm::FINISH_REASONS`].
    pub success: [u64; 3],
    /// `vllm:time_to_first_token_seconds`.
    pub ttft: Hist,
    /// `vllm:time_per_output_token_seconds`.
    pub tpot: Hist,
    /// `vllm:e2e_request_latency_seconds`.
    pub e2e: Hist,
    /// `vllm:request_queue_time_seconds`.
    pub queue: Hist,
    /// Gauges published at each step end over the longest `extra_lag` of this backend
    /// (with the time), for a lagged scrape.
    pub history: VecDeque<(SimTime, Gauges)>,
    /// Frozen values by fault index (the first read in a `frozen_stats` window).
    pub frozen: HashMap<usize, Gauges>,
}

impl Default for MetricsState {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsState {
    /// Nothing observed yet.
    pub fn new() -> MetricsState {
        MetricsState {
            gauges: Gauges::default(),
            counters: LiveCounters::default(),
            prompt_tokens: 0,
            generation_tokens: 0,
            success: [0; 3],
            ttft: Hist::new(&vm::TIME_TO_FIRST_TOKEN),
            tpot: Hist::new(&vm::TIME_PER_OUTPUT_TOKEN),
            e2e: Hist::new(&vm::E2E_REQUEST_LATENCY),
            queue: Hist::new(&vm::REQUEST_QUEUE_TIME),
            history: VecDeque::new(),
            frozen: HashMap::new(),
        }
    }

    /// The gauges published at or before `t` (the oldest kept if none).
    pub fn gauges_at(&self, t: SimTime) -> Gauges {
        let i = self.history.partition_point(|(at, _)| *at <= t);
        if i == 0 {
            self.history.front().map_or(self.gauges, |h| h.1)
        } else {
            self.history[i - 1].1
        }
    }
}

/// One backend as the HTTP side sees it.
pub struct BackendShared {
    /// Name (`backend-0`).
    pub name: String,
    /// Metrics.
    pub metrics: Mutex<MetricsState>,
    /// Membership, set by the engine thread as the scenario's fleet events happen.
    pub membership: watch::Sender<Membership>,
    /// Tokens the engine can hold for one request (`max_model_len`).
    pub max_model_len: u32,
    /// Engine settings (for `vllm:cache_config_info` and `/get_server_info`).
    pub cfg: VllmConfig,
}

/// Everything the HTTP handlers share.
pub struct Shared {
    /// The clock.
    pub clock: Clock,
    /// Per backend.
    pub backends: Vec<BackendShared>,
    /// The scenario's faults.
    pub faults: Vec<Fault>,
    /// Request ids.
    pub next_id: AtomicU32,
    /// To the engine thread.
    pub cmd: Sender<Cmd>,
    /// Served model name.
    pub model: String,
    /// Text to tokens and back.
    pub tokenizer: super::text::Tokenizer,
    /// Bounds on one request's body.
    pub limits: BodyLimits,
    /// Lateness of streamed tokens (wall time written minus the engine's schedule), µs.
    pub lateness_us: Mutex<Vec<u32>>,
    /// The backends publish KV events (`--kv-events`): requests carry their blocks' token ids.
    pub kv_events: bool,
}

/// Bounds on one request's body.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Largest body accepted, bytes (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Longest wait for the whole body once the headers are in (`--body-timeout`).
    pub body_timeout: std::time::Duration,
}

impl Shared {
    /// A fresh request id; `None` once all `u32` ids are used (they never wrap: two live
    /// requests with one id would be one request to the engine).
    pub fn request_id(&self) -> Option<RequestId> {
        self.next_id
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .ok()
            .filter(|&n| n < u32::MAX)
            .map(RequestId)
    }
}

/// What the engine thread recorded, handed back at the end.
pub struct Records {
    /// One per request that reached an engine.
    pub requests: Vec<RequestRec>,
    /// Session keys by session id.
    pub session_keys: Vec<String>,
    /// Per-backend running/waiting rows.
    pub series: Vec<TsRow>,
    /// The fleet tracker, finished at `end`.
    pub tracker: FleetTracker,
    /// Engine counters per backend (summed over restarts).
    pub counters: Vec<LiveCounters>,
    /// Inter-token gaps, ns -> count.
    pub itl_ns: BTreeMap<u64, u64>,
    /// Simulated end.
    pub end: SimTime,
    /// Requests in flight at the end.
    pub in_flight: u64,
    /// Sessions whose first turn went to a backend with more requests outstanding than the
    /// least loaded one in service, and whose turns all stayed there.
    pub latched_sessions: u64,
}

struct Live {
    backend: usize,
    tx: UnboundedSender<Ev>,
    rec: usize,
    reason: Reason,
    last_token: Option<SimTime>,
}

struct Node {
    engine: LiveEngine,
    membership: Membership,
    outstanding: u32,
    retired: LiveCounters,
    restart_at: Option<SimTime>,
}

/// The engine thread's state.
pub struct Fleet {
    shared: Arc<Shared>,
    cfgs: Vec<VllmConfig>,
    nodes: Vec<Node>,
    live: HashMap<RequestId, Live>,
    records: Vec<RequestRec>,
    sessions: HashMap<String, (SessionId, u32)>,
    session_keys: Vec<String>,
    first_suboptimal: Vec<bool>,
    tracker: FleetTracker,
    events: Vec<FleetEvent>,
    next_event: usize,
    itl_ns: BTreeMap<u64, u64>,
    max_lag: Vec<SimDuration>,
    scratch: Vec<Emission>,
    merged: Vec<(SimTime, usize, Emission)>,
    /// Commands read from the channel, with the simulated instant each was read, waiting
    /// for the engines to reach it.
    pending: VecDeque<(SimTime, Cmd)>,
    /// The simulated time every engine, event and command has been run to.
    reached: SimTime,
    /// Per backend, what its KV events need (empty: `--kv-events` is off).
    books: Vec<super::kv_events::Book>,
    kv_scratch: Vec<crate::view::KvEvent>,
    hash_scratch: Vec<u64>,
}

fn add(a: LiveCounters, b: LiveCounters) -> LiveCounters {
    LiveCounters {
        steps: a.steps + b.steps,
        preemptions: a.preemptions + b.preemptions,
        cache: crate::backend::vllm::PrefixCacheStats {
            query_tokens: a.cache.query_tokens + b.cache.query_tokens,
            hit_tokens: a.cache.hit_tokens + b.cache.hit_tokens,
        },
        aborted: a.aborted + b.aborted,
    }
}

impl Fleet {
    /// The fleet at simulated zero, each backend in its membership at time zero.
    pub fn new(
        shared: Arc<Shared>,
        cfgs: Vec<VllmConfig>,
        initial: &[Membership],
        events: Vec<FleetEvent>,
        books: Vec<super::kv_events::Book>,
    ) -> Fleet {
        let kv = !books.is_empty();
        let n = cfgs.len();
        let slots: Vec<u32> = cfgs.iter().map(|c| c.max_num_seqs).collect();
        let mut tracker = FleetTracker::new(&slots, true);
        let nodes = cfgs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if initial[i] != Membership::Active {
                    tracker.set_in_service(SimTime(0), BackendId::from_index(i), false);
                }
                Node {
                    engine: fresh(c, &shared.faults, i, kv),
                    membership: initial[i],
                    outstanding: 0,
                    retired: LiveCounters::default(),
                    restart_at: None,
                }
            })
            .collect();
        let max_lag = (0..n)
            .map(|i| {
                shared
                    .faults
                    .iter()
                    .filter(|f| f.backend.index() == i)
                    .filter_map(|f| match f.kind {
                        FaultKind::ExtraLag(l) => Some(l),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(SimDuration(0))
            })
            .collect();
        let mut events = events;
        events.sort_by_key(|e| e.at);
        Fleet {
            shared,
            cfgs,
            nodes,
            live: HashMap::new(),
            records: Vec::new(),
            sessions: HashMap::new(),
            session_keys: Vec::new(),
            first_suboptimal: Vec::new(),
            tracker,
            events,
            next_event: 0,
            itl_ns: BTreeMap::new(),
            max_lag,
            scratch: Vec::new(),
            merged: Vec::new(),
            pending: VecDeque::new(),
            reached: SimTime::ZERO,
            books,
            kv_scratch: Vec::new(),
            hash_scratch: Vec::new(),
        }
    }

    /// Runs until [`Cmd::Stop`] or until every sender is gone. The engines advance in
    /// slices of at most 5 ms of work, and every command waiting is read between two
    /// slices: however far behind the wall clock the engines fall (a long request at a high
    /// `--speed`), a stop is answered within a slice, and a request is submitted at the
    /// simulated instant it reached this thread.
    pub fn run(mut self, rx: Receiver<Cmd>) {
        loop {
            let now = self.shared.clock.sim_now();
            let caught_up = self.advance(now, Instant::now() + SLICE);
            let stop = loop {
                match rx.try_recv() {
                    Ok(Cmd::Stop(reply)) => break Some(reply),
                    Ok(c) => self.pending.push_back((self.shared.clock.sim_now(), c)),
                    Err(TryRecvError::Empty) => break None,
                    Err(TryRecvError::Disconnected) => return,
                }
            };
            if let Some(reply) = stop {
                let _ = reply.send(self.stop());
                return;
            }
            if !caught_up || !self.pending.is_empty() {
                continue;
            }
            // Caught up, nothing pending: sleep until the next step end or a command.
            let cmd = match self.next_wakeup() {
                Some(t) => {
                    let wait = self.shared.clock.wall_of(t).saturating_duration_since(Instant::now());
                    if wait.is_zero() {
                        continue;
                    }
                    match rx.recv_timeout(wait) {
                        Ok(c) => c,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                None => match rx.recv() {
                    Ok(c) => c,
                    Err(_) => return,
                },
            };
            match cmd {
                Cmd::Stop(reply) => {
                    let _ = reply.send(self.stop());
                    return;
                }
                c => self.pending.push_back((self.shared.clock.sim_now(), c)),
            }
        }
    }

    /// The records at a stop: the engines caught up to now, for at most [`STOP_CATCH_UP`]
    /// of work (then as far as they got).
    fn stop(mut self) -> Records {
        let now = self.shared.clock.sim_now();
        self.advance(now, Instant::now() + STOP_CATCH_UP);
        self.finish()
    }

    /// A command, at simulated `t`.
    fn command(&mut self, t: SimTime, c: Cmd) {
        match c {
            Cmd::Submit(s) => self.submit(t, *s),
            Cmd::Abort { backend, id } => self.abort(t, backend, id),
            // Answered as it is read.
            Cmd::Stop(_) => {}
        }
    }

    fn next_wakeup(&self) -> Option<SimTime> {
        let steps = self.nodes.iter().filter_map(|n| n.engine.next_event()).min();
        let fleet = self.next_change().map(|c| c.0);
        [steps, fleet].into_iter().flatten().min()
    }

    /// The next fleet event or restart return: its time and `usize::MAX` for an event, the
    /// backend for a return.
    fn next_change(&self) -> Option<(SimTime, usize)> {
        let ev_at = self.events.get(self.next_event).map(|e| (e.at, usize::MAX));
        let back_at = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.restart_at.map(|t| (t, i)))
            .min();
        [ev_at, back_at].into_iter().flatten().min()
    }

    /// Applies [`Self::next_change`], due at `t`.
    fn apply_change(&mut self, t: SimTime, who: usize) {
        if who == usize::MAX {
            let e = self.events[self.next_event];
            self.next_event += 1;
            self.fleet_event(t, e);
        } else {
            self.nodes[who].restart_at = None;
            self.join(t, who);
        }
    }

    /// Runs every engine step, fleet event and pending command due up to `now`, in time
    /// order (at one instant: steps, then fleet events, then commands), until `deadline`;
    /// true if it reached `now`.
    fn advance(&mut self, now: SimTime, deadline: Instant) -> bool {
        let mut n = 0u32;
        loop {
            let step = self.nodes.iter().filter_map(|n| n.engine.next_event()).min();
            let change = self.next_change();
            let cmd = self.pending.front().map(|p| p.0);
            let due = [step, change.map(|c| c.0), cmd].into_iter().flatten().min();
            let Some(t) = due.filter(|&t| t <= now) else {
                break;
            };
            self.advance_engines(t);
            match change {
                Some((at, who)) if at == t && step != Some(t) => self.apply_change(t, who),
                _ if step != Some(t) => {
                    if let Some((at, c)) = self.pending.pop_front() {
                        self.command(at, c);
                    }
                }
                _ => {}
            }
            self.reached = self.reached.max(t);
            n += 1;
            if n.is_multiple_of(16) && Instant::now() >= deadline {
                return false;
            }
        }
        self.advance_engines(now);
        self.reached = self.reached.max(now);
        true
    }

    fn submit(&mut self, now: SimTime, s: Submit) {
        let b = s.backend;
        let node = &self.nodes[b];
        if node.membership != Membership::Active {
            // Left or restarted between the handler's check and now: refused.
            let _ = s.tx.send(Ev::Failed);
            return;
        }
        let least = self
            .nodes
            .iter()
            .filter(|n| n.membership == Membership::Active)
            .map(|n| n.outstanding)
            .min()
            .unwrap_or(0);
        let (session, turn) = match s.session {
            Some(key) => match self.sessions.get_mut(&key) {
                Some((sid, turns)) => {
                    *turns += 1;
                    (*sid, *turns - 1)
                }
                None => {
                    let sid = SessionId::from_index(self.session_keys.len());
                    self.session_keys.push(key.clone());
                    self.sessions.insert(key, (sid, 1));
                    self.first_suboptimal.push(node.outstanding > least);
                    (sid, 0)
                }
            },
            None => {
                let sid = SessionId::from_index(self.session_keys.len());
                self.session_keys.push(format!("request-{}", s.id.0));
                self.first_suboptimal.push(node.outstanding > least);
                (sid, 0)
            }
        };
        let rec = self.records.len();
        self.records.push(RequestRec {
            t_engine: Some(now),
            ..RequestRec::routed(
                session,
                turn,
                BackendId::from_index(b),
                Branch::RoundRobin,
                s.content.prompt_tokens,
                s.content.output_tokens,
                s.arrival.min(now),
            )
        });
        self.live.insert(
            s.id,
            Live {
                backend: b,
                tx: s.tx,
                rec,
                reason: s.reason,
                last_token: None,
            },
        );
        self.nodes[b].outstanding += 1;
        if let Some(book) = self.books.get_mut(b) {
            let bt = self.cfgs[b].block_size_tokens;
            let n = (s.kv_tokens.len() / bt.max(1) as usize).min((s.content.total_tokens() / bt.max(1)) as usize);
            crate::content::block_hashes(&s.content, bt, n, &mut self.hash_scratch);
            book.learn(&self.hash_scratch, &s.kv_tokens);
        }
        self.nodes[b].engine.submit(now, s.id, s.content);
        self.collect(b);
        self.dispatch();
    }

    fn abort(&mut self, now: SimTime, b: usize, id: RequestId) {
        if !self.live.contains_key(&id) {
            return;
        }
        self.nodes[b].engine.abort(now, id);
        // Between steps the engine dropped it already; during a step it drops it at the
        // step's end. Either way the server is done with it now.
        let l = self.live.remove(&id).expect("checked");
        self.records[l.rec].t_failed = Some(now);
        self.nodes[b].outstanding -= 1;
        self.lock(b).success[2] += 1;
        self.collect(b);
        self.dispatch();
        self.maybe_drained(now, b);
    }

    fn advance_engines(&mut self, t: SimTime) {
        for b in 0..self.nodes.len() {
            if self.nodes[b].engine.next_event().is_some_and(|e| e <= t) {
                self.nodes[b].engine.advance(t);
                self.collect(b);
            }
        }
        self.dispatch();
    }

    /// Moves backend `b`'s emissions into the merge buffer.
    fn collect(&mut self, b: usize) {
        if let Some(book) = self.books.get_mut(b) {
            self.kv_scratch.clear();
            self.nodes[b].engine.drain_kv_events(&mut self.kv_scratch);
            book.publish(&self.kv_scratch);
        }
        self.scratch.clear();
        self.nodes[b].engine.drain(&mut self.scratch);
        for &e in &self.scratch {
            self.merged.push((LiveEngine::at(&e), b, e));
        }
    }

    /// Applies the merged emissions of all backends in time order.
    fn dispatch(&mut self) {
        if self.merged.is_empty() {
            return;
        }
        let mut merged = std::mem::take(&mut self.merged);
        merged.sort_by_key(|&(at, b, _)| (at, b));
        let mut touched = vec![false; self.nodes.len()];
        for &(at, b, e) in &merged {
            touched[b] = true;
            match e {
                Emission::State {
                    running,
                    waiting,
                    kv_used_blocks,
                    ..
                } => {
                    if self.nodes[b].membership != Membership::Absent {
                        self.tracker
                            .set(at, BackendId::from_index(b), running, waiting, kv_used_blocks);
                    }
                }
                Emission::Admitted { id, at, cached_tokens } => self.admitted(b, id, at, cached_tokens),
                Emission::Preempted { .. } => {}
                Emission::Token { id, at } => self.token(b, id, at),
                Emission::Finished { id, at, preemptions } => self.finished(b, id, at, preemptions),
            }
        }
        merged.clear();
        self.merged = merged;
        for (b, t) in touched.into_iter().enumerate() {
            if t {
                self.publish(b);
                let now = self.nodes[b].engine.now();
                self.maybe_drained(now, b);
            }
        }
    }

    /// Request `id` left backend `b`'s queue at `at`: its queue time.
    fn admitted(&mut self, b: usize, id: RequestId, at: SimTime, cached_tokens: u32) {
        if let Some(l) = self.live.get(&id) {
            let r = &mut self.records[l.rec];
            if r.t_admit.is_none() {
                r.t_admit = Some(at);
                r.cached_tokens = cached_tokens;
                let q = (at - r.t_engine.unwrap_or(at)).as_secs_f64();
                self.lock(b).queue.observe(q);
            }
        }
    }

    /// Request `id` sampled a token at `at`: to its handler, and into the figures.
    fn token(&mut self, b: usize, id: RequestId, at: SimTime) {
        let Some(l) = self.live.get_mut(&id) else { return };
        let r = &mut self.records[l.rec];
        let first = l.last_token.is_none();
        let gap = l.last_token.map(|p| (at - p).0);
        l.last_token = Some(at);
        if first {
            r.t_first_token = Some(at);
            r.t_first_chunk = Some(at);
        }
        let (arrival, prompt) = (r.t_router, r.prompt_tokens);
        if l.tx.send(Ev::Token { at }).is_err() {
            // The handler is gone without an abort (it panicked or was cancelled): abort
            // here.
            self.pending_abort(b, id);
            return;
        }
        if let Some(g) = gap {
            *self.itl_ns.entry(g).or_insert(0) += 1;
        }
        let mut m = self.lock(b);
        m.generation_tokens += 1;
        if first {
            m.prompt_tokens += u64::from(prompt);
            m.ttft.observe((at - arrival).as_secs_f64());
        } else if let Some(g) = gap {
            m.tpot.observe(g as f64 / 1e9);
        }
    }

    /// Request `id` finished at `at`.
    fn finished(&mut self, b: usize, id: RequestId, at: SimTime, preemptions: u32) {
        let Some(l) = self.live.remove(&id) else { return };
        let r = &mut self.records[l.rec];
        r.t_finish_engine = Some(at);
        r.t_done = Some(at);
        r.preemptions = preemptions;
        let e2e = (at - r.t_router).as_secs_f64();
        self.nodes[l.backend].outstanding -= 1;
        {
            let mut m = self.lock(b);
            m.e2e.observe(e2e);
            m.success[if l.reason == Reason::Stop { 0 } else { 1 }] += 1;
        }
        // Counted before the handler answers: a client that has its response and then
        // reads `/metrics` finds its request there.
        let _ = l.tx.send(Ev::Done { at });
    }

    /// Aborts `id` at backend `b`'s current time (its handler vanished). Counted as an
    /// abort like a client's disconnect: which of the two paths sees a vanished handler
    /// first depends on scheduling, and vLLM counts both under `finished_reason="abort"`.
    fn pending_abort(&mut self, b: usize, id: RequestId) {
        let now = self.nodes[b].engine.now();
        if let Some(l) = self.live.remove(&id) {
            self.records[l.rec].t_failed = Some(now);
            self.nodes[b].outstanding -= 1;
            self.nodes[b].engine.abort(now, id);
            self.lock(b).success[2] += 1;
        }
    }

    fn lock(&self, b: usize) -> std::sync::MutexGuard<'_, MetricsState> {
        self.shared.backends[b]
            .metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Copies backend `b`'s gauges and counters into what `/metrics` reads.
    fn publish(&mut self, b: usize) {
        let n = &self.nodes[b];
        let g = n.engine.gauges();
        let c = add(n.retired, n.engine.counters());
        let at = n.engine.now();
        let lag = self.max_lag[b];
        let mut m = self.lock(b);
        m.counters = c;
        if m.gauges != g || m.history.is_empty() {
            m.gauges = g;
            if lag.0 > 0 {
                m.history.push_back((at, g));
                while m.history.len() > 1 && m.history[1].0.0 + lag.0 < at.0 {
                    m.history.pop_front();
                }
            }
        }
    }

    fn fleet_event(&mut self, at: SimTime, e: FleetEvent) {
        let b = e.backend.index();
        match e.kind {
            FleetEventKind::Join => self.join(at, b),
            FleetEventKind::Leave => self.kill(at, b, None),
            FleetEventKind::Drain => {
                self.nodes[b].membership = Membership::Draining;
                self.tracker.set_in_service(at, e.backend, false);
                self.shared.backends[b].membership.send_replace(Membership::Draining);
                self.maybe_drained(at, b);
            }
            FleetEventKind::Restart { downtime } => self.kill(at, b, Some(at + downtime)),
        }
    }

    fn join(&mut self, at: SimTime, b: usize) {
        if self.nodes[b].membership == Membership::Absent {
            let old = std::mem::replace(
                &mut self.nodes[b].engine,
                fresh(&self.cfgs[b], &self.shared.faults, b, !self.books.is_empty()),
            );
            self.nodes[b].retired = add(self.nodes[b].retired, old.counters());
            self.nodes[b].engine.advance(at);
        }
        self.nodes[b].membership = Membership::Active;
        self.tracker.set_in_service(at, BackendId::from_index(b), true);
        self.shared.backends[b].membership.send_replace(Membership::Active);
        self.publish(b);
    }

    /// Kills backend `b`: its requests fail; back at `back` if a restart.
    fn kill(&mut self, at: SimTime, b: usize, back: Option<SimTime>) {
        let ids: Vec<RequestId> = self
            .live
            .iter()
            .filter(|(_, l)| l.backend == b)
            .map(|(&id, _)| id)
            .collect();
        let mut ids = ids;
        ids.sort();
        for id in ids {
            let l = self.live.remove(&id).expect("listed");
            self.records[l.rec].t_failed = Some(at);
            let _ = l.tx.send(Ev::Failed);
        }
        self.nodes[b].outstanding = 0;
        let old = std::mem::replace(
            &mut self.nodes[b].engine,
            fresh(&self.cfgs[b], &self.shared.faults, b, !self.books.is_empty()),
        );
        self.nodes[b].retired = add(self.nodes[b].retired, old.counters());
        self.nodes[b].engine.advance(at);
        if let Some(book) = self.books.get_mut(b) {
            book.cleared();
        }
        self.nodes[b].membership = Membership::Absent;
        self.nodes[b].restart_at = back;
        self.tracker.set(at, BackendId::from_index(b), 0, 0, 0);
        self.tracker.set_in_service(at, BackendId::from_index(b), false);
        self.shared.backends[b].membership.send_replace(Membership::Absent);
        self.publish(b);
    }

    fn maybe_drained(&mut self, at: SimTime, b: usize) {
        if self.nodes[b].membership == Membership::Draining && self.nodes[b].outstanding == 0 {
            self.nodes[b].membership = Membership::Absent;
            self.shared.backends[b].membership.send_replace(Membership::Absent);
            let _ = at;
        }
    }

    /// What was recorded, ended at the simulated time the engines reached. Requests that
    /// arrived and did not reach an engine before the stop count as in flight.
    fn finish(mut self) -> Records {
        let end = self.reached;
        self.tracker.finish(end);
        let series = self.tracker.take_series();
        let counters = self.nodes.iter().map(|n| add(n.retired, n.engine.counters())).collect();
        // Latched: first turn to a busier backend than the least loaded, every turn there.
        let mut stayed = vec![true; self.session_keys.len()];
        let mut first = vec![None; self.session_keys.len()];
        for r in &self.records {
            let s = r.session.index();
            match first[s] {
                None => first[s] = Some(r.backend),
                Some(b) if b != r.backend => stayed[s] = false,
                _ => {}
            }
        }
        let latched = (0..stayed.len())
            .filter(|&s| stayed[s] && self.first_suboptimal[s] && first[s].is_some())
            .count() as u64;
        Records {
            in_flight: (self.live.len() + self.pending.iter().filter(|p| matches!(p.1, Cmd::Submit(_))).count()) as u64,
            requests: self.records,
            session_keys: self.session_keys,
            series,
            tracker: self.tracker,
            counters,
            itl_ns: self.itl_ns,
            end,
            latched_sessions: latched,
        }
    }
}

/// A fresh engine for backend `i`, with its slowdown windows.
fn fresh(cfg: &VllmConfig, faults: &[Fault], i: usize, kv_events: bool) -> LiveEngine {
    let mut e = LiveEngine::new(cfg.clone());
    if kv_events {
        e.enable_kv_events();
    }
    e.set_slowdowns(
        faults
            .iter()
            .filter(|f| f.backend.index() == i)
            .filter_map(|f| match f.kind {
                FaultKind::Slowdown(x) => Some(Slowdown {
                    from: f.from,
                    until: f.until,
                    factor: x,
                }),
                _ => None,
            })
            .collect(),
    );
    e
}
