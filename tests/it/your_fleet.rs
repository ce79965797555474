//! Describing one's own fleet: backend groups, profiles, `sim profiles`, `sim import`.

use crate::common::{inline, run_full, run_with, shipped, sim, write};
use fleetsim::sim::{BackendModel, RunOptions};
use predicates::prelude::*;

const TWO_GROUPS: &str = r#"
name = "groups"
[backends]
[[backends.groups]]
name = "h100"
count = 2
profile = "llama-3.1-8b/h100/tp1"
max_num_seqs = 8
[[backends.groups]]
name = "l40s"
count = 1
profile = "qwen3-14b/l40s/tp1"
gpu_memory_utilization = 0.95
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "chat"
sessions = 12
arrival = { kind = "burst", at_s = 0 }
turns = 2
input_tokens = 300
output_tokens = 50
"#;

fn vllm(m: &BackendModel) -> &fleetsim::backend::vllm::VllmConfig {
    match m {
        BackendModel::Vllm(v) => v,
        BackendModel::Queueing { .. } => panic!("vLLM expected"),
    }
}

#[test]
fn groups_in_discovery_order_with_their_own_engines() {
    let (s, w) = inline(TWO_GROUPS, &[]);
    let names: Vec<(&str, &str)> = s.sim.backends.iter().map(|(n, u)| (n.as_str(), u.as_str())).collect();
    assert_eq!(
        names,
        [
            ("h100-0", "http://h100-0:8000"),
            ("h100-1", "http://h100-1:8000"),
            ("l40s-0", "http://l40s-0:8000")
        ]
    );
    let (h, l) = (vllm(&s.sim.models[0]), vllm(&s.sim.models[2]));
    assert_eq!(
        (h.max_num_seqs, h.kv_blocks, h.max_num_batched_tokens),
        (8, 29_205, 8192)
    );
    // L40S (48 GiB): vLLM's small-GPU defaults, and 0.95 x 48 GiB = 48,962,627,174 B minus
    // 29,536,614,400 B of Qwen3-14B weights, over 2,621,440 B per block = 7,410.5 blocks.
    assert_eq!(
        (l.max_num_seqs, l.max_num_batched_tokens, l.kv_blocks),
        (256, 2048, 7_410)
    );
    assert_eq!(l.step_time.beta0_us, 34185.9);
    // The context limit is the smallest engine's.
    assert_eq!(s.context_limit_tokens, Some(7_410 * 16));
    let res = run_full(&s, &w);
    let b = &res.summary.backends;
    assert_eq!(
        (b[2].group.as_str(), b[2].profile.as_str()),
        ("l40s", "qwen3-14b/l40s/tp1")
    );
    assert_eq!(res.summary.requests.finished, 24);
}

#[test]
fn set_and_sweep_reach_group_fields() {
    let (s, _) = inline(TWO_GROUPS, &[("backends.groups[1].count", "6")]);
    assert_eq!(s.sim.backends.len(), 8);
    assert_eq!(s.sim.backends[7].0, "l40s-5");
    let tmp = tempfile::tempdir().unwrap();
    let p = write(tmp.path(), "g.toml", TWO_GROUPS);
    sim()
        .args(["sweep"])
        .arg(&p)
        .args([
            "-L",
            "backends.groups[0].count",
            "1,3",
            "--seeds",
            "1",
            "--quiet",
            "--no-plots",
            "--out",
        ])
        .arg(tmp.path().join("sw"))
        .assert()
        .success();
    let csv = std::fs::read_to_string(tmp.path().join("sw/sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

#[test]
fn the_single_table_is_one_group_and_keeps_its_outputs() {
    // burst8 stays byte-identical (CI compares it); here: names, no labels, one model each.
    let (s, _) = shipped("burst8.toml", &[]);
    assert_eq!(s.sim.backends[1].0, "backend-1");
    assert!(s.sim.labels.iter().all(|l| l.group.is_empty() && l.profile.is_empty()));
    assert_eq!(s.sim.models.len(), 2);
    // A profile on the single table sets its engines (given step_time keys still win).
    let single = TWO_GROUPS.split("[[backends.groups]]").next().unwrap().to_string()
        + "count = 2\nprofile = \"llama-3.3-70b/h100/tp8\"\n[backends.step_time]\nbeta0_us = 1000\n"
        + TWO_GROUPS.split("gpu_memory_utilization = 0.95").nth(1).unwrap();
    let (s, _) = inline(&single, &[]);
    let v = vllm(&s.sim.models[1]);
    assert_eq!(
        (v.step_time.beta0_us, v.step_time.beta1_us),
        (1000.0, 10.025593497696502)
    );
    assert_eq!(v.kv_blocks, 91_050);
    assert_eq!(s.sim.backends[1].0, "backend-1");
    assert_eq!(s.sim.labels[0].profile, "llama-3.3-70b/h100/tp8");
}

#[test]
fn mixed_fleet_slow_backends_queue_first_behind_roundrobin() {
    let (s, w) = shipped("mixed-fleet.toml", &[]);
    let res = run_with(&s, &w, RunOptions::summary_only());
    let b = &res.summary.backends;
    assert_eq!((b[0].peak_waiting, b[1].peak_waiting), (0, 0));
    assert!(b[2..].iter().all(|x| x.peak_waiting > 0), "{b:?}");
    assert!(b.iter().all(|x| x.requests == 400), "roundrobin splits evenly");
}

#[test]
fn bad_group_input_is_one_line_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "profile = \"llama-3.1-8b/h100/tp1\"",
            "profile = \"gpt-9/h100/tp1\"",
            "unknown profile `gpt-9/h100/tp1`",
        ),
        (
            "gpu_memory_utilization = 0.95",
            "gpu_memory_gib = 20",
            "backends.groups[1].gpu_memory_gib: no KV cache fits",
        ),
        ("name = \"l40s\"", "name = \"h100\"", "duplicate group name `h100`"),
        (
            "max_num_seqs = 8",
            "max_num_seqs = 8\nblock_size_tokens = 32",
            "the router hashes prefixes in blocks of one size",
        ),
        (
            "[backends]",
            "[backends]\ncount = 2",
            "backends.count: give engine keys either on [backends]",
        ),
        (
            "max_num_seqs = 8",
            "max_num_seqs = 8\nkv_blocks = 10\ngpu_memory_gib = 80",
            "give one or the other",
        ),
    ];
    for (from, to, needle) in cases {
        let p = write(tmp.path(), "bad.toml", &TWO_GROUPS.replacen(from, to, 1));
        let out = sim().arg("run").arg(&p).arg("--no-files").assert().code(2);
        let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert!(err.contains(needle) && err.lines().count() == 1, "{needle}: {err}");
        assert!(err.contains("bad.toml:"), "{err}");
    }
}

#[test]
fn profiles_table_and_json() {
    sim()
        .arg("profiles")
        .assert()
        .success()
        .stdout(predicate::str::contains("llama-3.3-70b/h100/tp4").and(predicate::str::contains("644fd8b")));
    let out = sim().args(["profiles", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert!(rows.len() >= 8);
    let first = &rows[0];
    assert_eq!(first["id"], "llama-3.1-8b/h100/tp1");
    assert_eq!(first["kv_blocks_default"], 29205);
    assert_eq!(first["source_commit"], "644fd8b6cf805f05183dcc0f44073b07e3c95c2a");
}

#[test]
fn import_writes_a_scenario_that_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mine.toml");
    sim()
        .args([
            "import",
            "--router-args",
            "--routing-logic roundrobin --static-backends http://a:8000,http://b:8000 --static-models m,m",
            "--vllm-args",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 32",
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("urls = [\"http://a:8000\", \"http://b:8000\"]"), "{text}");
    sim().arg("run").arg(&out).arg("--no-files").assert().success();
    // With a trace: the path is written relative to the scenario.
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/native_sample.csv");
    let out2 = tmp.path().join("sub/traced.toml");
    sim()
        .args([
            "import",
            "--vllm-args",
            "vllm serve Qwen/Qwen2.5-7B-Instruct",
            "--trace",
            trace,
            "-o",
        ])
        .arg(&out2)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out2).unwrap();
    assert!(
        text.contains("[[workload.traces]]") && text.contains("native_sample.csv"),
        "{text}"
    );
}

/// An autoscaler manifest imports as `[autoscaler]` and the scenario runs with it; a key
/// that would change the decisions unmodelled is one line naming the file and key path.
#[test]
fn import_reads_autoscaler_manifests_and_refuses_unmodelled_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("keda.toml");
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/keda-scaledobject.yaml");
    sim()
        .args([
            "import",
            "--autoscaler",
            manifest,
            "--router-args",
            "--static-backends http://a:8000 --static-models m",
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("[autoscaler]") && text.contains("cooldown_s = 360"),
        "{text}"
    );
    sim().arg("run").arg(&out).arg("--no-files").assert().success();
    let text = std::fs::read_to_string(manifest).unwrap();
    let bad = write(
        tmp.path(),
        "so.yaml",
        &text.replace("  triggers:", "  advanced:\n    scalingModifiers: {}\n  triggers:"),
    );
    let o = tmp.path().join("x.toml");
    let a = sim()
        .args([
            "import",
            "--autoscaler",
            bad.to_str().unwrap(),
            "-o",
            o.to_str().unwrap(),
        ])
        .assert()
        .code(2);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("so.yaml: spec.advanced.scalingModifiers: unknown key") && err.lines().count() == 1,
        "{err}"
    );
    assert!(!o.exists(), "nothing written on error");
}

#[test]
fn import_rejects_bad_flags_and_yaml_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.toml");
    let o = out.to_str().unwrap();
    let bad = write(tmp.path(), "v.yaml", "routerSpec: [1, 2\n");
    for (args, needle) in [
        (
            vec![
                "import",
                "--router-args",
                "--routing-logic roundrobin --bogus 1",
                "-o",
                o,
            ],
            "unknown flag `--bogus`",
        ),
        (
            vec!["import", "--vllm-args", "vllm serve m --max-num-seqs=x", "-o", o],
            "`--max-num-seqs`: expects a number",
        ),
        (vec!["import", "--helm", bad.to_str().unwrap(), "-o", o], "v.yaml:"),
        (vec!["import", "-o", o], "give at least one of"),
        (
            vec!["import", "--vllm-args", "vllm serve m", "--gpu", "tpu", "-o", o],
            "unknown GPU `tpu`",
        ),
    ] {
        let a = sim().args(&args).assert().code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains(needle) && err.lines().count() == 1, "{needle}: {err}");
        assert!(!err.contains("panicked"));
    }
    assert!(!out.exists(), "nothing written on error");
    sim()
        .args(["import", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--allow-unknown"));
}

/// Per seed, of the imported multi-model Helm fleet (docs/examples/helm-values.yaml: Llama
/// on 3 H100s, Qwen on 2 A100s): Llama requests routed to the Qwen/A100 group and Qwen
/// requests routed to the Llama group.
fn misrouted(text: &str, seed: u64) -> (usize, usize, usize) {
    let seed_s = seed.to_string();
    let (s, w) = inline(text, &[("seed", seed_s.as_str())]);
    let r = run_full(&s, &w);
    let group = |b: usize| r.summary.backends[b].group.clone();
    let (mut llama, mut llama_on_qwen, mut qwen_on_llama) = (0, 0, 0);
    for q in &r.requests {
        let key = &w.sessions[q.session.index()].key;
        let g = group(q.backend.index());
        if key.contains("llama8b") {
            llama += 1;
            llama_on_qwen += usize::from(g == "qwen14b");
        } else {
            qwen_on_llama += usize::from(g == "llama8b");
        }
    }
    (llama, llama_on_qwen, qwen_on_llama)
}

#[test]
fn a_multi_model_helm_import_routes_each_request_to_its_model() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fleet.toml");
    let values = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/helm-values.yaml");
    sim()
        .args(["import", "--helm", values, "-o"])
        .arg(&out)
        .assert()
        .success();
    let after = std::fs::read_to_string(&out).unwrap();
    assert!(
        after.contains("serves = [\"meta-llama/Llama-3.1-8B-Instruct\"]"),
        "{after}"
    );
    assert!(after.contains("serves = [\"Qwen/Qwen3-14B\"]"), "{after}");
    assert!(after.contains("model = \"Qwen/Qwen3-14B\""), "{after}");
    // Before: the same fleet and traffic with requests naming no model.
    let before: String = after
        .lines()
        .filter(|l| !l.starts_with("serves = ") && !l.starts_with("model = "))
        .map(|l| format!("{l}\n"))
        .collect();
    for seed in 1..=3 {
        let (llama, on_qwen, _) = misrouted(&before, seed);
        assert!(
            on_qwen >= 10 && llama >= 40,
            "seed {seed}: before, {on_qwen} of {llama} Llama requests on the A100s"
        );
        assert_eq!(
            misrouted(&after, seed),
            (llama, 0, 0),
            "seed {seed}: after, each model on its own group"
        );
    }
    // A model nobody serves is refused, counted and named.
    let unserved = after.replace("model = \"Qwen/Qwen3-14B\"", "model = \"deepseek-ai/DeepSeek-V3\"");
    let path = write(tmp.path(), "unserved.toml", &unserved);
    sim()
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(tmp.path().join("u"))
        .assert()
        .success()
        .stdout(predicate::str::contains("unserved models").and(predicate::str::contains("deepseek-ai/DeepSeek-V3")));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("u/summary.json")).unwrap()).unwrap();
    let n = s["unserved_models"]["deepseek-ai/DeepSeek-V3"].as_u64().unwrap();
    assert!(n > 0 && s["requests"]["unserved_model"].as_u64() == Some(n), "{s}");
    let hints = std::fs::read_to_string(tmp.path().join("u/hints.json")).unwrap();
    assert!(hints.contains("unserved-model"), "{hints}");
}

#[test]
fn a_single_model_fleet_keeps_its_outputs_whatever_serves_says() {
    let serves = TWO_GROUPS
        .replace("count = 2\n", "count = 2\nserves = [\"m\"]\n")
        .replace("count = 1\n", "count = 1\nserves = [\"m\"]\n")
        .replace("output_tokens = 50\n", "output_tokens = 50\nmodel = \"m\"\n");
    let (s0, w0) = inline(TWO_GROUPS, &[]);
    let (s1, w1) = inline(&serves, &[]);
    let (a, b) = (run_full(&s0, &w0).summary, run_full(&s1, &w1).summary);
    assert_eq!(a.requests, b.requests);
    assert_eq!(a.e2e_s, b.e2e_s);
    let shares = |s: &fleetsim::metrics::Summary| s.backends.iter().map(|b| b.requests).collect::<Vec<_>>();
    assert_eq!(shares(&a), shares(&b));
    assert_eq!(b.backends[0].serves, vec!["m".to_string()]);
}
