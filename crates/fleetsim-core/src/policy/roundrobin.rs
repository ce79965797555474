//! production-stack `RoundRobinRouter` (main, after PR #916): one counter per endpoint
//! *set*, keyed by the sorted URLs; `urls[counter mod n]`; the key cache is cleared wholesale
//! when it reaches 1024 entries. Sorting is lexicographic on the URL string, so
//! `backend-10` sorts before `backend-2`, as upstream. A membership change gives a new key,
//! so the rotation restarts at 0.

use std::collections::BTreeMap;

use super::kind::{Doc, ParamlessKind, RoutingLogic, StackFlags};
use super::{Branch, Decision, EndpointInfo, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;

/// Upstream's cap on remembered endpoint sets.
const MAX_KEYS: usize = 1024;

/// The policy state.
#[derive(Default)]
pub struct RoundRobin {
    /// Sorted URL set -> next index.
    counters: BTreeMap<Vec<String>, u64>,
    /// The last endpoint list seen, its URL-sorted positions and key (avoids re-sorting).
    last: Option<(Vec<EndpointInfo>, Vec<usize>, Vec<String>)>,
}

impl RoutingPolicy for RoundRobin {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, _rng: &mut SimRng) -> Decision {
        if self
            .last
            .as_ref()
            .is_none_or(|(eps, _, _)| eps.as_slice() != view.endpoints)
        {
            let mut order: Vec<usize> = (0..view.endpoints.len()).collect();
            order.sort_by(|&a, &b| view.endpoints[a].url.cmp(&view.endpoints[b].url));
            let key: Vec<String> = order.iter().map(|&i| view.endpoints[i].url.clone()).collect();
            self.last = Some((view.endpoints.to_vec(), order, key));
        }
        let (_, order, key) = self.last.as_ref().expect("set above");
        if !self.counters.contains_key(key) && self.counters.len() >= MAX_KEYS {
            self.counters.clear();
        }
        if !self.counters.contains_key(key) {
            self.counters.insert(key.clone(), 0);
        }
        let c = self.counters.get_mut(key).expect("inserted above");
        let pos = order[(*c % order.len() as u64) as usize];
        *c += 1;
        Decision {
            pos,
            branch: Branch::RoundRobin,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

impl ParamlessKind for Kind {
    const KIND: &'static str = "roundrobin";
    const DOC: Doc = Doc {
        source: "vLLM production-stack RoundRobinRouter (src/vllm_router/routers/routing_logic.py)",
        decision: "one counter over the URL-sorted endpoint set",
        signals: "none (a counter over the URL-sorted endpoint list)",
        params: &[],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: None,
        keys: &[],
        needs: None,
    });
    fn build() -> Box<dyn RoutingPolicy> {
        Box::new(RoundRobin::default())
    }
    fn production_stack() -> Option<StackFlags> {
        Some(StackFlags::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn rotates_over_lexicographically_sorted_urls() {
        let mut f = ViewFixture::new(3);
        f.endpoints[0].url = "http://b:1".into();
        f.endpoints[1].url = "http://a:1".into();
        f.endpoints[2].url = "http://c:1".into();
        let mut p = RoundRobin::default();
        let mut rng = stream(0, "t", 0);
        let picks: Vec<usize> = (0..6)
            .map(|_| p.route(&req(None, &[]), &f.view(), &mut rng).pos)
            .collect();
        assert_eq!(picks, vec![1, 0, 2, 1, 0, 2]);
    }

    #[test]
    fn new_endpoint_set_restarts_rotation() {
        let f3 = ViewFixture::new(3);
        let f2 = ViewFixture::new(2);
        let mut p = RoundRobin::default();
        let mut rng = stream(0, "t", 0);
        assert_eq!(p.route(&req(None, &[]), &f3.view(), &mut rng).pos, 0);
        assert_eq!(p.route(&req(None, &[]), &f3.view(), &mut rng).pos, 1);
        assert_eq!(p.route(&req(None, &[]), &f2.view(), &mut rng).pos, 0);
        assert_eq!(p.route(&req(None, &[]), &f3.view(), &mut rng).pos, 2);
    }
}
