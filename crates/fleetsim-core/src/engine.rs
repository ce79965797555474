//! The event queue: a binary heap ordered by `(time, seq)`, with optional *lanes* beside it.
//!
//! Lanes are for the dominant events (one pending engine step per backend): each lane
//! holds at most one event, and a small tournament tree over the lanes finds the earliest
//! in `log2(lanes)` comparisons of two machine words, where the heap would sift a
//! 32-byte entry through `log2(pending)` levels on every push and pop. Lane events take
//! their `seq` from the same counter as heap events, and a pop compares the heap's head
//! with the lanes' by `(time, seq)`, so the order is exactly that of a queue without lanes
//! (the reference mode, [`EventQueue::new`]).
//!
//! # Event ordering contract
//!
//! * Events pop in non-decreasing time order.
//! * Events scheduled for the same instant pop in the order they were scheduled (`seq` is a
//!   global push counter), so a run is a pure function of its inputs.
//! * Scheduling into the past is a bug and panics.
//! * There is no removal: a component that changes its mind bumps a generation counter and
//!   ignores stale events when they pop (lazy cancellation).
//! * Keys: a pushed event is keyed `(time, 2 seq + 1, 0)`. A lane may instead be given an
//!   explicit key `(time, 2 c, tie)` ([`EventQueue::push_lane_keyed`],
//!   [`EventQueue::set_lane_key`]): it then pops before every event pushed once the counter
//!   was `c` and after every one pushed before, with `tie` ordering equal such keys
//!   (collapsed stretches, `sim::collapse`).
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
    lanes: Lanes<E>,
    next_seq: u64,
    now: SimTime,
    popped: u64,
}

/// `(time, seq)` of an empty lane: after every real event.
const EMPTY: (SimTime, u64, u64) = (SimTime(u64::MAX), u64::MAX, u64::MAX);

/// At most one pending event per lane, and a tournament tree whose node `k` holds the
/// lane with the earliest `(time, seq)` below it (leaves at `size + lane`).
struct Lanes<E> {
    keys: Vec<(SimTime, u64, u64)>,
    events: Vec<Option<E>>,
    /// `tree[1]` is the overall winner; `tree[size + i]` is lane `i`.
    tree: Vec<u32>,
    size: usize,
    len: usize,
    /// A lane emptied by `pop` whose path to the root is not replayed yet: a handler
    /// usually refills the lane it was popped from (an engine's next step), and then one
    /// replay serves both. Flushed before anything reads the tree.
    stale: Option<usize>,
}

impl<E> Lanes<E> {
    fn new(n: usize) -> Self {
        let size = if n == 0 { 0 } else { n.next_power_of_two() };
        let mut tree = vec![0u32; 2 * size];
        for i in 0..size {
            tree[size + i] = i as u32;
        }
        let mut l = Lanes {
            keys: vec![EMPTY; size],
            events: (0..size).map(|_| None).collect(),
            tree,
            size,
            len: 0,
            stale: None,
        };
        for k in (1..size).rev() {
            l.tree[k] = l.better(l.tree[2 * k], l.tree[2 * k + 1]);
        }
        l
    }

    #[inline]
    fn better(&self, a: u32, b: u32) -> u32 {
        if self.keys[b as usize] < self.keys[a as usize] {
            b
        } else {
            a
        }
    }

    /// Replays the matches on the path from lane `i` to the root.
    #[inline]
    fn update(&mut self, i: usize) {
        let mut k = (self.size + i) / 2;
        while k >= 1 {
            self.tree[k] = self.better(self.tree[2 * k], self.tree[2 * k + 1]);
            k /= 2;
        }
    }

    /// Replays the path of a lane emptied by `pop`, if any.
    #[inline]
    fn flush(&mut self) {
        if let Some(i) = self.stale.take() {
            self.update(i);
        }
    }

    /// `(time, seq)` of the earliest lane event ([`EMPTY`] when there is none). The tree
    /// must be flushed.
    #[inline]
    fn head(&self) -> (SimTime, u64, u64) {
        debug_assert!(self.stale.is_none());
        if self.len == 0 {
            EMPTY
        } else {
            self.keys[self.tree[1] as usize]
        }
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero, without lanes (every event goes through the heap).
    pub fn new() -> Self {
        Self::with_lanes(0)
    }

    /// An empty queue with `lanes` lanes beside the heap (see the module docs).
    pub fn with_lanes(lanes: usize) -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1024),
            lanes: Lanes::new(lanes),
            next_seq: 0,
            now: SimTime::ZERO,
            popped: 0,
        }
    }

    /// Schedules `event` at `time` in lane `lane`; into the heap instead when the queue
    /// has no such lane or the lane is taken (a stale event of a replaced engine), which
    /// gives the same order.
    #[inline]
    pub fn push_lane(&mut self, lane: usize, time: SimTime, event: E) {
        if lane >= self.lanes.size || self.lanes.events[lane].is_some() {
            self.push(time, event);
            return;
        }
        let seq = 2 * self.take_seq(time) + 1;
        self.fill_lane(lane, (time, seq, 0), event);
    }

    /// Schedules `event` in the empty lane `lane` under an explicit `key` (see
    /// [`EventQueue::pop_keyed`]) without taking a `seq`.
    pub fn push_lane_keyed(&mut self, lane: usize, time: SimTime, key: u64, tie: u64, event: E) {
        assert!(lane < self.lanes.size && self.lanes.events[lane].is_none());
        assert!(time >= self.now);
        self.fill_lane(lane, (time, key, tie), event);
    }

    /// Puts `event` under `key` into the empty lane `lane`.
    #[inline]
    fn fill_lane(&mut self, lane: usize, key: (SimTime, u64, u64), event: E) {
        self.lanes.keys[lane] = key;
        self.lanes.events[lane] = Some(event);
        self.lanes.len += 1;
        // Refilling the lane just popped replays its path once for both changes.
        if self.lanes.stale.is_some_and(|i| i != lane) {
            self.lanes.flush();
        }
        self.lanes.stale = None;
        self.lanes.update(lane);
    }

    /// Gives lane `lane`'s pending event the key `(time, key, tie)`.
    pub fn set_lane_key(&mut self, lane: usize, time: SimTime, key: u64, tie: u64) {
        self.lanes.flush();
        assert!(self.lanes.events[lane].is_some());
        assert!(time >= self.now);
        self.lanes.keys[lane] = (time, key, tie);
        self.lanes.update(lane);
    }

    /// The counter the next push will take (`2 * counter + 1` is its key).
    pub fn counter(&self) -> u64 {
        self.next_seq
    }

    /// Schedules `event` at `time` (which must not be in the past).
    #[inline]
    pub fn push(&mut self, time: SimTime, event: E) {
        let seq = 2 * self.take_seq(time) + 1;
        self.heap.push(Scheduled { time, seq, event });
    }

    /// The next `seq` for an event at `time` (which must not be in the past).
    #[inline]
    fn take_seq(&mut self, time: SimTime) -> u64 {
        assert!(
            time >= self.now,
            "event scheduled in the past: {time:?} < now {:?}",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Removes and returns the earliest event, advancing the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.pop_keyed().map(|(t, _, _, e)| (t, e))
    }

    /// [`EventQueue::pop`], with the event's key: `2 * seq + 1` for a pushed event (a key
    /// `2 * c` orders an event pushed when the counter was `c` before every event pushed
    /// from then on, and after every one pushed earlier).
    #[inline]
    pub fn pop_keyed(&mut self) -> Option<(SimTime, u64, u64, E)> {
        self.lanes.flush();
        let lane = self.lanes.head();
        let from_heap = match self.heap.peek() {
            Some(h) => (h.time, h.seq, 0) < lane,
            None => false,
        };
        let (time, key, tie, event) = if from_heap {
            let s = self.heap.pop().expect("peeked");
            (s.time, s.seq, 0, s.event)
        } else {
            if self.lanes.len == 0 {
                return None;
            }
            let i = self.lanes.tree[1] as usize;
            let event = self.lanes.events[i].take().expect("a keyed lane holds its event");
            self.lanes.keys[i] = EMPTY;
            self.lanes.len -= 1;
            self.lanes.stale = Some(i);
            (lane.0, lane.1, lane.2, event)
        };
        debug_assert!(time >= self.now);
        self.now = time;
        self.popped += 1;
        Some((time, key, tie, event))
    }

    /// Advances the clock to `t` for an event delivered from outside the heap (the sorted
    /// workload cursor), keeping the no-past-scheduling check exact.
    pub fn advance_to(&mut self, t: SimTime) {
        assert!(t >= self.now, "clock moved backwards: {t:?} < {:?}", self.now);
        self.now = t;
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&mut self) -> Option<SimTime> {
        self.lanes.flush();
        let heap = self.heap.peek().map(|s| s.time);
        if self.lanes.len == 0 {
            return heap;
        }
        let lane = self.lanes.head().0;
        Some(heap.map_or(lane, |h| h.min(lane)))
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
        self.heap.len() + self.lanes.len
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    fn lanes_keep_the_order_of_the_plain_heap() {
        // The same pushes into a queue with lanes and one without pop in the same order,
        // ties at one instant included; a taken lane falls back to the heap.
        let mut plain = EventQueue::new();
        let mut laned = EventQueue::with_lanes(3);
        let pushes: [(Option<usize>, u64, u32); 9] = [
            (Some(0), 5, 0),
            (None, 5, 1),
            (Some(1), 3, 2),
            (Some(0), 5, 3), // lane 0 taken: heap
            (None, 3, 4),
            (Some(2), 5, 5),
            (None, 1, 6),
            (Some(2), 9, 7), // lane 2 taken: heap
            (Some(7), 2, 8), // no such lane: heap
        ];
        for &(lane, t, e) in &pushes {
            plain.push(SimTime(t), e);
            match lane {
                Some(l) => laned.push_lane(l, SimTime(t), e),
                None => laned.push(SimTime(t), e),
            }
        }
        assert_eq!(laned.len(), 9);
        assert_eq!(laned.peek_time(), Some(SimTime(1)));
        // Interleave pops with pushes into freed lanes.
        let mut a = Vec::new();
        let mut b = Vec::new();
        for k in 0..4 {
            a.push(plain.pop().unwrap());
            b.push(laned.pop().unwrap());
            assert_eq!(plain.peek_time(), laned.peek_time(), "after pop {k}");
        }
        plain.push(SimTime(4), 100);
        laned.push_lane(1, SimTime(4), 100);
        a.extend(std::iter::from_fn(|| plain.pop()));
        b.extend(std::iter::from_fn(|| laned.pop()));
        assert_eq!(a, b);
        assert!(laned.is_empty() && laned.peek_time().is_none());
        assert_eq!(laned.popped(), 10);
    }

    proptest::proptest! {
        /// Any interleaving of heap pushes, lane pushes (often refilling the lane just
        /// popped, as an engine's next step does) and pops gives the plain heap's order.
        #[test]
        fn lanes_match_the_plain_heap_under_any_interleaving(
            ops in proptest::collection::vec((0u8..4, 0usize..5, 0u64..6), 1..200),
        ) {
            let mut plain = EventQueue::new();
            let mut laned = EventQueue::with_lanes(4);
            let mut last_lane: Option<usize> = None;
            let mut lane_of = std::collections::BTreeMap::new();
            for (id, (op, lane, dt)) in ops.into_iter().enumerate() {
                let id = id as u32;
                let t = SimTime(plain.now().0 + dt);
                match op {
                    0 => {
                        plain.push(t, id);
                        laned.push(t, id);
                    }
                    1 | 2 => {
                        // Op 2 refills the lane of the last lane event popped.
                        let l = if op == 2 { last_lane.unwrap_or(lane) } else { lane };
                        plain.push(t, id);
                        laned.push_lane(l, t, id);
                    }
                    _ => {
                        let a = plain.pop();
                        let b = laned.pop();
                        proptest::prop_assert_eq!(a, b);
                        last_lane = b.and_then(|(_, e)| lane_of.get(&e).copied());
                    }
                }
                if op == 1 || op == 2 {
                    let l = if op == 2 { last_lane.unwrap_or(lane) } else { lane };
                    lane_of.insert(id, l);
                }
                proptest::prop_assert_eq!(plain.peek_time(), laned.peek_time());
                proptest::prop_assert_eq!(plain.len(), laned.len());
            }
            let a: Vec<_> = std::iter::from_fn(|| plain.pop()).collect();
            let b: Vec<_> = std::iter::from_fn(|| laned.pop()).collect();
            proptest::prop_assert_eq!(a, b);
        }
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
