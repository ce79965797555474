//! Backend models. A backend never sees the router: it receives requests, runs, and
//! exposes its state (live, for ground-truth metrics) and its gauges (what `/metrics`
//! would serve).
//!
//! Owns: each backend's engine state (scheduler, KV cache, gauges). May not see: the router,
//! the policies or the metrics. Invariant: the gauges a backend serves are derived from its
//! own state only, and the same arrivals give the same steps.

pub mod kv;
pub mod perf;
pub mod queueing;
pub mod vllm;

/// Upper bound (exclusive) on `kv_blocks`: the block pool counts ring positions modulo
/// 2^31 and its ring holds up to twice the blocks.
pub const MAX_KV_BLOCKS: u32 = 1 << 30;

/// Which group and profile a backend belongs to, for per-backend outputs (both empty for
/// a single `[backends]` table without a profile, whose outputs name neither).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Label {
    /// `[[backends.groups]]` name.
    pub group: String,
    /// `<model>/<gpu>/tp<N>`.
    pub profile: String,
}

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

/// What vLLM's `/metrics` reports: `vllm:num_requests_running`, `vllm:num_requests_waiting`
/// and `vllm:kv_cache_usage_perc` (as used / total blocks), all set once per engine step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    /// `vllm:num_requests_running`.
    pub running: u32,
    /// `vllm:num_requests_waiting`.
    pub waiting: u32,
    /// Blocks in use at the last step end.
    pub kv_used_blocks: u32,
    /// Blocks in the pool (0 when the model has no KV cache).
    pub kv_total_blocks: u32,
}

impl Gauges {
    /// `vllm:kv_cache_usage_perc` in [0, 1].
    pub fn kv_usage(&self) -> f64 {
        if self.kv_total_blocks == 0 {
            0.0
        } else {
            f64::from(self.kv_used_blocks) / f64::from(self.kv_total_blocks)
        }
    }
}

impl Backend {
    /// KV events since the last drain (none for the queueing model, which has no cache).
    pub fn drain_kv_events(&mut self, out: &mut Vec<kv::KvEvent>) {
        if let Backend::Vllm(e) = self {
            e.drain_kv_events(out);
        }
    }

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

    /// The gauges as `/metrics` would serve them now. The queueing model has no engine
    /// steps and no KV cache, so its gauges are live and its KV usage is 0.
    pub fn gauges(&self) -> Gauges {
        match self {
            Backend::Vllm(e) => e.gauges(),
            Backend::Queueing(q) => Gauges {
                running: q.running(),
                waiting: q.waiting(),
                kv_used_blocks: 0,
                kv_total_blocks: 0,
            },
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
