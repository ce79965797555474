//! Imbalance without a queue: request shares, Jain's index, the max/min ratio and the share
//! hints, on a Helm-imported fleet that sends every request to one backend at light load.

use crate::common::{run_ok, sim, summary_of, write};

/// A production-stack Helm values file: 6 engines behind prefix-aware routing without a
/// minimum match length (the chart's default), the fleet of the report this reproduces.
const SIX: &str = r#"
servingEngineSpec:
  modelSpec:
  - name: "llama8b"
    repository: "vllm/vllm-openai"
    tag: "latest"
    modelURL: "meta-llama/Llama-3.1-8B-Instruct"
    replicaCount: 6
    requestGPUType: "nvidia.com/gpu-h100"
    vllmConfig:
      enablePrefixCaching: true
      maxModelLen: 16384
routerSpec:
  routingLogic: "prefixaware"
"#;

/// Light chat load with a shared 500-token system prompt: 48 sessions of 4 turns.
const CHAT: &str = r#"
[[workload.groups]]
name = "chat"
sessions = 48
arrival = { kind = "poisson", rate_per_s = 6 }
turns = 4
system_prompt_tokens = 500
input_tokens = { dist = "uniform", min = 100, max = 600 }
output_tokens = { dist = "uniform", min = 100, max = 400 }
think_time_s = { dist = "exponential", mean = 5.0 }
max_context_tokens = 16384

[expect]
checks = ["request_jain_index >= 0.5"]
"#;

/// The imported fleet and router with [`CHAT`] as the workload.
fn imported(dir: &std::path::Path) -> std::path::PathBuf {
    let values = write(dir, "values.yaml", SIX);
    let out = dir.join("six.toml");
    sim()
        .arg("import")
        .arg("--helm")
        .arg(&values)
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    let fleet = &text[..text.find("[[workload.").expect("the import writes a workload")];
    write(dir, "six.toml", &format!("{fleet}{CHAT}"))
}

#[test]
fn one_backend_serving_everything_is_a_headline_and_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = imported(tmp.path());
    let out = tmp.path().join("run");
    let a = run_ok(&scenario, &out);
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    let s: serde_json::Value = summary_of(&out);
    // No queue anywhere, so the queue metrics see nothing ...
    assert_eq!(s["idle_while_queued_s"], 0.0);
    assert!(s["worst_moment"].is_null());
    // ... while 192 of 192 requests went to one backend of 6.
    assert_eq!(s["requests"]["arrived"], 192);
    let reqs: Vec<u64> = s["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(reqs.iter().filter(|&&r| r == 192).count(), 1, "{reqs:?}");
    assert_eq!(s["request_share_max"], 1.0);
    assert_eq!(s["request_share_min"], 0.0);
    assert_eq!(s["request_jain_index"], 0.166667);
    assert_eq!(s["request_share_max_min_ratio"], 192.0);
    assert_eq!(s["backends_never_served"], 5);
    let busiest = s["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["requests"] == 192)
        .unwrap();
    assert_eq!(
        (busiest["request_share"].clone(), busiest["share_per_capacity"].clone()),
        (1.0.into(), 6.0.into())
    );
    assert!(text.contains("5 of 6 backends served nothing"), "{text}");
    assert!(
        text.contains("hint [never-served] 5 of 6 backends in service never served a request"),
        "{text}"
    );
    let hints: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("hints.json")).unwrap()).unwrap();
    assert!(
        hints.as_array().unwrap().iter().any(|h| h["kind"] == "never-served"),
        "{hints}"
    );
    // `[expect]` reads the new metric: the bound fails (exit 1) and names the value.
    sim()
        .arg("check")
        .arg(&scenario)
        .assert()
        .code(1)
        .stdout(predicates::str::contains("request_jain_index"))
        .stdout(predicates::str::contains("0.166667"));
}

#[test]
fn an_even_spread_reads_one_and_raises_no_share_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(imported(tmp.path())).unwrap();
    let rr: String = text
        .lines()
        .filter(|l| !l.starts_with("prefix_min_match_length") && !l.starts_with("fallback"))
        .map(|l| {
            if l.starts_with("kind = \"prefixaware\"") {
                "kind = \"roundrobin\"\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let scenario = write(tmp.path(), "rr.toml", &rr);
    let out = tmp.path().join("rr");
    sim()
        .arg("run")
        .arg(&scenario)
        .args(["--quiet", "--out"])
        .arg(&out)
        .assert()
        .success();
    let s: serde_json::Value = summary_of(&out);
    assert_eq!(
        (
            s["request_jain_index"].clone(),
            s["request_share_max_min_ratio"].clone()
        ),
        (1.0.into(), 1.0.into())
    );
    assert_eq!(s["backends_never_served"], 0);
    let hints = std::fs::read_to_string(out.join("hints.json")).unwrap();
    assert!(
        !hints.contains("never-served") && !hints.contains("share-skew"),
        "{hints}"
    );
}

#[test]
fn skew_across_equal_backends_is_a_hint() {
    // Two equal backends and two sticky sessions of 120 and 20 turns that hash apart: every
    // backend serves, no queue forms, and one serves 6 times the other.
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(
        tmp.path(),
        "skew.toml",
        r#"
name = "skew"
[backends]
count = 2
[router.policy]
kind = "session"
[[workload.groups]]
name = "long"
sessions = 1
arrival = { kind = "burst", at_s = 0 }
turns = 120
input_tokens = 200
output_tokens = 20
think_time_s = 1.0
[[workload.groups]]
name = "z"
sessions = 1
arrival = { kind = "burst", at_s = 0 }
turns = 20
input_tokens = 200
output_tokens = 20
think_time_s = 1.0
"#,
    );
    let out = tmp.path().join("o");
    let a = run_ok(&scenario, &out);
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    let s: serde_json::Value = summary_of(&out);
    let mut reqs: Vec<u64> = s["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .collect();
    reqs.sort_unstable();
    assert_eq!(reqs, [20, 120]);
    assert_eq!(s["idle_while_queued_s"], 0.0);
    assert_eq!(s["request_share_max_min_ratio"], 6.0);
    // Jain: 140^2 / (2 (120^2 + 20^2)) = 0.662162.
    assert_eq!(s["request_jain_index"], 0.662162);
    assert!(
        text.contains("hint [share-skew] backend-1 served 120 requests and backend-0 20 (6.0x)"),
        "{text}"
    );
    assert!(!text.contains("never-served"), "{text}");
}
