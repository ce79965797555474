//! `sim` as users call it: exit codes, one-line errors, files written.

use crate::common::{sim, write};
use predicates::prelude::*;

/// Runs `sim ARGS` and asserts a clean input error: exit code 2, `needle` on stderr, no panic.
fn rejects<S: AsRef<std::ffi::OsStr>>(args: &[S], needle: &str) {
    sim()
        .args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(needle).and(predicate::str::contains("panicked").not()));
}

#[test]
fn run_burst8_prints_the_split_and_writes_files() {
    let tmp = tempfile::tempdir().unwrap();
    sim()
        .args(["run", "scenarios/burst8.toml", "--out"])
        .arg(tmp.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "backend-0 0 running + 0 waiting | backend-1 4 running + 4 waiting",
        ))
        .stdout(predicate::str::contains("idle_while_queued_s"));
    for f in [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "decisions.csv",
        "scenario.toml",
        "perf.json",
        "timeseries.svg",
        "timeseries.png",
    ] {
        assert!(tmp.path().join(f).exists(), "{f} missing");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["backends"][1]["peak_waiting"], 4);
    assert!(summary["idle_while_queued_s"].as_f64().unwrap() > 100.0);
}

/// The seed check sets the run beside seeds 2-5 on stdout, warns on a seed-sensitive
/// scenario (burst8-fixed: 120.0 s idle while queued at seed 1, 17.3 s at seed 2) and
/// changes no results file.
#[test]
fn run_checks_its_seed_and_warns_when_the_scenario_is_seed_sensitive() {
    let with = tempfile::tempdir().unwrap();
    sim()
        .args(["run", "scenarios/burst8-fixed.toml", "--out"])
        .arg(with.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("seed check          seed 1 against seeds 2-5 (4 more runs"))
        .stdout(predicate::str::contains(
            "idle_while_queued_s 120.0 s at seed 1; 17.3 / 124.8 / 140.2 / 19.5 s at seeds 2-5: within the other seeds' range",
        ))
        .stdout(predicate::str::contains(
            "warning: seed-sensitive: idle_while_queued_s spans 17.3-140.2 s over seeds 1-5 (120.0 s at seed 1; seeds 2, 5 are on the other side)",
        ))
        .stdout(predicate::str::contains("`--seed 2` shows the other case"));
    let without = tempfile::tempdir().unwrap();
    sim()
        .args(["run", "scenarios/burst8-fixed.toml", "--no-seed-check", "--out"])
        .arg(without.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("seed check").not());
    for f in ["summary.json", "requests.csv", "decisions.csv", "timeseries.csv"] {
        let a = std::fs::read(with.path().join(f)).unwrap();
        assert_eq!(a, std::fs::read(without.path().join(f)).unwrap(), "{f} differs");
    }
    // Another seed is checked against the seeds after it; a steady scenario is not flagged.
    sim()
        .args(["run", "scenarios/burst8.toml", "--no-files", "--seed", "7"])
        .assert()
        .success()
        .stdout(predicate::str::contains("seed 7 against seeds 8-11"))
        .stdout(predicate::str::contains("seed-sensitive").not());
    sim()
        .args(["run", "scenarios/burst8-fixed.toml", "--no-files", "--quiet"])
        .assert()
        .success()
        .stdout(predicate::str::is_empty());
}

#[test]
fn set_overrides_and_no_files() {
    sim()
        .args([
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy.fallback=leastinflight",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("fallback = leastinflight"))
        .stdout(predicate::str::contains("wrote").not());
}

/// kvaware on chat requests only ever takes its fallback; the summary says so, and does not
/// when the same run sends completions.
#[test]
fn run_summary_labels_the_kvaware_fallback() {
    let run = |api: &str| {
        let a = sim()
            .args([
                "run",
                "scenarios/burst8.toml",
                "--no-files",
                "--set",
                "router.policy={kind=\"kvaware\"}",
            ])
            .args(["--set", &format!("workload.groups[0].request_api=\"{api}\"")])
            .args(["--set", &format!("workload.groups[1].request_api=\"{api}\"")])
            .assert()
            .success();
        String::from_utf8_lossy(&a.get_output().stdout).into_owned()
    };
    let chat = run("chat");
    assert!(
        chat.contains("\u{2020} 100.0% of decisions took the kvaware fallback"),
        "{chat}"
    );
    let completions = run("completions");
    assert!(completions.contains("kv_hit"), "{completions}");
    assert!(!completions.contains("100.0% of decisions took"), "{completions}");
}

#[test]
fn bad_key_exits_2_with_file_line_and_path() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/burst8.toml"))
        .unwrap()
        .replace("engine_stats_interval_s = 10", "engine_stats_interval = 10");
    let p = write(tmp.path(), "bad.toml", &text);
    let out = sim().arg("run").arg(&p).arg("--no-files").assert().code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("bad.toml:") && stderr.contains("router.engine_stats_interval"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field"), "{stderr}");
}

#[test]
fn bad_values_and_overrides_exit_2() {
    for (set, needle) in [
        ("backends.count=0", "backends.count: must be an integer >= 1"),
        ("router.engine_stats_interval_s=-1", "router.engine_stats_interval_s"),
        ("backends.kv_blocks=10", "at most 160 tokens"),
        (
            "backends.kv_blocks=1073741824",
            "backends.kv_blocks: too large (at most 1073741823)",
        ),
        ("router.policy.kind=magic", "unknown policy `magic`"),
        ("workload.groups[9].turns=1", "out of range"),
    ] {
        rejects(&["run", "scenarios/burst8.toml", "--no-files", "--set", set], needle);
    }
}

#[test]
fn malformed_toml_and_missing_file_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write(tmp.path(), "broken.toml", "[backends\ncount = 2\n");
    let p = p.to_str().unwrap();
    rejects(&["run", p], "broken.toml:1:");
    rejects(&["run", p], "invalid TOML");
    rejects(&["run", "no/such/file.toml"], "cannot read the scenario");
    sim()
        .args(["run", "scenarios/burst8.toml", "--set", "novalue"])
        .assert()
        .code(2);
}

#[test]
fn bench_reports_throughput() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    sim()
        .args(["bench", "scenarios/burst8.toml", "--runs", "2", "--json"])
        .arg(&json)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("M events/s").and(
                predicate::str::is_match(r"per request \d+ ns, per event \d+\.\d ns, per engine iteration \d+\.\d ns")
                    .unwrap(),
            ),
        );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert_eq!(v["runs"], 2);
    assert!(v["events_per_s"].as_f64().unwrap() > 0.0);
    // The per-unit costs are the median wall time divided by the counts.
    let wall_ns = v["median_wall_s"].as_f64().unwrap() * 1e9;
    for (cost, count) in [
        ("ns_per_request", "requests"),
        ("ns_per_event", "events"),
        ("ns_per_iteration", "iterations"),
    ] {
        let (c, n) = (v[cost].as_f64().unwrap(), v[count].as_u64().unwrap() as f64);
        assert!(
            n > 0.0 && (c * n - wall_ns).abs() <= 1e-6 * wall_ns,
            "{cost} {c} x {count} {n} != {wall_ns} ns"
        );
    }
}

#[test]
fn bench_counts_logical_iterations_in_both_engines() {
    // Requests/s and iterations/s are reported; a coalesced stretch counts every step in
    // it, so both engines report the same iterations, and only the fast one coalesces.
    let tmp = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    for engine in ["fast", "reference"] {
        let json = tmp.path().join(format!("{engine}.json"));
        sim()
            .args([
                "bench",
                "scenarios/burst8.toml",
                "--runs",
                "1",
                "--engine",
                engine,
                "--json",
            ])
            .arg(&json)
            .assert()
            .success()
            .stdout(predicate::str::contains("requests/s").and(predicate::str::contains("M iterations/s")));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
        assert_eq!(v["engine"], engine);
        assert!(v["requests_per_s"].as_f64().unwrap() > 0.0);
        assert!(v["iterations_per_s"].as_f64().unwrap() > 0.0);
        reports.push(v);
    }
    let (fast, reference) = (&reports[0], &reports[1]);
    assert_eq!(fast["iterations"], reference["iterations"]);
    assert_eq!(fast["events"], reference["events"]);
    assert_eq!(reference["coalesced_iterations"], 0);
    let c = fast["coalesced_iterations"].as_u64().unwrap();
    assert!(c > 0 && c < fast["iterations"].as_u64().unwrap(), "{c}");
}

#[test]
fn help_and_version() {
    sim()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("run"));
    sim().arg("--version").assert().success();
    sim().arg("frobnicate").assert().code(2);
}

#[test]
fn extreme_values_are_errors_not_panics() {
    let g = "workload.groups[1]";
    let cases: Vec<(String, &str)> = vec![
        ("workload.groups[0]]=1".into(), "unexpected"),
        ("router.request_stats_window_s=1e-12".into(), "1 ns resolution"),
        (format!("{g}.think_time_s=1e11"), "at most 1e9 s"),
        (
            format!("{g}.think_time_s={{ dist = \"lognormal\", mu = 800, sigma = 1 }}"),
            "at most 1e9 s",
        ),
        (
            format!("{g}.output_tokens={{ dist = \"lognormal\", mu = 800, sigma = 1 }}"),
            "first turn needs",
        ),
        ("backends.step_time.beta0_us=1e25".into(), "between 0 and 1e6"),
        (
            format!("{g}.arrival={{ kind = \"poisson\", rate_per_s = 1e-15 }}"),
            "horizon",
        ),
        (
            format!("{g}.arrival={{ kind = \"interval\", every_s = 1e9 }}"),
            "horizon",
        ),
        // Refused by the memory pre-flight before any draw.
        (
            format!("{g}.turns=4e9"),
            "workload.groups[1].turns: 8 sessions x mean turns 4000000000",
        ),
        ("router.chars_per_token=4000000000".into(), "at most 64"),
    ];
    for (set, needle) in cases {
        rejects(&["run", "scenarios/burst8.toml", "--no-files", "--set", &set], needle);
    }
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/burst8.toml"))
        .unwrap()
        .replace("[router]\n", "[router]\n\"x[0]]\" = 1\n");
    let p = write(tmp.path(), "odd_key.toml", &text);
    rejects(&["run", p.to_str().unwrap(), "--no-files"], "unknown field");
    // Without a KV limit (queueing backends) huge token counts are still bounded.
    let q = write(
        tmp.path(),
        "q.toml",
        "[backends]\ncount = 1\nmodel = \"queueing\"\nslots = 1\n[router.policy]\nkind = \"roundrobin\"\n\
         [[workload.groups]]\nname = \"g\"\nsessions = 1\narrival = { kind = \"burst\", at_s = 0 }\n\
         system_prompt_tokens = 4000000000\ninput_tokens = 1000000000\noutput_tokens = 1\nservice_time_s = 1\n",
    );
    rejects(&["run", q.to_str().unwrap(), "--no-files"], "2^32 - 1");
    sim()
        .args(["run", "scenarios/burst8.toml", "--seed", "9223372036854775808"])
        .assert()
        .code(2);
    sim()
        .args([
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "-q",
            "--seed",
            "9223372036854775807",
        ])
        .assert()
        .success();
}

#[test]
fn policy_parameters_are_validated_and_listed() {
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"power_of_d\", d = 0 }",
        ],
        "router.policy.d: must be an integer >= 1",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"sglang_cache_aware\", cache_threshold = 2 }",
        ],
        "router.policy.cache_threshold: must be in [0, 1]",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"aibrix_preble\", histogram_window_s = -1 }",
        ],
        "router.policy.histogram_window_s: must be a finite number of seconds > 0, got -1",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"aibrix_preble\", target_gpu = \"H100\" }",
        ],
        "router.policy.target_gpu: unknown target GPU `H100`; expected `V100` (upstream default) or `A6000`",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"sglang_cache_aware\", max_tree_size = -5 }",
        ],
        "router.policy.max_tree_size: must be >= 0 characters, got -5",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"llmd\", queue_weigth = 1 }",
        ],
        "unknown field `queue_weigth`",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.policy={ kind = \"nope\" }",
        ],
        "unknown policy `nope`; expected one of roundrobin, session, prefixaware, leastinflight, random",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.replicas=0",
        ],
        "router.replicas: must be an integer >= 1",
    );
    rejects(
        &[
            "run",
            "scenarios/burst8.toml",
            "--no-files",
            "--set",
            "router.front=sticky",
        ],
        "router.front: unknown front balancer `sticky`",
    );
    sim()
        .arg("policies")
        .assert()
        .success()
        .stdout(predicate::str::contains("sglang_cache_aware\n  source:  SGLang"))
        .stdout(predicate::str::contains("balance_abs_threshold = 64"))
        .stdout(predicate::str::contains("every 50 ms"));
}

#[test]
fn fault_tables_are_validated() {
    let cases = [
        (
            "[{ backend = 5, kind = \"zero_stats\" }]",
            "faults[0].backend: backend 5 does not exist",
        ),
        (
            "[{ backend = 0, kind = \"gremlins\" }]",
            "faults[0].kind: unknown fault `gremlins`",
        ),
        (
            "[{ backend = 0, kind = \"extra_lag\" }]",
            "faults[0].lag_s: extra_lag needs `lag_s`",
        ),
        (
            "[{ backend = 0, kind = \"slowdown\", factor = 0 }]",
            "faults[0].factor: must be in (0, 1000]",
        ),
        (
            "[{ backend = 0, kind = \"zero_stats\", factor = 2 }]",
            "faults[0].factor: `factor` applies only to",
        ),
        (
            "[{ backend = 0, kind = \"scrape_fail\", from_s = 10, until_s = 5 }]",
            "faults[0].until_s: must be after from_s",
        ),
    ];
    for (faults, needle) in cases {
        let set = format!("faults={faults}");
        rejects(&["run", "scenarios/burst8.toml", "--no-files", "--set", &set], needle);
    }
}

#[test]
fn fleet_event_and_client_tables_are_validated() {
    let cases = [
        (
            "fleet_events=[{ at_s = 10, backend = 2, kind = \"join\" }]",
            "fleet_events[0].backend: backend 2 does not exist",
        ),
        (
            "fleet_events=[{ at_s = 10, backend = 0, kind = \"reboot\" }]",
            "fleet_events[0].kind",
        ),
        (
            "fleet_events=[{ at_s = 10, backend = 0, kind = \"leave\" }, { at_s = 20, backend = 0, kind = \"leave\" }]",
            "fleet_events[1]: cannot leave backend 0 at 20 s: it is not in the fleet then",
        ),
        ("client.max_retries=-1", "client.max_retries"),
    ];
    for (set, needle) in cases {
        rejects(&["run", "scenarios/burst8.toml", "--no-files", "--set", set], needle);
    }
}

/// `sim run --explain` and `sim explain DIR`: the narrative names backend, branch and the
/// counterfactuals; a folder that is not a run is an input error.
#[test]
fn explain_names_the_cause_and_the_counterfactuals() {
    let tmp = tempfile::tempdir().unwrap();
    sim()
        .args(["run", "scenarios/burst8.toml", "--explain", "--out"])
        .arg(tmp.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("# Why capacity was stranded: burst8 (seed 1)"))
        .stdout(predicate::str::contains("placed on backend-1 by:"))
        .stdout(predicate::str::contains("8 `fallback_qps` decision(s)"))
        .stdout(predicate::str::contains("| fresh signals |"))
        .stdout(predicate::str::contains(
            "least_request (tie = random): 95% less idle-while-queued time",
        ));
    assert!(tmp.path().join("explain.md").exists());
    let out = sim()
        .args(["explain", "--no-counterfactual", "--json"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let x: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(x["episodes"][0]["queued"][0]["backend"], "backend-1");
    assert_eq!(x["episodes"][0]["main_cause"], "qps_window");
    assert_eq!(x["counterfactuals"].as_array().unwrap().len(), 1);
    rejects(
        &[
            "explain",
            tmp.path().to_str().unwrap(),
            "--policy",
            "{ kind = \"nope\" }",
        ],
        "router.policy.kind",
    );
    rejects(
        &["explain", "/nonexistent/run"],
        "not a results folder written by `sim run`",
    );
}
