//! KEDA's ScaledObject with one Prometheus trigger (KEDA v2.20.2). Two loops share the
//! trigger:
//!
//! * KEDA's own poll, every `pollingInterval` (30 s), decides only 0 <-> 1
//!   (`pkg/scaling/executor/scale_scaledobjects.go` `RequestScale`): active (value strictly
//!   above `activationThreshold`, `prometheus_scaler.go`) at zero replicas scales to
//!   `max(minReplicaCount, 1)`; inactive past `lastActiveTime + cooldownPeriod` (strictly)
//!   scales to `idleReplicaCount`, else `minReplicaCount`, when that is 0; an error with no
//!   fallback changes nothing.
//! * The HPA KEDA creates (External metric, `AverageValue` = threshold unless `metricType`
//!   says `Value`, `minReplicas = max(minReplicaCount, 1)`, `behavior` passed through or
//!   absent) does 1 <-> N at every sync, running the query afresh
//!   (`GetScaledObjectMetrics`, no `useCachedMetrics`).
//!
//! The trigger's value (`ExecutePromQuery`): an empty result is 0 with `ignoreNullValues`
//! (the default), else an error; **more than one element is an error** ("returned multiple
//! elements"), which is what production-stack's bare `vllm:num_requests_waiting` returns
//! once two pods are scraped. NaN, infinities and negative values read 0.
//!
//! Fallback (`pkg/fallback/fallback.go`): every failed fetch, by either loop, counts; any
//! success resets the count; past `failureThreshold` failures the HPA is handed
//! `threshold x replicas` (`AverageValue`) or `threshold x replicas / ready` (`Value`).

use super::query::QueryResult;
use crate::time::{SimDuration, SimTime};

/// A ScaledObject's fields that the poll loop reads.
#[derive(Clone, Debug, PartialEq)]
pub struct KedaSpec {
    /// `minReplicaCount` (default 0).
    pub min_replicas: u32,
    /// `idleReplicaCount` (only 0 is useful).
    pub idle_replicas: Option<u32>,
    /// `cooldownPeriod` (300 s): only towards zero (or idle).
    pub cooldown: SimDuration,
    /// `initialCooldownPeriod` (0 s): from creation, before any active poll.
    pub initial_cooldown: SimDuration,
    /// The trigger's `activationThreshold` (0).
    pub activation_threshold: f64,
    /// The trigger's `ignoreNullValues` (true).
    pub ignore_null_values: bool,
    /// `fallback`: `(failureThreshold, replicas)`.
    pub fallback: Option<(u32, u32)>,
}

/// What the trigger gave: a value, or the scaler's error.
pub type TriggerValue = Result<f64, &'static str>;

/// The Prometheus scaler's reading of an instant query's result.
pub fn trigger_value(r: &QueryResult, ignore_null_values: bool) -> TriggerValue {
    match *r {
        QueryResult::Many(_) => Err("prometheus query returned multiple elements"),
        QueryResult::Empty if ignore_null_values => Ok(0.0),
        QueryResult::Empty => Err("prometheus metrics 'prometheus' target may be lost, the result is empty"),
        QueryResult::One(v) if v.is_finite() && v > 0.0 => Ok(v),
        QueryResult::One(v) if v.is_nan() || v.is_infinite() => {
            if ignore_null_values {
                Ok(0.0)
            } else {
                Err("prometheus query returned NaN or Inf")
            }
        }
        // Negative values reach the HPA as 0.
        QueryResult::One(_) => Ok(0.0),
    }
}

/// What one poll did.
#[derive(Clone, Debug, PartialEq)]
pub struct PollOutcome {
    /// The new replica count, when the poll scales.
    pub scale_to: Option<u32>,
    /// The trigger was active.
    pub active: bool,
    /// `scaleFromZeroOrIdle`, `scaleToZeroOrIdle`, `cooling down`, `below minReplicaCount`,
    /// `error (Ready=False)`, `fallback`, `active` or `inactive`.
    pub reason: &'static str,
}

/// A ScaledObject's poll-loop state.
#[derive(Clone, Debug)]
pub struct Keda {
    spec: KedaSpec,
    created: SimTime,
    last_active: Option<SimTime>,
    failures: u32,
}

impl Keda {
    /// A ScaledObject created at `created`.
    pub fn new(spec: KedaSpec, created: SimTime) -> Keda {
        Keda {
            spec,
            created,
            last_active: None,
            failures: 0,
        }
    }

    /// The HPA's `minReplicas` for this ScaledObject (`GetHPAMinReplicas`).
    pub fn hpa_min_replicas(&self) -> u32 {
        self.spec.min_replicas.max(1)
    }

    /// A metric fetch by the HPA: the value it is handed, or `None` (the fetch failed).
    /// `synthetic(n)` is the value that lands the HPA on `n` replicas (the fallback).
    pub fn hpa_fetch(&mut self, v: TriggerValue, synthetic: impl Fn(u32) -> f64) -> Option<f64> {
        match v {
            Ok(x) => {
                self.failures = 0;
                Some(x)
            }
            Err(_) => {
                self.failures += 1;
                match self.spec.fallback {
                    Some((threshold, replicas)) if self.failures > threshold => Some(synthetic(replicas)),
                    _ => None,
                }
            }
        }
    }

    /// KEDA's poll at `now` with `current` replicas (`spec.replicas`).
    pub fn poll(&mut self, now: SimTime, current: u32, v: TriggerValue) -> PollOutcome {
        let out = |scale_to, active, reason| PollOutcome {
            scale_to,
            active,
            reason,
        };
        let value = match v {
            Ok(x) => {
                self.failures = 0;
                x
            }
            Err(_) => {
                self.failures += 1;
                if self.spec.fallback.is_some_and(|(t, r)| r != 0 && self.failures > t) {
                    return out(None, false, "fallback");
                }
                return out(None, false, "error (Ready=False)");
            }
        };
        let (min, idle) = (self.spec.min_replicas, self.spec.idle_replicas);
        if value > self.spec.activation_threshold {
            self.last_active = Some(now);
            if current == 0 || idle.is_some_and(|_| current < min) {
                return out(Some(min.max(1)), true, "scaleFromZeroOrIdle");
            }
            return out(None, true, "active");
        }
        let towards_zero = idle.is_some_and(|i| current > i) || (current > 0 && min == 0);
        if towards_zero {
            let since = match self.last_active {
                Some(t) => t + self.spec.cooldown,
                None => self.created + self.spec.initial_cooldown,
            };
            if since < now {
                return out(Some(idle.unwrap_or(min)), false, "scaleToZeroOrIdle");
            }
            return out(None, false, "cooling down");
        }
        if current < min {
            return out(Some(min), false, "below minReplicaCount");
        }
        out(None, false, "inactive")
    }
}

#[cfg(test)]
mod tests {
    use super::super::hpa::{Counts, Hpa, HpaSpec, MetricTarget};
    use super::*;

    fn s(x: u64) -> SimTime {
        SimTime(x * 1_000_000_000)
    }

    #[test]
    fn k1_scale_to_zero_with_activation_and_cooldown() {
        let spec = KedaSpec {
            min_replicas: 0,
            idle_replicas: None,
            cooldown: SimDuration::from_secs_f64(300.0),
            initial_cooldown: SimDuration::ZERO,
            activation_threshold: 2.0,
            ignore_null_values: true,
            fallback: None,
        };
        let mut keda = Keda::new(spec, SimTime::ZERO);
        let mut hpa = Hpa::new(HpaSpec {
            min_replicas: keda.hpa_min_replicas(),
            max_replicas: 4,
            target: 5.0,
            metric_target: MetricTarget::AverageValue,
            tolerance_down: 0.1,
            tolerance_up: 0.1,
            downscale_stabilization: SimDuration::from_secs_f64(300.0),
            behavior: None,
        });
        let value = |t: u64| match t {
            30 => 1.0,
            45 => 2.0,
            60 => 3.0,
            75 | 90 => 12.0,
            105 | 120 => 22.0,
            135 => 9.0,
            _ => 0.0,
        };
        let mut r = 0;
        let mut seq = Vec::new();
        for t in (0..=480).step_by(15) {
            // KEDA polls every 30 s, before the HPA at equal times.
            if t % 30 == 0 {
                let p = keda.poll(s(t), r, Ok(value(t)));
                if t == 420 {
                    assert_eq!(p.reason, "cooling down", "420 is not before 120 + 300");
                }
                if let Some(n) = p.scale_to {
                    r = n;
                }
            }
            let c = Counts {
                spec: r,
                status: r,
                ready: r,
            };
            let d = hpa.sync(s(t), c, Some(value(t)));
            if t == 120 {
                assert_eq!(d.raw, Some(4), "22 / (5 x 4) = 1.1 is within tolerance");
            }
            r = d.desired;
            seq.push((t, r));
        }
        let mut prev = 0;
        let changes: Vec<(u64, u32)> = seq
            .into_iter()
            .filter(|&(_, x)| {
                let c = x != prev;
                prev = x;
                c
            })
            .collect();
        assert_eq!(changes, vec![(60, 1), (75, 3), (105, 4), (420, 2), (435, 1), (450, 0)]);
    }

    #[test]
    fn k2_a_bare_selector_over_two_pods_is_an_error_that_freezes_the_fleet() {
        assert_eq!(
            trigger_value(&QueryResult::Many(2), true),
            Err("prometheus query returned multiple elements")
        );
        assert_eq!(trigger_value(&QueryResult::Empty, true), Ok(0.0));
        assert!(trigger_value(&QueryResult::Empty, false).is_err());
        assert_eq!(trigger_value(&QueryResult::One(-3.0), true), Ok(0.0));
        let spec = KedaSpec {
            min_replicas: 1,
            idle_replicas: None,
            cooldown: SimDuration::from_secs_f64(360.0),
            initial_cooldown: SimDuration::ZERO,
            activation_threshold: 0.0,
            ignore_null_values: true,
            fallback: None,
        };
        let mut keda = Keda::new(spec.clone(), SimTime::ZERO);
        let e = trigger_value(&QueryResult::Many(2), true);
        assert_eq!(keda.poll(s(150), 2, e).scale_to, None);
        assert_eq!(keda.hpa_fetch(e, |n| 5.0 * f64::from(n)), None);
        // With the chart's fallback (3 failures, 2 replicas): the 4th failure hands the HPA
        // 5 x 2 = 10.
        let mut keda = Keda::new(
            KedaSpec {
                fallback: Some((3, 2)),
                ..spec
            },
            SimTime::ZERO,
        );
        let got: Vec<Option<f64>> = (0..4).map(|_| keda.hpa_fetch(e, |n| 5.0 * f64::from(n))).collect();
        assert_eq!(got, vec![None, None, None, Some(10.0)]);
        assert_eq!(
            keda.hpa_fetch(Ok(7.0), |_| 0.0),
            Some(7.0),
            "a success resets the count"
        );
    }
}
