//! `sim check` and `sim compare` as a CI uses them: exit codes, tables, JUnit, goldens.

use crate::common::sim;
use predicates::prelude::*;

#[test]
fn shipped_scenarios_pass_their_bounds() {
    let t = tempfile::tempdir().unwrap();
    let junit = t.path().join("j.xml");
    sim()
        .args([
            "check",
            "scenarios/burst8.toml",
            "scenarios/burst8-fixed.toml",
            "--determinism",
            "--junit",
        ])
        .arg(&junit)
        .assert()
        .success()
        .stdout(predicate::str::is_match(r"burst8 +peak_backend_sessions == 8 +8 +pass +10 seeds").unwrap())
        .stdout(predicate::str::contains("2 scenarios, 12 checks: 12 passed, 0 failed"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"<testsuites name="sim check" tests="12" skipped="0" failures="0""#),
        "{xml}"
    );
}

/// A policy change that brings the dogpile back (the fixed scenario routed by QPS again)
/// fails the gate with a readable table, and the JUnit report carries the failures.
#[test]
fn a_broken_policy_fails_the_gate() {
    let t = tempfile::tempdir().unwrap();
    let junit = t.path().join("j.xml");
    sim()
        .args([
            "check",
            "scenarios/burst8-fixed.toml",
            "--set",
            "router.policy.fallback=qps",
            "--junit",
        ])
        .arg(&junit)
        .assert()
        .code(1)
        .stdout(
            predicate::str::is_match(r"peak_backend_sessions <= 7 +8 +FAIL +10 seeds; fails on seeds? 1 \(8\)")
                .unwrap(),
        )
        .stdout(predicate::str::is_match(r"max\(idle_while_queued_s\) < 190 +210.833 +FAIL").unwrap())
        .stdout(predicate::str::contains("1 scenarios, 4 checks: 0 passed, 4 failed"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"failures="4""#), "{xml}");
    assert!(
        xml.contains("measured 8 (10 seeds; fails on seed")
            && xml.contains("): bound `peak_backend_sessions &lt;= 7` does not hold"),
        "{xml}"
    );
    // And the baseline's bounds notice when the failure stops being reproduced.
    sim()
        .args([
            "check",
            "scenarios/burst8.toml",
            "--set",
            "router.policy.fallback=leastinflight",
            "--quiet",
            "--junit",
        ])
        .arg(&junit)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("FAIL").and(predicate::str::contains("passed")));
}

#[test]
fn invariants_and_folders() {
    let t = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/burst8.toml")).unwrap();
    std::fs::write(t.path().join("a.toml"), base.replace("seeds = 10", "seeds = 2")).unwrap();
    std::fs::write(t.path().join("notes.txt"), "not a scenario").unwrap();
    sim()
        .arg("check")
        .arg(t.path())
        .arg("--invariants")
        .arg("--junit")
        .arg(t.path().join("j.xml"))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("invariants")
                .and(predicate::str::contains("checked after every event on 2 seeds")),
        );
    let empty = tempfile::tempdir().unwrap();
    sim()
        .arg("check")
        .arg(empty.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no .toml scenarios"));
}

fn with_expect(expect: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/burst8-fixed.toml")).unwrap();
    let base = &base[..base.find("[expect]").unwrap()];
    std::fs::write(t.path().join("s.toml"), format!("{base}[expect]\n{expect}\n")).unwrap();
    t
}

#[test]
fn bad_bounds_are_input_errors_with_locations() {
    for (expect, needle) in [
        (
            "checks = [\"idle_while_queued_s <= x\"]",
            "expect.checks[0]: `x` in `idle_while_queued_s <= x` is not a finite number",
        ),
        (
            "checks = [\"avg(ttft_p99_s) < 1\"]",
            "`avg` in `avg(ttft_p99_s) < 1` is not an aggregate",
        ),
        (
            "checks = [\"idle_s < 1\"]",
            "`idle_s` in `idle_s < 1` is not a summary metric",
        ),
        (
            "checks = [\"backends[5].peak_waiting == 0\"]",
            "this scenario does not report it",
        ),
        ("checks = []", "expect.checks: lists no checks"),
        (
            "seeds = 0\nchecks = [\"idle_while_queued_s < 1\"]",
            "expect.seeds: at least one seed",
        ),
        ("check = [\"idle_while_queued_s < 1\"]", "unknown field `check`"),
    ] {
        let t = with_expect(expect);
        sim()
            .arg("check")
            .arg(t.path().join("s.toml"))
            .arg("--junit")
            .arg(t.path().join("j.xml"))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(needle).and(predicate::str::contains("panicked").not()));
    }
    // The location is the offending line.
    let t = with_expect("checks = [\"idle_while_queued_s <= x\"]");
    let lines = std::fs::read_to_string(t.path().join("s.toml"))
        .unwrap()
        .lines()
        .count();
    sim()
        .arg("check")
        .arg(t.path().join("s.toml"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("s.toml:{lines}:")));
}

#[test]
fn golden_save_and_compare() {
    let t = tempfile::tempdir().unwrap();
    let g = t.path().join("golden");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(t.path().join("r8"))
        .arg("--save-golden")
        .arg(&g)
        .assert()
        .success();
    sim()
        .args([
            "run",
            "scenarios/burst8-fixed.toml",
            "--quiet",
            "--no-files",
            "--save-golden",
        ])
        .arg(&g)
        .assert()
        .success();
    let golden = g.join("burst8.json");
    // The golden file matches the run's summary exactly.
    sim()
        .arg("compare")
        .arg(&golden)
        .arg(t.path().join("r8"))
        .assert()
        .success()
        .stdout(predicate::str::contains("within tolerance"));
    // The fixed policy differs beyond tolerance: exit 1 and the deltas.
    sim()
        .arg("compare")
        .arg(&golden)
        .arg(g.join("burst8-fixed.json"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("idle_while_queued_s").and(predicate::str::contains("BEYOND TOLERANCE")));
    // Tolerances and metric selection.
    sim()
        .arg("compare")
        .arg(&golden)
        .arg(g.join("burst8-fixed.json"))
        .args(["--metric", "idle_while_queued_s", "--rel-tol", "0.99"])
        .assert()
        .success();
    sim()
        .arg("compare")
        .arg(&golden)
        .arg(g.join("burst8-fixed.json"))
        .args(["--metric", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--metric nope: neither side reports it"));
    sim()
        .arg("compare")
        .arg(&golden)
        .arg("Cargo.toml")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("Cargo.toml: not JSON"));
}
