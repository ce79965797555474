//! `least_request`: the endpoint with the fewest router-local in-flight requests
//! (dispatched, stream not ended), with zero staleness but only this router's own traffic.
//!
//! Semantics of AIBrix `least-request` (`pkg/plugins/gateway/algorithms/least_request.go`:
//! gateway-tracked `realtime_num_requests_running`, missing = 0, uniform random among the
//! minima) and, with `tie = "first"`, of SGLang's shortest-queue branch (`min_by_key` over
//! `worker.load()`, first in worker-list order).

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::params::{ParamError, tie};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

pub use super::params::Tie;

/// Router-local in-flight per endpoint (0 for one never used), from the router's request
/// stats: fresh unless the scenario sets `router.request_stats_lag_s`, which then delays
/// this signal too for every policy that reads it.
pub fn local_loads(view: &RouterView) -> Vec<u64> {
    view.request_stats
        .iter()
        .map(|r| r.map_or(0, |r| u64::from(r.in_prefill) + u64::from(r.in_decoding)))
        .collect()
}

/// Index of the minimum of `loads` under `tie`.
pub fn argmin(loads: &[u64], tie: Tie, rng: &mut SimRng) -> usize {
    let min = *loads.iter().min().expect("at least one endpoint");
    let at_min: Vec<usize> = (0..loads.len()).filter(|&i| loads[i] == min).collect();
    match tie {
        Tie::First => at_min[0],
        Tie::Random => at_min[uniform_index(rng, at_min.len())],
    }
}

/// The policy.
pub struct LeastRequest {
    /// Tie rule.
    pub tie: Tie,
}

impl RoutingPolicy for LeastRequest {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        Decision {
            pos: argmin(&local_loads(view), self.tie, rng),
            branch: Branch::LeastRequest,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "super::leastinflight::default_tie")]
    tie: String,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "least_request";
    const DOC: Doc = Doc {
        source: "AIBrix least-request (gateway realtime_num_requests_running); SGLang shortest queue with tie = first",
        decision: "fewest in-flight requests, random ties (first with tie = first)",
        signals: "router-local in-flight requests (zero staleness, this router's traffic only)",
        params: &[param(
            "tie",
            "\"random\"",
            "\"random\" (AIBrix) or \"first\" in discovery order (SGLang min_by_key)",
        )],
    };
    type Params = Params;
    type Config = Tie;
    fn validate(p: Params, _: &Fleet) -> Result<Tie, ParamError> {
        tie(&p.tie, "tie", "`random` (AIBrix) or `first` (SGLang)")
    }
    fn describe(t: &Tie) -> String {
        format!("tie = {}", t.as_str())
    }
    fn build(t: &Tie) -> Box<dyn RoutingPolicy> {
        Box::new(LeastRequest { tie: *t })
    }
    fn upstream(t: &Tie, _: &[&str]) -> Option<Upstream> {
        // AIBrix's least-request breaks ties at random.
        if *t != Tie::Random {
            return None;
        }
        Upstream::new("AIBrix gateway", "routing-strategy least-request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn picks_the_fewest_in_flight_and_breaks_ties_as_configured() {
        let f = ViewFixture::new(3).in_flight(&[Some(3), None, Some(1)]);
        let mut rng = stream(1, "t", 0);
        let mut p = LeastRequest { tie: Tie::First };
        assert_eq!(
            p.route(&req(None, &[]), &f.view(), &mut rng).pos,
            1,
            "never used = 0 in flight"
        );
        let f = ViewFixture::new(3).in_flight(&[Some(1), Some(2), Some(1)]);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 0, "first among ties");
        let mut p = LeastRequest { tie: Tie::Random };
        let picks: std::collections::BTreeSet<usize> = (0..50)
            .map(|_| p.route(&req(None, &[]), &f.view(), &mut rng).pos)
            .collect();
        assert_eq!(
            picks.into_iter().collect::<Vec<_>>(),
            [0, 2],
            "random among the minima only"
        );
    }
}
