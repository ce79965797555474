//! The committed reference (`docs/reference/`) is what the code generates, and it covers
//! every policy `sim policies` lists and every key of the scenario schema.

use std::path::PathBuf;

use crate::common::sim;
use fleetsim::reference::{POLICIES, REGENERATE, SCENARIO_KEYS, files, key_rows};

fn committed(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/reference")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}; generate it with `{REGENERATE}`", p.display()))
}

#[test]
fn committed_reference_is_what_the_code_generates() {
    for (name, text) in files() {
        assert!(
            committed(name) == text,
            "docs/reference/{name} differs from what the code generates; regenerate with `{REGENERATE}` and commit it"
        );
    }
}

#[test]
fn every_policy_of_sim_policies_has_a_section() {
    let out = sim()
        .args(["policies", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out).expect("sim policies --json is JSON");
    assert!(list.len() >= 15, "only {} policies listed", list.len());
    let page = committed(POLICIES);
    for p in &list {
        let kind = p["kind"].as_str().expect("a kind");
        assert!(
            page.contains(&format!("\n## {kind}\n")),
            "policy `{kind}` has no section in docs/reference/{POLICIES}; regenerate with `{REGENERATE}`"
        );
        for q in p["params"].as_array().expect("params") {
            let key = q["key"].as_str().expect("a key");
            assert!(
                page.contains(&format!("| `{key}` |")),
                "`{kind}.{key}` is missing from {POLICIES}"
            );
        }
    }
}

#[test]
fn every_scenario_key_has_a_row() {
    let page = committed(SCENARIO_KEYS);
    let rows = key_rows();
    for top in [
        "name",
        "seed",
        "backends",
        "router",
        "workload",
        "faults",
        "fleet_events",
        "client",
    ] {
        assert!(rows.iter().any(|r| r.path == top), "schema lost `{top}`");
    }
    for r in &rows {
        assert!(
            page.contains(&format!("| `{}` |", r.path)),
            "`{}` is missing from docs/reference/{SCENARIO_KEYS}; regenerate with `{REGENERATE}`",
            r.path
        );
    }
}

#[test]
fn reference_check_and_schema_commands() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/reference");
    sim()
        .arg("reference")
        .arg("--out")
        .arg(&dir)
        .arg("--check")
        .assert()
        .success();
    let tmp = tempfile::tempdir().expect("temp dir");
    std::fs::write(tmp.path().join(POLICIES), "stale\n").expect("write");
    let out = sim()
        .arg("reference")
        .arg("--out")
        .arg(tmp.path())
        .arg("--check")
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains(POLICIES) && err.contains(REGENERATE), "{err}");
    let schema = sim().arg("schema").assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&schema).expect("sim schema prints JSON");
    assert!(v["properties"]["router"].is_object(), "{v}");
}
