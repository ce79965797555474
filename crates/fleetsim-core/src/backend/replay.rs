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

use std::collections::VecDeque;

use super::vllm::{StepEvents, VllmConfig, VllmEngine};
use crate::content::{Content, source_id};
use crate::ids::RequestId;
use crate::time::{SimDuration, SimTime};

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

/// How the client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// At most this many requests in flight (`--max-concurrency`); `None`: open loop.
    pub max_concurrency: Option<u32>,
    /// Width of one series interval (the measured series' tick).
    pub interval: SimDuration,
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
}

/// One interval `(t - interval, t]` of the engine's series.
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
    /// Engine steps run.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
}

/// Replays `requests` (sorted by arrival) through one engine configured by `cfg`.
///
/// Panics if a request is larger than the KV cache or the input is not sorted: callers
/// validate measurements first.
pub fn replay(cfg: &VllmConfig, requests: &[ReplayRequest], opts: &ReplayOptions) -> Replay {
    assert!(
        requests.windows(2).all(|w| w[0].arrival <= w[1].arrival),
        "replayed requests must be sorted by arrival"
    );
    assert!(opts.interval.0 > 0, "a replay interval must be positive");
    let mut c = Client {
        requests,
        engine: VllmEngine::new(cfg.clone()),
        ev: StepEvents::default(),
        out: vec![ReplayedRequest::default(); requests.len()],
        held: VecDeque::new(),
        in_flight: 0,
        limit: opts.max_concurrency.unwrap_or(u32::MAX).max(1),
        points: Vec::new(),
        sampled_before: 0,
    };
    // Arrived or not yet: the next request the client may send.
    let mut next = 0usize;
    let mut step_end: Option<SimTime> = None;
    loop {
        let arrival = requests.get(next).map(|r| r.arrival);
        match (arrival, step_end) {
            (Some(a), end) if end.is_none_or(|e| a <= e) => {
                next += 1;
                if let Some(end) = c.arrive(next - 1, a) {
                    step_end = end;
                }
            }
            (_, Some(now)) => step_end = c.step_done(now),
            (None, None) => break,
            (Some(_), None) => unreachable!("the first arm takes an arrival when no step runs"),
        }
    }
    Replay {
        samples: bin(&c.points, opts.interval),
        steps: c.engine.steps(),
        preemptions: c.engine.preemptions(),
        requests: c.out,
    }
}

/// A step end: when, the prompt tokens counted and the tokens sampled in it, and the
/// gauges running, waiting and KV blocks used.
type Point = (SimTime, u64, u64, u32, u32, u32);

/// The client and its engine during a replay.
struct Client<'r> {
    requests: &'r [ReplayRequest],
    engine: VllmEngine,
    ev: StepEvents,
    out: Vec<ReplayedRequest>,
    /// Requests that arrived while the client's slots were full, in arrival order.
    held: VecDeque<usize>,
    in_flight: u32,
    /// The client's slots (`--max-concurrency`).
    limit: u32,
    points: Vec<Point>,
    sampled_before: u64,
}

impl Client<'_> {
    /// Request `i` arrives at `a`: sent if a client slot is free, else held. Returns the
    /// new step end when sending it started a step on an idle engine.
    fn arrive(&mut self, i: usize, a: SimTime) -> Option<Option<SimTime>> {
        if self.in_flight >= self.limit {
            self.held.push_back(i);
            return None;
        }
        self.in_flight += 1;
        self.send(i, a)
            .then(|| start(&mut self.engine, &mut self.ev, a, &mut self.out))
    }

    /// Sends request `i` at `now`; true when the engine was idle.
    fn send(&mut self, i: usize, now: SimTime) -> bool {
        let r = self.requests[i];
        self.out[i].queued = now;
        let content = Content::session_turn(
            None,
            source_id("replay", "", i as u64),
            r.prompt_tokens,
            r.output_tokens,
        );
        self.engine.enqueue(RequestId(i as u32), content)
    }

    /// The step ending at `now`: its first tokens and finished requests recorded, its point
    /// of the series kept, held requests sent into the freed slots, and the next step
    /// started (its end returned, `None` when the engine idles).
    fn step_done(&mut self, now: SimTime) -> Option<SimTime> {
        self.engine.finish_step(now, &mut self.ev);
        let mut prompt = 0u64;
        for id in &self.ev.first_tokens {
            let i = id.0 as usize;
            self.out[i].first_token = now;
            prompt += u64::from(self.requests[i].prompt_tokens);
        }
        for f in &self.ev.finished {
            let i = f.id.0 as usize;
            self.out[i].last_token = now;
            self.out[i].preemptions = f.preemptions;
            self.in_flight -= 1;
        }
        let sampled = self.engine.tokens_sampled();
        let g = self.engine.gauges();
        self.points.push((
            now,
            prompt,
            sampled - self.sampled_before,
            g.running,
            g.waiting,
            g.kv_used_blocks,
        ));
        self.sampled_before = sampled;
        self.ev.clear();
        while self.in_flight < self.limit
            && let Some(i) = self.held.pop_front()
        {
            self.in_flight += 1;
            self.send(i, now);
        }
        start(&mut self.engine, &mut self.ev, now, &mut self.out)
    }
}

/// Starts the engine's next step at `now`; records first admissions.
fn start(engine: &mut VllmEngine, ev: &mut StepEvents, now: SimTime, out: &mut [ReplayedRequest]) -> Option<SimTime> {
    let d = engine.start_step(ev)?;
    for &(id, _) in &ev.admitted {
        out[id.0 as usize].scheduled = now;
    }
    ev.admitted.clear();
    ev.preempted.clear();
    Some(SimTime(now.0 + d.0))
}

/// Step-end points into interval samples.
fn bin(points: &[Point], interval: SimDuration) -> Vec<Sample> {
    let Some(last) = points.last() else {
        return Vec::new();
    };
    let n = last.0.0.div_ceil(interval.0).max(1);
    let mut samples = Vec::with_capacity(n as usize);
    let mut j = 0;
    let mut gauges = (0, 0, 0);
    for k in 1..=n {
        let t = SimTime(k * interval.0);
        let mut s = Sample { t, ..Sample::default() };
        while j < points.len() && points[j].0 <= t {
            let p = points[j];
            s.prompt_tokens += p.1;
            s.generation_tokens += p.2;
            gauges = (p.3, p.4, p.5);
            j += 1;
        }
        (s.running, s.waiting, s.kv_used_blocks) = gauges;
        samples.push(s);
    }
    samples
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
        let opts = ReplayOptions {
            max_concurrency: None,
            interval: SimDuration(2_000_000),
        };
        let rep = replay(&cfg(), &r, &opts);
        assert_eq!(rep.requests[0].first_token, SimTime(3_000_000));
        assert_eq!(rep.requests[0].last_token, SimTime(5_000_000));
        assert_eq!(rep.steps, 4);
        let s = &rep.samples;
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].prompt_tokens, s[0].generation_tokens, s[0].running), (0, 0, 1));
        assert_eq!((s[1].prompt_tokens, s[1].generation_tokens), (100, 2));
        assert_eq!((s[2].generation_tokens, s[2].running), (1, 0));
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
        let open = ReplayOptions {
            max_concurrency: None,
            interval: SimDuration(1_000_000),
        };
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
