//! Real-trace hygiene on the two shipped synthetic agent samples: the `where` row filter,
//! zero-token and over-KV rows under `skip_bad_rows`, `max_context_tokens`, idle-gap
//! compression, the trace's own session ids in the outputs, and replayed overlap counts.

use crate::common::{run_ok, sim, summary_of, write};

fn shipped(name: &str) -> String {
    format!("{}/traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The SWE-bench-shaped sample as docs/agent-traces.md configures it, plus `extra` keys.
fn swe(extra: &str) -> String {
    format!(
        r#"
name = "swe"
[backends]
count = 4
[router.policy]
kind = "session"
[[workload.traces]]
file = "{}"
format = "sessions"
mode = "closed"
columns = {{ session = "session_id", turn = "step", start_unix_s = "start_unix_s", latency_s = "latency_s", input_tokens = "prompt_tokens", output_tokens = "completion_tokens" }}
{extra}
"#,
        shipped("swe_agent_sample.csv")
    )
}

fn stderr_of(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.get_output().stderr.clone()).unwrap()
}

#[test]
fn errored_zero_token_calls_are_named_then_filtered_or_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    // Without a filter the first errored call stops the load, naming line, column and keys.
    let s = write(tmp.path(), "a.toml", &swe(""));
    sim()
        .arg("run")
        .arg(&s)
        .arg("--no-files")
        .assert()
        .code(2)
        .stderr(predicates::str::contains("swe_agent_sample.csv:"))
        .stderr(predicates::str::contains("column `input_tokens`"))
        .stderr(predicates::str::contains("`where` filter"))
        .stderr(predicates::str::contains("skip_bad_rows"));
    // `where = { is_error = false }` leaves the 26 errored calls out, counted.
    let s = write(tmp.path(), "b.toml", &swe("where = { is_error = false }"));
    let a = run_ok(&s, &tmp.path().join("b"));
    assert!(
        stderr_of(&a).contains("26 rows left out by the `where` filter"),
        "{}",
        stderr_of(&a)
    );
    assert_eq!(summary_of(&tmp.path().join("b"))["requests"]["planned"], 585 - 26);
    // skip_bad_rows counts and skips them instead.
    let s = write(tmp.path(), "c.toml", &swe("skip_bad_rows = true"));
    let a = sim().arg("run").arg(&s).arg("--no-files").assert().success();
    assert!(
        stderr_of(&a).contains("26 of the skipped rows had 0 prompt tokens"),
        "{}",
        stderr_of(&a)
    );
    // A filter on a column the header lacks names the key.
    let s = write(tmp.path(), "d.toml", &swe("where = { failed = false }"));
    sim()
        .arg("run")
        .arg(&s)
        .arg("--no-files")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "where.failed names `failed`, which the header lacks",
        ));
    let s = write(tmp.path(), "e.toml", &swe("where = { is_error = {} }"));
    sim()
        .arg("run")
        .arg(&s)
        .arg("--no-files")
        .assert()
        .code(2)
        .stderr(predicates::str::contains("workload.traces[0].where.is_error"));
}

#[test]
fn idle_gaps_are_cut_and_session_ids_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let (long, short) = (tmp.path().join("long"), tmp.path().join("short"));
    let s = write(tmp.path(), "a.toml", &swe("where = { is_error = false }"));
    sim()
        .arg("run")
        .arg(&s)
        .arg("--quiet")
        .arg("--out")
        .arg(&long)
        .assert()
        .success();
    let s = write(
        tmp.path(),
        "b.toml",
        &swe("where = { is_error = false }\nmax_idle_gap_s = 60"),
    );
    let a = sim().arg("run").arg(&s).arg("--out").arg(&short).assert().success();
    let err = stderr_of(&a);
    assert!(
        err.contains("max_idle_gap_s = 60:") && err.contains("idle gaps cut"),
        "{err}"
    );
    let (l, sh) = (summary_of(&long), summary_of(&short));
    let (span_l, span_s) = (l["sim_time_s"].as_f64().unwrap(), sh["sim_time_s"].as_f64().unwrap());
    // Four days of mostly nothing become hours of work.
    assert!(span_l > 3.0 * 86400.0 && span_s < span_l / 10.0, "{span_l} -> {span_s}");
    assert_eq!(l["requests"]["finished"], sh["requests"]["finished"]);
    assert!(sh["throughput_rps"].as_f64().unwrap() > 10.0 * l["throughput_rps"].as_f64().unwrap());
    // The trace's own session ids, not `<stem>-N`, in requests.csv and decisions.
    let reqs = std::fs::read_to_string(short.join("requests.csv")).unwrap();
    assert!(
        reqs.contains("swe-002") && !reqs.contains("swe_agent_sample-"),
        "{}",
        &reqs[..400]
    );
    // The replay's own overlap count beside the recording's.
    let r = &sh["replay"];
    assert!(r["overlapping_replayed"].is_u64(), "{r}");
    assert_eq!(r["pacing"]["overlapping"], 0);
}

#[test]
fn huge_prompts_are_truncated_or_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let base = format!(
        r#"
name = "assistant"
[backends]
count = 2
[router.policy]
kind = "session"
[[workload.traces]]
file = "{}"
format = "sessions"
mode = "closed"
max_idle_gap_s = 300
columns = {{ session = "conversation", start_unix_s = "ts", latency_s = "duration_s", input_tokens = "input_tokens", output_tokens = "output_tokens", model = "model" }}
"#,
        shipped("coding_assistant_sample.jsonl")
    );
    // One backend holds 467,280 tokens (29,205 blocks of 16): 848k-token prompts cannot run.
    let s = write(tmp.path(), "a.toml", &base);
    sim()
        .arg("run")
        .arg(&s)
        .arg("--no-files")
        .assert()
        .code(2)
        .stderr(predicates::str::contains("coding_assistant_sample.jsonl:"))
        .stderr(predicates::str::contains("max_context_tokens"))
        .stderr(predicates::str::contains("skip the 40 such calls"));
    let s = write(tmp.path(), "b.toml", &format!("{base}skip_bad_rows = true\n"));
    let a = run_ok(&s, &tmp.path().join("b"));
    assert!(
        stderr_of(&a).contains("skipped 40 calls larger than one backend's KV cache"),
        "{}",
        stderr_of(&a)
    );
    assert_eq!(summary_of(&tmp.path().join("b"))["requests"]["planned"], 257 - 40);
    let s = write(tmp.path(), "c.toml", &format!("{base}max_context_tokens = 200000\n"));
    let a = run_ok(&s, &tmp.path().join("c"));
    assert!(
        stderr_of(&a).contains("prompts truncated to max_context_tokens = 200000"),
        "{}",
        stderr_of(&a)
    );
    assert_eq!(summary_of(&tmp.path().join("c"))["requests"]["planned"], 257);
    let reqs = std::fs::read_to_string(tmp.path().join("c/requests.csv")).unwrap();
    assert!(reqs.contains("conv-00"), "{}", &reqs[..300]);
}
