//! Property tests: on random small fleets, workloads and policies, every invariant holds
//! after every event (conservation of requests, KV accounting within capacity, running <=
//! slots, no event in the past) and every planned request finishes, or, with backends
//! joining, leaving, draining and restarting, finishes or is abandoned by its client.

use crate::common::*;
use proptest::prelude::*;

/// The seeds of past failures, saved beside this file, are replayed by its property tests.
#[test]
fn saved_failure_seeds_are_replayed() {
    assert_saved_seeds_are_read(file!());
}

proptest! {
    #![proptest_config(proptest_config(48))]

    #[test]
    fn invariants_hold_at_every_event(
        backends in 1u32..4,
        seqs in 1u32..6,
        budget in 8u32..300,
        kv_blocks in 40u32..160,
        policy in 0usize..5,
        interval_s in 0.05f64..3.0,
        sessions in 1u32..10,
        turns in 1u32..4,
        sys in 0u32..80,
        input in 1u32..120,
        output in 1u32..100,
        think_s in 0.01f64..2.0,
        spread_s in 0.0f64..3.0,
        seed in 0u64..1000,
    ) {
        let text = RandomFleet {
            backends, seqs, budget, kv_blocks, policy, interval_s, sessions, turns, sys, input, output, think_s,
            burst_at_s: 0.5, spread_s,
        }
        .toml("");
        let (s, w) = inline(&text, &[("seed", &seed.to_string())]);
        let opts = fleetsim::sim::RunOptions { record_series: true, record_decisions: true, check_invariants: true, record_event_log: false };
        let res = fleetsim::sim::run(s.sim.clone(), &w, opts);
        let res = match res { Ok(r) => r.0, Err(e) => panic!("{e}\n{text}") };
        prop_assert_eq!(res.summary.requests.finished, res.summary.requests.planned);
        prop_assert_eq!(res.summary.requests.in_flight, 0);
        // Time series rows are in time order and never exceed the slot limit.
        prop_assert!(res.series.windows(2).all(|p| p[0].t <= p[1].t));
        prop_assert!(res.series.iter().all(|r| r.running <= seqs && r.kv_used_blocks <= kv_blocks));
        // Every request's timestamps are causally ordered.
        for r in &res.requests {
            let e = r.t_engine.unwrap();
            prop_assert!(r.t_router <= e && e <= r.t_admit.unwrap());
            prop_assert!(r.t_admit.unwrap() < r.t_first_token.unwrap());
            prop_assert!(r.t_first_token.unwrap() <= r.t_finish_engine.unwrap());
            prop_assert!(r.t_first_chunk.unwrap() <= r.t_done.unwrap());
        }
    }

    #[test]
    fn invariants_hold_through_fleet_events(
        backends in 2u32..5,
        seqs in 1u32..5,
        kv_blocks in 60u32..160,
        policy in 0usize..5,
        interval_s in 0.05f64..3.0,
        sessions in 2u32..12,
        turns in 1u32..5,
        kinds in proptest::collection::vec((0u8..6, 0.2f64..6.0, 0.0f64..4.0), 4),
        retries in 0u32..4,
        seed in 0u64..1000,
    ) {
        fleet_case(FleetCase { backends, seqs, kv_blocks, policy, interval_s, sessions, turns, kinds, retries, seed })?;
    }
}

/// One random fleet (the proptest's inputs).
struct FleetCase {
    backends: u32,
    seqs: u32,
    kv_blocks: u32,
    policy: usize,
    interval_s: f64,
    sessions: u32,
    turns: u32,
    kinds: Vec<(u8, f64, f64)>,
    retries: u32,
    seed: u64,
}

/// Runs a fleet with one membership story per backend, checking every invariant after
/// every event, then the end state.
fn fleet_case(c: FleetCase) -> Result<(), TestCaseError> {
    let FleetCase {
        backends,
        seqs,
        kv_blocks,
        policy,
        interval_s,
        sessions,
        turns,
        kinds,
        retries,
        seed,
    } = c;
    // One membership story per backend (backend 0 always stays).
    let mut events = Vec::new();
    for b in 1..backends as usize {
        let (k, at, d) = kinds[b - 1];
        let d = d + 0.1;
        match k {
            1 => events.push(format!("{{ at_s = {at}, backend = {b}, kind = \"leave\" }}")),
            2 => events.push(format!("{{ at_s = {at}, backend = {b}, kind = \"drain\" }}")),
            3 => events.push(format!(
                "{{ at_s = {at}, backend = {b}, kind = \"restart\", downtime_s = {d} }}"
            )),
            4 => events.push(format!("{{ at_s = {at}, backend = {b}, kind = \"join\" }}")),
            5 => {
                events.push(format!("{{ at_s = {at}, backend = {b}, kind = \"leave\" }}"));
                events.push(format!("{{ at_s = {}, backend = {b}, kind = \"join\" }}", at + d));
            }
            _ => {}
        }
    }
    let text = format!(
        r#"
fleet_events = [{events}]
[backends]
count = {backends}
max_num_seqs = {seqs}
max_num_batched_tokens = 128
kv_blocks = {kv_blocks}
[router]
engine_stats_interval_s = {interval_s}
[router.policy]
{policy}
[client]
max_retries = {retries}
[[workload.groups]]
name = "g"
sessions = {sessions}
arrival = {{ kind = "burst", at_s = 0.1, spread_s = 2.0 }}
turns = {{ dist = "uniform", min = 1, max = {turns_max} }}
system_prompt_tokens = 40
first_input_tokens = {{ dist = "uniform", min = 1, max = 100 }}
input_tokens = {{ dist = "uniform", min = 0, max = 60 }}
output_tokens = {{ dist = "uniform", min = 1, max = 200 }}
think_time_s = {{ dist = "exponential", mean = 0.5 }}
max_context_tokens = {ctx}
"#,
        events = events.join(", "),
        policy = POLICIES[policy],
        turns_max = turns + 1,
        ctx = kv_blocks * 16,
    );
    let (s, w) = inline(&text, &[("seed", &seed.to_string())]);
    let opts = fleetsim::sim::RunOptions {
        record_series: true,
        record_decisions: true,
        check_invariants: true,
        record_event_log: false,
    };
    let res = match fleetsim::sim::run(s.sim.clone(), &w, opts) {
        Ok(r) => r.0,
        Err(e) => panic!("{e}\n{text}"),
    };
    let c = &res.summary.requests;
    prop_assert_eq!(c.in_flight, 0);
    prop_assert_eq!(c.finished + c.abandoned, c.planned, "{:?}\n{}", c, text);
    for r in &res.requests {
        // A request either completed or failed, never both.
        prop_assert!(r.t_done.is_some() != r.t_failed.is_some());
    }
    prop_assert_eq!(
        res.requests.iter().filter(|r| r.t_failed.is_some()).count() as u64,
        c.failed
    );
    Ok(())
}

/// Found by the proptest: a restart while a request is on its way to the backend leaves it
/// outstanding there, legitimately, until it arrives and is refused.
#[test]
fn a_restart_with_a_request_on_the_wire() {
    fleet_case(FleetCase {
        backends: 2,
        seqs: 2,
        kv_blocks: 60,
        policy: 2,
        interval_s: 0.05,
        sessions: 9,
        turns: 1,
        kinds: vec![
            (1, 1.7413552112227693, 0.0),
            (0, 0.2, 0.0),
            (0, 0.2, 0.0),
            (0, 0.2, 0.0),
        ],
        retries: 0,
        seed: 480,
    })
    .unwrap();
}
