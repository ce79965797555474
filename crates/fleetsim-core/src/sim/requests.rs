//! A request's life on the client and router side: sessions sending turns (closed loop,
//! open loop, happens-before pacing), the front balancer and routing decision, arrival at
//! the engine, completion, failures, retries, and the router's request stats.

use super::signals::stats_entry;
use super::{Event, STATS_COMPLETE, STATS_RECORDED, STATS_RESPONSE, Simulation};
use crate::backend::Engine;
use crate::fleet::Membership;
use crate::ids::{BackendId, ReplicaId, RequestId, SessionId};
use crate::metrics::{DecisionRow, RecordWindow, RequestRec};
use crate::router::Router;
use crate::time::SimTime;

impl Simulation<'_> {
    pub(super) fn on_turn(&mut self, now: SimTime, s: SessionId) {
        let turn = self.sessions[s.index()].next_turn;
        let workload = self.workload;
        let plan = &workload.sessions[s.index()];
        if let Some(rp) = plan.replay.as_deref().filter(|r| r.paced()) {
            // Happens-before: the first call now, the calls overlapping it at their offsets.
            for &t in rp.roots_after_first() {
                let d = plan.turns[t as usize].think_before;
                self.schedule(now, d, Event::Issue { session: s, turn: t });
            }
            self.send_turn(now, s, 0);
            return;
        }
        if plan.open_loop {
            // Open loop: the next turn follows this one's sending, not its completion.
            self.sessions[s.index()].next_turn += 1;
            if let Some(next) = plan.turns.get(turn as usize + 1) {
                let d = next.think_before;
                self.schedule(now, d, Event::TurnArrival { session: s });
            }
        }
        self.send_turn(now, s, turn);
    }

    /// The fewest requests outstanding on any backend discovery lists (the best pick in
    /// truth), or `None` when nothing is listed.
    pub(super) fn least_outstanding(&self) -> Option<u32> {
        self.nodes
            .iter()
            .filter(|n| n.membership == Membership::Active)
            .map(|n| n.outstanding)
            .min()
    }

    /// [`Self::least_outstanding`] among the endpoints replica `replica` may send a request
    /// for `model` to (all listed ones when every one serves it).
    fn least_outstanding_for(&self, replica: usize, model: u32) -> Option<u32> {
        let c = self.routers[replica].candidates(model);
        if c.len() == self.routers[replica].endpoints().len() {
            return self.least_outstanding();
        }
        c.iter().map(|e| self.nodes[e.backend.index()].outstanding).min()
    }

    /// Sends `turn` of session `s` through the front balancer and a router replica.
    pub(super) fn send_turn(&mut self, now: SimTime, s: SessionId, turn: u32) {
        let plan = &self.workload.sessions[s.index()];
        let key = plan.sends_key.then_some(plan.key.as_str());
        let replica = self.front.pick(key, self.routers.len());
        let model = plan.model;
        if self.routers[replica].candidates(model).is_empty() {
            if !self.routers[replica].fleet_serves(model) {
                // No backend serves the model: not found (404), never retried.
                self.unserved[model as usize] += 1;
                self.give_up(s, turn);
                return;
            }
            // No endpoint to route to: the router answers with an error at once.
            self.rejected += 1;
            self.retry_or_abandon(now, s, turn);
            return;
        }
        let content = self.workload.content(s, turn as usize);
        let rid = RequestId::from_index(self.log.requests.len());
        if self.cfg.router.fresh_signals {
            let engines = &self.engines;
            self.routers[replica].set_fresh_engine_stats(now, |b| stats_entry(engines.get(b).gauges(), now));
        }
        let audit = self.opts.record_decisions.then_some(&mut self.decisions.scratch);
        self.log.replica_of.push(ReplicaId::from_index(replica));
        let (b, d) = self.routers[replica].route(now, rid, (key, model), &content, audit);
        let min = self
            .least_outstanding_for(replica, model)
            .expect("a listed endpoint was picked");
        self.log.regrets.push(self.nodes[b.index()].outstanding - min);
        if let Some(age) = self.routers[replica].last_view_age() {
            self.log.view_ages.push(age.0);
        }
        if self.opts.record_decisions {
            self.record_decision(DecisionRow {
                t: now,
                request: rid,
                session: s,
                turn,
                backend: b,
                branch: d.branch,
                match_chars: d.match_chars,
            });
        }
        self.log.branches.push(d.branch);
        self.note_pick(s, turn, b, min);
        self.nodes[b.index()].outstanding += 1;
        self.nodes[b.index()].routed += 1;
        self.log.requests.push(RequestRec::routed(
            s,
            turn,
            b,
            d.branch,
            content.prompt_tokens,
            content.output_tokens,
            now,
        ));
        let lag = self.routers[replica].request_stats_lag();
        if lag.0 == 0 {
            self.routers[replica].on_new_request(b, now);
            self.log.stats_state.push(STATS_RECORDED);
            self.settle(rid, RecordWindow::DISPATCH_RECORDED);
        } else {
            self.log.stats_state.push(0);
            self.schedule(now, lag, Event::RecordDispatch { request: rid });
        }
        self.schedule(now, self.cfg.dispatch_latency, Event::BackendArrival { request: rid });
    }

    /// Adds a decision to the audit with the view it was made on and the true outstanding
    /// counts, handing a full batch to the sink.
    fn record_decision(&mut self, row: DecisionRow) {
        self.decisions.commit_view();
        self.decisions.truth.extend(self.nodes.iter().map(|n| n.outstanding));
        self.decisions.rows.push(row);
        if let Some(sink) = self.sink.as_deref_mut()
            && self.decisions.views.len() >= sink.batch_entries()
        {
            sink.decisions(self.decisions.take_batch());
        }
    }

    /// Session `s`'s books on where its turns went: the first turn's backend (and whether a
    /// less busy one was listed, `min` outstanding), and whether it stayed there since.
    fn note_pick(&mut self, s: SessionId, turn: u32, b: BackendId, min: u32) {
        let st = &mut self.sessions[s.index()];
        st.last_backend = Some(b);
        if turn == 0 {
            st.first_backend = Some(b);
            st.first_turn_suboptimal = self.nodes[b.index()].outstanding > min;
            st.stayed = true;
        } else if st.first_backend != Some(b) {
            st.stayed = false;
        }
    }

    pub(super) fn on_backend_arrival(&mut self, now: SimTime, rid: RequestId) {
        let r = &mut self.log.requests[rid.index()];
        let b = r.backend;
        if self.nodes[b.index()].membership == Membership::Absent {
            // The backend left while the request was on its way: connection refused.
            r.t_failed = Some(now);
            self.nodes[b.index()].outstanding -= 1;
            self.schedule(now, self.cfg.response_latency, Event::Fail { request: rid });
            return;
        }
        r.t_engine = Some(now);
        self.uncollapse(b);
        let r = &mut self.log.requests[rid.index()];
        let plan = &self.workload.sessions[r.session.index()];
        let turn = r.turn as usize;
        match self.engines.get_mut(b) {
            Engine::Vllm(e) => {
                if e.enqueue(rid, self.workload.content(r.session, turn)) {
                    self.start_step(now, b);
                }
            }
            Engine::Queueing(q) => {
                let service = plan.turns[turn].service;
                if let Some(d) = q.arrive(rid, service) {
                    self.log.requests[rid.index()].t_admit = Some(now);
                    let incarnation = self.nodes[b.index()].incarnation;
                    self.schedule(
                        now,
                        d,
                        Event::ServiceDone {
                            backend: b,
                            request: rid,
                            incarnation,
                        },
                    );
                }
                self.note_gauges(now, b);
            }
        }
        self.observe(now, b);
    }

    /// The client learns that `rid` failed: the router closes its books on it, and the
    /// client retries the turn or gives up.
    pub(super) fn on_fail(&mut self, now: SimTime, rid: RequestId) {
        self.router_of(rid).on_finished(rid);
        let r = &self.log.requests[rid.index()];
        let (b, s, turn) = (r.backend, r.session, r.turn);
        let what = if r.t_first_chunk.is_none() {
            STATS_RESPONSE | STATS_COMPLETE
        } else {
            STATS_COMPLETE
        };
        self.router_stats_event(rid, b, what);
        self.settle(rid, RecordWindow::ENDED);
        self.retry_or_abandon(now, s, turn);
    }

    /// After a failed attempt of `turn`: retry after the client's backoff, or give up the
    /// turn and the rest of the session.
    pub(super) fn retry_or_abandon(&mut self, now: SimTime, s: SessionId, turn: u32) {
        // Open loop: several turns of a session may be in flight; each counts its own
        // attempts.
        let a = if self.workload.sessions[s.index()].open_loop {
            let a = self.open_attempts.entry((s.0, turn)).or_insert(0);
            *a += 1;
            *a
        } else {
            let a = &mut self.attempts[s.index()];
            *a += 1;
            *a
        };
        if a <= self.cfg.client.max_retries {
            let u: f64 = rand::RngExt::random(&mut self.streams.retry);
            let d = self.cfg.client.retry_delay(a, u);
            self.schedule(now, d, Event::Resend { session: s, turn });
        } else {
            self.give_up(s, turn);
        }
    }

    /// The client gives `turn` of session `s` up: open loop, only it (paced: and the
    /// calls waiting for it); closed loop, it and the session's later turns.
    fn give_up(&mut self, s: SessionId, turn: u32) {
        self.open_attempts.remove(&(s.0, turn));
        let plan = &self.workload.sessions[s.index()];
        let left = if plan.open_loop {
            plan.replay
                .as_deref()
                .filter(|r| r.paced())
                .map_or(1, |r| r.lost_with(turn))
        } else {
            plan.turns.len() - turn as usize
        };
        self.total -= left;
        self.abandoned += left as u64;
    }

    /// Applies a response-side request-stats update, or, if the dispatch itself has not
    /// reached the stats yet (`request_stats_lag_s`), defers it so updates stay in order.
    pub(super) fn router_stats_event(&mut self, rid: RequestId, b: BackendId, what: u8) {
        let st = &mut self.log.stats_state[rid.index()];
        if *st & STATS_RECORDED == 0 {
            *st |= what;
        } else {
            self.apply_response_stats(rid, b, what);
        }
    }

    /// The replica that routed `rid`.
    pub(super) fn router_of(&mut self, rid: RequestId) -> &mut Router {
        &mut self.routers[self.log.replica_of[rid.index()].index()]
    }

    /// Applies the response-side updates named by `flags`, first chunk before completion.
    pub(super) fn apply_response_stats(&mut self, rid: RequestId, b: BackendId, flags: u8) {
        if flags & STATS_RESPONSE != 0 {
            self.router_of(rid).on_request_response(b);
        }
        if flags & STATS_COMPLETE != 0 {
            self.router_of(rid).on_request_complete(b);
        }
    }

    pub(super) fn on_complete(&mut self, now: SimTime, rid: RequestId) {
        self.router_of(rid).on_finished(rid);
        let r = &mut self.log.requests[rid.index()];
        r.t_done = Some(now);
        let (b, s, turn) = (r.backend, r.session, r.turn);
        self.router_stats_event(rid, b, STATS_COMPLETE);
        self.settle(rid, RecordWindow::ENDED);
        self.finished += 1;
        self.attempts[s.index()] = 0;
        if self.workload.sessions[s.index()].open_loop {
            if !self.open_attempts.is_empty() {
                self.open_attempts.remove(&(s.0, turn));
            }
            let workload = self.workload;
            let plan = &workload.sessions[s.index()];
            if let Some(rp) = plan.replay.as_deref().filter(|r| r.paced()) {
                for &t in rp.waiting_for(turn) {
                    let d = plan.turns[t as usize].think_before;
                    self.schedule(now, d, Event::Issue { session: s, turn: t });
                }
            }
            return;
        }
        let st = &mut self.sessions[s.index()];
        st.next_turn += 1;
        let plan = &self.workload.sessions[s.index()];
        if let Some(next) = plan.turns.get(st.next_turn as usize) {
            self.queue
                .push(now + next.think_before, Event::TurnArrival { session: s });
        }
    }
}
