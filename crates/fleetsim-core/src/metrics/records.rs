//! Per-request records and per-backend time-series rows: what happened to each request
//! and when, as the simulation writes it.

use crate::decision::Branch;
use crate::ids::{BackendId, SessionId};
use crate::time::SimTime;

/// One request's life. Times are `None` until reached.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRec {
    /// Session.
    pub session: SessionId,
    /// Turn index within the session.
    pub turn: u32,
    /// Backend it was routed to.
    pub backend: BackendId,
    /// Branch of the routing decision.
    pub branch: Branch,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Arrival at the router (= decision time).
    pub t_router: SimTime,
    /// Arrival at the engine.
    pub t_engine: Option<SimTime>,
    /// First scheduled by the engine.
    pub t_admit: Option<SimTime>,
    /// First output token sampled (engine side).
    pub t_first_token: Option<SimTime>,
    /// First chunk received by the router / client.
    pub t_first_chunk: Option<SimTime>,
    /// Last token sampled (engine side).
    pub t_finish_engine: Option<SimTime>,
    /// Stream complete at the router / client.
    pub t_done: Option<SimTime>,
    /// When the request failed (its backend left or restarted, or refused it on arrival).
    pub t_failed: Option<SimTime>,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times preempted.
    pub preemptions: u32,
}

impl RequestRec {
    /// A request as its routing decision leaves it: routed at `t_router` to `backend`
    /// through `branch`, nothing after the decision reached yet.
    pub fn routed(
        session: SessionId,
        turn: u32,
        backend: BackendId,
        branch: Branch,
        prompt_tokens: u32,
        output_tokens: u32,
        t_router: SimTime,
    ) -> RequestRec {
        RequestRec {
            session,
            turn,
            backend,
            branch,
            prompt_tokens,
            output_tokens,
            t_router,
            t_engine: None,
            t_admit: None,
            t_first_token: None,
            t_first_chunk: None,
            t_finish_engine: None,
            t_done: None,
            t_failed: None,
            cached_tokens: 0,
            preemptions: 0,
        }
    }
}

/// One row of the per-backend time series (written whenever running or waiting changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsRow {
    /// When.
    pub t: SimTime,
    /// Which backend.
    pub backend: BackendId,
    /// Running requests.
    pub running: u32,
    /// Waiting requests.
    pub waiting: u32,
    /// KV blocks in use.
    pub kv_used_blocks: u32,
}

/// The records a run holds, by request id: all of them (held), or, when a
/// [`super::RecordSink`] takes them, only those from the oldest request not yet final on:
/// a reorder buffer, so records leave in request-id order although requests end out of
/// order. A record is final when the client has its completion or its failure (the `Fail`
/// event) and the router's request stats have recorded its dispatch; nothing reads it after
/// that. The window then holds at most the requests routed since the oldest unfinished one
/// was (`peak` reports the most it held).
#[derive(Debug, Default)]
pub struct RecordWindow {
    /// Request id of `held[0]`.
    base: usize,
    held: std::collections::VecDeque<RequestRec>,
    /// Per held record, the `ENDED` and `DISPATCH_RECORDED` bits reached (streaming only).
    state: std::collections::VecDeque<u8>,
    /// Records leave as they become final (else the window keeps every record).
    streaming: bool,
    /// Failed records that have left (`check_invariants` counts them).
    left_failed: usize,
    /// The most records held at once.
    peak: usize,
}

impl RecordWindow {
    /// The client has the request's completion or failure.
    pub const ENDED: u8 = 1;
    /// The router's request stats have recorded its dispatch.
    pub const DISPATCH_RECORDED: u8 = 2;
    const FINAL: u8 = Self::ENDED | Self::DISPATCH_RECORDED;

    /// An empty window; `streaming`: records leave when final (see [`RecordWindow::mark`]),
    /// else every record stays; room for `capacity` records when held.
    pub fn new(streaming: bool, capacity: usize) -> RecordWindow {
        RecordWindow {
            held: std::collections::VecDeque::with_capacity(if streaming { 1024 } else { capacity }),
            streaming,
            ..Default::default()
        }
    }

    /// Requests routed so far (the next request's id).
    pub fn len(&self) -> usize {
        self.base + self.held.len()
    }

    /// True before the first request.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the record of request `self.len()`.
    pub fn push(&mut self, r: RequestRec) {
        self.held.push_back(r);
        if self.streaming {
            self.state.push_back(0);
            self.peak = self.peak.max(self.held.len());
        }
    }

    /// Ids of the records still held, in order.
    pub fn held_ids(&self) -> std::ops::Range<usize> {
        self.base..self.len()
    }

    /// The records still held, in id order.
    pub fn held(&self) -> impl Iterator<Item = &RequestRec> {
        self.held.iter()
    }

    /// Failed records that have left the window.
    pub fn left_failed(&self) -> usize {
        self.left_failed
    }

    /// The most records held at once (streaming; 0 when every record is kept).
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Request `id` reached `bit` ([`RecordWindow::ENDED`] or
    /// [`RecordWindow::DISPATCH_RECORDED`]); returns whether the oldest held record is now
    /// final (then [`RecordWindow::pop_final`] moves it out). A no-op when every record is kept.
    pub fn mark(&mut self, id: usize, bit: u8) -> bool {
        if !self.streaming {
            return false;
        }
        self.state[id - self.base] |= bit;
        self.state.front() == Some(&Self::FINAL)
    }

    /// Moves the final records at the front, in id order, into `out`; returns the id of the
    /// first moved.
    pub fn pop_final(&mut self, out: &mut Vec<RequestRec>) -> usize {
        let first = self.base;
        while self.state.front() == Some(&Self::FINAL) {
            self.state.pop_front();
            let r = self.held.pop_front().expect("a state per record");
            self.left_failed += usize::from(r.t_failed.is_some());
            out.push(r);
            self.base += 1;
        }
        first
    }

    /// Every record still held, final or not, in id order (the end of a run).
    pub fn take_all(&mut self) -> Vec<RequestRec> {
        self.state.clear();
        self.base = self.len();
        std::mem::take(&mut self.held).into()
    }
}

impl std::ops::Index<usize> for RecordWindow {
    type Output = RequestRec;
    fn index(&self, id: usize) -> &RequestRec {
        &self.held[id - self.base]
    }
}

impl std::ops::IndexMut<usize> for RecordWindow {
    fn index_mut(&mut self, id: usize) -> &mut RequestRec {
        &mut self.held[id - self.base]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BackendId, SessionId};

    fn rec(i: u32) -> RequestRec {
        RequestRec::routed(
            SessionId(i),
            0,
            BackendId(0),
            Branch::ALL[0],
            1,
            1,
            SimTime(u64::from(i)),
        )
    }

    #[test]
    fn records_leave_in_id_order_once_final_and_the_window_stays_bounded() {
        // 10,000 requests, at most 8 in flight, ending out of order (each lasts 1 to 8
        // arrivals): the window holds at most the requests routed since the oldest
        // unfinished one, here at most 8 + 8.
        let mut w = RecordWindow::new(true, 0);
        let mut out = Vec::new();
        let mut ends: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        let mut in_flight = 0usize;
        let mut step = 0usize;
        let mut next = 0usize;
        let finish = |w: &mut RecordWindow, id: usize, out: &mut Vec<RequestRec>| {
            if w.mark(id, RecordWindow::ENDED) {
                // Each hand-off starts where the previous one ended.
                let before = out.len();
                assert_eq!(w.pop_final(out), before);
                assert!(out.len() > before);
            }
        };
        while next < 10_000 || !ends.is_empty() {
            step += 1;
            if next < 10_000 && in_flight < 8 {
                w.push(rec(next as u32));
                // Dispatch recorded at once for even ids, at the end for odd ones.
                if next.is_multiple_of(2) {
                    assert!(!w.mark(next, RecordWindow::DISPATCH_RECORDED) || next == w.held_ids().start);
                }
                ends.entry(step + 1 + (next * 7919) % 8).or_default().push(next);
                in_flight += 1;
                next += 1;
            }
            if let Some(ids) = ends.remove(&step) {
                for id in ids {
                    if id % 2 == 1 {
                        w.mark(id, RecordWindow::DISPATCH_RECORDED);
                    }
                    finish(&mut w, id, &mut out);
                    in_flight -= 1;
                }
            }
            assert!(w.held().count() <= 16, "window of {}", w.held().count());
        }
        assert!(w.peak() <= 16 && w.peak() >= 8, "peak {}", w.peak());
        assert_eq!(out.len(), 10_000);
        assert!(out.iter().enumerate().all(|(i, r)| r.session.index() == i), "id order");
        assert_eq!(w.len(), 10_000);
        assert!(w.take_all().is_empty());
    }

    #[test]
    fn a_held_window_keeps_everything() {
        let mut w = RecordWindow::new(false, 4);
        for i in 0..4 {
            w.push(rec(i));
            assert!(!w.mark(i as usize, RecordWindow::ENDED | RecordWindow::DISPATCH_RECORDED));
        }
        w[2].turn = 5;
        assert_eq!((w.len(), w.peak(), w[2].turn), (4, 0, 5));
        assert_eq!(w.take_all().len(), 4);
    }
}
