//! What the router knows of one backend at an instant: the scraped engine stats, its own
//! request stats, and the per-decision audit entry combining them.
//!
//! Owns: the plain value types [`EngineStatsEntry`], [`RequestStatsEntry`] and
//! [`ViewEntry`], the KV events a backend publishes ([`KvEvent`]) and the router's index of
//! them as it has received them ([`KvFeed`]). Sees: only `ids` and `time`, so the backends
//! (which publish events), the router (which produces the entries), the policies (which read
//! them) and metrics (which records them) can share them without importing each other.
//! Invariant: every entry carries the instant its value was read (`read_at`), so whoever
//! holds one knows its real age.

mod kv_feed;

pub use kv_feed::KvFeed;

use crate::time::SimTime;

/// A KV cache event: a full block's content hash entered (`stored`) or left the prefix
/// cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvEvent {
    /// True for `BlockStored`, false for `BlockRemoved`.
    pub stored: bool,
    /// The block's content hash.
    pub hash: u64,
}

/// One endpoint's scraped engine stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineStatsEntry {
    /// `vllm:num_requests_running`.
    pub running: u32,
    /// `vllm:num_requests_waiting`.
    pub waiting: u32,
    /// `vllm:kv_cache_usage_perc` numerator: KV blocks in use.
    pub kv_used_blocks: u32,
    /// ... and its denominator (0 for a backend without a KV cache).
    pub kv_total_blocks: u32,
    /// When the value was read from the engine.
    pub read_at: SimTime,
}

impl EngineStatsEntry {
    /// `vllm:kv_cache_usage_perc` in [0, 1].
    pub fn kv_usage(&self) -> f64 {
        if self.kv_total_blocks == 0 {
            0.0
        } else {
            f64::from(self.kv_used_blocks) / f64::from(self.kv_total_blocks)
        }
    }
}

/// What a policy sees of one endpoint's request stats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestStatsEntry {
    /// Dispatches in the window (QPS numerator; compared as an integer so ties are exact).
    pub window_dispatches: u32,
    /// `window_dispatches / W`.
    pub qps: f64,
    /// Dispatched, no response byte yet (includes time queued inside the engine).
    pub in_prefill: u32,
    /// First chunk received, stream not finished.
    pub in_decoding: u32,
}

/// What the policy saw of one backend at a decision, for the audit trail.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewEntry {
    /// Published engine stats (`None` = missing).
    pub engine: Option<EngineStatsEntry>,
    /// Request stats (`None` = endpoint never used).
    pub requests: Option<RequestStatsEntry>,
    /// Listed by service discovery at that instant (an unlisted backend is not a choice).
    pub listed: bool,
}

impl ViewEntry {
    /// A backend that discovery did not list.
    pub const UNLISTED: ViewEntry = ViewEntry {
        engine: None,
        requests: None,
        listed: false,
    };
}
