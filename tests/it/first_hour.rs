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

/// Three mistakes whose checks run in another order than the file's (the unknown key at the
/// end is found first, by the file's structure; the refused values after it, by their
/// sections): every one is reported, one line each, in file order, exit 2.
const THREE_MISTAKES: &str = r#"name = "three"

[network]
dispatch_latency_s = -1

[backends]
count = 2

[router.policy]
kind = "least-request"

[[workload.groups]]
name = "chat"
sessions = 4
arrival = { kind = "burst", at_s = 0 }
turns = 2
input_tokens = 100
output_tokens = 10
think_tme_s = 1
"#;

#[test]
fn every_error_of_a_file_in_file_order() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write(tmp.path(), "three.toml", THREE_MISTAKES);
    let file = f.display().to_string();
    for args in [vec!["run", "--no-files"], vec!["check"]] {
        let out = sim().args(&args).arg(&f).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3, "{args:?}: {err}");
        for (line, (at, path, says)) in lines.iter().zip([
            ("4:1", "network.dispatch_latency_s", "got -1"),
            ("10:1", "router.policy.kind", "did you mean `least_request`?"),
            ("19:1", "workload.groups[0].think_tme_s", "did you mean `think_time_s`?"),
        ]) {
            assert!(
                line.starts_with(&format!("error: {file}:{at}: {path}: ")) && line.contains(says),
                "{args:?}: {line}"
            );
        }
    }
    // A --set value has no line: its error comes after the file's.
    sim()
        .args(["run", "--no-files", "--set", "router.replicas=0"])
        .arg(&f)
        .assert()
        .code(2)
        .stderr(predicate::function(|s: &str| {
            let l: Vec<&str> = s.lines().collect();
            l.len() == 4 && l[3].contains("router.replicas") && l[3].ends_with("(value from --set)")
        }));
}

/// Mistakes in the scenario, in `[expect]` and in `[sweep]`, several in each table.
const TOOL_MISTAKES: &str = r#"[network]
dispatch_latency_s = -1

[backends]
count = 2

[router.policy]
kind = "roundrobin"

[[workload.groups]]
name = "chat"
sessions = 4
arrival = { kind = "burst", at_s = 0 }
turns = 2
input_tokens = 100
output_tokens = 10

[expect]
seeds = 0
checks = [
  "mean(idle_while_queued_s) >= 0",
  "mean(no_such_metric) >= 1",
  "max(ttft_p99_s) <<< 3",
]

[sweep]
metrics = ["ttft_p99_s", "nope_s"]
sedes = 3

[[sweep.axis]]
path = "router.policy.kind"
"#;

#[test]
fn errors_of_expect_and_sweep_come_with_the_files_others_in_file_order() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write(tmp.path(), "tools.toml", TOOL_MISTAKES);
    let file = f.display().to_string();
    for args in [vec!["run", "--no-files"], vec!["check"], vec!["sweep", "--list"]] {
        let out = sim().args(&args).arg(&f).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<&str> = err.lines().collect();
        let want = [
            ("2:1", "network.dispatch_latency_s", "got -1"),
            ("19:1", "expect.seeds", "at least one seed"),
            ("22:3", "expect.checks[1]", "`no_such_metric`"),
            ("23:3", "expect.checks[2]", "is not a finite number"),
            ("27:1", "sweep.metrics", "`nope_s` is not a summary metric"),
            ("28:1", "sweep.sedes", "did you mean `seeds`?"),
            ("30:1", "sweep.axis[0]", "an axis is `path` with `values`"),
        ];
        assert_eq!(lines.len(), want.len(), "{args:?}: {err}");
        for (line, (at, path, says)) in lines.iter().zip(want) {
            assert!(
                line.starts_with(&format!("error: {file}:{at}: {path}: ")) && line.contains(says),
                "{args:?}: {line}"
            );
        }
    }
    // A required table missing (it has no line, so it comes last) is named once, however
    // many rounds the other errors take.
    let f = write(
        tmp.path(),
        "nopolicy.toml",
        &TOOL_MISTAKES.replace("[router.policy]\nkind = \"roundrobin\"\n", ""),
    );
    let out = sim().args(["run", "--no-files"]).arg(&f).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 8, "{err}");
    assert!(
        lines[7].starts_with(&format!("error: {}: router.policy: missing", f.display())),
        "{err}"
    );
}

#[test]
fn a_file_with_many_errors_shows_the_first_twenty() {
    let tmp = tempfile::tempdir().unwrap();
    let keys: String = (0..25).map(|i| format!("no_such_key_{i:02} = 1\n")).collect();
    let text = std::fs::read_to_string("scenarios/first.toml").unwrap().replacen(
        "[backends]",
        &format!("[network]\n{keys}\n[backends]"),
        1,
    );
    let f = write(tmp.path(), "many.toml", &text);
    let out = sim().args(["run", "--no-files"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 21, "{err}");
    for (i, l) in lines[..20].iter().enumerate() {
        assert!(l.contains(&format!("network.no_such_key_{i:02}: unknown field")), "{l}");
    }
    assert_eq!(lines[20], format!("error: and 5 more errors in {}", f.display()));
}
