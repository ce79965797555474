//! Batch-friendly sweeps: build identity recorded in shard and partial files and checked by
//! `sim merge` and `--resume`; per-shard perf files; progress lines when stderr is a file;
//! an honest summary when `--resume` has nothing left to run.

use std::path::Path;

use crate::common::sim;
use predicates::prelude::*;

fn sweep(out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    sim()
        .args(["sweep", "scenarios/burst8.toml", "--seeds", "4", "--no-plots"])
        .arg("--out")
        .arg(out)
        .args(extra)
        .assert()
}

/// The build identity `sim` recorded in a perf file.
fn build_of(perf: &Path) -> String {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(perf).unwrap()).unwrap();
    v["build"].as_str().expect("a build").to_string()
}

/// Replaces the `"build"` line of a sweep file with another build's.
fn forge_build(p: &Path) {
    let text = std::fs::read_to_string(p).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("\"build\":"))
        .expect("a build line");
    let forged = text.replace(line, "  \"build\": \"fleetsim 0.0.9 git 0123456789abcdef\",");
    std::fs::write(p, forged).unwrap();
}

#[test]
fn shards_record_the_build_and_merge_refuses_two_builds() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("s");
    sweep(&out, &["--shard", "0/2", "--quiet"]).success();
    sweep(&out, &["--shard", "1/2", "--quiet"]).success();
    let build = build_of(&out.join("sweep-perf-shard-0-of-2.json"));
    assert!(
        build.starts_with(concat!("fleetsim ", env!("CARGO_PKG_VERSION"), " "))
            && (build.contains(" git ") || build.contains(" sha256 ")),
        "{build}"
    );
    let shard0 = std::fs::read_to_string(out.join("shards/shard-0-of-2.json")).unwrap();
    assert!(shard0.contains(&format!("\"build\": \"{build}\"")), "{shard0}");
    for k in 0..2 {
        let perf: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("sweep-perf-shard-{k}-of-2.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(perf["shard"], serde_json::json!([k, 2]), "one perf file per shard");
        assert_eq!(perf["build"], serde_json::json!(build));
    }
    forge_build(&out.join("shards/shard-1-of-2.json"));
    let a = sim()
        .arg("merge")
        .arg(out.join("shards/shard-0-of-2.json"))
        .arg(out.join("shards/shard-1-of-2.json"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "shard-1-of-2.json was written by `fleetsim 0.0.9 git 0123456789abcdef`",
        ));
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!out.join("sweep.csv").exists(), "nothing merged");
}

#[test]
fn resume_refuses_a_partial_file_of_another_build() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("s");
    sweep(&out, &["--quiet"]).success();
    let full = std::fs::read_to_string(out.join("sweep.json")).unwrap();
    assert!(
        !full.contains("\"build\""),
        "a complete sweep.json stays build-independent"
    );
    // Make it an interrupted file of another build: two rows and no `complete`.
    let mut f = fleetsim::sweep::table::read(&out.join("sweep.json")).unwrap();
    f.rows.truncate(2);
    f.complete = false;
    f.build = Some("fleetsim 0.0.9 git 0123456789abcdef".into());
    std::fs::write(out.join("sweep.json"), f.to_bytes().unwrap()).unwrap();
    sweep(&out, &["--resume", "--quiet"])
        .code(2)
        .stderr(predicate::str::contains(
            "was written by `fleetsim 0.0.9 git 0123456789abcdef`",
        ));
    // The same build resumes.
    f.build = Some(build_of(&out.join("sweep-perf.json")));
    std::fs::write(out.join("sweep.json"), f.to_bytes().unwrap()).unwrap();
    sweep(&out, &["--resume"])
        .success()
        .stderr(predicate::str::contains("resuming: 2 of 4 runs").and(predicate::str::contains("2 runs in")));
    assert_eq!(std::fs::read_to_string(out.join("sweep.json")).unwrap(), full);
}

#[test]
fn resume_of_a_finished_sweep_reports_no_rate() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("s");
    sweep(&out, &["--quiet"]).success();
    sweep(&out, &["--resume"]).success().stderr(
        predicate::str::contains("nothing to run: all 4 runs were already done")
            .and(predicate::str::contains("events/s").not()),
    );
    let perf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep-perf.json")).unwrap()).unwrap();
    assert_eq!((perf["runs"].as_u64(), perf["events"].as_u64()), (Some(0), Some(0)));
}

#[test]
fn progress_lines_go_to_a_log_file() {
    let t = tempfile::tempdir().unwrap();
    // stderr is a pipe here, as in a batch job's log.
    let a = sweep(&t.path().join("s"), &["--jobs", "1", "--progress-every-s", "0"]).success();
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("sweep: ")).collect();
    assert_eq!(lines.len(), 4, "one line per run at a 0 s interval: {err}");
    assert!(
        lines[0].starts_with("sweep: 1/4 runs (25%), ") && lines[3].starts_with("sweep: 4/4 runs (100%), "),
        "{err}"
    );
    assert!(lines.iter().all(|l| l.contains(" elapsed, ETA ")), "{err}");
    sweep(&t.path().join("s"), &["--progress-every-s=-1"])
        .code(2)
        .stderr(predicate::str::contains("--progress-every-s"));
}
