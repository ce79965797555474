//! One vLLM engine driven from outside the event loop: a caller (the HTTP emulator of
//! `sim serve`) submits requests, aborts them, and advances the engine to a simulated time
//! of its choosing; the engine steps exactly as in `sim run` ([`VllmEngine`], per step) and
//! reports what each step did, token by token.
//!
//! It is synchronous and owns no clock: the caller maps its clock to simulated time and
//! calls [`LiveEngine::advance`] with it, so the same calls give the same steps whatever
//! the wall clock did. Steps are scheduled as the simulation schedules them: a step starts
//! when the previous one ends or, on an idle engine, when a request arrives, and lasts the
//! profile's step time, times the product of the slowdowns active at its start.
//!
//! Owns: one engine and its step in progress. May not see: wall time, the router, the
//! metrics. Invariant: emissions come out in time order, each step's in the engine's
//! order (admissions, tokens, finishes).

use super::Gauges;
use super::vllm::{PrefixCacheStats, StepEvents, VllmConfig, VllmEngine};
use crate::content::Content;
use crate::ids::RequestId;
use crate::time::{SimDuration, SimTime};

/// What a step did to one request, at the step's start (admission, preemption) or end
/// (tokens, finish).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emission {
    /// First scheduled, with the prompt tokens served from the prefix cache.
    Admitted {
        /// The request.
        id: RequestId,
        /// When the step that admitted it started.
        at: SimTime,
        /// Prompt tokens found in the prefix cache.
        cached_tokens: u32,
    },
    /// Preempted (recompute): back to the front of the waiting queue.
    Preempted {
        /// The request.
        id: RequestId,
        /// When the step that preempted it started.
        at: SimTime,
    },
    /// One output token sampled.
    Token {
        /// The request.
        id: RequestId,
        /// The step's end.
        at: SimTime,
    },
    /// The scheduler's live state after a step boundary, an arrival or an abort (what
    /// `sim run`'s fleet tracker records).
    State {
        /// When.
        at: SimTime,
        /// Running requests.
        running: u32,
        /// Waiting requests.
        waiting: u32,
        /// KV blocks in use.
        kv_used_blocks: u32,
    },
    /// The last output token was sampled (its [`Emission::Token`] comes first).
    Finished {
        /// The request.
        id: RequestId,
        /// The step's end.
        at: SimTime,
        /// Times it was preempted.
        preemptions: u32,
    },
}

/// A slowdown window: steps that start in `[from, until)` take `factor` times longer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    /// Start (inclusive).
    pub from: SimTime,
    /// End (exclusive).
    pub until: SimTime,
    /// Step-time factor.
    pub factor: f64,
}

/// Counters a `/metrics` endpoint exports, cumulative since the engine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounters {
    /// Engine steps.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix-cache lookups and hits, in tokens.
    pub cache: PrefixCacheStats,
    /// Requests aborted while the engine held them.
    pub aborted: u64,
}

/// One engine, stepped to whatever simulated time the caller gives.
pub struct LiveEngine {
    engine: VllmEngine,
    /// The latest time the caller advanced to.
    now: SimTime,
    /// End of the step in progress, if one is.
    step_end: Option<SimTime>,
    slowdowns: Vec<Slowdown>,
    ev: StepEvents,
    /// Aborts asked for during a step, applied at its end.
    pending_aborts: Vec<RequestId>,
    out: Vec<Emission>,
    aborted: u64,
}

impl LiveEngine {
    /// An idle engine at time zero with an empty cache (kept per run: the fast pool, which
    /// behaves exactly as the per-block one).
    pub fn new(cfg: VllmConfig) -> LiveEngine {
        let mut engine = VllmEngine::with_kv_runs(cfg, true);
        engine.set_coalescing(false);
        engine.set_report_tokens(true);
        LiveEngine {
            engine,
            now: SimTime(0),
            step_end: None,
            slowdowns: Vec::new(),
            ev: StepEvents::default(),
            pending_aborts: Vec::new(),
            out: Vec::new(),
            aborted: 0,
        }
    }

    /// Records the prefix cache's block events from now on (`sim serve --kv-events`).
    pub fn enable_kv_events(&mut self) {
        self.engine.enable_kv_events();
    }

    /// Moves the block events recorded since the last call into `out`, in order.
    pub fn drain_kv_events(&mut self, out: &mut Vec<crate::view::KvEvent>) {
        self.engine.drain_kv_events(out);
    }

    /// Steps starting inside these windows take longer (a degraded GPU).
    pub fn set_slowdowns(&mut self, windows: Vec<Slowdown>) {
        self.slowdowns = windows;
    }

    /// The engine's configuration.
    pub fn config(&self) -> &VllmConfig {
        self.engine.config()
    }

    /// The latest time advanced to.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// When the step in progress ends (the next time anything happens), if one runs.
    pub fn next_event(&self) -> Option<SimTime> {
        self.step_end
    }

    /// Tokens the engine can hold for one request (vLLM's `max_model_len` cannot exceed
    /// the KV cache).
    pub fn max_request_tokens(&self) -> u32 {
        let c = self.engine.config();
        c.kv_blocks.saturating_mul(c.block_size_tokens)
    }

    /// Request `id` (unique over the engine's life) reaches the engine at `now`, which must
    /// not be before the latest advance; the engine advances to `now` first. Panics if
    /// the request needs more blocks than the cache has ([`Self::max_request_tokens`]:
    /// the caller refuses such a request, as vLLM does).
    pub fn submit(&mut self, now: SimTime, id: RequestId, content: Content) {
        self.advance(now);
        if self.engine.enqueue(id, content) {
            self.start_step(now);
        }
        self.note_state(now);
    }

    fn note_state(&mut self, at: SimTime) {
        self.out.push(Emission::State {
            at,
            running: self.engine.running(),
            waiting: self.engine.waiting(),
            kv_used_blocks: self.engine.kv_used_blocks(),
        });
    }

    /// Aborts request `id` at `now` (after advancing to it). Between steps it leaves the
    /// engine at once; during a step, at the step's end, unless that step finished it. The
    /// engine then reports nothing more for it.
    pub fn abort(&mut self, now: SimTime, id: RequestId) {
        self.advance(now);
        if self.step_end.is_some() {
            self.pending_aborts.push(id);
        } else if self.engine.abort(id) {
            self.aborted += 1;
            self.note_state(now);
        }
    }

    /// Runs every step that ends at or before `t`, in order.
    pub fn advance(&mut self, t: SimTime) {
        assert!(t >= self.now, "advanced backwards: {} after {}", t, self.now);
        while let Some(end) = self.step_end.filter(|&e| e <= t) {
            self.ev.clear();
            self.engine.finish_step(end, &mut self.ev);
            for &id in &self.ev.sampled {
                self.out.push(Emission::Token { id, at: end });
            }
            for f in &self.ev.finished {
                self.out.push(Emission::Finished {
                    id: f.id,
                    at: end,
                    preemptions: f.preemptions,
                });
            }
            self.step_end = None;
            for id in std::mem::take(&mut self.pending_aborts) {
                if self.engine.abort(id) {
                    self.aborted += 1;
                }
            }
            self.start_step(end);
            self.note_state(end);
        }
        self.now = t;
    }

    fn start_step(&mut self, at: SimTime) {
        debug_assert!(self.step_end.is_none());
        self.ev.clear();
        let Some(d) = self.engine.start_step(&mut self.ev) else {
            return;
        };
        let factor: f64 = self
            .slowdowns
            .iter()
            .filter(|w| w.from <= at && at < w.until)
            .map(|w| w.factor)
            .product();
        let d = if factor == 1.0 {
            d
        } else {
            SimDuration((d.0 as f64 * factor).round() as u64)
        };
        for &(id, cached_tokens) in &self.ev.admitted {
            self.out.push(Emission::Admitted { id, at, cached_tokens });
        }
        for &id in &self.ev.preempted {
            self.out.push(Emission::Preempted { id, at });
        }
        self.step_end = Some(at + d);
    }

    /// The time of an emission.
    pub fn at(e: &Emission) -> SimTime {
        match *e {
            Emission::Admitted { at, .. }
            | Emission::Preempted { at, .. }
            | Emission::Token { at, .. }
            | Emission::State { at, .. }
            | Emission::Finished { at, .. } => at,
        }
    }

    /// Moves the emissions since the last call into `out`, in order.
    pub fn drain(&mut self, out: &mut Vec<Emission>) {
        out.append(&mut self.out);
    }

    /// Live running requests.
    pub fn running(&self) -> u32 {
        self.engine.running()
    }

    /// Live waiting requests (the scheduler's queue).
    pub fn waiting(&self) -> u32 {
        self.engine.waiting()
    }

    /// The gauges as vLLM last published them (at the latest step end).
    pub fn gauges(&self) -> Gauges {
        self.engine.gauges()
    }

    /// KV blocks in use now.
    pub fn kv_used_blocks(&self) -> u32 {
        self.engine.kv_used_blocks()
    }

    /// Cumulative counters.
    pub fn counters(&self) -> LiveCounters {
        LiveCounters {
            steps: self.engine.steps(),
            preemptions: self.engine.preemptions(),
            cache: self.engine.cache_stats(),
            aborted: self.aborted,
        }
    }

    /// The engine's invariants.
    pub fn check(&self) -> Result<(), String> {
        self.engine.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vllm::StepEvents;
    use crate::backend::vllm::testkit::req;

    /// An engine of `seqs` sequences and `blocks` KV blocks, 8,192 tokens per step.
    fn cfg(seqs: u32, blocks: u32) -> VllmConfig {
        crate::backend::vllm::testkit::cfg(seqs, 8192, blocks)
    }

    /// The live engine steps as the simulation steps the same engine: same step ends, same
    /// first tokens and finishes, however the caller slices time.
    #[test]
    fn live_steps_equal_direct_steps_whatever_the_slicing() {
        let arrivals = [
            (0u64, 1u64, 300u32, 20u32),
            (1_000_000, 2, 50, 40),
            (3_000_000, 1, 400, 5),
        ];
        // Direct: the simulation's way (a step starts at an arrival on an idle engine, or
        // at the previous step's end).
        let mut e = VllmEngine::with_kv_runs(cfg(4, 200), true);
        let mut ev = StepEvents::default();
        let mut direct = Vec::new();
        let mut next = 0;
        let mut end: Option<SimTime> = None;
        loop {
            let arrival = arrivals.get(next).map(|a| SimTime(a.0));
            match (arrival, end) {
                (Some(a), e_end) if e_end.is_none_or(|x| a < x) => {
                    let (_, s, p, o) = arrivals[next];
                    let idle = e.enqueue(RequestId(next as u32), req(s, p, o));
                    next += 1;
                    if idle {
                        ev.clear();
                        end = e.start_step(&mut ev).map(|d| a + d);
                    }
                }
                (_, Some(x)) => {
                    ev.clear();
                    e.finish_step(x, &mut ev);
                    for f in &ev.finished {
                        direct.push((f.id, x));
                    }
                    ev.clear();
                    end = e.start_step(&mut ev).map(|d| x + d);
                }
                (None, None) => break,
                _ => unreachable!(),
            }
        }
        for slice in [1_000u64, 777_777, 10_000_000, 1_000_000_000] {
            let mut l = LiveEngine::new(cfg(4, 200));
            let mut got = Vec::new();
            let mut out = Vec::new();
            let mut now = 0u64;
            let mut next = 0;
            while next < arrivals.len() || l.next_event().is_some() {
                if let Some(&(a, s, p, o)) = arrivals.get(next)
                    && a <= now
                {
                    l.submit(SimTime(a.max(l.now().0)), RequestId(next as u32), req(s, p, o));
                    next += 1;
                    continue;
                }
                now += slice;
                let upto = arrivals.get(next).map_or(now, |a| now.min(a.0));
                l.advance(SimTime(upto));
                now = upto;
                l.check().unwrap();
            }
            l.drain(&mut out);
            for em in &out {
                if let Emission::Finished { id, at, .. } = *em {
                    got.push((id, at));
                }
            }
            assert_eq!(got, direct, "slice {slice}");
            let tokens = out.iter().filter(|e| matches!(e, Emission::Token { .. })).count();
            assert_eq!(tokens, 20 + 40 + 5);
        }
    }

    #[test]
    fn an_abort_frees_the_request_and_its_blocks() {
        let mut l = LiveEngine::new(cfg(1, 100));
        l.submit(SimTime(0), RequestId(0), req(1, 100, 50));
        l.submit(SimTime(0), RequestId(1), req(2, 100, 50));
        l.advance(SimTime(200_000_000));
        assert_eq!((l.running(), l.waiting()), (1, 1));
        assert!(l.kv_used_blocks() > 0);
        // The running one, mid step: applied at the step's end; the waiting one is then
        // admitted.
        l.abort(l.now(), RequestId(0));
        l.advance(SimTime(400_000_000));
        assert_eq!((l.running(), l.waiting()), (1, 0));
        let mut out = Vec::new();
        l.drain(&mut out);
        let last_of_0 = out
            .iter()
            .rposition(|e| matches!(e, Emission::Token { id: RequestId(0), .. }))
            .unwrap();
        assert!(out[last_of_0 + 1..].iter().all(|e| !matches!(
            e,
            Emission::Token { id: RequestId(0), .. } | Emission::Finished { id: RequestId(0), .. }
        )));
        assert!(
            !out.iter()
                .any(|e| matches!(e, Emission::Finished { id: RequestId(0), .. }))
        );
        l.abort(l.now(), RequestId(1));
        l.advance(SimTime(10_000_000_000));
        assert_eq!((l.running(), l.waiting(), l.kv_used_blocks()), (0, 0, 0));
        assert_eq!(l.counters().aborted, 2);
        assert_eq!(l.gauges().running, 0, "an abort republishes the gauges");
        l.check().unwrap();
        // Aborting what already finished does nothing.
        l.submit(l.now(), RequestId(2), req(3, 10, 2));
        l.advance(SimTime(20_000_000_000));
        l.abort(l.now(), RequestId(2));
        assert_eq!(l.counters().aborted, 2);
    }

    #[test]
    fn a_slowdown_stretches_the_steps_that_start_in_it() {
        let run = |factor: f64| {
            let mut l = LiveEngine::new(cfg(4, 100));
            l.set_slowdowns(vec![Slowdown {
                from: SimTime(0),
                until: SimTime(u64::MAX),
                factor,
            }]);
            l.submit(SimTime(0), RequestId(0), req(1, 100, 10));
            l.advance(SimTime(100_000_000_000));
            let mut out = Vec::new();
            l.drain(&mut out);
            // The last finish (state emissions may follow it).
            match out.iter().rev().find(|e| matches!(e, Emission::Finished { .. })) {
                Some(Emission::Finished { at, .. }) => at.0,
                _ => panic!("no finish in {out:?}"),
            }
        };
        let (a, b) = (run(1.0), run(2.0));
        assert!((b as f64 / a as f64 - 2.0).abs() < 1e-6, "{a} {b}");
    }
}
