//! `random`: uniform over the available endpoints (SGLang `random`, AIBrix `random`). The
//! baseline every load-aware policy should beat; it needs no signal, so it cannot be misled
//! by a stale one.

use super::kind::{Doc, ParamlessKind, Upstream};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

/// The policy (stateless).
#[derive(Default)]
pub struct Random;

impl RoutingPolicy for Random {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        Decision {
            pos: uniform_index(rng, view.endpoints.len()),
            branch: Branch::Random,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

impl ParamlessKind for Kind {
    const KIND: &'static str = "random";
    const DOC: Doc = Doc {
        source: "SGLang random, AIBrix random",
        decision: "uniform over the endpoints",
        signals: "none",
        params: &[],
    };
    fn build() -> Box<dyn RoutingPolicy> {
        Box::new(Random)
    }
    fn upstream() -> Option<Upstream> {
        Upstream::new("SGLang router", "--policy random (AIBrix: routing-strategy random)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn spreads_uniformly() {
        let f = ViewFixture::new(4);
        let mut rng = stream(1, "t", 0);
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            counts[Random.route(&req(None, &[]), &f.view(), &mut rng).pos] += 1;
        }
        // 4000 draws: each count ~ Binomial(4000, 1/4), sd 27; 5 sd bounds.
        assert!(counts.iter().all(|&c| (865..=1135).contains(&c)), "{counts:?}");
    }
}
