//! Simulated time: integer nanoseconds, never floats on the clock.
//!
//! Floats appear only at the edges (scenario seconds in, report seconds out), and every
//! float-to-time conversion goes through [`checked_secs_to_ns`] (user input: refuses a
//! non-finite, negative or too long value with a [`SecsError`]) or [`secs_to_ns`] (values
//! already validated), so rounding and range checks happen in one place;
//! the live commands' wall spans go through [`Speed`], the one mapping between wall and
//! simulated time (it converts spans; the core never reads a clock).
//!
//! Owns: `SimTime`/`SimDuration`, the conversions at the edges, and `Speed`. Invariant:
//! the clock is integer nanoseconds; floats appear only at the edges.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;
use std::time::Duration;

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

    /// Seconds from input to a duration of at most `max`, or why not
    /// ([`checked_secs_to_ns`]).
    pub fn try_from_secs_f64(secs: f64, max: SimDuration) -> Result<SimDuration, SecsError> {
        checked_secs_to_ns(secs, max).map(SimDuration)
    }

    /// Seconds to a duration, rounding to the nearest ns, if `secs` is finite, not negative
    /// and within the [`HORIZON`]; else `None` (for input a caller has not bounded yet:
    /// the caller names the flag or key and the range).
    pub fn checked_from_secs_f64(secs: f64) -> Option<SimDuration> {
        let ns = secs * NS_PER_S as f64;
        (secs.is_finite() && secs >= 0.0 && ns.round() <= HORIZON.0 as f64).then(|| SimDuration(ns.round() as u64))
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

/// Why a number of seconds is not a simulated span: the message a reader puts after the
/// file, line and field it read the number from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SecsError {
    /// NaN or infinite.
    NotFinite(f64),
    /// Below zero.
    Negative(f64),
    /// Longer than the limit the caller named (at most [`HORIZON`]).
    TooLong {
        /// The value, s.
        secs: f64,
        /// The limit, s.
        max_s: f64,
    },
}

impl fmt::Display for SecsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SecsError::NotFinite(x) => write!(f, "{x} s is not a finite number of seconds"),
            SecsError::Negative(x) => write!(f, "{} s is negative", short(x)),
            SecsError::TooLong { secs, max_s } => {
                write!(f, "{} s is longer than the {} s limit", short(secs), short(max_s))
            }
        }
    }
}

impl std::error::Error for SecsError {}

/// A number as a message shows it: as written when short, else in exponent form (a
/// `-1e300` prints as such, not as 301 digits).
pub fn short(x: f64) -> String {
    let plain = format!("{x}");
    if plain.len() <= 16 { plain } else { format!("{x:e}") }
}

/// The checked float-to-time conversion for input: `secs` seconds to nanoseconds,
/// rounded to nearest, if finite, not negative and at most `max` (a caller's stated limit,
/// itself at most [`HORIZON`]).
pub fn checked_secs_to_ns(secs: f64, max: SimDuration) -> Result<u64, SecsError> {
    checked_to_ns(secs, NS_PER_S as f64, max.0.min(HORIZON.0))
}

/// The most nanoseconds an absolute input timestamp may hold (a trace's Unix time, in any
/// unit, up to about the year 2540): within `u64`, unlike simulated time, because readers
/// shift timestamps to their first row before they become [`SimTime`].
pub const MAX_TIMESTAMP_NS: u64 = 18_000_000_000_000_000_000;

/// The one checked float-to-nanoseconds conversion every reader goes through: `value` in a
/// unit of `ns_per_unit` nanoseconds (1e9 for seconds, 1e6 for milliseconds), rounded to
/// nearest, if finite, not negative and at most `max_ns`. The error's figures are in the
/// input's unit only for seconds; readers of other units name their own unit.
pub fn checked_to_ns(value: f64, ns_per_unit: f64, max_ns: u64) -> Result<u64, SecsError> {
    if !value.is_finite() {
        return Err(SecsError::NotFinite(value));
    }
    if value < 0.0 {
        return Err(SecsError::Negative(value));
    }
    let ns = (value * ns_per_unit).round();
    if ns > max_ns as f64 {
        return Err(SecsError::TooLong {
            secs: value,
            max_s: max_ns as f64 / ns_per_unit,
        });
    }
    Ok(ns as u64)
}

/// Seconds to nanoseconds for values already validated (up to [`HORIZON`]), rounded to
/// nearest; input from a user goes through [`checked_secs_to_ns`].
///
/// Panics on a negative, non-finite or too large value: a validation was skipped.
pub fn secs_to_ns(secs: f64) -> u64 {
    match checked_secs_to_ns(secs, SimDuration(HORIZON.0)) {
        Ok(ns) => ns,
        Err(e) => panic!("secs_to_ns: {e} (inputs must be validated)"),
    }
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

/// Simulated seconds per wall second: how the live commands (`sim serve`, `sim load`) map
/// the wall clock onto simulated time, and the only place that mapping is computed.
///
/// Checked when made ([`Speed::new`], or parsed from a flag): finite, from [`Speed::MIN`]
/// to [`Speed::MAX`]. Both conversions saturate at [`HORIZON`] (as simulated time one way,
/// as nanoseconds of wall time the other), so no instant they produce overflows.
#[derive(Copy, Clone, Debug, PartialEq, PartialOrd)]
pub struct Speed(f64);

impl Speed {
    /// Real time: one simulated second per wall second.
    pub const REAL_TIME: Speed = Speed(1.0);
    /// The slowest speed accepted.
    pub const MIN: f64 = 0.001;
    /// The fastest speed accepted.
    pub const MAX: f64 = 1e6;

    /// `x` simulated seconds per wall second, if finite and within [`Speed::MIN`] and
    /// [`Speed::MAX`]; else why not.
    pub fn new(x: f64) -> Result<Speed, String> {
        if x.is_finite() && (Speed::MIN..=Speed::MAX).contains(&x) {
            Ok(Speed(x))
        } else {
            Err(format!(
                "expected simulated seconds per wall second, from {} to {}",
                Speed::MIN,
                Speed::MAX
            ))
        }
    }

    /// Simulated seconds per wall second, for reports.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The simulated time `wall` after simulated zero.
    pub fn wall_to_sim(self, wall: Duration) -> SimTime {
        let ns = wall.as_nanos() as f64 * self.0;
        SimTime(ns.min(HORIZON.0 as f64) as u64)
    }

    /// The wall time from simulated zero to `t`.
    pub fn sim_to_wall(self, t: SimTime) -> Duration {
        Duration::from_nanos((t.0 as f64 / self.0).min(HORIZON.0 as f64) as u64)
    }

    /// The wall time a simulated span `d` takes.
    pub fn span_to_wall(self, d: SimDuration) -> Duration {
        self.sim_to_wall(SimTime(d.0))
    }
}

impl Default for Speed {
    fn default() -> Speed {
        Speed::REAL_TIME
    }
}

/// Parses a speed as a flag gives it (`10`, `0.5`, `1e3`).
impl FromStr for Speed {
    type Err = String;

    fn from_str(s: &str) -> Result<Speed, String> {
        let x: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
        Speed::new(x)
    }
}

/// As the number it is (`10`, `0.5`).
impl fmt::Display for Speed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
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
    fn checked_seconds_refuse_what_does_not_fit() {
        assert_eq!(
            SimDuration::checked_from_secs_f64(1.5),
            Some(SimDuration(1_500_000_000))
        );
        assert_eq!(SimDuration::checked_from_secs_f64(0.0), Some(SimDuration::ZERO));
        assert_eq!(SimDuration::checked_from_secs_f64(1e9), Some(SimDuration(HORIZON.0)));
        for bad in [-1e-9, -0.5, f64::NAN, f64::INFINITY, 1e9 + 1.0, 1e300] {
            assert_eq!(SimDuration::checked_from_secs_f64(bad), None, "{bad}");
        }
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
    fn speed_is_checked_and_converts_both_ways() {
        for bad in ["0", "-1", "0.0009", "1000001", "nan", "inf", "fast", ""] {
            assert!(bad.parse::<Speed>().is_err(), "{bad}");
        }
        let s: Speed = "10".parse().unwrap();
        assert_eq!(s.to_string(), "10");
        assert_eq!(Speed::REAL_TIME.to_string(), "1");
        assert_eq!(s.wall_to_sim(Duration::from_millis(1500)), SimTime(15 * NS_PER_S));
        assert_eq!(s.sim_to_wall(SimTime(15 * NS_PER_S)), Duration::from_millis(1500));
        assert_eq!(s.span_to_wall(SimDuration(NS_PER_S)), Duration::from_millis(100));
        let slow = Speed::new(0.5).unwrap();
        assert_eq!(slow.wall_to_sim(Duration::from_secs(3)), SimTime(3 * NS_PER_S / 2));
        assert_eq!(slow.sim_to_wall(SimTime(NS_PER_S)), Duration::from_secs(2));
    }

    #[test]
    fn speed_conversions_saturate() {
        let fast = Speed::new(Speed::MAX).unwrap();
        assert_eq!(fast.wall_to_sim(Duration::MAX), HORIZON);
        let slow = Speed::new(Speed::MIN).unwrap();
        assert_eq!(slow.sim_to_wall(SimTime(u64::MAX)), Duration::from_nanos(HORIZON.0));
        // Far from saturation, a round trip keeps the instant to the nanosecond.
        let s = Speed::new(3.0).unwrap();
        let t = SimTime(123_456_789_012);
        let back = s.wall_to_sim(s.sim_to_wall(t));
        assert!(t.0 - back.0 <= 3, "{t:?} {back:?}");
    }

    #[test]
    fn checked_conversion_refuses_what_is_not_a_span() {
        let day = SimDuration(86_400 * NS_PER_S);
        assert_eq!(SimDuration::try_from_secs_f64(1.5, day), Ok(SimDuration(1_500_000_000)));
        assert_eq!(checked_secs_to_ns(86_400.0, day), Ok(day.0));
        assert_eq!(checked_secs_to_ns(-0.0, day), Ok(0));
        for (x, want) in [
            (f64::NAN, "not a finite number"),
            (f64::INFINITY, "not a finite number"),
            (-1e-9, "negative"),
            (86_400.001, "longer than the 86400 s limit"),
            (1e300, "1e300 s is longer"),
        ] {
            let e = checked_secs_to_ns(x, day).unwrap_err().to_string();
            assert!(e.contains(want), "{x}: {e}");
        }
        // The limit never exceeds the horizon, whatever the caller names.
        assert!(checked_secs_to_ns(1e12, SimDuration(u64::MAX)).is_err());
        assert_eq!(short(-1e300), "-1e300");
        assert_eq!(short(0.25), "0.25");
    }

    #[test]
    #[should_panic]
    fn negative_seconds_are_a_bug() {
        secs_to_ns(-1.0);
    }
}
