//! The rules proven on a simulated run: the run's series sampled at the scrape interval
//! (as [`crate::export::openmetrics`] exports them), the alerts each rule must raise on
//! them computed here from the same samples by the rules' definitions, and both written as
//! a promtool unit test (`promtool test rules`), which then checks that the PromQL raises
//! exactly those alerts at every evaluation.
//!
//! Prometheus 2 counts a sample exactly at a range's left edge (and at the lookback's
//! edge) in the range; Prometheus 3 does not. The expectations are computed both ways, and
//! an instant where the two differ is not asserted, so the test holds on either.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;

use super::{AlertConfig, NEW_IDLE, Pool, RuleFile, SKEW, SPLIT, STALE, ZERO, promql_duration};
use crate::export::openmetrics::{Sampled, input_series};
use crate::time::SimDuration;
use crate::vllm_metrics as vm;

/// Prometheus's lookback for instant selectors.
const LOOKBACK_NS: u64 = 300_000_000_000;
/// [`STALE`]'s memory.
const HOUR_NS: u64 = 3_600_000_000_000;

/// Labels of one firing alert (without `alertname`), sorted.
pub type Labels = BTreeMap<String, String>;

/// Per backend, the series the rules read.
struct Frame {
    step: u64,
    n: usize,
    instances: Vec<String>,
    pool: Vec<Option<usize>>,
    running: Vec<Vec<Option<f64>>>,
    waiting: Vec<Vec<Option<f64>>>,
    success: Vec<Vec<Option<f64>>>,
    e2e_sum: Vec<Vec<Option<f64>>>,
    info: Vec<Vec<Option<f64>>>,
}

fn frame(s: &Sampled, pools: &[Pool]) -> Frame {
    let get = |sample: &str| s.instances.iter().map(|i| s.values(sample, i)).collect();
    Frame {
        step: s.step_ns,
        n: s.times.len(),
        instances: s.instances.clone(),
        pool: s
            .instances
            .iter()
            .map(|i| {
                pools
                    .iter()
                    .position(|p| p.instances.is_empty() || p.instances.contains(i))
            })
            .collect(),
        running: get(vm::NUM_REQUESTS_RUNNING.name),
        waiting: get(vm::NUM_REQUESTS_WAITING.name),
        success: get(&vm::REQUEST_SUCCESS.sample_name()),
        e2e_sum: get(&format!("{}_sum", vm::E2E_REQUEST_LATENCY.name)),
        info: get(vm::CACHE_CONFIG_INFO.name),
    }
}

impl Frame {
    /// First sample index inside a range of `w` ns ending at sample `k` (`closed`: a sample
    /// at the left edge counts).
    fn lo(&self, k: usize, w: u64, closed: bool) -> usize {
        let t = k as u64 * self.step;
        if w > t {
            return 0;
        }
        let edge = t - w;
        if closed {
            edge.div_ceil(self.step) as usize
        } else {
            (edge / self.step + 1) as usize
        }
    }

    /// An instant selector's value at `t_ns` (latest sample within the lookback).
    fn at_ns(&self, v: &[Option<f64>], t_ns: u64, closed: bool) -> Option<f64> {
        let k = (t_ns / self.step) as usize;
        let lo_t = t_ns.saturating_sub(LOOKBACK_NS);
        (0..=k.min(self.n - 1)).rev().find_map(|j| {
            let tj = j as u64 * self.step;
            let inside = if closed {
                tj >= lo_t
            } else {
                tj > lo_t || t_ns < LOOKBACK_NS
            };
            if inside { v[j] } else { None }
        })
    }

    fn at(&self, v: &[Option<f64>], k: usize, closed: bool) -> Option<f64> {
        self.at_ns(v, k as u64 * self.step, closed)
    }

    /// `x offset w`.
    fn offset(&self, v: &[Option<f64>], k: usize, w: u64, closed: bool) -> Option<f64> {
        let t = k as u64 * self.step;
        if w > t { None } else { self.at_ns(v, t - w, closed) }
    }

    fn max_over(&self, v: &[Option<f64>], k: usize, w: u64, closed: bool) -> Option<f64> {
        v[self.lo(k, w, closed)..=k].iter().flatten().copied().reduce(f64::max)
    }

    fn slots(&self, pools: &[Pool], b: usize, k: usize, closed: bool) -> Option<f64> {
        let p = self.pool[b]?;
        self.at(&self.info[b], k, closed).map(|_| f64::from(pools[p].slots))
    }

    /// The alert's expression at sample `k`: the label sets it returns.
    fn fires(&self, c: &AlertConfig, alert: &str, k: usize, closed: bool) -> Vec<Labels> {
        let inst = |b: usize| Labels::from([("instance".to_string(), self.instances[b].clone())]);
        let nb = self.instances.len();
        match alert {
            SPLIT => {
                let (mut free, mut waiting, mut any) = (0.0, 0.0, false);
                for b in 0..nb {
                    let (r, w) = (
                        self.at(&self.running[b], k, closed),
                        self.at(&self.waiting[b], k, closed),
                    );
                    if let Some(w) = w {
                        waiting += w;
                        any = true;
                    }
                    if let (Some(s), Some(r), Some(w)) = (self.slots(&c.pools, b, k, closed), r, w) {
                        free += if w == 0.0 { (s - r).max(0.0) } else { 0.0 };
                    }
                }
                if any && free > 0.0 && waiting > 0.0 {
                    vec![Labels::new()]
                } else {
                    vec![]
                }
            }
            SKEW => {
                let w = c.skew_window.0;
                let mut out = Vec::new();
                for (p, pool) in c.pools.iter().enumerate() {
                    let d: Vec<(usize, f64)> = (0..nb)
                        .filter(|&b| self.pool[b] == Some(p) && self.slots(&c.pools, b, k, closed).is_some())
                        .filter_map(|b| {
                            let now = self.at(&self.success[b], k, closed)?;
                            let then = self.offset(&self.success[b], k, w, closed)?;
                            Some((b, now - then))
                        })
                        .collect();
                    let n = d.len() as f64;
                    let total: f64 = d.iter().map(|x| x.1).sum();
                    if d.len() < 3 || total < f64::from(c.skew_min_requests_per_backend) * n || total <= 0.0 {
                        continue;
                    }
                    for &(b, x) in &d {
                        if x / total > c.skew_factor / n {
                            let mut l = inst(b);
                            l.insert("pool".into(), pool.name.clone());
                            out.push(l);
                        }
                    }
                }
                out
            }
            NEW_IDLE => self.new_idle(k, closed).into_iter().map(inst).collect(),
            ZERO => {
                let w = c.zero_window.0;
                let thr = c.zero_min_inflight * c.zero_window.as_secs_f64();
                (0..nb)
                    .filter(|&b| {
                        let r = self.max_over(&self.running[b], k, w, closed);
                        let q = self.max_over(&self.waiting[b], k, w, closed);
                        let now = self.at(&self.e2e_sum[b], k, closed);
                        let then = self.offset(&self.e2e_sum[b], k, w, closed);
                        matches!((r, q, now, then), (Some(r), Some(q), Some(a), Some(z)) if r + q == 0.0 && a - z > thr)
                    })
                    .map(inst)
                    .collect()
            }
            _ => (0..nb)
                .filter(|&b| {
                    self.max_over(&self.running[b], k, HOUR_NS, closed).is_some()
                        && self.at(&self.running[b], k, closed).is_none()
                })
                .map(inst)
                .collect(),
        }
    }

    /// [`NEW_IDLE`]'s backends at sample `k`: nothing finished, running or waiting there,
    /// while the fleet's waiting requests (the backends with a sample) are above zero.
    fn new_idle(&self, k: usize, closed: bool) -> Vec<usize> {
        let nb = self.instances.len();
        let waiting: Vec<f64> = (0..nb).filter_map(|b| self.at(&self.waiting[b], k, closed)).collect();
        if waiting.is_empty() || waiting.iter().sum::<f64>() <= 0.0 {
            return vec![];
        }
        (0..nb)
            .filter(|&b| {
                let (s, r, w) = (
                    self.at(&self.success[b], k, closed),
                    self.at(&self.running[b], k, closed),
                    self.at(&self.waiting[b], k, closed),
                );
                matches!((s, r, w), (Some(s), Some(r), Some(w)) if s == 0.0 && r + w == 0.0)
            })
            .collect()
    }

    /// Alerts firing at each sample: the expression held at every evaluation since one at
    /// least `hold` earlier (Prometheus's `for`).
    fn firing(&self, c: &AlertConfig, alert: &str, hold: SimDuration, closed: bool) -> Vec<BTreeSet<Labels>> {
        let mut active: BTreeMap<Labels, usize> = BTreeMap::new();
        let mut out = Vec::with_capacity(self.n);
        for k in 0..self.n {
            let now: BTreeSet<Labels> = self.fires(c, alert, k, closed).into_iter().collect();
            active.retain(|l, _| now.contains(l));
            for l in &now {
                active.entry(l.clone()).or_insert(k);
            }
            out.push(
                active
                    .iter()
                    .filter(|&(_, &since)| (k - since) as u64 * self.step >= hold.0)
                    .map(|(l, _)| l.clone())
                    .collect(),
            );
        }
        out
    }
}

fn hold_of(c: &AlertConfig, alert: &str) -> SimDuration {
    match alert {
        SPLIT | NEW_IDLE => c.split_for,
        SKEW => c.skew_for,
        ZERO => SimDuration(0),
        _ => c.stale_for,
    }
}

/// Every alert, in rule order.
pub const ALERTS: [&str; 5] = [SPLIT, SKEW, ZERO, NEW_IDLE, STALE];

/// What the rules must raise on a run: per alert, per sample instant, the firing label sets
/// (`None` where Prometheus versions may differ).
pub struct Expected {
    /// Grid step, ns.
    pub step_ns: u64,
    /// Per alert (in [`ALERTS`] order), per sample.
    pub firing: Vec<Vec<Option<BTreeSet<Labels>>>>,
}

impl Expected {
    /// Stretches `[from_s, to_s]` (sample instants) during which `alert` fires.
    pub fn stretches(&self, alert: &str) -> Vec<(f64, f64)> {
        let Some(i) = ALERTS.iter().position(|a| *a == alert) else {
            return vec![];
        };
        let mut out: Vec<(f64, f64)> = Vec::new();
        let mut prev = false;
        for (k, f) in self.firing[i].iter().enumerate() {
            let on = f.as_ref().is_some_and(|s| !s.is_empty());
            let t = k as f64 * self.step_ns as f64 / 1e9;
            match (prev, on) {
                (false, true) => out.push((t, t)),
                (true, true) => out.last_mut().expect("open stretch").1 = t,
                _ => {}
            }
            prev = on;
        }
        out
    }
}

/// The alerts the rules must raise on the sampled run.
pub fn expected(s: &Sampled, c: &AlertConfig) -> Expected {
    let f = frame(s, &c.pools);
    let firing = ALERTS
        .iter()
        .map(|a| {
            let hold = hold_of(c, a);
            let (x, y) = (f.firing(c, a, hold, true), f.firing(c, a, hold, false));
            x.into_iter().zip(y).map(|(x, y)| (x == y).then_some(x)).collect()
        })
        .collect();
    Expected {
        step_ns: s.step_ns,
        firing,
    }
}

#[derive(Serialize)]
struct TestFile {
    rule_files: Vec<String>,
    evaluation_interval: String,
    tests: Vec<TestGroup>,
}

#[derive(Serialize)]
struct TestGroup {
    interval: String,
    input_series: Vec<InputSeries>,
    alert_rule_test: Vec<AlertTest>,
}

#[derive(Serialize)]
struct InputSeries {
    series: String,
    values: String,
}

#[derive(Serialize)]
struct AlertTest {
    eval_time: String,
    alertname: String,
    exp_alerts: Vec<ExpAlert>,
}

#[derive(Serialize)]
struct ExpAlert {
    exp_labels: Labels,
    exp_annotations: Labels,
}

/// The promtool unit test: the sampled run as input series, and at every asserted instant
/// the alerts [`expected`] computed. `rules_path` is written as given (promtool reads it
/// relative to the test file).
pub fn promtool_test(
    s: &Sampled,
    c: &AlertConfig,
    rules: &RuleFile,
    exp: &Expected,
    rules_path: &str,
) -> Result<String> {
    let families = [
        vm::CACHE_CONFIG_INFO.name,
        vm::NUM_REQUESTS_RUNNING.name,
        vm::NUM_REQUESTS_WAITING.name,
        vm::REQUEST_SUCCESS.name,
        vm::E2E_REQUEST_LATENCY.name,
    ];
    let input_series = input_series(s, &families)
        .into_iter()
        .filter(|(sel, _)| !sel.contains("_bucket{"))
        .map(|(series, values)| InputSeries { series, values })
        .collect();
    let rule_of = |a: &str| {
        rules
            .groups
            .iter()
            .flat_map(|g| &g.rules)
            .find(|r| r.alert.as_deref() == Some(a))
    };
    let mut tests = Vec::new();
    for (i, a) in ALERTS.iter().enumerate() {
        let Some(rule) = rule_of(a) else { continue };
        for (k, f) in exp.firing[i].iter().enumerate() {
            let Some(f) = f else { continue };
            let exp_alerts = f
                .iter()
                .map(|l| {
                    let mut labels = l.clone();
                    labels.extend(rule.labels.iter().cloned());
                    let inst = l.get("instance").cloned().unwrap_or_default();
                    let ann = rule
                        .annotations
                        .iter()
                        .map(|(k, v)| (k.clone(), v.replace("{{ $labels.instance }}", &inst)))
                        .collect();
                    ExpAlert {
                        exp_labels: labels,
                        exp_annotations: ann,
                    }
                })
                .collect();
            tests.push(AlertTest {
                eval_time: promql_duration(SimDuration(k as u64 * s.step_ns)),
                alertname: a.to_string(),
                exp_alerts,
            });
        }
    }
    let step = promql_duration(SimDuration(s.step_ns));
    let file = TestFile {
        rule_files: vec![rules_path.to_string()],
        evaluation_interval: step.clone(),
        tests: vec![TestGroup {
            interval: step,
            input_series,
            alert_rule_test: tests,
        }],
    };
    let _ = c;
    Ok(serde_yaml_ng::to_string(&file)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::openmetrics::{Family, Member, Row};

    /// Two backends of 2 slots sampled every 10 s: b0 idle throughout, b1 runs 2 and queues
    /// 1 from 20 s on.
    fn two() -> Sampled {
        let n = 12;
        let row = |sample: &str, inst: &str, v: Vec<f64>| Row {
            sample: sample.into(),
            labels: vec![("instance".into(), inst.into())],
            values: v.into_iter().map(Some).collect(),
        };
        let fam = |m: vm::Metric, vals: [Vec<f64>; 2]| Family {
            metric: m,
            members: ["b0", "b1"]
                .iter()
                .zip(vals)
                .map(|(i, v)| Member {
                    instance: i.to_string(),
                    rows: vec![row(&m.sample_name(), i, v)],
                })
                .collect(),
        };
        let step = |a: f64, b: f64| (0..n).map(|k| if k >= 2 { b } else { a }).collect::<Vec<f64>>();
        Sampled {
            step_ns: 10_000_000_000,
            times: (0..n)
                .map(|k| crate::time::SimTime(k as u64 * 10_000_000_000))
                .collect(),
            instances: vec!["b0".into(), "b1".into()],
            slots: vec![2, 2],
            families: vec![
                fam(vm::CACHE_CONFIG_INFO, [vec![1.0; n], vec![1.0; n]]),
                fam(vm::NUM_REQUESTS_RUNNING, [vec![0.0; n], step(0.0, 2.0)]),
                fam(vm::NUM_REQUESTS_WAITING, [vec![0.0; n], step(0.0, 1.0)]),
            ],
        }
    }

    /// One pool of two slots, a 10 s scrape and a 30 s hold for the split alerts.
    fn one_pool_held_30s() -> AlertConfig {
        let pools = vec![Pool {
            name: "p".into(),
            slots: 2,
            instances: vec![],
        }];
        let mut c = AlertConfig::new(SimDuration(10_000_000_000), None, pools);
        c.split_for = SimDuration(30_000_000_000);
        c
    }

    #[test]
    fn split_fires_after_its_hold_and_not_before() {
        let c = one_pool_held_30s();
        let e = expected(&two(), &c);
        // Split from 20 s; held 30 s at 50 s.
        assert_eq!(e.stretches(SPLIT), vec![(50.0, 110.0)]);
        assert!(e.stretches(SKEW).is_empty() && e.stretches(ZERO).is_empty() && e.stretches(STALE).is_empty());
        let y = promtool_test(&two(), &c, &super::super::rules(&c), &e, "rules.yml").unwrap();
        assert!(y.contains("eval_time: 50s"), "{y}");
    }

    /// `two()` with finished-request counters (b0 never finishes, b1 finishes one every
    /// 10 s from 30 s) and a third backend b2 that exports nothing before 40 s (a pod not
    /// yet Ready), then idles with its counter at 0.
    fn three() -> Sampled {
        let mut s = two();
        let n = s.times.len();
        s.instances.push("b2".into());
        s.slots.push(2);
        let present = |v: f64| (0..n).map(|k| (k >= 4).then_some(v)).collect::<Vec<_>>();
        for f in &mut s.families {
            let sample = f.members[0].rows[0].sample.clone();
            let values = present(if f.metric.name == vm::CACHE_CONFIG_INFO.name {
                1.0
            } else {
                0.0
            });
            f.members.push(Member {
                instance: "b2".into(),
                rows: vec![Row {
                    sample,
                    labels: vec![("instance".into(), "b2".into())],
                    values,
                }],
            });
        }
        let success = |inst: &str, v: Vec<Option<f64>>| Member {
            instance: inst.into(),
            rows: vec![Row {
                sample: vm::REQUEST_SUCCESS.sample_name(),
                labels: vec![("instance".into(), inst.into())],
                values: v,
            }],
        };
        let b1 = (0..n).map(|k| Some(k.saturating_sub(2) as f64)).collect();
        s.families.push(Family {
            metric: vm::REQUEST_SUCCESS,
            members: vec![
                success("b0", vec![Some(0.0); n]),
                success("b1", b1),
                success("b2", present(0.0)),
            ],
        });
        s
    }

    #[test]
    fn the_new_replica_alert_waits_for_the_pod_and_its_hold() {
        let c = one_pool_held_30s();
        let e = expected(&three(), &c);
        // b0 (never finished, idle) qualifies from 20 s, when b1 starts to queue: held 30 s
        // at 50 s. b2 joins at 40 s and is held at 70 s.
        assert_eq!(e.stretches(NEW_IDLE), vec![(50.0, 110.0)]);
        let i = ALERTS.iter().position(|a| *a == NEW_IDLE).unwrap();
        let at = |k: usize| -> Vec<String> {
            e.firing[i][k]
                .as_ref()
                .unwrap()
                .iter()
                .map(|l| l["instance"].clone())
                .collect()
        };
        assert_eq!(
            (at(5), at(6), at(7)),
            (
                vec!["b0".to_string()],
                vec!["b0".to_string()],
                vec!["b0".to_string(), "b2".to_string()]
            )
        );
    }
}
