//! Kubernetes' HorizontalPodAutoscaler (`autoscaling/v2`), one reconcile per sync period,
//! as kube-controller-manager v1.28 runs it (`pkg/controller/podautoscaler/horizontal.go`,
//! `replica_calculator.go`; tolerances as `Tolerances.isWithin` of v1.33+, both ends
//! inclusive). The steps of [`Hpa::sync`], in the controller's order:
//!
//! 1. `currentReplicas` is `spec.replicas`; the first reconcile seeds the recommendation
//!    history with it (`recordInitialRecommendation`).
//! 2. `current == 0` with `minReplicas != 0` disables scaling (KEDA's scale to zero);
//!    `current > max` or `< min` goes straight to the bound.
//! 3. One proposal from the metric (`External`/`Object` targets):
//!    * `AverageValue`: `ceil(value / target)`, unless `value / (target x statusReplicas)`
//!      is within tolerance (`GetExternalPerPodMetricReplicas`);
//!    * `Value`: `ceil(value / target x readyPods)`, unless `value / target` is within
//!      tolerance (`getUsageRatioReplicaCount`; `ceil(ratio)` at zero replicas).
//!
//!    A failed metric fetch ends the reconcile: nothing recorded, nothing scaled.
//! 4. Without `spec.behavior` (the legacy path, `normalizeDesiredReplicas`): the max over
//!    the raw recommendations of the down-window (300 s), then at most
//!    `max(2 x current, 4)` replicas. With `behavior` (`normalizeDesiredReplicasWithBehaviors`):
//!    up only to the lowest recommendation of the up-window and down only to the highest of
//!    the down-window, then each direction's policies over the scale events of their
//!    periods.
//!
//! Boundaries: a recommendation or scale event at exactly `now - window` has expired (the
//! real reconcile lands a little after each period, so it always has).

use crate::time::{SimDuration, SimTime};

/// How the target reads the metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricTarget {
    /// `AverageValue`: the total over the target is the replica count (KEDA's default).
    AverageValue,
    /// `Value`: the ratio to the target scales the ready pods.
    Value,
}

/// `Pods` or `Percent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Add or remove this many pods per period.
    Pods,
    /// Add or remove this percentage per period.
    Percent,
}

/// One `HPAScalingPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Pods or Percent.
    pub kind: PolicyKind,
    /// The amount.
    pub value: u32,
    /// `periodSeconds`.
    pub period: SimDuration,
}

/// `selectPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    /// The policy allowing the largest change.
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No scaling in this direction.
    Disabled,
}

/// One direction's `HPAScalingRules`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// `stabilizationWindowSeconds`.
    pub window: SimDuration,
    /// `selectPolicy`.
    pub select: Select,
    /// `policies`.
    pub policies: Vec<Policy>,
}

/// `spec.behavior`.
#[derive(Clone, Debug, PartialEq)]
pub struct Behavior {
    /// `scaleUp`.
    pub scale_up: Rules,
    /// `scaleDown`.
    pub scale_down: Rules,
}

impl Behavior {
    /// `behavior: {}`: the API defaults (`pkg/apis/autoscaling/v2/defaults.go`): up with
    /// no window, 4 pods or 100 % per 15 s, whichever is more; down over the controller's
    /// window (`downscale`), 100 % per 15 s.
    pub fn defaults(downscale: SimDuration) -> Behavior {
        let s15 = SimDuration::from_secs_f64(15.0);
        Behavior {
            scale_up: Rules {
                window: SimDuration::ZERO,
                select: Select::Max,
                policies: vec![
                    Policy {
                        kind: PolicyKind::Pods,
                        value: 4,
                        period: s15,
                    },
                    Policy {
                        kind: PolicyKind::Percent,
                        value: 100,
                        period: s15,
                    },
                ],
            },
            scale_down: Rules {
                window: downscale,
                select: Select::Max,
                policies: vec![Policy {
                    kind: PolicyKind::Percent,
                    value: 100,
                    period: s15,
                }],
            },
        }
    }
}

/// The HorizontalPodAutoscaler's spec and the controller's flags.
#[derive(Clone, Debug, PartialEq)]
pub struct HpaSpec {
    /// `minReplicas` (KEDA: `max(minReplicaCount, 1)`).
    pub min_replicas: u32,
    /// `maxReplicas`.
    pub max_replicas: u32,
    /// The target (KEDA: the trigger's threshold).
    pub target: f64,
    /// `AverageValue` or `Value`.
    pub metric_target: MetricTarget,
    /// Tolerance below 1 (`--horizontal-pod-autoscaler-tolerance`, 0.1).
    pub tolerance_down: f64,
    /// Tolerance above 1.
    pub tolerance_up: f64,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (300 s): the legacy window,
    /// and the behavior path's when `scaleDown` leaves it unset.
    pub downscale_stabilization: SimDuration,
    /// `spec.behavior`; `None` takes the legacy path.
    pub behavior: Option<Behavior>,
}

/// The replica counts a reconcile reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// `spec.replicas`: the count last written.
    pub spec: u32,
    /// `status.replicas`: non-terminating pods, loading ones included.
    pub status: u32,
    /// Pods Running and Ready.
    pub ready: u32,
}

/// One reconcile's outcome: the count to write, and why (the controller's condition
/// reasons, which `sim explain` quotes).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Replicas after the reconcile.
    pub desired: u32,
    /// The metric's proposal, when one was made.
    pub raw: Option<u32>,
    /// After the stabilization window.
    pub stabilized: Option<u32>,
    /// `ScaleUpLimit`, `ScaleDownLimit`, `TooManyReplicas`, `TooFewReplicas`,
    /// `DesiredWithinRange`, `ScalingDisabled` or `FailedGetExternalMetric`.
    pub reason: &'static str,
}

/// One HPA's state between reconciles.
#[derive(Clone, Debug)]
pub struct Hpa {
    spec: HpaSpec,
    /// Raw recommendations `(when, replicas)`.
    recommendations: Vec<(SimTime, u32)>,
    /// Rescales up and down `(when, pods)` (behavior path only).
    ups: Vec<(SimTime, u32)>,
    downs: Vec<(SimTime, u32)>,
    seeded: bool,
}

/// Entries younger than `window` at `now`.
fn live(entries: &[(SimTime, u32)], now: SimTime, window: SimDuration) -> impl Iterator<Item = u32> + '_ {
    let cutoff = now.0.saturating_sub(window.0);
    // Before time `window` nothing has expired (even an entry at zero).
    let all = now.0 < window.0;
    entries
        .iter()
        .filter(move |(t, _)| all || t.0 > cutoff)
        .map(|(_, r)| *r)
}

impl Hpa {
    /// A new HPA (no reconcile yet).
    pub fn new(spec: HpaSpec) -> Hpa {
        Hpa {
            spec,
            recommendations: Vec::new(),
            ups: Vec::new(),
            downs: Vec::new(),
            seeded: false,
        }
    }

    /// The spec.
    pub fn spec(&self) -> &HpaSpec {
        &self.spec
    }

    /// One reconcile at `now`: `metric` is the query's value, or `None` when fetching it
    /// failed.
    pub fn sync(&mut self, now: SimTime, c: Counts, metric: Option<f64>) -> Decision {
        if !self.seeded {
            self.seeded = true;
            self.recommendations.push((now, c.spec));
        }
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        let fixed = |desired, reason| Decision {
            desired,
            raw: None,
            stabilized: None,
            reason,
        };
        if c.spec == 0 && min != 0 {
            return fixed(0, "ScalingDisabled");
        }
        if c.spec > max {
            return fixed(max, "TooManyReplicas");
        }
        if c.spec < min {
            return fixed(min, "TooFewReplicas");
        }
        let Some(value) = metric else {
            return fixed(c.spec, "FailedGetExternalMetric");
        };
        let raw = self.proposal(value, c);
        let (stabilized, desired, reason) = match self.spec.behavior.clone() {
            None => self.legacy(now, c.spec, raw),
            Some(b) => self.with_behavior(now, c.spec, raw, &b),
        };
        self.prune(now);
        Decision {
            desired,
            raw: Some(raw),
            stabilized: Some(stabilized),
            reason,
        }
    }

    /// The metric's replica proposal (step 3), in the controller's milli-units.
    fn proposal(&self, value: f64, c: Counts) -> u32 {
        let usage = milli(value) as f64;
        let target = milli(self.spec.target) as f64;
        let within = |r: f64| (1.0 - self.spec.tolerance_down) <= r && r <= (1.0 + self.spec.tolerance_up);
        match self.spec.metric_target {
            MetricTarget::AverageValue => {
                let ratio = usage / (target * f64::from(c.status));
                if within(ratio) {
                    c.status
                } else {
                    clamp_u32((usage / target).ceil())
                }
            }
            MetricTarget::Value => {
                let ratio = usage / target;
                if c.spec == 0 {
                    clamp_u32(ratio.ceil())
                } else if within(ratio) {
                    c.spec
                } else {
                    clamp_u32((ratio * f64::from(c.ready)).ceil())
                }
            }
        }
    }

    /// `normalizeDesiredReplicas`: the down-window's max, then `convertDesiredReplicasWithRules`.
    fn legacy(&mut self, now: SimTime, current: u32, raw: u32) -> (u32, u32, &'static str) {
        let window = self.spec.downscale_stabilization;
        let stab = live(&self.recommendations, now, window).fold(raw, u32::max);
        self.recommendations.push((now, raw));
        let up_limit = (2.0 * f64::from(current)).max(4.0) as u32;
        let (max_allowed, limit_reason) = if self.spec.max_replicas > up_limit {
            (up_limit, "ScaleUpLimit")
        } else {
            (self.spec.max_replicas, "TooManyReplicas")
        };
        let (desired, reason) = if stab < self.spec.min_replicas {
            (self.spec.min_replicas, "TooFewReplicas")
        } else if stab > max_allowed {
            (max_allowed, limit_reason)
        } else {
            (stab, "DesiredWithinRange")
        };
        (stab, desired, reason)
    }

    /// `normalizeDesiredReplicasWithBehaviors`: both windows, then the policies' rate limit.
    fn with_behavior(&mut self, now: SimTime, current: u32, raw: u32, b: &Behavior) -> (u32, u32, &'static str) {
        let up = live(&self.recommendations, now, b.scale_up.window).fold(raw, u32::min);
        let down = live(&self.recommendations, now, b.scale_down.window).fold(raw, u32::max);
        self.recommendations.push((now, raw));
        let mut stab = current;
        if stab < up {
            stab = up;
        }
        if stab > down {
            stab = down;
        }
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        let (desired, reason) = if stab > current {
            let limit = self.up_limit(now, current, &b.scale_up).max(current);
            let allowed = max.min(limit);
            if stab > allowed {
                (
                    allowed,
                    if allowed == max {
                        "TooManyReplicas"
                    } else {
                        "ScaleUpLimit"
                    },
                )
            } else {
                (stab, "DesiredWithinRange")
            }
        } else if stab < current {
            let limit = self.down_limit(now, current, &b.scale_down).min(current);
            let allowed = min.max(limit);
            if stab < allowed {
                (
                    allowed,
                    if allowed == min {
                        "TooFewReplicas"
                    } else {
                        "ScaleDownLimit"
                    },
                )
            } else {
                (stab, "DesiredWithinRange")
            }
        } else {
            (stab, "DesiredWithinRange")
        };
        if desired > current {
            self.ups.push((now, desired - current));
        } else if desired < current {
            self.downs.push((now, current - desired));
        }
        (stab, desired, reason)
    }

    /// Replicas at the start of `period` (`current - added + deleted` within it).
    fn period_start(&self, now: SimTime, current: u32, period: SimDuration) -> i64 {
        let added: u32 = live(&self.ups, now, period).sum();
        let deleted: u32 = live(&self.downs, now, period).sum();
        i64::from(current) - i64::from(added) + i64::from(deleted)
    }

    /// `calculateScaleUpLimitWithScalingRules`.
    fn up_limit(&self, now: SimTime, current: u32, r: &Rules) -> u32 {
        let proposals = r.policies.iter().map(|p| {
            let start = self.period_start(now, current, p.period);
            match p.kind {
                PolicyKind::Pods => start + i64::from(p.value),
                PolicyKind::Percent => (start as f64 * (1.0 + f64::from(p.value) / 100.0)).ceil() as i64,
            }
        });
        let limit = match r.select {
            Select::Disabled => return current,
            Select::Max => proposals.max(),
            Select::Min => proposals.min(),
        };
        limit.map_or(current, |l| l.clamp(0, i64::from(u32::MAX)) as u32)
    }

    /// `calculateScaleDownLimitWithBehaviors` (`Percent` truncates).
    fn down_limit(&self, now: SimTime, current: u32, r: &Rules) -> u32 {
        let proposals = r.policies.iter().map(|p| {
            let start = self.period_start(now, current, p.period);
            match p.kind {
                PolicyKind::Pods => start - i64::from(p.value),
                PolicyKind::Percent => (start as f64 * (1.0 - f64::from(p.value) / 100.0)) as i64,
            }
        });
        // The largest drop is the lowest count.
        let limit = match r.select {
            Select::Disabled => return current,
            Select::Max => proposals.min(),
            Select::Min => proposals.max(),
        };
        limit.map_or(current, |l| l.clamp(0, i64::from(u32::MAX)) as u32)
    }

    /// Drops entries no window or period can reach any more.
    fn prune(&mut self, now: SimTime) {
        let mut keep = self.spec.downscale_stabilization;
        if let Some(b) = &self.spec.behavior {
            for r in [&b.scale_up, &b.scale_down] {
                keep = keep.max(r.window);
                for p in &r.policies {
                    keep = keep.max(p.period);
                }
            }
        }
        let cutoff = now.0.saturating_sub(keep.0);
        if now.0 >= keep.0 {
            for v in [&mut self.recommendations, &mut self.ups, &mut self.downs] {
                v.retain(|(t, _)| t.0 > cutoff);
            }
        }
    }
}

/// A value in the controller's milli-units (`Quantity.MilliValue()`).
fn milli(x: f64) -> i64 {
    (x * 1000.0).round() as i64
}

fn clamp_u32(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        x as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> SimTime {
        SimTime(x * 1_000_000_000)
    }

    fn spec(min: u32, max: u32, target: f64, metric_target: MetricTarget, behavior: Option<Behavior>) -> HpaSpec {
        HpaSpec {
            min_replicas: min,
            max_replicas: max,
            target,
            metric_target,
            tolerance_down: 0.1,
            tolerance_up: 0.1,
            downscale_stabilization: SimDuration::from_secs_f64(300.0),
            behavior,
        }
    }

    /// Runs syncs every 15 s from 0 to `until` with pods created at once (status = spec,
    /// all ready), returning the replicas after each sync.
    fn run(hpa: &mut Hpa, start: u32, until: u64, value: impl Fn(u64) -> f64) -> Vec<(u64, u32)> {
        let mut r = start;
        let mut out = Vec::new();
        for t in (0..=until).step_by(15) {
            let c = Counts {
                spec: r,
                status: r,
                ready: r,
            };
            r = hpa.sync(s(t), c, Some(value(t))).desired;
            out.push((t, r));
        }
        out
    }

    /// Query values of H1 and H2.
    fn h_values(t: u64) -> f64 {
        match t {
            15 | 30 => 42.0,
            45 => 30.0,
            60 => 12.0,
            75 => 4.0,
            _ => 0.0,
        }
    }

    fn at(seq: &[(u64, u32)], t: u64) -> u32 {
        seq.iter().find(|(x, _)| *x == t).unwrap().1
    }

    /// Times at which the count changed, with the new count.
    fn changes(seq: &[(u64, u32)], start: u32) -> Vec<(u64, u32)> {
        let mut prev = start;
        let mut out = Vec::new();
        for &(t, r) in seq {
            if r != prev {
                out.push((t, r));
                prev = r;
            }
        }
        out
    }

    #[test]
    fn h1_legacy_path_doubles_then_scales_up_on_a_falling_metric() {
        let mut h = Hpa::new(spec(1, 10, 5.0, MetricTarget::AverageValue, None));
        let seq = run(&mut h, 1, 450, h_values);
        assert_eq!(
            changes(&seq, 1),
            vec![(15, 4), (30, 8), (45, 9), (330, 6), (345, 3), (360, 1)]
        );
        assert_eq!(at(&seq, 315), 9);
        assert_eq!(at(&seq, 450), 1);
    }

    #[test]
    fn h2_empty_behavior_takes_the_policy_path() {
        let b = Behavior::defaults(SimDuration::from_secs_f64(300.0));
        let mut h = Hpa::new(spec(1, 10, 5.0, MetricTarget::AverageValue, Some(b)));
        let seq = run(&mut h, 1, 450, h_values);
        assert_eq!(changes(&seq, 1), vec![(15, 5), (30, 9), (330, 6), (345, 3), (360, 1)]);
    }

    #[test]
    fn h3_production_stack_custom_scale_down() {
        let mut b = Behavior::defaults(SimDuration::from_secs_f64(300.0));
        b.scale_down.policies = vec![Policy {
            kind: PolicyKind::Percent,
            value: 50,
            period: SimDuration::from_secs_f64(60.0),
        }];
        let mut h = Hpa::new(spec(1, 10, 5.0, MetricTarget::AverageValue, Some(b)));
        let seq = run(&mut h, 10, 480, |_| 0.0);
        assert_eq!(changes(&seq, 10), vec![(300, 5), (360, 2), (420, 1)]);
        assert_eq!(at(&seq, 285), 10);
        assert_eq!(at(&seq, 405), 2);
    }

    #[test]
    fn h4_tutorial_value_target_multiplies_a_total_by_ready_pods() {
        let mut h = Hpa::new(spec(1, 2, 1.0, MetricTarget::Value, None));
        let w = |t: u64| match t {
            0 => 0.0,
            15 => 3.0,
            30..=120 => 4.0,
            135 => 1.0,
            _ => 0.0,
        };
        let mut r = 1;
        let mut out = Vec::new();
        for t in (0..=480).step_by(15) {
            // Pod B, created at the 15 s scale-up, is Ready from 135 s.
            let ready = if r == 2 && t >= 135 { 2 } else { 1 };
            let d = h.sync(
                s(t),
                Counts {
                    spec: r,
                    status: r,
                    ready,
                },
                Some(w(t)),
            );
            if t == 135 {
                assert_eq!(d.raw, Some(2), "W = 1 is within tolerance: the current count");
            }
            if t == 15 {
                assert_eq!((d.raw, d.reason), (Some(3), "TooManyReplicas"));
            }
            r = d.desired;
            out.push((t, r));
        }
        assert_eq!(changes(&out, 1), vec![(15, 2), (435, 1)]);
        assert_eq!(at(&out, 420), 2);
    }

    #[test]
    fn a_failed_metric_changes_nothing_and_records_nothing() {
        let mut h = Hpa::new(spec(1, 10, 5.0, MetricTarget::AverageValue, None));
        let c = Counts {
            spec: 2,
            status: 2,
            ready: 2,
        };
        let d = h.sync(s(0), c, None);
        assert_eq!((d.desired, d.reason, d.raw), (2, "FailedGetExternalMetric", None));
        assert_eq!(h.recommendations.len(), 1, "only the seed");
    }

    #[test]
    fn tolerance_is_inclusive_at_both_ends() {
        // 22 / (5 x 4) = 1.1: within.
        let mut h = Hpa::new(spec(1, 10, 5.0, MetricTarget::AverageValue, None));
        let c = Counts {
            spec: 4,
            status: 4,
            ready: 4,
        };
        assert_eq!(h.sync(s(0), c, Some(22.0)).raw, Some(4));
        assert_eq!(h.sync(s(15), c, Some(23.0)).raw, Some(5));
        assert_eq!(h.sync(s(30), c, Some(18.0)).raw, Some(4), "0.9 is within");
    }
}
