//! Export shapes: the Chrome-trace timeline, the long decisions table, sweep records, unit-
//! last metric names with TPOT, `sim policies --json` and `sim compare` on sweep folders.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{csv_table, sim};
use predicates::prelude::*;

fn run_into(dir: &Path, extra: &[&str]) {
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--timeline", "--out"])
        .arg(dir)
        .args(extra)
        .assert()
        .success();
}

#[test]
fn timeline_is_a_chrome_trace_with_one_process_per_backend() {
    let t = tempfile::tempdir().unwrap();
    run_into(t.path(), &[]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("timeline.json")).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("a traceEvents array");
    let mut procs = BTreeMap::new();
    let mut slices: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let mut per_phase = BTreeMap::new();
    let mut requests = std::collections::BTreeSet::new();
    for e in events {
        let pid = e["pid"].as_u64().expect("pid");
        match e["ph"].as_str() {
            Some("M") => {
                if e["name"] == "process_name" {
                    procs.insert(pid, e["args"]["name"].as_str().unwrap().to_string());
                }
            }
            Some("X") => {
                let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                *per_phase.entry(e["name"].as_str().unwrap().to_string()).or_insert(0) += 1;
                requests.insert(e["args"]["request_id"].as_u64().unwrap());
                slices
                    .entry((pid, e["tid"].as_u64().unwrap()))
                    .or_default()
                    .push((ts, ts + dur));
            }
            other => panic!("unexpected phase {other:?} in {e}"),
        }
    }
    assert_eq!(procs.values().cloned().collect::<Vec<_>>(), ["backend-0", "backend-1"]);
    // burst8: 200 requests, all finished, each queued -> prefill -> decode.
    assert_eq!(requests.len(), 200);
    assert_eq!(
        per_phase,
        BTreeMap::from([
            ("decode".to_string(), 200),
            ("prefill".to_string(), 200),
            ("queued".to_string(), 200)
        ])
    );
    for ((pid, tid), mut s) in slices {
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert!(
            s.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-6),
            "slices overlap on backend {pid} lane {tid}"
        );
    }
}

#[test]
fn long_decisions_have_one_row_per_decision_and_backend() {
    let t = tempfile::tempdir().unwrap();
    run_into(t.path(), &[]);
    let (wide_head, wide) = csv_table(&t.path().join("decisions.csv"));
    let (head, long) = csv_table(&t.path().join("decisions_long.csv"));
    assert_eq!(
        head,
        [
            "t_s",
            "request_id",
            "branch",
            "backend",
            "picked",
            "listed",
            "view_running",
            "view_waiting",
            "view_age_s",
            "view_window_dispatches",
            "true_outstanding"
        ]
    );
    assert_eq!(long.len(), wide.len() * 2);
    let col = |name: &str| wide_head.iter().position(|h| h == name).unwrap();
    for (i, w) in wide.iter().enumerate() {
        let pair = &long[2 * i..2 * i + 2];
        assert_eq!(pair.iter().filter(|r| r[4] == "1").count(), 1, "one pick per decision");
        for (b, l) in pair.iter().enumerate() {
            assert_eq!(
                (&l[0], &l[1], &l[3]),
                (&w[col("t_s")], &w[col("request_id")], &b.to_string())
            );
            assert_eq!(l[4] == "1", w[col("backend")] == b.to_string());
            for (k, name) in [
                "listed",
                "view_running",
                "view_waiting",
                "view_age_s",
                "view_window_dispatches",
                "true_outstanding",
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(
                    l[5 + k],
                    w[col(&format!("b{b}_{name}"))],
                    "decision {i} backend {b} {name}"
                );
            }
        }
    }
}

#[test]
fn metric_names_put_the_unit_last_and_report_tpot() {
    let t = tempfile::tempdir().unwrap();
    run_into(t.path(), &[]);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("summary.json")).unwrap()).unwrap();
    let tpot = &s["tpot_s"];
    assert_eq!(tpot["count"], 200);
    assert!(tpot["p50"].as_f64().unwrap() > 0.0 && tpot["p99"].as_f64().unwrap() >= tpot["p50"].as_f64().unwrap());
    // ITL: one gap per output token after the first, of every finished request.
    let (rh, rr) = csv_table(&t.path().join("requests.csv"));
    let out_col = rh.iter().position(|h| h == "output_tokens").unwrap();
    let gaps: u64 = rr.iter().map(|r| r[out_col].parse::<u64>().unwrap() - 1).sum();
    let itl = &s["itl_s"];
    assert_eq!(itl["count"], gaps);
    let q = |k: &str| itl[k].as_f64().unwrap();
    assert!(q("p50") > 0.0 && q("p50") <= q("p90") && q("p90") <= q("p99") && q("p99") <= q("max"));
    let out = t.path().join("sw");
    sim()
        .args([
            "sweep",
            "scenarios/burst8.toml",
            "--seeds",
            "3",
            "--quiet",
            "--no-plots",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let (head, rows) = csv_table(&out.join("sweep.csv"));
    for name in [
        "ttft_p99_s",
        "tpot_p99_s",
        "tpot_p50_s",
        "itl_p50_s",
        "itl_p90_s",
        "itl_p99_s",
        "ttft_count",
        "decision_regret_p50",
    ] {
        assert!(head.iter().any(|h| h == name), "sweep.csv has {name}: {head:?}");
    }
    assert!(!head.iter().any(|h| h.contains("_s.")), "{head:?}");
    let (agg, _) = csv_table(&out.join("aggregate.csv"));
    for name in [
        "ttft_p99_mean_s",
        "ttft_p99_ci95_s",
        "idle_while_queued_std_s",
        "latched_sessions_mean",
    ] {
        assert!(agg.iter().any(|h| h == name), "aggregate.csv has {name}: {agg:?}");
    }
    // sweep.jsonl: the same runs as flat records.
    let jsonl = std::fs::read_to_string(out.join("sweep.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), rows.len());
    let seed = head.iter().position(|h| h == "seed").unwrap();
    let ttft = head.iter().position(|h| h == "ttft_p99_s").unwrap();
    for (r, row) in recs.iter().zip(&rows) {
        assert_eq!(r["seed"].to_string(), row[seed]);
        assert_eq!(r["ttft_p99_s"].to_string(), row[ttft]);
    }
}

#[test]
fn policies_as_json() {
    let a = sim().args(["policies", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let kinds: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"prefixaware") && kinds.contains(&"least_request"),
        "{kinds:?}"
    );
    let pa = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "prefixaware")
        .unwrap();
    assert!(
        pa["params"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["key"] == "prefix_min_match_length")
    );
}

#[test]
fn compare_takes_sweep_folders_point_by_point() {
    let t = tempfile::tempdir().unwrap();
    let sweep = |name: &str, fallback: &str| {
        let out = t.path().join(name);
        sim()
            .args([
                "sweep",
                "scenarios/burst8.toml",
                "-L",
                "router.engine_stats_interval_s",
                "1,10",
            ])
            .args(["--seeds", "2", "--quiet", "--no-plots", "--set"])
            .arg(format!("router.policy.fallback={fallback}"))
            .arg("--out")
            .arg(&out)
            .assert()
            .success();
        out
    };
    let (a, b, c) = (sweep("a", "qps"), sweep("b", "qps"), sweep("c", "leastinflight"));
    sim().arg("compare").arg(&a).arg(&b).assert().success();
    sim()
        .arg("compare")
        .arg(&a)
        .arg(c.join("sweep.json"))
        .args(["--metric", "[engine_stats_interval_s=10] idle_while_queued_mean_s"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "[engine_stats_interval_s=10] idle_while_queued_mean_s",
        ));
}
