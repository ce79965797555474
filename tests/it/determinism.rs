//! Same scenario and seed: byte-identical result files (perf.json aside, which holds wall
//! clock). A different seed: different results.

use std::fs;
use std::path::Path;

use assert_cmd::Command;

fn run_into(dir: &Path, extra: &[&str]) {
    Command::cargo_bin("sim")
        .unwrap()
        .args(["run", "scenarios/burst8-fixed.toml", "--quiet", "--out"])
        .arg(dir)
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .assert()
        .success();
}

const FILES: [&str; 7] = [
    "summary.json",
    "requests.csv",
    "timeseries.csv",
    "decisions.csv",
    "scenario.toml",
    "timeseries.svg",
    "timeseries.png",
];

#[test]
fn two_runs_are_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    run_into(&a, &[]);
    run_into(&b, &[]);
    for f in FILES {
        let (x, y) = (fs::read(a.join(f)).unwrap(), fs::read(b.join(f)).unwrap());
        assert!(!x.is_empty(), "{f} is empty");
        assert!(x == y, "{f} differs between two identical runs");
    }
    assert!(a.join("perf.json").exists());
}

#[test]
fn another_seed_changes_the_results() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    run_into(&a, &["--seed", "1"]);
    run_into(&b, &["--seed", "2"]);
    let (x, y) = (
        fs::read(a.join("requests.csv")).unwrap(),
        fs::read(b.join("requests.csv")).unwrap(),
    );
    assert!(x != y);
}

#[test]
fn library_runs_are_identical_in_every_record() {
    // In-process: two simulations of the same scenario agree on every request record,
    // every time-series row and every decision (views included).
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/burst8.toml");
    let (s, w, _) = fleetsim::scenario::load(&p, &[]).unwrap();
    let opts = fleetsim::sim::RunOptions::default();
    let (r1, _) = fleetsim::sim::run(s.sim.clone(), &w, opts).unwrap();
    let (r2, _) = fleetsim::sim::run(s.sim.clone(), &w, opts).unwrap();
    assert_eq!(r1.summary, r2.summary);
    assert_eq!(r1.requests, r2.requests);
    assert_eq!(r1.series, r2.series);
    assert_eq!(r1.decisions.rows, r2.decisions.rows);
    assert_eq!(r1.decisions.views, r2.decisions.views);
    assert_eq!(r1.decisions.engines, r2.decisions.engines);
}
