//! Differential test of the event loop: the fast engine and the per-iteration reference
//! (`sim run --engine reference`) must write byte-identical files (every file but the
//! wall-clock `perf.json`) and process the same events in the same order, on every shipped
//! scenario and on random small fleets with backends joining, leaving and restarting.

use crate::common::*;
use proptest::prelude::*;

use std::path::{Path, PathBuf};

use fleetsim::export::{Output, Perf, Tables, write_all};
use fleetsim::scenario::Scenario;
use fleetsim::sim::{EngineMode, RunOptions, run_mode};
use fleetsim::workload::Workload;

/// Everything a run writes (as `sim run` does) plus its event log, by file name.
fn outputs(s: &Scenario, w: &Workload, mode: EngineMode, dir: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    outputs_counted(s, w, mode, dir).map(|(files, _)| files)
}

/// Output files by name.
type Files = Vec<(String, Vec<u8>)>;

/// Engine iterations taken in coalesced stretches, and of those, in collapsed ones.
type Counts = (u64, u64);

/// [`outputs`], and the engine iterations taken in coalesced and collapsed stretches.
fn outputs_counted(s: &Scenario, w: &Workload, mode: EngineMode, dir: &Path) -> Result<(Files, Counts), String> {
    let opts = RunOptions {
        record_event_log: true,
        ..RunOptions::default()
    };
    let (res, _) = run_mode(s.sim.clone(), w, opts, mode).map_err(|e| e.to_string())?;
    // Wall-clock figures are the one thing allowed to differ; fix them.
    let perf = Perf {
        wall_s: 1.0,
        events: res.summary.events,
        events_per_s: 0.0,
        requests_per_s: 0.0,
    };
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let hints = fleetsim::hints::hints(&res.decisions, &names, 1.0);
    let out = Output {
        res: &res,
        scenario_toml: "",
        perf: &perf,
        hints: &hints,
        tables: Tables::Csv,
    };
    let files = write_all(dir, &out, true).map_err(|e| e.to_string())?;
    let mut out: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "perf.json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect();
    let log: Vec<String> = res
        .event_log
        .iter()
        .map(|e| format!("{} {} {} {}", e.t.0, e.kind_name(), e.a, e.b))
        .collect();
    out.push(("event log".into(), log.join("\n").into_bytes()));
    Ok((out, (res.coalesced_steps, res.collapsed_steps)))
}

/// Runs both modes; `Err` names the first file that differs.
fn compare(s: &Scenario, w: &Workload) -> Result<usize, String> {
    compare_counted(s, w).map(|(n, _)| n)
}

/// [`compare`], and the fast mode's coalesced and collapsed iterations (the reference mode
/// must have none).
fn compare_counted(s: &Scenario, w: &Workload) -> Result<(usize, Counts), String> {
    let tmp = tempfile::tempdir().unwrap();
    let fast = outputs_counted(s, w, EngineMode::Fast, &tmp.path().join("fast"));
    let reference = outputs_counted(s, w, EngineMode::Reference, &tmp.path().join("reference"));
    let ((fast, coalesced), reference) = match (fast, reference) {
        (Ok(f), Ok((r, rc))) => {
            assert_eq!(rc, (0, 0), "the reference mode coalesced");
            (f, r)
        }
        // A run that stops with an error must stop with the same one both ways.
        (Err(a), Err(b)) if a == b => return Ok((0, (0, 0))),
        (a, b) => return Err(format!("fast {:?} vs reference {:?}", a.err(), b.err())),
    };
    assert_eq!(fast.len(), reference.len());
    for ((name, a), (_, b)) in fast.iter().zip(&reference) {
        if a != b {
            let line = a
                .split(|&c| c == b'\n')
                .zip(b.split(|&c| c == b'\n'))
                .position(|(x, y)| x != y)
                .map_or(0, |i| i + 1);
            return Err(format!("{name} differs (first at line {line})"));
        }
    }
    Ok((fast.len(), coalesced))
}

/// Every scenario under scenarios/ but the 1M-request benchmarks and tuning spaces.
fn shipped_scenarios() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p != root.join("bench") && p != root.join("tune") {
                    dirs.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_shipped_scenario_is_identical_both_ways() {
    let files = shipped_scenarios();
    assert!(files.len() >= 20, "found only {} scenarios", files.len());
    let mut failures = Vec::new();
    let (mut coalescing, mut collapsing) = (0, 0);
    for f in &files {
        let (s, w, _) = fleetsim::scenario::load(f, &[]).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        match compare_counted(&s, &w) {
            Ok((n, (c, v))) => {
                assert!(n >= 7, "{}: {n} outputs", f.display());
                coalescing += usize::from(c > 0);
                collapsing += usize::from(v > 0);
            }
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
    // The comparison covers decode coalescing: most shipped scenarios take stretches.
    assert!(
        coalescing * 2 > files.len(),
        "only {coalescing} of {} scenarios coalesced",
        files.len()
    );
    // ... and collapsed stretches: a third of them take virtual steps.
    assert!(
        collapsing * 3 > files.len(),
        "only {collapsing} of {} scenarios collapsed a stretch",
        files.len()
    );
    assert!(
        failures.is_empty(),
        "fast and reference engines differ:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_mismatch_is_detected() {
    // The comparison itself can fail: two different seeds give different files.
    let (s, w) = shipped("burst8.toml", &[]);
    let (s2, w2) = shipped("burst8.toml", &[("seed", "2")]);
    let tmp = tempfile::tempdir().unwrap();
    let a = outputs(&s, &w, EngineMode::Fast, &tmp.path().join("a")).unwrap();
    let b = outputs(&s2, &w2, EngineMode::Reference, &tmp.path().join("b")).unwrap();
    assert_ne!(a, b);
}

/// The seeds of past failures, saved beside this file, are replayed by its property tests.
#[test]
fn saved_failure_seeds_are_replayed() {
    assert_saved_seeds_are_read(file!());
}

proptest! {
    #![proptest_config(proptest_config(40))]

    #[test]
    fn random_fleets_are_identical_both_ways(
        backends in 1u32..6,
        seqs in 1u32..6,
        budget in 8u32..300,
        kv_blocks in 40u32..160,
        policy in 0usize..5,
        interval_s in 0.05f64..3.0,
        sessions in 1u32..14,
        turns in 1u32..4,
        input in 1u32..120,
        output in 1u32..100,
        fleet in 0usize..4,
        at_s in 0.2f64..4.0,
        seed in 0u64..1000,
    ) {
        // Restarts leave a stale step of the old engine pending beside the new engine's.
        let events = match fleet {
            1 => format!("fleet_events = [{{ at_s = {at_s}, backend = 0, kind = \"restart\", downtime_s = 0 }}]"),
            2 => format!("fleet_events = [{{ at_s = {at_s}, backend = 0, kind = \"restart\", downtime_s = 0.5 }}]"),
            3 => format!("fleet_events = [{{ at_s = {at_s}, backend = 0, kind = \"drain\" }}, {{ at_s = {}, backend = 0, kind = \"join\" }}]", at_s + 1.0),
            _ => String::new(),
        };
        let text = RandomFleet {
            backends, seqs, budget, kv_blocks, policy, interval_s, sessions, turns, sys: 40, input, output,
            think_s: 0.3, burst_at_s: 0.1, spread_s: 2.0,
        }
        .toml(&events);
        let (s, w) = inline(&text, &[("seed", &seed.to_string())]);
        if let Err(e) = compare(&s, &w) {
            prop_assert!(false, "{e}\n{text}");
        }
    }
}

/// Decode-heavy fleets whose stretches are crossed by every kind of reader: scrapes with
/// and without gauge lag (their reads land mid-stretch and, with whole-millisecond step
/// times and latencies, on step ends at the same nanosecond), KV-event feeds, a slowdown
/// fault that starts and ends mid-stretch, restarts and drains, full running lists with
/// arrivals waiting, and KV caches small enough that stretches end in preemptions.
fn decode_heavy(case: &DecodeCase) -> (String, Vec<(&'static str, String)>) {
    let events = match case.fleet {
        1 => format!(
            "fleet_events = [{{ at_s = {}, backend = 0, kind = \"restart\", downtime_s = 0 }}]\n",
            case.at_s
        ),
        2 => format!(
            "fleet_events = [{{ at_s = {}, backend = 0, kind = \"drain\" }}, {{ at_s = {}, backend = 0, kind = \"join\" }}]\n",
            case.at_s,
            case.at_s + 0.5
        ),
        _ => String::new(),
    };
    let faults = if case.slowdown {
        format!(
            "faults = [{{ backend = 0, kind = \"slowdown\", factor = 2.5, from_s = {}, until_s = {} }}]\n",
            case.at_s / 2.0,
            case.at_s
        )
    } else {
        String::new()
    };
    let top = format!("{events}{faults}[network]\ndispatch_latency_s = 0.001\nresponse_latency_s = 0.0005\n");
    let text = RandomFleet {
        backends: case.backends,
        seqs: case.seqs,
        budget: case.budget,
        kv_blocks: case.kv_blocks,
        policy: case.policy % POLICIES.len(),
        interval_s: case.interval_ms as f64 / 1000.0,
        sessions: case.sessions,
        turns: 2,
        sys: 40,
        input: 60,
        output: case.output,
        think_s: 0.05,
        burst_at_s: 0.1,
        spread_s: case.spread_s,
    }
    .toml(&top);
    let mut sets = vec![
        ("backends.metrics_lag_s", ["0", "0.002", "0.037"][case.lag].to_string()),
        (
            "backends.step_time",
            format!(
                "{{ beta0_us = 1000, beta1_us = {}, beta2_us = {} }}",
                case.beta1_us, case.beta2_us
            ),
        ),
        ("seed", case.seed.to_string()),
    ];
    // Policies fed by KV events.
    match case.policy {
        5 => sets.push(("router.policy", "{ kind = \"kvaware\" }".into())),
        6 => sets.push(("router.policy", "{ kind = \"dynamo\" }".into())),
        _ => {}
    }
    (text, sets)
}

#[derive(Debug)]
struct DecodeCase {
    backends: u32,
    seqs: u32,
    budget: u32,
    kv_blocks: u32,
    policy: usize,
    interval_ms: u32,
    sessions: u32,
    output: u32,
    lag: usize,
    beta2_us: u32,
    /// Prefill cost per token; 0 (with `spread_s = 0`) puts every step on the
    /// millisecond grid, where scrapes and collapsed steps tie.
    beta1_us: u32,
    spread_s: f64,
    slowdown: bool,
    fleet: usize,
    at_s: f64,
    seed: u64,
}

fn decode_case() -> impl Strategy<Value = DecodeCase> {
    (
        (1u32..4, 1u32..10, 16u32..400, 20u32..200, 0usize..7, 1u32..40),
        (
            2u32..16,
            20u32..300,
            0usize..3,
            0u32..3,
            any::<bool>(),
            0usize..3,
            0.3f64..2.0,
            0u64..1000,
        ),
    )
        .prop_map(
            |(
                (backends, seqs, budget, kv_blocks, policy, interval),
                (sessions, output, lag, beta2, slowdown, fleet, at_s, seed),
            )| {
                DecodeCase {
                    backends,
                    seqs,
                    budget,
                    // The scenario must admit every first turn: at most 40 system + 61 input
                    // + (output + 1) tokens in 16-token blocks (a first turn that cannot fit
                    // is a load error, not a run).
                    kv_blocks: kv_blocks.max((40 + 61 + output + 1).div_ceil(16)),
                    policy,
                    // Whole multiples of 5 ms: scrape reads fall on step ends.
                    interval_ms: 5 * interval,
                    sessions,
                    output,
                    lag,
                    // Whole-millisecond decode steps (beta2 = 0) make ties common.
                    beta2_us: [0, 100, 7][beta2 as usize],
                    // A third of the cases on the millisecond grid (see `beta1_us`).
                    beta1_us: if seed % 3 == 0 { 0 } else { 2 },
                    spread_s: if seed % 3 == 0 { 0.0 } else { 0.5 },
                    slowdown,
                    fleet,
                    at_s,
                    seed,
                }
            },
        )
}

fn run_decode_case(case: &DecodeCase) -> Result<Counts, String> {
    let (text, sets) = decode_heavy(case);
    let sets: Vec<(&str, &str)> = sets.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (s, w) = inline(&text, &sets);
    compare_counted(&s, &w)
        .map(|(_, c)| c)
        .map_err(|e| format!("{e}\n{text}\n{sets:?}"))
}

#[test]
fn stretches_crossed_by_every_reader_are_identical_both_ways() {
    // One fixed case of each reader, each of which must actually coalesce.
    let base = DecodeCase {
        backends: 2,
        seqs: 4,
        budget: 256,
        kv_blocks: 120,
        policy: 0,
        interval_ms: 10,
        sessions: 10,
        output: 200,
        lag: 0,
        beta2_us: 0,
        beta1_us: 2,
        spread_s: 0.5,
        slowdown: false,
        fleet: 0,
        at_s: 0.9,
        seed: 7,
    };
    let cases = [
        DecodeCase { ..base },
        DecodeCase { lag: 1, ..base },
        DecodeCase {
            lag: 2,
            interval_ms: 5,
            ..base
        },
        DecodeCase { policy: 5, ..base },
        DecodeCase {
            policy: 6,
            lag: 1,
            ..base
        },
        DecodeCase { slowdown: true, ..base },
        DecodeCase { fleet: 1, ..base },
        DecodeCase { fleet: 2, ..base },
        // Full running lists with requests waiting; a small cache that preempts.
        DecodeCase {
            seqs: 1,
            sessions: 12,
            ..base
        },
        DecodeCase {
            kv_blocks: 30,
            seqs: 8,
            ..base
        },
        // Every step, arrival and scrape on the millisecond grid: scrapes tie with steps
        // (collapsed or not) at one nanosecond, in both orders.
        DecodeCase {
            beta1_us: 0,
            spread_s: 0.0,
            interval_ms: 5,
            ..base
        },
        DecodeCase {
            beta1_us: 0,
            spread_s: 0.0,
            interval_ms: 1,
            backends: 3,
            lag: 1,
            ..base
        },
        // On the grid with 1 ms per running request: backends with different batches step
        // every 2, 3, 4, 5 ms and their collapsed steps meet at one nanosecond, ordered
        // by their predecessors' times.
        DecodeCase {
            beta1_us: 0,
            beta2_us: 1000,
            spread_s: 0.0,
            interval_ms: 40,
            backends: 3,
            ..base
        },
    ];
    let mut collapsed = 0;
    for (i, c) in cases.iter().enumerate() {
        match run_decode_case(c) {
            Ok((n, v)) => {
                assert!(n > 0, "case {i} took no coalesced step: {c:?}");
                collapsed += usize::from(v > 0);
            }
            Err(e) => panic!("case {i}: {e}"),
        }
    }
    // Readers that end or cross a collapse (arrivals, scrapes on the grid, lag) are met
    // by collapsed stretches too, not only by queued stretch steps.
    assert!(collapsed >= 4, "only {collapsed} fixed cases collapsed a stretch");
}

proptest! {
    #![proptest_config(proptest_config(40))]

    #[test]
    fn random_decode_heavy_fleets_are_identical_both_ways(case in decode_case()) {
        if let Err(e) = run_decode_case(&case) {
            prop_assert!(false, "{e}");
        }
    }
}
