//! production-stack `RoutingInterface._qps_routing`, the shared fallback.
//!
//! Iterate endpoints in discovery order; an endpoint absent from the request stats (never
//! used since router start) is returned immediately; otherwise keep the lowest QPS with a
//! strict `<`, so ties go to the earliest endpoint. It sees neither in-flight work nor the
//! engine queue: a backend holding a few long requests has few recent dispatches and keeps
//! looking the least busy (production-stack issue #1073).

use super::RouterView;

/// The position `_qps_routing` returns.
pub fn qps_routing(view: &RouterView) -> usize {
    assert!(!view.endpoints.is_empty(), "routing with no endpoints");
    let mut best = 0usize;
    let mut lowest = u32::MAX;
    for (pos, rs) in view.request_stats.iter().enumerate() {
        match rs {
            None => return pos,
            // QPS = dispatches / W with one W for all endpoints: compare the integer counts.
            Some(s) if s.window_dispatches < lowest => {
                lowest = s.window_dispatches;
                best = pos;
            }
            Some(_) => {}
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::ViewFixture;

    #[test]
    fn first_absent_endpoint_wins() {
        let f = ViewFixture::new(3).dispatches(&[Some(0), None, None]);
        assert_eq!(qps_routing(&f.view()), 1);
    }

    #[test]
    fn lowest_qps_ties_to_earliest() {
        let f = ViewFixture::new(3).dispatches(&[Some(5), Some(2), Some(2)]);
        assert_eq!(qps_routing(&f.view()), 1);
        let f = ViewFixture::new(3).dispatches(&[Some(2), Some(2), Some(2)]);
        assert_eq!(qps_routing(&f.view()), 0);
    }

    #[test]
    fn absent_beats_zero_qps_only_in_order() {
        // An endpoint with stats but zero QPS earlier in the list does not stop the scan:
        // the absent one later in the list is returned.
        let f = ViewFixture::new(2).dispatches(&[Some(0), None]);
        assert_eq!(qps_routing(&f.view()), 1);
    }
}
