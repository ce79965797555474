//! Signal faults and slowdowns: each reproduces its production failure, and bad fault
//! tables are input errors.

use crate::common;

use crate::common::{run_with, shipped};
use fleetsim::metrics::Summary;
use fleetsim::sim::RunOptions;

fn run(name: &str, sets: &[(&str, &str)]) -> Summary {
    let (s, w) = shipped(name, sets);
    run_with(&s, &w, RunOptions::summary_only()).summary
}

/// production-stack issue #1074: a backend whose metrics parse to zeros looks idle forever,
/// and least-in-flight sends it far more than its share.
#[test]
fn a_zero_stats_backend_takes_the_burst() {
    for seed in ["1", "2", "3"] {
        let sick = run("fault-zero-stats.toml", &[("seed", seed)]);
        let healthy = run("fault-zero-stats.toml", &[("seed", seed), ("faults", "[]")]);
        let share = |s: &Summary| s.backends[3].last_turn_sessions;
        assert!(share(&sick) >= 15, "seed {seed}: {}", share(&sick));
        assert!(
            share(&sick) > share(&healthy) + 4,
            "seed {seed}: {} vs {}",
            share(&sick),
            share(&healthy)
        );
        assert!(sick.idle_while_queued_s > healthy.idle_while_queued_s);
    }
}

/// A failed scrape removes the entry; the PR #1089 fallback then finds stats missing and
/// silently routes by QPS again, and the burst8 dogpile returns.
#[test]
fn a_scrape_failure_sends_the_fix_back_to_qps() {
    let s = run("fault-scrape-failure.toml", &[]);
    assert!(
        s.decisions_by_branch["fallback_nostats_qps"] >= 8,
        "{:?}",
        s.decisions_by_branch
    );
    assert_eq!(s.peak_backend_sessions, 8);
    let fixed = run("burst8-fixed.toml", &[]);
    assert_eq!(
        fixed.decisions_by_branch["fallback_nostats_qps"], 1,
        "only the very first request"
    );
    assert!(fixed.peak_backend_sessions < 8);
}

/// Frozen stats repeat the first value read in the window: frozen at an idle fleet, every
/// backend stays tied and strict argmin (band 0) degrades to a coin flip per decision.
#[test]
fn frozen_and_lagged_stats_change_decisions_not_the_workload() {
    let base = run("burst8-fixed.toml", &[("router.policy.band", "0")]);
    let frozen = run(
        "burst8-fixed.toml",
        &[
            ("router.policy.band", "0"),
            (
                "faults",
                "[{ backend = 0, kind = \"frozen_stats\", from_s = 0 }, { backend = 1, kind = \"frozen_stats\", from_s = 0 }]",
            ),
        ],
    );
    let lagged = run(
        "burst8-fixed.toml",
        &[
            ("router.policy.band", "0"),
            (
                "faults",
                "[{ backend = 0, kind = \"extra_lag\", lag_s = 20 }, { backend = 1, kind = \"extra_lag\", lag_s = 20 }]",
            ),
        ],
    );
    for s in [&frozen, &lagged] {
        assert_eq!(s.requests.finished, base.requests.finished);
        assert_ne!(s.idle_while_queued_s, base.idle_while_queued_s);
    }
}

/// A backend slowed 3x takes longer per step: the same work keeps it busy longer, and
/// least_request (fresh in-flight counts) sends it fewer requests.
#[test]
fn a_slow_backend_is_busier_and_least_request_avoids_it() {
    let sets = [("router.policy", "{ kind = \"least_request\" }"), ("faults", "[]")];
    let healthy = run("compare-agent-burst.toml", &sets);
    let slow = run(
        "compare-agent-burst.toml",
        &[
            ("router.policy", "{ kind = \"least_request\" }"),
            ("faults", "[{ backend = 0, kind = \"slowdown\", factor = 3.0 }]"),
        ],
    );
    let others = |s: &Summary| s.backends[1..].iter().map(|b| b.requests).max().unwrap();
    assert!(
        slow.backends[0].requests < others(&slow),
        "{:?}",
        slow.backends.iter().map(|b| b.requests).collect::<Vec<_>>()
    );
    assert!(slow.ttft_s.p99 > healthy.ttft_s.p99);
}

fn hints_of(name: &str, sets: &[(&str, &str)]) -> Vec<fleetsim::hints::Hint> {
    let (s, w) = shipped(name, sets);
    let res = common::run_full(&s, &w);
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    fleetsim::hints::hints(&res.decisions, &names, s.sim.router.engine_stats_interval.as_secs_f64())
}

/// A long scrape interval is no zero-stats fault: the first scrape reads an honest 0 before
/// the first request is sent, and every view until the next scrape carries it while requests
/// are in flight. Only stats read while requests were in flight count, so the hint stays
/// quiet there and still names the backend that never exports, at every interval.
#[test]
fn zero_stats_hint_ignores_a_scrape_older_than_the_requests() {
    for (seed, interval) in [("1", "30"), ("3", "15")] {
        let h = hints_of(
            "mixed-fleet-leastinflight.toml",
            &[("seed", seed), ("router.engine_stats_interval_s", interval)],
        );
        assert!(
            !h.iter().any(|h| h.kind == "zero-stats"),
            "seed {seed}, {interval} s: {h:?}"
        );
    }
    for interval in ["10", "15", "30"] {
        let h = hints_of("fault-zero-stats.toml", &[("router.engine_stats_interval_s", interval)]);
        let zero: Vec<&str> = h
            .iter()
            .filter(|h| h.kind == "zero-stats")
            .map(|h| h.backend.as_str())
            .collect();
        assert_eq!(zero, ["backend-3"], "{interval} s: {h:?}");
    }
}

/// The hints name the right backend and cause, and stay quiet on a healthy run.
#[test]
fn health_hints_name_the_cause() {
    let h = hints_of("fault-zero-stats.toml", &[]);
    assert!(
        h.iter().any(|h| h.kind == "zero-stats" && h.backend == "backend-3"),
        "{h:?}"
    );
    assert!(
        !hints_of("fault-zero-stats.toml", &[("faults", "[]")])
            .iter()
            .any(|h| h.kind == "zero-stats")
    );

    let h = hints_of("fault-scrape-failure.toml", &[]);
    let m = h
        .iter()
        .find(|h| h.kind == "missing-stats")
        .expect("missing-stats hint");
    assert_eq!(m.backend, "backend-0");
    assert!(m.from_s >= 35.0 && m.until_s < 60.0, "{m:?}");

    // Strict argmin on a view taken at the start of the burst piles the agents onto the
    // backend that looked idle.
    let h = hints_of(
        "burst8.toml",
        &[("router.policy.fallback", "leastinflight"), ("router.policy.band", "0")],
    );
    let d = h.iter().find(|h| h.kind == "dogpile").expect("dogpile hint");
    assert!(d.from_s >= 40.0 && d.from_s < 41.0, "{d:?}");
    // burst8 with QPS piles up too, but not on an engine-stats view: no dogpile hint, and
    // nothing is missing or zero.
    assert!(hints_of("burst8.toml", &[]).is_empty());

    // A scrape that takes 8 s per endpoint (sequential, 2 endpoints) makes views older than
    // 1.5 x the 10 s interval.
    let h = hints_of("burst8-fixed.toml", &[("router.scrape_duration_s", "8")]);
    let s = h.iter().find(|h| h.kind == "stale-view").expect("stale-view hint");
    assert!(s.message.contains("older than 1.5 x the 10 s scrape interval"), "{s:?}");
    assert!(
        !hints_of("burst8-fixed.toml", &[])
            .iter()
            .any(|h| h.kind == "stale-view")
    );
}

/// A router restart loses the trie and the request stats: every latched session's next
/// turn matches nothing and goes through the fallback again.
#[test]
fn a_router_restart_drops_the_latch() {
    let base = run("burst8.toml", &[]);
    let restarted = run(
        "burst8.toml",
        &[("router_events", "[{ at_s = 100, kind = \"restart\" }]")],
    );
    assert!(
        restarted.decisions_by_branch["fallback_qps"] > base.decisions_by_branch["fallback_qps"],
        "{:?}",
        restarted.decisions_by_branch
    );
    assert!(restarted.latched_sessions < base.latched_sessions);
    assert!(restarted.idle_while_queued_s < base.idle_while_queued_s);
}

/// Scrape jitter moves the scrapes (its own random stream: the same seed gives the same
/// run), and bad router events are input errors.
#[test]
fn scrape_jitter_is_deterministic_and_events_are_validated() {
    let a = run("burst8-fixed.toml", &[("router.scrape_jitter_s", "3")]);
    let b = run("burst8-fixed.toml", &[("router.scrape_jitter_s", "3")]);
    let base = run("burst8-fixed.toml", &[]);
    assert_eq!(a, b);
    assert_ne!(a.events, base.events);
    let bad = |sets: &[(String, String)], needle: &str| {
        let p = common::scenario_path("burst8.toml");
        let e = fleetsim::scenario::load(&p, sets).expect_err("rejected").to_string();
        assert!(e.contains(needle), "{e}");
    };
    bad(
        &[("router_events".into(), "[{ at_s = 1, kind = \"reboot\" }]".into())],
        "router_events[0].kind: unknown router event `reboot`",
    );
    bad(
        &[(
            "router_events".into(),
            "[{ at_s = 1, kind = \"restart\", replica = 3 }]".into(),
        )],
        "router_events[0].replica: replica 3 does not exist",
    );
}

/// Regret is measured against the truth at each decision: a policy reading fresh
/// router-local load regrets far less than QPS routing; a view is never older than one
/// scrape period (10 s sleep + a 2 x 10 ms pass).
#[test]
fn decision_regret_and_view_age_follow_the_signals() {
    let qps = run("burst8.toml", &[]);
    let fresh = run("burst8.toml", &[("router.policy", "{ kind = \"least_request\" }")]);
    assert!(
        qps.decisions_with_regret > 2 * fresh.decisions_with_regret,
        "{} vs {}",
        qps.decisions_with_regret,
        fresh.decisions_with_regret
    );
    assert!(qps.decision_regret.max > fresh.decision_regret.max);
    assert_eq!(qps.decision_regret.count, qps.requests.arrived);
    assert!(
        qps.view_age_s.max > 9.0 && qps.view_age_s.max <= 10.03,
        "{:?}",
        qps.view_age_s
    );
}
