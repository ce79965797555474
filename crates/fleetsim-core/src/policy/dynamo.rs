//! NVIDIA Dynamo KV router (ai-dynamo/dynamo `lib/llm/src/kv_router/`), defaults of its
//! `KvRouterConfig::default`: `overlap_score_weight = 1`, `router_temperature = 0`,
//! `use_kv_events = true`:
//!
//! * per worker `cost = overlap_score_weight x prefill_blocks + decode_blocks`, where
//!   `prefill_blocks = (active prompt tokens + this request's uncached tokens) / block_size`
//!   (uncached = prompt minus the overlap the KV indexer reports, from engine KV events),
//!   and `decode_blocks` = the worker's active KV blocks as the router tracks its own active
//!   sequences (added at dispatch, released at completion); prompt load is released when
//!   the first output token arrives;
//! * temperature 0: argmin, ties to the worker with the smaller indexed tree, then uniform;
//!   temperature T > 0: `p_i ∝ exp(-(c_i - c_min) / ((c_max - c_min) T))`, uniform when all
//!   costs are equal.
//!
//! Freshness: overlap from the KV-event feed (`router.kv_event_lag_s`); load is router-local
//! (fresh, but per router replica).

use rand::RngExt;

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::params::{ParamError, weight};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::ids::RequestId;
use crate::rng::SimRng;

/// Parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DynamoParams {
    /// `overlap_score_weight`.
    pub overlap_score_weight: f64,
    /// `router_temperature`.
    pub temperature: f64,
}

impl Default for DynamoParams {
    fn default() -> Self {
        DynamoParams {
            overlap_score_weight: 1.0,
            temperature: 0.0,
        }
    }
}

/// One active sequence as the router tracks it.
#[derive(Clone, Copy)]
struct Active {
    backend: usize,
    prefill_tokens: u64,
    blocks: u64,
    prefilling: bool,
}

/// The policy state.
pub struct Dynamo {
    params: DynamoParams,
    /// Active sequences by request id (looked up, never iterated).
    active: rustc_hash::FxHashMap<u32, Active>,
    prefill_tokens: Vec<u64>,
    blocks: Vec<u64>,
}

impl Dynamo {
    /// No active sequences.
    pub fn new(params: DynamoParams) -> Self {
        Dynamo {
            params,
            active: rustc_hash::FxHashMap::default(),
            prefill_tokens: Vec::new(),
            blocks: Vec::new(),
        }
    }
}

impl RoutingPolicy for Dynamo {
    fn needs_kv_events(&self) -> bool {
        true
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let kv = view.kv.expect("KV-event-fed policy without a feed");
        let n = view.endpoints.len();
        let max_id = view.endpoints.iter().map(|e| e.backend.index()).max().unwrap_or(0);
        if self.blocks.len() <= max_id {
            self.blocks.resize(max_id + 1, 0);
            self.prefill_tokens.resize(max_id + 1, 0);
        }
        let bs = f64::from(req.block_size_tokens.max(1));
        let p = u64::from(req.prompt_tokens);
        let overlap: Vec<u64> = view
            .endpoints
            .iter()
            .map(|e| u64::from(kv.overlap(e.backend, req.block_hashes)) * u64::from(req.block_size_tokens))
            .collect();
        let cost: Vec<f64> = (0..n)
            .map(|i| {
                let b = view.endpoints[i].backend.index();
                let prefill = (self.prefill_tokens[b] + p.saturating_sub(overlap[i])) as f64 / bs;
                self.params.overlap_score_weight * prefill + self.blocks[b] as f64
            })
            .collect();
        let lo = cost.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = cost.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pos = if self.params.temperature > 0.0 && (hi - lo).is_finite() {
            if hi == lo {
                uniform_index(rng, n)
            } else {
                let w: Vec<f64> = cost
                    .iter()
                    .map(|c| (-(c - lo) / ((hi - lo) * self.params.temperature)).exp())
                    .collect();
                let total: f64 = w.iter().sum();
                let mut u = rng.random::<f64>() * total;
                let mut pick = n - 1;
                for (i, wi) in w.iter().enumerate() {
                    if u < *wi {
                        pick = i;
                        break;
                    }
                    u -= wi;
                }
                pick
            }
        } else {
            let at_min: Vec<usize> = (0..n).filter(|&i| cost[i] == lo).collect();
            let smallest = at_min
                .iter()
                .map(|&i| kv.indexed(view.endpoints[i].backend))
                .min()
                .expect("non-empty");
            let ties: Vec<usize> = at_min
                .into_iter()
                .filter(|&i| kv.indexed(view.endpoints[i].backend) == smallest)
                .collect();
            ties[uniform_index(rng, ties.len())]
        };
        let b = view.endpoints[pos].backend.index();
        let a = Active {
            backend: b,
            prefill_tokens: p.saturating_sub(overlap[pos]),
            blocks: p.div_ceil(u64::from(req.block_size_tokens.max(1))),
            prefilling: true,
        };
        self.prefill_tokens[b] += a.prefill_tokens;
        self.blocks[b] += a.blocks;
        self.active.insert(req.request.0, a);
        Decision {
            pos,
            branch: Branch::DynamoCost,
            match_chars: overlap[pos] * req.prompt_chars / p.max(1),
        }
    }

    fn on_first_token(&mut self, request: RequestId) {
        if let Some(a) = self.active.get_mut(&request.0)
            && a.prefilling
        {
            a.prefilling = false;
            self.prefill_tokens[a.backend] -= a.prefill_tokens;
        }
    }

    fn on_finished(&mut self, request: RequestId) {
        self.on_first_token(request);
        if let Some(a) = self.active.remove(&request.0) {
            self.blocks[a.backend] -= a.blocks;
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`DynamoParams::default`]).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    overlap_score_weight: Option<f64>,
    router_temperature: Option<f64>,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "dynamo";
    const DOC: Doc = Doc {
        source: "NVIDIA Dynamo KV router (lib/llm/src/kv_router), KvRouterConfig defaults",
        decision: "argmin of overlap_score_weight x prefill blocks + decode blocks; ties: the smaller tree, then \
                   random; softmax sampling when router_temperature > 0",
        signals: "overlap from engine KV events (router.kv_event_lag_s, 10 ms); router-tracked active prompt tokens and \
                  KV blocks (fresh, per replica)",
        params: &[
            param(
                "overlap_score_weight",
                "1.0",
                "cost = weight x prefill blocks + decode blocks",
            ),
            param(
                "router_temperature",
                "0.0",
                "0: argmin (ties: smaller tree, then random); > 0: softmax sampling",
            ),
        ],
    };
    type Params = Params;
    type Config = DynamoParams;
    fn validate(f: Params, _: &Fleet) -> Result<DynamoParams, ParamError> {
        let d = DynamoParams::default();
        Ok(DynamoParams {
            overlap_score_weight: weight(
                f.overlap_score_weight.unwrap_or(d.overlap_score_weight),
                "overlap_score_weight",
            )?,
            temperature: weight(f.router_temperature.unwrap_or(d.temperature), "router_temperature")?,
        })
    }
    fn describe(p: &DynamoParams) -> String {
        format!(
            "overlap_score_weight = {}, router_temperature = {}",
            p.overlap_score_weight, p.temperature
        )
    }
    fn build(p: &DynamoParams) -> Box<dyn RoutingPolicy> {
        Box::new(Dynamo::new(*p))
    }
    fn upstream(c: &DynamoParams, _: &[&str]) -> Option<Upstream> {
        Upstream::new(
            "Dynamo",
            format!(
                "--router-mode kv --kv-overlap-score-weight {:?}",
                c.overlap_score_weight
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RequestId;
    use crate::policy::kvaware::tests::{feed, kv_req};
    use crate::policy::testkit::ViewFixture;
    use crate::rng::stream;

    #[test]
    fn overlap_and_active_load_trade_off() {
        let hashes: Vec<u64> = (1..=10).collect();
        let mut rng = stream(1, "t", 0);
        let mut p = Dynamo::new(DynamoParams::default());
        let mut f = ViewFixture::new(2);
        f.kv = Some(feed(&[10, 0]));
        // Backend 0 holds the 10 blocks: cost 0 + 0 against 10 + 0.
        let mut r = kv_req(&hashes, None);
        let d = p.route(&r, &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::DynamoCost));
        // Now backend 0 tracks 10 active blocks: cost 0 + 10 vs 10 + 0, a tie; the smaller
        // tree (backend 1 holds nothing) wins.
        r.request = RequestId(1);
        assert_eq!(p.route(&r, &f.view(), &mut rng).pos, 1);
        // Completion releases the blocks: backend 0 is cheapest again (0 + 0 vs 10 + 10).
        p.on_finished(RequestId(0));
        r.request = RequestId(2);
        assert_eq!(p.route(&r, &f.view(), &mut rng).pos, 0);
    }

    #[test]
    fn temperature_samples_by_softmax() {
        let hashes: Vec<u64> = (1..=10).collect();
        let mut rng = stream(3, "t", 0);
        let mut p = Dynamo::new(DynamoParams {
            overlap_score_weight: 1.0,
            temperature: 1.0,
        });
        let mut f = ViewFixture::new(2);
        f.kv = Some(feed(&[10, 0]));
        let mut counts = [0u32; 2];
        for i in 0..2000 {
            let mut r = kv_req(&hashes, None);
            r.request = RequestId(i);
            counts[p.route(&r, &f.view(), &mut rng).pos] += 1;
            p.on_finished(RequestId(i));
        }
        // Costs 0 and 10: weights 1 and e^-1, so P(0) = 1 / (1 + e^-1) = 0.731.
        let share = f64::from(counts[0]) / 2000.0;
        assert!((share - 0.731).abs() < 0.04, "{share}");
    }
}
