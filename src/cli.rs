//! Command-line interface (`sim run`, `sim bench`).
//!
//! Exit codes: 0 success; 1 a check failed (an invariant under `--invariants`); 2 bad input
//! or any other error (one line on stderr naming the file, key path and line).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::export::{Perf, write_all, write_json};
use crate::report::render;
use crate::scenario::{Scenario, load, parse_set};
use crate::sim::{RunOptions, SimError, run};
use crate::workload::Workload;

/// fleetsim: deterministic simulator of vLLM fleets behind a router with a stale view.
#[derive(Parser, Debug)]
#[command(name = "sim", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one scenario and write results/<scenario>/{summary.json, requests.csv, ...}.
    ///
    /// Example: sim run scenarios/burst8.toml --set router.policy.fallback=leastinflight
    Run(RunArgs),
    /// Measure simulator speed (events/s, requests/s) on a scenario; writes nothing unless
    /// --json is given.
    ///
    /// Example: sim bench scenarios/bench-10k.toml --runs 5
    Bench(BenchArgs),
}

#[derive(Args, Debug)]
struct ScenarioArgs {
    /// Scenario file (TOML).
    scenario: PathBuf,
    /// Override the scenario's master seed (0 to 2^63 - 1, the range of a TOML integer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    seed: Option<u64>,
    /// Override any scenario key: --set router.engine_stats_interval_s=10 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_set)]
    sets: Vec<(String, String)>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Results folder (default: results/<scenario name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not write result files, only print the summary.
    #[arg(long)]
    no_files: bool,
    /// Check every invariant after every event (slow); exit 1 on a violation.
    #[arg(long)]
    invariants: bool,
    /// Print nothing on success (files are still written).
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct BenchArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Also write the measurements as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Parses arguments and runs; never panics on user input.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(a) => cmd_run(a),
        Command::Bench(a) => cmd_bench(a),
    }
}

fn load_scenario(a: &ScenarioArgs) -> Result<(Scenario, Workload, String)> {
    let mut sets = a.sets.clone();
    if let Some(seed) = a.seed {
        sets.push(("seed".into(), seed.to_string()));
    }
    Ok(load(&a.scenario, &sets)?)
}

fn perf_of(wall: std::time::Duration, events: u64, requests: u64) -> Perf {
    let wall_s = wall.as_secs_f64().max(1e-9);
    Perf {
        wall_s,
        events,
        events_per_s: events as f64 / wall_s,
        requests_per_s: requests as f64 / wall_s,
    }
}

fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    let opts = RunOptions {
        record_series: !a.no_files,
        record_decisions: !a.no_files,
        check_invariants: a.invariants,
    };
    let seed = scenario.sim.seed;
    let file = a.scenario.scenario.display().to_string();
    let (res, wall) = match run(scenario.sim.clone(), &workload, opts) {
        Ok(r) => r,
        Err(e @ SimError::Invariant(..)) => {
            eprintln!("error: {file}: {e}\nreproduce with: sim run {file} --seed {seed} --invariants");
            return Ok(ExitCode::from(1));
        }
        Err(e) => anyhow::bail!("{file}: {e}"),
    };
    let perf = perf_of(wall, res.summary.events, res.summary.requests.arrived);
    if !a.quiet {
        print!("{}", render(&res.summary, Some(&perf)));
    }
    if !a.no_files {
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| Path::new("results").join(&scenario.sim.name));
        let written = write_all(&dir, &res, &effective, &perf)?;
        if !a.quiet {
            let names: Vec<String> = written
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            println!("wrote {}/{{{}}}", dir.display(), names.join(","));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct BenchReport {
    scenario: String,
    runs: u32,
    events: u64,
    requests: u64,
    backends: u64,
    sessions: u64,
    median_wall_s: f64,
    events_per_s: f64,
    requests_per_s: f64,
    wall_s: Vec<f64>,
}

fn cmd_bench(a: BenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.runs >= 1, "--runs must be at least 1");
    let (scenario, workload, _) = load_scenario(&a.scenario)?;
    let opts = RunOptions {
        record_series: false,
        record_decisions: false,
        check_invariants: false,
    };
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..a.runs {
        let (res, wall) =
            run(scenario.sim.clone(), &workload, opts).with_context(|| format!("{}", a.scenario.scenario.display()))?;
        walls.push(wall.as_secs_f64());
        last = Some(res.summary);
    }
    let s = last.expect("at least one run");
    let mut sorted = walls.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let rep = BenchReport {
        scenario: s.scenario.clone(),
        runs: a.runs,
        events: s.events,
        requests: s.requests.arrived,
        backends: s.backend_count,
        sessions: s.sessions,
        median_wall_s: median,
        events_per_s: s.events as f64 / median,
        requests_per_s: s.requests.arrived as f64 / median,
        wall_s: walls,
    };
    println!(
        "{}: {} backends, {} sessions, {} requests, {} events; median of {} runs {:.3} s wall -> {:.2} M events/s, {:.0} requests/s",
        rep.scenario,
        rep.backends,
        rep.sessions,
        rep.requests,
        rep.events,
        rep.runs,
        rep.median_wall_s,
        rep.events_per_s / 1e6,
        rep.requests_per_s
    );
    if let Some(p) = &a.json {
        write_json(p, &rep).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
