//! Invariant checks after every event (`--invariants`), the records' way out of a
//! streaming run (request records in id order as they become final, time-series rows in
//! batches), and the run's result at the end.

use super::{RunResult, Simulation, engine_counters};
use crate::fleet::Membership;
use crate::ids::{BackendId, RequestId};
use crate::metrics::fidelity::ReplayStats;
use crate::metrics::{
    EngineCounters, FleetCost, RequestRec, RequestStats, SloStats, Summary, SummaryInputs, TsRow, summarize_stats,
};
use crate::time::SimTime;

/// Records on their way out of a run, and what the summary keeps of them.
pub(super) struct Outflow {
    /// The sink takes the request records.
    pub(super) requests: bool,
    /// The sink takes the time series.
    pub(super) series: bool,
    /// Final records not yet handed over, in id order, the first of them request `first`.
    batch: Vec<RequestRec>,
    first: usize,
    /// The summary's and the replay block's share of every record that has left.
    stats: RequestStats,
    replay: ReplayStats,
    /// The SLO's share (`[slo]` only).
    slo: Option<SloStats>,
}

impl Outflow {
    /// For `n_backends`; with `slo` when the scenario sets one.
    pub(super) fn new(n_backends: usize, slo: Option<SloStats>) -> Outflow {
        Outflow {
            slo,
            requests: false,
            series: false,
            batch: Vec::new(),
            first: 0,
            stats: RequestStats::new(n_backends),
            replay: ReplayStats::default(),
        }
    }
}

impl Simulation<'_> {
    /// Request `rid` reached `bit` (see [`crate::metrics::RecordWindow::mark`]); when the
    /// sink takes records, those that became final leave for it, in id order.
    pub(super) fn settle(&mut self, rid: RequestId, bit: u8) {
        if self.log.requests.mark(rid.index(), bit) {
            self.release(false);
        }
    }

    /// Moves the final records (`all`: every record held, at the end of the run) into the
    /// batch, taking the summary's share of each; hands the sink every full batch (`all`:
    /// the rest too).
    fn release(&mut self, all: bool) {
        let out = &mut self.outflow;
        let before = out.batch.len();
        let first = if all {
            let first = self.log.requests.held_ids().start;
            out.batch.extend(self.log.requests.take_all());
            first
        } else {
            self.log.requests.pop_final(&mut out.batch)
        };
        if before == 0 {
            out.first = first;
        }
        for r in &out.batch[before..] {
            out.stats.add(r);
            out.replay.add(self.workload, r);
            if let (Some(st), Some(c)) = (out.slo.as_mut(), self.cfg.slo.as_ref()) {
                st.add(c, self.workload.sessions[r.session.index()].group as usize, r);
            }
        }
        let Some(sink) = self.sink.as_deref_mut() else {
            return;
        };
        let size = sink.record_batch().max(1);
        while out.batch.len() >= size || (all && !out.batch.is_empty()) {
            let n = out.batch.len().min(size);
            let mut rest = Vec::with_capacity(if all { 0 } else { size });
            rest.extend(out.batch.drain(n..));
            sink.requests(out.first, std::mem::replace(&mut out.batch, rest));
            out.first += n;
        }
    }

    /// Hands the time-series rows recorded so far to the sink once a batch is full.
    #[inline]
    pub(super) fn hand_off_series(&mut self) {
        if self.outflow.series
            && let Some(sink) = self.sink.as_deref_mut()
            && self.fleet.series_len() >= sink.record_batch()
        {
            sink.series(self.fleet.take_series_batch());
        }
    }

    pub(super) fn check_invariants(&self, now: SimTime) -> Result<(), String> {
        if now < self.queue.now() {
            return Err("time went backwards".into());
        }
        for i in 0..self.nodes.len() {
            self.engines
                .get(BackendId::from_index(i))
                .check()
                .map_err(|e| format!("backend {i}: {e}"))?;
        }
        for (i, r) in self.routers.iter().enumerate() {
            r.check_view_age().map_err(|e| format!("router replica {i}: {e}"))?;
        }
        let arrived = self.log.requests.len();
        let failed =
            self.log.requests.left_failed() + self.log.requests.held().filter(|r| r.t_failed.is_some()).count();
        // Records that have left are final (finished or failed).
        let in_flight = self
            .log
            .requests
            .held()
            .filter(|r| r.t_done.is_none() && r.t_failed.is_none())
            .count();
        if arrived != self.finished + failed + in_flight {
            return Err(format!(
                "arrived {arrived} != finished {} + failed {failed} + in flight {in_flight}",
                self.finished
            ));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let m = &node.membership;
            let listed = self
                .routers
                .iter()
                .all(|r| r.endpoints().iter().any(|e| e.backend.index() == i));
            if listed != (*m == Membership::Active) {
                return Err(format!("backend {i} is {m:?} but listed = {listed}"));
            }
            if *m == Membership::Absent {
                // Nothing may still be at the engine of a backend that left: what remains
                // outstanding is on the wire, dispatched before it left (refused on arrival).
                let on_wire = self
                    .log
                    .requests
                    .held()
                    .filter(|r| r.backend.index() == i && r.t_failed.is_none() && r.t_engine.is_none())
                    .count() as u32;
                if node.outstanding != on_wire {
                    return Err(format!(
                        "backend {i} left but {} requests are outstanding on it ({on_wire} on the wire)",
                        node.outstanding
                    ));
                }
            }
        }
        let outstanding: u32 = self.nodes.iter().map(|n| n.outstanding).sum();
        let at_engine: u32 = (0..self.nodes.len())
            .map(|i| {
                let b = self.engines.get(BackendId::from_index(i));
                b.running() + b.waiting() + b.pending()
            })
            .sum();
        let in_transit = self
            .log
            .requests
            .held()
            .filter(|r| r.t_engine.is_none() && r.t_failed.is_none())
            .count() as u32;
        if outstanding != at_engine + in_transit {
            return Err(format!(
                "outstanding {outstanding} != at engines {at_engine} + in transit {in_transit}"
            ));
        }
        Ok(())
    }

    /// The run's result at `end`: the last records and series handed out (or kept), and
    /// the summary.
    pub(super) fn finish(mut self, end: SimTime) -> RunResult {
        self.fleet.finish(end);
        let (first_turns, last_turns, latched) = self.session_placements();
        let engines = self.engine_totals();
        if let Some(sink) = self.sink.as_deref_mut()
            && !self.decisions.rows.is_empty()
        {
            sink.decisions(self.decisions.take_batch());
        }
        let (requests, series) = self.last_records();
        let stats = std::mem::take(&mut self.outflow.stats);
        let replay = std::mem::take(&mut self.outflow.replay);
        let itl_ns: std::collections::BTreeMap<u64, u64> = std::mem::take(&mut self.itl_counts).into_iter().collect();
        let inputs = SummaryInputs {
            scenario: &self.cfg.name,
            seed: self.cfg.seed,
            policy: self.cfg.router.policy.describe(),
            end,
            events: self.events,
            names: self.cfg.backends.clone(),
            labels: self.cfg.labels.clone(),
            engines,
            planned: self.workload.total_requests() as u64,
            sessions: self.workload.sessions.len() as u64,
            sessions_hit_context_limit: self.workload.sessions.iter().filter(|s| s.hit_context_limit).count() as u64,
            latched_sessions: latched,
            first_turns,
            last_turns,
            regrets: &self.log.regrets,
            view_ages_ns: &self.log.view_ages,
            itl_ns: &itl_ns,
            rejected: self.rejected,
            abandoned: self.abandoned,
            unserved_models: self
                .unserved
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(m, &n)| (self.workload.models[m].clone(), n))
                .collect(),
        };
        let mut summary = summarize_stats(inputs, &self.fleet, stats, &self.log.branches);
        summary.replay = replay.finish(self.workload);
        if let Some((a, costs)) = self.autoscale_summary(end, summary.requests.finished) {
            for (b, c) in summary.backends.iter_mut().zip(costs) {
                b.cost = Some(c);
            }
            summary.autoscale = Some(a);
        }
        self.capacity_summary(&mut summary);
        RunResult {
            summary,
            series,
            episodes: self.fleet.take_episodes(),
            requests,
            decisions: self.decisions,
            session_keys: self.workload.sessions.iter().map(|s| s.key.clone()).collect(),
            event_log: self.event_log,
            collapsed_steps: self.collapsed_steps,
            coalesced_steps: self.nodes.iter().map(|n| n.retired_coalesced).sum::<u64>()
                + self
                    .engines
                    .vllm_engines()
                    .iter()
                    .map(|e| e.coalesced_steps())
                    .sum::<u64>(),
        }
    }

    /// The SLO block (`[slo]`) and a fixed fleet's cost (`[slo]` or `[price]` without an
    /// autoscaler, which prices its own pods).
    fn capacity_summary(&mut self, summary: &mut Summary) {
        if let (Some(st), Some(c)) = (self.outflow.slo.take(), self.cfg.slo.as_ref()) {
            let groups: Vec<usize> = self.workload.sessions.iter().map(|s| s.group as usize).collect();
            summary.slo = Some(st.finish(c, summary.sim_time_s, |i| groups[i]));
        }
        if let (Some(prices), None) = (self.cfg.prices.as_ref(), summary.autoscale.as_ref()) {
            let in_service: Vec<f64> = summary
                .backends
                .iter()
                .map(|b| (summary.sim_time_s - b.out_of_service_s).max(0.0))
                .collect();
            summary.fleet_cost = Some(FleetCost::of(prices, &in_service, summary.requests.finished));
        }
    }

    /// Per backend, the sessions whose first turn and whose last turn went there; and the
    /// sessions latched: their first turn went where a less busy backend was listed, and
    /// every later turn followed it.
    fn session_placements(&self) -> (Vec<u64>, Vec<u64>, u64) {
        let n = self.nodes.len();
        let mut first_turns = vec![0u64; n];
        let mut last_turns = vec![0u64; n];
        let mut latched = 0;
        for st in &self.sessions {
            if let Some(b) = st.last_backend {
                last_turns[b.index()] += 1;
            }
            if let Some(b) = st.first_backend {
                first_turns[b.index()] += 1;
                if st.first_turn_suboptimal && st.stayed {
                    latched += 1;
                }
            }
        }
        (first_turns, last_turns, latched)
    }

    /// Each backend's engine counters over the run: its engine's now plus those of the
    /// incarnations before its restarts.
    fn engine_totals(&self) -> Vec<EngineCounters> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let r = &node.retired;
                let c = engine_counters(self.engines.get(BackendId::from_index(i)));
                EngineCounters {
                    steps: c.steps + r.steps,
                    preemptions: c.preemptions + r.preemptions,
                    query_tokens: c.query_tokens + r.query_tokens,
                    hit_tokens: c.hit_tokens + r.hit_tokens,
                }
            })
            .collect()
    }

    /// The request records and series not yet handed out: the rest to the sink when it
    /// takes them (then none kept), else all kept, each record counted in the summary's
    /// statistics.
    fn last_records(&mut self) -> (Vec<RequestRec>, Vec<TsRow>) {
        let requests = if self.outflow.requests {
            self.release(true);
            Vec::new()
        } else {
            let kept = self.log.requests.take_all();
            for r in &kept {
                self.outflow.stats.add(r);
                self.outflow.replay.add(self.workload, r);
                if let (Some(st), Some(c)) = (self.outflow.slo.as_mut(), self.cfg.slo.as_ref()) {
                    st.add(c, self.workload.sessions[r.session.index()].group as usize, r);
                }
            }
            kept
        };
        let series = match self.sink.as_deref_mut() {
            Some(sink) if self.outflow.series => {
                let rest = self.fleet.take_series();
                if !rest.is_empty() {
                    sink.series(rest);
                }
                Vec::new()
            }
            _ => self.fleet.take_series(),
        };
        (requests, series)
    }
}
