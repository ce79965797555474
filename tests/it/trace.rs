//! Trace replay end to end: open- vs closed-loop timing on a hand-made trace, retries, and
//! `sim trace` / `sim run` as users call them.

use crate::common::{sim, write};
use fleetsim::sim::{RunOptions, run};
use fleetsim::time::SimTime;
use predicates::prelude::*;

const TINY: &str = "arrival_s,session_id,turn,input_tokens,output_tokens\n0,a,0,10,5\n1,a,1,20,5\n1.5,b,0,10,5\n";

/// One queueing backend, one slot, 2 s per request, no network latency.
fn scenario(trace: &std::path::Path, mode: &str, extra: &str) -> String {
    format!(
        r#"
[backends]
count = 1
model = "queueing"
slots = 1
[network]
dispatch_latency_s = 0
response_latency_s = 0
[router.policy]
kind = "roundrobin"
[[workload.traces]]
file = "{}"
mode = "{mode}"
service_time_s = 2.0
{extra}
"#,
        trace.display()
    )
}

fn times(text: &str) -> Vec<(u32, u32, f64, Option<f64>)> {
    let (sc, w, _) = fleetsim::scenario::load_str(text, "t.toml", "t", &[]).unwrap();
    let (res, _) = run(sc.sim, &w, RunOptions::summary_only()).unwrap();
    let s = |t: SimTime| t.0 as f64 / 1e9;
    res.requests
        .iter()
        .map(|r| (r.session.0, r.turn, s(r.t_router), r.t_done.map(s)))
        .collect()
}

#[test]
fn open_loop_sends_at_trace_times() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tiny.csv", TINY);
    // a0 at 0 (served 0-2), a1 at 1 (queued, 2-4), b0 at 1.5 (4-6): nothing waits for a reply.
    assert_eq!(
        times(&scenario(&tr, "open", "")),
        vec![(0, 0, 0.0, Some(2.0)), (0, 1, 1.0, Some(4.0)), (1, 0, 1.5, Some(6.0))]
    );
}

#[test]
fn closed_loop_waits_for_the_previous_turn_plus_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tiny.csv", TINY);
    // a0 at 0 done at 2; b0 at 1.5 served 2-4; a1 at 2 + 1 (recorded gap) = 3, served 4-6.
    assert_eq!(
        times(&scenario(&tr, "closed", "")),
        vec![(0, 0, 0.0, Some(2.0)), (1, 0, 1.5, Some(4.0)), (0, 1, 3.0, Some(6.0))]
    );
    // Scaled by 2 and offset by 10 s: b0 at 10 + 2 x 1.5; a1 follows a0's completion by
    // 2 x 1 s (service times are not scaled).
    assert_eq!(
        times(&scenario(&tr, "closed", "time_scale = 2.0\nat_s = 10")),
        vec![
            (0, 0, 10.0, Some(12.0)),
            (1, 0, 13.0, Some(15.0)),
            (0, 1, 14.0, Some(17.0))
        ]
    );
}

#[test]
fn a_turn_given_up_drops_only_itself_in_open_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tiny.csv", TINY);
    // The backend restarts at 0.2 s (back at 0.5 s): a0 fails and is not retried.
    let extra =
        "[client]\nmax_retries = 0\n[[fleet_events]]\nat_s = 0.2\nbackend = 0\nkind = \"restart\"\ndowntime_s = 0.3\n";
    let done = |mode| {
        times(&scenario(&tr, mode, extra))
            .into_iter()
            .filter(|r| r.3.is_some())
            .map(|r| (r.0, r.1))
            .collect::<Vec<_>>()
    };
    assert_eq!(done("open"), vec![(0, 1), (1, 0)]);
    assert_eq!(done("closed"), vec![(1, 0)]);
}

#[test]
fn scenario_errors_name_the_trace_key() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tiny.csv", TINY);
    let e = fleetsim::scenario::load_str(&scenario(&tr, "sideways", ""), "t.toml", "t", &[]).unwrap_err();
    assert_eq!(e.path, "workload.traces[0].mode");
    let e = fleetsim::scenario::load_str(
        &scenario(&tr, "open", "time_scale = 2\ntarget_rate_per_s = 3"),
        "t.toml",
        "t",
        &[],
    )
    .unwrap_err();
    assert_eq!(e.path, "workload.traces[0].target_rate_per_s");
    let bad = write(
        tmp.path(),
        "bad.csv",
        "arrival_s,input_tokens,output_tokens\n0,5,5\n1,x,5\n",
    );
    let e = fleetsim::scenario::load_str(&scenario(&bad, "open", ""), "t.toml", "t", &[]).unwrap_err();
    assert_eq!(e.path, "workload.traces[0].file");
    assert!(e.message.contains("bad.csv:3: column `input_tokens`"), "{e}");
    // skip_bad_rows replays the rest and reports the skip.
    let (_, w, _) =
        fleetsim::scenario::load_str(&scenario(&bad, "open", "skip_bad_rows = true"), "t.toml", "t", &[]).unwrap();
    assert_eq!(w.total_requests(), 1);
    assert!(
        w.notes.iter().any(|n| n.contains("skipped 1 malformed rows")),
        "{:?}",
        w.notes
    );
}

#[test]
fn inspect_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let burst = write(
        tmp.path(),
        "burstgpt.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n5.5,ChatGPT,1000,0,1000,Conversation log\n45,GPT-4,1087,200,1287,API log\n",
    );
    let cases: [(&std::ffi::OsStr, &str, u64); 4] = [
        ("traces/mooncake_conversation_sample.jsonl".as_ref(), "mooncake", 2000),
        ("traces/azure_conv_sample.csv".as_ref(), "azure", 3000),
        ("traces/native_sample.csv".as_ref(), "native", 1200),
        (burst.as_os_str(), "burstgpt", 3),
    ];
    for (file, format, n) in cases {
        let out = sim()
            .args(["trace", "inspect"])
            .arg(file)
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["format"], format);
        assert_eq!(j["requests"], n);
        assert!(j["max_arrivals_in_1s"].as_u64().unwrap() >= 1);
        assert!(j["input_tokens"]["p99"].as_u64().unwrap() >= j["input_tokens"]["p50"].as_u64().unwrap());
        sim()
            .args(["trace", "inspect"])
            .arg(file)
            .assert()
            .success()
            .stdout(predicate::str::contains("max arrivals in 1 s").and(predicate::str::contains("sessions (")));
    }
    // Mooncake: prefix sharing and inferred sessions.
    let out = sim()
        .args([
            "trace",
            "inspect",
            "traces/mooncake_conversation_sample.jsonl",
            "--json",
        ])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["session_source"], "infer");
    assert!(j["sessions"]["chains"].as_u64().unwrap() > 100);
    assert!(j["prefix"]["reusable_prefix_share"].as_f64().unwrap() > 0.1);
}

#[test]
fn convert_round_trip_keeps_requests_and_prefixes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.csv");
    sim()
        .args([
            "trace",
            "convert",
            "traces/mooncake_conversation_sample.jsonl",
            "--sessions",
            "infer",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success()
        .stderr(predicate::str::contains("wrote 2000 rows"));
    let inspect = |f: &std::path::Path| {
        let o = sim().args(["trace", "inspect", "--json"]).arg(f).output().unwrap();
        let mut j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let m = j.as_object_mut().unwrap();
        for k in ["file", "format", "session_source"] {
            m.remove(k);
        }
        // Inferred branches become sessions of their own in the file; links rejected for
        // not growing are an inference count; session-shape stats come with session ids.
        m["sessions"].as_object_mut().unwrap().remove("branches");
        m["sessions"].as_object_mut().unwrap().remove("rejected_no_growth");
        m.remove("agent");
        j
    };
    assert_eq!(
        inspect(std::path::Path::new("traces/mooncake_conversation_sample.jsonl")),
        inspect(&out)
    );
    // Converting the native file again reproduces it byte for byte.
    let again = tmp.path().join("again.csv");
    sim()
        .args(["trace", "convert"])
        .arg(&out)
        .arg("--out")
        .arg(&again)
        .assert()
        .success();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn bad_rows_exit_2_naming_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = write(
        tmp.path(),
        "bad.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.0,abc,44\n",
    );
    sim()
        .args(["trace", "inspect"])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "bad.csv:3: column `ContextTokens`: expected a whole number",
        ));
    sim()
        .args(["trace", "inspect", "--skip-bad-rows"])
        .arg(&bad)
        .assert()
        .success()
        .stderr(predicate::str::contains("skipped 1 malformed rows"));
    let unknown = write(tmp.path(), "what.txt", "hello,world\n1,2\n");
    sim()
        .args(["trace", "inspect"])
        .arg(&unknown)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot tell the trace format"));
    let sc = write(
        tmp.path(),
        "s.toml",
        "[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"bad.csv\"\n",
    );
    sim()
        .arg("run")
        .arg(&sc)
        .arg("--no-files")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("workload.traces[0].file").and(predicate::str::contains("bad.csv:3")));
}

#[test]
fn run_each_trace_scenario_reports_imbalance_and_reruns_from_results() {
    for s in ["trace-mooncake", "trace-azure", "trace-native"] {
        let tmp = tempfile::tempdir().unwrap();
        sim()
            .args(["run", &format!("scenarios/{s}.toml"), "--out"])
            .arg(tmp.path())
            .assert()
            .success()
            .stdout(predicate::str::contains("idle_while_queued_s").and(predicate::str::contains("stranded_slot_s")))
            .stderr(predicate::str::contains("note: trace"));
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("summary.json")).unwrap()).unwrap();
        assert!(j["idle_while_queued_s"].as_f64().is_some());
        assert_eq!(j["requests"]["finished"], j["requests"]["planned"]);
        assert_eq!(j["backends"].as_array().unwrap().len(), 4);
        // The recorded scenario names the trace by an absolute path and re-runs from anywhere.
        sim()
            .current_dir(std::env::temp_dir())
            .args(["explain", "--no-counterfactual"])
            .arg(tmp.path())
            .assert()
            .success();
    }
}

/// The `scenario_sha256` that `sim sweep SCENARIO ARGS` records.
fn sweep_sha(scenario: &std::path::Path, out: &std::path::Path, args: &[&str]) -> String {
    sim()
        .args(["sweep", "--no-plots", "-j", "1", "--quiet"])
        .args(args)
        .arg("--out")
        .arg(out)
        .arg(scenario)
        .assert()
        .success();
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    j["meta"]["scenario_sha256"].as_str().unwrap().to_string()
}

#[test]
fn a_sweeps_identity_covers_the_trace_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(
        tmp.path(),
        "t.csv",
        "arrival_s,input_tokens,output_tokens\n0,10,5\n1,20,5\n",
    );
    let sc = write(
        tmp.path(),
        "s.toml",
        "[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"t.csv\"\n",
    );
    let out = tmp.path().join("o");
    let a = sweep_sha(&sc, &out, &[]);
    assert_eq!(a, sweep_sha(&sc, &out, &[]));
    std::fs::write(&tr, "arrival_s,input_tokens,output_tokens\n0,10,5\n1,21,5\n").unwrap();
    assert_ne!(a, sweep_sha(&sc, &out, &[]));

    // A trace that only a sweep level names counts too.
    let other = write(tmp.path(), "u.csv", "arrival_s,input_tokens,output_tokens\n0,10,5\n");
    let axis = ["-L", "workload.traces[0].file", "t.csv,u.csv"];
    let b = sweep_sha(&sc, &out, &axis);
    assert_eq!(b, sweep_sha(&sc, &out, &axis));
    std::fs::write(&other, "arrival_s,input_tokens,output_tokens\n0,11,5\n").unwrap();
    assert_ne!(b, sweep_sha(&sc, &out, &axis));
}

#[test]
fn open_loop_turns_in_flight_together_retry_on_their_own_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(
        tmp.path(),
        "two.csv",
        "arrival_s,session_id,turn,input_tokens,output_tokens\n0,a,0,10,5\n0.1,a,1,20,5\n1.5,b,0,10,5\n",
    );
    // Both turns of `a` are at the engine when it restarts; one retry each brings both back.
    let extra =
        "[client]\nmax_retries = 1\n[[fleet_events]]\nat_s = 0.2\nbackend = 0\nkind = \"restart\"\ndowntime_s = 0.3\n";
    let mut done: Vec<(u32, u32)> = times(&scenario(&tr, "open", extra))
        .into_iter()
        .filter(|r| r.3.is_some())
        .map(|r| (r.0, r.1))
        .collect();
    done.sort();
    assert_eq!(done, vec![(0, 0), (0, 1), (1, 0)]);
}
