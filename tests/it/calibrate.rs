//! `sim calibrate` and `sim validate` on the shipped real vLLM runs
//! (`traces/vllm-runs/`), the measurement readers, and their errors.
//!
//! The fit and the replay are deterministic, so the validation figures are exact for a
//! given build: the bounds below are the targets the calibration must meet (E2E mean and
//! p90 and TPOT mean within 3 %, TTFT mean within 8 %), not tolerances around a noisy
//! value.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{sim, write};

const RTX4090: &str = "traces/vllm-runs/RTX4090_Llama-3.1-8B";
const QWEN: &str = "traces/vllm-runs/RTXPRO6000_Qwen3-32B";
/// The RTX PRO 6000's memory (97,887 MiB), which the Qwen3-32B run does not record.
const PRO6000_GIB: &str = "95.59";

fn calibrate(run: &str, out: &Path, extra: &[&str]) -> String {
    let o = sim()
        .args(["calibrate", run, "-o"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn validate(run: &str, profile: &Path, out: &Path, extra: &[&str]) -> (std::process::Output, Value) {
    let o = sim()
        .args(["validate", run, "--profile"])
        .arg(profile)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(out.join("validation.json")).unwrap()).unwrap();
    (o, v)
}

fn metric(v: &Value, k: &str) -> f64 {
    v["metrics"][k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn assert_targets(v: &Value, run: &str) {
    for (k, bound) in [
        ("e2e_mean_err_pct", 3.0),
        ("e2e_p90_err_pct", 3.0),
        ("tpot_mean_err_pct", 3.0),
        ("ttft_mean_err_pct", 8.0),
    ] {
        let x = metric(v, k);
        assert!(x.abs() <= bound, "{run}: {k} = {x:.2} %, target within {bound} %");
    }
}

#[test]
fn the_rtx4090_run_calibrates_and_validates_within_the_targets() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("rtx4090.toml");
    // The linear form (the physics form's test is in `physics`).
    let text = calibrate(RTX4090, &p, &["--form", "linear"]);
    assert!(text.contains("num_gpu_blocks 2588 recorded"), "{text}");
    assert!(text.contains("simulations"), "the fit's cost is reported: {text}");
    // Deterministic: a second fit writes the same bytes.
    let p2 = d.path().join("again.toml");
    calibrate(RTX4090, &p2, &["--form", "linear"]);
    assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&p2).unwrap());
    let f = fleetsim::profiles::file::ProfileFile::read(&p).unwrap();
    assert_eq!(f.profile.vllm_version.as_deref(), Some("0.19.0"));
    assert_eq!(f.profile.measured_at.as_deref(), Some("2026-08-20T23:19:39.992496Z"));
    assert_eq!((f.engine.kv_blocks, f.engine.max_num_seqs), (2587, 256));
    assert!(f.engine.reserve_full_isl, "vLLM 0.19's resolved config says so");
    assert!(f.fit.loss < 0.15, "fit loss {}", f.fit.loss);
    let (o, v) = validate(
        RTX4090,
        &p,
        &d.path().join("v"),
        &["--check", "abs(e2e_mean_err_pct) <= 3"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("PASS abs(e2e_mean_err_pct) <= 3"));
    assert_targets(&v, RTX4090);
    // The KV-bound run preempts in the replay, as the measured engine's cache forces.
    assert!(metric(&v, "sim_preemptions") > 0.0);
    for f in ["validation.md", "validation.png", "validation.svg", "requests.csv"] {
        assert!(d.path().join("v").join(f).is_file(), "{f}");
    }
}

#[test]
fn the_qwen3_32b_run_calibrates_with_a_derived_kv_cache_and_a_context_term() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("qwen.toml");
    // The run records no KV blocks or GPU: refused without the GPU's memory.
    let o = sim().args(["calibrate", QWEN, "-o"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gpu-memory-gib"));
    let text = calibrate(QWEN, &p, &["--gpu-memory-gib", PRO6000_GIB]);
    assert!(text.contains("derived as vLLM does: qwen3-32b"), "{text}");
    let f = fleetsim::profiles::file::ProfileFile::read(&p).unwrap();
    assert!(f.step_time.beta3_us > 0.0, "the context term pays for itself here");
    let (o, v) = validate(QWEN, &p, &d.path().join("v"), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_targets(&v, QWEN);
    // A bound that fails exits 1.
    let (o, _) = validate(
        QWEN,
        &p,
        &d.path().join("v2"),
        &["--check", "abs(e2e_mean_err_pct) < 0.01"],
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_profile_file_serves_a_scenario_and_is_listed() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "p.toml",
        "[profile]\nname = \"mine\"\nsource = \"hand\"\ngenerator = \"test\"\n\n[step_time]\nbeta0_us = 20000.0\nbeta1_us = 90.0\nbeta2_us = 40.0\n\n[engine]\nmax_num_seqs = 4\nmax_num_batched_tokens = 2048\nkv_blocks = 2000\nkv_blocks_from = \"hand\"\nblock_size_tokens = 16\nprefix_caching = true\nreserve_full_isl = true\n\n[fit]\nloss = 0.0\nmethod = \"none\"\nsimulations = 0\niterations = 0\n",
    );
    let s = write(
        d.path(),
        "s.toml",
        "name = \"withfile\"\nrouter.policy.kind = \"roundrobin\"\n[backends]\ncount = 1\nprofile = \"file:p.toml\"\n[[workload.groups]]\nname = \"g\"\nsessions = 6\narrival = { kind = \"burst\", at_s = 0, spread_s = 0 }\nturns = 1\ninput_tokens = 100\noutput_tokens = 10\n",
    );
    let (sc, w) = fleetsim::scenario::load(&s, &[]).map(|(a, b, _)| (a, b)).unwrap();
    let cfg = match &sc.sim.models[0] {
        fleetsim::sim::BackendModel::Vllm(c) => c.clone(),
        _ => unreachable!(),
    };
    assert_eq!((cfg.max_num_seqs, cfg.kv_blocks, cfg.reserve_full_isl), (4, 2000, true));
    assert_eq!(cfg.step_time.beta0_us, 20000.0);
    let res = crate::common::run_full(&sc, &w);
    assert_eq!(res.summary.requests.finished, 6);
    // Not found: one line naming the key.
    let bad = write(
        d.path(),
        "bad.toml",
        &std::fs::read_to_string(&s).unwrap().replace("p.toml", "nope.toml"),
    );
    let o = sim().arg("run").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("backends.profile") && err.contains("nope.toml"), "{err}");
    let o = sim().arg("profiles").arg(&p).output().unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("sim calibrate on hand"));
}

/// A copy of the RTX 4090 run with `requests.jsonl` rewritten by `f`.
fn broken_run(d: &Path, f: impl Fn(&str) -> String) -> PathBuf {
    let run = d.join("run");
    std::fs::create_dir_all(&run).unwrap();
    for n in ["meta.json", "timeseries.csv"] {
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(RTX4090).join(n), run.join(n)).unwrap();
    }
    let req = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(RTX4090)
            .join("requests.jsonl"),
    )
    .unwrap();
    std::fs::write(run.join("requests.jsonl"), f(&req)).unwrap();
    run
}

fn refused(path: &Path, extra: &[&str]) -> String {
    let o = sim()
        .arg("validate")
        .arg(path)
        .args(["--profile", "llama-3.1-8b/h100/tp1", "--out"])
        .arg(path.with_extension("out"))
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    let e = String::from_utf8(o.stderr).unwrap();
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    e
}

#[test]
fn bad_measurements_are_one_line_errors_naming_file_line_and_field() {
    let d = tempfile::tempdir().unwrap();
    let line3 = |req: &str, g: &dyn Fn(&str) -> String| -> String {
        req.lines()
            .enumerate()
            .map(|(i, l)| if i == 2 { g(l) } else { l.to_string() })
            .collect::<Vec<_>>()
            .join("\n")
    };
    type Edit = Box<dyn Fn(&str) -> String>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "missing field",
            Box::new(|l: &str| l.replace("\"first_token_ts\"", "\"first_tok\"")),
            "column `first_token_ts`",
        ),
        (
            "zero-length",
            Box::new(|l: &str| l.replace("\"output_toks\": 769", "\"output_toks\": 0")),
            "column `output_toks`",
        ),
        (
            "NaN",
            Box::new(|l: &str| l.replace("\"input_toks\": 1320", "\"input_toks\": NaN")),
            ":3",
        ),
        (
            "inconsistent clock",
            Box::new(|l: &str| l.replace("\"last_token_ts\": 27562.305334095", "\"last_token_ts\": 27537.0")),
            "column `last_token`",
        ),
        (
            "unsorted",
            Box::new(|l: &str| l.replace("\"queued_ts\": 27537.221809715", "\"queued_ts\": 27530.0")),
            "column `queued_ts`",
        ),
    ];
    for (i, (what, g, want)) in cases.into_iter().enumerate() {
        let sub = d.path().join(format!("c{i}"));
        std::fs::create_dir_all(&sub).unwrap();
        let run = broken_run(&sub, |req| line3(req, &*g));
        let e = refused(&run, &[]);
        assert!(e.contains("requests.jsonl:3") && e.contains(want), "{what}: {e}");
    }
    // A bench JSON whose arrays disagree, and a query_range whose samples go back.
    let b = write(
        d.path(),
        "bench.json",
        r#"{"input_lens":[10,20],"output_lens":[5],"ttfts":[0.1,0.2],"itls":[[],[]],"start_times":[0,1]}"#,
    );
    let e = refused(
        &b,
        &[
            "--engine-args",
            "--max-num-seqs 4 --max-num-batched-tokens 512 --num-gpu-blocks-override 100",
        ],
    );
    assert!(e.contains("bench.json") && e.contains("column `output_lens`"), "{e}");
    let q = write(
        d.path(),
        "q.json",
        r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"vllm:generation_tokens_total"},"values":[[2,"1"],[1,"2"]]}]}}"#,
    );
    let e = refused(Path::new(RTX4090), &["--series", q.to_str().unwrap()]);
    assert!(e.contains("q.json") && e.contains("data.result[0].values[1]"), "{e}");
}

/// A `vllm bench serve --save-detailed` result: per-request start, TTFT and gaps.
fn bench_json(n: usize) -> String {
    let mut inl = Vec::new();
    let mut outl = Vec::new();
    let mut ttft = Vec::new();
    let mut itls = Vec::new();
    let mut start = Vec::new();
    for i in 0..n {
        inl.push((100 + 37 * (i % 7)).to_string());
        outl.push("20".to_string());
        ttft.push(format!("{}", 0.05 + 0.01 * (i % 3) as f64));
        itls.push(format!("[{}]", vec!["0.02"; 19].join(",")));
        start.push(format!("{}", 1000.0 + 0.25 * i as f64));
    }
    format!(
        r#"{{"date":"20260101-120000","model_id":"meta-llama/Llama-3.1-8B","max_concurrency":null,"input_lens":[{}],"output_lens":[{}],"ttfts":[{}],"itls":[{}],"start_times":[{}],"errors":[{}]}}"#,
        inl.join(","),
        outl.join(","),
        ttft.join(","),
        itls.join(","),
        start.join(","),
        vec!["\"\""; n].join(",")
    )
}

#[test]
fn a_vllm_bench_serve_result_is_read_with_its_token_series() {
    let d = tempfile::tempdir().unwrap();
    let b = write(d.path(), "bench.json", &bench_json(40));
    let m = fleetsim::measure::load(&b, None).unwrap();
    assert_eq!(m.requests.len(), 40);
    let r = &m.requests[1];
    assert!((r.queued_s - 0.25).abs() < 1e-9 && (r.ttft_s() - 0.06).abs() < 1e-9);
    assert!((r.e2e_s() - (0.06 + 19.0 * 0.02)).abs() < 1e-9);
    let s = m.series.as_ref().unwrap();
    let gen_total: f64 = s.rows.iter().filter_map(|r| r.gen_tps).sum::<f64>() * s.interval_s;
    assert_eq!(gen_total, 800.0, "every output token counted once");
    // Calibrating needs the engine's flags; with them it fits and writes a profile.
    let p = d.path().join("p.toml");
    let o = sim().args(["calibrate"]).arg(&b).arg("-o").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-num-seqs"));
    calibrate(
        b.to_str().unwrap(),
        &p,
        &[
            "--engine-args",
            "--max-num-seqs 8 --max-num-batched-tokens 2048 --num-gpu-blocks-override 1000",
        ],
    );
    assert!(fleetsim::profiles::file::ProfileFile::read(&p).is_ok());
}

#[test]
fn an_openmetrics_dump_gives_the_engine_series() {
    let d = tempfile::tempdir().unwrap();
    let mut text = String::from("# TYPE vllm:generation_tokens counter\n");
    for k in 0..5 {
        let t = 1_700_000_000 + k;
        text.push_str(&format!(
            "vllm:generation_tokens_total{{engine=\"0\"}} {} {t}\nvllm:num_requests_running{{engine=\"0\"}} {} {t}\n",
            100 * k,
            k
        ));
    }
    let om = write(d.path(), "m.txt", &text);
    let m = fleetsim::measure::load(Path::new(env!("CARGO_MANIFEST_DIR")).join(RTX4090).as_path(), Some(&om)).unwrap();
    let s = m.series.unwrap();
    assert_eq!(s.rows.len(), 4);
    assert!(s.rows.iter().all(|r| r.gen_tps == Some(100.0)));
    assert_eq!(s.rows[3].running, Some(4.0));
    // Two engines' series are refused.
    let two = write(
        d.path(),
        "two.txt",
        &format!("{text}vllm:num_requests_running{{engine=\"1\"}} 1 1700000009\n"),
    );
    let e = fleetsim::measure::load(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(RTX4090).as_path(),
        Some(&two),
    )
    .unwrap_err();
    assert!(e.to_string().contains("select one engine"), "{e}");
}
