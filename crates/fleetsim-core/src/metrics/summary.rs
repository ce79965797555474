//! The run summary (`summary.json`) and the percentile helpers it is built with.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{FleetTracker, RequestRec, WorstMoment};
use crate::decision::Branch;
use crate::time::{SimTime, ns_to_secs};

/// Summary statistics of a latency sample, seconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Sample size.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// [`percentiles`] of a sample given as value (ns) -> multiplicity, without expanding it:
/// the same numpy interpolation between closest ranks, the ranks found by walking the
/// cumulative counts.
pub fn weighted_percentiles(hist: &BTreeMap<u64, u64>) -> Percentiles {
    let n: u64 = hist.values().sum();
    if n == 0 {
        return Percentiles::default();
    }
    // The value at 0-based rank `k`.
    let at = |k: u64| {
        let mut seen = 0;
        for (&v, &c) in hist {
            seen += c;
            if k < seen {
                return ns_to_secs(v);
            }
        }
        unreachable!("rank below the total count")
    };
    let q = |p: f64| {
        let idx = p * (n - 1) as f64;
        let (lo, hi) = (idx.floor() as u64, idx.ceil() as u64);
        let (xl, xh) = (at(lo), at(hi));
        xl + (xh - xl) * (idx - lo as f64)
    };
    let sum: f64 = hist.iter().map(|(&v, &c)| ns_to_secs(v) * c as f64).sum();
    Percentiles {
        count: n,
        mean: round6(sum / n as f64),
        p50: round6(q(0.5)),
        p90: round6(q(0.9)),
        p99: round6(q(0.99)),
        max: round6(ns_to_secs(*hist.keys().next_back().expect("non-empty"))),
    }
}

/// Rounds to the microsecond (reports only).
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Percentiles with linear interpolation between closest ranks (numpy's default).
pub fn percentiles(mut xs: Vec<f64>) -> Percentiles {
    xs.sort_by(|a, b| a.total_cmp(b));
    percentiles_of_sorted(&xs)
}

/// [`percentiles`] of a sample of nanoseconds in seconds: the same figures, bit for bit
/// (sorting the integers sorts their conversions, and the mean sums them in the same order).
pub fn percentiles_ns(mut ns: Vec<u64>) -> Percentiles {
    ns.sort_unstable();
    let xs: Vec<f64> = ns.into_iter().map(ns_to_secs).collect();
    percentiles_of_sorted(&xs)
}

fn percentiles_of_sorted(xs: &[f64]) -> Percentiles {
    if xs.is_empty() {
        return Percentiles::default();
    }
    let q = |p: f64| {
        let idx = p * (xs.len() - 1) as f64;
        let lo = idx.floor() as usize;
        let hi = idx.ceil() as usize;
        xs[lo] + (xs[hi] - xs[lo]) * (idx - lo as f64)
    };
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    Percentiles {
        count: xs.len() as u64,
        mean: round6(mean),
        p50: round6(q(0.5)),
        p90: round6(q(0.9)),
        p99: round6(q(0.99)),
        max: round6(*xs.last().expect("non-empty")),
    }
}

/// Request counts.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RequestCounts {
    /// Turns planned by the workload.
    pub planned: u64,
    /// Sent to the router.
    pub arrived: u64,
    /// Completed.
    pub finished: u64,
    /// Arrived but not completed (nor failed) when the run ended.
    pub in_flight: u64,
    /// Failed: their backend left or restarted while holding them, or refused them.
    pub failed: u64,
    /// Attempts refused by the router because discovery listed no endpoint.
    pub rejected: u64,
    /// Turns given up after the client's last retry (their sessions end there).
    pub abandoned: u64,
    /// Attempts refused because no backend serves the model they name (404, not retried;
    /// their turns count as abandoned). Absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub unserved_model: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Per-backend results.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BackendSummary {
    /// Name (`backend-{i}`).
    pub name: String,
    /// URL.
    pub url: String,
    /// `[[backends.groups]]` name (absent for a single `[backends]` table).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Profile (`<model>/<gpu>/tp<N>`), when the group names one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// Model names it serves, when its group names them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub serves: Vec<String>,
    /// Concurrent-request slots (`max_num_seqs`).
    pub slots: u32,
    /// Requests routed here.
    pub requests: u64,
    /// This backend's share of the requests routed to backends in service (0 to 1).
    pub request_share: f64,
    /// `request_share` over this backend's share of the slots in service: 1 = its fair
    /// share by capacity, 0 = it served nothing (equal capacities: `request_share x N`).
    pub share_per_capacity: f64,
    /// Sessions whose first turn was routed here.
    pub first_turn_sessions: u64,
    /// Sessions whose latest turn was routed here (where they ended up).
    pub last_turn_sessions: u64,
    /// Highest running count.
    pub peak_running: u32,
    /// Highest waiting count.
    pub peak_waiting: u32,
    /// Time-averaged running count.
    pub mean_running: f64,
    /// Time-averaged waiting count.
    pub mean_waiting: f64,
    /// Seconds with at least one request running.
    pub busy_s: f64,
    /// Seconds in service with nothing running or waiting.
    pub idle_s: f64,
    /// Seconds out of the fleet (before joining, after leaving or draining, while
    /// restarting), nothing running.
    pub out_of_service_s: f64,
    /// Engine steps executed.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix cache hit rate (hit tokens / queried tokens).
    pub prefix_cache_hit_rate: f64,
    /// What its pods cost (autoscaled fleets only).
    #[serde(flatten)]
    pub cost: Option<crate::autoscale::BackendCost>,
}

/// The run summary written to `summary.json`. Deterministic: wall-clock figures are not
/// here (they go to `perf.json`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Master seed.
    pub seed: u64,
    /// Policy description.
    pub policy: String,
    /// fleetsim version.
    pub version: String,
    /// Simulated seconds until the last event.
    pub sim_time_s: f64,
    /// Events processed.
    pub events: u64,
    /// Backends.
    pub backend_count: u64,
    /// Sessions.
    pub sessions: u64,
    /// Sessions cut short by the context limit.
    pub sessions_hit_context_limit: u64,
    /// Request counts.
    pub requests: RequestCounts,
    /// See module docs.
    pub idle_while_queued_s: f64,
    /// See module docs.
    pub stranded_slot_s: f64,
    /// See module docs.
    pub latched_sessions: u64,
    /// The most sessions any one backend ended up holding (by latest turn): 8 when all of
    /// burst8's agents pile onto one backend.
    pub peak_backend_sessions: u64,
    /// Largest per-backend `request_share`: 1 when one backend served everything.
    pub request_share_max: f64,
    /// Smallest per-backend `request_share` (0 when a backend in service served nothing).
    pub request_share_min: f64,
    /// Largest over smallest requests per slot across backends in service, each backend's
    /// count floored at 1 so that it stays finite: 192 of 192 requests on one of 6 equal
    /// backends reads 192; 1 = perfectly even by capacity. On a multi-model fleet, the
    /// largest of the ratios within each set of backends serving the same models.
    pub request_share_max_min_ratio: f64,
    /// Jain's fairness index of requests per slot across backends in service:
    /// `(sum x)^2 / (n sum x^2)`, 1 = even by capacity, `1/n` = all on one backend. On a
    /// multi-model fleet, the indices within each set of backends serving the same models,
    /// weighted by their share of the requests (backends serving another model share none).
    pub request_jain_index: f64,
    /// Backends in service at some point of the run that served no request.
    pub backends_never_served: u64,
    /// Decisions per branch (every branch listed, zeros included).
    pub decisions_by_branch: BTreeMap<String, u64>,
    /// Per decision, the true outstanding requests of the pick minus the fewest any backend
    /// had at that instant (0 = the pick was among the least loaded in truth).
    pub decision_regret: Percentiles,
    /// Decisions whose pick was not among the least loaded in truth.
    pub decisions_with_regret: u64,
    /// Per decision that read engine stats, the age of the oldest entry it saw (seconds).
    pub view_age_s: Percentiles,
    /// Finished requests per simulated second.
    pub throughput_rps: f64,
    /// Output tokens of finished requests per simulated second.
    pub output_tokens_per_s: f64,
    /// Fleet prefix cache hit rate.
    pub prefix_cache_hit_rate: f64,
    /// Fleet preemptions.
    pub preemptions: u64,
    /// Engine arrival to first scheduled.
    pub queue_wait_s: Percentiles,
    /// Router arrival to first chunk at the client.
    pub ttft_s: Percentiles,
    /// Router arrival to stream end at the client.
    pub e2e_s: Percentiles,
    /// Time per output token after the first, per request with at least 2 output tokens:
    /// `(e2e - ttft) / (output_tokens - 1)`, as vLLM's `benchmarks/benchmark_serving.py`
    /// (`calculate_metrics`: `tpot = (latency - ttft) / (output_len - 1)`) computes it.
    pub tpot_s: Percentiles,
    /// Inter-token latency: the gap between consecutive output tokens of a request, over
    /// every output token after the first of every finished request (token-weighted, as
    /// vLLM's `benchmark_serving.py` collects `itls` across requests); engine-side sample
    /// times, a gap spanning any preemption. `count` is in tokens. Empty in queueing mode.
    pub itl_s: Percentiles,
    /// Per backend.
    pub backends: Vec<BackendSummary>,
    /// The moment of greatest stranding, if any.
    pub worst_moment: Option<WorstMoment>,
    /// Requests refused per model name no backend serves (absent when none was).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unserved_models: BTreeMap<String, u64>,
    /// Replays of session traces: pacing and recorded-vs-simulated latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::metrics::fidelity::ReplaySummary>,
    /// The autoscaler: replica-seconds, scale events, cost (`[autoscaler]` only).
    #[serde(flatten)]
    pub autoscale: Option<crate::autoscale::AutoscaleSummary>,
    /// SLO attainment and goodput (`[slo]` only).
    #[serde(flatten)]
    pub slo: Option<super::SloSummary>,
    /// A fixed fleet's GPUs, price and cost (`[slo]` or `[price]`, no `[autoscaler]`).
    #[serde(flatten)]
    pub fleet_cost: Option<super::FleetCost>,
}

/// Engine-side counters needed by the summary, per backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCounters {
    /// Steps.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix-cache query tokens.
    pub query_tokens: u64,
    /// Prefix-cache hit tokens.
    pub hit_tokens: u64,
}

/// Inputs of [`summarize`] besides the records.
pub struct SummaryInputs<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Seed.
    pub seed: u64,
    /// Policy description.
    pub policy: String,
    /// End of the run.
    pub end: SimTime,
    /// Events processed.
    pub events: u64,
    /// Backend names and URLs.
    pub names: Vec<(String, String)>,
    /// Group and profile per backend.
    pub labels: Vec<crate::backend::Label>,
    /// Engine counters per backend.
    pub engines: Vec<EngineCounters>,
    /// Planned requests.
    pub planned: u64,
    /// Sessions.
    pub sessions: u64,
    /// Sessions cut by the context limit.
    pub sessions_hit_context_limit: u64,
    /// Latched sessions (computed by the simulation, which knows the first-turn truth).
    pub latched_sessions: u64,
    /// Sessions per backend by first turn.
    pub first_turns: Vec<u64>,
    /// Sessions per backend by latest turn.
    pub last_turns: Vec<u64>,
    /// Per decision: true outstanding requests of the pick minus the fleet minimum.
    pub regrets: &'a [u32],
    /// Per decision that saw engine stats: age of the oldest entry, ns.
    pub view_ages_ns: &'a [u64],
    /// Inter-token gaps of finished requests: gap (ns) -> output tokens.
    pub itl_ns: &'a BTreeMap<u64, u64>,
    /// Attempts refused for lack of endpoints.
    pub rejected: u64,
    /// Turns abandoned after the last retry.
    pub abandoned: u64,
    /// Attempts refused per model name no backend serves.
    pub unserved_models: BTreeMap<String, u64>,
}

fn secs(ns: u128) -> f64 {
    round6(ns as f64 / 1e9)
}

/// What the summary needs of the per-request records, taken record by record as they
/// leave a run (or all at once from kept records): the counts exactly, and for the
/// percentiles one compact sample per latency (8 bytes a request: nanoseconds, or TPOT's
/// seconds), never the records themselves.
#[derive(Clone, Debug, Default)]
pub struct RequestStats {
    per_backend: Vec<u64>,
    arrived: u64,
    finished: u64,
    failed: u64,
    out_tokens: u64,
    queue_wait_ns: Vec<u64>,
    ttft_ns: Vec<u64>,
    e2e_ns: Vec<u64>,
    tpot_s: Vec<f64>,
}

impl RequestStats {
    /// Nothing yet, for a fleet of `n_backends`.
    pub fn new(n_backends: usize) -> RequestStats {
        RequestStats {
            per_backend: vec![0; n_backends],
            ..Default::default()
        }
    }

    /// Of kept records.
    pub fn of(n_backends: usize, requests: &[RequestRec]) -> RequestStats {
        let mut s = RequestStats::new(n_backends);
        requests.iter().for_each(|r| s.add(r));
        s
    }

    /// Takes one record as it stands (final, or in flight at the end of the run).
    pub fn add(&mut self, r: &RequestRec) {
        self.arrived += 1;
        self.per_backend[r.backend.index()] += 1;
        if r.t_done.is_some() {
            self.finished += 1;
            self.out_tokens += u64::from(r.output_tokens);
        }
        if r.t_failed.is_some() {
            self.failed += 1;
        }
        if let (Some(e), Some(a)) = (r.t_engine, r.t_admit) {
            self.queue_wait_ns.push((a - e).0);
        }
        if let Some(c) = r.t_first_chunk {
            self.ttft_ns.push((c - r.t_router).0);
        }
        if let Some(d) = r.t_done {
            self.e2e_ns.push((d - r.t_router).0);
        }
        if let Some(t) = tpot(r) {
            self.tpot_s.push(t);
        }
    }
}

/// Builds the summary from kept records.
pub fn summarize(inp: SummaryInputs, fleet: &FleetTracker, requests: &[RequestRec], decisions: &[Branch]) -> Summary {
    let stats = RequestStats::of(inp.names.len(), requests);
    summarize_stats(inp, fleet, stats, decisions)
}

/// Builds the summary from the records' [`RequestStats`].
pub fn summarize_stats(
    inp: SummaryInputs,
    fleet: &FleetTracker,
    requests: RequestStats,
    decisions: &[Branch],
) -> Summary {
    let end_s = inp.end.as_secs_f64();
    let span = inp.end.0 as f64;
    let n = inp.names.len();
    let RequestStats {
        per_backend: per_backend_requests,
        arrived,
        finished,
        failed,
        out_tokens,
        queue_wait_ns,
        ttft_ns,
        e2e_ns,
        tpot_s,
    } = requests;
    let by_branch = decisions_by_branch(decisions);
    let ratio = |a: u64, b: u64| per_unit(a as f64, b as f64);
    let (backends, share) = with_shares(backend_summaries(&inp, fleet, &per_backend_requests, span), end_s);
    let q: u64 = inp.engines.iter().map(|e| e.query_tokens).sum();
    let h: u64 = inp.engines.iter().map(|e| e.hit_tokens).sum();
    Summary {
        scenario: inp.scenario.to_string(),
        seed: inp.seed,
        policy: inp.policy,
        version: env!("CARGO_PKG_VERSION").to_string(),
        sim_time_s: round6(end_s),
        events: inp.events,
        backend_count: n as u64,
        sessions: inp.sessions,
        sessions_hit_context_limit: inp.sessions_hit_context_limit,
        requests: RequestCounts {
            planned: inp.planned,
            arrived,
            finished,
            in_flight: arrived - finished - failed,
            failed,
            rejected: inp.rejected,
            abandoned: inp.abandoned,
            unserved_model: inp.unserved_models.values().sum(),
        },
        idle_while_queued_s: secs(fleet.idle_while_queued_ns),
        stranded_slot_s: secs(fleet.stranded_ns),
        latched_sessions: inp.latched_sessions,
        peak_backend_sessions: inp.last_turns.iter().copied().max().unwrap_or(0),
        request_share_max: share.max,
        request_share_min: share.min,
        request_share_max_min_ratio: share.max_min_ratio,
        request_jain_index: share.jain,
        backends_never_served: share.never_served,
        decision_regret: percentiles(inp.regrets.iter().map(|&r| f64::from(r)).collect()),
        decisions_with_regret: inp.regrets.iter().filter(|&&r| r > 0).count() as u64,
        view_age_s: percentiles(inp.view_ages_ns.iter().map(|&a| ns_to_secs(a)).collect()),
        decisions_by_branch: by_branch,
        throughput_rps: per_unit(finished as f64, end_s),
        output_tokens_per_s: per_unit(out_tokens as f64, end_s),
        prefix_cache_hit_rate: ratio(h, q),
        preemptions: inp.engines.iter().map(|e| e.preemptions).sum(),
        queue_wait_s: percentiles_ns(queue_wait_ns),
        ttft_s: percentiles_ns(ttft_ns),
        e2e_s: percentiles_ns(e2e_ns),
        tpot_s: percentiles(tpot_s),
        itl_s: weighted_percentiles(inp.itl_ns),
        backends,
        worst_moment: fleet.worst.as_ref().map(|(t, s, b)| WorstMoment {
            t_s: round6(t.as_secs_f64()),
            stranded: *s,
            backends: b.clone(),
        }),
        unserved_models: inp.unserved_models.clone(),
        replay: None,
        autoscale: None,
        slo: None,
        fleet_cost: None,
    }
}

/// `a / b`, rounded for reports; 0 when there is nothing to divide by.
fn per_unit(a: f64, b: f64) -> f64 {
    if b > 0.0 { round6(a / b) } else { 0.0 }
}

/// Decisions per branch, every branch listed (0 when none took it).
fn decisions_by_branch(decisions: &[Branch]) -> BTreeMap<String, u64> {
    let mut by_branch: BTreeMap<String, u64> = Branch::ALL.iter().map(|b| (b.as_str().to_string(), 0)).collect();
    for b in decisions {
        *by_branch.get_mut(b.as_str()).expect("all branches listed") += 1;
    }
    by_branch
}

/// Each backend's summary over a run of `span` ns (its request shares left at 0, for
/// [`Share`] to fill).
fn backend_summaries(inp: &SummaryInputs, fleet: &FleetTracker, requests: &[u64], span: f64) -> Vec<BackendSummary> {
    (0..inp.names.len())
        .map(|i| {
            let t = &fleet.backends[i];
            let e = inp.engines[i];
            BackendSummary {
                name: inp.names[i].0.clone(),
                url: inp.names[i].1.clone(),
                group: inp.labels.get(i).map(|l| l.group.clone()).unwrap_or_default(),
                profile: inp.labels.get(i).map(|l| l.profile.clone()).unwrap_or_default(),
                serves: inp.labels.get(i).map(|l| l.serves.clone()).unwrap_or_default(),
                slots: t.slots,
                requests: requests[i],
                request_share: 0.0,
                share_per_capacity: 0.0,
                first_turn_sessions: inp.first_turns[i],
                last_turn_sessions: inp.last_turns[i],
                peak_running: t.peak_running,
                peak_waiting: t.peak_waiting,
                mean_running: per_unit(t.running_ns as f64, span),
                mean_waiting: per_unit(t.waiting_ns as f64, span),
                busy_s: secs(t.busy_ns),
                idle_s: secs(t.idle_ns),
                out_of_service_s: secs(t.out_ns),
                steps: e.steps,
                preemptions: e.preemptions,
                prefix_cache_hit_rate: per_unit(e.hit_tokens as f64, e.query_tokens as f64),
                cost: None,
            }
        })
        .collect()
}

/// The backends with their request shares filled in, and the shares over the fleet.
fn with_shares(mut backends: Vec<BackendSummary>, end_s: f64) -> (Vec<BackendSummary>, Share) {
    let mut share = Share::of(&backends, end_s);
    for (b, (s, c)) in backends.iter_mut().zip(std::mem::take(&mut share.per_backend)) {
        b.request_share = s;
        b.share_per_capacity = c;
    }
    (backends, share)
}

/// How the requests spread over the backends that were in service at some point of the run
/// (a backend out of service throughout is not expected to serve, so it is left out).
#[derive(Debug, PartialEq)]
struct Share {
    /// Per backend: (`request_share`, `share_per_capacity`); zeros for one left out.
    per_backend: Vec<(f64, f64)>,
    max: f64,
    min: f64,
    max_min_ratio: f64,
    jain: f64,
    never_served: u64,
}

impl Share {
    fn of(backends: &[BackendSummary], end_s: f64) -> Share {
        // In service at some point: less time out of service than the run lasted.
        let counted: Vec<bool> = backends
            .iter()
            .map(|b| end_s <= 0.0 || b.out_of_service_s < round6(end_s))
            .collect();
        let in_service = || backends.iter().zip(&counted).filter(|(_, c)| **c).map(|(b, _)| b);
        let total: u64 = in_service().map(|b| b.requests).sum();
        let slots: u64 = in_service().map(|b| u64::from(b.slots.max(1))).sum();
        let n = in_service().count();
        let per_backend = backends
            .iter()
            .zip(&counted)
            .map(|(b, &c)| {
                if !c || total == 0 {
                    return (0.0, 0.0);
                }
                let s = b.requests as f64 / total as f64;
                let cap = f64::from(b.slots.max(1)) / slots as f64;
                (round6(s), round6(s / cap))
            })
            .collect();
        if n == 0 || total == 0 {
            // Nothing was routed: nothing is uneven.
            return Share {
                per_backend,
                max: 0.0,
                min: 0.0,
                max_min_ratio: 1.0,
                jain: 1.0,
                never_served: 0,
            };
        }
        let share = |b: &BackendSummary| b.requests as f64 / total as f64;
        let max = in_service().map(share).fold(0.0, f64::max);
        let min = in_service().map(share).fold(1.0, f64::min);
        // Backends serving different models share no requests: the spread is measured
        // within each set serving the same models (the whole fleet on a one-model fleet),
        // the Jain index weighted by each set's requests and the ratio the largest.
        let mut sets: Vec<(&[String], Vec<&BackendSummary>)> = Vec::new();
        for b in in_service() {
            match sets.iter_mut().find(|(serves, _)| *serves == b.serves.as_slice()) {
                Some((_, set)) => set.push(b),
                None => sets.push((b.serves.as_slice(), vec![b])),
            }
        }
        let (mut ratio, mut jain) = (1.0_f64, 0.0);
        for (_, set) in &sets {
            let (r, j) = spread(set);
            let requests: u64 = set.iter().map(|b| b.requests).sum();
            ratio = ratio.max(r);
            jain += if sets.len() == 1 {
                j
            } else {
                j * requests as f64 / total as f64
            };
        }
        Share {
            per_backend,
            max: round6(max),
            min: round6(min),
            max_min_ratio: round6(ratio),
            jain: round6(jain),
            never_served: in_service().filter(|b| b.requests == 0).count() as u64,
        }
    }
}

/// Largest over smallest requests per slot (each count floored at 1) and Jain's index of
/// requests per slot over `set` (1 and 1 when it served nothing).
fn spread(set: &[&BackendSummary]) -> (f64, f64) {
    let per_slot = |b: &BackendSummary, floor: u64| b.requests.max(floor) as f64 / f64::from(b.slots.max(1));
    let hi = set.iter().map(|b| per_slot(b, 0)).fold(0.0, f64::max);
    let lo = set.iter().map(|b| per_slot(b, 1)).fold(f64::INFINITY, f64::min);
    let xs: Vec<f64> = set.iter().map(|b| per_slot(b, 0)).collect();
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if sq == 0.0 {
        return (1.0, 1.0);
    }
    ((hi / lo).max(1.0), sum * sum / (xs.len() as f64 * sq))
}

/// A finished request's TPOT with at least 2 output tokens (see [`Summary::tpot_s`]);
/// client-side times, as the benchmark measures them.
fn tpot(r: &RequestRec) -> Option<f64> {
    if r.output_tokens < 2 {
        return None;
    }
    Some(ns_to_secs((r.t_done? - r.t_first_chunk?).0) / f64::from(r.output_tokens - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BackendId, SessionId};

    #[test]
    fn tpot_is_vllm_benchmark_serving_definition() {
        let rec = |out: u32, first_ms: u64, done_ms: u64| RequestRec {
            session: SessionId(0),
            turn: 0,
            backend: BackendId(0),
            branch: Branch::ALL[0],
            prompt_tokens: 10,
            output_tokens: out,
            t_router: SimTime(0),
            t_engine: Some(SimTime(0)),
            t_admit: Some(SimTime(0)),
            t_first_token: Some(SimTime(first_ms * 1_000_000)),
            t_first_chunk: Some(SimTime(first_ms * 1_000_000)),
            t_finish_engine: Some(SimTime(done_ms * 1_000_000)),
            t_done: Some(SimTime(done_ms * 1_000_000)),
            t_failed: None,
            cached_tokens: 0,
            preemptions: 0,
        };
        // (1000 - 100) ms over 9 gaps = 100 ms; (700 - 100) over 3 = 200 ms; 1 token: none.
        let t = percentiles(
            [rec(10, 100, 1000), rec(4, 100, 700), rec(1, 100, 100)]
                .iter()
                .filter_map(tpot)
                .collect(),
        );
        assert_eq!((t.count, t.p50), (2, 0.15));
    }

    #[test]
    fn weighted_percentiles_match_the_expanded_sample() {
        // 3 gaps of 10 ms and 1 of 40 ms: numpy.percentile([10,10,10,40], [50,90,99]) ms =
        // 10, 31, 39.1; mean 17.5.
        let h = BTreeMap::from([(10_000_000, 3), (40_000_000, 1)]);
        let p = weighted_percentiles(&h);
        assert_eq!(
            (p.count, p.mean, p.p50, p.p90, p.p99, p.max),
            (4, 0.0175, 0.01, 0.031, 0.0391, 0.04)
        );
        assert_eq!(weighted_percentiles(&BTreeMap::new()), Percentiles::default());
    }

    proptest::proptest! {
        #[test]
        fn weighted_percentiles_are_ordered_and_exact(h in proptest::collection::btree_map(1u64..10_000_000_000, 1u64..50, 1..20)) {
            let p = weighted_percentiles(&h);
            proptest::prop_assert!(p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.max);
            let xs = h.iter().flat_map(|(&v, &c)| std::iter::repeat_n(ns_to_secs(v), c as usize)).collect();
            let e = percentiles(xs);
            // Same ranks and interpolation; the mean may differ in the last ulp before rounding.
            proptest::prop_assert_eq!((p.count, p.p50, p.p90, p.p99, p.max), (e.count, e.p50, e.p90, e.p99, e.max));
            proptest::prop_assert!((p.mean - e.mean).abs() <= 1e-6);
        }
    }

    fn backend(requests: u64, slots: u32, out_of_service_s: f64) -> BackendSummary {
        BackendSummary {
            requests,
            slots,
            out_of_service_s,
            ..Default::default()
        }
    }

    #[test]
    fn share_of_one_backend_serving_everything() {
        // 192 of 192 on one of 6 equal backends.
        let bs: Vec<_> = [192, 0, 0, 0, 0, 0].iter().map(|&r| backend(r, 4, 0.0)).collect();
        let s = Share::of(&bs, 100.0);
        assert_eq!((s.max, s.min, s.max_min_ratio, s.never_served), (1.0, 0.0, 192.0, 5));
        assert_eq!(s.jain, round6(1.0 / 6.0));
        assert_eq!(s.per_backend[0], (1.0, 6.0));
        assert_eq!(s.per_backend[1], (0.0, 0.0));
    }

    #[test]
    fn share_is_measured_within_the_backends_serving_each_model() {
        let serving = |requests, slots, model: &str| BackendSummary {
            serves: vec![model.to_string()],
            ..backend(requests, slots, 0.0)
        };
        // Each model spread evenly over its own backends (3 x 128 slots, 2 x 64 slots):
        // even, though a Qwen slot serves twice what a Llama slot does.
        let even = [
            serving(17, 128, "llama"),
            serving(17, 128, "llama"),
            serving(17, 128, "llama"),
            serving(17, 64, "qwen"),
            serving(17, 64, "qwen"),
        ];
        let s = Share::of(&even, 60.0);
        assert_eq!((s.jain, s.max_min_ratio), (1.0, 1.0));
        assert_eq!((s.max, s.min), (0.2, 0.2));
        // All of Llama's 30 on one backend, Qwen's 20 even: Jain 1/3 within Llama (60 %
        // of the requests) and 1 within Qwen, 0.6 x 1/3 + 0.4 x 1 = 0.6; ratio 30.
        let hot = [
            serving(30, 128, "llama"),
            serving(0, 128, "llama"),
            serving(0, 128, "llama"),
            serving(10, 64, "qwen"),
            serving(10, 64, "qwen"),
        ];
        let s = Share::of(&hot, 60.0);
        assert_eq!((s.jain, s.max_min_ratio, s.never_served), (0.6, 30.0, 2));
    }

    #[test]
    fn share_is_per_capacity_and_skips_backends_never_in_service() {
        // 8 slots served 20, 4 slots served 10: even by capacity; the third was out all run.
        let bs = vec![backend(20, 8, 0.0), backend(10, 4, 0.0), backend(0, 4, 50.0)];
        let s = Share::of(&bs, 50.0);
        assert_eq!((s.jain, s.max_min_ratio, s.never_served), (1.0, 1.0, 0));
        assert_eq!(s.per_backend, vec![(0.666667, 1.0), (0.333333, 1.0), (0.0, 0.0)]);
        // Equal capacity, 3 vs 1: Jain = 16 / (2 x 10) = 0.8.
        let s = Share::of(&[backend(3, 4, 0.0), backend(1, 4, 0.0)], 10.0);
        assert_eq!((s.jain, s.max_min_ratio, s.max, s.min), (0.8, 3.0, 0.75, 0.25));
        // Nothing routed.
        let s = Share::of(&[backend(0, 4, 0.0)], 10.0);
        assert_eq!((s.jain, s.max_min_ratio, s.never_served), (1.0, 1.0, 0));
    }

    proptest::proptest! {
        #[test]
        fn percentiles_of_nanoseconds_are_those_of_their_seconds(ns in proptest::collection::vec(0u64..4_000_000_000_000, 0..200)) {
            let secs: Vec<f64> = ns.iter().map(|&x| ns_to_secs(x)).collect();
            proptest::prop_assert_eq!(percentiles_ns(ns), percentiles(secs));
        }
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let p = percentiles(vec![4.0, 1.0, 3.0, 2.0]);
        // numpy.percentile([1,2,3,4], [50, 90, 99]) = 2.5, 3.7, 3.97
        assert_eq!((p.p50, p.p90, p.p99, p.max, p.mean), (2.5, 3.7, 3.97, 4.0, 2.5));
        assert_eq!(percentiles(vec![]).count, 0);
    }
}
