//! Decode coalescing: a run of pure-decode steps (a *stretch*) whose per-request bookkeeping
//! is deferred, so that each step costs O(1) plus the block work due in it instead of
//! O(running).
//!
//! While every running request decodes one token per step and none can join or leave, a
//! step changes each request in the same way (one token computed, one sampled at the
//! step's end) and its duration is constant. What a step does to shared state is kept
//! exact and in order: the block pool's allocations and cache insertions (and so its
//! eviction order and KV events), the step counter and the published gauges. Only the
//! per-request counters (`computed`, `num_tokens`, `generated`, the last token's time and
//! the inter-token-gap runs) are deferred, and [`VllmEngine::settle`] applies them before
//! the first step that is not a pure decode. Nothing outside the engine reads those
//! counters, so every caller sees exactly what per-step stepping shows; the differential
//! test `tests/it/engine_modes.rs` holds the fast engine mode to the reference mode's bytes.
//!
//! A stretch step is taken only when, at its start:
//! * every running request decodes (one token to compute, at least one sampled), and all of
//!   them fit the token budget, so the batch is the running list and the duration is
//!   `step_time.step(0, running)`;
//! * no waiting request can be admitted (none waits, or the running list or the token
//!   budget is full), so the scheduler's waiting pass would not run;
//! * no request finishes in it (it ends before the first step that samples a request's
//!   last token);
//! * the blocks it may allocate (at most one per request whose block boundary falls in
//!   it) are free, so no request is preempted.
//!
//! Otherwise the engine settles and takes the per-step path for that step.
//!
//! # Ordering
//!
//! A stretch step is one queue event, scheduled by the previous step's handler and so
//! given the `seq` the reference mode gives it; the simulation handles it as any step
//! (gauge history, fleet tracker, KV-event feed, drains). An event at the same nanosecond
//! therefore runs before or after it exactly as in the reference mode: the stretch changes
//! what a step costs, never when it runs or what it shows. The simulation may also take a
//! stretch's certain steps ([`VllmEngine::stretch_horizon`]) without queue events, keyed
//! as the reference mode orders them (`sim::collapse`; docs/engine.md, "Collapsed
//! stretches").

use super::VllmEngine;
use crate::time::SimDuration;

/// A stretch is entered only if at least this many steps can run before a request
/// finishes: entering and settling each cost about one ordinary step.
const MIN_STRETCH_STEPS: u32 = 4;

/// [`VllmEngine::advance_stretch`] batches the block work of at least this many steps
/// (below, per-step work touches fewer requests than one pass over the running list).
const BATCH_MIN_STEPS: u32 = 8;

/// The state of a stretch of pure-decode steps (inactive between stretches).
#[derive(Debug, Default)]
pub(super) struct Stretch {
    pub(super) active: bool,
    /// Stretch steps finished so far; every running request is this many tokens ahead of
    /// its stored counters.
    pub(super) done: u32,
    /// The first step (1-based) in which a running request would sample its last token.
    finish_at: u32,
    /// End of the stretch's first and latest step, ns.
    first_end_ns: u64,
    last_end_ns: u64,
    /// Gaps between consecutive step ends, run-length encoded `(gap_ns, count)`.
    gaps: Vec<(u64, u32)>,
    /// `buckets[j % block_size]`: indices into the running list of the requests that may
    /// allocate or cache a block in step `j`, ascending (the scheduler's order).
    buckets: Vec<Vec<u32>>,
    /// `allocs[j % block_size]`: requests of the bucket that allocate a block in step `j`
    /// (each running request does once every `block_size` steps).
    allocs: Vec<u32>,
    /// Duration of every step of the stretch (before any slowdown the caller applies).
    step: SimDuration,
    /// Steps taken in stretches so far (a speed figure for `sim bench`, never an output).
    pub(super) coalesced: u64,
}

/// Appends one inter-token gap run, merging it with the last run when the gap is equal
/// (as `finish_step` does one token at a time).
#[inline]
fn push_gap(runs: &mut Vec<(u64, u32)>, gap_ns: u64, n: u32) {
    match runs.last_mut() {
        Some((g, c)) if *g == gap_ns => *c += n,
        _ => runs.push((gap_ns, n)),
    }
}

impl VllmEngine {
    /// Coalesces pure-decode steps from now on (the fast engine mode); off, every step
    /// takes the per-step path (the reference mode).
    pub fn set_coalescing(&mut self, on: bool) {
        assert!(!self.stretch.active, "coalescing switched during a stretch");
        assert!(!(on && self.report_tokens), "token reports need per-step stepping");
        self.coalesce = on;
    }

    /// True when no waiting request could be admitted by the next scheduling pass
    /// (`running` running requests, each scheduling one token).
    fn admission_closed(&self, running: u32) -> bool {
        self.waiting.is_empty() || running >= self.cfg.max_num_seqs || running >= self.cfg.max_num_batched_tokens
    }

    /// Starts a stretch if the engine is in pure decode (the last step scheduled every
    /// running request and sampled a token for each) and at least [`MIN_STRETCH_STEPS`]
    /// steps can run before a request finishes. Called with the inbox drained.
    pub(super) fn enter_stretch(&mut self) -> bool {
        let r = self.running.len() as u32;
        // A context term makes every decode step longer than the last: no constant stretch.
        if !self.coalesce
            || self.cfg.step_time.varies_with_context()
            || !self.decode_ready
            || r == 0
            || r > self.cfg.max_num_batched_tokens
            || !self.admission_closed(r)
        {
            return false;
        }
        let bs = u64::from(self.cfg.block_size_tokens);
        let caching = self.cfg.prefix_caching;
        let mut buckets = std::mem::take(&mut self.stretch.buckets);
        buckets.resize_with(bs as usize, Vec::new);
        buckets.iter_mut().for_each(Vec::clear);
        let mut allocs = std::mem::take(&mut self.stretch.allocs);
        allocs.clear();
        allocs.resize(bs as usize, 0);
        let mut finish_at = u32::MAX;
        let mut ok = true;
        for (idx, &s) in self.running.iter().enumerate() {
            let sl = self.slots[s as usize].as_ref().expect("dangling slot");
            if sl.num_tokens - sl.computed != 1 || sl.generated == 0 {
                ok = false;
                break;
            }
            finish_at = finish_at.min(sl.output_tokens - sl.generated);
            let c0 = u64::from(sl.computed);
            // Step `j` computes token `c0 + j`; it allocates when that token starts a
            // block past the held ones (first at `j = held * bs + 1 - c0`) and caches when
            // it completes the next block to register (first at `j = (hashed + 1) * bs - c0`);
            // both then recur every `bs` steps.
            let held_end = u64::from(sl.held) * bs;
            if held_end < c0 {
                ok = false;
                break;
            }
            let a = ((held_end + 1 - c0) % bs) as usize;
            buckets[a].push(idx as u32);
            allocs[a] += 1;
            if caching && sl.hashed < sl.n_hashes {
                let cache_end = (u64::from(sl.hashed) + 1) * bs;
                if cache_end <= c0 {
                    ok = false;
                    break;
                }
                let c = ((cache_end - c0) % bs) as usize;
                if c != a {
                    buckets[c].push(idx as u32);
                }
            }
        }
        self.stretch.buckets = buckets;
        self.stretch.allocs = allocs;
        if !ok || finish_at < MIN_STRETCH_STEPS {
            return false;
        }
        let st = &mut self.stretch;
        st.active = true;
        st.done = 0;
        st.finish_at = finish_at;
        st.gaps.clear();
        st.step = self.cfg.step_time.step(0, r);
        true
    }

    /// Starts the next step of the stretch, or settles and returns `None` when the step
    /// would not be a pure decode (the caller then takes the per-step path).
    pub(super) fn stretch_start(&mut self) -> Option<SimDuration> {
        let r = self.running.len() as u32;
        let j = self.stretch.done + 1;
        let b = (j % self.cfg.block_size_tokens) as usize;
        if j >= self.stretch.finish_at
            || !self.admission_closed(r)
            || self.stretch.buckets[b].len() as u32 > self.kv.num_free()
        {
            self.settle();
            return None;
        }
        self.stretch_block_work(j);
        self.stepping = true;
        self.steps += 1;
        self.stretch.coalesced += 1;
        Some(self.stretch.step)
    }

    /// The block work of stretch step `j`, in the scheduler's order; `grow` is a no-op
    /// for a request whose boundary does not fall in this step.
    #[inline]
    fn stretch_block_work(&mut self, j: u32) {
        let bs = self.cfg.block_size_tokens;
        let b = (j % bs) as usize;
        if self.stretch.buckets[b].is_empty() {
            return;
        }
        let bucket = std::mem::take(&mut self.stretch.buckets[b]);
        for &idx in &bucket {
            self.stretch_grow(self.running[idx as usize], j - 1);
        }
        self.stretch.buckets[b] = bucket;
    }

    /// `grow` of slot `s` in the stretch step that computes its token `computed + ahead`
    /// (its stored `computed` lags by the stretch's finished steps): the block that token
    /// starts, if it is past the held ones, and the block it fills.
    #[inline]
    fn stretch_grow(&mut self, s: u32, ahead: u32) {
        let bs = self.cfg.block_size_tokens;
        let sl = self.slots[s as usize].as_mut().expect("dangling slot");
        sl.computed += ahead;
        let held = sl.held;
        let end = sl.computed + 1;
        let need = if u64::from(end) <= u64::from(held) * u64::from(bs) {
            0
        } else {
            end.div_ceil(bs) - held
        };
        self.grow(s, need, 1);
        self.slots[s as usize].as_mut().expect("dangling slot").computed -= ahead;
    }

    /// With a stretch step running: `n` times, [`finish_step`](VllmEngine::finish_step)
    /// at the next end (the first at `first_end_ns`, then one step time apart) and
    /// [`start_step`](VllmEngine::start_step), for steps [`stretch_horizon`] certified
    /// (nothing has arrived since). The same state as those calls, without their
    /// per-step work: the inter-token gaps go in as one run, the gauges are published
    /// once (at the last end, before the last start's blocks, as the calls leave them),
    /// and the block work of all but the last start runs per request where that is
    /// certainly the same (`batch_block_work`), else step by step.
    ///
    /// [`stretch_horizon`]: VllmEngine::stretch_horizon
    pub fn advance_stretch(&mut self, n: u32, first_end_ns: u64) {
        if n == 0 {
            return;
        }
        assert!(
            self.stretch.active && self.stepping,
            "advance_stretch outside a stretch step"
        );
        let d = self.stretch.step.0;
        let st = &mut self.stretch;
        if st.done == 0 {
            st.first_end_ns = first_end_ns;
        } else {
            push_gap(&mut st.gaps, first_end_ns - st.last_end_ns, 1);
        }
        if n > 1 {
            push_gap(&mut st.gaps, d, n - 1);
        }
        st.last_end_ns = first_end_ns + u64::from(n - 1) * d;
        // The starts are steps `d0 + 2 ..= d0 + n + 1`: each is a stretch step (before the
        // first finish, admission closed, its bucket within the free blocks).
        let d0 = self.stretch.done;
        let last = d0 + n + 1;
        let bs = self.cfg.block_size_tokens;
        assert!(
            last < self.stretch.finish_at && self.admission_closed(self.running.len() as u32),
            "an advanced step was not a certain stretch step"
        );
        let mut free = self.kv.num_free();
        for j in d0 + 2..=last {
            let b = (j % bs) as usize;
            assert!(
                self.stretch.buckets[b].len() as u32 <= free,
                "an advanced step was not a certain stretch step"
            );
            free -= self.stretch.allocs[b];
        }
        if n < BATCH_MIN_STEPS || !self.batch_block_work(d0 + n) {
            for j in d0 + 2..last {
                self.stretch_block_work(j);
            }
        }
        self.stretch.done = d0 + n;
        self.publish_gauges();
        self.stretch_block_work(last);
        self.steps += u64::from(n);
        self.stretch.coalesced += u64::from(n);
    }

    /// The block work of the stretch's steps up to `j` (those after the last one done),
    /// request by request instead of step by step: each allocates the blocks it reaches
    /// by then and caches the blocks it fills. The same state as step by step when every
    /// block cached extends the request's own run with a hash the index does not hold
    /// ([`KvCache::extends_own_run`]): then no operation of one request reads what
    /// another's changes (an allocation only evicts unreferenced blocks and removes index
    /// entries, and none of these hashes is or becomes one), so the order does not
    /// matter. Otherwise nothing is done and false returned.
    ///
    /// [`KvCache::extends_own_run`]: crate::backend::kv::KvCache::extends_own_run
    fn batch_block_work(&mut self, j: u32) -> bool {
        let bs = self.cfg.block_size_tokens;
        if self.cfg.prefix_caching {
            for &s in &self.running {
                let sl = self.slots[s as usize].as_ref().expect("dangling slot");
                let full = ((sl.computed + j) / bs).min(sl.n_hashes);
                if full > sl.hashed
                    && !self
                        .kv
                        .extends_own_run(s, &sl.hashes[sl.hashed as usize..full as usize])
                {
                    return false;
                }
            }
        }
        // Growing to step `j` at once: `grow` allocates up to the block its token starts and
        // caches every block filled by then.
        for i in 0..self.running.len() {
            self.stretch_grow(self.running[i], j - 1);
        }
        true
    }

    /// Ends a stretch step at `now_ns`: one token sampled for every running request
    /// (deferred), gauges published.
    pub(super) fn stretch_finish(&mut self, now_ns: u64) {
        let st = &mut self.stretch;
        st.done += 1;
        if st.done == 1 {
            st.first_end_ns = now_ns;
        } else {
            push_gap(&mut st.gaps, now_ns - st.last_end_ns, 1);
        }
        st.last_end_ns = now_ns;
        self.publish_gauges();
    }

    /// Applies the stretch's deferred per-request counters and ends it (between steps).
    pub(super) fn settle(&mut self) {
        assert!(!self.stepping, "settle during a step");
        let st = &mut self.stretch;
        st.active = false;
        let m = std::mem::take(&mut st.done);
        if m == 0 {
            return;
        }
        self.sampled += u64::from(m) * self.running.len() as u64;
        for &s in &self.running {
            let sl = self.slots[s as usize].as_mut().expect("dangling slot");
            sl.computed += m;
            sl.num_tokens += m;
            sl.generated += m;
            push_gap(&mut sl.itl_runs, st.first_end_ns - sl.last_token_ns, 1);
            for &(g, n) in &st.gaps {
                push_gap(&mut sl.itl_runs, g, n);
            }
            sl.last_token_ns = st.last_end_ns;
        }
    }

    /// With a stretch step in progress, how many further steps are certainly stretch steps
    /// if nothing arrives (zero outside a stretch step): each is before the first finish, and its bucket fits the free
    /// blocks, which fall by the allocating requests of every bucket passed (caching
    /// allocates nothing). Admission stays closed without arrivals, and the step time
    /// is constant. Capped at 100,000 steps.
    pub fn stretch_horizon(&self) -> u32 {
        if !self.stretch.active || !self.stepping {
            return 0;
        }
        let bs = self.cfg.block_size_tokens;
        let mut free = self.kv.num_free();
        let j0 = self.stretch.done + 1;
        let mut n = 0;
        let mut j = j0 + 1;
        while j < self.stretch.finish_at && n < 100_000 {
            let b = (j % bs) as usize;
            if self.stretch.buckets[b].len() as u32 > free {
                break;
            }
            free -= self.stretch.allocs[b];
            n += 1;
            j += 1;
        }
        n
    }

    /// Engine iterations taken in pure-decode stretches (zero without coalescing).
    pub fn coalesced_steps(&self) -> u64 {
        self.stretch.coalesced
    }

    /// Tokens every running request has computed beyond its stored `computed` (the
    /// stretch's finished steps; zero outside a stretch).
    pub(super) fn deferred_tokens(&self) -> u32 {
        if self.stretch.active { self.stretch.done } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{StepEvents, VllmConfig, VllmEngine};
    use crate::backend::perf::StepTimeModel;
    use crate::content::Content;
    use crate::ids::RequestId;
    use crate::time::SimTime;
    use proptest::prelude::*;

    /// Everything a step shows to its caller, KV events included.
    fn seen(e: &mut VllmEngine, ev: &StepEvents) -> String {
        let mut kv = Vec::new();
        e.drain_kv_events(&mut kv);
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} used={} steps={} run={} wait={} sampled={} {kv:?}",
            ev.admitted,
            ev.first_tokens,
            ev.finished,
            ev.preempted,
            ev.itl_runs,
            e.gauges(),
            e.kv_used_blocks(),
            e.steps(),
            e.running(),
            e.waiting(),
            e.tokens_sampled(),
        )
    }

    fn config(seqs: u32, budget: u32, kv_blocks: u32, block: u32, caching: bool) -> VllmConfig {
        VllmConfig {
            max_num_seqs: seqs,
            max_num_batched_tokens: budget,
            kv_blocks,
            block_size_tokens: block,
            prefix_caching: caching,
            step_time: StepTimeModel::default(),
            reserve_full_isl: false,
        }
    }

    /// Enqueues the arrivals `(step, session, prompt, output)` due by `step` from `next`
    /// on, in both engines (each turn cut to the cache's `max_tokens`); returns the next.
    fn enqueue_due(
        a: &mut VllmEngine,
        b: &mut VllmEngine,
        arrivals: &[(u32, u64, u32, u32)],
        mut next: usize,
        step: u32,
        max_tokens: u32,
    ) -> Result<usize, TestCaseError> {
        while next < arrivals.len() && arrivals[next].0 <= step {
            let (_, session, prompt, out) = arrivals[next];
            let tokens = (prompt + out).min(max_tokens);
            let prompt = prompt.min(tokens - 1).max(1);
            let c = Content::session_turn(None, session, prompt, tokens - prompt);
            let id = RequestId(next as u32);
            prop_assert_eq!(a.enqueue(id, c.clone()), b.enqueue(id, c));
            next += 1;
        }
        Ok(next)
    }

    proptest! {
        /// A coalescing engine and a per-step one, driven through the same arrivals and
        /// step end times (all different, so a misplaced gap shows), report exactly the
        /// same thing after every step: admissions, first tokens, finishes, preemptions,
        /// inter-token-gap runs to the nanosecond, gauges, step counts and KV events.
        #[test]
        fn coalescing_is_invisible_step_by_step(
            seqs in 1u32..8,
            budget in 4u32..200,
            kv_blocks in 16u32..80,
            block in prop::sample::select(vec![1u32, 4, 16]),
            caching in any::<bool>(),
            arrivals in prop::collection::vec((0u32..300, 0u64..4, 1u32..120, 1u32..150), 1..12),
            durs in prop::collection::vec(1u64..3_000, 64),
        ) {
            let cfg = config(seqs, budget, kv_blocks, block, caching);
            let mut fast = VllmEngine::new(cfg.clone());
            fast.set_coalescing(true);
            let mut slow = VllmEngine::new(cfg);
            for e in [&mut fast, &mut slow] {
                e.enable_kv_events();
            }
            let mut arrivals = arrivals;
            arrivals.sort_by_key(|a| a.0);
            let (mut ev_f, mut ev_s) = (StepEvents::default(), StepEvents::default());
            let mut now = 0u64;
            let mut next = 0;
            for step in 0..4_000u32 {
                next = enqueue_due(&mut fast, &mut slow, &arrivals, next, step, kv_blocks * block)?;
                ev_f.clear();
                ev_s.clear();
                let (df, ds) = (fast.start_step(&mut ev_f), slow.start_step(&mut ev_s));
                prop_assert_eq!(df, ds);
                prop_assert_eq!(seen(&mut fast, &ev_f), seen(&mut slow, &ev_s));
                if df.is_none() {
                    if next == arrivals.len() {
                        break;
                    }
                    continue;
                }
                fast.check().map_err(TestCaseError::fail)?;
                now += durs[step as usize % durs.len()];
                ev_f.clear();
                ev_s.clear();
                fast.finish_step(SimTime(now), &mut ev_f);
                slow.finish_step(SimTime(now), &mut ev_s);
                prop_assert_eq!(seen(&mut fast, &ev_f), seen(&mut slow, &ev_s), "step {}", step);
                fast.check().map_err(TestCaseError::fail)?;
            }
            prop_assert_eq!(fast.running() + fast.waiting(), 0, "not drained");
        }
    }

    proptest! {
        /// `advance_stretch(k)` leaves an engine exactly as `k` single steps do: two
        /// run-kept, coalescing engines get the same arrivals; at each stretch step with a
        /// horizon one of them advances up to that many steps at once, the other steps one
        /// at a time, and everything they show is compared. Sessions repeat (the same
        /// content arrives twice), so some requests duplicate blocks another one cached
        /// and the per-request batch must be refused, and small caches evict as they go.
        #[test]
        fn advancing_equals_stepping(
            seqs in 1u32..8,
            kv_blocks in 24u32..120,
            block in prop::sample::select(vec![1u32, 4, 16]),
            caching in any::<bool>(),
            arrivals in prop::collection::vec((0u32..400, 0u64..3, 1u32..100, 8u32..200), 1..10),
            take in prop::collection::vec(1u32..300, 16),
        ) {
            let cfg = config(seqs, 2048, kv_blocks, block, caching);
            let (mut fast, mut slow) = (VllmEngine::with_kv_runs(cfg.clone(), true), VllmEngine::with_kv_runs(cfg, true));
            fast.set_coalescing(true);
            slow.set_coalescing(true);
            let mut arrivals = arrivals;
            arrivals.sort_by_key(|a| a.0);
            let (mut ev_f, mut ev_s) = (StepEvents::default(), StepEvents::default());
            let (mut now, mut next, mut step) = (0u64, 0, 0u32);
            while step < 6_000 {
                next = enqueue_due(&mut fast, &mut slow, &arrivals, next, step, kv_blocks * block)?;
                ev_f.clear();
                ev_s.clear();
                let (df, ds) = (fast.start_step(&mut ev_f), slow.start_step(&mut ev_s));
                prop_assert_eq!(df, ds);
                if df.is_none() {
                    if next == arrivals.len() {
                        break;
                    }
                    step += 1;
                    continue;
                }
                // Steps end one step time apart (no slowdown), as in the simulation.
                let d = df.expect("checked").0;
                // Until the next arrival, the certain steps may be advanced at once.
                let until_arrival = arrivals.get(next).map_or(u32::MAX, |a| a.0.saturating_sub(step + 1));
                let k = fast.stretch_horizon().min(take[step as usize % take.len()]).min(until_arrival);
                if k > 0 {
                    fast.advance_stretch(k, now + d);
                    for _ in 0..k {
                        now += d;
                        ev_s.clear();
                        slow.finish_step(SimTime(now), &mut ev_s);
                        prop_assert!(ev_s.first_tokens.is_empty() && ev_s.finished.is_empty());
                        ev_s.clear();
                        prop_assert_eq!(slow.start_step(&mut ev_s), df);
                    }
                    step += k;
                    prop_assert_eq!(seen(&mut fast, &ev_f), seen(&mut slow, &ev_s), "after advancing {} at step {}", k, step);
                    fast.check().map_err(TestCaseError::fail)?;
                }
                now += d;
                ev_f.clear();
                ev_s.clear();
                fast.finish_step(SimTime(now), &mut ev_f);
                slow.finish_step(SimTime(now), &mut ev_s);
                prop_assert_eq!(seen(&mut fast, &ev_f), seen(&mut slow, &ev_s), "step {}", step);
                fast.check().map_err(TestCaseError::fail)?;
                step += 1;
            }
            prop_assert_eq!(fast.running() + fast.waiting(), 0, "not drained");
        }
    }

    #[test]
    fn a_long_decode_is_coalesced() {
        let mut e = VllmEngine::new(config(4, 512, 100, 16, true));
        e.set_coalescing(true);
        e.enqueue(RequestId(0), Content::session_turn(None, 1, 40, 100));
        let mut ev = StepEvents::default();
        let mut t = 0;
        while e.start_step(&mut ev).is_some() {
            t += 1000;
            e.finish_step(SimTime(t), &mut ev);
            ev.clear();
        }
        // One prefill step (per step; it samples the first token), then 99 decode steps,
        // all coalesced but the last (a request finishes in it).
        assert_eq!(e.steps(), 100);
        assert_eq!(e.coalesced_steps(), 98);
    }
}
