//! Least-in-flight from scraped engine stats, as proposed in production-stack PR #1089
//! (semantics from its description; the code was not available):
//!
//! 1. `load(e) = num_running_requests + num_queuing_requests` from the last scrape;
//! 2. `m = min load`; candidates = `{e : load(e) <= m + band}` (band = 1 in the PR, so a
//!    burst inside one scrape window, which sees one view, is not dog-piled onto the
//!    single strict argmin);
//! 3. uniformly random among candidates;
//! 4. if any endpoint lacks engine stats, fall back to `_qps_routing`.
//!
//! Also usable standalone as the `leastinflight` policy.

use super::qps::qps_routing;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

/// Picks by least in-flight within `band`; `None` if some endpoint has no engine stats.
pub fn least_inflight(view: &RouterView, band: u32, rng: &mut SimRng) -> Option<usize> {
    let mut loads = Vec::with_capacity(view.engine_stats.len());
    for e in view.engine_stats {
        let e = e.as_ref()?;
        loads.push(u64::from(e.running) + u64::from(e.waiting));
    }
    let min = *loads.iter().min()?;
    let limit = min + u64::from(band);
    let candidates: Vec<usize> = (0..loads.len()).filter(|&i| loads[i] <= limit).collect();
    Some(candidates[uniform_index(rng, candidates.len())])
}

/// The standalone policy.
pub struct LeastInflight {
    /// Tie band.
    pub band: u32,
}

impl RoutingPolicy for LeastInflight {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        match least_inflight(view, self.band, rng) {
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
            assert_eq!(least_inflight(&f.view(), 0, &mut rng), Some(1));
        }
    }

    #[test]
    fn band_one_is_uniform_over_min_plus_one() {
        // loads 5, 2, 3, 9: candidates {1, 2}.
        let f = ViewFixture::new(4).loads(&[(5, 0), (2, 0), (1, 2), (9, 0)]);
        let mut rng = stream(1, "t", 0);
        let mut counts = [0u32; 4];
        for _ in 0..10_000 {
            counts[least_inflight(&f.view(), 1, &mut rng).unwrap()] += 1;
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
        let mut p = LeastInflight { band: 1 };
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
}
