//! Fleet membership events (join, leave, drain, restart) and client retries: who gets
//! requests when, what fails, what is retried or abandoned, and bad event tables are input
//! errors naming the key.

use crate::common;

use crate::common::{run_with, shipped};
use fleetsim::sim::{RunOptions, RunResult};
use fleetsim::time::SimTime;

/// burst8-fixed (2 backends, 9 sessions, 200 turns) with overrides, every output recorded.
/// (Invariants under fleet events are checked event by event on small fleets in
/// `tests/it/invariants.rs`; here the engines are full size.)
fn run(sets: &[(&str, &str)]) -> RunResult {
    let (s, w) = shipped("burst8-fixed.toml", sets);
    run_with(&s, &w, RunOptions::default())
}

fn secs(s: f64) -> SimTime {
    SimTime((s * 1e9).round() as u64)
}

/// Requests dispatched to backend `b` in `[from, until)` of router time.
fn sent_to(res: &RunResult, b: usize, from: f64, until: f64) -> usize {
    res.requests
        .iter()
        .filter(|r| r.backend.index() == b && r.t_router >= secs(from) && r.t_router < secs(until))
        .count()
}

const LEAST_REQUEST: (&str, &str) = ("router.policy", "{ kind = \"least_request\" }");

/// A backend that joins later is not routed to before it joins, and is once listed.
#[test]
fn a_joining_backend_is_routed_to_only_after_it_joins() {
    let res = run(&[
        ("backends.count", "3"),
        LEAST_REQUEST,
        ("fleet_events", "[{ at_s = 60, backend = 2, kind = \"join\" }]"),
    ]);
    assert_eq!(sent_to(&res, 2, 0.0, 60.0), 0);
    assert!(sent_to(&res, 2, 60.0, 1e9) > 20, "{}", sent_to(&res, 2, 60.0, 1e9));
    let b2 = &res.summary.backends[2];
    assert!((b2.out_of_service_s - 60.0).abs() < 1e-9, "{}", b2.out_of_service_s);
    assert_eq!(res.summary.requests.failed, 0);
    assert_eq!(res.summary.requests.finished, 200);
}

/// A backend that leaves under load: what it held fails, clients retry on the other one,
/// nothing is routed to it afterwards and every turn still finishes.
#[test]
fn a_leave_fails_held_requests_and_clients_retry_elsewhere() {
    let res = run(&[("fleet_events", "[{ at_s = 100, backend = 1, kind = \"leave\" }]")]);
    let s = &res.summary;
    assert!(s.requests.failed > 0, "{:?}", s.requests);
    assert_eq!(sent_to(&res, 1, 100.0, 1e9), 0);
    for r in res.requests.iter().filter(|r| r.t_failed.is_some()) {
        assert_eq!(r.backend.index(), 1);
        assert!(r.t_failed.unwrap() >= secs(100.0));
        assert!(r.t_done.is_none());
    }
    // One attempt per failure is a retry: attempts = turns + failures.
    assert_eq!(res.requests.len() as u64, 200 + s.requests.failed);
    assert_eq!(s.requests.finished, 200);
    assert_eq!(s.requests.abandoned, 0);
    assert!((s.backends[1].out_of_service_s - (s.sim_time_s - 100.0)).abs() < 1e-6);
}

/// A drain unlists the backend but lets it finish what it holds: nothing fails.
#[test]
fn a_drain_finishes_held_requests_without_failures() {
    let res = run(&[
        LEAST_REQUEST,
        ("fleet_events", "[{ at_s = 100, backend = 1, kind = \"drain\" }]"),
    ]);
    assert_eq!(res.summary.requests.failed, 0);
    assert_eq!(sent_to(&res, 1, 100.0, 1e9), 0);
    assert!(sent_to(&res, 1, 0.0, 100.0) > 0);
    assert!(res.requests.iter().all(|r| r.t_done.is_some()));
    assert_eq!(res.summary.requests.finished, 200);
}

/// A restart: out of service for the downtime, back with an empty prefix cache.
#[test]
fn a_restart_comes_back_cold_after_the_downtime() {
    let res = run(&[
        LEAST_REQUEST,
        (
            "fleet_events",
            "[{ at_s = 100, backend = 1, kind = \"restart\", downtime_s = 20 }]",
        ),
    ]);
    let s = &res.summary;
    assert!(s.requests.failed > 0);
    assert_eq!(sent_to(&res, 1, 100.0, 120.0), 0);
    assert!(sent_to(&res, 1, 120.0, 1e9) > 10);
    assert!(
        (s.backends[1].out_of_service_s - 20.0).abs() < 1e-6,
        "{}",
        s.backends[1].out_of_service_s
    );
    // The first request served by the new engine finds nothing cached, even the system
    // prompt every earlier request to backend-1 had cached.
    let first_back = res
        .requests
        .iter()
        .filter(|r| r.backend.index() == 1 && r.t_router >= secs(120.0) && r.t_done.is_some())
        .min_by_key(|r| r.t_engine)
        .expect("backend-1 serves again");
    assert_eq!(first_back.cached_tokens, 0);
    assert_eq!(s.requests.finished, 200);
}

/// With no endpoint listed the router rejects at once; the OpenAI SDK's two retries (0.5 s,
/// 1 s) do not ride out a 20 s outage and the rest of each session is abandoned, while
/// clients configured to retry longer lose nothing.
#[test]
fn clients_abandon_or_ride_out_an_outage_by_their_retry_budget() {
    let outage = "[{ at_s = 100, backend = 0, kind = \"leave\" }, { at_s = 100, backend = 1, kind = \"leave\" }, { at_s = 120, backend = 0, kind = \"join\" }, { at_s = 120, backend = 1, kind = \"join\" }]";
    let short = run(&[LEAST_REQUEST, ("fleet_events", outage)]);
    let s = &short.summary;
    assert!(s.requests.rejected > 0, "{:?}", s.requests);
    assert!(s.requests.abandoned > 0, "{:?}", s.requests);
    assert_eq!(s.requests.finished + s.requests.abandoned, 200);
    assert_eq!(s.requests.in_flight, 0);

    let patient = run(&[LEAST_REQUEST, ("fleet_events", outage), ("client.max_retries", "10")]);
    let p = &patient.summary;
    assert_eq!(p.requests.abandoned, 0);
    assert_eq!(p.requests.finished, 200);
    assert!(p.requests.rejected > s.requests.rejected);

    // No retries at all: each session with turns left loses them at its first failure.
    let none = run(&[LEAST_REQUEST, ("fleet_events", outage), ("client.max_retries", "0")]);
    assert!(none.summary.requests.abandoned >= s.requests.abandoned);
}

/// Backoff: the k-th retry waits min(0.5 * 2^(k-1), 8) s scaled by 1 - 0.25u.
#[test]
fn retry_delays_follow_the_openai_sdk() {
    let (s, _) = shipped("burst8.toml", &[]);
    let c = s.sim.client;
    assert_eq!(c.max_retries, 2);
    let d = |k, u| c.retry_delay(k, u).as_secs_f64();
    assert!((d(1, 0.0) - 0.5).abs() < 1e-9);
    assert!((d(2, 0.0) - 1.0).abs() < 1e-9);
    assert!((d(3, 1.0) - 1.5).abs() < 1e-9);
    assert!((d(10, 0.0) - 8.0).abs() < 1e-9);
}

/// A backend joining the fleet of a latched prefix router gets the next burst, all of it:
/// `_qps_routing` returns the first endpoint it has no request stats for, then the one with
/// the fewest dispatches. Without the join, the same burst goes to the idle backend.
#[test]
fn adding_a_replica_to_a_latched_fleet_makes_it_worse() {
    for seed in ["1", "2", "3"] {
        let (s, w) = shipped("fleet-join.toml", &[("seed", seed)]);
        let joined = run_with(&s, &w, RunOptions::summary_only()).summary;
        let (s, w) = shipped(
            "fleet-join.toml",
            &[("seed", seed), ("backends.count", "2"), ("fleet_events", "[]")],
        );
        let without = run_with(&s, &w, RunOptions::summary_only()).summary;
        assert_eq!(joined.backends[2].first_turn_sessions, 8, "seed {seed}");
        assert_eq!(joined.backends[0].peak_waiting, 0, "seed {seed}");
        assert!(
            joined.idle_while_queued_s > 2.0 * without.idle_while_queued_s,
            "seed {seed}: {} vs {}",
            joined.idle_while_queued_s,
            without.idle_while_queued_s
        );
    }
}

/// Bad event tables name the key (and the event) that is wrong.
#[test]
fn bad_fleet_events_and_client_keys_are_named() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "fleet_events",
            "[{ at_s = 1, backend = 5, kind = \"leave\" }]",
            "fleet_events[0].backend",
        ),
        (
            "fleet_events",
            "[{ at_s = 1, backend = 0, kind = \"explode\" }]",
            "fleet_events[0].kind",
        ),
        (
            "fleet_events",
            "[{ at_s = -1, backend = 0, kind = \"leave\" }]",
            "fleet_events[0].at_s",
        ),
        (
            "fleet_events",
            "[{ at_s = 1, backend = 0, kind = \"leave\" }, { at_s = 2, backend = 0, kind = \"drain\" }]",
            "fleet_events[1]",
        ),
        (
            "fleet_events",
            "[{ at_s = 1, backend = 0, kind = \"restart\", downtime_s = 10 }, { at_s = 5, backend = 0, kind = \"leave\" }]",
            "fleet_events[1]",
        ),
        ("client.max_retries", "-1", "client.max_retries"),
        ("client.retry_initial_delay_s", "-0.5", "client.retry_initial_delay_s"),
    ];
    let p = common::scenario_path("burst8.toml");
    for (key, value, want) in cases {
        let sets = vec![(key.to_string(), value.to_string())];
        let e = fleetsim::scenario::load(&p, &sets).expect_err("rejected").to_string();
        assert!(e.contains(want), "{key} = {value}: {e}");
    }
}
