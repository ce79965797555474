//! Whole-or-absent results through the CLI: `run.json`, refusal of mixed folders by
//! `sim explain` and `sim compare`, and single files replaced whole.

use crate::common::{sim, write};
use predicates::prelude::*;

fn one_line_exit_2(out: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{err}");
}

#[test]
fn a_folder_mixing_two_runs_is_refused_by_explain_and_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (dir, seed) in [(&a, "1"), (&b, "2")] {
        sim()
            .args(["run", "scenarios/burst8.toml", "--quiet", "--seed", seed, "--out"])
            .arg(dir)
            .assert()
            .success();
        assert!(dir.join("run.json").is_file());
    }
    // Whole folders compare (exit 0 or 1 by tolerance) ...
    let out = sim().args(["compare"]).arg(&a).arg(&b).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // ... a folder holding a file of another run does not.
    std::fs::copy(b.join("requests.csv"), a.join("requests.csv")).unwrap();
    let out = sim().args(["compare"]).arg(&a).arg(&b).output().unwrap();
    one_line_exit_2(&out, "requests.csv: not the file run");
    let out = sim()
        .args(["compare"])
        .arg(a.join("summary.json"))
        .arg(&b)
        .output()
        .unwrap();
    one_line_exit_2(&out, "mixes runs");
    let out = sim().args(["explain", "--no-counterfactual"]).arg(&a).output().unwrap();
    one_line_exit_2(&out, "mixes runs");
    // A re-run into the folder makes it whole again, with the same run id as before.
    let id_b = std::fs::read_to_string(b.join("run.json")).unwrap();
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--seed", "2", "--out"])
        .arg(&a)
        .assert()
        .success();
    assert_eq!(std::fs::read_to_string(a.join("run.json")).unwrap(), id_b);
    sim()
        .args(["explain", "--no-counterfactual"])
        .arg(&a)
        .assert()
        .success();
    // sim explain's files join the manifest.
    let m = std::fs::read_to_string(a.join("run.json")).unwrap();
    assert!(m.contains("explain.md") && m.contains("explain.json"), "{m}");
    sim().args(["compare"]).arg(&a).arg(&b).assert().success();
    // No staging folder is left behind.
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[test]
fn a_folder_without_run_json_and_a_foreign_folder_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(&a)
        .assert()
        .success();
    std::fs::remove_file(a.join("run.json")).unwrap();
    let out = sim().args(["explain", "--no-counterfactual"]).arg(&a).output().unwrap();
    one_line_exit_2(&out, "no run.json");
    // `--out` on a folder holding other files would replace them: refused.
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    write(&mine, "notes.txt", "keep me");
    let out = sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(&mine)
        .output()
        .unwrap();
    one_line_exit_2(&out, "does not hold a `sim run` result");
    assert_eq!(std::fs::read_to_string(mine.join("notes.txt")).unwrap(), "keep me");
}

#[test]
fn a_failed_trace_convert_leaves_the_previous_output_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.csv");
    sim()
        .args(["trace", "convert", "traces/azure_conv_sample.csv", "--out"])
        .arg(&out)
        .assert()
        .success();
    let before = std::fs::read(&out).unwrap();
    let bad = write(
        tmp.path(),
        "bad.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374,44\n2023-02-29 10:00:00,1,1\n",
    );
    sim()
        .args(["trace", "convert"])
        .arg(&bad)
        .arg("--out")
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad.csv:3: column `TIMESTAMP`"));
    assert_eq!(std::fs::read(&out).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        2,
        "no temporary file left"
    );
}

#[test]
fn committed_run_folders_are_whole() {
    for dir in ["results/burst8", "results/burst8-fixed"] {
        sim().args(["compare", dir, dir]).assert().success();
    }
}
