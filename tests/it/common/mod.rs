//! Helpers shared by the integration tests' modules.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};

use fleetsim::scenario::{Scenario, load, load_str};
use fleetsim::sim::{RunOptions, RunResult, run};
use fleetsim::workload::Workload;

/// Says why tests skip: on stderr (shown with `--nocapture`) and as a record under the
/// target's temporary folder, which the last test binary of the run
/// (`crates/fleetsim-io/tests/skipped.rs`) lists after every other test, so a run that
/// passed while skipping says so. `tests` names the tests (`real_router::*`).
pub fn skip(tests: &str, why: &str) {
    eprintln!("skipped: {why}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped");
    let file: String = tests
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' })
        .collect();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(file), format!("{tests}: {why}\n"));
}

/// Path of a shipped scenario.
pub fn scenario_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

fn owned(sets: &[(&str, &str)]) -> Vec<(String, String)> {
    sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Loads a shipped scenario with overrides.
pub fn shipped(name: &str, sets: &[(&str, &str)]) -> (Scenario, Workload) {
    let (s, w, _) = load(&scenario_path(name), &owned(sets)).unwrap_or_else(|e| panic!("{e}"));
    (s, w)
}

/// Loads a scenario from text with overrides.
pub fn inline(text: &str, sets: &[(&str, &str)]) -> (Scenario, Workload) {
    let (s, w, _) = load_str(text, "inline.toml", "inline", &owned(sets)).unwrap_or_else(|e| panic!("{e}"));
    (s, w)
}

/// Runs with the given options.
pub fn run_with(s: &Scenario, w: &Workload, opts: RunOptions) -> RunResult {
    run(s.sim.clone(), w, opts).unwrap_or_else(|e| panic!("{e}")).0
}

/// Runs with all outputs recorded.
pub fn run_full(s: &Scenario, w: &Workload) -> RunResult {
    run_with(s, w, RunOptions::default())
}

/// The property tests' configuration: `cases` cases; the seeds of past failures are read
/// from (and a new failure's seed is saved to) `NAME.proptest-regressions` beside the
/// test's file `NAME.rs`. (proptest's default would look for
/// `tests/proptest-regressions/NAME.txt` instead, since this binary has a `main.rs`.)
pub fn proptest_config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    }
}

/// Asserts that the property tests of `source` (the `file!()` of a test module) replay every
/// seed saved beside it: proptest, configured by [`proptest_config`], reads as many seeds as
/// the file holds `cc` lines.
pub fn assert_saved_seeds_are_read(source: &'static str) {
    let saved = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(source)
        .with_extension("proptest-regressions");
    let text = std::fs::read_to_string(&saved).unwrap_or_else(|e| panic!("{}: {e}", saved.display()));
    let lines = text.lines().filter(|l| l.starts_with("cc ")).count();
    let persistence = proptest_config(1).failure_persistence.expect("a failure persistence");
    let read = persistence.load_persisted_failures2(Some(source)).len();
    assert!(lines > 0, "{} holds no seeds", saved.display());
    assert_eq!(
        read,
        lines,
        "proptest read {read} of the {lines} seeds in {}",
        saved.display()
    );
}

/// Per backend, how many sessions of `group` (key prefix) had their latest turn there.
pub fn final_placement(res: &RunResult, group: &str, backends: usize) -> Vec<u32> {
    let mut last = vec![None; res.session_keys.len()];
    for r in &res.requests {
        last[r.session.index()] = Some(r.backend);
    }
    let mut out = vec![0; backends];
    for (i, b) in last.iter().enumerate() {
        if res.session_keys[i].starts_with(&format!("{group}-"))
            && let Some(b) = b
        {
            out[b.index()] += 1;
        }
    }
    out
}

/// `sim` from the build under test, run in the crate root (so `scenarios/...` resolves).
pub fn sim() -> Command {
    let mut c = Command::cargo_bin("sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// `sim run SCENARIO --out OUT`, which must succeed.
pub fn run_ok(scenario: &Path, out: &Path) -> assert_cmd::assert::Assert {
    sim().arg("run").arg(scenario).arg("--out").arg(out).assert().success()
}

/// A run folder's `summary.json`.
pub fn summary_of(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// A CSV table as its header and rows of fields.
pub fn csv_table(p: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(p).unwrap();
    let head = r.headers().unwrap().iter().map(str::to_string).collect();
    let rows = r
        .records()
        .map(|x| x.unwrap().iter().map(str::to_string).collect())
        .collect();
    (head, rows)
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The routing policies the property tests draw from (`[router.policy]` bodies).
pub const POLICIES: [&str; 5] = [
    "kind = \"roundrobin\"",
    "kind = \"session\"",
    "kind = \"prefixaware\"\nprefix_min_match_length = 256",
    "kind = \"prefixaware\"\nprefix_min_match_length = 256\nfallback = \"leastinflight\"\nband = 0",
    "kind = \"leastinflight\"",
];
/// README.md, then every Markdown file under docs/ in path order, repository-relative: the
/// documents that the `links` and `readme` tests read.
pub fn documents(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = rel.join(p.file_name().unwrap());
            if p.is_dir() {
                walk(root, &name, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(name);
            }
        }
    }
    let mut out = vec![PathBuf::from("README.md")];
    walk(root, Path::new("docs"), &mut out);
    out
}

/// A small random fleet for the property tests: one group of multi-turn sessions opened in a
/// burst, under `POLICIES[policy]`.
pub struct RandomFleet {
    pub backends: u32,
    pub seqs: u32,
    pub budget: u32,
    pub kv_blocks: u32,
    pub policy: usize,
    pub interval_s: f64,
    pub sessions: u32,
    pub turns: u32,
    pub sys: u32,
    pub input: u32,
    pub output: u32,
    pub think_s: f64,
    pub burst_at_s: f64,
    pub spread_s: f64,
}

impl RandomFleet {
    /// The scenario text, with `top` (top-level keys such as `fleet_events`) first.
    pub fn toml(&self, top: &str) -> String {
        format!(
            r#"
{top}
[backends]
count = {backends}
max_num_seqs = {seqs}
max_num_batched_tokens = {budget}
kv_blocks = {kv_blocks}
[router]
engine_stats_interval_s = {interval_s}
[router.policy]
{policy}
[[workload.groups]]
name = "g"
sessions = {sessions}
arrival = {{ kind = "burst", at_s = {at_s}, spread_s = {spread_s} }}
turns = {{ dist = "uniform", min = 1, max = {turns_max} }}
system_prompt_tokens = {sys}
first_input_tokens = {{ dist = "uniform", min = 1, max = {input1} }}
input_tokens = {{ dist = "uniform", min = 0, max = {input} }}
output_tokens = {{ dist = "uniform", min = 1, max = {output1} }}
think_time_s = {{ dist = "exponential", mean = {think_s} }}
max_context_tokens = {ctx}
"#,
            backends = self.backends,
            seqs = self.seqs,
            budget = self.budget,
            kv_blocks = self.kv_blocks,
            interval_s = self.interval_s,
            policy = POLICIES[self.policy],
            sessions = self.sessions,
            at_s = self.burst_at_s,
            spread_s = self.spread_s,
            turns_max = self.turns + 1,
            sys = self.sys,
            input1 = self.input + 1,
            input = self.input,
            output1 = self.output + 1,
            think_s = self.think_s,
            ctx = self.kv_blocks * 16,
        )
    }
}
