//! Least-in-flight from scraped engine stats, as proposed in production-stack PR #1089
//! (semantics from its description; the code was not available):
//!
//! 1. `load(e) = num_running_requests + num_queuing_requests` from the last scrape;
//! 2. `m = min load`; candidates = `{e : load(e) <= m + band}` (band = 1 in the PR, so a
//!    burst inside one scrape window, which sees one view, is not dog-piled onto the
//!    single strict argmin);
//! 3. uniformly random among candidates (`tie = "random"`, the PR), or the first of them in
//!    discovery order (`tie = "first"`: with `band = 0` this is the strict argmin with
//!    first-URL ties that the #1073 report describes, and that Python's `min()` gives);
//! 4. if any endpoint lacks engine stats, fall back to `_qps_routing`.
//!
//! Also usable standalone as the `leastinflight` policy.

use super::kind::{Doc, Fleet, PolicyKind, param};
use super::leastrequest::Tie;
use super::params::{LEAST_INFLIGHT_TIES, ParamError, count, tie, tie_suffix};
use super::qps::qps_routing;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

/// Scraped `running + waiting` per endpoint; `None` if some endpoint has no engine stats.
pub fn scraped_loads(view: &RouterView) -> Option<Vec<u64>> {
    // Checked first so that the list is allocated once at its size (collecting into an
    // `Option` cannot know the size, and grew it per request).
    if view.engine_stats.iter().any(Option::is_none) {
        return None;
    }
    Some(
        view.engine_stats
            .iter()
            .flatten()
            .map(|e| u64::from(e.running) + u64::from(e.waiting))
            .collect(),
    )
}

/// Among the endpoints whose load is within `band` of the minimum, the one `tie` picks.
/// Draws once from `rng` when `tie` is random, never when it is `first`.
pub fn pick_in_band(loads: &[u64], band: u32, tie: Tie, rng: &mut SimRng) -> usize {
    let min = *loads.iter().min().expect("at least one endpoint");
    let limit = min + u64::from(band);
    let mut candidates = (0..loads.len()).filter(|&i| loads[i] <= limit);
    match tie {
        Tie::First => candidates.next().expect("the minimum is a candidate"),
        Tie::Random => {
            // The k-th candidate, k drawn over their number (no list per request).
            let k = uniform_index(rng, candidates.clone().count());
            candidates.nth(k).expect("k is below the number of candidates")
        }
    }
}

/// Picks by least in-flight within `band`; `None` if some endpoint has no engine stats.
pub fn least_inflight(view: &RouterView, band: u32, tie: Tie, rng: &mut SimRng) -> Option<usize> {
    let loads = scraped_loads(view)?;
    Some(pick_in_band(&loads, band, tie, rng))
}

/// The standalone policy.
pub struct LeastInflight {
    /// Tie band.
    pub band: u32,
    /// Tie rule inside the band.
    pub tie: Tie,
}

/// The decision of a pick by load, or `_qps_routing` when a load is missing (PR #1089).
pub fn by_load_or_qps(pick: Option<usize>, view: &RouterView) -> Decision {
    match pick {
        Some(pos) => Decision {
            pos,
            branch: Branch::LeastInflight,
            match_chars: 0,
        },
        None => Decision {
            pos: qps_routing(view),
            branch: Branch::LeastInflightNoStatsQps,
            match_chars: 0,
        },
    }
}

impl RoutingPolicy for LeastInflight {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        by_load_or_qps(least_inflight(view, self.band, self.tie, rng), view)
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "default_band")]
    band: i64,
    #[serde(default = "default_tie")]
    tie: String,
}

/// PR #1089's band.
pub(super) fn default_band() -> i64 {
    1
}

/// PR #1089's tie rule.
pub(super) fn default_tie() -> String {
    "random".into()
}

/// The validated configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Tie band.
    pub band: u32,
    /// Tie rule within the band.
    pub tie: Tie,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "leastinflight";
    const DOC: Doc = Doc {
        source: "PR #1089's least-in-flight rule on every request",
        decision: "fewest scraped running + waiting, random among the loads within band of the least",
        signals: "scraped running + waiting (router.engine_stats_interval_s, 30 s); missing stats -> _qps_routing",
        params: &[
            param("band", "1", "candidates: loads <= min + band"),
            param(
                "tie",
                "\"random\"",
                "\"random\" among candidates (PR #1089) or \"first\" in discovery order (band 0: strict argmin)",
            ),
        ],
    };
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, _: &Fleet) -> Result<Config, ParamError> {
        Ok(Config {
            band: count(p.band, "band", 0)?,
            tie: tie(&p.tie, "tie", LEAST_INFLIGHT_TIES)?,
        })
    }
    fn describe(c: &Config) -> String {
        format!("band = {}{}", c.band, tie_suffix(c.tie))
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(LeastInflight {
            band: c.band,
            tie: c.tie,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn band_zero_is_strict_argmin() {
        let f = ViewFixture::new(3).loads(&[(4, 1), (2, 0), (3, 0)]);
        let mut rng = stream(1, "t", 0);
        for _ in 0..50 {
            assert_eq!(least_inflight(&f.view(), 0, Tie::Random, &mut rng), Some(1));
        }
    }

    #[test]
    fn band_one_is_uniform_over_min_plus_one() {
        // loads 5, 2, 3, 9: candidates {1, 2}.
        let f = ViewFixture::new(4).loads(&[(5, 0), (2, 0), (1, 2), (9, 0)]);
        let mut rng = stream(1, "t", 0);
        let mut counts = [0u32; 4];
        for _ in 0..10_000 {
            counts[least_inflight(&f.view(), 1, Tie::Random, &mut rng).unwrap()] += 1;
        }
        assert_eq!((counts[0], counts[3]), (0, 0));
        // Binomial(10000, 0.5): sd = 50; allow 5 sd.
        assert!((counts[1] as i64 - 5000).abs() < 250, "{counts:?}");
    }

    #[test]
    fn missing_stats_fall_back_to_qps() {
        let mut f = ViewFixture::new(2)
            .loads(&[(0, 0), (0, 0)])
            .dispatches(&[Some(3), Some(1)]);
        f.engine[0] = None;
        let mut p = LeastInflight {
            band: 1,
            tie: Tie::Random,
        };
        let d = p.route(&req(None, &[]), &f.view(), &mut stream(1, "t", 0));
        assert_eq!(
            d,
            Decision {
                pos: 1,
                branch: Branch::LeastInflightNoStatsQps,
                match_chars: 0
            }
        );
    }

    #[test]
    fn tie_first_is_the_first_in_discovery_order_within_the_band() {
        let mut rng = stream(1, "t", 0);
        // Exact ties at the minimum (loads 2, 1, 1, 1): strict argmin, first URL.
        let f = ViewFixture::new(4).loads(&[(2, 0), (1, 0), (0, 1), (1, 0)]);
        for _ in 0..20 {
            assert_eq!(least_inflight(&f.view(), 0, Tie::First, &mut rng), Some(1));
        }
        // With band 1 the first endpoint within min + 1 wins, even above the minimum.
        let f = ViewFixture::new(3).loads(&[(3, 0), (2, 0), (1, 0)]);
        assert_eq!(least_inflight(&f.view(), 1, Tie::First, &mut rng), Some(1));
        assert_eq!(least_inflight(&f.view(), 0, Tie::First, &mut rng), Some(2));
        // Random ties reach every tied endpoint.
        let f = ViewFixture::new(3).loads(&[(1, 0), (1, 0), (1, 0)]);
        let seen: std::collections::BTreeSet<usize> = (0..200)
            .map(|_| least_inflight(&f.view(), 0, Tie::Random, &mut rng).unwrap())
            .collect();
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn tie_first_draws_nothing_from_the_stream() {
        let f = ViewFixture::new(2).loads(&[(1, 0), (1, 0)]);
        let mut a = stream(7, "t", 0);
        let b = a.clone();
        pick_in_band(&[1, 1], 0, Tie::First, &mut a);
        least_inflight(&f.view(), 3, Tie::First, &mut a);
        assert_eq!(a, b);
    }
}
