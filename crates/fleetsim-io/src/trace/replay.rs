//! Turns a parsed trace into simulator sessions ([`fleetsim_core::workload::SessionPlan`]s).
//!
//! Pipeline per `[[workload.traces]]` group: read the file; order rows by arrival (ties by
//! file order); keep the window `start_s .. start_s + duration_s` of trace time (relative to
//! the first row); group rows into sessions (see [`super::sessions`]); map trace time to
//! simulated time (`at_s + (t - start_s) * time_scale`, plus an optional seeded jitter);
//! replay the window `repeat` times back to back (each replay with its own content salt and
//! session keys, so replays do not hit each other's caches); stop after `max_requests`
//! requests (the earliest ones).
//!
//! Open loop: every turn is sent at its own trace time. Closed loop: when the trace records
//! call ends or think times (`dynamo`, `otel`, `sessions`), calls are paced by
//! happens-before (see [`super::pacing`]); otherwise a session's first turn is sent at its
//! trace time and turn `k + 1` the recorded gap between the two arrivals after turn `k`
//! *completes* (counted as `arrival_gap_fallback`, with a warning).

use std::path::PathBuf;

use super::agent_cfg::{AgentConfig, Context};
use super::model::{Format, NONE, Trace};
use super::pacing::{PacingCounts, ROOT, ReplayPlan, pace};
use super::reader::ReadOptions;
use super::sessions::{self, InferConfig, InferStats, Sessions, SynthConfig};
use fleetsim_core::content::source_id;
use fleetsim_core::dist::Dist;
use fleetsim_core::rng::stream;
use fleetsim_core::time::{HORIZON, SimDuration, SimTime};
use fleetsim_core::workload::{NO_TRACE, SessionPlan, TraceSalt, TraceTurn, TurnPlan, Workload};

/// Replay mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Arrivals at trace times.
    Open,
    /// A turn waits for its predecessor's completion, plus the recorded gap.
    Closed,
}

/// How rows are grouped into sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionMode {
    /// The trace's session ids if it has them, else inference if it has prefix blocks,
    /// else none.
    Auto,
    /// Infer from block-list extension.
    Infer,
    /// One request per session.
    None,
    /// Synthesise (for traces without prefix data).
    Synthesize,
}

impl SessionMode {
    /// Parses a name.
    pub fn parse(s: &str) -> Result<SessionMode, String> {
        match s {
            "auto" => Ok(SessionMode::Auto),
            "infer" => Ok(SessionMode::Infer),
            "none" => Ok(SessionMode::None),
            "synthesize" => Ok(SessionMode::Synthesize),
            o => Err(format!(
                "unknown session mode `{o}`; expected `auto`, `infer`, `none` or `synthesize`"
            )),
        }
    }
}

/// How trace time maps to simulated time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// Multiply trace time by this factor (0.5: twice as fast).
    Factor(f64),
    /// Choose the factor so the replay averages this many requests per second.
    TargetRate(f64),
}

/// A validated `[[workload.traces]]` table.
#[derive(Clone, Debug)]
pub struct TraceGroupConfig {
    /// Group name (session keys are `{name}-{index}`).
    pub name: String,
    /// The trace file (resolved).
    pub file: PathBuf,
    /// Format (`None`: detect).
    pub format: Option<Format>,
    /// Open or closed loop.
    pub mode: Mode,
    /// Time scale.
    pub scale: Scale,
    /// Start of the window in trace seconds (from the first row).
    pub start_s: f64,
    /// Length of the window in trace seconds (`None`: to the end).
    pub duration_s: Option<f64>,
    /// When trace time `start_s` happens in simulated time.
    pub at: SimTime,
    /// Most requests replayed (all replays together).
    pub max_requests: Option<u64>,
    /// Replays of the window, back to back.
    pub repeat: u32,
    /// Each arrival is delayed by U(0, jitter) seconds (seeded; spreads batched timestamps).
    pub arrival_jitter_s: f64,
    /// Session grouping.
    pub sessions: SessionMode,
    /// Inference settings.
    pub infer: InferConfig,
    /// Synthesis settings.
    pub synthesize: SynthConfig,
    /// Whether requests carry the session-key header.
    pub sends_session_key: bool,
    /// Count malformed rows instead of failing (also calls too large for the KV cache).
    pub skip_bad_rows: bool,
    /// A harness's context truncation: a call's prompt is cut so that prompt + output
    /// holds at most this many tokens (the oldest context dropped, as agent harnesses do).
    pub max_context_tokens: Option<u32>,
    /// Idle gaps (no call of the trace in flight) longer than this are cut to it, ns
    /// ([`super::idle`]).
    pub max_idle_gap_ns: Option<u64>,
    /// Tokens per trace block (default: the format's, 512).
    pub block_tokens: Option<u32>,
    /// Service time per request (queueing backends).
    pub service_time_s: Option<Dist>,
    /// Memory budget of the run in bytes (`limits.max_memory_gib`); the replay is refused
    /// before allocating beyond it.
    pub max_memory_bytes: u64,
    /// Session-shaped traces: column mapping, session placement, content.
    pub agent: AgentConfig,
}

impl TraceGroupConfig {
    /// Defaults for `file` (open loop, scale 1, whole trace, automatic sessions).
    pub fn new(name: &str, file: impl Into<PathBuf>) -> Self {
        TraceGroupConfig {
            name: name.to_string(),
            file: file.into(),
            format: None,
            mode: Mode::Open,
            scale: Scale::Factor(1.0),
            start_s: 0.0,
            duration_s: None,
            at: SimTime::ZERO,
            max_requests: None,
            repeat: 1,
            arrival_jitter_s: 0.0,
            sessions: SessionMode::Auto,
            infer: InferConfig::default(),
            synthesize: SynthConfig::default(),
            sends_session_key: true,
            skip_bad_rows: false,
            max_context_tokens: None,
            max_idle_gap_ns: None,
            block_tokens: None,
            service_time_s: None,
            max_memory_bytes: u64::MAX,
            agent: AgentConfig::default(),
        }
    }
}

pub use super::model::arrival_order;

/// Groups `rows` (in arrival order) into sessions per `mode`; returns the grouping, the
/// mode used and its statistics.
pub fn group_sessions(
    trace: &Trace,
    rows: &[u32],
    mode: SessionMode,
    infer: &InferConfig,
    synth: &SynthConfig,
    block_tokens: u32,
    rng: &mut fleetsim_core::rng::SimRng,
) -> (Sessions, &'static str, InferStats) {
    let mode = match mode {
        SessionMode::Auto if trace.has_sessions() => None,
        SessionMode::Auto if trace.has_blocks() => Some(SessionMode::Infer),
        SessionMode::Auto => Some(SessionMode::None),
        m => Some(m),
    };
    match mode {
        None => {
            let s = sessions::from_ids(trace, rows);
            let st = InferStats::of(&s);
            (s, "trace", st)
        }
        Some(SessionMode::Infer) => {
            let (s, st) = sessions::infer(trace, rows, block_tokens, infer);
            (s, "infer", st)
        }
        Some(SessionMode::Synthesize) => {
            let s = sessions::synthesize(trace, rows, synth, rng);
            let st = InferStats::of(&s);
            (s, "synthesize", st)
        }
        _ => {
            let s = sessions::none(rows);
            let st = InferStats::of(&s);
            (s, "none", st)
        }
    }
}

/// A replayed session's key: the trace's own session id when it has one (so requests.csv,
/// decisions, `sim explain` and the timeline join back to the source), else
/// `{group}-{index}`; a repeat adds `~r{N}`, and a key already taken adds `~{N}`.
fn session_key(
    trace: &Trace,
    first: u32,
    group: &str,
    index: u64,
    rep: u64,
    used: &mut rustc_hash::FxHashSet<String>,
) -> String {
    let own = trace.session_names.get(trace.rows[first as usize].session as usize);
    let mut key = match own {
        Some(n) if !n.is_empty() => n.clone(),
        _ => return format!("{group}-{index}"),
    };
    if rep > 0 {
        key = format!("{key}~r{rep}");
    }
    let mut k = key.clone();
    let mut n = 1;
    while used.contains(&k) {
        k = format!("{key}~{n}");
        n += 1;
    }
    used.insert(k.clone());
    k
}

fn ns(s: f64) -> u64 {
    fleetsim_core::time::secs_to_ns(s)
}

/// Parses `g.file` (or takes it from `traces`, which read it before) and appends its
/// sessions to `w` (`group` is the index recorded in each [`SessionPlan`]). Errors are
/// messages for the key `workload.traces[i]`.
pub fn append(
    w: &mut Workload,
    g: &TraceGroupConfig,
    group: u32,
    seed: u64,
    context_limit_tokens: Option<u32>,
    traces: &super::cache::TraceCache,
) -> Result<(), String> {
    let shared = traces
        .read(
            &g.file,
            ReadOptions {
                format: g.format,
                skip_bad_rows: g.skip_bad_rows,
            },
            &g.agent.read,
        )
        .map_err(|e| e.to_string())?;
    // Placing sessions and cutting idle gaps move rows: on this run's own copy.
    let place = super::agent_cfg::needs_placing(&shared, &g.agent)?;
    if place || g.max_idle_gap_ns.is_some() {
        let mut trace = Trace::clone(&shared);
        if place {
            super::agent_cfg::place_sessions(&mut trace, &g.agent, &g.name, seed)?;
        }
        if let Some(gap) = g.max_idle_gap_ns {
            let c = super::idle::compress(&mut trace, gap);
            w.notes.push(format!(
                "trace {}: {}: max_idle_gap_s = {}: {} idle gaps cut, {:.1} s removed; the trace spans {:.1} s instead of {:.1} s",
                g.name,
                trace.file,
                gap as f64 / 1e9,
                c.gaps,
                c.cut_ns as f64 / 1e9,
                c.span_after_ns as f64 / 1e9,
                c.span_before_ns as f64 / 1e9
            ));
        }
        append_trace(w, g, &trace, group, seed, context_limit_tokens)?;
    } else {
        append_trace(w, g, &shared, group, seed, context_limit_tokens)?;
    }
    // Idle spans as recorded, before any compression.
    if let Some(f) = w.traces.last_mut() {
        f.idle = super::idle::spans(&shared, super::idle::REPORT_GAP_NS);
        f.idle_compressed = g.max_idle_gap_ns.is_some();
    }
    Ok(())
}

/// [`append`] on an already parsed trace, in stages: select the window's rows, group them
/// into sessions, map trace time to simulated time, check the budget and the calls' sizes,
/// then replay the window `repeat` times (pacing, content, the session plans) and say in
/// the workload's notes what the replay did.
pub fn append_trace(
    w: &mut Workload,
    g: &TraceGroupConfig,
    trace: &Trace,
    group: u32,
    seed: u64,
    context_limit_tokens: Option<u32>,
) -> Result<(), String> {
    let window = select_rows(trace, g)?;
    let m = window.rows.len() as u64;
    let factor = match g.scale {
        Scale::Factor(f) => f,
        Scale::TargetRate(r) => (m as f64 / (window.span as f64 / 1e9)) / r,
    };
    let block_tokens = g.block_tokens.unwrap_or_else(|| super::model::block_tokens(trace));
    let calls = trace.calls.as_deref();
    let mut srng = stream(seed, &format!("trace/{}/synthesize", g.name), 0);
    let (sessions, used, st) = group_sessions(
        trace,
        &window.rows,
        g.sessions,
        &g.infer,
        &g.synthesize,
        block_tokens,
        &mut srng,
    );
    let blocks = used != "synthesize" && trace.has_blocks();
    let repeat = g.repeat.max(1) as u64;
    let total = m.saturating_mul(repeat).min(g.max_requests.unwrap_or(u64::MAX));
    check_budget(g, &trace.file, m, repeat, total)?;
    let blocks_base = w.trace_blocks.len();
    if blocks {
        take_blocks(w, trace)?;
    }
    // Reserve exactly: no doubling of the largest vectors on million-request replays.
    w.sessions.reserve(sessions.len() * total.div_ceil(m) as usize);
    if blocks {
        w.trace_turns.reserve(total as usize);
    }
    let r = Replay {
        g,
        trace,
        file: trace.file.as_str(),
        window,
        factor,
        block_tokens,
        calls,
        // Closed loop by happens-before when the trace records ends or think times.
        paced: g.mode == Mode::Closed && calls.is_some_and(|c| c.has_ends() || c.has_think()),
        blocks,
        blocks_base,
        context_limit_tokens,
        group,
        seed,
    };
    let sizes = r.sizes()?;
    let done = r.replay_all(w, &sessions, repeat, total)?;
    r.notes(w, &done, &sizes, &st, used, repeat.min(total.div_ceil(m)));
    w.traces.push(fleetsim_core::workload::TraceFacts {
        group: g.name.clone(),
        file: trace.file.clone(),
        calls: done.requests,
        sharing: sharing(trace, g, blocks),
        ..Default::default()
    });
    Ok(())
}

/// What a replayed trace records of the prompts its calls share: block hashes, the length
/// of a part every call repeats, a `shared_prefix_tokens` key on its table, or nothing.
fn sharing(trace: &Trace, g: &TraceGroupConfig, blocks: bool) -> fleetsim_core::workload::Sharing {
    use fleetsim_core::workload::Sharing;
    let sp = &g.agent.shared_prefix;
    if blocks {
        Sharing::Blocks
    } else if trace.calls.as_deref().is_some_and(super::model::Calls::records_shared) {
        Sharing::RecordedPart
    } else if sp.all.is_some_and(|n| n > 0) || sp.by_model.iter().any(|(_, n)| *n > 0) {
        Sharing::Configured
    } else {
        Sharing::LengthsOnly
    }
}

/// The rows of a trace in the replayed window.
struct Window {
    /// The rows in the window, in arrival order (ties by file order).
    rows: Vec<u32>,
    /// The first row's arrival, ns: the window is relative to it, as `start_s` says.
    t0: u64,
    /// The window's start, ns after `t0`.
    start: u64,
    /// One replay's length in trace time, ns: the window, or the rows' span plus one mean
    /// gap, so that back-to-back replays keep the trace's rate.
    span: u64,
}

/// Selects the rows of the window `start_s .. start_s + duration_s` (trace time from the
/// first row), in arrival order: the window is what every replay repeats, and a window
/// without rows is refused naming the trace's span, so the user can fix `start_s`.
fn select_rows(trace: &Trace, g: &TraceGroupConfig) -> Result<Window, String> {
    let file = trace.file.as_str();
    if trace.rows.is_empty() {
        return Err(format!("{file}: the trace has no requests"));
    }
    let order = arrival_order(trace);
    let t0 = trace.rows[order[0] as usize].t_ns;
    let start = ns(g.start_s);
    let end = g.duration_s.map(|d| start.saturating_add(ns(d)));
    let rel = |r: u32| trace.rows[r as usize].t_ns - t0;
    let rows: Vec<u32> = order
        .iter()
        .copied()
        .filter(|&r| rel(r) >= start && end.is_none_or(|e| rel(r) < e))
        .collect();
    let m = rows.len();
    if m == 0 {
        return Err(format!(
            "{file}: no request in the window start_s = {} .. {} (the trace spans {:.3} s)",
            g.start_s,
            g.duration_s.map_or("end".to_string(), |d| format!("{}", g.start_s + d)),
            (trace.rows[*order.last().expect("non-empty") as usize].t_ns - t0) as f64 / 1e9
        ));
    }
    let last_rel = rel(rows[m - 1]) - start;
    let span = match g.duration_s {
        Some(d) => ns(d),
        None if m > 1 => last_rel + last_rel / (m as u64 - 1),
        None => 1_000_000_000,
    }
    .max(1);
    Ok(Window { rows, t0, start, span })
}

/// Refuses a replay of `total` requests (`m` in the window, `repeat` times) that would not
/// fit the memory budget, before allocating them.
fn check_budget(g: &TraceGroupConfig, file: &str, m: u64, repeat: u64, total: u64) -> Result<(), String> {
    let budget = crate::preflight::Budget {
        bytes: g.max_memory_bytes,
        gib: g.max_memory_bytes as f64 / (1u64 << 30) as f64,
        explicit: true,
    };
    budget.check(
        crate::preflight::requests_bytes(total),
        &format!("{file}: {m} requests x repeat {repeat} = {total} requests"),
    )
}

/// Appends the trace's block ids to the workload's (the turns refer to them by offset from
/// where they start); the ids of all traces must fit 32-bit offsets.
fn take_blocks(w: &mut Workload, trace: &Trace) -> Result<(), String> {
    if w.trace_blocks.len() + trace.blocks.len() > u32::MAX as usize {
        return Err("the traces hold more than 2^32 block ids together".into());
    }
    w.trace_blocks.extend_from_slice(&trace.blocks);
    Ok(())
}

/// One trace group's replay: what its stages read.
struct Replay<'a> {
    g: &'a TraceGroupConfig,
    trace: &'a Trace,
    file: &'a str,
    window: Window,
    /// Simulated ns per trace ns.
    factor: f64,
    block_tokens: u32,
    calls: Option<&'a super::model::Calls>,
    /// Closed loop paced by happens-before (the trace records ends or think times).
    paced: bool,
    /// The content comes from the trace's block hashes.
    blocks: bool,
    /// Where the trace's block ids start in the workload's.
    blocks_base: usize,
    /// The most tokens one request may hold on every backend.
    context_limit_tokens: Option<u32>,
    /// The workload group its sessions belong to.
    group: u32,
    seed: u64,
}

/// The calls' sizes after the harness's truncation and the KV limit.
struct Sizes {
    /// Calls whose prompt `max_context_tokens` truncated.
    truncated: u64,
    /// Calls larger than one backend's KV cache (skipped).
    over_kv: u64,
}

/// The replays so far.
struct Progress {
    /// Requests replayed.
    requests: u64,
    /// The first replay's pacing.
    counts: PacingCounts,
    /// Sessions whose shared prefix was cut to their shortest call.
    prefix_cut: u64,
    /// Sessions replayed (numbers the keys of sessions without an id).
    sessions: u64,
    /// Session keys taken.
    keys: rustc_hash::FxHashSet<String>,
    /// Draws the service times, one stream across replays.
    service_rng: fleetsim_core::rng::SimRng,
}

/// One replay of the window.
struct Pass<'t> {
    rep: u64,
    /// The replay's content salt, an index in the workload's.
    salt: u32,
    /// Each row's arrival in simulated time, ns (by row).
    times: &'t [u64],
}

impl Replay<'_> {
    /// A row's arrival in the window, trace ns from the window's start.
    fn offset(&self, r: u32) -> u64 {
        self.trace.rows[r as usize].t_ns - self.window.t0 - self.window.start
    }

    /// A call's prompt tokens after the harness's truncation (`max_context_tokens`): the
    /// oldest context is dropped so that prompt + output fit, keeping at least one token.
    fn input_of(&self, row: &super::model::TraceRow) -> u32 {
        match self.g.max_context_tokens {
            Some(c) if u64::from(row.input) + u64::from(row.output) > u64::from(c) => {
                row.input.min(c.saturating_sub(row.output).max(1))
            }
            _ => row.input,
        }
    }

    /// Whether a call cannot fit one backend's KV cache, after truncation.
    fn too_large(&self, row: &super::model::TraceRow) -> bool {
        self.context_limit_tokens
            .is_some_and(|lim| u64::from(self.input_of(row)) + u64::from(row.output) > u64::from(lim))
    }

    /// Counts the calls truncated and those too large for the KV cache; the latter are an
    /// error naming the first one's line unless `skip_bad_rows` (a call no backend can hold
    /// would never finish).
    fn sizes(&self) -> Result<Sizes, String> {
        let rows = || self.window.rows.iter().map(|&r| &self.trace.rows[r as usize]);
        let truncated = rows().filter(|row| self.input_of(row) < row.input).count() as u64;
        let over_kv = rows().filter(|row| self.too_large(row)).count() as u64;
        if over_kv > 0 && !self.g.skip_bad_rows {
            let row = rows().find(|row| self.too_large(row)).expect("counted");
            let need = u64::from(self.input_of(row)) + u64::from(row.output);
            return Err(format!(
                "{}:{}: the request needs {need} tokens (input + output) but one request may hold at most {} (backends.kv_blocks x backends.block_size_tokens); raise kv_blocks, truncate prompts as the agent harness does with max_context_tokens, or set skip_bad_rows = true to count and skip the {over_kv} such calls",
                self.file,
                row.line,
                self.context_limit_tokens.unwrap_or(0)
            ));
        }
        Ok(Sizes { truncated, over_kv })
    }

    /// The error of a replay that would pass the simulator's horizon.
    fn beyond(&self) -> String {
        format!(
            "{}: the replay would reach beyond the simulator's horizon (about 31.7 years); lower time_scale, repeat or max_requests",
            self.file
        )
    }

    /// Replays the window `repeat` times back to back until `total` requests: each replay
    /// with its own arrival times, content salt and session keys (replays do not hit each
    /// other's caches); the last one keeps the earliest rows that fit.
    fn replay_all(&self, w: &mut Workload, sessions: &Sessions, repeat: u64, total: u64) -> Result<Progress, String> {
        let g = self.g;
        // Rank of each window row in arrival order (for the request limit of the last replay).
        let mut rank = vec![u32::MAX; self.trace.rows.len()];
        for (i, &r) in self.window.rows.iter().enumerate() {
            rank[r as usize] = i as u32;
        }
        let mut times = vec![0u64; self.trace.rows.len()];
        let mut done = Progress {
            requests: 0,
            counts: PacingCounts::default(),
            prefix_cut: 0,
            sessions: 0,
            keys: Default::default(),
            service_rng: stream(self.seed, &format!("trace/{}/service", g.name), 0),
        };
        for rep in 0..repeat {
            let left = total - done.requests;
            if left == 0 {
                break;
            }
            let take = left.min(self.window.rows.len() as u64) as u32;
            self.arrival_times(rep, &mut times)?;
            let pass = Pass {
                rep,
                salt: w.trace_salts.len() as u32,
                times: &times,
            };
            w.trace_salts.push(TraceSalt {
                salt: source_id("trace", &g.name, rep),
                block_tokens: self.block_tokens,
            });
            for si in 0..sessions.len() {
                let rows: Vec<u32> = sessions
                    .session(si)
                    .iter()
                    .copied()
                    .filter(|&r| rank[r as usize] < take && !self.too_large(&self.trace.rows[r as usize]))
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let plan = self.session(w, &rows, si, &pass, &mut done)?;
                done.requests += plan.turns.len() as u64;
                w.sessions.push(plan);
            }
        }
        Ok(done)
    }

    /// Maps replay `rep`'s rows to simulated time (ns, in `times` by row): `at_s` plus the
    /// row's offset in the window and `rep` spans, times the time factor, plus the seeded
    /// jitter (which spreads rows a trace logged in batches).
    fn arrival_times(&self, rep: u64, times: &mut [u64]) -> Result<(), String> {
        let g = self.g;
        let mut jrng = stream(self.seed, &format!("trace/{}/jitter", g.name), rep);
        for &r in &self.window.rows {
            let x = self.offset(r) as f64 + rep as f64 * self.window.span as f64;
            let mut t = g.at.0 as f64 + x * self.factor;
            if g.arrival_jitter_s > 0.0 {
                let u: f64 = rand::RngExt::random(&mut jrng);
                t += u * g.arrival_jitter_s * 1e9;
            }
            if t.is_nan() || t >= HORIZON.0 as f64 {
                return Err(self.beyond());
            }
            times[r as usize] = t.round() as u64;
        }
        Ok(())
    }

    /// Session `si` of the grouping in one replay, from its `rows` (in order, non-empty):
    /// its pacing, shared prefix, turns and replay plan.
    fn session(
        &self,
        w: &mut Workload,
        rows: &[u32],
        si: usize,
        pass: &Pass<'_>,
        done: &mut Progress,
    ) -> Result<SessionPlan, String> {
        let g = self.g;
        let first = rows[0];
        let trace_first = if self.blocks {
            w.trace_turns.len() as u32
        } else {
            NO_TRACE
        };
        let pacing = self.pacing(rows, pass.rep, &mut done.counts);
        let (shared, cut) = self.shared_prefix(rows, first);
        done.prefix_cut += u64::from(cut);
        let shared_len = shared.map_or(0, |(_, l)| l);
        let turns = self.turns(w, rows, &pacing, shared_len, pass, &mut done.service_rng)?;
        let open_at = SimTime(pass.times[first as usize]);
        let think_total: u64 = turns.iter().map(|t| t.think_before.0).sum();
        if open_at.0.saturating_add(think_total) >= HORIZON.0 {
            return Err(self.beyond());
        }
        let key = session_key(self.trace, first, &g.name, done.sessions, pass.rep, &mut done.keys);
        done.sessions += 1;
        debug_assert!(w.sessions.len() < u32::MAX as usize);
        Ok(SessionPlan {
            group: self.group,
            key,
            open_at,
            sends_key: g.sends_session_key,
            shared,
            source: source_id("trace-session", &g.name, (pass.rep << 32) | si as u64),
            turns,
            hit_context_limit: false,
            // Paced sessions keep several calls in flight, as open-loop ones do.
            open_loop: g.mode == Mode::Open || self.paced,
            trace_first,
            replay: self.replay_plan(rows, &pacing),
            api: fleetsim_core::workload::RequestApi::Completions,
            model: self
                .calls
                .and_then(|c| c.model_of(first as usize))
                .map_or(fleetsim_core::workload::NO_MODEL, |m| w.model_index(m)),
        })
    }

    /// A session's happens-before pacing (per call: the call it waits for and the recorded
    /// gap), empty when not paced; the first replay's counts go to `counts` (each replay
    /// paces alike). A closed loop without recorded ends sends each call the arrival gap
    /// after the previous one completes, and counts it.
    fn pacing(&self, rows: &[u32], rep: u64, counts: &mut PacingCounts) -> Vec<(u32, u64)> {
        let mut sc = PacingCounts::default();
        let pacing = if self.paced {
            let starts: Vec<u64> = rows.iter().map(|&r| self.trace.rows[r as usize].t_ns).collect();
            pace(rows, &starts, self.calls, &mut sc)
        } else {
            if self.g.mode == Mode::Closed {
                sc.at_session_offset = 1;
                sc.arrival_gap_fallback = rows.len() as u64 - 1;
            }
            Vec::new()
        };
        if rep == 0 {
            counts.add(&sc);
        }
        pacing
    }

    /// The prefix shared across sessions (system prompt, tool definitions) when the trace
    /// has no hashes: its content id and length, at most every call's prompt less one token
    /// (so each call keeps a token of its own); and whether it was cut to that.
    fn shared_prefix(&self, rows: &[u32], first: u32) -> (Option<(u64, u32)>, bool) {
        let g = self.g;
        let model = self.calls.and_then(|c| c.model_of(first as usize));
        let (tokens, key) = match self.recorded_shared(first) {
            Some((n, key)) => (Some(n), key),
            None => (
                g.agent.shared_prefix.tokens_for(model),
                g.agent.shared_prefix.key(&g.name, model),
            ),
        };
        match tokens {
            Some(n) if !self.blocks && n > 0 => {
                let shortest = rows
                    .iter()
                    .map(|&r| self.input_of(&self.trace.rows[r as usize]))
                    .min()
                    .unwrap_or(1);
                let len = n.min(shortest - 1);
                let shared = (len > 0).then(|| (source_id("shared_prefix", &key, 0), len));
                (shared, len < n)
            }
            _ => (None, false),
        }
    }

    /// The shared part a session's first call records (`columns.shared_prefix_tokens` or
    /// `shared_prefix_chars`), in tokens, with its content name: calls of any trace naming
    /// the same model and recording the same length share it (one harness's tool
    /// definitions); `None` when the call records none.
    fn recorded_shared(&self, first: u32) -> Option<(u32, String)> {
        let c = self.calls?;
        let len = c.shared_of(first as usize);
        if len == super::model::NO_SHARED || len == 0 {
            return None;
        }
        let unit = if c.shared_in_chars { "chars" } else { "tokens" };
        let model = c.model_of(first as usize).unwrap_or("");
        Some((
            self.g.agent.shared_tokens(len, c.shared_in_chars),
            format!("recorded:{model}:{len} {unit}"),
        ))
    }

    /// A session's turns: each call's think time before it (the paced gap scaled, or the
    /// gap between arrivals), its own prompt tokens (less the shared prefix), its output and
    /// its service time; with block content, each turn's whole blocks go to the workload.
    fn turns(
        &self,
        w: &mut Workload,
        rows: &[u32],
        pacing: &[(u32, u64)],
        shared_len: u32,
        pass: &Pass<'_>,
        service_rng: &mut fleetsim_core::rng::SimRng,
    ) -> Result<Vec<TurnPlan>, String> {
        let times = pass.times;
        let first = rows[0];
        let mut turns = Vec::with_capacity(rows.len());
        let mut prev: Option<u64> = None;
        for (k, &r) in rows.iter().enumerate() {
            let row = &self.trace.rows[r as usize];
            let input = self.input_of(row);
            let t = times[r as usize];
            let think = if self.paced {
                match pacing[k] {
                    (ROOT, _) => t.saturating_sub(times[first as usize]),
                    (_, gap) => (gap as f64 * self.factor).round() as u64,
                }
            } else {
                prev.map_or(0, |p| t.saturating_sub(p))
            };
            prev = Some(t.max(prev.unwrap_or(0)));
            let service = self.service(service_rng)?;
            turns.push(TurnPlan {
                think_before: SimDuration(think),
                session_prompt_tokens: input - shared_len,
                output_tokens: row.output,
                service,
            });
            if self.blocks {
                let whole = row.blocks_len.min(input / self.block_tokens.max(1));
                w.trace_turns.push(TraceTurn {
                    blocks_off: (self.blocks_base + row.blocks_off as usize) as u32,
                    n_blocks: whole,
                    salt: pass.salt,
                    row: r,
                });
            }
        }
        Ok(turns)
    }

    /// A call's service time (queueing backends): drawn from `service_time_s`, which must
    /// give a finite duration of at most 1e9 s.
    fn service(&self, rng: &mut fleetsim_core::rng::SimRng) -> Result<SimDuration, String> {
        let Some(d) = &self.g.service_time_s else {
            return Ok(SimDuration::ZERO);
        };
        let v = d.sample(rng);
        if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
            return Err(format!(
                "service_time_s drew {v}; durations must be finite, >= 0 and at most 1e9 s"
            ));
        }
        Ok(SimDuration(ns(v)))
    }

    /// What the replay of a session needs beyond its turns: its pacing, whether its prompts
    /// are independent, and the recorded latencies it is compared against; none when it
    /// needs nothing (the plain chat replay).
    fn replay_plan(&self, rows: &[u32], pacing: &[(u32, u64)]) -> Option<Box<ReplayPlan>> {
        let independent = self.g.agent.context == Context::Independent && !self.blocks;
        let latency = self.calls.is_some_and(|c| c.has_latency());
        (self.paced || independent || latency).then(|| {
            let mut p = ReplayPlan::default();
            p.independent = independent;
            if let Some(c) = self.calls.filter(|_| latency) {
                p.recorded_ttft_ns = rows.iter().map(|&r| c.ttft_ns[r as usize]).collect();
                p.recorded_e2e_ns = rows
                    .iter()
                    .map(|&r| match c.end_ns[r as usize] {
                        NONE => NONE,
                        e => e - self.trace.rows[r as usize].t_ns,
                    })
                    .collect();
            }
            if self.paced {
                p = p.with_after(pacing.iter().map(|&(a, _)| a).collect());
            }
            Box::new(p)
        })
    }

    /// What the replay took from a recorded shared part: the calls recording one, the
    /// most common length and its tokens.
    fn recorded_note(&self) -> Option<String> {
        let c = self.calls.filter(|c| c.records_shared() && !self.blocks)?;
        let mut counts: std::collections::BTreeMap<u32, u64> = Default::default();
        for &r in &self.window.rows {
            let n = c.shared_of(r as usize);
            if n != super::model::NO_SHARED && n > 0 {
                *counts.entry(n).or_default() += 1;
            }
        }
        let (&len, &calls) = counts.iter().max_by_key(|(l, n)| (**n, std::cmp::Reverse(**l)))?;
        let (col, unit) = if c.shared_in_chars {
            ("shared_prefix_chars", "characters")
        } else {
            ("shared_prefix_tokens", "tokens")
        };
        Some(format!(
            "trace {}: {}: columns.{col}: {} of {} calls record a part every call repeats ({} distinct lengths; the most common, {len} {unit} on {calls} calls, is {} tokens), replayed as a prefix shared by the sessions that record it",
            self.g.name,
            self.file,
            counts.values().sum::<u64>(),
            self.window.rows.len(),
            counts.len(),
            self.g.agent.shared_tokens(len, c.shared_in_chars),
        ))
    }

    /// Says in the workload's notes how the replay went: pacing, cut prefixes, truncated and
    /// skipped calls, and the window, sessions and time scale.
    fn notes(&self, w: &mut Workload, done: &Progress, sizes: &Sizes, st: &InferStats, used: &str, replays: u64) {
        let (g, file, m, counts) = (self.g, self.file, self.window.rows.len(), &done.counts);
        w.pacing.add(counts);
        if counts.arrival_gap_fallback > 0 {
            w.notes.push(format!(
                "warning: trace {}: {file}: {} of {} calls have no recorded end or think time before them; closed loop sends them the recorded arrival gap after the previous call completes (recorded service time is counted twice)",
                g.name,
                counts.arrival_gap_fallback,
                m
            ));
        }
        if self.paced {
            w.notes.push(format!(
                "trace {}: {file}: happens-before pacing: {} calls after a recorded end, {} after a think time, {} at a session offset ({} overlapped an earlier call of their session in the recording; the run summary says how many did in the replay)",
                g.name, counts.after_recorded_end, counts.after_think_time, counts.at_session_offset, counts.overlapping
            ));
        }
        if let Some(n) = self.recorded_note() {
            w.notes.push(n);
        }
        if done.prefix_cut > 0 {
            w.notes.push(format!(
                "trace {}: {file}: {} sessions have a call shorter than shared_prefix_tokens; their shared prefix is cut to that call's prompt less one token",
                g.name, done.prefix_cut
            ));
        }
        w.notes.extend(self.trace.notes());
        if sizes.truncated > 0 {
            w.notes.push(format!(
                "trace {}: {file}: {} calls' prompts truncated to max_context_tokens = {} (prompt + output)",
                g.name,
                sizes.truncated,
                g.max_context_tokens.unwrap_or(0)
            ));
        }
        if sizes.over_kv > 0 {
            w.notes.push(format!(
                "trace {}: {file}: skipped {} calls larger than one backend's KV cache ({} tokens; skip_bad_rows)",
                g.name,
                sizes.over_kv,
                self.context_limit_tokens.unwrap_or(0)
            ));
        }
        w.notes.push(format!(
            "trace {}: {file}: {} rows, {m} in the window, {} requests replayed ({} loop, x{:.4} time, {replays} replay{}); sessions ({used}): {} per replay, {} chains of 2+ turns, {} linked turns, {} branches, {} fanout-limited, {} rejected for not growing, longest {}, mean {:.2} turns",
            g.name,
            self.trace.rows.len(),
            done.requests,
            if g.mode == Mode::Open { "open" } else { "closed" },
            self.factor,
            if replays == 1 { "" } else { "s" },
            st.sessions,
            st.chains,
            st.linked,
            st.branches,
            st.fanout_limited,
            st.rejected_no_growth,
            st.longest_chain,
            st.mean_turns,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::reader::read_from;

    fn empty() -> Workload {
        fleetsim_core::workload::generate(&[], 1, None).unwrap()
    }

    fn native(text: &str) -> Trace {
        read_from(
            format!("arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n{text}").as_bytes(),
            "n.csv",
            Format::Native,
            false,
        )
        .unwrap()
    }

    #[test]
    fn open_and_closed_loop_plans() {
        let t = native("10,a,0,1024,4,1 2\n12,b,0,600,4,7 8\n13.5,a,1,1600,4,1 2 3 4\n");
        let mut g = TraceGroupConfig::new("x", "n.csv");
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        assert_eq!(w.sessions.len(), 2);
        let a = &w.sessions[0];
        assert_eq!(a.key, "a", "the trace's own session id");
        assert_eq!(a.open_at, SimTime::ZERO);
        assert!(a.open_loop);
        assert_eq!(a.turns[1].think_before, SimDuration(3_500_000_000));
        assert_eq!(w.sessions[1].open_at, SimTime(2_000_000_000));
        // Block content: turn 1 of `a` has 3 whole blocks (1600 / 512).
        assert_eq!(w.trace_turns[a.trace_first as usize + 1].n_blocks, 3);
        let c0 = w.content(fleetsim_core::ids::SessionId(0), 0);
        let c1 = w.content(fleetsim_core::ids::SessionId(0), 1);
        assert_eq!(c0.segments[..2], c1.segments[..2]);
        g.mode = Mode::Closed;
        g.scale = Scale::Factor(2.0);
        g.at = SimTime(5);
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        assert!(!w.sessions[0].open_loop);
        assert_eq!(w.sessions[0].turns[1].think_before, SimDuration(7_000_000_000));
        assert_eq!(w.sessions[1].open_at, SimTime(4_000_000_005));
    }

    #[test]
    fn window_limits_repeat_and_rate() {
        let rows: String = (0..10).map(|i| format!("{i},,,100,5,\n")).collect();
        let t = native(&rows);
        let mut g = TraceGroupConfig::new("w", "n.csv");
        g.start_s = 2.0;
        g.duration_s = Some(5.0);
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        // Rows at 2, 3, 4, 5, 6 s; replayed from 0.
        let opens: Vec<u64> = w.sessions.iter().map(|s| s.open_at.0 / 1_000_000_000).collect();
        assert_eq!(opens, vec![0, 1, 2, 3, 4]);
        g.repeat = 3;
        g.max_requests = Some(12);
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        assert_eq!(w.total_requests(), 12);
        let opens: Vec<u64> = w.sessions.iter().map(|s| s.open_at.0 / 1_000_000_000).collect();
        assert_eq!(opens, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        // Target rate: 5 requests per 5 s window = 1/s; at 4/s the factor is 0.25.
        g.scale = Scale::TargetRate(4.0);
        g.max_requests = None;
        g.repeat = 1;
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        assert_eq!(w.sessions[4].open_at, SimTime(1_000_000_000));
        // An empty window is an error.
        g.start_s = 100.0;
        let e = append_trace(&mut empty(), &g, &t, 0, 1, None).unwrap_err();
        assert!(e.contains("no request in the window"), "{e}");
    }

    #[test]
    fn context_limit_names_the_row() {
        let t = native("0,,,1000,5,\n1,,,9000,5,\n");
        let g = TraceGroupConfig::new("c", "n.csv");
        let e = append_trace(&mut empty(), &g, &t, 0, 1, Some(4096)).unwrap_err();
        assert!(e.starts_with("n.csv:3: the request needs 9005 tokens"), "{e}");
    }

    #[test]
    fn shared_prefix_and_context_without_hashes() {
        let mut g = TraceGroupConfig::new("p", "s.csv");
        let ctx =
            "c = { session = \"s\", start_s = \"t\", input_tokens = \"i\", output_tokens = \"o\", model = \"m\" }";
        let cols = toml::from_str::<toml::Table>(ctx).unwrap()["c"].clone();
        let sp = toml::Value::Table(toml::from_str("m1 = 100").unwrap());
        super::super::agent_cfg::apply(&mut g.agent, None, Some(&cols), None, Some(&sp), None).unwrap();
        let text = "s,t,i,o,m\na,0,300,5,m1\nb,1,200,5,m1\na,2,400,5,m1\nc,3,50,5,m1\nd,4,300,5,m2\n";
        let t =
            super::super::reader::read_any(text.as_bytes(), "s.csv", Format::Sessions, false, &g.agent.read).unwrap();
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        let c = |s: u32, k: usize| w.content(fleetsim_core::ids::SessionId(s), k);
        // a and b share the model's 100-token prefix; a's second call extends its first.
        assert_eq!(c(0, 0).segments[0], c(1, 0).segments[0]);
        assert_eq!(c(0, 0).segments[0].len, 100);
        assert_eq!(c(0, 1).prompt_tokens, 400);
        assert_eq!(c(0, 0).segments[1].source, c(0, 1).segments[1].source);
        assert_ne!(c(0, 0).segments[1].source, c(1, 0).segments[1].source);
        // c's 50-token call cuts its prefix to 49 tokens; d's model has none.
        assert_eq!(c(2, 0).segments[0].len, 49);
        assert_eq!(c(3, 0).segments.len(), 1);
        assert!(
            w.notes.iter().any(|n| n.contains("1 sessions have a call shorter")),
            "{:?}",
            w.notes
        );
        // Independent calls: same prefix, their own stream each.
        g.agent.context = super::super::agent_cfg::Context::Independent;
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        let c = |s: u32, k: usize| w.content(fleetsim_core::ids::SessionId(s), k);
        assert_eq!(c(0, 0).segments[0], c(0, 1).segments[0]);
        assert_ne!(c(0, 0).segments[1].source, c(0, 1).segments[1].source);
    }

    #[test]
    fn a_recorded_shared_part_is_a_prefix_shared_across_sessions() {
        let mut g = TraceGroupConfig::new("r", "s.csv");
        let cols = "c = { session = \"s\", start_s = \"t\", input_tokens = \"i\", output_tokens = \"o\", shared_prefix_chars = \"tools\" }";
        let cols = toml::from_str::<toml::Table>(cols).unwrap()["c"].clone();
        super::super::agent_cfg::apply(&mut g.agent, None, Some(&cols), None, None, None).unwrap();
        // a, b record the same 4,000 characters; c another harness's 800; d none.
        let text = "s,t,i,o,tools\na,0,3000,5,4000\nb,1,2000,5,4000\na,2,3500,5,4000\nc,3,900,5,800\nd,4,700,5,\n";
        let t =
            super::super::reader::read_any(text.as_bytes(), "s.csv", Format::Sessions, false, &g.agent.read).unwrap();
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        let c = |s: u32, k: usize| w.content(fleetsim_core::ids::SessionId(s), k);
        // 4,000 characters at 4 per token: a 1,000-token prefix a and b share.
        assert_eq!(c(0, 0).segments[0].len, 1000);
        assert_eq!(c(0, 0).segments[0], c(1, 0).segments[0]);
        assert_eq!(c(0, 0).segments[0], c(0, 1).segments[0]);
        assert_eq!(c(2, 0).segments[0].len, 200);
        assert_ne!(c(2, 0).segments[0].source, c(0, 0).segments[0].source);
        assert_eq!(c(3, 0).segments.len(), 1, "no record, no key: its own prompt");
        assert_eq!(w.traces[0].sharing, fleetsim_core::workload::Sharing::RecordedPart);
        assert!(
            w.notes.iter().any(|n| n.contains("4 of 5 calls record a part")
                && n.contains("4000 characters on 3 calls, is 1000 tokens")),
            "{:?}",
            w.notes
        );
        // chars_per_token converts; without the column the trace is lengths only.
        g.agent.chars_per_token = Some(2.5);
        let mut w = empty();
        append_trace(&mut w, &g, &t, 0, 1, None).unwrap();
        assert_eq!(w.content(fleetsim_core::ids::SessionId(0), 0).segments[0].len, 1600);
        let plain = TraceGroupConfig::new("n", "n.csv");
        let mut w = empty();
        append_trace(&mut w, &plain, &native("0,,,100,5,\n"), 0, 1, None).unwrap();
        assert_eq!(w.traces[0].sharing, fleetsim_core::workload::Sharing::LengthsOnly);
    }

    #[test]
    fn jitter_is_seeded() {
        let t = native("0,,,100,5,\n0,,,100,5,\n");
        let mut g = TraceGroupConfig::new("j", "n.csv");
        g.arrival_jitter_s = 3.0;
        let run = |seed| {
            let mut w = empty();
            append_trace(&mut w, &g, &t, 0, seed, None).unwrap();
            w.sessions.iter().map(|s| s.open_at).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(run(1).iter().all(|t| t.0 < 3_000_000_000));
    }
}
