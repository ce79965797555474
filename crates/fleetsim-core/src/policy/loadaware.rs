//! production-stack PR #1035 `LoadAwareRouter` (vllm-project/production-stack): for every endpoint
//! `score = min(matched, P) / max(P, 1) - beta * (load - mean) / max(1, mean)`, where
//! `matched` is the LMCache-reported cached prefix (here the KV-event feed, see `kvaware`),
//! `P` the prompt tokens and `load` the router-local in-flight count (`in_prefill +
//! in_decoding`; scraped stats are deliberately not used). Argmax over endpoints sorted by
//! URL with strict `>`, so ties go to the smallest URL (`select_url`: `for info in
//! sorted(endpoints, key=lambda e: e.url)` with `if score > best_score`, in the PR's patched
//! `routing_logic.py` as indexed from BenEpstein/caching-in-llms
//! `patches/vllm_router/routers/routing_logic.py` @ `07693061`; `tie = "random"`, uniform
//! among equal scores, is a what-if). Nothing cached anywhere → the upstream fallback
//! (session ring, else `_qps_routing`); that includes every chat-completions request,
//! since the lookup tokenizes only `prompt` (see `kvaware`). With two engines a full hit
//! is cancelled once its engine is `1 / (2 beta)` above the mean.

use super::kind::{Doc, Fleet, LogicKey, LogicValue, PolicyKind, RoutingLogic, StackFlags, param};
use super::kvaware::{matched_tokens, upstream_fallback};
use super::leastrequest::{Tie, local_loads};
use super::params::{ParamError, tie_first, tie_suffix_first, weight};
use super::session::Session;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

/// The policy.
pub struct LoadAware {
    /// `beta` (default 1.0).
    pub beta: f64,
    /// Ties of the argmax (`first`: the smallest URL, upstream).
    pub tie: Tie,
    session: Session,
}

impl LoadAware {
    /// With `beta`.
    pub fn new(beta: f64) -> Self {
        LoadAware {
            beta,
            tie: Tie::First,
            session: Session::default(),
        }
    }

    /// The same router with tie rule `tie` on the argmax.
    pub fn with_tie(mut self, tie: Tie) -> Self {
        self.tie = tie;
        self
    }
}

impl RoutingPolicy for LoadAware {
    fn needs_kv_events(&self) -> bool {
        true
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let m = matched_tokens(req, view);
        if m.iter().all(|&x| x == 0) {
            return upstream_fallback(&mut self.session, req, view, rng);
        }
        let p = f64::from(req.prompt_tokens);
        let loads = local_loads(view);
        let mean = loads.iter().sum::<u64>() as f64 / loads.len() as f64;
        let score = |i: usize| (m[i] as f64).min(p) / p.max(1.0) - self.beta * (loads[i] as f64 - mean) / mean.max(1.0);
        let mut order: Vec<usize> = (0..view.endpoints.len()).collect();
        order.sort_by(|&a, &b| view.endpoints[a].url.cmp(&view.endpoints[b].url));
        let mut best = order[0];
        for &i in &order[1..] {
            if score(i) > score(best) {
                best = i;
            }
        }
        if self.tie == Tie::Random {
            let tied: Vec<usize> = order.iter().copied().filter(|&i| score(i) == score(best)).collect();
            best = tied[uniform_index(rng, tied.len())];
        }
        Decision {
            pos: best,
            branch: Branch::LoadAwareScore,
            match_chars: m[best] * req.prompt_chars / u64::from(req.prompt_tokens.max(1)),
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    beta: Option<f64>,
    tie: Option<String>,
}

/// The validated configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// `beta` (upstream `LOADAWARE_BETA`, default 1.0).
    pub beta: f64,
    /// Ties of the argmax (upstream: the smallest URL, `first`).
    pub tie: Tie,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "loadaware";
    const DOC: Doc = Doc {
        source: "production-stack PR #1035 LoadAwareRouter",
        decision: "argmax of hit fraction - beta (load - mean) / max(1, mean); ties: smallest URL",
        signals: "cached prefix from KV events (10 ms) and router-local in-flight (fresh)",
        params: &[param(
            "beta",
            "1.0",
            "score = hit fraction - beta x (load - mean) / max(1, mean)",
        )],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: Some("PR #1035"),
        keys: &[LogicKey {
            key: "beta",
            flag: None,
            default: Some((LogicValue::Float(1.0), "PR #1035 default (env LOADAWARE_BETA unset)")),
            unit: None,
        }],
        needs: None,
    });
    type Params = Params;
    type Config = Config;
    fn validate(f: Params, _: &Fleet) -> Result<Config, ParamError> {
        Ok(Config {
            beta: weight(f.beta.unwrap_or(1.0), "beta")?,
            tie: tie_first(f.tie.as_deref(), "tie", "the smallest URL, PR #1035")?,
        })
    }
    fn describe(c: &Config) -> String {
        format!("beta = {}{}", c.beta, tie_suffix_first(c.tie))
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(LoadAware::new(c.beta).with_tie(c.tie))
    }
    fn production_stack(c: &Config) -> Option<StackFlags> {
        Some(StackFlags {
            notes: vec![format!(
                "{} is production-stack PR #1035; beta = {} is set with the environment variable LOADAWARE_BETA={}",
                Self::KIND,
                c.beta,
                c.beta
            )],
            reads_request_stats: true,
            ..StackFlags::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::kvaware::tests::{feed, kv_req};
    use crate::policy::testkit::ViewFixture;
    use crate::rng::stream;

    #[test]
    fn a_full_hit_is_cancelled_half_a_mean_above_it() {
        let hashes: Vec<u64> = (1..=10).collect();
        let mut rng = stream(1, "t", 0);
        let mut p = LoadAware::new(1.0);
        // Backend 0 holds everything; loads 3 vs 1 (mean 2): score 1 - 0.5 = 0.5 vs 0 + 0.5.
        // A tie: strict > keeps the smaller URL, backend 0.
        let mut f = ViewFixture::new(2).in_flight(&[Some(3), Some(1)]);
        f.kv = Some(feed(&[10, 0]));
        assert_eq!(p.route(&kv_req(&hashes, None), &f.view(), &mut rng).pos, 0);
        // Loads 4 vs 0 (mean 2): 1 - 1 = 0 vs 0 + 1 = 1: the idle one.
        let mut f = ViewFixture::new(2).in_flight(&[Some(4), Some(0)]);
        f.kv = Some(feed(&[10, 0]));
        let d = p.route(&kv_req(&hashes, None), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::LoadAwareScore));
        // Nothing cached: the upstream fallback.
        let mut f = ViewFixture::new(2);
        f.kv = Some(feed(&[0, 0]));
        assert_eq!(
            p.route(&kv_req(&hashes, None), &f.view(), &mut rng).branch,
            Branch::KvFallbackQps
        );
    }

    #[test]
    fn exact_ties_go_to_the_smallest_url_or_at_random() {
        // Both hold everything, equal loads: equal scores.
        let hashes: Vec<u64> = (1..=10).collect();
        let mut f = ViewFixture::new(3).in_flight(&[Some(2), Some(2), Some(5)]);
        f.kv = Some(feed(&[10, 10, 10]));
        // Discovery order differs from URL order: backend 1's URL sorts first.
        f.endpoints[0].url = "http://b:8000".into();
        f.endpoints[1].url = "http://a:8000".into();
        let mut rng = stream(1, "t", 0);
        let mut p = LoadAware::new(1.0);
        for _ in 0..20 {
            assert_eq!(p.route(&kv_req(&hashes, None), &f.view(), &mut rng).pos, 1);
        }
        let mut p = LoadAware::new(1.0).with_tie(Tie::Random);
        let seen: std::collections::BTreeSet<usize> = (0..200)
            .map(|_| p.route(&kv_req(&hashes, None), &f.view(), &mut rng).pos)
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [0, 1], "never the loaded one");
    }
}
