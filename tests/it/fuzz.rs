//! A bounded, seeded mutation fuzz of every input kind: scenario TOML, `--set`, each trace
//! format (the agent readers included), the sweep spec, `[expect]`, shard files, goldens,
//! `sim import`'s three inputs, `sim tune`'s flags, space and round files, run folders
//! (read by compare, explain and convert --from-run) and profiles. Each mutated input is given
//! to the real `sim` binary under an address-space limit; the test asserts that it exits 0
//! (or 1 where the command's contract says "a check failed": `check`, `compare`) or 2 with
//! exactly one line on stderr, never a panic, an abort, a signal or a hang.
//!
//! The seed corpus holds the reproducers of past crashes and refusals, each with its exact
//! expected outcome. `FLEETSIM_FUZZ_SCALE=10 cargo test --release --test it fuzz:: -- --nocapture`
//! fuzzes ten times longer; the counts per kind are printed with `--nocapture`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// Address-space limit of each `sim` process.
const MEMORY_LIMIT_BYTES: u64 = 4 << 30;
/// A case slower than this is a failure (a hang).
const CASE_TIMEOUT: Duration = Duration::from_secs(60);
/// The fuzz's seed: the same inputs on every run.
const SEED: u64 = 17;

/// The binary under test: this build's `sim`, or `FLEETSIM_FUZZ_SIM` (another build's, to
/// count what it fails on the same corpus).
fn sim() -> PathBuf {
    std::env::var_os("FLEETSIM_FUZZ_SIM").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sim")), PathBuf::from)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A small, fast scenario (a few hundred events) with every table the fuzz mutates.
const TINY: &str = r#"name = "tiny"
seed = 1

[backends]
count = 2
max_num_seqs = 4
kv_blocks = 2000

[router]
engine_stats_interval_s = 5

[router.policy]
kind = "prefixaware"
fallback = "qps"

[[workload.groups]]
name = "chat"
sessions = 3
arrival = { kind = "burst", at_s = 0, spread_s = 1.0 }
turns = { dist = "uniform", min = 1, max = 3 }
system_prompt_tokens = 100
input_tokens = { dist = "normal", mean = 200, std = 50 }
output_tokens = 20
think_time_s = { dist = "exponential", mean = 1.0 }
"#;

/// Appended after mutation so that a mutated run stays short and small.
const GUARD: &str = "\n[limits]\nmax_events = 200000\nmax_memory_gib = 1\nmax_sim_time_s = 3600\n";

const SWEEP: &str = r#"
[sweep]
seeds = 2
metrics = ["idle_while_queued_s", "ttft_s.p99"]
[[sweep.axis]]
path = "router.policy.band"
values = [0, 1]
[[sweep.axis]]
name = "fleet"
cases = [ { label = "a", set = { "backends.count" = 2 } }, { label = "b", set = { "backends.count" = 3 } } ]
"#;

const EXPECT: &str = r#"
[expect]
checks = [
  "requests.finished >= 1",
  "mean(ttft_s.p99) < 100",
  "backends[0].peak_waiting >= 0",
]
"#;

/// How a case ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) code: Option<i32>,
    pub(crate) stderr: String,
    pub(crate) timed_out: bool,
}

pub(crate) fn run_sim(args: &[&str], cwd: &Path) -> Outcome {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(sim());
    // An argument cannot hold a NUL byte (a mutated flag value may): the closest input a
    // user can give is the text without it.
    cmd.args(args.iter().map(|a| a.replace('\0', "")))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0");
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            rlimit::setrlimit(rlimit::Resource::AS, MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn sim");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break (Some(s), false);
        }
        if start.elapsed() > CASE_TIMEOUT {
            let _ = child.kill();
            break (child.wait().ok(), true);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Outcome {
        code: status.and_then(|s| s.code()),
        stderr: reader.join().unwrap_or_default(),
        timed_out,
    }
}

/// Why an outcome breaks the guarantees, if it does.
pub(crate) fn violation(o: &Outcome, allow_1: bool) -> Option<String> {
    if o.timed_out {
        return Some(format!("no exit within {CASE_TIMEOUT:?}"));
    }
    if o.stderr.contains("panicked") || o.code == Some(101) {
        return Some("panic".into());
    }
    match o.code {
        None => Some("killed by a signal (an abort?)".into()),
        Some(0) => None,
        Some(1) if allow_1 => None,
        Some(2) => (!error_lines(&o.stderr)).then(|| format!("exit 2 with stderr {:?}", o.stderr)),
        Some(c) => Some(format!("exit {c}")),
    }
}

/// Bad input's stderr: one line per error (a scenario file reports each of its errors, the
/// first 20 and then how many more), each a one-line `error: ...`.
pub(crate) fn error_lines(stderr: &str) -> bool {
    let n = stderr.lines().count();
    n == 1 || (n <= fleetsim::scenario::MAX_ERRORS_SHOWN + 1 && stderr.lines().all(|l| l.starts_with("error: ")))
}

/// Numbers and tokens that have broken parsers before.
const INTERESTING: &[&str] = &[
    "0",
    "-1",
    "0.5",
    "2147483648",
    "4294967296",
    "1073741823",
    "9223372036854775807",
    "18446744073709551616",
    "1e308",
    "-0.0",
    "nan",
    "inf",
    "\"x\"",
    "ü",
    "\u{feff}",
    "",
    "{}",
    "[]",
    "2023-02-29 00:00:00",
    "1000000",
];

/// One random mutation of `data`.
pub(crate) fn mutate(data: &[u8], rng: &mut Pcg64) -> Vec<u8> {
    let mut d = data.to_vec();
    let n = rng.random_range(1..=3);
    for _ in 0..n {
        let len = d.len().max(1);
        let at = rng.random_range(0..len).min(d.len());
        match rng.random_range(0..9) {
            // Flip a byte.
            0 if !d.is_empty() => {
                let i = at.min(d.len() - 1);
                d[i] ^= 1 << rng.random_range(0..8);
            }
            // Insert random bytes (not UTF-8 on purpose).
            1 => {
                let k = rng.random_range(1..4);
                for _ in 0..k {
                    d.insert(at, rng.random());
                }
            }
            // Delete a span.
            2 => {
                let end = (at + rng.random_range(1..16)).min(d.len());
                d.drain(at..end);
            }
            // Duplicate a line.
            3 => {
                let text = String::from_utf8_lossy(&d).into_owned();
                let lines: Vec<&str> = text.split_inclusive('\n').collect();
                if !lines.is_empty() {
                    let i = rng.random_range(0..lines.len());
                    let j = rng.random_range(0..=lines.len());
                    let mut v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
                    v.insert(j, lines[i].to_string());
                    d = v.concat().into_bytes();
                }
            }
            // Replace a number with an interesting token.
            4..=6 => {
                let text = String::from_utf8_lossy(&d).into_owned();
                let starts: Vec<usize> = text
                    .char_indices()
                    .filter(|(i, c)| c.is_ascii_digit() && (*i == 0 || !text.as_bytes()[i - 1].is_ascii_digit()))
                    .map(|(i, _)| i)
                    .collect();
                if !starts.is_empty() {
                    let s = starts[rng.random_range(0..starts.len())];
                    let e = text[s..]
                        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                        .map_or(text.len(), |k| s + k);
                    let tok = INTERESTING[rng.random_range(0..INTERESTING.len())];
                    d = format!("{}{tok}{}", &text[..s], &text[e..]).into_bytes();
                }
            }
            // Delete a field separator or a line break (shifts columns, joins rows).
            7 => {
                if let Some(i) = d
                    .iter()
                    .enumerate()
                    .skip(at)
                    .find(|(_, c)| matches!(c, b',' | b'\n' | b'='))
                {
                    let i = i.0;
                    d.remove(i);
                }
            }
            // Truncate.
            _ => d.truncate(at),
        }
    }
    d
}

/// Writes a mutated input into a folder and returns the arguments of `sim`.
type ArgsOf = Box<dyn Fn(&[u8], &Path) -> Vec<String> + Sync>;

/// One input kind: a corpus, how a mutated input becomes a command, and a case count.
struct Kind {
    name: &'static str,
    corpus: Vec<Vec<u8>>,
    cases: usize,
    allow_1: bool,
    /// Writes the input into `dir` and returns the arguments of `sim`.
    command: ArgsOf,
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

fn file(rel: &str) -> Vec<u8> {
    std::fs::read(root().join(rel)).unwrap()
}

fn head_lines(bytes: &[u8], n: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    text.split_inclusive('\n').take(n).collect::<String>().into_bytes()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Real shard files and a real golden of the tiny scenario, made once.
fn artefacts(dir: &Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let scen = write(dir, "base.toml", format!("{TINY}{SWEEP}{GUARD}").as_bytes());
    for k in 0..2 {
        let o = run_sim(
            &[
                "sweep",
                &scen,
                "--shard",
                &format!("{k}/2"),
                "--out",
                "sw",
                "--quiet",
                "--jobs",
                "1",
            ],
            dir,
        );
        assert_eq!(o.code, Some(0), "{}", o.stderr);
    }
    let o = run_sim(&["run", &scen, "--no-files", "--quiet", "--save-golden", "g"], dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    (
        std::fs::read(dir.join("sw/shards/shard-0-of-2.json")).unwrap(),
        std::fs::read(dir.join("sw/shards/shard-1-of-2.json")).unwrap(),
        std::fs::read(dir.join("g/tiny.json")).unwrap(),
    )
}

fn kinds(dir: &Path) -> Vec<Kind> {
    let scale: usize = std::env::var("FLEETSIM_FUZZ_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (shard0, shard1, golden) = artefacts(dir);
    let shard1_path = write(dir, "shard-1-of-2.json", &shard1);
    let golden_path = write(dir, "golden-a.json", &golden);
    let trace = |name: &'static str, corpus: Vec<Vec<u8>>, format: &'static str| Kind {
        name,
        corpus,
        cases: 120 * scale,
        allow_1: false,
        command: Box::new(move |b, d| {
            let f = write(d, "trace.in", b);
            let mut a = s(&["trace", "inspect", &f, "--format", format]);
            if b.len() % 2 == 0 {
                a.push("--skip-bad-rows".into());
            }
            a
        }),
    };
    let set_keys = [
        "workload.groups[0].sessions",
        "workload.groups[0].turns",
        "workload.groups[0].output_tokens",
        "workload.groups[0].input_tokens",
        "backends.kv_blocks",
        "backends.count",
        "router.policy",
        "router.engine_stats_interval_s",
        "expect.seeds",
        "seed",
        "limits.max_memory_gib",
    ];
    vec![
        Kind {
            name: "scenario TOML",
            corpus: vec![TINY.into(), file("scenarios/burst8.toml")],
            cases: 200 * scale,
            allow_1: false,
            command: Box::new(|b, d| {
                let mut t = b.to_vec();
                t.extend_from_slice(GUARD.as_bytes());
                let f = write(d, "s.toml", &t);
                s(&["run", &f, "--no-files", "--quiet"])
            }),
        },
        Kind {
            name: "--set",
            corpus: set_keys
                .iter()
                .flat_map(|k| [format!("{k}=1"), format!("{k}=2.5"), format!("{k}={{ dist = \"normal\", mean = 3, std = 1 }}")])
                .map(String::into_bytes)
                .collect(),
            cases: 200 * scale,
            allow_1: false,
            command: Box::new(|b, d| {
                let f = write(d, "s.toml", format!("{TINY}{EXPECT}{GUARD}").as_bytes());
                let set = String::from_utf8_lossy(b).into_owned();
                let mut a = s(&["run", &f, "--no-files", "--quiet", "--set"]);
                a.push(set);
                a
            }),
        },
        trace(
            "trace native",
            vec![head_lines(&file("traces/native_sample.csv"), 12), file("traces/peer_benchmark_4000.csv")[..400].to_vec()],
            "native",
        ),
        trace(
            "trace mooncake",
            vec![
                head_lines(&file("traces/mooncake_conversation_sample.jsonl"), 8),
                b"{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n\xc3\xbc\n".to_vec(),
                b"\xef\xbb\xbf{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n".to_vec(),
            ],
            "mooncake",
        ),
        trace(
            "trace azure",
            vec![head_lines(&file("traces/azure_conv_sample.csv"), 12)],
            "azure",
        ),
        trace(
            "trace burstgpt",
            vec![b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n46,GPT-4,100,20,120,API log\n".to_vec()],
            "burstgpt",
        ),
        Kind {
            name: "sweep spec",
            corpus: vec![SWEEP.into()],
            cases: 150 * scale,
            allow_1: false,
            command: Box::new(|b, d| {
                let mut t = TINY.as_bytes().to_vec();
                t.extend_from_slice(b);
                t.extend_from_slice(GUARD.as_bytes());
                let f = write(d, "s.toml", &t);
                s(&["sweep", &f, "--list", "--max-runs", "64"])
            }),
        },
        Kind {
            name: "[expect]",
            corpus: vec![EXPECT.into()],
            cases: 100 * scale,
            allow_1: true,
            command: Box::new(|b, d| {
                let mut t = TINY.as_bytes().to_vec();
                t.extend_from_slice(b);
                t.extend_from_slice(GUARD.as_bytes());
                let f = write(d, "s.toml", &t);
                let j = d.join("junit.xml").display().to_string();
                s(&["check", &f, "--junit", &j, "--quiet", "--jobs", "1"])
            }),
        },
        Kind {
            name: "shard files",
            corpus: vec![shard0],
            cases: 120 * scale,
            allow_1: false,
            command: Box::new(move |b, d| {
                let f = write(d, "shard-0-of-2.json", b);
                let out = d.join("merged").display().to_string();
                s(&["merge", &f, &shard1_path, "--out", &out, "--quiet", "--no-plots"])
            }),
        },
        Kind {
            name: "goldens",
            corpus: vec![golden],
            cases: 120 * scale,
            allow_1: true,
            command: Box::new(move |b, d| {
                let f = write(d, "golden-b.json", b);
                s(&["compare", &golden_path, &f])
            }),
        },
    ]
}

/// A Dynamo `request_end` event.
fn dynamo_event(session: &str, start_ms: &str, input: u64, total_ms: &str, hashes: &str, block: &str) -> String {
    format!(
        r#"{{"timestamp":1,"event":{{"schema":"dynamo.request.trace.v1","event_type":"request_end","agent_context":{{"session_id":"{session}"}},"request":{{"request_id":"x","model":"m","input_tokens":{input},"output_tokens":7,"request_received_ms":{start_ms},"ttft_ms":12.5,"total_time_ms":{total_ms},"replay":{{"trace_block_size":{block},"input_sequence_hashes":[{hashes}]}}}}}}}}"#
    )
}

const DYNAMO_TOOL: &str = r#"{"timestamp":2,"event":{"schema":"dynamo.request.trace.v1","event_type":"tool_end","agent_context":{"session_id":"a"},"tool":{"tool_call_id":"c","duration_ms":4.07}}}"#;

/// An OTLP/JSON export line of two spans.
fn otel_line(conv: &str, start: u64, input: &str) -> String {
    let span = |op: &str, s: u64, e: u64| {
        format!(
            r#"{{"traceId":"t{conv}","spanId":"s","startTimeUnixNano":"{s}","endTimeUnixNano":"{e}","attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"{op}"}}}},{{"key":"gen_ai.request.model","value":{{"stringValue":"m"}}}},{{"key":"gen_ai.usage.input_tokens","value":{{"intValue":{input}}}}},{{"key":"gen_ai.usage.output_tokens","value":{{"intValue":"9"}}}},{{"key":"gen_ai.conversation.id","value":{{"stringValue":"{conv}"}}}}]}}"#
        )
    };
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"agent"}}}}]}},"scopeSpans":[{{"scope":{{"name":"x"}},"spans":[{},{}]}}]}}]}}"#,
        span("chat", start, start + 4000),
        span("execute_tool", start + 4000, start + 6000)
    )
}

/// The column mapping the `sessions` corpus is read with.
const SESSION_COLUMNS: &str =
    "session=conv,start_unix_s=ts,latency_s=dur,input_tokens=p,output_tokens=o,block_hashes=h,model=m";

/// A two-candidate space for the tune kinds.
const SMALL_SPACE: &str = "[[policy]]\nkind = \"roundrobin\"\n\n[[policy]]\nkind = \"leastinflight\"\nband = [0, 1]\n";

/// A fleet described with profiles and memory inputs (the `profiles` kind).
const PROFILED: &str = r#"name = "profiled"
seed = 1

[[backends.groups]]
name = "h100"
count = 2
profile = "llama-3.1-8b/h100/tp1"
gpu_memory_utilization = 0.9
activation_memory_gib = 2.0
max_num_seqs = 4

[[backends.groups]]
name = "a100"
count = 1
profile = "qwen3-14b/a100/tp1"
kv_cache_dtype = "fp8"
block_size_tokens = 16
max_num_seqs = 4

[router.policy]
kind = "leastinflight"

[[workload.groups]]
name = "chat"
sessions = 3
arrival = { kind = "burst", at_s = 0, spread_s = 1.0 }
turns = 2
input_tokens = 200
output_tokens = 20
"#;

/// A flat copy of `from` (with one level of subfolders) at `to`, replacing it.
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A run folder, a tune folder and their files, made once.
struct Made {
    run: PathBuf,
    golden: String,
    tune: PathBuf,
    tune_args: Vec<String>,
}

fn made(dir: &Path) -> Made {
    let scen = write(dir, "run.toml", format!("{TINY}{GUARD}").as_bytes());
    let o = run_sim(&["run", &scen, "--out", "runA", "--quiet"], dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let space = write(dir, "small-space.toml", SMALL_SPACE.as_bytes());
    let tune_args: Vec<String> = s(&[
        "tune",
        &scen,
        "--space",
        &space,
        "--budget",
        "16",
        "--jobs",
        "1",
        "--quiet",
        "--no-plots",
        "--out",
    ]);
    let mut a: Vec<&str> = tune_args.iter().map(String::as_str).collect();
    a.push("tuneA");
    let o = run_sim(&a, dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    Made {
        run: dir.join("runA"),
        golden: dir.join("g/tiny.json").display().to_string(),
        tune: dir.join("tuneA"),
        tune_args,
    }
}

/// The input kinds of the agent-trace readers, `sim import`, `sim tune`, run folders and
/// profiles.
fn agent_kinds(dir: &Path, scale: usize) -> Vec<Kind> {
    let m = made(dir);
    let trace = |name: &'static str, corpus: Vec<Vec<u8>>, extra: &'static [&'static str]| Kind {
        name,
        corpus,
        cases: 100 * scale,
        allow_1: false,
        command: Box::new(move |b, d| {
            let f = write(d, "trace.in", b);
            let mut a = s(&["trace", "inspect", &f]);
            a.extend(extra.iter().map(|x| x.to_string()));
            if b.len() % 2 == 0 {
                a.push("--skip-bad-rows".into());
            }
            a
        }),
    };
    let import = |name: &'static str, corpus: Vec<Vec<u8>>, flag: &'static str| Kind {
        name,
        corpus,
        cases: 100 * scale,
        allow_1: false,
        command: Box::new(move |b, d| {
            let out = d.join("imported.toml").display().to_string();
            let mut a = s(&["import", "-o", &out]);
            if flag == "--helm" {
                a.extend([flag.to_string(), write(d, "values.yaml", b)]);
            } else {
                a.extend([flag.to_string(), String::from_utf8_lossy(b).into_owned()]);
            }
            if b.len() % 2 == 0 {
                a.push("--allow-unknown".into());
            }
            a
        }),
    };
    let run_dir = m.run.clone();
    let golden = m.golden.clone();
    let tune_dir = m.tune.clone();
    let tune_args = m.tune_args.clone();
    // The tune's own arguments without its budget: the flags corpus sets one.
    let flag_args: Vec<String> = {
        let at = m.tune_args.iter().position(|a| a == "--budget").unwrap();
        let mut v = m.tune_args.clone();
        v.drain(at..at + 2);
        v
    };
    let run_file = |name: &str| std::fs::read(m.run.join(name)).unwrap();
    vec![
        trace(
            "trace dynamo",
            vec![
                format!(
                    "{}\n{DYNAMO_TOOL}\n{}\n",
                    dynamo_event("a", "1000", 40, "250.5", "11, 12, 13", "16"),
                    dynamo_event("a:scout:0", "1100", 20, "100", "11", "16")
                )
                .into_bytes(),
                dynamo_event("b", "1700000000000", 4736, "30000", "1, 2, 3", "16").into_bytes(),
            ],
            &["--format", "dynamo"],
        ),
        trace(
            "trace otel",
            vec![
                format!("{}\n{}\n", otel_line("c1", 1000, "\"120\""), otel_line("c1", 9000, "200")).into_bytes(),
            ],
            &["--format", "otel"],
        ),
        trace(
            "trace sessions",
            vec![
                b"conv,ts,dur,p,o,h,m\na,100.5,2,40,5,1 2,x\nb,101,,30,5,,y\na,103,1.5,80,5,1 2 3,x\n".to_vec(),
                b"{\"conv\": \"a\", \"ts\": 100.5, \"dur\": 2, \"p\": 40, \"o\": 5, \"h\": [1, 2], \"m\": \"x\"}\n{\"conv\": 7, \"ts\": \"101\", \"p\": 30, \"o\": 5}\n".to_vec(),
            ],
            &["--columns", SESSION_COLUMNS],
        ),
        import(
            "import --router-args",
            vec![
                b"vllm-router --port 8001 --service-discovery static --static-backends http://backend-0:8000,http://backend-1:8000 --static-models meta-llama/Llama-3.1-8B-Instruct,meta-llama/Llama-3.1-8B-Instruct --routing-logic prefixaware --engine-stats-interval 10 --prefix-min-match-length 16384".to_vec(),
                b"--routing-logic load_balanced_kvaware --imbalanced-threshold 2.5 --kv-aware-threshold 100 --request-stats-window 30".to_vec(),
                b"--routing-logic session --session-key x-user --static-backends http://a:1,http://b:2 --static-models m,m".to_vec(),
            ],
            "--router-args",
        ),
        import(
            "import --vllm-args",
            vec![
                b"vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 4 --max-num-batched-tokens 8192 --enable-prefix-caching --gpu-memory-utilization 0.9 --max-model-len 8192 --block-size 16 --kv-cache-dtype fp8".to_vec(),
                b"vllm serve Qwen/Qwen3-14B --tensor-parallel-size 2 --num-gpu-blocks-override 1000 --max_num_seqs=8".to_vec(),
            ],
            "--vllm-args",
        ),
        import("import --helm", vec![file("docs/examples/helm-values.yaml")], "--helm"),
        Kind {
            name: "tune flags",
            corpus: [
                "--budget 16 --eta 3",
                "--seed 5 --confidence 0.9 --screen-seeds 2",
                "--objective ttft_s.p99=2,stranded_slot_s --pareto ttft_p99_s,stranded_slot_s",
                "--constraint mean(ttft_p99_s)<=2 --budget 30",
                "--exhaustive --budget 12 --top 3",
            ]
            .iter()
            .map(|x| x.as_bytes().to_vec())
            .collect(),
            cases: 100 * scale,
            allow_1: false,
            command: Box::new(move |b, d| {
                // A shard of 1 in 20,000 of each round: whatever the budget, a case runs a
                // few runs and returns (the other shards' files are "missing").
                let out = d.join("tf");
                let _ = std::fs::remove_dir_all(&out);
                let mut a = flag_args.clone();
                a.push(out.display().to_string());
                a.extend(s(&["--shard", "0/20000"]));
                a.extend(String::from_utf8_lossy(b).split_whitespace().map(str::to_string));
                a
            }),
        },
        Kind {
            name: "tune space",
            corpus: vec![SMALL_SPACE.into(), file("scenarios/tune/default-space.toml")],
            cases: 100 * scale,
            allow_1: false,
            command: Box::new(|b, d| {
                let scen = write(d, "s.toml", format!("{TINY}{GUARD}").as_bytes());
                let space = write(d, "space.toml", b);
                s(&["tune", &scen, "--space", &space, "--list"])
            }),
        },
        Kind {
            name: "tune round files",
            corpus: vec![
                std::fs::read(m.tune.join("rounds/round-0.json")).unwrap(),
                std::fs::read(m.tune.join("rounds/digests.json")).unwrap(),
            ],
            cases: 60 * scale,
            allow_1: false,
            command: Box::new(move |b, d| {
                let out = d.join("tr");
                copy_dir(&tune_dir, &out);
                let name = if b.starts_with(b"{\n  \"meta\"") || b.len() > 2000 {
                    "round-0.json"
                } else {
                    "digests.json"
                };
                std::fs::write(out.join("rounds").join(name), b).unwrap();
                let mut a = tune_args.clone();
                a.push(out.display().to_string());
                a
            }),
        },
        Kind {
            name: "run folders",
            corpus: vec![
                run_file("run.json"),
                run_file("summary.json"),
                run_file("requests.csv"),
                run_file("scenario.toml"),
            ],
            cases: 120 * scale,
            allow_1: true,
            command: Box::new(move |b, d| {
                let rf = d.join("rf");
                copy_dir(&run_dir, &rf);
                let text = String::from_utf8_lossy(b);
                let name = if text.starts_with("{\n  \"run_id\"") {
                    "run.json"
                } else if text.contains("\"idle_while_queued_s\"") {
                    "summary.json"
                } else if text.starts_with("request_id,") {
                    "requests.csv"
                } else {
                    "scenario.toml"
                };
                std::fs::write(rf.join(name), b).unwrap();
                let rfs = rf.display().to_string();
                match b.len() % 3 {
                    0 => s(&["compare", &golden, &rfs]),
                    1 => s(&["explain", &rfs, "--json"]),
                    _ => {
                        let out = d.join("replay.csv").display().to_string();
                        s(&["trace", "convert", &rfs, "--from-run", "--out", &out])
                    }
                }
            }),
        },
        Kind {
            name: "profiles",
            corpus: vec![PROFILED.into()],
            cases: 100 * scale,
            allow_1: false,
            command: Box::new(|b, d| {
                let mut t = b.to_vec();
                t.extend_from_slice(GUARD.as_bytes());
                let f = write(d, "p.toml", &t);
                s(&["run", &f, "--no-files", "--quiet"])
            }),
        },
    ]
}

/// Reproducers of the agent-trace, import, tune, run-folder and profile cases, each with its
/// exact exit code and a piece of its one-line message (exit 0 where the input is accepted
/// and correct).
fn reproducers_agents(dir: &Path) -> Vec<(Vec<String>, i32, &'static str)> {
    let tiny = write(dir, "repro.toml", format!("{TINY}{GUARD}").as_bytes());
    let d = dir.join("repro");
    std::fs::create_dir_all(&d).unwrap();
    let w = |name: &str, text: &str| write(&d, name, text.as_bytes());
    let wrap = w(
        "wrap.jsonl",
        &dynamo_event("a", "17000000000000", 5, "17000000000000", "", "16"),
    );
    let hashes: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let many = w(
        "many.jsonl",
        &dynamo_event("a", "1", 4736, "5", &hashes.join(","), "16"),
    );
    let huge_block = w("block.jsonl", &dynamo_event("a", "1", 4736, "5", "1", "4294967295"));
    let tool = w(
        "tool.jsonl",
        r#"{"event":{"schema":"dynamo.request.trace.v1","event_type":"tool_end","tool":[1]}}"#,
    );
    let not_otlp = w("not-otlp.json", "{\"timestamp\": 0, \"input_length\": 10}\n");
    let array_id = w("array-id.jsonl", "{\"conv\": [1, 2], \"ts\": 1, \"p\": 5, \"o\": 5}\n");
    let activation = w(
        "activation.toml",
        &format!(
            "{}{GUARD}",
            PROFILED.replace("activation_memory_gib = 2.0", "activation_memory_gib = 1.8e10")
        ),
    );
    // Run folders: a manifest of no files, one naming a file outside, a truncated
    // requests.csv, a missing manifest.
    let src = dir.join("runA");
    let folder = |name: &str, edit: &dyn Fn(&Path)| {
        let p = d.join(name);
        copy_dir(&src, &p);
        edit(&p);
        p.display().to_string()
    };
    let manifest = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p.join("run.json")).unwrap()).unwrap()
    };
    let empty = folder("empty", &|p| {
        let mut m = manifest(p);
        m["files"] = serde_json::json!({});
        std::fs::write(p.join("run.json"), m.to_string()).unwrap();
    });
    let outside = folder("outside", &|p| {
        let mut m = manifest(p);
        m["files"]["../repro.toml"] = "0".repeat(64).into();
        std::fs::write(p.join("run.json"), m.to_string()).unwrap();
    });
    let truncated = folder("truncated", &|p| {
        let r = std::fs::read_to_string(p.join("requests.csv")).unwrap();
        let cut: String = r.lines().take(3).map(|l| format!("{l}\n")).collect();
        std::fs::write(p.join("requests.csv"), cut).unwrap();
    });
    let unlisted = folder("unlisted", &|p| std::fs::remove_file(p.join("run.json")).unwrap());
    // A kill between the two renames of a commit (the previous run moved aside, under the
    // name older versions used), then two runs into the same --out.
    let killed = d.join("killed");
    copy_dir(&src, &d.join(".killed.old"));
    let killed = killed.display().to_string();
    let golden = dir.join("g/tiny.json").display().to_string();
    let replay = d.join("replay.csv").display().to_string();
    // A tune whose round 0 says complete over 2 of its rows (its digest updated to match).
    let partial = d.join("partial-tune");
    copy_dir(&dir.join("tuneA"), &partial);
    {
        use sha2::Digest;
        let r0 = partial.join("rounds/round-0.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&r0).unwrap()).unwrap();
        v["rows"].as_array_mut().unwrap().truncate(2);
        let bytes = serde_json::to_vec(&v).unwrap();
        std::fs::write(&r0, &bytes).unwrap();
        let hex: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dp = partial.join("rounds/digests.json");
        let mut dg: serde_json::Value = serde_json::from_slice(&std::fs::read(&dp).unwrap()).unwrap();
        dg["round-0.json"] = hex.into();
        std::fs::write(&dp, dg.to_string()).unwrap();
    }
    let space = dir.join("small-space.toml").display().to_string();
    let tune = |extra: &[&str], out: &Path| {
        let mut a = s(&[
            "tune",
            &tiny,
            "--space",
            &space,
            "--jobs",
            "1",
            "--quiet",
            "--no-plots",
            "--out",
        ]);
        a.push(out.display().to_string());
        if !extra.contains(&"--budget") {
            a.extend(s(&["--budget", "16"]));
        }
        a.extend(s(extra));
        a
    };
    let o = |v: &[&str]| s(v);
    let out_toml = d.join("imported.toml").display().to_string();
    let newline_path = format!("{}/no\nsuch.csv", d.display());
    vec![
        (
            o(&["trace", "inspect", "/dev/zero", "--format", "dynamo"]),
            2,
            "line 1 is longer than 64 MiB",
        ),
        (
            o(&["trace", "inspect", "/dev/zero", "--format", "otel"]),
            2,
            "line 1 is longer than 64 MiB",
        ),
        (
            o(&["trace", "inspect", "/dev/zero", "--columns", SESSION_COLUMNS]),
            2,
            "line 1 is longer than 64 MiB",
        ),
        (
            o(&["trace", "inspect", &wrap]),
            2,
            "column `event.request.total_time_ms`",
        ),
        (
            o(&["trace", "inspect", &many]),
            2,
            "100000 block hashes for a prompt of 4736 tokens",
        ),
        (
            o(&["trace", "inspect", &huge_block]),
            2,
            "column `event.request.replay.trace_block_size`",
        ),
        (
            o(&["trace", "inspect", &tool, "--format", "dynamo"]),
            2,
            "column `event.tool`",
        ),
        (
            o(&["trace", "inspect", &not_otlp, "--format", "otel"]),
            2,
            "missing field `resourceSpans`",
        ),
        (
            o(&["trace", "inspect", &array_id, "--columns", SESSION_COLUMNS]),
            2,
            "column `conv`: expected a string or a number",
        ),
        (o(&["trace", "inspect", &newline_path]), 2, "no\\nsuch.csv"),
        (
            o(&["run", &activation, "--no-files"]),
            2,
            "activation_memory_gib must be in [0, 80] GiB",
        ),
        (
            tune(&["--budget", "18446744073709551615"], &d.join("t1")),
            2,
            "is above the 1000000 runs",
        ),
        (
            tune(&["--budget", "1000000000000"], &d.join("t2")),
            2,
            "is above the 1000000 runs",
        ),
        (
            tune(&["--seed", "9223372036854775807"], &d.join("t3")),
            2,
            "past 2^63 - 1",
        ),
        (tune(&[], &partial), 2, "round-0.json: holds 2 of the"),
        (o(&["compare", &golden, &empty]), 2, "does not list summary.json"),
        (o(&["explain", &empty]), 2, "does not list summary.json"),
        (
            o(&["explain", &outside]),
            2,
            "files.`../repro.toml`: not a file of the folder",
        ),
        (o(&["compare", &golden, &outside]), 2, "not a file of the folder"),
        (
            o(&["trace", "convert", &truncated, "--from-run", "--out", &replay]),
            2,
            "requests.csv: not the file run",
        ),
        (
            o(&["trace", "convert", &unlisted, "--from-run", "--out", &replay]),
            2,
            "no run.json",
        ),
        (o(&["run", &tiny, "--out", &killed, "--quiet"]), 0, ""),
        (o(&["run", &tiny, "--out", &killed, "--quiet"]), 0, ""),
        (
            o(&[
                "import",
                "-o",
                &out_toml,
                "--router-args",
                "--routing-logic load_balanced_kvaware --imbalanced-threshold -5",
            ]),
            2,
            "--router-args: `--imbalanced-threshold`: must be a number >= 0",
        ),
        (
            o(&[
                "import",
                "-o",
                &out_toml,
                "--router-args",
                "--routing-logic load_balanced_kvaware --imbalanced-threshold nan",
            ]),
            2,
            "must be a number >= 0",
        ),
        (
            o(&[
                "import",
                "-o",
                &out_toml,
                "--router-args",
                "--routing-logic load_balanced_kvaware --imbalanced-threshold 0",
            ]),
            0,
            "",
        ),
        (
            o(&[
                "import",
                "-o",
                &out_toml,
                "--router-args",
                "--routing-logic session\n--session-key 'x\nnetwork = { dispatch_latency_s = 5.0 }'\n--engine-stats-interval 10",
            ]),
            0,
            "",
        ),
        (
            o(&[
                "import",
                "-o",
                &out_toml,
                "--vllm-args",
                "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 4 --gpu-memory-utilization 0.3",
            ]),
            2,
            "--gpu-memory-utilization 0.3 (--vllm-args): no KV cache fits",
        ),
    ]
}

/// The reproducers of past crashes, each with its exact expected exit code and a piece of its
/// one-line message.
fn reproducers(dir: &Path) -> Vec<(Vec<String>, i32, &'static str)> {
    let tiny = write(dir, "tiny.toml", format!("{TINY}{EXPECT}").as_bytes());
    let moon_u = write(
        dir,
        "u.jsonl",
        b"{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n\xc3\xbc\n",
    );
    let moon_bom = write(
        dir,
        "bom.jsonl",
        b"\xef\xbb\xbf{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n",
    );
    let cases_seed = write(
        dir,
        "cases.toml",
        format!("{TINY}\n[[sweep.axis]]\nname = \"c\"\ncases = [ {{ label = \"a\", set = {{ seed = 3 }} }}, {{ label = \"b\", set = {{}} }} ]\n").as_bytes(),
    );
    let endless = write(dir, "endless.jsonl", &vec![b' '; 17 << 20]);
    let short = write(dir, "short.csv", b"arrival_s,input_tokens,output_tokens\n0,5\n");
    let long = write(dir, "long.csv", b"arrival_s,input_tokens,output_tokens\n0,5,5,5\n");
    let dup = write(
        dir,
        "dup.csv",
        b"arrival_s,input_tokens,output_tokens,input_tokens\n0,5,5,6\n",
    );
    let misspelt = write(
        dir,
        "miss.csv",
        b"arrival_s,sesion_id,input_tokens,output_tokens\n0,a,5,5\n",
    );
    let empty_col = write(dir, "empty.csv", b"arrival_s,,input_tokens,output_tokens\n0,,5,5\n");
    let feb29 = write(
        dir,
        "feb29.csv",
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 10:00:00.0000000,10,5\n",
    );
    let repeat = write(
        dir,
        "repeat.toml",
        format!(
            "name = \"rep\"\n[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"{}\"\nrepeat = 1000000\n",
            root().join("traces/peer_benchmark_4000.csv").display()
        )
        .as_bytes(),
    );
    let not_utf8 = write(dir, "bad.toml", b"name = \"x\"\n\xff = 1\n");
    let mut golden_bad: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("g/tiny.json")).unwrap()).unwrap();
    golden_bad["metrics"]["idle_while_queued_s"] = "x".into();
    let golden_bad = write(dir, "golden-bad.json", golden_bad.to_string().as_bytes());
    let golden_ok = dir.join("g/tiny.json").display().to_string();
    let shard0 = std::fs::read_to_string(dir.join("sw/shards/shard-0-of-2.json")).unwrap();
    let cols_at = shard0.find("\"columns\": [").unwrap() + 12;
    let text_metric = {
        // The first value of the first row made text.
        let row = shard0.find("\n    [0, 0, ").unwrap();
        let vals = row + shard0[row..].find(", [").unwrap() + 3;
        let end = vals + shard0[vals..].find([',', ']']).unwrap();
        format!("{}\"fast\"{}", &shard0[..vals], &shard0[end..])
    };
    let shard_text = write(dir, "shard-text.json", text_metric.as_bytes());
    let renamed = format!(
        "{}\"renamed\"{}",
        &shard0[..cols_at],
        &shard0[cols_at + shard0[cols_at..].find(',').unwrap()..]
    );
    let shard_renamed = write(dir, "shard-renamed.json", renamed.as_bytes());
    let shard1 = dir.join("sw/shards/shard-1-of-2.json").display().to_string();
    let owned = |v: &[&str]| s(v);
    vec![
        (owned(&["trace", "inspect", &moon_u]), 2, "u.jsonl:2:"),
        (owned(&["trace", "inspect", &moon_u, "--skip-bad-rows"]), 0, ""),
        (owned(&["trace", "inspect", &moon_bom]), 0, ""),
        (owned(&["trace", "inspect", &moon_bom, "--skip-bad-rows"]), 0, ""),
        (owned(&["sweep", &cases_seed, "--list"]), 2, "not inside a case"),
        (
            owned(&["trace", "inspect", &endless, "--format", "mooncake"]),
            2,
            "longer than 16 MiB",
        ),
        (
            owned(&["trace", "inspect", &short]),
            2,
            "short.csv:2: the row has 2 fields",
        ),
        (
            owned(&["trace", "inspect", &long]),
            2,
            "long.csv:2: the row has 4 fields",
        ),
        (owned(&["trace", "inspect", &dup]), 2, "appears twice"),
        (owned(&["trace", "inspect", &misspelt]), 2, "did you mean `session_id`"),
        (owned(&["trace", "inspect", &empty_col]), 2, "header column 2 is empty"),
        (owned(&["trace", "inspect", &feb29]), 2, "column `TIMESTAMP`"),
        (
            owned(&[
                "run",
                &tiny,
                "--no-files",
                "--set",
                "workload.groups[0].sessions=2147483648",
            ]),
            2,
            "workload.groups[0].sessions",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--set", "backends.kv_blocks=1073741000"]),
            2,
            "backends.kv_blocks",
        ),
        (owned(&["run", &repeat, "--no-files"]), 2, "repeat 1000000"),
        (
            owned(&[
                "run",
                &tiny,
                "--no-files",
                "--set",
                "workload.groups[0].output_tokens=0",
            ]),
            2,
            "output_tokens must be at least 1",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--set", "workload.groups[0].turns=0"]),
            2,
            "turns must be at least 1",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--set", "workload.groups[0].turns=0.5"]),
            2,
            "a whole number >= 1",
        ),
        (
            owned(&[
                "run",
                &tiny,
                "--no-files",
                "--set",
                "workload.groups[0].input_tokens={ dist = \"normal\", mean = -5, std = 1 }",
            ]),
            2,
            "normal mean must be >= 0",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--set", "expect.seeds=0"]),
            2,
            "expect.seeds",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--quiet", "--set", "expect.seeds=2"]),
            0,
            "",
        ),
        (
            owned(&["run", &tiny, "--no-files", "--set", "sweep.seeds=0"]),
            2,
            "sweep.seeds",
        ),
        (owned(&["run", &tiny, "--set", "nokey"]), 2, "expected KEY=VALUE"),
        (
            owned(&["sweep", &tiny, "-P", "seed", "1", "2", "-D"]),
            2,
            "--parameter-step",
        ),
        (owned(&["run", &not_utf8]), 2, "bad.toml:2:1:"),
        (
            owned(&["compare", &golden_ok, &golden_bad]),
            2,
            "metrics.idle_while_queued_s: expected a number",
        ),
        (
            owned(&["merge", &shard_text, &shard1, "--out", "m1", "--no-plots"]),
            2,
            "expected a number or null",
        ),
        (
            owned(&["merge", &shard_renamed, &shard1, "--out", "m2", "--no-plots"]),
            2,
            "renamed",
        ),
    ]
}

#[test]
fn mutation_fuzz_every_input_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let started = Instant::now();
    let mut failures = Vec::new();
    // Makes the shard, golden, run and tune artefacts the reproducers start from.
    let scale: usize = std::env::var("FLEETSIM_FUZZ_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut kinds = kinds(dir);
    kinds.extend(agent_kinds(dir, scale));
    let mut repro = reproducers(dir);
    repro.extend(reproducers_agents(dir));
    for (args, want, piece) in repro {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_sim(&argv, dir);
        let one_line = want != 2 || error_lines(&o.stderr);
        if o.code != Some(want) || !o.stderr.contains(piece) || !one_line {
            failures.push(format!(
                "reproducer {args:?}: want exit {want} and `{piece}`, got {o:?}"
            ));
        }
    }
    let mut counts = Vec::new();
    for (ki, k) in kinds.iter().enumerate() {
        let mut rng = Pcg64::seed_from_u64(SEED ^ (ki as u64) << 32);
        let case_dir = dir.join(format!("k{ki}"));
        std::fs::create_dir_all(&case_dir).unwrap();
        let (mut ok, mut bad) = (0usize, 0usize);
        for c in 0..k.cases {
            let base = &k.corpus[c % k.corpus.len()];
            // The corpus itself first, then mutations.
            let input = if c < k.corpus.len() {
                base.clone()
            } else {
                mutate(base, &mut rng)
            };
            let args = (k.command)(&input, &case_dir);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run_sim(&argv, &case_dir);
            match violation(&o, k.allow_1) {
                None if o.code == Some(0) => ok += 1,
                None => bad += 1,
                Some(why) => {
                    let saved = dir.join(format!("failure-{ki}-{c}.in"));
                    std::fs::write(&saved, &input).unwrap();
                    failures.push(format!(
                        "{} case {c}: {why}; args {args:?}; stderr {:?}; input {:?}",
                        k.name,
                        o.stderr,
                        String::from_utf8_lossy(&input).chars().take(300).collect::<String>()
                    ));
                }
            }
        }
        counts.push(format!("{}: {} inputs ({ok} accepted, {bad} refused)", k.name, k.cases));
    }
    println!(
        "fuzz counts ({:.0} s):\n  {}",
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
