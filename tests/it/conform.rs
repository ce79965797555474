//! `sim conform` against the real routers from PyPI (found through `FLEETSIM_VLLM_ROUTER`,
//! `FLEETSIM_SGLANG_ROUTER` and `FLEETSIM_SMG`; `.ci/run` installs them, pinned, in venvs):
//! a few pairs on one small agent shape at a high speed, bounded in time. A pair whose model
//! stops agreeing with its router fails the test. Also the command's refusals, which need
//! no router.

use std::path::{Path, PathBuf};

use super::common::{sim, write};

/// Two backends of four slots, twelve agents sharing a system prompt, next to one chat user.
const SCENARIO: &str = r#"
name = "conform-small"
seed = 1
[backends]
count = 2
max_num_seqs = 4
[router]
chars_per_token = 4
policy.kind = "roundrobin"
[[workload.groups]]
name = "agents"
sessions = 12
arrival = { kind = "burst", at_s = 2, spread_s = 1 }
turns = 4
system_prompt_tokens = 400
system_prompt = "agent"
first_input_tokens = 200
input_tokens = 100
output_tokens = 60
think_time_s = 0.5
[[workload.groups]]
name = "chat"
sessions = 1
arrival = { kind = "burst", at_s = 0, spread_s = 0.1 }
turns = 6
first_input_tokens = 300
input_tokens = 40
output_tokens = 40
think_time_s = 1
"#;

/// The routers whose variables name a file; says which are missing.
fn routers() -> Vec<(&'static str, PathBuf)> {
    let mut found = Vec::new();
    for (name, var) in [
        ("vllm-router", "FLEETSIM_VLLM_ROUTER"),
        ("sglang-router", "FLEETSIM_SGLANG_ROUTER"),
        ("smg", "FLEETSIM_SMG"),
    ] {
        match std::env::var_os(var) {
            Some(p) if Path::new(&p).is_file() => found.push((name, PathBuf::from(p))),
            _ => eprintln!("skipped {name}: set {var} to its executable from PyPI (.ci/run installs it)"),
        }
    }
    found
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// Model seeds for the pairs below: a random policy's served run is one draw, judged against
/// the spread of this many.
const MODEL_SEEDS: usize = 20;

/// Pairs docs/real-routers.md lists among those that still disagree: run and checked whole,
/// their verdict not asserted. smg 1.13.0's cache_aware splits this scenario's agents 48 / 6
/// on most runs, as the model does on every seed, and otherwise on some runs (a draw the
/// model does not have).
const KNOWN_TO_DISAGREE: [(&str, &str); 1] = [("smg", "cache_aware")];

/// Deterministic policies must agree by `sim conform`'s rule. A random policy's served run
/// (random picks or random ties) is one draw, which falls
/// outside the model's range over n seeds about 2 times in n + 1 by chance alone, so its
/// verdict is not asserted; instead each figure (idle while queued, each ranked share) must
/// lie inside the model's two-sided 99.9 % prediction interval over the seeds (Student's t,
/// n - 1 degrees of freedom): a correct model fails that about once in 1,000 per figure, a
/// router that is not random per request (or a model that is off by a few standard
/// deviations) fails it.
#[test]
fn real_routers_agree_with_their_models() {
    let found = routers();
    if found.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let scen = write(dir.path(), "conform-small.toml", SCENARIO);
    let out = dir.path().join("conform");
    let mut cmd = sim();
    cmd.args([
        "conform",
        scen.to_str().unwrap(),
        "--speed",
        "4",
        "--timeout",
        "120",
        "--quiet",
    ])
    .args(["--seeds", &MODEL_SEEDS.to_string()])
    .args([
        "--policy",
        "round_robin",
        "--policy",
        "random",
        "--policy",
        "cache_aware",
    ])
    .arg("--out")
    .arg(&out);
    for (name, p) in &found {
        cmd.arg("--router").arg(format!("{name}={}", p.display()));
    }
    let o = cmd.output().unwrap();
    assert!(
        out.join("conform.json").is_file(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&out.join("conform.json"));
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 3 * found.len(), "{v:#}");
    for p in pairs {
        let what = format!("{} {} {}", p["router"], p["policy"], p["model_sets"]);
        assert_eq!(p["client_unfinished"], 0, "{what}: {p:#}");
        assert_eq!(p["served"]["finished"], p["served"]["planned"], "{what}");
        if KNOWN_TO_DISAGREE.contains(&(p["router"].as_str().unwrap(), p["policy"].as_str().unwrap())) {
            continue;
        }
        if p["model_sets"].to_string().contains("random") {
            // Random picks or random ties: one draw.
            assert_plausible_draw(p, &what);
        } else {
            assert_eq!(p["status"], "agrees", "{what}: {:#}", p["verdict"]);
        }
    }
    let all_agree = pairs.iter().all(|p| p["status"] == "agrees");
    assert_eq!(
        o.status.code(),
        Some(if all_agree { 0 } else { 1 }),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = std::fs::read_to_string(out.join("conform.md")).unwrap();
    assert!(md.contains("| vllm-router 0.1.17 | `round_robin` |") || found.iter().all(|(n, _)| *n != "vllm-router"));
}

/// Each served figure of `pair` inside the model's 99.9 % prediction interval over its seeds.
fn assert_plausible_draw(pair: &serde_json::Value, what: &str) {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let runs = pair["model"]["runs"].as_array().unwrap();
    let n = runs.len() as f64;
    assert_eq!(runs.len(), MODEL_SEEDS, "{what}");
    let t = StudentsT::new(0.0, 1.0, n - 1.0).unwrap().inverse_cdf(0.9995);
    let check = |name: &str, served: f64, xs: Vec<f64>| {
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let half = t * sd * (1.0 + 1.0 / n).sqrt();
        assert!(
            (served - mean).abs() <= half,
            "{what}: served {name} {served:.4} outside the model's 99.9 % prediction interval {mean:.4} +- {half:.4} over {n} seeds"
        );
    };
    let f = |v: &serde_json::Value| v["idle_while_queued_s"].as_f64().unwrap();
    check("idle_while_queued_s", f(&pair["served"]), runs.iter().map(f).collect());
    let shares = |v: &serde_json::Value| {
        let mut r: Vec<f64> = v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let total: f64 = r.iter().sum::<f64>().max(1.0);
        r.sort_by(|a, b| b.total_cmp(a));
        r.into_iter().map(|x| x / total).collect::<Vec<_>>()
    };
    let served = shares(&pair["served"]);
    for (rank, s) in served.iter().enumerate() {
        check(
            &format!("share of rank {rank}"),
            *s,
            runs.iter().map(|r| shares(r)[rank]).collect(),
        );
    }
}

/// Runs `sim conform` on the small scenario against vllm-router alone (3 model seeds) with
/// `policies`; the folder (kept alive by the returned tempdir) and its conform.json, or
/// `None` when vllm-router is not installed.
fn conform_vllm_router(policies: &[&str]) -> Option<(tempfile::TempDir, PathBuf, serde_json::Value)> {
    let (_, exe) = routers().into_iter().find(|(n, _)| *n == "vllm-router")?;
    let dir = tempfile::tempdir().unwrap();
    let scen = write(dir.path(), "conform-small.toml", SCENARIO);
    let out = dir.path().join("conform");
    let mut cmd = sim();
    cmd.args(["conform", scen.to_str().unwrap(), "--seeds", "3", "--speed", "4"])
        .args(["--timeout", "120", "--quiet"]);
    for policy in policies {
        cmd.args(["--policy", policy]);
    }
    let o = cmd
        .arg("--router")
        .arg(format!("vllm-router={}", exe.display()))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        out.join("conform.json").is_file(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&out.join("conform.json"));
    Some((dir, out, v))
}

/// vllm-router's URL-hashing policies: `consistent_hash` puts every request where the
/// model, given the live URLs, puts it (request for request per backend), and
/// `sticky_least_loaded` agrees.
#[test]
fn url_hashing_models_place_sessions_as_vllm_router_does() {
    let Some((_dir, _, v)) = conform_vllm_router(&["consistent_hash", "sticky_least_loaded"]) else {
        return;
    };
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{v:#}");
    for p in pairs {
        let what = format!("{} {}", p["policy"], p["model_sets"]);
        assert_eq!(p["client_unfinished"], 0, "{what}: {p:#}");
        assert_eq!(p["status"], "agrees", "{what}: {:#}", p["verdict"]);
    }
    let ch = &pairs[0];
    assert_eq!(ch["policy"], "consistent_hash");
    assert_eq!(ch["served"]["requests"], ch["model"]["runs"][0]["requests"], "{ch:#}");
}

/// vllm-router's `kv_aware` on the fleet's own KV events (`sim serve --kv-events`, one
/// `--kv-event-source` per worker): the router subscribes to every backend and the model
/// agrees (it is deterministic at temperature 0: no draw to judge).
#[test]
fn kv_aware_model_agrees_with_vllm_router_on_served_kv_events() {
    let Some((_dir, out, v)) = conform_vllm_router(&["kv_aware"]) else {
        return;
    };
    let p = &v["pairs"][0];
    assert_eq!(p["policy"], "kv_aware", "{v:#}");
    let args: Vec<&str> = p["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(
        args.iter().filter(|a| **a == "--kv-event-source").count(),
        2,
        "{args:?}"
    );
    let log = std::fs::read_to_string(out.join("logs/vllm-router-kv_aware.log")).unwrap();
    assert_eq!(log.matches("kv_index subscriber for").count(), 2, "{log}");
    assert!(!log.contains("discovery failed"), "{log}");
    assert_eq!(p["client_unfinished"], 0, "{p:#}");
    assert_eq!(p["status"], "agrees", "{:#}", p["verdict"]);
}

#[test]
fn refusals_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let scen = write(dir.path(), "conform-small.toml", SCENARIO);
    let o = sim()
        .args(["conform", scen.to_str().unwrap(), "--router", "nginx=/bin/sh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--router") && err.contains("nginx"), "{err}");
    let o = sim()
        .args(["conform", scen.to_str().unwrap(), "--router", "smg=/no/such/smg"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such/smg"));
    let o = sim()
        .args([
            "conform",
            scen.to_str().unwrap(),
            "--router",
            "smg=/bin/sh",
            "--policy",
            "nope",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--policy nope"));
}
