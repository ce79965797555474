//! Agent-session traces end to end: happens-before pacing on hand-computed arrivals, the
//! round trip of a run's own requests, and bad input from the new readers.

use crate::common::{sim, write};
use fleetsim::sim::{RunOptions, run};
use fleetsim::time::SimTime;
use predicates::prelude::*;

/// One queueing backend with two slots, 2 s per request, no network latency.
fn scenario(trace: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
[backends]
count = 1
model = "queueing"
slots = 2
[network]
dispatch_latency_s = 0
response_latency_s = 0
[router.policy]
kind = "roundrobin"
[[workload.traces]]
file = "{}"
mode = "closed"
service_time_s = 2.0
{extra}
"#,
        trace.display()
    )
}

type Times = Vec<(u32, u32, f64, Option<f64>)>;

/// `sim run SCENARIO --no-files`.
fn sim_run(scenario: &std::path::Path) -> assert_cmd::assert::Assert {
    sim().arg("run").arg(scenario).arg("--no-files").assert()
}

fn run_times(text: &str) -> (Times, fleetsim::metrics::Summary) {
    let (sc, w, _) = fleetsim::scenario::load_str(text, "t.toml", "t", &[]).unwrap();
    let (res, _) = run(sc.sim, &w, RunOptions::summary_only()).unwrap();
    let s = |t: SimTime| t.0 as f64 / 1e9;
    let t = res
        .requests
        .iter()
        .map(|r| (r.session.0, r.turn, s(r.t_router), r.t_done.map(s)))
        .collect();
    (t, res.summary)
}

const COLUMNS: &str =
    r#"columns = { session = "s", start_s = "start", end_s = "end", input_tokens = "in", output_tokens = "out" }"#;

#[test]
fn happens_before_pacing_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    // Session a: a0 0..3; a1 starts 4 (1 s after a0 ended); a2 starts 5 while a1 runs (it
    // waits for a0 too, gap 2); a3 starts 12 after a1 (ended 10) and a2 (ended 11): it waits
    // for a2, gap 1. Session b: b1 starts while b0 runs (a root at offset 1).
    let tr = write(
        tmp.path(),
        "calls.csv",
        "s,start,end,in,out\na,0,3,10,5\na,4,10,20,5\na,5,11,20,5\na,12,13,40,5\nb,20,25,10,5\nb,21,22,10,5\n",
    );
    let (t, summary) = run_times(&scenario(&tr, COLUMNS));
    // Simulated (service 2 s, 2 slots): a0 0-2; a1 at 2 + 1 = 3, done 5; a2 at 2 + 2 = 4
    // (the second slot), done 6; a3 at 6 + 1 = 7, done 9; b0 20-22 and b1 21-23 overlap.
    assert_eq!(
        t,
        vec![
            (0, 0, 0.0, Some(2.0)),
            (0, 1, 3.0, Some(5.0)),
            (0, 2, 4.0, Some(6.0)),
            (0, 3, 7.0, Some(9.0)),
            (1, 0, 20.0, Some(22.0)),
            (1, 1, 21.0, Some(23.0)),
        ]
    );
    let r = summary.replay.expect("a replay block");
    assert_eq!(r.pacing.after_recorded_end, 3);
    assert_eq!(r.pacing.at_session_offset, 3);
    assert_eq!(r.pacing.arrival_gap_fallback, 0);
    assert_eq!(r.pacing.overlapping, 2);
    let f = r.fidelity.expect("recorded latency");
    assert_eq!(f.calls, 6);
    // Recorded e2e 3, 6, 6, 1, 5, 1 s; simulated 2 s each.
    assert_eq!(f.recorded_e2e_s.max, 6.0);
    assert_eq!(f.simulated_e2e_s.p50, 2.0);
    // Time scale 0.5 halves gaps and offsets, not service: a3 at 5 (a2 done) + 0.5.
    let (t, _) = run_times(&scenario(&tr, &format!("{COLUMNS}\ntime_scale = 0.5")));
    let sent: Vec<f64> = t.iter().map(|x| x.2).collect();
    assert_eq!(sent, vec![0.0, 2.5, 3.0, 5.5, 10.0, 10.5]);
}

#[test]
fn think_time_offsets_and_the_arrival_gap_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    // Offsets within sessions, think times, sessions placed every 100 s.
    let tr = write(
        tmp.path(),
        "think.jsonl",
        "{\"s\": \"a\", \"o\": 0, \"in\": 10, \"out\": 5}\n{\"s\": \"a\", \"o\": 9, \"th\": 1.5, \"in\": 20, \"out\": 5}\n{\"s\": \"b\", \"o\": 0, \"in\": 10, \"out\": 5}\n",
    );
    let cols = r#"columns = { session = "s", offset_s = "o", think_s = "th", input_tokens = "in", output_tokens = "out" }
session_arrival = { kind = "interval", start_s = 0, every_s = 100 }"#;
    let (t, summary) = run_times(&scenario(&tr, cols));
    assert_eq!(
        t,
        vec![
            (0, 0, 0.0, Some(2.0)),
            (0, 1, 3.5, Some(5.5)),
            (1, 0, 100.0, Some(102.0))
        ]
    );
    assert_eq!(summary.replay.unwrap().pacing.after_think_time, 1);
    // Without ends or think times: the arrival gap after completion, counted.
    let tr = write(tmp.path(), "starts.csv", "s,start,in,out\na,0,10,5\na,1,20,5\n");
    let cols = r#"columns = { session = "s", start_s = "start", input_tokens = "in", output_tokens = "out" }"#;
    let (t, summary) = run_times(&scenario(&tr, cols));
    assert_eq!(t, vec![(0, 0, 0.0, Some(2.0)), (0, 1, 3.0, Some(5.0))]);
    assert_eq!(summary.replay.unwrap().pacing.arrival_gap_fallback, 1);
    // A trace of offsets needs session_arrival: exit 2 naming the key.
    let tr = write(tmp.path(), "off.csv", "s,o,in,out\na,0,10,5\n");
    let sc = write(
        tmp.path(),
        "off.toml",
        &scenario(
            &tr,
            r#"columns = { session = "s", offset_s = "o", input_tokens = "in", output_tokens = "out" }"#,
        ),
    );
    sim_run(&sc)
        .code(2)
        .stderr(predicate::str::contains("workload.traces[0]").and(predicate::str::contains("session_arrival")));
}

#[test]
fn replaying_a_runs_own_requests_reproduces_every_arrival() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(&run_dir)
        .assert()
        .success();
    let calls = tmp.path().join("calls.csv");
    sim()
        .args(["trace", "convert", "--from-run"])
        .arg(&run_dir)
        .arg("--out")
        .arg(&calls)
        .assert()
        .success()
        .stderr(predicate::str::contains("wrote 200 calls"));
    let replay_dir = tmp.path().join("replay");
    sim()
        .arg("run")
        .arg(tmp.path().join("calls.toml"))
        .args(["--quiet", "--out"])
        .arg(&replay_dir)
        .assert()
        .success();
    // Every request's (arrival, completion, turn, backend, cached tokens) in arrival order.
    let rows = |dir: &std::path::Path| -> Vec<Vec<String>> {
        let mut r = csv::Reader::from_path(dir.join("requests.csv")).unwrap();
        let h = r.headers().unwrap().clone();
        let idx: Vec<usize> = ["t_router_s", "t_done_s", "turn", "backend", "cached_tokens"]
            .iter()
            .map(|c| h.iter().position(|x| x == *c).unwrap())
            .collect();
        r.records()
            .map(|rec| {
                let rec = rec.unwrap();
                idx.iter().map(|&i| rec[i].to_string()).collect()
            })
            .collect()
    };
    let (a, b) = (rows(&run_dir), rows(&replay_dir));
    assert_eq!(a.len(), 200);
    assert_eq!(a, b);
}

#[test]
fn bad_agent_input_is_one_line_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    // A truncated gzip stream.
    let gz = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/traces/dynamo_pi_agent_request_trace.jsonl.gz"
    ))
    .unwrap();
    let cut = tmp.path().join("cut.jsonl.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let out = sim().args(["trace", "inspect"]).arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cut.jsonl.gz:") && err.contains("corrupt or truncated"),
        "{err}"
    );
    // A malformed OTel span names the line and the span's key path.
    let otel = write(
        tmp.path(),
        "o.jsonl",
        "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"t\",\"startTimeUnixNano\":\"1\",\"endTimeUnixNano\":\"soon\",\"attributes\":[]}]}]}]}\n",
    );
    sim()
        .args(["trace", "inspect"])
        .arg(&otel)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "o.jsonl:1: column `resourceSpans[0].scopeSpans[0].spans[0].endTimeUnixNano`",
        ));
    // A sessions CSV row shorter than its header: an error, or counted with skip_bad_rows.
    let tr = write(tmp.path(), "short.csv", "s,start,end,in,out\na,0,3,10,5\na,4,10\n");
    let sc = write(tmp.path(), "short.toml", &scenario(&tr, COLUMNS));
    sim_run(&sc)
        .code(2)
        .stderr(predicate::str::contains("workload.traces[0].file").and(predicate::str::contains("short.csv:3")));
    let sc = write(
        tmp.path(),
        "skip.toml",
        &scenario(&tr, &format!("{COLUMNS}\nskip_bad_rows = true")),
    );
    sim_run(&sc)
        .success()
        .stderr(predicate::str::contains("skipped 1 malformed rows"));
    // An unknown mapped key names its key path.
    let sc = write(
        tmp.path(),
        "key.toml",
        &scenario(
            &tr,
            r#"columns = { session = "s", begin = "start", input_tokens = "in", output_tokens = "out" }"#,
        ),
    );
    sim_run(&sc)
        .code(2)
        .stderr(predicate::str::contains("workload.traces[0].columns.begin"));
}

#[test]
fn inspect_and_bench_the_shipped_agent_samples() {
    let out = sim()
        .args([
            "trace",
            "inspect",
            "--json",
            "traces/dynamo_pi_agent_request_trace.jsonl.gz",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "dynamo");
    assert_eq!(v["requests"], 17);
    assert_eq!(v["agent"]["sessions"], 5);
    assert_eq!(v["agent"]["calls_per_session"]["max"], 6);
    assert_eq!(v["prefix"]["block_tokens"], 16);
    let out = sim()
        .args(["trace", "inspect", "--json", "traces/otel_agent_sample.jsonl"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "otel");
    assert_eq!(v["requests"], 43);
    assert_eq!(v["agent"]["sessions"], 6);
    assert_eq!(v["agent"]["overlapping_calls"], 8);
    sim()
        .args(["trace", "bench", "--runs", "1", "traces/otel_agent_sample.jsonl"])
        .assert()
        .success()
        .stdout(predicate::str::contains("43 rows"));
}

/// The SWE-like agent sample behind production-stack's prefix-aware router (threshold 0),
/// with `extra` keys on its trace table.
fn swe_behind_prefixaware(extra: &str, seed: u64) -> fleetsim::metrics::Summary {
    let (s, w) = swe_workload(extra, seed);
    crate::common::run_full(&s, &w).summary
}

#[test]
fn a_shared_prefix_every_call_repeats_piles_every_session_onto_one_backend() {
    for seed in 1..=3 {
        // Lengths only: every session's prompt is its own, spread over both backends.
        let own = swe_behind_prefixaware("", seed);
        assert!(own.request_share_max < 0.75, "seed {seed}: {}", own.request_share_max);
        assert_eq!(own.backends_never_served, 0);
        // The part every call repeats (system prompt and tool definitions) as a shared
        // prefix: the trie's first owner takes all 559 calls.
        let shared = swe_behind_prefixaware("shared_prefix_tokens = 3000", seed);
        assert_eq!(shared.requests.finished, 559);
        assert_eq!(shared.request_share_max, 1.0, "seed {seed}");
        assert_eq!(shared.backends_never_served, 1);
    }
}

#[test]
fn trace_inspect_names_models_and_what_lengths_cannot_say() {
    let swe = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/swe_agent_sample.csv");
    sim()
        .args(["trace", "inspect", swe, "--skip-bad-rows", "--columns"])
        .arg("session=session_id,turn=step,start_unix_s=start_unix_s,latency_s=latency_s,input_tokens=prompt_tokens,output_tokens=completion_tokens")
        .assert()
        .success()
        .stdout(predicate::str::contains("lengths only").and(predicate::str::contains("shared_prefix_tokens")));
    let dynamo = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/traces/dynamo_pi_agent_request_trace.jsonl.gz"
    );
    sim()
        .args(["trace", "inspect", dynamo])
        .assert()
        .success()
        .stdout(predicate::str::contains("model `Qwen/Qwen3-14B-FP8`").and(predicate::str::contains("17 calls")));
}

/// Requests per backend of a run of `(s, w)`.
fn per_backend(s: &fleetsim::scenario::Scenario, w: &fleetsim::workload::Workload) -> Vec<u64> {
    let res = crate::common::run_full(s, w);
    res.summary.backends.iter().map(|b| b.requests).collect()
}

#[test]
fn a_recorded_shared_part_piles_each_harness_onto_one_backend() {
    use fleetsim::workload::Sharing;
    // scenarios/trace-swe-tools.toml maps the sample's `tool_definitions_chars` (11,236
    // characters on 28 sessions, 6,918 on 2): each harness's tool definitions are one
    // prefix shared across sessions, and the trie's first owner takes every call of it.
    let recorded = [[559, 0], [38, 521], [559, 0]];
    // The same calls, lengths only (the column unmapped): spread over both backends.
    let lengths = [[305, 254], [150, 409], [335, 224]];
    for seed in 1..=3u64 {
        let sd = seed.to_string();
        let (s, w) = crate::common::shipped("trace-swe-tools.toml", &[("seed", sd.as_str())]);
        assert_eq!(w.traces[0].sharing, Sharing::RecordedPart);
        assert_eq!(per_backend(&s, &w), recorded[seed as usize - 1], "seed {seed}");
        assert!(fleetsim::hints::trace_hints(&w.traces, 1.0).is_empty());
    }
    for seed in 1..=3u64 {
        let (s, w) = swe_workload("", seed);
        assert_eq!(w.traces[0].sharing, Sharing::LengthsOnly);
        assert_eq!(per_backend(&s, &w), lengths[seed as usize - 1], "seed {seed}");
        let h = fleetsim::hints::trace_hints(&w.traces, 1.0);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].kind, "lengths-only");
        assert!(h[0].message.contains("shared_prefix_tokens = N"), "{}", h[0].message);
        // Modelled on the table: no hint.
        let (_, w) = swe_workload("shared_prefix_tokens = 3000", seed);
        assert_eq!(w.traces[0].sharing, Sharing::Configured);
        assert!(fleetsim::hints::trace_hints(&w.traces, 1.0).is_empty());
    }
}

/// The run's answer names the cause: every session followed the trie to the backend that
/// cached the harness's tool definitions first (a trie monopoly at threshold 0), not a few
/// long sessions; on two backends, where "twice the fair share" is every session.
#[test]
fn the_recorded_shared_part_is_named_as_a_trie_monopoly() {
    let o = sim()
        .args(["run", "scenarios/trace-swe-tools.toml", "--no-files", "--no-seed-check"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let hint = out
        .lines()
        .find(|l| l.starts_with("hint [never-served]"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(hint.contains("cause (trie-monopoly)"), "{hint}");
    assert!(hint.contains("router.policy.prefix_min_match_length="), "{hint}");
    assert!(!hint.contains("long-session") && !hint.contains("-0.0"), "{hint}");
}

/// The SWE-like sample behind production-stack's prefix-aware router, lengths only, with
/// `extra` keys on its trace table (`max_idle_gap_s = 60` unless `extra` says `idle`).
fn swe_workload(extra: &str, seed: u64) -> (fleetsim::scenario::Scenario, fleetsim::workload::Workload) {
    let gap = if extra == "idle" { "" } else { "max_idle_gap_s = 60" };
    let extra = if extra == "idle" { "" } else { extra };
    let text = format!(
        r#"
name = "swe-prefixaware"
[backends]
count = 2
[router.policy]
kind = "prefixaware"
[[workload.traces]]
name = "swe"
file = "{}/traces/swe_agent_sample.csv"
mode = "closed"
columns = {{ session = "session_id", turn = "step", start_unix_s = "start_unix_s", latency_s = "latency_s", input_tokens = "prompt_tokens", output_tokens = "completion_tokens" }}
where = {{ is_error = false }}
{gap}
{extra}
"#,
        env!("CARGO_MANIFEST_DIR")
    );
    let seed = seed.to_string();
    crate::common::inline(&text, &[("seed", seed.as_str())])
}

#[test]
fn a_mostly_idle_trace_is_hinted_with_the_key_that_compresses_it() {
    let (_, w) = swe_workload("idle", 1);
    let idle = &w.traces[0].idle;
    // 22 spans of 10 min or more with nothing in flight: 4.0 of the sample's 4.1 days.
    assert_eq!(idle.gaps, 22);
    assert!((idle.share() - 0.972).abs() < 0.001, "{}", idle.share());
    let h = fleetsim::hints::trace_hints(&w.traces, 1.0);
    let i = h.iter().find(|h| h.kind == "idle-trace").expect("idle hint");
    assert!(
        i.message.contains("97.2 % idle") && i.message.contains("max_idle_gap_s = 60"),
        "{}",
        i.message
    );
    // Compressed: no hint.
    let (_, w) = swe_workload("", 1);
    assert!(w.traces[0].idle_compressed);
    assert!(
        !fleetsim::hints::trace_hints(&w.traces, 1.0)
            .iter()
            .any(|h| h.kind == "idle-trace")
    );
}

#[test]
fn trace_model_names_are_mapped_or_named_as_unmapped() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = write(
        tmp.path(),
        "m.csv",
        "conv,ts,dur,in,out,model\na,0,2,3000,100,deepseek-ai/DeepSeek-V3\na,5,2,3300,100,deepseek-ai/DeepSeek-V3\nc,2,2,1000,50,Qwen/Qwen3-14B\n",
    );
    let table = format!(
        "[[workload.traces]]\nname = \"t\"\nfile = \"{}\"\nmode = \"closed\"\ncolumns = {{ session = \"conv\", start_s = \"ts\", latency_s = \"dur\", input_tokens = \"in\", output_tokens = \"out\", model = \"model\" }}\nshared_prefix_tokens = 500\n[router.policy]\nkind = \"roundrobin\"\n",
        trace.display()
    );
    // Before: no profile, so both models would run as the default engine; each is named.
    let p = write(
        tmp.path(),
        "a.toml",
        &format!("name = \"a\"\n[backends]\ncount = 2\n{table}"),
    );
    sim_run(&p)
        .success()
        .stderr(predicate::str::contains(
            "warning: trace t: model `deepseek-ai/DeepSeek-V3` (2 calls) is unmapped (no shipped shape",
        ))
        .stderr(predicate::str::contains(
            "model `Qwen/Qwen3-14B` (1 call) is the shape qwen3-14b but its calls are simulated as the default engine",
        ))
        .stdout(predicate::str::contains(
            "hint [model-unmapped] trace t: model `deepseek-ai/DeepSeek-V3`",
        ));
    // After: each model served by a group that models it; `profile = "auto"` takes the
    // model from the one name the group serves. A measured (file:) profile is the user's
    // word; here the DeepSeek group has none, so it alone is named.
    let fleet = "[[backends.groups]]\nname = \"qwen\"\ncount = 1\nprofile = \"auto\"\ngpu = \"H100\"\nserves = [\"Qwen/Qwen3-14B\"]\n[[backends.groups]]\nname = \"ds\"\ncount = 1\nserves = [\"deepseek-ai/DeepSeek-V3\"]\n";
    let p = write(tmp.path(), "b.toml", &format!("name = \"b\"\n{fleet}{table}"));
    sim_run(&p)
        .success()
        .stdout(predicate::str::contains("qwen3-14b/h100/tp1"))
        .stderr(predicate::str::contains(
            "model `deepseek-ai/DeepSeek-V3` (2 calls) is unmapped",
        ))
        .stderr(predicate::str::contains("Qwen/Qwen3-14B` (1 call) is the shape").not());
}

#[test]
fn trace_inspect_reports_a_recorded_shared_part_and_idle_spans() {
    let swe = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/swe_agent_sample.csv");
    sim()
        .args(["trace", "inspect", swe, "--skip-bad-rows", "--columns"])
        .arg("session=session_id,turn=step,start_unix_s=start_unix_s,latency_s=latency_s,input_tokens=prompt_tokens,output_tokens=completion_tokens,shared_prefix_chars=tool_definitions_chars")
        .assert()
        .success()
        .stdout(
            predicate::str::contains("recorded (columns.shared_prefix_chars): 559 of 559 calls")
                .and(predicate::str::contains("the most common 11236 characters on 521 calls"))
                .and(predicate::str::contains("lengths only").not())
                .and(predicate::str::contains(
                    "97.2 % of the span: 22 spans of 10 min or more with no call in flight",
                ))
                .and(predicate::str::contains("max_idle_gap_s = 60")),
        );
}
