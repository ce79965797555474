//! Synthetic multi-turn sessions, generated up front from per-session random streams.
//!
//! A workload is a list of *groups* (e.g. one chatty user and eight agents). Each group opens
//! `sessions` sessions by an arrival process (a burst within a spread, Poisson, or a fixed
//! interval). A session is closed-loop: turn `k + 1` is sent `think_time` after the
//! response to turn `k` completes. Each turn's prompt is the previous prompt, plus the
//! previous output, plus `input_tokens` new tokens (the first turn: an optional shared system
//! prompt plus `first_input_tokens`), so later turns extend earlier ones and caches see
//! real prefixes.
//!
//! A group sends its turns as chat completions (`messages`, the default, as agents and chat
//! UIs do) or as completions (one `prompt` string): production-stack's routers read the two
//! differently (see [`RequestApi`]).
//!
//! Everything random about a session is drawn from its own stream, keyed by group name and
//! session index, before the simulation starts: every policy compared on one seed sees the
//! same sessions, token counts and think times (common random numbers); only timing differs.
//!
//! Owns: the generated sessions and turns. May not see: the fleet, the router or results.
//! Invariant: a group's draws come from its own named stream, so adding a group or changing
//! a policy never shifts another group's workload (common random numbers).

pub mod pacing;

use std::sync::Arc;

pub use crate::content::RequestApi;
use crate::content::{ChainMemo, Content, source_id};
use crate::dist::Dist;
use crate::ids::SessionId;
use crate::rng::{SimRng, stream};
use crate::time::{HORIZON, SimDuration, SimTime, secs_to_ns};

/// How a group opens its sessions.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// All sessions open at `at + U(0, spread)` (spread 0: all at once).
    Burst {
        /// Start of the burst.
        at: SimTime,
        /// Width of the burst.
        spread: SimDuration,
    },
    /// A Poisson process from `start` with `rate_per_s` sessions per second.
    Poisson {
        /// First possible arrival.
        start: SimTime,
        /// Sessions per second.
        rate_per_s: f64,
    },
    /// One session every `every`, from `start`.
    Interval {
        /// First session.
        start: SimTime,
        /// Gap between sessions.
        every: SimDuration,
    },
}

/// A validated session group.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// Group name (session keys are `{name}-{index}`).
    pub name: String,
    /// Number of sessions.
    pub sessions: u32,
    /// Session arrival process.
    pub arrival: Arrival,
    /// Turns per session (>= 1).
    pub turns: Dist,
    /// Shared system prompt length in tokens (0: none).
    pub system_prompt_tokens: u32,
    /// Name of the shared prompt's content; groups naming the same prompt share it.
    pub system_prompt: String,
    /// New tokens in the first turn (after the system prompt).
    pub first_input_tokens: Dist,
    /// New tokens in each later turn (user message or tool output).
    pub input_tokens: Dist,
    /// Output tokens per turn (>= 1).
    pub output_tokens: Dist,
    /// Client think time between a response and the next turn, seconds.
    pub think_time_s: Dist,
    /// Service time per request in seconds (queueing backends only).
    pub service_time_s: Option<Dist>,
    /// Whether requests carry the session-key header.
    pub sends_session_key: bool,
    /// Largest context (prompt + output tokens) a session may reach; a session whose next
    /// turn would exceed it ends there.
    pub max_context_tokens: Option<u32>,
    /// The API its requests use.
    pub request_api: RequestApi,
    /// The model its requests name (`None`: they name none and any backend serves them).
    pub model: Option<String>,
}

/// One turn, as planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnPlan {
    /// Client think time before sending this turn (0 for the first).
    pub think_before: SimDuration,
    /// Prompt tokens from the session's own stream (excluding the shared prefix).
    pub session_prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Service time (queueing backends).
    pub service: SimDuration,
}

/// One session, as planned.
#[derive(Clone, Debug)]
pub struct SessionPlan {
    /// Index of the group in the workload.
    pub group: u32,
    /// Session key (`{group}-{index}`).
    pub key: String,
    /// When the first turn is sent.
    pub open_at: SimTime,
    /// Whether the key header is sent.
    pub sends_key: bool,
    /// Shared prefix (content source, tokens).
    pub shared: Option<(u64, u32)>,
    /// The session's own content stream.
    pub source: u64,
    /// Its turns.
    pub turns: Vec<TurnPlan>,
    /// True if the session was cut short by the context limit.
    pub hit_context_limit: bool,
    /// Open loop (replayed traces): each turn is sent `think_before` after the previous
    /// turn was *sent*, not after it completed; a turn given up drops only itself.
    pub open_loop: bool,
    /// For replayed traces with prefix blocks: index of turn 0 in
    /// [`Workload::trace_turns`] ([`NO_TRACE`] otherwise).
    pub trace_first: u32,
    /// Replayed session-shaped traces: happens-before pacing, per-call content, recorded
    /// latencies (see [`pacing`]).
    pub replay: Option<Box<pacing::ReplayPlan>>,
    /// The API the session's requests use: a chat turn's content carries where its
    /// messages end (built per content from `turns` by `chat_message_ends`, so a million
    /// planned sessions do not each hold the list).
    pub api: RequestApi,
    /// The model its requests name: an index in [`Workload::models`], or [`NO_MODEL`].
    pub model: u32,
}

/// [`SessionPlan::model`] of a session whose requests name no model.
pub const NO_MODEL: u32 = u32::MAX;

/// [`SessionPlan::trace_first`] of a session whose content is not block-based.
pub const NO_TRACE: u32 = u32::MAX;

/// A replayed request's prefix blocks (see [`Content::trace_blocks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceTurn {
    /// Offset of its block ids in [`Workload::trace_blocks`].
    pub blocks_off: u32,
    /// Number of whole blocks of the prompt.
    pub n_blocks: u32,
    /// Index in [`Workload::trace_salts`].
    pub salt: u32,
    /// Row of the request in its trace (names its unique tokens).
    pub row: u32,
}

/// Content identity of one replay of one trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceSalt {
    /// Mixed into every block and unique-token source of the replay.
    pub salt: u64,
    /// Tokens per trace block.
    pub block_tokens: u32,
}

impl SessionPlan {
    /// Token content of turn `t`.
    pub fn content(&self, t: usize) -> Content {
        let turn = &self.turns[t];
        // Independent calls (replayed traces) each read their own stream after the prefix.
        let source = match &self.replay {
            Some(r) if r.independent => crate::content::mix(self.source, t as u64 + 1),
            _ => self.source,
        };
        let c = Content::session_turn(self.shared, source, turn.session_prompt_tokens, turn.output_tokens);
        match self.api {
            RequestApi::Chat => c.with_chat(chat_message_ends(self.shared.map_or(0, |(_, len)| len), &self.turns)),
            RequestApi::Completions => c,
        }
    }
}

/// Message ends of a chat session (see [`SessionPlan::api`]): the system prompt, then
/// per turn the user message (the turn's prompt end) and the assistant reply (+ output).
fn chat_message_ends(shared_tokens: u32, turns: &[TurnPlan]) -> Arc<[u32]> {
    let mut ends = Vec::with_capacity(1 + 2 * turns.len());
    if shared_tokens > 0 {
        ends.push(shared_tokens);
    }
    for t in turns {
        let prompt_end = shared_tokens + t.session_prompt_tokens;
        ends.push(prompt_end);
        ends.push(prompt_end + t.output_tokens);
    }
    Arc::from(ends)
}

/// A generated workload.
#[derive(Clone, Debug)]
pub struct Workload {
    /// All sessions; `SessionId(i)` is `sessions[i]`.
    pub sessions: Vec<SessionPlan>,
    /// Session ids sorted by `(open_at, id)`: the order first turns are sent.
    pub open_order: Vec<SessionId>,
    /// Prefix blocks of replayed trace requests.
    pub trace_turns: Vec<TraceTurn>,
    /// Dense block ids referenced by [`Workload::trace_turns`].
    pub trace_blocks: Vec<u32>,
    /// Content salts of trace replays.
    pub trace_salts: Vec<TraceSalt>,
    /// What building the workload reported (inferred sessions, skipped rows), for stderr.
    pub notes: Vec<String>,
    /// How closed-loop trace replays paced their calls.
    pub pacing: pacing::PacingCounts,
    /// Block-hash memos of multi-turn sessions (see [`ChainStore`]).
    pub chains: ChainStore,
    /// Model names requests carry, by [`SessionPlan::model`] index.
    pub models: Vec<String>,
    /// What each replayed trace records of its prompts, idle time and models, for the run's
    /// hints.
    pub traces: Vec<TraceFacts>,
}

/// What a replayed trace group records of the prompts its calls share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    /// Block hashes (Mooncake `hash_ids`, Dynamo `input_sequence_hashes`, a `block_hashes`
    /// column): calls share exactly the blocks they record.
    #[default]
    Blocks,
    /// The length of a part every call repeats, recorded per call (a `shared_prefix_tokens`
    /// or `shared_prefix_chars` column).
    RecordedPart,
    /// No record, but `shared_prefix_tokens` on the trace table models the shared part.
    Configured,
    /// Lengths only: nothing says which prompt tokens calls share.
    LengthsOnly,
}

/// Idle time of a trace: gaps in which no call of it is in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleSpans {
    /// First start to last start or end, ns.
    pub span_ns: u64,
    /// Gaps of at least the scan's threshold.
    pub gaps: u64,
    /// Their total, ns.
    pub idle_ns: u64,
    /// The longest, ns.
    pub longest_ns: u64,
}

impl IdleSpans {
    /// Share of the span spent in those gaps, 0 to 1.
    pub fn share(&self) -> f64 {
        if self.span_ns == 0 {
            0.0
        } else {
            self.idle_ns as f64 / self.span_ns as f64
        }
    }
}

/// What one `[[workload.traces]]` group's trace records, for the run's hints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceFacts {
    /// The trace group's name.
    pub group: String,
    /// The trace file.
    pub file: String,
    /// Calls replayed.
    pub calls: u64,
    /// What it records of shared prompts.
    pub sharing: Sharing,
    /// Its idle gaps as recorded (before any compression).
    pub idle: IdleSpans,
    /// Whether `max_idle_gap_s` compresses them.
    pub idle_compressed: bool,
    /// Its model names simulated as another model, or without a shape (one sentence each,
    /// naming the model, its calls and the keys that map it).
    pub model_warnings: Vec<String>,
}

/// The block-hash memos ([`ChainMemo`]) of sessions between turns, so each turn hashes only
/// its new blocks. A cache and nothing more: a memo lost early only costs rehashing, never
/// a different hash. Memory is bounded: a direct-mapped table of [`ChainStore::SLOTS`]
/// sessions (a session mapped to a taken slot replaces its holder), and a session's memo
/// leaves the table once its last turn's content has been built twice (for routing and
/// for the engine).
#[derive(Debug, Default)]
pub struct ChainStore {
    slots: std::sync::Mutex<Vec<Option<StoredChain>>>,
}

#[derive(Debug)]
struct StoredChain {
    session: SessionId,
    memo: Arc<ChainMemo>,
    /// The last turn's content was built once already.
    last_built: bool,
}

impl Clone for ChainStore {
    /// An empty store: memos are per run.
    fn clone(&self) -> ChainStore {
        ChainStore::default()
    }
}

impl ChainStore {
    /// Sessions held at most.
    pub const SLOTS: usize = 1024;

    /// The memo for a content of session `s` (turn `t` of `turns`), if it can help: none
    /// for single-turn sessions.
    fn memo(&self, s: SessionId, t: usize, turns: usize) -> Option<Arc<ChainMemo>> {
        if turns < 2 {
            return None;
        }
        let last = t + 1 == turns;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots.is_empty() {
            slots.resize_with(Self::SLOTS, || None);
        }
        let slot = &mut slots[s.index() % Self::SLOTS];
        match slot {
            Some(c) if c.session == s => {
                let memo = c.memo.clone();
                if last {
                    if c.last_built {
                        *slot = None;
                    } else {
                        c.last_built = true;
                    }
                }
                Some(memo)
            }
            // No memo for the last turn: nothing would read it afterwards.
            _ if last => None,
            _ => {
                let memo = Arc::new(ChainMemo::default());
                *slot = Some(StoredChain {
                    session: s,
                    memo: memo.clone(),
                    last_built: false,
                });
                Some(memo)
            }
        }
    }
}

impl Workload {
    /// Token content of turn `t` of session `s`.
    pub fn content(&self, s: SessionId, t: usize) -> Content {
        let plan = &self.sessions[s.index()];
        let c = self.content_unmemoised(s, t);
        match self.chains.memo(s, t, plan.turns.len()) {
            Some(memo) => c.with_memo(memo),
            None => c,
        }
    }

    /// [`content`](Self::content) without the session's block-hash memo.
    fn content_unmemoised(&self, s: SessionId, t: usize) -> Content {
        let plan = &self.sessions[s.index()];
        if plan.trace_first == NO_TRACE {
            return plan.content(t);
        }
        let tt = &self.trace_turns[plan.trace_first as usize + t];
        let turn = &plan.turns[t];
        let salt = self.trace_salts[tt.salt as usize];
        let blocks = &self.trace_blocks[tt.blocks_off as usize..(tt.blocks_off + tt.n_blocks) as usize];
        Content::trace_blocks(
            blocks,
            salt.salt,
            salt.block_tokens,
            u64::from(tt.row),
            turn.session_prompt_tokens,
            turn.output_tokens,
        )
    }

    /// Sorts [`Workload::open_order`] again (after sessions were added).
    pub fn sort_open_order(&mut self) {
        let sessions = &self.sessions;
        self.open_order = (0..sessions.len()).map(SessionId::from_index).collect();
        self.open_order.sort_by_key(|s| (sessions[s.index()].open_at, *s));
    }

    /// Index of model `name` in [`Workload::models`], added if new.
    pub fn model_index(&mut self, name: &str) -> u32 {
        model_index(&mut self.models, name)
    }

    /// The model session `s`'s requests name, if any.
    pub fn model_of(&self, s: SessionId) -> Option<&str> {
        self.models
            .get(self.sessions[s.index()].model as usize)
            .map(String::as_str)
    }

    /// Total planned requests.
    pub fn total_requests(&self) -> usize {
        self.sessions.iter().map(|s| s.turns.len()).sum()
    }
}

/// Why a workload cannot run (the caller adds the scenario key path).
#[derive(Debug, PartialEq)]
pub struct WorkloadError {
    /// Group index.
    pub group: usize,
    /// Message.
    pub message: String,
}

/// Generates the workload. `context_limit_tokens` is the engine's capacity for one request
/// (vLLM's `max_model_len` cannot exceed the KV cache); `None` for queueing backends.
pub fn generate(
    groups: &[GroupConfig],
    seed: u64,
    context_limit_tokens: Option<u32>,
) -> Result<Workload, WorkloadError> {
    let mut sessions = Vec::new();
    let mut models = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        let model = g.model.as_deref().map_or(NO_MODEL, |m| model_index(&mut models, m));
        let opens = open_times(g, &mut stream(seed, &format!("workload/{}/arrival", g.name), 0))
            .map_err(|message| WorkloadError { group: gi, message })?;
        let shared = (g.system_prompt_tokens > 0)
            .then(|| (source_id("system_prompt", &g.system_prompt, 0), g.system_prompt_tokens));
        let limit = match (g.max_context_tokens, context_limit_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (i, open_at) in opens.into_iter().enumerate() {
            let mut rng = stream(seed, &format!("workload/{}", g.name), i as u64);
            let key = format!("{}-{i}", g.name);
            let (turns, hit_limit) = plan_turns(g, &mut rng, limit).map_err(|message| WorkloadError {
                group: gi,
                message: format!("session {key}: {message}"),
            })?;
            let think_total = turns.iter().try_fold(SimDuration::ZERO, |acc, t| {
                acc.0.checked_add(t.think_before.0).map(SimDuration)
            });
            if think_total.and_then(|d| open_at.checked_add(d)).is_none() {
                return Err(WorkloadError {
                    group: gi,
                    message: format!("session {key}: {}", beyond_horizon("its think times alone")),
                });
            }
            sessions.push(SessionPlan {
                group: gi as u32,
                open_at,
                sends_key: g.sends_session_key,
                shared,
                source: source_id("session", &g.name, i as u64),
                turns,
                hit_context_limit: hit_limit,
                key,
                open_loop: false,
                trace_first: NO_TRACE,
                replay: None,
                api: g.request_api,
                model,
            });
        }
    }
    let mut open_order: Vec<SessionId> = (0..sessions.len()).map(SessionId::from_index).collect();
    open_order.sort_by_key(|s| (sessions[s.index()].open_at, *s));
    Ok(Workload {
        sessions,
        open_order,
        trace_turns: Vec::new(),
        trace_blocks: Vec::new(),
        trace_salts: Vec::new(),
        notes: Vec::new(),
        pacing: Default::default(),
        chains: ChainStore::default(),
        models,
        traces: Vec::new(),
    })
}

/// Index of `name` in `models`, appended if new.
fn model_index(models: &mut Vec<String>, name: &str) -> u32 {
    match models.iter().position(|m| m == name) {
        Some(i) => i as u32,
        None => {
            models.push(name.to_string());
            (models.len() - 1) as u32
        }
    }
}

/// Most turns one session may have (a guard against absurd distributions).
pub const MAX_TURNS: u32 = 1_000_000;

fn beyond_horizon(what: &str) -> String {
    format!("{what} would fall beyond the simulator's horizon (about 31.7 years of simulated time)")
}

fn open_times(g: &GroupConfig, rng: &mut SimRng) -> Result<Vec<SimTime>, String> {
    arrival_times(&g.arrival, g.sessions as usize, rng)
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.ok_or_else(|| beyond_horizon(&format!("the opening of session {}-{i}", g.name))))
        .collect()
}

/// `n` opening times by `arrival` (`None`: beyond the horizon).
pub fn arrival_times(arrival: &Arrival, n: usize, rng: &mut SimRng) -> Vec<Option<SimTime>> {
    match *arrival {
        Arrival::Burst { at, spread } => (0..n)
            .map(|_| {
                let u: f64 = rand::RngExt::random(rng);
                at.checked_add(SimDuration((u * spread.0 as f64) as u64))
            })
            .collect(),
        Arrival::Poisson { start, rate_per_s } => {
            let gap = Dist::from_spec(crate::dist::DistSpec::Exponential { mean: 1.0 / rate_per_s })
                .expect("rate validated > 0");
            let mut t = start.0 as f64;
            (0..n)
                .map(|_| {
                    t += gap.sample(rng) * 1e9;
                    (t <= HORIZON.0 as f64).then(|| SimTime(t.round() as u64))
                })
                .collect()
        }
        Arrival::Interval { start, every } => (0..n)
            .map(|i| {
                every
                    .0
                    .checked_mul(i as u64)
                    .and_then(|d| start.checked_add(SimDuration(d)))
            })
            .collect(),
    }
}

/// Draws one session's turns. Draw order per turn is fixed (input, output, think, service)
/// so that adding a parameter elsewhere never shifts these streams.
fn plan_turns(g: &GroupConfig, rng: &mut SimRng, limit: Option<u32>) -> Result<(Vec<TurnPlan>, bool), String> {
    let n_turns = g.turns.sample_count(rng, 1);
    if n_turns > MAX_TURNS {
        return Err(format!("drew {n_turns} turns; a session may have at most {MAX_TURNS}"));
    }
    let mut turns = Vec::with_capacity(n_turns.min(1024) as usize);
    let mut session_prompt: u64 = 0;
    let mut prev_output: u64 = 0;
    for k in 0..n_turns {
        let new = if k == 0 {
            g.first_input_tokens.sample_count(rng, 0)
        } else {
            g.input_tokens.sample_count(rng, 0)
        };
        let output = g.output_tokens.sample_count(rng, 1);
        let think = if k == 0 { 0.0 } else { g.think_time_s.sample(rng) };
        let service = g.service_time_s.as_ref().map_or(0.0, |d| d.sample(rng));
        for (name, v) in [("think_time_s", think), ("service_time_s", service)] {
            if !(v.is_finite() && v <= 1e9) {
                return Err(format!(
                    "turn {k} drew {name} = {v}; durations must be finite and at most 1e9 s"
                ));
            }
        }
        let prompt = session_prompt + prev_output + u64::from(new);
        let total = u64::from(g.system_prompt_tokens) + prompt + u64::from(output);
        if let Some(lim) = limit
            && total > u64::from(lim)
        {
            if k == 0 {
                return Err(format!(
                    "its first turn needs {total} tokens (system prompt + input + output) but one request may hold at most {lim} tokens (the KV cache, backends.kv_blocks x backends.block_size_tokens, or max_context_tokens)"
                ));
            }
            return Ok((turns, true));
        }
        if total > u64::from(u32::MAX) {
            return Err(format!(
                "turn {k} needs {total} tokens; a request may hold at most 2^32 - 1"
            ));
        }
        if prompt + u64::from(g.system_prompt_tokens) == 0 {
            return Err("a turn has an empty prompt (system_prompt_tokens and first_input_tokens are both 0)".into());
        }
        let prompt32 = prompt as u32; // <= total <= u32::MAX, checked above
        turns.push(TurnPlan {
            think_before: SimDuration(secs_to_ns(think)),
            session_prompt_tokens: prompt32,
            output_tokens: output,
            service: SimDuration(secs_to_ns(service)),
        });
        session_prompt = prompt;
        prev_output = u64::from(output);
    }
    Ok((turns, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> GroupConfig {
        GroupConfig {
            name: name.into(),
            sessions: 3,
            arrival: Arrival::Burst {
                at: SimTime(1000),
                spread: SimDuration(0),
            },
            turns: Dist::constant(3.0).unwrap(),
            system_prompt_tokens: 100,
            system_prompt: "sys".into(),
            first_input_tokens: Dist::constant(50.0).unwrap(),
            input_tokens: Dist::constant(20.0).unwrap(),
            output_tokens: Dist::constant(10.0).unwrap(),
            think_time_s: Dist::constant(2.0).unwrap(),
            service_time_s: None,
            sends_session_key: true,
            max_context_tokens: None,
            request_api: RequestApi::Completions,
            model: None,
        }
    }

    /// Whole-content and prompt-only hashes of `c` at block size `bs`.
    fn both_chains(c: &Content, bs: u32) -> (Vec<u64>, Vec<u64>) {
        let (mut all, mut prompt) = (Vec::new(), Vec::new());
        crate::content::block_hashes(c, bs, (c.total_tokens() / bs) as usize, &mut all);
        crate::content::block_hashes(c, bs, (c.prompt_tokens / bs) as usize, &mut prompt);
        (all, prompt)
    }

    #[test]
    fn a_session_plan_fits_in_112_bytes() {
        // A million-request replay plans ~760,000 sessions: 16 bytes more per plan (a
        // chat message list held in each) cost 12 MiB of peak memory.
        assert!(
            std::mem::size_of::<SessionPlan>() <= 112,
            "{}",
            std::mem::size_of::<SessionPlan>()
        );
    }

    #[test]
    fn session_memos_give_the_same_hashes_and_are_dropped_after_the_last_turn() {
        let mut g = group("a");
        g.turns = Dist::constant(5.0).unwrap();
        let single = GroupConfig {
            turns: Dist::constant(1.0).unwrap(),
            ..group("b")
        };
        let w = generate(&[g, single], 1, None).unwrap();
        let multi: Vec<SessionId> = (0..w.sessions.len())
            .map(SessionId::from_index)
            .filter(|s| w.sessions[s.index()].turns.len() == 5)
            .collect();
        assert_eq!(multi.len(), 3);
        // Turns interleaved across sessions, each content built twice (routing, engine).
        for t in 0..5 {
            for &s in &multi {
                for _ in 0..2 {
                    let c = w.content(s, t);
                    assert!(c.memo.0.is_some(), "session {s} turn {t}");
                    let plain = w.content_unmemoised(s, t);
                    assert!(plain.memo.0.is_none());
                    assert_eq!(both_chains(&c, 16), both_chains(&plain, 16));
                }
            }
        }
        let slots = w.chains.slots.lock().unwrap();
        assert!(slots.iter().all(Option::is_none), "every memo left after its last turn");
        drop(slots);
        let s = SessionId::from_index(w.sessions.iter().position(|p| p.turns.len() == 1).unwrap());
        assert!(w.content(s, 0).memo.0.is_none(), "no memo for a single-turn session");
    }

    #[test]
    fn context_grows_by_output_and_input() {
        let w = generate(&[group("a")], 1, None).unwrap();
        let s = &w.sessions[0];
        let p: Vec<u32> = s.turns.iter().map(|t| t.session_prompt_tokens).collect();
        assert_eq!(p, vec![50, 80, 110]);
        assert_eq!(s.turns[0].think_before, SimDuration::ZERO);
        assert_eq!(s.turns[1].think_before, SimDuration(2_000_000_000));
        assert_eq!(s.content(1).prompt_tokens, 180);
        assert_eq!(w.total_requests(), 9);
        assert_eq!(s.key, "a-0");
    }

    #[test]
    fn context_limit_ends_sessions_or_rejects_first_turn() {
        let w = generate(&[group("a")], 1, Some(200)).unwrap();
        // Turn 2 would need 100 + 80 + 10 = 190 <= 200; turn 3: 100 + 110 + 10 = 220 > 200.
        assert_eq!(w.sessions[0].turns.len(), 2);
        assert!(w.sessions[0].hit_context_limit);
        let e = generate(&[group("a")], 1, Some(100)).unwrap_err();
        assert_eq!(e.group, 0);
        assert!(e.message.contains("first turn needs 160 tokens"), "{}", e.message);
    }

    #[test]
    fn sessions_are_common_random_numbers_per_group() {
        let mut g = group("b");
        g.output_tokens = Dist::from_spec(crate::dist::DistSpec::Exponential { mean: 100.0 }).unwrap();
        let alone = generate(std::slice::from_ref(&g), 9, None).unwrap();
        let with_other = generate(&[group("a"), g], 9, None).unwrap();
        assert_eq!(alone.sessions[1].turns, with_other.sessions[4].turns);
    }

    #[test]
    fn burst_spread_and_open_order() {
        let mut g = group("a");
        g.sessions = 50;
        g.arrival = Arrival::Burst {
            at: SimTime(5),
            spread: SimDuration(1000),
        };
        let w = generate(&[g], 3, None).unwrap();
        assert!(
            w.sessions
                .iter()
                .all(|s| s.open_at >= SimTime(5) && s.open_at < SimTime(1005))
        );
        let times: Vec<SimTime> = w.open_order.iter().map(|s| w.sessions[s.index()].open_at).collect();
        assert!(times.windows(2).all(|p| p[0] <= p[1]));
    }
}
