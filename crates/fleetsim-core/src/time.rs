//! Simulated time: integer nanoseconds, never floats on the clock.
//!
//! Floats appear only at the edges (scenario seconds in, report seconds out), and every
//! float-to-time conversion goes through [`secs_to_ns`], so rounding happens in one place.
//!
//! Owns: `SimTime`/`SimDuration` and the conversions at the edges. Invariant: the clock is
//! integer nanoseconds; floats appear only at the edges.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// The latest instant a simulation may reach (1e18 ns, about 31.7 years): far beyond any
/// real scenario, and far enough below `u64::MAX` that sums of validated durations cannot
/// overflow on the way.
pub const HORIZON: SimTime = SimTime(1_000_000_000_000_000_000);

/// An instant of simulated time, in nanoseconds since the simulation started.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

/// A span of simulated time in nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(pub u64);

impl SimTime {
    /// The start of every simulation.
    pub const ZERO: SimTime = SimTime(0);

    /// Seconds since the start, for reports only.
    pub fn as_secs_f64(self) -> f64 {
        ns_to_secs(self.0)
    }

    /// `self + d`, or `None` past the [`HORIZON`].
    pub fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        self.0.checked_add(d.0).map(SimTime).filter(|t| *t <= HORIZON)
    }

    /// Time elapsed since `earlier`; zero if `earlier` is later (never negative).
    pub fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// Zero length.
    pub const ZERO: SimDuration = SimDuration(0);

    /// Converts seconds (finite, non-negative) to a duration, rounding to the nearest ns.
    pub fn from_secs_f64(secs: f64) -> SimDuration {
        SimDuration(secs_to_ns(secs))
    }

    /// Converts microseconds (finite, non-negative) to a duration, rounding to the nearest ns.
    pub fn from_micros_f64(us: f64) -> SimDuration {
        SimDuration(secs_to_ns(us / 1e6))
    }

    /// Seconds, for reports only.
    pub fn as_secs_f64(self) -> f64 {
        ns_to_secs(self.0)
    }
}

/// The one float-to-time conversion: seconds to nanoseconds, rounded to nearest.
///
/// Callers validate user input first; a negative or non-finite value here is a bug.
pub fn secs_to_ns(secs: f64) -> u64 {
    assert!(
        secs.is_finite() && secs >= 0.0,
        "secs_to_ns: invalid duration {secs} (inputs must be validated)"
    );
    let ns = (secs * NS_PER_S as f64).round();
    assert!(ns <= u64::MAX as f64, "secs_to_ns: {secs} s overflows u64 ns");
    ns as u64
}

/// Nanoseconds to seconds, for reports.
pub fn ns_to_secs(ns: u64) -> f64 {
    ns as f64 / NS_PER_S as f64
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.checked_add(d.0).expect("simulated time overflowed u64 ns"))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        *self = *self + d;
    }
}

impl Sub<SimTime> for SimTime {
    type Output = SimDuration;
    fn sub(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.checked_sub(earlier.0).expect("time subtraction went negative"))
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, o: SimDuration) -> SimDuration {
        SimDuration(self.0 + o.0)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_ns() {
        assert_eq!(secs_to_ns(1.0), NS_PER_S);
        assert_eq!(secs_to_ns(0.1), 100_000_000);
        assert_eq!(secs_to_ns(1e-9 * 0.4), 0);
        assert_eq!(secs_to_ns(1e-9 * 0.6), 1);
        assert_eq!(SimDuration::from_micros_f64(5752.7).0, 5_752_700);
    }

    #[test]
    fn arithmetic() {
        let t = SimTime(10) + SimDuration(5);
        assert_eq!(t, SimTime(15));
        assert_eq!(t - SimTime(10), SimDuration(5));
        assert_eq!(SimTime(3).saturating_since(SimTime(9)), SimDuration::ZERO);
        assert_eq!(SimTime(1).checked_add(SimDuration(2)), Some(SimTime(3)));
        assert_eq!(HORIZON.checked_add(SimDuration(1)), None);
        assert_eq!(SimTime(u64::MAX).checked_add(SimDuration(1)), None);
    }

    #[test]
    #[should_panic]
    fn negative_seconds_are_a_bug() {
        secs_to_ns(-1.0);
    }
}
