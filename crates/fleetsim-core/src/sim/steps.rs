//! Engine iterations (vLLM steps: admissions, first tokens, finishes) and the queueing
//! model's service completions.

use super::{Event, Simulation};
use crate::ids::{BackendId, RequestId};
use crate::time::{SimDuration, SimTime};

impl Simulation<'_> {
    pub(super) fn start_step(&mut self, now: SimTime, b: BackendId) {
        let e = self.engines.vllm(b);
        self.step_events.clear();
        if let Some(d) = e.start_step(&mut self.step_events) {
            let factor = if self.faults.is_empty() {
                1.0
            } else {
                self.faults.slowdown(b, now)
            };
            let d = if factor == 1.0 {
                d
            } else {
                SimDuration((d.0 as f64 * factor).round() as u64)
            };
            for &(rid, cached) in &self.step_events.admitted {
                let r = &mut self.log.requests[rid.index()];
                r.t_admit = Some(now);
                r.cached_tokens = cached;
            }
            let incarnation = self.nodes[b.index()].incarnation;
            let ev = Event::StepDone {
                backend: b,
                incarnation,
            };
            // Collapse the certain stretch steps into one lane event.
            if self.collapsible && factor == 1.0 {
                let h = e.stretch_horizon();
                if h >= 2 && self.start_collapse(now, b, d, h, ev) {
                    return;
                }
            }
            match now.checked_add(d) {
                Some(t) => self.queue.push_lane(b.index(), t, ev),
                None => self.past_horizon = true,
            }
        }
    }

    pub(super) fn on_step_done(&mut self, now: SimTime, b: BackendId) {
        self.end_collapse(b);
        let e = self.engines.vllm(b);
        // The step's lists are read in place (by index, as `schedule` borrows all of
        // `self`): a coalesced step leaves them empty, and moving the struct out and back
        // cost more than the rest of its handling.
        let ev = &mut self.step_events;
        ev.clear();
        e.finish_step(now, ev);
        for &(g, n) in &ev.itl_runs {
            *self.itl_counts.entry(g).or_insert(0) += u64::from(n);
        }
        let resp = self.cfg.response_latency;
        for i in 0..self.step_events.first_tokens.len() {
            let rid = self.step_events.first_tokens[i];
            self.log.requests[rid.index()].t_first_token = Some(now);
            self.schedule(now, resp, Event::FirstChunk { request: rid });
        }
        for i in 0..self.step_events.finished.len() {
            let f = self.step_events.finished[i];
            let r = &mut self.log.requests[f.id.index()];
            r.t_finish_engine = Some(now);
            r.preemptions = f.preemptions;
            self.nodes[r.backend.index()].outstanding -= 1;
            self.schedule(now, resp, Event::Complete { request: f.id });
        }
        self.note_gauges(now, b);
        self.start_step(now, b);
        self.observe(now, b);
        self.maybe_drained(now, b);
    }

    pub(super) fn on_service_done(&mut self, now: SimTime, b: BackendId, rid: RequestId) {
        let resp = self.cfg.response_latency;
        let r = &mut self.log.requests[rid.index()];
        r.t_first_token = Some(now);
        r.t_finish_engine = Some(now);
        self.nodes[b.index()].outstanding -= 1;
        self.schedule(now, resp, Event::FirstChunk { request: rid });
        self.schedule(now, resp, Event::Complete { request: rid });
        let q = self.engines.queueing(b);
        if let Some((next, d)) = q.complete() {
            self.log.requests[next.index()].t_admit = Some(now);
            let incarnation = self.nodes[b.index()].incarnation;
            self.schedule(
                now,
                d,
                Event::ServiceDone {
                    backend: b,
                    request: next,
                    incarnation,
                },
            );
        }
        self.note_gauges(now, b);
        self.observe(now, b);
        self.maybe_drained(now, b);
    }
}
