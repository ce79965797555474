//! Backend models. A backend never sees the router: it receives requests, runs, and
//! exposes its state (live, for ground-truth metrics) and its gauges (what `/metrics`
//! would serve).

pub mod kv;
pub mod perf;
pub mod queueing;
pub mod vllm;

use queueing::QueueingServer;
use vllm::VllmEngine;

/// One backend of the fleet.
// One value per backend and the engine is the hot path: keep it inline rather than boxed.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    /// A vLLM v1 engine.
    Vllm(VllmEngine),
    /// A plain c-server queue (validation mode).
    Queueing(QueueingServer),
}

impl Backend {
    /// Live running requests.
    pub fn running(&self) -> u32 {
        match self {
            Backend::Vllm(e) => e.running(),
            Backend::Queueing(q) => q.running(),
        }
    }

    /// Live requests queued by the scheduler (not admitted at the last scheduling pass).
    pub fn waiting(&self) -> u32 {
        match self {
            Backend::Vllm(e) => e.waiting(),
            Backend::Queueing(q) => q.waiting(),
        }
    }

    /// Requests that reached the engine but have not been through a scheduling pass yet.
    pub fn pending(&self) -> u32 {
        match self {
            Backend::Vllm(e) => e.pending(),
            Backend::Queueing(_) => 0,
        }
    }

    /// Concurrency limit: `max_num_seqs` or the number of servers.
    pub fn slots(&self) -> u32 {
        match self {
            Backend::Vllm(e) => e.config().max_num_seqs,
            Backend::Queueing(q) => q.slots(),
        }
    }

    /// `(num_requests_running, num_requests_waiting)` as `/metrics` would serve them now.
    /// The queueing model has no engine steps, so its gauges are live.
    pub fn gauges(&self) -> (u32, u32) {
        match self {
            Backend::Vllm(e) => e.gauges(),
            Backend::Queueing(q) => (q.running(), q.waiting()),
        }
    }

    /// KV blocks in use (0 for the queueing model).
    pub fn kv_used_blocks(&self) -> u32 {
        match self {
            Backend::Vllm(e) => e.kv_used_blocks(),
            Backend::Queueing(_) => 0,
        }
    }

    /// Invariant check.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Backend::Vllm(e) => e.check(),
            Backend::Queueing(q) => q.check(),
        }
    }
}
