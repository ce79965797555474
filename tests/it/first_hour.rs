//! What a new user meets in the first hour: shell completions, did-you-mean for policy
//! names and keys, every trace format in `--help`, and runs without per-decision files.

use crate::common::*;
use predicates::prelude::*;

#[test]
fn completions_for_each_shell() {
    for (shell, mark) in [("bash", "_sim()"), ("zsh", "#compdef sim"), ("fish", "complete -c sim")] {
        sim()
            .args(["completions", shell])
            .assert()
            .success()
            .stdout(predicate::str::contains(mark).and(predicate::str::contains("tune")));
    }
    sim().args(["completions", "tcsh"]).assert().code(2);
}

#[test]
fn policy_names_and_keys_get_a_did_you_mean() {
    let tmp = tempfile::tempdir().unwrap();
    for (kind, meant) in [
        ("least-request", "least_request"),
        ("prefixaware+qps", "prefixaware"),
        ("sglang-cache", "sglang_cache_aware"),
        ("lb-kvaware", "load_balanced_kvaware"),
    ] {
        let f = write(
            tmp.path(),
            "s.toml",
            &std::fs::read_to_string("scenarios/first.toml").unwrap().replace(
                "router.policy.kind = \"prefixaware\"",
                &format!("router.policy.kind = \"{kind}\""),
            ),
        );
        sim()
            .args(["run", "--no-files"])
            .arg(&f)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("did you mean `{meant}`?")))
            .stderr(predicate::function(|s: &str| s.trim_end().lines().count() == 1));
    }
    let f = write(
        tmp.path(),
        "k.toml",
        &std::fs::read_to_string("scenarios/first.toml")
            .unwrap()
            .replace("max_num_seqs = 8", "max_num_seq = 8"),
    );
    sim()
        .args(["run", "--no-files"])
        .arg(&f)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("did you mean `max_num_seqs`?"));
}

#[test]
fn trace_help_lists_every_format() {
    let out = sim().args(["trace", "--help"]).assert().success();
    let help = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    for f in [
        "native",
        "Mooncake",
        "Azure",
        "BurstGPT",
        "Dynamo",
        "OpenTelemetry",
        "sessions",
    ] {
        assert!(help.contains(f), "{f} missing from `sim trace --help`:\n{help}");
    }
}

#[test]
fn no_decisions_leaves_out_the_per_decision_files_and_explain_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--no-decisions", "--out"])
        .arg(&dir)
        .assert()
        .success();
    assert!(!dir.join("decisions.csv").exists() && !dir.join("decisions_long.csv").exists());
    assert!(dir.join("requests.csv").exists() && dir.join("summary.json").exists());
    sim()
        .arg("explain")
        .arg(&dir)
        .assert()
        .success()
        .stderr(predicate::str::contains("has no decision files"))
        .stdout(predicate::str::contains("Why capacity was stranded"));
}

#[test]
fn progress_goes_to_stderr_only() {
    let plain = sim()
        .args(["run", "scenarios/burst8.toml", "--no-files"])
        .assert()
        .success();
    let with = sim()
        .args(["run", "scenarios/burst8.toml", "--no-files", "--progress"])
        .assert()
        .success()
        .stderr(predicate::str::contains("simulating burst8 (9 sessions planned)"));
    // stdout differs only in the wall-clock line.
    let strip = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .filter(|l| !l.contains("wall"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&plain.get_output().stdout), strip(&with.get_output().stdout));
}
