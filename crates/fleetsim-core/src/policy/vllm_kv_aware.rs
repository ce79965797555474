//! vllm-router 0.1.17's `kv_aware` (vllm-project/router, read in the 0.1.17 source
//! distribution: `src/policies/kv_aware.rs`, `src/kv_index/subscriber.rs`): the router
//! indexes each worker's vLLM KV-cache events (ZMQ, `--kv-event-source URL=tcp://...`) and
//! sends a request where the prefill it adds, times the batch it joins, is smallest.
//!
//! * Credit (`credited_tokens`, kv_aware.rs:719-766): the worker's longest device-tier
//!   prefix of the request's blocks, as its events told the router, capped at
//!   `floor((prompt - 1) / block_size)` blocks (vLLM recomputes the last token). Host,
//!   external and disk tiers (credits 0.8 / 0.6 / 0.3) do not occur: vLLM's GPU cache
//!   publishes `medium = "GPU"` only.
//! * Cost (`MultiplicativeScorer`, kv_aware.rs:786-823): `(new_prefill + booked_prefill) x
//!   (active_requests + 1)`, where `new_prefill = prompt - credited`, `booked_prefill` the
//!   new-prefill tokens the router booked on that worker for requests that have not
//!   streamed their first token (`SlotManager::begin_prefill` / `begin_decode`,
//!   kv_aware.rs:351-379), and `active_requests = max(slot count, worker load)`, the
//!   router's in-flight count (kv_aware.rs:1512-1530).
//! * Pick (`pick_among`, `TemperaturePicker`, kv_aware.rs:826-870, 1615-1640): with
//!   `--router-temperature 0` (the default) the first minimum in the router's worker order
//!   (a `DashMap` of random ids, so the model's `tie = "first"` is its endpoint order and
//!   `tie = "random"` the spread over orders); above 0 a softmax draw,
//!   `p ∝ exp(-(c - c_min) / T)`. A request with tokens never costs 0 (the last token is
//!   never credited), so the zero-cost branch does not arise.
//!
//! Freshness: the index is the KV-event feed (`router.kv_event_lag_s`: events reach the
//! router after the block was stored or evicted); booked prefill and in-flight counts are
//! the router's own (fresh).

use rand::RngExt;

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::{Tie, local_loads};
use super::params::{ParamError, tie_first, weight};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::ids::RequestId;
use crate::rng::SimRng;

/// Parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvAwareParams {
    /// `--router-temperature` (0: argmin).
    pub temperature: f64,
    /// Ties at the minimum cost (upstream: the first in its random worker order).
    pub tie: Tie,
}

impl Default for KvAwareParams {
    fn default() -> Self {
        KvAwareParams {
            temperature: 0.0,
            tie: Tie::First,
        }
    }
}

/// A routed request whose first token has not come: its booked prefill.
#[derive(Clone, Copy)]
struct Booked {
    backend: usize,
    tokens: u64,
}

/// The policy state: the prefill tokens booked per backend.
pub struct VllmKvAware {
    params: KvAwareParams,
    booked: rustc_hash::FxHashMap<u32, Booked>,
    prefill: Vec<u64>,
}

impl VllmKvAware {
    /// Nothing booked.
    pub fn new(params: KvAwareParams) -> Self {
        VllmKvAware {
            params,
            booked: rustc_hash::FxHashMap::default(),
            prefill: Vec::new(),
        }
    }

    /// Prompt tokens left to prefill on each endpoint: the prompt less its credited prefix.
    fn new_prefill(req: &RequestInfo, view: &RouterView) -> Vec<u64> {
        let kv = view.kv.expect("KV-event-fed policy without a feed");
        let bs = u64::from(req.block_size_tokens.max(1));
        let p = u64::from(req.prompt_tokens);
        let cap = p.saturating_sub(1) / bs;
        view.endpoints
            .iter()
            .map(|e| {
                let device = u64::from(kv.overlap(e.backend, req.block_hashes)).min(cap);
                p - device * bs
            })
            .collect()
    }

    fn pick(&self, cost: &[f64], rng: &mut SimRng) -> usize {
        let lo = cost.iter().copied().fold(f64::INFINITY, f64::min);
        if self.params.temperature > 0.0 {
            let w: Vec<f64> = cost
                .iter()
                .map(|c| (-(c - lo) / self.params.temperature).exp())
                .collect();
            let total: f64 = w.iter().sum();
            if total.is_finite() && total > 0.0 {
                let mut u = rng.random::<f64>() * total;
                for (i, wi) in w.iter().enumerate() {
                    if u < *wi {
                        return i;
                    }
                    u -= wi;
                }
                return cost.len() - 1;
            }
        }
        let at_min: Vec<usize> = (0..cost.len()).filter(|&i| cost[i] == lo).collect();
        match self.params.tie {
            Tie::First => at_min[0],
            Tie::Random => at_min[uniform_index(rng, at_min.len())],
        }
    }
}

impl RoutingPolicy for VllmKvAware {
    fn needs_kv_events(&self) -> bool {
        true
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let max_id = view.endpoints.iter().map(|e| e.backend.index()).max().unwrap_or(0);
        if self.prefill.len() <= max_id {
            self.prefill.resize(max_id + 1, 0);
        }
        let fresh = Self::new_prefill(req, view);
        let active = local_loads(view);
        let cost: Vec<f64> = (0..view.endpoints.len())
            .map(|i| {
                let b = view.endpoints[i].backend.index();
                (fresh[i] + self.prefill[b]) as f64 * (active[i] + 1) as f64
            })
            .collect();
        let pos = self.pick(&cost, rng);
        let b = view.endpoints[pos].backend.index();
        self.prefill[b] += fresh[pos];
        self.booked.insert(
            req.request.0,
            Booked {
                backend: b,
                tokens: fresh[pos],
            },
        );
        let credited = u64::from(req.prompt_tokens) - fresh[pos];
        Decision {
            pos,
            branch: Branch::DynamoCost,
            match_chars: credited * req.prompt_chars / u64::from(req.prompt_tokens.max(1)),
        }
    }

    fn on_first_token(&mut self, request: RequestId) {
        if let Some(b) = self.booked.remove(&request.0) {
            self.prefill[b.backend] -= b.tokens;
        }
    }

    fn on_finished(&mut self, request: RequestId) {
        self.on_first_token(request);
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`KvAwareParams::default`]).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    router_temperature: Option<f64>,
    tie: Option<String>,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "vllm_router_kv_aware";
    const DOC: Doc = Doc {
        source: "vllm-router 0.1.17 kv_aware (src/policies/kv_aware.rs), its CLI defaults",
        decision: "argmin of (prompt - cached device prefix + booked prefill) x (in-flight + 1); ties: the first \
                   in worker order; softmax sampling when router_temperature > 0",
        signals: "cached prefix per worker from vLLM KV events (router.kv_event_lag_s); router-booked prefill tokens \
                  (released at the first token) and in-flight counts (fresh)",
        params: &[
            param(
                "router_temperature",
                "0.0",
                "0: argmin; > 0: p ∝ exp(-(cost - min) / T) (--router-temperature)",
            ),
            param(
                "tie",
                "\"first\"",
                "equal costs: the first in endpoint order (upstream: its random worker order) or \"random\"",
            ),
        ],
    };
    type Params = Params;
    type Config = KvAwareParams;
    fn validate(f: Params, _: &Fleet) -> Result<KvAwareParams, ParamError> {
        let d = KvAwareParams::default();
        Ok(KvAwareParams {
            temperature: weight(f.router_temperature.unwrap_or(d.temperature), "router_temperature")?,
            tie: tie_first(f.tie.as_deref(), "tie", "upstream `min_by`")?,
        })
    }
    fn describe(p: &KvAwareParams) -> String {
        let mut s = format!("router_temperature = {}", p.temperature);
        if p.tie == Tie::Random {
            s.push_str(", tie = random");
        }
        s
    }
    fn build(p: &KvAwareParams) -> Box<dyn RoutingPolicy> {
        Box::new(VllmKvAware::new(*p))
    }
    fn upstream(c: &KvAwareParams, _: &[&str]) -> Option<Upstream> {
        Upstream::new(
            "vllm-router 0.1.17",
            format!(
                "--policy kv_aware --router-temperature {:?} --kv-event-source URL=tcp://HOST:PORT per worker (vLLM --kv-events-config)",
                c.temperature
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::kvaware::tests::{feed, kv_req};
    use crate::policy::testkit::ViewFixture;
    use crate::rng::stream;

    /// 10 blocks of 16 tokens (160-token prompt): the holder of 9 of them prefills 16
    /// tokens (the last block is recomputed), an empty worker 160; the in-flight count and
    /// the booked prefill weigh in until the first token comes.
    #[test]
    fn cached_prefix_booked_prefill_and_batch_trade_off() {
        let hashes: Vec<u64> = (1..=10).collect();
        let mut rng = stream(1, "t", 0);
        let mut p = VllmKvAware::new(KvAwareParams::default());
        let mut f = ViewFixture::new(2);
        f.kv = Some(feed(&[10, 0]));
        let mut r = kv_req(&hashes, None);
        r.prompt_tokens = 160;
        r.block_size_tokens = 16;
        assert_eq!(VllmKvAware::new_prefill(&r, &f.view()), vec![16, 160]);
        // 16 x 1 against 160 x 1.
        let d = p.route(&r, &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::DynamoCost));
        // Backend 0 now holds 16 booked tokens and 9 in flight: (16 + 16) x 10 = 320 > 160.
        let f = {
            let mut g = ViewFixture::new(2).in_flight(&[Some(9), Some(0)]);
            g.kv = Some(feed(&[10, 0]));
            g
        };
        r.request = RequestId(1);
        assert_eq!(p.route(&r, &f.view(), &mut rng).pos, 1);
        // The first tokens release the bookings: 16 x 10 = 160 against (160 + 0) x 1: a
        // tie, the first endpoint.
        p.on_first_token(RequestId(0));
        p.on_first_token(RequestId(1));
        r.request = RequestId(2);
        assert_eq!(p.route(&r, &f.view(), &mut rng).pos, 0);
    }

    #[test]
    fn temperature_spreads_and_ties_can_be_random() {
        let hashes: Vec<u64> = (1..=4).collect();
        let mut f = ViewFixture::new(3);
        f.kv = Some(feed(&[0, 0, 0]));
        let mut r = kv_req(&hashes, None);
        r.prompt_tokens = 64;
        r.block_size_tokens = 16;
        let mut rng = stream(2, "t", 0);
        let mut seen = [0u32; 3];
        let mut p = VllmKvAware::new(KvAwareParams {
            tie: Tie::Random,
            ..KvAwareParams::default()
        });
        for k in 0..300 {
            r.request = RequestId(k);
            seen[p.route(&r, &f.view(), &mut rng).pos] += 1;
            p.on_first_token(RequestId(k));
        }
        assert!(seen.iter().all(|&n| n > 60), "{seen:?}");
        let mut q = VllmKvAware::new(KvAwareParams::default());
        let firsts = (0..20)
            .filter(|&k| {
                r.request = RequestId(1000 + k);
                let d = q.route(&r, &f.view(), &mut rng);
                q.on_first_token(r.request);
                d.pos == 0
            })
            .count();
        assert_eq!(firsts, 20);
    }
}
