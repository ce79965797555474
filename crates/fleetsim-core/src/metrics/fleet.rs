//! The fleet tracker: time-integrated imbalance (idle_while_queued, stranded slots), the
//! episodes and the worst moment, integrated from backend state changes (definitions in
//! the [`super`] module doc).

use serde::Serialize;

use super::TsRow;
use crate::ids::BackendId;
use crate::time::SimTime;

#[derive(Clone, Debug, Default)]
pub(super) struct BackendTrack {
    pub(super) running: u32,
    pub(super) waiting: u32,
    pub(super) slots: u32,
    /// Listed by discovery (accepting new requests).
    pub(super) in_service: bool,
    pub(super) last: SimTime,
    pub(super) peak_running: u32,
    pub(super) peak_waiting: u32,
    pub(super) running_ns: u128,
    pub(super) waiting_ns: u128,
    pub(super) busy_ns: u128,
    pub(super) idle_ns: u128,
    pub(super) out_ns: u128,
    /// A Ready pod (autoscaled fleets): it costs, listed or not.
    pub(super) pod_up: bool,
    /// Seconds Ready with nothing running or waiting while the fleet queued, ns.
    pub(super) idle_queued_ns: u128,
}

/// One stretch of idle_while_queued time (see module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    /// Start.
    pub start: SimTime,
    /// End.
    pub end: SimTime,
    /// Integral of `min(total waiting, free slots)` over the episode, request-ns.
    pub stranded_ns: u128,
    /// Highest `min(total waiting, free slots)`.
    pub peak_stranded: u64,
    /// Per backend: time with a free slot, ns.
    pub free_ns: Vec<u64>,
    /// Per backend: integral of its waiting queue, request-ns.
    pub waiting_ns: Vec<u128>,
    /// Per backend: longest waiting queue during the episode.
    pub peak_waiting: Vec<u32>,
}

/// The moment of greatest stranding (first reached).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorstMoment {
    /// When, seconds.
    pub t_s: f64,
    /// `min(total waiting, free slots)` at that moment.
    pub stranded: u64,
    /// Per backend `[running, waiting]` at that moment.
    pub backends: Vec<[u32; 2]>,
}

/// Integrates fleet-level imbalance from backend state changes.
pub struct FleetTracker {
    pub(super) backends: Vec<BackendTrack>,
    pub(super) last: SimTime,
    pub(super) total_waiting: u64,
    pub(super) free_slots: u64,
    pub(super) idle_while_queued_ns: u128,
    pub(super) stranded_ns: u128,
    pub(super) worst: Option<(SimTime, u64, Vec<[u32; 2]>)>,
    pub(super) series: Option<Vec<TsRow>>,
    /// Closed episodes, when recorded; the open one.
    pub(super) episodes: Option<Vec<Episode>>,
    pub(super) open: Option<Episode>,
    /// Pods are tracked ([`FleetTracker::track_pods`]).
    pub(super) pods: bool,
}

impl FleetTracker {
    /// A tracker over backends with the given slot limits, all idle and in service at time
    /// zero; `record` keeps the time series and the episodes.
    pub fn new(slots: &[u32], record: bool) -> Self {
        FleetTracker {
            backends: slots
                .iter()
                .map(|&s| BackendTrack {
                    slots: s,
                    in_service: true,
                    ..Default::default()
                })
                .collect(),
            last: SimTime::ZERO,
            total_waiting: 0,
            free_slots: slots.iter().map(|&s| u64::from(s)).sum(),
            idle_while_queued_ns: 0,
            stranded_ns: 0,
            worst: None,
            series: record.then(Vec::new),
            episodes: record.then(Vec::new),
            open: None,
            pods: false,
        }
    }

    /// Tracks pods from time zero, `up[i]` for backend `i` (autoscaled fleets): each Ready
    /// pod's idle time while the fleet queues, [`FleetTracker::idle_while_queued_ns`].
    pub fn track_pods(&mut self, up: &[bool]) {
        self.pods = true;
        for (t, &u) in self.backends.iter_mut().zip(up) {
            t.pod_up = u;
        }
    }

    /// Backend `b`'s pod is Ready (`up`) or gone at `now`.
    pub fn set_pod_up(&mut self, now: SimTime, b: BackendId, up: bool) {
        self.advance_fleet(now);
        self.backends[b.index()].pod_up = up;
    }

    /// Seconds backend `b`'s pod was Ready with nothing running or waiting while another
    /// backend queued, ns (zero unless pods are tracked).
    pub fn idle_while_queued_ns(&self, b: BackendId) -> u128 {
        self.backends[b.index()].idle_queued_ns
    }

    /// Integrates the state that held over `[last, now)`. Only states that last a positive
    /// time can become the worst moment (not transients inside one instant).
    fn advance_fleet(&mut self, now: SimTime) {
        let dt = u128::from((now - self.last).0);
        if self.pods && dt > 0 && self.total_waiting > 0 {
            for t in &mut self.backends {
                if t.pod_up && t.running == 0 && t.waiting == 0 {
                    t.idle_queued_ns += dt;
                }
            }
        }
        if dt > 0 && self.total_waiting > 0 && self.free_slots > 0 {
            let stranded = self.total_waiting.min(self.free_slots);
            self.idle_while_queued_ns += dt;
            self.stranded_ns += dt * u128::from(stranded);
            if self.worst.as_ref().is_none_or(|w| stranded > w.1) {
                let snap = self.backends.iter().map(|t| [t.running, t.waiting]).collect();
                self.worst = Some((self.last, stranded, snap));
            }
            if let Some(e) = &mut self.open {
                e.stranded_ns += dt * u128::from(stranded);
                e.peak_stranded = e.peak_stranded.max(stranded);
                for (i, t) in self.backends.iter().enumerate() {
                    if Self::free_of(t) > 0 {
                        e.free_ns[i] += dt as u64;
                    }
                    e.waiting_ns[i] += dt * u128::from(t.waiting);
                }
            }
        }
        self.last = now;
    }

    /// Opens or closes the episode after a state change at `now`.
    fn update_episode(&mut self, now: SimTime) {
        let Some(done) = self.episodes.as_mut() else {
            return;
        };
        let stranding = self.total_waiting > 0 && self.free_slots > 0;
        match (&mut self.open, stranding) {
            (None, true) => {
                let n = self.backends.len();
                self.open = Some(Episode {
                    start: now,
                    end: now,
                    stranded_ns: 0,
                    peak_stranded: 0,
                    free_ns: vec![0; n],
                    waiting_ns: vec![0; n],
                    peak_waiting: self.backends.iter().map(|t| t.waiting).collect(),
                });
            }
            (Some(e), true) => {
                for (p, t) in e.peak_waiting.iter_mut().zip(&self.backends) {
                    *p = (*p).max(t.waiting);
                }
            }
            (Some(_), false) => {
                let mut e = self.open.take().expect("open");
                e.end = now;
                if e.end > e.start {
                    done.push(e);
                }
            }
            (None, false) => {}
        }
    }

    fn advance_backend(t: &mut BackendTrack, now: SimTime) {
        let dt = u128::from((now - t.last).0);
        t.running_ns += dt * u128::from(t.running);
        t.waiting_ns += dt * u128::from(t.waiting);
        if t.running > 0 {
            t.busy_ns += dt;
        } else if t.waiting == 0 {
            if t.in_service {
                t.idle_ns += dt;
            } else {
                t.out_ns += dt;
            }
        }
        t.last = now;
    }

    fn free_of(t: &BackendTrack) -> u64 {
        if t.in_service && t.waiting == 0 {
            u64::from(t.slots - t.running.min(t.slots))
        } else {
            0
        }
    }

    /// Records backend `b`'s live state at `now`.
    pub fn set(&mut self, now: SimTime, b: BackendId, running: u32, waiting: u32, kv_used_blocks: u32) {
        let t = &self.backends[b.index()];
        if t.running == running && t.waiting == waiting {
            return;
        }
        self.advance_fleet(now);
        let t = &mut self.backends[b.index()];
        Self::advance_backend(t, now);
        self.total_waiting -= u64::from(t.waiting);
        self.free_slots -= Self::free_of(t);
        t.running = running;
        t.waiting = waiting;
        t.peak_running = t.peak_running.max(running);
        t.peak_waiting = t.peak_waiting.max(waiting);
        self.total_waiting += u64::from(waiting);
        self.free_slots += Self::free_of(t);
        if let Some(s) = &mut self.series {
            s.push(TsRow {
                t: now,
                backend: b,
                running,
                waiting,
                kv_used_blocks,
            });
        }
        self.update_episode(now);
    }

    /// Backend `b` enters or leaves service (discovery lists it or not) at `now`.
    pub fn set_in_service(&mut self, now: SimTime, b: BackendId, in_service: bool) {
        if self.backends[b.index()].in_service == in_service {
            return;
        }
        self.advance_fleet(now);
        let t = &mut self.backends[b.index()];
        Self::advance_backend(t, now);
        self.free_slots -= Self::free_of(t);
        t.in_service = in_service;
        self.free_slots += Self::free_of(t);
        self.update_episode(now);
    }

    /// Closes all integrals (and the open episode) at `end`.
    pub fn finish(&mut self, end: SimTime) {
        self.advance_fleet(end);
        for t in &mut self.backends {
            Self::advance_backend(t, end);
        }
        if let (Some(mut e), Some(done)) = (self.open.take(), self.episodes.as_mut()) {
            e.end = end;
            if e.end > e.start {
                done.push(e);
            }
        }
    }

    /// The recorded episodes (empty if not recorded).
    pub fn take_episodes(&mut self) -> Vec<Episode> {
        self.episodes.take().unwrap_or_default()
    }

    /// The recorded time series (empty if not recorded).
    pub fn take_series(&mut self) -> Vec<TsRow> {
        self.series.take().unwrap_or_default()
    }

    /// Rows of the time series recorded and not yet taken.
    pub fn series_len(&self) -> usize {
        self.series.as_ref().map_or(0, Vec::len)
    }

    /// The rows recorded since the last batch, leaving the series recording (empty if not
    /// recorded).
    pub fn take_series_batch(&mut self) -> Vec<TsRow> {
        match &mut self.series {
            Some(s) => {
                let cap = s.capacity();
                std::mem::replace(s, Vec::with_capacity(cap))
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_while_queued_and_stranded_integrals() {
        // Two backends with 4 slots. 0..10: b1 runs 4 and queues 4, b0 idle -> both integrals
        // accrue (stranded = min(4 waiting, 4 free) = 4). 10..20: b0 takes 2 -> 2 free on b0
        // ... b1 still queues 2 -> stranded min(2, 2) = 2.
        let mut f = FleetTracker::new(&[4, 4], true);
        f.set(SimTime(0), BackendId(1), 4, 4, 0);
        f.set(SimTime(10), BackendId(1), 4, 2, 0);
        f.set(SimTime(10), BackendId(0), 2, 0, 0);
        f.set(SimTime(20), BackendId(1), 4, 0, 0);
        f.finish(SimTime(30));
        assert_eq!(f.idle_while_queued_ns, 20);
        assert_eq!(f.stranded_ns, 4 * 10 + 2 * 10);
        let w = f.worst.clone().unwrap();
        assert_eq!((w.0, w.1, w.2.clone()), (SimTime(0), 4, vec![[0, 0], [4, 4]]));
        assert_eq!(f.backends[0].idle_ns, 10);
        assert_eq!(f.backends[1].busy_ns, 30);
        assert_eq!(f.backends[1].peak_waiting, 4);
        assert_eq!(f.take_series().len(), 4);
    }

    #[test]
    fn a_queue_behind_kv_is_not_a_free_slot() {
        // b0 runs 1 of 4 slots but has a waiting request (KV-bound): its slots are not free,
        // so its own queue does not count as stranded.
        let mut f = FleetTracker::new(&[4, 4], false);
        f.set(SimTime(0), BackendId(0), 1, 1, 0);
        f.set(SimTime(0), BackendId(1), 4, 0, 0);
        f.finish(SimTime(100));
        assert_eq!(f.idle_while_queued_ns, 0);
        assert!(f.worst.is_none(), "a zero-length transient is not the worst moment");
    }
}
