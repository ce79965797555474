//! The KV-event feed a KV-aware router subscribes to: each engine publishes `BlockStored` /
//! `BlockRemoved` for its prefix cache (vLLM's KV events, which Dynamo consumes and the
//! LMCache controller aggregates), delivered after `kv_event_lag` (transport). The router's
//! copy is therefore exact but late: a block cached in the last few milliseconds is not
//! seen yet, an evicted one is still believed present.

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

use super::KvEvent;
use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};

/// The router-side replica of every engine's cached block hashes. Looked up, never iterated.
pub struct KvFeed {
    lag: SimDuration,
    held: Vec<FxHashSet<u64>>,
    /// Batches in publication order; `None` clears the backend (its stream ended).
    pending: VecDeque<(SimTime, BackendId, Option<Vec<KvEvent>>)>,
}

impl KvFeed {
    /// A feed for `n` backends with transport delay `lag`.
    pub fn new(n: usize, lag: SimDuration) -> Self {
        KvFeed {
            lag,
            held: (0..n).map(|_| FxHashSet::default()).collect(),
            pending: VecDeque::new(),
        }
    }

    /// Events published by `b` at `now`, visible from `now + lag`.
    pub fn publish(&mut self, now: SimTime, b: BackendId, events: Vec<KvEvent>) {
        if self.lag.0 == 0 {
            self.apply(b, &events);
        } else {
            self.pending.push_back((now + self.lag, b, Some(events)));
        }
    }

    /// `b` left the fleet (or restarted): the indexer drops its blocks, like Dynamo removing
    /// a worker or vLLM's `AllBlocksCleared`, once the news arrives.
    pub fn clear(&mut self, now: SimTime, b: BackendId) {
        if self.lag.0 == 0 {
            self.held[b.index()].clear();
        } else {
            self.pending.push_back((now + self.lag, b, None));
        }
    }

    fn apply(&mut self, b: BackendId, events: &[KvEvent]) {
        let set = &mut self.held[b.index()];
        for e in events {
            if e.stored {
                set.insert(e.hash);
            } else {
                set.remove(&e.hash);
            }
        }
    }

    /// Applies every batch due by `now` (batches arrive in publication order).
    pub fn advance(&mut self, now: SimTime) {
        while self.pending.front().is_some_and(|(t, _, _)| *t <= now) {
            match self.pending.pop_front().expect("checked") {
                (_, b, Some(ev)) => self.apply(b, &ev),
                (_, b, None) => self.held[b.index()].clear(),
            }
        }
    }

    /// Leading blocks of `hashes` that `b` holds (the prefix overlap a KV indexer reports).
    pub fn overlap(&self, b: BackendId, hashes: &[u64]) -> u32 {
        let set = &self.held[b.index()];
        hashes.iter().take_while(|h| set.contains(h)).count() as u32
    }

    /// Blocks `b` is known to hold (Dynamo's tie-break: the smaller tree).
    pub fn indexed(&self, b: BackendId) -> usize {
        self.held[b.index()].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_arrive_late_and_in_order() {
        let mut f = KvFeed::new(1, SimDuration(10));
        let b = BackendId(0);
        let st = |hash| KvEvent { stored: true, hash };
        f.publish(SimTime(0), b, vec![st(1), st(2), st(3)]);
        f.advance(SimTime(9));
        assert_eq!(f.overlap(b, &[1, 2, 3]), 0, "not delivered yet");
        f.advance(SimTime(10));
        assert_eq!(f.overlap(b, &[1, 2, 3, 4]), 3);
        f.publish(SimTime(20), b, vec![KvEvent { stored: false, hash: 2 }]);
        f.advance(SimTime(30));
        assert_eq!(f.overlap(b, &[1, 2, 3]), 1, "a removed block ends the overlap");
        assert_eq!(f.indexed(b), 2);
        f.clear(SimTime(40), b);
        f.advance(SimTime(49));
        assert_eq!(f.indexed(b), 2, "the clear arrives late too");
        f.advance(SimTime(50));
        assert_eq!(f.overlap(b, &[1, 3]), 0);
    }
}
