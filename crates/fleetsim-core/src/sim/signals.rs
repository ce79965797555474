//! What the router and the recorders learn of the engines: `/metrics` scrapes (with the
//! gauges' lag, served from [`GaugeHistory`]), the fleet tracker's view of each step, and
//! the KV-event feed.

use super::{Event, Simulation};
use crate::backend::{Engine, Gauges};
use crate::faults::ScrapeOutcome;
use crate::fleet::Membership;
use crate::ids::{BackendId, ReplicaId, ScrapeSlot};
use crate::router::engine_stats::{EngineStatsEntry, ScrapeNext};
use crate::time::{SimDuration, SimTime};

impl Simulation<'_> {
    /// Replica `replica` reads the backend in `slot` of its scrape pass: the gauges as of
    /// `gauge_lag` (and any extra-lag fault) ago, or a failure.
    pub(super) fn on_scrape_read(&mut self, now: SimTime, replica: ReplicaId, slot: ScrapeSlot) {
        let Some(b) = self.routers[replica.index()].scrape_target(slot.index()) else {
            // Nothing listed: the pass is over at once.
            self.on_scrape_pass_end(now, replica);
            return;
        };
        self.catch_up(b);
        let lag = self.cfg.gauge_lag.0.saturating_add(self.faults.extra_lag(b, now).0);
        let g = if lag > 0 {
            self.nodes[b.index()].gauges.at(SimTime(now.0.saturating_sub(lag)))
        } else {
            self.engines.get(b).gauges()
        };
        let g = match self.faults.scrape(b, now, g) {
            // A backend that left refuses the connection.
            _ if self.nodes[b.index()].membership == Membership::Absent => None,
            ScrapeOutcome::Fail => None,
            ScrapeOutcome::Values(g) => Some(g),
        };
        let entry = g.map(|g| stats_entry(g, now));
        let (next, mut after) = self.routers[replica.index()].scrape_read(slot.index(), entry);
        if self.faults.hangs(b, now) {
            // Upstream's `requests.get(..., timeout=scrape_interval)`: the pass waits.
            after = after.max(self.cfg.router.engine_stats_interval);
        }
        let ev = match next {
            ScrapeNext::Read(p) => Event::ScrapeRead {
                replica,
                slot: ScrapeSlot::from_index(p),
            },
            ScrapeNext::PassEnd => Event::ScrapePassEnd { replica },
        };
        self.schedule(now, after, ev);
    }

    /// A scrape pass is over: the replica sleeps until the next one.
    pub(super) fn on_scrape_pass_end(&mut self, now: SimTime, replica: ReplicaId) {
        let sleep = self.routers[replica.index()].scrape_pass_end();
        self.schedule(
            now,
            sleep,
            Event::ScrapeRead {
                replica,
                slot: ScrapeSlot(0),
            },
        );
    }

    /// Records backend `b`'s published gauges for lagged scrapes (only when a lag applies).
    pub(super) fn note_gauges(&mut self, now: SimTime, b: BackendId) {
        let node = &mut self.nodes[b.index()];
        if node.history.0 > 0 {
            let g = self.engines.get(b).gauges();
            node.gauges.push(now, g, node.history);
        }
    }

    /// The fleet tracker and the KV-event feed see backend `b`'s state after a change.
    pub(super) fn observe(&mut self, now: SimTime, b: BackendId) {
        let be = self.engines.get(b);
        self.fleet.set(now, b, be.running(), be.waiting(), be.kv_used_blocks());
        self.hand_off_series();
        if self.routers[0].wants_kv_events() {
            let mut ev = Vec::new();
            // Only vLLM engines have a KV cache to report on.
            if let Engine::Vllm(e) = self.engines.get_mut(b) {
                e.drain_kv_events(&mut ev);
            }
            if !ev.is_empty() {
                // Every replica subscribes to the same feed.
                let last = self.routers.len() - 1;
                for r in &mut self.routers[..last] {
                    r.publish_kv_events(now, b, ev.clone());
                }
                self.routers[last].publish_kv_events(now, b, ev);
            }
        }
    }
}

/// Gauges as the router's engine stats read them at `now`.
pub(super) fn stats_entry(g: Gauges, now: SimTime) -> EngineStatsEntry {
    EngineStatsEntry {
        running: g.running,
        waiting: g.waiting,
        kv_used_blocks: g.kv_used_blocks,
        kv_total_blocks: g.kv_total_blocks,
        read_at: now,
    }
}

/// Gauge values over time, for `gauge_lag` (kept only when the lag is positive).
#[derive(Default)]
pub(super) struct GaugeHistory {
    changes: std::collections::VecDeque<(SimTime, Gauges)>,
}

impl GaugeHistory {
    /// Records a change at `t`, dropping history older than `keep` before `t` (one value
    /// from before that is kept: it is the value as of `t - keep`).
    pub(super) fn push(&mut self, t: SimTime, g: Gauges, keep: SimDuration) {
        if self.changes.back().is_none_or(|(_, v)| *v != g) {
            self.changes.push_back((t, g));
        }
        let horizon = t.0.saturating_sub(keep.0);
        while self.changes.len() > 1 && self.changes[1].0.0 <= horizon {
            self.changes.pop_front();
        }
    }

    /// Value as of `t` (zeros before the first step).
    pub(super) fn at(&self, t: SimTime) -> Gauges {
        let i = self.changes.partition_point(|(t0, _)| *t0 <= t);
        if i == 0 {
            Gauges::default()
        } else {
            self.changes[i - 1].1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_history_serves_the_value_as_of_a_past_time() {
        let mut h = GaugeHistory::default();
        let g = |running, waiting| Gauges {
            running,
            waiting,
            ..Gauges::default()
        };
        assert_eq!(h.at(SimTime(5)), g(0, 0), "before any step the gauges read zero");
        let keep = SimDuration(100);
        h.push(SimTime(10), g(1, 0), keep);
        h.push(SimTime(10), g(1, 0), keep); // unchanged values are not stored twice
        h.push(SimTime(20), g(2, 3), keep);
        h.push(SimTime(30), g(0, 0), keep);
        assert_eq!(h.changes.len(), 3);
        assert_eq!(h.at(SimTime(9)), g(0, 0));
        assert_eq!(h.at(SimTime(15)), g(1, 0));
        assert_eq!(h.at(SimTime(20)), g(2, 3));
        assert_eq!(h.at(SimTime(29)), g(2, 3));
        assert_eq!(h.at(SimTime(31)), g(0, 0));
        // History older than `keep` is pruned on push (one older value stays).
        h.push(SimTime(125), g(5, 5), keep);
        assert_eq!(h.changes.len(), 3);
        assert_eq!(h.at(SimTime(25)), g(2, 3));
    }
}
