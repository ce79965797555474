//! SLO attainment, goodput and a fixed fleet's cost (`[slo]`, `[price]`), and `sim tune
//! --sizes/--profiles`: the cheapest fleet and router that meet the SLO.

use crate::common::*;

use serde_json::Value;

fn summary(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn slo_keys_appear_only_with_an_slo_and_match_the_requests() {
    let plain = tempfile::tempdir().unwrap();
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(plain.path())
        .assert()
        .success();
    let s = summary(plain.path());
    for k in ["slo_attainment", "goodput_rps", "gpu_seconds", "fleet_usd_per_hour"] {
        assert!(s.get(k).is_none(), "{k} without [slo]");
    }
    let out = tempfile::tempdir().unwrap();
    let a = sim()
        .args([
            "run",
            "scenarios/burst8.toml",
            "--set",
            "slo.ttft_s=2",
            "--set",
            "slo.groups.agents.ttft_s=10",
            "--set",
            "price.h100=3.6",
            "--out",
        ])
        .arg(out.path())
        .assert()
        .success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        text.contains("slo                 missed") || text.contains("slo                 met"),
        "{text}"
    );
    assert!(text.contains("fleet cost          2 GPUs at $7.20/h"), "{text}");
    let s = summary(out.path());
    let groups = s["slo_groups"].as_array().unwrap();
    let met: u64 = groups.iter().map(|g| g["requests_met"].as_u64().unwrap()).sum();
    let got: u64 = groups.iter().map(|g| g["requests"].as_u64().unwrap()).sum();
    assert_eq!(met, s["slo_requests_met"].as_u64().unwrap());
    assert_eq!(got, s["requests"]["arrived"].as_u64().unwrap());
    assert_eq!(groups[1]["ttft_s"], 10.0);
    let sim_s = s["sim_time_s"].as_f64().unwrap();
    assert!((s["gpu_seconds"].as_f64().unwrap() - 2.0 * sim_s).abs() < 1e-3);
    assert!((s["cost_usd"].as_f64().unwrap() - 2.0 * sim_s / 3600.0 * 3.6).abs() < 1e-5);
}

#[test]
fn slo_errors_name_their_key() {
    for (set, key) in [
        ("slo.attainment=2", "slo.attainment"),
        ("slo.groups.nobody.ttft_s=1", "slo.groups.nobody"),
        ("slo.tpot_s=-1", "slo.tpot_s"),
    ] {
        let a = sim()
            .args([
                "run",
                "scenarios/burst8.toml",
                "--set",
                "slo.ttft_s=2",
                "--set",
                set,
                "--out",
            ])
            .arg(tempfile::tempdir().unwrap().path())
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
        assert!(err.contains(key) && err.lines().count() == 1, "{set}: {err}");
    }
}

#[test]
fn tune_finds_the_cheapest_fleet_and_prices_the_latch() {
    let out = tempfile::tempdir().unwrap();
    let args = [
        "tune",
        "scenarios/tune/capacity.toml",
        "--space",
        "scenarios/tune/capacity-space.toml",
        "--sizes",
        "3,4,5",
        "--capacity-seeds",
        "10",
        "--quiet",
        "--out",
    ];
    sim().args(args).arg(out.path()).args(["-j", "1"]).assert().success();
    let md = std::fs::read_to_string(out.path().join("capacity.md")).unwrap();
    let js: Value = serde_json::from_slice(&std::fs::read(out.path().join("capacity.json")).unwrap()).unwrap();
    let cells = js["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 9);
    let w = &cells[js["winner"].as_u64().unwrap() as usize];
    // Every cheaper cell misses the SLO; the winner meets it.
    assert!(w["meets"].as_bool().unwrap());
    for c in cells {
        if c["fleet_usd_per_hour"].as_f64() < w["fleet_usd_per_hour"].as_f64() {
            assert!(!c["meets"].as_bool().unwrap(), "{c}");
        }
    }
    // The QPS latch (the scenario's own router) needs more GPUs than the winner.
    let own = js["cheapest_per_router"][0][1].as_u64().unwrap() as usize;
    assert!(cells[own]["gpus"].as_u64() > w["gpus"].as_u64(), "{md}");
    assert!(md.contains("The scenario's own router"), "{md}");
    // The same files for any thread count.
    let again = tempfile::tempdir().unwrap();
    sim().args(args).arg(again.path()).args(["-j", "2"]).assert().success();
    assert_eq!(md, std::fs::read_to_string(again.path().join("capacity.md")).unwrap());
    // Without [slo] the search has nothing to meet.
    let a = sim()
        .args(["tune", "scenarios/burst8.toml", "--sizes", "2,3", "--quiet", "--out"])
        .arg(tempfile::tempdir().unwrap().path())
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(err.contains("[slo]"), "{err}");
}
