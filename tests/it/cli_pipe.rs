//! A reader that closes the pipe early (`sim run ... | head`) must not make `sim` panic:
//! every subcommand that prints exits 0 quietly when stdout is gone.

use std::process::{Command, Stdio};

/// Runs `sim ARGS` with stdout a pipe whose reader is already gone (the read end belonged
/// to `true`, which has exited), so the first write fails with `BrokenPipe` whatever the
/// timing; returns the exit code and stderr.
fn closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().expect("spawn true");
    let write_end = reader.stdin.take().expect("a pipe");
    reader.wait().expect("wait for true");
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .expect("run sim");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_quiet_exit(args: &[&str]) {
    let (code, stderr) = closed_stdout(args);
    assert!(
        !stderr.contains("panicked"),
        "sim {args:?} panicked on a closed stdout: {stderr}"
    );
    assert_eq!(
        code,
        Some(0),
        "sim {args:?} on a closed stdout: exit {code:?}, stderr: {stderr}"
    );
}

#[test]
fn run_summary_into_a_closed_pipe_exits_cleanly() {
    assert_quiet_exit(&["run", "scenarios/burst8.toml", "--no-files"]);
}

#[test]
fn listings_into_a_closed_pipe_exit_cleanly() {
    assert_quiet_exit(&["policies"]);
    assert_quiet_exit(&["policies", "--json"]);
    assert_quiet_exit(&["profiles"]);
    assert_quiet_exit(&["sweep", "scenarios/sweep-scrape-band.toml", "--list"]);
    assert_quiet_exit(&["tune", "scenarios/burst8.toml", "--list"]);
    assert_quiet_exit(&["trace", "inspect", "traces/mooncake_conversation_sample.jsonl"]);
}

#[test]
fn check_table_into_a_closed_pipe_exits_cleanly() {
    let junit = std::env::temp_dir().join(format!("fleetsim-pipe-{}.xml", std::process::id()));
    let junit = junit.to_str().expect("utf-8 temp path");
    assert_quiet_exit(&["check", "scenarios/burst8.toml", "--junit", junit]);
    let _ = std::fs::remove_file(junit);
}
