//! Backends joining, draining, leaving and restarting: discovery lists, the requests a
//! departing engine held, and fresh engine incarnations.

use super::{Event, Simulation, engine_counters, fresh_backend};
use crate::backend::Engine;
use crate::fleet::{FleetEventKind, Membership};
use crate::ids::{BackendId, RequestId};
use crate::time::SimTime;

impl Simulation<'_> {
    /// A fleet event on backend `b`.
    pub(super) fn on_fleet_event(&mut self, now: SimTime, b: BackendId, kind: FleetEventKind) {
        let i = b.index();
        match kind {
            FleetEventKind::Join => {
                match self.nodes[i].membership {
                    // Listed again with the engine (and cache) it still runs.
                    Membership::Draining => {}
                    // A new pod: a fresh engine.
                    Membership::Absent => self.replace_engine(now, b),
                    Membership::Active => return,
                }
                self.nodes[i].membership = Membership::Active;
                for r in &mut self.routers {
                    r.add_endpoint(b);
                }
                self.fleet.set_in_service(now, b, true);
            }
            FleetEventKind::Drain => {
                if self.nodes[i].membership != Membership::Active {
                    return;
                }
                self.nodes[i].membership = Membership::Draining;
                for r in &mut self.routers {
                    r.remove_endpoint(b);
                }
                self.fleet.set_in_service(now, b, false);
                self.maybe_drained(now, b);
            }
            FleetEventKind::Leave | FleetEventKind::Restart { .. } => {
                if self.nodes[i].membership == Membership::Absent {
                    // A drain already took it out.
                    return;
                }
                self.nodes[i].membership = Membership::Absent;
                for r in &mut self.routers {
                    r.remove_endpoint(b);
                    r.forget_kv(now, b);
                }
                self.fleet.set_in_service(now, b, false);
                // Requests it holds fail; the client hears of it one response latency later.
                let resp = self.cfg.response_latency;
                for k in self.log.requests.held_ids() {
                    let r = &mut self.log.requests[k];
                    if r.backend == b && r.t_engine.is_some() && r.t_finish_engine.is_none() && r.t_failed.is_none() {
                        r.t_failed = Some(now);
                        self.nodes[i].outstanding -= 1;
                        self.schedule(
                            now,
                            resp,
                            Event::Fail {
                                request: RequestId::from_index(k),
                            },
                        );
                    }
                }
                self.replace_engine(now, b);
                if let FleetEventKind::Restart { downtime } = kind {
                    if downtime.0 == 0 {
                        self.on_fleet_event(now, b, FleetEventKind::Join);
                    } else {
                        self.schedule(now, downtime, Event::Rejoin { backend: b });
                    }
                }
            }
        }
    }

    /// Replaces backend `b`'s engine with a fresh, empty one (its counters are kept for the
    /// summary; events of the old incarnation become stale).
    pub(super) fn replace_engine(&mut self, now: SimTime, b: BackendId) {
        let i = b.index();
        let mut fresh = fresh_backend(&self.cfg.models[i], self.coalesce);
        if self.routers[0].wants_kv_events()
            && let Engine::Vllm(e) = &mut fresh
        {
            e.enable_kv_events();
        }
        let old = self.engines.replace(b, fresh);
        let old = old.as_ref();
        let c = engine_counters(old);
        let node = &mut self.nodes[i];
        if let Engine::Vllm(e) = old {
            node.retired_coalesced += e.coalesced_steps();
        }
        let r = &mut node.retired;
        r.steps += c.steps;
        r.preemptions += c.preemptions;
        r.query_tokens += c.query_tokens;
        r.hit_tokens += c.hit_tokens;
        node.incarnation += 1;
        self.note_gauges(now, b);
        self.observe(now, b);
    }

    /// A draining backend that holds nothing more is gone.
    pub(super) fn maybe_drained(&mut self, now: SimTime, b: BackendId) {
        let i = b.index();
        if self.nodes[i].membership == Membership::Draining && self.nodes[i].outstanding == 0 {
            self.nodes[i].membership = Membership::Absent;
            for r in &mut self.routers {
                r.forget_kv(now, b);
            }
        }
    }
}
