//! One engine replaying measured requests: what `sim calibrate` and `sim validate` run.
//!
//! A measurement of a real vLLM engine gives each request's arrival at the engine and its
//! prompt and output lengths. [`replay`] sends them to one [`VllmEngine`] at those times
//! (open loop), or, when the client capped its concurrency (`vllm bench serve
//! --max-concurrency`), when a request both has arrived and a client slot is free, and
//! records what the real engine's logs and `/metrics` would show: each request's admission,
//! first and last token, and per interval the prompt and generation tokens (counted as
//! vLLM's stat loggers count them: a request's whole prompt when its first token is
//! sampled, every sampled token) and the running, waiting and KV gauges.
//!
//! No router, no network: the engine alone, so a step-time model can be judged on the
//! engine's own series. Deterministic: the same inputs give the same steps.
//!
//! Bounded: the series is binned as the steps end (memory follows the samples kept, not
//! the steps run), and keeps at most [`MAX_SAMPLES`] intervals; a replay that runs past
//! them says so ([`Replay::past_grid`]). Readers hold measurements to [`MAX_SPAN`] and
//! intervals to at least [`MIN_INTERVAL`], so a measured series fits the same grid.

use std::collections::VecDeque;

use super::perf::StepShape;
use super::vllm::{StepEvents, VllmConfig, VllmEngine};
use crate::content::{Content, source_id};
use crate::ids::RequestId;
use crate::time::{NS_PER_S, SimDuration, SimTime};

/// The longest measurement replayed (7 days of simulated time): far beyond any benchmark,
/// and short enough that its series fits [`MAX_SAMPLES`] at a 1 s interval.
pub const MAX_SPAN: SimDuration = SimDuration(7 * 86_400 * NS_PER_S);

/// The most series intervals a replay keeps (1,000,000, 40 MB of samples): a measured
/// series' span over its interval may not exceed it either.
pub const MAX_SAMPLES: u64 = 1_000_000;

/// The shortest series interval (1 ms): vLLM publishes its gauges once per engine step.
pub const MIN_INTERVAL: SimDuration = SimDuration(1_000_000);

/// One request to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayRequest {
    /// When the client issues it (relative to the replay's start).
    pub arrival: SimTime,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens (pinned, as `min_tokens = max_tokens` with `ignore_eos` measure).
    pub output_tokens: u32,
}

/// How requests are spread over the engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// vLLM's data-parallel balancer (`DPLBAsyncMPClient.get_core_engine_for_request` in
    /// `vllm/v1/engine/core_client.py`): the engine with the lowest `4 x waiting +
    /// running`, the first on a tie. vLLM reads the counts its coordinator publishes every
    /// 100 ms plus its own dispatches since; the replay reads them live.
    LeastLoaded,
    /// Uniformly at random (a Kubernetes Service's proxy picks a replica per connection),
    /// from the named stream `replay-dispatch` of this seed.
    Random {
        /// Master seed.
        seed: u64,
    },
}

/// How the client sends and what serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// At most this many requests in flight (`--max-concurrency`); `None`: open loop.
    pub max_concurrency: Option<u32>,
    /// Width of one series interval (the measured series' tick).
    pub interval: SimDuration,
    /// Engines of one configuration serving the requests (1: one engine).
    pub engines: u32,
    /// How a request is given an engine (read only with more than one).
    pub dispatch: Dispatch,
    /// The engines step together, each step as long as the slowest engine's, an engine
    /// with nothing to do running a one-token dummy step: vLLM's data-parallel ranks of a
    /// mixture-of-experts model, which meet in every MoE layer's collectives.
    pub lockstep: bool,
    /// The same prompts ran on these engines just before (a load sweep repeating its
    /// prompts on one server): every prompt is first served once, one output token each,
    /// and the measured requests start when that is done, with the prefix cache it left.
    pub warm_prefix: bool,
}

impl ReplayOptions {
    /// One engine, open loop or capped, at `interval`.
    pub fn single(max_concurrency: Option<u32>, interval: SimDuration) -> ReplayOptions {
        ReplayOptions {
            max_concurrency,
            interval,
            engines: 1,
            dispatch: Dispatch::LeastLoaded,
            lockstep: false,
            warm_prefix: false,
        }
    }
}

/// What happened to one request (in the input's order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayedRequest {
    /// Reached the engine's queue.
    pub queued: SimTime,
    /// First scheduled.
    pub scheduled: SimTime,
    /// First output token sampled.
    pub first_token: SimTime,
    /// Last output token sampled.
    pub last_token: SimTime,
    /// Times preempted.
    pub preemptions: u32,
    /// The engine that served it.
    pub engine: u32,
}

/// One interval `(t - interval, t]` of the engines' series (summed over engines).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// The interval's end.
    pub t: SimTime,
    /// Prompt tokens of the requests whose first token was sampled in the interval.
    pub prompt_tokens: u64,
    /// Output tokens sampled in the interval.
    pub generation_tokens: u64,
    /// `num_requests_running` at `t` (as last published, at a step's end).
    pub running: u32,
    /// `num_requests_waiting` at `t`.
    pub waiting: u32,
    /// KV blocks in use at `t`.
    pub kv_used_blocks: u32,
}

/// A finished replay.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replay {
    /// Per request, in the input's order.
    pub requests: Vec<ReplayedRequest>,
    /// The series, one sample per interval from the first interval's end until every
    /// request finished.
    pub samples: Vec<Sample>,
    /// Engine steps run (summed over engines).
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// The engine ran past the last of the [`MAX_SAMPLES`] intervals: `samples` end there,
    /// the later steps are not in them.
    pub past_grid: bool,
}

/// Step ends with the prompt tokens counted and tokens sampled in them, and the gauges.
type Point = (SimTime, u64, u64, u32, u32, u32);

/// The engines and the client, as the replay runs them.
struct State<'a> {
    requests: &'a [ReplayRequest],
    /// Added to every arrival (after a warm-up pass).
    offset: SimTime,
    engines: Vec<VllmEngine>,
    events: Vec<StepEvents>,
    /// When each engine's step in progress ends (independent engines).
    ends: Vec<Option<SimTime>>,
    out: Vec<ReplayedRequest>,
    held: VecDeque<usize>,
    in_flight: u32,
    limit: u32,
    dispatch: Dispatch,
    rng: Option<crate::rng::SimRng>,
    /// The series, binned as the steps end.
    grid: Grid,
    sampled_before: u64,
    /// A one-token step's duration: what an idle lockstep rank runs.
    dummy: SimDuration,
}

impl State<'_> {
    /// The engine the next request goes to.
    fn pick(&mut self) -> usize {
        if self.engines.len() == 1 {
            return 0;
        }
        match self.dispatch {
            Dispatch::LeastLoaded => (0..self.engines.len())
                .min_by_key(|&k| {
                    let e = &self.engines[k];
                    (4 * u64::from(e.waiting() + e.pending()) + u64::from(e.running()), k)
                })
                .unwrap_or(0),
            Dispatch::Random { .. } => {
                use rand::RngExt;
                let n = self.engines.len();
                self.rng.as_mut().map_or(0, |r| r.random_range(0..n))
            }
        }
    }

    /// Sends request `i` at `now`; returns its engine and whether that engine was idle.
    fn send(&mut self, i: usize, now: SimTime) -> (usize, bool) {
        let k = self.pick();
        let r = self.requests[i];
        self.out[i].queued = now;
        self.out[i].engine = k as u32;
        let content = Content::session_turn(
            None,
            source_id("replay", "", i as u64),
            r.prompt_tokens,
            r.output_tokens,
        );
        (k, self.engines[k].enqueue(RequestId(i as u32), content))
    }

    /// Starts engine `k`'s next step at `now`; records first admissions.
    fn start(&mut self, k: usize, now: SimTime) -> Option<SimDuration> {
        let ev = &mut self.events[k];
        let d = self.engines[k].start_step(ev)?;
        for &(id, _) in &ev.admitted {
            self.out[id.0 as usize].scheduled = now;
        }
        ev.admitted.clear();
        ev.preempted.clear();
        Some(d)
    }

    /// Finishes engine `k`'s step at `now`: first and last tokens, freed client slots.
    /// Returns the prompt tokens counted.
    fn finish(&mut self, k: usize, now: SimTime) -> u64 {
        let ev = &mut self.events[k];
        self.engines[k].finish_step(now, ev);
        let mut prompt = 0u64;
        for id in &ev.first_tokens {
            let i = id.0 as usize;
            self.out[i].first_token = now;
            prompt += u64::from(self.requests[i].prompt_tokens);
        }
        for f in &ev.finished {
            let i = f.id.0 as usize;
            self.out[i].last_token = now;
            self.out[i].preemptions = f.preemptions;
            self.in_flight -= 1;
        }
        ev.clear();
        prompt
    }

    /// Records a series point at `now` with `prompt` tokens counted.
    fn record(&mut self, now: SimTime, prompt: u64) {
        let sampled: u64 = self.engines.iter().map(VllmEngine::tokens_sampled).sum();
        let (mut running, mut waiting, mut kv) = (0u32, 0u32, 0u32);
        for e in &self.engines {
            let g = e.gauges();
            running += g.running;
            waiting += g.waiting;
            kv += g.kv_used_blocks;
        }
        // Step ends of the measured pass come after its offset (the warm-up is done).
        let t = SimTime(now.0 - self.offset.0);
        self.grid
            .add((t, prompt, sampled - self.sampled_before, running, waiting, kv));
        self.sampled_before = sampled;
    }

    /// Sends held requests while client slots are free; returns the engines that were idle.
    fn release(&mut self, now: SimTime) -> Vec<usize> {
        let mut idle = Vec::new();
        while self.in_flight < self.limit
            && let Some(i) = self.held.pop_front()
        {
            self.in_flight += 1;
            let (k, was_idle) = self.send(i, now);
            if was_idle {
                idle.push(k);
            }
        }
        idle
    }

    /// Starts a lockstep step of every engine at `now`: its end, or `None` when no engine
    /// has work.
    fn start_all(&mut self, now: SimTime) -> Option<SimTime> {
        let mut longest: Option<SimDuration> = None;
        let mut stepped = vec![false; self.engines.len()];
        for (k, s) in stepped.iter_mut().enumerate() {
            if let Some(d) = self.start(k, now) {
                *s = true;
                longest = Some(longest.map_or(d, |l| SimDuration(l.0.max(d.0))));
            }
        }
        let d = longest?;
        let d = if stepped.iter().all(|&s| s) {
            d
        } else {
            SimDuration(d.0.max(self.dummy.0))
        };
        for (k, s) in stepped.into_iter().enumerate() {
            self.ends[k] = s.then_some(SimTime(now.0 + d.0));
        }
        Some(SimTime(now.0 + d.0))
    }
}

/// Replays `requests` (sorted by arrival) through `opts.engines` engines configured by
/// `cfg`.
///
/// Panics if a request is larger than the KV cache or the input is not sorted: callers
/// validate measurements first.
pub fn replay(cfg: &VllmConfig, requests: &[ReplayRequest], opts: &ReplayOptions) -> Replay {
    assert!(
        requests.windows(2).all(|w| w[0].arrival <= w[1].arrival),
        "replayed requests must be sorted by arrival"
    );
    assert!(opts.interval.0 > 0, "a replay interval must be positive");
    let n = opts.engines.max(1) as usize;
    let warm: Vec<ReplayRequest> = if opts.warm_prefix {
        requests
            .iter()
            .map(|r| ReplayRequest {
                arrival: SimTime(0),
                prompt_tokens: r.prompt_tokens,
                output_tokens: 1,
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut st = State {
        requests: if opts.warm_prefix { &warm } else { requests },
        offset: SimTime(0),
        engines: (0..n).map(|_| VllmEngine::new(cfg.clone())).collect(),
        events: (0..n).map(|_| StepEvents::default()).collect(),
        ends: vec![None; n],
        out: vec![ReplayedRequest::default(); requests.len()],
        held: VecDeque::new(),
        in_flight: 0,
        limit: opts.max_concurrency.unwrap_or(u32::MAX).max(1),
        dispatch: opts.dispatch,
        rng: match opts.dispatch {
            Dispatch::Random { seed } => Some(crate::rng::stream(seed, "replay-dispatch", 0)),
            Dispatch::LeastLoaded => None,
        },
        grid: Grid::new(opts.interval),
        sampled_before: 0,
        dummy: cfg.step_time.duration(&StepShape {
            decode_tokens: 1,
            context_tokens: 1,
            attention_pairs: 1,
            requests: 1,
            ..StepShape::default()
        }),
    };
    let run = |st: &mut State| {
        if opts.lockstep && n > 1 {
            run_lockstep(st);
        } else {
            run_independent(st);
        }
    };
    let (mut steps0, mut preemptions0) = (0, 0);
    if opts.warm_prefix {
        // The warm-up pass, then the measured requests from the next interval boundary.
        st.limit = u32::MAX;
        run(&mut st);
        let end = st.grid.last_end.0;
        st.offset = SimTime(end.div_ceil(opts.interval.0) * opts.interval.0);
        st.requests = requests;
        st.out = vec![ReplayedRequest::default(); requests.len()];
        st.grid = Grid::new(opts.interval);
        st.limit = opts.max_concurrency.unwrap_or(u32::MAX).max(1);
        steps0 = st.engines.iter().map(VllmEngine::steps).sum();
        preemptions0 = st.engines.iter().map(VllmEngine::preemptions).sum();
    }
    run(&mut st);
    // Every time of the measured pass comes after its offset; a time before it is one never
    // set (a request that never reached that stage) and stays zero rather than wrap.
    let off = st.offset.0;
    for r in &mut st.out {
        for t in [&mut r.queued, &mut r.scheduled, &mut r.first_token, &mut r.last_token] {
            t.0 = t.0.saturating_sub(off);
        }
    }
    Replay {
        past_grid: st.grid.past,
        samples: st.grid.samples,
        requests: st.out,
        steps: st.engines.iter().map(VllmEngine::steps).sum::<u64>() - steps0,
        preemptions: st.engines.iter().map(VllmEngine::preemptions).sum::<u64>() - preemptions0,
    }
}

/// Engines that step on their own: the next event is the next arrival or the earliest
/// step end (an arrival first on a tie, the lower engine first among step ends).
fn run_independent(st: &mut State) {
    let mut next = 0usize;
    loop {
        let arrival = st.requests.get(next).map(|r| SimTime(r.arrival.0 + st.offset.0));
        let end = st.ends.iter().enumerate().filter_map(|(k, e)| e.map(|t| (t, k))).min();
        match (arrival, end) {
            (Some(a), e) if e.is_none_or(|(t, _)| a <= t) => {
                next += 1;
                if st.in_flight >= st.limit {
                    st.held.push_back(next - 1);
                    continue;
                }
                st.in_flight += 1;
                let (k, idle) = st.send(next - 1, a);
                if idle {
                    st.ends[k] = st.start(k, a).map(|d| SimTime(a.0 + d.0));
                }
            }
            (_, Some((now, k))) => {
                let prompt = st.finish(k, now);
                st.record(now, prompt);
                for j in st.release(now) {
                    if j != k && st.ends[j].is_none() {
                        st.ends[j] = st.start(j, now).map(|d| SimTime(now.0 + d.0));
                    }
                }
                st.ends[k] = st.start(k, now).map(|d| SimTime(now.0 + d.0));
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("the first arm takes an arrival when no step runs"),
        }
    }
}

/// Engines that step together (see [`ReplayOptions::lockstep`]).
fn run_lockstep(st: &mut State) {
    let mut next = 0usize;
    let mut group_end: Option<SimTime> = None;
    loop {
        let arrival = st.requests.get(next).map(|r| SimTime(r.arrival.0 + st.offset.0));
        match (arrival, group_end) {
            (Some(a), e) if e.is_none_or(|t| a <= t) => {
                next += 1;
                if st.in_flight >= st.limit {
                    st.held.push_back(next - 1);
                    continue;
                }
                st.in_flight += 1;
                st.send(next - 1, a);
                if group_end.is_none() {
                    group_end = st.start_all(a);
                }
            }
            (_, Some(now)) => {
                let mut prompt = 0;
                for k in 0..st.engines.len() {
                    if st.ends[k].take().is_some() {
                        prompt += st.finish(k, now);
                    }
                }
                st.record(now, prompt);
                st.release(now);
                group_end = st.start_all(now);
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("the first arm takes an arrival when no step runs"),
        }
    }
}

/// The series as it is binned: one sample per interval `(t - interval, t]` up to the
/// latest step end, at most [`MAX_SAMPLES`] of them.
struct Grid {
    interval: u64,
    samples: Vec<Sample>,
    /// A step ended past the last interval kept.
    past: bool,
    /// The latest step end added.
    last_end: SimTime,
}

impl Grid {
    fn new(interval: SimDuration) -> Grid {
        Grid {
            interval: interval.0,
            samples: Vec::new(),
            past: false,
            last_end: SimTime(0),
        }
    }

    /// Adds a step end (they come in time order): its tokens to its interval, its gauges
    /// to that interval and, until a later step says otherwise, the ones after it.
    fn add(&mut self, p: Point) {
        self.last_end = p.0;
        let k = p.0.0.div_ceil(self.interval).max(1);
        let last = self.samples.last().copied().unwrap_or_default();
        while (self.samples.len() as u64) < k.min(MAX_SAMPLES) {
            let t = SimTime((self.samples.len() as u64 + 1) * self.interval);
            self.samples.push(Sample {
                t,
                prompt_tokens: 0,
                generation_tokens: 0,
                ..last
            });
        }
        if k > MAX_SAMPLES {
            self.past = true;
            return;
        }
        let s = self.samples.last_mut().expect("extended above");
        s.prompt_tokens += p.1;
        s.generation_tokens += p.2;
        (s.running, s.waiting, s.kv_used_blocks) = (p.3, p.4, p.5);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::perf::StepTimeModel;

    fn cfg() -> VllmConfig {
        VllmConfig {
            max_num_seqs: 2,
            max_num_batched_tokens: 64,
            kv_blocks: 100,
            block_size_tokens: 16,
            prefix_caching: true,
            step_time: StepTimeModel {
                beta0_us: 1000.0,
                beta1_us: 10.0,
                beta2_us: 0.0,
                beta3_us: 0.0,
                physics: None,
            },
            reserve_full_isl: true,
        }
    }

    #[test]
    fn one_request_by_hand() {
        // 100 prompt tokens in chunks of 64 and 36: steps of 1.64 ms and 1.36 ms, the
        // second samples the first token at 3.0 ms; then 2 decode steps of 1 ms each.
        let r = [ReplayRequest {
            arrival: SimTime(0),
            prompt_tokens: 100,
            output_tokens: 3,
        }];
        let opts = ReplayOptions::single(None, SimDuration(2_000_000));
        let rep = replay(&cfg(), &r, &opts);
        assert_eq!(rep.requests[0].first_token, SimTime(3_000_000));
        assert_eq!(rep.requests[0].last_token, SimTime(5_000_000));
        assert_eq!(rep.steps, 4);
        let s = &rep.samples;
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].prompt_tokens, s[0].generation_tokens, s[0].running), (0, 0, 1));
        assert_eq!((s[1].prompt_tokens, s[1].generation_tokens), (100, 2));
        assert_eq!((s[2].generation_tokens, s[2].running), (1, 0));
        assert!(!rep.past_grid);
    }

    #[test]
    fn the_grid_is_bounded() {
        // A 1 ns interval over a 5 ms replay would be 5 million samples: the grid keeps
        // MAX_SAMPLES and says that the engine ran past them.
        let r = [ReplayRequest {
            arrival: SimTime(0),
            prompt_tokens: 100,
            output_tokens: 3,
        }];
        let opts = ReplayOptions::single(None, SimDuration(1));
        let rep = replay(&cfg(), &r, &opts);
        assert!(rep.past_grid);
        assert_eq!(rep.samples.len() as u64, MAX_SAMPLES);
        assert_eq!(
            rep.requests[0].last_token,
            SimTime(5_000_000),
            "the replay itself is whole"
        );
    }

    #[test]
    fn a_concurrency_cap_holds_requests_back() {
        let r: Vec<ReplayRequest> = (0..4)
            .map(|_| ReplayRequest {
                arrival: SimTime(0),
                prompt_tokens: 10,
                output_tokens: 2,
            })
            .collect();
        let open = ReplayOptions::single(None, SimDuration(1_000_000));
        let closed = ReplayOptions {
            max_concurrency: Some(1),
            ..open
        };
        let a = replay(&cfg(), &r, &open);
        let b = replay(&cfg(), &r, &closed);
        assert!(a.requests.iter().all(|q| q.queued == SimTime(0)));
        for w in b.requests.windows(2) {
            assert_eq!(w[1].queued, w[0].last_token, "one in flight at a time");
        }
        let tokens = |rep: &Replay| rep.samples.iter().map(|s| s.generation_tokens).sum::<u64>();
        assert_eq!(tokens(&a), 8);
        assert_eq!(tokens(&b), 8);
    }
}
