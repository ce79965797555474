//! Differential test of the event loop: the fast engine and the per-iteration reference
//! (`sim run --engine reference`) must write byte-identical files (every file but the
//! wall-clock `perf.json`) and process the same events in the same order, on every shipped
//! scenario and on random small fleets with backends joining, leaving and restarting.

mod common;
use common::*;
use proptest::prelude::*;

use std::path::{Path, PathBuf};

use fleetsim::export::{Perf, write_all};
use fleetsim::scenario::Scenario;
use fleetsim::sim::{EngineMode, RunOptions, run_mode};
use fleetsim::workload::Workload;

/// Everything a run writes (as `sim run` does) plus its event log, by file name.
fn outputs(s: &Scenario, w: &Workload, mode: EngineMode, dir: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
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
    let files = write_all(dir, &res, "", &perf, &hints).map_err(|e| e.to_string())?;
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
    Ok(out)
}

/// Runs both modes; `Err` names the first file that differs.
fn compare(s: &Scenario, w: &Workload) -> Result<usize, String> {
    let tmp = tempfile::tempdir().unwrap();
    let fast = outputs(s, w, EngineMode::Fast, &tmp.path().join("fast"));
    let reference = outputs(s, w, EngineMode::Reference, &tmp.path().join("reference"));
    let (fast, reference) = match (fast, reference) {
        (Ok(f), Ok(r)) => (f, r),
        // A run that stops with an error must stop with the same one both ways.
        (Err(a), Err(b)) if a == b => return Ok(0),
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
    Ok(fast.len())
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
    for f in &files {
        let (s, w, _) = fleetsim::scenario::load(f, &[]).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        match compare(&s, &w) {
            Ok(n) => assert!(n >= 7, "{}: {n} outputs", f.display()),
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, .. ProptestConfig::default() })]

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
