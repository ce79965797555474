//! Per-request records and per-backend time-series rows: what happened to each request
//! and when, as the simulation writes it.

use crate::decision::Branch;
use crate::ids::{BackendId, SessionId};
use crate::time::SimTime;

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
