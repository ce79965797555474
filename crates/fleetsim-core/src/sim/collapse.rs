//! Collapsed stretches: a backend's pure-decode steps that are certain (no arrival can
//! change them before they run) are not queued one by one. The backend's lane holds only
//! the stretch's last step; the steps before it are *virtual*. Each is passed, in the
//! reference order, when the loop reaches its time (see `Simulation::pass_all`), and its
//! engine work runs later, when something reads the backend (`catch_up`).
//!
//! Order. A virtual step takes no `seq`. Its key is `2 c`, where `c` is the push counter at
//! the moment its predecessor ran; a pushed event's key is `2 seq + 1`. An event pushed
//! before that moment has `seq < c` and runs first; one pushed after has `seq >= c` and
//! runs after, as in the reference mode, where the step was pushed by its predecessor.
//! The counter only moves at real pushes, so the keys of real events keep their order.

use super::{Event, Simulation};
use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};

/// A backend's collapsed stretch.
pub(super) struct Collapse {
    /// Time and key of the next virtual step not yet passed.
    t_next: SimTime,
    key_next: u64,
    /// Step duration (constant: no slowdown applies while collapsed).
    d: SimDuration,
    /// Virtual steps not yet passed.
    left: u32,
    /// Passed virtual steps whose engine work has not run.
    unrun: u32,
}

impl Simulation<'_> {
    /// Collapses backend `b`'s next `h` certain stretch steps: the step started at `now`
    /// (duration `d`) ends at `now + d`, and that end and the next `h - 1` are virtual;
    /// the lane holds the `h + 1`-th end, keyed once its predecessor has passed.
    pub(super) fn start_collapse(&mut self, now: SimTime, b: BackendId, d: SimDuration, h: u32, ev: Event) -> bool {
        let Some(t_end) = d.0.checked_mul(u64::from(h) + 1).and_then(|x| now.0.checked_add(x)) else {
            return false;
        };
        let i = b.index();
        debug_assert!(self.nodes[i].collapsed.is_none());
        // Two collapsed backends whose steps fall on one grid would need their whole
        // histories to order their steps at each shared instant: such a backend steps one
        // event at a time instead.
        let t1 = now.0 + d.0;
        let aligned = self.collapsing.iter().any(|&o| {
            let o = self.nodes[o.index()].collapsed.as_ref().expect("listed collapse");
            o.d == d && t1.abs_diff(o.t_next.0).is_multiple_of(d.0)
        });
        if aligned {
            return false;
        }
        self.nodes[i].collapsed = Some(Collapse {
            t_next: SimTime(t1),
            key_next: 2 * self.queue.counter(),
            d,
            left: h,
            unrun: 0,
        });
        self.collapsing.push(b);
        self.virtual_next = self.virtual_next.min(SimTime(t1));
        // Provisional key: after every real event at that time, until resolved.
        self.queue.push_lane_keyed(i, SimTime(t_end), u64::MAX, u64::MAX, ev);
        true
    }

    /// Passes every virtual step that runs before an event at `t` with key `key` (all
    /// steps before `t`; at `t`, those keyed below `key`).
    pub(super) fn pass_all(&mut self, t: SimTime, key: u64, tie: u64) {
        if t < self.virtual_next {
            return;
        }
        let mut earliest = u64::MAX;
        let counter_key = 2 * self.queue.counter();
        let log = self.opts.record_event_log;
        let mut logged: Vec<(SimTime, u64, u64, u32)> = Vec::new();
        let mut k = 0;
        while k < self.collapsing.len() {
            let i = self.collapsing[k].index();
            let c = self.nodes[i].collapsed.as_mut().expect("listed collapse");
            let mut passed = false;
            if c.left > 0 && c.t_next < t {
                // Steps at `t_next`, `t_next + d`, ... before `t` (mostly one: a division
                // costs more than the rest of the pass).
                let gap = t.0 - c.t_next.0;
                let due = if gap <= c.d.0 { 1 } else { (gap - 1) / c.d.0 + 1 };
                let n = due.min(u64::from(c.left)) as u32;
                if log {
                    for j in 0..u64::from(n) {
                        let tj = SimTime(c.t_next.0 + j * c.d.0);
                        let kj = if j == 0 { c.key_next } else { counter_key };
                        logged.push((tj, kj, tj.0 - c.d.0, i as u32));
                    }
                }
                c.unrun += n;
                c.left -= n;
                c.t_next = SimTime(c.t_next.0 + u64::from(n) * c.d.0);
                // Each passed step's successor was pushed just now, in the reference.
                c.key_next = counter_key;
                passed = true;
            }
            if c.left > 0 && c.t_next == t && (c.key_next, c.t_next.0 - c.d.0) < (key, tie) {
                if log {
                    logged.push((c.t_next, c.key_next, c.t_next.0 - c.d.0, i as u32));
                }
                c.unrun += 1;
                c.left -= 1;
                c.t_next = SimTime(c.t_next.0 + c.d.0);
                c.key_next = counter_key;
                passed = true;
            }
            if passed && c.left == 0 {
                // The lane's step is next: its key is known now.
                let (tn, kn, tie) = (c.t_next, c.key_next, c.t_next.0 - c.d.0);
                self.queue.set_lane_key(i, tn, kn, tie);
            }
            if c.left > 0 {
                earliest = earliest.min(c.t_next.0);
            }
            k += 1;
        }
        self.virtual_next = SimTime(earliest);
        if log {
            // The passed steps in the reference order (predecessors that ran in the
            // same gap between real events: the earlier first).
            logged.sort_unstable();
            for (t, _, _, b) in logged {
                self.event_log.push(super::EventRecord {
                    t,
                    kind: super::EventKind::StepDone,
                    a: b,
                    b: 0,
                });
            }
        }
    }

    /// Runs the engine work of backend `b`'s passed virtual steps.
    pub(super) fn catch_up(&mut self, b: BackendId) {
        let i = b.index();
        let Some(c) = self.nodes[i].collapsed.as_mut() else {
            return;
        };
        let n = std::mem::take(&mut c.unrun);
        let (d, first) = (c.d, c.t_next.0 - u64::from(n) * c.d.0);
        if self.nodes[i].history.0 == 0 {
            // No gauge history to record step by step: the steps run as one batch.
            self.engines.vllm(b).advance_stretch(n, first);
        } else {
            for j in 0..u64::from(n) {
                let t = SimTime(first + j * d.0);
                self.step_events.clear();
                self.engines.vllm(b).finish_step(t, &mut self.step_events);
                debug_assert!(self.step_events.first_tokens.is_empty() && self.step_events.finished.is_empty());
                self.note_gauges(t, b);
                self.step_events.clear();
                let d2 = self.engines.vllm(b).start_step(&mut self.step_events);
                assert_eq!(d2, Some(d), "a collapsed step was not a certain stretch step");
            }
        }
        self.events += u64::from(n);
        self.collapsed_steps += u64::from(n);
    }

    /// Before backend `b`'s lane step is handled: its passed steps run and the collapse
    /// is over.
    pub(super) fn end_collapse(&mut self, b: BackendId) {
        if self.nodes[b.index()].collapsed.is_some() {
            self.catch_up(b);
            self.drop_collapse(b);
        }
    }

    /// Something changes backend `b` (an arrival): its passed steps run, and its next
    /// virtual step becomes its lane's real step.
    pub(super) fn uncollapse(&mut self, b: BackendId) {
        if self.nodes[b.index()].collapsed.is_none() {
            return;
        }
        self.catch_up(b);
        let c = self.nodes[b.index()].collapsed.as_ref().expect("checked");
        let (t, key, tie) = (c.t_next, c.key_next, c.t_next.0 - c.d.0);
        self.queue.set_lane_key(b.index(), t, key, tie);
        self.drop_collapse(b);
    }

    fn drop_collapse(&mut self, b: BackendId) {
        self.nodes[b.index()].collapsed = None;
        let k = self.collapsing.iter().position(|&x| x == b).expect("listed collapse");
        self.collapsing.swap_remove(k);
    }
}
