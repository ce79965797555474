//! Scraped load corrected by the router's own dispatches since each entry was read: the
//! `scraped_plus_sent` fallback of `prefixaware`, one of the candidate fixes of
//! production-stack #1073.
//!
//! Within one scrape window every decision of PR #1089 sees the same loads, so a burst
//! piles onto whichever backends looked least loaded at the last scrape. Adding what this
//! router itself dispatched to each backend after that backend's entry was read removes
//! the router's own blind spot (it cannot see other replicas' dispatches, nor requests
//! that finished since the read, so the estimate only ever over-counts finished work).

use std::collections::VecDeque;

use super::RouterView;
use crate::time::SimTime;

/// This router's dispatch times per backend (by backend index), pruned as scrapes age out.
#[derive(Default)]
pub struct SentSinceScrape {
    sent: Vec<VecDeque<SimTime>>,
}

impl SentSinceScrape {
    /// `scraped running + waiting + dispatches at or after the entry's read time`, per
    /// endpoint of the view; `None` if some endpoint has no engine stats. Forgets the
    /// dispatches older than each entry (read times only move forward).
    pub fn loads(&mut self, view: &RouterView) -> Option<Vec<u64>> {
        let mut out = Vec::with_capacity(view.endpoints.len());
        for (ep, e) in view.endpoints.iter().zip(view.engine_stats) {
            let e = e.as_ref()?;
            let sent = self.log(ep.backend.index());
            while sent.front().is_some_and(|&t| t < e.read_at) {
                sent.pop_front();
            }
            out.push(u64::from(e.running) + u64::from(e.waiting) + sent.len() as u64);
        }
        Some(out)
    }

    /// Dispatches to backend `index` at or after `read_at`, forgetting the older ones.
    pub fn since(&mut self, index: usize, read_at: SimTime) -> u64 {
        let sent = self.log(index);
        while sent.front().is_some_and(|&t| t < read_at) {
            sent.pop_front();
        }
        sent.len() as u64
    }

    /// This router dispatched a request to backend `index` at `now`.
    pub fn record(&mut self, index: usize, now: SimTime) {
        self.log(index).push_back(now);
    }

    fn log(&mut self, index: usize) -> &mut VecDeque<SimTime> {
        if self.sent.len() <= index {
            self.sent.resize_with(index + 1, VecDeque::new);
        }
        &mut self.sent[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::ViewFixture;
    use crate::time::secs_to_ns;

    fn at(s: f64) -> SimTime {
        SimTime(secs_to_ns(s))
    }

    #[test]
    fn counts_only_dispatches_after_each_read() {
        // Both entries were read at t = 0 (the fixture's read time).
        let f = ViewFixture::new(2).loads(&[(1, 0), (0, 0)]).at(5.0);
        let mut s = SentSinceScrape::default();
        assert_eq!(s.loads(&f.view()), Some(vec![1, 0]));
        s.record(1, at(1.0));
        s.record(1, at(2.0));
        s.record(0, at(3.0));
        assert_eq!(s.loads(&f.view()), Some(vec![2, 2]));
        // A newer read of backend 1 at t = 1.5 forgets the dispatch at t = 1.
        let mut f = f;
        f.engine[1].as_mut().unwrap().read_at = at(1.5);
        assert_eq!(s.loads(&f.view()), Some(vec![2, 1]));
        f.engine[0] = None;
        assert_eq!(s.loads(&f.view()), None);
    }
}
