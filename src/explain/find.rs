//! Finding the story: the worst stranding episodes merged across short gaps, the requests
//! that queued in them, the decisions that placed their sessions, grouped by branch with the
//! cause each implies and the audit's evidence. Builds an [`Explanation`]; prints nothing.

use std::collections::BTreeMap;

use super::{
    Cause, CauseGroup, Counterfactual, EpisodeStory, ExplainOptions, Explanation, IdleBackend, QueuedBackend,
    Staleness, secs,
};
use crate::decision::Branch;
use crate::ids::BackendId;
use crate::metrics::{Episode, View, round6};
use crate::sim::{RunResult, SimConfig};
use crate::time::{SimDuration, SimTime, ns_to_secs};

/// The cause family of a branch (before the audit refines load-based picks).
pub(super) fn family(b: Branch) -> Cause {
    match b {
        Branch::FallbackQps | Branch::SessionNoKeyQps | Branch::KvFallbackQps => Cause::QpsWindow,
        Branch::FallbackNoStatsQps | Branch::LeastInflightNoStatsQps => Cause::MissingStats,
        Branch::FallbackLeastInflight
        | Branch::LeastInflight
        | Branch::PowerOfD
        | Branch::KvImbalanced
        | Branch::LeastRequest
        | Branch::AibrixLeastRequest
        | Branch::CacheAwareImbalanced
        | Branch::CacheAwareLeastLoad
        | Branch::CacheAwareSpill
        | Branch::AibrixPrebleGatedHit
        | Branch::AibrixPrebleGatedCost => Cause::LoadView,
        Branch::PrefixMatch
        | Branch::KvHit
        | Branch::CacheAwareHit
        | Branch::CacheAwareSmallestTree
        | Branch::AibrixPrefixHit
        | Branch::AibrixPrebleHit
        | Branch::SessionHash
        | Branch::FallbackFollow
        | Branch::KvFallbackSession => Cause::Affinity,
        Branch::LlmdScore | Branch::LoadAwareScore | Branch::DynamoCost | Branch::AibrixPrebleCost => Cause::Score,
        Branch::Random | Branch::RoundRobin => Cause::Blind,
    }
}

/// True for branches that read scraped engine load.
pub(super) fn reads_engine_load(b: Branch) -> bool {
    matches!(
        b,
        Branch::FallbackLeastInflight
            | Branch::LeastInflight
            | Branch::PowerOfD
            | Branch::KvImbalanced
            | Branch::LlmdScore
    )
}

/// Something that changed the fleet or its signals, and when it applied.
pub(super) struct Happening {
    from: SimTime,
    until: u64,
    text: String,
}

/// The scenario's fleet events, router restarts and faults, in time order, in words.
pub(super) fn happenings(cfg: &SimConfig, names: &[String]) -> Vec<Happening> {
    use crate::faults::FaultKind;
    use crate::fleet::FleetEventKind;
    let name = |b: usize| names.get(b).cloned().unwrap_or_else(|| format!("backend #{b}"));
    let mut out = Vec::new();
    for e in &cfg.fleet_events {
        let b = name(e.backend.index());
        let at = secs(e.at);
        let text = match e.kind {
            FleetEventKind::Join => {
                format!("{b} joined at {at:.1} s (no request stats, engine stats or cached prefixes yet)")
            }
            FleetEventKind::Leave => format!("{b} left at {at:.1} s (its in-flight requests failed)"),
            FleetEventKind::Drain => format!("{b} started draining at {at:.1} s (unlisted, finishing its requests)"),
            FleetEventKind::Restart { downtime } => format!(
                "{b} restarted at {at:.1} s (out of service for {:.1} s, prefix cache lost)",
                downtime.as_secs_f64()
            ),
        };
        out.push(Happening {
            from: e.at,
            until: u64::MAX,
            text,
        });
    }
    for &(t, replica) in &cfg.router_restarts {
        let who = match replica {
            Some(r) => format!("router replica {r}"),
            None => "the router".to_string(),
        };
        let text = format!(
            "{who} restarted at {:.1} s (tries, request stats and published engine stats lost)",
            secs(t)
        );
        out.push(Happening {
            from: t,
            until: u64::MAX,
            text,
        });
    }
    for f in &cfg.faults {
        let b = name(f.backend.index());
        let window = if f.until.0 == u64::MAX {
            format!("from {:.1} s on", secs(f.from))
        } else {
            format!("from {:.1} s to {:.1} s", secs(f.from), secs(f.until))
        };
        let text = match f.kind {
            FaultKind::ScrapeFail => format!("{b}'s /metrics scrapes failed {window} (entry missing)"),
            FaultKind::ScrapeHang => format!(
                "{b}'s /metrics hung until the scrape timeout {window} (entry missing, every later read of each pass one interval late)"
            ),
            FaultKind::ZeroStats => format!("{b}'s /metrics parsed to zeros {window}"),
            FaultKind::FrozenStats => format!("{b}'s scraped stats were frozen {window}"),
            FaultKind::ExtraLag(l) => format!(
                "{b}'s scraped stats lagged the engine by a further {:.1} s {window}",
                l.as_secs_f64()
            ),
            FaultKind::Slowdown(x) => format!("{b} stepped {x} times slower {window}"),
        };
        out.push(Happening {
            from: f.from,
            until: f.until.0,
            text,
        });
    }
    out.sort_by_key(|h| h.from);
    out
}

/// Merges episodes closer than `gap_ns`.
pub(super) fn merge(episodes: &[Episode], gap_ns: u64) -> Vec<Episode> {
    let mut out: Vec<Episode> = Vec::new();
    for e in episodes {
        match out.last_mut() {
            Some(m) if e.start.0.saturating_sub(m.end.0) <= gap_ns => {
                m.end = e.end;
                m.stranded_ns += e.stranded_ns;
                m.peak_stranded = m.peak_stranded.max(e.peak_stranded);
                for i in 0..m.free_ns.len() {
                    m.free_ns[i] += e.free_ns[i];
                    m.waiting_ns[i] += e.waiting_ns[i];
                    m.peak_waiting[i] = m.peak_waiting[i].max(e.peak_waiting[i]);
                }
            }
            _ => out.push(e.clone()),
        }
    }
    out
}

/// Explains `res`; `names` are the backends' names. The caller adds counterfactuals.
pub fn explain(res: &RunResult, cfg: &SimConfig, names: &[String], opts: &ExplainOptions) -> Explanation {
    let log = &res.decisions;
    let gap = (opts.merge_gap_s * 1e9) as u64;
    let mut eps = merge(&res.episodes, gap);
    let total_stranded: u128 = eps.iter().map(|e| e.stranded_ns).sum();
    eps.retain(|e| e.stranded_ns as f64 / 1e9 >= opts.min_stranded_slot_s);
    eps.sort_by(|a, b| b.stranded_ns.cmp(&a.stranded_ns).then(a.start.cmp(&b.start)));
    eps.truncate(opts.max_episodes);
    eps.sort_by_key(|e| e.start);
    let explained: u128 = eps.iter().map(|e| e.stranded_ns).sum();

    // Requests per session, in routing order.
    let mut by_session: Vec<Vec<usize>> = vec![Vec::new(); res.session_keys.len()];
    for (i, r) in res.requests.iter().enumerate() {
        by_session[r.session.index()].push(i);
    }
    // Fleet changes are context for every later episode; a signal fault for the episodes
    // that start within two scrape intervals of its end (what it left in the views).
    let notes = happenings(cfg, names);
    let lookback = cfg.router.engine_stats_interval.0.saturating_mul(2);
    let episodes = eps
        .iter()
        .map(|e| {
            let mut st = story(res, names, cfg, &by_session, e, opts);
            st.context = notes
                .iter()
                .filter(|n| n.from <= e.end && n.until >= e.start.0.saturating_sub(lookback))
                .map(|n| n.text.clone())
                .collect();
            st
        })
        .collect();

    let (mut with_view, mut stale) = (0u64, 0u64);
    for i in 0..log.rows.len() {
        let (view, _) = log.detail(i);
        let t = log.rows[i].t;
        let age = view
            .iter()
            .filter_map(|v| v.engine)
            .map(|e| t.saturating_since(e.read_at))
            .max();
        if let Some(a) = age {
            with_view += 1;
            if opts.is_stale(a) {
                stale += 1;
            }
        }
    }
    let s = &res.summary;
    Explanation {
        scenario: s.scenario.clone(),
        seed: s.seed,
        policy: s.policy.clone(),
        idle_while_queued_s: s.idle_while_queued_s,
        stranded_slot_s: s.stranded_slot_s,
        explained_share: if total_stranded == 0 {
            0.0
        } else {
            round6(explained as f64 / total_stranded as f64)
        },
        audit_truncated_at: (log.rows.len() < res.requests.len()).then_some(log.rows.len()),
        episodes,
        staleness: Staleness {
            decisions_with_engine_view: with_view,
            older_than_threshold: stale,
            stale_after_s: opts.stale_after.as_secs_f64(),
            decisions_with_regret: s.decisions_with_regret,
            latched_sessions: s.latched_sessions,
        },
        counterfactuals: vec![Counterfactual::of("this run", s)],
        autoscale: super::ScaleStory::of(s),
        concentration: super::Concentration::of(s, log),
    }
}

/// Explains one (merged) episode.
fn story(
    res: &RunResult,
    names: &[String],
    cfg: &SimConfig,
    by_session: &[Vec<usize>],
    e: &Episode,
    opts: &ExplainOptions,
) -> EpisodeStory {
    let n = names.len();
    let mut idle: Vec<(usize, u64)> = (0..n)
        .filter(|&b| e.free_ns[b] > 0)
        .map(|b| (b, e.free_ns[b]))
        .collect();
    idle.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut queued: Vec<usize> = (0..n).filter(|&b| e.waiting_ns[b] > 0).collect();
    queued.sort_by(|&a, &b| e.waiting_ns[b].cmp(&e.waiting_ns[a]).then(a.cmp(&b)));
    let waiting = queued.first().map_or_else(Vec::new, |&q| waiting_on(res, e, q));
    let mut sessions: Vec<usize> = waiting.iter().map(|&i| res.requests[i].session.index()).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let placed: Vec<Placed> = match queued.first() {
        Some(&q) => sessions
            .iter()
            .map(|&s| placement(res, cfg, &by_session[s], s, &waiting, q))
            .collect(),
        None => Vec::new(),
    };
    let causes = causes(res, names, cfg, &placed, opts);
    let latched: Vec<&Placed> = placed.iter().filter(|p| p.latched_turns > 0).collect();
    let key = |s: usize| res.session_keys[s].clone();
    let main_cause = causes.first().map_or(Cause::LoadView, |c| c.cause);
    EpisodeStory {
        from_s: secs(e.start),
        until_s: secs(e.end),
        stranded_slot_s: round6(e.stranded_ns as f64 / 1e9),
        peak_stranded: e.peak_stranded,
        idle: idle
            .iter()
            .map(|&(b, ns)| IdleBackend {
                backend: names[b].clone(),
                free_s: round6(ns as f64 / 1e9),
            })
            .collect(),
        queued: queued
            .iter()
            .map(|&b| QueuedBackend {
                backend: names[b].clone(),
                peak_waiting: e.peak_waiting[b],
                waiting_request_s: round6(e.waiting_ns[b] as f64 / 1e9),
            })
            .collect(),
        waiting_requests: waiting.len(),
        sessions: sessions.iter().map(|&s| key(s)).collect(),
        causes,
        latched_sessions: latched.iter().map(|p| key(p.session)).collect(),
        latched_turns: latched.iter().map(|p| p.latched_turns).sum(),
        main_cause,
        context: Vec::new(),
    }
}

/// The requests that sat in backend `q`'s main queue during episode `e`, in order.
fn waiting_on(res: &RunResult, e: &Episode, q: usize) -> Vec<usize> {
    res.requests
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.backend.index() == q
                && r.t_engine.is_some_and(|te| te < e.end)
                && r.t_admit.is_none_or(|ta| ta > e.start && ta > r.t_engine.unwrap_or(ta))
        })
        .map(|(i, _)| i)
        .collect()
}

/// A session's placement on the queued backend: the decision that put it there, and the
/// affinity turns that kept it there.
struct Placed {
    session: usize,
    request: usize,
    latched_turns: u64,
}

/// How session `s` (its requests `reqs`, some in `waiting`) came to wait on backend `q`:
/// the first decision of its run of turns on `q` that holds its last waiting request.
fn placement(res: &RunResult, cfg: &SimConfig, reqs: &[usize], s: usize, waiting: &[usize], q: usize) -> Placed {
    let last = reqs
        .iter()
        .rposition(|&i| waiting.binary_search(&i).is_ok())
        .expect("the session has a waiting request");
    // Walk back to the first decision of the session's run on the backend, but not past a
    // router restart: what the router knew before it (trie, stats) was lost, so the
    // re-decision after it is what placed the session.
    let t_last = res.requests[reqs[last]].t_router;
    let since = cfg
        .router_restarts
        .iter()
        .map(|r| r.0)
        .filter(|&t| t <= t_last)
        .max()
        .unwrap_or(SimTime(0));
    let mut first = last;
    while first > 0
        && res.requests[reqs[first - 1]].backend.index() == q
        && res.requests[reqs[first - 1]].t_router >= since
    {
        first -= 1;
    }
    let later = reqs[first + 1..]
        .iter()
        .filter(|&&i| res.requests[i].backend.index() == q && family(res.requests[i].branch) == Cause::Affinity)
        .count() as u64;
    Placed {
        session: s,
        request: reqs[first],
        latched_turns: later,
    }
}

/// The placing decisions grouped by cause and branch (load-based ones refined with the
/// audit), the groups placing the most sessions first.
fn causes(
    res: &RunResult,
    names: &[String],
    cfg: &SimConfig,
    placed: &[Placed],
    opts: &ExplainOptions,
) -> Vec<CauseGroup> {
    let mut groups: BTreeMap<(Cause, Branch), Vec<usize>> = BTreeMap::new();
    for p in placed {
        let branch = res.requests[p.request].branch;
        let cause = refine(res, cfg, p.request, family(branch), opts);
        groups.entry((cause, branch)).or_default().push(p.request);
    }
    let mut causes: Vec<CauseGroup> = groups
        .into_iter()
        .map(|((cause, branch), reqs)| group(res, names, cause, branch, &reqs))
        .collect();
    causes.sort_by(|a, b| {
        b.sessions
            .len()
            .cmp(&a.sessions.len())
            .then(a.from_s.total_cmp(&b.from_s))
    });
    causes
}

/// Refines the cause of decision `i` (request index = decision index) with its audit row.
fn refine(res: &RunResult, cfg: &SimConfig, i: usize, fam: Cause, opts: &ExplainOptions) -> Cause {
    let log = &res.decisions;
    if i >= log.rows.len() {
        return fam;
    }
    let (view, truth) = log.detail(i);
    let pick = res.requests[i].backend.index();
    if view.iter().filter(|v| v.listed).count() == 1 && view.len() > 1 {
        return Cause::NoChoice;
    }
    let branch = res.requests[i].branch;
    if fam != Cause::LoadView || !reads_engine_load(branch) {
        return fam;
    }
    let t = log.rows[i].t;
    if let Some(v) = view.get(pick).engine {
        // A zero reading is "zero stats" only when the scrape itself read zeros (the
        // simulator knows its fault timeline); a zero that is merely old is a stale view.
        let misread = cfg
            .faults
            .iter()
            .any(|f| f.kind == crate::faults::FaultKind::ZeroStats && f.covers(BackendId::from_index(pick), v.read_at));
        if v.running + v.waiting == 0 && truth[pick] > 0 && misread {
            return Cause::ZeroStats;
        }
    }
    let age = view
        .iter()
        .filter_map(|v| v.engine)
        .map(|e| t.saturating_since(e.read_at))
        .max()
        .unwrap_or(SimDuration::ZERO);
    let regret = truth[pick].saturating_sub(least_listed(&view, truth));
    // The view said "least loaded" but in truth it was not: either the view was old, or
    // the same view served earlier decisions that had since moved the truth.
    if regret > 0 || opts.is_stale(age) {
        return Cause::StaleView;
    }
    Cause::LoadView
}

/// The least true load among the backends the router listed (0 when it listed none): what
/// a pick's regret is measured against.
fn least_listed(view: &View<'_>, truth: &[u32]) -> u32 {
    view.iter()
        .zip(truth)
        .filter(|(v, _)| v.listed)
        .map(|(_, t)| *t)
        .min()
        .unwrap_or(0)
}

/// One cause group with its evidence.
fn group(res: &RunResult, names: &[String], cause: Cause, branch: Branch, reqs: &[usize]) -> CauseGroup {
    let log = &res.decisions;
    let mut audited: Vec<usize> = reqs.iter().copied().filter(|&i| i < log.rows.len()).collect();
    audited.sort_unstable();
    let mut views: Vec<Vec<Option<SimTime>>> = audited
        .iter()
        .map(|&i| log.detail(i).0.iter().map(|v| v.engine.map(|e| e.read_at)).collect())
        .collect();
    views.sort();
    views.dedup();
    let mut max_age = 0.0f64;
    let mut max_regret = 0u32;
    for &i in &audited {
        let (view, truth) = log.detail(i);
        let t = log.rows[i].t;
        for v in view.iter().filter_map(|v| v.engine) {
            max_age = max_age.max(ns_to_secs(t.0.saturating_sub(v.read_at.0)));
        }
        max_regret = max_regret.max(truth[res.requests[i].backend.index()].saturating_sub(least_listed(&view, truth)));
    }
    let mut sessions: Vec<String> = reqs
        .iter()
        .map(|&i| res.session_keys[res.requests[i].session.index()].clone())
        .collect();
    sessions.sort();
    sessions.dedup();
    let times: Vec<f64> = reqs.iter().map(|&i| secs(res.requests[i].t_router)).collect();
    CauseGroup {
        branch: branch.as_str().to_string(),
        cause,
        decisions: reqs.len(),
        sessions,
        from_s: times.iter().copied().fold(f64::INFINITY, f64::min),
        until_s: times.iter().copied().fold(0.0, f64::max),
        distinct_views: views.len(),
        max_view_age_s: round6(max_age),
        max_regret,
        evidence: audited.first().map_or_else(
            || "(not in the decision audit)".to_string(),
            |&i| evidence(res, names, i, cause),
        ),
    }
}

/// What decision `i` saw of each listed backend, beside the truth.
fn evidence(res: &RunResult, names: &[String], i: usize, cause: Cause) -> String {
    let (view, truth) = res.decisions.detail(i);
    let t = res.decisions.rows[i].t;
    let pick = res.requests[i].backend;
    let mut parts = Vec::new();
    for (b, (v, tr)) in view.iter().zip(truth).enumerate() {
        if !v.listed {
            if cause == Cause::NoChoice {
                parts.push(format!("{}: not listed (out of the fleet)", names[b]));
            }
            continue;
        }
        let seen = match cause {
            Cause::QpsWindow | Cause::MissingStats | Cause::Affinity | Cause::Blind | Cause::NoChoice => {
                match v.requests {
                    Some(r) => format!("{} dispatches in the window", r.window_dispatches),
                    None => "never used (no request stats)".to_string(),
                }
            }
            _ => match v.engine {
                Some(e) => format!(
                    "{} running + {} waiting as of {:.1} s ago",
                    e.running,
                    e.waiting,
                    ns_to_secs(t.0.saturating_sub(e.read_at.0))
                ),
                None => "no engine stats".to_string(),
            },
        };
        let missing = if cause == Cause::MissingStats && v.engine.is_none() {
            " [engine stats missing]"
        } else {
            ""
        };
        let mark = if BackendId::from_index(b) == pick {
            " <- picked"
        } else {
            ""
        };
        parts.push(format!("{}: {seen}{missing}, truly {tr} in flight{mark}", names[b]));
    }
    format!("at {:.1} s the router saw {}", ns_to_secs(t.0), parts.join("; "))
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::render::list;

    fn ep(start: u64, end: u64, stranded: u128, free: [u64; 2], waiting: [u128; 2]) -> Episode {
        Episode {
            start: SimTime(start),
            end: SimTime(end),
            stranded_ns: stranded,
            peak_stranded: 1,
            free_ns: free.to_vec(),
            waiting_ns: waiting.to_vec(),
            peak_waiting: vec![0, 2],
        }
    }

    #[test]
    fn close_episodes_merge_and_far_ones_do_not() {
        let eps = [
            ep(0, 10, 10, [10, 0], [0, 20]),
            ep(12, 20, 8, [8, 0], [0, 8]),
            ep(100, 110, 5, [0, 10], [5, 0]),
        ];
        let m = merge(&eps, 2);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].start, m[0].end, m[0].stranded_ns), (SimTime(0), SimTime(20), 18));
        assert_eq!(m[0].free_ns, vec![18, 0]);
        assert_eq!(m[0].waiting_ns, vec![0, 28]);
        assert_eq!(m[1].start, SimTime(100));
        assert_eq!(merge(&eps, 1).len(), 3);
    }

    #[test]
    fn the_stale_threshold_is_the_interval_to_the_nanosecond() {
        // 15 839 ns through float seconds and back, truncated, was 15 838 ns: a view
        // exactly one interval old counted as stale.
        let opts = ExplainOptions::for_interval(SimDuration(15_839));
        assert!(!opts.is_stale(SimDuration(15_839)));
        assert!(opts.is_stale(SimDuration(15_840)));
    }

    #[test]
    fn branches_map_to_causes() {
        assert_eq!(family(Branch::FallbackQps), Cause::QpsWindow);
        assert_eq!(family(Branch::FallbackNoStatsQps), Cause::MissingStats);
        assert_eq!(family(Branch::PrefixMatch), Cause::Affinity);
        assert_eq!(family(Branch::FallbackLeastInflight), Cause::LoadView);
        assert_eq!(family(Branch::Random), Cause::Blind);
        assert_eq!(list(&["a".into(), "b".into(), "c".into()], 2), "a, b and 1 more");
    }
}
