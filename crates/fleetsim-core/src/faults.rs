//! Signal faults and backend slowdowns on a timeline (`[[faults]]` in a scenario): what
//! breaks in production without any error being raised.
//!
//! * `scrape_fail`: the backend's `/metrics` read fails, so its entry disappears from the
//!   published engine stats (production-stack then treats it as absent: the least-in-flight
//!   fallback drops back to `_qps_routing`).
//! * `zero_stats`: the read succeeds but parses to zeros, as when the engine's metrics carry
//!   another name prefix (production-stack issue #1074): the backend looks idle forever.
//! * `frozen_stats`: the first value read inside the window is repeated until it ends
//!   (a stuck exporter or cache).
//! * `extra_lag`: values are `lag_s` older than the engine's state.
//! * `scrape_hang`: the backend accepts the `/metrics` connection and never answers.
//!   Upstream's scraper reads every endpoint one after another with `requests.get(url +
//!   "/metrics", timeout=self.scrape_interval)` (production-stack
//!   `stats/engine_stats.py`, `_scrape_one_endpoint` and `_scrape_metrics`), so the read
//!   fails only after a whole interval, and every backend behind it in the pass is read
//!   that much later: the published view ages by an extra interval for the whole fleet.
//! * `slowdown`: the backend's engine steps take `factor` times longer (a degraded or
//!   smaller GPU; vLLM backends only).
//!
//! Each fault applies to one backend over `[from_s, until_s)`.
//!
//! Owns: the fault timeline. May not see: the router's or backends' state. Invariant: a
//! fault changes only what it names, from its start to its end.

use crate::backend::Gauges;
use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};

/// What goes wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultKind {
    /// The scrape fails: no entry.
    ScrapeFail,
    /// The scrape hangs until the scraper's timeout (the interval), then fails.
    ScrapeHang,
    /// The scrape reads zeros.
    ZeroStats,
    /// The first value read in the window is repeated.
    FrozenStats,
    /// Values lag the engine by this much.
    ExtraLag(SimDuration),
    /// Engine steps take this many times longer.
    Slowdown(f64),
}

impl FaultKind {
    /// Name as written in scenarios.
    pub fn as_str(&self) -> &'static str {
        match self {
            FaultKind::ScrapeFail => "scrape_fail",
            FaultKind::ScrapeHang => "scrape_hang",
            FaultKind::ZeroStats => "zero_stats",
            FaultKind::FrozenStats => "frozen_stats",
            FaultKind::ExtraLag(_) => "extra_lag",
            FaultKind::Slowdown(_) => "slowdown",
        }
    }
}

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// The backend affected.
    pub backend: BackendId,
    /// What happens.
    pub kind: FaultKind,
    /// Start (inclusive).
    pub from: SimTime,
    /// End (exclusive).
    pub until: SimTime,
}

impl Fault {
    /// Whether it applies to backend `b` at `now`.
    pub fn covers(&self, b: BackendId, now: SimTime) -> bool {
        self.active(b, now)
    }

    fn active(&self, b: BackendId, now: SimTime) -> bool {
        self.backend == b && self.from <= now && now < self.until
    }
}

/// What a scrape of one backend returns under the active faults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScrapeOutcome {
    /// The read fails.
    Fail,
    /// These values (zeros, a frozen copy, or the values read).
    Values(Gauges),
}

/// The fault timeline with the per-fault state it needs (frozen values).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    faults: Vec<Fault>,
    frozen: Vec<Option<Gauges>>,
}

impl Faults {
    /// A timeline.
    pub fn new(faults: Vec<Fault>) -> Self {
        let n = faults.len();
        Faults {
            faults,
            frozen: vec![None; n],
        }
    }

    /// True if no fault is configured.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// The largest extra lag configured for `b` (history must be kept that far back).
    pub fn max_lag(&self, b: BackendId) -> SimDuration {
        self.faults
            .iter()
            .filter(|f| f.backend == b)
            .filter_map(|f| match f.kind {
                FaultKind::ExtraLag(l) => Some(l),
                _ => None,
            })
            .max()
            .unwrap_or(SimDuration(0))
    }

    /// Extra reporting lag of `b` at `now` (the first active `extra_lag`; 0 if none).
    pub fn extra_lag(&self, b: BackendId, now: SimTime) -> SimDuration {
        self.faults
            .iter()
            .filter(|f| f.active(b, now))
            .find_map(|f| match f.kind {
                FaultKind::ExtraLag(l) => Some(l),
                _ => None,
            })
            .unwrap_or(SimDuration(0))
    }

    /// What a scrape of `b` at `now` returns, given the values read (`live`, already lagged
    /// by [`Faults::extra_lag`]). The first matching fault in file order wins.
    pub fn scrape(&mut self, b: BackendId, now: SimTime, live: Gauges) -> ScrapeOutcome {
        for (i, f) in self.faults.iter().enumerate() {
            if !f.active(b, now) {
                continue;
            }
            match f.kind {
                FaultKind::ScrapeFail | FaultKind::ScrapeHang => return ScrapeOutcome::Fail,
                FaultKind::ZeroStats => {
                    return ScrapeOutcome::Values(Gauges {
                        kv_total_blocks: live.kv_total_blocks,
                        ..Gauges::default()
                    });
                }
                FaultKind::FrozenStats => return ScrapeOutcome::Values(*self.frozen[i].get_or_insert(live)),
                FaultKind::ExtraLag(_) | FaultKind::Slowdown(_) => {}
            }
        }
        ScrapeOutcome::Values(live)
    }

    /// True if a scrape of `b` started at `now` hangs until the scraper's timeout.
    pub fn hangs(&self, b: BackendId, now: SimTime) -> bool {
        self.faults
            .iter()
            .any(|f| f.kind == FaultKind::ScrapeHang && f.active(b, now))
    }

    /// The step-time factor of `b` at `now` (product of active slowdowns).
    pub fn slowdown(&self, b: BackendId, now: SimTime) -> f64 {
        self.faults
            .iter()
            .filter(|f| f.active(b, now))
            .filter_map(|f| match f.kind {
                FaultKind::Slowdown(x) => Some(x),
                _ => None,
            })
            .product()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(running: u32) -> Gauges {
        Gauges {
            running,
            ..Gauges::default()
        }
    }

    #[test]
    fn faults_apply_in_their_window_only() {
        let b = BackendId(1);
        let mut f = Faults::new(vec![
            Fault {
                backend: b,
                kind: FaultKind::FrozenStats,
                from: SimTime(10),
                until: SimTime(20),
            },
            Fault {
                backend: b,
                kind: FaultKind::ScrapeFail,
                from: SimTime(30),
                until: SimTime(40),
            },
            Fault {
                backend: b,
                kind: FaultKind::Slowdown(2.5),
                from: SimTime(0),
                until: SimTime(100),
            },
        ]);
        assert_eq!(f.scrape(b, SimTime(5), g(1)), ScrapeOutcome::Values(g(1)));
        assert_eq!(f.scrape(b, SimTime(10), g(2)), ScrapeOutcome::Values(g(2)));
        assert_eq!(
            f.scrape(b, SimTime(15), g(7)),
            ScrapeOutcome::Values(g(2)),
            "frozen at the first read"
        );
        assert_eq!(
            f.scrape(b, SimTime(20), g(7)),
            ScrapeOutcome::Values(g(7)),
            "until is exclusive"
        );
        assert_eq!(f.scrape(b, SimTime(35), g(7)), ScrapeOutcome::Fail);
        assert_eq!(f.scrape(BackendId(0), SimTime(35), g(7)), ScrapeOutcome::Values(g(7)));
        assert_eq!(f.slowdown(b, SimTime(50)), 2.5);
        assert_eq!(f.slowdown(b, SimTime(100)), 1.0);
    }

    #[test]
    fn scrape_hang_fails_and_holds_the_pass_only_in_its_window() {
        let b = BackendId(0);
        let mut f = Faults::new(vec![Fault {
            backend: b,
            kind: FaultKind::ScrapeHang,
            from: SimTime(10),
            until: SimTime(20),
        }]);
        assert!(!f.hangs(b, SimTime(9)));
        assert!(f.hangs(b, SimTime(10)));
        assert!(!f.hangs(BackendId(1), SimTime(10)));
        assert!(!f.hangs(b, SimTime(20)));
        assert_eq!(f.scrape(b, SimTime(15), g(3)), ScrapeOutcome::Fail);
        assert_eq!(f.scrape(b, SimTime(25), g(3)), ScrapeOutcome::Values(g(3)));
    }
}
