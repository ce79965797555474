//! The event queue: a binary heap ordered by `(time, seq)`.
//!
//! # Event ordering contract
//!
//! * Events pop in non-decreasing time order.
//! * Events scheduled for the same instant pop in the order they were scheduled (`seq` is a
//!   global push counter), so a run is a pure function of its inputs.
//! * Scheduling into the past is a bug and panics.
//! * There is no removal: a component that changes its mind bumps a generation counter and
//!   ignores stale events when they pop (lazy cancellation).
//!
//! Owns: the event queue. May not see: what the events mean. Invariant: events pop in
//! `(time, seq)` order, so equal times run in scheduling order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTime;

struct Scheduled<E> {
    time: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// A deterministic future-event list.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_seq: u64,
    now: SimTime,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1024),
            next_seq: 0,
            now: SimTime::ZERO,
            popped: 0,
        }
    }

    /// Schedules `event` at `time` (which must not be in the past).
    #[inline]
    pub fn push(&mut self, time: SimTime, event: E) {
        assert!(
            time >= self.now,
            "event scheduled in the past: {time:?} < now {:?}",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Scheduled { time, seq, event });
    }

    /// Removes and returns the earliest event, advancing the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let s = self.heap.pop()?;
        debug_assert!(s.time >= self.now);
        self.now = s.time;
        self.popped += 1;
        Some((s.time, s.event))
    }

    /// Advances the clock to `t` for an event delivered from outside the heap (the sorted
    /// workload cursor), keeping the no-past-scheduling check exact.
    pub fn advance_to(&mut self, t: SimTime) {
        assert!(t >= self.now, "clock moved backwards: {t:?} < {:?}", self.now);
        self.now = t;
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|s| s.time)
    }

    /// The time of the last popped event.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Number of events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_order_then_fifo() {
        let mut q = EventQueue::new();
        q.push(SimTime(5), "b1");
        q.push(SimTime(1), "a");
        q.push(SimTime(5), "b2");
        q.push(SimTime(3), "c");
        q.push(SimTime(5), "b3");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, vec!["a", "c", "b1", "b2", "b3"]);
        assert_eq!(q.popped(), 5);
        assert_eq!(q.now(), SimTime(5));
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn past_is_rejected() {
        let mut q = EventQueue::new();
        q.push(SimTime(5), ());
        q.pop();
        q.push(SimTime(4), ());
    }
}
