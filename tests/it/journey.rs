//! `sim explain DIR --session ID`: one session's journey turn by turn, on burst8 (the
//! motivating failure), on a trace replay keyed by the trace's own ids, on CSV and Parquet
//! run folders, and the timeline with the session highlighted.

use crate::common::{run_full, shipped, sim, write};
use fleetsim::explain::{Cause, Journey, journey};
use predicates::prelude::*;

fn journey_of(name: &str, key: &str) -> Journey {
    let (s, w) = shipped(name, &[]);
    let res = run_full(&s, &w);
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let i = res.session_keys.iter().position(|k| k == key).expect("the session");
    let mut j = journey(&res, &names, i);
    j.conclude();
    j
}

/// burst8: agents-3's first two turns are `_qps_routing` picks of backend-1 (fewer
/// dispatches in the window, more requests truly in flight), the other 18 follow them there
/// through the trie while backend-0 idles; a fresh load-aware pick would have chosen
/// backend-0 every time.
#[test]
fn a_burst8_agent_follows_its_first_pick() {
    let j = journey_of("burst8.toml", "agents-3");
    assert_eq!(j.turns.len(), 20);
    assert!(j.turns.iter().all(|t| t.backend == "backend-1"));
    let branches: Vec<&str> = j.turns.iter().map(|t| t.branch.as_str()).collect();
    let mut want = vec!["fallback_qps"; 2];
    want.extend(["prefix_match"; 18]);
    assert_eq!(branches, want);
    assert_eq!(j.turns[0].cause, Cause::QpsWindow);
    assert_eq!(j.turns[0].request_id, 19);
    assert_eq!(j.turns[0].arrival_s, 40.867169);
    // The view of turn 0: backend-0 had more dispatches in the window (14 vs 5) and fewer
    // requests truly in flight (1 vs 5).
    let v = &j.turns[0].view;
    assert_eq!(
        (v[0].window_dispatches, v[0].true_in_flight, v[0].picked),
        (Some(14), 1, false)
    );
    assert_eq!(
        (v[1].window_dispatches, v[1].true_in_flight, v[1].picked),
        (Some(5), 5, true)
    );
    assert_eq!(j.turns[0].view_age_s, Some(0.787169));
    let met = j.turns[0].met.unwrap();
    assert_eq!((met.running, met.waiting), (4, 1));
    for t in &j.turns {
        let f = t.fresh_pick.as_ref().expect("every turn is audited");
        assert_eq!(f.backend, "backend-0", "turn {}", t.turn);
        assert!(f.regret > 0, "turn {}", t.turn);
    }
    assert_eq!(j.idle_elsewhere.len(), 1);
    assert_eq!(j.idle_elsewhere[0].backend, "backend-0");
    assert_eq!(format!("{:.1}", j.idle_elsewhere[0].idle_s), "193.8");
    assert_eq!(
        j.verdict,
        "All 20 turns followed turn 0's pick, a QPS-window fallback (`fallback_qps`), to backend-1: \
         turn 1 was picked the same way (`fallback_qps`) and turns 2 to 19 followed through an \
         affinity branch (`prefix_match`) whatever the load. Meanwhile backend-0 sat idle for 193.8 s \
         of the session's 211.3 s. Its turns waited 81.6 s in engine queues in all (TTFT p50 4.084 s, \
         worst 6.302 s). A fresh, load-aware pick would have gone elsewhere on 20 of 20 audited turns \
         (the pick had up to 7 more requests in flight than the least-loaded backend)."
    );
}

/// Every agent of burst8 is latched the same way; the chat user's picks were never worse
/// than the least-loaded backend.
#[test]
fn every_burst8_agent_is_latched_and_the_chat_user_is_not_wronged() {
    for k in 0..8 {
        let j = journey_of("burst8.toml", &format!("agents-{k}"));
        assert!(j.turns.iter().all(|t| t.backend == "backend-1"), "agents-{k}");
        assert_eq!(j.turns[0].branch, "fallback_qps", "agents-{k}");
        assert!(j.turns[2..].iter().all(|t| t.branch == "prefix_match"), "agents-{k}");
    }
    let chat = journey_of("burst8.toml", "chat-0");
    assert_eq!(chat.turns.len(), 40);
    assert!(chat.turns.iter().all(|t| t.backend == "backend-0"));
    assert!(
        chat.verdict
            .contains("A fresh, load-aware pick would have agreed on all 40 audited turns")
    );
    assert!(!chat.verdict.contains("whatever the load"));
}

/// The CLI: text, the session under the counterfactual re-runs, JSON, an unknown id.
#[test]
fn the_cli_tells_the_story_and_refuses_an_unknown_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b8");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(&dir)
        .assert()
        .success();
    sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "agents-3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("# Session agents-3: burst8 (seed 1)"))
        .stdout(predicate::str::contains(
            "| 0 | 19 | 40.867 | backend-1 | fallback_qps | 0.8 | 4 + 1 | 4.357 | 4.383 | 9.646 | backend-0: truly 1 in flight, would meet 1 + 0 (pick +4) |",
        ))
        .stdout(predicate::str::contains(
            "- Turn 0 at 40.867 s (`fallback_qps`): backend-0 0 running + 0 waiting as of 0.8 s ago, 14 dispatches in the window, truly 1 in flight; backend-1 1 running + 0 waiting as of 0.8 s ago, 5 dispatches in the window, truly 5 in flight <- picked.",
        ))
        .stdout(predicate::str::contains(
            "| other policy | least_request (tie = random) | backend-0 x7, backend-1 x13 | 0.396 |",
        ))
        .stdout(predicate::str::contains(
            "Fresh engine stats would not have moved it. Under least_request (tie = random) the same session went backend-0 x7, backend-1 x13 and waited 0.4 s",
        ));
    // Nothing written into the run folder.
    assert!(!dir.join("explain.md").exists());
    let out = sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "agent-3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: --session `agent-3`: no such session in {} (9 sessions: `chat-0`, `agents-0`, `agents-1`, `agents-2`, ... 5 more); did you mean `agents-3`?",
            dir.display()
        )
    );
    // --timeline without --session is a usage error.
    sim()
        .arg("explain")
        .arg(&dir)
        .args(["--timeline", "x.json"])
        .assert()
        .code(2);
}

/// A Parquet run folder (and one without decision files) tells the same story as the CSV
/// one: explain re-simulates from scenario.toml.
#[test]
fn a_parquet_folder_tells_the_same_story() {
    let tmp = tempfile::tempdir().unwrap();
    let json = |extra: &[&str], name: &str| {
        let dir = tmp.path().join(name);
        sim()
            .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
            .arg(&dir)
            .args(extra)
            .assert()
            .success();
        let out = sim()
            .arg("explain")
            .arg(&dir)
            .args(["--session", "agents-5", "--json", "--no-counterfactual"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (dir, out.stdout, String::from_utf8(out.stderr).unwrap())
    };
    let (_, csv, _) = json(&[], "csv");
    let (pq, parquet, _) = json(&["--format", "parquet"], "parquet");
    assert!(pq.join("requests.parquet").exists() && !pq.join("requests.csv").exists());
    assert_eq!(csv, parquet);
    let (_, bare, note) = json(&["--format", "parquet", "--no-decisions"], "bare");
    assert_eq!(csv, bare);
    assert!(note.contains("has no decision files"), "{note}");
    let j: serde_json::Value = serde_json::from_slice(&csv).unwrap();
    assert_eq!(j["session"], "agents-5");
    assert_eq!(j["turns"].as_array().unwrap().len(), 20);
}

const TICKETS: &str = "arrival_s,session_id,turn,input_tokens,output_tokens\n\
0,ticket-4711,0,4000,50\n\
0.5,ticket-4712,0,4000,50\n\
3,ticket-4711,1,4100,50\n\
6,ticket-4711,2,4200,50\n";

/// `sim run SCENARIO --quiet --out DIR`, which must succeed.
fn run_quiet(scenario: &std::path::Path, dir: &std::path::Path) {
    sim()
        .arg("run")
        .arg(scenario)
        .arg("--quiet")
        .arg("--out")
        .arg(dir)
        .assert()
        .success();
}

fn replay(trace: &std::path::Path, copies: usize) -> String {
    let mut s = String::from(
        r#"
[backends]
count = 2
model = "vllm"
max_num_seqs = 4
[router.policy]
kind = "session"
"#,
    );
    for c in 0..copies {
        s.push_str(&format!(
            "[[workload.traces]]\nfile = \"{}\"\nname = \"copy{c}\"\nmode = \"open\"\nat_s = {}\n",
            trace.display(),
            c * 100
        ));
    }
    s
}

/// A replay keeps the trace's own session ids: `--session ticket-4711` finds its three
/// turns; a trace replayed twice has each id twice, named `ID#1` and `ID#2`.
#[test]
fn a_trace_replay_is_asked_by_the_traces_own_id() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tickets.csv", TICKETS);
    let sc = write(tmp.path(), "tickets.toml", &replay(&tr, 1));
    let dir = tmp.path().join("run");
    run_quiet(&sc, &dir);
    let out = sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "ticket-4711", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["session"], "ticket-4711");
    let turns = j["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    let arrivals: Vec<f64> = turns.iter().map(|t| t["arrival_s"].as_f64().unwrap()).collect();
    assert_eq!(arrivals, vec![0.0, 3.0, 6.0]);
    // The session policy hashes the key: every turn on one backend, by `session_hash`.
    assert!(turns.iter().all(|t| t["backend"] == turns[0]["backend"]));
    assert!(turns.iter().all(|t| t["branch"] == "session_hash"));

    let sc2 = write(tmp.path(), "twice.toml", &replay(&tr, 2));
    let dir2 = tmp.path().join("twice");
    run_quiet(&sc2, &dir2);
    sim()
        .arg("explain")
        .arg(&dir2)
        .args(["--session", "ticket-4711"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--session `ticket-4711`: 2 sessions in"))
        .stderr(predicate::str::contains(
            "name one as `ticket-4711#1` to `ticket-4711#2`",
        ));
    let out = sim()
        .arg("explain")
        .arg(&dir2)
        .args(["--session", "ticket-4711#2", "--json", "--no-counterfactual"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["session"], "ticket-4711#2");
    assert_eq!(j["turns"][0]["arrival_s"], 100.0, "the second copy");
    sim()
        .arg("explain")
        .arg(&dir2)
        .args(["--session", "ticket-4711#3"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("K runs from 1 to 2"));
}

/// A trace replayed by three groups: every output names the K-th copy of an id `ID#K`, the
/// name `sim explain --session` takes, so requests, decisions, the timeline and explain
/// agree on which requests each copy made.
#[test]
fn copies_of_a_replayed_trace_are_named_alike_in_every_output() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(tmp.path(), "tickets.csv", TICKETS);
    let sc = write(tmp.path(), "thrice.toml", &replay(&tr, 3));
    let dir = tmp.path().join("thrice");
    sim()
        .arg("run")
        .arg(&sc)
        .args(["--quiet", "--timeline", "--out"])
        .arg(&dir)
        .assert()
        .success();
    // request id -> session, from a CSV with `request_id` and `session` columns.
    let sessions_of = |name: &str| -> std::collections::BTreeMap<u64, String> {
        let mut r = csv::Reader::from_path(dir.join(name)).unwrap();
        let h = r.headers().unwrap().clone();
        let col = |c: &str| h.iter().position(|x| x == c).unwrap();
        let (id, session) = (col("request_id"), col("session"));
        r.records()
            .map(|rec| {
                let rec = rec.unwrap();
                (rec[id].parse().unwrap(), rec[session].to_string())
            })
            .collect()
    };
    let requests = sessions_of("requests.csv");
    assert_eq!(requests.len(), 12);
    assert_eq!(sessions_of("decisions.csv"), requests);
    let mut ids: Vec<&String> = requests.values().collect();
    ids.sort();
    ids.dedup();
    let want: Vec<String> = ["ticket-4711", "ticket-4712"]
        .iter()
        .flat_map(|t| (1..=3).map(move |k| format!("{t}#{k}")))
        .collect();
    assert_eq!(ids, want.iter().collect::<Vec<_>>());
    let timeline = std::fs::read_to_string(dir.join("timeline.json")).unwrap();
    for id in &want {
        assert!(timeline.contains(&format!("\"{id}\"")), "{id} not in the timeline");
        // explain takes the name as written and finds the same requests.
        let out = sim()
            .arg("explain")
            .arg(&dir)
            .args(["--session", id, "--json", "--no-counterfactual"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["session"], id.as_str());
        let turns: Vec<u64> = j["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["request_id"].as_u64().unwrap())
            .collect();
        let rows: Vec<u64> = requests.iter().filter(|(_, s)| *s == id).map(|(r, _)| *r).collect();
        assert_eq!(turns, rows, "{id}");
    }
    // The plain id names no single session.
    sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "ticket-4711"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "name one as `ticket-4711#1` to `ticket-4711#3`",
        ));
}

/// `--timeline OUT` writes the run's timeline with the session on its own first track and
/// its slices marked; every other event is the plain timeline's, and a session id with
/// quotes and a newline stays inside its JSON string.
#[test]
fn the_timeline_highlights_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b8");
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--timeline", "--out"])
        .arg(&dir)
        .assert()
        .success();
    let out = tmp.path().join("agents-3.json");
    sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "agents-3", "--no-counterfactual", "--timeline"])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("wrote {}", out.display())));
    let parse = |p: &std::path::Path| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        v["traceEvents"].as_array().unwrap().clone()
    };
    let hl = parse(&out);
    let plain = parse(&dir.join("timeline.json"));
    let track: Vec<&serde_json::Value> = hl.iter().filter(|e| e["pid"] == 2).collect();
    assert_eq!(track[0]["args"]["name"], "session agents-3");
    assert_eq!(track[1]["args"]["sort_index"], -1);
    let turns: Vec<&str> = track
        .iter()
        .filter(|e| e["cat"] == "session")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(turns.len(), 20);
    assert_eq!(turns[0], "turn 0 -> backend-1 (fallback_qps)");
    assert_eq!(turns[19], "turn 19 -> backend-1 (prefix_match)");
    // Off the session track: the plain timeline, with the session's slices renamed and marked.
    let mut rest: Vec<serde_json::Value> = hl.iter().filter(|e| e["pid"] != 2).cloned().collect();
    let mut marked = 0;
    for e in &mut rest {
        if e.get("cname").is_some() {
            assert_eq!(e["args"]["session"], "agents-3");
            let name = e["name"]
                .as_str()
                .unwrap()
                .strip_suffix(" (agents-3)")
                .unwrap()
                .to_string();
            e["name"] = name.into();
            e.as_object_mut().unwrap().remove("cname");
            marked += 1;
        }
    }
    assert_eq!(marked, 60, "queued, prefill and decode of 20 turns");
    assert_eq!(rest, plain);
    // A directory that does not exist: exit 2, nothing written.
    let bad = tmp.path().join("no/such/dir/t.json");
    sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "agents-3", "--no-counterfactual", "--timeline"])
        .arg(&bad)
        .assert()
        .code(2);
    assert!(!bad.exists());
}

/// A trace's session id is user text: quotes and control characters stay escaped in the
/// highlighted timeline (valid JSON) and in the terminal text.
#[test]
fn a_session_id_with_quotes_and_a_newline_stays_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let tr = write(
        tmp.path(),
        "odd.csv",
        "arrival_s,session_id,input_tokens,output_tokens\n0,\"a\"\"b</script>\nc\",100,5\n",
    );
    let sc = write(tmp.path(), "odd.toml", &replay(&tr, 1));
    let dir = tmp.path().join("run");
    run_quiet(&sc, &dir);
    let out = tmp.path().join("t.json");
    let run = sim()
        .arg("explain")
        .arg(&dir)
        .args(["--session", "a\"b</script>\nc", "--no-counterfactual", "--timeline"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(text.starts_with("# Session a\"b</script>\\nc: "), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(names.contains(&"session a\"b</script>\nc"), "{names:?}");
}
