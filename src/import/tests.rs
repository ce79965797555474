use super::*;
use crate::backend::vllm::VllmConfig;
use crate::sim::BackendModel;

fn args(router: Option<&str>, helm: Option<&Path>, vllm: Option<&str>) -> ImportArgs {
    ImportArgs {
        router_args: router.map(String::from),
        helm: helm.map(Path::to_path_buf),
        vllm_args: vllm.map(String::from),
        trace: None,
        gpu: "h100".into(),
        allow_unknown: false,
        out: PathBuf::from("out/imported.toml"),
    }
}

fn load(text: &str) -> crate::scenario::Scenario {
    crate::scenario::load_str(text, "imported.toml", "imported", &[])
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .0
}

fn vllm(m: &BackendModel) -> &VllmConfig {
    match m {
        BackendModel::Vllm(v) => v,
        BackendModel::Queueing { .. } => panic!("vLLM expected"),
    }
}

/// The operator setup of the motivating report (production-stack #1073): 2 static
/// backends, prefixaware, stats every 10 s, a prefix threshold, 4 sequences per engine.
const REPORT_ROUTER: &str = "vllm-router --port 8001 --service-discovery static \
    --static-backends http://backend-0:8000,http://backend-1:8000 \
    --static-models meta-llama/Llama-3.1-8B-Instruct,meta-llama/Llama-3.1-8B-Instruct \
    --routing-logic prefixaware --engine-stats-interval 10 --prefix-min-match-length 16384";
const REPORT_VLLM: &str = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 4 --max-num-batched-tokens 8192 --enable-prefix-caching --port 8000";

#[test]
fn the_reports_router_command_line_is_burst8s_fleet_and_router() {
    let text = import(&args(Some(REPORT_ROUTER), None, Some(REPORT_VLLM))).unwrap();
    let got = load(&text);
    let (want, _, _) = crate::scenario::load(Path::new("scenarios/burst8.toml"), &[]).unwrap();
    assert_eq!(got.sim.router, want.sim.router, "router settings and policy");
    assert_eq!(got.sim.backends, want.sim.backends, "names and URLs in discovery order");
    assert_eq!(got.sim.models.len(), 2);
    for (g, w) in got.sim.models.iter().zip(&want.sim.models) {
        let (g, w) = (vllm(g), vllm(w));
        // burst8 writes BLIS's coefficients to 0.01 µs; the profile keeps every digit.
        for (a, b) in [
            (g.step_time.beta0_us, w.step_time.beta0_us),
            (g.step_time.beta1_us, w.step_time.beta1_us),
            (g.step_time.beta2_us, w.step_time.beta2_us),
        ] {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
        let strip = |v: &VllmConfig| VllmConfig {
            step_time: Default::default(),
            ..v.clone()
        };
        assert_eq!(strip(g), strip(w), "engine flags and KV capacity");
    }
    // Comments name the flag each value came from, and the ignored flags are listed.
    assert!(text.contains("--engine-stats-interval 10 (--router-args)"), "{text}");
    assert!(text.contains("--max-num-seqs 4 (--vllm-args)"), "{text}");
    assert!(text.contains("#   --port 8001 (--router-args)"), "{text}");
    assert!(
        text.contains("#   --service-discovery static (--router-args)"),
        "{text}"
    );
    assert!(text.contains("profile = \"llama-3.1-8b/h100/tp1\""), "{text}");
}

#[test]
fn helm_values_in_the_charts_schema() {
    let path = Path::new("docs/examples/helm-values.yaml");
    let text = import(&args(None, Some(path), None)).unwrap();
    let s = load(&text);
    let names: Vec<&str> = s.sim.backends.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["llama8b-0", "llama8b-1", "llama8b-2", "qwen14b-0", "qwen14b-1"]);
    let labels: Vec<&str> = s.sim.labels.iter().map(|l| l.profile.as_str()).collect();
    assert_eq!(labels[0], "llama-3.1-8b/h100/tp1");
    assert_eq!(labels[4], "qwen3-14b/a100/tp1");
    let (l, q) = (vllm(&s.sim.models[0]), vllm(&s.sim.models[3]));
    assert_eq!(
        (l.max_num_seqs, l.max_num_batched_tokens, l.prefix_caching),
        (128, 8192, true)
    );
    // No enablePrefixCaching: the chart passes --no-enable-prefix-caching. A100 defaults.
    assert_eq!(
        (q.max_num_seqs, q.max_num_batched_tokens, q.prefix_caching),
        (64, 2048, false)
    );
    assert_eq!((l.kv_blocks, q.kv_blocks), (29_205, 18_223));
    assert_eq!(s.sim.router.replicas, 2);
    // engineScrapeInterval absent: the chart's 15, not the router's 30.
    assert_eq!(s.sim.router.engine_stats_interval.as_secs_f64(), 15.0);
    assert!(
        text.contains("chart default 15 (the router's own default is 30)"),
        "{text}"
    );
    assert!(
        text.contains("--disable-log-requests (servingEngineSpec.modelSpec[0].vllmConfig.extraArgs)"),
        "{text}"
    );
    assert!(
        text.contains("servingEngineSpec.modelSpec[1].vllmConfig.dtype (--helm)"),
        "{text}"
    );
    assert!(text.contains("--log-level info (routerSpec.extraArgs)"), "{text}");
}

#[test]
fn without_a_trace_the_template_workload_runs() {
    let text = import(&args(
        None,
        None,
        Some("vllm serve Qwen/Qwen3-14B --max-model-len 8192"),
    ))
    .unwrap();
    assert!(text.contains("Template workload"), "{text}");
    let (s, w, _) = crate::scenario::load_str(&text, "i.toml", "i", &[]).unwrap();
    let res = crate::sim::Simulation::new(s.sim.clone(), &w, crate::sim::RunOptions::summary_only())
        .run()
        .unwrap();
    assert_eq!(res.summary.requests.finished, res.summary.requests.planned);
    assert_eq!(s.groups[0].max_context_tokens, Some(8192));
}

#[test]
fn the_template_exposes_prefix_aware_routing_piling_agents_on_one_backend() {
    let text = import(&args(
        Some("--routing-logic prefixaware --prefix-min-match-length 2048 --static-backends http://a,http://b,http://c,http://d"),
        None,
        None,
    ))
    .unwrap();
    assert!(text.contains("2048-character minimum match"), "{text}");
    assert!(
        text.contains("name = \"agents\"") && text.contains("name = \"chat\""),
        "{text}"
    );
    let (s, w, _) = crate::scenario::load_str(&text, "i.toml", "i", &[]).unwrap();
    // The shared system prompt is above the threshold (2048 characters, 4 per token).
    assert!(s.groups[0].system_prompt_tokens * 4 > 2048);
    let res = crate::sim::Simulation::new(s.sim.clone(), &w, crate::sim::RunOptions::summary_only())
        .run()
        .unwrap();
    // Every agent follows the first one: the failure the template is for.
    let most = res
        .summary
        .backends
        .iter()
        .map(|b| b.first_turn_sessions)
        .max()
        .unwrap();
    assert!(most >= 16, "{:?}", res.summary.backends);
    assert!(
        res.summary.request_jain_index < 0.6,
        "{}",
        res.summary.request_jain_index
    );
}

#[test]
fn every_flag_and_helm_key_is_listed_as_read_or_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("v.yaml");
    std::fs::write(
        &values,
        "servingEngineSpec:\n  runtimeClassName: \"\"\n  modelSpec:\n  - name: m\n    repository: vllm/vllm-openai\n    tag: latest\n    modelURL: meta-llama/Llama-3.1-8B-Instruct\n    replicaCount: 2\n    requestCPU: 8\n    requestMemory: 32Gi\n    pvcStorage: 50Gi\nrouterSpec:\n  routingLogic: roundrobin\n  resources: {}\n",
    )
    .unwrap();
    let text = import(&args(
        Some("--static-models x,y --routing-logic session --port 8001"),
        Some(&values),
        None,
    ))
    .unwrap();
    let (read, ignored) = text.split_once("# Ignored").expect("an ignored list");
    for k in ["repository", "tag", "requestCPU", "requestMemory", "pvcStorage"] {
        assert!(
            ignored.contains(&format!("servingEngineSpec.modelSpec[0].{k} (--helm;")),
            "{k}: {text}"
        );
    }
    assert!(ignored.contains("servingEngineSpec.runtimeClassName"), "{text}");
    assert!(ignored.contains("routerSpec.resources"), "{text}");
    assert!(
        ignored.contains("--static-models x,y (--router-args) (the Helm engines' modelURL name the models)"),
        "{text}"
    );
    assert!(ignored.contains("--port 8001 (--router-args)"), "{text}");
    for k in [
        "modelSpec[0].replicaCount",
        "modelSpec[0].modelURL",
        "routerSpec.routingLogic",
        "--routing-logic session (--router-args)",
    ] {
        assert!(read.contains(k), "{k}: {text}");
    }
}

#[test]
fn bad_input_is_one_line_naming_the_flag_or_key() {
    let e = import(&args(Some("--routing-logic roundrobin --frobnicate 3"), None, None)).unwrap_err();
    assert_eq!(
        e,
        "--router-args: unknown flag `--frobnicate` (pass --allow-unknown to list it as ignored)"
    );
    let mut a = args(Some("--routing-logic roundrobin --frobnicate 3"), None, None);
    a.allow_unknown = true;
    assert!(
        import(&a)
            .unwrap()
            .contains("#   --frobnicate 3 (--router-args, unknown)")
    );
    let e = import(&args(None, None, Some("vllm serve m --max-num-seqs many"))).unwrap_err();
    assert_eq!(e, "--vllm-args: `--max-num-seqs`: expects a number, got `many`");
    let e = import(&args(Some("--routing-logic disaggregated_prefill"), None, None)).unwrap_err();
    assert!(e.contains("not modelled"), "{e}");
    // Impossible memory: 70B over 4 GPUs at 30% of 80 GiB leaves nothing for the cache.
    let e = import(&args(
        None,
        None,
        Some("vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 4 --gpu-memory-utilization 0.3"),
    ))
    .unwrap_err();
    assert!(
        e.contains("no KV cache fits") && e.contains("weights take 32.85 GiB per GPU"),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

#[test]
fn bad_yaml_and_bad_values_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.yaml");
    std::fs::write(&p, "routerSpec:\n  routingLogic: [unclosed\n").unwrap();
    let e = import(&args(None, Some(&p), None)).unwrap_err();
    assert!(e.starts_with(&format!("{}:", p.display())) && !e.contains('\n'), "{e}");
    assert!(e.contains(":3:") || e.contains(":2:"), "{e}");
    std::fs::write(
        &p,
        "servingEngineSpec:\n  modelSpec:\n  - name: a\n    replicaCount: two\n",
    )
    .unwrap();
    let e = import(&args(None, Some(&p), None)).unwrap_err();
    assert!(
        e.ends_with("servingEngineSpec.modelSpec[0].replicaCount: expected an integer, got `two`"),
        "{e}"
    );
}

#[test]
fn trace_paths_are_written_relative_to_the_scenario() {
    assert_eq!(
        relative_to(Path::new("traces"), Path::new("docs/examples")),
        "../../traces"
    );
}

/// Built by string concatenation, the scenario would let a newline in a flag value, a Helm
/// key or the `--helm` path turn the rest into live TOML.
#[test]
fn user_text_never_becomes_toml() {
    let inject = "x\nnetwork = { dispatch_latency_s = 5.0 }\n[router]";
    let check = |text: &str| {
        let t: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(!t.contains_key("network"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("network")), "{text}");
        load(text);
    };
    let text = import(&args(
        Some(&format!("--routing-logic session --session-key '{inject}'")),
        None,
        Some(&format!(
            "vllm serve m --kv-cache-dtype auto --served-model-name '{inject}'"
        )),
    ))
    .unwrap();
    check(&text);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("v{inject}.yaml"));
    std::fs::write(
        &p,
        "servingEngineSpec:\n  modelSpec:\n  - name: a\n    vllmConfig:\n      \"k\\nnetwork = { dispatch_latency_s = 5.0 }\": 1\n",
    )
    .unwrap();
    let text = import(&args(None, Some(&p), None)).unwrap();
    check(&text);
    assert!(text.contains("k\\nnetwork"), "{text}");
}

#[test]
fn a_command_line_written_one_flag_per_line_imports() {
    let per_line = REPORT_ROUTER.replace(" --", "\n--");
    let a = import(&args(Some(&per_line), None, Some(REPORT_VLLM))).unwrap();
    let b = import(&args(Some(REPORT_ROUTER), None, Some(REPORT_VLLM))).unwrap();
    assert_eq!(load(&a).sim.router, load(&b).sim.router);
    // Words after the flags are refused (the router takes none), not dropped.
    let e = import(&args(Some("--routing-logic roundrobin network = 5"), None, None)).unwrap_err();
    assert_eq!(
        e,
        "--router-args: unexpected argument `network` after the flags (the router takes no positional arguments)"
    );
}

#[test]
fn imbalanced_threshold_is_written_as_given_or_refused() {
    let lb = |t: &str| {
        import(&args(
            Some(&format!(
                "--routing-logic load_balanced_kvaware --imbalanced-threshold {t}"
            )),
            None,
            None,
        ))
    };
    let threshold = |t: &str| {
        let policy = load(&lb(t).unwrap()).sim.router.policy;
        // `inf` (upstream's default) is plain `kvaware`.
        let c = policy.get::<crate::policy::kvaware::LoadBalancedKind>();
        match c.or_else(|| policy.get::<crate::policy::kvaware::Kind>()) {
            Some(c) => c.imbalanced_threshold,
            None => panic!("{policy:?}"),
        }
    };
    assert_eq!(threshold("0"), Some(0.0));
    assert_eq!(threshold("2.5"), Some(2.5));
    assert_eq!(threshold("inf"), None);
    for bad in ["-5", "nan"] {
        let e = lb(bad).unwrap_err();
        assert!(
            e.starts_with("--router-args: `--imbalanced-threshold`: must be a number >= 0"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn errors_name_the_flag_or_the_file_and_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.yaml");
    std::fs::write(&p, "routerSpec:\n  routingLogic: bogus\n").unwrap();
    let e = import(&args(None, Some(&p), None)).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: routerSpec.routingLogic: `bogus` is not one of roundrobin, session, prefixaware, kvaware, load_balanced_kvaware (PR #884), loadaware (PR #1035)",
            p.display()
        )
    );
    std::fs::write(
        &p,
        "servingEngineSpec:\n  modelSpec:\n  - name: a\n    vllmConfig:\n      maxNumSeqs: 0\n",
    )
    .unwrap();
    let e = import(&args(None, Some(&p), None)).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: servingEngineSpec.modelSpec[0].vllmConfig.maxNumSeqs: must be at least 1, got 0",
            p.display()
        )
    );
    // "No KV cache fits" names the flags its figures came from.
    let e = import(&args(
        None,
        None,
        Some("vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 4 --gpu-memory-utilization 0.3"),
    ))
    .unwrap_err();
    assert!(
        e.contains("--tensor-parallel-size 4 (--vllm-args)")
            && e.contains("--gpu-memory-utilization 0.3 (--vllm-args): no KV cache fits"),
        "{e}"
    );
}

#[test]
fn a_value_the_scenario_refuses_names_its_flag() {
    let a = args(None, None, Some("vllm serve m --max-num-seqs 99999999999"));
    let (text, origins) = import_with_origins(&a).unwrap();
    let e = crate::scenario::load_str(&text, "o.toml", "o", &[]).unwrap_err();
    let m = refused(&e, &origins);
    assert!(m.starts_with("--max-num-seqs 99999999999 (--vllm-args): "), "{m}");
    assert!(m.contains("backends.max_num_seqs"), "{m}");
    assert!(!m.contains("please report"), "{m}");
}
