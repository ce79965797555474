//! `sim explain`: each shipped failure scenario is explained with the right backend, branch
//! and cause, and the narrative says so in words.

use crate::common::{run_full, shipped};
use fleetsim::explain::{Cause, EpisodeStory, ExplainOptions, Explanation, explain, render};

fn explained(name: &str, sets: &[(&str, &str)]) -> Explanation {
    let (s, w) = shipped(name, sets);
    let res = run_full(&s, &w);
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let opts = ExplainOptions::for_interval(s.sim.router.engine_stats_interval);
    explain(&res, &s.sim, &names, &opts)
}

/// The episode with the most stranded slot-seconds.
fn worst(x: &Explanation) -> &EpisodeStory {
    x.episodes
        .iter()
        .max_by(|a, b| a.stranded_slot_s.total_cmp(&b.stranded_slot_s))
        .expect("an episode")
}

fn queued(e: &EpisodeStory) -> &str {
    &e.queued[0].backend
}

/// burst8: backend-1 queued while backend-0 idled, because `_qps_routing` placed all 8
/// agents there on dispatch counts, and the trie latched them.
#[test]
fn burst8_is_the_qps_window_latched_by_the_trie() {
    let x = explained("burst8.toml", &[]);
    let e = worst(&x);
    assert_eq!(queued(e), "backend-1");
    assert_eq!(e.idle[0].backend, "backend-0");
    assert_eq!(e.main_cause, Cause::QpsWindow);
    assert_eq!(e.causes[0].branch, "fallback_qps");
    assert_eq!(e.causes[0].sessions.len(), 8);
    assert!(e.causes[0].sessions.iter().all(|s| s.starts_with("agents-")));
    assert_eq!(e.latched_sessions.len(), 8);
    assert!(e.context.is_empty());
    assert!(x.explained_share > 0.9, "{}", x.explained_share);
    let text = render(&x);
    assert!(
        text.contains("backend-0 had a free slot for 197.4 s while backend-1 queued up to 4 requests"),
        "{text}"
    );
    assert!(
        text.contains("`fallback_qps` decision(s) between 40.0 s and 41.0 s"),
        "{text}"
    );
    assert!(text.contains("never used (no request stats)"), "{text}");
}

/// The PR #1089 fix with stats missing: the fallback silently went back to QPS.
#[test]
fn a_scrape_failure_is_explained_as_missing_stats() {
    let x = explained("fault-scrape-failure.toml", &[]);
    let e = worst(&x);
    assert_eq!(queued(e), "backend-1");
    assert_eq!(e.main_cause, Cause::MissingStats);
    assert_eq!(e.causes[0].branch, "fallback_nostats_qps");
    assert!(
        e.context
            .iter()
            .any(|c| c.contains("backend-0's /metrics scrapes failed from 35.0 s to 60.0 s")),
        "{:?}",
        e.context
    );
}

/// production-stack #1074: the backend whose stats read zero is the one that queued, and
/// the explanation says its load read zero while the router had requests in flight to it.
#[test]
fn a_zero_stats_backend_is_named_with_its_cause() {
    let x = explained("fault-zero-stats.toml", &[]);
    let e = worst(&x);
    assert_eq!(queued(e), "backend-3");
    assert!(
        e.causes
            .iter()
            .any(|c| c.cause == Cause::ZeroStats && c.branch == "fallback_leastinflight"),
        "{:?}",
        e.causes.iter().map(|c| (c.cause, c.branch.clone())).collect::<Vec<_>>()
    );
    assert!(
        e.context
            .iter()
            .any(|c| c.contains("backend-3's /metrics parsed to zeros"))
    );
}

/// The joined backend took the late burst through the QPS window; the join is the context.
#[test]
fn a_join_is_explained_with_the_qps_first_unused_endpoint() {
    let x = explained("fleet-join.toml", &[]);
    let e = worst(&x);
    assert_eq!(queued(e), "backend-2");
    assert_eq!(e.main_cause, Cause::QpsWindow);
    let c = &e.causes[0];
    assert_eq!(c.branch, "fallback_qps");
    assert!(
        c.sessions.iter().all(|s| s.starts_with("late-agents-")),
        "{:?}",
        c.sessions
    );
    assert!(c.from_s >= 90.0, "{}", c.from_s);
    assert!(
        c.evidence.contains("backend-2: never used (no request stats)"),
        "{}",
        c.evidence
    );
    assert!(
        e.context.iter().any(|c| c.contains("backend-2 joined at 60.0 s")),
        "{:?}",
        e.context
    );
}

/// After a router restart every session is re-decided inside one scrape window: the
/// explanation points at those re-decisions (not the first turns) and names the restart.
#[test]
fn a_router_restart_is_explained_by_its_re_decisions() {
    let x = explained("fault-router-restart.toml", &[]);
    let e = worst(&x);
    assert!(e.from_s > 70.0, "{}", e.from_s);
    assert_eq!(e.sessions.len(), 9);
    for c in &e.causes {
        assert_eq!(c.branch, "fallback_leastinflight");
        assert!(
            c.from_s >= 70.0,
            "placing decision at {} s, before the restart",
            c.from_s
        );
        assert!(c.distinct_views <= 2, "{}", c.distinct_views);
    }
    assert!(e.causes.iter().any(|c| c.cause == Cause::StaleView));
    assert!(
        e.context.iter().any(|c| c.contains("the router restarted at 70.0 s")),
        "{:?}",
        e.context
    );
}

/// A balanced run has nothing to explain, and says so.
#[test]
fn a_balanced_run_has_no_episode() {
    let x = explained(
        "burst8.toml",
        &[("router.policy", "{ kind = \"least_request\" }"), ("seed", "2")],
    );
    let big: Vec<_> = x.episodes.iter().filter(|e| e.stranded_slot_s > 20.0).collect();
    assert!(
        big.is_empty(),
        "{:?}",
        big.iter().map(|e| e.stranded_slot_s).collect::<Vec<_>>()
    );
}

/// A backend restart: while it was away the fallback had one endpoint to choose from, and
/// the trie kept every session there after it came back.
#[test]
fn a_backend_restart_is_explained_as_no_choice_then_affinity() {
    let x = explained("fleet-restart.toml", &[]);
    let e = worst(&x);
    assert_eq!(queued(e), "backend-0");
    assert_eq!(e.idle[0].backend, "backend-1");
    assert_eq!(e.main_cause, Cause::NoChoice);
    let c = &e.causes[0];
    assert!(c.from_s >= 100.0 && c.until_s < 130.0, "{} .. {}", c.from_s, c.until_s);
    assert!(
        c.evidence.contains("backend-1: not listed (out of the fleet)"),
        "{}",
        c.evidence
    );
    assert!(e.latched_turns > 100);
    assert!(e.context.iter().any(|c| c.contains("backend-1 restarted at 100.0 s")));
}
