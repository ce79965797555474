//! The physics step-time model end to end: the tables it derives profiles from, `profile
//! = "auto"` in a scenario and on a measurement, the leave-one-out judgement on the
//! shipped runs (`traces/validation.toml`), the refit of the shipped coefficients, the
//! window calibration, data-parallel runs, and loud bad fits.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{sim, write};

const RTX4090: &str = "traces/vllm-runs/RTX4090_Llama-3.1-8B";
const QWEN: &str = "traces/vllm-runs/RTXPRO6000_Qwen3-32B";
const RUNS: &str = "traces/validation.toml";
const SCOUT4: &str = "traces/llm-d-benchmark/exp-4-vllm-llama4-tp4/LMBench_sharegpt_output_4.csv";

fn run_ok(args: &[&str]) -> String {
    let o = sim().args(args).output().unwrap();
    assert!(
        o.status.success(),
        "sim {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn metric(dir: &Path, k: &str) -> f64 {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("validation.json")).unwrap()).unwrap();
    v["metrics"][k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn the_tables_list_datasheets_shapes_and_coefficients_with_sources() {
    let g = run_ok(&["profiles", "--gpus"]);
    for want in [
        "rtx-pro-6000",
        "NVIDIA RTX PRO 6000 Blackwell",
        "h100",
        "a100",
        "rtx-4090",
        "https://",
    ] {
        assert!(g.contains(want), "{want} in\n{g}");
    }
    let m = run_ok(&["profiles", "--models"]);
    for want in [
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "128 experts, top 8",
        "llama-4-scout",
        "llama-4-maverick",
        "llama-3.1-70b",
        "llama-3.1-8b",
        "huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
    ] {
        assert!(m.contains(want), "{want} in\n{m}");
    }
    let p = run_ok(&["profiles", "--physics"]);
    assert!(
        p.contains("mem_efficiency") && p.contains("sim calibrate --physics"),
        "{p}"
    );
    let j: Value = serde_json::from_str(&run_ok(&["profiles", "--models", "--json"])).unwrap();
    let scout = j
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == "llama-4-scout")
        .unwrap();
    assert_eq!(scout["moe"]["experts"], 16);
    let j: Value = serde_json::from_str(&run_ok(&["profiles", "--gpus", "--json"])).unwrap();
    assert!(
        j.as_array()
            .unwrap()
            .iter()
            .any(|r| r["gpu"] == "rtx-pro-6000" && r["memory_gib"] == 96.0)
    );
}

#[test]
fn auto_predicts_a_run_from_its_model_and_gpu_and_says_what_it_ran() {
    let d = tempfile::tempdir().unwrap();
    // The RTX 4090 run names its model and GPU; the Qwen3-32B run needs --gpu.
    let out = d.path().join("a");
    let text = run_ok(&[
        "validate",
        RTX4090,
        "--profile",
        "auto",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        text.contains("engine: 1 engine of llama-3.1-8b on rtx-4090, TP 1"),
        "{text}"
    );
    assert!(text.contains("max_num_seqs = 256 (measurement)"), "{text}");
    assert!(text.contains("no fitting to this run"), "{text}");
    assert!(
        text.contains("expected error of an auto profile on a model and GPU it was not fitted to"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(out.join("validation.json")).unwrap()).unwrap();
    assert!(v["expected_abs_err_pct"]["e2e_mean_median"].as_f64().is_some(), "{v}");
    // The shipped coefficients were fitted with this run among others: a bound, not a
    // hold-out figure (the leave-one-out test is that).
    assert!(metric(&out, "e2e_mean_err_pct").abs() < 10.0);
    let o = sim()
        .args(["validate", QWEN, "--profile", "auto", "--no-plots", "--out"])
        .arg(d.path().join("q"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gpu NAME"));
    let out = d.path().join("q2");
    let text = run_ok(&[
        "validate",
        QWEN,
        "--profile",
        "auto",
        "--gpu",
        "rtx-pro-6000",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(text.contains("qwen3-32b on rtx-pro-6000, TP 2"), "{text}");
    assert!(
        text.contains("the rtx-pro-6000 datasheet"),
        "KV derived from the datasheet: {text}"
    );
    assert!(metric(&out, "e2e_mean_err_pct").abs() < 10.0);
    // An LMBench CSV reads the Kubernetes Deployment beside it: model, TP, GPU, FP8.
    let text = run_ok(&[
        "validate",
        SCOUT4,
        "--profile",
        "auto",
        "--no-plots",
        "--out",
        d.path().join("s").to_str().unwrap(),
    ]);
    assert!(text.contains("llama-4-scout (fp8) on h100, TP 4"), "{text}");
    assert!(text.contains("reaches the engine"), "client-timed: {text}");
}

/// A copy of `LMBench_sharegpt_output_4.csv` without its deployment file.
fn bare_csv(d: &Path) -> PathBuf {
    let p = d.join("LMBench_x.csv");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(SCOUT4), &p).unwrap();
    p
}

#[test]
fn a_run_without_metadata_takes_model_gpu_and_parallelism_from_flags() {
    let d = tempfile::tempdir().unwrap();
    let p = bare_csv(d.path());
    let o = sim()
        .arg("validate")
        .arg(&p)
        .args(["--profile", "auto", "--no-plots", "--out"])
        .arg(d.path().join("v"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // Nothing says the engine's batch limits: the GPU gives vLLM's defaults.
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gpu NAME"));
    let text = run_ok(&[
        "validate",
        p.to_str().unwrap(),
        "--profile",
        "auto",
        "--model",
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        "--gpu",
        "NVIDIA-H100-80GB-HBM3",
        "--engine-args",
        "--tensor-parallel-size 4 --gpu-memory-utilization 0.95",
        "--no-plots",
        "--out",
        d.path().join("v2").to_str().unwrap(),
    ]);
    assert!(text.contains("llama-4-scout (fp8) on h100, TP 4"), "{text}");
    assert!(text.contains("max_num_seqs = 1024 (vLLM's default on h100)"), "{text}");
    // Unknown names are refused with the list to look in.
    let o = sim()
        .arg("validate")
        .arg(&p)
        .args([
            "--profile",
            "auto",
            "--model",
            "nonesuch-7b",
            "--gpu",
            "h100",
            "--no-plots",
            "--out",
        ])
        .arg(d.path().join("v3"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sim profiles --models"));
}

/// The leave-one-out figures the physics model is held to on the shipped runs: each
/// group (a model on a GPU) predicted with coefficients fitted to the other groups.
/// docs/validation.md gives the table; the targets (median E2E <= 10 %, TTFT
/// <= 20 %, every run within 25 %) are not all met (see there): these bounds are the
/// figures reached, so that a change that makes the model worse fails here.
const LOO_BOUNDS: [f64; 3] = [13.0, 24.0, 38.0];

#[test]
fn leave_one_group_out_holds_its_figures() {
    let d = tempfile::tempdir().unwrap();
    let text = run_ok(&["validate", "--leave-one-out", RUNS, "--out", d.path().to_str().unwrap()]);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("leave-one-out.json")).unwrap()).unwrap();
    let m = &v["median_abs_err_pct"];
    let (e2e, ttft) = (m["e2e_mean"].as_f64().unwrap(), m["ttft_mean"].as_f64().unwrap());
    let worst = v["worst_abs_e2e_mean_err_pct"].as_f64().unwrap();
    assert!(e2e <= LOO_BOUNDS[0], "median E2E {e2e:.1} %\n{text}");
    assert!(ttft <= LOO_BOUNDS[1], "median TTFT {ttft:.1} %\n{text}");
    assert!(worst <= LOO_BOUNDS[2], "worst E2E {worst:.1} %\n{text}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 15, "every run predicted once");
    assert_eq!(v["folds"].as_array().unwrap().len(), 4, "one fold per model on a GPU");
    assert!(text.contains("targets: median E2E mean error"), "{text}");
    // The band printed beside every auto prediction is what this judgement measures.
    let h = fleetsim::calibrate::physics::HELD_OUT;
    let worst_ttft = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ttft_mean_err_pct"].as_f64().unwrap().abs())
        .fold(0.0, f64::max);
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    assert_eq!(
        [h.e2e_median, h.e2e_worst, h.ttft_median, h.ttft_worst, h.tpot_median],
        [
            r1(e2e),
            r1(worst),
            r1(ttft),
            r1(worst_ttft),
            r1(m["tpot_mean"].as_f64().unwrap())
        ],
        "calibrate::physics::HELD_OUT differs from the leave-one-out figures:\n{text}"
    );
    assert_eq!(h.runs, 15);
}

#[test]
fn the_shipped_coefficients_are_what_the_documented_command_fits() {
    let text = run_ok(&["calibrate", "--physics", RUNS]);
    assert!(
        text.contains("the shipped coefficients (profiles::auto::SHIPPED) are these"),
        "refit differs from the shipped coefficients:\n{text}"
    );
}

#[test]
fn a_window_fit_predicts_the_rest_of_the_run() {
    // Fitted on the series while the first half of the requests arrive (14.5 s of each
    // 29 s arrival span: 154 requests), every request replayed; scored on the 146 that
    // arrive after.
    let d = tempfile::tempdir().unwrap();
    for (run, extra, bounds) in [
        // The targets: E2E mean within 5 %, TTFT mean within 10 %.
        (RTX4090, &[][..], [5.0, 10.0]),
        // Missed here (docs/validation.md): its first 14.5 s are the admission ramp, which
        // does not show the mixed prefill-and-decode steps that dominate the second half.
        (QWEN, &["--gpu", "rtx-pro-6000"][..], [17.0, 17.0]),
    ] {
        let p = d.path().join("w.toml");
        let mut args = vec!["calibrate", run, "--window", ":14.5", "-o", p.to_str().unwrap()];
        args.extend_from_slice(extra);
        let text = run_ok(&args);
        assert!(text.contains("window: the series in --window :14.5 fitted"), "{text}");
        assert!(text.contains("prompt tokens in --window :14.5"), "{text}");
        let out = d.path().join("v");
        let mut args = vec![
            "validate",
            run,
            "--profile",
            p.to_str().unwrap(),
            "--window",
            "14.5:",
            "--no-plots",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let text = run_ok(&args);
        assert!(text.contains("146 requests arriving in --window 14.5:"), "{text}");
        let (e2e, ttft) = (metric(&out, "e2e_mean_err_pct"), metric(&out, "ttft_mean_err_pct"));
        assert!(e2e.abs() <= bounds[0], "{run}: E2E {e2e:.1} %");
        assert!(ttft.abs() <= bounds[1], "{run}: TTFT {ttft:.1} %");
    }
}

/// A copy of the RTX 4090 run with `meta.json`, `requests.jsonl` and `timeseries.csv`
/// rewritten.
fn variant(d: &Path, meta: impl Fn(&str) -> String, req: impl Fn(&str) -> String, series: Option<&str>) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(RTX4090);
    let run = d.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let read = |n: &str| std::fs::read_to_string(src.join(n)).unwrap();
    std::fs::write(run.join("meta.json"), meta(&read("meta.json"))).unwrap();
    std::fs::write(run.join("requests.jsonl"), req(&read("requests.jsonl"))).unwrap();
    let ts = match series {
        Some(other) => {
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(other).join("timeseries.csv")).unwrap()
        }
        None => read("timeseries.csv"),
    };
    std::fs::write(run.join("timeseries.csv"), ts).unwrap();
    run
}

/// Every tenth line's `queued_ts` 0.4 ms before the line above it, as two data-parallel
/// engines stamp their queues.
fn jitter(req: &str) -> String {
    let lines: Vec<String> = req.lines().map(str::to_string).collect();
    let mut out = lines.clone();
    for i in (10..lines.len()).step_by(10) {
        let prev: Value = serde_json::from_str(&lines[i - 1]).unwrap();
        let mut v: Value = serde_json::from_str(&lines[i]).unwrap();
        v["queued_ts"] = (prev["queued_ts"].as_f64().unwrap() - 0.0004).into();
        out[i] = v.to_string();
    }
    out.join("\n")
}

#[test]
fn a_data_parallel_run_is_read_and_replayed_as_its_engines() {
    let d = tempfile::tempdir().unwrap();
    let dp = |m: &str| m.replace("\"data_parallel_size\": 1", "\"data_parallel_size\": 2");
    let one = d.path().join("one");
    run_ok(&[
        "validate",
        RTX4090,
        "--profile",
        "auto",
        "--no-plots",
        "--out",
        one.to_str().unwrap(),
    ]);
    let sub = d.path().join("dp");
    std::fs::create_dir_all(&sub).unwrap();
    let run = variant(&sub, dp, jitter, None);
    let out = d.path().join("two");
    let text = run_ok(&[
        "validate",
        run.to_str().unwrap(),
        "--profile",
        "auto",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(text.contains("2 data-parallel engines (vLLM's balancer)"), "{text}");
    assert!(text.contains("data_parallel_size = 2"), "{text}");
    assert!(text.contains("lines queued before the line above them"), "{text}");
    // Two engines serve the same requests far faster than one.
    let (a, b) = (
        metric(&one, "e2e_mean_simulated_s"),
        metric(&out, "e2e_mean_simulated_s"),
    );
    assert!(b < 0.7 * a, "one engine {a:.1} s, two {b:.1} s");
    // A mixture-of-experts model's data-parallel ranks step together.
    let sub = d.path().join("moe");
    std::fs::create_dir_all(&sub).unwrap();
    let run = variant(
        &sub,
        |m| dp(m).replace("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B"),
        jitter,
        None,
    );
    let text = run_ok(&[
        "validate",
        run.to_str().unwrap(),
        "--profile",
        "auto",
        "--no-plots",
        "--out",
        d.path().join("moe-v").to_str().unwrap(),
    ]);
    assert!(text.contains("stepping together: MoE ranks"), "{text}");
    assert!(text.contains("qwen3-30b-a3b on rtx-4090"), "{text}");
}

#[test]
fn a_fit_that_cannot_be_the_run_is_refused_out_loud() {
    let d = tempfile::tempdir().unwrap();
    // A series that stops after 20 s is not the whole run's.
    let sub = d.path().join("short");
    std::fs::create_dir_all(&sub).unwrap();
    let run = variant(&sub, str::to_string, str::to_string, None);
    let ts = std::fs::read_to_string(run.join("timeseries.csv")).unwrap();
    std::fs::write(
        run.join("timeseries.csv"),
        ts.lines().take(21).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let p = d.path().join("p.toml");
    let o = sim().arg("calibrate").arg(&run).arg("-o").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("disagree on token totals") && e.contains("--window"), "{e}");
    assert!(!p.exists());
    // Another run's series, with the same token totals: the replay cannot follow it.
    let sub = d.path().join("other");
    std::fs::create_dir_all(&sub).unwrap();
    let run = variant(&sub, str::to_string, str::to_string, Some(QWEN));
    let o = sim().arg("calibrate").arg(&run).arg("-o").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("far above what a faithful replay reaches") && e.contains("not written"),
        "{e}"
    );
    assert!(!p.exists());
    let text = run_ok(&[
        "calibrate",
        run.to_str().unwrap(),
        "-o",
        p.to_str().unwrap(),
        "--accept-poor-fit",
    ]);
    assert!(text.contains("WARNING: the fit's loss"), "{text}");
    assert!(p.exists());
}

#[test]
fn a_profile_file_gives_its_step_time_and_the_run_keeps_its_settings() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "p.toml",
        "[profile]\nname = \"other\"\nsource = \"hand\"\ngenerator = \"test\"\n\n[step_time]\nbeta0_us = 20000.0\nbeta1_us = 90.0\nbeta2_us = 40.0\n\n[engine]\nmax_num_seqs = 64\nmax_num_batched_tokens = 8192\nkv_blocks = 9000\nkv_blocks_from = \"hand\"\nblock_size_tokens = 16\nprefix_caching = true\nreserve_full_isl = true\n\n[fit]\nloss = 0.0\nmethod = \"none\"\nsimulations = 0\niterations = 0\n",
    );
    let text = run_ok(&[
        "validate",
        RTX4090,
        "--profile",
        p.to_str().unwrap(),
        "--no-plots",
        "--out",
        d.path().join("v").to_str().unwrap(),
    ]);
    assert!(text.contains("max_num_seqs = 256 (measurement)"), "{text}");
    assert!(
        text.contains("the profile file's max_num_seqs is 64, this run's 256: the run's is used"),
        "{text}"
    );
    assert!(
        text.contains("the profile file's kv_blocks is 9000, this run's 2587"),
        "{text}"
    );
}

#[test]
fn auto_profiles_serve_scenario_groups() {
    let d = tempfile::tempdir().unwrap();
    let body = "[[workload.groups]]\nname = \"g\"\nsessions = 20\narrival = { kind = \"poisson\", start_s = 0, rate_per_s = 4 }\nturns = 1\ninput_tokens = 500\noutput_tokens = 50\n";
    let s = write(
        d.path(),
        "s.toml",
        &format!(
            "name = \"auto\"\nrouter.policy.kind = \"roundrobin\"\n[[backends.groups]]\nname = \"moe\"\ncount = 2\nprofile = \"auto\"\nmodel = \"Qwen/Qwen3-30B-A3B\"\ngpu = \"rtx-pro-6000\"\n[[backends.groups]]\nname = \"dense\"\ncount = 1\nprofile = \"auto\"\nmodel = \"meta-llama/Llama-3.1-70B-Instruct\"\ngpu = \"h100\"\ntp = 4\n{body}"
        ),
    );
    let (sc, w) = fleetsim::scenario::load(&s, &[]).map(|(a, b, _)| (a, b)).unwrap();
    let cfg = |i: usize| match &sc.sim.models[i] {
        fleetsim::sim::BackendModel::Vllm(c) => c.clone(),
        _ => unreachable!(),
    };
    assert!(cfg(0).step_time.physics.is_some() && cfg(2).step_time.physics.is_some());
    // vLLM's defaults on a >= 70 GiB GPU; KV blocks derived from the datasheets.
    assert_eq!((cfg(0).max_num_seqs, cfg(0).max_num_batched_tokens), (1024, 8192));
    assert!(
        cfg(0).kv_blocks > 10_000 && cfg(2).kv_blocks > 10_000,
        "{} {}",
        cfg(0).kv_blocks,
        cfg(2).kv_blocks
    );
    let res = crate::common::run_full(&sc, &w);
    assert_eq!(res.summary.requests.finished, 20);
    // A single table names the model with `model`; a missing GPU names its key.
    let one = write(
        d.path(),
        "one.toml",
        &format!(
            "name = \"one\"\nrouter.policy.kind = \"roundrobin\"\n[backends]\ncount = 1\nprofile = \"auto\"\nmodel = \"qwen3-8b\"\ngpu = \"l40s\"\n{body}"
        ),
    );
    assert!(fleetsim::scenario::load(&one, &[]).is_ok());
    let bad = write(
        d.path(),
        "bad.toml",
        &std::fs::read_to_string(&one).unwrap().replace("gpu = \"l40s\"\n", ""),
    );
    let o = sim().arg("run").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("backends.gpu") && e.contains("sim profiles --gpus"), "{e}");
    let stray = write(
        d.path(),
        "stray.toml",
        &std::fs::read_to_string(&one).unwrap().replace(
            "profile = \"auto\"\nmodel = \"qwen3-8b\"\n",
            "profile = \"llama-3.1-8b/h100/tp1\"\n",
        ),
    );
    let o = sim().arg("run").arg(&stray).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("backends.gpu") && e.contains("only applies with profile = \"auto\""),
        "{e}"
    );
}
