//! Fleet membership on a timeline (`[[fleet_events]]` in a scenario): what happens to the
//! fleet while the router keeps routing.
//!
//! * `join`: the backend becomes ready and service discovery lists it, **appended** to the
//!   endpoint list (Kubernetes discovery keeps pods in dict insertion order, so a new pod is
//!   last in every "first in list" tie-break). It starts with an empty cache, no engine
//!   stats until the next scrape pass that reads it, and no request stats, so
//!   `_qps_routing` sends it the next fallback decision ("first endpoint without stats").
//!   A backend whose first event is a `join` is absent from the start.
//! * `leave`: the pod is killed. Discovery drops it at once; requests it holds fail (the
//!   client sees the connection reset one response latency later and retries, see
//!   [`ClientConfig`]); requests still in transit to it are refused on arrival.
//! * `drain`: discovery drops it (no new requests) while it finishes what it holds; once
//!   empty it is gone. A `join` of a draining backend lists it again with its cache.
//! * `restart`: a `leave` followed, `downtime_s` later (default 0), by a `join` of a fresh
//!   engine: in-flight requests fail and the prefix cache is lost.
//!
//! Slowdowns (a degraded or smaller GPU) are `[[faults]] kind = "slowdown"`; router restarts
//! are `[[router_events]]`.
//!
//! Owns: membership events and client retries. May not see: policies. Invariant: every
//! membership change is an event on the `(time, seq)` queue, taking effect at its instant.

use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};

/// What happens to a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetEventKind {
    /// Listed by discovery (a fresh engine, unless it was draining).
    Join,
    /// Killed: in-flight requests fail.
    Leave,
    /// Unlisted; finishes its requests, then gone.
    Drain,
    /// Killed, then back as a fresh engine after `downtime`.
    Restart {
        /// Time out of service.
        downtime: SimDuration,
    },
}

impl FleetEventKind {
    /// Name as written in scenarios.
    pub fn as_str(&self) -> &'static str {
        match self {
            FleetEventKind::Join => "join",
            FleetEventKind::Leave => "leave",
            FleetEventKind::Drain => "drain",
            FleetEventKind::Restart { .. } => "restart",
        }
    }
}

/// One membership change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetEvent {
    /// When.
    pub at: SimTime,
    /// Which backend.
    pub backend: BackendId,
    /// What.
    pub kind: FleetEventKind,
}

/// A backend's membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// Listed and accepting requests.
    Active,
    /// Unlisted, finishing what it holds.
    Draining,
    /// Not in the fleet.
    Absent,
}

/// Checks that every backend's events make sense in time order (a join of a backend that is
/// in service, a leave of an absent one, an event inside a restart's downtime are errors) and
/// returns each backend's membership at time zero. Errors carry the index of the offending
/// event in `events` (file order).
///
/// Drains end when the backend is empty, which only the run knows; statically a draining
/// backend may be joined again or left, not drained or restarted twice.
pub fn initial_membership(events: &[FleetEvent], n_backends: usize) -> Result<Vec<Membership>, (usize, String)> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| (events[i].at, i));
    let mut initial = vec![Membership::Active; n_backends];
    for (b, m) in initial.iter_mut().enumerate() {
        if let Some(&i) = order.iter().find(|&&i| events[i].backend.index() == b)
            && events[i].kind == FleetEventKind::Join
        {
            *m = Membership::Absent;
        }
    }
    let mut state = initial.clone();
    // End of the current restart downtime per backend.
    let mut back_at: Vec<Option<SimTime>> = vec![None; n_backends];
    for &i in &order {
        let e = events[i];
        let b = e.backend.index();
        if let Some(t) = back_at[b] {
            if e.at < t {
                return Err((
                    i,
                    format!(
                        "{} of backend {b} at {} s falls inside its restart downtime (back at {} s)",
                        e.kind.as_str(),
                        e.at.as_secs_f64(),
                        t.as_secs_f64()
                    ),
                ));
            }
            back_at[b] = None;
        }
        let s = state[b];
        let next = match (e.kind, s) {
            (FleetEventKind::Join, Membership::Absent | Membership::Draining) => Membership::Active,
            (FleetEventKind::Leave, Membership::Active | Membership::Draining) => Membership::Absent,
            (FleetEventKind::Drain, Membership::Active) => Membership::Draining,
            (FleetEventKind::Restart { downtime }, Membership::Active) => {
                back_at[b] = Some(e.at + downtime);
                Membership::Active
            }
            (k, s) => {
                let why = match s {
                    Membership::Active => "it is in service then",
                    Membership::Draining => "it is draining then",
                    Membership::Absent => "it is not in the fleet then",
                };
                return Err((
                    i,
                    format!("cannot {} backend {b} at {} s: {why}", k.as_str(), e.at.as_secs_f64()),
                ));
            }
        };
        state[b] = next;
    }
    Ok(initial)
}

/// What clients do when a request fails (connection reset, no endpoint available): the
/// OpenAI Python SDK's policy, which most agent frameworks inherit: up to `max_retries`
/// retries, the k-th after `min(initial * 2^(k-1), max)` seconds scaled by a jitter factor
/// in `(0.75, 1]` (`openai/_base_client.py::_calculate_retry_timeout`; defaults in
/// `openai/_constants.py`: 2 retries, 0.5 s initial, 8 s max). After the last retry the turn
/// is abandoned and the session ends there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientConfig {
    /// Retries per turn after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry.
    pub retry_initial_delay: SimDuration,
    /// Cap on the delay.
    pub retry_max_delay: SimDuration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_retries: 2,
            retry_initial_delay: SimDuration(500_000_000),
            retry_max_delay: SimDuration(8_000_000_000),
        }
    }
}

impl ClientConfig {
    /// Delay before retry number `retry` (1-based), given a uniform draw `u` in [0, 1).
    pub fn retry_delay(&self, retry: u32, u: f64) -> SimDuration {
        let base = self
            .retry_initial_delay
            .0
            .saturating_mul(1u64 << (retry.saturating_sub(1)).min(40))
            .min(self.retry_max_delay.0);
        SimDuration((base as f64 * (1.0 - 0.25 * u)).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at: u64, b: u32, kind: FleetEventKind) -> FleetEvent {
        FleetEvent {
            at: SimTime(at),
            backend: BackendId(b),
            kind,
        }
    }

    #[test]
    fn first_join_means_absent_at_start() {
        let m = initial_membership(&[ev(10, 1, FleetEventKind::Join), ev(20, 0, FleetEventKind::Drain)], 3).unwrap();
        assert_eq!(m, vec![Membership::Active, Membership::Absent, Membership::Active]);
    }

    #[test]
    fn impossible_sequences_name_the_event() {
        // Joining a backend that is in service (it left at 1 s, rejoined at 2 s).
        let e = initial_membership(
            &[
                ev(1, 0, FleetEventKind::Leave),
                ev(2, 0, FleetEventKind::Join),
                ev(3, 0, FleetEventKind::Join),
            ],
            1,
        )
        .unwrap_err();
        assert_eq!(e.0, 2);
        assert!(
            e.1.contains("cannot join backend 0 at 0.000000003 s: it is in service"),
            "{}",
            e.1
        );
        // Leaving a backend that is not there.
        let e = initial_membership(&[ev(1, 0, FleetEventKind::Join), ev(1, 1, FleetEventKind::Leave)], 2).unwrap();
        assert_eq!(e, vec![Membership::Absent, Membership::Active]);
        let e = initial_membership(&[ev(1, 0, FleetEventKind::Leave), ev(2, 0, FleetEventKind::Leave)], 1).unwrap_err();
        assert!(e.1.contains("not in the fleet"), "{}", e.1);
        let e = initial_membership(&[ev(1, 0, FleetEventKind::Drain), ev(2, 0, FleetEventKind::Drain)], 1).unwrap_err();
        assert_eq!(e.0, 1);
        assert!(e.1.contains("draining"), "{}", e.1);
        let e = initial_membership(
            &[
                ev(
                    1,
                    0,
                    FleetEventKind::Restart {
                        downtime: SimDuration(10),
                    },
                ),
                ev(5, 0, FleetEventKind::Leave),
            ],
            1,
        )
        .unwrap_err();
        assert_eq!(e.0, 1);
        assert!(e.1.contains("downtime"), "{}", e.1);
        // Leave, then join again, then restart: fine.
        initial_membership(
            &[
                ev(1, 0, FleetEventKind::Leave),
                ev(2, 0, FleetEventKind::Join),
                ev(
                    3,
                    0,
                    FleetEventKind::Restart {
                        downtime: SimDuration(0),
                    },
                ),
                ev(3, 0, FleetEventKind::Drain),
            ],
            1,
        )
        .unwrap();
    }

    #[test]
    fn retry_delays_follow_the_openai_sdk() {
        let c = ClientConfig::default();
        assert_eq!(c.retry_delay(1, 0.0), SimDuration(500_000_000));
        assert_eq!(c.retry_delay(2, 0.0), SimDuration(1_000_000_000));
        assert_eq!(c.retry_delay(6, 0.0), SimDuration(8_000_000_000), "capped");
        assert_eq!(c.retry_delay(1, 1.0), SimDuration(375_000_000), "jitter down to 0.75");
    }
}
