//! Router-local request statistics, after production-stack `stats/request_stats.py`.
//!
//! * `on_new_request` (at dispatch, before any other request can be routed): `in_prefill
//!   += 1`, and the dispatch time enters the endpoint's QPS window.
//! * `on_request_response` (first response chunk): `in_prefill -= 1` (floored), `in_decoding
//!   += 1`.
//! * `on_request_complete` (stream end): `in_decoding -= 1` (floored).
//! * `qps = dispatches in [now - W, now] / W`: it counts router dispatches, not completions.
//! * An endpoint that never received a request is *absent* from the stats, not zero; that is
//!   what `_qps_routing`'s "first endpoint without stats" rule keys on.

use std::collections::VecDeque;

use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};

pub use crate::view::RequestStatsEntry;

#[derive(Default, Clone)]
struct EndpointStats {
    seen: bool,
    dispatches: VecDeque<SimTime>,
    in_prefill: u32,
    in_decoding: u32,
}

/// The router's `RequestStatsMonitor`.
pub struct RequestStatsMonitor {
    window: SimDuration,
    eps: Vec<EndpointStats>,
}

impl RequestStatsMonitor {
    /// Monitor over `n` backends with a `window` sliding window.
    pub fn new(n: usize, window: SimDuration) -> Self {
        assert!(window.0 > 0, "request stats window must be positive");
        RequestStatsMonitor {
            window,
            eps: vec![EndpointStats::default(); n],
        }
    }

    /// A request was dispatched to `b` at `now`.
    pub fn on_new_request(&mut self, b: BackendId, now: SimTime) {
        let e = &mut self.eps[b.index()];
        e.seen = true;
        e.in_prefill += 1;
        e.dispatches.push_back(now);
    }

    /// The first response chunk from `b` arrived.
    pub fn on_request_response(&mut self, b: BackendId) {
        let e = &mut self.eps[b.index()];
        e.in_prefill = e.in_prefill.saturating_sub(1);
        e.in_decoding += 1;
    }

    /// A response stream from `b` finished.
    pub fn on_request_complete(&mut self, b: BackendId) {
        let e = &mut self.eps[b.index()];
        e.in_decoding = e.in_decoding.saturating_sub(1);
    }

    /// The stats of `b` as `get_request_stats(now)` returns them (`None` = absent).
    pub fn entry(&mut self, b: BackendId, now: SimTime) -> Option<RequestStatsEntry> {
        let window = self.window;
        let e = &mut self.eps[b.index()];
        if !e.seen {
            return None;
        }
        // Samples with timestamp < now - W are dropped.
        if now.0 >= window.0 {
            let cutoff = SimTime(now.0 - window.0);
            while e.dispatches.front().is_some_and(|t| *t < cutoff) {
                e.dispatches.pop_front();
            }
        }
        let n = e.dispatches.len() as u32;
        Some(RequestStatsEntry {
            window_dispatches: n,
            qps: f64::from(n) / window.as_secs_f64(),
            in_prefill: e.in_prefill,
            in_decoding: e.in_decoding,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_S;

    #[test]
    fn absent_until_first_dispatch_then_windowed() {
        let mut m = RequestStatsMonitor::new(2, SimDuration(60 * NS_PER_S));
        assert_eq!(m.entry(BackendId(0), SimTime(0)), None);
        m.on_new_request(BackendId(0), SimTime(0));
        m.on_new_request(BackendId(0), SimTime(30 * NS_PER_S));
        let e = m.entry(BackendId(0), SimTime(60 * NS_PER_S)).unwrap();
        assert_eq!(e.window_dispatches, 2, "t = now - W is still inside the window");
        assert!((e.qps - 2.0 / 60.0).abs() < 1e-12);
        let e = m.entry(BackendId(0), SimTime(60 * NS_PER_S + 1)).unwrap();
        assert_eq!(e.window_dispatches, 1);
        assert_eq!(e.in_prefill, 2);
        m.on_request_response(BackendId(0));
        m.on_request_complete(BackendId(0));
        m.on_request_complete(BackendId(0)); // floored at zero, like upstream
        let e = m.entry(BackendId(0), SimTime(200 * NS_PER_S)).unwrap();
        assert_eq!((e.window_dispatches, e.in_prefill, e.in_decoding), (0, 1, 0));
        assert!(m.entry(BackendId(1), SimTime(0)).is_none());
    }
}
