//! One session's journey: where each of its turns went and why, for a user chasing one
//! customer's ticket rather than the run's worst episode.
//!
//! Per turn: its request, arrival, the backend and the branch that chose it, the view the
//! router had of every backend at that instant (values and ages, from the decision audit)
//! beside the truth, the queue the turn met on its backend, and the counterfactual pick a
//! fresh, load-aware router would have made (the listed backend with the fewest requests
//! truly in flight, the audit's regret baseline) with the queue *it* would have met. Ends
//! with a verdict naming the pattern (a first pick latched by affinity while another
//! backend idled, or load-aware picks that moved). Reads a finished [`RunResult`]; the
//! session-level re-runs under other policies are added by the caller.

use serde::Serialize;

use super::find::family;
use super::{Cause, secs};
use crate::decision::Branch;
use crate::metrics::round6;
use crate::sim::RunResult;
use crate::time::{SimTime, ns_to_secs};

/// What the router saw of one backend at one decision, beside the truth.
#[derive(Clone, Debug, Serialize)]
pub struct SeenBackend {
    /// Name.
    pub backend: String,
    /// Listed by service discovery then (an unlisted backend was not a choice).
    pub listed: bool,
    /// Scraped `vllm:num_requests_running` (None: no engine stats).
    pub view_running: Option<u32>,
    /// Scraped `vllm:num_requests_waiting`.
    pub view_waiting: Option<u32>,
    /// Age of that scrape at the decision, seconds.
    pub view_age_s: Option<f64>,
    /// The router's own dispatches to it in the request-stats window (None: never used).
    pub window_dispatches: Option<u32>,
    /// Requests truly in flight to it (dispatched, not finished) at the decision.
    pub true_in_flight: u32,
    /// It was the pick.
    pub picked: bool,
}

/// The queue a request met (or would have met) on a backend: engine state just before
/// the instant it arrived there.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Queue {
    /// Requests running.
    pub running: u32,
    /// Requests waiting.
    pub waiting: u32,
}

/// The pick a fresh, load-aware router would have made.
#[derive(Clone, Debug, Serialize)]
pub struct FreshPick {
    /// The listed backend with the fewest requests truly in flight (the actual pick when
    /// it is among them, else the first in backend order).
    pub backend: String,
    /// Its requests truly in flight at the decision.
    pub true_in_flight: u32,
    /// The queue it would have met at the same engine-arrival instant.
    pub would_meet: Queue,
    /// The actual pick had this many more requests in flight (the decision's regret).
    pub regret: u32,
}

/// One turn of the session.
#[derive(Clone, Debug, Serialize)]
pub struct JourneyTurn {
    /// Turn index within the session (as in requests.csv).
    pub turn: u32,
    /// Request id (as in requests.csv, decisions.csv and timeline.json).
    pub request_id: usize,
    /// Arrival at the router (the decision), seconds.
    pub arrival_s: f64,
    /// The backend it went to.
    pub backend: String,
    /// The policy branch that chose it (as in decisions.csv).
    pub branch: String,
    /// The kind of reasoning that branch is.
    pub cause: Cause,
    /// Prefix match length the decision found, characters (None: not in the audit).
    pub match_chars: Option<u64>,
    /// Age of the oldest engine-stats entry the decision read, seconds (None: it read none
    /// or the decision is not in the audit).
    pub view_age_s: Option<f64>,
    /// The view of every backend (empty when the decision is not in the audit).
    pub view: Vec<SeenBackend>,
    /// The queue it met on its backend at engine arrival (None: it never arrived).
    pub met: Option<Queue>,
    /// Seconds from engine arrival to first scheduled.
    pub queue_wait_s: Option<f64>,
    /// Time to first token at the client, seconds.
    pub ttft_s: Option<f64>,
    /// End to end at the client, seconds.
    pub e2e_s: Option<f64>,
    /// When it failed (its backend left or restarted), seconds.
    pub failed_at_s: Option<f64>,
    /// The counterfactual pick (None: the decision is not in the audit).
    pub fresh_pick: Option<FreshPick>,
}

/// Another backend's idleness while the session was active.
#[derive(Clone, Debug, Serialize)]
pub struct IdleWhile {
    /// Name.
    pub backend: String,
    /// Seconds with nothing running or waiting, between the session's first arrival and
    /// its last completion.
    pub idle_s: f64,
}

/// The session re-run under a counterfactual (same scenario, seed and workload).
#[derive(Clone, Debug, Serialize)]
pub struct SessionCounterfactual {
    /// What changed ("this run", "fresh signals", "other policy").
    pub label: String,
    /// The policy it ran.
    pub policy: String,
    /// Turns per backend, in backend order (backends that got none left out).
    pub turns_per_backend: Vec<(String, u32)>,
    /// Total seconds the session's turns waited in engine queues.
    pub queue_wait_s: f64,
    /// Its median and worst TTFT, seconds.
    pub ttft_p50_s: f64,
    /// ...
    pub ttft_max_s: f64,
}

/// One session's story.
#[derive(Clone, Debug, Serialize)]
pub struct Journey {
    /// Scenario.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Policy.
    pub policy: String,
    /// The session's id (the trace's own id for a replay).
    pub session: String,
    /// Its turns in order.
    pub turns: Vec<JourneyTurn>,
    /// The other backends' idle time while the session was active.
    pub idle_elsewhere: Vec<IdleWhile>,
    /// Decisions were recorded only up to this many (None: all).
    pub audit_truncated_at: Option<usize>,
    /// The session under the counterfactual re-runs, this run first.
    pub counterfactuals: Vec<SessionCounterfactual>,
    /// The story in one paragraph.
    pub verdict: String,
}

/// Per backend, its (time, running, waiting) rows in time order.
struct Series(Vec<Vec<(SimTime, u32, u32)>>);

impl Series {
    fn of(res: &RunResult, n: usize) -> Self {
        let mut per = vec![Vec::new(); n];
        for r in &res.series {
            if let Some(v) = per.get_mut(r.backend.index()) {
                v.push((r.t, r.running, r.waiting));
            }
        }
        Series(per)
    }

    /// Backend `b`'s state just before `t` (nothing at or after `t` counts, so a request's
    /// own arrival is not in the queue it met).
    fn before(&self, b: usize, t: SimTime) -> Queue {
        let rows = &self.0[b];
        let k = rows.partition_point(|r| r.0 < t);
        match k.checked_sub(1).map(|k| rows[k]) {
            Some((_, running, waiting)) => Queue { running, waiting },
            None => Queue { running: 0, waiting: 0 },
        }
    }

    /// Nanoseconds in `[from, until)` during which backend `b` had nothing running or waiting.
    fn idle_ns(&self, b: usize, from: SimTime, until: SimTime) -> u64 {
        let rows = &self.0[b];
        let mut idle = 0u64;
        let mut state = self.before(b, from);
        let mut at = from;
        let start = rows.partition_point(|r| r.0 < from);
        for &(t, running, waiting) in &rows[start..] {
            if t >= until {
                break;
            }
            if state.running + state.waiting == 0 {
                idle += t.0 - at.0;
            }
            at = t;
            state = Queue { running, waiting };
        }
        if state.running + state.waiting == 0 && until > at {
            idle += until.0 - at.0;
        }
        idle
    }
}

/// A session's turns under a run (its requests in routing order).
fn requests_of(res: &RunResult, session: usize) -> Vec<usize> {
    (0..res.requests.len())
        .filter(|&i| res.requests[i].session.index() == session)
        .collect()
}

fn opt_secs(from: SimTime, to: Option<SimTime>) -> Option<f64> {
    to.map(|t| round6(ns_to_secs(t.0.saturating_sub(from.0))))
}

/// The session's outcome under one run, for the counterfactual table.
/// `session` indexes `res.session_keys`; the same workload gives the same index in every
/// re-run.
pub fn session_outcome(label: &str, res: &RunResult, s: usize) -> Option<SessionCounterfactual> {
    if s >= res.session_keys.len() {
        return None;
    }
    let reqs = requests_of(res, s);
    let mut per = vec![0u32; res.summary.backends.len()];
    let (mut wait, mut ttfts) = (0u64, Vec::new());
    for &i in &reqs {
        let r = &res.requests[i];
        if let Some(c) = per.get_mut(r.backend.index()) {
            *c += 1;
        }
        if let (Some(e), Some(a)) = (r.t_engine, r.t_admit) {
            wait += a.0.saturating_sub(e.0);
        }
        if let Some(f) = r.t_first_chunk {
            ttfts.push(f.0.saturating_sub(r.t_router.0));
        }
    }
    ttfts.sort_unstable();
    let p50 = ttfts.get(ttfts.len().saturating_sub(1) / 2).copied().unwrap_or(0);
    Some(SessionCounterfactual {
        label: label.to_string(),
        policy: res.summary.policy.clone(),
        turns_per_backend: per
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, c)| (res.summary.backends[b].name.clone(), *c))
            .collect(),
        queue_wait_s: round6(ns_to_secs(wait)),
        ttft_p50_s: round6(ns_to_secs(p50)),
        ttft_max_s: round6(ns_to_secs(ttfts.last().copied().unwrap_or(0))),
    })
}

/// The journey of session `session` (an index into `res.session_keys`); `names` are the
/// backends' names. The caller adds the re-runs and then calls [`Journey::conclude`].
pub fn journey(res: &RunResult, names: &[String], session: usize) -> Journey {
    let series = Series::of(res, names.len());
    let log = &res.decisions;
    let reqs = requests_of(res, session);
    let s = &res.summary;
    Journey {
        scenario: s.scenario.clone(),
        seed: s.seed,
        policy: s.policy.clone(),
        session: res.session_keys[session].clone(),
        turns: reqs.iter().map(|&i| turn(res, names, &series, i)).collect(),
        idle_elsewhere: idle_elsewhere(res, names, &series, &reqs),
        audit_truncated_at: (log.rows.len() < res.requests.len()).then_some(log.rows.len()),
        counterfactuals: session_outcome("this run", res, session).into_iter().collect(),
        verdict: String::new(),
    }
}

/// The turn that request `i` was: where it went, by which branch, what it met there, and
/// (when the audit holds its decision) what the router saw and a fresh pick's choice.
fn turn(res: &RunResult, names: &[String], series: &Series, i: usize) -> JourneyTurn {
    let r = &res.requests[i];
    let pick = r.backend.index();
    let audited = res.decisions.rows.get(i).filter(|row| row.request.index() == i);
    let seen = audited.map(|row| decision_seen(res, names, series, i, row.t));
    JourneyTurn {
        turn: r.turn,
        request_id: i,
        arrival_s: secs(r.t_router),
        backend: names[pick].clone(),
        branch: r.branch.as_str().to_string(),
        cause: family(r.branch),
        match_chars: audited.map(|row| row.match_chars),
        view_age_s: seen.as_ref().and_then(|s| s.age).map(|a| round6(a.as_secs_f64())),
        met: r.t_engine.map(|t| series.before(pick, t)),
        queue_wait_s: r.t_engine.and_then(|e| opt_secs(e, r.t_admit)),
        ttft_s: opt_secs(r.t_router, r.t_first_chunk),
        e2e_s: opt_secs(r.t_router, r.t_done),
        failed_at_s: r.t_failed.map(secs),
        fresh_pick: seen.as_ref().and_then(|s| s.fresh.clone()),
        view: seen.map(|s| s.view).unwrap_or_default(),
    }
}

/// What the router saw at request `i`'s decision (made at `t`).
struct DecisionSeen {
    view: Vec<SeenBackend>,
    /// The oldest engine-stats entry it read.
    age: Option<crate::time::SimDuration>,
    fresh: Option<FreshPick>,
}

/// Each backend as the router saw it when it placed request `i`, and the pick a fresh
/// load-aware router would have made (the least loaded in truth, the pick itself on a tie).
fn decision_seen(res: &RunResult, names: &[String], series: &Series, i: usize, t: SimTime) -> DecisionSeen {
    let r = &res.requests[i];
    let pick = r.backend.index();
    let (v, truth) = res.decisions.detail(i);
    let mut age: Option<crate::time::SimDuration> = None;
    let mut view = Vec::new();
    for (b, (e, tr)) in v.iter().zip(truth).enumerate() {
        let a = e.engine.map(|s| t.saturating_since(s.read_at));
        if let Some(a) = a {
            age = Some(age.map_or(a, |m| m.max(a)));
        }
        view.push(SeenBackend {
            backend: names[b].clone(),
            listed: e.listed,
            view_running: e.engine.map(|s| s.running),
            view_waiting: e.engine.map(|s| s.waiting),
            view_age_s: a.map(|a| round6(a.as_secs_f64())),
            window_dispatches: e.requests.map(|q| q.window_dispatches),
            true_in_flight: *tr,
            picked: b == pick,
        });
    }
    let listed: Vec<usize> = (0..names.len()).filter(|&b| v.get(b).listed).collect();
    let fresh = listed.iter().map(|&b| truth[b]).min().map(|least| {
        let best = if truth[pick] == least {
            pick
        } else {
            *listed.iter().find(|&&b| truth[b] == least).expect("a listed minimum")
        };
        FreshPick {
            backend: names[best].clone(),
            true_in_flight: truth[best],
            would_meet: series.before(best, r.t_engine.unwrap_or(r.t_router)),
            regret: truth[pick].saturating_sub(least),
        }
    });
    DecisionSeen { view, age, fresh }
}

/// The other backends' idle time over the session's life (requests `reqs`).
fn idle_elsewhere(res: &RunResult, names: &[String], series: &Series, reqs: &[usize]) -> Vec<IdleWhile> {
    let from = reqs.first().map_or(SimTime(0), |&i| res.requests[i].t_router);
    let until = reqs
        .iter()
        .filter_map(|&i| {
            let r = &res.requests[i];
            r.t_done.or(r.t_failed)
        })
        .max()
        .unwrap_or(from);
    let used: Vec<usize> = reqs.iter().map(|&i| res.requests[i].backend.index()).collect();
    (0..names.len())
        .filter(|b| !used.contains(b))
        .map(|b| IdleWhile {
            backend: names[b].clone(),
            idle_s: round6(ns_to_secs(series.idle_ns(b, from, until))),
        })
        .collect()
}

/// A branch in words, for the verdict.
fn branch_words(branch: &str) -> String {
    let b = Branch::ALL.iter().find(|b| b.as_str() == branch);
    let what = match b.map(|b| family(*b)) {
        Some(Cause::QpsWindow) => "a QPS-window fallback",
        Some(Cause::MissingStats) => "a missing-stats QPS fallback",
        Some(Cause::LoadView | Cause::StaleView | Cause::ZeroStats) => "a load-aware pick",
        Some(Cause::Affinity) => "an affinity branch",
        Some(Cause::Score) => "a score",
        Some(Cause::Blind) => "a load-blind pick",
        Some(Cause::NoChoice) | None => "a pick",
    };
    format!("{what} (`{branch}`)")
}

impl Journey {
    /// Writes the verdict from the turns and the counterfactuals.
    pub fn conclude(&mut self) {
        self.verdict = verdict(self);
    }
}

/// Turn numbers as ranges: "2 to 19", "1, 3 and 5".
fn turn_list(turns: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &t in turns {
        match runs.last_mut() {
            Some((_, b)) if *b + 1 == t => *b = t,
            _ => runs.push((t, t)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a}, {b}"),
            _ => format!("{a} to {b}"),
        })
        .collect();
    match parts.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => parts.concat(),
    }
}

/// The distinct branches of `turns`, each in backquotes.
fn branches(turns: &[&JourneyTurn]) -> String {
    let mut b: Vec<&str> = turns.iter().map(|t| t.branch.as_str()).collect();
    b.sort_unstable();
    b.dedup();
    b.iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(" or ")
}

/// The verdict: where the turns went and why, the idle time beside them, their waits, what
/// a fresh pick would have done, and the counterfactuals.
fn verdict(j: &Journey) -> String {
    let Some(first) = j.turns.first() else {
        return format!(
            "Session {} made no request in this run.",
            crate::quote::escape(&j.session)
        );
    };
    let mut out = path(j, first);
    let idle: Vec<String> = j
        .idle_elsewhere
        .iter()
        .filter(|b| b.idle_s > 0.0)
        .map(|b| format!("{} sat idle for {:.1} s", b.backend, b.idle_s))
        .collect();
    if !idle.is_empty() {
        out.push_str(&format!(
            " Meanwhile {} of the session's {:.1} s.",
            super::render::list(&idle, 4),
            j.span_s()
        ));
    }
    let wait: f64 = j.turns.iter().filter_map(|t| t.queue_wait_s).sum();
    out.push_str(&format!(
        " Its turns waited {wait:.1} s in engine queues in all (TTFT p50 {:.3} s, worst {:.3} s).",
        j.counterfactuals.first().map_or(0.0, |c| c.ttft_p50_s),
        j.counterfactuals.first().map_or(0.0, |c| c.ttft_max_s)
    ));
    out.push_str(&fresh_picks(j));
    out.push_str(&counterfactual_sentences(j));
    out
}

/// Where the turns went: one backend all along (and how each turn got there), or the
/// backends in order.
fn path(j: &Journey, first: &JourneyTurn) -> String {
    let n = j.turns.len();
    let same = j.turns.iter().all(|t| t.backend == first.backend);
    if n == 1 {
        format!(
            "Its one turn went to {} by {}.",
            first.backend,
            branch_words(&first.branch)
        )
    } else if same && first.cause != Cause::Affinity {
        format!(
            "All {n} turns followed turn {}'s pick, {}, to {}: {}.",
            first.turn,
            branch_words(&first.branch),
            first.backend,
            how_followed(&j.turns[1..])
        )
    } else if same {
        format!(
            "All {n} turns went to {} by {}.",
            first.backend,
            branches(&j.turns.iter().collect::<Vec<_>>())
        )
    } else {
        let mut runs: Vec<(String, usize)> = Vec::new();
        for t in &j.turns {
            match runs.last_mut() {
                Some((b, k)) if *b == t.backend => *k += 1,
                _ => runs.push((t.backend.clone(), 1)),
            }
        }
        let path = runs
            .iter()
            .map(|(b, k)| format!("{b} x{k}"))
            .collect::<Vec<_>>()
            .join(", then ");
        format!("The {n} turns changed backend {} time(s): {path}.", runs.len() - 1)
    }
}

/// How the later turns (`rest`) stayed with the first: picked the same way, or followed
/// through an affinity branch (whatever the load, when a fresh pick would have differed).
fn how_followed(rest: &[JourneyTurn]) -> String {
    let (follow, placed): (Vec<&JourneyTurn>, Vec<&JourneyTurn>) =
        rest.iter().partition(|t| t.cause == Cause::Affinity);
    let nums = |ts: &[&JourneyTurn]| turn_list(&ts.iter().map(|t| t.turn).collect::<Vec<_>>());
    let mut how = Vec::new();
    if !placed.is_empty() {
        how.push(format!(
            "turn{} {} {} picked the same way ({})",
            if placed.len() == 1 { "" } else { "s" },
            nums(&placed),
            if placed.len() == 1 { "was" } else { "were" },
            branches(&placed)
        ));
    }
    if !follow.is_empty() {
        let blind = follow
            .iter()
            .any(|t| t.fresh_pick.as_ref().is_some_and(|f| f.regret > 0));
        how.push(format!(
            "turn{} {} followed through an affinity branch ({}){}",
            if follow.len() == 1 { "" } else { "s" },
            nums(&follow),
            branches(&follow),
            if blind { " whatever the load" } else { "" }
        ));
    }
    how.join(" and ")
}

/// Whether a fresh, load-aware pick would have agreed on the audited turns.
fn fresh_picks(j: &Journey) -> String {
    let regrets: Vec<u32> = j
        .turns
        .iter()
        .filter_map(|t| t.fresh_pick.as_ref().map(|f| f.regret))
        .collect();
    let worse = regrets.iter().filter(|r| **r > 0).count();
    if regrets.is_empty() {
        String::new()
    } else if worse == 0 {
        format!(
            " A fresh, load-aware pick would have agreed on all {} audited turns (no pick was busier, in truth, than the least-loaded backend).",
            regrets.len()
        )
    } else {
        format!(
            " A fresh, load-aware pick would have gone elsewhere on {worse} of {} audited turns (the pick had up to {} more requests in flight than the least-loaded backend).",
            regrets.len(),
            regrets.iter().max().copied().unwrap_or(0)
        )
    }
}

/// Where the session went under each counterfactual, beside this run.
fn counterfactual_sentences(j: &Journey) -> String {
    let mut out = String::new();
    let this = j.counterfactuals.first();
    for c in j.counterfactuals.iter().skip(1) {
        let per = c
            .turns_per_backend
            .iter()
            .map(|(b, k)| format!("{b} x{k}"))
            .collect::<Vec<_>>()
            .join(", ");
        if c.label == "fresh signals" {
            if this.is_some_and(|t| t.turns_per_backend == c.turns_per_backend) {
                out.push_str(" Fresh engine stats would not have moved it.");
            } else {
                out.push_str(&format!(
                    " With fresh engine stats it would have gone {per} and waited {:.1} s.",
                    c.queue_wait_s
                ));
            }
            continue;
        }
        out.push_str(&format!(
            " Under {} the same session went {per} and waited {:.1} s (TTFT p50 {:.3} s).",
            c.policy, c.queue_wait_s, c.ttft_p50_s
        ));
    }
    out
}

impl Journey {
    /// Seconds from the first arrival to the last completion.
    pub fn span_s(&self) -> f64 {
        let from = self.turns.first().map_or(0.0, |t| t.arrival_s);
        let until = self
            .turns
            .iter()
            .map(|t| t.failed_at_s.unwrap_or_else(|| t.arrival_s + t.e2e_s.unwrap_or(0.0)))
            .fold(from, f64::max);
        until - from
    }
}

/// A table cell: control characters escaped and `|` kept from splitting the row.
fn cell(s: &str) -> String {
    crate::quote::escape(s).replace('|', "\\|")
}

fn f3(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

/// What one backend looked like to the router, in words.
fn seen(b: &SeenBackend) -> String {
    if !b.listed {
        return format!("{} not listed", cell(&b.backend));
    }
    let engine = match (b.view_running, b.view_waiting, b.view_age_s) {
        (Some(r), Some(w), Some(a)) => format!("{r} running + {w} waiting as of {a:.1} s ago"),
        _ => "no engine stats".to_string(),
    };
    let reqs = match b.window_dispatches {
        Some(d) => format!("{d} dispatches in the window"),
        None => "never used".to_string(),
    };
    let mark = if b.picked { " <- picked" } else { "" };
    format!(
        "{} {engine}, {reqs}, truly {} in flight{mark}",
        cell(&b.backend),
        b.true_in_flight
    )
}

/// The journey as Markdown (also what `sim explain --session` prints).
pub fn render_journey(j: &Journey) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Session {}: {} (seed {})",
        crate::quote::escape(&j.session),
        j.scenario,
        j.seed
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "Policy: {}.", j.policy);
    if let (Some(a), Some(b)) = (j.turns.first(), j.turns.last()) {
        let _ = writeln!(
            o,
            "{} turn(s), requests {} to {}, from {:.1} s to {:.1} s ({:.1} s).",
            j.turns.len(),
            a.request_id,
            b.request_id,
            a.arrival_s,
            a.arrival_s + j.span_s(),
            j.span_s()
        );
    }
    if let Some(k) = j.audit_truncated_at {
        let _ = writeln!(
            o,
            "Note: the decision audit holds only the first {k} decisions (limits.audit_decisions); later turns are shown without their views."
        );
    }
    let _ = writeln!(o);
    turns_table(&mut o, &j.turns);
    let _ = writeln!(o);
    let _ = writeln!(o, "## What the router saw");
    let _ = writeln!(o);
    for t in &j.turns {
        if t.view.is_empty() {
            let _ = writeln!(
                o,
                "- Turn {} at {:.3} s: not in the decision audit.",
                t.turn, t.arrival_s
            );
            continue;
        }
        let parts: Vec<String> = t.view.iter().map(seen).collect();
        let _ = writeln!(
            o,
            "- Turn {} at {:.3} s (`{}`): {}.",
            t.turn,
            t.arrival_s,
            t.branch,
            parts.join("; ")
        );
    }
    if j.counterfactuals.len() > 1 {
        counterfactual_table(&mut o, &j.counterfactuals);
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "## Verdict");
    let _ = writeln!(o);
    let _ = writeln!(o, "{}", j.verdict);
    o
}

/// One row per turn: where it went, by which branch, what it met, its latencies, and a
/// fresh pick's choice.
fn turns_table(o: &mut String, turns: &[JourneyTurn]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        o,
        "| turn | request | arrival s | backend | branch | view age s | met: running + waiting | queue wait s | TTFT s | E2E s | fresh load-aware pick |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---|---|---:|---|---:|---:|---:|---|");
    for t in turns {
        let met = t.met.map_or_else(
            || "never arrived".to_string(),
            |q| format!("{} + {}", q.running, q.waiting),
        );
        let met = match t.failed_at_s {
            Some(f) => format!("{met}; failed at {f:.3} s"),
            None => met,
        };
        let fresh = match &t.fresh_pick {
            None => "(not in the audit)".to_string(),
            Some(f) if f.regret == 0 => "same (none less loaded)".to_string(),
            Some(f) => format!(
                "{}: truly {} in flight, would meet {} + {} (pick +{})",
                cell(&f.backend),
                f.true_in_flight,
                f.would_meet.running,
                f.would_meet.waiting,
                f.regret
            ),
        };
        let age = t.view_age_s.map_or_else(|| "-".to_string(), |a| format!("{a:.1}"));
        let _ = writeln!(
            o,
            "| {} | {} | {:.3} | {} | {} | {age} | {met} | {} | {} | {} | {fresh} |",
            t.turn,
            t.request_id,
            t.arrival_s,
            cell(&t.backend),
            t.branch,
            f3(t.queue_wait_s),
            f3(t.ttft_s),
            f3(t.e2e_s)
        );
    }
}

/// The session under each counterfactual: its turns per backend, its waits.
fn counterfactual_table(o: &mut String, all: &[SessionCounterfactual]) {
    use std::fmt::Write as _;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "## This session under counterfactuals (same scenario, seed and workload)"
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| run | policy | turns per backend | queue wait s | TTFT p50 s | TTFT max s |"
    );
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|");
    for c in all {
        let per = c
            .turns_per_backend
            .iter()
            .map(|(b, k)| format!("{} x{k}", cell(b)))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            o,
            "| {} | {} | {per} | {:.3} | {:.3} | {:.3} |",
            c.label, c.policy, c.queue_wait_s, c.ttft_p50_s, c.ttft_max_s
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_numbers_read_as_ranges() {
        assert_eq!(turn_list(&[2, 3, 4, 5]), "2 to 5");
        assert_eq!(turn_list(&[1]), "1");
        assert_eq!(turn_list(&[1, 3, 4, 7, 8, 9]), "1, 3, 4 and 7 to 9");
        assert_eq!(cell("a|b\n"), "a\\|b\\n");
    }
}
