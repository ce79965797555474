//! A bounded, seeded mutation fuzz of every input kind: scenario TOML, `--set`, each trace
//! format, the sweep spec, `[expect]`, shard files and goldens. Each mutated input is given
//! to the real `sim` binary under an address-space limit; the test asserts that it exits 0
//! (or 1 where the command's contract says "a check failed": `check`, `compare`) or 2 with
//! exactly one line on stderr, never a panic, an abort, a signal or a hang.
//!
//! The seed corpus holds the reproducers of past crashes, each with its exact expected outcome.
//! `FLEETSIM_FUZZ_SCALE=10 cargo test --release --test it fuzz:: -- --nocapture` fuzzes
//! ten times longer; the counts per kind are printed with `--nocapture`.

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

fn sim() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sim"))
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
struct Outcome {
    code: Option<i32>,
    stderr: String,
    timed_out: bool,
}

fn run_sim(args: &[&str], cwd: &Path) -> Outcome {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(sim());
    cmd.args(args)
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
fn violation(o: &Outcome, allow_1: bool) -> Option<String> {
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
        Some(2) => {
            let lines = o.stderr.lines().count();
            (lines != 1).then(|| format!("exit 2 with {lines} lines on stderr"))
        }
        Some(c) => Some(format!("exit {c}")),
    }
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
fn mutate(data: &[u8], rng: &mut Pcg64) -> Vec<u8> {
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
    // Makes the shard and golden artefacts the reproducers start from.
    let kinds = kinds(dir);
    for (args, want, piece) in reproducers(dir) {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_sim(&argv, dir);
        let one_line = want != 2 || o.stderr.lines().count() == 1;
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
