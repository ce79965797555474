//! One vLLM v1 engine: scheduler, KV cache with prefix caching, gauges.
//!
//! Follows the V1 engine of vllm-project/vllm (main branch, 2025-2026): `Scheduler.schedule`
//! in `vllm/v1/core/sched/scheduler.py`, the KV cache of `vllm/v1/core/kv_cache_manager.py`
//! and `block_pool.py`, and the gauges the output handler of `vllm/v1/engine/async_llm.py`
//! sets from each step's `SchedulerStats`:
//!
//! * No prefill/decode phases: each request has `computed` tokens and catches up with
//!   `num_tokens` (prompt + generated) in chunks bounded by the step's token budget
//!   (`max_num_batched_tokens`), i.e. chunked prefill is always on.
//! * RUNNING first, in admission order. A request that cannot get the KV blocks it needs
//!   preempts the most recently admitted running request (recompute: its blocks are freed,
//!   `computed` resets, it goes to the *front* of the waiting queue), repeatedly, until the
//!   allocation fits or the request itself was preempted.
//! * WAITING next, only if nothing was preempted in this step: strict FCFS with
//!   head-of-line blocking, while the budget lasts and fewer than `max_num_seqs` run.
//!   Admission looks up the longest cached prefix of full blocks, capped at
//!   `floor((num_tokens - 1) / block) * block` tokens.
//! * Requests that arrive while a step runs are queued for the next scheduling pass (the
//!   engine core drains its input queue between steps).
//! * The gauges `num_requests_running` / `num_requests_waiting` are set once per step, at
//!   its end, and hold their value while idle.

use std::collections::VecDeque;

mod coalesce;

use super::kv::KvCache;
use super::perf::{StepShape, StepTimeModel};
use crate::content::{Content, block_hashes};
use crate::ids::RequestId;
use crate::time::{SimDuration, SimTime};

/// Engine configuration (vLLM flags).
#[derive(Clone, Debug, PartialEq)]
pub struct VllmConfig {
    /// `--max-num-seqs`: running-list capacity.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`: per-step token budget.
    pub max_num_batched_tokens: u32,
    /// Usable KV-cache blocks (`num_gpu_blocks` minus the null block).
    pub kv_blocks: u32,
    /// Tokens per KV block (16 on CUDA).
    pub block_size_tokens: u32,
    /// Automatic prefix caching (on by default in v1).
    pub prefix_caching: bool,
    /// Step-time model.
    pub step_time: StepTimeModel,
    /// Admit a waiting request only if the blocks for its whole sequence (not just the
    /// first chunk) are free: vLLM's `scheduler_reserve_full_isl` (on by default from
    /// 0.19: `Scheduler.schedule` passes `full_sequence_must_fit` to
    /// `KVCacheManager.allocate_slots`, which refuses when the full `request.num_tokens`
    /// needs more blocks than are free). Off, only the first chunk's blocks must fit.
    pub reserve_full_isl: bool,
}

/// What the engine reports for a request when it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The request.
    pub id: RequestId,
    /// Times it was preempted (and recomputed).
    pub preemptions: u32,
}

/// Everything observable that one call to `start_step`/`finish_step` produced.
#[derive(Default, Debug)]
pub struct StepEvents {
    /// Requests admitted for the first time, with the prompt tokens served from the cache.
    pub admitted: Vec<(RequestId, u32)>,
    /// Requests whose first output token was sampled in the step.
    pub first_tokens: Vec<RequestId>,
    /// Requests that finished in the step.
    pub finished: Vec<Finished>,
    /// Requests preempted while scheduling.
    pub preempted: Vec<RequestId>,
    /// Inter-token gaps of the requests that finished in the step, run-length encoded as
    /// `(gap_ns, tokens)`: the time from each output token after the first to the one
    /// before it (a gap spans any preemption in between).
    pub itl_runs: Vec<(u64, u32)>,
    /// Every request that sampled a token in the step, in batch order; filled only when
    /// the engine reports tokens ([`VllmEngine::set_report_tokens`], for live serving).
    pub sampled: Vec<RequestId>,
}

impl StepEvents {
    /// Empties all lists, keeping their capacity.
    pub fn clear(&mut self) {
        self.admitted.clear();
        self.first_tokens.clear();
        self.finished.clear();
        self.preempted.clear();
        self.itl_runs.clear();
        self.sampled.clear();
    }
}

/// One request in the engine. The fields every step reads (the scheduler's running loop,
/// `finish_step`) come first and fit in the first cache line (`repr(C)`, 64-byte aligned);
/// the content and its block hashes, read at admission only, follow. The KV cache keeps
/// the request's block table, under the request's slot index.
#[repr(C, align(64))]
struct Slot {
    /// Blocks held (the length of the request's block table).
    held: u32,
    id: RequestId,
    /// Prompt plus generated tokens.
    num_tokens: u32,
    computed: u32,
    generated: u32,
    /// Tokens scheduled in the step in progress.
    scheduled: u32,
    /// `content.output_tokens`.
    output_tokens: u32,
    /// Leading blocks registered in the cache.
    hashed: u32,
    /// `hashes.len()`.
    n_hashes: u32,
    preemptions: u32,
    admitted_before: bool,
    /// Chained hashes of every full block of the request's content (prefix caching only).
    hashes: Vec<u64>,
    content: Content,
    /// When the latest output token was sampled (ns; meaningful once `generated > 0`).
    last_token_ns: u64,
    /// Gaps between consecutive output tokens so far, run-length encoded: every decoding
    /// request of one step sees the same gap, so runs stay short.
    itl_runs: Vec<(u64, u32)>,
}

/// Prefix-cache counters (vLLM's `prefix_cache_queries` / `_hits`, in tokens).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Tokens looked up at admission.
    pub query_tokens: u64,
    /// Tokens found in the cache.
    pub hit_tokens: u64,
}

/// One engine.
pub struct VllmEngine {
    cfg: VllmConfig,
    kv: KvCache,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    running: Vec<u32>,
    waiting: VecDeque<u32>,
    inbox: Vec<u32>,
    stepping: bool,
    /// Slots scheduled in the step in progress.
    batch: Vec<u32>,
    gauges: super::Gauges,
    steps: u64,
    preemptions: u64,
    /// Output tokens sampled so far, settled (a stretch's are added when it settles).
    sampled: u64,
    cache_stats: PrefixCacheStats,
    /// Scratch: slots that finished in the step being applied.
    done: Vec<u32>,
    /// Coalesce pure-decode steps ([`coalesce`]; the fast engine mode).
    coalesce: bool,
    /// The last step scheduled every running request and sampled a token for each.
    decode_ready: bool,
    /// The pure-decode stretch in progress, if any.
    stretch: coalesce::Stretch,
    /// Report every sampled token in [`StepEvents::sampled`].
    report_tokens: bool,
}

impl VllmEngine {
    /// An idle engine with an empty cache, kept per block.
    pub fn new(cfg: VllmConfig) -> VllmEngine {
        VllmEngine::with_kv_runs(cfg, false)
    }

    /// An idle engine with an empty cache, kept per run ([`crate::backend::kv::RunPool`],
    /// the fast engine mode) or per block ([`crate::backend::kv::BlockPool`], the
    /// reference mode).
    pub fn with_kv_runs(cfg: VllmConfig, runs: bool) -> VllmEngine {
        assert!(cfg.max_num_seqs > 0 && cfg.max_num_batched_tokens > 0 && cfg.block_size_tokens > 0);
        VllmEngine {
            kv: KvCache::new(cfg.kv_blocks, runs),
            cfg,
            slots: Vec::new(),
            free_slots: Vec::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            inbox: Vec::new(),
            stepping: false,
            batch: Vec::new(),
            gauges: super::Gauges::default(),
            steps: 0,
            preemptions: 0,
            sampled: 0,
            cache_stats: PrefixCacheStats::default(),
            done: Vec::new(),
            coalesce: false,
            decode_ready: false,
            stretch: coalesce::Stretch::default(),
            report_tokens: false,
        }
    }

    /// Reports every sampled token in [`StepEvents::sampled`] (a live server streams
    /// them). Per-step only: a coalesced stretch defers its tokens, so coalescing must be
    /// off.
    pub fn set_report_tokens(&mut self, on: bool) {
        assert!(!(on && self.coalesce), "token reports need per-step stepping");
        self.report_tokens = on;
    }

    /// Aborts request `id` between steps, as vLLM's engine core does with an abort from
    /// the front end (a client that went away): it leaves the running list, the waiting
    /// queue or the inbox, and frees its blocks, tail first. Returns false if the engine
    /// does not hold it (finished already). The gauges are published again, so an idle
    /// engine does not keep serving the aborted request in `/metrics`.
    pub fn abort(&mut self, id: RequestId) -> bool {
        assert!(
            !self.stepping,
            "abort during a step (the engine core aborts between steps)"
        );
        if self.stretch.active {
            self.settle();
        }
        let Some(s) = self
            .slots
            .iter()
            .position(|sl| sl.as_ref().is_some_and(|sl| sl.id == id))
        else {
            return false;
        };
        let s = s as u32;
        self.running.retain(|&x| x != s);
        self.waiting.retain(|&x| x != s);
        self.inbox.retain(|&x| x != s);
        if self.slot(s).held > 0 {
            self.kv.release(s);
        }
        // The cache may hold this request's lookup for its admission: forget it.
        self.kv.clear_hits();
        self.slots[s as usize] = None;
        self.free_slots.push(s);
        self.decode_ready = false;
        self.publish_gauges();
        true
    }

    /// The configuration.
    pub fn config(&self) -> &VllmConfig {
        &self.cfg
    }

    /// A request reaches the engine. Returns true if the engine was idle and a step should
    /// be started now.
    pub fn enqueue(&mut self, id: RequestId, content: Content) -> bool {
        assert!(
            content.total_tokens().div_ceil(self.cfg.block_size_tokens) <= self.cfg.kv_blocks,
            "request larger than the KV cache reached the engine (validation missed it)"
        );
        let slot = Slot {
            held: 0,
            id,
            num_tokens: content.prompt_tokens,
            computed: 0,
            generated: 0,
            scheduled: 0,
            output_tokens: content.output_tokens,
            hashed: 0,
            n_hashes: 0,
            preemptions: 0,
            admitted_before: false,
            hashes: Vec::new(),
            content,
            last_token_ns: 0,
            itl_runs: Vec::new(),
        };
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.inbox.push(idx);
        !self.stepping
    }

    /// Live number of running requests (the scheduler's running list).
    pub fn running(&self) -> u32 {
        self.running.len() as u32
    }

    /// Live length of the scheduler's waiting queue: requests the last scheduling pass could
    /// not admit (queued, or preempted). Requests that arrived during the step in progress
    /// are not in it yet (see [`VllmEngine::pending`]), exactly as in vLLM.
    pub fn waiting(&self) -> u32 {
        self.waiting.len() as u32
    }

    /// Requests that arrived during the step in progress; the next scheduling pass sees them.
    pub fn pending(&self) -> u32 {
        self.inbox.len() as u32
    }

    /// `(vllm:num_requests_running, vllm:num_requests_waiting)` as last published.
    pub fn gauges(&self) -> super::Gauges {
        self.gauges
    }

    /// Publishes KV events from now on (for KV-event-fed routers).
    pub fn enable_kv_events(&mut self) {
        self.kv.enable_events();
    }

    /// KV events since the last drain, in order.
    pub fn drain_kv_events(&mut self, out: &mut Vec<super::kv::KvEvent>) {
        self.kv.drain_events(out);
    }

    /// KV blocks referenced by requests.
    pub fn kv_used_blocks(&self) -> u32 {
        self.kv.num_used()
    }

    /// Engine steps executed.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// Output tokens sampled so far, over every request (vLLM's
    /// `generation_tokens` counter, before any request left).
    pub fn tokens_sampled(&self) -> u64 {
        self.sampled + u64::from(self.deferred_tokens()) * self.running.len() as u64
    }

    /// Prefix-cache counters.
    pub fn cache_stats(&self) -> PrefixCacheStats {
        self.cache_stats
    }

    fn slot(&self, i: u32) -> &Slot {
        self.slots[i as usize].as_ref().expect("dangling slot")
    }

    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        self.slots[i as usize].as_mut().expect("dangling slot")
    }

    /// Blocks a request needs to hold `tokens` tokens.
    #[inline]
    fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.cfg.block_size_tokens)
    }

    /// Schedules the next step. Returns its duration, or `None` if there is nothing to do
    /// (the engine then idles until the next arrival).
    pub fn start_step(&mut self, ev: &mut StepEvents) -> Option<SimDuration> {
        assert!(!self.stepping, "start_step while a step is running");
        // Usually empty: skip the call (a measurable share of a coalesced step).
        if !self.inbox.is_empty() {
            self.waiting.extend(self.inbox.drain(..));
        }
        if (self.stretch.active || self.enter_stretch())
            && let Some(d) = self.stretch_start()
        {
            return Some(d);
        }
        self.decode_ready = false;
        if self.running.is_empty() && self.waiting.is_empty() {
            return None;
        }
        self.batch.clear();
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut load = StepShape::default();
        let preempted_any = self.schedule_running(&mut budget, &mut load, ev);
        // WAITING, only if nothing was preempted.
        if !preempted_any {
            self.schedule_waiting(&mut budget, &mut load, ev);
        }
        assert!(!self.batch.is_empty(), "engine with work scheduled nothing");
        self.stepping = true;
        self.steps += 1;
        load.requests = self.batch.len() as u32;
        Some(self.cfg.step_time.duration(&load))
    }

    /// Schedules the running requests in order, each its remaining tokens within the
    /// budget, preempting from the back of the list while the KV cache cannot hold the
    /// next one's new blocks (vLLM's `RUNNING` pass). Returns whether any was preempted.
    #[inline]
    fn schedule_running(&mut self, budget: &mut u32, load: &mut StepShape, ev: &mut StepEvents) -> bool {
        let mut preempted_any = false;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let s = self.running[i];
            let (remaining, held, computed) = {
                let sl = self.slot(s);
                (sl.num_tokens - sl.computed, sl.held, sl.computed)
            };
            debug_assert!(remaining > 0, "running request with nothing to compute");
            let n = remaining.min(*budget);
            // `blocks_for(computed + n) - held`, without a division when the held blocks
            // already cover the new tokens (every decode step but one per block).
            let end = computed + n;
            let need = if u64::from(end) <= u64::from(held) * u64::from(self.cfg.block_size_tokens) {
                0
            } else {
                self.blocks_for(end) - held
            };
            let mut scheduled = true;
            while need > self.kv.num_free() {
                let victim = self.running.pop().expect("running list empty while preempting");
                self.preempt(victim, ev);
                preempted_any = true;
                if victim == s {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            self.grow(s, need, n);
            let sl = self.slot_mut(s);
            sl.scheduled = n;
            if n == 1 && sl.generated > 0 && sl.computed + 1 == sl.num_tokens {
                load.decode_tokens += 1;
            } else {
                load.prefill_tokens += n;
            }
            load.context_tokens += u64::from(end);
            load.attention_pairs += pairs(computed, n);
            self.batch.push(s);
            *budget -= n;
            i += 1;
        }
        preempted_any
    }

    /// Admits waiting requests in arrival order while the budget, the sequence limit and
    /// the KV cache allow, each with its cached prefix (vLLM's `WAITING` pass); the head
    /// that does not fit blocks the rest.
    #[inline]
    fn schedule_waiting(&mut self, budget: &mut u32, load: &mut StepShape, ev: &mut StepEvents) {
        while *budget > 0 && (self.running.len() as u32) < self.cfg.max_num_seqs {
            let Some(&s) = self.waiting.front() else {
                break;
            };
            let (hit_blocks, evictable) = self.lookup_prefix(s);
            let bs = self.cfg.block_size_tokens;
            let num_tokens = self.slot(s).num_tokens;
            let computed = hit_blocks * bs;
            let n = (num_tokens - computed).min(*budget);
            let need = self.blocks_for(computed + n) - hit_blocks;
            let must_fit = if self.cfg.reserve_full_isl {
                self.blocks_for(num_tokens) - hit_blocks
            } else {
                need
            };
            if must_fit + evictable > self.kv.num_free() {
                break; // head-of-line blocking: do not look past the head
            }
            self.waiting.pop_front();
            // Take references on the cached prefix, then allocate the rest.
            self.kv.admit(s);
            {
                let sl = self.slot_mut(s);
                sl.held = hit_blocks;
                sl.hashed = hit_blocks;
                sl.computed = computed;
            }
            self.cache_stats.query_tokens += u64::from(num_tokens);
            self.cache_stats.hit_tokens += u64::from(computed);
            self.grow(s, need, n);
            let first = {
                let sl = self.slot_mut(s);
                sl.scheduled = n;
                let first = !sl.admitted_before;
                sl.admitted_before = true;
                first
            };
            if first {
                ev.admitted.push((self.slot(s).id, computed));
            }
            load.prefill_tokens += n;
            load.context_tokens += u64::from(computed + n);
            load.attention_pairs += pairs(computed, n);
            self.running.push(s);
            self.batch.push(s);
            *budget -= n;
        }
    }

    /// Applies the step's results at `now` (the step's end): tokens computed, tokens
    /// sampled, finished requests freed with their inter-token gaps; then publishes the
    /// gauges.
    pub fn finish_step(&mut self, now: SimTime, ev: &mut StepEvents) {
        assert!(self.stepping, "finish_step without a step");
        self.stepping = false;
        if self.stretch.active {
            self.stretch_finish(now.0);
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let mut any_finished = false;
        // Every running request was scheduled and sampled a token: the next step may
        // start a pure-decode stretch.
        let mut all_sampled = batch.len() == self.running.len();
        for &s in &batch {
            let sl = self.slots[s as usize].as_mut().expect("dangling slot");
            sl.computed += sl.scheduled;
            sl.scheduled = 0;
            debug_assert!(sl.computed <= sl.num_tokens);
            if sl.computed == sl.num_tokens {
                // Caught up: the step sampled one token.
                sl.generated += 1;
                self.sampled += 1;
                sl.num_tokens += 1;
                if sl.generated == 1 {
                    ev.first_tokens.push(sl.id);
                } else {
                    let gap_ns = now.0 - sl.last_token_ns;
                    match sl.itl_runs.last_mut() {
                        Some((g, n)) if *g == gap_ns => *n += 1,
                        _ => sl.itl_runs.push((gap_ns, 1)),
                    }
                }
                sl.last_token_ns = now.0;
                if self.report_tokens {
                    ev.sampled.push(sl.id);
                }
                if sl.generated == sl.output_tokens {
                    any_finished = true;
                }
            } else {
                all_sampled = false;
            }
        }
        self.decode_ready = self.coalesce && all_sampled;
        if any_finished {
            // Finished requests leave the running list (order of the rest kept) and free
            // their blocks, tail first.
            let mut done = std::mem::take(&mut self.done);
            let slots = &self.slots;
            self.running.retain(|&s| {
                let sl = slots[s as usize].as_ref().expect("dangling slot");
                let finished = sl.generated == sl.output_tokens;
                if finished {
                    done.push(s);
                }
                !finished
            });
            for s in done.drain(..) {
                let sl = self.slots[s as usize].take().expect("dangling slot");
                self.kv.release(s);
                ev.itl_runs.extend_from_slice(&sl.itl_runs);
                ev.finished.push(Finished {
                    id: sl.id,
                    preemptions: sl.preemptions,
                });
                self.free_slots.push(s);
            }
            self.done = done;
        }
        self.batch = batch;
        self.batch.clear();
        self.publish_gauges();
    }

    /// Sets the gauges at a step's end.
    #[inline]
    fn publish_gauges(&mut self) {
        self.gauges = super::Gauges {
            running: self.running.len() as u32,
            waiting: self.waiting.len() as u32,
            kv_used_blocks: self.kv.num_used(),
            kv_total_blocks: self.kv.capacity(),
        };
    }

    /// Longest cached prefix (in blocks) usable by the waiting request in slot `s`, and
    /// how many of those blocks are currently unreferenced; the KV cache keeps the hits
    /// for the admission (see [`KvCache::lookup`]).
    fn lookup_prefix(&mut self, s: u32) -> (u32, u32) {
        debug_assert_eq!(self.slot(s).computed, 0, "waiting requests hold no computed tokens");
        if !self.cfg.prefix_caching {
            self.kv.clear_hits();
            return (0, 0);
        }
        let bs = self.cfg.block_size_tokens;
        if self.slot(s).hashes.is_empty() {
            let total_full = (self.slot(s).content.total_tokens() / bs) as usize;
            let sl = self.slots[s as usize].as_mut().expect("dangling slot");
            block_hashes(&sl.content, bs, total_full, &mut sl.hashes);
            sl.n_hashes = sl.hashes.len() as u32;
        }
        let sl = self.slots[s as usize].as_ref().expect("dangling slot");
        let max_hit = (((sl.num_tokens - 1) / bs) as usize).min(sl.hashes.len());
        self.kv.lookup(sl.id, &sl.hashes[..max_hit])
    }

    /// Allocates `need` new blocks for slot `s` and caches every block that will be full
    /// once `n` more tokens are computed (vLLM caches at allocation time).
    #[inline]
    fn grow(&mut self, s: u32, need: u32, n: u32) {
        let sl = self.slots[s as usize].as_mut().expect("dangling slot");
        // Most decode steps need no block; `allocate_n(0)` would still read the free
        // queue's head to prefetch it, a likely cache miss per request per step.
        if need > 0 {
            self.kv.allocate(s, need);
            sl.held += need;
        }
        if !self.cfg.prefix_caching {
            return;
        }
        let bs = self.cfg.block_size_tokens;
        // Nothing to cache unless a further block fills up (checked without a division).
        if sl.hashed >= sl.n_hashes || u64::from(sl.computed + n) < (u64::from(sl.hashed) + 1) * u64::from(bs) {
            return;
        }
        let full = ((sl.computed + n) / bs).min(sl.n_hashes);
        self.kv.cache(s, &sl.hashes, sl.hashed as usize, full as usize);
        sl.hashed = full;
    }

    fn preempt(&mut self, s: u32, ev: &mut StepEvents) {
        // Freed last first, so the request's tail is evicted before its prefix.
        self.kv.release(s);
        let sl = self.slot_mut(s);
        sl.held = 0;
        sl.hashed = 0;
        sl.computed = 0;
        sl.preemptions += 1;
        ev.preempted.push(sl.id);
        self.preemptions += 1;
        self.waiting.push_front(s);
    }

    /// Checks the engine's invariants (running <= slots, KV accounting, queue membership).
    pub fn check(&self) -> Result<(), String> {
        if self.running.len() as u32 > self.cfg.max_num_seqs {
            return Err(format!(
                "{} running > max_num_seqs {}",
                self.running.len(),
                self.cfg.max_num_seqs
            ));
        }
        self.kv.check()?;
        for (i, sl) in self.slots.iter().enumerate() {
            let table = self.kv.held(i as u32);
            let held = sl.as_ref().map_or(0, |sl| sl.held);
            if held != table {
                return Err(format!("slot {i} counts {held} blocks but its block table has {table}"));
            }
        }
        let live = self.slots.iter().flatten().count();
        let queued = self.running.len() + self.waiting.len() + self.inbox.len();
        if live != queued {
            return Err(format!("{live} live requests but {queued} in running/waiting/inbox"));
        }
        for &s in &self.waiting {
            let sl = self.slot(s);
            if sl.held != 0 {
                return Err(format!("waiting request {} holds {} blocks", sl.id, sl.held));
            }
        }
        let deferred = self.deferred_tokens();
        for &s in &self.running {
            let sl = self.slot(s);
            if self.blocks_for(sl.computed + deferred) > sl.held {
                return Err(format!(
                    "request {} computed {} tokens with {} blocks",
                    sl.id,
                    sl.computed + deferred,
                    sl.held
                ));
            }
        }
        Ok(())
    }
}

/// Causal attention query-key pairs of `n` tokens scheduled after `computed`.
#[inline]
fn pairs(computed: u32, n: u32) -> u64 {
    let n = u64::from(n);
    n * u64::from(computed) + n * (n + 1) / 2
}

/// Engines and requests for the backends' tests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::VllmConfig;
    use crate::backend::perf::StepTimeModel;
    use crate::content::Content;

    /// An engine of `seqs` sequences, a `budget` of tokens per step and `blocks` KV blocks
    /// of 16 tokens, prefix caching on, the default step time.
    pub(crate) fn cfg(seqs: u32, budget: u32, blocks: u32) -> VllmConfig {
        VllmConfig {
            max_num_seqs: seqs,
            max_num_batched_tokens: budget,
            kv_blocks: blocks,
            block_size_tokens: 16,
            prefix_caching: true,
            step_time: StepTimeModel::default(),
            reserve_full_isl: false,
        }
    }

    /// A turn of `session`: `prompt` tokens, then `out`.
    pub(crate) fn req(session: u64, prompt: u32, out: u32) -> Content {
        Content::session_turn(None, session, prompt, out)
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::{cfg, req};
    use super::*;

    /// Runs steps until idle; returns (steps, finished order).
    fn drain(e: &mut VllmEngine) -> (u32, Vec<RequestId>) {
        let mut ev = StepEvents::default();
        let mut steps = 0;
        let mut done = Vec::new();
        while e.start_step(&mut ev).is_some() {
            e.finish_step(SimTime(0), &mut ev);
            e.check().unwrap();
            done.extend(ev.finished.iter().map(|f| f.id));
            ev.clear();
            steps += 1;
            assert!(steps < 100_000);
        }
        (steps, done)
    }

    #[test]
    fn per_step_fields_share_one_cache_line() {
        assert!(std::mem::offset_of!(Slot, admitted_before) < 64);
        assert_eq!(std::mem::align_of::<Option<Slot>>(), 64);
        assert_eq!(std::mem::size_of::<Option<Slot>>(), std::mem::size_of::<Slot>());
    }

    #[test]
    fn prefill_then_decode_steps() {
        // 100-token prompt, 5 output tokens, budget 64: prefill takes 2 steps (64 + 36, the
        // second samples token 1), then 4 decode steps.
        let mut e = VllmEngine::new(cfg(4, 64, 100));
        assert!(e.enqueue(RequestId(0), req(1, 100, 5)));
        let (steps, done) = drain(&mut e);
        assert_eq!(steps, 6);
        assert_eq!(done, vec![RequestId(0)]);
        assert_eq!(e.kv_used_blocks(), 0);
    }

    #[test]
    fn step_time_counts_prefill_and_decode_tokens() {
        let mut e = VllmEngine::new(cfg(4, 8192, 100));
        e.enqueue(RequestId(0), req(1, 100, 3));
        let mut ev = StepEvents::default();
        let d = e.start_step(&mut ev).unwrap();
        assert_eq!(d, StepTimeModel::default().step(100, 0));
        e.finish_step(SimTime(0), &mut ev);
        assert_eq!(ev.first_tokens, vec![RequestId(0)]);
        let d = e.start_step(&mut ev).unwrap();
        assert_eq!(d, StepTimeModel::default().step(0, 1));
    }

    #[test]
    fn max_num_seqs_bounds_running_and_gauges_lag_a_step() {
        let mut e = VllmEngine::new(cfg(2, 8192, 1000));
        for i in 0..3 {
            e.enqueue(RequestId(i), req(u64::from(i) + 10, 50, 10));
        }
        assert_eq!(
            (e.gauges().running, e.gauges().waiting),
            (0, 0),
            "gauges change only at step end"
        );
        assert_eq!((e.waiting(), e.pending()), (0, 3), "not seen by the scheduler yet");
        let mut ev = StepEvents::default();
        e.start_step(&mut ev).unwrap();
        assert_eq!((e.running(), e.waiting()), (2, 1));
        assert_eq!((e.gauges().running, e.gauges().waiting), (0, 0));
        e.finish_step(SimTime(0), &mut ev);
        assert_eq!((e.gauges().running, e.gauges().waiting), (2, 1));
        // An arrival during a step is not in the gauge published at that step's end.
        e.start_step(&mut ev).unwrap();
        e.enqueue(RequestId(9), req(99, 10, 2));
        e.finish_step(SimTime(0), &mut ev);
        assert_eq!((e.gauges().running, e.gauges().waiting), (2, 1));
        assert_eq!((e.waiting(), e.pending()), (1, 1));
    }

    #[test]
    fn head_of_line_blocking_on_kv() {
        // 10 blocks. Request A (100 tokens = 7 blocks) runs; B (100 tokens) cannot fit and
        // blocks C (10 tokens) behind it even though C would fit.
        let mut e = VllmEngine::new(cfg(8, 8192, 10));
        e.enqueue(RequestId(0), req(1, 100, 20));
        e.enqueue(RequestId(1), req(2, 100, 20));
        e.enqueue(RequestId(2), req(3, 10, 2));
        let mut ev = StepEvents::default();
        let mut admitted = Vec::new();
        while e.start_step(&mut ev).is_some() {
            admitted.extend(ev.admitted.iter().map(|a| a.0));
            if admitted.len() == 1 {
                assert_eq!((e.running(), e.waiting()), (1, 2), "C must wait behind B");
            }
            e.finish_step(SimTime(0), &mut ev);
            e.check().unwrap();
            ev.clear();
        }
        assert_eq!(
            admitted,
            vec![RequestId(0), RequestId(1), RequestId(2)],
            "strict FCFS admission"
        );
    }

    #[test]
    fn reserve_full_isl_admits_only_whole_prompts() {
        // 9 blocks of 16, budget 64. A (40 tokens, 3 blocks) takes 40 of the budget; B's
        // first chunk (24 of 100 tokens) needs 2 blocks and fits, its whole prompt needs
        // 7 of the 6 free: vLLM 0.19 (`full_sequence_must_fit`) leaves it waiting.
        for (reserve, admitted) in [(false, 2), (true, 1)] {
            let mut c = cfg(4, 64, 9);
            c.reserve_full_isl = reserve;
            let mut e = VllmEngine::new(c);
            e.enqueue(RequestId(0), req(1, 40, 5));
            e.enqueue(RequestId(1), req(2, 100, 5));
            let mut ev = StepEvents::default();
            e.start_step(&mut ev).unwrap();
            assert_eq!(ev.admitted.len(), admitted, "reserve_full_isl = {reserve}");
        }
    }

    #[test]
    fn decode_preempts_most_recent() {
        // 8 blocks of 16 = 128 tokens. A: 60 + 40 out, B: 60 + 40 out. Both admitted
        // (4 blocks each); when decodes need a 5th block, B (admitted last) is preempted.
        let mut e = VllmEngine::new(cfg(8, 8192, 8));
        e.enqueue(RequestId(0), req(1, 60, 40));
        e.enqueue(RequestId(1), req(2, 60, 40));
        let mut ev = StepEvents::default();
        let mut preempted = Vec::new();
        let mut done = Vec::new();
        while e.start_step(&mut ev).is_some() {
            e.finish_step(SimTime(0), &mut ev);
            e.check().unwrap();
            preempted.extend(ev.preempted.iter().copied());
            done.extend(ev.finished.iter().copied());
            ev.clear();
        }
        assert_eq!(preempted.first(), Some(&RequestId(1)));
        assert_eq!(
            done.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![RequestId(0), RequestId(1)]
        );
        assert!(done[1].preemptions >= 1);
        assert_eq!(e.preemptions(), preempted.len() as u64);
    }

    /// Runs steps until idle, step `k` (from 1) ending at `end_ns(k)`; returns the ITL
    /// runs of the finished requests by id, and each request's first and last token time.
    fn run_clocked(e: &mut VllmEngine, end_ns: impl Fn(u64) -> u64) -> Vec<(RequestId, Vec<(u64, u32)>)> {
        let mut ev = StepEvents::default();
        let mut k = 0;
        let mut out = Vec::new();
        while e.start_step(&mut ev).is_some() {
            k += 1;
            ev.clear();
            e.finish_step(SimTime(end_ns(k)), &mut ev);
            // One request finishes per step in these tests: its runs are all of them.
            for f in &ev.finished {
                out.push((f.id, ev.itl_runs.clone()));
            }
            assert!(ev.finished.len() <= 1);
        }
        out
    }

    #[test]
    fn itl_is_the_gap_between_consecutive_sampled_tokens() {
        // 16-token prompt, 4 output tokens: step 1 prefills and samples token 1 (its TTFT),
        // steps 2-4 decode. Steps end at 100, 250, 450, 700 ns: gaps 150, 200, 250.
        let mut e = VllmEngine::new(cfg(4, 8192, 100));
        e.enqueue(RequestId(0), req(1, 16, 4));
        let ends = [0, 100, 250, 450, 700];
        let got = run_clocked(&mut e, |k| ends[k as usize]);
        assert_eq!(got, vec![(RequestId(0), vec![(150, 1), (200, 1), (250, 1)])]);
        // Equal gaps share a run.
        let mut e = VllmEngine::new(cfg(4, 8192, 100));
        e.enqueue(RequestId(0), req(1, 16, 5));
        let got = run_clocked(&mut e, |k| 1000 * k);
        assert_eq!(got, vec![(RequestId(0), vec![(1000, 4)])]);
    }

    proptest::proptest! {
        /// One uninterrupted request: its gaps sum to last minus first token time, so its
        /// mean ITL is its TPOT, whatever the step times; p50 <= p90 <= p99.
        #[test]
        fn mean_itl_of_one_request_is_its_tpot(
            prompt in 1u32..300,
            out in 2u32..60,
            durs in proptest::collection::vec(1u64..5_000_000, 400),
        ) {
            let mut e = VllmEngine::new(cfg(4, 64, 1000));
            e.enqueue(RequestId(0), req(1, prompt, out));
            let ends: Vec<u64> = durs.iter().scan(0, |t, d| { *t += d; Some(*t) }).collect();
            let mut first = None;
            let mut ev = StepEvents::default();
            let mut k = 0;
            let mut runs = Vec::new();
            while e.start_step(&mut ev).is_some() {
                ev.clear();
                e.finish_step(SimTime(ends[k]), &mut ev);
                if !ev.first_tokens.is_empty() {
                    first = Some(ends[k]);
                }
                runs.extend(ev.itl_runs.iter().copied());
                k += 1;
            }
            let hist: std::collections::BTreeMap<u64, u64> = runs.iter().fold(Default::default(), |mut h, &(g, n)| {
                *h.entry(g).or_insert(0) += u64::from(n);
                h
            });
            let p = crate::metrics::weighted_percentiles(&hist);
            let tpot_s = crate::time::ns_to_secs(ends[k - 1] - first.unwrap()) / f64::from(out - 1);
            proptest::prop_assert_eq!(p.count, u64::from(out - 1));
            proptest::prop_assert!((p.mean - tpot_s).abs() <= 1e-6, "{} vs {}", p.mean, tpot_s);
            proptest::prop_assert!(p.p50 <= p.p90 && p.p90 <= p.p99);
        }
    }

    #[test]
    fn a_preempted_requests_gap_spans_the_preemption() {
        // As decode_preempts_most_recent: B (id 1) is preempted and recomputed. Steps end
        // every 1000 ns, so an uninterrupted gap is 1000 ns and B's longer gaps are the
        // steps it spent out of the batch; its gaps still sum to last - first token.
        let mut e = VllmEngine::new(cfg(8, 8192, 8));
        e.enqueue(RequestId(0), req(1, 60, 40));
        e.enqueue(RequestId(1), req(2, 60, 40));
        let got = run_clocked(&mut e, |k| 1000 * k);
        let (a, b) = (&got[0].1, &got[1].1);
        assert_eq!((got[0].0, got[1].0), (RequestId(0), RequestId(1)));
        assert_eq!(a, &vec![(1000, 39)], "A runs uninterrupted");
        assert_eq!(b.iter().map(|&(_, n)| n).sum::<u32>(), 39);
        assert!(b.iter().any(|&(g, _)| g > 1000), "{b:?}");
        // B's first token came in step 1 (t = 1000) and its last at the final step.
        let last_ns = 1000 * e.steps();
        assert_eq!(b.iter().map(|&(g, n)| g * u64::from(n)).sum::<u64>(), last_ns - 1000);
    }

    #[test]
    fn a_blocked_heads_lookup_is_rechecked_not_redone() {
        // 12 blocks. Turn 1 of session 1 (64 tokens) leaves 4 cached blocks. A (session
        // 2, 100 tokens, 7 blocks) runs; B, turn 2 of session 1 (100 tokens), hits the 4
        // cached blocks but needs 3 more plus the 4 it would take out of the free queue: 7
        // > 5 free, so it waits, and its lookup is rechecked at every step until A ends.
        let mut e = VllmEngine::new(cfg(8, 8192, 12));
        e.enqueue(RequestId(0), req(1, 64, 1));
        drain(&mut e);
        e.enqueue(RequestId(1), req(2, 100, 20));
        e.enqueue(RequestId(2), req(1, 100, 20));
        let mut ev = StepEvents::default();
        e.start_step(&mut ev).unwrap();
        assert_eq!((e.running(), e.waiting()), (1, 1));
        let head = *e.waiting.front().unwrap();
        // A recheck gives what a fresh lookup gives.
        let again = e.lookup_prefix(head);
        e.kv.clear_hits();
        assert_eq!(again, e.lookup_prefix(head));
        assert_eq!(again, (4, 4));
        e.finish_step(SimTime(0), &mut ev);
        // B is admitted with its 64 cached tokens once A has finished.
        let mut admitted = Vec::new();
        ev.clear();
        while e.start_step(&mut ev).is_some() {
            admitted.extend(ev.admitted.iter().copied());
            e.finish_step(SimTime(0), &mut ev);
            e.check().unwrap();
            ev.clear();
        }
        assert_eq!(admitted, vec![(RequestId(2), 64)]);
    }

    /// Feeds engines `a` and `b` the same requests (`(session, prompt, output, arrival
    /// group)`: sessions sharing prefixes) and checks that every step gives the same
    /// durations, events, gauges, KV events and cache counters, and that both stay
    /// consistent.
    fn assert_same_engines(
        mut a: VllmEngine,
        mut b: VllmEngine,
        reqs: Requests,
        blocks: u32,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        a.enable_kv_events();
        b.enable_kv_events();
        let mut pending = reqs.into_iter().enumerate().peekable();
        let (mut ea, mut eb) = (StepEvents::default(), StepEvents::default());
        let (mut ka, mut kb) = (Vec::new(), Vec::new());
        for step in 0..20_000u64 {
            // Up to `arrive` new requests before each step.
            while let Some((i, (session, prompt, out, _))) = pending.next_if(|(_, r)| r.3 as u64 <= step % 3) {
                let tokens = prompt.min(blocks * 16 - out - 1);
                let c = req(session, tokens, out);
                a.enqueue(RequestId(i as u32), c.clone());
                b.enqueue(RequestId(i as u32), c);
            }
            let (da, db) = (a.start_step(&mut ea), b.start_step(&mut eb));
            proptest::prop_assert_eq!(da, db);
            if da.is_none() {
                if pending.peek().is_none() {
                    break;
                }
                continue;
            }
            a.finish_step(SimTime(step), &mut ea);
            b.finish_step(SimTime(step), &mut eb);
            proptest::prop_assert_eq!(&ea.admitted, &eb.admitted);
            proptest::prop_assert_eq!(&ea.first_tokens, &eb.first_tokens);
            proptest::prop_assert_eq!(&ea.finished, &eb.finished);
            proptest::prop_assert_eq!(&ea.preempted, &eb.preempted);
            proptest::prop_assert_eq!(&ea.itl_runs, &eb.itl_runs);
            proptest::prop_assert_eq!(a.gauges(), b.gauges());
            proptest::prop_assert_eq!(a.cache_stats(), b.cache_stats());
            a.drain_kv_events(&mut ka);
            b.drain_kv_events(&mut kb);
            proptest::prop_assert_eq!(&ka, &kb);
            a.check().map_err(proptest::test_runner::TestCaseError::fail)?;
            b.check().map_err(proptest::test_runner::TestCaseError::fail)?;
            ea.clear();
            eb.clear();
        }
        proptest::prop_assert_eq!(a.steps(), b.steps());
        Ok(())
    }

    /// `(session, prompt, output, arrival group)` per request.
    type Requests = Vec<(u64, u32, u32, u32)>;

    /// Inputs for [`assert_same_engines`]: up to `max_requests` requests of 4 sessions, and
    /// small caches, budgets and running lists, as `(requests, blocks, budget, seqs)`.
    fn engine_inputs(max_requests: usize) -> impl proptest::strategy::Strategy<Value = (Requests, u32, u32, u32)> {
        (
            proptest::collection::vec((0u64..4, 1u32..400, 1u32..40, 0u32..3), 1..max_requests),
            30u32..80,
            16u32..600,
            1u32..6,
        )
    }

    proptest::proptest! {
        /// Rechecking repeated lookups changes nothing: two engines, one rechecking and one
        /// always looking up afresh, fed the same requests (sessions sharing prefixes, small
        /// pools, small budgets) behave the same.
        #[test]
        fn rechecked_lookups_change_nothing((reqs, blocks, budget, seqs) in engine_inputs(30)) {
            let a = VllmEngine::new(cfg(seqs, budget, blocks));
            let mut b = VllmEngine::new(cfg(seqs, budget, blocks));
            b.kv.disable_lookup_reuse();
            assert_same_engines(a, b, reqs, blocks)?;
        }

        /// The per-run KV cache behaves as the per-block one under the engine's own calls:
        /// chunked prefills, shared prefixes hit by concurrent requests (duplicates),
        /// preemptions and decode growth.
        #[test]
        fn run_pool_engine_matches_block_pool_engine((reqs, blocks, budget, seqs) in engine_inputs(40)) {
            let a = VllmEngine::new(cfg(seqs, budget, blocks));
            let b = VllmEngine::with_kv_runs(cfg(seqs, budget, blocks), true);
            assert_same_engines(a, b, reqs, blocks)?;
        }
    }

    #[test]
    fn prefix_cache_hit_is_capped_below_full_length() {
        let mut e = VllmEngine::new(cfg(4, 8192, 100));
        // Turn 1: 64-token prompt, 1 output token -> 4 full prompt blocks cached.
        e.enqueue(RequestId(0), req(5, 64, 1));
        drain(&mut e);
        // Same 64-token prompt again: hit capped at floor(63/16)*16 = 48 tokens.
        e.enqueue(RequestId(1), req(5, 64, 1));
        let mut ev = StepEvents::default();
        e.start_step(&mut ev).unwrap();
        assert_eq!(ev.admitted, vec![(RequestId(1), 48)]);
        e.finish_step(SimTime(0), &mut ev);
        drain(&mut e);
        // A longer later turn of the same session hits all 4 blocks.
        e.enqueue(RequestId(2), req(5, 100, 1));
        ev.clear();
        e.start_step(&mut ev).unwrap();
        assert_eq!(ev.admitted, vec![(RequestId(2), 64)]);
        assert_eq!(
            e.cache_stats(),
            PrefixCacheStats {
                query_tokens: 64 + 64 + 100,
                hit_tokens: 48 + 64
            }
        );
    }

    #[test]
    fn chunked_prefill_respects_budget() {
        let mut e = VllmEngine::new(cfg(4, 100, 1000));
        e.enqueue(RequestId(0), req(1, 250, 2));
        let mut ev = StepEvents::default();
        let m = StepTimeModel::default();
        assert_eq!(e.start_step(&mut ev), Some(m.step(100, 0)));
        e.finish_step(SimTime(0), &mut ev);
        assert!(ev.first_tokens.is_empty());
        assert_eq!(e.start_step(&mut ev), Some(m.step(100, 0)));
        e.finish_step(SimTime(0), &mut ev);
        assert_eq!(e.start_step(&mut ev), Some(m.step(50, 0)));
        e.finish_step(SimTime(0), &mut ev);
        assert_eq!(ev.first_tokens, vec![RequestId(0)]);
    }
}
