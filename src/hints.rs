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
//! Where the audit is at hand, never-served and share-skew also name the mechanism that put
//! the requests there and the key that changes it ([`placement`]: trie monopoly, the QPS
//! latch, a long session's affinity). Every figure a hint states is the summary's own.
//!
//! * **lengths-only**, **idle-trace**, **model-unmapped**: what a replayed trace does not
//!   record or the run does not model ([`trace_hints`], from the workload's trace facts):
//!   prompts without any record of what calls share, a trace mostly idle with nothing
//!   compressing it, model names simulated as another model.
//!
//! Hints see only results (the audit log and the summary) and what the workload says of
//! its traces, never the simulation.
//!
//! Owns: the hint rules. May not see: the simulation; only the decision audit. Invariant: a
//! hint is printed only when the audit shows its condition.

pub mod placement;

use serde::Serialize;

pub use placement::{Mechanism, Placements};

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

/// A trace counts as idle when at least this share of its span passes in idle spans
/// ([`crate::trace::idle::REPORT_GAP_NS`] or longer) ...
pub const IDLE_SHARE: f64 = 0.5;

/// ... adding up to at least this long, ns.
pub const IDLE_MIN_NS: u64 = 3_600_000_000_000;

/// Hints about the replayed traces themselves: a trace recording only lengths (nothing
/// says what its calls share) names `shared_prefix_tokens`; a mostly idle trace without
/// `max_idle_gap_s` names that key with its idle share; model names simulated as another
/// model name the keys that map them. Never on a trace whose sharing is recorded (block
/// hashes, a shared-part column) or modelled (`shared_prefix_tokens`).
pub fn trace_hints(traces: &[crate::workload::TraceFacts], sim_time_s: f64) -> Vec<Hint> {
    let mut out = Vec::new();
    let hint = |kind, message| Hint {
        kind,
        backend: String::new(),
        from_s: 0.0,
        until_s: sim_time_s,
        message,
    };
    for t in traces {
        if t.sharing == crate::workload::Sharing::LengthsOnly {
            out.push(hint(
                "lengths-only",
                format!(
                    "trace {}: {} records only lengths, so which prompt tokens its {} calls share (a system prompt, tool definitions) is unknown and each session's prompt is its own: a prefix-aware router has nothing to latch on, where calls that repeat such a part would all go to the backend that first held it; model the part with shared_prefix_tokens = N (tokens) on its [[workload.traces]] table, or map the column that records it (columns.shared_prefix_tokens or shared_prefix_chars)",
                    t.group, t.file, t.calls
                ),
            ));
        }
        let idle = &t.idle;
        if !t.idle_compressed && idle.share() >= IDLE_SHARE && idle.idle_ns >= IDLE_MIN_NS {
            out.push(hint(
                "idle-trace",
                format!(
                    "trace {}: {} is {:.1} % idle: {} spans of {} or more with no call in flight add up to {} of its {} (longest {}), so the run's time averages read near 0 and its plots are mostly blank; max_idle_gap_s = 60 on its [[workload.traces]] table cuts each to a minute and keeps the pacing inside busy periods",
                    t.group,
                    t.file,
                    100.0 * idle.share(),
                    idle.gaps,
                    crate::trace::idle::duration_text(crate::trace::idle::REPORT_GAP_NS),
                    crate::trace::idle::duration_text(idle.idle_ns),
                    crate::trace::idle::duration_text(idle.span_ns),
                    crate::trace::idle::duration_text(idle.longest_ns)
                ),
            ));
        }
        for w in &t.model_warnings {
            out.push(hint("model-unmapped", w.clone()));
        }
    }
    out
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
    let mut scan = HintScan::new(log.n_backends, interval_s);
    scan.add(log);
    scan.finish(names)
}

/// Every hint of a run: those of its decision audit, then those of its request shares,
/// each concentration hint naming the mechanism the audit shows.
pub fn all_hints(log: &DecisionLog, names: &[String], interval_s: f64, summary: &crate::metrics::Summary) -> Vec<Hint> {
    let mut scan = HintScan::new(log.n_backends, interval_s);
    scan.add(log);
    scan.finish_with(names, summary)
}

/// The mechanism behind a run's request concentration, when a concentration hint
/// (never-served or share-skew) fires and the audit shows one.
pub fn concentration_cause(log: &DecisionLog, summary: &crate::metrics::Summary) -> Option<Mechanism> {
    if share_hints(summary).is_empty() {
        return None;
    }
    let mut p = Placements::default();
    for r in &log.rows {
        p.add(r);
    }
    p.mechanism(summary)
}

/// The hint rules over a decision audit read once, in decision order, batch by batch
/// ([`HintScan::add`]; a run that streams its audit to files never holds it whole). The
/// hints are the same however the audit is cut into batches.
pub struct HintScan {
    n: usize,
    interval_s: f64,
    decisions: usize,
    /// Every listed backend has been scraped at least once (from this decision on, a
    /// missing entry counts).
    warm: bool,
    backends: Vec<BackendScan>,
    piles: Vec<Option<Pile>>,
    run: Option<LoadRun>,
    stale: usize,
    worst: f64,
    sfirst: Option<SimTime>,
    slast: Option<SimTime>,
    /// Each session's first placement and what followed (for the concentration hints).
    placements: Placements,
}

/// Per backend: zero-stats and missing-stats counts with their first and last times.
#[derive(Clone, Default)]
struct BackendScan {
    zero_busy: usize,
    seen: usize,
    peak: u32,
    first: Option<SimTime>,
    last: Option<SimTime>,
    missing: usize,
    mfirst: Option<SimTime>,
    mlast: Option<SimTime>,
    /// When the router dispatched to it, in decision order (8 bytes a decision: what tells
    /// a view read before the requests now in flight from one read while they were).
    sent: Vec<SimTime>,
}

/// Consecutive load-based decisions to one backend on the view of the first of them.
struct LoadRun {
    backend: usize,
    t_first: SimTime,
    /// When each entry of the first decision's view was read.
    read_at: Vec<Option<SimTime>>,
    /// The oldest entry's age at the first decision, seconds.
    age: f64,
    len: usize,
    t_last: SimTime,
    /// True outstanding counts at the last decision.
    truth_last: Vec<u32>,
}

/// Whether a branch decided on engine load (a dogpile can only form on those).
fn reads_engine_load(b: Branch) -> bool {
    matches!(
        b,
        Branch::FallbackLeastInflight
            | Branch::LeastInflight
            | Branch::LlmdScore
            | Branch::KvImbalanced
            | Branch::PowerOfD
    )
}

impl HintScan {
    /// A scan of a fleet of `n_backends` with an engine-stats interval of `interval_s`.
    pub fn new(n_backends: usize, interval_s: f64) -> HintScan {
        HintScan {
            n: n_backends,
            interval_s,
            decisions: 0,
            warm: false,
            backends: vec![BackendScan::default(); n_backends],
            piles: vec![None; n_backends],
            run: None,
            stale: 0,
            worst: 0.0,
            sfirst: None,
            slast: None,
            placements: Placements::default(),
        }
    }

    /// Reads the next decisions (a whole log, or the next batch of a streamed one).
    pub fn add(&mut self, log: &DecisionLog) {
        if self.n == 0 || log.n_backends != self.n {
            return;
        }
        let limit = STALE_FACTOR * self.interval_s;
        for (i, r) in log.rows.iter().enumerate() {
            self.decisions += 1;
            self.placements.add(r);
            let (view, truth) = log.detail(i);
            if !self.warm {
                self.warm = view.iter().all(|v| !v.listed || v.engine.is_some());
            }
            self.read_backends(view, r.t);
            if let Some(s) = self.backends.get_mut(r.backend.index()) {
                s.sent.push(r.t);
            }
            // dogpile: runs over the load-based decisions only (a latched follow-up in
            // between does not break a pile-up), each against its first decision's view.
            if reads_engine_load(r.branch) {
                self.extend_run(r, view, truth);
            }
            // stale-view: the oldest entry a decision read, against the configured interval.
            let age = oldest_age(view, r.t);
            if age > limit {
                self.stale += 1;
                self.worst = self.worst.max(age);
                self.sfirst.get_or_insert(r.t);
                self.slast = Some(r.t);
            }
        }
    }

    /// zero-stats and missing-stats: what a decision at `t` read of each backend.
    fn read_backends(&mut self, view: crate::metrics::View<'_>, t: SimTime) {
        for (v, s) in view.iter().zip(&mut self.backends) {
            // zero-stats: engine load 0 while the router has requests in flight to it.
            let local = v.requests.map_or(0, |q| q.in_prefill + q.in_decoding);
            match v.engine {
                Some(e) => {
                    // Of the requests in flight now, those dispatched after the stats were
                    // read were not there to be counted (a scrape before the first dispatch
                    // reads an honest 0 for a whole interval); the rest were in flight then.
                    let after = s.sent.len() - s.sent.partition_point(|&x| x <= e.read_at);
                    let held = local.saturating_sub(u32::try_from(after).unwrap_or(u32::MAX));
                    if held == 0 {
                        continue;
                    }
                    s.seen += 1;
                    if e.running + e.waiting == 0 {
                        s.zero_busy += 1;
                        s.peak = s.peak.max(held);
                        s.first.get_or_insert(t);
                        s.last = Some(t);
                    }
                }
                None if v.listed && self.warm => {
                    s.missing += 1;
                    s.mfirst.get_or_insert(t);
                    s.mlast = Some(t);
                }
                None => {}
            }
        }
    }

    /// A load-based decision `r` (with its `view` and the backends' true loads `truth`)
    /// extends the run of picks of one backend from one view, or closes it and starts one.
    fn extend_run(&mut self, r: &crate::metrics::DecisionRow, view: crate::metrics::View<'_>, truth: &[u32]) {
        let same = self.run.as_ref().is_some_and(|run| {
            run.backend == r.backend.index()
                && view
                    .iter()
                    .zip(&run.read_at)
                    .all(|(v, at)| v.engine.map(|e| e.read_at) == *at)
        });
        if same {
            let run = self.run.as_mut().expect("checked");
            run.len += 1;
            run.t_last = r.t;
            run.truth_last.clear();
            run.truth_last.extend_from_slice(truth);
        } else {
            self.close_run();
            self.run = Some(LoadRun {
                backend: r.backend.index(),
                t_first: r.t,
                read_at: view.iter().map(|v| v.engine.map(|e| e.read_at)).collect(),
                age: oldest_age(view, r.t),
                len: 1,
                t_last: r.t,
                truth_last: truth.to_vec(),
            });
        }
    }

    /// Counts the run in progress toward its backend's pile-up, if it is one.
    fn close_run(&mut self) {
        let Some(run) = self.run.take() else { return };
        if run.len < DOGPILE_MIN {
            return;
        }
        let b = run.backend;
        let after_pick = run.truth_last[b] + 1;
        let least = run.truth_last.iter().copied().min().unwrap_or(0);
        if after_pick > least + 1 {
            let gap = after_pick - least;
            let e = self.piles[b].get_or_insert((0, 0, run.t_first, run.t_last, 0, run.age));
            e.0 += 1;
            e.1 += run.len;
            e.3 = run.t_last;
            if gap > e.4 {
                e.4 = gap;
                e.5 = run.age;
            }
        }
    }

    /// The hints of every decision read, then the share hints of `summary` (the run's),
    /// each naming the mechanism the decisions show; `names` are the backends' names.
    pub fn finish_with(mut self, names: &[String], summary: &crate::metrics::Summary) -> Vec<Hint> {
        let placements = std::mem::take(&mut self.placements);
        let mut out = self.finish(names);
        let shares = share_hints(summary);
        let cause = if shares.is_empty() {
            None
        } else {
            placements.mechanism(summary)
        };
        out.extend(share_hints_with(summary, cause.as_ref()));
        out
    }

    /// The hints of every decision read; `names` are the backends' names.
    pub fn finish(mut self, names: &[String]) -> Vec<Hint> {
        let mut out = Vec::new();
        if self.decisions == 0 || self.n == 0 {
            return out;
        }
        self.close_run();
        let t = |x: SimTime| ns_to_secs(x.0);
        for (s, name) in self.backends.iter().zip(names) {
            if s.seen > 0 && s.zero_busy * 2 > s.seen && s.zero_busy >= DOGPILE_MIN {
                out.push(Hint {
                    kind: "zero-stats",
                    backend: name.clone(),
                    from_s: t(s.first.expect("counted")),
                    until_s: t(s.last.expect("counted")),
                    message: format!(
                        "{} reported zero load in {} of {} views read while the router itself had requests in flight to it (up to {}): its metrics are probably not being parsed (production-stack issue #1074: metric-name prefix), so load-based policies see it idle",
                        name, s.zero_busy, s.seen, s.peak
                    ),
                });
            }
            if s.missing > 0 {
                let (first, last) = (t(s.mfirst.expect("counted")), t(s.mlast.expect("counted")));
                out.push(Hint {
                    kind: "missing-stats",
                    backend: name.clone(),
                    from_s: first,
                    until_s: last,
                    message: format!(
                        "engine stats for {} were missing in {} decisions between {:.1} s and {:.1} s (failed scrapes, or not scraped yet since discovery listed it): production-stack's least-in-flight fallback routes by QPS whenever any endpoint lacks stats",
                        name, s.missing, first, last
                    ),
                });
            }
        }
        for (b, p) in self.piles.iter().enumerate() {
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
        if self.stale > 0 {
            out.push(Hint {
                kind: "stale-view",
                backend: String::new(),
                from_s: t(self.sfirst.expect("counted")),
                until_s: t(self.slast.expect("counted")),
                message: format!(
                    "{} of {} decisions read engine stats older than {STALE_FACTOR} x the {} s scrape interval (up to {:.1} s): a sequential scrape pass over every endpoint takes longer than the interval suggests (or the scraper stalls); scrape concurrently, shorten the timeout, or lower the interval",
                    self.stale, self.decisions, self.interval_s, self.worst
                ),
            });
        }
        out.sort_by(|a, b| a.from_s.total_cmp(&b.from_s).then(a.kind.cmp(b.kind)));
        out
    }
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
    share_hints_with(s, None)
}

/// [`share_hints`], each naming `cause` (the mechanism the audit shows) where it concerns
/// the hint's backend.
pub fn share_hints_with(s: &crate::metrics::Summary, cause: Option<&Mechanism>) -> Vec<Hint> {
    let mut out: Vec<Hint> = unserved_model(s).into_iter().collect();
    out.extend(never_served(s, cause));
    out.extend(share_skew(s, cause));
    out
}

/// What a concentration hint says caused it: the mechanism and its key, or, without one,
/// what to check.
fn cause_text(cause: Option<&Mechanism>, backend: &str, fallback: &str) -> String {
    match cause {
        Some(m) if m.backend == backend => {
            format!("cause ({}): {}; the key that changes it: {}", m.kind, m.cause, m.key)
        }
        _ => fallback.to_string(),
    }
}

/// What the run's own figures say of its queues: none formed, or where and how long.
fn queue_text(s: &crate::metrics::Summary) -> String {
    let queued = s
        .backends
        .iter()
        .filter(|b| b.peak_waiting > 0)
        .max_by(|a, b| a.peak_waiting.cmp(&b.peak_waiting).then(b.name.cmp(&a.name)));
    match queued {
        None if s.idle_while_queued_s == 0.0 => {
            "no queue formed yet, but the next burst will queue on the few backends that serve".to_string()
        }
        None => format!(
            "capacity idled for {:.1} s while requests queued",
            s.idle_while_queued_s
        ),
        Some(b) => format!(
            "{} queued up to {} requests, and capacity idled for {:.1} s while requests queued",
            b.name, b.peak_waiting, s.idle_while_queued_s
        ),
    }
}

/// unserved-model: requests named a model no backend serves (the router refused them as
/// not found).
fn unserved_model(s: &crate::metrics::Summary) -> Option<Hint> {
    let (first, _) = s.unserved_models.iter().next()?;
    let named: Vec<String> = s
        .unserved_models
        .iter()
        .map(|(m, n)| format!("{} ({n} requests)", crate::quote::quote(m)))
        .collect();
    Some(Hint {
        kind: "unserved-model",
        backend: String::new(),
        from_s: 0.0,
        until_s: s.sim_time_s,
        message: format!(
            "{} requests were refused because no backend serves their model: {}; add the model to a backend group's `serves` (with its profile, or profile = \"auto\" and `model`), or map the trace's model name ({} is the first)",
            s.requests.unserved_model,
            named.join(", "),
            crate::quote::quote(first)
        ),
    })
}

/// Whether backend `b` was in service at some point of the run of `s`.
fn in_service(s: &crate::metrics::Summary, b: &crate::metrics::BackendSummary) -> bool {
    s.sim_time_s <= 0.0 || b.out_of_service_s < s.sim_time_s
}

/// never-served: backends in service that served no request while others served some.
fn never_served(s: &crate::metrics::Summary, cause: Option<&Mechanism>) -> Option<Hint> {
    let end = s.sim_time_s;
    let served: u64 = s.backends.iter().filter(|b| in_service(s, b)).map(|b| b.requests).sum();
    let idle: Vec<&str> = s
        .backends
        .iter()
        .filter(|b| in_service(s, b))
        .filter(|b| b.requests == 0)
        .map(|b| b.name.as_str())
        .collect();
    if served == 0 || idle.is_empty() {
        return None;
    }
    let busiest = s
        .backends
        .iter()
        .max_by(|a, b| a.requests.cmp(&b.requests).then(b.name.cmp(&a.name)))
        .expect("some backend served");
    Some(Hint {
        kind: "never-served",
        backend: idle[0].to_string(),
        from_s: 0.0,
        until_s: end,
        message: format!(
            "{} of {} backends in service never served a request ({}) while {} served {} of {} (Jain index {:.3}); {}; {}",
            idle.len(),
            s.backends.iter().filter(|b| in_service(s, b)).count(),
            idle.join(", "),
            busiest.name,
            busiest.requests,
            served,
            s.request_jain_index,
            queue_text(s),
            cause_text(
                cause,
                &busiest.name,
                "the router sends everything to few backends: check the policy's tie-break, thresholds and session affinity"
            ),
        ),
    })
}

/// share-skew: in each class of equal capacity (same slots and same profile, or group when
/// no profile is named), a busiest backend far above the least busy one.
fn share_skew(s: &crate::metrics::Summary, cause: Option<&Mechanism>) -> Vec<Hint> {
    let mut out = Vec::new();
    let end = s.sim_time_s;
    let mut classes: std::collections::BTreeMap<(u32, &str), Vec<&crate::metrics::BackendSummary>> = Default::default();
    for b in s.backends.iter().filter(|b| in_service(s, b)) {
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
                    "{} served {} requests and {} {} ({ratio:.1}x) although both have {} slots{} (the fair share is {:.1}% each of these {}); {}",
                    hi.name,
                    hi.requests,
                    lo.name,
                    lo.requests,
                    hi.slots,
                    if hi.profile.is_empty() { String::new() } else { format!(" and profile {}", hi.profile) },
                    100.0 / members.len() as f64,
                    members.len(),
                    cause_text(cause, &hi.name, "requests spread unevenly across equal backends, queue or not"),
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
