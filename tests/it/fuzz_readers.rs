//! The seeded mutation fuzz (the same mutations, limits and verdicts as `fuzz.rs`) of the
//! measurement readers and the flags around them: a harness run's `meta.json`,
//! `requests.jsonl` and `timeseries.csv`, a `vllm bench serve` result, `--series` as an
//! OpenMetrics dump and as a `query_range` answer, `--engine-args`, `sim alerts`' pools,
//! selector and output paths, `sim compare`'s inputs and tolerances, `sim family`'s flags,
//! a Helm values file and the trace readers' `--session-attribute` / `--columns`.
//!
//! Every case runs the real `sim` binary under an address-space limit and must exit 0
//! (or 1 where the command's contract says so) or 2 with one line on stderr: never a
//! panic, an abort, a signal or a hang. The seed corpus holds each reproducer of a past
//! crash, hang or silently wrong answer with its exact expected outcome.
//!
//! The counts per surface (accepted, refused, broken) are printed with `--nocapture`;
//! `FLEETSIM_FUZZ_SCALE=N` runs N times the cases, and `FLEETSIM_FUZZ_SIM=PATH` runs the
//! corpus against another build of `sim` (to count what it fails).

use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand_pcg::Pcg64;

use super::fuzz::{error_lines, mutate, run_sim, violation};

/// The fuzz's seed: the same inputs on every run.
const SEED: u64 = 44;
/// Cases per surface at scale 1.
const CASES: usize = 24;

const RUN: &str = "traces/vllm-runs/RTX4090_Llama-3.1-8B";
const PROFILE: &str = "llama-3.1-8b/h100/tp1";
const ENGINE_ARGS: &str = "--max-num-seqs 8 --max-num-batched-tokens 2048 --num-gpu-blocks-override 1000";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(root().join(rel)).unwrap()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Turns an input into the arguments of `sim`, writing what it needs into the folder.
type Command = Box<dyn Fn(&[u8], &Path) -> Vec<String>>;

/// One surface: a corpus, how a (mutated) input becomes a command, and whether exit 1 is
/// a contract outcome.
struct Surface {
    name: &'static str,
    corpus: Vec<Vec<u8>>,
    allow_1: bool,
    command: Command,
}

/// A harness run folder in `dir` from the shipped run, its first 40 requests, with
/// `name` replaced by `bytes`.
fn harness(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let req = String::from_utf8(read(&format!("{RUN}/requests.jsonl"))).unwrap();
    let head: String = req.split_inclusive('\n').take(40).collect();
    for (n, default) in [
        ("meta.json", read(&format!("{RUN}/meta.json"))),
        ("timeseries.csv", read(&format!("{RUN}/timeseries.csv"))),
        ("requests.jsonl", head.into_bytes()),
    ] {
        std::fs::write(run.join(n), if n == name { bytes.to_vec() } else { default }).unwrap();
    }
    run
}

fn validate(measurement: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "validate",
        measurement,
        "--profile",
        PROFILE,
        "--out",
        "v",
        "--no-plots",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The input's lines as arguments (how the flag surfaces' corpora are written).
fn lines(input: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(input).lines().map(str::to_string).collect()
}

/// A `vllm bench serve --save-detailed` result of `n` requests.
fn bench(n: usize) -> String {
    let list = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(",");
    format!(
        r#"{{"date":"20260101-120000","model_id":"meta-llama/Llama-3.1-8B","max_concurrency":{},"input_lens":[{}],"output_lens":[{}],"ttfts":[{}],"itls":[{}],"start_times":[{}],"errors":[{}]}}"#,
        if n.is_multiple_of(2) {
            "null".to_string()
        } else {
            "4".to_string()
        },
        list(&|i| (100 + 37 * (i % 7)).to_string()),
        list(&|_| "20".to_string()),
        list(&|i| format!("{}", 0.05 + 0.01 * (i % 3) as f64)),
        list(&|_| format!("[{}]", ["0.02"; 19].join(","))),
        list(&|i| format!("{}", 1000.0 + 0.25 * i as f64)),
        list(&|_| "\"\"".to_string()),
    )
}

/// An OpenMetrics dump of one engine, `k` scrapes `step` seconds apart.
fn openmetrics(k: u64, step: u64) -> String {
    let mut s = String::from("# TYPE vllm:generation_tokens counter\n");
    for i in 0..k {
        let t = 1_787_267_980 + i * step;
        s.push_str(&format!(
            "vllm:prompt_tokens_total{{engine=\"0\"}} {} {t}\nvllm:generation_tokens_total{{engine=\"0\"}} {} {t}\nvllm:num_requests_running{{engine=\"0\"}} {} {t}\nvllm:num_requests_waiting{{engine=\"0\"}} {} {t}\nvllm:kv_cache_usage_perc{{engine=\"0\"}} 0.{} {t}\n",
            3000 * i,
            200 * i,
            i % 9,
            i % 3,
            i % 10
        ));
    }
    s
}

/// The same as a `query_range` answer.
fn query_range(k: u64) -> String {
    let series = |name: &str, f: &dyn Fn(u64) -> u64| {
        let vals: Vec<String> = (0..k)
            .map(|i| format!("[{}, \"{}\"]", 1_787_267_980 + i, f(i)))
            .collect();
        format!(
            r#"{{"metric":{{"__name__":"{name}","instance":"a:8000"}},"values":[{}]}}"#,
            vals.join(",")
        )
    };
    format!(
        r#"{{"status":"success","data":{{"resultType":"matrix","result":[{},{},{}]}}}}"#,
        series("vllm:prompt_tokens_total", &|i| 3000 * i),
        series("vllm:generation_tokens_total", &|i| 200 * i),
        series("vllm:num_requests_waiting", &|i| i % 3)
    )
}

/// A values file of the chart's schema.
const HELM: &str = "servingEngineSpec:\n  modelSpec:\n  - name: llama\n    repository: vllm/vllm-openai\n    tag: latest\n    modelURL: meta-llama/Llama-3.1-8B-Instruct\n    replicaCount: 2\n    requestGPU: 1\n    requestGPUType: nvidia.com/h100\n    vllmConfig:\n      maxModelLen: 8192\n      enablePrefixCaching: true\n      extraArgs: [\"--max-num-seqs\", \"64\"]\nrouterSpec:\n  routingLogic: roundrobin\n  engineScrapeInterval: 15\n";

/// Results `sim compare` reads: a run folder, its golden, and a sweep folder.
fn results(dir: &Path) -> (String, String, String) {
    let scen = root().join("scenarios/burst8.toml");
    let s = path(&scen);
    let o = run_sim(&["run", &s, "--out", "r", "--quiet", "--save-golden", "g"], dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let sweep =
        "[sweep]\nseeds = 1\nmetrics = [\"idle_while_queued_s\"]\n[[sweep.axis]]\npath = \"seed\"\nvalues = [1, 2]\n";
    let text = format!("{}\n{sweep}", std::fs::read_to_string(&scen).unwrap());
    std::fs::write(dir.join("sw.toml"), text).unwrap();
    let o = run_sim(&["sweep", "sw.toml", "--out", "sw", "--quiet", "--jobs", "1"], dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let golden = std::fs::read_dir(dir.join("g"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    (path(&dir.join("r")), path(&golden), path(&dir.join("sw")))
}

fn surfaces(dir: &Path) -> Vec<Surface> {
    let (run_dir, golden, sweep) = results(dir);
    let burst8 = path(&root().join("scenarios/burst8.toml"));
    let otel = path(&root().join("traces/otel_agent_sample.jsonl"));
    let meta = read(&format!("{RUN}/meta.json"));
    let req = read(&format!("{RUN}/requests.jsonl"));
    let ts = read(&format!("{RUN}/timeseries.csv"));
    let req40: Vec<u8> = String::from_utf8_lossy(&req)
        .split_inclusive('\n')
        .take(40)
        .collect::<String>()
        .into_bytes();
    let in_harness = |name: &'static str| -> Command {
        Box::new(move |b: &[u8], d: &Path| validate(&path(&harness(d, name, b)), &[]))
    };
    let series = |name: &'static str| -> Command {
        Box::new(move |b: &[u8], d: &Path| {
            std::fs::write(d.join(name), b).unwrap();
            validate(&path(&root().join(RUN)), &["--series", &path(&d.join(name))])
        })
    };
    let flags = |f: fn(Vec<String>) -> Vec<String>| -> Command { Box::new(move |b: &[u8], _d: &Path| f(lines(b))) };
    let s = |t: &str| t.as_bytes().to_vec();
    vec![
        Surface {
            name: "harness meta.json",
            corpus: vec![meta.clone()],
            allow_1: false,
            command: in_harness("meta.json"),
        },
        Surface {
            name: "harness requests.jsonl",
            corpus: vec![req40],
            allow_1: false,
            command: in_harness("requests.jsonl"),
        },
        Surface {
            name: "harness timeseries.csv",
            corpus: vec![ts],
            allow_1: false,
            command: in_harness("timeseries.csv"),
        },
        Surface {
            name: "vllm bench serve JSON",
            corpus: vec![s(&bench(12)), s(&bench(7))],
            allow_1: false,
            command: Box::new(|b: &[u8], d: &Path| {
                std::fs::write(d.join("bench.json"), b).unwrap();
                validate(&path(&d.join("bench.json")), &["--engine-args", ENGINE_ARGS])
            }),
        },
        Surface {
            name: "--series OpenMetrics",
            corpus: vec![s(&openmetrics(60, 1)), s(&openmetrics(30, 5))],
            allow_1: false,
            command: series("m.txt"),
        },
        Surface {
            name: "--series query_range",
            corpus: vec![s(&query_range(60))],
            allow_1: false,
            command: series("q.json"),
        },
        Surface {
            name: "--engine-args",
            corpus: vec![
                s(ENGINE_ARGS),
                s("vllm serve meta-llama/Llama-3.1-8B --enable-prefix-caching --block-size 32 -tp 1 --port 8000"),
                s(
                    "--max_num_seqs=8 --no-enable-prefix-caching --gpu-memory-utilization 0.8 --num-gpu-blocks-override 2000",
                ),
            ],
            allow_1: false,
            command: Box::new(|b: &[u8], _d: &Path| {
                let ea = String::from_utf8_lossy(b).into_owned();
                validate(&path(&root().join(RUN)), &["--engine-args", &ea])
            }),
        },
        Surface {
            name: "sim alerts flags",
            corpus: vec![
                s("--pool\na=4:x:8000,y:8000\n--pool\nb=8:z:8000\n--selector\njob=\"vllm\", env=~'prod.*'"),
                s("--pool\nh100=16\n--scrape-interval\n30\n--split-for\n120"),
                s("-o\nrules.yml\n--test-out\nrules.test.yml"),
            ],
            allow_1: false,
            command: Box::new(move |b: &[u8], _d: &Path| {
                let mut v = vec!["alerts".to_string(), burst8.clone()];
                let l = lines(b);
                if !l.iter().any(|a| a == "-o") {
                    v.extend(["-o".to_string(), "r.yml".to_string()]);
                }
                v.extend(l);
                v
            }),
        },
        Surface {
            name: "sim compare",
            corpus: vec![
                s("RUN\nGOLDEN\n--rel-tol\n0.01"),
                s("SWEEP\nSWEEP\n--abs-tol\n1e-6\n--all"),
                s("GOLDEN\nRUN\n--metric\nttft_p99_s"),
            ],
            allow_1: true,
            command: Box::new(move |b: &[u8], _d: &Path| {
                let mut v = vec!["compare".to_string()];
                v.extend(lines(b).into_iter().map(|a| {
                    a.replace("RUN", &run_dir)
                        .replace("GOLDEN", &golden)
                        .replace("SWEEP", &sweep)
                }));
                v
            }),
        },
        Surface {
            name: "sim family flags",
            corpus: vec![
                s("-n\n2\n--seeds\n1\n-j\n2\n--list"),
                s("-n\n1\n--seeds\n1\n-j\n100000\n--only\nleast_request"),
                s("-n\n1\n--seeds\n1\n-j\n3\n--only\nleast_request"),
            ],
            allow_1: false,
            command: flags(|l| {
                let mut v = vec!["family".to_string(), "--out".to_string(), "fam".to_string()];
                v.push("--no-plots".to_string());
                v.extend(l);
                v
            }),
        },
        Surface {
            name: "Helm values",
            corpus: vec![s(HELM)],
            allow_1: false,
            command: Box::new(|b: &[u8], d: &Path| {
                std::fs::write(d.join("values.yaml"), b).unwrap();
                ["import", "--helm", &path(&d.join("values.yaml")), "-o", "h.toml"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }),
        },
        Surface {
            name: "trace reader flags",
            corpus: vec![
                s("--session-attribute\ngen_ai.conversation.id\n--session-attribute\nsession.id"),
                s("--format\nsessions\n--columns\nsession=conv,start_s=t,input_tokens=in,output_tokens=out"),
            ],
            allow_1: false,
            command: Box::new(move |b: &[u8], _d: &Path| {
                let mut v = vec!["trace".to_string(), "inspect".to_string(), otel.clone()];
                v.extend(lines(b));
                v
            }),
        },
    ]
}

/// The issue's reproducers: arguments (written by `make` into the folder), the exit
/// code and a piece of the one-line message.
type Repro = (Vec<String>, i32, &'static str);

fn edited(dir: &Path, name: &str, file: &str, f: impl Fn(String) -> String) -> String {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let orig = String::from_utf8(read(&format!("{RUN}/{file}"))).unwrap();
    path(&harness(&d, file, f(orig).as_bytes()))
}

fn meta_with(dir: &Path, name: &str, key: &str, value: &str) -> String {
    edited(dir, name, "meta.json", |m| {
        let mut v: serde_json::Value = serde_json::from_str(&m).unwrap();
        let val: serde_json::Value = serde_json::from_str(value).unwrap();
        match key.split_once('.') {
            Some((a, b)) => v[a][b] = val,
            None => v[key] = val,
        }
        v.to_string()
    })
}

fn bench_with(dir: &Path, name: &str, key: &str, at: usize, value: f64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&bench(12)).unwrap();
    if key == "start_times" {
        for i in 0..12 {
            v[key][i] = (1e3 + value * i as f64).into();
        }
    } else {
        v[key][at] = value.into();
    }
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, v.to_string()).unwrap();
    path(&p)
}

fn reproducers(dir: &Path) -> Vec<Repro> {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let run = path(&root().join(RUN));
    let burst8 = path(&root().join("scenarios/burst8.toml"));
    let mut r: Vec<Repro> = Vec::new();
    for (name, key, value, want) in [
        ("tick-ps", "tick_seconds", "1e-12", "tick_seconds"),
        ("tick-huge", "tick_seconds", "1e12", "tick_seconds"),
        ("tick-us", "tick_seconds", "1e-6", "tick_seconds"),
        (
            "blocks",
            "kv_cache.num_gpu_blocks",
            "4294967295",
            "kv_cache.num_gpu_blocks",
        ),
        ("bs", "kv_cache.block_size", "2147483648", "kv_cache.block_size"),
        ("bs24", "kv_cache.block_size", "24", "vLLM accepts only"),
        (
            "pc",
            "kv_cache.enable_prefix_caching",
            "\"maybe\"",
            "enable_prefix_caching",
        ),
    ] {
        r.push((validate(&meta_with(dir, name, key, value), &[]), 2, want));
    }
    // vLLM's pydantic config reads the string "false" as false.
    r.push((
        validate(
            &meta_with(dir, "pc-false", "kv_cache.enable_prefix_caching", "\"false\""),
            &[],
        ),
        0,
        "",
    ));
    let late = edited(dir, "late", "requests.jsonl", |t| {
        t.replacen("\"last_token_ts\": 27554.231018618", "\"last_token_ts\": 1e15", 1)
    });
    r.push((validate(&late, &[]), 2, "last_token_ts"));
    let row = edited(dir, "row", "timeseries.csv", |t| format!("{t}1e12,0,0,0,0,0\n"));
    r.push((validate(&row, &[]), 2, "timeseries.csv:186: column `t`"));
    let neg = edited(dir, "neg", "timeseries.csv", |t| {
        t.replacen(",2,13.22", ",-1e300,13.22", 1)
    });
    r.push((validate(&neg, &[]), 2, "negative (-1e300)"));
    let ea = ["--engine-args", ENGINE_ARGS];
    for (name, key, at, value, want) in [
        ("starts", "start_times", 0, 1e8, "start_times"),
        ("ttft", "ttfts", 3, 1e11, "ttfts"),
        ("out", "output_lens", 3, 4294967295.0, "output_lens"),
        ("in", "input_lens", 3, 4294967295.0, "input_lens"),
    ] {
        r.push((validate(&bench_with(dir, name, key, at, value), &ea), 2, want));
    }
    let om = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        path(&p)
    };
    let base = openmetrics(20, 1);
    let neg_om = om(
        "neg.txt",
        base.replacen(
            "num_requests_waiting{engine=\"0\"} 1 ",
            "num_requests_waiting{engine=\"0\"} -1e300 ",
            1,
        ),
    );
    r.push((validate(&run, &["--series", &neg_om]), 2, "negative value -1e300"));
    let ns: String = base
        .lines()
        .map(|l| match l.rsplit_once(' ') {
            Some((a, t)) if !l.starts_with('#') => format!("{a} {t}000000000\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    r.push((validate(&run, &["--series", &om("ns.txt", ns)]), 0, ""));
    let tiny: String = (0..5)
        .map(|i| format!("vllm:generation_tokens_total {} 1000.{:010}\n", 10 * i, i))
        .collect();
    r.push((validate(&run, &["--series", &om("tiny.txt", tiny)]), 2, "shorter than"));
    for (args, want) in [
        ("--max-num-seq 8", "did you mean --max-num-seqs?"),
        ("--frobnicate 3", "unknown flag --frobnicate"),
        ("--enable-prefix-caching false", "a switch takes no value"),
        ("--enable-prefix-caching=false", "takes no value"),
        ("--block-size 2147483648", "vLLM accepts only"),
        (
            "--num-gpu-blocks-override 4294967295",
            "--num-gpu-blocks-override 4294967295",
        ),
        ("--max-num-seqs", "--max-num-seqs needs a value"),
    ] {
        r.push((validate(&run, &["--engine-args", args]), 2, want));
    }
    std::os::unix::fs::symlink(dir.join("rules.yml"), dir.join("link.yml")).unwrap();
    for (args, want) in [
        (
            own(&["-o", "rules.yml", "--test-out", "rules.yml"]),
            "--test-out rules.yml",
        ),
        (
            own(&["-o", "rules.yml", "--test-out", "./rules.yml"]),
            "overwrite the rules",
        ),
        (
            own(&["-o", "link.yml", "--test-out", "rules.yml"]),
            "overwrite the rules",
        ),
        (own(&["--pool", "=4"]), "--pool =4"),
        (own(&["--pool", "a=4", "--pool", "a=4"]), "a second pool"),
        (
            own(&["--pool", "a=4:x:8000", "--pool", "b=4:x:8000"]),
            "already in pool a",
        ),
        (own(&["--selector", "job=="]), "--selector"),
    ] {
        let mut v = own(&["alerts", &burst8]);
        v.extend(args);
        r.push((v, 2, want));
    }
    r.push((own(&["family", "-j", "100000", "--no-plots"]), 2, "--jobs 100000"));
    // Every command that starts worker threads checks --jobs the same way.
    let swept = path(&root().join("scenarios/compare-agent-burst.toml"));
    for (cmd, file) in [("sweep", &swept), ("tune", &burst8), ("check", &burst8)] {
        for (j, want) in [
            ("100000", "--jobs 100000: expected 1 to 1024"),
            ("0", "--jobs 0: expected 1 to 1024"),
        ] {
            r.push((own(&[cmd, file, "-j", j]), 2, want));
        }
    }
    let nest = dir.join("nest.yaml");
    std::fs::write(
        &nest,
        format!("servingEngineSpec:\n  modelSpec: {}\n", "[".repeat(100_000)),
    )
    .unwrap();
    r.push((
        own(&["import", "--helm", &path(&nest), "-o", "h.toml"]),
        2,
        "nest.yaml:2:",
    ));
    let otel = path(&root().join("traces/otel_agent_sample.jsonl"));
    r.push((
        own(&["trace", "inspect", &otel, "--session-attribute", ""]),
        2,
        "--session-attribute",
    ));
    r.push((
        own(&["trace", "inspect", &otel, "--columns", "session="]),
        2,
        "--columns",
    ));
    let g = path(&root().join("scenarios/burst8.toml"));
    r.push((own(&["compare", &g, &g, "--rel-tol", "nan"]), 2, "--rel-tol"));
    r
}

#[test]
fn mutation_fuzz_of_the_readers_and_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scale: usize = std::env::var("FLEETSIM_FUZZ_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let started = Instant::now();
    let mut failures = Vec::new();
    let repro = reproducers(dir);
    let mut repro_ok = 0;
    for (args, want, piece) in &repro {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_sim(&argv, dir);
        let one_line = *want != 2 || error_lines(&o.stderr);
        if o.code == Some(*want) && o.stderr.contains(piece) && one_line {
            repro_ok += 1;
        } else {
            failures.push(format!(
                "reproducer {args:?}: want exit {want} and `{piece}`, got {o:?}"
            ));
        }
    }
    let mut counts = vec![format!("reproducers: {} ({repro_ok} as expected)", repro.len())];
    for (si, sf) in surfaces(dir).iter().enumerate() {
        let mut rng = Pcg64::seed_from_u64(SEED ^ ((si as u64) << 32));
        let case_dir = dir.join(format!("s{si}"));
        std::fs::create_dir_all(&case_dir).unwrap();
        let (mut ok, mut refused, mut broken) = (0, 0, 0);
        for c in 0..CASES * scale {
            let base = &sf.corpus[c % sf.corpus.len()];
            let input = if c < sf.corpus.len() {
                base.clone()
            } else {
                mutate(base, &mut rng)
            };
            let args = (sf.command)(&input, &case_dir);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run_sim(&argv, &case_dir);
            match violation(&o, sf.allow_1) {
                None if o.code == Some(0) => ok += 1,
                None => refused += 1,
                Some(why) => {
                    broken += 1;
                    failures.push(format!(
                        "{} case {c}: {why}; args {args:?}; stderr {:?}; input {:?}",
                        sf.name,
                        o.stderr.chars().take(400).collect::<String>(),
                        String::from_utf8_lossy(&input).chars().take(300).collect::<String>()
                    ));
                }
            }
        }
        counts.push(format!(
            "{}: {} inputs ({ok} accepted, {refused} refused, {broken} broken)",
            sf.name,
            CASES * scale
        ));
    }
    println!(
        "readers fuzz counts ({:.0} s):\n  {}",
        started.elapsed().as_secs_f64(),
        counts.join("\n  ")
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
