//! Backend models. A backend never sees the router: it receives requests, runs, and
//! exposes its state (live, for ground-truth metrics) and its gauges (what `/metrics`
//! would serve).
//!
//! Owns: each backend's engine state (scheduler, KV cache, gauges). May not see: the router,
//! the policies or the metrics. Invariant: the gauges a backend serves are derived from its
//! own state only, and the same arrivals give the same steps.

pub mod kv;
pub mod live;
pub mod perf;
pub mod physics;
pub mod queueing;
pub mod replay;
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
    /// Model names the backend serves (vLLM's `--served-model-name`, a router's
    /// `--static-models` entry): a request naming a model reaches only backends serving it.
    /// Empty: the backend names no model and serves every request.
    pub serves: Vec<String>,
}

use crate::ids::BackendId;
use queueing::QueueingServer;
use vllm::VllmEngine;

/// One backend's engine, of either model: `Engine<VllmEngine, QueueingServer>` owns one
/// ([`Backend`]), [`EngineRef`] and [`EngineMut`] borrow one from [`Engines`].
#[derive(Clone, Copy)]
pub enum Engine<V, Q> {
    /// A vLLM v1 engine.
    Vllm(V),
    /// A plain c-server queue (validation mode).
    Queueing(Q),
}

impl<V, Q> Engine<V, Q> {
    /// The engine, borrowed.
    pub fn as_ref(&self) -> Engine<&V, &Q> {
        match self {
            Engine::Vllm(v) => Engine::Vllm(v),
            Engine::Queueing(q) => Engine::Queueing(q),
        }
    }
}

/// A new engine, before it joins [`Engines`].
pub type Backend = Engine<VllmEngine, QueueingServer>;
/// A backend's engine, borrowed.
pub type EngineRef<'a> = Engine<&'a VllmEngine, &'a QueueingServer>;
/// A backend's engine, borrowed mutably.
pub type EngineMut<'a> = Engine<&'a mut VllmEngine, &'a mut QueueingServer>;

/// The fleet's engines by backend, one vector per model. A fleet runs one model (the
/// scenario's), so one vector is empty; code that only one model can reach (engine steps,
/// collapsed stretches, service completions) takes that model's engine type directly.
#[derive(Default)]
pub struct Engines {
    vllm: Vec<VllmEngine>,
    queueing: Vec<QueueingServer>,
}

impl Engines {
    /// Appends the next backend's engine; panics if it is of another model than the rest
    /// (a fleet runs one model: validation keeps it so).
    pub fn push(&mut self, e: Backend) {
        match e {
            Engine::Vllm(v) => self.vllm.push(v),
            Engine::Queueing(q) => self.queueing.push(q),
        }
        assert!(
            self.vllm.is_empty() || self.queueing.is_empty(),
            "a fleet runs one backend model"
        );
    }

    /// Backend `b`'s engine.
    #[inline]
    pub fn get(&self, b: BackendId) -> EngineRef<'_> {
        if self.queueing.is_empty() {
            Engine::Vllm(&self.vllm[b.index()])
        } else {
            Engine::Queueing(&self.queueing[b.index()])
        }
    }

    /// Backend `b`'s engine, mutably.
    #[inline]
    pub fn get_mut(&mut self, b: BackendId) -> EngineMut<'_> {
        if self.queueing.is_empty() {
            Engine::Vllm(&mut self.vllm[b.index()])
        } else {
            Engine::Queueing(&mut self.queueing[b.index()])
        }
    }

    /// Backend `b`'s vLLM engine (for code only vLLM fleets reach).
    #[inline]
    pub fn vllm(&mut self, b: BackendId) -> &mut VllmEngine {
        &mut self.vllm[b.index()]
    }

    /// Backend `b`'s queueing server (for code only queueing fleets reach).
    #[inline]
    pub fn queueing(&mut self, b: BackendId) -> &mut QueueingServer {
        &mut self.queueing[b.index()]
    }

    /// The vLLM engines (none in a queueing fleet).
    pub fn vllm_engines(&self) -> &[VllmEngine] {
        &self.vllm
    }

    /// The vLLM engines, mutably.
    pub fn vllm_engines_mut(&mut self) -> &mut [VllmEngine] {
        &mut self.vllm
    }

    /// Replaces backend `b`'s engine with `e` (of the fleet's model) and returns the old one.
    pub fn replace(&mut self, b: BackendId, e: Backend) -> Backend {
        match (self.get_mut(b), e) {
            (Engine::Vllm(old), Engine::Vllm(new)) => Engine::Vllm(std::mem::replace(old, new)),
            (Engine::Queueing(old), Engine::Queueing(new)) => Engine::Queueing(std::mem::replace(old, new)),
            _ => panic!("a fleet runs one backend model"),
        }
    }

    /// Number of backends.
    pub fn len(&self) -> usize {
        self.vllm.len() + self.queueing.len()
    }

    /// True for a fleet of no backends.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

impl EngineRef<'_> {
    /// Live running requests.
    pub fn running(&self) -> u32 {
        match self {
            Engine::Vllm(e) => e.running(),
            Engine::Queueing(q) => q.running(),
        }
    }

    /// Live requests queued by the scheduler (not admitted at the last scheduling pass).
    pub fn waiting(&self) -> u32 {
        match self {
            Engine::Vllm(e) => e.waiting(),
            Engine::Queueing(q) => q.waiting(),
        }
    }

    /// Requests that reached the engine but have not been through a scheduling pass yet.
    pub fn pending(&self) -> u32 {
        match self {
            Engine::Vllm(e) => e.pending(),
            Engine::Queueing(_) => 0,
        }
    }

    /// Concurrency limit: `max_num_seqs` or the number of servers.
    pub fn slots(&self) -> u32 {
        match self {
            Engine::Vllm(e) => e.config().max_num_seqs,
            Engine::Queueing(q) => q.slots(),
        }
    }

    /// The gauges as `/metrics` would serve them now. The queueing model has no engine
    /// steps and no KV cache, so its gauges are live and its KV usage is 0.
    pub fn gauges(&self) -> Gauges {
        match self {
            Engine::Vllm(e) => e.gauges(),
            Engine::Queueing(q) => Gauges {
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
            Engine::Vllm(e) => e.kv_used_blocks(),
            Engine::Queueing(_) => 0,
        }
    }

    /// Invariant check.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Engine::Vllm(e) => e.check(),
            Engine::Queueing(q) => q.check(),
        }
    }
}
