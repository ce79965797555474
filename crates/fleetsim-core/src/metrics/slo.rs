//! Service-level objectives and what the fleet costs (`[slo]`, `[price]`): the share of
//! requests and of sessions that met their latency targets, goodput (requests per second
//! that met them), and the fleet's price per hour and per 1,000 requests.
//!
//! A request **meets** its SLO when it finished and its TTFT, TPOT and end-to-end latency
//! are each at or under the targets set for its session's group (a target not set is not
//! checked; TPOT is not checked for a request with fewer than 2 output tokens, which has
//! none). A request that failed or was still in flight at the end does not meet it; every
//! attempt the router received counts once (`requests.arrived`). A **session** meets it
//! when every one of its requests does. **Goodput** is the requests that met it per
//! simulated second (DistServe's definition, over the run as `throughput_rps` is).
//!
//! Invariant: built from the same final records as the summary, in the same order, so it
//! is as deterministic as the rest of `summary.json`.

use serde::Serialize;

use super::RequestRec;
use super::summary::round6;
use crate::time::{SimDuration, ns_to_secs};

/// Latency targets of one group of sessions; `None`: not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SloTargets {
    /// Router arrival to first chunk.
    pub ttft: Option<SimDuration>,
    /// Time per output token after the first, seconds.
    pub tpot_s: Option<f64>,
    /// Router arrival to stream end.
    pub e2e: Option<SimDuration>,
}

impl SloTargets {
    /// Whether `r` met these targets (finished, each set target held).
    pub fn met(&self, r: &RequestRec) -> bool {
        let (Some(done), Some(first)) = (r.t_done, r.t_first_chunk) else {
            return false;
        };
        let ttft_ok = self.ttft.is_none_or(|t| first - r.t_router <= t);
        let e2e_ok = self.e2e.is_none_or(|t| done - r.t_router <= t);
        let tpot_ok = match self.tpot_s {
            Some(t) if r.output_tokens >= 2 => ns_to_secs((done - first).0) / f64::from(r.output_tokens - 1) <= t,
            _ => true,
        };
        ttft_ok && tpot_ok && e2e_ok
    }
}

/// A validated `[slo]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SloConfig {
    /// Targets per session group, by the group's index in the workload (session groups,
    /// then trace groups).
    pub targets: Vec<SloTargets>,
    /// The group names, in the same order.
    pub group_names: Vec<String>,
    /// The share of requests that must meet their targets for the run to meet its SLO
    /// (0 to 1).
    pub attainment: f64,
}

/// What one backend costs: GPUs and the price of a GPU-hour.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendPrice {
    /// GPUs (the profile's tensor parallelism).
    pub gpus: u32,
    /// The GPU's name (`h100`, ...).
    pub gpu: String,
    /// Dollars per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// Where the price comes from.
    pub source: String,
}

/// Counts per group of sessions.
#[derive(Clone, Debug, Default)]
struct GroupCounts {
    requests: u64,
    met: u64,
    sessions: u64,
    sessions_met: u64,
}

/// The SLO's share of every final record, per session and group.
#[derive(Clone, Debug, Default)]
pub struct SloStats {
    /// Per session: 0 = no request yet, 1 = all met so far, 2 = one missed.
    sessions: Vec<u8>,
    groups: Vec<GroupCounts>,
}

impl SloStats {
    /// Nothing yet, for `sessions` sessions in `groups` groups.
    pub fn new(sessions: usize, groups: usize) -> SloStats {
        SloStats {
            sessions: vec![0; sessions],
            groups: vec![GroupCounts::default(); groups],
        }
    }

    /// Takes one record as it stands, `group` being its session's group.
    pub fn add(&mut self, cfg: &SloConfig, group: usize, r: &RequestRec) {
        let met = cfg.targets.get(group).is_some_and(|t| t.met(r));
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.requests += 1;
        g.met += u64::from(met);
        let s = &mut self.sessions[r.session.index()];
        *s = match (*s, met) {
            (2, _) | (_, false) => 2,
            _ => 1,
        };
    }

    /// The summary's SLO block over a run of `end_s` seconds; `session_group` gives each
    /// session's group.
    pub fn finish(mut self, cfg: &SloConfig, end_s: f64, session_group: impl Fn(usize) -> usize) -> SloSummary {
        for (i, &s) in self.sessions.iter().enumerate() {
            if s == 0 {
                continue;
            }
            let Some(g) = self.groups.get_mut(session_group(i)) else {
                continue;
            };
            g.sessions += 1;
            g.sessions_met += u64::from(s == 1);
        }
        let total = self.groups.iter().fold(GroupCounts::default(), |a, g| GroupCounts {
            requests: a.requests + g.requests,
            met: a.met + g.met,
            sessions: a.sessions + g.sessions,
            sessions_met: a.sessions_met + g.sessions_met,
        });
        let attainment = share(total.met, total.requests);
        let groups = if cfg.group_names.len() > 1 {
            cfg.group_names
                .iter()
                .zip(&self.groups)
                .zip(&cfg.targets)
                .map(|((name, g), t)| SloGroup {
                    name: name.clone(),
                    ttft_s: t.ttft.map(|d| ns_to_secs(d.0)),
                    tpot_s: t.tpot_s,
                    e2e_s: t.e2e.map(|d| ns_to_secs(d.0)),
                    requests: g.requests,
                    requests_met: g.met,
                    attainment: share(g.met, g.requests),
                    sessions: g.sessions,
                    sessions_met: g.sessions_met,
                    session_attainment: share(g.sessions_met, g.sessions),
                    goodput_rps: per_s(g.met, end_s),
                })
                .collect()
        } else {
            Vec::new()
        };
        let t = cfg.targets.first().copied().unwrap_or_default();
        SloSummary {
            slo_ttft_s: t.ttft.map(|d| ns_to_secs(d.0)),
            slo_tpot_s: t.tpot_s,
            slo_e2e_s: t.e2e.map(|d| ns_to_secs(d.0)),
            slo_attainment_target: cfg.attainment,
            slo_requests_met: total.met,
            slo_attainment: attainment,
            slo_sessions: total.sessions,
            slo_sessions_met: total.sessions_met,
            slo_session_attainment: share(total.sessions_met, total.sessions),
            goodput_rps: per_s(total.met, end_s),
            slo_met: total.requests > 0 && total.met as f64 >= cfg.attainment * total.requests as f64,
            slo_groups: groups,
        }
    }
}

fn share(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { round6(a as f64 / b as f64) }
}

fn per_s(n: u64, end_s: f64) -> f64 {
    if end_s > 0.0 { round6(n as f64 / end_s) } else { 0.0 }
}

/// The SLO's share of `summary.json` (present only with `[slo]`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SloSummary {
    /// TTFT target of the first group, seconds (absent: not checked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_ttft_s: Option<f64>,
    /// TPOT target of the first group, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_tpot_s: Option<f64>,
    /// End-to-end target of the first group, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_e2e_s: Option<f64>,
    /// The share of requests that must meet their targets.
    pub slo_attainment_target: f64,
    /// Requests that met their targets.
    pub slo_requests_met: u64,
    /// `slo_requests_met / requests.arrived`.
    pub slo_attainment: f64,
    /// Sessions that sent at least one request.
    pub slo_sessions: u64,
    /// Of those, sessions all of whose requests met their targets.
    pub slo_sessions_met: u64,
    /// `slo_sessions_met / slo_sessions`.
    pub slo_session_attainment: f64,
    /// Requests that met their targets per simulated second.
    pub goodput_rps: f64,
    /// `slo_attainment >= slo_attainment_target` (and some request arrived).
    pub slo_met: bool,
    /// Per session group (when the workload has more than one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slo_groups: Vec<SloGroup>,
}

/// One session group's attainment.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SloGroup {
    /// The group's name.
    pub name: String,
    /// Its TTFT target, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    /// Its TPOT target, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_s: Option<f64>,
    /// Its end-to-end target, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_s: Option<f64>,
    /// Requests received.
    pub requests: u64,
    /// Of those, requests that met the targets.
    pub requests_met: u64,
    /// `requests_met / requests`.
    pub attainment: f64,
    /// Sessions that sent at least one request.
    pub sessions: u64,
    /// Of those, sessions that met the targets throughout.
    pub sessions_met: u64,
    /// `sessions_met / sessions`.
    pub session_attainment: f64,
    /// Requests that met the targets per simulated second.
    pub goodput_rps: f64,
}

/// A fixed fleet's cost (present with `[slo]` or `[price]` on a fleet without
/// `[autoscaler]`, which reports its own): every backend's GPUs for the seconds it was in
/// service.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FleetCost {
    /// GPUs in the fleet (each backend's tensor parallelism, summed).
    pub gpus: u32,
    /// The fleet's price per hour, every backend in service: `sum(gpus x usd_per_gpu_hour)`.
    pub fleet_usd_per_hour: f64,
    /// GPU-seconds in service: each backend's GPUs x (run length - its out-of-service time).
    pub gpu_seconds: f64,
    /// `gpu_seconds` priced at each backend's GPU-hour.
    pub cost_usd: f64,
    /// `cost_usd` per 1,000 finished requests (0 when none finished).
    pub cost_per_1k_requests_usd: f64,
    /// Where the prices come from, one entry per GPU type (`h100: 3.78 (source)`).
    pub price_source: String,
}

impl FleetCost {
    /// The cost of `prices` (one per backend) in service `in_service_s` each, for
    /// `finished` requests.
    pub fn of(prices: &[BackendPrice], in_service_s: &[f64], finished: u64) -> FleetCost {
        let gpu_s: Vec<f64> = prices
            .iter()
            .zip(in_service_s)
            .map(|(p, &s)| f64::from(p.gpus) * s)
            .collect();
        let cost: f64 = prices
            .iter()
            .zip(&gpu_s)
            .map(|(p, g)| g / 3600.0 * p.usd_per_gpu_hour)
            .sum();
        let mut sources: Vec<String> = prices
            .iter()
            .map(|p| format!("{}: {} ({})", p.gpu, p.usd_per_gpu_hour, p.source))
            .collect();
        sources.sort();
        sources.dedup();
        FleetCost {
            gpus: prices.iter().map(|p| p.gpus).sum(),
            fleet_usd_per_hour: round6(prices.iter().map(|p| f64::from(p.gpus) * p.usd_per_gpu_hour).sum()),
            gpu_seconds: round6(gpu_s.iter().sum()),
            cost_usd: round6(cost),
            cost_per_1k_requests_usd: if finished == 0 {
                0.0
            } else {
                round6(cost * 1000.0 / finished as f64)
            },
            price_source: sources.join("; "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Branch;
    use crate::ids::{BackendId, SessionId};
    use crate::time::SimTime;

    const MS: u64 = 1_000_000;

    fn rec(session: u32, ttft_ms: u64, e2e_ms: u64, out: u32) -> RequestRec {
        let mut r = RequestRec::routed(SessionId(session), 0, BackendId(0), Branch::ALL[0], 10, out, SimTime(0));
        r.t_first_chunk = Some(SimTime(ttft_ms * MS));
        r.t_done = Some(SimTime(e2e_ms * MS));
        r
    }

    fn cfg() -> SloConfig {
        SloConfig {
            targets: vec![
                SloTargets {
                    ttft: Some(SimDuration(1000 * MS)),
                    tpot_s: Some(0.05),
                    e2e: None,
                },
                SloTargets {
                    ttft: Some(SimDuration(100 * MS)),
                    tpot_s: None,
                    e2e: None,
                },
            ],
            group_names: vec!["chat".into(), "agents".into()],
            attainment: 0.5,
        }
    }

    #[test]
    fn targets_are_inclusive_and_tpot_follows_benchmark_serving() {
        let t = cfg().targets[0];
        // TTFT exactly 1 s, TPOT (2000 - 1000) / (21 - 1) = 50 ms: both at the target.
        assert!(t.met(&rec(0, 1000, 2000, 21)));
        assert!(!t.met(&rec(0, 1001, 2001, 21)));
        assert!(!t.met(&rec(0, 1000, 2001, 21)));
        // One output token: no TPOT to check.
        assert!(t.met(&rec(0, 900, 5000, 1)));
        let mut failed = rec(0, 10, 20, 2);
        failed.t_done = None;
        assert!(!t.met(&failed));
    }

    #[test]
    fn attainment_goodput_and_sessions_by_hand() {
        let c = cfg();
        let mut s = SloStats::new(3, 2);
        // Session 0 (chat): both meet. Session 1 (chat): one misses. Session 2 (agents):
        // its one request misses the 100 ms TTFT.
        s.add(&c, 0, &rec(0, 500, 600, 3));
        s.add(&c, 0, &rec(0, 700, 800, 3));
        s.add(&c, 0, &rec(1, 500, 600, 3));
        s.add(&c, 0, &rec(1, 1500, 1600, 3));
        s.add(&c, 1, &rec(2, 200, 300, 3));
        let out = s.finish(&c, 10.0, |i| usize::from(i == 2));
        assert_eq!(out.slo_requests_met, 3);
        assert_eq!(out.slo_attainment, 0.6);
        assert_eq!((out.slo_sessions, out.slo_sessions_met), (3, 1));
        assert_eq!(out.slo_session_attainment, 0.333333);
        assert_eq!(out.goodput_rps, 0.3);
        assert!(out.slo_met);
        assert_eq!(out.slo_groups.len(), 2);
        assert_eq!(out.slo_groups[0].attainment, 0.75);
        assert_eq!(out.slo_groups[1].requests_met, 0);
        assert_eq!(out.slo_groups[1].ttft_s, Some(0.1));
    }

    #[test]
    fn fleet_cost_by_hand() {
        let p = |gpus, usd: f64, gpu: &str| BackendPrice {
            gpus,
            gpu: gpu.into(),
            usd_per_gpu_hour: usd,
            source: "stated".into(),
        };
        // 2 x H100 TP1 at 3.6 $/h for an hour, 1 x A100 TP2 at 1.8 $/h for half an hour.
        let c = FleetCost::of(
            &[p(1, 3.6, "h100"), p(1, 3.6, "h100"), p(2, 1.8, "a100")],
            &[3600.0, 3600.0, 1800.0],
            500,
        );
        assert_eq!(c.gpus, 4);
        assert_eq!(c.fleet_usd_per_hour, 10.8);
        assert_eq!(c.gpu_seconds, 10800.0);
        assert_eq!(c.cost_usd, 7.2 + 1.8);
        assert_eq!(c.cost_per_1k_requests_usd, 18.0);
        assert_eq!(c.price_source, "a100: 1.8 (stated); h100: 3.6 (stated)");
    }
}
