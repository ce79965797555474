//! The engine-stats scraper, after production-stack `stats/engine_stats.py`.
//!
//! * A background loop: scrape every endpoint **sequentially** (`GET /metrics`, one after
//!   the other, each taking `scrape_duration`), then sleep, then repeat. The first pass
//!   starts at router start-up (t = 0).
//! * Upstream sleeps `int(interval / 1)` one-second ticks, so the effective period is
//!   `floor(interval) + sum of scrape durations`. We do the same for intervals of 1 s and
//!   more; sub-second intervals (not expressible with upstream's integer flag) are used as
//!   given, for exploration.
//! * Results become visible to routing only when the whole pass ends: the dict is then
//!   replaced, and an endpoint whose scrape failed is **deleted** (so "lacks engine stats"
//!   means its last scrape failed, or it has not been scraped since start-up).
//! * Each entry keeps the time its value was read, so a policy's view carries its real age.

use crate::ids::BackendId;
use crate::time::{NS_PER_S, SimDuration};

pub use crate::view::EngineStatsEntry;

/// What happens after a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrapeNext {
    /// Read endpoint at this position next.
    Read(usize),
    /// The pass is over; publish.
    PassEnd,
}

/// Scraper state. Entries are kept per backend; a pass reads the endpoints service discovery
/// listed when it started, in that order (upstream calls `get_endpoint_info()` at the top of
/// each pass), and its result replaces the published dict wholesale.
pub struct EngineStatsScraper {
    interval: SimDuration,
    sleep: SimDuration,
    scrape_duration: SimDuration,
    /// Every endpoint polled at once on a fixed ticker (llm-d, AIBrix) rather than one after
    /// another with a floored sleep between passes (production-stack).
    parallel: bool,
    published: Vec<Option<EngineStatsEntry>>,
    collecting: Vec<Option<EngineStatsEntry>>,
    /// The endpoints of the pass in progress, in read order.
    pass: Vec<BackendId>,
    passes: u64,
}

impl EngineStatsScraper {
    /// A scraper over a fleet of `n` backends.
    pub fn new(n: usize, interval: SimDuration, scrape_duration: SimDuration) -> Self {
        EngineStatsScraper {
            interval,
            sleep: upstream_sleep(interval),
            scrape_duration,
            parallel: false,
            published: vec![None; n],
            collecting: vec![None; n],
            pass: Vec::with_capacity(n),
            passes: 0,
        }
    }

    /// A scraper that polls every endpoint concurrently every `interval` (a Go ticker: the
    /// period is the interval, not interval + pass time), each poll taking `scrape_duration`.
    pub fn parallel(n: usize, interval: SimDuration, scrape_duration: SimDuration) -> Self {
        EngineStatsScraper {
            sleep: SimDuration(interval.0.saturating_sub(scrape_duration.0)),
            parallel: true,
            ..Self::new(n, interval, scrape_duration)
        }
    }

    /// Starts a pass over `listed` (discovery order); false if there is nothing to read.
    pub fn begin_pass(&mut self, listed: impl Iterator<Item = BackendId>) -> bool {
        self.pass.clear();
        self.pass.extend(listed);
        !self.pass.is_empty()
    }

    /// The backend read at position `pos` of the current pass.
    pub fn target(&self, pos: usize) -> BackendId {
        self.pass[pos]
    }

    /// Time spent sleeping after a pass: the floored interval (sequential passes), or what
    /// is left of the ticker period (concurrent polls; a pass with nothing to poll takes no
    /// time, so the whole period).
    pub fn sleep(&self) -> SimDuration {
        if self.parallel && self.pass.is_empty() {
            self.interval
        } else {
            self.sleep
        }
    }

    /// Delay after reading endpoint `pos` before the next read (or the pass end): the whole
    /// round trip when polls are sequential; when they are concurrent, all reads happen at
    /// the pass start and only the last one waits for the round trip.
    pub fn delay_after(&self, pos: usize) -> SimDuration {
        if self.parallel && pos + 1 < self.pass.len() {
            SimDuration(0)
        } else {
            self.scrape_duration
        }
    }

    /// Duration of one endpoint's scrape.
    pub fn scrape_duration(&self) -> SimDuration {
        self.scrape_duration
    }

    /// Records the read at position `pos` of the pass (`None` = the scrape failed) and says
    /// what comes next; the caller schedules it [`Self::delay_after`] later.
    pub fn record(&mut self, pos: usize, entry: Option<EngineStatsEntry>) -> ScrapeNext {
        self.collecting[self.pass[pos].index()] = entry;
        if pos + 1 < self.pass.len() {
            ScrapeNext::Read(pos + 1)
        } else {
            ScrapeNext::PassEnd
        }
    }

    /// Forgets the published stats (a router restart); the next pass repopulates them.
    pub fn clear_published(&mut self) {
        self.published.iter_mut().for_each(|e| *e = None);
    }

    /// Ends the pass: what it collected replaces the published dict (failed reads, and
    /// endpoints the pass did not read, are absent).
    pub fn publish(&mut self) {
        std::mem::swap(&mut self.published, &mut self.collecting);
        self.collecting.iter_mut().for_each(|e| *e = None);
        self.passes += 1;
    }

    /// The published stats of backend `b`.
    pub fn entry(&self, b: BackendId) -> Option<EngineStatsEntry> {
        self.published[b.index()]
    }

    /// Overwrites `b`'s published entry (the oracle view of a counterfactual run).
    pub fn set_published(&mut self, b: BackendId, e: EngineStatsEntry) {
        self.published[b.index()] = Some(e);
    }

    /// Completed passes.
    pub fn passes(&self) -> u64 {
        self.passes
    }
}

/// `_sleep_or_break`: `int(interval / 1)` sleeps of 1 s (sub-second intervals: as given).
pub fn upstream_sleep(interval: SimDuration) -> SimDuration {
    if interval.0 >= NS_PER_S {
        SimDuration(interval.0 / NS_PER_S * NS_PER_S)
    } else {
        interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimTime;

    #[test]
    fn sleep_is_floored_like_upstream() {
        assert_eq!(upstream_sleep(SimDuration(10 * NS_PER_S)), SimDuration(10 * NS_PER_S));
        assert_eq!(upstream_sleep(SimDuration(2_500_000_000)), SimDuration(2 * NS_PER_S));
        assert_eq!(upstream_sleep(SimDuration(500_000_000)), SimDuration(500_000_000));
    }

    #[test]
    fn concurrent_polls_read_at_once_on_a_ticker() {
        let mut s = EngineStatsScraper::parallel(3, SimDuration(50), SimDuration(10));
        assert_eq!(s.sleep(), SimDuration(50), "nothing to poll: the whole period");
        assert!(s.begin_pass((0..3).map(BackendId)));
        assert_eq!(
            (s.delay_after(0), s.delay_after(1), s.delay_after(2)),
            (SimDuration(0), SimDuration(0), SimDuration(10))
        );
        assert_eq!(s.sleep(), SimDuration(40), "period = interval");
        let mut s = EngineStatsScraper::new(3, SimDuration(50), SimDuration(10));
        s.begin_pass((0..3).map(BackendId));
        assert_eq!(s.delay_after(0), SimDuration(10));
    }

    #[test]
    fn pass_publishes_atomically_and_drops_failures() {
        let mut s = EngineStatsScraper::new(2, SimDuration(NS_PER_S), SimDuration(1));
        let e = |r| {
            Some(EngineStatsEntry {
                running: r,
                waiting: 0,
                kv_used_blocks: 0,
                kv_total_blocks: 0,
                read_at: SimTime(0),
            })
        };
        let (b0, b1) = (BackendId(0), BackendId(1));
        assert!(s.begin_pass([b0, b1].into_iter()));
        assert_eq!(s.record(0, e(3)), ScrapeNext::Read(1));
        assert_eq!(s.entry(b0), None, "not visible before the pass ends");
        assert_eq!(s.record(1, e(4)), ScrapeNext::PassEnd);
        s.publish();
        assert_eq!(s.entry(b0).unwrap().running, 3);
        s.begin_pass([b0, b1].into_iter());
        s.record(0, None);
        s.record(1, e(5));
        s.publish();
        assert_eq!(s.entry(b0), None, "a failed scrape deletes the entry");
        assert_eq!(s.entry(b1).unwrap().running, 5);
        // Discovery order changed (backend 0 left, then came back last): the pass reads
        // in the new order, and an endpoint it did not read is absent.
        s.begin_pass([b1].into_iter());
        assert_eq!(s.target(0), b1);
        assert_eq!(s.record(0, e(6)), ScrapeNext::PassEnd);
        s.publish();
        assert_eq!((s.entry(b0), s.entry(b1).unwrap().running), (None, 6));
        assert_eq!(s.passes(), 3);
    }
}
