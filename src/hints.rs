//! Health hints an operator could implement today, computed from a run's decision audit
//! (what each policy saw, beside the truth) and printed when the run triggers them:
//!
//! * **zero-stats**: a backend's scraped load reads 0 in most views whose stats were read
//!   while the router itself had requests in flight to it (production-stack issue #1074: a
//!   metric-name prefix the router does not parse); a view read before the requests now in
//!   flight were sent (the first scrape of a long interval) is no evidence;
//! * **missing-stats**: a backend's engine stats are absent from views after the first
//!   scrape pass (failed scrapes), which sends production-stack's least-in-flight fallback
//!   back to `_qps_routing`;
//! * **dogpile**: a run of consecutive decisions all sent to one backend on one unchanged
//!   view while, in truth, another backend ended the run with fewer requests in flight;
//! * **stale-view**: decisions read engine stats much older than the configured scrape
//!   interval (sequential scrape passes over many or slow endpoints take longer than the
//!   interval suggests).
//!
//! * **never-served**: backends in service that served no request while others did (a
//!   router that keeps one backend for everything at light load fails at the next burst);
//! * **share-skew**: among backends of equal capacity, the busiest served more than
//!   [`SKEW_RATIO`] times the requests of the least busy, with [`SKEW_MIN_REQUESTS`] per
//!   backend on average or the busiest above [`SKEW_RATIO`] times its fair share.
//!
//! Hints see only results (the audit log and the summary), never the simulation.
//!
//! Owns: the hint rules. May not see: the simulation; only the decision audit. Invariant: a
//! hint is printed only when the audit shows its condition.

use serde::Serialize;

use crate::decision::Branch;
use crate::metrics::DecisionLog;
use crate::time::{SimTime, ns_to_secs};

/// One hint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hint {
    /// `zero-stats`, `missing-stats`, `dogpile`, `stale-view`, `never-served` or
    /// `share-skew`.
    pub kind: &'static str,
    /// The backend concerned.
    pub backend: String,
    /// First and last decision time involved, seconds.
    pub from_s: f64,
    /// ...
    pub until_s: f64,
    /// What an operator would read.
    pub message: String,
}

/// Per backend: runs, decisions, first and last time, worst gap, view age at the worst run.
type Pile = (usize, usize, SimTime, SimTime, u32, f64);

/// Decisions in one unchanged view after which a run to one backend counts as a dogpile.
pub const DOGPILE_MIN: usize = 4;

/// A view counts as stale beyond this multiple of the configured scrape interval.
pub const STALE_FACTOR: f64 = 1.5;

/// Hints for a run whose decisions were recorded; `names` are the backends' names and
/// `interval_s` the configured engine-stats interval.
pub fn hints(log: &DecisionLog, names: &[String], interval_s: f64) -> Vec<Hint> {
    let n = log.n_backends;
    let rows = &log.rows;
    let mut out = Vec::new();
    if rows.is_empty() || n == 0 {
        return out;
    }
    let t = |x: SimTime| ns_to_secs(x.0);
    // First decision after which every listed backend has been scraped at least once.
    let warm = (0..rows.len()).find(|&i| log.detail(i).0.iter().all(|v| !v.listed || v.engine.is_some()));
    // Per backend, the router's dispatches to it before each decision.
    let mut sent = vec![0u32; rows.len() + 1];
    for (b, name) in names.iter().enumerate().take(n) {
        for (i, r) in rows.iter().enumerate() {
            sent[i + 1] = sent[i] + u32::from(r.backend.index() == b);
        }
        // zero-stats: engine load 0 read while the router had requests in flight to it.
        let (mut zero_busy, mut seen, mut peak, mut first, mut last) = (0usize, 0usize, 0u32, None, None);
        let (mut missing, mut mfirst, mut mlast) = (0usize, None, None);
        for (i, r) in rows.iter().enumerate() {
            let v = log.view(i).get(b);
            let local = v.requests.map_or(0, |q| q.in_prefill + q.in_decoding);
            match v.engine {
                Some(e) => {
                    // Of the requests in flight now, those dispatched after the stats were
                    // read were not there to be counted (a scrape before the first dispatch
                    // reads an honest 0 for a whole interval); the rest were in flight then.
                    let after = sent[i] - sent[rows.partition_point(|x| x.t <= e.read_at).min(i)];
                    let held = local.saturating_sub(after);
                    if held == 0 {
                        continue;
                    }
                    seen += 1;
                    if e.running + e.waiting == 0 {
                        zero_busy += 1;
                        peak = peak.max(held);
                        first.get_or_insert(r.t);
                        last = Some(r.t);
                    }
                }
                None if v.listed && warm.is_some_and(|w| i >= w) => {
                    missing += 1;
                    mfirst.get_or_insert(r.t);
                    mlast = Some(r.t);
                }
                None => {}
            }
        }
        if seen > 0 && zero_busy * 2 > seen && zero_busy >= DOGPILE_MIN {
            out.push(Hint {
                kind: "zero-stats",
                backend: name.clone(),
                from_s: t(first.expect("counted")),
                until_s: t(last.expect("counted")),
                message: format!(
                    "{} reported zero load in {zero_busy} of {seen} views read while the router itself had requests in flight to it (up to {peak}): its metrics are probably not being parsed (production-stack issue #1074: metric-name prefix), so load-based policies see it idle",
                    name
                ),
            });
        }
        if missing > 0 {
            out.push(Hint {
                kind: "missing-stats",
                backend: name.clone(),
                from_s: t(mfirst.expect("counted")),
                until_s: t(mlast.expect("counted")),
                message: format!(
                    "engine stats for {} were missing in {missing} decisions between {:.1} s and {:.1} s (failed scrapes, or not scraped yet since discovery listed it): production-stack's least-in-flight fallback routes by QPS whenever any endpoint lacks stats",
                    name,
                    t(mfirst.expect("counted")),
                    t(mlast.expect("counted"))
                ),
            });
        }
    }
    // dogpile: consecutive load-based decisions to one backend on one unchanged view,
    // reported once per backend with every such run counted.
    let reads_engine_load = |b: Branch| {
        matches!(
            b,
            Branch::FallbackLeastInflight
                | Branch::LeastInflight
                | Branch::LlmdScore
                | Branch::KvImbalanced
                | Branch::PowerOfD
        )
    };
    let same_view = |i: usize, j: usize| {
        log.detail(i)
            .0
            .iter()
            .zip(log.detail(j).0)
            .all(|(a, b)| a.engine.map(|e| e.read_at) == b.engine.map(|e| e.read_at))
    };
    let mut piles: Vec<Option<Pile>> = vec![None; n];
    // Runs over the load-based decisions only (a latched follow-up in between does not
    // break a pile-up).
    let load: Vec<usize> = (0..rows.len()).filter(|&k| reads_engine_load(rows[k].branch)).collect();
    let mut a = 0;
    while a < load.len() {
        let i = load[a];
        let mut z = a + 1;
        while z < load.len() && rows[load[z]].backend == rows[i].backend && same_view(i, load[z]) {
            z += 1;
        }
        let run = z - a;
        let last = load[z - 1];
        if run >= DOGPILE_MIN {
            let b = rows[i].backend.index();
            let truth = log.detail(last).1;
            let after_pick = truth[b] + 1;
            let least = truth.iter().copied().min().unwrap_or(0);
            if after_pick > least + 1 {
                let gap = after_pick - least;
                let age = oldest_age(log.detail(i).0, rows[i].t);
                let e = piles[b].get_or_insert((0, 0, rows[i].t, rows[last].t, 0, age));
                e.0 += 1;
                e.1 += run;
                e.3 = rows[last].t;
                if gap > e.4 {
                    e.4 = gap;
                    e.5 = age;
                }
            }
        }
        a = z;
    }
    for (b, p) in piles.iter().enumerate() {
        if let Some((runs, decisions, first, last, gap, age)) = *p {
            out.push(Hint {
                kind: "dogpile",
                backend: names[b].clone(),
                from_s: t(first),
                until_s: t(last),
                message: format!(
                    "{decisions} load-based decisions in {runs} run(s) of {DOGPILE_MIN}+ between {:.1} s and {:.1} s all went to {} on one unchanged engine-stats view each; in truth it then had up to {gap} more requests in flight than the least-loaded backend (that view was {age:.1} s old at its first decision): consider a tie band, fresher load, or router-local in-flight counts",
                    t(first),
                    t(last),
                    names[b]
                ),
            });
        }
    }
    // stale-view: the oldest entry a decision read, against the configured interval.
    let limit = STALE_FACTOR * interval_s;
    let (mut stale, mut worst, mut sfirst, mut slast) = (0usize, 0.0f64, None, None);
    for (i, r) in rows.iter().enumerate() {
        let age = oldest_age(log.detail(i).0, r.t);
        if age > limit {
            stale += 1;
            worst = worst.max(age);
            sfirst.get_or_insert(r.t);
            slast = Some(r.t);
        }
    }
    if stale > 0 {
        out.push(Hint {
            kind: "stale-view",
            backend: String::new(),
            from_s: t(sfirst.expect("counted")),
            until_s: t(slast.expect("counted")),
            message: format!(
                "{stale} of {} decisions read engine stats older than {STALE_FACTOR} x the {interval_s} s scrape interval (up to {worst:.1} s): a sequential scrape pass over every endpoint takes longer than the interval suggests (or the scraper stalls); scrape concurrently, shorten the timeout, or lower the interval",
                rows.len()
            ),
        });
    }
    out.sort_by(|a, b| a.from_s.total_cmp(&b.from_s).then(a.kind.cmp(b.kind)));
    out
}

/// Among backends of equal capacity, a max/min request ratio above this is a skew hint.
pub const SKEW_RATIO: f64 = 2.0;

/// Mean requests per backend of an equal-capacity class below which skew is not hinted:
/// with fewer, chance alone often does it (48 four-turn sessions hashed onto 6 backends
/// land 44 / 16 requests on the busiest / least busy one).
pub const SKEW_MIN_REQUESTS: u64 = 50;

/// Hints from the request shares of a run's summary: backends that never served while
/// others did, and skew across backends of equal capacity (same slots and profile).
pub fn share_hints(s: &crate::metrics::Summary) -> Vec<Hint> {
    let mut out = Vec::new();
    let end = s.sim_time_s;
    let in_service = |b: &&crate::metrics::BackendSummary| end <= 0.0 || b.out_of_service_s < end;
    let served: u64 = s.backends.iter().filter(in_service).map(|b| b.requests).sum();
    let idle: Vec<&str> = s
        .backends
        .iter()
        .filter(in_service)
        .filter(|b| b.requests == 0)
        .map(|b| b.name.as_str())
        .collect();
    if served > 0 && !idle.is_empty() {
        let busiest = s
            .backends
            .iter()
            .max_by(|a, b| a.requests.cmp(&b.requests).then(b.name.cmp(&a.name)))
            .expect("some backend served");
        out.push(Hint {
            kind: "never-served",
            backend: idle[0].to_string(),
            from_s: 0.0,
            until_s: end,
            message: format!(
                "{} of {} backends in service never served a request ({}) while {} served {} of {} (Jain index {:.3}): no queue formed, but the router sends everything to few backends and the next burst will queue there; check the policy's tie-break, thresholds and session affinity",
                idle.len(),
                s.backends.iter().filter(in_service).count(),
                idle.join(", "),
                busiest.name,
                busiest.requests,
                served,
                s.request_jain_index
            ),
        });
    }
    // Equal capacity: same slots and same profile (or group, when no profile is named).
    let mut classes: std::collections::BTreeMap<(u32, &str), Vec<&crate::metrics::BackendSummary>> = Default::default();
    for b in s.backends.iter().filter(in_service) {
        let label = if b.profile.is_empty() {
            b.group.as_str()
        } else {
            b.profile.as_str()
        };
        classes.entry((b.slots, label)).or_default().push(b);
    }
    for members in classes.values() {
        let total: u64 = members.iter().map(|b| b.requests).sum();
        if members.len() < 2 || members.iter().any(|b| b.requests == 0) {
            continue;
        }
        let hi = members
            .iter()
            .max_by(|a, b| a.requests.cmp(&b.requests).then(b.name.cmp(&a.name)))
            .expect("2+");
        let lo = members
            .iter()
            .min_by(|a, b| a.requests.cmp(&b.requests).then(a.name.cmp(&b.name)))
            .expect("2+");
        let ratio = hi.requests as f64 / lo.requests as f64;
        // Enough requests that chance rarely does it, or a busiest backend far above its
        // fair share.
        let enough = total >= SKEW_MIN_REQUESTS * members.len() as u64
            || hi.requests as f64 >= SKEW_RATIO * total as f64 / members.len() as f64;
        if ratio > SKEW_RATIO && enough {
            out.push(Hint {
                kind: "share-skew",
                backend: hi.name.clone(),
                from_s: 0.0,
                until_s: end,
                message: format!(
                    "{} served {} requests and {} {} ({ratio:.1}x) although both have {} slots{}: requests spread unevenly across equal backends, queue or not (the fair share is {:.1}% each of these {})",
                    hi.name,
                    hi.requests,
                    lo.name,
                    lo.requests,
                    hi.slots,
                    if hi.profile.is_empty() { String::new() } else { format!(" and profile {}", hi.profile) },
                    100.0 / members.len() as f64,
                    members.len()
                ),
            });
        }
    }
    out
}

/// Oldest engine entry's age at `now` in a view, seconds.
fn oldest_age(view: crate::metrics::View<'_>, now: SimTime) -> f64 {
    view.iter()
        .filter_map(|v| v.engine)
        .map(|e| ns_to_secs(now.0.saturating_sub(e.read_at.0)))
        .fold(0.0, f64::max)
}
