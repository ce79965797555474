//! Scenario loading: defaults, overrides, and one-line errors naming file, line and key.

use super::*;
use fleetsim_core::policy::{Fallback, PolicyConfig, aibrix_preble, cacheaware, prefixaware};
use fleetsim_core::sim::BackendModel;
use fleetsim_core::time::NS_PER_S;

const MINIMAL: &str = r#"
[backends]
count = 2

[router.policy]
kind = "prefixaware"

[[workload.groups]]
name = "chat"
sessions = 3
arrival = { kind = "burst", at_s = 0 }
input_tokens = 100
output_tokens = 10
"#;

fn load_ok(text: &str, sets: &[(&str, &str)]) -> (Scenario, Workload) {
    let sets: Vec<(String, String)> = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (s, w, _) = load_str(text, "t.toml", "t", &sets).unwrap_or_else(|e| panic!("{e}"));
    (s, w)
}

fn load_err(text: &str, sets: &[(&str, &str)]) -> ScenarioError {
    let sets: Vec<(String, String)> = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    match load_str(text, "t.toml", "t", &sets) {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "errors are one line: {e}");
            e
        }
    }
}

#[test]
fn upstream_defaults() {
    let (s, w) = load_ok(MINIMAL, &[]);
    assert_eq!(s.sim.name, "t");
    let r = &s.sim.router;
    assert_eq!(
        r.engine_stats_interval.0,
        30 * NS_PER_S,
        "--engine-stats-interval default 30"
    );
    assert_eq!(
        r.request_stats_window.0,
        60 * NS_PER_S,
        "--request-stats-window default 60"
    );
    assert_eq!(r.request_stats_lag.0, 0);
    assert_eq!(
        r.policy,
        PolicyConfig::new::<prefixaware::Kind>(prefixaware::Config {
            prefix_min_match_length: 0,
            fallback: Fallback::Qps,
            band: 1,
            tie: fleetsim_core::policy::leastrequest::Tie::Random,
            sample: 0,
            insert: fleetsim_core::policy::prefixaware::Insertion::AtPick,
            follow: false,
            replace: false,
            // vLLM's default --max-num-seqs on each of the two backends.
            max_num_seqs: vec![1024, 1024],
        }),
        "prefix_min_match_length defaults to 0 upstream; QPS is upstream's fallback"
    );
    let BackendModel::Vllm(v) = &s.sim.models[0] else {
        panic!("vllm is the default model")
    };
    assert_eq!(
        (v.max_num_seqs, v.max_num_batched_tokens, v.block_size_tokens),
        (1024, 8192, 16)
    );
    assert_eq!(v.kv_blocks, 29_205);
    assert!(v.prefix_caching);
    assert_eq!(
        s.sim.backends[1],
        ("backend-1".to_string(), "http://backend-1:8000".to_string())
    );
    assert_eq!(w.sessions.len(), 3);
}

#[test]
fn overrides_apply_before_validation() {
    let (s, _) = load_ok(
        MINIMAL,
        &[
            ("router.policy.fallback", "leastinflight"),
            ("router.policy.band", "0"),
            ("router.engine_stats_interval_s", "10"),
            ("workload.groups[0].sessions", "5"),
            ("name", "renamed"),
        ],
    );
    assert_eq!(
        s.sim.router.policy,
        PolicyConfig::new::<prefixaware::Kind>(prefixaware::Config {
            prefix_min_match_length: 0,
            fallback: Fallback::LeastInflight,
            band: 0,
            tie: fleetsim_core::policy::leastrequest::Tie::Random,
            sample: 0,
            insert: fleetsim_core::policy::prefixaware::Insertion::AtPick,
            follow: false,
            replace: false,
            // vLLM's default --max-num-seqs on each of the two backends.
            max_num_seqs: vec![1024, 1024],
        })
    );
    assert_eq!(s.sim.router.engine_stats_interval.0, 10 * NS_PER_S);
    assert_eq!(s.groups[0].sessions, 5);
    assert_eq!(s.sim.name, "renamed");
}

#[test]
fn malformed_toml_gives_line_and_column() {
    let e = load_err("[backends]\ncount = = 2\n", &[]);
    assert_eq!(e.location.map(|l| l.0), Some(2));
    assert!(e.message.starts_with("invalid TOML"), "{e}");
    assert!(e.to_string().starts_with("t.toml:2:"), "{e}");
}

#[test]
fn unknown_key_names_path_and_line() {
    let text = MINIMAL.replace("[backends]\ncount = 2", "[backends]\ncount = 2\nmax_num_seq = 4");
    let e = load_err(&text, &[]);
    assert_eq!(e.path, "backends.max_num_seq");
    assert_eq!(e.location, Some((4, 1)));
    assert!(e.message.contains("unknown field `max_num_seq`"), "{e}");
    let text = MINIMAL.replace("kind = \"prefixaware\"", "kind = \"prefixaware\"\nbandd = 2");
    let e = load_err(&text, &[]);
    assert_eq!(e.path, "router.policy.bandd");
    assert!(e.location.is_some());
}

#[test]
fn wrong_types_name_the_key() {
    let e = load_err(&MINIMAL.replace("count = 2", "count = \"two\""), &[]);
    assert_eq!(e.path, "backends.count");
    assert!(e.message.contains("invalid type"), "{e}");
    let e = load_err(&MINIMAL.replace("output_tokens = 10", "output_tokens = \"ten\""), &[]);
    assert_eq!(e.path, "workload.groups[0].output_tokens");
}

#[test]
fn impossible_values_are_rejected() {
    let e = load_err(&MINIMAL.replace("count = 2", "count = 0"), &[]);
    assert_eq!((e.path.as_str(), e.location.map(|l| l.0)), ("backends.count", Some(3)));
    let e = load_err(MINIMAL, &[("router.engine_stats_interval_s", "-1")]);
    assert_eq!(e.path, "router.engine_stats_interval_s");
    assert!(e.message.contains("(value from --set)"), "{e}");
    // A zero interval is refused by its own key, so a scrape period is never zero.
    for (v, want) in [
        ("0", "must be a finite number of seconds > 0, got 0"),
        ("1e-10", "below the simulator's 1 ns resolution"),
    ] {
        let e = load_err(MINIMAL, &[("router.engine_stats_interval_s", v)]);
        assert_eq!(e.path, "router.engine_stats_interval_s", "{v}: {e}");
        assert!(e.message.contains(want), "{v}: {e}");
    }
    let e = load_err(MINIMAL, &[("workload.groups[0].output_tokens", "-5")]);
    assert!(e.message.contains("output_tokens must be at least 1, got -5"), "{e}");
    // Values that used to be clamped or rounded are refused, naming the key.
    let e = load_err(MINIMAL, &[("workload.groups[0].output_tokens", "0")]);
    assert_eq!(e.path, "workload.groups[0].output_tokens");
    for t in ["0", "0.5", "{ dist = \"constant\", value = 0 }"] {
        let e = load_err(MINIMAL, &[("workload.groups[0].turns", t)]);
        assert!(e.path.starts_with("workload.groups[0].turns"), "{t}: {e}");
    }
    let e = load_err(
        MINIMAL,
        &[(
            "workload.groups[0].think_time_s",
            "{ dist = \"normal\", mean = -1, std = 1 }",
        )],
    );
    assert_eq!(e.path, "workload.groups[0].think_time_s.mean", "{e}");
    // The memory pre-flight names the key and the estimate.
    let e = load_err(MINIMAL, &[("workload.groups[0].sessions", "2147483648")]);
    assert_eq!(e.path, "workload.groups[0].sessions");
    assert!(
        e.message.contains("needs about") && e.message.contains("limits.max_memory_gib"),
        "{e}"
    );
    let e = load_err(
        MINIMAL,
        &[("limits.max_memory_gib", "0.001"), ("backends.kv_blocks", "100000")],
    );
    assert_eq!(e.path, "backends.kv_blocks", "{e}");
    assert!(e.message.contains("limits.max_memory_gib = 0.0;"), "{e}");
    let e = load_err(MINIMAL, &[("limits.max_memory_gib", "-1")]);
    assert_eq!(e.path, "limits.max_memory_gib");
    let e = load_err(
        MINIMAL,
        &[("workload.groups[0].arrival", "{ kind = \"poisson\", rate_per_s = 0 }")],
    );
    assert_eq!(e.path, "workload.groups[0].arrival.rate_per_s");
}

#[test]
fn memory_preflight_counts_the_streamed_outputs_and_the_writing() {
    // 1,000,000 requests over 2,000 backends: 40 GB of decision audit if kept, but a
    // streamed run holds at most STREAM_BYTES of it: 0.9 GB of requests and sessions,
    // 0.5 GB of outputs and writing.
    let mut sets = vec![
        ("backends.count", "2000"),
        ("backends.kv_blocks", "100"),
        ("workload.groups[0].sessions", "1000000"),
        ("limits.max_memory_gib", "1"),
    ];
    let e = load_err(MINIMAL, &sets);
    assert_eq!(e.path, "workload.groups[0].sessions", "{e}");
    assert!(e.message.contains("the outputs streamed"), "{e}");
    sets[3].1 = "1.5";
    assert!(load_str(MINIMAL, "t.toml", "t", &own(&sets)).is_ok());
    // The writing phase alone (96 MiB) does not fit 64 MiB.
    let e = load_err(MINIMAL, &[("limits.max_memory_gib", "0.0625")]);
    assert_eq!(e.path, "workload.groups[0].sessions", "{e}");
    // A small run's streamed outputs are small.
    assert!(
        load_str(
            MINIMAL,
            "t.toml",
            "t",
            &[("limits.max_memory_gib".into(), "0.125".into())]
        )
        .is_ok()
    );
}

fn own(sets: &[(&str, &str)]) -> Vec<(String, String)> {
    sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn kv_smaller_than_one_request() {
    // 4 blocks x 16 = 64 tokens; the first turn needs 100 + 10.
    let e = load_err(MINIMAL, &[("backends.kv_blocks", "4")]);
    assert_eq!(e.path, "workload.groups[0]");
    assert!(
        e.message.contains("needs 110 tokens") && e.message.contains("at most 64"),
        "{e}"
    );
}

#[test]
fn unknown_policy_and_fallback_list_valid_values() {
    let e = load_err(MINIMAL, &[("router.policy.kind", "leastload")]);
    assert_eq!(e.path, "router.policy.kind");
    assert!(
        e.message.contains("roundrobin, session, prefixaware, leastinflight"),
        "{e}"
    );
    let e = load_err(MINIMAL, &[("router.policy.fallback", "random")]);
    assert!(
        e.message.contains("`qps`") && e.message.contains("`leastinflight`"),
        "{e}"
    );
    let e = load_err(&MINIMAL.replace("[router.policy]\nkind = \"prefixaware\"\n", ""), &[]);
    assert_eq!(e.path, "router.policy");
}

#[test]
fn bad_override_paths() {
    let e = load_err(MINIMAL, &[("workload.groups[3].sessions", "1")]);
    assert!(e.message.contains("out of range"), "{e}");
    let e = load_err(MINIMAL, &[("router.polcy.kind", "session")]);
    assert_eq!(e.path, "router.polcy");
    assert!(e.message.contains("unknown field `polcy`"), "{e}");
}

#[test]
fn queueing_model_rules() {
    let text = MINIMAL.replace("count = 2", "count = 1\nmodel = \"queueing\"\nslots = 2");
    let e = load_err(&text, &[]);
    assert!(e.message.contains("service_time_s"), "{e}");
    let (s, w) = load_ok(
        &text,
        &[(
            "workload.groups[0].service_time_s",
            "{ dist = \"exponential\", mean = 1.0 }",
        )],
    );
    assert_eq!(s.sim.models[0], BackendModel::Queueing { slots: 2 });
    assert!(w.sessions[0].turns[0].service.0 > 0);
    // Both errors: the group's (in the file) first, the `--set` value's (no line) after it.
    let e = load_err(&text, &[("backends.max_num_seqs", "4")]);
    assert_eq!(e.path, "workload.groups[0]");
    assert_eq!(e.also.len(), 1, "{:?}", e.also);
    assert_eq!(e.also[0].path, "backends.max_num_seqs");
}

#[test]
fn duplicate_group_names_and_urls() {
    let text = format!(
        "{MINIMAL}\n[[workload.groups]]\nname = \"chat\"\nsessions = 1\narrival = {{ kind = \"burst\", at_s = 0 }}\ninput_tokens = 1\noutput_tokens = 1\n"
    );
    let e = load_err(&text, &[]);
    assert_eq!(e.path, "workload.groups[1].name");
    let e = load_err(MINIMAL, &[("backends.urls", "[\"http://a\", \"http://a\"]")]);
    assert_eq!(e.path, "backends.urls[1]");
}

#[test]
fn shipped_scenarios_load() {
    // Every top-level scenario (`sim check` runs them too) and the small benchmarks; the
    // 1M-request ones under bench/ are left to `sim bench`.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 16, "{files:?}");
    files.push(dir.join("bench").join("peer-benchmark.toml"));
    for p in files {
        load(&p, &[]).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn aibrix_preble_and_sglang_eviction_tables() {
    use fleetsim_core::policy::aibrix_preble::{AibrixPrebleParams, TargetGpu};
    use fleetsim_core::policy::cacheaware::CacheAwareParams;
    // Upstream defaults; the tree's unit follows router.chars_per_token (one token).
    let (s, _) = load_ok(MINIMAL, &[("router.policy", "{ kind = \"aibrix_preble\" }")]);
    assert_eq!(
        s.sim.router.policy,
        PolicyConfig::new::<aibrix_preble::Kind>(AibrixPrebleParams::default())
    );
    let (s, _) = load_ok(
        MINIMAL,
        &[
            (
                "router.policy",
                "{ kind = \"aibrix_preble\", target_gpu = \"A6000\", histogram_window_s = 60 }",
            ),
            ("router.chars_per_token", "3"),
        ],
    );
    let p = *s.sim.router.policy.get::<aibrix_preble::Kind>().unwrap();
    assert_eq!(
        (p.target_gpu, p.histogram_window.0, p.tree_chunk_chars),
        (TargetGpu::A6000, 60 * NS_PER_S, 3)
    );
    let e = load_err(
        MINIMAL,
        &[("router.policy", "{ kind = \"aibrix_preble\", histogram_window_s = -1 }")],
    );
    assert_eq!(e.path, "router.policy.histogram_window_s");
    assert!(
        e.to_string().contains("must be a finite number of seconds > 0, got -1"),
        "{e}"
    );
    let e = load_err(
        MINIMAL,
        &[(
            "router.policy",
            "{ kind = \"aibrix_preble\", match_ratio_threshold = 1.5 }",
        )],
    );
    assert_eq!(e.path, "router.policy.match_ratio_threshold");
    let e = load_err(
        MINIMAL,
        &[("router.policy", "{ kind = \"aibrix_preble\", histogram_window = 5 }")],
    );
    assert!(e.to_string().contains("unknown field `histogram_window`"), "{e}");
    // SGLang: the eviction knobs exist and default to RouterArgs' values.
    let (s, _) = load_ok(MINIMAL, &[("router.policy", "{ kind = \"sglang_cache_aware\" }")]);
    assert_eq!(
        s.sim.router.policy,
        PolicyConfig::new::<cacheaware::Kind>(CacheAwareParams::default())
    );
    let (s, _) = load_ok(
        MINIMAL,
        &[(
            "router.policy",
            "{ kind = \"sglang_cache_aware\", eviction_interval_secs = 0, max_tree_size = 4096 }",
        )],
    );
    let p = *s.sim.router.policy.get::<cacheaware::Kind>().unwrap();
    assert_eq!((p.eviction_interval_secs, p.max_tree_size), (0, 4096));
    let e = load_err(
        MINIMAL,
        &[(
            "router.policy",
            "{ kind = \"sglang_cache_aware\", eviction_interval_secs = -1 }",
        )],
    );
    assert_eq!(e.path, "router.policy.eviction_interval_secs");
}

#[test]
fn every_kind_is_documented_in_order_and_its_defaults_parse() {
    let kinds: Vec<String> = fleetsim_core::policy::policy_kinds()
        .split(", ")
        .map(String::from)
        .collect();
    let catalogue = fleetsim_core::policy::catalogue::catalogue();
    let documented: Vec<&str> = catalogue.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, documented);
    for d in &catalogue {
        // Writing every documented default explicitly gives the same policy as omitting it.
        // Required parameters (no upstream default) get a value in both versions.
        let required: String = d
            .params
            .iter()
            .filter(|p| p.default == "(required)")
            .map(|p| format!("{} = 5\n", p.key))
            .collect();
        let explicit: String = d
            .params
            .iter()
            .filter(|p| !p.default.starts_with('('))
            .map(|p| format!("{} = {}\n", p.key, p.default))
            .collect::<String>()
            + &required;
        let base = include_str!("../../../../scenarios/burst8.toml");
        let cut = base.find("[router.policy]").unwrap();
        let end = base[cut..].find("\n\n").unwrap() + cut;
        let with = |body: &str| {
            format!(
                "{}[router.policy]\nkind = \"{}\"\n{body}{}",
                &base[..cut],
                d.kind,
                &base[end..]
            )
        };
        let a = load_str(&with(&explicit), "t.toml", "t", &[]).unwrap_or_else(|e| panic!("{}: {e}", d.kind));
        let b = load_str(&with(&required), "t.toml", "t", &[]).unwrap_or_else(|e| panic!("{}: {e}", d.kind));
        assert_eq!(a.0.sim.router.policy, b.0.sim.router.policy, "{}", d.kind);
    }
}

#[test]
fn shared_traces_place_sessions_per_seed_on_the_runs_own_copy() {
    // Offsets placed by a seeded Poisson arrival: the shared parse must not carry one
    // seed's placement into the next.
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("off.csv");
    std::fs::write(&tr, "s,o,in,out\na,0,10,5\na,1,20,5\nb,0,10,5\nc,0,10,5\n").unwrap();
    let text = format!(
        "[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"{}\"\nformat = \"sessions\"\ncolumns = {{ session = \"s\", offset_s = \"o\", input_tokens = \"in\", output_tokens = \"out\" }}\nsession_arrival = {{ kind = \"poisson\", rate_per_s = 1 }}\n",
        tr.display()
    );
    let (mut sc, _) = load_ok(&text, &[]);
    let traces = crate::trace::TraceCache::new();
    let mut seen = Vec::new();
    for seed in [1, 2, 1] {
        sc.sim.seed = seed;
        let shared = format!("{:?}", sc.workload_with(&traces).unwrap().sessions);
        assert_eq!(shared, format!("{:?}", sc.workload().unwrap().sessions), "seed {seed}");
        seen.push(shared);
    }
    assert_eq!(traces.reads(), 1);
    assert_ne!(seen[0], seen[1], "seeds place sessions differently");
    assert_eq!(seen[0], seen[2]);
}

#[test]
fn a_bad_distribution_parameter_is_one_error_not_two() {
    let text = format!("{MINIMAL}think_time_s = {{ dist = \"exponential\", mean = 2.0 }}\n");
    let e = load_err(&text, &[("workload.groups[0].think_time_s.mean", "-1")]);
    assert_eq!(e.path, "workload.groups[0].think_time_s.mean", "{e}");
    assert!(e.message.contains("mean must be > 0"), "{e}");
    // Taking out only `mean` to look for more errors would leave `{ dist = "exponential" }`,
    // whose "takes mean; got no parameters" is an echo, not a second mistake.
    assert!(e.also.is_empty(), "an echo of the same mistake: {:?}", e.also);
    // A genuine second mistake elsewhere is still reported.
    let e = load_err(
        &text,
        &[("workload.groups[0].think_time_s.mean", "-1"), ("backends.count", "0")],
    );
    assert_eq!(e.also.len(), 1, "{e} / {:?}", e.also);
}

#[test]
fn a_recorded_shared_part_column_and_its_unit() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("tools.csv");
    std::fs::write(&tr, "s,t,in,out,tools\na,0,3000,5,4000\nb,1,2000,5,4000\n").unwrap();
    let table = |extra: &str| {
        format!(
            "[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"{}\"\ncolumns = {{ session = \"s\", start_s = \"t\", input_tokens = \"in\", output_tokens = \"out\"{extra} }}\n",
            tr.display()
        )
    };
    let (_, w) = load_ok(&table(", shared_prefix_chars = \"tools\""), &[]);
    assert_eq!(w.sessions[0].shared.map(|(_, n)| n), Some(1000));
    assert_eq!(w.sessions[0].shared, w.sessions[1].shared);
    let (_, w) = load_ok(
        &table(", shared_prefix_chars = \"tools\""),
        &[("workload.traces[0].chars_per_token", "3.2")],
    );
    assert_eq!(w.sessions[0].shared.map(|(_, n)| n), Some(1250));
    let (_, w) = load_ok(&table(", shared_prefix_tokens = \"tools\""), &[]);
    // 4,000 tokens recorded, cut to each session's shortest call less one token.
    let cut: Vec<Option<u32>> = w.sessions.iter().map(|s| s.shared.map(|(_, n)| n)).collect();
    assert_eq!(cut, [Some(2999), Some(1999)]);
    let e = load_err(&table(""), &[("workload.traces[0].chars_per_token", "3")]);
    assert_eq!(e.path, "workload.traces[0].chars_per_token", "{e}");
    let e = load_err(
        &table(", shared_prefix_chars = \"tools\""),
        &[("workload.traces[0].chars_per_token", "0")],
    );
    assert_eq!(e.path, "workload.traces[0].chars_per_token", "{e}");
    let e = load_err(
        &table(", shared_prefix_chars = \"tools\", shared_prefix_tokens = \"in\""),
        &[],
    );
    assert!(e.path.starts_with("workload.traces[0].columns"), "{e}");
}

#[test]
fn profile_auto_takes_the_model_from_the_one_name_a_group_serves() {
    let g = "[router.policy]\nkind = \"roundrobin\"\n[[workload.groups]]\nname = \"g\"\nsessions = 1\narrival = { kind = \"burst\", at_s = 0 }\ninput_tokens = 10\noutput_tokens = 2\n";
    let (s, _) = load_ok(
        &format!(
            "[[backends.groups]]\nname = \"q\"\ncount = 1\nprofile = \"auto\"\ngpu = \"H100\"\nserves = [\"Qwen/Qwen3-14B\"]\n{g}"
        ),
        &[],
    );
    assert_eq!(s.sim.labels[0].profile, "qwen3-14b/h100/tp1");
    let e = load_err(
        &format!(
            "[[backends.groups]]\nname = \"q\"\ncount = 1\nprofile = \"auto\"\ngpu = \"H100\"\nserves = [\"a\", \"b\"]\n{g}"
        ),
        &[],
    );
    assert_eq!(e.path, "backends.groups[0].model", "{e}");
    let e = load_err(
        &format!(
            "[[backends.groups]]\nname = \"q\"\ncount = 1\nprofile = \"auto\"\ngpu = \"H100\"\nserves = [\"acme/x\"]\n{g}"
        ),
        &[],
    );
    assert_eq!(e.path, "backends.groups[0].model", "{e}");
    assert!(e.to_string().contains("unknown model `acme/x` (from `serves`"), "{e}");
    assert!(e.also.is_empty(), "one error: {:?}", e.also);
}
